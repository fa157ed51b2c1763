// Starting an instance: a dialog with a JSON variables editor, then the new instance's page.
import { call } from './rpc.js';
import { h } from './dom.js';
import { announce, dialog, jsonEditor } from './widgets.js';

export async function startInstance(definition) {
  const editor = jsonEditor('Variables', {}, 8);
  const started = await dialog(`Start ${definition.code} v${definition.version}`,
    h('div', {}, h('p', {}, 'The new instance starts with these variables and runs in the background.'), editor.element),
    { submit: 'Start instance', onSubmit: () => call('process.start', { definition_id: definition.definition_id, variables: editor.value() }) });
  if (!started) return;
  announce(`Instance ${started.instance_id} of ${definition.code} v${definition.version} started.`);
  location.hash = `#/instances/${started.instance_id}`;
}
