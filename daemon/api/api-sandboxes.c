/* api-sandboxes.c: the sandbox resource (create, list, get, patch, delete, stop, start), its
 * audit trail and samples (events, metrics), and the live SSE stream. */
#include "accounts.h"
#include "activity.h"
#include "agents.h"
#include "api-internal.h"
#include "egress.h"
#include "events.h"
#include "images.h"
#include "lifecycle.h"
#include "log.h"
#include "pools.h"
#include "request.h"
#include "samples.h"
#include "sandboxd.h"
#include "server.h"
#include "sse.h"
#include "store.h"
#include "suspend.h"
#include "util.h"

#define EVENTS_LIST_MAX 5000
#define EVENTS_REPLAY_MAX 10000

void
api_reply_not_found(struct api_call *call)
{
	/* the same bytes whether it never existed or belongs to someone else */
	api_reply_err(call->c, ERR_NOT_FOUND, "sandbox '%s' not found", call->ref);
}

void
api_reply_absent(struct api_call *call)
{
	struct sandbox *ended = api_lookup_ended(call);

	if (ended) {
		api_reply_err(call->c, ERR_CONFLICT, "sandbox '%s' is terminated", ended->id);
		sandbox_free(ended);
	} else {
		api_reply_not_found(call);
	}
}

static void
reply_sandbox(struct conn *c, int status, const struct sandbox *sb)
{
	conn_reply(c, status, "application/json", sb->json, sb->json_len, NULL);
}

/* A live sandbox the caller may see, by id or name. An id finds any sandbox the caller may
 * see (an admin's: every one); a name only the caller's own, so that two users' sandboxes of
 * the same name never make an admin act on the wrong one. */
struct sandbox *
api_lookup_live(struct api_call *call)
{
	if (str_has_prefix(call->ref, "sbx_"))
		return registry_find(&call->d->reg, call->ref, api_owner_filter(call));
	return registry_find_name(&call->d->reg, call->ref, call->who.name);
}

/* A terminated sandbox the caller may see, by id only (names resolve among live ones). */
struct sandbox *
api_lookup_ended(struct api_call *call)
{
	struct sandbox *sb = NULL;
	const char *owner = api_owner_filter(call);

	if (!sandbox_id_valid(call->ref) || sandbox_load(call->d->store, call->ref, &sb) < 0)
		return NULL;
	if (owner && !streq(owner, sb->owner))
		return sandbox_free(sb);
	return sb;
}

/* ---- waiting for a state ---- */

struct pending {
	struct sandbox_waiter w;
	struct conn *c;
	enum wait_kind kind;
};

static void
pending_free(struct pending *p)
{
	sandbox_remove_waiter(&p->w);
	free(p);
}

static void
pending_conn_closed(struct conn *c _unused_, void *data)
{
	/* the client left; the operation carries on without it */
	pending_free(data);
}

/* Whether the wait of this kind is over for sb: its state, and for a create with an agent,
 * the agent started (or failed to). */
static bool
wait_done(enum wait_kind kind, const struct sandbox *sb)
{
	enum sandbox_state s = sb->state;

	switch (kind) {
	case WAIT_CREATE:
		if (s == SANDBOX_RUNNING && agent_run_pending(sb->agent_run))
			return false;
		return s == SANDBOX_RUNNING || s == SANDBOX_FAILED || s == SANDBOX_TERMINATED;
	case WAIT_START:
		return s == SANDBOX_RUNNING || s == SANDBOX_FAILED || s == SANDBOX_TERMINATED;
	case WAIT_STOP:
		return s == SANDBOX_STOPPED || s == SANDBOX_FAILED || s == SANDBOX_TERMINATED;
	case WAIT_DELETE:
		return s == SANDBOX_TERMINATED || s == SANDBOX_FAILED;
	case WAIT_SUSPEND:
		return s == SANDBOX_SUSPENDED || s == SANDBOX_FAILED || s == SANDBOX_TERMINATED;
	case WAIT_RESUME:
		/* suspended again: the restore failed, its state kept */
		return s == SANDBOX_RUNNING || s == SANDBOX_SUSPENDED || s == SANDBOX_FAILED ||
		       s == SANDBOX_TERMINATED;
	}
	return true;
}

static void
reply_done(struct conn *c, enum wait_kind kind, struct sandbox *sb)
{
	switch (kind) {
	case WAIT_CREATE:
		reply_sandbox(c, 201, sb);
		break;
	case WAIT_START:
	case WAIT_STOP:
	case WAIT_SUSPEND:
		reply_sandbox(c, 200, sb);
		break;
	case WAIT_RESUME:
		if (sb->state == SANDBOX_SUSPENDED)
			api_reply_err(c, ERR_UNAVAILABLE, "sandbox '%s' could not be resumed: %s",
			              sb->id, sb->reason ? sb->reason : "its restore failed");
		else
			reply_sandbox(c, 200, sb);
		break;
	case WAIT_DELETE:
		if (sb->state == SANDBOX_FAILED)
			api_reply_err(c, ERR_INTERNAL, "sandbox '%s' could not be ended: %s",
			              sb->id, sb->reason ? sb->reason : "unknown error");
		else
			conn_reply(c, 204, NULL, NULL, 0, NULL);
		break;
	}
}

static void
pending_changed(struct sandbox_waiter *w, struct sandbox *sb, bool gone)
{
	struct pending *p = w->data;

	if (!gone && !wait_done(p->kind, sb))
		return;
	conn_on_close(p->c, NULL, NULL);
	reply_done(p->c, p->kind, sb);
	pending_free(p);
}

/* Replies now if the state already fits, else when it does. */
void
api_sandbox_wait(struct api_call *call, struct sandbox *sb, enum wait_kind kind)
{
	struct pending *p;

	if (wait_done(kind, sb) && sb->op == SANDBOX_OP_NONE) {
		reply_done(call->c, kind, sb);
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	p->c = call->c;
	p->kind = kind;
	p->w.fn = pending_changed;
	p->w.data = p;
	sandbox_add_waiter(sb, &p->w);
	conn_on_close(call->c, pending_conn_closed, p);
}

/* ---- handlers ---- */

/* What a list asks for: the owner (NULL: every one), ?label= and ?state= (a set of states'
 * bits; 0: all). */
struct list_filter {
	const char *owner;
	json_t *labels;
	unsigned states;
};

static bool
list_wants(const struct list_filter *f, const struct sandbox *sb)
{
	return !sb->pooled && (!f->owner || streq(f->owner, sb->owner)) &&
	       (!f->states || (f->states & (1u << sb->state))) &&
	       (!json_object_size(f->labels) || sandbox_matches_labels(sb, f->labels));
}

/* The next of two newest-first lists, the live one first among equals; NULL at the end of
 * both. */
static struct sandbox *
list_next(struct sandboxd *d, struct list_node **live, struct list_node **ended)
{
	struct sandbox *a =
	        *live != &d->reg.all ? list_entry(*live, struct sandbox, by_created) : NULL;
	struct sandbox *b =
	        *ended != &d->ended.all ? list_entry(*ended, struct sandbox, by_created) : NULL;

	if (a && (!b || a->created_at >= b->created_at)) {
		*live = (*live)->next;
		return a;
	}
	if (b)
		*ended = (*ended)->next;
	return b;
}

/* Joins the cached objects of the sandboxes, live and terminated, that f selects, newest
 * first: no JSON is built per request. */
static int
build_list(struct sandboxd *d, const struct list_filter *f, struct buf *out)
{
	struct list_node *n, *live = d->reg.all.next, *ended = d->ended.all.next;
	struct sandbox *sb;
	size_t total = 32;
	bool first = true;
	int r;

	LIST_FOREACH (n, &d->reg.all)
		total += list_entry(n, struct sandbox, by_created)->json_len + 1;
	LIST_FOREACH (n, &d->ended.all)
		total += list_entry(n, struct sandbox, by_created)->json_len + 1;
	r = buf_reserve(out, total); /* one allocation, not a doubling chain */
	if (r >= 0)
		r = buf_puts(out, "{\"sandboxes\":[");
	while (r >= 0 && (sb = list_next(d, &live, &ended))) {
		if (!list_wants(f, sb))
			continue;
		if (!first)
			r = buf_putc(out, ',');
		if (r >= 0)
			r = buf_append(out, sb->json, sb->json_len);
		first = false;
	}
	if (r >= 0)
		r = buf_puts(out, "]}");
	return r;
}

/* ?state=NAME into f->states; 400 for a name that is no state. */
static int
add_state_filter(struct list_filter *f, const char *name, struct err *err)
{
	enum sandbox_state s = sandbox_state_from_string(name);

	if (s == _SANDBOX_STATE_INVALID)
		return err_set(err, -EINVAL, ERR_INVALID,
		               "unknown state '%.32s' in ?state=: use pending, starting, running, "
		               "stopping, stopped, suspending, suspended, resuming, failed or "
		               "terminated",
		               name);
	f->states |= 1u << s;
	return 0;
}

void
api_sandbox_list(struct api_call *call)
{
	_cleanup_buf_ struct buf out = BUF_INIT(256u << 20);
	struct sandboxd *d = call->d;
	struct list_filter f = { .owner = api_owner_filter(call), .labels = json_object() };
	char key[64], value[512];
	struct err err = {};
	size_t pos = 0;
	int r;

	if (!f.labels) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	while ((r = http_query_next(call->req->query, &pos, key, sizeof(key), value,
	                            sizeof(value))) > 0) {
		if (streq(key, "label"))
			r = request_add_label_filter(f.labels, value, &err);
		else if (streq(key, "state"))
			r = add_state_filter(&f, value, &err);
		else
			r = err_set(&err, -EINVAL, ERR_INVALID, "unknown query parameter '%s'",
			            key);
		if (r < 0) {
			api_reply_failure(call->c, r, &err);
			goto out;
		}
	}
	if (r < 0) {
		api_reply_err(call->c, ERR_INVALID, "the query string is malformed");
		goto out;
	}
	/* the whole list, as an admin sees it, is kept until any sandbox changes */
	if (!f.owner && !f.states && json_object_size(f.labels) == 0) {
		if (!d->list_cache_valid || d->list_cache_gen != sandbox_generation()) {
			buf_reset(&d->list_cache);
			d->list_cache.max = out.max;
			d->list_cache_valid = build_list(d, &f, &d->list_cache) >= 0;
			d->list_cache_gen = sandbox_generation();
		}
		if (d->list_cache_valid) {
			conn_reply(call->c, 200, "application/json", d->list_cache.data,
			           d->list_cache.len, NULL);
			goto out;
		}
	}
	if (build_list(d, &f, &out) < 0) {
		api_reply_err(call->c, ERR_INTERNAL, "the list does not fit in memory");
		goto out;
	}
	conn_reply(call->c, 200, "application/json", out.data, out.len, NULL);
out:
	json_decref(f.labels);
}

/* A create (with wait) whose image is being installed. */
struct create_wait {
	struct list_node link; /* in d->create_waits: counted by the caps */
	struct image_waiter w;
	struct sandboxd *d;
	struct conn *c;
	struct sandbox *sb;
};

/* Whether a sandbox in this state holds (or is about to hold) CPUs and memory: what a user's
 * caps count. */
static bool
state_is_active(enum sandbox_state st)
{
	return st == SANDBOX_PENDING || st == SANDBOX_STARTING || st == SANDBOX_RUNNING ||
	       st == SANDBOX_STOPPING || st == SANDBOX_SUSPENDED || st == SANDBOX_SUSPENDING ||
	       st == SANDBOX_RESUMING;
}

void
api_usage(struct sandboxd *d, const char *owner, struct sandbox_usage *u)
{
	struct list_node *n;

	*u = (struct sandbox_usage){ 0 };
	LIST_FOREACH (n, &d->reg.all) {
		const struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (owner && !streq(owner, sb->owner))
			continue;
		u->disk_mb += sb->disk_mb; /* the registry holds no terminated sandbox */
		if (sb->pooled)
			u->pooled_disk_mb += sb->disk_mb;
		if (!state_is_active(sb->state))
			continue;
		if (sb->pooled) {
			/* the node's capacity holds them; no one's list counts them */
			u->pooled++;
			u->pooled_cpus += sb->cpus;
			u->pooled_memory_mb += sb->memory_mb;
			u->cpus += sb->cpus;
			u->memory_mb += sb->memory_mb;
			continue;
		}
		u->sandboxes++;
		u->cpus += sb->cpus;
		u->memory_mb += sb->memory_mb;
		u->running += sb->state == SANDBOX_RUNNING;
	}
	/* creates waiting for their image are not in the registry yet, but will be */
	LIST_FOREACH (n, &d->create_waits) {
		const struct sandbox *sb = list_entry(n, struct create_wait, link)->sb;
		if (owner && !streq(owner, sb->owner))
			continue;
		u->sandboxes++;
		u->cpus += sb->cpus;
		u->memory_mb += sb->memory_mb;
		u->disk_mb += sb->disk_mb;
	}
}

/* Whether owner (whose caps are caps) may have adding become active too. Returns 0, or
 * answers 403 naming the cap and the use and returns -EPERM. self: the caller is the owner
 * (the message says "you"). */
static int
check_caps(struct api_call *call, const char *owner, const struct user_caps *caps,
           const struct sandbox *adding, bool self)
{
	_cleanup_free_ char *who = self ? strdup("you") : strdup_printf("'%s'", owner);
	const char *has = self ? "have" : "has", *uses = self ? "use" : "uses";
	struct sandbox_usage u;

	api_usage(call->d, owner, &u);
	if (caps->max_sandboxes && u.sandboxes + 1 > caps->max_sandboxes) {
		api_reply_err(call->c, ERR_REFUSED,
		              "cap reached: at most %u active sandbox%s per user (%s %s %u; "
		              "pending, starting, running, stopping and suspended ones count); "
		              "stop or delete one first",
		              caps->max_sandboxes, caps->max_sandboxes == 1 ? "" : "es", who ?: "",
		              has, u.sandboxes);
		return -EPERM;
	}
	if (caps->max_cpus && u.cpus + adding->cpus > caps->max_cpus) {
		api_reply_err(call->c, ERR_REFUSED,
		              "cap reached: at most %u cpu%s across a user's active sandboxes "
		              "(%s %s %u, this asks for %u more)",
		              caps->max_cpus, caps->max_cpus == 1 ? "" : "s", who ?: "", uses,
		              u.cpus, adding->cpus);
		return -EPERM;
	}
	if (caps->max_memory_mb && u.memory_mb + adding->memory_mb > caps->max_memory_mb) {
		api_reply_err(call->c, ERR_REFUSED,
		              "cap reached: at most %u MiB of memory across a user's active "
		              "sandboxes (%s %s %u MiB, this asks for %u MiB more)",
		              caps->max_memory_mb, who ?: "", uses, u.memory_mb, adding->memory_mb);
		return -EPERM;
	}
	return 0;
}

/* Who may launch: an admin supervises and never launches; a user stays within
 * their caps, counted before anything is created. The operator is neither. Returns 0, or
 * answers 403 and returns -EPERM. adding is the sandbox about to become active: a new one
 * (create) or a stopped one starting again, whose owner's caps apply whoever starts it. */
static int
check_launch(struct api_call *call, const struct sandbox *adding, bool create)
{
	struct account owner;
	struct principal as_owner;

	if (call->who.operator)
		return 0;
	if (call->who.role != ROLE_ADMIN)
		return check_caps(call, call->who.name, &call->who.caps, adding, true);
	if (create) {
		api_reply_err(call->c, ERR_REFUSED,
		              "an admin supervises sandboxes and cannot launch one; sign in "
		              "with a user account to launch");
		return -EPERM;
	}
	/* an admin starting someone's stopped sandbox again: within its owner's caps (the
	 * operator's sandboxes, and those of accounts since deleted, have none) */
	if (account_get_by_email(call->d->store, adding->owner, &owner, NULL) < 0)
		return 0;
	auth_set_user(call->d, &as_owner, &owner);
	if (as_owner.role == ROLE_ADMIN)
		return 0;
	return check_caps(call, adding->owner, &as_owner.caps, adding, false);
}

/* Whether the node has room for adding: a new sandbox (create), or a stopped or failed one
 * starting again, whose disk is counted already. Everyone's active sandboxes count, the
 * operator's too; pooled ones give way (pools_make_room ends as many as it takes). Returns 0,
 * or answers 503 naming the resource, what is asked and what is free, and returns -ENOSPC. */
static int
check_capacity(struct api_call *call, const struct sandbox *adding, bool create)
{
	const struct node *n = &call->d->node;
	struct sandbox_usage all;
	uint64_t free_disk;

	api_usage(call->d, NULL, &all);
	all.cpus -= all.pooled_cpus;
	all.memory_mb -= all.pooled_memory_mb;
	all.disk_mb -= all.pooled_disk_mb;
	if ((uint64_t)all.cpus + adding->cpus > n->cpus) {
		api_reply_err(
		        call->c, ERR_UNAVAILABLE,
		        "this node has no room: the sandbox asks for %u cpu%s and %u of the "
		        "node's %u are free (--capacity-cpus); stop or delete a sandbox, or ask "
		        "for fewer",
		        adding->cpus, adding->cpus == 1 ? "" : "s",
		        all.cpus < n->cpus ? n->cpus - all.cpus : 0, n->cpus);
		return -ENOSPC;
	}
	if ((uint64_t)all.memory_mb + adding->memory_mb > n->memory_mb) {
		api_reply_err(call->c, ERR_UNAVAILABLE,
		              "this node has no room: the sandbox asks for %u MiB of memory and %u "
		              "MiB of the node's %u MiB are free (--capacity-memory-mb); stop or "
		              "delete a sandbox, or ask for less",
		              adding->memory_mb,
		              all.memory_mb < n->memory_mb ? n->memory_mb - all.memory_mb : 0,
		              n->memory_mb);
		return -ENOSPC;
	}
	free_disk = all.disk_mb < n->disk_mb ? n->disk_mb - all.disk_mb : 0;
	if (create && adding->disk_mb > free_disk) {
		api_reply_err(
		        call->c, ERR_UNAVAILABLE,
		        "this node has no room: the sandbox asks for %llu MiB of disk and %llu "
		        "MiB of the node's %llu MiB are free (--capacity-disk-mb; stopped "
		        "sandboxes keep theirs); delete a sandbox, or ask for less",
		        (unsigned long long)adding->disk_mb, (unsigned long long)free_disk,
		        (unsigned long long)n->disk_mb);
		return -ENOSPC;
	}
	(void)pools_make_room(call->d, adding->cpus, adding->memory_mb,
	                      create ? adding->disk_mb : 0);
	return 0;
}

/* A cordoned node takes no new sandbox. Returns 0, or answers 503 and returns -EAGAIN. */
static int
check_cordon(struct api_call *call)
{
	if (!call->d->node.cordoned)
		return 0;
	api_reply_err(call->c, ERR_UNAVAILABLE,
	              "this node is cordoned: it takes no new sandboxes until it is uncordoned "
	              "(POST /v1/node/cordon); those already here carry on");
	return -EAGAIN;
}

/* Creates sb (taken) and answers, now or once it runs. */
static void
create_now(struct api_call *call, struct sandbox *sb, bool wait)
{
	_cleanup_(sandbox_freep) struct sandbox *owned = sb;
	struct err err = {};
	int r;

	/* a create that waited for its image lands only if the node was not cordoned meanwhile */
	if (check_cordon(call) < 0)
		return;
	r = lifecycle_create(call->d, sb, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	/* the registry owns it now */
	TAKE_PTR(owned);
	if (!wait) {
		reply_sandbox(call->c, 201, sb);
		return;
	}
	api_sandbox_wait(call, sb, WAIT_CREATE);
}

/* Whether the caller is a user: neither the operator nor an admin (who cannot create). */
static bool
is_user(const struct api_call *call)
{
	if (call->who.operator)
		return false;
	return call->who.role != ROLE_ADMIN;
}

static bool
needs_install(struct sandboxd *d, const char *image)
{
	return d->backend && d->backend->ops->boots_images && !images_installed(d, image);
}

static void
create_wait_free(struct create_wait *cw)
{
	image_waiter_cancel(&cw->w);
	list_remove(&cw->link);
	sandbox_free(cw->sb);
	free(cw);
}

static void
create_wait_conn_closed(struct conn *c _unused_, void *data)
{
	/* the client left before the image was there: nothing was created */
	create_wait_free(data);
}

static void
create_wait_image(struct image_waiter *w, const struct image *img, int error, const char *why)
{
	struct create_wait *cw = w->data;
	struct api_call call = { .d = cw->d, .c = cw->c };
	struct err err = {};

	conn_on_close(cw->c, NULL, NULL);
	if (img) {
		create_now(&call, TAKE_PTR(cw->sb), true);
	} else {
		api_reply_failure(call.c, images_install_error(error, why, &err), &err);
	}
	create_wait_free(cw);
}

static void
wait_for_image(struct api_call *call, struct sandbox *sb)
{
	struct create_wait *cw = calloc(1, sizeof(*cw));
	struct err err = {};
	int r;

	if (!cw) {
		sandbox_free(sb);
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	list_init(&cw->w.link);
	list_init(&cw->link);
	cw->w.fn = create_wait_image;
	cw->w.data = cw;
	cw->d = call->d;
	cw->c = call->c;
	cw->sb = sb;
	r = images_install(call->d, sb->image, &cw->w, &err);
	if (r > 0) {
		/* installed meanwhile */
		cw->sb = NULL;
		create_wait_free(cw);
		create_now(call, sb, true);
		return;
	}
	if (r < 0) {
		create_wait_free(cw);
		api_reply_failure(call->c, r, &err);
		return;
	}
	list_push_back(&call->d->create_waits, &cw->link);
	conn_on_close(call->c, create_wait_conn_closed, cw);
}

void
api_sandbox_create(struct api_call *call)
{
	_cleanup_(sandbox_freep) struct sandbox *sb = sandbox_new();
	struct err err = {};
	char hex[17];
	bool wait = true;
	int r;

	if (!sb || random_hex(hex, 8) < 0) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	snprintf(sb->id, sizeof(sb->id), "sbx_%s", hex);
	sb->owner = strdup(call->who.name); /* from the credential, never from the body */
	if (!sb->owner) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	/* suspend where the backend can (its memory kept), else stop (its disk kept) */
	sb->idle_action = suspend_offered(call->d) ? SANDBOX_IDLE_SUSPEND : SANDBOX_IDLE_STOP;
	r = request_decode_create(&call->d->policy, call->body, sb, &wait, &err);
	if (r >= 0)
		r = api_check_idle_action(call->d, sb->idle_action, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	/* nothing is made before these: a refused create leaves no sandbox behind */
	if ((sb->agent_run && api_agent_prepare(call, sb) < 0) || check_cordon(call) < 0 ||
	    check_launch(call, sb, true) < 0)
		return;
	/* a create that asks for nothing a boot fixes beyond the image takes a pooled sandbox
	 * that waits already: it runs, so the answer is at once */
	if (pools_claimable(call->d, call->body, sb) &&
	    images_check(call->d, sb->image, &err) >= 0) {
		struct sandbox *claimed = NULL;
		r = pools_claim(call->d, sb, &claimed, &err);
		if (r < 0) {
			api_reply_failure(call->c, r, &err);
			return;
		}
		if (r > 0) {
			reply_sandbox(call->c, 201, claimed);
			return;
		}
	}
	err = (struct err){};
	if (check_capacity(call, sb, true) < 0)
		return;
	r = images_check(call->d, sb->image, &err);
	/* a user pulls only where the operator lets them */
	if (r >= 0 && is_user(call) && needs_install(call->d, sb->image))
		r = images_check_user_pull(call->d, sb->image, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	if (wait && needs_install(call->d, sb->image)) {
		/* the sandbox is created once its image is there: a name that cannot be
		 * installed leaves nothing behind and answers with the registry's reason */
		wait_for_image(call, TAKE_PTR(sb));
		return;
	}
	create_now(call, TAKE_PTR(sb), wait);
}

void
api_sandbox_get(struct api_call *call)
{
	struct sandbox *sb = api_lookup_live(call);

	if (sb) {
		reply_sandbox(call->c, 200, sb);
		return;
	}
	sb = api_lookup_ended(call);
	if (!sb) {
		api_reply_not_found(call);
		return;
	}
	reply_sandbox(call->c, 200, sb);
	sandbox_free(sb);
}

static bool backend_updates_network(struct sandboxd *d);

void
api_sandbox_patch(struct api_call *call)
{
	struct sandbox_patch patch = { 0 };
	struct sandbox *sb = api_lookup_live(call);
	struct err err = {};
	char *old_name;
	json_t *old_labels, *old_network, *fields;
	enum sandbox_idle_action old_action;
	uint64_t old_idle;
	bool old_bound;
	int r;

	if (!sb) {
		struct sandbox *ended = api_lookup_ended(call);
		if (ended) {
			api_reply_err(call->c, ERR_CONFLICT,
			              "sandbox '%s' is terminated and cannot change", ended->id);
			sandbox_free(ended);
		} else {
			api_reply_not_found(call);
		}
		return;
	}
	r = request_decode_patch(&call->d->policy, call->body, &patch, &err);
	if (r >= 0 && patch.set_idle_action)
		r = api_check_idle_action(call->d, patch.idle_action, &err);
	if (r < 0) {
		sandbox_patch_done(&patch);
		api_reply_failure(call->c, r, &err);
		return;
	}
	if (patch.set_name && patch.name && !(sb->name && streq(sb->name, patch.name)) &&
	    registry_find_name(&call->d->reg, patch.name, sb->owner)) {
		api_reply_err(call->c, ERR_CONFLICT, "the name '%s' is already in use", patch.name);
		sandbox_patch_done(&patch);
		return;
	}
	if (patch.network && json_equal(patch.network, sb->network)) {
		json_decref(patch.network); /* nothing changes */
		patch.network = NULL;
	}
	if (patch.network && !backend_updates_network(call->d)) {
		/* changing a running sandbox's network needs host egress enforcement */
		api_reply_err(call->c, ERR_UNSUPPORTED,
		              "this server cannot change a sandbox's network policy");
		sandbox_patch_done(&patch);
		return;
	}
	activity_request(sb);
	/* apply, commit, and put everything back if the commit fails */
	old_name = sb->name;
	old_labels = sb->labels;
	old_network = sb->network;
	old_idle = sb->idle_timeout_secs;
	old_action = sb->idle_action;
	old_bound = sb->bound_to_client;
	fields = json_array();
	if (patch.set_name) {
		sb->name = TAKE_PTR(patch.name);
		json_array_append_new(fields, json_string("name"));
	}
	if (patch.labels) {
		sb->labels = TAKE_PTR(patch.labels);
		json_array_append_new(fields, json_string("labels"));
	}
	if (patch.network) {
		sb->network = TAKE_PTR(patch.network);
		json_array_append_new(fields, json_string("network"));
	}
	if (patch.set_idle) {
		sb->idle_timeout_secs = patch.idle_timeout_secs;
		json_array_append_new(fields, json_string("idle_timeout_secs"));
	}
	if (patch.set_idle_action) {
		sb->idle_action = patch.idle_action;
		json_array_append_new(fields, json_string("idle_action"));
	}
	if (patch.set_bound) {
		sb->bound_to_client = patch.bound_to_client;
		json_array_append_new(fields, json_string("bound_to_client"));
	}
	/* the audit trail says what the network became (names only: nothing secret) */
	r = sandbox_commit(
	        call->d, sb, false, "updated",
	        patch.network || sb->network == old_network
	                ? json_pack("{s:o}", "fields", fields)
	                : json_pack("{s:o, s:O}", "fields", fields, "network", sb->network));
	if (r < 0) {
		if (sb->name != old_name)
			free(sb->name);
		if (sb->labels != old_labels)
			json_decref(sb->labels);
		if (sb->network != old_network)
			json_decref(sb->network);
		sb->name = old_name;
		sb->labels = old_labels;
		sb->network = old_network;
		sb->idle_timeout_secs = old_idle;
		sb->idle_action = old_action;
		sb->bound_to_client = old_bound;
		(void)sandbox_refresh_json(sb);
		sandbox_patch_done(&patch);
		api_reply_err(call->c, r == -EEXIST ? ERR_CONFLICT : ERR_INTERNAL,
		              "could not update '%s': %s", sb->id,
		              r == -EEXIST ? "the name is in use" : strerror(-r));
		return;
	}
	if (sb->name != old_name)
		free(old_name);
	if (sb->labels != old_labels)
		json_decref(old_labels);
	if (sb->network != old_network) {
		json_decref(old_network);
		/* the running VM's egress follows at once (the worker's gate first) */
		egress_update(call->d, sb);
	}
	sandbox_patch_done(&patch);
	reply_sandbox(call->c, 200, sb);
}

/* Whether a running sandbox's network can change: the backend enforces egress (the fake,
 * which runs no network at all, counts: nothing gets out either way). */
static bool
backend_updates_network(struct sandboxd *d)
{
	struct backend_caps caps = { .egress = NET_NONE };

	if (d->backend)
		d->backend->ops->caps(d->backend, &caps);
	return caps.egress >= NET_ALLOWLIST;
}

void
api_sandbox_delete(struct api_call *call)
{
	struct sandbox *sb = api_lookup_live(call);
	struct err err = {};
	int r;

	if (!sb) {
		struct sandbox *ended = api_lookup_ended(call);
		if (ended) {
			/* idempotent: ending an ended sandbox succeeds */
			conn_reply(call->c, 204, NULL, NULL, 0, NULL);
			sandbox_free(ended);
		} else {
			api_reply_not_found(call);
		}
		return;
	}
	r = lifecycle_delete(call->d, sb, SANDBOX_END_REQUEST, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	api_sandbox_wait(call, sb, WAIT_DELETE);
}

static void
stop_or_start(struct api_call *call, bool stop)
{
	struct sandbox *sb = api_lookup_live(call);
	struct err err = {};
	int r;

	if (call->body && json_object_size(call->body) > 0) {
		api_reply_err(call->c, ERR_INVALID, "unknown field in the body");
		return;
	}
	if (!sb) {
		api_reply_absent(call);
		return;
	}
	/* a cordon keeps new sandboxes away; one already here may start again, room allowing */
	if (!stop && !state_is_active(sb->state) &&
	    (check_launch(call, sb, false) < 0 || check_capacity(call, sb, false) < 0))
		return;
	r = stop ? lifecycle_stop(call->d, sb, &err) : lifecycle_start(call->d, sb, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	api_sandbox_wait(call, sb, stop ? WAIT_STOP : WAIT_START);
}

int
api_sandbox_wake(struct api_call *call, struct sandbox *sb)
{
	struct err err = {};
	int r;

	/* what POST …/start checks, for the same reasons */
	if (!state_is_active(sb->state) &&
	    (check_launch(call, sb, false) < 0 || check_capacity(call, sb, false) < 0))
		return -EPERM;
	r = lifecycle_wake(call->d, sb, &err);
	if (r < 0)
		api_reply_failure(call->c, r, &err);
	return r;
}

void
api_sandbox_stop(struct api_call *call)
{
	stop_or_start(call, true);
}

void
api_sandbox_start(struct api_call *call)
{
	stop_or_start(call, false);
}

static int
append_record(const char *record, void *data)
{
	json_t *arr = data;
	json_t *j = json_loads(record, 0, NULL);

	/* the store holds what audit.c wrote: an object, or the row is skipped */
	if (!json_is_object(j)) {
		json_decref(j);
		return 0;
	}
	return json_array_append_new(arr, j) == 0 ? 0 : -ENOMEM;
}

void
api_sandbox_events(struct api_call *call)
{
	struct sandbox *live = api_lookup_live(call), *ended = NULL;
	const char *id;
	bool truncated = false;
	json_t *arr;
	int64_t last_seq;
	int r;

	if (!live) {
		ended = api_lookup_ended(call);
		if (!ended) {
			api_reply_not_found(call);
			return;
		}
	}
	id = live ? live->id : ended->id;
	/* complete up to here: the loop is single-threaded, nothing lands in between */
	last_seq = store_last_event_seq(call->d->store);
	arr = json_array();
	r = arr ? store_list_audit(call->d->store, id, EVENTS_LIST_MAX, append_record, arr,
	                           &truncated)
	        : -ENOMEM;
	sandbox_free(ended);
	if (r < 0) {
		json_decref(arr);
		api_reply_err(call->c, ERR_INTERNAL, "could not read the events: %s", strerror(-r));
		return;
	}
	/* every trail starts with sandbox.created: one that does not (or is empty) lost its
	 * oldest records (--audit-max-events) */
	if (!streq(json_string_value(json_object_get(json_array_get(arr, 0), "type")) ?: "",
	           "sandbox.created"))
		truncated = true;
	api_reply_json(call->c, 200,
	               json_pack("{s:o, s:b, s:I}", "events", arr, "truncated", truncated,
	                         "last_seq", (json_int_t)last_seq));
}

static void
append_sample(const struct sample *x, void *data)
{
	json_t *arr = data;
	char when[32];

	format_rfc3339(x->time_ms, when);
	(void)json_array_append_new(arr, json_pack("{s:s, s:f, s:I, s:I, s:I, s:I}", "time", when,
	                                           "cpu_seconds", (double)x->cpu_ns / 1e9,
	                                           "memory_bytes", (json_int_t)x->memory_bytes,
	                                           "disk_bytes", (json_int_t)x->disk_bytes,
	                                           "net_rx_bytes", (json_int_t)x->net_rx_bytes,
	                                           "net_tx_bytes", (json_int_t)x->net_tx_bytes));
}

void
api_sandbox_metrics(struct api_call *call)
{
	struct sandbox *sb = api_lookup_live(call), *ended = NULL;
	_cleanup_free_ char *text = NULL;
	json_t *arr, *answer;

	if (!samples_available(call->d)) {
		api_reply_err(call->c, ERR_UNSUPPORTED,
		              "this server's backend measures no sandboxes (capability metrics)");
		return;
	}
	if (!sb) {
		/* an ended sandbox's samples went with it: it has none */
		ended = api_lookup_ended(call);
		if (!ended) {
			api_reply_not_found(call);
			return;
		}
		sandbox_free(ended);
	}
	arr = json_array();
	if (arr && sb)
		samples_each(sb, now_unix_ms() - (int64_t)SAMPLES_MAX * SAMPLES_EVERY_MS,
		             append_sample, arr);
	answer = json_pack("{s:o}", "samples", arr ? arr : json_array());
	/* cpu_seconds as people write them (2.85, not 2.8500000000000001): 15 digits keep the
	 * nanoseconds of 11 days */
	text = answer ? json_dumps(answer, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
	json_decref(answer);
	if (!text) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	conn_reply(call->c, 200, "application/json", text, strlen(text), NULL);
}

/* ---- the live stream ---- */

struct stream {
	struct event_sub sub;
	struct conn *c;
	struct sandboxd *d;
	char owner[sizeof(((struct principal *)NULL)->name)]; /* a whole email (254 bytes) */
	char sandbox_id[SANDBOX_ID_MAX + 1]; /* ?sandbox=: only its events; else "" */
	struct sandbox *ended; /* replay: the last terminated sandbox loaded from the store */
	unsigned replayed;
};

static void
stream_closed(struct conn *c _unused_, void *data)
{
	struct stream *s = data;

	events_unsubscribe(&s->sub);
	sandbox_free(s->ended);
	free(s);
}

static void
stream_event(struct event_sub *sub, const struct event *e)
{
	struct stream *s = sub->data;
	const char *msg;
	size_t len;

	if (sse_live(e, &msg, &len) < 0)
		return;
	/* a client too far behind is closed (and stream_closed frees s) */
	(void)conn_stream_write(s->c, msg, len);
}

/* The sandbox as it is now, for a replayed event: live ones from memory, ended ones from the
 * store (consecutive events of one sandbox load it once). */
static json_t *
current_object(struct stream *s, const char *id)
{
	struct sandbox *sb = registry_get(&s->d->reg, id);

	if (!sb) {
		if (!s->ended || !streq(s->ended->id, id)) {
			s->ended = sandbox_free(s->ended);
			if (sandbox_load(s->d->store, id, &s->ended) < 0)
				return json_null();
		}
		sb = s->ended;
	}
	return json_loadb(sb->json, sb->json_len, 0, NULL);
}

static int
replay_event(const struct store_event *e, void *data)
{
	struct stream *s = data;
	_cleanup_buf_ struct buf msg = BUF_INIT(1u << 20);
	_cleanup_free_ char *text = NULL;
	json_t *j = sse_event_json(e);

	if (!j)
		return -ENOMEM;
	s->replayed++;
	/* the same shape as a live event: with the sandbox object */
	json_object_set_new(j, "sandbox", current_object(s, e->sandbox_id));
	text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!text || sse_format(&msg, e->seq, e->type, text) < 0)
		return -ENOMEM;
	return conn_stream_write(s->c, msg.data, msg.len);
}

void
api_events_stream(struct api_call *call)
{
	const char *last = http_req_header(call->req, "last-event-id");
	const char *owner = api_owner_filter(call);
	char key[32], value[SANDBOX_NAME_MAX + 2];
	const struct sandbox *only = NULL;
	uint64_t since = 0;
	bool replay = false;
	struct stream *s;
	size_t pos = 0;
	int r;

	while ((r = http_query_next(call->req->query, &pos, key, sizeof(key), value,
	                            sizeof(value))) > 0) {
		if (streq(key, "sandbox")) {
			/* one sandbox's events, among the caller's live ones */
			only = registry_find(&call->d->reg, value, owner);
			if (!only) {
				api_reply_err(call->c, ERR_NOT_FOUND, "sandbox '%s' not found",
				              value);
				return;
			}
			continue;
		}
		if (!streq(key, "since") || parse_u64(value, &since) < 0) {
			api_reply_err(call->c, ERR_INVALID,
			              "the query parameters are since=<event seq> and "
			              "sandbox=<id or name>");
			return;
		}
		replay = true;
	}
	if (r < 0) {
		api_reply_err(call->c, ERR_INVALID, "the query string is malformed");
		return;
	}
	if (last) {
		if (parse_u64(last, &since) < 0) {
			api_reply_err(call->c, ERR_INVALID,
			              "Last-Event-ID must be an event sequence number");
			return;
		}
		replay = true;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	s->c = call->c;
	s->d = call->d;
	list_init(&s->sub.link);
	if (owner)
		snprintf(s->owner, sizeof(s->owner), "%s", owner);
	s->sub.owner = owner ? s->owner : NULL;
	if (only)
		snprintf(s->sandbox_id, sizeof(s->sandbox_id), "%s", only->id);
	s->sub.sandbox_id = only ? s->sandbox_id : NULL;
	s->sub.fn = stream_event;
	s->sub.data = s;
	conn_on_close(call->c, stream_closed, s);
	if (conn_stream_start(call->c, 200, "text/event-stream") < 0)
		return; /* closed: stream_closed freed s */
	if (conn_stream_write(call->c, "retry: 2000\n\n", 13) < 0)
		return;
	/* what happened while the client was away, then everything new, with nothing lost in
	 * between: the loop is single-threaded, so no event lands between the two */
	if (replay) {
		r = store_events_since(call->d->store, (int64_t)since, owner, s->sub.sandbox_id,
		                       EVENTS_REPLAY_MAX, replay_event, s);
		if (r == -EPIPE)
			return; /* the client went away: stream_closed freed s */
		if (r < 0)
			log_warning("event stream: replaying from %llu failed: %s",
			            (unsigned long long)since, strerror(-r));
		s->ended = sandbox_free(s->ended);
		/* more were missed than a replay carries: say so instead of going on silently */
		if (s->replayed == EVENTS_REPLAY_MAX) {
			static const char overflow[] = "event: overflow\ndata: {\"message\":\"more "
			                               "events were missed than a "
			                               "replay carries; reload the sandboxes with "
			                               "GET /v1/sandboxes\"}\n\n";
			if (conn_stream_write(call->c, overflow, sizeof(overflow) - 1) < 0)
				return;
		}
	}
	events_subscribe(call->d, &s->sub);
}

void
api_events_heartbeat(struct sandboxd *d)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &d->subscribers) {
		struct event_sub *sub = list_entry(n, struct event_sub, link);
		struct stream *s = sub->data;
		(void)conn_stream_write(s->c, ": keep-alive\n\n", 14);
	}
}
