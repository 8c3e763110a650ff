/* ended.h: the terminated sandboxes the server still answers for. GET /v1/sandboxes lists them
 * (state terminated, with their reason) and GET by id finds them until --forget-after has
 * passed since they ended; then they are forgotten: their rows and their events leave the
 * store, and 404 is the answer. They are kept in memory too (d->ended, newest first), so a
 * list joins cached objects as it does for the live ones. Names are never theirs: a name
 * resolves among live sandboxes only. */
#pragma once

#include <stdint.h>

struct sandboxd;

/* At startup: forgets what ended too long ago and loads the rest. -errno (logged). */
int ended_load(struct sandboxd *d, int64_t now_ms);
/* The sandbox id was just terminated (its row says so): keeps it for the list. A failure is
 * logged; the store still answers for it by id. */
void ended_add(struct sandboxd *d, const char *id);
/* Periodic: forgets the sandboxes that ended more than --forget-after before now_ms. */
void ended_forget(struct sandboxd *d, int64_t now_ms);
/* The store changed the owner of owner's terminated sandboxes (the account was deleted): reads
 * them again. */
void ended_reload_owner(struct sandboxd *d, const char *owner);
