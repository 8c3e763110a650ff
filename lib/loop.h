/* loop.h: the one epoll event loop of a process. Every event source is an fd: sockets,
 * timers (timerfd), signals (signalfd) and children (pidfd).
 *
 * Objects embed a struct loop_source. Removing a source never frees its owner: owners free
 * themselves through loop_defer(), which runs after the current batch of events, so a later
 * event in the same batch never touches freed memory (Redis ae, libuv). */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/types.h>
#include "macro.h"

struct loop;
struct loop_source;

typedef void (*loop_fd_fn)(struct loop_source *src, uint32_t events, void *data);
typedef void (*loop_defer_fn)(void *data);

struct loop_source {
	struct loop *loop;
	int fd; /* -1 once removed */
	uint32_t events;
	loop_fd_fn fn;
	void *data;
};

int loop_new(struct loop **ret);
/* Frees the loop (NULL-safe); sources must have been removed by their owners. */
struct loop *loop_free(struct loop *l);
DEFINE_FREEP(struct loop, loop_free)

/* Watches fd for events; the fd stays owned by the caller. */
int loop_add(struct loop *l, struct loop_source *src, int fd, uint32_t events, loop_fd_fn fn,
             void *data);
int loop_modify(struct loop_source *src, uint32_t events);
/* Stops watching (idempotent, safe on a source never added). Does not close the fd. */
void loop_remove(struct loop_source *src);

/* Runs fn(data) after the current batch of events (or before the next wait). -ENOMEM only. */
int loop_defer(struct loop *l, loop_defer_fn fn, void *data);

/* Timers: a timerfd each. ms == 0 disarms. */
struct loop_timer {
	struct loop_source src;
	void (*fn)(struct loop_timer *t, void *data);
	void *data;
};
int loop_timer_init(struct loop *l, struct loop_timer *t, void (*fn)(struct loop_timer *, void *),
                    void *data);
int loop_timer_arm(struct loop_timer *t, uint64_t first_ms, uint64_t interval_ms);
void loop_timer_done(struct loop_timer *t);

/* Blocks the given signals and delivers them through a signalfd. */
struct loop_signals {
	struct loop_source src;
	void (*fn)(int signo, void *data);
	void *data;
};
int loop_signals_init(struct loop *l, struct loop_signals *s, const sigset_t *mask,
                      void (*fn)(int signo, void *data), void *data);
void loop_signals_done(struct loop_signals *s);

/* Children: a pidfd each, readable once the child has exited. The watch ends (the pidfd is
 * removed and closed) before fn runs. It never reaps: fn does (waitpid), or its owner later,
 * so that the pid, and the process group named after it, stay ours until then. */
struct loop_child {
	struct loop_source src;
	void (*fn)(struct loop_child *c, void *data);
	void *data;
};
/* Watches pid; -errno when it cannot, and then the child runs on, unwatched. */
int loop_child_watch(struct loop *l, struct loop_child *c, pid_t pid,
                     void (*fn)(struct loop_child *, void *), void *data);
/* Stops watching (idempotent, safe on a zeroed struct or a watch that failed); no reaping. */
void loop_child_done(struct loop_child *c);
static inline bool
loop_child_watching(const struct loop_child *c)
{
	return c->src.loop && c->src.fd >= 0;
}

/* Runs until loop_quit(); returns the code given to loop_quit(). */
int loop_run(struct loop *l);
/* Waits up to timeout_ms (-1: forever) for one batch of events and runs it and the deferred
 * work; the number of events, or -errno. For tests and tools that drive the loop themselves. */
int loop_run_once(struct loop *l, int timeout_ms);
void loop_quit(struct loop *l, int code);
bool loop_quitting(struct loop *l);
