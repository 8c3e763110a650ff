/* fuzz-cookie.c: what a client presents to daemon/accounts/accounts.c before it is authenticated: a
 * Cookie header ('c'), an API key ('k'), a session cookie's value ('s') and an email at login
 * ('e'); the first byte picks, any other byte runs them all on the rest. Accepted input is
 * checked: a cookie's value is a piece of the header without ';', a key or session value has
 * exactly one spelling (decoding and encoding again gives it back), an email is lowercase
 * with one '@'. */
#include <stdio.h>
#include <stdlib.h>
#include "accounts.h"
#include "base64.h"
#include "fuzz.h"
#include "util.h"

static void
check_cookie(const char *text)
{
	char small[8], big[ACCOUNT_COOKIE_VALUE_LEN + 1];
	int r = cookie_find(text, ACCOUNT_SESSION_COOKIE, big, sizeof(big));
	int r2 = cookie_find(text, ACCOUNT_SESSION_COOKIE, small, sizeof(small));

	FUZZ_CHECK(r == 1 || r == 0 || r == -EEXIST || r == -E2BIG);
	if (r == 1) {
		FUZZ_CHECK(strlen(big) < sizeof(big));
		FUZZ_CHECK(!strchr(big, ';'));
		FUZZ_CHECK(strstr(text, big) != NULL);
		/* a smaller buffer finds the same, or says it does not fit */
		FUZZ_CHECK(r2 == -E2BIG || (r2 == 1 && streq(small, big)));
	}
	if (r == 0)
		FUZZ_CHECK(r2 == 0);
	/* any name: nothing outside the buffer is written */
	r = cookie_find(text, "a", small, sizeof(small));
	FUZZ_CHECK(r == 1 || r == 0 || r == -EEXIST || r == -E2BIG);
	if (r == 1)
		FUZZ_CHECK(strlen(small) < sizeof(small));
}

/* The secret decoded and encoded again is the text that was accepted. */
static void
check_secret(const uint8_t secret[static 32], const char *b64)
{
	_cleanup_buf_ struct buf again = BUF_INIT(ACCOUNT_SECRET_B64_LEN);

	FUZZ_CHECK(base64url_encode(&again, secret, 32) == 0);
	FUZZ_CHECK(streq(again.data, b64));
}

static bool
lower_hex(const char *s)
{
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

static void
check_key(const char *text)
{
	char id[ACCOUNT_KEY_ID_LEN + 1];
	uint8_t secret[32];

	if (api_key_parse(text, id, secret) != 0)
		return;
	FUZZ_CHECK(strlen(text) == ACCOUNT_KEY_LEN);
	FUZZ_CHECK(strlen(id) == ACCOUNT_KEY_ID_LEN && lower_hex(id));
	FUZZ_CHECK(strneq(text + 4, id, ACCOUNT_KEY_ID_LEN));
	check_secret(secret, text + 4 + ACCOUNT_KEY_ID_LEN + 1);
}

static void
check_session(const char *text)
{
	char id[ACCOUNT_SESSION_ID_LEN + 1];
	uint8_t secret[32];

	if (session_cookie_parse(text, id, secret) != 0)
		return;
	FUZZ_CHECK(strlen(text) == ACCOUNT_COOKIE_VALUE_LEN);
	FUZZ_CHECK(strlen(id) == ACCOUNT_SESSION_ID_LEN && lower_hex(id));
	check_secret(secret, text + ACCOUNT_SESSION_ID_LEN + 1);
}

static void
check_email(const char *text)
{
	char out[ACCOUNT_EMAIL_MAX + 1];
	const char *at;

	if (account_email_normalise(text, out))
		return;
	at = strchr(out, '@');
	FUZZ_CHECK(strlen(out) == strlen(text) && strlen(out) <= ACCOUNT_EMAIL_MAX);
	FUZZ_CHECK(at && at != out && at[1] && !strchr(at + 1, '@'));
	for (const char *p = out; *p; p++)
		FUZZ_CHECK(*p > 0x20 && *p < 0x7f && !(*p >= 'A' && *p <= 'Z'));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_cleanup_free_ char *text = NULL;

	if (size < 1 || size > 16384)
		return 0;
	text = strndup((const char *)data + 1, size - 1);
	if (!text)
		return 0;
	switch (data[0]) {
	case 'c':
		check_cookie(text);
		break;
	case 'k':
		check_key(text);
		break;
	case 's':
		check_session(text);
		break;
	case 'e':
		check_email(text);
		break;
	default:
		check_cookie(text);
		check_key(text);
		check_session(text);
		check_email(text);
	}
	return 0;
}
