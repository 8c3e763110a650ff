/* fake-backend.c: a backend that boots nothing. It exists only in the test tree, so the
 * daemon, the API and the CLI can be tested without VMs; the binary built with it is called
 * sandboxd-fake and its startup line says "backend fake". The product never links it.
 *
 * Each "VM" is a file <state-dir>/fake/<id> holding "running", "stopped" or "suspended" (its
 * memory saved: a suspend, undone by a resume; status() then says BACKEND_SUSPENDED), so a fake VM
 * outlives a kill -9 of sandboxd the way a real QEMU does, and status() reads it back.
 * Every call is appended to <state-dir>/fake/calls.log, so tests can check what the backend
 * was asked to do (for instance, that a refused create never reached it).
 *
 * Its samples (GET …/metrics) are honest about running nothing: no CPU, memory or network,
 * and for the disk the allocated size of that file.
 *
 * A snapshot (snapshot()) writes layer.qcow2 (and memory.mig for a memory one) into its
 * directory after the boot time; a fork's start (vm_launch.snapshot_dir) needs that layer and
 * logs "fork-from SNAP_ID ID" before its "start ID".
 *
 * Images steer it: "fake/fail-boot" fails to boot, "fake/crash" boots and then dies (after its
 * first boot only, its file kept as "stopped" the way a real crash keeps the layer, so a start
 * brings it back for good), "fake/slow" takes 2 s to boot, "fake/hang" never finishes booting.
 * SANDBOXD_FAKE_BOOT_MS sets the boot time (default 20). Deleting a running VM's file is its
 * VMM vanishing unseen (check() then says it is gone); a file named like a sandbox that no
 * sandbox owns is a stray layer (sweep() removes it).
 *
 * With SANDBOXD_FAKE_AGENT=PATH each booted VM runs PATH (sandbox-guestd) in its test mode on
 * the host, as the user sandboxd runs as, listening on <state-dir>/fake/<id>.agent, and its
 * processes and files are that agent's: real ones, on this machine (a test chooses paths of
 * its own). The boot completes when the agent answers; the agent dies with its VM (its
 * processes too, as in a VM). Like a real VM it outlives sandboxd: its pid is in
 * <state-dir>/fake/<id>.guestd, the next sandboxd connects to it again when it takes the
 * sandbox back (adopt), and it carries the marker SANDBOXD_STATE_DIR=<state-dir> in its
 * environment, as a QEMU does, by which the test harness ends one a test left. Without it the
 * fake has no agent, and processes and files answer 501.
 *
 * A suspend freezes the agent and its processes (SIGSTOP to each) and lets go of the
 * connection, as a VMM's end does; a resume thaws them (SIGCONT) and connects again, so
 * processes carry on as in a VM restored from its memory (the core told the agent to hold
 * them through that session's end). "fake/fail-resume" fails every resume, its state kept. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "agent.h"
#include "backend.h"
#include "log.h"
#include "loop.h"
#include "util.h"

#define AGENT_CONNECT_MS 10000

struct fake {
	char *dir;
	unsigned boot_ms;
	const char *guestd; /* SANDBOXD_FAKE_AGENT, or NULL */
	struct list_node vms;
};

struct fake_vm {
	struct list_node link;
	struct backend *b;
	struct sandbox *sb;
	struct loop_timer timer;
	bool crash_after_boot;
	pid_t guestd; /* its agent process (test mode), or 0 */
	struct agent *agent;
	bool suspended;     /* its agent and processes are frozen (SIGSTOP) */
	char *snapshot_dir; /* a snapshot under way: where it goes, and whether with memory */
	bool snapshot_memory;
};

static struct fake *
priv(struct backend *b)
{
	return b->priv;
}

static void
log_call(struct backend *b, const char *op, const struct sandbox *sb)
{
	_cleanup_free_ char *path = strdup_printf("%s/calls.log", priv(b)->dir);
	_cleanup_free_ char *line = strdup_printf("%s %s\n", op, sb->id);
	int fd;

	if (!path || !line)
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	(void)!write(fd, line, strlen(line));
	close(fd);
}

static char *
vm_path(struct backend *b, const struct sandbox *sb)
{
	return strdup_printf("%s/%s", priv(b)->dir, sb->id);
}

static int
write_state(struct backend *b, const struct sandbox *sb, const char *state)
{
	_cleanup_free_ char *path = vm_path(b, sb);

	return path ? write_file_atomic(path, state, strlen(state), 0600) : -ENOMEM;
}

static char *
guestd_pid_path(struct backend *b, const struct sandbox *sb)
{
	return strdup_printf("%s/%s.guestd", priv(b)->dir, sb->id);
}

/* Sends sig to the processes the agent started (SIGKILL: as a VM's end would): each leads a
 * session of its own (its process group), whose parent is the agent. */
static void
signal_agent_processes(pid_t agent, int sig)
{
	DIR *dir = opendir("/proc");
	struct dirent *e;

	if (!dir)
		return;
	while ((e = readdir(dir))) {
		_cleanup_free_ char *path = strdup_printf("/proc/%s/stat", e->d_name);
		_cleanup_free_ char *stat = NULL;
		const char *p;
		uint64_t pid, ppid;
		size_t n;

		if (!path || parse_u64(e->d_name, &pid) < 0 ||
		    read_file_max(path, 4096, &stat, NULL) < 0)
			continue;
		/* "PID (comm) S PPID ...": the comm may hold anything, so from its last ')' */
		p = strrchr(stat, ')');
		if (!p || strlen(p) < 5)
			continue;
		p += 4;
		n = strcspn(p, " ");
		if (parse_u64_n(p, n, &ppid) < 0 || ppid != (uint64_t)agent)
			continue;
		(void)kill(-(pid_t)pid, sig);
		(void)kill((pid_t)pid, sig);
	}
	closedir(dir);
}

/* Ends a VM's agent: the connection (its requests end with ECONNRESET), then its processes and
 * the agent itself (one an earlier sandboxd started is not our child: nothing to reap). The
 * core let go of the VM's processes before. */
static void
agent_end(struct agent *agent, pid_t pid)
{
	agent_free(agent);
	if (pid > 0) {
		signal_agent_processes(pid, SIGKILL);
		kill(pid, SIGKILL);
		(void)waitpid(pid, NULL, 0); /* SIGKILL cannot be ignored: this is quick */
	}
}

/* The pid of vm's agent: the one it started, else the one an earlier sandboxd recorded (a
 * suspended VM that nobody took back), or 0 (-1: one this sandboxd lets run on). */
static pid_t
vm_guestd(struct fake_vm *vm)
{
	_cleanup_free_ char *pidfile = NULL, *pidtext = NULL;
	uint64_t pid;

	if (vm->guestd || !priv(vm->b)->guestd)
		return vm->guestd;
	pidfile = guestd_pid_path(vm->b, vm->sb);
	if (!pidfile || read_file_max(pidfile, 32, &pidtext, NULL) < 0)
		return 0;
	pidtext[strcspn(pidtext, "\n")] = '\0';
	if (parse_u64(pidtext, &pid) < 0 || pid == 0 || pid > INT32_MAX)
		return 0;
	vm->guestd = (pid_t)pid;
	return vm->guestd;
}

/* Freezes (SIGSTOP) or thaws (SIGCONT) vm's agent and its processes: a suspend's and a
 * resume's. */
static void
vm_freeze(struct fake_vm *vm, bool freeze)
{
	pid_t pid = vm_guestd(vm);

	vm->suspended = freeze;
	if (pid <= 0)
		return;
	if (freeze)
		(void)kill(pid, SIGSTOP);
	signal_agent_processes(pid, freeze ? SIGSTOP : SIGCONT);
	if (!freeze)
		(void)kill(pid, SIGCONT);
}

static void
vm_agent_end(struct fake_vm *vm)
{
	struct agent *agent = TAKE_PTR(vm->agent);
	_cleanup_free_ char *pidfile = guestd_pid_path(vm->b, vm->sb);
	pid_t pid = vm_guestd(vm);

	vm->guestd = 0;
	agent_end(agent, pid);
	if (pid > 0 && pidfile)
		unlink(pidfile);
}

static void
vm_free(struct fake_vm *vm)
{
	if (!vm)
		return;
	vm_agent_end(vm);
	loop_timer_done(&vm->timer);
	list_remove(&vm->link);
	free(vm->snapshot_dir);
	if (vm->sb)
		vm->sb->backend_data = NULL;
	free(vm);
}

static void
agent_ready_cb(struct agent *a _unused_, bool mounted _unused_, const char *version _unused_,
               void *data)
{
	struct fake_vm *vm = data;
	struct backend *b = vm->b;
	struct sandbox *sb = vm->sb;

	if (sb->op == SANDBOX_OP_START || sb->op == SANDBOX_OP_RESTART ||
	    sb->op == SANDBOX_OP_RESUME) {
		backend_done(b, sb, 0, NULL);
		if (vm->crash_after_boot)
			(void)loop_timer_arm(&vm->timer, 300, 0);
	}
	if (sb->state == SANDBOX_RUNNING)
		backend_agent_ready(b, sb);
}

static void
agent_closed_cb(struct agent *a _unused_, const char *reason, void *data)
{
	struct fake_vm *vm = data;
	struct backend *b = vm->b;
	struct sandbox *sb = vm->sb;

	if (sb->op == SANDBOX_OP_START || sb->op == SANDBOX_OP_RESTART ||
	    sb->op == SANDBOX_OP_RESUME) {
		_cleanup_free_ char *why =
		        strdup_printf("the fake VM's agent did not come up (%s)", reason);
		vm_agent_end(vm);
		backend_done(b, sb, -EIO, why ? why : reason);
		return;
	}
	if (sb->state == SANDBOX_RUNNING) {
		_cleanup_free_ char *why =
		        strdup_printf("the fake VM's agent went away (%s)", reason);
		backend_lost(b, sb, why ? why : reason);
		vm_agent_end(vm);
	}
}

static const struct agent_events fake_agent_events = {
	.ready = agent_ready_cb,
	.closed = agent_closed_cb,
};

static int agent_connect_to(struct fake_vm *vm, const char *sock, const struct agent_hello *hello);

/* Runs sandbox-guestd in test mode for vm and connects to it. */
static int
vm_agent_start(struct fake_vm *vm)
{
	struct fake *f = priv(vm->b);
	_cleanup_free_ char *sock = strdup_printf("%s/%s.agent", f->dir, vm->sb->id);
	_cleanup_free_ char *home = strdup_printf("%s/%s.home", f->dir, vm->sb->id);
	char machine_id[SANDBOX_MACHINE_ID_LEN + 1];
	struct agent_hello hello = { .hostname = vm->sb->name ? vm->sb->name : vm->sb->id,
		                     .uid = getuid(),
		                     .gid = getgid(),
		                     .net = "",
		                     .machine_id = machine_id };
	_cleanup_free_ char *pidfile = guestd_pid_path(vm->b, vm->sb);
	_cleanup_free_ char *marker = strdup_printf("SANDBOXD_STATE_DIR=%s", vm->b->cfg.state_dir);
	_cleanup_free_ char *pidtext = NULL;
	_cleanup_free_ char **envp = NULL;
	extern char **environ;
	size_t n = 0;
	pid_t pid;
	int r;

	vm_agent_end(vm);
	if (!sock || !home || !pidfile || !marker)
		return -ENOMEM;
	/* the identity a VM's guest gets (the test-mode agent takes it and changes nothing) */
	sandbox_machine_id(vm->sb->id, machine_id);
	(void)unlink(sock);
	if (mkdir(home, 0700) < 0 && errno != EEXIST)
		return negative_errno();
	hello.home = home;
	/* sandboxd's environment and the marker, built before the fork */
	while (environ[n])
		n++;
	envp = calloc(n + 2, sizeof(*envp));
	if (!envp)
		return -ENOMEM;
	memcpy(envp, environ, n * sizeof(*envp));
	envp[n] = marker;
	pid = fork();
	if (pid < 0)
		return negative_errno();
	if (pid == 0) {
		char *const argv[] = { "sandbox-guestd", "--port", sock, "--home", home, NULL };
		sigset_t none;
		/* an empty signal mask; it outlives sandboxd, as a VM does */
		sigemptyset(&none);
		(void)sigprocmask(SIG_SETMASK, &none, NULL);
		(void)setsid();
		execve(f->guestd, argv, envp);
		_exit(127);
	}
	vm->guestd = pid;
	pidtext = strdup_printf("%d\n", (int)pid);
	if (!pidtext || write_file_atomic(pidfile, pidtext, strlen(pidtext), 0600) < 0)
		log_warning("fake: sandbox '%s': cannot record its agent's pid", vm->sb->id);
	r = agent_connect_to(vm, sock, &hello);
	if (r < 0)
		vm_agent_end(vm);
	return r;
}

/* Connects to the agent of a VM taken back: the one an earlier sandboxd started, if it
 * recorded one (a failure is the lost event, as for a real VM). */
static int
vm_agent_adopt(struct fake_vm *vm)
{
	struct fake *f = priv(vm->b);
	_cleanup_free_ char *sock = strdup_printf("%s/%s.agent", f->dir, vm->sb->id);
	_cleanup_free_ char *home = strdup_printf("%s/%s.home", f->dir, vm->sb->id);
	char machine_id[SANDBOX_MACHINE_ID_LEN + 1];
	_cleanup_free_ char *pidfile = guestd_pid_path(vm->b, vm->sb);
	_cleanup_free_ char *pidtext = NULL;
	struct agent_hello hello = { .hostname = vm->sb->name ? vm->sb->name : vm->sb->id,
		                     .uid = getuid(),
		                     .gid = getgid(),
		                     .net = "",
		                     .machine_id = machine_id };
	uint64_t pid;

	if (!sock || !home || !pidfile)
		return -ENOMEM;
	sandbox_machine_id(vm->sb->id, machine_id);
	if (!f->guestd || read_file_max(pidfile, 32, &pidtext, NULL) < 0 ||
	    (pidtext[strcspn(pidtext, "\n")] = '\0', parse_u64(pidtext, &pid) < 0) || pid == 0 ||
	    pid > INT32_MAX) {
		if (vm->sb->op == SANDBOX_OP_RESUME)
			backend_done(vm->b, vm->sb, 0, NULL);
		return 0; /* no agent: processes and files answer 501 */
	}
	vm->guestd = (pid_t)pid;
	hello.home = home;
	return agent_connect_to(vm, sock, &hello);
}

static int
agent_connect_to(struct fake_vm *vm, const char *sock, const struct agent_hello *hello)
{
	int r;

	r = agent_new(vm->b->cfg.loop, sock, hello, &fake_agent_events, vm, &vm->agent);
	if (r >= 0)
		r = agent_connect(vm->agent, now_mono_ms() + AGENT_CONNECT_MS);
	return r;
}

static struct agent *
fake_agent(struct backend *b _unused_, struct sandbox *sb)
{
	struct fake_vm *vm = sb->backend_data;

	return vm && !vm->suspended ? vm->agent : NULL;
}

/* The resume under way: the VM's memory is restored (its agent and processes thawed), and the
 * resume completes once its agent answers on a new connection (agent_ready_cb). */
static void
resume_now(struct backend *b, struct fake_vm *vm)
{
	struct sandbox *sb = vm->sb;
	int r;

	if (streq(sb->image, "fake/fail-resume")) {
		backend_done(b, sb, -EIO,
		             "the fake VM could not be restored (image fake/fail-resume asks for "
		             "it)");
		return;
	}
	r = write_state(b, sb, "running");
	if (r < 0) {
		backend_done(b, sb, r, "the fake VM could not record its state");
		return;
	}
	vm_freeze(vm, false);
	free(sb->runtime_ref);
	sb->runtime_ref = strdup_printf("fake-%s", sb->id + 4);
	r = vm_agent_adopt(vm);
	if (r < 0)
		backend_done(b, sb, r, "the fake VM's agent could not be reached");
}

/* A snapshot's files: layer.qcow2 (the VM's file, padded to 64 KiB so that it takes blocks),
 * and with memory memory.mig (256 KiB). */
static int
write_snapshot(struct backend *b, struct fake_vm *vm)
{
	_cleanup_free_ char *src = vm_path(b, vm->sb), *state = NULL, *layer = NULL, *mem = NULL;
	_cleanup_free_ char *data = calloc(1, 256u << 10);
	int r;

	if (!src || !data || !vm->snapshot_dir ||
	    !(layer = strdup_printf("%s/layer.qcow2", vm->snapshot_dir)) ||
	    !(mem = strdup_printf("%s/memory.mig", vm->snapshot_dir)))
		return -ENOMEM;
	r = read_file_max(src, 64, &state, NULL);
	if (r < 0)
		return r;
	memset(data, 'x', 256u << 10);
	memcpy(data, state, strlen(state));
	r = write_file_atomic(layer, data, 64u << 10, 0600);
	if (r >= 0 && vm->snapshot_memory)
		r = write_file_atomic(mem, data, 256u << 10, 0600);
	return r;
}

static void
timer_fired(struct loop_timer *t _unused_, void *data)
{
	struct fake_vm *vm = data;
	struct backend *b = vm->b;
	struct sandbox *sb = vm->sb;
	int r;

	(void)loop_timer_arm(&vm->timer, 0, 0);
	if (vm->crash_after_boot && sb->state == SANDBOX_RUNNING) {
		/* its "layer" stays, as a real VMM's does */
		(void)write_state(b, sb, "stopped");
		vm->crash_after_boot = false;
		backend_lost(b, sb, "the fake VM crashed (image fake/crash asks for it)");
		vm_agent_end(vm);
		return;
	}
	switch (sb->op) {
	case SANDBOX_OP_START:
	case SANDBOX_OP_RESTART:
		if (streq(sb->image, "fake/hang"))
			return; /* never done: the reconciler's to find */
		if (streq(sb->image, "fake/fail-boot")) {
			backend_done(b, sb, -EIO,
			             "the fake VM failed to boot (image fake/fail-boot asks for "
			             "it)");
			return;
		}
		r = write_state(b, sb, "running");
		if (r < 0) {
			backend_done(b, sb, r, "the fake VM could not record its state");
			return;
		}
		free(sb->runtime_ref);
		sb->runtime_ref = strdup_printf("fake-%s", sb->id + 4);
		vm->crash_after_boot = streq(sb->image, "fake/crash") && sb->op == SANDBOX_OP_START;
		if (priv(b)->guestd) {
			/* booted once its agent answers (agent_ready_cb) */
			r = vm_agent_start(vm);
			if (r < 0)
				backend_done(b, sb, r, "the fake VM's agent could not start");
			return;
		}
		backend_done(b, sb, 0, NULL);
		if (vm->crash_after_boot)
			(void)loop_timer_arm(&vm->timer, 300, 0);
		return;
	case SANDBOX_OP_STOP:
		/* a suspended one's saved memory goes: its agent ends, frozen or not */
		r = write_state(b, sb, "stopped");
		backend_done(b, sb, r, r < 0 ? "could not record the stop" : NULL);
		vm_agent_end(vm);
		vm->suspended = false;
		return;
	case SANDBOX_OP_SUSPEND:
		r = write_state(b, sb, "suspended");
		if (r < 0) {
			backend_done(b, sb, r, "the fake VM could not record its state");
			return;
		}
		vm_freeze(vm, true);
		vm->agent = agent_free(vm->agent); /* the guest's session ends with its VMM */
		backend_done(b, sb, 0, NULL);
		return;
	case SANDBOX_OP_RESUME:
		resume_now(b, vm);
		return;
	case SANDBOX_OP_SNAPSHOT:
		r = write_snapshot(b, vm);
		backend_done(b, sb, r, r < 0 ? "the fake could not write the snapshot" : NULL);
		return;
	case SANDBOX_OP_DESTROY: {
		_cleanup_free_ char *path = vm_path(b, sb);
		vm_free(vm);
		if (path)
			unlink(path);
		backend_done(b, sb, 0, NULL);
		return;
	}
	default:
		return;
	}
}

static struct fake_vm *
vm_get(struct backend *b, struct sandbox *sb)
{
	struct fake_vm *vm = sb->backend_data;

	if (vm)
		return vm;
	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return NULL;
	vm->b = b;
	vm->sb = sb;
	list_init(&vm->link);
	if (loop_timer_init(b->cfg.loop, &vm->timer, timer_fired, vm) < 0) {
		free(vm);
		return NULL;
	}
	list_push_back(&priv(b)->vms, &vm->link);
	sb->backend_data = vm;
	return vm;
}

static int
schedule(struct backend *b, struct sandbox *sb, const char *op, unsigned ms)
{
	struct fake_vm *vm = vm_get(b, sb);

	if (!vm)
		return -ENOMEM;
	log_call(b, op, sb);
	return loop_timer_arm(&vm->timer, ms ? ms : 1, 0);
}

static unsigned
boot_ms(struct backend *b, const struct sandbox *sb)
{
	return streq(sb->image, "fake/slow") ? 2000 : priv(b)->boot_ms;
}

static int
fake_start(struct backend *b, struct sandbox *sb, const struct vm_launch *l)
{
	if (l->snapshot_dir) {
		/* a fork: its snapshot must be there, and the log says which one it began from */
		_cleanup_free_ char *layer = strdup_printf("%s/layer.qcow2", l->snapshot_dir);
		_cleanup_free_ char *what = NULL;
		const char *base = strrchr(l->snapshot_dir, '/');
		if (!layer)
			return -ENOMEM;
		if (access(layer, R_OK) < 0)
			return negative_errno();
		what = strdup_printf("fork-from %s", base ? base + 1 : l->snapshot_dir);
		if (what)
			log_call(b, what, sb);
	}
	return schedule(b, sb, "start", boot_ms(b, sb));
}

/* Writes a snapshot of sb into dir a moment later (the boot time; fake/slow: 2 s). A stopped
 * one has no memory to save. */
static int
fake_snapshot(struct backend *b, struct sandbox *sb, const char *dir, bool memory)
{
	_cleanup_free_ char *path = vm_path(b, sb), *state = NULL;
	struct fake_vm *vm;

	if (!path)
		return -ENOMEM;
	if (read_file_max(path, 64, &state, NULL) < 0)
		return -ENOENT;
	if (memory && !streq(state, "running") && !streq(state, "suspended"))
		return -EINVAL;
	vm = vm_get(b, sb);
	if (!vm)
		return -ENOMEM;
	free(vm->snapshot_dir);
	vm->snapshot_dir = strdup(dir);
	vm->snapshot_memory = memory;
	if (!vm->snapshot_dir)
		return -ENOMEM;
	return schedule(b, sb, memory ? "snapshot-memory" : "snapshot-disk", boot_ms(b, sb));
}

static int
fake_restart(struct backend *b, struct sandbox *sb, const struct vm_launch *l _unused_)
{
	return schedule(b, sb, "restart", boot_ms(b, sb));
}

static int
fake_stop(struct backend *b, struct sandbox *sb)
{
	return schedule(b, sb, "stop", priv(b)->boot_ms);
}

static int
fake_suspend(struct backend *b, struct sandbox *sb)
{
	return schedule(b, sb, "suspend", priv(b)->boot_ms);
}

static int
fake_resume(struct backend *b, struct sandbox *sb, const struct vm_launch *l _unused_)
{
	return schedule(b, sb, "resume", priv(b)->boot_ms);
}

static int
fake_destroy(struct backend *b, struct sandbox *sb)
{
	/* cancels whatever was under way: the timer now means "destroy" */
	return schedule(b, sb, "destroy", 1);
}

/* A VM taken back: its agent, if it has one, is connected again. */
static int
fake_adopt(struct backend *b, struct sandbox *sb, const struct vm_launch *l _unused_)
{
	struct fake_vm *vm = vm_get(b, sb);

	if (!vm)
		return -ENOMEM;
	log_call(b, "adopt", sb);
	return vm_agent_adopt(vm);
}

static int
fake_status(struct backend *b, struct sandbox *sb, struct backend_found *ret)
{
	_cleanup_free_ char *path = vm_path(b, sb);
	_cleanup_free_ char *state = NULL;
	int r;

	if (!path)
		return -ENOMEM;
	r = read_file_max(path, 64, &state, NULL);
	if (r == -ENOENT) {
		*ret = (struct backend_found){ .status = BACKEND_GONE };
		return 0;
	}
	if (r < 0)
		return r;
	/* it uses no slots and no network */
	*ret = (struct backend_found){ .status = streq(state, "running")     ? BACKEND_RUNNING
		                                 : streq(state, "suspended") ? BACKEND_SUSPENDED
		                                                             : BACKEND_STOPPED };
	log_call(b, "status", sb);
	return 0;
}

/* Ends what runs for sb and cancels what was under way; the file stays, "stopped" if it ran. */
static void
fake_abandon(struct backend *b, struct sandbox *sb)
{
	struct fake_vm *vm = sb->backend_data;
	_cleanup_free_ char *path = vm_path(b, sb), *state = NULL;

	log_call(b, "abandon", sb);
	if (path && read_file_max(path, 64, &state, NULL) == 0 && streq(state, "running"))
		(void)write_state(b, sb, "stopped");
	vm_free(vm);
}

/* A running sandbox's VM is there while its file says so. */
static int
fake_check(struct backend *b, struct sandbox *sb)
{
	_cleanup_free_ char *path = vm_path(b, sb), *state = NULL;

	if (!path)
		return -ENOMEM;
	if (read_file_max(path, 64, &state, NULL) < 0 || !streq(state, "running"))
		return -ESRCH;
	return 0;
}

/* Ends the agent an earlier sandboxd started for a VM that no sandbox owns (a pooled one, which
 * a restart discards), as the sweep of a real VMM ends its guest. */
static void
sweep_agent(struct backend *b, const char *id)
{
	_cleanup_free_ char *pidfile = strdup_printf("%s/%s.guestd", priv(b)->dir, id);
	_cleanup_free_ char *pidtext = NULL;
	uint64_t pid;

	if (!pidfile || read_file_max(pidfile, 32, &pidtext, NULL) < 0)
		return;
	pidtext[strcspn(pidtext, "\n")] = '\0';
	if (parse_u64(pidtext, &pid) == 0 && pid > 0 && pid <= INT32_MAX)
		agent_end(NULL, (pid_t)pid);
	(void)unlink(pidfile);
}

/* The files named like a sandbox's (no suffix) that no sandbox owns, and their agents. */
static void
fake_sweep(struct backend *b)
{
	DIR *d = opendir(priv(b)->dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		struct list_node *it;
		bool mine = false;

		if (!str_has_prefix(de->d_name, "sbx_") || strchr(de->d_name, '.') ||
		    de->d_type != DT_REG)
			continue;
		LIST_FOREACH (it, &priv(b)->vms)
			if (streq(list_entry(it, struct fake_vm, link)->sb->id, de->d_name))
				mine = true;
		if (mine || backend_owns(b, de->d_name))
			continue;
		sweep_agent(b, de->d_name);
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			backend_swept(b, "layer", de->d_name);
	}
	closedir(d);
}

/* A fake VM runs nothing, so it uses no CPU, memory or network: its sample says so, and its
 * disk is the file that stands for it (its allocated blocks, measured like a real layer's). */
static int
fake_sample(struct backend *b, struct sandbox *sb, struct backend_sample *ret)
{
	_cleanup_free_ char *path = vm_path(b, sb);
	struct stat st;

	if (!path)
		return -ENOMEM;
	if (stat(path, &st) < 0)
		return errno == ENOENT ? -ESRCH : negative_errno();
	*ret = (struct backend_sample){ .disk_bytes = (uint64_t)st.st_blocks * 512 };
	return 0;
}

static const char *
fake_describe(struct backend *b _unused_)
{
	return "fake (test only: boots nothing)";
}

static void
fake_caps(struct backend *b, struct backend_caps *ret)
{
	/* it runs no network at all, so every mode up to allowlist is enforced (nothing gets
	 * out): the policy's network rules can be tested against it */
	*ret = (struct backend_caps){ .accel = "none",
		                      .suspend = true,
		                      .egress = NET_ALLOWLIST,
		                      .memory_snapshot = true,
		                      .disk_snapshot = true,
		                      .volumes = true, /* taken and ignored: no guest mounts them */
		                      .processes = priv(b)->guestd != NULL,
		                      .files = priv(b)->guestd != NULL };
}

static void
fake_free(struct backend *b)
{
	struct list_node *n, *tmp;

	/* the VMs still running run on, their agents too, for the next sandboxd to take back
	 * (--keep-sandboxes) */
	LIST_FOREACH_SAFE (n, tmp, &priv(b)->vms) {
		struct fake_vm *vm = list_entry(n, struct fake_vm, link);
		vm->agent = agent_free(vm->agent);
		vm->guestd = -1; /* not this sandboxd's to end */
		vm_free(vm);
	}
	free(priv(b)->dir);
	free(priv(b));
	free(b);
}

static const struct backend_ops fake_ops = {
	.name = "fake",
	.describe = fake_describe,
	.caps = fake_caps,
	.free = fake_free,
	.start = fake_start,
	.restart = fake_restart,
	.stop = fake_stop,
	.destroy = fake_destroy,
	.suspend = fake_suspend,
	.resume = fake_resume,
	.status = fake_status,
	.adopt = fake_adopt,
	.abandon = fake_abandon,
	.snapshot = fake_snapshot,
	.check = fake_check,
	.sweep = fake_sweep,
	.agent = fake_agent,
	.sample = fake_sample,
};

static int
fake_create(const struct backend_config *cfg, struct backend **ret)
{
	struct backend *b = calloc(1, sizeof(*b));
	struct fake *f = calloc(1, sizeof(*f));
	const char *ms = getenv("SANDBOXD_FAKE_BOOT_MS");
	uint64_t n = 20;
	int r;

	if (!b || !f) {
		free(b);
		free(f);
		return -ENOMEM;
	}
	if (ms && parse_u64(ms, &n) < 0)
		n = 20;
	f->boot_ms = (unsigned)MIN(n, 60000u);
	f->guestd = getenv("SANDBOXD_FAKE_AGENT");
	if (f->guestd && !*f->guestd)
		f->guestd = NULL;
	list_init(&f->vms);
	f->dir = strdup_printf("%s/fake", cfg->state_dir);
	if (!f->dir || (r = mkdir_p(f->dir, 0700)) < 0) {
		free(f->dir);
		free(f);
		free(b);
		return -ENOMEM;
	}
	b->ops = &fake_ops;
	b->cfg = *cfg;
	b->priv = f;
	log_warning("backend fake: this is the test-only fake backend; it boots nothing");
	*ret = b;
	return 0;
}

const struct backend_entry backend_table[] = {
	{ .name = "fake", .create = fake_create },
};
const size_t backend_table_size = 1;
