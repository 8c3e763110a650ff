/* fuzz-record.c: daemon/core/records.c, the input as a sandbox's record read back from
 * STATE/records/ at a start (--keep-sandboxes). An accepted record is within its bounds (each
 * name a valid variable name, once; each pid once; each argv non-empty and short enough),
 * writes back into bytes that read the same and write the same again, and gives a sandbox with
 * exactly its variables their values; a refused one leaves the output untouched and says why
 * (in the parser's own words: tests/unit/test-records.c checks that none quotes the input). */
#include <stdio.h>
#include <stdlib.h>
#include "fuzz.h"
#include "records.h"
#include "strv.h"
#include "util.h"

static bool
name_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > RECORD_MAX_ENV_NAME || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

static void
check_bounds(const struct record *rec)
{
	size_t total = 0;

	FUZZ_CHECK(sandbox_id_valid(rec->id));
	FUZZ_CHECK(rec->nenv <= RECORD_MAX_ENV && rec->nprocs <= RECORD_MAX_PROCS);
	for (size_t i = 0; i < rec->nenv; i++) {
		FUZZ_CHECK(rec->env[i].name && rec->env[i].value);
		FUZZ_CHECK(name_valid(rec->env[i].name));
		FUZZ_CHECK(strlen(rec->env[i].value) <= RECORD_MAX_ENV_VALUE);
		total += strlen(rec->env[i].value);
		for (size_t j = 0; j < i; j++)
			FUZZ_CHECK(!streq(rec->env[i].name, rec->env[j].name));
	}
	FUZZ_CHECK(total <= 8 * RECORD_MAX_ENV_VALUE);
	for (size_t i = 0; i < rec->nprocs; i++) {
		size_t bytes = 0;
		FUZZ_CHECK(rec->procs[i].pid > 0 && rec->procs[i].argv && rec->procs[i].argv[0]);
		for (size_t k = 0; rec->procs[i].argv[k]; k++)
			bytes += strlen(rec->procs[i].argv[k]) + 1;
		FUZZ_CHECK(bytes <= RECORD_MAX_ARGV);
		for (size_t j = 0; j < i; j++)
			FUZZ_CHECK(rec->procs[i].pid != rec->procs[j].pid);
	}
}

/* A sandbox with the record's variables, in reverse order, without values: applying gives each
 * its value. */
static void
check_apply(struct record *rec)
{
	struct sandbox *sb = sandbox_new();
	size_t nprocs = rec->nprocs;
	char *why = NULL;

	if (!sb)
		return;
	snprintf(sb->id, sizeof(sb->id), "%s", rec->id);
	sb->env = calloc(rec->nenv + 1, sizeof(*sb->env));
	for (size_t i = 0; sb->env && i < rec->nenv; i++) {
		sb->env[i].name = strdup(rec->env[rec->nenv - 1 - i].name);
		if (!sb->env[i].name)
			break;
		sb->nenv++;
	}
	if (sb->env && sb->nenv == rec->nenv) {
		struct record copy = { 0 };
		char *text = NULL;
		size_t len = 0;
		/* the values are checked against a copy, since apply moves them */
		if (record_format(rec, &text, &len) == 0 &&
		    record_parse(text, len, &copy, &why) == 0) {
			FUZZ_CHECK(record_apply(rec, sb, &why) == 0);
			for (size_t i = 0; i < sb->nenv; i++)
				FUZZ_CHECK(
				        sb->env[i].value &&
				        streq(sb->env[i].value, copy.env[copy.nenv - 1 - i].value));
			FUZZ_CHECK(sb->nkept == nprocs);
			record_done(&copy);
		}
		free(text);
	}
	free(why);
	sandbox_free(sb);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct record rec = { 0 }, again = { 0 };
	char *why = NULL, *text = NULL, *text2 = NULL;
	size_t len = 0, len2 = 0;
	int r;

	if (size > RECORD_MAX_BYTES + 1)
		return 0;
	r = record_parse((const char *)data, size, &rec, &why);
	if (r < 0) {
		FUZZ_CHECK(r == -EINVAL || r == -ENOMEM);
		FUZZ_CHECK(r == -ENOMEM || (why && *why));
		FUZZ_CHECK(rec.id[0] == '\0' && !rec.env && !rec.procs);
		free(why);
		return 0;
	}
	FUZZ_CHECK(!why);
	check_bounds(&rec);
	r = record_format(&rec, &text, &len);
	FUZZ_CHECK(r == 0 || r == -ENOMEM);
	if (r == 0) {
		r = record_parse(text, len, &again, &why);
		FUZZ_CHECK(r == 0 || r == -ENOMEM);
		if (r == 0) {
			FUZZ_CHECK(streq(again.id, rec.id) && again.nenv == rec.nenv &&
			           again.nprocs == rec.nprocs);
			FUZZ_CHECK(record_format(&again, &text2, &len2) == 0 || !text2);
			FUZZ_CHECK(!text2 || (len2 == len && memcmp(text, text2, len) == 0));
		}
	}
	check_apply(&rec);
	free(text);
	free(text2);
	free(why);
	record_done(&rec);
	record_done(&again);
	return 0;
}
