/* test-strv.c: lib/strv.c, the string vector: appends that keep it NULL-terminated, copies,
 * taking a string even when the append fails, and the frees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>
#include "strv.h"
#include "util.h"

static void
test_build(void **state)
{
	_cleanup_strv_ char **v = NULL;
	char word[] = "copied";
	size_t n = 0;

	assert_int_equal(strv_length(v), 0);
	assert_int_equal(strv_add(&v, &n, word), 0);
	word[0] = 'C'; /* strv_add kept a copy */
	assert_int_equal(strv_push(&v, &n, strdup_printf("taken %d", 2)), 0);
	assert_int_equal(strv_extend(&v, &n, "a", "b", "c", NULL), 0);
	assert_int_equal(strv_extend(&v, &n, NULL), 0);
	assert_int_equal(n, 5);
	assert_int_equal(strv_length(v), 5);
	assert_string_equal(v[0], "copied");
	assert_string_equal(v[1], "taken 2");
	assert_string_equal(v[4], "c");
	assert_null(v[5]);
}

static void
test_push_null(void **state)
{
	_cleanup_strv_ char **v = NULL;
	size_t n = 0;

	/* a failed strdup: the append fails, and the vector is as it was */
	assert_int_equal(strv_push(&v, &n, NULL), -ENOMEM);
	assert_null(v);
	assert_int_equal(n, 0);
	assert_int_equal(strv_add(&v, &n, "x"), 0);
	assert_int_equal(strv_push(&v, &n, NULL), -ENOMEM);
	assert_int_equal(n, 1);
	assert_null(v[1]);
}

static void
test_copy(void **state)
{
	char *src[] = { "one", "two", "three" }; /* no NULL at the end */
	_cleanup_strv_ char **v = NULL, **empty = NULL;

	assert_int_equal(strv_copy(src, 2, &v), 0);
	assert_int_equal(strv_length(v), 2);
	assert_string_equal(v[1], "two");
	assert_ptr_not_equal(v[1], src[1]);
	assert_null(v[2]);
	assert_int_equal(strv_copy(NULL, 0, &empty), 0);
	assert_non_null(empty);
	assert_null(empty[0]);
}

static void
test_frees(void **state)
{
	char **v = NULL;
	size_t n = 0;

	assert_null(strv_free(NULL));
	assert_null(strv_free_erase(NULL));
	assert_int_equal(strv_extend(&v, &n, "K=secret", "L=other", NULL), 0);
	v = strv_free_erase(v);
	assert_null(v);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_build),
		cmocka_unit_test(test_push_null),
		cmocka_unit_test(test_copy),
		cmocka_unit_test(test_frees),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
