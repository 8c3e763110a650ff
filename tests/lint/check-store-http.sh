#!/bin/sh
# check-store-http.sh: two of sandboxd's layer boundaries, checked in the sources.
#   - All SQL is in daemon/store/: no file elsewhere in daemon/ names sqlite3 (its header,
#     its functions or its types). The store hands rows up; no other layer opens a statement.
#   - The HTTP server knows no route: no file in daemon/http/ includes a header of the API,
#     the core or the store. It is handed its handlers when it is made.
# Usage: check-store-http.sh [SOURCE_DIR] (the repository; default: this script's ../..).
set -eu

src=${1:-$(dirname "$0")/../..}
daemon="$src/daemon"
status=0

if [ ! -d "$daemon/store" ] || [ ! -d "$daemon/http" ]; then
	echo "check-store-http: no daemon/store or daemon/http under '$src'" >&2
	exit 1
fi

# grep -n prints FILE:LINE:TEXT for each offence
sql=$(grep -rnE 'sqlite3' "$daemon" --include='*.c' --include='*.h' |
	grep -v "^$daemon/store/" || true)
if [ -n "$sql" ]; then
	echo "check-store-http: sqlite3 outside daemon/store/ (SQL belongs to the store):" >&2
	echo "$sql" >&2
	status=1
fi

# the headers of daemon/api, daemon/core and daemon/store, by file name (the include path
# holds every layer's folder, so a header is included by its bare name)
upper=$(cd "$daemon" && ls api/*.h core/*.h store/*.h | sed 's|.*/||')
for h in $upper; do
	hits=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]([^\">]*/)?$h[\">]" \
		"$daemon"/http/*.c "$daemon"/http/*.h || true)
	if [ -n "$hits" ]; then
		echo "check-store-http: daemon/http/ includes '$h' (the server takes handlers," \
			"it includes no API, core or store header):" >&2
		echo "$hits" >&2
		status=1
	fi
done

[ $status -eq 0 ] && echo "check-store-http: ok"
exit $status
