/* hostport.c: see hostport.h. */
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include "hostport.h"

int
hostport_host(const char *hostport, char *out, size_t size)
{
	const char *end;
	size_t n;

	if (!hostport || !*hostport)
		return -EINVAL;
	if (strchr(hostport, ':') != strrchr(hostport, ':') && hostport[0] != '[') {
		/* a bare IPv6 address (two or more colons): no port can follow */
		n = strlen(hostport);
	} else if (hostport[0] == '[') {
		end = strchr(hostport, ']');
		if (!end || (end[1] != '\0' && end[1] != ':'))
			return -EINVAL;
		hostport++;
		n = (size_t)(end - hostport);
	} else {
		end = strchr(hostport, ':');
		n = end ? (size_t)(end - hostport) : strlen(hostport);
	}
	if (n == 0 || n >= size)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)hostport[i];
		if (!isalnum(ch) && ch != '.' && ch != '-' && ch != ':' && ch != '_')
			return -EINVAL;
		out[i] = (char)tolower(ch);
	}
	out[n] = '\0';
	/* "example.com." is "example.com" */
	if (n > 1 && out[n - 1] == '.')
		out[n - 1] = '\0';
	return 0;
}
