/* table.h: human output as aligned columns (kubectl style). Every cell is copied through
 * termsafe_dup() on the way in, so text from the server cannot reach the terminal raw. */
#pragma once

#include <stddef.h>
#include <stdio.h>
#include "macro.h"

struct table;

/* A table with ncols columns named by headers (not copied; usually string literals). */
struct table *table_new(size_t ncols, const char *const *headers);
/* NULL-safe; returns NULL. */
struct table *table_free(struct table *t);
DEFINE_FREEP(struct table, table_free)

/* Adds a row of ncols cells (NULL prints as "-"); the cells are copied. 0 or -ENOMEM. */
int table_add(struct table *t, const char *const *cells);
size_t table_rows(const struct table *t);
/* Prints the header and the rows, two spaces between columns; the last is not padded. */
void table_print(const struct table *t, FILE *f);
