/* status.c: the second error tier: status codes with a one-line reason. */
#include "tprof.h"

#include <stdarg.h>
#include <stdio.h>

/* Every reason is one line: control bytes that reach it from an input (a JSON key holding "\n", a file name)
 * become '?', so an error never spans lines or moves the terminal (the policy fuzzer found a key with a newline
 * echoed in an error, bench/results/2026-11-26_cpu_fuzz_long.log). */
static void one_line(char *msg) {
    for (unsigned char *p = (unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7F) *p = '?';
}

tp_status tp_fail(tp_error *err, tp_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        one_line(err->msg);
        err->code = code;
    }
    return code;
}

tp_status tp_fail_path(tp_error *err, tp_status code, const char *path, const char *fmt, ...) {
    if (err) {
        char tail[sizeof err->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(tail, sizeof tail, fmt, ap);
        va_end(ap);
        tp_fail(err, code, "%s: %s", path, tail);
    }
    return code;
}

const char *tp_status_name(tp_status s) {
    switch (s) {
    case TP_OK: return "ok";
    case TP_ERR_ARG: return "invalid argument";
    case TP_ERR_IO: return "i/o error";
    case TP_ERR_FORMAT: return "malformed file";
    case TP_ERR_SHAPE: return "shape mismatch";
    case TP_ERR_UNSUPPORTED: return "unsupported";
    case TP_ERR_OOM: return "out of memory";
    case TP_ERR_CUDA: return "CUDA error";
    case TP_ERR_NO_GPU: return "no GPU";
    }
    return "unknown";
}
