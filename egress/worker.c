/* worker.c: the egress worker process (worker.h): its flags and sockets, dropping root, the
 * sandboxes sandboxd describes on the control channel (a "set" that tightens a policy cuts
 * the connections it no longer allows), and the decisions written back without ever waiting
 * for sandboxd. The main thread runs the control channel and writes the decisions; a pool of
 * threads accepts and runs the connections (proxy.c), one more answers DNS (stub.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include "log.h"
#include "util.h"
#include "worker-internal.h"
#include "worker.h"

#define FDS_PER_CONN 6 /* two sockets and two pipes: a connection's, or kept by its thread */

/* A "set" holds a whole policy: as many names as sandboxd lets a request allow and deny,
 * each quoted, with room for the rest of the line. A line over the limit is dropped, and a
 * policy dropped would leave the one before it in force. */
_Static_assert(2u * MATCHER_LIST_MAX * (NETNAME_MAX + 3) + 1024 <= WORKER_LINE_MAX,
               "the largest set fits a control line");
#define FDS_RESERVED 64
#define DENIAL_LOGS_PER_S 20

struct worker_options {
	int control_fd, proxy_fd, dns_fd;
	const char *proxy_listen, *dns_listen;
	bool have_uid, have_gid;
	uid_t uid;
	gid_t gid;
	unsigned handshake_ms;
};

/* ---- decisions to sandboxd ---- */

/* Writes what waits for sandboxd, in order (the line begun, the count of dropped lines, the
 * queue), until nothing is left or the socket is full. One thread writes at a time (writing),
 * without holding qlock while it sends, so the others queue their lines meanwhile instead of
 * waiting for it; it writes theirs too before it stops. Caller holds w->qlock. 0 (written, or
 * the rest waits for room or for the thread writing), -EPIPE and the like when sandboxd is
 * gone, -ENOMEM. */
static int
flush_locked(struct worker *w)
{
	int r = 0;

	if (w->writing)
		return 0;
	w->writing = true;
	for (;;) {
		ssize_t n;

		if (!w->out) {
			if (w->dropped > 0) {
				w->out = strdup_printf("{\"op\":\"dropped\",\"count\":%llu}\n",
				                       (unsigned long long)w->dropped);
				if (!w->out) {
					r = -ENOMEM;
					break;
				}
				w->dropped = 0;
			} else if (w->q_count > 0) {
				w->out = w->queue[w->q_head];
				w->q_head = (w->q_head + 1) % WORKER_EVENTS_MAX;
				w->q_count--;
			} else
				break;
			w->out_len = strlen(w->out);
			w->out_off = 0;
		}
		/* out is the writer's alone while it writes */
		pthread_mutex_unlock(&w->qlock);
		n = send(w->control_fd, w->out + w->out_off, w->out_len - w->out_off,
		         MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0)
			r = -errno;
		pthread_mutex_lock(&w->qlock);
		if (n < 0) {
			if (r == -EINTR)
				continue;
			if (r == -EAGAIN)
				r = 0;
			break;
		}
		w->out_off += (size_t)n;
		if (w->out_off == w->out_len) {
			free(w->out);
			w->out = NULL;
		}
	}
	w->writing = false;
	return r;
}

static bool
pending_locked(const struct worker *w)
{
	return w->out || w->q_count > 0 || w->dropped > 0;
}

/* Queues one line (owned, newline-terminated; NULL: out of memory, counted as dropped) and,
 * when nothing was waiting before it, writes it at once from this thread: the main thread is
 * woken only when sandboxd's socket is full (it then waits for room and writes the rest), not
 * once per connection. Never blocks on sandboxd. */
static void
queue_line(struct worker *w, char *line)
{
	uint64_t one = 1;
	bool queued = false, write_now, wake = false;

	pthread_mutex_lock(&w->qlock);
	/* else another thread is writing, or the main thread waits for room: either one writes
	 * this line after the others */
	write_now = !w->writing && !pending_locked(w);
	if (line && w->q_count < WORKER_EVENTS_MAX) {
		w->queue[(w->q_head + w->q_count) % WORKER_EVENTS_MAX] = line;
		w->q_count++;
		queued = true;
	} else
		w->dropped++;
	if (write_now)
		wake = flush_locked(w) < 0 || pending_locked(w);
	pthread_mutex_unlock(&w->qlock);
	if (!queued)
		free(line);
	if (wake)
		(void)!write(w->wake_fd, &one, sizeof(one));
}

/* Denials go to the log too, at most DENIAL_LOGS_PER_S a second: a guest decides how
 * many it causes, and the log is the host's. The events carry every one. */
static void
log_denial(const struct decision *d)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static uint64_t second, logged, suppressed;
	_cleanup_buf_ struct buf name = BUF_INIT(600);
	uint64_t now = now_mono_ms() / 1000, missed = 0;
	bool show;

	pthread_mutex_lock(&lock);
	if (now != second) {
		missed = suppressed;
		second = now;
		logged = suppressed = 0;
	}
	show = logged < DENIAL_LOGS_PER_S;
	if (show)
		logged++;
	else
		suppressed++;
	pthread_mutex_unlock(&lock);

	if (missed > 0)
		log_info("egress denied: %llu more denials not logged", (unsigned long long)missed);
	if (!show)
		return;
	/* names come from the parsers, which take DNS characters only; quoted all the same. What
	 * a guest sent that is no name is quoted the same way: every byte that is not printable
	 * ASCII escaped (R-S7) */
	if (d->name)
		(void)buf_put_quoted(&name, d->name, strlen(d->name), 253);
	else if (d->raw_name)
		(void)buf_put_quoted(&name, d->raw_name, d->raw_len, 253);
	else
		(void)buf_puts(&name, "(no name)");
	log_info("egress denied: sandbox '%s' %s %s port %u (%s%s%s)", d->id, d->via,
	         name.data ? name.data : "?", d->port, d->reason ? d->reason : "?",
	         d->refused ? ": " : "", d->refused ? d->refused : "");
}

/* s as a JSON string, quotes included; NULL as null. Every byte below 0x20 or over 0x7e is
 * escaped (worker.h's lines are ASCII; the names are DNS names, the reasons this program's own
 * or a C library's message, the id was checked), so a line is valid JSON whatever reached it. */
static int
put_json_string(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	int r;

	if (!s)
		return buf_puts(b, "null");
	r = buf_putc(b, '"');
	for (; r >= 0 && *s; s++) {
		uint8_t c = (uint8_t)*s;

		if (c == '"' || c == '\\') {
			char esc[2] = { '\\', (char)c };

			r = buf_append(b, esc, 2);
		} else if (c < 0x20 || c > 0x7e) {
			char esc[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf] };

			r = buf_append(b, esc, 6);
		} else
			r = buf_putc(b, (char)c);
	}
	return r < 0 ? r : buf_putc(b, '"');
}

/* One decision as worker.h's line, written here rather than built as a JSON object and then
 * serialised: one is made per connection. NULL when out of memory. */
static char *
decision_line(const struct decision *d)
{
	struct buf b = BUF_INIT(WORKER_LINE_MAX);
	int r;

	r = buf_reserve(&b, 512);
	if (r >= 0)
		r = buf_puts(&b, "{\"op\":\"egress\",\"id\":");
	if (r >= 0)
		r = put_json_string(&b, d->id);
	if (r >= 0)
		r = buf_puts(&b, ",\"via\":");
	if (r >= 0)
		r = put_json_string(&b, d->via);
	if (r >= 0)
		r = buf_puts(&b, ",\"name\":");
	if (r >= 0)
		r = put_json_string(&b, d->name);
	if (r >= 0)
		r = buf_printf(&b, ",\"port\":%u,\"verdict\":\"%s\",\"reason\":", d->port,
		               d->allowed ? "allowed" : "denied");
	if (r >= 0)
		r = put_json_string(&b, d->reason ? d->reason : "");
	/* a connection says what it dialled and moved; a DNS query has neither */
	if (r >= 0 && d->conn) {
		r = buf_puts(&b, ",\"addr\":");
		if (r >= 0)
			r = put_json_string(&b, d->addr);
		if (r >= 0)
			r = buf_printf(&b, ",\"bytes_out\":%llu,\"bytes_in\":%llu,\"cut\":%s",
			               (unsigned long long)d->bytes_out,
			               (unsigned long long)d->bytes_in, d->cut ? "true" : "false");
	}
	if (r >= 0)
		r = buf_puts(&b, "}\n");
	if (r < 0) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

void
worker_decision(struct worker *w, const struct decision *d)
{
	if (!d->allowed)
		log_denial(d);
	queue_line(w, decision_line(d));
}

/* ---- sandboxes ---- */

void
worker_lock_settled(struct worker *w)
{
	uint64_t deadline = now_mono_ms() + WORKER_SETTLE_MS;

	for (;;) {
		int pending = 0;
		uint64_t seq, now;
		struct timespec until;

		/* unread bytes first, then the flag: bytes that are gone were read by a pass
		 * that set it before reading and clears it only once they are applied */
		if (ioctl(w->control_fd, FIONREAD, &pending) < 0)
			pending = 0;
		pthread_mutex_lock(&w->lock);
		now = now_mono_ms();
		if ((pending <= 0 && !w->control_busy) || now >= deadline)
			return;
		seq = w->control_seq;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (long)MIN(deadline - now, (uint64_t)WORKER_SETTLE_MS) * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		while (w->control_seq == seq &&
		       pthread_cond_timedwait(&w->control_cond, &w->lock, &until) == 0)
			;
		pthread_mutex_unlock(&w->lock);
	}
}

struct wsandbox *
worker_sandbox_by_guest(struct worker *w, struct in_addr a)
{
	char key[INET_ADDRSTRLEN];

	if (!inet_ntop(AF_INET, &a, key, sizeof(key)))
		return NULL;
	return hashmap_get(&w->by_guest, key);
}

void
worker_cut_locked(struct wconn *c)
{
	c->cut = true;
	(void)shutdown(c->cfd, SHUT_RDWR);
	if (c->ufd >= 0)
		(void)shutdown(c->ufd, SHUT_RDWR);
}

static int
parse_ipv4(json_t *v, struct in_addr *ret)
{
	const char *s = json_string_value(v);

	if (!s || inet_pton(AF_INET, s, ret) != 1)
		return -EINVAL;
	return 0;
}

static bool
id_valid(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > WORKER_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (id[i] <= 0x20 || id[i] >= 0x7f || id[i] == '"' || id[i] == '\\' ||
		    id[i] == '\'')
			return false;
	return true;
}

static void
sandbox_remove_locked(struct worker *w, struct wsandbox *sb)
{
	struct list_node *p, *tmp;

	LIST_FOREACH_SAFE (p, tmp, &sb->conns) {
		struct wconn *c = list_entry(p, struct wconn, node);

		worker_cut_locked(c);
		list_remove(&c->node);
		c->sb = NULL;
	}
	hashmap_remove(&w->by_id, sb->id);
	hashmap_remove(&w->by_guest, sb->guest_key);
	matcher_free(sb->net);
	free(sb);
}

/* {"op":"set"}: the new policy takes effect for every decision from now on, in the same
 * critical section that cuts the open connections it no longer allows, so no connection is
 * ever decided by the old one after this returns. */
static void
control_set(struct worker *w, json_t *msg)
{
	const char *id = json_string_value(json_object_get(msg, "id"));
	json_t *net = json_object_get(msg, "network");
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	struct in_addr guest, host;
	struct wsandbox *sb, *other;
	char key[INET_ADDRSTRLEN];
	struct list_node *p;
	unsigned cut = 0;
	bool fresh = false, whole;

	if (!id || !id_valid(id)) {
		log_error("control: a set without a valid id; ignored");
		return;
	}
	whole = parse_ipv4(json_object_get(msg, "guest"), &guest) == 0 &&
	        parse_ipv4(json_object_get(msg, "host"), &host) == 0 && json_is_object(net);
	if (!whole || matcher_new(net, &m) < 0) {
		/* fail closed: what was allowed under a policy sandboxd meant to replace goes */
		if (!whole)
			log_error("control: sandbox '%s': a set without guest, host and network; "
			          "the sandbox is forgotten",
			          id);
		else
			log_error("control: sandbox '%s': out of memory compiling its policy; the "
			          "sandbox is forgotten",
			          id);
		pthread_mutex_lock(&w->lock);
		sb = hashmap_get(&w->by_id, id);
		if (sb)
			sandbox_remove_locked(w, sb);
		pthread_mutex_unlock(&w->lock);
		return;
	}
	inet_ntop(AF_INET, &guest, key, sizeof(key));

	pthread_mutex_lock(&w->lock);
	sb = hashmap_get(&w->by_id, id);
	other = hashmap_get(&w->by_guest, key);
	if (other && other != sb) {
		/* sandboxd removes a sandbox before its address is anyone else's, so this is a
		 * lost message or a bug: whichever policy were kept could decide (and report as
		 * its own) the other sandbox's traffic. Fail closed: both are forgotten, their
		 * connections cut, until sandboxd's next set for that address. */
		char other_id[WORKER_ID_MAX + 1];

		memcpy(other_id, other->id, sizeof(other_id));
		sandbox_remove_locked(w, other);
		if (sb)
			sandbox_remove_locked(w, sb);
		pthread_mutex_unlock(&w->lock);
		log_error("control: sandbox '%s': guest address %s is sandbox '%s''s; both are "
		          "forgotten",
		          id, key, other_id);
		return;
	}
	if (!sb) {
		sb = calloc(1, sizeof(*sb));
		if (!sb) {
			pthread_mutex_unlock(&w->lock);
			log_error("control: sandbox '%s': out of memory", id);
			return;
		}
		memcpy(sb->id, id, strlen(id) + 1);
		list_init(&sb->conns);
		if (hashmap_put(&w->by_id, sb->id, sb) < 0) {
			pthread_mutex_unlock(&w->lock);
			free(sb);
			log_error("control: sandbox '%s': out of memory", id);
			return;
		}
		fresh = true;
	}
	if (fresh || !streq(sb->guest_key, key)) {
		if (!fresh)
			hashmap_remove(&w->by_guest, sb->guest_key);
		memcpy(sb->guest_key, key, sizeof(key));
		if (hashmap_put(&w->by_guest, sb->guest_key, sb) < 0) {
			sandbox_remove_locked(w, sb);
			pthread_mutex_unlock(&w->lock);
			log_error("control: sandbox '%s': out of memory; forgotten", id);
			return;
		}
	}
	sb->guest = guest;
	sb->host = host;
	matcher_free(sb->net);
	sb->net = TAKE_PTR(m);
	LIST_FOREACH (p, &sb->conns) {
		struct wconn *c = list_entry(p, struct wconn, node);

		if (c->name[0] && !c->cut && !matcher_allows(sb->net, c->name, NULL)) {
			worker_cut_locked(c);
			cut++;
		}
	}
	pthread_mutex_unlock(&w->lock);
	if (cut > 0)
		log_info("sandbox '%s': policy updated, %u connection%s it no longer allows cut",
		         id, cut, cut == 1 ? "" : "s");
}

static void
control_remove(struct worker *w, json_t *msg)
{
	const char *id = json_string_value(json_object_get(msg, "id"));
	struct wsandbox *sb;

	if (!id) {
		log_error("control: a remove without an id; ignored");
		return;
	}
	pthread_mutex_lock(&w->lock);
	sb = hashmap_get(&w->by_id, id);
	if (sb)
		sandbox_remove_locked(w, sb);
	pthread_mutex_unlock(&w->lock);
}

static void
control_line(struct worker *w, const char *line, size_t len)
{
	json_error_t err;
	json_t *msg;
	const char *op;

	if (len == 0)
		return;
	msg = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
	if (!msg || !json_is_object(msg)) {
		log_error("control: a line that is not a JSON object (%s); ignored",
		          msg ? "not an object" : err.text);
		json_decref(msg);
		return;
	}
	op = json_string_value(json_object_get(msg, "op"));
	if (op && streq(op, "set"))
		control_set(w, msg);
	else if (op && streq(op, "remove"))
		control_remove(w, msg);
	else
		log_error("control: unknown op; ignored");
	json_decref(msg);
}

/* ---- the control channel ---- */

struct control {
	int fd;
	char in[WORKER_LINE_MAX + 1];
	size_t in_len;
	bool skipping; /* inside a line over WORKER_LINE_MAX, dropped up to its newline */
};

/* Reads what has arrived; 0 at EOF (sandboxd is gone), 1 otherwise, -errno. */
static int
control_read(struct worker *w, struct control *ctl)
{
	ssize_t n = read(ctl->fd, ctl->in + ctl->in_len, sizeof(ctl->in) - ctl->in_len);
	size_t start = 0;

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 1 : -errno;
	if (n == 0)
		return 0;
	ctl->in_len += (size_t)n;
	for (;;) {
		char *nl = memchr(ctl->in + start, '\n', ctl->in_len - start);
		size_t end;

		if (!nl)
			break;
		end = (size_t)(nl - ctl->in);
		if (!ctl->skipping)
			control_line(w, ctl->in + start, end - start);
		ctl->skipping = false;
		start = end + 1;
	}
	memmove(ctl->in, ctl->in + start, ctl->in_len - start);
	ctl->in_len -= start;
	if (ctl->in_len == sizeof(ctl->in)) {
		if (!ctl->skipping)
			log_error("control: a line over %u bytes; ignored", WORKER_LINE_MAX);
		ctl->skipping = true;
		ctl->in_len = 0;
	}
	return 1;
}

static int
run_loop(struct worker *w, int control_fd)
{
	static struct control ctl; /* 64 KiB: not on the stack */
	int r;

	ctl.fd = control_fd;
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = control_fd, .events = POLLIN },
			{ .fd = w->wake_fd, .events = POLLIN },
		};

		/* what the threads could not write waits for room here; while another thread
		 * writes, that one wakes this one if it has to stop */
		pthread_mutex_lock(&w->qlock);
		r = flush_locked(w);
		if (pending_locked(w) && !w->writing)
			p[0].events |= POLLOUT;
		pthread_mutex_unlock(&w->qlock);
		if (r < 0) {
			log_error("control channel: %s; exiting", strerror(-r));
			return r;
		}

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return log_error("poll: %s", strerror(errno)), -errno;
		}
		if (p[1].revents & POLLIN) {
			uint64_t v;

			(void)!read(w->wake_fd, &v, sizeof(v));
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			/* connections wait for what is read here to be applied */
			pthread_mutex_lock(&w->lock);
			w->control_busy = true;
			pthread_mutex_unlock(&w->lock);
			r = control_read(w, &ctl);
			pthread_mutex_lock(&w->lock);
			w->control_busy = false;
			w->control_seq++;
			pthread_cond_broadcast(&w->control_cond);
			pthread_mutex_unlock(&w->lock);
			if (r == 0) {
				log_info("control channel closed; exiting");
				return 0;
			}
			if (r < 0) {
				log_error("control channel: %s; exiting", strerror(-r));
				return r;
			}
		}
	}
}

/* ---- setup ---- */

static int
parse_fd(const char *s, int *ret)
{
	uint64_t v;

	if (parse_u64(s, &v) < 0 || v > 1 << 20)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

/* "ADDR:PORT" with an IPv4 address or a [bracketed] IPv6 one. */
static int
parse_addr_port(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len)
{
	const char *colon = strrchr(s, ':');
	char host[INET6_ADDRSTRLEN + 2];
	uint64_t port;
	size_t n;

	if (!colon || parse_u64(colon + 1, &port) < 0 || port == 0 || port > 65535)
		return -EINVAL;
	n = (size_t)(colon - s);
	if (n == 0 || n >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, n);
	host[n] = '\0';
	memset(ret, 0, sizeof(*ret));
	if (host[0] == '[' && host[n - 1] == ']') {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ret;

		host[n - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1)
			return -EINVAL;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		*ret_len = sizeof(*a);
		return 0;
	}
	struct sockaddr_in *a = (struct sockaddr_in *)ret;

	if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
		return -EINVAL;
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)port);
	*ret_len = sizeof(*a);
	return 0;
}

static int
bind_socket(const char *what, const char *spec, int type, int *ret)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd, one = 1;

	if (parse_addr_port(spec, &ss, &sl) < 0) {
		log_error("--%s-listen '%s': not ADDR:PORT", what, spec);
		return -EINVAL;
	}
	fd = socket(ss.ss_family, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return log_error("--%s-listen: socket: %s", what, strerror(errno)), -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 ||
	    (type == SOCK_STREAM && listen(fd, 1024) < 0)) {
		int r = -errno;

		close(fd);
		log_error("--%s-listen '%s': %s", what, spec, strerror(-r));
		return r;
	}
	*ret = fd;
	return 0;
}

/* An fd sandboxd handed over: close-on-exec from now on, and of the kind the flag says. */
static int
take_fd(const char *flag, int fd, int want_type, bool want_listening)
{
	int type = 0, acc = 0;
	socklen_t l = sizeof(type);
	int flags = fcntl(fd, F_GETFD);

	if (flags < 0) {
		log_error("%s %d: not an open fd", flag, fd);
		return -EBADF;
	}
	(void)fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0 || type != want_type) {
		log_error("%s %d: not a %s socket", flag, fd,
		          want_type == SOCK_STREAM ? "stream" : "datagram");
		return -ENOTSOCK;
	}
	l = sizeof(acc);
	if (want_listening && (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) < 0 || !acc)) {
		log_error("%s %d: not a listening socket", flag, fd);
		return -EINVAL;
	}
	return 0;
}

static int
set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* Root only as long as it takes to hold the sockets: then the uid and gid sandboxd chose, no
 * supplementary groups, and no way back (no new privileges, and setuid(0) must fail). */
static bool
is_root(void)
{
	return geteuid() == 0 || getuid() == 0;
}

/* Before anything is opened: as root, the ids to become must be known (and not root). */
static int
check_ids(const struct worker_options *o)
{
	if (is_root()) {
		if (!o->have_uid || !o->have_gid) {
			log_error("refusing to run as root: pass --uid and --gid (it parses what "
			          "guests send, and drops to them)");
			return -EPERM;
		}
		if (o->uid == 0 || o->gid == 0) {
			log_error("refusing to run as root: --uid and --gid must not be 0");
			return -EPERM;
		}
	} else if ((o->have_uid && o->uid != getuid()) || (o->have_gid && o->gid != getgid())) {
		log_error("cannot become uid %u gid %u without root", (unsigned)o->uid,
		          (unsigned)o->gid);
		return -EPERM;
	}
	return 0;
}

static int
drop_privileges(const struct worker_options *o)
{
	if (is_root()) {
		if (setgroups(0, NULL) < 0 || setresgid(o->gid, o->gid, o->gid) < 0 ||
		    setresuid(o->uid, o->uid, o->uid) < 0) {
			log_error("cannot drop to uid %u gid %u: %s", (unsigned)o->uid,
			          (unsigned)o->gid, strerror(errno));
			return -errno;
		}
		if (setuid(0) == 0 || geteuid() == 0) {
			log_error("still able to become root after dropping privileges");
			return -EPERM;
		}
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		log_error("cannot set no_new_privs: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/* The soft fd limit raised to the hard one; the connection cap follows what it allows. */
static unsigned
raise_nofile(void)
{
	struct rlimit rl;
	uint64_t fit;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 64;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t want = rl.rlim_max;

		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			(void)getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur == RLIM_INFINITY)
		return WORKER_CONNS_TOTAL;
	fit = rl.rlim_cur > FDS_RESERVED ? (rl.rlim_cur - FDS_RESERVED) / FDS_PER_CONN : 1;
	return (unsigned)MAX(1, MIN(fit, (uint64_t)WORKER_CONNS_TOTAL));
}

static void
usage(FILE *f)
{
	fputs("usage: sandboxd egress-worker --control-fd N (--proxy-fd N | --proxy-listen "
	      "ADDR:PORT)\n"
	      "                              (--dns-fd N | --dns-listen ADDR:PORT)\n"
	      "                              [--uid N --gid N] [--handshake-timeout-ms N]\n"
	      "The egress proxy and DNS stub sandboxd starts (worker.h); not run by hand.\n",
	      f);
}

static int
parse_options(int argc, char **argv, struct worker_options *o)
{
	enum {
		OPT_CONTROL = 256,
		OPT_PROXY_FD,
		OPT_PROXY_LISTEN,
		OPT_DNS_FD,
		OPT_DNS_LISTEN,
		OPT_UID,
		OPT_GID,
		OPT_HANDSHAKE
	};
	static const struct option long_options[] = {
		{ "control-fd", required_argument, NULL, OPT_CONTROL },
		{ "proxy-fd", required_argument, NULL, OPT_PROXY_FD },
		{ "proxy-listen", required_argument, NULL, OPT_PROXY_LISTEN },
		{ "dns-fd", required_argument, NULL, OPT_DNS_FD },
		{ "dns-listen", required_argument, NULL, OPT_DNS_LISTEN },
		{ "uid", required_argument, NULL, OPT_UID },
		{ "gid", required_argument, NULL, OPT_GID },
		{ "handshake-timeout-ms", required_argument, NULL, OPT_HANDSHAKE },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	uint64_t v;
	int c;

	*o = (struct worker_options){ .control_fd = -1,
		                      .proxy_fd = -1,
		                      .dns_fd = -1,
		                      .handshake_ms = WORKER_HANDSHAKE_MS_DEFAULT };
	optind = 0;
	opterr = 1;
	while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
		switch (c) {
		case OPT_CONTROL:
		case OPT_PROXY_FD:
		case OPT_DNS_FD: {
			int *fd = c == OPT_CONTROL    ? &o->control_fd
			          : c == OPT_PROXY_FD ? &o->proxy_fd
			                              : &o->dns_fd;

			if (parse_fd(optarg, fd) < 0) {
				log_error("'%s' is not an fd number", optarg);
				return -EINVAL;
			}
			break;
		}
		case OPT_PROXY_LISTEN:
			o->proxy_listen = optarg;
			break;
		case OPT_DNS_LISTEN:
			o->dns_listen = optarg;
			break;
		case OPT_UID:
		case OPT_GID:
			if (parse_u64(optarg, &v) < 0 || v >= (uint64_t)UINT32_MAX) {
				log_error("'%s' is not a numeric id", optarg);
				return -EINVAL;
			}
			if (c == OPT_UID) {
				o->uid = (uid_t)v;
				o->have_uid = true;
			} else {
				o->gid = (gid_t)v;
				o->have_gid = true;
			}
			break;
		case OPT_HANDSHAKE:
			if (parse_u64(optarg, &v) < 0 || v == 0 || v > 600000) {
				log_error("--handshake-timeout-ms '%s': not 1..600000", optarg);
				return -EINVAL;
			}
			o->handshake_ms = (unsigned)v;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	if (o->control_fd < 0 || (o->proxy_fd < 0) == !o->proxy_listen ||
	    (o->dns_fd < 0) == !o->dns_listen) {
		log_error("needs --control-fd, one of --proxy-fd/--proxy-listen and one of "
		          "--dns-fd/--dns-listen");
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

int
egress_worker_main(int argc, char **argv)
{
	static struct worker w = {
		.lock = PTHREAD_MUTEX_INITIALIZER,
		.qlock = PTHREAD_MUTEX_INITIALIZER,
		.by_id = HASHMAP_INIT,
		.by_guest = HASHMAP_INIT,
		.control_fd = -1,
		.control_cond = PTHREAD_COND_INITIALIZER,
		.wake_fd = -1,
	};
	struct worker_options o;
	int proxy_fd = -1, dns_fd = -1, r;

	log_setup("sandboxd-egress", LOG_LEVEL_INFO);
	r = parse_options(argc, argv, &o);
	if (r != 0)
		return r > 0 ? 0 : 2;
	if (check_ids(&o) < 0)
		return 1;
	/* a connection or sandboxd going away is an error return, never a signal */
	signal(SIGPIPE, SIG_IGN);

	if (take_fd("--control-fd", o.control_fd, SOCK_STREAM, false) < 0)
		return 1;
	if (o.proxy_listen)
		r = bind_socket("proxy", o.proxy_listen, SOCK_STREAM, &proxy_fd);
	else {
		proxy_fd = o.proxy_fd;
		r = take_fd("--proxy-fd", proxy_fd, SOCK_STREAM, true);
	}
	if (r < 0)
		return 1;
	if (o.dns_listen)
		r = bind_socket("dns", o.dns_listen, SOCK_DGRAM, &dns_fd);
	else {
		dns_fd = o.dns_fd;
		r = take_fd("--dns-fd", dns_fd, SOCK_DGRAM, false);
	}
	if (r < 0)
		return 1;
	if (set_nonblock(o.control_fd) < 0) {
		log_error("cannot make the control socket non-blocking: %s", strerror(errno));
		return 1;
	}
	/* jansson seeds its hashes on first use: done here, before there are threads */
	json_object_seed(0);
	w.handshake_ms = o.handshake_ms;
	w.control_fd = o.control_fd;
	w.max_conns = raise_nofile();
	w.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w.wake_fd < 0) {
		log_error("eventfd: %s", strerror(errno));
		return 1;
	}
	if (drop_privileges(&o) < 0)
		return 1;
	if (stub_start(&w, dns_fd) < 0 || proxy_start(&w, proxy_fd) < 0)
		return 1;
	queue_line(&w, strdup_printf("{\"op\":\"ready\"}\n"));
	log_info("ready: uid %u, at most %u connections", (unsigned)getuid(), w.max_conns);
	r = run_loop(&w, o.control_fd);
	return r < 0 ? 1 : 0;
}
