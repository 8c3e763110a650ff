/* test-qmp.c: the QMP client (daemon/vm/qmp.c) against a scripted monitor on the other end of
 * a socketpair. The real QEMU monitor is exercised by tests/vm (a stop with --stop-timeout 0
 * quits QEMU through it); here the monitor is scripted so that the answers a subverted QEMU
 * could give (answers out of turn, refusals, endless lines) can be produced at will. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "loop.h"
#include "qmp.h"
#include "util.h"

struct fixture {
	struct loop *loop;
	struct qmp *q;
	int peer; /* the monitor's end */
	int ready, closed, answered;
	char answer[128];
};

static void
on_ready(struct qmp *q _unused_, void *data)
{
	((struct fixture *)data)->ready++;
}

static void
on_closed(struct qmp *q _unused_, void *data)
{
	((struct fixture *)data)->closed++;
}

static void
on_done(void *data, const json_t *ret, const char *err)
{
	struct fixture *f = data;

	f->answered++;
	if (err)
		snprintf(f->answer, sizeof(f->answer), "error: %s", err);
	else
		snprintf(f->answer, sizeof(f->answer), "return: %s",
		         json_is_object(ret) ? "object" : "other");
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	int sv[2];

	assert_non_null(f);
	assert_int_equal(loop_new(&f->loop), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	f->peer = sv[1];
	assert_int_equal(qmp_new_fd(f->loop, sv[0], on_ready, on_closed, f, &f->q), 0);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	f->q = qmp_free(f->q);
	(void)loop_run_once(f->loop, 0); /* the deferred free */
	close(f->peer);
	loop_free(f->loop);
	free(f);
	return 0;
}

/* Lets the client run until nothing happens for a moment. */
static void
spin(struct fixture *f)
{
	for (int i = 0; i < 100; i++)
		if (loop_run_once(f->loop, 10) <= 0)
			break;
}

static void
monitor_says(struct fixture *f, const char *text)
{
	assert_int_equal(write(f->peer, text, strlen(text)), (ssize_t)strlen(text));
	spin(f);
}

/* What the client sent the monitor so far. */
static char *
monitor_heard(struct fixture *f)
{
	static char got[4096];
	ssize_t n = read(f->peer, got, sizeof(got) - 1);

	got[n > 0 ? n : 0] = '\0';
	return got;
}

#define GREETING "{\"QMP\": {\"version\": {}, \"capabilities\": [\"oob\"]}}\r\n"

static void
negotiate(struct fixture *f)
{
	monitor_says(f, GREETING);
	assert_string_equal(monitor_heard(f), "{\"execute\":\"qmp_capabilities\"}\n");
	assert_int_equal(f->ready, 0);
	monitor_says(f, "{\"return\": {}}\r\n");
	assert_int_equal(f->ready, 1);
}

static void
test_negotiation_then_commands_in_order(void **state)
{
	struct fixture *f = *state;

	/* nothing may be sent before the capabilities are negotiated */
	assert_int_equal(qmp_execute(f->q, "quit", NULL, on_done, f), -ENOTCONN);
	negotiate(f);
	assert_int_equal(qmp_execute(f->q, "query-status", NULL, on_done, f), 0);
	assert_int_equal(qmp_execute(f->q, "quit", NULL, on_done, f), 0);
	spin(f);
	assert_string_equal(monitor_heard(f),
	                    "{\"execute\":\"query-status\"}\n{\"execute\":\"quit\"}\n");
	/* an event between answers is skipped; answers arrive in the order of the commands,
	 * one line possibly split across reads */
	monitor_says(f, "{\"event\": \"STOP\", \"timestamp\": {}}\r\n{\"return\": {\"run");
	assert_int_equal(f->answered, 0);
	monitor_says(f, "ning\": true}}\r\n");
	assert_int_equal(f->answered, 1);
	assert_string_equal(f->answer, "return: object");
	monitor_says(f, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no\"}}\r\n");
	assert_int_equal(f->answered, 2);
	assert_string_equal(f->answer, "error: no");
	assert_int_equal(f->closed, 0);
	/* QEMU exits after a quit: the client notices the monitor closing */
	close(f->peer);
	f->peer = -1;
	spin(f);
	assert_int_equal(f->closed, 1);
}

static void
test_pending_commands_fail_when_monitor_goes(void **state)
{
	struct fixture *f = *state;

	negotiate(f);
	assert_int_equal(qmp_execute(f->q, "quit", NULL, on_done, f), 0);
	spin(f);
	close(f->peer);
	f->peer = -1;
	spin(f);
	assert_int_equal(f->answered, 1);
	assert_string_equal(f->answer, "error: QEMU closed the monitor");
	assert_int_equal(f->closed, 1);
	/* once closed, nothing more is taken */
	assert_int_equal(qmp_execute(f->q, "quit", NULL, on_done, f), -ENOTCONN);
}

/* What a subverted QEMU could send ends the connection, never the daemon. */
static void
test_protocol_violations_close(void **state)
{
	static const char *const cases[] = {
		"not json\n",
		"[1,2,3]\n",
		"{\"return\": {}}\n",                            /* an answer before the greeting */
		GREETING GREETING,                               /* a second greeting */
		GREETING "{\"error\": {}}\n",                    /* capabilities refused */
		GREETING "{\"return\": {}}\n{\"return\": {}}\n", /* an answer to no command */
		"{\"a\":1,\"a\":2}\n",                           /* duplicate keys */
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct fixture *f;
		assert_int_equal(setup((void **)&f), 0);
		monitor_says(f, cases[i]);
		if (f->closed != 1)
			fail_msg("case %zu was accepted: %s", i, cases[i]);
		assert_int_equal(qmp_execute(f->q, "quit", NULL, on_done, f), -ENOTCONN);
		teardown((void **)&f);
	}
}

static void
test_endless_line_is_bounded(void **state)
{
	struct fixture *f = *state;
	char chunk[65536];

	memset(chunk, ' ', sizeof(chunk));
	/* more than the 1 MiB a line may have, without a newline */
	for (int i = 0; i < 20 && !f->closed; i++) {
		ssize_t n = write(f->peer, chunk, sizeof(chunk));
		if (n < 0)
			break;
		spin(f);
	}
	assert_int_equal(f->closed, 1);
}

/* What the monitor read in one recvmsg: the bytes (into got) and the descriptor that came
 * with them, or -1. */
static int
monitor_heard_fd(struct fixture *f, char *got, size_t size)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = { .iov_base = got, .iov_len = size - 1 };
	struct msghdr msg = { .msg_iov = &iov,
		              .msg_iovlen = 1,
		              .msg_control = control.buf,
		              .msg_controllen = sizeof(control.buf) };
	struct cmsghdr *c;
	ssize_t n = recvmsg(f->peer, &msg, MSG_CMSG_CLOEXEC);
	int fd = -1;

	got[n > 0 ? n : 0] = '\0';
	c = CMSG_FIRSTHDR(&msg);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(fd));
	return fd;
}

/* getfd: the descriptor reaches the monitor with its command's bytes (not with those of the
 * command before it, which would hand QEMU the descriptor for the wrong command), and the
 * client keeps nothing of it afterwards. */
static void
test_descriptor_goes_with_its_command(void **state)
{
	struct fixture *f = *state;
	char got[4096];
	int pipefd[2], fd;
	struct stat a, b;

	assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
	assert_int_equal(qmp_execute_fd(f->q, "getfd", NULL, pipefd[1], on_done, f), -ENOTCONN);
	negotiate(f);
	assert_int_equal(qmp_execute(f->q, "stop", NULL, on_done, f), 0);
	assert_int_equal(qmp_execute_fd(f->q, "getfd", json_pack("{s:s}", "fdname", "st"),
	                                pipefd[1], on_done, f),
	                 0);
	/* one at a time */
	assert_int_equal(qmp_execute_fd(f->q, "getfd", NULL, pipefd[1], on_done, f), -EBUSY);
	spin(f);
	/* the kernel may hand both commands to one read: the descriptor comes with the read
	 * that holds getfd's bytes */
	fd = monitor_heard_fd(f, got, sizeof(got));
	if (fd < 0) {
		assert_string_equal(got, "{\"execute\":\"stop\"}\n");
		fd = monitor_heard_fd(f, got, sizeof(got));
		assert_true(fd >= 0);
		assert_string_equal(got, "{\"execute\":\"getfd\",\"arguments\":{\"fdname\":"
		                         "\"st\"}}\n");
	} else {
		assert_string_equal(got, "{\"execute\":\"stop\"}\n{\"execute\":\"getfd\","
		                         "\"arguments\":{\"fdname\":\"st\"}}\n");
	}
	/* the same pipe */
	assert_int_equal(fstat(fd, &a), 0);
	assert_int_equal(fstat(pipefd[1], &b), 0);
	assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
	close(fd);
	/* the caller's descriptor is still its own; the client's copy is gone: with the write
	 * ends closed, the read end sees EOF */
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], got, 1), 0);
	close(pipefd[0]);
	/* and the next one may go */
	assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
	assert_int_equal(qmp_execute_fd(f->q, "getfd", NULL, pipefd[0], on_done, f), 0);
	spin(f);
	fd = monitor_heard_fd(f, got, sizeof(got));
	assert_true(fd >= 0);
	close(fd);
	close(pipefd[0]);
	close(pipefd[1]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_negotiation_then_commands_in_order, setup,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_pending_commands_fail_when_monitor_goes, setup,
		                                teardown),
		cmocka_unit_test(test_protocol_violations_close),
		cmocka_unit_test_setup_teardown(test_endless_line_is_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_descriptor_goes_with_its_command, setup,
		                                teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
