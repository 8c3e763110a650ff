#!/usr/bin/env bash
# bench/egress/run.sh: the egress proxy (`sandboxd egress-worker`, egress/worker.h) against
# the same transfers without it and through tinyproxy (Debian), in the same run: a 100 MiB
# HTTPS download, 1000 short HTTP connections (rate with 8 in flight; connect to first byte
# one at a time) and the worker's memory per connection while splicing 50 and 400 long
# downloads. One command, as root; see docs/performance.md ("Egress") for how to read it.
#
# Three network namespaces, made here and deleted at the end (also on failure): a guest whose
# link's host side is named like a sandbox tap, a host running the worker (started
# standalone through a control socketpair, with the nftables table sandboxd writes, from
# egress/nftrules.c itself) and tinyproxy, and a server on a TEST-NET address. The machine's
# own network and ruleset are not touched.
#
# Knobs (environment): ROUNDS=3 SIZE_MB=100 CONNS=1000 CONC=8 MEM_COUNTS="50 400"
# MEM_SECONDS=12 MEM_RATE_MB=32 (the memory phase: every connection paced so that all of
# them together move MEM_RATE_MB MiB/s for MEM_SECONDS s) MEM_TINYPROXY=1 (the same for
# tinyproxy, as a reference) QUIET_WAIT=60 QUIET_MAX=0.5 (before each round, wait at most
# QUIET_WAIT s for a second in which other work uses under QUIET_MAX CPUs) WORKER_UID=61128
# BUILD=build-bench SANDBOXD=$BUILD/bin/sandboxd JOBS= NOTE='...' KEEP_TMP=0 PERF=0 (1: after
# the rounds, profile each path with perf and strace; reports kept in the temporary directory)
# PIN=0 (1: the clients and the server on CPU 0, the worker and tinyproxy on CPU 1: the proxy
# with a core of its own, as on a host whose guests run on other cores)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SIZE_MB=${SIZE_MB:-100}
CONNS=${CONNS:-1000}
CONC=${CONC:-8}
MEM_COUNTS=${MEM_COUNTS:-50 400}
MEM_SECONDS=${MEM_SECONDS:-12}
MEM_RATE_MB=${MEM_RATE_MB:-32}
MEM_TINYPROXY=${MEM_TINYPROXY:-1}
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_MAX=${QUIET_MAX:-0.5}
WORKER_UID=${WORKER_UID:-61128}
PERF=${PERF:-0}
PIN=${PIN:-0}
KEEP_TMP=${KEEP_TMP:-0}
JOBS=${JOBS:-}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BUILD=${BUILD:-$ROOT/build-bench}
SANDBOXD=${SANDBOXD:-$BUILD/bin/sandboxd}
EGBENCH=$BUILD/bench/egbench
NFTGEN=$BUILD/bench/nftgen

# The topology. The guest's link is named like a sandbox's tap (sbx<digits>) so that the
# table treats it as one; the server's link must not be (the table drops what taps send).
NS_G=sbxb-guest
NS_H=sbxb-host
NS_S=sbxb-srv
TAP=sbx900
HOST_IP=10.201.0.1
GUEST_IP=10.201.0.2
UP_IP=198.51.100.1
SRV_IP=198.51.100.10 # TEST-NET-2: the worker dials it (it refuses private addresses)
NAME=origin.egress-bench.example
PROXY_PORT=3128
DNS_PORT=7353
TP_PORT=8888
# The direct path: ports the table does not redirect, forwarded by the host
D_TLS=8443
D_HTTP=8080

TMP=
RAW=
PIDS=()
CGROUPS=()
DRIVE_PID=
WORKER_PID=
WORKER_CG=
TP_PID=
TP_CG=

log() {
	printf 'bench/egress: %s\n' "$*" >&2
}

die() {
	printf 'bench/egress: error: %s\n' "$*" >&2
	exit 1
}

stop_pid() { # PID: TERM, then KILL after 3 s; waits for it
	local p=$1
	[ -n "$p" ] && kill -TERM "$p" 2>/dev/null || return 0
	for _ in $(seq 30); do
		if ! kill -0 "$p" 2>/dev/null; then
			wait "$p" 2>/dev/null || true
			return 0
		fi
		sleep 0.1
	done
	kill -KILL "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
}

ns_delete() { # NAME: ends what still runs in it (only ever this script's), then deletes it
	local p
	ip netns list 2>/dev/null | grep -qw "^$1" || return 0
	for p in $(ip netns pids "$1" 2>/dev/null); do
		kill -KILL "$p" 2>/dev/null || true
	done
	ip netns delete "$1" 2>/dev/null || true
}

cleanup() {
	set +e
	local i c
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		stop_pid "${PIDS[i]}"
	done
	for n in "$NS_G" "$NS_H" "$NS_S"; do
		ns_delete "$n"
	done
	for c in "${CGROUPS[@]}"; do
		rmdir "$c" 2>/dev/null
	done
	scratch_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- what it needs, and the build ----

[ "$(id -u)" = 0 ] || die "run as root: it makes network namespaces and nftables tables in them"
for c in cmake ninja cc ip ss nft unshare mount openssl curl flock awk /usr/bin/time; do
	command -v "$c" >/dev/null || die "'$c' is needed"
done
mkdir -p "$BUILD/bench"
# one lock for the machine, not per build: the namespaces' and cgroups' names are fixed
exec 9>"${TMPDIR:-/tmp}/sandboxd-bench-egress.lock"
flock -n 9 || die "another bench/egress/run.sh is running"
TMP=$(mktemp -d /tmp/sandboxd-egbench.XXXXXX)
chmod 755 "$TMP"

# tinyproxy from Debian, as bench/api installs nginx; a system tinyproxy that the install
# starts is stopped again (the benchmark runs its own in the host namespace).
if ! command -v tinyproxy >/dev/null; then
	log "installing tinyproxy from Debian"
	# pgrep exits 1 when no tinyproxy runs: under pipefail that would end the script here
	before=" $(pgrep -x tinyproxy | tr '\n' ' ' || true) "
	export DEBIAN_FRONTEND=noninteractive
	apt=(apt-get -o DPkg::Lock::Timeout=300 -y -qq)
	if ! "${apt[@]}" install --no-install-recommends tinyproxy >"$TMP/apt.log" 2>&1; then
		"${apt[@]}" update >>"$TMP/apt.log" 2>&1 || true
		"${apt[@]}" install --no-install-recommends tinyproxy >>"$TMP/apt.log" 2>&1 || {
			tail -20 "$TMP/apt.log" >&2
			die "apt-get install tinyproxy failed"
		}
	fi
	for p in $(pgrep -x tinyproxy || true); do
		case "$before" in *" $p "*) continue ;; esac
		log "stopping the system tinyproxy (pid $p) that the install started"
		stop_pid "$p"
	done
fi

build_release ${JOBS:+-j "$JOBS"} sandboxd egresscore sbxcommon
cc -std=gnu11 -O2 -Wall -Wextra -o "$EGBENCH" "$ROOT/bench/egress/egbench.c" -lssl -lcrypto \
	-lpthread
cc -std=gnu11 -O2 -Wall -Wextra -I"$ROOT/egress" -I"$ROOT/lib" -o "$NFTGEN" \
	"$ROOT/bench/egress/nftgen.c" "$BUILD/egress/libegresscore.a" "$BUILD/lib/libsbxcommon.a"

# ---- the namespaces ----

for n in "$NS_G" "$NS_H" "$NS_S"; do
	ns_delete "$n" # left by a run that was killed
	ip netns add "$n"
	ip -n "$n" link set lo up
done
ip -n "$NS_H" link add "$TAP" type veth peer name eth0 netns "$NS_G"
ip -n "$NS_H" link add upl0 type veth peer name eth0 netns "$NS_S"
ip -n "$NS_H" addr add "$HOST_IP/30" dev "$TAP"
ip -n "$NS_H" addr add "$UP_IP/24" dev upl0
ip -n "$NS_H" link set "$TAP" up
ip -n "$NS_H" link set upl0 up
ip -n "$NS_G" addr add "$GUEST_IP/30" dev eth0
ip -n "$NS_G" link set eth0 up
ip -n "$NS_G" route add default via "$HOST_IP"
ip -n "$NS_S" addr add "$SRV_IP/24" dev eth0
ip -n "$NS_S" link set eth0 up
ip -n "$NS_S" route add default via "$UP_IP"
ip netns exec "$NS_H" sysctl -qw net.ipv4.ip_forward=1

# The table sandboxd writes for this one sandbox, and three rules only the benchmark adds,
# each for a baseline and none on the proxy's path: the direct ports forwarded both ways
# (sandboxd forwards nothing from a tap) and tinyproxy's port open to the guest.
{
	"$NFTGEN" "$TAP" "$HOST_IP" "$GUEST_IP" "$PROXY_PORT" "$DNS_PORT"
	echo "insert rule inet sandboxd forward iifname \"$TAP\" ip daddr $SRV_IP" \
		"tcp dport { $D_HTTP, $D_TLS } accept"
	echo "insert rule inet sandboxd forward oifname \"$TAP\" ip saddr $SRV_IP" \
		"tcp sport { $D_HTTP, $D_TLS } accept"
	echo "insert rule inet sandboxd guest ip daddr $HOST_IP tcp dport $TP_PORT accept"
} >"$TMP/table.nft"
ip netns exec "$NS_H" nft -f "$TMP/table.nft" || die "nft refused the table ($TMP/table.nft)"

# /etc/hosts for the host namespace's resolvers (the worker's, tinyproxy's), bound over the
# real one in a private mount namespace of their own
printf '127.0.0.1 localhost\n%s %s\n' "$SRV_IP" "$NAME" >"$TMP/hosts"
chmod 644 "$TMP/hosts"
# shellcheck disable=SC2016 # $0 and $@ are the inner shell's
WITH_HOSTS='mount --bind "$0" /etc/hosts && exec "$@"'

# A memory cgroup (v1) for a process and its children: the kernel memory it is charged for
# (pipes, sockets, its threads' kernel stacks) is not in its RSS. Empty when there is none.
CG_BASE=
cg_line=$(grep -E '^[0-9]+:memory:' /proc/self/cgroup || true)
if [ -n "$cg_line" ] && [ -d "/sys/fs/cgroup/memory${cg_line##*:}" ]; then
	CG_BASE=/sys/fs/cgroup/memory${cg_line##*:}
fi
cg_new() { # NAME: sets CG (or empty)
	CG=
	[ -n "$CG_BASE" ] || return 0
	[ ! -d "$CG_BASE/$1" ] || rmdir "$CG_BASE/$1" 2>/dev/null || true
	if mkdir "$CG_BASE/$1" 2>/dev/null; then
		CG=$CG_BASE/$1
		CGROUPS+=("$CG")
	fi
}
# sh -c "$IN_CG" CG COMMAND...: the command, in that cgroup when there is one (a shell, not a
# function: what runs in the background must be the very process whose pid $! gives)
# shellcheck disable=SC2016 # $0, $$ and $@ are the inner shell's
IN_CG='[ -z "$0" ] || echo $$ >"$0/cgroup.procs" || exit 1; exec "$@"'
kmem_kib() { # CG
	if [ -n "$1" ] && [ -r "$1/memory.kmem.usage_in_bytes" ]; then
		echo $(($(cat "$1/memory.kmem.usage_in_bytes") / 1024))
	else
		echo 0
	fi
}

# ---- the servers ----

ulimit -n "$(ulimit -Hn)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-subj "/CN=$NAME" -addext "subjectAltName=DNS:$NAME" \
	-keyout "$TMP/key.pem" -out "$TMP/cert.pem" >/dev/null 2>&1 || die "openssl req failed"

ip netns exec "$NS_S" "$EGBENCH" serve --addr 0.0.0.0 --tls "443,$D_TLS" --http "80,$D_HTTP" \
	--cert "$TMP/cert.pem" --key "$TMP/key.pem" >"$TMP/serve.out" 2>"$TMP/serve.log" &
SRV_PID=$!
PIDS+=("$SRV_PID")
if [ "$PIN" = 1 ]; then
	[ "$(nproc)" -ge 2 ] || die "PIN=1 needs two CPUs"
	command -v taskset >/dev/null || die "PIN=1 needs taskset"
	taskset -a -p -c 0 "$SRV_PID" >/dev/null
fi

# the worker, as sandboxd runs it: its control socketpair held by egbench drive
start_worker() {
	rm -f "$TMP/worker.pid"
	cg_new sbxb-worker
	WORKER_CG=$CG
	sh -c "$IN_CG" "$WORKER_CG" ip netns exec "$NS_H" unshare -m --propagation private \
		sh -c "$WITH_HOSTS" "$TMP/hosts" \
		"$EGBENCH" drive --worker "$SANDBOXD" --uid "$WORKER_UID" --gid "$WORKER_UID" \
		--guest "$GUEST_IP" --host "$HOST_IP" --allow "$NAME" --pidfile "$TMP/worker.pid" \
		--proxy-listen "0.0.0.0:$PROXY_PORT" --dns-listen "0.0.0.0:$DNS_PORT" \
		--log "$TMP/worker-events.log" 2>>"$TMP/worker.log" &
	DRIVE_PID=$!
	PIDS+=("$DRIVE_PID")
	for _ in $(seq 100); do
		[ -s "$TMP/worker.pid" ] && break
		kill -0 "$DRIVE_PID" 2>/dev/null || die "the worker did not start: $(tail -3 "$TMP/worker.log")"
		sleep 0.1
	done
	[ -s "$TMP/worker.pid" ] || die "the worker did not say ready"
	WORKER_PID=$(cat "$TMP/worker.pid")
	[ "$PIN" != 1 ] || taskset -a -p -c 1 "$WORKER_PID" >/dev/null
}
stop_worker() {
	stop_pid "$DRIVE_PID"
	tail -1 "$TMP/worker.log" | grep 'drive:' >>"$TMP/drive-counts.log" || true
	[ -z "$WORKER_CG" ] || rmdir "$WORKER_CG" 2>/dev/null || true
	DRIVE_PID=
	WORKER_PID=
}

cat >"$TMP/tinyproxy.conf" <<EOF
User nobody
Group nogroup
Port $TP_PORT
Listen $HOST_IP
Timeout 600
MaxClients 4096
LogLevel Critical
Allow $GUEST_IP
DisableViaHeader Yes
ConnectPort 443
EOF
start_tinyproxy() {
	cg_new sbxb-tinyproxy
	TP_CG=$CG
	sh -c "$IN_CG" "$TP_CG" ip netns exec "$NS_H" unshare -m --propagation private \
		sh -c "$WITH_HOSTS" "$TMP/hosts" \
		tinyproxy -d -c "$TMP/tinyproxy.conf" >>"$TMP/tinyproxy.log" 2>&1 &
	TP_PID=$!
	PIDS+=("$TP_PID")
	[ "$PIN" != 1 ] || taskset -a -p -c 1 "$TP_PID" >/dev/null
	for _ in $(seq 100); do
		ip netns exec "$NS_H" ss -Hltn "sport = :$TP_PORT" | grep -q . && return 0
		kill -0 "$TP_PID" 2>/dev/null || die "tinyproxy did not start: $(tail -3 "$TMP/tinyproxy.log")"
		sleep 0.1
	done
	die "tinyproxy does not listen on $HOST_IP:$TP_PORT"
}
stop_tinyproxy() {
	stop_pid "$TP_PID"
	[ -z "$TP_CG" ] || rmdir "$TP_CG" 2>/dev/null || true
	TP_PID=
}

for _ in $(seq 50); do
	grep -q serving "$TMP/serve.out" 2>/dev/null && break
	kill -0 "$SRV_PID" 2>/dev/null || die "the server did not start: $(cat "$TMP/serve.log")"
	sleep 0.1
done
start_worker
start_tinyproxy

# ---- helpers ----

HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
BYTES=$((SIZE_MB << 20))

ticks() { # PID: "utime stime" of the process, all its threads (the ended ones too)
	[ -n "$1" ] && awk '{ sub(/.*\) /, ""); print $12, $13 }' "/proc/$1/stat" 2>/dev/null ||
		echo 0 0
}
busy_jiffies() {
	awk 'NR == 1 { for (i = 2; i <= NF; i++) if (i != 5 && i != 6) b += $i; print b; exit }' \
		/proc/stat
}
status_kib() { # PID FIELD
	awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0
}

# Waits (at most QUIET_WAIT s) for a second in which the machine is nearly idle; sets QUIET
# to the busy CPUs of the last second measured.
quiet() {
	local t0 b0 b1
	t0=$(date +%s)
	for (( ; ; )); do
		b0=$(busy_jiffies)
		sleep 1
		b1=$(busy_jiffies)
		QUIET=$(awk -v d=$((b1 - b0)) -v hz="$HZ" 'BEGIN { printf "%.2f", d / hz }')
		awk -v q="$QUIET" -v m="$QUIET_MAX" 'BEGIN { exit !(q < m) }' && return 0
		[ $(($(date +%s) - t0)) -lt "$QUIET_WAIT" ] || return 0
	done
}

# measure_begin / measure_end: CPU of the server, the worker, tinyproxy and the machine
# while a measurement ran; sets CPU to "wall_ms= server_cpu_ms= worker_cpu_ms= worker_sys_ms=
# tinyproxy_cpu_ms= tinyproxy_sys_ms= busy_cpus=" (sys: the part in the kernel).
measure_begin() {
	M_T0=${EPOCHREALTIME/./}
	read -r M_Su M_Ss <<<"$(ticks "$SRV_PID")"
	read -r M_Wu M_Ws <<<"$(ticks "$WORKER_PID")"
	read -r M_Pu M_Ps <<<"$(ticks "$TP_PID")"
	M_B=$(busy_jiffies)
}
measure_end() {
	local t1 su ss wu ws pu ps b
	t1=${EPOCHREALTIME/./}
	read -r su ss <<<"$(ticks "$SRV_PID")"
	read -r wu ws <<<"$(ticks "$WORKER_PID")"
	read -r pu ps <<<"$(ticks "$TP_PID")"
	b=$(busy_jiffies)
	CPU=$(awk -v t=$((t1 - M_T0)) -v s=$((su + ss - M_Su - M_Ss)) \
		-v w=$((wu + ws - M_Wu - M_Ws)) -v wk=$((ws - M_Ws)) \
		-v p=$((pu + ps - M_Pu - M_Ps)) -v pk=$((ps - M_Ps)) -v b=$((b - M_B)) \
		-v hz="$HZ" 'BEGIN {
		f = 1000 / hz
		printf "wall_ms=%.1f server_cpu_ms=%.0f worker_cpu_ms=%.0f worker_sys_ms=%.0f " \
		    "tinyproxy_cpu_ms=%.0f tinyproxy_sys_ms=%.0f busy_cpus=%.2f", t / 1000, s * f,
		    w * f, wk * f, p * f, pk * f, (t > 0 ? b * f * 1000 / t : 0)
	}')
}

# sampler PID CG OUT: one line per 100 ms while PID lives or until killed:
# "ms rss_kib hwm_kib threads kmem_kib" (bash builtins only: it runs beside what it measures)
sampler() {
	local pid=$1 cg=$2 out=$3 t0 k v rest rss hwm thr km
	t0=${EPOCHREALTIME/./}
	: >"$out"
	while [ -e "/proc/$pid/status" ]; do
		rss=0 hwm=0 thr=0 km=0
		while read -r k v rest; do
			case "$k" in
			VmRSS:) rss=$v ;;
			VmHWM:) hwm=$v ;;
			Threads:) thr=$v ;;
			esac
		done <"/proc/$pid/status" 2>/dev/null || true
		[ -z "$cg" ] || read -r km <"$cg/memory.kmem.usage_in_bytes" || true
		printf '%d %d %d %d %d\n' $(((${EPOCHREALTIME/./} - t0) / 1000)) "$rss" "$hwm" "$thr" \
			$((km / 1024)) >>"$out"
		sleep 0.1
	done
}

# What runs in the guest: a clean environment (no proxy variables), after PFX (a profiler)
GUEST=(ip netns exec "$NS_G" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin)
PINC=()
[ "$PIN" != 1 ] || PINC=(taskset -c 0)
GUEST=("${PINC[@]}" "${GUEST[@]}")
PFX=()

guest_pkts() { # "rx tx": packets (one per skb, however many segments it carries) of the guest
	ip netns exec "$NS_G" cat /sys/class/net/eth0/statistics/rx_packets \
		/sys/class/net/eth0/statistics/tx_packets | tr '\n' ' '
}

# download ROUND VIA: one HTTPS download of SIZE_MB MiB by curl in the guest
download() {
	local r=$1 via=$2 args pid
	case "$via" in
	direct) args=(--resolve "$NAME:$D_TLS:$SRV_IP" "https://$NAME:$D_TLS/$BYTES") ;;
	egress) args=(--resolve "$NAME:443:$SRV_IP" "https://$NAME/$BYTES") ;;
	tinyproxy) args=(-x "http://$HOST_IP:$TP_PORT" "https://$NAME/$BYTES") ;;
	loopback) args=(--resolve "$NAME:$D_TLS:127.0.0.1" "https://$NAME:$D_TLS/$BYTES") ;;
	esac
	pid=$WORKER_PID
	[ "$via" != tinyproxy ] || pid=$TP_PID
	sampler "$pid" "" "$TMP/dl.samples" &
	local sp=$!
	local rx0 tx0 rx1 tx1
	read -r rx0 tx0 <<<"$(guest_pkts)"
	measure_begin
	if [ "$via" = loopback ]; then
		# the server's own ceiling: curl beside it, no path in between
		"${PFX[@]}" "${PINC[@]}" ip netns exec "$NS_S" /usr/bin/time -f '%U %S' -o "$TMP/time" \
			env -i PATH=/usr/bin:/bin curl -sS -k -o /dev/null \
			-w '%{http_code} %{size_download} %{speed_download}' "${args[@]}" \
			>"$TMP/curl.out" 2>"$TMP/curl.err" || die "curl ($via): $(cat "$TMP/curl.err")"
	else
		"${PFX[@]}" "${GUEST[@]}" /usr/bin/time -f '%U %S' -o "$TMP/time" curl -sS -k -o /dev/null \
			-w '%{http_code} %{size_download} %{speed_download}' "${args[@]}" \
			>"$TMP/curl.out" 2>"$TMP/curl.err" || die "curl ($via): $(cat "$TMP/curl.err")"
	fi
	measure_end
	read -r rx1 tx1 <<<"$(guest_pkts)"
	kill "$sp" 2>/dev/null || true
	wait "$sp" 2>/dev/null || true
	local code size speed u s
	read -r code size speed <"$TMP/curl.out" || true
	read -r u s <"$TMP/time"
	if [ "$code" != 200 ] || [ "$size" != "$BYTES" ]; then
		die "download via $via: HTTP $code, $size bytes of $BYTES"
	fi
	rec "tput round=$r via=$via mibps=$(awk -v s="$speed" 'BEGIN { printf "%.1f", s / 1048576 }')" \
		"client_cpu_ms=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.0f", (u + s) * 1000 }')" \
		"$CPU guest_rx_pkts=$((rx1 - rx0)) guest_tx_pkts=$((tx1 - tx0))" \
		"pre_busy=$QUIET $(awk 'NR == 1 { f = $2 } { if ($2 > m) m = $2; l = $2 }
			END { printf "rss_first_kib=%d rss_max_kib=%d rss_last_kib=%d", f, m, l }' \
			"$TMP/dl.samples")"
}

# conns ROUND VIA C: CONNS short HTTP connections, C in flight
conns() {
	local r=$1 via=$2 c=$3 args
	case "$via" in
	direct) args=(--to "$SRV_IP:$D_HTTP") ;;
	egress) args=(--to "$SRV_IP:80") ;;
	tinyproxy) args=(--to "$HOST_IP:$TP_PORT" --absolute) ;;
	loopback) args=(--to "127.0.0.1:$D_HTTP") ;;
	esac
	measure_begin
	if [ "$via" = loopback ]; then
		"${PFX[@]}" "${PINC[@]}" ip netns exec "$NS_S" "$EGBENCH" conns "${args[@]}" --host "$NAME" -n "$CONNS" -c "$c" \
			>"$TMP/conns.out" 2>"$TMP/conns.err" || die "conns ($via): $(cat "$TMP/conns.err" "$TMP/conns.out")"
	else
		"${PFX[@]}" "${GUEST[@]}" "$EGBENCH" conns "${args[@]}" --host "$NAME" -n "$CONNS" -c "$c" \
			>"$TMP/conns.out" 2>"$TMP/conns.err" || die "conns ($via): $(cat "$TMP/conns.err" "$TMP/conns.out")"
	fi
	measure_end
	rec "conns round=$r via=$via $(cat "$TMP/conns.out") $CPU pre_busy=$QUIET"
}

# memphase VIA N: a fresh worker (or tinyproxy), warmed by a few connections, then N paced
# downloads held open while its memory is sampled
memphase() {
	local via=$1 n=$2 pid cg rate bytes hold_args idle_rss idle_kmem window
	if [ "$via" = egress ]; then
		stop_worker
		start_worker
		pid=$WORKER_PID cg=$WORKER_CG
		hold_args=(--to "$SRV_IP:443")
	else
		stop_tinyproxy
		start_tinyproxy
		pid=$TP_PID cg=$TP_CG
		hold_args=(--proxy "$HOST_IP:$TP_PORT")
	fi
	# warm: the resolver, the allocator's arenas, one thread's stack
	"${GUEST[@]}" "$EGBENCH" hold "${hold_args[@]}" --sni "$NAME" --path /1048576 -n 4 >/dev/null ||
		die "the warm-up downloads via $via failed"
	sleep 0.5
	idle_rss=$(status_kib "$pid" VmRSS)
	idle_kmem=$(kmem_kib "$cg")
	rate=$((MEM_RATE_MB * 1048576 / n))
	bytes=$((rate * MEM_SECONDS))
	quiet
	ip netns exec "$NS_G" "$EGBENCH" hold "${hold_args[@]}" --sni "$NAME" \
		--path "/$bytes?rate=$rate" -n "$n" >"$TMP/hold.out" 2>"$TMP/hold.err" &
	local hp=$!
	PIDS+=("$hp")
	for _ in $(seq 600); do
		grep -q '^ready' "$TMP/hold.out" && break
		kill -0 "$hp" 2>/dev/null || break
		sleep 0.1
	done
	grep -q "^ready n=$n ok=$n failed=0" "$TMP/hold.out" ||
		die "not all $n downloads via $via started: $(cat "$TMP/hold.out" "$TMP/hold.err")"
	sleep 0.5
	# the middle of the transfers: every connection open, all moving
	window=$((MEM_SECONDS / 2))
	sampler "$pid" "$cg" "$TMP/mem.samples" &
	local sp=$!
	measure_begin
	sleep "$window"
	measure_end
	kill "$sp" 2>/dev/null || true
	wait "$sp" 2>/dev/null || true
	wait "$hp" || die "downloads via $via failed: $(cat "$TMP/hold.out" "$TMP/hold.err")"
	grep -q "^done n=$n finished=$n failed=0" "$TMP/hold.out" ||
		die "downloads via $via: $(cat "$TMP/hold.out")"
	sleep 0.5
	rec "mem via=$via n=$n idle_rss_kib=$idle_rss idle_kmem_kib=$idle_kmem" \
		"after_rss_kib=$(status_kib "$pid" VmRSS) hwm_kib=$(status_kib "$pid" VmHWM)" \
		"rate_per_conn=$rate bytes_per_conn=$bytes $(awk '
		function isort(a, n,   i, j, t) {
			for (i = 2; i <= n; i++) {
				t = a[i]
				for (j = i - 1; j >= 1 && a[j] > t; j--)
					a[j + 1] = a[j]
				a[j + 1] = t
			}
		}
		{ r[NR] = $2; t[NR] = $4; k[NR] = $5; if (NR == 1 || $4 < tmin) tmin = $4
		  if ($4 > tmax) tmax = $4; if ($2 > rmax) rmax = $2 }
		END {
			n = NR; for (i = 1; i <= n; i++) s[i] = r[i] + 0; isort(s, n)
			for (i = 1; i <= n; i++) q[i] = k[i] + 0; isort(q, n)
			printf "samples=%d rss_med_kib=%d rss_first_kib=%d rss_last_kib=%d " \
			    "rss_max_kib=%d kmem_med_kib=%d kmem_first_kib=%d kmem_last_kib=%d " \
			    "threads_min=%d threads_max=%d", n, s[int((n + 1) / 2)], r[1], r[n], rmax,
			    q[int((n + 1) / 2)], k[1], k[n], tmin, tmax
		}' "$TMP/mem.samples") $CPU"
}

# ---- the run ----

results_open egress
rec "# bench/egress/run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
rec "# sandboxd $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
	"(${SANDBOXD#"$ROOT"/}, $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt"))"
rec "# machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
	"$NCPU CPUs, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
	"kernel $(uname -r), $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release)"
rec "# $(curl --version | head -1 | cut -d' ' -f1-5), $(tinyproxy -v 2>&1 | head -1)," \
	"$(openssl version), $(cc --version | head -1)"
[ -z "${NOTE:-}" ] || rec "# note: $NOTE"
rec "# rounds=$ROUNDS size=${SIZE_MB}MiB conns=$CONNS conc=$CONC mem_counts=$MEM_COUNTS" \
	"mem_seconds=$MEM_SECONDS mem_rate=${MEM_RATE_MB}MiB/s worker_uid=$WORKER_UID" \
	"memcg=$([ -n "$CG_BASE" ] && echo v1 || echo none) pin=$PIN"
rec "# paths: direct guest -> $SRV_IP:$D_TLS/$D_HTTP forwarded by the host;" \
	"egress guest -> $SRV_IP:443/80 redirected to the worker on :$PROXY_PORT;" \
	"tinyproxy guest -> $HOST_IP:$TP_PORT (CONNECT for HTTPS, absolute-form GET for HTTP)"
rec "# before the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

log "warm-up (not counted)"
QUIET=-
for via in direct egress tinyproxy; do
	download 0 "$via"
	conns 0 "$via" "$CONC"
done
sed -i '/ round=0 /d' "$RAW"

for r in $(seq "$ROUNDS"); do
	quiet
	log "round $r/$ROUNDS: the server alone (loopback), then ${SIZE_MB} MiB downloads"
	download "$r" loopback
	for via in $(rotate "$r" direct egress tinyproxy); do
		download "$r" "$via"
	done
	quiet
	log "round $r/$ROUNDS: $CONNS connections, $CONC in flight, then one at a time"
	conns "$r" loopback "$CONC"
	for via in $(rotate "$r" direct egress tinyproxy); do
		conns "$r" "$via" "$CONC"
	done
	for via in $(rotate "$r" direct egress tinyproxy); do
		conns "$r" "$via" 1
	done
done

# Profiles (PERF=1; not in the results): for each path, one download and one run of
# connections under `perf record -a` (every process: where the machine's CPU went), and for
# the proxies the same again under `perf record --call-graph dwarf -p PID` (the proxy's own
# functions), then the worker's system calls (`strace -c -f`); reports in $TMP/perf-*.txt and
# $TMP/strace-*.txt, kept.
profile() { # KIND VIA
	local kind=$1 via=$2 f=$TMP/perf-$1-$2 pid
	PFX=(perf record -q -a -o "$f-sys.data" --)
	if [ "$kind" = tput ]; then download P "$via"; else conns P "$via" "$CONC"; fi
	{
		perf report -i "$f-sys.data" --no-children --sort comm --stdio 2>/dev/null
		perf report -i "$f-sys.data" --no-children --sort comm,dso,sym --stdio \
			--percent-limit 0.3 2>/dev/null
	} | grep -v '^#' | grep -v '^$' >"$f-sys.txt" || true
	pid=$WORKER_PID
	[ "$via" != tinyproxy ] || pid=$TP_PID
	if [ "$via" != direct ]; then
		PFX=(perf record -q --call-graph "dwarf,16384" -p "$pid" -o "$f-proc.data" --)
		if [ "$kind" = tput ]; then download P "$via"; else CONNS=$((CONNS * 5)) conns P "$via" "$CONC"; fi
		{
			echo "== self"
			perf report -i "$f-proc.data" --no-children --sort dso,sym --stdio -g none \
				--percent-limit 0.5 2>/dev/null
			echo "== children"
			perf report -i "$f-proc.data" --children --sort dso,sym --stdio -g none \
				--percent-limit 2 2>/dev/null
		} | grep -v '^#' | grep -v '^$' >"$f-proc.txt" || true
	fi
	PFX=()
}
if [ "$PERF" = 1 ]; then
	command -v perf >/dev/null || die "PERF=1 needs perf"
	KEEP_TMP=1
	for via in direct egress tinyproxy; do
		for kind in tput conns; do
			log "profile: $kind via $via"
			profile "$kind" "$via"
		done
	done
	if command -v strace >/dev/null; then
		# the proxies' system calls per connection and per download, and curl's per download
		for via in egress tinyproxy; do
			pid=$WORKER_PID
			[ "$via" != tinyproxy ] || pid=$TP_PID
			for kind in conns tput; do
				log "profile: system calls of $via ($kind)"
				strace -c -f -p "$pid" -o "$TMP/strace-$kind-$via.txt" &
				sp=$!
				sleep 1
				if [ "$kind" = tput ]; then download P "$via"; else conns P "$via" "$CONC"; fi
				kill -INT "$sp"
				wait "$sp" || true
			done
		done
		for via in direct egress; do
			log "profile: curl's system calls ($via)"
			PFX=(strace -c -f -o "$TMP/strace-curl-$via.txt")
			download P "$via"
			PFX=()
		done
	fi
	sed -i '/ round=P /d' "$RAW"
fi

for n in $MEM_COUNTS; do
	log "memory: $n downloads held through the worker"
	memphase egress "$n"
	if [ "$MEM_TINYPROXY" = 1 ]; then
		log "memory: $n downloads held through tinyproxy"
		memphase tinyproxy "$n"
	fi
done
stop_worker
stop_tinyproxy
rec "# worker decisions (egbench drive): $(tr '\n' ';' <"$TMP/drive-counts.log")"
rec "# after the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- summary ----

summary=$(awk -v rounds="$ROUNDS" -v size="$SIZE_MB" -v nconns="$CONNS" -v conc="$CONC" \
	"$BENCH_AWK"'
function cell(k, fmt,   m) {
	if (!(k in vals))
		return "-"
	m = med(vals[k])
	return sprintf(fmt " (" fmt "-" fmt ")", m, lo, hi)
}
function paired(a, b, diff,   r, s) { # the median over rounds of a / b (or a - b)
	s = ""
	for (r = 1; r <= rounds; r++)
		if ((r "/" a) in by && (r "/" b) in by && (diff || by[r "/" b] > 0))
			s = s " " (diff ? by[r "/" a] - by[r "/" b] : by[r "/" a] / by[r "/" b])
	return s == "" ? 0 : med(s)
}
/^tput / {
	r = kv($0, "round"); v = kv($0, "via")
	add("tput " v, kv($0, "mibps"), r)
	add("tput cpu client " v, kv($0, "client_cpu_ms"), r)
	add("tput cpu server " v, kv($0, "server_cpu_ms"), r)
	add("tput cpu proxy " v, v == "tinyproxy" ? kv($0, "tinyproxy_cpu_ms") : kv($0, "worker_cpu_ms"), r)
	add("tput busy " v, kv($0, "busy_cpus"), r)
	add("tput mcpu " v, kv($0, "busy_cpus") * kv($0, "wall_ms") / size, r)
	add("tput sys " v, v == "tinyproxy" ? kv($0, "tinyproxy_sys_ms") : kv($0, "worker_sys_ms"), r)
	if (v == "egress") {
		add("tput rss first", kv($0, "rss_first_kib"), r)
		add("tput rss max", kv($0, "rss_max_kib"), r)
		add("tput rss last", kv($0, "rss_last_kib"), r)
	}
	pre = pre " " kv($0, "pre_busy")
}
/^conns / {
	r = kv($0, "round"); v = kv($0, "via"); c = kv($0, "c")
	add("rate " c " " v, kv($0, "rate"), r)
	add("ttfb " c " " v, kv($0, "ttfb_p50_us"), r)
	add("ttfb90 " c " " v, kv($0, "ttfb_p90_us"), r)
	add("server " c " " v, kv($0, "server_cpu_ms") / kv($0, "n") * 1000, r)
	add("proxy " c " " v, (v == "tinyproxy" ? kv($0, "tinyproxy_cpu_ms") : kv($0, "worker_cpu_ms")) / kv($0, "n") * 1000, r)
	add("busy " c " " v, kv($0, "busy_cpus"), r)
	add("mcpu " c " " v, kv($0, "busy_cpus") * kv($0, "wall_ms") * 1000 / kv($0, "n"), r)
	add("sys " c " " v, (v == "tinyproxy" ? kv($0, "tinyproxy_sys_ms") : kv($0, "worker_sys_ms")) / kv($0, "n") * 1000, r)
}
/^mem / {
	v = kv($0, "via"); n = kv($0, "n")
	mems[v] = mems[v] " " n
	per[v "/" n] = (kv($0, "rss_med_kib") - kv($0, "idle_rss_kib")) / n
	kper[v "/" n] = (kv($0, "kmem_med_kib") - kv($0, "idle_kmem_kib")) / n
	line[v "/" n] = $0
}
END {
	printf "HTTPS download of %d MiB (curl in the guest), MiB/s: median (min-max) of %d rounds\n\n", size, rounds
	printf "| path | MiB/s | curl CPU ms | server CPU ms | proxy CPU ms (in kernel) | busy CPUs | machine CPU ms/MiB |\n|---|---|---|---|---|---|---|\n"
	split("loopback direct egress tinyproxy", vs, " ")
	for (i = 1; i <= 4; i++)
		printf "| %s | %s | %s | %s | %s (%s) | %s | %s |\n", vs[i], cell("tput " vs[i], "%.0f"),
		    cell("tput cpu client " vs[i], "%.0f"), cell("tput cpu server " vs[i], "%.0f"),
		    cell("tput cpu proxy " vs[i], "%.0f"), cell("tput sys " vs[i], "%.0f"),
		    cell("tput busy " vs[i], "%.2f"), cell("tput mcpu " vs[i], "%.2f")
	t = med(vals["tput egress"]) / med(vals["tput direct"])
	printf "\nthroughput egress / direct: %.2f (per-round median %.2f); goal 0.9: %s\n", t,
	    paired("tput egress", "tput direct"), (t >= 0.9 ? "met" : "NOT met")
	printf "egress / tinyproxy: %.2f; server alone (loopback) / direct: %.2f\n",
	    med(vals["tput egress"]) / med(vals["tput tinyproxy"]),
	    med(vals["tput loopback"]) / med(vals["tput direct"])
	printf "worker RSS during the egress downloads (KiB, median): first %d, max %d, last %d\n",
	    med(vals["tput rss first"]), med(vals["tput rss max"]), med(vals["tput rss last"])

	printf "\n%d short HTTP connections (a request each), %d in flight: connections/s\n\n", nconns, conc
	printf "| path | conns/s | first byte p50 µs | p90 µs | server CPU µs/conn | proxy CPU µs/conn (in kernel) | busy CPUs | machine CPU µs/conn |\n|---|---|---|---|---|---|---|---|\n"
	for (i = 1; i <= 4; i++)
		printf "| %s | %s | %s | %s | %s | %s (%s) | %s | %s |\n", vs[i], cell("rate " conc " " vs[i], "%.0f"),
		    cell("ttfb " conc " " vs[i], "%.0f"), cell("ttfb90 " conc " " vs[i], "%.0f"),
		    cell("server " conc " " vs[i], "%.0f"), cell("proxy " conc " " vs[i], "%.0f"),
		    cell("sys " conc " " vs[i], "%.0f"), cell("busy " conc " " vs[i], "%.2f"),
		    cell("mcpu " conc " " vs[i], "%.0f")
	c = med(vals["rate " conc " egress"]) / med(vals["rate " conc " tinyproxy"])
	printf "\nconnection rate egress / tinyproxy: %.2f (per-round median %.2f); goal 1.5: %s\n",
	    c, paired("rate " conc " egress", "rate " conc " tinyproxy"), (c >= 1.5 ? "met" : "NOT met")
	printf "egress / direct: %.2f\n", med(vals["rate " conc " egress"]) / med(vals["rate " conc " direct"])

	printf "\nThe same, one connection at a time: connect() to the first byte of the answer\n\n"
	printf "| path | first byte p50 µs | p90 µs | conns/s | proxy CPU µs/conn (in kernel) | machine CPU µs/conn |\n|---|---|---|---|---|---|\n"
	for (i = 2; i <= 4; i++)
		printf "| %s | %s | %s | %s | %s (%s) | %s |\n", vs[i], cell("ttfb 1 " vs[i], "%.0f"),
		    cell("ttfb90 1 " vs[i], "%.0f"), cell("rate 1 " vs[i], "%.0f"),
		    cell("proxy 1 " vs[i], "%.0f"), cell("sys 1 " vs[i], "%.0f"),
		    cell("mcpu 1 " vs[i], "%.0f")
	a = med(vals["ttfb 1 egress"]) - med(vals["ttfb 1 direct"])
	printf "\nadded setup latency (egress - direct, p50): %.0f µs (per-round median %.0f); goal < 1000 µs: %s\n",
	    a, paired("ttfb 1 egress", "ttfb 1 direct", 1), (a < 1000 ? "met" : "NOT met")
	printf "tinyproxy - direct: %.0f µs; with %d in flight, egress - direct: %.0f µs\n",
	    med(vals["ttfb 1 tinyproxy"]) - med(vals["ttfb 1 direct"]), conc,
	    med(vals["ttfb " conc " egress"]) - med(vals["ttfb " conc " direct"])

	printf "\nMemory while splicing paced HTTPS downloads (KiB; in flight: median of the samples)\n\n"
	printf "| via | conns | idle RSS | in flight RSS | per conn | kernel (memcg kmem) per conn | RSS first → last | threads |\n|---|---|---|---|---|---|---|---|\n"
	split("egress tinyproxy", ps, " ")
	for (i = 1; i <= 2; i++) {
		n2 = split(mems[ps[i]], ns, " ")
		for (j = 1; j <= n2; j++) {
			l = line[ps[i] "/" ns[j]]
			printf "| %s | %d | %d | %d | %.1f | %.1f | %d → %d | %d-%d |\n", ps[i], ns[j],
			    kv(l, "idle_rss_kib"), kv(l, "rss_med_kib"), per[ps[i] "/" ns[j]],
			    kper[ps[i] "/" ns[j]], kv(l, "rss_first_kib"), kv(l, "rss_last_kib"),
			    kv(l, "threads_min"), kv(l, "threads_max")
		}
	}
	n2 = split(mems["egress"], ns, " ")
	if (n2 >= 2) {
		lo_n = ns[1]; hi_n = ns[n2]
		m = per["egress/" hi_n] / (per["egress/" lo_n] ? per["egress/" lo_n] : 1)
		printf "\nworker per connection at %d / at %d: %.2f (RSS), %.2f (kernel); goal constant: %s\n",
		    hi_n, lo_n, m, kper["egress/" hi_n] / (kper["egress/" lo_n] ? kper["egress/" lo_n] : 1),
		    (m >= 0.8 && m <= 1.25 ? "met" : "NOT met")
	}
	printf "\nother work before each round (busy CPUs in the quiet check): median %.2f (max %.2f)\n",
	    med(pre), hi
}' "$RAW")
results_close "$summary"
