// The client: sandboxes, their processes and files, the event stream, secrets, agents,
// tunnels and previews, over API v1 (docs/api.md).
import type { Socket } from "node:net";
import type * as api from "./openapi.gen.js";
import { Attachment } from "./attach.js";
import { resolveTarget, type ClientOptions } from "./config.js";
import { Transport, type Body } from "./http.js";
import { EventStream, OutputStream } from "./live.js";
import type {
  AgentInfo,
  AgentRequest,
  CreateSandboxRequest,
  EventStreamOptions,
  Preview,
  ProcessOptions,
  RunOptions,
  RunResult,
  SandboxInfo,
  Secret,
} from "./types.js";

const seg = encodeURIComponent;

function b64(data: Buffer | Uint8Array | string): string {
  return (typeof data === "string" ? Buffer.from(data) : Buffer.from(data)).toString("base64");
}

function checkArgv(argv: readonly string[]): string[] {
  if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== "string"))
    throw new TypeError("argv must be a non-empty array of strings (the program first)");
  return [...argv];
}

/** A connection to sandboxd. Endpoint, token and CA come from the options, else
 * SANDBOX_ENDPOINT, SANDBOX_TOKEN and SANDBOX_CA, else the local socket (as sandbox-cli). */
export class Client {
  /** @internal */
  readonly transport: Transport;
  /** Per-user secrets (ext): write-only values that agents' credentials come from. */
  readonly secrets: Secrets;

  constructor(options: ClientOptions = {}) {
    this.transport = new Transport(resolveTarget(options));
    this.secrets = new Secrets(this.transport);
  }

  /** The endpoint in use, e.g. unix:///run/sandboxd/sandboxd.sock. */
  get endpoint(): string {
    return this.transport.target.endpoint;
  }

  /** Closes the idle keep-alive connections (streams and attachments close on their own). */
  close(): void {
    this.transport.close();
  }

  health(): Promise<api.Health> {
    return this.transport.json("GET", "/v1/health");
  }

  capabilities(): Promise<api.Capabilities> {
    return this.transport.json("GET", "/v1/capabilities");
  }

  whoami(): Promise<api.Whoami> {
    return this.transport.json("GET", "/v1/whoami");
  }

  node(): Promise<api.Node> {
    return this.transport.json("GET", "/v1/node");
  }

  /** Creates a sandbox; by default the answer waits until it runs (or failed: check
   * `state`). Every field is optional; `agent` (ext) starts an agent in it. */
  async createSandbox(request: CreateSandboxRequest = {}): Promise<Sandbox> {
    const info = await this.transport.json<SandboxInfo>("POST", "/v1/sandboxes", { json: request });
    return new Sandbox(this, info.id, info);
  }

  /** Creates a sandbox running an agent (claude, codex, gemini, opencode) on a task, or
   * interactively without one: createSandbox with `agent`. The agent's credential comes from
   * `env` (e.g. { ANTHROPIC_API_KEY: … }) or the caller's saved secret. */
  startAgent(
    agent: AgentRequest["name"] | AgentRequest,
    request: Omit<CreateSandboxRequest, "agent"> & Omit<Partial<AgentRequest>, "name"> = {},
  ): Promise<Sandbox> {
    const { task, repo, args, ...create } = request;
    const a: AgentRequest = typeof agent === "string" ? { name: agent } : { ...agent };
    if (task !== undefined) a.task = task;
    if (repo !== undefined) a.repo = repo;
    if (args !== undefined) a.args = args;
    return this.createSandbox({ ...create, agent: a });
  }

  /** The caller's sandboxes (every one for an admin), newest first; filtered by state(s)
   * and labels (all must match). */
  async listSandboxes(
    filter: { state?: api.State | api.State[]; label?: Record<string, string> | string[] } = {},
  ): Promise<Sandbox[]> {
    const label = Array.isArray(filter.label)
      ? filter.label
      : filter.label
        ? Object.entries(filter.label).map(([k, v]) => `${k}=${v}`)
        : undefined;
    const state = filter.state === undefined ? undefined : ([] as api.State[]).concat(filter.state);
    const list = await this.transport.json<{ sandboxes: SandboxInfo[] }>("GET", "/v1/sandboxes", {
      query: { state, label },
    });
    return list.sandboxes.map((s) => new Sandbox(this, s.id, s));
  }

  /** One sandbox by id or name (NotFoundError when the caller has none such). */
  async getSandbox(ref: string): Promise<Sandbox> {
    const info = await this.transport.json<SandboxInfo>("GET", `/v1/sandboxes/${seg(ref)}`);
    return new Sandbox(this, info.id, info);
  }

  /** A handle on a sandbox by id or name, without asking the server anything. */
  sandbox(ref: string): Sandbox {
    return new Sandbox(this, ref, null);
  }

  /** Deletes a sandbox (idempotent by id); resolves once it is terminated. */
  async deleteSandbox(ref: string): Promise<void> {
    await this.transport.call("DELETE", `/v1/sandboxes/${seg(ref)}`);
  }

  stopSandbox(ref: string): Promise<Sandbox> {
    return this.sandbox(ref).stop();
  }

  startSandbox(ref: string): Promise<Sandbox> {
    return this.sandbox(ref).start();
  }

  suspendSandbox(ref: string): Promise<Sandbox> {
    return this.sandbox(ref).suspend();
  }

  resumeSandbox(ref: string): Promise<Sandbox> {
    return this.sandbox(ref).resume();
  }

  /** The live event stream (ext): iterate it with for await; close() ends it. It starts
   * connecting at once: `await stream.ready` before causing the events to watch. */
  events(options: EventStreamOptions = {}): EventStream {
    const { since, sandbox, reconnect = false, signal } = options;
    const stream = new EventStream(
      (last) =>
        this.transport.open(
          "GET",
          "/v1/events/stream",
          {
            query: { since: last === null ? since : undefined, sandbox },
            headers: last === null ? {} : { "Last-Event-ID": last },
          },
          true,
        ),
      reconnect,
    );
    if (signal) {
      if (signal.aborted) stream.close();
      else signal.addEventListener("abort", () => stream.close(), { once: true });
    }
    return stream;
  }
}

/** A sandbox: its id (or the name it was asked by) and what the server last said of it. */
export class Sandbox {
  /** What the server last answered about it (null for a handle made by client.sandbox()). */
  info: SandboxInfo | null;
  /** Its processes. */
  readonly processes: Processes;
  /** Its files, by absolute guest path. */
  readonly files: Files;

  constructor(
    readonly client: Client,
    /** The id, or the name for a handle made by name. */
    readonly ref: string,
    info: SandboxInfo | null,
  ) {
    this.info = info;
    this.processes = new Processes(this);
    this.files = new Files(this);
  }

  /** @internal */
  get path(): string {
    return `/v1/sandboxes/${seg(this.ref)}`;
  }

  /** @internal */
  get t(): Transport {
    return this.client.transport;
  }

  get id(): string {
    return this.info?.id ?? this.ref;
  }

  get name(): string | null {
    return this.info?.name ?? null;
  }

  get state(): api.State | undefined {
    return this.info?.state;
  }

  /** The agent started in it (ext), or null. */
  get agent(): AgentInfo | null {
    return this.info?.agent ?? null;
  }

  private keep(info: SandboxInfo): this {
    this.info = info;
    return this;
  }

  /** Asks the server again; answers this sandbox, with info updated. */
  async refresh(): Promise<this> {
    return this.keep(await this.t.json<SandboxInfo>("GET", this.path));
  }

  /** Changes the name, labels, idle timeout or network. */
  async update(patch: api.PatchRequest): Promise<this> {
    return this.keep(await this.t.json<SandboxInfo>("PATCH", this.path, { json: patch }));
  }

  /** Stops it (the disk is kept); resolves once stopped. */
  async stop(): Promise<this> {
    return this.keep(await this.t.json<SandboxInfo>("POST", `${this.path}/stop`));
  }

  /** Boots it again; resolves once it runs (or failed: check state). */
  async start(): Promise<this> {
    return this.keep(await this.t.json<SandboxInfo>("POST", `${this.path}/start`));
  }

  /** Suspends it (memory and disk are kept, no VM runs); resolves once suspended. Needs the
   * capability suspend (else an unsupported error). */
  async suspend(): Promise<this> {
    return this.keep(await this.t.json<SandboxInfo>("POST", `${this.path}/suspend`));
  }

  /** Resumes it; resolves once it runs again, its processes carrying on. A request that needs
   * the guest (run, exec, files) of a suspended sandbox resumes it too. */
  async resume(): Promise<this> {
    return this.keep(await this.t.json<SandboxInfo>("POST", `${this.path}/resume`));
  }

  /** Ends it and discards its disk; resolves once it is terminated. */
  async delete(): Promise<void> {
    await this.t.call("DELETE", this.path);
    if (this.info) this.info = { ...this.info, state: "terminated" };
  }

  /** Runs a command and waits for it: its exit code and its output, decoded. */
  async run(argv: readonly string[], options: RunOptions = {}): Promise<RunResult> {
    const { stdin, ...rest } = options;
    const req: api.RunRequest = { ...rest, argv: checkArgv(argv) };
    if (stdin !== undefined) req.stdin = b64(stdin);
    const r = await this.t.json<api.RunResult>("POST", `${this.path}/run`, { json: req });
    return {
      ...r,
      stdout: Buffer.from(r.stdout, "base64"),
      stderr: Buffer.from(r.stderr, "base64"),
    };
  }

  /** A handle on its process pid, without asking the server. */
  process(pid: number): Process {
    return new Process(this, pid, null);
  }

  /** Its audit trail, oldest first (the newest 5000 at most). */
  auditEvents(): Promise<api.EventList> {
    return this.t.json("GET", `${this.path}/events`);
  }

  /** The live event stream narrowed to this sandbox. */
  events(options: Omit<EventStreamOptions, "sandbox"> = {}): EventStream {
    return this.client.events({ ...options, sandbox: this.ref });
  }

  metrics(): Promise<api.MetricsList> {
    return this.t.json("GET", `${this.path}/metrics`);
  }

  /** Opens a tunnel to 127.0.0.1:port inside the sandbox (sbx-tunnel/1): a Node Duplex (a
   * socket) carrying raw bytes both ways; end() half-closes (the guest side reads EOF) while
   * its answer can still be read. ConflictError when nothing listens there. */
  async tunnel(port: number): Promise<Socket> {
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new RangeError("port must be an integer from 1 to 65535");
    const socket = await this.t.upgrade(`${this.path}/tunnel`, "sbx-tunnel/1", { port });
    // the guest's EOF must not end our side: the client may still be sending
    socket.allowHalfOpen = true;
    return socket;
  }

  /** A preview URL (ext) for a web server listening on port in the sandbox. */
  preview(port: number): Promise<Preview> {
    return this.t.json("POST", `${this.path}/previews`, { json: { port } });
  }

  /** Attaches to the agent's process (ext; refreshes first to learn its pid). */
  async attachAgent(): Promise<Attachment> {
    await this.refresh();
    const pid = this.agent?.pid;
    if (pid === null || pid === undefined)
      throw new TypeError(`sandbox '${this.id}' has no agent process (agent: ${JSON.stringify(this.agent)})`);
    return this.process(pid).attach();
  }
}

/** A sandbox's processes. */
export class Processes {
  constructor(private readonly sandbox: Sandbox) {}

  /** Starts a process and answers at once; it runs on whether or not anyone follows it.
   * With stdin, those bytes are written and its stdin stays open. */
  async start(argv: readonly string[], options: ProcessOptions = {}): Promise<Process> {
    const { stdin, ...rest } = options;
    const req: api.ProcessRequest = { ...rest, argv: checkArgv(argv) };
    if (stdin !== undefined) req.stdin = b64(stdin);
    const info = await this.sandbox.t.json<api.Process>("POST", `${this.sandbox.path}/processes`, { json: req });
    return new Process(this.sandbox, info.pid, info);
  }

  /** Its processes, oldest first (exited ones too, until the sandbox stops). */
  async list(): Promise<Process[]> {
    const l = await this.sandbox.t.json<api.ProcessList>("GET", `${this.sandbox.path}/processes`);
    return l.processes.map((p) => new Process(this.sandbox, p.pid, p));
  }

  async get(pid: number): Promise<Process> {
    return new Process(this.sandbox, pid, null).refresh();
  }
}

/** A process in a sandbox. */
export class Process {
  /** What the server last said of it (null for a handle made by sandbox.process()). */
  info: api.Process | null;

  constructor(
    readonly sandbox: Sandbox,
    readonly pid: number,
    info: api.Process | null,
  ) {
    this.info = info;
  }

  private get path(): string {
    return `${this.sandbox.path}/processes/${this.pid}`;
  }

  get state(): "running" | "exited" | undefined {
    return this.info?.state;
  }

  get exitCode(): number | null {
    return this.info?.exit_code ?? null;
  }

  async refresh(): Promise<this> {
    this.info = await this.sandbox.t.json<api.Process>("GET", this.path);
    return this;
  }

  /** Its output from the oldest byte kept, live until it ends (the last item {exit_code}). */
  output(options: { signal?: AbortSignal } = {}): OutputStream {
    const s = new OutputStream(() => this.sandbox.t.open("GET", `${this.path}/output`, {}, true));
    if (options.signal) {
      if (options.signal.aborted) s.close();
      else options.signal.addEventListener("abort", () => s.close(), { once: true });
    }
    return s;
  }

  /** Writes to its stdin (bytes, text, or a stream of them: streamed on as it comes);
   * close: true closes its stdin after them. Resolves when the agent took them. */
  async write(data: Body, options: { close?: boolean } = {}): Promise<void> {
    await this.sandbox.t.call("POST", `${this.path}/stdin`, {
      body: data,
      query: options.close ? { close: 1 } : undefined,
    });
  }

  /** Closes its stdin (a TTY gets its end-of-file character). */
  async closeStdin(): Promise<void> {
    await this.write(Buffer.alloc(0), { close: true });
  }

  /** Sends a signal to its process group: INT, TERM, KILL, HUP, QUIT, USR1, USR2, WINCH. */
  async signal(name: string): Promise<void> {
    await this.sandbox.t.call("POST", `${this.path}/signal`, { json: { signal: name } });
  }

  /** Attaches over sbx-stream/1: its output as it comes, and stdin, signals and resizes. */
  async attach(): Promise<Attachment> {
    const socket = await this.sandbox.t.upgrade(`${this.path}/attach`, "sbx-stream/1");
    return new Attachment(socket);
  }

  /** Waits until it ended (following its output) and answers it as the server then says. */
  async wait(): Promise<api.Process> {
    const out = this.output();
    for await (const ev of out) if ("exit_code" in ev) break;
    out.close();
    await this.refresh();
    return this.info!;
  }
}

/** A sandbox's files, by absolute guest path. */
export class Files {
  constructor(private readonly sandbox: Sandbox) {}

  private q(path: string) {
    return { query: { path } };
  }

  /** A file's bytes (a stopped sandbox is started to read it). */
  async read(path: string): Promise<Buffer> {
    return (await this.sandbox.t.call("GET", `${this.sandbox.path}/files`, this.q(path))).body;
  }

  /** A file's text (UTF-8). */
  async readText(path: string): Promise<string> {
    return (await this.read(path)).toString("utf8");
  }

  /** Creates or replaces a file whole (missing directories are made). data: bytes, text, or
   * a stream of them (sent as it comes). */
  async write(path: string, data: Body): Promise<void> {
    await this.sandbox.t.call("PUT", `${this.sandbox.path}/files`, { ...this.q(path), body: data });
  }

  /** A directory's entries. */
  async list(path: string): Promise<api.DirEntry[]> {
    return (await this.sandbox.t.json<api.DirList>("GET", `${this.sandbox.path}/dirs`, this.q(path))).entries;
  }

  /** Removes a file, a link or an empty directory. */
  async remove(path: string): Promise<void> {
    await this.sandbox.t.call("DELETE", `${this.sandbox.path}/files`, this.q(path));
  }
}

/** Per-user secrets (ext): names and times only come back, never values. */
export class Secrets {
  constructor(private readonly t: Transport) {}

  async list(): Promise<Secret[]> {
    return (await this.t.json<{ secrets: Secret[] }>("GET", "/v1/secrets")).secrets;
  }

  set(name: string, value: string): Promise<Secret> {
    return this.t.json("PUT", `/v1/secrets/${seg(name)}`, { json: { value } });
  }

  async remove(name: string): Promise<void> {
    await this.t.call("DELETE", `/v1/secrets/${seg(name)}`);
  }
}
