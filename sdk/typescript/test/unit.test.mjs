// The SDK's parts that need no server: endpoints and credentials as the CLI takes them, the
// SSE and frame parsers fed every way a stream can be cut, the error classes, and the
// operations the client uses as docs/openapi.yaml has them.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";
import { pkgDir, sdk } from "./lib/sdk.mjs";

const { FrameReader, frame } = await import(pathToFileURL(join(pkgDir, "dist/attach.js")).href);
const { apiError } = await import(pathToFileURL(join(pkgDir, "dist/errors.js")).href);

test("endpoints: unix, http and https as the CLI writes them", () => {
  assert.deepEqual(sdk.parseEndpoint("unix:///run/sandboxd/sandboxd.sock"), {
    kind: "unix",
    socketPath: "/run/sandboxd/sandboxd.sock",
  });
  assert.deepEqual(sdk.parseEndpoint("http://127.0.0.1:7443"), { kind: "http", host: "127.0.0.1", port: 7443 });
  assert.deepEqual(sdk.parseEndpoint("https://sbx.example.com:7443/"), {
    kind: "https",
    host: "sbx.example.com",
    port: 7443,
  });
  assert.deepEqual(sdk.parseEndpoint("http://[::1]:80"), { kind: "http", host: "::1", port: 80 });
  for (const bad of ["unix://relative.sock", "ftp://x:1", "http://host", "http://h:0", "http://h:70000", "127.0.0.1:7443", "http://h:1/path"])
    assert.throws(() => sdk.parseEndpoint(bad), TypeError, bad);
});

test("credentials: options first, then SANDBOX_ENDPOINT, SANDBOX_TOKEN, SANDBOX_CA, then the local socket", () => {
  const dir = mkdtempSync(join(tmpdir(), "sbx-unit-"));
  try {
    const ca = join(dir, "ca.pem");
    writeFileSync(ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    const env = { SANDBOX_ENDPOINT: "https://h:7443", SANDBOX_TOKEN: "env-token", SANDBOX_CA: ca };
    const fromEnv = sdk.resolveTarget({ env });
    assert.equal(fromEnv.kind, "https");
    assert.equal(fromEnv.token, "env-token");
    assert.match(fromEnv.ca.toString(), /BEGIN CERTIFICATE/);
    const fromCode = sdk.resolveTarget({ env, endpoint: "http://127.0.0.1:1", token: "code-token", ca: "-----BEGIN X-----" });
    assert.equal(fromCode.endpoint, "http://127.0.0.1:1");
    assert.equal(fromCode.token, "code-token");
    assert.equal(fromCode.ca.toString(), "-----BEGIN X-----");
    // empty variables are not set
    const local = sdk.resolveTarget({ env: { SANDBOX_ENDPOINT: "", SANDBOX_TOKEN: "", XDG_RUNTIME_DIR: "/run/user/1000", HOME: "/home/u" } });
    assert.equal(local.kind, "unix");
    assert.equal(local.token, undefined);
    if (process.geteuid() === 0) assert.equal(local.socketPath, "/run/sandboxd/sandboxd.sock");
    else assert.equal(local.socketPath, "/run/user/1000/sandboxd.sock");
    if (process.geteuid() !== 0)
      assert.equal(sdk.defaultSocket({ HOME: "/home/u" }), "/home/u/.local/share/sandboxd/sandboxd.sock");
    assert.throws(() => sdk.resolveTarget({ env: { SANDBOX_CA: join(dir, "missing.pem") } }), /cannot read the CA file/);
    assert.throws(() => sdk.resolveTarget({ env: {}, token: "two words" }), /not a token/);
    assert.throws(() => new sdk.Client({ endpoint: "tcp://x:1", env: {} }), TypeError);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

async function collect(gen) {
  const out = [];
  for await (const x of gen) out.push(x);
  return out;
}

async function* chunks(text, cuts) {
  let at = 0;
  for (const c of cuts) {
    yield Buffer.from(text.slice(at, c));
    at = c;
  }
  yield Buffer.from(text.slice(at));
}

test("SSE: the same messages however the stream is cut", async () => {
  const text =
    "retry: 2000\r\n\r\n" +
    "id: 14\nevent: created\ndata: {\"seq\":14}\n\n" +
    ": keep-alive\n\n" +
    "id: 15\revent: state\rdata: {\"a\":1,\rdata: \"b\":\"é\"}\r\r" +
    "event: reconciler.removed\r\ndata:{\"x\":true}\r\n\r\n" +
    "data: no end";
  const want = [
    { id: "14", event: "created", data: '{"seq":14}' },
    { id: "15", event: "state", data: '{"a":1,\n"b":"é"}' },
    { id: null, event: "reconciler.removed", data: '{"x":true}' },
  ];
  const whole = Buffer.from(text);
  const retries = [];
  assert.deepEqual(await collect(sdk.sse(chunks(text, []), (ms) => retries.push(ms))), want);
  assert.deepEqual(retries, [2000]);
  // every cut into two pieces, at each byte (inside \r\n and inside the é too)
  for (let i = 1; i < whole.length; i++) {
    async function* two() {
      yield whole.subarray(0, i);
      yield whole.subarray(i);
    }
    assert.deepEqual(await collect(sdk.sse(two())), want, `cut at ${i}`);
  }
  // one byte at a time
  async function* bytes() {
    for (let i = 0; i < whole.length; i++) yield whole.subarray(i, i + 1);
  }
  assert.deepEqual(await collect(sdk.sse(bytes())), want);
});

test("NDJSON lines: split anywhere", async () => {
  const text = '{"stream":"stdout","data":"aGk="}\n{"exit_code":0}\n';
  for (let i = 0; i <= text.length; i++)
    assert.deepEqual(await collect(sdk.lines(chunks(text, [i]))), ['{"stream":"stdout","data":"aGk="}', '{"exit_code":0}']);
});

test("sbx-stream/1 frames: split anywhere, too large refused", () => {
  const exit = Buffer.alloc(4);
  exit.writeInt32BE(-1);
  const dropped = Buffer.alloc(8);
  dropped.writeBigUInt64BE(5n);
  const bytes = Buffer.concat([frame("o", Buffer.from("hello")), frame("d", dropped), frame("E"), frame("x", exit)]);
  for (let i = 0; i <= bytes.length; i++) {
    const r = new FrameReader();
    const got = [...r.feed(bytes.subarray(0, i)), ...r.feed(bytes.subarray(i))];
    assert.deepEqual(
      got.map((f) => [f.type, f.payload.toString("hex")]),
      [
        ["o", Buffer.from("hello").toString("hex")],
        ["d", dropped.toString("hex")],
        ["E", ""],
        ["x", exit.toString("hex")],
      ],
    );
    assert.equal(r.pending, 0);
  }
  const big = Buffer.from([0x6f, 0, 0x10, 0, 1]); // 1 MiB + 1
  assert.throws(() => new FrameReader().feed(big), sdk.ProtocolError);
});

test("errors: a class per API code, carrying code, message, status", () => {
  const cases = {
    invalid_request: [400, sdk.InvalidRequestError],
    unauthorized: [401, sdk.UnauthorizedError],
    refused: [403, sdk.RefusedError],
    forbidden_origin: [403, sdk.ForbiddenOriginError],
    not_found: [404, sdk.NotFoundError],
    conflict: [409, sdk.ConflictError],
    rate_limited: [429, sdk.RateLimitedError],
    unsupported: [501, sdk.UnsupportedError],
    unavailable: [503, sdk.UnavailableError],
    insufficient_storage: [507, sdk.InsufficientStorageError],
    internal: [500, sdk.InternalError],
  };
  for (const [code, [status, Cls]] of Object.entries(cases)) {
    const e = apiError(status, Buffer.from(JSON.stringify({ error: { code, message: `m ${code}` } })), "1");
    assert.ok(e instanceof Cls, code);
    assert.ok(e instanceof sdk.SandboxError);
    assert.ok(e instanceof Error);
    assert.equal(e.code, code);
    assert.equal(e.status, status);
    assert.equal(e.message, `m ${code}`);
    assert.equal(e.retryAfter, 1);
    assert.equal(e.name, Cls.name);
  }
  const future = apiError(418, Buffer.from('{"error":{"code":"teapot","message":"short and stout"}}'));
  assert.equal(future.constructor, sdk.SandboxError);
  assert.equal(future.code, "teapot");
  const html = apiError(502, Buffer.from("<html>bad gateway</html>"));
  assert.ok(html instanceof sdk.ProtocolError);
  assert.match(html.message, /HTTP 502 without an API error body/);
});

test("the operations the client calls are docs/openapi.yaml's", () => {
  const ops = sdk.operations;
  const want = {
    health: ["GET", "/v1/health"],
    getCapabilities: ["GET", "/v1/capabilities"],
    whoami: ["GET", "/v1/whoami"],
    listSandboxes: ["GET", "/v1/sandboxes"],
    createSandbox: ["POST", "/v1/sandboxes"],
    getSandbox: ["GET", "/v1/sandboxes/{ref}"],
    patchSandbox: ["PATCH", "/v1/sandboxes/{ref}"],
    deleteSandbox: ["DELETE", "/v1/sandboxes/{ref}"],
    stopSandbox: ["POST", "/v1/sandboxes/{ref}/stop"],
    startSandbox: ["POST", "/v1/sandboxes/{ref}/start"],
    listSandboxEvents: ["GET", "/v1/sandboxes/{ref}/events"],
    getSandboxMetrics: ["GET", "/v1/sandboxes/{ref}/metrics"],
    streamEvents: ["GET", "/v1/events/stream"],
    runCommand: ["POST", "/v1/sandboxes/{ref}/run"],
    listProcesses: ["GET", "/v1/sandboxes/{ref}/processes"],
    startProcess: ["POST", "/v1/sandboxes/{ref}/processes"],
    getProcess: ["GET", "/v1/sandboxes/{ref}/processes/{pid}"],
    followProcessOutput: ["GET", "/v1/sandboxes/{ref}/processes/{pid}/output"],
    writeProcessStdin: ["POST", "/v1/sandboxes/{ref}/processes/{pid}/stdin"],
    signalProcess: ["POST", "/v1/sandboxes/{ref}/processes/{pid}/signal"],
    attachProcess: ["GET", "/v1/sandboxes/{ref}/processes/{pid}/attach"],
    readFile: ["GET", "/v1/sandboxes/{ref}/files"],
    writeFile: ["PUT", "/v1/sandboxes/{ref}/files"],
    removeFile: ["DELETE", "/v1/sandboxes/{ref}/files"],
    listDirectory: ["GET", "/v1/sandboxes/{ref}/dirs"],
    getNode: ["GET", "/v1/node"],
    createSnapshot: ["POST", "/v1/sandboxes/{ref}/snapshots"],
    setSnapshotSchedule: ["PUT", "/v1/sandboxes/{ref}/snapshot-schedule"],
    listSnapshots: ["GET", "/v1/snapshots"],
    getSnapshot: ["GET", "/v1/snapshots/{id}"],
    deleteSnapshot: ["DELETE", "/v1/snapshots/{id}"],
    openTunnel: ["GET", "/v1/sandboxes/{ref}/tunnel"],
  };
  for (const [id, [method, path]] of Object.entries(want)) {
    assert.ok(ops[id], `docs/openapi.yaml has no operation ${id}`);
    assert.deepEqual([ops[id].method, ops[id].path], [method, path], id);
  }
});
