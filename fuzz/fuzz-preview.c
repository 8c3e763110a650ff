/* fuzz-preview.c: what a browser (or anyone) sends the preview listener before it is trusted:
 * the Host header a preview is chosen by (daemon/core/preview.c) and a token. The input's first
 * line is the Host header, the rest a token. Accepted hosts are checked: the sandbox id is
 * valid, the port 1..65535, and writing the preview's host back gives the header's host
 * (lowercase, without its port and final dot): one preview, one spelling. A token is valid
 * only for the id and port it was made for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz.h"
#include "preview.h"
#include "util.h"

static const uint8_t key[PREVIEW_KEY_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_cleanup_free_ char *text = malloc(size + 1);
	char id[SANDBOX_ID_MAX + 1], again[400], lower[400], tok[PREVIEW_TOKEN_LEN + 1];
	const char *domains[] = { "localhost", "preview.example.com", "x" };
	unsigned port;
	char *nl, *token = "";

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	nl = strchr(text, '\n');
	if (nl) {
		*nl = '\0';
		token = nl + 1;
	}
	for (size_t d = 0; d < sizeof(domains) / sizeof(domains[0]); d++) {
		size_t n = 0;

		if (preview_host_parse(text, domains[d], id, &port) < 0)
			continue;
		FUZZ_CHECK(sandbox_id_valid(id));
		FUZZ_CHECK(port >= 1 && port <= 65535);
		FUZZ_CHECK(preview_host(id, port, domains[d], again, sizeof(again)) == 0);
		for (; text[n] && text[n] != ':' && n + 1 < sizeof(lower); n++)
			lower[n] =
			        (char)(text[n] >= 'A' && text[n] <= 'Z' ? text[n] + 32 : text[n]);
		if (n > 1 && lower[n - 1] == '.')
			n--;
		lower[n] = '\0';
		FUZZ_CHECK(streq(lower, again));
		/* the token made for it opens it, and not the port next to it */
		preview_token(key, id, port, tok);
		FUZZ_CHECK(preview_token_valid(key, id, port, tok, strlen(tok)));
		FUZZ_CHECK(!preview_token_valid(key, id, port == 65535 ? 1 : port + 1, tok,
		                                strlen(tok)));
		if (preview_token_valid(key, id, port, token, strlen(token)))
			FUZZ_CHECK(streq(token, tok));
	}
	return 0;
}
