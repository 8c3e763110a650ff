/* agent.c: see agent.h. One connection at a time: each starts by hunting for AP_MAGIC and a
 * HELLO; the end of a connection (EOF) ends its session, which drops the unsent queue, kills
 * processes started without KEEP and abandons file transfers. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include "agent.h"
#include "agentproto.h"
#include "boot.h"
#include "files.h"
#include "frame.h"
#include "log.h"
#include "proc.h"
#include "request.h"
#include "tlv.h"
#include "tunnel.h"
#include "util.h"

#define SHUTDOWN_GRACE_MS 2000
#define READS_PER_EVENT 16  /* port reads before other fds get a turn */
#define WRITES_PER_FLUSH 64 /* port writes before other fds get a turn */

static uint8_t inbuf[65536]; /* the decoder takes at most this much beyond one frame */

static void flush(void *data);

void
agent_kick(struct agent *a)
{
	if (a->flush_queued)
		return;
	if (loop_defer(a->loop, flush, a) == 0)
		a->flush_queued = true;
}

bool
agent_can_pump(const struct agent *a)
{
	return a->session && buf_avail(&a->out) < OUT_LOW;
}

int
agent_send(struct agent *a, uint8_t type, uint8_t flags, uint32_t chan, const void *payload,
           size_t len)
{
	int r;

	if (!a->session)
		return -ENOTCONN;
	r = frame_put(&a->out, type, flags, chan, payload, len);
	if (r < 0)
		log_error("frame 0x%02x dropped: %s", type, strerror(-r));
	agent_kick(a);
	return r;
}

static int
send_result(struct agent *a, uint32_t chan, int err, const char *msg, uint16_t tag, size_t size,
            uint64_t v)
{
	_cleanup_buf_ struct buf b = BUF_INIT(AP_FRAME_MAX);
	int r = tlv_put_u32(&b, AP_T_ERRNO, (uint32_t)err);

	if (r >= 0 && msg)
		r = tlv_put_str(&b, AP_T_MESSAGE, msg);
	if (r >= 0 && size == 4)
		r = tlv_put_u32(&b, tag, (uint32_t)v);
	if (r >= 0 && size == 8)
		r = tlv_put_u64(&b, tag, v);
	if (r < 0)
		return r;
	return agent_send(a, AP_RESULT, 0, chan, b.data, b.len);
}

int
agent_result(struct agent *a, uint32_t chan, int err, const char *msg)
{
	return send_result(a, chan, err, msg, 0, 0, 0);
}

int
agent_result_u32(struct agent *a, uint32_t chan, uint16_t tag, uint32_t v)
{
	return send_result(a, chan, 0, NULL, tag, 4, v);
}

int
agent_result_u64(struct agent *a, uint32_t chan, uint16_t tag, uint64_t v)
{
	return send_result(a, chan, 0, NULL, tag, 8, v);
}

/* --- sessions --- */

static void
session_end(struct agent *a)
{
	if (a->session)
		log_info("session ended");
	a->session = false;
	a->host_features = 0;
	buf_reset(&a->out);
	proc_session_end(a);
	files_session_end(a);
	tunnel_session_end(a);
}

static void
on_connected(void *data)
{
	struct agent *a = data;

	log_info("host connected");
	session_end(a);
	frame_decoder_reset(&a->dec, true);
	a->throttled = false;
}

static void
hangup(struct agent *a)
{
	log_info("host disconnected");
	port_hangup(&a->port);
	session_end(a);
	frame_decoder_reset(&a->dec, true);
	a->throttled = false;
}

static int
hello_ack(struct agent *a, const struct request_hello *h, int err, const char *msg)
{
	_cleanup_buf_ struct buf b = BUF_INIT(AP_FRAME_MAX);
	_cleanup_free_ char *boot_id = NULL;
	struct timespec up;
	size_t len = 0;
	int r;

	if (read_file_max("/proc/sys/kernel/random/boot_id", 128, &boot_id, &len) >= 0)
		while (len > 0 && boot_id[len - 1] == '\n')
			boot_id[--len] = '\0';
	clock_gettime(CLOCK_BOOTTIME, &up);
	r = tlv_put(&b, AP_T_NONCE, h->nonce, AP_NONCE_LEN);
	if (r >= 0)
		r = tlv_put_str(&b, AP_T_VERSION, "sandbox-guestd " GUESTD_VERSION);
	if (r >= 0)
		r = tlv_put_str(&b, AP_T_BOOT_ID, boot_id ? boot_id : "");
	if (r >= 0)
		r = tlv_put_u64(&b, AP_T_UPTIME_MS,
		                (uint64_t)up.tv_sec * 1000u + (uint64_t)up.tv_nsec / 1000000u);
	if (r >= 0)
		r = tlv_put_u8(&b, AP_T_MOUNTED, a->mounted);
	if (r >= 0)
		r = tlv_put_u32(&b, AP_T_FEATURES, a->features);
	/* beyond the header's list: why the root could not be set up */
	if (r >= 0 && err)
		r = tlv_put_u32(&b, AP_T_ERRNO, (uint32_t)err);
	if (r >= 0 && msg)
		r = tlv_put_str(&b, AP_T_MESSAGE, msg);
	if (r >= 0)
		r = frame_put_magic(&a->out);
	if (r >= 0)
		r = agent_send(a, AP_HELLO_ACK, 0, 0, b.data, b.len);
	return r;
}

static void
on_hello(struct agent *a, const struct frame *f)
{
	struct request_hello h;
	_cleanup_free_ char *msg = NULL;
	int r = request_parse_hello(f->payload, f->len, &h);

	if (r < 0 || !h.has_nonce) {
		log_warning("malformed HELLO ignored");
		if (r >= 0)
			request_hello_done(&h);
		return;
	}
	/* a session start on a connection that has one: the host reconnected unseen */
	session_end(a);
	a->session = true;
	if (a->hold)
		log_info("resumed: every process carried on");
	a->hold = false; /* a suspend's ends (if any) are behind */
	a->host_features = h.features;
	r = a->pid1 ? boot_hello(a, &h, &msg) : 0;
	if (r < 0)
		log_error("%s", msg ? msg : strerror(-r));
	if (h.nenv) {
		strv_free(a->image_env);
		a->image_env = TAKE_PTR(h.env);
		a->n_image_env = h.nenv;
		h.nenv = 0;
	}
	if (hello_ack(a, &h, -r, msg) < 0)
		log_error("cannot answer HELLO");
	else
		log_info("session started");
	request_hello_done(&h);
}

/* --- requests --- */

static void
on_ps(struct agent *a, uint32_t chan, const void *p, size_t n)
{
	proc_ps(a, chan);
}

static void
on_ping(struct agent *a, uint32_t chan, const void *p, size_t n)
{
	(void)agent_result(a, chan, 0, NULL);
}

/* The host is about to suspend the VM: the session's end that the resume brings must not end
 * the processes it froze (only a HELLO ends the hold). */
static void
on_hold(struct agent *a, uint32_t chan, const void *p, size_t n)
{
	a->hold = true;
	(void)agent_result(a, chan, 0, NULL);
}

static void
sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)ms * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* PID 1: whether no child is left at all (orphans included). */
static bool
no_children(void)
{
	siginfo_t si = { 0 };

	return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

/* SIGTERM to every process group, up to SHUTDOWN_GRACE_MS, then SIGKILL. */
static void
terminate(struct agent *a)
{
	uint64_t deadline;
	bool killed = false;

	log_info("stopping every process");
	if (a->pid1)
		(void)kill(-1, SIGTERM);
	else
		proc_signal_all(a, SIGTERM);
	deadline = now_mono_ms() + SHUTDOWN_GRACE_MS;
	for (;;) {
		proc_reap(a);
		if (a->pid1 ? no_children() : proc_all_reaped(a))
			break;
		if (now_mono_ms() >= deadline) {
			if (killed) {
				log_warning("processes survived SIGKILL (uninterruptible sleep?)");
				break;
			}
			if (a->pid1)
				(void)kill(-1, SIGKILL);
			else
				proc_signal_all(a, SIGKILL);
			killed = true;
			deadline = now_mono_ms() + SHUTDOWN_GRACE_MS;
		}
		sleep_ms(10);
	}
}

static void
on_shutdown(struct agent *a, uint32_t chan, const void *p, size_t n)
{
	(void)agent_result(a, chan, 0, NULL);
	if (port_write_all(&a->port, buf_head(&a->out), buf_avail(&a->out), 2000) < 0)
		log_warning("SHUTDOWN: the answer could not be sent");
	buf_reset(&a->out);
	terminate(a);
	if (a->pid1)
		boot_poweroff(a);
	loop_quit(a->loop, 0);
}

typedef void (*request_fn)(struct agent *a, uint32_t chan, const void *p, size_t n);

static const request_fn requests[] = {
	[AP_EXEC] = proc_exec,       [AP_PS] = on_ps,
	[AP_FILE_READ] = files_read, [AP_FILE_WRITE] = files_write,
	[AP_FILE_LIST] = files_list, [AP_FILE_REMOVE] = files_remove,
	[AP_SHUTDOWN] = on_shutdown, [AP_PING] = on_ping,
	[AP_HOLD] = on_hold,
};

static const bool process_frames[] = {
	[AP_STDIN] = true,  [AP_SIGNAL] = true, [AP_RESIZE] = true,  [AP_ATTACH] = true,
	[AP_DETACH] = true, [AP_ACK] = true,    [AP_RELEASE] = true,
};

static void
handle(struct agent *a, const struct frame *f, bool new_session)
{
	if (f->type == AP_HELLO) {
		if (new_session)
			on_hello(a, f);
		else
			log_warning("HELLO without AP_MAGIC ignored");
		return;
	}
	if (new_session || !a->session) {
		log_debug("frame 0x%02x outside a session ignored", f->type);
		return;
	}
	if (f->type < ARRAY_SIZE(requests) && requests[f->type]) {
		/* files are read and written with the sandbox user's rights, like its processes */
		bool files = f->type >= AP_FILE_READ && f->type <= AP_FILE_REMOVE;
		if (files)
			files_as_user(a, true);
		requests[f->type](a, f->chan, f->payload, f->len);
		if (files)
			files_as_user(a, false);
		return;
	}
	if (f->type < ARRAY_SIZE(process_frames) && process_frames[f->type]) {
		proc_frame(a, f);
		return;
	}
	if (f->type == AP_FILE_DATA) {
		files_as_user(a, true);
		files_data(a, f);
		files_as_user(a, false);
		return;
	}
	/* a newer host's request: say so, so it is not left waiting */
	log_warning("frame 0x%02x not understood", f->type);
	if (f->type < 0x80 && f->chan)
		(void)agent_result(a, f->chan, ENOSYS, "this agent does not know that request");
}

/* Ends the session and hunts for the next AP_MAGIC from the byte after the bad frame's
 * start, so a session start right behind stale bytes is still found. */
static void
violation(struct agent *a, int r)
{
	size_t n = buf_avail(&a->dec.in);
	_cleanup_free_ char *rest = n > 1 ? malloc(n - 1) : NULL;

	log_error("protocol violation from the host (%s): hunting for a new session", strerror(-r));
	if (rest)
		memcpy(rest, buf_head(&a->dec.in) + 1, n - 1);
	session_end(a);
	frame_decoder_reset(&a->dec, true);
	if (rest)
		(void)frame_decoder_feed(&a->dec, rest, n - 1);
}

static void
on_readable(void *data)
{
	struct agent *a = data;

	for (int i = 0; i < READS_PER_EVENT; i++) {
		struct frame f;
		bool ns;
		ssize_t n = port_read(&a->port, inbuf, sizeof(inbuf));
		int r;

		if (n == -EAGAIN)
			break;
		if (n <= 0) {
			hangup(a);
			return;
		}
		r = frame_decoder_feed(&a->dec, inbuf, (size_t)n);
		for (;;) {
			if (r < 0)
				violation(a, r); /* drops at least a byte: this ends */
			r = frame_decoder_next(&a->dec, &f, &ns);
			if (r == 0)
				break;
			if (r == 1)
				handle(a, &f, ns);
			if (loop_quitting(a->loop))
				return;
		}
		if (a->throttled || buf_avail(&a->out) > OUT_HIGH)
			break;
	}
	agent_kick(a);
}

/* --- output --- */

static void
pump(struct agent *a)
{
	bool progress = true;

	while (progress && agent_can_pump(a)) {
		struct list_node *n;

		progress = false;
		LIST_FOREACH (n, &a->procs)
			progress |= proc_pump(list_entry(n, struct proc, node));
		progress |= files_pump(a);
	}
}

static void
flush(void *data)
{
	struct agent *a = data;
	bool busy = true;

	a->flush_queued = false;
	if (!a->port.connected)
		return;
	for (int i = 0; i < WRITES_PER_FLUSH; i++) {
		ssize_t n;

		pump(a);
		if (!buf_avail(&a->out)) {
			busy = false;
			break;
		}
		n = port_write(&a->port, buf_head(&a->out), buf_avail(&a->out));
		if (n == -EAGAIN) {
			busy = false;
			break;
		}
		if (n < 0) {
			hangup(a);
			return;
		}
		buf_consume(&a->out, (size_t)n);
	}
	a->throttled = buf_avail(&a->out) > OUT_HIGH;
	/* busy: more to write after other fds had their turn (EPOLLOUT fires at once) */
	port_set_interest(&a->port, !a->throttled, busy || buf_avail(&a->out) > 0);
}

static void
on_writable(void *data)
{
	flush(data);
}

static const struct port_ops agent_port_ops = {
	.connected = on_connected,
	.readable = on_readable,
	.writable = on_writable,
};

void
agent_on_signal(int signo, void *data)
{
	struct agent *a = data;

	if (signo == SIGCHLD) {
		proc_reap(a);
		return;
	}
	if (a->pid1)
		return;
	log_info("signal %d: stopping", signo);
	terminate(a);
	loop_quit(a->loop, 0);
}

int
agent_init(struct agent *a, struct loop *l, bool pid1)
{
	*a = (struct agent){ .loop = l,
		             .pid1 = pid1,
		             .upper_fd = -1,
		             .next_id = 1,
		             .features = AP_FEAT_STDIN_WINDOW };
	frame_decoder_init(&a->dec, AP_FRAME_MAX, true);
	buf_init(&a->out, OUT_MAX);
	list_init(&a->procs);
	list_init(&a->jobs);
	list_init(&a->tunnels_pending);
	a->port.fd = a->port.listen_fd = -1;
	a->port.src.fd = a->port.listen_src.fd = a->port.wait.src.fd = -1;
	a->signals.src.fd = -1;
	return 0;
}

int
agent_open_port(struct agent *a, const char *path)
{
	if (a->pid1)
		return port_open_virtio(&a->port, a->loop, path, &agent_port_ops, a);
	return port_listen(&a->port, a->loop, path, &agent_port_ops, a);
}

void
agent_done(struct agent *a)
{
	port_close(&a->port);
	files_session_end(a);
	tunnel_session_end(a);
	proc_free_all(a);
	frame_decoder_done(&a->dec);
	buf_free(&a->out);
	strv_free(a->image_env);
	free(a->home);
	safe_close(a->upper_fd);
}
