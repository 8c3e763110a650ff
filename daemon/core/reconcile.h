/* reconcile.h: the reconciler. Once after the sandboxes were taken back at startup, then every
 * --reconcile-interval seconds, it compares what sandboxd records with what runs and puts right
 * what differs: a running sandbox whose VM is gone and a start or stop that never finished are
 * failed with the reason; a VMM, a cgroup, a layer or a tap of ours that no sandbox owns is
 * removed. Each with a log line and an event. A live, healthy sandbox is never touched, nor
 * anything that is not this sandboxd's. */
#pragma once

#include <stdbool.h>
#include "loop.h"

struct sandboxd;

struct reconcile {
	struct loop_timer timer;
	unsigned vmms; /* stray VMMs ended (the line after a restart counts them) */
};

/* After lifecycle_recover(): sweeps once (stray VMMs, their cgroups, layers no sandbox owns)
 * and arms the period. -errno (the timer). */
int reconcile_start(struct sandboxd *d);
void reconcile_stop(struct sandboxd *d);
/* One period's work (what the timer runs). */
void reconcile_run(struct sandboxd *d);

/* The backend's owns and swept events (backend.h); ctx is d. */
bool reconcile_owns(void *ctx, const char *id);
void reconcile_swept(void *ctx, const char *what, const char *name);
