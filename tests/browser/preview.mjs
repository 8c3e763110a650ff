// preview.mjs: a preview as a person opens it, and what the guest's page can do, in Debian's
// Chromium (headless) driven by playwright-core. Run by test-preview.c, which starts the daemon
// and makes the account, in one of two ways:
// - sandboxd-fake (its agent's processes, and so its tunnels, run on this machine): a server
//   this script starts on 127.0.0.1:SBX_GUEST_PORT is the "guest's" dev server;
// - with SBX_GUEST_WEB (the static guest-web binary, tests/browser/guest-web.c), the product
//   sandboxd with a real VM: this script uploads guest-web, the page and its script into the
//   guest with the files API and starts guest-web there on SBX_GUEST_PORT (a run that ends once
//   it listens); what cookies it was sent it logs in the guest, read back with the files API.
// Settings from the environment: SBX_URL (the dashboard, on localhost), SBX_GUEST_PORT,
// SBX_PREVIEW_PORT, SBX_USER_EMAIL/_PASSWORD, SBX_ARTIFACTS, SBX_WEB_DIR, SBX_GUEST_WEB.
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
import { mkdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { check, drive, env, newPage, problems, signIn, step } from './lib.mjs';

const URL0 = env('SBX_URL'); // http://localhost:PORT/
const GUEST_PORT = Number(env('SBX_GUEST_PORT'));
const PREVIEW_PORT = Number(env('SBX_PREVIEW_PORT'));
const ART = env('SBX_ARTIFACTS');
const user = { email: env('SBX_USER_EMAIL'), password: env('SBX_USER_PASSWORD') };
const GUEST_WEB = process.env.SBX_GUEST_WEB || ''; // set: a real VM runs the server
const WWW = '/sandbox/home/www'; // in the VM: the server, its files and its cookie log

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

// In the VM: guest-web, the page and the script put into the guest through the API (as the
// signed-in user, with the session's CSRF token), and guest-web started on GUEST_PORT.
async function startGuestServer(dash, id) {
  const files = {
    [`${WWW}/guest-web`]: readFileSync(GUEST_WEB).toString('base64'),
    [`${WWW}/index.html`]: Buffer.from(page).toString('base64'),
    [`${WWW}/app.js`]: Buffer.from(script).toString('base64'),
  };
  const argv = ['sh', '-c', `chmod 755 ${WWW}/guest-web && ` +
    `exec ${WWW}/guest-web ${GUEST_PORT} ${WWW} ${WWW}/cookies.log`];
  return dash.evaluate(async ({ id, files, argv }) => {
    const me = await (await fetch('/v1/whoami')).json();
    const base = `/v1/sandboxes/${id}`;
    for (const [p, b64] of Object.entries(files)) {
      const body = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const r = await fetch(`${base}/files?path=${encodeURIComponent(p)}`, { method: 'PUT',
        headers: { 'Content-Type': 'application/octet-stream', 'X-CSRF-Token': me.csrf_token },
        body });
      if (r.status !== 204) return `PUT ${p}: ${r.status} ${await r.text()}`;
    }
    const r = await fetch(`${base}/run`, { method: 'POST', headers: {
      'Content-Type': 'application/json', 'X-CSRF-Token': me.csrf_token },
    body: JSON.stringify({ argv, timeout_secs: 60 }) });
    const out = await r.json();
    return r.status === 200 && out.exit_code === 0 ? 'ok'
      : `run: ${r.status} ${JSON.stringify(out)} ${atob(out.stderr || '')}`;
  }, { id, files, argv });
}

// What the guest's server was sent: in the VM, its log (one line a request: "PATH cookie=…").
async function guestCookies(dash, id) {
  if (!GUEST_WEB) return seenCookies;
  const log = await dash.evaluate(async ({ id, path }) => {
    const r = await fetch(`/v1/sandboxes/${id}/files?path=${encodeURIComponent(path)}`);
    return r.status === 200 ? r.text() : `(${r.status})`;
  }, { id, path: `${WWW}/cookies.log` });
  return log.split('\n').filter((l) => l !== '');
}

async function run(browser) {
  if (GUEST_WEB) {
    await scenario(browser);
    return;
  }
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
  if (GUEST_WEB) {
    step('put the web server into the VM and start it there');
    const started = await startGuestServer(dash, id);
    check(started === 'ok', `guest-web listens on ${GUEST_PORT} in the guest (${started})`);
  }

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
  const seen = await guestCookies(dash, id);
  check(seen.some((c) => c.includes('sbx_preview=')), `the guest's server saw the ` +
    `requests' cookies, its preview's among them (${seen.join(' | ')})`);
  check(!seen.some((c) => c.includes('sandboxd_session')),
    `the guest never received the dashboard's session cookie (${seen.join(' | ')})`);
  // what the guest's server was sent, by cookie name (values left out)
  const names = (h) => h.split(';').map((c) => c.trim().split('=')[0]).filter((n) => n)
    .join(',') || '(none)';
  console.log(`  cookies the guest's server was sent: ${seen.map((l) => {
    const m = /^(\S+) cookie=(.*)$/.exec(l); // the VM's log: "PATH cookie=HEADER"
    return m ? `${m[1]} ${names(m[2])}` : names(l);
  }).join(', ')}`);
  const listed = await dash.evaluate(async () =>
    (await (await fetch('/v1/sandboxes')).json()).sandboxes.map((s) => s.name));
  check(!listed.includes('made-by-guest'), `the guest's POST created nothing (${listed})`);

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
