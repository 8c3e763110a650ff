/* test-preview.c: previews in a real browser (preview.mjs: Debian's Chromium driven by
 * playwright-core). Two ways, one program:
 *
 * - browser/test-preview: against sandboxd-fake with its agent (sandbox-guestd in test mode),
 *   whose processes and tunnels run on this machine: the "guest's" web server (a page, its
 *   script and a WebSocket echo) is one preview.mjs starts on 127.0.0.1.
 * - browser/test-preview-vm (SBX_GUEST_WEB set: the static guest-web binary): against the
 *   product sandboxd with a real VM (QEMU, TCG, the bundle's busybox disk): preview.mjs
 *   uploads guest-web, the page and its script with the files API and starts guest-web in the
 *   guest on port 8080, so every byte of the preview goes through the VM's tunnel.
 *
 * The dashboard is opened on http://localhost:PORT/, the preview on
 * http://p-ID-PORT.localhost:PORT2/.
 *
 * Skips (77) without Chromium, node or web/node_modules; the first without SANDBOX_GUESTD,
 * the second without the VM bundle. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define NODE_TIMEOUT_S 180

static void
skip(const char *why)
{
	printf("skip: %s\n", why);
	exit(77);
}

int
main(void)
{
	const char *web = getenv("SBX_WEB_DIR"), *src = getenv("SBX_BROWSER_SRC");
	const char *artifacts = getenv("SBX_ARTIFACTS"), *agent = getenv("SANDBOX_GUESTD");
	const char *guest_web = getenv("SBX_GUEST_WEB"); /* set: a real VM */
	static const char email[] = "ada@example.com", password[] = "ada-password-0001";
	char dir[256], token[300], listen[64], plisten[64], env_agent[512], script[600];
	char vars[7][600];
	const char *v[8];
	struct daemon_proc p;
	char **env;
	int api_port, preview_port, guest_port, rc, ok = 1;

	if (!web || !src || !artifacts || (!agent && !guest_web))
		skip("SBX_WEB_DIR, SBX_BROWSER_SRC, SBX_ARTIFACTS, or SANDBOX_GUESTD or "
		     "SBX_GUEST_WEB, is not set (run through ctest)");
	harness_need_browser(web);
	if (guest_web)
		harness_vm_bundle(); /* skips without it */
	if (harness_tmpdir(dir, sizeof(dir)) < 0)
		return 1;
	snprintf(token, sizeof(token), "%s/token", dir);
	if (write_file_atomic(token, "preview-browser-operator-token-01\n", 34, 0600) < 0)
		return 1;
	api_port = harness_free_port();
	preview_port = harness_free_port();
	/* the guest's port: a VM's own loopback is free; the fake's "guest" is this machine */
	guest_port = guest_web ? 8080 : harness_free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", api_port);
	snprintf(plisten, sizeof(plisten), "127.0.0.1:%d", preview_port);
	if (guest_web) {
		if (harness_start_vm(&p,
		                     (const char *const[]){ "--listen", listen, "--token-file",
		                                            token, "--preview-listen", plisten,
		                                            NULL },
		                     NULL) < 0)
			return 1;
	} else {
		snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", agent);
		if (harness_start(&p, harness_binary("SANDBOXD_FAKE"),
		                  (const char *const[]){ "--listen", listen, "--token-file", token,
		                                         "--preview-listen", plisten, NULL },
		                  (const char *const[]){ env_agent, NULL }) < 0)
			return 1;
	}
	if (harness_admin_create(harness_binary(guest_web ? "SANDBOXD" : "SANDBOXD_FAKE"), p.state,
	                         dir, email, password, "user") < 0)
		ok = 0;
	if (ok) {
		snprintf(vars[0], sizeof(vars[0]), "SBX_URL=http://localhost:%d/", api_port);
		snprintf(vars[1], sizeof(vars[1]), "SBX_USER_EMAIL=%s", email);
		snprintf(vars[2], sizeof(vars[2]), "SBX_USER_PASSWORD=%s", password);
		snprintf(vars[3], sizeof(vars[3]), "SBX_GUEST_PORT=%d", guest_port);
		snprintf(vars[4], sizeof(vars[4]), "SBX_PREVIEW_PORT=%d", preview_port);
		snprintf(vars[5], sizeof(vars[5]), "SBX_ARTIFACTS=%s", artifacts);
		snprintf(vars[6], sizeof(vars[6]), "SBX_WEB_DIR=%s", web);
		/* (SBX_GUEST_WEB, when set, goes on to preview.mjs from this environment) */
		for (int i = 0; i < 7; i++)
			v[i] = vars[i];
		v[7] = NULL;
		env = harness_environ_with(v);
		if (!env)
			return 1;
		snprintf(script, sizeof(script), "%s/preview.mjs", src);
		{
			char *argv[] = { "node", script, NULL };
			rc = harness_run_group(argv, env, NODE_TIMEOUT_S, NULL);
		}
		free(env);
		if (rc != 0) {
			fprintf(stderr, "preview.mjs failed (exit %d)\n", rc);
			ok = 0;
		}
	}
	if (harness_delete_all(p.sock) < 0)
		ok = 0;
	if (!ok)
		harness_print_log_tail(&p, 60);
	rc = harness_stop(&p, SIGTERM);
	if (rc != 0) {
		fprintf(stderr, "%s exited with %d\n", guest_web ? "sandboxd" : "sandboxd-fake",
		        rc);
		ok = 0;
	}
	harness_cleanup(&p);
	unlink(token);
	rmdir(dir);
	return ok ? 0 : 1;
}
