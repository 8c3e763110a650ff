/* qmp.c: see qmp.h. */
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

static void
on_io(struct loop_source *src _unused_, uint32_t events, void *data)
{
	struct qmp *q = data;
	char chunk[16384];

	if (events & EPOLLOUT) {
		while (buf_avail(&q->out)) {
			ssize_t k =
			        send(q->fd, buf_head(&q->out), buf_avail(&q->out), MSG_NOSIGNAL);
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
