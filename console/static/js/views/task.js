// One task: its form and buttons, the variables it opened with; completing it returns to the inbox.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { can } from '../session.js';
import { taskForm } from '../form.js';
import { variablesTree } from '../tree.js';
import { announce } from '../widgets.js';

export async function render(main, [id]) {
  const [task] = (await call('task.list', { task_id: Number(id) })).items;
  if (!task) throw new Error(`Task ${id} not found.`);
  const head = h('div', {},
    h('p', { class: 'crumbs' }, h('a', { href: '#/tasks' }, 'Tasks'), ' / ', `#${task.task_id}`),
    h('h1', {}, task.name || task.element_id),
    h('p', { class: 'muted' }, can('process.status') ? h('a', { href: `#/instances/${task.instance_id}` }, `Instance ${task.instance_id}`) : `Instance ${task.instance_id}`,
      ` · opened ${when(task.created_at)}`,
      task.binding_id && can('conversation.messages') ? [' · ', h('a', { href: `#/conversations/${task.binding_id}` }, 'open its conversation')] : null));
  if (task.status !== 'in_progress') {
    replace(main, head, h('p', { class: 'alert alert-info' }, `This task is ${task.status}${task.completed_at ? ` since ${when(task.completed_at)}` : ''}.`),
      h('section', { class: 'panel' }, h('h2', {}, 'Result'), variablesTree(task.result || {}, 'Result')));
    return;
  }
  const form = can('task.complete')
    ? taskForm(task, async (result) => {
      await call('task.complete', { task_id: task.task_id, result });
      announce(`Task “${task.name || task.element_id}” completed.`);
      location.hash = '#/tasks';
    })
    : h('p', { class: 'alert alert-info' }, 'Your API key may read tasks but not complete them (task.complete).');
  replace(main, head, h('div', { class: 'task-layout' },
    h('section', { class: 'panel' }, h('h2', {}, 'Form'), form),
    h('section', { class: 'panel' }, h('h2', {}, 'Variables when it opened'), variablesTree(task.variables))));
}
