/* cases-events.c: conformance cases for events (docs/api.md, "Events"): a sandbox's audit
 * trail, the live SSE stream GET /v1/events/stream and its replay from Last-Event-ID. */
#include "cases.h"
#include "conf.h"
#include "util.h"

#define STREAM_WAIT_MS 10000

static json_t *
events_of(const char *ref)
{
	json_t *j, *events;
	long status = conf_request("GET", conf_fmt("/v1/sandboxes/%s/events", ref), NULL, &j);

	if (status != 200)
		fail_msg("GET /v1/sandboxes/%s/events: expected 200, got %ld", ref, status);
	events = json_object_get(j, "events");
	if (!json_is_array(events))
		fail_msg("GET /v1/sandboxes/%s/events: no \"events\" array", ref);
	if (!json_is_boolean(json_object_get(j, "truncated")))
		fail_msg("GET /v1/sandboxes/%s/events: no \"truncated\" flag", ref);
	assert_false(json_is_true(json_object_get(j, "truncated")));
	return events;
}

/* The audit trail is oldest first, starts with "created", records each state change,
 * and outlives the sandbox (by id, not by name). */
void
case_the_audit_log_records_what_happened(void **state)
{
	json_t *sb = conf_create(NULL), *events, *ev, *j;
	const char *id = conf_str(sb, "id"), *name = conf_str(sb, "name");
	json_int_t last_seq = -1;
	size_t i, n_state = 0;
	char *text;
	long status;

	assert_int_equal(conf_request("POST", conf_fmt("/v1/sandboxes/%s/stop", id), NULL, NULL),
	                 200);
	assert_int_equal(conf_request("POST", conf_fmt("/v1/sandboxes/%s/start", id), NULL, NULL),
	                 200);
	assert_true(json_array_size(events_of(name)) > 0);
	assert_int_equal(conf_request("DELETE", conf_fmt("/v1/sandboxes/%s", id), NULL, NULL), 204);

	events = events_of(id);
	assert_true(json_array_size(events) >= 2);
	assert_string_equal(conf_str(json_array_get(events, 0), "type"), "created");
	json_array_foreach (events, i, ev) {
		const json_t *seq = json_object_get(ev, "seq");
		if (!*conf_str(ev, "type"))
			fail_msg("event %zu has no type", i);
		if (*conf_str(ev, "sandbox_id"))
			assert_string_equal(conf_str(ev, "sandbox_id"), id);
		if (streq(conf_str(ev, "type"), "state"))
			n_state++;
		if (seq) {
			/* oldest first */
			assert_true(json_is_integer(seq));
			assert_true(json_integer_value(seq) > last_seq);
			last_seq = json_integer_value(seq);
		}
	}
	assert_true(n_state >= 1);
	text = conf_keep(json_dumps(events, JSON_COMPACT));
	if (!strstr(text, "\"stopped\"") || !strstr(text, "\"terminated\""))
		fail_msg("the events do not record the stop and the delete: %.500s", text);

	/* names resolve among live sandboxes only */
	status = conf_request("GET", conf_fmt("/v1/sandboxes/%s/events", name), NULL, &j);
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

/* Reconnecting with Last-Event-ID replays what came after that event, and nothing before. */
void
case_event_stream_replays_after_last_event_id(void **state)
{
	const char *id = conf_str(conf_create(NULL), "id");
	json_t *events = events_of(id), *ev;
	const json_t *first = json_object_get(json_array_get(events, 0), "seq");
	const json_t *last =
	        json_object_get(json_array_get(events, json_array_size(events) - 1), "seq");
	long long prev, got;
	struct conf_stream *s;
	uint64_t deadline = now_mono_ms() + STREAM_WAIT_MS;
	bool seen_last = false;
	size_t n = 0;

	if (!json_is_integer(first) || !json_is_integer(last))
		fail_msg("the events carry no integer \"seq\" to resume a stream from");
	if (json_integer_value(last) <= json_integer_value(first))
		fail_msg("sandbox '%s' has a single event; expected created and state changes", id);
	prev = json_integer_value(first);
	s = conf_stream_open("/v1/events/stream", conf_fmt("%lld", prev));
	while (!seen_last && now_mono_ms() < deadline && (ev = conf_stream_next(s, 2000))) {
		got = conf_event_seq(ev);
		if (got < 0)
			fail_msg("a replayed event has no numeric id: '%s'", conf_str(ev, "id"));
		if (got <= prev)
			fail_msg("replay after %lld sent event %lld (out of order or too old)",
			         json_integer_value(first), got);
		prev = got;
		n++;
		if (got == json_integer_value(last)) {
			assert_string_equal(conf_event_sandbox_id(ev), id);
			seen_last = true;
		}
	}
	if (!seen_last)
		fail_msg("replay after %lld did not bring event %lld of sandbox '%s' (%zu events)",
		         (long long)json_integer_value(first), (long long)json_integer_value(last),
		         id, n);
}
