/* log.c: see log.h. Each message is written with one write(2) so lines never interleave, and
 * is one line whatever it quotes. */
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
	char text[2048], line[2048];
	va_list ap;
	int n, k;

	if (level > log_max)
		return;
	n = snprintf(line, sizeof(line), "%s: %s", log_program, prefix[level]);
	if (n < 0 || (size_t)n >= sizeof(line))
		return;
	va_start(ap, fmt);
	k = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	/* One message, one line: what it quotes (a guest's name, a file name, a tool's output)
	 * is made visible, never written raw, so no newline or escape sequence in it can start a
	 * line of its own or reach the terminal reading the log (R-S7). */
	n += (int)termsafe_copy(line + n, sizeof(line) - 1 - (size_t)n, text,
	                        MIN((size_t)k, sizeof(text) - 1));
	line[n++] = '\n';
	(void)!write(STDERR_FILENO, line, (size_t)n);
}
