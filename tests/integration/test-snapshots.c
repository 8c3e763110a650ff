/* test-snapshots.c: snapshots and forks as a client meets them, against sandboxd-fake (whose
 * snapshot() writes layer.qcow2 and memory.mig into the snapshot's directory, and whose fork
 * logs "fork-from SNAP ID" in calls.log): a snapshot is taken, listed, read and deleted, and
 * audited; its bytes are counted on the node; a stopped sandbox gives only a disk snapshot; a
 * second one while one is written is 409; a fork takes the snapshot's image and resources and
 * starts from its directory; a snapshot a fork is still starting from cannot be deleted; another
 * user's snapshot answers like a missing one; a schedule takes snapshots and deletes the oldest
 * beyond keep (audited "retention"); a node whose disk is full refuses one (507); a restart with
 * --keep-sandboxes keeps them and one without deletes them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

static const char *bin;

static const char *
err_code(json_t *j)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), "code"));
}

static const char *
err_message(json_t *j)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), "message"));
}

/* A running sandbox made with body; its id into id. */
static void
create(struct daemon_proc *p, const char *body, char *id, size_t n)
{
	json_t *j = harness_json(p->sock, "POST", "/v1/sandboxes", body, 201);

	assert_string_equal(harness_str(j, "state"), "running");
	snprintf(id, n, "%s", harness_str(j, "id"));
	json_decref(j);
}

/* POST …/snapshots on sandbox ref with body; its id into id (the answer is returned). */
static json_t *
snapshot(struct daemon_proc *p, const char *ref, const char *body, char *id, size_t n)
{
	char path[128];
	json_t *j;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/snapshots", ref);
	j = harness_json(p->sock, "POST", path, body, 201);
	assert_non_null(j);
	snprintf(id, n, "%s", harness_str(j, "id"));
	assert_true(strncmp(id, "snap_", 5) == 0 && strlen(id) == 21);
	return j;
}

/* How many audit records of type (with field == value, when field is given) sandbox id has. */
static int
count_events(struct daemon_proc *p, const char *id, const char *type, const char *field,
             const char *value)
{
	char path[128];
	json_t *j, *e;
	size_t i;
	int n = 0;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/events", id);
	j = harness_json(p->sock, "GET", path, NULL, 200);
	json_array_foreach (json_object_get(j, "events"), i, e)
		if (strcmp(harness_str(e, "type"), type) == 0 &&
		    (!field ||
		     (harness_str(e, field) && strcmp(harness_str(e, field), value) == 0)))
			n++;
	json_decref(j);
	return n;
}

static json_int_t
node_int(struct daemon_proc *p, const char *key)
{
	json_t *j = harness_json(p->sock, "GET", "/v1/node", NULL, 200);
	json_int_t v = json_integer_value(json_object_get(j, key));

	json_decref(j);
	return v;
}

/* How many snapshots GET /v1/snapshots lists for the caller (hdrs NULL: the operator). */
static size_t
list_count(struct daemon_proc *p, const char *hdrs, const char *query)
{
	char path[128];
	json_t *j;
	size_t n;

	snprintf(path, sizeof(path), "/v1/snapshots%s", query ? query : "");
	j = harness_json_headers(p->sock, hdrs, "GET", path, NULL, 200, NULL);
	n = json_array_size(json_object_get(j, "snapshots"));
	json_decref(j);
	return n;
}

static void
test_take_list_delete(void **state)
{
	struct daemon_proc p = { 0 };
	char box[40], snap[40], snap2[40], path[160], dir[512];
	json_t *j;
	struct stat st;

	(void)state;
	if (harness_start(&p, bin, NULL, NULL) < 0)
		fail();
	/* the capabilities say what the fake takes */
	j = harness_json(p.sock, "GET", "/v1/capabilities", NULL, 200);
	assert_true(json_is_true(
	        json_object_get(json_object_get(j, "capabilities"), "memory_snapshot")));
	assert_true(
	        json_is_true(json_object_get(json_object_get(j, "capabilities"), "disk_snapshot")));
	assert_non_null(json_object_get(json_object_get(j, "limits"), "min_snapshot_every_secs"));
	json_decref(j);

	create(&p, "{\"name\":\"src\",\"cpus\":1,\"memory_mb\":256,\"disk_mb\":1024}", box,
	       sizeof(box));
	assert_int_equal(node_int(&p, "snapshot_bytes"), 0);
	/* a running sandbox: memory by default */
	j = snapshot(&p, "src", NULL, snap, sizeof(snap));
	assert_string_equal(harness_str(j, "kind"), "memory");
	assert_string_equal(harness_str(j, "sandbox"), box);
	assert_string_equal(harness_str(j, "image"), "sandbox-base");
	assert_true(json_integer_value(json_object_get(j, "bytes")) >= 256 * 1024);
	assert_non_null(harness_str(j, "created_at"));
	json_decref(j);
	snprintf(dir, sizeof(dir), "%s/snapshots/%s", p.state, snap);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	snprintf(dir, sizeof(dir), "%s/snapshots/%s/memory.mig", p.state, snap);
	assert_int_equal(access(dir, F_OK), 0);
	snprintf(dir, sizeof(dir), "%s/snapshots/%s/snapshot.json", p.state, snap);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_true(node_int(&p, "snapshot_bytes") >= 256 * 1024);
	assert_int_equal(node_int(&p, "snapshots"), 1);

	/* listed and read back */
	assert_int_equal(list_count(&p, NULL, NULL), 1);
	snprintf(path, sizeof(path), "?sandbox=%s", box);
	assert_int_equal(list_count(&p, NULL, path), 1);
	assert_int_equal(list_count(&p, NULL, "?sandbox=sbx_0000000000000000"), 0);
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	assert_string_equal(harness_str(j, "id"), snap);
	json_decref(j);
	j = harness_json(p.sock, "GET", "/v1/snapshots/snap_0123456789abcdef", NULL, 404);
	assert_string_equal(err_code(j), "not_found");
	json_decref(j);
	j = harness_json(p.sock, "POST", "/v1/sandboxes/src/snapshots", "{\"kind\":\"ram\"}", 400);
	json_decref(j);
	j = harness_json(p.sock, "POST", "/v1/sandboxes/src/snapshots", "{\"colour\":1}", 400);
	json_decref(j);
	j = harness_json(p.sock, "POST", "/v1/sandboxes/nobody/snapshots", NULL, 404);
	json_decref(j);

	/* audited on the sandbox */
	assert_int_equal(count_events(&p, box, "snapshot.created", "snapshot", snap), 1);

	/* stopped: a disk snapshot only */
	j = harness_json(p.sock, "POST", "/v1/sandboxes/src/stop", NULL, 200);
	json_decref(j);
	j = harness_json(p.sock, "POST", "/v1/sandboxes/src/snapshots", "{\"kind\":\"memory\"}",
	                 409);
	assert_string_equal(err_code(j), "conflict");
	assert_non_null(strstr(err_message(j), "disk"));
	json_decref(j);
	j = snapshot(&p, "src", NULL, snap2, sizeof(snap2));
	assert_string_equal(harness_str(j, "kind"), "disk");
	json_decref(j);
	snprintf(dir, sizeof(dir), "%s/snapshots/%s/memory.mig", p.state, snap2);
	assert_int_equal(access(dir, F_OK), -1);
	snprintf(dir, sizeof(dir), "%s/snapshots/%s/layer.qcow2", p.state, snap2);
	assert_int_equal(access(dir, F_OK), 0);
	assert_int_equal(list_count(&p, NULL, NULL), 2);

	/* deleted: gone from the list, the disk and the node's count, audited */
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap);
	assert_int_equal(harness_http(p.sock, "DELETE", path, NULL, NULL), 204);
	assert_int_equal(harness_http(p.sock, "DELETE", path, NULL, NULL), 404);
	snprintf(dir, sizeof(dir), "%s/snapshots/%s", p.state, snap);
	assert_int_equal(access(dir, F_OK), -1);
	assert_int_equal(list_count(&p, NULL, NULL), 1);
	assert_int_equal(node_int(&p, "snapshots"), 1);
	assert_int_equal(count_events(&p, box, "snapshot.deleted", "reason", "request"), 1);

	/* a snapshot outlives its sandbox, and its deletion is still audited on it */
	assert_int_equal(harness_http(p.sock, "DELETE", "/v1/sandboxes/src", NULL, NULL), 204);
	assert_int_equal(list_count(&p, NULL, NULL), 1);
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap2);
	assert_int_equal(harness_http(p.sock, "DELETE", path, NULL, NULL), 204);
	assert_int_equal(count_events(&p, box, "snapshot.deleted", "snapshot", snap2), 1);
	assert_int_equal(node_int(&p, "snapshot_bytes"), 0);
	harness_cleanup(&p);
}

static void
test_fork(void **state)
{
	struct daemon_proc p = { 0 };
	char box[40], snap[40], fork[40], body[256], path[160], calls[400], line[128];
	json_t *j;
	int status;

	(void)state;
	if (harness_start(&p, bin, NULL, NULL) < 0)
		fail();
	create(&p, "{\"name\":\"parent\",\"cpus\":2,\"memory_mb\":384,\"disk_mb\":2048}", box,
	       sizeof(box));
	json_decref(snapshot(&p, "parent", NULL, snap, sizeof(snap)));

	/* what the snapshot fixes may be repeated, never changed */
	snprintf(body, sizeof(body), "{\"snapshot_id\":\"%s\",\"cpus\":1}", snap);
	j = harness_json(p.sock, "POST", "/v1/sandboxes", body, 400);
	assert_non_null(strstr(err_message(j), "cpus"));
	json_decref(j);
	snprintf(body, sizeof(body), "{\"snapshot_id\":\"%s\",\"image\":\"busybox\"}", snap);
	j = harness_json(p.sock, "POST", "/v1/sandboxes", body, 400);
	assert_non_null(strstr(err_message(j), "image"));
	json_decref(j);
	j = harness_json(p.sock, "POST", "/v1/sandboxes",
	                 "{\"snapshot_id\":\"snap_0123456789abcdef\"}", 404);
	json_decref(j);
	j = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"snapshot_id\":\"snap_xyz\"}", 400);
	json_decref(j);

	/* the fork: the snapshot's image and resources, its own id and name */
	snprintf(body, sizeof(body),
	         "{\"name\":\"child\",\"snapshot_id\":\"%s\",\"memory_mb\":384}", snap);
	j = harness_json(p.sock, "POST", "/v1/sandboxes", body, 201);
	assert_string_equal(harness_str(j, "state"), "running");
	assert_string_equal(harness_str(j, "image"), "sandbox-base");
	assert_int_equal(json_integer_value(json_object_get(j, "cpus")), 2);
	assert_int_equal(json_integer_value(json_object_get(j, "memory_mb")), 384);
	assert_int_equal(json_integer_value(json_object_get(j, "disk_mb")), 2048);
	assert_string_equal(harness_str(j, "snapshot_id"), snap);
	snprintf(fork, sizeof(fork), "%s", harness_str(j, "id"));
	assert_string_not_equal(fork, box);
	json_decref(j);
	/* the backend started it from the snapshot's directory */
	snprintf(calls, sizeof(calls), "%s/fake/calls.log", p.state);
	snprintf(line, sizeof(line), "fork-from %s %s", snap, fork);
	assert_true(harness_file_contains(calls, line));
	snprintf(line, sizeof(line), "fork-from %s %s", snap, box);
	assert_false(harness_file_contains(calls, line));
	/* audited with the snapshot */
	assert_int_equal(count_events(&p, fork, "sandbox.created", "snapshot", snap), 1);
	/* parent and fork run side by side */
	j = harness_json(p.sock, "GET", "/v1/sandboxes/parent", NULL, 200);
	assert_string_equal(harness_str(j, "state"), "running");
	json_decref(j);

	/* a snapshot a fork is still starting from cannot be deleted */
	create(&p, "{\"name\":\"slow\",\"image\":\"fake/slow\"}", box, sizeof(box));
	/* the fake writes a fake/slow sandbox's snapshot in 2 s: another meanwhile is 409 */
	{
		int fd = harness_stream_open(p.sock, "POST", "/v1/sandboxes/slow/snapshots", NULL);
		char *buf = NULL;
		size_t len = 0;
		assert_true(fd >= 0);
		usleep(300000);
		j = harness_json(p.sock, "POST", "/v1/sandboxes/slow/snapshots", NULL, 409);
		assert_non_null(strstr(err_message(j), "being written"));
		json_decref(j);
		/* nor does it stop meanwhile */
		j = harness_json(p.sock, "POST", "/v1/sandboxes/slow/stop", NULL, 409);
		json_decref(j);
		assert_true(harness_stream_read(fd, 10000, "\"scheduled\"", &buf, &len) >= 0);
		assert_non_null(buf);
		assert_non_null(strstr(buf, " 201 "));
		free(buf);
		close(fd);
	}
	snprintf(path, sizeof(path), "/v1/snapshots?sandbox=%s", box);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	assert_int_equal(json_array_size(json_object_get(j, "snapshots")), 1);
	snprintf(snap, sizeof(snap), "%s",
	         harness_str(json_array_get(json_object_get(j, "snapshots"), 0), "id"));
	json_decref(j);
	snprintf(body, sizeof(body), "{\"snapshot_id\":\"%s\",\"wait\":false}", snap);
	j = harness_json(p.sock, "POST", "/v1/sandboxes", body, 201);
	snprintf(fork, sizeof(fork), "%s", harness_str(j, "id"));
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap);
	j = harness_json(p.sock, "DELETE", path, NULL, 409);
	assert_non_null(strstr(err_message(j), "in use"));
	json_decref(j);
	/* once it runs, the snapshot may go */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", fork);
	for (int i = 0; i < 100; i++) {
		j = harness_json(p.sock, "GET", path, NULL, 200);
		status = strcmp(harness_str(j, "state"), "running") == 0;
		json_decref(j);
		if (status)
			break;
		usleep(100000);
	}
	assert_true(status);
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap);
	assert_int_equal(harness_http(p.sock, "DELETE", path, NULL, NULL), 204);
	harness_cleanup(&p);
}

/* Two users: each sees only their own snapshots, and another's answers like a missing one. */
static void
test_ownership(void **state)
{
	struct daemon_proc p = { 0 };
	const char *users[] = { "ann@example.com", "ben@example.com" };
	char hdrs[2][600], snap[40], body[256], path[160];
	json_t *j;

	(void)state;
	if (harness_start(&p, bin, NULL, NULL) < 0)
		fail();
	for (int i = 0; i < 2; i++) {
		char *head = NULL, *cookie, *semi;
		snprintf(body, sizeof(body),
		         "{\"email\":\"%s\",\"password\":\"password-%d-long\",\"role\":\"user\"}",
		         users[i], i);
		json_decref(harness_json(p.sock, "POST", "/v1/users", body, 201));
		snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"password-%d-long\"}",
		         users[i], i);
		j = harness_json_headers(p.sock, NULL, "POST", "/v1/auth/login", body, 200, &head);
		cookie = harness_header(head, "Set-Cookie");
		assert_non_null(cookie);
		semi = strchr(cookie, ';');
		if (semi)
			*semi = '\0';
		snprintf(hdrs[i], sizeof(hdrs[i]), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", cookie,
		         harness_str(j, "csrf_token"));
		free(cookie);
		free(head);
		json_decref(j);
	}
	j = harness_json_headers(p.sock, hdrs[0], "POST", "/v1/sandboxes", "{\"name\":\"mine\"}",
	                         201, NULL);
	json_decref(j);
	j = harness_json_headers(p.sock, hdrs[0], "POST", "/v1/sandboxes/mine/snapshots", NULL, 201,
	                         NULL);
	snprintf(snap, sizeof(snap), "%s", harness_str(j, "id"));
	assert_string_equal(harness_str(j, "owner"), users[0]);
	json_decref(j);
	assert_int_equal(list_count(&p, hdrs[0], NULL), 1);
	assert_int_equal(list_count(&p, hdrs[1], NULL), 0);
	assert_int_equal(list_count(&p, NULL, NULL), 1); /* the operator sees all */
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap);
	j = harness_json_headers(p.sock, hdrs[1], "GET", path, NULL, 404, NULL);
	json_decref(j);
	j = harness_json_headers(p.sock, hdrs[1], "DELETE", path, NULL, 404, NULL);
	json_decref(j);
	/* nor can ben fork it */
	snprintf(body, sizeof(body), "{\"snapshot_id\":\"%s\"}", snap);
	j = harness_json_headers(p.sock, hdrs[1], "POST", "/v1/sandboxes", body, 404, NULL);
	json_decref(j);
	/* ann can */
	j = harness_json_headers(p.sock, hdrs[0], "POST", "/v1/sandboxes", body, 201, NULL);
	assert_string_equal(harness_str(j, "owner"), users[0]);
	json_decref(j);
	j = harness_json_headers(p.sock, hdrs[0], "GET", path, NULL, 200, NULL);
	json_decref(j);
	harness_cleanup(&p);
}

/* A schedule takes snapshots and keeps the newest keep. */
static void
test_schedule(void **state)
{
	struct daemon_proc p = { 0 };
	char dir[300], policy[400], box[40], box2[40], path[160];
	const char *args[] = { "--policy", policy, NULL };
	json_t *j, *s;
	size_t n = 0;
	FILE *f;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof(dir)), 0);
	snprintf(policy, sizeof(policy), "%s/policy.yaml", dir);
	f = fopen(policy, "w");
	assert_non_null(f);
	fputs("limits:\n  min_snapshot_every_secs: 1\n  max_snapshot_keep: 3\n", f);
	fclose(f);
	if (harness_start(&p, bin, args, NULL) < 0)
		fail();
	create(&p, "{\"name\":\"ticker\"}", box, sizeof(box));
	/* beyond the limits: 400 */
	j = harness_json(p.sock, "PUT", "/v1/sandboxes/ticker/snapshot-schedule",
	                 "{\"every_secs\":1,\"keep\":4}", 400);
	json_decref(j);
	j = harness_json(p.sock, "PUT", "/v1/sandboxes/ticker/snapshot-schedule", "{\"keep\":2}",
	                 400);
	json_decref(j);
	j = harness_json(p.sock, "PUT", "/v1/sandboxes/ticker/snapshot-schedule",
	                 "{\"every_secs\":1,\"keep\":2}", 200);
	s = json_object_get(j, "snapshot_schedule");
	assert_int_equal(json_integer_value(json_object_get(s, "every_secs")), 1);
	assert_int_equal(json_integer_value(json_object_get(s, "keep")), 2);
	json_decref(j);
	/* the create's fields set one too */
	create(&p, "{\"name\":\"other\",\"snapshot_every_secs\":3600,\"snapshot_keep\":1}", box2,
	       sizeof(box2));
	j = harness_json(p.sock, "GET", "/v1/sandboxes/other", NULL, 200);
	s = json_object_get(j, "snapshot_schedule");
	assert_int_equal(json_integer_value(json_object_get(s, "every_secs")), 3600);
	json_decref(j);
	j = harness_json(p.sock, "POST", "/v1/sandboxes", "{\"snapshot_keep\":1}", 400);
	json_decref(j);

	/* after a few seconds: snapshots were taken, the oldest deleted for retention */
	for (int i = 0; i < 100; i++) {
		if (count_events(&p, box, "snapshot.deleted", "reason", "retention") >= 2)
			break;
		usleep(100000);
	}
	assert_true(count_events(&p, box, "snapshot.deleted", "reason", "retention") >= 2);
	assert_true(count_events(&p, box, "snapshot.created", NULL, NULL) >= 4);
	snprintf(path, sizeof(path), "/v1/snapshots?sandbox=%s", box);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	n = json_array_size(json_object_get(j, "snapshots"));
	assert_true(n >= 1 && n <= 3); /* keep 2, and at most one more being audited */
	assert_true(json_is_true(
	        json_object_get(json_array_get(json_object_get(j, "snapshots"), 0), "scheduled")));
	json_decref(j);
	/* turned off: no more */
	j = harness_json(p.sock, "PUT", "/v1/sandboxes/ticker/snapshot-schedule",
	                 "{\"every_secs\":0}", 200);
	assert_true(json_is_null(json_object_get(j, "snapshot_schedule")));
	json_decref(j);
	n = (size_t)count_events(&p, box, "snapshot.created", NULL, NULL);
	sleep(2);
	assert_int_equal(count_events(&p, box, "snapshot.created", NULL, NULL), (int)n);
	/* none for the sandbox scheduled hourly */
	snprintf(path, sizeof(path), "?sandbox=%s", box2);
	assert_int_equal(list_count(&p, NULL, path), 0);
	harness_cleanup(&p);
	harness_rmtree(dir);
}

/* The node's disk: a snapshot that would overfill it is refused. */
static void
test_capacity(void **state)
{
	struct daemon_proc p = { 0 };
	const char *args[] = { "--capacity-disk-mb", "1300", NULL };
	char box[40], snap[40];
	json_t *j;

	(void)state;
	if (harness_start(&p, bin, args, NULL) < 0)
		fail();
	create(&p, "{\"name\":\"big\",\"memory_mb\":512,\"disk_mb\":1024}", box, sizeof(box));
	/* its memory (512 MiB) would not fit beside the 1024 MiB given to it */
	j = harness_json(p.sock, "POST", "/v1/sandboxes/big/snapshots", NULL, 507);
	assert_string_equal(err_code(j), "insufficient_storage");
	assert_non_null(strstr(err_message(j), "--capacity-disk-mb"));
	json_decref(j);
	assert_int_equal(list_count(&p, NULL, NULL), 0);
	/* its disk alone does */
	json_decref(snapshot(&p, "big", "{\"kind\":\"disk\"}", snap, sizeof(snap)));
	harness_cleanup(&p);
}

/* A sandbox with a volume gives disk snapshots only (the volume is not in one, and a fork
 * restored from its memory would need the drive its guest had mounted): memory is 409, the
 * default is disk, and a fork of it boots the files. */
static void
test_volumes_disk_only(void **state)
{
	struct daemon_proc p = { 0 };
	char box[40], snap[40], body[128];
	json_t *j;

	(void)state;
	if (harness_start(&p, bin, NULL, NULL) < 0)
		fail();
	json_decref(harness_json(p.sock, "POST", "/v1/volumes",
	                         "{\"name\":\"data\",\"size_mb\":16}", 201));
	create(&p, "{\"name\":\"withvol\",\"volumes\":[{\"name\":\"data\",\"path\":\"/mnt/d\"}]}",
	       box, sizeof(box));
	j = harness_json(p.sock, "POST", "/v1/sandboxes/withvol/snapshots", "{\"kind\":\"memory\"}",
	                 409);
	assert_non_null(strstr(err_message(j), "volumes"));
	json_decref(j);
	j = snapshot(&p, "withvol", NULL, snap, sizeof(snap));
	assert_string_equal(harness_str(j, "kind"), "disk");
	json_decref(j);
	snprintf(body, sizeof(body), "{\"snapshot_id\":\"%s\"}", snap);
	json_decref(harness_json(p.sock, "POST", "/v1/sandboxes", body, 201));
	harness_cleanup(&p);
}

/* A restart with --keep-sandboxes lists them again; one without deletes them. */
static void
test_restart(void **state)
{
	static const char *const keep[] = { "--keep-sandboxes", NULL };
	struct daemon_proc p = { 0 };
	char box[40], snap[40], body[128], path[400];
	json_t *j;

	(void)state;
	if (harness_start(&p, bin, keep, NULL) < 0)
		fail();
	create(&p, "{\"name\":\"keeper\"}", box, sizeof(box));
	json_decref(snapshot(&p, "keeper", NULL, snap, sizeof(snap)));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	if (harness_restart(&p, bin, keep, NULL) < 0)
		fail();
	assert_int_equal(list_count(&p, NULL, NULL), 1);
	snprintf(path, sizeof(path), "/v1/snapshots/%s", snap);
	j = harness_json(p.sock, "GET", path, NULL, 200);
	assert_string_equal(harness_str(j, "sandbox"), box);
	assert_string_equal(harness_str(j, "kind"), "memory");
	json_decref(j);
	assert_true(node_int(&p, "snapshot_bytes") > 0);
	/* still usable to start a sandbox from */
	snprintf(body, sizeof(body), "{\"snapshot_id\":\"%s\"}", snap);
	json_decref(harness_json(p.sock, "POST", "/v1/sandboxes", body, 201));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	/* without the flag: every snapshot goes, and the log says how many */
	if (harness_restart(&p, bin, NULL, NULL) < 0)
		fail();
	assert_int_equal(list_count(&p, NULL, NULL), 0);
	assert_true(harness_file_contains(p.log, "snapshots: deleted 1 an earlier run left"));
	snprintf(path, sizeof(path), "%s/snapshots", p.state);
	assert_int_equal(harness_count_entries(path), 0);
	harness_cleanup(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_list_delete),  cmocka_unit_test(test_fork),
		cmocka_unit_test(test_ownership),         cmocka_unit_test(test_schedule),
		cmocka_unit_test(test_capacity),          cmocka_unit_test(test_restart),
		cmocka_unit_test(test_volumes_disk_only),
	};

	bin = harness_binary("SANDBOXD_FAKE");
	return harness_exit_code(cmocka_run_group_tests(tests, NULL, NULL));
}
