/* cmd-sandbox.c: the sandbox verbs: list, inspect, create, stop, start, kill and network. Each
 * is one or a few API calls; human output is a table or a line, --json the server's objects. */
#include <errno.h>
#include <stdlib.h>
#include "cli.h"
#include "client.h"
#include "output.h"
#include "table.h"
#include "util.h"

/* Says why a sandbox is failed, when it is; returns CLI_EXIT_FAILED then, else 0. */
static int
check_failed(const json_t *sb)
{
	const char *state = output_str(sb, "state"), *reason = output_str(sb, "reason");
	_cleanup_free_ char *id = NULL, *why = NULL;

	if (!state || !streq(state, "failed"))
		return 0;
	id = termsafe_dup(output_str(sb, "id"));
	why = termsafe_dup(reason ? reason : "no reason given");
	output_error("sandbox '%s' failed: %s", id ? id : "?", why ? why : "?");
	return CLI_EXIT_FAILED;
}

/* Splits "KEY=VALUE" into obj[KEY] = VALUE. */
static int
add_pair(json_t *obj, const char *kv)
{
	const char *eq = strchr(kv, '=');
	_cleanup_free_ char *key = NULL;

	if (!eq || eq == kv)
		return -EINVAL;
	key = strndup(kv, (size_t)(eq - kv));
	if (!key)
		return -ENOMEM;
	return json_object_set_new(obj, key, json_string(eq + 1)) < 0 ? -EINVAL : 0;
}

/* ---- list ---- */

enum {
	OPT_LABEL = 256,
	OPT_STATE,
	OPT_ENV,
	OPT_IDLE,
	OPT_IDLE_ACTION,
	OPT_LIFETIME,
	OPT_NO_WAIT,
};

/* Whether the list shows sb: terminated ones only when asked for (--all, --state). */
static bool
list_shows(const json_t *sb, bool all)
{
	const char *state = output_str(sb, "state");

	return all || !state || !streq(state, "terminated");
}

int
cmd_list(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "label", required_argument, NULL, OPT_LABEL },
		{ "state", required_argument, NULL, OPT_STATE },
		{ "all", no_argument, NULL, 'a' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const headers[] = { "ID",   "NAME",   "STATE", "IMAGE",
		                               "CPUS", "MEMORY", "AGE",   "REASON" };
	_cleanup_buf_ struct buf path = BUF_INIT(64 << 10);
	_cleanup_(table_freep) struct table *t = NULL;
	json_t *answer = NULL, *list, *sb, *shown;
	int64_t now = now_unix_ms() / 1000;
	bool filtered = false, all = false, reasons = false;
	size_t i;
	int c, r;

	if (buf_puts(&path, "/v1/sandboxes") < 0)
		return cli_oom();
	while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
		switch (c) {
		case OPT_LABEL:
		case OPT_STATE: {
			_cleanup_free_ char *esc = client_escape(optarg);
			if (c == OPT_LABEL && (!strchr(optarg, '=') || optarg[0] == '='))
				return cli_usage_error(cli, "--label takes KEY=VALUE");
			if (c == OPT_STATE && !*optarg)
				return cli_usage_error(cli,
				                       "--state takes a state, such as running");
			if (!esc || buf_printf(&path, "%c%s=%s", filtered ? '&' : '?',
			                       c == OPT_LABEL ? "label" : "state", esc) < 0)
				return cli_usage_error(cli, "too many filters");
			filtered = true;
			/* asking for states shows what the server answers, terminated ones too */
			all = all || c == OPT_STATE;
			break;
		}
		case 'a':
			all = true;
			break;
		default:
			return cli_option_end(cli, c);
		}
	}
	if (optind < argc)
		return cli_usage_error(cli, "takes no arguments (filter with --label KEY=VALUE or "
		                            "--state STATE)");
	r = cli_call(cli, "GET", path.data, NULL, &answer);
	if (r != 0)
		return r;
	list = json_object_get(answer, "sandboxes");
	shown = json_array();
	if (!json_is_array(list) || !shown) {
		json_decref(answer);
		json_decref(shown);
		if (!shown)
			return cli_oom();
		output_error("the server's answer has no \"sandboxes\" array");
		return CLI_EXIT_FAILED;
	}
	json_array_foreach (list, i, sb)
		if (list_shows(sb, all) && json_array_append(shown, sb) < 0) {
			json_decref(answer);
			json_decref(shown);
			return cli_oom();
		}
	if (json_object_set_new(answer, "sandboxes", shown) < 0) {
		json_decref(answer);
		return cli_oom();
	}
	if (cli->json) {
		/* the server's list, less what the table would hide */
		r = output_json_line(answer);
		json_decref(answer);
		return r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
	}
	json_array_foreach (shown, i, sb)
		reasons = reasons || output_str(sb, "reason");
	/* the REASON column only when a sandbox has one (failed or terminated) */
	t = table_new(ARRAY_SIZE(headers) - (reasons ? 0 : 1), headers);
	if (!t) {
		json_decref(answer);
		return cli_oom();
	}
	json_array_foreach (shown, i, sb) {
		char cpus[24], mem[24], age[24] = "-";
		int64_t created;
		snprintf(cpus, sizeof(cpus), "%lld", (long long)output_int(sb, "cpus", 0));
		output_mib((uint64_t)output_int(sb, "memory_mb", 0), mem);
		if (output_parse_time(output_str(sb, "created_at"), &created) == 0)
			output_age(now - created, age);
		const char *row[] = { output_str(sb, "id"),
			              output_str(sb, "name"),
			              output_str(sb, "state"),
			              output_str(sb, "image"),
			              cpus,
			              mem,
			              age,
			              output_str(sb, "reason") };
		if (table_add(t, row) < 0) {
			json_decref(answer);
			return cli_oom();
		}
	}
	json_decref(answer);
	if (table_rows(t) == 0) {
		fprintf(stderr, "%s\n", filtered ? "No sandboxes match." : "No sandboxes.");
		return CLI_EXIT_OK;
	}
	table_print(t, stdout);
	return CLI_EXIT_OK;
}

/* ---- inspect ---- */

int
cmd_inspect(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *path = NULL;
	json_t *sb = NULL;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (argc - optind != 1 || !*argv[optind])
		return cli_usage_error(cli, "needs one REF (a sandbox id or name)");
	path = cli_sandbox_path(argv[optind], "");
	if (!path)
		return cli_oom();
	r = cli_call(cli, "GET", path, NULL, &sb);
	if (r != 0)
		return r;
	r = cli->json ? output_json_line(sb) : output_json_pretty(sb);
	json_decref(sb);
	return r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}

/* ---- create ---- */

int
cmd_create(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_SANDBOX_OPTIONS,
		{ "label", required_argument, NULL, OPT_LABEL },
		{ "env", required_argument, NULL, OPT_ENV },
		{ "idle-timeout", required_argument, NULL, OPT_IDLE },
		{ "idle-action", required_argument, NULL, OPT_IDLE_ACTION },
		{ "lifetime", required_argument, NULL, OPT_LIFETIME },
		{ "no-wait", no_argument, NULL, OPT_NO_WAIT },
		{ NULL, 0, NULL, 0 },
	};
	json_t *body = json_object(), *labels = json_object(), *env = json_object();
	json_t *sb = NULL;
	int c, r = 0;

	if (!body || !labels || !env) {
		r = cli_oom();
		goto out;
	}
	while (r == 0 && (c = cli_getopt(cli, argc, argv, opts)) != -1) {
		r = cli_sandbox_option(cli, c, optarg, body);
		if (r != 1)
			continue;
		r = 0;
		switch (c) {
		case OPT_IDLE:
			r = cli_number_option(cli, "--idle-timeout", optarg, INT64_MAX, body,
			                      "idle_timeout_secs");
			break;
		case OPT_IDLE_ACTION:
			/* the server says what it offers (suspend needs its capability) */
			if (json_object_set_new(body, "idle_action", json_string(optarg)) < 0)
				r = cli_usage_error(
				        cli, "--idle-action takes suspend, stop or terminate");
			break;
		case OPT_LIFETIME:
			r = cli_number_option(cli, "--lifetime", optarg, INT64_MAX, body,
			                      "lifetime_secs");
			break;
		case OPT_LABEL:
			if (add_pair(labels, optarg) < 0)
				r = cli_usage_error(cli, "--label takes KEY=VALUE, not '%s'",
				                    optarg);
			break;
		case OPT_ENV:
			r = cli_env_option(cli, env, optarg);
			break;
		case OPT_NO_WAIT:
			r = json_object_set_new(body, "wait", json_false()) < 0 ? cli_oom() : 0;
			break;
		default:
			r = cli_option_end(cli, c);
			if (r == 0)
				goto out;
			break;
		}
	}
	if (r != 0)
		goto out;
	if (optind < argc) {
		r = cli_usage_error(cli, "takes no arguments; give the name with --name NAME");
		goto out;
	}
	r = cli_sandbox_finish(cli, body);
	if (r != 0)
		goto out;
	if ((json_object_size(labels) && json_object_set(body, "labels", labels) < 0) ||
	    (json_object_size(env) && json_object_set(body, "env", env) < 0)) {
		r = cli_oom();
		goto out;
	}
	r = cli_call(cli, "POST", "/v1/sandboxes", body, &sb);
	if (r != 0)
		goto out;
	if (cli->json) {
		r = output_json_line(sb) < 0 ? CLI_EXIT_FAILED : 0;
	} else {
		/* only the id, so that scripts can capture it */
		_cleanup_free_ char *id = termsafe_dup(output_str(sb, "id"));
		puts(id ? id : "?");
		fflush(stdout);
	}
	if (r == 0)
		r = check_failed(sb);
out:
	json_decref(sb);
	json_decref(env);
	json_decref(labels);
	json_decref(body);
	return r;
}

/* ---- stop, start, kill ---- */

struct action {
	const char *method;
	const char *suffix;
	const char *done; /* for the human line "<ref>: <done>" */
};

static int
act(struct cli *cli, int argc, char **argv, const struct action *a)
{
	int c, first_error = 0;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind == argc)
		return cli_usage_error(cli, "needs a REF (a sandbox id or name)");
	for (int i = optind; i < argc; i++)
		if (!*argv[i])
			return cli_usage_error(cli, "an empty REF names no sandbox");
	/* every REF is tried; the exit code is the first failure's */
	for (int i = optind; i < argc; i++) {
		_cleanup_free_ char *path = cli_sandbox_path(argv[i], a->suffix);
		_cleanup_free_ char *ref = termsafe_dup(argv[i]);
		json_t *sb = NULL;
		int r;

		if (!path || !ref)
			return cli_oom();
		r = cli_call(cli, a->method, path, NULL, &sb);
		if (r == 0 && sb && cli->json) {
			if (output_json_line(sb) < 0)
				r = CLI_EXIT_FAILED;
		} else if (r == 0 && !cli->json) {
			_cleanup_free_ char *state =
			        termsafe_dup(sb ? output_str(sb, "state") : a->done);
			printf("%s: %s\n", ref, state ? state : "?");
			fflush(stdout);
		}
		if (r == 0 && sb)
			r = check_failed(sb);
		json_decref(sb);
		if (r != 0 && first_error == 0)
			first_error = r;
		if (r == CLI_EXIT_UNREACHABLE)
			break; /* the next one would fail the same way */
	}
	return first_error;
}

int
cmd_stop(struct cli *cli, int argc, char **argv)
{
	static const struct action a = { .method = "POST", .suffix = "/stop" };

	return act(cli, argc, argv, &a);
}

int
cmd_start(struct cli *cli, int argc, char **argv)
{
	static const struct action a = { .method = "POST", .suffix = "/start" };

	return act(cli, argc, argv, &a);
}

int
cmd_suspend(struct cli *cli, int argc, char **argv)
{
	static const struct action a = { .method = "POST", .suffix = "/suspend" };

	return act(cli, argc, argv, &a);
}

int
cmd_resume(struct cli *cli, int argc, char **argv)
{
	static const struct action a = { .method = "POST", .suffix = "/resume" };

	return act(cli, argc, argv, &a);
}

int
cmd_kill(struct cli *cli, int argc, char **argv)
{
	static const struct action a = { .method = "DELETE", .suffix = "", .done = "terminated" };

	return act(cli, argc, argv, &a);
}

/* ---- network ---- */

/* "none", or the names joined with ", ", made safe for a terminal. */
static char *
join_names(const json_t *names)
{
	_cleanup_buf_ struct buf b = BUF_INIT(64 << 10);
	_cleanup_free_ char *text = NULL;
	json_t *v;
	size_t i;

	json_array_foreach ((json_t *)names, i, v)
		if (buf_printf(&b, "%s%s", b.len ? ", " : "",
		               json_string_value(v) ? json_string_value(v) : "?") < 0)
			return NULL;
	text = b.len ? buf_steal(&b) : strdup("none");
	return text ? termsafe_dup(text) : NULL;
}

/* The sandbox's network, as three lines or (--json) its object on one. */
static int
print_network(struct cli *cli, const json_t *sb)
{
	const json_t *net = json_object_get(sb, "network");
	_cleanup_free_ char *mode = NULL, *allow = NULL, *deny = NULL;

	if (!json_is_object(net)) {
		output_error("the server's sandbox has no network object");
		return CLI_EXIT_FAILED;
	}
	if (cli->json)
		return output_json_line(net) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
	mode = termsafe_dup(output_str(net, "mode") ? output_str(net, "mode") : "?");
	allow = join_names(json_object_get(net, "allow"));
	deny = join_names(json_object_get(net, "deny"));
	if (!mode || !allow || !deny)
		return cli_oom();
	printf("mode:   %s\nallow:  %s\ndeny:   %s\n", mode, allow, deny);
	return CLI_EXIT_OK;
}

int
cmd_network(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_NETWORK_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_free_ char *path = NULL;
	json_t *net = json_object(), *body = NULL, *sb = NULL;
	int c, r = net ? 0 : cli_oom();

	while (r == 0 && (c = cli_getopt(cli, argc, argv, opts)) != -1) {
		r = cli_network_option(cli, c, optarg, net);
		if (r == 1) {
			r = cli_option_end(cli, c);
			if (r == 0)
				goto out;
		}
	}
	if (r != 0)
		goto out;
	if (argc - optind != 1 || !*argv[optind]) {
		r = cli_usage_error(cli, "needs one REF (a sandbox id or name)");
		goto out;
	}
	path = cli_sandbox_path(argv[optind], "");
	if (!path) {
		r = cli_oom();
		goto out;
	}
	if (json_object_size(net) == 0) {
		/* no flags: show what the sandbox has */
		r = cli_call(cli, "GET", path, NULL, &sb);
	} else {
		r = cli_network_finish(cli, net);
		if (r == 0 && !(body = json_pack("{s:O}", "network", net)))
			r = cli_oom();
		if (r == 0)
			r = cli_call(cli, "PATCH", path, body, &sb);
	}
	if (r == 0)
		r = print_network(cli, sb);
out:
	json_decref(sb);
	json_decref(body);
	json_decref(net);
	return r;
}
