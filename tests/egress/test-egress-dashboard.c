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
#include <spawn.h>
#include <stdarg.h>
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

extern char **environ;

#define CHROMIUM "/usr/bin/chromium"
/* sandboxd's dashboard in NAME-host, where nothing else listens */
#define LISTEN "127.0.0.1:7070"
#define UPSTREAM_DNS "203.0.113.53"
#define INSTALL_TIMEOUT_MS 120000
#define CREATE_TIMEOUT_MS 120000
#define NODE_TIMEOUT_S 120
#define EMAIL "egress-viewer@example.com"
#define PASSWORD "egress-viewer-password-1"
#define NETWORK "{\"mode\":\"allowlist\",\"allow\":[\"example.org\"]}"

static struct daemon_proc p;
static const char *src;   /* tests/egress */
static const char *netns; /* NAME of NAME-host and NAME-inet */
static char dir[256];     /* the test's own files */
static char inet_dir[300];
static char resolv[300];
static pid_t inet_pid;
static bool netns_up;

static void
skip(const char *why)
{
	printf("skip: %s\n", why);
	exit(77);
}

/* Runs a shell command on this machine; whether it exited 0. */
static bool _printf_(1, 2) host_sh(const char *fmt, ...)
{
	va_list ap;
	char *cmd = NULL;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&cmd, fmt, ap);
	va_end(ap);
	if (r < 0)
		return false;
	r = system(cmd);
	free(cmd);
	return r == 0;
}

static void
netns_down(void)
{
	if (netns_up && !host_sh("sh '%s/netns.sh' down %s", src, netns))
		fprintf(stderr, "test-egress-dashboard: netns.sh down %s failed\n", netns);
	netns_up = false;
}

static void
print_log(void)
{
	fprintf(stderr, "the end of sandboxd's log (%s):\n", p.log);
	host_sh("tail -n 60 '%s' >&2", p.log);
}

/* internet.py in NAME-inet, its output in inet_dir/internet.log; waits for it to listen. */
static int
spawn_inet(void)
{
	char *script = strdup_printf("%s/internet.py", src), *ns = strdup_printf("%s-inet", netns),
	     *log = strdup_printf("%s/internet.log", inet_dir),
	     *ready = strdup_printf("%s/ready", inet_dir);
	const char *argv[] = {
		"ip", "netns", "exec", ns, "python3", script, "serve", inet_dir, NULL
	};
	posix_spawn_file_actions_t fa;
	int r, ok = -1;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	r = posix_spawnp(&inet_pid, "ip", &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0) {
		fprintf(stderr, "cannot start internet.py: %s\n", strerror(r));
		inet_pid = 0;
	}
	for (int i = 0; inet_pid > 0 && i < 200; i++) {
		if (access(ready, F_OK) == 0) {
			ok = 0;
			break;
		}
		if (waitpid(inet_pid, NULL, WNOHANG) == inet_pid) {
			inet_pid = 0;
			break;
		}
		usleep(50000);
	}
	if (ok < 0) {
		fprintf(stderr, "internet.py did not start:\n");
		host_sh("cat '%s' >&2", log);
	}
	free(script);
	free(ns);
	free(log);
	free(ready);
	return ok;
}

/* The user: made with `sandboxd admin create`, the password from a file. */
static int
make_user(void)
{
	char pw[300], *out = NULL;
	int r;

	snprintf(pw, sizeof(pw), "%s/password", dir);
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
setup(char *id, size_t id_size)
{
	static char token[300], launcher_sh[300];
	static const char *launcher[6];
	const char *args[] = { "--egress", "on", "--listen", LISTEN, "--token-file", token, NULL };
	char *out = NULL;
	int st;

	if (harness_tmpdir(dir, sizeof(dir)) < 0)
		return -1;
	snprintf(inet_dir, sizeof(inet_dir), "%s/inet", dir);
	if (mkdir(inet_dir, 0700) < 0)
		return -1;
	if (!host_sh("python3 '%s/internet.py' certs '%s' >'%s/certs.log' 2>&1 || "
	             "{ cat '%s/certs.log' >&2; false; }",
	             src, inet_dir, dir, dir)) {
		fprintf(stderr, "internet.py certs failed (openssl)\n");
		return -1;
	}
	if (!host_sh("sh '%s/netns.sh' up %s", src, netns))
		return -1;
	netns_up = true;
	atexit(netns_down);
	if (spawn_inet() < 0)
		return -1;

	/* sandboxd in NAME-host, resolving through the internet's DNS server */
	snprintf(resolv, sizeof(resolv), "%s/resolv.conf", dir);
	snprintf(token, sizeof(token), "%s/token", dir);
	snprintf(launcher_sh, sizeof(launcher_sh), "%s/netns.sh", src);
	if (write_file_atomic(resolv, "nameserver " UPSTREAM_DNS "\n",
	                      strlen("nameserver " UPSTREAM_DNS "\n"), 0644) < 0 ||
	    write_file_atomic(token, "egress-dashboard-token-0123456789\n",
	                      strlen("egress-dashboard-token-0123456789\n"), 0600) < 0)
		return -1;
	launcher[0] = "/bin/sh";
	launcher[1] = launcher_sh;
	launcher[2] = "exec-host";
	launcher[3] = netns;
	launcher[4] = resolv;
	launcher[5] = NULL;
	harness_set_launcher(launcher);
	if (harness_start_vm(&p, args, NULL) < 0)
		return -1;

	/* the image, with this run's CA, installed from a local layout by the operator */
	if (!host_sh("sh '%s/mkimage.sh' '%s/images/local/egress' '%s/ca.pem' "
	             "'%s/images/busybox/rootfs.ext4' >'%s/mkimage.log' 2>&1 || "
	             "{ cat '%s/mkimage.log' >&2; false; }",
	             src, p.state, inet_dir, harness_vm_bundle(), dir, dir))
		return -1;
	st = harness_http_timeout(p.sock, "POST", "/v1/images", "{\"image\":\"egress\"}",
	                          INSTALL_TIMEOUT_MS, &out);
	if (st != 200) {
		fprintf(stderr, "POST /v1/images egress: %d %s\n", st, out ? out : "");
		free(out);
		return -1;
	}
	free(out);
	if (make_user() < 0)
		return -1;
	return create_as_user(id, id_size);
}

int
main(void)
{
	const char *web = getenv("SBX_WEB_DIR"), *artifacts = getenv("SBX_ARTIFACTS");
	char path[600], id[64] = "", vms[400];
	char vars[6][700];
	char **env = NULL;
	size_t count = 0;
	int n = 0, rc, ok = 1, left;

	if (geteuid() != 0)
		skip("egress needs root (taps, nftables, network namespaces)");
	src = getenv("SBX_EGRESS_SRC");
	netns = getenv("SBX_EGRESS_NETNS_WEB");
	if (!src || !*src || !netns || !*netns || !web || !artifacts)
		skip("SBX_EGRESS_SRC, SBX_EGRESS_NETNS_WEB, SBX_WEB_DIR or SBX_ARTIFACTS is not "
		     "set (run through ctest)");
	if (access(CHROMIUM, X_OK) < 0)
		skip(CHROMIUM " is not installed: run scripts/install-deps.sh");
	if (system("command -v node >/dev/null 2>&1") != 0)
		skip("node is not installed: run scripts/install-deps.sh");
	snprintf(path, sizeof(path), "%s/node_modules/playwright-core/package.json", web);
	if (access(path, R_OK) < 0)
		skip("web/node_modules has no playwright-core: run scripts/install-deps.sh "
		     "(npm ci in web/)");
	if (!host_sh("for t in ip nft unshare python3 openssl curl umoci debugfs; do "
	             "command -v $t >/dev/null || { echo \"skip: $t is not installed\"; "
	             "exit 1; }; done"))
		return 77;
	if (!host_sh("ip netns list >/dev/null 2>&1"))
		skip("network namespaces are not available here (ip netns list fails)");
	harness_vm_bundle(); /* skips without it */
	harness_binary("SANDBOXD");

	if (setup(id, sizeof(id)) < 0)
		ok = 0;

	if (ok) {
		while (environ[count])
			count++;
		env = calloc(count + 7, sizeof(*env)); /* 6 of ours and the NULL */
		if (!env)
			return 1;
		for (char **e = environ; *e; e++)
			env[n++] = *e;
		snprintf(vars[0], sizeof(vars[0]), "SBX_URL=http://%s/", LISTEN);
		snprintf(vars[1], sizeof(vars[1]), "SBX_USER_EMAIL=%s", EMAIL);
		snprintf(vars[2], sizeof(vars[2]), "SBX_USER_PASSWORD=%s", PASSWORD);
		snprintf(vars[3], sizeof(vars[3]), "SBX_SANDBOX_ID=%s", id);
		snprintf(vars[4], sizeof(vars[4]), "SBX_WEB_DIR=%s", web);
		snprintf(vars[5], sizeof(vars[5]), "SBX_ARTIFACTS=%s", artifacts);
		for (int i = 0; i < 6; i++)
			env[n++] = vars[i];
		env[n] = NULL;
		{
			/* in NAME-host, where 127.0.0.1 is sandboxd's (a Chromium left behind goes
			 * with the namespace too) */
			char script[400], netns_sh[400];
			snprintf(script, sizeof(script), "%s/egress-dashboard.mjs", src);
			snprintf(netns_sh, sizeof(netns_sh), "%s/netns.sh", src);
			char *argv[] = { "sh",   netns_sh, "exec-host", (char *)netns,
				         resolv, "node",   script,      NULL };
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
	if (inet_pid > 0) {
		kill(inet_pid, SIGKILL);
		waitpid(inet_pid, NULL, 0);
		inet_pid = 0;
	}
	netns_down();
	if (dir[0] && !getenv("HARNESS_KEEP"))
		host_sh("rm -rf '%s'", dir);
	return ok ? 0 : 1;
}
