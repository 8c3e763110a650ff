/* output.c: see output.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include "output.h"
#include "util.h"

void
output_age(int64_t s, char out[static 24])
{
	if (s < 0)
		s = 0;
	if (s < 60)
		snprintf(out, 24, "%llds", (long long)s);
	else if (s < 3600)
		snprintf(out, 24, "%lldm", (long long)(s / 60));
	else if (s < 86400)
		snprintf(out, 24, "%lldh", (long long)(s / 3600));
	else
		snprintf(out, 24, "%lldd", (long long)(s / 86400));
}

void
output_mib(uint64_t mib, char out[static 24])
{
	if (mib >= 1024 && mib % 1024 == 0)
		snprintf(out, 24, "%lluG", (unsigned long long)(mib / 1024));
	else
		snprintf(out, 24, "%lluM", (unsigned long long)mib);
}

void
output_bytes(uint64_t bytes, char out[static 24])
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	size_t u = 0;

	if (bytes < 1024) {
		snprintf(out, 24, "%llu B", (unsigned long long)bytes);
		return;
	}
	v /= 1024;
	/* 1023.96 KiB would print as "1024.0 KiB": step up before rounding does */
	while (v >= 1023.95 && u + 1 < ARRAY_SIZE(units)) {
		v /= 1024;
		u++;
	}
	snprintf(out, 24, "%.1f %s", v, units[u]);
}

int
output_parse_time(const char *s, int64_t *ret)
{
	struct tm tm = { 0 };
	int n = 0;

	if (!s ||
	    sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
	           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 ||
	    n == 0 || s[n] != '\0')
		return -EINVAL;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	*ret = (int64_t)timegm(&tm);
	return 0;
}

int
output_json_line(const json_t *j)
{
	_cleanup_free_ char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);

	if (!text)
		return -ENOMEM;
	if (puts(text) == EOF || fflush(stdout) == EOF)
		return negative_errno();
	return 0;
}

int
output_json_pretty(const json_t *j)
{
	/* JSON escapes the C0 controls already; ENSURE_ASCII escapes the rest (C1 controls,
	 * bidirectional overrides) that a terminal might act on */
	_cleanup_free_ char *text =
	        json_dumps(j, JSON_INDENT(2) | JSON_ENSURE_ASCII | JSON_ENCODE_ANY);

	if (!text)
		return -ENOMEM;
	if (puts(text) == EOF || fflush(stdout) == EOF)
		return negative_errno();
	return 0;
}

const char *
output_str(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

int64_t
output_int(const json_t *obj, const char *key, int64_t def)
{
	json_t *v = json_object_get(obj, key);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : def;
}

void
output_error(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("sandbox-cli: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
