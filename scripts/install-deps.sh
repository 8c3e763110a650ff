#!/bin/sh
# Installs every Debian 12 package sandboxd needs to build, run and test, then the npm
# packages (`npm ci` in web/: xterm.js, built into sandboxd, and playwright-core for the
# browser tests; in sdk/typescript: typescript and yaml, to build and type the SDK).
# Idempotent and quiet; run as root (or with sudo).
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
# node and npm for web/ and sdk/typescript: Debian's, unless the machine already has its own
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

# node_modules exactly as each package-lock.json says (web/: the dashboard's; sdk/typescript:
# the TypeScript SDK's compiler and YAML parser), again only when the lock is newer than what
# is installed; as the checkout's owner, so a checkout of a user's stays theirs
for pkg in web sdk/typescript; do
	dir=$(cd "$(dirname "$0")/../$pkg" && pwd)
	if [ -f "$dir/node_modules/.package-lock.json" ] &&
		[ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
		echo "install-deps: $pkg/node_modules up to date"
		continue
	fi
	owner=$(stat -c %U "$dir")
	if [ "$owner" = root ]; then
		(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	else
		runuser -l "$owner" -c "cd '$dir' && npm ci --no-audit --no-fund --loglevel=error" \
			>/dev/null
	fi
	echo "install-deps: $pkg/node_modules installed (npm ci)"
done
echo "install-deps: done"
