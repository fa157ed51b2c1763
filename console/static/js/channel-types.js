// What the console knows of each channel type (INTERFACE §4.4), so the channel form and list are
// built from data: the settings `channel.create` takes (every one required; secrets are write-only,
// never returned), whether the caller gives a webhook URL (web chat) or Baton registers its own
// with the messenger, and the status fields `channel.list` / `channel.get` report for the type.
// The server checks the credentials with the messenger before it stores anything: a refusal (a
// wrong token, a messenger that cannot be reached) comes back as the call's error and the form
// shows it next to the setting it names.

export const CHANNEL_TYPES = {
  webchat: {
    label: 'Web chat',
    help: 'Your site\'s backend forwards customer messages to Baton; Baton POSTs every answer to your webhook URL.',
    callerWebhook: true,
    settings: [],
    status: [],
  },
  telegram: {
    label: 'Telegram',
    help: 'A Telegram bot (create it with @BotFather). Baton checks the token (getMe) and registers its own webhook with Telegram; BATON_PUBLIC_URL must be https.',
    callerWebhook: false,
    settings: [
      { key: 'bot_token', label: 'Bot token', secret: true, hint: 'From @BotFather, like 123456789:AAH…' },
    ],
    status: [['bot_name', 'Bot'], ['bot_username', 'Username'], ['webhook_url', 'Registered webhook']],
  },
  viber: {
    label: 'Viber',
    help: 'A Viber bot. Baton checks the token (get_account_info) and registers its own webhook; Viber calls it once to check it.',
    callerWebhook: false,
    settings: [
      { key: 'auth_token', label: 'Auth token', secret: true, hint: 'Viber: Settings › Bots › Edit Info › Your app key.' },
      { key: 'sender_name', label: 'Sender name', secret: false, maxlength: 28, hint: 'Shown on replies; at most 28 characters.' },
    ],
    status: [['bot_name', 'Bot'], ['bot_uri', 'Bot URI'], ['webhook_url', 'Registered webhook']],
  },
  whatsapp: {
    label: 'WhatsApp',
    help: 'The WhatsApp Cloud API. Baton checks the number; then enter the callback URL and the verify token in Meta\'s webhook configuration.',
    callerWebhook: false,
    settings: [
      { key: 'phone_number_id', label: 'Phone number ID', secret: false, inputmode: 'numeric', hint: 'Meta: WhatsApp › API Setup.' },
      { key: 'access_token', label: 'Access token', secret: true, hint: 'A permanent (system user) token with whatsapp_business_messaging.' },
      { key: 'app_secret', label: 'App secret', secret: true, hint: 'Meta: App settings › Basic; checks X-Hub-Signature-256.' },
      { key: 'verify_token', label: 'Verify token', secret: true, hint: 'Any string you choose; type the same into Meta\'s webhook form.' },
    ],
    status: [['bot_name', 'Verified name'], ['display_phone_number', 'Number'], ['webhook_url', 'Callback URL (enter it at Meta)']],
  },
};

export function typeOf(channel) {
  return CHANNEL_TYPES[channel.type] || { label: channel.type, help: '', callerWebhook: Boolean(channel.webhook_url), settings: [], status: [] };
}

// The non-secret settings a channel answer shows (`settings` object; secrets are never in it).
export function shownSetting(channel, key) {
  const settings = channel.settings || {};
  return settings[key] === undefined ? null : settings[key];
}

// The channel's status for its type: {key, label, value} of each reported field that has a value.
export function statusOf(channel) {
  return typeOf(channel).status
    .filter(([key]) => channel[key] !== undefined && channel[key] !== null && channel[key] !== '')
    .map(([key, label]) => ({ key, label, value: String(channel[key]) }));
}
