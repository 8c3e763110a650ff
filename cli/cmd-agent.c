/* cmd-agent.c: `agent NAME [TASK]`: a sandbox with a coding agent in it, in one create (the
 * API's "agent" field), then attached to the agent's terminal; and `secret set|ls|rm`: the
 * saved secrets (/v1/secrets) an agent's create falls back on. Credentials travel in request
 * bodies only, never on a command line. */
#include <errno.h>
#include <stdlib.h>
#include <termios.h>
#include <unistd.h>
#include "cli.h"
#include "client.h"
#include "output.h"
#include "table.h"
#include "util.h"

/* The environment names each agent's credential may have (the server's table: docs/api.md);
 * the ones set here are passed in the create's env. */
static const struct {
	const char *name;
	const char *const *credentials;
} agent_credentials[] = {
	{ "claude", (const char *const[]){ "ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", NULL } },
	{ "codex", (const char *const[]){ "OPENAI_API_KEY", NULL } },
	{ "gemini", (const char *const[]){ "GEMINI_API_KEY", "GOOGLE_API_KEY", NULL } },
	{ "opencode",
	  (const char *const[]){ "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", NULL } },
};

enum {
	OPT_REPO = 256,
	OPT_DETACH,
	OPT_ENV,
};

/* The agent's credential from our environment into env: every one of its names that is set
 * (the server takes the first it knows). None set: the server falls back on a saved secret
 * or says which variable is missing. */
static int
add_credentials(const char *agent, json_t *env)
{
	for (size_t i = 0; i < ARRAY_SIZE(agent_credentials); i++) {
		if (!streq(agent_credentials[i].name, agent))
			continue;
		for (const char *const *n = agent_credentials[i].credentials; *n; n++) {
			const char *v = getenv(*n);
			if (v && *v && !json_object_get(env, *n) &&
			    json_object_set_new(env, *n, json_string(v)) < 0)
				return cli_oom();
		}
	}
	return 0;
}

int
cmd_agent(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_SANDBOX_OPTIONS,
		{ "repo", required_argument, NULL, OPT_REPO },
		{ "detach", no_argument, NULL, OPT_DETACH },
		{ "env", required_argument, NULL, OPT_ENV },
		{ NULL, 0, NULL, 0 },
	};
	json_t *body = json_object(), *agent = json_object(), *env = json_object(),
	       *args = json_array(), *sb = NULL, *a;
	_cleanup_free_ char *id = NULL;
	bool detach = false;
	const char *state;
	int64_t pid;
	int c, r = 0, dash;

	if (!body || !agent || !env || !args) {
		r = cli_oom();
		goto out;
	}
	/* what follows "--" is the agent's own (getopt would take its options as ours) */
	for (dash = 1; dash < argc && !streq(argv[dash], "--"); dash++)
		;
	for (int i = dash + 1; i < argc; i++)
		if (json_array_append_new(args, json_string(argv[i])) < 0) {
			r = cli_oom();
			goto out;
		}
	while (r == 0 && (c = cli_getopt(cli, dash, argv, opts)) != -1) {
		r = cli_sandbox_option(cli, c, optarg, body);
		if (r != 1)
			continue;
		r = 0;
		switch (c) {
		case OPT_REPO:
			if (json_object_set_new(agent, "repo", json_string(optarg)) < 0)
				r = cli_usage_error(cli, "--repo takes a URL");
			break;
		case OPT_DETACH:
			detach = true;
			break;
		case OPT_ENV:
			r = cli_env_option(cli, env, optarg);
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
	if (dash - optind < 1 || dash - optind > 2 || !*argv[optind]) {
		r = cli_usage_error(cli, "needs the agent's NAME (claude, codex, gemini or "
		                         "opencode) and at most one TASK; put the agent's own "
		                         "options after --");
		goto out;
	}
	if (json_object_set_new(agent, "name", json_string(argv[optind])) < 0 ||
	    (dash - optind == 2 &&
	     json_object_set_new(agent, "task", json_string(argv[optind + 1])) < 0) ||
	    (json_array_size(args) && json_object_set(agent, "args", args) < 0)) {
		r = cli_usage_error(cli, "the agent's name, task and arguments must be UTF-8");
		goto out;
	}
	r = cli_sandbox_finish(cli, body);
	if (r == 0)
		r = add_credentials(argv[optind], env);
	if (r != 0)
		goto out;
	if ((json_object_size(env) && json_object_set(body, "env", env) < 0) ||
	    json_object_set(body, "agent", agent) < 0) {
		r = cli_oom();
		goto out;
	}
	/* answered once the agent started (or failed to) */
	r = cli_call(cli, "POST", "/v1/sandboxes", body, &sb);
	if (r != 0)
		goto out;
	id = termsafe_dup(output_str(sb, "id"));
	a = json_object_get(sb, "agent");
	state = output_str(a, "state");
	pid = output_int(a, "pid", 0);
	if (!state || !streq(state, "running") || pid <= 0 || pid > UINT32_MAX) {
		_cleanup_free_ char *why =
		        termsafe_dup(output_str(a, "message") ?: output_str(sb, "reason"));
		if (cli->json)
			(void)output_json_line(sb);
		else
			printf("%s\n", id ? id : "?");
		output_error("the agent did not start in %s (agent %s, sandbox %s)%s%s",
		             id ? id : "?", state ? state : "?", output_str(sb, "state") ?: "?",
		             why ? ": " : "", why ? why : "");
		r = CLI_EXIT_FAILED;
		goto out;
	}
	if (detach) {
		if (cli->json)
			r = output_json_line(sb) < 0 ? CLI_EXIT_FAILED : 0;
		else
			printf("%s %lld\n", id ? id : "?", (long long)pid);
		fflush(stdout);
		if (isatty(STDERR_FILENO))
			output_error("agent running; attach with: sandbox-cli attach %s %lld",
			             id ? id : "?", (long long)pid);
		goto out;
	}
	output_error("sandbox %s: agent %s is process %lld", id ? id : "?", argv[optind],
	             (long long)pid);
	r = cli_attach_to(cli, output_str(sb, "id"), (uint32_t)pid, true);
out:
	json_decref(sb);
	json_decref(args);
	json_decref(env);
	json_decref(agent);
	json_decref(body);
	return r;
}

/* ---- secret ---- */

/* Letters, digits and '_' alone (the server checks the rest of an environment name's rule) */
static bool
name_chars_ok(const char *name)
{
	return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
	       strlen(name);
}

/* A value from stdin: all of it, one trailing newline dropped. */
static int
read_stdin(struct buf *b)
{
	char chunk[4096];
	ssize_t n;

	while ((n = read(STDIN_FILENO, chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || buf_append(b, chunk, (size_t)n) < 0)
			return -1;
	}
	if (b->len && b->data[b->len - 1] == '\n')
		b->len--;
	if (b->len && b->data[b->len - 1] == '\r')
		b->len--;
	return buf_putc(b, '\0') < 0 ? -1 : 0;
}

/* A value typed at the terminal, not echoed. */
static int
prompt_value(const char *name, struct buf *b)
{
	struct termios old, quiet;
	int r;

	fprintf(stderr, "value of %s (not shown): ", name);
	fflush(stderr);
	if (tcgetattr(STDIN_FILENO, &old) < 0)
		return -1;
	quiet = old;
	quiet.c_lflag &= ~(tcflag_t)ECHO;
	(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
	for (;;) {
		char ch;
		ssize_t n = read(STDIN_FILENO, &ch, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || ch == '\n')
			break;
		if (buf_putc(b, ch) < 0)
			break;
	}
	(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
	fputc('\n', stderr);
	r = buf_putc(b, '\0');
	return r < 0 ? -1 : 0;
}

static int
secret_set(struct cli *cli, const char *name)
{
	_cleanup_buf_ struct buf value = BUF_INIT(64u << 10);
	_cleanup_free_ char *path = NULL;
	const char *from_env = getenv(name);
	json_t *body, *answer = NULL;
	int r;

	/* the name first: no value is read (or asked for) under a name that is refused */
	if (!name_chars_ok(name))
		return cli_usage_error(cli, "'%s' is not an environment variable's name", name);
	/* from our environment (the variable the agent would take), else piped in, else typed */
	if (from_env)
		r = buf_append(&value, from_env, strlen(from_env) + 1);
	else if (!isatty(STDIN_FILENO))
		r = read_stdin(&value);
	else
		r = prompt_value(name, &value);
	if (r < 0) {
		output_error("cannot read the value of %s (at most 32 KiB)", name);
		return CLI_EXIT_USAGE;
	}
	if (strlen(value.data) + 1 != value.len)
		return cli_usage_error(cli, "the value of %s holds a NUL byte", name);
	path = strdup_printf("/v1/secrets/%s", name);
	body = json_pack("{s:s}", "value", value.data);
	explicit_bzero(value.data, value.len);
	if (!path || !body) {
		json_decref(body);
		return body ? cli_oom() : cli_usage_error(cli, "the value must be UTF-8 text");
	}
	r = cli_call(cli, "PUT", path, body, &answer);
	json_decref(body);
	if (r == 0) {
		if (cli->json)
			r = output_json_line(answer) < 0 ? CLI_EXIT_FAILED : 0;
		else
			output_error("saved %s (its value is never shown again)", name);
	}
	json_decref(answer);
	return r;
}

static int
secret_ls(struct cli *cli)
{
	static const char *const headers[] = { "NAME", "UPDATED" };
	_cleanup_(table_freep) struct table *t = NULL;
	json_t *answer = NULL, *list, *x;
	size_t i;
	int r;

	r = cli_get_list(cli, "/v1/secrets", "secrets", &answer, &list);
	if (r >= 0)
		return r;
	t = table_new(ARRAY_SIZE(headers), headers);
	if (!t) {
		json_decref(answer);
		return cli_oom();
	}
	json_array_foreach (list, i, x) {
		const char *cells[] = { output_str(x, "name") ?: "?",
			                output_str(x, "updated_at") ?: "?" };
		(void)table_add(t, cells);
	}
	table_print(t, stdout);
	json_decref(answer);
	return 0;
}

static int
secret_rm(struct cli *cli, const char *name)
{
	_cleanup_free_ char *path = NULL;

	if (!name_chars_ok(name))
		return cli_usage_error(cli, "'%s' is not an environment variable's name", name);
	path = strdup_printf("/v1/secrets/%s", name);
	if (!path)
		return cli_oom();
	return cli_call(cli, "DELETE", path, NULL, NULL);
}

int
cmd_secret(struct cli *cli, int argc, char **argv)
{
	const char *sub;
	int c, n;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	n = argc - optind;
	sub = n > 0 ? argv[optind] : "";
	if (streq(sub, "set") && n == 2 && *argv[optind + 1])
		return secret_set(cli, argv[optind + 1]);
	if (streq(sub, "ls") && n == 1)
		return secret_ls(cli);
	if (streq(sub, "rm") && n == 2 && *argv[optind + 1])
		return secret_rm(cli, argv[optind + 1]);
	return cli_usage_error(cli, "use: secret set NAME | secret ls | secret rm NAME");
}
