/* api-error.h: the API's error vocabulary. Each kind of error (types/error.h) is one HTTP
 * status and one API error code, in one table (api-error.c), and every error answer,
 * {"error":{"code","message"}}, is made there. */
#pragma once

#include "error.h"

struct conn;

/* The status and the code of kind; a kind outside the table is internal. */
int api_error_status(enum err_kind kind);
const char *api_error_code(enum err_kind kind);

/* The kind of a failed call into domain code: what err says, or, when the call left err
 * unfilled (ERR_NONE), what its -errno rc means by one fixed mapping (-ENOMEM: internal
 * "out of memory", -ENOENT: not found, ...). Never ERR_NONE. *ret_message is err's message
 * or static text. */
enum err_kind api_error_classify(int rc, const struct err *err, const char **ret_message);

/* Answers an error of kind with its status and code. The message is made safe to show a
 * person (bytes outside printable ASCII become '?'). Logs internal errors, and unsupported
 * and unavailable ones (what this server cannot do now); the rest are the client's. */
void api_reply_err(struct conn *c, enum err_kind kind, const char *fmt, ...) _printf_(3, 4);
/* The same, with extra response headers ("Name: value\r\n"...). */
void api_reply_err_headers(struct conn *c, enum err_kind kind, const char *headers, const char *fmt,
                           ...) _printf_(4, 5);
/* Answers a failed call into domain code: rc is the -errno it returned, err what it said
 * (api_error_classify). */
void api_reply_failure(struct conn *c, int rc, const struct err *err);
