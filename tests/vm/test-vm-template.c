/* test-vm-template.c: creates that restore instead of boot, on real microVMs through the
 * product sandboxd. The first sandbox of an image boots cold; a template of it appears in the
 * background; the next creates restore from it (the log says which), run commands, each with a
 * hostname and machine-id of its own and files of its own (a file one clone wrote is not in
 * the next); a clone suspends and resumes; a template whose state was cut short is not used:
 * that create boots cold and says so. Prints create→first exec times (cold and restored). */
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
#include <time.h>
#include <unistd.h>
#include "base64.h"
#include "buf.h"
#include "harness.h"

static struct daemon_proc p;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* POST …/run in sandbox id; its exit code, and stdout's first line into out. */
static int
run(const char *id, const char *argv_json, char *out, size_t n)
{
	char path[128], body[1024];
	struct buf b = BUF_INIT(1u << 20);
	const char *b64;
	json_t *r;
	int code;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	snprintf(body, sizeof(body), "{\"argv\":%s}", argv_json);
	r = harness_json_timeout(p.sock, "POST", path, body, 300000, 200);
	code = (int)json_integer_value(json_object_get(r, "exit_code"));
	b64 = harness_str(r, "stdout");
	assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
	assert_int_equal(buf_putc(&b, '\0'), 0);
	snprintf(out, n, "%s", (char *)b.data);
	out[strcspn(out, "\n")] = '\0';
	buf_free(&b);
	json_decref(r);
	return code;
}

/* Creates a sandbox and runs a first command in it: the seconds that took. */
static double
create(char *id, size_t n)
{
	double t0 = now_s();
	char out[64];
	json_t *j = harness_json_timeout(p.sock, "POST", "/v1/sandboxes", "{}", 600000, 201);

	if (strcmp(harness_str(j, "state"), "running") != 0)
		fail_msg("the sandbox did not start: %s", harness_str(j, "reason"));
	snprintf(id, n, "%s", harness_str(j, "id"));
	json_decref(j);
	assert_int_equal(run(id, "[\"echo\",\"ok\"]", out, sizeof(out)), 0);
	assert_string_equal(out, "ok");
	return now_s() - t0;
}

static bool
logged(const char *id, const char *what)
{
	char needle[160];

	snprintf(needle, sizeof(needle), "sandbox '%s': %s", id, what);
	return harness_file_contains(p.log, needle);
}

/* The one template's directory, once it is built (waits up to 10 minutes). */
static void
wait_template(char *dir, size_t n)
{
	char tdir[400];

	snprintf(tdir, sizeof(tdir), "%s/templates", p.state);
	for (int i = 0; i < 600; i++) {
		DIR *d = opendir(tdir);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (e->d_name[0] == '.' || strchr(e->d_name, '.'))
				continue;
			snprintf(dir, n, "%s/%s", tdir, e->d_name);
			closedir(d);
			return;
		}
		if (d)
			closedir(d);
		sleep(1);
	}
	harness_print_log_tail(&p, 40);
	fail_msg("no template was built");
}

/* The PSS of sandbox id's VMM in MiB (its pid from vm.json), -1 when unknown. */
static long
pss_mib(const char *id)
{
	char path[500], line[256];
	json_t *j;
	long pid, kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/vms/%s/vm.json", p.state, id);
	j = json_load_file(path, 0, NULL);
	pid = j ? (long)json_integer_value(json_object_get(j, "pid")) : 0;
	json_decref(j);
	snprintf(path, sizeof(path), "/proc/%ld/smaps_rollup", pid);
	f = pid > 0 ? fopen(path, "re") : NULL;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "Pss:", 4) == 0)
			kib = strtol(line + 4, NULL, 10);
	if (f)
		fclose(f);
	return kib < 0 ? -1 : kib / 1024;
}

static void
remove_sandbox(const char *id)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json_timeout(p.sock, "DELETE", path, NULL, 120000, 204));
}

static void
test_creates_restore_from_the_template(void **state _unused_)
{
	char a[48], b[48], c[48], d[48], tdir[400], path[500], out[128];
	char host_b[80], host_c[80], mid_b[80], mid_c[80];
	double cold, warm1, warm2, fallback, refused;
	char e[48];

	cold = create(a, sizeof(a));
	assert_true(logged(a, "cold boot"));
	wait_template(tdir, sizeof(tdir));

	warm1 = create(b, sizeof(b));
	if (!logged(b, "restored from template")) {
		harness_print_log_tail(&p, 40);
		fail_msg("the second create did not restore from the template");
	}
	assert_int_equal(
	        run(b, "[\"sh\",\"-c\",\"echo mine > /sandbox/home/mine\"]", out, sizeof(out)), 0);
	assert_int_equal(run(b, "[\"hostname\"]", host_b, sizeof(host_b)), 0);
	assert_int_equal(run(b, "[\"cat\",\"/etc/machine-id\"]", mid_b, sizeof(mid_b)), 0);

	warm2 = create(c, sizeof(c));
	assert_true(logged(c, "restored from template"));
	assert_int_equal(run(c, "[\"hostname\"]", host_c, sizeof(host_c)), 0);
	assert_int_equal(run(c, "[\"cat\",\"/etc/machine-id\"]", mid_c, sizeof(mid_c)), 0);
	assert_string_not_equal(host_b, host_c);
	assert_string_not_equal(mid_b, mid_c);
	assert_int_equal(strlen(mid_c), 32);
	/* its files are its own: what b wrote is not in c */
	assert_int_not_equal(run(c, "[\"cat\",\"/sandbox/home/mine\"]", out, sizeof(out)), 0);
	assert_int_equal(run(b, "[\"cat\",\"/sandbox/home/mine\"]", out, sizeof(out)), 0);
	assert_string_equal(out, "mine");

	/* a clone suspends (all of its RAM into its state) and resumes onto plain RAM */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/suspend", c);
	json_decref(harness_json_timeout(p.sock, "POST", path, NULL, 300000, 200));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/resume", c);
	json_decref(harness_json_timeout(p.sock, "POST", path, NULL, 300000, 200));
	assert_int_equal(run(c, "[\"cat\",\"/etc/machine-id\"]", out, sizeof(out)), 0);
	assert_string_equal(out, mid_c);

	/* a template whose stream QEMU refuses: that create boots cold and says so, and the
	 * template is built again */
	snprintf(path, sizeof(path), "%s/state.mig", tdir);
	{
		FILE *f = fopen(path, "r+");
		static const char junk[4096] = { 'x' };
		assert_non_null(f);
		assert_int_equal(fseek(f, 2048, SEEK_SET), 0);
		assert_int_equal(fwrite(junk, 1, sizeof(junk), f), sizeof(junk));
		assert_int_equal(fclose(f), 0);
	}
	refused = create(e, sizeof(e));
	assert_true(logged(e, "template restore failed"));
	assert_true(logged(e, "cold boot"));
	sleep(1);
	wait_template(tdir, sizeof(tdir));

	/* a template cut short is not used: the create boots cold and says so */
	snprintf(path, sizeof(path), "%s/state.mig", tdir);
	assert_int_equal(truncate(path, 100), 0);
	fallback = create(d, sizeof(d));
	assert_true(logged(d, "template restore failed"));
	assert_true(logged(d, "cold boot"));

	fprintf(stderr,
	        "test-vm-template: create to first exec: cold %.2f s, from the template %.2f s "
	        "and %.2f s, falling back %.2f s and %.2f s; VMM PSS: cold %ld MiB, clones %ld and "
	        "%ld MiB\n",
	        cold, warm1, warm2, refused, fallback, pss_mib(a), pss_mib(b), pss_mib(c));
	remove_sandbox(a);
	remove_sandbox(b);
	remove_sandbox(c);
	remove_sandbox(d);
	remove_sandbox(e);
}

static int
setup(void **state _unused_)
{
	return harness_start_vm(&p, NULL, NULL);
}

static int
teardown(void **state _unused_)
{
	int rc;

	(void)harness_delete_all(p.sock);
	rc = harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
	return rc == 0 ? 0 : -1;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_creates_restore_from_the_template),
	};

	harness_vm_bundle();
	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
