/* ended.c: terminated sandboxes, kept until --forget-after; see ended.h. */
#include "ended.h"
#include "log.h"
#include "sandboxd.h"
#include "store.h"
#include "strv.h"
#include "util.h"

/* Ended before this (unix ms) is forgotten. */
static int64_t
cutoff(const struct sandboxd *d, int64_t now_ms)
{
	return now_ms - (int64_t)d->opts->forget_after_secs * 1000;
}

static int
keep_loaded(struct sandbox *sb, void *data)
{
	struct sandboxd *d = data;
	/* loaded oldest first: each is the newest so far */
	int r = registry_add(&d->ended, sb);

	if (r < 0)
		sandbox_free(sb);
	return r;
}

int
ended_load(struct sandboxd *d, int64_t now_ms)
{
	int r = store_forget_ended(d->store, cutoff(d, now_ms));

	if (r < 0) {
		log_error("store: cannot forget the sandboxes that ended before --forget-after: %s",
		          strerror(-r));
		return r;
	}
	if (r > 0)
		log_info("forgot %d sandbox(es) that ended more than --forget-after ago", r);
	r = sandbox_load_ended(d->store, keep_loaded, d);
	if (r < 0)
		log_error("store: cannot load the terminated sandboxes: %s", strerror(-r));
	return r;
}

void
ended_add(struct sandboxd *d, const char *id)
{
	struct sandbox *sb = NULL, *old = registry_get(&d->ended, id);
	int r;

	if (old) {
		registry_remove(&d->ended, old);
		sandbox_free(old);
	}
	r = sandbox_load(d->store, id, &sb);
	if (r >= 0)
		r = registry_add_by_created(&d->ended, sb);
	if (r < 0) {
		log_warning("sandbox '%s': cannot keep it in the list of terminated ones: %s", id,
		            strerror(-r));
		sandbox_free(sb);
	}
}

void
ended_forget(struct sandboxd *d, int64_t now_ms)
{
	int64_t before = cutoff(d, now_ms);
	struct list_node *n, *tmp;
	bool due = false;
	int r;

	LIST_FOREACH (n, &d->ended.all)
		if (list_entry(n, struct sandbox, by_created)->updated_at < before) {
			due = true;
			break;
		}
	if (!due)
		return;
	/* the store first: what it still holds stays listed, and is tried again next time */
	r = store_forget_ended(d->store, before);
	if (r < 0) {
		log_warning("store: forgetting the sandboxes that ended before --forget-after "
		            "failed: %s",
		            strerror(-r));
		return;
	}
	LIST_FOREACH_SAFE (n, tmp, &d->ended.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (sb->updated_at >= before)
			continue;
		log_info("sandbox '%s': forgotten (it ended more than --forget-after ago)", sb->id);
		registry_remove(&d->ended, sb);
		sandbox_free(sb);
	}
}

void
ended_reload_owner(struct sandboxd *d, const char *owner)
{
	_cleanup_strv_ char **ids = NULL;
	struct list_node *n;
	size_t n_ids = 0;

	/* the ids first: reading one again moves it in the list */
	LIST_FOREACH (n, &d->ended.all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (streq(sb->owner, owner) && strv_add(&ids, &n_ids, sb->id) < 0) {
			log_warning("out of memory: the terminated sandboxes of '%s' keep their "
			            "owner in the list",
			            owner);
			return;
		}
	}
	for (size_t i = 0; i < n_ids; i++)
		ended_add(d, ids[i]);
}
