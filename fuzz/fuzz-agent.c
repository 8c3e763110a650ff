/* fuzz-agent.c: sandboxd's side of the guest protocol (daemon/vm/agent.c): bytes a hostile
 * guest sends, through the frame decoder, the session handshake, and the answers to requests
 * and subscriptions under way (RESULT, PROC, DIRENT, FILE_DATA, OUTPUT, DROPPED, EXIT). The
 * first byte picks the starting point: bit 0 set means the handshake is already done. */
#include "agent.h"
#include "fuzz.h"
#include "loop.h"
#include "util.h"

static void
on_ready(struct agent *a, bool mounted, const char *version, void *data)
{
	(void)a, (void)mounted, (void)version, (void)data;
}

static void
on_closed(struct agent *a, const char *reason, void *data)
{
	(void)a, (void)reason, (void)data;
}

static const struct agent_events events = { .ready = on_ready, .closed = on_closed };

static void
output(struct agent_sub *s, int stream, uint64_t offset, const void *bytes, size_t len)
{
	(void)s, (void)stream, (void)offset, (void)bytes, (void)len;
}

static void
dropped(struct agent_sub *s, uint64_t n)
{
	(void)s, (void)n;
}

static void
exited(struct agent_sub *s, int code, uint64_t end)
{
	(void)s, (void)code, (void)end;
}

static void
done(void *data, const struct agent_result *res)
{
	(void)data;
	/* what a guest says in a RESULT must be bounded before the API repeats it */
	if (res->message && strlen(res->message) > 1024)
		__builtin_trap();
}

static void
proc(void *data, const struct agent_proc_info *p)
{
	(void)data, (void)p;
}

static void
entry(void *data, const struct agent_dirent *e)
{
	(void)data;
	if (!e->name[0] || strchr(e->name, '/'))
		__builtin_trap();
}

/* a tunnel's: more than 1 MiB acknowledged is more than was sent */
static int
stdin_acked(struct agent_sub *s, uint64_t written)
{
	(void)s;
	return written > (1u << 20) ? -EPROTO : 0;
}

static void
chunk(void *data, const void *bytes, size_t len)
{
	(void)data, (void)bytes, (void)len;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct agent_hello hello = { .hostname = "fuzz" };
	struct agent_sub subs[3];
	struct loop *loop = NULL;
	struct agent *a = NULL;

	if (size < 1 || loop_new(&loop) < 0)
		return 0;
	if (agent_new(loop, "/nonexistent/agent.sock", &hello, &events, NULL, &a) < 0) {
		loop_free(loop);
		return 0;
	}
	agent_begin_unconnected(a, data[0] & 1);
	for (uint32_t i = 0; i < 3; i++) {
		subs[i] = (struct agent_sub){
			.pid = i + 1, .output = output, .dropped = dropped, .exited = exited
		};
		list_init(&subs[i].link);
		(void)agent_attach(a, &subs[i], 0);
	}
	subs[2].stdin_acked = stdin_acked; /* pid 3 is a tunnel */
	if (data[0] & 1) {
		/* requests 1..4 under way, as the API would have them */
		(void)agent_ps(a, proc, done, NULL);
		(void)agent_list(a, "/sandbox/home", entry, done, NULL);
		(void)agent_read_file(a, "/etc/hostname", 1024, chunk, done, NULL);
		(void)agent_ping(a, done, NULL);
	}
	(void)agent_receive(a, data + 1, size - 1);
	for (int i = 0; i < 3; i++)
		agent_detach(a, &subs[i]);
	agent_free(a);
	loop_free(loop);
	return 0;
}
