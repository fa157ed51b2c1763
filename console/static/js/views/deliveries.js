// Deliveries: what Baton POSTs out (channel answers, task events): queued and dead, last error, retry.
import { batch, call } from '../rpc.js';
import { h, replace, when } from '../dom.js';
import { announce, field, goTo, pager, reloadView, table } from '../widgets.js';

const STATUSES = ['dead', 'failing', 'queued', 'sent'];  // failing: queued after a failed attempt

export async function render(main, args, query) {
  const status = query.has('status') ? query.get('status') : 'dead';
  const page = Number(query.get('page') || 1);
  const listed = ['delivery.list', status === 'failing' ? { failing: true, page, per_page: 20 } : { status: status || null, page, per_page: 20 }];
  // For the dead page, failing and queued are counted first in the same (ordered) batch: a delivery
  // that gives up between the calls is then counted as failing and as dead, never as "went out".
  const answers = await batch(status === 'dead'
    ? [['delivery.list', { failing: true, per_page: 1 }], ['delivery.list', { status: 'queued', per_page: 1 }], listed]
    : [listed]);
  const failed = answers.find((a) => a.error);
  if (failed) throw failed.error;
  const answer = answers[answers.length - 1].result;
  const [retrying, queued] = answers.length === 3 ? [answers[0].result.total, answers[1].result.total] : [0, 0];
  const select = h('select', {}, STATUSES.map((s) => h('option', { value: s }, s === 'failing' ? 'failing (being retried)' : s)), h('option', { value: '' }, 'all'));
  select.value = status;
  const filter = h('form', { class: 'filters', 'aria-label': 'Filter deliveries' }, field('Status', select),
    h('button', { type: 'submit', class: 'secondary' }, 'Filter'));
  filter.addEventListener('submit', (event) => { event.preventDefault(); goTo(`#/deliveries?status=${select.value}`); });
  replace(main, h('h1', {}, 'Deliveries'),
    h('p', { class: 'muted' }, 'Every answer to a customer and every task event is delivered at least once, retried for 24 hours, then kept as dead.'),
    filter,
    table('Deliveries', ['Id', 'Event', 'URL', 'Status', 'Attempts', 'Last error', 'Created', 'Next attempt', ''], answer.items.map((d) => [
      String(d.delivery_id), d.event, h('code', { class: 'url' }, d.url), deliveryBadge(d),
      String(d.attempts), d.last_error || (d.last_status ? `HTTP ${d.last_status}` : '—'), when(d.created_at), when(d.next_attempt_at),
      d.status === 'sent' ? '' : h('button', { type: 'button', class: 'small', onclick: () => retry(d) }, 'Retry now')]),
    status === 'dead' ? emptyDead(retrying, queued) : 'No delivery here.'),
    pager(answer, (p) => goTo(`#/deliveries?status=${status}&page=${p}`)));
}

// No dead delivery: say whether others are failing or still on their way before "every message went out".
function emptyDead(retrying, queued) {
  if (retrying) return `No dead delivery yet, but ${retrying} failing and being retried.`;
  if (queued) return `No dead delivery; ${queued} on their way.`;
  return 'No dead delivery: every message went out.';
}

function deliveryBadge(d) {
  if (d.status === 'queued' && d.attempts > 0) return h('span', { class: 'badge badge-overdue', title: 'Failed; retried on a schedule' }, 'failing');
  return h('span', { class: `badge badge-${d.status === 'dead' ? 'failed' : d.status === 'sent' ? 'completed' : 'running'}` }, d.status);
}

async function retry(d) {
  try {
    await call('delivery.retry', { delivery_id: d.delivery_id });
    announce(`Delivery ${d.delivery_id} queued again.`);
  } catch (err) {
    announce(err.message, 'error');
  }
  reloadView();
}
