/* test-accounts-hostile.c: what a reviewer found by attacking the accounts, each against a
 * sandboxd-fake of its own: failed logins sent all at once stay within the rate limit, a
 * user's event stream holds their own sandboxes whatever the length of their email (and never
 * a user's whose email is its first 127 bytes), and an attach that is not an upgrade handshake
 * is refused before anything (the CSRF check of a handshake cannot be skipped by leaving out
 * "Connection: Upgrade"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

static struct daemon_proc daemon_;
static const char *fake_bin;

struct who {
	char email[300];
	char cookie[256]; /* "sandboxd_session=..." */
	char csrf[160];
	char hsess[600]; /* the cookie and the CSRF token, as request headers */
};

/* A request as hdrs; fails unless the status is want; the parsed body (may be NULL). */
static json_t *
call_as(const char *hdrs, const char *method, const char *path, const char *body, int want,
        char **ret_head)
{
	return harness_json_headers(daemon_.sock, hdrs, method, path, body, want, ret_head);
}

static const char *
err_code(json_t *j)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), "code"));
}

/* The operator (the unix-socket peer) makes a user, who then signs in. */
static void
make_user(struct who *w, const char *email, const char *password)
{
	_cleanup_free_ char *body =
	        strdup_printf("{\"email\":\"%s\",\"password\":\"%s\"}", email, password);
	char *head = NULL, *cookie, *semi;
	json_t *j;

	snprintf(w->email, sizeof(w->email), "%s", email);
	json_decref(call_as(NULL, "POST", "/v1/users", body, 201, NULL));
	j = call_as(NULL, "POST", "/v1/auth/login", body, 200, &head);
	snprintf(w->csrf, sizeof(w->csrf), "%s",
	         json_string_value(json_object_get(j, "csrf_token")));
	json_decref(j);
	cookie = harness_header(head, "Set-Cookie");
	assert_non_null(cookie);
	semi = strchr(cookie, ';');
	if (semi)
		*semi = '\0';
	snprintf(w->cookie, sizeof(w->cookie), "%s", cookie);
	snprintf(w->hsess, sizeof(w->hsess), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", w->cookie,
	         w->csrf);
	free(cookie);
	free(head);
}

static int
start_daemon(void **state _unused_)
{
	return harness_start(&daemon_, fake_bin, NULL, NULL);
}

static int
stop_daemon(void **state _unused_)
{
	harness_cleanup(&daemon_);
	return 0;
}

/* ---- the cases ---- */

#define AT_ONCE 12

/* Wrong passwords sent on many connections at once: each is checked against the limit before
 * any hash ends, so a limit counted only once a hash said "wrong" would let them all through. */
static void
test_failed_logins_at_once_stay_within_the_limit(void **state _unused_)
{
	const struct harness_req login = {
		.sock = daemon_.sock,
		.method = "POST",
		.path = "/v1/auth/login",
		.body = "{\"email\":\"victim@example.com\",\"password\":\"guess-number-x\"}",
	};
	int fds[AT_ONCE], tried = 0, limited = 0;
	struct who v;

	make_user(&v, "victim@example.com", "victim-password-1");
	/* a success is no failure: signing in again and again from one address goes on */
	for (int i = 0; i < 7; i++)
		json_decref(call_as(NULL, "POST", "/v1/auth/login",
		                    "{\"email\":\"victim@example.com\",\"password\":\"victim-"
		                    "password-1\"}",
		                    200, NULL));
	/* each sent whole on its own connection, the answers read after */
	for (int i = 0; i < AT_ONCE; i++)
		assert_true((fds[i] = harness_request_open(&login)) >= 0);
	for (int i = 0; i < AT_ONCE; i++) {
		char *buf = NULL;
		size_t len = 0;
		(void)harness_stream_read(fds[i], 60000, NULL, &buf, &len);
		close(fds[i]);
		if (buf && strncmp(buf, "HTTP/1.1 401 ", 13) == 0)
			tried++;
		else if (buf && strncmp(buf, "HTTP/1.1 429 ", 13) == 0)
			limited++;
		else
			fail_msg("a login answered neither 401 nor 429:\n%s",
			         buf ? buf : "(nothing)");
		free(buf);
	}
	if (tried > 5)
		fail_msg("%d wrong passwords sent at once were tried (the limit is 5; %d got 429)",
		         tried, limited);
	assert_int_equal(tried + limited, AT_ONCE);

	/* the email is locked now, for the right password too; its sessions go on */
	json_decref(call_as(NULL, "POST", "/v1/auth/login",
	                    "{\"email\":\"victim@example.com\",\"password\":\"victim-"
	                    "password-1\"}",
	                    429, NULL));
	json_decref(call_as(v.hsess, "GET", "/v1/whoami", NULL, 200, NULL));
	assert_int_equal(harness_stop(&daemon_, SIGTERM), 0);
}

/* The id of a sandbox made by w. */
static void
create_box(struct who *w, const char *name, char *id, size_t size)
{
	_cleanup_free_ char *body = strdup_printf("{\"name\":\"%s\"}", name);
	json_t *j = call_as(w->hsess, "POST", "/v1/sandboxes", body, 201, NULL);

	snprintf(id, size, "%s", json_string_value(json_object_get(j, "id")));
	json_decref(j);
}

/* Emails are up to 254 bytes: a stream filters on the whole of one. */
static void
test_event_stream_of_a_long_email(void **state _unused_)
{
	char local[200], victim[300], longer[300], v_box[40], l_box[40];
	struct who v, l;
	char *buf = NULL;
	size_t len = 0;
	int fd;

	/* victim: 127 bytes; longer: the victim's email and one more byte (128) */
	memset(local, 'v', sizeof(local));
	local[127 - strlen("@example.com")] = '\0';
	snprintf(victim, sizeof(victim), "%s@example.com", local);
	assert_int_equal(strlen(victim), 127);
	memcpy(longer, victim, 127);
	memcpy(longer + 127, "m", 2);
	make_user(&v, victim, "victim-password-1");
	make_user(&l, longer, "longer-password-1");

	{
		_cleanup_free_ char *hdrs = strdup_printf("Cookie: %s\r\n", l.cookie);
		fd = harness_stream_open(daemon_.sock, "GET", "/v1/events/stream", hdrs);
	}
	assert_true(fd >= 0);
	(void)harness_stream_read(fd, 5000, "retry:", &buf, &len);
	if (!buf || !strstr(buf, "HTTP/1.1 200"))
		fail_msg("the event stream did not start:\n%s", buf ? buf : "(nothing)");
	create_box(&v, "v-box", v_box, sizeof(v_box));
	create_box(&l, "l-box", l_box, sizeof(l_box));
	(void)harness_stream_read(fd, 3000, l_box, &buf, &len);
	close(fd);
	{
		/* fail_msg jumps out: what it prints may not stay allocated */
		char seen[8192];
		bool leaked = strstr(buf, v_box) != NULL, own = strstr(buf, l_box) != NULL;
		snprintf(seen, sizeof(seen), "%s", buf);
		free(buf);
		if (leaked)
			fail_msg("a user whose email starts with another's saw that one's "
			         "sandbox:\n%s",
			         seen);
		if (!own)
			fail_msg("a user with a %zu-byte email saw none of their own events:\n%s",
			         strlen(longer), seen);
	}
	assert_int_equal(harness_stop(&daemon_, SIGTERM), 0);
}

/* The CSRF check of a cookie's WebSocket handshake is on ?csrf=, and applies to requests that
 * are upgrade handshakes: attach must then refuse what is not one, whatever Upgrade says. */
static void
test_attach_is_an_upgrade_or_nothing(void **state _unused_)
{
	char box[40];
	struct who u;
	json_t *j;

	make_user(&u, "attacher@example.com", "attacher-password-1");
	create_box(&u, "t-box", box, sizeof(box));
	{
		_cleanup_free_ char *path =
		        strdup_printf("/v1/sandboxes/%s/processes/1/attach", box);
		/* "Connection: close" (the harness's), not "Connection: Upgrade", and no ?csrf= */
		_cleanup_free_ char *hdrs =
		        strdup_printf("Cookie: %s\r\nUpgrade: websocket\r\nSec-WebSocket-Key: "
		                      "dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n",
		                      u.cookie);
		j = call_as(hdrs, "GET", path, NULL, 400, NULL);
		assert_string_equal(err_code(j), "invalid_request");
		json_decref(j);
	}
	assert_int_equal(harness_stop(&daemon_, SIGTERM), 0);
}

/* Emails are the owners: a deleted user's ended sandboxes must not pass to whoever gets an
 * account with that email next (with registration on, anyone who asks first). */
static void
test_a_reused_email_inherits_nothing(void **state _unused_)
{
	char box[40], uid[40], path[128], missing[128];
	_cleanup_free_ char *gone = NULL;
	struct who first, second;
	char *a = NULL, *b = NULL, *head_a = NULL, *head_b = NULL;
	json_t *j;

	make_user(&first, "reused@example.com", "first-password-1");
	j = call_as(first.hsess, "GET", "/v1/whoami", NULL, 200, NULL);
	snprintf(uid, sizeof(uid), "%s", json_string_value(json_object_get(j, "user_id")));
	json_decref(j);
	create_box(&first, "private-work", box, sizeof(box));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", box);
	json_decref(call_as(first.hsess, "DELETE", path, NULL, 204, NULL));
	{
		_cleanup_free_ char *upath = strdup_printf("/v1/users/%s", uid);
		json_decref(call_as(NULL, "DELETE", upath, NULL, 204, NULL));
	}
	make_user(&second, "reused@example.com", "second-password-2");

	/* the ended sandbox answers the newcomer like one that never was */
	snprintf(missing, sizeof(missing), "/v1/sandboxes/sbx_00000000000000ff");
	(void)harness_http_headers(daemon_.sock, "GET", path, second.hsess, NULL, &head_a, &a);
	(void)harness_http_headers(daemon_.sock, "GET", missing, second.hsess, NULL, &head_b, &b);
	{
		_cleanup_free_ char *want = strdup(b);
		char *at = strstr(want, "sbx_00000000000000ff");
		bool same;
		if (at)
			memcpy(at, box, strlen(box));
		same = strncmp(head_a, "HTTP/1.1 404 ", 13) == 0 && streq(a, want);
		free(head_a);
		free(head_b);
		free(b);
		if (!same) {
			char seen[2048];
			snprintf(seen, sizeof(seen), "%s", a);
			free(a);
			fail_msg(
			        "a new account with a deleted user's email sees their sandbox:\n%s",
			        seen);
		}
		free(a);
	}
	{
		_cleanup_free_ char *epath = strdup_printf("%s/events", path);
		json_decref(call_as(second.hsess, "GET", epath, NULL, 404, NULL));
	}
	/* nor in the list, which holds terminated sandboxes too */
	j = call_as(second.hsess, "GET", "/v1/sandboxes", NULL, 200, NULL);
	{
		_cleanup_free_ char *text = json_dumps(j, JSON_COMPACT);
		if (!text || strstr(text, box))
			fail_msg("a new account with a deleted user's email lists their sandbox");
	}
	json_decref(j);
	/* nor in a replayed event stream */
	{
		_cleanup_free_ char *hdrs = strdup_printf("Cookie: %s\r\n", second.cookie);
		int fd =
		        harness_stream_open(daemon_.sock, "GET", "/v1/events/stream?since=0", hdrs);
		char *buf = NULL;
		size_t len = 0;
		bool leaked;
		assert_true(fd >= 0);
		(void)harness_stream_read(fd, 1500, NULL, &buf, &len);
		close(fd);
		leaked = buf && strstr(buf, box);
		free(buf);
		if (leaked)
			fail_msg("a deleted user's events replay to the next account with the "
			         "email");
	}
	/* the operator still finds it, owned by the deleted account */
	j = call_as(NULL, "GET", path, NULL, 200, NULL);
	gone = strdup_printf("reused@example.com (deleted %s)", uid);
	assert_string_equal(json_string_value(json_object_get(j, "owner")), gone);
	json_decref(j);
	/* and lists it so */
	j = call_as(NULL, "GET", "/v1/sandboxes?state=terminated", NULL, 200, NULL);
	{
		json_t *sb;
		size_t i;
		bool listed = false;
		json_array_foreach (json_object_get(j, "sandboxes"), i, sb)
			if (streq(json_string_value(json_object_get(sb, "id")), box)) {
				listed = true;
				assert_string_equal(json_string_value(json_object_get(sb, "owner")),
				                    gone);
			}
		assert_true(listed);
	}
	json_decref(j);
	assert_int_equal(harness_stop(&daemon_, SIGTERM), 0);
}

/* With registration on, one address cannot make accounts without end: each attempt counts
 * against it like a failed login (five in fifteen minutes), before any hash is computed. */
static void
test_registration_is_limited_per_address(void **state _unused_)
{
	const char *args[] = { "--registration", "on", NULL };
	char body[128];
	json_t *j;
	char *head = NULL, *retry;

	assert_int_equal(harness_start(&daemon_, fake_bin, args, NULL), 0);
	for (int i = 0; i < 5; i++) {
		snprintf(body, sizeof(body),
		         "{\"email\":\"new%d@example.com\",\"password\":\"long enough one\"}", i);
		json_decref(call_as(NULL, "POST", "/v1/auth/register", body, 201, NULL));
	}
	j = call_as(NULL, "POST", "/v1/auth/register",
	            "{\"email\":\"new9@example.com\",\"password\":\"long enough one\"}", 429,
	            &head);
	assert_string_equal(err_code(j), "rate_limited");
	json_decref(j);
	retry = harness_header(head, "Retry-After");
	assert_non_null(retry);
	assert_true(retry[0] >= '1' && retry[0] <= '9');
	free(retry);
	free(head);
	/* and nothing was made */
	j = call_as(NULL, "GET", "/v1/users", NULL, 200, NULL);
	assert_int_equal(json_array_size(json_object_get(j, "users")), 5);
	json_decref(j);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_failed_logins_at_once_stay_within_the_limit,
		                                start_daemon, stop_daemon),
		cmocka_unit_test_setup_teardown(test_event_stream_of_a_long_email, start_daemon,
		                                stop_daemon),
		cmocka_unit_test_setup_teardown(test_attach_is_an_upgrade_or_nothing, start_daemon,
		                                stop_daemon),
		cmocka_unit_test_teardown(test_registration_is_limited_per_address, stop_daemon),
		cmocka_unit_test_setup_teardown(test_a_reused_email_inherits_nothing, start_daemon,
		                                stop_daemon),
	};

	fake_bin = harness_binary("SANDBOXD_FAKE");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
