/* api-preview.c: previews (docs/api.md, "Previews"): POST /v1/sandboxes/{ref}/previews hands
 * out a preview's URL, and the preview listener (--preview-listen, a server of its own that
 * knows no API route) serves it: a preview host's request with its token in the query gets a
 * 302 that turns the token into a cookie for that host alone; one with the cookie is relayed
 * raw, head and all, to the guest's 127.0.0.1:PORT through a tunnel (tunnel.h), so keep-alive
 * and WebSocket upgrades work (one connection, one tunnel); anything else gets a small HTML
 * page. */
#include "api-internal.h"
#include "api-preview.h"
#include "events.h"
#include "log.h"
#include "preview.h"
#include "sandboxd.h"
#include "server.h"
#include "tunnel.h"
#include "util.h"

/* ---- POST /v1/sandboxes/{ref}/previews ---- */

bool
api_previews_offered(struct sandboxd *d)
{
	struct backend_caps caps = { .accel = "none" };

	if (!d->preview_server || !d->backend)
		return false;
	d->backend->ops->caps(d->backend, &caps);
	return caps.processes;
}

/* The preview's URL: http://HOST[:PORT]/?sbx_preview=TOKEN. NULL without memory. */
static char *
preview_url(struct sandboxd *d, const char *id, unsigned port)
{
	const struct options *o = d->opts;
	char host[320], token[PREVIEW_TOKEN_LEN + 1];
	bool port80 = streq(o->preview_port, "80");

	if (preview_host(id, port, o->preview_domain, host, sizeof(host)) < 0)
		return NULL;
	preview_token(d->preview_key, id, port, token);
	return strdup_printf("http://%s%s%s/?" PREVIEW_PARAM "=%s", host, port80 ? "" : ":",
	                     port80 ? "" : o->preview_port, token);
}

void
api_preview_create(struct api_call *call)
{
	struct sandboxd *d = call->d;
	_cleanup_free_ char *url = NULL;
	struct sandbox *sb;
	const char *key;
	json_t *v;
	json_int_t port;

	if (!api_previews_offered(d)) {
		api_reply_err(call->c, ERR_UNSUPPORTED,
		              "this server does not offer previews (capability 'preview' in GET "
		              "/v1/capabilities): %s",
		              d->preview_server ? "its backend runs no processes"
		                                : "it runs with --preview-listen off, or its "
		                                  "address was taken");
		return;
	}
	json_object_foreach (call->body, key, v) {
		if (!streq(key, "port")) {
			api_reply_err(call->c, ERR_INVALID, "unknown field '%s' in the body", key);
			return;
		}
	}
	v = json_object_get(call->body, "port");
	port = json_is_integer(v) ? json_integer_value(v) : 0;
	if (port < 1 || port > 65535) {
		api_reply_err(call->c, ERR_INVALID, "'port' must be an integer from 1 to 65535");
		return;
	}
	sb = api_lookup_live(call);
	if (!sb) {
		api_reply_absent(call);
		return;
	}
	if (sb->state != SANDBOX_RUNNING) {
		api_reply_err(call->c, ERR_CONFLICT, "sandbox '%s' is %s; it must be running",
		              sb->id, sandbox_state_to_string(sb->state));
		return;
	}
	url = preview_url(d, sb->id, (unsigned)port);
	if (!url) {
		api_reply_err(call->c, ERR_INTERNAL, "out of memory");
		return;
	}
	api_reply_json(call->c, 200, json_pack("{s:I, s:s}", "port", port, "url", url));
}

/* ---- the preview listener ---- */

/* Every answer of the listener's own (never the guest's) forbids script and framing: the
 * pages hold no script, and nothing the guest sends can become one of them. */
#define PAGE_HEADERS                                                                               \
	"Content-Security-Policy: default-src 'none'\r\nX-Frame-Options: DENY\r\n"                 \
	"Referrer-Policy: no-referrer\r\n"

static void
put_html_escaped(struct buf *b, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<':
			(void)buf_puts(b, "&lt;");
			break;
		case '>':
			(void)buf_puts(b, "&gt;");
			break;
		case '&':
			(void)buf_puts(b, "&amp;");
			break;
		case '"':
			(void)buf_puts(b, "&quot;");
			break;
		default:
			(void)buf_putc(b, (unsigned char)*s >= 0x20 && *s != 0x7f ? *s : '?');
		}
	}
}

/* A small HTML page: status, a title and a sentence (escaped); extra headers may be NULL. */
static void __attribute__((format(printf, 5, 6)))
page(struct conn *c, int status, const char *extra, const char *title, const char *fmt, ...)
{
	_cleanup_buf_ struct buf b = BUF_INIT(8192);
	_cleanup_free_ char *headers = NULL;
	char text[1024];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	(void)buf_printf(&b,
	                 "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
	                 "<title>%d ",
	                 status);
	put_html_escaped(&b, title);
	(void)buf_puts(&b, "</title></head>\n<body><h1>");
	put_html_escaped(&b, title);
	(void)buf_puts(&b, "</h1>\n<p>");
	put_html_escaped(&b, text);
	(void)buf_puts(&b, "</p>\n<p><small>sandboxd preview</small></p></body></html>\n");
	headers = strdup_printf(PAGE_HEADERS "%s", extra ? extra : "");
	conn_reply(c, status, "text/html; charset=utf-8", b.data, b.len,
	           headers ? headers : PAGE_HEADERS);
}

/* Whether the query's pair of n bytes at p is the token's (its key, percent-decoded, is
 * sbx_preview): 1 with its value in out, 0 when it is another's, -EINVAL when it is ours but
 * cannot be read (a bad escape, too long). */
static int
pair_token(const char *p, size_t n, char *out, size_t size)
{
	char pair[HTTP_MAX_HEAD], key[32], value[8];
	size_t pos = 0, klen;
	const char *eq = memchr(p, '=', n);

	klen = eq ? (size_t)(eq - p) : n;
	if (klen >= sizeof(pair))
		return 0;
	memcpy(pair, p, klen);
	pair[klen] = '\0';
	if (http_query_next(pair, &pos, key, sizeof(key), value, sizeof(value)) <= 0 ||
	    !streq(key, PREVIEW_PARAM))
		return 0;
	if (n >= sizeof(pair))
		return -EINVAL;
	memcpy(pair, p, n);
	pair[n] = '\0';
	pos = 0;
	return http_query_next(pair, &pos, key, sizeof(key), out, size) > 0 ? 1 : -EINVAL;
}

/* The token in the query: 1 and its value, 0 when there is none, -EINVAL when it is there
 * twice or cannot be read. The query without its token's pairs goes to rest (may be NULL). */
static int
query_token(const char *query, char *out, size_t size, struct buf *rest)
{
	const char *p = query;
	int found = 0;

	while (*p) {
		const char *amp = strchr(p, '&');
		size_t n = amp ? (size_t)(amp - p) : strlen(p);
		int r = n > 0 ? pair_token(p, n, out, size) : 0;

		if (r < 0 || (r > 0 && found))
			return -EINVAL;
		found |= r;
		if (r == 0 && n > 0 && rest &&
		    buf_printf(rest, "%s%.*s", rest->len ? "&" : "", (int)n, p) < 0)
			return -ENOMEM;
		p += n;
		if (*p == '&')
			p++;
	}
	return found;
}

struct cookie_check {
	const uint8_t *key;
	const char *id;
	unsigned port;
	bool valid;
};

static int
cookie_check_one(const char *value, size_t len, void *ctx)
{
	struct cookie_check *k = ctx;

	if (preview_token_valid(k->key, k->id, k->port, value, len))
		k->valid = true;
	return 0;
}

/* Whether any preview cookie of the request opens this preview: 1, 0 when there are some but
 * none does, -ENOENT when there is none. Any one valid is enough: a browser sends, besides this
 * host's own, a cookie of that name that a page set for a parent domain (a guest's server can
 * set one for the whole --preview-domain), and such a cookie must not lock a user out. */
static int
cookie_opens(const struct http_request *req, const uint8_t *key, const char *id, unsigned port)
{
	struct cookie_check k = { .key = key, .id = id, .port = port };
	int seen = 0;

	for (unsigned i = 0; i < req->nheaders; i++) {
		int r;
		if (!streq(req->arena.data + req->headers[i].name_off, "cookie"))
			continue;
		r = cookie_each(req->arena.data + req->headers[i].value_off, PREVIEW_PARAM,
		                cookie_check_one, &k);
		if (r > 0)
			seen += r;
	}
	return k.valid ? 1 : seen ? 0 : -ENOENT;
}

/* 302 to the same URL without the token, the token set as a cookie for this host only (no
 * Domain: not even its subdomains), HttpOnly (no script of the guest's reads it), Lax (sent
 * when the preview is opened from elsewhere, never with another site's requests into it). */
static void
redirect_with_cookie(struct conn *c, const struct http_request *req, const char *hosthdr,
                     const char *token)
{
	_cleanup_buf_ struct buf q = BUF_INIT(HTTP_MAX_HEAD);
	_cleanup_free_ char *headers = NULL;
	char again[PREVIEW_TOKEN_LEN + 8];

	if (query_token(req->query, again, sizeof(again), &q) < 0) {
		page(c, 500, NULL, "Out of memory", "The server is out of memory; try again.");
		return;
	}
	/* absolute, on the Host it came to (checked: a preview host and a port, nothing else),
	 * so a path such as //elsewhere cannot lead off the preview */
	headers = strdup_printf("Location: http://%s%s%s%s\r\nSet-Cookie: " PREVIEW_PARAM
	                        "=%s; Path=/; HttpOnly; SameSite=Lax\r\n" PAGE_HEADERS,
	                        hosthdr, req->path, q.len ? "?" : "", q.len ? q.data : "", token);
	if (!headers) {
		page(c, 500, NULL, "Out of memory", "The server is out of memory; try again.");
		return;
	}
	conn_reply(c, 302, NULL, NULL, 0, headers);
}

/* The request again, to go first to the guest's server: the request line as it came, each
 * header as the parser kept it (names lowercase, which HTTP/1.1 allows), and its framing as the
 * parser read it. A request without a body goes whole; one with a body (streamed) goes as its
 * head alone, the body to follow raw as the client sends it, framed as the head says (its
 * Expect too: the guest's server answers it). */
static int
request_bytes(const struct http_request *req, bool streamed, struct buf *out)
{
	int r = buf_printf(out, "%s %s HTTP/%u.%u\r\n", http_method_str(req->method), req->target,
	                   req->http_major, req->http_minor);

	for (unsigned i = 0; r >= 0 && i < req->nheaders; i++) {
		const char *name = req->arena.data + req->headers[i].name_off;
		if (streq(name, "content-length") || streq(name, "transfer-encoding") ||
		    (!streamed && streq(name, "expect")))
			continue;
		r = buf_printf(out, "%s: %s\r\n", name,
		               req->arena.data + req->headers[i].value_off);
	}
	if (r >= 0 && streamed && req->chunked)
		r = buf_puts(out, "transfer-encoding: chunked\r\n");
	else if (r >= 0 && (req->has_length || req->chunked))
		r = buf_printf(out, "content-length: %llu\r\n",
		               streamed ? (unsigned long long)req->content_length : 0ull);
	if (r >= 0)
		r = buf_puts(out, "\r\n");
	return r;
}

static void
relay_opened(struct conn *c _unused_, struct sandbox *sb, uint16_t port, void *data)
{
	(void)sandbox_event(data, sb, "tunnel.opened",
	                    json_pack("{s:i, s:b}", "port", (int)port, "preview", 1));
}

static void
relay_failed(struct conn *c, uint16_t port, int err, const char *message _unused_,
             void *data _unused_)
{
	if (err == ECONNREFUSED)
		page(c, 502, NULL, "Nothing listens on this port",
		     "Nothing listens on 127.0.0.1:%u in the sandbox. Start the server there (on "
		     "127.0.0.1 or 0.0.0.0, port %u) and reload.",
		     port, port);
	else if (err == EIO)
		page(c, 503, NULL, "The sandbox is not running",
		     "The sandbox stopped. Start it and reload.");
	else
		page(c, 502, NULL, "The sandbox did not connect",
		     "The sandbox could not connect to its port %u (%s). Reload to try again.",
		     port, strerror(err));
}

/* streamed: called at the head of a request whose body follows, which is held unread until the
 * tunnel is open and then relayed raw with everything after it (no limit on its size). */
static void
relay(struct sandboxd *d, struct conn *c, const struct http_request *req, struct sandbox *sb,
      unsigned port, bool streamed)
{
	_cleanup_buf_ struct buf head = BUF_INIT(TUNNEL_PREFIX_MAX);
	int r;

	if (request_bytes(req, streamed, &head) < 0) {
		page(c, 431, NULL, "Request head too large",
		     "A preview relays request heads of at most %u KiB.", TUNNEL_PREFIX_MAX >> 10);
		return;
	}
	if (streamed && conn_head_hold(c) < 0) {
		page(c, 500, NULL, "Cannot relay", "The preview cannot hold this request.");
		return;
	}
	r = tunnel_start(d, c, sb,
	                 &(struct tunnel_opts){ .port = (uint16_t)port,
	                                        .prefix = head.data,
	                                        .prefix_len = head.len,
	                                        .upgrade_headers = NULL,
	                                        .failed = relay_failed,
	                                        .opened = relay_opened,
	                                        .data = d });
	if (r >= 0)
		return;
	if (r == -EBUSY)
		page(c, 503, "Retry-After: 2\r\n", "The sandbox is busy",
		     "Too many connections to sandbox %s wait for it to answer. Reload in a "
		     "moment.",
		     sb->id);
	else if (r == -ENOTCONN)
		page(c, 503, "Retry-After: 2\r\n", "The sandbox is not reachable",
		     "The agent of sandbox %s is not connected (it may be reconnecting). Reload in "
		     "a "
		     "moment.",
		     sb->id);
	else
		page(c, 500, NULL, "Cannot relay", "The preview cannot be relayed: %s.",
		     strerror(-r));
}

/* Every request the listener takes: a preview host, then its token or cookie,
 * then the sandbox. The token is judged before the sandbox is looked at, so that without it
 * nothing is learnt of which sandboxes exist. */
static void
preview_handle(struct sandboxd *d, struct conn *c, struct http_request *req, bool streamed)
{
	const char *hosthdr = http_req_header(req, "host");
	char id[SANDBOX_ID_MAX + 1], token[PREVIEW_TOKEN_LEN + 8];
	struct sandbox *sb;
	unsigned port;
	int r;

	if (!hosthdr || preview_host_parse(hosthdr, d->opts->preview_domain, id, &port) < 0) {
		page(c, 404, NULL, "No such preview",
		     "This address is not a preview. A preview's address is "
		     "http://p-ID-PORT.%s:%s/, as POST /v1/sandboxes/{ref}/previews or the "
		     "sandbox's page in the dashboard hands it out.",
		     d->opts->preview_domain, d->opts->preview_port);
		return;
	}
	r = query_token(req->query, token, sizeof(token), NULL);
	if (r != 0) {
		if (r < 0 || !preview_token_valid(d->preview_key, id, port, token, strlen(token))) {
			page(c, 401, NULL, "This preview link is not valid",
			     "The link's token does not open this preview. Ask the sandbox's page "
			     "(Open preview) or POST /v1/sandboxes/{ref}/previews for its URL.");
			return;
		}
		redirect_with_cookie(c, req, hosthdr, token);
		return;
	}
	r = cookie_opens(req, d->preview_key, id, port);
	if (r <= 0) {
		/* a stale cookie (another key) goes */
		page(c, 401,
		     r == 0 ? "Set-Cookie: " PREVIEW_PARAM "=; Path=/; HttpOnly; SameSite=Lax; "
		              "Max-Age=0\r\n"
		            : NULL,
		     "Open this preview from its link",
		     "This preview opens from its link (with its token), from the sandbox's page "
		     "(Open preview) or from POST /v1/sandboxes/{ref}/previews.");
		return;
	}
	sb = registry_get(&d->reg, id);
	if (!sb) {
		page(c, 404, NULL, "This sandbox is gone",
		     "Sandbox %s no longer exists, and neither does its preview.", id);
		return;
	}
	if (sb->state != SANDBOX_RUNNING) {
		page(c, 503, NULL, "The sandbox is not running",
		     "Sandbox %s is %s. Start it and reload.", sb->id,
		     sandbox_state_to_string(sb->state));
		return;
	}
	relay(d, c, req, sb, port, streamed);
}

/* A request without a body (whole) */
static void
serve_request(void *ctx, struct conn *c, struct http_request *req)
{
	preview_handle(ctx, c, req, false);
}

/* ... and the head of one with a body, which the server never reads: the guest's server does,
 * or nobody (an answer of the listener's own closes the connection). */
static void
serve_head(void *ctx, struct conn *c, struct http_request *req)
{
	preview_handle(ctx, c, req, true);
}

static void
serve_metrics(void *ctx _unused_, struct conn *c, struct http_request *req _unused_)
{
	page(c, 404, NULL, "Not found", "Nothing is served here.");
}

/* The listener never reads a body itself (serve_head): the guest's server judges its size. */
static uint64_t
body_limit(const struct http_request *req _unused_, void *data _unused_)
{
	return UINT64_MAX;
}

static void
protocol_error(void *ctx _unused_, struct conn *c, const struct server_fault *f)
{
	if (f->kind == SERVER_FAULT_TIMEOUT)
		page(c, 408, NULL, "Request timeout", "The request did not arrive in time.");
	else
		page(c, f->parse_status, NULL, "Bad request", "%s", f->message);
}

void
api_preview_server_handler(struct sandboxd *d, struct server_handler *ret)
{
	*ret = (struct server_handler){
		.request = serve_request,
		.head = serve_head,
		.metrics = serve_metrics,
		.body_limit = body_limit,
		.protocol_error = protocol_error,
		.response_max = 64u << 10,
		.ctx = d,
	};
}
