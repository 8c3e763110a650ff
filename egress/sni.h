/* sni.h: the server name a TLS client asks for, read from its ClientHello before anything is
 * dialled. The proxy decides by that name alone; without one there is no connection (no
 * fallback to the destination address). Pure and incremental: it is fed what has arrived so
 * far and says whether it needs more. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define SNI_HELLO_MAX (16u * 1024) /* bytes of handshake records read before giving up */
#define SNI_NAME_MAX 253
/* Added by sni.c: the most bytes sni_parse() ever reads (one record header and a full 16 KiB of
 * fragment; a ClientHello split over several records has the same room, headers included). A
 * caller whose buffer holds this much always gets an answer other than SNI_NEED_MORE; what
 * comes after the ClientHello is never read and is the caller's to forward. */
#define SNI_READ_MAX (SNI_HELLO_MAX + 5)

enum sni_result {
	SNI_FOUND,     /* *name holds the server name (lowercase, no trailing dot) */
	SNI_NEED_MORE, /* a well-formed prefix: feed more bytes (still under SNI_HELLO_MAX) */
	SNI_NO_NAME,   /* a complete ClientHello without a server_name (or an empty one) */
	SNI_INVALID,   /* not TLS, not a ClientHello, malformed, over SNI_HELLO_MAX, an SSL 2
	                * hello, a name that is not a DNS host name (an IP literal included) */
};

/* Reads the TLS records in data[0..len) (the connection's first bytes): handshake records
 * (content type 22, version 3.x) whose fragments, joined, hold one ClientHello (possibly
 * split over several records); finds the server_name extension's host_name entry. *why
 * (static text) says what was wrong for SNI_INVALID and SNI_NO_NAME. */
/* Added by sni.c: how it reads. Nothing is allocated (the fragments are joined in a fixed
 * SNI_HELLO_MAX buffer on the stack) and nothing past the ClientHello's end is looked at, so a
 * decision never changes as more bytes arrive: SNI_INVALID as soon as the bytes prove it,
 * SNI_FOUND and SNI_NO_NAME only once the whole ClientHello is there. With Encrypted Client
 * Hello (extension 0xfe0d) the name found is the outer one (the ECH public name); the inner
 * ClientHello and the name in it are never seen. */
enum sni_result sni_parse(const uint8_t *data, size_t len, char name[static SNI_NAME_MAX + 1],
                          const char **why);
