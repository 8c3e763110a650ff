/* hostport.h: the host of a Host header, an Origin's authority or a flag's HOST:PORT. */
#pragma once

#include <stddef.h>

/* Splits "host:port" / "[v6]:port" / "host" into host (lowercased, brackets removed, a final
 * dot dropped) for comparisons. -EINVAL on malformed input or when it does not fit. */
int hostport_host(const char *hostport, char *out, size_t size);
