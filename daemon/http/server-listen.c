/* server-listen.c: the listeners of server.c's connections (a unix socket, TCP with TLS or not,
 * the metrics listener): accepting within each listener's budget and each client address's
 * share, making room by closing the oldest idle connection that never authenticated, the
 * server's life, and the sweep of slow and idle connections; see server.h. */
#include <fcntl.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include "log.h"
#include "server-internal.h"
#include "util.h"

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
	server_conn_close(oldest);
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
				server_conn_free(c);
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
		if (loop_add(s->loop, &c->src, fd, EPOLLIN | EPOLLRDHUP, server_conn_io, c) < 0) {
			server_conn_free(c);
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
			server_conn_flush(c);
		server_conn_close(c);
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
			server_conn_timed_out(c);
			if (c->state != CONN_CLOSING)
				c->deadline = now_ms + 1000; /* the answer gets a second */
			continue;
		}
		server_conn_close(c);
	}
}

unsigned
server_connection_count(const struct server *s)
{
	return s->nconns;
}
