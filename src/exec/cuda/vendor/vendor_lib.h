/* vendor_lib.h: finding an NVIDIA library that tprof loads at run time instead of linking (cuDNN, cuSPARSELt: on the
 * GPU machines they live inside Python packages, not on the loader path). One search order for all of them:
 *   1. the environment variable env_var: a library file, or a directory holding one of names;
 *   2. the dynamic loader's own path (each of names as a bare soname);
 *   3. each of subdirs (e.g. "nvidia/cudnn/lib") under every Python package directory glob() finds at run time:
 *      $VIRTUAL_ENV and $CONDA_PREFIX /lib/python3.X/site-packages, /opt/ANY/.venv, /opt/ANY/venv and /opt/ANY
 *      /lib/python3.X/site-packages, ~/.local/lib/python3.X/site-packages, /usr/local/lib/python3.X and
 *      /usr/lib/python3.X dist-packages and site-packages.
 * try_lib decides whether a candidate is the one (dlopen, symbols, version); the first it accepts ends the search.
 * Used once per process per library, under the caller's pthread_once. C11. */
#ifndef TP_VENDOR_LIB_H
#define TP_VENDOR_LIB_H

#include <stddef.h>

#define TP_VENDOR_PATH_BYTES 1024

/* A candidate: a path, or a bare soname for the loader's search. Returns 1 to accept it (the search stops), 0 to go
 * on, having appended its reason to why (n bytes) with tp_vendor_appendf. */
typedef int (*tp_vendor_try)(const char *name, void *user, char *why, size_t n);

/* The search above; 1 when try_lib accepted a candidate, else 0 with why (n bytes) listing where it looked. */
int tp_vendor_find(const char *env_var, const char *const *names, int n_names, const char *const *subdirs,
                   int n_subdirs, tp_vendor_try try_lib, void *user, char *why, size_t n);

/* Appends a printf-formatted piece to buf (n bytes), truncating, always terminated. */
void tp_vendor_appendf(char *buf, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

int tp_vendor_is_file(const char *p);

#endif
