/* test-startup.c: every startup refusal of the real sandboxd, tried as a new user would:
 * TCP without a token (loopback included), a reachable address without TLS, a token file
 * others can read, a short token, --client-ca without TLS, a second instance on the same
 * socket or state directory, an open state directory. Also what a good start looks like:
 * the socket mode, the state directory mode, the startup line, and the product binary
 * saying it has no VM backend rather than pretending to boot anything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

static char dir[256];

static void
write_token(const char *path, const char *token, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, token, strlen(token)), (ssize_t)strlen(token));
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

/* Runs the daemon expecting a refusal; checks the exit code and that the message names what
 * is missing. */
static void
expect_refusal(const char *binary, const char *const *args, const char *needle)
{
	char *out = NULL;
	int rc = harness_run(binary, args, NULL, &out);

	if (rc == 0 || !out || !strstr(out, needle))
		fail_msg("expected a refusal mentioning '%s', got exit %d:\n%s", needle, rc,
		         out ? out : "");
	free(out);
}

static void
test_tcp_refusals(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	char sd[300], sock[300], tok[300], open_tok[300], short_tok[300], port[32], lo[64], any[64];

	snprintf(sd, sizeof(sd), "%s/state", dir);
	snprintf(sock, sizeof(sock), "%s/refusal.sock", dir);
	snprintf(tok, sizeof(tok), "%s/token", dir);
	snprintf(open_tok, sizeof(open_tok), "%s/token-open", dir);
	snprintf(short_tok, sizeof(short_tok), "%s/token-short", dir);
	snprintf(port, sizeof(port), "%d", harness_free_port());
	snprintf(lo, sizeof(lo), "127.0.0.1:%s", port);
	snprintf(any, sizeof(any), "0.0.0.0:%s", port);
	write_token(tok, "0123456789abcdef0123456789abcdef\n", 0600);
	write_token(open_tok, "0123456789abcdef0123456789abcdef\n", 0644);
	write_token(short_tok, "0123456789abcde\n", 0600); /* 15 characters */

	{ /* no token, loopback included */
		const char *args[] = { "--state-dir", sd, "--socket", sock, "--listen", lo, NULL };
		expect_refusal(bin, args, "without --token-file");
	}
	{ /* reachable from other machines without TLS */
		const char *args[] = { "--state-dir",  sd,  "--socket", sock, "--listen", any,
			               "--token-file", tok, NULL };
		expect_refusal(bin, args,
		               "reachable from other machines; refusing to serve it "
		               "without --tls-cert and --tls-key");
	}
	{ /* reachable, no token either: the token is named first */
		const char *args[] = { "--state-dir", sd, "--socket", sock, "--listen", any, NULL };
		expect_refusal(bin, args,
		               "reachable from other machines; refusing to serve it "
		               "without --token-file");
	}
	{ /* readable by others */
		const char *args[] = { "--state-dir",  sd,       "--socket", sock, "--listen", lo,
			               "--token-file", open_tok, NULL };
		expect_refusal(bin, args, "chmod 600");
	}
	{ /* 15 characters */
		const char *args[] = { "--state-dir",  sd,        "--socket", sock, "--listen", lo,
			               "--token-file", short_tok, NULL };
		expect_refusal(bin, args, "at least 16");
	}
	{ /* --client-ca needs TLS */
		const char *args[] = { "--state-dir",  sd,  "--socket",    sock, "--listen", lo,
			               "--token-file", tok, "--client-ca", tok,  NULL };
		expect_refusal(bin, args, "--client-ca needs TLS");
	}
	{ /* half of the TLS pair */
		const char *args[] = { "--state-dir",  sd,  "--socket",   sock, "--listen", lo,
			               "--token-file", tok, "--tls-cert", tok,  NULL };
		expect_refusal(bin, args, "--tls-cert needs --tls-key");
	}
	{ /* a --forget-after that is no duration */
		static const char *const bad[] = { "1w", "-1", "h", "24 h", "3651d", "" };
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			const char *args[] = { "--state-dir",    sd,     "--socket", sock,
				               "--forget-after", bad[i], NULL };
			char *out = NULL;
			assert_int_equal(harness_run(bin, args, NULL, &out), 2);
			assert_non_null(strstr(out, "--forget-after"));
			free(out);
		}
	}
	{ /* usage errors exit 2 and point at --help */
		const char *args[] = { "--bogus", NULL };
		char *out = NULL;
		assert_int_equal(harness_run(bin, args, NULL, &out), 2);
		assert_non_null(strstr(out, "sandboxd --help"));
		free(out);
	}
}

static void
test_good_start_and_second_instance(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	struct daemon_proc p;
	struct stat st;
	char line[1024];
	FILE *f;

	assert_int_equal(harness_start(&p, bin, NULL, NULL), 0);
	/* The socket is 0600; the state directory 0700 */
	assert_int_equal(stat(p.sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(stat(p.state, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);

	/* the last startup line says what it serves and where */
	f = fopen(p.log, "r");
	assert_non_null(f);
	line[0] = '\0';
	while (fgets(line, sizeof(line), f) && !strstr(line, "serving API v1"))
		;
	fclose(f);
	assert_true(strncmp(line, "sandboxd ", 9) == 0);
	assert_non_null(strstr(line, ": serving API v1 on unix:"));
	assert_non_null(strstr(line, p.sock));
	assert_non_null(strstr(line, "; backend fake"));
	assert_non_null(strstr(line, "; state "));

	{ /* a second instance on the same socket refuses, naming the socket */
		char other[300];
		const char *args[] = { "--state-dir", other, "--socket", p.sock, NULL };
		char *out = NULL;
		snprintf(other, sizeof(other), "%s/other-state", p.dir);
		assert_int_not_equal(harness_run(bin, args, NULL, &out), 0);
		assert_non_null(strstr(out, p.sock));
		assert_non_null(strstr(out, "already serving"));
		free(out);
		/* and the first one still answers */
		assert_int_equal(harness_http(p.sock, "GET", "/v1/health", NULL, NULL), 200);
	}
	{ /* a second instance on the same state directory refuses */
		char sock2[300];
		const char *args[] = { "--state-dir", p.state, "--socket", sock2, NULL };
		char *out = NULL;
		snprintf(sock2, sizeof(sock2), "%s/second.sock", p.dir);
		assert_int_not_equal(harness_run(bin, args, NULL, &out), 0);
		assert_non_null(strstr(out, "in use by another sandboxd"));
		free(out);
	}
	/* SIGTERM ends it cleanly and removes its socket */
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_not_equal(access(p.sock, F_OK), 0);
	harness_cleanup(&p);
}

static void
test_open_state_dir_refused(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	char sd[300], sock[300];
	const char *args[] = { "--state-dir", sd, "--socket", sock, NULL };

	snprintf(sd, sizeof(sd), "%s/open-state", dir);
	snprintf(sock, sizeof(sock), "%s/open.sock", dir);
	assert_int_equal(mkdir(sd, 0755), 0);
	assert_int_equal(chmod(sd, 0755), 0);
	expect_refusal(bin, args, "chmod 700");
}

static void
test_product_needs_its_guest_bundle(void **state)
{
	/* the product boots real VMs: without the kernel bundle it refuses to start, saying
	 * what to run, and leaves nothing listening */
	const char *bin = harness_binary("SANDBOXD");
	char sd[300], sock[300];
	const char *args[] = { "--state-dir", sd, "--socket", sock, NULL };
	char *out = NULL;

	snprintf(sd, sizeof(sd), "%s/product-state", dir);
	snprintf(sock, sizeof(sock), "%s/product.sock", dir);
	assert_int_not_equal(harness_run(bin, args, NULL, &out), 0);
	assert_non_null(strstr(out, "sandboxd setup"));
	assert_int_not_equal(access(sock, F_OK), 0);
	free(out);
}

/* --policy: a misspelt key stops startup with its line and column; a good file sets the
 * defaults, the images list and the default image, and a ceiling this build cannot enforce
 * is lowered with a warning, never served open. */
static void
test_policy_file(void **state)
{
	const char *bin = harness_binary("SANDBOXD_FAKE");
	char sd[300], sock[300], bad[300], good[300];
	struct daemon_proc d = { 0 };
	json_t *caps, *sb;
	char *out = NULL;
	FILE *f;

	snprintf(sd, sizeof(sd), "%s/state-policy", dir);
	snprintf(sock, sizeof(sock), "%s/policy.sock", dir);
	snprintf(bad, sizeof(bad), "%s/bad.yaml", dir);
	snprintf(good, sizeof(good), "%s/good.yaml", dir);
	f = fopen(bad, "w");
	assert_non_null(f);
	fputs("network:\n  celing: none\n", f);
	fclose(f);
	{
		const char *args[] = { "--state-dir", sd, "--socket", sock, "--policy", bad, NULL };
		expect_refusal(bin, args,
		               "bad.yaml:2:3: unknown key 'celing' (did you mean 'ceiling'?)");
	}
	f = fopen(good, "w");
	assert_non_null(f);
	fputs("default_image: tools:1\n"
	      "images: [tools:1, busybox]\n"
	      "defaults: {cpus: 1, memory_mb: 256, disk_mb: 1024}\n"
	      "network:\n"
	      "  ceiling: open\n",
	      f);
	fclose(f);
	{
		/* the flags over the file may not leave it incoherent: the default image must
		 * stay permitted */
		const char *args[] = { "--state-dir", sd,   "--socket",      sock,
			               "--policy",    good, "--allow-image", "busybox",
			               NULL };
		expect_refusal(bin, args, "the default image 'tools:1' is not among the permitted");
	}
	{
		const char *args[] = { "--policy", good, NULL };
		assert_int_equal(harness_start(&d, bin, args, NULL), 0);
	}
	/* the fake enforces allowlist (it runs no network at all), never open */
	assert_true(harness_file_contains(d.log, "network ceiling 'open' (default 'none') lowered "
	                                         "to 'allowlist': egress is by name"));
	caps = harness_json(d.sock, "GET", "/v1/capabilities", NULL, 200);
	assert_string_equal(
	        json_string_value(json_object_get(json_object_get(caps, "network"), "ceiling")),
	        "allowlist");
	json_decref(caps);
	sb = harness_json(d.sock, "POST", "/v1/sandboxes", "{}", 201);
	assert_string_equal(harness_str(sb, "image"), "tools:1");
	assert_int_equal(json_integer_value(json_object_get(sb, "memory_mb")), 256);
	json_decref(sb);
	assert_int_equal(
	        harness_http(d.sock, "POST", "/v1/sandboxes", "{\"image\":\"python:3\"}", &out),
	        403);
	assert_non_null(strstr(out, "not one this server permits"));
	free(out);
	assert_int_equal(harness_stop(&d, SIGTERM), 0);
	harness_cleanup(&d);
}

static int
setup(void **state)
{
	return harness_tmpdir(dir, sizeof(dir));
}

static int
teardown(void **state)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp_refusals),
		cmocka_unit_test(test_good_start_and_second_instance),
		cmocka_unit_test(test_open_state_dir_refused),
		cmocka_unit_test(test_product_needs_its_guest_bundle),
		cmocka_unit_test(test_policy_file),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
