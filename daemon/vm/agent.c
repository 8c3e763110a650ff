/* agent.c: the host side of sbx-agent/1; see agent.h and lib/agentproto.h. */
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "agent.h"
#include "agentproto.h"
#include "frame.h"
#include "log.h"
#include "tlv.h"
#include "util.h"

#define RETRY_MS 20
#define OUT_MAX (80u << 20) /* what may be queued for the guest, frames and all */
#define READ_CHUNK (256u << 10)
#define DATA_PIECE (64u << 10) /* FILE_DATA and STDIN frames carry at most this */
/* stdin a process's window holds back, beyond AP_STDIN_WINDOW in flight: what writers sent
 * before they paused (a body's piece, an attach's frames), or a request's stdin given whole */
#define STDIN_HELD_MAX (64u << 20)

enum agent_state {
	AGENT_IDLE,
	AGENT_CONNECTING, /* waiting for the socket, retrying */
	AGENT_HANDSHAKE,  /* HELLO sent, waiting for HELLO_ACK with our nonce */
	AGENT_READY,
};

struct agent_req {
	struct list_node link;
	struct agent *a;
	uint32_t id;
	uint8_t type;
	bool tunnel; /* an EXEC with PORT */
	agent_done_fn done;
	void (*proc)(void *data, const struct agent_proc_info *p);
	void (*chunk)(void *data, const void *bytes, size_t len);
	void (*entry)(void *data, const struct agent_dirent *e);
	void *data;
	/* an upload (agent_write_begin, agent_stdin_begin) */
	uint32_t pid;        /* stdin: the process */
	uint64_t size, sent; /* a write: the SIZE announced, and the bytes sent */
	bool size_is_max;    /* a write: its data may end sooner (EOF) */
	void (*drained)(void *data);
	bool waiting; /* for the queue to drain below AGENT_UPLOAD_LOW */
};

struct agent {
	struct loop *loop;
	char *path;
	int fd;
	struct loop_source src;
	struct loop_timer retry;
	enum agent_state state;
	uint64_t deadline;
	struct frame_decoder dec;
	struct buf out;
	struct buf hello; /* the HELLO payload without nonce, time and entropy */
	uint8_t nonce[AP_NONCE_LEN];
	uint32_t next_id;
	struct list_node reqs;
	struct list_node subs;
	const struct agent_events *ev;
	void *ev_data;
	bool send_pending;        /* send_queued is deferred on the loop */
	const char *why;          /* a violation's reason, set by the frame handler that found it */
	unsigned tunnels_pending; /* tunnel EXECs not answered yet */
	/* the guest acknowledges process stdin (AP_FEAT_STDIN_WINDOW in its HELLO_ACK): at most
	 * AP_STDIN_WINDOW of it in flight per process */
	bool stdin_window;
	/* a push of held stdin found the queue full: retried as it drains (with none of that
	 * stdin in flight, no STDIN_ACK would come to retry it) */
	bool stdin_stuck;
};

/* A frame handler's answer to a violation: why (a literal) says what the guest did. */
static int
violation(struct agent *a, const char *why)
{
	a->why = why;
	return -EPROTO;
}

static void on_io(struct loop_source *src, uint32_t events, void *data);

static void
set_interest(struct agent *a)
{
	uint32_t ev = EPOLLIN | EPOLLRDHUP;

	if (a->fd < 0)
		return;
	if (buf_avail(&a->out) > 0 || a->state == AGENT_CONNECTING)
		ev |= EPOLLOUT;
	(void)loop_modify(&a->src, ev);
}

static int
put_hello_tlvs(struct buf *b, const struct agent_hello *h)
{
	int r = 0;

	if (h->hostname)
		r |= tlv_put_str(b, AP_T_HOSTNAME, h->hostname);
	if (h->root_dev)
		r |= tlv_put_str(b, AP_T_ROOT_DEV, h->root_dev);
	if (h->upper_dev)
		r |= tlv_put_str(b, AP_T_UPPER_DEV, h->upper_dev);
	for (size_t i = 0; h->env && h->env[i]; i++)
		r |= tlv_put_str(b, AP_T_ENV, h->env[i]);
	if (h->uid)
		r |= tlv_put_u32(b, AP_T_UID, h->uid);
	if (h->gid)
		r |= tlv_put_u32(b, AP_T_GID, h->gid);
	if (h->home)
		r |= tlv_put_str(b, AP_T_HOME, h->home);
	if (h->net)
		r |= tlv_put_str(b, AP_T_NET, h->net);
	if (h->has_mac)
		r |= tlv_put(b, AP_T_MAC, h->mac, sizeof(h->mac));
	if (h->machine_id)
		r |= tlv_put_str(b, AP_T_MACHINE_ID, h->machine_id);
	for (size_t i = 0; h->volumes && h->volumes[i]; i++)
		r |= tlv_put_str(b, AP_T_VOLUME, h->volumes[i]);
	r |= tlv_put_u32(b, AP_T_FEATURES, AP_FEAT_STDIN_WINDOW);
	return r < 0 ? -ENOMEM : 0;
}

int
agent_new(struct loop *loop, const char *path, const struct agent_hello *hello,
          const struct agent_events *ev, void *data, struct agent **ret)
{
	struct agent *a = calloc(1, sizeof(*a));
	int r;

	if (!a)
		return -ENOMEM;
	a->loop = loop;
	a->fd = -1;
	a->src.fd = -1;
	a->ev = ev;
	a->ev_data = data;
	a->next_id = 1;
	list_init(&a->reqs);
	list_init(&a->subs);
	buf_init(&a->out, OUT_MAX);
	buf_init(&a->hello, AP_FRAME_MAX);
	frame_decoder_init(&a->dec, AP_FRAME_MAX, true);
	a->path = strdup(path);
	r = a->path ? put_hello_tlvs(&a->hello, hello) : -ENOMEM;
	if (r >= 0)
		r = loop_timer_init(loop, &a->retry, NULL, a);
	if (r < 0) {
		agent_free(a);
		return r;
	}
	*ret = a;
	return 0;
}

/* Ends every request with err and forgets them. */
static void
fail_requests(struct agent *a, int err, const char *message)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &a->reqs) {
		struct agent_req *r = list_entry(n, struct agent_req, link);
		struct agent_result res = { .err = err, .message = message };
		list_remove(&r->link);
		if (r->tunnel)
			a->tunnels_pending--;
		if (r->done)
			r->done(r->data, &res);
		free(r);
	}
}

/* The session is over: subscriptions that end with it (tunnels) are removed and told. */
static void
end_session_subs(struct agent *a)
{
	struct list_node *n, *tmp;

	LIST_FOREACH_SAFE (n, tmp, &a->subs) {
		struct agent_sub *s = list_entry(n, struct agent_sub, link);
		if (!s->session_end)
			continue;
		list_remove(&s->link);
		s->session_end(s);
	}
}

static void stdin_forget_window(struct agent_sub *s);

static void
disconnect(struct agent *a)
{
	struct list_node *n;

	loop_remove(&a->src);
	a->fd = safe_close(a->fd);
	a->state = AGENT_IDLE;
	a->stdin_window = false;
	a->stdin_stuck = false;
	/* like the queue, stdin held back is gone; the next session counts from 0 */
	LIST_FOREACH (n, &a->subs)
		stdin_forget_window(list_entry(n, struct agent_sub, link));
	buf_reset(&a->out);
	frame_decoder_reset(&a->dec, true);
	(void)loop_timer_arm(&a->retry, 0, 0);
}

struct agent *
agent_free(struct agent *a)
{
	struct list_node *n, *tmp;

	if (!a)
		return NULL;
	disconnect(a);
	/* requests still under way learn that the connection is gone */
	fail_requests(a, ECONNRESET, "the sandbox's agent went away");
	end_session_subs(a);
	LIST_FOREACH_SAFE (n, tmp, &a->subs)
		list_remove(n);
	loop_timer_done(&a->retry);
	frame_decoder_done(&a->dec);
	buf_free(&a->out);
	buf_free(&a->hello);
	free(a->path);
	/* its loop source may be in the loop's current batch of events: free after it, and after
	 * a send_queued deferred before (with no room to defer, a pending one keeps it: leaked) */
	if (loop_defer(a->loop, free, a) < 0 && !a->send_pending)
		free(a);
	return NULL;
}

void
agent_close(struct agent *a, const char *reason)
{
	if (a->state == AGENT_IDLE)
		return;
	log_debug("agent '%s': closing: %s", a->path, reason);
	disconnect(a);
	fail_requests(a, ECONNRESET, reason);
	end_session_subs(a);
	if (a->ev->closed)
		a->ev->closed(a, reason, a->ev_data);
}

bool
agent_ready(const struct agent *a)
{
	return a->state == AGENT_READY;
}

/* Uploads that waited go on once the queue is low: one at a time, in the order they began,
 * and the next only if the queue is still low (each may queue more, or end). */
static bool upload_may_go(struct agent *a, const struct agent_req *r);
static void stdin_unstick(struct agent *a);

static void
wake_uploads(struct agent *a)
{
	while (buf_avail(&a->out) < AGENT_UPLOAD_LOW) {
		struct agent_req *w = NULL;
		struct list_node *n;

		LIST_FOREACH (n, &a->reqs) {
			struct agent_req *r = list_entry(n, struct agent_req, link);
			if (r->waiting && upload_may_go(a, r)) {
				w = r;
				break;
			}
		}
		if (!w)
			return;
		w->waiting = false;
		w->drained(w->data);
	}
}

void
agent_flush(struct agent *a)
{
	while (a->fd >= 0 && a->state == AGENT_READY && buf_avail(&a->out) > 0) {
		ssize_t k = send(a->fd, buf_head(&a->out), buf_avail(&a->out), MSG_NOSIGNAL);
		/* full: EPOLLOUT says when it drains; an error: on_io finds it */
		if (k <= 0)
			break;
		buf_consume(&a->out, (size_t)k);
	}
	set_interest(a);
	if (a->stdin_stuck && a->state == AGENT_READY)
		stdin_unstick(a);
	wake_uploads(a);
}

/* The frames queued during a batch of the loop's events leave together once the batch is
 * over: waiting for EPOLLOUT instead costs a wakeup and two epoll_ctl() per batch (an exec's
 * round trip has two or three). Deferred before agent_free defers the agent's own free, so it
 * runs first; after a disconnect it finds nothing to send. */
static void
send_queued(void *data)
{
	struct agent *a = data;

	a->send_pending = false;
	agent_flush(a);
}

static int
send_frame(struct agent *a, uint8_t type, uint8_t flags, uint32_t chan, const void *p, size_t len)
{
	bool idle = buf_avail(&a->out) == 0;
	int r;

	if (a->state != AGENT_READY && type != AP_HELLO)
		return -ENOTCONN;
	r = frame_put(&a->out, type, flags, chan, p, len);
	if (r < 0)
		return r;
	/* behind bytes the socket did not take, EPOLLOUT says when it drains */
	if (idle && !a->send_pending && loop_defer(a->loop, send_queued, a) >= 0)
		a->send_pending = true;
	if (!a->send_pending)
		set_interest(a);
	return 0;
}

static int
send_hello(struct agent *a)
{
	_cleanup_buf_ struct buf p = BUF_INIT(AP_FRAME_MAX);
	uint8_t entropy[AP_ENTROPY_LEN];
	struct timespec ts;
	int r;

	r = random_bytes(a->nonce, sizeof(a->nonce));
	if (r >= 0)
		r = random_bytes(entropy, sizeof(entropy));
	if (r < 0)
		return r;
	clock_gettime(CLOCK_REALTIME, &ts);
	r = tlv_put(&p, AP_T_NONCE, a->nonce, sizeof(a->nonce));
	if (r >= 0)
		r = tlv_put_u64(&p, AP_T_TIME_NS,
		                (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
	if (r >= 0)
		r = tlv_put(&p, AP_T_ENTROPY, entropy, sizeof(entropy));
	if (r >= 0)
		r = buf_append(&p, a->hello.data ? a->hello.data : "", a->hello.len);
	explicit_bzero(entropy, sizeof(entropy));
	if (r < 0)
		return r;
	r = frame_put_magic(&a->out);
	if (r >= 0)
		r = frame_put(&a->out, AP_HELLO, 0, 0, p.data, p.len);
	set_interest(a);
	return r;
}

/* One connection attempt: 0 connected (or in progress), -EAGAIN retry later, -errno. */
static int
try_connect(struct agent *a)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	if (strlen(a->path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, a->path, strlen(a->path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return negative_errno();
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS &&
	    errno != EAGAIN) {
		r = -errno;
		close(fd);
		return r == -ENOENT || r == -ECONNREFUSED ? -EAGAIN : r;
	}
	a->fd = fd;
	r = loop_add(a->loop, &a->src, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP, on_io, a);
	if (r < 0) {
		a->fd = safe_close(a->fd);
		return r;
	}
	a->state = AGENT_HANDSHAKE;
	frame_decoder_reset(&a->dec, true);
	buf_reset(&a->out);
	return send_hello(a);
}

static void
retry_fired(struct loop_timer *t _unused_, void *data)
{
	struct agent *a = data;
	uint64_t now = now_mono_ms();
	int r;

	/* connected, but no session by the deadline: whatever the guest sent meanwhile (a
	 * flood without a session start, stale frames) was dropped as it came */
	if (a->state == AGENT_HANDSHAKE) {
		agent_close(a, "the agent did not complete the handshake in time");
		return;
	}
	if (a->state != AGENT_CONNECTING)
		return;
	r = try_connect(a);
	if (r == 0) {
		/* the handshake has what is left until the deadline */
		(void)loop_timer_arm(&a->retry, a->deadline > now ? a->deadline - now : 1, 0);
		return;
	}
	if (r == -EAGAIN && now < a->deadline) {
		(void)loop_timer_arm(&a->retry, RETRY_MS, 0);
		return;
	}
	a->state = AGENT_HANDSHAKE; /* so agent_close runs its course */
	agent_close(a, r == -EAGAIN ? "the agent did not answer in time" : strerror(-r));
}

int
agent_connect(struct agent *a, uint64_t deadline_ms)
{
	if (a->state != AGENT_IDLE)
		return -EALREADY;
	a->deadline = deadline_ms;
	a->state = AGENT_CONNECTING;
	a->retry.fn = retry_fired;
	return loop_timer_arm(&a->retry, 1, 0);
}

/* ---- frames from the guest ---- */

static struct agent_req *
find_req(struct agent *a, uint32_t id)
{
	struct list_node *n;

	LIST_FOREACH (n, &a->reqs) {
		struct agent_req *r = list_entry(n, struct agent_req, link);
		if (r->id == id)
			return r;
	}
	return NULL;
}

static struct agent_sub *
find_sub(struct agent *a, uint32_t pid)
{
	struct list_node *n;

	LIST_FOREACH (n, &a->subs) {
		struct agent_sub *s = list_entry(n, struct agent_sub, link);
		if (s->pid == pid)
			return s;
	}
	return NULL;
}

/* ---- process stdin: the window ---- */

/* The subscription whose stdin is windowed: a process the host follows, with a guest that
 * acknowledges it. Not a tunnel (tunnel.c keeps its own window on the same ACKs) nor a process
 * that ended (its stdin goes nowhere: sent as it comes, the guest drops it at once). */
static struct agent_sub *
stdin_window_of(struct agent *a, uint32_t pid)
{
	struct agent_sub *s;

	if (!a->stdin_window)
		return NULL;
	s = find_sub(a, pid);
	return s && !s->stdin_acked && !s->ended ? s : NULL;
}

static void
stdin_forget_window(struct agent_sub *s)
{
	buf_free(&s->stdin_held);
	s->stdin_sent = s->stdin_took = 0;
	s->stdin_eof = false;
}

/* Writers pause at a full window (held bytes, or AP_STDIN_WINDOW in flight) and go on once it
 * is half empty, so that they do not wake for every ACK. */
static bool
stdin_full(const struct agent_sub *s)
{
	return buf_avail(&s->stdin_held) > 0 || s->stdin_sent - s->stdin_took >= AP_STDIN_WINDOW;
}

static bool
stdin_room(const struct agent_sub *s)
{
	return buf_avail(&s->stdin_held) == 0 &&
	       s->stdin_sent - s->stdin_took <= AP_STDIN_WINDOW / 2;
}

static bool
upload_may_go(struct agent *a, const struct agent_req *r)
{
	struct agent_sub *s;

	if (r->type != AP_STDIN)
		return true;
	s = stdin_window_of(a, r->pid);
	return !s || stdin_room(s);
}

/* Uploads waiting on a window that opened (or went away) are looked at from the loop. */
static void
kick_uploads(struct agent *a)
{
	if (!a->send_pending && loop_defer(a->loop, send_queued, a) >= 0)
		a->send_pending = true;
}

/* Sends held bytes while the window has room, then a held EOF. */
static int
stdin_push(struct agent *a, struct agent_sub *s)
{
	int r;

	while (buf_avail(&s->stdin_held) > 0 && s->stdin_sent - s->stdin_took < AP_STDIN_WINDOW) {
		size_t n = MIN(buf_avail(&s->stdin_held), (size_t)DATA_PIECE);
		bool last;

		n = (size_t)MIN((uint64_t)n, AP_STDIN_WINDOW - (s->stdin_sent - s->stdin_took));
		last = n == buf_avail(&s->stdin_held) && s->stdin_eof;
		r = send_frame(a, AP_STDIN, last ? AP_F_EOF : 0, s->pid, buf_head(&s->stdin_held),
		               n);
		if (r < 0)
			goto stuck;
		buf_consume(&s->stdin_held, n);
		s->stdin_sent += n;
		if (last)
			s->stdin_eof = false;
	}
	if (buf_avail(&s->stdin_held) > 0)
		return 0;
	buf_reset(&s->stdin_held); /* its memory is used again (it goes with the window) */
	if (s->stdin_eof) {
		r = send_frame(a, AP_STDIN, AP_F_EOF, s->pid, NULL, 0);
		if (r < 0)
			goto stuck;
		s->stdin_eof = false;
	}
	return 0;
stuck:
	a->stdin_stuck = true; /* still held: agent_flush tries again */
	return r;
}

static void
stdin_unstick(struct agent *a)
{
	struct list_node *n;

	a->stdin_stuck = false;
	LIST_FOREACH (n, &a->subs) {
		struct agent_sub *s = list_entry(n, struct agent_sub, link);
		if (stdin_window_of(a, s->pid) == s && stdin_push(a, s) < 0)
			return;
	}
}

static int
on_hello_ack(struct agent *a, const struct frame *f, bool new_session)
{
	struct tlv_reader rd;
	struct tlv t;
	bool nonce_ok = false;
	uint8_t mounted = 0;
	uint32_t features = 0;
	_cleanup_free_ char *version = NULL;
	int r;

	if (f->type != AP_HELLO_ACK || !new_session) {
		/* stale bytes of an earlier session: look for the next session start */
		frame_decoder_reset(&a->dec, true);
		return 0;
	}
	tlv_reader_init(&rd, f->payload, f->len);
	while ((r = tlv_next(&rd, &t)) > 0) {
		if (t.tag == AP_T_NONCE)
			nonce_ok = t.len == AP_NONCE_LEN &&
			           secret_equal(t.val, t.len, a->nonce, sizeof(a->nonce));
		else if (t.tag == AP_T_MOUNTED && tlv_u8(&t, &mounted) < 0)
			return -EPROTO;
		else if (t.tag == AP_T_VERSION && !version && tlv_strdup(&t, 256, &version) < 0)
			return -EPROTO;
		else if (t.tag == AP_T_FEATURES && tlv_u32(&t, &features) < 0)
			return -EPROTO;
	}
	if (r < 0)
		return -EPROTO;
	if (!nonce_ok) {
		/* an answer to someone else's hello */
		frame_decoder_reset(&a->dec, true);
		return 0;
	}
	a->state = AGENT_READY;
	/* an agent from before FEATURES (a VM an older sandboxd started) never acknowledges a
	 * process's stdin: its stdin goes unbounded, as it did */
	a->stdin_window = features & AP_FEAT_STDIN_WINDOW;
	if (!a->stdin_window)
		log_info("agent '%s': %s does not acknowledge stdin; stdin is not windowed",
		         a->path, version ? version : "an older agent");
	(void)loop_timer_arm(&a->retry, 0, 0); /* the handshake's deadline */
	/* the guest forgot its session attachments: attach again from where each stood */
	{
		struct list_node *n;
		LIST_FOREACH (n, &a->subs) {
			struct agent_sub *s = list_entry(n, struct agent_sub, link);
			uint8_t p[8];
			if (s->ended)
				continue;
			s->window_base = s->next_offset;
			be64_put(p, s->next_offset);
			(void)send_frame(a, AP_ATTACH, 0, s->pid, p, sizeof(p));
		}
	}
	if (a->ev->ready)
		a->ev->ready(a, mounted != 0, version ? version : "?", a->ev_data);
	return 0;
}

static int
on_result(struct agent *a, const struct frame *f)
{
	struct agent_req *r = find_req(a, f->chan);
	struct agent_result res = { 0 };
	_cleanup_free_ char *message = NULL;
	struct tlv_reader rd;
	struct tlv t;
	uint32_t u32;
	int k;

	tlv_reader_init(&rd, f->payload, f->len);
	while ((k = tlv_next(&rd, &t)) > 0) {
		switch (t.tag) {
		case AP_T_ERRNO:
			if (tlv_u32(&t, &u32) < 0 || u32 > 4095)
				return -EPROTO;
			res.err = (int)u32;
			break;
		case AP_T_MESSAGE:
			if (!message && tlv_strdup(&t, 1024, &message) < 0)
				return -EPROTO;
			break;
		case AP_T_PID:
			if (tlv_u32(&t, &res.pid) < 0)
				return -EPROTO;
			break;
		case AP_T_SIZE:
			if (tlv_u64(&t, &res.size) < 0)
				return -EPROTO;
			break;
		default:
			break; /* newer agents may say more */
		}
	}
	if (k < 0)
		return -EPROTO;
	if (!r || r->type == AP_STDIN)
		return 0; /* cancelled, or a stdin upload (the guest answers none) */
	if (r->type == AP_EXEC && !res.err && res.pid == 0)
		return violation(a, "protocol violation: an EXEC's success without a PID");
	if (r->tunnel)
		a->tunnels_pending--;
	res.message = message;
	list_remove(&r->link);
	if (r->done)
		r->done(r->data, &res);
	free(r);
	return 0;
}

static int
on_proc(struct agent *a, const struct frame *f)
{
	struct agent_req *r = find_req(a, f->chan);
	struct agent_proc_info info = { .running = true };
	_cleanup_free_ char *argv0 = NULL;
	struct tlv_reader rd;
	struct tlv t;
	uint8_t u8;
	uint32_t u32;
	int k;

	if (r && r->type != AP_PS)
		return -EPROTO;
	tlv_reader_init(&rd, f->payload, f->len);
	while ((k = tlv_next(&rd, &t)) > 0) {
		int e = 0;
		switch (t.tag) {
		case AP_T_PID:
			e = tlv_u32(&t, &info.pid);
			break;
		case AP_T_ARG:
			if (!argv0)
				e = tlv_strdup(&t, AP_PATH_MAX, &argv0);
			break;
		case AP_T_TTY:
			e = tlv_u8(&t, &u8);
			info.tty = u8;
			break;
		case AP_T_KEEP:
			e = tlv_u8(&t, &u8);
			info.keep = u8;
			break;
		case AP_T_STATE:
			e = tlv_u8(&t, &u8);
			info.running = u8 == AP_PROC_RUNNING;
			break;
		case AP_T_EXIT_CODE:
			e = tlv_u32(&t, &u32);
			info.exit_code = (int)u32;
			break;
		case AP_T_OOM:
			e = tlv_u8(&t, &u8);
			info.oom = u8 == 1;
			break;
		case AP_T_STARTED_MS:
			e = tlv_u64(&t, &info.started_ms);
			break;
		case AP_T_SIZE:
			e = tlv_u64(&t, &info.output_bytes);
			break;
		default:
			break;
		}
		if (e < 0)
			return -EPROTO;
	}
	if (k < 0 || info.pid == 0)
		return -EPROTO;
	info.oom = info.oom && !info.running && info.exit_code == 137;
	info.argv0 = argv0 ? argv0 : "";
	if (r && r->proc)
		r->proc(r->data, &info);
	return 0;
}

static int
on_dirent(struct agent *a, const struct frame *f)
{
	struct agent_req *r = find_req(a, f->chan);
	struct agent_dirent e = { .type = 'o' };
	_cleanup_free_ char *name = NULL;
	struct tlv_reader rd;
	struct tlv t;
	uint8_t u8;
	int k;

	if (r && r->type != AP_FILE_LIST)
		return -EPROTO;
	tlv_reader_init(&rd, f->payload, f->len);
	while ((k = tlv_next(&rd, &t)) > 0) {
		if (t.tag == AP_T_NAME && !name && tlv_strdup(&t, 255, &name) < 0)
			return -EPROTO;
		if (t.tag == AP_T_FTYPE) {
			if (tlv_u8(&t, &u8) < 0 || !strchr("fdlo", u8) || u8 == 0)
				return -EPROTO;
			e.type = (char)u8;
		}
		if (t.tag == AP_T_SIZE && tlv_u64(&t, &e.size) < 0)
			return -EPROTO;
	}
	if (k < 0 || !name || !*name || strchr(name, '/'))
		return -EPROTO;
	e.name = name;
	if (r && r->entry)
		r->entry(r->data, &e);
	return 0;
}

static int
on_file_data(struct agent *a, const struct frame *f)
{
	struct agent_req *r = find_req(a, f->chan);

	if (r && r->type != AP_FILE_READ)
		return -EPROTO;
	if (r && r->chunk)
		r->chunk(r->data, f->payload, f->len);
	return 0;
}

static int
on_output(struct agent *a, const struct frame *f)
{
	struct agent_sub *s = find_sub(a, f->chan);
	uint64_t offset;
	uint8_t stream;

	if (f->len < 9)
		return -EPROTO;
	stream = f->payload[0];
	offset = be64_get(f->payload + 1);
	if (stream != AP_STDOUT && stream != AP_STDERR)
		return -EPROTO;
	if (!s)
		return 0; /* detached meanwhile */
	if (s->ended)
		return violation(a, "protocol violation: OUTPUT after EXIT");
	/* output is in order and without gaps (DROPPED says where a replay starts) */
	if (offset != s->next_offset)
		return violation(a, "protocol violation: OUTPUT at the wrong offset");
	/* and within the window the host opened */
	if (s->next_offset + (f->len - 9) - s->window_base > AP_WINDOW)
		return violation(a, "protocol violation: OUTPUT beyond the window");
	s->next_offset += f->len - 9;
	if (f->len > 9)
		s->output(s, stream, offset, f->payload + 9, f->len - 9);
	return 0;
}

static int
on_dropped(struct agent *a, const struct frame *f)
{
	struct agent_sub *s = find_sub(a, f->chan);
	uint64_t n;

	if (f->len != 8)
		return -EPROTO;
	n = be64_get(f->payload);
	if (!s)
		return 0;
	if (s->ended)
		return violation(a, "protocol violation: DROPPED after EXIT");
	if (n > UINT64_MAX - s->next_offset)
		return -EPROTO;
	/* the guest's window starts again after the bytes gone */
	s->next_offset += n;
	s->window_base = s->next_offset;
	if (s->dropped)
		s->dropped(s, n);
	return 0;
}

static int
on_exit_frame(struct agent *a, const struct frame *f)
{
	struct agent_sub *s = find_sub(a, f->chan);
	uint64_t end;
	int32_t code;

	if (f->len != 12)
		return -EPROTO;
	code = (int32_t)be32_get(f->payload);
	end = be64_get(f->payload + 4);
	if (!s)
		return 0;
	if (s->ended)
		return violation(a, "protocol violation: EXIT twice");
	if (end != s->next_offset || code < 0 || code > 255)
		return violation(a, "protocol violation: EXIT at the wrong offset or code");
	s->ended = true;
	s->oom = (f->flags & AP_F_OOM) && code == 137;
	stdin_forget_window(s); /* its stdin goes nowhere now */
	kick_uploads(a);
	s->exited(s, code, end);
	return 0;
}

static int
on_stdin_ack(struct agent *a, const struct frame *f)
{
	struct agent_sub *s = find_sub(a, f->chan);
	uint64_t took;

	if (f->len != 8)
		return -EPROTO;
	if (!s)
		return 0;     /* released meanwhile */
	if (s->stdin_acked) { /* a tunnel keeps its own window */
		if (s->stdin_acked(s, be64_get(f->payload)) < 0)
			return violation(a,
			                 "protocol violation: STDIN_ACK for bytes never sent, or "
			                 "going backwards");
		return 0;
	}
	if (!a->stdin_window)
		return violation(a, "protocol violation: STDIN_ACK for a process from an agent "
		                    "that did not announce it");
	/* the guest's word, never more than we sent this session */
	took = be64_get(f->payload);
	if (took > s->stdin_sent)
		return violation(a, "protocol violation: STDIN_ACK for bytes never sent");
	if (took <= s->stdin_took)
		return 0;
	s->stdin_took = took;
	if (stdin_push(a, s) < 0)
		return 0; /* the queue is full: held on, pushed as it drains */
	kick_uploads(a);
	return 0;
}

static int
dispatch(struct agent *a, const struct frame *f, bool new_session)
{
	if (a->state == AGENT_HANDSHAKE)
		return on_hello_ack(a, f, new_session);
	if (new_session)
		return -EPROTO; /* the guest may not start sessions */
	switch (f->type) {
	case AP_RESULT:
		return on_result(a, f);
	case AP_OUTPUT:
		return on_output(a, f);
	case AP_DROPPED:
		return on_dropped(a, f);
	case AP_EXIT:
		return on_exit_frame(a, f);
	case AP_STDIN_ACK:
		return on_stdin_ack(a, f);
	case AP_PROC:
		return on_proc(a, f);
	case AP_DIRENT:
		return on_dirent(a, f);
	case AP_FILE_DATA:
		return on_file_data(a, f);
	default:
		return -EPROTO; /* host-to-guest types, or a second HELLO_ACK */
	}
}

int
agent_receive(struct agent *a, const void *bytes, size_t len)
{
	struct frame f;
	bool new_session = false;
	int r;

	if (a->state != AGENT_HANDSHAKE && a->state != AGENT_READY)
		return -ENOTCONN;
	if (frame_decoder_feed(&a->dec, bytes, len) < 0) {
		agent_close(a, "protocol violation: too much unframed data");
		return -EPROTO;
	}
	while (a->state != AGENT_IDLE && (r = frame_decoder_next(&a->dec, &f, &new_session)) > 0) {
		a->why = NULL;
		if (dispatch(a, &f, new_session) < 0) {
			const char *why = a->why ? a->why : "protocol violation";
			log_warning("agent '%s': %s (frame 0x%02x on channel %u); closing", a->path,
			            why, f.type, f.chan);
			agent_close(a, why);
			return -EPROTO;
		}
	}
	if (a->state != AGENT_IDLE && r < 0) {
		agent_close(a, "protocol violation: bad frame");
		return -EPROTO;
	}
	return a->state == AGENT_IDLE ? -ECONNRESET : 0;
}

void
agent_begin_unconnected(struct agent *a, bool ready)
{
	memset(a->nonce, 0, sizeof(a->nonce));
	frame_decoder_reset(&a->dec, true);
	a->state = ready ? AGENT_READY : AGENT_HANDSHAKE;
}

static void
read_frames(struct agent *a)
{
	char chunk[65536];
	size_t total = 0;

	while (a->fd >= 0 && total < READ_CHUNK) {
		ssize_t k = read(a->fd, chunk, sizeof(chunk));

		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (k <= 0) {
			agent_close(a, k == 0 ? "the guest closed the channel" : strerror(errno));
			return;
		}
		total += (size_t)k;
		if (agent_receive(a, chunk, (size_t)k) < 0)
			return;
		/* a short read took all there was; more wakes the loop again (level-triggered)
		 * instead of a read() into EAGAIN on every wakeup */
		if ((size_t)k < sizeof(chunk))
			return;
	}
}

static void
write_frames(struct agent *a)
{
	while (buf_avail(&a->out) > 0) {
		ssize_t k = send(a->fd, buf_head(&a->out), buf_avail(&a->out), MSG_NOSIGNAL);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		if (k <= 0) {
			agent_close(a, strerror(errno));
			return;
		}
		buf_consume(&a->out, (size_t)k);
	}
	set_interest(a);
	wake_uploads(a);
}

static void
on_io(struct loop_source *src _unused_, uint32_t events, void *data)
{
	struct agent *a = data;

	if (events & EPOLLOUT)
		write_frames(a);
	if (a->fd >= 0 && (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR)))
		read_frames(a);
}

/* ---- requests ---- */

static struct agent_req *
request(struct agent *a, uint8_t type, const struct buf *payload, agent_done_fn done, void *data)
{
	struct agent_req *r;

	if (a->state != AGENT_READY)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->a = a;
	r->id = a->next_id++;
	if (a->next_id == 0)
		a->next_id = 1;
	r->type = type;
	r->done = done;
	r->data = data;
	if (send_frame(a, type, 0, r->id, payload ? payload->data : NULL,
	               payload ? payload->len : 0) < 0) {
		free(r);
		return NULL;
	}
	list_push_back(&a->reqs, &r->link);
	return r;
}

struct agent_req *
agent_exec(struct agent *a, const struct agent_exec_spec *spec, agent_done_fn done, void *data)
{
	_cleanup_buf_ struct buf p = BUF_INIT(AP_FRAME_MAX);
	int r = 0;

	for (size_t i = 0; spec->argv[i]; i++)
		r |= tlv_put_str(&p, AP_T_ARG, spec->argv[i]);
	for (size_t i = 0; spec->env && spec->env[i]; i++)
		r |= tlv_put_str(&p, AP_T_ENV, spec->env[i]);
	if (spec->cwd)
		r |= tlv_put_str(&p, AP_T_CWD, spec->cwd);
	r |= tlv_put_u8(&p, AP_T_TTY, spec->tty);
	if (spec->tty) {
		r |= tlv_put_u16(&p, AP_T_ROWS, spec->rows);
		r |= tlv_put_u16(&p, AP_T_COLS, spec->cols);
	}
	r |= tlv_put_u8(&p, AP_T_KEEP, spec->keep);
	if (r < 0)
		return NULL;
	return request(a, AP_EXEC, &p, done, data);
}

struct agent_req *
agent_tunnel(struct agent *a, uint16_t port, agent_done_fn done, void *data)
{
	_cleanup_buf_ struct buf p = BUF_INIT(64);

	struct agent_req *r;

	if (port == 0 || tlv_put_u16(&p, AP_T_PORT, port) < 0)
		return NULL;
	r = request(a, AP_EXEC, &p, done, data);
	if (r) {
		r->tunnel = true;
		a->tunnels_pending++;
	}
	return r;
}

unsigned
agent_tunnels_pending(const struct agent *a)
{
	return a->tunnels_pending;
}

struct agent_req *
agent_ping(struct agent *a, agent_done_fn done, void *data)
{
	return request(a, AP_PING, NULL, done, data);
}

struct agent_req *
agent_hold(struct agent *a, agent_done_fn done, void *data)
{
	return request(a, AP_HOLD, NULL, done, data);
}

struct agent_req *
agent_shutdown(struct agent *a, agent_done_fn done, void *data)
{
	return request(a, AP_SHUTDOWN, NULL, done, data);
}

struct agent_req *
agent_ps(struct agent *a, void (*proc)(void *data, const struct agent_proc_info *p),
         agent_done_fn done, void *data)
{
	struct agent_req *r = request(a, AP_PS, NULL, done, data);

	if (r)
		r->proc = proc;
	return r;
}

static int
path_payload(struct buf *p, const char *path)
{
	return tlv_put_str(p, AP_T_PATH, path);
}

struct agent_req *
agent_read_file(struct agent *a, const char *path, uint64_t max,
                void (*chunk)(void *data, const void *bytes, size_t len), agent_done_fn done,
                void *data)
{
	_cleanup_buf_ struct buf p = BUF_INIT(AP_FRAME_MAX);
	struct agent_req *r;

	if (path_payload(&p, path) < 0 || tlv_put_u64(&p, AP_T_SIZE, max) < 0)
		return NULL;
	r = request(a, AP_FILE_READ, &p, done, data);
	if (r)
		r->chunk = chunk;
	return r;
}

struct agent_req *
agent_write_begin(struct agent *a, const char *path, uint32_t mode, uint64_t size, bool size_is_max,
                  agent_done_fn done, void *data)
{
	_cleanup_buf_ struct buf p = BUF_INIT(AP_FRAME_MAX);
	struct agent_req *r;

	if (path_payload(&p, path) < 0 || tlv_put_u64(&p, AP_T_SIZE, size) < 0 ||
	    tlv_put_u32(&p, AP_T_MODE, mode) < 0)
		return NULL;
	r = request(a, AP_FILE_WRITE, &p, done, data);
	if (r) {
		r->size = size;
		r->size_is_max = size_is_max;
	}
	return r;
}

struct agent_req *
agent_stdin_begin(struct agent *a, uint32_t pid, agent_done_fn done, void *data)
{
	struct agent_req *r;

	if (a->state != AGENT_READY)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	/* listed like a request, so that the end of the session ends it too; nothing is sent
	 * and the guest answers nothing */
	r->a = a;
	r->id = a->next_id++;
	if (a->next_id == 0)
		a->next_id = 1;
	r->type = AP_STDIN;
	r->pid = pid;
	r->done = done;
	r->data = data;
	list_push_back(&a->reqs, &r->link);
	return r;
}

int
agent_upload_data(struct agent_req *r, const void *bytes, size_t len)
{
	struct agent *a = r->a;
	const uint8_t *b = bytes;

	if (r->type == AP_FILE_WRITE && len > r->size - r->sent)
		return -EFBIG;
	if (r->type == AP_STDIN) {
		int k = agent_stdin(a, r->pid, bytes, len, false);
		if (k < 0)
			return k;
		r->sent += len;
		return k > 0 || buf_avail(&a->out) >= AGENT_UPLOAD_HIGH ? 1 : 0;
	}
	while (len > 0) {
		size_t n = MIN(len, (size_t)DATA_PIECE);
		int k = send_frame(a, AP_FILE_DATA, 0, r->id, b, n);
		if (k < 0)
			return k;
		b += n;
		len -= n;
		r->sent += n;
	}
	return buf_avail(&a->out) >= AGENT_UPLOAD_HIGH ? 1 : 0;
}

void
agent_upload_wait(struct agent_req *r, void (*drained)(void *data))
{
	r->drained = drained;
	r->waiting = true;
	/* drained already (or never filled): say so from the loop, not from inside the caller */
	if (buf_avail(&r->a->out) < AGENT_UPLOAD_LOW && upload_may_go(r->a, r))
		kick_uploads(r->a);
}

/* Forgets a stdin upload: it was only ever the host's. */
static void
stdin_forget(struct agent_req *r)
{
	list_remove(&r->link);
	free(r);
}

int
agent_upload_end(struct agent_req *r, bool eof)
{
	struct agent *a = r->a;
	int k = 0;

	r->waiting = false;
	if (r->type == AP_STDIN) {
		if (eof) /* behind what the window still holds back */
			k = agent_stdin(a, r->pid, NULL, 0, true);
		stdin_forget(r);
		return k < 0 ? k : 0;
	}
	if (r->size_is_max)
		return send_frame(a, AP_FILE_DATA, AP_F_EOF, r->id, NULL, 0);
	return r->sent == r->size ? 0 : -EINVAL;
}

void
agent_upload_abort(struct agent_req *r)
{
	if (!r)
		return;
	r->waiting = false;
	if (r->type == AP_STDIN) {
		stdin_forget(r);
		return;
	}
	/* the guest drops what it wrote and answers, which nobody hears any more */
	(void)send_frame(r->a, AP_FILE_DATA, AP_F_ABORT, r->id, NULL, 0);
	agent_cancel(r);
}

struct agent_req *
agent_list(struct agent *a, const char *path,
           void (*entry)(void *data, const struct agent_dirent *e), agent_done_fn done, void *data)
{
	_cleanup_buf_ struct buf p = BUF_INIT(AP_FRAME_MAX);
	struct agent_req *r;

	if (path_payload(&p, path) < 0)
		return NULL;
	r = request(a, AP_FILE_LIST, &p, done, data);
	if (r)
		r->entry = entry;
	return r;
}

struct agent_req *
agent_remove(struct agent *a, const char *path, agent_done_fn done, void *data)
{
	_cleanup_buf_ struct buf p = BUF_INIT(AP_FRAME_MAX);

	if (path_payload(&p, path) < 0)
		return NULL;
	return request(a, AP_FILE_REMOVE, &p, done, data);
}

void
agent_cancel(struct agent_req *r)
{
	if (!r)
		return;
	/* keep it listed so its frames are still recognised (and ignored) */
	r->done = NULL;
	r->proc = NULL;
	r->chunk = NULL;
	r->entry = NULL;
	r->waiting = false;
}

/* ---- processes ---- */

int
agent_attach(struct agent *a, struct agent_sub *s, uint64_t from)
{
	uint8_t p[8];

	if (find_sub(a, s->pid))
		return -EBUSY;
	s->next_offset = from;
	s->window_base = from;
	s->ended = false;
	buf_init(&s->stdin_held, STDIN_HELD_MAX);
	s->stdin_sent = s->stdin_took = 0;
	s->stdin_eof = false;
	list_push_back(&a->subs, &s->link);
	if (a->state != AGENT_READY)
		return 0; /* attached at the next session start */
	be64_put(p, from);
	return send_frame(a, AP_ATTACH, 0, s->pid, p, sizeof(p));
}

void
agent_detach(struct agent *a, struct agent_sub *s)
{
	if (!list_linked(&s->link))
		return;
	list_remove(&s->link);
	stdin_forget_window(s);
	kick_uploads(a); /* an upload to its stdin waits for no window now */
	if (a->state == AGENT_READY && !s->ended)
		(void)send_frame(a, AP_DETACH, 0, s->pid, NULL, 0);
}

static int
send_u64(struct agent *a, uint8_t type, uint32_t pid, uint64_t v)
{
	uint8_t p[8];

	be64_put(p, v);
	return send_frame(a, type, 0, pid, p, sizeof(p));
}

int
agent_ack(struct agent *a, uint32_t pid, uint64_t offset)
{
	struct agent_sub *s = find_sub(a, pid);

	/* the guest may send AP_WINDOW bytes beyond it (at most what was received) */
	if (s && offset > s->window_base)
		s->window_base = MIN(offset, s->next_offset);
	return send_u64(a, AP_ACK, pid, offset);
}

int
agent_stdin(struct agent *a, uint32_t pid, const void *bytes, size_t len, bool eof)
{
	struct agent_sub *s = stdin_window_of(a, pid);
	const uint8_t *b = bytes;
	int r = 0;

	if (a->state != AGENT_READY)
		return -ENOTCONN;
	if (s) {
		/* held in order behind what the window holds back, sent as it opens (or, when the
		 * queue refuses them now, as it drains: they are taken either way) */
		if (len && buf_append(&s->stdin_held, bytes, len) < 0)
			return -ENOBUFS;
		s->stdin_eof |= eof;
		(void)stdin_push(a, s);
		return stdin_full(s);
	}
	/* in frames no bigger than the guest's limit; EOF on the last one */
	do {
		size_t n = MIN(len, (size_t)DATA_PIECE);
		r = send_frame(a, AP_STDIN, eof && n == len ? AP_F_EOF : 0, pid, b, n);
		b += n;
		len -= n;
	} while (r >= 0 && len > 0);
	return r;
}

int
agent_signal(struct agent *a, uint32_t pid, int signo)
{
	uint8_t p[4];

	be32_put(p, (uint32_t)signo);
	return send_frame(a, AP_SIGNAL, 0, pid, p, sizeof(p));
}

int
agent_resize(struct agent *a, uint32_t pid, unsigned short rows, unsigned short cols)
{
	uint8_t p[4];

	be16_put(p, rows);
	be16_put(p + 2, cols);
	return send_frame(a, AP_RESIZE, 0, pid, p, sizeof(p));
}

int
agent_release(struct agent *a, uint32_t pid)
{
	return send_frame(a, AP_RELEASE, 0, pid, NULL, 0);
}
