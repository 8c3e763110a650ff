/* test-dns.c: egress/dns.c, the DNS stub's packets: queries built here byte by byte and one by
 * glibc's own resolver (res_mkquery), parsed or refused; answers checked byte by byte and, when
 * libresolv can be loaded, read back with glibc's parser (ns_initparse/ns_parserr). Every
 * packet is parsed from a heap copy of its exact length so ASan sees any read past its end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <dlfcn.h>
#include <errno.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dns.h"

#define LABEL63 "abcdefghij0123456789abcdefghij0123456789abcdefghij0123456789abc"

/* ---- building queries ---- */

/* Appends a dotted name in wire form (labels as given, no check). */
static size_t
put_name(uint8_t *p, const char *dotted)
{
	size_t n = 0;

	while (*dotted) {
		const char *dot = strchr(dotted, '.');
		size_t l = dot ? (size_t)(dot - dotted) : strlen(dotted);

		p[n++] = (uint8_t)l;
		memcpy(p + n, dotted, l);
		n += l;
		dotted += l + (dot ? 1 : 0);
	}
	p[n++] = 0;
	return n;
}

static size_t
put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
	return 2;
}

static size_t
put_header(uint8_t *p, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns,
           uint16_t ar)
{
	put16(p, id);
	put16(p + 2, flags);
	put16(p + 4, qd);
	put16(p + 6, an);
	put16(p + 8, ns);
	put16(p + 10, ar);
	return 12;
}

/* An EDNS OPT record as dig sends it: UDP size 1232, DO clear, one COOKIE option. */
static const uint8_t opt_rr[] = {
	0x00,                   /* root */
	0x00, 0x29,             /* OPT */
	0x04, 0xd0,             /* UDP payload size 1232 */
	0x00, 0x00, 0x00, 0x00, /* extended RCODE, version 0, flags */
	0x00, 0x0c,             /* rdlength 12 */
	0x00, 0x0a, 0x00, 0x08, /* COOKIE, 8 bytes */
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
};

/* A query for name (dotted) with flags 0x0100 (RD), one question, and the OPT record when
 * opt is set. */
static size_t
make_query(uint8_t *p, uint16_t id, const char *name, uint16_t qtype, bool opt)
{
	size_t n = put_header(p, id, 0x0100, 1, 0, 0, opt ? 1 : 0);

	n += put_name(p + n, name);
	n += put16(p + n, qtype);
	n += put16(p + n, 1);
	if (opt) {
		memcpy(p + n, opt_rr, sizeof(opt_rr));
		n += sizeof(opt_rr);
	}
	return n;
}

/* Parses pkt from a heap copy of exactly len bytes. */
static int
parse_exact(const uint8_t *pkt, size_t len, struct dns_query *q)
{
	uint8_t *copy = malloc(len ? len : 1);
	int r;

	assert_non_null(copy);
	memcpy(copy, pkt, len);
	r = dns_parse_query(copy, len, q);
	free(copy);
	return r;
}

static void
assert_refused(const uint8_t *pkt, size_t len)
{
	struct dns_query q;

	assert_int_equal(parse_exact(pkt, len, &q), -EINVAL);
}

static uint16_t
get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* ---- glibc's resolver parser, when libresolv is there ---- */

struct resolv {
	void *handle;
	__typeof__(ns_initparse) *initparse;
	__typeof__(ns_parserr) *parserr;
	__typeof__(ns_msg_getflag) *getflag;
};

static bool
resolv_open(struct resolv *r)
{
	r->handle = dlopen("libresolv.so.2", RTLD_NOW);
	if (!r->handle)
		return false;
	r->initparse = (__typeof__(ns_initparse) *)dlsym(r->handle, "ns_initparse");
	r->parserr = (__typeof__(ns_parserr) *)dlsym(r->handle, "ns_parserr");
	r->getflag = (__typeof__(ns_msg_getflag) *)dlsym(r->handle, "ns_msg_getflag");
	if (r->initparse && r->parserr && r->getflag)
		return true;
	dlclose(r->handle);
	return false;
}

/* An answer as a stub resolver reads it: every section walks, the question is name/type/IN,
 * and an A record (when ancount says one) names the question and holds want. */
static void
resolv_check(const uint8_t *ans, size_t len, const char *name, uint16_t qtype, int rcode,
             int ancount, uint32_t want)
{
	struct resolv r;
	ns_msg msg;
	ns_rr rr;

	if (!resolv_open(&r)) {
		print_message("libresolv.so.2 not loadable: answer not read back by glibc\n");
		return;
	}
	assert_int_equal(r.initparse(ans, (int)len, &msg), 0);
	assert_int_equal(r.getflag(msg, ns_f_qr), 1);
	assert_int_equal(r.getflag(msg, ns_f_aa), 1);
	assert_int_equal(r.getflag(msg, ns_f_rcode), rcode);
	assert_int_equal(ns_msg_count(msg, ns_s_qd), 1);
	assert_int_equal(ns_msg_count(msg, ns_s_an), ancount);
	assert_int_equal(ns_msg_count(msg, ns_s_ns), 0);
	assert_int_equal(ns_msg_count(msg, ns_s_ar), 0);
	assert_int_equal(r.parserr(&msg, ns_s_qd, 0, &rr), 0);
	assert_string_equal(ns_rr_name(rr), name);
	assert_int_equal(ns_rr_type(rr), qtype);
	assert_int_equal(ns_rr_class(rr), ns_c_in);
	if (ancount == 1) {
		assert_int_equal(r.parserr(&msg, ns_s_an, 0, &rr), 0);
		assert_string_equal(ns_rr_name(rr), name);
		assert_int_equal(ns_rr_type(rr), ns_t_a);
		assert_int_equal(ns_rr_class(rr), ns_c_in);
		assert_int_equal(ns_rr_ttl(rr), 30);
		assert_int_equal(ns_rr_rdlen(rr), 4);
		assert_memory_equal(ns_rr_rdata(rr), &want, 4);
	}
	dlclose(r.handle);
}

/* ---- answers ---- */

static void
test_allow_a(void **state)
{
	uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
	struct dns_query q;
	uint32_t addr = inet_addr("10.0.2.2");
	size_t len = make_query(pkt, 0xbeef, "example.com", 1, false);
	/* The whole answer, byte by byte (RFC 1035 4.1). */
	static const uint8_t want[] = {
		0xbe, 0xef,             /* id */
		0x85, 0x00,             /* QR, opcode 0, AA, RD; RA 0, NOERROR */
		0x00, 0x01, 0x00, 0x01, /* qdcount 1, ancount 1 */
		0x00, 0x00, 0x00, 0x00, /* nscount, arcount */
		7,    'e',  'x',  'a',  'm',  'p',  'l',  'e',  3,
		'c',  'o',  'm',  0,    0x00, 0x01, 0x00, 0x01, /* A IN */
		0xc0, 0x0c,             /* name: pointer to the question's */
		0x00, 0x01, 0x00, 0x01, /* A IN */
		0x00, 0x00, 0x00, 0x1e, /* TTL 30 */
		0x00, 0x04, 10,   0,    2,    2,
	};
	size_t n;

	(void)state;
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	assert_int_equal(q.id, 0xbeef);
	assert_int_equal(q.qtype, 1);
	assert_int_equal(q.qclass, 1);
	assert_true(q.rd);
	assert_string_equal(q.name, "example.com");
	assert_int_equal(q.question_len, 13 + 4);

	n = dns_build_answer(&q, pkt, DNS_ALLOW, addr, out);
	assert_int_equal(n, sizeof(want));
	assert_memory_equal(out, want, sizeof(want));
	resolv_check(out, n, "example.com", ns_t_a, ns_r_noerror, 1, addr);
}

static void
test_allow_other_types_empty(void **state)
{
	static const uint16_t types[] = { 28 /* AAAA */, 65 /* HTTPS */, 16 /* TXT */,
		                          255 /* ANY */ };
	uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
	struct dns_query q;

	(void)state;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		size_t len = make_query(pkt, 7, "api.example.com", types[i], false), n;

		assert_int_equal(parse_exact(pkt, len, &q), 0);
		assert_int_equal(q.qtype, types[i]);
		n = dns_build_answer(&q, pkt, DNS_ALLOW, inet_addr("10.0.2.2"), out);
		/* header and question, nothing else */
		assert_int_equal(n, len);
		assert_int_equal(get16(out + 2), 0x8500); /* NOERROR */
		assert_int_equal(get16(out + 4), 1);
		assert_int_equal(get16(out + 6), 0);
		assert_int_equal(get16(out + 8), 0);
		assert_int_equal(get16(out + 10), 0);
		assert_memory_equal(out + 12, pkt + 12, len - 12);
		resolv_check(out, n, "api.example.com", types[i], ns_r_noerror, 0, 0);
	}
}

static void
test_refuse_nxdomain(void **state)
{
	static const uint16_t types[] = { 1, 28 };
	uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
	struct dns_query q;

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		size_t len = make_query(pkt, 0x1234, "evil.example", types[i], false), n;

		assert_int_equal(parse_exact(pkt, len, &q), 0);
		n = dns_build_answer(&q, pkt, DNS_REFUSE, inet_addr("10.0.2.2"), out);
		assert_int_equal(n, len);
		assert_int_equal(get16(out), 0x1234);
		assert_int_equal(get16(out + 2), 0x8503); /* QR AA RD, NXDOMAIN */
		assert_int_equal(get16(out + 4), 1);
		assert_int_equal(get16(out + 6), 0);
		assert_int_equal(get16(out + 8), 0);
		assert_int_equal(get16(out + 10), 0);
		assert_memory_equal(out + 12, pkt + 12, len - 12);
		resolv_check(out, n, "evil.example", types[i], ns_r_nxdomain, 0, 0);
	}
}

static void
test_rd_echoed(void **state)
{
	uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
	struct dns_query q;
	size_t len = make_query(pkt, 1, "example.com", 1, false);

	(void)state;
	pkt[2] = 0x00; /* RD clear */
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	assert_false(q.rd);
	dns_build_answer(&q, pkt, DNS_ALLOW, 0, out);
	assert_int_equal(get16(out + 2), 0x8400);
	dns_build_answer(&q, pkt, DNS_REFUSE, 0, out);
	assert_int_equal(get16(out + 2), 0x8403);

	/* Z, AD and CD (dig sets AD) are no reason to refuse and are not echoed. */
	pkt[2] = 0x01;
	pkt[3] = 0x70;
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	assert_true(q.rd);
	dns_build_answer(&q, pkt, DNS_ALLOW, 0, out);
	assert_int_equal(get16(out + 2), 0x8500);
}

static void
test_case_lowered_question_kept(void **state)
{
	uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
	struct dns_query q;
	/* as a resolver randomising case (0x20) sends it */
	size_t len = make_query(pkt, 9, "ExAmPlE.CoM", 1, false), n;

	(void)state;
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	assert_string_equal(q.name, "example.com");
	n = dns_build_answer(&q, pkt, DNS_ALLOW, inet_addr("192.0.2.1"), out);
	assert_int_equal(n, len + 16);
	assert_memory_equal(out + 12, "\7ExAmPlE\3CoM\0", 13);
	resolv_check(out, n, "ExAmPlE.CoM", ns_t_a, ns_r_noerror, 1, inet_addr("192.0.2.1"));
}

static void
test_name_bytes(void **state)
{
	static const struct {
		const char *name;
		const char *want; /* NULL: refused */
	} cases[] = {
		{ "_dmarc.example.com", "_dmarc.example.com" },
		{ "xn--bcher-kva.example", "xn--bcher-kva.example" },
		{ "a-1.B_2.c", "a-1.b_2.c" },
		{ "localhost", "localhost" },
		{ "a b.com", NULL },
		{ "*.example.com", NULL },
		{ "ex@mple.com", NULL },
		{ "b\xc3\xbc"
		  "cher.de",
		  NULL },
		{ "a/b.com", NULL },
		{ "a:80.com", NULL },
	};
	uint8_t pkt[DNS_MSG_MAX];
	struct dns_query q;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = make_query(pkt, 1, cases[i].name, 1, false);
		int r = parse_exact(pkt, len, &q);

		if (!cases[i].want) {
			if (r != -EINVAL)
				fail_msg("'%s' accepted", cases[i].name);
			continue;
		}
		if (r < 0)
			fail_msg("'%s' refused", cases[i].name);
		assert_string_equal(q.name, cases[i].want);
	}
}

static void
test_label_with_dot_or_nul_refused(void **state)
{
	uint8_t pkt[DNS_MSG_MAX];
	size_t n = put_header(pkt, 1, 0x0100, 1, 0, 0, 0);

	(void)state;
	/* "a.b" as one label: would read as two names' worth once dotted */
	memcpy(pkt + n, "\3a.b\3com\0\0\1\0\1", 13);
	assert_refused(pkt, n + 13);
	memcpy(pkt + n, "\3a\0b\3com\0\0\1\0\1", 13);
	assert_refused(pkt, n + 13);
}

static void
test_root_refused(void **state)
{
	uint8_t pkt[DNS_MSG_MAX];
	size_t n = put_header(pkt, 1, 0x0100, 1, 0, 0, 0);

	(void)state;
	memcpy(pkt + n, "\0\0\2\0\1", 5); /* . NS IN: what a resolver priming asks */
	assert_refused(pkt, n + 5);
}

static void
test_edns_accepted_not_echoed(void **state)
{
	uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
	struct dns_query q;
	size_t len = make_query(pkt, 0x4242, "example.com", 1, true), n;

	(void)state;
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	assert_string_equal(q.name, "example.com");
	assert_int_equal(q.question_len, 17);
	n = dns_build_answer(&q, pkt, DNS_ALLOW, inet_addr("10.0.2.2"), out);
	assert_int_equal(n, 12 + 17 + 16);
	assert_int_equal(get16(out + 10), 0); /* arcount */
	assert_memory_equal(out + 12, pkt + 12, 17);
	resolv_check(out, n, "example.com", ns_t_a, ns_r_noerror, 1, inet_addr("10.0.2.2"));

	/* an OPT with no options at all */
	len = make_query(pkt, 1, "example.com", 1, false);
	pkt[11] = 1;
	memcpy(pkt + len, "\0\0\x29\x02\0\0\0\0\0\0\0", 11);
	assert_int_equal(parse_exact(pkt, len + 11, &q), 0);
	assert_int_equal(q.question_len, 17);
}

static void
test_edns_malformed_refused(void **state)
{
	uint8_t pkt[DNS_MSG_MAX], bad[DNS_MSG_MAX];
	size_t len = make_query(pkt, 1, "example.com", 1, true);
	size_t opt = len - sizeof(opt_rr);

	(void)state;
	/* arcount 1 and no record */
	assert_refused(pkt, opt);
	/* a name other than the root */
	memcpy(bad, pkt, opt);
	bad[opt] = 1;
	bad[opt + 1] = 'a';
	memcpy(bad + opt + 2, opt_rr, sizeof(opt_rr));
	assert_refused(bad, opt + 2 + sizeof(opt_rr));
	/* a compressed name pointing at the root byte of the question */
	memcpy(bad, pkt, len);
	bad[opt] = 0xc0;
	bad[opt + 1] = 24;
	memcpy(bad + opt + 2, opt_rr + 1, sizeof(opt_rr) - 1);
	assert_refused(bad, len + 1);
	/* type A instead of OPT */
	memcpy(bad, pkt, len);
	bad[opt + 2] = 1;
	assert_refused(bad, len);
	/* rdlength one too long, one too short */
	memcpy(bad, pkt, len);
	bad[opt + 10]++;
	assert_refused(bad, len);
	bad[opt + 10] -= 2;
	assert_refused(bad, len);
	/* the option's length running past the record */
	memcpy(bad, pkt, len);
	bad[opt + 14]++;
	assert_refused(bad, len);
	/* a second OPT (arcount 2) */
	memcpy(bad, pkt, len);
	memcpy(bad + len, opt_rr, sizeof(opt_rr));
	bad[11] = 2;
	assert_refused(bad, len + sizeof(opt_rr));
	/* bytes after the OPT */
	memcpy(bad, pkt, len);
	bad[len] = 0;
	assert_refused(bad, len + 1);
}

static void
test_header_refusals(void **state)
{
	static const struct {
		size_t off;
		uint8_t val;
		const char *what;
	} cases[] = {
		{ 2, 0x81, "QR=1" },
		{ 2, 0x09, "opcode 1 (IQUERY)" },
		{ 2, 0x11, "opcode 2 (STATUS)" },
		{ 2, 0x29, "opcode 5 (UPDATE)" },
		{ 5, 2, "qdcount 2" },
		{ 5, 0, "qdcount 0" },
		{ 7, 1, "ancount 1" },
		{ 9, 1, "nscount 1" },
		{ 11, 2, "arcount 2" },
		{ 4, 1, "qdcount 257" },
	};
	uint8_t pkt[DNS_MSG_MAX], bad[DNS_MSG_MAX];
	struct dns_query q;
	size_t len = make_query(pkt, 1, "example.com", 1, false);

	(void)state;
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(bad, pkt, len);
		bad[cases[i].off] = cases[i].val;
		if (parse_exact(bad, len, &q) != -EINVAL)
			fail_msg("%s accepted", cases[i].what);
	}
}

static void
test_qdcount_2_with_two_questions(void **state)
{
	uint8_t pkt[DNS_MSG_MAX];
	size_t len = make_query(pkt, 1, "example.com", 1, false);

	(void)state;
	/* a second, well-formed question after the first */
	pkt[5] = 2;
	len += put_name(pkt + len, "example.org");
	len += put16(pkt + len, 1);
	len += put16(pkt + len, 1);
	assert_refused(pkt, len);
}

static void
test_class_refused(void **state)
{
	static const uint16_t classes[] = { 3 /* CH */, 4 /* HS */, 255 /* ANY */, 254 /* NONE */,
		                            0 };
	uint8_t pkt[DNS_MSG_MAX];
	size_t len = make_query(pkt, 1, "version.bind", 16, false);

	(void)state;
	for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
		put16(pkt + len - 2, classes[i]);
		assert_refused(pkt, len);
	}
}

static void
test_compression_refused(void **state)
{
	uint8_t pkt[DNS_MSG_MAX];
	size_t n = put_header(pkt, 1, 0x0100, 1, 0, 0, 0);

	(void)state;
	/* "www" then a pointer (to the header: the offset does not matter, pointers are out) */
	memcpy(pkt + n, "\3www\xc0\x0c\0\1\0\1", 10);
	assert_refused(pkt, n + 10);
	/* a pointer to itself, as a loop */
	memcpy(pkt + n, "\xc0\x0c\0\1\0\1", 6);
	assert_refused(pkt, n + 6);
	/* the extended label types 0x40 and 0x80 */
	memcpy(pkt + n, "\x41\0\0\1\0\1", 6);
	assert_refused(pkt, n + 6);
	memcpy(pkt + n, "\x81\0\0\1\0\1", 6);
	assert_refused(pkt, n + 6);
}

static void
test_label_length(void **state)
{
	uint8_t pkt[DNS_MSG_MAX];
	struct dns_query q;
	size_t len;

	(void)state;
	len = make_query(pkt, 1, LABEL63 ".com", 1, false);
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	assert_string_equal(q.name, LABEL63 ".com");
	len = make_query(pkt, 1, "x" LABEL63 ".com", 1, false);
	assert_refused(pkt, len);
}

static void
test_name_length(void **state)
{
	/* 4 x 63 + 3 dots = 255; cut the last label to reach 253 and 254 */
	char name[300];
	uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
	struct dns_query q;
	size_t len, n;

	(void)state;
	snprintf(name, sizeof(name), "%s.%s.%s.%.61s", LABEL63, LABEL63, LABEL63, LABEL63);
	assert_int_equal(strlen(name), 253);
	len = make_query(pkt, 1, name, 1, true);
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	assert_string_equal(q.name, name);
	assert_int_equal(q.question_len, 255 + 4);
	n = dns_build_answer(&q, pkt, DNS_ALLOW, inet_addr("10.0.2.2"), out);
	assert_int_equal(n, 12 + 259 + 16);
	resolv_check(out, n, name, ns_t_a, ns_r_noerror, 1, inet_addr("10.0.2.2"));

	snprintf(name, sizeof(name), "%s.%s.%s.%.62s", LABEL63, LABEL63, LABEL63, LABEL63);
	assert_int_equal(strlen(name), 254);
	len = make_query(pkt, 1, name, 1, false);
	assert_refused(pkt, len);

	/* many short labels: 127 x "a" is 253 bytes once dotted; "bb" last makes 254 */
	for (int i = 0; i < 253; i++)
		name[i] = i % 2 ? '.' : 'a';
	name[253] = '\0';
	len = make_query(pkt, 1, name, 1, false);
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	assert_string_equal(q.name, name);
	memcpy(name + 252, "bb", 3);
	len = make_query(pkt, 1, name, 1, false);
	assert_refused(pkt, len);
}

static void
test_truncated_everywhere(void **state)
{
	uint8_t pkt[DNS_MSG_MAX];
	struct dns_query q;
	size_t len = make_query(pkt, 1, "www.example.com", 1, true);

	(void)state;
	assert_int_equal(parse_exact(pkt, len, &q), 0);
	/* every prefix is short of something the header or a length byte announced */
	for (size_t cut = 0; cut < len; cut++)
		if (parse_exact(pkt, cut, &q) != -EINVAL)
			fail_msg("query cut at %zu accepted", cut);
	len = make_query(pkt, 1, "www.example.com", 1, false);
	for (size_t cut = 0; cut < len; cut++)
		if (parse_exact(pkt, cut, &q) != -EINVAL)
			fail_msg("query cut at %zu accepted", cut);
	assert_int_equal(dns_parse_query(NULL, 0, &q), -EINVAL);
}

static void
test_trailing_garbage_refused(void **state)
{
	uint8_t pkt[DNS_MSG_MAX];
	size_t len = make_query(pkt, 1, "example.com", 1, false);

	(void)state;
	pkt[len] = 0;
	assert_refused(pkt, len + 1);
	memcpy(pkt + len, "garbage", 7);
	assert_refused(pkt, len + 7);
}

static void
test_oversized_refused(void **state)
{
	uint8_t pkt[DNS_MSG_MAX + 1];
	struct dns_query q;
	size_t len = make_query(pkt, 1, "example.com", 1, true);
	size_t opt = len - sizeof(opt_rr);
	/* a valid OPT padded (option 12) to 513 bytes in all */
	size_t pad = DNS_MSG_MAX + 1 - len - 4;

	(void)state;
	put16(pkt + len, 12);
	put16(pkt + len + 2, (uint16_t)pad);
	memset(pkt + len + 4, 0, pad);
	put16(pkt + opt + 9, (uint16_t)(12 + 4 + pad));
	assert_refused(pkt, DNS_MSG_MAX + 1);
	/* the same shape one byte shorter is a query */
	put16(pkt + len + 2, (uint16_t)(pad - 1));
	put16(pkt + opt + 9, (uint16_t)(12 + 4 + pad - 1));
	assert_int_equal(parse_exact(pkt, DNS_MSG_MAX, &q), 0);
}

/* glibc builds the query the way the guest's libc would (RD set, random id). */
static void
test_glibc_query(void **state)
{
	uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
	struct dns_query q;
	int len;
	size_t n;

	(void)state;
	len = res_mkquery(ns_o_query, "Example.COM", ns_c_in, ns_t_a, NULL, 0, NULL, pkt,
	                  sizeof(pkt));
	assert_true(len > 12);
	assert_int_equal(parse_exact(pkt, (size_t)len, &q), 0);
	assert_string_equal(q.name, "example.com");
	assert_int_equal(q.qtype, 1);
	assert_true(q.rd);
	n = dns_build_answer(&q, pkt, DNS_ALLOW, inet_addr("10.0.2.2"), out);
	assert_int_equal(get16(out), get16(pkt));
	resolv_check(out, n, "Example.COM", ns_t_a, ns_r_noerror, 1, inet_addr("10.0.2.2"));

	len = res_mkquery(ns_o_query, "example.com.", ns_c_in, ns_t_aaaa, NULL, 0, NULL, pkt,
	                  sizeof(pkt));
	assert_true(len > 12);
	assert_int_equal(parse_exact(pkt, (size_t)len, &q), 0);
	assert_string_equal(q.name, "example.com");
	assert_int_equal(q.qtype, 28);
}

static void
test_formerr(void **state)
{
	uint8_t pkt[DNS_MSG_MAX], out[DNS_MSG_MAX];
	struct dns_query q;
	size_t len = make_query(pkt, 0xabcd, "example.com", 1, false);
	static const uint8_t want[12] = { 0xab, 0xcd, 0x81, 0x01 };

	(void)state;
	/* short: no header, nothing to answer */
	memset(out, 0x55, sizeof(out));
	for (size_t i = 0; i < 12; i++)
		assert_int_equal(dns_formerr(pkt, i, out), 0);
	assert_int_equal(out[0], 0x55);

	/* bad: a compression pointer; the header alone is answered, counts 0 */
	memcpy(pkt + 12, "\xc0\x0c\0\1\0\1", 6);
	assert_refused(pkt, 18);
	memset(out, 0x55, sizeof(out));
	assert_int_equal(dns_formerr(pkt, 18, out), 12);
	assert_memory_equal(out, want, 12);
	assert_int_equal(out[12], 0x55);

	/* bad header only: qdcount 2, RD clear */
	make_query(pkt, 0xabcd, "example.com", 1, false);
	pkt[2] = 0;
	pkt[5] = 2;
	assert_refused(pkt, len);
	assert_int_equal(dns_formerr(pkt, 12, out), 12);
	assert_int_equal(get16(out + 2), 0x8001);
	for (size_t i = 4; i < 12; i++)
		assert_int_equal(out[i], 0);

	/* an answer is not answered */
	pkt[2] = 0x81;
	assert_int_equal(dns_formerr(pkt, len, out), 0);
	assert_int_equal(dns_parse_query(pkt, len, &q), -EINVAL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allow_a),
		cmocka_unit_test(test_allow_other_types_empty),
		cmocka_unit_test(test_refuse_nxdomain),
		cmocka_unit_test(test_rd_echoed),
		cmocka_unit_test(test_case_lowered_question_kept),
		cmocka_unit_test(test_name_bytes),
		cmocka_unit_test(test_label_with_dot_or_nul_refused),
		cmocka_unit_test(test_root_refused),
		cmocka_unit_test(test_edns_accepted_not_echoed),
		cmocka_unit_test(test_edns_malformed_refused),
		cmocka_unit_test(test_header_refusals),
		cmocka_unit_test(test_qdcount_2_with_two_questions),
		cmocka_unit_test(test_class_refused),
		cmocka_unit_test(test_compression_refused),
		cmocka_unit_test(test_label_length),
		cmocka_unit_test(test_name_length),
		cmocka_unit_test(test_truncated_everywhere),
		cmocka_unit_test(test_trailing_garbage_refused),
		cmocka_unit_test(test_oversized_refused),
		cmocka_unit_test(test_glibc_query),
		cmocka_unit_test(test_formerr),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
