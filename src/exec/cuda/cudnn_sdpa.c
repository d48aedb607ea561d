/* cudnn_sdpa.c: cuDNN's SDPA forward through its backend C API, loaded at run time (contract in cudnn_sdpa.h).
 *
 * The backend graph, as cudnn-frontend's UnifiedSDPANode builds it (NVIDIA/cudnn-frontend,
 * include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, which needs cuDNN >= 9.13.1 for it):
 *   five tensor descriptors (Q, K, V, O; the attention scale: a 1x1x1x1 fp32 tensor marked IS_BY_VALUE, whose
 *   variant-pack pointer is a host address read when the work is enqueued) -> one SDPA_FWD operation (no stats
 *   descriptor = inference; no mask, seq-len or page-table descriptors = dense, non-causal) -> an operation graph
 *   -> engine heuristics (mode A) -> the first engine configuration whose execution plan finalizes.
 * There is no "is_inference" attribute in the backend: leaving STATSDESC unset is what makes it inference.
 *
 * Loading (why each step, see cudnn_sdpa.h): one pthread_once per process fills a read-only table of function
 * pointers; the dlopen handle is never closed (cuDNN keeps internal state and threads; unloading it under live
 * handles is undefined).
 *
 * Sequence lengths: this plan has no padding mask and needs none: T is the real sequence length of every batch.
 * cuDNN 9.14 and 9.19 ran T = 1, 70, 197, 257 and 577 (none a multiple of 64) with D = 64, 80 and 128 directly
 * on an H200, correct to the format's tolerance, NaN rows after the last token never read (tests/gpu/
 * test_gpu_sdpa.c); D = 48 plans too. If an engine refuses a shape, the plan is TP_ERR_UNSUPPORTED with cuDNN's reason, never a silent wrong
 * answer; the one silent failure seen, NaN outputs for scales <= 0, is refused up front. */
#define _GNU_SOURCE /* dladdr: the path of the loaded library, for messages and reports */

#include "exec/cuda/cudnn_sdpa.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<cudnn_graph.h>) && __has_include(<cudnn_version.h>)
#include <cudnn_version.h>
/* The SDPA_FWD descriptor and its attributes appear in the 9.13 headers. */
#if CUDNN_VERSION >= 91300
#define TP_HAVE_CUDNN_HEADERS 1
#endif
#endif
#endif

#ifndef TP_HAVE_CUDNN_HEADERS

/* ---- stub: no usable cuDNN headers at build time ------------------------------------------------------------ */

#if defined(CUDNN_MAJOR) && defined(CUDNN_MINOR)
#define TP_SDPA_STR2(x) #x
#define TP_SDPA_STR(x) TP_SDPA_STR2(x)
#define TP_SDPA_STUB_WHY                                                                                          \
    "cuDNN headers at build time are version " TP_SDPA_STR(CUDNN_MAJOR) "." TP_SDPA_STR(CUDNN_MINOR)              \
    ", older than 9.13"
#else
#define TP_SDPA_STUB_WHY "cuDNN headers not found at build time (cudnn_graph.h, cudnn_version.h)"
#endif

tp_status tp_sdpa_create(int B, int T, int H, int D, tp_dtype dt, float scale, tp_sdpa **out, tp_error *err) {
    (void)B, (void)T, (void)H, (void)D, (void)dt, (void)scale;
    if (out) *out = NULL;
    return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: %s: this build cannot use cuDNN", TP_SDPA_STUB_WHY);
}
size_t tp_sdpa_workspace_bytes(const tp_sdpa *s) {
    (void)s;
    return 0;
}
int tp_sdpa_run(tp_sdpa *s, const void *qkv, void *out, void *workspace, tp_stream stream) {
    (void)s, (void)qkv, (void)out, (void)workspace, (void)stream;
    return 3000; /* CUDNN_STATUS_NOT_SUPPORTED */
}
const char *tp_sdpa_describe(const tp_sdpa *s) {
    (void)s;
    return "cuDNN SDPA unavailable: " TP_SDPA_STUB_WHY;
}
int tp_sdpa_cudnn_available(char *msg, size_t n) {
    if (msg && n) snprintf(msg, n, "%s", TP_SDPA_STUB_WHY);
    return 0;
}
void tp_sdpa_destroy(tp_sdpa *s) { (void)s; }

#else /* TP_HAVE_CUDNN_HEADERS */

#include <cudnn_graph.h>
#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "formats/dtype.h"

/* cudnn-frontend requires 9.13.1 for this operation ("Unified SDPA node requires cuDNN 9.13.1"). */
#define SDPA_MIN_VERSION 91301
#define PATH_BYTES 1024

/* ---- the loaded library: filled once, read-only afterwards --------------------------------------------------- */

typedef struct {
    int ok;              /* every required symbol resolved and the version is new enough */
    void *lib;           /* dlopen handle the functions come from (never closed) */
    size_t version;      /* cudnnGetVersion(), e.g. 91900 */
    char path[PATH_BYTES]; /* the library's file, as the dynamic loader resolved it */
    char preloaded[200]; /* which engine libraries of its directory were preloaded */
    char why[512];       /* when !ok: where it looked and what failed */

    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*destroy_desc)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set_attr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                              int64_t, const void *);
    cudnnStatus_t (*get_attr)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                              cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
    const char *(*error_string)(cudnnStatus_t);
    size_t (*get_version)(void);
    void (*last_error)(char *, size_t); /* optional: cudnnGetLastErrorString, the reason behind a status */
} cudnn_api;

static cudnn_api g_api;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Appends a printf-formatted piece to the bounded string buf (truncating, always terminated). */
static void appendf(char *buf, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void appendf(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

/* out = dir + "/" + name; 0 when it does not fit (the path is then skipped, never truncated and tried). */
static int join(char out[PATH_BYTES], const char *dir, const char *name) {
    const int k = snprintf(out, PATH_BYTES, "%s/%s", dir, name);
    return k > 0 && k < PATH_BYTES;
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}
static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Resolves every function from h into a (not yet ok) table; returns the first missing name, or NULL. */
static const char *resolve(void *h, cudnn_api *a) {
#define SYM(field, name)                                          \
    do {                                                          \
        *(void **)(&a->field) = dlsym(h, name);                   \
        if (!a->field) return name;                               \
    } while (0)
    SYM(create, "cudnnCreate");
    SYM(destroy, "cudnnDestroy");
    SYM(set_stream, "cudnnSetStream");
    SYM(create_desc, "cudnnBackendCreateDescriptor");
    SYM(destroy_desc, "cudnnBackendDestroyDescriptor");
    SYM(set_attr, "cudnnBackendSetAttribute");
    SYM(get_attr, "cudnnBackendGetAttribute");
    SYM(finalize, "cudnnBackendFinalize");
    SYM(execute, "cudnnBackendExecute");
    SYM(error_string, "cudnnGetErrorString");
    SYM(get_version, "cudnnGetVersion");
#undef SYM
    *(void **)(&a->last_error) = dlsym(h, "cudnnGetLastErrorString");
    return NULL;
}

/* The engine libraries libcudnn_graph.so.9 dlopens by soname; loaded from dir first so that cuDNN's own dlopen
 * finds these (an object already loaded under a soname is returned for that soname). Best effort. */
static void preload_engines(const char *dir, char *done, size_t n) {
    static const char *const libs[] = {"libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
                                       "libcudnn_heuristic.so.9"};
    done[0] = '\0';
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        char p[PATH_BYTES];
        if (!join(p, dir, libs[i]) || !is_file(p)) continue;
        if (dlopen(p, RTLD_NOW | RTLD_GLOBAL)) appendf(done, n, "%s%s", done[0] ? ", " : "", libs[i] + 3);
    }
}

/* Tries one library (a path, or a bare soname for the loader's own search). On success fills g_api and returns
 * 1; otherwise appends "what: reason; " to g_api.why and returns 0. */
static int try_lib(const char *name) {
    if (strchr(name, '/') && !is_file(name)) return 0; /* absent: the caller reports the directory */
    dlerror();
    void *h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        /* the loader's "cannot open shared object file" for a bare soname just means "not on its path" */
        appendf(g_api.why, sizeof g_api.why, "%s: %s; ", name,
                !strchr(name, '/') && e && strstr(e, "cannot open shared object") ? "not on the loader path"
                                                                                  : (e ? e : "dlopen failed"));
        return 0;
    }
    cudnn_api a = g_api;
    const char *missing = resolve(h, &a);
    if (missing) {
        appendf(g_api.why, sizeof g_api.why, "%s: no symbol %s; ", name, missing);
        dlclose(h);
        return 0;
    }
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (dladdr(*(void **)(&a.get_version), &info) && info.dli_fname)
        snprintf(a.path, sizeof a.path, "%s", info.dli_fname);
    else
        snprintf(a.path, sizeof a.path, "%s", name);
    char dir[PATH_BYTES];
    snprintf(dir, sizeof dir, "%s", a.path);
    char *slash = strrchr(dir, '/');
    const char *nopre = getenv("TPROF_CUDNN_NO_PRELOAD"); /* diagnostic: let cuDNN find its engines alone */
    if (nopre && nopre[0] && strcmp(nopre, "0") != 0) {
        snprintf(a.preloaded, sizeof a.preloaded, "none: TPROF_CUDNN_NO_PRELOAD set");
    } else if (slash) {
        *slash = '\0';
        preload_engines(dir, a.preloaded, sizeof a.preloaded);
    }
    a.lib = h;
    a.version = a.get_version();
    g_api = a;
    if (a.version < SDPA_MIN_VERSION) {
        g_api.ok = 0;
        g_api.why[0] = '\0'; /* a message, truncated if the path is very long */
        appendf(g_api.why, sizeof g_api.why, "cuDNN %zu.%zu.%zu at %s is older than 9.13.1, the first with the "
                "SDPA forward operation (TPROF_CUDNN_LIB can name a newer one: a file or its directory)", a.version / 10000,
                a.version % 10000 / 100, a.version % 100, a.path);
        return 1; /* found, but unusable: stop searching (a second copy of the same sonames would clash) */
    }
    g_api.ok = 1;
    g_api.why[0] = '\0';
    return 1;
}

/* Tries dir/libcudnn_graph.so.9, then dir/libcudnn.so.9. */
static int try_dir(const char *dir) {
    static const char *const names[] = {"libcudnn_graph.so.9", "libcudnn.so.9"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[PATH_BYTES];
        if (join(p, dir, names[i]) && try_lib(p)) return 1;
    }
    return 0;
}

static void load_once(void) {
    memset(&g_api, 0, sizeof g_api);
    /* 1. TPROF_CUDNN_LIB: a file or a directory */
    const char *env = getenv("TPROF_CUDNN_LIB");
    if (env && env[0]) {
        if (is_dir(env) ? try_dir(env) : is_file(env) ? try_lib(env) : 0) return;
        appendf(g_api.why, sizeof g_api.why, "TPROF_CUDNN_LIB=%s: %s; ", env,
                is_dir(env) ? "no usable libcudnn_graph.so.9 or libcudnn.so.9 there"
                            : is_file(env) ? "not loadable" : "no such file or directory");
    } else {
        appendf(g_api.why, sizeof g_api.why, "TPROF_CUDNN_LIB unset; ");
    }
    /* 2. the dynamic loader's path */
    if (try_lib("libcudnn_graph.so.9") || try_lib("libcudnn.so.9")) return;
    /* 3. nvidia/cudnn/lib under Python package directories found at run time */
    char pats[8][PATH_BYTES];
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
                char d[PATH_BYTES];
                if (!join(d, g.gl_pathv[k], "nvidia/cudnn/lib") || !is_dir(d)) continue;
                if (try_dir(d)) {
                    globfree(&g);
                    return;
                }
                appendf(g_api.why, sizeof g_api.why, "%s: no usable libcudnn_graph.so.9; ", d);
            }
        }
        globfree(&g);
    }
    appendf(g_api.why, sizeof g_api.why,
            "no nvidia/cudnn/lib in %d Python package directories (/opt/*/.venv, /opt/*/venv, /opt/*, "
            "$VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local/lib/python3*, /usr/lib/python3*)",
            n_pkg_dirs);
}

/* The loaded table, or NULL with *why set. */
static const cudnn_api *api_get(const char **why) {
    pthread_once(&g_once, load_once);
    if (!g_api.ok) {
        *why = g_api.why;
        return NULL;
    }
    return &g_api;
}

int tp_sdpa_cudnn_available(char *msg, size_t n) {
    const char *why = NULL;
    const cudnn_api *a = api_get(&why);
    if (msg && n) {
        if (a)
            snprintf(msg, n, "cuDNN %zu.%zu.%zu from %s (preloaded: %s)", a->version / 10000,
                     a->version % 10000 / 100, a->version % 100, a->path, a->preloaded[0] ? a->preloaded : "none");
        else
            snprintf(msg, n, "cuDNN not loaded: %s", why);
    }
    return a != NULL;
}

/* ---- the plan ------------------------------------------------------------------------------------------------ */

enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_SCALE, N_TENSORS = 5 };
#define SDPA_ALIGN 16

struct tp_sdpa {
    const cudnn_api *api;
    cudnnHandle_t handle;
    cudnnBackendDescriptor_t tensors[N_TENSORS], op, graph, heur, cfg, plan;
    cudnnBackendDescriptor_t vpack; /* the last variant pack, for the pointers below */
    const void *vp_qkv;
    void *vp_out, *vp_ws;
    int B, T, H, D;
    tp_dtype dt;
    float scale; /* the by-value scale's storage: its address is in the variant pack */
    size_t ws_bytes;
    int64_t engine;
    char desc[320];
};

/* The cuDNN status, its name, and cuDNN's last error message when it has one, into buf. */
static const char *status_text(const cudnn_api *a, cudnnStatus_t st, char *buf, size_t n) {
    char last[256] = "";
    if (a->last_error) a->last_error(last, sizeof last);
    for (char *c = last; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    snprintf(buf, n, "%s (%d)%s%s", a->error_string(st), (int)st, last[0] ? ": " : "", last);
    return buf;
}

/* Shape or type refused: the NOT_SUPPORTED and BAD_PARAM families (cuDNN reports unsupported layouts and shapes
 * with either while finalizing); allocation failures are OOM; everything else is a library failure. */
static tp_status classify(cudnnStatus_t st) {
    const int cat = (int)st / 1000 * 1000;
    if (st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        return TP_ERR_OOM;
    if (cat == CUDNN_STATUS_NOT_SUPPORTED || cat == CUDNN_STATUS_BAD_PARAM) return TP_ERR_UNSUPPORTED;
    return TP_ERR_CUDA;
}

static cudnnStatus_t make_tensor(const cudnn_api *a, cudnnBackendDescriptor_t *t, int64_t uid,
                                 cudnnDataType_t type, const int64_t dims[4], const int64_t strides[4],
                                 int64_t align, bool by_value) {
    cudnnStatus_t st = a->create_desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t);
    if (st) return st;
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type))) return st;
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims))) return st;
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides))) return st;
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid))) return st;
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align))) return st;
    if (by_value && (st = a->set_attr(*t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value)))
        return st;
    return a->finalize(*t);
}

/* Engine index, knob choices and behaviour notes of cfg, for tp_sdpa_describe (best effort: failures leave
 * the fields out). */
static void describe_cfg(tp_sdpa *s, int rank, int n_cfgs) {
    const cudnn_api *a = s->api;
    char knobs[160] = "", notes[64] = "";
    s->engine = -1;
    cudnnBackendDescriptor_t eng = NULL;
    int64_t got = 0;
    if (a->create_desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) == CUDNN_STATUS_SUCCESS) {
        if (a->get_attr(s->cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &eng) == 0 &&
            got == 1) {
            int64_t idx = -1;
            if (a->get_attr(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &idx) == 0) s->engine = idx;
            cudnnBackendBehaviorNote_t bn[8];
            if (a->get_attr(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 8, &got, bn) == 0)
                for (int64_t i = 0; i < got && i < 8; i++) {
                    if (bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) appendf(notes, sizeof notes, ", runtime-compiled");
                    if (bn[i] == CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API)
                        appendf(notes, sizeof notes, ", native-graph-API");
                }
        }
        a->destroy_desc(eng);
    }
    enum { MAX_KNOBS = CUDNN_KNOB_TYPE_COUNTS };
    cudnnBackendDescriptor_t kc[MAX_KNOBS];
    int made = 0;
    for (; made < MAX_KNOBS; made++)
        if (a->create_desc(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &kc[made]) != CUDNN_STATUS_SUCCESS) break;
    if (made == MAX_KNOBS &&
        a->get_attr(s->cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_KNOBS, &got, kc) == 0)
        for (int64_t i = 0; i < got && i < MAX_KNOBS; i++) {
            cudnnBackendKnobType_t type;
            int64_t value = 0, g1 = 0, g2 = 0;
            if (a->get_attr(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &g1, &type) == 0 &&
                a->get_attr(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &g2, &value) == 0)
                appendf(knobs, sizeof knobs, " k%d=%lld", (int)type, (long long)value);
        }
    for (int i = 0; i < made; i++) a->destroy_desc(kc[i]);
    s->desc[0] = '\0';
    appendf(s->desc, sizeof s->desc,
             "cuDNN %zu.%zu.%zu SDPA fwd, engine %lld (heuristic A choice %d of %d%s; knobs%s), workspace %zu B",
             a->version / 10000, a->version % 10000 / 100, a->version % 100, (long long)s->engine, rank, n_cfgs,
             notes, knobs[0] ? knobs : " none", s->ws_bytes);
}

void tp_sdpa_destroy(tp_sdpa *s) {
    if (!s) return;
    const cudnn_api *a = s->api;
    cudnnBackendDescriptor_t all[] = {s->vpack, s->plan, s->cfg, s->heur, s->graph, s->op};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) a->destroy_desc(all[i]);
    for (int i = 0; i < N_TENSORS; i++)
        if (s->tensors[i]) a->destroy_desc(s->tensors[i]);
    if (s->handle) a->destroy(s->handle);
    free(s);
}

tp_status tp_sdpa_create(int B, int T, int H, int D, tp_dtype dt, float scale, tp_sdpa **out, tp_error *err) {
    if (!out) return tp_fail(err, TP_ERR_ARG, "cuDNN SDPA: out is NULL");
    *out = NULL;
    if (B < 1 || T < 1 || H < 1 || D < 1)
        return tp_fail(err, TP_ERR_ARG, "cuDNN SDPA: B=%d T=%d H=%d D=%d: every dimension must be >= 1", B, T, H, D);
    if (dt != TP_F16 && dt != TP_BF16) {
        const tp_dtype_traits *tr = tp_dtype_info(dt);
        return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: dtype %s: only f16 and bf16 are supported",
                       tr ? tr->name : "(invalid)");
    }
    /* cuDNN's engines assume a positive scale: on an H200, cuDNN 9.14.0 (engine 5) and 9.19.0 (engine 9) returned
     * an all-NaN output, every call succeeding, for a scale of -D^-0.5 and for 0 (test_gpu_sdpa.c). Refused here
     * rather than returned as NaN. */
    if (!(scale > 0.0f) || !isfinite(scale))
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "cuDNN SDPA: scale %g: only finite scales > 0 are supported (cuDNN's engines return NaN for "
                       "zero and negative ones)",
                       (double)scale);
    /* K and V start H D elements into qkv, and every tensor is declared 16-byte aligned to cuDNN. */
    if ((size_t)H * (size_t)D * 2 % SDPA_ALIGN != 0)
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "cuDNN SDPA: H=%d D=%d: K and V start H*D*2 = %zu bytes into each qkv row, not a multiple of "
                       "%d (cuDNN's SDPA needs 16-byte aligned tensors; D a multiple of 8 always is)",
                       H, D, (size_t)H * (size_t)D * 2, SDPA_ALIGN);
    if ((int64_t)B * T * 3 * H * D > ((int64_t)1 << 40))
        return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: B=%d T=%d H=%d D=%d: qkv larger than 2^40 elements", B,
                       T, H, D);
    const char *why = NULL;
    const cudnn_api *a = api_get(&why);
    if (!a) return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: cuDNN not usable: %s", why);

    tp_sdpa *s = calloc(1, sizeof *s);
    if (!s) return tp_fail(err, TP_ERR_OOM, "cuDNN SDPA: out of host memory");
    s->api = a;
    s->B = B, s->T = T, s->H = H, s->D = D, s->dt = dt, s->scale = scale;
    char shape[96], sbuf[400];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d D=%d %s", B, T, H, D, tp_dtype_info(dt)->name);
    tp_status rc = TP_OK;
    cudnnStatus_t st = a->create(&s->handle);
    if (st) {
        rc = tp_fail(err, st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ? TP_ERR_OOM : TP_ERR_CUDA,
                     "cuDNN SDPA: cudnnCreate: %s", status_text(a, st, sbuf, sizeof sbuf));
        s->handle = NULL;
        goto fail;
    }

    /* Tensors: [B, H, T, D] views. Q, K, V read qkv (B, T, 3, H, D) in place: moving one token is 3 H D elements,
     * one head D, and K / V start H D / 2 H D elements after Q (offsets applied to the pointers at run time). */
    const cudnnDataType_t type = dt == TP_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    const int64_t b = B, h = H, t = T, d = D;
    const int64_t dims[4] = {b, h, t, d};
    const int64_t qkv_strides[4] = {t * 3 * h * d, d, 3 * h * d, 1};
    const int64_t o_strides[4] = {t * h * d, d, h * d, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    const struct {
        int64_t uid;
        const int64_t *strides;
    } tv[4] = {{UID_Q, qkv_strides}, {UID_K, qkv_strides}, {UID_V, qkv_strides}, {UID_O, o_strides}};
    for (int i = 0; i < 4; i++)
        if ((st = make_tensor(a, &s->tensors[i], tv[i].uid, type, dims, tv[i].strides, SDPA_ALIGN, false))) {
            rc = tp_fail(err, classify(st), "cuDNN SDPA %s: tensor %d: %s", shape, i,
                         status_text(a, st, sbuf, sizeof sbuf));
            goto fail;
        }
    if ((st = make_tensor(a, &s->tensors[4], UID_SCALE, CUDNN_DATA_FLOAT, one, one, sizeof(float), true))) {
        rc = tp_fail(err, classify(st), "cuDNN SDPA %s: scale tensor: %s", shape, status_text(a, st, sbuf, sizeof sbuf));
        goto fail;
    }

    /* The operation: Q, K, V, O and the scale; no stats (inference), no masks. */
    static const cudnnBackendAttributeName_t slots[N_TENSORS] = {
        CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC,
        CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC};
    if ((st = a->create_desc(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, &s->op))) goto fail_op;
    for (int i = 0; i < N_TENSORS; i++)
        if ((st = a->set_attr(s->op, slots[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &s->tensors[i]))) goto fail_op;
    if ((st = a->finalize(s->op))) goto fail_op;

    /* The graph. OPERATIONGRAPH_HANDLE is marked deprecated in 9.19's header (for device-less compilation) but
     * is still what cudnn-frontend sets when it has a handle, and the graph has no other way to learn the device. */
    if ((st = a->create_desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &s->graph))) goto fail_graph;
    if ((st = a->set_attr(s->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle)))
        goto fail_graph;
    if ((st = a->set_attr(s->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &s->op)))
        goto fail_graph;
    if ((st = a->finalize(s->graph))) goto fail_graph;

    /* Heuristics, mode A: the ranked engine configurations for this graph on this device. */
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    if ((st = a->create_desc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &s->heur))) goto fail_heur;
    if ((st = a->set_attr(s->heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                          &s->graph)))
        goto fail_heur;
    if ((st = a->set_attr(s->heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode))) goto fail_heur;
    if ((st = a->finalize(s->heur))) goto fail_heur;
    int64_t n_cfg = 0;
    if ((st = a->get_attr(s->heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n_cfg, NULL)))
        goto fail_heur;
    if (n_cfg <= 0) {
        rc = tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA %s: the heuristic offers no engine for this graph", shape);
        goto fail;
    }
    if (n_cfg > 64) n_cfg = 64;
    cudnnBackendDescriptor_t cfgs[64];
    int64_t made = 0;
    for (; made < n_cfg; made++)
        if ((st = a->create_desc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made]))) break;
    int64_t got = 0;
    if (made == n_cfg)
        st = a->get_attr(s->heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_cfg, &got, cfgs);
    if (st) {
        for (int64_t i = 0; i < made; i++) a->destroy_desc(cfgs[i]);
        goto fail_heur;
    }

    /* The first configuration whose execution plan finalizes (later ones are fallbacks for when it does not). */
    int chosen = -1;
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    char last_text[400] = "";
    for (int64_t i = 0; i < got && chosen < 0; i++) {
        cudnnBackendDescriptor_t plan = NULL;
        st = a->create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
        if (!st) st = a->set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle);
        if (!st) st = a->set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (!st) st = a->finalize(plan);
        if (st) {
            last = st;
            status_text(a, st, last_text, sizeof last_text);
            if (plan) a->destroy_desc(plan);
            continue;
        }
        chosen = (int)i;
        s->plan = plan;
        s->cfg = cfgs[i];
    }
    for (int64_t i = 0; i < made; i++)
        if (i != chosen) a->destroy_desc(cfgs[i]);
    if (chosen < 0) {
        rc = tp_fail(err, classify(last) == TP_ERR_CUDA ? TP_ERR_CUDA : TP_ERR_UNSUPPORTED,
                     "cuDNN SDPA %s: none of the heuristic's %lld engine configurations finalizes; last: %s", shape,
                     (long long)got, last_text);
        goto fail;
    }
    int64_t ws = 0;
    if ((st = a->get_attr(s->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws))) {
        rc = tp_fail(err, TP_ERR_CUDA, "cuDNN SDPA %s: workspace size: %s", shape, status_text(a, st, sbuf, sizeof sbuf));
        goto fail;
    }
    s->ws_bytes = ws > 0 ? (size_t)ws : 0;
    describe_cfg(s, chosen, (int)n_cfg);
    *out = s;
    return TP_OK;

fail_op:
    rc = tp_fail(err, classify(st), "cuDNN SDPA %s: the SDPA forward operation: %s", shape,
                 status_text(a, st, sbuf, sizeof sbuf));
    goto fail;
fail_graph:
    rc = tp_fail(err, classify(st), "cuDNN SDPA %s: the operation graph: %s", shape,
                 status_text(a, st, sbuf, sizeof sbuf));
    goto fail;
fail_heur:
    rc = tp_fail(err, classify(st), "cuDNN SDPA %s: the engine heuristic: %s", shape,
                 status_text(a, st, sbuf, sizeof sbuf));
fail:
    tp_sdpa_destroy(s);
    return rc;
}

size_t tp_sdpa_workspace_bytes(const tp_sdpa *s) { return s ? s->ws_bytes : 0; }

const char *tp_sdpa_describe(const tp_sdpa *s) { return s ? s->desc : "(no cuDNN SDPA plan)"; }

/* Builds the variant pack for these pointers (host-only work: no GPU call, safe during stream capture). */
static cudnnStatus_t build_vpack(tp_sdpa *s, const void *qkv, void *out, void *ws) {
    const cudnn_api *a = s->api;
    if (s->vpack) a->destroy_desc(s->vpack);
    s->vpack = NULL;
    s->vp_qkv = NULL; /* invalid until the new one is finalized */
    const size_t hd_bytes = (size_t)s->H * (size_t)s->D * tp_dtype_info(s->dt)->bytes;
    const char *base = qkv;
    void *ptrs[N_TENSORS] = {(void *)base, (void *)(base + hd_bytes), (void *)(base + 2 * hd_bytes), out, &s->scale};
    static const int64_t uids[N_TENSORS] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE};
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t st = a->create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (!st) st = a->set_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, N_TENSORS, uids);
    if (!st) st = a->set_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, N_TENSORS, ptrs);
    if (!st) st = a->set_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!st) st = a->finalize(vp);
    if (st) {
        if (vp) a->destroy_desc(vp);
        return st;
    }
    s->vpack = vp;
    s->vp_qkv = qkv, s->vp_out = out, s->vp_ws = ws;
    return CUDNN_STATUS_SUCCESS;
}

int tp_sdpa_run(tp_sdpa *s, const void *qkv, void *out, void *workspace, tp_stream stream) {
    if (!s || !qkv || !out || ((uintptr_t)qkv | (uintptr_t)out | (uintptr_t)workspace) % SDPA_ALIGN != 0 ||
        (s->ws_bytes > 0 && !workspace))
        return (int)CUDNN_STATUS_BAD_PARAM;
    const cudnn_api *a = s->api;
    /* cudnnSetStream only records the stream in the handle (no GPU work), so it is capture-safe. */
    cudnnStatus_t st = a->set_stream(s->handle, (cudaStream_t)stream);
    if (st) return (int)st;
    if (!s->vpack || s->vp_qkv != qkv || s->vp_out != out || s->vp_ws != workspace) {
        st = build_vpack(s, qkv, out, workspace);
        if (st) return (int)st;
    }
    return (int)a->execute(s->handle, s->plan, s->vpack);
}

#endif /* TP_HAVE_CUDNN_HEADERS */
