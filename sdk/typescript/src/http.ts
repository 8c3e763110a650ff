// The HTTP/1.1 transport: one keep-alive agent per client for ordinary requests, a fresh
// connection for each stream and upgrade (an attach, a tunnel), over the unix socket, TCP or
// TLS.
import * as http from "node:http";
import * as https from "node:https";
import type { Socket } from "node:net";
import { Readable } from "node:stream";
import { apiError, ConnectionError, SandboxError } from "./errors.js";
import type { Target } from "./config.js";

export type Query = Record<string, string | number | boolean | undefined | null | (string | number)[]>;

export type Body = Buffer | Uint8Array | string | Readable | AsyncIterable<Uint8Array | string>;

export interface RequestOptions {
  query?: Query;
  /** A JSON body (application/json). */
  json?: unknown;
  /** A raw body (application/octet-stream); a stream goes chunked. */
  body?: Body;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export function buildPath(path: string, query?: Query): string {
  if (!query) return path;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null) continue;
    if (Array.isArray(v)) for (const x of v) q.append(k, String(x));
    else q.append(k, typeof v === "boolean" ? (v ? "1" : "0") : String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

function collect(res: http.IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    res.on("data", (c: Buffer) => parts.push(c));
    res.on("end", () => resolve(Buffer.concat(parts)));
    res.on("error", reject);
    res.on("aborted", () => reject(new Error("the answer broke off")));
  });
}

export class Transport {
  readonly target: Target;
  private agent: http.Agent;

  constructor(target: Target) {
    this.target = target;
    this.agent =
      target.kind === "https"
        ? new https.Agent({ keepAlive: true, ca: target.ca })
        : new http.Agent({ keepAlive: true });
  }

  close(): void {
    this.agent.destroy();
  }

  private options(
    method: string,
    path: string,
    headers: Record<string, string>,
    fresh: boolean,
  ): http.RequestOptions & https.RequestOptions {
    const t = this.target;
    const h: Record<string, string> = { ...headers };
    if (t.token !== undefined) h["Authorization"] = `Bearer ${t.token}`;
    const o: http.RequestOptions & https.RequestOptions = {
      method,
      path,
      headers: h,
      agent: fresh ? false : this.agent,
    };
    if (t.kind === "unix") {
      o.socketPath = t.socketPath;
      h["Host"] = "localhost";
    } else {
      o.host = t.host;
      o.port = t.port;
      if (t.kind === "https" && t.ca) o.ca = t.ca;
    }
    return o;
  }

  private mod(): typeof http | typeof https {
    return this.target.kind === "https" ? https : http;
  }

  private connectionError(e: unknown): SandboxError {
    if (e instanceof SandboxError) return e;
    const err = e as NodeJS.ErrnoException;
    return new ConnectionError(
      "connection",
      `cannot talk to sandboxd at ${this.target.endpoint}: ${err?.message ?? String(e)}`,
      0,
      { cause: e },
    );
  }

  /** Sends a request and answers its response once the head is in, unread; an error status
   * is thrown as its SandboxError. fresh: a connection of its own (for long streams). */
  open(
    method: string,
    path: string,
    opts: RequestOptions = {},
    fresh = false,
  ): Promise<http.IncomingMessage> {
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    let payload: Buffer | undefined;
    let stream: Readable | undefined;
    if (opts.json !== undefined) {
      payload = Buffer.from(JSON.stringify(opts.json));
      headers["Content-Type"] = "application/json";
    } else if (opts.body !== undefined) {
      headers["Content-Type"] = "application/octet-stream";
      const b = opts.body;
      if (typeof b === "string") payload = Buffer.from(b);
      else if (b instanceof Uint8Array) payload = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
      else stream = b instanceof Readable ? b : Readable.from(b);
    }
    if (payload) headers["Content-Length"] = String(payload.length);
    else if (stream) headers["Transfer-Encoding"] = "chunked";
    const full = buildPath(path, opts.query);
    return new Promise((resolve, reject) => {
      let done = false;
      const fail = (e: unknown) => {
        if (done) return;
        done = true;
        reject(this.connectionError(e));
      };
      const req = this.mod().request(this.options(method, full, headers, fresh));
      const onAbort = () => {
        req.destroy(new Error("aborted"));
      };
      if (opts.signal) {
        if (opts.signal.aborted) onAbort();
        else opts.signal.addEventListener("abort", onAbort, { once: true });
      }
      req.on("error", (e) => {
        if (opts.signal?.aborted) {
          if (done) return;
          done = true;
          const err = new Error("the request was aborted");
          err.name = "AbortError";
          reject(err);
          return;
        }
        fail(e);
      });
      req.on("response", (res) => {
        if (done) {
          res.resume();
          return;
        }
        done = true;
        opts.signal?.removeEventListener("abort", onAbort);
        const status = res.statusCode ?? 0;
        if (status >= 400) {
          collect(res).then(
            (body) => reject(apiError(status, body, res.headers["retry-after"])),
            (e) => reject(this.connectionError(e)),
          );
          return;
        }
        if (opts.signal) {
          const sig = opts.signal;
          const onAbortRes = () => res.destroy();
          sig.addEventListener("abort", onAbortRes, { once: true });
          res.once("close", () => sig.removeEventListener("abort", onAbortRes));
        }
        resolve(res);
      });
      if (stream) {
        stream.on("error", (e) => req.destroy(e));
        stream.pipe(req);
      } else {
        req.end(payload);
      }
    });
  }

  /** A request whose whole answer is read: its status and body. */
  async call(method: string, path: string, opts: RequestOptions = {}): Promise<{ status: number; body: Buffer }> {
    const res = await this.open(method, path, opts);
    try {
      const body = await collect(res);
      return { status: res.statusCode ?? 0, body };
    } catch (e) {
      throw this.connectionError(e);
    }
  }

  /** A request answered with JSON. */
  async json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const { status, body } = await this.call(method, path, opts);
    if (status === 204 || body.length === 0) return undefined as T;
    try {
      return JSON.parse(body.toString("utf8")) as T;
    } catch (e) {
      throw new SandboxError("protocol", `HTTP ${status}: the answer is not JSON`, status, { cause: e });
    }
  }

  /** Upgrades a fresh connection to protocol: answers the socket once 101 came, with what the
   * server sent after the head put back in front. Any other answer is thrown as its error. */
  upgrade(path: string, protocol: string, query?: Query): Promise<Socket> {
    const full = buildPath(path, query);
    const headers = { Connection: "Upgrade", Upgrade: protocol };
    return new Promise((resolve, reject) => {
      const req = this.mod().request(this.options("GET", full, headers, true));
      let done = false;
      req.on("upgrade", (res, socket, head) => {
        done = true;
        const got = String(res.headers["upgrade"] ?? "").toLowerCase();
        if (got !== protocol.toLowerCase()) {
          socket.destroy();
          reject(
            new SandboxError("protocol", `the server upgraded to '${got}', not '${protocol}'`, 101),
          );
          return;
        }
        if (head && head.length) socket.unshift(head);
        resolve(socket as Socket);
      });
      req.on("response", (res) => {
        done = true;
        const status = res.statusCode ?? 0;
        collect(res).then(
          (body) =>
            reject(
              status >= 400
                ? apiError(status, body, res.headers["retry-after"])
                : new SandboxError("protocol", `HTTP ${status} where 101 Switching Protocols was expected`, status),
            ),
          (e) => reject(this.connectionError(e)),
        );
      });
      req.on("error", (e) => {
        if (!done) reject(this.connectionError(e));
      });
      req.end();
    });
  }
}
