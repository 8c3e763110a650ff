#!/bin/sh
# The egress tests' guest image: an OCI layout (umoci) of a small root holding this machine's
# curl and openssl with their shared libraries, busybox (sh, nc, nslookup, wget, ping, ip...),
# one trusted CA, the test's, and a stub `claude` (/usr/bin/claude, below) for the coding-agent
# case. sandboxd adds its guest agent and /sandbox/home when it installs the layout
# (<state>/images/local/NAME, then POST /v1/images {"image":"NAME"}).
#
#   mkimage.sh LAYOUT CA_PEM [ROOTFS]
#     LAYOUT  the directory to create (an OCI image layout, tag latest)
#     CA_PEM  the CA that curl, openssl and wget trust in the image (and no other)
#     ROOTFS  an ext4 root disk to take busybox from (the VM bundle's busybox disk); without
#             it, this machine's /bin/busybox, which must be static
#
# The image's /usr/bin/ping is a copy of busybox with the file capability cap_net_raw (as
# Debian's ping has), so the sandbox user can send ICMP and the test can see it dropped. Call
# it by its path: for a bare `ping`, busybox sh runs its own applet, without the capability.
set -eu

die() {
	echo "mkimage.sh: $*" >&2
	exit 1
}

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
	die "usage: mkimage.sh LAYOUT CA_PEM [ROOTFS]"
fi
layout=$1
ca=$2
rootfs=${3:-}
for t in umoci tar curl openssl ldd python3; do
	command -v "$t" >/dev/null 2>&1 || die "$t is not installed (scripts/install-deps.sh)"
done
[ -f "$ca" ] || die "no CA file '$ca'"
[ ! -e "$layout" ] || die "'$layout' exists"

t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
r=$t/root
mkdir -p "$r/usr/bin" "$r/usr/sbin" "$r/usr/lib/x86_64-linux-gnu" "$r/usr/lib64" \
	"$r/etc/ssl/certs" "$r/usr/lib/ssl" "$r/tmp" "$r/var/tmp" "$r/root" "$r/dev" "$r/proc" \
	"$r/sys" "$r/run"
chmod 1777 "$r/tmp" "$r/var/tmp"
# merged /usr, as Debian's own images are
for d in bin sbin lib lib64; do
	ln -s "usr/$d" "$r/$d"
done

# busybox: static, so no library of its own
if [ -n "$rootfs" ]; then
	command -v debugfs >/dev/null 2>&1 || die "debugfs (e2fsprogs) is not installed"
	debugfs -R "dump /bin/busybox $t/busybox" "$rootfs" >/dev/null 2>&1 ||
		die "cannot read /bin/busybox from $rootfs"
	[ -s "$t/busybox" ] || die "$rootfs has no /bin/busybox"
else
	[ -x /bin/busybox ] || die "no /bin/busybox here and no ROOTFS to take it from"
	if ldd /bin/busybox >/dev/null 2>&1; then
		die "/bin/busybox is not static (install busybox-static, or name a ROOTFS)"
	fi
	cp /bin/busybox "$t/busybox"
fi
install -m 0755 "$t/busybox" "$r/usr/bin/busybox"
for applet in $("$r/usr/bin/busybox" --list); do
	case $applet in
	busybox | ping | ping6) ;;
	*) [ -e "$r/usr/bin/$applet" ] || ln -s busybox "$r/usr/bin/$applet" ;;
	esac
done
install -m 0755 "$t/busybox" "$r/usr/bin/ping"
python3 -c "import os, struct, sys
# VFS_CAP_REVISION_2 | effective; permitted cap_net_raw (13)
os.setxattr(sys.argv[1], 'security.capability', struct.pack('<5I', 0x02000001, 1 << 13, 0, 0, 0))" \
	"$r/usr/bin/ping"

# curl and openssl, and every library they load, at the paths the loader looks in
for bin in curl openssl; do
	cp "$(command -v $bin)" "$r/usr/bin/$bin"
	ldd "$(command -v $bin)" | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }'
done | sort -u | while read -r lib; do
	case $lib in
	/lib/* | /lib64/*) dest=$r/usr$lib ;;
	*) dest=$r$lib ;;
	esac
	mkdir -p "$(dirname "$dest")"
	cp -L "$lib" "$dest"
done

# the one CA: curl's and openssl's default bundle, and the directory form
cp "$ca" "$r/etc/ssl/certs/ca-certificates.crt"
cp "$ca" "$r/etc/ssl/certs/sandboxd-egress-test-ca.pem"
ln -s sandboxd-egress-test-ca.pem \
	"$r/etc/ssl/certs/$(openssl x509 -noout -subject_hash -in "$ca").0"
ln -s /etc/ssl/certs/ca-certificates.crt "$r/usr/lib/ssl/cert.pem"
ln -s /etc/ssl/certs "$r/usr/lib/ssl/certs"
if [ -f /etc/ssl/openssl.cnf ]; then
	cp /etc/ssl/openssl.cnf "$r/etc/ssl/openssl.cnf"
	ln -s /etc/ssl/openssl.cnf "$r/usr/lib/ssl/openssl.cnf"
fi

# claude: a stand-in for Anthropic's agent, which `sandbox-cli agent claude` starts (no model
# is reachable here, and the real one is not in this image): it says how it was started,
# whether its credential reached it (never the value) and what its API host answered through
# egress, then stays up as an interactive agent does
cat >"$r/usr/bin/claude" <<'STUB'
#!/bin/sh
echo "claude stub: argv: [$*]"
if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
	echo "claude stub: ANTHROPIC_API_KEY is set"
else
	echo "claude stub: ANTHROPIC_API_KEY is not set"
fi
echo "claude stub: api: $(curl -sS --max-time 20 https://api.anthropic.com/v1/claude-stub 2>&1)"
exec sleep 3600
STUB
chmod 0755 "$r/usr/bin/claude"

# names: files, then the DNS server sandbox-guestd writes into /etc/resolv.conf at boot
printf 'hosts: files dns\n' >"$r/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n' >"$r/etc/hosts"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"
printf 'root:x:0:\n' >"$r/etc/group"
printf 'ID=sbxegress\nPRETTY_NAME="sandboxd egress test image"\n' >"$r/etc/os-release"

tar -C "$r" --numeric-owner --owner=0 --group=0 --xattrs \
	--xattrs-include=security.capability -cf "$t/layer.tar" .
mkdir -p "$(dirname "$layout")"
umoci init --layout "$layout"
umoci new --image "$layout:latest"
umoci raw add-layer --image "$layout:latest" "$t/layer.tar"
umoci config --image "$layout:latest" --config.env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	>/dev/null
