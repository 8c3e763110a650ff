/* fuzz-wwwauth.c: daemon/images/oci.c's WWW-Authenticate parser, on the header a registry (or
 * anything between sandboxd and it) sends with a 401. An accepted challenge has a realm
 * that is an http(s) URL, and values without line breaks (they become a token request's
 * URL). */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include "fuzz.h"
#include "oci.h"
#include "util.h"

static void
check_value(const char *v)
{
	if (!v)
		return;
	for (; *v; v++)
		FUZZ_CHECK(*v != '\r' && *v != '\n');
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_cleanup_free_ char *text = NULL;
	struct oci_challenge c = {};
	char *err = NULL;
	int r;

	if (size > 16384)
		return 0;
	text = strndup((const char *)data, size);
	if (!text)
		return 0;
	r = oci_challenge_parse(text, &c, &err);
	if (r == 0) {
		FUZZ_CHECK(!err);
		FUZZ_CHECK(c.realm && (str_has_prefix(c.realm, "http://") ||
		                       str_has_prefix(c.realm, "https://") ||
		                       strncasecmp(c.realm, "http", 4) == 0));
		check_value(c.realm);
		check_value(c.service);
		check_value(c.scope);
		FUZZ_CHECK(strlen(c.realm) <= strlen(text));
	} else {
		FUZZ_CHECK(r == -EINVAL || r == -EOPNOTSUPP || r == -ENOMEM);
		FUZZ_CHECK(err || r == -ENOMEM);
	}
	oci_challenge_done(&c);
	free(err);
	return 0;
}
