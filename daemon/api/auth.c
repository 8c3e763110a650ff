/* auth.c: see auth.h. */
#include <ctype.h>
#include <strings.h>
#include "accounts.h"
#include "auth.h"
#include "hostport.h"
#include "options.h"
#include "sandboxd.h"
#include "server.h"
#include "util.h"

static void
set_operator(struct principal *p)
{
	*p = (struct principal){ .role = ROLE_ADMIN, .operator= true };
	snprintf(p->name, sizeof(p->name), "operator");
	snprintf(p->cred, sizeof(p->cred), "operator");
}

void
auth_set_user(struct sandboxd *d, struct principal *p, const struct account *a)
{
	const struct user_caps defaults = {
		.max_sandboxes = d->opts->user_max_sandboxes,
		.max_cpus = d->opts->user_max_cpus,
		.max_memory_mb = d->opts->user_max_memory_mb,
	};

	*p = (struct principal){ .role = a->role, .caps = account_caps(a, &defaults) };
	snprintf(p->name, sizeof(p->name), "%s", a->email);
	snprintf(p->user_id, sizeof(p->user_id), "%s", a->id);
}

/* A value from the query string, which counts only on an Upgrade handshake (browsers cannot
 * set headers on a WebSocket), never on an ordinary request. */
static const char *
upgrade_query(const struct http_request *req, const char *name, char *buf, size_t size)
{
	char key[16];
	size_t pos = 0;
	int r;

	if (!req->upgrade || req->method != HTTP_GET)
		return NULL;
	while ((r = http_query_next(req->query, &pos, key, sizeof(key), buf, size)) > 0)
		if (streq(key, name))
			return buf;
	return NULL;
}

/* A bearer token: an API key, or the operator token. */
static int
auth_bearer(struct sandboxd *d, const char *token, struct principal *ret)
{
	char id[ACCOUNT_KEY_ID_LEN + 1];
	struct account a;
	int r;

	if (str_has_prefix(token, "sbk_")) {
		r = account_key_lookup(d->store, token, now_unix_ms(), &a, id);
		if (r == -EIO)
			return r;
		if (r == 0) {
			auth_set_user(d, ret, &a);
			snprintf(ret->cred, sizeof(ret->cred), "key:%s", id);
			return 0;
		}
		/* an operator may have chosen a token that starts the same way */
	}
	if (d->token && secret_equal(token, strlen(token), d->token, d->token_len)) {
		set_operator(ret);
		return 0;
	}
	return -EACCES;
}

/* The session cookie's value from every Cookie header: 1, 0 when absent, -EACCES when it is
 * there twice (which one a browser meant cannot be told) or will not fit. */
static int
find_session_cookie(const struct http_request *req, char *out, size_t size)
{
	char other[ACCOUNT_COOKIE_VALUE_LEN + 1];
	int found = 0;

	for (unsigned i = 0; i < req->nheaders; i++) {
		int r;
		if (!streq(req->arena.data + req->headers[i].name_off, "cookie"))
			continue;
		r = cookie_find(req->arena.data + req->headers[i].value_off, ACCOUNT_SESSION_COOKIE,
		                found ? other : out, found ? sizeof(other) : size);
		if (r < 0 || (r > 0 && found))
			return -EACCES;
		found |= r;
	}
	return found;
}

static int
auth_session(struct sandboxd *d, const char *cookie, struct principal *ret)
{
	struct account_session ses;
	struct account a;
	int r;

	r = account_session_lookup(d->store, cookie, now_unix_ms(), &a, &ses);
	if (r < 0)
		return r == -EIO ? r : -EACCES;
	auth_set_user(d, ret, &a);
	snprintf(ret->cred, sizeof(ret->cred), "session:%s", ses.id);
	snprintf(ret->csrf, sizeof(ret->csrf), "%s", ses.csrf);
	ret->session = true;
	return 0;
}

int
auth_authenticate(struct sandboxd *d, struct conn *c, const struct http_request *req,
                  struct principal *ret)
{
	const char *authz = http_req_header(req, "authorization");
	const char *token = NULL;
	char qbuf[512], cookie[ACCOUNT_COOKIE_VALUE_LEN + 1];
	int r;

	if (authz) {
		if (strncasecmp(authz, "Bearer ", 7) != 0)
			return -EACCES;
		token = authz + 7;
		while (*token == ' ')
			token++;
	} else {
		token = upgrade_query(req, "token", qbuf, sizeof(qbuf));
	}
	/* a presented credential is checked even on the unix socket: a wrong one is never
	 * silently replaced by the peer's uid */
	if (token)
		return auth_bearer(d, token, ret);
	r = find_session_cookie(req, cookie, sizeof(cookie));
	if (r < 0)
		return r;
	if (r > 0)
		return auth_session(d, cookie, ret);
	if (conn_is_unix(c)) {
		uid_t uid = conn_peer_uid(c);
		if (uid == d->uid || uid == 0) {
			set_operator(ret);
			return 0;
		}
	}
	return -EACCES;
}

int
auth_check_csrf(const struct http_request *req, const struct principal *who)
{
	const char *sent;
	char qbuf[128];

	if (!who->session)
		return 0;
	if (req->upgrade)
		sent = upgrade_query(req, "csrf", qbuf, sizeof(qbuf));
	else if (req->method == HTTP_GET || req->method == HTTP_HEAD)
		return 0;
	else
		sent = http_req_header(req, "x-csrf-token");
	if (!sent || !*who->csrf || !secret_equal(sent, strlen(sent), who->csrf, strlen(who->csrf)))
		return -EPERM;
	return 0;
}

static bool
host_allowed(struct sandboxd *d, const char *host)
{
	if (streq(host, "localhost") || streq(host, "127.0.0.1") || streq(host, "::1"))
		return true;
	for (size_t i = 0; i < d->opts->n_allowed_hosts; i++)
		if (strcasecmp(host, d->opts->allowed_hosts[i]) == 0)
			return true;
	return false;
}

int
auth_check_origin(struct sandboxd *d, const struct http_request *req, const char **ret_why)
{
	const char *hosthdr = http_req_header(req, "host");
	const char *origin = http_req_header(req, "origin");
	char host[256], ohost[256];
	const char *rest;

	if (!hosthdr) {
		/* HTTP/1.0 without Host: nothing was named, so nothing can be rebound */
		if (!origin)
			return 0;
		*ret_why = "a request with an Origin must name a Host";
		return -EPERM;
	}
	if (hostport_host(hosthdr, host, sizeof(host)) < 0 || !host_allowed(d, host)) {
		*ret_why = "the Host header names a host this server does not answer for; add it "
		           "with --allowed-host";
		return -EPERM;
	}
	if (!origin)
		return 0;
	/* same origin only: the scheme, and host[:port] equal to the Host header */
	if (str_has_prefix(origin, "http://"))
		rest = origin + 7;
	else if (str_has_prefix(origin, "https://"))
		rest = origin + 8;
	else
		rest = NULL;
	if (!rest || hostport_host(rest, ohost, sizeof(ohost)) < 0 ||
	    strcasecmp(rest, hosthdr) != 0 || !host_allowed(d, ohost)) {
		*ret_why = "cross-origin requests are refused";
		return -EPERM;
	}
	return 0;
}
