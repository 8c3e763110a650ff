/* port.c: see port.h. A virtio-serial port without a host reports POLLHUP (and POLLIN with
 * reads returning 0) continuously, so while disconnected the port is taken out of epoll and a
 * 20 ms timer checks for POLLHUP to clear: no busy loop, and reconnects are seen within 20 ms. */
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "log.h"
#include "port.h"
#include "util.h"

#define PORT_WAIT_MS 20

static void
update(struct port *p)
{
	uint32_t ev = (p->want_in ? EPOLLIN : 0) | (p->want_out ? EPOLLOUT : 0);

	if (!p->connected)
		return;
	/* epoll reports a hang-up even without interest, over and over: with nothing wanted, the
	 * fd leaves epoll instead */
	if (!ev) {
		loop_remove(&p->src);
		return;
	}
	if (p->src.fd < 0) {
		if (loop_add(p->loop, &p->src, p->fd, ev, p->src.fn, p) < 0)
			log_error("port: cannot watch the host channel: %m");
		return;
	}
	(void)loop_modify(&p->src, ev);
}

static void
on_event(struct loop_source *src, uint32_t events, void *data)
{
	struct port *p = data;

	/* a hang-up is found by reading, even while the agent is not taking input */
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		p->ops->readable(p->data);
	/* the read may have ended the connection */
	if (p->connected && p->src.fd >= 0 && (events & EPOLLOUT))
		p->ops->writable(p->data);
}

static void
became_connected(struct port *p)
{
	p->connected = true;
	p->want_in = true;
	p->want_out = false;
	p->src.fn = on_event;
	update(p);
	p->ops->connected(p->data);
}

/* virtio: whether a host is there now (POLLHUP clears when one connects). */
static bool
host_present(struct port *p)
{
	struct pollfd pfd = { .fd = p->fd, .events = POLLIN };

	if (poll(&pfd, 1, 0) < 0)
		return false;
	return !(pfd.revents & (POLLHUP | POLLERR | POLLNVAL));
}

static void
wait_tick(struct loop_timer *t, void *data)
{
	struct port *p = data;

	if (p->connected || !host_present(p))
		return;
	(void)loop_timer_arm(&p->wait, 0, 0);
	became_connected(p);
}

int
port_open_virtio(struct port *p, struct loop *l, const char *dev, const struct port_ops *ops,
                 void *data)
{
	int r;

	*p = (struct port){ .loop = l, .ops = ops, .data = data, .listen_fd = -1, .virtio = true };
	p->src.fd = p->listen_src.fd = -1;
	p->fd = open(dev, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (p->fd < 0)
		return negative_errno();
	r = loop_timer_init(l, &p->wait, wait_tick, p);
	if (r < 0) {
		p->fd = safe_close(p->fd);
		return r;
	}
	p->src.fn = on_event;
	if (host_present(p))
		became_connected(p);
	else
		(void)loop_timer_arm(&p->wait, PORT_WAIT_MS, PORT_WAIT_MS);
	return 0;
}

static void
on_accept(struct loop_source *src, uint32_t events, void *data)
{
	struct port *p = data;
	int fd = accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0) {
		if (errno != EAGAIN && errno != EINTR)
			log_warning("port: accept on '%s' failed: %m", p->path);
		return;
	}
	/* one host at a time: the next one waits in the backlog, as with QEMU */
	loop_remove(&p->listen_src);
	p->fd = fd;
	became_connected(p);
}

int
port_listen(struct port *p, struct loop *l, const char *path, const struct port_ops *ops,
            void *data)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int r;

	*p = (struct port){ .loop = l, .ops = ops, .data = data, .fd = -1 };
	p->src.fd = p->listen_src.fd = p->wait.src.fd = -1;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	p->path = strdup(path);
	if (!p->path)
		return -ENOMEM;
	p->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->listen_fd < 0)
		return negative_errno();
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		(void)unlink(path);
	old = umask(0177);
	r = bind(p->listen_fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || listen(p->listen_fd, 4) < 0)
		return negative_errno();
	return loop_add(l, &p->listen_src, p->listen_fd, EPOLLIN, on_accept, p);
}

void
port_close(struct port *p)
{
	loop_remove(&p->src);
	loop_remove(&p->listen_src);
	if (p->wait.src.fd >= 0)
		loop_timer_done(&p->wait);
	p->fd = safe_close(p->fd);
	p->listen_fd = safe_close(p->listen_fd);
	if (p->path) {
		(void)unlink(p->path);
		free(p->path);
		p->path = NULL;
	}
	p->connected = false;
}

ssize_t
port_read(struct port *p, void *buf, size_t n)
{
	ssize_t k;

	if (!p->connected)
		return -ENOTCONN;
	do
		k = read(p->fd, buf, n);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : negative_errno();
	return k;
}

ssize_t
port_write(struct port *p, const void *buf, size_t n)
{
	ssize_t k;

	if (!p->connected)
		return -ENOTCONN;
	do
		k = write(p->fd, buf, n);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : negative_errno();
	return k;
}

void
port_hangup(struct port *p)
{
	if (!p->connected)
		return;
	p->connected = false;
	loop_remove(&p->src);
	if (p->virtio) {
		(void)loop_timer_arm(&p->wait, PORT_WAIT_MS, PORT_WAIT_MS);
		return;
	}
	p->fd = safe_close(p->fd);
	if (loop_add(p->loop, &p->listen_src, p->listen_fd, EPOLLIN, on_accept, p) < 0)
		log_error("port: cannot listen on '%s' again: %m", p->path);
}

void
port_set_interest(struct port *p, bool in, bool out)
{
	p->want_in = in;
	p->want_out = out;
	update(p);
}

int
port_write_all(struct port *p, const void *buf, size_t n, int timeout_ms)
{
	const char *c = buf;
	uint64_t deadline = now_mono_ms() + (uint64_t)timeout_ms;

	while (n > 0) {
		ssize_t k = port_write(p, c, n);
		if (k == -EAGAIN) {
			struct pollfd pfd = { .fd = p->fd, .events = POLLOUT };
			uint64_t now = now_mono_ms();
			if (now >= deadline)
				return -ETIMEDOUT;
			(void)poll(&pfd, 1, (int)MIN(deadline - now, (uint64_t)PORT_WAIT_MS));
			continue;
		}
		if (k < 0)
			return (int)k;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}
