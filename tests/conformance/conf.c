/* conf.c: the conformance suite's HTTP client and per-case context; see conf.h. Only the HTTP
 * API is used: nothing here knows what kind of server answers. */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "conf.h"
#include "sse.h"
#include "util.h"

#define RESPONSE_MAX (64u << 20)
#define REQUEST_TIMEOUT_MS 60000L
#define CONNECT_TIMEOUT_MS 10000L
#define WAIT_STATE_MS 10000
#define STREAM_OPEN_MS 10000

const char *const conf_sandbox_fields[] = {
	"id",
	"name",
	"state",
	"image",
	"cpus",
	"memory_mb",
	"disk_mb",
	"env_names",
	"network",
	"labels",
	"volumes",
	"created_at",
	"idle_timeout_secs",
	"lifetime_secs",
	"expires_at",
	"owner",
	"reason",
	NULL,
};

/* The error table of docs/api.md: a code and the status it goes with. invalid_request also
 * covers the 4xx statuses the table has no row of their own for (405, 408, 413, 431 ...). */
static const struct {
	const char *code;
	long status;
} error_codes[] = {
	{ .code = "invalid_request", .status = 400 },
	{ .code = "unauthorized", .status = 401 },
	{ .code = "refused", .status = 403 },
	{ .code = "forbidden_origin", .status = 403 },
	{ .code = "not_found", .status = 404 },
	{ .code = "conflict", .status = 409 },
	{ .code = "rate_limited", .status = 429 },
	{ .code = "unsupported", .status = 501 },
	{ .code = "unavailable", .status = 503 },
	{ .code = "internal", .status = 500 },
	{ .code = "insufficient_storage", .status = 507 },
};

static struct {
	char *endpoint;
	char *base; /* what paths are appended to */
	char *unix_path;
	char *token;
	char *ca;
	CURL *easy; /* reused between requests, so connections are kept */
	json_t *caps;
	int sandboxes; /* -1: not probed yet */
	char run_id[17];
	char *shared;           /* the shared sandbox's id, once created */
	char shared_secret[33]; /* its CONF_SHARED_SECRET */
} G = { .sandboxes = -1 };

struct deferred {
	void (*fn)(void *);
	void *p;
};

/* The running case: what to free and which sandboxes to delete when it ends. */
static struct {
	struct deferred *v;
	size_t n, cap;
	json_t *created;
} C;

/* ---- configuration ---- */

static char *
env_dup(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? strdup(v) : NULL;
}

int
conf_init(void)
{
	const char *e;

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "conformance: libcurl did not initialise\n");
		return -EIO;
	}
	G.endpoint = env_dup("SANDBOX_CONFORMANCE_ENDPOINT");
	G.token = env_dup("SANDBOX_CONFORMANCE_TOKEN");
	G.ca = env_dup("SANDBOX_CONFORMANCE_CA");
	e = G.endpoint;
	if (!e) {
		fprintf(stderr,
		        "conformance: set SANDBOX_CONFORMANCE_ENDPOINT to http://HOST:PORT, "
		        "https://HOST:PORT or unix:///PATH\n");
		return -EINVAL;
	}
	if (str_has_prefix(e, "unix://")) {
		if (e[7] != '/') {
			fprintf(stderr,
			        "conformance: endpoint '%s': the socket path must be "
			        "absolute (unix:///run/sandboxd.sock)\n",
			        e);
			return -EINVAL;
		}
		G.unix_path = strdup(e + 7);
		G.base = strdup("http://localhost");
	} else if (str_has_prefix(e, "http://") || str_has_prefix(e, "https://")) {
		size_t n = strlen(e);
		while (n > 0 && e[n - 1] == '/')
			n--;
		G.base = strndup(e, n);
	} else {
		fprintf(stderr, "conformance: endpoint '%s': use http://, https:// or unix://\n",
		        e);
		return -EINVAL;
	}
	G.easy = curl_easy_init();
	if (!G.base || (str_has_prefix(e, "unix://") && !G.unix_path) || !G.easy ||
	    random_hex(G.run_id, 8) < 0 || random_hex(G.shared_secret, 16) < 0) {
		fprintf(stderr, "conformance: out of memory\n");
		return -ENOMEM;
	}
	return 0;
}

static void delete_quietly(const char *id);

void
conf_done(void)
{
	(void)conf_case_teardown(NULL);
	if (G.shared && G.easy)
		delete_quietly(G.shared);
	free(G.shared);
	json_decref(G.caps);
	if (G.easy)
		curl_easy_cleanup(G.easy);
	free(G.endpoint);
	free(G.base);
	free(G.unix_path);
	free(G.token);
	free(G.ca);
	G = (typeof(G)){ .sandboxes = -1 };
	curl_global_cleanup();
}

const char *
conf_endpoint(void)
{
	return G.endpoint;
}

bool
conf_is_unix(void)
{
	return G.unix_path != NULL;
}

bool
conf_has_token(void)
{
	return G.token != NULL;
}

const char *
conf_token(void)
{
	return G.token ? G.token : "";
}

const char *
conf_run_id(void)
{
	return G.run_id;
}

/* ---- the case context ---- */

void *
conf_defer(void (*fn)(void *), void *p)
{
	if (!p)
		fail_msg("out of memory");
	if (C.n == C.cap) {
		size_t cap = C.cap ? 2 * C.cap : 64;
		struct deferred *v = realloc(C.v, cap * sizeof(*v));
		if (!v) {
			fn(p);
			fail_msg("out of memory");
		}
		C.v = v;
		C.cap = cap;
	}
	C.v[C.n++] = (struct deferred){ .fn = fn, .p = p };
	return p;
}

char *
conf_keep(char *p)
{
	return conf_defer(free, p);
}

static void
json_decref_void(void *p)
{
	json_decref(p);
}

json_t *
conf_keep_json(json_t *j)
{
	return conf_defer(json_decref_void, j);
}

char *
conf_fmt(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return conf_keep(s);
}

int
conf_case_setup(void **state)
{
	C.created = json_array();
	return C.created ? 0 : -1;
}

/* ---- requests ---- */

static size_t
sink_write(char *ptr, size_t size, size_t n, void *data)
{
	struct buf *b = data;

	return buf_append(b, ptr, size * n) < 0 ? 0 : size * n;
}

/* Sets what every request and stream shares: the URL, the transport, TLS and timeouts. */
static int
setup_easy(CURL *h, const char *path)
{
	_cleanup_free_ char *url = strdup_printf("%s%s", G.base, path);

	if (!url)
		return -ENOMEM;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	if (G.unix_path)
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, G.unix_path);
	if (G.ca)
		curl_easy_setopt(h, CURLOPT_CAINFO, G.ca);
	return 0;
}

/* Adds the Authorization header auth asks for. */
static int
add_auth(struct curl_slist **h, enum conf_auth auth, const char *raw)
{
	_cleanup_free_ char *line = NULL;
	struct curl_slist *n;

	switch (auth) {
	case CONF_AUTH_TOKEN:
		if (!G.token)
			return 0;
		line = strdup_printf("Authorization: Bearer %s", G.token);
		break;
	case CONF_AUTH_NONE:
		return 0;
	case CONF_AUTH_WRONG:
		/* as long as a real token, so only the content differs */
		line = strdup_printf("Authorization: Bearer %s",
		                     "wrong-conformance-token-0123456789abcdef");
		break;
	case CONF_AUTH_RAW:
		line = strdup_printf("Authorization: %s", raw ? raw : "");
		break;
	}
	if (!line)
		return -ENOMEM;
	n = curl_slist_append(*h, line);
	if (!n)
		return -ENOMEM;
	*h = n;
	return 0;
}

static int
add_header(struct curl_slist **h, const char *line)
{
	struct curl_slist *n = curl_slist_append(*h, line);

	if (!n)
		return -ENOMEM;
	*h = n;
	return 0;
}

/* Sends req and reads the whole answer. Asserts nothing: teardown uses it too. Returns 0 or
 * a negative errno; on success *ret_status, ret_body and *ret_ct are set. */
static int
perform(const struct conf_req *req, long *ret_status, struct buf *ret_body, char **ret_ct,
        char *ret_err, size_t err_size)
{
	const char *method = req->method ? req->method : "GET";
	struct curl_slist *hdrs = NULL;
	size_t blen = req->body ? (req->body_len ? req->body_len : strlen(req->body)) : 0;
	const char *ct = NULL;
	char errbuf[CURL_ERROR_SIZE] = "";
	CURLcode cr;
	long status = 0;
	int r = 0;

	curl_easy_reset(G.easy);
	if (setup_easy(G.easy, req->path) < 0)
		return -ENOMEM;
	curl_easy_setopt(G.easy, CURLOPT_TIMEOUT_MS, REQUEST_TIMEOUT_MS);
	curl_easy_setopt(G.easy, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(G.easy, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(G.easy, CURLOPT_WRITEDATA, ret_body);
	if (!streq(method, "GET"))
		curl_easy_setopt(G.easy, CURLOPT_CUSTOMREQUEST, method);
	if (req->body || streq(method, "POST")) {
		/* a POST without a body still says Content-Length: 0 */
		curl_easy_setopt(G.easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
		curl_easy_setopt(G.easy, CURLOPT_POSTFIELDS, req->body ? req->body : "");
	}
	if (req->content_type && *req->content_type) {
		_cleanup_free_ char *line = strdup_printf("Content-Type: %s", req->content_type);
		r = line ? add_header(&hdrs, line) : -ENOMEM;
	} else if (req->body && !req->content_type) {
		r = add_header(&hdrs, "Content-Type: application/json");
	} else {
		/* libcurl would otherwise add application/x-www-form-urlencoded */
		r = add_header(&hdrs, "Content-Type:");
	}
	if (r >= 0)
		r = add_header(&hdrs, "Accept: application/json");
	if (r >= 0)
		r = add_auth(&hdrs, req->auth, req->authorization);
	for (size_t i = 0; r >= 0 && i < CONF_MAX_HEADERS && req->headers[i]; i++)
		r = add_header(&hdrs, req->headers[i]);
	if (r < 0) {
		curl_slist_free_all(hdrs);
		return r;
	}
	curl_easy_setopt(G.easy, CURLOPT_HTTPHEADER, hdrs);
	cr = curl_easy_perform(G.easy);
	curl_easy_getinfo(G.easy, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(G.easy, CURLINFO_CONTENT_TYPE, &ct);
	*ret_ct = strdup(ct ? ct : "");
	curl_slist_free_all(hdrs);
	/* a server may answer early (413) and close while the body is still going out: the
	 * answer counts if one arrived */
	if (cr != CURLE_OK && status == 0) {
		snprintf(ret_err, err_size, "%s", *errbuf ? errbuf : curl_easy_strerror(cr));
		free(*ret_ct);
		*ret_ct = NULL;
		return -EIO;
	}
	if (!*ret_ct)
		return -ENOMEM;
	*ret_status = status;
	return 0;
}

static bool
code_fits(const char *code, long status)
{
	for (size_t i = 0; i < ARRAY_SIZE(error_codes); i++) {
		if (!streq(code, error_codes[i].code))
			continue;
		if (status == error_codes[i].status)
			return true;
		/* invalid_request: any 4xx without a row of its own */
		return streq(code, "invalid_request") && status >= 400 && status < 500 &&
		       status != 401 && status != 403 && status != 404 && status != 409 &&
		       status != 429;
	}
	return false;
}

/* Every error is {"error":{"code","message"}} with a known code fitting the status. */
static void
check_error_shape(const struct conf_req *req, const struct conf_resp *resp)
{
	const char *method = req->method ? req->method : "GET";
	const json_t *err = json_object_get(resp->json, "error");
	const char *code = conf_str(err, "code");
	const char *message = conf_str(err, "message");

	if (!json_is_object(resp->json) || !json_is_object(err))
		fail_msg("%s %s: %ld with a body that is not {\"error\":{...}}: '%.300s'", method,
		         req->path, resp->status, resp->body);
	if (!json_is_string(json_object_get(err, "code")) || !*code)
		fail_msg("%s %s: %ld: the error has no code: '%.300s'", method, req->path,
		         resp->status, resp->body);
	if (!json_is_string(json_object_get(err, "message")) || !*message)
		fail_msg("%s %s: %ld: the error has no message: '%.300s'", method, req->path,
		         resp->status, resp->body);
	if (!code_fits(code, resp->status))
		fail_msg("%s %s: %ld with code '%s', which docs/api.md's error table does not pair "
		         "with that status",
		         method, req->path, resp->status, code);
	if (!str_has_prefix(resp->content_type, "application/json"))
		fail_msg("%s %s: %ld: the error is sent as '%s', not application/json", method,
		         req->path, resp->status, resp->content_type);
}

static bool
is_create(const struct conf_req *req)
{
	return req->method && streq(req->method, "POST") &&
	       (streq(req->path, "/v1/sandboxes") || str_has_prefix(req->path, "/v1/sandboxes?"));
}

const struct conf_resp *
conf_send(const struct conf_req *req)
{
	_cleanup_buf_ struct buf body = BUF_INIT(RESPONSE_MAX);
	struct conf_resp *resp = conf_defer(free, calloc(1, sizeof(*resp)));
	char *ct = NULL, err[CURL_ERROR_SIZE + 64];
	long status = 0;
	int r;

	r = perform(req, &status, &body, &ct, err, sizeof(err));
	if (r < 0)
		fail_msg("%s %s: no answer: %s", req->method ? req->method : "GET", req->path,
		         r == -EIO ? err : strerror(-r));
	resp->content_type = conf_keep(ct);
	resp->status = status;
	resp->body_len = body.len;
	resp->body = conf_keep(body.data ? buf_steal(&body) : strdup(""));
	if (resp->body_len)
		resp->json = json_loadb(resp->body, resp->body_len, 0, NULL);
	if (resp->json)
		conf_keep_json(resp->json);
	if (status >= 400)
		check_error_shape(req, resp);
	if (status == 201 && is_create(req)) {
		const char *id = conf_str(resp->json, "id");
		if (*id && C.created)
			json_array_append_new(C.created, json_string(id));
	}
	return resp;
}

long
conf_request(const char *method, const char *path, const char *json_body, json_t **ret_json)
{
	const struct conf_resp *resp =
	        conf_send(&(struct conf_req){ .method = method, .path = path, .body = json_body });

	if (ret_json)
		*ret_json = resp->json;
	return resp->status;
}

const char *
conf_error_message(const json_t *j)
{
	return conf_str(json_object_get(j, "error"), "message");
}

void
conf_assert_error(long status, const json_t *j, long want_status, const char *want_code)
{
	const char *code = conf_str(json_object_get(j, "error"), "code");
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;

	conf_keep(text ? text : strdup("(no JSON body)"));
	if (status != want_status || !streq(code, want_code))
		fail_msg("expected %ld %s, got %ld: %.400s", want_status, want_code, status,
		         text ? text : "(no JSON body)");
}

const char *
conf_str(const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : "";
}

char *
conf_escape(const char *s)
{
	char *e = curl_easy_escape(NULL, s, 0);
	char *copy = e ? strdup(e) : NULL;

	curl_free(e);
	return conf_keep(copy);
}

/* ---- discovery ---- */

json_t *
conf_caps(void)
{
	json_t *j;
	long status;

	if (G.caps)
		return G.caps;
	status = conf_request("GET", "/v1/capabilities", NULL, &j);
	if (status != 200 || !json_is_object(j))
		fail_msg("GET /v1/capabilities answered %ld", status);
	G.caps = json_incref(j);
	return G.caps;
}

int
conf_net_mode_rank(const char *mode)
{
	static const char *const order[] = { "none", "allowlist", "open" };

	for (size_t i = 0; mode && i < ARRAY_SIZE(order); i++)
		if (streq(mode, order[i]))
			return (int)i;
	return -1;
}

bool
conf_capability(const char *name)
{
	return json_is_true(json_object_get(json_object_get(conf_caps(), "capabilities"), name));
}

void
conf_need_capability(const char *name)
{
	if (!conf_capability(name)) {
		print_message("skip: this server's capabilities.%s is false\n", name);
		skip();
	}
}

/* ---- names and ids ---- */

char *
conf_name(const char *tag)
{
	char hex[9];

	if (random_hex(hex, 4) < 0)
		fail_msg("getrandom failed");
	return conf_fmt("cf-%.40s-%s", tag, hex);
}

char *
conf_random_id(void)
{
	char hex[17];

	if (random_hex(hex, 8) < 0)
		fail_msg("getrandom failed");
	return conf_fmt("sbx_%s", hex);
}

bool
conf_id_valid(const char *s)
{
	const char *us;
	size_t n;

	if (!s || !str_has_prefix(s, "sbx_"))
		return false;
	s += 4;
	us = strchr(s, '_');
	if (us) {
		/* sbx_<node>_<hex>: a node name of 1 to 31 [a-z0-9-] */
		n = (size_t)(us - s);
		if (n < 1 || n > 31)
			return false;
		for (size_t i = 0; i < n; i++)
			if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= '0' && s[i] <= '9') &&
			    s[i] != '-')
				return false;
		s = us + 1;
	}
	if (strlen(s) != 16)
		return false;
	for (size_t i = 0; i < 16; i++)
		if (!(s[i] >= '0' && s[i] <= '9') && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
	return true;
}

/* ---- sandboxes ---- */

/* The create body: fields plus our labels and, unless given, a fresh name. */
static const char *
create_body(const char *fields)
{
	json_error_t jerr;
	json_t *body = json_loads(fields ? fields : "{}", JSON_ALLOW_NUL, &jerr);
	json_t *labels;

	if (!json_is_object(body)) {
		json_decref(body);
		fail_msg("bad test: '%s' is not a JSON object: %s", fields, jerr.text);
	}
	conf_keep_json(body);
	if (!json_object_get(body, "name"))
		json_object_set_new(body, "name", json_string(conf_name("sbx")));
	labels = json_object_get(body, "labels");
	if (!labels) {
		labels = json_object();
		json_object_set_new(body, "labels", labels);
	}
	if (json_is_object(labels)) {
		if (!json_object_get(labels, "conformance"))
			json_object_set_new(labels, "conformance", json_string("1"));
		if (!json_object_get(labels, "conformance-run"))
			json_object_set_new(labels, "conformance-run", json_string(G.run_id));
	}
	return conf_keep(json_dumps(body, JSON_COMPACT));
}

long
conf_create_status(const char *fields, json_t **ret_json)
{
	return conf_request("POST", "/v1/sandboxes", create_body(fields), ret_json);
}

static bool
is_unsupported(long status, const json_t *j)
{
	return status == 501 && streq(conf_str(json_object_get(j, "error"), "code"), "unsupported");
}

bool
conf_sandboxes_supported(void)
{
	json_t *j;
	long status;

	if (G.sandboxes >= 0)
		return G.sandboxes;
	status = conf_create_status("{\"wait\":false}", &j);
	if (status == 201)
		G.sandboxes = 1; /* deleted when the case ends */
	else if (is_unsupported(status, j))
		G.sandboxes = 0;
	else
		fail_msg("probing for sandboxes: a plain create answered %ld: %.300s", status,
		         conf_keep(json_dumps(j, JSON_COMPACT)));
	return G.sandboxes;
}

void
conf_need_sandboxes(void)
{
	if (!conf_sandboxes_supported()) {
		print_message("skip: this server does not create sandboxes (501 unsupported)\n");
		skip();
	}
}

json_t *
conf_create(const char *fields)
{
	json_t *j;
	long status = conf_create_status(fields, &j);

	if (is_unsupported(status, j)) {
		G.sandboxes = 0;
		print_message("skip: this server does not create sandboxes (501 unsupported)\n");
		skip();
	}
	if (status != 201 || !json_is_object(j))
		fail_msg("create %s: expected 201, got %ld: %.400s", fields ? fields : "{}", status,
		         j ? conf_keep(json_dumps(j, JSON_COMPACT)) : "(no JSON body)");
	return j;
}

const char *
conf_shared_sandbox(void)
{
	const char *id;
	json_t *j;
	long status;
	int i;

	if (G.shared) {
		status = conf_request("GET", conf_fmt("/v1/sandboxes/%s", G.shared), NULL, &j);
		if (status == 200 && streq(conf_str(j, "state"), "running"))
			return G.shared;
		/* an earlier case broke it: the next ones get a fresh one */
		print_message("the shared sandbox '%s' is %s; making another\n", G.shared,
		              status == 200 ? conf_str(j, "state") : "gone");
		delete_quietly(G.shared);
		free(G.shared);
		G.shared = NULL;
	}
	j = conf_create(conf_fmt("{\"name\":\"%s\",\"env\":{\"CONF_SHARED_SECRET\":\"%s\"}}",
	                         conf_name("shared"), G.shared_secret));
	id = conf_str(j, "id");
	/* the run owns it, not the case that happened to make it */
	i = conf_index_of(C.created, id);
	if (i >= 0)
		json_array_remove(C.created, (size_t)i);
	G.shared = strdup(id);
	if (!G.shared) {
		delete_quietly(id);
		fail_msg("out of memory");
	}
	return G.shared;
}

const char *
conf_shared_secret(void)
{
	return G.shared_secret;
}

json_t *
conf_create_refused(const char *fields, long want_status, const char *want_code)
{
	json_t *j;
	long status = conf_create_status(fields, &j);

	if (is_unsupported(status, j) && want_status != 501 && !conf_sandboxes_supported()) {
		print_message("skip: this server does not create sandboxes (501 unsupported)\n");
		skip();
	}
	if (status != want_status ||
	    !streq(conf_str(json_object_get(j, "error"), "code"), want_code))
		fail_msg("create %s: expected %ld %s, got %ld: %.400s", fields, want_status,
		         want_code, status,
		         j ? conf_keep(json_dumps(j, JSON_COMPACT)) : "(no JSON body)");
	return j;
}

json_t *
conf_get(const char *ref)
{
	json_t *j;
	long status = conf_request("GET", conf_fmt("/v1/sandboxes/%s", ref), NULL, &j);

	if (status != 200 || !json_is_object(j))
		fail_msg("GET /v1/sandboxes/%s: expected 200, got %ld", ref, status);
	return j;
}

json_t *
conf_wait_state(const char *ref, const char *state)
{
	uint64_t deadline = now_mono_ms() + WAIT_STATE_MS;
	json_t *j;

	for (;;) {
		j = conf_get(ref);
		if (streq(conf_str(j, "state"), state))
			return j;
		if (now_mono_ms() > deadline)
			fail_msg("sandbox '%s' is still '%s' after %d ms; expected '%s'", ref,
			         conf_str(j, "state"), WAIT_STATE_MS, state);
		usleep(20 * 1000);
	}
}

json_t *
conf_list_ids(const char *query)
{
	json_t *j, *list, *ids = conf_keep_json(json_array()), *sb;
	size_t i;
	long status =
	        conf_request("GET", conf_fmt("/v1/sandboxes%s", query ? query : ""), NULL, &j);

	if (status != 200)
		fail_msg("GET /v1/sandboxes%s: expected 200, got %ld", query ? query : "", status);
	list = json_object_get(j, "sandboxes");
	if (!json_is_array(list))
		fail_msg("GET /v1/sandboxes%s: no \"sandboxes\" array", query ? query : "");
	json_array_foreach (list, i, sb)
		json_array_append_new(ids, json_string(conf_str(sb, "id")));
	return ids;
}

int
conf_index_of(const json_t *a, const char *s)
{
	size_t i;
	json_t *v;

	json_array_foreach ((json_t *)a, i, v)
		if (json_is_string(v) && streq(json_string_value(v), s))
			return (int)i;
	return -1;
}

/* ---- the end of a case ---- */

struct later {
	char *method, *path, *body;
};

static void
later_run(void *p)
{
	struct later *l = p;
	_cleanup_buf_ struct buf body = BUF_INIT(RESPONSE_MAX);
	_cleanup_free_ char *ct = NULL;
	char err[CURL_ERROR_SIZE + 64];
	long status = 0;

	if (perform(&(struct conf_req){ .method = l->method, .path = l->path, .body = l->body },
	            &status, &body, &ct, err, sizeof(err)) < 0)
		fprintf(stderr, "conformance: cleanup: %s %s: %s\n", l->method, l->path, err);
	free(l->method);
	free(l->path);
	free(l->body);
	free(l);
}

void
conf_defer_request(const char *method, const char *path, const char *json_body)
{
	struct later *l = calloc(1, sizeof(*l));

	if (l) {
		l->method = strdup(method);
		l->path = strdup(path);
		l->body = json_body ? strdup(json_body) : NULL;
		if (!l->method || !l->path || (json_body && !l->body)) {
			free(l->method);
			free(l->path);
			free(l->body);
			free(l);
			l = NULL;
		}
	}
	conf_defer(later_run, l);
}

static void
delete_quietly(const char *id)
{
	_cleanup_buf_ struct buf body = BUF_INIT(RESPONSE_MAX);
	_cleanup_free_ char *path = strdup_printf("/v1/sandboxes/%s", id);
	_cleanup_free_ char *ct = NULL;
	char err[CURL_ERROR_SIZE + 64];
	long status = 0;

	if (!path)
		return;
	if (perform(&(struct conf_req){ .method = "DELETE", .path = path }, &status, &body, &ct,
	            err, sizeof(err)) < 0)
		fprintf(stderr, "conformance: cleanup: DELETE %s: %s\n", path, err);
	else if (status != 204 && status != 404)
		fprintf(stderr, "conformance: cleanup: DELETE %s answered %ld\n", path, status);
}

int
conf_case_teardown(void **state)
{
	size_t i;
	json_t *id;

	/* streams first, so they do not watch the deletes */
	while (C.n > 0) {
		C.n--;
		C.v[C.n].fn(C.v[C.n].p);
	}
	free(C.v);
	C.v = NULL;
	C.cap = 0;
	json_array_foreach (C.created, i, id)
		delete_quietly(json_string_value(id));
	json_decref(C.created);
	C.created = NULL;
	return 0;
}

/* ---- SSE streams ---- */

#define STREAM_FIRST_MAX 4096

struct conf_stream {
	CURLM *multi;
	CURL *easy;
	struct curl_slist *headers;
	struct sse parser; /* the CLI's (cli/sse.c) */
	struct buf first;  /* the start of the body, for a failure message */
	json_t *events;    /* parsed and not yet taken */
	bool done;
};

static void
stream_free(void *p)
{
	struct conf_stream *s = p;

	if (s->multi && s->easy)
		curl_multi_remove_handle(s->multi, s->easy);
	if (s->easy)
		curl_easy_cleanup(s->easy);
	if (s->multi)
		curl_multi_cleanup(s->multi);
	curl_slist_free_all(s->headers);
	sse_done(&s->parser);
	buf_free(&s->first);
	json_decref(s->events);
	free(s);
}

/* An event with data: queued as {"id","event","raw","data"} (data parsed, or null). */
static int
stream_event(void *userdata, const char *type, const char *id, const char *data, size_t len)
{
	struct conf_stream *s = userdata;
	json_t *ev = json_pack("{s:s, s:s, s:s}", "id", id, "event", type, "raw", data);
	json_t *parsed = json_loads(data, 0, NULL);

	(void)len;
	if (!ev || json_object_set_new(ev, "data", parsed ? parsed : json_null()) < 0 ||
	    json_array_append_new(s->events, ev) < 0)
		return -ENOMEM;
	return 0;
}

static size_t
stream_write(char *ptr, size_t size, size_t n, void *data)
{
	struct conf_stream *s = data;
	size_t len = size * n;

	(void)buf_append(&s->first, ptr, MIN(len, STREAM_FIRST_MAX - buf_avail(&s->first)));
	return sse_feed(&s->parser, ptr, len) == 0 ? len : 0;
}

/* Lets libcurl work for up to timeout_ms. */
static void
stream_pump(struct conf_stream *s, int timeout_ms)
{
	int running = 0, fds;

	curl_multi_perform(s->multi, &running);
	if (running && timeout_ms > 0) {
		curl_multi_poll(s->multi, NULL, 0, timeout_ms, &fds);
		curl_multi_perform(s->multi, &running);
	}
	if (!running)
		s->done = true;
}

struct conf_stream *
conf_stream_open(const char *path, const char *last_event_id)
{
	struct conf_stream *s = conf_defer(stream_free, calloc(1, sizeof(*s)));
	uint64_t deadline = now_mono_ms() + STREAM_OPEN_MS;
	long status = 0;
	const char *ct = NULL;
	int r;

	sse_init(&s->parser, RESPONSE_MAX, stream_event, s);
	buf_init(&s->first, STREAM_FIRST_MAX);
	s->events = json_array();
	s->multi = curl_multi_init();
	s->easy = curl_easy_init();
	if (!s->events || !s->multi || !s->easy || setup_easy(s->easy, path) < 0)
		fail_msg("out of memory");
	r = add_header(&s->headers, "Accept: text/event-stream");
	if (r >= 0)
		r = add_auth(&s->headers, CONF_AUTH_TOKEN, NULL);
	if (r >= 0 && last_event_id) {
		_cleanup_free_ char *line = strdup_printf("Last-Event-ID: %s", last_event_id);
		r = line ? add_header(&s->headers, line) : -ENOMEM;
	}
	if (r < 0)
		fail_msg("out of memory");
	curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->headers);
	curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, stream_write);
	curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
	curl_multi_add_handle(s->multi, s->easy);
	/* the headers mean the server has taken the subscription */
	while (status == 0 && !s->done && now_mono_ms() < deadline) {
		stream_pump(s, 50);
		curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
	}
	curl_easy_getinfo(s->easy, CURLINFO_CONTENT_TYPE, &ct);
	if (status != 200)
		fail_msg("GET %s (event stream): expected 200, got %ld: %.300s", path, status,
		         s->first.data ? s->first.data : "");
	if (!ct || !str_has_prefix(ct, "text/event-stream"))
		fail_msg("GET %s: the stream is sent as '%s', not text/event-stream", path,
		         ct ? ct : "");
	return s;
}

json_t *
conf_stream_next(struct conf_stream *s, int timeout_ms)
{
	uint64_t deadline = now_mono_ms() + (uint64_t)timeout_ms;

	for (;;) {
		uint64_t now;

		if (json_array_size(s->events) > 0) {
			json_t *ev = json_incref(json_array_get(s->events, 0));
			json_array_remove(s->events, 0);
			return conf_keep_json(ev);
		}
		now = now_mono_ms();
		if (s->done || now >= deadline)
			return NULL;
		stream_pump(s, (int)MIN(deadline - now, 200u));
	}
}

const char *
conf_event_sandbox_id(const json_t *ev)
{
	const json_t *data = json_object_get(ev, "data");
	const char *id = conf_str(data, "sandbox_id");

	return *id ? id : conf_str(json_object_get(data, "sandbox"), "id");
}

const char *
conf_event_type(const json_t *ev)
{
	const char *t = conf_str(ev, "event");

	return *t && !streq(t, "message") ? t : conf_str(json_object_get(ev, "data"), "type");
}

long long
conf_event_seq(const json_t *ev)
{
	uint64_t v;

	return parse_u64(conf_str(ev, "id"), &v) < 0 || v > INT64_MAX ? -1 : (long long)v;
}

/* ---- the audit trail ---- */

json_t *
conf_audit_trail(const char *ref)
{
	json_t *j, *events;
	long status = conf_request("GET", conf_fmt("/v1/sandboxes/%s/events", ref), NULL, &j);

	if (status != 200)
		fail_msg("GET /v1/sandboxes/%s/events: expected 200, got %ld", ref, status);
	events = json_object_get(j, "events");
	if (!json_is_array(events))
		fail_msg("GET /v1/sandboxes/%s/events: no \"events\" array", ref);
	if (!json_is_boolean(json_object_get(j, "truncated")))
		fail_msg("GET /v1/sandboxes/%s/events: no \"truncated\" flag", ref);
	if (json_is_true(json_object_get(j, "truncated")))
		fail_msg("GET /v1/sandboxes/%s/events: truncated for a sandbox of a few events",
		         ref);
	return events;
}

bool
conf_time_valid(const char *s)
{
	/* YYYY-MM-DDTHH:MM:SS, a fraction, Z */
	static const char form[] = "dddd-dd-ddTdd:dd:dd";
	size_t i;

	for (i = 0; form[i]; i++)
		if (form[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != form[i])
			return false;
	if (s[i] == '.') {
		size_t n = strspn(s + i + 1, "0123456789");
		if (n == 0)
			return false;
		i += 1 + n;
	}
	return streq(s + i, "Z");
}

/* The audit vocabulary: each record type and its fields, each of them always present. */
#define AUDIT_FIELDS_MAX 7
static const struct {
	const char *type;
	const char *fields[AUDIT_FIELDS_MAX + 1];
} audit_types[] = {
	{ "sandbox.created",
	  { "name", "image", "labels", "network", "env_names", "snapshot", "volumes" } },
	{ "sandbox.network_updated", { "network" } },
	{ "sandbox.stopped", { NULL } },
	{ "sandbox.started", { NULL } },
	{ "sandbox.suspended", { NULL } },
	{ "sandbox.resumed", { NULL } },
	{ "sandbox.failed", { "reason" } },
	{ "sandbox.terminated", { "reason" } },
	{ "snapshot.created", { "snapshot", "bytes" } },
	{ "snapshot.deleted", { "snapshot", "reason" } },
	{ "process.started", { "pid", "program", "arg_count", "args_sha256", "cwd", "env_names" } },
	{ "process.exited", { "pid", "exit_code", "duration_ms" } },
	{ "file.read", { "path", "bytes" } },
	{ "file.written", { "path", "bytes" } },
	{ "file.removed", { "path", "bytes" } },
	{ "tunnel.opened", { "port" } },
	{ "egress.allowed", { "name", "port", "reason", "bytes" } },
	{ "egress.denied", { "name", "port", "reason", "bytes" } },
};

/* A member that must be a count: an integer, not negative. */
static void
expect_count(const json_t *ev, const char *key, const char *text)
{
	const json_t *v = json_object_get(ev, key);

	if (v && (!json_is_integer(v) || json_integer_value(v) < 0))
		fail_msg("audit record: \"%s\" is not a count: %s", key, text);
}

void
conf_assert_audit_record(const json_t *ev, const char *sandbox_id)
{
	char *text = conf_keep(json_dumps(ev, JSON_COMPACT));
	const char *type = conf_str(ev, "type"), *reason = conf_str(ev, "reason");
	size_t want = 3, i, k;

	if (!json_is_object(ev))
		fail_msg("audit record: not an object: %s", text ? text : "?");
	if (!conf_time_valid(conf_str(ev, "time")))
		fail_msg("audit record: \"time\" is not an RFC 3339 UTC time: %s", text);
	if (!streq(conf_str(ev, "sandbox"), sandbox_id))
		fail_msg("audit record: \"sandbox\" is not '%s' (the flat shape has the id "
		         "there): %s",
		         sandbox_id, text);
	for (i = 0; i < ARRAY_SIZE(audit_types); i++)
		if (streq(type, audit_types[i].type))
			break;
	if (i == ARRAY_SIZE(audit_types))
		fail_msg("audit record: \"type\" '%s' is not one of the audit trail's: %s", type,
		         text);
	for (k = 0; k < AUDIT_FIELDS_MAX && audit_types[i].fields[k]; k++, want++)
		if (!json_object_get(ev, audit_types[i].fields[k]))
			fail_msg("audit record: %s without \"%s\": %s", type,
			         audit_types[i].fields[k], text);
	/* a sandbox claimed from a pool says so, and only that */
	if (streq(type, "sandbox.created") && json_object_get(ev, "reason")) {
		if (!streq(reason, "pool"))
			fail_msg("audit record: sandbox.created with a reason other than \"pool\": "
			         "%s",
			         text);
		want++;
	}
	/* (ext) a stop its idle timeout made says so, and one after a read of a stopped
	 * sandbox's files started it; only that */
	if (streq(type, "sandbox.stopped") && json_object_get(ev, "reason")) {
		if (!streq(reason, "idle") && !streq(reason, "read"))
			fail_msg("audit record: sandbox.stopped with a reason other than \"idle\" "
			         "or \"read\": %s",
			         text);
		want++;
	}
	if (json_object_size(ev) != want)
		fail_msg("audit record: %s has members beyond {time, type, sandbox, %s%s...}: %s",
		         type, audit_types[i].fields[0] ? audit_types[i].fields[0] : "",
		         audit_types[i].fields[0] ? ", " : "", text);
	/* "client" (ext): a sandbox bound to its client, which went away */
	if (streq(type, "sandbox.terminated") && !streq(reason, "request") &&
	    !streq(reason, "idle") && !streq(reason, "lifetime") && !streq(reason, "failed") &&
	    !streq(reason, "client"))
		fail_msg(
		        "audit record: sandbox.terminated's reason is not request, idle, lifetime, "
		        "failed or client: %s",
		        text);
	if (streq(type, "snapshot.deleted") && !streq(reason, "request") &&
	    !streq(reason, "retention"))
		fail_msg("audit record: snapshot.deleted's reason is not request or retention: %s",
		         text);
	expect_count(ev, "bytes", text);
	expect_count(ev, "arg_count", text);
	expect_count(ev, "duration_ms", text);
	expect_count(ev, "pid", text);
	if (json_object_get(ev, "env_names") && !json_is_array(json_object_get(ev, "env_names")))
		fail_msg("audit record: \"env_names\" is not an array: %s", text);
	if (json_object_get(ev, "args_sha256") &&
	    (strlen(conf_str(ev, "args_sha256")) != 64 ||
	     strspn(conf_str(ev, "args_sha256"), "0123456789abcdef") != 64))
		fail_msg("audit record: \"args_sha256\" is not 64 lowercase hex digits: %s", text);
}

/* ---- raw connections ---- */

#define UPGRADE_HEAD_MAX (64u << 10)
#define UPGRADE_WAIT_MS 30000

struct conf_conn {
	CURL *easy; /* NULL once closed */
	curl_socket_t fd;
	struct buf in; /* read past the answer's head and not yet taken */
};

static void
conn_free(void *p)
{
	struct conf_conn *c = p;

	if (c->easy)
		curl_easy_cleanup(c->easy);
	buf_free(&c->in);
	free(c);
}

void
conf_conn_close(struct conf_conn *c)
{
	if (c->easy)
		curl_easy_cleanup(c->easy);
	c->easy = NULL;
}

/* Waits for the socket to be readable (or writable) for up to timeout_ms. */
static bool
conn_wait(struct conf_conn *c, short events, int timeout_ms)
{
	struct pollfd pfd = { .fd = c->fd, .events = events };

	return poll(&pfd, 1, timeout_ms) > 0;
}

/* From the socket only: the count, 0 at the end, -ETIMEDOUT or -EIO. */
static ssize_t
conn_read(struct conf_conn *c, void *out, size_t len, int timeout_ms)
{
	uint64_t deadline = now_mono_ms() + (uint64_t)MAX(timeout_ms, 0);

	if (!c->easy)
		return -EIO;
	for (;;) {
		size_t n = 0;
		CURLcode cr = curl_easy_recv(c->easy, out, len, &n);
		uint64_t now;

		/* TLS may hold decrypted bytes the socket no longer shows: ask curl first */
		if (cr == CURLE_OK)
			return (ssize_t)n;
		if (cr != CURLE_AGAIN)
			return -EIO;
		now = now_mono_ms();
		if (now >= deadline)
			return -ETIMEDOUT;
		(void)conn_wait(c, POLLIN, (int)MIN(deadline - now, 1000u));
	}
}

ssize_t
conf_conn_recv(struct conf_conn *c, void *out, size_t len, int timeout_ms)
{
	size_t n = MIN(len, buf_avail(&c->in));

	if (n > 0) {
		memcpy(out, buf_head(&c->in), n);
		buf_consume(&c->in, n);
		return (ssize_t)n;
	}
	return conn_read(c, out, len, timeout_ms);
}

int
conf_conn_write(struct conf_conn *c, const void *data, size_t len)
{
	const char *p = data;
	uint64_t deadline = now_mono_ms() + UPGRADE_WAIT_MS;

	while (len > 0) {
		size_t n = 0;
		CURLcode cr = c->easy ? curl_easy_send(c->easy, p, len, &n) : CURLE_SEND_ERROR;

		if (cr == CURLE_AGAIN) {
			if (now_mono_ms() > deadline)
				return -ETIMEDOUT;
			(void)conn_wait(c, POLLOUT, 1000);
			continue;
		}
		if (cr != CURLE_OK)
			return -EIO;
		p += n;
		len -= n;
	}
	return 0;
}

void
conf_conn_send(struct conf_conn *c, const void *data, size_t len)
{
	int r = conf_conn_write(c, data, len);

	if (r < 0)
		fail_msg("sending on a raw connection: %s",
		         r == -ETIMEDOUT ? "the server takes nothing" : "the connection broke");
}

const char *
conf_head_value(const char *head, const char *name)
{
	size_t nlen = strlen(name);
	const char *line = head ? strstr(head, "\r\n") : NULL;

	/* the status line is skipped */
	while (line && line[2] && !(line[2] == '\r' && line[3] == '\n')) {
		const char *start = line + 2, *v, *end = strstr(start, "\r\n");

		if (!end)
			break;
		if ((size_t)(end - start) > nlen && start[nlen] == ':' &&
		    strncasecmp(start, name, nlen) == 0) {
			v = start + nlen + 1;
			while (v < end && (*v == ' ' || *v == '\t'))
				v++;
			while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
				end--;
			return conf_keep(strndup(v, (size_t)(end - v)));
		}
		line = end;
	}
	return NULL;
}

/* What goes into the Host header: the endpoint's authority, or localhost on a unix socket. */
static char *
host_header(void)
{
	const char *h = strstr(G.base, "://");

	return conf_fmt("Host: %s", G.unix_path || !h ? "localhost" : h + 3);
}

/* Reads the rest of a non-101 answer's body: Content-Length, or to the end. */
static void
read_error_body(struct conf_conn *c, const char *head, struct buf *body)
{
	const char *cl = conf_head_value(head, "content-length");
	uint64_t want = 0, deadline = now_mono_ms() + UPGRADE_WAIT_MS;
	bool sized = cl && parse_u64(cl, &want) == 0;
	char chunk[4096];

	(void)buf_append(body, buf_head(&c->in), buf_avail(&c->in));
	buf_consume(&c->in, buf_avail(&c->in));
	while ((!sized || body->len < want) && now_mono_ms() < deadline) {
		ssize_t n = conn_read(c, chunk, sizeof(chunk), 1000);
		if (n == -ETIMEDOUT)
			continue;
		if (n <= 0 || buf_append(body, chunk, (size_t)n) < 0)
			break;
	}
}

struct conf_conn *
conf_upgrade(const char *path, enum conf_auth auth, const char *const *headers,
             struct conf_upgrade *ret)
{
	struct conf_conn *c = conf_defer(conn_free, calloc(1, sizeof(*c)));
	_cleanup_buf_ struct buf req = BUF_INIT(UPGRADE_HEAD_MAX);
	_cleanup_buf_ struct buf body = BUF_INIT(RESPONSE_MAX);
	struct curl_slist *auth_line = NULL;
	uint64_t deadline = now_mono_ms() + UPGRADE_WAIT_MS;
	char errbuf[CURL_ERROR_SIZE] = "", chunk[4096];
	const char *end = NULL, *sp;
	struct conf_resp resp = { 0 };
	curl_socket_t fd = CURL_SOCKET_BAD;
	uint64_t code;
	size_t head_len;
	CURLcode cr;
	int r;

	*ret = (struct conf_upgrade){ .head = "", .body = "" };
	buf_init(&c->in, RESPONSE_MAX);
	c->easy = curl_easy_init();
	if (!c->easy || setup_easy(c->easy, path) < 0)
		fail_msg("out of memory");
	curl_easy_setopt(c->easy, CURLOPT_CONNECT_ONLY, 1L);
	/* the handshake is HTTP/1.1's: never let ALPN pick h2 */
	curl_easy_setopt(c->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, errbuf);
	cr = curl_easy_perform(c->easy);
	if (cr != CURLE_OK)
		fail_msg("GET %s (upgrade): cannot connect: %s", path,
		         *errbuf ? errbuf : curl_easy_strerror(cr));
	curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, NULL);
	if (curl_easy_getinfo(c->easy, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK ||
	    fd == CURL_SOCKET_BAD)
		fail_msg("GET %s (upgrade): no socket", path);
	c->fd = fd;

	r = add_auth(&auth_line, auth, NULL);
	r = r < 0 ? r : buf_printf(&req, "GET %s HTTP/1.1\r\n%s\r\n", path, host_header());
	if (r >= 0 && auth_line)
		r = buf_printf(&req, "%s\r\n", auth_line->data);
	curl_slist_free_all(auth_line);
	for (size_t i = 0; r >= 0 && headers && headers[i]; i++)
		r = buf_printf(&req, "%s\r\n", headers[i]);
	if (r < 0 || buf_puts(&req, "\r\n") < 0)
		fail_msg("out of memory");
	conf_conn_send(c, req.data, req.len);

	/* the answer's head, up to its blank line */
	while (!end) {
		ssize_t n = conn_read(c, chunk, sizeof(chunk), 1000);
		if (n == -ETIMEDOUT && now_mono_ms() < deadline)
			continue;
		if (n <= 0)
			fail_msg("GET %s (upgrade): %s before the answer's head ended", path,
			         n == 0            ? "the server closed"
			         : n == -ETIMEDOUT ? "nothing came"
			                           : "the connection failed");
		if (buf_append(&c->in, chunk, (size_t)n) < 0 || c->in.len > UPGRADE_HEAD_MAX)
			fail_msg("GET %s (upgrade): the answer's head is too long", path);
		end = memmem(c->in.data, c->in.len, "\r\n\r\n", 4);
	}
	head_len = (size_t)(end - c->in.data) + 4;
	ret->head = conf_keep(strndup(c->in.data, head_len));
	buf_consume(&c->in, head_len);
	sp = strchr(ret->head, ' ');
	if (!str_has_prefix(ret->head, "HTTP/1.1 ") || !sp || parse_u64_n(sp + 1, 3, &code) < 0)
		fail_msg("GET %s (upgrade): not an HTTP/1.1 status line: '%.100s'", path,
		         ret->head);
	ret->status = (long)code;
	if (code == 101)
		return c;

	read_error_body(c, ret->head, &body);
	conf_conn_close(c);
	ret->body = conf_keep(body.data ? buf_steal(&body) : strdup(""));
	ret->json = json_loads(ret->body, 0, NULL);
	if (ret->json)
		conf_keep_json(ret->json);
	resp = (struct conf_resp){ .status = ret->status,
		                   .body = ret->body,
		                   .body_len = strlen(ret->body),
		                   .json = ret->json };
	resp.content_type = conf_head_value(ret->head, "content-type");
	if (!resp.content_type)
		resp.content_type = "";
	if (ret->status >= 400)
		check_error_shape(&(struct conf_req){ .path = path }, &resp);
	return NULL;
}
