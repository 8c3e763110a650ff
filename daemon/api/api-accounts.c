/* api-accounts.c: /v1/auth (login, logout, register), /v1/keys and /v1/users. Passwords are
 * hashed and checked on the accounts pool (accounts.h), never on the loop: those handlers
 * answer when the pool hands the result back, or not at all if the client went away. */
#include <arpa/inet.h>
#include <jansson.h>
#include "accounts.h"
#include "api-internal.h"
#include "ended.h"
#include "log.h"
#include "sandboxd.h"
#include "request.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "volumes.h"

/* What the per-address login limit counts by: the client's address, and for IPv6 its /64
 * (one host usually holds a whole /64). */
static void
peer_key(const struct conn *c, char out[static 64])
{
	const char *peer = conn_peer(c);
	struct in6_addr a;
	char text[INET6_ADDRSTRLEN];

	if (strchr(peer, ':') && !str_has_prefix(peer, "unix:") &&
	    inet_pton(AF_INET6, peer, &a) == 1) {
		memset(a.s6_addr + 8, 0, 8);
		if (inet_ntop(AF_INET6, &a, text, sizeof(text))) {
			snprintf(out, 64, "%s/64", text);
			return;
		}
	}
	snprintf(out, 64, "%s", peer);
}

#define CAP_MAX (1u << 30)
#define WRONG_LOGIN "wrong email or password"

/* ---- shared pieces ---- */

json_t *
api_caps_json(const struct user_caps *caps)
{
	return json_pack("{s:I, s:I, s:I}", "max_sandboxes", (json_int_t)caps->max_sandboxes,
	                 "max_cpus", (json_int_t)caps->max_cpus, "max_memory_mb",
	                 (json_int_t)caps->max_memory_mb);
}

json_t *
api_usage_json(const struct sandbox_usage *u)
{
	return json_pack("{s:I, s:I, s:I}", "sandboxes", (json_int_t)u->sandboxes, "cpus",
	                 (json_int_t)u->cpus, "memory_mb", (json_int_t)u->memory_mb);
}

static json_t *
user_json(struct sandboxd *d, const struct account *a)
{
	struct principal p;
	struct sandbox_usage u;
	char created[32];

	auth_set_user(d, &p, a);
	api_usage(d, a->email, &u);
	format_rfc3339(a->created_at, created);
	return json_pack("{s:s, s:s, s:s, s:b, s:s, s:o, s:o}", "id", a->id, "email", a->email,
	                 "role", role_to_string(a->role), "disabled", a->disabled, "created_at",
	                 created, "caps", api_caps_json(&p.caps), "usage", api_usage_json(&u));
}

static void
reply_store_failed(struct conn *c, int r)
{
	api_reply_err(c, ERR_INTERNAL, "the accounts store failed: %s", strerror(-r));
}

/* Refuses a body field that is not in allowed (NULL-terminated); answers 400. */
static bool
only_fields(struct api_call *call, const char *const *allowed)
{
	struct err err = {};
	int r = request_check_fields(call->body, allowed, &err);

	if (r < 0) {
		api_reply_failure(call->c, r, &err);
		return false;
	}
	return true;
}

/* A string field: 1 and *ret when present, 0 when absent, -EINVAL after answering 400. */
static int
string_field(struct api_call *call, const char *name, const char **ret, size_t *ret_len)
{
	json_t *v = call->body ? json_object_get(call->body, name) : NULL;

	if (!v)
		return 0;
	if (!json_is_string(v)) {
		api_reply_err(call->c, ERR_INVALID, "'%s' must be a string", name);
		return -EINVAL;
	}
	*ret = json_string_value(v);
	if (ret_len)
		*ret_len = json_string_length(v);
	return 1;
}

static int
email_field(struct api_call *call, char out[static ACCOUNT_EMAIL_MAX + 1])
{
	const char *s, *why;
	size_t n;
	int r = string_field(call, "email", &s, &n);

	if (r == 0)
		api_reply_err(call->c, ERR_INVALID, "'email' is required");
	if (r <= 0)
		return -EINVAL;
	why = strlen(s) != n ? "the email may not hold a NUL byte"
	                     : account_email_normalise(s, out);
	if (why) {
		api_reply_err(call->c, ERR_INVALID, "%s", why);
		return -EINVAL;
	}
	return 0;
}

/* The password of a new account or a new password: checked. */
static int
password_field(struct api_call *call, bool required, const char **ret, size_t *ret_len)
{
	const char *why;
	int r = string_field(call, "password", ret, ret_len);

	if (r == 0 && required)
		api_reply_err(call->c, ERR_INVALID, "'password' is required");
	if (r < 0 || (r == 0 && required))
		return -EINVAL;
	if (r == 0)
		return 0;
	why = account_password_check(*ret, *ret_len);
	if (why) {
		api_reply_err(call->c, ERR_INVALID, "%s", why);
		return -EINVAL;
	}
	return 1;
}

static int
role_field(struct api_call *call, enum role *role)
{
	const char *s;
	int r = string_field(call, "role", &s, NULL);

	if (r <= 0)
		return r;
	if (streq(s, "admin"))
		*role = ROLE_ADMIN;
	else if (streq(s, "user"))
		*role = ROLE_USER;
	else {
		api_reply_err(call->c, ERR_INVALID, "'role' must be admin or user");
		return -EINVAL;
	}
	return 1;
}

/* "caps": {"max_sandboxes", "max_cpus", "max_memory_mb"}, each a number (0: no cap) or null
 * (the server's default); those left out stay as they are in a. */
static int
caps_field(struct api_call *call, struct account *a)
{
	static const char *const names[] = { "max_sandboxes", "max_cpus", "max_memory_mb" };
	int64_t *fields[] = { &a->max_sandboxes, &a->max_cpus, &a->max_memory_mb };
	json_t *caps = json_object_get(call->body, "caps"), *v;
	const char *key;

	if (!caps)
		return 0;
	if (!json_is_object(caps)) {
		api_reply_err(call->c, ERR_INVALID,
		              "'caps' must be an object of max_sandboxes, max_cpus, max_memory_mb");
		return -EINVAL;
	}
	json_object_foreach (caps, key, v) {
		size_t i = 0;
		while (i < ARRAY_SIZE(names) && !streq(key, names[i]))
			i++;
		if (i == ARRAY_SIZE(names)) {
			api_reply_err(call->c, ERR_INVALID, "unknown field 'caps.%s'", key);
			return -EINVAL;
		}
		if (json_is_null(v)) {
			*fields[i] = -1;
		} else if (json_is_integer(v) && json_integer_value(v) >= 0 &&
		           json_integer_value(v) <= CAP_MAX) {
			*fields[i] = json_integer_value(v);
		} else {
			api_reply_err(call->c, ERR_INVALID,
			              "'caps.%s' must be a number from 0 (no cap) to %u, or null "
			              "(the server's default)",
			              key, CAP_MAX);
			return -EINVAL;
		}
	}
	return 1;
}

/* For the log: who did it. */
static const char *
by_whom(const struct principal *who)
{
	return who->operator? "the operator" : who->name;
}

static bool
require_admin(struct api_call *call)
{
	if (call->who.role == ROLE_ADMIN)
		return true;
	api_reply_err(call->c, ERR_REFUSED, "only an admin may manage users");
	return false;
}

static bool
require_user(struct api_call *call)
{
	if (!call->who.operator)
		return true;
	api_reply_err(call->c, ERR_REFUSED,
	              "API keys belong to user accounts; the operator uses its token");
	return false;
}

/* ---- work waiting for the pool ---- */

struct pending {
	struct sandboxd *d;
	struct conn *c;
	struct pw_job *job;
	struct principal who;
	void (*finish)(struct pending *p, struct pw_job *j);
	char peer[64];
	struct account a; /* the account being made or changed */
	bool known;       /* login: the email has an account */
	unsigned changes; /* patch: what changes */
};

enum {
	CHANGE_ROLE = 1 << 0,
	CHANGE_DISABLED = 1 << 1,
	CHANGE_CAPS = 1 << 2,
	CHANGE_PASSWORD = 1 << 3,
};

static void
pending_gone(struct conn *c _unused_, void *data)
{
	struct pending *p = data;

	/* the client left: the pool drops the result (and wipes the password) */
	accounts_cancel(p->job);
	free(p);
}

static void
pending_done(struct pw_job *j, void *data)
{
	struct pending *p = data;

	conn_on_close(p->c, NULL, NULL);
	p->finish(p, j);
	free(p);
}

/* Hands the password to the pool; p is freed after p->finish (or when the client goes). 0, or
 * -errno once p is freed and the client answered. */
static int
pending_start(struct api_call *call, struct pending *p, enum pw_op op, const char *pw, size_t len,
              const char *hash)
{
	int r;

	p->d = call->d;
	p->c = call->c;
	p->who = call->who;
	peer_key(call->c, p->peer);
	r = accounts_submit(call->d->accounts, op, pw, len, hash, pending_done, p, &p->job);
	if (r < 0) {
		free(p);
		if (r == -EBUSY)
			api_reply_err_headers(call->c, ERR_UNAVAILABLE, "Retry-After: 1\r\n",
			                      "too many logins at once; retry");
		else
			api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return r;
	}
	conn_on_close(call->c, pending_gone, p);
	return 0;
}

/* ---- /v1/auth ---- */

static void
login_failed(struct pending *p)
{
	/* counted as a failure already, when it began */
	log_info("login: failed for '%s' from %s", p->a.email, p->peer);
	api_reply_err(p->c, ERR_UNAUTHORIZED, WRONG_LOGIN);
}

static void
login_finish(struct pending *p, struct pw_job *j)
{
	struct account_session ses;
	struct account a;
	_cleanup_free_ char *hdr = NULL;
	json_t *body;
	int r;

	if (j->result != 0 || !p->known) {
		login_failed(p);
		return;
	}
	/* read again: the account may have been disabled or removed while it was checked */
	r = account_get(p->d->store, p->a.id, &a);
	if (r == -ENOENT || (r == 0 && a.disabled)) {
		login_failed(p);
		return;
	}
	if (r >= 0)
		r = account_session_create(p->d->store, a.id, now_unix_ms(), &ses);
	if (r < 0) {
		reply_store_failed(p->c, r);
		return;
	}
	/* the attempt was counted when it began: a success takes it back */
	ratelimit_clear(p->d->accounts->by_email, a.email);
	ratelimit_forgive(p->d->accounts->by_peer, p->peer);
	log_info("login: '%s' from %s", a.email, p->peer);
	hdr = strdup_printf("Set-Cookie: " ACCOUNT_SESSION_COOKIE "=%s; Path=/; HttpOnly; "
	                    "SameSite=Strict; Max-Age=%d%s\r\n",
	                    ses.cookie, ACCOUNT_SESSION_MAX_AGE,
	                    conn_is_tls(p->c) ? "; Secure" : "");
	body = json_pack("{s:o, s:s}", "user", user_json(p->d, &a), "csrf_token", ses.csrf);
	explicit_bzero(ses.cookie, sizeof(ses.cookie));
	if (!hdr) {
		json_decref(body);
		api_reply_err(p->c, ERR_INTERNAL, "out of memory");
		return;
	}
	api_reply_json_headers(p->c, 200, body, hdr);
	explicit_bzero(hdr, strlen(hdr));
}

void
api_auth_login(struct api_call *call)
{
	static const char *const fields[] = { "email", "password", NULL };
	struct accounts *accts = call->d->accounts;
	struct pending *p;
	char hash[ACCOUNT_HASH_MAX], email[ACCOUNT_EMAIL_MAX + 1], peer[64];
	const char *pw;
	size_t pwlen;
	unsigned wait;
	int r;

	if (!only_fields(call, fields))
		return;
	p = calloc(1, sizeof(*p));
	if (!p) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	if (email_field(call, p->a.email) < 0) {
		free(p);
		return;
	}
	r = string_field(call, "password", &pw, &pwlen);
	if (r <= 0) {
		if (r == 0)
			api_reply_err(call->c, ERR_INVALID, "'password' is required");
		free(p);
		return;
	}
	/* refused before any hash is computed */
	peer_key(call->c, peer);
	wait = MAX(ratelimit_check(accts->by_email, p->a.email, now_unix_ms()),
	           ratelimit_check(accts->by_peer, peer, now_unix_ms()));
	if (wait > 0) {
		_cleanup_free_ char *hdr = strdup_printf("Retry-After: %u\r\n", wait);
		free(p);
		api_reply_err_headers(call->c, ERR_RATE_LIMITED, hdr,
		                      "too many failed logins; retry in %u seconds", wait);
		return;
	}
	r = account_get_by_email(call->d->store, p->a.email, &p->a, hash);
	if (r < 0 && r != -ENOENT) {
		free(p);
		reply_store_failed(call->c, r);
		return;
	}
	/* an unknown email is checked against a dummy hash: the answer takes as long */
	p->known = r == 0;
	p->finish = login_finish;
	snprintf(email, sizeof(email), "%s", p->a.email);
	r = pending_start(call, p, PW_VERIFY, pw, pwlen, p->known ? hash : account_dummy_hash);
	explicit_bzero(hash, sizeof(hash));
	/* counted now, as a failure until it succeeds: attempts sent at once, all checked
	 * before any hash ends, cannot pass the limit together */
	if (r == 0) {
		(void)ratelimit_fail(accts->by_email, email, now_unix_ms());
		(void)ratelimit_fail(accts->by_peer, peer, now_unix_ms());
	}
}

void
api_auth_logout(struct api_call *call)
{
	static const char *const fields[] = { NULL };
	char hdr[256];
	int r;

	if (call->body && !only_fields(call, fields))
		return;
	if (call->who.session) {
		r = account_session_delete(call->d->store, call->who.cred + strlen("session:"));
		if (r < 0 && r != -ENOENT) {
			reply_store_failed(call->c, r);
			return;
		}
		/* its streams and terminals end with it, before the answer */
		server_close_credential(call->d->server, call->who.cred, NULL, call->c);
		conn_set_credential(call->c, NULL, NULL);
	}
	snprintf(hdr, sizeof(hdr),
	         "Set-Cookie: " ACCOUNT_SESSION_COOKIE
	         "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0%s\r\n",
	         conn_is_tls(call->c) ? "; Secure" : "");
	conn_reply(call->c, 204, NULL, NULL, 0, hdr);
}

static void
create_finish(struct pending *p, struct pw_job *j)
{
	struct account made;
	int r;

	if (j->result < 0) {
		api_reply_err(p->c, ERR_INTERNAL, "hashing the password failed: %s",
		              strerror(-j->result));
		return;
	}
	/* one transaction: a user is never left made without the caps asked for */
	r = store_begin(p->d->store);
	if (r >= 0)
		r = account_create(p->d->store, p->a.email, p->a.role, j->hash, &made);
	if (r >= 0 && (p->a.max_sandboxes >= 0 || p->a.max_cpus >= 0 || p->a.max_memory_mb >= 0)) {
		made.max_sandboxes = p->a.max_sandboxes;
		made.max_cpus = p->a.max_cpus;
		made.max_memory_mb = p->a.max_memory_mb;
		r = account_update(p->d->store, &made);
	}
	if (r >= 0)
		r = store_commit(p->d->store);
	if (r < 0)
		store_rollback(p->d->store);
	if (r == -EEXIST) {
		api_reply_err(p->c, ERR_CONFLICT,
		              "the email '%s' already has an account; log in, or choose another",
		              p->a.email);
		return;
	}
	if (r < 0) {
		reply_store_failed(p->c, r);
		return;
	}
	if (!*p->who.cred)
		log_info("accounts: user '%s' (%s) registered from %s", made.email, made.id,
		         p->peer);
	else
		log_info("accounts: %s '%s' (%s) created by %s", role_to_string(made.role),
		         made.email, made.id, by_whom(&p->who));
	api_reply_json(p->c, 201, user_json(p->d, &made));
}

/* POST /v1/auth/register and POST /v1/users: checked here, hashed on the pool, made then. */
static void
create_account(struct api_call *call, bool by_admin)
{
	static const char *const user_fields[] = { "email", "password", NULL };
	static const char *const admin_fields[] = { "email", "password", "role", "caps", NULL };
	struct pending *p;
	struct account existing;
	const char *pw;
	size_t pwlen;
	int r;

	if (!only_fields(call, by_admin ? admin_fields : user_fields))
		return;
	p = calloc(1, sizeof(*p));
	if (!p) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	p->a = (struct account){
		.role = ROLE_USER, .max_sandboxes = -1, .max_cpus = -1, .max_memory_mb = -1
	};
	if (email_field(call, p->a.email) < 0 || password_field(call, true, &pw, &pwlen) < 0 ||
	    (by_admin && (role_field(call, &p->a.role) < 0 || caps_field(call, &p->a) < 0))) {
		free(p);
		return;
	}
	/* said before the slow hash; the insert checks again */
	r = account_get_by_email(call->d->store, p->a.email, &existing, NULL);
	if (r != -ENOENT) {
		if (r == 0)
			api_reply_err(call->c, ERR_CONFLICT,
			              "the email '%s' already has an account; log in, or choose "
			              "another",
			              p->a.email);
		else
			reply_store_failed(call->c, r);
		free(p);
		return;
	}
	p->finish = create_finish;
	(void)pending_start(call, p, PW_HASH, pw, pwlen, NULL);
}

void
api_auth_register(struct api_call *call)
{
	struct accounts *accts = call->d->accounts;
	char peer[64];
	unsigned wait;

	/* the route exists only with --registration on (api.c); it never makes an admin. Each
	 * attempt counts against the address (five an hour): one client cannot fill the store,
	 * or the hashing queue everyone's logins wait in */
	peer_key(call->c, peer);
	wait = ratelimit_check(accts->register_by_peer, peer, now_unix_ms());
	if (wait > 0) {
		_cleanup_free_ char *hdr = strdup_printf("Retry-After: %u\r\n", wait);
		api_reply_err_headers(
		        call->c, ERR_RATE_LIMITED, hdr,
		        "too many registrations from this address; retry in %u seconds", wait);
		return;
	}
	(void)ratelimit_fail(accts->register_by_peer, peer, now_unix_ms());
	create_account(call, false);
}

/* ---- /v1/keys ---- */

static int
add_key(const struct account_key *k, void *data)
{
	char created[32], used[32];
	json_t *j;

	format_rfc3339(k->created_at, created);
	format_rfc3339(k->last_used_at, used);
	j = json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", k->id, "name", k->name, "prefix",
	              k->prefix, "created_at", created, "last_used_at",
	              k->last_used_at ? json_string(used) : json_null());
	return j && json_array_append_new(data, j) == 0 ? 0 : -ENOMEM;
}

void
api_key_list(struct api_call *call)
{
	json_t *keys;
	int r;

	if (!require_user(call))
		return;
	keys = json_array();
	if (!keys) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	r = account_key_list(call->d->store, call->who.user_id, add_key, keys);
	if (r < 0) {
		json_decref(keys);
		reply_store_failed(call->c, r);
		return;
	}
	api_reply_json(call->c, 200, json_pack("{s:o}", "keys", keys));
}

void
api_key_create(struct api_call *call)
{
	static const char *const fields[] = { "name", NULL };
	struct account_key k;
	const char *name;
	char created[32];
	size_t n;
	json_t *j;
	int r;

	if (!require_user(call) || !only_fields(call, fields))
		return;
	r = string_field(call, "name", &name, &n);
	if (r <= 0) {
		if (r == 0)
			api_reply_err(call->c, ERR_INVALID,
			              "'name' is required: say where the key will be used");
		return;
	}
	if (n == 0 || n > ACCOUNT_KEY_NAME_MAX || strlen(name) != n) {
		api_reply_err(call->c, ERR_INVALID, "'name' must be 1 to %d bytes long",
		              ACCOUNT_KEY_NAME_MAX);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) {
			api_reply_err(call->c, ERR_INVALID,
			              "'name' may not hold control characters");
			return;
		}
	r = account_key_create(call->d->store, call->who.user_id, name, now_unix_ms(), &k);
	if (r == -EDQUOT) {
		api_reply_err(call->c, ERR_REFUSED,
		              "a user has at most %d API keys; delete one you no longer use",
		              ACCOUNT_KEYS_MAX);
		return;
	}
	if (r < 0) {
		reply_store_failed(call->c, r);
		return;
	}
	log_info("accounts: '%s' made API key %s", call->who.name, k.id);
	format_rfc3339(k.created_at, created);
	/* the one time the key is shown */
	j = json_pack("{s:s, s:s, s:s, s:s, s:s}", "id", k.id, "name", k.name, "key", k.key,
	              "prefix", k.prefix, "created_at", created);
	explicit_bzero(k.key, sizeof(k.key));
	api_reply_json(call->c, 201, j);
}

void
api_key_delete(struct api_call *call)
{
	char cred[64];
	int r;

	if (!require_user(call))
		return;
	r = strlen(call->ref) == ACCOUNT_KEY_ID_LEN
	            ? account_key_delete(call->d->store, call->who.user_id, call->ref)
	            : -ENOENT;
	if (r == -ENOENT) {
		api_reply_err(call->c, ERR_NOT_FOUND, "no API key '%s'", call->ref);
		return;
	}
	if (r < 0) {
		reply_store_failed(call->c, r);
		return;
	}
	/* what the key holds open (streams, attaches) ends before the answer */
	snprintf(cred, sizeof(cred), "key:%.*s", ACCOUNT_KEY_ID_LEN, call->ref);
	server_close_credential(call->d->server, cred, NULL, call->c);
	log_info("accounts: '%s' revoked API key %s", call->who.name, call->ref);
	conn_reply(call->c, 204, NULL, NULL, 0, NULL);
}

/* ---- /v1/users ---- */

struct user_list {
	struct sandboxd *d;
	json_t *users;
};

static int
add_user(const struct account *a, void *data)
{
	struct user_list *l = data;
	json_t *j = user_json(l->d, a);

	return j && json_array_append_new(l->users, j) == 0 ? 0 : -ENOMEM;
}

void
api_user_list(struct api_call *call)
{
	struct user_list l = { .d = call->d };
	int r;

	if (!require_admin(call))
		return;
	l.users = json_array();
	if (!l.users) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	r = account_list(call->d->store, add_user, &l);
	if (r < 0) {
		json_decref(l.users);
		reply_store_failed(call->c, r);
		return;
	}
	api_reply_json(call->c, 200, json_pack("{s:o}", "users", l.users));
}

void
api_user_create(struct api_call *call)
{
	if (require_admin(call))
		create_account(call, true);
}

/* The user named by {id}, or answers 404. */
static int
target_user(struct api_call *call, struct account *ret)
{
	int r = account_get(call->d->store, call->ref, ret);

	if (r == -ENOENT)
		api_reply_err(call->c, ERR_NOT_FOUND, "no user '%s'", call->ref);
	else if (r < 0)
		reply_store_failed(call->c, r);
	return r;
}

/* Writes a patch; ends the user's sessions and connections when it takes power away. */
static void
patch_apply(struct sandboxd *d, struct conn *c, const struct principal *who, struct account *a,
            unsigned changes, const char *hash)
{
	struct account now;
	int r;

	/* the row as it is now, with only the asked-for fields changed, all in one transaction:
	 * a new password never stands while the sessions it should end go on */
	r = store_begin(d->store);
	if (r >= 0)
		r = account_get(d->store, a->id, &now);
	if (r >= 0) {
		if (changes & CHANGE_ROLE)
			now.role = a->role;
		if (changes & CHANGE_DISABLED)
			now.disabled = a->disabled;
		if (changes & CHANGE_CAPS) {
			now.max_sandboxes = a->max_sandboxes;
			now.max_cpus = a->max_cpus;
			now.max_memory_mb = a->max_memory_mb;
		}
		r = account_update(d->store, &now);
	}
	if (r >= 0 && hash)
		r = account_set_password(d->store, now.id, hash);
	if (r >= 0 && (hash || ((changes & CHANGE_DISABLED) && now.disabled) ||
	               ((changes & CHANGE_ROLE) && now.role == ROLE_USER)))
		r = account_sessions_delete_user(d->store, now.id);
	if (r >= 0)
		r = store_commit(d->store);
	if (r < 0)
		store_rollback(d->store);
	if (r == -ENOENT) {
		api_reply_err(c, ERR_NOT_FOUND, "no user '%s'", a->id);
		return;
	}
	if (r < 0) {
		reply_store_failed(c, r);
		return;
	}
	if (hash || (changes & (CHANGE_DISABLED | CHANGE_ROLE)))
		server_close_credential(d->server, NULL, now.email, c);
	log_info("accounts: user '%s' (%s) changed by %s%s%s%s%s", now.email, now.id, by_whom(who),
	         changes & CHANGE_ROLE ? "; role" : "",
	         changes & CHANGE_DISABLED ? "; disabled" : "",
	         changes & CHANGE_CAPS ? "; caps" : "", hash ? "; password" : "");
	api_reply_json(c, 200, user_json(d, &now));
}

static void
patch_finish(struct pending *p, struct pw_job *j)
{
	if (j->result < 0) {
		api_reply_err(p->c, ERR_INTERNAL, "hashing the password failed: %s",
		              strerror(-j->result));
		return;
	}
	patch_apply(p->d, p->c, &p->who, &p->a, p->changes, j->hash);
}

void
api_user_patch(struct api_call *call)
{
	static const char *const fields[] = { "role", "password", "disabled", "caps", NULL };
	struct account a;
	struct pending *p;
	unsigned changes = 0;
	json_t *disabled;
	const char *pw = NULL;
	size_t pwlen = 0;
	int r;

	if (!require_admin(call) || !only_fields(call, fields) || target_user(call, &a) < 0)
		return;
	r = role_field(call, &a.role);
	if (r < 0)
		return;
	if (r > 0)
		changes |= CHANGE_ROLE;
	disabled = json_object_get(call->body, "disabled");
	if (disabled) {
		if (!json_is_boolean(disabled)) {
			api_reply_err(call->c, ERR_INVALID, "'disabled' must be true or false");
			return;
		}
		a.disabled = json_is_true(disabled);
		changes |= CHANGE_DISABLED;
	}
	r = caps_field(call, &a);
	if (r < 0)
		return;
	if (r > 0)
		changes |= CHANGE_CAPS;
	r = password_field(call, false, &pw, &pwlen);
	if (r < 0)
		return;
	if (r > 0)
		changes |= CHANGE_PASSWORD;
	/* an admin cannot lock themselves out; another admin or the operator can */
	if (streq(a.id, call->who.user_id) && (((changes & CHANGE_ROLE) && a.role != ROLE_ADMIN) ||
	                                       ((changes & CHANGE_DISABLED) && a.disabled))) {
		api_reply_err(call->c, ERR_REFUSED,
		              "you cannot demote or disable your own account; ask another admin "
		              "or use the operator token");
		return;
	}
	if (!(changes & CHANGE_PASSWORD)) {
		patch_apply(call->d, call->c, &call->who, &a, changes, NULL);
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	p->a = a;
	p->changes = changes;
	p->finish = patch_finish;
	(void)pending_start(call, p, PW_HASH, pw, pwlen, NULL);
}

void
api_user_delete(struct api_call *call)
{
	struct sandbox_usage u;
	struct account a;
	struct list_node *n;
	unsigned owned = 0;
	int r;

	if (!require_admin(call) || target_user(call, &a) < 0)
		return;
	if (streq(a.id, call->who.user_id)) {
		api_reply_err(call->c, ERR_REFUSED,
		              "you cannot delete your own account; ask another admin or use the "
		              "operator token");
		return;
	}
	/* every sandbox in memory is one not terminated, and creates waiting for an image
	 * count too */
	LIST_FOREACH (n, &call->d->reg.all)
		if (streq(list_entry(n, struct sandbox, by_created)->owner, a.email))
			owned++;
	api_usage(call->d, a.email, &u);
	if (owned > 0 || u.sandboxes > 0) {
		api_reply_err(call->c, ERR_CONFLICT,
		              "user '%s' still owns %u sandboxes that are not terminated; delete "
		              "them first",
		              a.email, MAX(owned, u.sandboxes));
		return;
	}
	r = account_delete(call->d->store, a.id);
	if (r < 0 && r != -ENOENT) {
		reply_store_failed(call->c, r);
		return;
	}
	/* their terminated sandboxes, still listed, are no one's now (account_delete); their
	 * volumes go with them (none is attached: they own no sandbox), before any account made
	 * later with the same email could see them */
	ended_reload_owner(call->d, a.email);
	volumes_delete_owner(call->d, a.email);
	server_close_credential(call->d->server, NULL, a.email, call->c);
	log_info("accounts: user '%s' (%s) deleted by %s", a.email, a.id, by_whom(&call->who));
	conn_reply(call->c, 204, NULL, NULL, 0, NULL);
}
