#!/bin/sh
# check-egress-includes.sh SOURCE_DIR [COMPILE_COMMANDS]: egress/ builds from lib/ alone. Fails
# when a file in egress/ includes a header that is not egress/'s or lib/'s (a daemon header
# above all), directly or through a lib/ header; when egress/CMakeLists.txt names a daemon
# folder or target; and, given the build's compile_commands.json, when a daemon folder is on
# the include path of an egress/ source.
set -eu

root=${1:?usage: check-egress-includes.sh SOURCE_DIR [COMPILE_COMMANDS]}
commands=${2:-}
fail=0

# The headers a file includes by "name".
includes() {
	sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"
}

# Checks what one file includes; prints the lib/ headers it reaches, for the caller to check.
check_file() {
	for inc in $(includes "$1"); do
		case $inc in
		*/*)
			echo "${1#"$root"/}: includes \"$inc\": egress/ includes headers by their" \
				"bare name, from egress/ and lib/ only" >&2
			echo FAIL
			continue
			;;
		esac
		[ -f "$root/egress/$inc" ] && continue
		if [ -f "$root/lib/$inc" ]; then
			echo "$inc"
			continue
		fi
		where=$(cd "$root" && find daemon -name "$inc" -print | head -n 1)
		if [ -n "$where" ]; then
			echo "${1#"$root"/}: includes the daemon header \"$inc\" ($where)" >&2
		else
			echo "${1#"$root"/}: includes \"$inc\", which is neither egress/'s nor lib/'s" >&2
		fi
		echo FAIL
	done
}

# egress/'s own files, then every lib/ header they reach, each once
seen=" "
todo=$(ls "$root"/egress/*.c "$root"/egress/*.h)
while [ -n "$todo" ]; do
	next=""
	for f in $todo; do
		for out in $(check_file "$f"); do
			if [ "$out" = FAIL ]; then
				fail=1
				continue
			fi
			case $seen in *" $out "*) continue ;; esac
			seen="$seen$out "
			next="$next $root/lib/$out"
		done
	done
	todo=$next
done

if grep -v '^[[:space:]]*#' "$root/egress/CMakeLists.txt" | grep -nE 'daemon|sandboxd_core' >&2; then
	echo "egress/CMakeLists.txt: names a daemon folder or target (above)" >&2
	fail=1
fi

if [ -n "$commands" ]; then
	if [ ! -f "$commands" ]; then
		echo "$commands: missing (configure with CMAKE_EXPORT_COMPILE_COMMANDS)" >&2
		exit 1
	fi
	# compile_commands.json as CMake writes it: "command" on the line before "file"
	bad=$(awk -v egress="\"$root/egress/" -v daemon="-I$root/daemon" '
		/"command":/ { cmd = $0 }
		/"file":/ && index($0, egress) && index(cmd, daemon) { f = $2; gsub(/[",]/, "", f); print f }
	' "$commands")
	if [ -n "$bad" ]; then
		echo "a daemon folder is on the include path of: $bad" >&2
		fail=1
	fi
fi

if [ "$fail" != 0 ]; then
	exit 1
fi
echo "egress/ includes nothing from daemon/"
