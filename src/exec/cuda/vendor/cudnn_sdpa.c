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

#include "exec/cuda/vendor/cudnn_sdpa.h"

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

/* ---- builds without usable cuDNN headers: every call refuses, naming why ----------------------------------------- */

#if defined(CUDNN_MAJOR) && defined(CUDNN_MINOR)
#define TP_SDPA_STR2(x) #x
#define TP_SDPA_STR(x) TP_SDPA_STR2(x)
#define TP_SDPA_NO_CUDNN_WHY                                                                                          \
    "cuDNN headers at build time are version " TP_SDPA_STR(CUDNN_MAJOR) "." TP_SDPA_STR(CUDNN_MINOR)              \
    ", older than 9.13"
#else
#define TP_SDPA_NO_CUDNN_WHY "cuDNN headers not found at build time (cudnn_graph.h, cudnn_version.h)"
#endif

tp_status tp_sdpa_create(int B, int T, int H, int D, tp_dtype dt, float scale, tp_sdpa **out, tp_error *err) {
    (void)B, (void)T, (void)H, (void)D, (void)dt, (void)scale;
    if (out) *out = NULL;
    return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: %s: this build cannot use cuDNN", TP_SDPA_NO_CUDNN_WHY);
}
size_t tp_sdpa_workspace_bytes(const tp_sdpa *s) {
    (void)s;
    return 0;
}
int tp_sdpa_run(tp_sdpa *s, const void *qkv, void *out, void *workspace, tp_stream stream) {
    (void)s, (void)qkv, (void)out, (void)workspace, (void)stream;
    return 3000; /* CUDNN_STATUS_NOT_SUPPORTED */
}
tp_status tp_sdpa_create_ex(const tp_sdpa_desc *d, tp_sdpa **out, tp_error *err) {
    (void)d;
    if (out) *out = NULL;
    return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: %s: this build cannot use cuDNN", TP_SDPA_NO_CUDNN_WHY);
}
int tp_sdpa_run_ex(tp_sdpa *s, const void *q, const void *k, const void *v, void *o, void *workspace,
                   tp_stream stream) {
    (void)s, (void)q, (void)k, (void)v, (void)o, (void)workspace, (void)stream;
    return 3000; /* CUDNN_STATUS_NOT_SUPPORTED */
}
const char *tp_sdpa_describe(const tp_sdpa *s) {
    (void)s;
    return "cuDNN SDPA unavailable: " TP_SDPA_NO_CUDNN_WHY;
}
int tp_sdpa_cudnn_available(char *msg, size_t n) {
    if (msg && n) snprintf(msg, n, "%s", TP_SDPA_NO_CUDNN_WHY);
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

#include "exec/cuda/vendor/vendor_lib.h"
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

#define appendf tp_vendor_appendf
#define is_file tp_vendor_is_file

/* out = dir + "/" + name; 0 when it does not fit (the path is then skipped, never truncated and tried). */
static int join(char out[PATH_BYTES], const char *dir, const char *name) {
    const int k = snprintf(out, PATH_BYTES, "%s/%s", dir, name);
    return k > 0 && k < PATH_BYTES;
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

static int try_found(const char *name, void *user, char *why, size_t n) {
    (void)user, (void)why, (void)n; /* try_lib appends its reasons to g_api.why, the search's buffer */
    return try_lib(name);
}

/* vendor_lib.h's search: TPROF_CUDNN_LIB, the loader's path, nvidia/cudnn/lib in Python package directories; in
 * each place libcudnn_graph.so.9, then libcudnn.so.9 */
static void load_once(void) {
    memset(&g_api, 0, sizeof g_api);
    static const char *const names[] = {"libcudnn_graph.so.9", "libcudnn.so.9"};
    static const char *const subdirs[] = {"nvidia/cudnn/lib"};
    tp_vendor_find("TPROF_CUDNN_LIB", names, 2, subdirs, 1, try_found, NULL, g_api.why, sizeof g_api.why);
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

/* Unique ids: the non-virtual tensors (in the variant pack), then the composite graph's virtual ones. */
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_SCALE, UID_NEG_INF, UID_SQ, UID_SKV, UID_VIRTUAL = 100 };
enum { MAX_TENSORS = 24, MAX_OPS = 16 };
#define SDPA_ALIGN 16

struct tp_sdpa {
    const cudnn_api *api;
    cudnnHandle_t handle;
    tp_sdpa_desc d;
    int composite; /* 1: the composite (causal) graph; 0: the unified SDPA_FWD operation */
    cudnnBackendDescriptor_t tensors[MAX_TENSORS];
    int n_tensors;
    cudnnBackendDescriptor_t ops[MAX_OPS], op_descs[MAX_OPS]; /* operations and their pointwise/matmul/reduction
                                                                  descriptors */
    int n_ops;
    cudnnBackendDescriptor_t graph, heur, cfg, plan;
    cudnnBackendDescriptor_t vpack; /* the last variant pack, for the pointers below */
    const void *vp_q, *vp_k, *vp_v;
    void *vp_o, *vp_ws;
    float scale, neg_inf; /* by-value scalars: their addresses are in the variant pack */
    int32_t s_q, s_kv;
    size_t ws_bytes;
    int64_t engine;
    char desc[400];
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

/* A finalized 4-d tensor descriptor, kept in s->tensors (released with the plan); *t receives it. */
static cudnnStatus_t add_tensor(tp_sdpa *s, cudnnBackendDescriptor_t *t, int64_t uid, cudnnDataType_t type,
                                const int64_t dims[4], const int64_t strides[4], int64_t align, bool by_value,
                                bool is_virtual) {
    const cudnn_api *a = s->api;
    if (s->n_tensors >= MAX_TENSORS) return CUDNN_STATUS_INTERNAL_ERROR;
    cudnnStatus_t st = a->create_desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &s->tensors[s->n_tensors]);
    if (st) return st;
    *t = s->tensors[s->n_tensors++];
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type))) return st;
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims))) return st;
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides))) return st;
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid))) return st;
    if ((st = a->set_attr(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align))) return st;
    if (by_value && (st = a->set_attr(*t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value)))
        return st;
    if (is_virtual && (st = a->set_attr(*t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual)))
        return st;
    return a->finalize(*t);
}

/* Reserves the next operation slot: its operation descriptor (type op_type) and, when desc_type is not 0, its
 * mode descriptor (pointwise, matmul or reduction). */
static cudnnStatus_t new_op(tp_sdpa *s, cudnnBackendDescriptorType_t op_type, cudnnBackendDescriptorType_t desc_type,
                            cudnnBackendDescriptor_t *op, cudnnBackendDescriptor_t *desc) {
    const cudnn_api *a = s->api;
    if (s->n_ops >= MAX_OPS) return CUDNN_STATUS_INTERNAL_ERROR;
    const int i = s->n_ops++;
    cudnnStatus_t st = a->create_desc(desc_type, &s->op_descs[i]);
    if (!st) st = a->create_desc(op_type, &s->ops[i]);
    *op = s->ops[i], *desc = s->op_descs[i];
    return st;
}

/* y = mode(x [, b [, t]]) elementwise, computed in prec; GEN_INDEX takes axis (else ignored). */
static cudnnStatus_t add_pointwise(tp_sdpa *s, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                                   cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                   cudnnBackendDescriptor_t y) {
    const cudnn_api *a = s->api;
    cudnnBackendDescriptor_t op = NULL, pw = NULL;
    cudnnStatus_t st =
        new_op(s, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &op, &pw);
    if (st) return st;
    if ((st = a->set_attr(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode))) return st;
    if ((st = a->set_attr(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec))) return st;
    if (mode == CUDNN_POINTWISE_GEN_INDEX &&
        (st = a->set_attr(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis)))
        return st;
    if ((st = a->finalize(pw))) return st;
    const float one = 1.0f;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw)))
        return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x))) return st;
    if (b && (st = a->set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b)))
        return st;
    if (t && (st = a->set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t)))
        return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y))) return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one))) return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one))) return st;
    return a->finalize(op);
}

/* c = a_ @ b (batched over the leading two dims, the head dim of b broadcast for grouped-query attention), fp32
 * accumulation. */
static cudnnStatus_t add_matmul(tp_sdpa *s, cudnnBackendDescriptor_t a_, cudnnBackendDescriptor_t b,
                                cudnnBackendDescriptor_t c) {
    const cudnn_api *a = s->api;
    cudnnBackendDescriptor_t op = NULL, mm = NULL;
    cudnnStatus_t st = new_op(s, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &op, &mm);
    if (st) return st;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    if ((st = a->set_attr(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32))) return st;
    if ((st = a->finalize(mm))) return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a_))) return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b))) return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c))) return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm))) return st;
    return a->finalize(op);
}

/* y = reduce(x) over the last dim (MAX or ADD), fp32. */
static cudnnStatus_t add_reduction(tp_sdpa *s, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                                   cudnnBackendDescriptor_t y) {
    const cudnn_api *a = s->api;
    cudnnBackendDescriptor_t op = NULL, rd = NULL;
    cudnnStatus_t st =
        new_op(s, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &op, &rd);
    if (st) return st;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    if ((st = a->set_attr(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32))) return st;
    if ((st = a->set_attr(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode))) return st;
    if ((st = a->finalize(rd))) return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd))) return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x))) return st;
    if ((st = a->set_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y))) return st;
    return a->finalize(op);
}

/* The I/O tensors both graphs share: Q [B, H, Tq, D], K [B, Hkv, Tkv, D] (or its transpose [B, Hkv, D, Tkv], the
 * composite graph's matmul operand), V [B, Hkv, Tkv, D], O [B, H, Tq, D], as strided views of the caller's
 * buffers (head stride D), and the by-value attention scale. */
static cudnnStatus_t add_io(tp_sdpa *s, cudnnDataType_t type, bool k_transposed, cudnnBackendDescriptor_t io[5]) {
    const tp_sdpa_desc *d = &s->d;
    const int64_t B = d->B, H = d->H, Hkv = d->Hkv, Tq = d->Tq, Tkv = d->Tkv, D = d->D;
    const int64_t qd[4] = {B, H, Tq, D}, qs[4] = {d->q_batch_stride, D, d->q_row_stride, 1};
    const int64_t kd[4] = {B, Hkv, Tkv, D}, ks[4] = {d->k_batch_stride, D, d->k_row_stride, 1};
    const int64_t ktd[4] = {B, Hkv, D, Tkv}, kts[4] = {d->k_batch_stride, D, 1, d->k_row_stride};
    const int64_t vd[4] = {B, Hkv, Tkv, D}, vs[4] = {d->v_batch_stride, D, d->v_row_stride, 1};
    const int64_t os[4] = {d->o_batch_stride, D, d->o_row_stride, 1}, one[4] = {1, 1, 1, 1};
    cudnnStatus_t st;
    if ((st = add_tensor(s, &io[0], UID_Q, type, qd, qs, SDPA_ALIGN, false, false))) return st;
    if ((st = add_tensor(s, &io[1], UID_K, type, k_transposed ? ktd : kd, k_transposed ? kts : ks, SDPA_ALIGN, false,
                         false)))
        return st;
    if ((st = add_tensor(s, &io[2], UID_V, type, vd, vs, SDPA_ALIGN, false, false))) return st;
    if ((st = add_tensor(s, &io[3], UID_O, type, qd, os, SDPA_ALIGN, false, false))) return st;
    return add_tensor(s, &io[4], UID_SCALE, CUDNN_DATA_FLOAT, one, one, sizeof(float), true, false);
}

/* The unified operation (cuDNN >= 9.13.1): Q, K, V, O and the scale; no stats (inference), no masks. */
static cudnnStatus_t build_unified(tp_sdpa *s, cudnnDataType_t type) {
    const cudnn_api *a = s->api;
    cudnnBackendDescriptor_t io[5], op = NULL, unused = NULL;
    cudnnStatus_t st = add_io(s, type, false, io);
    if (st) return st;
    (void)unused;
    if (s->n_ops >= MAX_OPS) return CUDNN_STATUS_INTERNAL_ERROR;
    if ((st = a->create_desc(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, &s->ops[s->n_ops]))) return st;
    op = s->ops[s->n_ops++];
    static const cudnnBackendAttributeName_t slots[5] = {
        CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC,
        CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC};
    for (int i = 0; i < 5; i++)
        if ((st = a->set_attr(op, slots[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &io[i]))) return st;
    return a->finalize(op);
}

/* The composite graph cudnn-frontend's CompositeSDPANode builds for a bottom-right causal mask with fixed
 * sequence lengths (cuDNN < 9.21, whose unified operation takes no mask), in the same order:
 *   S = Q @ K^T; S1 = S * scale;
 *   row = gen_index(S1, axis 2); col = gen_index(S1, axis 3); row' = row + Tkv - Tq (two int32 ops, ADD then SUB,
 *   by-value scalars); keep = row' >= col; S2 = keep ? S1 : -inf (binary select);
 *   softmax: m = max_j S2; E = exp(S2 - m); l = sum_j E; stats = m + log(l) (virtual: the frontend builds it for
 *   inference too); P = E / l in the I/O type;
 *   O = P @ V.
 * Virtual tensors are fp32 [B, H, Tq, Tkv] (row-major), [B, H, Tq, 1] for the row statistics, int32/boolean for
 * the mask. */
static cudnnStatus_t build_composite(tp_sdpa *s, cudnnDataType_t type) {
    const tp_sdpa_desc *d = &s->d;
    cudnnBackendDescriptor_t io[5];
    cudnnStatus_t st = add_io(s, type, true, io);
    if (st) return st;
    const int64_t B = d->B, H = d->H, Tq = d->Tq, Tkv = d->Tkv;
    const int64_t sd[4] = {B, H, Tq, Tkv}, ss[4] = {H * Tq * Tkv, Tq * Tkv, Tkv, 1};
    const int64_t rd[4] = {B, H, Tq, 1}, rs[4] = {H * Tq, Tq, 1, 1}, one[4] = {1, 1, 1, 1};
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, bl = CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t neg_inf, sq, skv, S, S1, row, col, row1, row2, keep, S2, m, sub, E, l, lg, stats, P;
    int64_t uid = UID_VIRTUAL;
    if ((st = add_tensor(s, &neg_inf, UID_NEG_INF, f32, one, one, sizeof(float), true, false))) return st;
    if ((st = add_tensor(s, &sq, UID_SQ, i32, one, one, sizeof(int32_t), true, false))) return st;
    if ((st = add_tensor(s, &skv, UID_SKV, i32, one, one, sizeof(int32_t), true, false))) return st;
#define VT(t, type_, dims, strides)                                                                                    \
    if ((st = add_tensor(s, &t, uid++, type_, dims, strides, SDPA_ALIGN, false, true))) return st
    VT(S, f32, sd, ss);
    VT(S1, f32, sd, ss);
    VT(row, i32, sd, ss);
    VT(col, i32, sd, ss);
    VT(row1, i32, sd, ss);
    VT(row2, i32, sd, ss);
    VT(keep, bl, sd, ss);
    VT(S2, f32, sd, ss);
    VT(m, f32, rd, rs);
    VT(sub, f32, sd, ss);
    VT(E, f32, sd, ss);
    VT(l, f32, rd, rs);
    VT(lg, f32, rd, rs);
    VT(stats, f32, rd, rs);
    VT(P, type, sd, ss);
#undef VT
    if ((st = add_matmul(s, io[0], io[1], S))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_MUL, f32, 0, S, io[4], NULL, S1))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_GEN_INDEX, f32, 2, S1, NULL, NULL, row))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_GEN_INDEX, f32, 3, S1, NULL, NULL, col))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_ADD, i32, 0, row, skv, NULL, row1))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_SUB, i32, 0, row1, sq, NULL, row2))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_CMP_GE, bl, 0, row2, col, NULL, keep))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_BINARY_SELECT, f32, 0, S1, neg_inf, keep, S2))) return st;
    if ((st = add_reduction(s, CUDNN_REDUCE_TENSOR_MAX, S2, m))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_SUB, f32, 0, S2, m, NULL, sub))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_EXP, f32, 0, sub, NULL, NULL, E))) return st;
    if ((st = add_reduction(s, CUDNN_REDUCE_TENSOR_ADD, E, l))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_LOG, f32, 0, l, NULL, NULL, lg))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_ADD, f32, 0, m, lg, NULL, stats))) return st;
    if ((st = add_pointwise(s, CUDNN_POINTWISE_DIV, f32, 0, E, l, NULL, P))) return st;
    return add_matmul(s, P, io[2], io[3]);
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
            "cuDNN %zu.%zu.%zu SDPA fwd (%s), engine %lld (heuristic A choice %d of %d%s; knobs%s), workspace %zu B",
            a->version / 10000, a->version % 10000 / 100, a->version % 100,
            s->composite  ? "composite graph, bottom-right causal"
            : s->d.causal ? "unified op; causal with Tq = 1 "
                            "masks nothing"
                          : "unified op",
            (long long)s->engine, rank, n_cfgs, notes, knobs[0] ? knobs : " none", s->ws_bytes);
}

void tp_sdpa_destroy(tp_sdpa *s) {
    if (!s) return;
    const cudnn_api *a = s->api;
    cudnnBackendDescriptor_t all[] = {s->vpack, s->plan, s->cfg, s->heur, s->graph};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) a->destroy_desc(all[i]);
    for (int i = 0; i < s->n_ops; i++) {
        if (s->ops[i]) a->destroy_desc(s->ops[i]);
        if (s->op_descs[i]) a->destroy_desc(s->op_descs[i]);
    }
    for (int i = 0; i < s->n_tensors; i++)
        if (s->tensors[i]) a->destroy_desc(s->tensors[i]);
    if (s->handle) a->destroy(s->handle);
    free(s);
}

tp_status tp_sdpa_create_ex(const tp_sdpa_desc *d, tp_sdpa **out, tp_error *err) {
    if (!out) return tp_fail(err, TP_ERR_ARG, "cuDNN SDPA: out is NULL");
    *out = NULL;
    if (!d) return tp_fail(err, TP_ERR_ARG, "cuDNN SDPA: the description is NULL");
    if (d->B < 1 || d->H < 1 || d->Hkv < 1 || d->Tq < 1 || d->Tkv < 1 || d->D < 1)
        return tp_fail(err, TP_ERR_ARG, "cuDNN SDPA: B=%d H=%d Hkv=%d Tq=%d Tkv=%d D=%d: every dimension must be >= 1",
                       d->B, d->H, d->Hkv, d->Tq, d->Tkv, d->D);
    if (d->H % d->Hkv != 0)
        return tp_fail(err, TP_ERR_ARG, "cuDNN SDPA: H=%d is not a multiple of Hkv=%d (grouped-query attention)", d->H,
                       d->Hkv);
    const long long strides[8] = {d->q_batch_stride, d->q_row_stride, d->k_batch_stride, d->k_row_stride,
                                  d->v_batch_stride, d->v_row_stride, d->o_batch_stride, d->o_row_stride};
    for (int i = 0; i < 8; i++)
        if (strides[i] < 0) return tp_fail(err, TP_ERR_ARG, "cuDNN SDPA: negative stride %lld", strides[i]);
    if (d->dt != TP_F16 && d->dt != TP_BF16) {
        const tp_dtype_traits *tr = tp_dtype_info(d->dt);
        return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: dtype %s: only f16 and bf16 are supported",
                       tr ? tr->name : "(invalid)");
    }
    /* cuDNN's engines assume a positive scale: on an H200, cuDNN 9.14.0 (engine 5) and 9.19.0 (engine 9) returned
     * an all-NaN output, every call succeeding, for a scale of -D^-0.5 and for 0 (test_gpu_sdpa.c). Refused here
     * rather than returned as NaN. */
    if (!(d->scale > 0.0f) || !isfinite(d->scale))
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "cuDNN SDPA: scale %g: only finite scales > 0 are supported (cuDNN's engines return NaN for "
                       "zero and negative ones)",
                       (double)d->scale);
    /* every tensor is declared 16-byte aligned: its strides must keep every row and head there */
    for (int i = 0; i < 9; i++)
        if ((i < 8 ? strides[i] : d->D) % 8 != 0)
            return tp_fail(err, TP_ERR_UNSUPPORTED,
                           "cuDNN SDPA: D=%d, strides %lld/%lld/%lld/%lld/%lld/%lld/%lld/%lld: every stride and D "
                           "must be a multiple of 8 elements (cuDNN's SDPA needs 16-byte aligned rows and heads)",
                           d->D, strides[0], strides[1], strides[2], strides[3], strides[4], strides[5], strides[6],
                           strides[7]);
    /* cudnn-frontend refuses a bottom-right causal mask with Tq > Tkv unless variable sequence lengths are given
     * (sdpa_support_surface.h: "does not support max_s_q > max_s_kv"); the rows that would see no key have no
     * softmax. tprof's kernel writes zeros there; cuDNN is not asked. */
    if (d->causal && d->Tq > d->Tkv)
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "cuDNN SDPA: causal with Tq=%d > Tkv=%d: cuDNN's bottom-right causal mask needs Tq <= Tkv "
                       "(cudnn-frontend refuses it: the first Tq - Tkv query rows would see no key)",
                       d->Tq, d->Tkv);
    const int composite = d->causal && d->Tq > 1; /* Tq = 1 bottom-right: the only query sees every key */
    if (composite && (int64_t)d->B * d->H * d->Tq * d->Tkv > ((int64_t)1 << 40))
        return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: the (virtual) score tensor has more than 2^40 elements");
    const char *why = NULL;
    const cudnn_api *a = api_get(&why);
    if (!a) return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: cuDNN not usable: %s", why);

    tp_sdpa *s = calloc(1, sizeof *s);
    if (!s) return tp_fail(err, TP_ERR_OOM, "cuDNN SDPA: out of host memory");
    s->api = a;
    s->d = *d;
    s->composite = composite;
    s->scale = d->scale, s->neg_inf = -INFINITY, s->s_q = d->Tq, s->s_kv = d->Tkv;
    char shape[160], sbuf[400];
    snprintf(shape, sizeof shape, "B=%d H=%d Hkv=%d Tq=%d Tkv=%d D=%d %s%s", d->B, d->H, d->Hkv, d->Tq, d->Tkv, d->D,
             tp_dtype_info(d->dt)->name, d->causal ? " causal" : "");
    tp_status rc = TP_OK;
    cudnnStatus_t st = a->create(&s->handle);
    if (st) {
        rc = tp_fail(err, st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ? TP_ERR_OOM : TP_ERR_CUDA,
                     "cuDNN SDPA: cudnnCreate: %s", status_text(a, st, sbuf, sizeof sbuf));
        s->handle = NULL;
        goto fail;
    }

    const cudnnDataType_t type = d->dt == TP_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    st = composite ? build_composite(s, type) : build_unified(s, type);
    if (st) {
        rc = tp_fail(err, classify(st), "cuDNN SDPA %s: building the %s: %s", shape,
                     composite ? "composite causal graph" : "SDPA forward operation",
                     status_text(a, st, sbuf, sizeof sbuf));
        goto fail;
    }

    /* The graph. OPERATIONGRAPH_HANDLE is marked deprecated in 9.19's header (for device-less compilation) but
     * is still what cudnn-frontend sets when it has a handle, and the graph has no other way to learn the device. */
    if ((st = a->create_desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &s->graph))) goto fail_graph;
    if ((st = a->set_attr(s->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle)))
        goto fail_graph;
    if ((st = a->set_attr(s->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, s->n_ops, s->ops)))
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

tp_status tp_sdpa_create(int B, int T, int H, int D, tp_dtype dt, float scale, tp_sdpa **out, tp_error *err) {
    if (!out) return tp_fail(err, TP_ERR_ARG, "cuDNN SDPA: out is NULL");
    *out = NULL;
    if (B < 1 || T < 1 || H < 1 || D < 1)
        return tp_fail(err, TP_ERR_ARG, "cuDNN SDPA: B=%d T=%d H=%d D=%d: every dimension must be >= 1", B, T, H, D);
    /* K and V start H D elements into qkv, and every tensor is declared 16-byte aligned to cuDNN. */
    if ((size_t)H * (size_t)D * 2 % SDPA_ALIGN != 0)
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "cuDNN SDPA: H=%d D=%d: K and V start H*D*2 = %zu bytes into each qkv row, not a multiple of "
                       "%d (cuDNN's SDPA needs 16-byte aligned tensors; D a multiple of 8 always is)",
                       H, D, (size_t)H * (size_t)D * 2, SDPA_ALIGN);
    if ((int64_t)B * T * 3 * H * D > ((int64_t)1 << 40))
        return tp_fail(err, TP_ERR_UNSUPPORTED, "cuDNN SDPA: B=%d T=%d H=%d D=%d: qkv larger than 2^40 elements", B, T,
                       H, D);
    tp_sdpa_desc d;
    memset(&d, 0, sizeof d);
    d.B = B, d.H = d.Hkv = H, d.Tq = d.Tkv = T, d.D = D, d.causal = 0, d.scale = scale, d.dt = dt;
    d.q_row_stride = d.k_row_stride = d.v_row_stride = 3LL * H * D;
    d.q_batch_stride = d.k_batch_stride = d.v_batch_stride = 3LL * T * H * D;
    d.o_row_stride = (long long)H * D, d.o_batch_stride = (long long)T * H * D;
    return tp_sdpa_create_ex(&d, out, err);
}

size_t tp_sdpa_workspace_bytes(const tp_sdpa *s) { return s ? s->ws_bytes : 0; }

const char *tp_sdpa_describe(const tp_sdpa *s) { return s ? s->desc : "(no cuDNN SDPA plan)"; }

/* Builds the variant pack for these pointers (host-only work: no GPU call, safe during stream capture). */
static cudnnStatus_t build_vpack(tp_sdpa *s, const void *q, const void *k, const void *v, void *o, void *ws) {
    const cudnn_api *a = s->api;
    if (s->vpack) a->destroy_desc(s->vpack);
    s->vpack = NULL;
    s->vp_q = NULL; /* invalid until the new one is finalized */
    void *ptrs[8] = {(void *)q, (void *)k, (void *)v, o, &s->scale, &s->neg_inf, &s->s_q, &s->s_kv};
    static const int64_t uids[8] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE, UID_NEG_INF, UID_SQ, UID_SKV};
    const int64_t n = s->composite ? 8 : 5;
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t st = a->create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (!st) st = a->set_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (!st) st = a->set_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (!st) st = a->set_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!st) st = a->finalize(vp);
    if (st) {
        if (vp) a->destroy_desc(vp);
        return st;
    }
    s->vpack = vp;
    s->vp_q = q, s->vp_k = k, s->vp_v = v, s->vp_o = o, s->vp_ws = ws;
    return CUDNN_STATUS_SUCCESS;
}

int tp_sdpa_run_ex(tp_sdpa *s, const void *q, const void *k, const void *v, void *o, void *workspace,
                   tp_stream stream) {
    if (!s || !q || !k || !v || !o ||
        ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)o | (uintptr_t)workspace) % SDPA_ALIGN != 0 ||
        (s->ws_bytes > 0 && !workspace))
        return (int)CUDNN_STATUS_BAD_PARAM;
    const cudnn_api *a = s->api;
    /* cudnnSetStream only records the stream in the handle (no GPU work), so it is capture-safe. */
    cudnnStatus_t st = a->set_stream(s->handle, (cudaStream_t)stream);
    if (st) return (int)st;
    if (!s->vpack || s->vp_q != q || s->vp_k != k || s->vp_v != v || s->vp_o != o || s->vp_ws != workspace) {
        st = build_vpack(s, q, k, v, o, workspace);
        if (st) return (int)st;
    }
    return (int)a->execute(s->handle, s->plan, s->vpack);
}

int tp_sdpa_run(tp_sdpa *s, const void *qkv, void *out, void *workspace, tp_stream stream) {
    if (!s || !qkv) return (int)CUDNN_STATUS_BAD_PARAM;
    const size_t hd_bytes = (size_t)s->d.H * (size_t)s->d.D * tp_dtype_info(s->d.dt)->bytes;
    const char *base = qkv;
    return tp_sdpa_run_ex(s, base, base + hd_bytes, base + 2 * hd_bytes, out, workspace, stream);
}

#endif /* TP_HAVE_CUDNN_HEADERS */
