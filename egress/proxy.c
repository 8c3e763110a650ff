/* proxy.c: the egress proxy's connections (worker.h). A pool of threads accepts them, each
 * running the connection it accepted to its end before accepting the next: the guest's first
 * bytes give the name (TLS SNI or the HTTP Host), the sandbox's policy decides before anything
 * is resolved or dialled, the name is resolved afresh and only acceptable addresses are
 * dialled, then bytes are spliced both ways through pipes with half-close. On HTTP every later
 * request head of the connection is read too: a second Host ends it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
/* resolv.h brings sys/param.h, whose MIN and MAX give way to macro.h's */
#include <resolv.h>
#undef MIN
#undef MAX
#include "httphead.h"
#include "log.h"
#include "sni.h"
#include "util.h"
#include "worker-internal.h"

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80 /* linux/netfilter_ipv4.h */
#endif

/* A connection's thread needs little stack (getaddrinfo's, the parsers'); thousands of them
 * must fit. The sanitizers' redzones need more. */
#if defined(__SANITIZE_ADDRESS__)
#define CONN_STACK (2u * 1024 * 1024)
#else
#define CONN_STACK (256u * 1024)
#endif
#define BUF_MAX SNI_READ_MAX         /* the first bytes; on HTTP, each request head */
#define HANDSHAKE_READS_MAX 512      /* pieces a name may come in (each one is parsed again) */
#define ADDRS_MAX 16                 /* addresses of a name tried */
#define ATTEMPT_MS_MIN 2000          /* an address's share of WORKER_CONNECT_MS, at least */
#define PIPE_BIG (1u << 20)          /* a bulk transfer's pipe: fewer, larger splices */
#define PIPE_GROW_AFTER (256u << 10) /* bytes moved before a direction counts as bulk */
#define OWN_ADDRS_MS 1000            /* the host's own addresses are listed at most this old */
#define POOL_IDLE_MAX 64             /* threads kept waiting for a connection when it is quiet */
#define ACCEPT_PAUSE_MS 100          /* out of fds or memory: accepting waits this long */
#define LINGER_MS 1000               /* after a 403/502: the guest's last bytes dropped */
#define LINGER_BYTES_MAX (64u << 10) /* for this long, and at most this much */

_Static_assert(BUF_MAX >= HTTPHEAD_MAX, "a request head fits the buffer");

/* Which resolv.conf a thread's resolver state was loaded from (resolver_no_search()). */
struct resolv_id {
	bool ok;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

/* A pipe a thread keeps from one connection to the next: only ever an empty one, at its
 * default size (pipe_release()). -1 when there is none. */
struct pipe_fds {
	int r, w;
	size_t cap;
};

/* One direction's pipe: bytes spliced in from one socket and out to the other. */
struct pipe_dir {
	int r, w; /* -1 until the relay needs it */
	size_t fill, cap;
	bool eof;  /* the source reached its end */
	bool done; /* and everything went out: the destination was shut for writing */
	bool grown;
	uint64_t moved; /* bytes written to the destination */
};

enum http_state {
	HTTP_HEAD,
	HTTP_BODY,
	HTTP_CHUNKED,
};

/* One pool thread's connection: everything up to buf is the current connection's and is
 * zeroed for each one (conn_take()); buf holds only what [start, end) says, and what follows
 * it is the thread's own. */
struct proxy {
	struct wconn c; /* the registry's part */
	struct worker *w;
	bool tls;
	unsigned port;
	size_t start, end, fwd;
	enum http_state hstate;
	size_t head_seen; /* of the unread bytes, those already known to end no head */
	uint64_t body_left;
	struct chunked ch;
	struct pipe_dir up;   /* guest to server (TLS only; HTTP goes through buf) */
	struct pipe_dir down; /* server to guest */
	char addr[INET6_ADDRSTRLEN];
	char refused[INET6_ADDRSTRLEN]; /* the first refused address the name resolved to */
	char why[160];
	/* a later request refused on an allowed connection */
	const char *deny_reason;
	char deny_name[HTTPHEAD_HOST_MAX + 1];

	/* guest to server goes through buf: the bytes read to find the name, and on HTTP every
	 * request head and chunked body; [start, end) is unread, its first fwd bytes checked
	 * and due to the server */
	uint8_t buf[BUF_MAX];
	struct pipe_fds spare_up, spare_down; /* kept for the next connection */
	struct resolv_id resolv;
};

/* The threads that accept and run connections. Each one waits in accept() on the (blocking)
 * listening socket, so the kernel hands a connection to exactly one of them, which runs it to
 * its end and then waits for the next: no thread is created per connection, and no other
 * thread is woken to hand it over. The pool grows when the last waiting thread takes a
 * connection, and shrinks when more than POOL_IDLE_MAX would wait. */
static struct {
	pthread_mutex_t lock;
	struct worker *w;
	int lfd;
	bool nodelay;       /* accepted sockets inherit TCP_NODELAY from lfd */
	unsigned threads;   /* alive */
	unsigned idle;      /* waiting in accept(), or on their way there */
	unsigned max;       /* threads: every connection the caps let through, and one to refuse */
	uint64_t warned_at; /* the last warning about accepting or growing, ms */
	pthread_attr_t attr;
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER, .lfd = -1 };

/* ---- addresses never dialled ---- */

static bool
v4_refused(uint32_t a)
{
	return (a >> 24) == 0 ||                 /* "this network", unspecified */
	       (a >> 24) == 127 ||               /* loopback */
	       (a >> 24) == 10 ||                /* private */
	       (a & 0xfff00000) == 0xac100000 || /* 172.16/12 */
	       (a & 0xffff0000) == 0xc0a80000 || /* 192.168/16 */
	       (a & 0xffff0000) == 0xa9fe0000 || /* link-local, the metadata address within */
	       (a & 0xffc00000) == 0x64400000 || /* CGNAT 100.64/10 */
	       /* IETF protocol assignments 192.0.0/24 (DS-Lite's B4 and AFTR among them) and
	        * benchmarking 198.18/15: not globally reachable (RFC 6890), so no public name's
	        * service is there, and networks do use them inside */
	       (a & 0xffffff00) == 0xc0000000 || (a & 0xfffe0000) == 0xc6120000 ||
	       (a >> 28) >= 0xe; /* multicast, reserved 240/4, broadcast */
}

/* The IPv4 address inside an IPv6 one that reaches it: IPv4-mapped, SIIT, NAT64, 6to4, and
 * Teredo's client (RFC 4380: the last 32 bits, inverted). */
static bool
embedded_v4(const struct in6_addr *a6, uint32_t *ret)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const uint8_t siit[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0 };
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
	static const uint8_t teredo[4] = { 0x20, 0x01, 0, 0 };
	const uint8_t *b = a6->s6_addr;
	uint32_t v;

	if (memcmp(b, mapped, 12) == 0 || memcmp(b, siit, 12) == 0 || memcmp(b, nat64, 12) == 0)
		memcpy(&v, b + 12, 4);
	else if (b[0] == 0x20 && b[1] == 0x02)
		memcpy(&v, b + 2, 4);
	else if (memcmp(b, teredo, 4) == 0) {
		memcpy(&v, b + 12, 4);
		v = ~v;
	} else
		return false;
	*ret = ntohl(v);
	return true;
}

bool
proxy_addr_refused(const struct sockaddr *sa)
{
	static const uint8_t zero[12];
	const struct in6_addr *a6;
	const uint8_t *b;
	uint32_t v4;

	if (sa->sa_family == AF_INET)
		return v4_refused(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	if (sa->sa_family != AF_INET6)
		return true;
	a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	b = a6->s6_addr;
	if (memcmp(b, zero, 12) == 0) /* ::, ::1 and the deprecated IPv4-compatible ::/96 */
		return true;
	if ((b[0] & 0xfe) == 0xfc) /* unique local fc00::/7 */
		return true;
	if (b[0] == 0xfe && (b[1] & 0x80) == 0x80) /* link-local fe80::/10, site-local fec0::/10 */
		return true;
	if (b[0] == 0xff) /* multicast */
		return true;
	if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1)
		return true; /* local-use NAT64 64:ff9b:1::/48, whatever it embeds */
	if (b[0] == 1 && memcmp(b + 1, zero, 7) == 0)
		return true; /* discard-only 100::/64 */
	if (embedded_v4(a6, &v4))
		return v4_refused(v4);
	return false;
}

/* The host's own addresses, listed at most OWN_ADDRS_MS ago: a name resolving to one of them
 * would reach the host's services (sandboxd's API among them) from a guest. */
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sockaddr_storage *own;
static size_t n_own;
static uint64_t own_at;
static bool own_ok;

static void
own_refresh_locked(void)
{
	struct ifaddrs *ifa = NULL, *i;
	struct sockaddr_storage *v;
	size_t n = 0;

	if (getifaddrs(&ifa) < 0)
		return;
	for (i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr &&
		    (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
			n++;
	v = calloc(MAX(n, (size_t)1), sizeof(*v));
	if (!v) {
		freeifaddrs(ifa);
		return;
	}
	n = 0;
	for (i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
			memcpy(&v[n++], i->ifa_addr, sizeof(struct sockaddr_in));
		else if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6)
			memcpy(&v[n++], i->ifa_addr, sizeof(struct sockaddr_in6));
	freeifaddrs(ifa);
	free(own);
	own = v;
	n_own = n;
	own_at = now_mono_ms();
	own_ok = true;
}

static bool
addr_is_own(const struct sockaddr *sa)
{
	uint32_t v4 = 0;
	bool is_v4 = false, found = false;
	struct in6_addr a6 = {};

	if (sa->sa_family == AF_INET) {
		v4 = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
		is_v4 = true;
	} else {
		a6 = ((const struct sockaddr_in6 *)sa)->sin6_addr;
		is_v4 = embedded_v4(&a6, &v4);
	}
	pthread_mutex_lock(&own_lock);
	if (!own_ok || now_mono_ms() - own_at >= OWN_ADDRS_MS)
		own_refresh_locked();
	if (!own_ok)
		found = true; /* never listed: fail closed */
	for (size_t i = 0; i < n_own && !found; i++) {
		if (own[i].ss_family == AF_INET)
			found = is_v4 &&
			        ntohl(((struct sockaddr_in *)&own[i])->sin_addr.s_addr) == v4;
		else if (!is_v4)
			found = memcmp(&((struct sockaddr_in6 *)&own[i])->sin6_addr, &a6,
			               sizeof(a6)) == 0;
	}
	pthread_mutex_unlock(&own_lock);
	return found;
}

/* Whether a connection to sa would stay on this host: asked of the kernel's routing at the
 * moment of dialling, so it covers what the list above cannot (a range routed to the host
 * with a local route, an address added within the last OWN_ADDRS_MS). A datagram socket
 * "connected" there (nothing is sent) gets the source address its route gives, and a local
 * route gives the destination itself (RFC 6724 rule 1 for IPv6). */
static bool
addr_routes_local(const struct sockaddr *sa, socklen_t sl)
{
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	_cleanup_close_ int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return true; /* cannot tell: fail closed */
	if (connect(fd, sa, sl) < 0)
		return false; /* no route: the dial fails by itself, and says why */
	if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0 || me.ss_family != sa->sa_family)
		return true;
	if (sa->sa_family == AF_INET)
		return ((struct sockaddr_in *)&me)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
	return memcmp(&((struct sockaddr_in6 *)&me)->sin6_addr,
	              &((const struct sockaddr_in6 *)sa)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* The name is resolved as the policy decided it, never with the host's search domains
 * appended: "app.example" that does not exist must not become "app.example.corp.internal",
 * another name, whose address nobody allowed. The resolver state is this thread's own, loaded
 * from resolv.conf again whenever the file is not the one loaded last (as glibc itself tells:
 * its identity, size and times). RES_NORELOAD: without it glibc's lookup, on a thread whose
 * state res_init() had loaded before, may find that state differs from the process's current
 * configuration and replace it with that one, search domains and all (a pooled thread's
 * second connection did). */
static void
resolver_no_search(struct resolv_id *last)
{
	struct resolv_id now = { .ok = true };
	struct stat st;

	if (stat(_PATH_RESCONF, &st) == 0) {
		now.dev = st.st_dev;
		now.ino = st.st_ino;
		now.size = st.st_size;
		now.mtime = st.st_mtim;
		now.ctime = st.st_ctim;
	} else
		now.ok = false; /* no file: glibc's defaults, loaded every time */
	if (now.ok && last->ok && now.dev == last->dev && now.ino == last->ino &&
	    now.size == last->size && now.mtime.tv_sec == last->mtime.tv_sec &&
	    now.mtime.tv_nsec == last->mtime.tv_nsec && now.ctime.tv_sec == last->ctime.tv_sec &&
	    now.ctime.tv_nsec == last->ctime.tv_nsec)
		return;
	*last = (struct resolv_id){};
	if (res_init() == 0) {
		_res.options &= ~(unsigned long)(RES_DNSRCH | RES_DEFNAMES);
		_res.options |= RES_NORELOAD;
		*last = now;
	}
}

/* ---- the first bytes ---- */

/* The port the guest dialled, from the redirect; 0 when it was not redirected (a test or a
 * benchmark dialling the proxy itself). */
static unsigned
original_port(int fd)
{
	struct sockaddr_in o, l;
	socklen_t ol = sizeof(o), ll = sizeof(l);

	if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &o, &ol) < 0 || o.sin_family != AF_INET)
		return 0;
	/* conntrack without NAT reports the proxy's own address */
	if (getsockname(fd, (struct sockaddr *)&l, &ll) == 0 && l.sin_family == AF_INET &&
	    l.sin_addr.s_addr == o.sin_addr.s_addr && l.sin_port == o.sin_port)
		return 0;
	return ntohs(o.sin_port);
}

/* Reads until the name is known: 1 with name, -1 refused (*why), 0 to close quietly (nothing
 * or not enough sent before the handshake timeout, or the guest went away). */
static int
read_name(struct proxy *p, char name[static SNI_NAME_MAX + 1], const char **why)
{
	uint64_t deadline = now_mono_ms() + p->w->handshake_ms;
	unsigned reads = 0;
	bool wait = false; /* the first bytes are often there already when it is accepted */

	for (;;) {
		struct pollfd pf = { .fd = p->c.cfd, .events = POLLIN };
		uint64_t now = now_mono_ms();
		ssize_t n;
		int k;

		if (wait) {
			if (now >= deadline)
				return 0;
			k = poll(&pf, 1, (int)MIN(deadline - now, (uint64_t)INT32_MAX));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				return 0;
		}
		wait = true;
		n = read(p->c.cfd, p->buf + p->end, sizeof(p->buf) - p->end);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return 0;
		p->end += (size_t)n;
		p->tls = p->buf[0] == 0x16; /* a TLS handshake record */
		if (++reads > HANDSHAKE_READS_MAX) {
			*why = "a name sent in too many pieces";
			return -1;
		}
		if (p->tls) {
			switch (sni_parse(p->buf, p->end, name, why)) {
			case SNI_FOUND:
				return 1;
			case SNI_NEED_MORE:
				continue;
			case SNI_NO_NAME:
				*why = "no hostname";
				return -1;
			case SNI_INVALID:
				if (!*why)
					*why = "not a TLS ClientHello";
				return -1;
			}
		} else {
			struct httphead h;

			switch (httphead_parse(p->buf, p->end, &h, why)) {
			case HTTPHEAD_DONE:
				memcpy(name, h.host, strlen(h.host) + 1);
				return 1;
			case HTTPHEAD_NEED_MORE:
				continue;
			case HTTPHEAD_INVALID:
				if (!*why)
					*why = "not an HTTP request";
				return -1;
			}
		}
		*why = "unreadable";
		return -1;
	}
}

/* ---- dialling ---- */

static void
format_addr(const struct sockaddr *sa, char out[static INET6_ADDRSTRLEN])
{
	const void *a = sa->sa_family == AF_INET
	                        ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
	                        : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;

	if (!inet_ntop(sa->sa_family, a, out, INET6_ADDRSTRLEN))
		memcpy(out, "?", 2);
}

/* One address, within ms. 0 or -errno. */
static int
connect_one(int fd, const struct sockaddr *sa, socklen_t sl, int ms)
{
	struct pollfd pf = { .fd = fd, .events = POLLOUT };
	int err = 0;
	socklen_t el = sizeof(err);
	int k;

	if (connect(fd, sa, sl) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -errno;
	do
		k = poll(&pf, 1, ms);
	while (k < 0 && errno == EINTR);
	if (k == 0)
		return -ETIMEDOUT;
	if (k < 0)
		return -errno;
	/* writable without an error or hangup: connected (often at once: over a local link
	 * the answer to the SYN is processed before connect() returns) */
	if (pf.revents == POLLOUT)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		return -errno;
	return -err;
}

/* Resolves the name afresh and dials its acceptable addresses in order. 1 connected (c.ufd
 * set), 0 cut meanwhile, -1 failed: d says why (and whether it was a refusal). */
static int
dial(struct proxy *p, const char *name, struct decision *d)
{
	/* no AI_ADDRCONFIG: every address is checked below anyway, and it cost a netlink dump
	 * of the host's addresses per lookup; an IPv6 address on a host without IPv6 fails its
	 * dial at once, after the IPv4 ones (getaddrinfo sorts unreachable ones last) */
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL, *ai;
	struct sockaddr_storage cand[ADDRS_MAX];
	socklen_t cand_len[ADDRS_MAX];
	char refused[INET6_ADDRSTRLEN] = "";
	size_t n = 0;
	uint64_t deadline;
	int g, err = 0;

	resolver_no_search(&p->resolv);
	g = getaddrinfo(name, NULL, &hints, &res);
	if (g != 0) {
		/* allowed by the policy, but nothing to dial: a denial, as much as a name that
		 * resolves only to refused addresses (nothing left the host) */
		d->allowed = false;
		if (g == EAI_NONAME || g == EAI_NODATA)
			d->reason = "the name does not resolve";
		else {
			snprintf(p->why, sizeof(p->why), "the name could not be resolved: %s",
			         gai_strerror(g));
			d->reason = p->why;
		}
		return -1;
	}
	for (ai = res; ai && n < ADDRS_MAX; ai = ai->ai_next) {
		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
		    ai->ai_addrlen > sizeof(cand[0]))
			continue;
		memcpy(&cand[n], ai->ai_addr, ai->ai_addrlen);
		cand_len[n] = ai->ai_addrlen;
		if (ai->ai_family == AF_INET)
			((struct sockaddr_in *)&cand[n])->sin_port = htons((uint16_t)p->port);
		else
			((struct sockaddr_in6 *)&cand[n])->sin6_port = htons((uint16_t)p->port);
		if (proxy_addr_refused(ai->ai_addr) || addr_is_own(ai->ai_addr) ||
		    addr_routes_local((struct sockaddr *)&cand[n], cand_len[n])) {
			if (!refused[0])
				format_addr(ai->ai_addr, refused);
			continue;
		}
		n++;
	}
	freeaddrinfo(res);
	if (n == 0) {
		d->allowed = false;
		d->reason = refused[0] ? "resolves only to refused addresses"
		                       : "the name does not resolve";
		/* said with the denial, within its log rate: a guest decides how often */
		if (refused[0]) {
			memcpy(p->refused, refused, sizeof(refused));
			d->refused = p->refused;
		}
		return -1;
	}

	deadline = now_mono_ms() + WORKER_CONNECT_MS;
	for (size_t i = 0; i < n; i++) {
		uint64_t now = now_mono_ms();
		int fd, ms;

		if (now >= deadline) {
			err = -ETIMEDOUT;
			break;
		}
		/* a share of what is left, so one silent address cannot starve the rest */
		ms = (int)MIN(deadline - now,
		              MAX((deadline - now) / (n - i), (uint64_t)ATTEMPT_MS_MIN));
		fd = socket(cand[i].ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		pthread_mutex_lock(&p->w->lock);
		if (p->c.cut) {
			pthread_mutex_unlock(&p->w->lock);
			close(fd);
			return 0;
		}
		p->c.ufd = fd; /* from now on a cut reaches it */
		pthread_mutex_unlock(&p->w->lock);
		format_addr((struct sockaddr *)&cand[i], p->addr);
		err = connect_one(fd, (struct sockaddr *)&cand[i], cand_len[i], ms);
		if (err == 0)
			return 1;
		pthread_mutex_lock(&p->w->lock);
		p->c.ufd = -1;
		pthread_mutex_unlock(&p->w->lock);
		close(fd);
		if (p->c.cut)
			return 0;
	}
	snprintf(p->why, sizeof(p->why), "could not connect: %s", strerror(-err));
	d->reason = p->why;
	return -1;
}

/* ---- relaying ---- */

/* The direction's pipe: the empty one the thread kept from its last connection, else a new
 * one at the default size. 0 or -errno. */
static int
pipe_take(struct pipe_dir *d, struct pipe_fds *spare)
{
	int fds[2], sz;

	if (spare->r >= 0) {
		d->r = spare->r;
		d->w = spare->w;
		d->cap = spare->cap;
		*spare = (struct pipe_fds){ .r = -1, .w = -1 };
		return 0;
	}
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	d->r = fds[0];
	d->w = fds[1];
	sz = fcntl(d->w, F_GETPIPE_SZ);
	d->cap = sz > 0 ? (size_t)sz : 4096;
	return 0;
}

static void
pipe_close(struct pipe_dir *d)
{
	d->r = safe_close(d->r);
	d->w = safe_close(d->w);
}

/* After the connection: its pipe is kept for the thread's next connection only when nothing
 * is left in it, by this side's count and by the kernel's (bytes carried over would reach
 * another connection, maybe another sandbox's guest), and when it was never grown (a big pipe
 * kept idle would hold the user's pipe allowance). Anything else is closed. */
static void
pipe_release(struct pipe_dir *d, struct pipe_fds *spare)
{
	int left = -1;

	if (d->r >= 0 && spare->r < 0 && d->fill == 0 && !d->grown &&
	    ioctl(d->r, FIONREAD, &left) == 0 && left == 0) {
		*spare = (struct pipe_fds){ .r = d->r, .w = d->w, .cap = d->cap };
		d->r = d->w = -1;
		return;
	}
	pipe_close(d);
}

/* Splices what src has into the pipe and what the pipe holds into dst, until neither moves;
 * half-closes dst once src ended and the pipe is empty. 0 or -errno. */
static int
pump(struct pipe_dir *d, int src, int dst)
{
	for (;;) {
		bool moved = false;
		ssize_t n;

		if (!d->eof && d->fill < d->cap) {
			n = splice(src, NULL, d->w, NULL, d->cap - d->fill,
			           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n > 0) {
				d->fill += (size_t)n;
				moved = true;
			} else if (n == 0)
				d->eof = true;
			else if (errno != EAGAIN && errno != EINTR)
				return -errno;
		}
		if (d->fill > 0) {
			n = splice(d->r, NULL, dst, NULL, d->fill,
			           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n > 0) {
				d->fill -= (size_t)n;
				d->moved += (uint64_t)n;
				moved = true;
			} else if (n < 0 && errno != EAGAIN && errno != EINTR)
				return -errno;
		}
		/* a bulk transfer gets a big pipe (if the user's pipe allowance has room); a
		 * short exchange keeps the default and its memory */
		if (!d->grown && d->moved >= PIPE_GROW_AFTER) {
			int sz = fcntl(d->w, F_SETPIPE_SZ, PIPE_BIG);

			d->grown = true;
			if (sz > 0)
				d->cap = (size_t)sz;
		}
		if (d->eof && d->fill == 0 && !d->done) {
			(void)shutdown(dst, SHUT_WR);
			d->done = true;
		}
		if (!moved || d->done)
			return 0;
	}
}

/* What the buffered bytes of an HTTP connection are: the next head (checked: the same Host),
 * or body. Sets fwd, or leaves it 0 when more bytes are needed. -EPROTO: refused. */
static int
http_advance(struct proxy *p)
{
	size_t avail = p->end - p->start, used, from;
	const uint8_t *b = p->buf + p->start;
	const char *why = NULL;
	struct httphead h;

	switch (p->hstate) {
	case HTTP_HEAD:
		/* Nothing of a head goes out before it is whole, and it is whole only at its blank
		 * line: it is parsed once one may have come (or the buffer is full), not again for
		 * every line trickling in, which would parse up to 16 KiB once per line a guest
		 * sends apart (quadratic work, its choice). A bad line is then found at the end. */
		from = p->head_seen > 2 ? p->head_seen - 2 : 0;
		if (avail < HTTPHEAD_MAX && !memmem(b + from, avail - from, "\n\r\n", 3) &&
		    !memmem(b + from, avail - from, "\n\n", 2)) {
			p->head_seen = avail;
			return 0;
		}
		switch (httphead_parse(b, avail, &h, &why)) {
		case HTTPHEAD_NEED_MORE:
			p->head_seen = avail;
			return 0;
		case HTTPHEAD_INVALID:
			p->deny_reason = why ? why : "not an HTTP request";
			return -EPROTO;
		case HTTPHEAD_DONE:
			break;
		}
		if (!streq(h.host, p->c.name)) {
			memcpy(p->deny_name, h.host, strlen(h.host) + 1);
			p->deny_reason = "second host on one connection";
			return -EPROTO;
		}
		p->fwd = h.head_len;
		p->head_seen = 0;
		if (h.chunked) {
			p->hstate = HTTP_CHUNKED;
			p->ch = (struct chunked)CHUNKED_INIT;
		} else if (h.has_length && h.body_len > 0) {
			/* a request without a length has no body (RFC 9112 6.3) */
			p->hstate = HTTP_BODY;
			p->body_left = h.body_len;
		}
		return 0;
	case HTTP_BODY:
		p->fwd = (size_t)MIN((uint64_t)avail, p->body_left);
		p->body_left -= p->fwd;
		if (p->body_left == 0)
			p->hstate = HTTP_HEAD;
		return 0;
	case HTTP_CHUNKED:
		switch (chunked_scan(&p->ch, b, avail, &used, &why)) {
		case CHUNKED_INVALID:
			memcpy(p->deny_name, p->c.name, strlen(p->c.name) + 1);
			p->deny_reason = why;
			return -EPROTO;
		case CHUNKED_DONE:
			p->hstate = HTTP_HEAD;
			break;
		case CHUNKED_MORE:
			break;
		}
		p->fwd = used;
		return 0;
	}
	return -EINVAL;
}

/* Guest to server: checked bytes from buf first; then TLS splices, HTTP reads through buf.
 * 0 or -errno (-EPROTO: a request refused). */
static int
up_step(struct proxy *p)
{
	int r;

	for (;;) {
		ssize_t n;

		if (p->up.done)
			return 0;
		if (p->fwd > 0) {
			n = send(p->c.ufd, p->buf + p->start, p->fwd, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return errno == EAGAIN ? 0 : -errno;
			}
			p->start += (size_t)n;
			p->fwd -= (size_t)n;
			p->up.moved += (uint64_t)n;
			continue;
		}
		if (p->start == p->end)
			p->start = p->end = 0;
		if (p->tls)
			return pump(&p->up, p->c.cfd, p->c.ufd);
		if (p->start < p->end) {
			r = http_advance(p);
			if (r < 0)
				return r;
			if (p->fwd > 0)
				continue;
		}
		/* HTTP wants more bytes (an unfinished head at EOF is never forwarded) */
		if (p->up.eof) {
			(void)shutdown(p->c.ufd, SHUT_WR);
			p->up.done = true;
			return 0;
		}
		if (p->start > 0) {
			memmove(p->buf, p->buf + p->start, p->end - p->start);
			p->end -= p->start;
			p->start = 0;
		}
		if (p->end == sizeof(p->buf)) {
			/* a head still unfinished at this size was refused by httphead */
			p->deny_reason = "a request head too long";
			return -EPROTO;
		}
		n = read(p->c.cfd, p->buf + p->end, sizeof(p->buf) - p->end);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -errno;
		}
		if (n == 0)
			p->up.eof = true;
		p->end += (size_t)n;
	}
}

static int
relay(struct proxy *p)
{
	int one = 1, r;

	/* the guest's side has it from the listening socket (pool.nodelay) */
	if (!pool.nodelay)
		(void)setsockopt(p->c.cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	(void)setsockopt(p->c.ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	r = pipe_take(&p->down, &p->spare_down);
	if (r >= 0 && p->tls)
		r = pipe_take(&p->up, &p->spare_up);
	if (r < 0)
		return r;
	/* each direction is stepped when one of its two ends is ready (both, the first time):
	 * a step runs until it would block, so nothing is left for later without an event */
	short rc = POLLIN | POLLOUT, ru = POLLIN | POLLOUT;

	for (;;) {
		struct pollfd pf[2] = { { .fd = p->c.cfd }, { .fd = p->c.ufd } };
		const short in = POLLIN | POLLHUP | POLLERR, out = POLLOUT | POLLHUP | POLLERR;

		if ((rc & in) || (ru & out)) {
			r = up_step(p);
			if (r < 0)
				return r;
		}
		if ((ru & in) || (rc & out)) {
			r = pump(&p->down, p->c.ufd, p->c.cfd);
			if (r < 0)
				return r;
		}
		if (p->up.done && p->down.done)
			return 0;
		if (!p->up.done) {
			if (p->fwd > 0 || (p->tls && p->up.fill > 0))
				pf[1].events |= POLLOUT;
			if (!p->up.eof && p->fwd == 0 && (!p->tls || p->up.fill < p->up.cap))
				pf[0].events |= POLLIN;
		}
		if (!p->down.done) {
			if (p->down.fill > 0)
				pf[0].events |= POLLOUT;
			if (!p->down.eof && p->down.fill < p->down.cap)
				pf[1].events |= POLLIN;
		}
		/* an fd nothing is waited for must not wake the loop with its HUP */
		for (size_t i = 0; i < 2; i++)
			if (pf[i].events == 0)
				pf[i].fd = -1;
		if (poll(pf, 2, -1) < 0) {
			if (errno != EINTR)
				return -errno;
			pf[0].revents = pf[1].revents = 0;
		}
		rc = pf[0].revents;
		ru = pf[1].revents;
	}
}

/* ---- a connection's life ---- */

/* A plain-HTTP guest whose request is refused by its sandbox's policy (403: the name is not on
 * the allow list, is on the deny list, the mode is none) or could not be taken anywhere (502:
 * its name does not resolve, resolves only to refused addresses, or did not answer) is told so
 * at once, in a page that names the name and the reason, the same reason its decision records,
 * rather than left with a closed connection to guess at. Both are safe to echo: the name passed
 * the Host parser (DNS characters only), the reason is this program's or the C library's. Then
 * the guest's side is shut for writing and what it still sends is read and dropped for a moment:
 * closing with unread bytes would reset the connection, and the reset could overtake the
 * answer. */
static void
answer_guest(struct proxy *p, const char *status, const char *name, const char *reason)
{
	char body[512], head[256];
	int nb, nh;
	uint64_t deadline;
	size_t drained = 0;

	nb = snprintf(body, sizeof(body), "sandboxd egress: '%s': %s\n", name, reason);
	if (nb < 0 || (size_t)nb >= sizeof(body))
		return;
	nh = snprintf(head, sizeof(head),
	              "HTTP/1.1 %s\r\n"
	              "Content-Type: text/plain; charset=us-ascii\r\n"
	              "Content-Length: %d\r\n"
	              "Cache-Control: no-store\r\n"
	              "Connection: close\r\n\r\n",
	              status, nb);
	if (nh < 0 || (size_t)nh >= sizeof(head))
		return;
	/* a fresh connection's send buffer takes both at once; a guest that filled it gets
	 * what fits */
	if (send(p->c.cfd, head, (size_t)nh, MSG_NOSIGNAL | MSG_DONTWAIT) != nh ||
	    send(p->c.cfd, body, (size_t)nb, MSG_NOSIGNAL | MSG_DONTWAIT) != nb)
		return;
	(void)shutdown(p->c.cfd, SHUT_WR);
	deadline = now_mono_ms() + LINGER_MS;
	for (;;) {
		struct pollfd pf = { .fd = p->c.cfd, .events = POLLIN };
		uint64_t now = now_mono_ms();
		char sink[4096];
		ssize_t n;

		if (now >= deadline || drained >= LINGER_BYTES_MAX)
			return;
		if (poll(&pf, 1, (int)(deadline - now)) <= 0)
			return;
		n = read(p->c.cfd, sink, sizeof(sink));
		if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
			return;
		if (n > 0)
			drained += (size_t)n;
	}
}

/* Leaves the registry (after which nothing else touches its fds), closes, reports. */
static void
finish(struct proxy *p, struct decision *d)
{
	struct worker *w = p->w;

	pthread_mutex_lock(&w->lock);
	if (p->c.sb) {
		list_remove(&p->c.node);
		p->c.sb->n_conns--;
		p->c.sb = NULL;
	}
	w->n_conns--;
	d->cut = p->c.cut;
	pthread_mutex_unlock(&w->lock);
	p->c.cfd = safe_close(p->c.cfd);
	p->c.ufd = safe_close(p->c.ufd);
	pipe_release(&p->up, &p->spare_up);
	pipe_release(&p->down, &p->spare_down);
	if (d->reason) {
		d->bytes_out = p->up.moved;
		d->bytes_in = p->down.moved;
		worker_decision(w, d);
	}
}

/* Runs a registered connection to its end. */
static void
conn_run(struct proxy *p)
{
	struct worker *w = p->w;
	char name[SNI_NAME_MAX + 1];
	struct decision d = { .id = p->c.id, .conn = true };
	const char *why = NULL;
	bool allowed = false;
	int r;

	r = read_name(p, name, &why);
	p->port = original_port(p->c.cfd);
	if (p->port == 0)
		p->port = p->tls ? 443 : 80;
	d.via = p->tls ? "tls" : "http";
	d.port = p->port;
	if (r == 0) /* nothing sent in time, or gone: not a decision (probes look like this) */
		goto out;
	if (r < 0) {
		d.reason = why;
		goto out;
	}
	d.name = name;

	/* decided and registered under the lock a policy update takes: either this sees the
	 * new policy or the update sees this connection's name and cuts it */
	pthread_mutex_lock(&w->lock);
	if (p->c.sb && !p->c.cut) {
		allowed = matcher_allows(p->c.sb->net, name, &d.reason);
		if (allowed)
			memcpy(p->c.name, name, strlen(name) + 1);
	}
	pthread_mutex_unlock(&w->lock);
	if (!d.reason) /* the sandbox went away meanwhile */
		goto out;
	if (!allowed) {
		/* plain HTTP is told why; TLS is closed at once, as below */
		if (!p->tls)
			answer_guest(p, "403 Forbidden", name, d.reason);
		goto out;
	}
	d.allowed = true;

	r = dial(p, name, &d);
	if (r > 0) {
		d.addr = p->addr;
		/* everything read so far goes first: TLS all of it, HTTP head by head */
		p->start = 0;
		p->fwd = p->tls ? p->end : 0;
		r = relay(p);
		if (r == -EPROTO) {
			/* a later request refused: reported apart, the connection ends */
			struct decision deny = { .id = p->c.id,
				                 .via = "http",
				                 .name = p->deny_name[0] ? p->deny_name : NULL,
				                 .port = p->port,
				                 .reason = p->deny_reason,
				                 .conn = true };

			worker_decision(w, &deny);
		}
	} else if (r == 0)
		d.addr = NULL; /* cut before it was dialled */
	else if (!p->tls)
		answer_guest(p, "502 Bad Gateway", name, d.reason);
	/* (TLS: the connection closes at once; no answer the guest would trust can be given) */
out:
	finish(p, &d);
}

/* Takes an accepted connection: registered in its sandbox and run, or refused with a decision
 * when over the caps (or when refuse says why already). A source no sandbox has is closed at
 * once, unreported. Consumes fd. */
static void
conn_take(struct proxy *p, int fd, const struct sockaddr_in *peer, const char *refuse)
{
	struct worker *w = pool.w;
	struct decision d = { .conn = true, .reason = refuse };
	char id[WORKER_ID_MAX + 1];
	struct wsandbox *sb;

	/* what sandboxd sent before this connection came (a new sandbox, a policy) holds for it */
	worker_lock_settled(w);
	sb = worker_sandbox_by_guest(w, peer->sin_addr);
	if (!sb) {
		pthread_mutex_unlock(&w->lock);
		close(fd);
		return;
	}
	memcpy(id, sb->id, sizeof(id));
	if (!d.reason && sb->n_conns >= WORKER_CONNS_PER_SANDBOX)
		d.reason = "too many connections from this sandbox";
	else if (!d.reason && w->n_conns >= w->max_conns)
		d.reason = "too many connections through the proxy";
	else if (!d.reason) {
		/* only what the last connection left behind is reset, not buf's 16 KiB */
		memset(p, 0, offsetof(struct proxy, buf));
		p->w = w;
		p->c.sb = sb;
		p->c.cfd = fd;
		p->c.ufd = -1;
		p->up.r = p->up.w = p->down.r = p->down.w = -1;
		memcpy(p->c.id, sb->id, sizeof(p->c.id));
		list_push_back(&sb->conns, &p->c.node);
		sb->n_conns++;
		w->n_conns++;
	}
	pthread_mutex_unlock(&w->lock);
	if (!d.reason) {
		conn_run(p);
		return;
	}
	/* which protocol it would have been is known from the port only, before reading */
	d.id = id;
	d.port = original_port(fd);
	d.via = d.port == 443 ? "tls" : "http";
	if (d.port == 0)
		d.port = 80;
	worker_decision(w, &d);
	close(fd);
}

/* ---- the pool ---- */

/* At most one warning a second, whichever thread meets the trouble. */
static bool
pool_may_warn(void)
{
	uint64_t now = now_mono_ms();
	bool may;

	pthread_mutex_lock(&pool.lock);
	may = pool.warned_at == 0 || now - pool.warned_at >= 1000;
	if (may)
		pool.warned_at = now;
	pthread_mutex_unlock(&pool.lock);
	return may;
}

static void *pool_thread(void *arg);

/* Starts a thread with a struct proxy of its own; the caller counted it in threads and idle
 * already. 0 or -errno. */
static int
pool_spawn(void)
{
	struct proxy *p = malloc(sizeof(*p)); /* not zeroed: conn_take resets what is used */
	pthread_t t;
	int r;

	if (!p)
		return -ENOMEM;
	p->spare_up = p->spare_down = (struct pipe_fds){ .r = -1, .w = -1 };
	p->resolv = (struct resolv_id){};
	r = pthread_create(&t, &pool.attr, pool_thread, p);
	if (r != 0) {
		free(p);
		return -r;
	}
	return 0;
}

/* accept() failed with err: waits as long as retrying at once would not help. */
static void
accept_failed(int err)
{
	struct pollfd pf = { .fd = pool.lfd, .events = POLLIN };

	switch (err) {
	case EAGAIN:
		/* someone made the shared listening socket non-blocking again: wait for it */
		(void)poll(&pf, 1, ACCEPT_PAUSE_MS);
		return;
	case EMFILE:
	case ENFILE:
	case ENOBUFS:
	case ENOMEM:
		if (pool_may_warn())
			log_warning("proxy: cannot accept: %s; pausing", strerror(err));
		(void)poll(NULL, 0, ACCEPT_PAUSE_MS);
		return;
	case EBADF:
	case EINVAL:
	case ENOTSOCK:
	case EOPNOTSUPP:
		if (pool_may_warn())
			log_error("proxy: cannot accept: %s", strerror(err));
		(void)poll(NULL, 0, ACCEPT_PAUSE_MS);
		return;
	default:
		/* EINTR, and a connection that failed before it was taken (ECONNABORTED, the
		 * network errors accept(2) passes on): the next one */
		return;
	}
}

static void *
pool_thread(void *arg)
{
	struct proxy *p = arg;

	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		const char *refuse = NULL;
		bool grow, alone;
		int fd, r;

		fd = accept4(pool.lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			accept_failed(errno);
			continue;
		}
		/* the last one waiting starts the next, so that one always waits; at the most,
		 * the threads still running connections come back */
		pthread_mutex_lock(&pool.lock);
		pool.idle--;
		grow = pool.idle == 0 && pool.threads < pool.max;
		if (grow) {
			pool.threads++;
			pool.idle++;
		}
		pthread_mutex_unlock(&pool.lock);
		if (grow && (r = pool_spawn()) < 0) {
			pthread_mutex_lock(&pool.lock);
			pool.threads--;
			pool.idle--;
			alone = pool.idle == 0;
			pthread_mutex_unlock(&pool.lock);
			if (pool_may_warn())
				log_warning("proxy: cannot start a thread: %s", strerror(-r));
			/* nobody would accept while this connection runs: it is refused, as the
			 * caps refuse, and this thread goes back to accepting */
			if (alone)
				refuse = "too many connections through the proxy";
		}
		/* the guest's own address, kept by the redirect, is all that says who it is */
		if (ss.ss_family == AF_INET)
			conn_take(p, fd, (const struct sockaddr_in *)&ss, refuse);
		else
			close(fd);

		pthread_mutex_lock(&pool.lock);
		if (pool.idle >= POOL_IDLE_MAX) {
			pool.threads--;
			pthread_mutex_unlock(&pool.lock);
			break;
		}
		pool.idle++;
		pthread_mutex_unlock(&pool.lock);
	}
	safe_close(p->spare_up.r);
	safe_close(p->spare_up.w);
	safe_close(p->spare_down.r);
	safe_close(p->spare_down.w);
	free(p);
	return NULL;
}

int
proxy_start(struct worker *w, int lfd)
{
	int fl = fcntl(lfd, F_GETFL), one = 1, r;

	/* blocking: each waiting thread sleeps in accept() and the kernel wakes one of them */
	if (fl < 0 || fcntl(lfd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		return log_error("proxy: cannot make the listening socket blocking: %s",
		                 strerror(errno)),
		       -errno;
	pool.nodelay = setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0;
	pool.w = w;
	pool.lfd = lfd;
	pool.max = w->max_conns + 1;
	pthread_attr_init(&pool.attr);
	pthread_attr_setdetachstate(&pool.attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&pool.attr, CONN_STACK);
	pool.threads = pool.idle = 1;
	r = pool_spawn();
	if (r < 0)
		return log_error("proxy: cannot start a thread: %s", strerror(-r)), r;
	return 0;
}
