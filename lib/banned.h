/* banned.h: libc calls that are easy to misuse. Included last by util.h, after every system
 * header, so any use in project code fails to compile. (git's banned.h.) */
#pragma once

#define BANNED(func) sorry_##func##_is_banned_use_the_bounded_alternative

#undef strcpy
#define strcpy(x, y) BANNED(strcpy)
#undef strcat
#define strcat(x, y) BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) BANNED(strncpy)
#undef sprintf
#define sprintf(...) BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) BANNED(vsprintf)
#undef strtok
#define strtok(x, y) BANNED(strtok)
#undef atoi
#define atoi(x) BANNED(atoi)
#undef atol
#define atol(x) BANNED(atol)
#undef gets
#define gets(x) BANNED(gets)
#undef gmtime
#define gmtime(x) BANNED(gmtime)
#undef localtime
#define localtime(x) BANNED(localtime)
