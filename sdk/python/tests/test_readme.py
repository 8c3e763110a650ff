"""The README's opening example, run as written: a plain script with sdk/python on the path,
against SANDBOX_ENDPOINT (the unix socket of a sandboxd-fake, then TCP with SANDBOX_TOKEN)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
sys.path.insert(0, SDK)
sys.path.insert(0, HERE)

from daemon import TOKEN, Daemon, need_env, sanitizer_report  # noqa: E402


def readme_example() -> str:
    with open(os.path.join(SDK, "README.md"), encoding="utf-8") as f:
        m = re.search(r"```python\n(.*?)```", f.read(), re.S)
    assert m, "README.md has no python block"
    return m.group(1)


class Readme(unittest.TestCase):
    d: Daemon

    @classmethod
    def setUpClass(cls) -> None:
        cls.d = Daemon(need_env("SANDBOXD_FAKE"),
                       env={"SANDBOXD_FAKE_AGENT": need_env("SANDBOX_GUESTD")})

    @classmethod
    def tearDownClass(cls) -> None:
        rc = cls.d.stop()
        log = cls.d.read_log()
        cls.d.cleanup()
        assert not sanitizer_report(log), log.decode(errors="replace")
        assert rc == 0, log.decode(errors="replace")

    def run_example(self, env: dict[str, str]) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "example.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(readme_example())
            penv = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}
            penv.update(env, PYTHONPATH=SDK)
            r = subprocess.run([sys.executable, script], env=penv, cwd=tmp,
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def check(self, out: str) -> None:
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^hello from sbx_[0-9a-f]{16}$")
        self.assertEqual(lines[1:], ["written through the API", "got: one", "got: two"])

    def test_over_the_socket(self) -> None:
        self.check(self.run_example({"SANDBOX_ENDPOINT": self.d.unix_endpoint}))

    def test_over_tcp_with_a_token(self) -> None:
        self.check(self.run_example({"SANDBOX_ENDPOINT": self.d.tcp_endpoint,
                                     "SANDBOX_TOKEN": TOKEN}))
        # the example's sandboxes were deleted at the end of its with block
        from sandboxd import Client
        with Client(self.d.unix_endpoint) as c:
            states = {s.state for s in c.list_sandboxes(labels={"example": "readme"})}
            self.assertEqual(states, {"terminated"})


if __name__ == "__main__":
    unittest.main()
