#!/usr/bin/env bash
# bench/images/run.sh: installing an image from a registry on loopback, measured against the
# plain tools in the same run: `sandboxd image install --fetch-only` (fetch and verify every
# blob) against `skopeo copy` of the same image to a directory, sandboxd's disk build (unpack
# plus mkfs, blobs cached) against a bare `mkfs.ext4 -d` of the same tree with the same size
# parameters (and, as a reference, GNU tar plus that mkfs), and the peak memory of an install
# of an image with a small layer against one with a large layer. One command; see
# docs/performance.md ("Images") for how to read it. Run as root (sandboxd keeps owners).
#
# Knobs (environment): ROUNDS=5 LAYERS=8 LAYER_MB=8 (the multi-layer image: a small busybox
# base plus LAYERS layers of LAYER_MB MiB of random data) SMALL_MB=16 LARGE_MB=512 (the
# one-layer images of the memory check) MEM_N=2 (installs of each for memory)
# SANDBOXD=build-bench/bin/sandboxd JOBS= (ninja -j; empty: ninja's default)
# NOTE='...' (a line for the results file: what was special about this run) KEEP_TMP=0
set -euo pipefail

ROUNDS=${ROUNDS:-5}
LAYERS=${LAYERS:-8}
LAYER_MB=${LAYER_MB:-8}
SMALL_MB=${SMALL_MB:-16}
LARGE_MB=${LARGE_MB:-512}
MEM_N=${MEM_N:-2}
KEEP_TMP=${KEEP_TMP:-0}
JOBS=${JOBS:-}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BUILD=$ROOT/build-bench
SANDBOXD=${SANDBOXD:-$BUILD/bin/sandboxd}
AGENT=$BUILD/bin/sandbox-guestd
REGSH=$ROOT/tests/images/registry.sh
TMP=
RAW=

log() {
	printf 'bench/images: %s\n' "$*" >&2
}

die() {
	printf 'bench/images: error: %s\n' "$*" >&2
	exit 1
}

cleanup() {
	set +e
	[ -n "$TMP" ] && [ -d "$TMP/registry" ] && sh "$REGSH" stop "$TMP/registry" >/dev/null 2>&1
	scratch_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- build ----

[ "$(id -u)" = 0 ] || die "run as root: sandboxd and tar keep the images' owners only as root"
for c in cmake ninja curl skopeo umoci docker-registry mkfs.ext4 debugfs dumpe2fs tar gzip \
	busybox /usr/bin/time flock; do
	command -v "$c" >/dev/null || die "'$c' is needed (scripts/install-deps.sh)"
done
mkdir -p "$BUILD"
exec 9>"$BUILD/.bench-images.lock"
flock -n 9 || die "another bench/images/run.sh is running"

TMP=$(mktemp -d /tmp/sandboxd-imgbench.XXXXXX)
build_release ${JOBS:+-j "$JOBS"} sandboxd sandbox-guestd

# ---- the registry and the images ----

log "registry (tests/images/registry.sh start)"
sh "$REGSH" start "$TMP/registry" >/dev/null || die "the registry did not start"
PORT=$(cat "$TMP/registry/port")
REG=127.0.0.1:$PORT
REG_PID=$(cat "$TMP/registry/registry.pid")

G=$TMP/gen
mkdir -p "$G"

# tarball DIR OUT: the tree as a reproducible layer tar
tarball() {
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$1" -cf "$2" .
}

# The base: busybox and its applets as symlinks, a few directories (about 1 MiB).
mkdir -p "$G/base/bin" "$G/base/etc" "$G/base/tmp" "$G/base/root"
cp "$(command -v busybox)" "$G/base/bin/busybox"
for a in $("$G/base/bin/busybox" --list); do
	[ "$a" = busybox ] || ln -s busybox "$G/base/bin/$a"
done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$G/base/etc/passwd"
chmod 1777 "$G/base/tmp"
tarball "$G/base" "$G/base.tar"

# random_layer OUT MIB NAME: one file of MIB MiB of random data (gzip cannot shrink it, so
# the bytes on the wire are the bytes in the tree)
random_layer() {
	local d=$G/layer-$3
	mkdir -p "$d/data"
	head -c "$(($2 << 20))" /dev/urandom >"$d/data/$3.bin"
	tarball "$d" "$1"
	rm -rf "$d"
}

L=$G/layout
umoci init --layout "$L"
# image TAG TAR...: an image of those layers (umoci compresses each with gzip)
image() {
	local tag=$1 t
	shift
	umoci new --image "$L:$tag"
	for t in "$@"; do
		umoci raw add-layer --image "$L:$tag" "$t"
		rm -f "$t"
	done
	umoci config --image "$L:$tag" --os linux --architecture amd64 \
		--config.env PATH=/usr/sbin:/usr/bin:/sbin:/bin
}

log "generating the images (random data, gzip by umoci)"
layers=()
for i in $(seq "$LAYERS"); do
	random_layer "$G/l$i.tar" "$LAYER_MB" "l$i"
	layers+=("$G/l$i.tar")
done
cp "$G/base.tar" "$G/base-1.tar"
image multi "$G/base-1.tar" "${layers[@]}"
random_layer "$G/small.tar" "$SMALL_MB" small
cp "$G/base.tar" "$G/base-2.tar"
image small "$G/base-2.tar" "$G/small.tar"
random_layer "$G/large.tar" "$LARGE_MB" large
image large "$G/base.tar" "$G/large.tar"
for t in multi small large; do
	skopeo copy -q --dest-tls-verify=false "oci:$L:$t" "docker://$REG/bench/$t:1" ||
		die "skopeo could not push bench/$t"
done
rm -rf "$G"
IMG_MULTI=$REG/bench/multi:1
IMG_SMALL=$REG/bench/small:1
IMG_LARGE=$REG/bench/large:1

# ---- helpers ----

# Busy and total jiffies of all CPUs: "BUSY TOTAL"
cpu_jiffies() {
	awk 'NR == 1 { for (i = 2; i <= NF; i++) { t += $i; if (i != 5 && i != 6) b += $i }
		print b, t; exit }' /proc/stat
}

proc_ticks() { # PID: utime + stime
	awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0
}


jint() { # FILE KEY: an integer field of sandboxd's JSON record
	sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" "$1"
}

HZ=$(getconf CLK_TCK)
NCPU=$(nproc)

# timed OUTFILE COMMAND...: runs the command (stdout to OUTFILE) under /usr/bin/time; sets LINE
# to "wall_ms= cpu_ms= maxrss_kib= registry_cpu_ms= other_cpu=" (other_cpu: CPUs that neither
# the command, its children nor the registry used while it ran, out of NCPU). With HWM=1 it
# also samples the command's own VmHWM (its children's memory apart): hwm_kib=.
timed() {
	local out=$1 j0 j1 r0 r1 t0 t1 tp cp hwm=0 h wall cpu u s rss
	shift
	r0=$(proc_ticks "$REG_PID")
	read -r -a j0 <<<"$(cpu_jiffies)"
	t0=$(date +%s%N)
	/usr/bin/time -f '%U %S %M' -o "$TMP/time" "$@" >"$out" 2>>"$TMP/stderr.log" &
	tp=$!
	if [ "${HWM:-0}" = 1 ]; then
		cp=
		while kill -0 "$tp" 2>/dev/null; do
			[ -n "$cp" ] || cp=$(pgrep -P "$tp" | head -1 || true)
			if [ -n "$cp" ]; then
				h=$(awk '/^VmHWM:/ { print $2 }' "/proc/$cp/status" 2>/dev/null || true)
				[ -n "$h" ] && [ "$h" -gt "$hwm" ] && hwm=$h
			fi
			sleep 0.02
		done
	fi
	wait "$tp" || die "failed: $* ($(tail -3 "$TMP/stderr.log"))"
	t1=$(date +%s%N)
	read -r -a j1 <<<"$(cpu_jiffies)"
	r1=$(proc_ticks "$REG_PID")
	read -r u s rss <"$TMP/time"
	wall=$(((t1 - t0) / 1000000))
	cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.0f", (u + s) * 1000 }')
	LINE=$(awk -v w="$wall" -v c="$cpu" -v rss="$rss" -v r=$((r1 - r0)) -v hz="$HZ" \
		-v b=$((j1[0] - j0[0])) 'BEGIN {
		rm = r * 1000 / hz
		o = w > 0 ? (b * 1000 / hz - c - rm) / w : 0
		printf "wall_ms=%d cpu_ms=%d maxrss_kib=%d registry_cpu_ms=%.0f other_cpu=%.2f",
		    w, c, rss, rm, (o < 0 ? 0 : o)
	}')
	[ "${HWM:-0}" != 1 ] || LINE="$LINE hwm_kib=$hwm"
}

sbx_install() { # STATE OUT IMAGE [--fetch-only]
	local st=$1 out=$2 img=$3
	shift 3
	timed "$out" "$SANDBOXD" image install --state-dir "$st" --agent "$AGENT" \
		--insecure-registry "$REG" --quiet "$@" "$img"
}

timings() { # JSON-FILE: sandboxd's own timings as KEY=VALUE
	local k v s=
	for k in resolve_ms fetch_ms unpack_ms mkfs_ms; do
		v=$(jint "$1" "$k")
		[ -z "$v" ] || s="$s $k=$v"
	done
	printf '%s' "${s# }"
}


# ---- the run ----

results_open images

rec "# bench/images/run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
rec "# sandboxd $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
	"($([ "$SANDBOXD" = "$BUILD/bin/sandboxd" ] && echo "build-bench/bin/sandboxd, Release" ||
		echo "SANDBOXD=$SANDBOXD"))"
rec "# machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
	"$NCPU CPUs, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
	"kernel $(uname -r), $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release)," \
	"$(stat -f -c %T "$TMP") under /tmp"
rec "# $(skopeo --version), $(umoci --version), $(docker-registry --version 2>&1 | head -1)," \
	"$(mkfs.ext4 -V 2>&1 | head -1), $(tar --version | head -1)"
rec "# nice $(nice)"
[ -z "${NOTE:-}" ] || rec "# note: $NOTE"
rec "# rounds=$ROUNDS multi=base+${LAYERS}x${LAYER_MB}MiB small=base+${SMALL_MB}MiB" \
	"large=base+${LARGE_MB}MiB mem_n=$MEM_N registry=$REG"
rec "# before the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

# Warm-up (not counted): one cold install of the multi-layer image gives the disk whose tree
# and size parameters the bare mkfs uses, and one skopeo copy warms the registry's files.
log "warm-up: a full install and a skopeo copy of bench/multi"
mkdir "$TMP/warm"
sbx_install "$TMP/warm" "$TMP/warm.json" "$IMG_MULTI"
rec "warmup kind=sandboxd-install $LINE $(timings "$TMP/warm.json")"
timed /dev/null skopeo copy -q --src-tls-verify=false "docker://$IMG_MULTI" "dir:$TMP/warm-sk"
rec "warmup kind=skopeo $LINE"
rm -rf "$TMP/warm-sk"
DISK=$(sed -n 's/.*"disk":"\([^"]*\)".*/\1/p' "$TMP/warm.json")
[ -f "$DISK" ] || die "sandboxd's record names no disk: $(cat "$TMP/warm.json")"
SIZE_K=$(($(stat -c %s "$DISK") / 1024))k
INODES=$(dumpe2fs -h "$DISK" 2>/dev/null | sed -n 's/^Inode count: *//p' || true)
[ -n "$INODES" ] || die "dumpe2fs cannot read $DISK"
# the very tree sandboxd gave mkfs, /sandbox and the agent included
mkdir "$TMP/tree"
debugfs -R "rdump / $TMP/tree" "$DISK" >/dev/null 2>&1 || die "debugfs cannot read $DISK"
rm -rf "$TMP/tree/lost+found"
BLOBS=()
for d in $(sed -n 's/.*"layers":\[\([^]]*\)\].*/\1/p' "$TMP/warm.json" | tr -d '"' | tr , ' '); do
	BLOBS+=("$TMP/warm/images/blobs/sha256/${d#sha256:}")
done
[ "${#BLOBS[@]}" = $((LAYERS + 1)) ] || die "the record lists ${#BLOBS[@]} layers"
rec "# disk: $(stat -c %s "$DISK") bytes, $INODES inodes, tree $(du -sk "$TMP/tree" | cut -f1) KiB" \
	"in $(find "$TMP/tree" | wc -l) entries; blobs $(du -ck "${BLOBS[@]}" | tail -1 | cut -f1) KiB"
MKFS=(mkfs.ext4 -q -F -t ext4 -b 4096 -O ^has_journal -m 0 -N "$INODES" -L sbx-image
	-E root_owner=0:0)
rec "# bare mkfs: ${MKFS[*]} -d TREE FILE $SIZE_K"

# The same tree by GNU tar from the warm-up's cached layer blobs (the same bytes as each
# round's), plus /sandbox as sandboxd adds it: a script, so that /usr/bin/time can run it.
# shellcheck disable=SC2016 # "$1" and "$2" are the generated script's own arguments
{
	echo 'set -e'
	printf 'mkdir "$1"\n'
	for b in "${BLOBS[@]}"; do
		printf 'tar -xf %q -C "$1"\n' "$b"
	done
	printf 'mkdir -p "$1/sandbox/home" "$1/sandbox/bin"\n'
	printf 'chown 1001:1001 "$1/sandbox/home"\n'
	printf 'cp %q "$1/sandbox/bin/sandbox-guestd"\n' "$AGENT"
	printf '%q ' "${MKFS[@]}"
	printf -- '-d "$1" "$2" %q\n' "$SIZE_K"
} >"$TMP/tar-mkfs.sh"

install_side() { # ROUND SIDE
	local r=$1 s=$2
	case "$s" in
	skopeo)
		rm -rf "$TMP/sk"
		timed /dev/null skopeo copy -q --src-tls-verify=false "docker://$IMG_MULTI" "dir:$TMP/sk"
		rec "run round=$r kind=skopeo $LINE"
		;;
	sandboxd)
		rm -rf "$TMP/st"
		mkdir "$TMP/st"
		sbx_install "$TMP/st" "$TMP/st.json" "$IMG_MULTI" --fetch-only
		rec "run round=$r kind=sandboxd-fetch $LINE $(timings "$TMP/st.json")"
		;;
	esac
}

disk_side() { # ROUND SIDE (the blobs of the round's fetch-only install are in $TMP/st)
	local r=$1 s=$2
	case "$s" in
	sandboxd)
		rm -rf "$TMP/st/rootfs" "$TMP/st/images/refs" "$TMP/st/images/tmp"
		sbx_install "$TMP/st" "$TMP/st.json" "$IMG_MULTI"
		rec "run round=$r kind=sandboxd-disk $LINE $(timings "$TMP/st.json")"
		;;
	mkfs)
		rm -f "$TMP/bare.ext4"
		timed /dev/null "${MKFS[@]}" -d "$TMP/tree" "$TMP/bare.ext4" "$SIZE_K"
		rec "run round=$r kind=mkfs $LINE"
		;;
	tar-mkfs)
		rm -rf "$TMP/tartree" "$TMP/tar.ext4"
		timed /dev/null sh "$TMP/tar-mkfs.sh" "$TMP/tartree" "$TMP/tar.ext4"
		rec "run round=$r kind=tar-mkfs $LINE"
		;;
	esac
}

for r in $(seq "$ROUNDS"); do
	log "round $r/$ROUNDS: fetch (sandboxd --fetch-only, skopeo copy)"
	for s in $(rotate "$r" sandboxd skopeo); do
		install_side "$r" "$s"
	done
	[ -d "$TMP/st/images/blobs" ] || die "no blobs after the fetch-only install"
	log "round $r/$ROUNDS: disk build (sandboxd, bare mkfs, tar + mkfs)"
	for s in $(rotate "$r" sandboxd mkfs tar-mkfs); do
		disk_side "$r" "$s"
	done
done
rm -rf "$TMP/st" "$TMP/sk" "$TMP/tartree" "$TMP/bare.ext4" "$TMP/tar.ext4"

# Memory: full installs (fetch, unpack, mkfs) of the small-layer and the large-layer image,
# each into a fresh state directory; and skopeo copies of the same for reference.
for m in $(seq "$MEM_N"); do
	for img in $(rotate "$m" small large); do
		log "memory $m/$MEM_N: $img"
		rm -rf "$TMP/mem"
		mkdir "$TMP/mem"
		ref=$IMG_SMALL
		[ "$img" = large ] && ref=$IMG_LARGE
		HWM=1 sbx_install "$TMP/mem" "$TMP/mem.json" "$ref"
		rec "mem n=$m image=$img tool=sandboxd $LINE $(timings "$TMP/mem.json")"
		rm -rf "$TMP/mem" "$TMP/memsk"
		HWM=1 timed /dev/null skopeo copy -q --src-tls-verify=false "docker://$ref" \
			"dir:$TMP/memsk"
		rec "mem n=$m image=$img tool=skopeo $LINE"
		rm -rf "$TMP/memsk"
	done
done
rec "# after the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- summary ----

summary=$(awk -v rounds="$ROUNDS" -v small="$SMALL_MB" -v large="$LARGE_MB" "$BENCH_AWK"'
function cell(k,   m) {
	if (!(k in vals))
		return "-"
	m = med(vals[k])
	return sprintf("%.0f (%.0f-%.0f)", m, lo, hi)
}
function paired(a, b,   r, s) { # the median over rounds of a / b measured side by side
	s = ""
	for (r = 1; r <= rounds; r++)
		if (((r "/" a) in by) && by[r "/" b] > 0)
			s = s " " by[r "/" a] / by[r "/" b]
	return s == "" ? 0 : med(s)
}
/^run / {
	r = kv($0, "round"); k = kv($0, "kind")
	add(k " wall", kv($0, "wall_ms"), r)
	add(k " cpu", kv($0, "cpu_ms"), r)
	add(k " rss", kv($0, "maxrss_kib"), r)
	other = other " " kv($0, "other_cpu")
	if (k == "sandboxd-fetch") {
		add("fetch_ms", kv($0, "fetch_ms"), r)
		add("resolve_ms", kv($0, "resolve_ms"), r)
	}
	if (k == "sandboxd-disk") {
		add("unpack_ms", kv($0, "unpack_ms"), r)
		add("mkfs_ms", kv($0, "mkfs_ms"), r)
		add("build_ms", kv($0, "unpack_ms") + kv($0, "mkfs_ms"), r)
	}
}
/^mem / {
	k = kv($0, "tool") " " kv($0, "image")
	mrss[k] = mrss[k] " " kv($0, "maxrss_kib")
	mhwm[k] = mhwm[k] " " kv($0, "hwm_kib")
	mwall[k] = mwall[k] " " kv($0, "wall_ms")
	if (kv($0, "tool") == "sandboxd")
		mt[kv($0, "image")] = mt[kv($0, "image")] " fetch " kv($0, "fetch_ms") " unpack " \
		    kv($0, "unpack_ms") " mkfs " kv($0, "mkfs_ms")
}
END {
	printf "Fetch and verify the multi-layer image, ms: median (min-max) of %d rounds\n\n", rounds
	printf "| | wall | CPU | peak RSS (KiB) |\n|---|---|---|---|\n"
	printf "| sandboxd image install --fetch-only | %s | %s | %s |\n", cell("sandboxd-fetch wall"),
	    cell("sandboxd-fetch cpu"), cell("sandboxd-fetch rss")
	printf "| skopeo copy to dir: | %s | %s | %s |\n", cell("skopeo wall"), cell("skopeo cpu"),
	    cell("skopeo rss")
	printf "\nsandboxd timings: resolve %s, fetch %s\n", cell("resolve_ms"), cell("fetch_ms")
	f = med(vals["sandboxd-fetch wall"]) / med(vals["skopeo wall"])
	printf "install (fetch + verify) / skopeo: %.2f (per-round median %.2f); goal 1.5: %s\n",
	    f, paired("sandboxd-fetch wall", "skopeo wall"), (f <= 1.5 ? "met" : "NOT met")

	printf "\nDisk build from cached blobs, ms: median (min-max) of %d rounds\n\n", rounds
	printf "| | wall | CPU |\n|---|---|---|\n"
	printf "| sandboxd unpack + mkfs (its timings) | %s | |\n", cell("build_ms")
	printf "| sandboxd, of which unpack | %s | |\n", cell("unpack_ms")
	printf "| sandboxd, of which mkfs (sizing + mkfs.ext4) | %s | |\n", cell("mkfs_ms")
	printf "| sandboxd image install, whole command | %s | %s |\n", cell("sandboxd-disk wall"),
	    cell("sandboxd-disk cpu")
	printf "| bare mkfs.ext4 -d of the same tree | %s | %s |\n", cell("mkfs wall"),
	    cell("mkfs cpu")
	printf "| GNU tar -xf of the layers + that mkfs | %s | %s |\n", cell("tar-mkfs wall"),
	    cell("tar-mkfs cpu")
	d = med(vals["build_ms"]) / med(vals["mkfs wall"])
	printf "\ndisk build (unpack + mkfs) / bare mkfs: %.2f (per-round median %.2f); goal 1.2: %s\n",
	    d, paired("build_ms", "mkfs wall"), (d <= 1.2 ? "met" : "NOT met")
	printf "sandboxd mkfs step / bare mkfs: %.2f; disk build / tar + mkfs: %.2f\n",
	    med(vals["mkfs_ms"]) / med(vals["mkfs wall"]),
	    med(vals["build_ms"]) / med(vals["tar-mkfs wall"])

	printf "\nPeak memory (KiB, median): a full install of base + one layer of %s MiB and of " \
	    "%s MiB\n\n", small, large
	printf "| | %s MiB | %s MiB | ratio |\n|---|---|---|---|\n", small, large
	s = med(mhwm["sandboxd small"]); l = med(mhwm["sandboxd large"])
	printf "| sandboxd process alone (VmHWM) | %d | %d | %.2f |\n", s, l, s ? l / s : 0
	mr = l / (s ? s : 1)
	s = med(mrss["sandboxd small"]); l = med(mrss["sandboxd large"])
	printf "| sandboxd and mkfs.ext4 (time -v max RSS) | %d | %d | %.2f |\n", s, l, s ? l / s : 0
	s = med(mrss["skopeo small"]); l = med(mrss["skopeo large"])
	printf "| skopeo copy (time -v max RSS) | %d | %d | %.2f |\n", s, l, s ? l / s : 0
	printf "\nfull install wall (ms): %s MiB %.0f, %s MiB %.0f; sandboxd timings, large:%s\n",
	    small, med(mwall["sandboxd small"]), large, med(mwall["sandboxd large"]), mt["large"]
	printf "goal: peak memory independent of layer size (sandboxd alone): %.2f, %s\n", mr,
	    (mr <= 1.2 ? "met" : "NOT met")
	m = med(other)
	printf "\nother work on the machine during the measured runs: median %.2f CPUs (max %.2f)\n",
	    m, hi
}' "$RAW")
results_close "$summary"
