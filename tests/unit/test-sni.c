/* test-sni.c: egress/sni.c, the server name in a guest's TLS ClientHello. Real hellos that
 * OpenSSL sent (tests/data/sni/, where each file says how it was captured) and hellos built
 * here field by field: split over records at every byte, fed a byte at a time, names refused
 * (IP literals, bad bytes, two of them), truncated or lying lengths at every field, and the
 * 16 KiB bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sni.h"
#include "util.h"

struct bytes {
	uint8_t b[80 * 1024];
	size_t n;
};

static void
put(struct bytes *o, const void *p, size_t n)
{
	assert_true(o->n + n <= sizeof(o->b));
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void
put8(struct bytes *o, unsigned v)
{
	uint8_t b = (uint8_t)v;

	put(o, &b, 1);
}

static void
put16(struct bytes *o, unsigned v)
{
	put8(o, v >> 8);
	put8(o, v);
}

static struct bytes *
bytes_new(void)
{
	struct bytes *b = calloc(1, sizeof(*b));

	assert_non_null(b);
	return b;
}

/* ---- building ClientHellos ---- */

/* One extension: type, u16 length, data. */
static void
ext(struct bytes *exts, unsigned type, const void *data, size_t n)
{
	put16(exts, type);
	put16(exts, (unsigned)n);
	put(exts, data, n);
}

/* A server_name extension with one host_name entry per name (n[i] bytes, NULs allowed). */
static void
ext_sni(struct bytes *exts, const char *const *names, const size_t *n, size_t count)
{
	struct bytes *list = bytes_new(), *body = bytes_new();

	for (size_t i = 0; i < count; i++) {
		put8(list, 0); /* host_name */
		put16(list, (unsigned)n[i]);
		put(list, names[i], n[i]);
	}
	put16(body, (unsigned)list->n);
	put(body, list->b, list->n);
	ext(exts, 0, body->b, body->n);
	free(list);
	free(body);
}

static void
ext_sni1(struct bytes *exts, const char *name)
{
	size_t n = strlen(name);

	ext_sni(exts, &name, &n, 1);
}

/* A padding extension (RFC 7685) of n zero bytes, to push what follows further in. */
static void
ext_padding(struct bytes *exts, size_t n)
{
	uint8_t *zero = calloc(1, n + 1);

	ext(exts, 21, zero, n);
	free(zero);
}

/* A ClientHello handshake message (type 1, u24 length): TLS 1.2 legacy_version, a random,
 * a 32-byte session id, two suites, null compression, and exts (NULL: no extensions block,
 * as before TLS 1.2). */
static void
client_hello(struct bytes *hs, const struct bytes *exts)
{
	struct bytes *body = bytes_new();
	uint8_t random[32];

	for (size_t i = 0; i < sizeof(random); i++)
		random[i] = (uint8_t)(i * 7 + 1);
	put16(body, 0x0303);
	put(body, random, sizeof(random));
	put8(body, 32);
	put(body, random, 32);
	put16(body, 4);
	put16(body, 0x1301);
	put16(body, 0xc02f);
	put8(body, 1);
	put8(body, 0);
	if (exts) {
		put16(body, (unsigned)exts->n);
		put(body, exts->b, exts->n);
	}
	put8(hs, 1);
	put8(hs, (unsigned)(body->n >> 16));
	put16(hs, (unsigned)(body->n & 0xffff));
	put(hs, body->b, body->n);
	free(body);
}

/* The handshake bytes as records of type 22, version 3.1: fragments of frag[i] bytes in turn
 * (the last one takes the rest). */
static void
records(struct bytes *out, const uint8_t *hs, size_t n, const size_t *frag, size_t nfrag)
{
	size_t off = 0;

	for (size_t i = 0; off < n; i++) {
		size_t f = i < nfrag && frag[i] < n - off ? frag[i] : n - off;

		put8(out, 22);
		put16(out, 0x0301);
		put16(out, (unsigned)f);
		put(out, hs + off, f);
		off += f;
	}
}

/* A whole connection's first bytes: a ClientHello with exts in one record. */
static struct bytes *
hello_with(const struct bytes *exts)
{
	struct bytes *hs = bytes_new(), *out = bytes_new();

	client_hello(hs, exts);
	records(out, hs->b, hs->n, NULL, 0);
	free(hs);
	return out;
}

static struct bytes *
hello_named(const char *name)
{
	struct bytes *exts = bytes_new(), *out;

	ext_padding(exts, 3);
	ext_sni1(exts, name);
	ext(exts, 43, "\x02\x03\x04", 3); /* supported_versions */
	out = hello_with(exts);
	free(exts);
	return out;
}

/* The handshake message inside a one-record hello (after the 5-byte record header). */
static struct bytes *
handshake_of(const struct bytes *one_record)
{
	struct bytes *hs = bytes_new();

	assert_true(one_record->n >= 5);
	put(hs, one_record->b + 5, one_record->n - 5);
	return hs;
}

/* ---- checking ---- */

static enum sni_result
parse(const uint8_t *data, size_t len, char name[static SNI_NAME_MAX + 1], const char **why)
{
	enum sni_result r;

	snprintf(name, SNI_NAME_MAX + 1, "(untouched)");
	*why = "(untouched)";
	r = sni_parse(data, len, name, why);
	switch (r) {
	case SNI_FOUND:
		assert_null(*why);
		break;
	case SNI_NEED_MORE:
		assert_null(*why);
		assert_string_equal(name, "(untouched)");
		assert_true(len < SNI_READ_MAX);
		break;
	case SNI_NO_NAME:
	case SNI_INVALID:
		assert_non_null(*why);
		assert_string_not_equal(*why, "(untouched)");
		assert_string_equal(name, "(untouched)");
		break;
	default:
		fail_msg("sni_parse returned %d", r);
	}
	return r;
}

static const char *const result_names[] = {
	[SNI_FOUND] = "FOUND",
	[SNI_NEED_MORE] = "NEED_MORE",
	[SNI_NO_NAME] = "NO_NAME",
	[SNI_INVALID] = "INVALID",
};

/* want_text: the name for SNI_FOUND, a piece of *why for SNI_INVALID and SNI_NO_NAME. */
static void
expect(const uint8_t *data, size_t len, enum sni_result want, const char *want_text,
       const char *what)
{
	char name[SNI_NAME_MAX + 1];
	const char *why;
	enum sni_result r = parse(data, len, name, &why);

	if (r != want)
		fail_msg("%s (%zu bytes): got %s (%s), want %s", what, len, result_names[r],
		         r == SNI_FOUND ? name
		         : why          ? why
		                        : "-",
		         result_names[want]);
	if (want_text && want == SNI_FOUND && !streq(name, want_text))
		fail_msg("%s: found '%s', want '%s'", what, name, want_text);
	if (want_text && (want == SNI_INVALID || want == SNI_NO_NAME) && !strstr(why, want_text))
		fail_msg("%s: why is '%s', want it to say '%s'", what, why, want_text);
}

/* Every proper prefix needs more; the whole gives want; bytes after it change nothing. */
static void
expect_incremental(const struct bytes *in, enum sni_result want, const char *want_text,
                   const char *what)
{
	struct bytes *more = bytes_new();

	for (size_t i = 0; i < in->n; i++)
		expect(in->b, i, SNI_NEED_MORE, NULL, what);
	expect(in->b, in->n, want, want_text, what);
	put(more, in->b, in->n);
	put(more, "\x17\x03\x03\x00\x05hello", 10); /* application data the proxy forwards */
	put(more, "\xff\x00garbage", 9);
	for (size_t i = in->n; i <= more->n; i++)
		expect(more->b, i, want, want_text, what);
	free(more);
}

static struct bytes *
load_hex(const char *file)
{
	_cleanup_free_ char *path = strdup_printf("%s/sni/%s", TEST_DATA_DIR, file);
	_cleanup_free_ char *text = NULL;
	struct bytes *out = bytes_new();
	size_t len, digits = 0;
	unsigned v = 0;
	bool comment = false;

	assert_non_null(path);
	if (read_file_max(path, 1 << 20, &text, &len) < 0)
		fail_msg("cannot read %s", path);
	for (size_t i = 0; i < len; i++) {
		char c = text[i];

		if (c == '#')
			comment = true;
		if (c == '\n')
			comment = false;
		if (comment || c == ' ' || c == '\n')
			continue;
		if (c >= '0' && c <= '9')
			v = v << 4 | (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v << 4 | (unsigned)(c - 'a' + 10);
		else
			fail_msg("%s: '%c' is not hex", path, c);
		if (++digits % 2 == 0) {
			put8(out, v);
			v = 0;
		}
	}
	assert_int_equal(digits % 2, 0);
	return out;
}

/* ---- real hellos ---- */

static void
test_openssl_hellos(void **state)
{
	static const struct {
		const char *file;
		enum sni_result want;
		const char *text;
	} cases[] = {
		{ "openssl-tls13-x.example.hex", SNI_FOUND, "x.example" },
		{ "openssl-tls12-x.example.hex", SNI_FOUND, "x.example" },
		{ "openssl-tls13-noservername.hex", SNI_NO_NAME, "no server_name extension" },
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct bytes *in = load_hex(cases[i].file);

		expect_incremental(in, cases[i].want, cases[i].text, cases[i].file);
		free(in);
	}
}

/* The real TLS 1.3 hello re-framed: in 2 and 3 records, in 1-byte records, and split in two
 * at every byte; every prefix of each needs more, the whole finds the name. */
static void
test_split_records(void **state)
{
	struct bytes *in = load_hex("openssl-tls13-x.example.hex");
	struct bytes *hs = handshake_of(in), *out;
	static const size_t two[] = { 100 }, three[] = { 2, 150 }, header_split[] = { 3, 1 };
	size_t ones[400];
	(void)state;

	out = bytes_new();
	records(out, hs->b, hs->n, two, ARRAY_SIZE(two));
	expect_incremental(out, SNI_FOUND, "x.example", "2 records");
	free(out);

	out = bytes_new();
	records(out, hs->b, hs->n, three, ARRAY_SIZE(three));
	expect_incremental(out, SNI_FOUND, "x.example", "3 records");
	free(out);

	out = bytes_new();
	records(out, hs->b, hs->n, header_split, ARRAY_SIZE(header_split));
	expect_incremental(out, SNI_FOUND, "x.example", "handshake header split 3+1");
	free(out);

	for (size_t i = 0; i < ARRAY_SIZE(ones); i++)
		ones[i] = 1;
	out = bytes_new();
	records(out, hs->b, hs->n, ones, ARRAY_SIZE(ones));
	expect_incremental(out, SNI_FOUND, "x.example", "1-byte records");
	free(out);

	for (size_t cut = 1; cut < hs->n; cut++) {
		out = bytes_new();
		records(out, hs->b, hs->n, &cut, 1);
		expect_incremental(out, SNI_FOUND, "x.example", "2 records cut at every byte");
		free(out);
	}
	free(hs);
	free(in);
}

/* A record of another type between the fragments ends it: the proxy refuses, it does not
 * skip what it cannot see into. */
static void
test_interleaved_records(void **state)
{
	struct bytes *in = load_hex("openssl-tls13-x.example.hex");
	struct bytes *hs = handshake_of(in);
	static const uint8_t others[] = { 20 /* change_cipher_spec */, 21 /* alert */,
		                          23 /* application_data */, 24, 0 };
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(others); i++) {
		struct bytes *out = bytes_new();

		records(out, hs->b, 100, NULL, 0);
		put8(out, others[i]);
		put16(out, 0x0303);
		put16(out, 1);
		put8(out, 1);
		records(out, hs->b + 100, hs->n - 100, NULL, 0);
		for (size_t n = 106; n < out->n; n++)
			expect(out->b, n, SNI_INVALID, "is not a handshake record",
			       "record between");
		free(out);
	}
	free(hs);
	free(in);
}

/* ---- what is not a ClientHello ---- */

static void
test_not_a_client_hello(void **state)
{
	static const struct {
		const char *in;
		size_t n;
		const char *why;
	} cases[] = {
		{ "GET / HTTP/1.1\r\n", 16, "not a TLS handshake record" },
		{ "\x17\x03\x03\x00\x01x", 6, "not a TLS handshake record" },
		{ "\x15\x03\x03\x00\x02\x02\x28", 7, "not a TLS handshake record" },
		{ "\x16\x02", 2, "version is not 3.x" },
		{ "\x16\x04\x01\x00\x04", 5, "version is not 3.x" },
		{ "\x16\x03\x01\x00\x00", 5, "an empty handshake record" },
		{ "\x16\x03\x01\x40\x01", 5, "longer than 16 KiB" },
		{ "\x16\x03\x01\x00\x04\x02", 6, "not a ClientHello" }, /* ServerHello */
		{ "\x16\x03\x01\x00\x04\x00\x00\x00\x00", 9, "not a ClientHello" },
		/* an SSL 2.0 CLIENT-HELLO (2-byte header with the high bit set) */
		{ "\x80\x2e\x01\x03\x01\x00\x15\x00\x00\x00\x10", 11, "SSL 2.0" },
		{ "\x80", 1, "SSL 2.0" },
		{ "\xc0", 1, "SSL 2.0" },
		/* a handshake message longer than 16 KiB is refused from its header */
		{ "\x16\x03\x01\x00\x04\x01\x00\x3f\xfd", 9, "larger than 16 KiB" },
		{ "\x16\x03\x01\x00\x04\x01\xff\xff\xff", 9, "larger than 16 KiB" },
		/* the hello's own version */
		{ "\x16\x03\x01\x00\x06\x01\x00\x00\x02\x02\x00", 11, "version is not 3.x" },
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		expect((const uint8_t *)cases[i].in, cases[i].n, SNI_INVALID, cases[i].why,
		       cases[i].in);
	/* what is there so far is a good start */
	expect((const uint8_t *)"", 0, SNI_NEED_MORE, NULL, "nothing");
	expect((const uint8_t *)"\x16\x03\x01\x00\x04\x01\x00\x3f", 8, SNI_NEED_MORE, NULL,
	       "length not yet whole");
	/* exactly 16 KiB of handshake message is allowed to come */
	expect((const uint8_t *)"\x16\x03\x01\x40\x00\x01\x00\x3f\xfc", 9, SNI_NEED_MORE, NULL,
	       "16 KiB hello");
}

/* ---- names ---- */

#define LABEL63 "abcdefghij0123456789abcdefghij0123456789abcdefghij0123456789abc"
#define NAME253 LABEL63 "." LABEL63 "." LABEL63 "." LABEL63 /* 255: cut below */

static void
test_names(void **state)
{
	static const struct {
		const char *in;
		size_t n; /* 0: strlen(in) */
		enum sni_result want;
		const char *text;
	} cases[] = {
		{ "x.example", 0, SNI_FOUND, "x.example" },
		{ "X.Example.COM", 0, SNI_FOUND, "x.example.com" },
		{ "x.example.", 0, SNI_FOUND, "x.example" },
		{ "localhost", 0, SNI_FOUND, "localhost" },
		{ "_dmarc.a-b.example", 0, SNI_FOUND, "_dmarc.a-b.example" },
		{ "xn--bcher-kva.example", 0, SNI_FOUND, "xn--bcher-kva.example" },
		{ "1.2.3.4.example.com", 0, SNI_FOUND, "1.2.3.4.example.com" },
		{ "0x1f.com", 0, SNI_FOUND, "0x1f.com" },
		{ LABEL63 ".com", 0, SNI_FOUND, LABEL63 ".com" },
		{ NAME253, 253, SNI_FOUND, NULL },
		{ NAME253, 254, SNI_INVALID, "longer than 253" },
		{ "a" LABEL63 ".com", 0, SNI_INVALID, "label longer than 63" },
		{ "x.example..", 0, SNI_INVALID, "empty label" },
		{ ".x.example", 0, SNI_INVALID, "empty label" },
		{ "x..example", 0, SNI_INVALID, "empty label" },
		{ ".", 0, SNI_INVALID, "empty or only a dot" },
		{ "x.example\0.evil", 15, SNI_INVALID, "not a letter" },
		{ "x.example\0", 10, SNI_INVALID, "not a letter" },
		{ "x example", 0, SNI_INVALID, "not a letter" },
		{ "x.example/path", 0, SNI_INVALID, "not a letter" },
		{ "user@x.example", 0, SNI_INVALID, "not a letter" },
		{ "*.example.com", 0, SNI_INVALID, "not a letter" },
		{ "b\xc3\xbc"
		  "cher.example",
		  0, SNI_INVALID, "not a letter" },
		{ "x.example\r\nHost: y", 0, SNI_INVALID, "not a letter" },
		{ "192.168.0.1", 0, SNI_INVALID, "IP address" },
		{ "10.0.0.1.", 0, SNI_INVALID, "IP address" },
		{ "127.1", 0, SNI_INVALID, "IP address" },
		{ "1.2.3.4.5", 0, SNI_INVALID, "IP address" },
		{ "0x7f000001", 0, SNI_INVALID, "IP address" },
		{ "0X7F.1", 0, SNI_INVALID, "IP address" },
		{ "0177.0.0.1", 0, SNI_INVALID, "IP address" },
		{ "example.123", 0, SNI_INVALID, "IP address" },
		{ "::1", 0, SNI_INVALID, "':'" },
		{ "fe80::1", 0, SNI_INVALID, "':'" },
		{ "x.example:443", 0, SNI_INVALID, "':'" }, /* a port, or an IPv6 address */
		{ "[::1]", 0, SNI_INVALID, "not a letter" },
	};
	(void)state;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct bytes *exts = bytes_new(), *in;
		size_t n = cases[i].n ? cases[i].n : strlen(cases[i].in);
		char want[SNI_NAME_MAX + 2];

		ext_sni(exts, &cases[i].in, &n, 1);
		in = hello_with(exts);
		if (cases[i].want == SNI_FOUND && !cases[i].text) {
			memcpy(want, cases[i].in, n);
			want[n] = '\0';
		}
		expect(in->b, in->n, cases[i].want, cases[i].text ? cases[i].text : want,
		       cases[i].in);
		free(exts);
		free(in);
	}
}

/* 253 bytes and a trailing dot is a whole name; 254 and a dot is not. */
static void
test_long_names(void **state)
{
	static const char full[] = NAME253;
	char name[256];
	(void)state;

	for (size_t n = 252; n <= 254; n++) {
		struct bytes *exts = bytes_new(), *in;
		const char *p = name;
		size_t len = n + 1;
		char want[SNI_NAME_MAX + 1];

		memcpy(name, full, n);
		name[n] = '.';
		ext_sni(exts, &p, &len, 1);
		in = hello_with(exts);
		if (n <= SNI_NAME_MAX) {
			memcpy(want, full, n);
			want[n] = '\0';
			expect(in->b, in->n, SNI_FOUND, want, "long name and a dot");
		} else {
			expect(in->b, in->n, SNI_INVALID, "longer than 253", "254 bytes and a dot");
		}
		free(exts), free(in);
	}
}

/* The proxy must decide by exactly one name, or by none. */
static void
test_server_name_shapes(void **state)
{
	struct bytes *exts, *in;
	static const char *const two[] = { "a.example", "b.example" };
	static const size_t two_n[] = { 9, 9 };
	static const char *const same[] = { "a.example", "a.example" };
	static const char *const empty_then[] = { "", "a.example" };
	static const size_t empty_then_n[] = { 0, 9 };
	(void)state;

	/* two host_name entries, even the same one twice, or after an empty one */
	exts = bytes_new();
	ext_sni(exts, two, two_n, 2);
	in = hello_with(exts);
	expect(in->b, in->n, SNI_INVALID, "two host names", "two host names");
	free(exts), free(in);
	exts = bytes_new();
	ext_sni(exts, same, two_n, 2);
	in = hello_with(exts);
	expect(in->b, in->n, SNI_INVALID, "two host names", "the same host name twice");
	free(exts), free(in);
	exts = bytes_new();
	ext_sni(exts, empty_then, empty_then_n, 2);
	in = hello_with(exts);
	expect(in->b, in->n, SNI_INVALID, "two host names", "an empty host name, then one");
	free(exts), free(in);

	/* two server_name extensions */
	exts = bytes_new();
	ext_sni1(exts, "a.example");
	ext_padding(exts, 10);
	ext_sni1(exts, "b.example");
	in = hello_with(exts);
	expect(in->b, in->n, SNI_INVALID, "two server_name extensions", "two extensions");
	free(exts), free(in);

	/* empty: no extension data, an empty list, an empty host name */
	exts = bytes_new();
	ext(exts, 0, "", 0);
	in = hello_with(exts);
	expect(in->b, in->n, SNI_NO_NAME, "server_name extension is empty", "empty extension");
	free(exts), free(in);
	exts = bytes_new();
	ext(exts, 0, "\x00\x00", 2);
	in = hello_with(exts);
	expect(in->b, in->n, SNI_NO_NAME, "no host_name", "empty list");
	free(exts), free(in);
	exts = bytes_new();
	ext(exts, 0, "\x00\x03\x00\x00\x00", 5);
	in = hello_with(exts);
	expect(in->b, in->n, SNI_NO_NAME, "server name is empty", "empty host name");
	free(exts), free(in);

	/* an entry of another name_type is skipped; the host_name beside it decides */
	exts = bytes_new();
	ext(exts, 0, "\x00\x10\x07\x00\x01z\x00\x00\x09x.example", 18);
	in = hello_with(exts);
	expect(in->b, in->n, SNI_FOUND, "x.example", "other name_type first");
	free(exts), free(in);
	exts = bytes_new();
	ext(exts, 0, "\x00\x04\x07\x00\x01z", 6);
	in = hello_with(exts);
	expect(in->b, in->n, SNI_NO_NAME, "no host_name", "only another name_type");
	free(exts), free(in);

	/* no extensions at all (allowed before TLS 1.2), or none of them server_name */
	in = hello_with(NULL);
	expect(in->b, in->n, SNI_NO_NAME, "no extensions", "no extensions block");
	free(in);
	exts = bytes_new();
	in = hello_with(exts);
	expect(in->b, in->n, SNI_NO_NAME, "no server_name extension", "empty extensions block");
	free(exts), free(in);

	/* ECH: the outer (public) name decides; the inner hello is opaque */
	exts = bytes_new();
	ext_sni1(exts, "public.example");
	ext(exts, 0xfe0d, "\x00\x00\x01\x00\x01\x2a\x00\x00\x00\x00", 10);
	in = hello_with(exts);
	expect_incremental(in, SNI_FOUND, "public.example", "ECH outer name");
	free(exts), free(in);
}

/* ---- lengths that lie ---- */

/* Offsets in hello_named()'s handshake body (after the 4-byte handshake header). */
#define BODY_SESSION_ID 34
#define BODY_SUITES (BODY_SESSION_ID + 1 + 32)
#define BODY_COMPRESSION (BODY_SUITES + 2 + 4)
#define BODY_EXTENSIONS (BODY_COMPRESSION + 2)

/* The ClientHello cut short at every byte, its length fields saying so (record and handshake
 * lengths shrunk to fit): a field that runs past the end is malformed, never read. A cut
 * just before the extensions is a pre-TLS 1.2 hello without them. */
static void
test_truncated_at_every_field(void **state)
{
	struct bytes *full = hello_named("x.example");
	struct bytes *hs = handshake_of(full);
	size_t body = hs->n - 4;
	(void)state;

	for (size_t k = 0; k < body; k++) {
		struct bytes *cut = bytes_new(), *out = bytes_new();

		put8(cut, 1);
		put8(cut, 0);
		put16(cut, (unsigned)k);
		put(cut, hs->b + 4, k);
		records(out, cut->b, cut->n, NULL, 0);
		if (k == BODY_EXTENSIONS)
			expect(out->b, out->n, SNI_NO_NAME, "no extensions",
			       "cut after compression");
		else
			expect(out->b, out->n, SNI_INVALID, NULL, "cut hello");
		/* and every prefix of that is still only a prefix, or already wrong */
		for (size_t i = 0; i < out->n; i++) {
			char name[SNI_NAME_MAX + 1];
			const char *why;
			enum sni_result r = parse(out->b, i, name, &why);

			assert_true(r == SNI_NEED_MORE || r == SNI_INVALID);
		}
		free(cut);
		free(out);
	}
	free(hs);
	free(full);
}

/* Each length field of the hello one too long and one too short: refused, and the bytes past
 * the message are never taken for part of it. */
static void
test_lengths_off_by_one(void **state)
{
	struct bytes *good = hello_named("x.example");
	size_t hs = 5, body = hs + 4;
	size_t exts = body + BODY_EXTENSIONS;
	/* padding(3) is the first extension: 4 + 3 bytes, then server_name */
	size_t sni = exts + 2 + 4 + 3;
	static const struct field {
		const char *what;
		size_t off, width; /* big-endian length field */
	} fields[] = {
		{ "handshake length", 5 + 1, 3 },
		{ "session id length", 5 + 4 + BODY_SESSION_ID, 1 },
		{ "cipher suites length", 5 + 4 + BODY_SUITES, 2 },
		{ "compression length", 5 + 4 + BODY_COMPRESSION, 1 },
		{ "extensions length", 5 + 4 + BODY_EXTENSIONS, 2 },
		{ "padding extension length", 5 + 4 + BODY_EXTENSIONS + 4, 2 },
		{ "server_name extension length", 5 + 4 + BODY_EXTENSIONS + 2 + 7 + 2, 2 },
		{ "server_name list length", 5 + 4 + BODY_EXTENSIONS + 2 + 7 + 4, 2 },
		{ "host_name length", 5 + 4 + BODY_EXTENSIONS + 2 + 7 + 7, 2 },
	};
	(void)state;

	/* the offsets above point where this test believes they do */
	expect(good->b, good->n, SNI_FOUND, "x.example", "unchanged");
	assert_int_equal(good->b[sni], 0x00);
	assert_int_equal(good->b[sni + 1], 0x00);
	assert_int_equal(good->b[sni + 8], 0x09);
	assert_memory_equal(good->b + sni + 9, "x.example", 9);

	for (size_t i = 0; i < ARRAY_SIZE(fields); i++)
		for (int delta = -1; delta <= 1; delta += 2) {
			struct bytes *bad = bytes_new();
			size_t off = fields[i].off + fields[i].width - 1;
			char name[SNI_NAME_MAX + 1];
			const char *why;
			enum sni_result r;

			put(bad, good->b, good->n);
			put(bad, "\x00\x00\x00\x00", 4); /* what a too-long length would take */
			bad->b[off] = (uint8_t)(bad->b[off] + delta);
			r = parse(bad->b, bad->n, name, &why);
			if (r != SNI_INVALID)
				fail_msg("%s %+d: got %s", fields[i].what, delta, result_names[r]);
			free(bad);
		}
	free(good);
}

static void
test_body_fields(void **state)
{
	struct bytes *good = hello_named("x.example");
	struct bytes *bad;
	size_t body = 5 + 4;
	(void)state;

	/* session id of 33 bytes (the length says 33, the bytes are there) */
	bad = bytes_new();
	put(bad, good->b, body + BODY_SESSION_ID);
	put8(bad, 33);
	put(bad, good->b + body + BODY_SESSION_ID + 1, 32);
	put8(bad, 0);
	put(bad, good->b + body + BODY_SUITES, good->n - body - BODY_SUITES);
	bad->b[4]++, bad->b[8]++; /* record and handshake lengths */
	expect(bad->b, bad->n, SNI_INVALID, "session id is longer than 32", "session id 33");
	free(bad);

	/* an odd cipher_suites length, and an empty one */
	bad = bytes_new();
	put(bad, good->b, good->n);
	bad->b[body + BODY_SUITES + 1] = 3;
	expect(bad->b, bad->n, SNI_INVALID, "not a list of 2-byte values", "odd cipher suites");
	bad->b[body + BODY_SUITES + 1] = 0;
	expect(bad->b, bad->n, SNI_INVALID, "not a list of 2-byte values", "no cipher suites");
	free(bad);

	/* bytes after the extensions, inside the hello */
	bad = bytes_new();
	put(bad, good->b, good->n);
	put8(bad, 0);
	bad->b[4]++, bad->b[8]++;
	expect(bad->b, bad->n, SNI_INVALID, "bytes follow the ClientHello's extensions",
	       "trailing byte");
	free(bad);
	free(good);
}

/* ---- the 16 KiB bound ---- */

/* A hello whose handshake message is total bytes, the name after a padding extension. */
static struct bytes *
hello_of_size(size_t total, const char *name)
{
	struct bytes *exts = bytes_new(), *hs = bytes_new();
	size_t fixed;

	/* 4 handshake header + 2 + 32 + 33 + 6 + 2 compression + 2 extensions length */
	fixed = 4 + BODY_EXTENSIONS + 2 + 4 + 4 + 2 + 3 + strlen(name);
	assert_true(total >= fixed);
	ext_padding(exts, total - fixed);
	ext_sni1(exts, name);
	client_hello(hs, exts);
	assert_int_equal(hs->n, total);
	free(exts);
	return hs;
}

static void
test_sixteen_kib(void **state)
{
	struct bytes *hs, *out;
	size_t cut;
	(void)state;

	/* the name after 10 KiB of padding, in one record and in two */
	hs = hello_of_size(10 * 1024 + 200, "far.example");
	out = bytes_new();
	records(out, hs->b, hs->n, NULL, 0);
	expect_incremental(out, SNI_FOUND, "far.example", "after 10 KiB, 1 record");
	free(out);
	out = bytes_new();
	cut = 1000;
	records(out, hs->b, hs->n, &cut, 1);
	expect_incremental(out, SNI_FOUND, "far.example", "after 10 KiB, 2 records");
	free(out);
	free(hs);

	/* exactly 16 KiB in one full record, and the same room split over two */
	hs = hello_of_size(SNI_HELLO_MAX, "edge.example");
	out = bytes_new();
	records(out, hs->b, hs->n, NULL, 0);
	assert_int_equal(out->n, SNI_READ_MAX);
	expect_incremental(out, SNI_FOUND, "edge.example", "16 KiB");
	free(out), free(hs);
	hs = hello_of_size(SNI_HELLO_MAX - 5, "edge.example");
	out = bytes_new();
	cut = 8000;
	records(out, hs->b, hs->n, &cut, 1);
	assert_int_equal(out->n, SNI_READ_MAX);
	expect_incremental(out, SNI_FOUND, "edge.example", "16 KiB - 5 in 2 records");
	free(out), free(hs);

	/* one byte more: the header says so at once, or the records outgrow the bound */
	hs = hello_of_size(SNI_HELLO_MAX + 1, "edge.example");
	out = bytes_new();
	cut = 8000;
	records(out, hs->b, hs->n, &cut, 1);
	expect(out->b, 9, SNI_INVALID, "larger than 16 KiB", "16 KiB + 1");
	free(out), free(hs);
	hs = hello_of_size(SNI_HELLO_MAX - 4, "edge.example");
	out = bytes_new();
	records(out, hs->b, hs->n, &cut, 1);
	assert_int_equal(out->n, SNI_READ_MAX + 1);
	for (size_t n = SNI_READ_MAX; n <= out->n; n++)
		expect(out->b, n, SNI_INVALID, "does not end within 16 KiB", "16 KiB - 4 in 2");
	free(out), free(hs);

	/* a normal hello in 1-byte records runs out of room long before it ends */
	hs = hello_of_size(4000, "tiny.example");
	out = bytes_new();
	{
		static size_t ones[4000];

		for (size_t i = 0; i < ARRAY_SIZE(ones); i++)
			ones[i] = 1;
		records(out, hs->b, hs->n, ones, ARRAY_SIZE(ones));
	}
	expect(out->b, SNI_READ_MAX - 1, SNI_NEED_MORE, NULL, "1-byte records, under");
	expect(out->b, out->n, SNI_INVALID, "does not end within 16 KiB", "1-byte records");
	free(out), free(hs);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_openssl_hellos),
		cmocka_unit_test(test_split_records),
		cmocka_unit_test(test_interleaved_records),
		cmocka_unit_test(test_not_a_client_hello),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_long_names),
		cmocka_unit_test(test_server_name_shapes),
		cmocka_unit_test(test_truncated_at_every_field),
		cmocka_unit_test(test_lengths_off_by_one),
		cmocka_unit_test(test_body_fields),
		cmocka_unit_test(test_sixteen_kib),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
