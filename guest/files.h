/* files.h: FILE_READ, FILE_WRITE (with the FILE_DATA that follows), FILE_LIST and FILE_REMOVE.
 * Reads and listings are jobs the pump turns into frames as the queue drains, so a large file
 * never sits in memory or blocks the loop; writes land in a temporary file in the target's
 * directory and are renamed into place once SIZE bytes arrived. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct agent;
struct frame;

void files_read(struct agent *a, uint32_t chan, const void *payload, size_t len);
void files_write(struct agent *a, uint32_t chan, const void *payload, size_t len);
void files_list(struct agent *a, uint32_t chan, const void *payload, size_t len);
void files_remove(struct agent *a, uint32_t chan, const void *payload, size_t len);
/* FILE_DATA from the host, for a FILE_WRITE in progress (others are ignored); AP_F_EOF ends
 * its data before SIZE, AP_F_ABORT gives it up (RESULT ECANCELED, no file made). */
void files_data(struct agent *a, const struct frame *f);

/* Adds at most one frame per job to the queue; false when no job had anything to send. */
bool files_pump(struct agent *a);
/* The session ended: abandons every job (a partial write leaves no file behind). */
void files_session_end(struct agent *a);

struct agent;
/* Switches the filesystem uid and gid to the sandbox user's (user true) or back to root, so
 * file requests have exactly the rights the sandbox's processes have. No-op in test mode. */
void files_as_user(struct agent *a, bool user);
