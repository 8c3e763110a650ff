/* test-pull-guard.c: what a user's create can make sandboxd connect to. The product sandboxd
 * (real image installs, the qemu backend; no VM needs to boot) runs in a network namespace of
 * this test's own, whose lo also carries a private (10.99.0.1) and a link-local
 * (169.254.99.1) address. Listeners on those addresses and on 127.0.0.1 stand for services of
 * the host's networks: a user's create naming one as a registry is refused with one fixed
 * message, the same whether the port is open or not, and accept() never sees a connection.
 * A registry the operator named (--insecure-registry) is reached (the control that shows the
 * listeners would see one), --user-pull off keeps users from pulling at all, and the
 * policy's images list bounds what they may pull. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "harness.h"
#include "strv.h"
#include "util.h"

#define PRIVATE_ADDR "10.99.0.1"
#define LINK_LOCAL_ADDR "169.254.99.1"
/* an install that is refused answers at once; one that connects is held by the test */
#define ANSWER_MS 30000

static struct daemon_proc p;

/* A service of the host's networks: a listening socket nobody accepts on, so a connection
 * made to it waits in its queue, where poll() sees it. */
struct listener {
	const char *addr;
	int fd;
	int port;
	int closed_port; /* a port of the same address where nothing listens */
};

static struct listener loopback = { .addr = "127.0.0.1" };
static struct listener private_net = { .addr = PRIVATE_ADDR };
static struct listener link_local = { .addr = LINK_LOCAL_ADDR };
static struct listener named = { .addr = "127.0.0.1" }; /* the --insecure-registry */
static struct listener *const guarded[] = { &loopback, &private_net, &link_local };

static char named_flag[64]; /* 127.0.0.1:PORT of named */
static char user_auth[256]; /* "Authorization: Bearer sbk_...\r\n" */

static int
bind_tcp(const char *addr, bool listening)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, addr, &sa.sin_addr), 1);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		fail_msg("bind %s: %s", addr, strerror(errno));
	if (listening)
		assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	return fd;
}

static int
port_of(int fd)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	return ntohs(sa.sin_port);
}

static void
listener_open(struct listener *l)
{
	int spare;

	l->fd = bind_tcp(l->addr, true);
	l->port = port_of(l->fd);
	/* a port bound and let go: nothing listens there (the kernel hands ports out in
	 * turn, so it stays free for the few seconds of the test) */
	spare = bind_tcp(l->addr, false);
	l->closed_port = port_of(spare);
	close(spare);
}

/* Whether a connection waits on l (timeout_ms 0: whether one came already). */
static bool
listener_hit(struct listener *l, int timeout_ms)
{
	struct pollfd pfd = { .fd = l->fd, .events = POLLIN };

	return poll(&pfd, 1, timeout_ms) == 1;
}

/* Takes the connection that waits on l and closes it: the install it came from fails. */
static void
listener_drop(struct listener *l)
{
	int c = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);

	assert_true(c >= 0);
	close(c);
}

static const char *
err_field(json_t *j, const char *key)
{
	return json_string_value(json_object_get(json_object_get(j, "error"), key));
}

/* The one message for a registry on a local address that the operator did not name. */
static char *
refusal(const char *hostport)
{
	return strdup_printf("registry %s is on a loopback, private or link-local address; "
	                     "sandboxd pulls from such a registry only when the operator names "
	                     "it (--insecure-registry or --local-registry)",
	                     hostport);
}

/* POST /v1/sandboxes as the user (hdrs) or the operator (NULL) with image; expects want and
 * returns the answer. */
static json_t *
create(const char *hdrs, const char *image, bool wait, int want)
{
	_cleanup_free_ char *body =
	        strdup_printf("{\"image\":\"%s\"%s}", image, wait ? "" : ",\"wait\":false");
	char *head = NULL, *out = NULL;
	int status;
	json_t *j;

	status = harness_http_headers(p.sock, "POST", "/v1/sandboxes", hdrs, body, &head, &out);
	if (status != want)
		fail_msg("create %s: expected %d, got %d: %s", image, want, status,
		         out ? out : "(no answer)");
	j = json_loads(out ? out : "", 0, NULL);
	free(head);
	free(out);
	assert_non_null(j);
	return j;
}

static void
expect_refused(const char *hdrs, const char *image, const char *message)
{
	json_t *j = create(hdrs, image, true, 403);

	assert_string_equal(err_field(j, "code"), "refused");
	if (message && strcmp(err_field(j, "message"), message) != 0)
		fail_msg("create %s: message\n  %s\nnot\n  %s", image, err_field(j, "message"),
		         message);
	json_decref(j);
}

/* Polls the user's sandbox until its state is want; returns it. */
static json_t *
await_state(const char *id, const char *want)
{
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s", id);

	for (int i = 0; i < 600; i++) {
		json_t *j = harness_json_headers(p.sock, user_auth, "GET", path, NULL, 200, NULL);
		if (strcmp(harness_str(j, "state"), want) == 0)
			return j;
		json_decref(j);
		usleep(50000);
	}
	fail_msg("sandbox %s never became %s", id, want);
	return NULL;
}

static void
delete_sandbox(const char *id)
{
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s", id);

	json_decref(harness_json_headers(p.sock, user_auth, "DELETE", path, NULL, 204, NULL));
}

/* alice, a plain user, with an API key (the operator makes her; she signs in for the key). */
static void
make_user(void)
{
	const char *login = "{\"email\":\"alice@example.com\",\"password\":\"alice-password-1\"}";
	char *head = NULL, *cookie, hdrs[512];
	json_t *j;

	json_decref(harness_json_headers(p.sock, NULL, "POST", "/v1/users",
	                                 "{\"email\":\"alice@example.com\",\"password\":"
	                                 "\"alice-password-1\",\"role\":\"user\"}",
	                                 201, NULL));
	j = harness_json_headers(p.sock, NULL, "POST", "/v1/auth/login", login, 200, &head);
	cookie = harness_header(head, "Set-Cookie");
	assert_non_null(cookie);
	cookie[strcspn(cookie, ";")] = '\0';
	snprintf(hdrs, sizeof(hdrs), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", cookie,
	         harness_str(j, "csrf_token"));
	free(cookie);
	free(head);
	json_decref(j);
	j = harness_json_headers(p.sock, hdrs, "POST", "/v1/keys", "{\"name\":\"t\"}", 201, NULL);
	snprintf(user_auth, sizeof(user_auth), "Authorization: Bearer %s\r\n",
	         harness_str(j, "key"));
	json_decref(j);
}

/* The daemon's flags: the named registry, the bundle's image, and more. */
static const char *const *
args_with(const char *a, const char *b, const char *c, const char *d)
{
	static const char *args[16];
	size_t n = 0;

	args[n++] = "--insecure-registry";
	args[n++] = named_flag;
	args[n++] = "--accel";
	args[n++] = "tcg";
	args[n++] = "--default-image";
	args[n++] = "busybox";
	for (const char *const *x = (const char *const[]){ a, b, c, d, NULL }; *x; x++)
		args[n++] = *x;
	args[n] = NULL;
	return args;
}

static void
restart_with(const char *a, const char *b, const char *c, const char *d)
{
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_equal(
	        harness_restart(&p, harness_binary("SANDBOXD"), args_with(a, b, c, d), NULL), 0);
}

static int
setup(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(guarded); i++)
		listener_open(guarded[i]);
	listener_open(&named);
	snprintf(named_flag, sizeof(named_flag), "127.0.0.1:%d", named.port);
	if (harness_start_vm(&p, args_with(NULL, NULL, NULL, NULL), NULL) < 0)
		return -1;
	make_user();
	return 0;
}

static int
teardown(void **state)
{
	int rc = harness_stop(&p, SIGTERM);

	harness_cleanup(&p);
	return rc == 0 ? 0 : -1;
}

static void
assert_no_connection(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(guarded); i++)
		if (listener_hit(guarded[i], 0))
			fail_msg("a connection reached the listener on %s:%d", guarded[i]->addr,
			         guarded[i]->port);
}

static void
test_local_registries_are_refused_before_any_connection(void **state)
{
	/* each address, open port and closed, by address and (loopback) by a name that
	 * resolves there: one message, naming only what the request named */
	for (size_t i = 0; i < ARRAY_SIZE(guarded); i++) {
		struct listener *l = guarded[i];
		const int ports[] = { l->port, l->closed_port };
		for (size_t k = 0; k < ARRAY_SIZE(ports); k++) {
			_cleanup_free_ char *hp = strdup_printf("%s:%d", l->addr, ports[k]);
			_cleanup_free_ char *image = strdup_printf("%s/sbx/x:1", hp);
			_cleanup_free_ char *want = refusal(hp);
			expect_refused(user_auth, image, want);
		}
	}
	{
		_cleanup_free_ char *hp = strdup_printf("localhost:%d", loopback.port);
		_cleanup_free_ char *image = strdup_printf("%s/sbx/x:1", hp);
		_cleanup_free_ char *want = refusal(hp);
		expect_refused(user_auth, image, want);
	}
	/* without waiting: the sandbox fails with the same words */
	{
		_cleanup_free_ char *hp = strdup_printf("%s:%d", PRIVATE_ADDR, private_net.port);
		_cleanup_free_ char *image = strdup_printf("%s/sbx/x:1", hp);
		_cleanup_free_ char *want = refusal(hp);
		json_t *sb = create(user_auth, image, false, 201), *got;
		got = await_state(harness_str(sb, "id"), "failed");
		assert_string_equal(harness_str(got, "reason"), want);
		json_decref(got);
		delete_sandbox(harness_str(sb, "id"));
		json_decref(sb);
	}
	/* the operator is held to the same rule (POST /v1/images, over the unix socket) */
	{
		_cleanup_free_ char *hp = strdup_printf("%s:%d", LINK_LOCAL_ADDR, link_local.port);
		_cleanup_free_ char *body = strdup_printf("{\"image\":\"%s/sbx/x:1\"}", hp);
		_cleanup_free_ char *want = refusal(hp);
		json_t *j =
		        harness_json_timeout(p.sock, "POST", "/v1/images", body, ANSWER_MS, 403);
		assert_string_equal(err_field(j, "code"), "refused");
		assert_string_equal(err_field(j, "message"), want);
		json_decref(j);
	}
	assert_no_connection();
}

/* The control: a registry the operator named is reached, and the listener sees it. */
static void
test_a_named_registry_is_reached(void **state)
{
	_cleanup_free_ char *image = strdup_printf("%s/sbx/x:1", named_flag);
	json_t *sb = create(user_auth, image, false, 201), *got;

	if (!listener_hit(&named, ANSWER_MS))
		fail_msg("no connection to the named registry %s", named_flag);
	listener_drop(&named);
	got = await_state(harness_str(sb, "id"), "failed");
	json_decref(got);
	delete_sandbox(harness_str(sb, "id"));
	json_decref(sb);
	assert_no_connection();
}

static void
test_user_pull_off(void **state)
{
	_cleanup_free_ char *image = strdup_printf("%s/sbx/y:1", named_flag);
	_cleanup_free_ char *body = strdup_printf("{\"image\":\"%s\"}", image);
	json_t *j, *sb;

	restart_with("--user-pull", "off", NULL, NULL);
	/* a user's create that would pull is refused, waiting or not, before any install */
	expect_refused(user_auth, image, NULL);
	j = create(user_auth, image, false, 403);
	assert_non_null(strstr(err_field(j, "message"), "--user-pull off"));
	json_decref(j);
	assert_false(listener_hit(&named, 0));

	/* an image this server has (the built-in one) is no pull: the create goes on */
	sb = create(user_auth, "busybox", false, 201);
	delete_sandbox(harness_str(sb, "id"));
	json_decref(sb);

	/* the operator still installs (the control: it reaches the registry) */
	json_decref(harness_json_timeout(p.sock, "POST", "/v1/images?wait=false", body, ANSWER_MS,
	                                 202));
	if (!listener_hit(&named, ANSWER_MS))
		fail_msg("the operator's install did not reach %s", named_flag);
	listener_drop(&named);
	for (int i = 0; i < 600; i++) {
		json_t *list = harness_json(p.sock, "GET", "/v1/images", NULL, 200), *v;
		size_t k;
		bool there = false;
		json_array_foreach (json_object_get(list, "images"), k, v)
			there = there || strcmp(harness_str(v, "image"), image) == 0;
		json_decref(list);
		if (!there)
			break;
		usleep(50000);
	}
	assert_no_connection();
}

static void
test_users_pull_only_what_the_images_list_allows(void **state)
{
	_cleanup_free_ char *ok = strdup_printf("%s/sbx/ok:1", named_flag);
	_cleanup_free_ char *other = strdup_printf("%s/sbx/other:1", named_flag);
	json_t *j, *sb, *got;

	restart_with("--allow-image", "busybox", "--allow-image", ok);
	j = create(user_auth, other, true, 403);
	assert_string_equal(err_field(j, "code"), "refused");
	assert_non_null(strstr(err_field(j, "message"), "is not one this server permits"));
	json_decref(j);
	assert_false(listener_hit(&named, 0));
	/* the listed one is pulled (the registry is reached) */
	sb = create(user_auth, ok, false, 201);
	if (!listener_hit(&named, ANSWER_MS))
		fail_msg("the listed image was not pulled from %s", named_flag);
	listener_drop(&named);
	got = await_state(harness_str(sb, "id"), "failed");
	json_decref(got);
	delete_sandbox(harness_str(sb, "id"));
	json_decref(sb);
	assert_no_connection();
}

/* A network namespace of this process's own, lo up with the two extra addresses: what the
 * daemon and its install children (started after this) reach is this namespace alone. */
static void
enter_test_network(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "skip: a network namespace of the test's own needs root\n");
		exit(77);
	}
	if (system("command -v ip >/dev/null") != 0) {
		fprintf(stderr, "skip: ip (iproute2) is not installed\n");
		exit(77);
	}
	if (unshare(CLONE_NEWNET) < 0) {
		fprintf(stderr, "skip: unshare(CLONE_NEWNET): %s\n", strerror(errno));
		exit(77);
	}
	if (system("ip link set lo up && ip addr add " PRIVATE_ADDR "/32 dev lo && "
	           "ip addr add " LINK_LOCAL_ADDR "/32 dev lo") != 0) {
		fprintf(stderr, "test-pull-guard: cannot set up the test's network namespace\n");
		exit(1);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_local_registries_are_refused_before_any_connection),
		cmocka_unit_test(test_a_named_registry_is_reached),
		cmocka_unit_test(test_user_pull_off),
		cmocka_unit_test(test_users_pull_only_what_the_images_list_allows),
	};

	harness_vm_bundle();
	enter_test_network();
	return cmocka_run_group_tests(tests, setup, teardown);
}
