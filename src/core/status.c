/* status.c: the second error tier: status codes with a one-line reason. */
#include "tprof.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Every reason is one line: control bytes that reach it from an input (a JSON key holding "\n", a file name)
 * become '?', so an error never spans lines or moves the terminal (the policy fuzzer found a key with a newline
 * echoed in an error, bench/results/2026-11-26_cpu_fuzz_long.log). */
static void one_line(char *msg) {
    for (unsigned char *p = (unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7F) *p = '?';
}

/* Fits a reason longer than the message buffer by cutting the middle out of its longest words (paths, almost
 * always: a 5000-character path otherwise filled the buffer and cut the reason itself off), each kept to its
 * start and its end (the file name), longest first, until the reason fits. src is modified. */
static void fit(char *dst, size_t cap, char *src) {
    size_t len = strlen(src);
    for (int round = 0; round < 8 && len >= cap; round++) {
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < len;) {
            size_t j = i;
            while (j < len && src[j] != ' ') j++;
            if (j - i > best_len) best = i, best_len = j - i;
            i = j + 1;
        }
        if (best_len <= 64) break;
        size_t keep = best_len - (len - (cap - 1)) - 3; /* what of the word fits, "..." added */
        if (keep > best_len || keep < 48) keep = 48;   /* not enough from this word alone: the next round goes on */
        const size_t head = keep / 2, tail = keep - head;
        memcpy(src + best + head, "...", 3);
        memmove(src + best + head + 3, src + best + best_len - tail, len - (best + best_len - tail) + 1);
        len = strlen(src);
    }
    snprintf(dst, cap, "%s", src); /* whatever still does not fit: the end goes */
}

tp_status tp_fail(tp_error *err, tp_status code, const char *fmt, ...) {
    if (err) {
        char big[8192];
        va_list ap;
        va_start(ap, fmt);
        const int len = vsnprintf(big, sizeof big, fmt, ap);
        va_end(ap);
        if (len >= 0 && (size_t)len < sizeof err->msg) memcpy(err->msg, big, (size_t)len + 1);
        else fit(err->msg, sizeof err->msg, big);
        one_line(err->msg);
        err->code = code;
    }
    return code;
}

tp_status tp_fail_path(tp_error *err, tp_status code, const char *path, const char *fmt, ...) {
    if (err) {
        char tail[8192]; /* a long path in the reason is cut by tp_fail, not here */
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
