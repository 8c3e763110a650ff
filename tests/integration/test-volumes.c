/* test-volumes.c: volumes as a person meets them through the API, against sandboxd-fake (which
 * takes volumes and attaches nothing: tests/vm/test-vm-volumes.c mounts them in real guests):
 * create, list and delete; a sparse ext4 file on the host; the node's disk counts them; a
 * create attaches them (shown on the sandbox and in its sandbox.created record); one writer or
 * many readers (409); delete refused while a sandbox holds one (409); paths outside /sandbox/
 * and /mnt/ refused (400); another user neither sees nor attaches them (404); and they outlive
 * a restart of sandboxd. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

static struct daemon_proc d;
static char metrics_addr[64];
static int metrics_port;

struct who {
	const char *email, *password, *role;
	char id[64];    /* usr_... */
	char hkey[256]; /* "Authorization: Bearer sbk_...\r\n" */
};

static struct who alice = { .email = "alice@example.com",
	                    .password = "alice-password-1",
	                    .role = "user" };
static struct who bob = { .email = "bob@example.com",
	                  .password = "bob-password-22",
	                  .role = "user" };
static struct who boss = { .email = "boss@example.com",
	                   .password = "boss-password-333",
	                   .role = "admin" };

static const char *
err_code(const json_t *j)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), "code"));
}

static const char *
err_message(const json_t *j)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), "message")) ?: "";
}

/* An error answer with this status and code whose message holds needle (NULL: any). */
static void
expect_error(const char *hdrs, const char *method, const char *path, const char *body, int status,
             const char *code, const char *needle)
{
	json_t *j = harness_json_headers(d.sock, hdrs, method, path, body, status, NULL);

	if (!err_code(j) || strcmp(err_code(j), code) != 0)
		fail_msg("%s %s %s: expected code %s, got %s", method, path, body ?: "", code,
		         err_code(j) ?: "(none)");
	if (needle && !strstr(err_message(j), needle))
		fail_msg("%s %s: the message '%s' does not say '%s'", method, path, err_message(j),
		         needle);
	json_decref(j);
}

/* The operator makes w, w signs in and makes an API key. */
static void
make_account(struct who *w)
{
	_cleanup_free_ char *body =
	        strdup_printf("{\"email\":\"%s\",\"password\":\"%s\",\"role\":\"%s\"}", w->email,
	                      w->password, w->role);
	_cleanup_free_ char *login =
	        strdup_printf("{\"email\":\"%s\",\"password\":\"%s\"}", w->email, w->password);
	char *head = NULL, *cookie, *semi, hsess[600];
	json_t *j;

	j = harness_json(d.sock, "POST", "/v1/users", body, 201);
	snprintf(w->id, sizeof(w->id), "%s", harness_str(j, "id"));
	json_decref(j);
	j = harness_json_headers(d.sock, NULL, "POST", "/v1/auth/login", login, 200, &head);
	cookie = harness_header(head, "Set-Cookie");
	assert_non_null(cookie);
	semi = strchr(cookie, ';');
	if (semi)
		*semi = '\0';
	snprintf(hsess, sizeof(hsess), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", cookie,
	         harness_str(j, "csrf_token"));
	free(cookie);
	free(head);
	json_decref(j);
	j = harness_json_headers(d.sock, hsess, "POST", "/v1/keys", "{\"name\":\"t\"}", 201, NULL);
	snprintf(w->hkey, sizeof(w->hkey), "Authorization: Bearer %s\r\n", harness_str(j, "key"));
	json_decref(j);
}

static int
setup(void **state)
{
	const char *args[] = { "--capacity-disk-mb", "20000", "--metrics-listen", metrics_addr,
		               NULL };

	metrics_port = harness_free_port();
	snprintf(metrics_addr, sizeof(metrics_addr), "127.0.0.1:%d", metrics_port);
	if (harness_start(&d, harness_binary("SANDBOXD_FAKE"), args, NULL) < 0)
		return -1;
	make_account(&alice);
	make_account(&bob);
	make_account(&boss);
	return 0;
}

static int
teardown(void **state)
{
	harness_stop(&d, SIGTERM);
	harness_cleanup(&d);
	return 0;
}

/* After each case: no sandbox and no volume left, whoever's. */
static int
case_teardown(void **state)
{
	json_t *l, *v;
	size_t i;

	harness_delete_all(d.sock);
	l = harness_json_headers(d.sock, boss.hkey, "GET", "/v1/volumes", NULL, 200, NULL);
	json_array_foreach (json_object_get(l, "volumes"), i, v) {
		const char *owner = harness_str(v, "owner");
		const char *hdrs = strcmp(owner, alice.email) == 0  ? alice.hkey
		                   : strcmp(owner, bob.email) == 0  ? bob.hkey
		                   : strcmp(owner, boss.email) == 0 ? boss.hkey
		                                                    : NULL;
		_cleanup_free_ char *path = strdup_printf("/v1/volumes/%s", harness_str(v, "name"));
		char *out = NULL;
		if (hdrs)
			json_decref(harness_json_headers(d.sock, hdrs, "DELETE", path, NULL, 204,
			                                 NULL));
		else
			(void)harness_http(d.sock, "DELETE", path, NULL, &out);
		free(out);
	}
	json_decref(l);
	return 0;
}

static json_t *
create_volume(const char *hdrs, const char *name, int size_mb)
{
	_cleanup_free_ char *body =
	        strdup_printf("{\"name\":\"%s\",\"size_mb\":%d}", name, size_mb);

	return harness_json_headers(d.sock, hdrs, "POST", "/v1/volumes", body, 201, NULL);
}

/* A create with these volumes (JSON array text) answered with status; the sandbox's id, or
 * "" when refused, into id. */
static json_t *
create_sandbox(const char *hdrs, const char *volumes, int status)
{
	_cleanup_free_ char *body = strdup_printf("{\"volumes\":%s}", volumes);

	return harness_json_headers(d.sock, hdrs, "POST", "/v1/sandboxes", body, status, NULL);
}

static long
free_disk(void)
{
	json_t *n = harness_json(d.sock, "GET", "/v1/node", NULL, 200);
	long v = (long)json_integer_value(json_object_get(json_object_get(n, "free"), "disk_mb"));

	json_decref(n);
	return v;
}

static void
test_create_list_delete(void **state)
{
	long before = free_disk();
	json_t *v, *l, *caps;
	unsigned char sb[2];
	struct stat st;
	char *metrics = NULL;
	int fd;

	caps = harness_json(d.sock, "GET", "/v1/capabilities", NULL, 200);
	assert_true(
	        json_is_true(json_object_get(json_object_get(caps, "capabilities"), "volumes")));
	json_decref(caps);

	v = create_volume(alice.hkey, "data", 64);
	assert_string_equal(harness_str(v, "name"), "data");
	assert_int_equal(json_integer_value(json_object_get(v, "size_mb")), 64);
	assert_true(json_integer_value(json_object_get(v, "bytes")) > 0);
	assert_int_equal(json_array_size(json_object_get(v, "attached")), 0);
	assert_non_null(harness_str(v, "created_at"));
	assert_true(strncmp(harness_str(v, "id"), "vol_", 4) == 0);

	/* on the host: a sparse file of the whole size holding an ext4 superblock, never
	 * mounted */
	{
		_cleanup_free_ char *file =
		        strdup_printf("%s/volumes/%s.ext4", d.state, harness_str(v, "id"));
		assert_int_equal(stat(file, &st), 0);
		assert_int_equal(st.st_size, 64 << 20);
		assert_true((uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size);
		assert_int_equal(st.st_mode & 0777, 0600);
		fd = open(file, O_RDONLY);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, sb, 2, 1024 + 56), 2);
		close(fd);
		assert_int_equal(sb[0] | sb[1] << 8, 0xEF53);
	}
	/* the node's disk counts it */
	assert_int_equal(free_disk(), before - 64);

	/* a second of the same name is 409; bad names and sizes 400 */
	expect_error(alice.hkey, "POST", "/v1/volumes", "{\"name\":\"data\",\"size_mb\":64}", 409,
	             "conflict", "data");
	expect_error(alice.hkey, "POST", "/v1/volumes", "{\"name\":\"Data\",\"size_mb\":64}", 400,
	             "invalid_request", NULL);
	expect_error(alice.hkey, "POST", "/v1/volumes", "{\"name\":\"x\",\"size_mb\":1}", 400,
	             "invalid_request", "size_mb");
	expect_error(alice.hkey, "POST", "/v1/volumes", "{\"name\":\"x\",\"size_mb\":65537}", 400,
	             "invalid_request", "size_mb");
	expect_error(alice.hkey, "POST", "/v1/volumes", "{\"name\":\"x\",\"size\":64}", 400,
	             "invalid_request", "size");
	/* more than the node has free is 503, and nothing is made */
	expect_error(alice.hkey, "POST", "/v1/volumes", "{\"name\":\"big\",\"size_mb\":60000}", 503,
	             "unavailable", "no room");

	l = harness_json_headers(d.sock, alice.hkey, "GET", "/v1/volumes", NULL, 200, NULL);
	assert_int_equal(json_array_size(json_object_get(l, "volumes")), 1);
	assert_string_equal(harness_str(json_array_get(json_object_get(l, "volumes"), 0), "name"),
	                    "data");
	json_decref(l);

	/* /metrics counts it */
	{
		const struct harness_req rq = { .port = metrics_port,
			                        .method = "GET",
			                        .path = "/metrics",
			                        .host = "127.0.0.1",
			                        .timeout_ms = 5000 };
		assert_int_equal(harness_request(&rq, &metrics), 200);
		harness_expect_in(metrics, "sandboxd_volumes 1\n");
		harness_expect_in(metrics, "sandboxd_volume_bytes ");
		free(metrics);
	}

	json_decref(harness_json_headers(d.sock, alice.hkey, "DELETE", "/v1/volumes/data", NULL,
	                                 204, NULL));
	expect_error(alice.hkey, "DELETE", "/v1/volumes/data", NULL, 404, "not_found", NULL);
	{
		_cleanup_free_ char *file =
		        strdup_printf("%s/volumes/%s.ext4", d.state, harness_str(v, "id"));
		assert_int_equal(access(file, F_OK), -1);
	}
	assert_int_equal(free_disk(), before);
	json_decref(v);
}

static void
test_one_writer_or_many_readers(void **state)
{
	json_t *a, *b, *c, *v, *events, *e;
	_cleanup_free_ char *path_a = NULL, *path_events = NULL;
	bool seen = false;
	size_t i;

	json_decref(create_volume(alice.hkey, "shared", 32));
	a = create_sandbox(alice.hkey, "[{\"name\":\"shared\",\"path\":\"/mnt/shared\"}]", 201);
	/* the sandbox shows it, read_only filled in */
	v = json_array_get(json_object_get(a, "volumes"), 0);
	assert_non_null(v);
	assert_string_equal(harness_str(v, "name"), "shared");
	assert_string_equal(harness_str(v, "path"), "/mnt/shared");
	assert_true(json_is_false(json_object_get(v, "read_only")));

	/* its audit trail says so */
	path_events = strdup_printf("/v1/sandboxes/%s/events", harness_str(a, "id"));
	events = harness_json_headers(d.sock, alice.hkey, "GET", path_events, NULL, 200, NULL);
	json_array_foreach (json_object_get(events, "events"), i, e)
		if (strcmp(harness_str(e, "type"), "sandbox.created") == 0) {
			json_t *vv = json_array_get(json_object_get(e, "volumes"), 0);
			assert_string_equal(harness_str(vv, "name"), "shared");
			seen = true;
		}
	assert_true(seen);
	json_decref(events);

	/* the list says who holds it; a delete is 409 while one does */
	{
		json_t *l = harness_json_headers(d.sock, alice.hkey, "GET", "/v1/volumes", NULL,
		                                 200, NULL);
		json_t *att = json_object_get(json_array_get(json_object_get(l, "volumes"), 0),
		                              "attached");
		assert_int_equal(json_array_size(att), 1);
		assert_string_equal(json_string_value(json_array_get(att, 0)),
		                    harness_str(a, "id"));
		json_decref(l);
	}
	expect_error(alice.hkey, "DELETE", "/v1/volumes/shared", NULL, 409, "conflict",
	             harness_str(a, "id"));

	/* a second writer, and a reader beside a writer, are 409 */
	json_decref(create_sandbox(alice.hkey, "[{\"name\":\"shared\",\"path\":\"/mnt/s\"}]", 409));
	json_decref(create_sandbox(
	        alice.hkey, "[{\"name\":\"shared\",\"path\":\"/mnt/s\",\"read_only\":true}]", 409));
	/* a stopped sandbox still holds it */
	path_a = strdup_printf("/v1/sandboxes/%s/stop", harness_str(a, "id"));
	json_decref(harness_json_headers(d.sock, alice.hkey, "POST", path_a, NULL, 200, NULL));
	json_decref(create_sandbox(alice.hkey, "[{\"name\":\"shared\",\"path\":\"/mnt/s\"}]", 409));

	/* once it is deleted: readers, any number of them, then no writer beside them */
	free(path_a);
	path_a = strdup_printf("/v1/sandboxes/%s", harness_str(a, "id"));
	json_decref(harness_json_headers(d.sock, alice.hkey, "DELETE", path_a, NULL, 204, NULL));
	b = create_sandbox(alice.hkey,
	                   "[{\"name\":\"shared\",\"path\":\"/sandbox/data\",\"read_only\":true}]",
	                   201);
	c = create_sandbox(alice.hkey,
	                   "[{\"name\":\"shared\",\"path\":\"/mnt/ro\",\"read_only\":true}]", 201);
	assert_true(json_is_true(
	        json_object_get(json_array_get(json_object_get(c, "volumes"), 0), "read_only")));
	json_decref(create_sandbox(alice.hkey, "[{\"name\":\"shared\",\"path\":\"/mnt/s\"}]", 409));
	json_decref(a);
	json_decref(b);
	json_decref(c);
}

static void
test_bad_attachments(void **state)
{
	static const char *const bad_paths[] = {
		"/sandbox", "/sandbox/",   "/sandbox/home", "/mnt",     "/mnt/",
		"/etc/x",   "/mnt/../etc", "/mnt/./x",      "mnt/x",    "/mnt//x",
		"/mnt/x/",  "/sandboxx/y", "/mnt/a\\tb",    "/mnt/a b", "",
		"/usr/lib",
	};

	json_decref(create_volume(alice.hkey, "v1", 16));
	json_decref(create_volume(alice.hkey, "v2", 16));
	for (size_t i = 0; i < ARRAY_SIZE(bad_paths); i++) {
		_cleanup_free_ char *vols =
		        strdup_printf("[{\"name\":\"v1\",\"path\":\"%s\"}]", bad_paths[i]);
		json_t *j = create_sandbox(alice.hkey, vols, 400);
		if (strcmp(err_code(j) ?: "", "invalid_request") != 0)
			fail_msg("path '%s': expected invalid_request", bad_paths[i]);
		json_decref(j);
	}
	/* the same path twice, or one inside another; the same volume twice */
	json_decref(create_sandbox(alice.hkey,
	                           "[{\"name\":\"v1\",\"path\":\"/mnt/a\"},"
	                           "{\"name\":\"v2\",\"path\":\"/mnt/a\"}]",
	                           400));
	json_decref(create_sandbox(alice.hkey,
	                           "[{\"name\":\"v1\",\"path\":\"/mnt/a\"},"
	                           "{\"name\":\"v2\",\"path\":\"/mnt/a/b\"}]",
	                           400));
	json_decref(create_sandbox(alice.hkey,
	                           "[{\"name\":\"v1\",\"path\":\"/mnt/a\"},"
	                           "{\"name\":\"v1\",\"path\":\"/mnt/b\",\"read_only\":true}]",
	                           400));
	/* an unknown field, a non-boolean read_only, more than 8 */
	json_decref(create_sandbox(alice.hkey, "[{\"name\":\"v1\",\"path\":\"/mnt/a\",\"ro\":1}]",
	                           400));
	json_decref(create_sandbox(
	        alice.hkey, "[{\"name\":\"v1\",\"path\":\"/mnt/a\",\"read_only\":\"yes\"}]", 400));
	json_decref(
	        create_sandbox(alice.hkey,
	                       "[{\"name\":\"v1\",\"path\":\"/mnt/a\"},{\"name\":\"a\",\"path\":"
	                       "\"/mnt/b\"},{\"name\":\"b\",\"path\":\"/mnt/c\"},{\"name\":"
	                       "\"c\",\"path\":\"/mnt/d\"},{\"name\":\"d\",\"path\":\"/mnt/"
	                       "e\"},{\"name\":\"e\",\"path\":\"/mnt/f\"},{\"name\":\"f\","
	                       "\"path\":\"/mnt/g\"},{\"name\":\"g\",\"path\":\"/mnt/h\"},{"
	                       "\"name\":\"h\",\"path\":\"/mnt/i\"}]",
	                       400));
	/* a volume that does not exist is 404 */
	expect_error(alice.hkey, "POST", "/v1/sandboxes",
	             "{\"volumes\":[{\"name\":\"nope\",\"path\":\"/mnt/a\"}]}", 404, "not_found",
	             "nope");
	/* both, well placed: fine, and two attached at once */
	json_decref(create_sandbox(alice.hkey,
	                           "[{\"name\":\"v1\",\"path\":\"/sandbox/home/work\"},"
	                           "{\"name\":\"v2\",\"path\":\"/mnt/v2\",\"read_only\":true}]",
	                           201));
}

static void
test_others_cannot_see_or_attach(void **state)
{
	json_t *l, *v;

	json_decref(create_volume(alice.hkey, "mine", 16));
	/* bob neither sees it nor attaches it: 404, as for a volume that does not exist */
	l = harness_json_headers(d.sock, bob.hkey, "GET", "/v1/volumes", NULL, 200, NULL);
	assert_int_equal(json_array_size(json_object_get(l, "volumes")), 0);
	json_decref(l);
	expect_error(bob.hkey, "POST", "/v1/sandboxes",
	             "{\"volumes\":[{\"name\":\"mine\",\"path\":\"/mnt/a\"}]}", 404, "not_found",
	             NULL);
	expect_error(bob.hkey, "DELETE", "/v1/volumes/mine", NULL, 404, "not_found", NULL);
	/* names are per owner: bob has his own "mine", and writing it does not touch alice's */
	v = create_volume(bob.hkey, "mine", 16);
	json_decref(create_sandbox(bob.hkey, "[{\"name\":\"mine\",\"path\":\"/mnt/a\"}]", 201));
	json_decref(create_sandbox(alice.hkey, "[{\"name\":\"mine\",\"path\":\"/mnt/a\"}]", 201));
	json_decref(v);
	/* an admin lists everyone's */
	l = harness_json_headers(d.sock, boss.hkey, "GET", "/v1/volumes", NULL, 200, NULL);
	assert_int_equal(json_array_size(json_object_get(l, "volumes")), 2);
	json_decref(l);
}

/* A user deleted takes their volumes along: their files go, and an account made later with
 * the same email has none of them. */
static void
test_a_deleted_users_volumes_go(void **state)
{
	struct who carol = { .email = "carol@example.com",
		             .password = "carol-password-4",
		             .role = "user" };
	_cleanup_free_ char *path = NULL, *file = NULL;
	json_t *v, *l;

	make_account(&carol);
	v = create_volume(carol.hkey, "hers", 16);
	file = strdup_printf("%s/volumes/%s.ext4", d.state, harness_str(v, "id"));
	assert_int_equal(access(file, F_OK), 0);
	path = strdup_printf("/v1/users/%s", carol.id);
	json_decref(harness_json(d.sock, "DELETE", path, NULL, 204));
	assert_int_equal(access(file, F_OK), -1);
	l = harness_json_headers(d.sock, boss.hkey, "GET", "/v1/volumes", NULL, 200, NULL);
	assert_int_equal(json_array_size(json_object_get(l, "volumes")), 0);
	json_decref(l);
	make_account(&carol);
	l = harness_json_headers(d.sock, carol.hkey, "GET", "/v1/volumes", NULL, 200, NULL);
	assert_int_equal(json_array_size(json_object_get(l, "volumes")), 0);
	json_decref(l);
	json_decref(v);
}

static void
test_volumes_outlive_a_restart(void **state)
{
	const char *args[] = { "--capacity-disk-mb", "20000", "--metrics-listen", metrics_addr,
		               NULL };
	json_t *v, *l;

	v = create_volume(alice.hkey, "kept", 16);
	assert_int_equal(harness_stop(&d, SIGTERM), 0);
	assert_int_equal(harness_restart(&d, harness_binary("SANDBOXD_FAKE"), args, NULL), 0);
	l = harness_json_headers(d.sock, alice.hkey, "GET", "/v1/volumes", NULL, 200, NULL);
	assert_int_equal(json_array_size(json_object_get(l, "volumes")), 1);
	assert_string_equal(harness_str(json_array_get(json_object_get(l, "volumes"), 0), "id"),
	                    harness_str(v, "id"));
	json_decref(l);
	json_decref(create_sandbox(alice.hkey, "[{\"name\":\"kept\",\"path\":\"/mnt/k\"}]", 201));
	json_decref(v);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_create_list_delete, case_teardown),
		cmocka_unit_test_teardown(test_one_writer_or_many_readers, case_teardown),
		cmocka_unit_test_teardown(test_bad_attachments, case_teardown),
		cmocka_unit_test_teardown(test_others_cannot_see_or_attach, case_teardown),
		cmocka_unit_test_teardown(test_a_deleted_users_volumes_go, case_teardown),
		cmocka_unit_test_teardown(test_volumes_outlive_a_restart, case_teardown),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
