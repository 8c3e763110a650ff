// lib.mjs: what the browser drivers share (dashboard.mjs here, tests/egress/
// egress-dashboard.mjs): settings from the environment, steps and checks that name the step
// that failed, pages that collect their own errors, the sign-in form, the terminal's rows, and
// Debian's Chromium
// (headless) launched through playwright-core from SBX_WEB_DIR/node_modules.
import { createRequire } from 'node:module';
import path from 'node:path';

export const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};

const started = Date.now();
export const problems = []; // uncaught errors in any page
let current = 'start';

export function step(name) {
  current = name;
  console.log(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${name}`);
}

export function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

// A page in a context of its own, its uncaught errors and console errors kept in problems.
export async function newPage(browser, viewport) {
  const ctx = await browser.newContext({ viewport });
  const page = await ctx.newPage();
  page.setDefaultTimeout(20000);
  page.on('pageerror', (e) => problems.push(`${current}: ${e.message}`));
  page.on('console', (m) => {
    // refused requests (the first whoami's 401, a wrong password, a 404) are the page's to
    // show; what counts here is the page's own errors
    if (m.type() === 'error' && !/Failed to load resource/.test(m.text()))
      problems.push(`${current}: console: ${m.text()}`);
  });
  return page;
}

// Opens where, waits for the sign-in form and submits who's email and password with Enter.
export async function signIn(page, who, where) {
  await page.goto(where);
  await page.locator('#login-email').waitFor();
  await page.fill('#login-email', who.email);
  await page.fill('#login-password', who.password);
  await page.press('#login-password', 'Enter'); // Enter submits
}

// signIn (where: SBX_URL when not given), then waits until the page shows who signed in.
export async function login(page, who, where = env('SBX_URL')) {
  await signIn(page, who, where);
  await page.locator('#who .me').waitFor();
}

// The visible rows of the active terminal, as text.
export async function termLines(page) {
  return page.$$eval('.term:not([hidden]) .xterm-rows > div',
    (rows) => rows.map((r) => r.textContent.replace(/\u00a0/g, ' ').trimEnd()));
}

// Waits until a row of the active terminal is test (a string) or matches it (a RegExp), and
// returns that row; what names it in the error when none comes within timeout ms.
export async function waitLine(page, test, what = `"${test}"`, timeout = 20000) {
  const end = Date.now() + timeout;
  let lines = [];
  while (Date.now() < end) {
    lines = await termLines(page);
    const hit = lines.find((l) => (typeof test === 'string' ? l === test : test.test(l)));
    if (hit !== undefined) return hit;
    await page.waitForTimeout(150);
  }
  throw new Error(`the terminal never showed ${what}; it shows:\n${lines.join('\n')}`);
}

// Runs run(browser) in Chromium and exits: 0 when every step passed, otherwise 1 after
// naming the step that failed.
export async function drive(name, run) {
  try {
    const require = createRequire(path.join(env('SBX_WEB_DIR'), 'package.json'));
    const { chromium } = require('playwright-core');
    const browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      headless: true,
      args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
    });
    try {
      await run(browser);
    } finally {
      await browser.close();
    }
    console.log(`${name}: every step passed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    process.exit(0);
  } catch (e) {
    console.error(`${name}: step "${current}" failed: ${e.message}`);
    process.exit(1);
  }
}
