/* test-vm-volumes.c: volumes in real microVMs through the product sandboxd: a file one sandbox
 * writes to a volume is read by the next one after the first is deleted; a second writer is
 * refused (409) while the first holds it; readers share it, and a read-only volume refuses
 * writes in the guest (EROFS), even the guest's root's, since the drive itself is read-only;
 * the volume's file is never mounted on the host. Boots are few: each costs seconds under
 * TCG. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base64.h"
#include "harness.h"
#include "util.h"

static struct daemon_proc p;

static int
setup(void **state)
{
	return harness_start_vm(&p, NULL, NULL);
}

static int
teardown(void **state)
{
	int rc, left;

	harness_delete_all(p.sock);
	rc = harness_stop(&p, SIGTERM);
	left = harness_kill_vmms(p.state);
	harness_cleanup(&p);
	return rc == 0 && left == 0 ? 0 : -1;
}

static json_t *
create(const char *body)
{
	json_t *j = harness_json(p.sock, "POST", "/v1/sandboxes", body, 201);

	if (strcmp(harness_str(j, "state"), "running") != 0)
		fail_msg("the sandbox did not boot: %s", harness_str(j, "reason"));
	return j;
}

static void
destroy(json_t *sb)
{
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s", harness_str(sb, "id"));

	json_decref(harness_json(p.sock, "DELETE", path, NULL, 204));
	json_decref(sb);
}

/* POST …/run; returns the exit code and the decoded stdout and stderr (caller frees). */
static int
run(json_t *sb, const char *argv_json, char **out, char **err)
{
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s/run", harness_str(sb, "id"));
	_cleanup_free_ char *body = strdup_printf("{\"argv\":%s}", argv_json);
	json_t *r;
	int code;

	r = harness_json(p.sock, "POST", path, body, 200);
	code = (int)json_integer_value(json_object_get(r, "exit_code"));
	for (int i = 0; i < 2; i++) {
		const char *b64 = harness_str(r, i ? "stderr" : "stdout");
		struct buf b = BUF_INIT(64u << 20);
		assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
		if (i ? err != NULL : out != NULL)
			*(i ? err : out) = buf_steal(&b);
		else
			buf_free(&b);
	}
	json_decref(r);
	return code;
}

/* Whether the host has anything of the state directory's volumes mounted. */
static bool
host_mounts_a_volume(void)
{
	_cleanup_free_ char *dir = strdup_printf("%s/volumes", p.state);
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096];
	bool found = false;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, dir) || strstr(line, "sbxvol"))
			found = true;
	fclose(f);
	return found;
}

static void
test_a_volume_outlives_its_sandbox(void **state)
{
	json_t *a, *b, *c, *v;
	char *out = NULL, *err = NULL;

	v = harness_json(p.sock, "POST", "/v1/volumes", "{\"name\":\"data\",\"size_mb\":64}", 201);
	json_decref(v);

	/* a reader's drive comes up (QEMU takes a read-only descriptor for it), empty */
	a = create("{\"volumes\":[{\"name\":\"data\",\"path\":\"/mnt/data\","
	           "\"read_only\":true}]}");
	if (run(a, "[\"test\",\"-b\",\"/dev/vdc\"]", NULL, NULL) != 0)
		fail_msg("the guest has no /dev/vdc");
	destroy(a);

	/* the first sandbox writes it, as the sandbox user: the volume's root is theirs; it
	 * syncs nothing, and its delete still leaves what it wrote on the volume */
	a = create("{\"volumes\":[{\"name\":\"data\",\"path\":\"/mnt/data\"}]}");
	/* the drive after the layer */
	if (run(a, "[\"test\",\"-b\",\"/dev/vdc\"]", NULL, NULL) != 0)
		fail_msg("the guest has no /dev/vdc");
	if (run(a,
	        "[\"sh\",\"-c\",\"id -u && echo written-by-a > /mnt/data/note && "
	        "mkdir /mnt/data/dir && grep ' /mnt/data ' /proc/mounts\"]",
	        &out, &err) != 0)
		fail_msg("writing the volume failed: %s%s", out, err);
	harness_expect_in(out, "1001\n");
	harness_expect_in(out, " /mnt/data ext4 rw");
	free(out);
	free(err);
	assert_false(host_mounts_a_volume());

	/* a second writer, and a reader beside the writer, are refused while it holds it */
	json_decref(harness_json(p.sock, "POST", "/v1/sandboxes",
	                         "{\"volumes\":[{\"name\":\"data\",\"path\":\"/mnt/data\"}]}",
	                         409));
	json_decref(harness_json(
	        p.sock, "POST", "/v1/sandboxes",
	        "{\"volumes\":[{\"name\":\"data\",\"path\":\"/mnt/d\",\"read_only\":true}]}", 409));
	destroy(a);

	/* the next ones read it: two readers at once, elsewhere in their trees */
	b = create("{\"volumes\":[{\"name\":\"data\",\"path\":\"/sandbox/data\","
	           "\"read_only\":true}]}");
	c = create("{\"volumes\":[{\"name\":\"data\",\"path\":\"/mnt/ro\",\"read_only\":true}]}");
	assert_int_equal(run(b, "[\"cat\",\"/sandbox/data/note\"]", &out, NULL), 0);
	assert_string_equal(out, "written-by-a\n");
	free(out);
	assert_int_equal(run(c, "[\"cat\",\"/mnt/ro/note\"]", &out, NULL), 0);
	assert_string_equal(out, "written-by-a\n");
	free(out);

	/* a read-only volume refuses writes in the guest: a new file, and the old one */
	assert_true(run(b, "[\"sh\",\"-c\",\"echo x > /sandbox/data/other\"]", NULL, &err) != 0);
	harness_expect_in(err, "Read-only file system");
	free(err);
	assert_true(run(c, "[\"sh\",\"-c\",\"echo x >> /mnt/ro/note\"]", NULL, &err) != 0);
	harness_expect_in(err, "Read-only file system");
	free(err);
	/* and no writer while readers hold it */
	json_decref(harness_json(p.sock, "POST", "/v1/sandboxes",
	                         "{\"volumes\":[{\"name\":\"data\",\"path\":\"/mnt/data\"}]}",
	                         409));
	assert_int_equal(run(b, "[\"cat\",\"/sandbox/data/note\"]", &out, NULL), 0);
	assert_string_equal(out, "written-by-a\n");
	free(out);

	json_decref(harness_json(p.sock, "DELETE", "/v1/volumes/data", NULL, 409));
	destroy(b);
	destroy(c);
	assert_int_equal(harness_http(p.sock, "DELETE", "/v1/volumes/data", NULL, &out), 204);
	free(out);
	assert_false(host_mounts_a_volume());
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_volume_outlives_its_sandbox),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
