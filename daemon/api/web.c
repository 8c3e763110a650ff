/* web.c: the dashboard's files (web/src and xterm.js), embedded at build time by web/embed.c,
 * answered on the API's own listeners without a credential: "/" and "/index.html" (the page)
 * and "/assets/<name>". The API's Host/Origin guard has run before. */
#include <string.h>
#include "api-error.h"
#include "api.h"
#include "macro.h"
#include "server.h"
#include "util.h"
#include "web-assets.h"
#include "web.h"

/* What the page may do: its own scripts and connections only (no inline script, no CDN, no
 * frame around it). xterm.js sets inline styles, hence 'unsafe-inline' for styles. */
#define WEB_HEADERS                                                                                \
	"Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self' "        \
	"'unsafe-inline'; connect-src 'self'; img-src 'self' data:; font-src 'self'; "             \
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n"                          \
	"X-Frame-Options: DENY\r\n"                                                                \
	"Referrer-Policy: no-referrer\r\n"

static const struct web_asset *
find_asset(const char *name)
{
	for (unsigned i = 0; i < web_assets_count; i++)
		if (streq(web_assets[i].name, name))
			return &web_assets[i];
	return NULL;
}

bool
web_serve(struct sandboxd *d _unused_, struct conn *c, const struct http_request *req)
{
	const struct web_asset *a;
	const char *name, *inm;
	char headers[1024];

	/* req->path is the target up to '?', not decoded: an escaped name matches nothing */
	if (streq(req->path, "/") || streq(req->path, "/index.html"))
		name = "index.html";
	else if (str_has_prefix(req->path, "/assets/"))
		name = req->path + 1;
	else
		return false;

	if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
		api_reply_err_headers(c, ERR_METHOD, "Allow: GET, HEAD\r\n",
		                      "%s is not allowed on this path; use GET or HEAD",
		                      http_method_str(req->method));
		return true;
	}
	if (req->upgrade) {
		api_reply_err(c, ERR_INVALID, "this path does not upgrade");
		return true;
	}
	a = find_asset(name);
	if (!a) {
		api_reply_err(c, ERR_NOT_FOUND, "no such dashboard file; open / for the page");
		return true;
	}
	/* kept by the browser and asked about again on each visit: unchanged is a bodiless 304
	 * (the same sandboxd serves the same bytes; a new build has new ETags) */
	snprintf(headers, sizeof(headers), "%sETag: %s\r\n", WEB_HEADERS, a->etag);
	inm = http_req_header(req, "if-none-match");
	if (inm && strstr(inm, a->etag)) {
		conn_reply_revalidate(c, 304, NULL, NULL, 0, headers);
		return true;
	}
	/* a HEAD is answered with GET's headers and no body (conn_reply) */
	conn_reply_revalidate(c, 200, a->type, a->data, a->len, headers);
	return true;
}
