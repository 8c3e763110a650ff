/* tunnel.c: see tunnel.h. One struct tunnel per connection: the guest's EXEC with PORT first,
 * then a subscription to its handle (OUTPUT to the client, acknowledged as the client's
 * connection drains; STDIN_ACK reopening the client's reads). The connection owns the tunnel:
 * its close hook ends it, and the memory goes after the current callbacks. A tunnel whose client
 * left while the guest was still connecting waits for the answer, to release what it opened. */
#include <stdlib.h>
#include <string.h>
#include "activity.h"
#include "agent.h"
#include "backend.h"
#include "buf.h"
#include "log.h"
#include "sandbox.h"
#include "sandboxd.h"
#include "server.h"
#include "tunnel.h"
#include "util.h"

/* The client's connection takes the guest's bytes while its backlog is below this: the guest's
 * bytes are acknowledged only then, so at most AP_WINDOW more can come. */
#define TUNNEL_ACK_LOW (64u << 10)

struct tunnel {
	struct loop *loop;
	struct conn *c; /* NULL once the client side is done with it (memory may wait for req) */
	struct sandbox *sb;
	struct sandbox_waiter seen;
	struct agent *agent; /* NULL once the session ended */
	struct agent_req *req;
	struct agent_sub sub;
	uint32_t handle; /* the guest's, once connected */
	uint16_t port;
	char *headers;
	struct buf prefix;
	void (*failed)(struct conn *c, uint16_t port, int err, const char *message, void *data);
	void (*opened)(struct conn *c, struct sandbox *sb, uint16_t port, void *data);
	void *data;
	uint64_t received, acked;        /* the guest's bytes: given to c, and acknowledged */
	uint64_t stdin_sent, stdin_took; /* the client's bytes: sent, and taken by the socket */
	struct loop_timer connect_timer; /* the guest's answer to the EXEC is due */
	bool subscribed;
};

static void
tunnel_free(void *data)
{
	struct tunnel *t = data;

	loop_timer_done(&t->connect_timer);
	free(t->headers);
	buf_free(&t->prefix);
	free(t);
}

static void
let_go_of_sandbox(struct tunnel *t)
{
	if (!t->sb)
		return;
	sandbox_remove_waiter(&t->seen);
	t->sb->tunnels--;
	t->sb = NULL;
}

/* Everything but a pending EXEC (whose answer may still open a socket to release). */
static void
tunnel_end(struct tunnel *t)
{
	if (!t->c)
		return;
	conn_on_close(t->c, NULL, NULL);
	conn_on_drain(t->c, NULL, NULL);
	conn_raw_on_eof(t->c, NULL, NULL);
	t->c = NULL;
	(void)loop_timer_arm(&t->connect_timer, 0, 0);
	buf_free(&t->prefix); /* a tunnel waiting for its answer holds no more than itself */
	let_go_of_sandbox(t);
	if (t->subscribed)
		agent_detach(t->agent, &t->sub);
	t->subscribed = false;
	if (t->agent && t->handle)
		(void)agent_release(t->agent, t->handle);
	if (t->req)
		return; /* on_result frees it */
	if (loop_defer(t->loop, tunnel_free, t) < 0)
		log_warning("tunnel: leaking one: out of memory");
}

static void
on_conn_closed(struct conn *c _unused_, void *data)
{
	tunnel_end(data);
}

/* Ends the tunnel from its side: what is queued for the client goes out, then the close. */
static void
close_client(struct tunnel *t)
{
	if (t->c)
		conn_raw_close(t->c); /* its close hook ends the tunnel */
}

static void
ack(struct tunnel *t)
{
	if (t->agent && t->subscribed && t->received > t->acked &&
	    agent_ack(t->agent, t->handle, t->received) >= 0)
		t->acked = t->received;
}

static void
on_output(struct agent_sub *s, int stream _unused_, uint64_t offset, const void *bytes, size_t len)
{
	struct tunnel *t = s->data;

	if (!t->c || conn_raw_write(t->c, bytes, len) < 0)
		return; /* closed: the close hook ended it */
	t->received = offset + len;
	if (t->c && conn_backlog(t->c) < TUNNEL_ACK_LOW)
		ack(t);
}

static void
on_drained(struct conn *c _unused_, void *data)
{
	ack(data);
}

/* The guest's socket read its end (code 0) or failed: half-close, or close. */
static void
on_exited(struct agent_sub *s, int code, uint64_t end _unused_)
{
	struct tunnel *t = s->data;

	if (!t->c)
		return;
	if (code == 0)
		conn_raw_shutdown(t->c); /* closes it when the client's side ended already */
	else
		conn_raw_close(t->c);
}

/* The guest's word, checked: never more than was sent, never less than it said before. */
static int
on_stdin_acked(struct agent_sub *s, uint64_t written)
{
	struct tunnel *t = s->data;

	if (written > t->stdin_sent || written < t->stdin_took)
		return -EPROTO;
	t->stdin_took = written;
	if (t->c && t->stdin_sent - t->stdin_took < TUNNEL_WINDOW / 2)
		conn_raw_resume(t->c);
	return 0;
}

static void
on_session_end(struct agent_sub *s)
{
	struct tunnel *t = s->data;

	t->subscribed = false;
	t->agent = NULL;
	close_client(t);
}

static int
to_guest(struct tunnel *t, const void *bytes, size_t len, bool eof)
{
	int r;

	if (!t->agent)
		return -ENOTCONN;
	r = agent_stdin(t->agent, t->handle, bytes, len, eof);
	/* counted even when only some of it was queued: the most the guest can acknowledge */
	t->stdin_sent += len;
	return r < 0 ? r : 0;
}

static void
on_client_data(struct conn *c, const void *bytes, size_t len, void *ctx)
{
	struct tunnel *t = ctx;

	if (to_guest(t, bytes, len, false) < 0) {
		conn_raw_close(c);
		return;
	}
	if (t->stdin_sent - t->stdin_took >= TUNNEL_WINDOW)
		conn_raw_pause(c); /* until the guest's socket takes some (on_stdin_acked) */
}

static void
on_client_eof(struct conn *c, void *data)
{
	struct tunnel *t = data;

	if (to_guest(t, NULL, 0, true) < 0)
		conn_raw_close(c);
}

static void
fail(struct tunnel *t, int err, const char *message)
{
	struct conn *c = t->c;

	tunnel_end(t);
	if (!c)
		return;
	if (t->failed)
		t->failed(c, t->port, err, message, t->data);
	else
		conn_reply(c, 502, "text/plain", "tunnel failed\n", 14, NULL);
}

static void
on_result(void *data, const struct agent_result *res)
{
	struct tunnel *t = data;
	int r;

	t->req = NULL;
	(void)loop_timer_arm(&t->connect_timer, 0, 0);
	if (!t->c) {
		/* the client left while the guest connected: let go of the socket */
		if (!res->err && res->pid && t->agent)
			(void)agent_release(t->agent, res->pid);
		if (loop_defer(t->loop, tunnel_free, t) < 0)
			log_warning("tunnel: leaking one: out of memory");
		return;
	}
	if (res->err) {
		if (res->err == ECONNRESET)
			t->agent = NULL;
		fail(t, res->err, res->message);
		return;
	}
	t->handle = res->pid;
	t->sub = (struct agent_sub){ .pid = t->handle,
		                     .output = on_output,
		                     .exited = on_exited,
		                     .stdin_acked = on_stdin_acked,
		                     .session_end = on_session_end,
		                     .data = t };
	list_init(&t->sub.link);
	if (agent_attach(t->agent, &t->sub, 0) < 0) {
		fail(t, EIO, "cannot follow the tunnel's bytes");
		return;
	}
	t->subscribed = true;
	conn_on_drain(t->c, on_drained, t);
	conn_raw_on_eof(t->c, on_client_eof, t);
	r = t->headers ? conn_upgrade(t->c, t->headers, on_client_data, t)
	               : conn_raw_begin(t->c, on_client_data, t);
	if (r < 0) {
		if (t->c) /* not closed: it was in no state to go raw */
			fail(t, EIO, "the connection cannot carry a tunnel");
		return;
	}
	log_debug("tunnel: open to port %u of sandbox '%s' (guest handle %u)", t->port,
	          t->sb ? t->sb->id : "?", t->handle);
	if (t->opened && t->sb)
		t->opened(t->c, t->sb, t->port, t->data);
	if (t->c && t->prefix.len && to_guest(t, t->prefix.data, t->prefix.len, false) < 0)
		close_client(t);
	buf_free(&t->prefix);
}

static void
on_sandbox(struct sandbox_waiter *w, struct sandbox *sb, bool gone)
{
	struct tunnel *t = w->data;

	if (gone) {
		sandbox_remove_waiter(w);
		t->sb = NULL; /* its memory goes: nothing to count down */
	} else if (sb->state == SANDBOX_RUNNING) {
		return;
	}
	let_go_of_sandbox(t);
	if (t->req)
		fail(t, EIO, "the sandbox stopped");
	else
		close_client(t);
}

/* The guest did not answer the EXEC in time: the client hears so, and the tunnel waits for the
 * answer (or the session's end) to let go of what the guest may still open. */
static void
on_connect_timeout(struct loop_timer *tm _unused_, void *data)
{
	struct tunnel *t = data;

	if (!t->req || !t->c)
		return;
	log_info("tunnel: the guest of sandbox '%s' did not connect to port %u within %u s",
	         t->sb ? t->sb->id : "?", t->port, TUNNEL_CONNECT_TIMEOUT_MS / 1000);
	fail(t, ETIMEDOUT, "the sandbox did not connect in time");
}

int
tunnel_start(struct sandboxd *d, struct conn *c, struct sandbox *sb, const struct tunnel_opts *o)
{
	struct backend *b = d->backend;
	struct agent *a = b && b->ops->agent ? b->ops->agent(b, sb) : NULL;
	struct tunnel *t;

	if (o->port == 0 || (o->prefix_len && !o->prefix) || o->prefix_len > TUNNEL_PREFIX_MAX)
		return -EINVAL;
	if (!a || !agent_ready(a) || sb->state != SANDBOX_RUNNING)
		return -ENOTCONN;
	/* a guest that answers slowly (or never) holds at most this many opens: each waits
	 * for its answer, even after its client left */
	if (agent_tunnels_pending(a) >= TUNNEL_PENDING_MAX)
		return -EBUSY;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	*t = (struct tunnel){ .loop = d->loop,
		              .c = c,
		              .sb = sb,
		              .agent = a,
		              .port = o->port,
		              .failed = o->failed,
		              .opened = o->opened,
		              .data = o->data };
	buf_init(&t->prefix, TUNNEL_PREFIX_MAX);
	t->connect_timer.src.fd = -1;
	if ((o->upgrade_headers && !(t->headers = strdup(o->upgrade_headers))) ||
	    (o->prefix_len && buf_append(&t->prefix, o->prefix, o->prefix_len) < 0) ||
	    loop_timer_init(d->loop, &t->connect_timer, on_connect_timeout, t) < 0 ||
	    loop_timer_arm(&t->connect_timer, TUNNEL_CONNECT_TIMEOUT_MS, 0) < 0 ||
	    !(t->req = agent_tunnel(a, o->port, on_result, t))) {
		/* nothing was sent: no answer can open a socket in the guest */
		tunnel_free(t);
		return -ENOMEM;
	}
	t->seen = (struct sandbox_waiter){ .fn = on_sandbox, .data = t };
	list_init(&t->seen.link);
	sandbox_add_waiter(sb, &t->seen);
	sb->tunnels++; /* activity while it is open */
	activity_request(sb);
	conn_on_close(c, on_conn_closed, t);
	return 0;
}
