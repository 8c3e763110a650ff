/* error.c: the domain's typed error; see error.h. */
#include <stdarg.h>
#include <stdio.h>
#include "error.h"

int
err_set(struct err *e, int error, enum err_kind kind, const char *fmt, ...)
{
	va_list ap;

	e->kind = kind;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return error;
}
