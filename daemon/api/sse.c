/* sse.c: events as the API writes them, in lists and on the SSE stream; see sse.h. */
#include "events.h"
#include "sandbox.h"
#include "sse.h"
#include "store.h"
#include "util.h"

#define SSE_MESSAGE_MAX (4u << 20)

/* Adds the event's audit record, when it has one, as "audit". */
static int
add_audit(json_t *ev, const char *audit)
{
	json_t *rec = audit ? json_loads(audit, 0, NULL) : NULL;

	return rec ? json_object_set_new(ev, "audit", rec) : 0;
}

json_t *
sse_event_json(const struct store_event *e)
{
	char when[32];
	json_t *data = json_loads(e->data, 0, NULL), *ev;

	format_rfc3339(e->time_ms, when);
	ev = json_pack("{s:I, s:s, s:s, s:s, s:o}", "seq", (json_int_t)e->seq, "time", when,
	               "sandbox_id", e->sandbox_id, "type", e->type, "data",
	               data ? data : json_object());
	if (ev && add_audit(ev, e->audit) < 0) {
		json_decref(ev);
		return NULL;
	}
	return ev;
}

int
sse_format(struct buf *out, int64_t seq, const char *type, const char *json)
{
	return buf_printf(out, "id: %lld\nevent: %s\ndata: %s\n\n", (long long)seq, type, json);
}

/* The text of a sandbox's event as streams get it: the API form, with the sandbox. */
static char *
sandbox_event_text(const struct event *e)
{
	const struct sandbox *sb = e->sb;
	json_t *obj = json_loadb(sb->json, sb->json_len, 0, NULL), *ev;
	char when[32], *text;

	format_rfc3339(e->time_ms, when);
	ev = json_pack("{s:I, s:s, s:s, s:s, s:O, s:o}", "seq", (json_int_t)e->seq, "time", when,
	               "sandbox_id", sb->id, "type", e->type, "data", (json_t *)e->data, "sandbox",
	               obj ? obj : json_null());
	if (!ev || add_audit(ev, e->audit) < 0) {
		json_decref(ev);
		return NULL;
	}
	text = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	return text;
}

static char *
node_event_text(const struct event *e)
{
	json_t *ev;
	char when[32], *text;

	format_rfc3339(e->time_ms, when);
	ev = json_pack("{s:s, s:s, s:O}", "time", when, "type", e->type, "data", (json_t *)e->data);
	text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	return text;
}

/* The message of the latest broadcast written: every stream handed the same event (the same
 * serial) gets these bytes, encoded once. */
static struct {
	uint64_t serial; /* 0: none yet */
	struct buf msg;
} last = { .msg = BUF_INIT(SSE_MESSAGE_MAX) };

int
sse_live(const struct event *e, const char **ret, size_t *ret_len)
{
	_cleanup_free_ char *text = NULL;
	int r;

	if (last.serial != e->serial || e->serial == 0) {
		last.serial = 0;
		buf_reset(&last.msg);
		text = e->sb ? sandbox_event_text(e) : node_event_text(e);
		if (!text)
			return -ENOMEM;
		if (e->sb && e->seq > 0)
			r = sse_format(&last.msg, e->seq, e->type, text);
		else
			r = buf_printf(&last.msg, "event: %s\ndata: %s\n\n", e->type, text);
		if (r < 0)
			return r;
		last.serial = e->serial;
	}
	*ret = last.msg.data;
	*ret_len = last.msg.len;
	return 0;
}
