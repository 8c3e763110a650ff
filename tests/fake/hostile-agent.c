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

/* Serves one session: the HELLO, then requests. */
static void
serve(int fd)
{
	struct frame_decoder dec;
	char chunk[65536], mode[256] = "";
	uint8_t nonce[AP_NONCE_LEN];
	bool hello = false, nonce_ok = false;

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
				misbehave(fd, mode, f.chan);
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
				break; /* no process here to signal, feed or follow */
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
