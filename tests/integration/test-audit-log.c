/* test-audit-log.c: the audit log of the real sandboxd-fake (R-S4, docs/operation.md "The
 * audit log"): the JSONL file holds the same records GET …/events answers, 0600 in a 0700
 * directory; a log that cannot be written (its directory made read-only under the daemon)
 * never fails a request and is said in the daemon's log, once, and again when it works; it
 * rotates at --audit-max-bytes keeping 5 older generations, whole records in order; the store
 * keeps at most --audit-max-events events and a trail that lost its oldest says so;
 * --audit-log none keeps no file; a directory open to others stops the start. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

static mode_t
mode_of(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		fail_msg("'%s': %s", path, strerror(errno));
	return st.st_mode & 07777;
}

static json_t *
create(struct daemon_proc *p, const char *body)
{
	return harness_json(p->sock, "POST", "/v1/sandboxes", body, 201);
}

static void
post(struct daemon_proc *p, const char *id, const char *verb)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, verb);
	json_decref(harness_json(p->sock, "POST", path, NULL, 200));
}

/* GET …/events of id: the whole answer. */
static json_t *
trail(struct daemon_proc *p, const char *id)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", id);
	return harness_json(p->sock, "GET", path, NULL, 200);
}

/* The audit log's records about id, in file order. */
static json_t *
logged(const char *file, const char *id)
{
	json_t *out = json_array();
	char line[65536];
	FILE *f = fopen(file, "r");

	if (!f)
		fail_msg("'%s': %s", file, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		json_t *rec = json_loads(line, 0, NULL);
		if (!rec)
			fail_msg("'%s': a line that is not one JSON record: %s", file, line);
		if (strcmp(harness_str(rec, "sandbox") ?: "", id) == 0)
			json_array_append(out, rec);
		json_decref(rec);
	}
	fclose(f);
	return out;
}

static void
test_the_log_is_the_trail(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char dir[400], file[420], path[128];
	json_t *sb, *answer, *lines;
	const char *id;

	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
	sb = create(&p, "{\"name\":\"logged\",\"env\":{\"LOGGED_SECRET\":\"v4lue-in-env\"}}");
	id = harness_str(sb, "id");
	post(&p, id, "stop");
	post(&p, id, "start");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));

	/* R-S4: 0600 in a 0700 directory, by default in the state directory */
	snprintf(dir, sizeof(dir), "%s/audit", p.state);
	snprintf(file, sizeof(file), "%s/events.jsonl", dir);
	assert_int_equal(mode_of(dir), 0700);
	assert_int_equal(mode_of(file), 0600);
	/* the same records, in the same order, as the API answers */
	answer = trail(&p, id);
	lines = logged(file, id);
	assert_int_equal(json_array_size(json_object_get(answer, "events")), 5);
	if (!json_equal(json_object_get(answer, "events"), lines)) {
		char *a = json_dumps(answer, JSON_COMPACT), *b = json_dumps(lines, JSON_COMPACT);
		fail_msg("the log and GET events differ:\n%s\n%s", a, b);
	}
	assert_false(harness_file_contains(file, "v4lue-in-env"));
	json_decref(answer);
	json_decref(lines);
	json_decref(sb);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* Every line of file as a record: each a complete line holding one JSON object with the
 * audit schema's time, type and sandbox, appended to recs. Returns the file's size. */
static long
records_of(const char *file, json_t *recs)
{
	char line[65536];
	FILE *f = fopen(file, "r");
	long size;

	if (!f)
		fail_msg("'%s': %s", file, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		json_error_t err;
		json_t *rec;
		size_t len = strlen(line);

		if (len == 0 || line[len - 1] != '\n')
			fail_msg("'%s': a line cut short: %s", file, line);
		rec = json_loads(line, 0, &err);
		if (!json_is_object(rec))
			fail_msg("'%s': a line that is not one JSON object (%s): %s", file,
			         err.text, line);
		if (!harness_str(rec, "time") || !harness_str(rec, "type") ||
		    !harness_str(rec, "sandbox"))
			fail_msg("'%s': a record without time, type and sandbox: %s", file, line);
		json_array_append_new(recs, rec);
	}
	size = ftell(f);
	fclose(f);
	return size;
}

#define ROTATE_AT 8192
#define SANDBOXES 120 /* about 85 KiB of records: the log rotates ten times */

/* R-S4 with --audit-max-bytes: PATH and PATH.1 … PATH.5, never a .6; no file past the limit
 * and each older one filled up to it; 0600 in 0700; every line a whole record; no env value;
 * and the generations, oldest to newest, are one unbroken run of the trail's newest records,
 * the oldest gone. */
static void
test_the_log_rotates_at_the_limit(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	const char *const args[] = { "--audit-max-bytes", "8192", NULL };
	const char *const kinds[] = { "sandbox.created", "sandbox.started", "sandbox.stopped",
		                      "sandbox.started", "sandbox.terminated" };
	struct daemon_proc p;
	char dir[400], file[440], path[128], ids[SANDBOXES][32];
	json_t *all = json_array();
	const char *prev = "";
	size_t n, skipped;

	assert_int_equal(harness_start(&p, bin, args, NULL), 0);
	for (int i = 0; i < SANDBOXES; i++) {
		char body[128];
		json_t *sb;

		snprintf(body, sizeof(body),
		         "{\"name\":\"turn-%d\",\"env\":{\"ROTATED_SECRET\":\"r0tated-v4lue-%d\"}}",
		         i, i);
		sb = create(&p, body);
		snprintf(ids[i], sizeof(ids[i]), "%s", harness_str(sb, "id"));
		json_decref(sb);
		post(&p, ids[i], "stop");
		post(&p, ids[i], "start");
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", ids[i]);
		json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	}

	snprintf(dir, sizeof(dir), "%s/audit", p.state);
	assert_int_equal(mode_of(dir), 0700);
	for (unsigned g = 5 + 1; g-- > 0;) {
		long size;

		if (g)
			snprintf(file, sizeof(file), "%s/events.jsonl.%u", dir, g);
		else
			snprintf(file, sizeof(file), "%s/events.jsonl", dir);
		assert_int_equal(mode_of(file), 0600);
		size = records_of(file, all);
		if (size > ROTATE_AT)
			fail_msg("'%s' is %ld bytes, past --audit-max-bytes %d", file, size,
			         ROTATE_AT);
		/* a generation was rotated away when the next record did not fit: full but
		 * for less than a record */
		if (g && size < ROTATE_AT - 512)
			fail_msg("'%s' was rotated at %ld bytes, well short of %d", file, size,
			         ROTATE_AT);
		assert_false(harness_file_contains(file, "r0tated-v4lue"));
	}
	snprintf(file, sizeof(file), "%s/events.jsonl.6", dir);
	assert_int_equal(access(file, F_OK), -1);

	/* oldest to newest: the times never go back, and the records are the end of what the
	 * requests made (each sandbox's five, sandbox after sandbox), nothing missing or
	 * repeated between generations */
	n = json_array_size(all);
	assert_true(n < (size_t)SANDBOXES * 5); /* the oldest were dropped */
	skipped = (size_t)SANDBOXES * 5 - n;
	for (size_t i = 0; i < n; i++) {
		json_t *rec = json_array_get(all, i);
		size_t want = skipped + i;
		const char *time = harness_str(rec, "time");

		if (strcmp(prev, time) > 0)
			fail_msg("record %zu (%s) is older than the one before it (%s)", i, time,
			         prev);
		prev = time;
		if (strcmp(harness_str(rec, "sandbox"), ids[want / 5]) != 0 ||
		    strcmp(harness_str(rec, "type"), kinds[want % 5]) != 0) {
			char *text = json_dumps(rec, JSON_COMPACT);
			fail_msg(
			        "record %zu of the kept ones is %s; expected %s of '%s' (turn-%zu)",
			        i, text, kinds[want % 5], ids[want / 5], want / 5);
		}
		/* the creates had an env value; the log has its name only */
		if (want % 5 == 0)
			assert_string_equal(json_string_value(json_array_get(
			                            json_object_get(rec, "env_names"), 0)),
			                    "ROTATED_SECRET");
	}
	/* the newest sandbox's records are the ones GET …/events answers */
	{
		json_t *answer = trail(&p, ids[SANDBOXES - 1]), *events;
		events = json_object_get(answer, "events");
		assert_int_equal(json_array_size(events), 5);
		for (size_t i = 0; i < 5; i++)
			assert_true(json_equal(json_array_get(events, i),
			                       json_array_get(all, n - 5 + i)));
		json_decref(answer);
	}
	json_decref(all);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* Makes dir unwritable for the daemon: a read-only bind mount in the mount namespace this
 * test (and the daemon it started) runs in, as root, where permissions would not stop it;
 * a mode of 0500 otherwise. */
static void
make_unwritable(const char *dir, bool on)
{
	if (geteuid() != 0) {
		assert_int_equal(chmod(dir, on ? 0500 : 0700), 0);
		return;
	}
	if (on) {
		assert_int_equal(mount(dir, dir, NULL, MS_BIND, NULL), 0);
		assert_int_equal(mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL), 0);
	} else {
		assert_int_equal(umount(dir), 0);
	}
}

/* R-S4: a failed write never fails the request; the daemon says so, and says again when the
 * log works again. The store's trail is whole either way. */
static void
test_an_unwritable_log_fails_no_request(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	char dir[400], file[420];
	json_t *sb, *answer, *lines, *events;
	const char *id;

	if (geteuid() == 0 &&
	    (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)) {
		harness_skip_case("cannot make a mount namespace of the test's own: %s",
		                  strerror(errno));
		return;
	}
	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
	sb = create(&p, "{\"name\":\"unlogged\"}");
	id = harness_str(sb, "id");
	snprintf(dir, sizeof(dir), "%s/audit", p.state);
	snprintf(file, sizeof(file), "%s/events.jsonl", dir);

	make_unwritable(dir, true);
	post(&p, id, "stop"); /* 200, stopped: the request does not care */
	post(&p, id, "start");
	assert_true(harness_file_contains(p.log, "cannot write a record"));
	assert_true(harness_file_contains(p.log, "requests go on"));
	make_unwritable(dir, false);
	post(&p, id, "stop");
	assert_true(
	        harness_file_contains(p.log, "written again; 2 record(s) could not be written"));

	/* the store kept everything; the log has what it could write */
	answer = trail(&p, id);
	events = json_object_get(answer, "events");
	assert_int_equal(json_array_size(events),
	                 5); /* created, started, stopped, started, stopped */
	lines = logged(file, id);
	assert_int_equal(json_array_size(lines), 3);
	assert_true(json_equal(json_array_get(lines, 0), json_array_get(events, 0)));
	assert_true(json_equal(json_array_get(lines, 2), json_array_get(events, 4)));
	json_decref(answer);
	json_decref(lines);
	json_decref(sb);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* --audit-max-events bounds the store (applied at startup and every minute): the oldest go
 * first, and a sandbox's trail that lost its start says it was truncated. */
static void
test_the_store_is_bounded(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	/* the stopped sandbox outlives the restart: its trail is what is bounded */
	const char *const args[] = { "--audit-max-events", "1000", "--keep-sandboxes", NULL };
	struct daemon_proc p;
	json_t *sb, *answer, *events;
	char path[128], id[32], body[64];

	assert_int_equal(harness_start(&p, bin, args, NULL), 0);
	sb = create(&p, "{\"name\":\"chatty\"}");
	snprintf(id, sizeof(id), "%s", harness_str(sb, "id"));
	json_decref(sb);
	/* each change of labels is an event of the stream's (not the trail's): 1100 of them */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	for (int i = 0; i < 1100; i++) {
		snprintf(body, sizeof(body), "{\"labels\":{\"n\":\"%d\"}}", i);
		json_decref(harness_json(p.sock, "PATCH", path, body, 200));
	}
	post(&p, id, "stop");
	answer = trail(&p, id);
	assert_false(json_is_true(json_object_get(answer, "truncated")));
	json_decref(answer);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);

	assert_int_equal(harness_restart(&p, bin, args, NULL), 0);
	assert_true(harness_file_contains(p.log, "oldest event(s) past --audit-max-events 1000"));
	answer = trail(&p, id);
	events = json_object_get(answer, "events");
	assert_true(json_is_true(json_object_get(answer, "truncated")));
	assert_int_equal(json_array_size(events), 1);
	assert_string_equal(harness_str(json_array_get(events, 0), "type"), "sandbox.stopped");
	json_decref(answer);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

static void
test_no_log_and_refusals(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	/* a rotation size with no log changes nothing */
	const char *const none[] = { "--audit-log", "none", "--audit-max-bytes", "4096", NULL };
	struct daemon_proc p;
	char dir[400], open_dir[300], file[320], *out = NULL;
	json_t *j;

	/* none: no file, and the trail still answers from the store */
	assert_int_equal(harness_start(&p, bin, none, NULL), 0);
	j = create(&p, "{\"name\":\"unfiled\"}");
	post(&p, harness_str(j, "id"), "stop");
	post(&p, harness_str(j, "id"), "start");
	snprintf(dir, sizeof(dir), "%s/audit", p.state);
	assert_int_equal(access(dir, F_OK), -1);
	{
		json_t *a = trail(&p, harness_str(j, "id"));
		/* created, started, stopped, started */
		assert_int_equal(json_array_size(json_object_get(a, "events")), 4);
		json_decref(a);
	}
	json_decref(j);
	j = harness_json(p.sock, "GET", "/v1/capabilities", NULL, 200);
	assert_true(json_is_true(json_object_get(json_object_get(j, "capabilities"), "audit")));
	json_decref(j);

	/* a directory others may read is refused at the start, saying what to do */
	snprintf(open_dir, sizeof(open_dir), "%s/open-audit", p.dir);
	assert_int_equal(mkdir(open_dir, 0755), 0);
	assert_int_equal(chmod(open_dir, 0755), 0);
	snprintf(file, sizeof(file), "%s/events.jsonl", open_dir);
	{
		char sd[320], sock[320];
		const char *args[] = { "--state-dir", sd,   "--socket", sock,
			               "--audit-log", file, NULL };
		snprintf(sd, sizeof(sd), "%s/other-state", p.dir);
		snprintf(sock, sizeof(sock), "%s/other.sock", p.dir);
		assert_true(harness_run_checked(bin, args, NULL, &out) != 0);
		harness_expect_in(out, "audit log directory");
		harness_expect_in(out, "chmod 700");
		free(out);
	}
	/* a rotation size under 4096 bytes is a usage error */
	{
		const char *args[] = { "--audit-max-bytes", "4095", NULL };
		assert_int_equal(harness_run_checked(bin, args, NULL, &out), 2);
		harness_expect_in(out, "--audit-max-bytes '4095' must be 4096 to 1073741824");
		free(out);
	}
	/* and a path that is no file path is a usage error */
	{
		const char *args[] = { "--audit-log", "relative/events.jsonl", NULL };
		assert_int_equal(harness_run_checked(bin, args, NULL, &out), 2);
		harness_expect_in(out, "--audit-log 'relative/events.jsonl' must be an absolute");
		free(out);
	}
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_the_log_is_the_trail),
		cmocka_unit_test(test_the_log_rotates_at_the_limit),
		cmocka_unit_test(test_the_store_is_bounded),
		cmocka_unit_test(test_no_log_and_refusals),
		/* last: it moves this process into a mount namespace of its own */
		cmocka_unit_test(test_an_unwritable_log_fails_no_request),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, NULL, NULL));
}
