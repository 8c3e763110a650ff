/* test-hostile-agent.c: R-I7, the host <-> guest protocol treats the guest as hostile. A guest
 * agent that sends an oversized frame, a malformed one or bytes without end gets its channel
 * closed (the sandbox fails, saying it was a protocol violation), and the daemon's memory stays
 * flat: nothing the guest announces is allocated before it is checked.
 *
 * The guest here is tests/fake/hostile-agent, run by the fake backend in place of sandbox-guestd
 * (SANDBOXD_FAKE_AGENT): the real agent never breaks the protocol, so only a stand-in can.
 * Each sandbox's name tells it how to misbehave (see hostile-agent.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "harness.h"
#include "util.h"

#define WAIT_MS 60000
#define RSS_SLACK_KIB (16u << 10) /* what the daemon may grow by, its peak included */
/* a small quarantine under ASan, so that what the daemon frees does not stay resident */
#define ASAN_DAEMON "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:quarantine_size_mb=4"

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Creates a sandbox named name; its id in id. */
static void
create(const struct daemon_proc *p, const char *name, char *id, size_t id_size)
{
	char body[128];
	json_t *j;

	snprintf(body, sizeof(body), "{\"image\":\"busybox\",\"name\":\"%s\"}", name);
	j = harness_json(p->sock, "POST", "/v1/sandboxes", body, 201);
	snprintf(id, id_size, "%s", harness_str(j, "id"));
	json_decref(j);
}

/* Waits until sandbox id is in state want (running or failed); its reason (if any) in
 * reason. */
static void
wait_state(const struct daemon_proc *p, const char *id, const char *want, char *reason,
           size_t reason_size)
{
	char path[96];
	json_t *j;
	uint64_t deadline = now_ms() + WAIT_MS;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	for (;;) {
		j = harness_json(p->sock, "GET", path, NULL, 200);
		if (strcmp(harness_str(j, "state"), want) == 0) {
			snprintf(reason, reason_size, "%s",
			         harness_str(j, "reason") ? harness_str(j, "reason") : "");
			json_decref(j);
			return;
		}
		if (now_ms() > deadline)
			fail_msg("sandbox %s is %s, not %s", id, harness_str(j, "state"), want);
		json_decref(j);
		usleep(50000);
	}
}

static void
delete_sandbox(const struct daemon_proc *p, const char *id)
{
	char path[96];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	json_decref(harness_json(p->sock, "DELETE", path, NULL, 204));
}

/* Each misbehaviour after an honest handshake: a run makes the agent answer with it, the
 * channel is closed at once (the run is told the sandbox went away, the sandbox fails with
 * "protocol violation"); a flood before the handshake is read and dropped until the connect
 * deadline gives up on it. Meanwhile the agent pushed a header announcing 4 GiB and two floods
 * of 256 MiB, and the daemon's RSS, its peak included, grew by less than 16 MiB. */
static void
test_hostile_agent(void **state)
{
	static const char *const after_handshake[] = { "oversized", "overmax", "badtype", "badexit",
		                                       "endless" };
	const char *agent = getenv("HOSTILE_AGENT");
	struct daemon_proc p;
	char env_agent[600], id[64], reason[512], path[96], *resp = NULL;
	long idle, peak, now;
	int status;

	if (!agent || access(agent, X_OK) < 0) {
		harness_skip_case("HOSTILE_AGENT is not set to hostile-agent (run through ctest)");
		return;
	}
	snprintf(env_agent, sizeof(env_agent), "SANDBOXD_FAKE_AGENT=%s", agent);
	assert_int_equal(harness_start(&p, harness_binary("SANDBOXD_FAKE"), NULL,
	                               (const char *const[]){ env_agent, ASAN_DAEMON, NULL }),
	                 0);

	/* warm-up with an honest one: a sandbox, a refused run, its removal */
	create(&p, "honest", id, sizeof(id));
	wait_state(&p, id, "running", reason, sizeof(reason));
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
	assert_int_equal(harness_http(p.sock, "POST", path, "{\"argv\":[\"x\"]}", NULL), 400);
	delete_sandbox(&p, id);
	usleep(300000);
	idle = harness_proc_kib(p.pid, "VmRSS");
	if (idle < 0 || !harness_reset_peak(p.pid)) {
		harness_stop(&p, SIGTERM);
		harness_cleanup(&p);
		harness_skip_case("cannot read or reset the daemon's memory (/proc/PID)");
		return;
	}

	for (size_t i = 0; i < ARRAY_SIZE(after_handshake); i++) {
		create(&p, after_handshake[i], id, sizeof(id));
		wait_state(&p, id, "running", reason, sizeof(reason));
		snprintf(path, sizeof(path), "/v1/sandboxes/%s/run", id);
		status = harness_http(p.sock, "POST", path, "{\"argv\":[\"x\"]}", &resp);
		if (status != 503)
			fail_msg("%s: the run was answered %d, not 503: %s", after_handshake[i],
			         status, resp);
		free(resp);
		wait_state(&p, id, "failed", reason, sizeof(reason));
		if (!strstr(reason, "protocol violation"))
			fail_msg("%s: the sandbox failed, but not for a protocol violation: '%s'",
			         after_handshake[i], reason);
		now = harness_proc_kib(p.pid, "VmRSS");
		print_message("%s: '%s'; daemon RSS +%ld KiB\n", after_handshake[i], reason,
		              now - idle);
		delete_sandbox(&p, id);
	}

	/* a flood where the session should start: nothing of it is kept, and it never becomes
	 * a session */
	create(&p, "flood", id, sizeof(id));
	wait_state(&p, id, "failed", reason, sizeof(reason));
	harness_expect_in(reason, "did not complete the handshake in time");
	delete_sandbox(&p, id);

	peak = harness_proc_kib(p.pid, "VmHWM");
	now = harness_proc_kib(p.pid, "VmRSS");
	print_message("daemon RSS idle %ld KiB, peak %ld KiB (+%ld KiB), now %ld KiB\n", idle, peak,
	              peak - idle, now);
	assert_true(peak - idle < (long)RSS_SLACK_KIB);
	/* and it serves as before */
	assert_int_equal(harness_http(p.sock, "GET", "/v1/health", NULL, NULL), 200);
	assert_int_equal(harness_stop(&p, SIGTERM), 0);
	harness_cleanup(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile_agent),
	};

	signal(SIGPIPE, SIG_IGN);
	return harness_exit_code(cmocka_run_group_tests(tests, NULL, NULL));
}
