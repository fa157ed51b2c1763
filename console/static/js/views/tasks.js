// The task inbox: in_progress tasks, newest first, filtered by definition; each opens its form.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { can } from '../session.js';
import { field, goTo, pager } from '../widgets.js';

export async function render(main, args, query) {
  const page = Number(query.get('page') || 1);
  const definitionId = query.get('definition_id') ? Number(query.get('definition_id')) : null;
  const answer = await call('task.list', { status: 'in_progress', definition_id: definitionId, page, per_page: 20 });
  const definitions = can('definition.list') ? (await call('definition.list', { per_page: 100 })).items : [];
  const names = new Map(definitions.map((d) => [d.definition_id, `${d.code} v${d.version}`]));
  let control;
  if (definitions.length) {
    control = h('select', {}, h('option', { value: '' }, 'every definition'),
      definitions.map((d) => h('option', { value: d.definition_id }, `${d.code} v${d.version}`)));
    control.value = definitionId ? String(definitionId) : '';
  } else {
    control = h('input', { type: 'number', min: '1', value: definitionId || '', placeholder: 'any' });
  }
  const filter = h('form', { class: 'filters', 'aria-label': 'Filter tasks' }, field('Definition', control),
    h('button', { type: 'submit', class: 'secondary' }, 'Filter'));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    goTo(control.value ? `#/tasks?definition_id=${control.value}` : '#/tasks');
  });
  const list = answer.items.length === 0
    ? h('p', { class: 'empty' }, 'The inbox is empty: no task waits for a person.')
    : h('ul', { class: 'inbox' }, answer.items.map((t) => h('li', {},
      h('a', { href: `#/tasks/${t.task_id}`, class: 'inbox-item' },
        h('span', { class: 'inbox-title' }, t.name || t.element_id),
        h('span', { class: 'inbox-meta' }, `${names.get(t.definition_id) || `definition ${t.definition_id}`} · instance ${t.instance_id} · ${when(t.created_at)}`),
        t.binding_id ? h('span', { class: 'chip' }, 'conversation') : null))));
  replace(main, h('h1', {}, 'Tasks'), filter, list,
    pager(answer, (p) => goTo(`#/tasks?page=${p}${definitionId ? `&definition_id=${definitionId}` : ''}`)));
}
