/* worker.c: the egress worker process (worker.h). Placeholder until the proxy and DNS stub
 * land: it refuses to run, so nothing is ever served open. */
#include <stdio.h>
#include "worker.h"

int
egress_worker_main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "sandboxd egress-worker: not built yet\n");
	return 1;
}
