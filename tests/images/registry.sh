#!/bin/sh
# The image tests' registries: Debian's docker-registry on loopback, fed with images built
# here from the busybox root disk (umoci into OCI layouts, skopeo into the registry).
#
#   registry.sh start DIR            a plain registry (no auth, delete enabled) on a free port
#                                    of 127.0.0.1: DIR/port, DIR/registry.pid, DIR/registry.log
#                                    (its access log: one line per request), storage DIR/storage
#   registry.sh populate DIR ROOTFS  builds the test images from ROOTFS (an ext4 root disk),
#                                    pushes them, and writes their digests to DIR/images.env
#   registry.sh token-start DIR      a second docker-registry over the same storage, read-only,
#                                    with the registry's own token auth, and the token server it
#                                    trusts (fixture.py): DIR/token-port, DIR/token.log (one
#                                    line per token request), DIR/token-registry.log
#   registry.sh up DIR ROOTFS        all three, after clearing what a previous run left in DIR
#   registry.sh stop DIR             stops all of them; safe to run twice
#   registry.sh down DIR             stop, then removes DIR (kept when HARNESS_KEEP is set)
#
# The images (NAME:1 on both registries):
#   sbx/hello    busybox + /etc/os-release (ID=sbxhello); Env PATH, GREETING=hello-from-image,
#                HOME=/root and USER=root; WorkingDir /root, User root (sandboxd ignores these)
#   sbx/multi    busybox; /data/a, /data/b, /opt/dir/old, /etc/remove-me; then the whiteouts
#                /data/.wh.a, /etc/.wh.remove-me, the opaque /opt/dir/.wh..wh..opq and
#                /opt/dir/new
#   sbx/index    an OCI index: linux/arm64 first, then linux/amd64 (its /etc/arch-marker says
#                amd64, the other's arm64)
#   sbx/corrupt  like hello with a layer of its own, whose blob in the storage is then
#                overwritten with other bytes of the same length
#   sbx/pair     busybox + a layer of its own (/etc/pair-marker): nobody pulls it before the
#                test of concurrent creates, which counts the fetches of that layer
set -eu

here=$(cd "$(dirname "$0")" && pwd)
helper="python3 $here/fixture.py"

die() {
	echo "registry.sh: $*" >&2
	exit 1
}

need() {
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || die "$t is not installed (scripts/install-deps.sh)"
	done
}

# alive PID: whether PID runs (a zombie does not: once its parent has gone, a container's
# init may never reap it).
alive() {
	[ -r "/proc/$1/stat" ] || return 1
	state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
	[ -n "$state" ] && [ "$state" != Z ]
}

# wait_port LOG PIDFILE: the port the registry writing LOG listens on (it is started on port 0
# and says which one it got), or fails when it exits or takes over 20 s.
wait_port() {
	i=0
	while [ $i -lt 200 ]; do
		port=$(sed -n 's/.*msg="listening on 127\.0\.0\.1:\([0-9]*\)".*/\1/p' "$1" | head -1)
		if [ -n "$port" ]; then
			echo "$port"
			return 0
		fi
		alive "$(cat "$2")" || break
		sleep 0.1
		i=$((i + 1))
	done
	echo "registry.sh: docker-registry did not start; its log ($1):" >&2
	cat "$1" >&2
	return 1
}

# wait_v2 PORT WANT: GET /v2/ answers WANT (200 plain, 401 with token auth).
wait_v2() {
	i=0
	while [ $i -lt 100 ]; do
		code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/v2/" || true)
		[ "$code" = "$2" ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	die "GET http://127.0.0.1:$1/v2/ answered ${code:-nothing}, not $2"
}

# write_config FILE STORAGE READONLY [AUTH]: a registry on a port of its own choosing (port 0:
# it says which in its log), every request logged, READONLY true or false, AUTH a YAML block.
write_config() {
	cat >"$1" <<EOF
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $2
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
    readonly:
      enabled: $3
${4:-}
http:
  addr: 127.0.0.1:0
  secret: sbx-test-not-a-secret
EOF
}

# launch NAME DIR CONFIG: starts docker-registry in the background, detached from the caller's
# stdio (ctest waits for its test's pipes to close).
launch() {
	docker-registry serve "$3" >"$2/$1.log" 2>&1 </dev/null &
	echo $! >"$2/$1.pid"
}

cmd_start() {
	dir=$1
	need docker-registry curl
	mkdir -p "$dir/storage"
	dir=$(cd "$dir" && pwd)
	[ -f "$dir/registry.pid" ] && cmd_stop "$dir"
	write_config "$dir/config.yml" "$dir/storage" false
	launch registry "$dir" "$dir/config.yml"
	port=$(wait_port "$dir/registry.log" "$dir/registry.pid") || {
		cmd_stop "$dir"
		exit 1
	}
	echo "$port" >"$dir/port"
	wait_v2 "$port" 200
	echo "registry.sh: registry on 127.0.0.1:$port (storage $dir/storage)"
}

# push DIR LAYOUT TAG NAME [--all]: copies LAYOUT:TAG to NAME:1 and prints the digest of the
# manifest (or index) the registry now has.
push() {
	# shellcheck disable=SC2086 # the optional flag is one word or none
	skopeo copy -q ${5:-} --dest-tls-verify=false --digestfile "$1/build/digest" \
		"oci:$2:$3" "docker://127.0.0.1:$(cat "$1/port")/$4:1" >&2 ||
		die "skopeo copy of $4 failed"
	cat "$1/build/digest"
}

# manifest DIR NAME REF: the registry's manifest (or index) as a file; prints its path.
manifest() {
	out="$1/build/manifest-$(echo "$2" | tr / -)"
	curl -sf -o "$out" \
		-H 'Accept: application/vnd.oci.image.manifest.v1+json' \
		-H 'Accept: application/vnd.oci.image.index.v1+json' \
		-H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
		"http://127.0.0.1:$(cat "$1/port")/v2/$2/manifests/$3" ||
		die "GET of the manifest $2:$3 failed"
	echo "$out"
}

# image LAYOUT TAG ARCH LAYER...: a new image in LAYOUT with those layers, for linux/ARCH.
# (sh has no local variables: these names are used nowhere else)
image() {
	layout=$1 tag=$2 arch=$3
	shift 3
	umoci new --image "$layout:$tag"
	for tarball in "$@"; do
		umoci raw add-layer --image "$layout:$tag" "$tarball"
	done
	umoci config --image "$layout:$tag" --os linux --architecture "$arch" \
		--config.env PATH=/usr/sbin:/usr/bin:/sbin:/bin
}

cmd_populate() {
	dir=$(cd "$1" && pwd)
	rootfs=$2
	need umoci skopeo debugfs tar python3 curl
	[ -f "$dir/port" ] || die "no registry in $dir (registry.sh start first)"
	[ -f "$rootfs" ] || die "no root disk at $rootfs"
	b=$dir/build
	rm -rf "$b"
	mkdir -p "$b"

	# the busybox tree, without what the root disk has for the VM alone: sandboxd puts
	# /sandbox/home into each image's disk itself
	mkdir "$b/tree"
	debugfs -R "rdump / $b/tree" "$rootfs" >/dev/null 2>&1 || die "debugfs could not read $rootfs"
	mv "$b/tree/lost+found" "$b/tree/sandbox" "$b" 2>/dev/null || true
	[ -x "$b/tree/bin/busybox" ] || die "$rootfs has no /bin/busybox"
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
		-C "$b/tree" -cf "$b/base.tar" .

	$helper layer "$b/hello.tar" d:etc:0755 \
		"f:etc/os-release:0644:ID=sbxhello
PRETTY_NAME=\"sbx hello 1\"
"
	$helper layer "$b/multi1.tar" d:data:0755 f:data/a:0644:a f:data/b:0644:b \
		d:opt:0755 d:opt/dir:0755 f:opt/dir/old:0644:old d:etc:0755 f:etc/remove-me:0644:x
	$helper layer "$b/multi2.tar" d:data:0755 e:data/.wh.a d:etc:0755 e:etc/.wh.remove-me \
		d:opt:0755 d:opt/dir:0755 e:opt/dir/.wh..wh..opq f:opt/dir/new:0644:new
	$helper layer "$b/amd64.tar" d:etc:0755 "f:etc/arch-marker:0644:amd64
"
	$helper layer "$b/arm64.tar" d:etc:0755 "f:etc/arch-marker:0644:arm64
"
	$helper layer "$b/corrupt.tar" d:etc:0755 \
		"f:etc/corrupt-marker:0644:$(head -c 4096 /dev/urandom | od -An -tx1 | tr -d ' \n')
"
	$helper layer "$b/pair.tar" d:etc:0755 "f:etc/pair-marker:0644:pair
"

	l=$b/layout
	umoci init --layout "$l"
	image "$l" hello amd64 "$b/base.tar" "$b/hello.tar"
	umoci config --image "$l:hello" --config.env GREETING=hello-from-image \
		--config.env HOME=/root --config.env USER=root --config.workingdir /root \
		--config.user root
	image "$l" multi amd64 "$b/base.tar" "$b/multi1.tar" "$b/multi2.tar"
	image "$l" arm64 arm64 "$b/base.tar" "$b/arm64.tar"
	image "$l" amd64 amd64 "$b/base.tar" "$b/amd64.tar"
	$helper index "$l" index arm64:arm64 amd64:amd64
	image "$l" corrupt amd64 "$b/base.tar" "$b/corrupt.tar"
	image "$l" pair amd64 "$b/base.tar" "$b/pair.tar"

	# images.env: the digests the test checks against (KEY=VALUE lines). Each is set apart
	# first: a failure in $(...) stops the script only in an assignment.
	hello=$(push "$dir" "$l" hello sbx/hello)
	multi=$(push "$dir" "$l" multi sbx/multi)
	index=$(push "$dir" "$l" index sbx/index --all)
	corrupt_image=$(push "$dir" "$l" corrupt sbx/corrupt)
	pair=$(push "$dir" "$l" pair sbx/pair)
	m=$(manifest "$dir" sbx/hello 1)
	base_layer=$($helper manifest-field "$m" layer:0)
	hello_layer=$($helper manifest-field "$m" layer:-1)
	m=$(manifest "$dir" sbx/index 1)
	arm64=$($helper manifest-field "$m" index:0)
	amd64=$($helper manifest-field "$m" index:1)
	m=$(manifest "$dir" sbx/pair 1)
	pair_layer=$($helper manifest-field "$m" layer:-1)
	m=$(manifest "$dir" sbx/corrupt 1)
	corrupt=$($helper manifest-field "$m" layer:-1)
	env=$b/images.env
	cat >"$env" <<EOF
HELLO_DIGEST=$hello
MULTI_DIGEST=$multi
INDEX_DIGEST=$index
CORRUPT_DIGEST=$corrupt_image
PAIR_DIGEST=$pair
BASE_LAYER=$base_layer
HELLO_LAYER=$hello_layer
INDEX_ARM64_DIGEST=$arm64
INDEX_AMD64_DIGEST=$amd64
PAIR_LAYER=$pair_layer
CORRUPT_LAYER=$corrupt
EOF

	# the corrupt image's own layer: other bytes of the same length, so only its digest can
	# tell (the registry serves the file as it is)
	hex=${corrupt#sha256:}
	data=$dir/storage/docker/registry/v2/blobs/sha256/$(echo "$hex" | cut -c1-2)/$hex/data
	[ -f "$data" ] || die "no blob data at $data"
	size=$(wc -c <"$data")
	head -c "$size" /dev/urandom >"$data.new"
	mv "$data.new" "$data"
	got=$(curl -sf "http://127.0.0.1:$(cat "$dir/port")/v2/sbx/corrupt/blobs/$corrupt" |
		sha256sum | cut -d' ' -f1)
	[ "$got" != "$hex" ] || die "the corrupted blob still matches its digest"

	mv "$env" "$dir/images.env"
	echo "registry.sh: pushed sbx/hello, sbx/multi, sbx/index, sbx/corrupt (corrupted), sbx/pair"
}

cmd_token_start() {
	dir=$(cd "$1" && pwd)
	need docker-registry curl openssl python3
	[ -d "$dir/storage" ] || die "no storage in $dir (registry.sh start first)"
	t=$dir/token
	mkdir -p "$t"
	rm -f "$dir/token-server-port" "$dir/token.log"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$t/key.pem" -out "$t/cert.pem" \
		-days 2 -subj /CN=sbx-test-token >/dev/null 2>&1 || die "openssl could not make a key"

	# the token server first: the registry's config names its address
	python3 "$here/fixture.py" token-server "$dir" >"$dir/token-server.out" 2>&1 </dev/null &
	echo $! >"$dir/token-server.pid"
	i=0
	while [ ! -s "$dir/token-server-port" ]; do
		if ! alive "$(cat "$dir/token-server.pid")" || [ $i -ge 100 ]; then
			cat "$dir/token-server.out" >&2
			die "the token server did not start"
		fi
		sleep 0.1
		i=$((i + 1))
	done
	tport=$(cat "$dir/token-server-port")

	# The same storage, read-only: pulls only, nothing to push twice. The registry checks
	# each token's RS256 signature with the certificate's key, found by the "kid" header.
	write_config "$dir/token-config.yml" "$dir/storage" true "auth:
  token:
    realm: http://127.0.0.1:$tport/token
    service: sbx-test
    issuer: sbx-test-issuer
    rootcertbundle: $t/cert.pem"
	launch token-registry "$dir" "$dir/token-config.yml"
	port=$(wait_port "$dir/token-registry.log" "$dir/token-registry.pid") || {
		cmd_stop "$dir"
		exit 1
	}
	wait_v2 "$port" 401

	# the flow works end to end before any test relies on it
	hdr=$(curl -s -D - -o /dev/null "http://127.0.0.1:$port/v2/sbx/hello/manifests/1" |
		grep -i '^www-authenticate:' || true)
	case "$hdr" in
	*Bearer*realm=*"127.0.0.1:$tport/token"*) ;;
	*) die "the token registry did not ask for a bearer token: $hdr" ;;
	esac
	token=$(curl -sf "http://127.0.0.1:$tport/token?service=sbx-test&scope=repository:sbx/hello:pull" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])') ||
		die "the token server gave no token"
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" \
		-H 'Accept: application/vnd.oci.image.manifest.v1+json' \
		"http://127.0.0.1:$port/v2/sbx/hello/manifests/1")
	if [ "$code" != 200 ]; then
		cat "$dir/token-registry.log" >&2
		die "the token registry refused a token of the token server ($code)"
	fi
	code=$(curl -s -o /dev/null -w '%{http_code}' \
		"http://127.0.0.1:$tport/token?service=sbx-test&scope=repository:private/x:pull")
	[ "$code" = 403 ] || die "the token server did not refuse private/x ($code)"
	# the test counts only what sandboxd asked for
	: >"$dir/token.log"
	echo "$port" >"$dir/token-port"
	echo "registry.sh: token-auth registry on 127.0.0.1:$port, token server on 127.0.0.1:$tport"
}

# kill_pidfile FILE: ends the process FILE names (TERM, then KILL after 5 s) if it is still
# the one we started (its command line names docker-registry or fixture.py).
kill_pidfile() {
	[ -f "$1" ] || return 0
	pid=$(cat "$1")
	if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
		grep -Eq 'docker-registry|fixture\.py'; then
		kill "$pid" 2>/dev/null || true
		i=0
		while alive "$pid" && [ $i -lt 50 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$1"
}

cmd_stop() {
	[ -d "$1" ] || return 0
	kill_pidfile "$1/token-registry.pid"
	kill_pidfile "$1/token-server.pid"
	kill_pidfile "$1/registry.pid"
	rm -f "$1/port" "$1/token-port" "$1/token-server-port"
}

cmd_down() {
	cmd_stop "$1"
	if [ -n "${HARNESS_KEEP:-}" ]; then
		echo "registry.sh: HARNESS_KEEP is set, so $1 stays"
	else
		rm -rf "$1"
	fi
}

[ $# -ge 2 ] || die "usage: registry.sh start|populate|token-start|up|stop|down DIR [ROOTFS]"
case $1 in
start) cmd_start "$2" ;;
populate)
	[ $# -ge 3 ] || die "usage: registry.sh populate DIR ROOTFS"
	cmd_populate "$2" "$3"
	;;
token-start) cmd_token_start "$2" ;;
up)
	[ $# -ge 3 ] || die "usage: registry.sh up DIR ROOTFS"
	cmd_down "$2"
	cmd_start "$2"
	cmd_populate "$2" "$3"
	cmd_token_start "$2"
	;;
stop) cmd_stop "$2" ;;
down) cmd_down "$2" ;;
*) die "unknown command $1" ;;
esac
