/* test-accounts.c: daemon/accounts/accounts.c: email and password checks, Argon2id hashing, users,
 * sessions (create, lookup, expiry, delete), API keys (create, lookup, revoke), the rate
 * limiter, the Cookie-header and key parsers, the hashing pool driven by a real loop, and
 * `sandboxd admin` on a fresh state directory (the binary; no daemon). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "accounts.h"
#include "harness.h"
#include "loop.h"
#include "store.h"
#include "util.h"

struct fixture {
	char dir[64];
	char path[96];
	struct store *store;
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	snprintf(f->dir, sizeof(f->dir), "/tmp/test-accounts.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/sandboxd.db", f->dir);
	assert_int_equal(store_open(f->path, &f->store), 0);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	store_free(f->store);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static void
test_email(void **state _unused_)
{
	char out[ACCOUNT_EMAIL_MAX + 1];
	char long_email[300];

	assert_null(account_email_normalise("Alice@Example.COM", out));
	assert_string_equal(out, "alice@example.com");
	assert_null(account_email_normalise("a+b.c@x", out));
	assert_non_null(account_email_normalise("", out));
	assert_non_null(account_email_normalise("alice", out));
	assert_non_null(account_email_normalise("@example.com", out));
	assert_non_null(account_email_normalise("alice@", out));
	assert_non_null(account_email_normalise("a@b@c", out));
	assert_non_null(account_email_normalise("al ice@example.com", out));
	assert_non_null(account_email_normalise("alice@exa\tmple.com", out));
	assert_non_null(account_email_normalise("alice\n@example.com", out));
	assert_non_null(account_email_normalise("al\xc3\xa9@example.com", out));
	memset(long_email, 'a', sizeof(long_email));
	memcpy(long_email + 242, "@example.com", 13); /* 254 bytes: the most */
	assert_null(account_email_normalise(long_email, out));
	memset(long_email, 'a', sizeof(long_email));
	memcpy(long_email + 243, "@example.com", 13); /* 255 bytes */
	assert_non_null(account_email_normalise(long_email, out));
}

static void
test_password_check(void **state _unused_)
{
	char big[1100];

	assert_non_null(account_password_check("short", 5));
	assert_non_null(account_password_check("123456789", 9));
	assert_null(account_password_check("1234567890", 10));
	assert_non_null(account_password_check("12345\0"
	                                       "67890",
	                                       11));
	memset(big, 'x', sizeof(big));
	assert_null(account_password_check(big, 1024));
	assert_non_null(account_password_check(big, 1025));
}

static void
test_hash(void **state _unused_)
{
	char h1[ACCOUNT_HASH_MAX], h2[ACCOUNT_HASH_MAX];

	assert_int_equal(account_hash_password("correct horse", 13, h1), 0);
	assert_int_equal(account_hash_password("correct horse", 13, h2), 0);
	assert_true(str_has_prefix(h1, "$argon2id$v=19$m=65536,t=2,p=1$"));
	assert_string_not_equal(h1, h2); /* salted */
	assert_true(account_verify_password(h1, "correct horse", 13));
	assert_true(account_verify_password(h2, "correct horse", 13));
	assert_false(account_verify_password(h1, "correct horsE", 13));
	assert_false(account_verify_password(h1, "correct hors", 12));
	assert_false(account_verify_password("$2b$10$notours", "x", 1));
	assert_false(account_verify_password("", "x", 1));
	/* the dummy is a real hash, so verifying against it costs what a real one does */
	assert_true(str_has_prefix(account_dummy_hash, "$argon2id$v=19$m=65536,t=2,p=1$"));
	assert_false(account_verify_password(account_dummy_hash, "correct horse", 13));
}

static void
test_users(void **state)
{
	struct fixture *f = *state;
	struct account a, b, got;
	char hash[ACCOUNT_HASH_MAX];
	struct user_caps def = { 5, 8, 16384 }, caps;

	assert_int_equal(
	        account_create(f->store, "alice@example.com", ROLE_ADMIN, "$argon2id$x", &a), 0);
	assert_true(str_has_prefix(a.id, "usr_"));
	assert_int_equal(strlen(a.id), 20);
	assert_int_equal(a.role, ROLE_ADMIN);
	assert_int_equal(account_create(f->store, "alice@example.com", ROLE_USER, "h", NULL),
	                 -EEXIST);
	assert_int_equal(account_create(f->store, "bob@example.com", ROLE_USER, "$argon2id$y", &b),
	                 0);

	assert_int_equal(account_get(f->store, b.id, &got), 0);
	assert_string_equal(got.email, "bob@example.com");
	assert_int_equal(got.role, ROLE_USER);
	assert_false(got.disabled);
	assert_int_equal(got.max_sandboxes, -1);
	assert_int_equal(account_get(f->store, "usr_0000000000000000", &got), -ENOENT);
	assert_int_equal(account_get_by_email(f->store, "alice@example.com", &got, hash), 0);
	assert_string_equal(got.id, a.id);
	assert_string_equal(hash, "$argon2id$x");
	assert_int_equal(account_get_by_email(f->store, "carol@example.com", &got, hash), -ENOENT);

	caps = account_caps(&got, &def);
	assert_int_equal(caps.max_sandboxes, 5);
	assert_int_equal(caps.max_memory_mb, 16384);
	b.max_sandboxes = 2;
	b.max_cpus = 0; /* no cap */
	b.disabled = true;
	b.role = ROLE_ADMIN;
	assert_int_equal(account_update(f->store, &b), 0);
	assert_int_equal(account_get(f->store, b.id, &got), 0);
	assert_true(got.disabled);
	assert_int_equal(got.role, ROLE_ADMIN);
	caps = account_caps(&got, &def);
	assert_int_equal(caps.max_sandboxes, 2);
	assert_int_equal(caps.max_cpus, 0);
	assert_int_equal(caps.max_memory_mb, 16384);

	assert_int_equal(account_set_password(f->store, b.id, "$argon2id$z"), 0);
	assert_int_equal(account_get_by_email(f->store, "bob@example.com", &got, hash), 0);
	assert_string_equal(hash, "$argon2id$z");
	assert_int_equal(account_delete(f->store, b.id), 0);
	assert_int_equal(account_delete(f->store, b.id), -ENOENT);
	assert_int_equal(account_get(f->store, b.id, &got), -ENOENT);
}

static int
count_user(const struct account *a _unused_, void *data)
{
	(*(int *)data)++;
	return 0;
}

static void
test_user_list_survives_reopen(void **state)
{
	struct fixture *f = *state;
	int n = 0;

	assert_int_equal(account_create(f->store, "a@x", ROLE_USER, "h", NULL), 0);
	assert_int_equal(account_create(f->store, "b@x", ROLE_USER, "h", NULL), 0);
	f->store = store_free(f->store);
	assert_int_equal(store_open(f->path, &f->store), 0);
	assert_int_equal(account_list(f->store, count_user, &n), 0);
	assert_int_equal(n, 2);
}

static void
test_sessions(void **state)
{
	struct fixture *f = *state;
	struct account a, u;
	struct account_session s1, s2, got;
	int64_t now = now_unix_ms();
	char bad[ACCOUNT_COOKIE_VALUE_LEN + 1];

	assert_int_equal(account_create(f->store, "alice@example.com", ROLE_USER, "h", &a), 0);
	assert_int_equal(account_session_create(f->store, a.id, now, &s1), 0);
	assert_int_equal(account_session_create(f->store, a.id, now, &s2), 0);
	assert_int_equal(strlen(s1.cookie), ACCOUNT_COOKIE_VALUE_LEN);
	assert_int_equal(strlen(s1.csrf), ACCOUNT_CSRF_LEN);
	assert_string_not_equal(s1.cookie, s2.cookie);
	assert_string_not_equal(s1.csrf, s2.csrf);
	assert_true(str_has_prefix(s1.cookie, s1.id));

	assert_int_equal(account_session_lookup(f->store, s1.cookie, now + 1000, &u, &got), 0);
	assert_string_equal(u.id, a.id);
	assert_string_equal(got.id, s1.id);
	assert_string_equal(got.csrf, s1.csrf);
	assert_string_equal(got.cookie, "");

	/* only the hash is stored: the secret is nowhere in the row */
	{
		sqlite3 *db;
		sqlite3_stmt *st;
		const char *secret = strchr(s1.cookie, '.') + 1;
		assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
		assert_int_equal(sqlite3_prepare_v2(db,
		                                    "SELECT COUNT(*) FROM sessions WHERE "
		                                    "instr(CAST(secret_sha256 AS TEXT), ?1) > 0 OR "
		                                    "instr(csrf_token, ?1) > 0",
		                                    -1, &st, NULL),
		                 SQLITE_OK);
		sqlite3_bind_text(st, 1, secret, -1, SQLITE_STATIC);
		assert_int_equal(sqlite3_step(st), SQLITE_ROW);
		assert_int_equal(sqlite3_column_int(st, 0), 0);
		sqlite3_finalize(st);
		sqlite3_close(db);
	}

	/* a changed secret, a malformed value, an unknown id */
	snprintf(bad, sizeof(bad), "%s", s1.cookie);
	bad[ACCOUNT_SESSION_ID_LEN + 5] = bad[ACCOUNT_SESSION_ID_LEN + 5] == 'A' ? 'B' : 'A';
	assert_int_equal(account_session_lookup(f->store, bad, now, &u, &got), -EACCES);
	assert_int_equal(account_session_lookup(f->store, "x.y", now, &u, &got), -EACCES);
	assert_int_equal(account_session_lookup(f->store, "", now, &u, &got), -EACCES);
	snprintf(bad, sizeof(bad), "%s", s1.cookie);
	bad[0] = bad[0] == '0' ? '1' : '0';
	assert_int_equal(account_session_lookup(f->store, bad, now, &u, &got), -EACCES);

	/* expiry after 7 days; an expired session is gone */
	assert_int_equal(account_session_lookup(f->store, s1.cookie,
	                                        now + ACCOUNT_SESSION_TTL_MS - 1, &u, &got),
	                 0);
	assert_int_equal(
	        account_session_lookup(f->store, s1.cookie, now + ACCOUNT_SESSION_TTL_MS, &u, &got),
	        -EACCES);
	assert_int_equal(account_session_delete(f->store, s1.id), -ENOENT);

	/* a disabled user's session does not authenticate */
	a.disabled = true;
	assert_int_equal(account_update(f->store, &a), 0);
	assert_int_equal(account_session_lookup(f->store, s2.cookie, now, &u, &got), -EACCES);
	a.disabled = false;
	assert_int_equal(account_update(f->store, &a), 0);
	assert_int_equal(account_session_lookup(f->store, s2.cookie, now, &u, &got), 0);

	/* logout */
	assert_int_equal(account_session_delete(f->store, s2.id), 0);
	assert_int_equal(account_session_lookup(f->store, s2.cookie, now, &u, &got), -EACCES);

	/* all of a user's, and with the user */
	assert_int_equal(account_session_create(f->store, a.id, now, &s1), 0);
	assert_int_equal(account_sessions_delete_user(f->store, a.id), 0);
	assert_int_equal(account_session_lookup(f->store, s1.cookie, now, &u, &got), -EACCES);
	assert_int_equal(account_session_create(f->store, a.id, now, &s1), 0);
	assert_int_equal(account_delete(f->store, a.id), 0);
	assert_int_equal(account_session_lookup(f->store, s1.cookie, now, &u, &got), -EACCES);
	assert_int_equal(account_session_create(f->store, a.id, now, &s1), -ENOENT);
}

static void
test_sessions_bounded(void **state)
{
	struct fixture *f = *state;
	struct account a, u;
	struct account_session first, s, got;
	int64_t now = now_unix_ms();

	assert_int_equal(account_create(f->store, "a@x", ROLE_USER, "h", &a), 0);
	assert_int_equal(account_session_create(f->store, a.id, now, &first), 0);
	for (int i = 1; i <= ACCOUNT_SESSIONS_MAX; i++)
		assert_int_equal(account_session_create(f->store, a.id, now + i, &s), 0);
	assert_int_equal(account_session_lookup(f->store, first.cookie, now + 200, &u, &got),
	                 -EACCES);
	assert_int_equal(account_session_lookup(f->store, s.cookie, now + 200, &u, &got), 0);
}

/* Whether any statement of the connection is mid-read: one left so holds a WAL snapshot, and
 * the lookups' statements are kept prepared between requests. */
static bool
any_statement_busy(struct store *s)
{
	return store_busy(s);
}

static void
test_lookups_end_their_reads(void **state)
{
	struct fixture *f = *state;
	struct store *other = NULL;
	struct account a, u;
	struct account_session ses, got;
	struct account_key k;
	int64_t now = now_unix_ms();
	char id[ACCOUNT_KEY_ID_LEN + 1], bad[ACCOUNT_KEY_LEN + 1];

	assert_int_equal(account_create(f->store, "a@x", ROLE_USER, "h", &a), 0);
	assert_int_equal(account_session_create(f->store, a.id, now, &ses), 0);
	assert_int_equal(account_key_create(f->store, a.id, "k", now, &k), 0);

	/* every outcome: found, wrong secret, unknown id, expired */
	assert_int_equal(account_session_lookup(f->store, ses.cookie, now, &u, &got), 0);
	assert_false(any_statement_busy(f->store));
	assert_int_equal(account_key_lookup(f->store, k.key, now, &u, id), 0);
	assert_false(any_statement_busy(f->store));
	snprintf(bad, sizeof(bad), "%s", k.key);
	bad[ACCOUNT_KEY_LEN - 3] = bad[ACCOUNT_KEY_LEN - 3] == 'A' ? 'B' : 'A';
	assert_int_equal(account_key_lookup(f->store, bad, now, &u, id), -EACCES);
	assert_false(any_statement_busy(f->store));
	bad[4] = bad[4] == '0' ? '1' : '0';
	assert_int_equal(account_key_lookup(f->store, bad, now, &u, id), -EACCES);
	assert_false(any_statement_busy(f->store));

	/* a change made through another connection (`sandboxd admin`, say) counts at once */
	assert_int_equal(store_open(f->path, &other), 0);
	a.disabled = true;
	assert_int_equal(account_update(other, &a), 0);
	assert_int_equal(account_session_lookup(f->store, ses.cookie, now, &u, &got), -EACCES);
	assert_int_equal(account_key_lookup(f->store, k.key, now, &u, id), -EACCES);
	assert_false(any_statement_busy(f->store));
	a.disabled = false;
	assert_int_equal(account_update(other, &a), 0);
	assert_int_equal(account_session_lookup(f->store, ses.cookie, now, &u, &got), 0);
	assert_int_equal(account_key_lookup(f->store, k.key, now, &u, id), 0);
	store_free(other);

	assert_int_equal(account_session_lookup(f->store, ses.cookie, now + ACCOUNT_SESSION_TTL_MS,
	                                        &u, &got),
	                 -EACCES);
	assert_false(any_statement_busy(f->store));
}

struct keys_seen {
	int n;
	struct account_key last;
};

static int
count_key(const struct account_key *k, void *data)
{
	struct keys_seen *seen = data;

	seen->n++;
	seen->last = *k;
	return 0;
}

static void
test_keys(void **state)
{
	struct fixture *f = *state;
	struct account a, b, u;
	struct account_key k1, k2;
	struct keys_seen seen = { 0 };
	int64_t now = now_unix_ms();
	char id[ACCOUNT_KEY_ID_LEN + 1], bad[ACCOUNT_KEY_LEN + 1];
	uint8_t secret[32];

	assert_int_equal(account_create(f->store, "a@x", ROLE_USER, "h", &a), 0);
	assert_int_equal(account_create(f->store, "b@x", ROLE_USER, "h", &b), 0);
	assert_int_equal(account_key_create(f->store, a.id, "laptop", now, &k1), 0);
	assert_int_equal(account_key_create(f->store, a.id, "ci", now, &k2), 0);
	assert_int_equal(strlen(k1.key), ACCOUNT_KEY_LEN);
	assert_true(str_has_prefix(k1.key, "sbk_"));
	assert_true(str_has_prefix(k1.key + 4, k1.id));
	assert_true(str_has_prefix(k1.key, k1.prefix));
	assert_int_equal(strlen(k1.prefix), ACCOUNT_KEY_PREFIX_LEN);
	assert_int_equal(api_key_parse(k1.key, id, secret), 0);
	assert_string_equal(id, k1.id);

	assert_int_equal(account_key_lookup(f->store, k1.key, now, &u, id), 0);
	assert_string_equal(u.id, a.id);
	assert_string_equal(id, k1.id);
	snprintf(bad, sizeof(bad), "%s", k1.key);
	bad[ACCOUNT_KEY_LEN - 3] = bad[ACCOUNT_KEY_LEN - 3] == 'A' ? 'B' : 'A';
	assert_int_equal(account_key_lookup(f->store, bad, now, &u, id), -EACCES);
	assert_int_equal(account_key_lookup(f->store, "sbk_nope", now, &u, id), -EACCES);

	/* last_used_at: written at the first use, then at most once a minute */
	assert_int_equal(account_key_list(f->store, a.id, count_key, &seen), 0);
	assert_int_equal(seen.n, 2);
	assert_string_equal(seen.last.name, "ci");
	assert_string_equal(seen.last.key, ""); /* never listed */
	assert_int_equal(seen.last.last_used_at, 0);
	assert_int_equal(account_key_lookup(f->store, k2.key, now + 10, &u, id), 0);
	assert_int_equal(account_key_lookup(f->store, k2.key, now + 30000, &u, id), 0);
	seen.n = 0;
	assert_int_equal(account_key_list(f->store, a.id, count_key, &seen), 0);
	assert_int_equal(seen.last.last_used_at, now + 10);
	assert_int_equal(account_key_lookup(f->store, k2.key, now + 60010, &u, id), 0);
	seen.n = 0;
	assert_int_equal(account_key_list(f->store, a.id, count_key, &seen), 0);
	assert_int_equal(seen.last.last_used_at, now + 60010);

	/* another user's key cannot be revoked by b, and is not b's to see */
	seen.n = 0;
	assert_int_equal(account_key_list(f->store, b.id, count_key, &seen), 0);
	assert_int_equal(seen.n, 0);
	assert_int_equal(account_key_delete(f->store, b.id, k1.id), -ENOENT);
	assert_int_equal(account_key_lookup(f->store, k1.key, now, &u, id), 0);
	assert_int_equal(account_key_delete(f->store, a.id, k1.id), 0);
	assert_int_equal(account_key_lookup(f->store, k1.key, now, &u, id), -EACCES);
	assert_int_equal(account_key_delete(f->store, a.id, k1.id), -ENOENT);

	/* a disabled user's keys do not authenticate */
	a.disabled = true;
	assert_int_equal(account_update(f->store, &a), 0);
	assert_int_equal(account_key_lookup(f->store, k2.key, now, &u, id), -EACCES);

	/* at most ACCOUNT_KEYS_MAX per user */
	for (int i = 0; i < ACCOUNT_KEYS_MAX; i++)
		assert_int_equal(account_key_create(f->store, b.id, "k", now, &k1), 0);
	assert_int_equal(account_key_create(f->store, b.id, "k", now, &k1), -EDQUOT);
	/* deleting the user takes the keys */
	assert_int_equal(account_delete(f->store, b.id), 0);
	assert_int_equal(account_key_lookup(f->store, k1.key, now, &u, id), -EACCES);
}

static void
test_cookie_find(void **state _unused_)
{
	char v[64];

	assert_int_equal(cookie_find("sandboxd_session=abc", "sandboxd_session", v, sizeof(v)), 1);
	assert_string_equal(v, "abc");
	assert_int_equal(
	        cookie_find("a=1; sandboxd_session=abc; b=2", "sandboxd_session", v, sizeof(v)), 1);
	assert_string_equal(v, "abc");
	assert_int_equal(
	        cookie_find("a=1;sandboxd_session=abc;b=2", "sandboxd_session", v, sizeof(v)), 1);
	assert_string_equal(v, "abc");
	/* quoted, spaces around */
	assert_int_equal(
	        cookie_find("  sandboxd_session = \"q v\" ;x", "sandboxd_session", v, sizeof(v)),
	        1);
	assert_string_equal(v, "q v");
	assert_int_equal(cookie_find("sandboxd_session=\"", "sandboxd_session", v, sizeof(v)), 1);
	assert_string_equal(v, "\"");
	assert_int_equal(cookie_find("sandboxd_session=", "sandboxd_session", v, sizeof(v)), 1);
	assert_string_equal(v, "");
	/* absent: other names, prefixes and suffixes of it, nameless pairs */
	assert_int_equal(cookie_find("", "sandboxd_session", v, sizeof(v)), 0);
	assert_int_equal(cookie_find("x_sandboxd_session=1; sandboxd_sessions=2; sandboxd_session",
	                             "sandboxd_session", v, sizeof(v)),
	                 0);
	assert_int_equal(cookie_find("SANDBOXD_SESSION=1", "sandboxd_session", v, sizeof(v)), 0);
	assert_int_equal(cookie_find(";;; =x; ;", "sandboxd_session", v, sizeof(v)), 0);
	/* twice: which one a browser meant cannot be told */
	assert_int_equal(cookie_find("sandboxd_session=a; sandboxd_session=a", "sandboxd_session",
	                             v, sizeof(v)),
	                 -EEXIST);
	assert_int_equal(cookie_find("sandboxd_session=a; x=1; sandboxd_session=b",
	                             "sandboxd_session", v, sizeof(v)),
	                 -EEXIST);
	/* too long */
	assert_int_equal(cookie_find("sandboxd_session=0123456789", "sandboxd_session", v, 10),
	                 -E2BIG);
	assert_int_equal(cookie_find("sandboxd_session=012345678", "sandboxd_session", v, 10), 1);
	/* a value with '=' in it */
	assert_int_equal(cookie_find("t=a=b", "t", v, sizeof(v)), 1);
	assert_string_equal(v, "a=b");
}

static void
test_key_parse(void **state _unused_)
{
	char id[ACCOUNT_KEY_ID_LEN + 1], sid[ACCOUNT_SESSION_ID_LEN + 1];
	uint8_t secret[32];
	const char *good = "sbk_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
	const char *sgood = "0123456789abcdef01234567.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

	assert_int_equal(api_key_parse(good, id, secret), 0);
	assert_string_equal(id, "0123456789ab");
	assert_int_equal(
	        api_key_parse("sbk_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA_-", id,
	                      secret),
	        -EINVAL); /* the last character carries bits that must be 0 */
	assert_int_equal(
	        api_key_parse("sbk_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAw", id,
	                      secret),
	        0);
	assert_int_equal(
	        api_key_parse("sbk_0123456789AB_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", id,
	                      secret),
	        -EINVAL); /* upper-case id */
	assert_int_equal(
	        api_key_parse("sbk_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", id,
	                      secret),
	        -EINVAL); /* one short */
	assert_int_equal(
	        api_key_parse("sbk_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", id,
	                      secret),
	        -EINVAL); /* one long */
	assert_int_equal(
	        api_key_parse("sbk_0123456789ab-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", id,
	                      secret),
	        -EINVAL);
	assert_int_equal(
	        api_key_parse("sbx_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", id,
	                      secret),
	        -EINVAL);
	assert_int_equal(
	        api_key_parse("sbk_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=A", id,
	                      secret),
	        -EINVAL);
	assert_int_equal(api_key_parse("", id, secret), -EINVAL);
	assert_int_equal(session_cookie_parse(sgood, sid, secret), 0);
	assert_string_equal(sid, "0123456789abcdef01234567");
	assert_int_equal(session_cookie_parse(good, sid, secret), -EINVAL);
	assert_int_equal(
	        session_cookie_parse(
	                "0123456789abcdef01234567_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", sid,
	                secret),
	        -EINVAL);
	assert_int_equal(
	        session_cookie_parse(
	                "0123456789abcdef01234567.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA+A", sid,
	                secret),
	        -EINVAL);
}

static void
test_ratelimit(void **state _unused_)
{
	_cleanup_(ratelimit_freep) struct ratelimit *rl = ratelimit_new(5, 900000, 3);
	int64_t t = 1000000;

	assert_non_null(rl);
	assert_int_equal(ratelimit_check(rl, "a", t), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(ratelimit_fail(rl, "a", t + i * 1000), 0);
	assert_int_equal(ratelimit_check(rl, "a", t + 5000), 0);
	assert_int_equal(ratelimit_fail(rl, "a", t + 5000), 0);
	/* five in the window: blocked until the first leaves it, 900 s after it */
	assert_int_equal(ratelimit_check(rl, "a", t + 5000), 895);
	assert_int_equal(ratelimit_check(rl, "a", t + 899500), 1);
	assert_int_equal(ratelimit_check(rl, "a", t + 900000), 0);
	/* a sixth failure: the window slides to the second one */
	assert_int_equal(ratelimit_fail(rl, "a", t + 900000), 0);
	assert_int_equal(ratelimit_check(rl, "a", t + 900000), 1);
	assert_int_equal(ratelimit_check(rl, "a", t + 900500), 1);
	assert_int_equal(ratelimit_check(rl, "a", t + 901000), 0);
	/* other keys are their own */
	assert_int_equal(ratelimit_check(rl, "b", t + 900000), 0);
	/* cleared by a success */
	assert_int_equal(ratelimit_fail(rl, "a", t + 902000), 0);
	ratelimit_clear(rl, "a");
	assert_int_equal(ratelimit_check(rl, "a", t + 902000), 0);
	/* bounded: the least recently failed key goes first */
	for (int i = 0; i < 5; i++) {
		assert_int_equal(ratelimit_fail(rl, "x", t + i), 0);
		assert_int_equal(ratelimit_fail(rl, "y", t + i), 0);
	}
	assert_int_equal(ratelimit_fail(rl, "z", t + 10), 0);
	assert_int_equal(ratelimit_count(rl), 3);
	assert_int_equal(ratelimit_fail(rl, "w", t + 11), 0);
	assert_int_equal(ratelimit_count(rl), 3);
	assert_int_equal(ratelimit_check(rl, "x", t + 12), 0); /* forgotten */
	assert_true(ratelimit_check(rl, "y", t + 12) > 0);
	assert_null(ratelimit_new(17, 1000, 10));
	assert_null(ratelimit_new(0, 1000, 10));
}

/* An attempt counts when it begins; one that succeeds is taken back. */
static void
test_ratelimit_forgive(void **state _unused_)
{
	_cleanup_(ratelimit_freep) struct ratelimit *rl = ratelimit_new(3, 900000, 8);
	int64_t t = 1000000;

	assert_non_null(rl);
	ratelimit_forgive(rl, "none"); /* nothing to take back */
	assert_int_equal(ratelimit_count(rl), 0);
	/* three begin at once: the fourth waits, whatever they turn out to be */
	for (int i = 0; i < 3; i++)
		assert_int_equal(ratelimit_fail(rl, "a", t + i), 0);
	assert_true(ratelimit_check(rl, "a", t + 3) > 0);
	/* one succeeded: there is room for one more, and only one */
	ratelimit_forgive(rl, "a");
	assert_int_equal(ratelimit_check(rl, "a", t + 3), 0);
	assert_int_equal(ratelimit_fail(rl, "a", t + 3), 0);
	assert_true(ratelimit_check(rl, "a", t + 4) > 0);
	/* the window is that of the oldest left */
	assert_int_equal(ratelimit_check(rl, "a", t + 900000), 0);
	/* past a full ring: the latest goes, the oldest still decides */
	for (int i = 0; i < 5; i++)
		assert_int_equal(ratelimit_fail(rl, "b", t + i * 1000), 0);
	ratelimit_forgive(rl, "b");
	assert_int_equal(ratelimit_check(rl, "b", t + 5000), 0);
	assert_int_equal(ratelimit_fail(rl, "b", t + 5000), 0);
	/* the oldest kept is t + 2 s (a ring of 3): 900 s after it, seen at t + 5 s */
	assert_int_equal(ratelimit_check(rl, "b", t + 5000), 897);
	/* taking back every one forgets the key */
	for (int i = 0; i < 3; i++)
		ratelimit_forgive(rl, "b");
	assert_int_equal(ratelimit_check(rl, "b", t + 5000), 0);
	assert_int_equal(ratelimit_count(rl), 1);
}

/* ---- the pool, driven by a real loop ---- */

struct pool_test {
	int done;
	int results[8];
	char hash[ACCOUNT_HASH_MAX];
};

static void
on_done(struct pw_job *j, void *data)
{
	struct pool_test *t = data;

	t->results[t->done++] = j->result;
	if (j->op == PW_HASH)
		memcpy(t->hash, j->hash, sizeof(t->hash));
}

static void
run_until(struct loop *l, struct pool_test *t, int want)
{
	uint64_t deadline = now_mono_ms() + 30000;

	while (t->done < want && now_mono_ms() < deadline)
		assert_true(loop_run_once(l, 100) >= 0);
	assert_int_equal(t->done, want);
}

static void
test_pool(void **state _unused_)
{
	_cleanup_(loop_freep) struct loop *l = NULL;
	struct accounts *a = NULL;
	struct pool_test t = { 0 };
	struct pw_job *j = NULL;

	assert_int_equal(loop_new(&l), 0);
	assert_int_equal(accounts_new(l, &a), 0);
	assert_int_equal(accounts_submit(a, PW_HASH, "a long password", 15, NULL, on_done, &t, &j),
	                 0);
	run_until(l, &t, 1);
	assert_int_equal(t.results[0], 0);
	assert_true(account_verify_password(t.hash, "a long password", 15));
	assert_int_equal(
	        accounts_submit(a, PW_VERIFY, "a long password", 15, t.hash, on_done, &t, NULL), 0);
	assert_int_equal(
	        accounts_submit(a, PW_VERIFY, "a wrong password", 16, t.hash, on_done, &t, NULL),
	        0);
	assert_int_equal(accounts_submit(a, PW_VERIFY, "anything at all", 15, account_dummy_hash,
	                                 on_done, &t, NULL),
	                 0);
	/* a cancelled job never calls back */
	assert_int_equal(
	        accounts_submit(a, PW_VERIFY, "a long password", 15, t.hash, on_done, &t, &j), 0);
	accounts_cancel(j);
	run_until(l, &t, 4);
	/* both threads may finish in either order: count the outcomes */
	{
		int ok = 0, no = 0;
		for (int i = 1; i < 4; i++)
			t.results[i] == 0 ? ok++ : t.results[i] == -EACCES ? no++ : 0;
		assert_int_equal(ok, 1);
		assert_int_equal(no, 2);
	}
	for (int i = 0; i < 20; i++)
		(void)loop_run_once(l, 20);
	assert_int_equal(t.done, 4);

	/* bounded: beyond ACCOUNTS_QUEUE_MAX the pool refuses; freeing drops what waits */
	{
		int r = 0, n = 0;
		while (n < ACCOUNTS_QUEUE_MAX + 4 &&
		       (r = accounts_submit(a, PW_VERIFY, "pw-pw-pw-pw", 11, t.hash, on_done, &t,
		                            NULL)) == 0)
			n++;
		assert_int_equal(r, -EBUSY);
		assert_true(n >= ACCOUNTS_QUEUE_MAX);
	}
	a = accounts_free(a);
	assert_int_equal(t.done, 4);
}

static void
write_password(const char *path, const char *line, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, line, strlen(line)), (ssize_t)strlen(line));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void
test_admin_command(void **state)
{
	struct fixture *f = *state;
	const char *bin = harness_binary("SANDBOXD_FAKE");
	_cleanup_free_ char *sdir = strdup_printf("%s/fresh/state", f->dir);
	_cleanup_free_ char *pwf = strdup_printf("%s/pw", f->dir);
	_cleanup_free_ char *db = strdup_printf("%s/sandboxd.db", sdir);
	_cleanup_(store_freep) struct store *s = NULL;
	char *out = NULL, hash[ACCOUNT_HASH_MAX];
	struct account a;
	struct stat st;

	/* a state directory sandboxd never saw: made 0700, the store in it */
	write_password(pwf, "a good password\nsecond line\n", 0600);
	const char *create[] = {
		"admin", "create", "Root@Example.com", "--password-file", pwf, "--state-dir",
		sdir,    NULL
	};
	assert_int_equal(harness_run_checked(bin, create, NULL, &out), 0);
	harness_expect_in(out, "created admin root@example.com (usr_");
	harness_expect_not_in(out, "a good password");
	free(out);
	assert_int_equal(stat(sdir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(store_open(db, &s), 0);
	assert_int_equal(account_get_by_email(s, "root@example.com", &a, hash), 0);
	assert_int_equal(a.role, ROLE_ADMIN);
	assert_true(account_verify_password(hash, "a good password", 15)); /* the first line */

	const char *user[] = { "admin",           "create", "u@example.com", "--role", "user",
		               "--password-file", pwf,      "--state-dir",   sdir,     NULL };
	assert_int_equal(harness_run_checked(bin, user, NULL, &out), 0);
	harness_expect_in(out, "created user u@example.com");
	free(out);
	const char *list[] = { "admin", "list", "--state-dir", sdir, NULL };
	assert_int_equal(harness_run_checked(bin, list, NULL, &out), 0);
	harness_expect_in(out, "root@example.com");
	harness_expect_in(out, "u@example.com");
	harness_expect_in(out, a.id);
	free(out);

	/* taken; a file others may read; no file and no terminal; a password in argv */
	assert_int_equal(harness_run_checked(bin, create, NULL, &out), 1);
	harness_expect_in(out, "already has an account");
	free(out);
	write_password(pwf, "a good password\n", 0644);
	create[2] = "other@example.com";
	assert_int_equal(harness_run_checked(bin, create, NULL, &out), 1);
	harness_expect_in(out, "chmod 600");
	free(out);
	const char *no_file[] = { "admin", "create", "x@example.com", "--state-dir", sdir, NULL };
	assert_int_equal(harness_run_checked(bin, no_file, NULL, &out), 1);
	harness_expect_in(out, "--password-file");
	free(out);
	const char *argv_pw[] = {
		"admin", "create", "x@example.com", "a good password", "--state-dir", sdir, NULL
	};
	assert_int_equal(harness_run_checked(bin, argv_pw, NULL, &out), 2);
	harness_expect_in(out, "exactly one EMAIL");
	free(out);
	write_password(pwf, "short\n", 0600);
	assert_int_equal(harness_run_checked(bin, create, NULL, &out), 1);
	harness_expect_in(out, "at least 10 bytes");
	free(out);
	/* a state directory open to others is refused, as sandboxd refuses it */
	write_password(pwf, "a good password\n", 0600);
	assert_int_equal(chmod(sdir, 0755), 0);
	assert_int_equal(harness_run_checked(bin, create, NULL, &out), 1);
	harness_expect_in(out, "chmod 700");
	free(out);
	assert_int_equal(chmod(sdir, 0700), 0);
	assert_int_equal(account_get_by_email(s, "x@example.com", &a, NULL), -ENOENT);
	assert_int_equal(account_get_by_email(s, "other@example.com", &a, NULL), -ENOENT);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_email),
		cmocka_unit_test(test_password_check),
		cmocka_unit_test(test_hash),
		cmocka_unit_test_setup_teardown(test_users, setup, teardown),
		cmocka_unit_test_setup_teardown(test_user_list_survives_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sessions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sessions_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lookups_end_their_reads, setup, teardown),
		cmocka_unit_test(test_cookie_find),
		cmocka_unit_test(test_key_parse),
		cmocka_unit_test(test_ratelimit),
		cmocka_unit_test(test_ratelimit_forgive),
		cmocka_unit_test(test_pool),
		cmocka_unit_test_setup_teardown(test_admin_command, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
