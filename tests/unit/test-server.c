/* test-server.c: daemon/http/server.c's pure part: the key a TCP client's connections are
 * counted by (--max-connections-per-client). The server itself is tested through the real
 * daemon (tests/integration/test-hostile.c, test-exhaustion.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include "server.h"
#include "util.h"

static void
key_of(const char *addr, char *out, size_t size)
{
	struct sockaddr_storage ss = { 0 };

	if (strchr(addr, ':')) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, addr, &in6->sin6_addr), 1);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, addr, &in->sin_addr), 1);
	}
	server_client_key(&ss, out, size);
}

static void
test_client_key(void **state)
{
	static const struct {
		const char *addr, *key;
	} cases[] = {
		/* IPv4: each address on its own, loopback's too */
		{ "127.0.0.1", "127.0.0.1" },
		{ "127.0.0.2", "127.0.0.2" },
		{ "192.0.2.200", "192.0.2.200" },
		/* IPv4 over an IPv6 socket counts as the IPv4 address */
		{ "::ffff:192.0.2.7", "192.0.2.7" },
		/* IPv6: its /64, whatever the interface part */
		{ "2001:db8:1:2::1", "2001:db8:1:2::/64" },
		{ "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64" },
		{ "2001:db8:1:3::1", "2001:db8:1:3::/64" },
		{ "::1", "::/64" },
		{ "fe80::1234:5678", "fe80::/64" },
	};
	char key[64];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		key_of(cases[i].addr, key, sizeof(key));
		if (strcmp(key, cases[i].key) != 0)
			fail_msg("%s: key '%s', expected '%s'", cases[i].addr, key, cases[i].key);
	}
}

int
main(void)
{
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_key),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
