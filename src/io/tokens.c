#include "io/tokens.h"
#include "core/files.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

tp_status tp_tokens_read(const char *path, int V, int max, float *ids, int *n, tp_error *err) {
    *n = 0;
    FILE *f = tp_input_open(path, "the token file", err);
    if (!f) return err ? err->code : TP_ERR_IO;
    tp_status s = TP_OK;
    while (!s && *n < max) {
        long v;
        const int r = fscanf(f, "%ld", &v);
        if (r == EOF) break;
        if (r != 1) s = tp_fail_path(err, TP_ERR_FORMAT, path, "token %d is not an integer", *n + 1);
        else if (v < 0 || v >= V)
            s = tp_fail_path(err, TP_ERR_FORMAT, path, "token %d is %ld, outside the vocabulary [0, %d)", *n + 1, v, V);
        else ids[(*n)++] = (float)v;
    }
    fclose(f);
    return s;
}
