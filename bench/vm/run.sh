#!/usr/bin/env bash
# bench/vm/run.sh: real microVMs through sandboxd against a bare QEMU started with the same
# machine, kernel, initramfs and disks, measured in the same run: create to first exec, the
# exec round trip of `true`, 64 MiB of output (NDJSON and sbx-stream/1 against the raw agent
# channel), the VMM's memory per idle sandbox and sandboxd's own memory per sandbox. One
# command; see docs/performance.md ("VM boot, exec and memory") for how to read it. Run as root.
#
# Knobs (environment): ROUNDS=5 EXECS=200 STREAM_MB=64 STREAM_CMD=head|dd MEM_N=5 HOLD=5
# ACCEL=auto (sandboxd --accel; auto tries KVM with a test boot and falls back to TCG)
# SANDBOXD=build-bench/bin/sandboxd (another sandboxd binary to measure instead)
# NOTE='...' (a line for the results file: what was special about this run)
# CONFINED=1 (also a bare QEMU under its own uid with -sandbox) KEEP_TMP=0
# QUIET_WAIT=300 QUIET_MAX=15 (before each boot, wait up to QUIET_WAIT s for the CPUs to be
# less than QUIET_MAX % busy)
# NOISE_MAX=0.3 RETRIES=2 (a boot during which other work took more CPUs is repeated).
set -euo pipefail

ROUNDS=${ROUNDS:-5}
EXECS=${EXECS:-200}
STREAM_MB=${STREAM_MB:-64}
STREAM_CMD=${STREAM_CMD:-head}
MEM_N=${MEM_N:-5}
HOLD=${HOLD:-5}
ACCEL=${ACCEL:-auto}
CONFINED=${CONFINED:-1}
KEEP_TMP=${KEEP_TMP:-0}
QUIET_WAIT=${QUIET_WAIT:-300}
QUIET_MAX=${QUIET_MAX:-15}
NOISE_MAX=${NOISE_MAX:-0.3}
RETRIES=${RETRIES:-2}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build-bench
VMBENCH=$BUILD/bench/vmbench
SANDBOXD=${SANDBOXD:-$BUILD/bin/sandboxd} # another build of sandboxd to measure (same options)
BUNDLE=$BUILD/vm-bundle     # the guest bundle, shared with ctest's vm/setup fixture
WORK=$BUILD/bench/vm        # this benchmark's state: fixed paths keep KVM's probe cached
STATE=$WORK/state
FILES=$WORK/files           # hard links of the guest files the bare QEMU opens by path
BARE_UID=62500              # outside sandboxd's VMM uids (61000 + slot, 1024 slots)
STREAM_BYTES=$((STREAM_MB << 20))
TMP=
RAW=
SBX_PID=
SOCK=
BARE_PIDFILE=

log() {
	printf 'bench/vm: %s\n' "$*" >&2
}

die() {
	printf 'bench/vm: error: %s\n' "$*" >&2
	exit 1
}

api() { # METHOD PATH [JSON]: the body on stdout; fails on a transport error
	local m=$1 p=$2
	shift 2
	if [ $# -gt 0 ]; then
		curl -sS --max-time 300 --unix-socket "$SOCK" -X "$m" \
			-H 'Content-Type: application/json' -d "$1" "http://localhost$p"
	else
		curl -sS --max-time 300 --unix-socket "$SOCK" -X "$m" "http://localhost$p"
	fi
}

# The VMM of a sandbox of ours, from its record in the state directory.
vmm_pid() {
	local f=$STATE/vms/$1/vm.json
	[ -f "$f" ] && sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$f"
}

# Everything this script started: sandboxes (deleted through the API first: VMs outlive
# sandboxd by design), sandboxd, the bare QEMUs; last, any QEMU left with our marker in its
# environment (sandboxd's SANDBOXD_STATE_DIR, vmbench's SANDBOXD_VMBENCH_DIR).
cleanup() {
	local id pid i
	set +e
	if [ -n "$SBX_PID" ] && kill -0 "$SBX_PID" 2>/dev/null; then
		for id in $(api GET /v1/sandboxes 2>/dev/null | grep -o '"id":"sbx_[0-9a-f]*"' |
			cut -d'"' -f4); do
			api DELETE "/v1/sandboxes/$id" >/dev/null 2>&1
		done
		kill -TERM "$SBX_PID" 2>/dev/null
		for i in $(seq 100); do
			kill -0 "$SBX_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$SBX_PID" 2>/dev/null
		wait "$SBX_PID" 2>/dev/null
	fi
	SBX_PID=
	if [ -n "$BARE_PIDFILE" ] && [ -f "$BARE_PIDFILE" ]; then
		kill -KILL "$(cat "$BARE_PIDFILE")" 2>/dev/null
		rm -f "$BARE_PIDFILE"
	fi
	for pid in $(pgrep -f qemu-system-x86_64); do
		if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null |
			grep -qxF -e "SANDBOXD_STATE_DIR=$STATE" -e "SANDBOXD_VMBENCH_DIR=$WORK/bare-plain" \
				-e "SANDBOXD_VMBENCH_DIR=$WORK/bare-confined"; then
			log "ending a VMM left behind: pid $pid"
			kill -KILL "$pid" 2>/dev/null
		fi
	done
	# keep what sandboxd learnt about KVM on this machine (its probe boot takes 15 s)
	[ -f "$STATE/vm/accel" ] && cp "$STATE/vm/accel" "$WORK/accel" 2>/dev/null
	if [ -n "$TMP" ] && [ -d "$TMP" ]; then
		if [ "$KEEP_TMP" = 1 ]; then
			log "kept $TMP and $STATE"
		else
			rm -rf "$TMP" "$STATE" "$FILES" "$WORK"/bare-*
		fi
	fi
	if [ -n "$RAW" ] && [ -f "$RAW" ] && [ "$KEEP_TMP" != 1 ]; then
		rm -f "$RAW"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- build and bundle ----

[ "$(id -u)" = 0 ] || die "run as root: sandboxd confines each VMM under its own uid"
for c in cmake ninja cc curl qemu-system-x86_64 qemu-img flock; do
	command -v "$c" >/dev/null || die "'$c' is needed"
done
mkdir -p "$WORK"
exec 9>"$WORK/lock"
flock -n 9 || die "another bench/vm/run.sh is running"

TMP=$(mktemp -d /tmp/sandboxd-vmbench.XXXXXX)
log "building $BUILD (Release)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$TMP/build.log" 2>&1 ||
	die "cmake failed: $(tail -5 "$TMP/build.log")"
ninja -C "$BUILD" sandboxd sandbox-guestd >>"$TMP/build.log" 2>&1 || {
	tail -20 "$TMP/build.log" >&2
	die "the build failed"
}
cc -std=gnu11 -O2 -Wall -Wextra -o "$VMBENCH" "$ROOT/bench/vm/vmbench.c"

log "guest bundle in $BUNDLE (sandboxd setup; reused when up to date)"
"$BUILD/bin/sandboxd" setup --state-dir "$BUNDLE" --agent "$BUILD/bin/sandbox-guestd" \
	>"$TMP/setup.log" 2>&1 || die "sandboxd setup failed: $(tail -5 "$TMP/setup.log")"

# ---- helpers ----

# Percent of all CPUs busy over one second.
cpu_busy() {
	local a b
	a=$(head -1 /proc/stat)
	sleep 1
	b=$(head -1 /proc/stat)
	awk -v a="$a" -v b="$b" 'BEGIN {
		n = split(a, x, " "); split(b, y, " ")
		for (i = 2; i <= n; i++) { d = y[i] - x[i]; t += d; if (i == 5 || i == 6) idle += d }
		printf "%.0f", t ? 100 * (t - idle) / t : 0
	}'
}

# Before each boot, waits (QUIET_WAIT seconds at most) for the machine to be quiet.
wait_quiet() {
	local start=$SECONDS b
	while :; do
		b=$(cpu_busy)
		[ "$b" -lt "$QUIET_MAX" ] && break
		if [ $((SECONDS - start)) -ge "$QUIET_WAIT" ]; then
			log "warning: the CPUs are still ${b}% busy after ${QUIET_WAIT}s; measuring anyway"
			break
		fi
		sleep 4
	done
	WAITED=$((SECONDS - start))
	[ "$WAITED" -lt 2 ] || log "waited ${WAITED}s for the machine to be quiet"
}

# mem PID [PREFIX]: "rss_kib=R pss_kib=P anon_kib=A hwm_kib=H" (H: the peak RSS), each key
# with PREFIX before it
mem() {
	awk -v p="${2:-}" '/^Rss:/ { r = $2 } /^Pss:/ { s = $2 } /^Anonymous:/ { a = $2 }
		/^VmHWM:/ { h = $2 }
		END { printf "%srss_kib=%d %spss_kib=%d %sanon_kib=%d %shwm_kib=%d", p, r, p, s, p, a, p, h }' \
		"/proc/$1/smaps_rollup" "/proc/$1/status"
}

kv() { # LINE KEY
	sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"
}

noisy() { # OTHER_CPU: true when other work took more than NOISE_MAX CPUs
	awk -v o="$1" -v m="$NOISE_MAX" 'BEGIN { exit !(o > m) }'
}

# ---- the run ----

DATE=$(date -u +%Y-%m-%d)
mkdir -p "$ROOT/bench/results"
OUT=$ROOT/bench/results/vm-$DATE.txt
n=2
while [ -e "$OUT" ]; do
	OUT=$ROOT/bench/results/vm-$DATE-$n.txt
	n=$((n + 1))
done
RAW=$OUT.tmp
: >"$RAW"
rec() {
	printf '%s\n' "$*" >>"$RAW"
}

rec "# bench/vm/run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
rec "# sandboxd $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
	"($([ "$SANDBOXD" = "$BUILD/bin/sandboxd" ] && echo "build-bench/bin/sandboxd, Release" ||
		echo "SANDBOXD=$SANDBOXD: $("$SANDBOXD" --version 2>&1 | head -1)"))"
rec "# machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
	"$(nproc) CPUs, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
	"kernel $(uname -r), $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release)"
rec "# $(qemu-system-x86_64 --version | head -1), $(cc --version | head -1)"
rec "# guest: $(sed -n 's/.*"kernel_package": "\(.*\)",/\1/p' "$BUNDLE/vm/bundle.json")" \
	"$(sed -n 's/.*"kernel_package_version": "\(.*\)",/\1/p' "$BUNDLE/vm/bundle.json")," \
	"busybox $(sed -n 's/.*"busybox_version": "\(.*\)",/\1/p' "$BUNDLE/vm/bundle.json")"
[ -z "${NOTE:-}" ] || rec "# note: $NOTE"
rec "# rounds=$ROUNDS execs=$EXECS stream=${STREAM_MB}MiB ($STREAM_CMD) mem_n=$MEM_N" \
	"hold=${HOLD}s confined=$CONFINED noise_max=$NOISE_MAX"
busy=$(cpu_busy)
rec "# before the run: load average $(cut -d' ' -f1-3 /proc/loadavg), CPUs ${busy}% busy," \
	"$(pgrep -c -f qemu-system-x86_64 || true) QEMU processes of others running"

# A fresh state directory at a fixed path, with the bundle hard-linked in (as the tests do).
rm -rf "$STATE" "$WORK"/bare-*
mkdir -m 0700 "$STATE"
cp -al "$BUNDLE/vm" "$STATE/vm"
cp -al "$BUNDLE/images" "$STATE/images"
[ -f "$WORK/accel" ] && cp "$WORK/accel" "$STATE/vm/accel"
SOCK=$TMP/api.sock

"$SANDBOXD" --state-dir "$STATE" --socket "$SOCK" --accel "$ACCEL" --log-level info \
	--agent "$BUILD/bin/sandbox-guestd" >"$TMP/sandboxd.log" 2>&1 &
SBX_PID=$!
for _ in $(seq 400); do # an auto probe of KVM takes up to 15 s
	kill -0 "$SBX_PID" 2>/dev/null || die "sandboxd did not start: $(cat "$TMP/sandboxd.log")"
	curl -s -o /dev/null --unix-socket "$SOCK" http://localhost/v1/health && break
	sleep 0.1
done
caps=$(api GET /v1/capabilities)
ACCEL_USED=$(sed -n 's/.*"accel":"\([a-z]*\)".*/\1/p' <<<"$caps")
[ -n "$ACCEL_USED" ] || die "sandboxd does not say which accelerator it uses: $caps"
log "sandboxd runs VMs under $ACCEL_USED (--accel $ACCEL)"
rec "# accelerator: $ACCEL_USED (sandboxd --accel $ACCEL)"

# Warm-up: the first create makes the shared blank disk of the default size; its VMM's
# command line is what the bare QEMU copies.
log "warm-up sandbox"
warm=$(api POST /v1/sandboxes '{}')
WARM_ID=$(sed -n 's/.*"id":"\(sbx_[0-9a-f]*\)".*/\1/p' <<<"$warm")
grep -q '"state":"running"' <<<"$warm" || die "the warm-up sandbox did not boot: $warm"
api POST "/v1/sandboxes/$WARM_ID/run" '{"argv":["true"]}' | grep -q '"exit_code":0' ||
	die "run true failed in the warm-up sandbox"
WARM_QEMU=$(vmm_pid "$WARM_ID")
mapfile -d '' QARGV <"/proc/$WARM_QEMU/cmdline"
rec "# sandboxd's VMM: ${QARGV[*]}"
api DELETE "/v1/sandboxes/$WARM_ID" >/dev/null

# The bare QEMU's files, by path: hard links in a directory its uid can walk.
rm -rf "$FILES"
mkdir -m 0755 "$FILES"
KERNEL=$STATE/$(sed -n 's/.*"kernel": "\(.*\)",/\1/p' "$STATE/vm/bundle.json")
INITRD=$STATE/$(sed -n 's/.*"initramfs": "\(.*\)",/\1/p' "$STATE/vm/bundle.json")
ROOTFS=$STATE/$(sed -n 's/.*"rootfs": "\(.*\)",/\1/p' "$STATE/vm/bundle.json")
DISK_MB=$(sed -n 's/.*"disk_mb":\([0-9]*\).*/\1/p' <<<"$warm")
BLANK=$STATE/vm/blank-$DISK_MB.ext4
for f in "$KERNEL" "$INITRD" "$ROOTFS" "$BLANK"; do
	[ -f "$f" ] || die "missing $f"
	ln "$f" "$FILES/$(basename "$f")"
done

# bare_argv DIR CONFINED: sets BARGV, sandboxd's VMM command line with paths instead of the
# descriptors sandboxd passes (and without -sandbox unless CONFINED). Anything of the
# descriptor passing left over means daemon/qemu.c changed its command line: stop.
bare_argv() {
	local dir=$1 confined=$2 i w set opaque
	local -A fdset=()
	BARGV=()
	for ((i = 0; i < ${#QARGV[@]}; i++)); do
		if [ "${QARGV[i]}" = -add-fd ]; then
			w=${QARGV[i + 1]}
			set=$(sed -n 's/.*set=\([0-9]*\).*/\1/p' <<<"$w")
			opaque=$(sed -n 's/.*opaque=\([a-z]*\).*/\1/p' <<<"$w")
			fdset[$set]=${opaque:-console}
		fi
	done
	for ((i = 0; i < ${#QARGV[@]}; i++)); do
		w=${QARGV[i]}
		case "$w" in
		-add-fd)
			i=$((i + 1))
			continue
			;;
		-kernel | -initrd | -name | -sandbox)
			i=$((i + 1))
			case "$w" in
			-kernel) BARGV+=(-kernel "$FILES/$(basename "$KERNEL")") ;;
			-initrd) BARGV+=(-initrd "$FILES/$(basename "$INITRD")") ;;
			-name) BARGV+=(-name "bare,process=qemu-bare") ;;
			-sandbox) [ "$confined" = 1 ] && BARGV+=(-sandbox "${QARGV[i]}") ;;
			esac
			continue
			;;
		socket,id=*,fd=*)
			[[ "$w" =~ ^socket,id=([a-z]+),fd=[0-9]+,(.*)$ ]] ||
				die "cannot read the chardev '$w'"
			w="socket,id=${BASH_REMATCH[1]},path=$dir/${BASH_REMATCH[1]}.sock,${BASH_REMATCH[2]}"
			;;
		*/dev/fdset/*)
			set=$(sed -n 's|.*/dev/fdset/\([0-9]*\).*|\1|p' <<<"$w")
			case "${fdset[$set]:-}" in
			root) w=${w/\/dev\/fdset\/$set/$FILES/$(basename "$ROOTFS")} ;;
			blank) w=${w/\/dev\/fdset\/$set/$FILES/$(basename "$BLANK")} ;;
			upper) w=${w/\/dev\/fdset\/$set/$dir/upper.qcow2} ;;
			console) w=${w/\/dev\/fdset\/$set/$dir/console.log} ;;
			*) die "unknown fd set $set in sandboxd's VMM command line" ;;
			esac
			;;
		esac
		BARGV+=("$w")
	done
	case " ${BARGV[*]} " in
	*/proc/self/fd* | */dev/fdset* | *,fd=*)
		die "sandboxd's VMM command line changed; bare_argv cannot map it: ${BARGV[*]}"
		;;
	esac
	grep -q ',id=ag,' <<<" ${BARGV[*]} " || die "no agent chardev 'ag' in ${BARGV[*]}"
}

bare_argv "$WORK/bare-plain" 0
rec "# bare VMM: ${BARGV[*]}"
bare_argv "$WORK/bare-confined" 1
rec "# bare VMM, confined (as uid $BARE_UID, no_new_privs): ${BARGV[*]}"

STREAM_FLAG=()
[ "$STREAM_CMD" = dd ] && STREAM_FLAG=(-d)

# One round of sandboxd: create + first run (timed), the VMM's memory HOLD s after boot,
# EXECS runs of true, the output stream as NDJSON and over sbx-stream/1, delete.
measure_sandboxd() { # ROUND
	local r=$1 attempt line id qp other t_ready
	for attempt in $(seq 0 "$RETRIES"); do
		wait_quiet
		line=$("$VMBENCH" -P "$SBX_PID" api-boot "$SOCK" "$STATE/vms") ||
			die "sandboxd: create + run failed: $(tail -5 "$TMP/sandboxd.log")"
		t_ready=$SECONDS
		id=$(kv "$line" id)
		other=$(kv "$line" other_cpu)
		if [ "$attempt" != "$RETRIES" ] && noisy "$other"; then
			rec "discarded round=$r kind=sandboxd phase=boot $line"
			log "other work took $other CPUs during that boot: repeating it"
			api DELETE "/v1/sandboxes/$id" >/dev/null
			continue
		fi
		break
	done
	rec "run round=$r kind=sandboxd phase=boot $line"
	qp=$(vmm_pid "$id")
	sleep "$(awk -v h="$HOLD" -v d=$((SECONDS - t_ready)) 'BEGIN { print (h > d ? h - d : 0) }')"
	rec "run round=$r kind=sandboxd phase=mem $(mem "$qp") $(mem "$SBX_PID" sandboxd_)"
	line=$("$VMBENCH" -P "$SBX_PID" -P "$qp" api-exec "$SOCK" "$id" "$EXECS") ||
		die "sandboxd: runs of true failed: $(tail -5 "$TMP/sandboxd.log")"
	rec "run round=$r kind=sandboxd phase=exec $line"
	for how in ndjson attach; do
		line=$("$VMBENCH" "${STREAM_FLAG[@]}" -P "$SBX_PID" -P "$qp" api-stream "$SOCK" "$id" \
			"$STREAM_BYTES" "$how") ||
			die "sandboxd: the $how stream failed: $(tail -5 "$TMP/sandboxd.log")"
		rec "run round=$r kind=sandboxd phase=stream $line"
		kill -0 "$SBX_PID" 2>/dev/null ||
			die "sandboxd died after the $how stream: $(tail -5 "$TMP/sandboxd.log")"
	done
	api DELETE "/v1/sandboxes/$id" >/dev/null
}

# One round of a bare QEMU (vmbench does all the phases, the same as above).
measure_bare() { # ROUND KIND
	local r=$1 kind=$2 attempt dir line other uid=() out
	dir=$WORK/$kind
	bare_argv "$dir" "$([ "$kind" = bare-confined ] && echo 1 || echo 0)"
	for attempt in $(seq 0 "$RETRIES"); do
		rm -rf "$dir"
		mkdir -m 0700 "$dir"
		if [ "$kind" = bare-confined ]; then
			chown "$BARE_UID:$BARE_UID" "$dir"
			uid=(--uid "$BARE_UID")
		fi
		BARE_PIDFILE=$TMP/bare.pid
		wait_quiet
		out=$("$VMBENCH" "${STREAM_FLAG[@]}" bare --dir "$dir" --sock "$dir/ag.sock" \
			--blank "$FILES/$(basename "$BLANK")" --upper "$dir/upper.qcow2" \
			--log "$TMP/$kind-qemu.log" --pidfile "$BARE_PIDFILE" "${uid[@]}" \
			--hold "$HOLD" --exec "$EXECS" --stream "$STREAM_BYTES" -- "${BARGV[@]}") ||
			die "$kind failed: $(cat "$TMP/$kind-qemu.log" "$dir/console.log" 2>/dev/null | tail -5)"
		line=$(grep '^phase=boot ' <<<"$out")
		other=$(kv "$line" other_cpu)
		if [ "$attempt" != "$RETRIES" ] && noisy "$other"; then
			rec "discarded round=$r kind=$kind $line"
			log "other work took $other CPUs during that boot: repeating it"
			continue
		fi
		break
	done
	while IFS= read -r line; do
		rec "run round=$r kind=$kind $line"
	done <<<"$out"
	rm -rf "$dir"
}

rotate() { # N ITEMS...: the items rotated by N, so no kind always goes first
	local n=$1 k
	shift
	local a=("$@")
	for ((k = 0; k < ${#a[@]}; k++)); do
		printf '%s ' "${a[(k + n) % ${#a[@]}]}"
	done
}

kinds=(sandboxd bare-plain)
[ "$CONFINED" = 1 ] && kinds+=(bare-confined)
for r in $(seq "$ROUNDS"); do
	for k in $(rotate "$r" "${kinds[@]}"); do
		log "round $r/$ROUNDS: $k"
		case "$k" in
		sandboxd) measure_sandboxd "$r" ;;
		*) measure_bare "$r" "$k" ;;
		esac
	done
done

# ---- memory: MEM_N idle sandboxes ----

log "memory: $MEM_N idle sandboxes"
wait_quiet
rec "memn phase=before n=0 $(mem "$SBX_PID" sandboxd_)"
ids=()
for i in $(seq "$MEM_N"); do
	j=$(api POST /v1/sandboxes '{}')
	grep -q '"state":"running"' <<<"$j" || die "sandbox $i of $MEM_N did not boot: $j"
	ids+=("$(sed -n 's/.*"id":"\(sbx_[0-9a-f]*\)".*/\1/p' <<<"$j")")
done
sleep "$HOLD"
rec "memn phase=running n=$MEM_N $(mem "$SBX_PID" sandboxd_)"
for id in "${ids[@]}"; do
	rec "memn phase=vmm id=$id $(mem "$(vmm_pid "$id")")"
done
# the same sandboxes once each has run a process (its agent session and buffers in use)
for id in "${ids[@]}"; do
	api POST "/v1/sandboxes/$id/run" '{"argv":["true"]}' | grep -q '"exit_code":0' ||
		die "run true failed in sandbox $id"
done
rec "memn phase=after_run n=$MEM_N $(mem "$SBX_PID" sandboxd_)"
for id in "${ids[@]}"; do
	api DELETE "/v1/sandboxes/$id" >/dev/null
done
rec "memn phase=after_delete n=0 $(mem "$SBX_PID" sandboxd_)"
rec "# after the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- summary ----

summary=$(awk -v rounds="$ROUNDS" -v accel="$ACCEL_USED" -v mb="$STREAM_MB" -v n="$MEM_N" '
function kv(line, key,   re) {
	re = " " key "="
	if (!match(" " line, re "[^ ]*"))
		return ""
	return substr(" " line, RSTART + length(re), RLENGTH - length(re))
}
function sort_(s, a,   n, i, j, t) {
	n = split(s, a, " ")
	for (i = 2; i <= n; i++) {
		t = a[i] + 0
		for (j = i - 1; j >= 1 && a[j] + 0 > t; j--)
			a[j + 1] = a[j]
		a[j + 1] = t
	}
	return n
}
function med(s,   a, n) {
	n = sort_(s, a)
	if (!n)
		return ""
	lo = a[1]; hi = a[n]
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function cell(s, fmt, scale,   m) { # "median (min-max)"
	if (s == "")
		return "-"
	m = med(s)
	return sprintf(fmt " (" fmt "-" fmt ")", m / scale, lo / scale, hi / scale)
}
function first(csv,   parts) {
	split(csv, parts, ",")
	return parts[1]
}
function add(k, v) {
	if (v != "")
		val[k] = val[k] " " v
}
/^run / {
	r = kv($0, "round"); k = kv($0, "kind"); ph = kv($0, "phase")
	if (ph == "boot") {
		add(k "/total", kv($0, "total_ms"))
		by_round[r "/" k] = kv($0, "total_ms")
		add(k "/create", kv($0, "create_ms"))
		add(k "/first_run", kv($0, "first_run_ms"))
		add(k "/ready", kv($0, "agent_ready_ms"))
		add(k "/layer", kv($0, "layer_ms"))
		add(k "/nolayer", kv($0, "total_without_layer_ms"))
		add(k "/other", kv($0, "other_cpu"))
		if (k == "sandboxd")
			add(k "/boot_cpu", first(kv($0, "cpu_ms")))
	} else if (ph == "mem") {
		add(k "/rss", kv($0, "rss_kib")); add(k "/pss", kv($0, "pss_kib"))
	} else if (ph == "exec") {
		add(k "/exec_med", kv($0, "median_us")); add(k "/exec_p99", kv($0, "p99_us"))
		if (k == "sandboxd")
			add(k "/exec_cpu", first(kv($0, "cpu_ms")) * 1000 / kv($0, "n"))
	} else if (ph == "stream") {
		w = kv($0, "what")
		add(k "/" w, kv($0, "mb_s"))
		if (k == "sandboxd")
			add(w "/sbxd_cpu", first(kv($0, "cpu_ms")))
	}
}
/^discarded / { discarded++ }
/^memn / {
	ph = kv($0, "phase")
	if (ph == "vmm") {
		add("memn/rss", kv($0, "rss_kib")); add("memn/pss", kv($0, "pss_kib"))
	} else {
		srss[ph] = kv($0, "sandboxd_rss_kib"); spss[ph] = kv($0, "sandboxd_pss_kib")
		sanon[ph] = kv($0, "sandboxd_anon_kib"); shwm = kv($0, "sandboxd_hwm_kib")
	}
}
function ratio(a, b,   u, v) {
	if (val[a] == "" || val[b] == "")
		return "-"
	u = med(val[a]); v = med(val[b])
	return v ? sprintf("%.2f", u / v) : "-"
}
function paired(a, b,   r, s) {
	s = ""
	for (r = 1; r <= rounds; r++)
		if (((r "/" a) in by_round) && by_round[r "/" b] > 0)
			s = s " " by_round[r "/" a] / by_round[r "/" b]
	return s == "" ? "-" : sprintf("%.2f (%.2f-%.2f)", med(s), lo, hi)
}
END {
	printf "accelerator: %s; median (min-max) of %d rounds\n\n", accel, rounds
	printf "create to first exec (ms): POST /v1/sandboxes + POST .../run true, against a bare " \
	    "QEMU: qemu-img layer + boot + HELLO + EXEC true\n\n"
	printf "| | total | boot (create / agent ready) | first run of true | layer (qemu-img) |\n"
	printf "|---|---|---|---|---|\n"
	printf "| sandboxd | %s | %s | %s | (inside create) |\n", cell(val["sandboxd/total"], "%.0f", 1),
	    cell(val["sandboxd/create"], "%.0f", 1), cell(val["sandboxd/first_run"], "%.0f", 1)
	for (i = 1; i <= 2; i++) {
		k = i == 1 ? "bare-plain" : "bare-confined"
		if (val[k "/total"] == "")
			continue
		printf "| %s | %s | %s | %s | %s |\n", k, cell(val[k "/total"], "%.0f", 1),
		    cell(val[k "/ready"], "%.0f", 1), cell(val[k "/first_run"], "%.0f", 1),
		    cell(val[k "/layer"], "%.1f", 1)
	}
	printf "\nsandboxd / bare: %s (ratio of medians); per-round %s\n",
	    ratio("sandboxd/total", "bare-plain/total"), paired("sandboxd", "bare-plain")
	if (val["bare-confined/total"] != "")
		printf "sandboxd / bare confined: %s (ratio of medians); per-round %s\n",
		    ratio("sandboxd/total", "bare-confined/total"), paired("sandboxd", "bare-confined")
	r = ratio("sandboxd/total", "bare-plain/total")
	printf "goal: sandboxd adds under 10%% to create-to-first-exec: %s\n",
	    r == "-" ? "-" : (r + 0 < 1.10 ? "met" : "NOT met")
	printf "sandboxd CPU during create + first run: %s ms\n", cell(val["sandboxd/boot_cpu"], "%.0f", 1)
	printf "\nexec round trip of true (us; per round: median and p99 of %s runs)\n\n", "the"
	printf "| | median | p99 |\n|---|---|---|\n"
	printf "| sandboxd POST .../run | %s | %s |\n", cell(val["sandboxd/exec_med"], "%.0f", 1),
	    cell(val["sandboxd/exec_p99"], "%.0f", 1)
	printf "| raw channel (bare) | %s | %s |\n", cell(val["bare-plain/exec_med"], "%.0f", 1),
	    cell(val["bare-plain/exec_p99"], "%.0f", 1)
	if (val["bare-confined/exec_med"] != "")
		printf "| raw channel (bare confined) | %s | %s |\n",
		    cell(val["bare-confined/exec_med"], "%.0f", 1), cell(val["bare-confined/exec_p99"], "%.0f", 1)
	printf "\nsandboxd / raw, median: %s; sandboxd CPU per run: %s us\n",
	    ratio("sandboxd/exec_med", "bare-plain/exec_med"), cell(val["sandboxd/exec_cpu"], "%.0f", 1)
	printf "\noutput of %d MiB (MB/s)\n\n", mb
	printf "| path | MB/s | / raw | sandboxd CPU (ms) |\n|---|---|---|---|\n"
	printf "| GET .../output (NDJSON, base64) | %s | %s | %s |\n",
	    cell(val["sandboxd/api_ndjson"], "%.1f", 1), ratio("sandboxd/api_ndjson", "bare-plain/raw_channel"),
	    cell(val["api_ndjson/sbxd_cpu"], "%.0f", 1)
	printf "| attach (sbx-stream/1) | %s | %s | %s |\n",
	    cell(val["sandboxd/api_attach"], "%.1f", 1), ratio("sandboxd/api_attach", "bare-plain/raw_channel"),
	    cell(val["api_attach/sbxd_cpu"], "%.0f", 1)
	printf "| raw channel (bare) | %s | 1.00 | - |\n", cell(val["bare-plain/raw_channel"], "%.1f", 1)
	if (val["bare-confined/raw_channel"] != "")
		printf "| raw channel (bare confined) | %s | %s | - |\n",
		    cell(val["bare-confined/raw_channel"], "%.1f", 1),
		    ratio("bare-confined/raw_channel", "bare-plain/raw_channel")
	printf "\nmemory of one idle VMM, %s s after boot (MiB)\n\n| | RSS | PSS |\n|---|---|---|\n", "5"
	printf "| sandboxd VMM | %s | %s |\n", cell(val["sandboxd/rss"], "%.0f", 1024), cell(val["sandboxd/pss"], "%.0f", 1024)
	printf "| bare | %s | %s |\n", cell(val["bare-plain/rss"], "%.0f", 1024), cell(val["bare-plain/pss"], "%.0f", 1024)
	if (val["bare-confined/rss"] != "")
		printf "| bare confined | %s | %s |\n", cell(val["bare-confined/rss"], "%.0f", 1024),
		    cell(val["bare-confined/pss"], "%.0f", 1024)
	printf "| %d idle sandboxes, each VMM | %s | %s |\n", n, cell(val["memn/rss"], "%.0f", 1024),
	    cell(val["memn/pss"], "%.0f", 1024)
	printf "\nsandboxd itself (KiB), 0 -> %d idle sandboxes -> after one run of true in each " \
	    "-> all deleted:\n", n
	printf "  RSS %s -> %s -> %s -> %s: %.1f KiB per sandbox (%.1f after the runs)\n",
	    srss["before"], srss["running"], srss["after_run"], srss["after_delete"],
	    (srss["running"] - srss["before"]) / n, (srss["after_run"] - srss["before"]) / n
	printf "  PSS %s -> %s -> %s -> %s: %.1f KiB per sandbox (%.1f after the runs)\n",
	    spss["before"], spss["running"], spss["after_run"], spss["after_delete"],
	    (spss["running"] - spss["before"]) / n, (spss["after_run"] - spss["before"]) / n
	printf "  anonymous %s -> %s -> %s -> %s; peak RSS over the whole run %s KiB\n",
	    sanon["before"], sanon["running"], sanon["after_run"], sanon["after_delete"], shwm
	printf "\nother work on the machine during the kept boots: median %s CPUs; %d boots " \
	    "discarded and repeated for noise\n", med(val["sandboxd/other"] " " val["bare-plain/other"] \
	    " " val["bare-confined/other"]), discarded
}' "$RAW")

{
	echo
	echo "$summary"
} | tee -a "$RAW"
mv "$RAW" "$OUT"
RAW=
log "raw results: ${OUT#"$ROOT"/}"
