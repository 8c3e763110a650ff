#!/bin/sh
# Installs every Debian 12 package sandboxd needs to build, run and test. Idempotent and
# quiet; run as root (or with sudo). Benchmarks install their own extras (bench/*/run.sh).
# The guest kernel and busybox are not installed: `sandboxd setup` downloads them with apt.
set -eu

PACKAGES="
build-essential pkgconf cmake ninja-build git ca-certificates curl openssl procps
libssl-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev libhttp-parser-dev
libwslay-dev libcmocka-dev libarchive-dev libyaml-dev libsodium-dev musl-tools
qemu-system-x86 qemu-utils e2fsprogs lz4 xz-utils mmdebstrap umoci nftables iproute2
docker-registry skopeo
python3
clang-14 libclang-rt-14-dev clang-format
"

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
	exit 0
fi
echo "install-deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "install-deps: done"
