/* test-api-error.c: the API's error table (every kind has docs/api.md's status and code) and
 * the one conversion of a failed call: what its err says, or, left unfilled, its -errno. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>
#include "api-error.h"
#include "util.h"

/* Written out independently of daemon/api/api-error.c on purpose: docs/api.md's table. */
static const struct {
	enum err_kind kind;
	int status;
	const char *code;
} expected[] = {
	{ ERR_INVALID, 400, "invalid_request" },
	{ ERR_UNAUTHORIZED, 401, "unauthorized" },
	{ ERR_REFUSED, 403, "refused" },
	{ ERR_FORBIDDEN_ORIGIN, 403, "forbidden_origin" },
	{ ERR_NOT_FOUND, 404, "not_found" },
	{ ERR_METHOD, 405, "invalid_request" },
	{ ERR_TIMEOUT, 408, "invalid_request" },
	{ ERR_CONFLICT, 409, "conflict" },
	{ ERR_TOO_LARGE, 413, "invalid_request" },
	{ ERR_RATE_LIMITED, 429, "rate_limited" },
	{ ERR_HEAD_TOO_LARGE, 431, "invalid_request" },
	{ ERR_INTERNAL, 500, "internal" },
	{ ERR_UNSUPPORTED, 501, "unsupported" },
	{ ERR_UNAVAILABLE, 503, "unavailable" },
	{ ERR_NO_SPACE, 507, "insufficient_storage" },
};

static void
test_every_kind(void **state)
{
	assert_int_equal(ARRAY_SIZE(expected), _ERR_KIND_MAX - 1);
	for (size_t i = 0; i < ARRAY_SIZE(expected); i++) {
		assert_int_equal(api_error_status(expected[i].kind), expected[i].status);
		assert_string_equal(api_error_code(expected[i].kind), expected[i].code);
	}
	/* no kind, or one out of range, answers as a bug would */
	assert_int_equal(api_error_status(ERR_NONE), 500);
	assert_string_equal(api_error_code(_ERR_KIND_MAX), "internal");
}

static void
test_filled_err_wins(void **state)
{
	struct err err = {};
	const char *message;
	int r = err_set(&err, -EBUSY, ERR_UNAVAILABLE, "sandbox '%s' is busy", "sbx_1");

	assert_int_equal(r, -EBUSY);
	assert_int_equal(api_error_classify(r, &err, &message), ERR_UNAVAILABLE);
	assert_string_equal(message, "sandbox 'sbx_1' is busy");
}

static void
test_unfilled_err_by_errno(void **state)
{
	struct err err = {};
	const char *message;

	/* what a create that ran out of memory answered before it said so itself */
	assert_int_equal(api_error_classify(-ENOMEM, &err, &message), ERR_INTERNAL);
	assert_string_equal(message, "out of memory");
	assert_int_equal(api_error_classify(-ENOENT, &err, &message), ERR_NOT_FOUND);
	assert_int_equal(api_error_classify(-EEXIST, NULL, &message), ERR_CONFLICT);
	assert_int_equal(api_error_classify(-EOPNOTSUPP, &err, &message), ERR_UNSUPPORTED);
	assert_int_equal(api_error_classify(-EIO, &err, &message), ERR_INTERNAL);
	assert_string_equal(message, strerror(EIO));
	/* a "failure" that is none is a bug, still with a kind */
	assert_int_equal(api_error_classify(0, &err, &message), ERR_INTERNAL);
}

static void
test_message_is_cut(void **state)
{
	struct err err = {};
	char long_name[2 * ERR_MESSAGE_MAX];

	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	(void)err_set(&err, -EINVAL, ERR_INVALID, "name '%s' is invalid", long_name);
	assert_int_equal(strlen(err.message), ERR_MESSAGE_MAX - 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_kind),
		cmocka_unit_test(test_filled_err_wins),
		cmocka_unit_test(test_unfilled_err_by_errno),
		cmocka_unit_test(test_message_is_cut),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
