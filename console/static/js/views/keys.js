// API keys: create (the key is shown once, with a copy button), permissions, the operator a key
// stands for (user and groups: who claims tasks and conversations with it), revoke.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { current } from '../session.js';
import { announce, confirmAction, copyButton, dialog, field, goTo, pager, reloadView, table } from '../widgets.js';

const COMMON = [
  ['*', 'everything, administration included'],
  ['admin', 'administration: definitions, keys, webhooks, channels, deliveries'],
  ['process.*', 'start, inspect, cancel, retry and message instances'],
  ['task.*', 'list, claim, hand over and complete tasks'],
  ['conversation.*', 'read conversations and reply'],
];

export async function render(main, args, query) {
  const page = Number(query.get('page') || 1);
  const answer = await call('apikey.list', { page, per_page: 20 });
  const me = current();
  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, 'API keys'),
      h('div', { class: 'actions' }, h('button', { type: 'button', class: 'primary', onclick: create }, 'New key…'))),
    h('p', { class: 'muted' }, 'A key is shown once, when it is created; Baton keeps only its hash. Revoking takes effect on the next call.'),
    table('API keys', ['Name', 'Prefix', 'Permissions', 'Operator', 'Created', 'Status', ''], answer.items.map((k) => [
      h('strong', {}, k.name), h('code', {}, k.prefix), k.permissions.join(', '),
      k.user || (k.groups && k.groups.length) ? [k.user || h('span', { class: 'muted' }, 'no user'),
        k.groups && k.groups.length ? h('span', { class: 'muted' }, ` · groups ${k.groups.join(', ')}`) : null] : '—',
      when(k.created_at),
      k.revoked_at ? h('span', { class: 'badge badge-cancelled' }, `revoked ${when(k.revoked_at)}`) : h('span', { class: 'badge badge-running' }, k.key_id === me.key_id ? 'active (this session)' : 'active'),
      k.revoked_at ? '' : h('button', { type: 'button', class: 'small danger', onclick: () => revoke(k, me) }, 'Revoke…')])),
    pager(answer, (p) => goTo(`#/keys?page=${p}`)));
}

async function create() {
  const name = h('input', { type: 'text', maxlength: 200, autocomplete: 'off' });
  const boxes = COMMON.map(([permission, meaning], i) => {
    const box = h('input', { type: 'checkbox', id: `perm-${i}`, value: permission });
    return [box, h('div', { class: 'field field-check' }, box, h('label', { for: `perm-${i}` }, h('code', {}, permission), ` — ${meaning}`))];
  });
  const others = h('input', { type: 'text', placeholder: 'e.g. process.start, task.list', autocomplete: 'off' });
  const user = h('input', { type: 'text', maxlength: 200, autocomplete: 'off', placeholder: 'e.g. ann' });
  const groups = h('input', { type: 'text', autocomplete: 'off', placeholder: 'e.g. support, billing' });
  const created = await dialog('New API key', h('div', {},
    field('Name', name, 'Who or what uses it, e.g. "crm" or "ann (operator)".'),
    h('fieldset', {}, h('legend', {}, 'Permissions'), boxes.map(([, row]) => row),
      field('Other permissions (comma separated)', others, 'A method name like process.start, or a group like task.*.')),
    h('fieldset', {}, h('legend', {}, 'Operator (optional)'),
      field('User', user, 'The person this key stands for: tasks and conversations they claim are held by this name.'),
      field('Groups (comma separated)', groups, 'Their teams: tasks for these candidate groups appear under "My groups".'))),
  { submit: 'Create key', onSubmit: () => {
    const permissions = [...boxes.filter(([box]) => box.checked).map(([box]) => box.value),
      ...others.value.split(',').map((p) => p.trim()).filter(Boolean)];
    const params = { name: name.value, permissions };
    if (user.value.trim()) params.user = user.value.trim();
    const teams = groups.value.split(',').map((g) => g.trim()).filter(Boolean);
    if (teams.length) params.groups = teams;
    return call('apikey.create', params);
  } });
  if (!created) return;
  const shown = h('input', { type: 'text', readonly: true, value: created.api_key, class: 'code', 'aria-label': 'The new API key' });
  await dialog('Copy the new key now', h('div', {},
    h('p', {}, h('strong', {}, 'This is the only time the key is shown.'), ` Key “${created.name}” with ${created.permissions.join(', ')}`,
      created.user ? ` for ${created.user}` : '', ':'),
    h('div', { class: 'url-cell' }, shown, copyButton(created.api_key, 'Copy key'))), { submit: 'Done', cancel: null });
  reloadView();
}

async function revoke(k, me) {
  const self = k.key_id === me.key_id;
  const ok = await confirmAction(`Revoke key ${k.name}`, self ? 'This is the key you are signed in with: the console signs you out at the next call.' : 'Every caller using it is refused from the next call on.', 'Revoke');
  if (!ok) return;
  try {
    await call('apikey.revoke', { key_id: k.key_id });
    announce(`Key ${k.name} revoked.`);
  } catch (err) {
    announce(err.message, 'error');
  }
  reloadView();
}
