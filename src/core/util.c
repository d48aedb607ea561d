#include "core/util.h"
#include "core/files.h"
#include "core/system.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

double tp_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

const char *tp_fmt_bytes(double b, char *buf, size_t n) {
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (b >= 1000.0 && i < 4) b /= 1000.0, i++;
    snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", b, u[i]);
    return buf;
}

int tp_split_commas(char *s, char **parts, int max) {
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(s, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) parts[n++] = t;
    return n;
}

void tp_host_cpu_name(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ') p++;
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, n, "%s", p);
            }
            break;
        }
    fclose(f);
}

void tp_append(char *buf, size_t n, const char *fmt, ...) {
    size_t l = strlen(buf);
    if (l + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + l, n - l, fmt, ap);
    va_end(ap);
}

const char *tp_json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "unknown";
}

int64_t tp_lcm64(int64_t a, int64_t b) {
    int64_t x = a, y = b;
    while (y) {
        int64_t r = x % y;
        x = y;
        y = r;
    }
    return a / x * b;
}

tp_status tp_json_write_file(const json_t *root, const char *path, size_t flags, const char *what, tp_error *err) {
    tp_outfile o;
    tp_status s = tp_outfile_open(&o, path, what, err);
    if (s) return s;
    if (json_dumpf(root, o.f, flags) != 0) {
        tp_outfile_abort(&o);
        return tp_fail_path(err, TP_ERR_IO, path, "cannot write %s", what);
    }
    return tp_outfile_commit(&o, err);
}

tp_status tp_json_read_file(const char *path, const char *what, json_t **root, tp_error *err) {
    *root = NULL;
    /* opened here, not by jansson, so that a missing file (TP_ERR_IO) is told apart from a malformed one */
    FILE *f = tp_input_open(path, what, err);
    if (!f) return err ? err->code : TP_ERR_IO;
    json_error_t je;
    *root = json_loadf(f, 0, &je);
    fclose(f);
    if (!*root)
        return tp_fail_path(err, TP_ERR_FORMAT, path, "line %d column %d: invalid JSON: %s", je.line, je.column,
                            je.text);
    return TP_OK;
}
