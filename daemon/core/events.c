/* events.c: persisting and broadcasting sandbox events; see events.h. */
#include "audit.h"
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
 * and to those that see every sandbox, the node's only to the latter; a stream of one
 * sandbox gets only that one's. */
static void
publish(struct sandboxd *d, struct event *e)
{
	struct list_node *n, *tmp;

	e->serial = ++serial;
	LIST_FOREACH_SAFE (n, tmp, &d->subscribers) {
		struct event_sub *s = list_entry(n, struct event_sub, link);
		if (s->owner && (!e->sb || !streq(s->owner, e->sb->owner)))
			continue;
		if (s->sandbox_id && (!e->sb || !streq(s->sandbox_id, e->sb->id)))
			continue;
		s->fn(s, e);
	}
}

static void
broadcast(struct sandboxd *d, struct sandbox *sb, int64_t seq, int64_t time_ms, const char *type,
          json_t *data, const char *audit)
{
	struct event e = {
		.seq = seq, .time_ms = time_ms, .type = type, .sb = sb, .data = data, .audit = audit
	};

	publish(d, &e);
}

/* The audit record of an event, or NULL (none, or no memory: the trail then misses it, and
 * says so in the log, rather than fail what happened). */
static char *
record_of(const struct sandbox *sb, int64_t time_ms, const char *type, const json_t *data)
{
	char *text = NULL;

	if (audit_record(type, data, sb, time_ms, &text) < 0)
		log_error("sandbox '%s': no audit record of a '%s' event: out of memory", sb->id,
		          type);
	return text;
}

int
sandbox_commit(struct sandboxd *d, struct sandbox *sb, bool insert, const char *type, json_t *data)
{
	_cleanup_free_ char *audit = NULL;
	int64_t seq = 0;
	int r;

	if (!data)
		data = json_object();
	if (!data)
		return -ENOMEM;
	sb->updated_at = now_unix_ms();
	r = sandbox_refresh_json(sb);
	/* a pooled sandbox is no one's yet: no row, no event, no audit record until its claim
	 * inserts its row with the "created" event (pools.h) */
	if (r < 0 || sb->pooled)
		goto out;
	audit = record_of(sb, sb->updated_at, type, data);
	r = store_begin(d->store);
	if (r < 0)
		goto out;
	r = sandbox_save(d->store, sb, insert);
	if (r >= 0) {
		/* the event is the audit trail's, and never fails the change: only a store that
		 * lost the whole transaction does */
		r = store_add_event(d->store, sb->id, sb->updated_at, type, data, audit, &seq);
		if (r < 0) {
			seq = 0;
			r = r == -ECANCELED ? r : 0;
		}
	}
	if (r >= 0)
		r = store_commit(d->store);
	if (r < 0) {
		store_rollback(d->store);
		goto out;
	}
	broadcast(d, sb, seq, sb->updated_at, type, data, audit);
	audit_log_write(d->audit, audit);
out:
	json_decref(data);
	return r;
}

int
sandbox_event(struct sandboxd *d, struct sandbox *sb, const char *type, json_t *data)
{
	_cleanup_free_ char *audit = NULL;
	int64_t seq = 0, now = now_unix_ms();
	int r;

	if (!data)
		return -ENOMEM;
	audit = record_of(sb, now, type, data);
	r = store_add_event(d->store, sb->id, now, type, data, audit, &seq);
	/* told anyway (without a seq a stream cannot resume from it), and written to the log */
	broadcast(d, sb, r < 0 ? 0 : seq, now, type, data, audit);
	audit_log_write(d->audit, audit);
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
