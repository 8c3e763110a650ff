#!/usr/bin/env bash
# bench/suspend/run.sh: suspend and resume of a 512 MiB sandbox through sandboxd against a bare
# QEMU's save and restore of the same guest (the same command line as sandboxd's VMM, paths in
# place of its descriptors), in one run: both guests first fill TOUCH_MB of their RAM (a tmpfs
# file of random bytes, as work in progress would), then sandboxd's POST …/suspend against the
# bare QMP stop + migrate to a file descriptor until completed, and POST …/resume + the first
# run of true against a QEMU started with -incoming fd: from that file + HELLO + EXEC true.
# Skips sandboxd's side, saying so, where the server does not offer suspend. One command, as
# root; see docs/performance.md ("Restore instead of boot"). Takes /tmp/sbx-vm.lock.
#
# Knobs (environment): ROUNDS=5 MEM_MB=512 TOUCH_MB=200 ACCEL=auto HOLD=1 QUIET_WAIT=120
# QUIET_MAX=25 NOTE='...' KEEP_TMP=0
set -euo pipefail

ROUNDS=${ROUNDS:-5}
MEM_MB=${MEM_MB:-512}
TOUCH_MB=${TOUCH_MB:-200}
ACCEL=${ACCEL:-auto}
HOLD=${HOLD:-1}
QUIET_WAIT=${QUIET_WAIT:-120}
QUIET_MAX=${QUIET_MAX:-25}
KEEP_TMP=${KEEP_TMP:-0}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
# shellcheck source=bench/restore/common.sh
. "$ROOT/bench/restore/common.sh"

bench_setup suspend
results_open suspend
bench_header
rec "# rounds=$ROUNDS memory=${MEM_MB}MiB touched=${TOUCH_MB}MiB hold=${HOLD}s"

start_sandboxd --log-level info
BODY="{\"memory_mb\":$MEM_MB}"
warm_up "$BODY"
CAPS=$(api GET /v1/capabilities)
rec "# capabilities: $CAPS"
kinds=(bare-saverestore)
if grep -q '"suspend":true' <<<"$CAPS"; then
	kinds+=(sbx-suspend)
else
	rec "# skipped: sandboxd's suspend and resume (the server's capabilities do not offer suspend)"
	log "skipped: sandboxd's suspend and resume (not offered by this sandboxd)"
fi

for r in $(seq "$ROUNDS"); do
	for k in $(rotate "$r" "${kinds[@]}"); do
		log "round $r/$ROUNDS: $k"
		wait_quiet "$QUIET_MAX"
		case "$k" in
		sbx-suspend)
			line=$(rb sbx-suspend --sock "$SOCK" --vms "$STATE/vms" --body "$BODY" \
				--touch-mb "$TOUCH_MB" --hold "$HOLD")
			;;
		bare-saverestore)
			line=$(rb_bare bare-saverestore --touch-mb "$TOUCH_MB")
			;;
		esac
		rec "run round=$r kind=$k $line"
	done
done
rec "# after the run: load average $(cut -d' ' -f1-3 /proc/loadavg)"

summary=$(awk -v accel="$ACCEL_USED" -v rounds="$ROUNDS" -v mem="$MEM_MB" -v touch="$TOUCH_MB" \
	"$BENCH_AWK"'
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
/^run / {
	k = kv($0, "kind"); r = kv($0, "round")
	if (k == "sbx-suspend") {
		add("sbx/save", kv($0, "suspend_ms"), r); add("sbx/restore", kv($0, "resume_run_ms"), r)
		add("sbx/mib", kv($0, "state_mib"), r); add("sbx/resume_api", kv($0, "resume_ms"), r)
	} else if (k == "bare-saverestore") {
		add("bare/save", kv($0, "save_ms"), r); add("bare/restore", kv($0, "restore_ms"), r)
		add("bare/mib", kv($0, "state_mib"), r)
	}
}
/^# skipped/ { skipped = skipped "\n" $0 }
END {
	printf "accelerator: %s; a %d MiB guest with %d MiB of it filled; median (min-max) of %d rounds\n\n",
	    accel, mem, touch, rounds
	printf "| | save (ms) | saved state (MiB) | restore to first exec (ms) |\n|---|---|---|---|\n"
	printf "| sandboxd: POST .../suspend; POST .../resume + POST .../run true | %s | %s | %s |\n",
	    cell(vals["sbx/save"], "%.0f"), cell(vals["sbx/mib"], "%.1f"), cell(vals["sbx/restore"], "%.0f")
	printf "| bare QEMU: stop + migrate fd: until completed; -incoming fd: + HELLO + EXEC true | %s | %s | %s |\n",
	    cell(vals["bare/save"], "%.0f"), cell(vals["bare/mib"], "%.1f"), cell(vals["bare/restore"], "%.0f")
	printf "\nsandboxd / bare (ratios of the medians): suspend %s, resume to first exec %s (goal: at most 1.2 each)\n",
	    ratio("sbx/save", "bare/save"), ratio("sbx/restore", "bare/restore")
	if (vals["sbx/resume_api"] != "")
		printf "POST .../resume alone: %s ms\n", cell(vals["sbx/resume_api"], "%.0f")
	if (skipped != "")
		printf "%s\n", skipped
}' "$RAW")
results_close "$summary"
