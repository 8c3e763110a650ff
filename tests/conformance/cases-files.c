/* cases-files.c: conformance cases for files (docs/api.md, "Files"): raw reads and writes that keep
 * every byte, parent directories made on the way, listings, removal, and guest paths that may
 * not climb. They share the suite's sandbox, work under a directory of their own in
 * /tmp, and skip when capabilities.files is false. */
#include <string.h>
#include "cases.h"
#include "conf.h"
#include "util.h"

/* The shared sandbox, once the server says it has files. */
static const char *
file_sandbox(void)
{
	conf_need_capability("files");
	return conf_shared_sandbox();
}

/* …/files?path= or …/dirs?path= with path escaped for the query. */
static const char *
file_url(const char *id, const char *what, const char *path)
{
	return conf_fmt("/v1/sandboxes/%s/%s?path=%s", id, what, conf_escape(path));
}

/* A directory of this case's own under /tmp; it and what is registered with remove_later()
 * go when the case ends. */
static const char *
case_dir(const char *id, const char *tag)
{
	const char *dir = conf_fmt("/tmp/cf-%s-%s", conf_run_id(), conf_name(tag));

	conf_defer_request("DELETE", file_url(id, "files", dir), NULL);
	return dir;
}

/* Removes path when the case ends: register parents before what they hold (the last
 * registered goes first). */
static void
remove_later(const char *id, const char *path)
{
	conf_defer_request("DELETE", file_url(id, "files", path), NULL);
}

static const struct conf_resp *
put(const char *id, const char *path, const void *data, size_t len)
{
	return conf_send(&(struct conf_req){ .method = "PUT",
	                                     .path = file_url(id, "files", path),
	                                     .body = len ? data : "",
	                                     .body_len = len,
	                                     .content_type = "application/octet-stream" });
}

static void
put_ok(const char *id, const char *path, const void *data, size_t len)
{
	const struct conf_resp *r = put(id, path, data, len);

	if (r->status != 204)
		fail_msg("PUT %s (%zu bytes): expected 204, got %ld: %.300s", path, len, r->status,
		         r->body);
}

static const struct conf_resp *
get(const char *id, const char *path)
{
	return conf_send(&(struct conf_req){ .path = file_url(id, "files", path) });
}

static void
expect_file(const char *id, const char *path, const void *data, size_t len)
{
	const struct conf_resp *r = get(id, path);

	if (r->status != 200)
		fail_msg("GET %s: expected 200, got %ld: %.300s", path, r->status, r->body);
	if (r->body_len != len || memcmp(r->body, data, len) != 0)
		fail_msg("GET %s: %zu bytes came back, not the %zu written", path, r->body_len,
		         len);
}

static void
expect_error(const char *method, const char *path, long want_status, const char *want_code)
{
	json_t *j;
	long status = conf_request(method, path, NULL, &j);

	conf_assert_error(status, j, want_status, want_code);
}

/* Whether a record of type about path with this byte count (-1: any) is among events. */
static bool
has_file_event(const json_t *events, const char *type, const char *path, long long bytes)
{
	const json_t *ev;
	size_t i;

	json_array_foreach ((json_t *)events, i, ev) {
		if (streq(conf_str(ev, "type"), type) && streq(conf_str(ev, "path"), path) &&
		    (bytes < 0 || json_integer_value(json_object_get(ev, "bytes")) == bytes))
			return true;
	}
	return false;
}

/* Every byte value, a few KiB, through PUT and GET; parents made on the way; an overwrite
 * replaces the whole file; the audit records the path and size, never the content. */
void
case_files_round_trip_binary_safe(void **state)
{
	const char *id = file_sandbox();
	const char *dir = case_dir(id, "rt");
	const char *sub = conf_fmt("%s/a", dir), *subsub = conf_fmt("%s/a/b", dir);
	const char *file = conf_fmt("%s/a/b/every-byte.bin", dir);
	const char *text = conf_fmt("%s/note.txt", dir), *empty = conf_fmt("%s/empty", dir);
	const char *marker = conf_fmt("content-%s", conf_name("m"));
	unsigned char data[6144];
	const json_t *events;
	const char *dump;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i ^ (i >> 8));
	remove_later(id, sub);
	remove_later(id, subsub);
	remove_later(id, file);
	put_ok(id, file, data, sizeof(data));
	expect_file(id, file, data, sizeof(data));
	if (!str_has_prefix(get(id, file)->content_type, "application/octet-stream"))
		fail_msg("GET files: sent as '%s', not application/octet-stream",
		         get(id, file)->content_type);

	/* a shorter write replaces all of it */
	put_ok(id, file, "\0\xff\n", 3);
	expect_file(id, file, "\0\xff\n", 3);
	remove_later(id, empty);
	put_ok(id, empty, "", 0);
	expect_file(id, empty, "", 0);

	remove_later(id, text);
	put_ok(id, text, marker, strlen(marker));
	expect_file(id, text, marker, strlen(marker));
	events = conf_audit_trail(id);
	dump = conf_keep(json_dumps(events, JSON_COMPACT));
	if (strstr(dump, marker))
		fail_msg("the audit log holds a file's content");
	if (!has_file_event(events, "file.written", file, sizeof(data)) ||
	    !has_file_event(events, "file.written", text, (long long)strlen(marker)))
		fail_msg("the audit log has no file.written event with the path and size of "
		         "each write");
	if (!has_file_event(events, "file.read", text, (long long)strlen(marker)))
		fail_msg("the audit log has no file.read event with the path and size");

	/* a body that is not application/octet-stream is not a file */
	if (conf_send(&(struct conf_req){ .method = "PUT",
	                                  .path = file_url(id, "files", text),
	                                  .body = "{}",
	                                  .content_type = "application/json" })
	            ->status != 400)
		fail_msg("PUT files as application/json: expected 400");
}

static const json_t *
entry(const json_t *entries, const char *name)
{
	const json_t *e;
	size_t i;

	json_array_foreach ((json_t *)entries, i, e)
		if (streq(conf_str(e, "name"), name))
			return e;
	return NULL;
}

/* GET …/dirs lists names, types and sizes. */
void
case_directories_are_listed(void **state)
{
	const char *id = file_sandbox();
	const char *dir = case_dir(id, "ls");
	const char *sub = conf_fmt("%s/sub", dir);
	json_t *j;
	const json_t *entries, *e;

	remove_later(id, sub);
	remove_later(id, conf_fmt("%s/sub/inner", dir));
	remove_later(id, conf_fmt("%s/three", dir));
	put_ok(id, conf_fmt("%s/sub/inner", dir), "x", 1);
	put_ok(id, conf_fmt("%s/three", dir), "abc", 3);

	assert_int_equal(conf_request("GET", file_url(id, "dirs", dir), NULL, &j), 200);
	entries = json_object_get(j, "entries");
	if (!json_is_array(entries))
		fail_msg("GET dirs: no \"entries\" array: %s",
		         conf_keep(json_dumps(j, JSON_COMPACT)));
	assert_int_equal(json_array_size(entries), 2);
	e = entry(entries, "three");
	if (!e)
		fail_msg("GET dirs: 'three' is not listed");
	assert_string_equal(conf_str(e, "type"), "file");
	assert_int_equal(json_integer_value(json_object_get(e, "size")), 3);
	e = entry(entries, "sub");
	if (!e)
		fail_msg("GET dirs: 'sub' is not listed");
	assert_string_equal(conf_str(e, "type"), "dir");
	/* names, not paths; no . or .. */
	assert_null(entry(entries, "."));
	assert_null(entry(entries, ".."));

	expect_error("GET", file_url(id, "dirs", conf_fmt("%s/missing", dir)), 404, "not_found");
}

/* DELETE removes a file or an empty directory: a missing one is 404, a full one 409. */
void
case_delete_removes_files_and_empty_directories(void **state)
{
	const char *id = file_sandbox();
	const char *dir = case_dir(id, "rm");
	const char *sub = conf_fmt("%s/full", dir), *file = conf_fmt("%s/full/f", dir);

	remove_later(id, sub);
	remove_later(id, file);
	put_ok(id, file, "data", 4);

	expect_error("DELETE", file_url(id, "files", sub), 409, "conflict");
	expect_file(id, file, "data", 4);
	assert_int_equal(conf_request("DELETE", file_url(id, "files", file), NULL, NULL), 204);
	expect_error("GET", file_url(id, "files", file), 404, "not_found");
	expect_error("DELETE", file_url(id, "files", file), 404, "not_found");
	assert_int_equal(conf_request("DELETE", file_url(id, "files", sub), NULL, NULL), 204);
	expect_error("GET", file_url(id, "dirs", sub), 404, "not_found");
	expect_error("GET", file_url(id, "files", conf_fmt("%s/never-was", dir)), 404, "not_found");
}

/* The sandbox's root directory cannot be removed: a conflict that says so, never a server
 * error; nothing under it went. */
void
case_deleting_the_root_directory_is_a_conflict(void **state)
{
	const char *id = file_sandbox();
	const char *dir = case_dir(id, "root");
	const char *file = conf_fmt("%s/kept", dir);
	json_t *j;

	remove_later(id, file);
	put_ok(id, file, "kept", 4);
	expect_error("DELETE", file_url(id, "files", "/"), 409, "conflict");
	expect_error("DELETE", file_url(id, "files", "//"), 409, "conflict");
	assert_int_equal(conf_request("DELETE", file_url(id, "files", "/"), NULL, &j), 409);
	if (!strstr(conf_error_message(j), "root"))
		fail_msg("DELETE /: the message does not say it is the root directory: %s",
		         conf_error_message(j));
	expect_file(id, file, "kept", 4);
	assert_int_equal(conf_request("GET", file_url(id, "dirs", "/"), NULL, NULL), 200);
}

/* A write to a full disk is 507 insufficient_storage, saying the disk is full, and works
 * again once space is freed. A sandbox of the smallest disk, filled by a process. */
void
case_writing_to_a_full_disk_is_insufficient_storage(void **state)
{
	static char chunk[1 << 20];
	const char *id, *fill = "/sandbox/home/fill", *more = "/sandbox/home/more";
	const struct conf_resp *r;
	json_t *sb, *j;

	conf_need_capability("files");
	conf_need_capability("processes");
	sb = conf_create("{\"disk_mb\":64}");
	id = conf_str(sb, "id");
	/* zeros until the disk is full: dd stops at ENOSPC */
	assert_int_equal(conf_request("POST", conf_fmt("/v1/sandboxes/%s/run", id),
	                              conf_fmt("{\"argv\":[\"dd\",\"if=/dev/zero\",\"of=%s\","
	                                       "\"bs=1M\"],\"timeout_secs\":50}",
	                                       fill),
	                              &j),
	                 200);
	if (json_integer_value(json_object_get(j, "exit_code")) == 0)
		fail_msg("dd filled a 64 MiB disk without an error");

	memset(chunk, 'x', sizeof(chunk));
	r = put(id, more, chunk, sizeof(chunk));
	if (r->status != 507)
		fail_msg("PUT %s on a full disk: expected 507, got %ld: %.300s", more, r->status,
		         r->body);
	assert_string_equal(conf_str(json_object_get(r->json, "error"), "code"),
	                    "insufficient_storage");
	if (!strstr(conf_error_message(r->json), "full"))
		fail_msg("PUT on a full disk: the message does not say the disk is full: %s",
		         conf_error_message(r->json));
	/* nothing half-written was left under that name */
	expect_error("GET", file_url(id, "files", more), 404, "not_found");

	/* space again: the same write lands */
	assert_int_equal(conf_request("DELETE", file_url(id, "files", fill), NULL, NULL), 204);
	put_ok(id, more, chunk, sizeof(chunk));
}

/* Path traversal is rejected: a relative path, "..", a NUL or an empty path is 400 for
 * every file operation, and nothing is read or written through it. */
void
case_path_traversal_is_rejected(void **state)
{
	const char *id = file_sandbox();
	const char *dir = case_dir(id, "pt");
	const char *outside = conf_fmt("%s-outside", dir);
	/* already escaped for the query */
	const char *const bad[] = {
		conf_escape("relative/file"),
		conf_escape("tmp"),
		conf_escape(".."),
		conf_escape("/.."),
		conf_escape("/tmp/.."),
		conf_escape("/tmp/../etc/passwd"),
		conf_escape("/tmp/a/../../etc/passwd"),
		conf_escape("../etc/passwd"),
		"",
		"%2Ftmp%2Fa%00b",
		"%00",
		"%2Fetc%2Fpasswd%00.txt",
	};
	const char *const ops[][2] = {
		{ "GET", "files" },
		{ "PUT", "files" },
		{ "DELETE", "files" },
		{ "GET", "dirs" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		for (size_t k = 0; k < ARRAY_SIZE(ops); k++) {
			const char *path =
			        conf_fmt("/v1/sandboxes/%s/%s?path=%s", id, ops[k][1], bad[i]);
			const struct conf_resp *r = conf_send(&(struct conf_req){
			        .method = ops[k][0],
			        .path = path,
			        .body = streq(ops[k][0], "PUT") ? "x" : NULL,
			        .content_type =
			                streq(ops[k][0], "PUT") ? "application/octet-stream" : NULL,
			});
			if (r->status != 400)
				fail_msg("%s %s: expected 400, got %ld: %.200s", ops[k][0], path,
				         r->status, r->body);
			assert_string_equal(conf_str(json_object_get(r->json, "error"), "code"),
			                    "invalid_request");
		}
	/* no path at all, or two */
	expect_error("GET", conf_fmt("/v1/sandboxes/%s/files", id), 400, "invalid_request");
	expect_error("GET", conf_fmt("/v1/sandboxes/%s/files?path=/tmp&path=/etc", id), 400,
	             "invalid_request");

	/* a write that climbs out of its directory lands nowhere */
	remove_later(id, outside);
	(void)put(id, conf_fmt("%s/../%s", dir, strrchr(outside, '/') + 1), "x", 1);
	expect_error("GET", file_url(id, "files", outside), 404, "not_found");
}
