/* datacases.c: see datacases.h. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "datacases.h"
#include "strv.h"

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
datacases_run(const char *group, const char *dir, const char *suffix,
              const struct CMUnitTest *fixed, size_t nfixed, CMUnitTestFunction fn)
{
	size_t slen = strlen(suffix), n = 0, ntests = 0;
	struct CMUnitTest *tests;
	char **names = NULL;
	struct dirent *de;
	DIR *d = opendir(dir);
	int r;

	if (!d) {
		fprintf(stderr, "cannot open %s: %s\n", dir, strerror(errno));
		return 1;
	}
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len <= slen || strcmp(de->d_name + len - slen, suffix) != 0)
			continue;
		if (strv_push(&names, &n, strndup(de->d_name, len - slen)) < 0) {
			strv_free(names);
			closedir(d);
			return 1;
		}
	}
	closedir(d);
	if (n > 0)
		qsort(names, n, sizeof(*names), name_cmp);
	tests = calloc(n + nfixed, sizeof(*tests));
	if (!tests)
		return 1;
	for (size_t i = 0; i < nfixed; i++)
		tests[ntests++] = fixed[i];
	for (size_t i = 0; i < n; i++)
		tests[ntests++] = (struct CMUnitTest){ .name = names[i],
			                               .test_func = fn,
			                               .initial_state = names[i] };
	r = _cmocka_run_group_tests(group, tests, ntests, NULL, NULL);
	strv_free(names);
	free(tests);
	return r;
}
