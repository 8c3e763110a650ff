// The shapes the SDK uses: docs/openapi.yaml's (openapi.gen.ts), with what issue 15 adds
// (agents, secrets, previews) spelled out here for the servers whose spec does not have
// them yet: a field the spec has wins, being the same.
import type * as api from "./openapi.gen.js";

export type AgentName = "claude" | "codex" | "gemini" | "opencode";

/** `agent` of a create (ext): the agent to start once the sandbox runs. */
export interface AgentRequest {
  name: AgentName;
  /** With a task the agent runs headless on it; without, interactively. At most 32 KiB. */
  task?: string;
  /** An https:// or http:// git URL cloned into /sandbox/home/work. */
  repo?: string;
  /** More arguments for the agent (after its own, before the task). */
  args?: string[];
}

/** `agent` of a sandbox (ext). */
export interface AgentInfo {
  name: AgentName;
  task: string | null;
  repo: string | null;
  state: "cloning" | "starting" | "running" | "exited" | "failed";
  pid: number | null;
  exit_code: number | null;
  message: string | null;
}

export type CreateSandboxRequest = api.CreateRequest & { agent?: AgentRequest | null };

export type SandboxInfo = api.Sandbox & { agent?: AgentInfo | null };

export interface Secret {
  name: string;
  updated_at: string;
}

export interface Preview {
  port: number;
  /** Open it in a browser: the token in it becomes a cookie for the preview's own origin. */
  url: string;
}

/** A run's answer with its output decoded. */
export interface RunResult {
  exit_code: number;
  stdout: Buffer;
  stderr: Buffer;
  truncated: boolean;
  timed_out: boolean;
  oom: boolean;
}

/** run's options: the request's fields but argv, stdin as bytes or text. */
export type RunOptions = Omit<api.RunRequest, "argv" | "stdin"> & {
  stdin?: Buffer | Uint8Array | string;
};

/** A process start's options: the request's fields but argv, stdin as bytes or text. */
export type ProcessOptions = Omit<api.ProcessRequest, "argv" | "stdin"> & {
  stdin?: Buffer | Uint8Array | string;
};

/** A node event of the stream (images, the reconciler, the cordon): no seq, no sandbox. */
export interface NodeEvent {
  time: string;
  type: string;
  data: Record<string, unknown>;
  [key: string]: unknown;
}

export type StreamItem = api.StreamEvent | NodeEvent;

export interface EventStreamOptions {
  /** Replay the events after this seq first (`?since=`); 0 replays what the store has. */
  since?: number;
  /** Only this sandbox's events (id or name). */
  sandbox?: string;
  /** Reconnect, resuming after the last event seen, when the server closes the stream
   * (after `retry` ms, 2000 by default); default false: the iteration ends. */
  reconnect?: boolean;
  signal?: AbortSignal;
}
