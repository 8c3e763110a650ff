#!/bin/sh
# The egress tests' network: two namespaces of their own joined by a veth pair, so sandboxd's
# taps, its table inet sandboxd and its ports live in NAME-host and the servers it reaches in
# NAME-inet; the machine's own network is never touched.
#
#   netns.sh up NAME      NAME-host (198.51.100.1/24, default route via .2, forwarding on)
#                         and NAME-inet (198.51.100.2/24, the "internet" addresses
#                         203.0.113.10-30 and 203.0.113.53 on its lo, and a route back to
#                         10.0.0.0/8, where sandboxd's guests are), lo up in both; whatever a previous
#                         run left under NAME is removed first
#   netns.sh down NAME    kills what still runs in the two namespaces, removes them (and the
#                         veth pair with them); safe to run twice
#   netns.sh exec-host NAME RESOLV_CONF PROGRAM ARGS...
#                         execs PROGRAM in NAME-host, in a private mount namespace where
#                         RESOLV_CONF is /etc/resolv.conf (the egress worker resolves names
#                         through it) and /sys/fs/cgroup is the machine's (sandboxd refuses
#                         to run VMMs without cgroup limits); exec all the way, so PROGRAM
#                         keeps this script's pid (the harness's launcher, harness_set_launcher).
#                         Each file named in $NETNS_HIDE (space-separated) has /dev/null
#                         mounted over it there, so PROGRAM finds it missing (no x bit): a tool
#                         that is "not installed" without touching the machine's
#
# NAME starts with sbxt and has at most 14 characters. The veth ends are v<NAME without sbx>h
# and ...i: never sbx..., which sandboxd's table treats as a sandbox's tap (it drops what
# such an interface sends); an interface name has at most 15 characters.
set -eu

die() {
	echo "netns.sh: $*" >&2
	exit 1
}

[ $# -ge 2 ] || die "usage: netns.sh up|down NAME | exec-host NAME RESOLV_CONF PROGRAM [ARGS...]"
cmd=$1
name=$2
case $name in
sbxt*) ;;
*) die "'$name': the tests' namespaces are named sbxt..." ;;
esac
[ ${#name} -le 14 ] || die "'$name' is longer than 14 characters (veth names)"
case $name in
*[!a-z0-9]*) die "'$name': lowercase letters and digits only" ;;
esac

host=$name-host
veth=v${name#sbx}
inet=$name-inet

exists() {
	[ -e "/run/netns/$1" ]
}

# Kills every process left in namespace $1 (a daemon, a VMM or a server of this run: nothing
# else enters a sbxt namespace), by pid, and waits for them to go.
kill_inside() {
	exists "$1" || return 0
	pids=$(ip netns pids "$1" 2>/dev/null || true)
	[ -n "$pids" ] || return 0
	# shellcheck disable=SC2086 # one pid per word
	kill -KILL $pids 2>/dev/null || true
	i=0
	while [ $i -lt 50 ] && [ -n "$(ip netns pids "$1" 2>/dev/null || true)" ]; do
		sleep 0.1
		i=$((i + 1))
	done
}

down() {
	for ns in "$host" "$inet"; do
		kill_inside "$ns"
		if exists "$ns"; then
			ip netns del "$ns" || die "cannot remove namespace $ns"
		fi
	done
}

up() {
	command -v ip >/dev/null 2>&1 || die "ip (iproute2) is not installed"
	down
	ip netns add "$host"
	ip netns add "$inet"
	# both ends made inside the namespaces: the pair never exists in the machine's own
	ip -n "$host" link add "${veth}h" type veth peer name "${veth}i" netns "$inet"
	ip -n "$host" link set lo up
	ip -n "$host" addr add 198.51.100.1/24 dev "${veth}h"
	ip -n "$host" link set "${veth}h" up
	ip -n "$host" route add default via 198.51.100.2
	# a host that forwards for others (Docker, a VPN) is the hard case: sandboxd must drop
	# what its guests send to be forwarded, and the internet would answer them (the route
	# back below) if it did not
	ip netns exec "$host" sysctl -q -w net.ipv4.ip_forward=1

	ip -n "$inet" link set lo up
	ip -n "$inet" addr add 198.51.100.2/24 dev "${veth}i"
	ip -n "$inet" link set "${veth}i" up
	ip -n "$inet" route add 10.0.0.0/8 via 198.51.100.1
	# on lo: this kernel may lack the dummy device, and lo's addresses are as reachable
	a=10
	while [ $a -le 30 ]; do
		ip -n "$inet" addr add "203.0.113.$a/32" dev lo
		a=$((a + 1))
	done
	ip -n "$inet" addr add 203.0.113.53/32 dev lo
}

case $cmd in
up)
	[ $# -eq 2 ] || die "usage: netns.sh up NAME"
	up
	;;
down)
	[ $# -eq 2 ] || die "usage: netns.sh down NAME"
	down
	;;
exec-host)
	[ $# -ge 4 ] || die "usage: netns.sh exec-host NAME RESOLV_CONF PROGRAM [ARGS...]"
	resolv=$3
	shift 3
	[ -f "$resolv" ] || die "no file '$resolv'"
	exists "$host" || die "no namespace $host (netns.sh up $name first)"
	# unshare and ip netns exec both exec, so the program ends up with this pid; ip netns exec
	# makes a mount namespace of its own too, a copy of this one, bind mount included. It
	# also mounts a /sys of the namespace's own, which has no cgroups in it: the machine's
	# cgroup tree is kept aside first (on a tmpfs over /mnt, in this mount namespace only)
	# and put back, so sandboxd confines its VMMs here as it does outside
	# shellcheck disable=SC2016 # expanded by the inner shells
	exec unshare -m --propagation private sh -c \
		'mount --bind "$1" /etc/resolv.conf &&
		for f in ${NETNS_HIDE-}; do mount --bind /dev/null "$f" || exit 1; done &&
		mount -t tmpfs -o mode=0700,size=16k sbxt-cgroup /mnt && mkdir /mnt/cgroup &&
		mount --rbind /sys/fs/cgroup /mnt/cgroup &&
		ns=$2 && shift 2 &&
		exec ip netns exec "$ns" sh -c "mount --rbind /mnt/cgroup /sys/fs/cgroup && exec \"\$@\"" \
			netns.sh "$@"' \
		netns.sh "$resolv" "$host" "$@"
	;;
*)
	die "unknown command '$cmd' (up, down, exec-host)"
	;;
esac
