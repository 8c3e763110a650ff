#!/usr/bin/env bash
# bench/dashboard/run.sh: the dashboard's three goals, each against a baseline in the same run.
#  1. A thousand idle event-stream subscribers (GET /v1/events/stream) against a thousand idle
#     keep-alive connections (one GET /v1/health each) in one sandboxd-fake: its memory per
#     connection, and each state change delivered to all of them (subscribers.py).
#  2. The dashboard's list with 100 sandboxes in headless Chromium: from page.goto to the 100
#     rows in the DOM, against a navigation to a trivial page of the same server.
#  3. A state change made through the API, from persisted to seen in the open list, against a
#     bare EventSource in a page of its own (browser.mjs; report.py joins the persist times).
# One command; see docs/performance.md ("Dashboard") for how to read it.
#
# The server is build-bench/bin/sandboxd-fake (the daemon with the test-only fake backend,
# which boots nothing), on a unix socket and TCP on 127.0.0.1 with an operator token of its own.
#
# Knobs (environment): PARTS="subscribers browser" ROUNDS=3 SUBSCRIBERS=1000 FANOUT_CHANGES=10
# TRANSPORTS="unix tcp" LARGEST=1 (one more unix run whose events carry the largest sandbox
# object the API accepts) SANDBOXES=100 NAVS=10 CHANGES=50 PIN=1 (the clients on CPU 0,
# sandboxd on the last CPU, for part 1; the browser runs where it likes)
# CHROMIUM=/usr/bin/chromium AS=user (the page as a user who owns the sandboxes; operator: with
# the operator's token, for a tree without accounts) BUILD=build-bench (NO_BUILD=1: use what
# is there) QUIET_WAIT=120 (seconds to wait, before each part, for other work on the machine to stop)
# KEEP_TMP=0.
set -euo pipefail

PARTS=${PARTS:-subscribers browser}
ROUNDS=${ROUNDS:-3}
SUBSCRIBERS=${SUBSCRIBERS:-1000}
FANOUT_CHANGES=${FANOUT_CHANGES:-10}
TRANSPORTS=${TRANSPORTS:-unix tcp}
SANDBOXES=${SANDBOXES:-100}
NAVS=${NAVS:-10}
CHANGES=${CHANGES:-50}
PIN=${PIN:-1}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
QUIET_WAIT=${QUIET_WAIT:-120}
KEEP_TMP=${KEEP_TMP:-0}
NO_BUILD=${NO_BUILD:-0}
LARGEST=${LARGEST:-1}
AS=${AS:-user}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
HERE=$ROOT/bench/dashboard
BUILD=${BUILD:-$ROOT/build-bench}
SANDBOXD=$BUILD/bin/sandboxd-fake
TMP=
RAW=
PIDS=()
EMAIL=bench-user@example.test
PASSWORD=bench-password-$$-$RANDOM

log() {
	printf 'bench/dashboard: %s\n' "$*" >&2
}

die() {
	printf 'bench/dashboard: error: %s\n' "$*" >&2
	exit 1
}

stop_pid() { # PID: TERM, then KILL after 5 s; waits for it
	local pid=$1 i keep=()
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 50); do
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

cleanup() {
	set +e
	local i
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		stop_pid "${PIDS[i]}"
	done
	scratch_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- what it needs, and the build ----

want_part() {
	case " $PARTS " in *" $1 "*) return 0 ;; esac
	return 1
}

for c in cmake ninja curl python3 taskset; do
	command -v "$c" >/dev/null || die "'$c' is needed"
done
if want_part browser; then
	command -v node >/dev/null || die "'node' is needed: run scripts/install-deps.sh"
	[ -x "$CHROMIUM" ] || die "$CHROMIUM is missing: run scripts/install-deps.sh (Debian's chromium)"
	[ -d "$ROOT/web/node_modules/playwright-core" ] ||
		die "web/node_modules/playwright-core is missing: run scripts/install-deps.sh"
fi
python3 -c 'import sqlite3' 2>/dev/null || die "python3 lacks sqlite3"

# file descriptors: every connection is one in the client and one in sandboxd
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -ge $((2 * SUBSCRIBERS + 200)) ] ||
	die "ulimit -n is $(ulimit -n); $((2 * SUBSCRIBERS + 200)) are needed (raise the hard limit)"

TMP=$(mktemp -d /tmp/sandboxd-dashbench.XXXXXX)
[ "$NO_BUILD" = 1 ] || build_release all
[ -x "$SANDBOXD" ] || die "$SANDBOXD is missing"

# ---- helpers ----

pin_cpus

quiet() { # wait_quiet, and what it found into the results
	wait_quiet 15
	rec "# quiet: waited $WAITED s; CPUs ${BUSY}% busy before measuring"
}

TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
(umask 077 && printf '%s\n' "$TOKEN" >"$TMP/token")

# start_sandboxd NAME ARGS...: a fresh sandboxd-fake with its own state directory, a unix
# socket and TCP; sets SBX_PID, SOCK, STATE, TCP_PORT
# (another port when someone else took the first one meanwhile)
start_sandboxd() {
	local name=$1 try
	shift
	STATE=$TMP/$name-state
	SOCK=$TMP/$name.sock
	for try in 1 2 3; do
		free_port && TCP_PORT=$PORT
		# the fake's sandboxes hold nothing: the machine's size does not bound them
		SANDBOXD_FAKE_BOOT_MS=1 "${server_cpus[@]}" "$SANDBOXD" --state-dir "$STATE" \
			--socket "$SOCK" --listen "127.0.0.1:$TCP_PORT" --token-file "$TMP/token" \
			--capacity-cpus 1048576 --capacity-memory-mb 1073741824 \
			--capacity-disk-mb 2147483648 --log-level warning "$@" >"$TMP/$name.log" 2>&1 &
		SBX_PID=$!
		PIDS+=("$SBX_PID")
		for _ in $(seq 100); do
			kill -0 "$SBX_PID" 2>/dev/null || break
			curl -sf -o /dev/null --unix-socket "$SOCK" http://localhost/v1/health &&
				curl -sf -o /dev/null "http://127.0.0.1:$TCP_PORT/v1/health" && return 0
			sleep 0.1
		done
		stop_pid "$SBX_PID"
		grep -q 'cannot bind' "$TMP/$name.log" || break
		log "port $TCP_PORT was taken meanwhile (try $try of 3)"
	done
	die "sandboxd did not start: $(cat "$TMP/$name.log")"
}

# op METHOD PATH [JSON]: as the operator (the unix socket's peer); prints the body, fails on
# a status that is not 2xx
op() {
	local args=(-sS --fail-with-body --unix-socket "$SOCK" -X "$1")
	[ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' -d "$3")
	curl "${args[@]}" "http://localhost$2"
}

# user_login: creates the user EMAIL (as the operator) and logs in over TCP; sets COOKIES
# (curl's cookie jar) and CSRF
user_login() {
	local login
	op POST /v1/users "{\"email\":\"$EMAIL\",\"password\":\"$PASSWORD\"}" >/dev/null ||
		die "POST /v1/users failed: this needs the accounts (or AS=operator)"
	COOKIES=$TMP/cookies
	login=$(curl -sS --fail-with-body -c "$COOKIES" -H 'Content-Type: application/json' \
		-d "{\"email\":\"$EMAIL\",\"password\":\"$PASSWORD\"}" \
		"http://127.0.0.1:$TCP_PORT/v1/auth/login") || die "login failed: $login"
	CSRF=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["csrf_token"])' <<<"$login")
}

# user_key: the user's API key (after user_login), as the CLI and SDKs use; sets KEY
user_key() {
	local r
	r=$(curl -sS --fail-with-body -b "$COOKIES" -H "X-CSRF-Token: $CSRF" \
		-H 'Content-Type: application/json' -d '{"name":"bench"}' \
		"http://127.0.0.1:$TCP_PORT/v1/keys") || die "POST /v1/keys failed: $r"
	KEY=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])' <<<"$r")
}

# ---- the run ----

results_open dashboard
rec "# bench/dashboard/run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
rec "# sandboxd $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
	"(build-bench/bin/sandboxd-fake, Release)"
rec "# machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
	"$(nproc) CPUs, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
	"kernel $(uname -r), $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release)"
rec "# $(python3 --version), node $(node --version 2>/dev/null || echo none)," \
	"$("$CHROMIUM" --version 2>/dev/null | head -1 || echo 'no chromium')"
rec "# parts=\"$PARTS\" rounds=$ROUNDS subscribers=$SUBSCRIBERS fanout_changes=$FANOUT_CHANGES" \
	"transports=\"$TRANSPORTS\" sandboxes=$SANDBOXES navs=$NAVS changes=$CHANGES pin=$PIN" \
	"(clients: ${client_cpus[*]:-any CPU}; sandboxd: ${server_cpus[*]:-any CPU})"

# 1. idle subscribers against idle keep-alive connections, in a fresh sandboxd each round and
# transport; which kind opens first alternates, so neither always lands on a fresh heap
if want_part subscribers; then
	rec "# subscribers: unix = the operator on the unix socket (every event); tcp = the" \
		"operator's token over TCP; tcp-user-key = a user's API key over TCP (that user's" \
		"events only, as the dashboard's stream); unix-largest = unix, the sandbox changed" \
		"carrying 64 labels of the longest key and value (the largest events)"
	quiet
	runs=()
	for round in $(seq "$ROUNDS"); do
		for tr in $TRANSPORTS; do
			runs+=("$round:$tr")
		done
	done
	# and once more with the largest sandbox object the API accepts (64 labels of the
	# longest key and value): what the subscribers keep depends on the events they had
	[ "$LARGEST" = 1 ] && runs+=("1:unix-largest")
	for run in "${runs[@]}"; do
		round=${run%%:*}
		tr=${run#*:}
		order=sse,idle
		[ $((round % 2)) = 0 ] && order=idle,sse
		log "subscribers: round $round of $ROUNDS, $tr, $order"
		start_sandboxd "sub-$round-$tr" --max-connections $((2 * SUBSCRIBERS + 64)) \
			--max-connections-per-client 0
		if [ "$tr" = tcp ] && [ "$AS" = user ]; then
			# a user's streams, as the dashboard and the SDKs open them: only
			# that user's events, an API key on every connection
			user_login
			user_key
			(umask 077 && printf 'Authorization: Bearer %s\n' "$KEY" >"$TMP/auth")
			target=(--tcp "127.0.0.1:$TCP_PORT" --header-file "$TMP/auth")
			curl -sS --fail-with-body -o /dev/null -H "@$TMP/auth" \
				-H 'Content-Type: application/json' -d '{"name":"fan"}' \
				"http://127.0.0.1:$TCP_PORT/v1/sandboxes" || die "create failed"
		elif [ "$tr" = tcp ]; then
			target=(--tcp "127.0.0.1:$TCP_PORT" --token-file "$TMP/token")
			op POST /v1/sandboxes '{"name":"fan"}' >/dev/null
		elif [ "$tr" = unix-largest ]; then
			target=(--socket "$SOCK")
			op POST /v1/sandboxes "$(python3 -c 'import json; print(json.dumps({
				"name": "fan", "labels": {"k%02d" % i + "x" * 60: "v" * 253
				for i in range(64)}}))')" >/dev/null
		else
			target=(--socket "$SOCK")
			op POST /v1/sandboxes '{"name":"fan"}' >/dev/null
		fi
		"${client_cpus[@]}" python3 "$HERE/subscribers.py" "${target[@]}" \
			--pid "$SBX_PID" --db "$STATE/sandboxd.db" --n "$SUBSCRIBERS" \
			--order "$order" --sandbox fan --changes "$FANOUT_CHANGES" \
			>"$TMP/sub.out" 2>"$TMP/sub.err" || {
			cat "$TMP/sub.err" >&2
			die "subscribers.py failed (round $round, $tr)"
		}
		label=$tr
		[ "$tr" = tcp ] && [ "$AS" = user ] && label=tcp-user-key
		sed "s/^\([a-z0-9]*\) /\1 transport=$label round=$round n=$SUBSCRIBERS /" \
			"$TMP/sub.out" >>"$RAW"
		stop_pid "$SBX_PID"
	done
fi

# 2 and 3. the page, as a user who owns SANDBOXES sandboxes (AS=operator: as the operator,
# for a tree without accounts)
if want_part browser; then
	log "browser: $AS with $SANDBOXES sandboxes"
	start_sandboxd web --user-max-sandboxes 0 --user-max-cpus 0 --user-max-memory-mb 0
	BASE=http://127.0.0.1:$TCP_PORT
	cred=(-H "Authorization: Bearer $TOKEN")
	owner=operator
	if [ "$AS" = user ]; then
		# the user's own credential: log in, then create with the cookie and the CSRF token
		user_login
		cred=(-b "$COOKIES" -H "X-CSRF-Token: $CSRF")
		owner=$EMAIL
	fi
	for i in $(seq "$SANDBOXES"); do
		curl -sS -o /dev/null -w '%{http_code}\n' "${cred[@]}" -H 'Content-Type: application/json' \
			-d "{\"name\":\"row-$(printf %03d "$i")\"}" "$BASE/v1/sandboxes"
	done >"$TMP/create.codes"
	bad=$(grep -vc '^201$' "$TMP/create.codes" || true)
	[ "$bad" = 0 ] || die "$bad of $SANDBOXES creates did not answer 201"
	n=$(op GET /v1/sandboxes | grep -o "\"owner\":\"$owner\"" | wc -l || true)
	[ "$n" = "$SANDBOXES" ] || die "$owner owns $n sandboxes, not $SANDBOXES"
	rec "# browser: $owner owns $SANDBOXES running sandboxes (created with its credential);" \
		"the page as $AS; list at $BASE/#/"
	quiet
	log "browser: $NAVS navigations each way, then $CHANGES state changes"
	AS=$AS BASE=$BASE EMAIL=$EMAIL PASSWORD=$PASSWORD TOKEN=$TOKEN SANDBOXES=$SANDBOXES NAVS=$NAVS \
		CHANGES=$CHANGES CHROMIUM=$CHROMIUM WEB_DIR=$ROOT/web \
		node "$HERE/browser.mjs" >"$TMP/browser.out" 2>"$TMP/browser.err" || {
		tail -30 "$TMP/browser.err" >&2
		die "browser.mjs failed"
	}
	cat "$TMP/browser.out" >>"$RAW"
	python3 "$HERE/report.py" join "$STATE/sandboxd.db" <"$TMP/browser.out" >>"$RAW" ||
		die "joining the persist times failed"
	stop_pid "$SBX_PID"
fi

summary=$(python3 "$HERE/report.py" summary "$RAW")
results_close "$summary"
