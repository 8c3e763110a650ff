/* qemu-state.c: a VM's memory and device state saved and restored (backend.h: suspend,
 * resume, snapshot, and a start from a snapshot), through QEMU's migration stream in a file.
 *
 * The VMM runs jailed, as a uid of its own, and may not spawn anything (-sandbox spawn=deny):
 * sandboxd opens the files and hands QEMU descriptors. Outgoing, the descriptor goes over the
 * monitor (getfd, SCM_RIGHTS) and `migrate uri=fd:NAME` writes the stream to it; incoming, a
 * new QEMU starts with the stream at QEMU_FD_INCOMING and -incoming (qemu-argv.c), restores
 * it, and runs the guest (the stream holds no run state, so it does not stay paused).
 *
 * Suspend: stop, migrate to <vm>/state.mig.tmp, wait for query-migrate to say completed, sync
 * the file, quit; once QEMU exited, state.mig.tmp becomes state.mig and the VM is suspended (no
 * process; its layer and state.mig kept: status() says BACKEND_SUSPENDED, also after a restart
 * of sandboxd). A suspend that fails lets the guest carry on (cont) and reports the error.
 * Resume boots a QEMU that restores state.mig (vm_boot with from.stream) and completes when
 * the agent answered a new handshake (clock, entropy, identity, network: the guest applies
 * them again); qemu.c removes state.mig then.
 *
 * Snapshot of a running VM: stop, with memory migrate to <snap>/memory.mig, copy upper.qcow2
 * to <snap>/layer.qcow2 while the guest is paused (both are then of one instant), cont. Of a
 * stopped VM: its layer. Of a suspended one: its layer and a copy of state.mig. A start from a
 * snapshot (a fork) copies layer.qcow2 as its own layer and restores memory.mig when there is
 * one, else boots that layer. */
#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include "log.h"
#include "qemu-vm.h"
#include "util.h"

#define SAVE_POLL_MS 50
#define SAVE_TIMEOUT_MS 300000 /* the stream of a paused guest goes at disk speed */
#define SAVE_QUIT_MS 5000      /* after quit (the state is safe): then SIGKILL */
#define SAVE_FD_NAME "sbxsave"
#define RECOVERY_MS 10000 /* for the monitor of a VM taken back to answer */

struct vm_save {
	struct vm *vm;
	struct qmp *qmp;
	struct loop_timer timer; /* query-migrate polls, then the wait for QEMU's exit */
	uint64_t deadline;       /* CLOCK_MONOTONIC ms */
	bool suspend;            /* else a snapshot */
	bool memory;             /* a stream is written */
	bool paused;             /* the guest was stopped by this save */
	bool migrating;          /* migrate was accepted */
	bool migrated;           /* the stream is complete and synced */
	bool ending;             /* cont (or quit) is on its way: only its answer matters now */
	bool recovery;           /* no operation: a save an earlier sandboxd left is undone */
	int fd;                  /* the stream's file, -1 */
	char *tmp, *stream;      /* the stream is written as tmp, renamed to stream at the end */
	char *layer;             /* a snapshot's copy of the layer */
	int error;               /* a failure to report once the guest runs again */
	char reason[256];
};

bool
vm_has_state(const struct vm *vm)
{
	_cleanup_free_ char *path = vm_path(vm, VM_STATE_FILE);

	return path && access(path, F_OK) == 0;
}

/* The directory part of path, synced: a rename in it is then durable. */
static void
sync_parent(const char *path)
{
	_cleanup_free_ char *dir = strdup(path);
	char *slash = dir ? strrchr(dir, '/') : NULL;

	if (slash) {
		*slash = '\0';
		fsync_dir(dir);
	}
}

int
qemu_copy_file(const char *from, const char *to)
{
	_cleanup_free_ char *tmp = strdup_printf("%s.tmp", to);
	_cleanup_close_ int in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_close_ int out = -1;
	struct stat st;
	int r = 0;

	if (!tmp)
		return -ENOMEM;
	if (in < 0 || fstat(in, &st) < 0)
		return negative_errno();
	(void)unlink(tmp);
	out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0)
		return negative_errno();
	/* a reflink shares the blocks (btrfs, xfs): instant, and no space until they differ */
	if (ioctl(out, FICLONE, in) < 0) {
		for (off_t done = 0; r == 0 && done < st.st_size;) {
			ssize_t n = copy_file_range(in, NULL, out, NULL,
			                            (size_t)(st.st_size - done), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EXDEV || errno == EOPNOTSUPP || errno == ENOSYS ||
			              errno == EINVAL)) {
				/* across filesystems: through a buffer */
				char chunk[65536];
				int w;
				n = read(in, chunk, sizeof(chunk));
				if (n > 0 && (w = write_all(out, chunk, (size_t)n)) < 0) {
					r = w;
					break;
				}
			}
			if (n < 0)
				r = negative_errno();
			else if (n == 0)
				r = -EIO; /* it shrank under us */
			else
				done += n;
		}
	}
	if (r == 0 && fsync(out) < 0)
		r = negative_errno();
	if (r == 0 && rename(tmp, to) < 0)
		r = negative_errno();
	if (r < 0) {
		(void)unlink(tmp);
		return r;
	}
	sync_parent(to);
	return 0;
}

/* ---- a save under way ---- */

static void
save_free(struct vm_save *s)
{
	s->qmp = qmp_free(s->qmp);
	loop_timer_done(&s->timer);
	s->fd = safe_close(s->fd);
	if (s->tmp)
		(void)unlink(s->tmp); /* a stream that did not become the state */
	free(s->tmp);
	free(s->stream);
	free(s->layer);
	/* its timer may be in the loop's current batch: free after it */
	if (loop_defer(s->vm->q->b.cfg.loop, free, s) < 0)
		free(s);
}

void
vm_save_free(struct vm *vm)
{
	if (vm->save)
		save_free(vm->save);
	vm->save = NULL;
}

/* The save is over and the guest runs (or never stopped): reports it and lets go. */
static void
save_report(struct vm_save *s)
{
	struct vm *vm = s->vm;
	struct sandbox *sb = vm->sb;
	int error = s->error;
	char reason[sizeof(s->reason)];

	snprintf(reason, sizeof(reason), "%s", s->reason);
	if (vm->phase == VM_SUSPENDING)
		vm->phase = VM_RUNNING; /* a suspend that failed: the guest carries on */
	if (error)
		log_warning("sandbox '%s': %s failed: %s", sb->id,
		            s->suspend ? "suspending" : "a snapshot", reason);
	vm_save_free(vm);
	backend_done(&vm->q->b, sb, error, error ? reason : NULL);
}

static void
cont_answered(void *data, const json_t *ret _unused_, const char *err)
{
	struct vm_save *s = data;

	if (err) {
		/* a guest left paused would hang: it is lost instead */
		struct vm *vm = s->vm;
		snprintf(s->reason, sizeof(s->reason),
		         "QEMU would not let the guest carry on: %.200s", err);
		vm_fail(vm, "%s", s->reason);
		return;
	}
	save_report(s);
}

static void
ignore_answer(void *data _unused_, const json_t *ret _unused_, const char *err _unused_)
{
}

/* Until polling starts (stop, getfd, migrate) or after cont was sent: a monitor that does not
 * answer leaves the guest paused for good, so the VM is lost. */
static void
save_timeout(struct loop_timer *t _unused_, void *data)
{
	struct vm_save *s = data;

	vm_fail(s->vm, "its monitor stopped answering while its state was saved");
}

/* Ends the save with error (0: the snapshot is written) once the guest runs again: a migration
 * under way is cancelled, a paused guest continued. */
static void save_end(struct vm_save *s, int error, const char *fmt, ...) _printf_(3, 4);

static void
save_end(struct vm_save *s, int error, const char *fmt, ...)
{
	va_list ap;

	s->error = error;
	s->reason[0] = '\0';
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(s->reason, sizeof(s->reason), fmt, ap);
		va_end(ap);
	}
	s->ending = true;
	s->timer.fn = save_timeout;
	(void)loop_timer_arm(&s->timer, SAVE_QUIT_MS, 0);
	if (s->migrating && !s->migrated)
		(void)qmp_execute(s->qmp, "migrate_cancel", NULL, ignore_answer, s);
	if (!s->paused) {
		save_report(s);
		return;
	}
	if (qmp_execute(s->qmp, "cont", NULL, cont_answered, s) < 0)
		vm_fail(s->vm, "its monitor went away while its state was saved");
}

/* The stream and the layer of a snapshot of a running VM, the guest still paused. */
static void
snapshot_write(struct vm_save *s)
{
	struct vm *vm = s->vm;
	_cleanup_free_ char *upper = vm_path(vm, "upper.qcow2");
	int r;

	r = upper ? qemu_copy_file(upper, s->layer) : -ENOMEM;
	if (r < 0) {
		save_end(s, r, "copying its layer: %s", strerror(-r));
		return;
	}
	if (s->memory && rename(s->tmp, s->stream) < 0) {
		r = negative_errno();
		save_end(s, r, "keeping its memory: %s", strerror(-r));
		return;
	}
	if (s->memory) {
		sync_parent(s->stream);
		free(s->tmp);
		s->tmp = NULL;
	}
	save_end(s, 0, NULL);
}

static void
quit_timeout(struct loop_timer *t _unused_, void *data)
{
	struct vm_save *s = data;

	/* the state is saved: the process may go any way */
	log_warning("sandbox '%s': QEMU did not quit after saving its state; killing it",
	            s->vm->sb->id);
	if (s->vm->pid > 0)
		kill(s->vm->pid, SIGKILL);
}

/* The stream is complete: sync it, then quit (suspend) or copy the layer (snapshot). */
static void
save_migrated(struct vm_save *s)
{
	int r = 0;

	if (fsync(s->fd) < 0)
		r = negative_errno();
	s->fd = safe_close(s->fd);
	if (r < 0) {
		save_end(s, r, "writing its state: %s", strerror(-r));
		return;
	}
	s->migrated = true;
	if (!s->suspend) {
		snapshot_write(s);
		return;
	}
	/* QEMU's exit completes the suspend (vm_save_exited) */
	s->ending = true;
	s->timer.fn = quit_timeout;
	(void)loop_timer_arm(&s->timer, SAVE_QUIT_MS, 0);
	if (qmp_execute(s->qmp, "quit", NULL, ignore_answer, s) < 0)
		kill(s->vm->pid, SIGKILL);
}

static void
migrate_polled(void *data, const json_t *ret, const char *err)
{
	struct vm_save *s = data;
	const char *status = json_string_value(json_object_get(ret, "status"));

	if (s->ending)
		return;
	if (err || !status) {
		save_end(s, -EIO, "query-migrate: %.200s", err ? err : "no status");
		return;
	}
	if (streq(status, "completed")) {
		save_migrated(s);
		return;
	}
	if (streq(status, "failed") || streq(status, "cancelled")) {
		const char *desc = json_string_value(json_object_get(ret, "error-desc"));
		s->migrating = false;
		save_end(s, -EIO, "QEMU could not save its state: %.200s", desc ? desc : status);
		return;
	}
	if (now_mono_ms() > s->deadline) {
		save_end(s, -ETIMEDOUT, "saving its state took longer than %d s",
		         SAVE_TIMEOUT_MS / 1000);
		return;
	}
	(void)loop_timer_arm(&s->timer, SAVE_POLL_MS, 0);
}

static void
poll_migrate(struct loop_timer *t _unused_, void *data)
{
	struct vm_save *s = data;

	if (!s->ending && qmp_execute(s->qmp, "query-migrate", NULL, migrate_polled, s) < 0)
		save_end(s, -EIO, "its monitor went away");
}

static void
migrate_answered(void *data, const json_t *ret _unused_, const char *err)
{
	struct vm_save *s = data;

	if (err) {
		save_end(s, -EIO, "migrate: %.200s", err);
		return;
	}
	s->migrating = true;
	s->timer.fn = poll_migrate;
	(void)loop_timer_arm(&s->timer, SAVE_POLL_MS, 0);
}

static void
getfd_answered(void *data, const json_t *ret _unused_, const char *err)
{
	struct vm_save *s = data;

	if (err) {
		save_end(s, -EIO, "getfd: %.200s", err);
		return;
	}
	if (qmp_execute(s->qmp, "migrate", json_pack("{s:s}", "uri", "fd:" SAVE_FD_NAME),
	                migrate_answered, s) < 0)
		save_end(s, -EIO, "its monitor went away");
}

static void
stop_answered(void *data, const json_t *ret _unused_, const char *err)
{
	struct vm_save *s = data;
	int r;

	if (err) {
		save_end(s, -EIO, "stop: %.200s", err);
		return;
	}
	s->paused = true;
	if (!s->memory) {
		/* a disk snapshot: the paused guest's writes are on its layer (stop flushes) */
		snapshot_write(s);
		return;
	}
	s->fd = open(s->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (s->fd < 0) {
		r = negative_errno();
		save_end(s, r, "%s: %s", s->tmp, strerror(-r));
		return;
	}
	/* no bandwidth limit (QEMU's default is 32 MiB/s): the guest is paused anyway */
	(void)qmp_execute(s->qmp, "migrate-set-parameters",
	                  json_pack("{s:I}", "max-bandwidth", (json_int_t)1 << 40), ignore_answer,
	                  s);
	r = qmp_execute_fd(s->qmp, "getfd", json_pack("{s:s}", "fdname", SAVE_FD_NAME), s->fd,
	                   getfd_answered, s);
	if (r < 0)
		save_end(s, r, "getfd: %s", strerror(-r));
}

static void
save_qmp_ready(struct qmp *m, void *data)
{
	struct vm_save *s = data;

	/* a template's clone restored with x-ignore-shared, which the stream would carry: its
	 * RAM is its own (private), all of it is saved, and the restore expects it off */
	(void)qmp_execute(m, "migrate-set-capabilities",
	                  json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability",
	                            "x-ignore-shared", "state", 0),
	                  ignore_answer, s);
	if (qmp_execute(m, "stop", NULL, stop_answered, s) < 0)
		save_end(s, -EIO, "its monitor went away");
}

static void
save_qmp_closed(struct qmp *m _unused_, void *data)
{
	struct vm_save *s = data;

	/* QEMU closes its monitor as it quits (a suspend): its exit says the rest */
	if (s->suspend && s->migrated)
		return;
	/* without a monitor, a paused guest cannot be continued: the VM is lost */
	vm_fail(s->vm, "its monitor closed while its state was saved");
}

/* Starts saving a running VM: a suspend, or a snapshot into dir. */
static int
save_begin(struct vm *vm, bool suspend, bool memory, const char *dir)
{
	_cleanup_free_ char *sock = vm_path(vm, "qmp.sock");
	struct vm_save *s = calloc(1, sizeof(*s));
	int r;

	if (!s || !sock) {
		free(s);
		return -ENOMEM;
	}
	s->vm = vm;
	s->fd = -1;
	s->suspend = suspend;
	s->memory = memory;
	s->deadline = now_mono_ms() + SAVE_TIMEOUT_MS;
	if (suspend) {
		s->stream = vm_path(vm, VM_STATE_FILE);
		s->tmp = vm_path(vm, VM_STATE_FILE ".tmp");
	} else {
		s->layer = strdup_printf("%s/layer.qcow2", dir);
		if (memory) {
			s->stream = strdup_printf("%s/memory.mig", dir);
			s->tmp = strdup_printf("%s/memory.mig.tmp", dir);
		}
	}
	if ((suspend || memory) && (!s->stream || !s->tmp))
		r = -ENOMEM;
	else if (!suspend && !s->layer)
		r = -ENOMEM;
	else
		r = loop_timer_init(vm->q->b.cfg.loop, &s->timer, save_timeout, s);
	if (r < 0) {
		free(s->stream);
		free(s->tmp);
		free(s->layer);
		free(s);
		return r;
	}
	vm->save = s;
	r = qmp_new(vm->q->b.cfg.loop, sock, save_qmp_ready, save_qmp_closed, s, &s->qmp);
	if (r < 0) {
		free(s->tmp);
		s->tmp = NULL; /* nothing written: nothing to remove */
		vm_save_free(vm);
		return r;
	}
	(void)loop_timer_arm(&s->timer, SAVE_TIMEOUT_MS, 0);
	if (suspend)
		vm->phase = VM_SUSPENDING;
	return 0;
}

bool
vm_save_exited(struct vm *vm, const char *how)
{
	struct vm_save *s = vm->save;
	struct sandbox *sb = vm->sb;
	int r = 0;

	if (!s->suspend || !s->migrated)
		return false;
	/* suspended: the stream becomes its state; the VMM's slot and link are let go */
	if (rename(s->tmp, s->stream) < 0) {
		r = negative_errno(); /* s->tmp is left set: vm_save_free removes the stream */
	} else {
		sync_parent(s->stream);
		free(s->tmp);
		s->tmp = NULL;
		log_info("sandbox '%s': suspended (its VMM %s)", sb->id, how);
	}
	vm->phase = VM_EXITED;
	vm->agent = agent_free(vm->agent);
	vm_remove_runtime(vm);
	vm_release_slot(vm);
	vm_save_free(vm);
	if (r < 0) {
		/* the VMM is gone, its layer kept: a stopped sandbox that lost its memory */
		char reason[128];
		snprintf(reason, sizeof(reason), "keeping its state: %s", strerror(-r));
		log_error("sandbox '%s': not suspended: its VMM %s, and %s", sb->id, how, reason);
		backend_done(&vm->q->b, sb, r, reason);
		backend_lost(&vm->q->b, sb, reason);
		return true;
	}
	backend_done(&vm->q->b, sb, 0, NULL);
	return true;
}

bool
vm_saving(const struct vm *vm)
{
	return vm->save && !vm->save->recovery;
}

static void
recovered(void *data, const json_t *ret _unused_, const char *err)
{
	struct vm_save *s = data;

	if (err)
		log_warning(
		        "sandbox '%s': its guest, paused by an earlier sandboxd, did not carry on: "
		        "%.200s",
		        s->vm->sb->id, err);

	vm_save_free(s->vm);
}

static void
recovery_status(void *data, const json_t *ret, const char *err)
{
	struct vm_save *s = data;
	const char *status = json_string_value(json_object_get(ret, "status"));

	/* running (or still restoring: it runs once loaded) is what a guest taken back is */
	if (err || !status || streq(status, "running") || streq(status, "inmigrate")) {
		vm_save_free(s->vm);
		return;
	}
	log_info("sandbox '%s': its guest is %s: continuing it", s->vm->sb->id, status);
	(void)qmp_execute(s->qmp, "migrate_cancel", NULL, ignore_answer, s);
	if (qmp_execute(s->qmp, "cont", NULL, recovered, s) < 0)
		vm_save_free(s->vm);
}

static void
recovery_ready(struct qmp *m, void *data)
{
	struct vm_save *s = data;

	if (qmp_execute(m, "query-status", NULL, recovery_status, s) < 0)
		vm_save_free(s->vm);
}

static void
recovery_closed(struct qmp *m _unused_, void *data)
{
	struct vm_save *s = data;

	vm_save_free(s->vm);
}

static void
recovery_timeout(struct loop_timer *t _unused_, void *data)
{
	struct vm_save *s = data;

	log_warning("sandbox '%s': its monitor did not answer after it was taken back",
	            s->vm->sb->id);
	vm_save_free(s->vm);
}

void
vm_save_recover(struct vm *vm)
{
	_cleanup_free_ char *sock = vm_path(vm, "qmp.sock");
	struct vm_save *s;

	if (vm->save || !sock)
		return;
	s = calloc(1, sizeof(*s));
	if (!s)
		return;
	s->vm = vm;
	s->fd = -1;
	s->recovery = true;
	s->tmp = vm_path(vm, VM_STATE_FILE ".tmp"); /* goes with it */
	if (loop_timer_init(vm->q->b.cfg.loop, &s->timer, recovery_timeout, s) < 0) {
		free(s->tmp);
		free(s);
		return;
	}
	vm->save = s;
	if (qmp_new(vm->q->b.cfg.loop, sock, recovery_ready, recovery_closed, s, &s->qmp) < 0)
		vm_save_free(vm);
	else
		(void)loop_timer_arm(&s->timer, RECOVERY_MS, 0);
}

/* ---- the operations ---- */

int
qemu_suspend(struct backend *b, struct sandbox *sb)
{
	struct vm *vm = sb->backend_data;

	if (!vm || vm->pid <= 0)
		return -ESRCH;
	if (vm->phase != VM_RUNNING || vm->save)
		return -EBUSY;
	(void)b;
	return save_begin(vm, true, true, NULL);
}

int
qemu_resume(struct backend *b, struct sandbox *sb, const struct vm_launch *l)
{
	struct vm *vm = vm_get(Q(b), sb);
	_cleanup_free_ char *state = NULL;
	struct vm_from from = { 0 };
	int r;

	if (!vm)
		return -ENOMEM;
	if (vm->pid > 0)
		return -EBUSY;
	state = vm_path(vm, VM_STATE_FILE);
	if (!state)
		return -ENOMEM;
	if (access(state, F_OK) < 0)
		return -ENOENT;
	from.stream = state;
	r = vm_boot(Q(b), sb, l, false, &from);
	if (r == 0)
		vm->drop_state = true; /* once the agent answered (qemu.c) */
	return r;
}

static void
offline_done(struct loop_timer *t _unused_, void *data)
{
	struct vm *vm = data;

	backend_done(&vm->q->b, vm->sb, 0, NULL);
}

/* Completes an operation that was done at once, on the loop like every other. */
static int
done_on_loop(struct vm *vm)
{
	vm->timer.fn = offline_done;
	return loop_timer_arm(&vm->timer, 1, 0);
}

int
vm_drop_state(struct vm *vm)
{
	_cleanup_free_ char *state = vm_path(vm, VM_STATE_FILE);

	if (!state)
		return -ENOMEM;
	if (unlink(state) < 0 && errno != ENOENT)
		return negative_errno();
	vm->phase = VM_EXITED;
	return done_on_loop(vm);
}

int
qemu_snapshot(struct backend *b, struct sandbox *sb, const char *dir, bool memory)
{
	struct vm *vm = vm_get(Q(b), sb);
	_cleanup_free_ char *upper = NULL, *state = NULL, *layer = NULL, *stream = NULL;
	int r;

	if (!vm)
		return -ENOMEM;
	if (vm->save)
		return -EBUSY;
	if (vm->pid > 0)
		return vm->phase == VM_RUNNING ? save_begin(vm, false, memory, dir) : -EBUSY;
	/* stopped or suspended: the files are at rest */
	upper = vm_path(vm, "upper.qcow2");
	state = vm_path(vm, VM_STATE_FILE);
	layer = strdup_printf("%s/layer.qcow2", dir);
	stream = strdup_printf("%s/memory.mig", dir);
	if (!upper || !state || !layer || !stream)
		return -ENOMEM;
	if (access(upper, F_OK) < 0)
		return -ENOENT;
	if (memory && access(state, F_OK) < 0)
		return -EINVAL; /* stopped: no memory to take */
	r = qemu_copy_file(upper, layer);
	if (r == 0 && memory)
		r = qemu_copy_file(state, stream);
	if (r < 0) {
		(void)unlink(layer);
		(void)unlink(stream);
		return r;
	}
	return done_on_loop(vm);
}

int
qemu_start_from(struct qemu *q, struct sandbox *sb, const struct vm_launch *l)
{
	_cleanup_free_ char *layer = strdup_printf("%s/layer.qcow2", l->snapshot_dir);
	_cleanup_free_ char *stream = strdup_printf("%s/memory.mig", l->snapshot_dir);
	struct vm_from from = { 0 };

	if (!layer || !stream)
		return -ENOMEM;
	if (access(layer, R_OK) < 0)
		return negative_errno();
	from.layer = layer;
	if (access(stream, R_OK) == 0)
		from.stream = stream; /* a fork of a running guest; else a boot of its disk */
	return vm_boot(q, sb, l, true, &from);
}
