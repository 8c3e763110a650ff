// The README's first example, run as written: the first ```js block of
// sdk/typescript/README.md saved as a file of a project that installed the package (its
// node_modules/@sandboxd/sdk links to the package built from src/, as `npm install
// /path/to/sdk/typescript` does), run with `node` against sandboxd-fake, once over the unix
// socket (SANDBOX_ENDPOINT) and once over TCP with SANDBOX_TOKEN.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { missing, startDaemon } from "./lib/daemon.mjs";
import { pkgDir, skipFile } from "./lib/sdk.mjs";

const why = missing();
if (why) skipFile(why);

const readme = readFileSync(join(dirname(fileURLToPath(import.meta.url)), "../README.md"), "utf8");
const m = /```js\n([\s\S]*?)```/.exec(readme);
assert.ok(m, "README.md has a ```js block");
const example = m[1];

let d, proj;
before(async () => {
  d = await startDaemon({ tcp: true });
  proj = mkdtempSync(join(d.dir, "proj-"));
  writeFileSync(join(proj, "package.json"), '{"name":"readme-example","private":true}\n');
  mkdirSync(join(proj, "node_modules/@sandboxd"), { recursive: true });
  symlinkSync(pkgDir, join(proj, "node_modules/@sandboxd/sdk"));
  writeFileSync(join(proj, "example.mjs"), example);
});
after(async () => {
  await d?.stop();
});

async function runExample(env) {
  const clean = { ...process.env };
  delete clean.SANDBOX_ENDPOINT;
  delete clean.SANDBOX_TOKEN;
  delete clean.SANDBOX_CA;
  const { stdout } = await promisify(execFile)("node", ["example.mjs"], {
    cwd: proj,
    env: { ...clean, ...env },
    timeout: 60000,
  });
  return stdout;
}

function check(out) {
  const lines = out.trimEnd().split("\n");
  assert.match(lines[0], /^sandbox sbx_[0-9a-f]{16} is running$/);
  assert.deepEqual(lines.slice(1), [
    "exit code 3, it said: hello from the sandbox",
    "got one",
    "got two",
    "exited 0",
    "read back: some text",
    "after remove: not_found",
  ]);
}

test("the README example over the unix socket (SANDBOX_ENDPOINT=unix://…)", { timeout: 90000 }, async () => {
  const out = await runExample({ SANDBOX_ENDPOINT: d.endpoint });
  check(out);
  // it deleted its sandbox
  const list = JSON.parse(await runList());
  assert.ok(list.every((s) => s.state === "terminated"));
});

test("the README example over TCP with a token (SANDBOX_ENDPOINT, SANDBOX_TOKEN)", { timeout: 90000 }, async () => {
  check(await runExample({ SANDBOX_ENDPOINT: d.tcpEndpoint, SANDBOX_TOKEN: d.token }));
  // and without the token the server says who is missing
  await assert.rejects(runExample({ SANDBOX_ENDPOINT: d.tcpEndpoint }), /UnauthorizedError/);
});

async function runList() {
  const script = `import { Client } from "@sandboxd/sdk";
const c = new Client();
console.log(JSON.stringify((await c.listSandboxes()).map((s) => s.info)));
c.close();`;
  writeFileSync(join(proj, "list.mjs"), script);
  const { stdout } = await promisify(execFile)("node", ["list.mjs"], {
    cwd: proj,
    env: { ...process.env, SANDBOX_ENDPOINT: d.endpoint },
  });
  return stdout;
}
