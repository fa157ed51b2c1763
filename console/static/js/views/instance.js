// An instance: its diagram with the path taken, where it waits (and for what) or where it failed,
// its history and variables; cancel, retry, send a message. Refreshes itself while it runs.
import { batch, call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { drawDiagram } from '../diagram.js';
import { can } from '../session.js';
import { announce, confirmAction, dialog, field, jsonEditor, reloadView, statusBadge, table } from '../widgets.js';
import { variablesTree } from '../tree.js';

const REFRESH_MS = 2000;

export async function render(main, [id], query, stale) {
  const instanceId = Number(id);
  let [status, path] = await load(instanceId);
  const definition = can('definition.get') ? await call('definition.get', { definition_id: status.definition_id }) : null;
  if (stale()) return null;
  const head = h('div', { class: 'page-head' });
  const live = h('p', { class: 'muted live', 'aria-live': 'off' });
  const diagramHost = h('div', { class: 'diagram-host' });
  const where = h('section', { class: 'panel' });
  const history = h('section', { class: 'panel' });
  const variables = h('section', { class: 'panel' });
  replace(main, head, live, diagramHost, legend(),
    h('div', { class: 'two-columns' }, h('div', {}, where, history), variables));
  let diagram = null;
  if (definition) {
    diagram = await drawDiagram(diagramHost, definition.bpmn, `Diagram of instance ${instanceId} with the path it took`);
  } else {
    diagramHost.append(h('p', { class: 'alert alert-info' }, 'The diagram needs the permission admin (definition.get); the path is listed below.'));
  }
  let timer = null;
  let stopped = false;

  function paint() {
    renderHead(head, status, path, definition);
    renderWhere(where, status, path, diagram);
    renderHistory(history, path, diagram);
    replace(variables, h('h2', {}, 'Variables'), variablesTree(status.variables));
    if (diagram) paintDiagram(diagram, path);
    live.textContent = status.status === 'running'
      ? `Running: refreshes every ${REFRESH_MS / 1000} s (last ${when(new Date().toISOString()).slice(11)}).`
      : '';
  }

  async function tick() {
    if (stopped) return;
    try {
      [status, path] = await load(instanceId);
      if (stopped) return;
      paint();
    } catch (err) {
      live.textContent = `Refresh failed: ${err.message}`;
    }
    if (!stopped && status.status === 'running') timer = setTimeout(tick, REFRESH_MS);
  }

  paint();
  if (status.status === 'running') timer = setTimeout(tick, REFRESH_MS);
  return () => {
    stopped = true;
    clearTimeout(timer);
    if (diagram) diagram.destroy();
  };
}

async function load(instanceId) {
  const [status, path] = await batch([['process.status', { instance_id: instanceId }], ['process.path', { instance_id: instanceId }]]);
  if (status.error) throw status.error;
  if (path.error) throw path.error;
  return [status.result, path.result];
}

function renderHead(head, status, path, definition) {
  const actions = h('div', { class: 'actions' });
  if (status.status === 'running' && can('process.cancel')) {
    actions.append(h('button', { type: 'button', class: 'danger', onclick: () => cancel(status) }, 'Cancel instance…'));
  }
  if (status.status === 'failed' && can('process.retry')) {
    actions.append(h('button', { type: 'button', class: 'primary', onclick: () => retry(status) }, 'Retry…'));
  }
  const messages = [...new Set(path.waiting.flatMap((w) => w.messages || (w.message ? [w.message] : [])))];
  if (status.status === 'running' && messages.length && can('process.message')) {
    actions.append(h('button', { type: 'button', class: 'secondary', onclick: () => sendMessage(status, messages) }, 'Send message…'));
  }
  const defLabel = `${status.code} v${status.version}`;
  replace(head,
    h('div', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/instances' }, 'Instances'), ' / ', `#${status.instance_id}`),
      h('h1', {}, `Instance ${status.instance_id} `, statusBadge(status.status)),
      h('p', { class: 'muted' },
        definition ? h('a', { href: `#/definitions/${status.definition_id}` }, defLabel) : defLabel,
        ` · started ${when(status.started_at)}`, status.completed_at ? ` · ended ${when(status.completed_at)}` : '')),
    actions);
}

function describeWait(w, path) {
  const parts = [];
  if (w.task_ids && w.task_ids.length) {
    parts.push(['a person: ', w.task_ids.map((t, i) => [i ? ', ' : '', can('task.list') ? h('a', { href: `#/tasks/${t}` }, `task #${t}`) : `task #${t}`])]);
  } else if (w.kind === 'userTask' || w.kind === 'manualTask') {
    parts.push('a person');
  }
  if (w.operator === 'ai_chat') parts.push('an AI dialog with the customer');
  else if (w.operator === 'http') parts.push('an HTTP call under way');
  else if (w.operator) parts.push(`the ${w.operator} step`);
  if (w.messages) parts.push(`one of the messages ${w.messages.map((m) => `'${m}'`).join(', ')}`);
  else if (w.message) parts.push(`the message '${w.message}'`);
  if (w.due_at) parts.push(`a timer due ${when(w.due_at)}`);
  return parts.length ? parts.flatMap((p, i) => (i ? [' and ', p] : [p])) : [w.kind];
}

// An element's name: the diagram's, else the one its history steps carry (the path names what it
// passed), else its id.
function namer(path, diagram) {
  const named = new Map(path.history.filter((step) => step.name).map((step) => [step.element_id, step.name]));
  return (elementId) => (diagram && elementId ? diagram.name(elementId) : named.get(elementId) || elementId);
}

function renderWhere(where, status, path, diagram) {
  const name = namer(path, diagram);
  replace(where, h('h2', {}, 'Where it is'));
  if (path.failed) {
    where.append(h('div', { class: 'alert alert-error', role: 'alert' },
      h('strong', {}, path.failed.element_id ? `Failed at ${name(path.failed.element_id)} ` : 'Failed '),
      path.failed.element_id ? h('code', {}, path.failed.element_id) : null,
      h('p', { class: 'error-message' }, path.failed.message || ''),
      h('p', { class: 'muted' }, `at ${when(path.failed.at)}`)));
  }
  if (path.waiting.length) {
    where.append(h('ul', { class: 'waiting-list' }, path.waiting.map((w) => h('li', {},
      h('strong', {}, name(w.element_id)), ' ', h('code', { class: 'muted' }, w.element_id),
      ' waits for ', describeWait(w, path), w.since ? h('span', { class: 'muted' }, ` · since ${when(w.since)}`) : null))));
  } else if (status.status === 'running') {
    where.append(h('p', { class: 'muted' }, 'Running: the engine is working on it.'));
  }
  if (status.status === 'completed') where.append(h('p', {}, `Completed ${when(status.completed_at)}.`));
  if (status.status === 'cancelled') where.append(h('p', {}, `Cancelled ${when(status.completed_at)}.`));
}

function renderHistory(history, path, diagram) {
  const name = namer(path, diagram);
  const rows = path.history.slice().reverse().map((step) => [
    when(step.at), h('span', {}, step.name || name(step.element_id), ' ', h('code', { class: 'muted' }, step.element_id)),
    step.kind, h('span', { class: `step step-${step.state}` }, step.state)]);
  replace(history, h('h2', {}, 'History'),
    path.history_total > path.history.length ? h('p', { class: 'hint' }, `The newest ${path.history.length} of ${path.history_total} steps.`) : null,
    table('History of the instance, newest first', ['Time', 'Element', 'Kind', 'State'], rows, 'No step yet: the instance has not started running.'));
}

function paintDiagram(diagram, path) {
  diagram.clearMarks();
  for (const p of path.passed) diagram.mark(p.element_id, 'baton-passed');
  diagram.markFlows(new Set(path.flows.map((f) => `${f.from}>${f.to}`)), 'baton-flow-taken');
  for (const w of path.waiting) {
    if (diagram.mark(w.element_id, 'baton-waiting')) {
      diagram.overlay(w.element_id, h('span', { class: 'token', title: `waiting at ${w.element_id}` }, 'waiting'), { top: -14, right: 40 });
    }
  }
  for (const p of path.passed) {
    if (p.times > 1) diagram.overlay(p.element_id, h('span', { class: 'count-badge passed', title: `passed ${p.times} times` }, `×${p.times}`), { top: -12, left: -8 });
  }
  if (path.failed && path.failed.element_id && diagram.mark(path.failed.element_id, 'baton-failed')) {
    diagram.overlay(path.failed.element_id, h('div', { class: 'refusal-note' }, path.failed.message || 'failed'), { bottom: -8, left: -10 });
  }
}

function legend() {
  return h('p', { class: 'legend' },
    h('span', { class: 'swatch passed' }), ' passed  ', h('span', { class: 'swatch waiting' }), ' waiting  ',
    h('span', { class: 'swatch failed' }), ' failed');
}

async function cancel(status) {
  const ok = await confirmAction(`Cancel instance ${status.instance_id}`, 'Its open tasks are cancelled, its conversation closes and its timers are dropped. This cannot be undone.', 'Cancel instance');
  if (!ok) return;
  try {
    await call('process.cancel', { instance_id: status.instance_id });
    announce(`Instance ${status.instance_id} cancelled.`);
  } catch (err) {
    announce(err.message, 'error');
  }
  reloadView();
}

async function retry(status) {
  const editor = jsonEditor('Variables to merge before retrying', {}, 6);
  const done = await dialog(`Retry instance ${status.instance_id}`, h('div', {},
    h('p', {}, 'The instance resumes at the element that failed, with these variables merged in.'), editor.element),
  { submit: 'Retry', onSubmit: () => call('process.retry', { instance_id: status.instance_id, variables: editor.value() }) });
  if (done) {
    announce(`Instance ${status.instance_id} retried.`);
    reloadView();
  }
}

async function sendMessage(status, messages) {
  const select = h('select', {}, messages.map((m) => h('option', { value: m }, m)));
  const editor = jsonEditor('Variables sent with the message', {}, 5);
  const done = await dialog(`Send a message to instance ${status.instance_id}`, h('div', {}, field('Message', select), editor.element),
    { submit: 'Send', onSubmit: () => call('process.message', { instance_id: status.instance_id, message: select.value, variables: editor.value() }) });
  if (done) {
    announce(`Message '${select.value}' delivered to instance ${status.instance_id}.`);
    reloadView();
  }
}
