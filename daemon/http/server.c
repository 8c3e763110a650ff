/* server.c: listeners and HTTP/1.1 connections on the loop; see server.h. */
#include <fcntl.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include "hashmap.h"
#include "list.h"
#include "log.h"
#include "loop.h"
#include "server.h"
#include "util.h"

#include "server-internal.h"

static void conn_io(struct loop_source *src, uint32_t events, void *data);
static void conn_close(struct conn *c);
static void process_input(struct conn *c);
static void conn_continue(void *data);

static void
conn_free(void *data)
{
	struct conn *c = data;

	http_req_parser_done(&c->hp);
	buf_free(&c->in);
	buf_free(&c->out);
	SSL_free(c->ssl);
	free(c);
}

static void
set_interest(struct conn *c)
{
	/* a paused body reads nothing, and a half-close waits for it to go on (a hang-up or
	 * an error is reported all the same) */
	bool raw_held = c->state == CONN_RAW && (c->raw_paused || c->raw_eof);
	uint32_t ev = c->body_paused || raw_held ? 0 : EPOLLRDHUP;

	if (c->state == CONN_CLOSING)
		return;
	if ((c->state == CONN_READING && !c->body_paused) || c->state == CONN_HANDSHAKE ||
	    (c->state == CONN_RAW && !c->raw_closing && !raw_held))
		ev |= EPOLLIN;
	if (buf_avail(&c->out) > 0)
		ev |= EPOLLOUT;
	if (c->ssl && c->state == CONN_HANDSHAKE)
		ev |= EPOLLOUT; /* the handshake decides; cheap to ask */
	(void)loop_modify(&c->src, ev);
}

static void
conn_close(struct conn *c)
{
	void (*hook)(struct conn *, void *) = c->on_close;

	if (c->state == CONN_CLOSING)
		return;
	c->state = CONN_CLOSING;
	c->on_close = NULL;
	c->on_answer = NULL;
	c->body_data = NULL;
	c->body_end = NULL;
	if (hook)
		hook(c, c->on_close_data);
	loop_remove(&c->src);
	/* close_notify, best effort and never waiting for the peer; not before the handshake
	 * finished nor after a fatal error, where OpenSSL only queues an error. Whatever it
	 * queues is cleared here, not left in the thread's queue for the next connection. */
	if (c->ssl && !c->ssl_failed && SSL_is_init_finished(c->ssl)) {
		ERR_clear_error();
		(void)SSL_shutdown(c->ssl);
		ERR_clear_error();
	}
	c->fd = safe_close(c->fd);
	list_remove(&c->link);
	c->s->nconns--;
	c->l->nconns--;
	if (c->client && --c->client->n == 0) {
		(void)hashmap_remove(&c->s->clients, c->client->key);
		free(c->client);
	}
	c->client = NULL;
	if (loop_defer(c->s->loop, conn_free, c) < 0)
		log_warning("connection: leaking one: out of memory");
}

/* ---- raw I/O, TLS or not ---- */

/* OpenSSL keeps one error queue per thread, and SSL_get_error() looks there first: an error
 * another connection (or anything else on this thread using OpenSSL) left in it would turn
 * this connection's harmless "want read" into a fatal SSL_ERROR_SSL. So every SSL_read,
 * SSL_write and SSL_accept starts from an empty queue, and a failure leaves none behind. */
static int
tls_error(struct conn *c, int k)
{
	int e = SSL_get_error(c->ssl, k);

	if (e == SSL_ERROR_SSL || e == SSL_ERROR_SYSCALL) {
		c->ssl_failed = true;
		ERR_clear_error();
	}
	return e;
}

/* Returns bytes read, 0 at EOF, -EAGAIN, or another -errno. */
static ssize_t
conn_read(struct conn *c, void *p, size_t n, bool *want_write)
{
	*want_write = false;
	if (!c->ssl) {
		ssize_t k = read(c->fd, p, n);
		if (k < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
			               ? -EAGAIN
			               : negative_errno();
		return k;
	}
	ERR_clear_error();
	int k = SSL_read(c->ssl, p, (int)MIN(n, (size_t)INT32_MAX));
	if (k > 0)
		return k;
	switch (tls_error(c, k)) {
	case SSL_ERROR_WANT_READ:
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		*want_write = true;
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		return -EPROTO;
	}
}

static ssize_t
conn_write_raw(struct conn *c, const void *p, size_t n)
{
	if (!c->ssl) {
		ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
		if (k < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
			               ? -EAGAIN
			               : negative_errno();
		return k;
	}
	ERR_clear_error();
	int k = SSL_write(c->ssl, p, (int)MIN(n, (size_t)INT32_MAX));
	if (k > 0)
		return k;
	switch (tls_error(c, k)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return -EAGAIN;
	default:
		return -EPIPE;
	}
}

/* After a last answer on a plain socket: closing while the client's bytes sit unread would
 * reset the connection and could destroy the answer before the client reads it. So the
 * writing side is shut, and what still arrives is read and dropped until the client closes,
 * 2 s pass or 1 MiB came (nginx's lingering close). */
static void
linger(struct conn *c)
{
	if (c->ssl || shutdown(c->fd, SHUT_WR) < 0) {
		conn_close(c);
		return;
	}
	c->state = CONN_LINGERING;
	c->deadline = now_mono_ms() + LINGER_MS;
	c->lingered = 0;
	(void)loop_modify(&c->src, EPOLLIN | EPOLLRDHUP);
}

static void
linger_read(struct conn *c)
{
	char chunk[READ_CHUNK];

	for (;;) {
		ssize_t k = read(c->fd, chunk, sizeof(chunk));
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (k <= 0 || (c->lingered += (size_t)k) > LINGER_MAX) {
			conn_close(c);
			return;
		}
	}
}

/* conn_raw_shutdown, once the queue is out: a FIN (TLS: close_notify) while reading goes on;
 * with the client's side ended too, nothing is left to carry. */
static void
raw_shut(struct conn *c)
{
	c->raw_shut = true;
	ERR_clear_error();
	if (c->ssl && !c->ssl_failed)
		(void)SSL_shutdown(c->ssl); /* close_notify; SSL_read still reads the client's */
	else
		(void)shutdown(c->fd, SHUT_WR);
	ERR_clear_error();
	if (c->raw_eof)
		conn_close(c);
}

/* Writes what it can; after a complete response goes back to reading (or closes). */
static void
flush(struct conn *c)
{
	bool progressed = false;

	while (buf_avail(&c->out) > 0) {
		ssize_t k = conn_write_raw(c, buf_head(&c->out), buf_avail(&c->out));
		if (k == -EAGAIN)
			break;
		if (k <= 0) {
			conn_close(c);
			return;
		}
		buf_consume(&c->out, (size_t)k);
		progressed = true;
	}
	/* all written: a connection that waits (a stream between events, a keep-alive between
	 * requests) does not go on holding the room its largest write needed */
	if (buf_avail(&c->out) == 0 && c->out.cap > OUT_KEEP)
		buf_free(&c->out);
	if (buf_avail(&c->out) > 0) {
		if (progressed || !c->deadline)
			c->deadline = now_mono_ms() + WRITE_TIMEOUT_MS;
		set_interest(c);
		/* a stream's reader may refill once the backlog is low again */
		if (progressed && c->on_drain && !c->in_write && buf_avail(&c->out) < DRAIN_LOW &&
		    (c->state == CONN_STREAMING || c->state == CONN_RAW))
			c->on_drain(c, c->on_drain_data);
		return;
	}
	if (c->state == CONN_STREAMING || c->state == CONN_RAW) {
		c->deadline = 0;
		if (c->state == CONN_RAW && c->raw_closing) {
			conn_close(c);
			return;
		}
		if (c->state == CONN_RAW && c->raw_shut_pending && !c->raw_shut) {
			raw_shut(c);
			if (c->state == CONN_CLOSING)
				return;
		}
		set_interest(c);
		if (progressed && c->on_drain && !c->in_write)
			c->on_drain(c, c->on_drain_data);
		return;
	}
	if (c->state != CONN_WRITING) {
		set_interest(c);
		return;
	}
	/* the response is out */
	if (!c->keep_alive) {
		linger(c);
		return;
	}
	http_req_parser_reset(&c->hp);
	c->state = CONN_READING;
	c->sent_continue = false;
	c->since = now_mono_ms();
	c->deadline = c->since + IDLE_TIMEOUT_MS;
	set_interest(c);
	/* pipelined bytes (or TLS-buffered ones) may already wait */
	if (!c->in_dispatch && !c->continue_scheduled) {
		c->continue_scheduled = true;
		if (loop_defer(c->s->loop, conn_continue, c) < 0)
			c->continue_scheduled = false;
	}
}

/* ---- responses ---- */

/* API answers are never stored (no-store); the dashboard's files may be, asked about again
 * each time (no-cache). */
static int
put_common_headers(struct conn *c, struct buf *out, const char *cache_control)
{
	return buf_printf(out,
	                  "Server: sandboxd\r\nCache-Control: %s\r\n"
	                  "X-Content-Type-Options: nosniff\r\nConnection: %s\r\n",
	                  cache_control, c->keep_alive ? "keep-alive" : "close");
}

/* Writes head and body straight from where they are (no copy into c->out) when nothing is
 * queued on a plain socket; whatever the socket does not take is queued. TLS queues it all. */
static int
send_or_queue(struct conn *c, const struct buf *head, const void *body, size_t len)
{
	size_t sent = 0;

	if (!c->ssl && buf_avail(&c->out) == 0) {
		struct iovec iov[2] = { { .iov_base = head->data, .iov_len = head->len },
			                { .iov_base = (void *)body, .iov_len = len } };
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
		ssize_t k = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -EPIPE;
		sent = k > 0 ? (size_t)k : 0;
	}
	if (sent < head->len) {
		if (buf_append(&c->out, head->data + sent, head->len - sent) < 0)
			return -ENOBUFS;
		sent = 0;
	} else {
		sent -= head->len;
	}
	if (sent < len && buf_append(&c->out, (const char *)body + sent, len - sent) < 0)
		return -ENOBUFS;
	return 0;
}

/* The answer to the current request begins: its hook, once. */
static void
answered(struct conn *c, int status)
{
	void (*fn)(struct conn *, int, uint64_t, void *) = c->on_answer;

	c->on_answer = NULL;
	if (fn)
		fn(c, status, now_mono_us() - c->head_us, c->on_answer_data);
}

static void
reply(struct conn *c, int status, const char *content_type, const void *body, size_t len,
      const char *extra_headers, const char *cache_control)
{
	_cleanup_buf_ struct buf head = BUF_INIT(16384);
	int r;

	if (c->state == CONN_CLOSING)
		return;
	if (c->state != CONN_HANDLING && c->state != CONN_READING) {
		log_error("connection: a second reply for one request (bug)");
		return;
	}
	/* an answer before the whole body came (at its head, or a taken body that failed):
	 * the rest is never read, and the connection closes */
	c->keep_alive = c->keep_alive && c->hp.req.keep_alive && c->hp.phase == HTTP_PHASE_DONE;
	c->on_close = NULL;
	c->body_data = NULL;
	c->body_end = NULL;
	c->body_paused = false;
	c->state = CONN_WRITING;
	answered(c, status);
	r = http_put_status_line(&head, status);
	if (r >= 0)
		r = put_common_headers(c, &head, cache_control);
	if (r >= 0 && content_type)
		r = buf_printf(&head, "Content-Type: %s\r\n", content_type);
	if (r >= 0 && extra_headers)
		r = buf_puts(&head, extra_headers);
	if (r >= 0 && status != 204 && status != 304)
		r = buf_printf(&head, "Content-Length: %zu\r\n", len);
	if (r >= 0)
		r = buf_puts(&head, "\r\n");
	/* a HEAD is answered with GET's headers, Content-Length included, and no body */
	if (r >= 0)
		r = send_or_queue(c, &head, body, c->hp.req.method == HTTP_HEAD ? 0 : len);
	if (r < 0) {
		if (r != -EPIPE)
			log_error("connection: response of %zu bytes does not fit; closing", len);
		conn_close(c);
		return;
	}
	flush(c);
}

void
conn_reply(struct conn *c, int status, const char *content_type, const void *body, size_t len,
           const char *extra_headers)
{
	reply(c, status, content_type, body, len, extra_headers, "no-store");
}

void
conn_reply_revalidate(struct conn *c, int status, const char *content_type, const void *body,
                      size_t len, const char *extra_headers)
{
	reply(c, status, content_type, body, len, extra_headers, "no-cache");
}

int
conn_stream_start(struct conn *c, int status, const char *content_type)
{
	if (c->state != CONN_HANDLING)
		return -EINVAL;
	c->chunked = c->hp.req.http_major == 1 && c->hp.req.http_minor >= 1;
	c->sized = false;
	c->keep_alive = c->chunked && c->hp.req.keep_alive;
	c->state = CONN_STREAMING;
	answered(c, status);
	c->deadline = 0;
	if (http_put_status_line(&c->out, status) < 0)
		return -ENOMEM;
	(void)put_common_headers(c, &c->out, "no-store");
	(void)buf_printf(&c->out, "Content-Type: %s\r\n", content_type);
	if (c->chunked)
		(void)buf_puts(&c->out, "Transfer-Encoding: chunked\r\n");
	if (buf_puts(&c->out, "X-Accel-Buffering: no\r\n\r\n") < 0)
		return -ENOMEM;
	flush(c);
	return c->state == CONN_CLOSING ? -EPIPE : 0;
}

int
conn_stream_start_sized(struct conn *c, int status, const char *content_type, size_t length)
{
	if (c->state != CONN_HANDLING)
		return -EINVAL;
	/* as a whole answer would: keep-alive when the client asked for it */
	c->keep_alive = c->keep_alive && c->hp.req.keep_alive && c->hp.phase == HTTP_PHASE_DONE;
	c->chunked = false;
	c->sized = true;
	c->body_left = length;
	c->state = CONN_STREAMING;
	c->deadline = 0;
	if (http_put_status_line(&c->out, status) < 0 ||
	    put_common_headers(c, &c->out, "no-store") < 0 ||
	    buf_printf(&c->out, "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n", content_type,
	               length) < 0) {
		conn_close(c);
		return -EPIPE;
	}
	flush(c);
	return c->state == CONN_CLOSING ? -EPIPE : 0;
}

/* Sends what a producer just queued. Its drain callback does not run inside: it is the one
 * writing, and may not be ready to be called again. -EPIPE once the connection is closing. */
static int
flush_written(struct conn *c)
{
	c->in_write = true;
	flush(c);
	c->in_write = false;
	return c->state == CONN_CLOSING ? -EPIPE : 0;
}

int
conn_stream_write(struct conn *c, const void *data, size_t len)
{
	int r = 0;

	if (c->state != CONN_STREAMING)
		return -EPIPE;
	if (len == 0)
		return 0;
	if (buf_avail(&c->out) + len > STREAM_BACKLOG_MAX) {
		log_info("connection: closing a stream whose client fell %zu bytes behind",
		         buf_avail(&c->out));
		conn_close(c);
		return -EPIPE;
	}
	if (c->sized) {
		if (len > c->body_left) {
			log_error("connection: a body longer than its Content-Length (bug)");
			conn_close(c);
			return -EPIPE;
		}
		c->body_left -= len;
	}
	if (c->chunked)
		r = buf_printf(&c->out, "%zx\r\n", len);
	if (r >= 0)
		r = buf_append(&c->out, data, len);
	if (r >= 0 && c->chunked)
		r = buf_puts(&c->out, "\r\n");
	if (r < 0) {
		conn_close(c);
		return -EPIPE;
	}
	return flush_written(c);
}

void
conn_stream_end(struct conn *c)
{
	if (c->state != CONN_STREAMING)
		return;
	c->on_close = NULL;
	if (c->sized) {
		c->sized = false;
		if (c->body_left) {
			log_error("connection: a body %zu bytes short of its Content-Length (bug)",
			          c->body_left);
			conn_close(c);
			return;
		}
		c->state = CONN_WRITING;
		flush(c);
		return;
	}
	if (!c->chunked) {
		c->keep_alive = false;
		c->state = CONN_WRITING;
		flush(c);
		return;
	}
	(void)buf_puts(&c->out, "0\r\n\r\n");
	c->state = CONN_WRITING;
	flush(c);
}

size_t
conn_backlog(const struct conn *c)
{
	return buf_avail(&c->out);
}

void
conn_on_drain(struct conn *c, void (*fn)(struct conn *c, void *data), void *data)
{
	c->on_drain = fn;
	c->on_drain_data = data;
}

static int
raw_begin(struct conn *c, int status,
          void (*data)(struct conn *c, const void *bytes, size_t len, void *ctx), void *ctx)
{
	c->state = CONN_RAW;
	c->deadline = 0;
	answered(c, status);
	c->raw_data = data;
	c->raw_ctx = ctx;
	/* bytes the client sent behind the head while the handler waited (outside dispatch,
	 * which hands them on itself) go on from the loop */
	if (!c->in_dispatch && buf_avail(&c->in) > 0 && !c->continue_scheduled) {
		c->continue_scheduled = true;
		if (loop_defer(c->s->loop, conn_continue, c) < 0)
			c->continue_scheduled = false;
	}
	flush(c);
	return c->state == CONN_CLOSING ? -EPIPE : 0;
}

int
conn_upgrade(struct conn *c, const char *headers,
             void (*data)(struct conn *c, const void *bytes, size_t len, void *ctx), void *ctx)
{
	int r;

	if (c->state != CONN_HANDLING)
		return -EINVAL;
	r = http_put_status_line(&c->out, 101);
	if (r >= 0)
		r = buf_puts(&c->out, "Server: sandboxd\r\n");
	if (r >= 0)
		r = buf_puts(&c->out, headers);
	if (r >= 0)
		r = buf_puts(&c->out, "\r\n");
	if (r < 0)
		return r;
	return raw_begin(c, 101, data, ctx);
}

int
conn_raw_begin(struct conn *c,
               void (*data)(struct conn *c, const void *bytes, size_t len, void *ctx), void *ctx)
{
	if (c->state != CONN_HANDLING && !(c->state == CONN_READING && c->in_head))
		return -EINVAL;
	/* a head() handler's request: the body (and what follows) is the handler's now */
	c->body_data = NULL;
	c->body_end = NULL;
	c->body_paused = false;
	return raw_begin(c, 0, data, ctx);
}

int
conn_head_hold(struct conn *c)
{
	if (!c->in_head || c->state != CONN_READING || c->body_data)
		return -EINVAL;
	c->state = CONN_HANDLING;
	c->deadline = 0;
	c->keep_alive = false; /* the body is not the server's to read: an answer ends it */
	set_interest(c);
	return 0;
}

void
conn_raw_pause(struct conn *c)
{
	if (c->state != CONN_RAW || c->raw_paused)
		return;
	c->raw_paused = true;
	set_interest(c);
}

void
conn_raw_resume(struct conn *c)
{
	if (c->state != CONN_RAW || !c->raw_paused)
		return;
	c->raw_paused = false;
	set_interest(c);
	/* TLS may hold decrypted bytes epoll cannot see */
	if (!c->continue_scheduled) {
		c->continue_scheduled = true;
		if (loop_defer(c->s->loop, conn_continue, c) < 0)
			c->continue_scheduled = false;
	}
}

void
conn_raw_on_eof(struct conn *c, void (*fn)(struct conn *c, void *data), void *data)
{
	c->on_raw_eof = fn;
	c->on_raw_eof_data = data;
}

void
conn_raw_shutdown(struct conn *c)
{
	if (c->state != CONN_RAW || c->raw_shut_pending)
		return;
	c->raw_shut_pending = true;
	if (buf_avail(&c->out) == 0)
		raw_shut(c);
}

int
conn_raw_write(struct conn *c, const void *bytes, size_t len)
{
	if (c->state != CONN_RAW || c->raw_closing || c->raw_shut_pending)
		return -EPIPE;
	if (buf_avail(&c->out) + len > STREAM_BACKLOG_MAX) {
		log_info("connection: closing an attachment whose client fell %zu bytes behind",
		         buf_avail(&c->out));
		conn_close(c);
		return -EPIPE;
	}
	if (buf_append(&c->out, bytes, len) < 0) {
		conn_close(c);
		return -EPIPE;
	}
	return flush_written(c);
}

void
conn_raw_close(struct conn *c)
{
	if (c->state != CONN_RAW)
		return;
	c->raw_closing = true;
	flush(c); /* the close hook still tells its owner when it is gone */
}

void
conn_on_answer(struct conn *c,
               void (*fn)(struct conn *c, int status, uint64_t elapsed_us, void *data), void *data)
{
	c->on_answer = fn;
	c->on_answer_data = data;
}

void
conn_on_close(struct conn *c, void (*fn)(struct conn *c, void *data), void *data)
{
	c->on_close = fn;
	c->on_close_data = data;
}

bool
conn_is_unix(const struct conn *c)
{
	return c->l->is_unix;
}

bool
conn_is_tls(const struct conn *c)
{
	return c->ssl != NULL;
}

uid_t
conn_peer_uid(const struct conn *c)
{
	return c->peer_uid;
}

const char *
conn_peer(const struct conn *c)
{
	return c->peer;
}

void
conn_set_credential(struct conn *c, const char *cred, const char *user)
{
	snprintf(c->cred, sizeof(c->cred), "%s", cred ? cred : "");
	snprintf(c->user, sizeof(c->user), "%s", user ? user : "");
	if (cred && *cred)
		c->authenticated = true;
}

unsigned
server_close_credential(struct server *s, const char *cred, const char *user,
                        const struct conn *except)
{
	struct list_node *n, *tmp;
	unsigned closed = 0;

	LIST_FOREACH_SAFE (n, tmp, &s->conns) {
		struct conn *c = list_entry(n, struct conn, link);

		if (c == except || c->state == CONN_CLOSING)
			continue;
		if ((cred && *c->cred && streq(c->cred, cred)) ||
		    (user && *c->user && streq(c->user, user))) {
			conn_close(c);
			closed++;
		}
	}
	return closed;
}

/* ---- input ---- */

static void
dispatch(struct conn *c)
{
	c->state = CONN_HANDLING;
	c->deadline = 0;
	/* an upgrade request answered with anything but 101 closes the connection ("Connection:
	 * close"): bytes the client sent behind its head were meant for the new protocol, and
	 * must never be read as the next request */
	c->keep_alive = !c->hp.req.upgrade;
	c->in_dispatch = true;
	if (c->l->metrics)
		c->s->h.metrics(c->s->h.ctx, c, &c->hp.req);
	else
		c->s->h.request(c->s->h.ctx, c, &c->hp.req);
	c->in_dispatch = false;
	/* most answers are written at once and leave the interest as it was; only a handler
	 * that answers later needs to stop reading (and hear a hang-up) meanwhile */
	if (c->state == CONN_HANDLING || c->state == CONN_STREAMING)
		set_interest(c);
}

/* Hands a request the server could not take to the handler, which answers it; the
 * connection closes after the answer. */
static void
fault(struct conn *c, const struct server_fault *f)
{
	c->keep_alive = false;
	c->state = CONN_HANDLING;
	c->s->h.protocol_error(c->s->h.ctx, c, f);
}

static void
parse_error(struct conn *c)
{
	fault(c, &(struct server_fault){ .kind = SERVER_FAULT_PARSE,
	                                 .parse_status = c->hp.err_status,
	                                 .message = c->hp.err_message });
}

/* A taken body that will not complete: its handler lets go (its close hook) and must not
 * answer; the server answers, or just closes. */
static void
body_abandon(struct conn *c)
{
	void (*hook)(struct conn *, void *) = c->on_close;

	if (!c->body_data)
		return;
	c->body_data = NULL;
	c->body_end = NULL;
	c->body_paused = false;
	c->on_close = NULL;
	if (hook)
		hook(c, c->on_close_data);
}

/* "100 Continue" once, when the client asked for it and the body is wanted. */
static void
maybe_continue(struct conn *c)
{
	const char *expect;

	if (c->state != CONN_READING || c->hp.phase != HTTP_PHASE_BODY || c->sent_continue)
		return;
	expect = http_req_header(&c->hp.req, "expect");
	if (!expect || strcasecmp(expect, "100-continue") != 0)
		return;
	c->sent_continue = true;
	(void)buf_puts(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
	flush(c);
}

/* A head whose body follows: the handler judges it before any of the body is read. */
static void
head(struct conn *c)
{
	c->in_head = true;
	c->in_dispatch = true;
	c->s->h.head(c->s->h.ctx, c, &c->hp.req);
	c->in_dispatch = false;
	c->in_head = false;
	maybe_continue(c);
}

/* Hands what the parser read of a taken body to its handler. */
static void
body_give(struct conn *c)
{
	struct buf *b = &c->hp.req.body;

	if (b->len == 0)
		return;
	c->in_dispatch = true;
	c->body_data(c, b->data, b->len, c->body_ctx);
	c->in_dispatch = false;
	buf_reset(b);
}

/* A taken body is whole: its handler answers, now or later. */
static void
body_done(struct conn *c)
{
	void (*end)(struct conn *, void *) = c->body_end;

	c->body_data = NULL;
	c->body_end = NULL;
	c->body_paused = false; /* the last piece may have filled the handler up: nothing to read */
	c->state = CONN_HANDLING;
	c->deadline = 0;
	c->keep_alive = true;
	c->in_dispatch = true;
	end(c, c->body_ctx);
	c->in_dispatch = false;
	if (c->state == CONN_HANDLING || c->state == CONN_STREAMING)
		set_interest(c);
}

/* What was read behind the head of a connection that turned raw goes to its handler, taken out
 * of c->in first (the handler may write, close or pause from its callback). */
static void
raw_give_buffered(struct conn *c)
{
	_cleanup_buf_ struct buf rest = BUF_INIT(IN_MAX);

	if (buf_avail(&c->in) == 0 || c->raw_closing)
		return;
	if (buf_append(&rest, buf_head(&c->in), buf_avail(&c->in)) < 0) {
		conn_close(c); /* the client's bytes cannot be lost quietly */
		return;
	}
	buf_reset(&c->in);
	c->raw_data(c, rest.data, rest.len, c->raw_ctx);
}

static void
process_input(struct conn *c)
{
	while (c->state == CONN_READING && !c->body_paused && buf_avail(&c->in) > 0) {
		bool was_started = http_req_started(&c->hp);
		enum http_parse_phase before = c->hp.phase;
		size_t n = buf_avail(&c->in), used = 0;
		int r;

		/* a taken body goes on in pieces, so that a pause holds back all but one */
		if (c->body_data)
			n = MIN(n, (size_t)BODY_PIECE);
		r = http_req_feed(&c->hp, buf_head(&c->in), n, &used);
		if (r < 0) {
			buf_reset(&c->in);
			body_abandon(c);
			parse_error(c);
			return;
		}
		buf_consume(&c->in, used);
		if (!was_started && http_req_started(&c->hp))
			c->deadline = now_mono_ms() + HEAD_TIMEOUT_MS;
		if (before == HTTP_PHASE_HEAD && c->hp.phase != HTTP_PHASE_HEAD) {
			c->deadline = now_mono_ms() + BODY_TIMEOUT_MS;
			c->head_us = now_mono_us();
		}
		if (r == HTTP_FEED_HEAD) {
			head(c);
			continue;
		}
		if (c->body_data) {
			body_give(c);
			if (c->state != CONN_READING || !c->body_data)
				return; /* it answered (a failure), or the client went */
		}
		if (r == 0) {
			maybe_continue(c);
			return;
		}
		if (c->body_data) {
			body_done(c);
			continue;
		}
		dispatch(c);
	}
	/* bytes that came right behind an upgrade's head belong to the new protocol */
	if (c->state == CONN_RAW)
		raw_give_buffered(c);
}

static bool
reading(const struct conn *c)
{
	return (c->state == CONN_READING && !c->body_paused) ||
	       (c->state == CONN_RAW && !c->raw_paused && !c->raw_eof);
}

/* The client ended its side of an upgraded connection: a half-close its handler takes, or the
 * end. */
static void
raw_eof(struct conn *c)
{
	if (!c->on_raw_eof || c->raw_shut || c->raw_closing) {
		conn_close(c);
		return;
	}
	c->raw_eof = true;
	set_interest(c);
	c->on_raw_eof(c, c->on_raw_eof_data);
}

static void
read_input(struct conn *c)
{
	char chunk[READ_CHUNK];
	size_t total = 0;

	while (reading(c) && total < 4 * READ_CHUNK) {
		bool want_write;
		ssize_t k = conn_read(c, chunk, sizeof(chunk), &want_write);

		if (k == -EAGAIN) {
			if (want_write)
				(void)loop_modify(&c->src, c->src.events | EPOLLOUT);
			break;
		}
		if (k == 0 && c->state == CONN_RAW) {
			raw_eof(c);
			return;
		}
		if (k <= 0) {
			conn_close(c);
			return;
		}
		total += (size_t)k;
		if (c->state == CONN_RAW) {
			if (!c->raw_closing)
				c->raw_data(c, chunk, (size_t)k, c->raw_ctx);
			if (!c->ssl && (size_t)k < sizeof(chunk))
				break;
			continue;
		}
		if (buf_append(&c->in, chunk, (size_t)k) < 0) {
			conn_close(c);
			return;
		}
		process_input(c);
		/* a short read drained a plain socket: epoll says when more comes. TLS may hold
		 * decrypted bytes epoll cannot see, so it reads on until it would block. */
		if (!c->ssl && (size_t)k < sizeof(chunk))
			break;
	}
	/* a TLS connection may hold decrypted bytes epoll cannot see: come back for them */
	if (c->state == CONN_READING && !c->body_paused && total >= 4 * READ_CHUNK &&
	    !c->continue_scheduled) {
		c->continue_scheduled = true;
		if (loop_defer(c->s->loop, conn_continue, c) < 0)
			c->continue_scheduled = false;
	}
}

static void
conn_continue(void *data)
{
	struct conn *c = data;

	c->continue_scheduled = false;
	if (c->state == CONN_RAW && reading(c)) {
		raw_give_buffered(c);
		if (c->ssl && reading(c))
			read_input(c);
		return;
	}
	if (c->state != CONN_READING || c->body_paused)
		return;
	process_input(c);
	if (c->state == CONN_READING)
		read_input(c);
}

int
conn_body_take(struct conn *c,
               void (*data)(struct conn *c, const void *bytes, size_t len, void *ctx),
               void (*end)(struct conn *c, void *ctx), void *ctx)
{
	if (!c->in_head || c->state != CONN_READING || c->hp.phase != HTTP_PHASE_BODY)
		return -EINVAL;
	c->body_data = data;
	c->body_end = end;
	c->body_ctx = ctx;
	return 0;
}

void
conn_body_pause(struct conn *c)
{
	uint64_t now = now_mono_ms();

	if (!c->body_data || c->body_paused || c->state != CONN_READING)
		return;
	c->body_paused = true;
	c->body_time_left = c->deadline > now ? c->deadline - now : 1;
	c->deadline = 0;
	set_interest(c);
}

void
conn_body_resume(struct conn *c)
{
	if (!c->body_paused)
		return;
	c->body_paused = false;
	if (c->state != CONN_READING)
		return;
	c->deadline = now_mono_ms() + c->body_time_left;
	set_interest(c);
	/* what was read before the pause, and what TLS holds, go on from the loop */
	if (!c->continue_scheduled) {
		c->continue_scheduled = true;
		if (loop_defer(c->s->loop, conn_continue, c) < 0)
			c->continue_scheduled = false;
	}
}

static void
handshake(struct conn *c)
{
	int k;

	ERR_clear_error();
	k = SSL_accept(c->ssl);
	if (k == 1) {
		c->state = CONN_READING;
		c->deadline = now_mono_ms() + IDLE_TIMEOUT_MS;
		set_interest(c);
		read_input(c);
		return;
	}
	switch (tls_error(c, k)) {
	case SSL_ERROR_WANT_READ:
		(void)loop_modify(&c->src, EPOLLIN | EPOLLRDHUP);
		return;
	case SSL_ERROR_WANT_WRITE:
		(void)loop_modify(&c->src, EPOLLOUT | EPOLLRDHUP);
		return;
	default:
		ERR_clear_error();
		conn_close(c);
	}
}

static void
conn_io(struct loop_source *src _unused_, uint32_t events, void *data)
{
	struct conn *c = data;

	if (c->state == CONN_HANDSHAKE) {
		if (events & (EPOLLERR | EPOLLHUP))
			conn_close(c);
		else
			handshake(c);
		return;
	}
	if (events & EPOLLERR) {
		conn_close(c);
		return;
	}
	if (events & EPOLLOUT)
		flush(c);
	if (c->state == CONN_CLOSING)
		return;
	if (c->body_paused || (c->state == CONN_RAW && (c->raw_paused || c->raw_eof))) {
		if (events & EPOLLHUP)
			conn_close(c); /* reset: the body will not come, nor anything else */
		return;
	}
	if ((c->state == CONN_READING || c->state == CONN_RAW) &&
	    (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP))) {
		read_input(c);
		return;
	}
	if (c->state == CONN_LINGERING) {
		linger_read(c);
		return;
	}
	/* a handler or a stream holds the connection: a hang-up means the client left */
	if ((c->state == CONN_HANDLING || c->state == CONN_STREAMING) &&
	    (events & (EPOLLRDHUP | EPOLLHUP)))
		conn_close(c);
	else if (c->state == CONN_WRITING && (events & EPOLLHUP))
		conn_close(c);
}

/* ---- for server-listen.c (server-internal.h) ---- */

void
server_conn_close(struct conn *c)
{
	conn_close(c);
}

void
server_conn_flush(struct conn *c)
{
	flush(c);
}

void
server_conn_free(void *data)
{
	conn_free(data);
}

void
server_conn_io(struct loop_source *src, uint32_t events, void *data)
{
	conn_io(src, events, data);
}

void
server_conn_timed_out(struct conn *c)
{
	/* a slow or stalled request: say so, then close */
	body_abandon(c);
	fault(c, &(struct server_fault){ .kind = SERVER_FAULT_TIMEOUT });
}
