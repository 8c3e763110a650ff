// egress-dashboard.mjs: a sandbox's egress as its owner watches it on the dashboard, in
// Debian's Chromium (headless) driven by playwright-core. Run by test-egress-dashboard.c in
// NAME-host (tests/egress/netns.sh), where sandboxd listens on 127.0.0.1 with --egress on and
// the user's sandbox may reach example.org only. Settings come from the environment:
//   SBX_URL, SBX_USER_EMAIL/_PASSWORD, SBX_SANDBOX_ID, SBX_WEB_DIR (where node_modules is),
//   SBX_ARTIFACTS (the screenshot: egress-events.png)
// The page stays open while the sandbox curls example.org (allowed) and other.test (denied: by
// name, and at an address it brings itself); the events must appear in its Events panel
// without a reload. Exits 0 when every step passed; otherwise prints the failing step and
// exits 1.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { check, drive, env, newPage, problems, signIn, step } from '../browser/lib.mjs';

const URL0 = env('SBX_URL');
const ART = env('SBX_ARTIFACTS');
const ID = env('SBX_SANDBOX_ID');
const user = { email: env('SBX_USER_EMAIL'), password: env('SBX_USER_PASSWORD') };
// an allowed connection's event comes when the connection ends, a refused name's at once
const EVENT_MS = 15000;

mkdirSync(ART, { recursive: true });

// Runs argv in the sandbox from the page, as the signed-in user (their session and CSRF
// token), and waits for it: {status, exit_code, out}.
async function runInSandbox(page, argv) {
  return page.evaluate(async ({ id, argv }) => {
    const me = await (await fetch('/v1/whoami')).json();
    const r = await fetch(`/v1/sandboxes/${id}/run`, { method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': me.csrf_token },
      body: JSON.stringify({ argv, timeout_secs: 30 }) });
    const body = await r.json();
    return { status: r.status, exit_code: body.exit_code,
      out: body.stdout ? atob(body.stdout) : JSON.stringify(body) };
  }, { id: ID, argv });
}

// The Events panel's items, newest first, as text.
async function eventTexts(page) {
  return page.$$eval('.events li', (items) => items.map((li) => li.textContent));
}

// Waits for an item of the Events panel of type holding every one of parts; its locator.
async function waitEvent(page, type, parts) {
  let item = page.locator('.events li').filter({ has: page.locator('.event-type',
    { hasText: new RegExp(`^${type.replace('.', '\\.')}$`) }) });
  for (const p of parts) item = item.filter({ hasText: p });
  try {
    await item.first().waitFor({ timeout: EVENT_MS });
  } catch (e) {
    throw new Error(`no ${type} event naming ${parts.join(', ')} appeared within ` +
      `${EVENT_MS / 1000} s; the Events panel shows:\n  ${(await eventTexts(page)).join('\n  ')}`);
  }
  return item.first();
}

async function run(browser) {
  step('sign in and open the sandbox\'s page');
  const page = await newPage(browser, { width: 1280, height: 900 });
  // a link to the sandbox: the sign-in comes first, then the page it named
  await signIn(page, user, `${URL0}#/sandbox/${ID}`);
  await page.locator('h1', { hasText: 'egress-view' }).waitFor();
  await page.locator('h1 .state', { hasText: 'running' }).waitFor();
  const events = page.locator('.events');
  await events.locator('li', { hasText: 'created from egress' }).waitFor();
  await page.locator('.live-on').waitFor(); // the event stream is open
  check(await events.locator('li.event-egress').count() === 0,
    `no egress event before the sandbox reaches out (${(await eventTexts(page)).join(' | ')})`);
  // a marker a reload would lose
  await page.evaluate(() => { window.__sbxNoReload = true; });

  step('the sandbox reaches example.org, which its list allows');
  const ok = await runInSandbox(page, ['curl', '-sI', 'https://example.org/egress-dashboard']);
  check(ok.status === 200 && ok.exit_code === 0 && /^HTTP\/1\.1 200/m.test(ok.out),
    `curl -sI https://example.org passed (${ok.status}, exit ${ok.exit_code}: ${ok.out})`);
  const allowed = await waitEvent(page, 'egress.allowed', ['example.org']);
  const allowedText = await allowed.textContent();
  // what it shows: how, the name and port, the address dialled, the bytes each way
  check(/tls example\.org:443 → 203\.0\.113\.\d+ \(\d+ B out, \d+ B in\)/.test(allowedText),
    `the allowed event reads as a connection (${allowedText})`);
  check(!(await allowed.getAttribute('class')).split(/\s+/).includes('bad'),
    'an allowed connection is not marked as bad');
  console.log(`  ${allowedText}`);

  step('the sandbox tries other.test, which its list does not allow');
  const no = await runInSandbox(page, ['curl', '-sI', 'https://other.test/egress-dashboard']);
  check(no.status === 200 && no.exit_code !== 0 && !/HTTP\//.test(no.out),
    `curl -sI https://other.test failed (${no.status}, exit ${no.exit_code}: ${no.out})`);
  const denied = await waitEvent(page, 'egress.denied', ['other.test']);
  const deniedText = await denied.textContent();
  // how, the name and port, and why
  check(/(dns|tls|http) other\.test:\d+: \S/.test(deniedText),
    `the denied event says what and why (${deniedText})`);
  check((await denied.getAttribute('class')).split(/\s+/).includes('bad'),
    'a denied connection is marked as bad');
  console.log(`  ${deniedText}`);
  // with an address of its own for the name, the connection itself is refused
  const direct = await runInSandbox(page, ['curl', '-sI', '-k', '--resolve',
    'other.test:443:203.0.113.10', 'https://other.test/egress-dashboard-tls']);
  check(direct.status === 200 && direct.exit_code !== 0 && !/HTTP\//.test(direct.out),
    `curl -sI https://other.test at its address failed (${direct.status}, ` +
    `exit ${direct.exit_code}: ${direct.out})`);
  const refused = await waitEvent(page, 'egress.denied', ['tls other.test:443']);
  console.log(`  ${await refused.textContent()}`);

  step('the events arrived on the open page');
  check(await page.evaluate(() => window.__sbxNoReload === true), 'the page was not reloaded');
  check(!/\{|undefined|null|NaN/.test(allowedText + deniedText),
    'no raw JSON, undefined or null in the egress events');
  await events.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(ART, 'egress-events.png'), fullPage: true });
  check(problems.length === 0, `no errors in the page:\n${problems.join('\n')}`);
  await page.context().close();
}

await drive('egress-dashboard', run);
