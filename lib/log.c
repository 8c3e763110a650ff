/* log.c: see log.h. Each message is written with one write(2) so lines never interleave. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include "log.h"
#include "util.h"

static const char *log_program = "sandbox";
static enum log_level log_max = LOG_LEVEL_INFO;

void
log_setup(const char *program, enum log_level max)
{
	log_program = program;
	log_max = max;
}

enum log_level
log_get_max(void)
{
	return log_max;
}

void
log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const prefix[] = {
		[LOG_LEVEL_ERROR] = "error: ",
		[LOG_LEVEL_WARNING] = "warning: ",
		[LOG_LEVEL_INFO] = "",
		[LOG_LEVEL_DEBUG] = "debug: ",
	};
	char line[2048];
	va_list ap;
	int n, k;

	if (level > log_max)
		return;
	n = snprintf(line, sizeof(line), "%s: %s", log_program, prefix[level]);
	if (n < 0 || (size_t)n >= sizeof(line))
		return;
	va_start(ap, fmt);
	k = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	n += k;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	(void)!write(STDERR_FILENO, line, (size_t)n);
}
