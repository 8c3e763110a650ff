/* tunnel.c: see tunnel.h. A connect to loopback normally ends at once, but one whose listener's
 * backlog is full waits for the SYN to be retried: it is watched on the loop, never waited for. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include "agent.h"
#include "agentproto.h"
#include "log.h"
#include "proc.h"
#include "tunnel.h"
#include "util.h"

struct pending {
	struct list_node node;
	struct agent *a;
	struct loop_source src;
	int fd;
	uint32_t chan;
	uint16_t port;
};

static void
pending_free(struct pending *t)
{
	loop_remove(&t->src);
	t->fd = safe_close(t->fd);
	list_remove(&t->node);
	if (loop_defer(t->a->loop, free, t) < 0)
		log_error("tunnel: out of memory, a record leaks");
}

/* The connect ended with err (0: connected): RESULT, and the socket goes to proc.c. */
static void
finish(struct agent *a, uint32_t chan, uint16_t port, int fd, int err)
{
	uint32_t id;
	int r;

	if (err) {
		_cleanup_free_ char *msg = strdup_printf("127.0.0.1:%u: %s", port, strerror(err));
		safe_close(fd);
		(void)agent_result(a, chan, err, msg);
		return;
	}
	r = proc_add_tunnel(a, fd, &id);
	if (r < 0) {
		(void)agent_result(a, chan, -r, NULL);
		return;
	}
	log_debug("tunnel %u: connected to 127.0.0.1:%u", id, port);
	(void)agent_result_u32(a, chan, AP_T_PID, id);
}

static void
on_connect(struct loop_source *src _unused_, uint32_t events _unused_, void *data)
{
	struct pending *t = data;
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	loop_remove(&t->src);
	finish(t->a, t->chan, t->port, TAKE_FD(t->fd), err);
	pending_free(t);
}

void
tunnel_exec(struct agent *a, uint32_t chan, uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
		                   .sin_port = htons(port),
		                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct pending *t;

	if (fd < 0) {
		(void)agent_result(a, chan, errno, "cannot make a socket");
		return;
	}
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0) {
		finish(a, chan, port, fd, 0);
		return;
	}
	if (errno != EINPROGRESS) {
		finish(a, chan, port, fd, errno);
		return;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		finish(a, chan, port, fd, ENOMEM);
		return;
	}
	*t = (struct pending){ .a = a, .fd = fd, .chan = chan, .port = port };
	t->src.fd = -1;
	list_push_back(&a->tunnels_pending, &t->node);
	if (loop_add(a->loop, &t->src, fd, EPOLLOUT, on_connect, t) < 0) {
		t->fd = -1;
		pending_free(t);
		finish(a, chan, port, fd, ENOMEM);
	}
}

void
tunnel_session_end(struct agent *a)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &a->tunnels_pending)
		pending_free(list_entry(n, struct pending, node));
}
