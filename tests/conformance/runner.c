/* runner.c: the CTest side of the conformance suite. Starts a fresh sandboxd-fake (token file,
 * TCP listener, unix socket; with "tls" also a throwaway CA and server certificate made with the
 * openssl command), or with "qemu" the product sandboxd with real VMs on a private copy of the
 * guest bundle, and runs the conformance binary against its endpoints; afterwards nothing may be
 * left running. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "util.h"

#define SUITE_TIMEOUT_MS (240 * 1000)
/* real VMs boot in seconds each under TCG; CTest's own limit is 900 s */
#define SUITE_VM_TIMEOUT_MS (780 * 1000)
#define START_TRIES 3

extern char **environ;

/* The files this runner makes in its directory, removed at the end. */
static const char *const made_files[] = {
	"token",      "openssl.cnf", "openssl.log", "ca.key",      "ca.pem",
	"server.key", "server.csr",  "server.pem",  "policy.yaml", "resolv.conf",
};

/* Every run's limits on the timeouts, so the case that a limit bounds what a create leaves out
 * runs everywhere (long enough for any run). */
#define TIMEOUT_LIMITS                                                                             \
	"limits:\n"                                                                                \
	"  max_idle_timeout_secs: 3600\n"                                                          \
	"  max_lifetime_secs: 86400\n"

/* The plain fake's policy: a narrow may_allow, so the may_allow and wildcard cases have
 * something to refuse, and an empty default allow list, so an allowlist left to it is refused
 * (the tls run keeps the built-in "*" and has a default list: the other branches). */
static const char plain_policy[] = "network:\n"
                                   "  may_allow: [example.org, '*.example.org', "
                                   "'*.a.example.net', example.com]\n" TIMEOUT_LIMITS;
static const char tls_policy[] =
        "network:\n"
        "  default: {mode: allowlist, allow: [example.com]}\n" TIMEOUT_LIMITS;
/* Real VMs: the built-in network policy (the ceiling follows egress) */
static const char qemu_policy[] = TIMEOUT_LIMITS;

/* With real VMs as root, sandboxd runs with egress on inside network namespaces of the
 * run's own (tests/egress/netns.sh), so the network cases (sandboxes_cannot_reach_each_other among
 * them) pass rather than skip; the machine's own network is never touched. */
static char netns_name[16];
static const char *launcher[8];

static char dir[256];

static char *
in_dir(const char *name)
{
	char *p = strdup_printf("%s/%s", dir, name);

	if (!p) {
		fprintf(stderr, "runner: out of memory\n");
		exit(1);
	}
	return p;
}

static void
remove_dir(void)
{
	if (!dir[0] || getenv("HARNESS_KEEP"))
		return;
	for (size_t i = 0; i < ARRAY_SIZE(made_files); i++) {
		_cleanup_free_ char *p = in_dir(made_files[i]);
		(void)unlink(p);
	}
	(void)rmdir(dir);
}

/* Runs argv (found on $PATH) and waits up to timeout_ms. out_path: where its stdout and stderr
 * go (NULL: ours). Returns its exit status, 128+signal, or -1 if it could not start. */
static int
run(const char *const *argv, const char *out_path, int timeout_ms)
{
	posix_spawn_file_actions_t fa;
	uint64_t deadline = now_mono_ms() + (uint64_t)timeout_ms;
	int status = 0, r;
	pid_t pid;

	posix_spawn_file_actions_init(&fa);
	if (out_path) {
		posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_APPEND,
		                                 0600);
		posix_spawn_file_actions_adddup2(&fa, 1, 2);
	}
	r = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0) {
		fprintf(stderr, "runner: cannot run %s: %s\n", argv[0], strerror(r));
		return -1;
	}
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			return -1;
		if (now_mono_ms() > deadline) {
			fprintf(stderr, "runner: %s ran past %d s; killing it\n", argv[0],
			        timeout_ms / 1000);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			break;
		}
		usleep(20 * 1000);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int
write_file(const char *name, const char *text)
{
	_cleanup_free_ char *p = in_dir(name);

	if (write_file_atomic(p, text, strlen(text), 0600) < 0) {
		fprintf(stderr, "runner: cannot write %s\n", p);
		return -1;
	}
	return 0;
}

static void
print_log(const char *path)
{
	_cleanup_free_ char *text = NULL;

	if (read_file_max(path, 1 << 20, &text, NULL) >= 0)
		fprintf(stderr, "%s", text);
}

static const char openssl_cnf[] = "[req]\n"
                                  "distinguished_name = dn\n"
                                  "prompt = no\n"
                                  "[dn]\n"
                                  "CN = sandboxd conformance\n"
                                  "[ca_ext]\n"
                                  "basicConstraints = critical, CA:TRUE\n"
                                  "keyUsage = critical, keyCertSign, cRLSign\n"
                                  "subjectKeyIdentifier = hash\n"
                                  "[server_ext]\n"
                                  "basicConstraints = critical, CA:FALSE\n"
                                  "keyUsage = critical, digitalSignature\n"
                                  "extendedKeyUsage = serverAuth\n"
                                  "subjectAltName = IP:127.0.0.1, DNS:localhost\n"
                                  "subjectKeyIdentifier = hash\n"
                                  "authorityKeyIdentifier = keyid\n";

/* A throwaway CA and a server certificate for 127.0.0.1 and localhost. 0, -1, or 77 when
 * there is no openssl command. */
static int
make_certs(void)
{
	_cleanup_free_ char *cnf = in_dir("openssl.cnf"), *log = in_dir("openssl.log");
	_cleanup_free_ char *ca_key = in_dir("ca.key"), *ca = in_dir("ca.pem");
	_cleanup_free_ char *key = in_dir("server.key"), *csr = in_dir("server.csr");
	_cleanup_free_ char *cert = in_dir("server.pem"), *serial = NULL;
	const char *version[] = { "openssl", "version", NULL };
	char hex[17];

	if (run(version, log, 10000) != 0) {
		fprintf(stderr, "skip: the openssl command is needed to make test certificates\n");
		return 77;
	}
	if (write_file("openssl.cnf", openssl_cnf) < 0 || random_hex(hex, 8) < 0 ||
	    !(serial = strdup_printf("0x%s", hex)))
		return -1;
	const char *make_ca[] = { "openssl",
		                  "req",
		                  "-x509",
		                  "-config",
		                  cnf,
		                  "-extensions",
		                  "ca_ext",
		                  "-newkey",
		                  "ec",
		                  "-pkeyopt",
		                  "ec_paramgen_curve:prime256v1",
		                  "-nodes",
		                  "-keyout",
		                  ca_key,
		                  "-out",
		                  ca,
		                  "-days",
		                  "2",
		                  "-subj",
		                  "/CN=sandboxd conformance CA",
		                  NULL };
	const char *make_csr[] = { "openssl",
		                   "req",
		                   "-new",
		                   "-config",
		                   cnf,
		                   "-newkey",
		                   "ec",
		                   "-pkeyopt",
		                   "ec_paramgen_curve:prime256v1",
		                   "-nodes",
		                   "-keyout",
		                   key,
		                   "-out",
		                   csr,
		                   "-subj",
		                   "/CN=localhost",
		                   NULL };
	const char *sign[] = { "openssl",     "x509",       "-req",   "-in",      csr,
		               "-CA",         ca,           "-CAkey", ca_key,     "-set_serial",
		               serial,        "-days",      "2",      "-extfile", cnf,
		               "-extensions", "server_ext", "-out",   cert,       NULL };
	if (run(make_ca, log, 30000) != 0 || run(make_csr, log, 30000) != 0 ||
	    run(sign, log, 30000) != 0 || chmod(key, 0600) < 0) {
		fprintf(stderr, "runner: making the test certificates failed:\n");
		print_log(log);
		return -1;
	}
	return 0;
}

/* Runs the suite against endpoint; prints a header so the log says which run failed, and the
 * time it took. */
static int
run_suite(const char *suite, const char *endpoint, const char *token, const char *ca,
          int timeout_ms)
{
	const char *argv[] = { suite, NULL };
	uint64_t start = now_mono_ms();
	int r;

	printf("\n==== conformance against %s (%s%s) ====\n", endpoint,
	       token ? "token" : "no token", ca ? ", TLS with a test CA" : "");
	fflush(stdout);
	setenv("SANDBOX_CONFORMANCE_ENDPOINT", endpoint, 1);
	if (token)
		setenv("SANDBOX_CONFORMANCE_TOKEN", token, 1);
	else
		unsetenv("SANDBOX_CONFORMANCE_TOKEN");
	if (ca)
		setenv("SANDBOX_CONFORMANCE_CA", ca, 1);
	else
		unsetenv("SANDBOX_CONFORMANCE_CA");
	r = run(argv, NULL, timeout_ms);
	printf("==== %s: %.1f s ====\n", endpoint, (double)(now_mono_ms() - start) / 1000.0);
	fflush(stdout);
	if (r != 0)
		fprintf(stderr, "runner: the suite failed against %s (exit %d)\n", endpoint, r);
	return r;
}

/* Deletes every sandbox the daemon still has running: the suite deletes what it creates, so
 * any is a failure (a case, or the server, lost track of one). Returns how many there were. */
static int
delete_leftovers(const struct daemon_proc *p)
{
	char *body = NULL;
	json_t *j, *list, *sb;
	size_t i;
	int status = harness_http(p->sock, "GET", "/v1/sandboxes", NULL, &body), n = 0;

	j = status == 200 && body ? json_loads(body, 0, NULL) : NULL;
	free(body);
	list = json_object_get(j, "sandboxes");
	if (!json_is_array(list)) {
		fprintf(stderr, "runner: GET /v1/sandboxes answered %d after the suite\n", status);
		json_decref(j);
		return 1;
	}
	json_array_foreach (list, i, sb) {
		const char *id = json_string_value(json_object_get(sb, "id"));
		const char *state = json_string_value(json_object_get(sb, "state"));
		_cleanup_free_ char *path = NULL;

		if (!id || (state && streq(state, "terminated")))
			continue;
		fprintf(stderr, "runner: sandbox '%s' (%s) was left behind; deleting it\n", id,
		        state ? state : "?");
		path = strdup_printf("/v1/sandboxes/%s", id);
		if (path)
			(void)harness_http(p->sock, "DELETE", path, NULL, NULL);
		n++;
	}
	json_decref(j);
	return n;
}

/* As root where namespaces work: NAME-host and NAME-inet, and the launcher that starts
 * sandboxd in NAME-host. Elsewhere nothing (sandboxd runs with --egress off, the network
 * cases skip, saying why, and the run exits 77). -1 when namespaces work but setting them up
 * failed. */
static int
netns_up(void)
{
	_cleanup_free_ char *resolv = in_dir("resolv.conf");
	const char *probe[] = { "ip", "netns", "list", NULL };

	if (geteuid() != 0 || run(probe, "/dev/null", 10000) != 0) {
		fprintf(stderr, "runner: not root or no network namespaces: sandboxd runs with "
		                "--egress off\n");
		return 0;
	}
	snprintf(netns_name, sizeof(netns_name), "sbxtc%d", (int)(getpid() % 100000));
	{
		const char *up[] = { "sh", NETNS_SH, "up", netns_name, NULL };
		/* no resolver answers there: names sandboxes may reach resolve to nothing */
		if (write_file("resolv.conf", "nameserver 203.0.113.53\n") < 0 ||
		    run(up, NULL, 30000) != 0) {
			fprintf(stderr, "runner: cannot set up the network namespaces\n");
			netns_name[0] = '\0';
			return -1;
		}
	}
	launcher[0] = "/bin/sh";
	launcher[1] = NETNS_SH;
	launcher[2] = "exec-host";
	launcher[3] = netns_name;
	launcher[4] = strdup(resolv); /* kept for the run */
	launcher[5] = NULL;
	harness_set_launcher(launcher);
	return 0;
}

static void
netns_down(void)
{
	const char *down[] = { "sh", NETNS_SH, "down", netns_name, NULL };

	if (!netns_name[0])
		return;
	harness_set_launcher(NULL);
	(void)run(down, NULL, 30000);
	free((char *)launcher[4]);
	netns_name[0] = '\0';
}

/* Starts the daemon for mode on a free port (which can be taken between finding it and binding
 * it: then again). Returns the port, or -1. */
static int
start_daemon(struct daemon_proc *p, const char *mode, const char *token_file, const char *cert,
             const char *key)
{
	for (int i = 0; i < START_TRIES; i++) {
		_cleanup_free_ char *listen = NULL;
		int port = harness_free_port(), r = -1;

		listen = port > 0 ? strdup_printf("127.0.0.1:%d", port) : NULL;
		_cleanup_free_ char *policy = in_dir("policy.yaml");

		if (netns_name[0]) {
			/* in its own network namespace: reached over its unix socket */
			const char *args[] = { "--egress", "on", "--policy", policy, NULL };
			r = harness_start_vm(p, args, NULL);
		} else if (listen && streq(mode, "qemu")) {
			const char *args[] = { "--listen", listen,     "--token-file",
				               token_file, "--policy", policy,
				               NULL };
			r = harness_start_vm(p, args, NULL);
		} else if (listen && streq(mode, "tls")) {
			const char *args[] = { "--listen",  listen,       "--token-file",
				               token_file,  "--tls-cert", cert,
				               "--tls-key", key,          "--policy",
				               policy,      NULL };
			r = harness_start(p, harness_binary("SANDBOXD_FAKE"), args, NULL);
		} else if (listen) {
			const char *args[] = { "--listen", listen,     "--token-file",
				               token_file, "--policy", policy,
				               NULL };
			r = harness_start(p, harness_binary("SANDBOXD_FAKE"), args, NULL);
		}
		if (r == 0)
			return port;
		harness_cleanup(p);
		*p = (struct daemon_proc){ 0 };
	}
	return -1;
}

int
main(int argc, char **argv)
{
	_cleanup_free_ char *token_file = NULL, *tcp = NULL, *unix_ep = NULL;
	_cleanup_free_ char *cert = NULL, *key = NULL, *ca = NULL;
	struct daemon_proc p = { 0 };
	const char *mode;
	char token[33];
	bool tls, qemu, egress_off;
	int r, failed = 0, port;

	if (argc != 3 ||
	    (!streq(argv[2], "plain") && !streq(argv[2], "tls") && !streq(argv[2], "qemu"))) {
		fprintf(stderr, "usage: conformance-runner CONFORMANCE_BINARY plain|tls|qemu\n");
		return 2;
	}
	mode = argv[2];
	tls = streq(mode, "tls");
	qemu = streq(mode, "qemu");
	/* before anything is made: these exit 77 (skip) when the test cannot run */
	(void)harness_binary(qemu ? "SANDBOXD" : "SANDBOXD_FAKE");
	if (qemu)
		(void)harness_vm_bundle();
	if (harness_tmpdir(dir, sizeof(dir)) < 0) {
		fprintf(stderr, "runner: cannot make a temporary directory: %m\n");
		return 1;
	}
	token_file = in_dir("token");
	if (random_hex(token, 16) < 0 || write_file("token", token) < 0) {
		remove_dir();
		return 1;
	}
	if (tls) {
		r = make_certs();
		if (r != 0) {
			remove_dir();
			return r == 77 ? 77 : 1;
		}
		cert = in_dir("server.pem");
		key = in_dir("server.key");
		ca = in_dir("ca.pem");
	}
	if (write_file("policy.yaml", tls ? tls_policy : qemu ? qemu_policy : plain_policy) < 0) {
		remove_dir();
		return 1;
	}
	if (qemu && netns_up() < 0) {
		remove_dir();
		return 1;
	}
	egress_off = qemu && !netns_name[0];
	port = start_daemon(&p, mode, token_file, cert, key);
	if (port < 0) {
		fprintf(stderr, "runner: the daemon (%s) did not start\n", mode);
		netns_down();
		remove_dir();
		return 1;
	}
	tcp = strdup_printf("%s://127.0.0.1:%d", tls ? "https" : "http", port);
	unix_ep = strdup_printf("unix://%s", p.sock);
	if (!tcp || !unix_ep) {
		failed = 1;
	} else if (tls) {
		failed |= run_suite(argv[1], tcp, token, ca, SUITE_TIMEOUT_MS) != 0;
	} else if (qemu && netns_name[0]) {
		/* once, over the unix socket (its TCP would be in its namespace) */
		failed |= run_suite(argv[1], unix_ep, NULL, NULL, SUITE_VM_TIMEOUT_MS) != 0;
	} else if (qemu) {
		/* once, over TCP: every boot costs seconds */
		failed |= run_suite(argv[1], tcp, token, NULL, SUITE_VM_TIMEOUT_MS) != 0;
	} else {
		failed |= run_suite(argv[1], tcp, token, NULL, SUITE_TIMEOUT_MS) != 0;
		failed |= run_suite(argv[1], unix_ep, NULL, NULL, SUITE_TIMEOUT_MS) != 0;
	}
	if (p.pid > 0 && delete_leftovers(&p) > 0)
		failed = 1;
	r = harness_stop(&p, SIGTERM);
	if (r != 0) {
		fprintf(stderr, "runner: the daemon exited with %d after SIGTERM\n", r);
		failed = 1;
	}
	if (qemu && harness_kill_vmms(p.state) > 0)
		failed = 1;
	if (failed) {
		fprintf(stderr, "---- daemon log (%s) ----\n", p.log);
		print_log(p.log);
	}
	harness_cleanup(&p);
	netns_down();
	remove_dir();
	if (!failed && egress_off) {
		/* the network cases skipped: without root and namespaces the run is not whole */
		fprintf(stderr, "skip: sandboxd ran with --egress off (not root or no network "
		                "namespaces): the network cases did not run\n");
		return 77;
	}
	return failed ? 1 : 0;
}
