#!/usr/bin/env bash
# bench/api/run.sh: requests per second for GET /v1/sandboxes (100 sandboxes) from sandboxd over
# the unix socket, TCP and TLS, against nginx serving the same bytes in the same run, and
# sandboxd's memory per sandbox record. One command; see docs/performance.md for how to read it.
#
# Knobs (environment): ROUNDS=5 DURATION=5 WARMUP=1 CONNS=50 SANDBOXES=100 RECORDS=1000
# PIN=1 (client on the first CPU, servers on the last) WRK=1 (wrk cross-check) KEEP_TMP=0
# QUIET_WAIT=300 (seconds to wait, before each run, for other work on the machine to stop)
# NOISE_MAX=0.2 RETRIES=4 (a run during which other work took more CPUs is repeated).
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
CONNS=${CONNS:-50}
SANDBOXES=${SANDBOXES:-100}
RECORDS=${RECORDS:-1000}
PIN=${PIN:-1}
WRK=${WRK:-1}
KEEP_TMP=${KEEP_TMP:-0}
QUIET_WAIT=${QUIET_WAIT:-300}
NOISE_MAX=${NOISE_MAX:-0.2}
RETRIES=${RETRIES:-4}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BUILD=$ROOT/build-bench
LOADGEN=$BUILD/bench/loadgen
SANDBOXD=$BUILD/bin/sandboxd-fake
TMP=
PIDS=()
RAW=

log() {
	printf 'bench/api: %s\n' "$*" >&2
}

die() {
	printf 'bench/api: error: %s\n' "$*" >&2
	exit 1
}

# Everything this script started, by pid: TERM, a short wait, then KILL.
cleanup() {
	local pid i
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for i in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
	scratch_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stop_pid() {
	local pid=$1 i keep=()
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for i in "${PIDS[@]}"; do
		[ "$i" = "$pid" ] || keep+=("$i")
	done
	PIDS=("${keep[@]}")
}

# ---- dependencies ----

build() {
	local c
	for c in cmake ninja cc openssl curl taskset; do
		command -v "$c" >/dev/null || die "'$c' is needed"
	done
	build_release all
	mkdir -p "$BUILD/bench"
	cc -std=gnu11 -O2 -Wall -Wextra -o "$LOADGEN" "$ROOT/bench/api/loadgen.c" -lssl -lcrypto
}

# ---- helpers ----

pin_cpus

# Waits until a curl command succeeds (the server answers) or pid dies.
wait_ready() {
	local pid=$1
	shift
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 1
		curl -s -o /dev/null "$@" && return 0
		sleep 0.1
	done
	return 1
}

# start_sandboxd NAME STATE_DIR ARGS...: sets SBX_PID
start_sandboxd() {
	local name=$1 state=$2
	shift 2
	# the fake's sandboxes hold nothing: the machine's size does not bound how many
	SANDBOXD_FAKE_BOOT_MS=1 "${server_cpus[@]}" "$SANDBOXD" --state-dir "$state" \
		--capacity-cpus 1048576 --capacity-memory-mb 1073741824 \
		--capacity-disk-mb 2147483648 --log-level warning "$@" >>"$TMP/$name.log" 2>&1 &
	SBX_PID=$!
	PIDS+=("$SBX_PID")
}

# create_sandboxes SOCKET COUNT PREFIX EXTRA_JSON: one curl, one connection, COUNT creates.
create_sandboxes() {
	local sock=$1 n=$2 prefix=$3 extra=$4 i bad
	for i in $(seq "$n"); do
		[ "$i" -gt 1 ] && echo next
		printf 'unix-socket = "%s"\nurl = "http://localhost/v1/sandboxes"\n' "$sock"
		printf 'header = "Content-Type: application/json"\noutput = "/dev/null"\n'
		printf 'write-out = "%%{http_code}\\n"\n'
		printf 'data = "{\\"name\\":\\"%s-%d\\",%s}"\n' "$prefix" "$i" "$extra"
	done >"$TMP/create.cfg"
	bad=$(curl -s -K "$TMP/create.cfg" | grep -vc '^201$' || true)
	[ "$bad" = 0 ] || die "$bad of $n creates did not answer 201"
}

# mem PID: "rss_kib pss_kib anon_kib"
mem() {
	awk '/^Rss:/ { r = $2 } /^Pss:/ { p = $2 } /^Anonymous:/ { a = $2 }
		END { print r, p, a }' "/proc/$1/smaps_rollup"
}

# ---- the run ----

TMP=$(mktemp -d /tmp/sandboxd-bench.XXXXXX)
chmod 711 "$TMP" # nginx's worker (nobody) reads the docroot inside
install_nginx_wrk
build

results_open api

rec "# bench/api/run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
rec "# sandboxd $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
	"(build-bench/bin/sandboxd-fake, Release)"
rec "# machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
	"$(nproc) CPUs, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
	"kernel $(uname -r), $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release)"
rec "# $(nginx -v 2>&1), $(openssl version), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)," \
	"$(cc --version | head -1)"
rec "# rounds=$ROUNDS duration=${DURATION}s warmup=${WARMUP}s conns=$CONNS" \
	"sandboxes=$SANDBOXES records=$RECORDS pin=$PIN" \
	"(client: ${client_cpus[*]:-any CPU}; servers: ${server_cpus[*]:-any CPU})"

busy=$(cpu_busy)
rec "# before the run: load average $(cut -d' ' -f1-3 /proc/loadavg), CPUs ${busy}% busy"
[ "$busy" -lt 20 ] || log "warning: the CPUs are ${busy}% busy before the run; expect noise"

log "certificate, token, ports"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
	-subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
	-keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
chmod 644 "$TMP/cert.pem"
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
(umask 077 && printf '%s\n' "$TOKEN" >"$TMP/token")
AUTH="Authorization: Bearer $TOKEN"
free_port && P_SBX_TCP=$PORT
free_port && P_SBX_TLS=$PORT
free_port && P_NGX_TCP=$PORT
free_port && P_NGX_TLS=$PORT
free_port && P_NGX_COPY_TCP=$PORT

# sandboxd A serves the unix socket and TLS; B plain TCP from a copy of A's state, so all
# three answer the same bytes.
log "creating $SANDBOXES sandboxes"
start_sandboxd sbx-a "$TMP/state-a" --socket "$TMP/sbx.sock"
wait_ready "$SBX_PID" --unix-socket "$TMP/sbx.sock" http://localhost/v1/health ||
	die "sandboxd did not start: $(cat "$TMP/sbx-a.log")"
create_sandboxes "$TMP/sbx.sock" "$SANDBOXES" bench '\"labels\":{\"bench\":\"1\"}'
stop_pid "$SBX_PID"
cp -a "$TMP/state-a" "$TMP/state-b"

start_sandboxd sbx-a "$TMP/state-a" --socket "$TMP/sbx.sock" --listen "127.0.0.1:$P_SBX_TLS" \
	--token-file "$TMP/token" --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem"
PID_A=$SBX_PID
start_sandboxd sbx-b "$TMP/state-b" --socket none --listen "127.0.0.1:$P_SBX_TCP" \
	--token-file "$TMP/token"
PID_B=$SBX_PID
wait_ready "$PID_A" -k -H "$AUTH" "https://127.0.0.1:$P_SBX_TLS/v1/health" ||
	die "sandboxd (unix, tls) did not start: $(cat "$TMP/sbx-a.log")"
wait_ready "$PID_B" -H "$AUTH" "http://127.0.0.1:$P_SBX_TCP/v1/health" ||
	die "sandboxd (tcp) did not start: $(cat "$TMP/sbx-b.log")"

mkdir -p "$TMP/www/v1"
curl -sf --unix-socket "$TMP/sbx.sock" -o "$TMP/www/v1/sandboxes" http://localhost/v1/sandboxes
chmod -R a+rX "$TMP/www"
BODY=$(stat -c %s "$TMP/www/v1/sandboxes")
[ "$(grep -o '"id":"sbx_' "$TMP/www/v1/sandboxes" | wc -l)" = "$SANDBOXES" ] ||
	die "the list does not hold $SANDBOXES sandboxes"

# nginx: one worker (sandboxd is one thread), the same bytes on the same three transports
mkdir -p "$TMP/nginx/tmp"
cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events {
	worker_connections 1024;
}
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 100000000;
	keepalive_timeout 300s;
	client_body_temp_path $TMP/nginx/tmp/body;
	proxy_temp_path $TMP/nginx/tmp/proxy;
	fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
	uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
	scgi_temp_path $TMP/nginx/tmp/scgi;
	default_type application/json;
	ssl_certificate $TMP/cert.pem;
	ssl_certificate_key $TMP/key.pem;
	server {
		listen 127.0.0.1:$P_NGX_TCP;
		listen unix:$TMP/nginx.sock;
		listen 127.0.0.1:$P_NGX_TLS ssl;
		root $TMP/www;
	}
	# a reference, not the baseline: nginx copying through user space as sandboxd does
	server {
		listen 127.0.0.1:$P_NGX_COPY_TCP;
		listen unix:$TMP/nginx-copy.sock;
		sendfile off;
		root $TMP/www;
	}
}
EOF
"${server_cpus[@]}" nginx -e "$TMP/nginx/error.log" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" \
	>>"$TMP/nginx/stderr.log" 2>&1 &
NGX_PID=$!
PIDS+=("$NGX_PID")
wait_ready "$NGX_PID" "http://127.0.0.1:$P_NGX_TCP/v1/sandboxes" ||
	die "nginx did not start: $(cat "$TMP/nginx/error.log" "$TMP/nginx/stderr.log")"
NGX_WORKER=$(pgrep -P "$NGX_PID" | head -1 || true)
[ -n "$NGX_WORKER" ] || die "nginx has no worker"

# every endpoint answers the same body
check_same() {
	curl -sf -o "$TMP/check" "$@" || die "curl $* failed"
	cmp -s "$TMP/check" "$TMP/www/v1/sandboxes" || die "curl $* answers different bytes"
}
check_same -H "$AUTH" "http://127.0.0.1:$P_SBX_TCP/v1/sandboxes"
check_same -k -H "$AUTH" "https://127.0.0.1:$P_SBX_TLS/v1/sandboxes"
check_same --unix-socket "$TMP/nginx.sock" http://localhost/v1/sandboxes
check_same "http://127.0.0.1:$P_NGX_TCP/v1/sandboxes"
check_same -k "https://127.0.0.1:$P_NGX_TLS/v1/sandboxes"
check_same --unix-socket "$TMP/nginx-copy.sock" http://localhost/v1/sandboxes
check_same "http://127.0.0.1:$P_NGX_COPY_TCP/v1/sandboxes"
rec "# body: $BODY bytes, $SANDBOXES sandboxes, identical from every server and transport"
curl -s -D - -o /dev/null -H "$AUTH" "http://127.0.0.1:$P_SBX_TCP/v1/sandboxes" |
	tr -d '\r' | sed 's/^/# sandboxd head: /' >>"$RAW"
curl -s -D - -o /dev/null "http://127.0.0.1:$P_NGX_TCP/v1/sandboxes" |
	tr -d '\r' | sed 's/^/# nginx head: /' >>"$RAW"

target() { # SERVER TRANSPORT
	case "$1/$2" in
	sandboxd/unix) echo "unix:$TMP/sbx.sock" ;;
	sandboxd/tcp) echo "tcp:127.0.0.1:$P_SBX_TCP" ;;
	sandboxd/tls) echo "tls:127.0.0.1:$P_SBX_TLS" ;;
	nginx/unix) echo "unix:$TMP/nginx.sock" ;;
	nginx/tcp) echo "tcp:127.0.0.1:$P_NGX_TCP" ;;
	nginx/tls) echo "tls:127.0.0.1:$P_NGX_TLS" ;;
	nginx-nosendfile/unix) echo "unix:$TMP/nginx-copy.sock" ;;
	nginx-nosendfile/tcp) echo "tcp:127.0.0.1:$P_NGX_COPY_TCP" ;;
	esac
}

server_pid() { # SERVER TRANSPORT
	case "$1/$2" in
	sandboxd/tcp) echo "$PID_B" ;;
	sandboxd/*) echo "$PID_A" ;;
	nginx*) echo "$NGX_WORKER" ;;
	esac
}

# One measured run, repeated (RETRIES times at most) while other work on the machine took
# more than NOISE_MAX CPUs during it: the decision looks only at that noise, never at the
# result. Repeated runs stay in the results file as "discarded".
measure() { # ROUND SERVER TRANSPORT
	local r=$1 s=$2 t=$3 attempt line other hdr=()
	[ "$t" = unix ] || hdr=(-H "$AUTH") # the same request bytes to every server
	for attempt in $(seq 0 "$RETRIES"); do
		wait_quiet 15
		line=$("${client_cpus[@]}" "$LOADGEN" -c "$CONNS" -d "$DURATION" -w "$WARMUP" \
			-b "$BODY" -P "$(server_pid "$s" "$t")" "${hdr[@]}" "$(target "$s" "$t")")
		case "$line" in
		*" errors=0 non2xx=0 bad_length=0 "*) ;;
		*) die "$s over $t: failed requests: $line" ;;
		esac
		other=$(sed -n 's/.* other_cpu_share=\([-0-9.]*\).*/\1/p' <<<"$line")
		if [ "$attempt" = "$RETRIES" ] ||
			awk -v o="$other" -v m="$NOISE_MAX" 'BEGIN { exit !(o <= m) }'; then
			rec "run round=$r transport=$t server=$s $line"
			return 0
		fi
		rec "discarded round=$r transport=$t server=$s $line"
		log "other work took $other CPUs during that run: repeating it"
	done
}

total=$((ROUNDS * 8))
i=0
for r in $(seq "$ROUNDS"); do
	for t in unix tcp tls; do
		if [ "$t" = tls ]; then
			servers=$(rotate "$r" sandboxd nginx) # TLS never uses sendfile
		else
			servers=$(rotate "$r" sandboxd nginx nginx-nosendfile)
		fi
		for s in $servers; do
			i=$((i + 1))
			log "run $i/$total: round $r, $s over $t"
			measure "$r" "$s" "$t"
		done
	done
done

# proc_ticks PID: utime + stime in clock ticks
proc_ticks() {
	awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

if [ "$WRK" = 1 ]; then
	hz=$(getconf CLK_TCK)
	for t in tcp tls; do
		for s in sandboxd nginx; do
			p=$P_SBX_TCP scheme=http
			[ "$s/$t" = sandboxd/tls ] && p=$P_SBX_TLS
			[ "$s/$t" = nginx/tcp ] && p=$P_NGX_TCP
			[ "$s/$t" = nginx/tls ] && p=$P_NGX_TLS
			[ "$t" = tls ] && scheme=https
			log "wrk cross-check: $s over $t"
			wait_quiet 15
			pid=$(server_pid "$s" "$t")
			t0=$(proc_ticks "$pid")
			out=$("${client_cpus[@]}" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency \
				-H "$AUTH" "$scheme://127.0.0.1:$p/v1/sandboxes")
			t1=$(proc_ticks "$pid")
			! grep -q 'Non-2xx\|Socket errors' <<<"$out" ||
				die "wrk $s over $t: errors: $out"
			rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' <<<"$out")
			n=$(awk '/requests in/ { print $1 }' <<<"$out")
			p50=$(awk '$1 == "50%" { print $2 }' <<<"$out")
			p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
			cpu=$(awk -v d=$((t1 - t0)) -v n="$n" -v hz="$hz" \
				'BEGIN { printf "%.1f", n ? d * 1e6 / hz / n : 0 }')
			rec "wrk transport=$t server=$s rps=$rps p50=$p50 p99=$p99" \
				"server_cpu_us_per_req=$cpu"
		done
	done
fi

read -r rss_a _ <<<"$(mem "$PID_A")"
read -r rss_n _ <<<"$(mem "$NGX_WORKER")"
rec "rss_after_load sandboxd_kib=$rss_a nginx_worker_kib=$rss_n"
rec "# after the load runs: load average $(cut -d' ' -f1-3 /proc/loadavg)"
stop_pid "$NGX_PID"
stop_pid "$PID_A"
stop_pid "$PID_B"

# ---- memory per sandbox record ----

log "memory: $RECORDS sandbox records"
start_sandboxd sbx-e "$TMP/state-empty" --socket "$TMP/e.sock"
wait_ready "$SBX_PID" --unix-socket "$TMP/e.sock" http://localhost/v1/health ||
	die "sandboxd did not start: $(cat "$TMP/sbx-e.log")"
stop_pid "$SBX_PID"
db0=$(stat -c %s "$TMP/state-empty/sandboxd.db")

start_sandboxd sbx-m "$TMP/state-m" --socket "$TMP/m.sock"
PID_M=$SBX_PID
wait_ready "$PID_M" --unix-socket "$TMP/m.sock" http://localhost/v1/health ||
	die "sandboxd did not start: $(cat "$TMP/sbx-m.log")"
for _ in 1 2 3; do # the code paths of a list are warm before the baseline
	curl -sf -o /dev/null --unix-socket "$TMP/m.sock" http://localhost/v1/sandboxes
done
half=$((RECORDS / 2))
labels='\"labels\":{\"bench\":\"mem\",\"team\":\"perf\"}'
extra="$labels"',\"env\":{\"LANG\":\"C.UTF-8\",\"MODE\":\"bench\"}'
read -r rss0 pss0 anon0 <<<"$(mem "$PID_M")"
rec "mem records=0 rss_kib=$rss0 pss_kib=$pss0 anon_kib=$anon0"
create_sandboxes "$TMP/m.sock" "$half" mem-a "$extra"
read -r rss1 pss1 anon1 <<<"$(mem "$PID_M")"
rec "mem records=$half rss_kib=$rss1 pss_kib=$pss1 anon_kib=$anon1"
create_sandboxes "$TMP/m.sock" "$((RECORDS - half))" mem-b "$extra"
read -r rss2 pss2 anon2 <<<"$(mem "$PID_M")"
rec "mem records=$RECORDS rss_kib=$rss2 pss_kib=$pss2 anon_kib=$anon2"
curl -sf -o "$TMP/list-m" --unix-socket "$TMP/m.sock" http://localhost/v1/sandboxes
read -r rss3 pss3 anon3 <<<"$(mem "$PID_M")"
rec "mem records=$RECORDS after_list=$(stat -c %s "$TMP/list-m")B rss_kib=$rss3 pss_kib=$pss3" \
	"anon_kib=$anon3"
stop_pid "$PID_M" # a clean stop checkpoints the WAL into the database file
db1=$(stat -c %s "$TMP/state-m/sandboxd.db")
rec "db records=0 bytes=$db0"
rec "db records=$RECORDS bytes=$db1"

# ---- summary ----

summary=$(awk -v rounds="$ROUNDS" -v sandboxes="$SANDBOXES" "$BENCH_AWK"'
/^run / {
	k = kv($0, "server") "/" kv($0, "transport")
	rps[k] = rps[k] " " kv($0, "rps")
	cpu[k] = cpu[k] " " kv($0, "server_cpu_us_per_req")
	other[k] = other[k] " " kv($0, "other_cpu_share")
	by_round[kv($0, "round") "/" k] = kv($0, "rps")
	p50[k] = p50[k] " " kv($0, "p50_us")
	p99[k] = p99[k] " " kv($0, "p99_us")
}
/^wrk / {
	wrk[kv($0, "server") "/" kv($0, "transport")] = kv($0, "rps")
	wrkcpu[kv($0, "server") "/" kv($0, "transport")] = kv($0, "server_cpu_us_per_req")
}
/^discarded / {
	discarded++
}
function cell(k,   m) { # "median (min-max)" req/s, or "-" when not run
	if (!(k in rps))
		return "-"
	m = med(rps[k])
	return sprintf("%.0f (%.0f-%.0f)", m, lo, hi)
}
function ratio_of(a, b) {
	if (!(a in rps) || !(b in rps))
		return "-"
	return sprintf("%.2f", med(rps[a]) / med(rps[b]))
}
function paired(a, b,   r, s, n) { # the median over rounds of a / b measured side by side
	s = ""
	for (r = 1; r <= rounds; r++)
		if (((r "/" a) in by_round) && by_round[r "/" b] > 0)
			s = s " " by_round[r "/" a] / by_round[r "/" b]
	return s == "" ? "-" : sprintf("%.2f", med(s))
}
function cpu_ratio(a, b) { # b CPU / a CPU: the rate ratio if both were CPU-bound
	if (!(a in cpu) || !(b in cpu))
		return "-"
	return sprintf("%.2f", med(cpu[b]) / med(cpu[a]))
}
function cpu_of(k) {
	return (k in cpu) ? sprintf("%.1f", med(cpu[k])) : "-"
}
function lat_of(k) {
	return (k in p50) ? sprintf("%.2f / %.2f", med(p50[k]) / 1000, med(p99[k]) / 1000) : "-"
}
END {
	split("unix tcp tls", ts, " ")
	printf "GET /v1/sandboxes (%s sandboxes), requests/s: median (min-max) of %s rounds\n\n",
	    sandboxes, rounds
	printf "| transport | sandboxd | nginx | sandboxd / nginx | per-round ratio | " \
	    "nginx, sendfile off | sandboxd / that |\n|---|---|---|---|---|---|---|\n"
	for (i = 1; i <= 3; i++) {
		t = ts[i]
		printf "| %s | %s | %s | **%s** | %s | %s | %s |\n", t, cell("sandboxd/" t),
		    cell("nginx/" t), ratio_of("sandboxd/" t, "nginx/" t),
		    paired("sandboxd/" t, "nginx/" t), cell("nginx-nosendfile/" t),
		    ratio_of("sandboxd/" t, "nginx-nosendfile/" t)
	}
	printf "\nserver CPU time per request (us, median) and latency (ms, median of p50 / p99)\n\n"
	printf "| transport | sandboxd CPU | nginx CPU | nginx / sandboxd CPU | " \
	    "nginx sendfile off CPU | sandboxd latency | nginx latency |\n" \
	    "|---|---|---|---|---|---|---|\n"
	for (i = 1; i <= 3; i++) {
		t = ts[i]
		printf "| %s | %s | %s | %s | %s | %s | %s |\n", t, cpu_of("sandboxd/" t),
		    cpu_of("nginx/" t), cpu_ratio("sandboxd/" t, "nginx/" t),
		    cpu_of("nginx-nosendfile/" t), lat_of("sandboxd/" t), lat_of("nginx/" t)
	}
	for (k in other)
		all_other = all_other other[k]
	m = med(all_other)
	printf "\nother work on the machine during the kept runs: median %.2f CPUs (max %.2f); " \
	    "%d runs discarded and repeated for noise\n", m, hi, discarded
	for (i = 2; i <= 3; i++) {
		t = ts[i]
		if (wrk["sandboxd/" t] && wrk["nginx/" t])
			printf "%swrk -t1 cross-check over %s (one run each): sandboxd %s req/s " \
			    "(%s us CPU/req), nginx %s req/s (%s us CPU/req): %.2f\n",
			    i == 2 ? "\n" : "", t, wrk["sandboxd/" t], wrkcpu["sandboxd/" t],
			    wrk["nginx/" t], wrkcpu["nginx/" t], wrk["sandboxd/" t] / wrk["nginx/" t]
	}
	r = med(rps["sandboxd/tcp"]) / med(rps["nginx/tcp"])
	printf "\ngoal: sandboxd at least 0.5 x nginx over TCP: %.2f, %s\n", r,
	    (r >= 0.5 ? "met" : "NOT met")
}' "$RAW")

# per A B N: (B - A) / N with two decimals
per() {
	awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.2f", (b - a) / n }'
}
kib=$(per "$pss0" "$pss2" "$RECORDS")
goal=$(awk -v k="$kib" 'BEGIN { print (k < 64) ? "met" : "NOT met" }')
mem_summary=$(
	printf 'memory per sandbox record (%s records; PSS from /proc/PID/smaps_rollup):\n' "$RECORDS"
	printf '  0 -> %s records: PSS %s -> %s KiB: %s KiB/record (RSS %s, anonymous %s)\n' \
		"$RECORDS" "$pss0" "$pss2" "$kib" "$(per "$rss0" "$rss2" "$RECORDS")" \
		"$(per "$anon0" "$anon2" "$RECORDS")"
	printf '  %s -> %s records (marginal): %s KiB/record PSS\n' "$half" "$RECORDS" \
		"$(per "$pss1" "$pss2" "$((RECORDS - half))")"
	printf '  after one list of all %s: PSS %s KiB: %s KiB/record over the baseline\n' \
		"$RECORDS" "$pss3" "$(per "$pss0" "$pss3" "$RECORDS")"
	printf '  SQLite file after a clean stop: %s -> %s bytes: %s bytes/record\n' "$db0" "$db1" \
		"$(per "$db0" "$db1" "$RECORDS")"
	printf 'goal: under 64 KiB per record: %s\n' "$goal"
	printf 'RSS after the load runs: sandboxd %s KiB (%s sandboxes), nginx worker %s KiB\n' \
		"$rss_a" "$SANDBOXES" "$rss_n"
)

results_close "$summary"$'\n\n'"$mem_summary"
