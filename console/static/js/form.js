// A task's form, rendered from task.list's `form` and `buttons`. Checking is the server's: its
// message for a field (task.complete's data.field) is shown next to that field.
import { h, humanize, replace } from './dom.js';

export function taskForm(task, complete) {
  const controls = new Map();
  const errors = new Map();
  const formProblem = h('div', { class: 'form-problem', role: 'alert' });
  const fields = task.form.map((f) => {
    const id = `field-${f.id}`;
    const control = controlFor(f, id);
    const error = h('p', { class: 'field-error', id: `${id}-error`, hidden: true });
    control.setAttribute('aria-describedby', error.id);
    if (f.required) control.setAttribute('aria-required', 'true');
    controls.set(f.id, { spec: f, control });
    errors.set(f.id, { error, control });
    const label = h('label', { for: id }, f.label || f.id, f.required ? h('span', { class: 'required', 'aria-hidden': 'true' }, ' *') : null);
    const wrap = f.type === 'boolean'
      ? h('div', { class: 'field field-check' }, control, label, error)
      : h('div', { class: 'field' }, label, control, error);
    return wrap;
  });
  const decisionError = h('p', { class: 'field-error', id: 'decision-error', hidden: true });
  errors.set('decision', { error: decisionError, control: null });
  const buttons = task.buttons.length
    ? task.buttons.map((b, i) => h('button', { type: 'submit', name: 'decision', value: b, class: i === 0 ? 'primary' : 'secondary', 'aria-describedby': 'decision-error' }, humanize(b)))
    : [h('button', { type: 'submit', class: 'primary' }, 'Complete task')];
  const form = h('form', { class: 'task-form', novalidate: true },
    task.form.some((f) => f.required) ? h('p', { class: 'hint' }, 'Fields marked * are required.') : null,
    fields, formProblem, h('div', { class: 'actions' }, buttons), decisionError);

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    for (const { error, control } of errors.values()) {
      error.hidden = true;
      error.textContent = '';
      if (control) control.removeAttribute('aria-invalid');
    }
    replace(formProblem);
    const result = {};
    for (const [name, { spec, control }] of controls) {
      const value = valueOf(spec, control);
      if (value !== undefined) result[name] = value;
    }
    const submitter = event.submitter;
    if (submitter && submitter.name === 'decision') result.decision = submitter.value;
    for (const button of form.querySelectorAll('button')) button.disabled = true;
    try {
      await complete(result);
    } catch (err) {
      const at = err.data && err.data.field && errors.get(err.data.field);
      if (at) {
        at.error.textContent = err.message;
        at.error.hidden = false;
        if (at.control) {
          at.control.setAttribute('aria-invalid', 'true');
          at.control.focus();
        }
      } else {
        replace(formProblem, err.message);
      }
    } finally {
      for (const button of form.querySelectorAll('button')) button.disabled = false;
    }
  });
  return form;
}

function controlFor(f, id) {
  const name = f.id;
  switch (f.type) {
    case 'boolean': {
      const box = h('input', { type: 'checkbox', id, name });
      box.checked = f.default === true || f.default === 'true';
      return box;
    }
    case 'long':
    case 'integer':
      return h('input', { type: 'number', step: '1', inputmode: 'numeric', id, name, value: f.default ?? '' });
    case 'date':
      return h('input', { type: 'date', id, name, value: f.default ?? '' });
    case 'enum': {
      const select = h('select', { id, name }, h('option', { value: '' }, '— choose —'),
        (f.options || []).map((o) => h('option', { value: o.id }, o.name || o.id)));
      select.value = f.default ?? '';
      return select;
    }
    default:
      return h('input', { type: 'text', id, name, value: f.default ?? '', autocomplete: 'off' });
  }
}

// Empty means "not given" (the server applies the default or says the field is required).
function valueOf(f, control) {
  if (f.type === 'boolean') return control.checked;
  const raw = control.value;
  if (raw === '') return undefined;
  if (f.type === 'long' || f.type === 'integer') {
    return /^-?\d+$/.test(raw.trim()) ? Number(raw) : raw;
  }
  return raw;
}
