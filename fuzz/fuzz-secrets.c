/* fuzz-secrets.c: daemon/core/secrets.c, the input as a user's secrets file read back from
 * STATE/secrets/ (GET /v1/secrets, a create that falls back on a saved secret). An accepted
 * file is within its bounds (an owner, at most SECRETS_MAX secrets, each name a valid
 * variable name, strictly ascending, each value short enough and without NUL), writes back
 * into bytes that read the same and write the same again, and answers secrets_find for each
 * of its names; a refused one leaves the output untouched and says why. */
#include <stdio.h>
#include <stdlib.h>
#include "fuzz.h"
#include "secrets.h"
#include "util.h"

static void
check_bounds(const struct secrets *s)
{
	FUZZ_CHECK(s->owner && *s->owner && strlen(s->owner) <= SECRETS_OWNER_MAX);
	FUZZ_CHECK(s->n <= SECRETS_MAX);
	for (size_t i = 0; i < s->n; i++) {
		const char *n = s->v[i].name;
		FUZZ_CHECK(n && s->v[i].value && *n && strlen(n) <= SECRET_NAME_MAX);
		FUZZ_CHECK(!(n[0] >= '0' && n[0] <= '9'));
		for (const char *p = n; *p; p++)
			FUZZ_CHECK((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			           (*p >= '0' && *p <= '9') || *p == '_');
		FUZZ_CHECK(strlen(s->v[i].value) <= SECRET_VALUE_MAX);
		FUZZ_CHECK(s->v[i].updated_at >= 0);
		FUZZ_CHECK(i == 0 || strcmp(s->v[i - 1].name, n) < 0);
		FUZZ_CHECK(secrets_find(s, n) == &s->v[i]);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct secrets s = { 0 }, again = { 0 };
	char *why = NULL, *text = NULL, *text2 = NULL;
	size_t len = 0, len2 = 0;
	int r;

	if (size > SECRETS_MAX_BYTES + 1)
		return 0;
	r = secrets_parse((const char *)data, size, &s, &why);
	if (r < 0) {
		FUZZ_CHECK(r == -EINVAL || r == -ENOMEM);
		FUZZ_CHECK(r == -ENOMEM || (why && *why));
		FUZZ_CHECK(!s.owner && !s.v && s.n == 0);
		free(why);
		return 0;
	}
	FUZZ_CHECK(!why);
	check_bounds(&s);
	r = secrets_format(&s, &text, &len);
	FUZZ_CHECK(r == 0 || r == -ENOMEM);
	if (r == 0) {
		r = secrets_parse(text, len, &again, &why);
		FUZZ_CHECK(r == 0 || r == -ENOMEM);
		if (r == 0) {
			FUZZ_CHECK(streq(again.owner, s.owner) && again.n == s.n);
			for (size_t i = 0; i < s.n; i++)
				FUZZ_CHECK(streq(again.v[i].value, s.v[i].value) &&
				           again.v[i].updated_at == s.v[i].updated_at);
			FUZZ_CHECK(secrets_format(&again, &text2, &len2) == 0 || !text2);
			FUZZ_CHECK(!text2 || (len2 == len && memcmp(text, text2, len) == 0));
		}
	}
	/* a removal and a set keep the bounds */
	if (s.n > 0) {
		char *name = strdup(s.v[0].name);
		if (name) {
			FUZZ_CHECK(secrets_remove(&s, name) == 0);
			FUZZ_CHECK(!secrets_find(&s, name));
			FUZZ_CHECK(secrets_remove(&s, name) == -ENOENT);
			r = secrets_set(&s, name, "v", 1);
			FUZZ_CHECK(r == 0 || r == -ENOMEM);
			free(name);
		}
	}
	check_bounds(&s);
	free(text);
	free(text2);
	free(why);
	secrets_done(&s);
	secrets_done(&again);
	return 0;
}
