"""Typed errors: one exception class per API error code, all subclasses of SandboxError."""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "SandboxError",
    "InvalidRequest",
    "Unauthorized",
    "Refused",
    "ForbiddenOrigin",
    "NotFound",
    "Conflict",
    "RateLimited",
    "InternalError",
    "Unsupported",
    "Unavailable",
    "InsufficientStorage",
    "TransportError",
    "ProtocolError",
    "error_from_response",
]


class SandboxError(Exception):
    """An error the API answered (or, for TransportError, the way to it failed).

    code: the API's error code ("not_found", "conflict", ...); status: the HTTP status (0 when
    no answer came); message: the server's message, meant for a person."""

    code: str = "unknown"

    def __init__(self, message: str, *, code: str | None = None, status: int = 0,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status
        self.headers: dict[str, str] = headers or {}

    def __str__(self) -> str:
        if self.status:
            return f"{self.code} ({self.status}): {self.message}"
        return f"{self.code}: {self.message}"


class InvalidRequest(SandboxError):
    """400 (and 405, 408, 413, 431): the request is malformed or out of limits."""
    code = "invalid_request"


class Unauthorized(SandboxError):
    """401: no credential, or a wrong one."""
    code = "unauthorized"


class Refused(SandboxError):
    """403: well-formed, but the policy says no."""
    code = "refused"


class ForbiddenOrigin(SandboxError):
    """403: the Host or Origin header is not allowed."""
    code = "forbidden_origin"


class NotFound(SandboxError):
    """404: no such sandbox (among the caller's own), process, file, path..."""
    code = "not_found"


class Conflict(SandboxError):
    """409: the name is in use, or the sandbox or process is in the wrong state."""
    code = "conflict"


class RateLimited(SandboxError):
    """429: too many runs or logins; retry_after says when to try again (seconds)."""
    code = "rate_limited"

    @property
    def retry_after(self) -> float | None:
        value = self.headers.get("retry-after")
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None


class InternalError(SandboxError):
    """500: a bug, or the host failed."""
    code = "internal"


class Unsupported(SandboxError):
    """501: this server lacks the capability."""
    code = "unsupported"


class Unavailable(SandboxError):
    """503: the node is cordoned or full, or the guest agent is reconnecting: try again."""
    code = "unavailable"


class InsufficientStorage(SandboxError):
    """507: the sandbox's disk is full."""
    code = "insufficient_storage"


class TransportError(SandboxError):
    """The server could not be reached, or the connection broke before an answer."""
    code = "transport"


class ProtocolError(SandboxError):
    """The server answered something this client cannot read."""
    code = "protocol"


_BY_CODE: dict[str, type[SandboxError]] = {
    cls.code: cls
    for cls in (InvalidRequest, Unauthorized, Refused, ForbiddenOrigin, NotFound, Conflict,
                RateLimited, InternalError, Unsupported, Unavailable, InsufficientStorage)
}

_BY_STATUS: dict[int, type[SandboxError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Refused, 404: NotFound, 405: InvalidRequest,
    408: InvalidRequest, 409: Conflict, 413: InvalidRequest, 429: RateLimited,
    431: InvalidRequest, 500: InternalError, 501: Unsupported, 503: Unavailable,
    507: InsufficientStorage,
}


def error_from_response(status: int, body: bytes, headers: dict[str, str] | None = None
                        ) -> SandboxError:
    """The exception for an error answer: by its code when the body has one, else by status."""
    code: str | None = None
    message = ""
    try:
        doc: Any = json.loads(body.decode("utf-8")) if body else None
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            err = doc["error"]
            if isinstance(err.get("code"), str):
                code = err["code"]
            if isinstance(err.get("message"), str):
                message = err["message"]
    except (UnicodeDecodeError, ValueError):
        pass
    if not message:
        message = body[:200].decode("utf-8", "replace").strip() or f"HTTP {status}"
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status, SandboxError)
    return cls(message, code=code or cls.code, status=status, headers=headers)
