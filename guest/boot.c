/* boot.c: see boot.h. Nothing here runs in test mode. The root is switched the way
 * switch_root does it (an initramfs cannot be pivot_root'ed): the overlay is moved over "/"
 * and chroot'ed into, with /dev, /proc, /sys, /run and /tmp moved along. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include "agent.h"
#include "boot.h"
#include "identity.h"
#include "log.h"
#include "request.h"
#include "util.h"

/* <linux/random.h>, which musl does not ship */
#ifndef RNDADDENTROPY
#define RNDADDENTROPY _IOW('R', 0x03, int[2])
#endif

#define SYSROOT "/.sbx"
#define MODULES_DIR "/lib/modules"
#define PORT_NAME "agent"
#define DEVICE_WAIT_MS 5000

struct early_mount {
	const char *what, *where, *type;
	unsigned long flags;
	const char *data;
	mode_t mode;
};

static const struct early_mount early_mounts[] = {
	{ "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, 0555 },
	{ "sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, 0555 },
	{ "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "mode=0620,ptmxmode=0666", 0755 },
	{ "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", 01777 },
	{ "tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755", 0755 },
	{ "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", 01777 },
};

/* The mounts that follow the root into the sandbox (/dev takes /dev/pts and /dev/shm). */
static const char *const moved_mounts[] = { "/dev", "/proc", "/sys", "/run", "/tmp" };

static const struct {
	const char *target, *link;
} dev_links[] = {
	{ "pts/ptmx", "/dev/ptmx" },          { "/proc/self/fd", "/dev/fd" },
	{ "/proc/self/fd/0", "/dev/stdin" },  { "/proc/self/fd/1", "/dev/stdout" },
	{ "/proc/self/fd/2", "/dev/stderr" },
};

static void
mount_one(const char *what, const char *where, const char *type, unsigned long flags,
          const char *data, mode_t mode)
{
	if (mkdir(where, mode) < 0 && errno != EEXIST)
		log_warning("cannot create '%s': %m", where);
	if (mount(what, where, type, flags, data) < 0)
		log_warning("cannot mount %s on '%s': %m", type, where);
}

static void
console_setup(void)
{
	int fd;

	/* the kernel opens /dev/console for init only when the initramfs has the node */
	if (fcntl(STDERR_FILENO, F_GETFD) >= 0)
		return;
	fd = open("/dev/console", O_RDWR | O_NOCTTY);
	if (fd < 0)
		fd = open("/dev/null", O_RDWR);
	if (fd < 0)
		return;
	for (int i = 0; i < 3; i++)
		if (fd != i)
			(void)dup2(fd, i);
	if (fd > 2)
		close(fd);
}

static void
load_modules(void)
{
	_cleanup_free_ char *order = NULL;
	int r = read_file_max(MODULES_DIR "/order", 1 << 20, &order, NULL);

	if (r < 0) {
		log_info("no kernel modules to load ('%s': %s)", MODULES_DIR "/order",
		         strerror(-r));
		return;
	}
	for (char *line = order; *line;) {
		char *end = strchrnul(line, '\n');
		char next = *end;
		_cleanup_free_ char *path = NULL;
		int fd;

		*end = '\0';
		while (*line == ' ' || *line == '\t')
			line++;
		for (char *t = end; t > line && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r');)
			*--t = '\0';
		if (*line && *line != '#') {
			path = line[0] == '/' ? strdup(line)
			                      : strdup_printf(MODULES_DIR "/%s", line);
			fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
			if (fd < 0)
				log_warning("module '%s': %m", line);
			else if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)
				log_warning("module '%s': finit_module failed: %m", line);
			safe_close(fd);
		}
		line = next ? end + 1 : end;
	}
}

/* lo up: programs in the sandbox talk to themselves over 127.0.0.1 (a test server, a language
 * server) even when the sandbox has no network. */
static void
loopback_up(void)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return;
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
			log_warning("cannot bring up the loopback interface: %m");
	}
	close(fd);
}

void
boot_early(void)
{
	(void)mkdir("/dev", 0755);
	if (mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755") < 0 && errno != EBUSY)
		log_warning("cannot mount devtmpfs on /dev: %m");
	console_setup();
	for (size_t i = 0; i < ARRAY_SIZE(early_mounts); i++) {
		const struct early_mount *m = &early_mounts[i];
		mount_one(m->what, m->where, m->type, m->flags, m->data, m->mode);
	}
	for (size_t i = 0; i < ARRAY_SIZE(dev_links); i++) {
		(void)unlink(dev_links[i].link);
		if (symlink(dev_links[i].target, dev_links[i].link) < 0)
			log_warning("cannot link '%s': %m", dev_links[i].link);
	}
	load_modules();
	loopback_up();
	identity_net_boot();
}

/* The port whose sysfs name is "agent": /sys/class/virtio-ports/vport0p1/name -> /dev/vport0p1 */
static int
find_port_once(char **ret_dev)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	struct dirent *de;
	int r = -ENOENT;

	if (!d)
		return -ENOENT;
	while (r == -ENOENT && (de = readdir(d))) {
		_cleanup_free_ char *name_file = NULL, *name = NULL, *dev = NULL;
		size_t len;

		if (de->d_name[0] == '.')
			continue;
		name_file = strdup_printf("/sys/class/virtio-ports/%s/name", de->d_name);
		if (!name_file || read_file_max(name_file, 256, &name, &len) < 0)
			continue;
		while (len > 0 && (name[len - 1] == '\n' || name[len - 1] == ' '))
			name[--len] = '\0';
		if (!streq(name, PORT_NAME))
			continue;
		dev = strdup_printf("/dev/%s", de->d_name);
		if (dev && access(dev, F_OK) == 0) {
			*ret_dev = TAKE_PTR(dev);
			r = 0;
		}
	}
	closedir(d);
	return r;
}

static void
sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int
boot_find_port(char **ret_dev)
{
	uint64_t start = now_mono_ms(), next_log = start + DEVICE_WAIT_MS;

	for (;;) {
		uint64_t now;
		if (find_port_once(ret_dev) == 0)
			return 0;
		now = now_mono_ms();
		if (now >= next_log) {
			log_warning("virtio port '%s' not found after %llu ms, still waiting",
			            PORT_NAME, (unsigned long long)(now - start));
			next_log = now + 30000;
		}
		sleep_ms(now - start < DEVICE_WAIT_MS ? 10 : 100);
	}
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

/* Appends line to file unless a line there starts with key (e.g. "sandbox:"). */
static int
ensure_line(const char *file, const char *key, const char *line)
{
	_cleanup_free_ char *text = NULL;
	_cleanup_close_ int fd = -1;
	size_t len = 0, klen = strlen(key);
	int r = read_file_max(file, 16u << 20, &text, &len);
	bool nl = true;

	if (r < 0 && r != -ENOENT)
		return r;
	for (const char *l = text; l && *l;) {
		const char *e = strchrnul(l, '\n');
		if ((size_t)(e - l) >= klen && strneq(l, key, klen))
			return 0;
		l = *e ? e + 1 : e;
	}
	if (len > 0 && text[len - 1] != '\n')
		nl = false;
	fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return negative_errno();
	if ((!nl && write(fd, "\n", 1) != 1) ||
	    write(fd, line, strlen(line)) != (ssize_t)strlen(line))
		return -EIO;
	return 0;
}

static int
ensure_user(struct agent *a)
{
	_cleanup_free_ char *pw = NULL, *gr = NULL;
	const char *shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
	int r;

	pw = strdup_printf("sandbox:x:%u:%u:sandbox:%s:%s\n", (unsigned)a->uid, (unsigned)a->gid,
	                   a->home, shell);
	gr = strdup_printf("sandbox:x:%u:\n", (unsigned)a->gid);
	if (!pw || !gr)
		return -ENOMEM;
	(void)mkdir("/etc", 0755);
	r = ensure_line("/etc/passwd", "sandbox:", pw);
	if (r >= 0)
		r = ensure_line("/etc/group", "sandbox:", gr);
	if (r < 0)
		return r;
	r = mkdir_p(a->home, 0755);
	if (r < 0)
		return r;
	if (chown(a->home, a->uid, a->gid) < 0)
		return negative_errno();
	return 0;
}

static int
fail(char **ret_msg, int err, const char *what)
{
	*ret_msg = strdup_printf("%s: %s", what, strerror(err));
	return -err;
}

static int
setup_root(struct agent *a, const char *root_dev, const char *upper_dev, char **ret_msg)
{
	static const char *const dirs[] = { SYSROOT, SYSROOT "/lower", SYSROOT "/rw",
		                            SYSROOT "/root" };
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
		if (mkdir(dirs[i], 0700) < 0 && errno != EEXIST)
			return fail(ret_msg, errno, "cannot create " SYSROOT);
	r = wait_device(root_dev);
	if (r >= 0)
		r = wait_device(upper_dev);
	if (r < 0)
		return fail(ret_msg, -r, "disk not found");
	if (mount(root_dev, SYSROOT "/lower", "ext4", MS_RDONLY, "noload") < 0)
		return fail(ret_msg, errno, "cannot mount the image disk");
	if (mount(upper_dev, SYSROOT "/rw", "ext4", MS_NOATIME, NULL) < 0) {
		r = fail(ret_msg, errno, "cannot mount the writable disk");
		(void)umount(SYSROOT "/lower");
		return r;
	}
	(void)mkdir(SYSROOT "/rw/upper", 0755);
	(void)mkdir(SYSROOT "/rw/work", 0700);
	if (mount("overlay", SYSROOT "/root", "overlay", 0,
	          "lowerdir=" SYSROOT "/lower,upperdir=" SYSROOT "/rw/upper,workdir=" SYSROOT
	          "/rw/work") < 0) {
		r = fail(ret_msg, errno, "cannot mount the overlay");
		(void)umount(SYSROOT "/rw");
		(void)umount(SYSROOT "/lower");
		return r;
	}
	a->upper_fd = open(SYSROOT "/rw", O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (size_t i = 0; i < ARRAY_SIZE(moved_mounts); i++) {
		_cleanup_free_ char *to = strdup_printf(SYSROOT "/root%s", moved_mounts[i]);
		if (!to)
			return fail(ret_msg, ENOMEM, "cannot move mounts");
		(void)mkdir(to, streq(moved_mounts[i], "/tmp") ? 01777 : 0755);
		if (mount(moved_mounts[i], to, NULL, MS_MOVE, NULL) < 0)
			log_warning("cannot move '%s' into the sandbox root: %m", moved_mounts[i]);
	}
	if (chdir(SYSROOT "/root") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 ||
	    chroot(".") < 0 || chdir("/") < 0)
		return fail(ret_msg, errno, "cannot switch into the sandbox root");
	return 0;
}

static void
add_entropy(const uint8_t *bytes, size_t n)
{
	struct {
		int entropy_count;
		int buf_size;
		uint8_t buf[64];
	} info = { .entropy_count = (int)n * 8, .buf_size = (int)n };
	_cleanup_close_ int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);

	memcpy(info.buf, bytes, MIN(n, sizeof(info.buf)));
	if (fd < 0 || ioctl(fd, RNDADDENTROPY, &info) < 0)
		log_warning("cannot add entropy: %m");
}

int
boot_hello(struct agent *a, const struct request_hello *h, char **ret_msg)
{
	int r;

	if (h->has_time) {
		struct timespec ts = { .tv_sec = (time_t)(h->time_ns / 1000000000u),
			               .tv_nsec = (long)(h->time_ns % 1000000000u) };
		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			log_warning("cannot set the clock: %m");
	}
	if (h->has_entropy)
		add_entropy(h->entropy, sizeof(h->entropy));
	if (h->hostname && sethostname(h->hostname, strlen(h->hostname)) < 0)
		log_warning("cannot set the hostname '%s': %m", h->hostname);
	identity_net(h);
	if (a->mounted) {
		identity_apply(a, h, false);
		return 0;
	}
	if (!h->root_dev || !h->upper_dev)
		return 0;
	/* the user is fixed once the root is set up */
	if (h->has_uid)
		a->uid = h->uid;
	if (h->has_gid)
		a->gid = h->gid;
	if (h->home) {
		char *home = strdup(h->home);
		if (!home)
			return fail(ret_msg, ENOMEM, "hello");
		free(a->home);
		a->home = home;
	}
	r = setup_root(a, h->root_dev, h->upper_dev, ret_msg);
	if (r < 0)
		return r;
	a->mounted = true;
	log_info("sandbox root mounted ('%s' under '%s')", h->root_dev, h->upper_dev);
	r = ensure_user(a);
	if (r < 0)
		log_warning("cannot set up the sandbox user: %s", strerror(-r));
	identity_apply(a, h, true);
	return 0;
}

void
boot_poweroff(struct agent *a)
{
	log_info("powering off");
	sync();
	if (a && a->mounted) {
		char path[64];
		identity_poweroff();
		if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL) < 0)
			log_warning("cannot remount the root read-only: %m");
		snprintf(path, sizeof(path), "/proc/self/fd/%d", a->upper_fd);
		if (a->upper_fd >= 0 && mount(NULL, path, NULL, MS_REMOUNT | MS_RDONLY, NULL) < 0)
			log_warning("cannot remount the writable disk read-only: %m");
		sync();
	}
	/* ACPI S5 ends a microvm QEMU (measured: exit status 0). Without a power-off method the
	 * kernel ends PID 1 instead: it panics, panic=-1 restarts, and -no-reboot exits QEMU. */
	reboot(RB_POWER_OFF);
	log_error("power-off failed: %m");
	for (;;)
		pause();
}
