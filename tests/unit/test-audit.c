/* test-audit.c: the audit trail (daemon/core/audit.c): each event's flat record has exactly
 * its type's fields and never an argument or an environment value; events without a record
 * have none; and the JSONL log (R-S4): 0600 in a 0700 directory, rotated at 8 MiB keeping 5
 * generations oldest-first, a record longer than the limit whole in a file of its own, a
 * looser file tightened, an insecure directory refused, and a log that cannot be written
 * never stops the next records once it can. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "audit.h"
#include "sandbox.h"
#include "util.h"

static struct sandbox *
sandbox_of(const char *id)
{
	struct sandbox *sb = sandbox_new();

	assert_non_null(sb);
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	return sb;
}

/* The record of (type, data) as an object, or NULL when the event has none. */
static json_t *
record(const char *type, const char *data_json)
{
	struct sandbox *sb = sandbox_of("sbx_00000000000000a1");
	json_t *data = json_loads(data_json, 0, NULL);
	char *text = NULL;
	json_t *rec;

	assert_non_null(data);
	/* 2026-12-01T10:00:00.042Z */
	assert_int_equal(audit_record(type, data, sb, 1796119200042, &text), 0);
	json_decref(data);
	sandbox_free(sb);
	if (!text)
		return NULL;
	rec = json_loads(text, 0, NULL);
	assert_non_null(rec);
	free(text);
	return rec;
}

/* rec is {"time","type","sandbox"} plus exactly fields (a NULL-terminated list). */
static void
assert_shape(const json_t *rec, const char *type, const char *const *fields)
{
	size_t n = 3;

	assert_string_equal(json_string_value(json_object_get(rec, "time")),
	                    "2026-12-01T10:00:00.042Z");
	assert_string_equal(json_string_value(json_object_get(rec, "type")), type);
	assert_string_equal(json_string_value(json_object_get(rec, "sandbox")),
	                    "sbx_00000000000000a1");
	for (; *fields; fields++, n++)
		if (!json_object_get(rec, *fields))
			fail_msg("%s: no \"%s\"", type, *fields);
	if (json_object_size(rec) != n) {
		char *t = json_dumps(rec, JSON_COMPACT);
		fail_msg("%s: %zu members, expected %zu: %s", type, json_object_size(rec), n, t);
	}
}

static void
test_sandbox_records(void **state)
{
	static const char *const created[] = { "name",      "image",    "labels",  "network",
		                               "env_names", "snapshot", "volumes", NULL };
	static const char *const reason[] = { "reason", NULL };
	static const char *const network[] = { "network", NULL };
	static const char *const none[] = { NULL };
	json_t *r;

	/* what lifecycle.c records: cpus and the rest are the sandbox's, not the trail's */
	r = record("created", "{\"name\":\"web\",\"image\":\"busybox\",\"cpus\":1,\"memory_mb\":"
	                      "256,\"disk_mb\":1024,\"network\":{\"mode\":\"none\",\"allow\":[],"
	                      "\"deny\":[]},\"labels\":{\"a\":\"b\"},\"env_names\":[\"TOKEN\"]}");
	assert_shape(r, "sandbox.created", created);
	assert_true(json_is_null(json_object_get(r, "snapshot")));
	assert_int_equal(json_array_size(json_object_get(r, "volumes")), 0);
	assert_string_equal(json_string_value(json_object_get(r, "name")), "web");
	json_decref(r);

	r = record("state", "{\"from\":\"starting\",\"to\":\"running\"}");
	assert_shape(r, "sandbox.started", none);
	json_decref(r);
	r = record("state", "{\"from\":\"resuming\",\"to\":\"running\"}");
	assert_shape(r, "sandbox.resumed", none);
	json_decref(r);
	r = record("state", "{\"from\":\"stopping\",\"to\":\"stopped\"}");
	assert_shape(r, "sandbox.stopped", none);
	json_decref(r);
	r = record("state", "{\"from\":\"suspending\",\"to\":\"suspended\"}");
	assert_shape(r, "sandbox.suspended", none);
	json_decref(r);
	r = record("state", "{\"from\":\"starting\",\"to\":\"failed\",\"reason\":\"no boot\"}");
	assert_shape(r, "sandbox.failed", reason);
	assert_string_equal(json_string_value(json_object_get(r, "reason")), "no boot");
	json_decref(r);
	r = record("state", "{\"from\":\"running\",\"to\":\"terminated\",\"reason\":\"it was "
	                    "idle past its idle timeout\",\"end\":\"idle\"}");
	assert_shape(r, "sandbox.terminated", reason);
	assert_string_equal(json_string_value(json_object_get(r, "reason")), "idle");
	json_decref(r);
	r = record("destroy_failed", "{\"reason\":\"could not be removed: EIO\"}");
	assert_shape(r, "sandbox.failed", reason);
	json_decref(r);
	r = record("updated", "{\"fields\":[\"network\"],\"network\":{\"mode\":\"allowlist\","
	                      "\"allow\":[\"a.org\"],\"deny\":[]}}");
	assert_shape(r, "sandbox.network_updated", network);
	json_decref(r);

	/* the moves between, and changes of names or labels, make no record */
	assert_null(record("state", "{\"from\":\"pending\",\"to\":\"starting\"}"));
	assert_null(record("state", "{\"from\":\"running\",\"to\":\"stopping\"}"));
	assert_null(record("updated", "{\"fields\":[\"labels\"]}"));
	assert_null(record("image.progress", "{}"));
}

static void
test_process_file_egress_records(void **state)
{
	static const char *const started[] = { "pid", "program",   "arg_count", "args_sha256",
		                               "cwd", "env_names", NULL };
	static const char *const exited[] = { "pid", "exit_code", "duration_ms", NULL };
	static const char *const file[] = { "path", "bytes", NULL };
	static const char *const egress[] = { "name", "port", "reason", "bytes", NULL };
	json_t *r;
	char *text;

	/* whatever else an event carries (the stream's "keep", an argv someone added) stays out */
	r = record("process.started",
	           "{\"pid\":7,\"program\":\"echo\",\"arg_count\":1,\"args_sha256\":\"ab\",\"cwd\":"
	           "\"/tmp\",\"env_names\":[\"K\"],\"keep\":false,\"argv\":[\"echo\",\"secret\"],"
	           "\"env\":{\"K\":\"v4lue\"}}");
	assert_shape(r, "process.started", started);
	text = json_dumps(r, JSON_COMPACT);
	assert_null(strstr(text, "secret"));
	assert_null(strstr(text, "v4lue"));
	free(text);
	json_decref(r);
	r = record("process.exited", "{\"pid\":7,\"exit_code\":0,\"duration_ms\":12}");
	assert_shape(r, "process.exited", exited);
	json_decref(r);
	r = record("file.written", "{\"path\":\"/a\",\"bytes\":3}");
	assert_shape(r, "file.written", file);
	json_decref(r);
	r = record("file.read", "{\"path\":\"/a\",\"bytes\":3}");
	assert_shape(r, "file.read", file);
	json_decref(r);
	r = record("file.removed", "{\"path\":\"/a\",\"bytes\":3}");
	assert_shape(r, "file.removed", file);
	json_decref(r);
	/* a connection: bytes both ways together; the proxy's detail is the stream's */
	r = record("egress.allowed",
	           "{\"via\":\"tls\",\"name\":\"a.org\",\"port\":443,\"verdict\":"
	           "\"allowed\",\"reason\":\"on the allow list\",\"addr\":"
	           "\"192.0.2.1\",\"bytes_out\":10,\"bytes_in\":32,\"cut\":false}");
	assert_shape(r, "egress.allowed", egress);
	assert_int_equal(json_integer_value(json_object_get(r, "bytes")), 42);
	json_decref(r);
	/* a refused lookup: no name can be null, no bytes moved */
	r = record("egress.denied", "{\"via\":\"dns\",\"name\":null,\"port\":53,\"verdict\":"
	                            "\"denied\",\"reason\":\"not a host name\"}");
	assert_shape(r, "egress.denied", egress);
	assert_true(json_is_null(json_object_get(r, "name")));
	assert_int_equal(json_integer_value(json_object_get(r, "bytes")), 0);
	json_decref(r);
}

/* ---- the log ---- */

struct fixture {
	char dir[64];
	char path[128];
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/test-audit.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/audit/events.jsonl", f->dir);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static mode_t
mode_of(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		fail_msg("'%s': %s", path, strerror(errno));
	return st.st_mode & 07777;
}

/* "{"n":N,"pad":"xxx..."}": a record about 4 KiB long that says its number. */
static char *
numbered(unsigned n)
{
	char pad[4000];

	memset(pad, 'x', sizeof(pad) - 1);
	pad[sizeof(pad) - 1] = '\0';
	return strdup_printf("{\"n\":%u,\"pad\":\"%s\"}", n, pad);
}

/* The numbers of the records in a generation, checking each line is one whole record. */
static void
numbers_in(const char *path, unsigned *ret_first, unsigned *ret_last, uint64_t *ret_size)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	bool first = true;
	char *save = NULL;

	assert_int_equal(read_file_max(path, 16u << 20, &text, &len), 0);
	*ret_size = len;
	assert_true(len > 0 && text[len - 1] == '\n');
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		json_t *j = json_loads(l, 0, NULL);
		unsigned n;
		if (!j)
			fail_msg("'%s': a line that is no record: %.60s", path, l);
		n = (unsigned)json_integer_value(json_object_get(j, "n"));
		json_decref(j);
		if (first)
			*ret_first = n;
		else if (n != *ret_last + 1)
			fail_msg("'%s': record %u follows %u", path, n, *ret_last);
		first = false;
		*ret_last = n;
	}
}

/* R-S4: 0600 in 0700, rotated at 8 MiB, 5 generations kept, no generation overwritten: the
 * records run on without a gap from the oldest kept to the newest. */
static void
test_log_rotates_and_keeps_five(void **state)
{
	struct fixture *f = *state;
	struct audit_log *l = NULL;
	_cleanup_free_ char *why = NULL, *dir = strdup_printf("%s/audit", f->dir);
	/* a little over 7 generations' worth */
	unsigned total = (unsigned)(7.5 * AUDIT_LOG_ROTATE_BYTES / 4000), next = 0;
	uint64_t size;

	assert_int_equal(audit_log_open(f->path, AUDIT_LOG_ROTATE_BYTES, AUDIT_LOG_KEEP, &l, &why),
	                 0);
	assert_int_equal(mode_of(dir), 0700);
	for (unsigned i = 0; i < total; i++) {
		_cleanup_free_ char *rec = numbered(i);
		audit_log_write(l, rec);
		if (i == 0)
			assert_int_equal(mode_of(f->path), 0600);
	}
	/* PATH.5 (oldest) … PATH.1, then PATH: one run of numbers */
	for (unsigned g = AUDIT_LOG_KEEP + 1; g-- > 0;) {
		_cleanup_free_ char *p = g ? strdup_printf("%s.%u", f->path, g) : strdup(f->path);
		unsigned first = 0, last = 0;
		numbers_in(p, &first, &last, &size);
		assert_true(size <= AUDIT_LOG_ROTATE_BYTES);
		if (g > 0)
			assert_true(size >
			            AUDIT_LOG_ROTATE_BYTES - 8192); /* full, give or take a line */
		if (g != AUDIT_LOG_KEEP)
			assert_int_equal(first, next);
		next = last + 1;
		assert_int_equal(mode_of(p), 0600);
	}
	assert_int_equal(next, total);
	{
		_cleanup_free_ char *sixth = strdup_printf("%s.%u", f->path, AUDIT_LOG_KEEP + 1);
		assert_int_equal(access(sixth, F_OK), -1);
	}
	audit_log_free(l);
}

/* A record longer than the rotation size by itself is written whole, in a generation of its
 * own: never cut, and the records either side of it go on as before (docs/operation.md). */
static void
test_log_longer_record_than_the_limit(void **state)
{
	struct fixture *f = *state;
	struct audit_log *l = NULL;
	_cleanup_free_ char *why = NULL, *long_one = numbered(2);
	_cleanup_free_ char *g1 = strdup_printf("%s.1", f->path),
	                    *g2 = strdup_printf("%s.2", f->path);
	unsigned first = 0, last = 0;
	uint64_t size;

	assert_int_equal(audit_log_open(f->path, 1024, AUDIT_LOG_KEEP, &l, &why), 0);
	audit_log_write(l, "{\"n\":1}");
	audit_log_write(l, long_one); /* about 4 KiB, past 1024 */
	audit_log_write(l, "{\"n\":3}");
	numbers_in(g2, &first, &last, &size);
	assert_true(first == 1 && last == 1);
	numbers_in(g1, &first, &last, &size);
	assert_true(first == 2 && last == 2);
	assert_int_equal(size, strlen(long_one) + 1);
	numbers_in(f->path, &first, &last, &size);
	assert_true(first == 3 && last == 3);
	audit_log_free(l);
}

static void
test_log_mode_and_directory(void **state)
{
	struct fixture *f = *state;
	struct audit_log *l = NULL;
	_cleanup_free_ char *why = NULL, *dir = strdup_printf("%s/audit", f->dir);
	_cleanup_free_ char *text = NULL;

	/* a directory open to others is refused, saying what to do */
	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(chmod(dir, 0755), 0);
	assert_int_equal(audit_log_open(f->path, 1024, 2, &l, &why), -EPERM);
	assert_non_null(strstr(why, "chmod 700"));
	assert_int_equal(chmod(dir, 0700), 0);
	free(why);
	why = NULL;
	assert_int_equal(audit_log_open(f->path, 1024, 2, &l, &why), 0);

	/* a file someone opened up is closed again at the next record */
	audit_log_write(l, "{\"n\":1}");
	assert_int_equal(chmod(f->path, 0644), 0);
	audit_log_write(l, "{\"n\":2}");
	assert_int_equal(mode_of(f->path), 0600);

	/* the directory gone (a file in its place): the record is lost, and nothing else; once
	 * it is back the next ones are written again */
	{
		_cleanup_free_ char *aside = strdup_printf("%s/aside", f->dir);
		assert_int_equal(rename(dir, aside), 0);
		assert_int_equal(write_file_atomic(dir, "", 0, 0600), 0);
		audit_log_write(l, "{\"n\":3}");
		assert_int_equal(unlink(dir), 0);
		assert_int_equal(rename(aside, dir), 0);
	}
	audit_log_write(l, "{\"n\":4}");
	assert_int_equal(read_file_max(f->path, 4096, &text, NULL), 0);
	assert_string_equal(text, "{\"n\":1}\n{\"n\":2}\n{\"n\":4}\n");
	audit_log_free(l);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sandbox_records),
		cmocka_unit_test(test_process_file_egress_records),
		cmocka_unit_test_setup_teardown(test_log_rotates_and_keeps_five, setup, teardown),
		cmocka_unit_test_setup_teardown(test_log_longer_record_than_the_limit, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_log_mode_and_directory, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
