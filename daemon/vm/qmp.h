/* qmp.h: a small asynchronous QMP client for one QEMU: connect to its monitor socket, leave
 * capabilities negotiation mode, and run commands with a callback for the answer. QEMU is a
 * process sandboxd started, but it runs guest-facing code: its answers are parsed with bounds
 * (one line at most 1 MiB) and anything unexpected closes the connection. */
#pragma once

#include <jansson.h>
#include "loop.h"

struct qmp;

/* ret: the "return" value (borrowed) or NULL with err set to the "error" description. */
typedef void (*qmp_done_fn)(void *data, const json_t *ret, const char *err);

/* Connects to path; ready() is called once capabilities are negotiated, closed() when the
 * connection ends (also when it could not be made). */
int qmp_new(struct loop *loop, const char *path, void (*ready)(struct qmp *q, void *data),
            void (*closed)(struct qmp *q, void *data), void *data, struct qmp **ret);
/* The same over a connected socket fd (taken over, closed on failure too). */
int qmp_new_fd(struct loop *loop, int fd, void (*ready)(struct qmp *q, void *data),
               void (*closed)(struct qmp *q, void *data), void *data, struct qmp **ret);
/* Frees q (its memory after the current batch of loop events); pending commands are
 * answered with an error first, closed() is not called. */
struct qmp *qmp_free(struct qmp *q);
DEFINE_FREEP(struct qmp, qmp_free)
/* Sends {"execute": command, "arguments": args (stolen, may be NULL)}. */
int qmp_execute(struct qmp *q, const char *command, json_t *args, qmp_done_fn done, void *data);
/* The same with a copy of fd sent along (SCM_RIGHTS) with the command's bytes: for getfd,
 * which names the descriptor for a later command (migrate uri=fd:NAME). One at a time: -EBUSY
 * while an earlier one is not sent yet. */
int qmp_execute_fd(struct qmp *q, const char *command, json_t *args, int fd, qmp_done_fn done,
                   void *data);
/* What on_io does with bytes read from QEMU: exposed for the fuzz target. */
void qmp_receive(struct qmp *q, const void *bytes, size_t len);
