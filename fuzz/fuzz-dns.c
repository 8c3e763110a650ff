/* fuzz-dns.c: egress/dns.c fed a guest's UDP payloads. A query that parses has a name a policy
 * could hold (lowercase labels of 1..63 letters, digits, '-', '_', at most 253 bytes) whose wire
 * form is the question as sent, case aside; both answers built for it stay within DNS_MSG_MAX,
 * carry the header the stub promises and the question byte for byte, and read back as the same
 * question once turned into a query again. Anything refused gets a 12-byte FORMERR or nothing,
 * and only a refused query can have its name reported as no host name. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dns.h"
#include "frame.h"
#include "fuzz.h"

static bool
name_byte_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* The name's labels against the question's wire form, which must be exactly name + 4. */
static void
check_name(const struct dns_query *q, const uint8_t *question)
{
	const char *s = q->name;
	size_t len = strlen(s), off = 0;

	FUZZ_CHECK(len > 0 && len <= DNS_NAME_MAX);
	for (;;) {
		size_t l = strcspn(s, ".");

		FUZZ_CHECK(l >= 1 && l <= 63);
		FUZZ_CHECK(question[off] == l);
		for (size_t i = 0; i < l; i++) {
			uint8_t c = question[off + 1 + i];

			FUZZ_CHECK(name_byte_ok(s[i]));
			FUZZ_CHECK((uint8_t)s[i] == (c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
		}
		off += 1 + l;
		s += l;
		if (!*s)
			break;
		s++;
	}
	FUZZ_CHECK(question[off] == 0);
	FUZZ_CHECK(q->question_len == off + 1 + 4);
	FUZZ_CHECK(be16_get(question + off + 1) == q->qtype);
	FUZZ_CHECK(be16_get(question + off + 3) == q->qclass);
}

static void
check_answer(const struct dns_query *q, const uint8_t *pkt, enum dns_verdict v)
{
	const uint32_t addr = 0x0a000202; /* any four bytes: they are copied, not read */
	bool record = v == DNS_ALLOW && q->qtype == 1;
	uint8_t *out = malloc(DNS_MSG_MAX); /* exactly the promised size: ASan sees overruns */
	struct dns_query again;
	size_t n;

	FUZZ_CHECK(out);
	n = dns_build_answer(q, pkt, v, addr, out);
	FUZZ_CHECK(n <= DNS_MSG_MAX);
	FUZZ_CHECK(n == 12 + q->question_len + (record ? 16 : 0));
	FUZZ_CHECK(be16_get(out) == q->id);
	FUZZ_CHECK(be16_get(out + 2) == (0x8400 | (q->rd ? 0x0100 : 0) | (v == DNS_ALLOW ? 0 : 3)));
	FUZZ_CHECK(be16_get(out + 4) == 1);
	FUZZ_CHECK(be16_get(out + 6) == (record ? 1 : 0));
	FUZZ_CHECK(be16_get(out + 8) == 0 && be16_get(out + 10) == 0);
	FUZZ_CHECK(memcmp(out + 12, pkt + 12, q->question_len) == 0);
	if (record) {
		const uint8_t *rr = out + 12 + q->question_len;
		static const uint8_t head[] = { 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4 };

		FUZZ_CHECK(memcmp(rr, head, sizeof(head)) == 0);
		FUZZ_CHECK(memcmp(rr + 12, &addr, 4) == 0);
	}

	/* An answer is no query, and is never answered. */
	FUZZ_CHECK(dns_parse_query(out, n, &again) == -EINVAL);
	FUZZ_CHECK(dns_formerr(out, n, out) == 0);

	/* Its header made a query again, its question reads back as q. */
	be16_put(out + 2, q->rd ? 0x0100 : 0);
	be16_put(out + 6, 0);
	FUZZ_CHECK(dns_parse_query(out, 12 + q->question_len, &again) == 0);
	FUZZ_CHECK(again.id == q->id && again.qtype == q->qtype && again.qclass == q->qclass);
	FUZZ_CHECK(again.rd == q->rd && again.question_len == q->question_len);
	FUZZ_CHECK(strcmp(again.name, q->name) == 0);
	free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dns_query q;
	uint8_t err[DNS_MSG_MAX];
	size_t n;
	int r;

	r = dns_parse_query(data, size, &q);
	FUZZ_CHECK(r == 0 || r == -EINVAL);

	/* a name reported as no host name fits its buffer (ASan: exactly DNS_NAME_MAX) and never
	 * comes from a query that parsed */
	{
		uint8_t *bad = malloc(DNS_NAME_MAX);
		size_t bad_len;

		FUZZ_CHECK(bad);
		bad_len = dns_bad_name(data, size, bad);
		FUZZ_CHECK(bad_len <= DNS_NAME_MAX);
		FUZZ_CHECK(r != 0 || bad_len == 0);
		free(bad);
	}

	n = dns_formerr(data, size, err);
	FUZZ_CHECK(n == 0 || n == 12);
	FUZZ_CHECK((n == 0) == (size < 12 || (data[2] & 0x80)));
	if (n == 12) {
		FUZZ_CHECK(memcmp(err, data, 2) == 0);
		FUZZ_CHECK((err[2] & 0x80) && (err[3] & 0x0f) == 1);
		for (size_t i = 4; i < 12; i++)
			FUZZ_CHECK(err[i] == 0);
	}
	if (r < 0)
		return 0;

	FUZZ_CHECK(size >= 12 && size <= DNS_MSG_MAX);
	FUZZ_CHECK(12 + q.question_len <= size);
	FUZZ_CHECK(q.qclass == 1);
	FUZZ_CHECK(q.id == be16_get(data));
	FUZZ_CHECK(q.rd == !!(data[2] & 0x01));
	check_name(&q, data + 12);
	check_answer(&q, data, DNS_ALLOW);
	check_answer(&q, data, DNS_REFUSE);
	return 0;
}
