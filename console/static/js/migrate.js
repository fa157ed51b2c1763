// Migrating the running instances of one version to another: the dry run's answer first (what
// would move, what would be refused and why, what changed between the versions), then the move,
// 100 instances a call (process.migrate's limit), each instance all or nothing on the server.
import { batch, call } from './rpc.js';
import { h, plural, replace } from './dom.js';
import { announce, dialog, reloadView, table } from './widgets.js';

const PAGE = 100;  // process.list's and process.migrate's limit

async function runningIds(definitionId) {
  const ids = [];
  for (let page = 1; ; page += 1) {
    const answer = await call('process.list', { definition_id: definitionId, status: 'running', page, per_page: PAGE });
    ids.push(...answer.items.map((item) => item.instance_id));
    if (page * PAGE >= answer.total || answer.items.length === 0) return ids;
  }
}

function chunks(ids) {
  const parts = [];
  for (let i = 0; i < ids.length; i += PAGE) parts.push(ids.slice(i, i + PAGE));
  return parts;
}

// The dry run of every page, in one batch of calls (at most 100 calls of 100 instances each).
async function dryRun(ids, target) {
  const answers = await batch(chunks(ids).map((part) => ['process.migrate', { instance_ids: part, to_definition_id: target.definition_id, dry_run: true }]));
  const results = [];
  for (const answer of answers) {
    if (answer.error) throw answer.error;
    results.push(...answer.result.results);
  }
  return results;
}

function changes(diff) {
  const line = (label, ids) => (ids.length ? h('li', {}, `${label}: `, ids.map((id, i) => [i ? ', ' : '', h('code', {}, id)])) : null);
  const items = [line('Added', diff.added), line('Removed', diff.removed), line('Changed', diff.changed)].filter(Boolean);
  return items.length ? h('ul', { class: 'migration-diff' }, items) : h('p', { class: 'muted' }, 'The two versions have the same elements.');
}

// One page: an instance that ended since the dry run makes the server refuse the whole call
// (conflict, naming it); it is left out and the rest sent again.
async function migratePage(ids, target) {
  let left = ids;
  while (left.length) {
    try {
      const answer = await call('process.migrate', { instance_ids: left, to_definition_id: target.definition_id });
      return { results: answer.results, ended: ids.length - left.length };
    } catch (err) {
      const gone = (err.reason === 'conflict' && err.data.instance_ids) || [];
      if (!gone.length) throw err;
      left = left.filter((id) => !gone.includes(id));
    }
  }
  return { results: [], ended: ids.length };
}

export async function migrateInstances(source, target, button) {
  const label = button.textContent;
  button.disabled = true;
  button.textContent = 'Checking…';
  let ids, results, diff;
  try {
    ids = await runningIds(source.definition_id);
    [results, diff] = await Promise.all([
      ids.length ? dryRun(ids, target) : [],
      call('definition.diff', { from_definition_id: source.definition_id, to_definition_id: target.definition_id })]);
  } catch (err) {
    announce(err.message || String(err), 'error');
    return;
  } finally {
    button.disabled = false;
    button.textContent = label;
  }
  const movable = results.filter((r) => r.status === 'would_migrate').map((r) => r.instance_id);
  const refused = results.filter((r) => r.status === 'refused');
  const progress = h('p', { class: 'migration-progress', 'aria-live': 'polite' });
  const body = h('div', { class: 'migration' },
    h('p', {}, `${plural(ids.length, 'running instance')} of ${source.code} v${source.version}. The dry run: `,
      h('strong', {}, `${movable.length} would move`), ` to v${target.version}, `,
      h('strong', {}, `${refused.length} would be refused`), '.'),
    h('h3', {}, `From v${source.version} to v${target.version}`), changes(diff),
    refused.length ? [h('h3', {}, 'Would be refused'),
      table('Instances the migration would refuse', ['Instance', 'Why'],
        refused.slice(0, 200).map((r) => [h('a', { href: `#/instances/${r.instance_id}` }, `#${r.instance_id}`), r.reason])),
      refused.length > 200 ? h('p', { class: 'muted' }, `… and ${refused.length - 200} more.`) : null,
      h('p', { class: 'hint' }, 'A refused instance stays on its version and goes on there. Keep the elements it waits at (same id, same kind) in the new version, or migrate it once it has moved past them.')] : null,
    movable.length ? h('p', { class: 'hint' }, `Each instance moves on its own, all or nothing, ${PAGE} per call; it keeps its variables, tasks, conversation, timers and subscriptions, and goes on in v${target.version}.`) : null,
    progress);
  const title = `Migrate instances to version ${target.version}`;
  if (!movable.length) {
    await dialog(title, body, { submit: 'Close', cancel: null });
    return;
  }
  const done = await dialog(title, body, {
    submit: `Migrate ${plural(movable.length, 'instance')} to v${target.version}`,
    onSubmit: async () => {
      let migrated = 0;
      let notMoved = 0;
      let ended = 0;
      for (const part of chunks(movable)) {
        const answer = await migratePage(part, target);
        ended += answer.ended;
        for (const r of answer.results) {
          if (r.status === 'migrated') migrated += 1;
          else notMoved += 1;
        }
        replace(progress, `Migrated ${migrated} of ${movable.length}…`);
      }
      return { migrated, notMoved, ended };
    },
  });
  if (!done) return;
  announce(`Migrated ${plural(done.migrated, 'instance')} to ${target.code} v${target.version}`
    + (done.notMoved ? `; ${done.notMoved} refused (they changed since the dry run)` : '')
    + (done.ended ? `; ${done.ended} ended meanwhile` : '') + '.');
  reloadView();
}
