// Instances: filter by status and definition (or by the element they wait or failed at), paged;
// bulk retry (with variables; an instance that fails again at once is reported as such) and bulk
// cancel of a selection.
import { batch, call } from '../rpc.js';
import { h, plural, replace, when } from '../dom.js';
import { can } from '../session.js';
import { definitionNames } from '../names.js';
import { announce, confirmAction, dialog, field, goTo, jsonEditor, pager, reloadView, statusBadge, table } from '../widgets.js';

const STATUSES = ['running', 'failed', 'completed', 'cancelled'];

export async function render(main, args, query) {
  const status = query.get('status') || '';
  const definitionId = query.get('definition_id') ? Number(query.get('definition_id')) : null;
  const elementId = query.get('element_id');
  const at = query.get('at') === 'failed' ? 'failed' : 'waiting';
  const page = Number(query.get('page') || 1);
  const perPage = Number(query.get('per_page') || 20);
  const answer = elementId && definitionId
    ? await call('definition.instances_at', { definition_id: definitionId, element_id: elementId, state: at, page, per_page: perPage })
    : await call('process.list', { status: status || null, definition_id: definitionId, page, per_page: perPage });
  const definitions = can('definition.list') ? (await call('definition.list', { per_page: 100 })).items : [];
  const names = await definitionNames(answer.items);

  const hashFor = (changes) => {
    const params = new URLSearchParams(query);
    for (const [k, v] of Object.entries(changes)) {
      if (v === null || v === '' || v === undefined) params.delete(k); else params.set(k, v);
    }
    return `#/instances?${params}`;
  };
  const statusSelect = h('select', { name: 'status' }, h('option', { value: '' }, 'any status'),
    STATUSES.map((s) => h('option', { value: s }, s)));
  statusSelect.value = status;
  let definitionControl;
  if (definitions.length) {
    definitionControl = h('select', { name: 'definition_id' }, h('option', { value: '' }, 'any definition'),
      definitions.map((d) => h('option', { value: d.definition_id }, `${d.code} v${d.version}`)));
    definitionControl.value = definitionId ? String(definitionId) : '';
  } else {
    definitionControl = h('input', { type: 'number', min: '1', name: 'definition_id', value: definitionId || '', placeholder: 'any' });
  }
  const filters = h('form', { class: 'filters', 'aria-label': 'Filter instances' },
    field('Status', statusSelect), field('Definition', definitionControl),
    h('button', { type: 'submit', class: 'secondary' }, 'Filter'));
  filters.addEventListener('submit', (event) => {
    event.preventDefault();
    goTo(hashFor({ status: statusSelect.value, definition_id: definitionControl.value, page: 1, element_id: null, at: null }));
  });
  const elementNote = elementId ? h('p', { class: 'alert alert-info' },
    `Instances of ${names.get(definitionId) || `definition ${definitionId}`} ${at === 'failed' ? 'failed at' : 'waiting at'} `,
    h('code', {}, elementId), '. ', h('a', { href: hashFor({ element_id: null, at: null, page: 1 }) }, 'Show all instances of this definition')) : null;

  const selected = new Set();
  const bulkInfo = h('span', { class: 'muted', 'aria-live': 'polite' }, 'Nothing selected.');
  const retryButton = h('button', { type: 'button', class: 'secondary', disabled: true, onclick: () => bulk('retry') }, 'Retry selected');
  const cancelButton = h('button', { type: 'button', class: 'danger', disabled: true, onclick: () => bulk('cancel') }, 'Cancel selected');
  const boxes = [];
  const refreshSelection = () => {
    bulkInfo.textContent = selected.size ? `${plural(selected.size, 'instance')} selected.` : 'Nothing selected.';
    retryButton.disabled = !selected.size || !can('process.retry');
    cancelButton.disabled = !selected.size || !can('process.cancel');
    allBox.checked = boxes.length > 0 && selected.size === boxes.length;
  };
  const allBox = h('input', { type: 'checkbox', 'aria-label': 'Select every instance on this page' });
  allBox.addEventListener('change', () => {
    const all = allBox.checked;
    boxes.forEach((box, n) => {
      box.checked = all;
      if (all) selected.add(answer.items[n]); else selected.delete(answer.items[n]);
    });
    refreshSelection();
  });
  const rows = answer.items.map((i) => {
    const box = h('input', { type: 'checkbox', 'aria-label': `Select instance ${i.instance_id}` });
    box.addEventListener('change', () => { if (box.checked) selected.add(i); else selected.delete(i); refreshSelection(); });
    boxes.push(box);
    return [box, h('a', { href: `#/instances/${i.instance_id}` }, `#${i.instance_id}`),
      names.has(i.definition_id)
        ? (can('definition.get') ? h('a', { href: `#/definitions/${i.definition_id}` }, names.get(i.definition_id)) : names.get(i.definition_id))
        : `definition ${i.definition_id}`,
      statusBadge(i.status), where(i), when(i.started_at), when(i.completed_at)];
  });

  async function bulk(action) {
    const chosen = [...selected];
    const eligible = chosen.filter((i) => (action === 'retry' ? i.status === 'failed' : i.status === 'running'));
    const skipped = chosen.length - eligible.length;
    const verb = action === 'retry' ? 'Retry' : 'Cancel';
    const message = `${verb} ${plural(eligible.length, 'instance')}${skipped ? `; ${skipped} selected ${skipped === 1 ? 'is' : 'are'} not ${action === 'retry' ? 'failed' : 'running'} and will be left alone` : ''}.`;
    let variables = {};
    if (action === 'retry') {
      const editor = jsonEditor('Variables to set first (optional)', {}, 5);
      const ok = await dialog(`${verb} ${plural(eligible.length, 'instance')}`, h('div', {}, h('p', {}, message), editor.element),
        { submit: `${verb} ${plural(eligible.length, 'instance')}`, onSubmit: () => { variables = editor.value(); return true; } });
      if (!ok) return;
    } else if (!await confirmAction(`${verb} ${plural(eligible.length, 'instance')}`, message, `${verb} ${plural(eligible.length, 'instance')}`, true)) {
      return;
    }
    const params = (i) => (action === 'retry' && Object.keys(variables).length ? { instance_id: i.instance_id, variables } : { instance_id: i.instance_id });
    const answers = await batch(eligible.map((i) => [`process.${action}`, params(i)]));
    const refused = answers.map((a, n) => (a.error ? `#${eligible[n].instance_id}: ${a.error.message}` : null)).filter(Boolean);
    const accepted = eligible.filter((i, n) => !answers[n].error);
    if (action === 'retry' && accepted.length) {
      announce(`Retrying ${plural(accepted.length, 'instance')}…`);
      const after = await settled(accepted.map((i) => i.instance_id));
      const again = after.filter((s) => s.status === 'failed');
      const resumed = after.length - again.length;
      const parts = [`${resumed} resumed`];
      if (again.length) parts.push(`${again.length} failed again (${again.map((s) => `#${s.instance_id} at ${(s.error && s.error.element_id) || '?'}: ${(s.error && s.error.message) || 'failed'}`).join('; ')})`);
      if (refused.length) parts.push(`${refused.length} refused (${refused.join(' ')})`);
      announce(`Retry: ${parts.join(', ')}.`, again.length || refused.length ? 'error' : 'ok');
    } else {
      announce(`${verb}: ${accepted.length} done${refused.length ? `, ${refused.length} refused (${refused.join(' ')})` : ''}.`, refused.length ? 'error' : 'ok');
    }
    reloadView();
  }

  replace(main,
    h('h1', {}, 'Instances ', h('span', { class: 'muted heading-count' }, answer.total === 1 ? '1 result' : `${answer.total.toLocaleString('en')} results`)),
    filters, elementNote,
    h('div', { class: 'bulk-bar' }, allBox, ' ', bulkInfo, retryButton, cancelButton),
    table('Instances', ['', 'Instance', 'Definition', 'Status', 'Where', 'Started', 'Ended'], rows, 'No instance matches these filters.'),
    pager(answer, (p) => goTo(hashFor({ page: p }))));
  refreshSelection();
}

// The retried instances' status once each has run on to a wait, an end or a failure (at most ~4 s).
async function settled(ids) {
  let statuses = [];
  for (let round = 0; round < 20; round += 1) {
    await new Promise((resolve) => { setTimeout(resolve, round === 0 ? 150 : 200); });
    const answers = await batch(ids.map((id) => ['process.status', { instance_id: id }]));
    statuses = answers.map((a, n) => a.result || { instance_id: ids[n], status: 'unknown' });
    if (statuses.every((s) => s.status !== 'running' || (s.waiting_for && s.waiting_for.length))) break;
  }
  return statuses;
}

// Where an instance is: the elements it waits at, or the one it failed at (element ids, as text);
// a running instance that waits nowhere has its next step queued.
function where(i) {
  if (i.failed_at) return h('span', {}, 'failed at ', h('code', {}, i.failed_at));
  if (i.waiting_at && i.waiting_at.length) return h('span', {}, 'waits at ', ...i.waiting_at.flatMap((id, n) => (n ? [', ', h('code', {}, id)] : [h('code', {}, id)])));
  return i.status === 'running' ? h('span', { class: 'muted' }, 'moving on') : '—';  // its next step is queued
}
