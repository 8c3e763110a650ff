/* loop.c: see loop.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "loop.h"
#include "log.h"
#include "util.h"

struct deferred {
	loop_defer_fn fn;
	void *data;
};

struct loop {
	int epfd;
	bool quit;
	int code;
	struct deferred *defer;
	size_t ndefer, adefer;
};

int
loop_new(struct loop **ret)
{
	struct loop *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		int r = negative_errno();
		free(l);
		return r;
	}
	*ret = l;
	return 0;
}

static void
run_deferred(struct loop *l)
{
	/* deferred work may defer more; run until none is left */
	for (size_t i = 0; i < l->ndefer; i++)
		l->defer[i].fn(l->defer[i].data);
	l->ndefer = 0;
}

struct loop *
loop_free(struct loop *l)
{
	if (!l)
		return NULL;
	run_deferred(l);
	safe_close(l->epfd);
	free(l->defer);
	free(l);
	return NULL;
}

int
loop_add(struct loop *l, struct loop_source *src, int fd, uint32_t events, loop_fd_fn fn,
         void *data)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	*src = (struct loop_source){
		.loop = l, .fd = fd, .events = events, .fn = fn, .data = data
	};
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		src->fd = -1;
		return negative_errno();
	}
	return 0;
}

int
loop_modify(struct loop_source *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	if (src->fd < 0)
		return -EBADF;
	if (src->events == events)
		return 0;
	if (epoll_ctl(src->loop->epfd, EPOLL_CTL_MOD, src->fd, &ev) < 0)
		return negative_errno();
	src->events = events;
	return 0;
}

void
loop_remove(struct loop_source *src)
{
	if (!src || !src->loop || src->fd < 0)
		return;
	(void)epoll_ctl(src->loop->epfd, EPOLL_CTL_DEL, src->fd, NULL);
	src->fd = -1;
}

int
loop_defer(struct loop *l, loop_defer_fn fn, void *data)
{
	if (l->ndefer == l->adefer) {
		size_t n = l->adefer ? l->adefer * 2 : 16;
		struct deferred *d = realloc(l->defer, n * sizeof(*d));
		if (!d)
			return -ENOMEM;
		l->defer = d;
		l->adefer = n;
	}
	l->defer[l->ndefer++] = (struct deferred){ fn, data };
	return 0;
}

static void
timer_fired(struct loop_source *src, uint32_t events _unused_, void *data)
{
	struct loop_timer *t = data;
	uint64_t expirations;

	if (read(src->fd, &expirations, sizeof(expirations)) != sizeof(expirations))
		return;
	t->fn(t, t->data);
}

int
loop_timer_init(struct loop *l, struct loop_timer *t, void (*fn)(struct loop_timer *, void *),
                void *data)
{
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	int r;

	if (fd < 0)
		return negative_errno();
	t->fn = fn;
	t->data = data;
	r = loop_add(l, &t->src, fd, EPOLLIN, timer_fired, t);
	if (r < 0)
		close(fd);
	return r;
}

int
loop_timer_arm(struct loop_timer *t, uint64_t first_ms, uint64_t interval_ms)
{
	struct itimerspec its = {
		.it_value = { .tv_sec = (time_t)(first_ms / 1000),
		              .tv_nsec = (long)(first_ms % 1000) * 1000000 },
		.it_interval = { .tv_sec = (time_t)(interval_ms / 1000),
		                 .tv_nsec = (long)(interval_ms % 1000) * 1000000 },
	};

	if (t->src.fd < 0)
		return -EBADF;
	if (timerfd_settime(t->src.fd, 0, &its, NULL) < 0)
		return negative_errno();
	return 0;
}

void
loop_timer_done(struct loop_timer *t)
{
	int fd = t->src.fd;

	loop_remove(&t->src);
	safe_close(fd);
}

static void
child_exited(struct loop_source *src _unused_, uint32_t events _unused_, void *data)
{
	struct loop_child *c = data;

	loop_child_done(c);
	c->fn(c, c->data);
}

int
loop_child_watch(struct loop *l, struct loop_child *c, pid_t pid,
                 void (*fn)(struct loop_child *, void *), void *data)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	int r;

	if (fd < 0)
		return negative_errno();
	c->fn = fn;
	c->data = data;
	r = loop_add(l, &c->src, fd, EPOLLIN, child_exited, c);
	if (r < 0)
		close(fd);
	return r;
}

void
loop_child_done(struct loop_child *c)
{
	int fd = loop_child_watching(c) ? c->src.fd : -1;

	loop_remove(&c->src);
	safe_close(fd);
}

static void
signal_fired(struct loop_source *src, uint32_t events _unused_, void *data)
{
	struct loop_signals *s = data;
	struct signalfd_siginfo si;

	while (read(src->fd, &si, sizeof(si)) == sizeof(si))
		s->fn((int)si.ssi_signo, s->data);
}

int
loop_signals_init(struct loop *l, struct loop_signals *s, const sigset_t *mask,
                  void (*fn)(int signo, void *data), void *data)
{
	int fd, r;

	s->fn = fn;
	s->data = data;
	if (sigprocmask(SIG_BLOCK, mask, NULL) < 0)
		return negative_errno();
	fd = signalfd(-1, mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0)
		return negative_errno();
	r = loop_add(l, &s->src, fd, EPOLLIN, signal_fired, s);
	if (r < 0)
		close(fd);
	return r;
}

void
loop_signals_done(struct loop_signals *s)
{
	int fd = s->src.fd;

	loop_remove(&s->src);
	safe_close(fd);
}

/* One epoll_wait and its batch of events, then the deferred work. */
static int
run_batch(struct loop *l, int timeout_ms)
{
	struct epoll_event evs[64];
	int n = epoll_wait(l->epfd, evs, (int)ARRAY_SIZE(evs), timeout_ms);

	if (n < 0) {
		if (errno == EINTR)
			return 0;
		log_error("epoll_wait failed: %m");
		return -errno;
	}
	for (int i = 0; i < n; i++) {
		struct loop_source *src = evs[i].data.ptr;
		/* a source removed earlier in this batch is skipped; its memory is alive until
		 * the deferred frees run */
		if (src->fd < 0)
			continue;
		src->fn(src, evs[i].events, src->data);
	}
	run_deferred(l);
	return n;
}

int
loop_run(struct loop *l)
{
	run_deferred(l);
	while (!l->quit) {
		int r = run_batch(l, -1);
		if (r < 0)
			return r;
	}
	run_deferred(l);
	return l->code;
}

int
loop_run_once(struct loop *l, int timeout_ms)
{
	run_deferred(l);
	return run_batch(l, timeout_ms);
}

void
loop_quit(struct loop *l, int code)
{
	l->quit = true;
	l->code = code;
}

bool
loop_quitting(struct loop *l)
{
	return l->quit;
}
