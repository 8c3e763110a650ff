#!/usr/bin/env python3
"""The Python half of tests/images/registry.sh (standard library and the openssl command only).

  fixture.py layer OUT.tar SPEC...      a layer tar with exactly the entries named:
                                        d:PATH:MODE, f:PATH:MODE:CONTENT, e:PATH (an empty
                                        file: whiteouts); owner root, mtime 0
  fixture.py index LAYOUT TAG REF:ARCH...
                                        an OCI image index in LAYOUT, tagged TAG, over the
                                        manifests tagged REF (one per architecture), in order
  fixture.py manifest-field JSON-FILE EXPR
                                        prints layers[-1].digest and the like ("layer:-1")
  fixture.py kid CERT.pem               the libtrust key ID docker-registry looks a token's
                                        signing key up by
  fixture.py token-server DIR           the token server of the token-auth registry
"""
import base64
import hashlib
import http.server
import io
import json
import os
import secrets
import subprocess
import sys
import tarfile
import time
import urllib.parse


def layer(out, specs):
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for spec in specs:
            kind, rest = spec.split(":", 1)
            if kind == "e":
                path, mode, content = rest, "0644", ""
            else:
                parts = rest.split(":", 2)
                path, mode = parts[0], parts[1]
                content = parts[2] if len(parts) > 2 else ""
            info = tarfile.TarInfo(path.lstrip("/"))
            info.mode = int(mode, 8)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            if kind == "d":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                data = content.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def blob_path(layout, digest):
    algo, hexd = digest.split(":", 1)
    return os.path.join(layout, "blobs", algo, hexd)


def index(layout, tag, refs):
    with open(os.path.join(layout, "index.json")) as f:
        top = json.load(f)
    by_name = {}
    for d in top["manifests"]:
        name = d.get("annotations", {}).get("org.opencontainers.image.ref.name")
        by_name[name] = d
    entries = []
    for ref in refs:
        name, arch = ref.split(":")
        d = dict(by_name[name])
        d.pop("annotations", None)
        d["platform"] = {"architecture": arch, "os": "linux"}
        entries.append(d)
    idx = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": entries,
    }
    raw = json.dumps(idx, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    with open(blob_path(layout, digest), "wb") as f:
        f.write(raw)
    top["manifests"].append({
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "digest": digest,
        "size": len(raw),
        "annotations": {"org.opencontainers.image.ref.name": tag},
    })
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(top, f)


def manifest_field(path, expr):
    with open(path) as f:
        m = json.load(f)
    what, arg = expr.split(":")
    if what == "layer":
        print(m["layers"][int(arg)]["digest"])
    elif what == "size":
        print(m["layers"][int(arg)]["size"])
    elif what == "index":
        print(m["manifests"][int(arg)]["digest"])
    else:
        sys.exit("manifest-field: unknown " + expr)


def kid(cert):
    # libtrust's key ID: base32 of the first 240 bits of the sha256 of the public key's DER
    # SubjectPublicKeyInfo, in 12 groups of 4 joined by ':'.
    der = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-pubkey"],
                         check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=der,
                         check=True, capture_output=True).stdout
    s = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
    return ":".join(s[i:i + 4] for i in range(0, len(s), 4))


def b64url(b):
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


class TokenHandler(http.server.BaseHTTPRequestHandler):
    conf = {}

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def record(self, line):
        with open(self.conf["log"], "a") as f:
            f.write(line + "\n")

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        scopes = q.get("scope", [])
        if url.path != "/token":
            self.record("GET %s -> 404" % self.path)
            return self.answer(404, {"errors": [{"code": "NOT_FOUND", "message": "no such"}]})
        if q.get("service", [""])[0] != self.conf["service"]:
            self.record("GET %s -> 400 (service)" % self.path)
            return self.answer(400, {"errors": [{"code": "UNSUPPORTED",
                                                 "message": "unknown service"}]})
        access = []
        for scope in " ".join(scopes).split():
            parts = scope.split(":")
            if len(parts) < 3:
                continue
            kind, name, actions = parts[0], ":".join(parts[1:-1]), parts[-1]
            if name.startswith("private/"):
                self.record("GET %s -> 403 scope=%s" % (self.path, scope))
                return self.answer(403, {"errors": [{
                    "code": "DENIED",
                    "message": "access to %s is denied: a private repository (test token "
                               "server)" % name}]})
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "kid": self.conf["kid"]}
        claims = {"iss": self.conf["issuer"], "sub": "", "aud": self.conf["service"],
                  "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": secrets.token_hex(8), "access": access}
        signing_input = (b64url(json.dumps(header).encode()) + "." +
                         b64url(json.dumps(claims).encode())).encode()
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", self.conf["key"]],
                             input=signing_input, check=True, capture_output=True).stdout
        token = signing_input.decode() + "." + b64url(sig)
        self.record("GET %s -> 200 scope=%s" % (self.path, " ".join(scopes)))
        self.answer(200, {"token": token, "access_token": token, "expires_in": 300,
                          "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))})


def token_server(d):
    TokenHandler.conf = {"kid": kid(os.path.join(d, "token", "cert.pem")),
                         "key": os.path.join(d, "token", "key.pem"),
                         "log": os.path.join(d, "token.log"),
                         "service": "sbx-test", "issuer": "sbx-test-issuer"}
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TokenHandler)
    # the port is written once the socket listens: whoever waits for the file can connect
    tmp = os.path.join(d, "token-server-port.tmp")
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, os.path.join(d, "token-server-port"))
    srv.serve_forever()


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "layer":
        layer(args[0], args[1:])
    elif cmd == "index":
        index(args[0], args[1], args[2:])
    elif cmd == "manifest-field":
        manifest_field(args[0], args[1])
    elif cmd == "kid":
        print(kid(args[0]))
    elif cmd == "token-server":
        token_server(args[0])
    else:
        sys.exit("fixture.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
