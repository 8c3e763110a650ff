"""Starts the daemons under test from the build tree, like tests/lib/harness.c does: a private
directory under $SANDBOX_TEST_TMP, the startup line waited for, and at the end the daemon
stopped, whatever it left (fake agents, VMMs) killed and the directory removed.

Binaries come from the environment CTest gives (tests/sdk/CMakeLists.txt): $SANDBOXD_FAKE,
$SANDBOXD, $SANDBOX_GUESTD (sandbox-guestd-host, the fake backend's agent) and
$SANDBOX_VM_BUNDLE for real VMs. A missing one skips the tests that need it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

TOKEN = "sdk-python-test-token-0123456789"


def need_env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise unittest.SkipTest(f"${name} is not set (run through ctest)")
    return value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tmpdir() -> str:
    base = os.environ.get("SANDBOX_TEST_TMP") or os.environ.get("TMPDIR") or "/tmp"
    os.makedirs(base, mode=0o700, exist_ok=True)
    return tempfile.mkdtemp(prefix="sbxtest.", dir=base)


def make_certs(d: str) -> bool:
    """A test CA and a server certificate for localhost and 127.0.0.1 (as harness_make_certs)."""
    if shutil.which("openssl") is None:
        return False
    script = (
        "umask 077 && "
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
        "-keyout ca.key -out ca.pem -days 2 -subj /CN=sandboxd-sdk-test-ca && "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
        "-keyout server.key -out server.csr -subj /CN=localhost && "
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext && "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 2 -extfile san.ext")
    with open(os.path.join(d, "openssl.log"), "wb") as log:
        return subprocess.run(["sh", "-c", script], cwd=d, stdout=log,
                              stderr=subprocess.STDOUT).returncode == 0


class Daemon:
    """One sandboxd (or sandboxd-fake) with a unix socket and a TCP listener with a token:
    with tls=True (when openssl can make certificates) that listener speaks TLS with a
    certificate of a private CA (self.ca); sandboxd has one --listen."""

    def __init__(self, binary: str, *, extra: list[str] | None = None,
                 env: dict[str, str] | None = None, tls: bool = False,
                 vm_bundle: str | None = None) -> None:
        self.dir = _tmpdir()
        self.state = os.path.join(self.dir, "state")
        self.sock = os.path.join(self.dir, "api.sock")
        self.log = os.path.join(self.dir, "daemon.log")
        self.token_file = os.path.join(self.dir, "token")
        with open(os.open(self.token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(TOKEN + "\n")
        self.port = free_port()
        args = [binary, "--state-dir", self.state, "--socket", self.sock,
                "--listen", f"127.0.0.1:{self.port}", "--token-file", self.token_file]
        self.tls = False
        self.ca = ""
        if tls:
            pki = os.path.join(self.dir, "pki")
            os.mkdir(pki, 0o700)
            if make_certs(pki):
                self.tls = True
                self.ca = os.path.join(pki, "ca.pem")
                args += ["--tls-cert", os.path.join(pki, "server.pem"),
                         "--tls-key", os.path.join(pki, "server.key")]
        if vm_bundle:
            # hard links to the bundle's kernel, initramfs and disks, as harness_start_vm
            os.mkdir(self.state, 0o700)
            for sub in ("vm", "images"):
                subprocess.run(["cp", "-al", os.path.join(vm_bundle, sub),
                                os.path.join(self.state, sub)], check=True)
            args += ["--accel", "tcg", "--default-image", "busybox", "--egress", "off"]
        args += ["--capacity-cpus", "4096", "--capacity-memory-mb", "16777216",
                 "--capacity-disk-mb", "1073741824"]
        args += extra or []
        penv = dict(os.environ)
        for k in ("SANDBOX_ENDPOINT", "SANDBOX_TOKEN", "SANDBOX_CA"):
            penv.pop(k, None)
        penv.update(env or {})
        self._logf = open(self.log, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._logf,
                                     stderr=subprocess.STDOUT, env=penv)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if b"serving API v1" in self.read_log():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        log = self.read_log().decode(errors="replace")
        self.stop(signal.SIGKILL)
        self.cleanup()
        raise RuntimeError(f"{binary} did not start:\n{log}")

    @property
    def unix_endpoint(self) -> str:
        return f"unix://{self.sock}"

    @property
    def tcp_endpoint(self) -> str:
        if self.tls:
            return f"https://localhost:{self.port}"
        return f"http://127.0.0.1:{self.port}"

    def read_log(self) -> bytes:
        try:
            with open(self.log, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stops the daemon; its exit code (128 + signal when a signal ended it)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self._logf.close()
        return rc if rc >= 0 else 128 - rc

    def _leftovers(self) -> list[int]:
        """Processes that carry this daemon's marker (fake agents, VMMs)."""
        marker = f"SANDBOXD_STATE_DIR={self.state}".encode()
        pids = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        pids.append(int(name))
            except OSError:
                continue
        return pids

    def cleanup(self) -> list[int]:
        """Kills what outlived the daemon (returns their pids) and removes the directory."""
        left = self._leftovers()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not os.environ.get("HARNESS_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)
        return left


def sanitizer_report(log: bytes) -> str | None:
    for needle in (b"ERROR: AddressSanitizer", b"ERROR: LeakSanitizer", b"runtime error:"):
        if needle in log:
            return log.decode(errors="replace")[-4000:]
    return None
