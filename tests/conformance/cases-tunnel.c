/* cases-tunnel.c: conformance cases for tunnels (docs/api.md, "Tunnels"): what is not a tunnel
 * handshake is 400, a sandbox that is not there 404, and a port nothing listens on in the
 * sandbox 409 without a 101. They need capabilities.tunnel (where it is false, the 501 case in
 * cases-discovery.c covers the path); the bytes themselves are tests/integration/test-tunnel.c's
 * and tests/cli/test-cli-vm.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include "cases.h"
#include "conf.h"
#include "util.h"

static const char *const upgrade[] = { "Upgrade: sbx-tunnel/1", "Connection: Upgrade", NULL };

/* Asks for a tunnel; fails the case on a 101. Returns the status and the error's code. */
static long
refused(const char *path, const char **ret_code, const char **ret_message)
{
	struct conf_upgrade up;

	if (conf_upgrade(path, CONF_AUTH_TOKEN, upgrade, &up))
		fail_msg("GET %s was upgraded", path);
	*ret_code = conf_str(json_object_get(up.json, "error"), "code");
	*ret_message = conf_error_message(up.json);
	return up.status;
}

void
case_tunnel_refusals(void **state)
{
	const char *id, *code, *message;
	long status;
	json_t *j;

	conf_need_capability("tunnel");
	id = conf_shared_sandbox();

	/* not a handshake, or no valid port: 400 */
	status = conf_request("GET", conf_fmt("/v1/sandboxes/%s/tunnel?port=8080", id), NULL, &j);
	if (status != 400)
		fail_msg("a tunnel request without Upgrade: expected 400, got %ld", status);
	status = refused(conf_fmt("/v1/sandboxes/%s/tunnel?port=0", id), &code, &message);
	if (status != 400 || !streq(code, "invalid_request"))
		fail_msg("port=0: expected 400 invalid_request, got %ld %s", status, code);
	status = refused(conf_fmt("/v1/sandboxes/%s/tunnel", id), &code, &message);
	if (status != 400)
		fail_msg("no port: expected 400, got %ld", status);
	/* a sandbox that is not there */
	status = refused(conf_fmt("/v1/sandboxes/%s/tunnel?port=8080", conf_random_id()), &code,
	                 &message);
	if (status != 404 || !streq(code, "not_found"))
		fail_msg("an unknown sandbox: expected 404 not_found, got %ld %s", status, code);
	/* port 1: nothing listens there in a sandbox */
	status = refused(conf_fmt("/v1/sandboxes/%s/tunnel?port=1", id), &code, &message);
	if (status != 409 || !streq(code, "conflict"))
		fail_msg("a port nothing listens on: expected 409 conflict, got %ld %s", status,
		         code);
	if (!strstr(message, "127.0.0.1:1"))
		fail_msg("the 409 does not name the port: '%s'", message);
}
