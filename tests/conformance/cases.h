/* cases.h: declares every case listed in cases.def. The cases-*.c files include it (and
 * conf.h), so a case needs no declaration of its own. */
#pragma once

#define CASE(name) void case_##name(void **state);
#include "cases.def"
#undef CASE
