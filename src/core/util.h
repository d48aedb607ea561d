/* util.h: small host helpers shared by the tools. */
#ifndef TP_UTIL_H
#define TP_UTIL_H
#include <stddef.h>
#include <stdint.h>

double tp_now_ms(void); /* monotonic wall clock, ms */
/* Human-readable bytes ("85.8 MB", decimal units) into buf. */
const char *tp_fmt_bytes(double bytes, char *buf, size_t n);
/* Splits a comma list in place; returns the count (at most max), pointers into s. */
int tp_split_commas(char *s, char **parts, int max);

#endif
