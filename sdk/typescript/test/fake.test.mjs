// The SDK against a live sandboxd-fake whose agent is sandbox-guestd in test mode (processes
// and files are real, on this host), over the unix socket and over TCP with a token: every
// case runs on both. Run through ctest (sdk/typescript-fake), or by hand with SANDBOXD_FAKE
// and SANDBOX_GUESTD set: node test/fake.test.mjs
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { createServer } from "node:net";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, before, describe, test } from "node:test";
import { freePort, haveOpenssl, missing, startDaemon } from "./lib/daemon.mjs";
import { sdk, skipFile, until } from "./lib/sdk.mjs";

const why = missing();
if (why) skipFile(why);

const {
  Client,
  SandboxError,
  NotFoundError,
  ConflictError,
  InvalidRequestError,
  RefusedError,
  UnauthorizedError,
  ConnectionError,
  UnsupportedError,
} = sdk;

const T = { timeout: 60000 };

/** Reads an OutputEvent iterable until pred(text so far) or the exit; answers the text. */
async function readUntil(iter, pred) {
  let text = "";
  for await (const ev of iter) {
    if (ev.data) text += ev.data.toString();
    if ("exit_code" in ev) return { text, exit_code: ev.exit_code };
    if (pred && pred(text)) return { text, exit_code: null };
  }
  return { text, exit_code: null };
}

for (const transport of ["unix", "tcp"]) {
  describe(`sandboxd-fake over ${transport === "unix" ? "the unix socket" : "TCP with a token"}`, () => {
    let d, client, files;

    before(async () => {
      d = await startDaemon({ tcp: true });
      client =
        transport === "unix"
          ? new Client({ endpoint: d.endpoint })
          : new Client({ endpoint: d.tcpEndpoint, token: d.token });
      files = join(d.dir, "files");
      mkdirSync(files);
    });

    after(async () => {
      client?.close();
      await d?.stop();
    });

    test("discovery: health, whoami, capabilities", T, async () => {
      assert.deepEqual(await client.health(), { status: "ok" });
      const me = await client.whoami();
      assert.equal(me.user, "operator");
      assert.equal(me.role, "admin");
      const caps = await client.capabilities();
      assert.equal(caps.api_version, "v1");
      assert.equal(caps.capabilities.processes, true);
      assert.equal(caps.capabilities.files, true);
    });

    test("sandboxes: create, get, list, stop, start, delete", T, async () => {
      const s = await client.createSandbox({
        name: `life-${transport}`,
        labels: { suite: "ts", via: transport },
        env: { GREETING: "hi there" },
      });
      assert.match(s.id, /^sbx_[0-9a-f]{16}$/);
      assert.equal(s.state, "running");
      assert.equal(s.name, `life-${transport}`);
      assert.deepEqual(s.info.env_names, ["GREETING"]);
      assert.equal(s.info.owner, "operator");

      const byName = await client.getSandbox(`life-${transport}`);
      assert.equal(byName.id, s.id);
      const listed = await client.listSandboxes({ label: { via: transport }, state: "running" });
      assert.deepEqual(
        listed.map((x) => x.id),
        [s.id],
      );
      assert.equal((await client.listSandboxes({ label: [`via=${transport}`], state: ["stopped"] })).length, 0);

      // the sandbox's env reaches its processes
      const r = await s.run(["sh", "-c", 'printf %s "$GREETING"']);
      assert.equal(r.stdout.toString(), "hi there");

      assert.equal((await s.stop()).state, "stopped");
      await assert.rejects(s.run(["true"]), (e) => e instanceof ConflictError && e.status === 409);
      assert.equal((await client.startSandbox(s.id)).state, "running");
      assert.equal((await s.refresh()).state, "running");

      // suspend keeps memory and disk; a run resumes it first
      assert.equal((await s.suspend()).state, "suspended");
      assert.equal((await client.resumeSandbox(s.id)).state, "running");
      assert.equal((await client.suspendSandbox(s.id)).state, "suspended");
      assert.equal((await s.run(["true"])).exit_code, 0);
      assert.equal((await s.refresh()).state, "running");

      await s.delete();
      const gone = await client.getSandbox(s.id);
      assert.equal(gone.state, "terminated");
      assert.equal(gone.info.reason, "deleted");
      await assert.rejects(client.getSandbox(`life-${transport}`), NotFoundError);
      // idempotent by id
      await client.deleteSandbox(s.id);
    });

    test("errors: typed, with code, message and status", T, async () => {
      const s = await client.createSandbox({ name: `err-${transport}` });
      try {
        await assert.rejects(client.createSandbox({ name: `err-${transport}` }), (e) => {
          assert.ok(e instanceof ConflictError);
          assert.ok(e instanceof SandboxError);
          assert.equal(e.code, "conflict");
          assert.equal(e.status, 409);
          assert.equal(e.message, `the name 'err-${transport}' is already in use`);
          assert.equal(e.name, "ConflictError");
          return true;
        });
        await assert.rejects(client.createSandbox({ name: "Web_1" }), (e) => {
          assert.ok(e instanceof InvalidRequestError);
          assert.equal(e.code, "invalid_request");
          assert.equal(e.status, 400);
          assert.match(e.message, /name 'Web_1' is invalid/);
          return true;
        });
        await assert.rejects(client.createSandbox({ env: { LD_PRELOAD: "/x.so" } }), (e) => {
          assert.ok(e instanceof RefusedError);
          assert.equal(e.status, 403);
          return true;
        });
        await assert.rejects(client.getSandbox("nope"), (e) => {
          assert.ok(e instanceof NotFoundError);
          assert.equal(e.message, "sandbox 'nope' not found");
          return true;
        });
        await assert.rejects(s.process(999).refresh(), NotFoundError);
        await assert.rejects(s.run(["nosuch-program-here"]), InvalidRequestError);
      } finally {
        await s.delete();
      }
      if (transport === "tcp") {
        const anon = new Client({ endpoint: d.tcpEndpoint, env: {} });
        assert.deepEqual(await anon.health(), { status: "ok" });
        await assert.rejects(anon.whoami(), (e) => e instanceof UnauthorizedError && e.status === 401);
        const wrong = new Client({ endpoint: d.tcpEndpoint, token: "not-the-token-at-all" });
        await assert.rejects(wrong.listSandboxes(), UnauthorizedError);
        anon.close();
        wrong.close();
      }
      const dead = new Client({ endpoint: `unix://${join(d.dir, "no.sock")}` });
      await assert.rejects(dead.health(), (e) => e instanceof ConnectionError && e.status === 0);
    });

    describe("in a running sandbox", () => {
      let s;
      before(async () => {
        s = await client.createSandbox({ name: `work-${transport}` });
      });
      after(async () => {
        await s?.delete();
      });

      test("run: output, stdin, exit code, env, cwd, timeout", T, async () => {
        const r = await s.run(["sh", "-c", "echo hello; echo oops >&2; exit 3"]);
        assert.equal(r.exit_code, 3);
        assert.equal(r.stdout.toString(), "hello\n");
        assert.equal(r.stderr.toString(), "oops\n");
        assert.equal(r.timed_out, false);
        assert.equal(r.truncated, false);
        const w = await s.run(["wc", "-c"], { stdin: Buffer.from("hello world") });
        assert.equal(w.stdout.toString().trim(), "11");
        const e = await s.run(["sh", "-c", "echo $A; pwd"], { env: { A: "b c" }, cwd: files });
        assert.equal(e.stdout.toString(), `b c\n${files}\n`);
        const t = await s.run(["sh", "-c", "echo start; sleep 30"], { timeout_secs: 1 });
        assert.equal(t.exit_code, -1);
        assert.equal(t.timed_out, true);
        assert.equal(t.stdout.toString(), "start\n");
      });

      test("processes: live output while stdin is fed, list, wait", T, async () => {
        const p = await s.processes.start(["sh", "-c", "while read l; do echo got $l; echo warn >&2; done; exit 5"]);
        assert.equal(p.state, "running");
        assert.ok(p.pid >= 1);
        const out = p.output();
        await out.ready;
        const it = out[Symbol.asyncIterator]();
        const seen = [];
        const next = async (want) => {
          while (!seen.some((x) => x.includes(want))) {
            const { value, done } = await it.next();
            assert.equal(done, false, `the output ended before '${want}'`);
            if (value.data) seen.push(`${value.stream}:${value.data.toString()}`);
            if ("exit_code" in value) seen.push(`exit:${value.exit_code}`);
          }
        };
        // each line comes back before the next is sent: the output is live
        await p.write("one\n");
        await next("stdout:got one");
        await p.write(Buffer.from("two\n"));
        await next("stdout:got two");
        // stderr comes as stderr (on a pipe of its own: it may come after "got two", and
        // both warnings may come in one piece)
        await next("stderr:warn\n");
        await p.closeStdin();
        await next("exit:5");
        out.close();

        const listed = await s.processes.list();
        const mine = listed.find((x) => x.pid === p.pid);
        assert.ok(mine, "the process is listed");
        assert.equal(mine.state, "exited");
        assert.equal(mine.exitCode, 5);
        // its output again, at once, with the exit code
        const again = await p.output().collect();
        assert.equal(again.stdout.toString(), "got one\ngot two\n");
        assert.equal(again.exit_code, 5);
        await assert.rejects(p.write("late"), ConflictError);
      });

      test("processes: stdin streamed from a Readable, signals, wait", T, async () => {
        const p = await s.processes.start(["wc", "-c"]);
        await p.write(Readable.from([Buffer.alloc(100000, 1), "abc", Buffer.alloc(5, 2)]), { close: true });
        const r = await p.output().collect();
        assert.equal(r.stdout.toString().trim(), "100008");
        assert.equal(r.exit_code, 0);

        const sl = await s.processes.start(["sleep", "600"]);
        await sl.signal("TERM");
        const done = await sl.wait();
        assert.equal(done.state, "exited");
        assert.equal(done.exit_code, 143);
        await assert.rejects(sl.signal("KILL"), ConflictError);
        await assert.rejects(s.process(sl.pid).signal("STOP"), InvalidRequestError);
      });

      test("attach: sbx-stream/1 frames both ways, a signal", T, async () => {
        const p = await s.processes.start(["sh", "-c", "while read l; do echo got $l; echo warn >&2; done; exit 3"]);
        const a = await p.attach();
        a.write("one\n");
        a.write(Buffer.from("two\n"));
        a.end();
        const got = { stdout: "", stderr: "" };
        let last;
        for await (const f of a) {
          if (f.data) got[f.stream] += f.data.toString();
          last = f;
        }
        assert.deepEqual(got, { stdout: "got one\ngot two\n", stderr: "warn\nwarn\n" });
        assert.deepEqual(last, { exit_code: 3 });
        assert.equal(a.exitCode, 3);
        assert.equal(await a.wait(), 3);

        // a signal through the attachment
        const q = await s.processes.start(["sh", "-c", 'trap "echo got INT; exit 9" INT; echo ready; while :; do sleep 0.1; done']);
        const b = await q.attach();
        let seen = await readUntil(b, (t) => t.includes("ready"));
        b.signal("INT");
        seen = await readUntil(b);
        assert.match(seen.text, /got INT/);
        assert.equal(seen.exit_code, 9);

        // to a process that has ended: what was kept, and the exit code
        const late = await p.attach();
        const replay = await readUntil(late);
        assert.equal(replay.text.replace(/warn\n/g, ""), "got one\ngot two\n");
        assert.equal(replay.exit_code, 3);
      });

      test("attach: a TTY, resized", T, async () => {
        const p = await s.processes.start(["sh", "-c", "read a; stty size; read b; stty size; exit 7"], {
          tty: true,
          rows: 30,
          cols: 100,
        });
        const a = await p.attach();
        a.write("x\n");
        let seen = await readUntil(a, (t) => t.includes("30 100"));
        assert.match(seen.text, /30 100/);
        a.resize(50, 200);
        a.write("y\n");
        seen = await readUntil(a);
        assert.match(seen.text, /50 200/);
        assert.equal(seen.exit_code, 7);
        assert.throws(() => a.resize(0, 10), RangeError);
      });

      test("files: write, read, list, remove", T, async () => {
        const bin = Buffer.alloc(256);
        for (let i = 0; i < 256; i++) bin[i] = i;
        await s.files.write(`${files}/d/bin`, bin);
        assert.deepEqual(await s.files.read(`${files}/d/bin`), bin);
        await s.files.write(`${files}/d/text.txt`, "héllo\n");
        assert.equal(await s.files.readText(`${files}/d/text.txt`), "héllo\n");
        // a stream of chunks, sent as it comes
        async function* parts() {
          for (let i = 0; i < 3; i++) yield Buffer.alloc(70000, 65 + i);
        }
        await s.files.write(`${files}/d/big`, parts());
        const big = await s.files.read(`${files}/d/big`);
        assert.equal(big.length, 210000);
        assert.equal(big[0], 65);
        assert.equal(big[209999], 67);
        await s.files.write(`${files}/d/sub/x`, "");
        const entries = (await s.files.list(`${files}/d`)).sort((x, y) => x.name.localeCompare(y.name));
        assert.deepEqual(entries, [
          { name: "big", type: "file", size: 210000 },
          { name: "bin", type: "file", size: 256 },
          { name: "sub", type: "dir", size: entries[2].size },
          { name: "text.txt", type: "file", size: 7 },
        ]);
        await assert.rejects(s.files.remove(`${files}/d/sub`), ConflictError); // not empty
        await s.files.remove(`${files}/d/sub/x`);
        await s.files.remove(`${files}/d/sub`);
        await s.files.remove(`${files}/d/bin`);
        await assert.rejects(s.files.read(`${files}/d/bin`), (e) => e instanceof NotFoundError && e.code === "not_found");
        await assert.rejects(s.files.read("relative/path"), InvalidRequestError);
        await assert.rejects(s.files.list(`${files}/d/text.txt`), InvalidRequestError);
      });

      test("events: the live stream of one sandbox, the audit trail", T, async () => {
        const stream = s.events();
        await stream.ready;
        const r = await s.run(["sh", "-c", "exit 4"]);
        assert.equal(r.exit_code, 4);
        const types = [];
        for await (const ev of stream) {
          assert.equal(ev.sandbox_id, s.id);
          assert.equal(ev.sandbox.id, s.id);
          assert.equal(typeof ev.seq, "number");
          types.push(ev.type);
          if (ev.type === "process.exited") {
            assert.equal(ev.data.exit_code, 4);
            break;
          }
        }
        assert.deepEqual(types, ["process.started", "process.exited"]);
        assert.ok(stream.lastEventId !== null);

        const trail = await s.auditEvents();
        assert.equal(trail.events[0].type, "sandbox.created");
        assert.equal(trail.events.at(-1).type, "process.exited");
        assert.equal(trail.truncated, false);
        assert.equal(typeof trail.last_seq, "number");
        const m = await s.metrics();
        assert.ok(Array.isArray(m.samples));
      });
    });

    test("events: every sandbox's changes, and a replay from a seq", T, async () => {
      const stream = client.events();
      await stream.ready;
      const s = await client.createSandbox({ name: `watch-${transport}` });
      await s.delete();
      const got = [];
      for await (const ev of stream) {
        if (ev.sandbox_id !== s.id) continue;
        got.push(ev);
        if (ev.type === "state" && ev.data.to === "terminated") break;
      }
      assert.equal(got[0].type, "created");
      assert.equal(got[0].data.name, `watch-${transport}`);
      assert.deepEqual(
        got.filter((e) => e.type === "state").map((e) => e.data.to),
        ["starting", "running", "terminated"],
      );
      assert.equal(got.at(-1).data.end, "request");
      // a replay: the events after got[0] come first, in order, nothing lost
      const replay = client.events({ since: got[0].seq, sandbox: undefined });
      const again = [];
      for await (const ev of replay) {
        if (ev.sandbox_id !== s.id) continue;
        again.push(ev.seq);
        if (again.length === got.length - 1) break;
      }
      assert.deepEqual(
        again,
        got.slice(1).map((e) => e.seq),
      );
      // close() from outside ends an iteration that waits for events
      const idle = client.events();
      setTimeout(() => idle.close(), 200);
      let n = 0;
      for await (const _ of idle) n++;
      assert.equal(n, 0);
      // an abort signal too
      const ac = new AbortController();
      const idle2 = client.events({ signal: ac.signal });
      await idle2.ready;
      setTimeout(() => ac.abort(), 100);
      for await (const _ of idle2) n++;
      assert.equal(n, 0);
      await assert.rejects(client.events({ sandbox: "nope" }).ready, NotFoundError);
    });

    test("tunnels: a Duplex to a port in the sandbox", T, async (t) => {
      const caps = await client.capabilities();
      if (!caps.capabilities.tunnel) {
        t.skip("this sandboxd has no tunnels (capability 'tunnel' false: the tunnel branch is not merged)");
        await assert.rejects(client.sandbox("nope").tunnel(80), UnsupportedError);
        return;
      }
      // the fake's "guest" is this host: a TCP server on loopback stands for the guest's
      const server = createServer({ allowHalfOpen: true }, (c) => {
        const parts = [];
        c.on("data", (b) => parts.push(b));
        c.on("end", () => {
          c.write(`got ${Buffer.concat(parts).length} bytes: ${Buffer.concat(parts).toString().slice(0, 5)}`);
          c.end();
        });
      });
      await new Promise((r) => server.listen(0, "127.0.0.1", r));
      const port = server.address().port;
      const s = await client.createSandbox({ name: `tun-${transport}` });
      try {
        const sock = await s.tunnel(port);
        // half-close: our end() reaches the server as EOF, its answer still comes back
        const answer = new Promise((resolve, reject) => {
          const parts = [];
          sock.on("data", (b) => parts.push(b));
          sock.on("end", () => resolve(Buffer.concat(parts).toString()));
          sock.on("error", reject);
        });
        sock.write("hello");
        sock.end(" world");
        assert.equal(await answer, "got 11 bytes: hello");
        sock.destroy();
        // nothing listens there: 409, no tunnel
        server.close();
        await new Promise((r) => server.once("close", r));
        await assert.rejects(s.tunnel(port), (e) => e instanceof ConflictError && /nothing listens/.test(e.message));
        await assert.rejects(client.sandbox("nope").tunnel(port), NotFoundError);
        await assert.rejects(s.tunnel(0), RangeError);
      } finally {
        server.close();
        await s.delete();
      }
    });
  });
}

describe("agents and secrets (sandboxd-fake, stub agents on this host)", () => {
  let d, client, stubs, caps;
  before(async () => {
    d = await startDaemon();
    client = new Client({ endpoint: d.endpoint, env: {} });
    caps = (await client.capabilities()).capabilities;
    // no model is reachable here: a stub named claude says how it was started, then waits
    stubs = join(d.dir, "stubs");
    mkdirSync(stubs);
    writeFileSync(
      join(stubs, "claude"),
      '#!/bin/sh\necho "stub claude started: $*"; [ -n "$ANTHROPIC_API_KEY" ] && echo "has the key"\nexec sleep 600\n',
      { mode: 0o755 },
    );
  });
  after(async () => {
    client?.close();
    await d?.stop();
  });

  test("startAgent: the agent object, its hosts allowed, its credential by name, attach to it", T, async (t) => {
    if (!caps.agents) {
      t.skip("this sandboxd has no agents (capability 'agents': the agent branch is not merged)");
      return;
    }
    const env = { PATH: `${stubs}:/usr/bin:/bin`, ANTHROPIC_API_KEY: "sk-ant-test-value" };
    const s = await client.startAgent("claude", { name: "agent-1", env, args: ["--model", "x"] });
    try {
      const a = s.agent;
      assert.equal(a.name, "claude");
      assert.equal(a.task, null);
      assert.equal(a.repo, null);
      assert.ok(["starting", "running"].includes(a.state), a.state);
      assert.equal(typeof a.pid, "number");
      assert.equal(s.info.network.mode, "allowlist");
      assert.ok(s.info.network.allow.includes("api.anthropic.com"), s.info.network.allow.join(","));
      assert.ok(s.info.env_names.includes("ANTHROPIC_API_KEY"));
      assert.ok(!JSON.stringify(s.info).includes("sk-ant-test-value"));
      const p = await s.process(a.pid).refresh();
      assert.equal(p.info.tty, true);
      assert.equal(p.info.keep, true);
      const at = await s.attachAgent();
      let text = "";
      for await (const ev of at) {
        if (ev.data) text += ev.data.toString();
        if (text.includes("has the key")) break;
      }
      assert.match(text, /stub claude started: --model x/);
      at.close();
      // listed with its agent
      const [listed] = await client.listSandboxes({ label: [] , state: "running" });
      assert.equal(listed.agent.name, "claude");
    } finally {
      await s.delete();
    }
  });

  test("a missing credential: InvalidRequestError naming it, nothing created", T, async (t) => {
    if (!caps.agents) {
      t.skip("this sandboxd has no agents (capability 'agents': the agent branch is not merged)");
      return;
    }
    const before = (await client.listSandboxes()).length;
    await assert.rejects(client.startAgent("claude", { task: "fix it", env: { PATH: `${stubs}:/usr/bin:/bin` } }), (e) => {
      assert.ok(e instanceof InvalidRequestError);
      assert.match(e.message, /ANTHROPIC_API_KEY/);
      return true;
    });
    await assert.rejects(client.startAgent({ name: "nosuch" }), InvalidRequestError);
    assert.equal((await client.listSandboxes()).length, before);
  });

  test("secrets: set, list (names only), an agent's credential from one, remove", T, async (t) => {
    if (!caps.agents) {
      t.skip("this sandboxd has no secrets (the agent branch is not merged)");
      return;
    }
    const saved = await client.secrets.set("ANTHROPIC_API_KEY", "sk-ant-saved-value");
    assert.equal(saved.name, "ANTHROPIC_API_KEY");
    assert.match(saved.updated_at, /^\d{4}-\d\d-\d\dT/);
    const list = await client.secrets.list();
    assert.deepEqual(list.map((x) => x.name), ["ANTHROPIC_API_KEY"]);
    assert.ok(!JSON.stringify(list).includes("sk-ant-saved-value"));
    const s = await client.startAgent("claude", { task: "say hi", env: { PATH: `${stubs}:/usr/bin:/bin` } });
    try {
      assert.equal(s.agent.task, "say hi");
      assert.ok(s.info.env_names.includes("ANTHROPIC_API_KEY"));
    } finally {
      await s.delete();
    }
    await client.secrets.remove("ANTHROPIC_API_KEY");
    assert.deepEqual(await client.secrets.list(), []);
    await assert.rejects(client.secrets.remove("ANTHROPIC_API_KEY"), NotFoundError);
    await assert.rejects(client.secrets.set("1BAD", "x"), InvalidRequestError);
  });
});

describe("previews (sandboxd-fake with a preview listener)", () => {
  let d, client, listen;
  before(async () => {
    listen = await freePort();
    d = await startDaemon({ args: ["--preview-listen", `127.0.0.1:${listen}`] }).catch(() => null);
    if (!d) d = await startDaemon(); // a sandboxd without previews
    client = new Client({ endpoint: d.endpoint, env: {} });
  });
  after(async () => {
    client?.close();
    await d?.stop();
  });

  test("preview(port): a URL on the preview's own origin, whose token becomes a cookie", T, async (t) => {
    if (!(await client.capabilities()).capabilities.preview) {
      t.skip("this sandboxd has no previews (capability 'preview': the preview branch is not merged)");
      return;
    }
    const s = await client.createSandbox({ name: "prev" });
    try {
      const p = await s.preview(3000);
      assert.equal(p.port, 3000);
      const u = new URL(p.url);
      assert.equal(u.hostname, `p-${s.id.slice(4)}-3000.localhost`);
      assert.equal(u.port, String(listen));
      assert.ok(u.searchParams.get("sbx_preview"));
      // the listener turns the token into a cookie for that host
      const res = await new Promise((resolve, reject) => {
        const req = httpRequest(
          { host: "127.0.0.1", port: listen, path: `${u.pathname}${u.search}`, headers: { Host: u.host } },
          resolve,
        );
        req.on("error", reject);
        req.end();
      });
      res.resume();
      assert.equal(res.statusCode, 302);
      assert.match(String(res.headers["set-cookie"]), /sbx_preview=.*HttpOnly/);
      await s.stop();
      await assert.rejects(s.preview(3000), ConflictError);
      await assert.rejects(client.sandbox("nope").preview(3000), NotFoundError);
    } finally {
      await s.delete();
    }
  });
});

describe("sandboxd-fake over TLS with a private CA", () => {
  let d;
  before(async (t) => {
    if (!haveOpenssl()) return;
    d = await startDaemon({ tls: true });
  });
  after(async () => {
    await d?.stop();
  });

  test("the CA from the options or SANDBOX_CA; an attach over TLS; no CA: no connection", T, async (t) => {
    if (!d) {
      t.skip("openssl is not installed: no certificate to serve");
      return;
    }
    assert.match(d.tcpEndpoint, /^https:\/\/127\.0\.0\.1:\d+$/);
    const c = new Client({ endpoint: d.tcpEndpoint, token: d.token, ca: d.ca });
    const env = new Client({ env: { SANDBOX_ENDPOINT: d.tcpEndpoint, SANDBOX_TOKEN: d.token, SANDBOX_CA: d.ca } });
    try {
      assert.equal((await env.whoami()).user, "operator");
      const s = await c.createSandbox({ name: "tls" });
      const r = await env.sandbox("tls").run(["echo", "over tls"]);
      assert.equal(r.stdout.toString(), "over tls\n");
      const p = await s.processes.start(["cat"]);
      const a = await p.attach();
      a.write("through the tls upgrade\n");
      a.end();
      const seen = await readUntil(a);
      assert.equal(seen.text, "through the tls upgrade\n");
      assert.equal(seen.exit_code, 0);
      const ev = s.events();
      await ev.ready;
      await s.files.write(`${d.dir}/tls.txt`, "x");
      for await (const e of ev) if (e.type === "file.written") break;
      await s.delete();
      // without the CA the certificate is not trusted, and nothing is sent
      const blind = new Client({ endpoint: d.tcpEndpoint, token: d.token, env: {} });
      await assert.rejects(blind.whoami(), (e) => e instanceof ConnectionError && /certificate/i.test(e.message));
      blind.close();
    } finally {
      c.close();
      env.close();
    }
  });
});
