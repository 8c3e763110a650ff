"""The SDK against a real microVM: the product sandboxd (QEMU, TCG here) with the guest bundle
the vm/setup fixture built, its default image busybox. One sandbox: create, run, a streaming
process with stdin, attach, files, a tunnel, events, delete; then the README's example as
written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
sys.path.insert(0, SDK)
sys.path.insert(0, HERE)

import sandboxd  # noqa: E402
from daemon import TOKEN, Daemon, need_env, sanitizer_report  # noqa: E402
from test_readme import readme_example  # noqa: E402

BOOT = 300.0  # a create under TCG and ASan: seconds at most


class RealVm(unittest.TestCase):
    d: Daemon

    @classmethod
    def setUpClass(cls) -> None:
        bundle = need_env("SANDBOX_VM_BUNDLE")
        if not os.path.exists(os.path.join(bundle, "vm", "bundle.json")):
            raise unittest.SkipTest(f"no guest bundle at {bundle} (the vm/setup fixture "
                                    "failed?)")
        cls.d = Daemon(need_env("SANDBOXD"), vm_bundle=bundle)

    @classmethod
    def tearDownClass(cls) -> None:
        with sandboxd.Client(cls.d.unix_endpoint) as c:
            for sb in c.list_sandboxes(state=["running", "stopped", "failed", "starting"]):
                sb.delete()
        rc = cls.d.stop()
        log = cls.d.read_log()
        left = cls.d.cleanup()
        assert not sanitizer_report(log), log.decode(errors="replace")
        assert rc == 0, log.decode(errors="replace")
        assert not left, f"VMMs outlived sandboxd: {left}"

    def test_sandbox_in_a_vm(self) -> None:
        c = sandboxd.Client(self.d.unix_endpoint, timeout=BOOT)
        self.assertEqual(c.capabilities()["backend"], "qemu")
        with c.events(timeout=BOOT) as stream:
            with c.create_sandbox(name="sdk-vm", memory_mb=256) as sb:
                self.assertEqual(sb.state, "running", sb.reason)
                # run: the guest's own kernel and user
                r = sb.run(["sh", "-c", "id -u; cat /proc/sys/kernel/hostname >/dev/null && "
                                        "pwd; echo oops >&2; exit 4"])
                self.assertEqual((r.exit_code, r.stdout, r.stderr),
                                 (4, b"1001\n/sandbox/home\n", b"oops\n"))
                # a streaming process with stdin
                p = sb.processes.start(["sh", "-c", "while read l; do echo got $l; done; "
                                                    "exit 6"])
                with p.output(timeout=BOOT) as out:
                    it = iter(out)
                    p.write("one\n")
                    self.assertEqual(next(it).data, b"got one\n")
                    p.write("two\n", close=True)
                    self.assertEqual(b"".join(ch.data for ch in it), b"got two\n")
                self.assertEqual(out.exit_code, 6)
                # attach over sbx-stream/1, a TTY, resized
                t = sb.processes.start(["sh"], tty=True, rows=24, cols=80)
                with t.attach() as a:
                    a.resize(40, 120)
                    a.send("stty size; exit 5\n")
                    data, _, code = a.read_all()
                self.assertIn(b"40 120", data)
                self.assertEqual(code, 5)
                # files
                sb.files.write("/sandbox/home/proj/hello.txt", b"hi from the SDK\n")
                self.assertEqual(sb.run(["cat", "/sandbox/home/proj/hello.txt"]).stdout,
                                 b"hi from the SDK\n")
                sb.run(["sh", "-c", "echo made in the guest > /sandbox/home/proj/g.txt"])
                self.assertEqual(sb.files.read("/sandbox/home/proj/g.txt"),
                                 b"made in the guest\n")
                self.assertEqual(sorted(e.name for e in sb.files.list("/sandbox/home/proj")),
                                 ["g.txt", "hello.txt"])
                sb.files.remove("/sandbox/home/proj/g.txt")
                with self.assertRaises(sandboxd.NotFound):
                    sb.files.read("/sandbox/home/proj/g.txt")
                with self.assertRaises(sandboxd.Refused):
                    sb.files.read("/etc/shadow")
                # a tunnel to a port inside the VM (busybox nc)
                self.assertTrue(c.capabilities()["capabilities"]["tunnel"])
                sb.processes.start(["sh", "-c", "echo hello-from-the-vm | nc -l -p 8081"])
                for _ in range(100):
                    try:
                        tun = sb.tunnel(8081)
                        break
                    except sandboxd.Conflict:  # nc is not listening yet
                        time.sleep(0.1)
                with tun:
                    self.assertEqual(tun.recv_all(), b"hello-from-the-vm\n")
            # the events of all that, live, ending with the delete
            seen = []
            for ev in stream:
                if ev.sandbox_id == sb.id:
                    seen.append(ev.type)
                    if ev.type == "state" and ev.payload.get("to") == "terminated":
                        break
        self.assertEqual(seen[0], "created")
        for t in ("process.started", "process.exited", "file.written", "file.read",
                  "file.removed", "tunnel.opened"):
            self.assertIn(t, seen)
        self.assertEqual(c.get_sandbox(sb.id).state, "terminated")
        c.close()

    def test_readme_example_in_a_vm(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}
        env.update(PYTHONPATH=SDK, SANDBOX_ENDPOINT=self.d.tcp_endpoint, SANDBOX_TOKEN=TOKEN)
        r = subprocess.run([sys.executable, "-c", readme_example()], env=env,
                           capture_output=True, text=True, timeout=BOOT)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^hello from sbx_[0-9a-f]{16}$")
        self.assertEqual(lines[1:], ["written through the API", "got: one", "got: two"])


if __name__ == "__main__":
    unittest.main()
