/* cli.c: see cli.h. Where the endpoint comes from (flags, environment, contexts, the local
 * socket), option parsing shared by every verb, and the one place that turns a failed request
 * into a message that says what to do and an exit code. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include "cli.h"
#include "client.h"
#include "context.h"
#include "output.h"
#include "paths.h"
#include "util.h"

enum {
	OPT_CONTEXT = 0x1000,
	OPT_ENDPOINT,
	OPT_TOKEN_FILE,
	OPT_CA,
	OPT_JSON,
};

const struct option cli_global_options[] = {
	{ "context", required_argument, NULL, OPT_CONTEXT },
	{ "endpoint", required_argument, NULL, OPT_ENDPOINT },
	{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
	{ "ca", required_argument, NULL, OPT_CA },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

void
cli_done(struct cli *cli)
{
	cli->client = client_free(cli->client);
	free(cli->source);
	cli->source = NULL;
}

bool
cli_global_option(struct cli *cli, int c, const char *arg)
{
	switch (c) {
	case OPT_CONTEXT:
		cli->context = arg;
		return true;
	case OPT_ENDPOINT:
		cli->endpoint = arg;
		return true;
	case OPT_TOKEN_FILE:
		cli->token_file = arg;
		return true;
	case OPT_CA:
		cli->ca = arg;
		return true;
	case OPT_JSON:
		cli->json = true;
		return true;
	default:
		return false;
	}
}

void
cli_verb_help(const struct verb *v, FILE *f)
{
	fprintf(f, "usage: sandbox-cli %s\n\n%s\n", v->usage, v->summary);
	if (v->help && *v->help)
		fprintf(f, "\n%s", v->help);
	fputs("\nGlobal options (--context NAME, --endpoint URL, --token-file FILE, --ca FILE,\n"
	      "--json) go before or after the verb; see 'sandbox-cli --help'.\n",
	      f);
}

int
cli_usage_error(struct cli *cli, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "sandbox-cli: %s: ", cli->verb->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'sandbox-cli %s --help'.\n", cli->verb->name);
	return CLI_EXIT_USAGE;
}

int
cli_option_end(struct cli *cli, int c)
{
	if (c == 'h') {
		cli_verb_help(cli->verb, stdout);
		return CLI_EXIT_OK;
	}
	return CLI_EXIT_USAGE; /* cli_getopt() said what was wrong */
}

int
cli_getopt(struct cli *cli, int argc, char **argv, const struct option *opts)
{
	/* the merged table is built when a new argument vector starts being parsed */
	static struct option merged[64];
	static char shortopts[64];
	static char **parsing;
	int c;

	if (parsing != argv) {
		size_t n = 0, s = 0;
		shortopts[s++] = ':';
		shortopts[s++] = 'h';
		/* the verb's own first: "context add --ca" is the context's CA */
		for (size_t i = 0; opts && opts[i].name && n < ARRAY_SIZE(merged) - 8; i++) {
			merged[n++] = opts[i];
			if (opts[i].val > 0 && opts[i].val < 128 && s < sizeof(shortopts) - 3) {
				shortopts[s++] = (char)opts[i].val;
				if (opts[i].has_arg == required_argument)
					shortopts[s++] = ':';
			}
		}
		for (size_t i = 0; cli_global_options[i].name; i++)
			merged[n++] = cli_global_options[i];
		merged[n] = (struct option){ 0 };
		shortopts[s] = '\0';
		parsing = argv;
		optind = 0; /* glibc: start over */
	}
	opterr = 0;
	for (;;) {
		c = getopt_long(argc, argv, shortopts, merged, NULL);
		if (c == -1 || c == 'h')
			return c;
		if (c == '?' || c == ':') {
			char shortname[3] = { '-', (char)optopt, '\0' };
			/* a short option is named by optopt; a long one only by where it was */
			const char *opt = optopt > 0 && optopt < 128 ? shortname : argv[optind - 1];
			_cleanup_free_ char *safe = termsafe_dup(opt);
			if (c == '?')
				cli_usage_error(cli, "unknown option '%s'", safe ? safe : "?");
			else
				cli_usage_error(cli, "option '%s' needs a value",
				                safe ? safe : "?");
			return '?';
		}
		if (!cli_global_option(cli, c, optarg))
			return c;
	}
}

/* ---- where the endpoint comes from ---- */

static const char *
env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

struct target {
	char *endpoint;
	char *token;
	char *ca;
};

static void
target_done(struct target *t)
{
	free(t->endpoint);
	if (t->token) {
		explicit_bzero(t->token, strlen(t->token));
		free(t->token);
	}
	free(t->ca);
}

/* Loads the contexts and picks the one to use: the named one, else the current one, else
 * none (*ret NULL). 0 or an exit code. */
static int
pick_context(struct context_store *store, const char **name, json_t **ret)
{
	int r;

	*ret = NULL;
	r = context_load(store);
	if (r == -EBADMSG) {
		output_error("the config '%s' is damaged: %s; fix it or remove it", store->path,
		             store->error);
		return CLI_EXIT_USAGE;
	}
	if (r < 0) {
		output_error("cannot read the config '%s': %s", store->path ? store->path : "?",
		             strerror(-r));
		return CLI_EXIT_FAILED;
	}
	if (store->loose_mode)
		output_error("warning: the config '%s' is readable by others and holds tokens; "
		             "run 'chmod 600 %s'",
		             store->path, store->path);
	if (!*name)
		*name = context_current(store);
	if (!*name)
		return 0;
	*ret = context_get(store, *name);
	if (!*ret) {
		_cleanup_free_ char *safe = termsafe_dup(*name);
		output_error("there is no context named '%s' (see: sandbox-cli context ls)",
		             safe ? safe : "?");
		return CLI_EXIT_USAGE;
	}
	return 0;
}

static int
resolve(struct cli *cli, struct target *t)
{
	_cleanup_(context_store_done) struct context_store store = { 0 };
	const char *named = cli->context ? cli->context : env_nonempty("SANDBOX_CONTEXT");
	const char *ctx_name = named, *endpoint = cli->endpoint, *token_env, *ca, *why;
	enum endpoint_kind kind;
	bool use_ctx_creds;
	json_t *ctx = NULL;
	int r;

	if (endpoint) {
		cli->source = strdup("--endpoint");
	} else if ((endpoint = env_nonempty("SANDBOX_ENDPOINT"))) {
		cli->source = strdup("$SANDBOX_ENDPOINT");
	}
	/* the config is read only when it matters, so --endpoint works with a damaged one */
	if (named || !endpoint) {
		r = pick_context(&store, &ctx_name, &ctx);
		if (r != 0)
			return r;
	}
	/* a context's credentials go only to its own endpoint, unless the context was named
	 * explicitly: an --endpoint typed on the command line never gets the current
	 * context's token by accident */
	use_ctx_creds = ctx && (named || !endpoint);
	if (!endpoint && ctx) {
		endpoint = json_string_value(json_object_get(ctx, "endpoint"));
		cli->source = strdup_printf("context '%s'", ctx_name);
	} else if (!endpoint) {
		_cleanup_free_ char *sock = paths_default_socket();
		if (!sock) {
			output_error("cannot tell the default socket: no home directory is known");
			return CLI_EXIT_FAILED;
		}
		t->endpoint = strdup_printf("unix://%s", sock);
		cli->source = strdup("the default socket");
	}
	if (!t->endpoint)
		t->endpoint = strdup(endpoint);
	if (!t->endpoint || !cli->source) {
		output_error("out of memory");
		return CLI_EXIT_FAILED;
	}
	if (client_parse_endpoint(t->endpoint, &kind, &why) < 0) {
		_cleanup_free_ char *safe = termsafe_dup(t->endpoint);
		output_error("%s: endpoint '%s' is invalid: %s", cli->source, safe ? safe : "?",
		             why);
		return CLI_EXIT_USAGE;
	}

	token_env = env_nonempty("SANDBOX_TOKEN");
	if (cli->token_file) {
		mode_t mode = 0;
		r = context_read_token(cli->token_file, &t->token, &mode);
		if (r == -EPERM) {
			output_error(
			        "--token-file '%s' is readable by group or others (mode %04o); "
			        "run 'chmod 600 %s'",
			        cli->token_file, (unsigned)mode, cli->token_file);
			return CLI_EXIT_USAGE;
		}
		if (r < 0) {
			output_error("--token-file '%s': %s", cli->token_file,
			             r == -EBADMSG ? "it does not hold a token (one line of "
			                             "printable characters without spaces)"
			                           : strerror(-r));
			return CLI_EXIT_USAGE;
		}
	} else if (token_env) {
		if (!context_token_valid(token_env)) {
			output_error("$SANDBOX_TOKEN is not a token (printable characters, no "
			             "spaces)");
			return CLI_EXIT_USAGE;
		}
		t->token = strdup(token_env);
		if (!t->token)
			return CLI_EXIT_FAILED;
	} else if (use_ctx_creds && json_object_get(ctx, "token")) {
		t->token = strdup(json_string_value(json_object_get(ctx, "token")));
		if (!t->token)
			return CLI_EXIT_FAILED;
	}

	ca = cli->ca ? cli->ca : env_nonempty("SANDBOX_CA");
	if (!ca && use_ctx_creds)
		ca = json_string_value(json_object_get(ctx, "ca"));
	if (ca) {
		if (access(ca, R_OK) < 0) {
			output_error("cannot read the CA file '%s': %s", ca, strerror(errno));
			return CLI_EXIT_USAGE;
		}
		t->ca = strdup(ca);
		if (!t->ca)
			return CLI_EXIT_FAILED;
	}
	return 0;
}

int
cli_client(struct cli *cli, struct client **ret)
{
	_cleanup_(target_done) struct target t = { 0 };
	int r;

	if (cli->client) {
		*ret = cli->client;
		return 0;
	}
	r = resolve(cli, &t);
	if (r != 0)
		return r;
	r = client_new(t.endpoint, t.token, t.ca, &cli->client);
	if (r < 0) {
		output_error("cannot set up the HTTP client: %s", strerror(-r));
		return CLI_EXIT_FAILED;
	}
	*ret = cli->client;
	return 0;
}

int
cli_client_another(struct cli *cli, struct client **ret)
{
	struct client *c;
	int r = cli_client(cli, &c);

	if (r != 0)
		return r;
	r = client_dup(c, ret);
	if (r < 0) {
		output_error("cannot set up the HTTP client: %s", strerror(-r));
		return CLI_EXIT_FAILED;
	}
	return 0;
}

/* ---- failures ---- */

static bool
curl_is_tls(CURLcode e)
{
	return e == CURLE_SSL_CONNECT_ERROR || e == CURLE_PEER_FAILED_VERIFICATION ||
	       e == CURLE_SSL_CERTPROBLEM || e == CURLE_SSL_CIPHER ||
	       e == CURLE_SSL_CACERT_BADFILE || e == CURLE_SSL_ISSUER_ERROR ||
	       e == CURLE_SSL_PINNEDPUBKEYNOTMATCH || e == CURLE_SSL_INVALIDCERTSTATUS ||
	       e == CURLE_SSL_CRL_BADFILE || e == CURLE_USE_SSL_FAILED;
}

int
cli_fail_transport(struct cli *cli, int r)
{
	return cli_fail_transport_on(cli->client, r);
}

int
cli_fail_transport_on(struct client *c, int r)
{
	const struct client_failure *f;
	const char *ep, *hint = NULL;
	char reason[CURL_ERROR_SIZE + 64];

	if (r == -ENOBUFS) {
		output_error("the answer from %s is larger than %u MiB; not reading it",
		             client_endpoint(c), CLIENT_BODY_MAX >> 20);
		return CLI_EXIT_FAILED;
	}
	if (r != -EIO) {
		output_error("the request to %s failed: %s", client_endpoint(c), strerror(-r));
		return CLI_EXIT_FAILED;
	}
	f = client_failure(c);
	ep = client_endpoint(c);
	if (f->answered) {
		output_error("the connection to %s broke: %s", ep, f->detail);
		return CLI_EXIT_UNREACHABLE;
	}
	snprintf(reason, sizeof(reason), "%s", f->detail);
	if (f->code == CURLE_COULDNT_CONNECT && f->os_errno) {
		snprintf(reason, sizeof(reason), "%s", strerror(f->os_errno));
		if (client_kind(c) == ENDPOINT_UNIX && f->os_errno == EACCES)
			hint = "the socket belongs to another user (run as that user, or use a TCP "
			       "endpoint with a token)";
		else if (client_kind(c) == ENDPOINT_UNIX && geteuid() != 0)
			/* a user's own socket: most likely there is a shared sandboxd instead */
			hint = "no sandboxd of yours runs there. To use a shared server, get an "
			       "API "
			       "key for your account (docs/accounts.md, API keys), save it in a "
			       "file "
			       "(chmod 600) and add a context: sandbox-cli context add shared "
			       "http://127.0.0.1:7070 --token-file FILE && sandbox-cli context use "
			       "shared";
		else if (client_kind(c) == ENDPOINT_UNIX)
			hint = "is sandboxd running? (start it, or pick a context: sandbox-cli "
			       "context ls)";
		else
			hint = "is sandboxd running and listening there? (check the endpoint: "
			       "sandbox-cli context ls)";
	} else if (f->code == CURLE_COULDNT_CONNECT) {
		hint = "is sandboxd running? (check the endpoint: sandbox-cli context ls)";
	} else if (f->code == CURLE_COULDNT_RESOLVE_HOST) {
		hint = "check the host name in the endpoint (sandbox-cli context ls)";
	} else if (f->code == CURLE_OPERATION_TIMEDOUT) {
		snprintf(reason, sizeof(reason), "no connection within 10 seconds");
		hint = "is the host up, and does a firewall let the port through?";
	} else if (curl_is_tls(f->code)) {
		snprintf(reason, sizeof(reason), "TLS failed: %s", f->detail);
		if (strstr(f->detail, "wrong version number"))
			hint = "the server does not speak TLS there: is it an http:// endpoint?";
		else
			hint = "if the server's certificate comes from a private CA, pass that CA "
			       "with --ca FILE (or: sandbox-cli context add NAME ENDPOINT --ca "
			       "FILE)";
	} else if (f->code == CURLE_GOT_NOTHING) {
		snprintf(reason, sizeof(reason),
		         "the server closed the connection without "
		         "answering");
		hint = client_kind(c) == ENDPOINT_HTTP
		               ? "if it serves TLS, write the endpoint as https://"
		               : NULL;
	}
	output_error("cannot reach %s: %s%s%s", ep, reason, hint ? "; " : "", hint ? hint : "");
	return CLI_EXIT_UNREACHABLE;
}

static const struct {
	long status;
	int exit_code;
} status_exits[] = {
	{ .status = 400, .exit_code = CLI_EXIT_USAGE },
	{ .status = 401, .exit_code = CLI_EXIT_DENIED },
	{ .status = 403, .exit_code = CLI_EXIT_DENIED },
	{ .status = 404, .exit_code = CLI_EXIT_NOT_FOUND },
	{ .status = 409, .exit_code = CLI_EXIT_CONFLICT },
};

static const struct {
	const char *code;
	const char *hint; /* NULL: computed */
} code_hints[] = {
	{ .code = "unauthorized", .hint = NULL },
	{ .code = "forbidden_origin",
	  .hint = "the server does not answer to this host name: use a loopback address, or a "
	          "name its operator allowed with 'sandboxd --allowed-host'" },
	{ .code = "rate_limited", .hint = "wait a moment and try again" },
	{ .code = "unavailable", .hint = NULL },
	{ .code = "unsupported",
	  .hint = "this server lacks that capability (see: sandbox-cli "
	          "doctor)" },
};

static void
print_hint(struct cli *cli, const char *code, const char *message)
{
	/* a node that refuses new sandboxes says why; waiting is not the answer */
	if (streq(code, "unavailable") && strstr(message, "node is cordoned")) {
		output_error("hint: 'sandbox-cli node' shows the node; its operator or an admin "
		             "takes new sandboxes again with 'sandbox-cli node uncordon'");
		return;
	}
	if (streq(code, "unavailable") && strstr(message, "node has no room")) {
		output_error("hint: 'sandbox-cli node' shows what is free; 'sandbox-cli list' your "
		             "sandboxes, to stop or kill one");
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(code_hints); i++) {
		if (!streq(code, code_hints[i].code))
			continue;
		if (code_hints[i].hint)
			output_error("hint: %s", code_hints[i].hint);
		else if (streq(code, "unavailable") && message &&
		         str_has_prefix(message, "registry "))
			/* waiting does not give the server a route to the registry */
			output_error("hint: the server could not reach or use that registry, so "
			             "trying again will not help until that changes; its operator "
			             "can install the image from a registry the server reaches "
			             "('sandboxd image install', docs/images.md)");
		else if (streq(code, "unavailable"))
			output_error(
			        "hint: the server could not do it; the message above says why");
		else if (client_has_token(cli->client))
			output_error("hint: %s refused the token; check the token of the context "
			             "(sandbox-cli context ls) or the one given with --token-file "
			             "or $SANDBOX_TOKEN",
			             client_endpoint(cli->client));
		else
			output_error("hint: %s needs a token: sandbox-cli context add NAME %s "
			             "--token-file FILE (then: sandbox-cli context use NAME), "
			             "or pass --token-file FILE, or set $SANDBOX_TOKEN",
			             client_endpoint(cli->client), client_endpoint(cli->client));
		return;
	}
}

int
cli_fail_status(struct cli *cli, const struct client_response *resp)
{
	json_t *j = json_loadb(buf_head(&resp->body) ? buf_head(&resp->body) : "",
	                       buf_avail(&resp->body), 0, NULL);
	json_t *err = json_object_get(j, "error");
	const char *code = output_str(err, "code"), *message = output_str(err, "message");
	int exit_code = CLI_EXIT_FAILED;

	for (size_t i = 0; i < ARRAY_SIZE(status_exits); i++)
		if (status_exits[i].status == resp->status)
			exit_code = status_exits[i].exit_code;
	if (code && message) {
		_cleanup_free_ char *c = termsafe_dup(code), *m = termsafe_dup(message);
		output_error("%s: %s", c ? c : "?", m ? m : "?");
		print_hint(cli, code, message);
	} else {
		output_error("%s answered HTTP %ld without an API error; is it sandboxd?",
		             client_endpoint(cli->client), resp->status);
	}
	json_decref(j);
	return exit_code;
}

int
cli_call(struct cli *cli, const char *method, const char *path, const json_t *body, json_t **ret)
{
	_cleanup_(client_response_done) struct client_response resp = { 0 };
	_cleanup_free_ char *text = NULL;
	struct client *c;
	json_error_t jerr;
	json_t *j = NULL;
	int r;

	r = cli_client(cli, &c);
	if (r != 0)
		return r;
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		if (!text) {
			output_error("out of memory");
			return CLI_EXIT_FAILED;
		}
	}
	r = client_request(c, method, path, text, &resp);
	if (r < 0)
		return cli_fail_transport(cli, r);
	if (resp.status < 200 || resp.status > 299)
		return cli_fail_status(cli, &resp);
	if (buf_avail(&resp.body) > 0) {
		j = json_loadb(buf_head(&resp.body), buf_avail(&resp.body), 0, &jerr);
		if (!j) {
			output_error("the answer from %s is not JSON: %s", client_endpoint(c),
			             jerr.text);
			return CLI_EXIT_FAILED;
		}
	}
	if (ret)
		*ret = j;
	else
		json_decref(j);
	return 0;
}

int
cli_get_list(struct cli *cli, const char *path, const char *key, json_t **ret_answer,
             json_t **ret_list)
{
	json_t *answer = NULL, *list;
	int r;

	r = cli_call(cli, "GET", path, NULL, &answer);
	if (r != 0)
		return r;
	list = json_object_get(answer, key);
	if (!json_is_array(list)) {
		json_decref(answer);
		output_error("the server's answer has no \"%s\" array", key);
		return CLI_EXIT_FAILED;
	}
	if (cli->json) {
		r = output_json_line(answer);
		json_decref(answer);
		return r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
	}
	*ret_answer = answer;
	*ret_list = list;
	return -1;
}

/* ---- shared by the verbs ---- */

char *
cli_sandbox_path(const char *ref, const char *suffix)
{
	_cleanup_free_ char *esc = client_escape(ref);

	return esc ? strdup_printf("/v1/sandboxes/%s%s", esc, suffix) : NULL;
}

int
cli_delete_each(struct cli *cli, int argc, char **argv, const char *prefix, const char *none)
{
	int c, first_error = 0;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind == argc)
		return cli_usage_error(cli, "%s", none);
	/* an empty name would DELETE the collection's own path: refused before any call */
	for (int i = optind; i < argc; i++)
		if (!*argv[i])
			return cli_usage_error(cli, "an empty name names nothing to remove");
	for (int i = optind; i < argc; i++) {
		_cleanup_free_ char *esc = client_escape(argv[i]), *path = NULL, *safe = NULL;
		int r;

		path = esc ? strdup_printf("%s%s", prefix, esc) : NULL;
		safe = termsafe_dup(argv[i]);
		if (!path || !safe)
			return cli_oom();
		r = cli_call(cli, "DELETE", path, NULL, NULL);
		if (r == 0 && !cli->json) {
			printf("removed %s\n", safe);
			fflush(stdout);
		}
		if (r != 0 && first_error == 0)
			first_error = r;
		if (r == CLI_EXIT_UNREACHABLE)
			break;
	}
	return first_error;
}

int
cli_oom(void)
{
	output_error("out of memory");
	return CLI_EXIT_FAILED;
}

int
cli_env_option(struct cli *cli, json_t *env, const char *arg)
{
	const char *eq = strchr(arg, '='), *value;
	_cleanup_free_ char *name = NULL;

	if (eq == arg)
		return cli_usage_error(cli, "--env takes NAME=VALUE or NAME");
	if (!eq) {
		/* --env NAME: the value stays off the command line (and out of ps and the
		 * shell history) */
		value = getenv(arg);
		if (!value)
			return cli_usage_error(cli,
			                       "--env %s: there is no %s in your environment (or "
			                       "write --env NAME=VALUE)",
			                       arg, arg);
		name = strdup(arg);
	} else {
		name = strndup(arg, (size_t)(eq - arg));
		value = eq + 1;
	}
	if (!name)
		return cli_oom();
	if (json_object_set_new(env, name, json_string(value)) < 0)
		return cli_usage_error(cli, "--env %s: the value is not text", name);
	return 0;
}

int
cli_number_option(struct cli *cli, const char *opt, const char *value, uint64_t max, json_t *body,
                  const char *field)
{
	uint64_t v;

	if (parse_u64(value, &v) < 0 || v > max)
		return cli_usage_error(cli, "%s takes a whole number, not '%s'", opt, value);
	if (json_object_set_new(body, field, json_integer((json_int_t)v)) < 0)
		return cli_oom();
	return 0;
}

int
cli_sandbox_option(struct cli *cli, int c, const char *arg, json_t *body)
{
	switch (c) {
	case CLI_OPT_NAME:
	case CLI_OPT_IMAGE: {
		const char *key = c == CLI_OPT_NAME ? "name" : "image";
		if (json_object_set_new(body, key, json_string(arg)) < 0)
			return cli_usage_error(cli, "--%s must be text", key);
		return 0;
	}
	case CLI_OPT_CPUS:
		return cli_number_option(cli, "--cpus", arg, INT32_MAX, body, "cpus");
	case CLI_OPT_MEMORY:
		return cli_number_option(cli, "--memory", arg, INT32_MAX, body, "memory_mb");
	case CLI_OPT_DISK:
		return cli_number_option(cli, "--disk", arg, INT64_MAX, body, "disk_mb");
	case CLI_OPT_ALLOW:
	case CLI_OPT_DENY:
	case CLI_OPT_NETWORK: {
		json_t *net = json_object_get(body, "network");
		if (!net && json_object_set_new(body, "network", (net = json_object())) < 0)
			return cli_oom();
		return cli_network_option(cli, c, arg, net);
	}
	}
	return 1;
}

int
cli_sandbox_finish(struct cli *cli, json_t *body)
{
	json_t *net = json_object_get(body, "network");

	return net ? cli_network_finish(cli, net) : 0;
}

static const char *const network_modes[] = { "none", "allowlist", "open" };

int
cli_network_option(struct cli *cli, int c, const char *arg, json_t *net)
{
	const char *key;
	json_t *list;

	switch (c) {
	case CLI_OPT_NETWORK:
		/* known here so that a typo is caught before a sandbox is made, and so that
		 * --allow can be checked against the mode */
		for (size_t i = 0; i < ARRAY_SIZE(network_modes); i++)
			if (streq(arg, network_modes[i]))
				return json_object_set_new(net, "mode", json_string(arg)) < 0
				               ? cli_oom()
				               : 0;
		return cli_usage_error(cli, "--network takes none, allowlist or open, not '%s'",
		                       arg);
	case CLI_OPT_ALLOW:
	case CLI_OPT_DENY:
		key = c == CLI_OPT_ALLOW ? "allow" : "deny";
		if (!*arg)
			return cli_usage_error(cli,
			                       "--%s needs a host name, such as example.org or "
			                       "*.example.org",
			                       key);
		list = json_object_get(net, key);
		if (!list && json_object_set_new(net, key, (list = json_array())) < 0)
			return cli_oom();
		if (json_array_append_new(list, json_string(arg)) < 0)
			return cli_usage_error(cli, "--%s must be text", key);
		return 0;
	default:
		return 1;
	}
}

int
cli_network_finish(struct cli *cli, json_t *net)
{
	const char *mode = output_str(net, "mode");

	if (!json_object_get(net, "allow"))
		return 0;
	if (!mode)
		return json_object_set_new(net, "mode", json_string("allowlist")) < 0 ? cli_oom()
		                                                                      : 0;
	if (!streq(mode, "allowlist"))
		return cli_usage_error(cli,
		                       "--allow goes only with --network allowlist (mode %s "
		                       "reaches %s)",
		                       mode, streq(mode, "none") ? "nothing" : "any name");
	return 0;
}
