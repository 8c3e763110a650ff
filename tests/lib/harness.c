/* harness.c: see harness.h. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include "harness.h"
#include "strv.h"
#include "util.h"

extern char **environ;

/* Every daemon started and not yet stopped, by pid: a failed assertion jumps out of a test
 * before its cleanup, so whatever is left is killed when the test program exits. */
static pid_t running[64];

static void
kill_leftovers(void)
{
	for (size_t i = 0; i < 64; i++)
		if (running[i] > 0) {
			kill(running[i], SIGKILL);
			waitpid(running[i], NULL, 0);
			running[i] = 0;
		}
}

static void
track(pid_t pid, bool add)
{
	static bool registered;

	if (!registered) {
		atexit(kill_leftovers);
		registered = true;
	}
	for (size_t i = 0; i < 64; i++) {
		if (add && running[i] <= 0) {
			running[i] = pid;
			return;
		}
		if (!add && running[i] == pid) {
			running[i] = 0;
			return;
		}
	}
}

const char *
harness_binary(const char *env_name)
{
	const char *b = getenv(env_name);

	if (!b || !*b) {
		fprintf(stderr, "skip: %s is not set (run through ctest)\n", env_name);
		exit(77);
	}
	return b;
}

static bool case_skipped;

void
harness_skip_case(const char *fmt, ...)
{
	va_list ap;

	fputs("skip: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	case_skipped = true;
	skip();
}

int
harness_exit_code(int failed)
{
	if (failed)
		return failed;
	if (case_skipped) {
		fprintf(stderr, "skip: a case could not run on this machine (see above): the test "
		                "is reported skipped, not passed\n");
		return 77;
	}
	return 0;
}

int
harness_tmpdir(char *out, size_t size)
{
	const char *t = getenv("SANDBOX_TEST_TMP");

	/* the suite's own directory, where the end-of-suite check looks for leftovers */
	if (t && *t) {
		if (mkdir_p(t, 0700) < 0)
			return -1;
	} else {
		t = getenv("TMPDIR");
		if (!t || !*t)
			t = "/tmp";
	}
	snprintf(out, size, "%s/sbxtest.XXXXXX", t);
	return mkdtemp(out) ? 0 : -1;
}

/* Our environment with add's "K=V" on top; NULL when out of memory. */
static char **
build_env(const char *const *add)
{
	char **e = NULL;
	size_t n = 0;
	int r = 0;

	/* an added "K=V" replaces the inherited K (getenv would find the first one) */
	for (size_t i = 0; r >= 0 && environ[i]; i++) {
		const char *eq = strchr(environ[i], '=');
		size_t len = eq ? (size_t)(eq - environ[i]) + 1 : strlen(environ[i]);
		bool replaced = false;
		for (size_t j = 0; add && add[j]; j++)
			if (strncmp(add[j], environ[i], len) == 0)
				replaced = true;
		if (!replaced)
			r = strv_add(&e, &n, environ[i]);
	}
	for (size_t i = 0; r >= 0 && add && add[i]; i++)
		r = strv_add(&e, &n, add[i]);
	if (r < 0)
		return strv_free(e);
	return e ?: calloc(1, sizeof(char *));
}

static pid_t
spawn(const char *binary, const char *const *args, const char *const *env, const char *out_path,
      int out_fd)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none;
	_cleanup_strv_ char **envp = build_env(env), **argv = NULL;
	size_t n = 0;
	pid_t pid;
	int r;

	r = strv_add(&argv, &n, binary);
	for (size_t i = 0; r >= 0 && args && args[i]; i++)
		r = strv_add(&argv, &n, args[i]);
	if (r < 0 || !envp) {
		fprintf(stderr, "harness: cannot start %s: out of memory\n", binary);
		return -1;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (out_path) {
		posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_APPEND,
		                                 0600);
		posix_spawn_file_actions_adddup2(&fa, 1, 2);
	} else {
		posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
		posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
	}
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
	r = posix_spawn(&pid, binary, &fa, &attr, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (r != 0) {
		fprintf(stderr, "harness: cannot start %s: %s\n", binary, strerror(r));
		return -1;
	}
	return pid;
}

static void
print_file(const char *path)
{
	char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return;
	fprintf(stderr, "---- %s ----\n", path);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fprintf(stderr, "---- end ----\n");
	fclose(f);
}

bool
harness_file_contains(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char *data;
	long n;
	bool found;

	if (!f)
		return false;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	data = calloc(1, (size_t)n + 1);
	if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) {
		free(data);
		fclose(f);
		return false;
	}
	fclose(f);
	found = strstr(data, needle) != NULL;
	free(data);
	return found;
}

/* A command that daemons are started through (harness_set_launcher), or none. */
static const char *const *launcher;

void
harness_set_launcher(const char *const *argv)
{
	launcher = argv;
}

static int
launch(struct daemon_proc *p, const char *binary, const char *const *extra, const char *const *env)
{
	_cleanup_strv_ char **args = NULL;
	const char *spawned = binary, *product = getenv("SANDBOXD");
	/* a test's sandboxes are not limited by the machine it runs on (fake ones hold
	 * nothing, real ones overcommit), unless it asks for a capacity */
	static const char *const capacity[][2] = {
		{ "--capacity-cpus", "4096" },
		{ "--capacity-memory-mb", "16777216" },
		{ "--capacity-disk-mb", "1073741824" },
	};
	bool egress = false, preview = false, capacity_set[3] = { false, false, false };
	size_t n = 0;
	int r = 0;

	if (launcher && launcher[0]) {
		/* spawn() puts the program first: the launcher's own words, then the daemon */
		spawned = launcher[0];
		for (size_t i = 1; r >= 0 && launcher[i]; i++)
			r = strv_add(&args, &n, launcher[i]);
		if (r >= 0)
			r = strv_add(&args, &n, binary);
	}
	if (r >= 0)
		r = strv_extend(&args, &n, "--state-dir", p->state, "--socket", p->sock, NULL);
	for (size_t i = 0; r >= 0 && extra && extra[i]; i++) {
		if (strcmp(extra[i], "--egress") == 0)
			egress = true;
		if (strcmp(extra[i], "--preview-listen") == 0)
			preview = true;
		for (size_t k = 0; k < 3; k++)
			if (strcmp(extra[i], capacity[k][0]) == 0)
				capacity_set[k] = true;
		r = strv_add(&args, &n, extra[i]);
	}
	for (size_t k = 0; r >= 0 && k < 3; k++)
		if (!capacity_set[k])
			r = strv_extend(&args, &n, capacity[k][0], capacity[k][1], NULL);
	/* the machine's own network is never a test's: the product's egress (taps, table inet
	 * sandboxd, ports 3128/7353) only where a test asks for it, in namespaces it made */
	if (r >= 0 && !egress && product && strcmp(binary, product) == 0)
		r = strv_extend(&args, &n, "--egress", "off", NULL);
	/* nor is the preview listener's default port (127.0.0.1:7071): a test that serves
	 * previews names a port of its own */
	if (r >= 0 && !preview)
		r = strv_extend(&args, &n, "--preview-listen", "off", NULL);
	if (r < 0)
		return -1;
	/* each start writes a fresh log so the readiness check sees this run's line */
	unlink(p->log);
	p->exit_status = -1;
	p->pid = spawn(spawned, (const char *const *)args, env, p->log, -1);
	if (p->pid < 0)
		return -1;
	track(p->pid, true);
	for (int i = 0; i < 1000; i++) {
		int status;
		if (harness_file_contains(p->log, "serving API v1"))
			return 0;
		if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
			fprintf(stderr, "harness: %s exited during startup\n", binary);
			print_file(p->log);
			track(p->pid, false);
			p->pid = 0;
			p->exit_status = status;
			return -1;
		}
		usleep(10000);
	}
	fprintf(stderr, "harness: %s did not become ready in 10 s\n", binary);
	print_file(p->log);
	harness_stop(p, SIGKILL);
	return -1;
}

int
harness_start(struct daemon_proc *p, const char *binary, const char *const *extra_args,
              const char *const *env)
{
	memset(p, 0, sizeof(*p));
	if (harness_tmpdir(p->dir, sizeof(p->dir)) < 0)
		return -1;
	snprintf(p->state, sizeof(p->state), "%s/state", p->dir);
	snprintf(p->sock, sizeof(p->sock), "%s/api.sock", p->dir);
	snprintf(p->log, sizeof(p->log), "%s/daemon.log", p->dir);
	return launch(p, binary, extra_args, env);
}

const char *
harness_vm_bundle(void)
{
	const char *b = getenv("SANDBOX_VM_BUNDLE");
	char manifest[600];

	if (!b || !*b) {
		fprintf(stderr, "skip: SANDBOX_VM_BUNDLE is not set (run through ctest)\n");
		exit(77);
	}
	snprintf(manifest, sizeof(manifest), "%s/vm/bundle.json", b);
	if (access(manifest, R_OK) < 0) {
		fprintf(stderr, "skip: no guest bundle at %s (the vm/setup fixture failed?)\n", b);
		exit(77);
	}
	return b;
}

int
harness_start_vm(struct daemon_proc *p, const char *const *extra_args, const char *const *env)
{
	const char *bundle = harness_vm_bundle();
	const char *bin = harness_binary("SANDBOXD");
	_cleanup_strv_ char **args = NULL;
	char cmd[2048];
	size_t n = 0;
	bool accel = false, image = false;
	int r = 0;

	memset(p, 0, sizeof(*p));
	if (harness_tmpdir(p->dir, sizeof(p->dir)) < 0)
		return -1;
	snprintf(p->state, sizeof(p->state), "%s/state", p->dir);
	snprintf(p->sock, sizeof(p->sock), "%s/api.sock", p->dir);
	snprintf(p->log, sizeof(p->log), "%s/daemon.log", p->dir);
	/* hard links: instant, and the bundle's files stay as they are (the daemon replaces,
	 * never rewrites, what it changes) */
	snprintf(cmd, sizeof(cmd),
	         "mkdir -m 0700 '%s' && cp -al '%s/vm' '%s/vm' && cp -al '%s/images' '%s/images'",
	         p->state, bundle, p->state, bundle, p->state);
	if (system(cmd) != 0)
		return -1;
	for (size_t i = 0; r >= 0 && extra_args && extra_args[i]; i++) {
		if (strcmp(extra_args[i], "--accel") == 0)
			accel = true;
		if (strcmp(extra_args[i], "--default-image") == 0)
			image = true;
		r = strv_add(&args, &n, extra_args[i]);
	}
	if (r >= 0 && !accel)
		r = strv_extend(&args, &n, "--accel", "tcg", NULL);
	/* the bundle's small disk, not sandbox-base (minutes to build) */
	if (r >= 0 && !image)
		r = strv_extend(&args, &n, "--default-image", "busybox", NULL);
	if (r < 0)
		return -1;
	return launch(p, bin, (const char *const *)args, env);
}

int
harness_restart(struct daemon_proc *p, const char *binary, const char *const *extra_args,
                const char *const *env)
{
	char old[320];

	/* keep the previous run's log for post-mortems */
	snprintf(old, sizeof(old), "%s.prev", p->log);
	rename(p->log, old);
	return launch(p, binary, extra_args, env);
}

int
harness_stop(struct daemon_proc *p, int sig)
{
	int status = 0;

	if (p->pid <= 0)
		return -1;
	kill(p->pid, sig);
	for (int i = 0; i < 1000; i++) {
		if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
			track(p->pid, false);
			p->pid = 0;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		}
		usleep(10000);
	}
	kill(p->pid, SIGKILL);
	waitpid(p->pid, &status, 0);
	track(p->pid, false);
	p->pid = 0;
	return 128 + SIGKILL;
}

/* Whether process pid belongs to the daemon whose state directory is state: its environment
 * carries the marker sandboxd gives its VMMs, or it works inside state's vms directory. */
static bool
is_our_vmm(const char *pid, const char *state)
{
	_cleanup_free_ char *environ_path = strdup_printf("/proc/%s/environ", pid);
	_cleanup_free_ char *cwd_path = strdup_printf("/proc/%s/cwd", pid);
	_cleanup_free_ char *marker = strdup_printf("SANDBOXD_STATE_DIR=%s", state);
	_cleanup_free_ char *vms = strdup_printf("%s/vms/", state);
	_cleanup_free_ char *env = NULL;
	char cwd[1024];
	size_t n = 0;
	ssize_t k;

	if (!environ_path || !cwd_path || !marker || !vms)
		return false;
	if (read_file_max(environ_path, 1 << 20, &env, &n) >= 0)
		for (size_t off = 0; off < n; off += strlen(env + off) + 1)
			if (streq(env + off, marker))
				return true;
	k = readlink(cwd_path, cwd, sizeof(cwd) - 1);
	if (k <= 0)
		return false;
	cwd[k] = '\0';
	return str_has_prefix(cwd, vms);
}

/* Kills the VMMs of the daemon in state that outlived it (VMs keep running after sandboxd
 * stops, by design, so a test must have deleted them all). Returns how many there were. */
int
harness_kill_vmms(const char *state)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		uint64_t pid;
		if (parse_u64(de->d_name, &pid) < 0 || !is_our_vmm(de->d_name, state))
			continue;
		fprintf(stderr, "harness: VMM %s outlived the suite; killing it\n", de->d_name);
		kill((pid_t)pid, SIGKILL);
		n++;
	}
	closedir(d);
	return n;
}

void
harness_cleanup(struct daemon_proc *p)
{
	if (p->pid > 0)
		harness_stop(p, SIGKILL);
	if (p->state[0])
		(void)harness_kill_vmms(p->state);
	if (p->dir[0])
		(void)harness_rmtree(p->dir);
}

int
harness_rmtree(const char *dir)
{
	char cmd[400];

	if (getenv("HARNESS_KEEP"))
		return 0;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "harness: could not remove %s\n", dir);
		return -1;
	}
	return 0;
}

const char *
harness_need_guestd(void)
{
	const char *guestd = getenv("SANDBOX_GUESTD");

	if (!guestd || access(guestd, X_OK) < 0) {
		fprintf(stderr,
		        "skip: SANDBOX_GUESTD is not set to sandbox-guestd (run through ctest)\n");
		exit(77);
	}
	return guestd;
}

int
harness_start_fake_agent(struct daemon_proc *p, const char *guestd, const char *const *args,
                         const char *const *env)
{
	_cleanup_free_ char *agent = strdup_printf("SANDBOXD_FAKE_AGENT=%s", guestd);
	const char *all[16] = { agent };
	size_t n = 1;

	for (; env && *env; env++) {
		assert_true(n < ARRAY_SIZE(all) - 1);
		all[n++] = *env;
	}
	if (!agent)
		return -1;
	return harness_start(p, harness_binary("SANDBOXD_FAKE"), args, all);
}

int
harness_run(const char *binary, const char *const *args, const char *const *env, char **ret_output)
{
	char path[] = "/tmp/sbxrun.XXXXXX";
	int fd = mkstemp(path), status = 0;
	pid_t pid;
	char *out;
	off_t n;

	if (fd < 0)
		return -1;
	unlink(path);
	pid = spawn(binary, args, env, NULL, fd);
	if (pid < 0) {
		close(fd);
		return -1;
	}
	for (int i = 0;; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			break;
		if (i == 1000) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			break;
		}
		usleep(10000);
	}
	n = lseek(fd, 0, SEEK_END);
	out = calloc(1, (size_t)n + 1);
	if (out && n > 0 && pread(fd, out, (size_t)n, 0) != n)
		out[0] = '\0';
	close(fd);
	if (ret_output)
		*ret_output = out;
	else
		free(out);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int
harness_connect(const char *sock_path, int port)
{
	int fd;

	if (sock_path) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
	} else {
		struct sockaddr_in sa = { .sin_family = AF_INET,
			                  .sin_port = htons((uint16_t)port),
			                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
	}
	if (fd >= 0)
		close(fd);
	return -1;
}

/* Sends all of p; -1 when the peer stopped taking it. */
static int
send_all(int fd, const void *p, size_t len)
{
	const char *c = p;

	while (len > 0) {
		ssize_t k = send(fd, c, len, MSG_NOSIGNAL);
		if (k <= 0)
			return -1;
		c += k;
		len -= (size_t)k;
	}
	return 0;
}

ssize_t
harness_raw(const char *sock_path, int port, const void *req, size_t len, char **ret_response,
            int timeout_ms)
{
	int fd = harness_connect(sock_path, port);
	char *out = NULL;
	size_t got = 0;

	if (fd < 0)
		return -1;
	/* the server may close early on bad input: read what it said */
	(void)send_all(fd, req, len);
	/* the whole read ends by the deadline, so an endless stream ends too */
	(void)harness_stream_read(fd, timeout_ms, NULL, &out, &got);
	close(fd);
	if (!out)
		return -1;
	*ret_response = out;
	return (ssize_t)got;
}

/* The text of rq: the request line and Host; for an answer read whole (!stream) Connection:
 * close, the extra headers, the body's type and length (0 without one) and the body; for a
 * stream the extra headers alone. */
static char *
request_text(const struct harness_req *rq, bool stream)
{
	const char *host = rq->host ? rq->host : "localhost",
	           *hdrs = rq->headers ? rq->headers : "";

	if (stream)
		return strdup_printf("%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", rq->method, rq->path,
		                     host, hdrs);
	return strdup_printf("%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s%s"
	                     "Content-Length: %zu\r\n\r\n%s",
	                     rq->method, rq->path, host, hdrs,
	                     rq->body ? "Content-Type: application/json\r\n" : "",
	                     rq->body ? strlen(rq->body) : 0, rq->body ? rq->body : "");
}

int
harness_request(const struct harness_req *rq, char **ret_response)
{
	_cleanup_free_ char *text = request_text(rq, false);
	char *resp = NULL;
	int status = -1;

	if (text && harness_raw(rq->sock, rq->port, text, strlen(text), &resp,
	                        rq->timeout_ms > 0 ? rq->timeout_ms : 30000) > 0)
		sscanf(resp, "HTTP/1.1 %d", &status);
	if (ret_response)
		*ret_response = resp ? resp : strdup("");
	else
		free(resp);
	return status;
}

/* Connects and sends rq (as request_text() writes it); the fd, or -1. */
static int
request_send(const struct harness_req *rq, bool stream)
{
	_cleanup_free_ char *text = request_text(rq, stream);
	int fd = text ? harness_connect(rq->sock, rq->port) : -1;

	if (fd >= 0 && send_all(fd, text, strlen(text)) < 0)
		fd = safe_close(fd);
	return fd;
}

int
harness_request_open(const struct harness_req *rq)
{
	return request_send(rq, false);
}

/* A request to the unix socket (harness_request), its answer split into the head (without the
 * blank line) and the body. */
static int
http_parts(const char *sock_path, const char *method, const char *path, const char *headers,
           const char *body, int timeout_ms, char **ret_head, char **ret_body)
{
	const struct harness_req rq = { .sock = sock_path,
		                        .method = method,
		                        .path = path,
		                        .headers = headers,
		                        .body = body,
		                        .timeout_ms = timeout_ms };
	_cleanup_free_ char *resp = NULL;
	int status = harness_request(&rq, &resp);
	const char *end = resp ? strstr(resp, "\r\n\r\n") : NULL;

	if (ret_head)
		*ret_head = end ? strndup(resp, (size_t)(end - resp)) : strdup(resp ? resp : "");
	if (ret_body)
		*ret_body = strdup(end ? end + 4 : "");
	return status;
}

int
harness_http(const char *sock_path, const char *method, const char *path, const char *body,
             char **ret_body)
{
	return harness_http_timeout(sock_path, method, path, body, 30000, ret_body);
}

int
harness_http_timeout(const char *sock_path, const char *method, const char *path, const char *body,
                     int timeout_ms, char **ret_body)
{
	return http_parts(sock_path, method, path, NULL, body, timeout_ms, NULL, ret_body);
}

int
harness_http_headers(const char *sock_path, const char *method, const char *path,
                     const char *extra_headers, const char *body, char **ret_head, char **ret_body)
{
	return http_parts(sock_path, method, path, extra_headers, body, 0, ret_head, ret_body);
}

char *
harness_header(const char *head, const char *name)
{
	size_t k = strlen(name);

	for (const char *l = head; l && *l;) {
		const char *eol = strstr(l, "\r\n");
		size_t len = eol ? (size_t)(eol - l) : strlen(l);
		if (len > k && strncasecmp(l, name, k) == 0 && l[k] == ':') {
			const char *v = l + k + 1;
			while (*v == ' ')
				v++;
			return strndup(v, len - (size_t)(v - l));
		}
		l = eol ? eol + 2 : l + len;
	}
	return NULL;
}

int
harness_stream_open(const char *sock_path, const char *method, const char *path,
                    const char *extra_headers)
{
	const struct harness_req rq = {
		.sock = sock_path, .method = method, .path = path, .headers = extra_headers
	};

	return request_send(&rq, true);
}

int
harness_stream_read(int fd, int timeout_ms, const char *until, char **buf, size_t *len)
{
	struct timespec start;

	if (!*buf) {
		*buf = calloc(1, 1);
		*len = 0;
		if (!*buf)
			return -1;
	}
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		struct timespec now;
		char chunk[16384], *n;
		long left;
		ssize_t k;

		if (until && strstr(*buf, until))
			return 0;
		clock_gettime(CLOCK_MONOTONIC, &now);
		left = timeout_ms - ((now.tv_sec - start.tv_sec) * 1000 +
		                     (now.tv_nsec - start.tv_nsec) / 1000000);
		if (left <= 0)
			return 0;
		k = poll(&pfd, 1, (int)left);
		if (k < 0 && errno != EINTR)
			return -1;
		if (k <= 0)
			continue;
		k = recv(fd, chunk, sizeof(chunk), 0);
		if (k == 0 || (k < 0 && errno == ECONNRESET))
			return 1;
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		n = realloc(*buf, *len + (size_t)k + 1);
		if (!n)
			return -1;
		memcpy(n + *len, chunk, (size_t)k);
		*len += (size_t)k;
		n[*len] = '\0';
		*buf = n;
	}
}

int
harness_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
		                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

int
harness_tcp_listen(int *ret_port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
		                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	*ret_port = ntohs(sin.sin_port);
	return fd;
}

json_t *
harness_json(const char *sock_path, const char *method, const char *path, const char *body,
             int want_status)
{
	return harness_json_timeout(sock_path, method, path, body, 30000, want_status);
}

json_t *
harness_json_timeout(const char *sock_path, const char *method, const char *path, const char *body,
                     int timeout_ms, int want_status)
{
	char *out = NULL;
	int status = harness_http_timeout(sock_path, method, path, body, timeout_ms, &out);
	json_t *j;

	if (status != want_status)
		fail_msg("%s %s %s: expected %d, got %d: %s", method, path, body ? body : "",
		         want_status, status, out && *out ? out : "(no answer)");
	j = out && *out ? json_loads(out, 0, NULL) : NULL;
	free(out);
	return j;
}

json_t *
harness_json_headers(const char *sock_path, const char *hdrs, const char *method, const char *path,
                     const char *body, int want_status, char **ret_head)
{
	char *head = NULL, *out = NULL;
	int status = harness_http_headers(sock_path, method, path, hdrs, body, &head, &out);
	json_t *j;

	if (status != want_status) {
		/* fail_msg jumps out: nothing of this call may stay allocated */
		char said[2048];
		snprintf(said, sizeof(said), "%s", out && *out ? out : "(no answer)");
		free(out);
		free(head);
		fail_msg("%s %s %s: expected %d, got %d: %s", method, path, body ? body : "",
		         want_status, status, said);
	}
	j = out && *out ? json_loads(out, 0, NULL) : NULL;
	free(out);
	if (ret_head)
		*ret_head = head;
	else
		free(head);
	return j;
}

const char *
harness_str(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

long
harness_proc_kib(pid_t pid, const char *field)
{
	char path[64], line[256];
	size_t n = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, n) == 0 && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	fclose(f);
	return v;
}

bool
harness_reset_peak(pid_t pid)
{
	char path[64];
	int fd;
	bool ok;

	snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)pid);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ok = write(fd, "5", 1) == 1;
	close(fd);
	return ok;
}

int
harness_count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

int
harness_make_certs(const char *dir, const char *extra_san, bool client)
{
	char cmd[4096];

	snprintf(cmd, sizeof(cmd),
	         "cd '%s' && umask 077 && { "
	         "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
	         "-keyout ca.key -out ca.pem -days 2 -subj /CN=sandboxd-test-ca && "
	         "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
	         "-keyout server.key -out server.csr -subj /CN=localhost && "
	         "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1%s\\n' > san.ext && "
	         "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
	         "-out server.pem -days 2 -extfile san.ext && "
	         "if [ %d = 1 ]; then "
	         "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
	         "-keyout client.key -out client.csr -subj /CN=gateway && "
	         "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
	         "-out client.pem -days 2; fi; } >openssl.log 2>&1",
	         dir, extra_san ? extra_san : "", client ? 1 : 0);
	return system(cmd) == 0 ? 0 : -1;
}

int
harness_run_checked(const char *binary, const char *const *args, const char *const *env,
                    char **ret_output)
{
	char *o = NULL;
	int rc = harness_run(binary, args, env, &o);

	assert_non_null(o);
	if (strstr(o, "Sanitizer") || strstr(o, "runtime error:"))
		fail_msg("%s %s: sanitizer report:\n%s", binary, args[0] ? args[0] : "", o);
	if (ret_output)
		*ret_output = o;
	else
		free(o);
	return rc;
}

void
harness_expect_in(const char *out, const char *needle)
{
	if (!strstr(out, needle))
		fail_msg("expected '%s' in the output:\n%s", needle, out);
}

void
harness_expect_not_in(const char *out, const char *needle)
{
	if (strstr(out, needle))
		fail_msg("did not expect '%s' in the output:\n%s", needle, out);
}

int
harness_run_group(char *const *argv, char **env, int timeout_s, void (*tick)(void))
{
	time_t deadline = time(NULL) + timeout_s;
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		setpgid(0, 0);
		execvpe(argv[0], argv, env);
		_exit(127);
	}
	setpgid(pid, pid);
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		if (tick)
			tick();
		if (time(NULL) > deadline) {
			fprintf(stderr, "harness: %s ran past %d s: killed\n", argv[0], timeout_s);
			kill(-pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(200 * 1000);
	}
	kill(-pid, SIGKILL);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int
harness_delete_all(const char *sock)
{
	char *text = NULL;
	json_t *list, *sb;
	size_t i;
	int failed = 0;

	if (harness_http_timeout(sock, "GET", "/v1/sandboxes", NULL, 30000, &text) != 200) {
		fprintf(stderr, "GET /v1/sandboxes: %s\n", text ? text : "no answer");
		free(text);
		return -1;
	}
	list = json_loads(text, 0, NULL);
	free(text);
	json_array_foreach (json_object_get(list, "sandboxes"), i, sb) {
		char path[128], *body = NULL;
		int st;
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", harness_str(sb, "id"));
		st = harness_http_timeout(sock, "DELETE", path, NULL, 120000, &body);
		if (st != 204) {
			fprintf(stderr, "DELETE %s: %d %s\n", path, st, body ? body : "");
			failed++;
		}
		free(body);
	}
	json_decref(list);
	return failed ? -1 : 0;
}

void
harness_need_browser(const char *web)
{
	_cleanup_free_ char *playwright =
	        strdup_printf("%s/node_modules/playwright-core/package.json", web);
	const char *missing = NULL;

	if (access("/usr/bin/chromium", X_OK) < 0)
		missing = "/usr/bin/chromium is not installed: run scripts/install-deps.sh";
	else if (system("command -v node >/dev/null 2>&1") != 0)
		missing = "node is not installed: run scripts/install-deps.sh";
	else if (!playwright || access(playwright, R_OK) < 0)
		missing = "web/node_modules has no playwright-core: run scripts/install-deps.sh "
		          "(npm ci in web/)";
	if (missing) {
		printf("skip: %s\n", missing);
		exit(77);
	}
}

char **
harness_environ_with(const char *const *vars)
{
	extern char **environ;
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	while (vars[k])
		k++;
	env = calloc(n + k + 1, sizeof(*env));
	if (!env)
		return NULL;
	memcpy(env, environ, n * sizeof(*env));
	memcpy(env + n, vars, k * sizeof(*env));
	return env;
}

int
harness_admin_create(const char *binary, const char *state_dir, const char *dir, const char *email,
                     const char *password, const char *role)
{
	_cleanup_free_ char *pw = strdup_printf("%s/admin-create-password", dir);
	const char *args[] = { "admin",           "create", email,         "--role",  role,
		               "--password-file", pw,       "--state-dir", state_dir, NULL };
	char *out = NULL;
	int rc;

	if (!pw || write_file_atomic(pw, password, strlen(password), 0600) < 0) {
		fprintf(stderr, "cannot write the password of %s in %s\n", email, dir);
		return -1;
	}
	rc = harness_run_checked(binary, args, NULL, &out);
	if (rc != 0)
		fprintf(stderr, "sandboxd admin create %s: %s\n", email, out ? out : "");
	free(out);
	unlink(pw);
	return rc == 0 ? 0 : -1;
}

void
harness_print_log_tail(const struct daemon_proc *p, int lines)
{
	char cmd[400];

	fprintf(stderr, "the end of the daemon's log:\n");
	snprintf(cmd, sizeof(cmd), "tail -n %d '%s' >&2", lines, p->log);
	if (system(cmd) != 0)
		fprintf(stderr, "(cannot read %s)\n", p->log);
}

int
harness_run_node(const char *dir, const char *script, const char *const *vars, int timeout_s,
                 void (*tick)(void))
{
	_cleanup_free_ char *path = strdup_printf("%s/%s", dir, script);
	char **env = harness_environ_with(vars);
	int rc = -1;

	if (path && env) {
		char *argv[] = { "node", path, NULL };
		rc = harness_run_group(argv, env, timeout_s, tick);
	}
	free(env);
	if (rc != 0)
		fprintf(stderr, "%s failed (exit %d)\n", script, rc);
	return rc == 0 ? 0 : -1;
}
