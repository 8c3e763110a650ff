/* cmd-doctor.c: "doctor": reaches the endpoint step by step (health needs no credential,
 * capabilities and whoami do), so a failure says which step failed and what to do, and on
 * success describes the server: version, backend, accelerator, network, limits, and you. */
#include <errno.h>
#include <stdlib.h>
#include "cli.h"
#include "client.h"
#include "output.h"
#include "util.h"

/* A string member, made terminal-safe; "-" when absent. Caller frees. */
static char *
safe_str(const json_t *obj, const char *key)
{
	const char *s = output_str(obj, key);

	return termsafe_dup(s ? s : "-");
}

static void
print_line(const char *label, const char *value)
{
	_cleanup_free_ char *safe = termsafe_dup(value);

	printf("%-13s %s\n", label, safe ? safe : "?");
}

/* "none" or "a, b, c" from an array of strings. */
static char *
join(const json_t *arr)
{
	_cleanup_buf_ struct buf b = BUF_INIT(4096);
	json_t *v;
	size_t i;

	json_array_foreach ((json_t *)arr, i, v)
		(void)buf_printf(&b, "%s%s", i ? ", " : "",
		                 json_string_value(v) ? json_string_value(v) : "?");
	return b.len ? buf_steal(&b) : strdup("none");
}

static void
print_limit(struct buf *b, const json_t *limits, const char *key, const char *what,
            const char *unit)
{
	int64_t v = output_int(limits, key, -1);

	if (v < 0)
		return;
	if (v == 0)
		(void)buf_printf(b, "%s%s unlimited", b->len ? ", " : "", what);
	else
		(void)buf_printf(b, "%s%s %lld%s", b->len ? ", " : "", what, (long long)v, unit);
}

/* Whether an http:// endpoint names a loopback host, where a plain token stays on the
 * machine. */
static bool
http_is_loopback(const char *endpoint)
{
	const char *host = endpoint + strlen("http://");

	return str_has_prefix(host, "127.") || str_has_prefix(host, "[::1]") ||
	       (str_has_prefix(host, "localhost") && strchr(":/", host[9] ? host[9] : '/'));
}

static void
print_human(struct cli *cli, const json_t *caps, const json_t *me)
{
	const json_t *limits = json_object_get(caps, "limits");
	const json_t *net = json_object_get(caps, "network");
	const json_t *def = json_object_get(net, "default");
	_cleanup_free_ char *version = safe_str(caps, "version"),
	                    *api = safe_str(caps, "api_version");
	_cleanup_free_ char *backend = safe_str(caps, "backend"), *accel = safe_str(caps, "accel");
	_cleanup_free_ char *allow = join(json_object_get(def, "allow"));
	_cleanup_free_ char *may = join(json_object_get(net, "may_allow"));
	_cleanup_free_ char *user = safe_str(me, "user"), *role = safe_str(me, "role");
	_cleanup_free_ char *scopes = join(json_object_get(me, "scopes"));
	_cleanup_buf_ struct buf line = BUF_INIT(4096);
	const char *ceiling = output_str(net, "ceiling"), *mode = output_str(def, "mode");

	(void)buf_printf(&line, "%s (from %s)", client_endpoint(cli->client), cli->source);
	print_line("endpoint:", line.data);
	buf_reset(&line);
	(void)buf_printf(&line, "sandboxd %s, API %s", version, api);
	print_line("server:", line.data);
	print_line("backend:", backend);
	print_line("accelerator:", accel);
	buf_reset(&line);
	(void)buf_printf(&line, "ceiling %s; default %s", ceiling ? ceiling : "-",
	                 mode ? mode : "-");
	if (mode && streq(mode, "allowlist"))
		(void)buf_printf(&line, " (allow %s)", allow);
	if (ceiling && !streq(ceiling, "none"))
		(void)buf_printf(&line, "; may allow %s", may);
	print_line("network:", line.data);
	buf_reset(&line);
	print_limit(&line, limits, "max_cpus", "cpus", "");
	print_limit(&line, limits, "max_memory_mb", "memory", " MiB");
	print_limit(&line, limits, "max_disk_mb", "disk", " MiB");
	print_limit(&line, limits, "max_idle_timeout_secs", "idle timeout", " s");
	print_limit(&line, limits, "max_lifetime_secs", "lifetime", " s");
	print_line("limits:", line.len ? line.data : "-");
	buf_reset(&line);
	(void)buf_printf(&line, "%s (role %s; scopes %s)", user, role, scopes);
	print_line("you are:", line.data);
	if (backend && streq(backend, "none"))
		printf("note: this server has no VM backend built in: it cannot run sandboxes.\n");
	else if (accel && streq(accel, "tcg"))
		printf("note: no hardware acceleration (tcg): sandboxes boot and run slowly.\n");
	if (client_kind(cli->client) == ENDPOINT_HTTP &&
	    !http_is_loopback(client_endpoint(cli->client)))
		printf("note: plain http to another host: the token crosses the network "
		       "unencrypted; use https.\n");
	printf("ok\n");
}

int
cmd_doctor(struct cli *cli, int argc, char **argv)
{
	json_t *health = NULL, *caps = NULL, *me = NULL;
	const char *status;
	int c, r;

	while ((c = cli_getopt(cli, argc, argv, NULL)) != -1)
		return cli_option_end(cli, c);
	if (optind < argc)
		return cli_usage_error(cli, "takes no arguments");
	/* 1: can we reach it at all (no credential needed) */
	r = cli_call(cli, "GET", "/v1/health", NULL, &health);
	if (r != 0)
		goto out;
	status = output_str(health, "status");
	if (!status || !streq(status, "ok")) {
		_cleanup_free_ char *s = termsafe_dup(status ? status : "nothing");
		output_error("%s answers, but its health is '%s'", client_endpoint(cli->client),
		             s ? s : "?");
		r = CLI_EXIT_FAILED;
		goto out;
	}
	/* 2: does it take our credential */
	r = cli_call(cli, "GET", "/v1/capabilities", NULL, &caps);
	if (r == 0)
		r = cli_call(cli, "GET", "/v1/whoami", NULL, &me);
	if (r != 0) {
		output_error("%s is reachable (its health is ok), but the request above failed",
		             client_endpoint(cli->client));
		goto out;
	}
	if (cli->json) {
		json_t *j = json_pack("{s:s, s:s, s:O, s:O, s:O}", "endpoint",
		                      client_endpoint(cli->client), "source", cli->source, "health",
		                      health, "capabilities", caps, "whoami", me);
		r = j && output_json_line(j) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILED;
		json_decref(j);
		goto out;
	}
	print_human(cli, caps, me);
out:
	json_decref(health);
	json_decref(caps);
	json_decref(me);
	return r;
}
