// Starts a sandboxd of the build tree for a test, as tests/lib/harness.c does: a directory of
// its own under $SANDBOX_TEST_TMP (the suite's, checked for leftovers at its end), the state
// and the socket in it, optionally TCP with a token; waits for "serving API v1"; stop()
// deletes every sandbox left, stops the daemon and removes the directory.
//
//   sandboxd-fake: SANDBOXD_FAKE (the binary), SANDBOX_GUESTD (its agent: real processes and
//                  files on this host, SANDBOXD_FAKE_AGENT)
//   real VMs:      SANDBOXD and SANDBOX_VM_BUNDLE (the vm/setup fixture's guest bundle)
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { randomBytes } from "node:crypto";

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function testTmp() {
  const t = process.env.SANDBOX_TEST_TMP || process.env.TMPDIR || tmpdir();
  mkdirSync(t, { recursive: true, mode: 0o700 });
  return mkdtempSync(join(t, "sbxtest."));
}

const flags = new Map();
function hasFlag(binary, flag) {
  if (!flags.has(binary)) {
    let help = "";
    try {
      help = execFileSync(binary, ["--help"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    } catch (e) {
      help = `${e.stdout ?? ""}${e.stderr ?? ""}`;
    }
    flags.set(binary, help);
  }
  return flags.get(binary).includes(flag);
}

/** Why a test cannot run here, or null. */
export function missing({ vm = false } = {}) {
  if (vm) {
    if (!process.env.SANDBOXD) return "SANDBOXD is not set (run through ctest)";
    const b = process.env.SANDBOX_VM_BUNDLE;
    if (!b || !existsSync(join(b, "vm/bundle.json")))
      return `no guest bundle at ${b} (the vm/setup fixture failed?)`;
    return null;
  }
  if (!process.env.SANDBOXD_FAKE || !existsSync(process.env.SANDBOXD_FAKE))
    return "SANDBOXD_FAKE is not set to sandboxd-fake (run through ctest)";
  if (!process.env.SANDBOX_GUESTD || !existsSync(process.env.SANDBOX_GUESTD))
    return "SANDBOX_GUESTD is not set to sandbox-guestd-host (run through ctest)";
  return null;
}

/** Makes a private CA and a certificate of it for localhost and 127.0.0.1 in dir (the
 * harness's harness_make_certs): ca.pem, server.pem, server.key. */
export function makeCerts(dir) {
  const sh = `umask 077 && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout ca.key -out ca.pem -days 2 -subj /CN=sandboxd-test-ca && \
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key -out server.csr -subj /CN=localhost && \
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext && \
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile san.ext`;
  execFileSync("sh", ["-c", sh], { cwd: dir, stdio: "ignore" });
  return { ca: join(dir, "ca.pem"), cert: join(dir, "server.pem"), key: join(dir, "server.key") };
}

export function haveOpenssl() {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

export async function startDaemon({ vm = false, tcp = false, tls = false, args = [], env = {} } = {}) {
  const dir = testTmp();
  const state = join(dir, "state");
  const sock = join(dir, "api.sock");
  const log = join(dir, "daemon.log");
  const binary = vm ? process.env.SANDBOXD : process.env.SANDBOXD_FAKE;
  const argv = ["--state-dir", state, "--socket", sock];
  const childEnv = { ...process.env, ...env };
  // a test's sandboxes are not limited by the machine (as the harness)
  argv.push("--capacity-cpus", "4096", "--capacity-memory-mb", "16777216", "--capacity-disk-mb", "1073741824");
  if (vm) {
    const bundle = process.env.SANDBOX_VM_BUNDLE;
    mkdirSync(state, { mode: 0o700 });
    // hard links: instant, and the bundle's files stay as they are
    execFileSync("cp", ["-al", join(bundle, "vm"), join(state, "vm")]);
    execFileSync("cp", ["-al", join(bundle, "images"), join(state, "images")]);
    argv.push("--accel", "tcg", "--default-image", "busybox", "--egress", "off");
  } else {
    childEnv.SANDBOXD_FAKE_AGENT = process.env.SANDBOX_GUESTD;
  }
  let token, port, ca;
  if (tls) {
    tcp = true;
    const c = makeCerts(dir);
    ca = c.ca;
    argv.push("--tls-cert", c.cert, "--tls-key", c.key);
  }
  if (tcp) {
    token = randomBytes(24).toString("hex");
    const tokenFile = join(dir, "token");
    writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
    port = await freePort();
    argv.push("--listen", `127.0.0.1:${port}`, "--token-file", tokenFile);
  }
  // nor is the preview listener's default port (127.0.0.1:7071) a test's, where the daemon
  // has one: a test that serves previews names a port of its own
  if (!args.includes("--preview-listen") && hasFlag(binary, "--preview-listen"))
    argv.push("--preview-listen", "off");
  argv.push(...args);
  const out = (await import("node:fs")).openSync(log, "a", 0o600);
  const child = spawn(binary, argv, { env: childEnv, stdio: ["ignore", out, out] });
  let exited = null;
  child.on("exit", (code, sig) => (exited = { code, sig }));
  const d = {
    dir,
    state,
    sock,
    log,
    child,
    token,
    port,
    ca,
    endpoint: `unix://${sock}`,
    tcpEndpoint: tcp ? `${tls ? "https" : "http"}://127.0.0.1:${port}` : undefined,
    logText: () => (existsSync(log) ? readFileSync(log, "utf8") : ""),
    stop: () => stopDaemon(d),
  };
  for (let i = 0; i < 1000; i++) {
    if (d.logText().includes("serving API v1")) return d;
    if (exited) break;
    await sleep(10);
  }
  const text = d.logText();
  await stopDaemon(d, { deleteFirst: false });
  throw new Error(`${binary} did not become ready${exited ? ` (exited ${JSON.stringify(exited)})` : ""}:\n${text}`);
}

async function request(sock, method, path) {
  const http = await import("node:http");
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: sock, method, path, headers: { Host: "localhost" } }, (res) => {
      const parts = [];
      res.on("data", (c) => parts.push(c));
      res.on("end", () => resolve({ status: res.statusCode, body: Buffer.concat(parts).toString() }));
    });
    req.on("error", reject);
    req.end();
  });
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function stopDaemon(d, { deleteFirst = true } = {}) {
  if (deleteFirst && d.child.exitCode === null && d.child.signalCode === null) {
    // every sandbox left goes, so no agent or VMM outlives the test
    try {
      const r = await request(d.sock, "GET", "/v1/sandboxes");
      for (const s of JSON.parse(r.body).sandboxes ?? [])
        if (s.state !== "terminated") await request(d.sock, "DELETE", `/v1/sandboxes/${s.id}`);
    } catch {
      // the daemon is gone already: what it left is killed below
    }
  }
  if (d.child.exitCode === null && d.child.signalCode === null) {
    const gone = new Promise((r) => d.child.once("exit", r));
    d.child.kill("SIGTERM");
    const t = setTimeout(() => d.child.kill("SIGKILL"), 10000);
    await gone;
    clearTimeout(t);
  }
  // fake agents (state/fake/<id>.guestd) a sandbox left
  const fake = join(d.state, "fake");
  if (existsSync(fake)) {
    for (const f of readdirSync(fake).filter((n) => n.endsWith(".guestd"))) {
      const pid = Number(readFileSync(join(fake, f), "utf8").trim());
      if (pid > 0 && alive(pid)) {
        console.error(`daemon.mjs: fake agent ${pid} outlived its sandbox; killing it`);
        process.kill(pid, "SIGKILL");
      }
    }
  }
  if (!process.env.HARNESS_KEEP) rmSync(d.dir, { recursive: true, force: true });
}
