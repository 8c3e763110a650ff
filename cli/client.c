/* client.c: see client.h. One CURL easy handle per client: its connection cache keeps the
 * connection open between the requests of one command (doctor makes three). */
#include <ctype.h>
#include <errno.h>
#include <sys/socket.h>
#include <poll.h>
#include <stdlib.h>
#include <strings.h>
#include "client.h"
#include "util.h"

#ifndef SANDBOX_CLI_VERSION
#define SANDBOX_CLI_VERSION "0.1.0-unknown"
#endif

#define CONNECT_TIMEOUT_S 10L
/* the server sends a heartbeat on open streams every second: a minute of silence is a
 * dead connection */
#define STREAM_SILENCE_S 60L

struct client {
	CURL *curl;
	enum endpoint_kind kind;
	char *endpoint;  /* as the user wrote it, for messages */
	char *base;      /* "http://localhost" for a unix socket, else the endpoint */
	char *unix_path; /* NULL for TCP */
	char *ca;        /* NULL: the system's trust store */
	char *auth;      /* "Authorization: Bearer ..." or NULL */
	struct client_failure failure;
	char errbuf[CURL_ERROR_SIZE];
};

static bool
port_valid(const char *s, size_t n)
{
	uint64_t v;

	return parse_u64_n(s, n, &v) == 0 && v >= 1 && v <= 65535;
}

int
client_parse_endpoint(const char *endpoint, enum endpoint_kind *ret_kind, const char **ret_why)
{
	const char *auth, *end, *port = NULL;
	enum endpoint_kind kind;
	size_t n;

	if (str_has_prefix(endpoint, "unix://")) {
		const char *path = endpoint + 7;
		if (path[0] != '/') {
			*ret_why = "a unix endpoint is unix:// and an absolute path, as in "
			           "unix:///run/sandboxd/sandboxd.sock";
			return -EINVAL;
		}
		if (strlen(path) >= 108) {
			*ret_why = "the socket path is longer than a unix socket address allows";
			return -EINVAL;
		}
		*ret_kind = ENDPOINT_UNIX;
		return 0;
	}
	if (str_has_prefix(endpoint, "http://")) {
		kind = ENDPOINT_HTTP;
		auth = endpoint + 7;
	} else if (str_has_prefix(endpoint, "https://")) {
		kind = ENDPOINT_HTTPS;
		auth = endpoint + 8;
	} else {
		*ret_why = "an endpoint is unix:///PATH, http://HOST:PORT or https://HOST:PORT";
		return -EINVAL;
	}
	n = strlen(auth);
	if (n > 0 && auth[n - 1] == '/')
		n--;
	if (n == 0 || n > 255) {
		*ret_why = "the endpoint names no host";
		return -EINVAL;
	}
	if (auth[0] == '[') {
		end = memchr(auth, ']', n);
		if (!end || end == auth + 1) {
			*ret_why =
			        "an IPv6 address is written in brackets, as in http://[::1]:8080";
			return -EINVAL;
		}
		for (const char *p = auth + 1; p < end; p++)
			if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.') {
				*ret_why = "the IPv6 address in brackets is malformed";
				return -EINVAL;
			}
		end++;
		if (end < auth + n) {
			if (*end != ':') {
				*ret_why = "only a :PORT may follow the IPv6 address";
				return -EINVAL;
			}
			port = end + 1;
		}
	} else {
		for (end = auth; end < auth + n && *end != ':'; end++)
			if (!isalnum((unsigned char)*end) && *end != '.' && *end != '-' &&
			    *end != '_') {
				*ret_why = "the endpoint has a path, a query, a user name or a "
				           "character a host name cannot hold; write only "
				           "SCHEME://HOST:PORT";
				return -EINVAL;
			}
		if (end == auth) {
			*ret_why = "the endpoint names no host";
			return -EINVAL;
		}
		if (end < auth + n)
			port = end + 1;
	}
	if (port && !port_valid(port, (size_t)(auth + n - port))) {
		*ret_why = "the port must be a number from 1 to 65535";
		return -EINVAL;
	}
	*ret_kind = kind;
	return 0;
}

int
client_new(const char *endpoint, const char *token, const char *ca, struct client **ret)
{
	_cleanup_(client_freep) struct client *c = calloc(1, sizeof(*c));
	const char *why;
	size_t n;

	if (!c)
		return -ENOMEM;
	if (client_parse_endpoint(endpoint, &c->kind, &why) < 0)
		return -EINVAL;
	c->endpoint = strdup(endpoint);
	if (!c->endpoint)
		return -ENOMEM;
	if (c->kind == ENDPOINT_UNIX) {
		c->unix_path = strdup(endpoint + 7);
		c->base = strdup("http://localhost");
		if (!c->unix_path || !c->base)
			return -ENOMEM;
	} else {
		c->base = strdup(endpoint);
		if (!c->base)
			return -ENOMEM;
		n = strlen(c->base);
		if (c->base[n - 1] == '/')
			c->base[n - 1] = '\0';
	}
	if (ca) {
		c->ca = strdup(ca);
		if (!c->ca)
			return -ENOMEM;
	}
	if (token) {
		c->auth = strdup_printf("Authorization: Bearer %s", token);
		if (!c->auth)
			return -ENOMEM;
	}
	c->curl = curl_easy_init();
	if (!c->curl)
		return -ENOMEM;
	*ret = TAKE_PTR(c);
	return 0;
}

int
client_dup(const struct client *c, struct client **ret)
{
	_cleanup_(client_freep) struct client *n = NULL;
	/* the token is kept only inside the header line */
	const char *token = c->auth ? c->auth + strlen("Authorization: Bearer ") : NULL;
	int r = client_new(c->endpoint, token, c->ca, &n);

	if (r < 0)
		return r;
	*ret = TAKE_PTR(n);
	return 0;
}

struct client *
client_free(struct client *c)
{
	if (!c)
		return NULL;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	free(c->endpoint);
	free(c->base);
	free(c->unix_path);
	free(c->ca);
	if (c->auth) {
		/* the token leaves no copy behind in freed memory */
		explicit_bzero(c->auth, strlen(c->auth));
		free(c->auth);
	}
	free(c);
	return NULL;
}

const char *
client_endpoint(const struct client *c)
{
	return c->endpoint;
}

enum endpoint_kind
client_kind(const struct client *c)
{
	return c->kind;
}

bool
client_has_token(const struct client *c)
{
	return c->auth != NULL;
}

const struct client_failure *
client_failure(const struct client *c)
{
	return &c->failure;
}

void
client_response_done(struct client_response *r)
{
	buf_free(&r->body);
}

char *
client_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	_cleanup_buf_ struct buf b = BUF_INIT(3 * strlen(s) + 1);

	if (!*s)
		return strdup(""); /* buf_steal() of an empty buf is not NUL-terminated */
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		int r;
		if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~')
			r = buf_putc(&b, (char)*p);
		else
			r = buf_printf(&b, "%%%c%c", hex[*p >> 4], hex[*p & 15]);
		if (r < 0)
			return NULL;
	}
	return buf_steal(&b);
}

/* ---- one transfer ---- */

struct transfer {
	struct client *c;
	struct client_response *resp;
	client_chunk_fn fn; /* NULL: buffer everything */
	void *userdata;
	int stopped; /* what fn returned when it stopped the stream */
	bool too_big;
};

static size_t
on_data(char *p, size_t size, size_t nmemb, void *userdata)
{
	struct transfer *t = userdata;
	size_t n = size * nmemb;
	long status = 0;

	if (t->fn) {
		curl_easy_getinfo(t->c->curl, CURLINFO_RESPONSE_CODE, &status);
		if (status >= 200 && status < 300) {
			int r = t->fn(t->userdata, p, n);
			if (r != 0) {
				t->stopped = r;
				return 0; /* curl ends the transfer with CURLE_WRITE_ERROR */
			}
			return n;
		}
	}
	if (buf_append(&t->resp->body, p, n) < 0) {
		t->too_big = true;
		return 0;
	}
	return n;
}

static int
add_header(struct curl_slist **l, const char *h)
{
	struct curl_slist *n = curl_slist_append(*l, h);

	if (!n)
		return -ENOMEM;
	*l = n;
	return 0;
}

/* Resets handle h for a new transfer; *headers collects the request's headers (the caller
 * frees them after the transfer, also on failure). Without accept, no headers are added: an
 * upgrade writes its own. */
static int
setup(struct client *c, CURL *h, const char *accept, struct curl_slist **headers)
{
	CURLcode e = CURLE_OK;

	curl_easy_reset(h);
	if (accept &&
	    (add_header(headers, accept) < 0 || (c->auth && add_header(headers, c->auth) < 0) ||
	     add_header(headers, "Expect:") < 0)) /* no 100-continue round trip */
		return -ENOMEM;
	e |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	e |= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
	e |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	e |= curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	e |= curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	e |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
	e |= curl_easy_setopt(h, CURLOPT_TIMEOUT, 0L); /* creates wait for the boot */
	e |= curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	e |= curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
	e |= curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 15L);
	e |= curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	e |= curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	e |= curl_easy_setopt(h, CURLOPT_USERAGENT, "sandbox-cli/" SANDBOX_CLI_VERSION);
	if (c->ca)
		e |= curl_easy_setopt(h, CURLOPT_CAINFO, c->ca);
	if (c->unix_path)
		e |= curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->unix_path);
	/* the token goes to the endpoint and nowhere else: a plain-http proxy from the
	 * environment would see it. https goes through a proxy only as a tunnel. */
	if (c->kind != ENDPOINT_HTTPS)
		e |= curl_easy_setopt(h, CURLOPT_PROXY, "");
	return e == CURLE_OK ? 0 : -EINVAL;
}

/* Records why a transfer on handle h failed with e; returns -EIO. */
static int
failed(struct client *c, CURL *h, CURLcode e, bool answered)
{
	long os_errno = 0;

	curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
	c->failure.code = e;
	c->failure.os_errno = (int)os_errno;
	c->failure.answered = answered;
	snprintf(c->failure.detail, sizeof(c->failure.detail), "%s",
	         c->errbuf[0] ? c->errbuf : curl_easy_strerror(e));
	return -EIO;
}

static int
perform(struct client *c, struct transfer *t)
{
	CURLcode e;

	c->errbuf[0] = '\0';
	c->failure = (struct client_failure){ .code = CURLE_OK };
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, t);
	e = curl_easy_perform(c->curl);
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &t->resp->status);
	if (t->stopped)
		return t->stopped;
	if (t->too_big)
		return -ENOBUFS;
	if (e == CURLE_OK)
		return 0;
	return failed(c, c->curl, e, t->resp->status > 0);
}

/* Points the handle at url with headers and runs the transfer, unless setting it up failed
 * (e); the handle forgets the headers afterwards, so the caller may free them. */
static int
finish(struct client *c, struct transfer *t, CURLcode e, const char *url,
       struct curl_slist *headers)
{
	int r;

	e |= curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers);
	e |= curl_easy_setopt(c->curl, CURLOPT_URL, url);
	r = e == CURLE_OK ? perform(c, t) : -EINVAL;
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
	return r;
}

/* One buffered request; body (len bytes of content_type) may be NULL. */
static int
request(struct client *c, const char *method, const char *path, const char *accept,
        const char *content_type, const void *body, size_t len, struct client_response *resp)
{
	_cleanup_free_ char *url = strdup_printf("%s%s", c->base, path);
	_cleanup_free_ char *ct = NULL;
	struct curl_slist *headers = NULL;
	struct transfer t = { .c = c, .resp = resp };
	CURLcode e = CURLE_OK;
	int r;

	*resp = (struct client_response){ .body = BUF_INIT(CLIENT_BODY_MAX) };
	if (!url)
		return -ENOMEM;
	r = setup(c, c->curl, accept, &headers);
	if (r < 0)
		goto out;
	if (body) {
		ct = strdup_printf("Content-Type: %s", content_type);
		r = ct ? add_header(&headers, ct) : -ENOMEM;
		if (r < 0)
			goto out;
		/* POSTFIELDS with a size: the bytes are sent as they are, NULs included */
		e |= curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body);
		e |= curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	} else if (!streq(method, "GET") && !streq(method, "DELETE")) {
		/* a POST without a body: Content-Length: 0 and no form Content-Type */
		r = add_header(&headers, "Content-Type:");
		if (r < 0)
			goto out;
		e |= curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, "");
		e |= curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
	}
	if (!streq(method, "GET") && !streq(method, "POST"))
		e |= curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);
	r = finish(c, &t, e, url, headers);
out:
	curl_slist_free_all(headers);
	if (r < 0)
		client_response_done(resp);
	return r;
}

int
client_request(struct client *c, const char *method, const char *path, const char *body,
               struct client_response *resp)
{
	return request(c, method, path, "Accept: application/json", "application/json", body,
	               body ? strlen(body) : 0, resp);
}

int
client_request_bytes(struct client *c, const char *method, const char *path, const void *body,
                     size_t len, struct client_response *resp)
{
	/* a file comes back as application/octet-stream, an error as JSON */
	return request(c, method, path, "Accept: application/octet-stream, application/json",
	               "application/octet-stream", body, len, resp);
}

int
client_stream(struct client *c, const char *path, client_chunk_fn fn, void *userdata,
              struct client_response *resp)
{
	_cleanup_free_ char *url = strdup_printf("%s%s", c->base, path);
	struct curl_slist *headers = NULL;
	struct transfer t = { .c = c, .resp = resp, .fn = fn, .userdata = userdata };
	CURLcode e = CURLE_OK;
	int r;

	*resp = (struct client_response){ .body = BUF_INIT(CLIENT_BODY_MAX) };
	if (!url)
		return -ENOMEM;
	r = setup(c, c->curl, "Accept: text/event-stream", &headers);
	if (r < 0)
		goto out;
	e |= curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	e |= curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_TIME, STREAM_SILENCE_S);
	r = finish(c, &t, e, url, headers);
out:
	curl_slist_free_all(headers);
	if (r < 0)
		client_response_done(resp);
	return r;
}

/* ---- upgraded connections ---- */

#define UPGRADE_ANSWER_S 30
#define UPGRADE_HEAD_MAX (64u << 10)

struct client_raw {
	CURL *curl;
	int fd;
	bool tls;
	struct buf early; /* bytes that came right after the 101's headers */
};

struct client_raw *
client_raw_free(struct client_raw *r)
{
	if (!r)
		return NULL;
	if (r->curl)
		curl_easy_cleanup(r->curl); /* closes the connection */
	buf_free(&r->early);
	free(r);
	return NULL;
}

int
client_raw_fd(const struct client_raw *r)
{
	return r->fd;
}

bool
client_raw_pending(const struct client_raw *r)
{
	return buf_avail(&r->early) > 0;
}

ssize_t
client_raw_send(struct client_raw *r, const void *p, size_t n)
{
	size_t sent = 0;
	CURLcode e = curl_easy_send(r->curl, p, n, &sent);

	if (e == CURLE_AGAIN)
		return sent > 0 ? (ssize_t)sent : -EAGAIN;
	if (e != CURLE_OK)
		return -EIO;
	return (ssize_t)sent;
}

int
client_raw_shutdown(struct client_raw *r)
{
	if (r->tls)
		return -EOPNOTSUPP; /* curl sends no close_notify while the connection stays */
	return shutdown(r->fd, SHUT_WR) < 0 ? -errno : 0;
}

ssize_t
client_raw_recv(struct client_raw *r, void *p, size_t n)
{
	size_t got = 0;
	CURLcode e;

	if (buf_avail(&r->early) > 0) {
		got = MIN(n, buf_avail(&r->early));
		memcpy(p, buf_head(&r->early), got);
		buf_consume(&r->early, got);
		return (ssize_t)got;
	}
	e = curl_easy_recv(r->curl, p, n, &got);
	if (e == CURLE_AGAIN)
		return -EAGAIN;
	if (e != CURLE_OK)
		return -EIO;
	return (ssize_t)got; /* 0: the server closed the connection */
}

/* Waits until fd is ready for events or the deadline (CLOCK_MONOTONIC ms) passes. */
static int
wait_fd(int fd, short events, uint64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	uint64_t now;
	int r;

	for (;;) {
		now = now_mono_ms();
		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&pfd, 1, (int)MIN(deadline - now, 1000u));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static int
raw_fail(struct client *c, CURLcode code, bool answered, const char *detail)
{
	c->failure = (struct client_failure){ .code = code, .answered = answered };
	snprintf(c->failure.detail, sizeof(c->failure.detail), "%s", detail);
	return -EIO;
}

/* The value of header name in the header block head (NUL-terminated), or NULL; *len set. */
static const char *
header_value(const char *head, const char *name, size_t *len)
{
	size_t n = strlen(name);

	for (const char *l = strstr(head, "\r\n"); l && l[2] != '\r'; l = strstr(l + 2, "\r\n")) {
		const char *p = l + 2, *end = strstr(p, "\r\n");
		if (strncasecmp(p, name, n) != 0 || p[n] != ':' || !end)
			continue;
		p += n + 1;
		while (*p == ' ' || *p == '\t')
			p++;
		*len = (size_t)(end - p);
		return p;
	}
	return NULL;
}

/* Reads the rest of a refusal's body into resp (Content-Length, else until the server closes). */
static int
read_refusal(struct client *c, struct client_raw *raw, const char *head, size_t head_len,
             struct buf *in, struct client_response *resp)
{
	uint64_t want = UINT64_MAX, deadline = now_mono_ms() + UPGRADE_ANSWER_S * 1000;
	const char *cl;
	size_t n;
	char chunk[16384];

	cl = header_value(head, "content-length", &n);
	if (cl && parse_u64_n(cl, n, &want) < 0)
		return raw_fail(c, CURLE_WEIRD_SERVER_REPLY, true, "a malformed Content-Length");
	if (buf_append(&resp->body, buf_head(in) + head_len, buf_avail(in) - head_len) < 0)
		return -ENOBUFS;
	while (resp->body.len < want) {
		ssize_t got = client_raw_recv(raw, chunk, sizeof(chunk));
		if (got == -EAGAIN) {
			if (wait_fd(raw->fd, POLLIN, deadline) < 0)
				return raw_fail(c, CURLE_OPERATION_TIMEDOUT, true,
				                "the answer stopped coming");
			continue;
		}
		if (got < 0 || (got == 0 && want != UINT64_MAX))
			return raw_fail(c, CURLE_RECV_ERROR, true, "the answer was cut short");
		if (got == 0)
			break;
		if (buf_append(&resp->body, chunk, (size_t)got) < 0)
			return -ENOBUFS;
	}
	if (resp->body.len > want)
		resp->body.len = (size_t)want;
	return 0;
}

int
client_upgrade(struct client *c, const char *path, const char *protocol,
               struct client_response *resp, struct client_raw **ret)
{
	_cleanup_free_ char *url = strdup_printf("%s%s", c->base, path);
	_cleanup_(client_raw_freep) struct client_raw *raw = NULL;
	_cleanup_buf_ struct buf req = BUF_INIT(16u << 10);
	_cleanup_buf_ struct buf in = BUF_INIT(UPGRADE_HEAD_MAX);
	struct curl_slist *headers = NULL;
	const char *host, *end = NULL;
	curl_socket_t sock = CURL_SOCKET_BAD;
	uint64_t deadline;
	size_t off = 0, head_len;
	char chunk[4096];
	uint64_t status;
	CURLcode e = CURLE_OK;
	int r;

	*ret = NULL;
	*resp = (struct client_response){ .body = BUF_INIT(CLIENT_BODY_MAX) };
	raw = calloc(1, sizeof(*raw));
	if (!url || !raw)
		return -ENOMEM;
	raw->fd = -1;
	buf_init(&raw->early, UPGRADE_HEAD_MAX);
	raw->curl = curl_easy_init();
	if (!raw->curl)
		return -ENOMEM;
	/* curl connects (unix socket, TCP, TLS with the same checks as every request, a proxy
	 * tunnel for https) and hands over the connection; the request is written here */
	r = setup(c, raw->curl, NULL, &headers);
	if (r < 0)
		return r;
	e |= curl_easy_setopt(raw->curl, CURLOPT_CONNECT_ONLY, 1L);
	e |= curl_easy_setopt(raw->curl, CURLOPT_URL, url);
	if (e != CURLE_OK)
		return -EINVAL;
	c->errbuf[0] = '\0';
	c->failure = (struct client_failure){ .code = CURLE_OK };
	e = curl_easy_perform(raw->curl);
	if (e != CURLE_OK)
		return failed(c, raw->curl, e, false);
	if (curl_easy_getinfo(raw->curl, CURLINFO_ACTIVESOCKET, &sock) != CURLE_OK ||
	    sock == CURL_SOCKET_BAD)
		return raw_fail(c, CURLE_COULDNT_CONNECT, false, "no connection to use");
	raw->fd = (int)sock;
	raw->tls = c->kind == ENDPOINT_HTTPS;

	/* the Host curl would send: the endpoint's authority, "localhost" on a unix socket */
	host = c->kind == ENDPOINT_UNIX ? "localhost" : strstr(c->base, "://") + 3;
	if (buf_printf(&req,
	               "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sandbox-cli/%s\r\n%s%s"
	               "Connection: Upgrade\r\nUpgrade: %s\r\n\r\n",
	               path, host, SANDBOX_CLI_VERSION, c->auth ? c->auth : "",
	               c->auth ? "\r\n" : "", protocol) < 0)
		return -ENOMEM;
	deadline = now_mono_ms() + UPGRADE_ANSWER_S * 1000;
	while (off < req.len) {
		ssize_t n = client_raw_send(raw, req.data + off, req.len - off);
		if (n == -EAGAIN) {
			if (wait_fd(raw->fd, POLLOUT, deadline) < 0)
				return raw_fail(c, CURLE_SEND_ERROR, false,
				                "the server does not take the request");
			continue;
		}
		if (n < 0)
			return raw_fail(c, CURLE_SEND_ERROR, false, "sending the request failed");
		off += (size_t)n;
	}
	explicit_bzero(req.data, req.len); /* it held the token */

	/* the status line and the headers */
	for (;;) {
		ssize_t n = client_raw_recv(raw, chunk, sizeof(chunk));
		if (n == -EAGAIN) {
			if (wait_fd(raw->fd, POLLIN, deadline) < 0)
				return raw_fail(c, CURLE_OPERATION_TIMEDOUT, false,
				                "no answer within 30 seconds");
			continue;
		}
		if (n < 0)
			return raw_fail(c, CURLE_RECV_ERROR, in.len > 0,
			                "receiving the answer failed");
		if (n == 0)
			return raw_fail(c, CURLE_GOT_NOTHING, in.len > 0,
			                in.len ? "the answer was cut short" : "empty reply");
		if (buf_append(&in, chunk, (size_t)n) < 0)
			return raw_fail(c, CURLE_WEIRD_SERVER_REPLY, true,
			                "the answer's headers are too long");
		end = memmem(buf_head(&in), buf_avail(&in), "\r\n\r\n", 4);
		if (end)
			break;
	}
	head_len = (size_t)(end - buf_head(&in)) + 4;
	if (buf_avail(&in) < 12 || strncmp(buf_head(&in), "HTTP/1.", 7) != 0 ||
	    buf_head(&in)[8] != ' ' || parse_u64_n(buf_head(&in) + 9, 3, &status) < 0)
		return raw_fail(c, CURLE_WEIRD_SERVER_REPLY, true, "the answer is not HTTP");
	resp->status = (long)status;
	if (status != 101) {
		_cleanup_free_ char *head = strndup(buf_head(&in), head_len);
		if (!head)
			return -ENOMEM;
		r = read_refusal(c, raw, head, head_len, &in, resp);
		if (r < 0)
			client_response_done(resp);
		return r;
	}
	if (buf_append(&raw->early, buf_head(&in) + head_len, buf_avail(&in) - head_len) < 0)
		return -ENOMEM;
	*ret = TAKE_PTR(raw);
	return 0;
}
