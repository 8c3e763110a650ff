// preview.mjs: a preview as a person opens it, and what the guest's page can do, in Debian's
// Chromium (headless) driven by playwright-core. Run by test-preview.c, which starts
// sandboxd-fake (its agent's processes, and so its tunnels, run on this machine: a server this
// script starts on 127.0.0.1:SBX_GUEST_PORT is the "guest's" dev server) and makes the account.
// Settings from the environment: SBX_URL (the dashboard, on localhost), SBX_GUEST_PORT,
// SBX_PREVIEW_PORT, SBX_USER_EMAIL/_PASSWORD, SBX_ARTIFACTS, SBX_WEB_DIR.
//
// The guest's server serves a page whose own script (from the guest, like a dev server's)
// opens a WebSocket back to the guest and echoes through it, reads document.cookie, and tries
// the dashboard's API with the browser's credentials: a read (fetch with credentials), and a
// create sent the way a cross-site form would (no-cors). The checks: the preview opens in a
// new tab on its own host (p-ID-PORT.localhost), its token gone from the address; the page
// loads and the echo comes back; the script sees no cookie (neither the dashboard's session
// nor the HttpOnly preview cookie); the API read fails; nothing was created; the guest never
// received the dashboard's session cookie; the preview cookie is HttpOnly, Lax and for that
// host alone.
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { check, drive, env, newPage, problems, signIn, step } from './lib.mjs';

const URL0 = env('SBX_URL'); // http://localhost:PORT/
const GUEST_PORT = Number(env('SBX_GUEST_PORT'));
const PREVIEW_PORT = Number(env('SBX_PREVIEW_PORT'));
const ART = env('SBX_ARTIFACTS');
const user = { email: env('SBX_USER_EMAIL'), password: env('SBX_USER_PASSWORD') };

mkdirSync(ART, { recursive: true });

// ---- the guest's dev server: a page, its script, and a WebSocket echo ----
const seenCookies = [];
const page = `<!doctype html><html><head><meta charset="utf-8"><title>guest app</title></head>
<body><h1>Hello from the sandbox</h1><pre id="result">pending</pre>
<script src="/app.js"></script></body></html>`;
const script = `(async () => {
  const out = {};
  out.cookie = document.cookie;
  out.ws = await new Promise((done) => {
    const ws = new WebSocket('ws://' + location.host + '/ws');
    ws.onopen = () => ws.send('echo-me');
    ws.onmessage = (e) => done(String(e.data));
    ws.onerror = () => done('error');
    setTimeout(() => done('timeout'), 10000);
  });
  try {
    const r = await fetch(${JSON.stringify(URL0)} + 'v1/sandboxes', { credentials: 'include' });
    out.api = 'status ' + r.status + ': ' + (await r.text()).slice(0, 200);
  } catch (e) {
    out.api = 'blocked: ' + e.message;
  }
  try {
    await fetch(${JSON.stringify(URL0)} + 'v1/sandboxes', { method: 'POST', mode: 'no-cors',
      credentials: 'include', headers: { 'Content-Type': 'text/plain' },
      body: JSON.stringify({ name: 'made-by-guest', image: 'busybox' }) });
    out.post = 'sent';
  } catch (e) {
    out.post = 'blocked: ' + e.message;
  }
  document.getElementById('result').textContent = JSON.stringify(out);
})();`;

const server = http.createServer((req, res) => {
  seenCookies.push(req.headers.cookie || '');
  if (req.url === '/app.js') {
    res.writeHead(200, { 'Content-Type': 'text/javascript' });
    res.end(script);
  } else {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    res.end(page);
  }
});
// RFC 6455: the handshake, then each (masked) text frame from the page sent back unmasked
server.on('upgrade', (req, sock) => {
  seenCookies.push(req.headers.cookie || '');
  const accept = createHash('sha1')
    .update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11')
    .digest('base64');
  sock.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n' +
    `Connection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  let buf = Buffer.alloc(0);
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 6) {
      const op = buf[0] & 0x0f;
      let len = buf[1] & 0x7f;
      let off = 2;
      if (len === 126) {
        len = buf.readUInt16BE(2);
        off = 4;
      }
      if (buf.length < off + 4 + len) return;
      const mask = buf.subarray(off, off + 4);
      const payload = Buffer.from(buf.subarray(off + 4, off + 4 + len));
      for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i % 4];
      buf = buf.subarray(off + 4 + len);
      if (op === 8) {
        sock.end();
        return;
      }
      if (op === 1 && len < 126) sock.write(Buffer.concat([Buffer.from([0x81, len]), payload]));
    }
  });
  sock.on('error', () => {});
});

async function run(browser) {
  await new Promise((done) => server.listen(GUEST_PORT, '127.0.0.1', done));
  try {
    await scenario(browser);
  } finally {
    server.close();
  }
}

async function scenario(browser) {
  step('sign in on the dashboard (localhost) and start a sandbox');
  const dash = await newPage(browser, { width: 1280, height: 800 });
  await signIn(dash, user, URL0);
  await dash.locator('#who .me').waitFor();
  const id = await dash.evaluate(async () => {
    const me = await (await fetch('/v1/whoami')).json();
    const r = await fetch('/v1/sandboxes', { method: 'POST', headers: {
      'Content-Type': 'application/json', 'X-CSRF-Token': me.csrf_token },
    body: JSON.stringify({ name: 'web', image: 'busybox' }) });
    return (await r.json()).id;
  });
  check(/^sbx_[0-9a-f]{16}$/.test(id), `a sandbox was made (${id})`);

  step('open the preview of the guest port from the sandbox page');
  await dash.goto(`${URL0}#/sandbox/${id}`);
  await dash.locator('h1', { hasText: 'web' }).waitFor();
  await dash.locator('#preview-port:not([disabled])').waitFor();
  await dash.locator('button[data-key="preview-open"]:not([disabled])').waitFor();
  await dash.fill('#preview-port', String(GUEST_PORT));
  const [tab] = await Promise.all([
    dash.context().waitForEvent('page'),
    dash.click('button[data-key="preview-open"]'),
  ]);
  const hostRe = new RegExp(`^http://p-${id.slice(4)}-${GUEST_PORT}\\.localhost:` +
    `${PREVIEW_PORT}/$`);
  await tab.waitForURL(hostRe, { timeout: 20000 });
  check(!tab.url().includes('sbx_preview'), `the token left the address (${tab.url()})`);
  check(await tab.evaluate(() => window.opener === null), 'the preview cannot reach the ' +
    'dashboard through window.opener');
  await dash.locator('.preview-link a').waitFor();

  step('the guest page loads, its WebSocket echoes');
  await tab.locator('h1', { hasText: 'Hello from the sandbox' }).waitFor();
  await tab.locator('#result', { hasText: '{' }).waitFor({ timeout: 30000 });
  const out = JSON.parse(await tab.locator('#result').textContent());
  await tab.screenshot({ path: path.join(ART, 'preview-guest.png') });
  check(out.ws === 'echo-me', `the WebSocket echo came back (got ${out.ws})`);

  step("the guest's script cannot read the cookies or call the API");
  check(!out.cookie.includes('sandboxd_session'), `no session cookie in document.cookie ` +
    `(${out.cookie})`);
  check(!out.cookie.includes('sbx_preview'), `the preview cookie is HttpOnly (${out.cookie})`);
  check(out.api.startsWith('blocked') || /^status 40[13]/.test(out.api),
    `a credentialed fetch of the API fails or is refused (got ${out.api})`);
  check(!seenCookies.some((c) => c.includes('sandboxd_session')),
    'the guest never received the dashboard\'s session cookie');
  const names = await dash.evaluate(async () =>
    (await (await fetch('/v1/sandboxes')).json()).sandboxes.map((s) => s.name));
  check(!names.includes('made-by-guest'), `the guest's POST created nothing (${names})`);

  step('the preview cookie: HttpOnly, Lax, that host alone');
  const previewOrigin = `http://p-${id.slice(4)}-${GUEST_PORT}.localhost:${PREVIEW_PORT}/`;
  const cookies = await tab.context().cookies(previewOrigin);
  const pc = cookies.find((c) => c.name === 'sbx_preview');
  check(pc && pc.httpOnly && pc.sameSite === 'Lax', `sbx_preview is HttpOnly and Lax ` +
    `(${JSON.stringify(pc)})`);
  check(pc.domain === `p-${id.slice(4)}-${GUEST_PORT}.localhost`, `for the preview's host ` +
    `only (${pc.domain})`);
  // (whether the session cookie goes to the preview is the guest server's to say, above:
  // playwright's cookies(url) matches a host-only cookie for localhost to its subdomains)
  const dashCookies = await dash.context().cookies(URL0);
  check(!dashCookies.some((c) => c.name === 'sbx_preview'), 'the preview cookie is not sent ' +
    'to the dashboard');

  step('another port of the same sandbox does not open with this cookie');
  const other = await tab.context().newPage();
  const resp = await other.goto(`http://p-${id.slice(4)}-${GUEST_PORT === 65535 ? 1
    : GUEST_PORT + 1}.localhost:${PREVIEW_PORT}/`);
  check(resp.status() === 401, `401 for a port the cookie is not for (got ${resp.status()})`);

  check(problems.length === 0, `no page errors on the dashboard: ${problems.join('; ')}`);
}

drive('preview.mjs', run);
