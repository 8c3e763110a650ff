#!/usr/bin/env bash
# bench/tunnel/vm.sh: the tunnel into a real QEMU VM (the product sandboxd, --accel tcg by
# default), with two baselines measured in the same run on the same VM:
#   - in-guest: the same client (tunbench, a static musl build) talking to the same server on
#     the guest's own loopback, started with POST …/run: what the guest alone does with these
#     bytes under this accelerator, the ceiling of anything that enters the VM;
#   - process: the same number of bytes through a guest process's stdin and stdout
#     (`sandbox-cli exec SBX -- head -c N /dev/zero`, `… -- wc -c`, `… -- cat`, each count checked):
#     the other way bytes cross the agent protocol (virtio-vsock), timed around the command, so
#     it includes the process's start (a few ms; reported alone as `exec true`).
# The tunnel itself: the host client through GET …/tunnel over the unix socket to the guest
# server. One command, as root (sandboxd confines each VMM); boots one VM. Run it under the
# machine's VM lock if others boot VMs: `flock /tmp/sbx-vm.lock bench/tunnel/vm.sh`.
#
# A process's stdin has no flow control yet: the guest agent queues at most 16 MiB of it and
# drops the rest when the process reads slower than the host sends (docs/performance.md,
# "Tunnels"), so MIB stays at 16 or less for the process baseline to be whole.
#
# Knobs (environment): ROUNDS=2 MIB=16 PINGS=2000 ACCEL=tcg (sandboxd --accel: tcg, kvm,
# auto) BUILD=build-bench JOBS=2 KEEP_TMP=0
set -euo pipefail

ROUNDS=${ROUNDS:-2}
MIB=${MIB:-16}
PINGS=${PINGS:-2000}
ACCEL=${ACCEL:-tcg}
JOBS=${JOBS:-2}
KEEP_TMP=${KEEP_TMP:-0}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BUILD=${BUILD:-$ROOT/build-bench}
BUNDLE=$BUILD/vm-bundle # shared with bench/vm/run.sh
TUNBENCH=$BUILD/bench/tunbench
GUEST_TUNBENCH=$BUILD/bench/tunbench-static
CLI=$BUILD/bin/sandbox-cli
GPORT=9000
TMP=
RAW=
SBX_PID=
SBX=

log() {
	printf 'bench/tunnel/vm: %s\n' "$*" >&2
}

die() {
	printf 'bench/tunnel/vm: error: %s\n' "$*" >&2
	exit 1
}

api() { # METHOD PATH [JSON]
	curl -sS --unix-socket "$SOCK" -X "$1" -H 'Content-Type: application/json' \
		${3:+-d "$3"} "http://localhost$2"
}

cleanup() {
	set +e
	[ -n "$SBX" ] && api DELETE "/v1/sandboxes/$SBX?force=true" >/dev/null 2>&1
	if [ -n "$SBX_PID" ]; then
		kill -TERM "$SBX_PID" 2>/dev/null
		for _ in $(seq 100); do
			kill -0 "$SBX_PID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$SBX_PID" 2>/dev/null
		wait "$SBX_PID" 2>/dev/null
	fi
	# a VMM left (VMs outlive sandboxd by design): only this run's, by its state directory
	if [ -n "$TMP" ]; then
		for p in $(pgrep -f qemu-system-x86_64 || true); do
			tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
				grep -qx "SANDBOXD_STATE_DIR=$TMP/state" && kill -KILL "$p"
		done
	fi
	scratch_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" = 0 ] || die "run as root: sandboxd confines each VMM under its own uid"
for c in cmake ninja cc musl-gcc curl base64 qemu-system-x86_64; do
	command -v "$c" >/dev/null || die "'$c' is needed (scripts/install-deps.sh installs it)"
done
TMP=$(mktemp -d /tmp/sandboxd-tunvm.XXXXXX)
build_release -j "$JOBS" sandboxd sandbox-guestd sandbox-cli
mkdir -p "$BUILD/bench"
cc -std=gnu11 -O2 -Wall -Wextra -o "$TUNBENCH" "$ROOT/bench/tunnel/tunbench.c"
musl-gcc -static -std=gnu11 -O2 -Wall -Wextra -o "$GUEST_TUNBENCH" "$ROOT/bench/tunnel/tunbench.c"

log "guest bundle in $BUNDLE (sandboxd setup; reused when up to date)"
"$BUILD/bin/sandboxd" setup --state-dir "$BUNDLE" --agent "$BUILD/bin/sandbox-guestd" \
	>"$TMP/setup.log" 2>&1 || die "sandboxd setup failed: $(tail -5 "$TMP/setup.log")"
mkdir -m 0700 "$TMP/state"
cp -al "$BUNDLE/vm" "$TMP/state/vm"
cp -al "$BUNDLE/images" "$TMP/state/images"
SOCK=$TMP/api.sock

"$BUILD/bin/sandboxd" --state-dir "$TMP/state" --socket "$SOCK" --accel "$ACCEL" \
	--log-level warning --default-image busybox --agent "$BUILD/bin/sandbox-guestd" \
	--egress off --preview-listen off >"$TMP/sandboxd.log" 2>&1 &
SBX_PID=$!
for _ in $(seq 400); do
	kill -0 "$SBX_PID" 2>/dev/null || die "sandboxd did not start: $(tail -5 "$TMP/sandboxd.log")"
	curl -s -o /dev/null --unix-socket "$SOCK" http://localhost/v1/health && break
	sleep 0.1
done
ACCEL_USED=$(api GET /v1/capabilities | sed -n 's/.*"accel":"\([a-z]*\)".*/\1/p')

log "booting a VM ($ACCEL_USED)"
created=$(api POST /v1/sandboxes '{"name":"tunvm","memory_mb":512}')
SBX=$(sed -n 's/.*"id":"\(sbx_[0-9a-f]*\)".*/\1/p' <<<"$created")
grep -q '"state":"running"' <<<"$created" || die "the VM did not boot: $created"
QEMU_PID=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$TMP/state/vms/$SBX/vm.json")
export SANDBOX_ENDPOINT=unix://$SOCK

# the server in the guest: the same tunbench, static
"$CLI" cp "$GUEST_TUNBENCH" "$SBX:/tmp/tunbench" || die "cp into the guest failed"
"$CLI" exec "$SBX" -- chmod 755 /tmp/tunbench || die "chmod in the guest failed"
api POST "/v1/sandboxes/$SBX/processes" "{\"argv\":[\"/tmp/tunbench\",\"serve\",\"$GPORT\"]}" \
	>/dev/null
for _ in $(seq 50); do
	"$TUNBENCH" client "unix:$SOCK:$SBX:$GPORT" ping 10 >/dev/null 2>&1 && break
	sleep 0.2
done

guest_client() { # OP N: tunbench client inside the guest, on its loopback
	local out
	out=$(api POST "/v1/sandboxes/$SBX/run" \
		"{\"argv\":[\"/tmp/tunbench\",\"client\",\"tcp:127.0.0.1:$GPORT\",\"$1\",\"$2\"]}")
	grep -q '"exit_code":0' <<<"$out" || die "the in-guest client failed: $out"
	sed -n 's/.*"stdout":"\([^"]*\)".*/\1/p' <<<"$out" | base64 -d
}

timed() { # SECONDS taken by the command
	local t0 t1
	t0=$(date +%s.%N)
	"$@" >/dev/null
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

proc_up() {
	local n
	n=$(head -c "$((MIB << 20))" /dev/zero | "$CLI" exec "$SBX" -- wc -c)
	[ "$n" = $((MIB << 20)) ] || die "exec wc -c counted $n bytes"
}
proc_down() {
	local n
	n=$("$CLI" exec "$SBX" -- head -c "$((MIB << 20))" /dev/zero | wc -c)
	[ "$n" = $((MIB << 20)) ] || die "exec head gave $n bytes"
}
proc_both() {
	local n
	n=$(head -c "$((MIB << 20))" /dev/zero | "$CLI" exec "$SBX" -- cat | wc -c)
	[ "$n" = $((MIB << 20)) ] || die "exec cat gave $n bytes"
}

results_open tunnel-vm
rec "# bench/tunnel/vm.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
rec "# sandboxd $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
	"(build-bench/bin/sandboxd, Release), accelerator $ACCEL_USED (--accel $ACCEL)," \
	"one VM: busybox image, 1 vCPU, 512 MiB"
rec "# machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
	"$(nproc) CPUs, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
	"kernel $(uname -r), $(qemu-system-x86_64 --version | head -1)"
rec "# rounds=$ROUNDS mib=$MIB pings=$PINGS; pid0=sandboxd pid1=QEMU"
rec "# before the run: load average $(cut -d' ' -f1-3 /proc/loadavg), CPUs $(cpu_busy)% busy"

for r in $(seq "$ROUNDS"); do
	for op in up down both ping; do
		n=$MIB
		[ "$op" = ping ] && n=$PINGS
		log "round $r: $op"
		rec "run round=$r path=guest $(guest_client "$op" "$n")"
		rec "run round=$r path=tunnel $("$TUNBENCH" client "unix:$SOCK:$SBX:$GPORT" "$op" "$n" \
			-P "$SBX_PID" -P "$QEMU_PID")"
		if [ "$op" != ping ]; then
			s=$(timed "proc_$op")
			rec "run round=$r path=process op=$op mib=$MIB secs=$s mibps=$(awk -v s="$s" \
				-v m="$MIB" -v k="$([ "$op" = both ] && echo 2 || echo 1)" \
				'BEGIN { printf "%.1f", m * k / s }')"
		fi
	done
	rec "run round=$r path=process op=exec_true secs=$(timed "$CLI" exec "$SBX" -- true)"
done
rec "# sandboxd VmHWM: $(awk '/^VmHWM/ { print $2 }' "/proc/$SBX_PID/status") KiB"
rec "# after the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

summary=$(awk -v rounds="$ROUNDS" -v mib="$MIB" "$BENCH_AWK"'
/^run / {
	p = kv($0, "path"); op = kv($0, "op"); r = kv($0, "round")
	if (op == "ping") { add(p "/p50", kv($0, "p50_us"), r); add(p "/p99", kv($0, "p99_us"), r) }
	else if (op == "exec_true") add("exec_true", kv($0, "secs") * 1000, r)
	else add(p "/" op, kv($0, "mibps"), r)
	if (p == "tunnel" && kv($0, "pid0_rss_peak_kib") - kv($0, "pid0_rss0_kib") > grow)
		grow = kv($0, "pid0_rss_peak_kib") - kv($0, "pid0_rss0_kib")
}
function cell(k,   m) {
	if (!(k in vals)) return "-"
	m = med(vals[k])
	return sprintf("%.1f (%.1f-%.1f)", m, lo, hi)
}
function paired(a, b,   r, s) {
	s = ""
	for (r = 1; r <= rounds; r++)
		if (((r "/" a) in by) && by[r "/" b] > 0)
			s = s " " by[r "/" a] / by[r "/" b]
	return s == "" ? "-" : sprintf("%.2f", med(s))
}
END {
	printf "into a VM: MiB/s, median (min-max) of %d rounds, %d MiB per run (both: each way, " \
	    "counted together)\n\n", rounds, mib
	printf "| op | in-guest loopback | tunnel | tunnel / in-guest | process stdin/stdout | " \
	    "tunnel / process |\n|---|---|---|---|---|---|\n"
	split("up down both", ops, " ")
	for (i = 1; i <= 3; i++) {
		o = ops[i]
		printf "| %s | %s | %s | **%s** | %s | **%s** |\n", o, cell("guest/" o),
		    cell("tunnel/" o), paired("tunnel/" o, "guest/" o), cell("process/" o),
		    paired("tunnel/" o, "process/" o)
	}
	printf "\n1-byte ping-pong (us): in-guest p50 %s, p99 %s; tunnel p50 %s, p99 %s; " \
	    "tunnel / in-guest p50 **%s**\n", cell("guest/p50"), cell("guest/p99"),
	    cell("tunnel/p50"), cell("tunnel/p99"), paired("tunnel/p50", "guest/p50")
	printf "sandbox-cli exec SBX -- true: %s ms (in the process column'"'"'s times)\n",
	    cell("exec_true")
	printf "sandboxd RSS grew by at most %d KiB during one tunnel transfer\n", grow
}' "$RAW")

results_close "$summary"
