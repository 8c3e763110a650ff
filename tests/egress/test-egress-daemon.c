/* test-egress-daemon.c: sandboxd's side of egress as an operator meets it: a busy
 * proxy or DNS port stops startup naming the port and the flag to move it; with --egress off
 * the ceiling is none, the startup line and capabilities say so and an allowlist request is
 * refused, never served open; the egress worker runs without root, with no capabilities and
 * no_new_privs, and when it dies sandboxd starts it again and its sandboxes get DNS answers
 * as before. Root only, in namespaces of the test's own (netns.sh), never the machine's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "egressnet.h"
#include "harness.h"

static const char *netns; /* NAME of NAME-host */

static int
setup(void **state)
{
	const char *src;

	if (geteuid() != 0) {
		fprintf(stderr, "skip: egress needs root (taps, nftables, namespaces)\n");
		exit(77);
	}
	(void)harness_vm_bundle();
	src = getenv("SBX_EGRESS_SRC");
	netns = getenv("SBX_EGRESS_NETNS_DAEMON");
	if (!src || !netns) {
		fprintf(stderr, "skip: run through ctest (SBX_EGRESS_SRC)\n");
		exit(77);
	}
	/* no internet.py here: nobody answers at its DNS address, names resolve to nothing */
	return egressnet_up(src, netns);
}

static int
teardown(void **state)
{
	egressnet_down();
	return 0;
}

/* A program holding a port in NAME-host, as another service on the host would. */
static pid_t
hold_port(const char *proto, int port)
{
	char ns[64], code[300];
	pid_t pid;

	snprintf(ns, sizeof(ns), "%s-host", netns);
	snprintf(code, sizeof(code),
	         "import socket,time\n"
	         "s=socket.socket(socket.AF_INET,socket.%s)\n"
	         "s.bind(('0.0.0.0',%d))\n%s"
	         "print('held',flush=True)\ntime.sleep(120)\n",
	         strcmp(proto, "tcp") == 0 ? "SOCK_STREAM" : "SOCK_DGRAM", port,
	         strcmp(proto, "tcp") == 0 ? "s.listen()\n" : "");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execlp("ip", "ip", "netns", "exec", ns, "python3", "-c", code, (char *)NULL);
		_exit(127);
	}
	/* bound before the daemon starts: check from inside the namespace */
	for (int i = 0; i < 100; i++) {
		if (egressnet_sh("ip netns exec %s ss -H -l%sn 'sport = :%d' | grep -q .", ns,
		                 strcmp(proto, "tcp") == 0 ? "t" : "u", port))
			return pid;
		usleep(50000);
	}
	fail_msg("could not hold %s port %d", proto, port);
	return -1;
}

static void
release_port(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* sandboxd with args does not start, and its log says why. */
static void
expect_start_refused(const char *const *args, const char *why)
{
	struct daemon_proc p;

	assert_int_equal(harness_start_vm(&p, args, NULL), -1);
	assert_true(harness_file_contains(p.log, why));
	harness_cleanup(&p);
}

static void
test_busy_ports(void **state)
{
	struct daemon_proc p;
	const char *on[] = { "--egress", "on", NULL };
	pid_t holder;

	holder = hold_port("tcp", 3128);
	expect_start_refused(on, "egress: tcp port 3128 is already in use by another program; "
	                         "free it or move egress with --egress-proxy-port");
	{
		/* the control: the same start, the proxy moved */
		const char *moved[] = { "--egress", "on", "--egress-proxy-port", "3129", NULL };
		assert_int_equal(harness_start_vm(&p, moved, NULL), 0);
		assert_true(
		        harness_file_contains(p.log, "egress proxy tcp 3129, DNS stub udp 7353"));
		assert_int_equal(harness_stop(&p, SIGTERM), 0);
		harness_cleanup(&p);
	}
	release_port(holder);

	{
		/* another sandboxd with egress on the same host holds both ports: moving the
		 * proxy is not enough, its DNS port is refused too (never shared) */
		struct daemon_proc first;
		const char *moved[] = { "--egress", "on", "--egress-proxy-port", "3129", NULL };
		assert_int_equal(harness_start_vm(&first, on, NULL), 0);
		expect_start_refused(moved, "egress: udp port 7353 is already in use");
		assert_int_equal(harness_stop(&first, SIGTERM), 0);
		harness_cleanup(&first);
	}

	holder = hold_port("udp", 7353);
	expect_start_refused(on, "egress: udp port 7353 is already in use by another program; "
	                         "free it or move egress with --egress-dns-port");
	release_port(holder);
}

static void
test_egress_off(void **state)
{
	struct daemon_proc p;
	char policy[300];
	const char *off[] = { "--egress", "off", "--policy", policy, NULL };
	char *out = NULL, listing[300];
	json_t *caps, *def;
	FILE *f;

	/* a default network this sandboxd cannot give: lowered to none, lists and all */
	snprintf(policy, sizeof(policy), "%s/policy.yaml", egressnet.dir);
	f = fopen(policy, "w");
	assert_non_null(f);
	fputs("network:\n  default: {mode: allowlist, allow: [example.org], deny: "
	      "[evil.example]}\n",
	      f);
	fclose(f);

	/* the table an earlier start left (it outlives sandboxd, with the VMs) goes first */
	(void)egressnet_sh("ip netns exec %s-host nft delete table inet sandboxd 2>/dev/null",
	                   netns);
	assert_int_equal(harness_start_vm(&p, off, NULL), 0);
	assert_true(harness_file_contains(p.log,
	                                  "network ceiling none (--egress off: sandboxes get "
	                                  "no network)"));
	caps = harness_json(p.sock, "GET", "/v1/capabilities", NULL, 200);
	assert_string_equal(
	        json_string_value(json_object_get(json_object_get(caps, "network"), "ceiling")),
	        "none");
	assert_true(json_is_false(
	        json_object_get(json_object_get(caps, "capabilities"), "egress_allowlist")));
	def = json_object_get(json_object_get(caps, "network"), "default");
	assert_string_equal(json_string_value(json_object_get(def, "mode")), "none");
	assert_int_equal(json_array_size(json_object_get(def, "allow")), 0);
	assert_int_equal(json_array_size(json_object_get(def, "deny")), 0);
	json_decref(caps);
	/* refused, never served open; none is granted (the control) */
	assert_int_equal(harness_http(p.sock, "POST", "/v1/sandboxes?wait=false",
	                              "{\"network\":{\"mode\":\"allowlist\",\"allow\":"
	                              "[\"example.org\"]}}",
	                              &out),
	                 403);
	harness_expect_in(out, "above this server's ceiling 'none'");
	free(out);
	/* nothing of egress was set up: no table, no taps (each listing itself works: a grep
	 * that finds nothing because the listing failed would prove nothing) */
	assert_true(egressnet_sh("ip netns exec %s-host nft list tables >'%s/tables'", netns,
	                         egressnet.dir));
	snprintf(listing, sizeof(listing), "%s/tables", egressnet.dir);
	assert_false(harness_file_contains(listing, "sandboxd"));
	assert_true(egressnet_sh("ip -n %s-host -o link show >'%s/links'", netns, egressnet.dir));
	snprintf(listing, sizeof(listing), "%s/links", egressnet.dir);
	assert_true(harness_file_contains(listing, ": lo:"));
	assert_false(harness_file_contains(listing, ": sbx"));
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* Whether /proc/PID/status (no size to seek to: read whole) has line. */
static bool
status_has(pid_t pid, const char *line)
{
	char path[64], text[8192];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	return strstr(text, line) != NULL;
}

static void
expect_status(pid_t pid, const char *line)
{
	if (!status_has(pid, line))
		fail_msg("/proc/%d/status has no '%s'", (int)pid, line);
}

/* busybox nslookup: "Name: NAME" and "Address: ADDR" once answered (its first lines name the
 * server, 10.200.0.1 too), "** server can't find NAME: NXDOMAIN" when refused */
#define ALLOWED_RESOLVES "nslookup allowed.test | grep -A1 '^Name:' | grep -q 'Address: 10.200.'"
#define OTHER_RESOLVES "nslookup other.test | grep -q '^Name:'"
#define OTHER_NXDOMAIN "nslookup other.test | grep -q NXDOMAIN"

static int
run_exit_code(const char *sock, const char *id, const char *script)
{
	char path[128];
	json_t *body = json_pack("{s:[s,s,s]}", "argv", "sh", "-c", script), *res;
	char *text = json_dumps(body, JSON_COMPACT);
	int code;

	json_decref(body);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	res = harness_json(sock, "POST", path, text, 200);
	free(text);
	code = (int)json_integer_value(json_object_get(res, "exit_code"));
	json_decref(res);
	return code;
}

static void
test_worker_supervised(void **state)
{
	struct daemon_proc p;
	const char *on[] = { "--egress",         "on", "--metrics-listen", "127.0.0.1:9100",
		             "--keep-sandboxes", NULL };
	pid_t worker, again = 0;
	json_t *sb;
	char path[128], id[64];

	assert_int_equal(harness_start_vm(&p, on, NULL), 0);
	worker = egressnet_worker_of(p.pid);
	assert_true(worker > 0);
	/* without root: not uid 0, no capabilities, no way to gain any */
	assert_true(status_has(worker, "Uid:\t"));
	assert_false(status_has(worker, "Uid:\t0\t"));
	expect_status(worker, "CapEff:\t0000000000000000");
	expect_status(worker, "CapPrm:\t0000000000000000");
	expect_status(worker, "NoNewPrivs:\t1");

	sb = harness_json(p.sock, "POST", "/v1/sandboxes",
	                  "{\"network\":{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\"]}}",
	                  201);
	snprintf(id, sizeof(id), "%s", harness_str(sb, "id"));
	json_decref(sb);
	/* the stub answers an allowed name with the host side of the link, NXDOMAIN otherwise */
	assert_int_equal(run_exit_code(p.sock, id, ALLOWED_RESOLVES), 0);
	assert_int_not_equal(run_exit_code(p.sock, id, OTHER_RESOLVES), 0);
	assert_int_equal(run_exit_code(p.sock, id, OTHER_NXDOMAIN), 0);
	{
		/* counted in the metrics (served in sandboxd's namespace): each family's help
		 * once, the denied query among its samples */
		assert_true(egressnet_sh(
		        "cd '%s' && ip netns exec %s-host curl -sS http://127.0.0.1:9100/metrics "
		        ">m && "
		        "grep -q '^sandboxd_egress_enabled 1$' m && "
		        "[ \"$(grep -c '^# HELP sandboxd_egress_dns_queries_total ' m)\" = 1 ] && "
		        "grep -Eq '^sandboxd_egress_dns_queries_total[{]verdict=\"denied\"[}] "
		        "[1-9]' m && "
		        "grep -Eq '^sandboxd_egress_dns_queries_total[{]verdict=\"allowed\"[}] "
		        "[1-9]' m",
		        egressnet.dir, netns));
	}

	kill(worker, SIGKILL);
	/* the killed one may still be listed for a moment (SIGKILL is not instant): wait for
	 * another */
	for (int i = 0; i < 100; i++) {
		again = egressnet_worker_of(p.pid);
		if (again > 0 && again != worker)
			break;
		usleep(100000);
	}
	assert_true(again > 0 && again != worker);
	assert_true(harness_file_contains(p.log, "egress: the worker was killed by signal 9; "
	                                         "starting it again"));
	/* the new worker knows the running sandbox's policy */
	for (int i = 0; i < 20; i++) {
		if (run_exit_code(p.sock, id, ALLOWED_RESOLVES) == 0)
			break;
		usleep(200000);
	}
	assert_int_equal(run_exit_code(p.sock, id, ALLOWED_RESOLVES), 0);
	assert_int_not_equal(run_exit_code(p.sock, id, OTHER_RESOLVES), 0);

	/* the VM outlives sandboxd, and so does the worker's end: it goes with sandboxd */
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_equal(kill(again, 0), -1);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	{
		/* started again on another subnet: the running VM's guest sends from an address
		 * nothing knows any more, so it is not taken back (and not left running) */
		const char *moved[] = { "--egress",         "on",
			                "--egress-subnet",  "10.201.0.0/16",
			                "--accel",          "tcg",
			                "--default-image",  "busybox",
			                "--keep-sandboxes", NULL };
		json_t *got;
		assert_int_equal(harness_restart(&p, harness_binary("SANDBOXD"), moved, NULL), 0);
		assert_true(harness_file_contains(p.log, "its link is not in --egress-subnet any "
		                                         "more: not taken back"));
		got = harness_json(p.sock, "GET", path, NULL, 200);
		assert_string_equal(harness_str(got, "state"), "failed");
		json_decref(got);
	}
	assert_int_equal(harness_http(p.sock, "DELETE", path, NULL, NULL), 204);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_equal(harness_kill_vmms(p.state), 0);
	harness_cleanup(&p);
}

/* Where sandboxd would look for nft (tool_find: PATH, then these), space-separated, each
 * executable one once; and the first of them. */
static void
nft_paths(char *ret_all, size_t size, char *ret_first, size_t first_size)
{
	static const char fallback[] =
	        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	char dirs[4096], *save = NULL;

	ret_all[0] = ret_first[0] = '\0';
	snprintf(dirs, sizeof(dirs), "%s:%s", getenv("PATH") ?: "", fallback);
	for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char path[300];

		snprintf(path, sizeof(path), "%s/nft", d);
		if (*d != '/' || access(path, X_OK) < 0 || strstr(ret_all, path))
			continue;
		if (!ret_first[0])
			snprintf(ret_first, first_size, "%s", path);
		snprintf(ret_all + strlen(ret_all), size - strlen(ret_all), "%s%s",
		         ret_all[0] ? " " : "", path);
	}
	assert_true(ret_first[0]);
}

/* Fail closed at startup (R-E12): with egress on and no nft, there could be no table, so
 * sandboxd does not start: it says what is missing and what to do, and exits non-zero. The
 * control: the same machine with --egress off starts. */
static void
test_nft_missing(void **state)
{
	char all[1024], first[300], hide[1100];
	const char *env[] = { hide, NULL };
	const char *on[] = { "--egress", "on", NULL };
	const char *off[] = { "--egress", "off", NULL };
	struct daemon_proc p;

	nft_paths(all, sizeof(all), first, sizeof(first));
	snprintf(hide, sizeof(hide), "NETNS_HIDE=%s", all);
	assert_int_equal(harness_start_vm(&p, on, env), -1);
	assert_true(p.exit_status >= 0 && WIFEXITED(p.exit_status) &&
	            WEXITSTATUS(p.exit_status) != 0);
	assert_true(harness_file_contains(p.log, "egress: nft is not installed (apt-get install "
	                                         "nftables), or start with --egress off"));
	harness_cleanup(&p);

	assert_int_equal(harness_start_vm(&p, off, env), 0);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

/* Fail closed while nft fails (R-E12): an nft first in sandboxd's PATH that runs the real one
 * until a file says to fail (exit 1). Then sandboxd does not start; and once started, a
 * sandbox whose network needs the table is not started: it fails with the reason, and no VMM,
 * tap or rule of it is left. The controls: a sandbox with mode none (no rules to write) starts
 * meanwhile, and once nft works again the same create runs with its network. */
static void
test_nft_fails(void **state)
{
	char all[1024], real[300], bin[300], flag[300], path_env[1200], path[128];
	const char *env[] = { path_env, NULL };
	const char *on[] = { "--egress", "on", NULL };
	const char *allowlist = "{\"network\":{\"mode\":\"allowlist\",\"allow\":"
	                        "[\"allowed.test\"]}}";
	struct daemon_proc p;
	char links[300], id[64];
	json_t *sb;

	nft_paths(all, sizeof(all), real, sizeof(real));
	snprintf(bin, sizeof(bin), "%s/fakebin", egressnet.dir);
	snprintf(flag, sizeof(flag), "%s/nft-fails", egressnet.dir);
	assert_int_equal(mkdir(bin, 0755), 0);
	assert_true(egressnet_sh("printf '%%s\\n' '#!/bin/sh' \"if [ -e '%s' ]; then\" "
	                         "\"  echo 'Error: the test made nft fail' >&2; exit 1\" 'fi' "
	                         "\"exec '%s' \\\"\\$@\\\"\" >'%s/nft' && chmod 755 '%s/nft'",
	                         flag, real, bin, bin));
	snprintf(path_env, sizeof(path_env), "PATH=%s:%s", bin, getenv("PATH") ?: "/usr/bin:/bin");
	snprintf(links, sizeof(links), "%s/links", egressnet.dir);

	/* at startup: the empty table cannot be written, sandboxd does not serve */
	assert_true(egressnet_sh("touch '%s'", flag));
	assert_int_equal(harness_start_vm(&p, on, env), -1);
	assert_true(p.exit_status >= 0 && WIFEXITED(p.exit_status) &&
	            WEXITSTATUS(p.exit_status) != 0);
	assert_true(harness_file_contains(p.log, "egress: cannot write table inet sandboxd"));
	assert_true(harness_file_contains(p.log, "the test made nft fail"));
	harness_cleanup(&p);

	/* started while nft works (through the wrapper: the control that it is used) */
	assert_true(egressnet_sh("rm -f '%s'", flag));
	assert_int_equal(harness_start_vm(&p, on, env), 0);
	assert_true(egressnet_sh("touch '%s'", flag));

	/* a create whose allowlist needs the table: failed, nothing started */
	sb = harness_json_timeout(p.sock, "POST", "/v1/sandboxes", allowlist, 60000, 201);
	assert_string_equal(harness_str(sb, "state"), "failed");
	harness_expect_in(harness_str(sb, "reason"),
	                  "its network could not be set up on this host");
	json_decref(sb);
	assert_true(harness_file_contains(p.log, "not started: its network rules could not be "
	                                         "installed"));
	assert_int_equal(harness_kill_vmms(p.state), 0);
	assert_true(egressnet_sh("ip -n %s-host -o link show >'%s'", netns, links));
	assert_true(harness_file_contains(links, ": lo:"));
	assert_false(harness_file_contains(links, ": sbx"));

	/* the control: mode none needs no rule, and starts meanwhile */
	sb = harness_json_timeout(p.sock, "POST", "/v1/sandboxes",
	                          "{\"network\":{\"mode\":\"none\"}}", 120000, 201);
	assert_string_equal(harness_str(sb, "state"), "running");
	snprintf(id, sizeof(id), "%s", harness_str(sb, "id"));
	json_decref(sb);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(harness_http(p.sock, "DELETE", path, NULL, NULL), 204);

	/* nft works again: the same create runs, its network with it */
	assert_true(egressnet_sh("rm -f '%s'", flag));
	sb = harness_json_timeout(p.sock, "POST", "/v1/sandboxes", allowlist, 120000, 201);
	assert_string_equal(harness_str(sb, "state"), "running");
	snprintf(id, sizeof(id), "%s", harness_str(sb, "id"));
	json_decref(sb);
	assert_int_equal(run_exit_code(p.sock, id, ALLOWED_RESOLVES), 0);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	assert_int_equal(harness_http(p.sock, "DELETE", path, NULL, NULL), 204);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	assert_int_equal(harness_kill_vmms(p.state), 0);
	harness_cleanup(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_busy_ports),        cmocka_unit_test(test_egress_off),
		cmocka_unit_test(test_worker_supervised), cmocka_unit_test(test_nft_missing),
		cmocka_unit_test(test_nft_fails),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
