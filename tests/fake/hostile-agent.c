/* hostile-agent.c: a guest agent that breaks the host <-> guest protocol (lib/agentproto.h) on
 * purpose, for tests/integration/test-hostile-agent.c. The fake backend runs it in place of
 * sandbox-guestd's test mode (SANDBOXD_FAKE_AGENT), with the same command line: --port SOCKET
 * --home DIR. A real guest agent never sends what this one does, so only a stand-in can show
 * what sandboxd does with a guest that is hostile (R-I7).
 *
 * What it does is chosen by the hostname the host's HELLO carries (the sandbox's name):
 *   flood      answers HELLO with 256 MiB of bytes that never hold a session start
 *   oversized  after an honest handshake, answers the first EXEC with a frame header that
 *              announces a payload of 4 GiB
 *   overmax    ... a payload one byte over the protocol's 1 MiB
 *   badtype    ... a frame of a type only the host sends (RESIZE)
 *   badexit    ... an EXIT frame of the wrong length
 *   endless    ... an OUTPUT frame of the largest size, then 256 MiB more bytes that never make
 *              a valid frame
 *   (other)    honest: it answers every request, EXEC with ENOENT ("no such program")
 * Tunnels (EXEC with PORT): an honest agent ("echo", and every mode above) opens one (handle
 * 100, 101, ...) whose socket echoes what the host writes: STDIN becomes OUTPUT on the same
 * handle (when attached), is acknowledged with STDIN_ACK, and the host's EOF ends it (EXIT 0).
 * These modes break the tunnel part of the protocol:
 *   strays      before answering, sends EXIT, STDIN_ACK and OUTPUT for handles nobody
 *               follows (the host ignores those), then is honest
 *   nopid       answers the tunnel's EXEC with success but no PID
 *   ackmore     acknowledges 1000 bytes more stdin than it was sent
 *   ackback     acknowledges the stdin it was sent, then less
 *   wrongoffset at ATTACH, sends OUTPUT at offset 7 (the first byte is at 0)
 *   exittwice   at ATTACH, sends EXIT twice
 *   floodtun    at ATTACH, sends 8 MiB of OUTPUT at once, the host's window (1 MiB) ignored
 *   noack       takes stdin and never acknowledges it (nor echoes it)
 *   slowopen    never answers a tunnel's EXEC
 * Then it writes what it is given until the host closes the channel, and exits. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "agentproto.h"
#include "frame.h"
#include "tlv.h"
#include "util.h"

#define FLOOD_BYTES (256u << 20)

static int
send_all(int fd, const void *p, size_t len)
{
	const char *c = p;

	while (len > 0) {
		ssize_t k = send(fd, c, len, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		len -= (size_t)k;
	}
	return 0;
}

/* Sends bytes of 0x01 (never a session start, never a valid header) until total or until the
 * host closes. */
static void
flood(int fd, size_t total)
{
	static char junk[65536];

	memset(junk, 0x01, sizeof(junk));
	for (size_t sent = 0; sent < total; sent += sizeof(junk))
		if (send_all(fd, junk, sizeof(junk)) < 0)
			return;
}

static int
send_frame(int fd, uint8_t type, uint8_t flags, uint32_t chan, const struct buf *payload)
{
	_cleanup_buf_ struct buf out = BUF_INIT(FRAME_HEADER + AP_FRAME_MAX + AP_MAGIC_LEN);

	if (frame_put(&out, type, flags, chan, payload ? payload->data : NULL,
	              payload ? payload->len : 0) < 0)
		return -1;
	return send_all(fd, out.data, out.len);
}

/* A frame header with whatever fields, and no payload. */
static int
send_header(int fd, uint8_t type, uint16_t reserved, uint32_t chan, uint32_t len)
{
	uint8_t h[FRAME_HEADER];

	h[0] = type;
	h[1] = 0;
	be16_put(h + 2, reserved);
	be32_put(h + 4, chan);
	be32_put(h + 8, len);
	return send_all(fd, h, sizeof(h));
}

static int
answer(int fd, uint32_t chan, uint32_t err)
{
	_cleanup_buf_ struct buf p = BUF_INIT(256);

	if (tlv_put_u32(&p, AP_T_ERRNO, err) < 0)
		return -1;
	return send_frame(fd, AP_RESULT, 0, chan, &p);
}

/* The first EXEC's answer in mode (NULL: honest). */
static void
misbehave(int fd, const char *mode, uint32_t chan)
{
	uint8_t exitp[3] = { 0 };
	struct buf p = { .data = (char *)exitp, .len = sizeof(exitp) };

	if (streq(mode, "oversized"))
		(void)send_header(fd, AP_OUTPUT, 0, 1, 0xfffffff0u);
	else if (streq(mode, "overmax"))
		(void)send_header(fd, AP_OUTPUT, 0, 1, AP_FRAME_MAX + 1);
	else if (streq(mode, "badtype"))
		(void)send_header(fd, AP_RESIZE, 0, 1, 0);
	else if (streq(mode, "badexit"))
		(void)send_frame(fd, AP_EXIT, 0, 1, &p);
	else if (streq(mode, "endless")) {
		/* an OUTPUT frame for no process (the host ignores those) of the largest size,
		 * and more bytes, as if it never ended */
		if (send_header(fd, AP_OUTPUT, 0, 0x7fffffffu, AP_FRAME_MAX) == 0)
			flood(fd, FLOOD_BYTES);
	} else
		(void)answer(fd, chan, ENOENT);
}

/* One tunnel at a time: its handle, what it sent and what it took. */
struct tun {
	uint32_t handle;
	bool attached;
	uint64_t out, in; /* OUTPUT offset; STDIN bytes taken */
};

static int
send_raw(int fd, uint8_t type, uint8_t flags, uint32_t chan, const void *p, size_t len)
{
	struct buf b = { .data = (char *)p, .len = len };

	return send_frame(fd, type, flags, chan, &b);
}

static int
send_u64(int fd, uint8_t type, uint32_t chan, uint64_t v)
{
	uint8_t p[8];

	be64_put(p, v);
	return send_raw(fd, type, 0, chan, p, sizeof(p));
}

static int
send_exit(int fd, uint32_t chan, int32_t code, uint64_t end)
{
	uint8_t p[12];

	be32_put(p, (uint32_t)code);
	be64_put(p + 4, end);
	return send_raw(fd, AP_EXIT, 0, chan, p, sizeof(p));
}

static int
send_output(int fd, uint32_t chan, uint64_t offset, const void *bytes, size_t len)
{
	_cleanup_buf_ struct buf p = BUF_INIT(AP_FRAME_MAX);
	uint8_t h[9];

	h[0] = AP_STDOUT;
	be64_put(h + 1, offset);
	if (buf_append(&p, h, sizeof(h)) < 0 || buf_append(&p, bytes, len) < 0)
		return -1;
	return send_frame(fd, AP_OUTPUT, 0, chan, &p);
}

/* The PORT of an EXEC, or 0 (a process). */
static uint16_t
exec_port(const struct frame *f)
{
	struct tlv_reader rd;
	struct tlv t;
	uint16_t port = 0;

	tlv_reader_init(&rd, f->payload, f->len);
	while (tlv_next(&rd, &t) > 0)
		if (t.tag == AP_T_PORT)
			(void)tlv_u16(&t, &port);
	return port;
}

/* A tunnel's EXEC in mode. */
static void
tunnel_open(int fd, const char *mode, uint32_t chan, struct tun *tn)
{
	_cleanup_buf_ struct buf p = BUF_INIT(256);

	if (streq(mode, "slowopen"))
		return;
	if (streq(mode, "strays")) {
		(void)send_exit(fd, 9999, 0, 0);
		(void)send_u64(fd, AP_STDIN_ACK, 9998, 1u << 30);
		(void)send_output(fd, 9997, 12345, "stray", 5);
	}
	*tn = (struct tun){ .handle = tn->handle ? tn->handle + 1 : 100 };
	(void)tlv_put_u32(&p, AP_T_ERRNO, 0);
	if (!streq(mode, "nopid"))
		(void)tlv_put_u32(&p, AP_T_PID, tn->handle);
	(void)send_frame(fd, AP_RESULT, 0, chan, &p);
}

static void
tunnel_attach(int fd, const char *mode, struct tun *tn)
{
	static char big[AP_FRAME_MAX];

	tn->attached = true;
	if (streq(mode, "wrongoffset")) {
		(void)send_output(fd, tn->handle, 7, "x", 1);
	} else if (streq(mode, "exittwice")) {
		(void)send_exit(fd, tn->handle, 0, 0);
		(void)send_exit(fd, tn->handle, 0, 0);
	} else if (streq(mode, "floodtun")) {
		memset(big, 'f', sizeof(big));
		for (uint64_t off = 0; off < (8u << 20); off += 65536)
			if (send_output(fd, tn->handle, off, big, 65536) < 0)
				return;
	}
}

static void
tunnel_stdin(int fd, const char *mode, const struct frame *f, struct tun *tn)
{
	if (streq(mode, "noack"))
		return;
	tn->in += f->len;
	if (f->len && tn->attached) {
		(void)send_output(fd, tn->handle, tn->out, f->payload, f->len);
		tn->out += f->len;
	}
	if (streq(mode, "ackmore"))
		(void)send_u64(fd, AP_STDIN_ACK, tn->handle, tn->in + 1000);
	else if (streq(mode, "ackback") && tn->in > 0) {
		(void)send_u64(fd, AP_STDIN_ACK, tn->handle, tn->in);
		(void)send_u64(fd, AP_STDIN_ACK, tn->handle, tn->in - 1);
	} else if (f->len)
		(void)send_u64(fd, AP_STDIN_ACK, tn->handle, tn->in);
	if (f->flags & AP_F_EOF)
		(void)send_exit(fd, tn->handle, 0, tn->out);
}

/* Serves one session: the HELLO, then requests. */
static void
serve(int fd)
{
	struct frame_decoder dec;
	char chunk[65536], mode[256] = "";
	uint8_t nonce[AP_NONCE_LEN];
	bool hello = false, nonce_ok = false;
	struct tun tn = { 0 };

	frame_decoder_init(&dec, AP_FRAME_MAX, true);
	for (;;) {
		ssize_t k = recv(fd, chunk, sizeof(chunk), 0);
		struct frame f;
		bool new_session;
		int r;

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0 || frame_decoder_feed(&dec, chunk, (size_t)k) < 0)
			break; /* the host closed the channel */
		while ((r = frame_decoder_next(&dec, &f, &new_session)) > 0) {
			struct tlv_reader rd;
			struct tlv t;

			if (!hello) {
				if (f.type != AP_HELLO)
					continue;
				tlv_reader_init(&rd, f.payload, f.len);
				while (tlv_next(&rd, &t) > 0) {
					if (t.tag == AP_T_NONCE && t.len == AP_NONCE_LEN) {
						memcpy(nonce, t.val, AP_NONCE_LEN);
						nonce_ok = true;
					} else if (t.tag == AP_T_HOSTNAME && t.len < sizeof(mode)) {
						memcpy(mode, t.val, t.len);
						mode[t.len] = '\0';
					}
				}
				hello = true;
				if (streq(mode, "flood")) {
					flood(fd, FLOOD_BYTES);
					continue;
				}
				if (nonce_ok) {
					_cleanup_buf_ struct buf out = BUF_INIT(1024);
					_cleanup_buf_ struct buf ack = BUF_INIT(512);
					(void)tlv_put(&ack, AP_T_NONCE, nonce, AP_NONCE_LEN);
					(void)tlv_put_str(&ack, AP_T_VERSION, "hostile");
					(void)frame_put_magic(&out);
					(void)frame_put(&out, AP_HELLO_ACK, 0, 0, ack.data,
					                ack.len);
					(void)send_all(fd, out.data, out.len);
				}
				continue;
			}
			switch (f.type) {
			case AP_EXEC:
				if (exec_port(&f))
					tunnel_open(fd, mode, f.chan, &tn);
				else
					misbehave(fd, mode, f.chan);
				break;
			case AP_ATTACH:
				if (tn.handle && f.chan == tn.handle)
					tunnel_attach(fd, mode, &tn);
				break;
			case AP_STDIN:
				if (tn.handle && f.chan == tn.handle)
					tunnel_stdin(fd, mode, &f, &tn);
				break;
			case AP_PS:
			case AP_PING:
			case AP_FILE_READ:
			case AP_FILE_WRITE:
			case AP_FILE_LIST:
			case AP_FILE_REMOVE:
			case AP_SHUTDOWN:
				(void)answer(fd, f.chan, 0);
				break;
			default:
				break; /* no process here to signal or resize */
			}
		}
		if (r < 0)
			break;
	}
	frame_decoder_done(&dec);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "home", required_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = NULL;
	int c, lfd, fd;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
		if (c == 'p')
			path = optarg;
	if (!path || strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "hostile-agent: --port SOCKET is needed\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	(void)unlink(path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4) < 0) {
		fprintf(stderr, "hostile-agent: '%s': %s\n", path, strerror(errno));
		return 1;
	}
	fprintf(stderr, "hostile-agent: listening on '%s'\n", path);
	/* one session after another, as the host reconnects */
	while ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		serve(fd);
		close(fd);
	}
	return 0;
}
