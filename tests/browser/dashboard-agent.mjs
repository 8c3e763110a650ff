// dashboard-agent.mjs: "Start an agent on a task" as a person uses it, in Debian's Chromium
// (headless) driven by playwright-core. Run by test-dashboard-agent.c, which starts
// sandboxd-fake with its agent (a sandbox's processes are real processes on this host) and
// makes the accounts; settings come from the environment:
//   SBX_URL, SBX_USER_EMAIL/_PASSWORD, SBX_OTHER_EMAIL/_PASSWORD, SBX_ARTIFACTS (screenshots),
//   SBX_WEB_DIR (where node_modules is), SBX_CONTROL_DIR (a directory of the test's own)
// No model is reachable here: the agent is a stub `claude` written below, found through the
// PATH the launch gives the sandbox. It prints what it was given and waits for a file before
// it exits with code 7.
// Exits 0 when every step passed; otherwise prints the failing step and exits 1.
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, unlinkSync,
  writeFileSync } from 'node:fs';
import path from 'node:path';
import { check, drive, env, login, newPage, problems, step, termLines, waitLine }
  from './lib.mjs';

const URL0 = env('SBX_URL');
const ART = env('SBX_ARTIFACTS');
const CONTROL = env('SBX_CONTROL_DIR');
const user = { email: env('SBX_USER_EMAIL'), password: env('SBX_USER_PASSWORD') };
const other = { email: env('SBX_OTHER_EMAIL'), password: env('SBX_OTHER_PASSWORD') };
const LAPTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };
const SECRET = 'sk-ant-browser-test-0123456789abcdef'; // never on the page, never logged
// longer than a card shows, with markup that must stay text
const TASK = 'fix the failing test in tests/test_parser.py, then run the whole suite and ' +
  'say <b>what</b> changed';

mkdirSync(ART, { recursive: true });
for (const f of readdirSync(ART)) if (/^agent-\d\d-.*\.png$/.test(f)) unlinkSync(path.join(ART, f));

// the stub agent: its arguments (NUL-separated) and cwd into files, a few lines on its
// terminal (the key's length, never the key), then it waits for "release" and exits 7
const BIN = path.join(CONTROL, 'bin');
const RELEASE = path.join(CONTROL, 'release');
const ARGV = path.join(CONTROL, 'argv-seen');
mkdirSync(BIN, { recursive: true });
writeFileSync(path.join(BIN, 'claude'), `#!/bin/sh
printf '%s\\0' "$@" > '${ARGV}'
echo "stub claude running with $# arguments"
echo "key: \${#ANTHROPIC_API_KEY} characters"
while [ ! -e '${RELEASE}' ]; do sleep 0.1; done
echo "stub claude is done"
exit 7
`);
chmodSync(path.join(BIN, 'claude'), 0o755);

async function shot(page, name) {
  await page.screenshot({ path: path.join(ART, `agent-${name}.png`), fullPage: false });
}

// Presses Launch and waits for the sandbox's page; a refusal on the form fails with its words.
async function launch(page) {
  await page.click('#a-launch');
  await page.waitForFunction(() => /^#\/sandbox\/sbx_[0-9a-f]{16}$/.test(location.hash) ||
    !document.getElementById('agent-error')?.hidden, null, { timeout: 30000 });
  const refused = await page.evaluate(() => {
    const e = document.getElementById('agent-error');
    return e && !e.hidden ? e.textContent : null;
  });
  check(refused === null, `the launch went through (it said "${refused}")`);
  return page.evaluate(() => location.hash.split('/').at(-1));
}

// Everything the page holds: its markup, and every field's value.
async function pageText(page) {
  return page.evaluate(() => document.documentElement.outerHTML + [...document
    .querySelectorAll('input, textarea')].map((e) => e.value).join('\n'));
}

async function run(browser) {
  step('sign in and open "Start an agent on a task"');
  const page = await newPage(browser, LAPTOP);
  await login(page, user);
  await page.locator('h1', { hasText: 'Your sandboxes' }).waitFor();
  await page.locator('.live-on').waitFor();
  await page.click('text=Start an agent on a task');
  await page.locator('h1', { hasText: 'Start an agent on a task' }).waitFor();
  check(await page.evaluate(() => document.activeElement.id) === 'a-agent',
    'the agent select has the focus');
  check((await page.$$eval('#a-agent option', (o) => o.map((x) => x.value))).join(' ') ===
    'claude codex gemini opencode', 'the four agents are offered');
  const keyState = page.locator('#a-secrets li[data-name="ANTHROPIC_API_KEY"] .secret-state');
  await keyState.filter({ hasText: /^not set$/ }).waitFor();
  check(await page.locator('#a-secrets li[data-name="CLAUDE_CODE_OAUTH_TOKEN"]').count() === 1,
    'claude\'s other variable is listed');
  await shot(page, '01-form');

  step('without a credential the launch says which variable is missing');
  await page.fill('#a-task', TASK);
  await page.click('#a-launch');
  await page.locator('#agent-error:not([hidden])',
    { hasText: 'claude needs one of ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN' }).waitFor();
  const listed = await page.evaluate(async () =>
    (await (await fetch('/v1/sandboxes')).json()).sandboxes.length);
  check(listed === 0, `nothing was created (${listed} sandboxes)`);

  step('save the credential: it shows as set, its value is nowhere on the page');
  await page.selectOption('#a-secret-name', 'ANTHROPIC_API_KEY');
  await page.fill('#a-secret-value', SECRET);
  await page.press('#a-secret-value', 'Enter'); // Enter saves, it does not launch
  await keyState.filter({ hasText: /^set$/ }).waitFor();
  check(await page.inputValue('#a-secret-value') === '', 'the input was cleared');
  check(!(await pageText(page)).includes(SECRET), 'the value is not in the page');
  const secrets = await page.evaluate(async () => (await fetch('/v1/secrets')).text());
  check(secrets.includes('ANTHROPIC_API_KEY') && !secrets.includes(SECRET),
    `GET /v1/secrets names it without its value (${secrets})`);
  check(await page.locator('.card').count() === 0 && !existsSync(ARGV), 'still nothing started');
  await shot(page, '02-credential-set');

  step('start claude on the task, no repository');
  // the stub comes first on the sandbox's PATH (More options, More environment)
  await page.click('summary:has-text("More options")');
  await page.click('text=Add a variable');
  await page.fill('#a-env-name-0', 'PATH');
  await page.fill('#a-env-value-0', `${BIN}:/usr/bin:/bin`);
  await page.evaluate(() => {
    window.__sbxNoReload = true;
  });
  const id = await launch(page);

  step('land in the agent\'s terminal, showing what the stub printed');
  const tab = page.locator('.tab[aria-selected="true"]', { hasText: 'claude (agent)' });
  await tab.waitFor();
  await waitLine(page, 'stub claude running with 3 arguments');
  await waitLine(page, `key: ${SECRET.length} characters`);
  check(await page.evaluate(() => window.__sbxNoReload === true), 'the page was not reloaded');
  check(await page.evaluate(() => document.activeElement?.classList
    .contains('xterm-helper-textarea')), 'the keyboard is in the terminal');
  const argv = readFileSync(ARGV, 'utf8').split('\0').slice(0, -1);
  check(JSON.stringify(argv) === JSON.stringify(['-p', '--dangerously-skip-permissions', TASK]),
    `claude got -p --dangerously-skip-permissions and the task (${JSON.stringify(argv)})`);
  const panel = page.locator('.agent-panel');
  await panel.locator('.state', { hasText: /^running$/ }).waitFor();
  check((await panel.locator('.task-full').textContent()) === TASK, 'the whole task is shown');
  check(await page.locator('main b').count() === 0, 'the task\'s markup stayed text');
  check(!(await pageText(page)).includes(SECRET), 'the key is not on the sandbox\'s page');
  await shot(page, '03-terminal');
  console.log(`  ${id}: ${argv.length} arguments`);

  step('the list shows the agent, its task and that it runs');
  await page.click('#nav a:has-text("Sandboxes")');
  const card = page.locator(`.card[data-id="${id}"]`);
  await card.waitFor();
  check((await card.locator('dd.agent').textContent()).startsWith('claude'), 'the agent');
  await card.locator('dd.agent .state', { hasText: /^running$/ }).waitFor();
  const task = card.locator('dd.task');
  const shown = await task.textContent();
  check(shown.endsWith('…') && TASK.startsWith(shown.slice(0, -1)) && shown.length < TASK.length,
    `the task, shortened ("${shown}")`);
  check(await task.getAttribute('title') === TASK, 'the whole task on hover');
  await shot(page, '04-list-running');

  step('the agent exits: the list says so with its code, without a reload');
  writeFileSync(RELEASE, '');
  await card.locator('dd.agent .state', { hasText: /^exited 7$/ })
    .waitFor({ timeout: 20000 });
  check(await page.evaluate(() => window.__sbxNoReload === true), 'still no reload');
  await shot(page, '05-list-exited');

  step('its page keeps the terminal: what it printed, and its exit');
  await card.locator('h2 a').click();
  await page.locator('.tab', { hasText: 'claude (agent)' })
    .locator('.tab-status', { hasText: 'exited, code 7' }).waitFor();
  await waitLine(page, 'stub claude is done');
  await waitLine(page, '[exited with code 7]');
  await page.locator('.agent-panel .state', { hasText: /^exited 7$/ }).waitFor();
  await shot(page, '06-terminal-exited');

  step('another user\'s credentials are their own');
  const page2 = await newPage(browser, LAPTOP);
  await login(page2, other, `${URL0}#/agent`);
  await page2.locator('#a-secrets li[data-name="ANTHROPIC_API_KEY"] .secret-state',
    { hasText: /^not set$/ }).waitFor();
  await page2.goto(`${URL0}#/`);
  await page2.locator('.empty').waitFor();
  check(await page2.locator(`[data-id="${id}"]`).count() === 0, 'not in their list');
  await page2.context().close();

  step('forget the credential');
  await page.goto(`${URL0}#/agent`);
  await keyState.filter({ hasText: /^set$/ }).waitFor();
  await page.click('button[aria-label="Forget ANTHROPIC_API_KEY"]');
  await keyState.filter({ hasText: /^not set$/ }).waitFor();

  step('an agent whose repository cannot be cloned: failed, and why');
  // codex, its key given for this sandbox only (More environment) instead of saved
  await page.selectOption('#a-agent', 'codex');
  await page.locator('#a-secrets li[data-name="OPENAI_API_KEY"] .secret-state',
    { hasText: /^not set$/ }).waitFor();
  await page.fill('#a-task', 'never runs');
  await page.fill('#a-repo', 'http://localhost:1/nope.git');
  await page.click('summary:has-text("More options")');
  await page.click('text=Add a variable');
  await page.fill('#a-env-name-0', 'OPENAI_API_KEY');
  await page.fill('#a-env-value-0', 'sk-browser-test-not-saved');
  await launch(page);
  const bad = page.locator('.agent-panel');
  await bad.locator('.state', { hasText: /^failed$/ }).waitFor();
  const why = await bad.locator('dd.error').textContent();
  check(/git clone/.test(why), `the panel says why ("${why}")`);
  check((await bad.locator('dd.mono').textContent()) === 'http://localhost:1/nope.git',
    'the repository is shown');
  await page.locator('.toast.error', { hasText: 'codex did not start' }).waitFor();
  check(await page.locator('.tab').count() === 0, 'no terminal: the agent never started');
  await shot(page, '07-failed');
  await page.click('#nav a:has-text("Sandboxes")');
  const badCard = page.locator('.card', { hasText: 'codex' });
  await badCard.locator('dd.agent .state', { hasText: /^failed$/ }).waitFor();
  check((await badCard.locator('dd.error').textContent()) === why, 'the card says why too');
  await page.context().close();

  step('a phone-sized window: the form and the list fit');
  const phone = await newPage(browser, PHONE);
  await login(phone, user, `${URL0}#/agent`);
  await phone.locator('#a-secret-value').waitFor();
  check(await phone.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth),
    'no sideways scrolling on the agent form');
  await shot(phone, '08-phone-form');
  await phone.goto(`${URL0}#/`);
  await phone.locator(`.card[data-id="${id}"] dd.task`).waitFor();
  check(await phone.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth),
    'no sideways scrolling on the list');
  await phone.context().close();

  check(problems.length === 0, `no errors in the pages:\n${problems.join('\n')}`);
}

await drive('dashboard-agent', run);
