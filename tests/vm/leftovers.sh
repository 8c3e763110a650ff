#!/bin/sh
# The VM tests' leak check. Every VM test's daemon lives in a directory under DIR (its state
# directory, sockets, VM disks), and sandboxd marks each VMM's environment with
# SANDBOXD_STATE_DIR=<that state directory>. So, once the VM tests are done:
#   - no process may carry that marker or work inside DIR (a VMM or a daemon left running),
#   - no test directory may be left under DIR (sockets, layers, logs: each test removes its own),
#   - no cgroup of a VMM may be left in the uid ranges those daemons claimed.
# Usage: leftovers.sh begin|end DIR. "begin" clears what an interrupted earlier run left and
# succeeds; "end" reports and clears, and fails when it found anything. With HARNESS_KEEP
# set (the tests keep their directories for a post-mortem) only processes count.
set -u
mode=$1
dir=$2
found=0

for p in /proc/[0-9]*; do
	pid=${p#/proc/}
	[ "$pid" = "$$" ] && continue
	# zombies have no cwd and hold nothing
	cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
	marked=$( { tr "\0" "\n" <"$p/environ"; } 2>/dev/null | grep -c "^SANDBOXD_STATE_DIR=$dir/")
	case "$cwd" in
	"$dir"/*) inside=1 ;;
	*) inside=0 ;;
	esac
	if [ "$marked" -gt 0 ] || [ "$inside" -eq 1 ]; then
		echo "leftovers: process $pid ($(cat "$p/comm" 2>/dev/null)) outlived the VM tests (cwd $cwd)"
		kill -9 "$pid" 2>/dev/null
		found=1
	fi
done

# The uid ranges the tests' daemons claimed (/run/sandboxd-vmm-uids/FIRST-UID names the state
# directory): their VMMs' cgroups are sandboxd/FIRST-UID/sbx_* and must all be gone. The
# claims themselves are let go.
for claim in /run/sandboxd-vmm-uids/[0-9]*; do
	[ -f "$claim" ] || continue
	case "$(cat "$claim")" in
	"$dir"/*) ;;
	*) continue ;;
	esac
	base=${claim##*/}
	for g in $(find /sys/fs/cgroup -maxdepth 7 -type d -path "*/sandboxd/$base/sbx_*" 2>/dev/null); do
		echo "leftovers: cgroup $g was left behind"
		rmdir "$g" 2>/dev/null
		found=1
	done
	# the range's own (now empty) parent groups go with the claim
	find /sys/fs/cgroup -maxdepth 6 -type d -path "*/sandboxd/$base" -exec rmdir {} + \
		2>/dev/null || true
	rm -f "$claim"
done

if [ -d "$dir" ] && [ -n "${HARNESS_KEEP:-}" ]; then
	echo "leftovers: HARNESS_KEEP is set, so the test directories under $dir stay"
elif [ -d "$dir" ]; then
	for d in "$dir"/*; do
		[ -e "$d" ] || continue
		echo "leftovers: $d was left behind:"
		find "$d" -maxdepth 4 \( -name '*.qcow2' -o -name '*.sock' -o -type s \) -print | sed 's/^/  /'
		found=1
	done
	rm -rf "$dir"
fi

if [ "$mode" = end ] && [ "$found" -ne 0 ]; then
	echo "leftovers: the VM tests leaked the above (killed and removed now)"
	exit 1
fi
[ "$mode" = end ] && echo "leftovers: none (no VMM, daemon, socket or disk under $dir)"
exit 0
