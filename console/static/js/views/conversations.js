// Active conversations, newest first: mine / unassigned / all, a channel filter; each shows who
// answers the customer, and an unheld one can be claimed from the list.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { can, current } from '../session.js';
import { announce, describeError, field, goTo, pager, reloadView } from '../widgets.js';

const CHANNELS = ['webchat', 'telegram', 'whatsapp', 'viber'];

export async function render(main, args, query) {
  const me = current();
  const tabs = [me.user ? ['mine', 'Mine'] : null, ['unassigned', 'Unassigned'], ['all', 'All']].filter(Boolean);
  const view = tabs.some(([key]) => key === query.get('view')) ? query.get('view') : 'all';
  const channel = query.get('channel') || '';
  const page = Number(query.get('page') || 1);
  const params = { channel: channel || null, page, per_page: 20 };
  if (view === 'mine') params.assignee = 'me';
  if (view === 'unassigned') params.assignee = null;
  const answer = await call('conversation.list', params);
  const hashFor = (changes) => {
    const next = new URLSearchParams(query);
    for (const [k, v] of Object.entries(changes)) {
      if (v === null || v === '' || v === undefined) next.delete(k); else next.set(k, v);
    }
    return `#/conversations?${next}`;
  };
  const select = h('select', {}, h('option', { value: '' }, 'every channel'), CHANNELS.map((c) => h('option', { value: c }, c)));
  select.value = channel;
  const filter = h('form', { class: 'filters', 'aria-label': 'Filter conversations' }, field('Channel', select),
    h('button', { type: 'submit', class: 'secondary' }, 'Filter'));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    goTo(hashFor({ channel: select.value, page: null }));
  });
  const list = answer.items.length === 0
    ? h('p', { class: 'empty' }, view === 'mine' ? 'You hold no conversation.' : 'No active conversation.')
    : h('ul', { class: 'inbox' }, answer.items.map((c) => h('li', { class: 'inbox-row' },
      h('a', { href: `#/conversations/${c.binding_id}`, class: 'inbox-item' },
        h('span', { class: 'inbox-title' }, c.external_username || c.external_user_id || c.chat_id),
        h('span', { class: 'inbox-meta' }, `${c.channel} · chat ${c.chat_id} · instance ${c.instance_id} · last message ${when(c.last_message_at || c.started_at)}`),
        h('span', { class: 'inbox-meta' }, c.assignee ? `held by ${c.assignee}` : 'nobody holds it',
          c.candidate_group ? ` · for the group ${c.candidate_group}` : '')),
      h('div', { class: 'inbox-actions' }, can('conversation.claim') && me.user && !c.assignee
        ? h('button', { type: 'button', class: 'small', 'aria-label': `Claim the conversation with ${c.external_username || c.chat_id}`,
          onclick: async () => {
            try {
              await call('conversation.claim', { binding_id: c.binding_id });
              announce('You answer this customer now.');
            } catch (err) {
              announce(describeError(err), 'error');
            }
            reloadView();
          } }, 'Claim') : null))));
  replace(main, h('h1', {}, 'Conversations'),
    h('nav', { class: 'tabs', 'aria-label': 'Inboxes' }, tabs.map(([key, label]) =>
      h('a', { href: hashFor({ view: key, page: null }), 'aria-current': key === view ? 'page' : null }, label))),
    filter, list, pager(answer, (p) => goTo(hashFor({ page: p }))));
}
