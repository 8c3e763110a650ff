/* samples.h: what each sandbox uses, measured on the host and never asked of the guest: its
 * VMM's CPU time and memory (the backend's reading), its writable disk's allocated size, and
 * the bytes through its tap. A sample every 10 s while it runs, and one at once when a boot
 * completes; the newest 360 (an hour) per sandbox, in memory only (GET …/metrics). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct sandboxd;
struct sandbox;

#define SAMPLES_EVERY_MS 10000
#define SAMPLES_MAX 360

/* One sample. The counters add up across the sandbox's boots (a new VMM and a new tap count
 * from zero; what the ones before counted is carried); memory and disk are as they are. */
struct sample {
	int64_t time_ms;       /* unix ms */
	uint64_t cpu_ns;       /* the VMM's CPU time, user and system */
	uint64_t memory_bytes; /* the VMM's memory now */
	uint64_t disk_bytes;   /* the writable layer's allocated blocks */
	uint64_t net_rx_bytes; /* into the guest: what the host sent down its tap */
	uint64_t net_tx_bytes; /* out of the guest: what the host read from its tap */
};

/* Whether this server measures sandboxes (its backend can: capabilities' "metrics"). */
bool samples_available(const struct sandboxd *d);
/* Takes a sample of sb, which runs. new_boot: its VM has just (re)started, so its counters
 * start again from zero. A reading that fails is logged at debug level and skipped. */
void samples_take(struct sandboxd *d, struct sandbox *sb, bool new_boot);
/* What sb's current VMM and tap counted since they started, read now and not recorded (the
 * idle timeout's reading, activity.h): CPU time, and the bytes its tap carried into the guest
 * (0 without one). -EOPNOTSUPP when this server does not measure; else the reading's error. */
int samples_read_now(struct sandboxd *d, struct sandbox *sb, uint64_t *ret_cpu_ns,
                     uint64_t *ret_net_in_bytes);
/* samples_take for every running sandbox: the periodic one. */
void samples_take_all(struct sandboxd *d);
/* Calls fn with each sample of sb taken at or after since_ms, oldest first. */
void samples_each(const struct sandbox *sb, int64_t since_ms,
                  void (*fn)(const struct sample *s, void *data), void *data);
