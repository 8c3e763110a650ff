/* test-tls.c: TCP with a token, TLS, mutual TLS and --allowed-host against the real daemon,
 * driven with curl and certificates made by the openssl command line in a private directory:
 * a client without the token gets 401, a client without a certificate the CA signed never
 * gets past the handshake, and a Host the operator did not allow gets 403. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tls_token),
		cmocka_unit_test(test_mutual_tls),
		cmocka_unit_test(test_allowed_host),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
