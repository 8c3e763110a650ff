#!/usr/bin/env bash
# bench/preview/run.sh: requests per second for a small page through sandboxd's preview listener
# (--preview-listen: the preview cookie checked on a connection's first request, then the
# connection relayed raw through a tunnel to the guest's 127.0.0.1:PORT) against the same wrk
# asking the same nginx directly, in the same run: keep-alive (one tunnel per wrk connection,
# opened once) and `Connection: close` (one tunnel per request). One command (as root the first
# time, to install nginx and wrk from Debian); see docs/performance.md ("Previews").
#
# As bench/tunnel, the server under test is build-bench/bin/sandboxd-fake with
# SANDBOXD_FAKE_AGENT: the guest agent runs on this machine, so its 127.0.0.1:PORT is the
# nginx the baseline asks directly; measured is sandboxd + the agent protocol + guestd.
#
# Knobs (environment): ROUNDS=3 DURATION=5 CONNS=16 PAGE=1024 (the page's bytes)
# QUIET_WAIT=120 PIN=0 BUILD=build-bench JOBS=2 KEEP_TMP=0
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-16}
PAGE=${PAGE:-1024}
QUIET_WAIT=${QUIET_WAIT:-120}
PIN=${PIN:-0}
JOBS=${JOBS:-2}
KEEP_TMP=${KEEP_TMP:-0}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
BUILD=${BUILD:-$ROOT/build-bench}
SANDBOXD=$BUILD/bin/sandboxd-fake
GUESTD=$BUILD/bin/sandbox-guestd-host
TMP=
RAW=
PIDS=()

log() {
	printf 'bench/preview: %s\n' "$*" >&2
}

die() {
	printf 'bench/preview: error: %s\n' "$*" >&2
	exit 1
}

trap fake_cleanup EXIT
trap 'exit 130' INT TERM

# ---- what it needs, and the build ----

for c in cmake ninja cc curl awk; do
	command -v "$c" >/dev/null || die "'$c' is needed (scripts/install-deps.sh installs it)"
done
TMP=$(mktemp -d /tmp/sandboxd-pvbench.XXXXXX)
chmod 711 "$TMP" # nginx's worker (nobody) reads the docroot inside
install_nginx_wrk
build_release -j "$JOBS" sandboxd-fake sandbox-guestd-host
pin_cpus

# ---- the servers ----

free_port && P_NGX=$PORT
free_port && P_PV=$PORT
SOCK=$TMP/sandboxd.sock

mkdir -p "$TMP/www" "$TMP/nginx/tmp"
head -c "$PAGE" /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
chmod -R a+rX "$TMP/www"
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
	keepalive_requests 100000000;
	keepalive_timeout 300s;
	client_body_temp_path $TMP/nginx/tmp/body;
	proxy_temp_path $TMP/nginx/tmp/proxy;
	fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
	uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
	scgi_temp_path $TMP/nginx/tmp/scgi;
	default_type text/html;
	server {
		listen 127.0.0.1:$P_NGX;
		root $TMP/www;
	}
}
EOF
"${server_cpus[@]}" nginx -e "$TMP/nginx/error.log" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" \
	>"$TMP/nginx/stderr.log" 2>&1 &
NGX_PID=$!
PIDS+=("$NGX_PID")

SANDBOXD_FAKE_BOOT_MS=1 SANDBOXD_FAKE_AGENT=$GUESTD "${server_cpus[@]}" "$SANDBOXD" \
	--state-dir "$TMP/state" --socket "$SOCK" --preview-listen "127.0.0.1:$P_PV" \
	--log-level warning >"$TMP/sandboxd.log" 2>&1 &
SBX_PID=$!
PIDS+=("$SBX_PID")
for _ in $(seq 100); do
	curl -sf -o /dev/null --unix-socket "$SOCK" http://localhost/v1/health &&
		curl -sf -o /dev/null "http://127.0.0.1:$P_NGX/" && break
	kill -0 "$SBX_PID" 2>/dev/null || die "sandboxd did not start: $(cat "$TMP/sandboxd.log")"
	kill -0 "$NGX_PID" 2>/dev/null || die "nginx did not start: $(cat "$TMP/nginx/"*.log)"
	sleep 0.1
done
SBX=$(curl -sf --unix-socket "$SOCK" -H 'Content-Type: application/json' \
	-d '{"name":"pvbench"}' http://localhost/v1/sandboxes |
	sed -n 's/.*"id":"\(sbx_[0-9a-f]*\)".*/\1/p')
[ -n "$SBX" ] || die "the sandbox was not created: $(cat "$TMP/sandboxd.log")"
URL=$(curl -sf --unix-socket "$SOCK" -H 'Content-Type: application/json' \
	-d "{\"port\":$P_NGX}" "http://localhost/v1/sandboxes/$SBX/previews" |
	sed -n 's/.*"url":"\([^"]*\)".*/\1/p')
[ -n "$URL" ] || die "no preview URL"
PV_HOST=${URL#http://}
PV_HOST=${PV_HOST%%/*}
# the token becomes the cookie (302), as a browser would take it
COOKIE=$(curl -s -o /dev/null -D - -H "Host: $PV_HOST" \
	"http://127.0.0.1:$P_PV/${URL#http://"$PV_HOST"/}" |
	tr -d '\r' | sed -n 's/^[Ss]et-[Cc]ookie: \(sbx_preview=[^;]*\).*/\1/p')
[ -n "$COOKIE" ] || die "the preview URL set no cookie"
curl -sf -o "$TMP/check" -H "Host: $PV_HOST" -H "Cookie: $COOKIE" "http://127.0.0.1:$P_PV/" ||
	die "the preview did not answer"
cmp -s "$TMP/check" "$TMP/www/index.html" || die "the preview answered other bytes"

# ---- the run ----

results_open preview
rec "# bench/preview/run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
rec "# sandboxd $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
	"(build-bench/bin/sandboxd-fake + SANDBOXD_FAKE_AGENT=sandbox-guestd-host, Release)"
rec "# machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
	"$(nproc) CPUs, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
	"kernel $(uname -r), $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release)"
rec "# $(nginx -v 2>&1), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
rec "# rounds=$ROUNDS duration=${DURATION}s conns=$CONNS page=${PAGE}B pin=$PIN" \
	"(wrk -t1: ${client_cpus[*]:-any CPU}; servers: ${server_cpus[*]:-any CPU})"
rec "# before the run: load average $(cut -d' ' -f1-3 /proc/loadavg), CPUs $(cpu_busy)% busy"

proc_ticks() { # PID: utime + stime in clock ticks
	awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}
GUESTD_PID=$(cat "$TMP/state/fake/$SBX.guestd")
hz=$(getconf CLK_TCK)

total=$((ROUNDS * 4))
i=0
for r in $(seq "$ROUNDS"); do
	for mode in keepalive close; do
		for path in $(rotate "$r" direct preview); do
			i=$((i + 1))
			log "run $i/$total: round $r, $path, $mode"
			wait_quiet 30
			hdr=(-H "Cookie: $COOKIE")
			[ "$mode" = close ] && hdr+=(-H "Connection: close")
			if [ "$path" = preview ]; then
				url=http://127.0.0.1:$P_PV/
				hdr+=(-H "Host: $PV_HOST")
			else
				url=http://127.0.0.1:$P_NGX/
			fi
			s0=$(proc_ticks "$SBX_PID")
			g0=$(proc_ticks "$GUESTD_PID")
			out=$("${client_cpus[@]}" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency \
				"${hdr[@]}" "$url")
			s1=$(proc_ticks "$SBX_PID")
			g1=$(proc_ticks "$GUESTD_PID")
			! grep -q 'Non-2xx\|Socket errors' <<<"$out" || die "wrk $path $mode: $out"
			rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' <<<"$out")
			n=$(awk '/requests in/ { print $1 }' <<<"$out")
			p50=$(awk '$1 == "50%" { print $2 }' <<<"$out")
			p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
			rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$SBX_PID/status")
			rec "run round=$r mode=$mode path=$path busy_before=$BUSY rps=$rps requests=$n" \
				"p50=$p50 p99=$p99" \
				"sandboxd_cpu_us_per_req=$(awk -v d=$((s1 - s0)) -v n="$n" -v hz="$hz" \
					'BEGIN { printf "%.1f", n ? d * 1e6 / hz / n : 0 }')" \
				"agent_cpu_us_per_req=$(awk -v d=$((g1 - g0)) -v n="$n" -v hz="$hz" \
					'BEGIN { printf "%.1f", n ? d * 1e6 / hz / n : 0 }')" \
				"sandboxd_rss_kib=$rss"
		done
	done
done
rec "# sandboxd VmHWM: $(awk '/^VmHWM/ { print $2 }' "/proc/$SBX_PID/status") KiB"
rec "# after the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

summary=$(awk -v rounds="$ROUNDS" -v conns="$CONNS" -v page="$PAGE" -v d="$DURATION" \
	"$BENCH_AWK"'
/^run / {
	k = kv($0, "path") "/" kv($0, "mode")
	add(k, kv($0, "rps"), kv($0, "round"))
	lat[k] = lat[k] " " kv($0, "p50") "/" kv($0, "p99")
	cpu[k] = cpu[k] " " kv($0, "sandboxd_cpu_us_per_req")
	acpu[k] = acpu[k] " " kv($0, "agent_cpu_us_per_req")
}
function cell(k,   m) {
	if (!(k in vals)) return "-"
	m = med(vals[k])
	return sprintf("%.0f (%.0f-%.0f)", m, lo, hi)
}
function paired(a, b,   r, s) {
	s = ""
	for (r = 1; r <= rounds; r++)
		if (((r "/" a) in by) && by[r "/" b] > 0)
			s = s " " by[r "/" a] / by[r "/" b]
	return s == "" ? "-" : sprintf("%.2f", med(s))
}
END {
	printf "GET / (%d bytes) with wrk -t1 -c%d, %ds per run, requests/s: median (min-max) " \
	    "of %d rounds; ratio: the median of the per-round ratios\n\n", page, conns, d, rounds
	printf "| connections | nginx directly | through the preview | preview / direct | " \
	    "sandboxd / agent CPU per request (us) |\n|---|---|---|---|---|\n"
	split("keepalive close", ms, " ")
	for (i = 1; i <= 2; i++) {
		m = ms[i]
		printf "| %s | %s | %s | **%s** | %.1f / %.1f |\n",
		    m == "close" ? "Connection: close (a tunnel per request)" : "keep-alive",
		    cell("direct/" m), cell("preview/" m), paired("preview/" m, "direct/" m),
		    med(cpu["preview/" m]), med(acpu["preview/" m])
	}
	printf "\nwrk latency p50/p99 per run: "
	for (k in lat)
		printf "%s:%s; ", k, lat[k]
	printf "\n"
}' "$RAW")

results_close "$summary"
