/* version.c: the version string, set by the build from git describe. */
#include "sandboxd.h"

#ifndef SANDBOXD_VERSION
#define SANDBOXD_VERSION "0.1.0-unknown"
#endif

const char sandboxd_version[] = SANDBOXD_VERSION;
