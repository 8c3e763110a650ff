/* cmd-events.c: "events": a sandbox's audit trail as a table, or the live Server-Sent Events
 * stream, parsed as it arrives and printed one line per event. Following one sandbox prints
 * its trail first and resumes the stream right after it (the answer's last_seq), so nothing
 * falls between; from the stream it prints the audit records its events carry. */
#include <errno.h>
#include <stdlib.h>
#include "cli.h"
#include "client.h"
#include "output.h"
#include "sse.h"
#include "table.h"
#include "util.h"

#define SSE_MAX (4u << 20)

enum {
	OPT_FOLLOW = 256,
	OPT_SINCE,
};

/* ---- what an event says, in a few words ---- */

/* The live stream's own types: its data under "data". */

static void
detail_created(const json_t *data, struct buf *out)
{
	char mem[24], disk[24];
	const char *k;
	json_t *v;
	bool first = true;

	output_mib((uint64_t)output_int(data, "memory_mb", 0), mem);
	output_mib((uint64_t)output_int(data, "disk_mb", 0), disk);
	(void)buf_printf(out, "image %s, %lld cpu, %s memory, %s disk",
	                 output_str(data, "image") ? output_str(data, "image") : "?",
	                 (long long)output_int(data, "cpus", 0), mem, disk);
	json_object_foreach (json_object_get(data, "labels"), k, v) {
		(void)buf_printf(out, "%s%s=%s", first ? ", labels " : ",", k,
		                 json_string_value(v) ? json_string_value(v) : "?");
		first = false;
	}
}

static void
detail_state(const json_t *data, struct buf *out)
{
	const char *from = output_str(data, "from"), *to = output_str(data, "to");
	const char *reason = output_str(data, "reason");

	if (from && to)
		(void)buf_printf(out, "%s -> %s", from, to);
	if (reason)
		(void)buf_printf(out, "%s(%s)", from && to ? " " : "", reason);
}

static void
detail_updated(const json_t *data, struct buf *out)
{
	json_t *v;
	size_t i;

	json_array_foreach (json_object_get(data, "fields"), i, v)
		(void)buf_printf(out, "%s%s", i ? ", " : "changed ",
		                 json_string_value(v) ? json_string_value(v) : "?");
}

static void
detail_reason(const json_t *data, struct buf *out)
{
	const char *reason = output_str(data, "reason");

	(void)buf_puts(out, reason ? reason : "");
}

static const struct detail_format {
	const char *type;
	void (*fn)(const json_t *data, struct buf *out);
} stream_formats[] = {
	{ .type = "created", .fn = detail_created },
	{ .type = "state", .fn = detail_state },
	{ .type = "updated", .fn = detail_updated },
	{ .type = "destroy_failed", .fn = detail_reason },
};

/* The audit trail's records (GET …/events): flat, their fields beside "type". */

static void
names_of(const json_t *arr, struct buf *out)
{
	json_t *v;
	size_t i;

	json_array_foreach (arr, i, v)
		(void)buf_printf(out, "%s%s", i ? "," : "",
		                 json_string_value(v) ? json_string_value(v) : "?");
}

static void
audit_created(const json_t *r, struct buf *out)
{
	const json_t *net = json_object_get(r, "network");
	const char *k;
	json_t *v;
	bool first = true;

	(void)buf_printf(out, "image %s, network %s",
	                 output_str(r, "image") ? output_str(r, "image") : "?",
	                 output_str(net, "mode") ? output_str(net, "mode") : "?");
	json_object_foreach (json_object_get(r, "labels"), k, v) {
		(void)buf_printf(out, "%s%s=%s", first ? ", labels " : ",", k,
		                 json_string_value(v) ? json_string_value(v) : "?");
		first = false;
	}
	if (json_array_size(json_object_get(r, "env_names"))) {
		(void)buf_puts(out, ", env ");
		names_of(json_object_get(r, "env_names"), out);
	}
	if (output_str(r, "reason"))
		(void)buf_printf(out, " (%s)", output_str(r, "reason"));
}

static void
audit_network(const json_t *r, struct buf *out)
{
	const json_t *net = json_object_get(r, "network");

	(void)buf_printf(out, "network %s",
	                 output_str(net, "mode") ? output_str(net, "mode") : "?");
	if (json_array_size(json_object_get(net, "allow"))) {
		(void)buf_puts(out, ", allow ");
		names_of(json_object_get(net, "allow"), out);
	}
	if (json_array_size(json_object_get(net, "deny"))) {
		(void)buf_puts(out, ", deny ");
		names_of(json_object_get(net, "deny"), out);
	}
}

static void
audit_process_started(const json_t *r, struct buf *out)
{
	int64_t n = output_int(r, "arg_count", 0);

	(void)buf_printf(out, "pid %lld: %s, %lld argument%s, in %s",
	                 (long long)output_int(r, "pid", 0),
	                 output_str(r, "program") ? output_str(r, "program") : "?", (long long)n,
	                 n == 1 ? "" : "s", output_str(r, "cwd") ? output_str(r, "cwd") : "?");
	if (json_array_size(json_object_get(r, "env_names"))) {
		(void)buf_puts(out, ", env ");
		names_of(json_object_get(r, "env_names"), out);
	}
}

static void
audit_process_exited(const json_t *r, struct buf *out)
{
	(void)buf_printf(out, "pid %lld: exit code %lld after %lld ms",
	                 (long long)output_int(r, "pid", 0),
	                 (long long)output_int(r, "exit_code", 0),
	                 (long long)output_int(r, "duration_ms", 0));
}

static void
audit_file(const json_t *r, struct buf *out)
{
	(void)buf_printf(out, "%s (%lld bytes)",
	                 output_str(r, "path") ? output_str(r, "path") : "?",
	                 (long long)output_int(r, "bytes", 0));
}

static void
audit_egress(const json_t *r, struct buf *out)
{
	(void)buf_printf(out, "%s:%lld, %lld bytes: %s",
	                 output_str(r, "name") ? output_str(r, "name") : "(no name)",
	                 (long long)output_int(r, "port", 0), (long long)output_int(r, "bytes", 0),
	                 output_str(r, "reason") ? output_str(r, "reason") : "");
}

static void
audit_tunnel(const json_t *r, struct buf *out)
{
	(void)buf_printf(out, "to 127.0.0.1:%lld", (long long)output_int(r, "port", 0));
}

static void
audit_stopped(const json_t *r, struct buf *out)
{
	const char *reason = output_str(r, "reason");

	/* a stop its idle timeout made, or one after a read woke it; a requested one says
	 * nothing */
	if (reason && streq(reason, "idle"))
		(void)buf_puts(out, "idle: stopped by its idle timeout, its disk kept");
	else if (reason && streq(reason, "read"))
		(void)buf_puts(out, "read: started to read its files, stopped again once quiet");
	else if (reason)
		(void)buf_puts(out, reason);
}

static const struct detail_format audit_formats[] = {
	{ .type = "sandbox.created", .fn = audit_created },
	{ .type = "sandbox.stopped", .fn = audit_stopped },
	{ .type = "sandbox.network_updated", .fn = audit_network },
	{ .type = "sandbox.failed", .fn = detail_reason },
	{ .type = "sandbox.terminated", .fn = detail_reason },
	{ .type = "process.started", .fn = audit_process_started },
	{ .type = "process.exited", .fn = audit_process_exited },
	{ .type = "file.read", .fn = audit_file },
	{ .type = "file.written", .fn = audit_file },
	{ .type = "file.removed", .fn = audit_file },
	{ .type = "tunnel.opened", .fn = audit_tunnel },
	{ .type = "egress.allowed", .fn = audit_egress },
	{ .type = "egress.denied", .fn = audit_egress },
};

/* What a type this version does not know says: its fields as they came, shortened. */
static char *
detail_raw(const json_t *fields)
{
	if (json_object_size(fields) > 0) {
		_cleanup_free_ char *text = json_dumps(fields, JSON_COMPACT | JSON_ENSURE_ASCII);
		if (text && strlen(text) > 200)
			memcpy(text + 197, "...", 4);
		return termsafe_dup(text);
	}
	return termsafe_dup("");
}

/* The DETAIL column of a stream event (audit false: its data is under "data") or of an audit
 * record (its fields beside "type"), made safe for a terminal; caller frees. */
static char *
event_detail(const json_t *ev, bool audit)
{
	_cleanup_buf_ struct buf out = BUF_INIT(4096);
	const char *type = output_str(ev, "type");
	const struct detail_format *formats = audit ? audit_formats : stream_formats;
	size_t n = audit ? ARRAY_SIZE(audit_formats) : ARRAY_SIZE(stream_formats);
	json_t *fields;
	char *text;

	for (size_t i = 0; type && i < n; i++)
		if (streq(type, formats[i].type)) {
			formats[i].fn(audit ? ev : json_object_get(ev, "data"), &out);
			return termsafe_dup(out.data ? out.data : "");
		}
	/* a stream event of the audit's own kinds (a process, a file, egress) carries its
	 * record: said in the record's words, not as raw data */
	if (!audit && json_is_object(json_object_get(ev, "audit")))
		return event_detail(json_object_get(ev, "audit"), true);
	if (!audit)
		return detail_raw(json_object_get(ev, "data"));
	fields = json_deep_copy(ev);
	if (!fields)
		return NULL;
	json_object_del(fields, "time");
	json_object_del(fields, "type");
	json_object_del(fields, "sandbox");
	text = detail_raw(fields);
	json_decref(fields);
	return text;
}

static bool
is_terminated(const json_t *record)
{
	const char *type = output_str(record, "type");

	return type && streq(type, "sandbox.terminated");
}

static const char *
or_dash(const char *s)
{
	return s ? s : "-";
}

/* One line for a followed event: TIME [ID NAME] TYPE DETAIL; an audit record's is TIME TYPE
 * DETAIL. */
static int
print_event_line(const json_t *ev, bool audit, bool with_sandbox)
{
	_cleanup_free_ char *detail = event_detail(ev, audit), *line = NULL, *safe = NULL;
	const json_t *sb = json_object_get(ev, "sandbox");
	const char *when = or_dash(output_str(ev, "time")), *type = or_dash(output_str(ev, "type"));

	if (with_sandbox)
		line = strdup_printf("%s  %s  %s  %-7s  %s", when,
		                     or_dash(output_str(ev, "sandbox_id")),
		                     or_dash(output_str(sb, "name")), type, detail ? detail : "");
	else
		line = strdup_printf("%s  %-7s  %s", when, type, detail ? detail : "");
	safe = termsafe_dup(line);
	if (!safe)
		return -ENOMEM;
	if (puts(safe) == EOF || fflush(stdout) == EOF)
		return negative_errno();
	return 0;
}

/* ---- following the stream ---- */

struct follow {
	struct cli *cli;
	struct sse sse;
	const char *only_id; /* NULL: every sandbox */
	int64_t last_seq;
	bool terminated; /* the followed sandbox was terminated */
	int error;
};

static int
on_event(void *userdata, const char *type, const char *id, const char *data, size_t len)
{
	struct follow *f = userdata;
	json_t *ev = json_loadb(data, len, 0, NULL);
	int r = 0;

	if (!ev || !json_is_object(ev)) {
		json_decref(ev);
		return 0; /* not an event of ours: skip it */
	}
	if (output_int(ev, "seq", 0) > f->last_seq)
		f->last_seq = output_int(ev, "seq", 0);
	if (f->only_id) {
		/* one sandbox's audit trail, carried on: only its events that have a record */
		const json_t *rec = json_object_get(ev, "audit");
		if (!streq(f->only_id, output_str(ev, "sandbox_id") ?: "") ||
		    !json_is_object(rec)) {
			json_decref(ev);
			return 0;
		}
		r = f->cli->json ? output_json_line(rec) : print_event_line(rec, true, false);
		if (r < 0)
			f->error = r;
		else if (is_terminated(rec)) {
			f->terminated = true;
			r = 1; /* stop: nothing more will happen to it */
		}
		json_decref(ev);
		return r;
	}
	r = f->cli->json ? output_json_line(ev) : print_event_line(ev, false, true);
	if (r < 0)
		f->error = r;
	json_decref(ev);
	return r;
}

static int
on_chunk(void *userdata, const char *p, size_t n)
{
	struct follow *f = userdata;

	return sse_feed(&f->sse, p, n);
}

static void
resume_hint(const struct follow *f)
{
	if (f->only_id) {
		_cleanup_free_ char *id = termsafe_dup(f->only_id);
		output_error("hint: resume with: sandbox-cli events %s --follow", id ? id : "?");
	} else if (f->last_seq > 0)
		output_error("hint: resume with: sandbox-cli events --follow --since %lld",
		             (long long)f->last_seq);
}

static int
follow(struct cli *cli, const char *only_id, int64_t since, bool replay)
{
	_cleanup_(client_response_done) struct client_response resp = { 0 };
	_cleanup_free_ char *path = NULL, *esc = NULL;
	struct follow f = { .cli = cli, .only_id = only_id, .last_seq = since };
	char since_q[32] = "";
	struct client *c;
	int r;

	r = cli_client(cli, &c);
	if (r != 0)
		return r;
	if (replay)
		snprintf(since_q, sizeof(since_q), "%csince=%lld", only_id ? '&' : '?',
		         (long long)since);
	/* one sandbox's stream carries only its events, and keeps it from idling while we
	 * watch */
	esc = only_id ? client_escape(only_id) : NULL;
	path = only_id && !esc ? NULL
	                       : strdup_printf("/v1/events/stream%s%s%s", esc ? "?sandbox=" : "",
	                                       esc ? esc : "", since_q);
	if (!path)
		return CLI_EXIT_FAILED;
	sse_init(&f.sse, SSE_MAX, on_event, &f);
	r = client_stream(c, path, on_chunk, &f, &resp);
	sse_done(&f.sse);
	if (f.terminated)
		return CLI_EXIT_OK;
	if (f.error) {
		output_error("cannot write the output: %s", strerror(-f.error));
		return CLI_EXIT_FAILED;
	}
	if (r == -ENOBUFS) {
		output_error("an event from %s is larger than %u MiB", client_endpoint(c),
		             SSE_MAX >> 20);
		return CLI_EXIT_FAILED;
	}
	if (r < 0) {
		r = cli_fail_transport(cli, r);
		resume_hint(&f);
		return r;
	}
	if (resp.status < 200 || resp.status > 299)
		return cli_fail_status(cli, &resp);
	output_error("%s ended the event stream", client_endpoint(c));
	resume_hint(&f);
	return CLI_EXIT_UNREACHABLE;
}

/* ---- one sandbox's history ---- */

static int
add_row(struct table *t, const json_t *ev)
{
	_cleanup_free_ char *detail = event_detail(ev, true);
	const char *row[] = { output_str(ev, "time"), output_str(ev, "type"), detail };

	return t && detail ? table_add(t, row) : -ENOMEM;
}

static int
history(struct cli *cli, const char *ref, bool then_follow)
{
	static const char *const headers[] = { "TIME", "TYPE", "DETAIL" };
	_cleanup_(table_freep) struct table *t = NULL;
	_cleanup_free_ char *esc = client_escape(ref), *path = NULL, *id = NULL;
	json_t *answer = NULL, *events, *ev;
	int64_t last_seq = 0;
	bool ended = false, resume;
	size_t i;
	int r;

	path = esc ? strdup_printf("/v1/sandboxes/%s/events", esc) : NULL;
	if (!path)
		return CLI_EXIT_FAILED;
	r = cli_call(cli, "GET", path, NULL, &answer);
	if (r != 0)
		return r;
	events = json_object_get(answer, "events");
	if (!json_is_array(events)) {
		json_decref(answer);
		output_error("the server's answer has no \"events\" array");
		return CLI_EXIT_FAILED;
	}
	if (json_is_true(json_object_get(answer, "truncated")))
		output_error("note: older events were left out; these are the newest %zu",
		             json_array_size(events));
	if (cli->json && !then_follow) {
		r = output_json_line(answer);
		json_decref(answer);
		return r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
	}
	t = then_follow ? NULL : table_new(ARRAY_SIZE(headers), headers);
	if (!then_follow && !t) {
		json_decref(answer);
		output_error("out of memory");
		return CLI_EXIT_FAILED;
	}
	/* where the stream carries on from: the answer is complete up to that event (a server
	 * that does not say is followed from now on) */
	resume = json_is_integer(json_object_get(answer, "last_seq"));
	last_seq = output_int(answer, "last_seq", 0);
	json_array_foreach (events, i, ev) {
		ended = ended || is_terminated(ev);
		if (!id && output_str(ev, "sandbox"))
			id = strdup(output_str(ev, "sandbox"));
		r = then_follow
		            ? (cli->json ? output_json_line(ev) : print_event_line(ev, true, false))
		            : add_row(t, ev);
		if (r < 0)
			break;
	}
	json_decref(answer);
	if (r < 0) {
		output_error("cannot print the events: %s", strerror(-r));
		return CLI_EXIT_FAILED;
	}
	if (!then_follow) {
		table_print(t, stdout);
		return CLI_EXIT_OK;
	}
	if (ended)
		return CLI_EXIT_OK; /* nothing more will come */
	if (!id) {
		/* every sandbox has its "created" event, but be sure of the id anyway */
		json_t *sb = NULL;
		_cleanup_free_ char *sbpath = strdup_printf("/v1/sandboxes/%s", esc);
		if (!sbpath)
			return CLI_EXIT_FAILED;
		r = cli_call(cli, "GET", sbpath, NULL, &sb);
		if (r != 0)
			return r;
		id = output_str(sb, "id") ? strdup(output_str(sb, "id")) : NULL;
		json_decref(sb);
		if (!id) {
			output_error("the server's sandbox has no id");
			return CLI_EXIT_FAILED;
		}
	}
	return follow(cli, id, last_seq, resume);
}

int
cmd_events(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "follow", no_argument, NULL, 'f' },
		{ "since", required_argument, NULL, OPT_SINCE },
		{ NULL, 0, NULL, 0 },
	};
	const char *since_arg = NULL;
	bool do_follow = false;
	uint64_t since = 0;
	int c;

	while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
		switch (c) {
		case 'f':
			do_follow = true;
			break;
		case OPT_SINCE:
			since_arg = optarg;
			break;
		default:
			return cli_option_end(cli, c);
		}
	}
	if (argc - optind > 1 || (optind < argc && !*argv[optind]))
		return cli_usage_error(cli, "takes at most one REF (a sandbox id or name)");
	if (since_arg && (parse_u64(since_arg, &since) < 0 || since > INT64_MAX))
		return cli_usage_error(cli, "--since takes an event sequence number");
	if (since_arg && optind < argc)
		return cli_usage_error(cli, "--since goes without REF (REF --follow prints the "
		                            "history first anyway)");
	if (optind < argc)
		return history(cli, argv[optind], do_follow);
	return follow(cli, NULL, (int64_t)since, since_arg != NULL);
}
