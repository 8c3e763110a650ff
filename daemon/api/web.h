/* web.h: the dashboard's static files, built into sandboxd at build time (web/), served on the
 * API's own listeners without a credential: GET / and GET /assets/<file>. */
#pragma once

#include <stdbool.h>
#include "http.h"

struct sandboxd;
struct conn;

/* Answers req when it asks for a dashboard file (GET or HEAD of "/", "/index.html" or
 * "/assets/..."): returns true once it has replied. false: not a dashboard path; the caller
 * routes it as an API request. */
bool web_serve(struct sandboxd *d, struct conn *c, const struct http_request *req);
