/* test-dashboard.c: the dashboard in a real browser against the product with real VMs. Starts
 * sandboxd (QEMU, the bundle's busybox disk) on a loopback TCP listener, makes two users and
 * an admin with `sandboxd admin create`, and runs dashboard.mjs (Debian's Chromium driven by
 * playwright-core) against it: sign in, launch and watch it run, a terminal (echo, resize,
 * work that survives a reload), another user sees nothing, the admin's fleet. Screenshots go
 * to $SBX_ARTIFACTS. Afterwards every sandbox is deleted and nothing is left.
 *
 * Skips (77) without Chromium, node, web/node_modules or the VM bundle. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define NODE_TIMEOUT_S 300

static const struct account {
	const char *email, *password, *role;
} accounts[] = {
	{ "alice@example.com", "alice-password-1", "user" },
	{ "bob@example.com", "bob-password-22", "user" },
	{ "root@example.com", "admin-password-333", "admin" },
};

static struct daemon_proc p;
static char dir[256]; /* the test's own: token, passwords, the restart handshake */
static char addr[64]; /* 127.0.0.1:PORT */
static char token[300];

static void
skip(const char *why)
{
	printf("skip: %s\n", why);
	exit(77);
}

static int
write_file(const char *path, const char *text)
{
	return write_file_atomic(path, text, strlen(text), 0600);
}

static bool restarted_ok = true; /* every restart asked for worked */

/* dashboard.mjs asked (a file "restart" in dir) for sandboxd to restart: stop it, start it
 * again on the same state and address, and answer with "restarted". Without an answer
 * dashboard.mjs fails on its own. */
static void
restart_if_asked(void)
{
	const char *args[] = { "--listen",         addr,  "--token-file",    token,
		               "--accel",          "tcg", "--default-image", "busybox",
		               "--keep-sandboxes", NULL };
	char ask[320], done[320];
	int rc;

	snprintf(ask, sizeof(ask), "%s/restart", dir);
	if (access(ask, F_OK) < 0)
		return;
	unlink(ask);
	rc = harness_stop(&p, SIGTERM);
	if (rc != 0) {
		fprintf(stderr, "sandboxd exited with %d when asked to stop\n", rc);
		harness_print_log_tail(&p, 150);
		restarted_ok = false;
	}
	/* started again in any case, so that what it runs can be deleted */
	if (harness_restart(&p, harness_binary("SANDBOXD"), args, NULL) < 0) {
		restarted_ok = false;
		return;
	}
	snprintf(done, sizeof(done), "%s/restarted", dir);
	if (restarted_ok && write_file(done, "") < 0)
		fprintf(stderr, "cannot write %s\n", done);
}

int
main(void)
{
	const char *web = getenv("SBX_WEB_DIR"), *src = getenv("SBX_BROWSER_SRC");
	const char *artifacts = getenv("SBX_ARTIFACTS");
	int port, rc, ok = 1;

	if (!web || !src || !artifacts)
		skip("SBX_WEB_DIR, SBX_BROWSER_SRC or SBX_ARTIFACTS is not set (run through "
		     "ctest)");
	harness_need_browser(web);
	harness_vm_bundle(); /* skips without it */

	if (harness_tmpdir(dir, sizeof(dir)) < 0)
		return 1;
	snprintf(token, sizeof(token), "%s/token", dir);
	if (write_file(token, "browser-test-operator-token-0123456789\n") < 0)
		return 1;
	port = harness_free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	{
		/* its sandboxes run on across the restart dashboard.mjs asks for */
		const char *args[] = { "--listen",         addr, "--token-file", token,
			               "--keep-sandboxes", NULL };
		if (harness_start_vm(&p, args, NULL) < 0)
			return 1;
	}

	for (size_t i = 0; ok && i < sizeof(accounts) / sizeof(accounts[0]); i++)
		if (harness_admin_create(harness_binary("SANDBOXD"), p.state, dir,
		                         accounts[i].email, accounts[i].password,
		                         accounts[i].role) < 0)
			ok = 0;

	if (ok) {
		char vars[8][600];
		snprintf(vars[0], sizeof(vars[0]), "SBX_URL=http://%s/", addr);
		snprintf(vars[1], sizeof(vars[1]), "SBX_USER_EMAIL=%s", accounts[0].email);
		snprintf(vars[2], sizeof(vars[2]), "SBX_USER_PASSWORD=%s", accounts[0].password);
		snprintf(vars[3], sizeof(vars[3]), "SBX_OTHER_EMAIL=%s", accounts[1].email);
		snprintf(vars[4], sizeof(vars[4]), "SBX_OTHER_PASSWORD=%s", accounts[1].password);
		snprintf(vars[5], sizeof(vars[5]), "SBX_ADMIN_EMAIL=%s", accounts[2].email);
		snprintf(vars[6], sizeof(vars[6]), "SBX_ADMIN_PASSWORD=%s", accounts[2].password);
		snprintf(vars[7], sizeof(vars[7]), "SBX_CONTROL_DIR=%s", dir);
		const char *v[] = { vars[0], vars[1], vars[2], vars[3], vars[4],
			            vars[5], vars[6], vars[7], NULL };
		if (harness_run_node(src, "dashboard.mjs", v, NODE_TIMEOUT_S, restart_if_asked) < 0)
			ok = 0;
	}

	if (harness_delete_all(p.sock) < 0)
		ok = 0;
	if (!restarted_ok)
		ok = 0;
	if (!ok)
		harness_print_log_tail(&p, 150);
	rc = harness_stop(&p, SIGTERM);
	if (rc != 0) {
		fprintf(stderr, "sandboxd exited with %d\n", rc);
		ok = 0;
	}
	harness_cleanup(&p);
	unlink(token);
	rmdir(dir);
	return ok ? 0 : 1;
}
