// A task's Camunda Form, drawn by form-js's viewer (vendored; loaded the first time a task has one).
// form-js checks what the form says before anything is sent; the server checks again, and a field
// it refuses (task.complete's data.field) gets that message next to it, as form-js shows its own.
import { h, humanize, replace } from './dom.js';

let loading = null;

function loadFormJs() {
  if (window.FormViewer) return Promise.resolve();
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      document.head.append(h('link', { rel: 'stylesheet', href: 'vendor/form-js.css' }));
      const script = h('script', { src: 'vendor/form-viewer.umd.js' });
      script.addEventListener('load', () => resolve());
      script.addEventListener('error', () => { loading = null; reject(new Error('The form viewer (form-js) did not load.')); });
      document.head.append(script);
    });
  }
  return loading;
}

// The id of the component whose value is at `path` ("address.city"), walking groups' paths.
function componentAt(components, path, prefix = []) {
  for (const c of components || []) {
    if (c.type === 'group' || c.type === 'dynamiclist') {
      const inner = c.path ? [...prefix, ...c.path.split('.')] : prefix;
      const found = c.type === 'group' ? componentAt(c.components, path, inner) : null;
      if (found) return found;
    } else if (c.key && [...prefix, ...c.key.split('.')].join('.') === path) {
      return c;
    }
  }
  return null;
}

export async function camundaForm(task, complete) {
  await loadFormJs();
  const container = h('div', { class: 'form-js-host' });
  const problem = h('div', { class: 'form-problem', role: 'alert' });
  const buttons = task.buttons.length
    ? task.buttons.map((b, i) => h('button', { type: 'submit', name: 'decision', value: b, class: i === 0 ? 'primary' : 'secondary' }, humanize(b)))
    : [h('button', { type: 'submit', class: 'primary' }, 'Complete task')];
  const element = h('form', { class: 'task-form', novalidate: true }, container, problem, h('div', { class: 'actions' }, buttons));
  const form = new window.FormViewer.Form({ container });
  await form.importSchema(task.form_schema, task.variables || {});

  element.addEventListener('submit', async (event) => {
    event.preventDefault();
    replace(problem);
    const { data, errors } = form.submit();
    if (Object.keys(errors).length) {
      replace(problem, 'Some fields need a change: see the messages next to them.');
      const invalid = container.querySelector('[aria-invalid="true"], .fjs-has-errors input, .fjs-has-errors select, .fjs-has-errors textarea');
      if (invalid) invalid.focus();
      return;
    }
    const result = { ...data };
    if (event.submitter && event.submitter.name === 'decision') result.decision = event.submitter.value;
    for (const button of element.querySelectorAll('button')) button.disabled = true;
    try {
      await complete(result);
    } catch (err) {
      const component = err.data && err.data.field ? componentAt(task.form_schema.components, err.data.field) : null;
      if (component && typeof form._setState === 'function') {
        form._setState({ errors: { [component.id]: [err.message] } });  // form-js draws it next to the field
      } else {
        replace(problem, err.message);
      }
    } finally {
      for (const button of element.querySelectorAll('button')) button.disabled = false;
    }
  });
  return { element, destroy: () => form.destroy() };
}
