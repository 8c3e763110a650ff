#!/usr/bin/env python3
"""bench/restore/restorebench.py: the measuring client of bench/restore/run.sh and
bench/suspend/run.sh. Times sandboxd's API (create to first exec, suspend, resume) and, as the
baselines, bare QEMUs it starts itself with the same command line as sandboxd's VMM (paths in
place of the descriptors sandboxd passes): a cold boot, a save of its memory and device state
to a file (QMP migrate to a descriptor) and a restore from it (-incoming), and clones of a
template whose guest RAM is a shared file (memory-backend-file share=on, saved with
x-ignore-shared) restored copy-on-write (share=off). The guest is spoken to over the agent's
socket with sbx-agent/1 (lib/agentproto.h): HELLO, then EXEC true, attached until its EXIT.

Standalone (Python 3.9+, nothing outside the standard library). Every measurement prints one
line of KEY=VALUE words for the run.sh script's raw results."""
import argparse
import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time

MAGIC = b"\xffSBXAGT1"
AP_HELLO, AP_EXEC, AP_STDIN, AP_ATTACH, AP_RELEASE = 0x01, 0x02, 0x03, 0x06, 0x09
AP_HELLO_ACK, AP_RESULT, AP_EXIT = 0x81, 0x82, 0x85
AP_F_EOF = 1
T_NONCE, T_TIME_NS, T_ENTROPY, T_HOSTNAME, T_ROOT_DEV, T_UPPER_DEV = 1, 2, 3, 4, 5, 6
T_UID, T_GID, T_HOME, T_MOUNTED, T_ARG, T_TTY, T_KEEP = 8, 9, 10, 14, 15, 17, 20
T_ERRNO, T_PID = 21, 23
IO_TIMEOUT = 300.0


def die(msg):
    sys.stderr.write("restorebench: %s\n" % msg)
    sys.exit(1)


def ms(t0, t1):
    return "%.1f" % ((t1 - t0) * 1000.0)


def tlv(tag, val):
    if isinstance(val, str):
        val = val.encode()
    return struct.pack(">HI", tag, len(val)) + val


def tlv_find(payload, tag):
    off = 0
    while off + 6 <= len(payload):
        t, n = struct.unpack_from(">HI", payload, off)
        if t == tag:
            return payload[off + 6:off + 6 + n]
        off += 6 + n
    return None


def frame(ftype, chan, payload=b"", flags=0):
    return struct.pack(">BBHII", ftype, flags, 0, chan, len(payload)) + payload


class Chan:
    """One session with a guest agent over its socket (QEMU's virtio-serial chardev)."""

    def __init__(self, path, deadline, proc=None):
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                break
            except OSError:
                s.close()
                if proc is not None and proc.poll() is not None:
                    die("QEMU exited before its agent socket opened")
                if time.monotonic() > deadline:
                    die("the agent socket %s did not open" % path)
                time.sleep(0.002)
        s.settimeout(IO_TIMEOUT)
        self.s = s
        self.buf = b""
        self.next_req = 1

    def close(self):
        self.s.close()

    def fill(self):
        d = self.s.recv(1 << 20)
        if not d:
            die("the agent closed the channel")
        self.buf += d

    def next_frame(self):
        while len(self.buf) < 12:
            self.fill()
        ftype, flags, _, chan, n = struct.unpack_from(">BBHII", self.buf, 0)
        while len(self.buf) < 12 + n:
            self.fill()
        payload = self.buf[12:12 + n]
        self.buf = self.buf[12 + n:]
        return ftype, flags, chan, payload

    def hello(self, hostname="bare"):
        nonce = os.urandom(16)
        p = tlv(T_NONCE, nonce) + tlv(T_TIME_NS, struct.pack(">Q", time.time_ns()))
        p += tlv(T_ENTROPY, os.urandom(32)) + tlv(T_HOSTNAME, hostname)
        p += tlv(T_ROOT_DEV, "/dev/vda") + tlv(T_UPPER_DEV, "/dev/vdb")
        p += tlv(T_UID, struct.pack(">I", 1001)) + tlv(T_GID, struct.pack(">I", 1001))
        p += tlv(T_HOME, "/sandbox/home")
        self.s.sendall(MAGIC + frame(AP_HELLO, 0, p))
        while True:  # everything before the guest's AP_MAGIC is stale
            while MAGIC not in self.buf:
                self.fill()
            self.buf = self.buf[self.buf.index(MAGIC) + len(MAGIC):]
            ftype, _, _, payload = self.next_frame()
            if ftype != AP_HELLO_ACK or tlv_find(payload, T_NONCE) != nonce:
                continue
            if tlv_find(payload, T_MOUNTED) != b"\x01":
                die("the guest did not mount its root")
            return

    def run_true(self):
        """What sandboxd does for POST .../run true: EXEC, ATTACH, stdin closed, EXIT."""
        req = self.next_req
        self.next_req += 1
        p = tlv(T_ARG, "true") + tlv(T_TTY, b"\0") + tlv(T_KEEP, b"\0")
        self.s.sendall(frame(AP_EXEC, req, p))
        while True:
            ftype, _, chan, payload = self.next_frame()
            if ftype == AP_RESULT and chan == req:
                break
        err = tlv_find(payload, T_ERRNO)
        if err and struct.unpack(">I", err)[0] != 0:
            die("EXEC true: errno %d" % struct.unpack(">I", err)[0])
        pid = struct.unpack(">I", tlv_find(payload, T_PID))[0]
        self.s.sendall(frame(AP_ATTACH, pid, struct.pack(">Q", 0)) +
                       frame(AP_STDIN, pid, b"", AP_F_EOF))
        while True:
            ftype, _, chan, payload = self.next_frame()
            if ftype == AP_EXIT and chan == pid:
                break
        if struct.unpack(">i", payload[:4])[0] != 0:
            die("true failed in the guest")
        self.s.sendall(frame(AP_RELEASE, pid))


class Qmp:
    """A QMP client: commands one at a time, events skipped, descriptors passed."""

    def __init__(self, path, deadline):
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    die("the QMP socket %s did not open" % path)
                time.sleep(0.002)
        s.settimeout(IO_TIMEOUT)
        self.s = s
        self.f = s.makefile("rb")
        self.f.readline()  # greeting
        self.cmd("qmp_capabilities")

    def cmd(self, name, args=None, fds=None):
        msg = {"execute": name}
        if args is not None:
            msg["arguments"] = args
        data = json.dumps(msg).encode() + b"\n"
        if fds:
            socket.send_fds(self.s, [data], fds)
        else:
            self.s.sendall(data)
        while True:
            line = self.f.readline()
            if not line:
                die("QMP closed during %s" % name)
            r = json.loads(line)
            if "event" in r:
                continue
            if "error" in r:
                die("QMP %s: %s" % (name, r["error"].get("desc")))
            return r.get("return")

    def close(self):
        self.f.close()
        self.s.close()


def bare_argv(vmm_cmdline, files, vm_dir, mem_mb, backend):
    """sandboxd's VMM command line with paths for its descriptors (its QMP at vm_dir/qmp.sock,
    the agent at vm_dir/ag.sock), the guest RAM as backend ("ram", or "file:PATH:on|off"), and
    mem_mb of it."""
    sets = {}
    for i, w in enumerate(vmm_cmdline):
        if w == "-add-fd":
            kv = dict(x.split("=", 1) for x in vmm_cmdline[i + 1].split(","))
            sets[kv["set"]] = kv.get("opaque", "console")
    out, i = [], 0
    while i < len(vmm_cmdline):
        w = vmm_cmdline[i]
        if w == "-add-fd" or w == "-sandbox":
            i += 2
            continue
        if w == "-object" and vmm_cmdline[i + 1].startswith("memory-backend"):
            i += 2
            continue
        if w in ("-kernel", "-initrd", "-name", "-m"):
            val = {"-kernel": files["kernel"], "-initrd": files["initrd"],
                   "-name": "bare,process=qemu-bare", "-m": str(mem_mb)}[w]
            out += [w, val]
            i += 2
            continue
        if w.startswith("socket,id=") and ",fd=" in w:
            parts = w.split(",")
            cid = parts[1].split("=")[1]
            parts = [p for p in parts if not p.startswith("fd=")]
            parts.insert(2, "path=%s/%s.sock" % (vm_dir, cid))
            w = ",".join(parts)
        if "/dev/fdset/" in w:
            head, tail = w.split("/dev/fdset/", 1)
            num = "".join(c for c in tail if c.isdigit())
            rest = tail[len(num):]
            name = sets.get(num)
            path = {"root": files["rootfs"], "blank": files["blank"],
                    "upper": vm_dir + "/upper.qcow2",
                    "console": vm_dir + "/console.log"}.get(name)
            if path is None:
                die("unknown descriptor set %s (%s) in sandboxd's VMM command line" % (num, name))
            w = head + path + rest
        if "memory-backend=" in w:  # sandboxd's own RAM backend: replaced below
            w = ",".join(p for p in w.split(",") if not p.startswith("memory-backend="))
        out.append(w)
        i += 1
    for w in out:
        if "/proc/self/fd" in w or "/dev/fdset" in w or ",fd=" in w:
            die("sandboxd's VMM command line changed; cannot map %s" % w)
    if backend == "ram":
        obj = "memory-backend-ram,id=mem,size=%dM" % mem_mb
    else:
        _, path, share = backend.split(":")
        obj = "memory-backend-file,id=mem,size=%dM,mem-path=%s,share=%s" % (mem_mb, path, share)
    out += ["-object", obj, "-machine", "memory-backend=mem"]
    # a restored guest runs at once (sandboxd's VMM has this since suspend, issue 16)
    if "migration.store-global-state=off" not in out:
        out += ["-global", "migration.store-global-state=off"]
    if not any(w.startswith("socket,id=qmp,") for w in out):
        die("no QMP chardev 'qmp' in sandboxd's VMM command line")
    return out


def pss_kib(pid):
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def rss_kib(pid):
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Rss:"):
                return int(line.split()[1])
    return 0


class Bare:
    """A bare QEMU in vm_dir: started, spoken to, saved, ended."""

    def __init__(self, args, vm_dir, backend, incoming=None, ignore_shared=False,
                 upper_from=None):
        self.dir = vm_dir
        os.makedirs(vm_dir, exist_ok=True)
        upper = vm_dir + "/upper.qcow2"
        if upper_from:
            shutil.copyfile(upper_from, upper)
        elif not os.path.exists(upper):
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                            args.files["blank"], upper], check=True)
        argv = bare_argv(args.vmm, args.files, vm_dir, args.mem_mb, backend)
        self.incoming_fd = None
        if incoming:
            self.incoming_fd = os.open(incoming, os.O_RDONLY | os.O_CLOEXEC)
            argv += ["-incoming", "defer" if ignore_shared else "fd:%d" % self.incoming_fd]
        self.log = open(vm_dir + "/qemu.log", "wb")
        for s in ("ag.sock", "qmp.sock"):
            try:
                os.unlink(vm_dir + "/" + s)
            except FileNotFoundError:
                pass
        self.t_spawn = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     pass_fds=(self.incoming_fd,) if incoming else (),
                                     env=dict(os.environ, SANDBOXD_RESTOREBENCH_DIR=args.work))
        self.qmp = None
        self.deferred = bool(incoming and ignore_shared)

    def incoming_start(self):
        """With -incoming defer: x-ignore-shared, then the restore from the file (QEMU reads
        it while this returns; started for each clone in turn, once all were spawned)."""
        if not self.deferred:
            return
        self.qmp = Qmp(self.dir + "/qmp.sock", time.monotonic() + 60)
        self.qmp.cmd("migrate-set-capabilities", {"capabilities": [
            {"capability": "x-ignore-shared", "state": True}]})
        self.qmp.cmd("migrate-incoming", {"uri": "fd:%d" % self.incoming_fd})

    def first_exec(self):
        """Connects to the agent (retrying), HELLO, runs true: the times from the spawn."""
        c = Chan(self.dir + "/ag.sock", time.monotonic() + IO_TIMEOUT, self.proc)
        c.hello()
        t_ack = time.monotonic()
        c.run_true()
        t_run = time.monotonic()
        self.chan = c
        return t_ack, t_run

    def save(self, path, ignore_shared=False):
        """stop, migrate to a descriptor of path until completed, quit: the seconds it took
        and the bytes written."""
        if self.qmp is None:
            self.qmp = Qmp(self.dir + "/qmp.sock", time.monotonic() + 60)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        t0 = time.monotonic()
        if ignore_shared:
            self.qmp.cmd("migrate-set-capabilities", {"capabilities": [
                {"capability": "x-ignore-shared", "state": True}]})
        # no bandwidth limit (QEMU's default is 32 MiB/s), as sandboxd saves
        self.qmp.cmd("migrate-set-parameters", {"max-bandwidth": 1 << 40})
        self.qmp.cmd("stop")
        self.qmp.cmd("getfd", {"fdname": "state"}, fds=[fd])
        os.close(fd)
        self.qmp.cmd("migrate", {"uri": "fd:state"})
        while True:
            st = self.qmp.cmd("query-migrate")
            if st.get("status") == "completed":
                break
            if st.get("status") in ("failed", "cancelled"):
                die("migration %s: %s" % (st.get("status"), st.get("error-desc")))
            time.sleep(0.001)
        t1 = time.monotonic()
        self.quit()
        return t1 - t0, os.path.getsize(path)

    def quit(self):
        try:
            if self.qmp is None:
                self.qmp = Qmp(self.dir + "/qmp.sock", time.monotonic() + 10)
            self.qmp.cmd("quit")
        except SystemExit:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.qmp:
            self.qmp.close()
        if getattr(self, "chan", None):
            self.chan.close()
        if self.incoming_fd is not None:
            os.close(self.incoming_fd)
        self.log.close()


# ---- sandboxd's API over its unix socket ----

class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=IO_TIMEOUT)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(IO_TIMEOUT)
        self.sock.connect(self.path)


def api(sock, method, path, body=None, want=None):
    c = UnixHTTP(sock)
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=hdrs)
    r = c.getresponse()
    data = r.read()
    c.close()
    if want is not None and r.status != want:
        die("%s %s: %d %s" % (method, path, r.status, data[:300].decode(errors="replace")))
    return json.loads(data) if data else None


def sbx_create_run(sock, body):
    """POST /v1/sandboxes, then POST .../run true: the times (ms) and the sandbox."""
    t0 = time.monotonic()
    sb = api(sock, "POST", "/v1/sandboxes", body, 201)
    t1 = time.monotonic()
    if sb.get("state") != "running":
        die("the sandbox did not come up: %s" % sb.get("reason"))
    r = api(sock, "POST", "/v1/sandboxes/%s/run" % sb["id"], {"argv": ["true"]}, 200)
    t2 = time.monotonic()
    if r.get("exit_code") != 0:
        die("true failed: %s" % r)
    return t0, t1, t2, sb


# ---- the measurements (one line each) ----

def cmd_bare_cold(args):
    d = "%s/cold-%d" % (args.work, os.getpid())
    b = Bare(args, d, "ram")
    t_ack, t_run = b.first_exec()
    line = "total_ms=%s ready_ms=%s" % (ms(b.t_spawn, t_run), ms(b.t_spawn, t_ack))
    time.sleep(args.hold)
    line += " pss_kib=%d rss_kib=%d" % (pss_kib(b.proc.pid), rss_kib(b.proc.pid))
    b.quit()
    shutil.rmtree(d)
    print(line, flush=True)


def cmd_bare_saverestore(args):
    """Boot, save to a file (RAM in the stream), restore from it: the save's and the
    restore-to-first-exec's times, the file's size, the restored VMM's PSS."""
    d = "%s/sr-%d" % (args.work, os.getpid())
    state = d + "/state.mig"
    b = Bare(args, d, "ram")
    b.first_exec()
    if args.touch_mb:
        c = b.chan
        # the guest's RAM in use, as a sandbox's would be (a tmpfs file of touch_mb)
        run_sh(c, "dd if=/dev/urandom of=/dev/shm/fill bs=1M count=%d 2>/dev/null" % args.touch_mb)
    time.sleep(args.hold)
    save_s, size = b.save(state)
    r = Bare(args, d, "ram", incoming=state)
    t_ack, t_run = r.first_exec()
    line = "save_ms=%.1f state_mib=%.1f restore_ms=%s restore_ready_ms=%s" % (
        save_s * 1000, size / 1048576.0, ms(r.t_spawn, t_run), ms(r.t_spawn, t_ack))
    time.sleep(args.hold)
    line += " pss_kib=%d rss_kib=%d" % (pss_kib(r.proc.pid), rss_kib(r.proc.pid))
    r.quit()
    shutil.rmtree(d)
    print(line, flush=True)


def run_sh(c, script):
    """Runs sh -c script in the guest over chan c, waiting for its exit."""
    req = c.next_req
    c.next_req += 1
    p = tlv(T_ARG, "sh") + tlv(T_ARG, "-c") + tlv(T_ARG, script) + tlv(T_TTY, b"\0")
    c.s.sendall(frame(AP_EXEC, req, p + tlv(T_KEEP, b"\0")))
    while True:
        ftype, _, chan, payload = c.next_frame()
        if ftype == AP_RESULT and chan == req:
            break
    pid = struct.unpack(">I", tlv_find(payload, T_PID))[0]
    c.s.sendall(frame(AP_ATTACH, pid, struct.pack(">Q", 0)) + frame(AP_STDIN, pid, b"", AP_F_EOF))
    while True:
        ftype, _, chan, payload = c.next_frame()
        if ftype == AP_EXIT and chan == pid:
            break
    c.s.sendall(frame(AP_RELEASE, pid))


def cmd_bare_template(args):
    """A template booted once with its RAM a shared file and saved with x-ignore-shared; then
    n clones restored at once from it, copy-on-write (share=off): until all ran true, and the
    PSS of each."""
    tdir = "%s/template" % args.work
    ram = "%s/restorebench-%d.ram" % (args.ram_dir, os.getpid())
    state = tdir + "/state.mig"
    t = Bare(args, tdir, "file:%s:on" % ram)
    t.first_exec()
    time.sleep(args.hold)
    save_s, size = t.save(state, ignore_shared=True)
    print("template save_ms=%.1f state_kib=%.0f ram_mib=%.0f" % (
        save_s * 1000, size / 1024.0, os.path.getsize(ram) / 1048576.0), flush=True)
    for n in args.clones:
        clones = []
        t0 = time.monotonic()
        for i in range(n):  # all spawned first: their QEMUs start side by side
            clones.append(Bare(args, "%s/clone-%d" % (args.work, i), "file:%s:off" % ram,
                               incoming=state, ignore_shared=True,
                               upper_from=tdir + "/upper.qcow2"))
        for c in clones:
            c.incoming_start()
        times = []
        for c in clones:  # each connects while the others restore
            times.append(c.first_exec()[1])
        t_all = time.monotonic()
        time.sleep(args.hold)
        pss = [pss_kib(c.proc.pid) for c in clones]
        rss = [rss_kib(c.proc.pid) for c in clones]
        print("clones n=%d all_ms=%s first_ms=%s pss_kib=%s rss_kib=%s" % (
            n, ms(t0, t_all), ms(t0, min(times)), ",".join(map(str, pss)),
            ",".join(map(str, rss))), flush=True)
        for c in clones:
            c.quit()
            shutil.rmtree(c.dir)
    os.unlink(ram)
    shutil.rmtree(tdir)


def cmd_sbx_create(args):
    body = json.loads(args.body)
    t0, t1, t2, sb = sbx_create_run(args.sock, body)
    line = "id=%s total_ms=%s create_ms=%s first_run_ms=%s" % (
        sb["id"], ms(t0, t2), ms(t0, t1), ms(t1, t2))
    if args.hold:
        time.sleep(args.hold)
    if args.vms:
        try:
            with open("%s/%s/vm.json" % (args.vms, sb["id"])) as f:
                pid = json.load(f).get("pid")
            line += " pss_kib=%d rss_kib=%d" % (pss_kib(pid), rss_kib(pid))
        except (OSError, ValueError, TypeError):
            pass
    if not args.keep:
        api(args.sock, "DELETE", "/v1/sandboxes/%s" % sb["id"], None, 204)
    print(line, flush=True)


def cmd_sbx_claims(args):
    """n creates in flight at once (threads), each create's latency: for pool claims."""
    import threading
    body = json.loads(args.body)
    lat, ids, errs = [], [], []
    lock = threading.Lock()

    def one():
        try:
            t0 = time.monotonic()
            sb = api(args.sock, "POST", "/v1/sandboxes", body, 201)
            t1 = time.monotonic()
            with lock:
                lat.append((t1 - t0) * 1000.0)
                ids.append(sb["id"])
        except SystemExit as e:
            with lock:
                errs.append(str(e))
    threads = [threading.Thread(target=one) for _ in range(args.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat.sort()
    if lat:
        q = lambda p: lat[min(len(lat) - 1, max(0, int(len(lat) * p + 0.999999) - 1))]
        print("claims n=%d ok=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f ids=%s" % (
            args.n, len(lat), q(0.5), q(0.99), lat[-1], ",".join(ids)), flush=True)
    else:
        print("claims n=%d ok=0" % args.n, flush=True)


def cmd_sbx_suspend(args):
    """A sandbox of mem_mb with touch_mb of its RAM in use: suspend, then resume and run true."""
    t0, t1, t2, sb = sbx_create_run(args.sock, json.loads(args.body))
    sid = sb["id"]
    if args.touch_mb:
        r = api(args.sock, "POST", "/v1/sandboxes/%s/run" % sid, {"argv": [
            "sh", "-c", "dd if=/dev/urandom of=/dev/shm/fill bs=1M count=%d 2>/dev/null" % args.touch_mb]}, 200)
        if r.get("exit_code") != 0:
            die("filling the guest's memory failed: %s" % r)
    time.sleep(args.hold)
    a = time.monotonic()
    api(args.sock, "POST", "/v1/sandboxes/%s/suspend" % sid, {}, 200)
    b = time.monotonic()
    size = 0
    if args.vms:
        try:
            size = os.path.getsize("%s/%s/state.mig" % (args.vms, sid))
        except OSError:
            pass
    c = time.monotonic()
    api(args.sock, "POST", "/v1/sandboxes/%s/resume" % sid, {}, 200)
    d = time.monotonic()
    r = api(args.sock, "POST", "/v1/sandboxes/%s/run" % sid, {"argv": ["true"]}, 200)
    e = time.monotonic()
    if r.get("exit_code") != 0:
        die("true failed after the resume")
    api(args.sock, "DELETE", "/v1/sandboxes/%s" % sid, None, 204)
    print("id=%s suspend_ms=%s state_mib=%.1f resume_ms=%s resume_run_ms=%s" % (
        sid, ms(a, b), size / 1048576.0, ms(c, d), ms(c, e)), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", default="/tmp/restorebench")
    p.add_argument("--vmm-cmdline", help="a file: sandboxd's VMM's /proc/PID/cmdline")
    p.add_argument("--kernel")
    p.add_argument("--initrd")
    p.add_argument("--rootfs")
    p.add_argument("--blank")
    p.add_argument("--mem-mb", type=int, default=0)
    p.add_argument("--hold", type=float, default=1.0)
    p.add_argument("--touch-mb", type=int, default=0)
    p.add_argument("--ram-dir", default="/dev/shm")
    p.add_argument("--clones", default="1,10")
    p.add_argument("--sock")
    p.add_argument("--vms")
    p.add_argument("--body", default="{}")
    p.add_argument("--keep", action="store_true")
    p.add_argument("-n", type=int, default=100)
    p.add_argument("what", choices=["bare-cold", "bare-saverestore", "bare-template",
                                    "sbx-create", "sbx-claims", "sbx-suspend"])
    args = p.parse_args()
    args.clones = [int(x) for x in args.clones.split(",") if x]
    if args.what.startswith("bare"):
        with open(args.vmm_cmdline, "rb") as f:
            args.vmm = [w.decode() for w in f.read().split(b"\0") if w]
        args.files = {"kernel": args.kernel, "initrd": args.initrd, "rootfs": args.rootfs,
                      "blank": args.blank}
        if not args.mem_mb:
            args.mem_mb = int(args.vmm[args.vmm.index("-m") + 1])
        os.makedirs(args.work, exist_ok=True)
    {"bare-cold": cmd_bare_cold, "bare-saverestore": cmd_bare_saverestore,
     "bare-template": cmd_bare_template, "sbx-create": cmd_sbx_create,
     "sbx-claims": cmd_sbx_claims, "sbx-suspend": cmd_sbx_suspend}[args.what](args)


if __name__ == "__main__":
    main()
