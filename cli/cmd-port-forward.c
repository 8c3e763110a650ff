/* cmd-port-forward.c: "port-forward SBX [LOCAL:]GUEST...": listens on 127.0.0.1:LOCAL and,
 * for each connection accepted there, opens a tunnel (GET …/tunnel?port=GUEST upgraded to
 * sbx-tunnel/1) and relays bytes both ways, half-closes included. One poll() loop; a tunnel
 * is opened while the loop waits (a moment: the guest connects on loopback). Ctrl-C or SIGTERM
 * closes everything and exits 0. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include "cli.h"
#include "client.h"
#include "output.h"
#include "term.h"
#include "util.h"

#define MAX_FORWARDS 16
#define MAX_PAIRS 256
#define PIPE_BUF_SIZE (64u << 10)

struct forward {
	int fd; /* listening on 127.0.0.1:local */
	uint16_t local, guest;
};

/* One direction: bytes read from one side, waiting to be written to the other. */
struct dir {
	char buf[PIPE_BUF_SIZE];
	size_t len, off;
	bool eof;  /* the reading side ended */
	bool shut; /* ... and the writing side was told */
};

struct pair {
	int local;
	struct client_raw *raw;
	struct dir up, down; /* up: local -> sandbox; down: sandbox -> local */
};

struct pf {
	struct cli *cli;
	const char *ref;
	struct forward fwd[MAX_FORWARDS];
	size_t nfwd;
	struct pair *pairs[MAX_PAIRS];
};

static int
parse_spec(const char *s, struct forward *ret)
{
	const char *colon = strchr(s, ':');
	uint64_t local = 0, guest;

	if (colon) {
		_cleanup_free_ char *l = strndup(s, (size_t)(colon - s));
		if (!l || (*l && (parse_u64(l, &local) < 0 || local > 65535)))
			return -EINVAL;
		s = colon + 1;
	}
	if (parse_u64(s, &guest) < 0 || guest == 0 || guest > 65535)
		return -EINVAL;
	ret->guest = (uint16_t)guest;
	ret->local = local ? (uint16_t)local : (uint16_t)guest;
	return 0;
}

static int
listen_local(struct forward *f)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
		                   .sin_port = htons(f->local),
		                   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1;

	f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (f->fd < 0)
		return -errno;
	(void)setsockopt(f->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(f->fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(f->fd, 64) < 0)
		return -errno;
	return 0;
}

static void
pair_free(struct pf *pf, size_t i)
{
	struct pair *p = pf->pairs[i];

	if (!p)
		return;
	safe_close(p->local);
	client_raw_free(p->raw);
	free(p);
	pf->pairs[i] = NULL;
}

/* A connection accepted on f: its tunnel, or a word on stderr and the connection closed. */
static void
open_pair(struct pf *pf, const struct forward *f, int local)
{
	_cleanup_(client_response_done) struct client_response resp = { 0 };
	_cleanup_free_ char *suffix = strdup_printf("/tunnel?port=%u", f->guest);
	_cleanup_free_ char *path = suffix ? cli_sandbox_path(pf->ref, suffix) : NULL;
	struct client_raw *raw = NULL;
	struct client *c;
	struct pair *p;
	size_t slot = MAX_PAIRS;
	int r;

	for (size_t i = 0; i < MAX_PAIRS && slot == MAX_PAIRS; i++)
		if (!pf->pairs[i])
			slot = i;
	if (!path || slot == MAX_PAIRS || cli_client(pf->cli, &c) != 0) {
		output_error("127.0.0.1:%u -> %u: cannot take another connection", f->local,
		             f->guest);
		safe_close(local);
		return;
	}
	r = client_upgrade(c, path, "sbx-tunnel/1", &resp, &raw);
	if (r < 0 || !raw) {
		if (r < 0)
			(void)cli_fail_transport(pf->cli, r);
		else
			(void)cli_fail_status(pf->cli, &resp);
		safe_close(local);
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		client_raw_free(raw);
		safe_close(local);
		return;
	}
	p->local = local;
	p->raw = raw;
	pf->pairs[slot] = p;
}

/* Reads what a side has (while its buffer is empty). -1: the pair is broken. */
static int
fill(struct pair *p, bool up)
{
	struct dir *d = up ? &p->up : &p->down;
	ssize_t k;

	if (d->eof || d->len)
		return 0;
	if (up) {
		k = read(p->local, d->buf, sizeof(d->buf));
		if (k < 0)
			k = errno == EAGAIN || errno == EINTR ? -EAGAIN : -EIO;
	} else {
		k = client_raw_recv(p->raw, d->buf, sizeof(d->buf));
	}
	if (k == -EAGAIN)
		return 0;
	if (k < 0)
		return -1;
	if (k == 0)
		d->eof = true;
	d->len = (size_t)k;
	d->off = 0;
	return 0;
}

/* Writes what a direction holds; passes its EOF on once it is written. -1: broken. */
static int
drain(struct pair *p, bool up)
{
	struct dir *d = up ? &p->up : &p->down;

	while (d->off < d->len) {
		ssize_t k = up ? client_raw_send(p->raw, d->buf + d->off, d->len - d->off)
		               : send(p->local, d->buf + d->off, d->len - d->off, MSG_NOSIGNAL);
		if (!up && k < 0)
			k = errno == EAGAIN || errno == EINTR ? -EAGAIN : -EIO;
		if (k == -EAGAIN)
			return 0;
		if (k < 0)
			return -1;
		d->off += (size_t)k;
	}
	d->len = d->off = 0;
	if (d->eof && !d->shut) {
		d->shut = true;
		if (up)
			(void)client_raw_shutdown(p->raw); /* over TLS: both close at the end */
		else
			(void)shutdown(p->local, SHUT_WR);
	}
	return 0;
}

/* Moves what can move now. false: the pair is done (both ways ended) or broken. */
static bool
pump(struct pair *p)
{
	for (int round = 0; round < 16; round++) {
		size_t before = p->up.len + p->down.len;
		bool was_eof = p->up.eof && p->down.eof;
		if (fill(p, true) < 0 || fill(p, false) < 0 || drain(p, true) < 0 ||
		    drain(p, false) < 0)
			return false;
		if (p->up.shut && p->down.shut)
			return false;
		if (p->up.len + p->down.len == before && was_eof == (p->up.eof && p->down.eof) &&
		    !client_raw_pending(p->raw))
			break;
	}
	return true;
}

static void
serve(struct pf *pf)
{
	for (;;) {
		struct pollfd fds[1 + MAX_FORWARDS + 2 * MAX_PAIRS];
		size_t n = 0;
		int sig;

		fds[n++] = (struct pollfd){ .fd = term_signal_fd(), .events = POLLIN };
		for (size_t i = 0; i < pf->nfwd; i++)
			fds[n++] = (struct pollfd){ .fd = pf->fwd[i].fd, .events = POLLIN };
		for (size_t i = 0; i < MAX_PAIRS; i++) {
			struct pair *p = pf->pairs[i];
			if (!p)
				continue;
			fds[n++] = (struct pollfd){
				.fd = p->local,
				.events = (short)((!p->up.eof && !p->up.len ? POLLIN : 0) |
				                  (p->down.len ? POLLOUT : 0))
			};
			fds[n++] = (struct pollfd){
				.fd = client_raw_fd(p->raw),
				.events = (short)((!p->down.eof && !p->down.len ? POLLIN : 0) |
				                  (p->up.len ? POLLOUT : 0))
			};
		}
		if (poll(fds, n, -1) < 0 && errno != EINTR)
			return;
		while ((sig = term_signal_next()) != 0)
			if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT)
				return;
		for (size_t i = 0; i < pf->nfwd; i++) {
			int fd;
			if (!(fds[1 + i].revents & POLLIN))
				continue;
			fd = accept4(pf->fwd[i].fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd >= 0)
				open_pair(pf, &pf->fwd[i], fd);
		}
		/* every pair moves what it can (reads and writes do not block): new ones too */
		for (size_t i = 0; i < MAX_PAIRS; i++)
			if (pf->pairs[i] && !pump(pf->pairs[i]))
				pair_free(pf, i);
	}
}

int
cmd_port_forward(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *path = NULL;
	struct pf pf = { .cli = cli };
	json_t *answer = NULL;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (argc - optind < 2 || !*argv[optind])
		return cli_usage_error(cli, "needs a sandbox and at least one port: sandbox-cli "
		                            "port-forward SBX [LOCAL:]GUEST...");
	if ((size_t)(argc - optind - 1) > MAX_FORWARDS)
		return cli_usage_error(cli, "at most %d ports at once", MAX_FORWARDS);
	pf.ref = argv[optind];
	for (int i = optind + 1; i < argc; i++) {
		if (parse_spec(argv[i], &pf.fwd[pf.nfwd]) < 0)
			return cli_usage_error(cli,
			                       "'%s': a port is [LOCAL:]GUEST, each 1-65535 "
			                       "(LOCAL 0 or left out: the same as GUEST)",
			                       argv[i]);
		pf.fwd[pf.nfwd++].fd = -1;
	}
	/* the sandbox is there (and the caller's) before anything listens */
	path = cli_sandbox_path(pf.ref, "");
	if (!path)
		return cli_oom();
	r = cli_call(cli, "GET", path, NULL, &answer);
	json_decref(answer);
	if (r != 0)
		return r;
	r = term_signals_init();
	for (size_t i = 0; r >= 0 && i < pf.nfwd; i++) {
		r = listen_local(&pf.fwd[i]);
		if (r < 0)
			output_error("cannot listen on 127.0.0.1:%u: %s", pf.fwd[i].local,
			             strerror(-r));
	}
	if (r >= 0) {
		for (size_t i = 0; i < pf.nfwd; i++)
			printf("Forwarding from 127.0.0.1:%u -> %u\n", pf.fwd[i].local,
			       pf.fwd[i].guest);
		fflush(stdout);
		serve(&pf);
	}
	for (size_t i = 0; i < MAX_PAIRS; i++)
		pair_free(&pf, i);
	for (size_t i = 0; i < pf.nfwd; i++)
		safe_close(pf.fwd[i].fd);
	return r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}
