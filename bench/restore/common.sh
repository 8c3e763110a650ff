# shellcheck shell=bash
# bench/restore/common.sh: what bench/restore/run.sh and bench/suspend/run.sh share (sourced
# after bench/lib.sh; bash): the build, the guest bundle, sandboxd started and stopped, the
# warm-up sandbox whose VMM command line the bare QEMUs copy, restorebench.py, and the cleanup
# of everything the run started. Needs ROOT, ACCEL, KEEP_TMP, QUIET_WAIT.

BUILD=$ROOT/build-bench
BUNDLE=$BUILD/vm-bundle
TMP=
RAW=
SBX_PID=
SOCK=
NAME=

log() {
	printf 'bench/%s: %s\n' "$NAME" "$*" >&2
}

die() {
	printf 'bench/%s: error: %s\n' "$NAME" "$*" >&2
	exit 1
}

api() { # METHOD PATH [JSON]: the body on stdout
	local m=$1 p=$2
	shift 2
	if [ $# -gt 0 ]; then
		curl -sS --max-time 300 --unix-socket "$SOCK" -X "$m" \
			-H 'Content-Type: application/json' -d "$1" "http://localhost$p"
	else
		curl -sS --max-time 300 --unix-socket "$SOCK" -X "$m" "http://localhost$p"
	fi
}

rb() { # restorebench.py ARGS...: its line
	python3 "$ROOT/bench/restore/restorebench.py" --work "$WORK/bare" "$@" 2>>"$TMP/rb.err" ||
		die "restorebench $1 failed: $(tail -5 "$TMP/rb.err")"
}

rb_bare() { # WHAT [ARGS...]: a bare QEMU measurement, on the files the warm-up found
	local what=$1
	shift
	rb "$what" --vmm-cmdline "$TMP/vmm.cmdline" --kernel "$KERNEL" --initrd "$INITRD" \
		--rootfs "$ROOTFS" --blank "$BLANK" --hold "$HOLD" "$@"
}

# Everything this run started: sandboxes (deleted through the API: VMs outlive sandboxd),
# sandboxd, then any QEMU with this run's marker in its environment.
restore_cleanup() {
	local id pid
	set +e
	stop_sandboxd
	for pid in $(pgrep -f qemu-system-x86_64); do
		if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null |
			grep -qxF -e "SANDBOXD_STATE_DIR=$STATE" -e "SANDBOXD_RESTOREBENCH_DIR=$WORK/bare"; then
			log "ending a VMM left behind: pid $pid"
			kill -KILL "$pid" 2>/dev/null
		fi
	done
	rm -f /dev/shm/restorebench-*.ram 2>/dev/null
	[ -f "$STATE/vm/accel" ] && cp "$STATE/vm/accel" "$WORK/accel" 2>/dev/null
	if [ "$KEEP_TMP" = 1 ]; then
		log "kept $TMP and $WORK"
	else
		[ -n "$TMP" ] && rm -rf "$TMP"
		rm -rf "$STATE" "$WORK/bare"
	fi
	if [ -n "$RAW" ] && [ -f "$RAW" ] && [ "$KEEP_TMP" != 1 ]; then
		rm -f "$RAW"
	fi
}

# bench_setup NAME: root, the tools, the VM lock, the Release build and the guest bundle.
bench_setup() {
	NAME=$1
	WORK=$BUILD/bench/$NAME
	STATE=$WORK/state
	[ "$(id -u)" = 0 ] || die "run as root: sandboxd confines each VMM under its own uid"
	for c in cmake ninja cc curl python3 qemu-system-x86_64 qemu-img flock; do
		command -v "$c" >/dev/null || die "'$c' is needed"
	done
	mkdir -p "$WORK"
	# one VM benchmark or VM test at a time on this machine
	exec 9>/tmp/sbx-vm.lock
	log "waiting for /tmp/sbx-vm.lock"
	flock 9
	trap restore_cleanup EXIT
	trap 'exit 130' INT TERM
	TMP=$(mktemp -d "/tmp/sandboxd-$NAME.XXXXXX")
	if [ -z "${SANDBOXD:-}" ]; then
		build_release sandboxd sandbox-guestd
		SANDBOXD=$BUILD/bin/sandboxd
	fi
	log "guest bundle in $BUNDLE (sandboxd setup; reused when up to date)"
	"$SANDBOXD" setup --state-dir "$BUNDLE" --agent "$BUILD/bin/sandbox-guestd" \
		>"$TMP/setup.log" 2>&1 || die "sandboxd setup failed: $(tail -5 "$TMP/setup.log")"
	rm -rf "$STATE" "$WORK/bare"
	mkdir -m 0700 "$STATE"
	mkdir -p "$WORK/bare"
	cp -al "$BUNDLE/vm" "$STATE/vm"
	cp -al "$BUNDLE/images" "$STATE/images"
	[ -f "$WORK/accel" ] && cp "$WORK/accel" "$STATE/vm/accel"
	SOCK=$TMP/api.sock
}

bench_header() {
	rec "# bench/$NAME/run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	rec "# sandboxd $(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
		"($SANDBOXD)"
	rec "# machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)," \
		"$(nproc) CPUs, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
		"kernel $(uname -r)"
	rec "# $(qemu-system-x86_64 --version | head -1), $(python3 --version)"
	[ -z "${NOTE:-}" ] || rec "# note: $NOTE"
	rec "# before the run: load average $(cut -d' ' -f1-3 /proc/loadavg)," \
		"$(pgrep -c -f qemu-system-x86_64 || true) QEMU processes of others running"
}

start_sandboxd() { # [ARGS...]: false when it does not come up (its log in TMP)
	# --egress off: the bare QEMUs have no network either
	"$SANDBOXD" --state-dir "$STATE" --socket "$SOCK" --accel "$ACCEL" --log-level info \
		--default-image busybox --agent "$BUILD/bin/sandbox-guestd" --egress off "$@" \
		>>"$TMP/sandboxd.log" 2>&1 &
	SBX_PID=$!
	for _ in $(seq 400); do # an auto probe of KVM takes up to 15 s
		if ! kill -0 "$SBX_PID" 2>/dev/null; then
			SBX_PID=
			return 1
		fi
		curl -s -o /dev/null --unix-socket "$SOCK" http://localhost/v1/health && break
		sleep 0.1
	done
	ACCEL_USED=$(api GET /v1/capabilities | sed -n 's/.*"accel":"\([a-z]*\)".*/\1/p')
	[ -n "$ACCEL_USED" ] || die "sandboxd did not answer: $(tail -5 "$TMP/sandboxd.log")"
}

stop_sandboxd() { # its sandboxes deleted first
	local id
	[ -n "$SBX_PID" ] || return 0
	for id in $(api GET /v1/sandboxes 2>/dev/null | grep -o '"id":"sbx_[0-9a-f]*"' |
		cut -d'"' -f4); do
		api DELETE "/v1/sandboxes/$id" >/dev/null 2>&1
	done
	kill -TERM "$SBX_PID" 2>/dev/null
	wait "$SBX_PID" 2>/dev/null || true
	SBX_PID=
}

# warm_up [JSON]: one create (the shared blank disk is made), its VMM's command line kept for
# the bare QEMUs, and the files they open by path.
warm_up() {
	local j id pid disk
	log "sandboxd runs VMs under $ACCEL_USED (--accel $ACCEL); warm-up sandbox"
	rec "# accelerator: $ACCEL_USED (sandboxd --accel $ACCEL)"
	j=$(api POST /v1/sandboxes "${1:-{\}}")
	grep -q '"state":"running"' <<<"$j" || die "the warm-up sandbox did not boot: $j"
	id=$(sed -n 's/.*"id":"\(sbx_[0-9a-f]*\)".*/\1/p' <<<"$j")
	pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$STATE/vms/$id/vm.json")
	cp "/proc/$pid/cmdline" "$TMP/vmm.cmdline"
	rec "# sandboxd's VMM: $(tr '\0' ' ' <"$TMP/vmm.cmdline")"
	api DELETE "/v1/sandboxes/$id" >/dev/null
	disk=$(sed -n 's/.*"disk_mb":\([0-9]*\).*/\1/p' <<<"$j")
	KERNEL=$STATE/$(sed -n 's/.*"kernel": "\(.*\)",/\1/p' "$STATE/vm/bundle.json")
	INITRD=$STATE/$(sed -n 's/.*"initramfs": "\(.*\)",/\1/p' "$STATE/vm/bundle.json")
	ROOTFS=$STATE/$(sed -n 's/.*"rootfs": "\(.*\)",/\1/p' "$STATE/vm/bundle.json")
	BLANK=$STATE/vm/blank-$disk.ext4
	for f in "$KERNEL" "$INITRD" "$ROOTFS" "$BLANK"; do
		[ -f "$f" ] || die "missing $f"
	done
}
