"""What needs no server: endpoints, the environment's defaults, errors by code, the SSE and
NDJSON parsers fed in every cut, attach frames."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import sys
import unittest
from typing import Iterator
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sandboxd  # noqa: E402
from sandboxd._transport import Endpoint, default_socket  # noqa: E402
from sandboxd.errors import error_from_response  # noqa: E402
from sandboxd.streams import Attachment, EventStream, OutputStream  # noqa: E402


class Endpoints(unittest.TestCase):
    def test_parse(self) -> None:
        self.assertEqual(Endpoint.parse("unix:///run/s.sock"), Endpoint("unix", path="/run/s.sock"))
        self.assertEqual(Endpoint.parse("http://127.0.0.1:7443"),
                         Endpoint("http", host="127.0.0.1", port=7443))
        self.assertEqual(Endpoint.parse("https://box.example/"),
                         Endpoint("https", host="box.example", port=443))
        self.assertEqual(Endpoint.parse("http://[::1]:80").host_header, "[::1]:80")
        self.assertEqual(Endpoint.parse("unix:///x").host_header, "localhost")
        for bad in ("unix://relative", "ftp://h:1", "http://h:1/path", "http://h:99999",
                    "http://u@h:1", "localhost:7443", "http://:1"):
            with self.assertRaises(ValueError, msg=bad):
                Endpoint.parse(bad)

    def test_defaults_follow_the_cli(self) -> None:
        env = {"XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/u"}
        with mock.patch.dict(os.environ, env, clear=True), mock.patch("os.geteuid",
                                                                       return_value=1000):
            self.assertEqual(default_socket(), "/run/user/1000/sandboxd.sock")
            self.assertEqual(sandboxd.Client().endpoint, "unix:///run/user/1000/sandboxd.sock")
        with mock.patch.dict(os.environ, {"HOME": "/home/u"}, clear=True), \
                mock.patch("os.geteuid", return_value=1000):
            self.assertEqual(default_socket(), "/home/u/.local/share/sandboxd/sandboxd.sock")
        with mock.patch.dict(os.environ, env, clear=True), mock.patch("os.geteuid",
                                                                       return_value=0):
            self.assertEqual(default_socket(), "/run/sandboxd/sandboxd.sock")
        with mock.patch.dict(os.environ, {"SANDBOX_ENDPOINT": "http://10.0.0.1:7443",
                                          "SANDBOX_TOKEN": "t0ken-from-the-env"}, clear=True):
            c = sandboxd.Client()
            self.assertEqual(c.endpoint, "http://10.0.0.1:7443")
            self.assertEqual(c.transport.headers()["Authorization"], "Bearer t0ken-from-the-env")
            # what the code says wins over the environment
            c = sandboxd.Client("unix:///x.sock", token="other-token")
            self.assertEqual((c.endpoint, c.transport.token), ("unix:///x.sock", "other-token"))
        with self.assertRaises(ValueError):
            sandboxd.Client("http://h:1", token="has space")


class Errors(unittest.TestCase):
    def test_by_code(self) -> None:
        body = json.dumps({"error": {"code": "conflict", "message": "the name 'a' is already "
                                                                    "in use"}}).encode()
        e = error_from_response(409, body)
        self.assertIsInstance(e, sandboxd.Conflict)
        self.assertIsInstance(e, sandboxd.SandboxError)
        self.assertEqual((e.code, e.status, e.message), ("conflict", 409,
                                                         "the name 'a' is already in use"))
        cases = {"invalid_request": sandboxd.InvalidRequest, "unauthorized": sandboxd.Unauthorized,
                 "refused": sandboxd.Refused, "forbidden_origin": sandboxd.ForbiddenOrigin,
                 "not_found": sandboxd.NotFound, "rate_limited": sandboxd.RateLimited,
                 "internal": sandboxd.InternalError, "unsupported": sandboxd.Unsupported,
                 "unavailable": sandboxd.Unavailable,
                 "insufficient_storage": sandboxd.InsufficientStorage}
        for code, cls in cases.items():
            e = error_from_response(400, json.dumps({"error": {"code": code,
                                                               "message": "m"}}).encode())
            self.assertIs(type(e), cls, code)
            self.assertEqual(e.code, code)

    def test_unknown_code_and_no_body(self) -> None:
        e = error_from_response(418, b'{"error":{"code":"teapot","message":"short and stout"}}')
        self.assertIs(type(e), sandboxd.SandboxError)
        self.assertEqual((e.code, e.message), ("teapot", "short and stout"))
        e = error_from_response(503, b"")
        self.assertIsInstance(e, sandboxd.Unavailable)
        self.assertEqual(e.message, "HTTP 503")
        e = error_from_response(429, b'{"error":{"code":"rate_limited","message":"x"}}',
                                {"retry-after": "1"})
        self.assertEqual(e.retry_after, 1.0)  # type: ignore[attr-defined]


class FakeStream:
    """A StreamResponse whose lines come from bytes cut at given offsets."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.closed = False

    def lines(self) -> Iterator[bytes]:
        for line in self.data.splitlines(keepends=True):
            yield line.rstrip(b"\r\n")

    def close(self) -> None:
        self.closed = True


class Parsers(unittest.TestCase):
    def test_sse(self) -> None:
        text = (b"retry: 2000\n\n"
                b": keep-alive\n\n"
                b"id: 14\nevent: created\ndata: {\"seq\":14,\"sandbox_id\":\"sbx_1\","
                b"\"data\":{\"name\":\"a\"}}\n\n"
                b"event: reconciler.removed\ndata: {\"data\":{\"what\":\"vmm\"}}\n\n"
                b"id: 15\r\nevent: state\r\ndata:{\"seq\":15,\"data\":{\"to\":\"running\"}}\r\n\r\n"
                b"data: line one\ndata: line two\n\n"
                b"id: 16\nevent: cut\ndata: {}")  # an event the stream never finished
        es = EventStream.__new__(EventStream)
        es.last_id = None
        es._retry_ms = 0
        events = list(es._parse(FakeStream(text)))  # type: ignore[arg-type]
        self.assertEqual([(e.type, e.id) for e in events],
                         [("created", 14), ("reconciler.removed", None), ("state", 15),
                          ("message", None)])
        self.assertEqual(events[0].sandbox_id, "sbx_1")
        self.assertEqual(events[0].payload, {"name": "a"})
        self.assertEqual(events[2].payload, {"to": "running"})
        self.assertEqual(events[3].data, "line one\nline two")
        self.assertEqual(es.last_id, 15)
        self.assertEqual(es._retry_ms, 2000)

    def test_ndjson_output(self) -> None:
        lines = [{"dropped": 5}, {"stream": "stdout", "data": base64.b64encode(b"a").decode()},
                 {"stream": "stderr", "data": base64.b64encode(b"b").decode()},
                 {"exit_code": -1, "timed_out": True}]
        fake = FakeStream(b"\n".join(json.dumps(x).encode() for x in lines) + b"\n")
        out = OutputStream(fake)  # type: ignore[arg-type]
        self.assertEqual(out.read_all(), (b"a", b"b", -1))
        self.assertEqual((out.dropped, out.timed_out, fake.closed), (5, True, True))

    def test_attach_frames(self) -> None:
        a, b = socket.socketpair()
        with a, b:
            first = b"o" + struct.pack(">I", 3) + b"abc"
            rest = (b"E" + struct.pack(">I", 1) + b"!" + b"d" + struct.pack(">I", 8) +
                    struct.pack(">Q", 42) + b"x" + struct.pack(">I", 4) + struct.pack(">i", -1))
            att = Attachment(a, first[:2])  # what came with the 101 head
            b.sendall(first[2:] + rest)
            att.send("in")
            att.resize(50, 200)
            att.signal("INT")
            att.close_stdin()
            frames = list(att)
            self.assertEqual([f.kind for f in frames], ["stdout", "stderr", "dropped", "exit"])
            self.assertEqual((frames[0].data, frames[2].count, att.exit_code), (b"abc", 42, -1))
            sent = b""
            b.settimeout(2)
            while len(sent) < 7 + 9 + 8 + 5:
                sent += b.recv(100)
            self.assertEqual(sent, b"i\0\0\0\x02in" + b"r\0\0\0\x04" + struct.pack(">HH", 50, 200)
                             + b"s\0\0\0\x03INT" + b"e\0\0\0\0")


if __name__ == "__main__":
    unittest.main()
