/* egressnet.c: the egress tests' shared environment (egressnet.h): namespaces, the launcher,
 * the test internet and the test image, the same for test-egress, test-egress-daemon and
 * test-egress-dashboard. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "egressnet.h"
#include "util.h"

extern char **environ;

struct egressnet egressnet;

bool
egressnet_sh(const char *fmt, ...)
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
	if (egressnet.up && !egressnet_sh("sh '%s' down %s", egressnet.netns_sh, egressnet.netns))
		fprintf(stderr, "egress: netns.sh down %s failed\n", egressnet.netns);
	egressnet.up = false;
}

int
egressnet_up(const char *src, const char *netns)
{
	static const char *launcher[6];
	static const char resolv_conf[] = "nameserver " EGRESSNET_UPSTREAM_DNS "\n";

	egressnet.src = src;
	egressnet.netns = netns;
	snprintf(egressnet.netns_sh, sizeof(egressnet.netns_sh), "%s/netns.sh", src);
	if (harness_tmpdir(egressnet.dir, sizeof(egressnet.dir)) < 0)
		return -1;
	snprintf(egressnet.inet_dir, sizeof(egressnet.inet_dir), "%s/inet", egressnet.dir);
	snprintf(egressnet.resolv, sizeof(egressnet.resolv), "%s/resolv.conf", egressnet.dir);
	if (write_file_atomic(egressnet.resolv, resolv_conf, strlen(resolv_conf), 0644) < 0) {
		fprintf(stderr, "cannot write %s\n", egressnet.resolv);
		return -1;
	}
	if (!egressnet_sh("sh '%s' up %s", egressnet.netns_sh, netns))
		return -1;
	egressnet.up = true;
	atexit(netns_down);
	launcher[0] = "/bin/sh";
	launcher[1] = egressnet.netns_sh;
	launcher[2] = "exec-host";
	launcher[3] = netns;
	launcher[4] = egressnet.resolv;
	launcher[5] = NULL;
	harness_set_launcher(launcher);
	return 0;
}

int
egressnet_inet_start(void)
{
	const char *d = egressnet.dir, *inet = egressnet.inet_dir;
	char *script = strdup_printf("%s/internet.py", egressnet.src),
	     *ns = strdup_printf("%s-inet", egressnet.netns),
	     *log = strdup_printf("%s/internet.log", inet),
	     *ready = strdup_printf("%s/ready", inet);
	const char *argv[] = { "ip", "netns", "exec", ns, "python3", script, "serve", inet, NULL };
	posix_spawn_file_actions_t fa;
	int r, ok = -1;

	if (mkdir(inet, 0700) < 0) {
		fprintf(stderr, "cannot make %s: %s\n", inet, strerror(errno));
		goto out;
	}
	if (!egressnet_sh("python3 '%s' certs '%s' >'%s/certs.log' 2>&1 || "
	                  "{ cat '%s/certs.log' >&2; false; }",
	                  script, inet, d, d)) {
		fprintf(stderr, "internet.py certs failed (openssl)\n");
		goto out;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	r = posix_spawnp(&egressnet.inet_pid, "ip", &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0) {
		fprintf(stderr, "cannot start internet.py: %s\n", strerror(r));
		egressnet.inet_pid = 0;
		goto out;
	}
	for (int i = 0; i < 200; i++) {
		if (access(ready, F_OK) == 0) {
			ok = 0;
			goto out;
		}
		if (waitpid(egressnet.inet_pid, NULL, WNOHANG) == egressnet.inet_pid) {
			egressnet.inet_pid = 0;
			break;
		}
		usleep(50000);
	}
	fprintf(stderr, "internet.py did not start:\n");
	egressnet_sh("cat '%s' >&2", log);
out:
	free(script);
	free(ns);
	free(log);
	free(ready);
	return ok;
}

int
egressnet_install_image(const struct daemon_proc *p, int timeout_ms)
{
	const char *d = egressnet.dir;
	char *out = NULL;
	int st;

	if (!egressnet_sh("sh '%s/mkimage.sh' '%s/images/local/egress' '%s/ca.pem' "
	                  "'%s/images/busybox/rootfs.ext4' >'%s/mkimage.log' 2>&1 || "
	                  "{ cat '%s/mkimage.log' >&2; false; }",
	                  egressnet.src, p->state, egressnet.inet_dir, harness_vm_bundle(), d, d))
		return -1;
	st = harness_http_timeout(p->sock, "POST", "/v1/images", "{\"image\":\"egress\"}",
	                          timeout_ms, &out);
	if (st != 200)
		fprintf(stderr, "POST /v1/images egress: %d %s\n", st, out ? out : "");
	free(out);
	return st == 200 ? 0 : -1;
}

pid_t
egressnet_worker_of(pid_t daemon)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	pid_t found = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[300], *text = NULL, *end = NULL;
		size_t n = 0;
		FILE *f;
		int ppid = 0;
		long pid;

		pid = strtol(de->d_name, &end, 10);
		if (pid <= 0 || !end || *end)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (getline(&text, &n, f) > 0) {
			char *close_paren = strrchr(text, ')');
			if (close_paren)
				(void)sscanf(close_paren + 2, "%*c %d", &ppid);
		}
		fclose(f);
		free(text);
		if (ppid != daemon)
			continue;
		/* /proc files have no size: read, do not seek */
		snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
		f = fopen(path, "r");
		if (f) {
			char argv[256] = "";
			size_t n_read = fread(argv, 1, sizeof(argv) - 1, f);
			fclose(f);
			/* "sandboxd\0egress-worker\0..." */
			if (n_read > 0 && memmem(argv, n_read, "egress-worker", 13))
				found = (pid_t)pid;
		}
	}
	closedir(d);
	return found;
}

void
egressnet_down(void)
{
	if (egressnet.inet_pid > 0) {
		kill(egressnet.inet_pid, SIGKILL);
		waitpid(egressnet.inet_pid, NULL, 0);
		egressnet.inet_pid = 0;
	}
	harness_set_launcher(NULL);
	netns_down();
	if (egressnet.dir[0] && !getenv("HARNESS_KEEP"))
		egressnet_sh("rm -rf '%s'", egressnet.dir);
	egressnet.dir[0] = '\0';
}
