/* test-ownership.c: the rules of accounts as a person meets them, against sandboxd-fake over its
 * unix socket, each user presenting their own credential (an API key or the dashboard's
 * session cookie): another user's sandbox answers byte for byte like a missing one, names
 * resolve among the caller's own, the owner comes from the credential, an admin supervises
 * but never launches, caps refuse before the backend starts anything, revoking a key or a
 * session (logout, a disabled user) closes its open streams before the answer, sessions carry
 * their cookie flags, CSRF and rate limits, registration is off unless turned on, keys are
 * shown once, and a sandbox's env values are never returned or logged.
 *
 * What the backend was asked to start is read from the fake's calls.log
 * (tests/fake/fake-backend.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define SECRET_VALUE "s3cr3t-value"

/* the main daemon, and the one the registration case starts; cur is the one in use */
static struct daemon_proc daemons[2];
static struct daemon_proc *cur = &daemons[0];
static const char *fake_bin;

struct who {
	const char *email;
	const char *password;
	char id[40];       /* usr_... */
	char cookie[256];  /* "sandboxd_session=..." */
	char csrf[160];    /* from the login */
	char key[160];     /* "sbk_..." */
	char key_id[64];   /* its id in /v1/keys */
	char hkey[256];    /* "Authorization: Bearer KEY\r\n" */
	char hsess[512];   /* the cookie and the CSRF token */
	char hcookie[300]; /* the cookie alone */
};

static struct who alice = { .email = "alice@example.com", .password = "alice-password-1" };
static struct who bob = { .email = "bob@example.com", .password = "bob-password-22" };
static struct who boss = { .email = "boss@example.com", .password = "boss-password-333" };
static struct who carol = { .email = "carol@example.com", .password = "carol-password-4" };
static struct who dave = { .email = "dave@example.com", .password = "dave-password-55" };

/* What the first test left for the later ones. */
static char a_box[40];  /* alice's running sandbox "a-box" */
static char a_gone[40]; /* alice's terminated one */
static char b_box[40];  /* bob's sandbox, also named "a-box" */

static bool
streq_safe(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

/* ---- requests ---- */

/* A request with the headers hdrs; fails the test unless the status is want. Returns the
 * parsed body (NULL when empty) and, when ret_head is given, the response head. */
static json_t *
call_as(const char *hdrs, const char *method, const char *path, const char *body, int want,
        char **ret_head)
{
	return harness_json_headers(cur->sock, hdrs, method, path, body, want, ret_head);
}

static const char *
err_code(json_t *j)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), "code"));
}

static const char *
err_message(json_t *j)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), "message"));
}

/* Expects an error with status want and code. */
static void
expect_error(const char *hdrs, const char *method, const char *path, const char *body, int want,
             const char *code)
{
	json_t *j = call_as(hdrs, method, path, body, want, NULL);

	if (!streq_safe(err_code(j), code))
		fail_msg("%s %s: expected error code %s, got %s", method, path, code,
		         err_code(j) ? err_code(j) : "(none)");
	json_decref(j);
}

/* The whole answer, head and body, as the client sees it. */
static char *
raw_answer(const char *hdrs, const char *method, const char *path, const char *body)
{
	char *head = NULL, *out = NULL, *all;

	(void)harness_http_headers(cur->sock, method, path, hdrs, body, &head, &out);
	assert_non_null(head);
	assert_non_null(out);
	all = strdup_printf("%s\r\n\r\n%s", head, out);
	assert_non_null(all);
	free(head);
	free(out);
	return all;
}

/* s with every from replaced by to (a new string). */
static char *
replace_all(const char *s, const char *from, const char *to)
{
	size_t nf = strlen(from), nt = strlen(to), n = 0;
	const char *q;
	char *out, *w;

	for (q = s; (q = strstr(q, from)); q += nf)
		n++;
	out = malloc(strlen(s) + n * nt + 1);
	assert_non_null(out);
	for (w = out, q = s;;) {
		const char *hit = strstr(q, from);
		if (!hit) {
			memcpy(w, q, strlen(q) + 1);
			break;
		}
		memcpy(w, q, (size_t)(hit - q));
		w += hit - q;
		memcpy(w, to, nt);
		w += nt;
		q = hit + nf;
	}
	return out;
}

static void
random_id(char *out, size_t size)
{
	unsigned char b[8];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(read(fd, b, sizeof(b)), (ssize_t)sizeof(b));
	close(fd);
	snprintf(out, size, "sbx_%02x%02x%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4],
	         b[5], b[6], b[7]);
}

/* The fake backend's start and restart calls so far (calls.log), optionally for one id. */
static int
backend_starts(const char *id)
{
	char path[400], line[256];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "%s/fake/calls.log", cur->state);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		const char *rest = NULL;
		if (strncmp(line, "start ", 6) == 0)
			rest = line + 6;
		else if (strncmp(line, "restart ", 8) == 0)
			rest = line + 8;
		if (rest && (!id || strncmp(rest, id, strlen(id)) == 0))
			n++;
	}
	fclose(f);
	return n;
}

/* How many sandboxes a list answer holds (the caller's view). */
static size_t
list_count(const char *hdrs)
{
	json_t *j = call_as(hdrs, "GET", "/v1/sandboxes", NULL, 200, NULL);
	size_t n = json_array_size(json_object_get(j, "sandboxes"));

	json_decref(j);
	return n;
}

static bool
list_has(const char *hdrs, const char *id)
{
	json_t *j = call_as(hdrs, "GET", "/v1/sandboxes", NULL, 200, NULL), *sb;
	size_t i;
	bool found = false;

	json_array_foreach (json_object_get(j, "sandboxes"), i, sb)
		found |= streq_safe(harness_str(sb, "id"), id);
	json_decref(j);
	return found;
}

/* Polls the sandbox (as hdrs) until it is in state want. */
static void
await_state(const char *hdrs, const char *id, const char *want)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	for (int i = 0; i < 200; i++) {
		json_t *j = call_as(hdrs, "GET", path, NULL, 200, NULL);
		bool done = streq_safe(harness_str(j, "state"), want);
		json_decref(j);
		if (done)
			return;
		usleep(50000);
	}
	fail_msg("sandbox %s never became %s", id, want);
}

/* ---- people ---- */

static void
set_headers(struct who *w)
{
	snprintf(w->hkey, sizeof(w->hkey), "Authorization: Bearer %s\r\n", w->key);
	snprintf(w->hcookie, sizeof(w->hcookie), "Cookie: %s\r\n", w->cookie);
	snprintf(w->hsess, sizeof(w->hsess), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", w->cookie,
	         w->csrf);
}

/* POST /v1/auth/login; fills the cookie and the CSRF token. Returns the answer's head. */
static char *
login(struct who *w)
{
	_cleanup_free_ char *body =
	        strdup_printf("{\"email\":\"%s\",\"password\":\"%s\"}", w->email, w->password);
	char *head = NULL, *cookie, *semi;
	json_t *j = call_as(NULL, "POST", "/v1/auth/login", body, 200, &head);

	assert_non_null(j);
	assert_string_equal(harness_str(json_object_get(j, "user"), "email"), w->email);
	assert_non_null(harness_str(j, "csrf_token"));
	snprintf(w->csrf, sizeof(w->csrf), "%s", harness_str(j, "csrf_token"));
	cookie = harness_header(head, "Set-Cookie");
	if (!cookie)
		fail_msg("the login set no cookie:\n%s", head);
	semi = strchr(cookie, ';');
	if (semi)
		*semi = '\0';
	assert_true(strncmp(cookie, "sandboxd_session=", 17) == 0 && cookie[17]);
	snprintf(w->cookie, sizeof(w->cookie), "%s", cookie);
	free(cookie);
	set_headers(w);
	json_decref(j);
	return head;
}

/* A new API key for w (by its session); returns the answer. */
static json_t *
new_key(struct who *w, const char *name)
{
	_cleanup_free_ char *body = strdup_printf("{\"name\":\"%s\"}", name);

	return call_as(w->hsess, "POST", "/v1/keys", body, 201, NULL);
}

static void
login_with_key(struct who *w)
{
	json_t *k;

	free(login(w));
	k = new_key(w, "cli");
	snprintf(w->key, sizeof(w->key), "%s", harness_str(k, "key"));
	snprintf(w->key_id, sizeof(w->key_id), "%s", harness_str(k, "id"));
	json_decref(k);
	set_headers(w);
}

/* The operator creates w over the API (the unix-socket peer is the operator). */
static void
create_by_api(struct who *w, const char *role)
{
	_cleanup_free_ char *body =
	        strdup_printf("{\"email\":\"%s\",\"password\":\"%s\",\"role\":\"%s\"}", w->email,
	                      w->password, role);
	json_t *j = call_as(NULL, "POST", "/v1/users", body, 201, NULL);

	assert_string_equal(harness_str(j, "email"), w->email);
	assert_string_equal(harness_str(j, "role"), role);
	assert_true(json_is_false(json_object_get(j, "disabled")));
	assert_true(strncmp(harness_str(j, "id"), "usr_", 4) == 0);
	snprintf(w->id, sizeof(w->id), "%s", harness_str(j, "id"));
	json_decref(j);
}

/* The id of the user with this email in GET /v1/users (as the operator), or "". */
static void
user_id_of(const char *email, char *out, size_t size)
{
	json_t *j = call_as(NULL, "GET", "/v1/users", NULL, 200, NULL), *u;
	size_t i;

	out[0] = '\0';
	json_array_foreach (json_object_get(j, "users"), i, u)
		if (streq_safe(harness_str(u, "email"), email))
			snprintf(out, size, "%s", harness_str(u, "id"));
	json_decref(j);
}

/* `sandboxd admin create` on the running daemon's state, the password from a 0600 file. */
static void
create_by_command(struct who *w, const char *role)
{
	_cleanup_free_ char *pwfile = strdup_printf("%s/pw-%s", cur->dir, role);
	_cleanup_free_ char *line = strdup_printf("%s\n", w->password);
	char *out = NULL;
	int fd, rc;

	fd = open(pwfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, line, strlen(line)), (ssize_t)strlen(line));
	close(fd);
	const char *args[] = { "admin",           "create", w->email,      "--role",   role,
		               "--password-file", pwfile,   "--state-dir", cur->state, NULL };
	rc = harness_run_checked(fake_bin, args, NULL, &out);
	if (rc != 0)
		fail_msg("sandboxd admin create %s --role %s: exit %d:\n%s", w->email, role, rc,
		         out);
	/* the password never shows */
	harness_expect_not_in(out, w->password);
	free(out);
	unlink(pwfile);
	user_id_of(w->email, w->id, sizeof(w->id));
	if (!w->id[0])
		fail_msg("%s made by 'sandboxd admin create' is not in GET /v1/users", w->email);
}

/* Everyone the tests need, once: alice and carol by the operator's API, bob and the admin
 * by the command. */
static void
people(void)
{
	static int done; /* 1: made, -1: making them failed (the first case says why) */

	if (done < 0)
		fail_msg("the users could not be made (see the first case that failed)");
	if (done)
		return;
	done = -1;
	create_by_api(&alice, "user");
	create_by_command(&bob, "user");
	create_by_command(&boss, "admin");
	create_by_api(&carol, "user");
	login_with_key(&alice);
	login_with_key(&bob);
	login_with_key(&boss);
	login_with_key(&carol);
	done = 1;
}

/* ---- streams ---- */

struct stream {
	int fd;
	char *buf;
	size_t len;
};

/* Opens GET /v1/events/stream as hdrs and waits for its first line. */
static void
stream_open(struct stream *s, const char *hdrs)
{
	*s = (struct stream){ .fd = harness_stream_open(cur->sock, "GET", "/v1/events/stream",
		                                        hdrs) };
	assert_true(s->fd >= 0);
	(void)harness_stream_read(s->fd, 5000, "retry:", &s->buf, &s->len);
	if (!strstr(s->buf, "HTTP/1.1 200") || !strstr(s->buf, "retry:"))
		fail_msg("the event stream did not start:\n%s", s->buf);
}

static void
stream_close(struct stream *s)
{
	if (s->fd >= 0)
		close(s->fd);
	free(s->buf);
	*s = (struct stream){ .fd = -1 };
}

/* Whether the stream was closed by sandboxd by now (a short read: the close must already
 * have happened when the call that ends it answered). */
static bool
stream_ended(struct stream *s)
{
	return harness_stream_read(s->fd, 300, NULL, &s->buf, &s->len) == 1;
}

/* ---- the daemon ---- */

static int
setup(void **state)
{
	fake_bin = harness_binary("SANDBOXD_FAKE");
	return harness_start(&daemons[0], fake_bin, NULL, NULL);
}

static int
teardown(void **state)
{
	int rc = harness_stop(&daemons[0], SIGTERM);

	harness_cleanup(&daemons[0]);
	return rc == 0 ? 0 : -1;
}

/* The TLS case's certificates and token. */
static char tls_dir[256];

/* After a case with a daemon of its own, even a failed one. */
static int
back_to_main(void **state)
{
	harness_cleanup(&daemons[1]);
	cur = &daemons[0];
	if (tls_dir[0] && !getenv("HARNESS_KEEP")) {
		_cleanup_free_ char *cmd = strdup_printf("rm -rf '%s'", tls_dir);
		if (!cmd || system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", tls_dir);
	}
	tls_dir[0] = '\0';
	return 0;
}

/* ---- the cases ---- */

/* Every route bob might try on alice's sandbox, with {ref} where the ref goes. */
static const struct {
	const char *method, *path, *body;
} probes[] = {
	{ "GET", "/v1/sandboxes/{ref}", NULL },
	{ "PATCH", "/v1/sandboxes/{ref}", "{\"labels\":{\"taken\":\"yes\"}}" },
	{ "POST", "/v1/sandboxes/{ref}/stop", NULL },
	{ "POST", "/v1/sandboxes/{ref}/start", NULL },
	{ "POST", "/v1/sandboxes/{ref}/run", "{\"argv\":[\"true\"]}" },
	{ "GET", "/v1/sandboxes/{ref}/processes", NULL },
	{ "POST", "/v1/sandboxes/{ref}/processes", "{\"argv\":[\"sleep\",\"9\"]}" },
	{ "GET", "/v1/sandboxes/{ref}/processes/1", NULL },
	{ "GET", "/v1/sandboxes/{ref}/processes/1/output", NULL },
	{ "GET", "/v1/sandboxes/{ref}/files?path=/etc/hostname", NULL },
	{ "PUT", "/v1/sandboxes/{ref}/files?path=/tmp/x", NULL },
	{ "DELETE", "/v1/sandboxes/{ref}/files?path=/tmp/x", NULL },
	{ "GET", "/v1/sandboxes/{ref}/dirs?path=/", NULL },
	{ "GET", "/v1/sandboxes/{ref}/events", NULL },
	{ "GET", "/v1/sandboxes/{ref}/metrics", NULL },
	{ "DELETE", "/v1/sandboxes/{ref}", NULL },
};

/* bob's answer about theirs (alice's id or name) is the answer about missing (nothing by
 * that ref), byte for byte, once the ref itself is put in its place. */
static void
expect_like_missing(const char *hdrs, const char *theirs, const char *missing)
{
	/* of one length, so that Content-Length is the same too */
	assert_int_equal(strlen(theirs), strlen(missing));
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		_cleanup_free_ char *pa = replace_all(probes[i].path, "{ref}", theirs);
		_cleanup_free_ char *pm = replace_all(probes[i].path, "{ref}", missing);
		_cleanup_free_ char *a = raw_answer(hdrs, probes[i].method, pa, probes[i].body);
		_cleanup_free_ char *m = raw_answer(hdrs, probes[i].method, pm, probes[i].body);
		_cleanup_free_ char *m2 = replace_all(m, missing, theirs);

		if (strncmp(a, "HTTP/1.1 404 ", 13) != 0 || strcmp(a, m2) != 0)
			fail_msg("%s %s as another user is not answered like a missing sandbox:\n"
			         "---- theirs ----\n%s\n---- missing ----\n%s",
			         probes[i].method, pa, a, m);
	}
}

static void
test_another_users_sandbox_is_missing(void **state)
{
	char missing[40], path[128];
	struct stream sa, sb, sadmin;
	json_t *j;

	people();
	j = call_as(alice.hkey, "POST", "/v1/sandboxes", "{\"name\":\"a-box\"}", 201, NULL);
	assert_string_equal(harness_str(j, "state"), "running");
	assert_string_equal(harness_str(j, "owner"), alice.email);
	snprintf(a_box, sizeof(a_box), "%s", harness_str(j, "id"));
	json_decref(j);
	j = call_as(alice.hkey, "POST", "/v1/sandboxes", "{\"name\":\"a-gone\"}", 201, NULL);
	snprintf(a_gone, sizeof(a_gone), "%s", harness_str(j, "id"));
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", a_gone);
	json_decref(call_as(alice.hkey, "DELETE", path, NULL, 204, NULL));
	/* alice still sees her terminated one by id */
	json_decref(call_as(alice.hkey, "GET", path, NULL, 200, NULL));

	random_id(missing, sizeof(missing));
	/* by id (live and terminated) and by name, with a key and with the session cookie */
	expect_like_missing(bob.hkey, a_box, missing);
	expect_like_missing(bob.hkey, a_gone, missing);
	expect_like_missing(bob.hkey, "a-box", "n-box");
	expect_like_missing(bob.hsess, a_box, missing);

	/* nothing bob tried reached alice's sandbox */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", a_box);
	j = call_as(alice.hkey, "GET", path, NULL, 200, NULL);
	assert_string_equal(harness_str(j, "state"), "running");
	assert_null(json_object_get(json_object_get(j, "labels"), "taken"));
	json_decref(j);
	assert_int_equal(backend_starts(a_box), 1);

	/* nor is it in bob's list */
	assert_false(list_has(bob.hkey, a_box));
	assert_false(list_has(bob.hkey, a_gone));
	assert_true(list_has(alice.hkey, a_box));

	/* and bob's event stream says nothing of it while it changes */
	stream_open(&sa, alice.hkey);
	stream_open(&sb, bob.hkey);
	stream_open(&sadmin, boss.hcookie);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", a_box);
	json_decref(call_as(alice.hkey, "POST", path, NULL, 200, NULL));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", a_box);
	json_decref(call_as(alice.hkey, "POST", path, NULL, 200, NULL));
	await_state(alice.hkey, a_box, "running");
	/* bob's own change comes after alice's: once his stream shows it, hers would have come */
	j = call_as(bob.hkey, "POST", "/v1/sandboxes", "{\"name\":\"b-marker\"}", 201, NULL);
	{
		_cleanup_free_ char *marker = strdup_printf("%s", harness_str(j, "id"));
		_cleanup_free_ char *del = strdup_printf("/v1/sandboxes/%s", marker);
		json_decref(call_as(bob.hkey, "DELETE", del, NULL, 204, NULL));
		/* only the marker ends here */
		(void)harness_stream_read(sb.fd, 5000, "\"to\":\"terminated\"", &sb.buf, &sb.len);
		harness_expect_in(sb.buf, marker);
		(void)harness_stream_read(sadmin.fd, 5000, "\"to\":\"terminated\"", &sadmin.buf,
		                          &sadmin.len);
		harness_expect_in(sadmin.buf, marker);
	}
	json_decref(j);
	(void)harness_stream_read(sa.fd, 2000, "\"to\":\"running\"", &sa.buf, &sa.len);
	harness_expect_in(sa.buf, a_box);
	harness_expect_in(sa.buf, "\"to\":\"stopped\"");
	harness_expect_not_in(sb.buf, a_box);
	harness_expect_not_in(sb.buf, alice.email);
	/* the admin's stream shows both */
	harness_expect_in(sadmin.buf, a_box);
	stream_close(&sa);
	stream_close(&sb);
	stream_close(&sadmin);
}

static void
test_names_resolve_among_the_callers_own(void **state)
{
	json_t *j;

	people();
	assert_true(a_box[0]);
	j = call_as(bob.hkey, "POST", "/v1/sandboxes", "{\"name\":\"a-box\"}", 201, NULL);
	snprintf(b_box, sizeof(b_box), "%s", harness_str(j, "id"));
	assert_string_not_equal(b_box, a_box);
	assert_string_equal(harness_str(j, "owner"), bob.email);
	json_decref(j);
	j = call_as(bob.hkey, "GET", "/v1/sandboxes/a-box", NULL, 200, NULL);
	assert_string_equal(harness_str(j, "id"), b_box);
	json_decref(j);
	j = call_as(alice.hkey, "GET", "/v1/sandboxes/a-box", NULL, 200, NULL);
	assert_string_equal(harness_str(j, "id"), a_box);
	json_decref(j);
	/* and a name stays taken among one's own */
	expect_error(alice.hkey, "POST", "/v1/sandboxes", "{\"name\":\"a-box\"}", 409, "conflict");
}

static void
test_owner_comes_from_the_credential(void **state)
{
	size_t before;
	int starts;
	json_t *j;

	people();
	before = list_count(NULL);
	starts = backend_starts(NULL);
	expect_error(alice.hkey, "POST", "/v1/sandboxes",
	             "{\"name\":\"mine\",\"owner\":\"bob@example.com\"}", 400, "invalid_request");
	expect_error(alice.hsess, "POST", "/v1/sandboxes", "{\"owner\":\"operator\"}", 400,
	             "invalid_request");
	expect_error(NULL, "POST", "/v1/sandboxes", "{\"owner\":\"alice@example.com\"}", 400,
	             "invalid_request");
	assert_int_equal(list_count(NULL), before);
	assert_int_equal(backend_starts(NULL), starts);

	/* by the session cookie too, and the operator's own */
	j = call_as(alice.hsess, "POST", "/v1/sandboxes", "{\"name\":\"by-cookie\"}", 201, NULL);
	assert_string_equal(harness_str(j, "owner"), alice.email);
	{
		_cleanup_free_ char *del = strdup_printf("/v1/sandboxes/%s", harness_str(j, "id"));
		json_decref(call_as(alice.hsess, "DELETE", del, NULL, 204, NULL));
	}
	json_decref(j);
	j = call_as(NULL, "POST", "/v1/sandboxes", "{\"name\":\"by-operator\"}", 201, NULL);
	assert_string_equal(harness_str(j, "owner"), "operator");
	{
		_cleanup_free_ char *del = strdup_printf("/v1/sandboxes/%s", harness_str(j, "id"));
		json_decref(call_as(NULL, "DELETE", del, NULL, 204, NULL));
	}
	json_decref(j);

	/* emails are lowercased once, and that is the owner */
	{
		json_t *u =
		        call_as(NULL, "POST", "/v1/users",
		                "{\"email\":\"Erin@Example.COM\",\"password\":\"erin-password-6\"}",
		                201, NULL);
		assert_string_equal(harness_str(u, "email"), "erin@example.com");
		assert_string_equal(harness_str(u, "role"), "user");
		json_decref(u);
		json_t *l =
		        call_as(NULL, "POST", "/v1/auth/login",
		                "{\"email\":\"ERIN@example.com\",\"password\":\"erin-password-6\"}",
		                200, NULL);
		assert_string_equal(harness_str(json_object_get(l, "user"), "email"),
		                    "erin@example.com");
		json_decref(l);
		/* the same address twice is taken */
		expect_error(NULL, "POST", "/v1/users",
		             "{\"email\":\"erin@EXAMPLE.com\",\"password\":\"erin-password-6\"}",
		             409, "conflict");
	}

	/* caps given at creation apply at once (null: the server's default); caps out of range
	 * create nobody */
	{
		json_t *u =
		        call_as(NULL, "POST", "/v1/users",
		                "{\"email\":\"finn@example.com\",\"password\":\"finn-password-7\","
		                "\"caps\":{\"max_sandboxes\":2,\"max_cpus\":null}}",
		                201, NULL);
		json_t *caps = json_object_get(u, "caps"), *list, *one;
		size_t i;
		bool seen = false;

		assert_int_equal(json_integer_value(json_object_get(caps, "max_sandboxes")), 2);
		assert_int_equal(json_integer_value(json_object_get(caps, "max_cpus")), 8);
		assert_int_equal(json_integer_value(json_object_get(caps, "max_memory_mb")), 16384);
		json_decref(u);
		expect_error(NULL, "POST", "/v1/users",
		             "{\"email\":\"gus@example.com\",\"password\":\"gus-password-88\","
		             "\"caps\":{\"max_sandboxes\":-1}}",
		             400, "invalid_request");
		list = call_as(NULL, "GET", "/v1/users", NULL, 200, NULL);
		json_array_foreach (json_object_get(list, "users"), i, one) {
			assert_false(streq_safe(harness_str(one, "email"), "gus@example.com"));
			if (streq_safe(harness_str(one, "email"), "finn@example.com"))
				seen = json_integer_value(json_object_get(
				               json_object_get(one, "caps"), "max_sandboxes")) == 2;
		}
		assert_true(seen);
		json_decref(list);
	}
}

static void
test_admin_supervises_but_never_launches(void **state)
{
	char path[128];
	size_t before;
	int starts;
	json_t *j, *sb;
	size_t i;
	bool saw_alice = false, saw_bob = false;

	people();
	assert_true(a_box[0] && b_box[0]);
	/* every sandbox, with its owner */
	j = call_as(boss.hsess, "GET", "/v1/sandboxes", NULL, 200, NULL);
	json_array_foreach (json_object_get(j, "sandboxes"), i, sb) {
		assert_non_null(harness_str(sb, "owner"));
		if (streq_safe(harness_str(sb, "id"), a_box)) {
			assert_string_equal(harness_str(sb, "owner"), alice.email);
			saw_alice = true;
		}
		if (streq_safe(harness_str(sb, "id"), b_box)) {
			assert_string_equal(harness_str(sb, "owner"), bob.email);
			saw_bob = true;
		}
	}
	assert_true(saw_alice && saw_bob);
	before = json_array_size(json_object_get(j, "sandboxes"));
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", a_box);
	j = call_as(boss.hkey, "GET", path, NULL, 200, NULL);
	assert_string_equal(harness_str(j, "owner"), alice.email);
	json_decref(j);

	/* refused on launch, with the cookie and with a key; nothing made, nothing started */
	starts = backend_starts(NULL);
	j = call_as(boss.hsess, "POST", "/v1/sandboxes", "{\"name\":\"boss-box\"}", 403, NULL);
	assert_string_equal(err_code(j), "refused");
	json_decref(j);
	expect_error(boss.hkey, "POST", "/v1/sandboxes", "{\"name\":\"boss-box\",\"wait\":false}",
	             403, "refused");
	assert_int_equal(list_count(boss.hkey), before);
	assert_int_equal(list_count(NULL), before);
	assert_int_equal(backend_starts(NULL), starts);
	expect_error(boss.hkey, "GET", "/v1/sandboxes/boss-box", NULL, 404, "not_found");
	/* names resolve only among the caller's own: alice's and bob's "a-box" are both there,
	 * and the admin reaches each by its id, never one of them by the name */
	expect_error(boss.hkey, "GET", "/v1/sandboxes/a-box", NULL, 404, "not_found");
	expect_error(boss.hsess, "POST", "/v1/sandboxes/a-box/stop", NULL, 404, "not_found");

	/* supervises: stops and deletes someone else's */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/stop", b_box);
	j = call_as(boss.hsess, "POST", path, NULL, 200, NULL);
	assert_string_equal(harness_str(j, "state"), "stopped");
	json_decref(j);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", b_box);
	json_decref(call_as(boss.hkey, "DELETE", path, NULL, 204, NULL));
	j = call_as(bob.hkey, "GET", path, NULL, 200, NULL);
	assert_string_equal(harness_str(j, "state"), "terminated");
	json_decref(j);
}

static void
set_caps(const char *hdrs, const char *id, const char *caps)
{
	_cleanup_free_ char *path = strdup_printf("/v1/users/%s", id);
	_cleanup_free_ char *body = strdup_printf("{\"caps\":%s}", caps);

	json_decref(call_as(hdrs, "PATCH", path, body, 200, NULL));
}

/* Deletes every live sandbox carol has. */
static void
carol_clears(void)
{
	json_t *j = call_as(carol.hkey, "GET", "/v1/sandboxes", NULL, 200, NULL), *sb;
	size_t i;

	json_array_foreach (json_object_get(j, "sandboxes"), i, sb) {
		_cleanup_free_ char *path =
		        strdup_printf("/v1/sandboxes/%s", harness_str(sb, "id"));
		if (!streq_safe(harness_str(sb, "state"), "terminated"))
			json_decref(call_as(carol.hkey, "DELETE", path, NULL, 204, NULL));
	}
	json_decref(j);
}

/* carol's live sandboxes */
static size_t
carol_live(void)
{
	json_t *j = call_as(carol.hkey, "GET", "/v1/sandboxes", NULL, 200, NULL), *sb;
	size_t i, n = 0;

	json_array_foreach (json_object_get(j, "sandboxes"), i, sb)
		n += !streq_safe(harness_str(sb, "state"), "terminated");
	json_decref(j);
	return n;
}

static void
expect_cap_refusal(const char *body, const char *limit, const char *use)
{
	int starts = backend_starts(NULL);
	size_t live = carol_live();
	json_t *j = call_as(carol.hkey, "POST", "/v1/sandboxes", body, 403, NULL);

	assert_string_equal(err_code(j), "refused");
	if (!strstr(err_message(j), limit) || !strstr(err_message(j), use))
		fail_msg("the cap refusal should name the limit ('%s') and the use ('%s'): %s",
		         limit, use, err_message(j));
	json_decref(j);
	assert_int_equal(carol_live(), live);
	assert_int_equal(backend_starts(NULL), starts);
}

static void
test_caps_refuse_before_anything_starts(void **state)
{
	char path[160];
	char first[40];
	int starts;
	json_t *j, *u;

	people();
	/* the admin sets carol's cap; USER shows it */
	snprintf(path, sizeof(path), "/v1/users/%s", carol.id);
	u = call_as(boss.hsess, "PATCH", path, "{\"caps\":{\"max_sandboxes\":2}}", 200, NULL);
	assert_int_equal(
	        json_integer_value(json_object_get(json_object_get(u, "caps"), "max_sandboxes")),
	        2);
	json_decref(u);

	/* two creates still booting (fake/slow takes 2 s) count */
	starts = backend_starts(NULL);
	for (int i = 0; i < 2; i++) {
		j = call_as(carol.hkey, "POST", "/v1/sandboxes",
		            "{\"image\":\"fake/slow\",\"wait\":false}", 201, NULL);
		assert_true(streq_safe(harness_str(j, "state"), "pending") ||
		            streq_safe(harness_str(j, "state"), "starting"));
		json_decref(j);
	}
	assert_int_equal(backend_starts(NULL), starts + 2);
	expect_cap_refusal("{\"image\":\"fake/slow\",\"wait\":false}", "at most 2", "have 2");
	expect_cap_refusal("{\"name\":\"third\"}", "at most 2", "have 2");
	/* whoami tells carol where she stands */
	j = call_as(carol.hkey, "GET", "/v1/whoami", NULL, 200, NULL);
	assert_string_equal(harness_str(j, "user"), carol.email);
	assert_string_equal(harness_str(j, "role"), "user");
	assert_int_equal(
	        json_integer_value(json_object_get(json_object_get(j, "caps"), "max_sandboxes")),
	        2);
	assert_int_equal(
	        json_integer_value(json_object_get(json_object_get(j, "usage"), "sandboxes")), 2);
	json_decref(j);
	carol_clears();

	/* cpus */
	set_caps(NULL, carol.id, "{\"max_sandboxes\":null,\"max_cpus\":1}");
	json_decref(call_as(carol.hkey, "POST", "/v1/sandboxes", "{\"cpus\":1}", 201, NULL));
	expect_cap_refusal("{\"cpus\":1}", "at most 1 cpu", "use 1");
	carol_clears();

	/* memory */
	set_caps(NULL, carol.id, "{\"max_cpus\":null,\"max_memory_mb\":1024}");
	json_decref(call_as(carol.hkey, "POST", "/v1/sandboxes", "{\"memory_mb\":512}", 201, NULL));
	json_decref(call_as(carol.hkey, "POST", "/v1/sandboxes", "{\"memory_mb\":512}", 201, NULL));
	expect_cap_refusal("{\"memory_mb\":256}", "at most 1024", "use 1024");
	carol_clears();

	/* a stopped one does not count, but starting it again past the cap is refused */
	set_caps(NULL, carol.id, "{\"max_memory_mb\":null,\"max_sandboxes\":1}");
	j = call_as(carol.hkey, "POST", "/v1/sandboxes", "{\"name\":\"first\"}", 201, NULL);
	snprintf(first, sizeof(first), "%s", harness_str(j, "id"));
	json_decref(j);
	json_decref(call_as(carol.hkey, "POST", "/v1/sandboxes/first/stop", NULL, 200, NULL));
	json_decref(
	        call_as(carol.hkey, "POST", "/v1/sandboxes", "{\"name\":\"second\"}", 201, NULL));
	starts = backend_starts(first);
	j = call_as(carol.hkey, "POST", "/v1/sandboxes/first/start", NULL, 403, NULL);
	assert_string_equal(err_code(j), "refused");
	harness_expect_in(err_message(j), "at most 1");
	json_decref(j);
	assert_int_equal(backend_starts(first), starts);
	/* nor can an admin start it for her: the owner's caps apply whoever starts it */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/start", first);
	j = call_as(boss.hsess, "POST", path, NULL, 403, NULL);
	assert_string_equal(err_code(j), "refused");
	harness_expect_in(err_message(j), "at most 1");
	harness_expect_in(err_message(j), carol.email);
	json_decref(j);
	assert_int_equal(backend_starts(first), starts);
	j = call_as(carol.hkey, "GET", "/v1/sandboxes/first", NULL, 200, NULL);
	assert_string_equal(harness_str(j, "state"), "stopped");
	json_decref(j);
	carol_clears();
	set_caps(NULL, carol.id, "{\"max_sandboxes\":null}");
}

static void
test_revoking_a_key_closes_its_streams(void **state)
{
	struct stream revoked, other;
	char hdr[256], path[128];
	json_t *k, *l, *e;
	size_t i;

	people();
	k = new_key(&alice, "revoke-me");
	snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s\r\n", harness_str(k, "key"));
	snprintf(path, sizeof(path), "/v1/keys/%s", harness_str(k, "id"));
	json_decref(call_as(hdr, "GET", "/v1/whoami", NULL, 200, NULL));
	stream_open(&revoked, hdr);
	stream_open(&other, alice.hkey);

	json_decref(call_as(alice.hsess, "DELETE", path, NULL, 204, NULL));
	if (!stream_ended(&revoked))
		fail_msg("the revoked key's event stream was still open after DELETE answered");
	/* alice's other key keeps its stream */
	assert_int_equal(harness_stream_read(other.fd, 200, NULL, &other.buf, &other.len), 0);
	expect_error(hdr, "GET", "/v1/whoami", NULL, 401, "unauthorized");
	expect_error(hdr, "GET", "/v1/sandboxes", NULL, 401, "unauthorized");
	/* gone from the list; deleting it again is 404 */
	l = call_as(alice.hsess, "GET", "/v1/keys", NULL, 200, NULL);
	json_array_foreach (json_object_get(l, "keys"), i, e)
		assert_string_not_equal(harness_str(e, "id"), harness_str(k, "id"));
	json_decref(l);
	expect_error(alice.hsess, "DELETE", path, NULL, 404, "not_found");
	json_decref(call_as(alice.hkey, "GET", "/v1/whoami", NULL, 200, NULL));
	stream_close(&revoked);
	stream_close(&other);
	json_decref(k);
}

static void
test_logout_and_disable_end_streams(void **state)
{
	struct who second = alice;
	struct stream s2, s1, dk, dc;
	char *head = NULL, *cookie;
	char path[160], did[40];
	json_t *j;

	people();
	/* a second session of alice's; logging it out leaves the first alone */
	free(login(&second));
	assert_string_not_equal(second.cookie, alice.cookie);
	stream_open(&s2, second.hcookie);
	stream_open(&s1, alice.hcookie);
	expect_error(second.hcookie, "POST", "/v1/auth/logout", NULL, 403, "refused");
	json_decref(call_as(second.hsess, "POST", "/v1/auth/logout", NULL, 204, &head));
	if (!stream_ended(&s2))
		fail_msg("the logged-out session's event stream was still open after the logout");
	cookie = harness_header(head, "Set-Cookie");
	if (!cookie || !strstr(cookie, "sandboxd_session=;") || !strstr(cookie, "Max-Age=0"))
		fail_msg("the logout should clear the cookie: %s", cookie ? cookie : head);
	free(cookie);
	free(head);
	expect_error(second.hcookie, "GET", "/v1/whoami", NULL, 401, "unauthorized");
	expect_error(second.hsess, "POST", "/v1/keys", "{\"name\":\"x\"}", 401, "unauthorized");
	assert_int_equal(harness_stream_read(s1.fd, 200, NULL, &s1.buf, &s1.len), 0);
	json_decref(call_as(alice.hcookie, "GET", "/v1/whoami", NULL, 200, NULL));
	stream_close(&s2);
	stream_close(&s1);

	/* disabling dave ends his streams, his key and his session */
	create_by_api(&dave, "user");
	login_with_key(&dave);
	j = call_as(dave.hkey, "POST", "/v1/sandboxes", "{\"name\":\"d-box\"}", 201, NULL);
	snprintf(did, sizeof(did), "%s", harness_str(j, "id"));
	json_decref(j);
	stream_open(&dk, dave.hkey);
	stream_open(&dc, dave.hcookie);
	snprintf(path, sizeof(path), "/v1/users/%s", dave.id);
	j = call_as(boss.hsess, "PATCH", path, "{\"disabled\":true}", 200, NULL);
	assert_true(json_is_true(json_object_get(j, "disabled")));
	json_decref(j);
	if (!stream_ended(&dk))
		fail_msg("a disabled user's stream (by key) was still open after the PATCH "
		         "answered");
	if (!stream_ended(&dc))
		fail_msg("a disabled user's stream (by session) was still open after the PATCH "
		         "answered");
	expect_error(dave.hkey, "GET", "/v1/sandboxes", NULL, 401, "unauthorized");
	expect_error(dave.hcookie, "GET", "/v1/whoami", NULL, 401, "unauthorized");
	stream_close(&dk);
	stream_close(&dc);
	/* a disabled user's login is answered like a wrong password */
	{
		_cleanup_free_ char *body = strdup_printf("{\"email\":\"%s\",\"password\":\"%s\"}",
		                                          dave.email, dave.password);
		_cleanup_free_ char *a = raw_answer(NULL, "POST", "/v1/auth/login", body);
		_cleanup_free_ char *m = raw_answer(
		        NULL, "POST", "/v1/auth/login",
		        "{\"email\":\"nobody@example.com\",\"password\":\"dave-password-55\"}");
		assert_true(strncmp(a, "HTTP/1.1 401 ", 13) == 0);
		harness_expect_in(a, "wrong email or password");
		assert_string_equal(a, m);
	}

	/* deleting a user who owns a live sandbox is refused; after it is gone, it works */
	j = call_as(NULL, "DELETE", path, NULL, 409, NULL);
	assert_string_equal(err_code(j), "conflict");
	json_decref(j);
	{
		_cleanup_free_ char *del = strdup_printf("/v1/sandboxes/%s", did);
		json_decref(call_as(boss.hkey, "DELETE", del, NULL, 204, NULL));
	}
	json_decref(call_as(NULL, "DELETE", path, NULL, 204, NULL));
	{
		char gone[40];
		user_id_of(dave.email, gone, sizeof(gone));
		assert_string_equal(gone, "");
	}
}

static void
test_keys_are_shown_once(void **state)
{
	char missing_id[64], secret[64];
	const char *key, *last;
	json_t *k, *l, *e;
	size_t i;
	bool listed = false;

	people();
	k = new_key(&alice, "laptop");
	key = harness_str(k, "key");
	assert_non_null(key);
	/* sbk_<12 hex>_<43 base64url> */
	assert_int_equal(strlen(key), 4 + 12 + 1 + 43);
	assert_true(strncmp(key, "sbk_", 4) == 0 && key[16] == '_');
	for (i = 4; i < 16; i++)
		assert_non_null(strchr("0123456789abcdef", key[i]));
	for (i = 17; key[i]; i++)
		assert_non_null(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		                       "0123456789-_",
		                       key[i]));
	last = strrchr(key, '_');
	snprintf(secret, sizeof(secret), "%s", last + 1);
	assert_string_equal(harness_str(k, "name"), "laptop");
	assert_non_null(harness_str(k, "prefix"));
	assert_non_null(harness_str(k, "created_at"));

	/* the list never holds the secret, by session or by key */
	for (int round = 0; round < 2; round++) {
		char *out = NULL;
		int st = harness_http_headers(cur->sock, "GET", "/v1/keys",
		                              round ? alice.hkey : alice.hsess, NULL, NULL, &out);
		assert_int_equal(st, 200);
		harness_expect_not_in(out, secret);
		l = json_loads(out, 0, NULL);
		free(out);
		json_array_foreach (json_object_get(l, "keys"), i, e) {
			assert_null(json_object_get(e, "key"));
			listed |= streq_safe(harness_str(e, "id"), harness_str(k, "id"));
		}
		json_decref(l);
	}
	assert_true(listed);
	/* nor does bob's list show alice's keys */
	l = call_as(bob.hkey, "GET", "/v1/keys", NULL, 200, NULL);
	json_array_foreach (json_object_get(l, "keys"), i, e)
		assert_string_not_equal(harness_str(e, "id"), harness_str(k, "id"));
	json_decref(l);

	/* bob cannot delete it: answered like an unknown id */
	snprintf(missing_id, sizeof(missing_id), "%s", harness_str(k, "id"));
	missing_id[strlen(missing_id) - 1] = missing_id[strlen(missing_id) - 1] == '0' ? '1' : '0';
	{
		_cleanup_free_ char *pa = strdup_printf("/v1/keys/%s", harness_str(k, "id"));
		_cleanup_free_ char *pm = strdup_printf("/v1/keys/%s", missing_id);
		_cleanup_free_ char *a = raw_answer(bob.hsess, "DELETE", pa, NULL);
		_cleanup_free_ char *m = raw_answer(bob.hsess, "DELETE", pm, NULL);
		_cleanup_free_ char *m2 = replace_all(m, missing_id, harness_str(k, "id"));
		assert_true(strncmp(a, "HTTP/1.1 404 ", 13) == 0);
		assert_string_equal(a, m2);
		expect_error(bob.hkey, "DELETE", pa, NULL, 404, "not_found");
	}
	{
		char hdr[256];
		snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s\r\n", key);
		json_t *w = call_as(hdr, "GET", "/v1/whoami", NULL, 200, NULL);
		assert_string_equal(harness_str(w, "user"), alice.email);
		assert_string_equal(harness_str(w, "email"), alice.email);
		assert_string_equal(harness_str(w, "user_id"), alice.id);
		/* a key is no session: no CSRF token */
		assert_null(json_object_get(w, "csrf_token"));
		json_decref(w);
		/* the same id with another secret is refused, even on the unix socket */
		char forged[160];
		snprintf(
		        forged, sizeof(forged),
		        "Authorization: Bearer %.*sAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\r\n",
		        17, key);
		expect_error(forged, "GET", "/v1/whoami", NULL, 401, "unauthorized");
	}
	expect_error("Cookie: sandboxd_session=forged-value\r\n", "GET", "/v1/whoami", NULL, 401,
	             "unauthorized");
	/* the session's whoami carries its CSRF token */
	{
		json_t *w = call_as(alice.hcookie, "GET", "/v1/whoami", NULL, 200, NULL);
		assert_string_equal(harness_str(w, "csrf_token"), alice.csrf);
		json_decref(w);
	}
	/* the operator has no keys */
	expect_error(NULL, "POST", "/v1/keys", "{\"name\":\"op\"}", 403, "refused");
	json_decref(k);
}

static void
test_env_values_are_never_returned(void **state)
{
	struct stream sa, sadmin, sop;
	char path[160];
	char *out = NULL;
	json_t *j, *names;

	people();
	stream_open(&sa, alice.hkey);
	stream_open(&sadmin, boss.hcookie);
	stream_open(&sop, NULL);
	out = raw_answer(alice.hkey, "POST", "/v1/sandboxes",
	                 "{\"name\":\"with-secret\",\"env\":{\"API_TOKEN\":\"" SECRET_VALUE "\"}}");
	assert_true(strncmp(out, "HTTP/1.1 201 ", 13) == 0);
	harness_expect_not_in(out, SECRET_VALUE);
	j = json_loads(strstr(out, "\r\n\r\n") + 4, 0, NULL);
	free(out);
	names = json_object_get(j, "env_names");
	assert_int_equal(json_array_size(names), 1);
	assert_string_equal(json_string_value(json_array_get(names, 0)), "API_TOKEN");
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(j, "id"));
	json_decref(j);

	{
		const char *hdrs[] = { alice.hkey, alice.hsess, boss.hkey, NULL };
		for (int i = 0; i < 4; i++) {
			const char *h = i < 3 ? hdrs[i] : NULL;
			_cleanup_free_ char *ev = strdup_printf("%s/events", path);
			_cleanup_free_ char *g = raw_answer(h, "GET", path, NULL);
			_cleanup_free_ char *ls = raw_answer(h, "GET", "/v1/sandboxes", NULL);
			_cleanup_free_ char *es = raw_answer(h, "GET", ev, NULL);
			harness_expect_in(g, "API_TOKEN");
			harness_expect_not_in(g, SECRET_VALUE);
			harness_expect_in(ls, "API_TOKEN");
			harness_expect_not_in(ls, SECRET_VALUE);
			harness_expect_in(es, "API_TOKEN");
			harness_expect_not_in(es, SECRET_VALUE);
		}
	}
	json_decref(call_as(alice.hkey, "DELETE", path, NULL, 204, NULL));
	(void)harness_stream_read(sa.fd, 3000, "\"to\":\"terminated\"", &sa.buf, &sa.len);
	(void)harness_stream_read(sadmin.fd, 3000, "\"to\":\"terminated\"", &sadmin.buf,
	                          &sadmin.len);
	(void)harness_stream_read(sop.fd, 3000, "\"to\":\"terminated\"", &sop.buf, &sop.len);
	harness_expect_in(sa.buf, "API_TOKEN");
	harness_expect_in(sadmin.buf, "API_TOKEN");
	harness_expect_in(sop.buf, "API_TOKEN");
	harness_expect_not_in(sa.buf, SECRET_VALUE);
	harness_expect_not_in(sadmin.buf, SECRET_VALUE);
	harness_expect_not_in(sop.buf, SECRET_VALUE);
	stream_close(&sa);
	stream_close(&sadmin);
	stream_close(&sop);
	assert_false(harness_file_contains(cur->log, SECRET_VALUE));
	/* nor passwords, keys or session cookies */
	assert_false(harness_file_contains(cur->log, alice.password));
	assert_false(harness_file_contains(cur->log, alice.key + 17));
	assert_false(harness_file_contains(cur->log, strchr(alice.cookie, '=') + 1));
}

static void
test_users_are_for_admins(void **state)
{
	_cleanup_free_ char *path = NULL;
	json_t *j, *u;
	size_t i;
	bool saw = false;

	people();
	path = strdup_printf("/v1/users/%s", alice.id);
	const char *hdrs[] = { bob.hkey, bob.hsess };
	for (int k = 0; k < 2; k++) {
		expect_error(hdrs[k], "GET", "/v1/users", NULL, 403, "refused");
		expect_error(hdrs[k], "POST", "/v1/users",
		             "{\"email\":\"mallory@example.com\",\"password\":\"mallory-pass-1\"}",
		             403, "refused");
		expect_error(hdrs[k], "PATCH", path, "{\"role\":\"admin\"}", 403, "refused");
		expect_error(hdrs[k], "PATCH", "/v1/users/usr_0000000000000000",
		             "{\"caps\":{\"max_sandboxes\":100}}", 403, "refused");
		expect_error(hdrs[k], "DELETE", path, NULL, 403, "refused");
	}
	/* nothing changed: alice is still a user, mallory does not exist */
	j = call_as(boss.hsess, "GET", "/v1/users", NULL, 200, NULL);
	json_array_foreach (json_object_get(j, "users"), i, u) {
		assert_string_not_equal(harness_str(u, "email"), "mallory@example.com");
		assert_non_null(json_object_get(u, "caps"));
		assert_non_null(json_object_get(u, "usage"));
		if (streq_safe(harness_str(u, "id"), alice.id)) {
			assert_string_equal(harness_str(u, "role"), "user");
			saw = true;
		}
	}
	assert_true(saw);
	json_decref(j);
	/* bob is still a user */
	j = call_as(bob.hkey, "GET", "/v1/whoami", NULL, 200, NULL);
	assert_string_equal(harness_str(j, "role"), "user");
	json_decref(j);
	/* the admin and the operator are 'admin' */
	j = call_as(boss.hkey, "GET", "/v1/whoami", NULL, 200, NULL);
	assert_string_equal(harness_str(j, "role"), "admin");
	assert_string_equal(harness_str(j, "user"), boss.email);
	json_decref(j);
}

static void
test_registration_is_off_by_default(void **state)
{
	_cleanup_free_ char *a = NULL, *m = NULL;

	a = raw_answer(NULL, "POST", "/v1/auth/register",
	               "{\"email\":\"new@example.com\",\"password\":\"new-password-1\"}");
	m = raw_answer(NULL, "POST", "/v1/auth/no-such-path",
	               "{\"email\":\"new@example.com\",\"password\":\"new-password-1\"}");
	assert_true(strncmp(a, "HTTP/1.1 404 ", 13) == 0);
	/* as if absent */
	assert_string_equal(a, m);
	{
		char id[40];
		user_id_of("new@example.com", id, sizeof(id));
		assert_string_equal(id, "");
	}
}

/* The same as a wrong password as for an unknown email. */
static void
test_wrong_password_like_unknown_email(void **state)
{
	_cleanup_free_ char *body = NULL, *a = NULL, *m = NULL;

	people();
	body = strdup_printf("{\"email\":\"%s\",\"password\":\"not-the-password\"}", bob.email);
	a = raw_answer(NULL, "POST", "/v1/auth/login", body);
	m = raw_answer(NULL, "POST", "/v1/auth/login",
	               "{\"email\":\"nobody@example.com\",\"password\":\"not-the-password\"}");
	assert_true(strncmp(a, "HTTP/1.1 401 ", 13) == 0);
	harness_expect_in(a, "\"code\":\"unauthorized\"");
	harness_expect_in(a, "wrong email or password");
	assert_string_equal(a, m);
	harness_expect_not_in(a, "Set-Cookie");
}

/* A daemon of its own, with registration on: sessions' cookies, CSRF and the rate limit
 * (whose per-address count would lock the other cases out). */
static void
test_sessions_registration_and_rate_limit(void **state)
{
	const char *args[] = { "--registration", "on", NULL };
	const char *reg = "{\"email\":\"Reg@Example.com\",\"password\":\"reg-password-77\"}";
	struct who r = { .email = "reg@example.com", .password = "reg-password-77" };
	char *head = NULL, *cookie = NULL, *retry = NULL;
	json_t *j;

	assert_int_equal(harness_start(&daemons[1], fake_bin, args, NULL), 0);
	cur = &daemons[1];

	/* registration makes a user, never an admin */
	expect_error(NULL, "POST", "/v1/auth/register",
	             "{\"email\":\"evil@example.com\",\"password\":\"evil-password-1\","
	             "\"role\":\"admin\"}",
	             400, "invalid_request");
	j = call_as(NULL, "POST", "/v1/auth/register", reg, 201, NULL);
	assert_string_equal(harness_str(j, "email"), r.email);
	assert_string_equal(harness_str(j, "role"), "user");
	assert_null(json_object_get(j, "password"));
	json_decref(j);
	{
		char id[40];
		user_id_of("evil@example.com", id, sizeof(id));
		assert_string_equal(id, "");
	}

	/* the cookie's flags */
	head = login(&r);
	cookie = harness_header(head, "Set-Cookie");
	harness_expect_in(cookie, "HttpOnly");
	harness_expect_in(cookie, "SameSite=Strict");
	harness_expect_in(cookie, "Path=/");
	harness_expect_in(cookie, "Max-Age=604800");
	harness_expect_not_in(cookie, "Secure"); /* a unix socket is no TLS */
	free(cookie);
	free(head);
	j = call_as(r.hcookie, "GET", "/v1/whoami", NULL, 200, NULL);
	assert_string_equal(harness_str(j, "user"), r.email);
	assert_string_equal(harness_str(j, "role"), "user");
	assert_string_equal(harness_str(j, "csrf_token"), r.csrf);
	json_decref(j);

	/* CSRF: a cookie alone does not change anything */
	{
		char wrong[600];
		snprintf(wrong, sizeof(wrong), "%sX-CSRF-Token: %s0\r\n", r.hcookie, r.csrf);
		j = call_as(r.hcookie, "POST", "/v1/keys", "{\"name\":\"k\"}", 403, NULL);
		assert_string_equal(err_code(j), "refused");
		harness_expect_in(err_message(j), "CSRF");
		json_decref(j);
		expect_error(wrong, "POST", "/v1/keys", "{\"name\":\"k\"}", 403, "refused");
		expect_error(r.hcookie, "POST", "/v1/sandboxes", "{\"name\":\"csrf\"}", 403,
		             "refused");
		expect_error(r.hcookie, "DELETE", "/v1/sandboxes/none", NULL, 403, "refused");
		assert_int_equal(list_count(NULL), 0);
		assert_int_equal(backend_starts(NULL), 0);
		j = call_as(r.hsess, "GET", "/v1/keys", NULL, 200, NULL);
		assert_int_equal(json_array_size(json_object_get(j, "keys")), 0);
		json_decref(j);
		json_decref(call_as(r.hsess, "POST", "/v1/keys", "{\"name\":\"k\"}", 201, NULL));
		j = call_as(r.hsess, "POST", "/v1/sandboxes", "{\"name\":\"csrf\"}", 201, NULL);
		assert_string_equal(harness_str(j, "owner"), r.email);
		json_decref(j);
		json_decref(call_as(r.hsess, "DELETE", "/v1/sandboxes/csrf", NULL, 204, NULL));
	}

	/* five failures, then 429 with Retry-After, even for the right password */
	{
		_cleanup_free_ char *bad = strdup_printf(
		        "{\"email\":\"%s\",\"password\":\"wrong-password\"}", r.email);
		_cleanup_free_ char *good = strdup_printf("{\"email\":\"%s\",\"password\":\"%s\"}",
		                                          r.email, r.password);
		for (int i = 0; i < 5; i++)
			expect_error(NULL, "POST", "/v1/auth/login", bad, 401, "unauthorized");
		j = call_as(NULL, "POST", "/v1/auth/login", bad, 429, &head);
		assert_string_equal(err_code(j), "rate_limited");
		json_decref(j);
		retry = harness_header(head, "Retry-After");
		uint64_t secs = 0;
		if (!retry || parse_u64(retry, &secs) < 0 || secs == 0)
			fail_msg("429 without a positive Retry-After:\n%s", head);
		free(retry);
		free(head);
		j = call_as(NULL, "POST", "/v1/auth/login", good, 429, &head);
		assert_string_equal(err_code(j), "rate_limited");
		harness_expect_not_in(head, "Set-Cookie");
		json_decref(j);
		free(head);
		/* the session made before goes on */
		json_decref(call_as(r.hcookie, "GET", "/v1/whoami", NULL, 200, NULL));
	}

	assert_int_equal(harness_stop(cur, SIGTERM), 0);
	assert_false(harness_file_contains(cur->log, r.password));
}

/* Over TLS the session cookie is also Secure, and it works there as on the unix socket. */
static void
test_cookie_is_secure_over_tls(void **state)
{
	_cleanup_free_ char *listen = NULL, *tok = NULL, *cert = NULL, *key = NULL, *ca = NULL;
	_cleanup_free_ char *url = NULL, *login_url = NULL, *hdr = NULL, *csrf_hdr = NULL;
	char *out = NULL, *cookie, *end;
	json_t *j;
	int port, rc, fd;

	if (system("command -v openssl >/dev/null && command -v curl >/dev/null") != 0)
		harness_skip_case("openssl and curl are needed (scripts/install-deps.sh)");
	assert_int_equal(harness_tmpdir(tls_dir, sizeof(tls_dir)), 0);
	assert_int_equal(harness_make_certs(tls_dir, "", false), 0);
	tok = strdup_printf("%s/token", tls_dir);
	fd = open(tok, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "tls-token-0123456789abcdef\n", 27), 27);
	close(fd);
	port = harness_free_port();
	listen = strdup_printf("127.0.0.1:%d", port);
	cert = strdup_printf("%s/server.pem", tls_dir);
	key = strdup_printf("%s/server.key", tls_dir);
	ca = strdup_printf("%s/ca.pem", tls_dir);
	const char *args[] = { "--listen",  listen,       "--token-file",
		               tok,         "--tls-cert", cert,
		               "--tls-key", key,          NULL };
	assert_int_equal(harness_start(&daemons[1], fake_bin, args, NULL), 0);
	cur = &daemons[1];
	json_decref(call_as(NULL, "POST", "/v1/users",
	                    "{\"email\":\"tls@example.com\",\"password\":\"tls-password-88\"}", 201,
	                    NULL));

	url = strdup_printf("https://localhost:%d/v1/whoami", port);
	login_url = strdup_printf("https://localhost:%d/v1/auth/login", port);
	{
		const char *a[] = {
			"-sS",
			"--max-time",
			"10",
			"-i",
			"--cacert",
			ca,
			"-H",
			"Content-Type: application/json",
			"-d",
			"{\"email\":\"tls@example.com\",\"password\":\"tls-password-88\"}",
			login_url,
			NULL
		};
		rc = harness_run("/usr/bin/curl", a, NULL, &out);
	}
	if (rc != 0 || !strstr(out, " 200 "))
		fail_msg("login over TLS failed (curl %d):\n%s", rc, out);
	cookie = harness_header(out, "Set-Cookie");
	if (!cookie)
		fail_msg("the login over TLS set no cookie:\n%s", out);
	harness_expect_in(cookie, "; Secure");
	harness_expect_in(cookie, "HttpOnly");
	harness_expect_in(cookie, "SameSite=Strict");
	j = json_loads(strstr(out, "\r\n\r\n") + 4, 0, NULL);
	free(out);
	end = strchr(cookie, ';');
	if (end)
		*end = '\0';
	hdr = strdup_printf("Cookie: %s", cookie);
	csrf_hdr = strdup_printf("X-CSRF-Token: %s", harness_str(j, "csrf_token"));
	free(cookie);
	json_decref(j);
	{
		const char *a[] = {
			"-sS", "--max-time", "10", "--cacert", ca, "-H", hdr, url, NULL
		};
		rc = harness_run("/usr/bin/curl", a, NULL, &out);
	}
	assert_int_equal(rc, 0);
	harness_expect_in(out, "\"user\":\"tls@example.com\"");
	free(out);
	/* a cookie POST over TLS still needs its CSRF token */
	{
		_cleanup_free_ char *keys = strdup_printf("https://localhost:%d/v1/keys", port);
		/* a[12] ends it without the token at first, then is "-H" for it */
		const char *a[] = { "-sS",
			            "--max-time",
			            "10",
			            "--cacert",
			            ca,
			            "-H",
			            hdr,
			            "-H",
			            "Content-Type: application/json",
			            "-d",
			            "{\"name\":\"k\"}",
			            keys,
			            NULL,
			            csrf_hdr,
			            NULL };
		rc = harness_run("/usr/bin/curl", a, NULL, &out);
		harness_expect_in(out, "\"code\":\"refused\"");
		free(out);
		a[12] = "-H";
		rc = harness_run("/usr/bin/curl", a, NULL, &out);
		harness_expect_in(out, "\"key\":\"sbk_");
		free(out);
	}
	assert_int_equal(harness_stop(cur, SIGTERM), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_another_users_sandbox_is_missing),
		cmocka_unit_test(test_names_resolve_among_the_callers_own),
		cmocka_unit_test(test_owner_comes_from_the_credential),
		cmocka_unit_test(test_admin_supervises_but_never_launches),
		cmocka_unit_test(test_caps_refuse_before_anything_starts),
		cmocka_unit_test(test_revoking_a_key_closes_its_streams),
		cmocka_unit_test(test_logout_and_disable_end_streams),
		cmocka_unit_test(test_keys_are_shown_once),
		cmocka_unit_test(test_env_values_are_never_returned),
		cmocka_unit_test(test_users_are_for_admins),
		cmocka_unit_test(test_registration_is_off_by_default),
		cmocka_unit_test(test_wrong_password_like_unknown_email),
		cmocka_unit_test_teardown(test_sessions_registration_and_rate_limit, back_to_main),
		cmocka_unit_test_teardown(test_cookie_is_secure_over_tls, back_to_main),
	};

	return harness_exit_code(cmocka_run_group_tests(tests, setup, teardown));
}
