/* cmd-volume.c: `volume create|ls|rm`: the caller's volumes (/v1/volumes), and the parsing of
 * create's --volume NAME:PATH[:ro]. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include "cli.h"
#include "client.h"
#include "output.h"
#include "table.h"
#include "util.h"

int
cli_volume_option(struct cli *cli, json_t *volumes, const char *arg)
{
	_cleanup_free_ char *copy = strdup(arg);
	char *name, *path, *mode;
	bool ro = false;
	json_t *v;

	if (!copy)
		return cli_oom();
	name = copy;
	path = strchr(copy, ':');
	if (!path || path == name)
		return cli_usage_error(cli, "--volume takes NAME:PATH[:ro], not '%s'", arg);
	*path++ = '\0';
	mode = strchr(path, ':');
	if (mode) {
		*mode++ = '\0';
		if (streq(mode, "ro"))
			ro = true;
		else if (!streq(mode, "rw"))
			return cli_usage_error(cli, "--volume takes NAME:PATH[:ro], not '%s'", arg);
	}
	if (!*path)
		return cli_usage_error(cli, "--volume takes NAME:PATH[:ro], not '%s'", arg);
	v = json_pack("{s:s, s:s, s:b}", "name", name, "path", path, "read_only", ro);
	if (!v || json_array_append_new(volumes, v) < 0)
		return cli_oom();
	return 0;
}

static int
volume_create(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	json_t *body = NULL, *v = NULL;
	long long size = 1024;
	char *end;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
		if (c != 's')
			return cli_option_end(cli, c);
		errno = 0;
		size = strtoll(optarg, &end, 10);
		if (errno || end == optarg || *end || size <= 0)
			return cli_usage_error(cli, "--size takes a number of MiB, not '%s'",
			                       optarg);
	}
	if (argc - optind != 1 || !*argv[optind])
		return cli_usage_error(cli, "needs one NAME");
	body = json_pack("{s:s, s:I}", "name", argv[optind], "size_mb", (json_int_t)size);
	if (!body)
		return cli_oom();
	r = cli_call(cli, "POST", "/v1/volumes", body, &v);
	json_decref(body);
	if (r == 0) {
		if (cli->json) {
			r = output_json_line(v) < 0 ? CLI_EXIT_FAILED : 0;
		} else {
			_cleanup_free_ char *name = termsafe_dup(output_str(v, "name"));
			puts(name ? name : "?");
			fflush(stdout);
		}
	}
	json_decref(v);
	return r;
}

static int
volume_ls(struct cli *cli, int argc, char **argv)
{
	static const char *const headers[] = { "NAME", "SIZE", "USED", "ATTACHED", "AGE" };
	_cleanup_(table_freep) struct table *t = NULL;
	json_t *answer = NULL, *list, *v;
	size_t i;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind < argc)
		return cli_usage_error(cli, "takes no arguments");
	r = cli_get_list(cli, "/v1/volumes", "volumes", &answer, &list);
	if (r >= 0)
		return r;
	t = table_new(ARRAY_SIZE(headers), headers);
	if (!t) {
		json_decref(answer);
		return cli_oom();
	}
	json_array_foreach (list, i, v) {
		char size[24], used[24], attached[160] = "", age[24] = "-";
		int64_t created;
		json_t *id;
		size_t k;

		output_bytes((uint64_t)MAX(output_int(v, "size_mb", 0), 0) << 20, size);
		output_bytes((uint64_t)MAX(output_int(v, "bytes", 0), 0), used);
		json_array_foreach (json_object_get(v, "attached"), k, id) {
			size_t n = strlen(attached);
			snprintf(attached + n, sizeof(attached) - n, "%s%s", n ? "," : "",
			         json_string_value(id) ?: "?");
		}
		if (output_parse_time(output_str(v, "created_at"), &created) == 0)
			output_age(time(NULL) - created, age);
		const char *row[] = { output_str(v, "name"), size, used, *attached ? attached : "-",
			              age };
		if (table_add(t, row) < 0) {
			json_decref(answer);
			return cli_oom();
		}
	}
	json_decref(answer);
	if (table_rows(t) == 0) {
		fprintf(stderr, "No volumes.\n");
		return CLI_EXIT_OK;
	}
	table_print(t, stdout);
	return CLI_EXIT_OK;
}

static int
volume_rm(struct cli *cli, int argc, char **argv)
{
	return cli_delete_each(cli, argc, argv, "/v1/volumes/",
	                       "needs a NAME (see 'sandbox-cli volume ls')");
}

static const struct verb volume_verbs[] = {
	{ .name = "volume create",
	  .usage = "volume create [--size MB] NAME",
	  .summary = "Make a volume: a disk that outlives sandboxes.",
	  .help = "  --size MB  its size in MiB (default 1024; 16 to 65536)\n"
	          "\n"
	          "NAME is lowercase letters, digits and -. Attach it with 'sandbox-cli create\n"
	          "--volume NAME:PATH[:ro]'. Prints the name (with --json: the volume).\n",
	  .run = volume_create },
	{ .name = "volume ls",
	  .usage = "volume ls",
	  .summary = "List your volumes.",
	  .help = "Columns: NAME, SIZE, USED (what its file holds on the host), ATTACHED (the\n"
	          "sandboxes not terminated that hold it), AGE. With --json, the server's\n"
	          "{volumes} object.\n",
	  .run = volume_ls },
	{ .name = "volume rm",
	  .usage = "volume rm NAME...",
	  .summary = "Delete volumes and what they hold (not while a sandbox holds one).",
	  .help = "A volume attached to a sandbox that is not terminated (a stopped one too) is\n"
	          "refused (exit 6): delete the sandbox first.\n",
	  .run = volume_rm },
};

int
cmd_volume(struct cli *cli, int argc, char **argv)
{
	const struct verb *parent = cli->verb;

	if (argc >= 2 && (streq(argv[1], "-h") || streq(argv[1], "--help"))) {
		cli_verb_help(parent, stdout);
		return CLI_EXIT_OK;
	}
	if (argc < 2)
		return cli_usage_error(cli, "needs create, ls or rm");
	for (size_t i = 0; i < ARRAY_SIZE(volume_verbs); i++) {
		if (!streq(volume_verbs[i].name + strlen("volume "), argv[1]))
			continue;
		cli->verb = &volume_verbs[i];
		return volume_verbs[i].run(cli, argc - 1, argv + 1);
	}
	return cli_usage_error(cli, "unknown verb; use create, ls or rm");
}
