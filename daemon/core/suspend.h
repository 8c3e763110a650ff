/* suspend.h: suspend and resume. A suspend saves a running sandbox's memory and device state
 * through the backend and ends its VMM: it holds no RAM, no slot and no tap, but still counts
 * as given (capacity, caps), and its processes are frozen in the guest, not ended (their hubs
 * stay, proc.h). A resume launches a VMM that restores that state the way a restart launches
 * one (slot, tap, egress), and the hubs follow the processes again from where they stood.
 *
 *   running -> suspending -> suspended -> resuming -> running
 *   a resume that could not restore -> suspended again (the saved state is kept)
 *   a suspend that failed while the guest ran on -> running again */
#pragma once

#include <stdbool.h>
#include "error.h"
#include "sandbox.h"

struct backend;
struct backend_found;
struct sandboxd;

/* Whether this sandboxd's backend suspends and resumes (capability "suspend"). */
bool suspend_offered(struct sandboxd *d);
/* running -> suspending -> suspended. 0 once it is under way (or it is suspended or suspending
 * already); -errno with err (409 from another state, 501 without the capability). */
int lifecycle_suspend(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* suspended -> resuming -> running. 0 once under way (or it is running or resuming already);
 * -errno with err: 409 from another state, 403 when the policy no longer permits its network,
 * 503 when no slot is free. */
int lifecycle_resume(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* lifecycle.c's begin for a suspend (sb is suspending): the guest is told to keep its processes
 * through the session's end (AP_HOLD), then the hubs let go of the agent and the backend
 * suspends. 0 once under way, or -errno when the backend could not begin. */
int suspend_begin(struct sandboxd *d, struct backend *b, struct sandbox *sb);
/* Its idle timeout suspends sb (idle_action "suspend"). false: the backend cannot, or it could
 * not begin (the caller stops it instead). */
bool suspend_idle(struct sandboxd *d, struct sandbox *sb);
/* The backend finished a suspend or a resume (lifecycle.c's done event). */
void suspend_backend_done(struct sandboxd *d, struct sandbox *sb, enum sandbox_op op, int error,
                          const char *reason);
/* After a restart of sandboxd (--keep-sandboxes): what a suspended, suspending or resuming
 * sandbox becomes by what the backend found. 0 (kept suspended, or taken back running), or
 * -errno when it failed. */
int suspend_recover(struct sandboxd *d, struct backend *b, struct sandbox *sb,
                    const struct backend_found *found);
