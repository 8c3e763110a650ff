/* cases-events.c: conformance cases for events (docs/api.md, "Events"): a sandbox's audit
 * trail, flat records of exactly the contract's shape that never hold an argument or an
 * environment value; the live SSE stream GET /v1/events/stream and its replay from
 * Last-Event-ID; and a sandbox's samples, GET …/metrics. */
#include "cases.h"
#include "conf.h"
#include "util.h"

#define STREAM_WAIT_MS 10000

static const char *
dump(const json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	return conf_keep(s ? s : strdup("(no JSON body)"));
}

/* The index of the first record of type at or after from, or -1. */
static int
find_type(const json_t *events, size_t from, const char *type)
{
	for (size_t i = from; i < json_array_size(events); i++)
		if (streq(conf_str(json_array_get(events, i), "type"), type))
			return (int)i;
	return -1;
}

/* The audit trail is oldest first, starts with sandbox.created, records the stop, the start
 * and the end with its reason, each record flat and of exactly its type's shape, and it
 * outlives the sandbox (by id, not by name). */
void
case_the_audit_log_records_what_happened(void **state)
{
	const char *secret = conf_fmt("s3cr3t-%s", conf_name("v"));
	json_t *sb = conf_create(conf_fmt("{\"env\":{\"AUDIT_SECRET\":\"%s\"},\"labels\":"
	                                  "{\"purpose\":\"audit\"}}",
	                                  secret));
	const char *id = conf_str(sb, "id"), *name = conf_str(sb, "name");
	json_t *events, *ev, *j;
	int created, stopped, started, terminated;
	const char *text;
	size_t i;
	long status;

	assert_int_equal(conf_request("POST", conf_fmt("/v1/sandboxes/%s/stop", id), NULL, NULL),
	                 200);
	assert_int_equal(conf_request("POST", conf_fmt("/v1/sandboxes/%s/start", id), NULL, NULL),
	                 200);
	assert_true(json_array_size(conf_audit_trail(name)) > 0);
	assert_int_equal(conf_request("DELETE", conf_fmt("/v1/sandboxes/%s", id), NULL, NULL), 204);

	events = conf_audit_trail(id);
	text = dump(events);
	json_array_foreach (events, i, ev)
		conf_assert_audit_record(ev, id);
	if (strstr(text, secret))
		fail_msg("the audit trail holds an environment value: %.500s", text);
	created = find_type(events, 0, "sandbox.created");
	if (created != 0)
		fail_msg("the audit trail does not start with sandbox.created: %.500s", text);
	ev = json_array_get(events, 0);
	assert_string_equal(conf_str(ev, "name"), name);
	assert_string_equal(conf_str(ev, "image"), conf_str(sb, "image"));
	assert_true(json_equal(json_object_get(ev, "labels"), json_object_get(sb, "labels")));
	assert_true(json_equal(json_object_get(ev, "network"), json_object_get(sb, "network")));
	if (conf_index_of(json_object_get(ev, "env_names"), "AUDIT_SECRET") < 0)
		fail_msg("sandbox.created does not name the environment variable: %s", dump(ev));
	/* oldest first: the stop, then the start, then the end */
	stopped = find_type(events, 1, "sandbox.stopped");
	started = stopped < 0 ? -1 : find_type(events, (size_t)stopped, "sandbox.started");
	terminated = find_type(events, 1, "sandbox.terminated");
	if (stopped < 0 || started < 0 || terminated < 0 || terminated < started)
		fail_msg("the audit trail does not record the stop, the start and then the delete, "
		         "in that order: %.800s",
		         text);
	if (terminated != (int)json_array_size(events) - 1)
		fail_msg("records after sandbox.terminated: %.800s", text);
	assert_string_equal(conf_str(json_array_get(events, terminated), "reason"), "request");
	/* times never go back */
	for (i = 1; i < json_array_size(events); i++)
		if (strcmp(conf_str(json_array_get(events, i - 1), "time"),
		           conf_str(json_array_get(events, i), "time")) > 0)
			fail_msg("the audit trail is not oldest first: %.800s", text);

	/* names resolve among live sandboxes only */
	status = conf_request("GET", conf_fmt("/v1/sandboxes/%s/events", name), NULL, &j);
	conf_assert_error(status, j, 404, "not_found");
}

/* Every record of a busy sandbox has exactly its type's shape, and neither a process's
 * argument text nor any environment value (the sandbox's or a process's) appears anywhere in
 * the trail: processes, files and a network change where the server offers them. */
void
case_the_audit_trail_is_flat_and_holds_no_secrets(void **state)
{
	const char *sb_secret = conf_fmt("sbval-%s", conf_name("v"));
	const char *proc_secret = conf_fmt("procval-%s", conf_name("v"));
	const char *arg = conf_fmt("argtext-%s", conf_name("a"));
	json_t *sb = conf_create(conf_fmt("{\"env\":{\"SB_SECRET\":\"%s\"}}", sb_secret));
	const char *id = conf_str(sb, "id");
	const char *file = conf_fmt("/tmp/cf-%s-audit.txt", conf_run_id());
	bool processes = conf_capability("processes"), files = conf_capability("files");
	json_t *events, *ev, *j;
	const char *text;
	size_t i;

	if (conf_capability("network_policy_update")) {
		long st = conf_request("PATCH", conf_fmt("/v1/sandboxes/%s", id),
		                       "{\"network\":{\"mode\":\"allowlist\",\"allow\":"
		                       "[\"example.org\"]}}",
		                       &j);
		if (st != 200)
			fail_msg("PATCH network: expected 200, got %ld: %s", st, dump(j));
	}
	if (processes) {
		long st = conf_request(
		        "POST", conf_fmt("/v1/sandboxes/%s/run", id),
		        conf_fmt("{\"argv\":[\"echo\",\"%s\"],\"env\":{\"PROC_SECRET\":\"%s\"},"
		                 "\"cwd\":\"/tmp\"}",
		                 arg, proc_secret),
		        &j);
		if (st != 200)
			fail_msg("POST run: expected 200, got %ld: %s", st, dump(j));
	}
	if (files) {
		const struct conf_resp *r = conf_send(&(struct conf_req){
		        .method = "PUT",
		        .path = conf_fmt("/v1/sandboxes/%s/files?path=%s", id, conf_escape(file)),
		        .body = "12345",
		        .content_type = "application/octet-stream" });
		assert_int_equal(r->status, 204);
		assert_int_equal(conf_request("GET",
		                              conf_fmt("/v1/sandboxes/%s/files?path=%s", id,
		                                       conf_escape(file)),
		                              NULL, NULL),
		                 200);
		assert_int_equal(conf_request("DELETE",
		                              conf_fmt("/v1/sandboxes/%s/files?path=%s", id,
		                                       conf_escape(file)),
		                              NULL, NULL),
		                 204);
	}
	events = conf_audit_trail(id);
	text = dump(events);
	json_array_foreach (events, i, ev)
		conf_assert_audit_record(ev, id);
	if (strstr(text, sb_secret) || strstr(text, proc_secret))
		fail_msg("the audit trail holds an environment value: %.800s", text);
	if (strstr(text, arg))
		fail_msg("the audit trail holds a process's argument text: %.800s", text);
	if (conf_capability("network_policy_update") &&
	    find_type(events, 0, "sandbox.network_updated") < 0)
		fail_msg("no sandbox.network_updated after a PATCH of the network: %.800s", text);
	if (processes) {
		int k = find_type(events, 0, "process.started");
		if (k < 0 || find_type(events, (size_t)k, "process.exited") < 0)
			fail_msg("no process.started and process.exited for a run: %.800s", text);
		ev = json_array_get(events, (size_t)k);
		assert_string_equal(conf_str(ev, "program"), "echo");
		assert_string_equal(conf_str(ev, "cwd"), "/tmp");
		assert_int_equal(json_integer_value(json_object_get(ev, "arg_count")), 1);
		if (conf_index_of(json_object_get(ev, "env_names"), "PROC_SECRET") < 0)
			fail_msg("process.started does not name the request's environment: %s",
			         dump(ev));
	}
	if (files) {
		static const char *const types[] = { "file.written", "file.read", "file.removed" };
		for (i = 0; i < ARRAY_SIZE(types); i++) {
			int k = find_type(events, 0, types[i]);
			if (k < 0)
				fail_msg("no %s record: %.800s", types[i], text);
			ev = json_array_get(events, (size_t)k);
			assert_string_equal(conf_str(ev, "path"), file);
			assert_int_equal(json_integer_value(json_object_get(ev, "bytes")), 5);
		}
	}
}

/* GET …/metrics: a route of the capability "metrics" (501 unsupported without it). Samples
 * measured on the host, oldest first, each {time, cpu_seconds, memory_bytes, disk_bytes,
 * net_rx_bytes, net_tx_bytes}; a running sandbox has one at once, and counters never go
 * back. Someone else's or a missing sandbox is 404. */
void
case_metrics_are_samples_of_a_running_sandbox(void **state)
{
	static const char *const fields[] = { "time",       "cpu_seconds",  "memory_bytes",
		                              "disk_bytes", "net_rx_bytes", "net_tx_bytes" };
	const char *id, *name;
	json_t *j, *samples, *prev = NULL, *x;
	long status;
	size_t i;

	conf_need_sandboxes();
	if (!conf_capability("metrics")) {
		json_t *sb = conf_create(NULL);
		status = conf_request(
		        "GET", conf_fmt("/v1/sandboxes/%s/metrics", conf_str(sb, "id")), NULL, &j);
		conf_assert_error(status, j, 501, "unsupported");
		skip();
	}
	j = conf_create(NULL);
	id = conf_str(j, "id");
	name = conf_str(j, "name");
	for (int round = 0; round < 2; round++) {
		status = conf_request(
		        "GET", conf_fmt("/v1/sandboxes/%s/metrics", round ? name : id), NULL, &j);
		if (status != 200)
			fail_msg("GET metrics: expected 200, got %ld: %s", status, dump(j));
		samples = json_object_get(j, "samples");
		if (!json_is_array(samples) || json_object_size(j) != 1)
			fail_msg("GET metrics: not {\"samples\":[...]}: %s", dump(j));
		if (json_array_size(samples) == 0)
			fail_msg("a running sandbox has no sample (one is taken as it starts)");
		json_array_foreach (samples, i, x) {
			if (json_object_size(x) != ARRAY_SIZE(fields))
				fail_msg("a sample is not exactly {%s, ...}: %s", fields[0],
				         dump(x));
			if (!conf_time_valid(conf_str(x, "time")))
				fail_msg("a sample's time is not RFC 3339: %s", dump(x));
			for (size_t k = 1; k < ARRAY_SIZE(fields); k++) {
				json_t *v = json_object_get(x, fields[k]);
				if (!json_is_number(v) || json_number_value(v) < 0)
					fail_msg("a sample's %s is not a number >= 0: %s",
					         fields[k], dump(x));
			}
			if (!json_is_integer(json_object_get(x, "memory_bytes")))
				fail_msg("memory_bytes is not an integer: %s", dump(x));
			/* oldest first, and the counters add up */
			if (prev) {
				static const char *const counters[] = { "cpu_seconds",
					                                "net_rx_bytes",
					                                "net_tx_bytes" };
				if (strcmp(conf_str(prev, "time"), conf_str(x, "time")) > 0)
					fail_msg("samples are not oldest first: %s", dump(samples));
				for (size_t k = 0; k < ARRAY_SIZE(counters); k++)
					if (json_number_value(json_object_get(x, counters[k])) <
					    json_number_value(json_object_get(prev, counters[k])))
						fail_msg("%s went back: %s", counters[k],
						         dump(samples));
			}
			prev = x;
		}
	}
	status = conf_request("GET", conf_fmt("/v1/sandboxes/%s/metrics", conf_random_id()), NULL,
	                      &j);
	conf_assert_error(status, j, 404, "not_found");
}

/* The live stream tells a subscriber about a sandbox created after it subscribed. */
void
case_event_stream_delivers_new_sandboxes(void **state)
{
	struct conf_stream *s = conf_stream_open("/v1/events/stream", NULL);
	const char *id = conf_str(conf_create("{\"wait\":false}"), "id");
	bool created = false, changed = false;
	uint64_t deadline = now_mono_ms() + STREAM_WAIT_MS;
	json_t *ev;

	while (!(created && changed) && now_mono_ms() < deadline &&
	       (ev = conf_stream_next(s, STREAM_WAIT_MS))) {
		if (!streq(conf_event_sandbox_id(ev), id))
			continue;
		if (streq(conf_event_type(ev), "created"))
			created = true;
		else if (created && streq(conf_event_type(ev), "state"))
			changed = true;
	}
	if (!created)
		fail_msg("no \"created\" event for sandbox '%s' within %d ms", id, STREAM_WAIT_MS);
	if (!changed)
		fail_msg("no \"state\" event after \"created\" for sandbox '%s'", id);
}

/* Reconnecting with Last-Event-ID replays what came after that event, and nothing before:
 * the ids are the ones the stream itself gave. */
void
case_event_stream_replays_after_last_event_id(void **state)
{
	struct conf_stream *live = conf_stream_open("/v1/events/stream", NULL), *s;
	const char *id = conf_str(conf_create(NULL), "id");
	long long first = -1, last = -1, prev, got;
	uint64_t deadline = now_mono_ms() + STREAM_WAIT_MS;
	bool seen_last = false;
	size_t n = 0;
	json_t *ev;

	/* the sandbox's events as they came, with their ids, until it ran */
	while (now_mono_ms() < deadline && (ev = conf_stream_next(live, 2000))) {
		if (!streq(conf_event_sandbox_id(ev), id) || conf_event_seq(ev) < 0)
			continue;
		if (first < 0)
			first = conf_event_seq(ev);
		last = conf_event_seq(ev);
		if (strstr(conf_str(ev, "raw"), "\"running\""))
			break;
	}
	if (first < 0)
		fail_msg("the stream gave no event of sandbox '%s' an id to resume from", id);
	if (last <= first)
		fail_msg("sandbox '%s' has a single event with an id; expected created and state "
		         "changes",
		         id);
	prev = first;
	s = conf_stream_open("/v1/events/stream", conf_fmt("%lld", first));
	deadline = now_mono_ms() + STREAM_WAIT_MS;
	while (!seen_last && now_mono_ms() < deadline && (ev = conf_stream_next(s, 2000))) {
		got = conf_event_seq(ev);
		if (got < 0)
			continue; /* an event with no id (the node's) is not replayed */
		if (got <= prev)
			fail_msg("replay after %lld sent event %lld (out of order or too old)",
			         first, got);
		prev = got;
		n++;
		if (got == last) {
			assert_string_equal(conf_event_sandbox_id(ev), id);
			seen_last = true;
		}
	}
	if (!seen_last)
		fail_msg("replay after %lld did not bring event %lld of sandbox '%s' (%zu events)",
		         first, last, id, n);
}
