/* datacases.h: data-driven cmocka groups. One test per file NAME<suffix> in a directory
 * (sorted by name, NAME given to the test as its initial state), after some fixed tests, so
 * adding a case is adding a file. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

int datacases_run(const char *group, const char *dir, const char *suffix,
                  const struct CMUnitTest *fixed, size_t nfixed, CMUnitTestFunction fn);
