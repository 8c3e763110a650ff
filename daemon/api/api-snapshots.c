/* api-snapshots.c: snapshots (POST …/snapshots, GET /v1/snapshots[/{id}], DELETE
 * /v1/snapshots/{id}), a sandbox's snapshot schedule (PUT …/snapshot-schedule), and the fork
 * a create with snapshot_id makes. The core (snapshots.h) takes, records and deletes them. */
#include "activity.h"
#include "api-internal.h"
#include "images.h"
#include "log.h"
#include "request.h"
#include "sandboxd.h"
#include "server.h"
#include "snapshots.h"
#include "util.h"

/* Whether this server takes snapshots of any kind; otherwise answers 501. */
static bool
offered(struct api_call *call)
{
	if (snapshots_offered(call->d, SNAPSHOT_MEMORY) ||
	    snapshots_offered(call->d, SNAPSHOT_DISK))
		return true;
	call->feature = "disk_snapshot";
	api_unsupported(call);
	return false;
}

static void
reply_snapshot(struct conn *c, int status, const struct snapshot *s)
{
	api_reply_json(c, status, snapshot_to_json(s));
}

static void
reply_snapshot_not_found(struct api_call *call, const char *id)
{
	/* the same bytes whether it never existed or belongs to someone else */
	api_reply_err(call->c, ERR_NOT_FOUND, "snapshot '%.32s' not found", id);
}

/* A POST …/snapshots waiting for its snapshot to be written. */
struct snapshot_wait {
	struct conn *c;
	struct snapshot *s;
};

static void
snapshot_wait_closed(struct conn *c _unused_, void *data)
{
	struct snapshot_wait *w = data;

	/* the client left; the snapshot is written all the same */
	snapshot_forget_done(w->s);
	free(w);
}

static void
snapshot_written(void *data, struct snapshot *s, int error, const char *why)
{
	struct snapshot_wait *w = data;

	conn_on_close(w->c, NULL, NULL);
	if (error == -ECANCELED)
		api_reply_err(w->c, ERR_CONFLICT, "snapshot '%s' was not written: %s", s->id, why);
	else if (error < 0)
		api_reply_err(w->c, ERR_INTERNAL, "snapshot '%s' failed: %s", s->id, why);
	else
		reply_snapshot(w->c, 201, s);
	free(w);
}

void
api_snapshot_create(struct api_call *call)
{
	static const char *const fields[] = { "kind", NULL };
	struct sandbox *sb = api_lookup_live(call);
	enum snapshot_kind kind;
	struct snapshot_wait *w;
	struct snapshot *s;
	struct err err = {};
	json_t *v;
	int r;

	if (call->body && request_check_fields(call->body, fields, &err) < 0) {
		api_reply_failure(call->c, -EINVAL, &err);
		return;
	}
	v = call->body ? json_object_get(call->body, "kind") : NULL;
	if (v && !json_is_null(v) &&
	    (!json_is_string(v) || snapshot_kind_from_string(json_string_value(v)) < 0)) {
		api_reply_err(call->c, ERR_INVALID, "'kind' must be \"memory\" or \"disk\"");
		return;
	}
	if (!offered(call))
		return;
	if (!sb) {
		api_reply_absent(call);
		return;
	}
	activity_request(sb);
	kind = v && json_is_string(v) ? snapshot_kind_from_string(json_string_value(v))
	                              : snapshots_default_kind(call->d, sb);
	w = calloc(1, sizeof(*w));
	if (!w) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	w->c = call->c;
	r = snapshots_take(call->d, sb, kind, false, snapshot_written, w, &s, &err);
	if (r < 0) {
		free(w);
		api_reply_failure(call->c, r, &err);
		return;
	}
	w->s = s;
	conn_on_close(call->c, snapshot_wait_closed, w);
}

void
api_snapshot_list(struct api_call *call)
{
	const char *owner = api_owner_filter(call);
	char key[32], value[SANDBOX_ID_MAX + 2] = "";
	const char *only = NULL;
	struct list_node *n;
	size_t pos = 0;
	json_t *arr;
	int r;

	while ((r = http_query_next(call->req->query, &pos, key, sizeof(key), value,
	                            sizeof(value))) > 0) {
		if (!streq(key, "sandbox")) {
			api_reply_err(
			        call->c, ERR_INVALID,
			        "unknown query parameter '%s': the one there is is sandbox=<id>",
			        key);
			return;
		}
		only = value;
	}
	if (r < 0) {
		api_reply_err(call->c, ERR_INVALID, "the query string is malformed");
		return;
	}
	if (!offered(call))
		return;
	arr = json_array();
	/* newest first, as sandboxes are listed */
	for (n = call->d->snapshots.prev; arr && n != &call->d->snapshots; n = n->prev) {
		const struct snapshot *s = list_entry(n, struct snapshot, link);
		if (s->writing || (owner && !streq(owner, s->owner)) ||
		    (only && !streq(only, s->sandbox)))
			continue;
		if (json_array_append_new(arr, snapshot_to_json(s)) < 0)
			arr = (json_decref(arr), NULL);
	}
	if (!arr) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	api_reply_json(call->c, 200, json_pack("{s:o}", "snapshots", arr));
}

void
api_snapshot_get(struct api_call *call)
{
	struct snapshot *s;

	if (!offered(call))
		return;
	s = snapshots_find(call->d, call->ref, api_owner_filter(call));
	if (!s) {
		reply_snapshot_not_found(call, call->ref);
		return;
	}
	reply_snapshot(call->c, 200, s);
}

void
api_snapshot_delete(struct api_call *call)
{
	struct snapshot *s;
	struct err err = {};
	int r;

	if (!offered(call))
		return;
	s = snapshots_find(call->d, call->ref, api_owner_filter(call));
	if (!s) {
		reply_snapshot_not_found(call, call->ref);
		return;
	}
	r = snapshots_delete(call->d, s, "request", &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	conn_reply(call->c, 204, NULL, NULL, 0, NULL);
}

void
api_snapshot_schedule(struct api_call *call)
{
	static const char *const fields[] = { "every_secs", "keep", NULL };
	struct sandbox *sb = api_lookup_live(call);
	struct err err = {};
	uint64_t every = 0;
	unsigned keep = 0;
	json_t *v;
	int r;

	if (request_check_fields(call->body, fields, &err) < 0) {
		api_reply_failure(call->c, -EINVAL, &err);
		return;
	}
	v = json_object_get(call->body, "every_secs");
	if (!v || json_is_null(v)) {
		api_reply_err(
		        call->c, ERR_INVALID,
		        "'every_secs' is required: how often a snapshot is taken, 0 for none");
		return;
	}
	r = request_decode_schedule(&call->d->policy, call->body, "every_secs", "keep", &every,
	                            &keep, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	if (!offered(call))
		return;
	if (!sb) {
		api_reply_absent(call);
		return;
	}
	activity_request(sb);
	r = snapshots_schedule_set(call->d, sb, every, keep);
	if (r < 0) {
		api_reply_err(call->c, ERR_INTERNAL, "could not keep the schedule of '%s': %s",
		              sb->id, strerror(-r));
		return;
	}
	conn_reply(call->c, 200, "application/json", sb->json, sb->json_len, NULL);
}

/* A field a fork takes from its snapshot: the request may repeat it, never change it. */
static int
fork_field_same(struct api_call *call, const struct snapshot *s, const char *field,
                json_int_t value)
{
	json_t *v = json_object_get(call->body, field);

	if (!v || json_is_null(v) || (json_is_integer(v) && json_integer_value(v) == value))
		return 0;
	api_reply_err(call->c, ERR_INVALID,
	              "a fork has the %s of its snapshot '%s' (%lld): leave '%s' out, or say %lld",
	              field, s->id, (long long)value, field, (long long)value);
	return -EINVAL;
}

int
api_snapshot_fork(struct api_call *call, struct sandbox *sb)
{
	struct sandboxd *d = call->d;
	struct snapshot *s;
	json_t *image;
	char *dup;

	if (!sb->snapshot_id && !sb->snapshot_every_secs)
		return 0;
	if (!offered(call))
		return -EOPNOTSUPP;
	if (!sb->snapshot_id)
		return 0; /* only a schedule */
	s = snapshots_find(d, sb->snapshot_id, api_owner_filter(call));
	if (!s) {
		reply_snapshot_not_found(call, sb->snapshot_id);
		return -ENOENT;
	}
	image = json_object_get(call->body, "image");
	if (image && !json_is_null(image) && !streq(json_string_value(image) ?: "", s->image)) {
		api_reply_err(call->c, ERR_INVALID,
		              "a fork has the image of its snapshot '%s' ('%s'): leave 'image' "
		              "out, or say '%s'",
		              s->id, s->image, s->image);
		return -EINVAL;
	}
	if (fork_field_same(call, s, "cpus", s->cpus) < 0 ||
	    fork_field_same(call, s, "memory_mb", s->memory_mb) < 0 ||
	    fork_field_same(call, s, "disk_mb", (json_int_t)s->disk_mb) < 0)
		return -EINVAL;
	if (d->backend && d->backend->ops->boots_images && !images_installed(d, s->image)) {
		api_reply_err(call->c, ERR_CONFLICT,
		              "the image '%s' of snapshot '%s' is not installed any more: install "
		              "it again (POST /v1/images) to fork from it",
		              s->image, s->id);
		return -ENOENT;
	}
	dup = strdup(s->image);
	if (!dup) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return -ENOMEM;
	}
	free(sb->image);
	sb->image = dup;
	sb->cpus = s->cpus;
	sb->memory_mb = s->memory_mb;
	sb->disk_mb = s->disk_mb;
	return 0;
}
