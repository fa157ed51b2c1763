// Channels: list with each channel's status, the URL a web chat's site calls, the processes a
// channel starts, create (the settings its type needs), edit, delete.
// The form is built from the type descriptions in channel-types.js.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { can } from '../session.js';
import { CHANNEL_TYPES, shownSetting, statusOf, typeOf } from '../channel-types.js';
import { announce, confirmAction, copyButton, dialog, field, goTo, pager, reloadView, table } from '../widgets.js';

export async function render(main, args, query) {
  const page = Number(query.get('page') || 1);
  const answer = await call('channel.list', { page, per_page: 20 });
  const bound = can('definition.list') ? boundProcesses((await call('definition.list', { per_page: 100 })).items) : new Map();
  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Channels'),
      h('div', { class: 'actions' }, h('button', { type: 'button', class: 'primary', onclick: create }, 'New channel…'))),
    table('Channels', ['Name', 'Type', 'Connection', 'Processes', 'Status', 'Created', ''], answer.items.map((c) => [
      h('span', {}, h('strong', {}, c.name), h('span', { class: 'muted' }, ` #${c.config_id}`)),
      typeOf(c).label,
      connection(c),
      processes(bound.get(c.config_id)),
      status(c),
      when(c.created_at),
      h('div', { class: 'row-actions' },
        h('button', { type: 'button', class: 'small secondary', onclick: () => edit(c), 'aria-label': `Edit channel ${c.name}` }, 'Edit…'),
        h('button', { type: 'button', class: 'small danger', onclick: () => remove(c), 'aria-label': `Delete channel ${c.name}` }, 'Delete…'))]),
    'No channel yet: create one to let customers chat with your processes.'),
    pager(answer, (p) => goTo(`#/channels?page=${p}`)));
}

// The newest version of each code whose start event a channel triggers: config id -> [definition].
function boundProcesses(definitions) {
  const newest = new Map();
  for (const d of definitions) if (!newest.has(d.code) || newest.get(d.code).version < d.version) newest.set(d.code, d);
  const bound = new Map();
  for (const d of newest.values()) {
    for (const start of d.start_events || []) {
      if (start.config_id === undefined || start.config_id === null) continue;
      if (!bound.has(start.config_id)) bound.set(start.config_id, []);
      bound.get(start.config_id).push(d);
    }
  }
  return bound;
}

function processes(definitions) {
  if (!definitions || !definitions.length) return h('span', { class: 'muted' }, 'none: a new chat is refused (409)');
  return h('ul', { class: 'plain' }, definitions.map((d) => h('li', {}, h('a', { href: `#/definitions/${d.definition_id}` }, `${d.code} v${d.version}`))));
}

// Where the channel's messages go: the caller's URL for web chat, the messenger's bot otherwise;
// for web chat also the URL its site posts customer messages to.
function connection(c) {
  if (typeOf(c).callerWebhook) {
    const inbound = `${location.origin}/channels/webchat/${c.config_id}/inbound`;
    return h('div', { class: 'connection' },
      h('div', {}, 'the site posts to ', h('div', { class: 'url-cell' }, h('code', { class: 'url' }, inbound), copyButton(inbound, 'Copy'))),
      h('div', { class: 'muted' }, 'with an API key holding conversation.send'),
      c.webhook_url ? h('div', {}, 'answers to ', h('code', { class: 'url' }, c.webhook_url)) : '—',
      h('div', { class: 'muted' }, c.has_secret ? 'signed (X-Baton-Signature)' : 'not signed'));
  }
  const shown = statusOf(c);
  if (shown.length === 0) return h('span', { class: 'muted' }, 'not connected yet');
  return statusList(shown);
}

function statusList(shown) {
  return h('dl', { class: 'connection' }, shown.map(({ key, label, value }) => [h('dt', {}, label),
    h('dd', {}, key.endsWith('_url') ? h('code', { class: 'url' }, value) : value)]));
}

function status(c) {
  return h('div', {},
    h('span', { class: `badge ${c.enabled ? 'badge-running' : 'badge-cancelled'}` }, c.enabled ? 'enabled' : 'disabled'),
    c.last_error ? h('p', { class: 'channel-error' }, `Last error${c.last_error_at ? ` (${when(c.last_error_at)})` : ''}: `, c.last_error) : null);
}

// The inputs of a type's settings; secrets are password fields and, when editing, left empty to keep.
function settingInputs(spec, channel) {
  return spec.settings.map((s) => {
    const input = h('input', {
      type: s.secret ? 'password' : 'text', autocomplete: s.secret ? 'new-password' : 'off',
      maxlength: s.maxlength || 512, inputmode: s.inputmode || null, 'aria-required': channel ? null : 'true',
      placeholder: channel && s.secret ? 'unchanged' : null, dataset: { setting: s.key },
    });
    if (channel && !s.secret) input.value = shownSetting(channel, s.key) || '';
    const hint = channel && s.secret ? `${s.hint} Leave empty to keep the current one.` : s.hint;
    return { key: s.key, input, element: field(channel ? s.label : requiredLabel(s.label), input, hint) };
  });
}

// The server checks every value (and names what is wrong); the mark only says what must be given.
function requiredLabel(text) {
  return [text, h('span', { class: 'required', 'aria-hidden': 'true' }, ' *')];
}

async function create() {
  const type = h('select', {}, Object.entries(CHANNEL_TYPES).map(([key, spec]) => h('option', { value: key }, spec.label)));
  const name = h('input', { type: 'text', maxlength: 200, autocomplete: 'off', 'aria-required': 'true' });
  const url = h('input', { type: 'url', maxlength: 2000, placeholder: 'https://crm.example.com/baton/chat' });
  const secret = h('input', { type: 'password', autocomplete: 'new-password', minlength: 16, maxlength: 255 });
  const webhookBox = h('div', {},
    field(requiredLabel('Webhook URL'), url, 'Where Baton POSTs every answer to the customer.'),
    field('Webhook secret (optional)', secret, '16 to 255 characters; signs every request with X-Baton-Signature.'));
  const settingsBox = h('div', {});
  const help = h('p', { class: 'hint type-help' });
  let inputs = [];
  const showType = () => {
    const spec = CHANNEL_TYPES[type.value];
    help.textContent = spec.help;
    webhookBox.hidden = !spec.callerWebhook;
    url.setAttribute('aria-required', String(spec.callerWebhook));
    inputs = settingInputs(spec, null);
    replace(settingsBox, inputs.map((i) => i.element));
  };
  type.addEventListener('change', showType);
  showType();
  const created = await dialog('New channel', h('div', {},
    field('Type', type), help,
    field(requiredLabel('Name'), name, 'Unique in your tenant; a start event names its channel by this name or by its id.'),
    webhookBox, settingsBox),
  { submit: 'Create channel', onSubmit: () => {
    const params = { type: type.value, name: name.value };
    if (CHANNEL_TYPES[type.value].callerWebhook) {
      if (url.value) params.webhook_url = url.value;
      if (secret.value) params.webhook_secret = secret.value;
    }
    if (inputs.length) params.settings = Object.fromEntries(inputs.map((i) => [i.key, i.input.value]));
    return call('channel.create', params);
  } });
  if (created) {
    announce(`Channel ${created.name} created (id ${created.config_id}).`);
    reloadView();
  }
}

async function edit(listed) {
  // channel.get (where the server has it) is fresher than the list row, and may say more.
  const c = can('channel.get') ? await call('channel.get', { config_id: listed.config_id }).catch(() => listed) : listed;
  const spec = typeOf(c);
  const name = h('input', { type: 'text', value: c.name, maxlength: 200 });
  const url = h('input', { type: 'url', value: c.webhook_url || '', maxlength: 2000 });
  const secret = h('input', { type: 'password', autocomplete: 'new-password', placeholder: c.has_secret ? 'unchanged' : 'none' });
  const dropSecret = h('input', { type: 'checkbox', id: 'drop-secret' });
  const enabled = h('input', { type: 'checkbox', id: 'channel-enabled', checked: c.enabled });
  const inputs = settingInputs(spec, c);
  const shown = statusOf(c);
  const saved = await dialog(`Edit channel ${c.name}`, h('div', {},
    h('p', { class: 'hint' }, `${spec.label} channel #${c.config_id}.`),
    shown.length ? statusList(shown) : null,
    field('Name', name),
    spec.callerWebhook ? [field('Webhook URL', url),
      field('New webhook secret', secret, 'Leave empty to keep the current one.'),
      c.has_secret ? h('div', { class: 'field field-check' }, dropSecret, h('label', { for: 'drop-secret' }, 'Remove the secret (stop signing)')) : null] : null,
    inputs.map((i) => i.element),
    h('div', { class: 'field field-check' }, enabled, h('label', { for: 'channel-enabled' }, 'Enabled (a disabled channel refuses new messages; running conversations go on)'))),
  { submit: 'Save', onSubmit: () => {
    const params = { config_id: c.config_id, name: name.value, enabled: enabled.checked };
    if (spec.callerWebhook) {
      if (url.value !== (c.webhook_url || '')) params.webhook_url = url.value;
      if (dropSecret.checked) params.webhook_secret = null;
      else if (secret.value) params.webhook_secret = secret.value;
    }
    // Settings go only when one changed: a secret typed anew, or a shown value edited.
    const changed = inputs.filter((i) => i.input.value !== (shownSetting(c, i.key) || ''));
    if (changed.length) params.settings = Object.fromEntries(changed.map((i) => [i.key, i.input.value]));
    return call('channel.update', params);
  } });
  if (saved) {
    announce(`Channel ${saved.name} saved.`);
    reloadView();
  }
}

async function remove(c) {
  const ok = await confirmAction(`Delete channel ${c.name}`, 'Its closed conversations and their messages are deleted. A channel with active conversations cannot be deleted: disable it instead.', 'Delete');
  if (!ok) return;
  try {
    await call('channel.delete', { config_id: c.config_id });
    announce(`Channel ${c.name} deleted.`);
  } catch (err) {
    announce(err.message, 'error');
  }
  reloadView();
}
