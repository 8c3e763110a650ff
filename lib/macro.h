/* macro.h: cleanup attributes, ownership hand-off and small helpers shared by every program.
 * Modelled on systemd's macro.h: locals clean themselves up and are handed off with TAKE_PTR(). */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _noreturn_ __attribute__((noreturn))
#define _warn_unused_ __attribute__((warn_unused_result))
#define _cleanup_(f) __attribute__((cleanup(f)))

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Takes ownership of *ptr: returns the pointer and leaves NULL behind. */
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _tp = (p);                                                           \
		(p) = NULL;                                                                        \
		_tp;                                                                               \
	})

/* Takes ownership of an fd: returns it and leaves -1 behind. */
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _tf = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_tf;                                                                               \
	})

static inline void
freep(void *p)
{
	free(*(void **)p);
}
#define _cleanup_free_ _cleanup_(freep)

/* Closes fd if it is valid, keeping errno; returns -1 so callers can write fd = safe_close(fd). */
static inline int
safe_close(int fd)
{
	if (fd >= 0) {
		int saved = errno;
		close(fd);
		errno = saved;
	}
	return -1;
}

static inline void
closep(int *fd)
{
	safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

/* Declares NAME_freep() for a type whose NAME_free() returns NULL. */
#define DEFINE_FREEP(type, func)                                                                   \
	static inline void func##p(type **p)                                                       \
	{                                                                                          \
		if (*p)                                                                            \
			*p = func(*p);                                                             \
	}

#define streq(a, b) (strcmp((a), (b)) == 0)
#define strneq(a, b, n) (strncmp((a), (b), (n)) == 0)
#define isempty(s) (!(s) || !*(s))

/* Returns -errno, never 0, even when errno is unexpectedly 0. */
static inline int
negative_errno(void)
{
	return errno > 0 ? -errno : -EIO;
}
