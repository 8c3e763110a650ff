/* fuzz.h: the libFuzzer entry point every fuzz/fuzz-*.c defines. Built either against
 * libFuzzer (FUZZ=ON, clang) or against replay-main.c, which runs it over corpus files. */
#pragma once

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Stops the run the way a sanitizer would: a broken invariant is a finding, not a skip. */
#define FUZZ_CHECK(cond)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__,       \
			        #cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)
