/* cases-auth.c: conformance cases for the request guard and authentication:
 * credentials, Host and Origin, content types, body caps,
 * unknown fields and the error body every refusal carries. */
#include <stdlib.h>
#include "cases.h"
#include "conf.h"
#include "util.h"

#define JSON_MAX (1u << 20)

static void
expect_error(const struct conf_req *req, long want_status, const char *want_code)
{
	const struct conf_resp *r = conf_send(req);

	if (r->status != want_status ||
	    !streq(conf_str(json_object_get(r->json, "error"), "code"), want_code))
		fail_msg("%s %s: expected %ld %s, got %ld: %.300s",
		         req->method ? req->method : "GET", req->path, want_status, want_code,
		         r->status, r->body);
}

/* A create body that would succeed, labelled with marker so a wrongly created sandbox can be
 * found (and is deleted when the case ends). */
static const char *
valid_create_body(const char *name, const char *marker)
{
	return conf_fmt("{\"name\":\"%s\",\"wait\":false,\"labels\":{\"conformance\":\"1\","
	                "\"conformance-run\":\"%s\",\"marker\":\"%s\"}}",
	                name, conf_run_id(), marker);
}

/* Nothing named name, or labelled marker, exists. */
static void
assert_not_created(const char *name, const char *marker)
{
	json_t *j;
	long status = conf_request("GET", conf_fmt("/v1/sandboxes/%s", name), NULL, &j);

	if (status != 404)
		fail_msg("a refused create made sandbox '%s' anyway (GET answered %ld)", name,
		         status);
	assert_int_equal(json_array_size(conf_list_ids(conf_fmt("?label=marker=%s", marker))), 0);
}

/* Health is the one request without a credential. */
void
case_health_needs_no_credential(void **state)
{
	const struct conf_resp *r =
	        conf_send(&(struct conf_req){ .path = "/v1/health", .auth = CONF_AUTH_NONE });

	assert_int_equal(r->status, 200);
	assert_string_equal(conf_str(r->json, "status"), "ok");
}

/* No credential is 401 unauthorized, on every other path (unknown ones too, so the
 * answer says nothing about what exists). On a unix socket the peer's uid is a credential. */
void
case_missing_credential_is_unauthorized(void **state)
{
	static const char *const paths[] = {
		"/v1/capabilities",  "/v1/whoami",       "/v1/sandboxes",
		"/v1/events/stream", "/v1/no-such-path",
	};
	const char *name = conf_name("noauth"), *marker = conf_name("m");

	if (conf_is_unix()) {
		print_message("skip: on a unix socket the peer's uid authenticates\n");
		skip();
	}
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
		expect_error(&(struct conf_req){ .path = paths[i], .auth = CONF_AUTH_NONE }, 401,
		             "unauthorized");
	expect_error(&(struct conf_req){ .path = conf_fmt("/v1/sandboxes/%s", conf_random_id()),
	                                 .auth = CONF_AUTH_NONE },
	             401, "unauthorized");
	expect_error(&(struct conf_req){ .method = "POST",
	                                 .path = "/v1/sandboxes",
	                                 .body = valid_create_body(name, marker),
	                                 .auth = CONF_AUTH_NONE },
	             401, "unauthorized");
	assert_not_created(name, marker);
}

/* A wrong credential is 401 on every transport (a unix socket never lets the peer's
 * uid stand in for a bad token), including near misses of the real token. */
void
case_wrong_credential_is_unauthorized(void **state)
{
	const char *name = conf_name("badauth"), *marker = conf_name("m");
	const char *t = conf_token();
	const char *wrong[4];
	size_t n = 0;

	expect_error(&(struct conf_req){ .path = "/v1/sandboxes", .auth = CONF_AUTH_WRONG }, 401,
	             "unauthorized");
	expect_error(&(struct conf_req){ .method = "POST",
	                                 .path = "/v1/sandboxes",
	                                 .body = valid_create_body(name, marker),
	                                 .auth = CONF_AUTH_WRONG },
	             401, "unauthorized");
	if (conf_has_token()) {
		wrong[n++] = conf_fmt("Bearer %.*s", (int)strlen(t) - 1, t); /* a prefix */
		wrong[n++] = conf_fmt("Bearer %sx", t);                      /* longer */
		wrong[n++] = conf_fmt("Basic %s", t);                        /* another scheme */
		wrong[n++] = "Bearer ";
	}
	for (size_t i = 0; i < n; i++)
		expect_error(&(struct conf_req){ .path = "/v1/whoami",
		                                 .auth = CONF_AUTH_RAW,
		                                 .authorization = wrong[i] },
		             401, "unauthorized");
	assert_not_created(name, marker);
}

/* A token in the query string counts only on an Upgrade handshake. */
void
case_query_token_is_not_a_credential(void **state)
{
	if (conf_is_unix() || !conf_has_token()) {
		print_message("skip: needs a TCP endpoint with a token\n");
		skip();
	}
	expect_error(&(struct conf_req){ .path = conf_fmt("/v1/sandboxes?token=%s",
	                                                  conf_escape(conf_token())),
	                                 .auth = CONF_AUTH_NONE },
	             401, "unauthorized");
	expect_error(&(struct conf_req){ .path = conf_fmt("/v1/whoami?token=%s",
	                                                  conf_escape(conf_token())),
	                                 .auth = CONF_AUTH_NONE },
	             401, "unauthorized");
}

/* The DNS-rebinding guard: a Host that is not loopback or allowed is 403
 * forbidden_origin, even with a valid credential. */
void
case_foreign_host_is_forbidden(void **state)
{
	static const char *const hosts[] = {
		"Host: evil.example",
		"Host: evil.example:80",
		"Host: localhost.evil.example",
		"Host: 127.0.0.1.evil.example",
	};

	for (size_t i = 0; i < ARRAY_SIZE(hosts); i++) {
		expect_error(&(struct conf_req){ .path = "/v1/sandboxes", .headers = { hosts[i] } },
		             403, "forbidden_origin");
		expect_error(
		        &(struct conf_req){ .path = "/v1/capabilities", .headers = { hosts[i] } },
		        403, "forbidden_origin");
	}
}

/* A cross-origin request is refused outright, including the "simple" POST (text/plain)
 * that a browser sends without a preflight; and nothing is created. */
void
case_foreign_origin_post_is_refused(void **state)
{
	static const char *const origins[] = {
		"Origin: https://evil.example",
		"Origin: null",
	};
	const char *name = conf_name("origin"), *marker = conf_name("m");
	const char *body = valid_create_body(name, marker);

	assert_int_equal(json_array_size(conf_list_ids(conf_fmt("?label=marker=%s", marker))), 0);
	for (size_t i = 0; i < ARRAY_SIZE(origins); i++) {
		expect_error(&(struct conf_req){ .method = "POST",
		                                 .path = "/v1/sandboxes",
		                                 .body = body,
		                                 .content_type = "text/plain",
		                                 .headers = { origins[i] } },
		             403, "forbidden_origin");
		expect_error(&(struct conf_req){ .method = "POST",
		                                 .path = "/v1/sandboxes",
		                                 .body = body,
		                                 .headers = { origins[i] } },
		             403, "forbidden_origin");
		expect_error(
		        &(struct conf_req){ .path = "/v1/sandboxes", .headers = { origins[i] } },
		        403, "forbidden_origin");
	}
	assert_not_created(name, marker);
}

/* A JSON body must say Content-Type: application/json. */
void
case_json_body_needs_json_content_type(void **state)
{
	static const char *const types[] = {
		"text/plain", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "", /* none at all */
	};
	const char *name = conf_name("ctype"), *marker = conf_name("m");
	const char *body = valid_create_body(name, marker);

	for (size_t i = 0; i < ARRAY_SIZE(types); i++)
		expect_error(&(struct conf_req){ .method = "POST",
		                                 .path = "/v1/sandboxes",
		                                 .body = body,
		                                 .content_type = types[i] },
		             400, "invalid_request");
	assert_not_created(name, marker);
}

/* A valid create body padded with whitespace (still valid JSON) to exactly size bytes. */
static char *
padded_body(const char *name, const char *marker, size_t size)
{
	const char *head = valid_create_body(name, marker);
	char *b = conf_keep(malloc(size + 1));

	assert_true(strlen(head) < size);
	memset(b, ' ', size);
	memcpy(b, head, strlen(head));
	b[size] = '\0';
	return b;
}

/* JSON bodies are capped at 1 MiB. The oversized body is valid JSON (padding is
 * whitespace), so only the cap can refuse it; a body of exactly 1 MiB is taken. */
void
case_oversized_json_body_is_rejected(void **state)
{
	const char *name = conf_name("big"), *marker = conf_name("m");
	const struct conf_resp *r;

	r = conf_send(&(struct conf_req){ .method = "POST",
	                                  .path = "/v1/sandboxes",
	                                  .body = padded_body(name, marker, JSON_MAX + 1),
	                                  .body_len = JSON_MAX + 1 });
	if (r->status != 413 && r->status != 400)
		fail_msg("a JSON body of 1 MiB + 1 byte: expected 413 (or 400), got %ld: %.300s",
		         r->status, r->body);
	assert_string_equal(conf_str(json_object_get(r->json, "error"), "code"), "invalid_request");
	assert_not_created(name, marker);

	/* the same without a Content-Length: the cap holds for a chunked body too */
	name = conf_name("big");
	r = conf_send(&(struct conf_req){ .method = "POST",
	                                  .path = "/v1/sandboxes",
	                                  .body = padded_body(name, marker, JSON_MAX + 1),
	                                  .body_len = JSON_MAX + 1,
	                                  .headers = { "Transfer-Encoding: chunked" } });
	if (r->status != 413 && r->status != 400 && r->status != 411)
		fail_msg("a chunked JSON body of 1 MiB + 1 byte: expected 413 (or 400, or 411 from "
		         "a "
		         "server that takes no chunked bodies), got %ld: %.300s",
		         r->status, r->body);
	assert_not_created(name, marker);

	name = conf_name("big");
	r = conf_send(&(struct conf_req){ .method = "POST",
	                                  .path = "/v1/sandboxes",
	                                  .body = padded_body(name, marker, JSON_MAX),
	                                  .body_len = JSON_MAX });
	if (r->status != 201 &&
	    !(r->status == 501 &&
	      streq(conf_str(json_object_get(r->json, "error"), "code"), "unsupported")))
		fail_msg("a JSON body of exactly 1 MiB: expected 201, got %ld: %.300s", r->status,
		         r->body);
}

/* An unknown field is 400, and the message names it. */
void
case_unknown_field_is_rejected(void **state)
{
	json_t *j = conf_create_refused("{\"bogus\":1}", 400, "invalid_request");

	if (!strstr(conf_error_message(j), "bogus"))
		fail_msg("the message does not name the unknown field: '%s'",
		         conf_error_message(j));
	j = conf_create_refused("{\"bind\":\"0.0.0.0\"}", 400, "invalid_request");
	if (!strstr(conf_error_message(j), "bind"))
		fail_msg("the message does not name the unknown field: '%s'",
		         conf_error_message(j));
}

/* Malformed JSON, a body that is not an object, and invalid UTF-8 are 400. */
void
case_malformed_json_is_rejected(void **state)
{
	static const char *const bodies[] = {
		"{\"name\":",          "not json", "[1,2]", "\"text\"", "{\"name\":\"a\",}",
		"{\"name\":\"\xff\"}", "{} {}",
	};

	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++)
		expect_error(&(struct conf_req){ .method = "POST",
		                                 .path = "/v1/sandboxes",
		                                 .body = bodies[i] },
		             400, "invalid_request");
}

/* Errors from every layer (routing, lookup, validation) carry the contract's body;
 * conf_send checks the shape of each one. */
void
case_error_bodies_have_the_contract_shape(void **state)
{
	static const struct {
		const char *method, *path;
	} probes[] = {
		{ "PUT", "/v1/health" },
		{ "DELETE", "/v1/capabilities" },
		{ "GET", "/v1/sandboxes?label=no-equals-sign" },
		{ "GET", "/v1/sandboxes/%zz" },
		{ "POST", "/v1/sandboxes/sbx_0000000000000000/stop" },
		{ "PATCH", "/v1/sandboxes/sbx_0000000000000000" },
	};
	const struct conf_resp *r;

	expect_error(&(struct conf_req){ .path = "/v1/no-such-path" }, 404, "not_found");
	expect_error(&(struct conf_req){ .path = conf_fmt("/v1/sandboxes/%s", conf_random_id()) },
	             404, "not_found");
	for (size_t i = 0; i < ARRAY_SIZE(probes); i++) {
		r = conf_send(
		        &(struct conf_req){ .method = probes[i].method, .path = probes[i].path });
		if (r->status < 400)
			fail_msg("%s %s: expected an error, got %ld", probes[i].method,
			         probes[i].path, r->status);
	}
}
