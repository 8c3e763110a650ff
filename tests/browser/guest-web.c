/* guest-web.c: the "dev server" tests/browser/preview.mjs runs inside a real VM's guest (the
 * busybox image has no python or node): a static musl binary that serves the files of one
 * directory, answers GET /ws with a WebSocket (RFC 6455) that echoes each text frame, and
 * appends every request's Cookie header to a log, so that the test can tell what cookies the
 * guest was sent.
 *
 *   guest-web PORT DIR LOG
 *
 * It listens on 127.0.0.1:PORT, then goes to the background in a session of its own and the
 * command exits 0: when it returns, the server answers. One connection is one request
 * (Connection: close), served by a child of its own. Test code: it trusts its client (the
 * preview relay), but bounds what it reads. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX 16384

/* --- SHA-1 (FIPS 180-4), for Sec-WebSocket-Accept alone --- */

static uint32_t
rol(uint32_t x, int n)
{
	return (x << n) | (x >> (32 - n));
}

static void
sha1_block(uint32_t h[5], const unsigned char *p)
{
	uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 80; i++)
		w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	for (int i = 0; i < 80; i++) {
		uint32_t f, k, t;
		if (i < 20) {
			f = (b & c) | (~b & d);
			k = 0x5a827999;
		} else if (i < 40) {
			f = b ^ c ^ d;
			k = 0x6ed9eba1;
		} else if (i < 60) {
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdc;
		} else {
			f = b ^ c ^ d;
			k = 0xca62c1d6;
		}
		t = rol(a, 5) + f + e + k + w[i];
		e = d;
		d = c;
		c = rol(b, 30);
		b = a;
		a = t;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
}

/* s is short (a key and the GUID): at most 119 bytes */
static void
sha1(const char *s, unsigned char out[20])
{
	uint32_t h[5] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0 };
	unsigned char m[128] = { 0 };
	size_t n = strlen(s), blocks = n + 9 <= 64 ? 1 : 2;
	uint64_t bits = (uint64_t)n * 8;

	memcpy(m, s, n);
	m[n] = 0x80;
	for (int i = 0; i < 8; i++)
		m[blocks * 64 - 1 - i] = (unsigned char)(bits >> (8 * i));
	for (size_t i = 0; i < blocks; i++)
		sha1_block(h, m + 64 * i);
	for (int i = 0; i < 20; i++)
		out[i] = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
}

static void
base64(const unsigned char *in, size_t n, char *out)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;

	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
		             (i + 2 < n ? in[i + 2] : 0);
		out[o++] = a[v >> 18 & 63];
		out[o++] = a[v >> 12 & 63];
		out[o++] = i + 1 < n ? a[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? a[v & 63] : '=';
	}
	out[o] = '\0';
}

/* --- one connection --- */

static int
write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t k = write(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

static int
read_full(int fd, unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = read(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The value of header name in head (its lines end in \r\n), copied to out; "" when absent. */
static void
header(const char *head, const char *name, char *out, size_t size)
{
	size_t len = strlen(name);

	out[0] = '\0';
	for (const char *l = strstr(head, "\r\n"); l && l[2] != '\r'; l = strstr(l + 2, "\r\n")) {
		const char *v = l + 2, *end;
		if (strncasecmp(v, name, len) != 0 || v[len] != ':')
			continue;
		v += len + 1;
		while (*v == ' ')
			v++;
		end = strstr(v, "\r\n");
		if (!end || (size_t)(end - v) >= size)
			return;
		memcpy(out, v, (size_t)(end - v));
		out[end - v] = '\0';
		return;
	}
}

/* Echoes each text frame (masked, as from a browser; payloads under 64 KiB) until a close. */
static void
echo(int fd)
{
	unsigned char h[4], mask[4], payload[65536], out[4];

	for (;;) {
		size_t len;
		int op;
		if (read_full(fd, h, 2) < 0)
			return;
		op = h[0] & 0x0f;
		len = h[1] & 0x7f;
		if (len == 127)
			return;
		if (len == 126) {
			if (read_full(fd, h + 2, 2) < 0)
				return;
			len = (size_t)h[2] << 8 | h[3];
		}
		if (!(h[1] & 0x80) || read_full(fd, mask, 4) < 0 || read_full(fd, payload, len) < 0)
			return;
		for (size_t i = 0; i < len; i++)
			payload[i] ^= mask[i % 4];
		if (op == 8) {
			(void)write_all(fd, "\x88\x00", 2);
			return;
		}
		if (op != 1)
			continue;
		out[0] = 0x81;
		if (len < 126) {
			out[1] = (unsigned char)len;
			if (write_all(fd, out, 2) < 0)
				return;
		} else {
			out[1] = 126;
			out[2] = (unsigned char)(len >> 8);
			out[3] = (unsigned char)len;
			if (write_all(fd, out, 4) < 0)
				return;
		}
		if (write_all(fd, payload, len) < 0)
			return;
	}
}

static void
respond(int fd, const char *status, const char *type, const char *body, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
	                 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	                 "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
	                 status, type, len);

	if (write_all(fd, head, (size_t)n) == 0)
		(void)write_all(fd, body, len);
}

static void
serve_file(int fd, const char *dir, const char *path)
{
	static char body[1 << 20];
	char file[4200];
	const char *dot;
	size_t len = 0;
	ssize_t k;
	int f;

	if (strcmp(path, "/") == 0)
		path = "/index.html";
	if (strstr(path, "..") || strlen(path) > 4000) {
		respond(fd, "404 Not Found", "text/plain", "not found\n", 10);
		return;
	}
	snprintf(file, sizeof(file), "%s%s", dir, path);
	f = open(file, O_RDONLY | O_CLOEXEC);
	if (f < 0) {
		respond(fd, "404 Not Found", "text/plain", "not found\n", 10);
		return;
	}
	while (len < sizeof(body) && (k = read(f, body + len, sizeof(body) - len)) > 0)
		len += (size_t)k;
	close(f);
	dot = strrchr(path, '.');
	respond(fd, "200 OK",
	        dot && strcmp(dot, ".js") == 0 ? "text/javascript" : "text/html; charset=utf-8",
	        body, len);
}

static void
serve(int fd, const char *dir, const char *log)
{
	char head[HEAD_MAX + 1], path[4096], cookie[4096], key[128], line[8400];
	size_t n = 0;
	int lf;

	while (n < HEAD_MAX) {
		ssize_t k = read(fd, head + n, HEAD_MAX - n);
		if (k <= 0)
			return;
		n += (size_t)k;
		head[n] = '\0';
		if (strstr(head, "\r\n\r\n"))
			break;
	}
	if (!strstr(head, "\r\n\r\n") || sscanf(head, "GET %4095s HTTP/1.", path) != 1) {
		respond(fd, "400 Bad Request", "text/plain", "bad request\n", 12);
		return;
	}
	header(head, "Cookie", cookie, sizeof(cookie));
	lf = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (lf >= 0) {
		int m = snprintf(line, sizeof(line), "%s cookie=%s\n", path, cookie);
		(void)write_all(lf, line, (size_t)m < sizeof(line) ? (size_t)m : sizeof(line) - 1);
		close(lf);
	}
	header(head, "Sec-WebSocket-Key", key, sizeof(key));
	if (strcmp(path, "/ws") == 0 && key[0] && strlen(key) < 64) {
		unsigned char md[20];
		char accept[32], resp[256];
		int m;
		strcat(key, "258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
		sha1(key, md);
		base64(md, sizeof(md), accept);
		m = snprintf(resp, sizeof(resp),
		             "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
		             "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		             accept);
		if (write_all(fd, resp, (size_t)m) == 0)
			echo(fd);
		return;
	}
	serve_file(fd, dir, path);
}

int
main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int ls, one = 1, ready[2], null;
	char c = 0;
	pid_t pid;

	if (argc != 4 || atoi(argv[1]) <= 0 || atoi(argv[1]) > 65535) {
		fprintf(stderr, "usage: guest-web PORT DIR LOG\n");
		return 2;
	}
	sa.sin_port = htons((uint16_t)atoi(argv[1]));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 64) < 0) {
		perror("guest-web: listen");
		return 1;
	}
	/* to the background, out of the starting command's process group (which is killed
	 * when a run ends early), and exit 0 once the child is there */
	if (pipe(ready) < 0 || (pid = fork()) < 0) {
		perror("guest-web");
		return 1;
	}
	if (pid > 0) {
		close(ready[1]);
		return read(ready[0], &c, 1) == 1 ? 0 : 1;
	}
	close(ready[0]);
	null = open("/dev/null", O_RDWR);
	if (setsid() < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 ||
	    dup2(null, 2) < 0 || write(ready[1], "r", 1) != 1)
		_exit(1);
	close(ready[1]);
	close(null);
	signal(SIGCHLD, SIG_IGN); /* no zombies */
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		pid = fork();
		if (pid == 0) {
			close(ls);
			serve(fd, argv[2], argv[3]);
			shutdown(fd, SHUT_WR);
			close(fd);
			_exit(0);
		}
		close(fd);
	}
}
