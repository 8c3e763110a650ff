#!/usr/bin/env bash
# bench/tunnel/run.sh: bytes through a sandboxd tunnel (GET …/tunnel upgraded to sbx-tunnel/1,
# over the unix socket and over TCP, and through `sandbox-cli port-forward`) against the same
# client talking to the same server directly on loopback, in the same run: 256 MiB one way
# (each way), 256 MiB both ways at once, and a 1-byte ping-pong (p50/p99 of 2000 rounds); and
# sandboxd's resident memory while the bytes flow, for one tunnel and for PAR at once. One
# command, no root needed; see docs/performance.md ("Tunnels") for how to read it.
#
# The server under test is build-bench/bin/sandboxd-fake with SANDBOXD_FAKE_AGENT: the guest
# agent (sandbox-guestd, built for the host) runs on this machine, so the path measured is
# sandboxd + the agent protocol (one unix socket, as a VM's virtio-vsock would be) + guestd's
# TCP connection to 127.0.0.1:PORT, without a VM. The tunnel's far end is the very server the
# baseline reaches directly (bench/tunnel/tunbench.c serve).
#
# Knobs (environment): ROUNDS=3 MIB=256 PINGS=2000 PAR=8 PAR_MIB=64 (PAR tunnels at once, each
# PAR_MIB both ways, for the memory bound; 0: none) QUIET_WAIT=120 (seconds to wait, before
# each run, for the CPUs to be under 30% busy) PIN=0 (1: clients on the first CPU, the servers
# on the last) BUILD=build-bench JOBS=2 KEEP_TMP=0
set -euo pipefail

ROUNDS=${ROUNDS:-3}
MIB=${MIB:-256}
PINGS=${PINGS:-2000}
PAR=${PAR:-8}
PAR_MIB=${PAR_MIB:-64}
QUIET_WAIT=${QUIET_WAIT:-120}
PIN=${PIN:-0}
JOBS=${JOBS:-2}
KEEP_TMP=${KEEP_TMP:-0}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BUILD=${BUILD:-$ROOT/build-bench}
TUNBENCH=$BUILD/bench/tunbench
SANDBOXD=$BUILD/bin/sandboxd-fake
GUESTD=$BUILD/bin/sandbox-guestd-host
CLI=$BUILD/bin/sandbox-cli
TMP=
RAW=
PIDS=()

log() {
	printf 'bench/tunnel: %s\n' "$*" >&2
}

die() {
	printf 'bench/tunnel: error: %s\n' "$*" >&2
	exit 1
}

trap fake_cleanup EXIT
trap 'exit 130' INT TERM

# ---- what it needs, and the build ----

for c in cmake ninja cc curl awk; do
	command -v "$c" >/dev/null || die "'$c' is needed (scripts/install-deps.sh installs it)"
done
TMP=$(mktemp -d /tmp/sandboxd-tunbench.XXXXXX)
build_release -j "$JOBS" sandboxd-fake sandbox-guestd-host sandbox-cli
mkdir -p "$BUILD/bench"
cc -std=gnu11 -O2 -Wall -Wextra -o "$TUNBENCH" "$ROOT/bench/tunnel/tunbench.c"
pin_cpus

# ---- the servers ----

free_port && P_SRV=$PORT
free_port && P_API=$PORT
free_port && P_PF=$PORT
SOCK=$TMP/sandboxd.sock
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
(umask 077 && printf '%s\n' "$TOKEN" >"$TMP/token")

"${server_cpus[@]}" "$TUNBENCH" serve "$P_SRV" >"$TMP/server.log" 2>&1 &
PIDS+=($!)

SANDBOXD_FAKE_BOOT_MS=1 SANDBOXD_FAKE_AGENT=$GUESTD "${server_cpus[@]}" "$SANDBOXD" \
	--state-dir "$TMP/state" --socket "$SOCK" --listen "127.0.0.1:$P_API" \
	--token-file "$TMP/token" --log-level warning >"$TMP/sandboxd.log" 2>&1 &
SBX_PID=$!
PIDS+=("$SBX_PID")
for _ in $(seq 100); do
	curl -sf -o /dev/null --unix-socket "$SOCK" http://localhost/v1/health && break
	kill -0 "$SBX_PID" 2>/dev/null || die "sandboxd did not start: $(cat "$TMP/sandboxd.log")"
	sleep 0.1
done
SBX=$(curl -sf --unix-socket "$SOCK" -H 'Content-Type: application/json' \
	-d '{"name":"tunbench"}' http://localhost/v1/sandboxes |
	sed -n 's/.*"id":"\(sbx_[0-9a-f]*\)".*/\1/p')
[ -n "$SBX" ] || die "the sandbox was not created: $(cat "$TMP/sandboxd.log")"
GUESTD_PID=$(cat "$TMP/state/fake/$SBX.guestd")
kill -0 "$GUESTD_PID" 2>/dev/null || die "the fake's agent is not running"

SANDBOX_ENDPOINT=unix://$SOCK "${server_cpus[@]}" "$CLI" port-forward "$SBX" \
	"$P_PF:$P_SRV" >"$TMP/pf.log" 2>&1 &
PF_PID=$!
PIDS+=("$PF_PID")
for _ in $(seq 100); do
	grep -q '^Forwarding from' "$TMP/pf.log" && break
	kill -0 "$PF_PID" 2>/dev/null || die "port-forward did not start: $(cat "$TMP/pf.log")"
	sleep 0.1
done

target() {
	case $1 in
	direct) echo "tcp:127.0.0.1:$P_SRV" ;;
	unix) echo "unix:$SOCK:$SBX:$P_SRV" ;;
	tcp) echo "http:127.0.0.1:$P_API:$SBX:$P_SRV" ;;
	pf) echo "tcp:127.0.0.1:$P_PF" ;;
	esac
}

client() { # TARGET OP N: one line of results; -P sandboxd, the agent, the CLI
	TUNBENCH_TOKEN=$TOKEN "${client_cpus[@]}" "$TUNBENCH" client "$(target "$1")" "$2" "$3" \
		-P "$SBX_PID" -P "$GUESTD_PID" -P "$PF_PID"
}

# ---- the run ----

results_open tunnel
rec "# bench/tunnel/run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
rec "# sandboxd $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
	"(build-bench/bin/sandboxd-fake + SANDBOXD_FAKE_AGENT=sandbox-guestd-host, Release)"
rec "# machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
	"$(nproc) CPUs, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
	"kernel $(uname -r), $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release)"
rec "# rounds=$ROUNDS mib=$MIB pings=$PINGS par=$PAR par_mib=$PAR_MIB pin=$PIN" \
	"(clients: ${client_cpus[*]:-any CPU}; servers: ${server_cpus[*]:-any CPU})"
rec "# pids: pid0=sandboxd pid1=the fake's agent (sandbox-guestd) pid2=sandbox-cli port-forward"
rec "# before the run: load average $(cut -d' ' -f1-3 /proc/loadavg), CPUs $(cpu_busy)% busy"

total=$((ROUNDS * 16))
i=0
for r in $(seq "$ROUNDS"); do
	for t in $(rotate "$r" direct unix tcp pf); do
		for op in up down both ping; do
			i=$((i + 1))
			n=$MIB
			[ "$op" = ping ] && n=$PINGS
			log "run $i/$total: round $r, $t, $op"
			wait_quiet 30
			line=$(client "$t" "$op" "$n") || die "$t $op failed"
			rec "run round=$r target=$t busy_before=$BUSY $line"
		done
	done
done

if [ "$PAR" -gt 0 ]; then
	for t in unix pf; do
		log "$PAR tunnels at once over $t, $PAR_MIB MiB both ways each"
		wait_quiet 30
		rss0=$(awk '/^VmRSS/ { print $2 }' "/proc/$SBX_PID/status")
		for k in $(seq "$PAR"); do
			client "$t" both "$PAR_MIB" >"$TMP/par-$k.out" 2>&1 &
		done
		wait_ok=1
		for k in $(seq "$PAR"); do
			wait -n || wait_ok=0
		done
		[ "$wait_ok" = 1 ] || die "a parallel client failed: $(cat "$TMP"/par-*.out)"
		for k in $(seq "$PAR"); do
			rec "par target=$t n=$PAR sbx_rss_before_kib=$rss0 $(cat "$TMP/par-$k.out")"
		done
	done
fi
rec "# sandboxd VmHWM (peak RSS over the whole run):" \
	"$(awk '/^VmHWM/ { print $2 }' "/proc/$SBX_PID/status") KiB;" \
	"the agent's: $(awk '/^VmHWM/ { print $2 }' "/proc/$GUESTD_PID/status") KiB;" \
	"port-forward's: $(awk '/^VmHWM/ { print $2 }' "/proc/$PF_PID/status") KiB"
rec "# after the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- summary ----

summary=$(awk -v mib="$MIB" -v pings="$PINGS" -v rounds="$ROUNDS" "$BENCH_AWK"'
/^run / {
	t = kv($0, "target"); op = kv($0, "op"); r = kv($0, "round")
	if (op == "ping") {
		add(t "/p50", kv($0, "p50_us"), r)
		add(t "/p99", kv($0, "p99_us"), r)
	} else {
		add(t "/" op, kv($0, "mibps"), r)
		cpu[t "/" op] = cpu[t "/" op] " " kv($0, "pid0_cpu_ms")
		agentcpu[t "/" op] = agentcpu[t "/" op] " " kv($0, "pid1_cpu_ms")
		grow = kv($0, "pid0_rss_peak_kib") - kv($0, "pid0_rss0_kib")
		if (grow > maxgrow) maxgrow = grow
		if (kv($0, "pid0_rss_peak_kib") > maxrss) maxrss = kv($0, "pid0_rss_peak_kib")
		if (t == "direct" && (minrss == "" || kv($0, "pid0_rss0_kib") < minrss))
			minrss = kv($0, "pid0_rss0_kib")
	}
}
/^par / {
	t = kv($0, "target")
	par[t] = kv($0, "n")
	pg = kv($0, "pid0_rss_peak_kib") - kv($0, "sbx_rss_before_kib")
	if (pg > pgrow[t]) pgrow[t] = pg
	pm[t] = pm[t] " " kv($0, "mibps")
}
function cell(k,   m) {
	if (!(k in vals)) return "-"
	m = med(vals[k])
	return sprintf("%.0f (%.0f-%.0f)", m, lo, hi)
}
function lcell(k,   m) {
	if (!(k in vals)) return "-"
	m = med(vals[k])
	return sprintf("%.0f (%.0f-%.0f)", m, lo, hi)
}
function paired(a, b,   r, s) { # median over rounds of a / b, measured in the same round
	s = ""
	for (r = 1; r <= rounds; r++)
		if (((r "/" a) in by) && by[r "/" b] > 0)
			s = s " " by[r "/" a] / by[r "/" b]
	return s == "" ? "-" : sprintf("%.2f", med(s))
}
END {
	split("direct unix tcp pf", ts, " ")
	name["direct"] = "direct (baseline)"; name["unix"] = "tunnel, unix socket"
	name["tcp"] = "tunnel, TCP"; name["pf"] = "sandbox-cli port-forward"
	printf "throughput, MiB/s: median (min-max) of %d rounds; %d MiB per run (both: %d MiB " \
	    "each way, counted together); ratio: the median of the per-round ratios to direct\n\n",
	    rounds, mib, mib
	printf "| path | up | ratio | down | ratio | both | ratio |\n|---|---|---|---|---|---|---|\n"
	for (i = 1; i <= 4; i++) {
		t = ts[i]
		printf "| %s | %s | %s | %s | %s | %s | %s |\n", name[t], cell(t "/up"),
		    i == 1 ? "1" : "**" paired(t "/up", "direct/up") "**", cell(t "/down"),
		    i == 1 ? "1" : "**" paired(t "/down", "direct/down") "**", cell(t "/both"),
		    i == 1 ? "1" : "**" paired(t "/both", "direct/both") "**"
	}
	printf "\n1-byte ping-pong, %d rounds, microseconds: median (min-max) over rounds of each " \
	    "run'"'"'s p50 and p99; ratio: to direct, per round\n\n", pings
	printf "| path | p50 | ratio | p99 | ratio |\n|---|---|---|---|---|\n"
	for (i = 1; i <= 4; i++) {
		t = ts[i]
		printf "| %s | %s | %s | %s | %s |\n", name[t], lcell(t "/p50"),
		    i == 1 ? "1" : "**" paired(t "/p50", "direct/p50") "**", lcell(t "/p99"),
		    i == 1 ? "1" : paired(t "/p99", "direct/p99")
	}
	printf "\nCPU time per %d MiB (ms, median): sandboxd / the agent\n\n", mib
	printf "| path | up | down | both (2x the bytes) |\n|---|---|---|---|\n"
	for (i = 2; i <= 4; i++) {
		t = ts[i]
		printf "| %s | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f |\n", name[t],
		    med(cpu[t "/up"]), med(agentcpu[t "/up"]), med(cpu[t "/down"]),
		    med(agentcpu[t "/down"]), med(cpu[t "/both"]), med(agentcpu[t "/both"])
	}
	printf "\nsandboxd RSS: %d KiB before the first transfer; the most it grew during one " \
	    "transfer: %d KiB; its peak: %d KiB\n", minrss, maxgrow, maxrss
	for (t in par) {
		m = med(pm[t])
		printf "%d tunnels at once (%s), each both ways: sandboxd grew by at most %d KiB " \
		    "(%.0f KiB per tunnel); per-tunnel MiB/s median %.0f\n", par[t], name[t],
		    pgrow[t], pgrow[t] / par[t], m
	}
}' "$RAW")

results_close "$summary"
