# shellcheck shell=bash
# bench/lib.sh: what every bench/*/run.sh shares (sourced; bash). Needs ROOT set.

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
