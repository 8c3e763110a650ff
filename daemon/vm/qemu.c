/* qemu.c: the microVM backend; see qemu.h.
 *
 * A sandbox's VM lives in <state>/vms/<id>/: upper.qcow2 (its writable layer, a qcow2 over
 * the shared blank ext4 of its disk size), agent.sock and qmp.sock (listening sockets bound
 * by sandboxd and handed to QEMU), console.log, qemu.log and vm.json (pid, start time, uid:
 * what proves after a restart of sandboxd that a running QEMU is this sandbox's).
 *
 * Provision mode (start) makes a new upper layer and boots; restart mode (restart) boots the
 * layer a stop kept, so files survive and memory and processes do not. A stop asks
 * the agent to sync and power off, so QEMU (-no-reboot) exits by itself; a destroy kills it
 * and removes the directory. A VMM that dies keeps its layer too (a restart boots what the
 * guest had written to it); only a first boot that fails leaves nothing. */
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <signal.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/sysmacros.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <poll.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include "agent.h"
#include "agentproto.h"
#include "bundle.h"
#include "guest-identity.h"
#include "frame.h"
#include "tlv.h"
#include "cgroup.h"
#include "procstat.h"
#include "log.h"
#include "loop.h"
#include "qmp.h"
#include "qemu.h"
#include "qemu-accel.h"
#include "qemu-argv.h"
#include "qemu-vm.h"
#include "util.h"

#define UID_FIRST 61000u /* VMM uids: ranges of UID_SLOTS from here, one range per sandboxd */
#define UID_RANGES 64u
#define UID_SLOTS 1024u
#define AGENT_LOST_WAIT_MS 2000 /* for QEMU's exit, after its agent stopped answering */
#define UID_CLAIMS "/run/sandboxd-vmm-uids"
#define QUIT_WAIT_MS 5000 /* after QMP quit, before SIGKILL */
#define KILL_WAIT_MS 5000
#define RECONNECT_MS 10000
/* a destroy of a VM that writes volumes first has its guest power off (which syncs and
 * remounts them read-only), for at most this long */
#define DESTROY_FLUSH_MS 5000
#define VMM_OVERHEAD_MB 256 /* QEMU itself and TCG's translation cache, on top of guest RAM */
#define VMM_MAX_PIDS 256    /* tasks (QEMU's threads) in a VMM's cgroup */
#define GUEST_UID 1001

char *
vm_path(const struct vm *vm, const char *file)
{
	return strdup_printf("%s/%s", vm->dir, file);
}

/* /proc/<pid>/stat field 22: when the process started, in clock ticks since boot. -ESRCH
 * for a process that is gone, a zombie included (it ended; nobody reaped it yet). */
static int
process_start_time(pid_t pid, uint64_t *ret)
{
	char path[64];
	_cleanup_free_ char *text = NULL;
	char *p;
	uint64_t v;
	int field = 3;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file_max(path, 4096, &text, NULL) < 0)
		return -ESRCH;
	p = strrchr(text, ')'); /* comm may hold spaces */
	if (!p || !p[1] || !p[2])
		return -EIO;
	if (p[2] == 'Z' || p[2] == 'X') /* field 3, the state: ended */
		return -ESRCH;
	for (p += 2; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (parse_u64_n(p, strcspn(p, " "), &v) < 0)
		return -EIO;
	*ret = v;
	return 0;
}

void
remove_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (d) {
		while ((de = readdir(d))) {
			_cleanup_free_ char *p = NULL;
			if (streq(de->d_name, ".") || streq(de->d_name, ".."))
				continue;
			p = strdup_printf("%s/%s", dir, de->d_name);
			if (p && unlink(p) < 0 && errno == EISDIR)
				remove_tree(p);
		}
		closedir(d);
	}
	(void)rmdir(dir);
}

/* The last lines QEMU or the guest printed (at most three of each, joined with " | ",
 * control characters dropped): what a person needs when a boot fails. */
char *
log_tail(struct vm *vm)
{
	_cleanup_free_ char *qlog = vm_path(vm, "qemu.log"), *con = vm_path(vm, "console.log");
	_cleanup_buf_ struct buf b = BUF_INIT(2048);
	const char *files[] = { qlog, con };

	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		_cleanup_free_ char *text = NULL;
		size_t n = 0, lines = 0;
		char *start;

		if (!files[i] || read_file_max(files[i], 1u << 20, &text, &n) < 0 || n == 0)
			continue;
		/* back up over the last three non-empty lines */
		start = text + n;
		while (start > text && lines < 3) {
			start--;
			if (*start == '\n' && start + 1 < text + n && start[1] != '\n' &&
			    start[1] != '\r')
				lines++;
		}
		if (lines == 3)
			start++;
		for (char *p = start; *p; p++) {
			unsigned char ch = (unsigned char)*p;
			if (ch == '\n' && b.len && p[1])
				(void)buf_puts(&b, " | ");
			else if (ch >= 0x20 && ch < 0x7f)
				(void)buf_putc(&b, (char)ch);
		}
		(void)buf_putc(&b, ' ');
	}
	while (b.len && b.data[b.len - 1] == ' ')
		b.data[--b.len] = '\0';
	return b.len ? buf_steal(&b) : NULL;
}

/* ---- the VM object ---- */

static void vm_exited(struct loop_child *c, void *data);

struct vm *
vm_get(struct qemu *q, struct sandbox *sb)
{
	struct vm *vm = sb->backend_data;

	if (vm)
		return vm;
	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return NULL;
	vm->q = q;
	vm->sb = sb;
	vm->exited.src.fd = -1;
	vm->slot = -1;
	vm->dir = strdup_printf("%s/%s", q->vms_dir, sb->id);
	/* under this sandboxd's own parent group (its uid range's): see qemu_backend_create */
	snprintf(vm->cgroup, sizeof(vm->cgroup), "%u/%s", (unsigned)q->uid_base, sb->id);
	if (vm->dir)
		snprintf(vm->jail, sizeof(vm->jail), "%s/root", vm->dir);
	if (!vm->dir || loop_timer_init(q->b.cfg.loop, &vm->timer, NULL, vm) < 0) {
		free(vm->dir);
		free(vm);
		return NULL;
	}
	list_init(&vm->link);
	list_push_back(&q->vms, &vm->link);
	sb->backend_data = vm;
	return vm;
}

/* Its VMM is gone (or given up): the slot and the link of its launch are no longer its (the
 * core frees them when it is told). */
void
vm_release_slot(struct vm *vm)
{
	vm->net = false;
	vm->slot = -1;
}

static uid_t
vm_uid(const struct vm *vm)
{
	return vm->q->root ? (uid_t)(vm->q->uid_base + (unsigned)vm->slot) : geteuid();
}

/* Forgets QEMU's process (it exited, or is being given up). */
void
vm_forget_process(struct vm *vm)
{
	vm->qmp = qmp_free(vm->qmp);
	loop_child_done(&vm->exited);
	vm->pid = 0;
	if (vm->q->cgroups)
		cgroup_remove(vm->cgroup);
}

void
vm_free(struct vm *vm)
{
	if (!vm)
		return;
	vm->agent = agent_free(vm->agent);
	vm_save_free(vm);
	vm_forget_process(vm);
	loop_timer_done(&vm->timer);
	vm_release_slot(vm);
	qemu_template_launch_free(vm->restore);
	list_remove(&vm->link);
	if (vm->sb)
		vm->sb->backend_data = NULL;
	free(vm->dir);
	/* its pidfd and timer may be in the loop's current batch: free after it */
	if (loop_defer(vm->q->b.cfg.loop, free, vm) < 0)
		free(vm);
}

/* Kills a process that is not ours to reap (an adopted or a stray VMM) and waits, briefly,
 * until it has exited, so that its cgroup can go and its tap is gone. Returns whether it was
 * there to kill. */
static bool
kill_and_wait(pid_t pid)
{
	_cleanup_close_ int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (fd < 0)
		return false; /* gone already */
	if (syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) < 0)
		return false;
	(void)poll(&p, 1, KILL_WAIT_MS); /* SIGKILL cannot be ignored: this is quick */
	return true;
}

/* Kills QEMU (if any) and waits for it, briefly: destroy and failure paths. */
void
vm_kill(struct vm *vm)
{
	vm_save_free(vm);
	if (vm->pid <= 0)
		return;
	if (vm->child) {
		kill(vm->pid, SIGKILL);
		(void)waitpid(vm->pid, NULL, 0); /* SIGKILL cannot be ignored: this is quick */
	} else {
		(void)kill_and_wait(vm->pid);
	}
	vm_forget_process(vm);
}

/* Everything of a VM except its writable layer (kept by a stop). */
void
vm_remove_runtime(struct vm *vm)
{
	static const char *const files[] = { "agent.sock", "qmp.sock", "vm.json" };

	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		_cleanup_free_ char *p = vm_path(vm, files[i]);
		if (p)
			(void)unlink(p);
	}
}

/* Its directory goes when its layer is this boot's own (a first boot that did not complete:
 * nothing of the user's is on it); otherwise all but the layer (and the logs) goes, so that
 * a start boots the layer again. */
static void
vm_remove_unless_layer(struct vm *vm)
{
	if (vm->fresh)
		remove_tree(vm->dir);
	else
		vm_remove_runtime(vm);
}

/* A VM that failed: its process, sockets and cgroup go; its layer stays unless this boot made
 * it (vm_remove_unless_layer). */
void
vm_fail(struct vm *vm, const char *fmt, ...)
{
	struct backend *b = &vm->q->b;
	struct sandbox *sb = vm->sb;
	enum vm_phase phase = vm->phase;
	bool snapshot = vm_saving(vm) && phase == VM_RUNNING; /* the snapshot fails with it */
	char reason[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	vm->phase = VM_EXITED;
	(void)loop_timer_arm(&vm->timer, 0, 0);
	vm_kill(vm);
	if (vm->tmpl) {
		qemu_template_failed(vm, reason);
		return;
	}
	if (phase == VM_BOOTING && qemu_template_fallback(vm, reason))
		return;
	/* the core lets go of the processes before the agent goes; a suspend or a snapshot
	 * that fails with its VM is reported before the VM's loss */
	if (phase == VM_BOOTING || phase == VM_STOPPING || phase == VM_SUSPENDING || snapshot)
		backend_done(b, sb, -EIO, reason);
	if (phase != VM_BOOTING && phase != VM_STOPPING)
		backend_lost(b, sb, reason);
	vm->agent = agent_free(vm->agent);
	vm_remove_unless_layer(vm);
	vm_free(vm);
}

/* ---- QEMU's start (its command line: qemu-argv.c) ---- */

/* A listening unix socket at path, bound by sandboxd and handed to QEMU. */
static int
listen_at(const char *path, uid_t owner)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	(void)unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return negative_errno();
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0 ||
	    chmod(path, 0600) < 0 || (geteuid() == 0 && chown(path, 0, 0) < 0)) {
		int r = negative_errno();
		close(fd);
		return r;
	}
	(void)owner;
	return fd;
}

/* What a VMM is started with: its descriptors, each at its enum qemu_fd number minus
 * QEMU_FD_KERNEL until the child places them, and its command line. */
struct launch {
	int fds[QEMU_FD_COUNT + QEMU_VOLUMES_MAX]; /* then each volume's, from QEMU_FD_END */
	int nfds;                                  /* QEMU_FD_COUNT + the volumes */
	char **argv;
};

static void
launch_done(struct launch *l)
{
	for (size_t i = 0; i < ARRAY_SIZE(l->fds); i++)
		safe_close(l->fds[i]);
	l->argv = qemu_argv_free(l->argv);
}

static int
open_into(struct launch *l, enum qemu_fd at, const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC, 0600);

	if (fd < 0)
		return negative_errno();
	l->fds[at - QEMU_FD_KERNEL] = fd;
	return 0;
}

/* Opens the launch's volumes at QEMU_FD_END on: as sandboxd, so the VMM needs no permission
 * on the file (it gets the descriptor), read-only for a read-only one (QEMU takes an fdset's
 * descriptor only with the access mode the drive asks for). */
static int
open_volumes(struct launch *l, const struct vm_launch *vl)
{
	for (size_t i = 0; i < vl->nvolumes; i++) {
		int fd = open(vl->volumes[i].file, (vl->volumes[i].read_only ? O_RDONLY : O_RDWR) |
		                                           O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			int r = negative_errno();
			log_error("volume '%s': cannot open '%s': %s", vl->volumes[i].name,
			          vl->volumes[i].file, strerror(-r));
			return r;
		}
		l->fds[QEMU_FD_COUNT + i] = fd;
	}
	return 0;
}

/* Forks the VMM's process. As root it starts in new PID, mount and network namespaces: QEMU is
 * process 1 of a PID namespace of its own (it sees no other process, and none can be started
 * in there that outlives it), its mounts are its own, and its network has nothing in it (a
 * tap, when there is one, comes as an fd). The raw clone without a new stack returns twice
 * like fork(); the child then calls only async-signal-safe functions until it executes. */
static pid_t
fork_vmm(bool namespaces)
{
	if (!namespaces)
		return fork();
	return (pid_t)syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | SIGCHLD, NULL,
	                      NULL, NULL, NULL);
}

/* The VMM's whole filesystem (root only): a private mount namespace whose root is a small
 * tmpfs holding the host's /usr read-only (QEMU and its libraries), the usrmerge links or
 * read-only binds for /bin /sbin /lib*, a /proc, and /dev with only null, zero, random,
 * urandom (and kvm under KVM). Nothing of the state directory, /etc, /home, /tmp or /var is
 * there: the files it needs come as fds. Child side: async-signal-safe calls only. */
static int
enter_jail(const char *root, bool kvm, uid_t uid)
{
	static const char *const top[] = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" };
	static const char *const devs[] = { "null", "zero", "random", "urandom" };
	char path[64], target[256];
	struct stat st;

	/* in the namespaces fork_vmm made: nothing mounted here reaches the host's */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0 ||
	    chdir(root) < 0)
		return -1;
	if (mkdir("usr", 0755) < 0 || mount("/usr", "usr", NULL, MS_BIND | MS_REC, NULL) < 0 ||
	    mount(NULL, "usr", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
	          NULL) < 0)
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(top); i++) {
		ssize_t n;
		snprintf(path, sizeof(path), "/%s", top[i]);
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			n = readlink(path, target, sizeof(target) - 1);
			if (n <= 0)
				return -1;
			target[n] = '\0';
			if (symlink(target, top[i]) < 0)
				return -1;
		} else if (S_ISDIR(st.st_mode)) {
			if (mkdir(top[i], 0755) < 0 ||
			    mount(path, top[i], NULL, MS_BIND | MS_REC, NULL) < 0 ||
			    mount(NULL, top[i], NULL,
			          MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
			          NULL) < 0)
				return -1;
		}
	}
	/* the PID namespace's /proc (QEMU alone), hidepid besides */
	if (mkdir("proc", 0555) < 0 ||
	    mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") < 0)
		return -1;
	if (mkdir("dev", 0755) < 0 ||
	    mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") < 0)
		return -1;
	/* a node of its own for /dev/kvm, owned by its uid: whatever the host's mode is, only
	 * this VMM reaches it through this node */
	if (kvm && (mknod("dev/kvm", S_IFCHR | 0600, makedev(10, 232)) < 0 ||
	            chown("dev/kvm", uid, uid) < 0))
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(devs); i++) {
		int fd;
		snprintf(path, sizeof(path), "/dev/%s", devs[i]);
		snprintf(target, sizeof(target), "dev/%s", devs[i]);
		if (stat(path, &st) < 0)
			continue;
		fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return -1;
		close(fd);
		if (mount(path, target, NULL, MS_BIND, NULL) < 0)
			return -1;
	}
	if (chroot(".") < 0 || chdir("/") < 0)
		return -1;
	return 0;
}

/* Child side of the fork: becomes the VMM. Only async-signal-safe calls from here on. */
_noreturn_ static void
exec_vmm(struct vm *vm, struct launch *l, uid_t uid)
{
	sigset_t none;
	int devnull;

	setsid();
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	if (chdir(vm->dir) < 0)
		_exit(126);
	if (vm->q->cgroups && cgroup_enter(vm->cgroup) < 0 && !vm->q->b.cfg.allow_unconfined) {
		/* no VMM outside its limits; the reason reaches the boot's failure via qemu.log */
		static const char msg[] = "sandboxd: the VMM could not enter its cgroup\n";
		(void)!write(l->fds[QEMU_FD_LOG - QEMU_FD_KERNEL], msg, sizeof(msg) - 1);
		_exit(126);
	}
	/* move the fds to their numbers without clobbering each other: first above them all,
	 * then down */
	for (int i = 0; i < l->nfds; i++) {
		int high = fcntl(l->fds[i], F_DUPFD, 64);
		if (high < 0)
			_exit(126);
		l->fds[i] = high;
	}
	for (int i = 0; i < l->nfds; i++)
		if (dup2(l->fds[i], QEMU_FD_KERNEL + i) < 0)
			_exit(126);
	devnull = open("/dev/null", O_RDWR);
	if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(QEMU_FD_LOG, 2) < 0)
		_exit(126);
	if (syscall(SYS_close_range, QEMU_FD_KERNEL + l->nfds, ~0U, 0) < 0)
		for (int fd = QEMU_FD_KERNEL + l->nfds; fd < 4096; fd++)
			close(fd);
	if (vm->q->root) {
		if (enter_jail(vm->jail, streq(vm->q->accel, "kvm"), uid) < 0)
			_exit(125);
		if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
		    setresuid(uid, uid, uid) < 0)
			_exit(126);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(126);
	{
		/* the marker by which a later sandboxd recognises its own VMMs */
		char *const envp[] = { "PATH=/usr/bin:/bin", vm->q->marker, NULL };
		execve(vm->q->qemu_bin, l->argv, envp);
	}
	_exit(127);
}

static int
spawn_qemu(struct vm *vm, const struct vm_launch *vl, bool fresh_layer, const struct vm_from *from)
{
	struct qemu *q = vm->q;
	struct sandbox *sb = vm->sb;
	const struct qemu_machine machine = { .qemu_bin = q->qemu_bin,
		                              .accel = q->accel,
		                              .tsc_khz = q->tsc_khz,
		                              .incoming = from->stream != NULL,
		                              .ram_file = from->ram,
		                              .ram_shared = from->ram_shared,
		                              .incoming_defer = from->ram && !from->ram_shared,
		                              .net_hub = from->net_hub };
	struct launch l;
	bool net = vl->has_net && !from->net_hub;
	_cleanup_free_ char *blank = NULL, *upper = vm_path(vm, "upper.qcow2");
	_cleanup_free_ char *agent_sock = vm_path(vm, "agent.sock"),
	                    *qmp_sock = vm_path(vm, "qmp.sock");
	_cleanup_free_ char *console = vm_path(vm, "console.log"), *qlog = vm_path(vm, "qemu.log");
	uid_t uid;
	pid_t pid;
	int r;

	if (!vl->root_disk || vl->slot >= UID_SLOTS - 1)
		return -EINVAL;
	memset(&l, 0, sizeof(l));
	for (size_t i = 0; i < ARRAY_SIZE(l.fds); i++)
		l.fds[i] = -1;
	if (vl->nvolumes > QEMU_VOLUMES_MAX)
		return -E2BIG;
	l.nfds = QEMU_FD_COUNT + (int)vl->nvolumes;
	if (!upper || !agent_sock || !qmp_sock || !console || !qlog)
		return -ENOMEM;
	r = mkdir_p(vm->dir, 0700);
	if (r >= 0 && q->root && mkdir(vm->jail, 0700) < 0 && errno != EEXIST)
		r = negative_errno();
	if (r < 0)
		return r;
	r = bundle_blank_disk(q->b.cfg.state_dir, vl->disk_mb, &blank);
	if (r < 0)
		return r;
	if (fresh_layer && from->layer) {
		r = qemu_copy_file(from->layer, upper);
		if (r < 0)
			return r;
	} else if (fresh_layer || access(upper, F_OK) < 0) {
		r = bundle_make_layer(blank, upper);
		if (r < 0)
			return r;
	}
	vm->slot = (int)vl->slot;
	uid = vm_uid(vm);
	/* the VMM may write its layer and its logs; nothing else of the state is its own */
	if (q->root && (chown(upper, uid, uid) < 0 || chmod(upper, 0600) < 0))
		return negative_errno();
	if ((r = open_into(&l, QEMU_FD_KERNEL, q->bundle.kernel, O_RDONLY)) < 0 ||
	    (r = open_into(&l, QEMU_FD_INITRD, q->bundle.initrd, O_RDONLY)) < 0 ||
	    (r = open_into(&l, QEMU_FD_ROOT, vl->root_disk, O_RDONLY)) < 0 ||
	    (r = open_into(&l, QEMU_FD_BLANK, blank, O_RDONLY)) < 0 ||
	    (r = open_into(&l, QEMU_FD_UPPER, upper, O_RDWR)) < 0 ||
	    (r = open_into(&l, QEMU_FD_CONSOLE, console, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND)) <
	            0 ||
	    (r = open_into(&l, QEMU_FD_LOG, qlog, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND)) < 0)
		goto out;
	if (net) {
		/* the core's tap, a copy of which the VMM holds */
		l.fds[QEMU_FD_TAP - QEMU_FD_KERNEL] = fcntl(vl->net.tap_fd, F_DUPFD_CLOEXEC, 0);
		if (l.fds[QEMU_FD_TAP - QEMU_FD_KERNEL] < 0) {
			r = negative_errno();
			goto out;
		}
	} else if ((r = open_into(&l, QEMU_FD_TAP, "/dev/null", O_RDONLY)) < 0) {
		goto out;
	}
	if (from->ram) {
		int *fd = &l.fds[QEMU_FD_RAM - QEMU_FD_KERNEL];
		*fd = fcntl(from->ram_fd, F_DUPFD_CLOEXEC, 0);
		if (*fd < 0 || (q->root && (fchown(*fd, uid, uid) < 0 || fchmod(*fd, 0600) < 0))) {
			r = negative_errno();
			goto out;
		}
	} else if ((r = open_into(&l, QEMU_FD_RAM, "/dev/null", O_RDONLY)) < 0) {
		goto out;
	}
	if ((r = open_into(&l, QEMU_FD_INCOMING, from->stream ? from->stream : "/dev/null",
	                   O_RDONLY)) < 0 ||
	    (r = open_volumes(&l, vl)) < 0)
		goto out;
	if ((l.fds[QEMU_FD_AGENT - QEMU_FD_KERNEL] = listen_at(agent_sock, uid)) < 0 ||
	    (l.fds[QEMU_FD_QMP - QEMU_FD_KERNEL] = listen_at(qmp_sock, uid)) < 0) {
		r = -EADDRNOTAVAIL;
		goto out;
	}
	if (q->root) {
		/* the VMM writes the logs through the fds it is given, and re-opens them as itself
		 */
		if (fchown(l.fds[QEMU_FD_CONSOLE - QEMU_FD_KERNEL], uid, uid) < 0 ||
		    fchown(l.fds[QEMU_FD_LOG - QEMU_FD_KERNEL], uid, uid) < 0) {
			r = negative_errno();
			goto out;
		}
	}
	if (q->cgroups) {
		uint64_t mem = ((uint64_t)vl->memory_mb + VMM_OVERHEAD_MB) << 20;
		r = cgroup_create(vm->cgroup, mem, vl->cpus, VMM_MAX_PIDS);
		if (r < 0 && !q->b.cfg.allow_unconfined) {
			/* no VMM without its limits (the host's cgroups went away under us) */
			log_error("sandbox '%s': cannot make its VMM's cgroup: %s", sb->id,
			          strerror(-r));
			goto out;
		}
		if (r < 0)
			log_warning(
			        "sandbox '%s': no cgroup limits for its VMM (--allow-unconfined)",
			        sb->id);
	}
	r = qemu_argv_build(&machine, vl, &l.argv);
	if (r < 0)
		goto out;

	pid = fork_vmm(q->root);
	if (pid < 0) {
		r = negative_errno();
		goto out;
	}
	if (pid == 0)
		exec_vmm(vm, &l, uid);
	vm->pid = pid;
	vm->child = true;
	vm->net = net;
	vm->guest_addr = net ? vl->net.guest_addr : 0;
	r = 0;
out:
	launch_done(&l);
	return r;
}

/* Records what proves later that the running QEMU is this sandbox's. */
static int
write_record(struct vm *vm)
{
	_cleanup_free_ char *path = vm_path(vm, "vm.json"), *text = NULL;
	uint64_t start = 0;
	json_t *j;

	if (!path || process_start_time(vm->pid, &start) < 0)
		return -ESRCH;
	vm->start_time = start;
	j = json_pack("{s:i, s:I, s:i, s:b, s:I}", "pid", (int)vm->pid, "start_time",
	              (json_int_t)start, "slot", vm->slot, "net", vm->net, "guest_addr",
	              (json_int_t)ntohl(vm->guest_addr));
	text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	return text ? write_file_atomic(path, text, strlen(text), 0600) : -ENOMEM;
}

static int
read_record(struct vm *vm, pid_t *ret_pid, uint64_t *ret_start, int *ret_slot, bool *ret_net)
{
	_cleanup_free_ char *path = vm_path(vm, "vm.json"), *text = NULL;
	json_int_t start = 0;
	int pid = 0, slot = -1, r;
	json_t *j;

	if (!path)
		return -ENOMEM;
	r = read_file_max(path, 4096, &text, NULL);
	if (r < 0)
		return r;
	j = json_loads(text, 0, NULL);
	if (!j ||
	    json_unpack(j, "{s:i, s:I, s:i}", "pid", &pid, "start_time", &start, "slot", &slot) <
	            0 ||
	    pid <= 1 || slot < 0 || slot >= (int)UID_SLOTS) {
		json_decref(j);
		return -EINVAL;
	}
	*ret_net = json_is_true(json_object_get(j, "net")); /* older records: no network */
	vm->guest_addr = htonl((uint32_t)json_integer_value(json_object_get(j, "guest_addr")));
	json_decref(j);
	*ret_pid = pid;
	*ret_start = (uint64_t)start;
	*ret_slot = slot;
	return 0;
}

/* ---- agent ---- */

static void
agent_ready_cb(struct agent *a _unused_, bool mounted, const char *version, void *data)
{
	struct vm *vm = data;
	struct backend *b = &vm->q->b;

	vm->reconnecting = false;
	if (vm->tmpl) {
		qemu_template_ready(vm);
		return;
	}
	if (vm->phase == VM_BOOTING) {
		if (!mounted) {
			vm_fail(vm, "the guest could not set up its root disk");
			return;
		}
		(void)loop_timer_arm(&vm->timer, 0, 0);
		vm->phase = VM_RUNNING;
		vm->fresh = false; /* the guest has it now: it holds the user's work */
		if (vm->drop_state) {
			/* resumed: the guest runs on from the state, which no longer fits the layer
			 */
			_cleanup_free_ char *state = vm_path(vm, VM_STATE_FILE);
			if (state)
				(void)unlink(state);
			vm->drop_state = false;
		}
		log_debug("sandbox '%s': agent ready (%s)", vm->sb->id, version);
		free(vm->sb->runtime_ref);
		vm->sb->runtime_ref = strdup_printf("qemu:%d", (int)vm->pid);
		backend_done(b, vm->sb, 0, NULL);
		qemu_template_booted(vm);
	}
	if (vm->phase == VM_RUNNING)
		backend_agent_ready(b, vm->sb);
}

/* The agent stopped answering and QEMU did not exit meanwhile. */
static void
agent_lost(struct loop_timer *t _unused_, void *data)
{
	struct vm *vm = data;

	if (vm->phase == VM_RUNNING)
		vm_fail(vm, "its agent stopped answering");
}

static void
agent_closed_cb(struct agent *a, const char *reason, void *data)
{
	struct vm *vm = data;

	if (vm->phase == VM_BOOTING) {
		_cleanup_free_ char *tail = log_tail(vm);
		/* "within N s" only when the time ran out: a VMM that died at once (a bad
		 * argument) resets the connection long before */
		if (streq(reason, "boot timeout"))
			vm_fail(vm, "the guest agent did not come up within %u s (%s)%s%s",
			        vm->q->boot_timeout_ms / 1000, reason,
			        tail ? "; last output: " : "", tail ? tail : "");
		else
			vm_fail(vm, "the guest agent did not come up (%s)%s%s", reason,
			        tail ? "; last output: " : "", tail ? tail : "");
		return;
	}
	if (vm->phase != VM_RUNNING)
		return;
	/* the VM runs on: a new session keeps the kept processes */
	if (vm->reconnecting) {
		/* QEMU's exit, when that is why, may be told a moment after its sockets closed
		 * (its teardown): it says why better */
		log_info("sandbox '%s': its agent stopped answering (%s)", vm->sb->id, reason);
		vm->timer.fn = agent_lost;
		(void)loop_timer_arm(&vm->timer, AGENT_LOST_WAIT_MS, 0);
		return;
	}
	log_info("sandbox '%s': agent connection lost (%s); reconnecting", vm->sb->id, reason);
	vm->reconnecting = true;
	(void)agent_connect(a, now_mono_ms() + RECONNECT_MS);
}

static const struct agent_events agent_events = {
	.ready = agent_ready_cb,
	.closed = agent_closed_cb,
};

static int
vm_connect_agent(struct vm *vm, const struct vm_launch *l, uint64_t deadline)
{
	_cleanup_free_ char *sock = vm_path(vm, "agent.sock");
	struct agent_hello hello = {
		.env = l->env,
		.hostname = l->hostname,
		.root_dev = "/dev/vda",
		.upper_dev = "/dev/vdb",
		.uid = GUEST_UID,
		.gid = GUEST_UID,
		.home = "/sandbox/home",
	};
	struct guest_identity id;
	int r;

	if (!sock)
		return -ENOMEM;
	vm->agent = agent_free(vm->agent);
	vm->writes_volumes = false;
	for (size_t i = 0; i < l->nvolumes; i++)
		vm->writes_volumes = vm->writes_volumes || !l->volumes[i].read_only;
	if (vm->tmpl)
		hello.root_dev = hello.upper_dev = NULL; /* a template mounts nothing */
	r = guest_identity_fill(&id, l, &hello);
	if (r < 0)
		return r;
	r = agent_new(vm->q->b.cfg.loop, sock, &hello, &agent_events, vm, &vm->agent);
	guest_identity_done(&id);
	if (r < 0)
		return r;
	return agent_connect(vm->agent, deadline);
}

/* ---- supervision ---- */

static void
quit_timeout(struct loop_timer *t _unused_, void *data)
{
	struct vm *vm = data;

	log_warning("sandbox '%s': QEMU did not quit in %d s; killing it", vm->sb->id,
	            QUIT_WAIT_MS / 1000);
	if (vm->pid > 0)
		kill(vm->pid, SIGKILL);
}

static void
quit_answered(void *data, const json_t *ret _unused_, const char *err)
{
	struct vm *vm = data;

	/* QEMU answers, then exits: vm_exited follows; a refusal falls to the kill */
	if (err && vm->pid > 0)
		log_warning("sandbox '%s': QEMU refused to quit: %.200s", vm->sb->id, err);
}

static void
qmp_ready(struct qmp *m, void *data)
{
	struct vm *vm = data;

	if (qmp_execute(m, "quit", NULL, quit_answered, vm) < 0 && vm->pid > 0)
		kill(vm->pid, SIGKILL);
}

/* Ends a VM whose guest did not power off: QMP quit stops the guest and has QEMU close its
 * block devices (the layer's qcow2 metadata is written out), which a SIGKILL does not. The
 * guest's own unsynced writes are lost either way. If QEMU does not exit within QUIT_WAIT_MS
 * (a monitor that does not answer), it is killed. */
static void
vm_quit(struct vm *vm)
{
	_cleanup_free_ char *path = vm_path(vm, "qmp.sock");
	int r = -ENOMEM;

	if (vm->pid <= 0 || vm->qmp)
		return;
	log_info("sandbox '%s': asking QEMU to quit through its monitor", vm->sb->id);
	vm->timer.fn = quit_timeout;
	(void)loop_timer_arm(&vm->timer, QUIT_WAIT_MS, 0);
	if (path)
		r = qmp_new(vm->q->b.cfg.loop, path, qmp_ready, NULL, vm, &vm->qmp);
	if (r < 0) {
		log_warning("sandbox '%s': no QEMU monitor (%s); killing QEMU", vm->sb->id,
		            strerror(-r));
		kill(vm->pid, SIGKILL);
	}
}

static void
stop_timeout(struct loop_timer *t _unused_, void *data)
{
	struct vm *vm = data;

	/* the guest did not power off in time: the layer stays, what it did not sync is lost */
	log_warning("sandbox '%s': the guest did not power off in %u s; asking QEMU to quit",
	            vm->sb->id, vm->q->stop_timeout_ms / 1000);
	vm_quit(vm);
}

static void destroy_finish(struct loop_timer *t, void *data);

static void
vm_exited(struct loop_child *c _unused_, void *data)
{
	struct vm *vm = data;
	struct sandbox *sb = vm->sb;
	int status = 0;
	char how[64];

	if (!vm->child || waitpid(vm->pid, &status, WNOHANG) != vm->pid)
		snprintf(how, sizeof(how), "exited"); /* adopted: not ours to reap */
	else if (WIFSIGNALED(status))
		snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(status));
	else
		snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(status));
	vm_forget_process(vm);
	(void)loop_timer_arm(&vm->timer, 0, 0);
	if (vm->tmpl) {
		qemu_template_exited(vm, how);
		return;
	}
	if (vm_saving(vm) && vm_save_exited(vm, how))
		return; /* suspended */
	switch (vm->phase) {
	case VM_STOPPING:
		/* a clean power-off, a quit or a kill: the layer is kept either way */
		log_info("sandbox '%s': its VMM %s", sb->id, how);
		vm->phase = VM_EXITED;
		vm->agent = agent_free(vm->agent);
		vm_remove_runtime(vm);
		vm_release_slot(vm);
		backend_done(&vm->q->b, sb, 0, NULL);
		return;
	case VM_DESTROYING:
		/* destroy handles it; a guest that powered off for it is done flushing */
		vm->timer.fn = destroy_finish;
		(void)loop_timer_arm(&vm->timer, 1, 0);
		return;
	case VM_BOOTING: {
		_cleanup_free_ char *tail = log_tail(vm);
		vm_fail(vm, "QEMU %s while booting%s%s", how, tail ? ": " : "", tail ? tail : "");
		return;
	}
	case VM_SUSPENDING:
	case VM_RUNNING: {
		_cleanup_free_ char *tail = log_tail(vm);
		vm_fail(vm, "its VM ended unexpectedly: QEMU %s%s%s", how,
		        tail ? "; last output: " : "", tail ? tail : "");
		return;
	}
	case VM_EXITED:
		return;
	}
}

static int
vm_watch(struct vm *vm)
{
	return loop_child_watch(vm->q->b.cfg.loop, &vm->exited, vm->pid, vm_exited, vm);
}

static void
boot_timeout(struct loop_timer *t _unused_, void *data)
{
	struct vm *vm = data;

	if (vm->phase == VM_BOOTING && vm->agent)
		agent_close(vm->agent, "boot timeout");
}

int
vm_boot(struct qemu *q, struct sandbox *sb, const struct vm_launch *l, bool fresh_layer,
        const struct vm_from *from)
{
	struct vm *vm = vm_get(q, sb);
	uint64_t deadline;
	int r;

	if (!vm)
		return -ENOMEM;
	vm->phase = VM_BOOTING;
	vm->reconnecting = false;
	vm->fresh = fresh_layer;
	vm->drop_state = false;
	r = spawn_qemu(vm, l, fresh_layer, from);
	if (r < 0) {
		log_error("sandbox '%s': starting QEMU failed: %s", sb->id, strerror(-r));
		if (fresh_layer)
			remove_tree(vm->dir);
		vm_free(vm);
		return r;
	}
	deadline = now_mono_ms() + q->boot_timeout_ms;
	if ((r = vm_watch(vm)) < 0 || (r = write_record(vm)) < 0 ||
	    (from->ram && !from->ram_shared && (r = qemu_template_incoming(vm)) < 0) ||
	    (r = vm_connect_agent(vm, l, deadline)) < 0) {
		vm_kill(vm);
		vm_remove_unless_layer(vm);
		vm_free(vm);
		return r;
	}
	vm->timer.fn = boot_timeout;
	(void)loop_timer_arm(&vm->timer, q->boot_timeout_ms, 0);
	return 0;
}

/* ---- backend operations ---- */

static int
qemu_start(struct backend *b, struct sandbox *sb, const struct vm_launch *l)
{
	static const struct vm_from blank;

	if (l->snapshot_dir)
		return qemu_start_from(Q(b), sb, l);
	if (!l->nvolumes)
		return qemu_template_start(Q(b), sb, l);
	log_info("sandbox '%s': cold boot", sb->id);
	return vm_boot(Q(b), sb, l, true, &blank);
}

static int
qemu_restart(struct backend *b, struct sandbox *sb, const struct vm_launch *l)
{
	static const struct vm_from kept;
	struct vm *vm = vm_get(Q(b), sb);
	_cleanup_free_ char *state = vm ? vm_path(vm, VM_STATE_FILE) : NULL;

	/* a cold boot: a saved state (suspended, then restarted) no longer fits the layer */
	if (state)
		(void)unlink(state);
	return vm_boot(Q(b), sb, l, false, &kept);
}

static void
shutdown_answered(void *data, const struct agent_result *res)
{
	struct vm *vm = data;

	/* the guest powers off on its own after answering; a refusal falls to the timeout */
	if (res->err && vm->pid > 0)
		log_warning("sandbox '%s': the guest refused to shut down: %s", vm->sb->id,
		            res->message ? res->message : strerror(res->err));
}

static int
qemu_stop(struct backend *b, struct sandbox *sb)
{
	struct vm *vm = sb->backend_data;

	if ((!vm || vm->pid <= 0) && (vm = vm_get(Q(b), sb)) && vm_has_state(vm))
		return vm_drop_state(vm); /* suspended: its memory goes, its layer stays */
	if (!vm || vm->pid <= 0)
		return -ESRCH;
	vm->phase = VM_STOPPING;
	if (vm->q->stop_timeout_ms == 0) {
		vm_quit(vm); /* the operator does not wait for guests */
		return 0;
	}
	vm->timer.fn = stop_timeout;
	(void)loop_timer_arm(&vm->timer, vm->q->stop_timeout_ms, 0);
	if (!vm->agent || !agent_shutdown(vm->agent, shutdown_answered, vm)) {
		log_warning("sandbox '%s': no guest agent to power off; asking QEMU to quit",
		            sb->id);
		vm_quit(vm);
	}
	return 0;
}

static void
destroy_finish(struct loop_timer *t _unused_, void *data)
{
	struct vm *vm = data;
	struct backend *b = &vm->q->b;
	struct sandbox *sb = vm->sb;

	/* a flush that did not end in time ends here (nothing when QEMU is gone) */
	vm_kill(vm);
	vm->agent = agent_free(vm->agent);
	remove_tree(vm->dir);
	vm_free(vm);
	backend_done(b, sb, 0, NULL);
}

static int
qemu_destroy(struct backend *b, struct sandbox *sb)
{
	struct vm *vm = vm_get(Q(b), sb);

	if (!vm)
		return -ENOMEM;
	vm->phase = VM_DESTROYING;
	vm->timer.fn = destroy_finish;
	/* what the guest wrote to a volume and has not synced would be lost with its VM: it
	 * powers off first (QEMU's exit finishes the destroy), for DESTROY_FLUSH_MS at most */
	if (vm->pid > 0 && vm->writes_volumes && vm->agent && agent_ready(vm->agent) &&
	    agent_shutdown(vm->agent, shutdown_answered, vm))
		return loop_timer_arm(&vm->timer, DESTROY_FLUSH_MS, 0);
	vm->agent = agent_free(vm->agent);
	vm_kill(vm);
	/* complete on the loop, like every other operation */
	return loop_timer_arm(&vm->timer, 1, 0);
}

static int
qemu_status(struct backend *b, struct sandbox *sb, struct backend_found *ret)
{
	struct vm *vm = vm_get(Q(b), sb);
	_cleanup_free_ char *upper = NULL, *comm_path = NULL, *comm = NULL;
	uint64_t start, now_start;
	pid_t pid;
	int slot;
	bool net = false;

	if (!vm)
		return -ENOMEM;
	upper = vm_path(vm, "upper.qcow2");
	if (read_record(vm, &pid, &start, &slot, &net) == 0 &&
	    process_start_time(pid, &now_start) == 0 && now_start == start) {
		comm_path = strdup_printf("/proc/%d/comm", (int)pid);
		if (comm_path && read_file_max(comm_path, 64, &comm, NULL) == 0 &&
		    str_has_prefix(comm, "qemu-sbx-")) {
			/* the same process, started at the same time, with our name: ours */
			vm->pid = pid;
			vm->start_time = start;
			vm->child = false;
			vm->slot = slot;
			vm->net = net;
			*ret = (struct backend_found){ .status = BACKEND_RUNNING,
				                       .has_slot = true,
				                       .slot = (unsigned)slot,
				                       .net = net,
				                       .guest_addr = vm->guest_addr };
			return 0;
		}
	}
	*ret = (struct backend_found){ .status = upper && access(upper, F_OK) == 0 ? BACKEND_STOPPED
		                                                                   : BACKEND_GONE };
	if (ret->status == BACKEND_STOPPED) {
		/* a save that its sandboxd did not live to finish is no state */
		_cleanup_free_ char *tmp = vm_path(vm, VM_STATE_FILE ".tmp");
		if (tmp)
			(void)unlink(tmp);
		if (vm_has_state(vm))
			ret->status = BACKEND_SUSPENDED;
	}
	if (ret->status == BACKEND_GONE)
		vm_free(vm);
	return 0;
}

static int
qemu_adopt(struct backend *b _unused_, struct sandbox *sb, const struct vm_launch *l)
{
	struct vm *vm = sb->backend_data;
	_cleanup_free_ char *state = NULL;
	int r;

	if (!vm || vm->pid <= 0)
		return -ESRCH;
	/* a resume the previous sandboxd did not see through: the guest runs on without it */
	state = vm_path(vm, VM_STATE_FILE);
	if (state)
		(void)unlink(state);
	/* a suspend or a snapshot it did not see through may have left the guest paused */
	vm_save_recover(vm);
	vm->phase = VM_RUNNING;
	r = vm_watch(vm);
	if (r >= 0)
		r = vm_connect_agent(vm, l, now_mono_ms() + vm->q->boot_timeout_ms);
	/* the first session after the restart: failing it fails the sandbox */
	vm->reconnecting = true;
	return r;
}

static void
qemu_abandon(struct backend *b _unused_, struct sandbox *sb)
{
	struct vm *vm = sb->backend_data;

	if (!vm)
		return;
	/* nothing is left running that no policy governs; the operation under way (a boot, a
	 * stop) ends here, and nothing of it reports later */
	vm->phase = VM_EXITED;
	(void)loop_timer_arm(&vm->timer, 0, 0);
	vm->agent = agent_free(vm->agent);
	vm_kill(vm);
	vm_remove_unless_layer(vm);
	vm_free(vm);
}

/* Its QEMU is there while its pid names a process started when it was. A zombie of ours is
 * not gone yet: its exit is on its way to vm_exited, which says how it ended. */
static int
qemu_check(struct backend *b _unused_, struct sandbox *sb)
{
	struct vm *vm = sb->backend_data;
	uint64_t start;
	int r;

	if (!vm || vm->pid <= 0)
		return -ESRCH;
	r = process_start_time(vm->pid, &start);
	if (r == -ESRCH)
		return kill(vm->pid, 0) == 0 ? 0 : -ESRCH;
	if (r < 0)
		return 0; /* unreadable: not evidence that it is gone */
	return vm->start_time && start != vm->start_time ? -ESRCH : 0;
}

/* Measured on the host: the VMM's group when it is in one (cgroup v2), else the VMM itself;
 * the disk is what the guest's writes allocated in its layer (the image below is shared). */
static int
qemu_sample(struct backend *b _unused_, struct sandbox *sb, struct backend_sample *ret)
{
	struct vm *vm = sb->backend_data;
	_cleanup_free_ char *upper = NULL;
	struct stat st;
	int r;

	if (!vm || vm->pid <= 0)
		return -ESRCH;
	r = vm->q->cgroups ? cgroup_usage(vm->cgroup, vm->pid, &ret->cpu_ns, &ret->memory_bytes)
	                   : -EOPNOTSUPP;
	if (r < 0)
		r = procstat_read(vm->pid, &ret->cpu_ns, &ret->memory_bytes);
	if (r < 0)
		return r;
	upper = vm_path(vm, "upper.qcow2");
	if (!upper)
		return -ENOMEM;
	if (stat(upper, &st) < 0)
		return negative_errno();
	ret->disk_bytes = (uint64_t)st.st_blocks * 512;
	return 0;
}

static struct agent *
qemu_agent(struct backend *b _unused_, struct sandbox *sb)
{
	struct vm *vm = sb->backend_data;

	return vm && vm->phase == VM_RUNNING ? vm->agent : NULL;
}

static const char *
qemu_describe(struct backend *b)
{
	return streq(Q(b)->accel, "kvm") ? "qemu microvm (kvm)" : "qemu microvm (tcg)";
}

static void
qemu_caps(struct backend *b, struct backend_caps *ret)
{
	*ret = (struct backend_caps){ .accel = Q(b)->accel,
		                      .suspend = true,
		                      .memory_snapshot = true,
		                      .disk_snapshot = true,
		                      .processes = true,
		                      .files = true,
		                      .volumes = true,
		                      .egress = b->cfg.egress ? NET_ALLOWLIST : NET_NONE,
		                      .vmm_shared_uid = !Q(b)->root,
		                      .vmm_no_cgroups = !Q(b)->cgroups };
}

static void
qemu_free(struct backend *b)
{
	struct qemu *q = Q(b);
	struct list_node *n, *tmp;

	qemu_templates_free(q); /* a template being built is not kept */
	/* VMs keep running (with their table entries, which the core keeps), and the next
	 * sandboxd takes them back */
	LIST_FOREACH_SAFE (n, tmp, &q->vms) {
		struct vm *vm = list_entry(n, struct vm, link);
		vm->agent = agent_free(vm->agent);
		loop_child_done(&vm->exited);
		vm->pid = 0;
		vm_free(vm);
	}
	vm_bundle_done(&q->bundle);
	free(q->vms_dir);
	free(q->qemu_bin);
	free(q->marker);
	free(q);
}

/* The VM of the sandbox with this id, or NULL. */
static struct vm *
vm_find(struct qemu *q, const char *id)
{
	struct list_node *it;

	LIST_FOREACH (it, &q->vms) {
		struct vm *vm = list_entry(it, struct vm, link);
		if (vm->sb && streq(vm->sb->id, id))
			return vm;
	}
	return NULL;
}

/* VMMs of this state directory that no VM of ours runs are ended: after a restart, those no
 * sandbox took back (a crash while starting one, a record lost); later, one that came from
 * anywhere else. They are recognised by the marker in their environment, never by name, so
 * another sandboxd's (or anyone else's) QEMU is never touched. Each is waited for, so that its
 * cgroup can go and its tap goes with it. */
static void
sweep_vmms(struct qemu *q)
{
	DIR *d = opendir("/proc");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		_cleanup_free_ char *environ_text = NULL;
		char path[300];
		uint64_t pid;
		size_t n = 0;
		bool mine = false, known = false;
		struct list_node *it;

		if (parse_u64(de->d_name, &pid) < 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/environ", de->d_name);
		if (read_file_max(path, 65536, &environ_text, &n) < 0)
			continue;
		for (size_t off = 0; off < n; off += strlen(environ_text + off) + 1)
			if (streq(environ_text + off, q->marker))
				mine = true;
		if (!mine)
			continue;
		LIST_FOREACH (it, &q->vms)
			if (list_entry(it, struct vm, link)->pid == (pid_t)pid)
				known = true;
		if (known)
			continue;
		if (kill_and_wait((pid_t)pid))
			backend_swept(&q->b, "vmm", de->d_name);
	}
	closedir(d);
}

/* A group whose VM has a QEMU: one that may not have entered it yet (between the fork and its
 * exec) must not lose it. */
static bool
cgroup_in_use(const char *name, void *data)
{
	struct vm *vm = vm_find(data, name);

	return vm && vm->pid > 0;
}

static void
cgroup_swept(const char *name, void *data)
{
	struct qemu *q = data;

	backend_swept(&q->b, "cgroup", name);
}

/* The directories of sandboxes the core does not have: a delete that sandboxd did not live to
 * finish, a sandbox whose record was lost. */
static void
sweep_layers(struct qemu *q)
{
	DIR *d = opendir(q->vms_dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		_cleanup_free_ char *path = NULL;
		struct stat st;

		if (!str_has_prefix(de->d_name, "sbx_") ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode) || vm_find(q, de->d_name) ||
		    backend_owns(&q->b, de->d_name))
			continue;
		path = strdup_printf("%s/%s", q->vms_dir, de->d_name);
		if (!path)
			continue;
		remove_tree(path);
		if (access(path, F_OK) < 0)
			backend_swept(&q->b, "layer", de->d_name);
	}
	closedir(d);
}

static void
qemu_sweep(struct backend *b)
{
	struct qemu *q = Q(b);

	sweep_vmms(q);
	if (q->cgroups) {
		char parent[16];
		snprintf(parent, sizeof(parent), "%u", (unsigned)q->uid_base);
		(void)cgroup_sweep(parent, cgroup_in_use, cgroup_swept, q);
	}
	sweep_layers(q);
}

static const struct backend_ops qemu_ops = {
	.name = "qemu",
	.describe = qemu_describe,
	.caps = qemu_caps,
	.free = qemu_free,
	.start = qemu_start,
	.restart = qemu_restart,
	.stop = qemu_stop,
	.destroy = qemu_destroy,
	.status = qemu_status,
	.adopt = qemu_adopt,
	.abandon = qemu_abandon,
	.check = qemu_check,
	.suspend = qemu_suspend,
	.resume = qemu_resume,
	.snapshot = qemu_snapshot,
	.boots_images = true,
	.agent = qemu_agent,
	.sample = qemu_sample,
	.sweep = qemu_sweep,
};

static char *
find_program(const char *name)
{
	static const char *const dirs[] = { "/usr/bin", "/usr/local/bin", "/bin" };

	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		char *p = strdup_printf("%s/%s", dirs[i], name);
		if (p && access(p, X_OK) == 0)
			return p;
		free(p);
	}
	return NULL;
}

/* Claims a range of VMM uids no other sandboxd on this host uses: two daemons (two state
 * directories) must never run VMMs under the same uid, or one's VMM could reach the other's
 * files through /proc. Claims live in /run (a boot ends every VM anyway), one file per range
 * naming the state directory; a claim whose state directory is gone is taken over. */
static int
claim_uid_range(const char *state_dir, uid_t *ret)
{
	_cleanup_close_ int lock = -1;
	int r;

	r = mkdir_p(UID_CLAIMS, 0700);
	if (r < 0)
		return r;
	lock = open(UID_CLAIMS "/.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		return negative_errno();
	for (unsigned k = 0; k < UID_RANGES; k++) {
		uid_t base = UID_FIRST + k * UID_SLOTS;
		_cleanup_free_ char *path = strdup_printf(UID_CLAIMS "/%u", (unsigned)base);
		_cleanup_free_ char *owner = NULL;

		if (!path)
			return -ENOMEM;
		if (read_file_max(path, 4096, &owner, NULL) == 0 && !streq(owner, state_dir) &&
		    access(owner, F_OK) == 0)
			continue; /* another live sandboxd's */
		r = write_file_atomic(path, state_dir, strlen(state_dir), 0600);
		if (r < 0)
			return r;
		*ret = base;
		return 0;
	}
	return -EUSERS;
}

int
qemu_backend_create(const struct backend_config *cfg, struct backend **ret)
{
	struct qemu *q = calloc(1, sizeof(*q));
	const char *why;
	int r;

	if (!q)
		return -ENOMEM;
	q->b.ops = &qemu_ops;
	q->b.cfg = *cfg;
	q->b.priv = q;
	/* the last uid of the range is the spare one, which no VMM gets */
	q->b.slots = UID_SLOTS - 2; /* the next is the template builder's */
	q->root = geteuid() == 0;
	q->boot_timeout_ms = (cfg->boot_timeout_secs ? cfg->boot_timeout_secs : 60) * 1000;
	q->stop_timeout_ms = cfg->stop_timeout_secs * 1000;
	list_init(&q->vms);
	q->qemu_bin = find_program("qemu-system-x86_64");
	q->vms_dir = strdup_printf("%s/vms", cfg->state_dir);
	q->marker = strdup_printf("SANDBOXD_STATE_DIR=%s", cfg->state_dir);
	if (!q->qemu_bin) {
		log_error("backend qemu: qemu-system-x86_64 is not installed (apt-get install "
		          "qemu-system-x86)");
		r = -ENOENT;
		goto fail;
	}
	if (!q->vms_dir || !q->marker || (r = mkdir_p(q->vms_dir, 0700)) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	r = bundle_load(cfg->state_dir, cfg->agent, cfg->kernel, cfg->initrd, &q->bundle);
	if (r < 0)
		goto fail; /* bundle_load said what to do */
	if (!q->bundle.rootfs) {
		log_error("backend qemu: no root disk: run 'sandboxd setup'");
		r = -ENOENT;
		goto fail;
	}
	/* the bundle's small root disk is the built-in image "busybox" */
	q->b.builtin_disk = q->bundle.rootfs;
	r = qemu_accel_pick(cfg->accel, q->qemu_bin, q->bundle.kernel, q->bundle.initrd,
	                    cfg->state_dir, q->accel, sizeof(q->accel));
	if (r < 0)
		goto fail;
	if (streq(q->accel, "tcg") && bundle_host_tsc_khz(&q->tsc_khz) < 0)
		q->tsc_khz = 0;
	if (q->root && (r = claim_uid_range(cfg->state_dir, &q->uid_base)) < 0) {
		log_error("backend qemu: no range of VMM uids is free: %s", strerror(-r));
		goto fail;
	}
	if (q->root)
		q->b.spare_uid = q->uid_base + UID_SLOTS - 1;
	q->cgroups = cgroup_available(&why);
	if (!q->cgroups && q->root && !cfg->allow_unconfined) {
		/* a root sandboxd promises each VMM its limits: a guest must not take the host's
		 * memory or tasks because this host's cgroups are out of reach (under `ip netns
		 * exec`, which mounts a /sys without them; in a container that hides them) */
		log_error("backend qemu: cannot confine VMMs: no cgroup limits can be made: %s; "
		          "give sandboxd the host's cgroups (/sys/fs/cgroup, delegated), or pass "
		          "--allow-unconfined to run VMs without limits",
		          why);
		r = -EPERM;
		goto fail;
	}
	if (!q->cgroups)
		log_warning("backend qemu: VMMs run without cgroup limits: %s%s", why,
		            q->root ? " (--allow-unconfined)" : "");
	if (q->cgroups) {
		/* the groups of this sandboxd's VMMs sit under one parent named for its uid range,
		 * which no other sandboxd uses: the empty ones there belong to VMMs that ended
		 * while no sandboxd was there to remove them */
		char parent[16];
		int n;
		snprintf(parent, sizeof(parent), "%u", (unsigned)q->uid_base);
		n = cgroup_sweep(parent, NULL, NULL, NULL);
		if (n > 0)
			log_info("backend qemu: removed %d cgroup(s) of VMMs that are gone", n);
	}
	if (qemu_templates_init(q) < 0)
		log_warning("backend qemu: no templates: creates boot cold");
	*ret = &q->b;
	return 0;
fail:
	vm_bundle_done(&q->bundle);
	free(q->vms_dir);
	free(q->qemu_bin);
	free(q->marker);
	free(q);
	return r;
}
