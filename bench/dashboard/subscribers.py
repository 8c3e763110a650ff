#!/usr/bin/env python3
"""bench/dashboard/subscribers.py: what idle connections cost a running sandboxd.

Run by bench/dashboard/run.sh against one fresh sandboxd-fake (PID). Opens N idle event-stream
subscribers (GET /v1/events/stream, held open after their first bytes) and N idle keep-alive
connections (one GET /v1/health each, then held open), one kind after the other in ORDER, and
reads sandboxd's memory (/proc/PID/smaps_rollup) before and after each kind; sandboxd is not
touched in between. Then, with every connection still open, it stops and starts a running
sandbox CHANGES times, counts which subscriber received which event, and when, and reads the
memory once more.

Prints one line of key=value words per measurement, for run.sh's results file:
  mem phase=base|sse|idle|after rss=KiB pss=KiB anon=KiB slab=KiB fds=N open_s=S
  fanout0|fanout i=N action=stop|start events=E delivered=D expected=E*N
      persisted_to_first_ms=... persisted_to_last_ms=... first_to_last_ms=...
      sandboxd_cpu_us=... api_ms=...   (fanout0: the same changes before any subscriber)
  closed kind=sse|idle n=N   (connections sandboxd closed before the end; should be 0)
Standard library only (python3 of Debian 12).
"""
import argparse
import asyncio
import json
import os
import re
import sqlite3
import sys
import time

ID_RE = re.compile(rb"(?:^|\n)id: (\d+)\n")


def mem(pid):
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Rss", "Pss", "Anonymous"):
                out[k.lower()] = int(v.split()[0])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    with open("/proc/meminfo") as f:  # the kernel's side, machine-wide: a rough figure
        for line in f:
            if line.startswith("Slab:"):
                out["slab"] = int(line.split()[1])
    return out


def cpu_ns(pid):
    """CPU time of sandboxd's main thread (its loop, where the broadcast runs), in ns."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0])


class Target:
    def __init__(self, args):
        self.unix = args.socket
        self.tcp = args.tcp
        self.auth = ""
        if args.token_file:
            with open(args.token_file) as f:
                self.auth = f"Authorization: Bearer {f.readline().strip()}\r\n"
        if args.header_file:
            with open(args.header_file) as f:
                self.auth += "".join(h.strip() + "\r\n" for h in f if h.strip())

    async def connect(self):
        if self.unix:
            return await asyncio.open_unix_connection(self.unix, limit=1 << 20)
        host, port = self.tcp.rsplit(":", 1)
        return await asyncio.open_connection(host, int(port), limit=1 << 20)

    def request(self, method, path, body=None):
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n{self.auth}"
        if body is not None:
            data = json.dumps(body).encode()
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            return (head + "\r\n").encode() + data
        return (head + "\r\n").encode()


async def read_response(reader):
    """One whole response with a Content-Length; returns (status, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    m = re.search(rb"(?im)^content-length: *(\d+)", head)
    body = await reader.readexactly(int(m.group(1))) if m else b""
    return status, body


class Conn:
    def __init__(self, kind):
        self.kind = kind
        self.reader = self.writer = None
        self.seen = {}  # seq -> time.time() when its id: line arrived
        self.closed = False
        self.task = None

    async def open(self, target):
        self.reader, self.writer = await target.connect()
        if self.kind == "sse":
            self.writer.write(target.request("GET", "/v1/events/stream"))
            head = await self.reader.readuntil(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n", 1)[0]:
                raise RuntimeError(f"event stream answered {head[:80]!r}")
            # the first bytes of the body: retry: 2000 (the stream is subscribed after them)
            first = await self.reader.readuntil(b"retry: 2000\n\n")
            self.scan(first)
        else:
            self.writer.write(target.request("GET", "/v1/health"))
            status, _ = await read_response(self.reader)
            if status != 200:
                raise RuntimeError(f"health answered {status}")
        self.task = asyncio.get_running_loop().create_task(self.follow())

    def scan(self, data):
        now = time.time()
        for m in ID_RE.finditer(data):
            self.seen.setdefault(int(m.group(1)), now)

    async def follow(self):
        tail = b""
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                if self.kind == "sse":
                    buf = tail + data
                    self.scan(buf)
                    tail = buf[-64:]
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            return
        self.closed = True

    def close(self):
        if self.task:
            self.task.cancel()
        if self.writer:
            self.writer.close()


async def open_many(target, kind, n, parallel):
    conns = [Conn(kind) for _ in range(n)]
    sem = asyncio.Semaphore(parallel)

    async def one(c):
        async with sem:
            await c.open(target)

    await asyncio.gather(*(one(c) for c in conns))
    return conns


async def api(target, method, path, body=None):
    reader, writer = await target.connect()
    try:
        writer.write(target.request(method, path, body))
        return await read_response(reader)
    finally:
        writer.close()


def persisted(db, sandbox_id, after):
    """(seq, time_ms) of the sandbox's events after seq AFTER, from the store itself: the
    API's time is whole seconds; the row holds the milliseconds sandboxd stamped before its
    commit."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute(
            "SELECT seq, time FROM events WHERE sandbox_id = ? AND seq > ? ORDER BY seq",
            (sandbox_id, after),
        ).fetchall()
    finally:
        con.close()


async def change(target, args, pid, sandbox_id, i, subs, label):
    """Stops (even I) or starts (odd I) the sandbox and waits until every subscriber in SUBS
    has the events that persisted; prints one line."""
    action = "stop" if i % 2 == 0 else "start"
    rows = persisted(args.db, sandbox_id, 0)
    last = rows[-1][0] if rows else 0
    c0 = cpu_ns(pid)
    t0 = time.monotonic()
    status, body = await api(target, "POST", f"/v1/sandboxes/{args.sandbox}/{action}", {})
    api_ms = (time.monotonic() - t0) * 1000
    c1 = cpu_ns(pid)
    if status != 200:
        sys.exit(f"{action} answered {status}: {body[:200]!r}")
    events = persisted(args.db, sandbox_id, last)
    if not events:
        sys.exit(f"{action}: no event was persisted")
    seqs = [s for s, _ in events]
    end = time.monotonic() + 10
    while subs and time.monotonic() < end:
        if all(all(s in c.seen for s in seqs) for c in subs):
            break
        await asyncio.sleep(0.005)
    delivered = sum(1 for c in subs for s in seqs if s in c.seen)
    # the change's first event: persisted (sandboxd's clock, ms) to received, by the first
    # and by the last subscriber
    s0, ms0 = events[0]
    got = [c.seen[s0] * 1000 for c in subs if s0 in c.seen]
    first, lastt = (min(got) - ms0, max(got) - ms0) if got else (0.0, 0.0)
    print(f"{label} i={i + 1} action={action} events={len(seqs)} delivered={delivered}",
          f"expected={len(seqs) * len(subs)} persisted_to_first_ms={first:.1f}",
          f"persisted_to_last_ms={lastt:.1f} first_to_last_ms={lastt - first:.1f}",
          f"sandboxd_cpu_us={(c1 - c0) / 1000:.0f} api_ms={api_ms:.1f}", flush=True)


async def wait_stable(pid, want_fds, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if mem(pid)["fds"] >= want_fds:
            return True
        await asyncio.sleep(0.05)
    return False


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket")
    p.add_argument("--tcp")
    p.add_argument("--token-file")
    p.add_argument("--header-file", help="request headers, one a line (a secret: not in argv)")
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--order", default="sse,idle")
    p.add_argument("--sandbox", required=True, help="a running sandbox to stop and start")
    p.add_argument("--changes", type=int, default=10)
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--parallel", type=int, default=64)
    args = p.parse_args()
    target = Target(args)
    pid = args.pid

    def out(*words):
        print(" ".join(str(w) for w in words), flush=True)

    def mem_line(phase, open_s=0.0):
        m = mem(pid)
        out(f"mem phase={phase} rss={m['rss']} pss={m['pss']} anon={m['anonymous']}",
            f"slab={m['slab']} fds={m['fds']} open_s={open_s:.2f}")
        return m

    # warm-up: every path once (a stream and a keep-alive connection opened and closed, the
    # sandbox read), so first-use allocations are not counted as per-connection cost
    status, body = await api(target, "GET", f"/v1/sandboxes/{args.sandbox}")
    if status != 200:
        sys.exit(f"GET /v1/sandboxes/{args.sandbox} answered {status}: {body[:200]!r}")
    sandbox_id = json.loads(body)["id"]
    for kind in ("sse", "idle"):
        for c in await open_many(target, kind, 4, 4):
            c.close()
    for i in range(args.changes):
        await change(target, args, pid, sandbox_id, i, [], "fanout0")
    await asyncio.sleep(args.settle)
    base = mem_line("base")

    held = {}
    fds = base["fds"]
    for kind in args.order.split(","):
        t0 = time.monotonic()
        held[kind] = await open_many(target, kind, args.n, args.parallel)
        fds += args.n
        if not await wait_stable(pid, fds):
            sys.exit(f"sandboxd holds {mem(pid)['fds']} fds, expected {fds}")
        t = time.monotonic() - t0
        await asyncio.sleep(args.settle)
        mem_line(kind, t)

    for i in range(args.changes):
        await change(target, args, pid, sandbox_id, i, held.get("sse", []), "fanout")
    # the same connections after the events: what a subscriber keeps once it has had some
    await asyncio.sleep(args.settle)
    mem_line("after")

    for kind, conns in held.items():
        out(f"closed kind={kind} n={sum(1 for c in conns if c.closed)}")
    for conns in held.values():
        for c in conns:
            c.close()
    await asyncio.sleep(0.1)


if __name__ == "__main__":
    asyncio.run(main())
