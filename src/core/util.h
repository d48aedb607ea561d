/* util.h: small host helpers shared by the tools. */
#ifndef TP_UTIL_H
#define TP_UTIL_H
#include <stddef.h>
#include <stdint.h>

#include "tprof.h"

double tp_now_ms(void); /* monotonic wall clock, ms */
/* Human-readable bytes ("85.8 MB", decimal units) into buf. */
const char *tp_fmt_bytes(double bytes, char *buf, size_t n);
/* Splits a comma list in place; returns the count (at most max), pointers into s. */
int tp_split_commas(char *s, char **parts, int max);
/* Appends printf output to the NUL-terminated buf of n bytes; what does not fit is dropped (buffers are sized
 * for the longest text, so truncation only shortens a message). */
void tp_append(char *buf, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Least common multiple of two positive integers. */
int64_t tp_lcm64(int64_t a, int64_t b);
/* What a JSON value is, for messages: "an object", "an array", "a string", "an integer", "a real number",
 * "a boolean", "null" (jansson's json_t). */
struct json_t;
const char *tp_json_kind(const struct json_t *v);
/* v as a JSON number, or null when it is not finite (JSON has no NaN or Inf). */
struct json_t *tp_json_num(double v);
/* v as JSON text for a message (1.5, "silu", [1, 2]), cut to fit buf (n >= 8) with "..."; its kind when it cannot be
 * written. Returns buf. */
const char *tp_json_brief(const struct json_t *v, char *buf, size_t n);
/* Reads the JSON file at path into *root (the caller's reference). what names the file in messages ("the timm
 * config"). Errors: TP_ERR_IO (missing, unreadable, a folder: "PATH: cannot open WHAT: reason"), TP_ERR_FORMAT
 * (invalid JSON: "PATH: line L column C: invalid JSON: ..."). */
tp_status tp_json_read_file(const char *path, const char *what, struct json_t **root, tp_error *err);
/* Writes root (jansson's dump flags) to path through a temporary file renamed into place (core/files.h): a failed
 * write leaves what path held before. what names the output in messages ("--json"). Errors: TP_ERR_ARG (path is
 * a device, FIFO, folder; its folder missing), TP_ERR_IO ("PATH: cannot write: reason"). */
tp_status tp_json_write_file(const struct json_t *root, const char *path, size_t flags, const char *what,
                             tp_error *err);

#endif
