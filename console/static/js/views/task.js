// One task: who holds it and when it is due (claim, release, hand over), its form (a Camunda Form
// drawn by form-js, or its form fields and buttons), a BPMN error or escalation instead, its variables.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { can, current } from '../session.js';
import { camundaForm } from '../camunda-form.js';
import { taskForm } from '../form.js';
import { variablesTree } from '../tree.js';
import { announce, dialog, field, reloadView } from '../widgets.js';
import { dueBadge, holderText } from './tasks.js';

export async function render(main, [id]) {
  const [task] = (await call('task.list', { task_id: Number(id) })).items;
  if (!task) throw new Error(`Task ${id} not found.`);
  const me = current();
  const title = task.name || task.element_id;
  const head = h('div', {},
    h('p', { class: 'crumbs' }, h('a', { href: '#/tasks' }, 'Tasks'), ' / ', `#${task.task_id}`),
    h('h1', {}, title),
    h('p', { class: 'muted' }, can('process.status') ? h('a', { href: `#/instances/${task.instance_id}` }, `Instance ${task.instance_id}`) : `Instance ${task.instance_id}`,
      ` · opened ${when(task.created_at)}`,
      task.binding_id && can('conversation.messages') ? [' · ', h('a', { href: `#/conversations/${task.binding_id}` }, 'open its conversation')] : null));
  if (task.status !== 'in_progress') {
    replace(main, head, h('p', { class: 'alert alert-info' }, `This task is ${task.status}${task.completed_at ? ` since ${when(task.completed_at)}` : ''}.`),
      h('section', { class: 'panel' }, h('h2', {}, 'Result'), variablesTree(task.result || {}, 'Result')));
    return null;
  }
  const heldByOther = task.assignee && task.assignee !== me.user && !can('task.assign');
  const complete = async (result) => {
    await call('task.complete', { task_id: task.task_id, result });
    announce(`Task “${title}” completed.`);
    location.hash = '#/tasks';
  };
  let form;
  let destroy = null;
  if (!can('task.complete')) {
    form = h('p', { class: 'alert alert-info' }, 'Your API key may read tasks but not complete them (task.complete).');
  } else if (heldByOther) {
    form = h('p', { class: 'alert alert-info' }, `${task.assignee} holds this task: only they, or someone who may assign tasks, can complete it.`);
  } else if (task.form_schema) {
    const drawn = await camundaForm(task, complete);
    form = drawn.element;
    destroy = drawn.destroy;
  } else {
    form = taskForm(task, complete);
  }
  replace(main, head, holderPanel(task, me), h('div', { class: 'task-layout' },
    h('section', { class: 'panel' }, h('h2', {}, 'Form'), form, heldByOther ? null : boundaryActions(task, title)),
    h('section', { class: 'panel' }, h('h2', {}, 'Variables of the task'), variablesTree(task.variables))));
  return destroy;
}

// Instead of completing: end the task with a BPMN error, or raise an escalation beside it, for the
// error and escalation boundary events of its diagram (task.bpmn_error, task.bpmn_escalation). A code
// that no boundary catches is refused by the server, which says so in the dialog.
function boundaryActions(task, title) {
  const actions = [];
  if (can('task.bpmn_error')) actions.push(h('button', { type: 'button', class: 'secondary', onclick: () => reportError(task, title) }, 'Report a BPMN error…'));
  if (can('task.bpmn_escalation')) actions.push(h('button', { type: 'button', class: 'secondary', onclick: () => escalate(task, title) }, 'Escalate…'));
  if (!actions.length) return null;
  // Folded away: most tasks have no such boundary event, and completing is the page's action.
  return h('details', { class: 'instead' }, h('summary', {}, 'Instead of completing…'),
    h('p', { class: 'hint' }, 'For the error and escalation boundary events attached to this task in its diagram.'),
    h('div', { class: 'holder' }, actions));
}

async function reportError(task, title) {
  const code = h('input', { type: 'text', maxlength: 255, autocomplete: 'off', required: true });
  const message = h('textarea', { rows: 3, maxlength: 2000 });
  const done = await dialog(`End “${title}” with a BPMN error`, h('div', {},
    field('Error code', code, 'The errorCode of an error boundary event on this task; its path goes on instead of the task.'),
    field('Message', message, 'Optional; the boundary\'s path gets it as the variable errorMessage.')),
  { submit: 'End with this error', danger: true, onSubmit: () => call('task.bpmn_error', { task_id: task.task_id, error_code: code.value.trim(),
    ...(message.value.trim() ? { message: message.value.trim() } : {}) }) });
  if (!done) return;
  announce(`Task “${title}” ended with the error '${code.value.trim()}'.`);
  location.hash = '#/tasks';
}

async function escalate(task, title) {
  const code = h('input', { type: 'text', maxlength: 255, autocomplete: 'off', required: true });
  const done = await dialog(`Escalate “${title}”`, h('div', {},
    field('Escalation code', code, 'The escalationCode of an escalation boundary event on this task. A non-interrupting one keeps the task open.')),
  { submit: 'Escalate', onSubmit: () => call('task.bpmn_escalation', { task_id: task.task_id, escalation_code: code.value.trim() }) });
  if (!done) return;
  announce(`Escalation '${code.value.trim()}' raised at “${title}”.`);
  reloadView();
}

function holderPanel(task, me) {
  const mine = task.assignee && task.assignee === me.user;
  const act = (method, params, done) => async () => {
    try {
      await call(method, { task_id: task.task_id, ...params });
      announce(done);
    } catch (err) {
      announce(err.message, 'error');
    }
    reloadView();
  };
  const actions = [];
  if (can('task.claim') && me.user && !task.assignee) actions.push(h('button', { type: 'button', class: 'primary', onclick: act('task.claim', {}, 'The task is yours now.') }, 'Claim'));
  if (can('task.unclaim') && task.assignee && (mine || can('task.assign'))) {
    actions.push(h('button', { type: 'button', class: 'secondary', onclick: act('task.unclaim', {}, 'The task is back with its candidates.') }, 'Release'));
  }
  if (can('task.assign')) actions.push(h('button', { type: 'button', class: 'secondary', onclick: () => handOver(task) }, 'Hand over…'));
  const facts = [['Held by', task.assignee ? h('span', { class: 'badge badge-held' }, mine ? `${task.assignee} (you)` : task.assignee) : 'nobody yet'],
    ['For', holderText({ ...task, assignee: null }).replace(/^unassigned · for /, '').replace(/^unassigned$/, 'anyone')],
    ['Due', task.due_at ? [when(task.due_at), ' ', dueBadge(task)] : 'no due date'],
    ['Follow up', task.follow_up_at ? when(task.follow_up_at) : '—'],
    ['Priority', String(task.priority)]];
  return h('section', { class: 'panel', 'aria-label': 'Who holds this task' },
    h('dl', { class: 'facts' }, facts.flatMap(([term, value]) => [h('dt', {}, term), h('dd', {}, value)])),
    actions.length ? h('div', { class: 'holder' }, actions) : null);
}

async function handOver(task) {
  const user = h('input', { type: 'text', maxlength: 200, autocomplete: 'off', value: task.assignee || '' });
  const done = await dialog(`Hand over “${task.name || task.element_id}”`, h('div', {},
    field('To the user', user, 'An operator\'s user name (the user of their API key). Leave it empty to give the task back to its candidates.')),
  { submit: 'Hand over', onSubmit: () => call('task.assign', { task_id: task.task_id, user: user.value.trim() || null }) });
  if (!done) return;
  announce(done.assignee ? `The task is with ${done.assignee} now.` : 'The task is back with its candidates.');
  reloadView();
}
