/* tsc.h: the host's TSC rate, which the guest is told under TCG (tsc_early_khz=) instead of
 * calibrating against an emulated timer. */
#pragma once

/* The host's TSC rate in kHz, measured against CLOCK_MONOTONIC_RAW over about 100 ms (for the
 * guest's tsc_early_khz= under TCG). -EOPNOTSUPP on hosts that are not x86. */
int bundle_host_tsc_khz(unsigned *ret);
