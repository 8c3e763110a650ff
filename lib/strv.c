/* strv.c: see strv.h. */
#include <stdarg.h>
#include <string.h>
#include "strv.h"
#include "util.h"

int
strv_push(char ***v, size_t *n, char *s)
{
	char **nv;

	if (!s)
		return -ENOMEM;
	nv = realloc(*v, (*n + 2) * sizeof(char *));
	if (!nv) {
		free(s);
		return -ENOMEM;
	}
	nv[(*n)++] = s;
	nv[*n] = NULL;
	*v = nv;
	return 0;
}

int
strv_add(char ***v, size_t *n, const char *s)
{
	return strv_push(v, n, strdup(s));
}

int
strv_extend(char ***v, size_t *n, ...)
{
	const char *s;
	va_list ap;
	int r = 0;

	va_start(ap, n);
	while (r >= 0 && (s = va_arg(ap, const char *)))
		r = strv_add(v, n, s);
	va_end(ap);
	return r;
}

int
strv_copy(char *const *src, size_t n, char ***ret)
{
	_cleanup_strv_ char **v = calloc(n + 1, sizeof(char *));

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (!(v[i] = strdup(src[i])))
			return -ENOMEM;
	*ret = TAKE_PTR(v);
	return 0;
}

size_t
strv_length(char *const *v)
{
	size_t n = 0;

	while (v && v[n])
		n++;
	return n;
}

char **
strv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
	return NULL;
}

char **
strv_free_erase(char **v)
{
	for (size_t i = 0; v && v[i]; i++) {
		explicit_bzero(v[i], strlen(v[i]));
		free(v[i]);
	}
	free(v);
	return NULL;
}
