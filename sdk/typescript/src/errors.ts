// Errors: every API error is {"error":{"code","message"}} (docs/api.md, Errors). Each code has
// its own class, all of them SandboxError, so callers branch with instanceof or on .code.
import type * as api from "./openapi.gen.js";

/** The codes of API v1's errors, as docs/openapi.yaml lists them. */
export type ErrorCode = api.Error["error"]["code"];

/** Any error the SDK throws about a request: an API error, or the connection failing. */
export class SandboxError extends Error {
  /** The API's error code (`not_found`, `conflict`, …), or `connection` / `protocol`. */
  readonly code: string;
  /** The HTTP status; 0 when no answer came. */
  readonly status: number;
  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  readonly retryAfter: number | undefined;

  constructor(
    code: string,
    message: string,
    status: number,
    options?: { cause?: unknown; retryAfter?: number },
  ) {
    super(message, options?.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.retryAfter = options?.retryAfter;
  }
}

/** 400 (and 405, 408, 413, 431): malformed, unknown field, out of limits. */
export class InvalidRequestError extends SandboxError {}
/** 401: no credential or a wrong one. */
export class UnauthorizedError extends SandboxError {}
/** 403 refused: well-formed, but the policy (or the guest) says no. */
export class RefusedError extends SandboxError {}
/** 403 forbidden_origin: the Host or Origin header is not allowed. */
export class ForbiddenOriginError extends SandboxError {}
/** 404: no such sandbox (among the caller's), process, file, path. */
export class NotFoundError extends SandboxError {}
/** 409: a name in use, the wrong state, an exited process, nothing listening on a port. */
export class ConflictError extends SandboxError {}
/** 429: too many runs (or failed logins); see retryAfter. */
export class RateLimitedError extends SandboxError {}
/** 501: this server lacks the capability. */
export class UnsupportedError extends SandboxError {}
/** 503: cordoned, no room, the guest agent reconnecting: try again. */
export class UnavailableError extends SandboxError {}
/** 507: the sandbox's disk is full. */
export class InsufficientStorageError extends SandboxError {}
/** 500: a bug, or the host failed. */
export class InternalError extends SandboxError {}
/** No answer: the endpoint could not be reached, or the connection broke. */
export class ConnectionError extends SandboxError {}
/** The server answered something this SDK cannot read (not API v1, a broken frame). */
export class ProtocolError extends SandboxError {}

const classes: Record<ErrorCode, typeof SandboxError> = {
  invalid_request: InvalidRequestError,
  unauthorized: UnauthorizedError,
  refused: RefusedError,
  forbidden_origin: ForbiddenOriginError,
  not_found: NotFoundError,
  conflict: ConflictError,
  rate_limited: RateLimitedError,
  unsupported: UnsupportedError,
  unavailable: UnavailableError,
  insufficient_storage: InsufficientStorageError,
  internal: InternalError,
};

/** The error for an API error answer: the class of its code (SandboxError for a new code). */
export function apiError(
  status: number,
  body: Buffer,
  retryAfterHeader?: string | string[],
): SandboxError {
  let code = "";
  let message = "";
  try {
    const parsed = JSON.parse(body.toString("utf8")) as Partial<api.Error>;
    code = String(parsed?.error?.code ?? "");
    message = String(parsed?.error?.message ?? "");
  } catch {
    // not JSON: a proxy's page, or not sandboxd
  }
  if (!code) {
    const text = body.toString("utf8").trim().slice(0, 200);
    return new ProtocolError(
      "protocol",
      `HTTP ${status} without an API error body${text ? `: ${text}` : ""}`,
      status,
    );
  }
  const ra = Array.isArray(retryAfterHeader) ? retryAfterHeader[0] : retryAfterHeader;
  const retryAfter = ra !== undefined && /^\d+$/.test(ra) ? Number(ra) : undefined;
  const Cls = (classes as Record<string, typeof SandboxError>)[code] ?? SandboxError;
  return new Cls(code, message || `HTTP ${status}`, status, { retryAfter });
}
