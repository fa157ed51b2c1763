// The console's shell: sign-in, the navigation the key allows, and the hash router.
import { call, forgetKey, storedKey } from './rpc.js';
import { h, replace } from './dom.js';
import { can, current, signedIn, signedOut } from './session.js';
import { errorBox, settleAnnouncement } from './widgets.js';
import { renderSignIn } from './views/signin.js';

const SECTIONS = [
  { href: '#/', label: 'Dashboard', needs: 'auth.whoami' },
  { href: '#/definitions', label: 'Definitions', needs: 'definition.list' },
  { href: '#/instances', label: 'Instances', needs: 'process.list' },
  { href: '#/tasks', label: 'Tasks', needs: 'task.list' },
  { href: '#/conversations', label: 'Conversations', needs: 'conversation.list' },
  { href: '#/channels', label: 'Channels', needs: 'channel.list' },
  { href: '#/keys', label: 'API keys', needs: 'apikey.list' },
  { href: '#/deliveries', label: 'Deliveries', needs: 'delivery.list' },
  { href: '#/audit', label: 'Audit log', needs: 'audit.list' },
];

const ROUTES = [
  [/^\/?$/, 'dashboard', 'auth.whoami', 'Dashboard'],
  [/^\/definitions$/, 'definitions', 'definition.list', 'Definitions'],
  [/^\/definitions\/(\d+)$/, 'definition', 'definition.get', 'Definition'],
  [/^\/instances$/, 'instances', 'process.list', 'Instances'],
  [/^\/instances\/(\d+)$/, 'instance', 'process.status', 'Instance'],
  [/^\/tasks$/, 'tasks', 'task.list', 'Tasks'],
  [/^\/tasks\/(\d+)$/, 'task', 'task.list', 'Task'],
  [/^\/conversations$/, 'conversations', 'conversation.list', 'Conversations'],
  [/^\/conversations\/(\d+)$/, 'conversation', 'conversation.messages', 'Conversation'],
  [/^\/channels$/, 'channels', 'channel.list', 'Channels'],
  [/^\/keys$/, 'keys', 'apikey.list', 'API keys'],
  [/^\/deliveries$/, 'deliveries', 'delivery.list', 'Deliveries'],
  [/^\/audit$/, 'audit', 'audit.list', 'Audit log'],
];

const main = document.getElementById('main');
let cleanup = null;
let generation = 0;

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, search] = raw.split('?');
  return { path, query: new URLSearchParams(search || '') };
}

function renderChrome() {
  const me = current();
  const nav = document.getElementById('nav');
  const who = document.getElementById('who');
  if (!me) {
    nav.replaceChildren();
    who.replaceChildren();
    return;
  }
  const { path } = parseHash();
  const section = `#/${path.split('/')[1] || ''}`;
  replace(nav, h('ul', {}, SECTIONS.filter((s) => can(s.needs)).map((s) => h('li', {},
    h('a', { href: s.href, 'aria-current': s.href === section ? 'page' : null }, s.label)))));
  const active = nav.querySelector('[aria-current="page"]');
  if (active) nav.scrollLeft = Math.max(0, active.offsetLeft - 16);  // a phone's scrolled nav shows where you are
  replace(who,
    h('span', { class: 'who-name', title: `Key ${me.prefix} of tenant ${me.tenant}` }, me.user ? `${me.user} (${me.name}) · ${me.tenant}` : `${me.name} · ${me.tenant}`),
    h('span', { class: 'who-perms', title: 'The permissions of this API key' }, `Permissions: ${me.permissions.join(', ')}`),
    h('button', { type: 'button', class: 'secondary small', onclick: signOut }, 'Sign out'));
}

function signOut() {
  forgetKey();
  signedOut();
  location.hash = '#/';
  route();
}

async function route() {
  const mine = ++generation;
  settleAnnouncement();
  if (cleanup) {
    try { cleanup(); } catch (err) { /* a view's clean-up must not stop the next view */ }
    cleanup = null;
  }
  if (!current()) {
    renderChrome();
    renderSignIn(main, async () => { await route(); });
    return;
  }
  renderChrome();
  const { path, query } = parseHash();
  const found = ROUTES.find(([pattern]) => pattern.test(path));
  if (!found) {
    replace(main, h('h1', {}, 'Not found'), h('p', {}, 'This console has no such page. '), h('a', { href: '#/' }, 'Back to the dashboard'));
    return;
  }
  const [pattern, name, needs, title] = found;
  document.title = `${title} · Baton console`;
  const args = path.match(pattern).slice(1);
  if (!can(needs)) {
    // Ask the server anyway: its refusal names the permission the key lacks.
    let refusal;
    try {
      await call(needs, {});
      refusal = null;
    } catch (err) {
      refusal = err;
    }
    if (mine !== generation) return;
    replace(main, h('h1', {}, title), errorBox(refusal || new Error('Your API key may not open this view.')));
    return;
  }
  // Each navigation renders into its own box: a slower, older view that finishes late writes
  // into a box no longer on the page.
  const slot = h('div', { class: 'view' }, h('p', { class: 'muted' }, 'Loading…'));
  replace(main, slot);
  try {
    const view = await import(`./views/${name}.js`);
    if (mine !== generation) return;
    const done = await view.render(slot, args, query, () => mine !== generation);
    if (mine !== generation) {
      if (typeof done === 'function') done();
      return;
    }
    cleanup = typeof done === 'function' ? done : null;
  } catch (err) {
    if (mine !== generation) return;
    replace(slot, h('h1', {}, title), errorBox(err));
  }
}

async function restore() {
  if (!storedKey()) {
    signedOut();
  } else {
    try {
      signedIn(await call('auth.whoami'));
    } catch (err) {
      forgetKey();
      signedOut();
    }
  }
  await route();
}

window.addEventListener('hashchange', () => { route(); });
window.addEventListener('baton:reload', () => { route(); });
window.addEventListener('baton:unauthorized', () => {
  if (!current()) return;
  forgetKey();
  signedOut();
  route();
});
restore();
