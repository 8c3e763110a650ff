/* test-log.c: lib/log.c and termsafe_copy/termsafe_dup (lib/util.c): a message is one line
 * on stderr whatever it quotes (R-S7): newlines, escape sequences, other control bytes and
 * non-ASCII come out escaped, printable text as it was; a message too long for a line is cut
 * between escapes, never inside one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "log.h"
#include "util.h"

/* What log_msg wrote while fn ran: stderr pointed at a memfd meanwhile (caller frees). */
static char *
captured(void (*fn)(void))
{
	int fd = memfd_create("log", MFD_CLOEXEC), saved = dup(STDERR_FILENO);
	char *out = NULL;
	off_t len;

	assert_true(fd >= 0 && saved >= 0);
	assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	fn();
	assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	len = lseek(fd, 0, SEEK_END);
	assert_true(len >= 0);
	out = calloc(1, (size_t)len + 1);
	assert_non_null(out);
	assert_int_equal(pread(fd, out, (size_t)len, 0), len);
	close(fd);
	return out;
}

static void
log_hostile(void)
{
	/* a name as a guest could choose it, quoted the way the daemon's messages quote */
	log_info("sandbox 'sbx_1': egress denied: dns '%s' port 53 (%s)",
	         "evil\n\x1b[2Jsandboxd: error: forged\r\t\x7f\xc3\xa9", "not a host name");
}

static void
test_message_is_one_line(void **state)
{
	_cleanup_free_ char *out = NULL;

	(void)state;
	log_setup("sandboxd", LOG_LEVEL_INFO);
	out = captured(log_hostile);
	assert_string_equal(out, "sandboxd: sandbox 'sbx_1': egress denied: dns "
	                         "'evil\\n\\x1b[2Jsandboxd: error: forged\\r\\t\\x7f\\xc3\\xa9' "
	                         "port 53 (not a host name)\n");
	assert_null(strchr(out, '\x1b'));
	assert_ptr_equal(strchr(out, '\n'), out + strlen(out) - 1);
}

static void
log_plain(void)
{
	log_warning("egress: tcp port %d is already in use", 3128);
}

static void
test_plain_text_unchanged(void **state)
{
	_cleanup_free_ char *out = NULL;

	(void)state;
	log_setup("sandboxd", LOG_LEVEL_INFO);
	out = captured(log_plain);
	assert_string_equal(out, "sandboxd: warning: egress: tcp port 3128 is already in use\n");
}

static void
log_long(void)
{
	char big[4000];

	/* every byte an escape of four: the line fills up and still ends whole */
	memset(big, '\x1b', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	log_error("%s", big);
}

static void
test_long_message_cut_between_escapes(void **state)
{
	_cleanup_free_ char *out = NULL;
	size_t len;
	const char *body;

	(void)state;
	log_setup("sandboxd", LOG_LEVEL_INFO);
	out = captured(log_long);
	len = strlen(out);
	assert_true(len <= 2048);
	assert_int_equal(out[len - 1], '\n');
	assert_ptr_equal(strchr(out, '\n'), out + len - 1);
	body = out + strlen("sandboxd: error: ");
	assert_int_equal((size_t)(out + len - 1 - body) % 4, 0);
	for (const char *p = body; p < out + len - 1; p += 4)
		assert_memory_equal(p, "\\x1b", 4);
}

static void
test_termsafe(void **state)
{
	_cleanup_free_ char *d = NULL, *empty = NULL;
	char small[8];

	(void)state;
	d = termsafe_dup("a\nb\x1b[2J\xff");
	assert_string_equal(d, "a\\nb\\x1b[2J\\xff");
	empty = termsafe_dup(NULL);
	assert_string_equal(empty, "");
	/* "ab" fits, then "\x1b" (four bytes) would not with the NUL: left out whole */
	assert_int_equal(termsafe_copy(small, 6, "ab\x1b", 3), 2);
	assert_string_equal(small, "ab");
	assert_int_equal(termsafe_copy(small, sizeof(small), "ab\x1b", 3), 6);
	assert_string_equal(small, "ab\\x1b");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_message_is_one_line),
		cmocka_unit_test(test_plain_text_unchanged),
		cmocka_unit_test(test_long_message_cut_between_escapes),
		cmocka_unit_test(test_termsafe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
