/* tunnel.h: EXEC with AP_T_PORT (lib/agentproto.h, "Tunnels"): the agent connects to
 * 127.0.0.1:PORT itself (as root, without blocking the loop) and, once connected, hands the
 * socket to proc.c as a tunnel entry, whose handle RESULT returns. */
#pragma once

#include <stdint.h>

struct agent;

/* Starts the connect; RESULT follows when it is done (PID, or ERRNO such as ECONNREFUSED). */
void tunnel_exec(struct agent *a, uint32_t chan, uint16_t port);
/* The session ended: connects under way are given up (their RESULT would belong to it). */
void tunnel_session_end(struct agent *a);
