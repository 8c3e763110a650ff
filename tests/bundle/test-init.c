/* test-init.c: a stand-in /init for booting the guest bundle in tests (static, musl-gcc).
 * Mounts /dev, /proc and /sys, loads /lib/modules/order with finit_module, reports the
 * virtio ports and block devices, mounts /dev/vda read-only with /dev/vdb as an overlay upper,
 * runs the root disk's shell as a check, then reboots so that QEMU (-no-reboot) exits. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double
uptime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
say(const char *fmt, ...)
{
	va_list ap;

	printf("test-init: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static void
load_modules(void)
{
	char line[256];
	FILE *f = fopen("/lib/modules/order", "re");
	int n = 0, bad = 0;
	double t0 = uptime();

	if (!f) {
		say("modules: no /lib/modules/order: %s", strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		char path[300];
		double t = uptime();
		int fd;

		line[strcspn(line, "\n")] = '\0';
		if (!line[0])
			continue;
		snprintf(path, sizeof(path), "/lib/modules/%s", line);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || syscall(SYS_finit_module, fd, "", 0) < 0) {
			say("module %s: FAILED: %s", line, strerror(errno));
			bad++;
		} else {
			say("module %s: loaded (%.0f ms)", line, (uptime() - t) * 1000);
		}
		n++;
		if (fd >= 0)
			close(fd);
	}
	fclose(f);
	say("modules: %d loaded, %d failed, %.0f ms", n - bad, bad, (uptime() - t0) * 1000);
}

static void
list_ports(void)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	struct dirent *de;

	if (!d) {
		say("ports: none (%s)", strerror(errno));
		return;
	}
	while ((de = readdir(d))) {
		char path[300], name[64] = "";
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
		f = fopen(path, "re");
		if (f) {
			if (fgets(name, sizeof(name), f))
				name[strcspn(name, "\n")] = '\0';
			fclose(f);
		}
		say("port %s name=%s", de->d_name, name);
		if (strcmp(name, "agent") == 0) {
			char dev[300];
			int fd;

			snprintf(dev, sizeof(dev), "/dev/%s", de->d_name);
			fd = open(dev, O_RDWR | O_NONBLOCK | O_CLOEXEC);
			say("port %s: open %s", dev, fd >= 0 ? "ok" : strerror(errno));
			if (fd >= 0)
				close(fd);
		}
	}
	closedir(d);
}

static void
list_block(void)
{
	DIR *d = opendir("/sys/block");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[300], size[32] = "?";
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/size", de->d_name);
		f = fopen(path, "re");
		if (f) {
			if (fgets(size, sizeof(size), f))
				size[strcspn(size, "\n")] = '\0';
			fclose(f);
		}
		say("block %s sectors=%s", de->d_name, size);
	}
	closedir(d);
}

static void
list_dir(const char *dir)
{
	char out[1024] = "";
	size_t len = 0;
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d) {
		say("ls %s: %s", dir, strerror(errno));
		return;
	}
	while ((de = readdir(d))) {
		int n;

		if (de->d_name[0] == '.')
			continue;
		n = snprintf(out + len, sizeof(out) - len, " %s", de->d_name);
		if (n < 0 || (size_t)n >= sizeof(out) - len)
			break;
		len += (size_t)n;
	}
	closedir(d);
	say("ls %s:%s", dir, out);
}

static void
run_shell(void)
{
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		if (chroot("/newroot") < 0 || chdir("/") < 0)
			_exit(126);
		execl("/bin/sh", "sh", "-c",
		      "echo \"test-init: shell: $(cat /etc/hostname) $(id sandbox) "
		      "$(stat -c '%u:%g %a' /sandbox/home) $(cat /hello)\"",
		      (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		say("shell: cannot run: %s", strerror(errno));
	else
		say("shell: exit %d", WIFEXITED(status) ? WEXITSTATUS(status) : 128);
}

int
main(void)
{
	struct stat st;

	mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	say("started at uptime %.3f s", uptime());
	load_modules();
	list_ports();
	list_block();
	if (mount("/dev/vda", "/mnt", "ext4", MS_RDONLY, "noload") < 0) {
		say("mount /dev/vda: FAILED: %s", strerror(errno));
	} else {
		say("mount /dev/vda: ok (read-only)");
		list_dir("/mnt");
	}
	if (stat("/dev/vdb", &st) == 0) {
		mkdir("/run/upper", 0755);
		if (mount("/dev/vdb", "/run/upper", "ext4", 0, NULL) < 0) {
			say("mount /dev/vdb: FAILED: %s", strerror(errno));
		} else {
			mkdir("/run/upper/u", 0755);
			mkdir("/run/upper/w", 0755);
			if (mount("overlay", "/newroot", "overlay", 0,
			          "lowerdir=/mnt,upperdir=/run/upper/u,workdir=/run/upper/w") < 0) {
				say("overlay: FAILED: %s", strerror(errno));
			} else {
				int fd = open("/newroot/hello", O_WRONLY | O_CREAT | O_TRUNC, 0644);
				if (fd >= 0) {
					(void)!write(fd, "written-through-overlay\n", 24);
					close(fd);
				}
				say("overlay: ok");
				run_shell();
			}
		}
	}
	say("done at uptime %.3f s", uptime());
	sync();
	reboot(RB_AUTOBOOT);
	return 0;
}
