"""sandboxd: a Python client for sandboxd's API v1 (standard library only, Python 3.11+).

    import sandboxd
    with sandboxd.Client() as client, client.create_sandbox() as sb:
        print(sb.run(["echo", "hello"]).text)
"""

from .client import (AGENTS, Client, DirEntry, Files, Process, Processes, RunResult, Sandbox,
                     Secrets)
from .errors import (Conflict, ForbiddenOrigin, InsufficientStorage, InternalError,
                     InvalidRequest, NotFound, ProtocolError, RateLimited, Refused, SandboxError,
                     TransportError, Unauthorized, Unavailable, Unsupported)
from .streams import (Attachment, Event, EventStream, Forwarder, Frame, OutputChunk,
                      OutputStream, Tunnel)

__version__ = "0.1.0"

__all__ = [
    "AGENTS", "Client", "DirEntry", "Files", "Process", "Processes", "RunResult", "Sandbox",
    "Secrets", "Attachment", "Event", "EventStream", "Forwarder", "Frame", "OutputChunk",
    "OutputStream", "Tunnel", "SandboxError", "InvalidRequest", "Unauthorized", "Refused",
    "ForbiddenOrigin", "NotFound", "Conflict", "RateLimited", "InternalError", "Unsupported",
    "Unavailable", "InsufficientStorage", "TransportError", "ProtocolError",
]
