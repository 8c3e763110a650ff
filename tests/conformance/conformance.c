/* conformance.c: main() of the conformance suite: runs every case in cases.def against the
 * server named by SANDBOX_CONFORMANCE_ENDPOINT and exits non-zero if any failed. */
#include <stdio.h>
#include <stdlib.h>
#include "cases.h"
#include "conf.h"
#include "util.h"

static const struct CMUnitTest cases[] = {
#define CASE(n)                                                                                    \
	{ .name = #n,                                                                              \
	  .test_func = case_##n,                                                                   \
	  .setup_func = conf_case_setup,                                                           \
	  .teardown_func = conf_case_teardown },
#include "cases.def"
#undef CASE
};

static const char usage[] =
        "usage: conformance [--list] [PATTERN]\n"
        "\n"
        "Runs the API v1 conformance cases (those matching PATTERN, a cmocka pattern with *\n"
        "and ?; also $CONFORMANCE_FILTER) against a running server:\n"
        "  SANDBOX_CONFORMANCE_ENDPOINT  http://HOST:PORT, https://HOST:PORT or unix:///PATH\n"
        "  SANDBOX_CONFORMANCE_TOKEN     the bearer token (may be empty on a unix socket)\n"
        "  SANDBOX_CONFORMANCE_CA        a CA file for https (optional)\n"
        "Every sandbox a case creates is labelled conformance=1 and deleted when it ends.\n";

int
main(int argc, char **argv)
{
	const char *filter = getenv("CONFORMANCE_FILTER");
	int failed;

	if (argc > 1 && (streq(argv[1], "-h") || streq(argv[1], "--help"))) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc > 1 && streq(argv[1], "--list")) {
		for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
			printf("%s\n", cases[i].name);
		return 0;
	}
	if (argc > 2) {
		fputs(usage, stderr);
		return 2;
	}
	if (argc > 1)
		filter = argv[1];
	if (conf_init() < 0) {
		conf_done();
		return 2;
	}
	if (filter && *filter)
		cmocka_set_test_filter(filter);
	printf("conformance: %s (run %s)\n", conf_endpoint(), conf_run_id());
	fflush(stdout);
	failed = _cmocka_run_group_tests("conformance", cases, ARRAY_SIZE(cases), NULL, NULL);
	conf_done();
	return failed ? 1 : 0;
}
