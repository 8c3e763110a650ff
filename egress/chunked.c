/* chunked.c: the reader of chunked request bodies (chunked.h). */
#include <stdbool.h>
#include "chunked.h"
#include "util.h"

static bool
line_byte_ok(uint8_t c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

#define CHUNKED_LINE_MAX 4096
#define CHUNKED_TRAILER_MAX (16u * 1024)

enum chunked_result
chunked_scan(struct chunked *s, const uint8_t *p, size_t n, size_t *ret_used, const char **why)
{
	size_t i = 0;

#define INVALID(text)                                                                              \
	do {                                                                                       \
		*why = (text);                                                                     \
		return CHUNKED_INVALID;                                                            \
	} while (0)

	while (i < n) {
		uint8_t c = p[i];
		int h;

		switch (s->st) {
		case CHUNKED_SIZE_FIRST:
			h = hex_digit(c);
			if (h < 0)
				INVALID("a chunk size that is not hexadecimal");
			s->left = (uint64_t)h;
			s->digits = 1;
			s->st = CHUNKED_SIZE;
			break;
		case CHUNKED_SIZE:
			h = hex_digit(c);
			if (h >= 0) {
				/* 15 digits: 2^60, far past any body, and never an overflow */
				if (++s->digits > 15)
					INVALID("a chunk size too large");
				s->left = s->left * 16 + (uint64_t)h;
			} else if (c == ';') {
				s->st = CHUNKED_EXT;
				s->line = 0;
			} else if (c == '\r')
				s->st = CHUNKED_SIZE_LF;
			else
				INVALID("a chunk size followed by something other than ';' or "
				        "CRLF");
			break;
		case CHUNKED_EXT:
			if (c == '\r')
				s->st = CHUNKED_SIZE_LF;
			else if (!line_byte_ok(c))
				INVALID("a control character or bare LF in a chunk extension");
			else if (++s->line > CHUNKED_LINE_MAX)
				INVALID("a chunk extension too long");
			break;
		case CHUNKED_SIZE_LF:
			if (c != '\n')
				INVALID("a CR without LF after a chunk size");
			s->st = s->left == 0 ? CHUNKED_TRAILER_START : CHUNKED_DATA;
			break;
		case CHUNKED_DATA: {
			size_t k = (size_t)MIN((uint64_t)(n - i), s->left);

			s->left -= k;
			i += k;
			if (s->left == 0)
				s->st = CHUNKED_DATA_CR;
			continue;
		}
		case CHUNKED_DATA_CR:
			if (c != '\r')
				INVALID("chunk data longer than its size");
			s->st = CHUNKED_DATA_LF;
			break;
		case CHUNKED_DATA_LF:
			if (c != '\n')
				INVALID("chunk data not ended by CRLF");
			s->st = CHUNKED_SIZE_FIRST;
			break;
		case CHUNKED_TRAILER_START:
			if (c == '\r') {
				s->st = CHUNKED_END_LF;
				break;
			}
			if (c == ' ' || c == '\t' || !line_byte_ok(c))
				INVALID("a trailer line that is folded or holds a control "
				        "character");
			s->st = CHUNKED_TRAILER;
			s->trailer++;
			break;
		case CHUNKED_TRAILER:
			if (c == '\r')
				s->st = CHUNKED_TRAILER_LF;
			else if (!line_byte_ok(c))
				INVALID("a control character or bare LF in a trailer");
			else if (++s->trailer > CHUNKED_TRAILER_MAX)
				INVALID("trailers too long");
			break;
		case CHUNKED_TRAILER_LF:
			if (c != '\n')
				INVALID("a CR without LF in a trailer");
			s->st = CHUNKED_TRAILER_START;
			break;
		case CHUNKED_END_LF:
			if (c != '\n')
				INVALID("a CR without LF at the end of a chunked body");
			*ret_used = i + 1;
			s->st = CHUNKED_SIZE_FIRST;
			return CHUNKED_DONE;
		}
		i++;
	}
#undef INVALID
	*ret_used = n;
	return CHUNKED_MORE;
}
