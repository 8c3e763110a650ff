/* tsc.c: see tsc.h. */
#include <errno.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif
#include "tsc.h"

#if defined(__x86_64__) || defined(__i386__)
struct tsc_sample {
	uint64_t ns;
	uint64_t tsc;
};

static uint64_t
raw_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The TSC read between two clock reads, from the tightest of a few tries. */
static struct tsc_sample
tsc_sample(void)
{
	struct tsc_sample best = { 0 };
	uint64_t best_gap = UINT64_MAX;

	for (int i = 0; i < 16; i++) {
		uint64_t t0 = raw_ns(), tsc = __rdtsc(), t1 = raw_ns();
		if (t1 - t0 < best_gap) {
			best_gap = t1 - t0;
			best = (struct tsc_sample){ .ns = t0 + (t1 - t0) / 2, .tsc = tsc };
		}
	}
	return best;
}
#endif

int
bundle_host_tsc_khz(unsigned *ret)
{
#if defined(__x86_64__) || defined(__i386__)
	struct timespec pause = { .tv_sec = 0, .tv_nsec = 100 * 1000 * 1000 };
	struct tsc_sample a, b;
	uint64_t khz;

	a = tsc_sample();
	while (nanosleep(&pause, &pause) < 0 && errno == EINTR)
		;
	b = tsc_sample();
	if (b.ns <= a.ns || b.tsc <= a.tsc)
		return -EIO;
	khz = ((b.tsc - a.tsc) * 1000000u + (b.ns - a.ns) / 2) / (b.ns - a.ns);
	if (khz < 100000 || khz > 20000000) /* 100 MHz .. 20 GHz */
		return -ERANGE;
	*ret = (unsigned)khz;
	return 0;
#else
	return -EOPNOTSUPP;
#endif
}
