/* test-vm-suspend.c: suspend and resume through the API on real microVMs (issue 16). A process
 * counting once a second survives a suspend and a resume and continues from its count; a file
 * survives; a suspended sandbox has no VMM process; 20 suspend/resume cycles, each writing a
 * new file and checking the SHA-256 of every earlier one, lose nothing; with --keep-sandboxes
 * a suspended sandbox stays suspended across a restart of sandboxd and resumes after it. (The
 * backend alone is tests/vm/test-vm-suspend-backend.c's; the API's moves on the fake backend
 * are tests/integration/test-suspend.c's.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base64.h"
#include "buf.h"
#include "harness.h"
#include "util.h"

#define KEEP_ARGS                                                                                  \
	(const char *const[])                                                                      \
	{                                                                                          \
		"--keep-sandboxes", "--accel", "tcg", "--default-image", "busybox", NULL           \
	}

static struct daemon_proc p;

static int
setup(void **state)
{
	(void)state;
	return harness_start_vm(&p, KEEP_ARGS, NULL);
}

static int
teardown(void **state)
{
	int del = harness_delete_all(p.sock);
	int rc;

	(void)state;
	/* with --keep-sandboxes the VMs would outlive it: every one was deleted first */
	rc = harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
	return rc == 0 && del == 0 ? 0 : -1;
}

static void
create(const char *body, char id[static 64])
{
	json_t *j = harness_json_timeout(p.sock, "POST", "/v1/sandboxes", body, 120000, 201);

	if (!streq(harness_str(j, "state") ?: "", "running"))
		fail_msg("the sandbox did not boot: %s", harness_str(j, "reason"));
	snprintf(id, 64, "%s", harness_str(j, "id"));
	json_decref(j);
}

/* POST …/verb; the sandbox is want_state after it. Returns how long it took (ms). */
static int64_t
post(const char *id, const char *verb, const char *want_state)
{
	char path[128];
	int64_t t0 = now_mono_ms();
	json_t *j;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, verb);
	j = harness_json_timeout(p.sock, "POST", path, NULL, 120000, 200);
	if (!streq(harness_str(j, "state") ?: "", want_state))
		fail_msg("%s: the sandbox is %s (%s), expected %s", verb, harness_str(j, "state"),
		         harness_str(j, "reason") ?: "", want_state);
	json_decref(j);
	return now_mono_ms() - t0;
}

/* Runs a shell line in the sandbox; returns its stdout (caller frees), exit 0 asserted. */
static char *
sh(const char *id, const char *line)
{
	char path[128];
	struct buf b = BUF_INIT(1u << 20);
	json_t *body = json_pack("{s:[s,s,s]}", "argv", "sh", "-c", line), *j;
	char *text = json_dumps(body, JSON_COMPACT);
	const char *b64;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	j = harness_json_timeout(p.sock, "POST", path, text, 120000, 200);
	free(text);
	json_decref(body);
	if (json_integer_value(json_object_get(j, "exit_code")) != 0)
		fail_msg("'%s' exited %d", line,
		         (int)json_integer_value(json_object_get(j, "exit_code")));
	b64 = harness_str(j, "stdout");
	assert_non_null(b64);
	assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
	json_decref(j);
	return buf_steal(&b);
}

/* Whether a VMM process of sandbox id runs: its name is qemu-sbx-<first 6 hex>, and its
 * command line names the sandbox's directory. */
static bool
vmm_runs(const char *id)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	bool found = false;

	assert_non_null(d);
	while (!found && (e = readdir(d))) {
		char path[300];
		_cleanup_free_ char *cmd = NULL;
		size_t n = 0;
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		if (read_file_max(path, 1 << 16, &cmd, &n) < 0)
			continue;
		for (size_t i = 0; i + 1 < n; i++)
			if (cmd[i] == '\0')
				cmd[i] = ' ';
		found = strstr(cmd, "qemu") && strstr(cmd, id);
	}
	closedir(d);
	return found;
}

/* The counter's lines are 0, 1, 2, ... with none missing or repeated; returns how many. */
static long
consecutive(const char *text)
{
	_cleanup_free_ char *copy = strdup(text);
	char *save = NULL;
	long want = 0;

	assert_non_null(copy);
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		uint64_t v;
		if (parse_u64(line, &v) < 0 || v != (uint64_t)want)
			fail_msg("the counter wrote '%s' where %ld was due:\n%s", line, want, text);
		want++;
	}
	return want;
}

/* Issue 16's done-when: a process counting once a second survives suspend and resume and
 * continues from its count; a file survives; a suspended sandbox has no VMM process. */
static void
test_counter_and_file_survive(void **state)
{
	char id[64], path[160];
	char *text;
	long before, after;
	json_t *j;

	(void)state;
	create("{\"memory_mb\":256}", id);
	free(sh(id, "echo 'kept across a suspend' > /sandbox/home/note"));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	json_decref(harness_json(p.sock, "POST", path,
	                         "{\"argv\":[\"sh\",\"-c\",\"i=0; while :; do echo $i >> "
	                         "/sandbox/home/count; i=$((i+1)); sleep 1; done\"]}",
	                         201));
	sleep(3);
	assert_true(vmm_runs(id));
	print_message("suspend: %lld ms\n", (long long)post(id, "suspend", "suspended"));
	assert_false(vmm_runs(id));
	sleep(2);
	assert_false(vmm_runs(id));
	print_message("resume: %lld ms\n", (long long)post(id, "resume", "running"));
	assert_true(vmm_runs(id));
	text = sh(id, "cat /sandbox/home/count");
	before = consecutive(text);
	free(text);
	assert_true(before >= 2);
	sleep(3);
	text = sh(id, "cat /sandbox/home/count");
	after = consecutive(text);
	free(text);
	/* it carried on from its count (nothing repeated or skipped), and counts still */
	assert_true(after > before);
	text = sh(id, "cat /sandbox/home/note");
	assert_string_equal(text, "kept across a suspend\n");
	free(text);
	/* the process is the same one, still running */
	j = harness_json(p.sock, "GET", path, NULL, 200);
	assert_int_equal(json_array_size(json_object_get(j, "processes")), 1);
	assert_string_equal(
	        harness_str(json_array_get(json_object_get(j, "processes"), 0), "state"),
	        "running");
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
}

/* A soak: 20 suspend/resume cycles, each writing a new file and checking the hashes of all the
 * earlier ones (a peer's users lost file changes after the second cycle). */
static void
test_twenty_cycles_lose_nothing(void **state)
{
	char id[64], line[512], path[128];
	struct buf sums = BUF_INIT(1u << 16);
	int64_t suspend_ms = 0, resume_ms = 0;

	(void)state;
	create("{\"memory_mb\":256}", id);
	for (int i = 0; i < 20; i++) {
		char *out;
		snprintf(line, sizeof(line),
		         "head -c 65536 /dev/urandom > /sandbox/home/f%02d && sync && sha256sum "
		         "/sandbox/home/f%02d",
		         i, i);
		out = sh(id, line);
		assert_int_equal(buf_append(&sums, out, strlen(out)), 0);
		free(out);
		suspend_ms += post(id, "suspend", "suspended");
		resume_ms += post(id, "resume", "running");
		out = sh(id, "sha256sum /sandbox/home/f*");
		if (strlen(out) != sums.len || memcmp(out, sums.data, sums.len) != 0)
			fail_msg("cycle %d: the files changed:\nwas:\n%.*s\nis:\n%s", i,
			         (int)sums.len, sums.data, out);
		free(out);
	}
	print_message("20 cycles: suspend %lld ms, resume %lld ms on average\n",
	              (long long)(suspend_ms / 20), (long long)(resume_ms / 20));
	buf_free(&sums);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
}

/* With --keep-sandboxes a suspended sandbox stays suspended across a restart of sandboxd (no
 * VMM meanwhile) and resumes after it, its file and its counter with it. */
static void
test_suspended_survives_restart(void **state)
{
	char id[64], path[160];
	char *text;
	long before;
	json_t *j;

	(void)state;
	create("{\"memory_mb\":256}", id);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
	json_decref(harness_json(p.sock, "POST", path,
	                         "{\"argv\":[\"sh\",\"-c\",\"i=0; while :; do echo $i >> "
	                         "/sandbox/home/count; i=$((i+1)); sleep 1; done\"],"
	                         "\"keep\":true}",
	                         201));
	free(sh(id, "echo 'kept across a restart' > /sandbox/home/note"));
	sleep(2);
	post(id, "suspend", "suspended");
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_false(vmm_runs(id));
	assert_int_equal(harness_restart(&p, harness_binary("SANDBOXD"), KEEP_ARGS, NULL), 0);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	assert_string_equal(harness_str(j, "state"), "suspended");
	json_decref(j);
	assert_false(vmm_runs(id));
	post(id, "resume", "running");
	text = sh(id, "cat /sandbox/home/note");
	assert_string_equal(text, "kept across a restart\n");
	free(text);
	text = sh(id, "cat /sandbox/home/count");
	before = consecutive(text);
	free(text);
	sleep(3);
	text = sh(id, "cat /sandbox/home/count");
	assert_true(consecutive(text) > before);
	free(text);
	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counter_and_file_survive),
		cmocka_unit_test(test_twenty_cycles_lose_nothing),
		cmocka_unit_test(test_suspended_survives_restart),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
