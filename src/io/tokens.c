#include "io/tokens.h"
#include "core/files.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next whitespace-separated word of f into w (n bytes, cut with "..." when longer): 0 at the end of the file,
 * 2 when cut, else 1. */
static int next_word(FILE *f, char *w, size_t n) {
    int ch;
    while ((ch = getc(f)) != EOF && isspace(ch)) {
    }
    size_t len = 0, cut = 0;
    for (; ch != EOF && !isspace(ch); ch = getc(f)) {
        if (len + 1 < n) w[len++] = (char)ch;
        else cut = 1;
    }
    w[len] = 0;
    if (cut && n > 4) memcpy(w + n - 4, "...", 4);
    return len == 0 ? 0 : cut ? 2 : 1;
}

tp_status tp_tokens_read(const char *path, int V, int max, float *ids, int *n, tp_error *err) {
    *n = 0;
    FILE *f = tp_input_open(path, "the token file", err);
    if (!f) return err ? err->code : TP_ERR_IO;
    tp_status s = TP_OK;
    char w[40];
    /* word by word, so "1.5", "1,2,3" or "0x10" is one bad token named as written, not a number and a remainder */
    int r;
    while (!s && *n < max && (r = next_word(f, w, sizeof w))) {
        const char *d = w + (w[0] == '-');
        const size_t digits = strspn(d, "0123456789"), len = strlen(d);
        /* a cut word of digits (r 2) is far outside any vocabulary */
        const int number = digits > 0 && (digits == len || (r == 2 && digits == len - 3));
        errno = 0;
        const long long v = number && r == 1 ? strtoll(w, NULL, 10) : -1;
        if (!number)
            s = tp_fail_path(err, TP_ERR_FORMAT, path, "token %d is not an integer: '%s' (token ids are decimal "
                             "integers separated by whitespace)", *n + 1, w);
        else if (errno || v < 0 || v >= V)
            s = tp_fail_path(err, TP_ERR_FORMAT, path, "token %d is %s, outside the vocabulary [0, %d)", *n + 1, w, V);
        else ids[(*n)++] = (float)v;
    }
    fclose(f);
    return s;
}
