/* client.c: see client.h. One CURL easy handle per client: its connection cache keeps the
 * connection open between the requests of one command (doctor makes three). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
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

/* Resets the handle for a new transfer; *headers collects the request's headers (the
 * caller frees them after the transfer, also on failure). */
static int
setup(struct client *c, const char *accept, struct curl_slist **headers)
{
	CURL *h = c->curl;
	CURLcode e = CURLE_OK;

	curl_easy_reset(h);
	if (add_header(headers, accept) < 0 || (c->auth && add_header(headers, c->auth) < 0) ||
	    add_header(headers, "Expect:") < 0) /* no 100-continue round trip */
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

static int
perform(struct client *c, struct transfer *t)
{
	CURLcode e;
	long os_errno = 0;

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
	curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &os_errno);
	c->failure.code = e;
	c->failure.os_errno = (int)os_errno;
	c->failure.answered = t->resp->status > 0;
	snprintf(c->failure.detail, sizeof(c->failure.detail), "%s",
	         c->errbuf[0] ? c->errbuf : curl_easy_strerror(e));
	return -EIO;
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

int
client_request(struct client *c, const char *method, const char *path, const char *body,
               struct client_response *resp)
{
	_cleanup_free_ char *url = strdup_printf("%s%s", c->base, path);
	struct curl_slist *headers = NULL;
	struct transfer t = { .c = c, .resp = resp };
	CURLcode e = CURLE_OK;
	int r;

	*resp = (struct client_response){ .body = BUF_INIT(CLIENT_BODY_MAX) };
	if (!url)
		return -ENOMEM;
	r = setup(c, "Accept: application/json", &headers);
	if (r < 0)
		goto out;
	if (body) {
		r = add_header(&headers, "Content-Type: application/json");
		if (r < 0)
			goto out;
		e |= curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body);
		e |= curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE,
		                      (curl_off_t)strlen(body));
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
	r = setup(c, "Accept: text/event-stream", &headers);
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
