// Where the client connects and with what: the options given in code, else the CLI's
// environment (SANDBOX_ENDPOINT, SANDBOX_TOKEN, SANDBOX_CA), else the local socket the CLI
// uses (/run/sandboxd/sandboxd.sock as root, $XDG_RUNTIME_DIR/sandboxd.sock otherwise, and
// beside the state directory without a runtime directory).
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

export interface ClientOptions {
  /** `unix:///PATH`, `http://HOST:PORT` or `https://HOST:PORT`; else $SANDBOX_ENDPOINT, else
   * the local socket. */
  endpoint?: string;
  /** The operator token or an API key (`sbk_…`), sent as `Authorization: Bearer`; else
   * $SANDBOX_TOKEN. Over the unix socket none is needed (the peer's uid authenticates). */
  token?: string;
  /** The CA that signed an https endpoint's certificate: a file name, or the PEM itself (a
   * Buffer, or a string that starts with -----BEGIN); else the file $SANDBOX_CA names. */
  ca?: string | Buffer;
  /** The environment to read the SANDBOX_* variables from (default process.env). */
  env?: NodeJS.ProcessEnv;
}

export interface Target {
  kind: "unix" | "http" | "https";
  /** As given (or as found), for messages. */
  endpoint: string;
  socketPath?: string;
  host?: string;
  port?: number;
  token?: string;
  ca?: Buffer;
}

function nonEmpty(v: string | undefined): string | undefined {
  return v !== undefined && v !== "" ? v : undefined;
}

/** The socket the CLI uses when nothing else is given. */
export function defaultSocket(env: NodeJS.ProcessEnv = process.env): string {
  if (process.geteuid?.() === 0) return "/run/sandboxd/sandboxd.sock";
  const rt = env.XDG_RUNTIME_DIR;
  if (rt && rt.startsWith("/")) return `${rt}/sandboxd.sock`;
  const data = env.XDG_DATA_HOME;
  const state =
    data && data.startsWith("/")
      ? join(data, "sandboxd")
      : join(env.HOME || homedir(), ".local/share/sandboxd");
  return join(state, "sandboxd.sock");
}

/** Reads an endpoint as the CLI does; throws a TypeError naming what is wrong. */
export function parseEndpoint(endpoint: string): Pick<Target, "kind" | "socketPath" | "host" | "port"> {
  if (endpoint.startsWith("unix://")) {
    const path = endpoint.slice(7);
    if (!path.startsWith("/"))
      throw new TypeError(
        `endpoint '${endpoint}' is invalid: a unix endpoint is unix:// and an absolute path, as in unix:///run/sandboxd/sandboxd.sock`,
      );
    return { kind: "unix", socketPath: path };
  }
  const m = /^(https?):\/\/(\[[0-9a-fA-F:.]+\]|[^/:[\]]+):(\d{1,5})\/?$/.exec(endpoint);
  if (!m)
    throw new TypeError(
      `endpoint '${endpoint}' is invalid: an endpoint is unix:///PATH, http://HOST:PORT or https://HOST:PORT`,
    );
  const port = Number(m[3]);
  if (port < 1 || port > 65535)
    throw new TypeError(`endpoint '${endpoint}' is invalid: the port must be 1 to 65535`);
  const host = m[2]!.startsWith("[") ? m[2]!.slice(1, -1) : m[2]!;
  return { kind: m[1] as "http" | "https", host, port };
}

function readCa(ca: string | Buffer, what: string): Buffer {
  if (Buffer.isBuffer(ca)) return ca;
  if (ca.trimStart().startsWith("-----BEGIN")) return Buffer.from(ca);
  try {
    return readFileSync(ca);
  } catch (e) {
    throw new TypeError(`cannot read the CA file '${ca}' (${what}): ${(e as Error).message}`);
  }
}

export function resolveTarget(opts: ClientOptions = {}): Target {
  const env = opts.env ?? process.env;
  const endpoint =
    nonEmpty(opts.endpoint) ?? nonEmpty(env.SANDBOX_ENDPOINT) ?? `unix://${defaultSocket(env)}`;
  const t: Target = { endpoint, ...parseEndpoint(endpoint) };
  const token = nonEmpty(opts.token) ?? nonEmpty(env.SANDBOX_TOKEN);
  if (token !== undefined) {
    if (!/^[\x21-\x7e]+$/.test(token))
      throw new TypeError("the token is not a token (printable characters, no spaces)");
    t.token = token;
  }
  if (opts.ca !== undefined) t.ca = readCa(opts.ca, "the ca option");
  else if (nonEmpty(env.SANDBOX_CA)) t.ca = readCa(env.SANDBOX_CA!, "$SANDBOX_CA");
  return t;
}
