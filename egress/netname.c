/* netname.c: policy names normalised and matched (see netname.h). Pure (no I/O, no globals),
 * so sandboxd's checks of requests and the worker's decisions read names alike. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "netname.h"
#include "util.h"

#define LABEL_MAX 63
#define SHOWN_MAX (NETNAME_SHOWN_SIZE - 4) /* bytes of a refused entry quoted back */

typedef char name_t[NETNAME_MAX + 1];

void
netname_shown(const char *s, char out[static NETNAME_SHOWN_SIZE])
{
	size_t i, n = 0;

	for (i = 0; s[i] && n < SHOWN_MAX; i++) {
		unsigned char c = (unsigned char)s[i];
		out[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	if (s[i]) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
}

static int refuse(char **ret_error, const char *in, const char *fmt, ...) _printf_(3, 4);

/* -EINVAL with "'entry': why" in *ret_error (when wanted); -ENOMEM if that cannot be made. */
static int
refuse(char **ret_error, const char *in, const char *fmt, ...)
{
	char s[NETNAME_SHOWN_SIZE], why[192];
	va_list ap;

	if (!ret_error)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	netname_shown(in, s);
	*ret_error = strdup_printf("'%s': %s", s, why);
	return *ret_error ? -EINVAL : -ENOMEM;
}

static bool
name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int
netname_normalise(const char *in, char out[static NETNAME_MAX + 1], char **ret_error)
{
	name_t buf;
	const char *colon;
	size_t len, start, end;

	if (!in || !*in) {
		if (!ret_error)
			return -EINVAL;
		*ret_error = strdup("an empty name");
		return *ret_error ? -EINVAL : -ENOMEM;
	}
	/* The forms people paste from a browser or a config file each get their own reason,
	 * before the character check would name a ':' or '/' less helpfully. */
	if (strstr(in, "://"))
		return refuse(ret_error, in, "a URL is not a name: give the host name alone");
	if (strchr(in, '@'))
		return refuse(ret_error, in,
		              "a user part is not allowed: give the host name alone");
	if (strchr(in, '/'))
		return refuse(ret_error, in, "a path is not allowed: give the host name alone");
	colon = strchr(in, ':');
	if (colon) {
		if (in[0] == '[' || strchr(colon + 1, ':'))
			return refuse(ret_error, in,
			              "an IP address is not a name: egress is decided by name");
		return refuse(ret_error, in, "a port is not allowed: give the name alone");
	}

	len = strnlen(in, NETNAME_MAX + 2);
	if (len > NETNAME_MAX + 1)
		return refuse(ret_error, in, "longer than %d bytes", NETNAME_MAX);
	for (size_t i = 0; i < len; i++)
		buf[i] = in[i] >= 'A' && in[i] <= 'Z' ? (char)(in[i] - 'A' + 'a') : in[i];
	if (buf[len - 1] == '.')
		len--;
	if (len > NETNAME_MAX)
		return refuse(ret_error, in, "longer than %d bytes", NETNAME_MAX);
	buf[len] = '\0';
	if (streq(buf, "*"))
		return refuse(ret_error, in,
		              "a bare '*' is not allowed: name the hosts, or a domain as "
		              "'*.example.com'");

	for (start = 0; start <= len; start = end + 1) {
		end = start;
		while (end < len && buf[end] != '.')
			end++;
		if (end == start)
			return refuse(ret_error, in, "an empty label");
		if (end - start > LABEL_MAX)
			return refuse(ret_error, in, "a label longer than %d bytes", LABEL_MAX);
		for (size_t i = start; i < end; i++) {
			unsigned char c = (unsigned char)buf[i];

			if (c == '*') {
				if (start == 0 && end == 1)
					continue;
				return refuse(ret_error, in,
				              "'*' may only be the whole first label, as in "
				              "'*.example.com'");
			}
			if (name_char((char)c))
				continue;
			if (c >= 0x20 && c < 0x7f)
				return refuse(ret_error, in,
				              "'%c' is not allowed in a name (letters, digits, '-' "
				              "and '_')",
				              c);
			return refuse(ret_error, in,
			              "byte 0x%02x is not allowed in a name (an international "
			              "name goes in its xn-- form)",
			              c);
		}
		if (end == len && label_is_number(buf + start, end - start))
			return refuse(ret_error, in,
			              "an IP address is not a name: egress is decided by name");
	}
	memcpy(out, buf, len + 1);
	return 0;
}

bool
netname_match(const char *pattern, const char *host)
{
	size_t sl, hl;

	if (!pattern || !host)
		return false;
	/* Only may_allow holds "*"; a deny list that somehow held it should deny everything,
	 * so it matches all (the matcher ignores it on an allow list). */
	if (streq(pattern, "*"))
		return true;
	if (pattern[0] == '*' && pattern[1] == '.') {
		/* the suffix keeps its dot, so "*.example.com" never matches "badexample.com" */
		sl = strlen(pattern + 1);
		hl = strlen(host);
		return hl > sl && streq(host + hl - sl, pattern + 1);
	}
	return streq(pattern, host);
}
