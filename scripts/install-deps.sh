#!/bin/sh
# Installs every Debian 12 package sandboxd needs to build, run and test, then the
# dashboard's npm packages (`npm ci` in web/: xterm.js, built into sandboxd, and
# playwright-core for the browser tests). Idempotent and quiet; run as root (or with sudo).
# Benchmarks install their own extras (bench/*/run.sh). The guest kernel and busybox are not
# installed: `sandboxd setup` downloads them with apt.
set -eu

PACKAGES="
build-essential pkgconf cmake ninja-build git ca-certificates curl openssl procps
libssl-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev libhttp-parser-dev
libwslay-dev libcmocka-dev libarchive-dev libyaml-dev libsodium-dev musl-tools
qemu-system-x86 qemu-utils e2fsprogs lz4 xz-utils mmdebstrap umoci nftables iproute2
docker-registry skopeo
python3
clang-14 libclang-rt-14-dev clang-format
chromium
"
# node and npm for web/: Debian's, unless the machine already has its own
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	PACKAGES="$PACKAGES nodejs npm"
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: run as root (sudo $0)" >&2
	exit 1
fi

missing=""
for p in $PACKAGES; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "install-deps: all packages present"
else
	echo "install-deps: installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
	echo "install-deps: packages installed"
fi

# web/node_modules exactly as web/package-lock.json says, again only when the lock is newer
# than what is installed; as the checkout's owner, so a checkout of a user's stays theirs
web=$(cd "$(dirname "$0")/../web" && pwd)
if [ -f "$web/node_modules/.package-lock.json" ] &&
	[ "$web/node_modules/.package-lock.json" -nt "$web/package-lock.json" ]; then
	echo "install-deps: web/node_modules up to date"
else
	owner=$(stat -c %U "$web")
	if [ "$owner" = root ]; then
		(cd "$web" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	else
		runuser -l "$owner" -c "cd '$web' && npm ci --no-audit --no-fund --loglevel=error" \
			>/dev/null
	fi
	echo "install-deps: web/node_modules installed (npm ci)"
fi
echo "install-deps: done"
