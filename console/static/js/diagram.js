// BPMN diagrams drawn by bpmn-js's navigated viewer, with Baton's markers and overlays on top.
import { h } from './dom.js';

// Draws `xml` into a new box inside `host`. Resolves to a Diagram, or to null with `host`
// showing why when the file cannot be drawn (not BPMN, or no diagram layout in it).
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
  try {
    await viewer.importXML(xml);
  } catch (err) {
    viewer.destroy();
    box.replaceChildren(h('p', { class: 'alert alert-warn' }, `This file cannot be drawn: ${err.message}`));
    return null;
  }
  const diagram = new Diagram(viewer);
  if (diagram.shapes().length === 0) {
    viewer.destroy();
    box.replaceChildren(h('p', { class: 'alert alert-warn' },
      'This file has no diagram layout (no BPMNDI section), so there is nothing to draw. Its elements are listed below.'));
    return null;
  }
  diagram.fit();
  controls.append(
    h('button', { type: 'button', class: 'small secondary', title: 'Fit the diagram to the view', onclick: () => diagram.fit() }, 'Fit'),
    h('button', { type: 'button', class: 'small secondary', 'aria-label': 'Zoom in', onclick: () => diagram.zoomBy(1.25) }, '+'),
    h('button', { type: 'button', class: 'small secondary', 'aria-label': 'Zoom out', onclick: () => diagram.zoomBy(0.8) }, '−'));
  return diagram;
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

  clearMarks() {
    for (const [elementId, marker] of this.marked) this.canvas.removeMarker(elementId, marker);
    this.marked = [];
    this.overlays.remove({ type: 'baton' });
  }

  destroy() {
    this.viewer.destroy();
  }
}

// Outlines each refused element in red with its message (definition.deploy's data.errors);
// returns the errors that have no element on the diagram. Each note hangs below its element;
// a note that would cover an earlier note or a refused element moves down below it (neighbours
// are often refused together).
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
  const elements = [...byElement.keys()].map((id) => diagram.registry.get(id))
    .sort((a, b) => (a.y + a.height) - (b.y + b.height) || a.x - b.x);
  const placed = elements.map((e) => ({ x: e.x, y: e.y, w: e.width, h: e.height }));  // in diagram units
  for (const element of elements) {
    diagram.mark(element.id, 'baton-refused');
    const note = h('div', { class: 'refusal-note', role: 'note' },
      byElement.get(element.id).map((e) => h('p', {}, e.line ? `Line ${e.line}: ${e.message}` : e.message)));
    const left = -10;
    let top = element.height + 8;
    let id = diagram.overlays.add(element.id, 'baton', { position: { top, left }, html: note });
    // (the overlay layer is scaled as a whole, so the note's own size is in diagram units)
    const box = () => ({ x: element.x + left, y: element.y + top, w: note.offsetWidth, h: note.offsetHeight });
    let moved = true;
    while (moved) {
      moved = false;
      for (const other of placed) {
        const mine = box();
        if (mine.x < other.x + other.w && other.x < mine.x + mine.w && mine.y < other.y + other.h && other.y < mine.y + mine.h) {
          top = other.y + other.h + 4 - element.y;
          moved = true;
        }
      }
    }
    if (top !== element.height + 8) {
      diagram.overlays.remove(id);
      id = diagram.overlays.add(element.id, 'baton', { position: { top, left }, html: note });
    }
    placed.push(box());
  }
  return unplaced;
}
