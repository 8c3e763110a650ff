/* dns.c: the egress DNS stub's packets (RFC 1035 4.1): a guest's query parsed strictly, the
 * answer built from its question. The stub only ever answers names a policy could hold, so a
 * query for anything else (compression, odd bytes, other classes or opcodes) is refused here
 * and never reaches the policy. */
#include <errno.h>
#include <string.h>
#include "dns.h"
#include "frame.h"

#define DNS_HEADER 12
#define DNS_LABEL_MAX 63

/* Header flag bits (RFC 1035 4.1.1). Z, AD and CD (RFC 4035) are ignored in queries: dig sets
 * AD by default, and none of them changes what the stub answers. */
#define DNS_QR 0x8000
#define DNS_OPCODE_MASK 0x7800
#define DNS_AA 0x0400
#define DNS_RD 0x0100

#define DNS_RCODE_NOERROR 0
#define DNS_RCODE_FORMERR 1
#define DNS_RCODE_NXDOMAIN 3

#define DNS_TYPE_A 1
#define DNS_TYPE_OPT 41
#define DNS_CLASS_IN 1
#define DNS_ANSWER_TTL 30

static bool
label_byte_ok(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

/* Reads the question's name at pkt[*off]: labels only, no pointer, at least one label (the
 * root is no name a policy holds), each byte one a name can have. */
static int
parse_name(const uint8_t *pkt, size_t len, size_t *off, char name[static DNS_NAME_MAX + 1])
{
	size_t p = *off, n = 0;

	for (;;) {
		uint8_t l;

		if (p >= len)
			return -EINVAL;
		l = pkt[p++];
		if (l == 0)
			break;
		/* 0xC0 is a compression pointer, 0x40 and 0x80 are the retired extended label
		 * types: none belongs in a query's only name. */
		if (l > DNS_LABEL_MAX)
			return -EINVAL;
		if (len - p < l)
			return -EINVAL;
		/* the dot before this label, then its bytes */
		if (n + (n > 0) + l > DNS_NAME_MAX)
			return -EINVAL;
		if (n > 0)
			name[n++] = '.';
		for (uint8_t i = 0; i < l; i++) {
			uint8_t c = pkt[p + i];

			if (!label_byte_ok(c))
				return -EINVAL;
			name[n++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
		}
		p += l;
	}
	if (n == 0)
		return -EINVAL;
	name[n] = '\0';
	*off = p;
	return 0;
}

size_t
dns_bad_name(const uint8_t *pkt, size_t len, uint8_t out[static DNS_NAME_MAX])
{
	size_t p = DNS_HEADER, n = 0;
	bool bad = false;

	if (!pkt || len < DNS_HEADER || len > DNS_MSG_MAX || (be16_get(pkt + 2) & DNS_QR) ||
	    be16_get(pkt + 4) != 1)
		return 0;
	for (;;) {
		uint8_t l;

		if (p >= len)
			return 0;
		l = pkt[p++];
		if (l == 0)
			break;
		if (l > DNS_LABEL_MAX || len - p < l || n + (n > 0) + l > DNS_NAME_MAX)
			return 0;
		if (n > 0)
			out[n++] = '.';
		for (uint8_t i = 0; i < l; i++) {
			bad |= !label_byte_ok(pkt[p + i]);
			out[n++] = pkt[p + i];
		}
		p += l;
	}
	return bad ? n : 0;
}

/* An EDNS OPT pseudo-record (RFC 6891 6.1.2) filling pkt[off..len) exactly: the root name,
 * type 41, any class (the sender's UDP size) and TTL (extended RCODE, version, flags), and
 * RDATA made of whole options. Its content is ignored: the answer is small and carries none. */
static int
parse_opt(const uint8_t *pkt, size_t len, size_t off)
{
	size_t rdlen;

	if (len - off < 11 || pkt[off] != 0 || be16_get(pkt + off + 1) != DNS_TYPE_OPT)
		return -EINVAL;
	rdlen = be16_get(pkt + off + 9);
	off += 11;
	if (len - off != rdlen)
		return -EINVAL;
	while (off < len) {
		if (len - off < 4 || len - off - 4 < be16_get(pkt + off + 2))
			return -EINVAL;
		off += 4 + (size_t)be16_get(pkt + off + 2);
	}
	return 0;
}

int
dns_parse_query(const uint8_t *pkt, size_t len, struct dns_query *ret)
{
	char name[DNS_NAME_MAX + 1];
	uint16_t flags, qdcount, ancount, nscount, arcount, qtype, qclass;
	size_t off = DNS_HEADER, qend;
	int r;

	if (!pkt || len < DNS_HEADER || len > DNS_MSG_MAX)
		return -EINVAL;
	flags = be16_get(pkt + 2);
	qdcount = be16_get(pkt + 4);
	ancount = be16_get(pkt + 6);
	nscount = be16_get(pkt + 8);
	arcount = be16_get(pkt + 10);
	if ((flags & DNS_QR) || (flags & DNS_OPCODE_MASK) != 0)
		return -EINVAL;
	if (qdcount != 1 || ancount != 0 || nscount != 0 || arcount > 1)
		return -EINVAL;

	r = parse_name(pkt, len, &off, name);
	if (r < 0)
		return r;
	if (len - off < 4)
		return -EINVAL;
	qtype = be16_get(pkt + off);
	qclass = be16_get(pkt + off + 2);
	off += 4;
	qend = off;
	if (qclass != DNS_CLASS_IN)
		return -EINVAL;

	/* Nothing may follow the question but the one OPT record the header announces. */
	if (arcount == 1) {
		r = parse_opt(pkt, len, off);
		if (r < 0)
			return r;
	} else if (off != len)
		return -EINVAL;

	ret->id = be16_get(pkt);
	ret->qtype = qtype;
	ret->qclass = qclass;
	ret->rd = flags & DNS_RD;
	memcpy(ret->name, name, strlen(name) + 1);
	ret->question_len = qend - DNS_HEADER;
	return 0;
}

size_t
dns_build_answer(const struct dns_query *q, const uint8_t *pkt, enum dns_verdict v, uint32_t addr,
                 uint8_t *out)
{
	bool record = v == DNS_ALLOW && q->qtype == DNS_TYPE_A;
	uint16_t flags = DNS_QR | DNS_AA | (q->rd ? DNS_RD : 0) |
	                 (v == DNS_ALLOW ? DNS_RCODE_NOERROR : DNS_RCODE_NXDOMAIN);
	size_t n = DNS_HEADER;

	be16_put(out, q->id);
	be16_put(out + 2, flags);
	be16_put(out + 4, 1);
	be16_put(out + 6, record ? 1 : 0);
	be16_put(out + 8, 0);
	be16_put(out + 10, 0);
	/* The question as the guest sent it, case included: resolvers that randomise the case
	 * of their queries (0x20) check the answer echoes it. */
	memcpy(out + n, pkt + DNS_HEADER, q->question_len);
	n += q->question_len;
	if (record) {
		be16_put(out + n, 0xC000 | DNS_HEADER); /* the question's name */
		be16_put(out + n + 2, DNS_TYPE_A);
		be16_put(out + n + 4, DNS_CLASS_IN);
		be32_put(out + n + 6, DNS_ANSWER_TTL);
		be16_put(out + n + 10, sizeof(addr));
		memcpy(out + n + 12, &addr, sizeof(addr));
		n += 12 + sizeof(addr);
	}
	return n;
}

size_t
dns_formerr(const uint8_t *pkt, size_t len, uint8_t *out)
{
	uint16_t flags;

	if (!pkt || len < DNS_HEADER)
		return 0;
	flags = be16_get(pkt + 2);
	/* An answer is never answered: two stubs (or a spoofed source) would bounce FORMERRs
	 * between them for ever. */
	if (flags & DNS_QR)
		return 0;
	memset(out, 0, DNS_HEADER);
	memcpy(out, pkt, 2);
	be16_put(out + 2,
	         DNS_QR | (flags & DNS_OPCODE_MASK) | (flags & DNS_RD) | DNS_RCODE_FORMERR);
	return DNS_HEADER;
}
