/* fuzz-qmp.c: sandboxd's QMP client (daemon/vm/qmp.c): what a subverted QEMU's monitor sends,
 * through line splitting, JSON parsing, the greeting and negotiation, and answers to commands
 * under way. The first byte says how many commands (0 to 3) are under way once negotiation
 * is done; the rest is the monitor's bytes, fed in pieces whose sizes the data also picks. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fuzz.h"
#include "loop.h"
#include "qmp.h"
#include "util.h"

struct state {
	unsigned commands;
	unsigned answered;
	bool closed;
};

static void
done(void *data, const json_t *ret, const char *err)
{
	struct state *s = data;

	/* exactly one of an answer and an error */
	FUZZ_CHECK((ret == NULL) != (err == NULL));
	s->answered++;
}

static void
ready(struct qmp *q, void *data)
{
	struct state *s = data;

	for (unsigned i = 0; i < s->commands; i++)
		FUZZ_CHECK(qmp_execute(q, i ? "quit" : "query-status", NULL, done, s) == 0);
}

static void
closed(struct qmp *q, void *data)
{
	struct state *s = data;

	(void)q;
	FUZZ_CHECK(!s->closed); /* once */
	s->closed = true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct state s = { 0 };
	struct loop *loop = NULL;
	struct qmp *q = NULL;
	size_t off = 1;
	int sv[2];

	if (size < 1 || loop_new(&loop) < 0)
		return 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		loop_free(loop);
		return 0;
	}
	s.commands = data[0] % 4;
	if (qmp_new_fd(loop, sv[0], ready, closed, &s, &q) < 0) {
		close(sv[1]);
		loop_free(loop);
		return 0;
	}
	while (off < size && !s.closed) {
		/* a piece of 1 to 64 bytes, its size from the byte at its start */
		size_t n = MIN((size_t)(data[off] % 64) + 1, size - off);
		qmp_receive(q, data + off, n);
		off += n;
	}
	q = qmp_free(q);
	/* every command under way got its one answer or error by now */
	FUZZ_CHECK(s.answered <= s.commands);
	(void)loop_run_once(loop, 0);
	close(sv[1]);
	loop_free(loop);
	return 0;
}
