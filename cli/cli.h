/* cli.h: what sandbox-cli's verbs share: the invocation (global flags), the exit codes that
 * scripts rely on, option parsing with the global flags mixed in, and requests whose
 * failures are explained to the user in one place. */
#pragma once

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "macro.h"

/* Exit codes: documented in `sandbox-cli --help` and docs/cli.md; never renumber them. */
enum {
	CLI_EXIT_OK = 0,
	CLI_EXIT_FAILED = 1,      /* the server failed (5xx) or the operation did */
	CLI_EXIT_USAGE = 2,       /* bad arguments, bad local config, or 400 invalid_request */
	CLI_EXIT_UNREACHABLE = 3, /* no connection, DNS, TLS; or the connection broke */
	CLI_EXIT_DENIED = 4,      /* 401 unauthorized, 403 refused or forbidden_origin */
	CLI_EXIT_NOT_FOUND = 5,   /* 404 */
	CLI_EXIT_CONFLICT = 6,    /* 409 */
};

struct cli;
struct client;
struct client_response;

struct verb {
	const char *name;
	const char *usage;   /* after "sandbox-cli ", e.g. "inspect REF" */
	const char *summary; /* one line for the list of verbs */
	const char *help;    /* options and notes, shown by VERB --help */
	int (*run)(struct cli *cli, int argc, char **argv);
};

struct cli {
	bool json;              /* --json */
	const char *context;    /* --context */
	const char *endpoint;   /* --endpoint */
	const char *token_file; /* --token-file */
	const char *ca;         /* --ca */
	const struct verb *verb;
	struct client *client; /* made by cli_client() on first use */
	char *source;          /* where the endpoint came from, for messages */
};

void cli_done(struct cli *cli);

/* The global options, shared by main() (before the verb) and cli_getopt() (after it). */
extern const struct option cli_global_options[];
/* Applies global option c with its argument; false when c is not a global option. */
bool cli_global_option(struct cli *cli, int c, const char *arg);

/* getopt_long over a verb's arguments (argv[0] is the verb) with the global options mixed in,
 * which it applies itself. Returns the val of the verb's next option, 'h' for -h/--help, '?'
 * after printing what is wrong, or -1 at the end; the positional arguments are then
 * argv[optind..argc-1]. Verb options use vals >= 256 unless they have a short form. */
int cli_getopt(struct cli *cli, int argc, char **argv, const struct option *opts);
/* The default: of a verb's option loop: prints the verb's help for 'h' and returns 0 (the
 * caller returns it), else returns CLI_EXIT_USAGE. */
int cli_option_end(struct cli *cli, int c);
/* Prints "sandbox-cli: VERB: message" and where to find help; returns CLI_EXIT_USAGE. */
int cli_usage_error(struct cli *cli, const char *fmt, ...) _printf_(2, 3);
void cli_verb_help(const struct verb *v, FILE *f);

/* The connection to the endpoint that the flags, the environment and the contexts choose;
 * made on first use. 0, or an exit code after saying what is wrong. */
int cli_client(struct cli *cli, struct client **ret);
/* A second connection to the same endpoint with the same credentials, for requests made while
 * the first one streams (image pull). 0, or an exit code after saying what is wrong. The
 * caller frees it (before cli_done()). */
int cli_client_another(struct cli *cli, struct client **ret);

/* Sends a request (path already escaped) and checks the answer: 0 with the parsed 2xx body in
 * *ret (NULL when it was empty; caller owns; ret may be NULL), or an exit code after saying
 * what went wrong and what to do about it. */
int cli_call(struct cli *cli, const char *method, const char *path, const json_t *body,
             json_t **ret);
/* "... rm NAME...": DELETE <prefix><NAME escaped> for every NAME left after the options (none:
 * the usage error `none`), saying "removed NAME" for each one gone; every one is tried, and
 * the exit code is the first failure's. */
int cli_delete_each(struct cli *cli, int argc, char **argv, const char *prefix, const char *none);

/* GETs a list (path already escaped) whose answer holds the array key. With --json prints the
 * answer as it came. Returns an exit code when that, or a failure, is all there is to do;
 * else -1 with the answer (caller owns) and the array in it (borrowed) for a table. */
int cli_get_list(struct cli *cli, const char *path, const char *key, json_t **ret_answer,
                 json_t **ret_list);

/* Explains a request that got no answer (r from client_request()/client_stream()) or a
 * non-2xx answer; both return the exit code. */
int cli_fail_transport(struct cli *cli, int r);
/* Likewise for a request made on another client than cli's (cli_client_another()). */
int cli_fail_transport_on(struct client *c, int r);
int cli_fail_status(struct cli *cli, const struct client_response *resp);

/* Helpers for the verbs' requests and options. */
/* "/v1/sandboxes/<escaped ref><suffix>"; NULL when out of memory. Caller frees. */
char *cli_sandbox_path(const char *ref, const char *suffix);
/* Says "out of memory"; returns CLI_EXIT_FAILED. */
int cli_oom(void);
/* --env NAME=VALUE, or --env NAME (the value from our environment, off the command line),
 * into the object env. 0, or an exit code after saying what is wrong. */
int cli_env_option(struct cli *cli, json_t *env, const char *arg);
/* A whole number option (opt, for messages) up to max, as body[field]. 0 or an exit code. */
int cli_number_option(struct cli *cli, const char *opt, const char *value, uint64_t max,
                      json_t *body, const char *field);

/* The options that shape a new sandbox, shared by create and run: their getopt values (above
 * any verb's own, which count up from 256), their table entries, and the parser that puts
 * one into a create body. cli_sandbox_option returns 0 when it took c, an exit code when the
 * value is wrong, and 1 when c is not one of them; cli_sandbox_finish checks what only the
 * options together can tell (0 or an exit code) once they are all parsed. */
enum {
	CLI_OPT_NAME = 1000,
	CLI_OPT_IMAGE,
	CLI_OPT_CPUS,
	CLI_OPT_MEMORY,
	CLI_OPT_DISK,
	CLI_OPT_ALLOW,
	CLI_OPT_DENY,
	CLI_OPT_NETWORK,
};
/* --allow, --deny and --network: the network verb takes them too */
#define CLI_NETWORK_OPTIONS                                                                        \
	{ "allow", required_argument, NULL, CLI_OPT_ALLOW },                                       \
	        { "deny", required_argument, NULL, CLI_OPT_DENY },                                 \
	{                                                                                          \
		"network", required_argument, NULL, CLI_OPT_NETWORK                                \
	}
#define CLI_SANDBOX_OPTIONS                                                                        \
	{ "name", required_argument, NULL, CLI_OPT_NAME },                                         \
	        { "image", required_argument, NULL, CLI_OPT_IMAGE },                               \
	        { "cpus", required_argument, NULL, CLI_OPT_CPUS },                                 \
	        { "memory", required_argument, NULL, CLI_OPT_MEMORY },                             \
	        { "disk", required_argument, NULL, CLI_OPT_DISK }, CLI_NETWORK_OPTIONS
int cli_sandbox_option(struct cli *cli, int c, const char *arg, json_t *body);
int cli_sandbox_finish(struct cli *cli, json_t *body);

/* --allow NAME and --deny NAME (appended to net's "allow" and "deny" as typed: the server
 * normalises and judges names) and --network MODE (none, allowlist or open) into net, a
 * request's network object. Same returns as cli_sandbox_option. */
int cli_network_option(struct cli *cli, int c, const char *arg, json_t *net);
/* Once the options are parsed: --allow asks for mode allowlist, so it is the mode when
 * --network is not given and a usage error with another one. 0 or an exit code. */
int cli_network_finish(struct cli *cli, json_t *net);

/* Attaches to process pid of sandbox ref (a TTY one in raw mode when stdin is a terminal) until
 * it exits (its exit code) or the user detaches (0, after saying how to come back). */
int cli_attach_to(struct cli *cli, const char *ref, uint32_t pid, bool tty);

/* The verbs (cmd-*.c). Each returns the process exit code. */
int cmd_context(struct cli *cli, int argc, char **argv);
int cmd_doctor(struct cli *cli, int argc, char **argv);
int cmd_list(struct cli *cli, int argc, char **argv);
int cmd_inspect(struct cli *cli, int argc, char **argv);
int cmd_create(struct cli *cli, int argc, char **argv);
int cmd_stop(struct cli *cli, int argc, char **argv);
int cmd_start(struct cli *cli, int argc, char **argv);
int cmd_suspend(struct cli *cli, int argc, char **argv);
int cmd_resume(struct cli *cli, int argc, char **argv);
int cmd_kill(struct cli *cli, int argc, char **argv);
int cmd_events(struct cli *cli, int argc, char **argv);
int cmd_metrics(struct cli *cli, int argc, char **argv);
int cmd_run(struct cli *cli, int argc, char **argv);
int cmd_exec(struct cli *cli, int argc, char **argv);
int cmd_attach(struct cli *cli, int argc, char **argv);
int cmd_shell(struct cli *cli, int argc, char **argv);
int cmd_ps(struct cli *cli, int argc, char **argv);
int cmd_cp(struct cli *cli, int argc, char **argv);
int cmd_ls(struct cli *cli, int argc, char **argv);
int cmd_port_forward(struct cli *cli, int argc, char **argv);
int cmd_image(struct cli *cli, int argc, char **argv);
int cmd_snapshot(struct cli *cli, int argc, char **argv);
int cmd_volume(struct cli *cli, int argc, char **argv);
/* --volume NAME:PATH[:ro] appended to the array volumes as {name, path, read_only}. 0, or an
 * exit code after saying what is wrong. */
int cli_volume_option(struct cli *cli, json_t *volumes, const char *arg);
int cmd_node(struct cli *cli, int argc, char **argv);
int cmd_network(struct cli *cli, int argc, char **argv);
int cmd_agent(struct cli *cli, int argc, char **argv);
int cmd_secret(struct cli *cli, int argc, char **argv);
