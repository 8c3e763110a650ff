/* test-vm-suspend-backend.c: the QEMU backend's suspend, resume, snapshots and forks on real
 * microVMs, driven directly through its operations (backend.h) as the core drives them: no
 * daemon, no API. A counting process in the guest shows what a user would notice: it carries
 * on after a suspend and a resume (its memory came back), while no QEMU ran in between; a
 * second VM started from a memory snapshot of the first has the same process, counting on
 * from where the snapshot took it. A backend created anew (sandboxd restarted) still finds
 * the suspended sandbox suspended; a stop of a suspended sandbox drops its memory and keeps
 * its disk; a VM started from a disk snapshot boots the files it had, without the process.
 *
 * SBX_TEST_MEMORY_MB (default 256) sets the guests' memory; the times each operation took
 * are printed for the record. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "agent.h"
#include "backend.h"
#include "harness.h"
#include "loop.h"
#include "qemu.h"
#include "sandbox.h"
#include "util.h"

#define ID_A "sbx_5e5e000000000001"
#define ID_B "sbx_5e5e000000000002"
#define ID_C "sbx_5e5e000000000003"
#define OP_SECS 180

struct fixture {
	char dir[256], state[300];
	struct loop *loop;
	struct backend *b;
	struct backend_config cfg;
	int done, lost, ready;
	int error;
	char reason[1024];
	unsigned memory_mb;
};

static struct fixture F;

/* backend.c's list: this program links the product's one backend */
const struct backend_entry backend_table[] = { { "qemu", qemu_backend_create } };
const size_t backend_table_size = ARRAY_SIZE(backend_table);

static void
on_done(void *ctx, struct sandbox *sb, int error, const char *reason)
{
	struct fixture *f = ctx;

	f->done++;
	f->error = error;
	snprintf(f->reason, sizeof(f->reason), "%s", reason ? reason : "");
	sb->op = SANDBOX_OP_NONE;
}

static void
on_ready(void *ctx, struct sandbox *sb _unused_)
{
	((struct fixture *)ctx)->ready++;
}

static void
on_lost(void *ctx, struct sandbox *sb, const char *reason)
{
	struct fixture *f = ctx;

	f->lost++;
	print_error("lost %s: %s\n", sb->id, reason);
}

static bool
on_owns(void *ctx _unused_, const char *id _unused_)
{
	return true;
}

static void
on_swept(void *ctx _unused_, const char *what, const char *name)
{
	print_error("swept %s %s\n", what, name);
}

static const struct backend_events events = {
	.done = on_done,
	.agent_ready = on_ready,
	.lost = on_lost,
	.owns = on_owns,
	.swept = on_swept,
};

static void
backend_up(struct fixture *f)
{
	f->cfg = (struct backend_config){ .loop = f->loop,
		                          .events = &events,
		                          .ctx = f,
		                          .state_dir = f->state,
		                          .accel = "tcg",
		                          .boot_timeout_secs = 120,
		                          .stop_timeout_secs = 10,
		                          .allow_unconfined = true };
	assert_int_equal(qemu_backend_create(&f->cfg, &f->b), 0);
}

static int
setup(void **state _unused_)
{
	const char *bundle = harness_vm_bundle();
	const char *mem = getenv("SBX_TEST_MEMORY_MB");
	char cmd[2400];

	uint64_t mb = 256;

	if (mem && parse_u64(mem, &mb) < 0)
		return -1;
	F.memory_mb = (unsigned)mb;
	if (harness_tmpdir(F.dir, sizeof(F.dir)) < 0)
		return -1;
	snprintf(F.state, sizeof(F.state), "%s/state", F.dir);
	snprintf(cmd, sizeof(cmd),
	         "mkdir -m 0700 '%s' '%s/snap1' '%s/snap2' '%s/snap3' && cp -al '%s/vm' '%s/vm' "
	         "&& cp -al '%s/images' '%s/images'",
	         F.state, F.dir, F.dir, F.dir, bundle, F.state, bundle, F.state);
	if (system(cmd) != 0)
		return -1;
	if (loop_new(&F.loop) < 0)
		return -1;
	backend_up(&F);
	return 0;
}

static int
teardown(void **state _unused_)
{
	char cmd[400];

	if (F.b)
		backend_free(F.b);
	(void)harness_kill_vmms(F.state);
	loop_free(F.loop);
	if (!getenv("HARNESS_KEEP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", F.dir);
		(void)system(cmd);
	}
	return 0;
}

/* Runs the loop until the operation under way completed, whether it failed or not. */
static void
wait_any(struct fixture *f, int before)
{
	uint64_t start = now_mono_ms();

	while (f->done == before) {
		if (now_mono_ms() - start > OP_SECS * 1000ull)
			fail_msg("no done within %d s", OP_SECS);
		(void)loop_run_once(f->loop, 100);
	}
}

/* Runs the loop until the operation under way completed; returns the seconds it took. */
static double
wait_done(struct fixture *f, int before)
{
	uint64_t start = now_mono_ms();

	wait_any(f, before);
	if (f->error)
		fail_msg("the operation failed: %s (%s)", strerror(-f->error), f->reason);
	return (double)(now_mono_ms() - start) / 1000.0;
}

static void
spin_ms(struct fixture *f, unsigned ms)
{
	uint64_t end = now_mono_ms() + ms;

	while (now_mono_ms() < end)
		(void)loop_run_once(f->loop, 50);
}

static struct vm_launch
launch_of(const struct fixture *f, const char *id, const char *hostname, unsigned slot,
          char *rootfs)
{
	snprintf(rootfs, 400, "%s/images/busybox/rootfs.ext4", f->state);
	return (struct vm_launch){ .id = id,
		                   .hostname = hostname,
		                   .root_disk = rootfs,
		                   .cpus = 1,
		                   .memory_mb = f->memory_mb,
		                   .disk_mb = 1024,
		                   .slot = slot,
		                   .net = { .tap_fd = -1 },
		                   .machine_id = "0123456789abcdef0123456789abcdef" };
}

static struct sandbox *
sandbox_of(const char *id)
{
	struct sandbox *sb = sandbox_new();

	assert_non_null(sb);
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	return sb;
}

struct answer {
	bool done;
	int err;
	uint32_t pid;
	char text[256];
	size_t len;
};

static void
answered(void *data, const struct agent_result *res)
{
	struct answer *a = data;

	a->done = true;
	a->err = res->err;
	a->pid = res->pid;
}

static void
chunk(void *data, const void *bytes, size_t len)
{
	struct answer *a = data;

	len = MIN(len, sizeof(a->text) - 1 - a->len);
	memcpy(a->text + a->len, bytes, len);
	a->len += len;
	a->text[a->len] = '\0';
}

static void
wait_answer(struct fixture *f, struct answer *a)
{
	uint64_t start = now_mono_ms();

	while (!a->done) {
		if (now_mono_ms() - start > 60000)
			fail_msg("the agent did not answer");
		(void)loop_run_once(f->loop, 100);
	}
}

static struct agent *
agent_of(struct fixture *f, struct sandbox *sb)
{
	struct agent *a = f->b->ops->agent(f->b, sb);

	assert_non_null(a);
	return a;
}

/* Starts the counter: a kept process that writes 1, 2, 3, ... to ~/count every second. */
static void
start_counter(struct fixture *f, struct sandbox *sb)
{
	static char *const argv[] = { "/bin/sh", "-c",
		                      "i=0; while :; do i=$((i+1)); echo $i > count.tmp; "
		                      "mv count.tmp count; sleep 1; done",
		                      NULL };
	struct agent_exec_spec spec = { .argv = argv, .keep = true };
	struct answer a = { 0 };

	assert_non_null(agent_exec(agent_of(f, sb), &spec, answered, &a));
	wait_answer(f, &a);
	assert_int_equal(a.err, 0);
}

/* The counter's value now (0: not there yet). */
static long
counter(struct fixture *f, struct sandbox *sb)
{
	struct answer a = { 0 };
	uint64_t v = 0;

	assert_non_null(
	        agent_read_file(agent_of(f, sb), "/sandbox/home/count", 64, chunk, answered, &a));
	wait_answer(f, &a);
	a.text[strcspn(a.text, "\n")] = '\0';
	return a.err || parse_u64(a.text, &v) < 0 ? 0 : (long)v;
}

/* Waits until the counter of sb passes above. */
static long
counter_passes(struct fixture *f, struct sandbox *sb, long above)
{
	long v = 0;

	for (int i = 0; i < 60; i++) {
		v = counter(f, sb);
		if (v > above)
			return v;
		spin_ms(f, 1000);
	}
	fail_msg("the counter of %s stayed at %ld (wanted above %ld)", sb->id, v, above);
	abort();
}

static pid_t
vmm_pid(const struct fixture *f, const char *id)
{
	char path[400];
	_cleanup_free_ char *text = NULL;
	json_t *j;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/vms/%s/vm.json", f->state, id);
	assert_int_equal(read_file_max(path, 4096, &text, NULL), 0);
	j = json_loads(text, 0, NULL);
	assert_non_null(j);
	pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
	json_decref(j);
	assert_true(pid > 1);
	return pid;
}

static bool exists(const char *fmt, ...) _printf_(1, 2);

static bool
exists(const char *fmt, ...)
{
	char path[600];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	return access(path, F_OK) == 0;
}

static long long size_of(const char *fmt, ...) _printf_(1, 2);

static long long
size_of(const char *fmt, ...)
{
	char path[600];
	struct stat st;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static enum backend_status
status_of(struct fixture *f, struct sandbox *sb)
{
	struct backend_found found;

	assert_int_equal(f->b->ops->status(f->b, sb, &found), 0);
	return found.status;
}

static void
test_suspend_resume_snapshot_fork(void **state _unused_)
{
	struct fixture *f = &F;
	struct backend_caps caps;
	char root_a[400], root_b[400], root_c[400], snap1[300], snap2[300], snap3[300];
	struct vm_launch la = launch_of(f, ID_A, "alpha", 1, root_a);
	struct vm_launch lb = launch_of(f, ID_B, "beta", 2, root_b);
	struct vm_launch lc = launch_of(f, ID_C, "gamma", 3, root_c);
	_cleanup_(sandbox_freep) struct sandbox *a = sandbox_of(ID_A);
	_cleanup_(sandbox_freep) struct sandbox *b = sandbox_of(ID_B);
	_cleanup_(sandbox_freep) struct sandbox *c = sandbox_of(ID_C);
	double t;
	long v, before;
	pid_t pid;
	int n;

	snprintf(snap1, sizeof(snap1), "%s/snap1", f->dir);
	snprintf(snap2, sizeof(snap2), "%s/snap2", f->dir);
	snprintf(snap3, sizeof(snap3), "%s/snap3", f->dir);
	f->b->ops->caps(f->b, &caps);
	assert_true(caps.suspend && caps.memory_snapshot && caps.disk_snapshot);

	/* a boots; its counter runs */
	n = f->done;
	a->op = SANDBOX_OP_START;
	assert_int_equal(f->b->ops->start(f->b, a, &la), 0);
	t = wait_done(f, n);
	print_message("boot (%u MiB): %.1f s\n", f->memory_mb, t);
	start_counter(f, a);
	before = counter_passes(f, a, 2);

	/* suspended: no QEMU, its state on disk, and status says so (also to a backend created
	 * anew, as after a restart of sandboxd) */
	pid = vmm_pid(f, ID_A);
	n = f->done;
	a->op = SANDBOX_OP_SUSPEND;
	assert_int_equal(f->b->ops->suspend(f->b, a), 0);
	t = wait_done(f, n);
	print_message("suspend (%u MiB): %.2f s, state %lld bytes\n", f->memory_mb, t,
	              size_of("%s/vms/%s/state.mig", f->state, ID_A));
	assert_true(kill(pid, 0) < 0 && errno == ESRCH);
	assert_true(exists("%s/vms/%s/state.mig", f->state, ID_A));
	assert_false(exists("%s/vms/%s/state.mig.tmp", f->state, ID_A));
	assert_null(f->b->ops->agent(f->b, a));
	assert_int_equal(status_of(f, a), BACKEND_SUSPENDED);
	backend_free(f->b);
	a->backend_data = NULL;
	backend_up(f);
	assert_int_equal(status_of(f, a), BACKEND_SUSPENDED);

	/* resumed: the same process counts on from where it was (a boot would have none) */
	n = f->done;
	a->op = SANDBOX_OP_RESUME;
	assert_int_equal(f->b->ops->resume(f->b, a, &la), 0);
	t = wait_done(f, n);
	print_message("resume (%u MiB): %.2f s\n", f->memory_mb, t);
	assert_false(exists("%s/vms/%s/state.mig", f->state, ID_A));
	assert_int_equal(status_of(f, a), BACKEND_RUNNING);
	v = counter(f, a);
	assert_true(v >= before);
	before = counter_passes(f, a, v);

	/* a memory snapshot of the running a: it carries on */
	n = f->done;
	a->op = SANDBOX_OP_SNAPSHOT;
	assert_int_equal(f->b->ops->snapshot(f->b, a, snap1, true), 0);
	t = wait_done(f, n);
	print_message("memory snapshot (%u MiB): %.2f s\n", f->memory_mb, t);
	assert_true(exists("%s/layer.qcow2", snap1));
	assert_true(exists("%s/memory.mig", snap1));
	assert_false(exists("%s/memory.mig.tmp", snap1));
	before = counter(f, a);
	counter_passes(f, a, before);

	/* b starts from it: the counter is there, running, from the snapshot's count on */
	n = f->done;
	b->op = SANDBOX_OP_START;
	lb.snapshot_dir = snap1;
	assert_int_equal(f->b->ops->start(f->b, b, &lb), 0);
	t = wait_done(f, n);
	print_message("fork (%u MiB): %.2f s\n", f->memory_mb, t);
	v = counter(f, b);
	assert_true(v > 0);
	counter_passes(f, b, v);
	/* the snapshot is the parent's, not used up */
	assert_true(exists("%s/memory.mig", snap1));

	/* a suspended b: a snapshot copies its state; a stop drops it and keeps the disk */
	n = f->done;
	b->op = SANDBOX_OP_SUSPEND;
	assert_int_equal(f->b->ops->suspend(f->b, b), 0);
	wait_done(f, n);
	n = f->done;
	b->op = SANDBOX_OP_SNAPSHOT;
	assert_int_equal(f->b->ops->snapshot(f->b, b, snap2, true), 0);
	wait_done(f, n);
	assert_true(exists("%s/layer.qcow2", snap2));
	assert_true(exists("%s/memory.mig", snap2));
	assert_int_equal(status_of(f, b), BACKEND_SUSPENDED);
	/* a state that cannot be restored: the resume fails, and the state is kept (a retry,
	 * or a stop, is the core's to choose) */
	{
		char path[600];
		long long size = size_of("%s/vms/%s/state.mig", f->state, ID_B);
		snprintf(path, sizeof(path), "%s/vms/%s/state.mig", f->state, ID_B);
		assert_true(size > 0);
		assert_int_equal(truncate(path, size / 2), 0);
	}
	n = f->done;
	b->op = SANDBOX_OP_RESUME;
	assert_int_equal(f->b->ops->resume(f->b, b, &lb), 0);
	wait_any(f, n);
	assert_int_equal(f->error, -EIO);
	print_message("a resume of a cut state fails: %s\n", f->reason);
	assert_true(exists("%s/vms/%s/state.mig", f->state, ID_B));
	assert_int_equal(status_of(f, b), BACKEND_SUSPENDED);
	n = f->done;
	b->op = SANDBOX_OP_STOP;
	assert_int_equal(f->b->ops->stop(f->b, b), 0);
	wait_done(f, n);
	assert_false(exists("%s/vms/%s/state.mig", f->state, ID_B));
	assert_int_equal(status_of(f, b), BACKEND_STOPPED);
	/* stopped: a disk snapshot only */
	assert_int_equal(f->b->ops->snapshot(f->b, b, snap2, true), -EINVAL);

	/* a disk snapshot of the running a: its layer only; c boots it, and has the file the
	 * counter wrote, which no process changes there */
	n = f->done;
	a->op = SANDBOX_OP_SNAPSHOT;
	assert_int_equal(f->b->ops->snapshot(f->b, a, snap3, false), 0);
	t = wait_done(f, n);
	print_message("disk snapshot: %.2f s\n", t);
	assert_true(exists("%s/layer.qcow2", snap3));
	assert_false(exists("%s/memory.mig", snap3));
	counter_passes(f, a, counter(f, a));
	n = f->done;
	c->op = SANDBOX_OP_START;
	lc.snapshot_dir = snap3;
	assert_int_equal(f->b->ops->start(f->b, c, &lc), 0);
	wait_done(f, n);
	v = counter(f, c);
	assert_true(v > 0);
	spin_ms(f, 2500);
	assert_int_equal(counter(f, c), v);

	/* all go, all of them */
	n = f->done;
	assert_int_equal(f->b->ops->destroy(f->b, a), 0);
	wait_done(f, n);
	n = f->done;
	assert_int_equal(f->b->ops->destroy(f->b, c), 0);
	wait_done(f, n);
	assert_false(exists("%s/vms/%s", f->state, ID_C));
	n = f->done;
	assert_int_equal(f->b->ops->destroy(f->b, b), 0);
	wait_done(f, n);
	assert_false(exists("%s/vms/%s", f->state, ID_A));
	assert_false(exists("%s/vms/%s", f->state, ID_B));
	assert_int_equal(f->lost, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_suspend_resume_snapshot_fork),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
