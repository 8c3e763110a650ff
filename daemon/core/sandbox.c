/* sandbox.c: sandbox objects, the transition table, the registry; see sandbox.h. */
#include <ctype.h>
#include <openssl/sha.h>
#include "agents.h"
#include "events.h"
#include "log.h"
#include "sandboxd.h"
#include "store.h"
#include "strv.h"
#include "util.h"

static const char *const state_names[_SANDBOX_STATE_MAX] = {
	[SANDBOX_PENDING] = "pending",       [SANDBOX_STARTING] = "starting",
	[SANDBOX_RUNNING] = "running",       [SANDBOX_STOPPING] = "stopping",
	[SANDBOX_STOPPED] = "stopped",       [SANDBOX_SUSPENDED] = "suspended",
	[SANDBOX_FAILED] = "failed",         [SANDBOX_TERMINATED] = "terminated",
	[SANDBOX_SUSPENDING] = "suspending", [SANDBOX_RESUMING] = "resuming",
};

/* The lifecycle. A row lists the states a sandbox may move to from that state; every other
 * move is refused. Any live state may fail; every state but terminated may end (DELETE).
 *
 *   pending -> starting -> running -> stopping -> stopped -> starting ...
 *   running -> suspending -> suspended -> resuming -> running
 *   resuming -> suspended (a resume that could not restore: the saved state is kept)
 *   suspending -> running (a suspend that failed while the guest ran on)
 *   suspended -> stopping (its saved memory is dropped, its disk kept)
 *   failed -> starting (its layer boots again: a crash does not trap the work on it);
 *   terminated is final. */
#define BIT(s) (1u << (s))
static const unsigned transitions[_SANDBOX_STATE_MAX] = {
	[SANDBOX_PENDING] = BIT(SANDBOX_STARTING) | BIT(SANDBOX_FAILED) | BIT(SANDBOX_TERMINATED),
	[SANDBOX_STARTING] = BIT(SANDBOX_RUNNING) | BIT(SANDBOX_FAILED) | BIT(SANDBOX_TERMINATED),
	[SANDBOX_RUNNING] = BIT(SANDBOX_STOPPING) | BIT(SANDBOX_SUSPENDING) | BIT(SANDBOX_FAILED) |
	                    BIT(SANDBOX_TERMINATED),
	[SANDBOX_STOPPING] = BIT(SANDBOX_STOPPED) | BIT(SANDBOX_FAILED) | BIT(SANDBOX_TERMINATED),
	[SANDBOX_STOPPED] = BIT(SANDBOX_STARTING) | BIT(SANDBOX_FAILED) | BIT(SANDBOX_TERMINATED),
	[SANDBOX_SUSPENDED] = BIT(SANDBOX_RESUMING) | BIT(SANDBOX_STOPPING) | BIT(SANDBOX_FAILED) |
	                      BIT(SANDBOX_TERMINATED),
	[SANDBOX_FAILED] = BIT(SANDBOX_STARTING) | BIT(SANDBOX_TERMINATED),
	[SANDBOX_TERMINATED] = 0,
	[SANDBOX_SUSPENDING] = BIT(SANDBOX_SUSPENDED) | BIT(SANDBOX_RUNNING) | BIT(SANDBOX_FAILED) |
	                       BIT(SANDBOX_TERMINATED),
	[SANDBOX_RESUMING] = BIT(SANDBOX_RUNNING) | BIT(SANDBOX_SUSPENDED) | BIT(SANDBOX_FAILED) |
	                     BIT(SANDBOX_TERMINATED),
};

const char *
sandbox_state_to_string(enum sandbox_state s)
{
	return s >= 0 && s < _SANDBOX_STATE_MAX ? state_names[s] : "invalid";
}

enum sandbox_state
sandbox_state_from_string(const char *s)
{
	int i = name_index(state_names, _SANDBOX_STATE_MAX, s);

	return i < 0 ? _SANDBOX_STATE_INVALID : (enum sandbox_state)i;
}

static const char *const end_names[_SANDBOX_END_MAX] = {
	[SANDBOX_END_REQUEST] = "request",   [SANDBOX_END_IDLE] = "idle",
	[SANDBOX_END_LIFETIME] = "lifetime", [SANDBOX_END_POLICY] = "policy",
	[SANDBOX_END_SHUTDOWN] = "shutdown", [SANDBOX_END_RECORD] = "record",
	[SANDBOX_END_CLIENT] = "client",
};

const char *
sandbox_end_to_string(enum sandbox_end e)
{
	return e >= 0 && e < _SANDBOX_END_MAX ? end_names[e] : "request";
}

static const char *const stop_names[_SANDBOX_STOP_MAX] = {
	[SANDBOX_STOP_REQUEST] = "request",
	[SANDBOX_STOP_IDLE] = "idle",
	[SANDBOX_STOP_READ] = "read",
};

static const char *const idle_action_names[_SANDBOX_IDLE_ACTION_MAX] = {
	[SANDBOX_IDLE_STOP] = "stop",
	[SANDBOX_IDLE_TERMINATE] = "terminate",
	[SANDBOX_IDLE_SUSPEND] = "suspend",
};

const char *
sandbox_idle_action_to_string(enum sandbox_idle_action a)
{
	return a >= 0 && a < _SANDBOX_IDLE_ACTION_MAX ? idle_action_names[a] : "stop";
}

enum sandbox_idle_action
sandbox_idle_action_from_string(const char *s)
{
	int i = name_index(idle_action_names, _SANDBOX_IDLE_ACTION_MAX, s);

	return i < 0 ? _SANDBOX_IDLE_ACTION_INVALID : (enum sandbox_idle_action)i;
}

bool
sandbox_transition_allowed(enum sandbox_state from, enum sandbox_state to)
{
	if (from < 0 || from >= _SANDBOX_STATE_MAX || to < 0 || to >= _SANDBOX_STATE_MAX)
		return false;
	return (transitions[from] & BIT(to)) != 0;
}

struct sandbox *
sandbox_new(void)
{
	struct sandbox *sb = calloc(1, sizeof(*sb));

	if (!sb)
		return NULL;
	list_init(&sb->by_created);
	list_init(&sb->waiters);
	list_init(&sb->procs);
	sb->labels = json_object();
	sb->network = json_object();
	sb->volumes = json_array();
	if (!sb->labels || !sb->network || !sb->volumes)
		return sandbox_free(sb);
	return sb;
}

struct sandbox *
sandbox_free(struct sandbox *sb)
{
	if (!sb)
		return NULL;
	free(sb->name);
	free(sb->owner);
	free(sb->reason);
	free(sb->end_why);
	free(sb->image);
	free(sb->backend);
	free(sb->runtime_ref);
	free(sb->snapshot_id);
	free(sb->samples);
	json_decref(sb->labels);
	json_decref(sb->network);
	json_decref(sb->volumes);
	for (size_t i = 0; i < sb->nenv; i++) {
		free(sb->env[i].name);
		if (sb->env[i].value) {
			explicit_bzero(sb->env[i].value, strlen(sb->env[i].value));
			free(sb->env[i].value);
		}
	}
	free(sb->env);
	sandbox_kept_clear(sb);
	agent_run_free(sb->agent_run);
	free(sb->json);
	free(sb);
	return NULL;
}

void
sandbox_kept_clear(struct sandbox *sb)
{
	for (size_t i = 0; i < sb->nkept; i++)
		strv_free(sb->kept[i].argv);
	free(sb->kept);
	sb->kept = NULL;
	sb->nkept = 0;
}

void
sandbox_add_waiter(struct sandbox *sb, struct sandbox_waiter *w)
{
	list_push_back(&sb->waiters, &w->link);
}

void
sandbox_remove_waiter(struct sandbox_waiter *w)
{
	list_remove(&w->link);
}

static void
notify_waiters(struct sandbox *sb, bool gone)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &sb->waiters) {
		struct sandbox_waiter *w = list_entry(n, struct sandbox_waiter, link);
		w->fn(w, sb, gone);
	}
}

void
sandbox_notify_waiters(struct sandbox *sb)
{
	notify_waiters(sb, false);
}

char **
sandbox_env_strv(const struct sandbox *sb, char *const *extra)
{
	char **env = NULL;
	size_t n = 0;
	int r = 0;

	for (size_t i = 0; r >= 0 && i < sb->nenv; i++)
		r = sb->env[i].value
		            ? strv_push(&env, &n,
		                        strdup_printf("%s=%s", sb->env[i].name, sb->env[i].value))
		            : -ENODATA;
	for (size_t i = 0; r >= 0 && extra && extra[i]; i++)
		r = strv_add(&env, &n, extra[i]);
	if (r < 0)
		return strv_free_erase(env);
	return env ?: calloc(1, sizeof(char *)); /* empty, but not NULL: that is no memory */
}

static json_t *
env_names_json(const struct sandbox *sb)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < sb->nenv; i++)
		json_array_append_new(a, json_string(sb->env[i].name));
	return a;
}

json_t *
sandbox_spec_to_json(const struct sandbox *sb)
{
	json_t *j = json_pack(
	        "{s:i, s:i, s:I, s:I, s:s, s:I, s:b, s:O, s:O, s:o}", "cpus", (int)sb->cpus,
	        "memory_mb", (int)sb->memory_mb, "disk_mb", (json_int_t)sb->disk_mb,
	        "idle_timeout_secs", (json_int_t)sb->idle_timeout_secs, "idle_action",
	        sandbox_idle_action_to_string(sb->idle_action), "lifetime_secs",
	        (json_int_t)sb->lifetime_secs, "bound_to_client", sb->bound_to_client, "labels",
	        sb->labels, "network", sb->network, "env_names", env_names_json(sb));

	/* its volumes, when it has any (a spec from before volumes has none) */
	if (j && json_array_size(sb->volumes) > 0 && json_object_set(j, "volumes", sb->volumes) < 0)
		j = (json_decref(j), NULL);
	/* (ext) the agent its create started, and where it is */
	if (j && sb->agent_run &&
	    json_object_set_new(j, "agent", agent_run_to_json(sb->agent_run)) < 0)
		j = (json_decref(j), NULL);
	/* the snapshot it was forked from and its schedule (snapshots.h) */
	if (j && (sb->snapshot_id || sb->snapshot_every_secs)) {
		json_t *snaps =
		        json_pack("{s:I, s:i}", "every_secs", (json_int_t)sb->snapshot_every_secs,
		                  "keep", (int)sb->snapshot_keep);
		if (snaps && sb->snapshot_id &&
		    json_object_set_new(snaps, "from", json_string(sb->snapshot_id)) < 0)
			snaps = (json_decref(snaps), NULL);
		if (json_object_set_new(j, "snapshots", snaps) < 0)
			j = (json_decref(j), NULL);
	}
	return j;
}

/* The "snapshots" member of a spec: {from, every_secs, keep}. */
static int
snapshots_spec_from_json(struct sandbox *sb, const json_t *snaps)
{
	const char *from = NULL;
	json_int_t every = 0, keep = 0;

	if (json_unpack((json_t *)snaps, "{s?s, s:I, s:I}", "from", &from, "every_secs", &every,
	                "keep", &keep) < 0 ||
	    every < 0 || keep < 0 || keep > UINT32_MAX)
		return -EINVAL;
	free(sb->snapshot_id);
	sb->snapshot_id = from ? strdup(from) : NULL;
	if (from && !sb->snapshot_id)
		return -ENOMEM;
	sb->snapshot_every_secs = (uint64_t)every;
	sb->snapshot_keep = (unsigned)keep;
	return 0;
}

int
sandbox_spec_from_json(struct sandbox *sb, const json_t *spec)
{
	json_int_t cpus, mem, disk, idle, life;
	json_t *labels, *network, *names, *agent = NULL, *snaps = NULL, *volumes = NULL;
	/* rows from before idle_action and bound_to_client: stop, and not bound */
	const char *idle_action = "stop";
	int bound = 0;
	json_error_t err;
	size_t i;
	json_t *v;
	int r;

	if (json_unpack_ex((json_t *)spec, &err, JSON_STRICT,
	                   "{s:I, s:I, s:I, s:I, s?s, s:I, s?b, s:o, s:o, s:o, s?o, s?o, s?o}",
	                   "cpus", &cpus, "memory_mb", &mem, "disk_mb", &disk, "idle_timeout_secs",
	                   &idle, "idle_action", &idle_action, "lifetime_secs", &life,
	                   "bound_to_client", &bound, "labels", &labels, "network", &network,
	                   "env_names", &names, "agent", &agent, "snapshots", &snaps, "volumes",
	                   &volumes) < 0)
		return -EINVAL;
	if (snaps && (r = snapshots_spec_from_json(sb, snaps)) < 0)
		return r;
	if (volumes && !json_is_array(volumes))
		return -EINVAL;
	if (volumes) {
		json_decref(sb->volumes);
		sb->volumes = json_incref(volumes);
	}
	sb->agent_run = agent_run_free(sb->agent_run);
	if (agent && (r = agent_run_from_json(agent, &sb->agent_run)) < 0)
		return r;
	if (cpus < 0 || mem < 0 || disk < 0 || idle < 0 || life < 0 || !json_is_object(labels) ||
	    !json_is_object(network) || !json_is_array(names) ||
	    sandbox_idle_action_from_string(idle_action) < 0)
		return -EINVAL;
	sb->idle_action = sandbox_idle_action_from_string(idle_action);
	sb->bound_to_client = bound;
	sb->cpus = (unsigned)cpus;
	sb->memory_mb = (unsigned)mem;
	sb->disk_mb = (uint64_t)disk;
	sb->idle_timeout_secs = (uint64_t)idle;
	sb->lifetime_secs = (uint64_t)life;
	json_decref(sb->labels);
	sb->labels = json_incref(labels);
	json_decref(sb->network);
	sb->network = json_incref(network);
	/* env values are never in the store: with --keep-sandboxes they come from the
	 * sandbox's record (records.h), else only the names are known */
	sb->env = calloc(json_array_size(names) + 1, sizeof(*sb->env));
	if (!sb->env)
		return -ENOMEM;
	json_array_foreach (names, i, v) {
		if (!json_is_string(v))
			return -EINVAL;
		sb->env[sb->nenv].name = strdup(json_string_value(v));
		if (!sb->env[sb->nenv].name)
			return -ENOMEM;
		sb->nenv++;
	}
	return 0;
}

/* ---- the store's rows ---- */

static char *
dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

int
sandbox_from_row(const struct store_sandbox *row, struct sandbox **ret)
{
	_cleanup_(sandbox_freep) struct sandbox *sb = sandbox_new();
	json_t *j;
	int r;

	if (!sb)
		return -ENOMEM;
	if (!row->id || strlen(row->id) > SANDBOX_ID_MAX || !row->state || !row->spec)
		return -EINVAL;
	snprintf(sb->id, sizeof(sb->id), "%s", row->id);
	sb->name = dup_or_null(row->name);
	sb->owner = dup_or_null(row->owner);
	sb->state = sandbox_state_from_string(row->state);
	sb->reason = dup_or_null(row->reason);
	sb->image = dup_or_null(row->image);
	sb->backend = dup_or_null(row->backend);
	sb->runtime_ref = dup_or_null(row->runtime_ref);
	sb->created_at = row->created_at;
	sb->updated_at = row->updated_at;
	/* whatever happened while sandboxd was not running, the clocks start again now */
	sb->last_active = sb->last_attended = now_unix_ms();
	if (sb->state == _SANDBOX_STATE_INVALID || !sb->owner || !sb->image || !sb->backend)
		return -EINVAL;
	j = json_loads(row->spec, JSON_REJECT_DUPLICATES, NULL);
	if (!j)
		return -EINVAL;
	r = sandbox_spec_from_json(sb, j);
	json_decref(j);
	if (r < 0)
		return r;
	r = sandbox_refresh_json(sb);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(sb);
	return 0;
}

int
sandbox_save(struct store *s, const struct sandbox *sb, bool insert)
{
	_cleanup_free_ char *spec = NULL;
	json_t *j = sandbox_spec_to_json(sb);
	struct store_sandbox row = {
		.id = sb->id,
		.name = sb->name,
		.owner = sb->owner,
		.state = sandbox_state_to_string(sb->state),
		.reason = sb->reason,
		.image = sb->image,
		.backend = sb->backend,
		.runtime_ref = sb->runtime_ref,
		.created_at = sb->created_at,
		.updated_at = sb->updated_at,
	};

	if (!j)
		return -ENOMEM;
	spec = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!spec)
		return -ENOMEM;
	row.spec = spec;
	return insert ? store_insert_sandbox(s, &row) : store_update_sandbox(s, &row);
}

static int
load_one(const struct store_sandbox *row, void *data)
{
	return sandbox_from_row(row, data);
}

int
sandbox_load(struct store *s, const char *id, struct sandbox **ret)
{
	return store_load(s, id, load_one, ret);
}

struct load_live {
	int (*fn)(struct sandbox *sb, void *data);
	void *data;
};

static int
load_live_one(const struct store_sandbox *row, void *data)
{
	struct load_live *l = data;
	struct sandbox *sb = NULL;

	if (sandbox_from_row(row, &sb) < 0) {
		log_error("store: sandbox row '%s' is unreadable; skipping it", row->id);
		return 0;
	}
	return l->fn(sb, l->data);
}

int
sandbox_load_live(struct store *s, int (*fn)(struct sandbox *sb, void *data), void *data)
{
	struct load_live l = { .fn = fn, .data = data };

	return store_load_live(s, load_live_one, &l);
}

int
sandbox_load_ended(struct store *s, int (*fn)(struct sandbox *sb, void *data), void *data)
{
	struct load_live l = { .fn = fn, .data = data };

	return store_load_ended(s, load_live_one, &l);
}

int64_t
sandbox_expires_at(const struct sandbox *sb)
{
	return sb->lifetime_secs ? sb->created_at + (int64_t)sb->lifetime_secs * 1000 : 0;
}

json_t *
sandbox_to_json(const struct sandbox *sb)
{
	char created[32], expires[32];
	int64_t exp = sandbox_expires_at(sb);

	json_t *j;

	format_rfc3339(sb->created_at, created);
	format_rfc3339(exp, expires);
	j = json_pack("{s:s, s:s?, s:s, s:s, s:i, s:i, s:I, s:o, s:O, s:O, s:O, s:s, s:I, s:s, "
	              "s:I, s:s?, s:b, s:s, s:s?}",
	              "id", sb->id, "name", sb->name, "state", sandbox_state_to_string(sb->state),
	              "image", sb->image, "cpus", (int)sb->cpus, "memory_mb", (int)sb->memory_mb,
	              "disk_mb", (json_int_t)sb->disk_mb, "env_names", env_names_json(sb),
	              "network", sb->network, "labels", sb->labels, "volumes", sb->volumes,
	              "created_at", created, "idle_timeout_secs", (json_int_t)sb->idle_timeout_secs,
	              "idle_action", sandbox_idle_action_to_string(sb->idle_action),
	              "lifetime_secs", (json_int_t)sb->lifetime_secs, "expires_at",
	              exp ? expires : NULL, "bound_to_client", sb->bound_to_client, "owner",
	              sb->owner, "reason", sb->reason);
	/* (ext) the snapshot it was forked from, and its snapshot schedule: null for none */
	if (j && (json_object_set_new(j, "snapshot_id",
	                              sb->snapshot_id ? json_string(sb->snapshot_id)
	                                              : json_null()) < 0 ||
	          json_object_set_new(j, "snapshot_schedule",
	                              sb->snapshot_every_secs
	                                      ? json_pack("{s:I, s:i}", "every_secs",
	                                                  (json_int_t)sb->snapshot_every_secs,
	                                                  "keep", (int)sb->snapshot_keep)
	                                      : json_null()) < 0))
		j = (json_decref(j), NULL);
	/* (ext) the agent its create started: null for a sandbox without one */
	if (j &&
	    json_object_set_new(j, "agent",
	                        sb->agent_run ? agent_run_to_json(sb->agent_run) : json_null()) < 0)
		j = (json_decref(j), NULL);
	return j;
}

/* Bumped whenever any sandbox's API object changes or one joins or leaves the registry:
 * whoever caches something built from the objects compares it. */
static uint64_t generation;

uint64_t
sandbox_generation(void)
{
	return generation;
}

int
sandbox_refresh_json(struct sandbox *sb)
{
	json_t *j = sandbox_to_json(sb);
	char *text;

	if (!j)
		return -ENOMEM;
	text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!text)
		return -ENOMEM;
	free(sb->json);
	sb->json = text;
	sb->json_len = strlen(text);
	generation++;
	return 0;
}

bool
label_key_valid(const char *key)
{
	size_t n = strlen(key);

	if (n == 0 || n > 63 || !isalnum((unsigned char)key[0]) || isupper((unsigned char)key[0]))
		return false;
	for (size_t i = 1; i < n; i++) {
		unsigned char c = (unsigned char)key[i];
		if (!(c >= 'a' && c <= 'z') && !isdigit(c) && !strchr("._/-", c))
			return false;
	}
	return true;
}

bool
label_value_valid(const char *v)
{
	size_t n = strlen(v);

	if (n > 253)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] >= 0x7f)
			return false;
	return true;
}

bool
sandbox_matches_labels(const struct sandbox *sb, const json_t *filter)
{
	const char *k;
	json_t *v;

	json_object_foreach ((json_t *)filter, k, v) {
		json_t *have = json_object_get(sb->labels, k);
		if (!have || !json_equal(have, v))
			return false;
	}
	return true;
}

int
sandbox_set_state(struct sandboxd *d, struct sandbox *sb, enum sandbox_state to, const char *reason)
{
	enum sandbox_state from = sb->state;
	char *old_reason = sb->reason;
	uint64_t old_since = sb->state_since;
	json_t *data;
	int r;

	if (!sandbox_transition_allowed(from, to)) {
		log_error("sandbox '%s': refusing state change %s -> %s (not in the table)", sb->id,
		          sandbox_state_to_string(from), sandbox_state_to_string(to));
		return -EINVAL;
	}
	sb->reason = reason ? strdup(reason) : NULL;
	if (reason && !sb->reason) {
		sb->reason = old_reason;
		return -ENOMEM;
	}
	sb->state = to;
	sb->state_since = now_mono_ms();
	data = json_pack("{s:s, s:s, s:s?}", "from", sandbox_state_to_string(from), "to",
	                 sandbox_state_to_string(to), "reason", reason);
	/* a stop sandboxd made on its own says why, in the audit trail's words */
	if (data && to == SANDBOX_STOPPED && sb->stopping != SANDBOX_STOP_REQUEST &&
	    json_object_set_new(data, "stop", json_string(stop_names[sb->stopping])) < 0) {
		json_decref(data);
		data = NULL;
	}
	/* what ended it, in the audit trail's words */
	if (data && to == SANDBOX_TERMINATED &&
	    json_object_set_new(data, "end", json_string(sandbox_end_to_string(sb->end))) < 0) {
		json_decref(data);
		data = NULL;
	}
	r = data ? sandbox_commit(d, sb, false, "state", data) : -ENOMEM;
	if (r < 0) {
		/* the record of truth did not change, so neither does the cache */
		free(sb->reason);
		sb->reason = old_reason;
		sb->state = from;
		sb->state_since = old_since;
		(void)sandbox_refresh_json(sb);
		log_error("sandbox '%s': persisting %s -> %s failed: %s", sb->id,
		          sandbox_state_to_string(from), sandbox_state_to_string(to), strerror(-r));
		return r;
	}
	free(old_reason);
	if (reason)
		log_info("sandbox '%s': %s -> %s (%s)", sb->id, sandbox_state_to_string(from),
		         sandbox_state_to_string(to), reason);
	else
		log_info("sandbox '%s': %s -> %s", sb->id, sandbox_state_to_string(from),
		         sandbox_state_to_string(to));
	notify_waiters(sb, false);
	return 0;
}

void
registry_init(struct registry *r)
{
	*r = (struct registry){ .by_id = HASHMAP_INIT };
	list_init(&r->all);
}

void
registry_done(struct registry *r)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &r->all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		list_remove(&sb->by_created);
		sandbox_free(sb);
	}
	hashmap_clear(&r->by_id);
	r->count = 0;
}

int
registry_add(struct registry *r, struct sandbox *sb)
{
	int rc = hashmap_put(&r->by_id, sb->id, sb);

	if (rc < 0)
		return rc;
	/* newest first: sandboxes are added in creation order (new ones as they are created,
	 * stored ones oldest first at startup), so the newest is always at the front, even
	 * when two share a millisecond */
	list_push_front(&r->all, &sb->by_created);
	r->count++;
	generation++;
	return 0;
}

void
registry_make_newest(struct registry *r, struct sandbox *sb)
{
	list_remove(&sb->by_created);
	list_push_front(&r->all, &sb->by_created);
	generation++;
}

int
registry_add_by_created(struct registry *r, struct sandbox *sb)
{
	struct list_node *pos = &r->all;
	int rc = hashmap_put(&r->by_id, sb->id, sb);

	if (rc < 0)
		return rc;
	/* after every one created later (or at the same time), before the older ones */
	while (pos->next != &r->all &&
	       list_entry(pos->next, struct sandbox, by_created)->created_at >= sb->created_at)
		pos = pos->next;
	list_insert_after(pos, &sb->by_created);
	r->count++;
	generation++;
	return 0;
}

void
registry_remove(struct registry *r, struct sandbox *sb)
{
	if (hashmap_get(&r->by_id, sb->id) != sb)
		return;
	hashmap_remove(&r->by_id, sb->id);
	list_remove(&sb->by_created);
	r->count--;
	generation++;
}

static void
free_deferred(void *data)
{
	sandbox_free(data);
}

void
registry_drop(struct sandboxd *d, struct sandbox *sb)
{
	struct registry *r = &d->reg;

	if (hashmap_get(&r->by_id, sb->id) != sb)
		return;
	hashmap_remove(&r->by_id, sb->id);
	list_remove(&sb->by_created);
	r->count--;
	generation++;
	notify_waiters(sb, true);
	if (loop_defer(d->loop, free_deferred, sb) < 0)
		log_warning("sandbox '%s': leaking its memory: out of memory", sb->id);
}

struct sandbox *
registry_get(struct registry *r, const char *id)
{
	return hashmap_get(&r->by_id, id);
}

struct sandbox *
registry_find_name(struct registry *r, const char *name, const char *owner)
{
	struct list_node *n;

	LIST_FOREACH (n, &r->all) {
		struct sandbox *sb = list_entry(n, struct sandbox, by_created);
		if (sb->name && streq(sb->name, name) && (!owner || streq(sb->owner, owner)) &&
		    sb->state != SANDBOX_TERMINATED && !sb->pooled)
			return sb;
	}
	return NULL;
}

struct sandbox *
registry_find(struct registry *r, const char *ref, const char *owner)
{
	struct sandbox *sb;

	if (str_has_prefix(ref, "sbx_")) {
		sb = registry_get(r, ref);
		/* a pooled sandbox is no one's, not even an admin's, until it is claimed */
		if (sb && ((owner && !streq(sb->owner, owner)) || sb->pooled))
			return NULL;
		return sb;
	}
	return registry_find_name(r, ref, owner);
}

bool
sandbox_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > SANDBOX_NAME_MAX)
		return false;
	if (!islower((unsigned char)name[0]) && !isdigit((unsigned char)name[0]))
		return false;
	for (size_t i = 1; i < n; i++) {
		unsigned char c = (unsigned char)name[i];
		if (!(c >= 'a' && c <= 'z') && !isdigit(c) && c != '-')
			return false;
	}
	return true;
}

bool
sandbox_id_valid(const char *id)
{
	const char *hex;
	size_t n = strlen(id);

	if (n > SANDBOX_ID_MAX || !str_has_prefix(id, "sbx_"))
		return false;
	/* sbx_<16 hex> or sbx_<node>_<16 hex> */
	if (n < 4 + 16)
		return false;
	hex = id + n - 16;
	for (size_t i = 0; i < 16; i++)
		if (!isxdigit((unsigned char)hex[i]) || isupper((unsigned char)hex[i]))
			return false;
	if (n == 20)
		return true;
	if (hex[-1] != '_' || n - 16 - 1 - 4 == 0 || n - 16 - 1 - 4 > 31)
		return false;
	for (const char *p = id + 4; p < hex - 1; p++)
		if (!(*p >= 'a' && *p <= 'z') && !isdigit((unsigned char)*p) && *p != '-')
			return false;
	return true;
}

void
sandbox_machine_id(const char *id, char out[static SANDBOX_MACHINE_ID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	char text[sizeof("sandboxd machine-id ") + SANDBOX_ID_MAX];
	unsigned char md[SHA256_DIGEST_LENGTH];
	int n = snprintf(text, sizeof(text), "sandboxd machine-id %s", id);

	SHA256((const unsigned char *)text, (size_t)MIN(n, (int)sizeof(text) - 1), md);
	for (size_t i = 0; i < SANDBOX_MACHINE_ID_LEN / 2; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 0xf];
	}
	out[SANDBOX_MACHINE_ID_LEN] = '\0';
}
