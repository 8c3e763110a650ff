// terminal.js: one terminal of a sandbox: xterm.js in the page, attached over a WebSocket to
// a TTY process in the guest (docs/api.md, "Attach"). Each binary message is one frame: a
// type byte, a big-endian u32 length, the payload. Client to server: 'i' stdin, 'r' resize
// (u16 rows, u16 cols); server to client: 'o'/'E' output, 'd' bytes no longer kept, 'x' exit.
//
// The process outlives the page: closing the tab or losing the network only detaches. An
// attach replays the output the guest kept, so a reconnect clears the screen first and
// drops the answers xterm.js would give to terminal queries in that old output.
import { Terminal } from './xterm.mjs';
import { FitAddon } from './addon-fit.mjs';
import { api, getCsrf, seg } from './api.js';

const utf8 = new TextEncoder();
const BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 15000];
// xterm.js's replies to cursor position, device attribute and status queries
const REPLY = /^\x1b\[[?>]?[\d;]*[Rcn]$/;

function frame(type, payload) {
  const p = payload || new Uint8Array(0);
  const f = new Uint8Array(5 + p.length);
  f[0] = type.charCodeAt(0);
  new DataView(f.buffer).setUint32(1, p.length);
  f.set(p, 5);
  return f;
}

export class TerminalSession {
  // onStatus(session) is called whenever status, size or exit code change.
  constructor(sandboxId, { onStatus } = {}) {
    this.sandboxId = sandboxId;
    this.pid = null;
    this.status = 'starting';
    this.detail = '';
    this.exitCode = null;
    this.onStatus = onStatus || (() => {});
    this.attempt = 0;
    this.closed = false;
    this.ws = null;
    this.el = document.createElement('div');
    this.el.className = 'term';
    this.term = new Terminal({
      cursorBlink: true,
      scrollback: 10000,
      fontSize: 14,
      fontFamily: '"DejaVu Sans Mono", "Liberation Mono", ui-monospace, monospace',
      theme: { background: '#0f1419', foreground: '#e6e1cf', cursor: '#f29718' },
    });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.onData((d) => this.input(d));
    this.term.onBinary((d) => this.send('i', Uint8Array.from(d, (ch) => ch.charCodeAt(0))));
    this.term.onResize(() => {
      this.sendSize();
      this.onStatus(this);
    });
    // F6 leaves the terminal (Tab is the shell's), back to the terminal's tab
    this.term.attachCustomKeyEventHandler((ev) => {
      if (ev.type === 'keydown' && ev.key === 'F6') {
        ev.preventDefault();
        this.onEscape?.();
        return false;
      }
      return true;
    });
  }

  get rows() {
    return this.term.rows;
  }

  get cols() {
    return this.term.cols;
  }

  // Puts the terminal into parent and sizes it to fit (before a process exists, so the
  // process can start with that size).
  mount(parent) {
    parent.append(this.el);
    this.term.open(this.el);
    this.resize();
    this.observer = new ResizeObserver(() => this.resize());
    this.observer.observe(this.el);
  }

  // Fits the terminal to its element; a change of rows or columns is sent to the guest.
  resize() {
    if (this.closed || !this.el.isConnected || this.el.offsetParent === null) return;
    try {
      this.fit.fit();
    } catch (e) {
      // not laid out yet
    }
  }

  focus() {
    this.term.focus();
  }

  // Attaches to process pid. fresh: the page just started it, so its output is live.
  attach(pid, { fresh = false } = {}) {
    this.pid = pid;
    this.replaying = !fresh;
    this.connect();
  }

  connect() {
    if (this.closed) return;
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const url = `${proto}//${location.host}/v1/sandboxes/${seg(this.sandboxId)}/processes/` +
      `${this.pid}/attach?csrf=${seg(getCsrf() || '')}`;
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    this.setStatus(this.attempt ? 'reconnecting' : 'connecting', '');
    ws.onopen = () => {
      if (this.attempt > 0) {
        this.term.reset(); // the replay repaints everything
        this.replaying = true;
      }
      this.attempt = 0;
      this.quietTimer();
      this.setStatus('connected', '');
      this.sendSize();
    };
    ws.onmessage = (ev) => this.receive(new Uint8Array(ev.data));
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.closed || this.ended || this.exitCode !== null) return;
      this.retry();
    };
  }

  // After a drop: ask whether the process is still there, then attach again with backoff.
  retry() {
    const delay = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
    this.attempt++;
    this.setStatus('disconnected', `reconnecting in ${Math.round(delay / 1000) || 1} s`);
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(async () => {
      if (this.closed || this.ended) return;
      try {
        await api('GET', `/v1/sandboxes/${seg(this.sandboxId)}/processes/${this.pid}`);
      } catch (e) {
        if (e.status === 404 || e.status === 409) {
          this.end(e.message);
          return;
        }
        if (e.status === 401) return; // the page asks to sign in again
        this.retry(); // sandboxd unreachable: keep trying
        return;
      }
      this.connect();
    }, delay);
  }

  receive(buf) {
    const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    for (let off = 0; off + 5 <= buf.length;) {
      const type = String.fromCharCode(buf[off]);
      const len = view.getUint32(off + 1);
      const payload = buf.subarray(off + 5, off + 5 + len);
      off += 5 + len;
      if (type === 'o' || type === 'E') {
        this.term.write(payload);
        if (this.replaying) this.quietTimer();
      } else if (type === 'd' && len === 8) {
        const n = Number(new DataView(payload.buffer, payload.byteOffset, 8).getBigUint64(0));
        this.term.write(`\x1b[2m[${n} older bytes were not kept]\x1b[0m\r\n`);
      } else if (type === 'x' && len === 4) {
        this.exitCode = new DataView(payload.buffer, payload.byteOffset, 4).getInt32(0);
        this.term.write(`\r\n\x1b[2m[exited with code ${this.exitCode}]\x1b[0m\r\n`);
        this.setStatus('exited', `code ${this.exitCode}`);
      }
    }
  }

  // The replay is over once output pauses for a moment.
  quietTimer() {
    clearTimeout(this.replayTimer);
    this.replayTimer = setTimeout(() => {
      this.replaying = false;
    }, 400);
  }

  input(data) {
    if (this.replaying && REPLY.test(data)) return;
    this.send('i', utf8.encode(data));
  }

  sendSize() {
    const p = new Uint8Array(4);
    const v = new DataView(p.buffer);
    v.setUint16(0, this.term.rows);
    v.setUint16(2, this.term.cols);
    this.send('r', p);
  }

  send(type, payload) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(frame(type, payload));
  }

  setStatus(status, detail) {
    this.status = status;
    this.detail = detail;
    this.onStatus(this);
  }

  // The process is gone with its sandbox's stop: no more reconnecting.
  end(detail) {
    this.ended = true;
    clearTimeout(this.retryTimer);
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.close();
    }
    this.setStatus('gone', detail);
  }

  // Detaches (the process runs on) and frees the terminal.
  dispose() {
    this.closed = true;
    clearTimeout(this.retryTimer);
    clearTimeout(this.replayTimer);
    this.observer?.disconnect();
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.close();
    }
    this.term.dispose();
    this.el.remove();
  }
}
