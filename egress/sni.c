/* sni.c: the server name in a TLS ClientHello (RFC 8446 4.1.2, RFC 5246 7.4.1.2, RFC 6066 3),
 * read from the connection's first records before the proxy dials anything. Every length is
 * checked against what arrived and against the structure around it before it is used; nothing
 * is allocated: the handshake fragments are joined in a fixed buffer of SNI_HELLO_MAX bytes.
 *
 * A decision is a function of the bytes up to the ClientHello's end only, so feeding more
 * never changes it: SNI_INVALID as soon as the prefix proves it, SNI_FOUND and SNI_NO_NAME
 * only once the whole ClientHello is there (a second server_name may still come). */
#include <stdbool.h>
#include <ctype.h>
#include <string.h>
#include "sni.h"
#include "util.h"

#define RECORD_HEADER 5
#define RECORD_HANDSHAKE 22
#define RECORD_PLAINTEXT_MAX (1u << 14) /* RFC 8446 5.1: TLSPlaintext.length */
#define HANDSHAKE_HEADER 4
#define HANDSHAKE_CLIENT_HELLO 1
#define EXT_SERVER_NAME 0
#define NAME_TYPE_HOST_NAME 0

/* Where a read stopped: the bytes have not all arrived yet, or the structure is broken. */
enum {
	CUR_OK,
	CUR_SHORT,
	CUR_BAD,
};

/* A bounded view of the joined handshake bytes: reads stop at end (the enclosing vector's
 * length, from the message) and at avail (what has arrived, never past end). A read past end
 * is malformed; one past avail only needs more bytes. */
struct cursor {
	const uint8_t *p;
	size_t pos, end, avail;
};

static int
cur_take(struct cursor *c, size_t n, const uint8_t **ret)
{
	if (n > c->end - c->pos)
		return CUR_BAD;
	if (c->pos > c->avail || n > c->avail - c->pos)
		return CUR_SHORT;
	*ret = c->p + c->pos;
	c->pos += n;
	return CUR_OK;
}

static int
cur_u8(struct cursor *c, size_t *ret)
{
	const uint8_t *b;
	int r = cur_take(c, 1, &b);

	if (r == CUR_OK)
		*ret = b[0];
	return r;
}

static int
cur_u16(struct cursor *c, size_t *ret)
{
	const uint8_t *b;
	int r = cur_take(c, 2, &b);

	if (r == CUR_OK)
		*ret = (size_t)b[0] << 8 | b[1];
	return r;
}

/* The next n bytes as a cursor of their own (a vector's body); this one moves past them even
 * if they have not arrived, so that what follows still reports CUR_SHORT rather than reading. */
static int
cur_sub(struct cursor *c, size_t n, struct cursor *ret)
{
	if (n > c->end - c->pos)
		return CUR_BAD;
	*ret = (struct cursor){
		.p = c->p,
		.pos = c->pos,
		.end = c->pos + n,
		.avail = c->avail < c->pos + n ? c->avail : c->pos + n,
	};
	c->pos += n;
	return CUR_OK;
}

/* A length-prefixed vector (u8 or u16 length) as a sub-cursor. */
static int
cur_vec(struct cursor *c, size_t length_bytes, struct cursor *ret, size_t *ret_len)
{
	size_t n;
	int r = length_bytes == 1 ? cur_u8(c, &n) : cur_u16(c, &n);

	if (r != CUR_OK)
		return r;
	*ret_len = n;
	return cur_sub(c, n, ret);
}

/* Checks a host_name and writes its normal form to out (host_name_normalise: the proxy's
 * Host reader and the policy engine's rule too, so a name can never stand for an address). */
static const char *
check_host_name(const uint8_t *in, size_t n, char out[static SNI_NAME_MAX + 1])
{
	const char *why;

	if (n == 0 || (n == 1 && in[0] == '.'))
		return "the server name is empty or only a dot";
	why = host_name_normalise((const char *)in, n, out);
	/* an IPv6 literal or a port says so when ':' is the first byte that is wrong */
	for (size_t i = 0; why && i < n && in[i] != ':'; i++)
		if (!(isalnum(in[i]) || in[i] == '-' || in[i] == '_' || in[i] == '.'))
			return why;
	return why && memchr(in, ':', n) ? "the server name has a ':' (an IPv6 address or a port)"
	                                 : why;
}

/* Names why a read failed when the structure, not the arrival of bytes, is at fault. */
static int
fail_why(int r, const char **why, const char *reason)
{
	if (r == CUR_BAD)
		*why = reason;
	return r;
}

/* The server_name extension's body (RFC 6066 3): a ServerNameList of (name_type, name); only
 * host_name is defined and every entry is length-prefixed. Exactly one host_name decides; an
 * empty extension or list, or an empty host_name, is no name at all. */
static int
parse_server_name(struct cursor *ext, bool *found, char name[static SNI_NAME_MAX + 1],
                  const char **why)
{
	struct cursor list, entry;
	size_t n, type, hosts = 0;
	const char *empty = "the server_name extension has no host_name";
	const uint8_t *b;
	int r;

	if (ext->end == ext->pos) {
		*why = "the server_name extension is empty";
		return CUR_OK;
	}
	r = cur_vec(ext, 2, &list, &n);
	if (r != CUR_OK)
		return fail_why(r, why, "the server_name list runs past its extension");
	if (ext->pos != ext->end) {
		*why = "bytes follow the server_name list inside its extension";
		return CUR_BAD;
	}
	while (list.pos < list.end) {
		r = cur_u8(&list, &type);
		if (r == CUR_OK)
			r = cur_vec(&list, 2, &entry, &n);
		if (r != CUR_OK)
			return fail_why(r, why, "a server_name entry runs past its list");
		if (type != NAME_TYPE_HOST_NAME)
			continue;
		if (++hosts > 1) {
			*why = "the ClientHello names two host names";
			return CUR_BAD;
		}
		if (n == 0) {
			empty = "the server name is empty";
			continue;
		}
		r = cur_take(&entry, n, &b);
		if (r != CUR_OK)
			return r;
		*why = check_host_name(b, n, name);
		if (*why)
			return CUR_BAD;
		*found = true;
	}
	if (!*found)
		*why = empty;
	return CUR_OK;
}

/* The ClientHello's body, whole or a prefix of it (hello->avail < hello->end). CUR_OK means
 * the whole body was read: *found says whether name holds the server name, and *why says why
 * not. */
static int
parse_client_hello(struct cursor *hello, bool *found, char name[static SNI_NAME_MAX + 1],
                   const char **why)
{
	struct cursor v, exts, ext;
	size_t n, type, server_names = 0;
	const uint8_t *b;
	int r;

	*found = false;
	r = cur_take(hello, 2, &b);
	if (r != CUR_OK)
		return fail_why(r, why, "the ClientHello is too short for its version");
	if (b[0] != 3) {
		*why = "the ClientHello's version is not 3.x";
		return CUR_BAD;
	}
	r = cur_take(hello, 32, &b); /* random */
	if (r != CUR_OK)
		return fail_why(r, why, "the ClientHello is too short for its random");
	r = cur_vec(hello, 1, &v, &n); /* legacy_session_id */
	if (r != CUR_OK)
		return fail_why(r, why, "the ClientHello's session id runs past its end");
	if (n > 32) {
		*why = "the ClientHello's session id is longer than 32 bytes";
		return CUR_BAD;
	}
	r = cur_vec(hello, 2, &v, &n); /* cipher_suites */
	if (r != CUR_OK)
		return fail_why(r, why, "the ClientHello's cipher suites run past its end");
	if (n == 0 || n % 2) {
		*why = "the ClientHello's cipher suites are not a list of 2-byte values";
		return CUR_BAD;
	}
	r = cur_vec(hello, 1, &v, &n); /* legacy_compression_methods */
	if (r != CUR_OK)
		return fail_why(r, why, "the ClientHello's compression methods run past its end");
	if (n == 0) {
		*why = "the ClientHello has no compression method";
		return CUR_BAD;
	}
	/* Before TLS 1.2 (RFC 5246 7.4.1.2) the extensions could be left out altogether. */
	if (hello->pos == hello->end) {
		*why = "the ClientHello has no extensions, so no server name";
		return hello->avail == hello->end ? CUR_OK : CUR_SHORT;
	}
	r = cur_vec(hello, 2, &exts, &n);
	if (r != CUR_OK)
		return fail_why(r, why, "the ClientHello's extensions run past its end");
	if (hello->pos != hello->end) {
		*why = "bytes follow the ClientHello's extensions";
		return CUR_BAD;
	}
	*why = "the ClientHello has no server_name extension";
	while (exts.pos < exts.end) {
		r = cur_u16(&exts, &type);
		if (r == CUR_OK)
			r = cur_vec(&exts, 2, &ext, &n);
		if (r != CUR_OK)
			return fail_why(r, why,
			                "an extension runs past the ClientHello's extensions");
		/* Encrypted Client Hello (0xfe0d) is skipped like any other extension: the
		 * inner ClientHello, and the name in it, are not seen; the outer server_name
		 * (the ECH public name) is the one the proxy decides by. */
		if (type != EXT_SERVER_NAME)
			continue;
		if (++server_names > 1) {
			*why = "the ClientHello has two server_name extensions";
			return CUR_BAD;
		}
		r = parse_server_name(&ext, found, name, why);
		if (r != CUR_OK)
			return r;
	}
	return CUR_OK;
}

static enum sni_result
invalid(const char **why, const char *reason)
{
	if (why)
		*why = reason;
	return SNI_INVALID;
}

enum sni_result
sni_parse(const uint8_t *data, size_t len, char name[static SNI_NAME_MAX + 1], const char **why)
{
	uint8_t hs[SNI_HELLO_MAX];
	size_t pos = 0, joined = 0, total = 0; /* total: the ClientHello's size, once known */
	char found_name[SNI_NAME_MAX + 1];
	const char *reason = NULL;
	struct cursor hello;
	bool found;
	int r;

	if (why)
		*why = NULL;
	/* Past one full record's worth nothing is read: the result for any longer input is the
	 * result for this much, so a caller's buffer of SNI_READ_MAX bytes always gets one. */
	if (len > SNI_READ_MAX)
		len = SNI_READ_MAX;
	if (len > 0 && data[0] & 0x80)
		return invalid(why, "an SSL 2.0 ClientHello (no server name)");

	/* Join the handshake records' fragments until the ClientHello is whole or the bytes
	 * run out. */
	while (pos < len && (total == 0 || joined < total)) {
		const uint8_t *rec = data + pos;
		size_t have = len - pos, rlen, take;

		if (rec[0] != RECORD_HANDSHAKE)
			return invalid(why, pos == 0 ? "not a TLS handshake record"
			                             : "a record that is not a handshake record "
			                               "interrupts the ClientHello");
		if (have >= 2 && rec[1] != 3)
			return invalid(why, "a TLS record whose version is not 3.x");
		if (have < RECORD_HEADER)
			break;
		rlen = (size_t)rec[3] << 8 | rec[4];
		if (rlen == 0)
			return invalid(why, "an empty handshake record");
		if (rlen > RECORD_PLAINTEXT_MAX)
			return invalid(why, "a TLS record longer than 16 KiB");

		take = rlen < have - RECORD_HEADER ? rlen : have - RECORD_HEADER;
		for (size_t i = 0; i < take && (total == 0 || joined < total); i++) {
			hs[joined++] = rec[RECORD_HEADER + i];
			if (joined == 1 && hs[0] != HANDSHAKE_CLIENT_HELLO)
				return invalid(why,
				               "the first handshake message is not a ClientHello");
			if (joined == HANDSHAKE_HEADER) {
				total = HANDSHAKE_HEADER +
				        ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3]);
				if (total > SNI_HELLO_MAX)
					return invalid(why,
					               "the ClientHello is larger than 16 KiB");
			}
		}
		if (take < rlen)
			break;
		pos += RECORD_HEADER + rlen;
	}

	if (total > 0) {
		hello = (struct cursor){
			.p = hs + HANDSHAKE_HEADER,
			.end = total - HANDSHAKE_HEADER,
			.avail = joined - HANDSHAKE_HEADER,
		};
		r = parse_client_hello(&hello, &found, found_name, &reason);
		if (r == CUR_BAD)
			return invalid(why, reason ? reason : "the ClientHello is malformed");
		if (r == CUR_OK && joined == total) {
			if (why)
				*why = found ? NULL : reason;
			if (!found)
				return SNI_NO_NAME;
			memcpy(name, found_name, strlen(found_name) + 1);
			return SNI_FOUND;
		}
	}
	if (len == SNI_READ_MAX)
		return invalid(why, "the ClientHello does not end within 16 KiB");
	return SNI_NEED_MORE;
}
