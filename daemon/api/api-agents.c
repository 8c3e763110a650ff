/* api-agents.c: what a create with "agent" needs beyond the other fields (the backend runs
 * processes, the agent's credential from the create's env or the owner's saved secret), and
 * the per-user secrets behind it: GET /v1/secrets, PUT and DELETE /v1/secrets/{NAME}. Values
 * are never answered and never logged. */
#include "agents.h"
#include "api-internal.h"
#include "backend.h"
#include "log.h"
#include "request.h"
#include "sandboxd.h"
#include "secrets.h"
#include "server.h"
#include "util.h"

/* The caller's secrets; answers 500 and returns -errno when they cannot be read. */
static int
load_secrets(struct api_call *call, struct secrets *ret)
{
	_cleanup_free_ char *why = NULL;
	int r = secrets_load(call->d->opts->state_dir, call->who.name, ret, &why);

	if (r == -ENOMEM)
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
	else if (r < 0)
		api_reply_err(call->c, ERR_INTERNAL, "the saved secrets cannot be read: %s",
		              why ? why : strerror(-r));
	return r;
}

/* "A, B or C" */
static char *
names_or(const char *const *names)
{
	size_t n = 0;
	char *s = NULL, *t;

	while (names[n])
		n++;
	for (size_t i = 0; i < n; i++) {
		t = strdup_printf("%s%s%s", s ? s : "",
		                  i == 0       ? ""
		                  : i + 1 == n ? " or "
		                               : ", ",
		                  names[i]);
		free(s);
		if (!(s = t))
			return NULL;
	}
	return s;
}

static int
add_env(struct sandbox *sb, const char *name, const char *value)
{
	struct sandbox_env *env = realloc(sb->env, (sb->nenv + 2) * sizeof(*sb->env));

	if (!env)
		return -ENOMEM;
	sb->env = env;
	sb->env[sb->nenv] = (struct sandbox_env){ .name = strdup(name), .value = strdup(value) };
	sb->env[sb->nenv + 1] = (struct sandbox_env){ 0 };
	if (!sb->env[sb->nenv].name || !sb->env[sb->nenv].value) {
		free(sb->env[sb->nenv].name);
		free(sb->env[sb->nenv].value);
		sb->env[sb->nenv] = (struct sandbox_env){ 0 };
		return -ENOMEM;
	}
	sb->nenv++;
	return 0;
}

int
api_agent_prepare(struct api_call *call, struct sandbox *sb)
{
	const struct agent_kind *kind = sb->agent_run->kind;
	struct backend_caps caps = { .accel = "none" };
	struct secrets saved = { 0 };
	_cleanup_free_ char *names = NULL;
	int r;

	if (call->d->backend)
		call->d->backend->ops->caps(call->d->backend, &caps);
	if (!caps.processes) {
		api_reply_err(call->c, ERR_UNSUPPORTED,
		              "this server's backend runs no processes, so it cannot start an "
		              "agent (capability processes)");
		return -EOPNOTSUPP;
	}
	/* the create's env carries it */
	for (size_t i = 0; kind->credentials[i]; i++)
		for (size_t j = 0; j < sb->nenv; j++)
			if (streq(sb->env[j].name, kind->credentials[i]))
				return 0;
	/* else the first of the names the owner saved */
	r = load_secrets(call, &saved);
	if (r < 0)
		return r;
	for (size_t i = 0; kind->credentials[i]; i++) {
		const struct secret *x = secrets_find(&saved, kind->credentials[i]);
		if (!x)
			continue;
		if (sb->nenv >= REQUEST_MAX_ENV) {
			secrets_done(&saved);
			api_reply_err(call->c, ERR_INVALID,
			              "at most %d environment variables, the agent's credential "
			              "%s included",
			              REQUEST_MAX_ENV, x->name);
			return -EINVAL;
		}
		r = add_env(sb, x->name, x->value);
		secrets_done(&saved);
		if (r < 0)
			api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return r;
	}
	secrets_done(&saved);
	names = names_or(kind->credentials);
	api_reply_err(call->c, ERR_INVALID,
	              "%s needs %s: pass %s in 'env', or save it once with PUT /v1/secrets/%s "
	              "(sandbox-cli secret set %s)",
	              kind->name, names ? names : kind->credentials[0],
	              kind->credentials[1] ? "one" : "it", kind->credentials[0],
	              kind->credentials[0]);
	return -EINVAL;
}

/* ---- /v1/secrets ---- */

static json_t *
secret_json(const struct secret *x)
{
	char when[32];

	format_rfc3339(x->updated_at, when);
	return json_pack("{s:s, s:s}", "name", x->name, "updated_at", when);
}

void
api_secret_list(struct api_call *call)
{
	struct secrets s = { 0 };
	json_t *arr;

	if (load_secrets(call, &s) < 0)
		return;
	arr = json_array();
	for (size_t i = 0; arr && i < s.n; i++)
		json_array_append_new(arr, secret_json(&s.v[i]));
	secrets_done(&s);
	api_reply_json(call->c, 200, json_pack("{s:o}", "secrets", arr ? arr : json_array()));
}

/* A secret's name from the path: an environment name a create would accept. */
static bool
check_name(struct api_call *call)
{
	if (!env_name_valid(call->ref) || strlen(call->ref) > SECRET_NAME_MAX) {
		api_reply_err(call->c, ERR_INVALID,
		              "secret name '%.64s' is invalid: it is an environment variable's "
		              "name, ^[A-Za-z_][A-Za-z0-9_]*$",
		              call->ref);
		return false;
	}
	if (env_name_reserved(call->ref)) {
		api_reply_err(call->c, ERR_INVALID,
		              "secret name '%s' is a reserved environment name and cannot be set",
		              call->ref);
		return false;
	}
	return true;
}

void
api_secret_put(struct api_call *call)
{
	static const char *const fields[] = { "value", NULL };
	const json_t *v = json_object_get(call->body, "value");
	struct secrets s = { 0 };
	const struct secret *x;
	struct err err = {};
	int r;

	if (!check_name(call))
		return;
	r = request_check_fields(call->body, fields, &err);
	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return;
	}
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
	    json_string_length(v) > SECRET_VALUE_MAX) {
		api_reply_err(call->c, ERR_INVALID,
		              "'value' must be a string of at most %u bytes, without NUL",
		              SECRET_VALUE_MAX);
		return;
	}
	if (load_secrets(call, &s) < 0)
		return;
	r = secrets_set(&s, call->ref, json_string_value(v), now_unix_ms());
	if (r == -E2BIG) {
		api_reply_err(call->c, ERR_REFUSED,
		              "at most %d secrets per user: remove one first (DELETE "
		              "/v1/secrets/{NAME})",
		              SECRETS_MAX);
		goto out;
	}
	if (r >= 0)
		r = secrets_save(call->d->opts->state_dir, &s);
	if (r < 0) {
		log_error("secrets of '%s': cannot save them: %s", call->who.name, strerror(-r));
		api_reply_err(call->c, ERR_INTERNAL, "the secret could not be saved: %s",
		              strerror(-r));
		goto out;
	}
	x = secrets_find(&s, call->ref);
	api_reply_json(call->c, 200, secret_json(x));
out:
	secrets_done(&s);
}

void
api_secret_delete(struct api_call *call)
{
	struct secrets s = { 0 };
	int r;

	if (!check_name(call))
		return;
	if (load_secrets(call, &s) < 0)
		return;
	r = secrets_remove(&s, call->ref);
	if (r == -ENOENT) {
		api_reply_err(call->c, ERR_NOT_FOUND, "secret '%s' not found", call->ref);
		goto out;
	}
	r = secrets_save(call->d->opts->state_dir, &s);
	if (r < 0) {
		log_error("secrets of '%s': cannot save them: %s", call->who.name, strerror(-r));
		api_reply_err(call->c, ERR_INTERNAL, "the secret could not be removed: %s",
		              strerror(-r));
		goto out;
	}
	conn_reply(call->c, 204, NULL, NULL, 0, NULL);
out:
	secrets_done(&s);
}
