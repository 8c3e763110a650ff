/* table.c: see table.h. */
#include <errno.h>
#include <stdlib.h>
#include "table.h"
#include "util.h"

struct table {
	size_t ncols;
	const char *const *headers;
	char **cells; /* rows * ncols, row-major */
	size_t rows, cap;
};

struct table *
table_new(size_t ncols, const char *const *headers)
{
	struct table *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->ncols = ncols;
	t->headers = headers;
	return t;
}

struct table *
table_free(struct table *t)
{
	if (!t)
		return NULL;
	for (size_t i = 0; i < t->rows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
	return NULL;
}

int
table_add(struct table *t, const char *const *cells)
{
	if (t->rows == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 16;
		char **n = reallocarray(t->cells, ncap * t->ncols, sizeof(*n));
		if (!n)
			return -ENOMEM;
		t->cells = n;
		t->cap = ncap;
	}
	for (size_t i = 0; i < t->ncols; i++) {
		char *c = termsafe_dup(cells[i] ? cells[i] : "-");
		if (!c) {
			for (size_t j = 0; j < i; j++)
				free(t->cells[t->rows * t->ncols + j]);
			return -ENOMEM;
		}
		t->cells[t->rows * t->ncols + i] = c;
	}
	t->rows++;
	return 0;
}

size_t
table_rows(const struct table *t)
{
	return t->rows;
}

static void
print_row(const struct table *t, const char *const *row, const size_t *width, FILE *f)
{
	for (size_t i = 0; i < t->ncols; i++) {
		if (i + 1 < t->ncols)
			fprintf(f, "%-*s  ", (int)width[i], row[i]);
		else
			fprintf(f, "%s\n", row[i]);
	}
}

void
table_print(const struct table *t, FILE *f)
{
	_cleanup_free_ size_t *width = calloc(t->ncols, sizeof(*width));

	if (!width)
		return;
	for (size_t i = 0; i < t->ncols; i++)
		width[i] = strlen(t->headers[i]);
	for (size_t r = 0; r < t->rows; r++)
		for (size_t i = 0; i < t->ncols; i++)
			width[i] = MAX(width[i], strlen(t->cells[r * t->ncols + i]));
	print_row(t, t->headers, width, f);
	for (size_t r = 0; r < t->rows; r++)
		print_row(t, (const char *const *)&t->cells[r * t->ncols], width, f);
}
