/* accounts.h: local accounts: users (email, Argon2id password, role, caps), their dashboard
 * sessions and API keys, kept in the store's tables (store-accounts.h runs the statements;
 * the rules are here); the small pool of threads that hashes passwords off the event loop;
 * the login rate limiter; and the parsers of what a client presents (the Cookie header, an
 * API key, a session cookie's value).
 *
 * Secrets are never kept: a session or key secret is stored as its SHA-256 and compared in
 * constant time; a password as an Argon2id string. Nothing here logs a secret. The table
 * functions take the store so `sandboxd admin` can use them without a running daemon; they
 * log nothing and return -errno (-ENOENT: no such row, -EEXIST: taken, -EIO: the database). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "list.h"
#include "macro.h"

enum role {
	ROLE_USER,
	ROLE_ADMIN,
};

/* A user's caps on what they run at once; 0 means no cap. Counted over their sandboxes that
 * are pending, starting, running, stopping or suspended, and creates still waiting for an
 * image. */
struct user_caps {
	unsigned max_sandboxes;
	unsigned max_cpus;
	unsigned max_memory_mb;
};

const char *role_to_string(enum role r);

struct loop;
struct pool;
struct store;

#define ACCOUNT_EMAIL_MAX 254
#define ACCOUNT_PASSWORD_MIN 10
#define ACCOUNT_PASSWORD_MAX 1024
#define ACCOUNT_HASH_MAX 128 /* crypto_pwhash_STRBYTES */
#define ACCOUNT_SESSION_TTL_MS (7 * 24 * 3600 * 1000LL)
#define ACCOUNT_SESSION_MAX_AGE 604800 /* the cookie's Max-Age: the same 7 days */
#define ACCOUNT_SESSION_COOKIE "sandboxd_session"
#define ACCOUNT_KEY_NAME_MAX 100
#define ACCOUNT_KEYS_MAX 100     /* per user */
#define ACCOUNT_SESSIONS_MAX 100 /* per user; the oldest goes first */

/* A user row. A cap of -1 follows the server's default; 0 is no cap. */
struct account {
	char id[24]; /* "usr_" + 16 hex */
	char email[ACCOUNT_EMAIL_MAX + 1];
	enum role role;
	bool disabled;
	int64_t created_at; /* unix ms */
	int64_t max_sandboxes, max_cpus, max_memory_mb;
};

/* ---- checks of what people type ---- */

/* Lowercases a well-formed email into out: at most 254 bytes, exactly one '@' with something
 * on each side, no spaces, controls or non-ASCII. NULL, or why it is refused. */
const char *account_email_normalise(const char *in, char out[static ACCOUNT_EMAIL_MAX + 1]);
/* NULL, or why the password is refused (10..1024 bytes, no NUL). */
const char *account_password_check(const char *pw, size_t len);

/* ---- passwords (slow: ~0.1 s and 64 MiB each; sandboxd runs them on the pool) ---- */

/* Argon2id (opslimit 2, memlimit 64 MiB) of pw into out. -ENOMEM. */
int account_hash_password(const char *pw, size_t len, char out[static ACCOUNT_HASH_MAX]);
/* Whether pw matches hash; false for a hash that is not one of ours. */
bool account_verify_password(const char *hash, const char *pw, size_t len);
/* A valid hash no password is known for: verified against for an unknown email, so the time
 * an answer takes does not tell which emails exist. */
extern const char account_dummy_hash[];

/* ---- users ---- */

/* Inserts a new user (a fresh id) with the given password hash. -EEXIST: email taken. */
int account_create(struct store *s, const char *email, enum role role, const char *hash,
                   struct account *ret);
int account_get(struct store *s, const char *id, struct account *ret);
/* By (normalised) email; ret_hash (ACCOUNT_HASH_MAX bytes, may be NULL) gets the hash. */
int account_get_by_email(struct store *s, const char *email, struct account *ret, char *ret_hash);
/* Calls fn for every user, oldest first; a negative return stops and is returned. */
int account_list(struct store *s, int (*fn)(const struct account *a, void *data), void *data);
/* Writes role, disabled and the caps from a. -ENOENT. */
int account_update(struct store *s, const struct account *a);
int account_set_password(struct store *s, const char *id, const char *hash);
/* Deletes the user with their sessions and keys; their terminated sandboxes' owner becomes
 * "EMAIL (deleted ID)", which no principal is. -ENOENT. */
int account_delete(struct store *s, const char *id);
/* The caps that apply to a: its own, or the defaults for those it leaves to the server. */
struct user_caps account_caps(const struct account *a, const struct user_caps *defaults);

/* ---- sessions ---- */

#define ACCOUNT_SESSION_ID_LEN 24 /* hex */
#define ACCOUNT_SECRET_B64_LEN 43 /* 32 bytes, base64url without padding */
#define ACCOUNT_COOKIE_VALUE_LEN (ACCOUNT_SESSION_ID_LEN + 1 + ACCOUNT_SECRET_B64_LEN)
#define ACCOUNT_CSRF_LEN 43

struct account_session {
	char id[ACCOUNT_SESSION_ID_LEN + 1];
	char cookie[ACCOUNT_COOKIE_VALUE_LEN + 1]; /* "<id>.<secret>": set only by create */
	char csrf[ACCOUNT_CSRF_LEN + 1];
	int64_t expires_at;
};

/* Starts a session for user_id, valid ACCOUNT_SESSION_TTL_MS from now_ms. Drops every expired
 * session, and the user's oldest beyond ACCOUNT_SESSIONS_MAX. */
int account_session_create(struct store *s, const char *user_id, int64_t now_ms,
                           struct account_session *ret);
/* The session and its user for a cookie value: -EACCES when it is malformed, unknown,
 * expired or its secret is wrong (all alike). ret_session->cookie is left empty. */
int account_session_lookup(struct store *s, const char *cookie, int64_t now_ms,
                           struct account *ret_user, struct account_session *ret_session);
int account_session_delete(struct store *s, const char *id);
/* Ends every session of a user (disabled, demoted, new password). */
int account_sessions_delete_user(struct store *s, const char *user_id);

/* ---- API keys: "sbk_<12 hex id>_<43 base64url>" ---- */

#define ACCOUNT_KEY_ID_LEN 12
#define ACCOUNT_KEY_LEN (4 + ACCOUNT_KEY_ID_LEN + 1 + ACCOUNT_SECRET_B64_LEN)
#define ACCOUNT_KEY_PREFIX_LEN (4 + ACCOUNT_KEY_ID_LEN + 1 + 4)

struct account_key {
	char id[ACCOUNT_KEY_ID_LEN + 1];
	char name[ACCOUNT_KEY_NAME_MAX + 1];
	char prefix[ACCOUNT_KEY_PREFIX_LEN + 1]; /* the key's first characters, to tell it */
	char key[ACCOUNT_KEY_LEN + 1];           /* the whole key: set only by create */
	int64_t created_at;
	int64_t last_used_at; /* 0: never */
};

/* -EDQUOT past ACCOUNT_KEYS_MAX keys for the user. */
int account_key_create(struct store *s, const char *user_id, const char *name, int64_t now_ms,
                       struct account_key *ret);
/* The user a key belongs to; -EACCES as for sessions. Records the use (at most once a
 * minute). ret_key_id gets the id. */
int account_key_lookup(struct store *s, const char *key, int64_t now_ms, struct account *ret_user,
                       char ret_key_id[static ACCOUNT_KEY_ID_LEN + 1]);
/* The user's keys, oldest first. */
int account_key_list(struct store *s, const char *user_id,
                     int (*fn)(const struct account_key *k, void *data), void *data);
/* -ENOENT when user_id has no such key (another user's included). */
int account_key_delete(struct store *s, const char *user_id, const char *id);

/* ---- parsers of what a client sends (pure; fuzzed) ---- */

/* Finds the cookie `name` in one Cookie header value ("a=1; b=\"2\""): 1 and its value
 * (quotes removed) in out, 0 when absent, -EEXIST when it is there twice, -E2BIG when the value
 * does not fit size. Pairs without '=' are skipped, as browsers send them. */
int cookie_find(const char *header, const char *name, char *out, size_t size);
/* Calls fn with each value of the cookie `name` in one Cookie header value (quotes removed, not
 * NUL-terminated), in order; stops at fn's first negative answer and returns it, else how many
 * there were. */
int cookie_each(const char *header, const char *name,
                int (*fn)(const char *value, size_t len, void *ctx), void *ctx);
/* Splits an API key into its id and its 32 secret bytes. -EINVAL unless it is exactly one. */
int api_key_parse(const char *key, char ret_id[static ACCOUNT_KEY_ID_LEN + 1],
                  uint8_t ret_secret[static 32]);
/* The same for a session cookie's value "<24 hex>.<43 base64url>". */
int session_cookie_parse(const char *value, char ret_id[static ACCOUNT_SESSION_ID_LEN + 1],
                         uint8_t ret_secret[static 32]);

/* ---- the login rate limiter (in memory, bounded) ---- */

struct ratelimit;

/* At most max failures per key within window_ms; at most capacity keys are tracked (the
 * least recently failed one is forgotten first). max <= 16. */
struct ratelimit *ratelimit_new(unsigned max, int64_t window_ms, unsigned capacity);
struct ratelimit *ratelimit_free(struct ratelimit *rl);
DEFINE_FREEP(struct ratelimit, ratelimit_free)
/* 0 when key may try now, else the seconds until it may (>= 1). */
unsigned ratelimit_check(struct ratelimit *rl, const char *key, int64_t now_ms);
/* Counts a failure. -ENOMEM (then it is not counted). */
int ratelimit_fail(struct ratelimit *rl, const char *key, int64_t now_ms);
void ratelimit_clear(struct ratelimit *rl, const char *key);
/* Takes back the latest failure counted for key: an attempt counted when it began (so that
 * attempts in flight at once cannot pass the limit) that turned out not to fail. */
void ratelimit_forgive(struct ratelimit *rl, const char *key);
unsigned ratelimit_count(const struct ratelimit *rl);

/* ---- sandboxd's accounts object: the hashing pool and the limiters ---- */

#define ACCOUNTS_HASH_THREADS 2
#define ACCOUNTS_QUEUE_MAX 32
#define ACCOUNTS_LOGIN_FAILURES 5
#define ACCOUNTS_LOGIN_WINDOW_MS (15 * 60 * 1000LL)
#define ACCOUNTS_LIMITER_CAPACITY 4096
#define ACCOUNTS_REGISTRATIONS 5 /* per client address per hour (--registration on) */
#define ACCOUNTS_REGISTER_WINDOW_MS (60 * 60 * 1000LL)

struct accounts {
	struct ratelimit *by_email;         /* failed logins per email */
	struct ratelimit *by_peer;          /* and per client address */
	struct ratelimit *register_by_peer; /* registrations per client address */
	struct pool *pool;
};

int accounts_new(struct loop *loop, struct accounts **ret);
/* Stops the threads; jobs not yet handed back are dropped without their callbacks. Free the
 * server first, so nothing still waits for one. */
struct accounts *accounts_free(struct accounts *a);
DEFINE_FREEP(struct accounts, accounts_free)

enum pw_op {
	PW_HASH,   /* hash password into hash */
	PW_VERIFY, /* check password against hash */
};

/* One password to hash or verify on the pool. The callback runs on the loop's thread with
 * result 0 (hashed, or it matches), -EACCES (no match) or -ENOMEM; the job is freed after it
 * returns. */
struct pw_job {
	enum pw_op op;
	char hash[ACCOUNT_HASH_MAX];
	int result;
	void (*done)(struct pw_job *j, void *data);
	void *data;
	/* the pool's */
	char *password;
	size_t password_len;
	struct list_node link;
};

/* Queues a job (the password is copied, and wiped once used; hash is read for PW_VERIFY).
 * -EBUSY when ACCOUNTS_QUEUE_MAX jobs wait already (answer 503). */
int accounts_submit(struct accounts *a, enum pw_op op, const char *password, size_t len,
                    const char *hash, void (*done)(struct pw_job *j, void *data), void *data,
                    struct pw_job **ret);
/* Its callback will not run (the client went away); the pool frees it when it is done. */
void accounts_cancel(struct pw_job *j);

/* `sandboxd admin create|list` (admin.c; call it as admin_main(argc - 1, argv + 1)). Returns
 * the process exit status. */
int admin_main(int argc, char **argv);
