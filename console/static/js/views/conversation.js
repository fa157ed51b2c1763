// One conversation: the transcript (customer, AI, operator and process apart, with times) and
// a reply box (conversation.send). New messages appear by themselves (polling every 2 s).
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { can, current } from '../session.js';
import { announce, describeError, dialog, field, reloadView } from '../widgets.js';

const POLL_MS = 2000;
const PAGE = 50;
const AUTHORS = { customer: 'Customer', ai: 'AI', operator: 'Operator', process: 'Process' };

export async function render(main, [id]) {
  const bindingId = Number(id);
  const known = new Map();
  let oldestPage = 1;
  let total = 0;
  const transcript = h('ol', { class: 'transcript', 'aria-label': 'Messages, oldest first' });
  const older = h('button', { type: 'button', class: 'secondary small', hidden: true }, 'Show older messages');
  const live = h('p', { class: 'muted live' });
  const first = await call('conversation.messages', { binding_id: bindingId, per_page: PAGE });
  const info = await describeConversation(bindingId, first.items);
  merge(first);

  function merge(answer) {
    total = answer.total;
    for (const m of answer.items) known.set(m.message_id, m);
    const wasAtBottom = transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 40;
    const sorted = [...known.values()].sort((a, b) => a.message_id - b.message_id);
    transcript.replaceChildren(...sorted.map(bubble));
    older.hidden = known.size >= total;
    if (wasAtBottom) transcript.scrollTop = transcript.scrollHeight;
  }

  older.addEventListener('click', async () => {
    oldestPage += 1;
    const top = transcript.scrollHeight - transcript.scrollTop;
    merge(await call('conversation.messages', { binding_id: bindingId, page: oldestPage, per_page: PAGE }));
    transcript.scrollTop = transcript.scrollHeight - top;
  });

  const area = h('textarea', { id: 'reply-text', rows: 3, maxlength: 10000, placeholder: 'Write to the customer…' });
  const problem = h('p', { class: 'field-error', role: 'alert' });
  const send = h('button', { type: 'submit', class: 'primary' }, 'Send');
  const reply = can('conversation.send') ? h('form', { class: 'reply', 'aria-label': 'Reply' },
    h('label', { for: 'reply-text' }, 'Reply to the customer'), area, problem,
    h('div', { class: 'actions' }, h('span', { class: 'hint keyboard-only' }, 'Ctrl+Enter sends.'), send)) : h('p', { class: 'muted' }, 'Your API key may read this conversation but not reply (conversation.send).');
  area.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); reply.requestSubmit(); }
  });
  reply.addEventListener('submit', async (event) => {
    event.preventDefault();
    const text = area.value.trim();
    problem.textContent = '';
    if (!text) { problem.textContent = 'Write a message first.'; area.focus(); return; }
    send.disabled = true;
    try {
      await call('conversation.send', { binding_id: bindingId, text });
      area.value = '';
      transcript.scrollTop = transcript.scrollHeight;
      await poll();
      announce('Reply queued for delivery.');
    } catch (err) {
      problem.textContent = describeError(err);
    } finally {
      send.disabled = false;
      area.focus();
    }
  });

  replace(main, h('div', { class: 'chat' },
    h('div', { class: 'chat-head' },
      h('p', { class: 'crumbs' }, h('a', { href: '#/conversations' }, 'Conversations'), ' / ', `#${bindingId}`),
      h('h1', {}, info.title), h('p', { class: 'muted' }, info.meta), holder(bindingId, info.conversation)),
    older, transcript, live, reply));
  transcript.scrollTop = transcript.scrollHeight;

  let timer = null;
  let stopped = false;
  async function poll() {
    try {
      merge(await call('conversation.messages', { binding_id: bindingId, per_page: PAGE }));
      live.textContent = '';
    } catch (err) {
      live.textContent = `Could not refresh: ${err.message}`;
    }
  }
  async function loop() {
    if (stopped) return;
    await poll();
    if (!stopped) timer = setTimeout(loop, POLL_MS);
  }
  timer = setTimeout(loop, POLL_MS);
  return () => { stopped = true; clearTimeout(timer); };
}

// Who answers this customer: the operator holding the conversation, and claim / hand over.
function holder(bindingId, c) {
  if (!c) return null;
  const me = current();
  const mine = c.assignee && c.assignee === me.user;
  const act = (method, params, done) => async () => {
    try {
      await call(method, { binding_id: bindingId, ...params });
      announce(done);
    } catch (err) {
      announce(describeError(err), 'error');
    }
    reloadView();
  };
  const handOver = async () => {
    const user = h('input', { type: 'text', maxlength: 200, autocomplete: 'off', value: c.assignee || '' });
    const done = await dialog('Hand over this conversation', field('To the user', user,
      'An operator\'s user name. Leave it empty to let anyone answer again.'),
    { submit: 'Hand over', onSubmit: () => call('conversation.assign', { binding_id: bindingId, user: user.value.trim() || null }) });
    if (done) { announce(done.assignee ? `${done.assignee} answers this customer now.` : 'Anyone may answer this customer now.'); reloadView(); }
  };
  return h('div', { class: 'holder' },
    c.assignee ? h('span', { class: 'badge badge-held' }, mine ? 'You answer this customer' : `Held by ${c.assignee}`)
      : h('span', { class: 'badge' }, 'Nobody holds it'),
    c.candidate_group ? h('span', { class: 'muted' }, `handed to the group ${c.candidate_group}`) : null,
    can('conversation.claim') && me.user && !c.assignee ? h('button', { type: 'button', class: 'small primary', onclick: act('conversation.claim', {}, 'You answer this customer now.') }, 'Claim') : null,
    can('conversation.assign') ? h('button', { type: 'button', class: 'small secondary', onclick: handOver }, 'Hand over…') : null);
}

function bubble(m) {
  const author = AUTHORS[m.author] || m.author;
  return h('li', { class: `msg msg-${m.author} msg-${m.direction}` },
    h('div', { class: 'msg-head' }, h('span', { class: 'msg-author' }, author), ' ', h('time', { datetime: m.created_at }, when(m.created_at)),
      m.delivery ? h('span', { class: `msg-delivery delivery-${m.delivery}` }, m.delivery) : null),
    h('p', { class: 'msg-text' }, m.text));
}

// conversation.list has no id filter: the header names the customer when the conversation is on
// one of the newest pages of active ones, else only its id.
async function describeConversation(bindingId) {
  try {
    const answer = await call('conversation.list', { per_page: 100 });
    const c = answer.items.find((item) => item.binding_id === bindingId);
    if (c) {
      return {
        conversation: c,
        title: c.external_username || c.external_user_id || c.chat_id,
        meta: [`${c.channel} · chat ${c.chat_id} · `, h('a', { href: `#/instances/${c.instance_id}` }, `instance ${c.instance_id}`), ` · since ${when(c.started_at)}`],
      };
    }
  } catch (err) { /* the transcript is still worth showing */ }
  return { title: `Conversation ${bindingId}`, meta: 'Closed, or not among the newest active conversations.' };
}
