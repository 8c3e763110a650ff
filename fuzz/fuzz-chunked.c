/* fuzz-chunked.c: the egress proxy's reader of chunked request bodies (egress/proxy.c,
 * chunked_scan), which decides where a guest's next request head - and so its Host - starts.
 * Fed the input whole and in pieces cut where the input's first bytes say (as a connection's
 * reads would bring it). Invariants: the verdict and where the body ends do not depend on how
 * the bytes arrived; an end lies within the input; a refusal says why; a body that ended, fed
 * again alone, ends at the same byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz.h"
#include "chunked.h"

struct outcome {
	enum chunked_result r;
	size_t end; /* bytes of body, for CHUNKED_DONE */
};

/* Feeds data[0..len) in pieces of the sizes cuts[] gives (cycled; 0 means 1). */
static struct outcome
feed(const uint8_t *data, size_t len, const uint8_t *cuts, size_t ncuts)
{
	struct chunked s = CHUNKED_INIT;
	size_t off = 0, k = 0;

	while (off < len) {
		size_t piece = ncuts ? (size_t)cuts[k++ % ncuts] + 1 : len - off, used = 0;
		const char *why = NULL;
		enum chunked_result r;

		if (piece > len - off)
			piece = len - off;
		r = chunked_scan(&s, data + off, piece, &used, &why);
		if (r == CHUNKED_INVALID) {
			FUZZ_CHECK(why && *why);
			return (struct outcome){ CHUNKED_INVALID, 0 };
		}
		if (r == CHUNKED_DONE) {
			FUZZ_CHECK(used <= piece);
			return (struct outcome){ CHUNKED_DONE, off + used };
		}
		FUZZ_CHECK(r == CHUNKED_MORE);
		off += piece;
	}
	return (struct outcome){ CHUNKED_MORE, 0 };
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *cuts = data;
	size_t ncuts = size ? data[0] % 8 : 0;
	struct outcome whole, pieces, bytes, again;

	/* the first byte says how many of the next bytes are cut sizes; the rest is the body */
	if (size < 1 + ncuts)
		return 0;
	cuts = data + 1;
	data += 1 + ncuts;
	size -= 1 + ncuts;

	whole = feed(data, size, NULL, 0);
	pieces = feed(data, size, cuts, ncuts);
	bytes = feed(data, size, (const uint8_t[]){ 0 }, 1);
	FUZZ_CHECK(whole.r == pieces.r && whole.r == bytes.r);
	FUZZ_CHECK(whole.end == pieces.end && whole.end == bytes.end);
	if (whole.r == CHUNKED_DONE) {
		FUZZ_CHECK(whole.end <= size && whole.end >= 5); /* at least "0\r\n\r\n" */
		again = feed(data, whole.end, NULL, 0);
		FUZZ_CHECK(again.r == CHUNKED_DONE && again.end == whole.end);
	}
	return 0;
}
