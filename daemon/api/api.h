/* api.h: API v1: routing, authentication, the request guard and the handlers' shared
 * helpers. Errors become an HTTP status and {"error":{"code","message"}} in exactly one
 * place: api-error.c, by their kind (api-error.h). */
#pragma once

#include <jansson.h>
#include <stdint.h>
#include "http.h"

struct sandboxd;
struct conn;
struct server_handler;

#define API_JSON_MAX (1u << 20)  /* JSON bodies */
#define API_FILE_MAX (64u << 20) /* file and stdin bodies */
/* JSON bodies anyone may send, before any credential (login, register): an email and a
 * password need far less, and a flood of them must not hold a MiB per connection */
#define API_PUBLIC_JSON_MAX (64u << 10)

/* Handles one complete request on c. Replies now or later (a waiting create). */
void api_handle(struct sandboxd *d, struct conn *c, struct http_request *req);
/* Judges the head of a request whose body follows, before any of it is read: answers what
 * api_handle would refuse for the head alone (the guard, a credential, the path, the
 * method: 401, 403, 404, 405, ...; the connection then closes unread), and a raw body's route
 * (a file write, stdin) takes the body as it arrives. Other bodies are read whole. */
void api_head(struct sandboxd *d, struct conn *c, struct http_request *req);
/* How many body bytes a request may carry (http_body_limit_fn). */
uint64_t api_body_limit(const struct http_request *req, void *data);
/* What the HTTP server is made with (server_new): API requests to api_handle(), the metrics
 * listener's to metrics_handle(), and the answers to requests the server could not take. */
void api_server_handler(struct sandboxd *d, struct server_handler *ret);

/* The HTTP server's protocol errors (a malformed or late request), by the status and code it
 * chose: answered as the kind of api-error.c's table that has both (internal if none does).
 * Everything else answers by kind (api-error.h). */
void api_reply_error(struct conn *c, int status, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* Replies with a JSON value (stolen). */
void api_reply_json(struct conn *c, int status, json_t *body);
/* The same, with extra response headers ("Name: value\r\n"...; NULL: none). */
void api_reply_json_headers(struct conn *c, int status, json_t *body, const char *headers);
