"""The SDK against a live sandboxd-fake whose sandboxes run sandbox-guestd on this host
(SANDBOXD_FAKE_AGENT): processes and files are real. Every case runs over the unix socket,
TCP with the token, and https with a private CA."""

from __future__ import annotations

import http.client
import io
import os
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import sandboxd  # noqa: E402
from daemon import TOKEN, Daemon, free_port, need_env, sanitizer_report  # noqa: E402

D: Daemon | None = None   # the unix socket and TCP with the token
DT: Daemon | None = None  # TCP with TLS (a private CA) and the token


def daemon_help() -> str:
    return subprocess.run([os.environ["SANDBOXD_FAKE"], "--help"], capture_output=True,
                          text=True).stdout


def _start(tls: bool) -> Daemon:
    extra: list[str] = []
    if "--preview-listen" in daemon_help():
        extra += ["--preview-listen", f"127.0.0.1:{free_port()}"]
    return Daemon(need_env("SANDBOXD_FAKE"), tls=tls, extra=extra,
                  env={"SANDBOXD_FAKE_AGENT": need_env("SANDBOX_GUESTD")})


def setUpModule() -> None:
    global D, DT
    D = _start(tls=False)
    DT = _start(tls=True)


def _finish(d: Daemon | None) -> None:
    if d is None:
        return
    rc = d.stop()
    log = d.read_log()
    left = d.cleanup()
    report = sanitizer_report(log)
    if report:
        raise AssertionError(f"sandboxd-fake's log has a sanitizer report:\n{report}")
    if rc != 0:
        raise AssertionError(f"sandboxd-fake exited {rc}:\n{log.decode(errors='replace')}")
    if left:
        raise AssertionError(f"processes of the fake's sandboxes outlived it: {left}")


def tearDownModule() -> None:
    try:
        _finish(D)
    finally:
        _finish(DT)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


ECHO_SERVER = (
    "import socket,sys\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(8); print('listening', flush=True)\n"
    "while True:\n"
    "    c,_=s.accept(); data=b''\n"
    "    while True:\n"
    "        b=c.recv(65536)\n"
    "        if not b: break\n"
    "        data+=b; c.sendall(b.upper())\n"
    "    c.sendall(b'[%d bytes, then EOF]' % len(data)); c.close()\n")


class Common:
    """The cases; a subclass says which endpoint."""

    client: sandboxd.Client
    assertEqual: object
    assertIn: object

    @classmethod
    def make_client(cls) -> sandboxd.Client:
        raise NotImplementedError

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = cls.make_client()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()

    # -- sandboxes ------------------------------------------------------------------------------

    def test_sandbox_lifecycle(self) -> None:
        c = self.client
        name = unique("life")
        with c.create_sandbox(name=name, labels={"suite": "sdk", "case": name},
                              env={"GREETING": "hi"}, cpus=1, memory_mb=256) as sb:
            self.assertEqual(sb.state, "running")
            self.assertTrue(sb.id.startswith("sbx_"))
            self.assertEqual(sb.name, name)
            self.assertEqual(sb.env_names, ["GREETING"])
            self.assertEqual(sb["memory_mb"], 256)
            self.assertEqual(c.get_sandbox(name), sb)
            listed = c.list_sandboxes(labels={"case": name})
            self.assertEqual([s.id for s in listed], [sb.id])
            self.assertIn(sb.id, [s.id for s in c.list_sandboxes(state=["running", "stopped"])])
            self.assertEqual(sb.stop().state, "stopped")
            self.assertEqual(c.get_sandbox(sb.id).state, "stopped")
            with self.assertRaises(sandboxd.Conflict) as cm:
                sb.run(["true"])
            self.assertEqual(cm.exception.status, 409)
            self.assertIn("must be running", cm.exception.message)
            self.assertEqual(sb.start().state, "running")
            # suspend keeps memory and disk; a run resumes it first
            self.assertEqual(sb.suspend().state, "suspended")
            self.assertEqual(sb.resume().state, "running")
            self.assertEqual(sb.suspend().state, "suspended")
            self.assertEqual(sb.run(["true"]).exit_code, 0)
            self.assertEqual(sb.refresh().state, "running")
            self.assertEqual(sb.update(labels={"suite": "sdk", "case": name, "x": "y"}).labels["x"],
                             "y")
        # the with block deleted it: terminated, found by id, its name free again
        gone = c.get_sandbox(sb.id)
        self.assertEqual(gone.state, "terminated")
        self.assertEqual(gone.reason, "deleted")
        with self.assertRaises(sandboxd.NotFound):
            c.get_sandbox(name)
        c.delete_sandbox(sb.id)  # idempotent

    def test_errors_are_typed(self) -> None:
        c = self.client
        with self.assertRaises(sandboxd.NotFound) as nf:
            c.get_sandbox("sbx_0123456789abcdef")
        e = nf.exception
        self.assertIsInstance(e, sandboxd.SandboxError)
        self.assertEqual((e.code, e.status), ("not_found", 404))
        self.assertIn("sbx_0123456789abcdef", e.message)
        with self.assertRaises(sandboxd.InvalidRequest) as bad:
            c.create_sandbox(name="Not_Valid")
        self.assertEqual((bad.exception.code, bad.exception.status), ("invalid_request", 400))
        with self.assertRaises(sandboxd.Refused) as ref:
            c.create_sandbox(env={"LD_PRELOAD": "/x.so"})
        self.assertEqual((ref.exception.code, ref.exception.status), ("refused", 403))
        with self.assertRaises(sandboxd.Unsupported) as uns:
            c.create_sandbox(volumes=[{"name": "d", "path": "/d"}])
        self.assertEqual(uns.exception.status, 501)
        name = unique("dup")
        with c.create_sandbox(name=name):
            with self.assertRaises(sandboxd.Conflict) as dup:
                c.create_sandbox(name=name)
            self.assertIn("already in use", dup.exception.message)

    # -- processes ------------------------------------------------------------------------------

    def test_run(self) -> None:
        with self.client.create_sandbox() as sb:
            r = sb.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
            self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, b"out\n", b"err\n"))
            self.assertFalse(r.ok)
            r = sb.run("printf %s \"$GREETING\"; wc -c", env={"GREETING": "hello "},
                       stdin=b"\x00\x01binary\xff")
            self.assertEqual(r.stdout.split(), [b"hello", b"9"])
            r = sb.run(["sleep", "30"], timeout_secs=1)
            self.assertTrue(r.timed_out)
            self.assertEqual(r.exit_code, -1)
            with self.assertRaises(sandboxd.InvalidRequest) as cm:
                sb.run(["no-such-program-here"])
            self.assertIn("not found", cm.exception.message)

    def test_streaming_process_with_stdin(self) -> None:
        with self.client.create_sandbox() as sb:
            p = sb.processes.start(["sh", "-c", "while read l; do echo got $l; echo warn >&2; "
                                                "done; exit 7"])
            self.assertEqual(p.state, "running")
            self.assertIn(p.pid, [q.pid for q in sb.processes.list()])
            with p.output() as out:
                it = iter(out)
                p.write("one\n")
                # the first line arrives while the process still runs: a stream, not a dump
                first = next(it)
                self.assertEqual(first, sandboxd.OutputChunk("stdout", b"got one\n"))
                self.assertEqual(sb.processes.get(p.pid).state, "running")
                p.write(b"two\n", close=True)
                rest = list(it)
            self.assertEqual(out.exit_code, 7)
            self.assertEqual(b"".join(c.data for c in rest if c.stream == "stdout"),
                             b"got two\n")
            self.assertEqual(b"".join(c.data for c in [first] + rest if c.stream == "stderr"),
                             b"warn\nwarn\n")
            self.assertEqual(p.refresh().exit_code, 7)
            # stdin of a process that exited: Conflict; a second reader gets the kept output
            with self.assertRaises(sandboxd.Conflict):
                p.write("late\n")
            self.assertEqual(p.output().read_all(), (b"got one\ngot two\n", b"warn\nwarn\n", 7))
            # a large stdin streamed from a file object, and a signal
            q = sb.processes.start(["wc", "-c"])
            q.write(io.BytesIO(b"x" * 300000), close=True)
            self.assertEqual(q.output().read_all()[0].strip(), b"300000")
            s = sb.processes.start(["sleep", "60"])
            s.signal("TERM")
            self.assertEqual(s.wait(), 143)
            self.assertEqual(s.state, "exited")

    def test_attach(self) -> None:
        with self.client.create_sandbox() as sb:
            p = sb.processes.start(["sh", "-c", "while read l; do echo got $l; done; exit 3"])
            with p.attach() as a:
                a.send("one\n")
                f = a.recv(timeout=10)
                self.assertEqual(f, sandboxd.Frame("stdout", b"got one\n"))
                a.send(b"two\n")
                a.close_stdin()
                out, err, code = a.read_all()
            self.assertEqual((out, err, code), (b"got two\n", b"", 3))
            # a TTY: resize and a signal
            t = sb.processes.start(["sh", "-c", "trap 'echo got INT' INT; stty size; "
                                                "echo ready; sleep 10; stty size; exit 5"],
                                   tty=True, rows=24, cols=80)
            with t.attach() as a:
                seen = b""
                while b"ready" not in seen:
                    f = a.recv(timeout=10)
                    assert f is not None
                    seen += f.data
                self.assertIn(b"24 80", seen)
                a.resize(50, 200)
                a.signal("INT")  # ends the sleep at once (the TTY's process group gets it)
                out, _, code = a.read_all()
            self.assertIn(b"got INT", out)
            self.assertIn(b"50 200", out)
            self.assertEqual(code, 5)
            # attaching to a process that ended replays its output and exit code
            with p.attach() as a:
                self.assertEqual(a.read_all(), (b"got one\ngot two\n", b"", 3))

    # -- files ----------------------------------------------------------------------------------

    def test_files(self) -> None:
        with self.client.create_sandbox() as sb:
            assert D is not None
            base = os.path.join(D.dir, "files", sb.id)
            blob = bytes(range(256)) * 1000
            sb.files.write(f"{base}/sub/blob.bin", blob)
            sb.files.write(f"{base}/note.txt", "hello\n")
            sb.files.write(f"{base}/streamed.bin", io.BytesIO(blob))
            self.assertEqual(sb.files.read(f"{base}/sub/blob.bin"), blob)
            self.assertEqual(sb.files.read(f"{base}/streamed.bin"), blob)
            self.assertEqual(sb.files.read_text(f"{base}/note.txt"), "hello\n")
            entries = {e.name: e for e in sb.files.list(base)}
            self.assertEqual(sorted(entries), ["note.txt", "streamed.bin", "sub"])
            self.assertEqual((entries["sub"].type, entries["note.txt"].size), ("dir", 6))
            self.assertTrue(sb.files.exists(f"{base}/note.txt"))
            # the guest sees what was written
            self.assertEqual(sb.run(["cat", f"{base}/note.txt"]).stdout, b"hello\n")
            with self.assertRaises(sandboxd.Conflict):
                sb.files.remove(f"{base}/sub")  # not empty
            sb.files.remove(f"{base}/sub/blob.bin")
            sb.files.remove(f"{base}/sub")
            self.assertFalse(sb.files.exists(f"{base}/sub"))
            with self.assertRaises(sandboxd.NotFound):
                sb.files.read(f"{base}/sub/blob.bin")
            with self.assertRaises(sandboxd.InvalidRequest):
                sb.files.read("relative/path")
            with self.assertRaises(sandboxd.InvalidRequest):
                sb.files.read(base)  # a directory

    # -- events ---------------------------------------------------------------------------------

    def test_events(self) -> None:
        c = self.client
        with c.events(timeout=30) as stream:
            with c.create_sandbox(name=unique("ev")) as sb:
                sb.run(["true"])
            seen: list[tuple[str, dict]] = []
            for ev in stream:
                if ev.sandbox_id != sb.id:
                    continue
                seen.append((ev.type, ev.payload))
                self.assertIsInstance(ev.id, int)
                if ev.type == "state" and ev.payload.get("to") == "terminated":
                    break
        types = [t for t, _ in seen]
        self.assertEqual(types[0], "created")
        self.assertIn("process.started", types)
        self.assertIn("process.exited", types)
        self.assertIn(("state", "running"), [(t, p.get("to")) for t, p in seen])
        # replay from a seq: the same events again, through a sandbox's own stream
        audit = sb.audit()
        self.assertEqual([e["type"] for e in audit["events"]][:2],
                         ["sandbox.created", "sandbox.started"])
        with self.assertRaises(sandboxd.NotFound):
            c.events(sandbox="sbx_0123456789abcdef")

    def test_sandbox_event_stream_replays(self) -> None:
        with self.client.create_sandbox() as sb:
            since = sb.audit()["last_seq"]
            sb.run(["true"])
            with sb.events(since=since, timeout=30) as stream:
                first = next(iter(stream))
            self.assertEqual(first.type, "process.started")
            self.assertEqual(first.sandbox_id, sb.id)
            self.assertGreater(first.id, since)
            self.assertEqual(stream.last_id, first.id)

    # -- tunnels, previews, agents (issue 15's other branches) ----------------------------------

    def _need_capability(self, name: str) -> None:
        if not self.client.capabilities()["capabilities"].get(name):
            self.skipTest(f"this sandboxd does not offer '{name}' yet (capabilities.{name} "
                          "false): the branch that adds it has not landed")

    def _echo_server(self, sb: sandboxd.Sandbox) -> tuple[sandboxd.Process, int]:
        port = free_port()
        p = sb.processes.start([sys.executable, "-c", ECHO_SERVER, str(port)])
        with p.output() as out:
            for chunk in out:
                if b"listening" in chunk.data:
                    break
        return p, port

    def test_tunnel(self) -> None:
        self._need_capability("tunnel")
        with self.client.create_sandbox() as sb:
            _, port = self._echo_server(sb)
            with sb.tunnel(port) as t:
                t.sendall(b"hello ")
                self.assertEqual(t.recv(6), b"HELLO ")
                t.sendall(b"world")
                t.shutdown(socket.SHUT_WR)  # the guest reads EOF, and still answers
                self.assertEqual(t.recv_all(), b"WORLD[11 bytes, then EOF]")
            with self.assertRaises(sandboxd.Conflict) as cm:
                sb.tunnel(free_port())
            self.assertIn("nothing listens", cm.exception.message)
            with sb.forward(port) as fwd:
                with socket.create_connection(("127.0.0.1", fwd.port), timeout=10) as s:
                    s.sendall(b"via forward")
                    s.shutdown(socket.SHUT_WR)
                    got = b""
                    while chunk := s.recv(65536):
                        got += chunk
            self.assertEqual(got, b"VIA FORWARD[11 bytes, then EOF]")
        with self.assertRaises(sandboxd.NotFound):
            self.client.get_sandbox("sbx_0123456789abcdef").tunnel(80)

    def test_preview(self) -> None:
        self._need_capability("preview")
        with self.client.create_sandbox() as sb:
            port = free_port()
            web = os.path.join(D.dir, "web-" + sb.id)  # type: ignore[union-attr]
            sb.files.write(f"{web}/index.html", "<p>served in the sandbox</p>\n")
            srv = sb.processes.start([sys.executable, "-m", "http.server", "--bind",
                                      "127.0.0.1", str(port)], cwd=web)
            url = sb.preview(port)
            u = urllib.parse.urlsplit(url)
            self.assertTrue(u.hostname.startswith("p-"), url)  # type: ignore[union-attr]
            self.assertIn("sbx_preview=", u.query)
            # the token becomes a cookie for that host, then the page comes from the sandbox
            # (the preview host is asked for through 127.0.0.1: *.localhost may not resolve)
            conn = http.client.HTTPConnection("127.0.0.1", u.port, timeout=30)
            conn.request("GET", f"/?{u.query}", headers={"Host": u.netloc})
            r = conn.getresponse()
            r.read()
            self.assertEqual(r.status, 302)
            cookie = r.getheader("Set-Cookie", "").split(";")[0]
            self.assertTrue(cookie.startswith("sbx_preview="), cookie)
            body = b""
            for _ in range(50):  # the server may still be starting
                conn = http.client.HTTPConnection("127.0.0.1", u.port, timeout=30)
                conn.request("GET", "/index.html", headers={"Host": u.netloc, "Cookie": cookie})
                r = conn.getresponse()
                body = r.read()
                conn.close()
                if r.status == 200:
                    break
                time.sleep(0.2)
            self.assertEqual(body, b"<p>served in the sandbox</p>\n")
            srv.kill()

    def _agents_landed(self) -> None:
        if "agents" in self.client.capabilities()["capabilities"]:
            self._need_capability("agents")
            return
        try:
            self.client.create_sandbox(agent={"name": "nobody-agent"})
        except sandboxd.InvalidRequest as e:
            if "unknown field" in e.message:
                self.skipTest("this sandboxd has no 'agent' field on create yet: the agent "
                              "branch has not landed")

    def test_agent_and_secrets(self) -> None:
        self._agents_landed()
        c = self.client
        before = {s.id for s in c.list_sandboxes()}
        for s in c.secrets.list():
            if s["name"] in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"):
                c.secrets.delete(s["name"])
        with self.assertRaises(sandboxd.InvalidRequest) as cm:
            c.create_agent("claude", "fix the failing test")
        self.assertIn("ANTHROPIC_API_KEY", cm.exception.message)
        self.assertEqual({s.id for s in c.list_sandboxes()}, before)  # nothing created
        with c.create_agent("claude", "fix the failing test", args=["--model", "x"],
                            env={"ANTHROPIC_API_KEY": "sk-test-not-real"}) as sb:
            self.assertIn("ANTHROPIC_API_KEY", sb.env_names)
            self.assertEqual(sb.network["mode"], "allowlist")
            self.assertIn("api.anthropic.com", sb.network["allow"])
            agent = sb.refresh().agent
            assert agent is not None
            self.assertEqual((agent["name"], agent["task"]), ("claude", "fix the failing test"))
            self.assertIn(agent["state"], ("starting", "running", "exited", "failed"))
        # a saved secret is the credential when env has none; values never come back
        c.secrets.set("OPENAI_API_KEY", "sk-saved-not-real")
        try:
            self.assertIn("OPENAI_API_KEY", c.secrets)
            self.assertNotIn("sk-saved", repr(c.secrets.list()))
            with c.create_agent("codex") as sb:
                self.assertIn("OPENAI_API_KEY", sb.env_names)
                self.assertIn("api.openai.com", sb.network["allow"])
                self.assertIsNone(sb.agent["task"])  # type: ignore[index]
        finally:
            c.secrets.delete("OPENAI_API_KEY")
        with self.assertRaises(sandboxd.NotFound):
            c.secrets.delete("OPENAI_API_KEY")


class UnixSocket(Common, unittest.TestCase):
    @classmethod
    def make_client(cls) -> sandboxd.Client:
        assert D is not None
        return sandboxd.Client(D.unix_endpoint)

    def test_whoami_is_the_operator(self) -> None:
        self.assertEqual(self.client.whoami()["user"], "operator")
        self.assertEqual(self.client.health(), {"status": "ok"})
        self.assertEqual(self.client.capabilities()["backend"], "fake")

    def test_endpoint_from_the_environment(self) -> None:
        assert D is not None
        saved = {k: os.environ.get(k) for k in ("SANDBOX_ENDPOINT", "SANDBOX_TOKEN",
                                                "SANDBOX_CA", "XDG_RUNTIME_DIR")}
        try:
            os.environ.pop("SANDBOX_ENDPOINT", None)
            os.environ.pop("SANDBOX_TOKEN", None)
            # nothing said: the default socket, $XDG_RUNTIME_DIR/sandboxd.sock (not root)
            if os.geteuid() != 0:
                rt = os.path.join(D.dir, "rt")
                os.makedirs(rt, exist_ok=True)
                link = os.path.join(rt, "sandboxd.sock")
                if not os.path.exists(link):
                    os.symlink(D.sock, link)
                os.environ["XDG_RUNTIME_DIR"] = rt
                c = sandboxd.Client()
                self.assertEqual(c.endpoint, f"unix://{link}")
                self.assertEqual(c.health(), {"status": "ok"})
            os.environ["SANDBOX_ENDPOINT"] = D.tcp_endpoint
            os.environ["SANDBOX_TOKEN"] = TOKEN
            c = sandboxd.Client()
            self.assertEqual(c.endpoint, D.tcp_endpoint)
            self.assertEqual(c.whoami()["user"], "operator")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class TcpToken(Common, unittest.TestCase):
    @classmethod
    def make_client(cls) -> sandboxd.Client:
        assert D is not None
        return sandboxd.Client(D.tcp_endpoint, token=TOKEN)

    def test_credentials(self) -> None:
        assert D is not None
        self.assertEqual(self.client.whoami()["user"], "operator")
        with self.assertRaises(sandboxd.Unauthorized) as cm:
            sandboxd.Client(D.tcp_endpoint, token="wrong-token-wrong-token").whoami()
        self.assertEqual(cm.exception.status, 401)
        with self.assertRaises(sandboxd.Unauthorized):
            sandboxd.Client(D.tcp_endpoint).list_sandboxes()
        with self.assertRaises(sandboxd.TransportError):
            sandboxd.Client(f"http://127.0.0.1:{free_port()}", token=TOKEN).health()

    def test_kept_alive_connections_survive_concurrency(self) -> None:
        errors: list[BaseException] = []
        with self.client.create_sandbox() as sb:
            def worker(i: int) -> None:
                try:
                    for k in range(5):
                        r = sb.run(["echo", f"{i}-{k}"])
                        assert r.stdout == f"{i}-{k}\n".encode(), r
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)
            threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        self.assertEqual(errors, [])


class Tls(Common, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        assert DT is not None
        if not DT.tls:
            raise unittest.SkipTest("openssl is not installed: no certificates for TLS")
        super().setUpClass()

    @classmethod
    def make_client(cls) -> sandboxd.Client:
        assert DT is not None
        return sandboxd.Client(DT.tcp_endpoint, token=TOKEN, ca=DT.ca)

    def test_certificate_checked(self) -> None:
        assert DT is not None
        with self.assertRaises(sandboxd.TransportError) as cm:
            sandboxd.Client(DT.tcp_endpoint, token=TOKEN).health()
        self.assertIn("not trusted", cm.exception.message)
        saved = os.environ.get("SANDBOX_CA")
        try:
            os.environ["SANDBOX_CA"] = DT.ca
            with sandboxd.Client(DT.tcp_endpoint, token=TOKEN) as c:
                self.assertEqual(c.whoami()["user"], "operator")
        finally:
            if saved is None:
                os.environ.pop("SANDBOX_CA", None)
            else:
                os.environ["SANDBOX_CA"] = saved


if __name__ == "__main__":
    unittest.main()
