/* test-netname.c: egress/netname.c, the names egress is decided by, as tables of cases:
 * names normalised or refused (with the reason), the longest names, and patterns matched
 * against hosts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "netname.h"
#include "util.h"

/* ---- names ---- */

#define LABEL63 "abcdefghij0123456789abcdefghij0123456789abcdefghij0123456789abc"
/* 4 x 63 + 3 dots = 255: cut to 253 and 254 below */
#define NAME255 LABEL63 "." LABEL63 "." LABEL63 "." LABEL63

static const struct name_case {
	const char *in;
	const char *out; /* NULL: refused */
	const char *error;
} name_cases[] = {
	{ "example.com", "example.com", NULL },
	{ "Example.COM", "example.com", NULL },
	{ "example.com.", "example.com", NULL },
	{ "*.Example.com.", "*.example.com", NULL },
	{ "localhost", "localhost", NULL },
	{ "_dmarc.example.com", "_dmarc.example.com", NULL },
	{ "xn--bcher-kva.example", "xn--bcher-kva.example", NULL },
	{ "a-b.c-d.io", "a-b.c-d.io", NULL },
	{ "1.2.3.4.example.com", "1.2.3.4.example.com", NULL },
	{ "0x1f.com", "0x1f.com", NULL },
	{ LABEL63 ".com", LABEL63 ".com", NULL },
	{ "a" LABEL63 ".com", NULL, "a label longer than 63 bytes" },
	{ "", NULL, "an empty name" },
	{ "https://example.com", NULL, "a URL is not a name" },
	{ "https://example.com/path", NULL, "a URL is not a name" },
	{ "example.com/path", NULL, "a path is not allowed" },
	{ "user@example.com", NULL, "a user part is not allowed" },
	{ "example.com:8080", NULL, "a port is not allowed" },
	{ "[::1]", NULL, "an IP address is not a name" },
	{ "::1", NULL, "an IP address is not a name" },
	{ "fe80::1%eth0", NULL, "an IP address is not a name" },
	{ "192.168.0.1", NULL, "an IP address is not a name" },
	{ "10.0.0.1.", NULL, "an IP address is not a name" },
	{ "127.1", NULL, "an IP address is not a name" },
	{ "0x7f000001", NULL, "an IP address is not a name" },
	{ "0177.0.0.1", NULL, "an IP address is not a name" },
	{ "*.0.0.1", NULL, "an IP address is not a name" },
	{ "example.123", NULL, "an IP address is not a name" },
	{ "*", NULL, "a bare '*' is not allowed" },
	{ "*.", NULL, "a bare '*' is not allowed" },
	{ "*example.com", NULL, "'*' may only be the whole first label" },
	{ "a.*.example.com", NULL, "'*' may only be the whole first label" },
	{ "**.example.com", NULL, "'*' may only be the whole first label" },
	{ "*.*.example.com", NULL, "'*' may only be the whole first label" },
	{ "example.*", NULL, "'*' may only be the whole first label" },
	{ "example..com", NULL, "an empty label" },
	{ ".example.com", NULL, "an empty label" },
	{ "example.com..", NULL, "an empty label" },
	{ ".", NULL, "an empty label" },
	{ "exa mple.com", NULL, "' ' is not allowed in a name" },
	{ "example.com?x=1", NULL, "'?' is not allowed in a name" },
	{ "b\xc3\xbc"
	  "cher.de",
	  NULL, "byte 0xc3 is not allowed" },
	/* what a client sent is quoted back printable only */
	{ "ex\tample.com", NULL, "'ex?ample.com': byte 0x09" },
	{ "ex\\ample.com", NULL, "'\\' is not allowed" },
};

static void
test_normalise_name(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(name_cases); i++) {
		const struct name_case *c = &name_cases[i];
		char out[NETNAME_MAX + 1] = "untouched", again[NETNAME_MAX + 1];
		char *error = NULL;
		int r = netname_normalise(c->in, out, &error);

		if (c->out) {
			if (r < 0)
				fail_msg("'%s' refused: %s", c->in, error);
			assert_string_equal(out, c->out);
			/* the normal form is a fixed point */
			assert_int_equal(netname_normalise(out, again, NULL), 0);
			assert_string_equal(again, out);
			continue;
		}
		if (r != -EINVAL)
			fail_msg("'%s' normalised to '%s', want refused (%s)", c->in, out,
			         c->error);
		assert_non_null(error);
		if (!strstr(error, c->error))
			fail_msg("'%s': error '%s' lacks '%s'", c->in, error, c->error);
		assert_string_equal(out, "untouched");
		free(error);
	}
}

static void
test_name_lengths(void **state)
{
	char in[300], out[NETNAME_MAX + 1];
	char *error = NULL;

	(void)state;
	/* 253 bytes, then 253 with a trailing dot: the longest names */
	snprintf(in, sizeof(in), "%.253s", NAME255);
	assert_int_equal(netname_normalise(in, out, NULL), 0);
	assert_int_equal(strlen(out), 253);
	snprintf(in, sizeof(in), "%.253s.", NAME255);
	assert_int_equal(netname_normalise(in, out, NULL), 0);
	assert_int_equal(strlen(out), 253);
	snprintf(in, sizeof(in), "%.254s", NAME255);
	assert_int_equal(netname_normalise(in, out, &error), -EINVAL);
	assert_non_null(strstr(error, "longer than 253 bytes"));
	free(error);
	/* a long message is cut, not the buffer overrun */
	snprintf(in, sizeof(in), "%s.x", NAME255);
	error = NULL;
	assert_int_equal(netname_normalise(in, out, &error), -EINVAL);
	assert_non_null(strstr(error, "...': longer than 253 bytes"));
	free(error);
	/* no error wanted is fine */
	assert_int_equal(netname_normalise("*", out, NULL), -EINVAL);
	assert_int_equal(netname_normalise(NULL, out, NULL), -EINVAL);
}

/* ---- matching ---- */

static const struct pair_case {
	const char *a, *b;
	bool want;
} match_cases[] = {
	{ "example.com", "example.com", true },
	{ "example.com", "www.example.com", false },
	{ "example.com", "example.co", false },
	{ "example.com", "EXAMPLE.com", false }, /* hosts arrive normalised */
	{ "*.example.com", "a.example.com", true },
	{ "*.example.com", "a.b.example.com", true },
	{ "*.example.com", "example.com", false },
	{ "*.example.com", "badexample.com", false },
	{ "*.example.com", "xexample.com", false },
	{ "*.example.com", ".example.com", false },
	{ "*.example.com", "example.com.evil.net", false },
	{ "*", "anything.example", true },
};

static void
test_match(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(match_cases); i++)
		if (netname_match(match_cases[i].a, match_cases[i].b) != match_cases[i].want)
			fail_msg("match('%s', '%s') should be %s", match_cases[i].a,
			         match_cases[i].b, match_cases[i].want ? "true" : "false");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normalise_name),
		cmocka_unit_test(test_name_lengths),
		cmocka_unit_test(test_match),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
