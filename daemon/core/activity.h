/* activity.h: whether a sandbox is in use, for its idle timeout, and whether the client of a
 * sandbox bound to it is still there. lifecycle.c acts on the answers each housekeeping tick.
 *
 * Activity is: a request about the sandbox; output from one of its processes, or one ending;
 * an egress decision about it (a connection refused or ended, a name looked up); an open
 * stream of it (an attach, a process's output, a run waiting for its answer, an event stream
 * for that sandbox), a tunnel into it, or a file read, write or listing under way, for as long as
 * it is open; and,
 * read on the host when the idle timeout would otherwise pass, its VMM using more than
 * ACTIVITY_CPU_PERCENT of one CPU or any byte its network device carried into the guest (an open
 * connection at work: the host sends only answers). What the guest sends on its own is not counted:
 * an idle Linux guest solicits an IPv6 router now and then (70 bytes, at growing intervals), which
 * would keep it up for ever. A client is there while it asks for the sandbox or holds a stream of
 * it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct sandboxd;
struct sandbox;

/* A VMM above this share of one CPU, over at least ACTIVITY_CPU_WINDOW_MS, is busy: an idle
 * guest's VMM measured here uses well under 1% (timer ticks, the agent), under TCG too. */
#define ACTIVITY_CPU_PERCENT 2
#define ACTIVITY_CPU_WINDOW_MS 2000

/* A request about sb: activity, and its client is there. */
void activity_request(struct sandbox *sb);
/* Something happened inside sb: output, a process's end, an egress decision. */
void activity_inside(struct sandbox *sb);

/* Whether a stream of sb is open (a reader of one of its processes, an event stream for it,
 * a tunnel, a file transfer); when one is, both clocks are set to now. */
bool activity_watched(struct sandboxd *d, struct sandbox *sb, int64_t now_ms);

/* Whether no activity but its VMM's CPU came for secs: for a sandbox started only to read its
 * files, whose VMM the boot itself keeps busy for a while. */
bool activity_quiet(const struct sandbox *sb, int64_t now_ms, unsigned secs);

/* For a running sandbox with an idle timeout, each tick: whether it has been idle for that
 * long, its VMM's CPU included. A busy VMM counts as activity now. A server that cannot
 * read the CPU decides by the rest alone. */
bool activity_idle(struct sandboxd *d, struct sandbox *sb, int64_t now_ms);

/* For a sandbox bound to its client, each tick: whether its client has been gone for
 * grace_secs. The clock does not run while something is under way (it is pending, starting
 * or stopping): a create waiting for an image is a client waiting, not one gone. */
bool activity_client_gone(struct sandbox *sb, int64_t now_ms, unsigned grace_secs);
