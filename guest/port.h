/* port.h: the guest end of the host channel. In a VM it is the virtio-serial port named
 * "agent", which stays open across host connections; in test mode it is a unix socket the
 * agent listens on, serving one host connection at a time as QEMU does. Both look the same
 * to the agent: connected, readable, writable, and a hang-up it detects by reading EOF. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "loop.h"

struct port_ops {
	void (*connected)(void *data); /* a host connection began: hunt for a session start */
	void (*readable)(void *data);
	void (*writable)(void *data);
};

struct port {
	struct loop *loop;
	const struct port_ops *ops;
	void *data;
	char *path; /* test mode: the socket path (removed at port_close) */
	int listen_fd;
	struct loop_source listen_src;
	int fd; /* virtio: the port, always open; test mode: the connection or -1 */
	struct loop_source src;
	struct loop_timer wait; /* virtio: 20 ms checks while no host is connected */
	bool virtio;
	bool connected;
	bool want_in, want_out;
};

/* Opens the virtio port's device node (e.g. /dev/vport0p1) without blocking. */
int port_open_virtio(struct port *p, struct loop *l, const char *dev, const struct port_ops *ops,
                     void *data);
/* Creates a 0600 unix socket at path (replacing a stale one) and listens on it. */
int port_listen(struct port *p, struct loop *l, const char *path, const struct port_ops *ops,
                void *data);
void port_close(struct port *p);

/* > 0 bytes, -EAGAIN, 0 at the end of the connection (the caller then calls port_hangup()),
 * or another -errno (treat like the end). */
ssize_t port_read(struct port *p, void *buf, size_t n);
/* > 0 bytes written, -EAGAIN, or -errno (the caller then calls port_hangup()). */
ssize_t port_write(struct port *p, const void *buf, size_t n);
/* Ends the current connection and waits for the next one. */
void port_hangup(struct port *p);
/* Which events the agent wants while connected. */
void port_set_interest(struct port *p, bool in, bool out);
/* Writes all of buf, waiting up to timeout_ms for the host to take it (SHUTDOWN). */
int port_write_all(struct port *p, const void *buf, size_t n, int timeout_ms);
