/* test-accounts-vm.c: revocation ends a user's terminal, not just their event streams, with
 * a real microVM behind it. A user's shell in their sandbox is attached three times at once
 * (with API key A, with key B, with the browser's session cookie); revoking key A closes the
 * first attach and only it, logging out closes the cookie's, disabling the user closes key
 * B's, and the shell runs on through all of it: a closed attach detaches, it never stops the
 * process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

static struct daemon_proc p;

#define EMAIL "terminal-user@example.com"
#define PASSWORD "a terminal password"

/* The user, as the three ways they authenticate. */
struct user {
	char id[64];         /* usr_... */
	char cookie[256];    /* "sandboxd_session=..." */
	char csrf[160];      /* the session's CSRF token */
	char session[600];   /* the cookie and the CSRF token, as request headers */
	char key_id[2][32];  /* keys A and B */
	char bearer[2][200]; /* "Authorization: Bearer sbk_...\r\n" */
};

/* One attach over sbx-stream/1: the connection, bytes not yet parsed into frames, and what
 * the process wrote (its 'o' and 'E' frames together). */
struct attach {
	const char *name; /* in failure messages */
	int fd;
	char *raw;
	size_t raw_len;
	char *out;
	size_t out_len;
	int exit_code; /* from an 'x' frame; -1 while none came */
};

/* The test's attaches, here so that a failed assertion leaves nothing open behind it. */
static struct attach by_a = { .fd = -1 }, by_b = { .fd = -1 }, by_cookie = { .fd = -1 },
                     by_operator = { .fd = -1 };

static void attach_close(struct attach *a);

static int
setup(void **state _unused_)
{
	return harness_start_vm(&p, NULL, NULL);
}

static int
teardown(void **state _unused_)
{
	char vms[400];
	int rc, left;

	attach_close(&by_a);
	attach_close(&by_b);
	attach_close(&by_cookie);
	attach_close(&by_operator);
	/* a case that failed half-way left its sandbox: it goes the way the case's own goes */
	if (p.pid > 0) {
		char *out = NULL;
		json_t *list = NULL, *sb;
		size_t i;
		if (harness_http(p.sock, "GET", "/v1/sandboxes", NULL, &out) == 200)
			list = json_loads(out, 0, NULL);
		free(out);
		json_array_foreach (json_object_get(list, "sandboxes"), i, sb) {
			char path[128];
			snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(sb, "id"));
			(void)harness_http(p.sock, "DELETE", path, NULL, NULL);
		}
		json_decref(list);
	}
	rc = harness_stop(&p, SIGTERM);

	/* every VM was deleted: none outlived sandboxd */
	left = harness_kill_vmms(p.state);
	snprintf(vms, sizeof(vms), "%s/vms", p.state);
	if (harness_count_entries(vms) != 0) {
		fprintf(stderr, "%s holds what a deleted sandbox left\n", vms);
		rc = -1;
	}
	/* under ASan, a report about closing attaches would only show in sandboxd's log */
	if (harness_file_contains(p.log, "Sanitizer") ||
	    harness_file_contains(p.log, "runtime error:")) {
		fprintf(stderr, "sandboxd's log holds a sanitizer report: %s\n", p.log);
		rc = -1;
	}
	harness_cleanup(&p);
	if (left)
		fprintf(stderr, "%d VMM(s) outlived sandboxd\n", left);
	return rc == 0 && left == 0 ? 0 : -1;
}

/* A request with extra headers (NULL: as the operator, the unix-socket peer); fails unless
 * the status is want. The parsed body (may be NULL; caller decrefs), and the head. */
static json_t *
call(const char *hdrs, const char *method, const char *path, const char *body, int want,
     char **ret_head)
{
	return harness_json_headers(p.sock, hdrs, method, path, body, want, ret_head);
}

/* The operator makes the user; the user logs in and makes keys A and B with the session. */
static void
make_user(struct user *u)
{
	const char *creds = "{\"email\":\"" EMAIL "\",\"password\":\"" PASSWORD "\"}";
	char *head = NULL, *cookie, *semi;
	json_t *j;

	memset(u, 0, sizeof(*u));
	j = call(NULL, "POST", "/v1/users",
	         "{\"email\":\"" EMAIL "\",\"password\":\"" PASSWORD "\",\"role\":\"user\"}", 201,
	         NULL);
	snprintf(u->id, sizeof(u->id), "%s", harness_str(j, "id"));
	assert_true(str_has_prefix(u->id, "usr_"));
	json_decref(j);

	j = call(NULL, "POST", "/v1/auth/login", creds, 200, &head);
	assert_non_null(harness_str(j, "csrf_token"));
	snprintf(u->csrf, sizeof(u->csrf), "%s", harness_str(j, "csrf_token"));
	json_decref(j);
	cookie = harness_header(head, "Set-Cookie");
	free(head);
	assert_non_null(cookie);
	assert_true(str_has_prefix(cookie, "sandboxd_session="));
	semi = strchr(cookie, ';');
	if (semi)
		*semi = '\0';
	snprintf(u->cookie, sizeof(u->cookie), "%s", cookie);
	free(cookie);
	snprintf(u->session, sizeof(u->session), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", u->cookie,
	         u->csrf);

	for (int i = 0; i < 2; i++) {
		j = call(u->session, "POST", "/v1/keys",
		         i ? "{\"name\":\"B\"}" : "{\"name\":\"A\"}", 201, NULL);
		assert_non_null(harness_str(j, "id"));
		assert_true(str_has_prefix(harness_str(j, "key"), "sbk_"));
		snprintf(u->key_id[i], sizeof(u->key_id[i]), "%s", harness_str(j, "id"));
		snprintf(u->bearer[i], sizeof(u->bearer[i]), "Authorization: Bearer %s\r\n",
		         harness_str(j, "key"));
		json_decref(j);
	}
}

/* Parses the complete frames in a->raw into a->out. */
static void
parse_frames(struct attach *a)
{
	size_t off = 0;

	while (a->raw_len - off >= 5) {
		const unsigned char *h = (const unsigned char *)a->raw + off;
		size_t n = (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 | h[4];

		if (a->raw_len - off - 5 < n)
			break;
		if (h[0] == 'o' || h[0] == 'E') {
			char *grown = realloc(a->out, a->out_len + n + 1);
			assert_non_null(grown);
			memcpy(grown + a->out_len, h + 5, n);
			a->out = grown;
			a->out_len += n;
			a->out[a->out_len] = '\0';
		} else if (h[0] == 'x' && n == 4) {
			a->exit_code = (int)((unsigned)h[5] << 24 | (unsigned)h[6] << 16 |
			                     (unsigned)h[7] << 8 | h[8]);
		} else if (h[0] != 'd') {
			fail_msg("%s: a frame of unknown type 0x%02x", a->name, h[0]);
		}
		off += 5 + n;
	}
	memmove(a->raw, a->raw + off, a->raw_len - off);
	a->raw_len -= off;
}

static long
ms_since(const struct timespec *start)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

/* Reads what the attach delivers for up to timeout_ms, stopping early once until (may be
 * NULL) is in its output. 1 when the server closed the connection (end of file or reset),
 * 0 when the time ran out or until came with it still open. */
static int
attach_read(struct attach *a, int timeout_ms, const char *until)
{
	struct timespec start;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		long left;
		int r;

		parse_frames(a);
		if (until && a->out && strstr(a->out, until))
			return 0;
		left = timeout_ms - ms_since(&start);
		if (left <= 0)
			return 0;
		/* 100 ms at a time, so that until is looked for as the output grows */
		r = harness_stream_read(a->fd, (int)MIN(left, 100), NULL, &a->raw, &a->raw_len);
		if (r < 0)
			fail_msg("%s: reading the attach: %s", a->name, strerror(errno));
		if (r == 1) {
			parse_frames(a);
			return 1;
		}
	}
}

/* Attaches to path with the credential in hdrs (NULL: the operator) over sbx-stream/1, and
 * checks the 101. */
static void
attach_open(struct attach *a, const char *name, const char *path, const char *hdrs)
{
	char hello[800];
	struct timespec start;
	char *end = NULL;

	snprintf(hello, sizeof(hello), "%sConnection: Upgrade\r\nUpgrade: sbx-stream/1\r\n",
	         hdrs ? hdrs : "");
	attach_close(a);
	a->name = name;
	a->exit_code = -1;
	a->fd = harness_stream_open(p.sock, "GET", path, hello);
	if (a->fd < 0)
		fail_msg("%s: cannot connect to %s", name, p.sock);
	/* the head, byte by byte, so that no frame after it is taken with it */
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (!end) {
		struct pollfd pfd = { .fd = a->fd, .events = POLLIN };
		char c, *grown;
		long left = 10000 - ms_since(&start);

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0 || recv(a->fd, &c, 1, 0) != 1)
			fail_msg("%s: no answer to the attach handshake: '%.*s'", name,
			         (int)a->raw_len, a->raw ? a->raw : "");
		grown = realloc(a->raw, a->raw_len + 2);
		assert_non_null(grown);
		a->raw = grown;
		a->raw[a->raw_len++] = c;
		a->raw[a->raw_len] = '\0';
		end = strstr(a->raw, "\r\n\r\n");
	}
	if (!str_has_prefix(a->raw, "HTTP/1.1 101 "))
		fail_msg("%s: the attach was not upgraded: %s", name, a->raw);
	if (!strstr(a->raw, "Upgrade: sbx-stream/1"))
		fail_msg("%s: the 101 names no sbx-stream/1: %s", name, a->raw);
	a->raw_len = 0;
}

/* Sends one frame. */
static void
attach_send(struct attach *a, char type, const char *payload)
{
	size_t n = strlen(payload);
	unsigned char h[5] = { (unsigned char)type, (unsigned char)(n >> 24),
		               (unsigned char)(n >> 16), (unsigned char)(n >> 8),
		               (unsigned char)n };

	if (send(a->fd, h, 5, MSG_NOSIGNAL) != 5 ||
	    send(a->fd, payload, n, MSG_NOSIGNAL) != (ssize_t)n)
		fail_msg("%s: cannot send an '%c' frame: %s", a->name, type, strerror(errno));
}

/* The attach is live: what is typed into it reaches the shell, and the shell's answer comes
 * back. The command line holds word quoted so that the terminal's echo of it is not the
 * answer looked for. */
static void
expect_live(struct attach *a, const char *quoted, const char *word)
{
	char line[128], answer[128];

	snprintf(line, sizeof(line), "echo %s\n", quoted);
	snprintf(answer, sizeof(answer), "\n%s\r\n", word);
	attach_send(a, 'i', line);
	if (attach_read(a, 20000, answer) != 0 || !strstr(a->out ? a->out : "", answer))
		fail_msg("%s: the shell's answer '%s' never came; the terminal showed:\n%s",
		         a->name, word, a->out ? a->out : "(nothing)");
}

/* Another attach sees the same terminal: the answer typed elsewhere comes to it too. */
static void
expect_sees(struct attach *a, const char *word)
{
	char answer[128];

	snprintf(answer, sizeof(answer), "\n%s\r\n", word);
	if (attach_read(a, 20000, answer) != 0 || !strstr(a->out ? a->out : "", answer))
		fail_msg("%s: '%s' never showed; the terminal showed:\n%s", a->name, word,
		         a->out ? a->out : "(nothing)");
}

/* The server closes the attach within 500 ms (it was closed before the answer that
 * revoked it). */
static void
expect_closed(struct attach *a, const char *why)
{
	if (attach_read(a, 500, NULL) != 1)
		fail_msg("%s is still open 500 ms after %s; the terminal showed:\n%s", a->name, why,
		         a->out ? a->out : "(nothing)");
	/* closing detached; it did not end the process */
	if (a->exit_code != -1)
		fail_msg("%s: the shell exited (%d) when %s", a->name, a->exit_code, why);
}

/* The attach stays open: nothing ends it within 500 ms. */
static void
expect_open(struct attach *a, const char *why)
{
	if (attach_read(a, 500, NULL) != 0)
		fail_msg("%s was closed by %s; it was not that credential's", a->name, why);
}

static void
attach_close(struct attach *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	free(a->raw);
	free(a->out);
	a->raw = a->out = NULL;
	a->raw_len = a->out_len = 0;
}

static void
expect_whoami(const char *hdrs, int want)
{
	json_decref(call(hdrs, "GET", "/v1/whoami", NULL, want, NULL));
}

static void
test_revocation_ends_the_terminal(void **state _unused_)
{
	struct user u;
	char id[64], procs[128], attach[200], cookie_hdr[300], path[400], reason[300];
	long long pid;
	json_t *j, *list;
	bool running, disabled;

	/* 1. a user, logged in, with two keys */
	make_user(&u);

	/* 2. with key A, a sandbox (the answer waits until it runs) and a shell on a TTY */
	j = call(u.bearer[0], "POST", "/v1/sandboxes",
	         "{\"name\":\"term\",\"cpus\":1,\"memory_mb\":512}", 201, NULL);
	snprintf(id, sizeof(id), "%s", harness_str(j, "id"));
	snprintf(reason, sizeof(reason), "%s", harness_str(j, "reason") ?: "");
	running = streq(harness_str(j, "state") ?: "", "running");
	/* the owner is the key's user, stamped by the server */
	snprintf(path, sizeof(path), "%s", harness_str(j, "owner") ?: "");
	json_decref(j);
	if (!running)
		fail_msg("the sandbox did not boot: %s", reason);
	assert_string_equal(path, EMAIL);
	snprintf(procs, sizeof(procs), "/v1/sandboxes/%s/processes", id);
	j = call(u.bearer[0], "POST", procs, "{\"argv\":[\"/bin/sh\"],\"tty\":true,\"keep\":true}",
	         201, NULL);
	pid = (long long)json_integer_value(json_object_get(j, "pid"));
	assert_true(pid > 0);
	json_decref(j);
	snprintf(attach, sizeof(attach), "%s/%lld/attach", procs, pid);

	/* key A's attach is live: typed input reaches the shell, its output comes back */
	attach_open(&by_a, "key A's attach", attach, u.bearer[0]);
	expect_live(&by_a, "al''ive", "alive");

	/* 3. the same terminal with key B and with the session cookie (?csrf= on an upgrade) */
	attach_open(&by_b, "key B's attach", attach, u.bearer[1]);
	snprintf(cookie_hdr, sizeof(cookie_hdr), "Cookie: %s\r\n", u.cookie);
	snprintf(path, sizeof(path), "%s?csrf=%s", attach, u.csrf);
	attach_open(&by_cookie, "the cookie's attach", path, cookie_hdr);
	/* both replay what the terminal showed */
	expect_sees(&by_b, "alive");
	expect_sees(&by_cookie, "alive");

	/* 4. the session revokes key A: its attach is closed by the time the 204 comes; the
	 * others go on */
	snprintf(path, sizeof(path), "/v1/keys/%s", u.key_id[0]);
	json_decref(call(u.session, "DELETE", path, NULL, 204, NULL));
	expect_closed(&by_a, "key A was revoked");
	expect_live(&by_b, "st''ill", "still");
	expect_sees(&by_cookie, "still");
	expect_live(&by_cookie, "coo''kie", "cookie");
	expect_sees(&by_b, "cookie");
	/* key A is no credential any more, for a request or a new attach */
	expect_whoami(u.bearer[0], 401);
	json_decref(call(u.bearer[0], "GET", attach, NULL, 401, NULL));
	expect_whoami(u.bearer[1], 200);
	attach_close(&by_a);

	/* 5. logout closes the cookie's attach; key B's goes on */
	{
		char *head = NULL, *set;
		bool cleared;
		json_decref(call(u.session, "POST", "/v1/auth/logout", NULL, 204, &head));
		set = harness_header(head, "Set-Cookie");
		free(head);
		cleared = set && strstr(set, "Max-Age=0");
		free(set);
		assert_true(cleared);
	}
	expect_closed(&by_cookie, "the session logged out");
	expect_open(&by_b, "the logout");
	expect_live(&by_b, "ag''ain", "again");
	expect_whoami(cookie_hdr, 401);
	expect_whoami(u.bearer[1], 200);
	attach_close(&by_cookie);

	/* 6. the operator disables the user: key B's attach closes too, and key B is refused */
	snprintf(path, sizeof(path), "/v1/users/%s", u.id);
	j = call(NULL, "PATCH", path, "{\"disabled\":true}", 200, NULL);
	disabled = json_is_true(json_object_get(j, "disabled"));
	json_decref(j);
	assert_true(disabled);
	expect_closed(&by_b, "the user was disabled");
	expect_whoami(u.bearer[1], 401);
	attach_close(&by_b);

	/* 7. the shell ran on through all of it: the operator sees it running and can still
	 * type into it */
	list = call(NULL, "GET", procs, NULL, 200, NULL);
	running = false;
	for (size_t i = 0; i < json_array_size(json_object_get(list, "processes")); i++) {
		json_t *pr = json_array_get(json_object_get(list, "processes"), i);
		if ((long long)json_integer_value(json_object_get(pr, "pid")) == pid)
			running = streq(harness_str(pr, "state") ?: "", "running");
	}
	if (!running) {
		char *s = json_dumps(list, JSON_COMPACT);
		snprintf(path, sizeof(path), "%s", s ? s : "");
		free(s);
		json_decref(list);
		fail_msg("the shell %lld is not running after its attaches were closed: %s", pid,
		         path);
	}
	json_decref(list);
	attach_open(&by_operator, "the operator's attach", attach, NULL);
	expect_sees(&by_operator, "again");
	expect_live(&by_operator, "fi''nal", "final");
	attach_close(&by_operator);

	/* the sandbox goes, then the user (who owns nothing active any more) */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(call(NULL, "DELETE", path, NULL, 204, NULL));
	snprintf(path, sizeof(path), "/v1/users/%s", u.id);
	json_decref(call(NULL, "DELETE", path, NULL, 204, NULL));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_revocation_ends_the_terminal),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
