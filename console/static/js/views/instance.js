// An instance: its diagram with the path taken, where it waits (and for what) or where it failed,
// its history (a timeline of what happened and who did it: process.history), the steps it took and
// its variables; cancel, retry, send a message, and the repairs: edit variables, skip an element it
// waits or failed at, rewind to one it passed (each confirmed with what it cancels). Refreshes
// itself while it runs.
import { batch, call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { drawDiagram } from '../diagram.js';
import { can } from '../session.js';
import { announce, confirmAction, dialog, field, jsonEditor, reloadView, statusBadge, table } from '../widgets.js';
import { variablesTree } from '../tree.js';

const REFRESH_MS = 2000;

export async function render(main, [id], query, stale) {
  const instanceId = Number(id);
  let [status, path, events] = await load(instanceId);
  const definition = can('definition.get') ? await call('definition.get', { definition_id: status.definition_id }) : null;
  if (stale()) return null;
  const head = h('div', { class: 'page-head' });
  const live = h('p', { class: 'muted live', 'aria-live': 'off' });
  const diagramHost = h('div', { class: 'diagram-host' });
  const where = h('section', { class: 'panel' });
  const history = h('section', { class: 'panel' });
  const timeline = h('section', { class: 'panel', 'aria-label': 'History' });
  const variables = h('section', { class: 'panel' });
  const repairBar = h('div', { class: 'repair-bar' });
  replace(main, head, live, diagramHost, legend(), repairBar,
    h('div', { class: 'two-columns' }, h('div', {}, where, timeline, history), variables));
  let diagram = null;
  if (definition) {
    diagram = await drawDiagram(diagramHost, definition.bpmn, `Diagram of instance ${instanceId} with the path it took`);
  } else {
    diagramHost.append(h('p', { class: 'alert alert-info' }, 'The diagram needs the permission admin (definition.get); the path is listed below.'));
  }
  let timer = null;
  let stopped = false;
  const picked = { elementId: null };
  if (diagram) {
    diagram.onClick((elementId) => {
      picked.elementId = elementId;
      renderRepair(repairBar, status, path, diagram, picked);
    });
  }

  function paint() {
    renderHead(head, status, path, definition);
    renderWhere(where, status, path, diagram);
    renderTimeline(timeline, events, path, diagram);
    renderHistory(history, status, path, diagram);
    renderRepair(repairBar, status, path, diagram, picked);
    replace(variables, h('h2', {}, 'Variables'), variablesTree(status.variables));
    if (diagram) paintDiagram(diagram, path);
    live.textContent = status.status === 'running'
      ? `Running: refreshes every ${REFRESH_MS / 1000} s (last ${when(new Date().toISOString()).slice(11)}).`
      : '';
  }

  async function tick() {
    if (stopped) return;
    try {
      [status, path, events] = await load(instanceId);
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

const HISTORY_PAGE = 100;

async function load(instanceId) {
  const calls = [['process.status', { instance_id: instanceId }], ['process.path', { instance_id: instanceId }]];
  if (can('process.history')) calls.push(['process.history', { instance_id: instanceId, per_page: HISTORY_PAGE }]);
  const [status, path, history] = await batch(calls);
  if (status.error) throw status.error;
  if (path.error) throw path.error;
  let events = history && !history.error ? history.result : null;
  if (events && events.total > events.items.length) { // a long history: its newest page
    events = await call('process.history', { instance_id: instanceId, per_page: HISTORY_PAGE, page: Math.ceil(events.total / HISTORY_PAGE) });
  }
  return [status.result, path.result, events];
}

function renderHead(head, status, path, definition) {
  const actions = h('div', { class: 'actions' });
  if (status.status === 'running' && can('process.cancel')) {
    actions.append(h('button', { type: 'button', class: 'danger', onclick: () => cancel(status) }, 'Cancel instance…'));
  }
  if (status.status === 'failed' && can('process.retry')) {
    actions.append(h('button', { type: 'button', class: 'primary', onclick: () => retry(status) }, 'Retry…'));
  }
  if (REPAIRABLE.has(status.status) && can('process.set_variables')) {
    actions.append(h('button', { type: 'button', class: 'secondary', onclick: () => editVariables(status) }, 'Edit variables…'));
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

// A step still open when the instance ended does not wait any more: it was cancelled with the
// instance, or stopped by its failure.
function shownState(step, status) {
  if (step.state !== 'waiting' || status.status === 'running') return step.state;
  return status.status === 'cancelled' ? 'cancelled' : 'stopped';
}

function renderHistory(history, status, path, diagram) {
  const name = namer(path, diagram);
  const rows = path.history.slice().reverse().map((step) => {
    const state = shownState(step, status);
    return [when(step.at), h('span', {}, step.name || name(step.element_id), ' ', h('code', { class: 'muted' }, step.element_id)),
      step.kind, h('span', { class: `step step-${state}` }, state)];
  });
  replace(history, h('h2', {}, 'Steps'),
    path.history_total > path.history.length ? h('p', { class: 'hint' }, `The newest ${path.history.length} of ${path.history_total} steps.`) : null,
    table('Steps of the instance, newest first', ['Time', 'Element', 'Kind', 'State'], rows, 'No step yet: the instance has not started running.'));
}

// --- the history: process.history as a timeline ------------------------------------------------

const KIND_LABELS = {
  started: 'Started', failed: 'Incident: failed', retried: 'Retried', cancelled: 'Cancelled',
  variables_set: 'Variables set', task_completed: 'Task completed', task_claimed: 'Task claimed',
  task_assigned: 'Task assigned', conversation_claimed: 'Conversation claimed', conversation_assigned: 'Conversation assigned',
  skipped: 'Skipped', rewound: 'Rewound', migrated: 'Migrated',
  message_received: 'Message received', signal_received: 'Signal received', completed: 'Completed',
};
const REPAIR_KINDS = new Set(['retried', 'variables_set', 'skipped', 'rewound', 'migrated', 'cancelled']);

function actorText(actor) {
  if (!actor) return 'unknown';
  if (actor.type === 'api_key') return `API key “${actor.name}”`;
  if (actor.type === 'webhook') return `webhook ${actor.name}…`;
  if (actor.type === 'channel') return `channel “${actor.name}”`;
  return 'Baton';
}

const names = (list) => (list || []).join(', ');

// A conversation an event names: a link when the key may read its messages.
function conversationLink(bindingId) {
  const label = `conversation #${bindingId}`;
  return can('conversation.messages') ? h('a', { href: `#/conversations/${bindingId}` }, label) : label;
}

function eventDetail(event, name) {
  const d = event.detail || {};
  const cancelled = (d.cancelled || []).map((c) => name(c.element_id));
  switch (event.kind) {
    case 'failed': return h('p', { class: 'error-message' }, d.message || '');
    case 'variables_set': return [d.set && d.set.length ? `set ${names(d.set)}` : null, d.set && d.set.length && d.removed && d.removed.length ? '; ' : null,
      d.removed && d.removed.length ? `removed ${names(d.removed)}` : null];
    case 'skipped': case 'rewound':
      return [cancelled.length ? `cancelled ${cancelled.join(', ')}` : 'nothing open cancelled', d.set && d.set.length ? `; set ${names(d.set)}` : null];
    case 'retried': return d.set && d.set.length ? `with ${names(d.set)}` : null;
    case 'task_completed': case 'task_claimed': case 'task_assigned': {
      const task = d.task_id ? (can('task.list') ? h('a', { href: `#/tasks/${d.task_id}` }, `task #${d.task_id}`) : `task #${d.task_id}`)
        : (d.external_task_id ? `external task #${d.external_task_id}` : null);
      const who = event.kind === 'task_completed' ? null : (d.assignee ? ` to ${d.assignee}` : ' to nobody (back to its candidates)');
      return [task, event.kind === 'task_claimed' ? ` by ${d.assignee}` : who];
    }
    case 'conversation_claimed': return [conversationLink(d.binding_id), ` by ${d.assignee}`];
    case 'conversation_assigned': return [conversationLink(d.binding_id), d.assignee ? ` to ${d.assignee}` : ' to nobody'];
    case 'message_received':
      if (d.binding_id) return ['a chat message (', conversationLink(d.binding_id), ')'];
      return [`'${d.message}'`, d.from_instance ? ` from instance #${d.from_instance}` : null];
    case 'signal_received': return [`'${d.signal}'`, d.from_instance ? ` from instance #${d.from_instance}` : null];
    case 'migrated': return `version ${d.from_version} → ${d.to_version}`;
    default: return null;
  }
}

function renderTimeline(section, events, path, diagram) {
  if (!events) {
    replace(section, h('h2', {}, 'History'), h('p', { class: 'muted' }, 'The history needs the permission process.status.'));
    return;
  }
  const name = namer(path, diagram);
  const items = events.items.map((event) => {
    const cls = event.kind === 'failed' ? 'incident' : REPAIR_KINDS.has(event.kind) ? 'repair'
      : (event.kind === 'completed' ? 'ended' : null);
    return h('li', { class: cls, dataset: { kind: event.kind } },
      h('span', { class: 'event-kind' }, KIND_LABELS[event.kind] || event.kind),
      event.element_id ? [' at ', h('strong', {}, name(event.element_id)), ' ', h('code', { class: 'muted' }, event.element_id)] : null,
      ' ', h('span', {}, eventDetail(event, name)),
      h('div', { class: 'event-meta' }, `${when(event.at)} · by ${actorText(event.actor)}`));
  });
  replace(section, h('h2', {}, 'History'),
    events.total > events.items.length ? h('p', { class: 'hint' }, `The newest ${events.items.length} of ${events.total} events.`) : null,
    items.length ? h('ol', { class: 'timeline', 'aria-label': 'What happened to the instance, oldest first' }, items)
      : h('p', { class: 'empty' }, 'Nothing recorded yet.'));
}

// --- repairs: skip and rewind, from the diagram or the list ------------------------------------

const REPAIRABLE = new Set(['running', 'failed']);
const CONTAINERS = new Set(['subProcess', 'callActivity', 'standardLoopTask', 'parallelInstances', 'sequentialInstances', 'transaction']);

// The elements a repair may start from: where it waits or failed (skip), what it passed (rewind).
function repairTargets(status, path) {
  const targets = new Map();
  const add = (elementId, action) => {
    if (!elementId) return;
    const entry = targets.get(elementId) || { skip: false, rewind: false };
    entry[action] = true;
    targets.set(elementId, entry);
  };
  for (const w of path.waiting) if (!CONTAINERS.has(w.kind)) add(w.element_id, 'skip');
  if (status.status === 'failed' && path.failed) add(path.failed.element_id, 'skip');
  for (const p of path.passed) if (!targets.has(p.element_id) || !targets.get(p.element_id).skip) add(p.element_id, 'rewind');
  return targets;
}

function renderRepair(bar, status, path, diagram, picked) {
  const allowed = { skip: can('process.skip'), rewind: can('process.rewind') };
  if (!REPAIRABLE.has(status.status) || !(allowed.skip || allowed.rewind)) {
    bar.hidden = true;
    return;
  }
  bar.hidden = false;
  const name = namer(path, diagram);
  const targets = repairTargets(status, path);
  if (picked.elementId && !targets.has(picked.elementId)) targets.set(picked.elementId, { skip: false, rewind: false });
  const select = h('select', {}, h('option', { value: '' }, 'Pick an element (or click it in the diagram)'),
    [...targets.entries()].map(([elementId, t]) => h('option', { value: elementId, selected: elementId === picked.elementId },
      `${name(elementId)} (${elementId}) — ${t.skip ? (status.status === 'failed' && path.failed && path.failed.element_id === elementId ? 'failed here' : 'waits here') : t.rewind ? 'passed' : 'not passed'}`)));
  const skipButton = h('button', { type: 'button', class: 'secondary', onclick: () => repair('skip', status, select.value, name) }, 'Skip…');
  const rewindButton = h('button', { type: 'button', class: 'secondary', onclick: () => repair('rewind', status, select.value, name) }, 'Rewind here…');
  function update() {
    picked.elementId = select.value || null;
    const t = targets.get(select.value) || {};
    skipButton.disabled = !allowed.skip || !t.skip;
    rewindButton.disabled = !allowed.rewind || !t.rewind;
  }
  select.addEventListener('change', update);
  update();
  replace(bar, field('Repair at an element', select, 'Skip completes where it waits or failed without running it; rewind goes back to an element it passed.'),
    allowed.skip ? skipButton : null, allowed.rewind ? rewindButton : null);
}

async function repair(action, status, elementId, name) {
  if (!elementId) return;
  const method = action === 'skip' ? 'process.skip' : 'process.rewind';
  const params = { instance_id: status.instance_id, element_id: elementId };
  let preview;
  try {
    preview = await call(method, { ...params, dry_run: true });
  } catch (err) {
    announce(err.message, 'error');
    return;
  }
  const editor = jsonEditor('Variables to merge in', {}, 4);
  const label = `${name(elementId)} (${elementId})`;
  const what = action === 'skip'
    ? `${label} completes without running, and the instance goes on from it.`
    : `Instance ${status.instance_id} goes back to ${label} and runs again from there: what it did after it is done again (a chat answer after it is sent again).`;
  const body = h('div', {}, h('p', {}, what),
    preview.cancelled.length
      ? [h('p', {}, h('strong', {}, 'This cancels:')), h('ul', { class: 'cancel-list' },
        preview.cancelled.map((c) => h('li', {}, name(c.element_id), ' ', h('code', {}, c.element_id), ` (${c.kind})`)))]
      : h('p', {}, 'Nothing open is cancelled.'),
    editor.element);
  const done = await dialog(action === 'skip' ? `Skip ${label}?` : `Rewind to ${label}?`, body, {
    submit: action === 'skip' ? 'Skip' : 'Rewind', danger: true,
    onSubmit: () => call(method, { ...params, variables: editor.value() }),
  });
  if (done) {
    announce(action === 'skip' ? `Skipped ${label}.` : `Instance ${status.instance_id} rewound to ${label}.`);
    reloadView();
  }
}

async function editVariables(status) {
  const before = status.variables || {};
  const editor = jsonEditor('Variables', before, 12);
  const done = await dialog(`Edit the variables of instance ${status.instance_id}`, h('div', {},
    h('p', {}, 'Change values, add names or delete them. The change is applied between two steps of the instance and recorded in its history (names, not values).'),
    editor.element), {
    submit: 'Save variables',
    onSubmit: () => {
      const after = editor.value();
      const set = {};
      for (const [key, value] of Object.entries(after)) if (JSON.stringify(value) !== JSON.stringify(before[key])) set[key] = value;
      const remove = Object.keys(before).filter((key) => !(key in after));
      if (!Object.keys(set).length && !remove.length) throw new Error('Nothing changed.');
      return call('process.set_variables', { instance_id: status.instance_id, variables: set, remove });
    },
  });
  if (done) {
    announce(`Variables of instance ${status.instance_id} saved.`);
    reloadView();
  }
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
