/* cmd-metrics.c: "metrics": a sandbox's samples (GET …/metrics) as a table: what it used,
 * measured on the server's host, every 10 s over the last hour, oldest first. */
#include <errno.h>
#include "cli.h"
#include "output.h"
#include "table.h"
#include "util.h"

int
cmd_metrics(struct cli *cli, int argc, char **argv)
{
	static const char *const headers[] = {
		"TIME", "CPU", "MEMORY", "DISK", "NET IN", "NET OUT"
	};
	_cleanup_(table_freep) struct table *t = NULL;
	_cleanup_free_ char *path = NULL;
	json_t *answer = NULL, *samples, *x;
	size_t i;
	int c, r = 0;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (argc - optind != 1 || !*argv[optind])
		return cli_usage_error(cli, "needs one REF (a sandbox id or name)");
	path = cli_sandbox_path(argv[optind], "/metrics");
	if (!path)
		return cli_oom();
	r = cli_call(cli, "GET", path, NULL, &answer);
	if (r != 0)
		return r;
	samples = json_object_get(answer, "samples");
	if (!json_is_array(samples)) {
		json_decref(answer);
		output_error("the server's answer has no \"samples\" array");
		return CLI_EXIT_FAILED;
	}
	if (cli->json) {
		r = output_json_line(answer);
		json_decref(answer);
		return r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
	}
	t = table_new(ARRAY_SIZE(headers), headers);
	if (!t) {
		json_decref(answer);
		return cli_oom();
	}
	json_array_foreach (samples, i, x) {
		char cpu[32], mem[24], disk[24], rx[24], tx[24];
		const char *row[] = { output_str(x, "time"), cpu, mem, disk, rx, tx };

		snprintf(cpu, sizeof(cpu), "%.2fs",
		         json_number_value(json_object_get(x, "cpu_seconds")));
		output_bytes((uint64_t)output_int(x, "memory_bytes", 0), mem);
		output_bytes((uint64_t)output_int(x, "disk_bytes", 0), disk);
		output_bytes((uint64_t)output_int(x, "net_rx_bytes", 0), rx);
		output_bytes((uint64_t)output_int(x, "net_tx_bytes", 0), tx);
		r = table_add(t, row);
		if (r < 0)
			break;
	}
	json_decref(answer);
	if (r < 0) {
		output_error("cannot print the samples: %s", strerror(-r));
		return CLI_EXIT_FAILED;
	}
	table_print(t, stdout);
	return CLI_EXIT_OK;
}
