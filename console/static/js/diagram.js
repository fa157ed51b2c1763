// BPMN diagrams drawn by bpmn-js's navigated viewer, with Baton's markers and overlays on top.
import { h } from './dom.js';

// Draws `xml` into a new box inside `host`. Resolves to a Diagram, or to null with `host`
// showing why when the file cannot be drawn. A file without diagram layout (no BPMNDI, as many
// tools export) is laid out here by bpmn-auto-layout, and the drawing says that its layout is generated.
export async function drawDiagram(host, xml, label = 'BPMN diagram') {
  const canvasBox = h('div', { class: 'diagram-canvas', role: 'img', 'aria-label': label });
  const controls = h('div', { class: 'diagram-controls' });
  const box = h('div', { class: 'diagram' }, canvasBox, controls);
  host.append(box);
  if (typeof window.BpmnJS !== 'function') {
    box.replaceChildren(h('p', { class: 'alert alert-error' }, 'The diagram viewer (bpmn-js) did not load.'));
    return null;
  }
  const viewer = new window.BpmnJS({ container: canvasBox });
  let problem = null;
  try {
    await viewer.importXML(xml);
  } catch (err) {
    problem = err;
  }
  let diagram = new Diagram(viewer);
  let generated = false;
  if (problem || diagram.shapes().length === 0) {
    try {
      await viewer.importXML(await layOut(xml));
      diagram = new Diagram(viewer);
      generated = diagram.shapes().length > 0;
    } catch (err) {
      problem = problem || err;
    }
  }
  if (!generated && (problem || diagram.shapes().length === 0)) {
    viewer.destroy();
    box.replaceChildren(h('p', { class: 'alert alert-warn' }, problem
      ? `This file cannot be drawn: ${problem.message}`
      : 'This file has no diagram layout (no BPMNDI section), and none could be generated. Its elements are listed below.'));
    return null;
  }
  diagram.generated = generated;
  diagram.fit();
  controls.append(
    h('button', { type: 'button', class: 'small secondary', title: 'Fit the diagram to the view', onclick: () => diagram.fit() }, 'Fit'),
    h('button', { type: 'button', class: 'small secondary', 'aria-label': 'Zoom in', onclick: () => diagram.zoomBy(1.25) }, '+'),
    h('button', { type: 'button', class: 'small secondary', 'aria-label': 'Zoom out', onclick: () => diagram.zoomBy(0.8) }, '−'));
  if (generated) {
    box.before(h('p', { class: 'alert alert-info layout-note' },
      'This file has no diagram layout of its own (no BPMNDI section), so the console laid it out: positions are generated, not the modeler\'s.'));
  }
  return diagram;
}

// bpmn-auto-layout (vendored, loaded the first time a file needs it): the same model with a layout.
let autoLayout = null;
function layOut(xml) {
  if (!autoLayout) {
    autoLayout = new Promise((resolve, reject) => {
      if (window.BpmnAutoLayout) { resolve(window.BpmnAutoLayout); return; }
      const script = h('script', { src: 'vendor/bpmn-auto-layout.min.js' });
      script.addEventListener('load', () => resolve(window.BpmnAutoLayout));
      script.addEventListener('error', () => { autoLayout = null; reject(new Error('the layout library did not load')); });
      document.head.append(script);
    });
  }
  return autoLayout.then((library) => library.layoutProcess(withFlowReferences(xml)));
}

// bpmn-auto-layout follows each element's <incoming>/<outgoing> references, which Camunda Modeler
// writes and many other tools (and hand-written files) leave out: they are added from the
// sequence flows' sourceRef and targetRef, or the flows would be left undrawn.
const BPMN_NS = 'http://www.omg.org/spec/BPMN/20100524/MODEL';
function withFlowReferences(xml) {
  const doc = new DOMParser().parseFromString(xml, 'application/xml');
  if (doc.getElementsByTagName('parsererror').length) return xml;
  const byId = new Map();
  for (const element of doc.getElementsByTagNameNS(BPMN_NS, '*')) if (element.getAttribute('id')) byId.set(element.getAttribute('id'), element);
  const has = (element, tag, id) => [...element.children].some((c) => c.localName === tag && c.namespaceURI === BPMN_NS && c.textContent.trim() === id);
  for (const flow of doc.getElementsByTagNameNS(BPMN_NS, 'sequenceFlow')) {
    const id = flow.getAttribute('id');
    for (const [end, tag] of [['sourceRef', 'outgoing'], ['targetRef', 'incoming']]) {
      const node = byId.get(flow.getAttribute(end));
      if (!node || has(node, tag, id)) continue;
      const reference = doc.createElementNS(BPMN_NS, `${node.prefix ? `${node.prefix}:` : ''}${tag}`);
      reference.textContent = id;
      const extensions = [...node.children].find((c) => c.localName === 'extensionElements' && c.namespaceURI === BPMN_NS);
      node.insertBefore(reference, extensions ? extensions.nextSibling : node.firstChild);
    }
  }
  return new XMLSerializer().serializeToString(doc);
}

class Diagram {
  constructor(viewer) {
    this.viewer = viewer;
    this.canvas = viewer.get('canvas');
    this.registry = viewer.get('elementRegistry');
    this.overlays = viewer.get('overlays');
    this.marked = [];
  }

  shapes() {
    return this.registry.filter((e) => !e.waypoints && e.type !== 'label' && e.businessObject && e.businessObject.$type !== 'bpmn:Process'
      && e.businessObject.$type !== 'bpmn:Collaboration' && e.parent);
  }

  has(elementId) {
    return Boolean(this.registry.get(elementId));
  }

  name(elementId) {
    const element = this.registry.get(elementId);
    return (element && element.businessObject && element.businessObject.name) || elementId;
  }

  fit() {
    this.canvas.zoom('fit-viewport', 'auto');
  }

  zoomBy(factor) {
    this.canvas.zoom(this.canvas.zoom() * factor);
  }

  mark(elementId, marker) {
    if (!this.has(elementId)) return false;
    this.canvas.addMarker(elementId, marker);
    this.marked.push([elementId, marker]);
    return true;
  }

  // Sequence flows whose (source, target) pair is in `pairs` (a Set of "from>to").
  markFlows(pairs, marker) {
    for (const flow of this.registry.filter((e) => e.type === 'bpmn:SequenceFlow')) {
      const bo = flow.businessObject;
      if (bo.sourceRef && bo.targetRef && pairs.has(`${bo.sourceRef.id}>${bo.targetRef.id}`)) this.mark(flow.id, marker);
    }
  }

  // An HTML node (built with DOM calls, never a string) pinned to an element.
  overlay(elementId, node, position, type = 'baton') {
    if (!this.has(elementId)) return false;
    this.overlays.add(elementId, type, { position, html: node });
    return true;
  }

  // Calls fn(elementId) when a shape is clicked (not the process itself, not a flow).
  onClick(fn) {
    this.viewer.get('eventBus').on('element.click', (event) => {
      const element = event.element;
      if (element && !element.waypoints && element.businessObject && element.parent && element.type !== 'label') fn(element.id);
    });
  }

  clearMarks() {
    for (const [elementId, marker] of this.marked) this.canvas.removeMarker(elementId, marker);
    this.marked = [];
    this.overlays.remove({ type: 'baton' });
  }

  destroy() {
    this.viewer.destroy();
  }
}

// Outlines each refused element in red and pins a small badge to its top right corner; the badge
// opens the element's messages (every message is also listed under the diagram). Collapsed badges
// cover nothing of the neighbouring elements (refused elements are often neighbours).
// Returns the errors that have no element on the diagram.
export function showRefusals(diagram, errors) {
  const unplaced = [];
  const byElement = new Map();
  for (const error of errors) {
    if (diagram && error.element_id && diagram.has(error.element_id)) {
      if (!byElement.has(error.element_id)) byElement.set(error.element_id, []);
      byElement.get(error.element_id).push(error);
    } else {
      unplaced.push(error);
    }
  }
  for (const [elementId, found] of byElement) {
    diagram.mark(elementId, 'baton-refused');
    const messages = found.map((e) => h('p', {}, e.line ? `Line ${e.line}: ${e.message}` : e.message));
    const toggle = h('button', { type: 'button', class: 'refusal-toggle', 'aria-expanded': 'false',
      'aria-label': `${found.length === 1 ? 'The problem' : `The ${found.length} problems`} of ${diagram.name(elementId)}`,
      title: found.map((e) => e.message).join('\n') }, found.length === 1 ? '!' : String(found.length));
    const note = h('div', { class: 'refusal-note collapsed', role: 'note' }, toggle, messages);
    toggle.addEventListener('click', () => {
      const open = note.classList.toggle('collapsed') === false;
      toggle.setAttribute('aria-expanded', open ? 'true' : 'false');
      note.parentElement && note.parentElement.classList.toggle('refusal-open', open);
    });
    const element = diagram.registry.get(elementId);
    diagram.overlays.add(elementId, 'baton', { position: { top: -10, left: Math.max(0, element.width - 10) }, html: note });
  }
  return unplaced;
}
