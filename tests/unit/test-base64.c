/* test-base64.c: lib/base64.c, both alphabets: the RFC 4648 test vectors, round trips of every
 * length around a group, and the texts a strict decoder refuses (wrong alphabet, padding out of
 * place or missing, bits set past the last byte, a lone character). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>
#include "base64.h"
#include "util.h"

static void
encodes(bool url, const char *in, const char *want)
{
	_cleanup_buf_ struct buf out = BUF_INIT(256);

	assert_int_equal((url ? base64url_encode : base64_encode)(&out, in, strlen(in)), 0);
	assert_string_equal(out.data, want);
}

static void
decodes(bool url, const char *in, const char *want)
{
	_cleanup_buf_ struct buf out = BUF_INIT(256);

	assert_int_equal((url ? base64url_decode : base64_decode)(&out, in, strlen(in)), 0);
	assert_int_equal(out.len, strlen(want));
	assert_memory_equal(out.data ? out.data : "", want, out.len);
}

static void
refuses(bool url, const char *in)
{
	_cleanup_buf_ struct buf out = BUF_INIT(256);

	if ((url ? base64url_decode : base64_decode)(&out, in, strlen(in)) != -EINVAL)
		fail_msg("'%s' was accepted as %s", in, url ? "base64url" : "base64");
}

/* RFC 4648 section 10. */
static void
test_vectors(void **state)
{
	static const char *const v[][3] = {
		{ "", "", "" },
		{ "f", "Zg==", "Zg" },
		{ "fo", "Zm8=", "Zm8" },
		{ "foo", "Zm9v", "Zm9v" },
		{ "foob", "Zm9vYg==", "Zm9vYg" },
		{ "fooba", "Zm9vYmE=", "Zm9vYmE" },
		{ "foobar", "Zm9vYmFy", "Zm9vYmFy" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
		encodes(false, v[i][0], v[i][1]);
		decodes(false, v[i][1], v[i][0]);
		encodes(true, v[i][0], v[i][2]);
		decodes(true, v[i][2], v[i][0]);
	}
	/* the two characters the alphabets spell differently */
	encodes(false, "\xfb\xff", "+/8=");
	encodes(true, "\xfb\xff", "-_8");
	decodes(false, "+/8=", "\xfb\xff");
	decodes(true, "-_8", "\xfb\xff");
}

static void
test_round_trips(void **state)
{
	unsigned char bytes[70];

	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(i * 37 + 11);
	for (size_t n = 0; n <= sizeof(bytes); n++)
		for (int url = 0; url < 2; url++) {
			_cleanup_buf_ struct buf text = BUF_INIT(256), back = BUF_INIT(256);

			assert_int_equal((url ? base64url_encode : base64_encode)(&text, bytes, n),
			                 0);
			assert_int_equal(text.len, url ? BASE64URL_LEN(n) : (n + 2) / 3 * 4);
			assert_int_equal((url ? base64url_decode : base64_decode)(&back, text.data,
			                                                          text.len),
			                 0);
			assert_int_equal(back.len, n);
			assert_memory_equal(n ? back.data : "", bytes, n);
		}
}

static void
test_strict(void **state)
{
	static const char *const standard[] = {
		"Zg",   "Zg=",  "Zm9",   "Z===",     "====",     "Zg==Zg==", "Zm=v",
		"Zh==", "Zm9=", "Zm9v=", "Zm9vYg=_", "Zm9v\nYg", "Zm9-",     "Zm9_",
	};
	static const char *const url[] = {
		"Z", "Zm9vY", "Zg==", "Zm8=", "Zh", "Zm9", "Zm+v", "Zm/v", "Zm9v Y",
	};

	for (size_t i = 0; i < ARRAY_SIZE(standard); i++)
		refuses(false, standard[i]);
	for (size_t i = 0; i < ARRAY_SIZE(url); i++)
		refuses(true, url[i]);
}

static void
test_bounded(void **state)
{
	struct buf small = BUF_INIT(2);

	assert_int_equal(base64_encode(&small, "foo", 3), -ENOBUFS);
	assert_int_equal(base64_decode(&small, "Zm9v", 4), -ENOBUFS);
	assert_int_equal(base64url_decode(&small, "Zm8", 3), 0);
	assert_memory_equal(small.data, "fo", 2);
	buf_free(&small);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vectors),
		cmocka_unit_test(test_round_trips),
		cmocka_unit_test(test_strict),
		cmocka_unit_test(test_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
