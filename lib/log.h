/* log.h: one-line log messages to stderr ("sandboxd: warning: ..."), journald-friendly.
 * Messages are lowercase and say what failed first, then quote the subject (STYLE.md). A
 * message is one line whatever it quotes: newlines, escape sequences and other bytes that are
 * not printable ASCII come out escaped (termsafe_copy in util.h), so text a guest chose cannot
 * forge a line or reach the terminal reading the log. */
#pragma once

#include "macro.h"

enum log_level {
	LOG_LEVEL_ERROR,
	LOG_LEVEL_WARNING,
	LOG_LEVEL_INFO,
	LOG_LEVEL_DEBUG,
};

void log_setup(const char *program, enum log_level max);
void log_msg(enum log_level level, const char *fmt, ...) _printf_(2, 3);
enum log_level log_get_max(void);

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
