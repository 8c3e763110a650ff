/* lifecycle.h: what moves sandboxes through their states: creating, starting, stopping and
 * ending them through the backend, taking them back after a restart, and ending those past
 * their lifetime or idle timeout. Every state change goes through sandbox_set_state(). */
#pragma once

#include "error.h"
#include "sandbox.h"

struct sandboxd;

/* Persists a new pending sandbox (with its "created" event), adds it to the registry and
 * starts it. On success the registry owns sb; on failure the caller still does and nothing
 * was written. */
int lifecycle_create(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* running/suspended -> stopping -> stopped (the writable layer is kept). */
int lifecycle_stop(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* stopped -> starting -> running, booting the same writable layer (restart mode). */
int lifecycle_start(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* Ends the sandbox and discards its disk; why is recorded as the reason. Idempotent. */
int lifecycle_delete(struct sandboxd *d, struct sandbox *sb, const char *why, struct err *err);

/* Called by the backend, on the loop, when the operation under way (sb->op) finished.
 * error is 0 or -errno; reason says what went wrong, for the sandbox's record. */
void lifecycle_backend_done(struct sandboxd *d, struct sandbox *sb, int error, const char *reason);
/* Called by the backend each time the agent of a running sandbox (re)connects. The first
 * time after sandboxd started, the processes the guest kept are listed and followed again. */
void lifecycle_agent_ready(struct sandboxd *d, struct sandbox *sb);
/* Called by the backend when a sandbox's VM ended on its own. The backend frees the VM's
 * agent only after this returns. */
void lifecycle_backend_lost(struct sandboxd *d, struct sandbox *sb, const char *reason);

/* At startup: loads the live rows and takes back what the backend still runs. */
int lifecycle_recover(struct sandboxd *d);
/* Periodic: ends sandboxes past their lifetime or idle timeout. */
void lifecycle_housekeeping(struct sandboxd *d, int64_t now_ms);
/* Marks activity (a request about it) for the idle timeout. */
void lifecycle_touch(struct sandbox *sb);
