// Audit log: every administration call (deploys, keys, webhooks, channels, re-sent deliveries, secret
// rotation) with who made it and what it touched; never a secret. Filter by method.
import { call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { field, goTo, pager, table } from '../widgets.js';

export async function render(main, args, query) {
  const method = query.get('method') || '';
  const page = Number(query.get('page') || 1);
  const answer = await call('audit.list', method ? { method, page, per_page: 20 } : { page, per_page: 20 });
  const input = h('input', { type: 'text', value: method, placeholder: 'e.g. channel.update', maxlength: '64' });
  const filter = h('form', { class: 'filters', 'aria-label': 'Filter the audit log' }, field('Method', input),
    h('button', { type: 'submit', class: 'secondary' }, 'Filter'));
  filter.addEventListener('submit', (event) => {
    event.preventDefault();
    goTo(`#/audit?method=${encodeURIComponent(input.value.trim())}`);
  });
  replace(main, h('h1', {}, 'Audit log'),
    h('p', { class: 'muted' }, 'Every administration call that changed something, newest first. Secrets are never recorded.'),
    filter,
    table('Audit log', ['When', 'Who', 'Method', 'Object'], answer.items.map((e) => [
      when(e.at), actor(e.actor), h('code', {}, e.method),
      e.target ? `${e.target.kind} ${e.target.id ?? ''}`.trim() : '—']),
    'Nothing recorded here.'),
    pager(answer, (p) => goTo(`#/audit?method=${encodeURIComponent(method)}&page=${p}`)));
}

function actor(a) {
  if (a.type === 'api_key') return `${a.name} (key ${a.key_id})`;
  return `${a.name} (${a.type})`;
}
