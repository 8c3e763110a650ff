/* cases-sandboxes.c: conformance cases for the sandbox resource (docs/api.md, "Sandboxes"):
 * create, list, get, names, delete, stop/start, patch, limits and environment; the network policy
 * is in cases-network.c. */
#include <stdlib.h>
#include "cases.h"
#include "conf.h"
#include "util.h"

static const char *
sandbox_path(const char *ref, const char *suffix)
{
	return conf_fmt("/v1/sandboxes/%s%s", ref, suffix ? suffix : "");
}

/* The error (status, code) of a request that must fail. */
static void
expect_request_error(const char *method, const char *path, const char *body, long want_status,
                     const char *want_code)
{
	json_t *j;
	long status = conf_request(method, path, body, &j);

	conf_assert_error(status, j, want_status, want_code);
}

static void
assert_state(const json_t *sb, const char *state)
{
	if (!streq(conf_str(sb, "state"), state))
		fail_msg("sandbox '%s' is '%s'; expected '%s'", conf_str(sb, "id"),
		         conf_str(sb, "state"), state);
}

/* GET of a ref that must not resolve. */
static void
assert_not_found(const char *ref)
{
	json_t *j;
	long status = conf_request("GET", sandbox_path(ref, NULL), NULL, &j);

	conf_assert_error(status, j, 404, "not_found");
}

static const json_t *
limit(const char *name)
{
	const json_t *v = json_object_get(json_object_get(conf_caps(), "limits"), name);

	if (!json_is_integer(v))
		fail_msg("capabilities.limits.%s is missing", name);
	return v;
}

void
case_create_returns_a_running_sandbox(void **state)
{
	const char *name = conf_name("create");
	json_t *sb = conf_create(conf_fmt("{\"name\":\"%s\"}", name)), *who;

	for (size_t i = 0; conf_sandbox_fields[i]; i++)
		if (!json_object_get(sb, conf_sandbox_fields[i]))
			fail_msg("the sandbox object has no '%s'", conf_sandbox_fields[i]);
	if (!conf_id_valid(conf_str(sb, "id")))
		fail_msg("id '%s' does not match ^sbx_([a-z0-9-]{1,31}_)?[0-9a-f]{16}$",
		         conf_str(sb, "id"));
	assert_string_equal(conf_str(sb, "name"), name);
	assert_state(sb, "running");
	assert_string_equal(conf_str(json_object_get(sb, "labels"), "conformance"), "1");
	assert_true(json_is_array(json_object_get(sb, "env_names")));
	assert_true(json_is_object(json_object_get(sb, "network")));
	assert_true(json_integer_value(json_object_get(sb, "cpus")) >= 1);
	assert_true(json_integer_value(json_object_get(sb, "cpus")) <=
	            json_integer_value(limit("max_cpus")));
	assert_true(*conf_str(sb, "created_at"));
	/* the owner comes from the credential */
	assert_int_equal(conf_request("GET", "/v1/whoami", NULL, &who), 200);
	assert_string_equal(conf_str(sb, "owner"), conf_str(who, "user"));
	/* and GET tells the same story */
	assert_string_equal(conf_str(conf_get(conf_str(sb, "id")), "id"), conf_str(sb, "id"));
}

/* The owner, id and state are the server's: a body carrying them is refused. */
void
case_create_cannot_set_owner(void **state)
{
	static const char *const bodies[] = {
		"{\"owner\":\"someone-else\"}",
		"{\"id\":\"sbx_0123456789abcdef\"}",
		"{\"state\":\"running\"}",
	};

	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++)
		conf_create_refused(bodies[i], 400, "invalid_request");
	if (!strstr(conf_error_message(conf_create_refused(bodies[0], 400, "invalid_request")),
	            "owner"))
		fail_msg("the message does not name the field 'owner'");
}

void
case_create_without_wait_returns_at_once(void **state)
{
	json_t *sb = conf_create("{\"wait\":false}");
	const char *s = conf_str(sb, "state");

	if (!streq(s, "pending") && !streq(s, "starting") && !streq(s, "running"))
		fail_msg("a create without waiting answered state '%s'", s);
	conf_wait_state(conf_str(sb, "id"), "running");
}

void
case_list_is_newest_first(void **state)
{
	const char *marker = conf_name("m");
	const char *fields = conf_fmt("{\"labels\":{\"marker\":\"%s\"}}", marker);
	const char *a = conf_str(conf_create(fields), "id");
	const char *b = conf_str(conf_create(fields), "id");
	json_t *ids = conf_list_ids(conf_fmt("?label=marker=%s", marker));

	assert_int_equal(json_array_size(ids), 2);
	assert_string_equal(json_string_value(json_array_get(ids, 0)), b);
	assert_string_equal(json_string_value(json_array_get(ids, 1)), a);
	ids = conf_list_ids(NULL);
	assert_true(conf_index_of(ids, b) >= 0);
	assert_true(conf_index_of(ids, b) < conf_index_of(ids, a));
}

void
case_get_by_id_and_by_name(void **state)
{
	const char *name = conf_name("get");
	const char *id = conf_str(conf_create(conf_fmt("{\"name\":\"%s\"}", name)), "id");
	json_t *by_id = conf_get(id), *by_name = conf_get(name);

	assert_string_equal(conf_str(by_id, "id"), id);
	assert_string_equal(conf_str(by_name, "id"), id);
	assert_string_equal(conf_str(by_id, "name"), name);
	assert_string_equal(conf_str(by_name, "name"), name);
}

/* ?label=k=v filters, and several filters must all match. */
void
case_label_filter_selects(void **state)
{
	const char *m = conf_name("m");
	const char *a = conf_str(
	        conf_create(conf_fmt(
	                "{\"labels\":{\"marker\":\"%s\",\"team\":\"a\",\"tier\":\"x\"}}", m)),
	        "id");
	const char *b = conf_str(
	        conf_create(conf_fmt(
	                "{\"labels\":{\"marker\":\"%s\",\"team\":\"b\",\"tier\":\"x\"}}", m)),
	        "id");
	json_t *ids;

	ids = conf_list_ids(conf_fmt("?label=marker=%s", m));
	assert_int_equal(json_array_size(ids), 2);
	ids = conf_list_ids(conf_fmt("?label=marker=%s&label=team=a", m));
	assert_int_equal(json_array_size(ids), 1);
	assert_int_equal(conf_index_of(ids, a), 0);
	ids = conf_list_ids(conf_fmt("?label=team=b&label=marker=%s", m));
	assert_int_equal(json_array_size(ids), 1);
	assert_int_equal(conf_index_of(ids, b), 0);
	ids = conf_list_ids(conf_fmt("?label=marker=%s&label=tier=x", m));
	assert_int_equal(json_array_size(ids), 2);
	ids = conf_list_ids(conf_fmt("?label=marker=%s&label=team=a&label=tier=y", m));
	assert_int_equal(json_array_size(ids), 0);
	ids = conf_list_ids(conf_fmt("?label=marker=%s&label=team=c", m));
	assert_int_equal(json_array_size(ids), 0);
}

/* Names match ^[a-z0-9][a-z0-9-]{0,62}$, so they never look like ids. */
void
case_invalid_names_are_rejected(void **state)
{
	static const char *const bad[] = {
		"sbx_x", "sbx_0123456789abcdef", "Upper", "has space", "-lead", "", "a_b", "a.b",
		"a/b",
	};
	char *long64 = conf_keep(calloc(1, 65)), *ok63;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		conf_create_refused(conf_fmt("{\"name\":\"%s\"}", bad[i]), 400, "invalid_request");
	memset(long64, 'a', 64);
	conf_create_refused(conf_fmt("{\"name\":\"%s\"}", long64), 400, "invalid_request");
	conf_create_refused("{\"name\":42}", 400, "invalid_request");

	ok63 = conf_keep(calloc(1, 64));
	memset(ok63, 'a', 63);
	memcpy(ok63, conf_name("n63"), strlen("cf-n63-") + 8);
	assert_string_equal(conf_str(conf_create(conf_fmt("{\"name\":\"%s\"}", ok63)), "name"),
	                    ok63);
}

/* A name is unique among the caller's live sandboxes: create and rename both conflict. */
void
case_duplicate_live_name_conflicts(void **state)
{
	const char *name = conf_name("dup");
	const char *other;

	conf_create(conf_fmt("{\"name\":\"%s\"}", name));
	conf_create_refused(conf_fmt("{\"name\":\"%s\"}", name), 409, "conflict");
	other = conf_str(conf_create(NULL), "id");
	expect_request_error("PATCH", sandbox_path(other, NULL),
	                     conf_fmt("{\"name\":\"%s\"}", name), 409, "conflict");
}

/* After a delete the name is free again, gets a new id, and resolves to the live
 * sandbox; the old id still answers, terminated. */
void
case_name_is_reusable_after_delete(void **state)
{
	const char *name = conf_name("reuse");
	const char *first = conf_str(conf_create(conf_fmt("{\"name\":\"%s\"}", name)), "id");
	const char *second;

	assert_int_equal(conf_request("DELETE", sandbox_path(first, NULL), NULL, NULL), 204);
	second = conf_str(conf_create(conf_fmt("{\"name\":\"%s\"}", name)), "id");
	assert_string_not_equal(first, second);
	assert_string_equal(conf_str(conf_get(name), "id"), second);
	assert_state(conf_get(name), "running");
	assert_state(conf_get(first), "terminated");
}

/* DELETE is idempotent; the id keeps answering. */
void
case_terminate_is_idempotent(void **state)
{
	const char *id = conf_str(conf_create(NULL), "id");
	const struct conf_resp *r;

	for (int i = 0; i < 2; i++) {
		r = conf_send(
		        &(struct conf_req){ .method = "DELETE", .path = sandbox_path(id, NULL) });
		if (r->status != 204)
			fail_msg("DELETE #%d of '%s': expected 204, got %ld: %.300s", i + 1, id,
			         r->status, r->body);
		assert_int_equal(r->body_len, 0);
	}
	assert_state(conf_get(id), "terminated");
}

/* A missing sandbox is 404 not_found, the same for every verb and for ids and names. */
void
case_unknown_sandbox_is_not_found(void **state)
{
	const char *id = conf_random_id(), *name = conf_name("missing");
	json_t *get, *del;
	long status;

	status = conf_request("GET", sandbox_path(id, NULL), NULL, &get);
	conf_assert_error(status, get, 404, "not_found");
	status = conf_request("DELETE", sandbox_path(id, NULL), NULL, &del);
	conf_assert_error(status, del, 404, "not_found");
	/* the same shape whichever verb asked */
	assert_int_equal(json_object_size(json_object_get(get, "error")),
	                 json_object_size(json_object_get(del, "error")));
	expect_request_error("POST", sandbox_path(id, "/stop"), NULL, 404, "not_found");
	expect_request_error("POST", sandbox_path(id, "/start"), NULL, 404, "not_found");
	expect_request_error("PATCH", sandbox_path(id, NULL), "{\"labels\":{}}", 404, "not_found");
	expect_request_error("GET", sandbox_path(id, "/events"), NULL, 404, "not_found");
	assert_not_found(name);
	expect_request_error("DELETE", sandbox_path(name, NULL), NULL, 404, "not_found");
}

/* Process and file work on a sandbox that is not running: 409 conflict, but for reads of a
 * stopped one's files (reads: false), which expect_reads_served checks. A server without the
 * capability may say 501 unsupported instead. */
static void
expect_no_work(const char *id, bool reads)
{
	static const struct {
		const char *capability, *method, *suffix, *body;
	} work[] = {
		{ "processes", "POST", "/run", "{\"argv\":[\"true\"]}" },
		{ "processes", "POST", "/processes", "{\"argv\":[\"true\"]}" },
		{ "processes", "GET", "/processes", NULL },
		{ "files", "GET", "/files?path=/etc/hostname", NULL },
		{ "files", "PUT", "/files?path=/tmp/cf-refused", "x" },
		{ "files", "DELETE", "/files?path=/tmp/cf-refused", NULL },
		{ "files", "GET", "/dirs?path=/tmp", NULL },
	};

	for (size_t i = 0; i < ARRAY_SIZE(work); i++) {
		bool put = streq(work[i].method, "PUT");
		const struct conf_resp *r;

		if (!reads && streq(work[i].capability, "files") && streq(work[i].method, "GET"))
			continue;
		r = conf_send(&(struct conf_req){
		        .method = work[i].method,
		        .path = sandbox_path(id, work[i].suffix),
		        .body = work[i].body,
		        .content_type = put ? "application/octet-stream" : NULL,
		});
		const char *code = conf_str(json_object_get(r->json, "error"), "code");
		if (r->status == 409 && streq(code, "conflict"))
			continue;
		if (!conf_capability(work[i].capability) && r->status == 501)
			continue;
		fail_msg("%s %s of a %s sandbox: expected 409 conflict, got %ld: %.300s",
		         work[i].method, work[i].suffix, conf_str(conf_get(id), "state"), r->status,
		         r->body);
	}
}

/* A terminated sandbox refuses work. */
void
case_terminated_sandbox_refuses_work(void **state)
{
	const char *id = conf_str(conf_create(NULL), "id");

	assert_int_equal(conf_request("DELETE", sandbox_path(id, NULL), NULL, NULL), 204);
	expect_request_error("POST", sandbox_path(id, "/stop"), NULL, 409, "conflict");
	expect_request_error("POST", sandbox_path(id, "/start"), NULL, 409, "conflict");
	expect_request_error("PATCH", sandbox_path(id, NULL),
	                     conf_fmt("{\"labels\":{\"conformance\":\"1\"}}"), 409, "conflict");
	expect_no_work(id, true);
	assert_state(conf_get(id), "terminated");
}

/* A stopped sandbox's files are read all the same: the server boots it for the read (and
 * stops it again later) or reads its disk some other safe way. A server without the
 * capability says 501. */
static void
expect_reads_served(const char *id)
{
	static const char *const reads[] = { "/files?path=/etc/hostname", "/dirs?path=/" };

	for (size_t i = 0; i < ARRAY_SIZE(reads); i++) {
		const struct conf_resp *r = conf_send(&(struct conf_req){
		        .method = "GET",
		        .path = sandbox_path(id, reads[i]),
		});
		if (r->status == 200)
			continue;
		if (!conf_capability("files") && r->status == 501)
			continue;
		fail_msg("GET %s of a %s sandbox: expected 200, got %ld: %.300s", reads[i],
		         conf_str(conf_get(id), "state"), r->status, r->body);
	}
}

static json_t *
stop_or_start(const char *id, const char *verb)
{
	json_t *j;
	long status = conf_request("POST", sandbox_path(id, verb), NULL, &j);

	if (status != 200)
		fail_msg("POST %s %s: expected 200, got %ld", id, verb, status);
	return j;
}

void
case_stop_and_start(void **state)
{
	const char *id = conf_str(conf_create(NULL), "id");

	assert_state(stop_or_start(id, "/stop"), "stopped");
	assert_state(conf_get(id), "stopped");
	/* a stopped sandbox runs nothing and takes no file */
	expect_no_work(id, false);
	/* stopping a stopped sandbox is not an error */
	assert_state(stop_or_start(id, "/stop"), "stopped");
	/* its files can be read all the same */
	expect_reads_served(id);
	assert_state(stop_or_start(id, "/start"), "running");
	assert_state(conf_get(id), "running");
}

void
case_patch_changes_labels_and_name(void **state)
{
	const char *name = conf_name("patch"), *renamed = conf_name("patched");
	const char *id = conf_str(
	        conf_create(conf_fmt("{\"name\":\"%s\",\"labels\":{\"color\":\"red\"}}", name)),
	        "id");
	const char *labels =
	        conf_fmt("{\"conformance\":\"1\",\"conformance-run\":\"%s\",\"color\":\"blue\"}",
	                 conf_run_id());
	json_t *j;

	assert_int_equal(conf_request("PATCH", sandbox_path(id, NULL),
	                              conf_fmt("{\"name\":\"%s\",\"labels\":%s}", renamed, labels),
	                              &j),
	                 200);
	assert_string_equal(conf_str(j, "name"), renamed);
	assert_string_equal(conf_str(json_object_get(j, "labels"), "color"), "blue");
	assert_string_equal(conf_str(conf_get(renamed), "id"), id);
	assert_not_found(name);

	/* a bad field changes nothing, the good ones in the same body included */
	expect_request_error("PATCH", sandbox_path(id, NULL), "{\"name\":\"Bad Name\"}", 400,
	                     "invalid_request");
	expect_request_error("PATCH", sandbox_path(id, NULL),
	                     "{\"labels\":{\"color\":\"green\"},\"name\":\"Bad Name\"}", 400,
	                     "invalid_request");
	j = conf_get(id);
	assert_string_equal(conf_str(j, "name"), renamed);
	assert_string_equal(conf_str(json_object_get(j, "labels"), "color"), "blue");
}

void
case_patch_unknown_field_is_rejected(void **state)
{
	static const char *const bodies[] = {
		"{\"bogus\":1}",
		"{\"owner\":\"someone-else\"}",
		"{\"state\":\"stopped\"}",
		"{\"cpus\":1}",
	};
	const char *id = conf_str(conf_create(NULL), "id");
	json_t *before = conf_get(id), *j;
	long status;

	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++)
		expect_request_error("PATCH", sandbox_path(id, NULL), bodies[i], 400,
		                     "invalid_request");
	status = conf_request("PATCH", sandbox_path(id, NULL), "{\"bogus\":1}", &j);
	conf_assert_error(status, j, 400, "invalid_request");
	if (!strstr(conf_error_message(j), "bogus"))
		fail_msg("the message does not name the unknown field: '%s'",
		         conf_error_message(j));
	assert_string_equal(conf_str(conf_get(id), "owner"), conf_str(before, "owner"));
	assert_string_equal(conf_str(conf_get(id), "state"), conf_str(before, "state"));
}

/* A resource out of the limits is 400, never clamped (so nothing is created). */
void
case_resources_above_limits_are_rejected(void **state)
{
	static const char *const sized[] = { "max_cpus", "max_memory_mb", "max_disk_mb",
		                             "max_idle_timeout_secs", "max_lifetime_secs" };
	static const char *const fields[] = { "cpus", "memory_mb", "disk_mb", "idle_timeout_secs",
		                              "lifetime_secs" };
	static const char *const bad[] = {
		"\"cpus\":0", "\"cpus\":-1", "\"memory_mb\":0", "\"cpus\":\"2\"", "\"cpus\":1.5",
	};
	const char *name;

	for (size_t i = 0; i < ARRAY_SIZE(sized); i++) {
		json_int_t max = json_integer_value(limit(sized[i]));
		if (max <= 0 && i > 0)
			continue; /* 0: no limit advertised */
		name = conf_name("limit");
		conf_create_refused(conf_fmt("{\"name\":\"%s\",\"%s\":%lld}", name, fields[i],
		                             (long long)max + 1),
		                    400, "invalid_request");
		assert_not_found(name);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		name = conf_name("limit");
		conf_create_refused(conf_fmt("{\"name\":\"%s\",%s}", name, bad[i]), 400,
		                    "invalid_request");
		assert_not_found(name);
	}
}

/* Env values never come back (create, get, list, events, the live stream); only the
 * names do. */
void
case_environment_values_are_never_returned(void **state)
{
	const char *value = conf_fmt("s3cr3t-%s", conf_name("value"));
	struct conf_stream *stream = conf_stream_open("/v1/events/stream", NULL);
	const struct conf_resp *r;
	json_t *sb =
	        conf_create(conf_fmt("{\"env\":{\"SECRET_X\":\"%s\",\"PLAIN\":\"p\"}}", value));
	const char *id = conf_str(sb, "id");
	const char *const paths[] = {
		sandbox_path(id, NULL),
		sandbox_path(conf_str(sb, "name"), NULL),
		"/v1/sandboxes",
		conf_fmt("/v1/sandboxes?label=conformance-run=%s", conf_run_id()),
		sandbox_path(id, "/events"),
	};
	json_t *names = json_object_get(sb, "env_names"), *ev;
	uint64_t deadline = now_mono_ms() + 10000;
	bool seen = false;

	if (strstr(conf_keep(json_dumps(sb, JSON_COMPACT)), value))
		fail_msg("the create response carries the env value");
	assert_true(conf_index_of(names, "SECRET_X") >= 0);
	assert_true(conf_index_of(names, "PLAIN") >= 0);
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		r = conf_send(&(struct conf_req){ .path = paths[i] });
		assert_int_equal(r->status, 200);
		if (strstr(r->body, value))
			fail_msg("GET %s carries the env value", paths[i]);
	}
	/* what the live stream said about it, until it ran */
	while (now_mono_ms() < deadline && (ev = conf_stream_next(stream, 2000))) {
		if (strstr(conf_str(ev, "raw"), value))
			fail_msg("the event stream carries the env value");
		if (streq(conf_event_sandbox_id(ev), id))
			seen = true;
		if (seen && strstr(conf_str(ev, "raw"), "\"running\""))
			break;
	}
	if (!seen)
		fail_msg("the event stream said nothing about sandbox '%s'", id);
	/* stopping and starting again (the values are kept for the next boot) still shows none */
	r = conf_send(&(struct conf_req){ .method = "POST", .path = sandbox_path(id, "/stop") });
	assert_int_equal(r->status, 200);
	assert_null(strstr(r->body, value));
	r = conf_send(&(struct conf_req){ .method = "POST", .path = sandbox_path(id, "/start") });
	assert_int_equal(r->status, 200);
	assert_null(strstr(r->body, value));
}

/* Loader and shell variables are refused, alone or among good ones. */
void
case_reserved_environment_names_are_refused(void **state)
{
	static const char *const reserved[] = {
		"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV",
		"SHELLOPTS",  "BASHOPTS",        "PS4",      "IFS",      "GLOBIGNORE",
	};
	const char *name;

	for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
		conf_create_refused(conf_fmt("{\"env\":{\"%s\":\"x\"}}", reserved[i]), 403,
		                    "refused");
	name = conf_name("env");
	conf_create_refused(conf_fmt("{\"name\":\"%s\",\"env\":{\"GOOD\":\"1\",\"LD_PRELOAD\":"
	                             "\"/tmp/x.so\"}}",
	                             name),
	                    403, "refused");
	assert_not_found(name);
}

/* Env names match ^[A-Za-z_][A-Za-z0-9_]*$; a NUL in a value is 400. */
void
case_invalid_environment_names_are_rejected(void **state)
{
	static const char *const bad[] = {
		"{\"env\":{\"1BAD\":\"x\"}}", "{\"env\":{\"A-B\":\"x\"}}",
		"{\"env\":{\"\":\"x\"}}",     "{\"env\":{\"A B\":\"x\"}}",
		"{\"env\":{\"A=B\":\"x\"}}",  "{\"env\":{\"OK\":\"a\\u0000b\"}}",
		"{\"env\":{\"OK\":1}}",       "{\"env\":[\"OK=1\"]}",
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		conf_create_refused(bad[i], 400, "invalid_request");
	/* and a good one is fine */
	assert_int_equal(conf_index_of(json_object_get(conf_create("{\"env\":{\"_ok_1\":\"x\"}}"),
	                                               "env_names"),
	                               "_ok_1"),
	                 0);
}

/* PATCH {} changes nothing and is 400; "name": "" removes the name, as null does; a field
 * left out stays as it was. */
void
case_patch_absent_empty_and_null_fields(void **state)
{
	const char *name = conf_name("pname"), *again = conf_name("pname");
	json_t *sb = conf_create(conf_fmt("{\"name\":\"%s\",\"labels\":{\"conformance\":\"1\","
	                                  "\"conformance-run\":\"%s\",\"color\":\"red\"}}",
	                                  name, conf_run_id()));
	const char *id = conf_str(sb, "id");
	json_t *j;

	expect_request_error("PATCH", sandbox_path(id, NULL), "{}", 400, "invalid_request");
	j = conf_get(id);
	assert_string_equal(conf_str(j, "name"), name);
	assert_string_equal(conf_str(json_object_get(j, "labels"), "color"), "red");

	/* "" removes the name: it is null, and the old name finds nothing */
	assert_int_equal(conf_request("PATCH", sandbox_path(id, NULL), "{\"name\":\"\"}", &j), 200);
	if (!json_is_null(json_object_get(j, "name")))
		fail_msg("PATCH {\"name\":\"\"} left the name %s", conf_str(j, "name"));
	assert_true(json_is_null(json_object_get(conf_get(id), "name")));
	assert_not_found(name);
	/* the labels, absent from that PATCH, are as they were */
	assert_string_equal(conf_str(json_object_get(conf_get(id), "labels"), "color"), "red");

	/* null removes it too */
	assert_int_equal(conf_request("PATCH", sandbox_path(id, NULL),
	                              conf_fmt("{\"name\":\"%s\"}", again), &j),
	                 200);
	assert_string_equal(conf_str(conf_get(again), "id"), id);
	assert_int_equal(conf_request("PATCH", sandbox_path(id, NULL), "{\"name\":null}", &j), 200);
	assert_true(json_is_null(json_object_get(j, "name")));
	assert_not_found(again);

	/* a PATCH of the labels alone leaves the name (set again) as it is */
	assert_int_equal(conf_request("PATCH", sandbox_path(id, NULL),
	                              conf_fmt("{\"name\":\"%s\"}", again), &j),
	                 200);
	assert_int_equal(
	        conf_request("PATCH", sandbox_path(id, NULL),
	                     conf_fmt("{\"labels\":{\"conformance\":\"1\",\"conformance-run\":"
	                              "\"%s\",\"color\":\"blue\"}}",
	                              conf_run_id()),
	                     &j),
	        200);
	assert_string_equal(conf_str(j, "name"), again);
	assert_string_equal(conf_str(json_object_get(j, "labels"), "color"), "blue");
}

/* The ids of GET /v1/sandboxes?<query>&label=marker=<m>, with each one's state in states
 * (an object, owned by the case). */
static json_t *
list_marked(const char *query, const char *marker, json_t **ret_states)
{
	json_t *j, *ids = conf_keep_json(json_array()), *states = conf_keep_json(json_object());
	const json_t *sb;
	long status;
	size_t i;

	status = conf_request(
	        "GET",
	        conf_fmt("/v1/sandboxes?%s%slabel=marker=%s", query, *query ? "&" : "", marker),
	        NULL, &j);
	if (status != 200)
		fail_msg("GET /v1/sandboxes?%s: expected 200, got %ld", query, status);
	json_array_foreach (json_object_get(j, "sandboxes"), i, sb) {
		json_array_append_new(ids, json_string(conf_str(sb, "id")));
		json_object_set_new(states, conf_str(sb, "id"), json_string(conf_str(sb, "state")));
	}
	if (ret_states)
		*ret_states = states;
	return ids;
}

/* GET /v1/sandboxes lists terminated sandboxes too (state terminated, with a reason), newest
 * first, until the server forgets them; ?state= filters; the name of a terminated one is free
 * for a new sandbox, and its id still answers. */
void
case_terminated_sandboxes_are_listed(void **state)
{
	const char *marker = conf_name("m"), *name = conf_name("ended");
	const char *fields =
	        conf_fmt("{\"name\":\"%s\",\"labels\":{\"marker\":\"%s\"}}", name, marker);
	const char *older =
	        conf_str(conf_create(conf_fmt("{\"labels\":{\"marker\":\"%s\"}}", marker)), "id");
	const char *ended = conf_str(conf_create(fields), "id"), *newer;
	json_t *ids, *states, *sb;
	const json_t *v;
	size_t i;

	assert_int_equal(conf_request("DELETE", sandbox_path(ended, NULL), NULL, NULL), 204);
	ids = list_marked("", marker, &states);
	assert_int_equal(json_array_size(ids), 2);
	assert_int_equal(conf_index_of(ids, ended), 0); /* newest first */
	assert_int_equal(conf_index_of(ids, older), 1);
	assert_string_equal(conf_str(states, ended), "terminated");
	assert_string_equal(conf_str(states, older), "running");
	/* the listed object is the whole sandbox, with why it ended */
	assert_int_equal(conf_request("GET", "/v1/sandboxes?state=terminated", NULL, &sb), 200);
	json_array_foreach (json_object_get(sb, "sandboxes"), i, v)
		if (streq(conf_str(v, "id"), ended)) {
			for (size_t f = 0; conf_sandbox_fields[f]; f++)
				if (!json_object_get(v, conf_sandbox_fields[f]))
					fail_msg("the terminated sandbox in the list has no '%s'",
					         conf_sandbox_fields[f]);
			if (!*conf_str(v, "reason"))
				fail_msg("the terminated sandbox in the list has no reason");
			assert_string_equal(conf_str(v, "name"), name);
		}

	/* ?state= selects */
	ids = list_marked("state=terminated", marker, NULL);
	assert_int_equal(json_array_size(ids), 1);
	assert_int_equal(conf_index_of(ids, ended), 0);
	ids = list_marked("state=running", marker, NULL);
	assert_int_equal(json_array_size(ids), 1);
	assert_int_equal(conf_index_of(ids, older), 0);
	expect_request_error("GET", "/v1/sandboxes?state=bogus", NULL, 400, "invalid_request");

	/* the name is free: a new sandbox takes it, the name finds the new one, the old id the
	 * terminated one; both are listed */
	newer = conf_str(conf_create(fields), "id");
	assert_string_equal(conf_str(conf_get(name), "id"), newer);
	assert_state(conf_get(ended), "terminated");
	ids = list_marked("", marker, &states);
	assert_int_equal(json_array_size(ids), 3);
	assert_int_equal(conf_index_of(ids, newer), 0);
	assert_string_equal(conf_str(states, newer), "running");
	assert_string_equal(conf_str(states, ended), "terminated");
}

/* A server limit bounds what a create leaves out: with max_lifetime_secs (or
 * max_idle_timeout_secs) set, a sandbox created without one gets the limit, never none, and
 * asking for none (0) is out of the limit. */
void
case_limits_bound_what_a_create_leaves_out(void **state)
{
	static const struct {
		const char *limit, *field;
	} timeouts[] = {
		{ "max_lifetime_secs", "lifetime_secs" },
		{ "max_idle_timeout_secs", "idle_timeout_secs" },
	};
	unsigned checked = 0;
	json_t *sb = NULL;

	for (size_t i = 0; i < ARRAY_SIZE(timeouts); i++) {
		json_int_t max = json_integer_value(limit(timeouts[i].limit));
		const char *name;
		if (max <= 0)
			continue;
		if (!sb)
			sb = conf_create(NULL);
		if (json_integer_value(json_object_get(sb, timeouts[i].field)) != max)
			fail_msg("capabilities.limits.%s is %lld, but a sandbox created without "
			         "'%s' "
			         "got %lld",
			         timeouts[i].limit, (long long)max, timeouts[i].field,
			         (long long)json_integer_value(
			                 json_object_get(sb, timeouts[i].field)));
		if (i == 0 && json_is_null(json_object_get(sb, "expires_at")))
			fail_msg("a sandbox with lifetime_secs %lld has no expires_at",
			         (long long)max);
		/* null is the same as leaving it out */
		assert_int_equal(json_integer_value(json_object_get(
		                         conf_create(conf_fmt("{\"%s\":null}", timeouts[i].field)),
		                         timeouts[i].field)),
		                 max);
		/* 0 is none, which is above the limit: refused, never clamped */
		name = conf_name("limit");
		conf_create_refused(conf_fmt("{\"name\":\"%s\",\"%s\":0}", name, timeouts[i].field),
		                    400, "invalid_request");
		assert_not_found(name);
		checked++;
	}
	if (checked == 0) {
		print_message("skip: capabilities.limits has neither max_lifetime_secs nor "
		              "max_idle_timeout_secs\n");
		skip();
	}
}
