/* qmp.c: see qmp.h. */
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "list.h"
#include "log.h"
#include "qmp.h"
#include "util.h"

#define LINE_MAX_BYTES (1u << 20)

struct pending {
	struct list_node link;
	qmp_done_fn done;
	void *data;
};

struct qmp {
	struct loop *loop;
	int fd;
	struct loop_source src;
	struct buf in, out;
	/* a descriptor to send (SCM_RIGHTS) with the byte of out at out_fd_at, or -1 */
	int out_fd;
	size_t out_fd_at;
	bool greeted;
	bool negotiated;
	struct list_node pending; /* answers come in order */
	void (*ready)(struct qmp *q, void *data);
	void (*closed)(struct qmp *q, void *data);
	void *data;
};

static void
end(struct qmp *q, const char *why)
{
	struct list_node *n, *tmp;

	if (q->fd < 0)
		return;
	log_debug("qmp: closing: %s", why);
	loop_remove(&q->src);
	q->fd = safe_close(q->fd);
	q->out_fd = safe_close(q->out_fd);
	LIST_FOREACH_SAFE (n, tmp, &q->pending) {
		struct pending *p = list_entry(n, struct pending, link);
		list_remove(&p->link);
		if (p->done)
			p->done(p->data, NULL, why);
		free(p);
	}
	if (q->closed)
		q->closed(q, q->data);
}

static void
set_interest(struct qmp *q)
{
	if (q->fd >= 0)
		(void)loop_modify(&q->src, EPOLLIN | (buf_avail(&q->out) ? EPOLLOUT : 0));
}

static void
on_line(struct qmp *q, const char *line, size_t len)
{
	json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *ret = NULL, *err = NULL;

	if (!json_is_object(j)) {
		json_decref(j);
		end(q, "unparsable answer");
		return;
	}
	if (json_object_get(j, "QMP")) {
		/* the greeting (once): leave capabilities negotiation */
		if (q->greeted) {
			json_decref(j);
			end(q, "a second greeting");
			return;
		}
		q->greeted = true;
		(void)buf_puts(&q->out, "{\"execute\":\"qmp_capabilities\"}\n");
		set_interest(q);
	} else if (json_object_get(j, "event")) {
		/* events are not used */
	} else if ((ret = json_object_get(j, "return")) || (err = json_object_get(j, "error"))) {
		if (!q->greeted) {
			json_decref(j);
			end(q, "an answer before the greeting");
			return;
		}
		if (!q->negotiated) {
			if (!ret) {
				json_decref(j);
				end(q, "capabilities negotiation refused");
				return;
			}
			q->negotiated = true;
			if (q->ready)
				q->ready(q, q->data);
		} else if (!list_empty(&q->pending)) {
			/* answers come in the order of the commands */
			struct pending *p = list_entry(q->pending.next, struct pending, link);
			const char *desc = NULL;
			list_remove(&p->link);
			if (!ret) {
				desc = json_string_value(json_object_get(err, "desc"));
				if (!desc)
					desc = "error";
			}
			if (p->done)
				p->done(p->data, ret, desc);
			free(p);
		} else {
			json_decref(j);
			end(q, "an answer to no command");
			return;
		}
	}
	json_decref(j);
}

/* Sends what is queued, as far as the socket takes it: the bytes before a descriptor's
 * command plainly, then that command's bytes with the descriptor attached (QEMU's monitor
 * keeps the descriptors that came with the last read, for getfd). */
static ssize_t
send_some(struct qmp *q)
{
	size_t len = buf_avail(&q->out);
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = { .iov_base = (void *)buf_head(&q->out), .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	ssize_t k;

	if (q->out_fd < 0)
		return send(q->fd, buf_head(&q->out), len, MSG_NOSIGNAL);
	if (q->out_fd_at > 0) {
		iov.iov_len = MIN(len, q->out_fd_at);
		k = send(q->fd, buf_head(&q->out), iov.iov_len, MSG_NOSIGNAL);
		if (k > 0)
			q->out_fd_at -= (size_t)k;
		return k;
	}
	memset(&control, 0, sizeof(control));
	msg.msg_control = control.buf;
	msg.msg_controllen = sizeof(control.buf);
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &q->out_fd, sizeof(int));
	k = sendmsg(q->fd, &msg, MSG_NOSIGNAL);
	if (k > 0) /* the descriptor went with the first byte */
		q->out_fd = safe_close(q->out_fd);
	return k;
}

static void
on_io(struct loop_source *src _unused_, uint32_t events, void *data)
{
	struct qmp *q = data;
	char chunk[16384];

	if (events & EPOLLOUT) {
		while (buf_avail(&q->out)) {
			ssize_t k = send_some(q);
			if (k < 0 && errno == EAGAIN)
				break;
			if (k <= 0) {
				end(q, "write failed");
				return;
			}
			buf_consume(&q->out, (size_t)k);
		}
		set_interest(q);
	}
	if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
		return;
	for (;;) {
		ssize_t k = read(q->fd, chunk, sizeof(chunk));
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (k <= 0) {
			end(q, "QEMU closed the monitor");
			return;
		}
		qmp_receive(q, chunk, (size_t)k);
		if (q->fd < 0)
			return;
	}
}

void
qmp_receive(struct qmp *q, const void *bytes, size_t len)
{
	char *nl;

	if (q->fd < 0)
		return;
	if (buf_append(&q->in, bytes, len) < 0) {
		end(q, "answer line too long");
		return;
	}
	while (q->fd >= 0 && (nl = memchr(buf_head(&q->in), '\n', buf_avail(&q->in)))) {
		size_t n = (size_t)(nl - buf_head(&q->in));
		on_line(q, buf_head(&q->in), n);
		if (q->fd >= 0)
			buf_consume(&q->in, n + 1);
	}
}

int
qmp_new_fd(struct loop *loop, int fd, void (*ready)(struct qmp *q, void *data),
           void (*closed)(struct qmp *q, void *data), void *data, struct qmp **ret)
{
	struct qmp *q = calloc(1, sizeof(*q));
	int r;

	if (!q) {
		safe_close(fd);
		return -ENOMEM;
	}
	q->loop = loop;
	q->fd = fd;
	q->out_fd = -1;
	q->data = data;
	list_init(&q->pending);
	buf_init(&q->in, LINE_MAX_BYTES);
	buf_init(&q->out, LINE_MAX_BYTES);
	r = loop_add(loop, &q->src, q->fd, EPOLLIN, on_io, q);
	if (r < 0) {
		qmp_free(q);
		return r;
	}
	q->ready = ready;
	q->closed = closed;
	*ret = q;
	return 0;
}

int
qmp_new(struct loop *loop, const char *path, void (*ready)(struct qmp *q, void *data),
        void (*closed)(struct qmp *q, void *data), void *data, struct qmp **ret)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return negative_errno();
	/* a unix socket connects at once or not at all (a full backlog: EAGAIN) */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = negative_errno();
		safe_close(fd);
		return r;
	}
	return qmp_new_fd(loop, fd, ready, closed, data, ret);
}

struct qmp *
qmp_free(struct qmp *q)
{
	if (!q)
		return NULL;
	q->closed = NULL;
	end(q, "freed");
	q->fd = safe_close(q->fd);
	buf_free(&q->in);
	buf_free(&q->out);
	if (loop_defer(q->loop, free, q) < 0) /* after the current batch of events */
		free(q);
	return NULL;
}

int
qmp_execute_fd(struct qmp *q, const char *command, json_t *args, int fd, qmp_done_fn done,
               void *data)
{
	size_t at = buf_avail(&q->out);
	int r;

	if (q->fd < 0 || !q->negotiated || q->out_fd >= 0) {
		json_decref(args);
		return q->out_fd >= 0 ? -EBUSY : -ENOTCONN;
	}
	q->out_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (q->out_fd < 0) {
		json_decref(args);
		return negative_errno();
	}
	r = qmp_execute(q, command, args, done, data);
	if (r < 0)
		q->out_fd = safe_close(q->out_fd);
	else
		q->out_fd_at = at;
	return r;
}

int
qmp_execute(struct qmp *q, const char *command, json_t *args, qmp_done_fn done, void *data)
{
	_cleanup_free_ char *text = NULL;
	struct pending *p;
	json_t *j;

	if (q->fd < 0 || !q->negotiated) {
		json_decref(args);
		return -ENOTCONN;
	}
	j = args ? json_pack("{s:s, s:o}", "execute", command, "arguments", args)
	         : json_pack("{s:s}", "execute", command);
	text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	p = calloc(1, sizeof(*p));
	if (!text || !p || buf_printf(&q->out, "%s\n", text) < 0) {
		free(p);
		return -ENOMEM;
	}
	p->done = done;
	p->data = data;
	list_push_back(&q->pending, &p->link);
	set_interest(q);
	return 0;
}
