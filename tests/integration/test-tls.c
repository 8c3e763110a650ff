/* test-tls.c: TCP with a token, TLS, mutual TLS and --allowed-host against the real daemon,
 * driven with curl and certificates made by the openssl command line in a private directory:
 * a client without the token gets 401, a client without a certificate the CA signed never
 * gets past the handshake, and a Host the operator did not allow gets 403. One more test drives
 * TLS by hand (OpenSSL as a client): a kept-alive connection outlives others that come and
 * go. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "strv.h"

static char dir[256];
static char token[] = "tls-test-token-0123456789abcdef";

static int
setup(void **state)
{
	char path[300];
	FILE *f;

	if (harness_tmpdir(dir, sizeof(dir)) < 0)
		return -1;
	if (system("command -v openssl >/dev/null && command -v curl >/dev/null") != 0) {
		fprintf(stderr, "skip: openssl and curl are needed (scripts/install-deps.sh)\n");
		exit(77);
	}
	/* a CA, a server certificate for localhost/127.0.0.1/box.example, a client cert */
	assert_int_equal(harness_make_certs(dir, ",DNS:box.example", true), 0);
	snprintf(path, sizeof(path), "%s/token", dir);
	f = fopen(path, "w");
	fprintf(f, "%s\n", token);
	fclose(f);
	chmod(path, 0600);
	return 0;
}

static int
teardown(void **state)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

/* Runs curl with the given arguments; returns its exit code and sets *status to the HTTP
 * status it printed (or 0). */
static int
curl(int *status, char **body, const char *const *args)
{
	_cleanup_strv_ char **argv = NULL;
	char *out = NULL, *nl;
	size_t n = 0;
	int rc;

	assert_int_equal(strv_extend(&argv, &n, "-s", "-S", "--max-time", "10", "-w",
	                             "\n%{http_code}", NULL),
	                 0);
	for (size_t i = 0; args[i]; i++)
		assert_int_equal(strv_add(&argv, &n, args[i]), 0);
	rc = harness_run("/usr/bin/curl", (const char *const *)argv, NULL, &out);
	*status = 0;
	nl = out ? strrchr(out, '\n') : NULL;
	if (nl) {
		*status = (int)strtol(nl + 1, NULL, 10);
		*nl = '\0';
	}
	if (body)
		*body = out;
	else
		free(out);
	return rc;
}

static void
start(struct daemon_proc *p, int port, bool mtls, const char *allowed)
{
	char listen[64], tok[300], cert[300], key[300], ca[300];
	_cleanup_strv_ char **args = NULL;
	size_t n = 0;

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(tok, sizeof(tok), "%s/token", dir);
	snprintf(cert, sizeof(cert), "%s/server.pem", dir);
	snprintf(key, sizeof(key), "%s/server.key", dir);
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	assert_int_equal(strv_extend(&args, &n, "--listen", listen, "--token-file", tok,
	                             "--tls-cert", cert, "--tls-key", key, NULL),
	                 0);
	if (mtls)
		assert_int_equal(strv_extend(&args, &n, "--client-ca", ca, NULL), 0);
	if (allowed)
		assert_int_equal(strv_extend(&args, &n, "--allowed-host", allowed, NULL), 0);
	assert_int_equal(
	        harness_start(p, harness_binary("SANDBOXD_FAKE"), (const char *const *)args, NULL),
	        0);
}

static void
test_tls_token(void **state)
{
	struct daemon_proc p;
	int port = harness_free_port(), status;
	char url[128], plain[128], ca[300], auth[128];
	char *body = NULL;

	snprintf(url, sizeof(url), "https://127.0.0.1:%d/v1/whoami", port);
	snprintf(plain, sizeof(plain), "http://127.0.0.1:%d/v1/whoami", port);
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	start(&p, port, false, NULL);
	assert_true(harness_file_contains(&p.log[0], "https://127.0.0.1:"));

	{
		const char *a[] = { "--cacert", ca, "-H", auth, url, NULL };
		assert_int_equal(curl(&status, &body, a), 0);
		assert_int_equal(status, 200);
		assert_non_null(strstr(body, "\"role\":\"admin\""));
		free(body);
	}
	{ /* no token: 401 with the error shape */
		const char *a[] = { "--cacert", ca, url, NULL };
		assert_int_equal(curl(&status, &body, a), 0);
		assert_int_equal(status, 401);
		assert_non_null(strstr(body, "\"code\":\"unauthorized\""));
		free(body);
	}
	{ /* a wrong token of the same length */
		const char *a[] = {
			"--cacert", ca,
			"-H",       "Authorization: Bearer tls-test-token-0123456789abcdeX",
			url,        NULL
		};
		assert_int_equal(curl(&status, NULL, a), 0);
		assert_int_equal(status, 401);
	}
	{ /* plain HTTP to the TLS port gets no answer */
		const char *a[] = { "-H", auth, plain, NULL };
		assert_int_not_equal(curl(&status, NULL, a), 0);
		assert_int_not_equal(status, 200);
	}
	{ /* a certificate nobody trusts: curl refuses the server */
		const char *a[] = { "-H", auth, url, NULL };
		assert_int_not_equal(curl(&status, NULL, a), 0);
	}
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

static void
test_mutual_tls(void **state)
{
	struct daemon_proc p;
	int port = harness_free_port(), status;
	char url[128], ca[300], auth[128], cert[300], key[300];

	snprintf(url, sizeof(url), "https://127.0.0.1:%d/v1/health", port);
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	snprintf(cert, sizeof(cert), "%s/client.pem", dir);
	snprintf(key, sizeof(key), "%s/client.key", dir);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	start(&p, port, true, NULL);
	{ /* no client certificate: the handshake fails before any request is read */
		const char *a[] = { "--cacert", ca, url, NULL };
		assert_int_not_equal(curl(&status, NULL, a), 0);
		assert_int_equal(status, 0);
	}
	{
		const char *a[] = { "--cacert", ca, "--cert", cert, "--key", key, url, NULL };
		assert_int_equal(curl(&status, NULL, a), 0);
		assert_int_equal(status, 200);
	}
	{ /* the token is still required on top of the certificate */
		char who[128];
		snprintf(who, sizeof(who), "https://127.0.0.1:%d/v1/whoami", port);
		const char *a[] = { "--cacert", ca, "--cert", cert, "--key", key, who, NULL };
		assert_int_equal(curl(&status, NULL, a), 0);
		assert_int_equal(status, 401);
	}
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

static void
test_allowed_host(void **state)
{
	struct daemon_proc p;
	int port = harness_free_port(), status;
	char url[128], ca[300], resolve[128];
	char *body = NULL;

	snprintf(url, sizeof(url), "https://box.example:%d/v1/health", port);
	snprintf(resolve, sizeof(resolve), "box.example:%d:127.0.0.1", port);
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);

	/* without --allowed-host the name is refused: DNS rebinding */
	start(&p, port, false, NULL);
	{
		const char *a[] = { "--cacert", ca, "--resolve", resolve, url, NULL };
		assert_int_equal(curl(&status, &body, a), 0);
		assert_int_equal(status, 403);
		assert_non_null(strstr(body, "\"code\":\"forbidden_origin\""));
		free(body);
	}
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);

	start(&p, port, false, "box.example");
	{
		const char *a[] = { "--cacert", ca, "--resolve", resolve, url, NULL };
		assert_int_equal(curl(&status, NULL, a), 0);
		assert_int_equal(status, 200);
	}
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* ---- TLS by hand: one connection kept alive while others open and close ---- */

/* A client connection to 127.0.0.1:port; with ctx, past the TLS handshake. Reads time out
 * after 5 s. */
static SSL *
tls_open(SSL_CTX *ctx, int port, int *ret_fd)
{
	struct timeval tv = { .tv_sec = 5 };
	int fd = harness_connect(NULL, port);
	SSL *ssl;

	assert_true(fd >= 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	*ret_fd = fd;
	if (!ctx)
		return NULL;
	ssl = SSL_new(ctx);
	assert_non_null(ssl);
	assert_int_equal(SSL_set_fd(ssl, fd), 1);
	assert_int_equal(SSL_connect(ssl), 1);
	return ssl;
}

/* Sends a keep-alive GET of path and reads its whole answer (the head, then Content-Length
 * bytes). Returns the status, or -1 when the server closed or said nothing in time (what the
 * Python SDK saw as SSLEOFError). */
static int
tls_get(SSL *ssl, const char *path)
{
	char req[512], resp[16384], *end, *cl;
	size_t n = 0, want;
	int k, status;

	snprintf(req, sizeof(req),
	         "GET %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\n"
	         "Connection: keep-alive\r\n\r\n",
	         path, token);
	ERR_clear_error();
	if (SSL_write(ssl, req, (int)strlen(req)) != (int)strlen(req))
		return -1;
	for (;;) {
		resp[n] = '\0';
		end = strstr(resp, "\r\n\r\n");
		if (end)
			break;
		if (n + 1 >= sizeof(resp))
			return -1;
		k = SSL_read(ssl, resp + n, (int)(sizeof(resp) - 1 - n));
		if (k <= 0)
			return -1;
		n += (size_t)k;
	}
	if (sscanf(resp, "HTTP/1.1 %d", &status) != 1)
		return -1;
	/* the server promised to keep the connection */
	assert_null(strstr(resp, "Connection: close"));
	cl = strstr(resp, "Content-Length: ");
	assert_non_null(cl);
	want = (size_t)(end + 4 - resp) + strtoul(cl + 16, NULL, 10);
	while (n < want) {
		if (want >= sizeof(resp))
			return -1;
		k = SSL_read(ssl, resp + n, (int)(want - n));
		if (k <= 0)
			return -1;
		n += (size_t)k;
	}
	return status;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Connection A stays open across many rounds; in each, connection B comes and goes in one
 * of the ways a client leaves (TCP only, after the handshake, after a request, with or
 * without close_notify), then A asks again, twice. Every answer on A must come, on A.
 * (The SDK's report: B's close left an error in OpenSSL's per-thread queue, and A's next
 * read after its answer took it for its own and closed A.) */
static void
test_keepalive_outlives_others(void **state)
{
	struct daemon_proc p;
	int port = harness_free_port(), fd_a, fd_b;
	char ca[300];
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *a, *b;

	assert_non_null(ctx);
	signal(SIGPIPE, SIG_IGN); /* a write on a connection the server closed fails instead */
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	assert_int_equal(SSL_CTX_load_verify_locations(ctx, ca, NULL), 1);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	start(&p, port, false, NULL);

	a = tls_open(ctx, port, &fd_a);
	assert_int_equal(tls_get(a, "/v1/health"), 200);
	for (int round = 0; round < 24; round++) {
		int how = round % 4;

		b = tls_open(how == 0 ? NULL : ctx, port, &fd_b);
		if (how >= 2)
			assert_int_equal(tls_get(b, "/v1/sandboxes"), 200);
		if (how == 3)
			(void)SSL_shutdown(b); /* close_notify; the others just go */
		SSL_free(b);
		close(fd_b);
		sleep_ms(150); /* the server sees B go before A asks */
		for (int i = 0; i < 2; i++) {
			int status = tls_get(a, i ? "/v1/sandboxes" : "/v1/health");
			if (status != 200)
				fail_msg("round %d (B closed %s): request %d on the kept-alive "
				         "connection got %d",
				         round,
				         (const char *[]){ "before the handshake",
				                           "after the handshake", "after a request",
				                           "with close_notify" }[how],
				         i + 1, status);
		}
	}
	SSL_free(a);
	close(fd_a);
	SSL_CTX_free(ctx);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tls_token),
		cmocka_unit_test(test_mutual_tls),
		cmocka_unit_test(test_allowed_host),
		cmocka_unit_test(test_keepalive_outlives_others),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
