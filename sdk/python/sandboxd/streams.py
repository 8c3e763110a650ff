"""Streams: a process's output (NDJSON), the events stream (Server-Sent Events), an attached
process (sbx-stream/1) and a tunnel to a guest port (sbx-tunnel/1)."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ._transport import StreamResponse, Transport
from .errors import ProtocolError, SandboxError, TransportError

__all__ = ["OutputChunk", "OutputStream", "Event", "EventStream", "Frame", "Attachment",
           "Tunnel"]


# -- output ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OutputChunk:
    """Bytes a process wrote: stream is "stdout" or "stderr"."""

    stream: str
    data: bytes


class OutputStream:
    """A process's output as it comes (GET …/output): iterate for OutputChunk items; once the
    process ended the iteration stops and exit_code (and timed_out) are set. dropped is how
    many older bytes were no longer kept. A context manager; closing never stops the process."""

    def __init__(self, resp: StreamResponse) -> None:
        self._resp = resp
        self.exit_code: int | None = None
        self.timed_out = False
        self.dropped = 0

    def __iter__(self) -> Iterator[OutputChunk]:
        try:
            for line in self._resp.lines():
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    raise ProtocolError(f"an output line is not JSON: {line[:80]!r}") from e
                if "stream" in obj:
                    yield OutputChunk(obj["stream"], base64.b64decode(obj.get("data", "")))
                elif "exit_code" in obj:
                    self.exit_code = obj["exit_code"]
                    self.timed_out = bool(obj.get("timed_out", False))
                    return
                elif "dropped" in obj:
                    self.dropped += int(obj["dropped"])
        finally:
            self.close()

    def read_all(self) -> tuple[bytes, bytes, int | None]:
        """Follows to the end: (stdout, stderr, exit_code)."""
        out, err = bytearray(), bytearray()
        for chunk in self:
            (out if chunk.stream == "stdout" else err).extend(chunk.data)
        return bytes(out), bytes(err), self.exit_code

    def close(self) -> None:
        self._resp.close()

    def __enter__(self) -> "OutputStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- events ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    """One message of the events stream. type is its `event:` ("created", "state",
    "process.started", ...); id its seq (None for events that are not stored); data the
    parsed JSON of its `data:` line: {seq, time, sandbox_id, type, data, sandbox, audit}."""

    type: str
    data: Any
    id: int | None = None

    @property
    def sandbox_id(self) -> str | None:
        return self.data.get("sandbox_id") if isinstance(self.data, dict) else None

    @property
    def sandbox(self) -> dict[str, Any] | None:
        return self.data.get("sandbox") if isinstance(self.data, dict) else None

    @property
    def payload(self) -> dict[str, Any]:
        """The event's own fields (the `data` member of the message's JSON)."""
        inner = self.data.get("data") if isinstance(self.data, dict) else None
        return inner if isinstance(inner, dict) else {}


class EventStream:
    """GET /v1/events/stream as an iterator of Event. With reconnect=True a broken or ended
    stream is opened again after the server's retry delay with Last-Event-ID, so nothing is
    lost or repeated. last_id is the seq of the last stored event seen. Close it (or use it as
    a context manager) to stop."""

    def __init__(self, transport: Transport, *, sandbox: str | None = None,
                 since: int | None = None, reconnect: bool = False,
                 timeout: float | None = None) -> None:
        self._t = transport
        self._sandbox = sandbox
        self.last_id: int | None = since
        self._reconnect = reconnect
        self._timeout = timeout
        self._retry_ms = 2000
        self._closed = False
        self._resp: StreamResponse | None = None
        self._open(first=True)

    def _open(self, first: bool) -> None:
        query: list[tuple[str, str]] = []
        headers: dict[str, str] = {"Accept": "text/event-stream"}
        if self._sandbox:
            query.append(("sandbox", self._sandbox))
        if self.last_id is not None:
            if first:
                query.append(("since", str(self.last_id)))
            else:
                headers["Last-Event-ID"] = str(self.last_id)
        self._resp = self._t.stream("GET", "/v1/events/stream", query=query, headers=headers,
                                    timeout=self._timeout)

    def __iter__(self) -> Iterator[Event]:
        while not self._closed:
            assert self._resp is not None
            try:
                yield from self._parse(self._resp)
            except TransportError:
                if not self._reconnect or self._closed:
                    raise
            if not self._reconnect or self._closed:
                return
            self._resp.close()
            time.sleep(self._retry_ms / 1000)
            self._open(first=False)

    def _parse(self, resp: StreamResponse) -> Iterator[Event]:
        etype, data, eid = "", [], None
        for raw in resp.lines():
            line = raw.decode("utf-8", "replace")
            if line == "":
                if data:
                    text = "\n".join(data)
                    try:
                        parsed: Any = json.loads(text)
                    except ValueError:
                        parsed = text
                    if eid is not None:
                        self.last_id = eid
                    yield Event(etype or "message", parsed, eid)
                etype, data, eid = "", [], None
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "event":
                etype = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                eid = int(value) if value.isdigit() else None
            elif name == "retry" and value.isdigit():
                self._retry_ms = int(value)

    def close(self) -> None:
        self._closed = True
        if self._resp is not None:
            self._resp.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- upgraded connections -------------------------------------------------------------------------

class _Upgraded:
    """A socket after a 101, with the bytes that came with the head."""

    def __init__(self, sock: socket.socket, rest: bytes) -> None:
        self._sock = sock
        self._buf = bytearray(rest)
        self._send_lock = threading.Lock()
        self._closed = False

    def _fill(self, n: int) -> bool:
        while len(self._buf) < n:
            try:
                chunk = self._sock.recv(max(65536, n - len(self._buf)))
            except (ssl.SSLZeroReturnError, ConnectionResetError):
                return False
            except socket.timeout:
                raise
            except OSError as e:
                if self._closed:
                    return False
                raise TransportError(f"the connection broke: {e}") from e
            if not chunk:
                return False
            self._buf += chunk
        return True

    def _take(self, n: int) -> bytes:
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError as e:
                raise TransportError(f"the connection broke: {e}") from e

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


@dataclass(frozen=True)
class Frame:
    """A frame from an attached process. kind: "stdout", "stderr", "dropped" (count: how many
    older bytes were no longer kept) or "exit" (exit_code)."""

    kind: str
    data: bytes = b""
    exit_code: int | None = None
    count: int = 0


class Attachment(_Upgraded):
    """An attached process over sbx-stream/1: send() its stdin, close_stdin(), signal(),
    resize(); recv() or iterate for Frame items until its exit frame. Closing detaches and
    never stops the process."""

    exit_code: int | None = None

    def _frame(self, kind: str, payload: bytes = b"") -> None:
        if len(payload) > 1 << 20:
            for i in range(0, len(payload), 1 << 20):
                self._frame(kind, payload[i:i + (1 << 20)])
            return
        self._send(kind.encode() + struct.pack(">I", len(payload)) + payload)

    def send(self, data: bytes | str) -> None:
        """Bytes for the process's stdin (a str is sent as UTF-8)."""
        self._frame("i", data.encode() if isinstance(data, str) else bytes(data))

    def close_stdin(self) -> None:
        """End of input (a TTY gets its end-of-file character)."""
        self._frame("e")

    def signal(self, name: str) -> None:
        """INT, TERM, KILL, HUP, QUIT, USR1, USR2 or WINCH."""
        self._frame("s", name.encode())

    def resize(self, rows: int, cols: int) -> None:
        """Resizes the process's TTY."""
        self._frame("r", struct.pack(">HH", rows, cols))

    def recv(self, timeout: float | None = None) -> Frame | None:
        """The next frame; None once the connection ended (after the exit frame). With a
        timeout, socket.timeout (TimeoutError) when nothing came in time."""
        if timeout is not None:
            self._sock.settimeout(timeout)
        try:
            if not self._fill(5):
                return None
            kind = self._buf[:1].decode("latin-1")
            (n,) = struct.unpack(">I", self._buf[1:5])
            if n > 1 << 20:
                raise ProtocolError(f"a frame of {n} bytes is over the 1 MiB limit")
            if not self._fill(5 + n):
                raise ProtocolError("the connection ended inside a frame")
            self._take(5)
            payload = self._take(n)
        finally:
            if timeout is not None and not self._closed:
                self._sock.settimeout(None)
        if kind == "o":
            return Frame("stdout", payload)
        if kind == "E":
            return Frame("stderr", payload)
        if kind == "d":
            return Frame("dropped", count=struct.unpack(">Q", payload)[0])
        if kind == "x":
            self.exit_code = struct.unpack(">i", payload)[0]
            return Frame("exit", exit_code=self.exit_code)
        raise ProtocolError(f"unknown frame type {kind!r}")

    def __iter__(self) -> Iterator[Frame]:
        while True:
            f = self.recv()
            if f is None:
                return
            yield f
            if f.kind == "exit":
                return

    def read_all(self) -> tuple[bytes, bytes, int | None]:
        """Reads to the exit frame: (stdout, stderr, exit_code)."""
        out, err = bytearray(), bytearray()
        for f in self:
            if f.kind == "stdout":
                out += f.data
            elif f.kind == "stderr":
                err += f.data
        return bytes(out), bytes(err), self.exit_code

    def __enter__(self) -> "Attachment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Tunnel(_Upgraded):
    """A TCP connection to 127.0.0.1:PORT inside a sandbox over sbx-tunnel/1, used like a
    socket: sendall(), send(), recv(), shutdown(socket.SHUT_WR) (the guest side then reads end
    of file), close(), settimeout(), and a context manager."""

    def __init__(self, sock: socket.socket, rest: bytes, port: int) -> None:
        super().__init__(sock, rest)
        self.port = port

    def sendall(self, data: bytes) -> None:
        self._send(bytes(data))

    def send(self, data: bytes) -> int:
        self._send(bytes(data))
        return len(data)

    def recv(self, bufsize: int = 65536) -> bytes:
        """Up to bufsize bytes; b"" once the guest side closed its end."""
        if self._buf:
            return self._take(min(bufsize, len(self._buf)))
        try:
            return self._sock.recv(bufsize)
        except (ssl.SSLZeroReturnError, ConnectionResetError):
            return b""
        except socket.timeout:
            raise
        except OSError as e:
            if self._closed:
                return b""
            raise TransportError(f"the tunnel broke: {e}") from e

    def recv_all(self) -> bytes:
        """Everything until the guest side closed."""
        out = bytearray()
        while chunk := self.recv(65536):
            out += chunk
        return bytes(out)

    def shutdown(self, how: int = socket.SHUT_WR) -> None:
        """socket.SHUT_WR: no more bytes from this side (the guest reads end of file) while
        what the guest sends still comes; SHUT_RDWR closes."""
        if how == socket.SHUT_RDWR:
            self.close()
            return
        try:
            self._sock.shutdown(how)
        except OSError as e:
            raise TransportError(f"the tunnel broke: {e}") from e

    def fileno(self) -> int:
        return self._sock.fileno()

    def __enter__(self) -> "Tunnel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Forwarder:
    """Listens on 127.0.0.1:local_port and opens a tunnel to the guest port for each accepted
    connection (like `sandbox-cli port-forward`). A context manager; close() stops it."""

    def __init__(self, open_tunnel: Callable[[], Tunnel], local_port: int = 0,
                 host: str = "127.0.0.1") -> None:
        self._open = open_tunnel
        self._srv = socket.create_server((host, local_port))
        self.host = host
        self.port: int = self._srv.getsockname()[1]
        self._closed = False
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            threading.Thread(target=self._pump, args=(conn,), daemon=True).start()

    def _pump(self, conn: socket.socket) -> None:
        try:
            tun = self._open()
        except BaseException as e:  # the guest refused: the local client sees a close
            self.errors.append(e)
            conn.close()
            return

        def up() -> None:
            try:
                while chunk := conn.recv(65536):
                    tun.sendall(chunk)
                tun.shutdown(socket.SHUT_WR)
            except (OSError, SandboxError):
                tun.close()

        t = threading.Thread(target=up, daemon=True)
        t.start()
        try:
            while chunk := tun.recv(65536):
                conn.sendall(chunk)
            conn.shutdown(socket.SHUT_WR)
        except (OSError, SandboxError):
            pass
        t.join()
        tun.close()
        conn.close()

    def close(self) -> None:
        self._closed = True
        self._srv.close()

    def __enter__(self) -> "Forwarder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
