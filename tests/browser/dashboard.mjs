// dashboard.mjs: the dashboard as a person uses it, in Debian's Chromium (headless) driven by
// playwright-core. Run by test-dashboard.c, which starts sandboxd with real VMs and makes the
// accounts; settings come from the environment:
//   SBX_URL, SBX_USER_EMAIL/_PASSWORD, SBX_OTHER_EMAIL/_PASSWORD, SBX_ADMIN_EMAIL/_PASSWORD,
//   SBX_ARTIFACTS (screenshots), SBX_WEB_DIR (where node_modules is), SBX_CONTROL_DIR (where
//   a file "restart" asks the driver to restart sandboxd; it answers "restarted")
// Exits 0 when every step passed; otherwise prints the failing step and exits 1.
import { existsSync, mkdirSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { check, drive, env, login, newPage, problems, step, termLines, waitLine }
  from './lib.mjs';

const URL0 = env('SBX_URL');
const ART = env('SBX_ARTIFACTS');
const CONTROL = env('SBX_CONTROL_DIR');

const user = { email: env('SBX_USER_EMAIL'), password: env('SBX_USER_PASSWORD') };
const other = { email: env('SBX_OTHER_EMAIL'), password: env('SBX_OTHER_PASSWORD') };
const admin = { email: env('SBX_ADMIN_EMAIL'), password: env('SBX_ADMIN_PASSWORD') };
const carol = { email: 'carol@example.com', password: 'carol-password-4444' }; // made below
const LAPTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };
const BOOT_MS = 90000; // a boot under TCG on a loaded 2-core machine

mkdirSync(ART, { recursive: true });
// its own screenshots (NN-name.png) from an earlier run; others' (egress-events.png) stay
for (const f of readdirSync(ART)) if (/^\d\d-.*\.png$/.test(f)) unlinkSync(path.join(ART, f));

async function shot(page, name) {
  await page.screenshot({ path: path.join(ART, `${name}.png`), fullPage: false });
}

async function typeLine(page, text) {
  await page.locator('.term:not([hidden]) .xterm-helper-textarea').focus();
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

async function termSize(page) {
  const area = page.locator('.term-area');
  return { rows: Number(await area.getAttribute('data-rows')),
    cols: Number(await area.getAttribute('data-cols')) };
}

async function connected(page) {
  await page.locator('.tab[aria-selected="true"] .tab-status', { hasText: /^\d+×\d+$/ })
    .waitFor({ timeout: 30000 });
}

// Asks test-dashboard.c to restart sandboxd (the VMs and kept processes run on) and waits.
async function restartSandboxd(page) {
  const done = path.join(CONTROL, 'restarted');
  if (existsSync(done)) unlinkSync(done);
  writeFileSync(path.join(CONTROL, 'restart'), '');
  for (let i = 0; i < 300 && !existsSync(done); i++) await page.waitForTimeout(100);
  check(existsSync(done), 'sandboxd restarted');
  unlinkSync(done);
}

async function run(browser) {
  step('the sign-in page, from the keyboard');
  const page = await newPage(browser, LAPTOP);
  await page.goto(URL0);
  await page.locator('#login-email').waitFor();
  check(await page.evaluate(() => document.activeElement.id) === 'login-email',
    'the email field has the focus');
  await page.keyboard.press('Tab');
  check(await page.evaluate(() => document.activeElement.id) === 'login-password',
    'Tab goes from email to password');
  await shot(page, '01-login');
  // a wrong password says so and keeps the form
  await page.fill('#login-email', user.email);
  await page.fill('#login-password', 'not-the-password');
  await page.press('#login-password', 'Enter');
  await page.locator('#login-error:not([hidden])').waitFor();
  check(/wrong email or password/i.test(await page.locator('#login-error').textContent()),
    'a wrong password is refused with a message');

  step('sign in and see the empty list');
  await login(page, user);
  await page.locator('h1', { hasText: 'Your sandboxes' }).waitFor();
  await page.locator('.live-on').waitFor();

  step('launch a sandbox and watch it run without a reload');
  await page.click('text=Launch a sandbox');
  await page.locator('#f-name').waitFor();
  await page.locator('#f-image option[value="busybox"]').waitFor({ state: 'attached' });
  await page.fill('#f-name', 'browser-test');
  await page.fill('#f-memory', '256');
  await page.click('text=Add a variable');
  await page.fill('#f-env-name-0', 'API_TOKEN');
  await page.fill('#f-env-value-0', 'not-shown-anywhere');
  await shot(page, '02-launch');
  await page.evaluate(() => {
    // a marker a reload would lose, and every state the card shows
    window.__sbxNoReload = true;
    window.__sbxStates = [];
    new MutationObserver(() => {
      const s = document.querySelector('.card .state')?.textContent;
      if (s && window.__sbxStates.at(-1) !== s) window.__sbxStates.push(s);
    }).observe(document.getElementById('main'), { subtree: true, childList: true,
      characterData: true });
  });
  await page.click('button[type="submit"]');
  const card = page.locator('.card', { hasText: 'browser-test' });
  await card.waitFor();
  await card.locator('.state', { hasText: 'running' }).waitFor({ timeout: BOOT_MS });
  const states = await page.evaluate(() => window.__sbxStates);
  check(await page.evaluate(() => window.__sbxNoReload === true), 'the page was not reloaded');
  check(states.at(-1) === 'running' && states.length >= 2 &&
    states.slice(0, -1).every((s) => ['pending', 'starting'].includes(s)),
  `the card went through pending/starting to running (saw ${states.join(' → ')})`);
  const id = await card.getAttribute('data-id');
  check(/^sbx_[0-9a-f]{16}$/.test(id), `a sandbox id (${id})`);
  console.log(`  ${id}: ${states.join(' → ')}`);
  await shot(page, '03-list');

  step('a failure appears live, with its reason');
  // (the launch form offers installed images only: an image no registry serves comes
  // through the API, as a script would send it)
  const status = await page.evaluate(async () => {
    const me = await (await fetch('/v1/whoami')).json();
    const r = await fetch('/v1/sandboxes', { method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': me.csrf_token },
      body: JSON.stringify({ name: 'broken', image: '127.0.0.1:1/nope:1', wait: false }) });
    return r.status;
  });
  check(status === 201, `the create was accepted (${status})`);
  const broken = page.locator('.card', { hasText: 'broken' });
  await broken.locator('.state', { hasText: 'failed' }).waitFor({ timeout: 30000 });
  await broken.locator('.reason', { hasText: 'registry 127.0.0.1:1' }).waitFor();
  await page.locator('.toast.error', { hasText: 'broken failed' }).waitFor();
  await shot(page, '03-list-failed');
  check(await page.evaluate(() => window.__sbxNoReload === true), 'still no reload');

  step('a terminal: echo hello');
  await card.locator('h2 a').click();
  await page.locator('h1', { hasText: 'browser-test' }).waitFor();
  check(await page.locator('.facts', { hasText: 'API_TOKEN' }).count() === 1,
    'the environment names are listed');
  check(await page.locator('text=not-shown-anywhere').count() === 0, 'no secret value shown');
  await page.click('button:has-text("New terminal")');
  await connected(page);
  await waitLine(page, /\$ ?$/, 'a shell prompt');
  await typeLine(page, 'echo hello');
  await waitLine(page, 'hello', '"hello"');
  await shot(page, '04-terminal');

  step('resizing the window resizes the guest\'s terminal');
  const before = await termSize(page);
  await typeLine(page, 'stty size');
  await waitLine(page, `${before.rows} ${before.cols}`, `"${before.rows} ${before.cols}"`);
  await page.setViewportSize({ width: 900, height: 640 });
  let after = before;
  for (let i = 0; i < 50 && after.cols === before.cols && after.rows === before.rows; i++) {
    await page.waitForTimeout(100);
    after = await termSize(page);
  }
  check(after.cols !== before.cols && after.rows !== before.rows,
    `the terminal was fitted again (${before.cols}x${before.rows} -> ${after.cols}x${after.rows})`);
  await typeLine(page, 'clear; stty size');
  await waitLine(page, `${after.rows} ${after.cols}`, `"${after.rows} ${after.cols}"`);
  console.log(`  ${before.rows} ${before.cols} -> ${after.rows} ${after.cols}`);

  step('work goes on across a reload, with its output');
  await typeLine(page, 'echo before; sleep 600; echo done');
  await waitLine(page, 'before', '"before"');
  await page.reload();
  await page.locator('h1', { hasText: 'browser-test' }).waitFor();
  await connected(page);
  await waitLine(page, 'before', '"before" after the reload');
  const last = (await termLines(page)).filter((l) => l).at(-1);
  check(last === 'before', `nothing after "before": the sleep still runs (last line "${last}")`);
  const procs = await page.evaluate(async (sid) =>
    (await (await fetch(`/v1/sandboxes/${sid}/processes`)).json()).processes, id);
  check(procs.some((p) => p.tty && p.state === 'running'), 'the shell is still running');
  await shot(page, '05-terminal-after-reload');
  // and it takes input again: interrupt the sleep, run something else
  await page.locator('.term:not([hidden]) .xterm-helper-textarea').focus();
  await page.keyboard.press('Control+C');
  await typeLine(page, 'echo after');
  await waitLine(page, 'after', '"after"');

  step('the events of the sandbox, live');
  const events = page.locator('.events');
  await events.locator('li', { hasText: 'sandbox.started' }).first().waitFor();
  await events.locator('li', { hasText: 'process.started' }).first().waitFor();
  check(await events.locator('li', { hasText: 'created from busybox' }).count() === 1,
    'the created event');

  step('a hostile file name is shown as text, its control characters escaped');
  // a newline, an erase-screen sequence and markup in a file name the sandbox has (R-S7)
  const hostile = '/tmp/evil\n\x1b[2J<b>bold</b>';
  const put = await page.evaluate(async ({ sid, name }) => {
    const me = await (await fetch('/v1/whoami')).json();
    const r = await fetch(`/v1/sandboxes/${sid}/files?path=${encodeURIComponent(name)}`, {
      method: 'PUT', headers: { 'Content-Type': 'application/octet-stream',
        'X-CSRF-Token': me.csrf_token }, body: 'x' });
    return r.status;
  }, { sid: id, name: hostile });
  check(put === 204, `the file was written (${put})`);
  const written = events.locator('li', { hasText: 'evil\\n\\x1b[2J<b>bold</b>' });
  await written.waitFor();
  const text = await written.textContent();
  check(!/[\u0000-\u001f\u007f-\u009f]/.test(text), `no raw control character in "${text}"`);
  check(await events.locator('b').count() === 0, 'the markup stayed text');

  step('sandboxd restarts: the page and the terminal reconnect by themselves');
  await restartSandboxd(page);
  await page.locator('.tab[aria-selected="true"] .tab-status',
    { hasText: /disconnected|reconnecting|connecting/ }).waitFor({ timeout: 3000 })
    .catch(() => {}); // it may already be back
  await connected(page);
  await page.locator('.live-on').waitFor({ timeout: 30000 });
  await typeLine(page, 'echo again');
  await waitLine(page, 'again', '"again" after sandboxd restarted');

  step('a second terminal');
  await page.click('button:has-text("New terminal")');
  await page.locator('.tab').nth(1).waitFor();
  await connected(page);
  await waitLine(page, /\$ ?$/, 'a prompt in the second terminal');
  check(await page.locator('.tab').count() === 2, 'two terminal tabs');
  await typeLine(page, 'exit 3');
  await page.locator('.tab[aria-selected="true"] .tab-status', { hasText: 'exited, code 3' })
    .waitFor();
  await page.click('button[aria-label^="Close terminal"]');
  check(await page.locator('.tab').count() === 1, 'the exited terminal is closed');

  step('another user sees nothing of it');
  const page2 = await newPage(browser, LAPTOP);
  // a link to it: the sign-in comes first, then the page the link named
  await login(page2, other, `${URL0}#/sandbox/${id}`);
  await page2.locator('h1', { hasText: 'Sandbox not found' }).waitFor();
  await shot(page2, '06-other-user-not-found');
  await page2.click('#nav a:has-text("Sandboxes")');
  await page2.locator('h1', { hasText: 'Your sandboxes' }).waitFor();
  await page2.locator('.empty').waitFor();
  check(await page2.locator(`[data-id="${id}"]`).count() === 0, 'not in their list');
  await page2.context().close();

  step('the admin sees it with its owner in the fleet');
  const page3 = await newPage(browser, LAPTOP);
  await login(page3, admin);
  await page3.goto(`${URL0}#/fleet`);
  const row = page3.locator(`tr[data-id="${id}"]`);
  await row.waitFor();
  check((await row.locator('.owner').textContent()) === user.email, 'the owner is shown');
  check((await row.textContent()).includes('running'), 'its state is shown');
  await page3.locator('.node dd').first().waitFor();
  await shot(page3, '07-fleet');
  await page3.goto(`${URL0}#/launch`);
  await page3.locator('#launch-why', { hasText: 'cannot launch' }).waitFor();
  check(await page3.locator('button[type="submit"]').isDisabled(), 'an admin cannot launch');
  await page3.goto(`${URL0}#/users`);
  await page3.locator('td, th', { hasText: other.email }).first().waitFor();
  // a user with at most one active sandbox
  await page3.fill('#u-email', carol.email);
  await page3.fill('#u-password', carol.password);
  await page3.fill('#u-max-sandboxes', '1');
  await page3.press('#u-max-sandboxes', 'Enter');
  const carolRow = page3.locator('tr', { hasText: carol.email });
  await carolRow.waitFor();
  check((await carolRow.textContent()).includes('0 of 1'), 'the new user has a cap of 1');
  // caps change later: 3, then back to 1
  await carolRow.locator('button', { hasText: 'Caps' }).click();
  check((await page3.inputValue('#c-max-sandboxes')) === '1', 'the caps form shows the cap');
  await page3.fill('#c-max-sandboxes', '3');
  await page3.press('#c-max-sandboxes', 'Enter');
  await page3.locator('tr', { hasText: carol.email }).filter({ hasText: '0 of 3' }).waitFor();
  await page3.locator('tr', { hasText: carol.email }).locator('button', { hasText: 'Caps' })
    .click();
  await page3.fill('#c-max-sandboxes', '1');
  await page3.click('text=Save caps');
  await page3.locator('tr', { hasText: carol.email }).filter({ hasText: '0 of 1' }).waitFor();
  await shot(page3, '08-users');
  await page3.context().close();

  step('a user at their cap is told why they cannot launch');
  const capped = await newPage(browser, LAPTOP);
  await login(capped, carol);
  await capped.click('text=Launch a sandbox');
  await capped.locator('#f-image option[value="busybox"]').waitFor({ state: 'attached' });
  await capped.fill('#f-name', 'capped');
  await capped.fill('#f-memory', '128');
  await capped.press('#f-name', 'Enter'); // Enter submits
  const ccard = capped.locator('.card', { hasText: 'capped' });
  await ccard.waitFor();
  await capped.locator('.hint', { hasText: 'cap reached: 1 of 1' }).waitFor();
  await capped.click('text=Launch a sandbox');
  await capped.locator('#launch-why', { hasText: 'cap reached: 1 of 1' }).waitFor();
  check(await capped.locator('button[type="submit"]').isDisabled(), 'no launch at the cap');
  await shot(capped, '09-cap-reached');
  await capped.click('#nav a:has-text("Sandboxes")');
  const cid = await ccard.getAttribute('data-id');
  await ccard.locator(`[data-key="delete-${cid}"]`).click();
  await ccard.locator(`[data-key="delete-${cid}"]`, { hasText: 'Delete capped?' }).click();
  await ccard.waitFor({ state: 'detached', timeout: 60000 });
  await capped.locator('.hint', { hasText: 'In use: 0 of 1 sandboxes' }).waitFor();
  await capped.context().close();

  step('a phone-sized window');
  const phone = await newPage(browser, PHONE);
  await login(phone, user);
  await phone.locator(`.card[data-id="${id}"]`).waitFor();
  check(await phone.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth),
    'no sideways scrolling on the list');
  await shot(phone, '10-phone-list');
  await phone.goto(`${URL0}#/sandbox/${id}`);
  await connected(phone);
  check(await phone.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth),
    'no sideways scrolling on the sandbox page');
  await shot(phone, '11-phone-terminal');
  await phone.context().close();

  step('suspend and resume (the fake backend can), then stop, start and delete, each with immediate feedback');
  await page.setViewportSize(LAPTOP);
  check(await page.locator('button[aria-label="Resume browser-test"]').isDisabled(),
    'no resume while running');
  await page.click('button[aria-label="Suspend browser-test"]');
  await page.locator('h1 .state', { hasText: 'suspended' }).waitFor({ timeout: 60000 });
  await page.click('button[aria-label="Resume browser-test"]');
  await page.locator('h1 .state', { hasText: 'running' }).waitFor({ timeout: BOOT_MS });
  await page.click('button[aria-label="Stop browser-test"]');
  await page.locator(`[data-key="stop-${id}"]`, { hasText: 'Stopping…' }).waitFor({ timeout: 3000 });
  await page.locator('h1 .state', { hasText: 'stopped' }).waitFor({ timeout: 60000 });
  await page.locator('.tab-status', { hasText: 'gone' }).first().waitFor();
  check(await page.locator('button:has-text("New terminal")').isDisabled(),
    'no new terminal while stopped');
  await page.click('button[aria-label="Start browser-test"]');
  await page.locator(`[data-key="start-${id}"]`, { hasText: 'Starting…' }).waitFor({ timeout: 3000 });
  await page.locator('h1 .state', { hasText: 'running' }).waitFor({ timeout: BOOT_MS });
  await page.locator(`[data-key="delete-${id}"]`).click();
  await page.locator(`[data-key="delete-${id}"]`, { hasText: 'Delete browser-test?' }).click();
  await page.locator('h1 .state', { hasText: 'terminated' }).waitFor({ timeout: 60000 });
  await page.locator('.events li', { hasText: 'ended: request' }).waitFor();
  await shot(page, '12-deleted');
  await page.click('#nav a:has-text("Sandboxes")');
  const bid = await page.locator('.card', { hasText: 'broken' }).getAttribute('data-id');
  await page.locator(`[data-key="delete-${bid}"]`).click();
  await page.locator(`[data-key="delete-${bid}"]`, { hasText: 'Delete broken?' }).click();
  await page.locator('.empty').waitFor({ timeout: 30000 });

  step('sign out');
  await page.click('button:has-text("Sign out")');
  await page.locator('#login-email').waitFor();
  await page.context().close();

  check(problems.length === 0, `no errors in the pages:\n${problems.join('\n')}`);
}

await drive('dashboard', run);
