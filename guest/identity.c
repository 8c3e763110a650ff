/* identity.c: see identity.h. Nothing here runs in test mode. What the guest has (its link,
 * its mounted volumes) is kept here, in the guest's memory: a VM restored from a saved state
 * starts with what its source had, and the next HELLO puts right what differs. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include "agent.h"
#include "identity.h"
#include "log.h"
#include "request.h"
#include "strv.h"
#include "util.h"

#define DEVICE_WAIT_MS 5000

/* The link as configured: none until the command line or a HELLO gives one. */
static struct request_net net_now = { .none = true };
/* /etc/resolv.conf names a host other than net_now's (written once the root is there) */
static bool resolv_stale;

/* The volumes mounted so far (mount points, in order), so each is mounted once. */
static char **volumes_mounted;
static size_t n_volumes_mounted;
static char **volumes_rw; /* the writable ones among them, for the power-off */
static size_t n_volumes_rw;

static void
sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int
set_addr(int fd, unsigned long req, const char *ifname, uint32_t addr)
{
	struct ifreq ifr = { 0 };
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = { .s_addr = addr } };

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
	return ioctl(fd, req, &ifr) < 0 ? negative_errno() : 0;
}

/* The network interface the VM has besides lo (its virtio-net device; probing it can take a
 * moment after the module loads). */
static int
find_nic(char ifname[static IFNAMSIZ])
{
	for (unsigned waited = 0; waited < 2000; waited += 10) {
		DIR *d = opendir("/sys/class/net");
		struct dirent *de;
		bool found = false;

		while (d && (de = readdir(d)))
			if (de->d_name[0] != '.' && !streq(de->d_name, "lo") &&
			    strlen(de->d_name) < IFNAMSIZ) {
				memcpy(ifname, de->d_name, strlen(de->d_name) + 1);
				found = true;
				break;
			}
		if (d)
			closedir(d);
		if (found)
			return 0;
		sleep_ms(10);
	}
	return -ENODEV;
}

static bool
net_equal(const struct request_net *a, const struct request_net *b)
{
	if (a->none || b->none)
		return a->none == b->none;
	return a->guest_addr == b->guest_addr && a->host_addr == b->host_addr &&
	       a->prefix == b->prefix;
}

static int
set_flags(int fd, const char *ifname, bool up)
{
	struct ifreq ifr = { 0 };

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		return negative_errno();
	if (up)
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	else
		ifr.ifr_flags &= ~IFF_UP;
	return ioctl(fd, SIOCSIFFLAGS, &ifr) < 0 ? negative_errno() : 0;
}

/* Whether the link's MAC differs from mac (errors read as "no": nothing to change). */
static bool
mac_differs(int fd, const char *ifname, const uint8_t mac[static 6])
{
	struct ifreq ifr = { 0 };

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0)
		return false;
	return memcmp(ifr.ifr_hwaddr.sa_data, mac, 6) != 0;
}

static int
set_mac(int fd, const char *ifname, const uint8_t mac[static 6])
{
	struct ifreq ifr = { 0 };

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(ifr.ifr_hwaddr.sa_data, mac, 6);
	return ioctl(fd, SIOCSIFHWADDR, &ifr) < 0 ? negative_errno() : 0;
}

/* Everything to the host, which decides what goes further (enforced on the host). */
static int
route_default(int fd, char *ifname, uint32_t host)
{
	struct rtentry rt = { 0 };

	memcpy(&rt.rt_dst, &(struct sockaddr_in){ .sin_family = AF_INET },
	       sizeof(struct sockaddr_in));
	memcpy(&rt.rt_genmask, &(struct sockaddr_in){ .sin_family = AF_INET },
	       sizeof(struct sockaddr_in));
	memcpy(&rt.rt_gateway,
	       &(struct sockaddr_in){ .sin_family = AF_INET, .sin_addr = { .s_addr = host } },
	       sizeof(struct sockaddr_in));
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = ifname;
	return ioctl(fd, SIOCADDRT, &rt) < 0 && errno != EEXIST ? negative_errno() : 0;
}

/* Puts the link right: n (NULL: as it is) and mac (NULL: as it is). A link that had an
 * address goes down first, which drops its routes; a new MAC is set while it is down. */
static void
net_apply(const struct request_net *n, const uint8_t *mac)
{
	char ifname[IFNAMSIZ];
	_cleanup_close_ int fd = -1;
	bool change_net = n && !net_equal(n, &net_now), change_mac;
	int r;

	/* no network before or now, and no MAC to check: there may be no interface at all */
	if (!change_net && (!mac || net_now.none))
		return;
	r = find_nic(ifname);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (r < 0 || fd < 0) {
		log_warning("network: no network interface");
		return;
	}
	change_mac = mac && mac_differs(fd, ifname, mac);
	if (!change_net && !change_mac)
		return;
	if ((change_mac || !net_now.none) && (r = set_flags(fd, ifname, false)) < 0)
		log_warning("network: cannot take '%s' down: %s", ifname, strerror(-r));
	if (change_mac && (r = set_mac(fd, ifname, mac)) < 0)
		log_warning("network: cannot set the MAC of '%s': %s", ifname, strerror(-r));
	if (!n)
		n = &net_now;
	if (n->none) {
		/* 0.0.0.0 removes the address; the link stays down */
		if (!net_now.none && (r = set_addr(fd, SIOCSIFADDR, ifname, 0)) < 0)
			log_warning("network: cannot remove the address of '%s': %s", ifname,
			            strerror(-r));
		net_now = *n;
		log_info("network: none");
		return;
	}
	if ((r = set_addr(fd, SIOCSIFADDR, ifname, n->guest_addr)) < 0 ||
	    (r = set_addr(fd, SIOCSIFNETMASK, ifname, htonl(0xffffffffu << (32 - n->prefix)))) <
	            0 ||
	    (r = set_flags(fd, ifname, true)) < 0) {
		log_warning("network: cannot address '%s': %s", ifname, strerror(-r));
		return;
	}
	if ((r = route_default(fd, ifname, n->host_addr)) < 0)
		log_warning("network: cannot route through the host: %s", strerror(-r));
	if (n->host_addr != net_now.host_addr || net_now.none)
		resolv_stale = true;
	if (change_net) {
		char g[INET_ADDRSTRLEN], h[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &n->guest_addr, g, sizeof(g));
		inet_ntop(AF_INET, &n->host_addr, h, sizeof(h));
		log_info("network: %s/%u on '%s', through %s", g, n->prefix, ifname, h);
	}
	net_now = *n;
}

void
identity_net_boot(void)
{
	_cleanup_free_ char *cmdline = NULL;
	struct request_net n;
	const char *p;
	size_t len;
	char *word;

	if (read_file_max("/proc/cmdline", 4096, &cmdline, NULL) < 0)
		return;
	p = strstr(cmdline, "sandbox.net=");
	if (!p)
		return; /* no network: only lo */
	p += strlen("sandbox.net=");
	len = strcspn(p, " \t\n");
	word = strndup(p, len);
	if (!word || request_parse_net(word, &n) < 0 || n.none)
		log_warning("sandbox.net: cannot read '%.40s'", p);
	else
		net_apply(&n, NULL);
	free(word);
}

void
identity_net(const struct request_hello *h)
{
	struct request_net n;

	if (h->net && request_parse_net(h->net, &n) < 0) {
		log_warning("HELLO: bad NET '%.40s' ignored", h->net);
		net_apply(NULL, h->has_mac ? h->mac : NULL);
		return;
	}
	net_apply(h->net ? &n : NULL, h->has_mac ? h->mac : NULL);
}

/* The sandbox's resolver is the host side of its link (whose DNS stub answers only the
 * names the sandbox may reach); an image's own resolv.conf (often a link to a resolver
 * that is not there) is replaced. */
static void
write_resolv_conf(void)
{
	_cleanup_free_ char *text = NULL;
	char host[INET_ADDRSTRLEN];

	if (net_now.none)
		return;
	inet_ntop(AF_INET, &net_now.host_addr, host, sizeof(host));
	text = strdup_printf("# written by sandbox-guestd: the host answers only the names this "
	                     "sandbox may reach\nnameserver %s\noptions timeout:2 attempts:2\n",
	                     host);
	(void)unlink("/etc/resolv.conf");
	if (!text || write_file_atomic("/etc/resolv.conf", text, strlen(text), 0644) < 0)
		log_warning("cannot write /etc/resolv.conf: %m");
}

/* Writes text to file unless it holds exactly that already. */
static void
write_if_different(const char *file, const char *text, mode_t mode)
{
	_cleanup_free_ char *old = NULL;
	size_t len = 0;

	if (read_file_max(file, 4096, &old, &len) >= 0 && len == strlen(text) &&
	    memcmp(old, text, len) == 0)
		return;
	if (write_file_atomic(file, text, strlen(text), mode) < 0)
		log_warning("cannot write %s: %m", file);
}

/* /etc/hosts names the hostname at 127.0.1.1 (tools resolving their own name, sudo, find
 * it): unless that is its one 127.0.1.1 line, such lines go and that one is added. */
static void
hosts_update(const char *hostname)
{
	static const char key[] = "127.0.1.1";
	_cleanup_free_ char *text = NULL, *line = strdup_printf("%s\t%s", key, hostname);
	_cleanup_buf_ struct buf out = BUF_INIT(1u << 21);
	unsigned ours = 0;
	bool same = false;
	int r = read_file_max("/etc/hosts", 1u << 20, &text, NULL);

	if (!line || (r < 0 && r != -ENOENT))
		return;
	for (const char *l = text; l && *l;) {
		const char *e = strchrnul(l, '\n');
		size_t n = (size_t)(e - l);

		if (n > strlen(key) && strneq(l, key, strlen(key)) &&
		    (l[strlen(key)] == ' ' || l[strlen(key)] == '\t')) {
			ours++;
			same |= n == strlen(line) && strneq(l, line, n);
		} else if (buf_append(&out, l, n) < 0 || buf_putc(&out, '\n') < 0)
			return;
		l = *e ? e + 1 : e;
	}
	if (ours == 1 && same)
		return;
	if (buf_puts(&out, line) < 0 || buf_putc(&out, '\n') < 0)
		return;
	if (write_file_atomic("/etc/hosts", out.data, out.len, 0644) < 0)
		log_warning("cannot write /etc/hosts: %m");
}

static void
hostname_files(const char *hostname)
{
	_cleanup_free_ char *text = strdup_printf("%s\n", hostname);

	/* /etc/hostname says what uname says */
	if (text)
		write_if_different("/etc/hostname", text, 0644);
	hosts_update(hostname);
}

static void
machine_id(const char *id)
{
	_cleanup_free_ char *text = NULL;

	if (!request_machine_id_valid(id)) {
		log_warning("HELLO: bad machine id '%.40s' ignored", id);
		return;
	}
	text = strdup_printf("%s\n", id);
	if (text)
		write_if_different("/etc/machine-id", text, 0444);
}

static int
wait_device(const char *dev)
{
	uint64_t deadline = now_mono_ms() + DEVICE_WAIT_MS;
	struct stat st;

	while (stat(dev, &st) < 0 || !S_ISBLK(st.st_mode)) {
		if (now_mono_ms() >= deadline)
			return -ENODEV;
		sleep_ms(10);
	}
	return 0;
}

/* The directory at path (absolute), made where missing (root's, 0755), without following a
 * symbolic link on the way: a link the sandbox left in its writable layer cannot send a mount
 * over a system path. Returns the directory's descriptor or -errno. */
static int
open_dir_nofollow(const char *path)
{
	_cleanup_free_ char *copy = strdup(path);
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char *save = NULL;

	if (!copy || fd < 0) {
		safe_close(fd);
		return copy ? negative_errno() : -ENOMEM;
	}
	for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		int next;
		if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) {
			int r = negative_errno();
			safe_close(fd);
			return r;
		}
		next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		safe_close(fd);
		if (next < 0)
			return errno == ELOOP ? -ELOOP : negative_errno();
		fd = next;
	}
	return fd;
}

/* A fresh file system's root (only lost+found in it, root's) becomes the sandbox user's, so
 * it can write a volume it was just given. */
static void
volume_root_owner(struct agent *a, const char *mount)
{
	_cleanup_close_ int fd = open_dir_nofollow(mount);
	struct stat st;
	DIR *d;
	struct dirent *de;
	bool empty = true;

	if (fd < 0 || fstat(fd, &st) < 0 || st.st_uid != 0)
		return;
	d = fdopendir(dup(fd));
	while (d && (de = readdir(d)))
		if (!streq(de->d_name, ".") && !streq(de->d_name, "..") &&
		    !streq(de->d_name, "lost+found"))
			empty = false;
	if (d)
		closedir(d);
	if (empty && fchown(fd, a->uid, a->gid) < 0)
		log_warning("volume '%s': cannot give it to the sandbox user: %m", mount);
}

static int
volume_mount(struct agent *a, const struct request_volume *v)
{
	unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOATIME | (v->read_only ? MS_RDONLY : 0);
	char at[64];
	_cleanup_close_ int fd = -1;
	int r = wait_device(v->dev);

	if (r < 0)
		return r;
	fd = open_dir_nofollow(v->mount);
	if (fd < 0)
		return fd;
	snprintf(at, sizeof(at), "/proc/self/fd/%d", fd);
	if (mount(v->dev, at, "ext4", flags, NULL) < 0) {
		/* a read-only drive cannot replay a journal: read it as it is */
		if (!v->read_only || mount(v->dev, at, "ext4", flags, "noload") < 0)
			return negative_errno();
	}
	if (!v->read_only)
		volume_root_owner(a, v->mount);
	return 0;
}

static bool
strv_has(char *const *v, const char *s)
{
	for (size_t i = 0; v && v[i]; i++)
		if (streq(v[i], s))
			return true;
	return false;
}

static void
volumes_apply(struct agent *a, const struct request_hello *h)
{
	for (size_t i = 0; i < h->nvolumes; i++) {
		struct request_volume v;
		int r = request_parse_volume(h->volumes[i], &v);

		if (r < 0) {
			log_warning("HELLO: volume '%.80s' refused (%s)", h->volumes[i],
			            r == -EINVAL
			                    ? "not a device, or a mount point outside /sandbox/ "
			                      "and /mnt/"
			                    : strerror(-r));
			continue;
		}
		if (strv_has(volumes_mounted, v.mount)) {
			request_volume_done(&v);
			continue;
		}
		r = volume_mount(a, &v);
		if (r < 0)
			log_error("volume %s: cannot mount it at '%s': %s", v.dev, v.mount,
			          strerror(-r));
		else {
			log_info("volume %s mounted at '%s'%s", v.dev, v.mount,
			         v.read_only ? " (read-only)" : "");
			if (strv_add(&volumes_mounted, &n_volumes_mounted, v.mount) < 0 ||
			    (!v.read_only && strv_add(&volumes_rw, &n_volumes_rw, v.mount) < 0))
				log_warning("volume '%s': out of memory", v.mount);
		}
		request_volume_done(&v);
	}
}

void
identity_apply(struct agent *a, const struct request_hello *h, bool fresh_root)
{
	if (h->hostname)
		hostname_files(h->hostname);
	if (fresh_root || resolv_stale) {
		write_resolv_conf();
		resolv_stale = false;
	}
	if (h->machine_id)
		machine_id(h->machine_id);
	volumes_apply(a, h);
}

void
identity_poweroff(void)
{
	for (size_t i = 0; i < n_volumes_rw; i++) {
		_cleanup_close_ int fd = open_dir_nofollow(volumes_rw[i]);
		char at[64];

		snprintf(at, sizeof(at), "/proc/self/fd/%d", fd);
		if (fd < 0 || mount(NULL, at, NULL, MS_REMOUNT | MS_RDONLY, NULL) < 0)
			log_warning("volume '%s': cannot remount it read-only: %m", volumes_rw[i]);
	}
}
