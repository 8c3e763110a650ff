"""The way to sandboxd: an endpoint (unix socket, TCP, TLS), its credential, HTTP requests on
kept-alive connections, streamed answers, and connections upgraded to another protocol."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterable, Iterator, Mapping

from ._tls import BioTls
from .errors import ProtocolError, SandboxError, TransportError, error_from_response

__all__ = ["Endpoint", "Transport", "default_socket"]

_USER_AGENT = "sandboxd-python/0.1"
_MAX_HEAD = 64 * 1024


def default_socket() -> str:
    """The socket sandbox-cli uses when told nothing: /run/sandboxd/sandboxd.sock as root,
    else $XDG_RUNTIME_DIR/sandboxd.sock (without a runtime dir: beside the user's state)."""
    if os.geteuid() == 0:
        return "/run/sandboxd/sandboxd.sock"
    rt = os.environ.get("XDG_RUNTIME_DIR", "")
    if rt.startswith("/"):
        return f"{rt}/sandboxd.sock"
    data = os.environ.get("XDG_DATA_HOME", "")
    if not data.startswith("/"):
        data = os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "sandboxd", "sandboxd.sock")


@dataclass(frozen=True)
class Endpoint:
    """A parsed endpoint: kind is "unix", "http" or "https"."""

    kind: str
    path: str = ""   # unix
    host: str = ""   # http, https (without brackets)
    port: int = 0

    @classmethod
    def parse(cls, text: str) -> "Endpoint":
        if text.startswith("unix://"):
            path = text[len("unix://"):]
            if not path.startswith("/"):
                raise ValueError(f"endpoint '{text}': a unix endpoint is unix:// and an "
                                 "absolute path, as in unix:///run/sandboxd/sandboxd.sock")
            return cls("unix", path=path)
        for scheme, default_port in (("http", 80), ("https", 443)):
            prefix = scheme + "://"
            if text.startswith(prefix):
                auth = text[len(prefix):].rstrip("/")
                parts = urllib.parse.urlsplit(f"{prefix}{auth}")
                if not parts.hostname or parts.path or parts.query or parts.username:
                    raise ValueError(f"endpoint '{text}': write only SCHEME://HOST:PORT")
                try:
                    port = parts.port or default_port
                except ValueError as e:
                    raise ValueError(f"endpoint '{text}': the port must be a number from 1 "
                                     "to 65535") from e
                return cls(scheme, host=parts.hostname, port=port)
        raise ValueError(f"endpoint '{text}': an endpoint is unix:///PATH, http://HOST:PORT "
                         "or https://HOST:PORT")

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.kind}://{host}:{self.port}"

    @property
    def host_header(self) -> str:
        if self.kind == "unix":
            return "localhost"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class _Connection(http.client.HTTPConnection):
    """An HTTPConnection whose socket comes from the transport (unix, TCP or TLS)."""

    def __init__(self, transport: "Transport", timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._transport = transport

    def connect(self) -> None:
        self.sock = self._transport.open_socket(self.timeout)


class Transport:
    """Requests to one endpoint with one credential. Thread-safe: each request takes a
    kept-alive connection from a small pool, or opens one."""

    def __init__(self, endpoint: str, token: str | None = None, ca: str | None = None, *,
                 timeout: float | None = None, client_cert: str | None = None,
                 client_key: str | None = None) -> None:
        self.endpoint = Endpoint.parse(endpoint)
        if token is not None and (not token or any(c.isspace() or not c.isprintable()
                                                   for c in token)):
            raise ValueError("the token must be printable characters without spaces")
        self.token = token
        self.ca = ca
        self.timeout = timeout
        self._ssl: ssl.SSLContext | None = None
        if self.endpoint.kind == "https":
            self._ssl = ssl.create_default_context(cafile=ca) if ca else \
                ssl.create_default_context()
            self._ssl.minimum_version = ssl.TLSVersion.TLSv1_2
            if client_cert:
                self._ssl.load_cert_chain(client_cert, client_key)
        self._pool: list[_Connection] = []
        self._lock = threading.Lock()

    # -- sockets ------------------------------------------------------------------------------

    def open_socket(self, timeout: float | None = None, *, bio: bool = False) -> Any:
        """A new socket connected to the endpoint (TLS already negotiated for https: an
        ssl.SSLSocket, or with bio=True a BioTls, which can half-close)."""
        ep = self.endpoint
        try:
            if ep.kind == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.settimeout(timeout)
                    s.connect(ep.path)
                except BaseException:
                    s.close()
                    raise
                return s
            s = socket.create_connection((ep.host, ep.port), timeout=timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:
                try:
                    if bio:
                        return BioTls(s, self._ssl, ep.host)
                    s = self._ssl.wrap_socket(s, server_hostname=ep.host)
                except BaseException:
                    s.close()
                    raise
            return s
        except ssl.SSLCertVerificationError as e:
            raise TransportError(f"{ep}: the server's TLS certificate is not trusted "
                                 f"({e.verify_message}); give the CA that signed it (ca=... or "
                                 "$SANDBOX_CA)") from e
        except OSError as e:
            raise TransportError(f"cannot connect to {ep}: {e.strerror or e}") from e

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        h = {"Host": self.endpoint.host_header, "User-Agent": _USER_AGENT}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if extra:
            h.update(extra)
        return h

    # -- plain requests -------------------------------------------------------------------------

    def _take(self) -> tuple[_Connection, bool]:
        with self._lock:
            if self._pool:
                return self._pool.pop(), True
        return _Connection(self, self.timeout), False

    def _give(self, conn: _Connection) -> None:
        with self._lock:
            if len(self._pool) < 8:
                self._pool.append(conn)
                return
        conn.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 (at interpreter exit)
            pass

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, []
        for c in pool:
            c.close()

    def request(self, method: str, path: str, *, query: Iterable[tuple[str, str]] | None = None,
                json_body: Any = None, body: bytes | BinaryIO | None = None,
                content_type: str | None = None, headers: Mapping[str, str] | None = None
                ) -> tuple[int, dict[str, str], bytes]:
        """Sends one request and reads the whole answer. An error status raises its
        SandboxError; otherwise (status, headers with lowercase names, body)."""
        url = _url(path, query)
        h = self.headers(headers)
        data: bytes | BinaryIO | None = body
        if json_body is not None:
            data = json.dumps(json_body).encode()
            h["Content-Type"] = "application/json"
        elif content_type:
            h["Content-Type"] = content_type
        if data is not None and not isinstance(data, (bytes, bytearray)):
            h["Transfer-Encoding"] = "chunked"
        elif method in ("POST", "PUT", "PATCH") and data is None:
            h["Content-Length"] = "0"
        for attempt in range(2):
            conn, reused = self._take()
            try:
                conn.request(method, url, body=data, headers=h,
                             encode_chunked="Transfer-Encoding" in h)
                resp = conn.getresponse()
                payload = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    ssl.SSLEOFError, ssl.SSLZeroReturnError) as e:
                conn.close()
                # a kept-alive connection the server had closed meanwhile (its idle timeout,
                # or a close after an answer): once more on a new one, never with a body
                # already partly streamed from a file object
                if reused and attempt == 0 and (data is None or isinstance(data, (bytes,
                                                                                    bytearray))):
                    continue
                raise TransportError(f"{self.endpoint}: the connection broke: {e}") from e
            except SandboxError:
                conn.close()
                raise
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise TransportError(f"{self.endpoint}: {e}") from e
            rh = {k.lower(): v for k, v in resp.getheaders()}
            if resp.will_close:
                conn.close()
            else:
                self._give(conn)
            if resp.status >= 400:
                raise error_from_response(resp.status, payload, rh)
            return resp.status, rh, payload
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: Any = None, *,
             query: Iterable[tuple[str, str]] | None = None) -> Any:
        _, _, payload = self.request(method, path, query=query, json_body=body)
        if not payload:
            return None
        try:
            return json.loads(payload)
        except ValueError as e:
            raise ProtocolError(f"the answer to {method} {path} is not JSON") from e

    # -- streams ----------------------------------------------------------------------------------

    def stream(self, method: str, path: str, *, query: Iterable[tuple[str, str]] | None = None,
               headers: Mapping[str, str] | None = None, timeout: float | None = None
               ) -> "StreamResponse":
        """A request whose answer is read as it comes, on a connection of its own."""
        conn = _Connection(self, timeout)
        try:
            conn.request(method, _url(path, query), headers=self.headers(headers))
            resp = conn.getresponse()
        except SandboxError:
            conn.close()
            raise
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(f"{self.endpoint}: {e}") from e
        if resp.status >= 400:
            payload = resp.read()
            rh = {k.lower(): v for k, v in resp.getheaders()}
            conn.close()
            raise error_from_response(resp.status, payload, rh)
        return StreamResponse(conn, resp)

    # -- upgrades -------------------------------------------------------------------------------

    def upgrade(self, path: str, protocol: str, *,
                query: Iterable[tuple[str, str]] | None = None,
                timeout: float | None = None) -> tuple[Any, bytes]:
        """GET path asking to switch to protocol. Returns the socket (over TLS a BioTls) and
        the bytes that came after the 101 head; any other answer raises its SandboxError."""
        sock = self.open_socket(timeout, bio=True)
        try:
            lines = [f"GET {_url(path, query)} HTTP/1.1"]
            h = self.headers({"Connection": "Upgrade", "Upgrade": protocol})
            lines += [f"{k}: {v}" for k, v in h.items()]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    raise TransportError(f"{self.endpoint}: the server closed the connection "
                                         f"before answering GET {path}")
                buf += chunk
                if len(buf) > _MAX_HEAD:
                    raise ProtocolError("the answer's head is too large")
            head, rest = buf.split(b"\r\n\r\n", 1)
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[1].isdigit():
                raise ProtocolError(f"not an HTTP answer: {status_line!r}")
            status = int(parts[1])
            rh: dict[str, str] = {}
            for line in header_lines:
                k, _, v = line.partition(":")
                rh[k.strip().lower()] = v.strip()
            if status == 101:
                if rh.get("upgrade", "").lower() != protocol.lower():
                    raise ProtocolError(f"the server switched to {rh.get('upgrade')!r}, not "
                                        f"{protocol}")
                return sock, rest
            length = int(rh.get("content-length", "0") or 0)
            while len(rest) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                rest += chunk
            raise error_from_response(status, rest[:length], rh)
        except BaseException:
            sock.close()
            raise


class StreamResponse:
    """An answer read as it comes (NDJSON lines, Server-Sent Events). Close it when done."""

    def __init__(self, conn: _Connection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self.response = resp
        self.headers = {k.lower(): v for k, v in resp.getheaders()}

    def lines(self) -> Iterator[bytes]:
        """Each line, without its line end, until the answer ends."""
        try:
            while True:
                line = self.response.readline(1 << 24)
                if not line:
                    return
                yield line.rstrip(b"\r\n")
        except (OSError, http.client.HTTPException) as e:
            if self._conn.sock is None:  # closed by our own close()
                return
            raise TransportError(f"the stream broke: {e}") from e

    def close(self) -> None:
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._conn.close()


def _url(path: str, query: Iterable[tuple[str, str]] | None) -> str:
    if query:
        q = urllib.parse.urlencode(list(query))
        if q:
            return f"{path}?{q}"
    return path


def quote(segment: str) -> str:
    """One path segment, percent-encoded."""
    return urllib.parse.quote(str(segment), safe="")
