/* auth.h: who is calling, and whether the request may be served at all.
 *
 * The operator is whoever holds the token (--token-file) or connects over the unix socket
 * with sandboxd's own uid (or root): the socket is 0600, so only they can. Users (accounts.h)
 * present an API key as a bearer token, or the dashboard's session cookie; requests by the
 * cookie are also checked for their CSRF token. The owner of a sandbox is always stamped from
 * the principal here, never read from a request. */
#pragma once

#include <stdbool.h>
#include "accounts.h"
#include "http.h"

struct sandboxd;
struct conn;

struct principal {
	char name[256]; /* the owner stamped on sandboxes: "operator", or the user's email */
	enum role role;
	bool operator;         /* the operator token or a unix-socket peer: no caps, may launch */
	char user_id[32];      /* "usr_<16 hex>"; "" for the operator */
	char cred[64];         /* the credential used: "operator", "key:ID" or "session:ID" */
	bool session;          /* by the dashboard's session cookie (CSRF applies) */
	char csrf[48];         /* the session's CSRF token, when session */
	struct user_caps caps; /* users only */
};

/* Who sent req: `Authorization: Bearer` with the operator token or an API key (or, on an
 * Upgrade, ?token=), else the session cookie, else a unix-socket peer with sandboxd's uid or
 * root. A credential that is presented is checked, and a wrong one is never replaced by the
 * peer's uid. 0 and *ret filled, -EACCES (answer 401), or -EIO when the store failed (503). */
int auth_authenticate(struct sandboxd *d, struct conn *c, const struct http_request *req,
                      struct principal *ret);

/* For a caller authenticated by the session cookie: a request that is not GET or HEAD must
 * carry `X-CSRF-Token`, and an Upgrade its ?csrf=, equal to the session's token. 0, or -EPERM
 * (answer 403 refused). Other credentials pass. */
int auth_check_csrf(const struct http_request *req, const struct principal *who);

/* Fills a user's principal from their account (the caps: theirs, or the server's defaults). */
struct account;
void auth_set_user(struct sandboxd *d, struct principal *p, const struct account *a);

/* The DNS-rebinding and cross-origin guard: the Host must be a loopback name or an
 * --allowed-host, and an Origin, when present, must name that same allowed host. Returns 0,
 * or -EPERM with *ret_why set (answer 403 forbidden_origin). */
int auth_check_origin(struct sandboxd *d, const struct http_request *req, const char **ret_why);
