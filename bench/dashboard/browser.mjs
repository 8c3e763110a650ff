// bench/dashboard/browser.mjs: the dashboard in headless Chromium, driven by playwright-core
// (web/node_modules, installed by scripts/install-deps.sh). Run by bench/dashboard/run.sh
// against a sandboxd-fake that serves the dashboard on BASE and holds a user with SANDBOXES
// sandboxes. Two measurements, each against a baseline in the same browser:
//
//  list:    from page.goto(BASE/#/) to the moment the SANDBOXES rows are in the DOM, NAVS
//           times, against a navigation to a trivial page of the same server (BASELINE_PATH),
//           alternating; "same": in one page of one context (its connections and whatever
//           the browser keeps), "fresh": each in a new context with the same session cookie
//           (nothing kept). Also the same moment as the page saw it (a MutationObserver
//           installed before the page's scripts, in ms from the navigation's start), and
//           where the time went (resource timing).
//  latency: with the list open, CHANGES stops and starts (through the API, with the operator
//           token) of the user's sandboxes; the page's MutationObserver records when the
//           row's state text becomes the new state (and the next animation frame after it),
//           and two bare EventSources when the event arrives: one in the same page, one in a
//           trivial page of its own. run.sh's report.py joins these with the event's persist
//           time in sandboxd's store.
//
// Prints one line of key=value words per sample, for the results file. Environment: BASE
// EMAIL PASSWORD TOKEN (the operator's) AS (user: log in as EMAIL; operator: no login, the
// token on every request) SANDBOXES NAVS CHANGES CHROMIUM BASELINE_PATH
// ROW_SELECTOR STATE_SELECTOR BROWSER_PARTS ("list latency") WEB_DIR (where node_modules is).
import { createRequire } from 'node:module';
import path from 'node:path';

const env = process.env;
const BASE = env.BASE;
const N = Number(env.SANDBOXES || 100);
const NAVS = Number(env.NAVS || 10);
const CHANGES = Number(env.CHANGES || 50);
const PARTS = (env.BROWSER_PARTS || 'list latency').split(/\s+/);
const BASELINE_PATH = env.BASELINE_PATH || '/v1/health';
// the list page's rows (web/src/app.js card()) and the state badge inside a row
const ROW = env.ROW_SELECTOR || 'article.card[data-id]';
const STATE = env.STATE_SELECTOR || '.state';
const require = createRequire(path.join(env.WEB_DIR, 'package.json'));
const { chromium } = require('playwright-core');

function out(...words) {
  process.stdout.write(words.join(' ') + '\n');
}

function die(msg) {
  process.stderr.write(`bench/dashboard/browser.mjs: ${msg}\n`);
  process.exit(1);
}

const f1 = (x) => (x === null || x === undefined ? 'na' : x.toFixed(1));
const VIEWPORT = { width: 1280, height: 800 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Installed before any script of every document: the time (ms from the navigation's start)
// at which ROW first matched N elements, and, once armed, when a watched row's state text
// became the wanted one.
function initScript({ row, state, n }) {
  const one = (id) => `${row.replace(/\[data-id\]$/, '')}[data-id="${id}"] ${state}`;
  window.__bench = { rowsAt: null, watch: null, seen: [] };
  const check = () => {
    const b = window.__bench;
    if (b.rowsAt === null && document.querySelectorAll(row).length >= n)
      b.rowsAt = performance.now();
    const w = b.watch;
    if (w && w.dom === null) {
      const el = document.querySelector(one(w.id));
      if (el && el.textContent.trim() === w.want) {
        w.dom = performance.timeOrigin + performance.now();
        requestAnimationFrame(() => { w.frame = performance.timeOrigin + performance.now(); });
      }
    }
  };
  new MutationObserver(check).observe(document, { subtree: true, childList: true,
    characterData: true, attributes: true });
}

async function newPage(context) {
  const page = await context.newPage();
  await page.addInitScript(initScript, { row: ROW, state: STATE, n: N });
  return page;
}

// one navigation to the list: node-side ms from goto to N rows, and the page's own moment
async function navList(page) {
  const t0 = performance.now();
  await page.goto(`${BASE}/#/`, { waitUntil: 'commit' });
  await page.waitForFunction(([row, n]) => document.querySelectorAll(row).length >= n,
    [ROW, N], { polling: 'raf', timeout: 30000 });
  const ms = performance.now() - t0;
  // where the time went, in the page (ms from the navigation's start): the document
  // received, its scripts run (DOMContentLoaded: app.js is a module, deferred), the first
  // request of app.js sent (whoami), the list's answer received; and the KiB transferred
  const parts = await page.evaluate(() => {
    const r = performance.getEntriesByType('resource');
    const f = (s) => r.find((e) => e.name.includes(s));
    const nav = performance.getEntriesByType('navigation')[0];
    const kb = [nav, ...r].reduce((n, e) => n + (e?.transferSize || 0), 0) / 1024;
    return { doc: nav?.responseEnd, dcl: nav?.domContentLoadedEventEnd,
      whoami: f('/v1/whoami')?.startTime, list: f('/v1/sandboxes')?.responseEnd, kb };
  });
  const inPage = await page.evaluate(() => window.__bench.rowsAt);
  const extra = ` doc_ms=${f1(parts.doc)} dcl_ms=${f1(parts.dcl)}` +
    ` whoami_ms=${f1(parts.whoami)} list_ms=${f1(parts.list)} kib=${f1(parts.kb)}`;
  return { ms, inPage, extra };
}

async function navBaseline(page) {
  const t0 = performance.now();
  const res = await page.goto(`${BASE}${BASELINE_PATH}`, { waitUntil: 'load' });
  const ms = performance.now() - t0;
  const inPage = await page.evaluate(() =>
    performance.getEntriesByType('navigation')[0]?.loadEventEnd ?? null);
  return { ms, inPage, status: res ? res.status() : 0 };
}

async function listPart(browser, context, ctxOpts) {
  // same: one page; every measured navigation starts from about:blank, so the list's URL
  // (with its #/) is always a new document, never a fragment navigation
  const page = await newPage(context);
  await navList(page); // the first load (fills whatever the browser keeps) is not counted
  for (let i = 0; i < NAVS; i++) {
    for (const what of i % 2 ? ['list', 'baseline'] : ['baseline', 'list']) {
      await page.goto('about:blank');
      const r = what === 'list' ? await navList(page) : await navBaseline(page);
      out(`nav ctx=same what=${what} i=${i + 1} ms=${f1(r.ms)} in_page_ms=${f1(r.inPage)}` +
        (r.status !== undefined ? ` status=${r.status}` : '') + (r.extra || ''));
    }
  }
  await page.close();
  // fresh: a new context (empty cache, the same credential) for each navigation
  for (let i = 0; i < NAVS; i++) {
    for (const what of i % 2 ? ['list', 'baseline'] : ['baseline', 'list']) {
      const ctx = await browser.newContext(ctxOpts);
      const p = await newPage(ctx);
      const r = what === 'list' ? await navList(p) : await navBaseline(p);
      out(`nav ctx=fresh what=${what} i=${i + 1} ms=${f1(r.ms)} in_page_ms=${f1(r.inPage)}` +
        (r.status !== undefined ? ` status=${r.status}` : '') + (r.extra || ''));
      await ctx.close();
    }
  }
}

async function operator(method, p, body) {
  const res = await fetch(`${BASE}${p}`, {
    method,
    headers: { Authorization: `Bearer ${env.TOKEN}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) die(`${method} ${p} answered ${res.status}: ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : null;
}

// A bare EventSource in PAGE recording each state event's arrival in window.__bench.es
async function bareStream(page) {
  await page.evaluate(() => new Promise((resolve, reject) => {
    const b = window.__bench;
    b.es = [];
    const es = new EventSource('/v1/events/stream');
    es.addEventListener('state', (m) => {
      const t = performance.timeOrigin + performance.now();
      const ev = JSON.parse(m.data);
      b.es.push({ seq: ev.seq, id: ev.sandbox_id, to: ev.data.to, t });
    });
    es.onopen = () => resolve();
    es.onerror = () => reject(new Error('the bare EventSource failed'));
    window.__benchEs = es;
  }));
}

function arrived(page, id, want, after) {
  return page.evaluate(([id, want, after]) =>
    window.__bench.es.find((x) => x.id === id && x.to === want && x.t >= after) || null,
  [id, want, after]);
}

async function latencyPart(browser, context, ctxOpts) {
  const page = await newPage(context);
  await navList(page);
  // the baselines: a bare EventSource in the list's page (it waits for the page's own
  // handlers of the same event) and one in a page of its own (a trivial document of the
  // same origin, in another context: the delivery alone)
  await bareStream(page);
  const aloneCtx = await browser.newContext(ctxOpts);
  const alone = await newPage(aloneCtx);
  await alone.goto(`${BASE}${BASELINE_PATH}`);
  await bareStream(alone);
  await sleep(500); // the page's own stream is open by now (it opened before its list)
  const list = (await operator('GET', '/v1/sandboxes')).sandboxes
    .filter((sb) => sb.state === 'running' && sb.owner === (env.AS === 'operator' ? 'operator'
      : env.EMAIL));
  if (list.length < 1) die('the user has no running sandbox');
  const pool = list.slice(0, Math.min(25, list.length));
  const states = new Map(pool.map((sb) => [sb.id, 'running']));
  for (let i = 0; i < CHANGES; i++) {
    const sb = pool[Math.floor(i / 2) % pool.length];
    const action = states.get(sb.id) === 'running' ? 'stop' : 'start';
    const want = action === 'stop' ? 'stopped' : 'running';
    await page.evaluate(([id, want]) => {
      window.__bench.watch = { id, want, dom: null, frame: null };
    }, [sb.id, want]);
    const sent = Date.now();
    await operator('POST', `/v1/sandboxes/${sb.id}/${action}`, {});
    const answered = Date.now();
    states.set(sb.id, want);
    let dom = null;
    let same = null;
    let own = null;
    for (let k = 0; k < 500 && !(dom && same && own); k++) {
      if (!dom) {
        dom = await page.evaluate(() => {
          const w = window.__bench.watch;
          return w.dom && w.frame !== null ? { dom: w.dom, frame: w.frame } : null;
        });
      }
      if (!same) same = await arrived(page, sb.id, want, sent - 5);
      if (!own) own = await arrived(alone, sb.id, want, sent - 5);
      if (!(dom && same && own)) await sleep(10);
    }
    if (!(dom && same && own))
      die(`change ${i + 1} (${action} ${sb.id}) never reached the page`);
    if (same.seq !== own.seq) die(`change ${i + 1}: the two streams disagree on its event`);
    out(`change i=${i + 1} id=${sb.id} action=${action} to=${want} seq=${same.seq}` +
      ` sent=${sent} answered=${answered} dom=${dom.dom.toFixed(2)}` +
      ` frame=${dom.frame.toFixed(2)} es=${same.t.toFixed(2)} es_alone=${own.t.toFixed(2)}`);
    await sleep(100 + (i % 5) * 37); // not in step with the page's frames
  }
  await aloneCtx.close();
  await page.close();
}

async function main() {
  const browser = await chromium.launch({
    executablePath: env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
  try {
    out(`browser version=${browser.version().replace(/\s+/g, '_')}`);
    let context;
    let ctxOpts; // for the fresh contexts of part list's second half and latency's baseline
    if (env.AS === 'operator') {
      // no accounts: the page as the operator, its token sent with every request
      const opts = { viewport: VIEWPORT,
        extraHTTPHeaders: { Authorization: `Bearer ${env.TOKEN}` } };
      context = await browser.newContext(opts);
      ctxOpts = opts;
    } else {
      context = await browser.newContext({ viewport: VIEWPORT });
      // log in once, as the dashboard does (the cookie lands in the context)
      const r = await context.request.post(`${BASE}/v1/auth/login`, {
        data: { email: env.EMAIL, password: env.PASSWORD },
      });
      if (r.status() !== 200)
        die(`login answered ${r.status()}: ${(await r.text()).slice(0, 300)}`);
      ctxOpts = { viewport: VIEWPORT, storageState: await context.storageState() };
    }
    if (PARTS.includes('list')) await listPart(browser, context, ctxOpts);
    if (PARTS.includes('latency')) await latencyPart(browser, context, ctxOpts);
    await context.close();
  } finally {
    await browser.close();
  }
}

main().catch((e) => die(e.stack || String(e)));
