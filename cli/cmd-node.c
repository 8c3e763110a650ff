/* cmd-node.c: "node", "node cordon" and "node uncordon": what the server's node offers
 * sandboxes and what is free (GET /v1/node), and the cordon (POST /v1/node/cordon). */
#include <errno.h>
#include "cli.h"
#include "output.h"
#include "table.h"
#include "util.h"

/* One resource's row: capacity, allocated and free, as a person reads them (mib: sizes). */
static int
resource_row(struct table *t, const json_t *node, const char *name, const char *key, bool mib)
{
	const char *groups[] = { "capacity", "allocated", "free" };
	char cells[3][24];
	const char *row[] = { name, cells[0], cells[1], cells[2] };

	for (size_t i = 0; i < 3; i++) {
		int64_t v = output_int(json_object_get(node, groups[i]), key, -1);
		if (v < 0)
			snprintf(cells[i], sizeof(cells[i]), "-");
		else if (mib)
			output_mib((uint64_t)v, cells[i]);
		else
			snprintf(cells[i], sizeof(cells[i]), "%lld", (long long)v);
	}
	return table_add(t, row);
}

/* "k=v k=v" of an object of strings (the labels), or "-". Safe to print. */
static char *
pairs(const json_t *obj)
{
	_cleanup_buf_ struct buf b = BUF_INIT(64u << 10);
	const char *k;
	json_t *v;

	json_object_foreach ((json_t *)obj, k, v) {
		if (json_is_string(v))
			(void)buf_printf(&b, "%s%s=%s", b.len ? " " : "", k, json_string_value(v));
		else if (json_is_integer(v)) /* pools: image -> sandboxes waiting */
			(void)buf_printf(&b, "%s%s=%lld", b.len ? " " : "", k,
			                 (long long)json_integer_value(v));
	}
	return termsafe_dup(b.len ? b.data : "-");
}

static char *
joined(const json_t *arr)
{
	_cleanup_buf_ struct buf b = BUF_INIT(64u << 10);
	const json_t *v;
	size_t i;

	json_array_foreach ((json_t *)arr, i, v)
		if (json_is_string(v))
			(void)buf_printf(&b, "%s%s", b.len ? ", " : "", json_string_value(v));
	return termsafe_dup(b.len ? b.data : "-");
}

static int
print_node(struct cli *cli, json_t *node)
{
	static const char *const headers[] = { "RESOURCE", "CAPACITY", "ALLOCATED", "FREE" };
	_cleanup_(table_freep) struct table *t = NULL;
	_cleanup_free_ char *labels = NULL, *pools = NULL, *images = NULL;
	int r;

	if (cli->json)
		return output_json_line(node) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
	t = table_new(ARRAY_SIZE(headers), headers);
	if (!t)
		return cli_oom();
	r = resource_row(t, node, "cpus", "cpus", false);
	if (r >= 0)
		r = resource_row(t, node, "memory", "memory_mb", true);
	if (r >= 0)
		r = resource_row(t, node, "disk", "disk_mb", true);
	labels = pairs(json_object_get(node, "labels"));
	pools = pairs(json_object_get(node, "pools"));
	images = joined(json_object_get(node, "images"));
	if (r < 0 || !labels || !pools || !images)
		return cli_oom();
	table_print(t, stdout);
	printf("\n"
	       "cordoned:  %s\n"
	       "running:   %lld sandbox%s (%lld active)\n"
	       "labels:    %s\n"
	       "pools:     %s\n"
	       "images:    %s\n",
	       json_is_true(json_object_get(node, "cordoned"))
	               ? "yes: new sandboxes are refused; those here carry on"
	               : "no",
	       (long long)output_int(node, "running", 0),
	       output_int(node, "running", 0) == 1 ? "" : "es",
	       (long long)output_int(json_object_get(node, "allocated"), "sandboxes", 0), labels,
	       pools, images);
	return CLI_EXIT_OK;
}

static int
node_cordon(struct cli *cli, int argc, char **argv, bool on)
{
	json_t *body, *answer = NULL;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind < argc)
		return cli_usage_error(cli, "takes no arguments");
	body = json_pack("{s:b}", "cordoned", on);
	if (!body)
		return cli_oom();
	r = cli_call(cli, "POST", "/v1/node/cordon", body, &answer);
	json_decref(body);
	if (r != 0)
		return r;
	if (!cli->json)
		printf("%s\n", on ? "cordoned: new sandboxes are refused (503); those here carry on"
		                  : "uncordoned: new sandboxes are taken again");
	else
		r = output_json_line(answer) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
	json_decref(answer);
	return r;
}

int
cmd_node(struct cli *cli, int argc, char **argv)
{
	json_t *answer = NULL;
	int c, r;

	if (argc >= 2 && (streq(argv[1], "cordon") || streq(argv[1], "uncordon")))
		return node_cordon(cli, argc - 1, argv + 1, streq(argv[1], "cordon"));
	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind < argc)
		return cli_usage_error(cli, "takes nothing, cordon or uncordon");
	r = cli_call(cli, "GET", "/v1/node", NULL, &answer);
	if (r != 0)
		return r;
	r = print_node(cli, answer);
	json_decref(answer);
	return r;
}
