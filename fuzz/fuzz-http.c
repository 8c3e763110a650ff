/* fuzz-http.c: lib/http.c's request parser (its heads read by lib/http-head.c, the reader the
 * egress proxy shares) on the bytes of one connection, fed whole, byte by byte and in
 * data-derived pieces (every split must yield the same requests), with pipelined requests
 * parsed in turn; completed requests go through the header and query/path helpers and the
 * Host/Origin splitting of daemon/api/auth.c. Each split is also read the way the server
 * streams a body on (stopped at each head, the body taken out as it comes): the same
 * requests, bodies and refusals. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include "fuzz.h"
#include "hostport.h"
#include "http.h"
#include "util.h"

#define BODY_LIMIT (1u << 20) /* the API's JSON cap */
#define PUT_BODY_LIMIT 64     /* small, so short inputs reach the 413 paths too */
#define BYTEWISE_MAX 2048     /* longer inputs are fed in fixed pieces instead */
#define PIECE 61

/* What one run saw, reduced to a hash (FNV-1a) so runs can be compared. */
struct outcome {
	uint64_t hash;
	unsigned requests;
	bool upgraded; /* stopped at an upgrade: the bytes after it are not HTTP */
	bool error;
};

static void
mix(struct outcome *o, const void *p, size_t n)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < sizeof(n); i++) {
		o->hash ^= (n >> (8 * i)) & 0xff;
		o->hash *= 1099511628211ull;
	}
	for (size_t i = 0; i < n; i++) {
		o->hash ^= s[i];
		o->hash *= 1099511628211ull;
	}
}

static void
mix_str(struct outcome *o, const char *s)
{
	mix(o, s, strlen(s));
}

static void
mix_u64(struct outcome *o, uint64_t v)
{
	mix(o, &v, sizeof(v));
}

static uint64_t
body_limit(const struct http_request *req, void *data _unused_)
{
	return req->method == HTTP_PUT ? PUT_BODY_LIMIT : BODY_LIMIT;
}

static bool
is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The query iteration the API does for ?label= and ?path=, with roomy and tiny buffers. */
static void
exercise_query(const char *query, size_t key_size, size_t value_size)
{
	char key[256], value[256];
	size_t pos = 0, rounds = 0, qlen = strlen(query);
	int r;

	while ((r = http_query_next(query, &pos, key, key_size, value, value_size)) > 0) {
		FUZZ_CHECK(r == 1);
		FUZZ_CHECK(pos <= qlen);
		FUZZ_CHECK(memchr(key, '\0', key_size) && memchr(value, '\0', value_size));
		FUZZ_CHECK(++rounds <= qlen);
	}
	FUZZ_CHECK(r == 0 || r == -EINVAL);
}

static void
exercise_path(const char *path)
{
	const char *s = path;

	while (*s) {
		const char *slash = strchr(s, '/');
		size_t n = slash ? (size_t)(slash - s) : strlen(s);
		char out[128];

		if (http_segment_decode(s, n, out, sizeof(out)) == 0) {
			FUZZ_CHECK(strlen(out) <= n);
			FUZZ_CHECK(!strchr(out, '/'));
		}
		s += n + (slash ? 1 : 0);
	}
}

/* What the Host/Origin guard compares: a lowercase host name or address, or a refusal. */
static void
exercise_host(const char *hostport)
{
	char host[256];

	if (!hostport || hostport_host(hostport, host, sizeof(host)) < 0)
		return;
	FUZZ_CHECK(host[0] && strlen(host) < sizeof(host));
	for (const char *c = host; *c; c++)
		FUZZ_CHECK((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
		           strchr(".-:_", *c));
}

static void
check_request(const struct http_request *req, struct outcome *o)
{
	const char *q, *te, *origin;

	FUZZ_CHECK(req->target && req->path && req->query);
	FUZZ_CHECK(req->path[0] == '/');
	q = strchr(req->target, '?');
	if (q) {
		FUZZ_CHECK(strlen(req->path) == (size_t)(q - req->target));
		FUZZ_CHECK(strneq(req->path, req->target, strlen(req->path)));
		FUZZ_CHECK(streq(req->query, q + 1));
	} else {
		FUZZ_CHECK(streq(req->path, req->target) && req->query[0] == '\0');
	}
	mix_u64(o, req->method);
	mix_u64(o, (uint64_t)req->http_major << 16 | req->http_minor);
	mix_u64(o, (uint64_t)req->keep_alive << 3 | req->upgrade << 2 | req->chunked << 1 |
	                   req->has_length);
	mix_u64(o, req->content_length);
	mix_str(o, req->target);

	FUZZ_CHECK(req->nheaders <= HTTP_MAX_HEADERS);
	mix_u64(o, req->nheaders);
	for (unsigned i = 0; i < req->nheaders; i++) {
		const struct http_header *h = &req->headers[i];
		const char *name, *value;

		FUZZ_CHECK(h->name_off < req->arena.len && h->value_off < req->arena.len);
		name = req->arena.data + h->name_off;
		value = req->arena.data + h->value_off;
		FUZZ_CHECK(strlen(name) == h->name_len && strlen(value) == h->value_len);
		FUZZ_CHECK(h->name_len > 0);
		for (size_t k = 0; k < h->name_len; k++)
			FUZZ_CHECK(is_tchar((unsigned char)name[k]));
		for (size_t k = 0; k < h->value_len; k++) {
			unsigned char c = (unsigned char)value[k];
			FUZZ_CHECK((c >= 0x20 && c != 0x7f) || c == '\t');
		}
		FUZZ_CHECK(http_req_header(req, name) != NULL);
		FUZZ_CHECK(http_req_header_count(req, name) >= 1);
		mix_str(o, name);
		mix_str(o, value);
	}
	FUZZ_CHECK(http_req_header_count(req, "host") <= 1);
	if (req->http_major == 1 && req->http_minor >= 1)
		FUZZ_CHECK(http_req_header(req, "host") != NULL);
	te = http_req_header(req, "transfer-encoding");
	FUZZ_CHECK(!te || strcasecmp(te, "chunked") == 0);
	FUZZ_CHECK(!(req->chunked && req->has_length));
	(void)http_req_header(req, "content-type");
	(void)http_req_header(req, "authorization");

	FUZZ_CHECK(req->body.len <= body_limit(req, NULL));
	if (!req->upgrade) {
		/* the body of an upgrade request is whatever the new protocol sends */
		if (req->has_length)
			FUZZ_CHECK(req->body.len == req->content_length);
		else if (!req->chunked)
			FUZZ_CHECK(req->body.len == 0);
		mix(o, req->body.data ? req->body.data : "", req->body.len);
	}

	exercise_host(http_req_header(req, "host"));
	origin = http_req_header(req, "origin");
	if (origin && str_has_prefix(origin, "http://"))
		exercise_host(origin + strlen("http://"));
	exercise_query(req->query, 256, 256);
	exercise_query(req->query, 4, 2);
	exercise_path(req->path);
}

/* Feeds data as if it arrived in pieces ending at cuts[] (ascending, the last one == size),
 * the way the server does: unconsumed bytes are offered again with the next piece. */
static void
run(const uint8_t *data, size_t size, const size_t *cuts, size_t ncuts, bool streamed,
    struct outcome *o)
{
	struct http_req_parser hp;
	struct buf taken = BUF_INIT(SIZE_MAX / 2);
	size_t start = 0;

	*o = (struct outcome){ .hash = 14695981039346656037ull };
	http_req_parser_init(&hp, body_limit, NULL);
	hp.stop_at_body = streamed;
	for (size_t c = 0; c < ncuts; c++) {
		size_t end = cuts[c];

		while (start < end) {
			size_t used = 0;
			int r = http_req_feed(&hp, (const char *)data + start, end - start, &used);

			if (streamed && r >= 0) {
				/* what the server hands on, leaving the parser's body empty */
				FUZZ_CHECK(buf_append(&taken, hp.req.body.data, hp.req.body.len) ==
				           0);
				buf_reset(&hp.req.body);
			}
			if (r == HTTP_FEED_HEAD) {
				FUZZ_CHECK(streamed && hp.phase == HTTP_PHASE_BODY &&
				           taken.len == 0);
				FUZZ_CHECK(used > 0 && used <= end - start);
				start += used;
				continue;
			}

			if (r < 0) {
				FUZZ_CHECK(r == -EBADMSG);
				FUZZ_CHECK(hp.err_status == 400 || hp.err_status == 413 ||
				           hp.err_status == 431);
				FUZZ_CHECK(hp.err_message && hp.err_message[0]);
				/* a refused request stays refused */
				FUZZ_CHECK(http_req_feed(&hp, "x", 1, &used) == -EBADMSG);
				o->error = true;
				goto out;
			}
			FUZZ_CHECK(r == 0 || r == 1);
			FUZZ_CHECK(used <= end - start);
			if (r == 0) {
				/* "0: more bytes are needed (all were consumed)" */
				FUZZ_CHECK(used == end - start);
				start = end;
				break;
			}
			start += used;
			if (streamed) {
				FUZZ_CHECK(buf_append(&hp.req.body, taken.data, taken.len) == 0);
				buf_reset(&taken);
			}
			check_request(&hp.req, o);
			FUZZ_CHECK(++o->requests <= size);
			if (hp.req.upgrade) {
				o->upgraded = true;
				goto out;
			}
			http_req_parser_reset(&hp);
		}
	}
	/* a request still in progress at the end */
	mix_u64(o, http_req_started(&hp));
out:
	mix_u64(o, o->error);
	http_req_parser_done(&hp);
	buf_free(&taken);
}

static void
compare(const struct outcome *a, const struct outcome *b)
{
	/* An upgrade stops the parse after its head; when everything arrives at once the parser
	 * may have gone on to judge the bytes after it. */
	if (a->upgraded || b->upgraded)
		return;
	FUZZ_CHECK(a->requests == b->requests);
	FUZZ_CHECK(a->error == b->error);
	FUZZ_CHECK(a->hash == b->hash);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct outcome whole, other;
	size_t cuts[3], *many;
	size_t nmany = 0;
	uint64_t h = 0;

	if (size == 0)
		return 0;
	cuts[0] = size;
	run(data, size, cuts, 1, false, &whole);
	run(data, size, cuts, 1, true, &other);
	compare(&whole, &other);

	/* two or three pieces, cut at offsets the data chooses */
	for (size_t i = 0; i < MIN(size, 16); i++)
		h = h * 31 + data[i];
	cuts[0] = (size_t)(h % size);
	cuts[1] = cuts[0] + (size_t)((h >> 20) % (size - cuts[0]));
	cuts[2] = size;
	run(data, size, cuts, 3, false, &other);
	compare(&whole, &other);
	run(data, size, cuts, 3, true, &other);
	compare(&whole, &other);

	many = malloc(sizeof(*many) * size);
	if (!many)
		return 0;
	if (size <= BYTEWISE_MAX)
		for (size_t i = 1; i <= size; i++)
			many[nmany++] = i;
	else
		for (size_t i = PIECE; i < size + PIECE; i += PIECE)
			many[nmany++] = MIN(i, size);
	run(data, size, many, nmany, false, &other);
	compare(&whole, &other);
	run(data, size, many, nmany, true, &other);
	compare(&whole, &other);
	free(many);
	return 0;
}
