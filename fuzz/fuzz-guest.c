/* fuzz-guest.c: what sandbox-guestd does with the host's bytes before acting on them, and its
 * output ring. The guest trusts the host, but a confused or stale stream must never crash it.
 *
 * An input is split at the first "\n--ring--\n": before it, a byte stream decoded the way the
 * agent decodes the port (hunting for AP_MAGIC, re-hunting after a violation, fed in chunks
 * the data chooses) with every payload parsed by the guest's request parsers; after it, ring
 * operations checked against a model of every byte written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agentproto.h"
#include "frame.h"
#include "fuzz.h"
#include "request.h"
#include "ring.h"
#include "util.h"

#define RING_SEP "\n--ring--\n"

static void
check_strv(char **v, size_t n)
{
	FUZZ_CHECK(v == NULL ? n == 0 : v[n] == NULL);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK(v[i] != NULL);
}

/* The identity a HELLO carries, as the guest checks it before acting on it (identity.c). */
static void
check_identity(const struct request_hello *h)
{
	struct request_net n;

	check_strv(h->volumes, h->nvolumes);
	FUZZ_CHECK(h->nvolumes <= REQUEST_MAX_VOLUMES);
	if (h->net && request_parse_net(h->net, &n) == 0) {
		FUZZ_CHECK(n.none == (h->net[0] == '\0'));
		FUZZ_CHECK(n.none ||
		           (n.prefix >= 8 && n.prefix <= 30 && n.guest_addr != n.host_addr));
	}
	if (h->machine_id && request_machine_id_valid(h->machine_id))
		FUZZ_CHECK(strlen(h->machine_id) == 32);
	for (size_t i = 0; i < h->nvolumes; i++) {
		struct request_volume v;
		if (request_parse_volume(h->volumes[i], &v) < 0)
			continue;
		FUZZ_CHECK(strncmp(v.dev, "/dev/", 5) == 0 && request_path_valid(v.dev));
		FUZZ_CHECK(request_mount_allowed(v.mount) && request_path_valid(v.mount));
		FUZZ_CHECK(strncmp(v.mount, "/sandbox/", 9) == 0 ||
		           strncmp(v.mount, "/mnt/", 5) == 0);
		FUZZ_CHECK(strcmp(v.mount, "/sandbox/home") != 0 && !strstr(v.mount, "/../"));
		request_volume_done(&v);
	}
}

static void
parse_payload(const struct frame *f)
{
	switch (f->type) {
	case AP_HELLO: {
		struct request_hello h;
		if (request_parse_hello(f->payload, f->len, &h) == 0) {
			check_strv(h.env, h.nenv);
			FUZZ_CHECK(!h.home || request_path_valid(h.home));
			check_identity(&h);
			request_hello_done(&h);
		}
		break;
	}
	case AP_EXEC: {
		struct request_exec e;
		if (request_parse_exec(f->payload, f->len, &e) == 0) {
			FUZZ_CHECK(e.argc >= 1);
			check_strv(e.argv, e.argc);
			check_strv(e.env, e.nenv);
			FUZZ_CHECK(e.rows > 0 && e.cols > 0);
			FUZZ_CHECK(!e.cwd || e.cwd[0] == '/');
			request_exec_done(&e);
		}
		break;
	}
	case AP_FILE_READ:
	case AP_FILE_WRITE:
	case AP_FILE_LIST:
	case AP_FILE_REMOVE: {
		struct request_file r;
		if (request_parse_file(f->payload, f->len, &r) == 0) {
			FUZZ_CHECK(r.path && request_path_valid(r.path));
			FUZZ_CHECK(r.path[0] == '/' && !strstr(r.path, "/../") &&
			           !strstr(r.path, "//"));
			request_file_done(&r);
		}
		break;
	}
	default:
		break;
	}
}

/* The agent's loop: feed a chunk, drain frames, and after a violation hunt again from the
 * byte after the bad frame's start. */
static void
decode(const uint8_t *data, size_t size)
{
	struct frame_decoder d;
	size_t off = 0;

	frame_decoder_init(&d, AP_FRAME_MAX, true);
	while (off < size) {
		size_t n = MIN(size - off, (size_t)(data[off] % 64) + 1);
		struct frame f;
		bool ns;
		int r = frame_decoder_feed(&d, data + off, n);

		off += n;
		for (;;) {
			if (r < 0) {
				size_t left = buf_avail(&d.in);
				char *rest = left > 1 ? malloc(left - 1) : NULL;
				if (rest)
					memcpy(rest, buf_head(&d.in) + 1, left - 1);
				frame_decoder_reset(&d, true);
				if (rest)
					FUZZ_CHECK(frame_decoder_feed(&d, rest, left - 1) == 0);
				free(rest);
			}
			r = frame_decoder_next(&d, &f, &ns);
			if (r == 0)
				break;
			if (r == 1) {
				FUZZ_CHECK(f.len <= AP_FRAME_MAX);
				parse_payload(&f);
			}
		}
	}
	frame_decoder_done(&d);
}

/* Each op byte: bit 0 the stream, the rest a length (times 3); the bytes are the op's index.
 * A 64-byte ring wraps constantly; everything kept is read back and compared. */
static void
ring_ops(const uint8_t *data, size_t size)
{
	const size_t max = 64;
	size_t cap_model = 1 << 16, total = 0;
	uint8_t *model = malloc(cap_model), *model_s = malloc(cap_model);
	struct ring r;

	FUZZ_CHECK(model && model_s);
	ring_init(&r, max);
	for (size_t i = 0; i < size; i++) {
		uint8_t s = data[i] & 1 ? AP_STDERR : AP_STDOUT;
		size_t n = (size_t)(data[i] >> 1) * 3, got = 0;
		uint8_t buf[400];

		if (total + n > cap_model)
			break;
		for (size_t k = 0; k < n; k++) {
			buf[k] = (uint8_t)(i + k);
			model[total + k] = buf[k];
			model_s[total + k] = s;
		}
		FUZZ_CHECK(ring_write(&r, s, buf, n) == 0);
		total += n;
		FUZZ_CHECK(ring_end(&r) == total);
		FUZZ_CHECK(ring_start(&r) == (total > max ? total - max : 0));
		for (uint64_t at = ring_start(&r); at < total; at += got) {
			const uint8_t *p;
			uint8_t st;
			got = ring_peek(&r, at, 1 + data[i] % 50, &st, &p);
			FUZZ_CHECK(got > 0);
			FUZZ_CHECK(memcmp(p, model + at, got) == 0);
			for (size_t k = 0; k < got; k++)
				FUZZ_CHECK(model_s[at + k] == st);
			/* a run ends where the stream changes, unless memory or max ends it */
			FUZZ_CHECK(at + got == total || got == 1 + (size_t)(data[i] % 50) ||
			           model_s[at + got] != st ||
			           (r.head + (at - r.start) + got) % max == 0);
		}
	}
	ring_free(&r);
	free(model);
	free(model_s);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *sep = memmem(data, size, RING_SEP, strlen(RING_SEP));

	if (!sep) {
		decode(data, size);
		return 0;
	}
	decode(data, (size_t)(sep - data));
	ring_ops(sep + strlen(RING_SEP), size - (size_t)(sep - data) - strlen(RING_SEP));
	return 0;
}
