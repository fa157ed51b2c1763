// Definitions: upload (drag and drop or picker; a refusal is drawn on the diagram), the deployed
// versions, and the webhook URLs with copy and rotate.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { drawDiagram, showRefusals } from '../diagram.js';
import { startInstance } from '../start.js';
import { announce, confirmAction, copyButton, errorBox, goTo, pager, reloadView, table } from '../widgets.js';

export async function render(main, args, query) {
  const page = Number(query.get('page') || 1);
  const hooksPage = Number(query.get('hooks') || 1);
  const [definitions, webhooks] = await Promise.all([
    call('definition.list', { page, per_page: 20 }),
    call('webhook.list', { page: hooksPage, per_page: 10 })]);
  const result = h('div', { class: 'upload-result', 'aria-live': 'polite' });
  const go = (p, h2 = hooksPage) => goTo(`#/definitions?page=${p}&hooks=${h2}`);
  replace(main,
    h('h1', {}, 'Definitions'),
    uploadZone(result),
    result,
    h('section', { class: 'panel' }, h('h2', {}, 'Deployed versions'),
      table('Deployed definitions', ['Code', 'Version', 'Name', 'Start events', 'Deployed', ''],
        definitions.items.map((d) => [
          h('a', { href: `#/definitions/${d.definition_id}` }, d.code),
          `v${d.version}`, d.name || '—',
          h('ul', { class: 'plain' }, d.start_events.map((s) => h('li', {}, h('code', {}, s.element_id), s.trigger ? ` · ${s.trigger}${s.channel ? ` (${s.channel})` : ''}` : ' · process.start'))),
          when(d.created_at),
          h('button', { type: 'button', class: 'small', onclick: () => startInstance(d) }, 'Start…')]),
        'Nothing deployed yet: drop a .bpmn file above.'),
      pager(definitions, (p) => go(p))),
    h('section', { class: 'panel' }, h('h2', {}, 'Webhooks'),
      h('p', { class: 'muted' }, 'A POST of a JSON object to a URL starts the latest version of its code. The URL is the credential: share it like a password.'),
      table('Webhook URLs', ['Code', 'Start event', 'URL', 'Signed', ''], webhooks.items.map((w) => [
        w.code, h('code', {}, w.start_event_id),
        h('div', { class: 'url-cell' }, h('code', { class: 'url' }, w.url), copyButton(w.url, 'Copy URL')),
        w.has_secret ? 'yes' : 'no',
        h('button', { type: 'button', class: 'small secondary', onclick: () => rotate(w) }, 'Rotate…')]),
      'No webhook start event deployed.'),
      pager(webhooks, (p) => go(page, p))));
}

async function rotate(webhook) {
  const ok = await confirmAction('Rotate webhook URL', `The current URL for ${webhook.code} / ${webhook.start_event_id} stops working at once; callers need the new one.`, 'Rotate');
  if (!ok) return;
  try {
    await call('webhook.rotate', { webhook_id: webhook.webhook_id });
    announce('Webhook URL rotated: copy the new one.');
    reloadView();
  } catch (err) {
    announce(err.message, 'error');
  }
}

function uploadZone(result) {
  const input = h('input', { type: 'file', accept: '.bpmn,.xml,application/xml,text/xml', class: 'visually-hidden', id: 'bpmn-file' });
  const zone = h('div', { class: 'dropzone', tabindex: '-1' },
    h('p', {}, h('strong', {}, 'Deploy a BPMN file: '), 'drop a .bpmn file here, or ',
      h('label', { for: 'bpmn-file', class: 'button', tabindex: '0', role: 'button' }, 'choose a file…')),
    h('p', { class: 'hint' }, 'Each upload adds a version of its code. A file Baton cannot run is refused and drawn with the refused elements outlined.'),
    input);
  const label = zone.querySelector('label');
  label.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); input.click(); }
  });
  input.addEventListener('change', () => { if (input.files[0]) upload(input.files[0], result); input.value = ''; });
  zone.addEventListener('dragover', (event) => { event.preventDefault(); zone.classList.add('dragging'); });
  zone.addEventListener('dragleave', () => zone.classList.remove('dragging'));
  zone.addEventListener('drop', (event) => {
    event.preventDefault();
    zone.classList.remove('dragging');
    const file = event.dataTransfer.files[0];
    if (file) upload(file, result);
  });
  return zone;
}

async function upload(file, result) {
  replace(result, h('p', { class: 'muted' }, `Deploying ${file.name}…`));
  let xml;
  try {
    xml = await file.text();
  } catch (err) {
    replace(result, errorBox(new Error(`${file.name} cannot be read.`)));
    return;
  }
  try {
    const deployed = await call('definition.deploy', { bpmn: xml });
    announce(`Deployed ${deployed.code} v${deployed.version}.`);
    location.hash = `#/definitions/${deployed.definition_id}`;
  } catch (err) {
    const errors = (err.data && err.data.errors) || [];
    if (errors.length === 0) {
      replace(result, errorBox(err));
      return;
    }
    await showRefused(result, file.name, xml, errors);
  }
}

async function showRefused(result, name, xml, errors) {
  const heading = h('h2', {}, `${name} was refused: ${errors.length} problem${errors.length === 1 ? '' : 's'}`);
  const panel = h('section', { class: 'panel refused', 'aria-labelledby': 'refused-title' }, heading);
  heading.id = 'refused-title';
  replace(result, panel);
  const diagram = await drawDiagram(panel, xml, `The refused file ${name}, with each refused element outlined in red`);
  const unplaced = showRefusals(diagram, errors);
  panel.append(h('h3', {}, 'Every problem'), h('ol', { class: 'refusals' }, errors.map((e) => h('li', { class: unplaced.includes(e) ? 'unplaced' : null },
    e.element_id ? h('code', {}, e.element_id) : h('em', {}, 'the file'), e.line ? ` (line ${e.line})` : '', ': ', e.message))),
  h('p', { class: 'hint' }, 'Nothing was stored. Fix the file in your modeler and drop it again.'));
}
