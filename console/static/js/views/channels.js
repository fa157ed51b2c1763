// Channels: list, create (the settings each type needs), edit, enable/disable, delete.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { announce, confirmAction, dialog, field, goTo, pager, reloadView, table } from '../widgets.js';

// The settings keys of each type (INTERFACE §4.4); secrets are never shown again after creation.
const TYPES = {
  webchat: { settings: [], help: 'Your site\'s backend forwards customer messages to Baton; Baton POSTs every answer to the webhook URL.' },
  telegram: { settings: [['bot_token', 'Bot token', true]], help: 'A Telegram bot: Baton checks the token (getMe) and registers its webhook.' },
  viber: { settings: [['auth_token', 'Auth token', true], ['sender_name', 'Sender name', false]], help: 'A Viber bot: Baton checks the token and registers its webhook.' },
  whatsapp: { settings: [['phone_number_id', 'Phone number id', false], ['access_token', 'Access token', true], ['app_secret', 'App secret', true], ['verify_token', 'Verify token', true]], help: 'WhatsApp Cloud API: Baton checks the number and answers Meta\'s verification.' },
};

export async function render(main, args, query) {
  const page = Number(query.get('page') || 1);
  const answer = await call('channel.list', { page, per_page: 20 });
  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Channels'),
      h('div', { class: 'actions' }, h('button', { type: 'button', class: 'primary', onclick: create }, 'New channel…'))),
    table('Channels', ['Name', 'Type', 'Id', 'Webhook URL', 'Signed', 'Status', 'Created', ''], answer.items.map((c) => [
      h('strong', {}, c.name), c.type, String(c.config_id), c.webhook_url ? h('code', { class: 'url' }, c.webhook_url) : '—',
      c.has_secret ? 'yes' : 'no',
      h('span', { class: `badge ${c.enabled ? 'badge-running' : 'badge-cancelled'}` }, c.enabled ? 'enabled' : 'disabled'),
      when(c.created_at),
      h('div', { class: 'row-actions' },
        h('button', { type: 'button', class: 'small secondary', onclick: () => edit(c) }, 'Edit…'),
        h('button', { type: 'button', class: 'small danger', onclick: () => remove(c) }, 'Delete…'))]),
    'No channel yet: create one to let customers chat with your processes.'),
    pager(answer, (p) => goTo(`#/channels?page=${p}`)));
}

async function create() {
  const type = h('select', {}, Object.keys(TYPES).map((t) => h('option', { value: t }, t)));
  const name = h('input', { type: 'text', maxlength: 200, autocomplete: 'off' });
  const url = h('input', { type: 'url', maxlength: 2000, placeholder: 'https://crm.example.com/baton/chat' });
  const secret = h('input', { type: 'password', autocomplete: 'new-password', minlength: 16, maxlength: 255 });
  const settingsBox = h('div', {});
  const help = h('p', { class: 'hint' });
  let inputs = [];
  const showType = () => {
    const spec = TYPES[type.value];
    help.textContent = spec.help;
    inputs = spec.settings.map(([key, label, secretValue]) => [key, h('input', { type: secretValue ? 'password' : 'text', autocomplete: 'off' }), label]);
    replace(settingsBox, inputs.map(([, input, label]) => field(label, input)));
  };
  type.addEventListener('change', showType);
  showType();
  const created = await dialog('New channel', h('div', {},
    field('Type', type), help, field('Name', name, 'Unique in your tenant; a start event names its channel by this name or by its id.'),
    field('Webhook URL', url, 'Where Baton POSTs answers (web chat).'),
    field('Webhook secret (optional)', secret, '16 to 255 characters; signs every request with X-Baton-Signature.'), settingsBox),
  { submit: 'Create channel', onSubmit: () => {
    const params = { type: type.value, name: name.value };
    if (url.value) params.webhook_url = url.value;
    if (secret.value) params.webhook_secret = secret.value;
    if (inputs.length) params.settings = Object.fromEntries(inputs.map(([key, input]) => [key, input.value]));
    return call('channel.create', params);
  } });
  if (created) {
    announce(`Channel ${created.name} created (id ${created.config_id}).`);
    reloadView();
  }
}

async function edit(c) {
  const name = h('input', { type: 'text', value: c.name, maxlength: 200 });
  const url = h('input', { type: 'url', value: c.webhook_url || '', maxlength: 2000 });
  const secret = h('input', { type: 'password', autocomplete: 'new-password', placeholder: c.has_secret ? 'unchanged' : 'none' });
  const dropSecret = h('input', { type: 'checkbox', id: 'drop-secret' });
  const enabled = h('input', { type: 'checkbox', id: 'channel-enabled' });
  enabled.checked = c.enabled;
  const saved = await dialog(`Edit channel ${c.name}`, h('div', {},
    field('Name', name), field('Webhook URL', url),
    field('New webhook secret', secret, 'Leave empty to keep the current one.'),
    c.has_secret ? h('div', { class: 'field field-check' }, dropSecret, h('label', { for: 'drop-secret' }, 'Remove the secret (stop signing)')) : null,
    h('div', { class: 'field field-check' }, enabled, h('label', { for: 'channel-enabled' }, 'Enabled (a disabled channel refuses new messages; running conversations go on)'))),
  { submit: 'Save', onSubmit: () => {
    const params = { config_id: c.config_id, name: name.value, enabled: enabled.checked };
    if (url.value !== (c.webhook_url || '')) params.webhook_url = url.value;
    if (dropSecret.checked) params.webhook_secret = null;
    else if (secret.value) params.webhook_secret = secret.value;
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
