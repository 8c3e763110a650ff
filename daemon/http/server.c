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

#define HANDSHAKE_TIMEOUT_MS 10000
#define HEAD_TIMEOUT_MS 10000
#define BODY_TIMEOUT_MS 60000
#define IDLE_TIMEOUT_MS 60000
#define WRITE_TIMEOUT_MS 30000
#define IN_MAX (128u << 10)
#define OUT_SLACK (8u << 20) /* room beyond the handler's largest body (its head, say) */
#define STREAM_BACKLOG_MAX (4u << 20)
#define READ_CHUNK 16384
#define LINGER_MS 2000
#define DRAIN_LOW (64u << 10)
#define OUT_KEEP (8u << 10) /* an idle connection keeps at most this much output buffer */
/* TCP keepalive: the first probe after 30 s of quiet, then every 10 s, gone after 3 unanswered
 * (a vanished client is found within a minute) */
#define TCP_KEEPIDLE_SECS 30
#define TCP_KEEPINTVL_SECS 10
#define TCP_KEEPCNT_N 3
#define TCP_USER_TIMEOUT_MS 60000u
#define LINGER_MAX (1u << 20)
#define BODY_PIECE (64u << 10) /* a taken body is handed on in pieces of at most this */
#define FD_WARN_EVERY_MS 10000

enum conn_state {
	CONN_HANDSHAKE, /* TLS handshake */
	CONN_READING,   /* reading a request */
	CONN_HANDLING,  /* a handler holds the request */
	CONN_WRITING,   /* flushing a complete response */
	CONN_STREAMING, /* a streaming response is open */
	CONN_LINGERING, /* the last answer is out; reading what the client still sends */
	CONN_RAW,       /* upgraded (101): bytes go to the handler both ways */
	CONN_CLOSING,
};

struct listener {
	struct loop_source src;
	struct server *s;
	struct list_node link;
	unsigned nconns, budget; /* open connections, and how many it may hold */
	bool is_unix;
	bool metrics; /* --metrics-listen: the handler's metrics(), no credential */
	SSL_CTX *tls;
	char *path; /* unix socket to unlink at exit */
	char *label;
};

struct server {
	struct loop *loop;
	struct server_handler h;
	size_t out_max; /* what a connection may hold queued */
	struct list_node listeners;
	struct list_node conns;
	unsigned nconns;
	unsigned budget;        /* each new listener's */
	unsigned client_limit;  /* connections per client address on TCP; 0: none */
	struct hashmap clients; /* client key -> struct client, while client_limit is set */
	int spare_fd;           /* given up to accept and shed one when descriptors run out */
	uint64_t fd_warned;     /* when running out of descriptors was last logged */
};

/* The connections of one client address on the TCP listeners. */
struct client {
	char key[64]; /* "192.0.2.1", or "2001:db8:1:2::/64" */
	unsigned n;
};

struct conn {
	struct loop_source src;
	int fd;
	SSL *ssl;
	struct server *s;
	struct listener *l;
	struct list_node link;
	enum conn_state state;
	struct http_req_parser hp;
	struct buf in, out;
	bool keep_alive;  /* for the response being written */
	bool chunked;     /* streaming with chunked encoding (else until close) */
	bool sized;       /* streaming a body whose Content-Length was sent */
	size_t body_left; /* sized: bytes of it still to come */
	bool in_dispatch; /* the handler is on the stack */
	bool continue_scheduled;
	bool sent_continue; /* "100 Continue" for this request */
	uint64_t deadline;  /* 0: none */
	size_t lingered;    /* bytes dropped while lingering */
	uid_t peer_uid;
	struct client *client; /* counted against its address's limit, or NULL */
	uint64_t since;        /* when it began to wait for a request (accepted, or answered) */
	bool authenticated;    /* a request on it came with a credential */
	/* a request body taken as it arrives (conn_body_take) */
	void (*body_data)(struct conn *c, const void *bytes, size_t len, void *ctx);
	void (*body_end)(struct conn *c, void *ctx);
	void *body_ctx;
	bool body_paused;
	bool in_head;            /* the handler's head() is on the stack */
	uint64_t body_time_left; /* of the body's time limit, while paused */
	char peer[48];           /* the client's address ("unix:UID" on the socket) */
	char cred[64];           /* the credential that authenticated the latest request, or "" */
	char user[256]; /* whose it is (the principal's name: an email is up to 254 bytes) */
	void (*on_close)(struct conn *c, void *data);
	void *on_close_data;
	void (*on_drain)(struct conn *c, void *data);
	void *on_drain_data;
	void (*on_answer)(struct conn *c, int status, uint64_t elapsed_us, void *data);
	void *on_answer_data;
	uint64_t head_us; /* when the current request's head was read (CLOCK_MONOTONIC) */
	void (*raw_data)(struct conn *c, const void *bytes, size_t len, void *ctx);
	void *raw_ctx;
	bool raw_closing;      /* close once the queue is written */
	bool raw_paused;       /* conn_raw_pause: not read until conn_raw_resume */
	bool raw_eof;          /* the client ended its side (a half-close, with on_raw_eof set) */
	bool raw_shut_pending; /* conn_raw_shutdown: shut our side once the queue is written */
	bool raw_shut;         /* ... and it is shut */
	void (*on_raw_eof)(struct conn *c, void *data);
	void *on_raw_eof_data;
	bool in_write; /* a producer is writing: no drain callback back into it */
};

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
	if (c->ssl)
		(void)SSL_shutdown(c->ssl); /* best effort; never wait for the peer */
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
	int k = SSL_read(c->ssl, p, (int)MIN(n, (size_t)INT32_MAX));
	if (k > 0)
		return k;
	switch (SSL_get_error(c->ssl, k)) {
	case SSL_ERROR_WANT_READ:
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		*want_write = true;
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		ERR_clear_error();
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
	int k = SSL_write(c->ssl, p, (int)MIN(n, (size_t)INT32_MAX));
	if (k > 0)
		return k;
	switch (SSL_get_error(c->ssl, k)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return -EAGAIN;
	default:
		ERR_clear_error();
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
	if (c->ssl)
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
	c->keep_alive = true;
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
		if (c->hp.req.upgrade)
			c->keep_alive = false; /* unless a handler takes the upgrade */
		dispatch(c);
	}
	/* bytes that came right behind an upgrade's head belong to the new protocol */
	if (c->state == CONN_RAW && buf_avail(&c->in) > 0) {
		_cleanup_buf_ struct buf rest = BUF_INIT(IN_MAX);
		(void)buf_append(&rest, buf_head(&c->in), buf_avail(&c->in));
		buf_reset(&c->in);
		c->raw_data(c, rest.data, rest.len, c->raw_ctx);
	}
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
		if (buf_avail(&c->in) > 0 && !c->raw_closing) {
			_cleanup_buf_ struct buf rest = BUF_INIT(IN_MAX);
			(void)buf_append(&rest, buf_head(&c->in), buf_avail(&c->in));
			buf_reset(&c->in);
			c->raw_data(c, rest.data, rest.len, c->raw_ctx);
		}
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
	int k = SSL_accept(c->ssl);

	if (k == 1) {
		c->state = CONN_READING;
		c->deadline = now_mono_ms() + IDLE_TIMEOUT_MS;
		set_interest(c);
		read_input(c);
		return;
	}
	switch (SSL_get_error(c->ssl, k)) {
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

/* ---- listeners ---- */

/* "ADDR" of a TCP client, IPv4-mapped IPv6 shown as IPv4, for rate limits and logs. */
static void
format_peer(const struct sockaddr_storage *ss, char *out, size_t size)
{
	char addr[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &in->sin_addr, addr, sizeof(addr));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
			inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], addr, sizeof(addr));
		else
			inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
	}
	snprintf(out, size, "%s", addr);
}

void
server_client_key(const struct sockaddr_storage *ss, char *out, size_t size)
{
	char addr[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_INET6) {
		struct in6_addr a = ((const struct sockaddr_in6 *)ss)->sin6_addr;
		if (!IN6_IS_ADDR_V4MAPPED(&a)) {
			memset(a.s6_addr + 8, 0, 8);
			inet_ntop(AF_INET6, &a, addr, sizeof(addr));
			snprintf(out, size, "%s/64", addr);
			return;
		}
	}
	format_peer(ss, out, size);
}

/* The count of key's connections, made at 0 when it has none yet; NULL without memory. */
static struct client *
client_get(struct server *s, const char *key)
{
	struct client *cl = hashmap_get(&s->clients, key);

	if (cl)
		return cl;
	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return NULL;
	snprintf(cl->key, sizeof(cl->key), "%s", key);
	if (hashmap_put(&s->clients, cl->key, cl) < 0) {
		free(cl);
		return NULL;
	}
	return cl;
}

/* Makes room on a full listener: closes its connection that has waited longest for a request
 * without ever authenticating one (a TLS handshake counts as waiting). A connection a handler
 * holds (answering, streaming, taking a body, upgraded) is never closed for room. Returns
 * whether one was. */
/* An accepted TCP connection: no Nagle delay, and keepalive probes, so that a client that
 * vanished without closing (a laptop shut, a network gone) is found within about a minute
 * even when nothing is being sent: its attach or stream then closes, and what was bound to it
 * (a sandbox bound to its client) learns it is gone. */
static void
tcp_options(int fd)
{
	int one = 1, idle = TCP_KEEPIDLE_SECS, intvl = TCP_KEEPINTVL_SECS, cnt = TCP_KEEPCNT_N;
	unsigned user_timeout = TCP_USER_TIMEOUT_MS;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	/* data unacknowledged this long also ends it (keepalive probes wait for a quiet line) */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

static bool
evict_idle(struct listener *l)
{
	struct conn *oldest = NULL;
	struct list_node *n;

	LIST_FOREACH (n, &l->s->conns) {
		struct conn *c = list_entry(n, struct conn, link);

		if (c->l != l || c->authenticated || c->body_data ||
		    (c->state != CONN_READING && c->state != CONN_HANDSHAKE))
			continue;
		if (!oldest || c->since < oldest->since)
			oldest = c;
	}
	if (!oldest)
		return false;
	log_debug("%s: full (%u connections): closing the oldest idle one, from %s", l->label,
	          l->nconns, oldest->peer);
	conn_close(oldest);
	return true;
}

/* accept() found no descriptor left: the pending connection is taken with the spare one and
 * closed, so that it does not wake the loop again and again. */
static void
shed_one(struct listener *l)
{
	struct server *s = l->s;
	uint64_t now = now_mono_ms();
	int fd;

	if (s->spare_fd < 0)
		return;
	s->spare_fd = safe_close(s->spare_fd);
	fd = accept4(l->src.fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0)
		close(fd);
	s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (now - s->fd_warned >= FD_WARN_EVERY_MS || !s->fd_warned) {
		s->fd_warned = now;
		log_warning("%s: out of file descriptors (%s): a new connection was closed; raise "
		            "LimitNOFILE or lower --max-connections",
		            l->label, strerror(EMFILE));
	}
}

static void
on_accept(struct loop_source *src, uint32_t events _unused_, void *data)
{
	struct listener *l = data;
	struct server *s = l->s;

	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage peer;
		socklen_t peer_len = sizeof(peer);
		int fd = accept4(src->fd, (struct sockaddr *)&peer, &peer_len,
		                 SOCK_NONBLOCK | SOCK_CLOEXEC);
		char key[64] = "";
		struct conn *c;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				/* room first, from this listener's idle ones; else shed it */
				if (evict_idle(l))
					continue;
				shed_one(l);
				continue;
			}
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				log_warning("%s: accept failed: %m", l->label);
			return;
		}
		if (!l->is_unix && !l->metrics && s->client_limit > 0) {
			struct client *cl;
			server_client_key(&peer, key, sizeof(key));
			cl = hashmap_get(&s->clients, key);
			if (cl && cl->n >= s->client_limit) {
				/* one address holds its share already: refused at once */
				close(fd);
				continue;
			}
		}
		if (l->nconns >= l->budget && !evict_idle(l)) {
			/* full of connections in use: refuse at once rather than queue */
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->s = s;
		c->l = l;
		c->peer_uid = (uid_t)-1;
		c->since = now_mono_ms();
		list_init(&c->link);
		buf_init(&c->in, IN_MAX);
		buf_init(&c->out, s->out_max);
		http_req_parser_init(&c->hp, s->h.body_limit, s->h.ctx);
		/* an API listener's handler judges each head before its body is read */
		c->hp.stop_at_body = !l->metrics && s->h.head;
		if (l->is_unix) {
			struct ucred cred;
			socklen_t len = sizeof(cred);
			if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
				c->peer_uid = cred.uid;
			snprintf(c->peer, sizeof(c->peer), "unix:%d", (int)c->peer_uid);
		} else {
			format_peer(&peer, c->peer, sizeof(c->peer));
			tcp_options(fd);
		}
		if (l->tls) {
			c->ssl = SSL_new(l->tls);
			if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
				conn_free(c);
				close(fd);
				continue;
			}
			SSL_set_accept_state(c->ssl);
			c->state = CONN_HANDSHAKE;
			c->deadline = c->since + HANDSHAKE_TIMEOUT_MS;
		} else {
			c->state = CONN_READING;
			c->deadline = c->since + IDLE_TIMEOUT_MS;
		}
		if (loop_add(s->loop, &c->src, fd, EPOLLIN | EPOLLRDHUP, conn_io, c) < 0) {
			conn_free(c);
			close(fd);
			continue;
		}
		list_push_back(&s->conns, &c->link);
		s->nconns++;
		l->nconns++;
		/* counted against its address (without memory for that, it goes uncounted) */
		if (*key && (c->client = client_get(s, key)))
			c->client->n++;
	}
}

int
server_new(struct loop *loop, const struct server_handler *h, unsigned max_connections,
           struct server **ret)
{
	struct server *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->h = *h;
	s->out_max = h->response_max + OUT_SLACK;
	s->budget = max_connections;
	list_init(&s->listeners);
	list_init(&s->conns);
	s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	*ret = s;
	return 0;
}

void
server_set_client_limit(struct server *s, unsigned n)
{
	s->client_limit = n;
}

void
server_set_listener_budget(struct server *s, unsigned n)
{
	struct list_node *ln;

	s->budget = MIN(s->budget, n);
	LIST_FOREACH (ln, &s->listeners) {
		struct listener *l = list_entry(ln, struct listener, link);
		l->budget = MIN(l->budget, n);
	}
}

unsigned
server_listener_count(const struct server *s)
{
	const struct list_node *n;
	unsigned count = 0;

	LIST_FOREACH (n, &s->listeners)
		count++;
	return count;
}

struct server *
server_free(struct server *s)
{
	struct list_node *n, *tmp;

	if (!s)
		return NULL;
	LIST_FOREACH_SAFE (n, tmp, &s->conns) {
		struct conn *c = list_entry(n, struct conn, link);
		/* end open streams properly, so clients can tell a shutdown from a crash */
		if (c->state == CONN_STREAMING && c->chunked && buf_puts(&c->out, "0\r\n\r\n") >= 0)
			flush(c);
		conn_close(c);
	}
	LIST_FOREACH_SAFE (n, tmp, &s->listeners) {
		struct listener *l = list_entry(n, struct listener, link);
		int fd = l->src.fd;
		loop_remove(&l->src);
		safe_close(fd);
		if (l->path)
			unlink(l->path);
		list_remove(&l->link);
		free(l->path);
		free(l->label);
		free(l);
	}
	hashmap_clear(&s->clients); /* every connection took its count with it */
	safe_close(s->spare_fd);
	free(s);
	return NULL;
}

static int
add_listener(struct server *s, int fd, bool is_unix, SSL_CTX *tls, const char *path,
             const char *label)
{
	struct listener *l = calloc(1, sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	l->s = s;
	l->budget = s->budget;
	l->is_unix = is_unix;
	l->tls = tls;
	l->path = path ? strdup(path) : NULL;
	l->label = strdup(label);
	list_init(&l->link);
	r = loop_add(s->loop, &l->src, fd, EPOLLIN, on_accept, l);
	if (r < 0) {
		free(l->path);
		free(l->label);
		free(l);
		return r;
	}
	list_push_back(&s->listeners, &l->link);
	return 0;
}

int
server_listen_unix(struct server *s, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *label = NULL;
	mode_t old;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		log_error("--socket '%s': the path is longer than a unix socket allows (%zu)", path,
		          sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return negative_errno();
	/* someone answering there means another server owns it: never steal its socket */
	{
		_cleanup_close_ int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			log_error("unix:%s: another server is already serving this socket; stop it "
			          "or pass a different --socket",
			          path);
			return -EADDRINUSE;
		}
	}
	(void)unlink(path);
	old = umask(0177); /* created 0600: never reachable by others, not even for a moment */
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0) {
		r = negative_errno();
		log_error("unix:%s: cannot bind: %s", path, strerror(-r));
		return r;
	}
	if (chmod(path, 0600) < 0 || listen(fd, 512) < 0) {
		r = negative_errno();
		log_error("unix:%s: cannot listen: %s", path, strerror(-r));
		unlink(path);
		return r;
	}
	label = strdup_printf("unix:%s", path);
	r = add_listener(s, fd, true, NULL, path, label ? label : "unix");
	if (r < 0) {
		unlink(path);
		return r;
	}
	TAKE_FD(fd);
	return 0;
}

static int
listen_tcp(struct server *s, const char *host, const char *port, SSL_CTX *tls, bool metrics,
           const char *flag)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
		                  .ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_ADDRCONFIG };
	struct addrinfo *res = NULL, *ai;
	int r, bound = 0;

	r = getaddrinfo(host, port, &hints, &res);
	if (r != 0) {
		log_error("%s %s:%s: cannot resolve: %s", flag, host, port, gai_strerror(r));
		return -EINVAL;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		_cleanup_free_ char *label = NULL;
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		                ai->ai_protocol);
		int one = 1;

		if (fd < 0)
			continue;
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6)
			(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 512) < 0) {
			r = negative_errno();
			close(fd);
			log_error("%s %s:%s: cannot bind: %s", flag, host, port, strerror(-r));
			freeaddrinfo(res);
			return r;
		}
		label = strdup_printf("%s:%s:%s", metrics ? "metrics" : "tcp", host, port);
		r = add_listener(s, fd, false, tls, NULL, label ? label : "tcp");
		if (r >= 0 && metrics)
			list_entry(s->listeners.prev, struct listener, link)->metrics = true;
		if (r < 0) {
			close(fd);
			freeaddrinfo(res);
			return r;
		}
		bound++;
	}
	freeaddrinfo(res);
	if (bound == 0) {
		log_error("%s %s:%s: no address to bind", flag, host, port);
		return -EADDRNOTAVAIL;
	}
	return 0;
}

int
server_listen_tcp(struct server *s, const char *host, const char *port, SSL_CTX *tls)
{
	return listen_tcp(s, host, port, tls, false, "--listen");
}

int
server_listen_tcp_flag(struct server *s, const char *host, const char *port, SSL_CTX *tls,
                       const char *flag)
{
	return listen_tcp(s, host, port, tls, false, flag);
}

int
server_listen_metrics(struct server *s, const char *host, const char *port)
{
	return listen_tcp(s, host, port, NULL, true, "--metrics-listen");
}

void
server_sweep(struct server *s, uint64_t now_ms)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &s->conns) {
		struct conn *c = list_entry(n, struct conn, link);

		if (!c->deadline || now_ms < c->deadline)
			continue;
		if (c->state == CONN_READING && http_req_started(&c->hp)) {
			/* a slow or stalled request: say so, then close */
			body_abandon(c);
			fault(c, &(struct server_fault){ .kind = SERVER_FAULT_TIMEOUT });
			if (c->state != CONN_CLOSING)
				c->deadline = now_ms + 1000; /* the answer gets a second */
			continue;
		}
		conn_close(c);
	}
}

unsigned
server_connection_count(const struct server *s)
{
	return s->nconns;
}
