/* conf.h: the conformance suite's view of a server: the endpoint from the environment, HTTP
 * requests through libcurl (TCP, TLS or a unix socket), the error-shape check every error
 * response passes through, and the per-case context that frees and deletes what a case made. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

/* cmocka needs these before its header */
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <cmocka.h>

/* Which credential a request carries. */
enum conf_auth {
	CONF_AUTH_TOKEN, /* the configured token (nothing when it is empty) */
	CONF_AUTH_NONE,  /* no Authorization header */
	CONF_AUTH_WRONG, /* a bearer token that is not the configured one */
	CONF_AUTH_RAW,   /* exactly the Authorization header in conf_req.authorization */
};

#define CONF_MAX_HEADERS 8

/* A request with full control over what goes on the wire, for the guard cases. */
struct conf_req {
	const char *method;       /* "GET" when NULL */
	const char *path;         /* "/v1/..." including a query string */
	const void *body;         /* NULL: no body */
	size_t body_len;          /* 0 with a body: strlen(body) */
	const char *content_type; /* NULL: application/json when there is a body; "": none */
	enum conf_auth auth;
	const char *authorization;             /* CONF_AUTH_RAW: the header's value */
	const char *headers[CONF_MAX_HEADERS]; /* extra "Name: value" lines, NULL-terminated */
};

/* A response. Everything in it belongs to the running case and is freed after it. */
struct conf_resp {
	long status;
	const char *body; /* NUL-terminated (also for an empty body) */
	size_t body_len;
	json_t *json;             /* the body parsed, or NULL */
	const char *content_type; /* "" when absent */
};

/* The sandbox object's fields (docs/api.md, "Sandboxes"), for shape checks. */
extern const char *const conf_sandbox_fields[];

/* Reads SANDBOX_CONFORMANCE_ENDPOINT, _TOKEN and _CA; prints what is wrong and returns -EINVAL
 * when the endpoint is missing or malformed. Call once before the cases run. */
int conf_init(void);
void conf_done(void);
/* The endpoint as configured, and what kind it is. */
const char *conf_endpoint(void);
bool conf_is_unix(void);
bool conf_has_token(void);
const char *conf_token(void);

/* cmocka group fixtures: one context per case. conf_case_teardown closes the case's streams,
 * deletes every sandbox the case created (whether or not it passed) and frees its objects. */
int conf_case_setup(void **state);
int conf_case_teardown(void **state);

/* Runs fn(p) when the case ends (last registered, first run); returns p. */
void *conf_defer(void (*fn)(void *), void *p);
/* Hands a malloc'd pointer or a JSON value to the case; returns it. */
char *conf_keep(char *p);
json_t *conf_keep_json(json_t *j);
/* A case-owned printf. */
char *conf_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Sends req. Fails the case on a transport error, and on an error response (status >= 400)
 * whose body is not {"error":{"code","message"}} with a known code fitting the status.
 * A 201 to POST /v1/sandboxes is recorded, so the sandbox is deleted when the case ends. */
const struct conf_resp *conf_send(const struct conf_req *req);
/* The common case: the token, a JSON body (or NULL). Returns the status; *ret_json (may be
 * NULL) gets the parsed body, owned by the case. */
long conf_request(const char *method, const char *path, const char *json_body, json_t **ret_json);
/* Asserts that j is an error with this status and code. */
void conf_assert_error(long status, const json_t *j, long want_status, const char *want_code);
/* The error message of an error body ("" when there is none). */
const char *conf_error_message(const json_t *j);

/* GET /v1/capabilities, fetched once per run. */
json_t *conf_caps(void);
/* Whether capabilities.capabilities.<name> is true. */
bool conf_capability(const char *name);
/* Skips the case unless capabilities.capabilities.<name> is true. */
void conf_need_capability(const char *name);
/* The network mode order: none 0 < allowlist 1 < open 2; -1 for anything else. */
int conf_net_mode_rank(const char *mode);

/* A random run marker (hex) shared by every case of this run, and a fresh name like
 * "cf-<tag>-<8 hex>" (tag at most 40 characters). */
const char *conf_run_id(void);
char *conf_name(const char *tag);
/* A random id in the server's id syntax that no server will have handed out. */
char *conf_random_id(void);
/* Whether s is a valid sandbox id: ^sbx_([a-z0-9-]{1,31}_)?[0-9a-f]{16}$ */
bool conf_id_valid(const char *s);

/* Whether this server creates sandboxes at all (one probe per run: a create answered
 * 501 unsupported means no). */
bool conf_sandboxes_supported(void);
/* Skips the case unless the server creates sandboxes. */
void conf_need_sandboxes(void);

/* Creates a sandbox from the JSON object text fields (NULL: {}), adding the labels
 * conformance=1 and conformance-run=<run id> and a fresh name unless fields sets "name".
 * Skips the case on 501 unsupported; fails it on anything but 201. Returns the sandbox. */
json_t *conf_create(const char *fields);
/* The same body handling, but returns whatever the server answered (*ret_json may be NULL). */
long conf_create_status(const char *fields, json_t **ret_json);
/* A create that must fail with want_status/want_code; returns the error body. Skips the case
 * when the server answers 501 unsupported and creates no sandboxes at all. */
json_t *conf_create_refused(const char *fields, long want_status, const char *want_code);
/* GET /v1/sandboxes/{ref}, which must answer 200. */
json_t *conf_get(const char *ref);
/* Polls GET until the sandbox is in state (10 s at most); fails the case otherwise. */
json_t *conf_wait_state(const char *ref, const char *state);
/* The ids in a {"sandboxes":[...]} list, in order, as a JSON array of strings. */
json_t *conf_list_ids(const char *query);
/* Index of string s in array a, or -1. */
int conf_index_of(const json_t *a, const char *s);

/* The suite's shared sandbox, for the process and file cases that do not disturb one another:
 * created on first use (skipping like conf_create()), with the environment variable
 * CONF_SHARED_SECRET set to conf_shared_secret(), and deleted when the run ends. A case that
 * uses it removes what it made there (conf_defer_request()). Returns its id. */
const char *conf_shared_sandbox(void);
/* The value of CONF_SHARED_SECRET in the shared sandbox: random for each run. */
const char *conf_shared_secret(void);
/* Sends method path (json_body may be NULL) when the case ends, before its sandboxes are
 * deleted, ignoring the answer: the cleanup of a file or a process the case made. */
void conf_defer_request(const char *method, const char *path, const char *json_body);

/* A string member of an object, or "" when absent or not a string. */
const char *conf_str(const json_t *obj, const char *key);
/* s percent-encoded for a query string, owned by the case. */
char *conf_escape(const char *s);

/* GET /v1/sandboxes/{ref}/events, which must answer 200 with {"events":[...], "truncated"}
 * (and truncated false: the suite's sandboxes are young). The events, owned by the case. */
json_t *conf_audit_trail(const char *ref);
/* Asserts that ev is one record of the audit trail in exactly its contract shape (docs/api.md,
 * "Events"): {"time","type","sandbox",...fields} with the fields of its type and no other,
 * "sandbox" sandbox_id and "time" an RFC 3339 UTC time. */
void conf_assert_audit_record(const json_t *ev, const char *sandbox_id);
/* Whether s is an RFC 3339 UTC time as the API writes them: YYYY-MM-DDTHH:MM:SS[.fff]Z. */
bool conf_time_valid(const char *s);

/* Live SSE streams (GET with Accept: text/event-stream). */
struct conf_stream;
/* Opens path; last_event_id may be NULL. Returns once the response headers arrived (status
 * 200 and text/event-stream asserted). Closed when the case ends. */
struct conf_stream *conf_stream_open(const char *path, const char *last_event_id);
/* The next event as {"id":"...","event":"...","data":<parsed JSON>,"raw":"<data text>"},
 * owned by the case; NULL when nothing came within timeout_ms or the stream ended. Parsed by
 * the CLI's SSE parser (cli/sse.c): id is the stream's last event id, as a browser keeps it. */
json_t *conf_stream_next(struct conf_stream *s, int timeout_ms);
/* What an event from a stream is about: the sandbox id its data names (data.sandbox_id, or
 * data.sandbox.id), and its type (the SSE event name, or data.type); "" when unknown. */
const char *conf_event_sandbox_id(const json_t *ev);
const char *conf_event_type(const json_t *ev);
/* The numeric SSE id of an event, or -1. */
long long conf_event_seq(const json_t *ev);

/* Raw connections, for the attach handshake and what follows it: the same endpoint, transport
 * and TLS settings as every request, but the bytes are the case's. */
struct conf_conn;
/* The answer to an upgrade request: the status, the header block (lines ending in CRLF), and
 * for a status other than 101 the body and its JSON. Owned by the case. */
struct conf_upgrade {
	long status;
	const char *head;
	const char *body;
	json_t *json;
};
/* Connects and sends "GET path" with the credential auth asks for, Host, and the extra header
 * lines headers (NULL-terminated); reads the answer's head. On 101 the connection is returned
 * for the frames that follow (closed when the case ends); otherwise the body is read, must have
 * the error shape of every error, and NULL is returned. *ret gets the answer. */
struct conf_conn *conf_upgrade(const char *path, enum conf_auth auth, const char *const *headers,
                               struct conf_upgrade *ret);
/* A header's value in a head from conf_upgrade() (case-insensitive name), owned by the case;
 * NULL when absent. */
const char *conf_head_value(const char *head, const char *name);
/* Sends all of len bytes; fails the case when the connection broke. */
void conf_conn_send(struct conf_conn *c, const void *data, size_t len);
/* The same without failing: 0, or -EIO when the connection broke (a goodbye the server need
 * not wait for). */
int conf_conn_write(struct conf_conn *c, const void *data, size_t len);
/* Reads up to len bytes, waiting up to timeout_ms: the count, 0 when the server closed, or
 * -ETIMEDOUT, or -EIO when the connection failed. */
ssize_t conf_conn_recv(struct conf_conn *c, void *out, size_t len, int timeout_ms);
/* Closes the connection now (the case's end would otherwise). */
void conf_conn_close(struct conf_conn *c);
