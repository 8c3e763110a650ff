"""TLS over a memory BIO for upgraded connections (attach, tunnel): unlike ssl.SSLSocket it
can half-close, sending TLS close_notify (sandboxd reads it as the client's end of file) while
what the server sends still comes, and it lets one thread read while another writes."""

from __future__ import annotations

import socket
import ssl
import threading


class BioTls:
    """The socket-like part of a TLS connection that attach and tunnel use: sendall, recv,
    shutdown, close, settimeout, fileno."""

    def __init__(self, raw: socket.socket, ctx: ssl.SSLContext, hostname: str) -> None:
        self._raw = raw
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = ctx.wrap_bio(self._in, self._out, server_hostname=hostname)
        self._lock = threading.Lock()   # the SSL object: one call at a time
        self._wlock = threading.Lock()  # the raw socket's writes, in order
        self._plain = bytearray()       # plaintext read early (before a half-close)
        self._eof = False
        self._wrote_eof = False
        while True:
            try:
                with self._lock:
                    self._obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                if not self._feed():
                    raise ssl.SSLEOFError("the server closed the connection in the handshake")
        self._flush()

    def _flush(self) -> None:
        with self._wlock:
            with self._lock:
                data = self._out.read()
            if data:
                self._raw.sendall(data)

    def _feed(self) -> bool:
        data = self._raw.recv(65536)
        with self._lock:
            if data:
                self._in.write(data)
            else:
                self._in.write_eof()
        return bool(data)

    def sendall(self, data: bytes) -> None:
        if self._wrote_eof:
            raise BrokenPipeError("the connection was shut down for writing")
        with self._wlock:
            with self._lock:
                self._obj.write(data)
                out = self._out.read()
            self._raw.sendall(out)

    def send(self, data: bytes) -> int:
        self.sendall(data)
        return len(data)

    def recv(self, n: int) -> bytes:
        while True:
            with self._lock:
                if self._plain:
                    out = bytes(self._plain[:n])
                    del self._plain[:n]
                    return out
                if self._eof:
                    return b""
                try:
                    return self._obj.read(n)
                except ssl.SSLWantReadError:
                    pass
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    self._eof = True
                    return b""
            self._flush()  # what reading produced (session tickets, key updates)
            self._feed()

    def shutdown(self, how: int) -> None:
        if how != socket.SHUT_WR:
            self._raw.shutdown(how)
            return
        with self._wlock:
            with self._lock:
                # read every whole record first: OpenSSL's shutdown would discard them
                while True:
                    try:
                        chunk = self._obj.read(65536)
                    except ssl.SSLWantReadError:
                        break
                    except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                        self._eof = True
                        break
                    if not chunk:
                        break
                    self._plain += chunk
                try:
                    self._obj.unwrap()  # sends close_notify; the peer's is not awaited
                except (ssl.SSLWantReadError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    pass
                out = self._out.read()
                self._wrote_eof = True
            self._raw.sendall(out)

    def settimeout(self, timeout: float | None) -> None:
        self._raw.settimeout(timeout)

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        self._raw.close()
