// @sandboxd/sdk: a client for sandboxd's API v1 (docs/api.md), for Node 18+.
export { Client, Sandbox, Processes, Process, Files, Secrets } from "./client.js";
export { Attachment, type OutputEvent } from "./attach.js";
export { EventStream, OutputStream } from "./live.js";
export { defaultSocket, parseEndpoint, resolveTarget, type ClientOptions, type Target } from "./config.js";
export {
  SandboxError,
  InvalidRequestError,
  UnauthorizedError,
  RefusedError,
  ForbiddenOriginError,
  NotFoundError,
  ConflictError,
  RateLimitedError,
  UnsupportedError,
  UnavailableError,
  InsufficientStorageError,
  InternalError,
  ConnectionError,
  ProtocolError,
  type ErrorCode,
} from "./errors.js";
export { sse, lines, type SseMessage } from "./streams.js";
export type * from "./types.js";
export type * as api from "./openapi.gen.js";
export { operations, apiVersion } from "./openapi.gen.js";
