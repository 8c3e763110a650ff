/* cmd-context.c: "context add|use|ls|rm": named endpoints and their credentials, kept in the
 * config file (see context.h). Nothing here talks to a server. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include "cli.h"
#include "client.h"
#include "context.h"
#include "output.h"
#include "table.h"
#include "util.h"

enum {
	OPT_TOKEN_FILE = 256,
	OPT_CA,
	OPT_USE,
	OPT_FORCE,
};

/* Loads the config, or says why it cannot and returns an exit code. */
static int
load(struct context_store *s)
{
	int r = context_load(s);

	if (r == -EBADMSG) {
		output_error("the config '%s' is damaged: %s; fix it or remove it", s->path,
		             s->error);
		return CLI_EXIT_USAGE;
	}
	if (r < 0) {
		output_error("cannot read the config '%s': %s", s->path ? s->path : "?",
		             strerror(-r));
		return CLI_EXIT_FAILED;
	}
	return 0;
}

static int
save(struct context_store *s)
{
	int r = context_save(s);

	if (r < 0) {
		output_error("cannot write the config '%s': %s", s->path, strerror(-r));
		return CLI_EXIT_FAILED;
	}
	return 0;
}

static int
context_add(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
		{ "ca", required_argument, NULL, OPT_CA },
		{ "use", no_argument, NULL, OPT_USE },
		{ "force", no_argument, NULL, OPT_FORCE },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_(context_store_done) struct context_store store = { 0 };
	_cleanup_free_ char *token = NULL, *ca = NULL;
	const char *token_file = NULL, *ca_file = NULL, *name, *endpoint, *why;
	enum endpoint_kind kind;
	bool use = false, force = false;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
		switch (c) {
		case OPT_TOKEN_FILE:
			token_file = optarg;
			break;
		case OPT_CA:
			ca_file = optarg;
			break;
		case OPT_USE:
			use = true;
			break;
		case OPT_FORCE:
			force = true;
			break;
		default:
			return cli_option_end(cli, c);
		}
	}
	if (argc - optind != 2)
		return cli_usage_error(cli, "needs a NAME and an ENDPOINT");
	name = argv[optind];
	endpoint = argv[optind + 1];
	if (!context_name_valid(name))
		return cli_usage_error(cli, "the name must be 1 to 63 letters, digits and ._- "
		                            "(not starting with . or -)");
	if (client_parse_endpoint(endpoint, &kind, &why) < 0)
		return cli_usage_error(cli, "endpoint '%s': %s", endpoint, why);
	if (token_file) {
		mode_t mode = 0;
		r = context_read_token(token_file, &token, &mode);
		if (r == -EPERM) {
			output_error("the token file '%s' is readable by group or others (mode "
			             "%04o); refusing it: run 'chmod 600 %s'",
			             token_file, (unsigned)mode, token_file);
			return CLI_EXIT_USAGE;
		}
		if (r < 0) {
			output_error("the token file '%s': %s", token_file,
			             r == -EBADMSG  ? "it does not hold a token (one line of "
			                              "printable characters without spaces)"
			             : r == -EINVAL ? "not a regular file"
			                            : strerror(-r));
			return CLI_EXIT_USAGE;
		}
	}
	if (ca_file) {
		/* the config keeps the path, made absolute so it works from any directory */
		ca = realpath(ca_file, NULL);
		if (!ca || access(ca, R_OK) < 0) {
			output_error("cannot read the CA file '%s': %s", ca_file, strerror(errno));
			return CLI_EXIT_USAGE;
		}
		if (kind != ENDPOINT_HTTPS)
			output_error("warning: --ca matters only for https endpoints");
	}
	r = load(&store);
	if (r != 0)
		return r;
	r = context_put(&store, name, endpoint, token, ca, force);
	if (r == -EEXIST) {
		output_error("there is already a context named '%s'; replace it with --force, or "
		             "remove it first: sandbox-cli context rm %s",
		             name, name);
		return CLI_EXIT_USAGE;
	}
	if (r >= 0 && use)
		r = context_use(&store, name);
	if (r < 0) {
		output_error("out of memory");
		return CLI_EXIT_FAILED;
	}
	r = save(&store);
	if (token)
		explicit_bzero(token, strlen(token));
	if (r != 0)
		return r;
	if (kind != ENDPOINT_UNIX && !token)
		output_error("warning: TCP endpoints need a token; add one with: sandbox-cli "
		             "context add %s %s --token-file FILE --force",
		             name, endpoint);
	printf("Added context '%s' (%s).\n", name, endpoint);
	if (use)
		printf("Now using context '%s'.\n", name);
	else
		printf("Use it with: sandbox-cli context use %s\n", name);
	return CLI_EXIT_OK;
}

/* use and rm: one NAME, one change to the stored contexts, saved. */
static int
change_named(struct cli *cli, int argc, char **argv, struct context_store *store,
             int (*change)(struct context_store *, const char *))
{
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (argc - optind != 1)
		return cli_usage_error(cli, "needs the NAME of a context");
	r = load(store);
	if (r != 0)
		return r;
	if (change(store, argv[optind]) < 0) {
		_cleanup_free_ char *safe = termsafe_dup(argv[optind]);
		output_error("there is no context named '%s' (see: sandbox-cli context ls)",
		             safe ? safe : "?");
		return CLI_EXIT_USAGE;
	}
	return save(store);
}

static int
context_use_cmd(struct cli *cli, int argc, char **argv)
{
	_cleanup_(context_store_done) struct context_store store = { 0 };
	int r = change_named(cli, argc, argv, &store, context_use);

	if (r != 0)
		return r;
	printf("Now using context '%s' (%s).\n", argv[optind],
	       output_str(context_get(&store, argv[optind]), "endpoint"));
	return CLI_EXIT_OK;
}

static int
context_ls(struct cli *cli, int argc, char **argv)
{
	static const char *const headers[] = { "CURRENT", "NAME", "ENDPOINT", "TOKEN", "CA" };
	_cleanup_(context_store_done) struct context_store store = { 0 };
	_cleanup_(table_freep) struct table *t = NULL;
	const char *cur, *name;
	json_t *ctx, *list;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind < argc)
		return cli_usage_error(cli, "takes no arguments");
	r = load(&store);
	if (r != 0)
		return r;
	cur = context_current(&store);
	if (cli->json) {
		/* never the token itself: only whether there is one */
		list = json_array();
		json_object_foreach (json_object_get(store.root, "contexts"), name, ctx)
			json_array_append_new(list, json_pack("{s:s, s:s, s:b, s:s?, s:b}", "name",
			                                      name, "endpoint",
			                                      output_str(ctx, "endpoint"), "token",
			                                      json_object_get(ctx, "token") != NULL,
			                                      "ca", output_str(ctx, "ca"),
			                                      "current", cur && streq(cur, name)));
		json_t *j = json_pack("{s:s?, s:o}", "current", cur, "contexts", list);
		r = j ? output_json_line(j) : -ENOMEM;
		json_decref(j);
		return r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
	}
	t = table_new(ARRAY_SIZE(headers), headers);
	if (!t)
		return CLI_EXIT_FAILED;
	json_object_foreach (json_object_get(store.root, "contexts"), name, ctx) {
		const char *row[] = { cur && streq(cur, name) ? "*" : "", name,
			              output_str(ctx, "endpoint"),
			              json_object_get(ctx, "token") ? "yes" : "no",
			              output_str(ctx, "ca") };
		if (table_add(t, row) < 0)
			return CLI_EXIT_FAILED;
	}
	if (table_rows(t) == 0) {
		printf("No contexts: sandbox-cli uses the local socket. Add one with:\n"
		       "  sandbox-cli context add NAME ENDPOINT [--token-file FILE] [--ca FILE]\n");
		return CLI_EXIT_OK;
	}
	table_print(t, stdout);
	if (!cur)
		printf("\nNo context is current: sandbox-cli uses the local socket "
		       "('sandbox-cli context use NAME' picks one).\n");
	return CLI_EXIT_OK;
}

static int
context_rm(struct cli *cli, int argc, char **argv)
{
	_cleanup_(context_store_done) struct context_store store = { 0 };
	int r = change_named(cli, argc, argv, &store, context_remove);

	if (r != 0)
		return r;
	printf("Removed context '%s'.\n", argv[optind]);
	return CLI_EXIT_OK;
}

static const struct verb context_verbs[] = {
	{ .name = "context add",
	  .usage = "context add NAME ENDPOINT [--token-file FILE] [--ca FILE] [--use] [--force]",
	  .summary = "Add a context: a named endpoint with its credentials.",
	  .help = "  ENDPOINT           unix:///PATH, http://HOST:PORT or https://HOST:PORT\n"
	          "  --token-file FILE  copy the token in FILE into the config (FILE must be\n"
	          "                     readable by its owner only: chmod 600 FILE)\n"
	          "  --ca FILE          trust this CA certificate (PEM) for an https endpoint\n"
	          "                     (the config keeps its absolute path)\n"
	          "  --use              make it the current context too\n"
	          "  --force            replace a context of the same name\n",
	  .run = context_add },
	{ .name = "context use",
	  .usage = "context use NAME",
	  .summary = "Make NAME the current context.",
	  .run = context_use_cmd },
	{ .name = "context ls",
	  .usage = "context ls",
	  .summary = "List the contexts (tokens are never shown); * marks the current one.",
	  .run = context_ls },
	{ .name = "context rm",
	  .usage = "context rm NAME",
	  .summary = "Remove a context and its token.",
	  .run = context_rm },
};

int
cmd_context(struct cli *cli, int argc, char **argv)
{
	const struct verb *parent = cli->verb;

	if (argc >= 2 && (streq(argv[1], "-h") || streq(argv[1], "--help"))) {
		cli_verb_help(parent, stdout);
		return CLI_EXIT_OK;
	}
	if (argc < 2)
		return cli_usage_error(cli, "needs add, use, ls or rm");
	for (size_t i = 0; i < ARRAY_SIZE(context_verbs); i++) {
		if (!streq(context_verbs[i].name + strlen("context "), argv[1]))
			continue;
		cli->verb = &context_verbs[i];
		return context_verbs[i].run(cli, argc - 1, argv + 1);
	}
	return cli_usage_error(cli, "unknown verb; use add, use, ls or rm");
}
