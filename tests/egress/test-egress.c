/* test-egress.c: egress enforcement end to end (docs/egress.md): the product sandboxd, as root with
 * --egress on, in a network namespace of the test's (netns.sh: NAME-host), its guests running
 * curl, openssl and busybox from a test image (mkimage.sh), against an "internet" in a second
 * namespace (internet.py in NAME-inet: HTTP, TLS with one certificate per name, a banner on
 * port 22 and a DNS server that logs every query). Every refusal is checked beside a request
 * that passes in the same test, and through what the user sees: the command's output, the
 * servers' logs, the nft drop counter and the sandbox's events. Two sandboxes, booted once, and
 * a third for `sandbox-cli agent claude` (its stub agent in the test image). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "base64.h"
#include "buf.h"
#include "egressnet.h"
#include "harness.h"
#include "util.h"

/* an install of the small test image and a boot under TCG take seconds; these bound them */
#define INSTALL_TIMEOUT_MS 120000
#define CREATE_TIMEOUT_MS 120000
/* sandboxd's API over TCP in NAME-host (--listen), which no guest may reach */
#define API_PORT "9443"
#define WEB "203.0.113.10"
#define UPSTREAM_DNS EGRESSNET_UPSTREAM_DNS
/* what each sandbox may reach: A the names the cases need (gist denied under the wildcard;
 * nowhere.test, which the internet's DNS does not know), B one name of its own */
#define A_NETWORK                                                                                  \
	"{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\",\"also.test\",\"*.hub.test\","        \
	"\"loopy.test\",\"nowhere.test\"],\"deny\":[\"gist.hub.test\"]}"
#define B_NETWORK "{\"mode\":\"allowlist\",\"allow\":[\"also.test\"]}"

static struct daemon_proc p;
static const char *src;   /* tests/egress */
static const char *netns; /* NAME of NAME-host and NAME-inet */
static json_t *sa, *sb;   /* the two sandboxes */
static char a_host[32];   /* A's link, host side: its gateway and DNS server */
static char a_guest[32], b_guest[32];

/* ---- the host side ---- */

#define host_sh egressnet_sh

/* A shell command's stdout and stderr (caller frees; "" when it could not run). */
static char *_printf_(1, 2) host_out(const char *fmt, ...)
{
	struct buf b = BUF_INIT(1u << 20);
	char chunk[4096], *cmd, *full;
	va_list ap;
	size_t n;
	FILE *f;

	va_start(ap, fmt);
	if (vasprintf(&cmd, fmt, ap) < 0)
		cmd = NULL;
	va_end(ap);
	full = cmd ? strdup_printf("{ %s; } 2>&1", cmd) : NULL;
	f = full ? popen(full, "r") : NULL;
	while (f && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		if (buf_append(&b, chunk, n) < 0)
			break;
	if (f)
		pclose(f);
	free(cmd);
	free(full);
	if (buf_append(&b, "", 1) < 0)
		return strdup("");
	return buf_steal(&b);
}

/* The packets the table's counter has seen (nft list counter inet sandboxd NAME). */
static long long
counter(const char *name)
{
	char *out =
	        host_out("ip netns exec %s-host nft list counter inet sandboxd %s", netns, name);
	const char *pk = strstr(out, "packets ");
	long long n = -1;

	if (!pk || sscanf(pk, "packets %lld", &n) != 1)
		fail_msg("no counter %s in table inet sandboxd: %s", name, out);
	free(out);
	return n;
}

static bool
inet_log_has(const char *file, const char *needle)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s", egressnet.inet_dir, file);
	return harness_file_contains(path, needle);
}

/* ---- the API ---- */

static const char *
id_of(json_t *s)
{
	return harness_str(s, "id");
}

static json_t *
create(const char *network)
{
	char body[512];
	json_t *j;

	snprintf(body, sizeof(body), "{\"image\":\"egress\",\"network\":%s}", network);
	j = harness_json_timeout(p.sock, "POST", "/v1/sandboxes", body, CREATE_TIMEOUT_MS, 201);
	if (!j || strcmp(harness_str(j, "state"), "running") != 0)
		fail_msg("the sandbox did not boot: %s", j ? harness_str(j, "reason") : "?");
	return j;
}

static void
patch_network(json_t *s, const char *network)
{
	char path[128], body[512];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id_of(s));
	snprintf(body, sizeof(body), "{\"network\":%s}", network);
	json_decref(harness_json_timeout(p.sock, "PATCH", path, body, 30000, 200));
}

/* Runs `sh -c script` in the sandbox as its user, stderr into stdout, for at most
 * timeout_secs; returns the exit code and the output (caller frees). */
static int
run(json_t *s, const char *script, int timeout_secs, char **ret_out)
{
	char path[128], *body, *full = strdup_printf("exec 2>&1; %s", script);
	json_t *req = json_pack("{s:[s,s,s],s:i}", "argv", "sh", "-c", full, "timeout_secs",
	                        timeout_secs);
	struct buf b = BUF_INIT(16u << 20);
	const char *b64;
	json_t *r;
	int code;

	body = json_dumps(req, JSON_COMPACT);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id_of(s));
	r = harness_json_timeout(p.sock, "POST", path, body, (timeout_secs + 20) * 1000, 200);
	code = (int)json_integer_value(json_object_get(r, "exit_code"));
	b64 = harness_str(r, "stdout");
	assert_non_null(b64);
	assert_int_equal(base64_decode(&b, b64, strlen(b64)), 0);
	assert_int_equal(buf_append(&b, "", 1), 0);
	*ret_out = buf_steal(&b);
	json_decref(r);
	json_decref(req);
	free(body);
	free(full);
	return code;
}

/* run() for a script whose exit code does not matter; its output (caller frees). */
static char *
output_of(json_t *s, const char *script)
{
	char *out = NULL;

	(void)run(s, script, 30, &out);
	return out;
}

/* The sandbox's events as the event stream has them ({seq, type, data, audit, ...}: its
 * egress events with the proxy's whole account, via, addr, bytes each way and cut, which the
 * audit trail sums up), oldest first: a replay from the start, read for a second. A new
 * array. */
static json_t *
stream_events(json_t *s)
{
	int fd = harness_stream_open(p.sock, "GET", "/v1/events/stream?since=0", NULL);
	json_t *out = json_array();
	char *buf = NULL, *at;
	size_t len = 0;

	if (fd < 0)
		return out;
	(void)harness_stream_read(fd, 1000, NULL, &buf, &len);
	close(fd);
	/* one message a chunk: "event: TYPE\ndata: {...}\n\n" */
	for (at = buf; at && (at = strstr(at, "\ndata: ")); at++) {
		size_t n = strcspn(at + 7, "\n");
		json_t *ev = json_loadb(at + 7, n, 0, NULL);
		if (ev && strcmp(harness_str(ev, "sandbox_id") ?: "", id_of(s)) == 0)
			json_array_append(out, ev);
		json_decref(ev);
	}
	free(buf);
	return out;
}

/* The sandbox's last few egress events, one a line, for a failure's message (caller frees):
 * why sandboxd let something through or refused it. */
static char *
recent_egress(json_t *s)
{
	struct buf b = BUF_INIT(1u << 20);
	json_t *all = stream_events(s), *e;
	size_t i, n, shown = 0;

	n = json_array_size(all);
	for (i = n; i > 0 && shown < 4; i--) {
		e = json_array_get(all, i - 1);
		if (strncmp(harness_str(e, "type") ? harness_str(e, "type") : "", "egress.", 7) ==
		    0) {
			char *d = json_dumps(json_object_get(e, "data"), JSON_COMPACT);
			(void)buf_printf(&b, "  %s %s\n", harness_str(e, "type"), d ? d : "");
			free(d);
			shown++;
		}
	}
	json_decref(all);
	if (buf_append(&b, "", 1) < 0)
		return strdup("");
	return buf_steal(&b);
}

/* A failed expectation's message: built, then what it quoted freed, then failed with (a
 * failure jumps out of the test, past any free). */
static char failure[16384];

/* The script passes and says needle. */
static void
expect_pass(json_t *s, const char *script, const char *needle)
{
	char *out = NULL;
	int code = run(s, script, 30, &out);

	if (code != 0 || !strstr(out, needle)) {
		char *ev = recent_egress(s);
		snprintf(failure, sizeof(failure),
		         "`%s` in %s: expected exit 0 and '%s', got exit %d:\n%s\n"
		         "its last egress events, newest first:\n%s",
		         script, id_of(s), needle, code, out, ev);
		free(ev);
		free(out);
		fail_msg("%s", failure);
	}
	free(out);
}

/* The script fails, and never says forbidden. */
static void
expect_refused(json_t *s, const char *script, const char *forbidden)
{
	char *out = NULL;
	int code = run(s, script, 30, &out);

	if (code == 0 || (forbidden && strstr(out, forbidden))) {
		char *ev = recent_egress(s);
		snprintf(failure, sizeof(failure),
		         "`%s` in %s: expected a failure without '%s', got exit %d:\n%s\n"
		         "its last egress events, newest first:\n%s",
		         script, id_of(s), forbidden ? forbidden : "", code, out, ev);
		free(ev);
		free(out);
		fail_msg("%s", failure);
	}
	free(out);
}

/* What event() looks for besides type and name. */
struct want {
	int port;                /* > 0: this port */
	const char *via;         /* "tls", "http", "dns" */
	const char *reason_part; /* a part of the reason */
	bool cut;                /* cut: true */
	const char *addr;        /* the address dialled */
};

/* An egress event's audit record (GET …/events) sums up what the stream says: the same
 * name, port and reason, and the bytes both ways together. */
static void
check_audit_record(const json_t *e)
{
	const json_t *d = json_object_get(e, "data"), *rec = json_object_get(e, "audit");
	json_int_t bytes = json_integer_value(json_object_get(d, "bytes_out")) +
	                   json_integer_value(json_object_get(d, "bytes_in"));

	if (!json_is_object(rec) || json_object_size(rec) != 7 ||
	    !json_equal(json_object_get(rec, "name"), json_object_get(d, "name")) ||
	    !json_equal(json_object_get(rec, "port"), json_object_get(d, "port")) ||
	    !json_equal(json_object_get(rec, "reason"), json_object_get(d, "reason")) ||
	    json_integer_value(json_object_get(rec, "bytes")) != bytes) {
		char *t = json_dumps(e, JSON_COMPACT);
		fail_msg("an egress event whose audit record does not sum it up: %s", t ? t : "");
	}
}

/* The first event of type whose data.name is name (NULL: null) and whose other fields are as
 * w says, waiting up to 10 s for it (an allowed connection's event comes when it ends). A new
 * reference to its data, or NULL. */
static json_t *
event(json_t *s, const char *type, const char *name, struct want w)
{
	for (int i = 0; i < 50; i++) {
		json_t *all = stream_events(s), *e, *found = NULL;
		size_t k;

		json_array_foreach (all, k, e) {
			json_t *d = json_object_get(e, "data");
			json_t *n = json_object_get(d, "name");
			const char *r = harness_str(d, "reason");
			if (found || strcmp(harness_str(e, "type"), type) != 0)
				continue;
			if (name ? !json_is_string(n) || strcmp(json_string_value(n), name) != 0
			         : !json_is_null(n))
				continue;
			if (w.port > 0 && json_integer_value(json_object_get(d, "port")) != w.port)
				continue;
			if (w.via &&
			    (!harness_str(d, "via") || strcmp(harness_str(d, "via"), w.via) != 0))
				continue;
			if (w.reason_part && (!r || !strstr(r, w.reason_part)))
				continue;
			if (w.cut && !json_is_true(json_object_get(d, "cut")))
				continue;
			if (w.addr &&
			    (!harness_str(d, "addr") || strcmp(harness_str(d, "addr"), w.addr)))
				continue;
			found = json_incref(d);
			check_audit_record(e);
		}
		json_decref(all);
		if (found)
			return found;
		usleep(200000);
	}
	return NULL;
}

static void
expect_event(json_t *s, const char *type, const char *name, struct want w)
{
	json_t *d = event(s, type, name, w), *all;
	char *text;

	if (d) {
		/* a refusal says why */
		if (strcmp(type, "egress.denied") == 0)
			assert_true(harness_str(d, "reason") && *harness_str(d, "reason"));
		json_decref(d);
		return;
	}
	all = stream_events(s);
	text = json_dumps(all, JSON_COMPACT);
	fail_msg("no %s event for %s (port %d, via %s, reason ~'%s'%s) in:\n%s", type,
	         name ? name : "no name", w.port, w.via ? w.via : "*",
	         w.reason_part ? w.reason_part : "*", w.cut ? ", cut" : "", text ? text : "");
}

/* One word of a sandbox's own view: its first line of output. */
static void
guest_word(json_t *s, const char *script, char *out, size_t size)
{
	char *o = NULL;

	assert_int_equal(run(s, script, 20, &o), 0);
	o[strcspn(o, "\n")] = '\0';
	if (!*o)
		fail_msg("`%s` said nothing", script);
	snprintf(out, size, "%s", o);
	free(o);
}

/* ---- setup ---- */

/* The internet answers from the host side, before sandboxd is in the way: the servers, the
 * certificates, and the DNS records through the resolv.conf sandboxd will have. */
static int
check_fixture(const char *resolv)
{
	char *checks[][2] = {
		{ strdup_printf("ip netns exec %s-host curl -sS --cacert %s/ca.pem --resolve "
		                "allowed.test:443:" WEB " https://allowed.test/fixture",
		                netns, egressnet.inet_dir),
		  "sni=allowed.test host=allowed.test path=/fixture" },
		{ strdup_printf("ip netns exec %s-host curl -sS -H 'Host: also.test' http://" WEB
		                "/fixture",
		                netns),
		  "host=also.test path=/fixture" },
		{ strdup_printf("ip netns exec %s-host curl -sS --max-time 3 telnet://" WEB
		                ":22 </dev/null",
		                netns),
		  "SSH-2.0-internet-test" },
		{ strdup_printf(
		          "sh '%s/netns.sh' exec-host %s '%s' python3 -c 'import socket, sys; "
		          "print(*[socket.gethostbyname(n) for n in sys.argv[1:]])' "
		          "api.hub.test loopy.test",
		          src, netns, resolv),
		  WEB " 127.0.0.1" },
	};
	int r = 0;

	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
		char *out = r == 0 && checks[i][0] ? host_out("%s", checks[i][0]) : NULL;
		if (r == 0 && (!out || !strstr(out, checks[i][1]))) {
			fprintf(stderr, "the test internet does not answer `%s`: %s\n",
			        checks[i][0] ? checks[i][0] : "", out ? out : "");
			r = -1;
		}
		free(out);
		free(checks[i][0]);
	}
	return r;
}

static int
write_text(const char *path, const char *text, mode_t mode)
{
	return write_file_atomic(path, text, strlen(text), mode);
}

static int
setup(void **state)
{
	static char policy[300], token[300], cert[340], key[340];
	const char *dir;
	const char *args[16];
	char tls[300];
	int n = 0;

	/* sandboxd: in NAME-host, resolving through the internet's DNS server, with a policy that
	 * lets requests ask for any name under the allowlist mode */
	if (egressnet_up(src, netns) < 0)
		return -1;
	dir = egressnet.dir;
	snprintf(policy, sizeof(policy), "%s/policy.yaml", dir);
	snprintf(token, sizeof(token), "%s/token", dir);
	snprintf(tls, sizeof(tls), "%s/tls", dir);
	snprintf(cert, sizeof(cert), "%s/server.pem", tls);
	snprintf(key, sizeof(key), "%s/server.key", tls);
	if (write_text(policy,
	               "network:\n"
	               "  default:\n"
	               "    mode: none\n"
	               "  ceiling: allowlist\n"
	               "  may_allow:\n"
	               "    - \"*\"\n",
	               0644) < 0 ||
	    write_text(token, "egress-test-token-0123456789abcdef\n", 0600) < 0 ||
	    mkdir(tls, 0700) < 0 || harness_make_certs(tls, "", false) < 0)
		return -1;
	if (egressnet_inet_start() < 0 || check_fixture(egressnet.resolv) < 0)
		return -1;
	args[n++] = "--egress";
	args[n++] = "on";
	args[n++] = "--policy";
	args[n++] = policy;
	args[n++] = "--listen";
	args[n++] = "0.0.0.0:" API_PORT;
	args[n++] = "--token-file";
	args[n++] = token;
	args[n++] = "--tls-cert";
	args[n++] = cert;
	args[n++] = "--tls-key";
	args[n++] = key;
	args[n] = NULL;
	if (harness_start_vm(&p, args, NULL) < 0)
		return -1;
	/* the image, built with this run's CA, installed from a local layout */
	return egressnet_install_image(&p, INSTALL_TIMEOUT_MS);
}

static int
teardown(void **state)
{
	int rc = 0;

	json_decref(sa);
	json_decref(sb);
	sa = sb = NULL;
	if (p.pid > 0) {
		if (harness_delete_all(p.sock) < 0)
			rc = -1;
		if (harness_stop(&p, SIGTERM) != 0) {
			fprintf(stderr, "sandboxd did not exit cleanly; its log: %s\n", p.log);
			host_sh("tail -50 '%s' >&2", p.log);
			rc = -1;
		}
	}
	harness_cleanup(&p);
	egressnet_down();
	return rc;
}

/* The sandboxes, booted at the first case that needs them, and what they see of their link. */
static void
need_sandboxes(void)
{
	static bool tried;

	if (tried) {
		if (!sa || !sb || !a_guest[0] || !b_guest[0])
			fail_msg("the sandboxes did not come up (the first case says why)");
		return;
	}
	tried = true;
	sa = create(A_NETWORK);
	sb = create(B_NETWORK);
	guest_word(sa, "sed -n 's/^nameserver //p' /etc/resolv.conf", a_host, sizeof(a_host));
	guest_word(sa, "ip -4 -o addr | sed -n '/ lo /d; s/.* inet \\([0-9.]*\\)\\/.*/\\1/p'",
	           a_guest, sizeof(a_guest));
	guest_word(sb, "ip -4 -o addr | sed -n '/ lo /d; s/.* inet \\([0-9.]*\\)\\/.*/\\1/p'",
	           b_guest, sizeof(b_guest));
	assert_string_not_equal(a_guest, b_guest);
}

/* ---- the cases ---- */

#define TLS(n) ((struct want){ .port = (n), .via = "tls" })
#define HTTP(n) ((struct want){ .port = (n), .via = "http" })
/* the guest's own DNS server: the host side of its link, from the resolv.conf the agent wrote */
#define GUEST_HOST "$(sed -n 's/^nameserver //p' /etc/resolv.conf)"

static void
test_allowed_name_passes(void **state)
{
	json_t *d;

	need_sandboxes();
	/* by name, TLS checked against the image's CA (the test's), and plain HTTP; the server
	 * saw the name the guest asked for, coming from the host side */
	expect_pass(sa, "curl -sS https://allowed.test/t1-tls",
	            "sni=allowed.test host=allowed.test path=/t1-tls");
	expect_pass(sa, "curl -sS http://allowed.test/t1-http", "host=allowed.test path=/t1-http");
	expect_pass(sa, "wget -q -O - http://also.test/t1-wget", "host=also.test path=/t1-wget");
	assert_true(
	        inet_log_has("http.log", "https allowed.test allowed.test /t1-tls 198.51.100.1"));
	assert_true(inet_log_has("http.log", "http - allowed.test /t1-http 198.51.100.1"));
	/* the guest's answer for the name is its own link's host side, not the server */
	expect_pass(sa, "nslookup allowed.test", a_host);
	/* recorded, with what went each way and where */
	d = event(sa, "egress.allowed", "allowed.test", TLS(443));
	if (!d)
		expect_event(sa, "egress.allowed", "allowed.test",
		             TLS(443)); /* says what there was */
	assert_true(json_integer_value(json_object_get(d, "bytes_out")) > 0);
	assert_true(json_integer_value(json_object_get(d, "bytes_in")) > 0);
	assert_string_equal(harness_str(d, "addr"), WEB);
	json_decref(d);
	expect_event(sa, "egress.allowed", "allowed.test", HTTP(80));
}

static void
test_unlisted_name_fails(void **state)
{
	need_sandboxes();
	expect_pass(sa, "curl -sS https://allowed.test/t2-ok", "sni=allowed.test");
	/* no answer for the name, and no way through when the guest brings an address itself
	 * (curl -k: nothing but the proxy can be what refuses) */
	expect_refused(sa, "nslookup other.test", "Name:");
	expect_refused(sa, "curl -sS -k https://other.test/t2-dns", "path=");
	expect_refused(
	        sa, "curl -sS -k --resolve other.test:443:" GUEST_HOST " https://other.test/t2-tls",
	        "path=");
	expect_refused(sa, "curl -sS -f -H 'Host: other.test' http://allowed.test/t2-http",
	               "path=");
	assert_false(inet_log_has("http.log", "/t2-dns"));
	assert_false(inet_log_has("http.log", "/t2-tls"));
	assert_false(inet_log_has("http.log", "/t2-http"));
	expect_event(sa, "egress.denied", "other.test", TLS(443));
	expect_event(sa, "egress.denied", "other.test", HTTP(80));
	expect_event(sa, "egress.denied", "other.test", (struct want){ .via = "dns" });
}

static void
test_denied_wins_over_wildcard(void **state)
{
	need_sandboxes();
	/* *.hub.test is allowed, gist.hub.test denied */
	expect_pass(sa, "curl -sS https://api.hub.test/t3-api",
	            "sni=api.hub.test host=api.hub.test");
	expect_pass(sa, "nslookup api.hub.test", a_host);
	expect_refused(sa, "nslookup gist.hub.test", "Name:");
	expect_refused(sa,
	               "curl -sS -k --resolve gist.hub.test:443:" GUEST_HOST
	               " https://gist.hub.test/t3-gist",
	               "path=");
	expect_refused(sa, "curl -sS -f -H 'Host: gist.hub.test' http://api.hub.test/t3-gist-http",
	               "path=");
	/* the wildcard is not the name itself */
	expect_refused(sa, "curl -sS -f -H 'Host: hub.test' http://api.hub.test/t3-hub", "path=");
	assert_false(inet_log_has("http.log", "/t3-gist"));
	assert_false(inet_log_has("http.log", "/t3-hub"));
	expect_event(sa, "egress.denied", "gist.hub.test", TLS(443));
	expect_event(sa, "egress.denied", "gist.hub.test", HTTP(80));
}

static void
test_sharing_an_address_grants_nothing(void **state)
{
	need_sandboxes();
	/* allowed.test, other.test and gist.hub.test are all 203.0.113.10: dialling it for the
	 * allowed name passes, for another name it does not */
	expect_pass(sa, "curl -sS --resolve allowed.test:443:" WEB " https://allowed.test/t4-ok",
	            "sni=allowed.test host=allowed.test path=/t4-ok");
	expect_pass(sa, "curl -sS -H 'Host: allowed.test' http://" WEB "/t4-ok-http",
	            "host=allowed.test path=/t4-ok-http");
	expect_refused(
	        sa, "curl -sS -k --resolve gist.hub.test:443:" WEB " https://gist.hub.test/t4-gist",
	        "path=");
	expect_refused(sa,
	               "curl -sS -k --resolve other.test:443:" WEB " https://other.test/t4-other",
	               "path=");
	expect_refused(sa, "curl -sS -f -H 'Host: other.test' http://" WEB "/t4-other-http",
	               "path=");
	/* an address is no name */
	expect_refused(sa, "curl -sS -f http://" WEB "/t4-ip", "path=");
	expect_refused(sa, "curl -sS -k https://" WEB "/t4-ip-tls", "path=");
	assert_false(inet_log_has("http.log", "/t4-gist"));
	assert_false(inet_log_has("http.log", "/t4-other"));
	assert_false(inet_log_has("http.log", "/t4-ip"));
}

static void
test_tls_without_sni_refused(void **state)
{
	static const char req[] = "printf 'GET /%s HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' | "
	                          "timeout 20 openssl s_client -quiet -connect " WEB ":443 %s";
	char *ok = strdup_printf(req, "t5-sni", "-servername allowed.test");
	char *bad = strdup_printf(req, "t5-nosni", "-noservername");

	need_sandboxes();
	expect_pass(sa, ok, "sni=allowed.test host=allowed.test path=/t5-sni");
	expect_refused(sa, bad, "path=");
	assert_false(inet_log_has("http.log", "/t5-nosni"));
	expect_event(sa, "egress.denied", NULL,
	             (struct want){ .port = 443, .via = "tls", .reason_part = "no hostname" });
	free(ok);
	free(bad);
}

static void
test_second_host_on_a_kept_alive_connection_refused(void **state)
{
	char *out;

	need_sandboxes();
	/* control: two requests for the allowed name on one connection both pass */
	out = output_of(sa,
	                "curl -sSv http://allowed.test/t6-one --next http://allowed.test/t6-two");
	harness_expect_in(out, "Re-using existing connection");
	harness_expect_in(out, "path=/t6-one");
	harness_expect_in(out, "path=/t6-two");
	free(out);
	/* the second request on the connection names another host: the first is answered,
	 * the second never reaches a server */
	out = output_of(sa, "curl -sSv http://allowed.test/t6-three --next -H 'Host: other.test' "
	                    "http://allowed.test/t6-four");
	harness_expect_in(out, "path=/t6-three");
	harness_expect_not_in(out, "path=/t6-four");
	free(out);
	/* the same with both requests in one write */
	out = output_of(sa, "printf 'GET /t6-five HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"
	                    "GET /t6-six HTTP/1.1\\r\\nHost: other.test\\r\\n\\r\\n' | "
	                    "nc -w 5 allowed.test 80");
	harness_expect_not_in(out, "path=/t6-six");
	free(out);
	assert_true(inet_log_has("http.log", "/t6-three"));
	assert_true(inet_log_has("http.log", "/t6-five")); /* nc got through at all */
	assert_false(inet_log_has("http.log", "/t6-four"));
	assert_false(inet_log_has("http.log", "/t6-six"));
	expect_event(sa, "egress.denied", "other.test", (struct want){ .port = 80, .via = "http" });
}

static void
test_direct_address_other_port_dropped(void **state)
{
	long long tap, fwd, tap2, fwd2;
	char *out, *cmd;

	need_sandboxes();
	/* something answers there, from the host side (which forwards, and the internet routes
	 * back to the guests); and the guest reaches that address on port 80 */
	out = host_out("ip netns exec %s-host curl -sS --max-time 3 telnet://" WEB ":22 "
	               "</dev/null",
	               netns);
	harness_expect_in(out, "SSH-2.0-internet-test");
	free(out);
	expect_pass(sa, "curl -sS -H 'Host: allowed.test' http://" WEB "/t7", "path=/t7");

	fwd = counter("forward_drop");
	expect_refused(sa, "nc -w 3 " WEB " 22 </dev/null", "SSH-2.0");
	fwd2 = counter("forward_drop");
	if (fwd2 <= fwd)
		fail_msg("forward_drop did not rise (%lld, then %lld)", fwd, fwd2);
	/* UDP to 443 (QUIC; here a DTLS hello) is no way out either */
	expect_refused(sa, "timeout 3 openssl s_client -dtls1_2 -connect " WEB ":443 </dev/null",
	               "CONNECTED");
	fwd = counter("forward_drop");
	if (fwd <= fwd2)
		fail_msg("forward_drop did not rise for UDP (%lld, then %lld)", fwd2, fwd);
	/* the host's own other ports: dropped at its door (no refusal comes back either) */
	tap = counter("tap_drop");
	cmd = strdup_printf("nc -w 3 %s 22 </dev/null && false", a_host);
	expect_refused(sa, cmd, NULL);
	free(cmd);
	tap2 = counter("tap_drop");
	if (tap2 <= tap)
		fail_msg("tap_drop did not rise (%lld, then %lld)", tap, tap2);
}

static void
test_dns_elsewhere_times_out(void **state)
{
	char *line, *out = NULL;
	int code;

	need_sandboxes();
	line = strdup_printf("Address: %s", a_host);
	expect_pass(sa, "nslookup allowed.test", line);
	free(line);
	/* the internet's DNS server answers the host side (check_fixture); from the guest no
	 * answer comes, from it or anyone (any other udp/53 is dropped), and nothing of
	 * the guest's got there */
	code = run(sa, "timeout 10 nslookup allowed.test " UPSTREAM_DNS, 30, &out);
	harness_expect_not_in(out, "Address: " WEB);
	line = strdup_printf("%s ", a_guest);
	assert_false(inet_log_has("dns.log", line));
	free(line);
	if (code == 0) {
		snprintf(failure, sizeof(failure),
		         "nslookup allowed.test " UPSTREAM_DNS
		         " was answered (by sandboxd's stub?) "
		         "instead of timing out:\n%s",
		         out);
		free(out);
		fail_msg("%s", failure);
	}
	free(out);
}

static void
test_random_name_nxdomain_never_forwarded(void **state)
{
	char name[64], *cmd, *out;

	need_sandboxes();
	snprintf(name, sizeof(name), "r%08lx%04x.test", (unsigned long)time(NULL),
	         (unsigned)getpid() & 0xffff);
	/* control: a connection by an allowed name has the worker look it up upstream, and
	 * the log shows it */
	expect_pass(sa, "curl -sS https://also.test/t9", "sni=also.test");
	assert_true(inet_log_has("dns.log", " also.test 1"));
	cmd = strdup_printf("nslookup %s", name);
	out = output_of(sa, cmd);
	harness_expect_in(out, "NXDOMAIN");
	harness_expect_not_in(out, "Name:");
	free(out);
	free(cmd);
	cmd = strdup_printf("curl -sS http://%s/t9", name);
	expect_refused(sa, cmd, "path=");
	free(cmd);
	/* the stub answered from the policy alone */
	sleep(1);
	assert_false(inet_log_has("dns.log", name));
	expect_event(sa, "egress.denied", name, (struct want){ .via = "dns" });
}

static void
test_guest_cannot_reach_proxy_host_or_another_sandbox(void **state)
{
	long long before, after;
	char *cmd, *out, path[128];

	need_sandboxes();
	expect_pass(sa, "curl -sS http://allowed.test/t10", "path=/t10");
	/* the proxy's port itself */
	cmd = strdup_printf("curl -sS --connect-timeout 4 -H 'Host: allowed.test' "
	                    "http://%s:3128/t10-proxy",
	                    a_host);
	expect_refused(sa, cmd, "path=");
	free(cmd);
	/* sandboxd's API port: it answers on that address from the host side, not the guest */
	out = host_out("ip netns exec %s-host curl -sS -k -o /dev/null -w '%%{http_code}' "
	               "https://%s:" API_PORT "/v1/health",
	               netns, a_host);
	if (strlen(out) != 3 || out[0] == '0')
		fail_msg("sandboxd's API does not answer on %s:%s from the host side: %s", a_host,
		         API_PORT, out);
	free(out);
	cmd = strdup_printf("curl -sS -k --connect-timeout 4 -o /dev/null -w 'HTTP %%{http_code}' "
	                    "https://%s:" API_PORT "/v1/health",
	                    a_host);
	expect_refused(sa, cmd, "HTTP 2");
	free(cmd);
	/* nor can other machines: from the internet's side, sandboxd's API port on the host
	 * answers, its proxy port does not */
	out = host_out("ip netns exec %s-inet curl -sS -k -o /dev/null -w '%%{http_code}' "
	               "https://198.51.100.1:" API_PORT "/v1/health",
	               netns);
	if (strlen(out) != 3 || out[0] == '0')
		fail_msg("sandboxd's API does not answer the internet side: %s", out);
	free(out);
	before = counter("port_drop");
	out = host_out("ip netns exec %s-inet curl -sS --connect-timeout 3 -H 'Host: allowed.test' "
	               "http://198.51.100.1:3128/t10-outside",
	               netns);
	harness_expect_not_in(out, "path=");
	free(out);
	after = counter("port_drop");
	if (after <= before)
		fail_msg("the proxy port from outside: port_drop went from %lld to %lld", before,
		         after);
	/* ICMP: the guest can send it (to itself), and what it sends the host is dropped */
	expect_pass(sa, "/usr/bin/ping -c 1 -W 2 127.0.0.1", "bytes from");
	before = counter("tap_drop");
	/* the image's ping by path: busybox sh would run its own applet, without the capability */
	cmd = strdup_printf("/usr/bin/ping -c 2 -W 2 %s", a_host);
	expect_refused(sa, cmd, "bytes from");
	free(cmd);
	after = counter("tap_drop");
	if (after < before + 2)
		fail_msg("two pings, and tap_drop went from %lld to %lld", before, after);

	/* another sandbox: B listens and hears itself on its address; A cannot reach it */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id_of(sb));
	json_decref(harness_json_timeout(
	        p.sock, "POST", path,
	        "{\"argv\":[\"sh\",\"-c\",\"while true; do echo hello-from-b | "
	        "nc -l -p 8080; done\"]}",
	        30000, 201));
	cmd = strdup_printf("sleep 1; nc -w 3 %s 8080 </dev/null", b_guest);
	expect_pass(sb, cmd, "hello-from-b");
	before = counter("forward_drop");
	expect_refused(sa, cmd, "hello-from-b");
	after = counter("forward_drop");
	if (after <= before)
		fail_msg("A to B: forward_drop went from %lld to %lld", before, after);
	free(cmd);
}

/* Waits up to secs for process pid of s to exit; its object (caller decrefs). */
static json_t *
wait_exited(json_t *s, int pid, int secs)
{
	char path[160];
	json_t *got = NULL;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%d", id_of(s), pid);
	for (int i = 0;; i++) {
		json_decref(got);
		got = harness_json_timeout(p.sock, "GET", path, NULL, 10000, 200);
		if (strcmp(harness_str(got, "state"), "exited") == 0 || i >= secs * 5)
			break;
		usleep(200000);
	}
	return got;
}

static void
test_live_tightening_cuts_open_connections(void **state)
{
	static const char tighter[] =
	        "{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\","
	        "\"*.hub.test\",\"loopy.test\"],\"deny\":[\"gist.hub.test\"]}";
	static const char slow[] = "{\"argv\":[\"sh\",\"-c\",\"curl -sS -o /dev/null -w "
	                           "'got %%{size_download}' http://%s/slow?secs=10\"]}";
	char path[160], *body, *out = NULL;
	json_t *proc, *got;
	int pid[2];

	need_sandboxes();
	expect_pass(sa, "curl -sS http://also.test/t11-before", "path=/t11-before");
	/* two slow downloads (10 s each): from also.test, which the update removes, and from
	 * allowed.test, which it keeps */
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id_of(sa));
	for (int i = 0; i < 2; i++) {
		body = strdup_printf(slow, i == 0 ? "also.test" : "allowed.test");
		proc = harness_json_timeout(p.sock, "POST", path, body, 30000, 201);
		pid[i] = (int)json_integer_value(json_object_get(proc, "pid"));
		json_decref(proc);
		free(body);
	}
	sleep(3);
	for (int i = 0; i < 2; i++) {
		got = wait_exited(sa, pid[i], 0);
		if (strcmp(harness_str(got, "state"), "running") != 0)
			fail_msg("download %d ended before the update", i);
		json_decref(got);
	}

	patch_network(sa, tighter);
	/* the connection to also.test is cut at once; the one to allowed.test goes on */
	got = wait_exited(sa, pid[0], 5);
	if (strcmp(harness_str(got, "state"), "exited") != 0)
		fail_msg("the download from also.test still runs 5 s after its name was removed");
	assert_int_not_equal(json_integer_value(json_object_get(got, "exit_code")), 0);
	json_decref(got);
	got = wait_exited(sa, pid[1], 0);
	assert_string_equal(harness_str(got, "state"), "running");
	json_decref(got);
	expect_event(sa, "egress.allowed", "also.test",
	             (struct want){ .port = 80, .via = "http", .cut = true });
	/* new connections to it fail; the name kept still passes */
	expect_refused(sa, "curl -sS -k https://also.test/t11-after", "path=");
	expect_refused(sa, "curl -sS -f -H 'Host: also.test' http://allowed.test/t11-after-http",
	               "path=");
	expect_pass(sa, "curl -sS https://allowed.test/t11-kept", "path=/t11-kept");
	/* the kept download ends whole: 64 bytes every 0.1 s for 10 s */
	got = wait_exited(sa, pid[1], 15);
	assert_string_equal(harness_str(got, "state"), "exited");
	assert_int_equal(json_integer_value(json_object_get(got, "exit_code")), 0);
	json_decref(got);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%d/output", id_of(sa), pid[1]);
	assert_int_equal(harness_http_timeout(p.sock, "GET", path, NULL, 10000, &out), 200);
	harness_expect_in(out, "Z290IDY0MDA="); /* base64 of "got 6400" */
	free(out);
	assert_false(inet_log_has("http.log", "/t11-after"));

	/* loosening again applies too */
	patch_network(sa, A_NETWORK);
	expect_pass(sa, "curl -sS https://also.test/t11-again", "path=/t11-again");
}

static void
test_allowed_name_at_a_refused_address(void **state)
{
	char records[400];

	need_sandboxes();
	expect_pass(sa, "curl -sS http://allowed.test/t12-ok", "path=/t12-ok");
	/* loopy.test is allowed, and the internet's DNS says 127.0.0.1 */
	expect_pass(sa, "nslookup loopy.test", a_host);
	expect_refused(sa, "curl -sS -f http://loopy.test/t12-loop", "path=");
	expect_refused(sa, "curl -sS -k https://loopy.test/t12-loop-tls", "path=");
	expect_event(sa, "egress.denied", "loopy.test",
	             (struct want){ .port = 80, .via = "http", .reason_part = "refused" });
	/* the host side's own address, and a private one, for an allowed name */
	snprintf(records, sizeof(records), "%s/records", egressnet.inet_dir);
	assert_true(host_sh("sed -i 's/^also.test .*/also.test 198.51.100.1/' '%s'", records));
	expect_refused(sa, "curl -sS -f http://also.test/t12-self", "path=");
	assert_true(host_sh("sed -i 's/^also.test .*/also.test 10.0.0.1/' '%s'", records));
	expect_refused(sa, "curl -sS -f --max-time 10 http://also.test/t12-private", "path=");
	/* and a new address is followed at the next connection (nothing is kept from before) */
	assert_true(host_sh("sed -i 's/^also.test .*/also.test 203.0.113.11/' '%s'", records));
	expect_pass(sa, "curl -sS http://also.test/t12-moved", "path=/t12-moved");
	expect_event(sa, "egress.allowed", "also.test",
	             (struct want){ .port = 80, .via = "http", .addr = "203.0.113.11" });
	assert_true(host_sh("sed -i 's/^also.test .*/also.test " WEB "/' '%s'", records));
	expect_pass(sa, "curl -sS http://also.test/t12-back", "path=/t12-back");
}

static void
test_mode_none_has_no_network(void **state)
{
	need_sandboxes();
	expect_pass(sb, "curl -sS https://also.test/t13-before", "sni=also.test host=also.test");
	/* B's list is its own, not A's */
	expect_refused(sb,
	               "curl -sS -k --resolve allowed.test:443:" WEB
	               " https://allowed.test/t13-a-list",
	               "path=");
	patch_network(sb, "{\"mode\":\"none\"}");
	expect_refused(sb, "curl -sS --max-time 8 https://also.test/t13-none", "path=");
	expect_refused(sb, "timeout 8 nslookup also.test", "Name:");
	assert_false(inet_log_has("http.log", "/t13-a-list"));
	assert_false(inet_log_has("http.log", "/t13-none"));
}

/* An allowed name that does not resolve (the internet's DNS answers NXDOMAIN) is a denial, and
 * the guest learns why at once: plain HTTP gets a 502 naming the name and the reason, TLS is
 * closed at once (curl's 35, never its timeout). The guest's own lookup is answered (the stub
 * answers from the policy); the proxy asked upstream. */
static void
test_allowed_name_that_does_not_resolve(void **state)
{
	char *out = NULL;
	int code;

	need_sandboxes();
	expect_pass(sa, "nslookup nowhere.test", a_host);
	expect_pass(sa, "curl -sS -w '\\nHTTP %{http_code}\\n' http://nowhere.test/t15-http",
	            "HTTP 502");
	expect_pass(sa, "curl -sS http://nowhere.test/t15-why",
	            "'nowhere.test': the name does not resolve");
	code = run(sa, "curl -sS --max-time 25 https://nowhere.test/t15-tls; echo rc=$?", 40, &out);
	if (code != 0 || !strstr(out, "rc=") || strstr(out, "rc=0\n") || strstr(out, "rc=28\n")) {
		snprintf(
		        failure, sizeof(failure),
		        "TLS to nowhere.test: expected a failure at once (not curl's timeout), got "
		        "exit %d:\n%s",
		        code, out);
		free(out);
		fail_msg("%s", failure);
	}
	free(out);
	expect_event(sa, "egress.denied", "nowhere.test",
	             (struct want){ .port = 80, .via = "http", .reason_part = "does not resolve" });
	expect_event(sa, "egress.denied", "nowhere.test",
	             (struct want){ .port = 443, .via = "tls", .reason_part = "does not resolve" });
	assert_true(inet_log_has("dns.log", " nowhere.test 1"));
	assert_false(inet_log_has("http.log", "/t15-"));
}

/* A name the policy refuses, reached all the same (the stub gives it no address, so the guest
 * brings one, as with curl's --resolve or its own /etc/hosts): plain HTTP is answered at once,
 * a 403 naming the name and the reason the sandbox's event records (not on the allow list; on
 * the deny list, under an allowed wildcard), never a closed connection to guess at; TLS is
 * closed at once (never curl's timeout). `sandbox-cli events` says it as text. Nothing reaches
 * the web. */
static void
test_denied_name_told_why(void **state)
{
	const char *cli = harness_binary("SANDBOX_CLI");
	char *out = NULL, path[128];
	json_t *sc;
	int code;

	need_sandboxes();
	/* a sandbox of its own, with A's network: A has done much already, and its VMM's memory
	 * under TCG is near its cgroup's limit by now */
	sc = create(A_NETWORK);
	/* one script, the guest's work kept small: the control (an allowed name passes, and the
	 * same server is there for the others), then each refusal */
	code = run(sc,
	           "curl -sS http://allowed.test/t17-ok; "
	           "curl -sS -i --resolve other.test:80:" WEB " http://other.test/t17-http; "
	           "echo; curl -sS -f --resolve other.test:80:" WEB " http://other.test/t17-f; "
	           "echo rc-f=$?; "
	           "curl -sS -w '\nHTTP %{http_code}\n' --resolve gist.hub.test:80:" WEB
	           " http://gist.hub.test/t17-deny; "
	           "curl -sS -H 'Host: other.test' http://allowed.test/t17-host; "
	           "curl -sS --max-time 25 --resolve other.test:443:" WEB
	           " https://other.test/t17-tls; echo rc-tls=$?",
	           60, &out);
	if (code != 0 || !strstr(out, "path=/t17-ok") ||
	    /* plain HTTP: a 403 at once, naming the name and the reason */
	    !strstr(out, "HTTP/1.1 403 Forbidden\r\n") ||
	    !strstr(out, "\r\n\r\nsandboxd egress: 'other.test': not on the allow list\n") ||
	    /* curl's -f, as scripts use it: an HTTP error, not a network one */
	    !strstr(out, "rc-f=22\n") ||
	    /* denied under an allowed wildcard */
	    !strstr(out, "sandboxd egress: 'gist.hub.test': on the deny list\n\nHTTP 403\n") ||
	    /* another Host on an allowed name's connection, its first request: refused alike */
	    !strstr(out, "sandboxd egress: 'other.test': not on the allow list\ncurl: ") ||
	    /* TLS: closed at once, a failure that is not curl's timeout (28) */
	    !strstr(out, "rc-tls=") || strstr(out, "rc-tls=0\n") || strstr(out, "rc-tls=28\n")) {
		char *ev = recent_egress(sc);
		snprintf(failure, sizeof(failure),
		         "refused names in %s: expected 403 pages with the reasons and TLS closed "
		         "at "
		         "once, got exit %d:\n%s\nits last egress events, newest first:\n%s",
		         id_of(sc), code, out, ev);
		free(ev);
		free(out);
		fail_msg("%s", failure);
	}
	free(out);
	assert_false(inet_log_has("http.log", "/t17-http"));
	assert_false(inet_log_has("http.log", "/t17-f"));
	assert_false(inet_log_has("http.log", "/t17-deny"));
	assert_false(inet_log_has("http.log", "/t17-host"));
	assert_false(inet_log_has("http.log", "/t17-tls"));
	expect_event(
	        sc, "egress.denied", "other.test",
	        (struct want){ .port = 80, .via = "http", .reason_part = "not on the allow list" });
	expect_event(sc, "egress.denied", "gist.hub.test",
	             (struct want){ .port = 80, .via = "http", .reason_part = "on the deny list" });
	expect_event(
	        sc, "egress.denied", "other.test",
	        (struct want){ .port = 443, .via = "tls", .reason_part = "not on the allow list" });

	/* the CLI's view of the same: one line each, as text, the reason the page gave */
	out = host_out("'%s' --endpoint 'unix://%s' events %s; echo \"rc=$?\"", cli, p.sock,
	               id_of(sc));
	harness_expect_in(out, "rc=0");
	harness_expect_in(out, "egress.denied");
	harness_expect_in(out, "other.test:80, 0 bytes: not on the allow list\n");
	harness_expect_in(out, "gist.hub.test:80, 0 bytes: on the deny list\n");
	harness_expect_in(out, "other.test:443, 0 bytes: not on the allow list\n");
	harness_expect_not_in(out, "\"reason\"");
	free(out);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id_of(sc));
	(void)harness_http(p.sock, "DELETE", path, NULL, NULL);
	json_decref(sc);
}

/* Fail closed (R-E12): while the egress worker is stopped (hung), and after it is killed until
 * sandboxd has started it again, nothing gets out: not the allowed name (its lookup is not
 * answered), not another name brought to an address by hand, not another port; none of it
 * reaches the internet. What waited for the proxy meanwhile is decided by the new worker, by
 * the policy. The control: before and after, the allowed name passes. */
static void
test_worker_down_fails_closed(void **state)
{
	long long fwd, fwd2;
	pid_t worker, again = 0;

	need_sandboxes();
	expect_pass(sa, "curl -sS http://allowed.test/t16-before", "path=/t16-before");
	worker = egressnet_worker_of(p.pid);
	assert_true(worker > 0);
	assert_int_equal(kill(worker, SIGSTOP), 0);

	expect_refused(sa, "timeout 5 nslookup allowed.test", "Name:");
	expect_refused(sa, "curl -sS --max-time 5 http://allowed.test/t16-down", "path=");
	expect_refused(
	        sa, "curl -sS --max-time 5 -H 'Host: down.other.test' http://" WEB "/t16-down-http",
	        "path=");
	expect_refused(sa,
	               "curl -sS -k --max-time 5 --resolve other.test:443:" WEB
	               " https://other.test/t16-down-tls",
	               "path=");
	fwd = counter("forward_drop");
	expect_refused(sa, "nc -w 3 " WEB " 22 </dev/null", "SSH-2.0");
	fwd2 = counter("forward_drop");
	if (fwd2 <= fwd)
		fail_msg("forward_drop did not rise with the worker stopped (%lld, then %lld)", fwd,
		         fwd2);

	/* killed: until sandboxd has started another, the same */
	assert_int_equal(kill(worker, SIGKILL), 0);
	expect_refused(sa,
	               "curl -sS -f --max-time 3 -H 'Host: restart.other.test' http://" WEB
	               "/t16-restart-http",
	               "path=");
	for (int i = 0; i < 100; i++) {
		again = egressnet_worker_of(p.pid);
		if (again > 0 && again != worker)
			break;
		usleep(100000);
	}
	if (again <= 0 || again == worker)
		fail_msg("sandboxd did not start the egress worker again");

	/* the control, and what got through meanwhile: nothing */
	expect_pass(sa, "curl -sS http://allowed.test/t16-after", "path=/t16-after");
	assert_false(inet_log_has("http.log", "/t16-down"));
	assert_false(inet_log_has("http.log", "/t16-restart"));
	/* the request that waited in the proxy's queue was read by the new worker, and refused */
	expect_event(sa, "egress.denied", "down.other.test",
	             (struct want){ .port = 80, .via = "http", .reason_part = "not on the allow" });
}

/* R-S7: a DNS name as hostile as a guest can make it (a newline and an erase-screen sequence,
 * which busybox's nslookup sends as they are) is refused and recorded without a name, and the
 * log lines about it are single lines: the worker's quotes what was asked with its bytes
 * escaped, sandboxd's says what it knows; no raw escape byte reaches the log. */
static void
test_hostile_name_quoted_in_log(void **state)
{
	_cleanup_free_ char *log = NULL;
	const char *line;
	size_t len;

	need_sandboxes();
	free(output_of(sa, "nslookup \"$(printf 'evil\\n\\033[2J.test')\""));
	expect_event(sa, "egress.denied", NULL,
	             (struct want){ .via = "dns", .reason_part = "not a host name" });
	assert_int_equal(read_file_max(p.log, 64u << 20, &log, &len), 0);
	line = strstr(log, "dns \"evil");
	if (!line)
		fail_msg("no log line quotes the name; the log: %s", p.log);
	harness_expect_in(line, "dns \"evil\\n\\x1b[2J.test\" port 53 (not a host name)\n");
	while (line > log && line[-1] != '\n')
		line--;
	assert_true(str_has_prefix(line, "sandboxd-egress: egress denied: sandbox '"));
	harness_expect_in(log, "': egress denied: dns '' port 53 (not a host name)\n");
	assert_null(memchr(log, '\x1b', len));
	assert_null(strstr(log, "\n[2J"));
}

/* The example of docs/egress.md, "In short": `sandbox-cli run --allow example.org --
 * curl -sI https://example.org` reaches the name it allows (here the test internet's
 * example.org), over the CLI and a fresh sandbox removed afterwards, and nothing else. */
static void
test_cli_run_allow(void **state)
{
	const char *cli = harness_binary("SANDBOX_CLI");
	char *out;

	out = host_out("timeout 180 '%s' --endpoint 'unix://%s' run --image egress --allow "
	               "example.org -- curl -sI https://example.org/t14-cli; echo \"rc=$?\"",
	               cli, p.sock);
	harness_expect_in(out, "HTTP/1.1 200");
	harness_expect_in(out, "Server: internet-test");
	harness_expect_in(out, "rc=0");
	free(out);
	assert_true(inet_log_has("http.log", "https example.org example.org /t14-cli"));
	/* the same run, another name: curl cannot resolve it (exit 6), nothing reaches the web */
	out = host_out("timeout 180 '%s' --endpoint 'unix://%s' run --image egress --allow "
	               "example.org -- curl -sI https://other.test/t14-other; echo \"rc=$?\"",
	               cli, p.sock);
	harness_expect_not_in(out, "HTTP/");
	harness_expect_in(out, "rc=6");
	free(out);
	assert_false(inet_log_has("http.log", "/t14-other"));
}

/* ---- a coding agent on a real VM ---- */

/* The credential the agent case passes: it must reach the agent's environment and show up
 * nowhere else (the CLI's output, an API answer, sandboxd's log). */
#define AGENT_KEY "sk-ant-egress-test-3b9d1f7c5a0e"

/* How many VMMs of this sandboxd run: processes whose environment carries its marker,
 * SANDBOXD_STATE_DIR=<its state directory> (as tests/vm/leftovers.sh finds them). */
static int
vmm_count(void)
{
	char *out = host_out("grep -lzxF 'SANDBOXD_STATE_DIR=%s' /proc/[0-9]*/environ "
	                     "2>/dev/null | wc -l",
	                     p.state);
	int n = (int)strtol(out, NULL, 10);

	free(out);
	return n;
}

/* Whether a VMM of sandbox id runs: a process whose arguments have "-name" then "ID,...". */
static bool
vmm_of(const char *id)
{
	char want[64];
	int want_len = snprintf(want, sizeof(want), "-name %s,", id);
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	want[5] = '\0'; /* the two arguments' separator */
	assert_non_null(d);
	while (!found && (de = readdir(d))) {
		char path[300], *cmdline = NULL;
		size_t n = 0;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		if (read_file_max(path, 1u << 20, &cmdline, &n) >= 0)
			found = memmem(cmdline, n, want, (size_t)want_len) != NULL;
		free(cmdline);
	}
	closedir(d);
	return found;
}

/* sandboxd's taps in NAME-host (sbxN: one per sandbox with a network). */
static int
tap_count(void)
{
	char *out = host_out("ip -n %s-host -o link show | grep -c ': sbx'", netns);
	int n = (int)strtol(out, NULL, 10);

	free(out);
	return n;
}

static int
sandbox_count(void)
{
	json_t *list = harness_json(p.sock, "GET", "/v1/sandboxes", NULL, 200);
	int n = (int)json_array_size(json_object_get(list, "sandboxes"));

	json_decref(list);
	return n;
}

static bool
json_array_has(const json_t *a, const char *s)
{
	size_t i;
	json_t *v;

	json_array_foreach (a, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
			return true;
	return false;
}

/* What process pid of sandbox id printed so far, decoded from …/processes/PID/output (a
 * replay from the oldest byte kept, then live: read for a second). Caller frees. */
static char *
process_output(const char *id, long pid)
{
	char path[160], *buf = NULL;
	struct buf text = BUF_INIT(1u << 20);
	size_t len = 0;
	const char *at;
	int fd;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%ld/output", id, pid);
	fd = harness_stream_open(p.sock, "GET", path, NULL);
	assert_true(fd >= 0);
	(void)harness_stream_read(fd, 1000, NULL, &buf, &len);
	close(fd);
	/* {"stream":"stdout","data":"<base64>"} a line; base64 has no quote */
	for (at = buf; at && (at = strstr(at, "\"data\":\"")); at += 8) {
		size_t n = strcspn(at + 8, "\"");
		assert_int_equal(base64_decode(&text, at + 8, n), 0);
	}
	free(buf);
	assert_int_equal(buf_append(&text, "", 1), 0);
	return buf_steal(&text);
}

/* The CLI against this sandboxd, with env ("NAME=VALUE" words, or "") before it: its stdout
 * and stderr, then "rc=N"; the transcript goes to the test's output (docs/cli.md has it). A
 * sanitizer report fails the test. Caller frees. */
static char *_printf_(2, 3) cli_run(const char *env, const char *fmt, ...)
{
	char *args = NULL, *out;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&args, fmt, ap) < 0)
		args = NULL;
	va_end(ap);
	assert_non_null(args);
	out = host_out("%s timeout 180 '%s' --endpoint 'unix://%s' %s; echo \"rc=$?\"", env,
	               harness_binary("SANDBOX_CLI"), p.sock, args);
	print_message("$ sandbox-cli %s\n%s", args, out);
	free(args);
	if (strstr(out, "Sanitizer") || strstr(out, "runtime error:"))
		fail_msg("sandbox-cli: sanitizer report:\n%s", out);
	return out;
}

/* `sandbox-cli agent claude --detach` (docs/cli.md, agent) on a real VM behind egress: the
 * image's /usr/bin/claude is a stub standing in for the real agent, as no model is reachable
 * here (mkimage.sh): it prints how it was started, whether ANTHROPIC_API_KEY reached it and
 * what api.anthropic.com answered, then waits. Without the credential (and no saved secret) the
 * command exits 2 naming it and nothing is booted; with it, the command prints the sandbox and
 * the agent's pid, the sandbox's allowlist holds api.anthropic.com (its DNS answers that name,
 * the test internet serves it, a name off the list does not resolve), its env names the key,
 * the agent is a kept TTY process running claude, and a delete leaves nothing behind. */
static void
test_cli_agent_claude(void **state)
{
	char id[32] = "", vms[400], *out, *text;
	int sandboxes, vmms, taps;
	json_t *j, *net, *agent, *proc = NULL;
	long pid = 0;
	size_t i;

	/* hermetic: nobody's own credential, and the operator has no saved secret */
	unsetenv("ANTHROPIC_API_KEY");
	unsetenv("CLAUDE_CODE_OAUTH_TOKEN");
	j = harness_json(p.sock, "GET", "/v1/secrets", NULL, 200);
	assert_int_equal(json_array_size(json_object_get(j, "secrets")), 0);
	json_decref(j);
	sandboxes = sandbox_count();
	vmms = vmm_count();
	taps = tap_count();

	/* no credential: refused before anything is made, naming the variable */
	out = cli_run("", "agent claude --image egress --detach");
	harness_expect_in(out, "claude needs ANTHROPIC_API_KEY");
	harness_expect_in(out, "rc=2");
	free(out);
	assert_int_equal(sandbox_count(), sandboxes);
	assert_int_equal(vmm_count(), vmms);
	assert_int_equal(tap_count(), taps);

	/* with it: the sandbox's id and the agent's pid */
	out = cli_run("ANTHROPIC_API_KEY=" AGENT_KEY, "agent claude --image egress --detach");
	harness_expect_in(out, "rc=0");
	harness_expect_not_in(out, AGENT_KEY);
	if (sscanf(out, "%31s %ld", id, &pid) != 2 || strncmp(id, "sbx_", 4) != 0 || pid <= 0)
		fail_msg("--detach should print the sandbox's id and the agent's pid:\n%s", out);
	free(out);
	/* the controls of the checks before and after: one sandbox, VMM and tap more */
	assert_int_equal(sandbox_count(), sandboxes + 1);
	assert_true(vmm_of(id));
	assert_int_equal(vmm_count(), vmms + 1);
	assert_int_equal(tap_count(), taps + 1);

	/* the sandbox as the user inspects it: allowlist, env names, the agent running */
	out = cli_run("", "inspect %s", id);
	harness_expect_not_in(out, AGENT_KEY);
	harness_expect_in(out, "rc=0");
	*strstr(out, "rc=0") = '\0';
	j = json_loads(out, 0, NULL);
	free(out);
	assert_non_null(j);
	assert_string_equal(harness_str(j, "state"), "running");
	net = json_object_get(j, "network");
	assert_string_equal(harness_str(net, "mode"), "allowlist");
	assert_true(json_array_has(json_object_get(net, "allow"), "api.anthropic.com"));
	assert_true(json_array_has(json_object_get(j, "env_names"), "ANTHROPIC_API_KEY"));
	agent = json_object_get(j, "agent");
	assert_string_equal(harness_str(agent, "name"), "claude");
	assert_string_equal(harness_str(agent, "state"), "running");
	assert_int_equal(json_integer_value(json_object_get(agent, "pid")), pid);
	assert_true(json_is_null(json_object_get(agent, "task")));
	json_decref(j);

	/* a kept TTY process running claude */
	snprintf(vms, sizeof(vms), "/v1/sandboxes/%s/processes", id);
	j = harness_json(p.sock, "GET", vms, NULL, 200);
	json_array_foreach (json_object_get(j, "processes"), i, net)
		if (json_integer_value(json_object_get(net, "pid")) == pid)
			proc = net;
	if (!proc)
		fail_msg("the agent's process %ld is not in the sandbox's list", pid);
	assert_true(json_is_true(json_object_get(proc, "tty")));
	assert_true(json_is_true(json_object_get(proc, "keep")));
	assert_string_equal(harness_str(proc, "state"), "running");
	assert_int_equal(json_array_size(json_object_get(proc, "argv")), 1);
	assert_string_equal(json_string_value(json_array_get(json_object_get(proc, "argv"), 0)),
	                    "claude");
	json_decref(j);
	free(cli_run("", "ps %s", id));

	/* what the stub printed: the key reached it, and its API host answered through egress
	 * (its curl waits up to 20 s) */
	text = NULL;
	for (int k = 0; k < 40; k++) {
		free(text);
		text = process_output(id, pid);
		if (strstr(text, "claude stub: api: "))
			break;
	}
	print_message("the agent's output (…/processes/%ld/output):\n%s", pid, text);
	/* interactive: no task, no arguments */
	harness_expect_in(text, "claude stub: argv: []");
	harness_expect_in(text, "claude stub: ANTHROPIC_API_KEY is set");
	harness_expect_in(text, "claude stub: api: sni=api.anthropic.com host=api.anthropic.com "
	                        "path=/v1/claude-stub");
	harness_expect_not_in(text, AGENT_KEY);
	free(text);
	assert_true(inet_log_has("http.log", "https api.anthropic.com api.anthropic.com "
	                                     "/v1/claude-stub"));

	/* in the guest: the allowed name resolves (to the link's host side, where the proxy
	 * is) and is served; a name off the list does not resolve, and nothing reaches it */
	out = cli_run("", "exec %s -- nslookup api.anthropic.com", id);
	harness_expect_in(out, "Name:\tapi.anthropic.com");
	harness_expect_in(out, "rc=0");
	free(out);
	out = cli_run("", "exec %s -- curl -sS https://api.anthropic.com/v1/models", id);
	harness_expect_in(out, "sni=api.anthropic.com host=api.anthropic.com path=/v1/models");
	harness_expect_in(out, "rc=0");
	free(out);
	out = cli_run("", "exec %s -- nslookup other.test", id);
	harness_expect_in(out, "NXDOMAIN");
	harness_expect_not_in(out, "rc=0");
	free(out);
	out = cli_run("", "exec %s -- curl -sS https://other.test/t15-agent", id);
	harness_expect_in(out, "Could not resolve host: other.test");
	harness_expect_in(out, "rc=6");
	free(out);
	assert_false(inet_log_has("http.log", "/t15-agent"));

	/* the key was never logged */
	assert_false(harness_file_contains(p.log, AGENT_KEY));

	/* deleted (sandbox-cli kill): terminated, and its VMM, tap and disks gone with it */
	out = cli_run("", "kill %s", id);
	harness_expect_in(out, "terminated");
	harness_expect_in(out, "rc=0");
	free(out);
	snprintf(vms, sizeof(vms), "/v1/sandboxes/%s", id);
	j = harness_json(p.sock, "GET", vms, NULL, 200);
	assert_string_equal(harness_str(j, "state"), "terminated");
	json_decref(j);
	assert_false(vmm_of(id));
	assert_int_equal(vmm_count(), vmms);
	assert_int_equal(tap_count(), taps);
	snprintf(vms, sizeof(vms), "%s/vms/%s", p.state, id);
	assert_int_equal(access(vms, F_OK), -1);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allowed_name_passes),
		cmocka_unit_test(test_unlisted_name_fails),
		cmocka_unit_test(test_denied_wins_over_wildcard),
		cmocka_unit_test(test_sharing_an_address_grants_nothing),
		cmocka_unit_test(test_tls_without_sni_refused),
		cmocka_unit_test(test_second_host_on_a_kept_alive_connection_refused),
		cmocka_unit_test(test_direct_address_other_port_dropped),
		cmocka_unit_test(test_dns_elsewhere_times_out),
		cmocka_unit_test(test_random_name_nxdomain_never_forwarded),
		cmocka_unit_test(test_guest_cannot_reach_proxy_host_or_another_sandbox),
		cmocka_unit_test(test_live_tightening_cuts_open_connections),
		cmocka_unit_test(test_allowed_name_at_a_refused_address),
		cmocka_unit_test(test_mode_none_has_no_network),
		cmocka_unit_test(test_allowed_name_that_does_not_resolve),
		cmocka_unit_test(test_denied_name_told_why),
		cmocka_unit_test(test_worker_down_fails_closed),
		cmocka_unit_test(test_hostile_name_quoted_in_log),
		cmocka_unit_test(test_cli_run_allow),
		cmocka_unit_test(test_cli_agent_claude),
	};

	if (geteuid() != 0) {
		fprintf(stderr, "skip: egress needs root (taps, nftables, network namespaces)\n");
		return 77;
	}
	harness_vm_bundle();
	harness_binary("SANDBOXD");
	harness_binary("SANDBOX_CLI");
	src = getenv("SBX_EGRESS_SRC");
	netns = getenv("SBX_EGRESS_NETNS");
	if (!src || !*src || !netns || !*netns) {
		fprintf(stderr, "skip: SBX_EGRESS_SRC or SBX_EGRESS_NETNS is not set (run through "
		                "ctest)\n");
		return 77;
	}
	if (!host_sh("for t in ip nft unshare python3 openssl curl umoci debugfs; do "
	             "command -v $t >/dev/null || { echo \"skip: $t is not installed\" >&2; "
	             "exit 1; }; done"))
		return 77;
	/* by hand: test-egress PATTERN runs only the cases whose names match it ('*' any) */
	if (argc > 1 && *argv[1])
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, setup, teardown);
}
