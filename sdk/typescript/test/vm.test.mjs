// The SDK against the product with a real microVM (QEMU under TCG, the vm/setup fixture's
// guest bundle, its busybox image): create, run, a process fed on stdin while its output
// streams, attach, files, the event stream, delete. ctest runs it under the vm lock
// (sdk/typescript-vm); by hand: flock /tmp/sbx-vm.lock ctest -R sdk/typescript-vm.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { missing, startDaemon } from "./lib/daemon.mjs";
import { sdk, skipFile } from "./lib/sdk.mjs";

const why = missing({ vm: true });
if (why) skipFile(why);

const { Client, NotFoundError, ConflictError } = sdk;
const T = { timeout: 300000 };

let d, client, tcp, s;
before(async () => {
  d = await startDaemon({ vm: true, tcp: true });
  client = new Client({ endpoint: d.endpoint });
  tcp = new Client({ endpoint: d.tcpEndpoint, token: d.token });
});
after(async () => {
  client?.close();
  tcp?.close();
  await d?.stop();
});

test("a real VM: create, and its events as they happen", T, async () => {
  const caps = await client.capabilities();
  assert.notEqual(caps.backend, "fake");
  const events = client.events();
  await events.ready;
  const t0 = Date.now();
  s = await tcp.createSandbox({ name: "ts-vm", memory_mb: 256, env: { GREETING: "from the vm" } });
  console.log(`# create answered in ${Date.now() - t0} ms (backend ${caps.backend}, accel ${caps.accel})`);
  assert.equal(s.state, "running", s.info.reason ?? "");
  const seen = [];
  for await (const ev of events) {
    if (ev.sandbox_id !== s.id) continue;
    seen.push(ev.type === "state" ? `state:${ev.data.to}` : ev.type);
    if (ev.type === "state" && ev.data.to === "running") break;
  }
  events.close();
  assert.deepEqual(seen, ["created", "state:starting", "state:running"]);
});

test("run in the guest", T, async () => {
  const r = await s.run(["sh", "-c", 'echo "$GREETING"; pwd; id -u; echo oops >&2; exit 3']);
  assert.equal(r.exit_code, 3);
  assert.equal(r.stdout.toString(), "from the vm\n/sandbox/home\n1001\n");
  assert.equal(r.stderr.toString(), "oops\n");
  const w = await s.run(["wc", "-c"], { stdin: "hello world" });
  assert.equal(w.stdout.toString().trim(), "11");
});

test("a process: stdin fed while its output streams, then its exit", T, async () => {
  const p = await s.processes.start(["sh", "-c", "while read l; do echo got $l; done; exit 6"]);
  const out = p.output();
  await out.ready;
  const it = out[Symbol.asyncIterator]();
  let text = "";
  const until = async (want) => {
    while (!text.includes(want)) {
      const { value, done } = await it.next();
      assert.equal(done, false, `the output ended before '${want}' (had '${text}')`);
      if (value.data) text += value.data.toString();
      if ("exit_code" in value) text += `[exit ${value.exit_code}]`;
    }
  };
  await p.write("one\n");
  await until("got one\n");
  await p.write("two\n", { close: true });
  await until("[exit 6]");
  assert.equal(text, "got one\ngot two\n[exit 6]");
  out.close();
  assert.equal((await p.refresh()).exitCode, 6);
});

test("attach to a TTY shell in the guest", T, async () => {
  const p = await s.processes.start(["sh"], { tty: true, rows: 40, cols: 120 });
  const a = await p.attach();
  a.write("stty size; tty\n");
  let text = "";
  for await (const ev of a) {
    if (ev.data) text += ev.data.toString();
    if (/\/dev\/pts\/\d+/.test(text)) break;
  }
  assert.match(text, /40 120/);
  a.resize(50, 200);
  a.write("stty size; exit 5\n");
  for await (const ev of a) if (ev.data) text += ev.data.toString();
  assert.match(text, /50 200/);
  assert.equal(a.exitCode, 5);
});

test("files in the guest", T, async () => {
  const bin = Buffer.alloc(100000);
  for (let i = 0; i < bin.length; i++) bin[i] = (i * 7) & 0xff;
  await s.files.write("/sandbox/home/proj/data.bin", bin);
  await s.files.write("/sandbox/home/proj/a.txt", "hello\n");
  assert.deepEqual(await s.files.read("/sandbox/home/proj/data.bin"), bin);
  const r = await s.run(["cat", "/sandbox/home/proj/a.txt"]);
  assert.equal(r.stdout.toString(), "hello\n");
  const names = (await s.files.list("/sandbox/home/proj")).map((e) => `${e.name}:${e.type}:${e.size}`).sort();
  assert.deepEqual(names, ["a.txt:file:6", "data.bin:file:100000"]);
  await assert.rejects(s.files.remove("/sandbox/home/proj"), ConflictError);
  await s.files.remove("/sandbox/home/proj/a.txt");
  await assert.rejects(s.files.read("/sandbox/home/proj/a.txt"), NotFoundError);
  const trail = (await s.auditEvents()).events.map((e) => e.type);
  assert.ok(trail.includes("file.written") && trail.includes("file.removed"), trail.join(","));
});

test("a tunnel to a port in the guest (sbx-tunnel/1)", T, async (t) => {
  if (!(await client.capabilities()).capabilities.tunnel) {
    t.skip("this sandboxd has no tunnels (capability 'tunnel' false)");
    return;
  }
  const events = s.events();
  await events.ready;
  await s.processes.start(["sh", "-c", "echo hello-from-guest | nc -l -p 8080"]);
  let sock;
  for (let i = 0; !sock; i++) {
    try {
      sock = await s.tunnel(8080);
    } catch (e) {
      // nc is not listening yet
      if (!(e instanceof ConflictError) || i > 100) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  let text = "";
  const ended = new Promise((resolve, reject) => {
    sock.on("data", (b) => {
      text += b.toString();
      // half-close once it spoke: nc reads our EOF and ends, and so does the tunnel
      if (text.includes("\n")) sock.end();
    });
    sock.on("end", resolve);
    sock.on("error", reject);
  });
  await ended;
  assert.equal(text, "hello-from-guest\n");
  sock.destroy();
  // the stream tells of it
  for await (const ev of events) if (ev.type === "tunnel.opened" && ev.data.port === 8080) break;
  events.close();
});

test("delete: terminated, and its name free", T, async () => {
  await s.delete();
  assert.equal((await client.getSandbox(s.id)).state, "terminated");
  await assert.rejects(client.getSandbox("ts-vm"), NotFoundError);
});
