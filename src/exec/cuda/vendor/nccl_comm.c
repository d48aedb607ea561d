/* nccl_comm.c: NCCL loaded at run time (nccl_comm.h). */
#define _GNU_SOURCE /* dladdr: where the loaded library came from, for messages and reports */
#include "exec/cuda/vendor/nccl_comm.h"

#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* NCCL's ABI as nccl.h 2.x declares it: an opaque communicator, int status codes (ncclSuccess 0), the data types
 * ncclFloat32 7, ncclFloat16 6, ncclBfloat16 9 and the reduction ncclSum 0. */
typedef void *nccl_comm_t;
typedef struct {
    void *lib;
    int version; /* ncclGetVersion: major * 10000 + minor * 100 + patch */
    char path[512];
    char why[1536]; /* every place tried and why it failed */
    int (*get_version)(int *);
    int (*comm_init_all)(nccl_comm_t *, int, const int *);
    int (*comm_destroy)(nccl_comm_t);
    int (*comm_abort)(nccl_comm_t);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*group_start)(void);
    int (*group_end)(void);
    const char *(*error_string)(int);
} nccl_api;

/* The library, loaded once per process (pthread_once): it is never unloaded. */
static nccl_api g_nccl;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

struct tp_nccl {
    int n;
    nccl_comm_t *comms;
    char desc[600];
};

static void appendf(char *dst, size_t n, const char *fmt, ...) {
    size_t l = strlen(dst);
    if (l + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst + l, n - l, fmt, ap);
    va_end(ap);
}

static int try_lib(const char *name) {
    struct stat sb;
    if (strchr(name, '/') && stat(name, &sb) != 0) return 0;
    dlerror();
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        appendf(g_nccl.why, sizeof g_nccl.why, "%s: %s; ", name,
                !strchr(name, '/') && e && strstr(e, "cannot open shared object") ? "not on the loader path"
                                                                                  : (e ? e : "dlopen failed"));
        return 0;
    }
    nccl_api a = g_nccl;
#define SYM(field, sym)                                                                          \
    do {                                                                                         \
        *(void **)(&a.field) = dlsym(h, sym);                                                    \
        if (!a.field) {                                                                          \
            appendf(g_nccl.why, sizeof g_nccl.why, "%s: no symbol %s; ", name, sym);             \
            dlclose(h);                                                                          \
            return 0;                                                                            \
        }                                                                                        \
    } while (0)
    SYM(get_version, "ncclGetVersion");
    SYM(comm_init_all, "ncclCommInitAll");
    SYM(comm_destroy, "ncclCommDestroy");
    SYM(comm_abort, "ncclCommAbort");
    SYM(all_reduce, "ncclAllReduce");
    SYM(group_start, "ncclGroupStart");
    SYM(group_end, "ncclGroupEnd");
    SYM(error_string, "ncclGetErrorString");
#undef SYM
    a.lib = h;
    if (a.get_version(&a.version) != 0) a.version = 0;
    Dl_info info;
    const char *where = dladdr(*(void **)&a.all_reduce, &info) && info.dli_fname ? info.dli_fname : name;
    snprintf(a.path, sizeof a.path, "%s", where);
    g_nccl = a;
    return 1;
}

static void load(void) {
    const char *env = getenv("TPROF_NCCL_LIB");
    char p[1024];
    if (env && *env) {
        struct stat sb;
        if (stat(env, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            snprintf(p, sizeof p, "%s/libnccl.so.2", env);
            if (try_lib(p)) return;
            appendf(g_nccl.why, sizeof g_nccl.why, "TPROF_NCCL_LIB=%s: no usable libnccl.so.2 there; ", env);
        } else if (try_lib(env)) {
            return;
        } else {
            appendf(g_nccl.why, sizeof g_nccl.why, "TPROF_NCCL_LIB=%s: not a usable library; ", env);
        }
    }
    if (try_lib("libnccl.so.2")) return;
    const char *venv = getenv("VIRTUAL_ENV");
    char pat[3][600];
    int np = 0;
    if (venv && *venv) snprintf(pat[np++], sizeof pat[0], "%s/lib/python3.*/site-packages/nvidia/nccl/lib/libnccl.so.2", venv);
    snprintf(pat[np++], sizeof pat[0], "/opt/*/.venv/lib/python3.*/site-packages/nvidia/nccl/lib/libnccl.so.2");
    snprintf(pat[np++], sizeof pat[0], "/usr/local/lib/python3.*/dist-packages/nvidia/nccl/lib/libnccl.so.2");
    for (int i = 0; i < np; i++) {
        glob_t gl;
        if (glob(pat[i], 0, NULL, &gl) == 0) {
            for (size_t k = 0; k < gl.gl_pathc; k++)
                if (try_lib(gl.gl_pathv[k])) {
                    globfree(&gl);
                    return;
                }
            globfree(&gl);
        } else {
            appendf(g_nccl.why, sizeof g_nccl.why, "%s: none; ", pat[i]);
        }
    }
}

tp_status tp_nccl_init(int n, const int *devices, tp_nccl **out, tp_error *err) {
    *out = NULL;
    pthread_once(&g_once, load);
    if (!g_nccl.lib)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "NCCL (libnccl.so.2) not found, needed by --tp: %s(set TPROF_NCCL_LIB "
                       "to the library or its directory)", g_nccl.why);
    if (n < 2) return tp_fail(err, TP_ERR_ARG, "an NCCL communicator of %d GPUs", n);
    tp_nccl *c = calloc(1, sizeof *c);
    if (!c || !(c->comms = calloc((size_t)n, sizeof(nccl_comm_t)))) {
        free(c);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    c->n = n;
    const int rc = g_nccl.comm_init_all(c->comms, n, devices);
    if (rc != 0) {
        tp_status st = tp_fail(err, TP_ERR_CUDA, "ncclCommInitAll over %d GPUs: %s", n, g_nccl.error_string(rc));
        free(c->comms);
        free(c);
        return st;
    }
    snprintf(c->desc, sizeof c->desc, "NCCL %d.%d.%d (%s)", g_nccl.version / 10000, g_nccl.version / 100 % 100,
             g_nccl.version % 100, g_nccl.path);
    *out = c;
    return TP_OK;
}

void tp_nccl_abort(tp_nccl *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++)
        if (c->comms[i]) g_nccl.comm_abort(c->comms[i]);
    memset(c->comms, 0, sizeof(nccl_comm_t) * (size_t)c->n);
}

void tp_nccl_destroy(tp_nccl *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++)
        if (c->comms[i]) g_nccl.comm_destroy(c->comms[i]);
    free(c->comms);
    free(c);
}

const char *tp_nccl_describe(const tp_nccl *c) { return c ? c->desc : "NCCL not loaded"; }

int tp_nccl_all_reduce(tp_nccl *c, int rank, const void *x, void *y, size_t count, tp_dtype dt, cudaStream_t s) {
    const int t = dt == TP_F32 ? 7 : dt == TP_F16 ? 6 : dt == TP_BF16 ? 9 : -1;
    if (!c || rank < 0 || rank >= c->n || t < 0 || !c->comms[rank]) return 4; /* ncclInvalidArgument */
    return g_nccl.all_reduce(x, y, count, t, 0, c->comms[rank], s);
}

int tp_nccl_group_start(tp_nccl *c) { return c ? g_nccl.group_start() : 4; }
int tp_nccl_group_end(tp_nccl *c) { return c ? g_nccl.group_end() : 4; }

const char *tp_nccl_error(const tp_nccl *c, int rc) {
    (void)c;
    return g_nccl.error_string ? g_nccl.error_string(rc) : "NCCL not loaded";
}
