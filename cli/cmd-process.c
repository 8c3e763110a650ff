/* cmd-process.c: the process verbs: run (one command in a new sandbox), exec, attach, shell
 * and ps. A command is started with POST .../processes and followed over attach
 * (sbx-stream/1, see attach.c): its output streams live, and its exit code becomes ours. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include "attach.h"
#include "cli.h"
#include "client.h"
#include "output.h"
#include "table.h"
#include "term.h"
#include "util.h"

#define TTY_SIZE_MAX 1000  /* the server's largest rows and cols */
#define EXIT_TIMED_OUT 124 /* as timeout(1) says it */

enum {
	OPT_ENV = 256,
	OPT_CWD,
	OPT_KEEP,
	OPT_TIMEOUT,
	OPT_IDLE,
	OPT_LIFETIME,
};

/* What run and exec start. */
struct command {
	json_t *body; /* the POST .../processes body */
	json_t *env;
	bool tty, keep;
};

static void
command_done(struct command *cmd)
{
	json_decref(cmd->body);
	json_decref(cmd->env);
}

static int
command_init(struct command *cmd)
{
	cmd->body = json_object();
	cmd->env = json_object();
	return cmd->body && cmd->env ? 0 : cli_oom();
}

/* A process option of run and exec: 0 when taken, 1 when c is not one, or an exit code. */
static int
command_option(struct cli *cli, struct command *cmd, int c, const char *arg)
{
	switch (c) {
	case 't':
		cmd->tty = true;
		return 0;
	case OPT_KEEP:
		cmd->keep = true;
		return 0;
	case OPT_ENV:
		return cli_env_option(cli, cmd->env, arg);
	case OPT_CWD:
		if (arg[0] != '/')
			return cli_usage_error(cli, "--cwd takes an absolute path in the sandbox");
		return json_object_set_new(cmd->body, "cwd", json_string(arg)) < 0
		               ? cli_usage_error(cli, "--cwd must be text")
		               : 0;
	case OPT_TIMEOUT:
		return cli_number_option(cli, "--timeout", arg, INT64_MAX, cmd->body,
		                         "timeout_secs");
	default:
		return 1;
	}
}

/* A $TERM worth passing on: a short name of printable characters. */
static bool
term_name_valid(const char *term)
{
	size_t n = term ? strlen(term) : 0;

	if (n == 0 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++)
		if (term[i] <= ' ' || term[i] > '~')
			return false;
	return true;
}

/* The rest of the body: argv, env, and the terminal for --tty. */
static int
command_finish(struct cli *cli, struct command *cmd, int argc, char **argv)
{
	json_t *a = json_array();
	unsigned short rows, cols;
	const char *term = getenv("TERM");

	if (!a || json_object_set_new(cmd->body, "argv", a) < 0)
		return cli_oom();
	for (int i = 0; i < argc; i++)
		if (json_array_append_new(a, json_string(argv[i])) < 0)
			return cli_usage_error(cli, "the command's arguments must be text");
	if (cmd->tty) {
		if (!isatty(STDIN_FILENO))
			return cli_usage_error(cli, "--tty needs a terminal on stdin");
		(void)term_size(STDIN_FILENO, &rows, &cols);
		rows = MIN(rows, TTY_SIZE_MAX);
		cols = MIN(cols, TTY_SIZE_MAX);
		/* the guest's programs draw for the terminal we have */
		if (!json_object_get(cmd->env, "TERM") && term_name_valid(term) &&
		    json_object_set_new(cmd->env, "TERM", json_string(term)) < 0)
			return cli_oom();
		if (json_object_set_new(cmd->body, "tty", json_true()) < 0 ||
		    json_object_set_new(cmd->body, "rows", json_integer(rows)) < 0 ||
		    json_object_set_new(cmd->body, "cols", json_integer(cols)) < 0)
			return cli_oom();
	}
	if (cmd->keep && json_object_set_new(cmd->body, "keep", json_true()) < 0)
		return cli_oom();
	if (json_object_size(cmd->env) && json_object_set(cmd->body, "env", cmd->env) < 0)
		return cli_oom();
	return 0;
}

/* POST .../processes: 0 with the process's handle, or an exit code. */
static int
start_process(struct cli *cli, const char *ref, const json_t *body, uint32_t *ret_pid)
{
	_cleanup_free_ char *path = cli_sandbox_path(ref, "/processes");
	json_t *p = NULL;
	int64_t pid;
	int r;

	if (!path)
		return cli_oom();
	r = cli_call(cli, "POST", path, body, &p);
	if (r != 0)
		return r;
	pid = output_int(p, "pid", 0);
	json_decref(p);
	if (pid <= 0 || pid > UINT32_MAX) {
		output_error("the server's process has no pid");
		return CLI_EXIT_FAILED;
	}
	*ret_pid = (uint32_t)pid;
	return 0;
}

static void
come_back_hint(const char *ref, uint32_t pid)
{
	_cleanup_free_ char *safe = termsafe_dup(ref);

	output_error("process %u keeps running; come back with: sandbox-cli attach %s %u", pid,
	             safe ? safe : "?", pid);
}

/* Our exit code for how a session ended. The process's own code is 0-255, 128+signal when a
 * signal ended it; the server says -1 when its timeout did, and we say 124, as timeout(1). */
static int
session_exit_code(const struct attach_result *res)
{
	switch (res->end) {
	case ATTACH_EXITED:
		if (res->exit_code == -1) {
			output_error("the command was ended by its timeout");
			return EXIT_TIMED_OUT;
		}
		return res->exit_code & 0xff;
	case ATTACH_DETACHED:
		return res->by_key ? CLI_EXIT_OK : 128 + SIGINT;
	case ATTACH_SIGNALLED:
		return 128 + res->signo;
	case ATTACH_BROKE:
	default:
		return CLI_EXIT_UNREACHABLE;
	}
}

/* Starts cmd in sandbox ref and follows it until it ends or we leave; our exit code. When we
 * leave first and the process stays reachable, says how to come back. */
static int
run_command(struct cli *cli, const char *ref, const struct command *cmd, bool reachable)
{
	struct attach_opts o = { .ref = ref, .tty = cmd->tty, .forward_interrupt = !cmd->tty };
	struct attach_result res = { 0 };
	int r;

	r = start_process(cli, ref, cmd->body, &o.pid);
	if (r != 0)
		return r;
	if (cmd->tty)
		o.in = ATTACH_STDIN_SHARE; /* a terminal that hangs up detaches; it ends nothing */
	else if (isatty(STDIN_FILENO))
		o.in = ATTACH_STDIN_CLOSE; /* nobody types into a command without --tty */
	else
		o.in = ATTACH_STDIN_FORWARD;
	r = attach_run(cli, &o, &res);
	if (r == 0 && res.end == ATTACH_EXITED)
		return session_exit_code(&res);
	if (reachable)
		come_back_hint(ref, o.pid);
	return r != 0 ? r : session_exit_code(&res);
}

/* ---- run ---- */

static int
remove_sandbox(struct cli *cli, const char *id)
{
	_cleanup_free_ char *path = cli_sandbox_path(id, "");
	int r;

	if (!path)
		return cli_oom();
	r = cli_call(cli, "DELETE", path, NULL, NULL);
	if (r != 0)
		output_error("sandbox '%s' is left behind; remove it with: sandbox-cli kill %s", id,
		             id);
	return r;
}

int
cmd_run(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_SANDBOX_OPTIONS,
		{ "env", required_argument, NULL, OPT_ENV },
		{ "cwd", required_argument, NULL, OPT_CWD },
		{ "keep", no_argument, NULL, OPT_KEEP },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "tty", no_argument, NULL, 't' },
		{ "idle-timeout", required_argument, NULL, OPT_IDLE },
		{ "lifetime", required_argument, NULL, OPT_LIFETIME },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_(command_done) struct command cmd = { 0 };
	_cleanup_free_ char *id = NULL;
	json_t *create = json_object(), *sb = NULL;
	const char *state;
	int c, r;

	r = create ? command_init(&cmd) : cli_oom();
	while (r == 0 && (c = cli_getopt(cli, argc, argv, opts)) != -1) {
		r = cli_sandbox_option(cli, c, optarg, create);
		if (r == 1)
			r = command_option(cli, &cmd, c, optarg);
		if (r == 1 && c == OPT_IDLE)
			r = cli_number_option(cli, "--idle-timeout", optarg, INT64_MAX, create,
			                      "idle_timeout_secs");
		if (r == 1 && c == OPT_LIFETIME)
			r = cli_number_option(cli, "--lifetime", optarg, INT64_MAX, create,
			                      "lifetime_secs");
		if (r == 1) {
			json_decref(create);
			return cli_option_end(cli, c);
		}
	}
	/* the sandbox ends with us: should we die before we remove it (kill -9, a lost
	 * connection), the server ends it once we are gone for its grace; a lifetime of a day
	 * is the server's second guard, unless --lifetime says otherwise */
	if (r == 0 && !cmd.keep && json_object_set_new(create, "bound_to_client", json_true()) < 0)
		r = cli_oom();
	if (r == 0 && optind == argc)
		r = cli_usage_error(cli,
		                    "needs a command: sandbox-cli run [options] -- CMD [ARGS]");
	if (r == 0)
		r = cli_sandbox_finish(cli, create);
	if (r == 0)
		r = command_finish(cli, &cmd, argc - optind, argv + optind);
	if (r == 0 && term_signals_init() < 0)
		r = cli_oom();
	if (r != 0) {
		json_decref(create);
		return r;
	}

	/* a Ctrl-C while the sandbox boots cannot stop the boot: the sandbox is removed once
	 * it exists */
	term_interrupt_message("sandbox-cli: interrupted; the sandbox is removed as soon as it "
	                       "has started\n");
	r = cli_call(cli, "POST", "/v1/sandboxes", create, &sb);
	json_decref(create);
	term_interrupt_message(NULL);
	if (r != 0)
		return r;
	id = output_str(sb, "id") ? strdup(output_str(sb, "id")) : NULL;
	state = output_str(sb, "state");
	if (!id) {
		json_decref(sb);
		output_error("the server's sandbox has no id");
		return CLI_EXIT_FAILED;
	}
	if (!state || !streq(state, "running")) {
		_cleanup_free_ char *why =
		        termsafe_dup(output_str(sb, "reason") ?: "no reason given");
		_cleanup_free_ char *st = termsafe_dup(state ?: "?");
		output_error("sandbox '%s' did not start (%s): %s", id, st ? st : "?",
		             why ? why : "?");
		json_decref(sb);
		if (!cmd.keep)
			(void)remove_sandbox(cli, id);
		return CLI_EXIT_FAILED;
	}
	json_decref(sb);
	if (cmd.keep)
		output_error("sandbox %s is kept; remove it with: sandbox-cli kill %s", id, id);
	r = term_interrupts() > 0 ? 128 + SIGINT : run_command(cli, id, &cmd, cmd.keep);
	if (!cmd.keep)
		(void)remove_sandbox(cli, id);
	return r;
}

/* ---- exec ---- */

int
cmd_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "env", required_argument, NULL, OPT_ENV },
		{ "cwd", required_argument, NULL, OPT_CWD },
		{ "keep", no_argument, NULL, OPT_KEEP },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "tty", no_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	_cleanup_(command_done) struct command cmd = { 0 };
	int c, r;

	r = command_init(&cmd);
	while (r == 0 && (c = cli_getopt(cli, argc, argv, opts)) != -1) {
		r = command_option(cli, &cmd, c, optarg);
		if (r == 1)
			return cli_option_end(cli, c);
	}
	if (r != 0)
		return r;
	if (argc - optind < 2 || !*argv[optind])
		return cli_usage_error(cli, "needs a sandbox and a command: sandbox-cli exec REF "
		                            "[options] -- CMD [ARGS]");
	r = command_finish(cli, &cmd, argc - optind - 1, argv + optind + 1);
	if (r != 0)
		return r;
	if (term_signals_init() < 0)
		return cli_oom();
	return run_command(cli, argv[optind], &cmd, true);
}

/* ---- attach and shell ---- */

/* Follows process pid (tty: whether it has a terminal) interactively; our exit code. */
int
cli_attach_to(struct cli *cli, const char *ref, uint32_t pid, bool tty)
{
	struct attach_opts o = {
		.ref = ref,
		.pid = pid,
		.tty = tty && isatty(STDIN_FILENO),
		/* attaching never ends the process's input: another client may be feeding it */
		.in = ATTACH_STDIN_SHARE,
	};
	struct attach_result res = { 0 };
	_cleanup_free_ char *safe = termsafe_dup(ref);
	int r;

	if (term_signals_init() < 0)
		return cli_oom();
	if (isatty(STDIN_FILENO))
		output_error("attached to process %u in %s; detach with %s", pid, safe ? safe : "?",
		             o.tty ? "Ctrl-]" : "Ctrl-C");
	r = attach_run(cli, &o, &res);
	if (r != 0)
		return r;
	if (res.end == ATTACH_EXITED)
		return session_exit_code(&res);
	come_back_hint(ref, pid);
	return res.end == ATTACH_DETACHED ? CLI_EXIT_OK : session_exit_code(&res);
}

/* The newest running process of a sandbox's list, or NULL. */
static const json_t *
newest_running(const json_t *list)
{
	const json_t *best = NULL, *p;
	size_t i;

	json_array_foreach (list, i, p) {
		const char *state = output_str(p, "state");
		if (!state || !streq(state, "running"))
			continue;
		/* started_at has seconds; pids grow, so they break ties */
		if (!best ||
		    strcmp(output_str(p, "started_at") ?: "",
		           output_str(best, "started_at") ?: "") > 0 ||
		    (strcmp(output_str(p, "started_at") ?: "",
		            output_str(best, "started_at") ?: "") == 0 &&
		     output_int(p, "pid", 0) > output_int(best, "pid", 0)))
			best = p;
	}
	return best;
}

int
cmd_attach(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *path = NULL, *safe = NULL;
	const char *ref;
	json_t *answer = NULL;
	const json_t *p;
	uint64_t pid = 0;
	bool tty;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (argc - optind < 1 || argc - optind > 2 || !*argv[optind])
		return cli_usage_error(cli, "needs a sandbox and optionally a process: sandbox-cli "
		                            "attach REF [PID]");
	ref = argv[optind];
	if (argc - optind == 2 &&
	    (parse_u64(argv[optind + 1], &pid) < 0 || pid == 0 || pid > UINT32_MAX))
		return cli_usage_error(cli, "PID is a process number (see: sandbox-cli ps REF)");
	if (pid) {
		_cleanup_free_ char *suffix =
		        strdup_printf("/processes/%llu", (unsigned long long)pid);
		path = suffix ? cli_sandbox_path(ref, suffix) : NULL;
	} else {
		path = cli_sandbox_path(ref, "/processes");
	}
	safe = termsafe_dup(ref);
	if (!path || !safe)
		return cli_oom();
	r = cli_call(cli, "GET", path, NULL, &answer);
	if (r != 0)
		return r;
	p = pid ? answer : newest_running(json_object_get(answer, "processes"));
	if (!p) {
		json_decref(answer);
		output_error("no process is running in sandbox '%s'; name one (see: sandbox-cli ps "
		             "%s)",
		             safe, safe);
		return CLI_EXIT_NOT_FOUND;
	}
	pid = (uint64_t)output_int(p, "pid", 0);
	tty = json_is_true(json_object_get(p, "tty"));
	json_decref(answer);
	if (pid == 0 || pid > UINT32_MAX) {
		output_error("the server's process has no pid");
		return CLI_EXIT_FAILED;
	}
	return cli_attach_to(cli, ref, (uint32_t)pid, tty);
}

int
cmd_shell(struct cli *cli, int argc, char **argv)
{
	_cleanup_(command_done) struct command cmd = { .tty = true, .keep = true };
	/* the image's bash when it has one (history, line editing), as the dashboard does;
	 * /bin/sh is always there */
	char *shell_argv[] = {
		"/bin/sh", "-c",
		"if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi"
	};
	uint32_t pid;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (argc - optind != 1 || !*argv[optind])
		return cli_usage_error(cli, "needs one REF (a sandbox id or name)");
	if (!isatty(STDIN_FILENO))
		return cli_usage_error(cli, "needs a terminal on stdin; without one, run commands "
		                            "with: sandbox-cli exec REF -- CMD [ARGS]");
	r = command_init(&cmd);
	if (r == 0)
		r = command_finish(cli, &cmd, (int)ARRAY_SIZE(shell_argv), shell_argv);
	if (r == 0)
		r = start_process(cli, argv[optind], cmd.body, &pid);
	if (r != 0)
		return r;
	/* a kept TTY process: detaching (Ctrl-]) leaves it running, and attach shows what
	 * happened meanwhile */
	return cli_attach_to(cli, argv[optind], pid, true);
}

/* ---- ps ---- */

/* argv as one line a shell would take back: words that need it are single-quoted. */
static char *
join_argv(const json_t *argv)
{
	_cleanup_buf_ struct buf b = BUF_INIT(64u << 10);
	const json_t *v;
	size_t i;
	int r = 0;

	json_array_foreach (argv, i, v) {
		const char *s = json_string_value(v) ?: "";
		bool plain = *s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		                             "0123456789_@%+=:,./-") == strlen(s);
		if (i > 0)
			r |= buf_putc(&b, ' ');
		if (plain) {
			r |= buf_puts(&b, s);
			continue;
		}
		r |= buf_putc(&b, '\'');
		for (; *s; s++)
			r |= *s == '\'' ? buf_puts(&b, "'\\''") : buf_putc(&b, *s);
		r |= buf_putc(&b, '\'');
	}
	if (r < 0)
		return NULL;
	return b.len ? buf_steal(&b) : strdup(""); /* buf_steal() of nothing is not a string */
}

int
cmd_ps(struct cli *cli, int argc, char **argv)
{
	static const char *const headers[] = { "PID",  "STATE",   "EXIT",   "TTY",
		                               "KEEP", "STARTED", "COMMAND" };
	_cleanup_(table_freep) struct table *t = NULL;
	_cleanup_free_ char *path = NULL;
	json_t *answer = NULL, *list, *p;
	int64_t now = now_unix_ms() / 1000;
	size_t i;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (argc - optind != 1 || !*argv[optind])
		return cli_usage_error(cli, "needs one REF (a sandbox id or name)");
	path = cli_sandbox_path(argv[optind], "/processes");
	if (!path)
		return cli_oom();
	r = cli_get_list(cli, path, "processes", &answer, &list);
	if (r >= 0)
		return r;
	t = table_new(ARRAY_SIZE(headers), headers);
	if (!t) {
		json_decref(answer);
		return cli_oom();
	}
	json_array_foreach (list, i, p) {
		_cleanup_free_ char *command = join_argv(json_object_get(p, "argv"));
		char pid[24], exit_code[24] = "-", started[32] = "-", age[24];
		json_t *code = json_object_get(p, "exit_code");
		int64_t when;

		snprintf(pid, sizeof(pid), "%lld", (long long)output_int(p, "pid", 0));
		if (json_is_integer(code))
			snprintf(exit_code, sizeof(exit_code), "%lld",
			         (long long)json_integer_value(code));
		if (output_parse_time(output_str(p, "started_at"), &when) == 0) {
			output_age(now - when, age);
			snprintf(started, sizeof(started), "%s ago", age);
		}
		const char *row[] = {
			pid,
			output_str(p, "state"),
			exit_code,
			json_is_true(json_object_get(p, "tty")) ? "yes" : "no",
			json_is_true(json_object_get(p, "keep")) ? "yes" : "no",
			started,
			command,
		};
		if (!command || table_add(t, row) < 0) {
			json_decref(answer);
			return cli_oom();
		}
	}
	json_decref(answer);
	if (table_rows(t) == 0) {
		fprintf(stderr, "No processes.\n");
		return CLI_EXIT_OK;
	}
	table_print(t, stdout);
	return CLI_EXIT_OK;
}
