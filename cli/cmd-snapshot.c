/* cmd-snapshot.c: "snapshot create|ls|rm|schedule": snapshots of sandboxes (a fork is
 * "create --snapshot ID", cmd-sandbox.c). */
#include <errno.h>
#include <stdlib.h>
#include "cli.h"
#include "client.h"
#include "output.h"
#include "table.h"
#include "util.h"

enum {
	OPT_KIND = 256,
	OPT_SANDBOX,
	OPT_EVERY,
	OPT_KEEP,
};

/* "snapshot create REF [--kind memory|disk]": prints the snapshot's id. */
static int
snapshot_create(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "kind", required_argument, NULL, OPT_KIND },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_free_ char *path = NULL, *id = NULL;
	json_t *body = json_object(), *snap = NULL;
	int c, r = 0;

	if (!body)
		return cli_oom();
	while (r == 0 && (c = cli_getopt(cli, argc, argv, opts)) != -1) {
		if (c != OPT_KIND) {
			r = cli_option_end(cli, c);
			if (r == 0)
				goto out;
			continue;
		}
		if (!streq(optarg, "memory") && !streq(optarg, "disk"))
			r = cli_usage_error(cli, "--kind takes memory or disk, not '%s'", optarg);
		else if (json_object_set_new(body, "kind", json_string(optarg)) < 0)
			r = cli_oom();
	}
	if (r != 0)
		goto out;
	if (optind + 1 != argc) {
		r = cli_usage_error(cli, "needs one sandbox REF");
		goto out;
	}
	path = cli_sandbox_path(argv[optind], "/snapshots");
	if (!path) {
		r = cli_oom();
		goto out;
	}
	r = cli_call(cli, "POST", path, body, &snap);
	if (r != 0)
		goto out;
	if (cli->json) {
		r = output_json_line(snap) < 0 ? CLI_EXIT_FAILED : 0;
	} else {
		/* only the id, so that scripts can capture it */
		id = termsafe_dup(output_str(snap, "id"));
		puts(id ? id : "?");
		fflush(stdout);
	}
out:
	json_decref(snap);
	json_decref(body);
	return r;
}

/* "snapshot ls [--sandbox ID]": ID SANDBOX KIND SIZE CREATED. */
static int
snapshot_ls(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "sandbox", required_argument, NULL, OPT_SANDBOX },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const headers[] = { "ID", "SANDBOX", "KIND", "SIZE", "CREATED" };
	_cleanup_(table_freep) struct table *t = NULL;
	_cleanup_free_ char *path = NULL, *esc = NULL;
	json_t *answer = NULL, *list, *s;
	const char *only = NULL;
	size_t i;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
		if (c == OPT_SANDBOX)
			only = optarg;
		else
			return cli_option_end(cli, c);
	}
	if (optind < argc)
		return cli_usage_error(cli, "takes no arguments; --sandbox ID lists one's");
	if (only && !(esc = client_escape(only)))
		return cli_oom();
	path = esc ? strdup_printf("/v1/snapshots?sandbox=%s", esc) : strdup("/v1/snapshots");
	if (!path)
		return cli_oom();
	r = cli_get_list(cli, path, "snapshots", &answer, &list);
	if (r >= 0)
		return r;
	t = table_new(ARRAY_SIZE(headers), headers);
	if (!t) {
		json_decref(answer);
		return cli_oom();
	}
	json_array_foreach (list, i, s) {
		char size[24], kind[32];
		output_bytes((uint64_t)MAX(output_int(s, "bytes", 0), 0), size);
		snprintf(kind, sizeof(kind), "%s%s", output_str(s, "kind") ?: "?",
		         json_is_true(json_object_get(s, "scheduled")) ? " (scheduled)" : "");
		const char *row[] = { output_str(s, "id"), output_str(s, "sandbox"), kind, size,
			              output_str(s, "created_at") };
		if (table_add(t, row) < 0) {
			json_decref(answer);
			return cli_oom();
		}
	}
	json_decref(answer);
	if (table_rows(t) == 0) {
		fprintf(stderr, "No snapshots.\n");
		return CLI_EXIT_OK;
	}
	table_print(t, stdout);
	return CLI_EXIT_OK;
}

/* "snapshot rm ID...": every one is tried; the exit code is the first failure's. */
static int
snapshot_rm(struct cli *cli, int argc, char **argv)
{
	return cli_delete_each(cli, argc, argv, "/v1/snapshots/",
	                       "needs a snapshot ID (see 'sandbox-cli snapshot ls')");
}

/* "snapshot schedule REF --every SECS [--keep N]": prints the schedule. */
static int
snapshot_schedule(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "every", required_argument, NULL, OPT_EVERY },
		{ "keep", required_argument, NULL, OPT_KEEP },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_free_ char *path = NULL;
	json_t *body = json_object(), *sb = NULL, *sched;
	int c, r = 0;

	if (!body)
		return cli_oom();
	while (r == 0 && (c = cli_getopt(cli, argc, argv, opts)) != -1) {
		if (c == OPT_EVERY)
			r = cli_number_option(cli, "--every", optarg, INT64_MAX, body,
			                      "every_secs");
		else if (c == OPT_KEEP)
			r = cli_number_option(cli, "--keep", optarg, INT32_MAX, body, "keep");
		else if ((r = cli_option_end(cli, c)) == 0)
			goto out;
	}
	if (r != 0)
		goto out;
	if (optind + 1 != argc || !json_object_get(body, "every_secs")) {
		r = cli_usage_error(cli, "needs one sandbox REF and --every SECS (0: none)");
		goto out;
	}
	path = cli_sandbox_path(argv[optind], "/snapshot-schedule");
	if (!path) {
		r = cli_oom();
		goto out;
	}
	r = cli_call(cli, "PUT", path, body, &sb);
	if (r != 0)
		goto out;
	sched = json_object_get(sb, "snapshot_schedule");
	if (cli->json)
		r = output_json_line(sched ? sched : json_null()) < 0 ? CLI_EXIT_FAILED : 0;
	else if (!json_is_object(sched))
		puts("no scheduled snapshots");
	else
		printf("a snapshot every %lld s, the newest %lld kept\n",
		       (long long)output_int(sched, "every_secs", 0),
		       (long long)output_int(sched, "keep", 0));
	fflush(stdout);
out:
	json_decref(sb);
	json_decref(body);
	return r;
}

static const struct verb snapshot_verbs[] = {
	{ .name = "snapshot create",
	  .usage = "snapshot create REF [--kind memory|disk]",
	  .summary = "Snapshot a sandbox and print the snapshot's id.",
	  .help = "  --kind KIND  memory (its memory, processes and disk: a fork carries on\n"
	          "               running them; the default for a running sandbox) or disk\n"
	          "               (its disk only; the default, and the only kind, for a\n"
	          "               stopped one)\n"
	          "\n"
	          "Waits until the snapshot is written. A running sandbox is paused for that\n"
	          "instant and carries on. Start a sandbox from it with\n"
	          "'sandbox-cli create --snapshot ID'. With --json, the snapshot.\n",
	  .run = snapshot_create },
	{ .name = "snapshot ls",
	  .usage = "snapshot ls [--sandbox ID]",
	  .summary = "List your snapshots, newest first.",
	  .help = "  --sandbox ID  only the snapshots of this sandbox (its id)\n"
	          "\n"
	          "Columns: ID, SANDBOX (the sandbox it was taken of), KIND (memory or disk;\n"
	          "'scheduled' when its schedule took it), SIZE (on the server's disk),\n"
	          "CREATED. With --json, the server's {snapshots} object.\n",
	  .run = snapshot_ls },
	{ .name = "snapshot rm",
	  .usage = "snapshot rm ID...",
	  .summary = "Delete snapshots (not while a sandbox is being started from one).",
	  .run = snapshot_rm },
	{ .name = "snapshot schedule",
	  .usage = "snapshot schedule REF --every SECS [--keep N]",
	  .summary = "Snapshot a sandbox every SECS while it runs, keeping the newest N.",
	  .help = "  --every SECS  how often (at least the server's min_snapshot_every_secs,\n"
	          "                see 'sandbox-cli doctor'); 0 stops the schedule\n"
	          "  --keep N      how many of its scheduled snapshots are kept (default: the\n"
	          "                server's max_snapshot_keep); older ones are deleted\n",
	  .run = snapshot_schedule },
};

int
cmd_snapshot(struct cli *cli, int argc, char **argv)
{
	const struct verb *parent = cli->verb;

	if (argc >= 2 && (streq(argv[1], "-h") || streq(argv[1], "--help"))) {
		cli_verb_help(parent, stdout);
		return CLI_EXIT_OK;
	}
	if (argc < 2)
		return cli_usage_error(cli, "needs create, ls, rm or schedule");
	for (size_t i = 0; i < ARRAY_SIZE(snapshot_verbs); i++) {
		if (!streq(snapshot_verbs[i].name + strlen("snapshot "), argv[1]))
			continue;
		cli->verb = &snapshot_verbs[i];
		return snapshot_verbs[i].run(cli, argc - 1, argv + 1);
	}
	return cli_usage_error(cli, "unknown verb; use create, ls, rm or schedule");
}
