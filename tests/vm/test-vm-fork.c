/* test-vm-fork.c: a fork of a real microVM through the product sandboxd. A sandbox writes a
 * file and runs a counter (a kept process writing a number each second); a memory snapshot of
 * it is forked: the fork has the file and the counter, which carries on from where the snapshot
 * caught it (it is not started again), the counter is among the fork's processes, and the fork's
 * identity is its own: another hostname, /etc/machine-id and (where sandboxes have a network)
 * MAC. Parent and fork then run side by side, each counting on its own disk. A disk snapshot's
 * fork boots the parent's files. */
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
#include "buf.h"
#include "harness.h"

static struct daemon_proc p;
/* As root, with ip and nft, sandboxd runs in network namespaces of the tests' own
 * (tests/egress/netns.sh) with --egress on, so the sandboxes have a network and a MAC. */
static char netns[16], resolv_dir[300], resolv[400];
static bool with_net;

static bool
sh(const char *fmt, ...)
{
	va_list ap;
	char *cmd = NULL;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&cmd, fmt, ap);
	va_end(ap);
	if (r < 0)
		return false;
	r = system(cmd);
	free(cmd);
	return r == 0;
}

static const char counter[] =
        "{\"argv\":[\"sh\",\"-c\",\"i=0; while true; do i=$((i+1)); echo $i > "
        "/sandbox/home/count; sleep 1; done\"],\"keep\":true}";

/* POST …/run in sandbox id; its exit code, and stdout decoded into *out (caller frees). */
static int
run(const char *id, const char *argv_json, char **out)
{
	char path[128], body[1024];
	struct buf b = BUF_INIT(16u << 20);
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
	*out = buf_steal(&b);
	json_decref(r);
	return code;
}

/* The one line a command prints, into out. */
static void
line_of(const char *id, const char *argv_json, char *out, size_t n)
{
	char *text = NULL;

	assert_int_equal(run(id, argv_json, &text), 0);
	text[strcspn(text, "\n")] = '\0';
	snprintf(out, n, "%s", text);
	free(text);
}

static long
count_of(const char *id)
{
	char text[32];

	/* 0 until the counter's first write (a busy host may start it late) */
	line_of(id, "[\"sh\",\"-c\",\"cat /sandbox/home/count 2>/dev/null || echo 0\"]", text,
	        sizeof(text));
	return strtol(text, NULL, 10);
}

/* The MAC of the guest's network interface, or "" when it has none (no network). */
static void
mac_of(const char *id, char *out, size_t n)
{
	line_of(id,
	        "[\"sh\",\"-c\",\"for d in /sys/class/net/*; do [ ${d##*/} = lo ] || cat "
	        "$d/address; done; true\"]",
	        out, n);
}

/* A create with body (an object's members, without braces), with a network where there is one. */
static void
create(const char *members, char *id, size_t n)
{
	char body[512];
	json_t *j;

	snprintf(body, sizeof(body), "{%s%s}", members,
	         with_net ? ",\"network\":{\"mode\":\"allowlist\",\"allow\":[\"example.org\"]}"
	                  : "");
	j = harness_json_timeout(p.sock, "POST", "/v1/sandboxes", body, 600000, 201);

	if (strcmp(harness_str(j, "state"), "running") != 0)
		fail_msg("the sandbox did not start: %s", harness_str(j, "reason"));
	snprintf(id, n, "%s", harness_str(j, "id"));
	json_decref(j);
}

/* Waits for the counter in id to reach at least want. */
static long
wait_count(const char *id, long want)
{
	long c = 0;

	for (int i = 0; i < 120; i++) {
		c = count_of(id);
		if (c >= want)
			break;
		sleep(1);
	}
	return c;
}

static void
test_fork_carries_on_with_its_own_identity(void **state)
{
	char parent[40], child[40], snap[40], body[256], path[160];
	char host_p[80], host_c[80], mid_p[80], mid_c[80], mac_p[40], mac_c[40], text[80];
	long at_snapshot, c1, c2;
	json_t *j, *e;
	size_t i;
	bool listed = false;

	(void)state;
	create("\"name\":\"parent\"", parent, sizeof(parent));
	line_of(parent,
	        "[\"sh\",\"-c\",\"echo from-the-parent > /sandbox/home/f; sync; cat "
	        "/sandbox/home/f\"]",
	        text, sizeof(text));
	assert_string_equal(text, "from-the-parent");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", parent);
	json_decref(harness_json_timeout(p.sock, "POST", path, counter, 120000, 201));
	assert_true(wait_count(parent, 3) >= 3);

	/* a memory snapshot of the running parent */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/snapshots", parent);
	j = harness_json_timeout(p.sock, "POST", path, "{\"kind\":\"memory\"}", 600000, 201);
	assert_string_equal(harness_str(j, "kind"), "memory");
	assert_true(json_integer_value(json_object_get(j, "bytes")) > 0);
	snprintf(snap, sizeof(snap), "%s", harness_str(j, "id"));
	json_decref(j);
	at_snapshot = count_of(parent); /* at least what the snapshot caught */
	assert_true(at_snapshot >= 3);

	/* the fork */
	snprintf(body, sizeof(body), "\"name\":\"child\",\"snapshot_id\":\"%s\"", snap);
	create(body, child, sizeof(child));

	/* its files and its running counter are the snapshot's: the count carries on from about
	 * where it was (not from 1), and goes on counting */
	line_of(child, "[\"cat\",\"/sandbox/home/f\"]", text, sizeof(text));
	assert_string_equal(text, "from-the-parent");
	c1 = count_of(child);
	assert_true(c1 >= 3);
	c2 = wait_count(child, c1 + 2);
	assert_true(c2 >= c1 + 2);
	/* the counter is among the fork's processes */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", child);
	for (int k = 0; k < 50 && !listed; k++) {
		j = harness_json(p.sock, "GET", path, NULL, 200);
		json_array_foreach (json_object_get(j, "processes"), i, e)
			if (strcmp(harness_str(e, "state"), "running") == 0 &&
			    json_is_true(json_object_get(e, "keep")))
				listed = true;
		json_decref(j);
		if (!listed)
			usleep(200000);
	}
	assert_true(listed);

	/* its identity is its own */
	line_of(parent, "[\"hostname\"]", host_p, sizeof(host_p));
	line_of(child, "[\"hostname\"]", host_c, sizeof(host_c));
	assert_string_equal(host_p, "parent");
	assert_string_equal(host_c, "child");
	line_of(child, "[\"cat\",\"/etc/hostname\"]", text, sizeof(text));
	assert_string_equal(text, "child");
	line_of(parent, "[\"cat\",\"/etc/machine-id\"]", mid_p, sizeof(mid_p));
	line_of(child, "[\"cat\",\"/etc/machine-id\"]", mid_c, sizeof(mid_c));
	assert_int_equal(strlen(mid_c), 32);
	assert_string_not_equal(mid_p, mid_c);
	mac_of(parent, mac_p, sizeof(mac_p));
	mac_of(child, mac_c, sizeof(mac_c));
	if (with_net) {
		assert_true(strncmp(mac_p, "52:54:", 6) == 0);
		assert_true(strncmp(mac_c, "52:54:", 6) == 0);
		assert_string_not_equal(mac_p, mac_c);
	} else {
		fprintf(stderr, "note: the sandboxes have no network here (not root, or no network "
		                "namespaces): no MAC to compare\n");
	}

	/* side by side: each counts on its own disk */
	c1 = count_of(parent);
	c2 = count_of(child);
	assert_true(wait_count(parent, c1 + 2) >= c1 + 2);
	assert_true(wait_count(child, c2 + 2) >= c2 + 2);
	line_of(child, "[\"sh\",\"-c\",\"echo child-only > /sandbox/home/g; cat /sandbox/home/g\"]",
	        text, sizeof(text));
	{
		char *none = NULL;
		assert_int_equal(run(parent, "[\"test\",\"-e\",\"/sandbox/home/g\"]", &none), 1);
		free(none);
	}

	/* a disk snapshot of the stopped parent boots its files */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", parent);
	json_decref(harness_json_timeout(p.sock, "POST", path, NULL, 300000, 200));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/snapshots", parent);
	j = harness_json_timeout(p.sock, "POST", path, NULL, 300000, 201);
	assert_string_equal(harness_str(j, "kind"), "disk");
	snprintf(body, sizeof(body), "\"snapshot_id\":\"%s\"", harness_str(j, "id"));
	json_decref(j);
	{
		char booted[40];
		create(body, booted, sizeof(booted));
		line_of(booted, "[\"cat\",\"/sandbox/home/f\"]", text, sizeof(text));
		assert_string_equal(text, "from-the-parent");
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", booted);
		json_decref(harness_json_timeout(p.sock, "DELETE", path, NULL, 120000, 204));
	}

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", child);
	json_decref(harness_json_timeout(p.sock, "DELETE", path, NULL, 120000, 204));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", parent);
	json_decref(harness_json_timeout(p.sock, "DELETE", path, NULL, 120000, 204));
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap);
	assert_int_equal(harness_http(p.sock, "DELETE", path, NULL, NULL), 204);
}

static int
setup(void **state)
{
	static const char *launcher[6];

	(void)state;
	snprintf(netns, sizeof(netns), "sbxtf%d", (int)(getpid() % 100000));
	if (geteuid() == 0 &&
	    sh("command -v ip >/dev/null && command -v nft >/dev/null && sh '%s' up %s", NETNS_SH,
	       netns) &&
	    harness_tmpdir(resolv_dir, sizeof(resolv_dir)) == 0) {
		snprintf(resolv, sizeof(resolv), "%s/resolv.conf", resolv_dir);
		with_net = sh("echo 'nameserver 203.0.113.53' > '%s'", resolv);
	}
	if (!with_net)
		return harness_start_vm(&p, NULL, NULL);
	launcher[0] = "/bin/sh";
	launcher[1] = NETNS_SH;
	launcher[2] = "exec-host";
	launcher[3] = netns;
	launcher[4] = resolv;
	launcher[5] = NULL;
	harness_set_launcher(launcher);
	return harness_start_vm(&p, (const char *const[]){ "--egress", "on", NULL }, NULL);
}

static int
teardown(void **state)
{
	int rc;

	(void)state;
	(void)harness_delete_all(p.sock);
	rc = harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
	harness_set_launcher(NULL);
	if (geteuid() == 0 && !sh("sh '%s' down %s", NETNS_SH, netns))
		fprintf(stderr, "test-vm-fork: netns.sh down %s failed\n", netns);
	if (resolv_dir[0])
		harness_rmtree(resolv_dir);
	return rc == 0 ? 0 : -1;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fork_carries_on_with_its_own_identity),
	};

	harness_vm_bundle();
	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
