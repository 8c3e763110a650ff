/* dns.h: the egress DNS stub's packets. A guest's query is parsed (one question, class IN,
 * no compression tricks beyond what a query holds), and the answer is built here: for a name
 * the sandbox may reach and type A, one A record with the host side of the sandbox's link
 * (TTL 30 s), so its connection comes to the proxy; for a name it may not reach, NXDOMAIN;
 * for other types of an allowed name (AAAA, HTTPS...), an empty answer (NOERROR, no
 * records). Nothing is ever forwarded. Pure, bounded, fuzzed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DNS_MSG_MAX 512 /* what the stub accepts and answers (UDP, no EDNS larger sizes) */
#define DNS_NAME_MAX 253

struct dns_query {
	uint16_t id;
	uint16_t qtype;
	uint16_t qclass;
	bool rd;                     /* recursion desired, echoed */
	char name[DNS_NAME_MAX + 1]; /* lowercase, no trailing dot */
	size_t question_len;         /* bytes of the question section, for the answer */
};

/* Parses a query: a header with QR=0, opcode 0, exactly one question, no answer or
 * authority records (one additional OPT record is allowed and ignored); the name's labels
 * each 1..63 bytes, no compression pointers, total under DNS_NAME_MAX. -EINVAL when it is
 * not such a query (the stub drops those silently, or answers FORMERR when the header is
 * readable: see dns_formerr).
 * Added with the implementation: a packet over DNS_MSG_MAX, a class other than IN, the root
 * name and a label byte other than a letter, digit, '-' or '_' are refused too (the stub
 * answers only names a policy could hold); the OPT record must be well-formed (root name,
 * type 41, whole options, nothing after it); a name may be DNS_NAME_MAX bytes once dotted. */
int dns_parse_query(const uint8_t *pkt, size_t len, struct dns_query *ret);

/* For a packet dns_parse_query refused: when it is a query (QR=0, one question) whose name is
 * readable (labels of 1..63 bytes within the packet and DNS_NAME_MAX, no compression pointers)
 * but holds a byte that no host name has (a control byte, a space, a dot or NUL inside a
 * label, non-ASCII...), writes that name's bytes as sent, labels joined by '.', into out
 * (DNS_NAME_MAX bytes, not NUL-terminated) and returns their count, so that the refusal can be
 * reported (and its name quoted in a log line, never written raw). 0 for any other packet. */
size_t dns_bad_name(const uint8_t *pkt, size_t len, uint8_t out[static DNS_NAME_MAX]);

enum dns_verdict {
	DNS_ALLOW,  /* answer A with addr (type A), empty for other types */
	DNS_REFUSE, /* NXDOMAIN */
};

/* Builds the answer to q (whose packet is pkt, len) into out (at least DNS_MSG_MAX bytes):
 * the header (QR=1, AA=1, RA=0, RD echoed), the question copied, and per verdict the record
 * or NXDOMAIN. addr is the IPv4 address in network order. Returns the length. */
size_t dns_build_answer(const struct dns_query *q, const uint8_t *pkt, enum dns_verdict v,
                        uint32_t addr, uint8_t *out);

/* FORMERR for a packet whose 12-byte header is readable but which is no valid query;
 * returns 0 when even the header is not there (then nothing is sent).
 * Added with the implementation: the id, opcode and RD are echoed, every count is 0, and 0
 * is returned for a packet that is itself an answer (QR=1): answering answers can loop. */
size_t dns_formerr(const uint8_t *pkt, size_t len, uint8_t *out);
