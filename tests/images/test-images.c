/* test-images.c: images from a real registry (Debian's docker-registry on loopback, started
 * and fed by tests/images/registry.sh) through the product sandboxd and real microVMs: pull
 * by tag and by digest, what a sandbox of a pulled image runs as and sees, whiteouts, an
 * index, a corrupted blob, a missing image, the registry's own token auth, concurrent creates
 * sharing one pull, removal while in use, and the policy's images list. The registries are
 * on loopback: the daemon names them with --insecure-registry, without which it would not
 * pull from them. Boots are few: each
 * costs seconds under TCG. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "base64.h"
#include "buf.h"
#include "harness.h"
#include "strv.h"

/* pulls and disk builds of a busybox-sized image take a second or two; a boot under TCG a
 * few more: these bound every call, so a hang fails the test instead of stalling it */
#define INSTALL_TIMEOUT_MS 60000
#define CREATE_TIMEOUT_MS 120000
/* a missing image, a refused one, an unreachable registry: an answer within this */
#define FAIL_FAST_MS 10000

static struct daemon_proc p;
/* a second sandboxd, with a policy (test_policy_images_list); harness_http_timeout(sock, ) talks to
 * sock */
static struct daemon_proc q;
static const char *sock;
static char regdir[256];
static char reg[64];  /* 127.0.0.1:PORT of the plain registry */
static char treg[64]; /* and of the one with token auth */

/* images.env, written by registry.sh populate */
static char envkeys[32][160], envvals[32][160];
static size_t n_env;

static const char *
image_env(const char *key)
{
	for (size_t i = 0; i < n_env; i++)
		if (strcmp(envkeys[i], key) == 0)
			return envvals[i];
	fail_msg("images.env has no %s", key);
	return NULL;
}

static int
read_line_file(const char *dir, const char *name, char *out, size_t size)
{
	char path[400];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	if (!fgets(out, (int)size, f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	out[strcspn(out, "\n")] = '\0';
	return 0;
}

/* The fixture's registries, or exit 77 when it did not run (a run outside ctest). */
static void
load_fixture(void)
{
	const char *d = getenv("SBX_REGISTRY_DIR");
	char port[16], path[400], line[160];
	FILE *f;

	if (!d || !*d) {
		fprintf(stderr, "skip: SBX_REGISTRY_DIR is not set (run through ctest)\n");
		exit(77);
	}
	snprintf(regdir, sizeof(regdir), "%s", d);
	if (read_line_file(regdir, "port", port, sizeof(port)) < 0) {
		fprintf(stderr, "skip: no registry in %s (images/registry-start did not run)\n",
		        regdir);
		exit(77);
	}
	snprintf(reg, sizeof(reg), "127.0.0.1:%s", port);
	if (read_line_file(regdir, "token-port", port, sizeof(port)) < 0) {
		fprintf(stderr, "skip: no token registry in %s\n", regdir);
		exit(77);
	}
	snprintf(treg, sizeof(treg), "127.0.0.1:%s", port);
	snprintf(path, sizeof(path), "%s/images.env", regdir);
	f = fopen(path, "re");
	if (!f) {
		fprintf(stderr, "skip: no %s (registry.sh populate did not run)\n", path);
		exit(77);
	}
	while (n_env < 32 && fgets(line, sizeof(line), f)) {
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = '\0';
		line[strcspn(line, "\n")] = '\0';
		eq[1 + strcspn(eq + 1, "\n")] = '\0';
		snprintf(envkeys[n_env], sizeof(envkeys[n_env]), "%s", line);
		snprintf(envvals[n_env], sizeof(envvals[n_env]), "%s", eq + 1);
		n_env++;
	}
	fclose(f);
}

/* {"error":{"message"}} of an error body, for assertions (caller frees). */
static char *
error_message(const char *body)
{
	json_t *j = body ? json_loads(body, 0, NULL) : NULL;
	const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	char *r = strdup(m ? m : "");

	json_decref(j);
	return r;
}

static char *
error_code(const char *body)
{
	json_t *j = body ? json_loads(body, 0, NULL) : NULL;
	const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
	char *r = strdup(m ? m : "");

	json_decref(j);
	return r;
}

static char *
image_body(const char *image)
{
	json_t *o = json_pack("{s:s}", "image", image);
	char *s = json_dumps(o, JSON_COMPACT);

	json_decref(o);
	return s;
}

/* POST /v1/images for image; the status, the body (caller frees) and how long it took. */
static int
install(const char *image, const char *query, char **ret_body, long *ret_ms)
{
	char *body = image_body(image), path[64];
	struct timespec a, b;
	int status;

	snprintf(path, sizeof(path), "/v1/images%s", query ? query : "");
	clock_gettime(CLOCK_MONOTONIC, &a);
	status = harness_http_timeout(sock, "POST", path, body, INSTALL_TIMEOUT_MS, ret_body);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (ret_ms)
		*ret_ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
	free(body);
	return status;
}

/* Installs image and checks the object the answer carries. */
static json_t *
install_ok(const char *image)
{
	char *body = NULL;
	int status = install(image, NULL, &body, NULL);
	json_t *j;

	if (status != 200)
		fail_msg("POST /v1/images %s: expected 200, got %d: %s", image, status,
		         body ? body : "(no answer)");
	j = json_loads(body, 0, NULL);
	free(body);
	assert_non_null(j);
	assert_string_equal(harness_str(j, "image"), image);
	assert_string_equal(harness_str(j, "state"), "installed");
	assert_true(json_integer_value(json_object_get(j, "size_bytes")) > 0);
	assert_true(json_is_false(json_object_get(j, "default")));
	return j;
}

/* The entry for image in GET /v1/images (a new reference), or NULL. */
static json_t *
listed(const char *image)
{
	json_t *all = harness_json_timeout(sock, "GET", "/v1/images", NULL, 10000, 200),
	       *found = NULL, *it;
	size_t i;

	json_array_foreach (json_object_get(all, "images"), i, it)
		if (strcmp(harness_str(it, "image") ? harness_str(it, "image") : "", image) == 0)
			found = json_incref(it);
	json_decref(all);
	return found;
}

/* in_use as a count, a flag or a list of sandboxes: whether any sandbox uses the image */
static bool
in_use(json_t *img)
{
	json_t *u = json_object_get(img, "in_use");

	return json_is_true(u) || (json_is_integer(u) && json_integer_value(u) > 0) ||
	       (json_is_array(u) && json_array_size(u) > 0);
}

/* DELETE /v1/images/{image}, the name as one URL-encoded path segment */
static int
remove_image(const char *image, char **ret_body)
{
	char path[512];
	size_t n = snprintf(path, sizeof(path), "/v1/images/");

	for (const char *c = image; *c && n + 4 < sizeof(path); c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		    (*c >= '0' && *c <= '9') || strchr("-._~", *c))
			path[n++] = *c;
		else
			n += snprintf(path + n, sizeof(path) - n, "%%%02X", (unsigned char)*c);
	}
	path[n] = '\0';
	return harness_http_timeout(sock, "DELETE", path, NULL, 10000, ret_body);
}

static json_t *
create_from(const char *image)
{
	char *body = image_body(image);
	json_t *j =
	        harness_json_timeout(sock, "POST", "/v1/sandboxes", body, CREATE_TIMEOUT_MS, 201);

	free(body);
	if (strcmp(harness_str(j, "state"), "running") != 0)
		fail_msg("the sandbox of %s did not boot: %s", image, harness_str(j, "reason"));
	assert_string_equal(harness_str(j, "image"), image);
	return j;
}

static void
destroy(json_t *sb)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(sb, "id"));
	json_decref(harness_json_timeout(sock, "DELETE", path, NULL, 30000, 204));
	json_decref(sb);
}

/* POST …/run; returns the exit code and the decoded stdout (caller frees). */
static int
run(json_t *sb, const char *argv_json, char **out)
{
	char path[128], *body = NULL;
	const char *b64;
	struct buf b = BUF_INIT(1u << 20);
	json_t *r;
	int code;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", harness_str(sb, "id"));
	if (asprintf(&body, "{\"argv\":%s}", argv_json) < 0)
		fail();
	r = harness_json_timeout(sock, "POST", path, body, 30000, 200);
	free(body);
	code = (int)json_integer_value(json_object_get(r, "exit_code"));
	b64 = harness_str(r, "stdout");
	assert_non_null(b64);
	assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
	if (out)
		*out = buf_steal(&b);
	else
		buf_free(&b);
	json_decref(r);
	return code;
}

/* run() of `sh -c script`, expecting exit 0; its stdout (caller frees). */
static char *
sh(json_t *sb, const char *script)
{
	json_t *argv = json_pack("[s,s,s]", "sh", "-c", script);
	char *a = json_dumps(argv, JSON_COMPACT), *out = NULL;
	int code = run(sb, a, &out);

	if (code != 0)
		fail_msg("`%s` exited %d: %s", script, code, out);
	free(a);
	json_decref(argv);
	return out;
}

/* How many times the plain registry served GET path (its access log, a line per request). */
static int
registry_gets(const char *path)
{
	char log[400], needle[300], line[2048];
	FILE *f;
	int n = 0;

	snprintf(log, sizeof(log), "%s/registry.log", regdir);
	snprintf(needle, sizeof(needle), "\"GET %s HTTP/", path);
	f = fopen(log, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

/* Whether a shell test on the host succeeds (`find ... | grep -q .` and the like). */
static bool
host_sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd) == 0;
}

/* Nothing of a failed install is left in the state directory: no partial download, no tree
 * being built, no blob of the image that failed. */
static void
assert_no_install_leftovers(const char *bad_blob)
{
	if (host_sh("find '%s' -name '*partial*' | grep .", p.state))
		fail_msg("a partial download was left under %s", p.state);
	if (host_sh("find '%s/images/tmp' -mindepth 1 2>/dev/null | grep .", p.state))
		fail_msg("a tree being built was left under %s/images/tmp", p.state);
	if (bad_blob &&
	    host_sh("find '%s' -name '%s*' | grep .", p.state, strchr(bad_blob, ':') + 1))
		fail_msg("the blob that failed verification (%s) was kept", bad_blob);
}

static const char *const *
daemon_args(void)
{
	static char a[64], b[64];
	static const char *args[8];

	snprintf(a, sizeof(a), "%s", reg);
	snprintf(b, sizeof(b), "%s", treg);
	args[0] = "--insecure-registry";
	args[1] = a;
	args[2] = "--insecure-registry";
	args[3] = b;
	args[4] = NULL;
	return args;
}

static int
setup(void **state)
{
	if (harness_start_vm(&p, daemon_args(), NULL) < 0)
		return -1;
	sock = p.sock;
	return 0;
}

static int
teardown(void **state)
{
	int rc = harness_stop(&p, SIGTERM);

	harness_cleanup(&p);
	if (q.pid > 0) /* a failed assertion left it running */
		harness_cleanup(&q);
	return rc == 0 ? 0 : -1;
}

static void
test_pull_by_tag_and_run_as_the_sandbox_user(void **state)
{
	char name[128], *out = NULL, *body = NULL;
	json_t *img, *sb, *entry;

	snprintf(name, sizeof(name), "%s/sbx/hello:1", reg);
	img = install_ok(name);
	assert_string_equal(harness_str(img, "digest"), image_env("HELLO_DIGEST"));
	assert_false(in_use(img));
	json_decref(img);
	entry = listed(name);
	assert_non_null(entry);
	assert_string_equal(harness_str(entry, "state"), "installed");
	json_decref(entry);

	/* a command from the image, as uid 1001 in /sandbox/home: the image's User and
	 * WorkingDir do not apply; its Env does, except HOME and USER */
	sb = create_from(name);
	out = sh(sb, "cat /etc/os-release");
	assert_non_null(strstr(out, "ID=sbxhello\n"));
	assert_non_null(strstr(out, "PRETTY_NAME=\"sbx hello 1\""));
	free(out);
	out = sh(sb, "id -u; pwd");
	assert_string_equal(out, "1001\n/sandbox/home\n");
	free(out);
	out = sh(sb, "env");
	assert_non_null(strstr(out, "GREETING=hello-from-image\n"));
	assert_non_null(strstr(out, "HOME=/sandbox/home\n"));
	assert_null(strstr(out, "USER=root"));
	assert_null(strstr(out, "HOME=/root"));
	free(out);

	/* the image's disk is shared and read-only: what a sandbox writes into the image's
	 * tree (/sandbox/home is on it) goes to its own layer, and the disk stays byte for byte
	 * what it was */
	assert_true(host_sh("sha256sum %s/rootfs/%s-*.ext4 > %s/disk.sum", p.state,
	                    image_env("HELLO_DIGEST") + strlen("sha256:"), p.dir));
	out = sh(sb, "echo written > /sandbox/home/f && cat /sandbox/home/f");
	assert_string_equal(out, "written\n");
	free(out);
	assert_true(host_sh("sha256sum -c --quiet %s/disk.sum", p.dir));

	/* in use: it stays */
	entry = listed(name);
	assert_non_null(entry);
	assert_true(in_use(entry));
	json_decref(entry);
	assert_int_equal(remove_image(name, &body), 409);
	free(body);
	assert_non_null((entry = listed(name)));
	json_decref(entry);
	/* once its sandbox is gone it can go, and then it is not there */
	destroy(sb);
	assert_int_equal(remove_image(name, &body), 204);
	free(body);
	assert_null(listed(name));
	assert_int_equal(remove_image(name, &body), 404);
	free(body);
}

static void
test_pull_by_digest_and_a_wrong_pin(void **state)
{
	char name[200], *body = NULL;
	json_t *img;
	int status;

	/* the pin the registry has */
	snprintf(name, sizeof(name), "%s/sbx/hello@%s", reg, image_env("HELLO_DIGEST"));
	img = install_ok(name);
	assert_string_equal(harness_str(img, "digest"), image_env("HELLO_DIGEST"));
	json_decref(img);
	assert_int_equal(remove_image(name, &body), 204);
	free(body);

	/* a valid digest, of another image: the registry has no such manifest in sbx/hello */
	snprintf(name, sizeof(name), "%s/sbx/hello@%s", reg, image_env("MULTI_DIGEST"));
	status = install(name, NULL, &body, NULL);
	if (status != 404 && status != 503)
		fail_msg("a wrong pin: expected 404 or 503, got %d: %s", status, body);
	free(body);
	assert_null(listed(name));
}

/* Reads the event stream fd into *acc until it holds needle or timeout_ms have passed. */
static bool
events_until(int fd, char **acc, size_t *len, const char *needle, int timeout_ms)
{
	(void)harness_stream_read(fd, timeout_ms, needle, acc, len);
	return *acc && strstr(*acc, needle);
}

static void
test_multi_layer_whiteouts_and_progress_events(void **state)
{
	char name[128], needle[200], *body = NULL, *out = NULL, *ev = NULL;
	size_t ev_len = 0;
	json_t *j, *sb;
	int fd;

	snprintf(name, sizeof(name), "%s/sbx/multi:1", reg);
	fd = harness_stream_open(sock, "GET", "/v1/events/stream", NULL);
	assert_true(fd >= 0);
	/* the stream is live once its first bytes came */
	assert_true(events_until(fd, &ev, &ev_len, "retry:", 10000));

	/* not waiting: 202, installing; the install goes on and says how it goes */
	assert_int_equal(install(name, "?wait=false", &body, NULL), 202);
	j = json_loads(body, 0, NULL);
	free(body);
	assert_non_null(j);
	assert_string_equal(harness_str(j, "state"), "installing");
	json_decref(j);
	snprintf(needle, sizeof(needle), "event: image.installed\ndata: ");
	if (!events_until(fd, &ev, &ev_len, needle, INSTALL_TIMEOUT_MS))
		fail_msg("no image.installed event; the stream said: %s", ev ? ev : "");
	snprintf(needle, sizeof(needle), "\"image\":\"%s\"", name);
	assert_non_null(strstr(ev, "event: image.progress\n"));
	assert_non_null(strstr(strstr(ev, "event: image.installed\n"), needle));
	assert_null(strstr(ev, "event: image.failed\n"));
	free(ev);
	close(fd);

	j = listed(name);
	assert_non_null(j);
	assert_string_equal(harness_str(j, "state"), "installed");
	assert_string_equal(harness_str(j, "digest"), image_env("MULTI_DIGEST"));
	json_decref(j);

	/* the layers as the guest sees them: the upper layer's whiteouts removed /data/a and
	 * /etc/remove-me, its opaque directory hid /opt/dir/old, and the rest is there */
	sb = create_from(name);
	out = sh(sb, "cat /data/b; echo; cat /opt/dir/new");
	assert_string_equal(out, "b\nnew");
	free(out);
	out = sh(sb, "ls -a /data /opt/dir");
	assert_string_equal(out, "/data:\n.\n..\nb\n\n/opt/dir:\n.\n..\nnew\n");
	free(out);
	/* neither what was whited out nor the whiteout files themselves */
	out = sh(sb, "for f in /data/a /opt/dir/old /etc/remove-me /data/.wh.a "
	             "/opt/dir/.wh..wh..opq /etc/.wh.remove-me; do "
	             "if test -e $f || test -L $f; then echo $f; fi; done; "
	             "test -x /bin/busybox && test -f /etc/passwd && echo base");
	assert_string_equal(out, "base\n");
	free(out);
	destroy(sb);
}

static void
test_index_picks_linux_amd64(void **state)
{
	char name[128], *out = NULL;
	json_t *sb, *j;

	/* not installed first: the create waits for the install */
	snprintf(name, sizeof(name), "%s/sbx/index:1", reg);
	assert_null(listed(name));
	sb = create_from(name);
	out = sh(sb, "cat /etc/arch-marker");
	assert_string_equal(out, "amd64\n");
	free(out);
	j = listed(name);
	assert_non_null(j);
	/* the digest is the index's or the chosen manifest's, never the arm64 one */
	assert_true(strcmp(harness_str(j, "digest"), image_env("INDEX_DIGEST")) == 0 ||
	            strcmp(harness_str(j, "digest"), image_env("INDEX_AMD64_DIGEST")) == 0);
	json_decref(j);
	destroy(sb);
}

static void
test_corrupt_blob_is_refused_and_nothing_is_left(void **state)
{
	char name[128], good[128], *body = NULL, *msg;
	json_t *img;

	/* control: an image sharing the corrupt one's base layer installs */
	snprintf(good, sizeof(good), "%s/sbx/hello:1", reg);
	json_decref(install_ok(good));

	snprintf(name, sizeof(name), "%s/sbx/corrupt:1", reg);
	assert_int_equal(install(name, NULL, &body, NULL), 503);
	msg = error_message(body);
	assert_non_null(strstr(msg, "digest"));
	free(msg);
	free(body);
	assert_null(listed(name));
	assert_no_install_leftovers(image_env("CORRUPT_LAYER"));
	/* and a second try fails the same way (nothing half-done was kept to trust later) */
	assert_int_equal(install(name, NULL, &body, NULL), 503);
	free(body);
	assert_null(listed(name));
	/* the good one is still there */
	assert_non_null((img = listed(good)));
	json_decref(img);
}

static void
test_missing_image_malformed_name_and_unreachable_registry(void **state)
{
	char name[128], *body = NULL, *msg, *code;
	long ms = 0;

	/* no such repository, no such tag: 404 with the registry's reason, at once */
	snprintf(name, sizeof(name), "%s/sbx/nope:1", reg);
	assert_int_equal(install(name, NULL, &body, &ms), 404);
	assert_true(ms < FAIL_FAST_MS);
	msg = error_message(body);
	code = error_code(body);
	assert_non_null(strstr(msg, "manifest unknown"));
	assert_string_equal(code, "not_found");
	free(msg);
	free(code);
	free(body);
	snprintf(name, sizeof(name), "%s/sbx/hello:2", reg);
	assert_int_equal(install(name, NULL, &body, &ms), 404);
	assert_true(ms < FAIL_FAST_MS);
	msg = error_message(body);
	assert_non_null(strstr(msg, "manifest unknown"));
	free(msg);
	free(body);
	assert_null(listed(name));
	/* a missing image named at create: the same answer, no sandbox */
	{
		char *b = image_body(name);
		int st =
		        harness_http_timeout(sock, "POST", "/v1/sandboxes", b, FAIL_FAST_MS, &body);
		free(b);
		assert_int_equal(st, 404);
		msg = error_message(body);
		assert_non_null(strstr(msg, "manifest unknown"));
		free(msg);
		free(body);
	}
	/* without waiting, the sandbox is answered pending and fails with the same reason */
	{
		char b[256], path[128];
		json_t *sb, *got = NULL;
		snprintf(b, sizeof(b), "{\"image\":\"%s\",\"wait\":false}", name);
		sb = harness_json_timeout(sock, "POST", "/v1/sandboxes", b, FAIL_FAST_MS, 201);
		assert_string_equal(harness_str(sb, "state"), "pending");
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(sb, "id"));
		for (int i = 0; i < 200; i++) {
			json_decref(got);
			got = harness_json_timeout(sock, "GET", path, NULL, FAIL_FAST_MS, 200);
			if (strcmp(harness_str(got, "state"), "failed") == 0)
				break;
			usleep(50000);
		}
		assert_string_equal(harness_str(got, "state"), "failed");
		assert_non_null(strstr(harness_str(got, "reason"), "manifest unknown"));
		json_decref(got);
		json_decref(harness_json_timeout(sock, "DELETE", path, NULL, FAIL_FAST_MS, 204));
		json_decref(sb);
	}

	/* a name that is no image reference */
	snprintf(name, sizeof(name), "%s/sbx/UPPER CASE:1", reg);
	assert_int_equal(install(name, NULL, &body, NULL), 400);
	code = error_code(body);
	assert_string_equal(code, "invalid_request");
	free(code);
	free(body);

	/* a registry on loopback that the operator did not name: refused before anything is
	 * sent there (tests/images/test-pull-guard.c has the rest of the guard) */
	snprintf(name, sizeof(name), "127.0.0.1:%d/sbx/hello:1", harness_free_port());
	assert_int_equal(install(name, NULL, &body, &ms), 403);
	assert_true(ms < FAIL_FAST_MS);
	code = error_code(body);
	assert_string_equal(code, "refused");
	free(code);
	msg = error_message(body);
	assert_non_null(strstr(msg, "is on a loopback, private or link-local address"));
	free(msg);
	free(body);
	assert_null(listed(name));
}

static bool
file_has(const char *dir, const char *file, const char *needle)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	return harness_file_contains(path, needle);
}

static void
test_token_auth_registry(void **state)
{
	char name[128], *body = NULL, *msg;
	json_t *img;

	/* The token registry is docker-registry's own token auth (auth: token: in its config),
	 * trusting the certificate of the key the test token server signs with: a pull is a
	 * 401 with a Bearer challenge, a token for repository:sbx/hello:pull, then the pull. */
	snprintf(name, sizeof(name), "%s/sbx/hello:1", treg);
	img = install_ok(name);
	assert_string_equal(harness_str(img, "digest"), image_env("HELLO_DIGEST"));
	json_decref(img);
	assert_true(file_has(regdir, "token.log", "-> 200 scope=repository:sbx/hello:pull"));
	assert_int_equal(remove_image(name, &body), 204);
	free(body);

	/* the token server refuses the scope of a private repository: the refusal is the
	 * message, not a hang */
	snprintf(name, sizeof(name), "%s/private/secret:1", treg);
	assert_int_equal(install(name, NULL, &body, NULL), 404);
	msg = error_message(body);
	assert_non_null(strstr(msg, "denied"));
	free(msg);
	free(body);
	assert_true(file_has(regdir, "token.log", "-> 403 scope=repository:private/secret:pull"));
	assert_null(listed(name));
}

struct create_call {
	const char *body;
	int status;
	char *answer;
};

static void *
create_thread(void *arg)
{
	struct create_call *c = arg;

	c->status = harness_http_timeout(sock, "POST", "/v1/sandboxes", c->body, CREATE_TIMEOUT_MS,
	                                 &c->answer);
	return NULL;
}

static void
test_concurrent_creates_share_one_pull(void **state)
{
	char name[128], blob[200], nowait[256], *body;
	struct create_call calls[2] = { 0 };
	pthread_t t[2];
	int before;
	json_t *sb[2], *img;

	/* sbx/pair has a layer of its own no test pulled before */
	snprintf(name, sizeof(name), "%s/sbx/pair:1", reg);
	assert_null(listed(name));
	snprintf(blob, sizeof(blob), "/v2/sbx/pair/blobs/%s", image_env("PAIR_LAYER"));
	before = registry_gets(blob);
	/* one create waits for the image (the API holds it); the other does not (the sandbox
	 * is pending until the image is there) */
	body = image_body(name);
	snprintf(nowait, sizeof(nowait), "{\"image\":\"%s\",\"wait\":false}", name);
	calls[0].body = body;
	calls[1].body = nowait;
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, create_thread, &calls[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	free(body);
	for (int i = 0; i < 2; i++) {
		if (calls[i].status != 201)
			fail_msg("create %d of %s: %d: %s", i, name, calls[i].status,
			         calls[i].answer ? calls[i].answer : "(no answer)");
		sb[i] = json_loads(calls[i].answer, 0, NULL);
		free(calls[i].answer);
		assert_non_null(sb[i]);
	}
	assert_string_equal(harness_str(sb[0], "state"), "running");
	{
		char path[128];
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(sb[1], "id"));
		for (int i = 0; i < 600 && strcmp(harness_str(sb[1], "state"), "running") != 0;
		     i++) {
			assert_string_not_equal(harness_str(sb[1], "state"), "failed");
			usleep(50000);
			json_decref(sb[1]);
			sb[1] = harness_json_timeout(sock, "GET", path, NULL, CREATE_TIMEOUT_MS,
			                             200);
		}
		assert_string_equal(harness_str(sb[1], "state"), "running");
	}
	/* one pull: the layer came from the registry once */
	assert_int_equal(registry_gets(blob) - before, 1);
	for (int i = 0; i < 2; i++) {
		char *out = sh(sb[i], "cat /etc/pair-marker");
		assert_string_equal(out, "pair\n");
		free(out);
	}
	img = listed(name);
	assert_non_null(img);
	assert_true(in_use(img));
	json_decref(img);
	destroy(sb[0]);
	destroy(sb[1]);
}

/* A second sandboxd whose policy lists one image: that one installs, others get 403. */
static void
test_policy_images_list(void **state)
{
	char allowed[128], other[128], *body = NULL, *code;
	const char *const *base = daemon_args();
	_cleanup_strv_ char **args = NULL;
	size_t n = 0;

	snprintf(allowed, sizeof(allowed), "%s/sbx/hello:1", reg);
	snprintf(other, sizeof(other), "%s/sbx/multi:1", reg);
	for (size_t k = 0; base[k]; k++)
		assert_int_equal(strv_add(&args, &n, base[k]), 0);
	/* the default image (the harness's) must be permitted */
	assert_int_equal(
	        strv_extend(&args, &n, "--allow-image", allowed, "--allow-image", "busybox", NULL),
	        0);
	assert_int_equal(harness_start_vm(&q, (const char *const *)args, NULL), 0);
	sock = q.sock;
	json_decref(install_ok(allowed));
	assert_int_equal(install(other, NULL, &body, NULL), 403);
	code = error_code(body);
	assert_string_equal(code, "refused");
	free(code);
	free(body);
	assert_null(listed(other));
	sock = p.sock;
	assert_int_equal(harness_stop(&q, SIGTERM), 0);
	harness_cleanup(&q);
}

/* An image installed by hand under the built-in's name gives way to the built-in disk when
 * sandboxd starts (it once stayed in the list, freed: a use-after-free at start). */
static void
test_a_record_named_like_the_builtin_gives_way(void **state)
{
	const char *const *base = daemon_args();
	_cleanup_strv_ char **args = NULL;
	size_t n = 0;
	json_t *list;
	size_t i;
	json_t *v;
	bool seen = false;

	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_true(
	        host_sh("set -e; t=$(mktemp -d); trap 'rm -rf \"$t\"' EXIT; "
	                "mkdir -p %s/images/local $t/r/etc; echo mine > $t/r/etc/mine; "
	                "tar -C $t/r -cf $t/l.tar .; umoci init --layout %s/images/local/busybox; "
	                "umoci new --image %s/images/local/busybox:latest; "
	                "umoci raw add-layer --image %s/images/local/busybox:latest $t/l.tar; "
	                "%s image install --quiet --state-dir %s busybox >/dev/null",
	                p.state, p.state, p.state, p.state, harness_binary("SANDBOXD"), p.state));
	for (size_t k = 0; base[k]; k++)
		assert_int_equal(strv_add(&args, &n, base[k]), 0);
	assert_int_equal(
	        strv_extend(&args, &n, "--accel", "tcg", "--default-image", "busybox", NULL), 0);
	assert_int_equal(
	        harness_restart(&p, harness_binary("SANDBOXD"), (const char *const *)args, NULL),
	        0);
	list = harness_json_timeout(sock, "GET", "/v1/images", NULL, 10000, 200);
	json_array_foreach (json_object_get(list, "images"), i, v)
		if (strcmp(harness_str(v, "image"), "busybox") == 0) {
			assert_false(seen);
			seen = true;
			assert_true(json_is_true(json_object_get(v, "builtin")));
		}
	assert_true(seen);
	json_decref(list);
	/* teardown's stop checks the exit status: ASan finds nothing */
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pull_by_tag_and_run_as_the_sandbox_user),
		cmocka_unit_test(test_pull_by_digest_and_a_wrong_pin),
		cmocka_unit_test(test_multi_layer_whiteouts_and_progress_events),
		cmocka_unit_test(test_index_picks_linux_amd64),
		cmocka_unit_test(test_corrupt_blob_is_refused_and_nothing_is_left),
		cmocka_unit_test(test_missing_image_malformed_name_and_unreachable_registry),
		cmocka_unit_test(test_token_auth_registry),
		cmocka_unit_test(test_concurrent_creates_share_one_pull),
		cmocka_unit_test(test_policy_images_list),
		cmocka_unit_test(test_a_record_named_like_the_builtin_gives_way),
	};

	harness_vm_bundle();
	load_fixture();
	return cmocka_run_group_tests(tests, setup, teardown);
}
