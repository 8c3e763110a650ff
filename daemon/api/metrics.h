/* metrics.h: Prometheus metrics at GET /metrics on --metrics-listen (loopback only, no
 * credential): sandboxes by state, processes running, the node's capacity and what is free,
 * pools by image, the cordon, creates by status with their latency, and what egress decided.
 * Nothing is labelled with a user. Counters restart from zero with sandboxd: nothing of them is
 * persisted. */
#pragma once

#include "buf.h"
#include "http.h"

struct sandboxd;
struct conn;

/* Appends the exposition text (format 0.0.4) to out. -ENOBUFS/-ENOMEM. */
int metrics_render(struct sandboxd *d, struct buf *out);
/* Answers a request on the metrics listener: GET /metrics, else 404/405. */
void metrics_handle(struct sandboxd *d, struct conn *c, struct http_request *req);
