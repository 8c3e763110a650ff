/* test-egress-dashboard.c: a sandbox's egress, allowed and denied, as its owner sees it live on
 * the dashboard. The product sandboxd runs as root with --egress on in NAME-host (netns.sh),
 * its dashboard on 127.0.0.1:PORT there; internet.py serves example.org and other.test in
 * NAME-inet. A user (sandboxd admin create) makes a sandbox from the egress test image
 * (mkimage.sh) that may reach example.org only, then egress-dashboard.mjs (Debian's Chromium
 * driven by playwright-core, run in NAME-host as well) signs in, opens the sandbox's page and
 * has the sandbox curl both names: an egress.allowed event for example.org and an
 * egress.denied one for other.test appear in its Events panel without a reload. The
 * screenshot goes to $SBX_ARTIFACTS/egress-events.png. Afterwards the sandbox is deleted,
 * sandboxd stops, and nothing of the run is left (the namespaces go with netns.sh down).
 *
 * Skips (77) without root, Chromium, node, web/node_modules, the VM bundle or the tools the
 * egress tests need. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "egressnet.h"
#include "harness.h"
#include "util.h"

/* sandboxd's dashboard in NAME-host, where nothing else listens */
#define LISTEN "127.0.0.1:7070"
#define INSTALL_TIMEOUT_MS 120000
#define CREATE_TIMEOUT_MS 120000
#define NODE_TIMEOUT_S 120
#define EMAIL "egress-viewer@example.com"
#define PASSWORD "egress-viewer-password-1"
#define NETWORK "{\"mode\":\"allowlist\",\"allow\":[\"example.org\"]}"

static struct daemon_proc p;

static void
skip(const char *why)
{
	printf("skip: %s\n", why);
	exit(77);
}

#define host_sh egressnet_sh

static void
print_log(void)
{
	fprintf(stderr, "the end of sandboxd's log (%s):\n", p.log);
	host_sh("tail -n 60 '%s' >&2", p.log);
}

/* The user: made with `sandboxd admin create`, the password from a file. */
static int
make_user(void)
{
	char pw[300], *out = NULL;
	int r;

	snprintf(pw, sizeof(pw), "%s/password", egressnet.dir);
	if (write_file_atomic(pw, PASSWORD "\n", strlen(PASSWORD) + 1, 0600) < 0)
		return -1;
	const char *args[] = { "admin",           "create", EMAIL,         "--role", "user",
		               "--password-file", pw,       "--state-dir", p.state,  NULL };
	r = harness_run_checked(harness_binary("SANDBOXD"), args, NULL, &out);
	if (r != 0)
		fprintf(stderr, "sandboxd admin create %s: %s\n", EMAIL, out ? out : "");
	free(out);
	unlink(pw);
	return r == 0 ? 0 : -1;
}

/* The user signs in over the unix socket (a credential presented there is the caller) and
 * makes the sandbox with their session; its id into id. */
static int
create_as_user(char *id, size_t size)
{
	char *head = NULL, *out = NULL, *cookie = NULL, hdrs[1024];
	json_t *j = NULL;
	int st, r = -1;

	st = harness_http_headers(p.sock, "POST", "/v1/auth/login", NULL,
	                          "{\"email\":\"" EMAIL "\",\"password\":\"" PASSWORD "\"}", &head,
	                          &out);
	if (st == 200)
		j = json_loads(out, 0, NULL);
	cookie = head ? harness_header(head, "Set-Cookie") : NULL;
	if (st != 200 || !harness_str(j, "csrf_token") || !cookie) {
		fprintf(stderr, "POST /v1/auth/login: %d %s\n", st, out ? out : "");
		goto out;
	}
	cookie[strcspn(cookie, ";")] = '\0';
	snprintf(hdrs, sizeof(hdrs), "Cookie: %s\r\nX-CSRF-Token: %s\r\n", cookie,
	         harness_str(j, "csrf_token"));
	json_decref(j);
	j = NULL;
	free(head);
	free(out);
	head = out = NULL;

	st = harness_http_headers(
	        p.sock, "POST", "/v1/sandboxes", hdrs,
	        "{\"image\":\"egress\",\"name\":\"egress-view\",\"network\":" NETWORK "}", &head,
	        &out);
	if (st == 201)
		j = json_loads(out, 0, NULL);
	if (st != 201 || !harness_str(j, "id") || !harness_str(j, "state")) {
		fprintf(stderr, "POST /v1/sandboxes as %s: %d %s\n", EMAIL, st, out ? out : "");
		goto out;
	}
	if (strcmp(harness_str(j, "state"), "running") != 0) {
		fprintf(stderr, "the sandbox did not boot: %s\n", out);
		goto out;
	}
	if (!harness_str(j, "owner") || strcmp(harness_str(j, "owner"), EMAIL) != 0) {
		fprintf(stderr, "the sandbox's owner is not %s: %s\n", EMAIL, out);
		goto out;
	}
	snprintf(id, size, "%s", harness_str(j, "id"));
	r = 0;
out:
	json_decref(j);
	free(cookie);
	free(head);
	free(out);
	return r;
}

/* Sets up everything up to the sandbox; 0, or -1 after saying why. */
static int
setup(const char *src, const char *netns, char *id, size_t id_size)
{
	static char token[300];
	const char *args[] = { "--egress", "on", "--listen", LISTEN, "--token-file", token, NULL };

	/* sandboxd in NAME-host, resolving through the internet's DNS server */
	if (egressnet_up(src, netns) < 0 || egressnet_inet_start() < 0)
		return -1;
	snprintf(token, sizeof(token), "%s/token", egressnet.dir);
	if (write_file_atomic(token, "egress-dashboard-token-0123456789\n",
	                      strlen("egress-dashboard-token-0123456789\n"), 0600) < 0)
		return -1;
	if (harness_start_vm(&p, args, NULL) < 0)
		return -1;
	/* the image, with this run's CA, installed from a local layout by the operator */
	if (egressnet_install_image(&p, INSTALL_TIMEOUT_MS) < 0 || make_user() < 0)
		return -1;
	return create_as_user(id, id_size);
}

int
main(void)
{
	const char *web = getenv("SBX_WEB_DIR"), *artifacts = getenv("SBX_ARTIFACTS");
	const char *src, *netns;
	char id[64] = "", vms[400];
	char vars[6][700];
	char **env = NULL;
	int rc, ok = 1, left;

	if (geteuid() != 0)
		skip("egress needs root (taps, nftables, network namespaces)");
	src = getenv("SBX_EGRESS_SRC");
	netns = getenv("SBX_EGRESS_NETNS_WEB");
	if (!src || !*src || !netns || !*netns || !web || !artifacts)
		skip("SBX_EGRESS_SRC, SBX_EGRESS_NETNS_WEB, SBX_WEB_DIR or SBX_ARTIFACTS is not "
		     "set (run through ctest)");
	harness_need_browser(web);
	if (!host_sh("for t in ip nft unshare python3 openssl curl umoci debugfs; do "
	             "command -v $t >/dev/null || { echo \"skip: $t is not installed\"; "
	             "exit 1; }; done"))
		return 77;
	if (!host_sh("ip netns list >/dev/null 2>&1"))
		skip("network namespaces are not available here (ip netns list fails)");
	harness_vm_bundle(); /* skips without it */
	harness_binary("SANDBOXD");

	if (setup(src, netns, id, sizeof(id)) < 0)
		ok = 0;

	if (ok) {
		const char *v[7];
		snprintf(vars[0], sizeof(vars[0]), "SBX_URL=http://%s/", LISTEN);
		snprintf(vars[1], sizeof(vars[1]), "SBX_USER_EMAIL=%s", EMAIL);
		snprintf(vars[2], sizeof(vars[2]), "SBX_USER_PASSWORD=%s", PASSWORD);
		snprintf(vars[3], sizeof(vars[3]), "SBX_SANDBOX_ID=%s", id);
		snprintf(vars[4], sizeof(vars[4]), "SBX_WEB_DIR=%s", web);
		snprintf(vars[5], sizeof(vars[5]), "SBX_ARTIFACTS=%s", artifacts);
		for (int i = 0; i < 6; i++)
			v[i] = vars[i];
		v[6] = NULL;
		env = harness_environ_with(v);
		if (!env)
			return 1;
		{
			/* in NAME-host, where 127.0.0.1 is sandboxd's (a Chromium left behind goes
			 * with the namespace too) */
			char script[400];
			snprintf(script, sizeof(script), "%s/egress-dashboard.mjs", src);
			char *argv[] = { "sh",
				         egressnet.netns_sh,
				         "exec-host",
				         (char *)netns,
				         egressnet.resolv,
				         "node",
				         script,
				         NULL };
			rc = harness_run_group(argv, env, NODE_TIMEOUT_S, NULL);
		}
		free(env);
		if (rc != 0) {
			fprintf(stderr, "egress-dashboard.mjs failed (exit %d)\n", rc);
			ok = 0;
		}
	}

	if (p.pid > 0) {
		if (harness_delete_all(p.sock) < 0)
			ok = 0;
		if (!ok)
			print_log();
		rc = harness_stop(&p, SIGTERM);
		if (rc != 0) {
			fprintf(stderr, "sandboxd exited with %d\n", rc);
			ok = 0;
		}
		/* every VM was deleted: none outlived sandboxd */
		left = harness_kill_vmms(p.state);
		snprintf(vms, sizeof(vms), "%s/vms", p.state);
		if (left || harness_count_entries(vms) != 0) {
			fprintf(stderr, "%d VMM(s) outlived sandboxd; %s holds %d entries\n", left,
			        vms, harness_count_entries(vms));
			ok = 0;
		}
		if (harness_file_contains(p.log, "Sanitizer") ||
		    harness_file_contains(p.log, "runtime error:")) {
			fprintf(stderr, "sandboxd's log holds a sanitizer report: %s\n", p.log);
			ok = 0;
		}
	}
	harness_cleanup(&p);
	egressnet_down();
	return ok ? 0 : 1;
}
