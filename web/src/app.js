// app.js: the sandboxd dashboard. Sign in, the caller's sandboxes kept live by the event
// stream (GET /v1/events/stream), launching, a sandbox's page with its terminals and events,
// and for admins the fleet and the users. Pages are hash routes:
//   #/  #/launch  #/agent  #/sandbox/<id>  #/fleet  #/users
// Ownership is the server's: the page shows what the API answers and nothing more.
import { agentCardFacts, agentPage, agentPanel, agentPid, isAgentProcess, renderAgentPanel,
  useShell } from './agents.js';
import { api, onUnauthorized, seg, setCsrf } from './api.js';
import { envEditor, field, h, mib, plural, rerender, visible, when } from './dom.js';

// xterm.js (~340 KiB) loads where a terminal is about to open, not with the list
let terminalModule = null;
function loadTerminal() {
  terminalModule ??= import('./terminal.js').catch((e) => {
    terminalModule = null;
    throw e;
  });
  return terminalModule;
}

// states that count against a user's caps (docs/api.md)
const ACTIVE = ['pending', 'starting', 'running', 'stopping', 'suspending', 'suspended',
  'resuming'];
// the event stream's event names that concern sandboxes
const EVENT_TYPES = ['created', 'state', 'updated', 'destroy_failed', 'process.started',
  'process.exited', 'file.read', 'file.written', 'file.removed', 'egress.allowed',
  'egress.denied', 'agent'];

const app = {
  me: null, // GET /v1/whoami
  caps: null, // GET /v1/capabilities
  sandboxes: new Map(), // id -> sandbox, every one the caller sees that is not terminated
  ended: new Map(), // id -> sandbox, the terminated ones the server still lists
  busy: new Map(), // id -> what is being done to it ("Stopping…")
  stream: null,
  lastSeq: 0,
  live: 'off',
  view: null, // the current page: {el, update(), event(ev), dispose()}
  wanted: null, // the page asked for before signing in, opened after
  listeners: new Set(), // functions called after any change to sandboxes
  focusAgent: null, // the id of a sandbox whose page opens with its agent's terminal focused
};

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const toasts = document.getElementById('toasts');

// ---- small pieces ----

// A form's submit: the button disabled (and relabelled busy) while fn runs; a failure's
// message (what describe says of it) shown in `error`. The button comes back either way.
async function submitting(button, error, busy, fn, describe = (e) => e.message) {
  const text = button.textContent;
  button.disabled = true;
  if (busy) button.textContent = busy;
  error.hidden = true;
  try {
    await fn();
  } catch (e) {
    error.textContent = visible(describe(e)); // the server's words may quote a guest's
    error.hidden = false;
  } finally {
    button.disabled = false;
    button.textContent = text;
  }
}

function toast(text, kind = 'info') {
  const t = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' },
    text);
  toasts.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 9000 : 4000);
}

function isAdmin() {
  return app.me && app.me.role === 'admin';
}

function label(sb) {
  return sb.name || sb.id;
}

function stateBadge(state) {
  return h('span', { class: `state state-${state}` }, state);
}

function changed() {
  for (const fn of app.listeners) fn();
}

// Why the caller cannot launch now, or null.
function launchBlocked() {
  if (!app.me) return 'sign in first';
  if (isAdmin())
    return 'Admins supervise every sandbox but cannot launch one: sign in with a user ' +
      'account to launch.';
  const caps = app.me.caps;
  if (caps && caps.max_sandboxes) {
    const n = usage().sandboxes;
    if (n >= caps.max_sandboxes)
      return `cap reached: ${n} of ${caps.max_sandboxes} active sandboxes ` +
        '(stop or delete one to launch another)';
  }
  return null;
}

// What the caller's active sandboxes hold, counted from the live list (a user's list holds
// only their own).
function usage() {
  const u = { sandboxes: 0, cpus: 0, memory_mb: 0 };
  for (const sb of app.sandboxes.values()) {
    if (!ACTIVE.includes(sb.state)) continue;
    if (app.me && app.me.user && sb.owner !== app.me.user) continue;
    u.sandboxes++;
    u.cpus += sb.cpus;
    u.memory_mb += sb.memory_mb;
  }
  return u;
}

// ---- the session ----

async function boot() {
  onUnauthorized(() => signedOut('Your session ended: sign in again.'));
  window.addEventListener('hashchange', route);
  // the skip link moves the focus; the address's #... is the router's
  document.querySelector('.skip').addEventListener('click', (ev) => {
    ev.preventDefault();
    main.focus();
  });
  try {
    const me = await api('GET', '/v1/whoami', undefined, { quiet401: true });
    await signedIn(me);
  } catch (e) {
    if (e.status === 401) showLogin();
    else fatal(e);
  }
}

function fatal(e) {
  rerender(main, h('section', { class: 'panel' }, h('h1', {}, 'sandboxd cannot be reached'),
    h('p', {}, e.message), h('button', { onclick: () => location.reload() }, 'Try again')));
}

async function signedIn(me) {
  app.me = me;
  setCsrf(me.csrf_token);
  try {
    app.caps = await api('GET', '/v1/capabilities');
  } catch (e) {
    app.caps = null;
  }
  renderHeader();
  openStream();
  await loadSandboxes();
  const next = app.wanted || location.hash;
  app.wanted = null;
  if (next === '' || next === '#/login') location.hash = '#/';
  else if (next !== location.hash) location.hash = next;
  else route();
}

function signedOut(message) {
  closeStream();
  app.me = null;
  app.lastSeq = 0;
  app.sandboxes.clear();
  app.ended.clear();
  app.busy.clear();
  setCsrf(null);
  renderHeader();
  showLogin(message);
}

async function logout() {
  try {
    await api('POST', '/v1/auth/logout');
  } catch (e) {
    // the session is gone either way
  }
  history.replaceState(null, '', '#/login'); // the next one to sign in starts at the list
  signedOut('Signed out.');
}

function showLogin(message) {
  disposeView();
  document.title = 'Sign in · sandboxd';
  if (location.hash !== '#/login') {
    if (location.hash.length > 2) app.wanted = location.hash;
    history.replaceState(null, '', '#/login');
  }
  const error = h('p', { class: 'error', id: 'login-error', role: 'alert', hidden: true });
  const email = h('input', { id: 'login-email', type: 'email', name: 'email', required: true,
    autocomplete: 'username' });
  const password = h('input', { id: 'login-password', type: 'password', name: 'password',
    required: true, autocomplete: 'current-password' });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h('form', { class: 'panel login', 'aria-describedby': 'login-error' },
    h('h1', {}, 'Sign in to sandboxd'),
    message ? h('p', { class: 'notice', role: 'status' }, message) : null,
    h('label', { for: 'login-email' }, 'Email'), email,
    h('label', { for: 'login-password' }, 'Password'), password,
    error, submit);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    await submitting(submit, error, 'Signing in…', async () => {
      const r = await api('POST', '/v1/auth/login',
        { email: email.value.trim(), password: password.value }, { quiet401: true });
      setCsrf(r.csrf_token);
      const me = await api('GET', '/v1/whoami');
      if (!me.csrf_token) me.csrf_token = r.csrf_token;
      await signedIn(me);
    }, (e) => {
      password.select();
      return e.status === 429 && e.retryAfter
        ? `${e.message} (try again in ${e.retryAfter} s)` : e.message;
    });
  });
  rerender(main, form);
  email.focus();
}

function renderHeader() {
  const links = [];
  if (app.me) {
    links.push(['#/', 'Sandboxes'], ['#/launch', 'Launch'], ['#/agent', 'Agent']);
    if (isAdmin()) links.push(['#/fleet', 'Fleet'], ['#/users', 'Users']);
  }
  const current = location.hash.split('/').slice(0, 2).join('/') || '#';
  rerender(nav, links.map(([href, text]) => h('a', {
    href, 'aria-current': (href === '#/' ? current === '#' || current === '#/' || current ===
      '#/sandbox' : current === href) ? 'page' : false,
  }, text)));
  if (!app.me) {
    rerender(who);
    return;
  }
  const live = app.live === 'on' ? 'live' : app.live === 'off' ? 'offline' : 'reconnecting…';
  rerender(who,
    h('span', { class: `live live-${app.live}`, title: `live updates: ${live}`,
      role: 'status' }, h('span', { class: 'live-text' }, live)),
    h('span', { class: 'me' }, h('span', { class: 'email' }, app.me.email || app.me.user),
      h('span', { class: 'role' }, app.me.role)),
    h('button', { type: 'button', onclick: logout, class: 'quiet' }, 'Sign out'));
}

// ---- the sandboxes and the event stream ----

async function loadSandboxes() {
  try {
    const r = await api('GET', '/v1/sandboxes');
    app.sandboxes.clear();
    app.ended.clear();
    // terminated ones are listed until the server forgets them (its --forget-after)
    for (const sb of r.sandboxes)
      (sb.state === 'terminated' ? app.ended : app.sandboxes).set(sb.id, sb);
    changed();
  } catch (e) {
    if (e.status !== 401) toast(`Could not list sandboxes: ${e.message}`, 'error');
  }
}

function openStream() {
  closeStream();
  const url = app.lastSeq ? `/v1/events/stream?since=${app.lastSeq}` : '/v1/events/stream';
  const es = new EventSource(url);
  app.stream = es;
  setLive('connecting');
  es.onopen = () => {
    setLive('on');
    // a reconnect may have missed changes that were not events of ours: read the list again
    loadSandboxes();
  };
  es.onerror = () => {
    if (app.stream !== es) return;
    if (es.readyState === EventSource.CLOSED) {
      // refused (401 once the session ended): find out whether we are still signed in
      setLive('off');
      app.stream = null;
      setTimeout(async () => {
        if (!app.me) return;
        try {
          await api('GET', '/v1/whoami');
          openStream();
        } catch (e) {
          if (e.status !== 401) setTimeout(openStream, 3000);
        }
      }, 2000);
    } else {
      setLive('connecting'); // EventSource reconnects with Last-Event-ID by itself
    }
  };
  for (const type of EVENT_TYPES) es.addEventListener(type, (msg) => streamEvent(msg));
}

function closeStream() {
  if (app.stream) app.stream.close();
  app.stream = null;
  setLive('off');
}

function setLive(state) {
  if (app.live === state) return;
  app.live = state;
  renderHeader();
}

function streamEvent(msg) {
  let ev;
  try {
    ev = JSON.parse(msg.data);
  } catch (e) {
    return;
  }
  if (ev.seq > app.lastSeq) app.lastSeq = ev.seq;
  const sb = ev.sandbox;
  if (sb) {
    if (sb.state === 'terminated') {
      app.sandboxes.delete(sb.id);
      app.ended.set(sb.id, sb);
    } else {
      app.sandboxes.set(sb.id, sb);
    }
    if (ev.type === 'state' && sb.state === 'failed')
      toast(`${label(sb)} failed: ${sb.reason || 'no reason given'}`, 'error');
  }
  app.view?.event?.(ev);
  changed();
}

// ---- actions on a sandbox ----

const confirming = new Map(); // id -> timer: Delete was pressed once, press again to delete

const ACTIONS = {
  stop: { busy: 'Stopping…', text: 'Stop', ok: ['running', 'suspended'],
    why: 'only a running sandbox can be stopped' },
  start: { busy: 'Starting…', text: 'Start', ok: ['stopped', 'failed'],
    why: 'only a stopped or failed sandbox can be started' },
  // shown where the server can suspend (capabilities.suspend)
  suspend: { busy: 'Suspending…', text: 'Suspend', ok: ['running'], offered: 'suspend',
    why: 'only a running sandbox can be suspended' },
  resume: { busy: 'Resuming…', text: 'Resume', ok: ['suspended'], offered: 'suspend',
    why: 'only a suspended sandbox can be resumed' },
  delete: { busy: 'Deleting…', text: 'Delete', ok: ['pending', 'starting', 'running',
    'stopping', 'stopped', 'suspending', 'suspended', 'resuming', 'failed'],
    why: 'it is already gone' },
};

// Why a user's stopped or failed sandbox cannot start again now (their cap), or null.
function capReached() {
  if (isAdmin()) return null;
  const caps = app.me.caps;
  const n = usage().sandboxes;
  return caps && caps.max_sandboxes && n >= caps.max_sandboxes
    ? `cap reached: ${n} of ${caps.max_sandboxes} active sandboxes` : null;
}

function actionButtons(sb) {
  const busy = app.busy.get(sb.id); // the action under way, if any
  const offered = Object.entries(ACTIONS)
    .filter(([, a]) => !a.offered || app.caps?.capabilities?.[a.offered] === true);
  return h('div', { class: 'actions' }, offered.map(([name, a]) => {
    let why = a.ok.includes(sb.state) ? null : a.why;
    if (name === 'start' && !why) why = capReached();
    if (busy) why = ACTIONS[busy].busy;
    const confirm = name === 'delete' && confirming.has(sb.id) && !why;
    const text = busy === name ? a.busy : confirm ? `Delete ${label(sb)}?` : a.text;
    return h('button', {
      type: 'button', class: name === 'delete' ? 'danger' : '',
      'data-key': `${name}-${sb.id}`, disabled: !!why, title: why || `${a.text} ${label(sb)}`,
      'aria-label': confirm ? `Press again to delete ${label(sb)}` : `${a.text} ${label(sb)}`,
      onclick: () => act(sb, name),
    }, text);
  }));
}

async function act(sb, name) {
  if (name === 'delete' && !confirming.has(sb.id)) {
    // a second press within 5 s deletes: nothing is lost to a stray Enter
    confirming.set(sb.id, setTimeout(() => {
      confirming.delete(sb.id);
      changed();
    }, 5000));
    changed();
    return;
  }
  clearTimeout(confirming.get(sb.id));
  confirming.delete(sb.id);
  const a = ACTIONS[name];
  app.busy.set(sb.id, name);
  changed();
  try {
    if (name === 'delete') {
      await api('DELETE', `/v1/sandboxes/${seg(sb.id)}`);
      app.sandboxes.delete(sb.id);
      toast(`Deleted ${label(sb)}.`);
    } else {
      const r = await api('POST', `/v1/sandboxes/${seg(sb.id)}/${name}`);
      app.sandboxes.set(r.id, r);
      if (r.state === 'failed') toast(`${label(r)} failed: ${r.reason}`, 'error');
      else toast(`${label(r)} is ${r.state}.`);
    }
  } catch (e) {
    toast(`${a.text} ${label(sb)}: ${e.message}`, 'error');
  } finally {
    app.busy.delete(sb.id);
    changed();
  }
}

// ---- pages ----

function disposeView() {
  app.view?.dispose?.();
  app.view = null;
  app.listeners.clear();
}

function route() {
  if (!app.me) {
    showLogin();
    return;
  }
  disposeView();
  renderHeader();
  const parts = location.hash.replace(/^#\/?/, '').split('/');
  let view;
  if (parts[0] === 'sandbox' && parts[1]) view = sandboxPage(decodeURIComponent(parts[1]));
  else if (parts[0] === 'launch') view = launchPage();
  else if (parts[0] === 'agent') view = agentPage();
  else if (parts[0] === 'fleet') view = fleetPage();
  else if (parts[0] === 'users') view = usersPage();
  else view = listPage();
  app.view = view;
  if (view.update) app.listeners.add(view.update);
  rerender(main, view.el);
  view.mounted?.();
}

function page(title, ...children) {
  document.title = `${title} · sandboxd`;
  return h('section', { class: 'page' }, ...children);
}

// #/ : the caller's sandboxes (everyone's for an admin, with owners)
function listPage() {
  const list = h('div', { class: 'cards', 'aria-live': 'polite' });
  const capLine = h('p', { class: 'hint' });
  const ended = h('div', { class: 'ended-wrap' });
  const launch = h('a', { href: '#/launch', class: 'button primary', 'data-key': 'launch' },
    'Launch a sandbox');
  const agent = h('a', { href: '#/agent', class: 'button', 'data-key': 'agent' },
    'Start an agent on a task');
  const el = page('Sandboxes',
    h('div', { class: 'title-row' }, h('h1', {}, isAdmin() ? 'All sandboxes' : 'Your sandboxes'),
      h('div', { class: 'actions' }, agent, launch)),
    capLine, list, ended);
  function update() {
    endedList(ended);
    // the link stays usable: the launch page says the same, beside its disabled button
    const blocked = launchBlocked();
    capLine.textContent = blocked || capsText();
    capLine.classList.toggle('error', !!blocked);
    const sbs = [...app.sandboxes.values()].sort((a, b) =>
      (b.created_at || '').localeCompare(a.created_at || ''));
    if (!sbs.length) {
      rerender(list, h('p', { class: 'empty' }, isAdmin() ? 'No sandboxes on this server.'
        : 'You have no sandboxes yet. Launch one to get a terminal in a microVM.'));
      return;
    }
    // a card is built again only when what it shows changed: its sandbox (a new object per
    // event), an action under way, a delete waiting for its second press, or the cap that
    // may disable Start; an event about one sandbox rebuilds one card, not a hundred
    const cap = capReached() || '';
    const sig = (sb) => `${app.busy.get(sb.id) || ''}|${confirming.has(sb.id)}|` +
      `${sb.state === 'stopped' || sb.state === 'failed' ? cap : ''}`;
    const els = sbs.map((sb) => {
      const c = cards.get(sb.id);
      if (c && c.sb === sb && c.sig === sig(sb)) return c.el;
      const fresh = { sb, sig: sig(sb), el: card(sb) };
      cards.set(sb.id, fresh);
      return fresh.el;
    });
    for (const id of cards.keys()) if (!app.sandboxes.has(id)) cards.delete(id);
    rerender(list, els);
  }
  const cards = new Map(); // id -> { sb, sig, el }
  update();
  return { el, update };
}

function capsText() {
  const caps = app.me.caps;
  if (!caps || isAdmin()) return '';
  const u = usage();
  const part = (n, max, unit) => (max ? `${n} of ${max}${unit}` : `${n}${unit}`);
  return `In use: ${part(u.sandboxes, caps.max_sandboxes, ' sandboxes')}, ` +
    `${part(u.cpus, caps.max_cpus, ' CPUs')}, ${part(u.memory_mb, caps.max_memory_mb, ' MiB')}.`;
}

function card(sb) {
  return h('article', { class: `card state-${sb.state}-card`, 'data-id': sb.id },
    h('div', { class: 'card-head' },
      h('h2', {}, h('a', { href: `#/sandbox/${seg(sb.id)}`, 'data-key': `open-${sb.id}` },
        label(sb))),
      stateBadge(sb.state)),
    sb.reason && sb.state === 'failed'
      ? h('p', { class: 'reason error' }, `failed: ${sb.reason}`) : null,
    h('dl', { class: 'facts' },
      h('dt', {}, 'id'), h('dd', { class: 'mono' }, sb.id),
      h('dt', {}, 'image'), h('dd', {}, sb.image),
      h('dt', {}, 'size'), h('dd', {}, `${plural(sb.cpus, 'CPU', 'CPUs')}, ${mib(sb.memory_mb)}`),
      agentCardFacts(sb),
      isAdmin() || (app.me.user && sb.owner !== app.me.user)
        ? [h('dt', {}, 'owner'), h('dd', { class: 'owner' }, sb.owner)] : null),
    actionButtons(sb));
}

// The terminated sandboxes the server still lists, folded away under the cards: what ended,
// and why (deleted, idle, lifetime), until the server forgets them.
function endedList(wrap) {
  const sbs = [...app.ended.values()].sort((a, b) =>
    (b.created_at || '').localeCompare(a.created_at || ''));
  const open = wrap.querySelector('details')?.open || false;
  // built again only when the set changed: an event about a live sandbox leaves it be
  const sig = sbs.map((sb) => `${sb.id}:${sb.owner}`).join(',');
  if (wrap.dataset.sig === sig) return;
  wrap.dataset.sig = sig;
  if (!sbs.length) {
    rerender(wrap, []);
    return;
  }
  rerender(wrap, h('details', { class: 'ended', open },
    h('summary', { 'data-key': 'ended' }, `Ended recently (${sbs.length})`),
    h('ul', {}, sbs.map((sb) => h('li', { 'data-id': sb.id },
      h('a', { href: `#/sandbox/${seg(sb.id)}` }, label(sb)), ' ',
      h('span', { class: 'reason' }, sb.reason ? `ended: ${sb.reason}` : 'ended'),
      isAdmin() || (app.me.user && sb.owner !== app.me.user)
        ? h('span', { class: 'owner' }, ` · ${sb.owner}`) : null,
      h('small', {}, ` · created ${when(sb.created_at)}`))))));
}

// #/launch
function launchPage() {
  const limits = app.caps?.limits || {};
  const network = app.caps?.network || { ceiling: 'none' };
  const error = h('p', { class: 'error', role: 'alert', hidden: true, id: 'launch-error' });
  const why = h('p', { class: 'blocked', id: 'launch-why' });
  const image = h('select', { id: 'f-image', name: 'image' },
    h('option', { value: '' }, 'the server default'));
  const num = (id, value, min, max) => h('input', { id, type: 'number', value, min, max,
    step: 1, required: true, inputmode: 'numeric', 'aria-describedby': `${id}-hint` });
  const name = h('input', { id: 'f-name', name: 'name', pattern: '[a-z0-9][a-z0-9\\-]{0,62}',
    maxlength: 63, autocomplete: 'off', 'aria-describedby': 'f-name-hint' });
  const cpus = num('f-cpus', 1, 1, limits.max_cpus || 64);
  const memory = num('f-memory', 512, 64, limits.max_memory_mb || 16384);
  const disk = num('f-disk', 4096, 64, limits.max_disk_mb || 65536);
  const noNet = network.ceiling === 'none';
  const allow = h('textarea', { id: 'f-allow', rows: 3, disabled: noNet, spellcheck: 'false',
    placeholder: noNet ? '' : 'pypi.org\n*.github.com', 'aria-describedby': 'f-allow-hint' });
  const envForm = envEditor('f');
  const submit = h('button', { type: 'submit', class: 'primary', 'aria-describedby':
    'launch-why' }, 'Launch');
  const form = h('form', { class: 'panel launch', novalidate: false },
    field('f-name', 'Name (optional)', name,
      'lowercase letters, digits and -, up to 63; unique among your sandboxes'),
    field('f-image', 'Image', image, null),
    h('div', { class: 'row3' },
      field('f-cpus', 'CPUs', cpus, `1 to ${limits.max_cpus || '?'}`),
      field('f-memory', 'Memory (MiB)', memory, `64 to ${limits.max_memory_mb || '?'}`),
      field('f-disk', 'Disk (MiB)', disk, `64 to ${limits.max_disk_mb || '?'}`)),
    field('f-allow', 'Network allowlist', allow, noNet
      ? 'This server gives sandboxes no network (its ceiling is "none").'
      : 'Host names the sandbox may reach, one per line or separated by commas; ' +
        'empty: no network at all.'),
    h('fieldset', {}, h('legend', {}, 'Environment secrets'),
      h('p', { class: 'hint' }, 'Set as environment variables in this sandbox only: never ' +
        'written into the image, never shown again, never logged.'),
      envForm.rows, envForm.button),
    error, why, submit);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (launchBlocked()) return;
    const body = {
      wait: false,
      cpus: Number(cpus.value),
      memory_mb: Number(memory.value),
      disk_mb: Number(disk.value),
    };
    if (image.value) body.image = image.value;
    if (name.value.trim()) body.name = name.value.trim();
    const hosts = allow.value.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);
    if (!noNet) body.network = hosts.length ? { mode: 'allowlist', allow: hosts } : { mode: 'none' };
    const vars = envForm.values();
    if (Object.keys(vars).length) body.env = vars;
    await submitting(submit, error, 'Launching…', async () => {
      const sb = await api('POST', '/v1/sandboxes', body);
      app.sandboxes.set(sb.id, sb);
      toast(`Launching ${label(sb)}: ${sb.state}.`);
      location.hash = '#/';
    });
  });
  const el = page('Launch', h('h1', {}, 'Launch a sandbox'), form);
  function update() {
    const blocked = launchBlocked();
    why.textContent = blocked || capsText();
    why.classList.toggle('error', !!blocked);
    if (submit.textContent === 'Launch') submit.disabled = !!blocked;
  }
  update();
  fillImages(image);
  return { el, update, mounted: () => name.focus() };
}

// A launch form's image select: the installed images (GET /v1/images), prefer's selected when
// it is installed, else the server's default; "the server default" alone when none is.
function fillImages(select, prefer) {
  api('GET', '/v1/images').then((r) => {
    const installed = r.images.filter((i) => i.state === 'installed');
    const want = installed.find((i) => i.image === prefer);
    select.replaceChildren();
    if (!installed.length) select.append(h('option', { value: '' }, 'the server default'));
    for (const i of installed)
      select.append(h('option', { value: i.image, selected: want ? i === want : i.default },
        i.default ? `${i.image} (default)` : i.image));
  }).catch((e) => toast(`Could not list images: ${e.message}`, 'error'));
}

// #/sandbox/<id>: details, terminals, events
function sandboxPage(id) {
  const head = h('div', { class: 'title-row' });
  const facts = h('dl', { class: 'facts wide' });
  const tabs = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Terminals' });
  const termArea = h('div', { class: 'term-area' });
  const termNote = h('p', { class: 'hint' });
  const events = h('ol', { class: 'events', reversed: true });
  const newTerm = h('button', { type: 'button', class: 'primary', 'data-key': 'new-term',
    onclick: () => newTerminal() }, 'New terminal');
  const termSection = h('section', { class: 'panel terminals', 'aria-label': 'Terminals' },
    h('div', { class: 'title-row' }, h('h2', {}, 'Terminals'), newTerm), tabs, termArea,
    termNote);
  const agentBox = agentPanel();
  const preview = previewPanel();
  const el = page('Sandbox', head, h('section', { class: 'panel' }, facts), agentBox,
    termSection, preview.el,
    h('section', { class: 'panel' }, h('h2', {}, 'Events'), events));
  let sb = null;
  let disposed = false;
  const sessions = []; // TerminalSession
  let active = null;
  // the Events panel is the audit trail: GET …/events, then the records the stream's events
  // carry (ev.audit), each once: those after the answer's last_seq, or with no seq at all
  const records = []; // {rec, live}: oldest first
  let trailSeq = null; // the answer's last_seq, once it came
  const early = []; // stream events that came before it

  function update() {
    if (!sb) return;
    const live = app.sandboxes.get(sb.id);
    if (live) sb = live;
    document.title = `${label(sb)} · sandboxd`;
    rerender(head, h('h1', {}, label(sb), ' ', stateBadge(sb.state)), actionButtons(sb));
    rerender(facts,
      sb.reason ? [h('dt', {}, 'reason'), h('dd', { class: sb.state === 'failed' ? 'error' : '' },
        sb.reason)] : null,
      h('dt', {}, 'id'), h('dd', { class: 'mono' }, sb.id),
      h('dt', {}, 'image'), h('dd', {}, sb.image),
      h('dt', {}, 'CPUs'), h('dd', {}, sb.cpus),
      h('dt', {}, 'memory'), h('dd', {}, mib(sb.memory_mb)),
      h('dt', {}, 'disk'), h('dd', {}, mib(sb.disk_mb)),
      h('dt', {}, 'network'), h('dd', {}, sb.network.mode === 'allowlist'
        ? `allowlist: ${sb.network.allow.join(', ')}` : sb.network.mode),
      h('dt', {}, 'environment'), h('dd', {}, sb.env_names.length
        ? sb.env_names.join(', ') : 'none'),
      h('dt', {}, 'owner'), h('dd', { class: 'owner' }, sb.owner),
      h('dt', {}, 'created'), h('dd', {}, when(sb.created_at)),
      sb.expires_at ? [h('dt', {}, 'expires'), h('dd', {}, when(sb.expires_at))] : null);
    const running = sb.state === 'running';
    preview.update(sb);
    newTerm.disabled = !running;
    newTerm.title = running ? 'Start a shell in the sandbox' : `the sandbox is ${sb.state}; ` +
      'terminals need it running';
    termNote.textContent = running
      ? (sessions.length ? 'Keyboard: F6 leaves the terminal. Closing the page leaves the ' +
        'shell running; come back to it here.' : 'No terminal open: start one with New terminal.')
      : `The sandbox is ${sb.state}; terminals need it running.`;
    renderTabs();
    renderAgentPanel(agentBox, sb);
    agentTerminal();
  }

  function close(s) {
    sessions.splice(sessions.indexOf(s), 1);
    s.dispose();
    if (active === s) {
      active = null;
      if (sessions.length) activate(sessions[sessions.length - 1], false);
    }
    update();
  }

  function renderTabs() {
    rerender(tabs, sessions.map((s, i) => [h('button', {
      type: 'button', role: 'tab', 'aria-selected': s === active ? 'true' : 'false',
      'data-key': `tab-${s.pid}`, class: `tab tab-${s.status}`,
      onclick: () => activate(s),
      onkeydown: (ev) => {
        if (ev.key === 'ArrowRight' || ev.key === 'ArrowLeft') {
          const j = (i + (ev.key === 'ArrowRight' ? 1 : -1) + sessions.length) % sessions.length;
          activate(sessions[j], false);
          tabs.querySelector(`[data-key="tab-${sessions[j].pid}"]`)?.focus();
        }
      },
    }, s.title ?? `Terminal ${s.pid ?? '…'}`, h('span', { class: 'tab-status' },
      tabStatus(s))),
    s.status === 'exited' || s.status === 'gone' ? h('button', {
      type: 'button', class: 'quiet tab-close', 'data-key': `close-${s.pid}`,
      'aria-label': `Close terminal ${s.pid}`, title: 'Close this terminal',
      onclick: () => close(s),
    }, '×') : null]));
  }

  function tabStatus(s) {
    if (s.status === 'connected') return `${s.cols}×${s.rows}`;
    if (s.status === 'exited') return `exited, ${s.detail}`;
    return s.detail ? `${s.status}, ${s.detail}` : s.status;
  }

  function activate(s, focus = true) {
    active = s;
    for (const x of sessions) x.el.hidden = x !== s;
    s.resize();
    renderTabs();
    if (focus) s.focus();
  }

  function session(TerminalSession) {
    const s = new TerminalSession(sb.id, { onStatus: () => {
      if (!disposed) renderTabs();
      termArea.dataset.rows = active?.rows ?? '';
      termArea.dataset.cols = active?.cols ?? '';
    } });
    s.onEscape = () => tabs.querySelector(`[data-key="tab-${s.pid}"]`)?.focus();
    sessions.push(s);
    s.mount(termArea);
    return s;
  }

  async function newTerminal() {
    newTerm.disabled = true;
    let TerminalSession;
    try {
      ({ TerminalSession } = await loadTerminal());
    } catch (e) {
      toast(`New terminal: ${e.message}`, 'error');
      update();
      return;
    }
    if (disposed) return;
    const s = session(TerminalSession);
    activate(s);
    try {
      // bash when the image has it; /bin/sh is always there
      const p = await api('POST', `/v1/sandboxes/${seg(sb.id)}/processes`, {
        argv: ['/bin/sh', '-c', 'if [ -x /bin/bash ]; then exec /bin/bash -l; ' +
          'else exec /bin/sh -l; fi'],
        tty: true, rows: s.rows, cols: s.cols, keep: true,
      });
      if (disposed) return;
      s.attach(p.pid, { fresh: true });
      activate(s);
    } catch (e) {
      toast(`New terminal: ${e.message}`, 'error');
      sessions.splice(sessions.indexOf(s), 1);
      s.dispose();
      active = sessions[sessions.length - 1] || null;
      if (active) activate(active, false);
    } finally {
      update();
    }
  }

  // After a reload, or from another browser: attach again to the shells still running.
  let reattaching = false;
  async function reattach() {
    if (reattaching) return;
    reattaching = true;
    let r, TerminalSession;
    try {
      r = await api('GET', `/v1/sandboxes/${seg(sb.id)}/processes`);
      if (r.processes.some((p) => p.tty && (p.state === 'running' || isAgentProcess(sb, p))))
        ({ TerminalSession } = await loadTerminal());
    } catch (e) {
      if (e.status !== 409) toast(`Listing terminals: ${e.message}`, 'error');
      return;
    } finally {
      reattaching = false;
    }
    if (disposed) return;
    for (const p of r.processes) {
      // the agent's terminal is shown even once it exited: what it printed, and its code
      const agent = isAgentProcess(sb, p);
      if (!p.tty || (p.state !== 'running' && !agent) || sessions.some((s) => s.pid === p.pid))
        continue;
      const s = session(TerminalSession);
      if (agent) {
        s.agent = true;
        s.title = `${sb.agent.name} (agent)`;
      }
      s.attach(p.pid);
    }
    const agentSession = sessions.find((s) => s.agent);
    if (agentSession && app.focusAgent === sb.id) {
      app.focusAgent = null; // just launched from #/agent: straight into its terminal
      activate(agentSession, true);
    } else if (sessions.length && !active) {
      activate(agentSession || sessions[0], false);
    }
    update();
  }

  // The agent's process came (the page opened while it was being cloned or started): attach.
  let agentTried = null;
  function agentTerminal() {
    const pid = agentPid(sb);
    if (pid === null || pid === agentTried || sb.state !== 'running' || reattaching) return;
    if (sessions.some((s) => s.pid === pid)) return;
    agentTried = pid;
    reattach();
  }

  function renderEvents() {
    rerender(events, records.slice(-300).reverse().map(eventItem));
  }

  function addTrail(answer) {
    for (const rec of answer.events) records.push({ rec, live: null });
    trailSeq = answer.last_seq ?? 0;
    for (const ev of early.splice(0)) addLive(ev);
    renderEvents();
  }

  // a stream event of this sandbox: its record, with what the stream says besides
  function addLive(ev) {
    if (!ev.audit) return;
    if (trailSeq === null) {
      early.push(ev);
      return;
    }
    if (ev.seq && ev.seq <= trailSeq) return; // the trail had it
    records.push({ rec: ev.audit, live: ev.data });
    renderEvents();
  }

  async function load() {
    try {
      sb = await api('GET', `/v1/sandboxes/${seg(id)}`);
    } catch (e) {
      if (disposed) return;
      if (e.status === 404) {
        document.title = 'Not found · sandboxd';
        rerender(main, page('Not found', h('section', { class: 'panel not-found' },
          h('h1', {}, 'Sandbox not found'),
          h('p', {}, `There is no sandbox '${id}' among yours.`),
          h('a', { href: '#/', class: 'button' }, 'Back to your sandboxes'))));
      } else {
        toast(`Sandbox ${id}: ${e.message}`, 'error');
      }
      return;
    }
    if (disposed) return;
    update();
    if (sb.state === 'running') reattach();
    try {
      const r = await api('GET', `/v1/sandboxes/${seg(sb.id)}/events`);
      if (!disposed) addTrail(r);
    } catch (e) {
      if (e.status !== 401) toast(`Events: ${e.message}`, 'error');
    }
  }

  function event(ev) {
    if (!sb || ev.sandbox_id !== sb.id) return;
    if (ev.sandbox) sb = ev.sandbox;
    addLive(ev);
    if (ev.type === 'state' && ev.data.from === 'running') {
      // its processes are gone: the terminals say so and stop reconnecting
      for (const s of sessions) if (s.exitCode === null) s.end(`sandbox ${ev.data.to}`);
    }
    if (ev.type === 'state' && (ev.data.to === 'running' || ev.data.to === 'terminated')) {
      // a new boot (or none): the terminals of the last one are history
      for (const s of [...sessions]) if (s.status === 'gone' || s.status === 'exited') close(s);
      if (ev.data.to === 'running') reattach();
    }
    update();
  }

  function dispose() {
    disposed = true;
    for (const s of sessions) s.dispose();
  }

  load();
  return { el, update, event, dispose };
}

// "Open preview": a web server the sandbox runs on a port, opened in a new tab on an origin of
// its own (http://p-ID-PORT.localhost:7071/, docs/api.md "Previews"), never this page's: its
// script cannot reach the dashboard or the API. The tab is opened at the click (a popup
// blocker allows that) without a way back to this page (opener cut), then sent to the URL.
function previewPanel() {
  const port = h('input', { id: 'preview-port', type: 'number', min: 1, max: 65535, step: 1,
    value: 3000, required: true, inputmode: 'numeric', 'data-key': 'preview-port',
    'aria-describedby': 'preview-hint' });
  const open = h('button', { type: 'submit', class: 'primary', 'data-key': 'preview-open' },
    'Open preview');
  const hint = h('small', { id: 'preview-hint' });
  const error = h('p', { class: 'error', role: 'alert', hidden: true });
  const link = h('p', { class: 'hint preview-link' });
  let sb = null;
  const form = h('form', { class: 'preview-form' },
    h('div', { class: 'field' }, h('label', { for: 'preview-port' }, 'Port'), port, hint),
    open, error, link);
  const el = h('section', { class: 'panel', 'aria-label': 'Preview' },
    h('h2', {}, 'Preview'), form);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (!sb || !port.reportValidity()) return;
    const tab = window.open('about:blank', '_blank');
    if (tab) tab.opener = null;
    await submitting(open, error, 'Opening…', async () => {
      try {
        const r = await api('POST', `/v1/sandboxes/${seg(sb.id)}/previews`,
          { port: Number(port.value) });
        rerender(link, 'Opened ', h('a', { href: r.url, target: '_blank',
          rel: 'noopener noreferrer', class: 'mono' }, `port ${r.port}`),
          ' in a new tab (the link opens it again).');
        if (tab) tab.location.replace(r.url);
      } catch (e) {
        if (tab) tab.close();
        throw e;
      }
    });
  });
  function update(now) {
    sb = now;
    const offered = app.caps?.capabilities?.preview === true;
    const running = sb.state === 'running';
    open.disabled = !offered || !running;
    hint.textContent = !offered
      ? 'This server does not serve previews (--preview-listen off).'
      : running ? 'A web server the sandbox runs on this port (on 127.0.0.1 or 0.0.0.0), ' +
        'opened in a new tab on an address of its own.'
        : `The sandbox is ${sb.state}; previews need it running.`;
  }
  return { el, update };
}

// One record of the audit trail (docs/api.md, "Events"); live: what the stream said besides
// (an egress connection's way, address and bytes each way), when it came live.
function eventItem({ rec: r, live }) {
  let text;
  switch (r.type) {
    case 'sandbox.created':
      text = `created from ${r.image}, network ${r.network?.mode ?? '?'}` +
        (r.env_names?.length ? `, environment ${r.env_names.join(', ')}` : '') +
        (r.reason ? ` (${r.reason})` : '');
      break;
    case 'sandbox.network_updated':
      text = `network ${r.network?.mode ?? '?'}` +
        (r.network?.allow?.length ? `: ${r.network.allow.join(', ')}` : '');
      break;
    case 'sandbox.started':
    case 'sandbox.stopped':
    case 'sandbox.suspended':
    case 'sandbox.resumed':
      text = r.type.split('.')[1];
      break;
    case 'sandbox.failed':
      text = `failed: ${r.reason ?? 'no reason given'}`;
      break;
    case 'sandbox.terminated':
      text = `ended: ${r.reason}`;
      break;
    case 'process.started':
      text = `process ${r.pid} started: ${r.program}` +
        (r.arg_count ? ` (${plural(r.arg_count, 'argument', 'arguments')})` : '') +
        ` in ${r.cwd}`;
      break;
    case 'process.exited':
      // -1: its timeout_secs ended it (API v1), not an exit code of its own
      text = r.exit_code === -1
        ? `process ${r.pid} was ended by its timeout after ${r.duration_ms} ms`
        : `process ${r.pid} exited with code ${r.exit_code} after ${r.duration_ms} ms`;
      break;
    case 'file.read':
    case 'file.written':
    case 'file.removed':
      text = `${r.path} (${plural(r.bytes, 'byte', 'bytes')})`;
      break;
    case 'egress.allowed':
      text = live?.via
        ? `${live.via} ${live.name}:${live.port} → ${live.addr ?? 'not connected'} ` +
          `(${live.bytes_out} B out, ${live.bytes_in} B in${live.cut ? ', cut' : ''})`
        : `${r.name}:${r.port} (${plural(r.bytes, 'byte', 'bytes')})`;
      break;
    case 'egress.denied':
      text = `${live?.via ? `${live.via} ` : ''}${r.name ?? '(no name)'}:${r.port}: ${r.reason}`;
      break;
    default: {
      const { time, type, sandbox, ...fields } = r;
      text = JSON.stringify(fields);
    }
  }
  const kind = r.type.split('.')[0];
  return h('li', { class: `event event-${kind} ${r.type === 'egress.denied' ||
    r.type === 'sandbox.failed' ? 'bad' : ''}` },
  h('time', { datetime: r.time }, when(r.time)), ' ',
  h('span', { class: 'event-type' }, r.type), ' ', h('span', {}, text));
}

// #/fleet (admins): every sandbox, owners, resources, and the node
function fleetPage() {
  if (!isAdmin())
    return { el: page('Fleet', h('section', { class: 'panel' }, h('h1', {}, 'Fleet'),
      h('p', {}, 'Only admins see the fleet.'))) };
  const node = h('dl', { class: 'facts node' });
  const body = h('tbody');
  const el = page('Fleet', h('h1', {}, 'Fleet'),
    h('section', { class: 'panel' }, h('h2', {}, 'This node'), node),
    h('section', { class: 'panel' }, h('h2', {}, 'Every sandbox'),
      h('div', { class: 'table-wrap' }, h('table', { class: 'fleet' },
        h('thead', {}, h('tr', {}, ['Sandbox', 'Owner', 'State', 'Image', 'CPUs', 'Memory',
          'Disk', 'Created', 'Actions'].map((t) => h('th', { scope: 'col' }, t)))),
        body))));
  let info = null;
  let infoError = null;
  let timer = null;
  async function loadNode() {
    try {
      info = await api('GET', '/v1/node');
      infoError = null;
    } catch (e) {
      info = null;
      infoError = e;
    }
    renderNode();
  }
  function renderNode() {
    const u = { n: 0, cpus: 0, memory_mb: 0 };
    for (const sb of app.sandboxes.values()) {
      if (!ACTIVE.includes(sb.state)) continue;
      u.n++;
      u.cpus += sb.cpus;
      u.memory_mb += sb.memory_mb;
    }
    const cap = info?.capacity;
    const free = info?.free;
    rerender(node,
      h('dt', {}, 'capacity'), h('dd', {}, cap ? `${plural(cap.cpus, 'CPU', 'CPUs')}, ` +
        `${mib(cap.memory_mb)}` : 'unknown'),
      h('dt', {}, 'free'), h('dd', {}, free ? `${plural(free.cpus, 'CPU', 'CPUs')}, ` +
        `${mib(free.memory_mb)}` : 'unknown'),
      h('dt', {}, 'running'), h('dd', {}, info ? String(info.running) : 'unknown'),
      h('dt', {}, 'active sandboxes'), h('dd', {}, `${u.n}: ${plural(u.cpus, 'CPU', 'CPUs')}, ` +
        `${mib(u.memory_mb)}`),
      info?.cordoned ? [h('dt', {}, 'cordoned'), h('dd', {}, 'yes: no new sandboxes')] : null,
      infoError ? h('dd', { class: 'hint' }, `node information unavailable: ${infoError.message}`)
        : null);
  }
  function update() {
    const sbs = [...app.sandboxes.values()].sort((a, b) =>
      (a.owner || '').localeCompare(b.owner || '') || label(a).localeCompare(label(b)));
    rerender(body, sbs.length ? sbs.map((sb) => h('tr', { 'data-id': sb.id },
      h('th', { scope: 'row' }, h('a', { href: `#/sandbox/${seg(sb.id)}`,
        'data-key': `open-${sb.id}` }, label(sb))),
      h('td', { class: 'owner' }, sb.owner),
      h('td', {}, stateBadge(sb.state), sb.state === 'failed' && sb.reason
        ? h('div', { class: 'reason error' }, sb.reason) : null),
      h('td', {}, sb.image), h('td', { class: 'num' }, sb.cpus),
      h('td', { class: 'num' }, mib(sb.memory_mb)), h('td', { class: 'num' }, mib(sb.disk_mb)),
      h('td', {}, when(sb.created_at)), h('td', {}, actionButtons(sb))))
      : h('tr', {}, h('td', { colspan: 9, class: 'empty' }, 'No sandboxes on this server.')));
    renderNode();
    // the node's free resources follow the sandboxes: read them again, at most once a second
    if (!timer) timer = setTimeout(() => { timer = null; loadNode(); }, 1000);
  }
  update();
  loadNode();
  return { el, update, dispose: () => clearTimeout(timer) };
}

// #/users (admins): accounts, roles, caps
function usersPage() {
  if (!isAdmin())
    return { el: page('Users', h('section', { class: 'panel' }, h('h1', {}, 'Users'),
      h('p', {}, 'Only admins manage users.'))) };
  const body = h('tbody');
  const error = h('p', { class: 'error', role: 'alert', hidden: true });
  const input = (id, attrs) => h('input', { id, ...attrs });
  const email = input('u-email', { type: 'email', required: true, autocomplete: 'off' });
  const password = input('u-password', { type: 'password', required: true, minlength: 10,
    autocomplete: 'new-password' });
  const role = h('select', { id: 'u-role' }, h('option', { value: 'user' }, 'user'),
    h('option', { value: 'admin' }, 'admin'));
  const capIn = (id) => input(id, { type: 'number', min: 0, step: 1, placeholder: 'default',
    inputmode: 'numeric' });
  const maxSb = capIn('u-max-sandboxes');
  const maxCpus = capIn('u-max-cpus');
  const maxMem = capIn('u-max-memory');
  const field = (id, text, el) => h('div', { class: 'field' }, h('label', { for: id }, text), el);
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Create user');
  const form = h('form', { class: 'panel' }, h('h2', {}, 'New user'),
    h('div', { class: 'row3' }, field('u-email', 'Email', email),
      field('u-password', 'Password (10 characters or more)', password),
      field('u-role', 'Role', role)),
    h('div', { class: 'row3' }, field('u-max-sandboxes', 'Max active sandboxes', maxSb),
      field('u-max-cpus', 'Max CPUs', maxCpus), field('u-max-memory', 'Max memory (MiB)', maxMem)),
    h('p', { class: 'hint' }, 'Empty caps take the server defaults. An admin sees and ' +
      'supervises every sandbox but cannot launch one.'),
    error, submit);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { email: email.value.trim(), password: password.value, role: role.value };
    const caps = {};
    if (maxSb.value !== '') caps.max_sandboxes = Number(maxSb.value);
    if (maxCpus.value !== '') caps.max_cpus = Number(maxCpus.value);
    if (maxMem.value !== '') caps.max_memory_mb = Number(maxMem.value);
    if (Object.keys(caps).length) body.caps = caps;
    await submitting(submit, error, null, async () => {
      const u = await api('POST', '/v1/users', body);
      toast(`Created ${u.email} (${u.role}).`);
      form.reset();
      load();
    });
  });
  // a user's own caps: a number (0: none), or empty for the server's default
  const capsForm = h('form', { class: 'panel', hidden: true, 'aria-label': 'Caps' });
  function editCaps(u) {
    const own = (id, v) => { const x = capIn(id); x.value = v ?? ''; return x; };
    const sb = own('c-max-sandboxes', u.caps?.max_sandboxes);
    const cpus = own('c-max-cpus', u.caps?.max_cpus);
    const mem = own('c-max-memory', u.caps?.max_memory_mb);
    const why = h('p', { class: 'error', role: 'alert', hidden: true });
    const save = h('button', { type: 'submit', class: 'primary' }, 'Save caps');
    const cancel = h('button', { type: 'button', onclick: () => { capsForm.hidden = true; } },
      'Cancel');
    const value = (x) => (x.value === '' ? null : Number(x.value));
    capsForm.onsubmit = async (ev) => {
      ev.preventDefault();
      await submitting(save, why, null, async () => {
        // only what was changed: a cap left as shown keeps following the server's
        // default when it did (USER shows the caps that apply, defaults filled in)
        const caps = {};
        for (const [k, x] of [['max_sandboxes', sb], ['max_cpus', cpus],
          ['max_memory_mb', mem]])
          if (x.value !== String(u.caps?.[k] ?? '')) caps[k] = value(x);
        await api('PATCH', `/v1/users/${seg(u.id)}`, { caps });
        toast(`Caps of ${u.email} saved.`);
        capsForm.hidden = true;
        load();
      });
    };
    rerender(capsForm, h('h2', {}, `Caps of ${u.email}`),
      h('div', { class: 'row3' }, field('c-max-sandboxes', 'Max active sandboxes', sb),
        field('c-max-cpus', 'Max CPUs', cpus), field('c-max-memory', 'Max memory (MiB)', mem)),
      h('p', { class: 'hint' }, 'Empty takes the server default; 0 is no cap. Creates and ' +
        'starts past a cap are refused; what already runs goes on.'),
      why, save, ' ', cancel);
    capsForm.hidden = false;
    sb.focus();
  }
  const el = page('Users', h('h1', {}, 'Users'),
    h('section', { class: 'panel' }, h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Email', 'Role', 'Status', 'Sandboxes', 'CPUs', 'Memory',
        'Created', 'Actions'].map((t) => h('th', { scope: 'col' }, t)))), body))),
    capsForm, form);
  const of = (n, max) => (max ? `${n} of ${max}` : `${n}`);
  async function load() {
    let r;
    try {
      r = await api('GET', '/v1/users');
    } catch (e) {
      rerender(body, h('tr', {}, h('td', { colspan: 8, class: 'error' }, e.message)));
      return;
    }
    rerender(body, r.users.map((u) => h('tr', {},
      h('th', { scope: 'row' }, u.email), h('td', {}, u.role),
      h('td', {}, u.disabled ? 'disabled' : 'active'),
      h('td', { class: 'num' }, of(u.usage?.sandboxes ?? 0, u.caps?.max_sandboxes)),
      h('td', { class: 'num' }, of(u.usage?.cpus ?? 0, u.caps?.max_cpus)),
      h('td', { class: 'num' }, of(u.usage?.memory_mb ?? 0, u.caps?.max_memory_mb)),
      h('td', {}, when(u.created_at)),
      h('td', { class: 'actions' }, h('button', { type: 'button', 'data-key': `caps-${u.id}`,
        onclick: () => editCaps(u) }, 'Caps'), ' ', u.id === app.me.user_id
        ? h('span', { class: 'hint' }, 'you')
        : h('button', { type: 'button', 'data-key': `disable-${u.id}`,
          onclick: async (ev) => {
            ev.currentTarget.disabled = true;
            try {
              await api('PATCH', `/v1/users/${seg(u.id)}`, { disabled: !u.disabled });
              toast(`${u.email} is ${u.disabled ? 'enabled' : 'disabled'}.`);
            } catch (e) {
              toast(`${u.email}: ${e.message}`, 'error');
            }
            load();
          } }, u.disabled ? 'Enable' : 'Disable')))));
  }
  load();
  return { el };
}

useShell({ app, toast, submitting, page, label, launchBlocked, capsText, fillImages });
boot();
