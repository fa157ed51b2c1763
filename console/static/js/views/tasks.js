// The task inbox: My tasks / My groups / Unassigned / All (open tasks), sorted by creation, due date
// or priority; each shows who holds it and when it is due, and may be claimed from the list.
import { call } from '../rpc.js';
import { fromNow, h, replace, when } from '../dom.js';
import { can, current } from '../session.js';
import { definitionName, definitionNames } from '../names.js';
import { announce, field, goTo, pager, reloadView } from '../widgets.js';

const SORTS = [['created', 'newest first'], ['due', 'due date'], ['priority', 'priority']];

export async function render(main, args, query) {
  const me = current();
  const operator = Boolean(me.user || (me.groups && me.groups.length));
  const tabs = [
    operator ? ['mine', 'My tasks'] : null,
    me.groups && me.groups.length ? ['groups', 'My groups'] : null,
    ['unassigned', 'Unassigned'], ['all', 'All']].filter(Boolean);
  const view = tabs.some(([key]) => key === query.get('view')) ? query.get('view') : tabs[0][0];
  const group = me.groups && me.groups.includes(query.get('group')) ? query.get('group') : (me.groups || [])[0];
  const sort = SORTS.some(([key]) => key === query.get('sort')) ? query.get('sort') : 'created';
  const overdue = query.get('overdue') === '1';
  const page = Number(query.get('page') || 1);
  const definitionId = view === 'all' && query.get('definition_id') ? Number(query.get('definition_id')) : null;
  const params = { status: 'in_progress', sort, page, per_page: 20 };
  if (view === 'mine') params.mine = true;
  if (view === 'groups') params.candidate_group = group;
  if (view === 'unassigned') params.assignee = null;
  if (definitionId) params.definition_id = definitionId;
  if (overdue) params.overdue = true;
  const answer = await call('task.list', params);
  const names = await definitionNames(answer.items);

  const hashFor = (changes) => {
    const next = new URLSearchParams(query);
    for (const [k, v] of Object.entries(changes)) {
      if (v === null || v === '' || v === undefined) next.delete(k); else next.set(k, v);
    }
    return `#/tasks?${next}`;
  };
  const tabBar = h('nav', { class: 'tabs', 'aria-label': 'Inboxes' }, tabs.map(([key, label]) =>
    h('a', { href: hashFor({ view: key, page: null }), 'aria-current': key === view ? 'page' : null }, label)));
  const sortSelect = h('select', {}, SORTS.map(([key, label]) => h('option', { value: key }, label)));
  sortSelect.value = sort;
  const overdueBox = h('input', { type: 'checkbox', checked: overdue });
  const controls = [field('Sort by', sortSelect),
    h('div', { class: 'field field-check' }, overdueBox, h('label', {}, 'Overdue only'))];
  overdueBox.id = 'overdue-only';
  controls[1].querySelector('label').setAttribute('for', 'overdue-only');
  let groupSelect = null;
  if (view === 'groups' && me.groups.length > 1) {
    groupSelect = h('select', {}, me.groups.map((g) => h('option', { value: g }, g)));
    groupSelect.value = group;
    controls.unshift(field('Group', groupSelect));
  }
  const filter = h('form', { class: 'filters', 'aria-label': 'Sort and filter tasks' }, controls,
    h('button', { type: 'submit', class: 'secondary' }, 'Show'));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    goTo(hashFor({ sort: sortSelect.value, overdue: overdueBox.checked ? '1' : null, page: null,
      group: groupSelect ? groupSelect.value : query.get('group') }));
  });
  const empty = {
    mine: 'Nothing for you: no open task is assigned to you or waits for your groups.',
    groups: `No open task waits for the group ${group}.`,
    unassigned: 'Every open task is held by someone.',
    all: 'The inbox is empty: no task waits for a person.' }[view];
  const list = answer.items.length === 0
    ? h('p', { class: 'empty' }, overdue ? 'No overdue task here.' : empty)
    : h('ul', { class: 'inbox' }, answer.items.map((t) => h('li', { class: 'inbox-row' },
      h('a', { href: `#/tasks/${t.task_id}`, class: 'inbox-item' },
        h('span', { class: 'inbox-title' }, t.name || t.element_id),
        h('span', { class: 'inbox-meta' }, `${definitionName(names, t.definition_id)} · instance ${t.instance_id} · opened ${when(t.created_at)}`),
        h('span', { class: 'inbox-meta' }, holderText(t), t.priority !== 50 ? ` · priority ${t.priority}` : '', t.due_at ? ' · ' : '', dueBadge(t)),
        t.binding_id ? h('span', { class: 'chip' }, 'conversation') : null),
      h('div', { class: 'inbox-actions' }, claimButton(t, me)))));
  replace(main, h('h1', {}, 'Tasks'), tabBar, filter, list, pager(answer, (p) => goTo(hashFor({ page: p }))));
}

export function holderText(t) {
  if (t.assignee) return `held by ${t.assignee}`;
  const who = [...(t.candidate_users || []), ...(t.candidate_groups || []).map((g) => `group ${g}`)];
  return who.length ? `unassigned · for ${who.join(', ')}` : 'unassigned';
}

export function dueBadge(t) {
  if (!t.due_at) return null;
  const late = new Date(t.due_at).getTime() < Date.now();
  return late
    ? h('span', { class: 'badge badge-overdue', title: `Due ${when(t.due_at)}` }, `overdue ${fromNow(t.due_at).replace(' ago', '')}`)
    : h('span', { class: 'due', title: `Due ${when(t.due_at)}` }, `due ${fromNow(t.due_at)}`);
}

function claimButton(t, me) {
  if (!can('task.claim') || !me.user || t.assignee) return null;
  return h('button', { type: 'button', class: 'small', 'aria-label': `Claim ${t.name || t.element_id} (task ${t.task_id})`,
    onclick: async () => {
      try {
        await call('task.claim', { task_id: t.task_id });
        announce(`Task “${t.name || t.element_id}” is yours now.`);
      } catch (err) {
        announce(err.message, 'error');
      }
      reloadView();
    } }, 'Claim');
}
