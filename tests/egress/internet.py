#!/usr/bin/env python3
"""The egress tests' "internet", run inside NAME-inet (tests/egress/netns.sh). Standard library
only, plus the openssl tool for the certificates.

  internet.py certs DIR   a test CA (DIR/ca.pem) and a certificate per name below, signed by
                          it (DIR/NAME.pem, DIR/NAME.key), and one for clients that send no
                          name (DIR/nosni.pem: the address 203.0.113.10)
  internet.py serve DIR   the servers, until killed:
    HTTP  0.0.0.0:80    answers "host=HOST path=PATH" (the Host it got), keep-alive;
                        /big?n=BYTES sends BYTES bytes; /slow?secs=S sends 64 bytes every
                        0.1 s for S seconds (Content-Length says the whole)
    TLS   0.0.0.0:443   the certificate of the SNI name it got, then the same HTTP answers
                        with "sni=NAME " in front ("sni=-" without one)
    TCP   0.0.0.0:22    a banner line, as an ssh server sends first
    DNS   203.0.113.53:53/udp  A records from DIR/records ("NAME ADDRESS" a line, read again
                        for every query; written with the defaults when absent), NXDOMAIN
                        for other names, an empty answer for other types of known names;
                        every query it receives is appended to DIR/dns.log as
                        "SOURCE NAME TYPE"
  Requests go to DIR/http.log ("SCHEME SNI HOST PATH SOURCE" a line). DIR/ready appears once
  everything listens.
"""

import http.server
import os
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.parse

# example.org: the name the docs run `sandbox-cli run --allow` with; api.anthropic.com: the API
# host `sandbox-cli agent claude` puts on its sandbox's allowlist (its stub agent calls it)
NAMES = ["allowed.test", "also.test", "gist.hub.test", "api.hub.test", "other.test", "loopy.test",
         "example.org", "api.anthropic.com"]
WEB = "203.0.113.10"
DNS = "203.0.113.53"
DEFAULT_RECORDS = [(n, WEB) for n in NAMES if n != "loopy.test"] + [("loopy.test", "127.0.0.1")]

log_lock = threading.Lock()


def append(path, line):
    with log_lock:
        with open(path, "a") as f:
            f.write(line + "\n")


def run_openssl(dir, *args):
    subprocess.run(["openssl", *args], cwd=dir, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_certs(dir):
    os.makedirs(dir, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run_openssl(dir, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                "-subj", "/CN=sandboxd egress test CA")
    for name, san in [(n, "DNS:" + n) for n in NAMES] + [("nosni", "IP:" + WEB)]:
        with open(os.path.join(dir, name + ".ext"), "w") as f:
            f.write("subjectAltName=%s\n" % san)
        run_openssl(dir, "req", *ec, "-keyout", name + ".key", "-out", name + ".csr",
                    "-subj", "/CN=" + name)
        run_openssl(dir, "x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey",
                    "ca.key", "-CAcreateserial", "-out", name + ".pem", "-days", "2",
                    "-extfile", name + ".ext")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "internet-test"

    def log_message(self, fmt, *args):
        pass

    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        # curl -sI: logged like a GET, answered with the head alone
        sni = getattr(self.server, "sni_of", lambda c: None)(self.connection)
        host = self.headers.get("Host", "-")
        append(self.server.http_log, "%s %s %s %s %s" % (
            self.server.scheme, sni or "-", host, self.path, self.client_address[0]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        sni = getattr(self.server, "sni_of", lambda c: None)(self.connection)
        host = self.headers.get("Host", "-")
        append(self.server.http_log, "%s %s %s %s %s" % (
            self.server.scheme, sni or "-", host, self.path, self.client_address[0]))
        if url.path == "/big":
            n = int(query.get("n", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * 65536
            while n > 0:
                k = min(n, len(chunk))
                self.wfile.write(chunk[:k])
                n -= k
            return
        if url.path == "/slow":
            ticks = int(float(query.get("secs", ["1"])[0]) * 10)
            self.send_response(200)
            self.send_header("Content-Length", str(64 * ticks))
            self.end_headers()
            for _ in range(ticks):
                self.wfile.write(b"y" * 63 + b"\n")
                self.wfile.flush()
                time.sleep(0.1)
            return
        prefix = ("sni=%s " % (sni or "-")) if self.server.scheme == "https" else ""
        self.answer(("%shost=%s path=%s\n" % (prefix, host, self.path)).encode())


class Web(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port, dir):
        self.scheme = "http"
        self.http_log = os.path.join(dir, "http.log")
        super().__init__(("0.0.0.0", port), Handler)


class TlsWeb(Web):
    """The handshake runs in the connection's thread, so a client that stalls in it holds up
    nobody else."""

    def __init__(self, port, dir):
        super().__init__(port, dir)
        self.scheme = "https"
        self.names = {}
        self.contexts = {}
        for n in NAMES:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(os.path.join(dir, n + ".pem"), os.path.join(dir, n + ".key"))
            self.contexts[n] = ctx
        self.default = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.default.load_cert_chain(os.path.join(dir, "nosni.pem"),
                                     os.path.join(dir, "nosni.key"))
        self.default.sni_callback = self.pick
        self.seen = {}
        self.seen_lock = threading.Lock()

    def pick(self, sock, name, _ctx):
        with self.seen_lock:
            self.seen[id(sock)] = name
        if name in self.contexts:
            sock.context = self.contexts[name]
        return None

    def sni_of(self, conn):
        with self.seen_lock:
            return self.seen.get(id(conn))

    def shutdown_request(self, request):
        # close_notify first: a client can tell a finished answer from a cut one
        if isinstance(request, ssl.SSLSocket):
            try:
                request.unwrap()
            except (OSError, ssl.SSLError, ValueError):
                pass
        super().shutdown_request(request)

    def process_request_thread(self, request, client_address):
        try:
            request.settimeout(30)
            tls = self.default.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            self.shutdown_request(request)
            return
        try:
            super().process_request_thread(tls, client_address)
        finally:
            with self.seen_lock:
                self.seen.pop(id(tls), None)


class Banner(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.sendall(b"SSH-2.0-internet-test\r\n")

    def __init__(self, port):
        super().__init__(("0.0.0.0", port), Banner.Handler)


def read_records(path):
    records = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    records.setdefault(parts[0].lower().rstrip("."), []).append(parts[1])
    except FileNotFoundError:
        pass
    return records


def parse_question(packet):
    """(id, flags, name, qtype, end of the question) of a query, or None."""
    if len(packet) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if qdcount != 1 or flags & 0x8000:
        return None
    labels, i = [], 12
    while True:
        if i >= len(packet):
            return None
        n = packet[i]
        i += 1
        if n == 0:
            break
        if n > 63 or i + n > len(packet):
            return None
        labels.append(packet[i:i + n].decode("ascii", "replace"))
        i += n
    if i + 4 > len(packet):
        return None
    qtype, _qclass = struct.unpack("!HH", packet[i:i + 4])
    return qid, flags, ".".join(labels).lower(), qtype, i + 4


def dns_answer(packet, records):
    q = parse_question(packet)
    if not q:
        return None, None, None
    qid, flags, name, qtype, end = q
    known = name in records
    answers = []
    if known and qtype == 1:
        for addr in records[name]:
            answers.append(struct.pack("!HHHIH", 0xC00C, 1, 1, 5, 4) + socket.inet_aton(addr))
    rcode = 0 if known else 3
    # QR, the query's opcode and RD, AA and RA
    out_flags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode
    head = struct.pack("!HHHHHH", qid, out_flags, 1, len(answers), 0, 0)
    return head + packet[12:end] + b"".join(answers), name, qtype


def serve_dns(dir):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((DNS, 53))
    records_path = os.path.join(dir, "records")
    log = os.path.join(dir, "dns.log")

    def loop():
        while True:
            packet, peer = sock.recvfrom(4096)
            reply, name, qtype = dns_answer(packet, read_records(records_path))
            append(log, "%s %s %s" % (peer[0], name if name is not None else "-",
                                      qtype if qtype is not None else "-"))
            if reply:
                sock.sendto(reply, peer)

    threading.Thread(target=loop, daemon=True).start()


def serve(dir):
    records = os.path.join(dir, "records")
    if not os.path.exists(records):
        with open(records, "w") as f:
            f.writelines("%s %s\n" % r for r in DEFAULT_RECORDS)
    servers = [Web(80, dir), TlsWeb(443, dir), Banner(22)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    serve_dns(dir)
    with open(os.path.join(dir, "ready.tmp"), "w") as f:
        f.write("%d\n" % os.getpid())
    os.rename(os.path.join(dir, "ready.tmp"), os.path.join(dir, "ready"))
    threading.Event().wait()


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("certs", "serve"):
        sys.exit("usage: internet.py certs|serve DIR")
    if sys.argv[1] == "certs":
        make_certs(sys.argv[2])
    else:
        serve(sys.argv[2])


if __name__ == "__main__":
    main()
