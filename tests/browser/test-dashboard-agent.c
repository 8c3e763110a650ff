/* test-dashboard-agent.c: "Start an agent on a task" in a real browser. Starts sandboxd-fake
 * with its agent (SANDBOXD_FAKE_AGENT: sandbox-guestd in test mode, so a sandbox's processes
 * are real processes on this host) on a loopback TCP listener, makes two users with
 * `sandboxd admin create`, and runs dashboard-agent.mjs (Debian's Chromium driven by
 * playwright-core) against it: a user saves a credential, starts claude on a task (a stub
 * claude the script writes, on a PATH it gives the sandbox), lands in the agent's terminal
 * and follows its state in the list until it exits. Screenshots go to $SBX_ARTIFACTS.
 * Afterwards every sandbox is deleted and nothing is left.
 *
 * Skips (77) without Chromium, node, web/node_modules or sandbox-guestd. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define NODE_TIMEOUT_S 180

static const struct account {
	const char *email, *password;
} accounts[] = {
	{ "alice@example.com", "alice-password-1" },
	{ "bob@example.com", "bob-password-22" },
};

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

int
main(void)
{
	const char *web = getenv("SBX_WEB_DIR"), *src = getenv("SBX_BROWSER_SRC");
	const char *artifacts = getenv("SBX_ARTIFACTS"), *guestd;
	const char *fake = harness_binary("SANDBOXD_FAKE");
	char dir[256], addr[64], token[300];
	struct daemon_proc p;
	int rc, ok = 1;

	if (!web || !src || !artifacts)
		skip("SBX_WEB_DIR, SBX_BROWSER_SRC or SBX_ARTIFACTS is not set (run through "
		     "ctest)");
	guestd = harness_need_guestd();
	harness_need_browser(web);

	if (harness_tmpdir(dir, sizeof(dir)) < 0)
		return 1;
	snprintf(token, sizeof(token), "%s/token", dir);
	if (write_file(token, "browser-test-operator-token-0123456789\n") < 0)
		return 1;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", harness_free_port());
	if (harness_start_fake_agent(
	            &p, guestd,
	            (const char *const[]){ "--listen", addr, "--token-file", token, NULL },
	            NULL) < 0)
		return 1;

	for (size_t i = 0; ok && i < sizeof(accounts) / sizeof(accounts[0]); i++)
		if (harness_admin_create(fake, p.state, dir, accounts[i].email,
		                         accounts[i].password, "user") < 0)
			ok = 0;

	if (ok) {
		char vars[6][600];
		snprintf(vars[0], sizeof(vars[0]), "SBX_URL=http://%s/", addr);
		snprintf(vars[1], sizeof(vars[1]), "SBX_USER_EMAIL=%s", accounts[0].email);
		snprintf(vars[2], sizeof(vars[2]), "SBX_USER_PASSWORD=%s", accounts[0].password);
		snprintf(vars[3], sizeof(vars[3]), "SBX_OTHER_EMAIL=%s", accounts[1].email);
		snprintf(vars[4], sizeof(vars[4]), "SBX_OTHER_PASSWORD=%s", accounts[1].password);
		/* where the script writes its stub agent and tells it to exit */
		snprintf(vars[5], sizeof(vars[5]), "SBX_CONTROL_DIR=%s", dir);
		const char *v[] = { vars[0], vars[1], vars[2], vars[3], vars[4], vars[5], NULL };
		if (harness_run_node(src, "dashboard-agent.mjs", v, NODE_TIMEOUT_S, NULL) < 0)
			ok = 0;
	}

	/* the secret's value never reaches sandboxd's log */
	if (harness_file_contains(p.log, "sk-ant-browser-test-")) {
		fprintf(stderr, "the saved credential's value is in sandboxd's log\n");
		ok = 0;
	}
	if (harness_delete_all(p.sock) < 0)
		ok = 0;
	if (!ok)
		harness_print_log_tail(&p, 100);
	rc = harness_stop(&p, SIGTERM);
	if (rc != 0) {
		fprintf(stderr, "sandboxd-fake exited with %d\n", rc);
		ok = 0;
	}
	harness_cleanup(&p);
	if (harness_rmtree(dir) < 0)
		ok = 0;
	return ok ? 0 : 1;
}
