/* request.c: see request.h. */
#include "agents.h"
#include "base64.h"
#include "netpolicy.h"
#include "oci.h"
#include "request.h"
#include "strv.h"
#include "util.h"

/* The loader and shell variables a process must never receive from a request, and our own
 * control prefix. */
static const char *const reserved_env[] = {
	"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV",
	"SHELLOPTS",  "BASHOPTS",        "PS4",      "IFS",      "GLOBIGNORE",
};
#define RESERVED_ENV_PREFIX "SANDBOXD_"
/* The most seconds a timeout may say when the policy sets no maximum: a century, so that
 * deadlines in milliseconds stay far from int64 overflow. */
#define UNBOUNDED_SECS_MAX (100ull * 366 * 86400)

bool
env_name_valid(const char *name)
{
	return env_name_ok(name, strlen(name), ENV_NAME_MAX);
}

bool
env_name_reserved(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(reserved_env); i++)
		if (streq(name, reserved_env[i]))
			return true;
	return str_has_prefix(name, RESERVED_ENV_PREFIX);
}

int
request_check_fields(const json_t *obj, const char *const *allowed, struct err *err)
{
	const char *key;
	json_t *v;

	if (!json_is_object(obj))
		return err_set(err, -EINVAL, ERR_INVALID, "the body must be a JSON object");
	json_object_foreach ((json_t *)obj, key, v) {
		bool ok = false;
		for (size_t i = 0; allowed[i]; i++)
			if (streq(key, allowed[i])) {
				ok = true;
				break;
			}
		if (!ok) {
			struct buf b = BUF_INIT(128);
			(void)buf_put_quoted(&b, key, strlen(key), 64);
			err_set(err, -EINVAL, ERR_INVALID, "unknown field %s",
			        b.data ? b.data : "");
			buf_free(&b);
			return -EINVAL;
		}
	}
	return 0;
}

/* Reads an optional non-negative integer field within [min, max]; absent or null leaves
 * *ret as it is. max 0 means unbounded. */
static int
get_uint(const json_t *obj, const char *field, uint64_t min, uint64_t max, uint64_t *ret,
         struct err *err)
{
	json_t *v = json_object_get(obj, field);
	json_int_t n;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return err_set(err, -EINVAL, ERR_INVALID, "'%s' must be an integer", field);
	n = json_integer_value(v);
	if (n < 0 || (uint64_t)n < min || (max && (uint64_t)n > max)) {
		if (max)
			err_set(err, -EINVAL, ERR_INVALID,
			        "'%s' is %lld; this server allows %llu to %llu", field,
			        (long long)n, (unsigned long long)min, (unsigned long long)max);
		else
			err_set(err, -EINVAL, ERR_INVALID, "'%s' is %lld; it must be at least %llu",
			        field, (long long)n, (unsigned long long)min);
		return -EINVAL;
	}
	*ret = (uint64_t)n;
	return 0;
}

static uint64_t
secs_max(uint64_t policy_max)
{
	return policy_max ? policy_max : UNBOUNDED_SECS_MAX;
}

/* The least a timeout may say: 0 is "none", which is above any limit the policy sets. */
static uint64_t
secs_min(uint64_t policy_max)
{
	return policy_max ? 1 : 0;
}

static int
decode_labels(const json_t *v, json_t **ret, struct err *err)
{
	const char *k;
	json_t *val, *out;

	if (!json_is_object(v))
		return err_set(err, -EINVAL, ERR_INVALID, "'labels' must be an object of strings");
	if (json_object_size(v) > REQUEST_MAX_LABELS)
		return err_set(err, -EINVAL, ERR_INVALID, "at most %d labels", REQUEST_MAX_LABELS);
	json_object_foreach ((json_t *)v, k, val) {
		if (!label_key_valid(k))
			return err_set(
			        err, -EINVAL, ERR_INVALID,
			        "label key '%.64s' is invalid: use lowercase letters, digits and "
			        "._/- (at most 63, starting with a letter or digit)",
			        k);
		if (!json_is_string(val) || !label_value_valid(json_string_value(val)))
			return err_set(
			        err, -EINVAL, ERR_INVALID,
			        "label '%s' must be a printable string of at most 253 characters",
			        k);
	}
	out = json_deep_copy(v);
	if (!out)
		return -ENOMEM;
	*ret = out;
	return 0;
}

static int
decode_env(const json_t *v, struct sandbox *sb, struct err *err)
{
	const char *k;
	json_t *val;
	size_t total = 0;

	if (!json_is_object(v))
		return err_set(err, -EINVAL, ERR_INVALID, "'env' must be an object of strings");
	if (json_object_size(v) > REQUEST_MAX_ENV)
		return err_set(err, -EINVAL, ERR_INVALID, "at most %d environment variables",
		               REQUEST_MAX_ENV);
	/* every name is checked before any is stored: one bad name changes nothing */
	json_object_foreach ((json_t *)v, k, val) {
		if (!env_name_valid(k))
			return err_set(err, -EINVAL, ERR_INVALID,
			               "environment name '%.64s' is invalid: it must match "
			               "^[A-Za-z_][A-Za-z0-9_]*$",
			               k);
		if (env_name_reserved(k))
			return err_set(err, -EPERM, ERR_REFUSED,
			               "environment name '%s' is reserved and cannot be set", k);
		if (!json_is_string(val))
			return err_set(err, -EINVAL, ERR_INVALID,
			               "environment variable '%s' must be a string", k);
		if (json_string_length(val) > REQUEST_MAX_ENV_VALUE)
			return err_set(err, -EINVAL, ERR_INVALID,
			               "environment variable '%s' is longer than %u bytes", k,
			               REQUEST_MAX_ENV_VALUE);
		total += json_string_length(val);
	}
	if (total > 8 * REQUEST_MAX_ENV_VALUE)
		return err_set(err, -EINVAL, ERR_INVALID, "the environment is larger than %u bytes",
		               8 * REQUEST_MAX_ENV_VALUE);
	sb->env = calloc(json_object_size(v) + 1, sizeof(*sb->env));
	if (!sb->env)
		return -ENOMEM;
	json_object_foreach ((json_t *)v, k, val) {
		struct sandbox_env *e = &sb->env[sb->nenv];
		e->name = strdup(k);
		e->value = strdup(json_string_value(val));
		if (!e->name || !e->value) {
			free(e->name);
			free(e->value);
			return -ENOMEM;
		}
		sb->nenv++;
	}
	return 0;
}

static bool
is_unset(const json_t *v)
{
	return !v || json_is_null(v);
}

/* "idle_action": "suspend", "stop" or "terminate" (whether this server can suspend is the
 * API's to check: api_check_idle_action). */
static int
decode_idle_action(const json_t *v, enum sandbox_idle_action *ret, struct err *err)
{
	const char *s = json_string_value(v);
	enum sandbox_idle_action a = sandbox_idle_action_from_string(s);

	if (a < 0)
		return err_set(
		        err, -EINVAL, ERR_INVALID,
		        "'idle_action' must be \"suspend\" (its memory and disk are kept; the "
		        "default where the server can suspend), \"stop\" (its disk is kept) "
		        "or \"terminate\" (its disk is discarded)");
	*ret = a;
	return 0;
}

static int
decode_bool(const json_t *v, const char *field, bool *ret, struct err *err)
{
	if (!json_is_boolean(v))
		return err_set(err, -EINVAL, ERR_INVALID, "'%s' must be true or false", field);
	*ret = json_is_true(v);
	return 0;
}

static int
decode_name(const json_t *v, char **ret, struct err *err)
{
	const char *s;

	if (!json_is_string(v))
		return err_set(err, -EINVAL, ERR_INVALID, "'name' must be a string");
	s = json_string_value(v);
	if (!sandbox_name_valid(s))
		return err_set(
		        err, -EINVAL, ERR_INVALID,
		        "name '%.64s' is invalid: use 1 to 63 lowercase letters, digits and -, "
		        "starting with a letter or digit",
		        s);
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

/* A string member of the agent object: absent or null leaves *ret NULL; else a string
 * without NUL, 1 to max bytes. */
static int
agent_string(const json_t *agent, const char *field, size_t max, const char **ret, struct err *err)
{
	const json_t *v = json_object_get(agent, field);

	*ret = NULL;
	if (is_unset(v))
		return 0;
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return err_set(err, -EINVAL, ERR_INVALID, "'agent.%s' must be a string", field);
	if (json_string_length(v) == 0 || json_string_length(v) > max)
		return err_set(err, -EINVAL, ERR_INVALID, "'agent.%s' must be 1 to %zu bytes%s",
		               field, max,
		               streq(field, "task") ? " (leave it out for an interactive agent)"
		                                    : "");
	*ret = json_string_value(v);
	return 0;
}

/* "agent": {name, task, repo, args} into a new run. */
static int
decode_agent(const json_t *v, struct agent_run **ret, struct err *err)
{
	static const char *const fields[] = { "name", "task", "repo", "args", NULL };
	const json_t *name = json_object_get(v, "name"), *args = json_object_get(v, "args");
	const char *task, *repo;
	const struct agent_kind *kind;
	_cleanup_strv_ char **argv = NULL;
	char host[256];
	size_t n = 0, i;
	json_t *a;
	int r;

	if (!json_is_object(v))
		return err_set(err, -EINVAL, ERR_INVALID,
		               "'agent' must be an object: {\"name\": \"claude\", \"task\": …}");
	r = request_check_fields(v, fields, err);
	if (r < 0) {
		/* say where the field is */
		char msg[sizeof(err->message)];
		snprintf(msg, sizeof(msg), "%s", err->message);
		return err_set(err, r, ERR_INVALID, "'agent': %s", msg);
	}
	kind = json_is_string(name) ? agent_kind_find(json_string_value(name)) : NULL;
	if (!kind) {
		struct buf b = BUF_INIT(128);
		if (json_is_string(name))
			(void)buf_put_quoted(&b, json_string_value(name), json_string_length(name),
			                     32);
		err_set(err, -EINVAL, ERR_INVALID, "'agent.name' %s%sis not an agent: use %s",
		        b.data ? b.data : "", b.data ? " " : "", agent_kind_names());
		buf_free(&b);
		return -EINVAL;
	}
	if ((r = agent_string(v, "task", AGENT_TASK_MAX, &task, err)) < 0 ||
	    (r = agent_string(v, "repo", AGENT_REPO_MAX, &repo, err)) < 0)
		return r;
	if (repo && agent_repo_host(repo, host, sizeof(host)) < 0)
		return err_set(err, -EINVAL, ERR_INVALID,
		               "'agent.repo' must be an https:// or http:// URL of a git "
		               "repository, without a user or password in it");
	if (!is_unset(args)) {
		if (!json_is_array(args) || json_array_size(args) > AGENT_ARGS_MAX)
			return err_set(err, -EINVAL, ERR_INVALID,
			               "'agent.args' must be a list of at most %d strings",
			               AGENT_ARGS_MAX);
		json_array_foreach (args, i, a) {
			if (!json_is_string(a) ||
			    strlen(json_string_value(a)) != json_string_length(a) ||
			    json_string_length(a) > AGENT_ARG_MAX)
				return err_set(err, -EINVAL, ERR_INVALID,
				               "'agent.args[%zu]' must be a string of at most %d "
				               "bytes",
				               i, AGENT_ARG_MAX);
			if (strv_add(&argv, &n, json_string_value(a)) < 0)
				return -ENOMEM;
		}
	}
	return agent_run_new(kind, task, repo, argv, ret);
}

/* An agent's sandbox's network: mode allowlist (none would cut the agent off its API, and
 * open is more than it gets); the request's allow list (or the default one), held to
 * may_allow, plus the agent's own hosts and its repo's, which are not. */
static int
agent_network(const struct policy *p, const json_t *req, const struct agent_run *run, json_t **ret,
              struct err *err)
{
	const json_t *mode = NULL, *allow = NULL, *deny = NULL;
	json_t *own = agent_own_hosts(run->kind, run->repo), *list = NULL, *req2 = NULL;
	const char *key;
	json_t *v;
	int r = -ENOMEM;

	if (!own)
		return -ENOMEM;
	if (!is_unset(req)) {
		if (!json_is_object(req)) {
			r = err_set(err, -EINVAL, ERR_INVALID, "'network' must be an object");
			goto out;
		}
		json_object_foreach ((json_t *)req, key, v)
			if (!streq(key, "mode") && !streq(key, "allow") && !streq(key, "deny")) {
				r = err_set(err, -EINVAL, ERR_INVALID,
				            "unknown field 'network.%.32s'", key);
				goto out;
			}
		mode = json_object_get(req, "mode");
		allow = json_object_get(req, "allow");
		deny = json_object_get(req, "deny");
	}
	if (!is_unset(mode) &&
	    !(json_is_string(mode) && streq(json_string_value(mode), "allowlist"))) {
		r = err_set(err, -EINVAL, ERR_INVALID,
		            "an agent's sandbox has network mode allowlist (its API hosts are on "
		            "it): leave 'network.mode' out or say \"allowlist\"");
		goto out;
	}
	if (!is_unset(allow) && !json_is_array(allow)) {
		r = err_set(err, -EINVAL, ERR_INVALID, "'network.allow' must be a list of names");
		goto out;
	}
	list = json_array();
	if (!list ||
	    json_array_extend(list, is_unset(allow) ? p->network.default_allow : (json_t *)allow) <
	            0 ||
	    json_array_extend(list, own) < 0)
		goto out;
	req2 = json_pack("{s:s, s:O}", "mode", "allowlist", "allow", list);
	if (!req2 || (!is_unset(deny) && json_object_set(req2, "deny", (json_t *)deny) < 0))
		goto out;
	r = netpolicy_resolve_also(p, own, req2, ret, err);
out:
	json_decref(own);
	json_decref(list);
	json_decref(req2);
	return r;
}

int
request_decode_create(const struct policy *p, const json_t *body, struct sandbox *sb,
                      bool *ret_wait, struct err *err)
{
	static const char *const fields[] = {
		"name",
		"image",
		"cpus",
		"memory_mb",
		"disk_mb",
		"env",
		"network",
		"labels",
		"idle_timeout_secs",
		"idle_action",
		"lifetime_secs",
		"bound_to_client",
		"volumes",
		"wait",
		"snapshot_id",
		"snapshot_every_secs",
		"snapshot_keep",
		"agent",
		NULL,
	};
	uint64_t cpus = p->defaults.cpus, mem = p->defaults.memory_mb, disk = p->defaults.disk_mb;
	uint64_t idle = p->defaults.idle_timeout_secs, life = p->defaults.lifetime_secs;
	json_t *v;
	int r;

	r = request_check_fields(body, fields, err);
	if (r < 0)
		return r;
	v = json_object_get(body, "wait");
	if (!is_unset(v) && !json_is_boolean(v))
		return err_set(err, -EINVAL, ERR_INVALID, "'wait' must be true or false");
	*ret_wait = !v || !json_is_false(v);

	v = json_object_get(body, "name");
	if (!is_unset(v) && (r = decode_name(v, &sb->name, err)) < 0)
		return r;
	v = json_object_get(body, "image");
	if (is_unset(v)) {
		sb->image = strdup(p->default_image);
	} else {
		if (!json_is_string(v) || !image_ref_valid(json_string_value(v)))
			return err_set(
			        err, -EINVAL, ERR_INVALID,
			        "'image' must be an image reference such as python:3.13-slim "
			        "(lowercase; letters, digits and ._-/:@)");
		sb->image = strdup(json_string_value(v));
	}
	if (!sb->image)
		return -ENOMEM;
	if ((r = get_uint(body, "cpus", 1, p->limits.max_cpus, &cpus, err)) < 0 ||
	    (r = get_uint(body, "memory_mb", 64, p->limits.max_memory_mb, &mem, err)) < 0 ||
	    (r = get_uint(body, "disk_mb", 64, p->limits.max_disk_mb, &disk, err)) < 0 ||
	    (r = get_uint(body, "idle_timeout_secs", secs_min(p->limits.max_idle_timeout_secs),
	                  secs_max(p->limits.max_idle_timeout_secs), &idle, err)) < 0 ||
	    (r = get_uint(body, "lifetime_secs", secs_min(p->limits.max_lifetime_secs),
	                  secs_max(p->limits.max_lifetime_secs), &life, err)) < 0)
		return r;
	v = json_object_get(body, "idle_action");
	if (!is_unset(v) && (r = decode_idle_action(v, &sb->idle_action, err)) < 0)
		return r;
	v = json_object_get(body, "bound_to_client");
	if (!is_unset(v) && (r = decode_bool(v, "bound_to_client", &sb->bound_to_client, err)) < 0)
		return r;
	/* a sandbox bound to its client has a lifetime even so: should the binding fail (a
	 * client that holds its stream open and never comes back), it still ends */
	if (sb->bound_to_client && life == 0 && is_unset(json_object_get(body, "lifetime_secs"))) {
		life = REQUEST_BOUND_LIFETIME_SECS;
		if (p->limits.max_lifetime_secs)
			life = MIN(life, p->limits.max_lifetime_secs);
	}
	/* a limit bounds what the request leaves out too: no timeout is never above it */
	if (idle == 0)
		idle = p->limits.max_idle_timeout_secs;
	if (life == 0)
		life = p->limits.max_lifetime_secs;
	sb->cpus = (unsigned)cpus;
	sb->memory_mb = (unsigned)mem;
	sb->disk_mb = disk;
	sb->idle_timeout_secs = idle;
	sb->lifetime_secs = life;

	v = json_object_get(body, "labels");
	if (!is_unset(v)) {
		json_t *labels;
		if ((r = decode_labels(v, &labels, err)) < 0)
			return r;
		json_decref(sb->labels);
		sb->labels = labels;
	}
	v = json_object_get(body, "env");
	if (!is_unset(v) && (r = decode_env(v, sb, err)) < 0)
		return r;
	v = json_object_get(body, "volumes");
	if (!is_unset(v)) {
		if (!json_is_array(v))
			return err_set(err, -EINVAL, ERR_INVALID, "'volumes' must be an array");
		if (json_array_size(v) > 0)
			return err_set(err, -EOPNOTSUPP, ERR_UNSUPPORTED,
			               "this server does not offer volumes");
	}
	if (!is_unset(json_object_get(body, "snapshot_id")) ||
	    !is_unset(json_object_get(body, "snapshot_every_secs")) ||
	    !is_unset(json_object_get(body, "snapshot_keep")))
		return err_set(err, -EOPNOTSUPP, ERR_UNSUPPORTED,
		               "this server does not offer snapshots");
	v = json_object_get(body, "agent");
	if (!is_unset(v) && (r = decode_agent(v, &sb->agent_run, err)) < 0)
		return r;
	/* the network last: its 403 should not hide a 400 elsewhere in the body */
	json_decref(sb->network);
	sb->network = NULL;
	if (sb->agent_run)
		r = agent_network(p, json_object_get(body, "network"), sb->agent_run, &sb->network,
		                  err);
	else
		r = netpolicy_resolve(p, json_object_get(body, "network"), &sb->network, err);
	if (r < 0) {
		sb->network = json_object();
		return r;
	}
	return 0;
}

int
request_decode_patch(const struct policy *p, const json_t *body, struct sandbox_patch *ret,
                     struct err *err)
{
	static const char *const fields[] = { "network",     "name",
		                              "labels",      "idle_timeout_secs",
		                              "idle_action", "bound_to_client",
		                              NULL };
	struct sandbox_patch patch = { 0 };
	json_t *v;
	int r;

	r = request_check_fields(body, fields, err);
	if (r < 0)
		return r;
	if (json_object_size(body) == 0)
		return err_set(
		        err, -EINVAL, ERR_INVALID,
		        "the body changes nothing: give at least one of 'name', 'labels', "
		        "'network', 'idle_timeout_secs', 'idle_action' and 'bound_to_client'");
	v = json_object_get(body, "name");
	if (v) {
		patch.set_name = true;
		/* "" removes the name, as null does */
		if (!json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0) &&
		    (r = decode_name(v, &patch.name, err)) < 0)
			goto fail;
	}
	v = json_object_get(body, "labels");
	if (v) {
		if (json_is_null(v))
			patch.labels = json_object();
		else if ((r = decode_labels(v, &patch.labels, err)) < 0)
			goto fail;
	}
	v = json_object_get(body, "idle_timeout_secs");
	if (v) {
		patch.set_idle = true;
		if ((r = get_uint(body, "idle_timeout_secs",
		                  secs_min(p->limits.max_idle_timeout_secs),
		                  secs_max(p->limits.max_idle_timeout_secs),
		                  &patch.idle_timeout_secs, err)) < 0)
			goto fail;
		if (json_is_null(v)) {
			r = err_set(err, -EINVAL, ERR_INVALID,
			            "'idle_timeout_secs' must be an integer (0: none)");
			goto fail;
		}
	}
	v = json_object_get(body, "idle_action");
	if (v) {
		patch.set_idle_action = true;
		if ((r = decode_idle_action(v, &patch.idle_action, err)) < 0)
			goto fail;
	}
	v = json_object_get(body, "bound_to_client");
	if (v) {
		patch.set_bound = true;
		if ((r = decode_bool(v, "bound_to_client", &patch.bound_to_client, err)) < 0)
			goto fail;
	}
	v = json_object_get(body, "network");
	if (v && (r = netpolicy_resolve(p, v, &patch.network, err)) < 0)
		goto fail;
	*ret = patch;
	return 0;
fail:
	sandbox_patch_done(&patch);
	return r;
}

void
sandbox_patch_done(struct sandbox_patch *patch)
{
	free(patch->name);
	json_decref(patch->labels);
	json_decref(patch->network);
	*patch = (struct sandbox_patch){ 0 };
}

int
request_add_label_filter(json_t *filter, const char *kv, struct err *err)
{
	const char *eq = strchr(kv, '=');
	_cleanup_free_ char *key = NULL;

	if (!eq)
		return err_set(err, -EINVAL, ERR_INVALID, "label filter '%.64s' must be key=value",
		               kv);
	key = strndup(kv, (size_t)(eq - kv));
	if (!key)
		return -ENOMEM;
	if (!label_key_valid(key) || !label_value_valid(eq + 1))
		return err_set(err, -EINVAL, ERR_INVALID, "label filter '%.64s' is invalid", kv);
	return json_object_set_new(filter, key, json_string(eq + 1)) < 0 ? -ENOMEM : 0;
}

bool
request_path_valid(const char *path)
{
	size_t n = strlen(path);

	if (n == 0 || n > 4096 || path[0] != '/')
		return false;
	for (const char *p = path; (p = strstr(p, "..")); p += 2) {
		bool starts = p == path || p[-1] == '/';
		bool ends = p[2] == '\0' || p[2] == '/';
		if (starts && ends)
			return false;
	}
	return true;
}

void
exec_request_done(struct exec_request *x)
{
	strv_free(x->argv);
	strv_free_erase(x->env);
	free(x->cwd);
	buf_free(&x->stdin_data);
	*x = (struct exec_request){ 0 };
}

static int
get_bool(const json_t *obj, const char *field, bool *ret, struct err *err)
{
	json_t *v = json_object_get(obj, field);

	if (is_unset(v))
		return 0;
	if (!json_is_boolean(v))
		return err_set(err, -EINVAL, ERR_INVALID, "'%s' must be true or false", field);
	*ret = json_is_true(v);
	return 0;
}

int
request_decode_exec(const json_t *body, bool process_fields, struct exec_request *ret,
                    struct err *err)
{
	static const char *const run_fields[] = { "argv",  "env",          "cwd",
		                                  "stdin", "timeout_secs", NULL };
	static const char *const proc_fields[] = { "argv", "env",  "cwd",  "stdin", "timeout_secs",
		                                   "tty",  "rows", "cols", "keep",  NULL };
	struct exec_request x = { .rows = 24, .cols = 80 };
	uint64_t rows = 24, cols = 80;
	size_t i, total = 0;
	json_t *v, *a;
	int r;

	buf_init(&x.stdin_data, 1u << 20);
	r = request_check_fields(body, process_fields ? proc_fields : run_fields, err);
	if (r < 0)
		goto fail;
	a = json_object_get(body, "argv");
	if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > 4096) {
		r = err_set(err, -EINVAL, ERR_INVALID,
		            "'argv' must be a non-empty array of strings (the program first)");
		goto fail;
	}
	x.argv = calloc(json_array_size(a) + 1, sizeof(char *));
	if (!x.argv)
		goto oom;
	json_array_foreach (a, i, v) {
		if (!json_is_string(v) || (i == 0 && json_string_length(v) == 0)) {
			r = err_set(
			        err, -EINVAL, ERR_INVALID,
			        "'argv' must be a non-empty array of strings (the program first)");
			goto fail;
		}
		total += json_string_length(v) + 1;
		if (!(x.argv[i] = strdup(json_string_value(v))))
			goto oom;
	}
	v = json_object_get(body, "env");
	if (!is_unset(v)) {
		struct sandbox *tmp = sandbox_new();
		if (!tmp)
			goto oom;
		r = decode_env(v, tmp, err);
		if (r >= 0) {
			x.env = calloc(tmp->nenv + 1, sizeof(char *));
			for (size_t j = 0; x.env && j < tmp->nenv; j++) {
				x.env[j] =
				        strdup_printf("%s=%s", tmp->env[j].name, tmp->env[j].value);
				total += strlen(x.env[j] ? x.env[j] : "") + 1;
			}
		}
		sandbox_free(tmp);
		if (r < 0)
			goto fail;
		if (!x.env)
			goto oom;
	}
	if (total > (768u << 10)) {
		r = err_set(err, -EINVAL, ERR_INVALID,
		            "argv and env together are larger than 768 KiB");
		goto fail;
	}
	v = json_object_get(body, "cwd");
	if (!is_unset(v)) {
		if (!json_is_string(v) || !request_path_valid(json_string_value(v))) {
			r = err_set(err, -EINVAL, ERR_INVALID,
			            "'cwd' must be an absolute path without '..'");
			goto fail;
		}
		if (!(x.cwd = strdup(json_string_value(v))))
			goto oom;
	}
	v = json_object_get(body, "stdin");
	if (!is_unset(v)) {
		if (!json_is_string(v) ||
		    base64_decode(&x.stdin_data, json_string_value(v), json_string_length(v)) < 0) {
			r = err_set(err, -EINVAL, ERR_INVALID, "'stdin' must be base64");
			goto fail;
		}
		x.has_stdin = true;
	}
	if ((r = get_uint(body, "timeout_secs", 0, 100ull * 366 * 86400, &x.timeout_secs, err)) < 0)
		goto fail;
	if (process_fields) {
		if ((r = get_bool(body, "tty", &x.tty, err)) < 0 ||
		    (r = get_bool(body, "keep", &x.keep, err)) < 0 ||
		    (r = get_uint(body, "rows", 1, 1000, &rows, err)) < 0 ||
		    (r = get_uint(body, "cols", 1, 1000, &cols, err)) < 0)
			goto fail;
		x.rows = (unsigned short)rows;
		x.cols = (unsigned short)cols;
	}
	*ret = x;
	return 0;
oom:
	r = err_set(err, -ENOMEM, ERR_INTERNAL, "out of memory");
fail:
	exec_request_done(&x);
	return r;
}
