// Active conversations, newest first, with a channel filter.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { field, goTo, pager } from '../widgets.js';

const CHANNELS = ['webchat', 'telegram', 'whatsapp', 'viber'];

export async function render(main, args, query) {
  const channel = query.get('channel') || '';
  const page = Number(query.get('page') || 1);
  const answer = await call('conversation.list', { channel: channel || null, page, per_page: 20 });
  const select = h('select', {}, h('option', { value: '' }, 'every channel'), CHANNELS.map((c) => h('option', { value: c }, c)));
  select.value = channel;
  const filter = h('form', { class: 'filters', 'aria-label': 'Filter conversations' }, field('Channel', select),
    h('button', { type: 'submit', class: 'secondary' }, 'Filter'));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    goTo(select.value ? `#/conversations?channel=${select.value}` : '#/conversations');
  });
  const list = answer.items.length === 0
    ? h('p', { class: 'empty' }, 'No active conversation.')
    : h('ul', { class: 'inbox' }, answer.items.map((c) => h('li', {},
      h('a', { href: `#/conversations/${c.binding_id}`, class: 'inbox-item' },
        h('span', { class: 'inbox-title' }, c.external_username || c.external_user_id || c.chat_id),
        h('span', { class: 'inbox-meta' }, `${c.channel} · chat ${c.chat_id} · instance ${c.instance_id} · last message ${when(c.last_message_at || c.started_at)}`)))));
  replace(main, h('h1', {}, 'Conversations'), filter, list,
    pager(answer, (p) => goTo(`#/conversations?page=${p}${channel ? `&channel=${channel}` : ''}`)));
}
