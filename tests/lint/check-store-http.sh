#!/bin/sh
# check-store-http.sh: layer boundaries of sandboxd, checked in the sources.
#   - All SQL is in daemon/store/: no file elsewhere in daemon/ names sqlite3 (its header,
#     its functions or its types). The store hands rows up; no other layer opens a statement.
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

[ $status -eq 0 ] && echo "check-store-http: ok"
exit $status
