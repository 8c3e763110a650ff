/* suspend.c: suspend and resume through the backend (see suspend.h); the moves themselves go
 * through lifecycle.c's begin, which launches a resume the way it launches a restart. */
#include "suspend.h"
#include "agent.h"
#include "agents.h"
#include "backend.h"
#include "lifecycle.h"
#include "log.h"
#include "proc.h"
#include "samples.h"
#include "sandboxd.h"
#include "util.h"

bool
suspend_offered(struct sandboxd *d)
{
	struct backend_caps caps = { .accel = "none" };

	if (!d->backend || !d->backend->ops->suspend || !d->backend->ops->resume)
		return false;
	d->backend->ops->caps(d->backend, &caps);
	return caps.suspend;
}

/* What a suspend or a resume of sb may not begin from: a delete under way, another operation
 * (a snapshot), no backend. 0, or -errno with err. */
static int
check_idle_op(struct sandboxd *d, struct sandbox *sb, struct err *err)
{
	if (!suspend_offered(d))
		return err_set(err, -EOPNOTSUPP, ERR_UNSUPPORTED,
		               "this server does not offer suspending and resuming sandboxes "
		               "(capability 'suspend' in GET /v1/capabilities)");
	if (sb->op == SANDBOX_OP_DESTROY)
		return err_set(err, -EBUSY, ERR_CONFLICT, "sandbox '%s' is being deleted", sb->id);
	if (!lifecycle_backend(d, sb))
		return err_set(err, -ENODEV, ERR_UNAVAILABLE,
		               "the backend '%s' of sandbox '%s' is not available", sb->backend,
		               sb->id);
	return 0;
}

int
lifecycle_suspend(struct sandboxd *d, struct sandbox *sb, struct err *err)
{
	int r = check_idle_op(d, sb, err);

	if (r < 0)
		return r;
	if (sb->state == SANDBOX_SUSPENDED || sb->state == SANDBOX_SUSPENDING)
		return 0; /* there, or on its way */
	if (sb->state != SANDBOX_RUNNING)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s' is %s; only a running sandbox suspends", sb->id,
		               sandbox_state_to_string(sb->state));
	if (sb->op != SANDBOX_OP_NONE)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s' is busy (a snapshot is being taken); suspend it once "
		               "that is done",
		               sb->id);
	sb->woken_for_files = false; /* a suspend keeps it as it is: nothing to stop later */
	log_info("sandbox '%s': suspending", sb->id);
	return lifecycle_begin(d, sb, SANDBOX_OP_SUSPEND, SANDBOX_SUSPENDING,
	                       sb->idle_suspend ? "idle past its idle timeout: suspending, its "
	                                          "memory and disk kept"
	                                        : NULL);
}

int
lifecycle_resume(struct sandboxd *d, struct sandbox *sb, struct err *err)
{
	_cleanup_free_ char *why = NULL;
	int r = check_idle_op(d, sb, err);

	if (r < 0)
		return r;
	if (sb->state == SANDBOX_RUNNING || sb->state == SANDBOX_RESUMING)
		return 0;
	if (sb->state != SANDBOX_SUSPENDED)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s' is %s; only a suspended sandbox resumes", sb->id,
		               sandbox_state_to_string(sb->state));
	if (sb->op != SANDBOX_OP_NONE)
		return err_set(err, -EBUSY, ERR_CONFLICT,
		               "sandbox '%s' is busy (a snapshot is being taken); resume it once "
		               "that is done",
		               sb->id);
	/* the policy is read at each start of sandboxd: a resume gets only what it permits now,
	 * as a start does */
	if (!lifecycle_network_permitted(d, sb, &why)) {
		if (!why)
			return -ENOMEM;
		log_warning("sandbox '%s': resume refused: %s", sb->id, why);
		return err_set(err, -EPERM, ERR_REFUSED, "sandbox '%s' cannot resume: %s", sb->id,
		               why);
	}
	/* its slot first: without one it stays suspended, nothing tried */
	r = lifecycle_slot_take(d, sb);
	if (r < 0)
		return err_set(err, r, ERR_UNAVAILABLE,
		               "sandbox '%s' cannot resume now: every VM slot of this node is in "
		               "use; stop or suspend a sandbox, or retry",
		               sb->id);
	log_info("sandbox '%s': resuming", sb->id);
	r = lifecycle_begin(d, sb, SANDBOX_OP_RESUME, SANDBOX_RESUMING, NULL);
	if (r < 0) {
		lifecycle_vm_gone(d, sb);
		return err_set(err, r, ERR_INTERNAL, "could not resume '%s': %s", sb->id,
		               strerror(-r));
	}
	return 0;
}

/* The backend's part of a suspend: the hubs let go of the agent first (it may go with the
 * VMM), the processes frozen in the guest, not ended. */
static int
suspend_backend(struct backend *b, struct sandbox *sb)
{
	proc_detach_all(sb);
	return b->ops->suspend(b, sb);
}

/* A suspend waiting for the guest's answer to AP_HOLD: held by id, since the sandbox may be
 * deleted meanwhile. */
struct hold_wait {
	struct sandboxd *d;
	char id[SANDBOX_ID_MAX + 1];
	int err;
};

/* After the answer's callback (the agent is not to be touched from inside its own): the
 * suspend goes on, whatever the guest answered (an older guest does not know AP_HOLD: its
 * processes without keep end at the resume). */
static void
hold_go(void *data)
{
	struct hold_wait *hw = data;
	struct sandbox *sb = registry_get(&hw->d->reg, hw->id);
	struct backend *b = sb ? lifecycle_backend(hw->d, sb) : NULL;
	int r;

	if (sb && b && sb->state == SANDBOX_SUSPENDING && sb->op == SANDBOX_OP_SUSPEND) {
		if (hw->err)
			log_info("sandbox '%s': its guest did not hold its processes (%s); those "
			         "started without keep end at the resume",
			         sb->id, strerror(hw->err));
		r = suspend_backend(b, sb);
		if (r < 0) {
			_cleanup_free_ char *why =
			        strdup_printf("the backend could not begin: %s", strerror(-r));
			lifecycle_fail(hw->d, sb, why ? why : "the backend could not begin");
		}
	}
	free(hw);
}

static void
hold_done(void *data, const struct agent_result *res)
{
	struct hold_wait *hw = data;

	hw->err = res->err;
	if (loop_defer(hw->d->loop, hold_go, hw) < 0)
		free(hw); /* out of memory: the reconciler fails the suspend that never ends */
}

int
suspend_begin(struct sandboxd *d, struct backend *b, struct sandbox *sb)
{
	struct agent *a = b->ops->agent ? b->ops->agent(b, sb) : NULL;
	struct hold_wait *hw;

	if (!a || !agent_ready(a))
		return suspend_backend(b, sb);
	hw = calloc(1, sizeof(*hw));
	if (!hw)
		return -ENOMEM;
	hw->d = d;
	snprintf(hw->id, sizeof(hw->id), "%s", sb->id);
	if (!agent_hold(a, hold_done, hw)) {
		free(hw);
		return suspend_backend(b, sb);
	}
	agent_flush(a);
	return 0;
}

bool
suspend_idle(struct sandboxd *d, struct sandbox *sb)
{
	struct err err = {};

	if (!suspend_offered(d))
		return false;
	log_info("sandbox '%s': idle for %llu s, its idle timeout; suspending it, its memory and "
	         "disk kept",
	         sb->id, (unsigned long long)sb->idle_timeout_secs);
	sb->idle_suspend = true;
	if (lifecycle_suspend(d, sb, &err) < 0) {
		sb->idle_suspend = false;
		log_warning("sandbox '%s': cannot suspend it: %s; stopping it instead", sb->id,
		            err.message);
		return false;
	}
	return true;
}

/* A suspend that failed, decided after the backend's callbacks returned: a backend whose VM
 * ended with it reports the loss right after (the sandbox is failed by then); one whose guest
 * runs on (the save was given up, the guest continued) leaves it suspending, and it runs again,
 * its hubs following the same agent. */
struct suspend_failure {
	struct sandboxd *d;
	char id[SANDBOX_ID_MAX + 1];
	char reason[512];
};

static void decide_later(struct sandboxd *d, struct sandbox *sb, loop_defer_fn fn, int error,
                         const char *reason);

static void
suspend_failed(void *data)
{
	struct suspend_failure *sf = data;
	struct sandbox *sb = registry_get(&sf->d->reg, sf->id);
	struct backend *b = sb ? lifecycle_backend(sf->d, sb) : NULL;
	_cleanup_free_ char *why = NULL;

	if (!sb || !b || sb->state != SANDBOX_SUSPENDING || sb->op != SANDBOX_OP_NONE) {
		free(sf);
		return;
	}
	if (b->ops->check && b->ops->check(b, sb) == 0) {
		struct agent *a = b->ops->agent ? b->ops->agent(b, sb) : NULL;
		why = strdup_printf("suspending failed (%s); it runs on", sf->reason);
		log_warning("sandbox '%s': %s", sb->id, why ? why : "suspending failed");
		if (sandbox_set_state(sf->d, sb, SANDBOX_RUNNING, why) == 0 && a)
			proc_attach_all(sb, a);
	} else {
		why = strdup_printf("suspending failed: %s", sf->reason);
		lifecycle_vm_gone(sf->d, sb);
		lifecycle_fail(sf->d, sb, why ? why : "suspending failed");
	}
	free(sf);
}

/* A suspend finished: the VMM is gone (its slot and tap free) and the memory is saved; or it
 * failed (suspend_failed). */
static void
suspended(struct sandboxd *d, struct sandbox *sb, int error, const char *reason)
{
	_cleanup_free_ char *why = NULL;
	bool idle = sb->idle_suspend;

	sb->idle_suspend = false;
	if (error < 0) {
		decide_later(d, sb, suspend_failed, error, reason);
		return;
	}
	lifecycle_vm_gone(d, sb);
	if (idle)
		why = strdup_printf("suspended after %llu s idle, its idle timeout; its memory and "
		                    "disk are kept: resume it (or use it) to carry on",
		                    (unsigned long long)sb->idle_timeout_secs);
	(void)sandbox_set_state(d, sb, SANDBOX_SUSPENDED, why);
}

/* A resume that failed, decided once the backend's callbacks returned (its VMM is reaped and
 * freed by then): suspended again while its saved state is there (a retry may work), else
 * failed. */
static void
resume_failed(void *data)
{
	struct suspend_failure *sf = data;
	struct sandbox *sb = registry_get(&sf->d->reg, sf->id);
	struct backend *b = sb ? lifecycle_backend(sf->d, sb) : NULL;
	_cleanup_free_ char *why = NULL;
	struct backend_found found;

	if (!sb || !b || sb->state != SANDBOX_RESUMING || sb->op != SANDBOX_OP_NONE) {
		free(sf);
		return;
	}
	lifecycle_vm_gone(sf->d, sb);
	if (b->ops->status(b, sb, &found) == 0 && found.status == BACKEND_SUSPENDED) {
		why = strdup_printf("resuming failed (%s); its saved state is kept: resume it "
		                    "again, or stop it to boot its disk",
		                    sf->reason);
		log_warning("sandbox '%s': %s", sb->id, why ? why : "resuming failed");
		(void)sandbox_set_state(sf->d, sb, SANDBOX_SUSPENDED, why);
	} else {
		why = strdup_printf("resuming failed: %s", sf->reason);
		lifecycle_fail(sf->d, sb, why ? why : "resuming failed");
	}
	free(sf);
}

/* Has fn decide what a failed suspend or resume of sb leaves, after this batch of events. */
static void
decide_later(struct sandboxd *d, struct sandbox *sb, loop_defer_fn fn, int error,
             const char *reason)
{
	struct suspend_failure *sf = calloc(1, sizeof(*sf));

	if (!sf || loop_defer(d->loop, fn, sf) < 0) {
		free(sf);
		lifecycle_vm_gone(d, sb);
		lifecycle_fail(d, sb, "sandboxd ran out of memory");
		return;
	}
	sf->d = d;
	snprintf(sf->id, sizeof(sf->id), "%s", sb->id);
	snprintf(sf->reason, sizeof(sf->reason), "%s", reason ? reason : strerror(-error));
}

/* A resume finished: it runs again and its processes' hubs follow them through the new agent;
 * or it failed (resume_failed). */
static void
resumed(struct sandboxd *d, struct sandbox *sb, int error, const char *reason)
{
	struct backend *b = lifecycle_backend(d, sb);

	if (error < 0) {
		decide_later(d, sb, resume_failed, error, reason);
		return;
	}
	if (sandbox_set_state(d, sb, SANDBOX_RUNNING, NULL) < 0)
		return;
	samples_take(d, sb, true);
	if (b && b->ops->agent) {
		struct agent *a = b->ops->agent(b, sb);
		if (a)
			proc_attach_all(sb, a);
	}
}

void
suspend_backend_done(struct sandboxd *d, struct sandbox *sb, enum sandbox_op op, int error,
                     const char *reason)
{
	if (op == SANDBOX_OP_SUSPEND)
		suspended(d, sb, error, reason);
	else
		resumed(d, sb, error, reason);
}

/* Ends what runs for sb (a VM it should not have now) and fails it with reason. */
static int
recover_fail(struct sandboxd *d, struct backend *b, struct sandbox *sb,
             const struct backend_found *found, const char *reason)
{
	if (found->status == BACKEND_RUNNING && b->ops->abandon)
		b->ops->abandon(b, sb);
	lifecycle_vm_gone(d, sb);
	lifecycle_fail(d, sb, reason);
	return -EIO;
}

int
suspend_recover(struct sandboxd *d, struct backend *b, struct sandbox *sb,
                const struct backend_found *found)
{
	enum backend_status st = found->status;
	int r;

	if (st == BACKEND_SUSPENDED) {
		/* its memory is saved: a suspend finished meanwhile, or a resume never began */
		if (sb->state != SANDBOX_SUSPENDED)
			(void)sandbox_set_state(d, sb, SANDBOX_SUSPENDED, NULL);
		return 0;
	}
	switch (sb->state) {
	case SANDBOX_RESUMING:
		if (st != BACKEND_RUNNING)
			return recover_fail(d, b, sb, found,
			                    "sandboxd restarted while it was resuming, and its "
			                    "saved state is gone");
		r = lifecycle_take_back(d, b, sb, found);
		if (r < 0) {
			lifecycle_vm_gone(d, sb);
			lifecycle_fail(d, sb, "its VM could not be taken back after a restart");
			return r;
		}
		(void)sandbox_set_state(d, sb, SANDBOX_RUNNING, NULL);
		samples_take(d, sb, false);
		return 0;
	case SANDBOX_SUSPENDING:
		return recover_fail(d, b, sb, found,
		                    "sandboxd restarted while it was being suspended; its disk is "
		                    "kept: start it to boot it again");
	default:
		return recover_fail(
		        d, b, sb, found,
		        st == BACKEND_RUNNING ? "a VM was running for it while it was suspended"
		        : st == BACKEND_STOPPED
		                ? "its saved memory was gone after sandboxd restarted; its disk is "
		                  "kept: start it to boot it again"
		                : "its disk was gone after sandboxd restarted");
	}
}
