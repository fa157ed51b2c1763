// Definition names for a page of instances or tasks, whatever the key may read: definition.list
// (admin), else process.status of one instance per definition (its code and version), so that a
// key without admin sees "order v3" where it saw "definition 17".
import { batch, call } from './rpc.js';
import { can } from './session.js';

export async function definitionNames(items) {
  const names = new Map();
  if (can('definition.list')) {
    for (const d of (await call('definition.list', { per_page: 100 })).items) names.set(d.definition_id, `${d.code} v${d.version}`);
  }
  const missing = new Map();
  for (const item of items) {
    if (!names.has(item.definition_id) && !missing.has(item.definition_id)) missing.set(item.definition_id, item.instance_id);
  }
  if (missing.size && can('process.status')) {
    const ids = [...missing.keys()];
    const answers = await batch(ids.map((definitionId) => ['process.status', { instance_id: missing.get(definitionId) }]));
    answers.forEach((answer, i) => {
      if (answer.result) names.set(ids[i], `${answer.result.code} v${answer.result.version}`);
    });
  }
  return names;
}

export function definitionName(names, definitionId) {
  return names.get(definitionId) || `definition ${definitionId}`;
}
