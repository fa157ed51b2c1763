// Small pieces every view uses: page controls, messages, dialogs, a JSON editor, copy buttons.
import { h, replace } from './dom.js';

// What a failed call means to the person: a refusal names the missing permission.
export function describeError(err) {
  if (err && err.reason === 'forbidden') {
    const permission = err.data && err.data.permission;
    return `Not allowed: this needs the permission '${permission}', which your API key lacks.`;
  }
  return (err && err.message) || String(err);
}

export function errorBox(err) {
  return h('div', { class: 'alert alert-error', role: 'alert' }, describeError(err));
}

export function infoBox(text) {
  return h('div', { class: 'alert alert-info' }, text);
}

// The page-wide status line (aria-live): confirmations and errors of actions. A message outlives
// at most the one navigation its action makes (``settleAnnouncement``, called on every route), and
// the next message replaces it.
export function announce(text, kind = 'ok') {
  const region = document.getElementById('status');
  region.className = `status status-${kind}`;
  replace(region, text);
  announce.navigations = 1;
  clearTimeout(announce.timer);
  announce.timer = setTimeout(clearAnnouncement, 8000);
}

function clearAnnouncement() {
  const region = document.getElementById('status');
  region.className = 'status';
  region.replaceChildren();
}

export function settleAnnouncement() {
  if (announce.navigations > 0) announce.navigations -= 1;
  else clearAnnouncement();
}

export function pager(answer, go) {
  const pages = Math.max(1, Math.ceil(answer.total / answer.per_page));
  const first = answer.total === 0 ? 0 : (answer.page - 1) * answer.per_page + 1;
  const last = Math.min(answer.total, answer.page * answer.per_page);
  if (pages === 1 && answer.page === 1) {
    return h('p', { class: 'pager-where' }, answer.total === 1 ? '1 item' : `${answer.total} items`);
  }
  return h('nav', { class: 'pager', 'aria-label': 'Pages' },
    h('button', { type: 'button', disabled: answer.page <= 1, onclick: () => go(answer.page - 1) }, '‹ Previous'),
    h('span', { class: 'pager-where' }, `${first}–${last} of ${answer.total} · page ${answer.page} of ${pages}`),
    h('button', { type: 'button', disabled: answer.page >= pages, onclick: () => go(answer.page + 1) }, 'Next ›'));
}

export function statusBadge(status) {
  return h('span', { class: `badge badge-${status}` }, status);
}

// On a phone (console.css) each row becomes a card whose cells carry their column's name
// (data-label), so nothing is cut off and nothing needs scrolling sideways.
export function table(caption, headers, rows, empty = 'Nothing here yet.') {
  if (rows.length === 0) return h('p', { class: 'empty' }, empty);
  const labels = headers.map((name) => (typeof name === 'string' ? name : (name && name.textContent) || ''));
  return h('div', { class: 'table-wrap' },
    h('table', { class: 'cards-on-phone' },
      h('caption', { class: 'visually-hidden' }, caption),
      h('thead', {}, h('tr', {}, headers.map((name) => h('th', { scope: 'col' }, name)))),
      h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((cell, i) => h('td', { 'data-label': labels[i] || null }, cell)))))));
}

let fieldCount = 0;
// A labelled control: every input of the console has a visible label tied to it.
export function field(labelText, control, hint) {
  const id = control.id || `f${++fieldCount}`;
  control.id = id;
  const hintNode = hint ? h('p', { class: 'hint', id: `${id}-hint` }, hint) : null;
  if (hintNode) control.setAttribute('aria-describedby', hintNode.id);
  return h('div', { class: 'field' }, h('label', { for: id }, labelText), control, hintNode);
}

export function copyButton(getText, label = 'Copy') {
  const button = h('button', { type: 'button', class: 'small' }, label);
  button.addEventListener('click', async () => {
    const text = typeof getText === 'function' ? getText() : getText;
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = 'Copied';
    } catch (err) {
      button.textContent = 'Select and copy';
    }
    setTimeout(() => { button.textContent = label; }, 2000);
  });
  return button;
}

// A modal dialog; resolves with what `onSubmit` returns, or null when cancelled.
// `onSubmit` may throw: its message is shown in the dialog, which stays open.
export function dialog(title, body, { submit = 'OK', danger = false, onSubmit = () => true, cancel = 'Cancel' } = {}) {
  return new Promise((resolve) => {
    const problem = h('div', { class: 'dialog-problem', role: 'alert' });
    const form = h('form', { method: 'dialog', class: 'dialog-form' },
      h('h2', {}, title), body, problem,
      h('div', { class: 'actions' },
        cancel ? h('button', { type: 'button', class: 'secondary', onclick: () => close(null) }, cancel) : null,
        h('button', { type: 'submit', class: danger ? 'danger' : 'primary' }, submit)));
    const box = h('dialog', { class: 'dialog', 'aria-label': title }, form);
    let settled = false;
    function close(value) {
      if (settled) return;
      settled = true;
      box.close();
      box.remove();
      resolve(value);
    }
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      try {
        const value = await onSubmit();
        close(value === undefined ? true : value);
      } catch (err) {
        replace(problem, describeError(err));
      }
    });
    box.addEventListener('cancel', (event) => { event.preventDefault(); close(null); });
    document.body.append(box);
    box.showModal();
  });
}

export function confirmAction(title, message, submit, danger = true) {
  return dialog(title, h('p', {}, message), { submit, danger });
}

// A JSON object editor (a labelled textarea); value() throws a sentence when it is not an object.
export function jsonEditor(label, initial = {}, rows = 6) {
  const area = h('textarea', { class: 'code', rows, spellcheck: 'false' });
  area.value = JSON.stringify(initial, null, 2);
  const element = field(label, area, 'A JSON object, e.g. {"amount": 70}.');
  return {
    element,
    area,
    value() {
      const text = area.value.trim();
      if (text === '') return {};
      let parsed;
      try {
        parsed = JSON.parse(text);
      } catch (err) {
        throw new Error(`${label}: not valid JSON (${err.message}).`);
      }
      if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
        throw new Error(`${label}: must be a JSON object.`);
      }
      return parsed;
    },
  };
}

export function linkButton(href, text, cls = 'button') {
  return h('a', { href, class: cls }, text);
}

// Renders the current view again (after an action changed what it shows).
export function reloadView() {
  window.dispatchEvent(new Event('baton:reload'));
}

// Goes to `hash`, or renders the view again when it is already there.
export function goTo(hash) {
  if (location.hash === hash) reloadView();
  else location.hash = hash;
}
