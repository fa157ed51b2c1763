// Variables as a tree: objects and arrays fold open, every key and value is text.
import { h } from './dom.js';

const MAX_ITEMS = 200;

export function variablesTree(value, label = 'Variables') {
  if (value === null || typeof value !== 'object' || Object.keys(value).length === 0) {
    return h('p', { class: 'empty' }, 'No variables.');
  }
  return h('div', { class: 'tree', role: 'group', 'aria-label': label }, entries(value, 0));
}

function entries(value, depth) {
  const items = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
  const list = h('ul', {}, items.slice(0, MAX_ITEMS).map(([key, v]) => node(key, v, depth)));
  if (items.length > MAX_ITEMS) list.append(h('li', { class: 'muted' }, `… ${items.length - MAX_ITEMS} more`));
  return list;
}

function node(key, value, depth) {
  if (value !== null && typeof value === 'object') {
    const size = Array.isArray(value) ? `[${value.length}]` : `{${Object.keys(value).length}}`;
    return h('li', {}, h('details', { open: depth < 1 },
      h('summary', {}, h('span', { class: 'tree-key' }, key), ' ', h('span', { class: 'muted' }, size)),
      entries(value, depth + 1)));
  }
  const type = value === null ? 'null' : typeof value;
  const shown = type === 'string' ? JSON.stringify(value) : String(value);
  return h('li', {}, h('span', { class: 'tree-key' }, key), ': ', h('span', { class: `tree-value tree-${type}` }, shown));
}
