#!/bin/sh
# check-vm-calls.sh SOURCE_DIR: the VM backend (daemon/vm/) sits below the core. It is handed
# what it needs (a backend_config, a vm_launch) and reports through the callbacks it was given
# (daemon/vm/backend.h), so it calls no lifecycle_*, images_* or egress_* function and includes
# neither their headers nor the daemon's context (sandboxd.h, options.h). Prints what breaks
# that and fails.
set -eu

src=${1:?usage: check-vm-calls.sh SOURCE_DIR}
dir=$src/daemon/vm
[ -d "$dir" ] || {
	echo "check-vm-calls: $dir is not a directory" >&2
	exit 2
}

status=0
calls=$(grep -nE '(^|[^A-Za-z0-9_])(lifecycle|images|egress)_[A-Za-z0-9_]+[[:space:]]*\(' \
	"$dir"/*.c "$dir"/*.h || true)
if [ -n "$calls" ]; then
	echo "check-vm-calls: daemon/vm/ calls up into the core, the images or egress" >&2
	echo "(hand it what it needs in struct vm_launch or struct backend_config instead):" >&2
	echo "$calls" >&2
	status=1
fi
includes=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(lifecycle|images|egress|sandboxd|options)\.h"' \
	"$dir"/*.c "$dir"/*.h || true)
if [ -n "$includes" ]; then
	echo "check-vm-calls: daemon/vm/ includes a header of the layers above it:" >&2
	echo "$includes" >&2
	status=1
fi
exit $status
