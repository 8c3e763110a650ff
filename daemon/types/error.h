/* error.h: what went wrong, as the daemon's domain code says it: a kind and a message safe to
 * show a person. Code below the API knows no HTTP; the API layer turns a kind into a status
 * and an error code, in one table (api/api-error.c). */
#pragma once

#include "macro.h"

enum err_kind {
	ERR_NONE,             /* not filled: the API classifies the -errno the call returned */
	ERR_INVALID,          /* malformed, an unknown field, out of limits (never clamped) */
	ERR_UNAUTHORIZED,     /* no credential, or a wrong one */
	ERR_REFUSED,          /* well formed, but the policy says no */
	ERR_FORBIDDEN_ORIGIN, /* the Host or Origin header is not allowed */
	ERR_NOT_FOUND,        /* no such object among the caller's own */
	ERR_METHOD,           /* the path exists, but not with this method */
	ERR_TIMEOUT,          /* the request did not arrive in time */
	ERR_CONFLICT,         /* a name in use, an object in the wrong state */
	ERR_TOO_LARGE,        /* the body is over its limit */
	ERR_RATE_LIMITED,     /* too many attempts; retry later */
	ERR_HEAD_TOO_LARGE,   /* the request head is over its limit */
	ERR_INTERNAL,         /* a bug, or the host failed (the database, the backend) */
	ERR_UNSUPPORTED,      /* this server lacks the capability */
	ERR_UNAVAILABLE,      /* temporarily unable to serve; retry */
	ERR_NO_SPACE,         /* the sandbox's disk is full (ENOSPC, EDQUOT in the guest) */
	_ERR_KIND_MAX,
};

#define ERR_MESSAGE_MAX 256

/* Declared as `struct err err = {};` by whoever reads it, so that one a failing call left
 * alone reads as ERR_NONE. */
struct err {
	enum err_kind kind;
	char message[ERR_MESSAGE_MAX]; /* cut to fit */
};

/* Fills e with kind and the formatted message, and returns error (a -errno), so that a
 * failure reads `return err_set(err, -EEXIST, ERR_CONFLICT, "...", ...);`. */
int err_set(struct err *e, int error, enum err_kind kind, const char *fmt, ...) _printf_(4, 5);
