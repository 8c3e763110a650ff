/* accounts.c: users, sessions and API keys in the store; password hashing on a pool of
 * threads; the login rate limiter; the Cookie and key parsers. See accounts.h. */
#include <ctype.h>
#include <pthread.h>
#include <sodium.h>
#include <sys/eventfd.h>
#include "accounts.h"
#include "base64.h"
#include "hashmap.h"
#include "log.h"
#include "loop.h"
#include "store-accounts.h"
#include "store.h"
#include "util.h"

const char *
role_to_string(enum role r)
{
	return r == ROLE_ADMIN ? "admin" : "user";
}

#define PW_OPSLIMIT 2
#define PW_MEMLIMIT (64u << 20)
#define KEY_USE_EVERY_MS 60000 /* last_used_at is written at most this often */

/* ---- checks ---- */

const char *
account_email_normalise(const char *in, char out[static ACCOUNT_EMAIL_MAX + 1])
{
	size_t n = strlen(in), at = SIZE_MAX;

	if (n == 0)
		return "the email is empty";
	if (n > ACCOUNT_EMAIL_MAX)
		return "the email is longer than 254 bytes";
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)in[i];
		if (ch <= 0x20 || ch >= 0x7f)
			return "the email may not hold spaces, control or non-ASCII characters";
		if (ch == '@') {
			if (at != SIZE_MAX)
				return "the email must hold exactly one '@'";
			at = i;
		}
		out[i] = (char)tolower(ch);
	}
	out[n] = '\0';
	if (at == SIZE_MAX || at == 0 || at == n - 1)
		return "the email must look like name@example.com";
	return NULL;
}

const char *
account_password_check(const char *pw, size_t len)
{
	if (len < ACCOUNT_PASSWORD_MIN)
		return "the password must be at least 10 bytes long";
	if (len > ACCOUNT_PASSWORD_MAX)
		return "the password must be at most 1024 bytes long";
	if (memchr(pw, '\0', len))
		return "the password may not hold a NUL byte";
	return NULL;
}

/* ---- passwords ---- */

const char account_dummy_hash[] = "$argon2id$v=19$m=65536,t=2,p=1$9Muf/vCDvZ+DuNrRZuN7Jw$3U6wG/"
                                  "YW/4BpbiCagsAWTQhNWzhZdR7fX1nfem4RfuU";

static int
sodium_ready(void)
{
	/* thread-safe and idempotent; only a broken libsodium fails */
	return sodium_init() < 0 ? -EIO : 0;
}

int
account_hash_password(const char *pw, size_t len, char out[static ACCOUNT_HASH_MAX])
{
	if (sodium_ready() < 0)
		return -EIO;
	if (crypto_pwhash_str_alg(out, pw, len, PW_OPSLIMIT, PW_MEMLIMIT,
	                          crypto_pwhash_ALG_ARGON2ID13) != 0)
		return -ENOMEM;
	return 0;
}

bool
account_verify_password(const char *hash, const char *pw, size_t len)
{
	if (sodium_ready() < 0 || !str_has_prefix(hash, "$argon2id$"))
		return false;
	return crypto_pwhash_str_verify(hash, pw, len) == 0;
}

/* ---- parsers ---- */

static bool
is_lower_hex(int ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
}

static const char *
trim(const char *p, const char *end, const char **ret_end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	*ret_end = end;
	return p;
}

int
cookie_each(const char *header, const char *name,
            int (*fn)(const char *value, size_t len, void *ctx), void *ctx)
{
	size_t nlen = strlen(name);
	const char *p = header;
	int n = 0;

	while (*p) {
		const char *end = strchr(p, ';'), *eq, *k, *kend, *v, *vend;

		if (!end)
			end = p + strlen(p);
		eq = memchr(p, '=', (size_t)(end - p));
		if (eq) {
			k = trim(p, eq, &kend);
			if ((size_t)(kend - k) == nlen && memcmp(k, name, nlen) == 0) {
				int r;
				v = trim(eq + 1, end, &vend);
				if (vend - v >= 2 && *v == '"' && vend[-1] == '"') {
					v++;
					vend--;
				}
				r = fn(v, (size_t)(vend - v), ctx);
				if (r < 0)
					return r;
				n++;
			}
		}
		p = *end ? end + 1 : end;
	}
	return n;
}

struct cookie_copy {
	char *out;
	size_t size;
	bool found;
};

static int
cookie_copy_one(const char *value, size_t len, void *ctx)
{
	struct cookie_copy *c = ctx;

	if (c->found)
		return -EEXIST;
	if (len >= c->size)
		return -E2BIG;
	memcpy(c->out, value, len);
	c->out[len] = '\0';
	c->found = true;
	return 0;
}

int
cookie_find(const char *header, const char *name, char *out, size_t size)
{
	struct cookie_copy c = { .out = out, .size = size };
	int r = cookie_each(header, name, cookie_copy_one, &c);

	return r < 0 ? r : c.found;
}

/* Frees a buf that held a secret, overwriting it first. */
static void
buf_free_secret(struct buf *b)
{
	if (b->data)
		sodium_memzero(b->data, b->cap);
	buf_free(b);
}

static int
secret_decode(const char *b64, uint8_t ret[static 32])
{
	_cleanup_(buf_free_secret) struct buf raw = BUF_INIT(32);

	if (strnlen(b64, ACCOUNT_SECRET_B64_LEN + 1) != ACCOUNT_SECRET_B64_LEN)
		return -EINVAL;
	/* strict, refusing non-canonical trailing bits: one secret has one spelling */
	if (base64url_decode(&raw, b64, ACCOUNT_SECRET_B64_LEN) < 0 || raw.len != 32)
		return -EINVAL;
	memcpy(ret, raw.data, 32);
	return 0;
}

static int
id_part(const char *s, size_t len, char *out)
{
	for (size_t i = 0; i < len; i++) {
		if (!is_lower_hex((unsigned char)s[i]))
			return -EINVAL;
		out[i] = s[i];
	}
	out[len] = '\0';
	return 0;
}

int
api_key_parse(const char *key, char ret_id[static ACCOUNT_KEY_ID_LEN + 1],
              uint8_t ret_secret[static 32])
{
	if (strnlen(key, ACCOUNT_KEY_LEN + 1) != ACCOUNT_KEY_LEN || !str_has_prefix(key, "sbk_") ||
	    key[4 + ACCOUNT_KEY_ID_LEN] != '_')
		return -EINVAL;
	if (id_part(key + 4, ACCOUNT_KEY_ID_LEN, ret_id) < 0)
		return -EINVAL;
	return secret_decode(key + 4 + ACCOUNT_KEY_ID_LEN + 1, ret_secret);
}

int
session_cookie_parse(const char *value, char ret_id[static ACCOUNT_SESSION_ID_LEN + 1],
                     uint8_t ret_secret[static 32])
{
	if (strnlen(value, ACCOUNT_COOKIE_VALUE_LEN + 1) != ACCOUNT_COOKIE_VALUE_LEN ||
	    value[ACCOUNT_SESSION_ID_LEN] != '.')
		return -EINVAL;
	if (id_part(value, ACCOUNT_SESSION_ID_LEN, ret_id) < 0)
		return -EINVAL;
	return secret_decode(value + ACCOUNT_SESSION_ID_LEN + 1, ret_secret);
}

/* A fresh secret: its base64url text (44 bytes with the NUL) and its SHA-256. */
static int
new_secret(char b64[static ACCOUNT_SECRET_B64_LEN + 1], uint8_t *sha)
{
	_cleanup_(buf_free_secret) struct buf text = BUF_INIT(ACCOUNT_SECRET_B64_LEN);
	uint8_t raw[32];
	int r = random_bytes(raw, sizeof(raw));

	if (r >= 0)
		r = base64url_encode(&text, raw, sizeof(raw));
	if (r >= 0) {
		memcpy(b64, text.data, ACCOUNT_SECRET_B64_LEN + 1);
		if (sha)
			crypto_hash_sha256(sha, raw, sizeof(raw));
	}
	sodium_memzero(raw, sizeof(raw));
	return r;
}

/* ---- the tables (store-accounts.h runs the statements) ---- */

/* A user as the store returns it; the hash (ACCOUNT_HASH_MAX bytes) when ret_hash is not
 * NULL. */
static void
account_from_row(const struct store_user *u, struct account *a, char *ret_hash)
{
	*a = (struct account){ 0 };
	snprintf(a->id, sizeof(a->id), "%s", u->id ? u->id : "");
	snprintf(a->email, sizeof(a->email), "%s", u->email ? u->email : "");
	a->role = u->role && streq(u->role, "admin") ? ROLE_ADMIN : ROLE_USER;
	a->disabled = u->disabled;
	a->created_at = u->created_at;
	a->max_sandboxes = u->max_sandboxes;
	a->max_cpus = u->max_cpus;
	a->max_memory_mb = u->max_memory_mb;
	if (ret_hash)
		snprintf(ret_hash, ACCOUNT_HASH_MAX, "%s",
		         u->password_hash ? u->password_hash : "");
}

int
account_create(struct store *s, const char *email, enum role role, const char *hash,
               struct account *ret)
{
	struct account a = { .role = role,
		             .created_at = now_unix_ms(),
		             .max_sandboxes = -1,
		             .max_cpus = -1,
		             .max_memory_mb = -1 };
	int r = -EADDRINUSE;

	snprintf(a.email, sizeof(a.email), "%s", email);
	for (int tries = 0; tries < 3 && r == -EADDRINUSE; tries++) {
		memcpy(a.id, "usr_", 4);
		r = random_hex(a.id + 4, 8);
		if (r < 0)
			return r;
		r = store_user_insert(s, &(struct store_user){ .id = a.id,
		                                               .email = a.email,
		                                               .role = role_to_string(role),
		                                               .password_hash = hash,
		                                               .created_at = a.created_at });
	}
	if (r < 0)
		return r == -EADDRINUSE ? -EIO : r;
	if (ret)
		*ret = a;
	return 0;
}

struct user_out {
	struct account *a;
	char *hash;
};

static int
user_out(const struct store_user *u, void *data)
{
	struct user_out *out = data;

	account_from_row(u, out->a, out->hash);
	return 0;
}

int
account_get(struct store *s, const char *id, struct account *ret)
{
	return store_user_get(s, id, user_out, &(struct user_out){ .a = ret });
}

int
account_get_by_email(struct store *s, const char *email, struct account *ret, char *ret_hash)
{
	return store_user_get_by_email(s, email, user_out,
	                               &(struct user_out){ .a = ret, .hash = ret_hash });
}

struct user_list {
	int (*fn)(const struct account *a, void *data);
	void *data;
};

static int
user_list_one(const struct store_user *u, void *data)
{
	struct user_list *l = data;
	struct account a;

	account_from_row(u, &a, NULL);
	return l->fn(&a, l->data);
}

int
account_list(struct store *s, int (*fn)(const struct account *a, void *data), void *data)
{
	return store_user_list(s, user_list_one, &(struct user_list){ .fn = fn, .data = data });
}

int
account_update(struct store *s, const struct account *a)
{
	return store_user_update(s, &(struct store_user){ .id = a->id,
	                                                  .role = role_to_string(a->role),
	                                                  .disabled = a->disabled,
	                                                  .max_sandboxes = a->max_sandboxes,
	                                                  .max_cpus = a->max_cpus,
	                                                  .max_memory_mb = a->max_memory_mb });
}

int
account_set_password(struct store *s, const char *id, const char *hash)
{
	return store_user_set_password(s, id, hash);
}

int
account_delete(struct store *s, const char *id)
{
	_cleanup_free_ char *gone = NULL;
	struct account a;
	int r;

	r = account_get(s, id, &a);
	if (r < 0)
		return r;
	/* their ended sandboxes stop being theirs: an account made later with the same email
	 * is someone else, and must not see them (a space is in no email, so no one can) */
	gone = strdup_printf("%s (deleted %s)", a.email, a.id);
	if (!gone)
		return -ENOMEM;
	r = store_begin(s);
	if (r < 0)
		return r;
	r = store_user_delete(s, id);
	if (r >= 0)
		r = store_disown_ended(s, a.email, gone);
	if (r >= 0)
		r = store_commit(s);
	if (r < 0) {
		store_rollback(s);
		return r;
	}
	return 0;
}

struct user_caps
account_caps(const struct account *a, const struct user_caps *defaults)
{
	return (struct user_caps){
		.max_sandboxes = a->max_sandboxes >= 0 ? (unsigned)a->max_sandboxes
		                                       : defaults->max_sandboxes,
		.max_cpus = a->max_cpus >= 0 ? (unsigned)a->max_cpus : defaults->max_cpus,
		.max_memory_mb = a->max_memory_mb >= 0 ? (unsigned)a->max_memory_mb
		                                       : defaults->max_memory_mb,
	};
}

/* ---- sessions ---- */

int
account_session_create(struct store *s, const char *user_id, int64_t now_ms,
                       struct account_session *ret)
{
	struct account_session ses = { .expires_at = now_ms + ACCOUNT_SESSION_TTL_MS };
	char secret[ACCOUNT_SECRET_B64_LEN + 1];
	uint8_t sha[32];
	int r;

	r = random_hex(ses.id, ACCOUNT_SESSION_ID_LEN / 2);
	if (r >= 0)
		r = new_secret(secret, sha);
	if (r >= 0)
		r = new_secret(ses.csrf, NULL);
	if (r < 0)
		return r;
	snprintf(ses.cookie, sizeof(ses.cookie), "%s.%s", ses.id, secret);
	sodium_memzero(secret, sizeof(secret));

	/* every user's expired sessions go now: a login is rare, the table small */
	r = store_sessions_expire(s, now_ms);
	if (r >= 0)
		r = store_session_insert(s,
		                         &(struct store_session){ .id = ses.id,
		                                                  .user_id = user_id,
		                                                  .secret_sha256 = sha,
		                                                  .secret_sha256_len = sizeof(sha),
		                                                  .csrf_token = ses.csrf,
		                                                  .created_at = now_ms,
		                                                  .expires_at = ses.expires_at });
	/* a user keeps at most ACCOUNT_SESSIONS_MAX: the oldest go */
	if (r >= 0)
		r = store_sessions_trim(s, user_id, ACCOUNT_SESSIONS_MAX);
	if (r < 0) {
		/* the cookie never leaves: not even on this stack */
		sodium_memzero(&ses, sizeof(ses));
		return r != -EADDRINUSE ? r : -EIO;
	}
	*ret = ses;
	sodium_memzero(&ses, sizeof(ses));
	return 0;
}

/* The stored SHA-256 against the presented secret, in constant time. */
static bool
secret_matches(const void *stored, size_t stored_len, const uint8_t secret[static 32])
{
	uint8_t sha[32];
	bool ok;

	crypto_hash_sha256(sha, secret, 32);
	ok = stored && stored_len == 32 && sodium_memcmp(sha, stored, 32) == 0;
	sodium_memzero(sha, sizeof(sha));
	return ok;
}

/* What a credential lookup hands its row callback, and what it gets back: the row counts
 * only when its stored SHA-256 matches secret. */
struct lookup {
	const uint8_t *secret;
	bool matched;
	struct account user;
	struct account_session ses;
	int64_t last_used;
};

static int
session_row(const struct store_session *row, const struct store_user *u, void *data)
{
	struct lookup *l = data;

	if (!secret_matches(row->secret_sha256, row->secret_sha256_len, l->secret))
		return 0;
	l->matched = true;
	snprintf(l->ses.csrf, sizeof(l->ses.csrf), "%s", row->csrf_token ? row->csrf_token : "");
	l->ses.expires_at = row->expires_at;
	account_from_row(u, &l->user, NULL);
	return 0;
}

/* The outcome of a lookup, with the presented secret wiped: 0 on a row whose secret matched,
 * -EACCES when there is no such row or the secret is wrong, -EIO. */
static int
lookup_done(int r, struct lookup *l, uint8_t secret[static 32])
{
	sodium_memzero(secret, 32);
	if (r == -ENOENT || (r >= 0 && !l->matched))
		return -EACCES;
	return r < 0 ? r : 0;
}

int
account_session_lookup(struct store *s, const char *cookie, int64_t now_ms,
                       struct account *ret_user, struct account_session *ret_session)
{
	struct lookup l = { 0 };
	uint8_t secret[32];
	int r;

	if (session_cookie_parse(cookie, l.ses.id, secret) < 0)
		return -EACCES;
	l.secret = secret;
	r = lookup_done(store_session_get(s, l.ses.id, session_row, &l), &l, secret);
	if (r < 0)
		return r;
	if (l.ses.expires_at <= now_ms) {
		(void)account_session_delete(s, l.ses.id);
		return -EACCES;
	}
	if (l.user.disabled)
		return -EACCES;
	*ret_user = l.user;
	*ret_session = l.ses;
	return 0;
}

int
account_session_delete(struct store *s, const char *id)
{
	return store_session_delete(s, id);
}

int
account_sessions_delete_user(struct store *s, const char *user_id)
{
	return store_sessions_delete_user(s, user_id);
}

/* ---- API keys ---- */

int
account_key_create(struct store *s, const char *user_id, const char *name, int64_t now_ms,
                   struct account_key *ret)
{
	struct account_key k = { .created_at = now_ms };
	char secret[ACCOUNT_SECRET_B64_LEN + 1];
	uint8_t sha[32];
	int64_t n;
	int r;

	n = store_key_count(s, user_id);
	if (n < 0)
		return -EIO;
	if (n >= ACCOUNT_KEYS_MAX)
		return -EDQUOT;
	snprintf(k.name, sizeof(k.name), "%s", name);
	r = -EADDRINUSE;
	for (int tries = 0; tries < 3 && r == -EADDRINUSE; tries++) {
		r = random_hex(k.id, ACCOUNT_KEY_ID_LEN / 2);
		if (r >= 0)
			r = new_secret(secret, sha);
		if (r < 0)
			return r;
		snprintf(k.key, sizeof(k.key), "sbk_%s_%s", k.id, secret);
		sodium_memzero(secret, sizeof(secret));
		memcpy(k.prefix, k.key, ACCOUNT_KEY_PREFIX_LEN);
		k.prefix[ACCOUNT_KEY_PREFIX_LEN] = '\0';
		r = store_key_insert(s, &(struct store_key){ .id = k.id,
		                                             .user_id = user_id,
		                                             .name = k.name,
		                                             .prefix = k.prefix,
		                                             .secret_sha256 = sha,
		                                             .secret_sha256_len = sizeof(sha),
		                                             .created_at = now_ms });
	}
	if (r < 0) {
		sodium_memzero(&k, sizeof(k));
		return r == -EADDRINUSE ? -EIO : r;
	}
	*ret = k;
	sodium_memzero(&k, sizeof(k));
	return 0;
}

static int
key_row(const struct store_key *row, const struct store_user *u, void *data)
{
	struct lookup *l = data;

	if (!secret_matches(row->secret_sha256, row->secret_sha256_len, l->secret))
		return 0;
	l->matched = true;
	l->last_used = row->last_used_at;
	account_from_row(u, &l->user, NULL);
	return 0;
}

int
account_key_lookup(struct store *s, const char *key, int64_t now_ms, struct account *ret_user,
                   char ret_key_id[static ACCOUNT_KEY_ID_LEN + 1])
{
	char id[ACCOUNT_KEY_ID_LEN + 1];
	struct lookup l = { 0 };
	uint8_t secret[32];
	int r;

	if (api_key_parse(key, id, secret) < 0)
		return -EACCES;
	l.secret = secret;
	r = lookup_done(store_key_get(s, id, key_row, &l), &l, secret);
	if (r < 0)
		return r;
	if (l.user.disabled)
		return -EACCES;
	if (now_ms - l.last_used >= KEY_USE_EVERY_MS)
		(void)store_key_touch(s, id, now_ms); /* a missed note of use never refuses */
	*ret_user = l.user;
	memcpy(ret_key_id, id, sizeof(id));
	return 0;
}

struct key_list {
	int (*fn)(const struct account_key *k, void *data);
	void *data;
};

static int
key_list_one(const struct store_key *row, void *data)
{
	struct key_list *l = data;
	struct account_key k = { 0 };

	snprintf(k.id, sizeof(k.id), "%s", row->id ? row->id : "");
	snprintf(k.name, sizeof(k.name), "%s", row->name ? row->name : "");
	snprintf(k.prefix, sizeof(k.prefix), "%s", row->prefix ? row->prefix : "");
	k.created_at = row->created_at;
	k.last_used_at = row->last_used_at;
	return l->fn(&k, l->data);
}

int
account_key_list(struct store *s, const char *user_id,
                 int (*fn)(const struct account_key *k, void *data), void *data)
{
	return store_key_list(s, user_id, key_list_one,
	                      &(struct key_list){ .fn = fn, .data = data });
}

int
account_key_delete(struct store *s, const char *user_id, const char *id)
{
	return store_key_delete(s, user_id, id);
}

/* ---- the rate limiter ---- */

#define RATELIMIT_MAX 16

struct rl_entry {
	struct list_node link; /* the least recently failed first */
	int64_t times[RATELIMIT_MAX];
	unsigned n, next; /* a ring of the latest failures */
	char key[];
};

struct ratelimit {
	unsigned max, capacity, count;
	int64_t window_ms;
	struct hashmap map;
	struct list_node lru;
};

struct ratelimit *
ratelimit_new(unsigned max, int64_t window_ms, unsigned capacity)
{
	struct ratelimit *rl;

	if (max == 0 || max > RATELIMIT_MAX || capacity == 0)
		return NULL;
	rl = calloc(1, sizeof(*rl));
	if (!rl)
		return NULL;
	rl->max = max;
	rl->window_ms = window_ms;
	rl->capacity = capacity;
	list_init(&rl->lru);
	return rl;
}

static void
rl_drop(struct ratelimit *rl, struct rl_entry *e)
{
	hashmap_remove(&rl->map, e->key);
	list_remove(&e->link);
	free(e);
	rl->count--;
}

struct ratelimit *
ratelimit_free(struct ratelimit *rl)
{
	if (!rl)
		return NULL;
	while (!list_empty(&rl->lru))
		rl_drop(rl, list_entry(rl->lru.next, struct rl_entry, link));
	hashmap_clear(&rl->map);
	free(rl);
	return NULL;
}

unsigned
ratelimit_check(struct ratelimit *rl, const char *key, int64_t now_ms)
{
	struct rl_entry *e = hashmap_get(&rl->map, key);
	int64_t oldest;

	if (!e || e->n < rl->max)
		return 0;
	/* the ring is full: the oldest of the latest `max` failures decides */
	oldest = e->times[e->next];
	if (oldest + rl->window_ms <= now_ms)
		return 0;
	return (unsigned)((oldest + rl->window_ms - now_ms + 999) / 1000);
}

int
ratelimit_fail(struct ratelimit *rl, const char *key, int64_t now_ms)
{
	struct rl_entry *e = hashmap_get(&rl->map, key);

	if (!e) {
		size_t n = strlen(key);
		if (rl->count >= rl->capacity)
			rl_drop(rl, list_entry(rl->lru.next, struct rl_entry, link));
		e = calloc(1, sizeof(*e) + n + 1);
		if (!e)
			return -ENOMEM;
		memcpy(e->key, key, n + 1);
		if (hashmap_put(&rl->map, e->key, e) < 0) {
			free(e);
			return -ENOMEM;
		}
		rl->count++;
	} else {
		list_remove(&e->link);
	}
	list_push_back(&rl->lru, &e->link);
	e->times[e->next] = now_ms;
	e->next = (e->next + 1) % rl->max;
	if (e->n < rl->max)
		e->n++;
	return 0;
}

void
ratelimit_clear(struct ratelimit *rl, const char *key)
{
	struct rl_entry *e = hashmap_get(&rl->map, key);

	if (e)
		rl_drop(rl, e);
}

void
ratelimit_forgive(struct ratelimit *rl, const char *key)
{
	struct rl_entry *e = hashmap_get(&rl->map, key);

	if (!e)
		return;
	if (e->n <= 1) {
		rl_drop(rl, e);
		return;
	}
	e->next = (e->next + rl->max - 1) % rl->max;
	e->n--;
}

unsigned
ratelimit_count(const struct ratelimit *rl)
{
	return rl->count;
}

/* ---- the hashing pool ---- */

struct pool {
	struct loop_source src;
	int efd;
	pthread_t threads[ACCOUNTS_HASH_THREADS];
	unsigned nthreads;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct list_node waiting, finished; /* guarded by lock */
	unsigned in_flight;                 /* waiting or being worked on; guarded by lock */
	bool quit;
};

static void
job_free(struct pw_job *j)
{
	if (j->password) {
		sodium_memzero(j->password, j->password_len);
		free(j->password);
	}
	sodium_memzero(j->hash, sizeof(j->hash));
	free(j);
}

static void
job_run(struct pw_job *j)
{
	if (j->op == PW_HASH)
		j->result = account_hash_password(j->password, j->password_len, j->hash);
	else
		j->result = account_verify_password(j->hash, j->password, j->password_len)
		                    ? 0
		                    : -EACCES;
	sodium_memzero(j->password, j->password_len);
}

static void *
pool_thread(void *data)
{
	struct pool *p = data;
	const uint64_t one = 1;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct pw_job *j;

		while (!p->quit && list_empty(&p->waiting))
			pthread_cond_wait(&p->wake, &p->lock);
		if (p->quit)
			break;
		j = list_entry(p->waiting.next, struct pw_job, link);
		list_remove(&j->link);
		pthread_mutex_unlock(&p->lock);
		job_run(j);
		pthread_mutex_lock(&p->lock);
		list_push_back(&p->finished, &j->link);
		p->in_flight--;
		(void)!write(p->efd, &one, sizeof(one));
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* On the loop: hands each finished job to its callback, then frees it. */
static void
pool_ready(struct loop_source *src _unused_, uint32_t events _unused_, void *data)
{
	struct pool *p = data;
	struct list_node done;
	uint64_t n;

	(void)!read(p->efd, &n, sizeof(n));
	list_init(&done);
	pthread_mutex_lock(&p->lock);
	while (!list_empty(&p->finished)) {
		struct list_node *node = p->finished.next;
		list_remove(node);
		list_push_back(&done, node);
	}
	pthread_mutex_unlock(&p->lock);
	while (!list_empty(&done)) {
		struct pw_job *j = list_entry(done.next, struct pw_job, link);
		list_remove(&j->link);
		if (j->done)
			j->done(j, j->data);
		job_free(j);
	}
}

static void
free_list(struct list_node *head)
{
	while (!list_empty(head)) {
		struct pw_job *j = list_entry(head->next, struct pw_job, link);
		list_remove(&j->link);
		job_free(j);
	}
}

static struct pool *
pool_free(struct pool *p)
{
	if (!p)
		return NULL;
	pthread_mutex_lock(&p->lock);
	p->quit = true;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	free_list(&p->waiting);
	free_list(&p->finished);
	loop_remove(&p->src);
	safe_close(p->efd);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p);
	return NULL;
}
DEFINE_FREEP(struct pool, pool_free)

static int
pool_new(struct loop *loop, struct pool **ret)
{
	_cleanup_(pool_freep) struct pool *p = calloc(1, sizeof(*p));
	sigset_t all, old;
	int r;

	if (!p)
		return -ENOMEM;
	p->efd = -1;
	p->src.fd = -1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	list_init(&p->waiting);
	list_init(&p->finished);
	p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->efd < 0)
		return negative_errno();
	r = loop_add(loop, &p->src, p->efd, EPOLLIN, pool_ready, p);
	if (r < 0)
		return r;
	/* the threads take no signals: the loop's signalfd is the one place they arrive */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (; p->nthreads < ACCOUNTS_HASH_THREADS; p->nthreads++) {
		r = -pthread_create(&p->threads[p->nthreads], NULL, pool_thread, p);
		if (r < 0)
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(p);
	return 0;
}

int
accounts_submit(struct accounts *a, enum pw_op op, const char *password, size_t len,
                const char *hash, void (*done)(struct pw_job *j, void *data), void *data,
                struct pw_job **ret)
{
	struct pool *p = a->pool;
	struct pw_job *j;

	pthread_mutex_lock(&p->lock);
	if (p->in_flight >= ACCOUNTS_QUEUE_MAX) {
		pthread_mutex_unlock(&p->lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&p->lock);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->password = malloc(len + 1);
	if (!j->password) {
		free(j);
		return -ENOMEM;
	}
	memcpy(j->password, password, len);
	j->password[len] = '\0';
	j->password_len = len;
	j->op = op;
	if (hash)
		snprintf(j->hash, sizeof(j->hash), "%s", hash);
	j->done = done;
	j->data = data;
	pthread_mutex_lock(&p->lock);
	list_push_back(&p->waiting, &j->link);
	p->in_flight++;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	if (ret)
		*ret = j;
	return 0;
}

void
accounts_cancel(struct pw_job *j)
{
	/* only the loop's thread reads done, so no lock is needed */
	if (j)
		j->done = NULL;
}

int
accounts_new(struct loop *loop, struct accounts **ret)
{
	_cleanup_(accounts_freep) struct accounts *a = calloc(1, sizeof(*a));
	int r;

	if (!a)
		return -ENOMEM;
	if (sodium_ready() < 0)
		return -EIO;
	a->by_email = ratelimit_new(ACCOUNTS_LOGIN_FAILURES, ACCOUNTS_LOGIN_WINDOW_MS,
	                            ACCOUNTS_LIMITER_CAPACITY);
	a->by_peer = ratelimit_new(ACCOUNTS_LOGIN_FAILURES, ACCOUNTS_LOGIN_WINDOW_MS,
	                           ACCOUNTS_LIMITER_CAPACITY);
	a->register_by_peer = ratelimit_new(ACCOUNTS_REGISTRATIONS, ACCOUNTS_REGISTER_WINDOW_MS,
	                                    ACCOUNTS_LIMITER_CAPACITY);
	if (!a->by_email || !a->by_peer || !a->register_by_peer)
		return -ENOMEM;
	r = pool_new(loop, &a->pool);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(a);
	return 0;
}

struct accounts *
accounts_free(struct accounts *a)
{
	if (!a)
		return NULL;
	pool_free(a->pool);
	ratelimit_free(a->by_email);
	ratelimit_free(a->by_peer);
	ratelimit_free(a->register_by_peer);
	free(a);
	return NULL;
}
