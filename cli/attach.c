/* attach.c: see attach.h. One poll() loop over the upgraded connection, stdin and the signal
 * pipe. Frames are one type byte, a big-endian u32 length and the payload; output is written
 * through as it arrives, stdin is read only while the connection takes what we send. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "attach.h"
#include "cli.h"
#include "client.h"
#include "frame.h"
#include "output.h"
#include "term.h"
#include "util.h"

#define FRAME_MAX (4u << 20)    /* the largest frame we take from the server */
#define STDIN_CHUNK (64u << 10) /* one 'i' frame */
#define SEND_HIGH (256u << 10)  /* stop reading stdin while this much waits to be sent */
#define DETACH_FLUSH_MS 2000    /* what was typed before a detach still goes out */

struct session {
	struct cli *cli;
	const struct attach_opts *o;
	struct client_raw *raw;
	struct buf in;  /* from the server: frames being assembled */
	struct buf out; /* to the server: frames not yet sent */
	bool stdin_open;
	bool interrupted; /* the first Ctrl-C went to the process */
	bool midline;     /* the last output byte was not a newline */
	bool done;
	char why[256]; /* why the connection broke, said once the terminal is back */
	struct attach_result res;
};

/* A note on stderr that reads well in a raw terminal too. */
static void _printf_(1, 2) note(const char *fmt, ...)
{
	va_list ap;

	fputs("sandbox-cli: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(term_is_raw() ? "\r\n" : "\n", stderr);
}

static void
end(struct session *s, enum attach_end how, int signo)
{
	if (s->done)
		return;
	s->done = true;
	s->res.end = how;
	s->res.signo = signo;
}

static void _printf_(2, 3) broke(struct session *s, const char *fmt, ...)
{
	va_list ap;

	end(s, ATTACH_BROKE, 0);
	va_start(ap, fmt);
	vsnprintf(s->why, sizeof(s->why), fmt, ap);
	va_end(ap);
}

static int
queue(struct session *s, char type, const void *payload, size_t len)
{
	uint8_t h[5];

	h[0] = (uint8_t)type;
	be32_put(h + 1, (uint32_t)len);
	if (buf_append(&s->out, h, sizeof(h)) < 0 || buf_append(&s->out, payload, len) < 0)
		return -ENOBUFS;
	return 0;
}

static void
queue_resize(struct session *s)
{
	unsigned short rows, cols;
	uint8_t p[4];

	if (term_size(STDIN_FILENO, &rows, &cols) < 0)
		return;
	be16_put(p, rows);
	be16_put(p + 2, cols);
	(void)queue(s, 'r', p, sizeof(p));
}

/* One frame from the server. */
static void
frame(struct session *s, uint8_t type, const uint8_t *p, uint32_t len)
{
	switch (type) {
	case 'o':
		if (write_all(STDOUT_FILENO, p, len) < 0)
			end(s, ATTACH_SIGNALLED, SIGPIPE);
		if (len > 0)
			s->midline = p[len - 1] != '\n';
		break;
	case 'E':
		(void)write_all(STDERR_FILENO, p, len);
		if (len > 0)
			s->midline = p[len - 1] != '\n';
		break;
	case 'd':
		if (len == 8 && be64_get(p) > 0)
			note("note: the first %llu bytes of output are gone; the rest follows",
			     (unsigned long long)be64_get(p));
		break;
	case 'x':
		if (len == 4) {
			s->res.exit_code = (int32_t)be32_get(p);
			end(s, ATTACH_EXITED, 0);
		}
		break;
	default:
		break; /* a frame this version does not know */
	}
}

/* Reads what the server sent, until it has nothing more for now. */
static void
receive(struct session *s)
{
	char chunk[65536];

	while (!s->done) {
		ssize_t n = client_raw_recv(s->raw, chunk, sizeof(chunk));
		if (n == -EAGAIN)
			return;
		if (n <= 0) {
			/* the server ends the connection after 'x'; before it, something broke */
			broke(s, "the connection to %s broke before the process ended%s",
			      client_endpoint(s->cli->client),
			      n < 0 ? "" : " (the server closed it)");
			return;
		}
		if (buf_append(&s->in, chunk, (size_t)n) < 0)
			goto too_big;
		while (!s->done && buf_avail(&s->in) >= 5) {
			const uint8_t *h = (const uint8_t *)buf_head(&s->in);
			uint32_t len = be32_get(h + 1);
			if (len > FRAME_MAX)
				goto too_big;
			if (buf_avail(&s->in) < 5 + (size_t)len)
				break;
			frame(s, h[0], h + 5, len);
			buf_consume(&s->in, 5 + (size_t)len);
		}
	}
	return;
too_big:
	broke(s, "%s sent a frame larger than %u MiB; leaving", client_endpoint(s->cli->client),
	      FRAME_MAX >> 20);
}

/* Sends what is queued, as far as the connection takes it now. */
static void
flush(struct session *s)
{
	while (buf_avail(&s->out) > 0) {
		ssize_t n = client_raw_send(s->raw, buf_head(&s->out), buf_avail(&s->out));
		if (n == -EAGAIN)
			return;
		if (n < 0) {
			broke(s, "the connection to %s broke while sending",
			      client_endpoint(s->cli->client));
			return;
		}
		buf_consume(&s->out, (size_t)n);
	}
}

static void
read_stdin(struct session *s)
{
	char chunk[STDIN_CHUNK];
	ssize_t n = read(STDIN_FILENO, chunk, sizeof(chunk));
	char *key;

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		/* EOF (or a terminal that went away): nothing more to send */
		s->stdin_open = false;
		if (s->o->in == ATTACH_STDIN_FORWARD)
			(void)queue(s, 'e', NULL, 0);
		return;
	}
	if (s->o->tty && (key = memchr(chunk, ATTACH_DETACH_KEY, (size_t)n))) {
		/* what was typed before the key still goes */
		if (key > chunk)
			(void)queue(s, 'i', chunk, (size_t)(key - chunk));
		s->res.by_key = true;
		end(s, ATTACH_DETACHED, 0);
		return;
	}
	if (queue(s, 'i', chunk, (size_t)n) < 0)
		s->stdin_open = false; /* cannot happen: reads stop at SEND_HIGH */
}

static void
handle_signal(struct session *s, int signo)
{
	switch (signo) {
	case SIGWINCH:
		if (s->o->tty)
			queue_resize(s);
		break;
	case SIGINT:
		if (s->o->forward_interrupt && !s->interrupted) {
			s->interrupted = true;
			(void)queue(s, 's', "INT", 3);
		} else {
			end(s, ATTACH_DETACHED, SIGINT);
		}
		break;
	default:
		end(s, ATTACH_SIGNALLED, signo);
	}
}

/* What was queued before a detach (keys typed before Ctrl-]) goes out, briefly. */
static void
flush_before_leaving(struct session *s)
{
	uint64_t deadline = now_mono_ms() + DETACH_FLUSH_MS;

	while (buf_avail(&s->out) > 0 && now_mono_ms() < deadline) {
		struct pollfd pfd = { .fd = client_raw_fd(s->raw), .events = POLLOUT };
		ssize_t n = client_raw_send(s->raw, buf_head(&s->out), buf_avail(&s->out));
		if (n == -EAGAIN) {
			(void)poll(&pfd, 1, 100);
			continue;
		}
		if (n < 0)
			return;
		buf_consume(&s->out, (size_t)n);
	}
}

static void
loop(struct session *s)
{
	while (!s->done) {
		struct pollfd pfd[3] = {
			{ .fd = client_raw_fd(s->raw), .events = POLLIN },
			{ .fd = -1, .events = POLLIN },
			{ .fd = term_signal_fd(), .events = POLLIN },
		};
		int n, signo;

		if (buf_avail(&s->out) > 0)
			pfd[0].events |= POLLOUT;
		if (s->stdin_open && buf_avail(&s->out) < SEND_HIGH)
			pfd[1].fd = STDIN_FILENO;
		/* bytes that came with the upgrade's answer are not on the socket any more */
		n = poll(pfd, 3, client_raw_pending(s->raw) ? 0 : -1);
		if (n < 0 && errno != EINTR) {
			broke(s, "poll failed: %s", strerror(errno));
			return;
		}
		while (!s->done && (signo = term_signal_next()) > 0)
			handle_signal(s, signo);
		if (!s->done && (client_raw_pending(s->raw) || pfd[0].revents))
			receive(s);
		if (!s->done && pfd[1].revents)
			read_stdin(s);
		if (!s->done)
			flush(s);
	}
}

int
attach_run(struct cli *cli, const struct attach_opts *o, struct attach_result *ret)
{
	_cleanup_(client_response_done) struct client_response resp = { 0 };
	_cleanup_free_ char *suffix = strdup_printf("/processes/%u/attach", o->pid);
	_cleanup_free_ char *path = suffix ? cli_sandbox_path(o->ref, suffix) : NULL;
	struct session s = {
		.cli = cli,
		.o = o,
		.in = BUF_INIT(FRAME_MAX + 5 + 65536),
		.out = BUF_INIT(SEND_HIGH + STDIN_CHUNK + 4096),
		.stdin_open = o->in == ATTACH_STDIN_FORWARD || o->in == ATTACH_STDIN_SHARE,
	};
	struct client *c;
	int r;

	if (!path)
		return cli_oom();
	r = cli_client(cli, &c);
	if (r != 0)
		return r;
	r = client_upgrade(c, path, "sbx-stream/1", &resp, &s.raw);
	if (r < 0)
		return cli_fail_transport(cli, r);
	if (!s.raw)
		return cli_fail_status(cli, &resp);
	if (o->in == ATTACH_STDIN_CLOSE)
		(void)queue(&s, 'e', NULL, 0);
	if (o->tty) {
		r = term_raw(STDIN_FILENO);
		if (r < 0) {
			s.raw = client_raw_free(s.raw);
			output_error("cannot put the terminal in raw mode: %s", strerror(-r));
			return CLI_EXIT_FAILED;
		}
		/* the process may have another size than our window: say ours */
		queue_resize(&s);
	}
	loop(&s);
	if (s.res.end == ATTACH_DETACHED)
		flush_before_leaving(&s);
	term_restore();
	/* what follows starts on a line of its own, not after the process's prompt or the ^C
	 * the terminal echoed */
	if (s.res.end != ATTACH_EXITED && isatty(STDERR_FILENO) &&
	    (s.midline || s.res.signo == SIGINT))
		fputc('\n', stderr);
	if (s.res.end == ATTACH_BROKE)
		output_error("%s", s.why);
	s.raw = client_raw_free(s.raw);
	buf_free(&s.in);
	buf_free(&s.out);
	*ret = s.res;
	return 0;
}
