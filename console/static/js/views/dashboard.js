// Dashboard: instances by status (overall and per definition), failed instances, open tasks,
// active conversations, dead deliveries; each a link into its list. One batch of calls.
import { batch } from '../rpc.js';
import { append, h, replace, when } from '../dom.js';
import { can } from '../session.js';
import { describeError, statusBadge, table } from '../widgets.js';

const STATUSES = ['running', 'failed', 'completed', 'cancelled'];

export async function render(main) {
  const calls = [];
  const slot = (method, params) => (can(method) ? calls.push([method, params]) - 1 : -1);
  const totals = STATUSES.map((status) => slot('process.list', { status, per_page: 1 }));
  const failed = slot('process.list', { status: 'failed', per_page: 5 });
  const tasks = slot('task.list', { status: 'in_progress', per_page: 5 });
  const chats = slot('conversation.list', { per_page: 5 });
  // The batch runs in order: failing and queued are counted before dead, so a delivery that gives
  // up between the calls is counted as failing and as dead, never as "every message went out".
  const failing = slot('delivery.list', { failing: true, per_page: 1 });
  const queued = slot('delivery.list', { status: 'queued', per_page: 1 });
  const dead = slot('delivery.list', { status: 'dead', per_page: 1 });
  const definitions = slot('definition.list', { per_page: 10 });
  const answers = await batch(calls);
  const get = (i) => (i < 0 ? { missing: true } : answers[i]);

  const cards = h('div', { class: 'cards' });
  cards.append(card('Instances', get(totals[0]), () => h('ul', { class: 'counts' },
    STATUSES.map((status, i) => {
      const answer = get(totals[i]);
      return h('li', {}, h('a', { href: `#/instances?status=${status}` }, statusBadge(status), ' ', h('strong', {}, answer.result ? answer.result.total : '?')));
    }))));
  cards.append(card('Open tasks', get(tasks), (r) => [
    h('p', { class: 'big' }, h('a', { href: '#/tasks' }, String(r.total))),
    h('ul', { class: 'plain' }, r.items.map((t) => h('li', {}, h('a', { href: `#/tasks/${t.task_id}` }, t.name || t.element_id), ` · instance ${t.instance_id}`)))]));
  cards.append(card('Active conversations', get(chats), (r) => [
    h('p', { class: 'big' }, h('a', { href: '#/conversations' }, String(r.total))),
    h('ul', { class: 'plain' }, r.items.map((c) => h('li', {}, h('a', { href: `#/conversations/${c.binding_id}` }, c.external_username || c.chat_id), ` · ${c.channel}`)))]));
  cards.append(card('Dead deliveries', get(dead), (r) => {
    const retrying = (get(failing).result || { total: 0 }).total;
    const waiting = (get(queued).result || { total: 0 }).total - retrying;
    let said = 'Every message went out.';
    if (r.total) said = 'Messages Baton gave up sending; retry them from Deliveries.';
    else if (retrying) said = 'None given up yet.';
    else if (waiting > 0) said = `${waiting} on their way.`;
    return [
      h('p', { class: `big ${r.total ? 'bad' : ''}` }, h('a', { href: '#/deliveries?status=dead' }, String(r.total))),
      retrying ? h('p', { class: 'failing' }, h('a', { href: '#/deliveries?status=failing' }, `${retrying} failing`), ', retried on a schedule.') : null,
      h('p', { class: 'muted' }, said)];
  }));

  const known = new Map(((get(definitions).result || {}).items || []).map((d) => [d.definition_id, `${d.code} v${d.version}`]));
  const failedSection = section('Failed instances', get(failed), (r) => table('Failed instances',
    ['Instance', 'Definition', 'Failed at'],
    r.items.map((i) => [h('a', { href: `#/instances/${i.instance_id}` }, `#${i.instance_id}`), known.get(i.definition_id) || `definition ${i.definition_id}`, when(i.completed_at)]),
    'No failed instance. '));
  const perDefinition = h('section', { class: 'panel' }, h('h2', {}, 'Instances by definition'));
  const defs = get(definitions);
  if (defs.result) {
    perDefinition.append(await definitionCounts(defs.result.items));
  } else {
    perDefinition.append(h('p', { class: 'muted' }, defs.missing ? 'Needs the permission admin (definition.list).' : describeError(defs.error)));
  }
  replace(main, h('h1', {}, 'Dashboard'), cards, h('div', { class: 'two-columns' }, perDefinition, failedSection));
}

function card(title, answer, body) {
  const box = h('section', { class: 'card stat' }, h('h2', {}, title));
  if (answer.missing) box.append(h('p', { class: 'muted' }, 'Your API key may not see this.'));
  else if (answer.error) box.append(h('p', { class: 'muted' }, describeError(answer.error)));
  else append(box, [body(answer.result)]);  // skips the parts a body leaves out (null)
  return box;
}

function section(title, answer, body) {
  const box = h('section', { class: 'panel' }, h('h2', {}, title));
  if (answer.missing) box.append(h('p', { class: 'muted' }, 'Your API key may not see this.'));
  else if (answer.error) box.append(h('p', { class: 'muted' }, describeError(answer.error)));
  else box.append(body(answer.result));
  return box;
}

async function definitionCounts(definitions) {
  if (definitions.length === 0) return h('p', { class: 'empty' }, 'No definition deployed yet. ', h('a', { href: '#/definitions' }, 'Upload one'));
  const calls = [];
  for (const d of definitions) for (const status of STATUSES) calls.push(['process.list', { definition_id: d.definition_id, status, per_page: 1 }]);
  const answers = await batch(calls);
  return table('Instances by status for the newest definitions', ['Definition', ...STATUSES.map((s) => statusBadge(s))],
    definitions.map((d, i) => [
      h('a', { href: `#/definitions/${d.definition_id}` }, `${d.code} v${d.version}`),
      ...STATUSES.map((status, j) => {
        const a = answers[i * STATUSES.length + j];
        const n = a.result ? a.result.total : '?';
        return n === 0 ? h('span', { class: 'muted' }, '0') : h('a', { href: `#/instances?definition_id=${d.definition_id}&status=${status}` }, String(n));
      })]));
}
