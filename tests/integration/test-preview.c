/* test-preview.c: preview URLs (docs/api.md, "Previews") against sandboxd-fake whose agent is
 * sandbox-guestd in test mode: its processes, and so its tunnels, run on this machine, so the
 * guest's 127.0.0.1:PORT is ours, and a small HTTP server of this test's own (with a WebSocket-
 * style upgrade that echoes) stands in for a dev server in the sandbox.
 *
 * What a person and an attacker meet: POST …/previews hands out a URL on a host of the
 * sandbox's and port's own; its token becomes an HttpOnly, SameSite=Lax cookie for that host
 * alone (302 to the same URL without it, never off the host); the cookie opens a connection
 * relayed raw to the guest (keep-alive, a body, an upgrade); a wrong token, another port's or
 * another sandbox's is 401; a Host that is not a preview's is 404 and never the dashboard or
 * the API; the API listener does not take the token in any form; another user cannot get a
 * preview of your sandbox (404); a closed port is 502, a stopped sandbox 503, a gone one 404;
 * each relayed connection is audited as tunnel.opened. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

static struct daemon_proc p;
static char dir[256];
static int api_port, preview_port, guest_port;
static pid_t guest_pid = -1;

struct who {
	const char *email, *password;
	char key[160];
	char hkey[256]; /* "Authorization: Bearer KEY\r\n" */
};
static struct who alice = { .email = "alice@example.com", .password = "alice-password-1" };
static struct who bob = { .email = "bob@example.com", .password = "bob-password-22" };

/* alice's running sandbox, and its preview of guest_port */
static char box[64], url[512], host[256], token[128];

/* ---- the guest's server: HTTP/1.1 with keep-alive, and an upgrade that echoes ---- */

static bool
read_more(int fd, char *buf, size_t *len, size_t cap)
{
	ssize_t n = read(fd, buf + *len, cap - 1 - *len);

	if (n <= 0)
		return false;
	*len += (size_t)n;
	buf[*len] = '\0';
	return true;
}

/* A header's value (lowercase name, as the relay writes them, or any case) into out. */
static void
header_value(const char *head, const char *name, char *out, size_t size)
{
	char pat[64];
	const char *at, *end;

	snprintf(pat, sizeof(pat), "\r\n%s:", name);
	out[0] = '\0';
	at = strcasestr(head, pat);
	if (!at)
		return;
	at += strlen(pat);
	while (*at == ' ')
		at++;
	end = strstr(at, "\r\n");
	snprintf(out, size, "%.*s", (int)(end ? end - at : (long)strlen(at)), at);
}

static void
guest_conn(int fd)
{
	static char buf[1 << 16];
	size_t len = 0;

	for (;;) {
		char line[512], hosth[256], cookie[512], upgrade[64], clen[32], conn[32], *end,
		        *body;
		size_t hlen, cl;

		while (!(end = strstr(buf, "\r\n\r\n")))
			if (!read_more(fd, buf, &len, sizeof(buf)))
				return;
		hlen = (size_t)(end + 4 - buf);
		end[2] = '\0'; /* this request's head alone (a pipelined one may follow) */
		snprintf(line, sizeof(line), "%.*s", (int)strcspn(buf, "\r"), buf);
		header_value(buf, "host", hosth, sizeof(hosth));
		header_value(buf, "cookie", cookie, sizeof(cookie));
		header_value(buf, "upgrade", upgrade, sizeof(upgrade));
		header_value(buf, "content-length", clen, sizeof(clen));
		header_value(buf, "connection", conn, sizeof(conn));
		end[2] = '\r';
		if (*upgrade) {
			static const char ok[] =
			        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n"
			        "Connection: Upgrade\r\n\r\n";
			(void)!write(fd, ok, sizeof(ok) - 1);
			if (len > hlen)
				(void)!write(fd, buf + hlen, len - hlen);
			for (;;) {
				ssize_t n = read(fd, buf, sizeof(buf));
				if (n <= 0)
					return;
				(void)!write(fd, buf, (size_t)n);
			}
		}
		cl = (size_t)strtoul(clen, NULL, 10);
		if (strncmp(line, "POST /sink ", 11) == 0) {
			/* a body of any size, counted and summed as it comes, then answered */
			uint64_t got = MIN(len - hlen, cl), sum = 0;
			char *resp;
			for (size_t i = hlen; i < hlen + got; i++)
				sum += (uint8_t)buf[i];
			while (got < cl) {
				ssize_t n = read(fd, buf, MIN(sizeof(buf), cl - got));
				if (n <= 0)
					return;
				for (ssize_t i = 0; i < n; i++)
					sum += (uint8_t)buf[i];
				got += (uint64_t)n;
			}
			resp = strdup_printf("HTTP/1.1 200 OK\r\nContent-Length: 40\r\n"
			                     "Connection: close\r\n\r\nsink %016llx %016llx\n",
			                     (unsigned long long)got, (unsigned long long)sum);
			if (resp)
				(void)!write(fd, resp, strlen(resp));
			free(resp);
			return;
		}
		while (len < hlen + cl)
			if (!read_more(fd, buf, &len, sizeof(buf)))
				return;
		body = strdup_printf("guest saw '%s' host=%s cookie=%s body=%.*s\n", line, hosth,
		                     cookie, (int)cl, buf + hlen);
		if (body) {
			char *resp =
			        strdup_printf("HTTP/1.1 200 OK\r\nX-Guest: yes\r\nContent-Type: "
			                      "text/plain\r\nContent-Length: %zu\r\n\r\n%s",
			                      strlen(body), body);
			if (resp)
				(void)!write(fd, resp, strlen(resp));
			free(resp);
			free(body);
		}
		if (strcasecmp(conn, "close") == 0)
			return; /* as a server does: the client asked */
		memmove(buf, buf + hlen + cl, len - hlen - cl);
		len -= hlen + cl;
		buf[len] = '\0';
	}
}

static int
start_guest_server(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
		                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (lfd < 0)
		return -1;
	(void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
		return -1;
	guest_port = ntohs(sa.sin_port);
	guest_pid = fork();
	if (guest_pid < 0)
		return -1;
	if (guest_pid == 0) {
		signal(SIGCHLD, SIG_IGN); /* no zombies of the connections */
		for (;;) {
			int fd = accept(lfd, NULL, NULL);
			if (fd < 0)
				continue;
			if (fork() == 0) {
				guest_conn(fd);
				_exit(0);
			}
			close(fd);
		}
	}
	close(lfd);
	return 0;
}

/* ---- requests ---- */

/* A request to the preview listener with Host h and extra header lines; the whole answer. */
static int
preview_get(const char *h, const char *method, const char *path, const char *headers, char **ret)
{
	const struct harness_req rq = {
		.port = preview_port, .method = method, .path = path, .host = h, .headers = headers
	};

	return harness_request(&rq, ret);
}

static char *
cookie_header(const char *tok)
{
	return strdup_printf("Cookie: theme=dark; sbx_preview=%s\r\n", tok);
}

/* POST …/previews as hdrs (NULL: the operator) for ref and port: the answer's status, and
 * its body. */
static int
ask_preview(const char *hdrs, const char *ref, const char *body, char **ret_body)
{
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s/previews", ref);

	return harness_http_headers(p.sock, "POST", path, hdrs, body, NULL, ret_body);
}

/* The preview of ref's port as alice: its url, host and token. */
static void
preview_of(const char *ref, int port, char *ret_url, char *ret_host, char *ret_token)
{
	_cleanup_free_ char *body = strdup_printf("{\"port\":%d}", port), *answer = NULL;
	json_t *j;
	const char *u, *q, *slash;

	assert_int_equal(ask_preview(alice.hkey, ref, body, &answer), 200);
	j = json_loads(answer, 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "port")), port);
	u = harness_str(j, "url");
	assert_non_null(u);
	assert_true(str_has_prefix(u, "http://p-"));
	snprintf(ret_url, 512, "%s", u);
	slash = strchr(u + 7, '/');
	assert_non_null(slash);
	snprintf(ret_host, 256, "%.*s", (int)(slash - (u + 7)), u + 7);
	q = strstr(u, "/?sbx_preview=");
	assert_non_null(q);
	snprintf(ret_token, 128, "%s", q + strlen("/?sbx_preview="));
	json_decref(j);
}

static void
make_user(struct who *w)
{
	_cleanup_free_ char *body = strdup_printf(
	        "{\"email\":\"%s\",\"password\":\"%s\",\"role\":\"user\"}", w->email, w->password);
	_cleanup_free_ char *login =
	        strdup_printf("{\"email\":\"%s\",\"password\":\"%s\"}", w->email, w->password);
	char *head = NULL, *cookie, *semi, hdrs[1024];
	json_t *j;

	json_decref(harness_json(p.sock, "POST", "/v1/users", body, 201));
	j = harness_json_headers(p.sock, NULL, "POST", "/v1/auth/login", login, 200, &head);
	cookie = harness_header(head, "Set-Cookie");
	assert_non_null(cookie);
	semi = strchr(cookie, ';');
	if (semi)
		*semi = '\0';
	snprintf(hdrs, sizeof(hdrs), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", cookie,
	         harness_str(j, "csrf_token"));
	free(cookie);
	free(head);
	json_decref(j);
	j = harness_json_headers(p.sock, hdrs, "POST", "/v1/keys", "{\"name\":\"t\"}", 201, NULL);
	snprintf(w->key, sizeof(w->key), "%s", harness_str(j, "key"));
	snprintf(w->hkey, sizeof(w->hkey), "Authorization: Bearer %s\r\n", w->key);
	json_decref(j);
}

static void
create_box(struct who *w, char out[static 64])
{
	json_t *j = harness_json_headers(p.sock, w->hkey, "POST", "/v1/sandboxes",
	                                 "{\"image\":\"busybox\"}", 201, NULL);

	assert_string_equal(harness_str(j, "state"), "running");
	snprintf(out, 64, "%s", harness_str(j, "id"));
	json_decref(j);
}

/* ---- setup ---- */

static int
setup(void **state)
{
	const char *agent = getenv("SANDBOX_GUESTD");
	char env_agent[512], tokfile[300], listen[64], plisten[64];

	if (!agent || access(agent, X_OK) < 0) {
		fprintf(stderr, "skip: SANDBOX_GUESTD is not set to sandbox-guestd (run through "
		                "ctest)\n");
		exit(77);
	}
	if (harness_tmpdir(dir, sizeof(dir)) < 0 || start_guest_server() < 0)
		return -1;
	snprintf(tokfile, sizeof(tokfile), "%s/token", dir);
	if (write_file_atomic(tokfile, "preview-test-operator-token-0123\n", 33, 0600) < 0)
		return -1;
	api_port = harness_free_port();
	preview_port = harness_free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", api_port);
	snprintf(plisten, sizeof(plisten), "127.0.0.1:%d", preview_port);
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", agent);
	if (harness_start(&p, harness_binary("SANDBOXD_FAKE"),
	                  (const char *const[]){ "--listen", listen, "--token-file", tokfile,
	                                         "--preview-listen", plisten, NULL },
	                  (const char *const[]){ env_agent, NULL }) < 0)
		return -1;
	make_user(&alice);
	make_user(&bob);
	create_box(&alice, box);
	preview_of(box, guest_port, url, host, token);
	return 0;
}

static int
teardown(void **state)
{
	int rc;

	(void)harness_delete_all(p.sock);
	rc = harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
	if (guest_pid > 0) {
		kill(guest_pid, SIGKILL);
		waitpid(guest_pid, NULL, 0);
	}
	{
		char tokfile[300];
		snprintf(tokfile, sizeof(tokfile), "%s/token", dir);
		unlink(tokfile);
		rmdir(dir);
	}
	return rc == 0 ? 0 : -1;
}

/* ---- cases ---- */

static void
test_url_and_route(void **state)
{
	_cleanup_free_ char *keyfile = strdup_printf("%s/preview.key", p.state);
	char want[128];
	struct stat st;
	json_t *caps = harness_json(p.sock, "GET", "/v1/capabilities", NULL, 200);

	assert_true(
	        json_is_true(json_object_get(json_object_get(caps, "capabilities"), "preview")));
	json_decref(caps);
	/* its own host: the sandbox's id without sbx_, the port, the domain, the listener's port */
	snprintf(want, sizeof(want), "p-%s-%d.localhost:%d", box + 4, guest_port, preview_port);
	assert_string_equal(host, want);
	assert_int_equal(strlen(token), 43);
	/* the key: 32 bytes, 0600, in the state directory */
	assert_int_equal(stat(keyfile, &st), 0);
	assert_int_equal(st.st_size, 32);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* the same URL again (a token per sandbox and port, not per ask) */
	{
		char u2[512], h2[256], t2[128];
		preview_of(box, guest_port, u2, h2, t2);
		assert_string_equal(u2, url);
		preview_of(box, guest_port + 1 > 65535 ? 1 : guest_port + 1, u2, h2, t2);
		assert_string_not_equal(t2, token);
	}
	/* the body is checked */
	assert_int_equal(ask_preview(alice.hkey, box, "{}", NULL), 400);
	assert_int_equal(ask_preview(alice.hkey, box, "{\"port\":0}", NULL), 400);
	assert_int_equal(ask_preview(alice.hkey, box, "{\"port\":65536}", NULL), 400);
	assert_int_equal(ask_preview(alice.hkey, box, "{\"port\":\"80\"}", NULL), 400);
	assert_int_equal(ask_preview(alice.hkey, box, "{\"port\":80,\"host\":\"x\"}", NULL), 400);
	/* another user's sandbox is a missing one */
	{
		_cleanup_free_ char *theirs = NULL;
		assert_int_equal(ask_preview(bob.hkey, box, "{\"port\":80}", &theirs), 404);
		harness_expect_in(theirs, "\"not_found\"");
		assert_int_equal(
		        ask_preview(bob.hkey, "sbx_00000000000000ff", "{\"port\":80}", NULL), 404);
	}
	/* and without a credential (over TCP), nothing */
	{
		_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s/previews", box),
		                    *out = NULL;
		const struct harness_req rq = { .port = api_port,
			                        .method = "POST",
			                        .path = path,
			                        .headers = "Content-Type: application/json\r\n",
			                        .body = "{\"port\":80}" };
		assert_int_equal(harness_request(&rq, &out), 401);
		harness_expect_not_in(out, "sbx_preview=");
	}
}

static void
test_token_becomes_cookie(void **state)
{
	_cleanup_free_ char *resp = NULL, *path = NULL, *loc = NULL, *want = NULL;

	path = strdup_printf("/app/page?x=1&sbx_preview=%s&y=two", token);
	assert_int_equal(preview_get(host, "GET", path, NULL, &resp), 302);
	/* to the same URL without the token, on the same host */
	want = strdup_printf("\r\nLocation: http://%s/app/page?x=1&y=two\r\n", host);
	harness_expect_in(resp, want);
	/* the cookie: HttpOnly, Lax, for this host alone (no Domain) */
	{
		_cleanup_free_ char *sc = strdup_printf(
		        "\r\nSet-Cookie: sbx_preview=%s; Path=/; HttpOnly; SameSite=Lax\r\n",
		        token);
		harness_expect_in(resp, sc);
	}
	harness_expect_not_in(resp, "Domain=");
	free(resp);
	resp = NULL;
	/* a path that looks like another host stays on this one */
	free(path);
	path = strdup_printf("//evil.example/x?sbx_preview=%s", token);
	assert_int_equal(preview_get(host, "GET", path, NULL, &resp), 302);
	free(want);
	want = strdup_printf("\r\nLocation: http://%s//evil.example/x\r\n", host);
	harness_expect_in(resp, want);
	free(resp);
	resp = NULL;
	/* a Host that would put another host into the Location is not a preview's */
	free(loc);
	loc = strdup_printf("%s@evil.example", host);
	assert_int_equal(preview_get(loc, "GET", "/?sbx_preview=x", NULL, NULL), 404);
	/* a wrong token, or the token twice, is 401 and sets nothing */
	assert_int_equal(preview_get(host, "GET", "/?sbx_preview=AAAA", NULL, &resp), 401);
	harness_expect_not_in(resp, "Set-Cookie");
	free(resp);
	resp = NULL;
	free(path);
	path = strdup_printf("/?sbx_preview=%s&sbx_preview=%s", token, token);
	assert_int_equal(preview_get(host, "GET", path, NULL, NULL), 401);
}

static void
test_cookie_relays_to_guest(void **state)
{
	_cleanup_free_ char *resp = NULL, *ck = cookie_header(token), *want = NULL;

	/* the guest's own answer, to the request as it was sent */
	assert_int_equal(preview_get(host, "GET", "/hello?q=1", ck, &resp), 200);
	harness_expect_in(resp, "\r\nX-Guest: yes\r\n");
	harness_expect_in(resp, "guest saw 'GET /hello?q=1 HTTP/1.1'");
	want = strdup_printf("host=%s ", host);
	harness_expect_in(resp, want);
	free(resp);
	resp = NULL;
	/* a cookie of the same name a page set for a parent domain comes too, before or after
	 * this host's own (a guest's server can set one for the whole preview domain): it must
	 * not lock the user out, nor open anything alone */
	{
		_cleanup_free_ char *two = strdup_printf(
		        "Cookie: sbx_preview=AAAAforged; theme=dark; sbx_preview=%s\r\n", token);
		_cleanup_free_ char *split = strdup_printf(
		        "Cookie: sbx_preview=%s\r\nCookie: sbx_preview=AAAAforged\r\n", token);
		assert_int_equal(preview_get(host, "GET", "/hello", two, &resp), 200);
		harness_expect_in(resp, "\r\nX-Guest: yes\r\n");
		free(resp);
		resp = NULL;
		assert_int_equal(preview_get(host, "GET", "/hello", split, NULL), 200);
		assert_int_equal(preview_get(host, "GET", "/hello",
		                             "Cookie: sbx_preview=AAAA; sbx_preview=BBBB\r\n",
		                             &resp),
		                 401);
		harness_expect_not_in(resp, "X-Guest");
		free(resp);
		resp = NULL;
	}
	/* an API path on a preview is the guest's too: the listener serves no API */
	assert_int_equal(preview_get(host, "GET", "/v1/sandboxes", ck, &resp), 200);
	harness_expect_in(resp, "guest saw 'GET /v1/sandboxes HTTP/1.1'");
	harness_expect_not_in(resp, box);
	free(resp);
	resp = NULL;
	/* a body goes on as it comes */
	{
		const struct harness_req rq = { .port = preview_port,
			                        .method = "POST",
			                        .path = "/submit",
			                        .host = host,
			                        .headers = ck,
			                        .body = "{\"hello\":\"guest\"}" };
		assert_int_equal(harness_request(&rq, &resp), 200);
		harness_expect_in(resp, "body={\"hello\":\"guest\"}");
	}
	free(resp);
	resp = NULL;
	/* the first request of a connection may carry a body of any size: it streams on to the
	 * guest as it comes (8 MiB here, far more than the listener would hold) */
	{
		static char big[8u << 20];
		uint64_t sum = 0;
		_cleanup_free_ char *head = strdup_printf(
		        "POST /sink HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %zu\r\n\r\n", host,
		        ck, sizeof(big));
		_cleanup_free_ char *expect = NULL;
		char *buf = NULL;
		size_t len = 0, off = 0;
		int fd = harness_connect(NULL, preview_port);

		for (size_t i = 0; i < sizeof(big); i++) {
			big[i] = (char)(i * 7 % 251);
			sum += (uint8_t)big[i];
		}
		expect = strdup_printf("sink %016llx %016llx", (unsigned long long)sizeof(big),
		                       (unsigned long long)sum);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, head, strlen(head)), (ssize_t)strlen(head));
		while (off < sizeof(big)) {
			ssize_t k = write(fd, big + off, sizeof(big) - off);
			assert_true(k > 0);
			off += (size_t)k;
		}
		(void)harness_stream_read(fd, 20000, expect, &buf, &len);
		close(fd);
		assert_non_null(buf);
		harness_expect_in(buf, "HTTP/1.1 200 OK");
		harness_expect_in(buf, expect);
		free(buf);
	}
	/* keep-alive: two requests on one connection, both the guest's */
	{
		_cleanup_free_ char *two = strdup_printf(
		        "GET /one HTTP/1.1\r\nHost: %s\r\n%s\r\nGET /two HTTP/1.1\r\nHost: %s\r\n%s"
		        "Connection: close\r\n\r\n",
		        host, ck, host, ck);
		char *buf = NULL;
		size_t len = 0;
		int fd = harness_connect(NULL, preview_port);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, two, strlen(two)), (ssize_t)strlen(two));
		(void)harness_stream_read(fd, 10000, "guest saw 'GET /two", &buf, &len);
		close(fd);
		assert_non_null(buf);
		harness_expect_in(buf, "guest saw 'GET /one HTTP/1.1'");
		harness_expect_in(buf, "guest saw 'GET /two HTTP/1.1'");
		free(buf);
	}
	/* each connection is audited */
	{
		_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s/events", box);
		json_t *ev = harness_json(p.sock, "GET", path, NULL, 200), *e;
		size_t i;
		bool seen = false;
		json_array_foreach (json_object_get(ev, "events"), i, e)
			if (streq(harness_str(e, "type") ? harness_str(e, "type") : "",
			          "tunnel.opened") &&
			    json_integer_value(json_object_get(e, "port")) == guest_port)
				seen = true;
		json_decref(ev);
		assert_true(seen);
	}
}

static void
test_websocket_upgrade(void **state)
{
	_cleanup_free_ char *ck = cookie_header(token),
	                    *req = strdup_printf("GET /ws HTTP/1.1\r\nHost: %s\r\n%sConnection: "
	                                         "Upgrade\r\nUpgrade: websocket\r\n"
	                                         "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
	                                         "dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
	                                         host, ck);
	char *buf = NULL;
	size_t len = 0;
	int fd = harness_connect(NULL, preview_port);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	(void)harness_stream_read(fd, 10000, "\r\n\r\n", &buf, &len);
	assert_non_null(buf);
	/* the guest's own 101, then its bytes both ways */
	assert_true(str_has_prefix(buf, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo"));
	assert_int_equal(write(fd, "ping-through-preview", 20), 20);
	(void)harness_stream_read(fd, 10000, "ping-through-preview", &buf, &len);
	harness_expect_in(buf, "ping-through-preview");
	/* half-close: our end's EOF reaches the guest, whose server then closes */
	shutdown(fd, SHUT_WR);
	assert_int_equal(harness_stream_read(fd, 10000, NULL, &buf, &len), 1);
	close(fd);
	free(buf);
}

static void
test_refusals(void **state)
{
	_cleanup_free_ char *resp = NULL, *ck = cookie_header(token);
	char other_url[512], other_host[256], other_token[128], box_b[64], b_url[512], b_host[256],
	        b_token[128], h[300];
	int other_port = guest_port == 65535 ? 1 : guest_port + 1;

	/* no token at all */
	assert_int_equal(preview_get(host, "GET", "/", NULL, &resp), 401);
	harness_expect_in(resp, "Content-Type: text/html");
	harness_expect_in(resp, "Content-Security-Policy: default-src 'none'");
	harness_expect_not_in(resp, "X-Guest");
	free(resp);
	resp = NULL;
	/* this port's token on another port's host, and another port's token here */
	preview_of(box, other_port, other_url, other_host, other_token);
	assert_int_equal(preview_get(other_host, "GET", "/", ck, NULL), 401);
	{
		_cleanup_free_ char *path = strdup_printf("/?sbx_preview=%s", token);
		_cleanup_free_ char *ck2 = cookie_header(other_token);
		assert_int_equal(preview_get(other_host, "GET", path, NULL, NULL), 401);
		assert_int_equal(preview_get(host, "GET", "/", ck2, NULL), 401);
	}
	/* another sandbox's token (alice's second) does not open this one, nor this one's that */
	create_box(&alice, box_b);
	preview_of(box_b, guest_port, b_url, b_host, b_token);
	{
		_cleanup_free_ char *ckb = cookie_header(b_token);
		assert_int_equal(preview_get(host, "GET", "/", ckb, NULL), 401);
		assert_int_equal(preview_get(b_host, "GET", "/", ck, NULL), 401);
		assert_int_equal(preview_get(b_host, "GET", "/", ckb, NULL), 200);
	}
	/* Hosts that are not a preview's: never the dashboard, never the API */
	snprintf(h, sizeof(h), "127.0.0.1:%d", preview_port);
	assert_int_equal(preview_get(h, "GET", "/", ck, &resp), 404);
	harness_expect_not_in(resp, "<script");
	free(resp);
	resp = NULL;
	assert_int_equal(preview_get("localhost", "GET", "/v1/sandboxes", ck, &resp), 404);
	harness_expect_not_in(resp, box);
	free(resp);
	resp = NULL;
	assert_int_equal(preview_get("evil.example", "GET", "/", ck, NULL), 404);
	/* the preview host under another domain, or spelt otherwise */
	snprintf(h, sizeof(h), "p-%s-%d.evil.example", box + 4, guest_port);
	assert_int_equal(preview_get(h, "GET", "/", ck, NULL), 404);
	snprintf(h, sizeof(h), "p-%s-0%d.localhost", box + 4, guest_port);
	assert_int_equal(preview_get(h, "GET", "/", ck, NULL), 404);
	snprintf(h, sizeof(h), "sub.p-%s-%d.localhost", box + 4, guest_port);
	assert_int_equal(preview_get(h, "GET", "/", ck, NULL), 404);
	/* the API listener takes the token in no form */
	{
		char bearer[300], cookie[300], path[300];
		const struct harness_req a = {
			.port = api_port, .method = "GET", .path = "/v1/sandboxes", .headers = ck
		};
		assert_int_equal(harness_request(&a, NULL), 401);
		snprintf(bearer, sizeof(bearer), "Authorization: Bearer %s\r\n", token);
		const struct harness_req b = { .port = api_port,
			                       .method = "GET",
			                       .path = "/v1/sandboxes",
			                       .headers = bearer };
		assert_int_equal(harness_request(&b, NULL), 401);
		snprintf(path, sizeof(path), "/v1/sandboxes?sbx_preview=%s", token);
		const struct harness_req c = { .port = api_port, .method = "GET", .path = path };
		assert_int_equal(harness_request(&c, NULL), 401);
		/* nor does it carry a preview on its own Host */
		snprintf(cookie, sizeof(cookie), "%s", host);
		const struct harness_req e = { .port = api_port,
			                       .method = "GET",
			                       .path = "/",
			                       .host = cookie,
			                       .headers = ck };
		assert_int_equal(harness_request(&e, NULL), 403);
	}
}

static void
test_closed_stopped_gone(void **state)
{
	_cleanup_free_ char *resp = NULL, *ck = NULL, *path = NULL;
	char box_c[64], c_url[512], c_host[256], c_token[128];
	int closed = harness_free_port();

	/* nothing listens there: 502, a page saying so */
	preview_of(box, closed, c_url, c_host, c_token);
	ck = cookie_header(c_token);
	assert_int_equal(preview_get(c_host, "GET", "/", ck, &resp), 502);
	harness_expect_in(resp, "Nothing listens on 127.0.0.1:");
	free(resp);
	resp = NULL;
	free(ck);
	/* stopped: 503; gone: 404 */
	create_box(&alice, box_c);
	preview_of(box_c, guest_port, c_url, c_host, c_token);
	ck = cookie_header(c_token);
	assert_int_equal(preview_get(c_host, "GET", "/", ck, NULL), 200);
	path = strdup_printf("/v1/sandboxes/%s/stop", box_c);
	json_decref(harness_json_headers(p.sock, alice.hkey, "POST", path, NULL, 200, NULL));
	assert_int_equal(preview_get(c_host, "GET", "/", ck, &resp), 503);
	harness_expect_in(resp, "stopped");
	free(resp);
	resp = NULL;
	/* a preview of a sandbox that is not running is not handed out */
	assert_int_equal(ask_preview(alice.hkey, box_c, "{\"port\":80}", NULL), 409);
	free(path);
	path = strdup_printf("/v1/sandboxes/%s", box_c);
	json_decref(harness_json_headers(p.sock, alice.hkey, "DELETE", path, NULL, 204, NULL));
	assert_int_equal(preview_get(c_host, "GET", "/", ck, &resp), 404);
	harness_expect_in(resp, "no longer exists");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_url_and_route),
		cmocka_unit_test(test_token_becomes_cookie),
		cmocka_unit_test(test_cookie_relays_to_guest),
		cmocka_unit_test(test_websocket_upgrade),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_closed_stopped_gone),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
