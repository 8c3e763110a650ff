/* test-procstat.c: what a VMM uses, as sandboxd reads it on the host (daemon/vm/procstat.c,
 * daemon/vm/cgroup.c): /proc/PID/stat and status as Linux writes them (a comm with spaces
 * and parentheses, a zombie), a cgroup v2 cpu.stat, and a real process read back: this one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <unistd.h>
#include "cgroup.h"
#include "procstat.h"
#include "util.h"

static const char status[] = "Name:\tqemu-sbx-1\nUmask:\t0077\nState:\tS (sleeping)\n"
                             "VmPeak:\t  900000 kB\nVmRSS:\t  123456 kB\nRssAnon:\t  100000 kB\n";

static void
test_parse(void **state)
{
	/* fields 14 and 15 (utime 250, stime 50 ticks) after a comm that could fool a reader */
	static const char stat[] = "4242 (qemu (x) 1) S 1 4242 4242 0 -1 4194560 9 0 0 0 250 50 "
	                           "0 0 20 0 3 0 12345 1000000 2000 18446744073709551615\n";
	uint64_t cpu = 0, rss = 0;

	assert_int_equal(procstat_parse(stat, status, 100, &cpu, &rss), 0);
	assert_int_equal(cpu, 3000000000ull);
	assert_int_equal(rss, 123456ull * 1024);

	/* an ended process is gone, not zero */
	assert_int_equal(
	        procstat_parse("1 (q) Z 1 1 1 0 -1 0 0 0 0 0 5 5 0", status, 100, &cpu, &rss),
	        -ESRCH);
	/* text that is not Linux's */
	assert_int_equal(procstat_parse("1 (q) S 1 2", status, 100, &cpu, &rss), -EINVAL);
	assert_int_equal(procstat_parse("no parenthesis", status, 100, &cpu, &rss), -EINVAL);
	assert_int_equal(procstat_parse(stat, "Name:\tkthread\n", 100, &cpu, &rss), -EINVAL);
	assert_int_equal(procstat_parse(stat, "x\nVmRSS:\t12 MB\n", 100, &cpu, &rss), -EINVAL);
}

static void
test_read_self(void **state)
{
	uint64_t cpu = 0, rss = 0;
	volatile uint64_t spin = 0;
	uint64_t until = now_mono_ms() + 30;

	/* burn a little CPU so there is some to see */
	while (now_mono_ms() < until)
		spin++;
	assert_int_equal(procstat_read(getpid(), &cpu, &rss), 0);
	assert_true(rss > 1024 * 1024);
	assert_true(cpu > 0);
	assert_int_equal(procstat_read(0x7ffffff0, &cpu, &rss), -ESRCH);
}

static void
test_cgroup_cpu_stat(void **state)
{
	uint64_t usec = 0;

	assert_int_equal(cgroup_parse_cpu_usec("usage_usec 1500000\nuser_usec 1000000\n"
	                                       "system_usec 500000\n",
	                                       &usec),
	                 0);
	assert_int_equal(usec, 1500000);
	assert_int_equal(cgroup_parse_cpu_usec("user_usec 1\nusage_usec 7", &usec), 0);
	assert_int_equal(usec, 7);
	assert_int_equal(cgroup_parse_cpu_usec("user_usec 1\n", &usec), -EINVAL);
	assert_int_equal(cgroup_parse_cpu_usec("usage_usec x\n", &usec), -EINVAL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_read_self),
		cmocka_unit_test(test_cgroup_cpu_stat),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
