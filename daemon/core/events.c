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

/* Counts broadcasts, so a subscriber that writes one event to many streams can tell it is the
 * same event. */
static uint64_t serial;

/* Hands e to every subscriber that may see it: a sandbox's events go to its owner's streams
 * and to those that see every sandbox, the node's only to the latter. */
static void
publish(struct sandboxd *d, struct event *e)
{
	struct list_node *n, *tmp;

	e->serial = ++serial;
	LIST_FOREACH_SAFE (n, tmp, &d->subscribers) {
		struct event_sub *s = list_entry(n, struct event_sub, link);
		if (s->owner && (!e->sb || !streq(s->owner, e->sb->owner)))
			continue;
		s->fn(s, e);
	}
}

static void
broadcast(struct sandboxd *d, struct sandbox *sb, int64_t seq, int64_t time_ms, const char *type,
          json_t *data)
{
	struct event e = { .seq = seq, .time_ms = time_ms, .type = type, .sb = sb, .data = data };

	publish(d, &e);
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
	struct event e = { .time_ms = now_unix_ms(), .type = type, .data = data };

	if (!data)
		return;
	publish(d, &e);
	json_decref(data);
}
