/* cmd-image.c: "image pull|ls|rm": the images the server starts sandboxes from. A pull asks
 * the server to install in the background and follows the install on the event stream, which
 * is opened first so that no event of it is missed: bars redrawn in place on a terminal,
 * plain lines otherwise. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include "cli.h"
#include "client.h"
#include "output.h"
#include "sse.h"
#include "table.h"
#include "term.h"
#include "util.h"

#define SSE_MAX (4u << 20)
#define LAYERS_MAX 128 /* the most layers the server fetches for one image */
#define REDRAW_MS 100  /* a terminal is redrawn at most this often, but for news */

enum {
	OPT_NO_WAIT = 256,
};

/* "0123456789ab": the first 12 hex digits of a sha256 digest, as people compare them, safe
 * to print (it is the server's text). */
static void
short_digest(const char *digest, char out[static 16])
{
	const char *hex = digest && str_has_prefix(digest, "sha256:") ? digest + 7 : digest;

	snprintf(out, 16, "%.12s", hex ? hex : "-");
	for (size_t i = 0; out[i]; i++)
		if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] >= 0x7f)
			out[i] = '?';
}

/* ---- pull ---- */

static const struct {
	const char *phase;
	const char *words;
} phase_words[] = {
	{ .phase = "queued", .words = "queued" },
	{ .phase = "resolve", .words = "resolving the reference" },
	{ .phase = "fetch", .words = "fetching layers" },
	{ .phase = "unpack", .words = "unpacking layers" },
	{ .phase = "disk", .words = "building the root disk" },
	{ .phase = "failed", .words = "failed" },
};

struct layer {
	char digest[16]; /* short */
	uint64_t done, total;
	int64_t index, count; /* from the server, 0-based; -1 when it did not say */
	int shown;            /* plain lines: the last tenth printed, -1 for none yet */
};

struct pull {
	struct cli *cli;
	struct sse sse;
	const char *name; /* as the user wrote it: the server's events name the image so */
	char *safe_name;
	bool tty; /* bars on a terminal, else plain lines */
	bool posted;
	bool over;
	int exit_code;
	char phase[32];
	struct layer layers[LAYERS_MAX];
	size_t n_layers;
	size_t drawn;       /* terminal: lines drawn last time, to go back over */
	uint64_t last_draw; /* CLOCK_MONOTONIC ms */
	int error;          /* writing the output failed */
};

static const char *
phase_text(const char *phase)
{
	for (size_t i = 0; i < ARRAY_SIZE(phase_words); i++)
		if (streq(phase, phase_words[i].phase))
			return phase_words[i].words;
	return phase;
}

static unsigned
tenths(const struct layer *l)
{
	return l->total ? (unsigned)MIN(l->done * 10 / l->total, 10u) : 10;
}

static void
percent_of(const struct layer *l, char out[static 8])
{
	snprintf(out, 8, "%u%%", l->total ? (unsigned)MIN(l->done * 100 / l->total, 100u) : 100);
}

static int
put(struct pull *pl, const char *text, size_t n)
{
	if (fwrite(text, 1, n, stdout) != n || fflush(stdout) == EOF) {
		pl->error = negative_errno();
		return pl->error;
	}
	return 0;
}

/* Plain output: "layer 1/2 0123456789ab: 1.2 MiB of 3.4 MiB (35%)". */
static int
plain_layer(struct pull *pl, struct layer *l)
{
	_cleanup_free_ char *line = NULL;
	char done[24], total[24], pct[8], pos[48] = "";

	if ((int)tenths(l) <= l->shown)
		return 0;
	l->shown = (int)tenths(l);
	output_bytes(l->done, done);
	output_bytes(l->total, total);
	percent_of(l, pct);
	if (l->index >= 0 && l->count > 0)
		snprintf(pos, sizeof(pos), " %lld/%lld", (long long)l->index + 1,
		         (long long)l->count);
	line = strdup_printf("layer%s %s: %s of %s (%s)\n", pos, l->digest, done, total, pct);
	return line ? put(pl, line, strlen(line)) : -ENOMEM;
}

/* One terminal line of a layer, cut to width: "0123456789ab  [=====>    ]  1.2 MiB / 3.4 MiB". */
static int
bar_line(const struct layer *l, unsigned width, struct buf *out)
{
	char done[24], total[24], bar[48], line[256];
	/* the rest of the line takes 48 columns at most */
	size_t w = MIN(MAX((size_t)width, 58u) - 48, sizeof(bar) - 1), fill;

	fill = l->total ? (size_t)(MIN(l->done, l->total) * w / l->total) : w;
	for (size_t i = 0; i < w; i++)
		bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
	bar[w] = '\0';
	output_bytes(l->done, done);
	output_bytes(l->total, total);
	snprintf(line, sizeof(line), "%-12s  [%s]  %s / %s%s", l->digest, bar, done, total,
	         l->total && l->done >= l->total ? "  done" : "");
	line[MIN((size_t)width - 1, sizeof(line) - 1)] = '\0';
	return buf_printf(out, "\r\033[K%s\n", line);
}

/* Redraws the layers and the phase in place (at most every REDRAW_MS unless force); last,
 * when not NULL, takes the phase's line for good. */
static int
draw(struct pull *pl, bool force, const char *last)
{
	_cleanup_buf_ struct buf out = BUF_INIT(1u << 20);
	_cleanup_free_ char *status = NULL;
	unsigned short rows, cols;
	uint64_t now = now_mono_ms();
	size_t first = 0, room;

	if (!force && now - pl->last_draw < REDRAW_MS)
		return 0;
	pl->last_draw = now;
	(void)term_size(STDOUT_FILENO, &rows, &cols);
	cols = MAX(cols, 20);
	/* the cursor cannot go back above the top of the window: show the newest layers */
	room = (size_t)MAX(rows, 3) - 2;
	if (pl->n_layers > room)
		first = pl->n_layers - room;
	if (pl->drawn && buf_printf(&out, "\033[%zuA", pl->drawn) < 0)
		return -ENOMEM;
	for (size_t i = first; i < pl->n_layers; i++)
		if (bar_line(&pl->layers[i], cols, &out) < 0)
			return -ENOMEM;
	status = last ? strdup(last)
	              : strdup_printf("%s: %s", pl->safe_name,
	                              pl->phase[0] ? phase_text(pl->phase) : "installing");
	if (!status)
		return -ENOMEM;
	status[MIN(strlen(status), (size_t)cols - 1)] = '\0';
	if (buf_printf(&out, "\r\033[K%s\n", status) < 0)
		return -ENOMEM;
	pl->drawn = pl->n_layers - first + 1;
	return put(pl, out.data, out.len);
}

static struct layer *
layer_get(struct pull *pl, const char *digest)
{
	char d[16];

	short_digest(digest, d);
	for (size_t i = 0; i < pl->n_layers; i++)
		if (streq(pl->layers[i].digest, d))
			return &pl->layers[i];
	if (pl->n_layers == LAYERS_MAX)
		return NULL;
	pl->layers[pl->n_layers] = (struct layer){ .index = -1, .count = -1, .shown = -1 };
	memcpy(pl->layers[pl->n_layers].digest, d, sizeof(d));
	return &pl->layers[pl->n_layers++];
}

/* A layer's progress, from an event or from the install's state in the POST answer. */
static int
layer_update(struct pull *pl, const json_t *o, const char *digest_key)
{
	size_t known = pl->n_layers;
	struct layer *l = layer_get(pl, output_str(o, digest_key));

	if (!l)
		return 0;
	l->done = (uint64_t)MAX(output_int(o, "done", 0), 0);
	l->total = (uint64_t)MAX(output_int(o, "total", 0), 0);
	l->index = output_int(o, "index", l->index);
	l->count = output_int(o, "count", l->count);
	return pl->tty ? draw(pl, pl->n_layers > known || l->done >= l->total, NULL)
	               : plain_layer(pl, l);
}

static int
phase_update(struct pull *pl, const char *phase)
{
	_cleanup_free_ char *safe = termsafe_dup(phase), *line = NULL;

	if (!safe)
		return -ENOMEM;
	snprintf(pl->phase, sizeof(pl->phase), "%s", safe);
	if (pl->tty)
		return draw(pl, true, NULL);
	line = strdup_printf("%s: %s\n", pl->safe_name, phase_text(pl->phase));
	return line ? put(pl, line, strlen(line)) : -ENOMEM;
}

/* "installed NAME (0123456789ab, 3.4 MiB)", or "NAME is already installed (...)". */
static int
say_installed(struct pull *pl, const json_t *o, bool already)
{
	_cleanup_free_ char *line = NULL;
	char digest[16], size[24];

	if (pl->cli->json)
		return 0;
	short_digest(output_str(o, "digest"), digest);
	output_bytes((uint64_t)MAX(output_int(o, "size_bytes", 0), 0), size);
	line = already ? strdup_printf("%s is already installed (%s, %s)\n", pl->safe_name, digest,
	                               size)
	               : strdup_printf("installed %s (%s, %s)\n", pl->safe_name, digest, size);
	if (!line)
		return -ENOMEM;
	if (pl->tty && pl->drawn) {
		/* the phase's line becomes the outcome's */
		line[strlen(line) - 1] = '\0';
		return draw(pl, true, line);
	}
	return put(pl, line, strlen(line));
}

/* The install has been asked for; returns 1 when there is nothing to follow. */
static int
start_install(struct pull *pl)
{
	json_t *body = json_pack("{s:s}", "image", pl->name), *img = NULL, *v;
	const char *state;
	size_t i;
	int r;

	if (!body) {
		pl->exit_code = cli_oom();
		return 1;
	}
	r = cli_call(pl->cli, "POST", "/v1/images?wait=false", body, &img);
	json_decref(body);
	if (r != 0) {
		pl->exit_code = r;
		return 1;
	}
	if (pl->cli->json && output_json_line(img) < 0)
		pl->error = -EIO;
	state = output_str(img, "state");
	if (state && streq(state, "installed")) {
		r = say_installed(pl, img, true);
		json_decref(img);
		pl->exit_code = r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
		return 1;
	}
	/* joining an install that is under way: where it stands */
	r = 0;
	json_array_foreach (json_object_get(img, "layers"), i, v)
		if (r == 0 && !pl->cli->json)
			r = layer_update(pl, v, "digest");
	json_decref(img);
	return r < 0 ? r : 0;
}

static int
on_event(void *userdata, const char *type, const char *id _unused_, const char *data, size_t len)
{
	struct pull *pl = userdata;
	json_t *ev, *d;
	const char *image;
	int r = 0;

	if (!str_has_prefix(type, "image."))
		return 0; /* the sandboxes' events share the stream */
	ev = json_loadb(data, len, 0, NULL);
	d = json_object_get(ev, "data");
	image = output_str(d, "image");
	if (!image || !streq(image, pl->name)) {
		json_decref(ev);
		return 0;
	}
	if (pl->cli->json && output_json_line(ev) < 0)
		r = -EIO;
	if (r == 0 && streq(type, "image.progress") && !pl->cli->json)
		r = output_str(d, "phase") ? phase_update(pl, output_str(d, "phase"))
		                           : layer_update(pl, d, "layer");
	else if (r == 0 && streq(type, "image.installed")) {
		r = say_installed(pl, d, false);
		pl->over = true;
		pl->exit_code = CLI_EXIT_OK;
	} else if (r == 0 && streq(type, "image.failed")) {
		_cleanup_free_ char *why =
		        termsafe_dup(output_str(d, "error") ?: "no reason given");
		if (pl->tty && pl->drawn && !pl->cli->json) {
			snprintf(pl->phase, sizeof(pl->phase), "failed");
			(void)draw(pl, true, NULL);
		}
		output_error("cannot install '%s': %s", pl->safe_name, why ? why : "?");
		pl->over = true;
		pl->exit_code = CLI_EXIT_FAILED;
	}
	json_decref(ev);
	if (r < 0) {
		pl->error = r;
		return r;
	}
	return pl->over ? 1 : 0;
}

static int
on_chunk(void *userdata, const char *p, size_t n)
{
	struct pull *pl = userdata;
	int r;

	if (!pl->posted) {
		/* the server subscribes a stream before it writes its first byte: from here on no
		 * event of the install can be missed */
		pl->posted = true;
		r = start_install(pl);
		if (r != 0)
			return r;
	}
	return sse_feed(&pl->sse, p, n);
}

/* POST ?wait=false, then what the event stream says until the install ends. */
static int
pull_follow(struct cli *cli, const char *name)
{
	_cleanup_(client_response_done) struct client_response resp = { 0 };
	_cleanup_(client_freep) struct client *stream = NULL;
	_cleanup_free_ char *safe = termsafe_dup(name);
	struct pull pl = { .cli = cli, .name = name, .safe_name = safe };
	int r;

	if (!safe)
		return cli_oom();
	pl.tty = !cli->json && isatty(STDOUT_FILENO);
	/* the requests go on cli's own connection while this one streams */
	r = cli_client_another(cli, &stream);
	if (r != 0)
		return r;
	sse_init(&pl.sse, SSE_MAX, on_event, &pl);
	r = client_stream(stream, "/v1/events/stream", on_chunk, &pl, &resp);
	sse_done(&pl.sse);
	if (pl.error) {
		output_error("cannot write the output: %s", strerror(-pl.error));
		return CLI_EXIT_FAILED;
	}
	if (r == 1)
		return pl.exit_code; /* stopped on purpose: the pull is over */
	if (r == -ENOBUFS) {
		output_error("an event from %s is larger than %u MiB", client_endpoint(stream),
		             SSE_MAX >> 20);
		r = CLI_EXIT_FAILED;
	} else if (r < 0) {
		r = cli_fail_transport_on(stream, r);
	} else if (resp.status < 200 || resp.status > 299) {
		return cli_fail_status(cli, &resp);
	} else {
		output_error("%s ended the event stream", client_endpoint(stream));
		r = CLI_EXIT_UNREACHABLE;
	}
	if (pl.posted)
		output_error("hint: the install goes on without sandbox-cli: 'sandbox-cli image "
		             "ls' shows where it stands, 'sandbox-cli image pull %s' follows it "
		             "again",
		             safe);
	return r;
}

/* --no-wait: "NAME: installing" (or installed), or the object with --json. */
static int
pull_no_wait(struct cli *cli, const char *name)
{
	json_t *body = json_pack("{s:s}", "image", name), *img = NULL;
	_cleanup_free_ char *safe = NULL, *state = NULL;
	int r;

	if (!body)
		return cli_oom();
	r = cli_call(cli, "POST", "/v1/images?wait=false", body, &img);
	json_decref(body);
	if (r != 0)
		return r;
	if (cli->json) {
		r = output_json_line(img) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
		json_decref(img);
		return r;
	}
	safe = termsafe_dup(name);
	state = termsafe_dup(output_str(img, "state") ?: "?");
	json_decref(img);
	if (!safe || !state)
		return cli_oom();
	printf("%s: %s\n", safe, state);
	return CLI_EXIT_OK;
}

static int
image_pull(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "no-wait", no_argument, NULL, OPT_NO_WAIT },
		{ NULL, 0, NULL, 0 },
	};
	bool wait = true;
	int c;

	while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
		switch (c) {
		case OPT_NO_WAIT:
			wait = false;
			break;
		default:
			return cli_option_end(cli, c);
		}
	}
	if (argc - optind != 1 || !*argv[optind])
		return cli_usage_error(cli, "needs one IMAGE (such as python:3.13-slim)");
	return wait ? pull_follow(cli, argv[optind]) : pull_no_wait(cli, argv[optind]);
}

/* ---- ls ---- */

/* STATE: "installing 45%" while the layers come (of what is known so far). */
static void
state_cell(const json_t *img, char out[static 48])
{
	const char *state = output_str(img, "state");
	uint64_t done = 0, total = 0;
	json_t *l;
	size_t i;

	snprintf(out, 48, "%s", state ? state : "-");
	if (!state || !streq(state, "installing"))
		return;
	json_array_foreach (json_object_get(img, "layers"), i, l) {
		done += (uint64_t)MAX(output_int(l, "done", 0), 0);
		total += (uint64_t)MAX(output_int(l, "total", 0), 0);
	}
	if (total)
		snprintf(out, 48, "installing %u%%", (unsigned)MIN(done * 100 / total, 100u));
}

static int
image_ls(struct cli *cli, int argc, char **argv)
{
	static const char *const headers[] = { "IMAGE",  "STATE",   "SIZE",
		                               "IN USE", "DEFAULT", "DIGEST" };
	_cleanup_(table_freep) struct table *t = NULL;
	json_t *answer = NULL, *list, *img;
	size_t i;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind < argc)
		return cli_usage_error(cli, "takes no arguments");
	r = cli_get_list(cli, "/v1/images", "images", &answer, &list);
	if (r >= 0)
		return r;
	t = table_new(ARRAY_SIZE(headers), headers);
	if (!t) {
		json_decref(answer);
		return cli_oom();
	}
	json_array_foreach (list, i, img) {
		char state[48], size[24] = "-", in_use[24], digest[16];
		const char *st = output_str(img, "state");
		if (st && streq(st, "installed"))
			output_bytes((uint64_t)MAX(output_int(img, "size_bytes", 0), 0), size);
		state_cell(img, state);
		snprintf(in_use, sizeof(in_use), "%lld", (long long)output_int(img, "in_use", 0));
		short_digest(output_str(img, "digest"), digest);
		const char *row[] = { output_str(img, "image"),
			              state,
			              size,
			              in_use,
			              json_is_true(json_object_get(img, "default")) ? "*" : "",
			              digest };
		if (table_add(t, row) < 0) {
			json_decref(answer);
			return cli_oom();
		}
	}
	json_decref(answer);
	if (table_rows(t) == 0) {
		fprintf(stderr, "No images.\n");
		return CLI_EXIT_OK;
	}
	table_print(t, stdout);
	return CLI_EXIT_OK;
}

/* ---- rm ---- */

static int
image_rm(struct cli *cli, int argc, char **argv)
{
	/* one path segment each: the name's ':', '/' and '@' are escaped */
	return cli_delete_each(cli, argc, argv, "/v1/images/",
	                       "needs an IMAGE (see 'sandbox-cli image ls')");
}

static const struct verb image_verbs[] = {
	{ .name = "image pull",
	  .usage = "image pull [--no-wait] IMAGE",
	  .summary = "Install an image on the server, showing each layer's progress.",
	  .help = "  --no-wait  return at once, once the install has begun; print its state\n"
	          "\n"
	          "IMAGE is a reference such as python:3.13-slim (Docker Hub), ghcr.io/o/r:tag\n"
	          "or NAME@sha256:DIGEST. On a terminal each layer has a bar redrawn in place;\n"
	          "otherwise a line is printed per phase and per tenth of each layer. The exit\n"
	          "code is 0 once it is installed, 1 when the install failed (the registry's\n"
	          "reason is printed). The install goes on when sandbox-cli is interrupted.\n"
	          "With --json: the server's image object, then each image event as a line.\n"
	          "Needs the operator's (or an admin's) rights.\n",
	  .run = image_pull },
	{ .name = "image ls",
	  .usage = "image ls",
	  .summary = "List the server's images: state, size, sandboxes using them.",
	  .help = "Columns: IMAGE, STATE (installed, installing with its progress, or absent:\n"
	          "the default image before its first use), SIZE (of its root disk), IN USE\n"
	          "(sandboxes not terminated that started from it), DEFAULT (* for the image a\n"
	          "create without --image gets), DIGEST (the first 12 hex digits).\n"
	          "With --json, the server's {images} object.\n",
	  .run = image_ls },
	{ .name = "image rm",
	  .usage = "image rm IMAGE...",
	  .summary = "Remove installed images (not while a sandbox uses one).",
	  .help = "The default image and the built-in one are kept (exit 6, like an image in\n"
	          "use). Layers no other image uses are collected by the server.\n",
	  .run = image_rm },
};

int
cmd_image(struct cli *cli, int argc, char **argv)
{
	const struct verb *parent = cli->verb;

	if (argc >= 2 && (streq(argv[1], "-h") || streq(argv[1], "--help"))) {
		cli_verb_help(parent, stdout);
		return CLI_EXIT_OK;
	}
	if (argc < 2)
		return cli_usage_error(cli, "needs pull, ls or rm");
	for (size_t i = 0; i < ARRAY_SIZE(image_verbs); i++) {
		if (!streq(image_verbs[i].name + strlen("image "), argv[1]))
			continue;
		cli->verb = &image_verbs[i];
		return image_verbs[i].run(cli, argc - 1, argv + 1);
	}
	return cli_usage_error(cli, "unknown verb; use pull, ls or rm");
}
