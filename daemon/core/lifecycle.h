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
/* The data of sb's "created" event (its sandbox.created audit record): name, image, sizes,
 * network, labels and env names. NULL when out of memory. */
json_t *lifecycle_created_data(const struct sandbox *sb);
/* running/suspended -> stopping -> stopped (the writable layer is kept). */
int lifecycle_stop(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* stopped (or failed) -> starting -> running, booting the same writable layer (restart
 * mode); a failed sandbox whose layer is gone is refused (409). */
int lifecycle_start(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* The same start, for a read of its files (api-files.c): a stopped or failed sandbox started
 * this way is marked woken_for_files, and housekeeping stops it again once nothing else used
 * it for --read-grace. On a sandbox up or starting already it changes nothing. */
int lifecycle_wake(struct sandboxd *d, struct sandbox *sb, struct err *err);
/* Ends the sandbox and discards its disk; why is recorded (the reason it shows, and its
 * sandbox.terminated audit record's). Idempotent. */
int lifecycle_delete(struct sandboxd *d, struct sandbox *sb, enum sandbox_end why, struct err *err);

/* At startup, the backend is created with this config: the events of the lifecycle (ctx is
 * d) and the options it needs. */
void lifecycle_backend_config(struct sandboxd *d, struct backend_config *ret);
/* Once it was (d->backend): adds the root disk it brings as the image "busybox", and starts
 * egress (as root with --egress on) as its spare uid. -errno (egress said why). */
int lifecycle_backend_started(struct sandboxd *d);

/* At startup: loads the live rows. With --keep-sandboxes, gives each its record's values and
 * takes back what the backend still runs (ending one whose values are lost); without it,
 * ends every one an earlier sandboxd left. */
int lifecycle_recover(struct sandboxd *d);
/* Ends what the backend runs for sb (cancelling the operation under way; its layer is kept)
 * and fails it with reason: the reconciler's remedy for a VM that is gone or an operation
 * that never finished. Nothing for a sandbox failed, terminated or being deleted already. */
void lifecycle_abandon(struct sandboxd *d, struct sandbox *sb, const char *reason);
/* SIGTERM or SIGINT (signame): with --keep-sandboxes, the loop quits and the VMs run on for
 * the next sandboxd; without it, every sandbox is ended (SANDBOX_END_SHUTDOWN) and the loop
 * quits once they are, or after LIFECYCLE_SHUTDOWN_MS. A second signal quits at once. */
#define LIFECYCLE_SHUTDOWN_MS 30000
void lifecycle_shutdown(struct sandboxd *d, const char *signame);
/* Periodic (each second): ends sandboxes past their lifetime; stops those idle past their
 * idle timeout (activity.h), disk kept, or ends them where their idle_action says so; ends a
 * sandbox bound to its client once that client was gone for --client-grace; stops again one
 * started only to read its files (lifecycle_wake) once nothing else used it for --read-grace. */
void lifecycle_housekeeping(struct sandboxd *d, int64_t now_ms);

/* Shared with suspend.c: the pieces of a move that suspend and resume reuse. */
struct backend;
struct backend_found;
/* Moves sb to via (with reason, or none) and begins op through the backend (a resume boots
 * like a restart: slot, tap, egress). A backend that cannot begin fails sb. 0, or the state
 * change's -errno. */
int lifecycle_begin(struct sandboxd *d, struct sandbox *sb, enum sandbox_op op,
                    enum sandbox_state via, const char *reason);
/* The backend that runs sb, or NULL when this sandboxd cannot drive it. */
struct backend *lifecycle_backend(struct sandboxd *d, const struct sandbox *sb);
/* sb's VM is gone: egress lets go of it, its slot is free. Idempotent. */
void lifecycle_vm_gone(struct sandboxd *d, struct sandbox *sb);
/* Fails sb with reason: its processes and its create's agent end with its VM. */
void lifecycle_fail(struct sandboxd *d, struct sandbox *sb, const char *reason);
/* Whether the policy as it is now still permits sb's network; else *ret_why says why (NULL:
 * out of memory). */
bool lifecycle_network_permitted(struct sandboxd *d, const struct sandbox *sb, char **ret_why);
/* Takes a slot for sb's VM unless it holds one: -EUSERS when none is free. */
int lifecycle_slot_take(struct sandboxd *d, struct sandbox *sb);
/* Takes back a VM found running after a restart of sandboxd (on the network it was started
 * with; otherwise it is ended). -errno. */
int lifecycle_take_back(struct sandboxd *d, struct backend *b, struct sandbox *sb,
                        const struct backend_found *f);
