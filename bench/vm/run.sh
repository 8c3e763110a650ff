#!/usr/bin/env bash
# bench/vm/run.sh: real microVMs through sandboxd against a bare QEMU started with the same
# machine, kernel, initramfs and disks, measured in the same run: create to first exec, the
# exec round trip of `true`, 64 MiB of output (NDJSON and sbx-stream/1 against the raw agent
# channel), the VMM's memory per idle sandbox and sandboxd's own memory per sandbox. One
# command; see docs/performance.md ("VM boot, exec and memory") for how to read it. Run as root.
#
# Each round boots one VM of each kind in turn (sandboxd's, a bare QEMU, a confined bare QEMU),
# then measures them side by side in interleaved batches.
#
# Knobs (environment): ROUNDS=5 BOOTS=20 (boots per kind: ROUNDS full rounds, then rounds of a
# boot only) EXECS=200 (runs of true per VM and round) BATCHES=10 STREAM_MB=64
# STREAM_CMD=dd|head (the guest writer: dd bs=64k, or busybox head -c, 5 times slower here)
# MEM_N=5 HOLD=5 (seconds after a boot when memory is read)
# ACCEL=auto (sandboxd --accel; auto tries KVM with a test boot and falls back to TCG)
# SANDBOXD=build-bench/bin/sandboxd (another sandboxd binary to measure instead)
# NOTE='...' (a line for the results file: what was special about this run)
# CONFINED=1 (also a bare QEMU under its own uid with -sandbox) KEEP_TMP=0
# QUIET_WAIT=300 QUIET_MAX=15 (before each boot, wait up to QUIET_WAIT s for the CPUs to be
# less than QUIET_MAX % busy)
# NOISE_MAX=0.3 RETRIES=2 (a measurement during which other work took more CPUs is repeated).
set -euo pipefail

ROUNDS=${ROUNDS:-5}
BOOTS=${BOOTS:-20}
EXECS=${EXECS:-200}
BATCHES=${BATCHES:-10}
STREAM_MB=${STREAM_MB:-64}
STREAM_CMD=${STREAM_CMD:-dd}
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
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BUILD=$ROOT/build-bench
VMBENCH=$BUILD/bench/vmbench
SANDBOXD=${SANDBOXD:-$BUILD/bin/sandboxd} # another build of sandboxd to measure (same options)
BUNDLE=$BUILD/vm-bundle     # the guest bundle, shared with ctest's vm/setup fixture
WORK=$BUILD/bench/vm        # this benchmark's state: fixed paths keep KVM's probe cached
STATE=$WORK/state
FILES=$WORK/files           # hard links of the guest files the bare QEMU opens by path
BARE_UID=60999              # below sandboxd's VMM uids (ranges of 1024 from 61000)
STREAM_BYTES=$((STREAM_MB << 20))
TMP=
RAW=
SBX_PID=
SOCK=
declare -A B_IN=() B_OUT=() B_PID=() B_QEMU=() # bare VMs being served, by kind

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
	local id pid i f
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
	# a vmbench serving a bare VM kills its QEMU on TERM (and on the end of its stdin)
	for pid in "${B_PID[@]}"; do
		kill -TERM "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	for f in "$TMP"/*.qemu.pid; do
		[ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
	done
	for pid in $(pgrep -f qemu-system-x86_64); do
		if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null |
			grep -qxF -e "SANDBOXD_STATE_DIR=$STATE" \
				-e "SANDBOXD_VMBENCH_DIR=$WORK/bare-plain" \
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
build_release sandboxd sandbox-guestd
cc -std=gnu11 -O2 -Wall -Wextra -o "$VMBENCH" "$ROOT/bench/vm/vmbench.c"

log "guest bundle in $BUNDLE (sandboxd setup; reused when up to date)"
"$BUILD/bin/sandboxd" setup --state-dir "$BUNDLE" --agent "$BUILD/bin/sandbox-guestd" \
	>"$TMP/setup.log" 2>&1 || die "sandboxd setup failed: $(tail -5 "$TMP/setup.log")"

# ---- helpers ----

# mem PID [PREFIX]: "rss_kib=R pss_kib=P uss_kib=U anon_kib=A hwm_kib=H" (U: its private pages,
# whatever else runs; H: the peak RSS), each key with PREFIX before it
mem() {
	awk -v p="${2:-}" '/^Rss:/ { r = $2 } /^Pss:/ { s = $2 } /^Anonymous:/ { a = $2 }
		/^Private_(Clean|Dirty):/ { u += $2 } /^VmHWM:/ { h = $2 }
		END { printf "%srss_kib=%d %spss_kib=%d %suss_kib=%d %sanon_kib=%d %shwm_kib=%d",
			p, r, p, s, p, u, p, a, p, h }' "/proc/$1/smaps_rollup" "/proc/$1/status"
}


noisy() { # OTHER_CPU: true when other work took more than NOISE_MAX CPUs
	awk -v o="$1" -v m="$NOISE_MAX" 'BEGIN { exit !(o > m) }'
}

# ---- the run ----

results_open vm

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
rec "# rounds=$ROUNDS boots=$BOOTS execs=$EXECS batches=$BATCHES" \
	"stream=${STREAM_MB}MiB ($STREAM_CMD) mem_n=$MEM_N hold=${HOLD}s confined=$CONFINED" \
	"noise_max=$NOISE_MAX"
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

start_sandboxd() {
	# --egress off: the bare QEMU it is compared with has no network either (and the host's
	# own namespace gets no table inet sandboxd from a benchmark)
	"$SANDBOXD" --state-dir "$STATE" --socket "$SOCK" --accel "$ACCEL" --log-level info \
		--default-image busybox --agent "$BUILD/bin/sandbox-guestd" --egress off \
		>>"$TMP/sandboxd.log" 2>&1 &
	SBX_PID=$!
	for _ in $(seq 400); do # an auto probe of KVM takes up to 15 s
		kill -0 "$SBX_PID" 2>/dev/null ||
			die "sandboxd did not start: $(tail -5 "$TMP/sandboxd.log")"
		curl -s -o /dev/null --unix-socket "$SOCK" http://localhost/v1/health && return 0
		sleep 0.1
	done
	die "sandboxd did not answer: $(tail -5 "$TMP/sandboxd.log")"
}

stop_sandboxd() { # with no sandbox left
	kill -TERM "$SBX_PID"
	wait "$SBX_PID" 2>/dev/null || true
	SBX_PID=
}

start_sandboxd
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
# descriptor passing left over means daemon/vm/qemu.c changed its command line: stop.
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
			w="socket,id=${BASH_REMATCH[1]},path=$dir/${BASH_REMATCH[1]}.sock"
			w="$w,${BASH_REMATCH[2]}"
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

# A measurement that prints one line: repeated (RETRIES times at most, after waiting for
# quiet) while other work took more than NOISE_MAX CPUs during it; the decision looks only at
# that noise, never at the result. Sets LINE; repeated lines stay in the results as discarded.
measured() { # ROUND KIND PHASE COMMAND...
	local r=$1 k=$2 ph=$3 attempt other
	shift 3
	for attempt in $(seq 0 "$RETRIES"); do
		LINE=$("$@") || die "$k: $ph failed: $(tail -5 "$TMP/sandboxd.log")"
		case "$LINE" in phase=*) LINE=${LINE#* } ;; esac
		other=$(kv "$LINE" other_cpu)
		if [ "$attempt" != "$RETRIES" ] && noisy "$other"; then
			rec "discarded round=$r kind=$k phase=$ph $LINE"
			log "other work took $other CPUs during that $k $ph: repeating it"
			wait_quiet "$QUIET_MAX"
			continue
		fi
		break
	done
	rec "run round=$r kind=$k phase=$ph $LINE"
}

# ---- sandboxd ----

SBX_ID=
sbx_boot() {
	"$VMBENCH" -P "$SBX_PID" api-boot "$SOCK" "$STATE/vms"
}
sbx_exec() { # N
	"$VMBENCH" -P "$SBX_PID" -P "$SBX_QEMU" api-exec "$SOCK" "$SBX_ID" "$1"
}
sbx_stream() { # ndjson|attach
	"$VMBENCH" "${STREAM_FLAG[@]}" -P "$SBX_PID" -P "$SBX_QEMU" api-stream "$SOCK" "$SBX_ID" \
		"$STREAM_BYTES" "$1"
}

boot_sandboxd() { # ROUND [quick: no memory reading]
	local r=$1 quick=${2:-} attempt other
	for attempt in $(seq 0 "$RETRIES"); do
		wait_quiet "$QUIET_MAX"
		LINE=$(sbx_boot) ||
			die "sandboxd: create + run failed: $(tail -5 "$TMP/sandboxd.log")"
		SBX_ID=$(kv "$LINE" id)
		other=$(kv "$LINE" other_cpu)
		if [ "$attempt" != "$RETRIES" ] && noisy "$other"; then
			rec "discarded round=$r kind=sandboxd phase=boot $LINE"
			log "other work took $other CPUs during that boot: repeating it"
			api DELETE "/v1/sandboxes/$SBX_ID" >/dev/null
			continue
		fi
		break
	done
	rec "run round=$r kind=sandboxd phase=boot $LINE"
	SBX_QEMU=$(vmm_pid "$SBX_ID")
	[ -n "$SBX_QEMU" ] || die "no VMM recorded for $SBX_ID"
	[ -z "$quick" ] || return 0
	sleep "$HOLD" # its memory, HOLD s after it answered
	rec "run round=$r kind=sandboxd phase=mem $(mem "$SBX_QEMU") $(mem "$SBX_PID" sandboxd_)"
}

# ---- bare QEMUs: vmbench boots one and then serves requests over two FIFOs ----

bare_stop() { # KIND
	local k=$1 fd
	[ -n "${B_PID[$k]:-}" ] || return 0
	fd=${B_IN[$k]}
	{ echo quit >&"$fd"; } 2>/dev/null || true
	exec {fd}>&-
	fd=${B_OUT[$k]}
	exec {fd}<&-
	wait "${B_PID[$k]}" 2>/dev/null || true
	unset "B_PID[$k]" "B_IN[$k]" "B_OUT[$k]" "B_QEMU[$k]"
	rm -rf "${WORK:?}/$k"
}

bare_req() { # KIND REQUEST: vmbench's answer (one line)
	local k=$1 line
	echo "$2" >&"${B_IN[$k]}"
	read -r -t 600 -u "${B_OUT[$k]}" line || {
		echo "$k: no answer to '$2': $(tail -3 "$TMP/$k.err")" >&2
		return 1
	}
	printf '%s\n' "$line"
}

boot_bare() { # ROUND KIND [quick: no memory reading]
	local r=$1 k=$2 quick=${3:-} attempt dir=$WORK/$2 uid=() in out other
	bare_argv "$dir" "$([ "$k" = bare-confined ] && echo 1 || echo 0)"
	for attempt in $(seq 0 "$RETRIES"); do
		rm -rf "$dir"
		mkdir -m 0700 "$dir"
		if [ "$k" = bare-confined ]; then
			chown "$BARE_UID:$BARE_UID" "$dir"
			uid=(--uid "$BARE_UID")
		fi
		rm -f "$TMP/$k.in" "$TMP/$k.out"
		mkfifo -m 0600 "$TMP/$k.in" "$TMP/$k.out"
		wait_quiet "$QUIET_MAX"
		"$VMBENCH" "${STREAM_FLAG[@]}" bare --dir "$dir" --sock "$dir/ag.sock" \
			--blank "$FILES/$(basename "$BLANK")" --upper "$dir/upper.qcow2" \
			--log "$TMP/$k-qemu.log" --pidfile "$TMP/$k.qemu.pid" "${uid[@]}" \
			--serve 1 -- "${BARGV[@]}" <"$TMP/$k.in" >"$TMP/$k.out" 2>"$TMP/$k.err" &
		B_PID[$k]=$!
		exec {in}>"$TMP/$k.in"
		exec {out}<"$TMP/$k.out"
		B_IN[$k]=$in
		B_OUT[$k]=$out
		read -r -t 600 -u "$out" LINE ||
			die "$k did not boot: $(cat "$TMP/$k.err" "$TMP/$k-qemu.log" \
				"$dir/console.log" 2>/dev/null | tail -5)"
		B_QEMU[$k]=$(kv "$LINE" qemu_pid)
		other=$(kv "$LINE" other_cpu)
		if [ "$attempt" != "$RETRIES" ] && noisy "$other"; then
			rec "discarded round=$r kind=$k $LINE"
			log "other work took $other CPUs during that boot: repeating it"
			bare_stop "$k"
			continue
		fi
		break
	done
	rec "run round=$r kind=$k $LINE"
	[ -z "$quick" ] || return 0
	sleep "$HOLD"
	rec "run round=$r kind=$k phase=mem $(mem "${B_QEMU[$k]}")"
}


# Each round boots one VM of each kind, one after the other (each alone on a quiet machine),
# then measures them side by side: runs of true in BATCHES interleaved batches, then the
# output streams in turn, so that whatever else the machine does falls on all of them alike.
kinds=(sandboxd bare-plain)
[ "$CONFINED" = 1 ] && kinds+=(bare-confined)
streams=(sandboxd/ndjson bare-plain/raw sandboxd/attach)
[ "$CONFINED" = 1 ] && streams+=(bare-confined/raw)
per_batch=$(((EXECS + BATCHES - 1) / BATCHES))
for r in $(seq "$ROUNDS"); do
	for k in $(rotate "$r" "${kinds[@]}"); do
		log "round $r/$ROUNDS: boot $k"
		case "$k" in
		sandboxd) boot_sandboxd "$r" ;;
		*) boot_bare "$r" "$k" ;;
		esac
	done
	log "round $r/$ROUNDS: runs of true"
	wait_quiet "$QUIET_MAX"
	for b in $(seq "$BATCHES"); do
		for k in $(rotate "$b" "${kinds[@]}"); do
			case "$k" in
			sandboxd) measured "$r" "$k" exec sbx_exec "$per_batch" ;;
			*) measured "$r" "$k" exec bare_req "$k" "exec $per_batch" ;;
			esac
		done
	done
	log "round $r/$ROUNDS: ${STREAM_MB} MiB of output"
	for st in $(rotate "$r" "${streams[@]}"); do
		k=${st%/*}
		case "$st" in
		sandboxd/*) measured "$r" "$k" stream sbx_stream "${st#*/}" ;;
		*) measured "$r" "$k" stream bare_req "$k" "stream $STREAM_BYTES" ;;
		esac
		kill -0 "$SBX_PID" 2>/dev/null ||
			die "sandboxd died during the $st stream: $(tail -5 "$TMP/sandboxd.log")"
	done
	for k in "${kinds[@]}"; do
		case "$k" in
		sandboxd) api DELETE "/v1/sandboxes/$SBX_ID" >/dev/null ;;
		*) bare_stop "$k" ;;
		esac
	done
done

# More boots, alone: a TCG boot varies by a few hundred ms from one to the next.
for r in $(seq $((ROUNDS + 1)) "$BOOTS"); do
	log "boot-only round $r/$BOOTS"
	for k in $(rotate "$r" "${kinds[@]}"); do
		case "$k" in
		sandboxd)
			boot_sandboxd "$r" quick
			api DELETE "/v1/sandboxes/$SBX_ID" >/dev/null
			;;
		*)
			boot_bare "$r" "$k" quick
			bare_stop "$k"
			;;
		esac
	done
done

# ---- memory: MEM_N idle sandboxes ----

# A fresh sandboxd (none of the rounds' heap), warmed by one create and delete: then its
# memory before and after MEM_N sandboxes.
log "memory: $MEM_N idle sandboxes, on a fresh sandboxd"
stop_sandboxd
start_sandboxd
j=$(api POST /v1/sandboxes '{}')
grep -q '"state":"running"' <<<"$j" || die "the warm-up sandbox did not boot: $j"
api DELETE "/v1/sandboxes/$(sed -n 's/.*"id":"\(sbx_[0-9a-f]*\)".*/\1/p' <<<"$j")" >/dev/null
wait_quiet "$QUIET_MAX"
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

summary=$(awk -v rounds="$ROUNDS" -v boots="$BOOTS" -v accel="$ACCEL_USED" -v mb="$STREAM_MB" \
	-v n="$MEM_N" -v hold="$HOLD" -v confined="$CONFINED" '
function kv(line, key,   re) {
	re = " " key "="
	if (!match(" " line, re "[^ ]*"))
		return ""
	return substr(" " line, RSTART + length(re), RLENGTH - length(re))
}
function sort_(s, a,   k, i, j, t) { # numbers separated by spaces or commas, sorted into a
	gsub(/,/, " ", s)
	k = split(s, a, " ")
	for (i = 2; i <= k; i++) {
		t = a[i] + 0
		for (j = i - 1; j >= 1 && a[j] + 0 > t; j--)
			a[j + 1] = a[j]
		a[j + 1] = t
	}
	return k
}
function med(s,   a, k) { # sets lo and hi too
	k = sort_(s, a)
	if (!k)
		return ""
	lo = a[1]; hi = a[k]
	return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
function quant(s, q,   a, k, i) { # nearest rank
	k = sort_(s, a)
	i = int(k * q + 0.999999)
	return a[i < 1 ? 1 : i]
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
function ratio(a, b,   u, v) { # of the medians
	if (val[a] == "" || val[b] == "")
		return "-"
	u = med(val[a]); v = med(val[b])
	return v ? sprintf("%.2f", u / v) : "-"
}
function paired(a, b,   r, s) { # the median, min and max over rounds of a / b in one round
	s = ""
	for (r = 1; r <= boots || r <= rounds; r++)
		if (((r "/" a) in rv) && rv[r "/" b] > 0)
			s = s " " rv[r "/" a] / rv[r "/" b]
	return s == "" ? "-" : sprintf("%.2f (%.2f-%.2f)", med(s), lo, hi)
}
/^run / {
	r = kv($0, "round"); k = kv($0, "kind"); ph = kv($0, "phase")
	if (ph == "boot") {
		add(k "/total", kv($0, "total_ms")); rv[r "/" k "/total"] = kv($0, "total_ms")
		add(k "/create", kv($0, "create_ms"))
		add(k "/first_run", kv($0, "first_run_ms"))
		add(k "/ready", kv($0, "agent_ready_ms"))
		add(k "/layer", kv($0, "layer_ms"))
		add(k "/started", kv($0, "qemu_started_ms"))
		if (kv($0, "agent_ready_ms") != "") # bare: from the start, like a create
			add(k "/ready_abs", kv($0, "layer_ms") + kv($0, "agent_ready_ms"))
		add("boot/other", kv($0, "other_cpu"))
		if (k == "sandboxd")
			add(k "/boot_cpu", first(kv($0, "cpu_ms")))
	} else if (ph == "mem") {
		add(k "/rss", kv($0, "rss_kib")); add(k "/pss", kv($0, "pss_kib"))
		add(k "/anon", kv($0, "anon_kib"))
	} else if (ph == "exec") {
		ex[r "/" k] = ex[r "/" k] " " kv($0, "samples_us")
		add("exec/other", kv($0, "other_cpu"))
		if (k == "sandboxd") {
			excpu += first(kv($0, "cpu_ms")); exn += kv($0, "n")
		}
	} else if (ph == "stream") {
		w = kv($0, "what")
		add(k "/" w, kv($0, "mb_s")); rv[r "/" k "/" w] = kv($0, "mb_s")
		add("stream/other", kv($0, "other_cpu"))
		if (k == "sandboxd")
			add(w "/sbxd_cpu", first(kv($0, "cpu_ms")))
	}
}
/^discarded / { discarded++ }
/^memn / {
	ph = kv($0, "phase")
	if (ph == "vmm") {
		add("memn/rss", kv($0, "rss_kib")); add("memn/pss", kv($0, "pss_kib"))
		add("memn/anon", kv($0, "anon_kib"))
	} else {
		srss[ph] = kv($0, "sandboxd_rss_kib"); spss[ph] = kv($0, "sandboxd_pss_kib")
		sanon[ph] = kv($0, "sandboxd_anon_kib"); shwm = kv($0, "sandboxd_hwm_kib")
	}
}
END {
	nk = split("sandboxd bare-plain bare-confined", kinds, " ")
	for (r = 1; r <= rounds; r++)
		for (i = 1; i <= nk; i++)
			if ((r "/" kinds[i]) in ex) {
				m = quant(ex[r "/" kinds[i]], 0.5)
				add(kinds[i] "/exec_med", m); rv[r "/" kinds[i] "/exec"] = m
				add(kinds[i] "/exec_p99", quant(ex[r "/" kinds[i]], 0.99))
			}
	printf "accelerator: %s; median (min-max) of %d boots, %d rounds of runs and streams\n\n",
	    accel, (boots > rounds ? boots : rounds), rounds
	printf "create to first exec (ms): sandboxd = POST /v1/sandboxes, then POST .../run " \
	    "true; bare = qemu-img layer, QEMU, HELLO, EXEC true\n\n"
	printf "| | total | until QEMU starts | until the agent answers | first run of true |\n"
	printf "|---|---|---|---|---|\n"
	printf "| sandboxd | %s | %s (+-10) | %s | %s |\n", cell(val["sandboxd/total"], "%.0f", 1),
	    cell(val["sandboxd/started"], "%.0f", 1), cell(val["sandboxd/create"], "%.0f", 1),
	    cell(val["sandboxd/first_run"], "%.0f", 1)
	for (i = 2; i <= nk; i++)
		if (val[kinds[i] "/total"] != "") {
			printf "| %s | %s | %s | %s | %s |\n", kinds[i],
			    cell(val[kinds[i] "/total"], "%.0f", 1),
			    cell(val[kinds[i] "/layer"], "%.0f", 1),
			    cell(val[kinds[i] "/ready_abs"], "%.0f", 1),
			    cell(val[kinds[i] "/first_run"], "%.0f", 1)
		}
	printf "\nsandboxd / bare: %s (ratio of the medians), per round %s\n",
	    ratio("sandboxd/total", "bare-plain/total"),
	    paired("sandboxd/total", "bare-plain/total")
	if (val["bare-confined/total"] != "")
		printf "sandboxd / bare confined: %s (ratio of the medians), per round %s\n",
		    ratio("sandboxd/total", "bare-confined/total"),
		    paired("sandboxd/total", "bare-confined/total")
	q = ratio("sandboxd/total", "bare-plain/total")
	printf "goal: sandboxd adds under 10%% to create-to-first-exec: %s\n",
	    q == "-" ? "-" : (q + 0 < 1.10 ? "met (" q ")" : "NOT met (" q ")")
	printf "sandboxd CPU time during a create and first run: %s ms\n",
	    cell(val["sandboxd/boot_cpu"], "%.0f", 1)

	printf "\nexec round trip of true (ms; each round: median and p99 of its runs, " \
	    "in batches interleaved with the other kinds)\n\n| | median | p99 |\n|---|---|---|\n"
	printf "| sandboxd, POST .../run | %s | %s |\n",
	    cell(val["sandboxd/exec_med"], "%.2f", 1000),
	    cell(val["sandboxd/exec_p99"], "%.2f", 1000)
	for (i = 2; i <= nk; i++)
		if (val[kinds[i] "/exec_med"] != "")
			printf "| %s, raw channel | %s | %s |\n", kinds[i],
			    cell(val[kinds[i] "/exec_med"], "%.2f", 1000),
			    cell(val[kinds[i] "/exec_p99"], "%.2f", 1000)
	printf "\nsandboxd / raw, median: %s, per round %s; sandboxd CPU per run: %.0f us\n",
	    ratio("sandboxd/exec_med", "bare-plain/exec_med"),
	    paired("sandboxd/exec", "bare-plain/exec"), exn ? excpu * 1000 / exn : 0

	printf "\n%d MiB of output from a guest process (MB/s)\n\n", mb
	printf "| path | MB/s | / raw (of medians) | / raw, per round | sandboxd CPU (ms) |\n"
	printf "|---|---|---|---|---|\n"
	printf "| sandboxd, GET .../output (NDJSON, base64) | %s | %s | %s | %s |\n",
	    cell(val["sandboxd/api_ndjson"], "%.1f", 1),
	    ratio("sandboxd/api_ndjson", "bare-plain/raw_channel"),
	    paired("sandboxd/api_ndjson", "bare-plain/raw_channel"),
	    cell(val["api_ndjson/sbxd_cpu"], "%.0f", 1)
	printf "| sandboxd, attach (sbx-stream/1) | %s | %s | %s | %s |\n",
	    cell(val["sandboxd/api_attach"], "%.1f", 1),
	    ratio("sandboxd/api_attach", "bare-plain/raw_channel"),
	    paired("sandboxd/api_attach", "bare-plain/raw_channel"),
	    cell(val["api_attach/sbxd_cpu"], "%.0f", 1)
	printf "| bare-plain, raw channel | %s | 1.00 | | |\n",
	    cell(val["bare-plain/raw_channel"], "%.1f", 1)
	if (val["bare-confined/raw_channel"] != "")
		printf "| bare-confined, raw channel | %s | %s | %s | |\n",
		    cell(val["bare-confined/raw_channel"], "%.1f", 1),
		    ratio("bare-confined/raw_channel", "bare-plain/raw_channel"),
		    paired("bare-confined/raw_channel", "bare-plain/raw_channel")

	printf "\nmemory of an idle VMM, %s s after its boot (MiB; anonymous: guest RAM touched " \
	    "and TCG code, its own whatever else runs; PSS shares the mapped kernel file and " \
	    "QEMU with the VMs running then)\n\n", hold
	printf "| | RSS | anonymous | PSS |\n|---|---|---|---|\n"
	for (i = 1; i <= nk; i++)
		if (val[kinds[i] "/rss"] != "")
			printf "| %s, in the rounds | %s | %s | %s |\n",
			    kinds[i] == "sandboxd" ? "sandboxd VMM" : kinds[i],
			    cell(val[kinds[i] "/rss"], "%.0f", 1024),
			    cell(val[kinds[i] "/anon"], "%.0f", 1024),
			    cell(val[kinds[i] "/pss"], "%.0f", 1024)
	printf "| sandboxd VMM, %d idle sandboxes | %s | %s | %s |\n", n,
	    cell(val["memn/rss"], "%.0f", 1024), cell(val["memn/anon"], "%.0f", 1024),
	    cell(val["memn/pss"], "%.0f", 1024)

	printf "\nsandboxd itself (KiB; restarted, one sandbox created and deleted): no sandbox " \
	    "-> %d idle ones -> each has run true once -> all deleted\n", n
	printf "  RSS %s -> %s -> %s -> %s: %.1f KiB per sandbox (%.1f after the runs)\n",
	    srss["before"], srss["running"], srss["after_run"], srss["after_delete"],
	    (srss["running"] - srss["before"]) / n, (srss["after_run"] - srss["before"]) / n
	printf "  anonymous %s -> %s -> %s -> %s: %.1f KiB per sandbox (%.1f after the runs)\n",
	    sanon["before"], sanon["running"], sanon["after_run"], sanon["after_delete"],
	    (sanon["running"] - sanon["before"]) / n, (sanon["after_run"] - sanon["before"]) / n
	printf "  (PSS, in the raw lines, falls as the VMMs share its libraries); peak RSS of " \
	    "this sandboxd: %s KiB\n", shwm

	printf "\nother work on the machine, median CPUs during the kept boots %s, runs of true " \
	    "%s, streams %s; %d measurements discarded and repeated for noise\n",
	    med(val["boot/other"]), med(val["exec/other"]), med(val["stream/other"]), discarded
}' "$RAW")
results_close "$summary"
