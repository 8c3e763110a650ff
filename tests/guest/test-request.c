/* test-request.c: the guest's parsers of the identity a HELLO carries (guest/request.c): NET,
 * MAC, MACHINE_ID and VOLUME are taken from the HELLO, and each is checked the way the guest
 * checks it before acting on it (identity.c): a bad address, a machine id that is not one, a
 * volume over a system path are refused; an old host's HELLO without them changes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include "agentproto.h"
#include "buf.h"
#include "request.h"
#include "tlv.h"

static uint32_t
addr(const char *s)
{
	struct in_addr a;

	assert_int_equal(inet_pton(AF_INET, s, &a), 1);
	return a.s_addr;
}

/* A HELLO as sandboxd sends it to a VM with a network and two volumes. */
static void
test_hello_identity(void **state)
{
	_cleanup_buf_ struct buf b = BUF_INIT(1 << 16);
	static const uint8_t mac[6] = { 0x52, 0x54, 10, 200, 0, 6 };
	struct request_hello h;

	assert_int_equal(tlv_put_str(&b, AP_T_HOSTNAME, "box"), 0);
	assert_int_equal(tlv_put_str(&b, AP_T_NET, "10.200.0.6/30,10.200.0.5"), 0);
	assert_int_equal(tlv_put(&b, AP_T_MAC, mac, sizeof(mac)), 0);
	assert_int_equal(tlv_put_str(&b, AP_T_MACHINE_ID, "f32fd46effab708ada3430d91af47fec"), 0);
	assert_int_equal(tlv_put_str(&b, AP_T_VOLUME, "/dev/vdc\t/sandbox/data\trw"), 0);
	assert_int_equal(tlv_put_str(&b, AP_T_VOLUME, "/dev/vdd\t/mnt/ref\tro"), 0);
	assert_int_equal(tlv_put(&b, 999, "x", 1), 0); /* a newer host's tag: ignored */
	assert_int_equal(request_parse_hello(b.data, b.len, &h), 0);
	assert_string_equal(h.hostname, "box");
	assert_string_equal(h.net, "10.200.0.6/30,10.200.0.5");
	assert_true(h.has_mac);
	assert_memory_equal(h.mac, mac, 6);
	assert_string_equal(h.machine_id, "f32fd46effab708ada3430d91af47fec");
	assert_int_equal(h.nvolumes, 2);
	assert_string_equal(h.volumes[0], "/dev/vdc\t/sandbox/data\trw");
	assert_string_equal(h.volumes[1], "/dev/vdd\t/mnt/ref\tro");
	assert_null(h.volumes[2]);
	request_hello_done(&h);

	/* an old host's HELLO: none of it, so the guest leaves all as it is */
	buf_reset(&b);
	assert_int_equal(tlv_put_str(&b, AP_T_HOSTNAME, "box"), 0);
	assert_int_equal(request_parse_hello(b.data, b.len, &h), 0);
	assert_null(h.net);
	assert_false(h.has_mac);
	assert_null(h.machine_id);
	assert_int_equal(h.nvolumes, 0);
	assert_null(h.volumes);
	request_hello_done(&h);

	/* a MAC is six bytes */
	buf_reset(&b);
	assert_int_equal(tlv_put(&b, AP_T_MAC, mac, 5), 0);
	assert_int_equal(request_parse_hello(b.data, b.len, &h), -EINVAL);

	/* at most REQUEST_MAX_VOLUMES volumes */
	buf_reset(&b);
	for (int i = 0; i <= REQUEST_MAX_VOLUMES; i++)
		assert_int_equal(tlv_put_str(&b, AP_T_VOLUME, "/dev/vdc\t/mnt/a\tro"), 0);
	assert_int_equal(request_parse_hello(b.data, b.len, &h), -E2BIG);
}

static void
test_net(void **state)
{
	struct request_net n;

	assert_int_equal(request_parse_net("", &n), 0);
	assert_true(n.none);
	assert_int_equal(request_parse_net("10.200.0.2/30,10.200.0.1", &n), 0);
	assert_false(n.none);
	assert_int_equal(n.guest_addr, addr("10.200.0.2"));
	assert_int_equal(n.host_addr, addr("10.200.0.1"));
	assert_int_equal(n.prefix, 30);
	assert_int_equal(request_parse_net("192.168.7.20/24,192.168.7.1", &n), 0);
	assert_int_equal(n.prefix, 24);

	static const char *const bad[] = {
		"10.200.0.2",                 /* no prefix, no host */
		"10.200.0.2/30",              /* no host */
		"10.200.0.2,10.200.0.1",      /* no prefix */
		"10.200.0.2/31,10.200.0.1",   /* no room for both on the link */
		"10.200.0.2/7,10.200.0.1",    /* too wide */
		"10.200.0.2/30,10.200.0.5",   /* not on the same link */
		"10.200.0.1/30,10.200.0.1",   /* the same address */
		"10.200.0.3/30,10.200.0.1",   /* the link's broadcast address */
		"10.200.0.0/30,10.200.0.1",   /* the link's network address */
		"10.200.0.2/30,10.200.0.1 x", /* trailing words */
		"10.200.0.256/30,10.200.0.1", /* not an address */
		"10.200.0.2/+30,10.200.0.1",  /* a sign */
		"10.200.0.2/30x,10.200.0.1",
		"/30,10.200.0.1",
		"10.200.0.2/30,",
		"a.b.c.d/30,10.200.0.1",
		"10.200.0.2,10.200.0.1/30",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		print_message("%s\n", bad[i]);
		assert_int_equal(request_parse_net(bad[i], &n), -EINVAL);
	}
}

static void
test_machine_id(void **state)
{
	assert_true(request_machine_id_valid("f32fd46effab708ada3430d91af47fec"));
	assert_false(request_machine_id_valid(""));
	assert_false(request_machine_id_valid("f32fd46effab708ada3430d91af47fe"));   /* 31 */
	assert_false(request_machine_id_valid("f32fd46effab708ada3430d91af47fecc")); /* 33 */
	assert_false(request_machine_id_valid("F32FD46EFFAB708ADA3430D91AF47FEC"));  /* upper */
	assert_false(request_machine_id_valid("f32fd46effab708ada3430d91af47fe\n"));
	assert_false(request_machine_id_valid("00000000000000000000000000000000"));
	assert_false(request_machine_id_valid("g32fd46effab708ada3430d91af47fec"));
}

static void
test_mount_allowed(void **state)
{
	static const char *const ok[] = { "/sandbox/data", "/sandbox/a/b", "/mnt/x", "/mnt/a/b/c",
		                          "/sandbox/home/data" };
	static const char *const refused[] = {
		"/",
		"/sandbox",
		"/sandbox/",
		"/sandbox/home",
		"/sandbox/home/",
		"/mnt",
		"/mnt/",
		"/etc",
		"/usr/lib",
		"/mnt/../etc",
		"/mnt/./x",
		"/mnt//x",
		"/sandbox/../x",
		"mnt/x",
		"/mntx",
		"/sandboxx",
		"/mnt/x/",
		"/tmp/sandbox/x",
		"",
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		print_message("ok %s\n", ok[i]);
		assert_true(request_mount_allowed(ok[i]));
	}
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		print_message("refused '%s'\n", refused[i]);
		assert_false(request_mount_allowed(refused[i]));
	}
}

static void
test_volume(void **state)
{
	struct request_volume v;

	assert_int_equal(request_parse_volume("/dev/vdc\t/sandbox/data\trw", &v), 0);
	assert_string_equal(v.dev, "/dev/vdc");
	assert_string_equal(v.mount, "/sandbox/data");
	assert_false(v.read_only);
	request_volume_done(&v);
	assert_int_equal(request_parse_volume("/dev/vdd\t/mnt/ref\tro", &v), 0);
	assert_string_equal(v.dev, "/dev/vdd");
	assert_string_equal(v.mount, "/mnt/ref");
	assert_true(v.read_only);
	request_volume_done(&v);

	static const char *const bad[] = {
		"/dev/vdc\t/etc\trw",          /* a system path */
		"/dev/vdc\t/sandbox\trw",      /* over the sandbox's own directory */
		"/dev/vdc\t/sandbox/home\trw", /* over its home */
		"/dev/vdc\t/mnt/../etc\trw",   /* out by .. */
		"/etc/passwd\t/mnt/x\trw",     /* not a device */
		"/dev/\t/mnt/x\trw",           /* no device */
		"/dev/../etc/x\t/mnt/x\trw",   /* out by .. */
		"/dev/vdc\t/mnt/x\trx",        /* neither ro nor rw */
		"/dev/vdc\t/mnt/x\tro\t",      /* one field more */
		"/dev/vdc\t/mnt/x",            /* no mode */
		"/dev/vdc /mnt/x ro",          /* not tabs */
		"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		print_message("%s\n", bad[i]);
		assert_int_equal(request_parse_volume(bad[i], &v), -EINVAL);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_identity), cmocka_unit_test(test_net),
		cmocka_unit_test(test_machine_id),     cmocka_unit_test(test_mount_allowed),
		cmocka_unit_test(test_volume),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
