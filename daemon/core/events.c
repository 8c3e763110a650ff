/* events.c: persisting and broadcasting sandbox events; see events.h. */
#include "events.h"
#include "log.h"
#include "sandboxd.h"
#include "store.h"
#include "util.h"

void
events_subscribe(struct sandboxd *d, struct event_sub *s)
{
	list_push_back(&d->subscribers, &s->link);
}

void
events_unsubscribe(struct event_sub *s)
{
	list_remove(&s->link);
}

json_t *
event_to_json(const struct store_event *e)
{
	char when[32];
	json_t *data = json_loads(e->data, 0, NULL);

	format_rfc3339(e->time_ms, when);
	return json_pack("{s:I, s:s, s:s, s:s, s:o}", "seq", (json_int_t)e->seq, "time", when,
	                 "sandbox_id", e->sandbox_id, "type", e->type, "data",
	                 data ? data : json_object());
}

int
event_format_sse(struct buf *out, int64_t seq, const char *type, const char *event_json)
{
	/* event_json is compact JSON: it holds no newline, so one data: line carries it */
	return buf_printf(out, "id: %lld\nevent: %s\ndata: %s\n\n", (long long)seq, type,
	                  event_json);
}

static void
broadcast(struct sandboxd *d, struct sandbox *sb, int64_t seq, int64_t time_ms, const char *type,
          json_t *data)
{
	_cleanup_buf_ struct buf msg = BUF_INIT(4 << 20);
	_cleanup_free_ char *text = NULL;
	struct list_node *n, *tmp;
	json_t *obj, *ev;
	char when[32];

	if (list_empty(&d->subscribers))
		return;
	format_rfc3339(time_ms, when);
	obj = json_loadb(sb->json, sb->json_len, 0, NULL);
	ev = json_pack("{s:I, s:s, s:s, s:s, s:O, s:o}", "seq", (json_int_t)seq, "time", when,
	               "sandbox_id", sb->id, "type", type, "data", data, "sandbox",
	               obj ? obj : json_null());
	if (!ev)
		return;
	text = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	if (!text || event_format_sse(&msg, seq, type, text) < 0)
		return;
	LIST_FOREACH_SAFE (n, tmp, &d->subscribers) {
		struct event_sub *s = list_entry(n, struct event_sub, link);
		if (s->owner && !streq(s->owner, sb->owner))
			continue;
		s->fn(s, msg.data, msg.len);
	}
}

int
sandbox_commit(struct sandboxd *d, struct sandbox *sb, bool insert, const char *type, json_t *data)
{
	int64_t seq = 0;
	int r;

	if (!data)
		data = json_object();
	if (!data)
		return -ENOMEM;
	sb->updated_at = now_unix_ms();
	r = sandbox_refresh_json(sb);
	if (r < 0)
		goto out;
	r = store_begin(d->store);
	if (r < 0)
		goto out;
	r = sandbox_save(d->store, sb, insert);
	if (r >= 0)
		r = store_add_event(d->store, sb->id, sb->updated_at, type, data, &seq);
	if (r >= 0)
		r = store_commit(d->store);
	if (r < 0) {
		store_rollback(d->store);
		goto out;
	}
	broadcast(d, sb, seq, sb->updated_at, type, data);
out:
	json_decref(data);
	return r;
}

int
sandbox_event(struct sandboxd *d, struct sandbox *sb, const char *type, json_t *data)
{
	int64_t seq = 0, now = now_unix_ms();
	int r;

	if (!data)
		return -ENOMEM;
	r = store_add_event(d->store, sb->id, now, type, data, &seq);
	if (r >= 0)
		broadcast(d, sb, seq, now, type, data);
	json_decref(data);
	return r;
}

void
events_broadcast_node(struct sandboxd *d, const char *type, json_t *data)
{
	_cleanup_buf_ struct buf msg = BUF_INIT(1 << 20);
	_cleanup_free_ char *text = NULL;
	struct list_node *n, *tmp;
	char when[32];
	json_t *ev;

	if (!data)
		return;
	if (list_empty(&d->subscribers)) {
		json_decref(data);
		return;
	}
	format_rfc3339(now_unix_ms(), when);
	ev = json_pack("{s:s, s:s, s:o}", "time", when, "type", type, "data", data);
	text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	/* no id: line, so a reconnecting client's Last-Event-ID stays the last sandbox event */
	if (!text || buf_printf(&msg, "event: %s\ndata: %s\n\n", type, text) < 0)
		return;
	LIST_FOREACH_SAFE (n, tmp, &d->subscribers) {
		struct event_sub *s = list_entry(n, struct event_sub, link);
		if (!s->owner)
			s->fn(s, msg.data, msg.len);
	}
}
