# shellcheck shell=bash
# bench/lib.sh: what every bench/*/run.sh shares (sourced; bash). Needs ROOT set; what else a
# helper uses (log, die, TMP, BUILD, KEEP_TMP, QUIET_WAIT, PIN) is the script's.

# results_open NAME: OUT becomes bench/results/NAME-DATE.txt (NAME-DATE-2.txt... when that
# exists), RAW the scratch file the run appends to with rec before it is renamed to OUT.
results_open() {
	local date n=2
	date=$(date -u +%Y-%m-%d)
	mkdir -p "$ROOT/bench/results"
	OUT=$ROOT/bench/results/$1-$date.txt
	while [ -e "$OUT" ]; do
		OUT=$ROOT/bench/results/$1-$date-$n.txt
		n=$((n + 1))
	done
	RAW=$OUT.tmp
	: >"$RAW"
}

rec() { # LINE...: one line of raw results
	printf '%s\n' "$*" >>"$RAW"
}

rotate() { # N ITEMS...: the items rotated by N, so no side always goes first
	local n=$1 k
	shift
	local a=("$@")
	for ((k = 0; k < ${#a[@]}; k++)); do
		printf '%s ' "${a[(k + n) % ${#a[@]}]}"
	done
}

kv() { # LINE KEY: the value of KEY=VALUE in a line of words
	sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"
}

# The summary's helpers, for the start of an awk program: kv(LINE, KEY) the value of KEY=VALUE
# in a raw line; med(S) the median of the numbers in the string S (sets lo and hi, its least
# and greatest); add(K, V, ROUND) appends V to vals[K] and keeps it as by[ROUND "/" K].
# shellcheck disable=SC2016,SC2034 # awk's, not the shell's; the scripts use it
BENCH_AWK='
function kv(line, key,   re) {
	re = " " key "="
	if (!match(line, re "[^ ]*"))
		return ""
	return substr(line, RSTART + length(re), RLENGTH - length(re))
}
function med(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 2; i <= n; i++) { # insertion sort: a handful of values
		t = a[i] + 0
		for (j = i - 1; j >= 1 && a[j] + 0 > t; j--)
			a[j + 1] = a[j]
		a[j + 1] = t
	}
	lo = a[1]; hi = a[n]
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function add(k, v, r) {
	vals[k] = vals[k] " " v
	by[r "/" k] = v
}
'

# results_close SUMMARY: prints the summary and appends it to the raw results, which then
# become OUT.
results_close() {
	{
		echo
		echo "$1"
	} | tee -a "$RAW"
	mv "$RAW" "$OUT"
	RAW=
	log "raw results: ${OUT#"$ROOT"/}"
}

# scratch_remove: for the EXIT trap: removes TMP and the raw results of a run that did not
# finish, or with KEEP_TMP=1 keeps both and says where TMP is.
scratch_remove() {
	if [ -n "$TMP" ] && [ -d "$TMP" ]; then
		if [ "$KEEP_TMP" = 1 ]; then
			log "kept $TMP"
		else
			rm -rf "$TMP"
		fi
	fi
	if [ -n "$RAW" ] && [ -f "$RAW" ] && [ "$KEEP_TMP" != 1 ]; then
		rm -f "$RAW"
	fi
}

# fake_cleanup: the EXIT trap of a run on sandboxd-fake. The sandbox SBX first, deleted
# through SOCK (the fake's agent outlives sandboxd like a VM; a delete ends it), then PIDS,
# last started first; then an agent still left (sandboxd killed before the delete): only this
# run's, by its pid file in TMP's state directory; then scratch_remove.
fake_cleanup() {
	set +e
	local i f
	if [ -n "${SOCK:-}" ] && [ -S "$SOCK" ] && [ -n "${SBX:-}" ]; then
		curl -s -o /dev/null -X DELETE --unix-socket "$SOCK" \
			"http://localhost/v1/sandboxes/$SBX?force=true"
	fi
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		stop_pid "${PIDS[i]}"
	done
	if [ -n "$TMP" ]; then
		for f in "$TMP"/state/fake/*.guestd; do
			[ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
		done
	fi
	scratch_remove
}

# build_release NINJA_ARGS...: configures BUILD (Release) and builds what NINJA_ARGS name (all:
# everything); the log in TMP/build.log, its tail on failure.
build_release() {
	log "building $BUILD (Release)"
	cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$TMP/build.log" 2>&1 ||
		die "cmake failed: $(tail -5 "$TMP/build.log")"
	ninja -C "$BUILD" "$@" >>"$TMP/build.log" 2>&1 || {
		tail -20 "$TMP/build.log" >&2
		die "the build failed"
	}
}

# cpu_busy: percent of all CPUs busy over one second.
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

# wait_quiet PERCENT: waits (QUIET_WAIT seconds at most) for a second in which the CPUs are
# less than PERCENT busy: a run measured next to someone else's build tells little. Sets
# WAITED (seconds) and BUSY (the percent of the last second).
wait_quiet() {
	local max=$1 start=$SECONDS
	while :; do
		BUSY=$(cpu_busy)
		[ "$BUSY" -lt "$max" ] && break
		if [ $((SECONDS - start)) -ge "$QUIET_WAIT" ]; then
			log "warning: the CPUs are still ${BUSY}% busy after ${QUIET_WAIT}s; measuring anyway"
			break
		fi
		sleep 4
	done
	WAITED=$((SECONDS - start))
	[ "$WAITED" -lt 2 ] || log "waited ${WAITED}s for the machine to be quiet"
}

# pin_cpus: with PIN=1 on two CPUs or more, server_cpus and client_cpus become taskset
# prefixes (the servers on the last CPU, the clients on the first); empty otherwise.
# shellcheck disable=SC2034 # the scripts'
pin_cpus() {
	server_cpus=()
	client_cpus=()
	if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ]; then
		server_cpus=(taskset -c "$(($(nproc) - 1))")
		client_cpus=(taskset -c 0)
	fi
}

port_busy() { # PORT: true when something listens on 127.0.0.1:PORT
	(: <>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: sets PORT to a free TCP port on 127.0.0.1 not handed out before, below the
# ephemeral range (so no outgoing connection takes it before the server binds it).
USED_PORTS=" "
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 12000))
		case "$USED_PORTS" in *" $p "*) continue ;; esac
		if ! port_busy "$p"; then
			USED_PORTS="$USED_PORTS$p "
			# shellcheck disable=SC2034 # the scripts'
			PORT=$p
			return 0
		fi
	done
	die "no free TCP port"
}

stop_pid() { # PID: TERM, then KILL after 5 s; waits for it
	local p=$1
	kill -TERM "$p" 2>/dev/null || return 0
	for _ in $(seq 50); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
}

deb_installed() { # PACKAGE: true when Debian says it is installed
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# install_nginx_wrk: nginx and wrk from Debian if missing (as root; apt's log in $TMP). The
# package's maintainer script may start the system nginx on port 80: whatever nginx appears
# during the install is stopped again (the benchmarks run their own).
install_nginx_wrk() {
	local need=() started=() before pid
	command -v nginx >/dev/null || deb_installed nginx || need+=(nginx)
	command -v wrk >/dev/null || deb_installed wrk || need+=(wrk)
	[ "${#need[@]}" -eq 0 ] && return 0
	[ "$(id -u)" = 0 ] || die "missing ${need[*]}: run 'apt-get install ${need[*]}' as root"
	log "installing ${need[*]} from Debian"
	# pgrep exits 1 when no nginx runs: under pipefail that would end the script here
	before=" $(pgrep -x nginx | tr '\n' ' ' || true) "
	export DEBIAN_FRONTEND=noninteractive
	local apt=(apt-get -o DPkg::Lock::Timeout=300 -y -qq)
	if ! "${apt[@]}" install --no-install-recommends "${need[@]}" >"$TMP/apt.log" 2>&1; then
		"${apt[@]}" update >>"$TMP/apt.log" 2>&1 || true
		"${apt[@]}" install --no-install-recommends "${need[@]}" >>"$TMP/apt.log" 2>&1 || {
			tail -20 "$TMP/apt.log" >&2
			die "apt-get install ${need[*]} failed"
		}
	fi
	for pid in $(pgrep -x nginx || true); do
		case "$before" in
		*" $pid "*) ;;
		*) started+=("$pid") ;;
		esac
	done
	for pid in "${started[@]}"; do
		# masters only: their workers leave with them
		[ "$(ps -o comm= -p "$(ps -o ppid= -p "$pid" | tr -d ' ')")" = nginx ] && continue
		log "stopping the system nginx (pid $pid) that the install started"
		kill -QUIT "$pid" 2>/dev/null || true
	done
	for pid in "${started[@]}"; do
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	done
}
