#define _GNU_SOURCE /* GLOB_ONLYDIR */
#include "exec/cuda/vendor/vendor_lib.h"

#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void tp_vendor_appendf(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

int tp_vendor_is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* out = dir + "/" + name; 0 when it does not fit (the path is then skipped, never truncated and tried). */
static int join(char out[TP_VENDOR_PATH_BYTES], const char *dir, const char *name) {
    const int k = snprintf(out, TP_VENDOR_PATH_BYTES, "%s/%s", dir, name);
    return k > 0 && k < TP_VENDOR_PATH_BYTES;
}

/* Each of names in dir, existing files only. */
static int try_dir(const char *dir, const char *const *names, int n_names, tp_vendor_try try_lib, void *user,
                   char *why, size_t n) {
    for (int i = 0; i < n_names; i++) {
        char p[TP_VENDOR_PATH_BYTES];
        if (join(p, dir, names[i]) && tp_vendor_is_file(p) && try_lib(p, user, why, n)) return 1;
    }
    return 0;
}

int tp_vendor_find(const char *env_var, const char *const *names, int n_names, const char *const *subdirs,
                   int n_subdirs, tp_vendor_try try_lib, void *user, char *why, size_t n) {
    const char *env = getenv(env_var);
    if (env && env[0]) {
        if (is_dir(env) ? try_dir(env, names, n_names, try_lib, user, why, n)
                        : tp_vendor_is_file(env) ? try_lib(env, user, why, n) : 0)
            return 1;
        tp_vendor_appendf(why, n, "%s=%s: %s; ", env_var, env,
                          is_dir(env) ? "no usable library of that name there"
                                      : tp_vendor_is_file(env) ? "not loadable" : "no such file or directory");
    } else {
        tp_vendor_appendf(why, n, "%s unset; ", env_var);
    }
    for (int i = 0; i < n_names; i++)
        if (try_lib(names[i], user, why, n)) return 1;
    char pats[8][TP_VENDOR_PATH_BYTES];
    int np = 0;
    const char *venv = getenv("VIRTUAL_ENV"), *conda = getenv("CONDA_PREFIX"), *home = getenv("HOME");
    if (venv && venv[0]) snprintf(pats[np++], sizeof pats[0], "%s/lib/python3*/site-packages", venv);
    if (conda && conda[0]) snprintf(pats[np++], sizeof pats[0], "%s/lib/python3*/site-packages", conda);
    snprintf(pats[np++], sizeof pats[0], "/opt/*/.venv/lib/python3*/site-packages");
    snprintf(pats[np++], sizeof pats[0], "/opt/*/venv/lib/python3*/site-packages");
    snprintf(pats[np++], sizeof pats[0], "/opt/*/lib/python3*/site-packages");
    if (home && home[0]) snprintf(pats[np++], sizeof pats[0], "%s/.local/lib/python3*/site-packages", home);
    snprintf(pats[np++], sizeof pats[0], "/usr/local/lib/python3*/[ds]i[st][te]-packages");
    snprintf(pats[np++], sizeof pats[0], "/usr/lib/python3*/[ds]i[st][te]-packages");
    int n_pkg_dirs = 0;
    for (int i = 0; i < np; i++) {
        glob_t g;
        memset(&g, 0, sizeof g);
        if (glob(pats[i], GLOB_ONLYDIR, NULL, &g) == 0) {
            for (size_t k = 0; k < g.gl_pathc; k++) {
                n_pkg_dirs++;
                for (int s = 0; s < n_subdirs; s++) {
                    char d[TP_VENDOR_PATH_BYTES];
                    if (!join(d, g.gl_pathv[k], subdirs[s]) || !is_dir(d)) continue;
                    if (try_dir(d, names, n_names, try_lib, user, why, n)) {
                        globfree(&g);
                        return 1;
                    }
                    tp_vendor_appendf(why, n, "%s: no usable %s; ", d, names[0]);
                }
            }
        }
        globfree(&g);
    }
    tp_vendor_appendf(why, n, "no %s in %d Python package directories (/opt/*/.venv, /opt/*/venv, /opt/*, "
                      "$VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local/lib/python3*, /usr/lib/python3*)",
                      subdirs[0], n_pkg_dirs);
    return 0;
}
