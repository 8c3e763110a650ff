/* lifecycle.h: what moves sandboxes through their states: creating, starting, stopping and
 * ending them through the backend, taking them back after a restart, and acting on lifetimes,
 * idle timeouts and clients gone. Every state change goes through sandbox_set_state(). */
#pragma once

#include "error.h"
#include "sandbox.h"

struct backend_config;
struct sandboxd;

/* Persists a new pending sandbox (with its "created" event), adds it to the registry and
 * starts it. On success the registry owns sb; on failure the caller still does and nothing
 * was written. */
int lifecycle_create(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* running/suspended -> stopping -> stopped (the writable layer is kept). */
int lifecycle_stop(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* stopped -> starting -> running, booting the same writable layer (restart mode). */
int lifecycle_start(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* Ends the sandbox and discards its disk; why is recorded (the reason it shows, and its
 * sandbox.terminated audit record's). Idempotent. */
int lifecycle_delete(struct sandboxd *d, struct sandbox *sb, enum sandbox_end why, struct err *err);

/* At startup, the backend is created with this config: the events of the lifecycle (ctx is
 * d) and the options it needs. */
void lifecycle_backend_config(struct sandboxd *d, struct backend_config *ret);
/* Once it was (d->backend): adds the root disk it brings as the image "busybox", and starts
 * egress (as root with --egress on) as its spare uid. -errno (egress said why). */
int lifecycle_backend_started(struct sandboxd *d);

/* At startup: loads the live rows and takes back what the backend still runs. */
int lifecycle_recover(struct sandboxd *d);
/* Periodic (each second): ends sandboxes past their lifetime; stops those idle past their
 * idle timeout (activity.h), disk kept, or ends them where their idle_action says so; ends a
 * sandbox bound to its client once that client was gone for --client-grace. */
void lifecycle_housekeeping(struct sandboxd *d, int64_t now_ms);
