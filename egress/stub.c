/* stub.c: the egress DNS stub (worker.h, dns.h): one thread answering guests' queries from
 * the sandbox's policy alone. An allowed name's A record is the host side of the guest's link
 * (its connection then comes to the proxy, which resolves the name itself), anything else
 * NXDOMAIN or an empty answer; nothing is ever forwarded, so a name a guest makes up never
 * leaves the host. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "dns.h"
#include "log.h"
#include "util.h"
#include "worker-internal.h"

struct stub {
	struct worker *w;
	int fd;
};

/* Sends the answer from the address the query was sent to (the socket may be bound to any
 * address; the redirect chose one, and the guest's conntrack entry expects it back). */
static void
answer(int fd, const struct sockaddr_in *to, const struct in_pktinfo *pi, const uint8_t *out,
       size_t len)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct in_pktinfo))];
		struct cmsghdr align;
	} cbuf = {};
	struct iovec iov = { .iov_base = (void *)out, .iov_len = len };
	struct msghdr mh = {
		.msg_name = (void *)to, .msg_namelen = sizeof(*to), .msg_iov = &iov, .msg_iovlen = 1
	};

	if (pi) {
		struct cmsghdr *cm;
		struct in_pktinfo reply = { .ipi_spec_dst = pi->ipi_addr };

		mh.msg_control = cbuf.buf;
		mh.msg_controllen = sizeof(cbuf.buf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = IPPROTO_IP;
		cm->cmsg_type = IP_PKTINFO;
		cm->cmsg_len = CMSG_LEN(sizeof(reply));
		memcpy(CMSG_DATA(cm), &reply, sizeof(reply));
	}
	(void)sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void
one_query(struct stub *s, const uint8_t *pkt, size_t len, const struct sockaddr_in *from,
          const struct in_pktinfo *pi)
{
	struct worker *w = s->w;
	uint8_t out[DNS_MSG_MAX];
	char id[WORKER_ID_MAX + 1];
	struct decision d = { .id = id, .via = "dns", .port = 53 };
	struct dns_query q;
	struct wsandbox *sb;
	struct in_addr host = {};
	size_t n;

	/* a query from no known guest gets nothing at all, not even FORMERR; like a connection,
	 * a query that comes after sandboxd sent a "set" is decided by it */
	worker_lock_settled(w);
	sb = worker_sandbox_by_guest(w, from->sin_addr);
	pthread_mutex_unlock(&w->lock);
	if (!sb)
		return;
	if (dns_parse_query(pkt, len, &q) < 0) {
		uint8_t bad[DNS_NAME_MAX];
		size_t bad_len = dns_bad_name(pkt, len, bad);

		n = dns_formerr(pkt, len, out);
		if (n > 0)
			answer(s->fd, from, pi, out, n);
		if (bad_len == 0)
			return; /* not a query at all: nothing to report */
		/* a query for something no policy can name: refused and reported like a Host
		 * that is no host name, without the name (sandboxd takes DNS names only); the
		 * worker's log line quotes what was asked */
		pthread_mutex_lock(&w->lock);
		sb = worker_sandbox_by_guest(w, from->sin_addr);
		if (sb)
			memcpy(id, sb->id, sizeof(id));
		pthread_mutex_unlock(&w->lock);
		if (!sb)
			return;
		d.reason = "not a host name";
		d.raw_name = (const char *)bad;
		d.raw_len = bad_len;
		worker_decision(w, &d);
		return;
	}
	pthread_mutex_lock(&w->lock);
	sb = worker_sandbox_by_guest(w, from->sin_addr);
	if (sb) {
		memcpy(id, sb->id, sizeof(id));
		host = sb->host;
		d.allowed = matcher_allows(sb->net, q.name, &d.reason);
	}
	pthread_mutex_unlock(&w->lock);
	if (!sb)
		return;
	n = dns_build_answer(&q, pkt, d.allowed ? DNS_ALLOW : DNS_REFUSE, host.s_addr, out);
	answer(s->fd, from, pi, out, n);
	d.name = q.name;
	worker_decision(w, &d);
}

static void *
stub_thread(void *arg)
{
	struct stub *s = arg;

	for (;;) {
		/* one byte more than a query may hold, so an oversized one is seen as such */
		uint8_t pkt[DNS_MSG_MAX + 1];
		union {
			char buf[CMSG_SPACE(sizeof(struct in_pktinfo)) + 64];
			struct cmsghdr align;
		} cbuf;
		struct sockaddr_in from;
		struct iovec iov = { .iov_base = pkt, .iov_len = sizeof(pkt) };
		struct msghdr mh = { .msg_name = &from,
			             .msg_namelen = sizeof(from),
			             .msg_iov = &iov,
			             .msg_iovlen = 1,
			             .msg_control = cbuf.buf,
			             .msg_controllen = sizeof(cbuf.buf) };
		const struct in_pktinfo *pi = NULL;
		struct in_pktinfo pinfo;
		struct cmsghdr *cm;
		ssize_t n;

		struct pollfd pf = { .fd = s->fd, .events = POLLIN };

		/* the socket may be non-blocking (it is sandboxd's too): wait here */
		if (poll(&pf, 1, -1) < 0)
			continue;
		n = recvmsg(s->fd, &mh, MSG_DONTWAIT);
		if (n < 0) {
			if (errno != EINTR && errno != EAGAIN) {
				log_warning("dns: receive: %s", strerror(errno));
				usleep(10000); /* whatever it was, not a busy loop */
			}
			continue;
		}
		if (mh.msg_namelen != sizeof(from) || from.sin_family != AF_INET)
			continue;
		for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
				memcpy(&pinfo, CMSG_DATA(cm), sizeof(pinfo));
				pi = &pinfo;
			}
		one_query(s, pkt, (mh.msg_flags & MSG_TRUNC) ? sizeof(pkt) : (size_t)n, &from, pi);
	}
	return NULL;
}

int
stub_start(struct worker *w, int fd)
{
	static struct stub s;
	pthread_attr_t attr;
	pthread_t t;
	int one = 1, r;

	s.w = w;
	s.fd = fd;
	/* answers leave from the address each query came to */
	if (setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)) < 0)
		log_warning("dns: IP_PKTINFO: %s; answering from the routed address",
		            strerror(errno));
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, stub_thread, &s);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		log_error("dns: cannot start its thread: %s", strerror(r));
		return -r;
	}
	return 0;
}
