#!/usr/bin/env bash
# bench/restore/run.sh: create to first exec, measured in one run: a create through sandboxd
# (a cold boot, or whatever sandboxd does for a create: a template restore where it has them)
# and bare QEMUs started with the same command line as sandboxd's VMM: a cold boot of the same
# kernel and initramfs, a save of that guest to a file and a restore from it (QMP migrate to a
# descriptor, -incoming fd:), and 1 and 10 clones of one template (guest RAM a shared file,
# memory-backend-file share=on, saved with x-ignore-shared; clones restored copy-on-write from
# it, share=off), with the PSS of each VMM. Where the server offers them, also pool claims
# (p50/p99 with CLAIMS creates in flight; the server started again with a policy file naming a
# pool) and suspend/resume (bench/suspend/run.sh measures those in depth); what the server does
# not offer is skipped with a line saying so. One command, as root; see docs/performance.md
# ("Restore instead of boot"). VM benchmarks share the machine with VM tests: it takes
# /tmp/sbx-vm.lock.
#
# Knobs (environment): ROUNDS=5 (each round: one of each measurement, kinds rotated)
# CLONES=1,10 ACCEL=auto HOLD=2 (seconds before memory is read) POOL_SIZE=20 CLAIMS=20
# (creates in flight against a pool of POOL_SIZE; the issue's goal is stated for 100)
# QUIET_WAIT=120 QUIET_MAX=25 NOTE='...' KEEP_TMP=0
set -euo pipefail

ROUNDS=${ROUNDS:-5}
CLONES=${CLONES:-1,10}
ACCEL=${ACCEL:-auto}
HOLD=${HOLD:-2}
POOL_SIZE=${POOL_SIZE:-20}
CLAIMS=${CLAIMS:-20}
QUIET_WAIT=${QUIET_WAIT:-120}
QUIET_MAX=${QUIET_MAX:-25}
KEEP_TMP=${KEEP_TMP:-0}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
# shellcheck source=bench/restore/common.sh
. "$ROOT/bench/restore/common.sh"

bench_setup restore
results_open restore
bench_header
rec "# rounds=$ROUNDS clones=$CLONES hold=${HOLD}s pool_size=$POOL_SIZE claims=$CLAIMS"

start_sandboxd --log-level info
warm_up "{}"
CAPS=$(api GET /v1/capabilities)
rec "# capabilities: $CAPS"

for r in $(seq "$ROUNDS"); do
	for k in $(rotate "$r" sbx-create bare-cold bare-saverestore bare-template); do
		log "round $r/$ROUNDS: $k"
		wait_quiet "$QUIET_MAX"
		case "$k" in
		sbx-create)
			line=$(rb sbx-create --sock "$SOCK" --vms "$STATE/vms" --hold "$HOLD")
			rec "run round=$r kind=sbx-create $line"
			;;
		bare-template)
			rb_bare bare-template --clones "$CLONES" | while read -r line; do
				rec "run round=$r kind=$line"
			done
			;;
		*)
			rec "run round=$r kind=$k $(rb_bare "$k")"
			;;
		esac
	done
done

# ---- what other parts of sandboxd offer ----

if grep -q '"suspend":true' <<<"$CAPS"; then
	for r in $(seq "$ROUNDS"); do
		log "round $r/$ROUNDS: suspend and resume"
		wait_quiet "$QUIET_MAX"
		rec "run round=$r kind=sbx-suspend $(rb sbx-suspend --sock "$SOCK" --vms "$STATE/vms" \
			--hold "$HOLD")"
	done
else
	rec "# skipped: suspend and resume (the server's capabilities do not offer suspend)"
	log "skipped: suspend and resume (not offered by this sandboxd)"
fi

# pools: the server again, with a policy file naming one of POOL_SIZE for the default image
stop_sandboxd
printf 'pools:\n  - size: %d\n' "$POOL_SIZE" >"$TMP/policy.yaml"
pooled() { api GET /v1/node | sed -n 's/.*"pooled":\([0-9]*\).*/\1/p'; }
has_pools=0
# room for the pool and the claims beside it (the default is one CPU a sandbox, every CPU)
if start_sandboxd --policy "$TMP/policy.yaml" --capacity-cpus $((POOL_SIZE + CLAIMS + 2)); then
	# a sandboxd without pools accepts the key and boots nothing: none within POOL_WAIT s
	for _ in $(seq "${POOL_WAIT:-120}"); do
		[ "$(pooled)" -ge 1 ] 2>/dev/null && { has_pools=1; break; }
		sleep 1
	done
fi
if [ "$has_pools" = 1 ]; then
	log "pool of $POOL_SIZE: waiting until it is full"
	last=0 since=$SECONDS
	while [ "$(pooled)" -lt "$POOL_SIZE" ] && [ $((SECONDS - since)) -lt 180 ]; do
		n=$(pooled)
		[ "$n" != "$last" ] && last=$n since=$SECONDS
		sleep 1
	done
	rec "# pool: $(api GET /v1/node | sed -n 's/.*\("pooled":[0-9]*,"pools":{[^}]*}\).*/\1/p')"
	wait_quiet "$QUIET_MAX"
	line=$(rb sbx-claims --sock "$SOCK" -n "$CLAIMS")
	rec "run round=1 kind=sbx-claims $line"
	reasons=$(grep -c '"reason":"pool"' "$STATE/audit/events.jsonl" 2>/dev/null || true)
	rec "# claims audited with reason pool: ${reasons:-?} of $CLAIMS"
	for id in $(kv "$line" ids | tr ',' ' '); do
		api DELETE "/v1/sandboxes/$id" >/dev/null
	done
else
	rec "# skipped: pool claims (with --policy naming a pool, GET /v1/node showed no pooled" \
		"sandbox within ${POOL_WAIT:-120} s: this sandboxd has no pools)"
	log "skipped: pool claims (not offered by this sandboxd)"
fi
rec "# after the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- summary ----

summary=$(awk -v accel="$ACCEL_USED" -v rounds="$ROUNDS" "$BENCH_AWK"'
function cell(s, fmt,   m) {
	if (s == "")
		return "-"
	m = med(s)
	return sprintf(fmt " (" fmt "-" fmt ")", m, lo, hi)
}
function ratio(a, b) {
	if (vals[a] == "" || vals[b] == "")
		return "-"
	return sprintf("%.2f", med(vals[a]) / med(vals[b]))
}
function sum(csv,   a, n, i, t) {
	n = split(csv, a, ",")
	for (i = 1; i <= n; i++)
		t += a[i]
	return t
}
/^run / {
	k = kv($0, "kind"); r = kv($0, "round")
	if (k == "sbx-create") {
		add("sbx/total", kv($0, "total_ms"), r); add("sbx/pss", kv($0, "pss_kib") / 1024, r)
	} else if (k == "bare-cold") {
		add("cold/total", kv($0, "total_ms"), r); add("cold/pss", kv($0, "pss_kib") / 1024, r)
	} else if (k == "bare-saverestore") {
		add("sr/save", kv($0, "save_ms"), r); add("sr/restore", kv($0, "restore_ms"), r)
		add("sr/mib", kv($0, "state_mib"), r); add("sr/pss", kv($0, "pss_kib") / 1024, r)
	} else if (k == "template") {
		add("tpl/save", kv($0, "save_ms"), r); add("tpl/kib", kv($0, "state_kib"), r)
	} else if (k == "clones") {
		n = kv($0, "n"); ns[n] = 1
		add("clones" n "/all", kv($0, "all_ms"), r)
		add("clones" n "/pss", sum(kv($0, "pss_kib")) / n / 1024, r)
	} else if (k == "sbx-suspend") {
		add("susp/suspend", kv($0, "suspend_ms"), r); add("susp/resume", kv($0, "resume_run_ms"), r)
	} else if (k == "sbx-claims") {
		claims = sprintf("%d creates in flight: p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d of them succeeded)",
		    kv($0, "n"), kv($0, "p50_ms"), kv($0, "p99_ms"), kv($0, "max_ms"), kv($0, "ok"))
	}
}
/^# skipped/ { skipped = skipped "\n" $0 }
END {
	printf "accelerator: %s; median (min-max) of %d rounds\n\n", accel, rounds
	printf "| create to first exec | ms | PSS of the VMM (MiB) |\n|---|---|---|\n"
	printf "| sandboxd: POST /v1/sandboxes + POST .../run true | %s | %s |\n",
	    cell(vals["sbx/total"], "%.0f"), cell(vals["sbx/pss"], "%.1f")
	printf "| bare QEMU: cold boot, HELLO, EXEC true | %s | %s |\n",
	    cell(vals["cold/total"], "%.0f"), cell(vals["cold/pss"], "%.1f")
	printf "| bare QEMU: restore from its saved file (-incoming fd:), HELLO, EXEC true | %s | %s |\n",
	    cell(vals["sr/restore"], "%.0f"), cell(vals["sr/pss"], "%.1f")
	for (n in ns)
		printf "| bare QEMU: %d clone(s) of a template restored at once (copy-on-write RAM file), until all ran true | %s | %s each |\n",
		    n, cell(vals["clones" n "/all"], "%.0f"), cell(vals["clones" n "/pss"], "%.1f")
	printf "\nbare save (stop, migrate to a file): %s ms, %s MiB; template save (x-ignore-shared): %s ms, %s KiB of device state\n",
	    cell(vals["sr/save"], "%.0f"), cell(vals["sr/mib"], "%.1f"),
	    cell(vals["tpl/save"], "%.0f"), cell(vals["tpl/kib"], "%.0f")
	printf "\nratios of the medians: bare restore / bare cold boot %s; 1 clone / bare cold boot %s; sandboxd create / bare cold boot %s; sandboxd create / bare restore %s; sandboxd create / 1 clone %s\n",
	    ratio("sr/restore", "cold/total"), ratio("clones1/all", "cold/total"),
	    ratio("sbx/total", "cold/total"), ratio("sbx/total", "sr/restore"),
	    ratio("sbx/total", "clones1/all")
	if (vals["susp/suspend"] != "")
		printf "sandboxd suspend: %s ms; resume to first exec: %s ms\n",
		    cell(vals["susp/suspend"], "%.0f"), cell(vals["susp/resume"], "%.0f")
	if (claims != "")
		printf "pool claims: %s\n", claims
	if (skipped != "")
		printf "%s\n", skipped
}' "$RAW")
results_close "$summary"
