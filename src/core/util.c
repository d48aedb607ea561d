#include "core/util.h"
#include "core/files.h"
#include "core/system.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

/* A small text file of /proc or /sys into buf (NUL-terminated); 0 when it cannot be read. */
static int read_small(const char *path, char *buf, size_t n) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    size_t got = 0;
    ssize_t k;
    while (got + 1 < n && (k = read(fd, buf + got, n - 1 - got)) > 0) got += (size_t)k;
    close(fd);
    buf[got] = 0;
    return got > 0;
}

/* A byte count file of a cgroup ("max" or a number); -1 for none or no limit. */
static double cgroup_bytes(const char *dir, const char *file) {
    char path[600], buf[64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (!read_small(path, buf, sizeof buf) || strncmp(buf, "max", 3) == 0) return -1;
    const double v = strtod(buf, NULL);
    return v > 0 && v < 1e18 ? v : -1; /* v1 writes "no limit" as a page-rounded 2^63 */
}

/* What the process's cgroup limit leaves, -1 where there is none */
static double cgroup_left(void) {
    char cg[1024], dir[600];
    const char *rel = "";
    if (read_small("/proc/self/cgroup", cg, sizeof cg)) { /* v2: "0::/path" */
        char *p = strstr(cg, "0::");
        if (p && (p == cg || p[-1] == '\n')) {
            rel = p + 3;
            p[3 + strcspn(p + 3, "\n")] = 0;
        }
    }
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", k == 0 ? rel : "");
        const double max = cgroup_bytes(dir, "memory.max"), cur = cgroup_bytes(dir, "memory.current");
        if (max > 0) return cur > 0 ? fmax(max - cur, 0.0) : max;
    }
    const double max = cgroup_bytes("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
                 cur = cgroup_bytes("/sys/fs/cgroup/memory", "memory.usage_in_bytes");
    return max > 0 ? (cur > 0 ? fmax(max - cur, 0.0) : max) : -1;
}

double tp_host_mem_available(char *what, size_t n) {
    char info[8192];
    double have = 0;
    snprintf(what, n, "MemAvailable");
    if (read_small("/proc/meminfo", info, sizeof info)) {
        const char *p = strstr(info, "MemAvailable:");
        if (p) have = strtod(p + 13, NULL) * 1024.0; /* kB */
    }
    if (!(have > 0)) {
        const long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
        have = pages > 0 && psize > 0 ? (double)pages * (double)psize : 0;
        snprintf(what, n, "physical memory");
    }
    const double left = cgroup_left();
    if (left >= 0 && (left < have || !(have > 0))) {
        have = left;
        snprintf(what, n, "the cgroup's limit");
    }
    struct rlimit rl; /* ulimit -v: the address space left to this process */
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && read_small("/proc/self/status", info, sizeof info)) {
        const char *p = strstr(info, "VmSize:");
        const double as_left = p ? fmax((double)rl.rlim_cur - strtod(p + 7, NULL) * 1024.0, 0.0) : -1;
        if (as_left >= 0 && (as_left < have || !(have > 0))) {
            have = as_left;
            snprintf(what, n, "ulimit -v");
        }
    }
    return have;
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

json_t *tp_json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

const char *tp_json_brief(const json_t *v, char *buf, size_t n) {
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(10));
    if (!s) snprintf(buf, n, "%s", tp_json_kind(v));
    else if (strlen(s) < n) snprintf(buf, n, "%s", s);
    else snprintf(buf, n, "%.*s...", (int)n - 4, s);
    free(s);
    return buf;
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
