// A definition: its diagram with per-element badges (instances waiting there, failed there,
// passed through it), like Camunda Operate's overlays; a badge lists those instances.
import { batch, call } from '../rpc.js';
import { append, h, replace, when } from '../dom.js';
import { drawDiagram } from '../diagram.js';
import { migrateInstances } from '../migrate.js';
import { can } from '../session.js';
import { startInstance } from '../start.js';
import { errorBox, statusBadge, table } from '../widgets.js';

export async function render(main, [id]) {
  const definitionId = Number(id);
  const [got, stats] = await batch([['definition.get', { definition_id: definitionId }], ['definition.stats', { definition_id: definitionId }]]);
  if (got.error) throw got.error;
  const d = got.result;
  const versions = await call('definition.list', { code: d.code, per_page: 20 });
  // A newer version than this one: its running instances may move there (a dry run first).
  const latest = versions.items[0];
  const migrate = latest && latest.version > d.version && can('process.migrate') && can('definition.diff')
    ? h('button', { type: 'button', class: 'secondary', onclick: (event) => migrateInstances(d, latest, event.currentTarget) }, `Migrate instances to version ${latest.version}…`)
    : null;
  const header = h('div', { class: 'page-head' },
    h('div', {},
      h('p', { class: 'crumbs' }, h('a', { href: '#/definitions' }, 'Definitions'), ' / ', d.code),
      h('h1', {}, `${d.name || d.code} `, h('span', { class: 'muted' }, `${d.code} v${d.version}`))),
    h('div', { class: 'actions' },
      h('a', { class: 'button secondary', href: `#/instances?definition_id=${d.definition_id}` }, 'Instances'),
      migrate,
      h('button', { type: 'button', class: 'primary', onclick: () => startInstance(d) }, 'Start instance…')));
  const versionNav = h('nav', { class: 'versions', 'aria-label': 'Versions' }, 'Versions: ',
    versions.items.map((v) => (v.definition_id === d.definition_id
      ? h('strong', { 'aria-current': 'page' }, `v${v.version}`)
      : h('a', { href: `#/definitions/${v.definition_id}` }, `v${v.version}`))));
  const diagramHost = h('div', { class: 'diagram-host' });
  const statsPanel = h('section', { class: 'panel' }, h('h2', {}, 'Instances per element'));
  replace(main, header, versionNav, diagramHost, legend(), statsPanel);
  const diagram = await drawDiagram(diagramHost, d.bpmn, `Diagram of ${d.code} v${d.version}`);
  if (stats.error) {
    statsPanel.append(errorBox(stats.error));
    return () => diagram && diagram.destroy();
  }
  const s = stats.result;
  const total = Object.values(s.instances).reduce((sum, n) => sum + n, 0);
  const sampled = s.passed_sample < total;  // "passed" read the newest instances' paths only
  append(statsPanel, [h('p', { class: 'status-counts' }, 'All instances of this version: ',
    ['running', 'failed', 'completed', 'cancelled'].map((status) => h('a', { class: 'status-count', href: `#/instances?definition_id=${d.definition_id}&status=${status}` }, statusBadge(status), h('span', {}, String(s.instances[status]))))),
  sampled && s.passed_sample ? h('p', { class: 'hint' }, `“Passed” counts the newest ${s.passed_sample} of ${total} instances only (reading each one's path has a cost); waiting and failed count every instance.`) : null]);
  const link = (elementId, at) => `#/instances?definition_id=${d.definition_id}&element_id=${encodeURIComponent(elementId)}&at=${at}`;
  for (const e of s.elements) {
    if (!diagram) break;
    if (e.waiting) diagram.overlay(e.element_id, h('a', { class: 'count-badge waiting', href: link(e.element_id, 'waiting'), title: `${e.waiting} instance(s) waiting at ${e.element_id}: list them` }, String(e.waiting)), { bottom: 10, left: -10 });
    if (e.failed) diagram.overlay(e.element_id, h('a', { class: 'count-badge failed', href: link(e.element_id, 'failed'), title: `${e.failed} instance(s) failed at ${e.element_id}: list them` }, String(e.failed)), { bottom: 10, right: 10 });
    if (e.passed) diagram.overlay(e.element_id, h('span', { class: 'count-badge passed', title: sampled ? `passed by ${e.passed} of the newest ${s.passed_sample} instances` : `passed by ${e.passed} instance(s)` }, String(e.passed)), { top: -12, right: 10 });
  }
  append(statsPanel, [table('Instances per element', ['Element', 'Waiting', 'Failed', sampled ? `Passed (newest ${s.passed_sample})` : 'Passed'],
    s.elements.map((e) => [
      h('span', {}, diagram ? diagram.name(e.element_id) : e.element_id, ' ', h('code', { class: 'muted' }, e.element_id)),
      e.waiting ? h('a', { href: link(e.element_id, 'waiting') }, String(e.waiting)) : '0',
      e.failed ? h('a', { href: link(e.element_id, 'failed') }, String(e.failed)) : '0',
      String(e.passed)]), 'No instance has reached any element yet.'),
  h('p', { class: 'muted' }, `Deployed ${when(d.created_at)}.`)]);
  return () => diagram && diagram.destroy();
}

function legend() {
  return h('p', { class: 'legend' },
    h('span', { class: 'count-badge waiting' }, 'n'), ' waiting there  ',
    h('span', { class: 'count-badge failed' }, 'n'), ' failed there  ',
    h('span', { class: 'count-badge passed' }, 'n'), ' passed through');
}
