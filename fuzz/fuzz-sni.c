/* fuzz-sni.c: egress/sni.c fed a guest's first bytes, whole and in prefixes, as the proxy feeds
 * it while they arrive. Invariants: once a prefix is decided (anything but SNI_NEED_MORE), every
 * longer prefix and the whole input get the same answer and the same name; SNI_NEED_MORE only
 * while under SNI_READ_MAX bytes; a name is lowercase DNS characters in dot-separated labels
 * that appears in the records' fragments as they were sent (case aside): never one made up. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz.h"
#include "sni.h"
#include "util.h"

/* Every prefix of inputs this short; beyond, a spread of them (each call reads up to 16 KiB). */
#define ALL_PREFIXES_MAX 1024
#define PREFIX_SAMPLES 128

static bool
appears_folded(const uint8_t *data, size_t size, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i + n <= size; i++) {
		size_t j = 0;

		while (j < n && (data[i + j] == (uint8_t)name[j] ||
		                 (data[i + j] >= 'A' && data[i + j] <= 'Z' &&
		                  data[i + j] - 'A' + 'a' == name[j])))
			j++;
		if (j == n)
			return true;
	}
	return false;
}

/* The records' fragments joined, as far as the input goes (no checks: just where a name may
 * come from when a ClientHello is split across records). */
static size_t
fragments(const uint8_t *data, size_t size, uint8_t *out)
{
	size_t pos = 0, n = 0;

	while (pos + 5 <= size) {
		size_t len = (size_t)data[pos + 3] << 8 | data[pos + 4];
		size_t take = MIN(len, size - pos - 5);

		memcpy(out + n, data + pos + 5, take);
		n += take;
		pos += 5 + len;
	}
	return n;
}

static void
check_name(const uint8_t *data, size_t size, const char *name)
{
	_cleanup_free_ uint8_t *joined = NULL;
	size_t n = strlen(name), label = 0;

	FUZZ_CHECK(n > 0 && n <= SNI_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
		           c == '_' || c == '.');
		if (c == '.') {
			FUZZ_CHECK(label > 0);
			label = 0;
		} else {
			label++;
			FUZZ_CHECK(label <= 63);
		}
	}
	FUZZ_CHECK(label > 0); /* no trailing dot, no empty last label */
	joined = malloc(size + 1);
	FUZZ_CHECK(joined != NULL);
	FUZZ_CHECK(appears_folded(joined, fragments(data, size, joined), name));
}

static enum sni_result
parse_checked(const uint8_t *data, size_t size, char name[static SNI_NAME_MAX + 1])
{
	const char *why = "unset";
	enum sni_result r = sni_parse(data, size, name, &why);

	switch (r) {
	case SNI_FOUND:
		FUZZ_CHECK(why == NULL);
		check_name(data, size, name);
		break;
	case SNI_NEED_MORE:
		FUZZ_CHECK(why == NULL);
		FUZZ_CHECK(size < SNI_HELLO_MAX + 5);
		break;
	case SNI_NO_NAME:
	case SNI_INVALID:
		FUZZ_CHECK(why != NULL && *why != '\0');
		break;
	default:
		FUZZ_CHECK(!"an answer outside enum sni_result");
	}
	return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char whole_name[SNI_NAME_MAX + 1], first_name[SNI_NAME_MAX + 1], name[SNI_NAME_MAX + 1];
	enum sni_result whole, first = SNI_NEED_MORE;
	size_t step = size <= ALL_PREFIXES_MAX ? 1 : size / PREFIX_SAMPLES + 1;

	whole = parse_checked(data, size, whole_name);

	for (size_t i = 0; i <= size; i += step) {
		enum sni_result r = parse_checked(data, i, name);

		if (first != SNI_NEED_MORE) {
			FUZZ_CHECK(r == first);
			if (r == SNI_FOUND)
				FUZZ_CHECK(streq(name, first_name));
		} else if (r != SNI_NEED_MORE) {
			first = r;
			if (r == SNI_FOUND)
				memcpy(first_name, name, sizeof(name));
		}
		if (step > 1 && i + step > size && i != size)
			i = size - step; /* sampling: still end on the whole input */
	}
	if (first != SNI_NEED_MORE) {
		FUZZ_CHECK(whole == first);
		if (whole == SNI_FOUND)
			FUZZ_CHECK(streq(whole_name, first_name));
	}
	return 0;
}
