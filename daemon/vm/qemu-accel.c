/* qemu-accel.c: choosing how QEMU runs guests: KVM only where a guest really boots under it
 * (a probe boot of the bundle that must reach the agent; /dev/kvm can exist and still hang a
 * standard guest on PVM hosts), TCG otherwise; the answer is cached in STATE/vm/accel. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
#include "agentproto.h"
#include "frame.h"
#include "log.h"
#include "qemu-accel.h"
#include "qemu-argv.h"
#include "tlv.h"
#include "util.h"

/* Boots the bundle under KVM with no disks and waits for the agent's answer to a HELLO:
 * /dev/kvm can exist and still hang a standard guest (PVM hosts), so only a boot that reaches
 * the agent counts. Blocking, at startup only, and its answer is cached. */
static bool
kvm_boots(const char *qemu_bin, const char *bundle_kernel, const char *bundle_initrd)
{
	char dir[] = "/tmp/sandboxd-kvm-probe.XXXXXX";
	_cleanup_free_ char *sock = NULL, *kernel = NULL, *initrd = NULL, *append = NULL;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint64_t deadline = now_mono_ms() + 15000;
	bool ok = false;
	pid_t pid;
	int fd = -1;

	if (!mkdtemp(dir))
		return false;
	sock = strdup_printf("%s/agent.sock", dir);
	kernel = strdup(bundle_kernel);
	initrd = strdup(bundle_initrd);
	append = strdup(qemu_cmdline_base);
	if (!sock || !kernel || !initrd || !append || strlen(sock) >= sizeof(sa.sun_path))
		goto out;
	pid = fork();
	if (pid == 0) {
		char *chardev = strdup_printf("socket,id=ag,path=%s,server=on,wait=off", sock);
		char *argv[] = { (char *)qemu_bin,
			         "-M",
			         "microvm,accel=kvm,x-option-roms=off,pit=off,pic=off,rtc=on",
			         "-cpu",
			         "host",
			         "-m",
			         "256",
			         "-nodefaults",
			         "-no-user-config",
			         "-display",
			         "none",
			         "-no-reboot",
			         "-kernel",
			         kernel,
			         "-initrd",
			         initrd,
			         "-append",
			         append,
			         "-chardev",
			         chardev,
			         "-device",
			         "virtio-serial-device",
			         "-device",
			         "virtserialport,chardev=ag,name=agent",
			         NULL };
		int devnull = open("/dev/null", O_RDWR);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(devnull, 2);
		execv(qemu_bin, argv);
		_exit(127);
	}
	if (pid < 0)
		goto out;
	memcpy(sa.sun_path, sock, strlen(sock));
	while (now_mono_ms() < deadline && !ok) {
		_cleanup_buf_ struct buf hello = BUF_INIT(4096), p = BUF_INIT(4096);
		uint8_t nonce[AP_NONCE_LEN];
		struct frame_decoder dec;
		char chunk[4096];

		fd = safe_close(fd);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			usleep(50000);
			continue;
		}
		if (random_bytes(nonce, sizeof(nonce)) < 0 ||
		    tlv_put(&p, AP_T_NONCE, nonce, sizeof(nonce)) < 0 ||
		    frame_put_magic(&hello) < 0 ||
		    frame_put(&hello, AP_HELLO, 0, 0, p.data, p.len) < 0 ||
		    write(fd, hello.data, hello.len) != (ssize_t)hello.len)
			continue;
		frame_decoder_init(&dec, AP_FRAME_MAX, true);
		while (now_mono_ms() < deadline && !ok) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };
			struct frame f;
			ssize_t n;
			if (poll(&pfd, 1, 200) <= 0)
				continue;
			n = read(fd, chunk, sizeof(chunk));
			if (n <= 0 || frame_decoder_feed(&dec, chunk, (size_t)n) < 0)
				break;
			if (frame_decoder_next(&dec, &f, NULL) == 1 && f.type == AP_HELLO_ACK)
				ok = true;
		}
		frame_decoder_done(&dec);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
out:
	safe_close(fd);
	if (sock)
		unlink(sock);
	rmdir(dir);
	return ok;
}

int
qemu_accel_pick(const char *want, const char *qemu_bin, const char *kernel, const char *initrd,
                const char *state_dir, char *ret, size_t size)
{
	_cleanup_free_ char *cache = strdup_printf("%s/vm/accel", state_dir);
	_cleanup_free_ char *cached = NULL, *key = NULL;
	struct utsname u;
	int fd;

	if (!want || streq(want, "auto")) {
		fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
		if (fd < 0) {
			snprintf(ret, size, "tcg");
			return 0;
		}
		close(fd);
		uname(&u);
		key = strdup_printf("%s %s", u.release, kernel);
		if (cache && key && read_file_max(cache, 4096, &cached, NULL) == 0 &&
		    strlen(cached) > 4 && streq(cached + 4, key)) {
			snprintf(ret, size, "%.3s", cached);
			return 0;
		}
		log_info("backend qemu: /dev/kvm is there; checking that a guest boots under it");
		snprintf(ret, size, "%s", kvm_boots(qemu_bin, kernel, initrd) ? "kvm" : "tcg");
		if (streq(ret, "tcg"))
			log_info("backend qemu: KVM did not boot the guest; using TCG (slow)");
		if (cache && key) {
			_cleanup_free_ char *line = strdup_printf("%s %s", ret, key);
			if (line)
				(void)write_file_atomic(cache, line, strlen(line), 0600);
		}
		return 0;
	}
	if (!streq(want, "kvm") && !streq(want, "tcg")) {
		log_error("--accel '%s': use auto, kvm or tcg", want);
		return -EINVAL;
	}
	snprintf(ret, size, "%s", want);
	return 0;
}
