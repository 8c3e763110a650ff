/* strv.h: the one string vector (argv, environments, lists of names): a char ** that is NULL
 * or ends with a NULL, every string in it its own, with its count kept beside it by the caller
 * so that appends stay cheap. Built one string at a time; handed to execve() as it is. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include "macro.h"

/* Appends s to *v, which holds *n strings, taking s even on failure: -ENOMEM when s is NULL
 * (a failed strdup() or strdup_printf(), so that calls chain) or the array cannot grow. */
int strv_push(char ***v, size_t *n, char *s);
/* Appends a copy of s. */
int strv_add(char ***v, size_t *n, const char *s);
/* Appends a copy of each string up to the NULL that ends the list (an argv's fixed words). */
int strv_extend(char ***v, size_t *n, ...) __attribute__((sentinel));
/* A NULL-terminated copy of the n strings at src (src need not end with a NULL). */
int strv_copy(char *const *src, size_t n, char ***ret);

/* The strings before the NULL (0 for a NULL vector). */
size_t strv_length(char *const *v);

/* Frees every string and the array (NULL-safe); returns NULL. */
char **strv_free(char **v);
/* The same, overwriting each string first: an environment's values may be secrets. */
char **strv_free_erase(char **v);
static inline void
strv_freep(char ***v)
{
	*v = strv_free(*v);
}
#define _cleanup_strv_ _cleanup_(strv_freep)
