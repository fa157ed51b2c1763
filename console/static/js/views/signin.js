// Sign-in: an API key typed once, checked with auth.whoami, kept in sessionStorage (no cookies).
import { call, storeKey } from '../rpc.js';
import { h, replace } from '../dom.js';
import { signedIn } from '../session.js';
import { describeError, field } from '../widgets.js';

export function renderSignIn(main, done) {
  const input = h('input', { type: 'password', name: 'api_key', autocomplete: 'off', required: true, spellcheck: 'false', placeholder: 'bt_…' });
  const problem = h('div', { role: 'alert', class: 'form-problem' });
  const button = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h('form', { class: 'signin card', novalidate: true },
    h('h1', {}, 'Sign in to Baton'),
    h('p', {}, 'Type an API key of your tenant. The console keeps it in this browser tab only (session storage) and sends it with every call; closing the tab forgets it.'),
    field('API key', input, 'Keys look like bt_0123456789ab_…; an administrator creates them under API keys.'),
    problem,
    h('div', { class: 'actions' }, button));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) {
      replace(problem, 'Type an API key first.');
      input.focus();
      return;
    }
    button.disabled = true;
    try {
      const me = await call('auth.whoami', {}, key);
      storeKey(key);
      signedIn(me);
      input.value = '';
      await done();
    } catch (err) {
      replace(problem, err.reason === 'unauthorized' ? 'This API key was refused: it is unknown, revoked or mistyped.' : describeError(err));
      input.focus();
    } finally {
      button.disabled = false;
    }
  });
  replace(main, form);
  input.focus();
}
