/* test-tunnel.c: GET …/tunnel?port=N over sbx-tunnel/1 on the fake backend whose agent is
 * sandbox-guestd in test mode: its "guest" is this machine, so a tunnel reaches a listener this
 * test opens on 127.0.0.1. Bytes both ways, half-closes both ways, the audit record, 409 when
 * nothing listens (no 101, and the connection closes cleanly), another user's sandbox 404, no
 * credential 401, malformed requests 400, and a client that never reads (or a guest that never
 * reads) does not make the daemon grow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define TIMEOUT_MS 20000

static struct daemon_proc p;
static char dir[256];
static int tcp_port;
static char alice_hdr[300], bob_hdr[300]; /* "Authorization: Bearer KEY\r\n" */
static char box[64];                      /* alice's running sandbox */

/* ---- users ---- */

static void
make_user(const char *email, const char *password, char *hdr, size_t size)
{
	_cleanup_free_ char *body = strdup_printf(
	        "{\"email\":\"%s\",\"password\":\"%s\",\"role\":\"user\"}", email, password);
	_cleanup_free_ char *login =
	        strdup_printf("{\"email\":\"%s\",\"password\":\"%s\"}", email, password);
	_cleanup_free_ char *cookie = NULL, *sess = NULL;
	char *head = NULL, *semi;
	json_t *j;

	json_decref(harness_json(p.sock, "POST", "/v1/users", body, 201));
	j = harness_json_headers(p.sock, NULL, "POST", "/v1/auth/login", login, 200, &head);
	cookie = harness_header(head, "Set-Cookie");
	assert_non_null(cookie);
	if ((semi = strchr(cookie, ';')))
		*semi = '\0';
	sess = strdup_printf("Cookie: %s\r\nX-CSRF-Token: %s\r\n", cookie,
	                     harness_str(j, "csrf_token"));
	json_decref(j);
	free(head);
	j = harness_json_headers(p.sock, sess, "POST", "/v1/keys", "{\"name\":\"t\"}", 201, NULL);
	snprintf(hdr, size, "Authorization: Bearer %s\r\n", harness_str(j, "key"));
	json_decref(j);
}

static int
setup(void **state)
{
	const char *guestd = getenv("SANDBOX_GUESTD");
	char env_agent[512], token[300], listen[64];
	json_t *j;
	FILE *f;

	if (!guestd || access(guestd, X_OK) < 0) {
		fprintf(stderr, "skip: SANDBOX_GUESTD is not set to sandbox-guestd (run through "
		                "ctest)\n");
		exit(77);
	}
	if (harness_tmpdir(dir, sizeof(dir)) < 0)
		return -1;
	snprintf(token, sizeof(token), "%s/token", dir);
	f = fopen(token, "w");
	if (!f || fputs("tunnel-test-operator-token\n", f) < 0 || fclose(f) != 0 ||
	    chmod(token, 0600) < 0)
		return -1;
	tcp_port = harness_free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", tcp_port);
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", guestd);
	if (harness_start(&p, harness_binary("SANDBOXD_FAKE"),
	                  (const char *const[]){ "--listen", listen, "--token-file", token, NULL },
	                  /* a small quarantine under ASan, so that what the daemon frees does
	                   * not stay resident (memory is measured) */
	                  (const char *const[]){ env_agent,
	                                         "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:"
	                                         "quarantine_size_mb=4",
	                                         NULL }) < 0)
		return -1;
	make_user("alice@example.com", "alice-password-1", alice_hdr, sizeof(alice_hdr));
	make_user("bob@example.com", "bob-password-22", bob_hdr, sizeof(bob_hdr));
	j = harness_json_headers(p.sock, alice_hdr, "POST", "/v1/sandboxes", "{\"name\":\"tb\"}",
	                         201, NULL);
	snprintf(box, sizeof(box), "%s", harness_str(j, "id"));
	json_decref(j);
	return 0;
}

static int
teardown(void **state)
{
	char cmd[320];
	int rc;

	(void)harness_delete_all(p.sock);
	rc = harness_stop(&p, SIGTERM);
	harness_cleanup(&p);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (!getenv("HARNESS_KEEP") && system(cmd) != 0)
		return -1;
	return rc == 0 ? 0 : -1;
}

/* ---- helpers ---- */

static int
tcp_listen(uint16_t *ret_port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
		                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	*ret_port = ntohs(sin.sin_port);
	return fd;
}

static int
unix_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_true(strlen(p.sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, p.sock, strlen(p.sock) + 1);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static bool
readable(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, timeout_ms) == 1;
}

/* Sends the tunnel request for ref and port (query: "port=N", or as given) with hdrs and reads
 * the answer's head byte by byte (nothing of the tunnel's bytes with it). Returns the status;
 * *ret_fd the connection (caller closes), *ret_head the head (caller frees; may be NULL). */
static int
tunnel_request(const char *hdrs, const char *ref, const char *query, const char *upgrade,
               int *ret_fd, char **ret_head)
{
	int fd = unix_connect();
	_cleanup_free_ char *req = strdup_printf(
	        "GET /v1/sandboxes/%s/tunnel?%s HTTP/1.1\r\nHost: localhost\r\n%s%s\r\n", ref,
	        query, hdrs ? hdrs : "", upgrade ? upgrade : "");
	char head[4096];
	size_t n = 0;
	int status = -1;

	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	while (n < sizeof(head) - 1 && !(n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0)) {
		assert_true(readable(fd, TIMEOUT_MS));
		assert_int_equal(read(fd, head + n, 1), 1);
		n++;
	}
	head[n] = '\0';
	assert_int_equal(sscanf(head, "HTTP/1.1 %d", &status), 1);
	*ret_fd = fd;
	if (ret_head)
		*ret_head = strdup(head);
	return status;
}

#define UPGRADE "Connection: Upgrade\r\nUpgrade: sbx-tunnel/1\r\n"

static int
open_tunnel(const char *hdrs, uint16_t port)
{
	_cleanup_free_ char *q = strdup_printf("port=%u", port);
	int fd, status = tunnel_request(hdrs, box, q, UPGRADE, &fd, NULL);

	assert_int_equal(status, 101);
	return fd;
}

static void
read_exactly(int fd, char *out, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k;
		assert_true(readable(fd, TIMEOUT_MS));
		k = read(fd, out + got, n - got);
		assert_true(k > 0);
		got += (size_t)k;
	}
	out[n] = '\0';
}

static bool
reads_eof(int fd)
{
	char ch;

	return readable(fd, TIMEOUT_MS) && read(fd, &ch, 1) == 0;
}

static int
accept_one(int lfd)
{
	int fd;

	assert_true(readable(lfd, TIMEOUT_MS));
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

/* ---- cases ---- */

static void
test_bytes_and_half_closes(void **state)
{
	uint16_t port;
	int lfd = tcp_listen(&port), c, g;
	char buf[64];
	_cleanup_free_ char *events_path = strdup_printf("/v1/sandboxes/%s/events", box);
	_cleanup_free_ char *want = strdup_printf("\"port\":%u", port);
	char *text;
	json_t *j;

	/* the client ends first: the guest's side reads EOF, and its answer still comes */
	c = open_tunnel(alice_hdr, port);
	g = accept_one(lfd);
	assert_int_equal(write(c, "hello", 5), 5);
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	read_exactly(g, buf, 5);
	assert_string_equal(buf, "hello");
	assert_true(reads_eof(g));
	assert_int_equal(write(g, "world", 5), 5);
	close(g);
	read_exactly(c, buf, 5);
	assert_string_equal(buf, "world");
	assert_true(reads_eof(c));
	close(c);

	/* the guest ends first: the client reads EOF, and its bytes still go */
	c = open_tunnel(alice_hdr, port);
	g = accept_one(lfd);
	assert_int_equal(write(g, "first", 5), 5);
	assert_int_equal(shutdown(g, SHUT_WR), 0);
	read_exactly(c, buf, 5);
	assert_string_equal(buf, "first");
	assert_true(reads_eof(c));
	assert_int_equal(write(c, "after", 5), 5);
	read_exactly(g, buf, 5);
	assert_string_equal(buf, "after");
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	assert_true(reads_eof(g));
	close(g);
	close(c);
	close(lfd);

	/* audited as tunnel.opened with its port */
	j = harness_json_headers(p.sock, alice_hdr, "GET", events_path, NULL, 200, NULL);
	text = json_dumps(j, JSON_COMPACT);
	harness_expect_in(text, "\"tunnel.opened\"");
	harness_expect_in(text, want);
	free(text);
	json_decref(j);
}

static void
test_refusals(void **state)
{
	uint16_t port;
	int lfd = tcp_listen(&port), fd, status;
	_cleanup_free_ char *q = NULL, *path = NULL, *out = NULL;
	char *head = NULL, body[512];
	ssize_t n;

	close(lfd); /* nothing listens there now */
	q = strdup_printf("port=%u", port);
	/* a client that sends its tunnel's first bytes right behind the head (here an API
	 * request, as if the tunnel were to carry one): refused, they are never read as a
	 * request of the API connection */
	status = tunnel_request(alice_hdr, box, q,
	                        UPGRADE "\r\nGET /v1/health HTTP/1.1\r\nHost: localhost\r\n", &fd,
	                        &head);
	assert_int_equal(status, 409);
	harness_expect_not_in(head, "Upgrade: sbx-tunnel/1");
	/* the head says what happens: the connection closes after the answer */
	harness_expect_in(head, "Connection: close");
	free(head);
	/* the body, then the connection closes cleanly (promptly: not at an idle timeout) */
	n = 0;
	for (;;) {
		ssize_t k;
		if (!readable(fd, 3000))
			fail_msg("the connection stayed open after a refused upgrade");
		k = read(fd, body + n, sizeof(body) - 1 - (size_t)n);
		assert_true(k >= 0);
		if (k == 0)
			break;
		n += k;
	}
	body[n] = '\0';
	harness_expect_in(body, "nothing listens on 127.0.0.1:");
	harness_expect_not_in(body, "HTTP/1.1 200");
	close(fd);

	/* another user's sandbox answers like a missing one */
	assert_int_equal(tunnel_request(bob_hdr, box, q, UPGRADE, &fd, NULL), 404);
	close(fd);
	assert_int_equal(tunnel_request(alice_hdr, "sbx_0000000000000000", q, UPGRADE, &fd, NULL),
	                 404);
	close(fd);
	/* what is not a tunnel request */
	assert_int_equal(tunnel_request(alice_hdr, box, q, NULL, &fd, NULL), 400);
	close(fd);
	assert_int_equal(tunnel_request(alice_hdr, box, "port=0", UPGRADE, &fd, NULL), 400);
	close(fd);
	assert_int_equal(tunnel_request(alice_hdr, box, "port=65536", UPGRADE, &fd, NULL), 400);
	close(fd);
	assert_int_equal(tunnel_request(alice_hdr, box, "", UPGRADE, &fd, NULL), 400);
	close(fd);
	assert_int_equal(tunnel_request(alice_hdr, box, "port=80&port=81", UPGRADE, &fd, NULL),
	                 400);
	close(fd);
	/* no credential over TCP */
	path = strdup_printf("/v1/sandboxes/%s/tunnel?%s", box, q);
	status = harness_request(
	        &(struct harness_req){
	                .port = tcp_port, .method = "GET", .path = path, .headers = UPGRADE },
	        &out);
	assert_int_equal(status, 401);
}

/* Bytes a fresh socket's writer could push before the peer read: loopback's buffers. */
static void
test_no_reader_holds_bounded_memory(void **state)
{
	uint16_t port;
	int lfd = tcp_listen(&port), c, g;
	long before, settled, after;
	pid_t writer;
	size_t sent = 0;
	static char chunk[65536];

	/* the guest's side writes 64 MiB; the client reads nothing */
	c = open_tunnel(alice_hdr, port);
	g = accept_one(lfd);
	before = harness_proc_kib(p.pid, "VmRSS");
	writer = fork();
	assert_true(writer >= 0);
	if (writer == 0) {
		memset(chunk, 'x', sizeof(chunk));
		for (int i = 0; i < 1024; i++)
			if (write(g, chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk))
				_exit(1);
		_exit(0);
	}
	sleep(2);
	settled = harness_proc_kib(p.pid, "VmRSS");
	sleep(2);
	after = harness_proc_kib(p.pid, "VmRSS");
	assert_true(before > 0 && settled > 0 && after > 0);
	/* the window (1 MiB) and the connection's queue: not the 64 MiB */
	if (after - before > 24 * 1024 || after - settled > 4 * 1024)
		fail_msg("sandboxd grew from %ld to %ld then %ld KiB with a client not reading",
		         before, settled, after);
	assert_int_equal(waitpid(writer, NULL, WNOHANG), 0); /* still blocked: nobody read */
	kill(writer, SIGKILL);
	waitpid(writer, NULL, 0);
	close(c);
	close(g);

	/* the client writes; the guest's side reads nothing: the client is held back */
	c = open_tunnel(alice_hdr, port);
	g = accept_one(lfd);
	assert_int_equal(fcntl(c, F_SETFL, O_NONBLOCK), 0);
	before = harness_proc_kib(p.pid, "VmRSS");
	for (uint64_t deadline = now_mono_ms() + 3000;
	     now_mono_ms() < deadline && sent < (64u << 20);) {
		ssize_t k = send(c, chunk, sizeof(chunk), MSG_NOSIGNAL);
		if (k > 0)
			sent += (size_t)k;
		else
			usleep(20000);
	}
	after = harness_proc_kib(p.pid, "VmRSS");
	if (sent >= (48u << 20))
		fail_msg("the client could send %zu bytes to a guest socket nobody reads", sent);
	if (after - before > 24 * 1024)
		fail_msg("sandboxd grew from %ld to %ld KiB with a guest not reading", before,
		         after);
	/* and nothing was lost: the guest's side reads every byte once it reads */
	{
		size_t got = 0;
		char big[65536];
		assert_int_equal(shutdown(c, SHUT_WR), 0);
		for (;;) {
			ssize_t k;
			assert_true(readable(g, TIMEOUT_MS));
			k = read(g, big, sizeof(big));
			assert_true(k >= 0);
			if (k == 0)
				break;
			got += (size_t)k;
		}
		assert_int_equal(got, sent);
	}
	close(c);
	close(g);
	close(lfd);
}

/* Thousands of tunnels to a port nothing listens on, one after another: each is answered 409
 * and closed, and the daemon ends with the descriptors and about the memory it began with. */
static void
test_refused_opens_hold_nothing(void **state)
{
	uint16_t port;
	int lfd = tcp_listen(&port), fd;
	_cleanup_free_ char *q = strdup_printf("port=%u", port), *fddir = NULL;
	long rss_before, rss_after;
	int fds_before, fds_after;

	close(lfd);
	fddir = strdup_printf("/proc/%d/fd", (int)p.pid);
	/* 500 first, so that what the first ones set up once (and the allocator's caches, and
	 * the sanitizer's quarantine) is not counted */
	for (int i = 0; i < 500; i++) {
		assert_int_equal(tunnel_request(alice_hdr, box, q, UPGRADE, &fd, NULL), 409);
		close(fd);
	}
	usleep(200000);
	fds_before = harness_count_entries(fddir);
	rss_before = harness_proc_kib(p.pid, "VmRSS");
	for (int i = 0; i < 2000; i++) {
		assert_int_equal(tunnel_request(alice_hdr, box, q, UPGRADE, &fd, NULL), 409);
		close(fd);
	}
	usleep(500000);
	fds_after = harness_count_entries(fddir);
	rss_after = harness_proc_kib(p.pid, "VmRSS");
	print_message("2000 refused tunnels: descriptors %d -> %d, RSS %ld -> %ld KiB\n",
	              fds_before, fds_after, rss_before, rss_after);
	assert_true(fds_before > 0);
	if (fds_after > fds_before + 2)
		fail_msg("the daemon holds %d descriptors after 2000 refused tunnels, %d before",
		         fds_after, fds_before);
	if (rss_after - rss_before > 8 * 1024)
		fail_msg("the daemon grew from %ld to %ld KiB over 2000 refused tunnels",
		         rss_before, rss_after);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes_and_half_closes),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_no_reader_holds_bounded_memory),
		cmocka_unit_test(test_refused_opens_hold_nothing),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
