#define _GNU_SOURCE /* dladdr */
/* sparse_cusparselt.c: cuSPARSELt's 2:4 sparse GEMMs, loaded at run time (contract in sparse_cusparselt.h). The
 * order of calls is NVIDIA's sample's (CUDALibrarySamples/cuSPARSELt/matmul): descriptors, matmul descriptor,
 * algorithm selection, plan, prune check, compression, search, matmul. */
#include "exec/cuda/vendor/sparse_cusparselt.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cuda/vendor/vendor_lib.h"
#include "formats/dtype.h"

static tp_dtype out_of(const tp_spgemm_desc *d) { return d->out_dt ? d->out_dt : d->dt; }

int tp_spgemm_supported(const tp_spgemm_desc *d, char *why, size_t n) {
    const char *r = NULL;
    char b[160];
    const int f8 = d->dt == TP_E4M3, sm = f8 ? 32 : 16, dm = f8 ? 16 : 8; /* structured, dense multiples */
    const tp_dtype o = out_of(d);
    if (d->dt != TP_F16 && d->dt != TP_BF16 && !f8) r = "cuSPARSELt runs fp16, bf16 and e4m3 here";
    else if (f8 ? (o != TP_F16 && o != TP_BF16) : o != d->dt) r = "an output type cuSPARSELt does not pair with the input's";
    else if (d->M < 1 || d->N < 1 || d->K < 1) r = "empty GEMM";
    else if (d->N % sm || d->K % sm) {
        snprintf(b, sizeof b, "the 2:4 weight (N %lld, K %lld) needs N and K multiples of %d (cuSPARSELt, %s "
                 "structured operand)", (long long)d->N, (long long)d->K, sm, f8 ? "8-bit" : "16-bit");
        r = b;
    } else if (d->M % dm) {
        snprintf(b, sizeof b, "M %lld rows: cuSPARSELt needs a multiple of %d for the dense %s operand",
                 (long long)d->M, dm, f8 ? "8-bit" : "16-bit");
        r = b;
    } else if (d->residual && d->gelu) r = "a residual and GELU in one epilogue";
    if (r && why && n) snprintf(why, n, "%s", r);
    return r == NULL;
}

#if defined(__has_include)
#if __has_include(<cusparseLt.h>)
#include <stdalign.h> /* cuSPARSELt 0.8's header uses alignas without including it (C) */
#include <cusparseLt.h>
#if CUSPARSELT_VERSION >= 800 /* the API used here (0.8's CompressedSize, Search, plans without a workspace) */
#define TP_HAVE_CUSPARSELT_HEADER 1
#endif
#endif
#endif

#ifndef TP_HAVE_CUSPARSELT_HEADER

#define NO_HEADER "cuSPARSELt's header (0.8 or newer) was not found at build time (make build fetches it: tools/fetch_wheel_headers.py cusparselt, from PyPI's nvidia-cusparselt-cu13)"
struct tp_spgemm_ctx { int unused; };
struct tp_spgemm { int unused; };
tp_status tp_spgemm_ctx_create(tp_spgemm_ctx **out, tp_error *err) {
    *out = NULL;
    return tp_fail(err, TP_ERR_UNSUPPORTED, "%s", NO_HEADER);
}
void tp_spgemm_ctx_destroy(tp_spgemm_ctx *c) { (void)c; }
tp_status tp_spgemm_create(tp_spgemm_ctx *c, const tp_spgemm_desc *d, const void *w, const void *x, const void *bias,
                           const void *residual, void *y, tp_stream stream, const char *name, tp_spgemm **out,
                           tp_error *err) {
    (void)c, (void)d, (void)w, (void)x, (void)bias, (void)residual, (void)y, (void)stream, (void)name;
    *out = NULL;
    return tp_fail(err, TP_ERR_UNSUPPORTED, "%s", NO_HEADER);
}
int tp_spgemm_run(tp_spgemm_ctx *c, const tp_spgemm *p, const void *x, const void *bias, const void *residual, void *y,
                  tp_stream stream) {
    (void)c, (void)p, (void)x, (void)bias, (void)residual, (void)y, (void)stream;
    return -1;
}
size_t tp_spgemm_weight_bytes(const tp_spgemm *p) { (void)p; return 0; }
void tp_spgemm_describe(const tp_spgemm *p, char *buf, size_t n) {
    (void)p;
    if (buf && n) buf[0] = 0;
}
void tp_spgemm_destroy(tp_spgemm *p) { (void)p; }
int tp_spgemm_available(char *msg, size_t n) {
    if (msg && n) snprintf(msg, n, "cuSPARSELt not loaded: %s", NO_HEADER);
    return 0;
}

#else /* TP_HAVE_CUSPARSELT_HEADER */

/* ---- the loaded library: filled once, read-only afterwards --------------------------------------------------- */

typedef struct {
    int ok;
    void *lib;
    int version; /* major * 1000 + minor * 100 + patch, as CUSPARSELT_VERSION */
    char path[TP_VENDOR_PATH_BYTES];
    char why[768];
    cusparseStatus_t (*init)(cusparseLtHandle_t *);
    cusparseStatus_t (*destroy)(const cusparseLtHandle_t *);
    cusparseStatus_t (*get_version)(const cusparseLtHandle_t *, int *);
    cusparseStatus_t (*get_property)(libraryPropertyType, int *);
    const char *(*error_string)(cusparseStatus_t);
    cusparseStatus_t (*dense_init)(const cusparseLtHandle_t *, cusparseLtMatDescriptor_t *, int64_t, int64_t, int64_t,
                                   uint32_t, cudaDataType, cusparseOrder_t);
    cusparseStatus_t (*structured_init)(const cusparseLtHandle_t *, cusparseLtMatDescriptor_t *, int64_t, int64_t,
                                        int64_t, uint32_t, cudaDataType, cusparseOrder_t, cusparseLtSparsity_t);
    cusparseStatus_t (*mat_destroy)(const cusparseLtMatDescriptor_t *);
    cusparseStatus_t (*matmul_init)(const cusparseLtHandle_t *, cusparseLtMatmulDescriptor_t *, cusparseOperation_t,
                                    cusparseOperation_t, const cusparseLtMatDescriptor_t *,
                                    const cusparseLtMatDescriptor_t *, const cusparseLtMatDescriptor_t *,
                                    const cusparseLtMatDescriptor_t *, cusparseComputeType);
    cusparseStatus_t (*matmul_set)(const cusparseLtHandle_t *, cusparseLtMatmulDescriptor_t *,
                                   cusparseLtMatmulDescAttribute_t, const void *, size_t);
    cusparseStatus_t (*alg_init)(const cusparseLtHandle_t *, cusparseLtMatmulAlgSelection_t *,
                                 const cusparseLtMatmulDescriptor_t *, cusparseLtMatmulAlg_t);
    cusparseStatus_t (*alg_destroy)(const cusparseLtMatmulAlgSelection_t *);
    cusparseStatus_t (*alg_get)(const cusparseLtHandle_t *, const cusparseLtMatmulAlgSelection_t *,
                                cusparseLtMatmulAlgAttribute_t, void *, size_t);
    cusparseStatus_t (*alg_set)(const cusparseLtHandle_t *, cusparseLtMatmulAlgSelection_t *,
                                cusparseLtMatmulAlgAttribute_t, const void *, size_t);
    cusparseStatus_t (*plan_init)(const cusparseLtHandle_t *, cusparseLtMatmulPlan_t *,
                                  const cusparseLtMatmulDescriptor_t *, const cusparseLtMatmulAlgSelection_t *);
    cusparseStatus_t (*plan_destroy)(const cusparseLtMatmulPlan_t *);
    cusparseStatus_t (*workspace)(const cusparseLtHandle_t *, const cusparseLtMatmulPlan_t *, size_t *);
    cusparseStatus_t (*matmul)(const cusparseLtHandle_t *, const cusparseLtMatmulPlan_t *, const void *, const void *,
                               const void *, const void *, const void *, void *, void *, cudaStream_t *, int32_t);
    cusparseStatus_t (*search)(const cusparseLtHandle_t *, cusparseLtMatmulPlan_t *, const void *, const void *,
                               const void *, const void *, const void *, void *, void *, cudaStream_t *, int32_t);
    cusparseStatus_t (*prune_check)(const cusparseLtHandle_t *, const cusparseLtMatmulDescriptor_t *, const void *,
                                    int *, cudaStream_t);
    cusparseStatus_t (*compressed_size)(const cusparseLtHandle_t *, const cusparseLtMatmulPlan_t *, size_t *, size_t *);
    cusparseStatus_t (*compress)(const cusparseLtHandle_t *, const cusparseLtMatmulPlan_t *, const void *, void *,
                                 void *, cudaStream_t);
} spl_api;

static spl_api g_api;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const char *resolve(void *h, spl_api *a) {
#define SYM(field, name)                                          \
    do {                                                          \
        *(void **)(&a->field) = dlsym(h, name);                   \
        if (!a->field) return name;                               \
    } while (0)
    SYM(init, "cusparseLtInit");
    SYM(destroy, "cusparseLtDestroy");
    SYM(get_version, "cusparseLtGetVersion");
    SYM(get_property, "cusparseLtGetProperty");
    SYM(error_string, "cusparseLtGetErrorString");
    SYM(dense_init, "cusparseLtDenseDescriptorInit");
    SYM(structured_init, "cusparseLtStructuredDescriptorInit");
    SYM(mat_destroy, "cusparseLtMatDescriptorDestroy");
    SYM(matmul_init, "cusparseLtMatmulDescriptorInit");
    SYM(matmul_set, "cusparseLtMatmulDescSetAttribute");
    SYM(alg_init, "cusparseLtMatmulAlgSelectionInit");
    SYM(alg_destroy, "cusparseLtMatmulAlgSelectionDestroy");
    SYM(alg_get, "cusparseLtMatmulAlgGetAttribute");
    SYM(alg_set, "cusparseLtMatmulAlgSetAttribute");
    SYM(plan_init, "cusparseLtMatmulPlanInit");
    SYM(plan_destroy, "cusparseLtMatmulPlanDestroy");
    SYM(workspace, "cusparseLtMatmulGetWorkspace");
    SYM(matmul, "cusparseLtMatmul");
    SYM(search, "cusparseLtMatmulSearch");
    SYM(prune_check, "cusparseLtSpMMAPruneCheck");
    SYM(compressed_size, "cusparseLtSpMMACompressedSize");
    SYM(compress, "cusparseLtSpMMACompress");
#undef SYM
    return NULL;
}

static int try_lib(const char *name, void *user, char *why, size_t n) {
    (void)user;
    dlerror();
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        tp_vendor_appendf(why, n, "%s: %s; ", name,
                          !strchr(name, '/') && e && strstr(e, "cannot open shared object") ? "not on the loader path"
                                                                                            : (e ? e : "dlopen failed"));
        return 0;
    }
    spl_api a = g_api;
    const char *missing = resolve(h, &a);
    if (missing) {
        tp_vendor_appendf(why, n, "%s: no symbol %s; ", name, missing);
        dlclose(h);
        return 0;
    }
    Dl_info info;
    memset(&info, 0, sizeof info);
    snprintf(a.path, sizeof a.path, "%s", dladdr(*(void **)(&a.init), &info) && info.dli_fname ? info.dli_fname : name);
    /* the handle, descriptors and plans are opaque blobs of the header's sizes: the library must be the header's
     * major.minor, or their layouts may differ */
    int major = -1, minor = -1, patch = -1;
    a.get_property(MAJOR_VERSION, &major);
    a.get_property(MINOR_VERSION, &minor);
    a.get_property(PATCH_LEVEL, &patch);
    a.version = major * 1000 + minor * 100 + patch;
    if (major != CUSPARSELT_VER_MAJOR || minor != CUSPARSELT_VER_MINOR) {
        tp_vendor_appendf(why, n, "%s: cuSPARSELt %d.%d.%d, built against the %d.%d header (TPROF_CUSPARSELT_LIB can "
                          "name a matching one); ", a.path, major, minor, patch, CUSPARSELT_VER_MAJOR,
                          CUSPARSELT_VER_MINOR);
        dlclose(h);
        return 0;
    }
    a.lib = h;
    a.ok = 1;
    a.why[0] = '\0';
    g_api = a;
    return 1;
}

static void load_once(void) {
    memset(&g_api, 0, sizeof g_api);
    static const char *const names[] = {"libcusparseLt.so.0"};
    static const char *const subdirs[] = {"nvidia/cusparselt/lib", "nvidia/cu13/lib"};
    tp_vendor_find("TPROF_CUSPARSELT_LIB", names, 1, subdirs, 2, try_lib, NULL, g_api.why, sizeof g_api.why);
}

static const spl_api *api_get(const char **why) {
    pthread_once(&g_once, load_once);
    if (!g_api.ok) {
        *why = g_api.why;
        return NULL;
    }
    return &g_api;
}

struct tp_spgemm_ctx {
    const spl_api *a;
    cusparseLtHandle_t h;
};

struct tp_spgemm {
    tp_spgemm_desc d;
    const spl_api *a;
    cusparseLtMatDescriptor_t ma, mb, mc;
    cusparseLtMatmulDescriptor_t mm;
    cusparseLtMatmulAlgSelection_t alg;
    cusparseLtMatmulPlan_t plan;
    int made; /* how many of ma, mb, mc, alg, plan exist: destroyed in reverse */
    void *comp, *comp_buf, *ws;
    size_t comp_bytes, ws_bytes;
    const void *bias; /* the bias pointer set on the matmul descriptor */
    float alpha;      /* the desc's (1 when it gave 0) */
    int alg_id, alg_max, split_k, split_k_mode; /* what the search kept; alg_max: how many configuration ids */
    char name[96];
};

int tp_spgemm_available(char *msg, size_t n) {
    const char *why = NULL;
    const spl_api *a = api_get(&why);
    if (msg && n) {
        if (a) snprintf(msg, n, "cuSPARSELt %d.%d.%d from %s (built against the %d.%d.%d header)", a->version / 1000,
                        a->version % 1000 / 100, a->version % 100, a->path, CUSPARSELT_VER_MAJOR, CUSPARSELT_VER_MINOR,
                        CUSPARSELT_VER_PATCH);
        else snprintf(msg, n, "cuSPARSELt not loaded: %s", why);
    }
    return a != NULL;
}

tp_status tp_spgemm_ctx_create(tp_spgemm_ctx **out, tp_error *err) {
    *out = NULL;
    const char *why = NULL;
    const spl_api *a = api_get(&why);
    if (!a) return tp_fail(err, TP_ERR_UNSUPPORTED, "cuSPARSELt not found: %s", why);
    tp_spgemm_ctx *c = calloc(1, sizeof *c);
    if (!c) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    c->a = a;
    cusparseStatus_t s = a->init(&c->h);
    if (s != CUSPARSE_STATUS_SUCCESS) {
        free(c);
        return tp_fail(err, TP_ERR_CUDA, "cusparseLtInit: %s", a->error_string(s));
    }
    *out = c;
    return TP_OK;
}

void tp_spgemm_ctx_destroy(tp_spgemm_ctx *c) {
    if (!c) return;
    c->a->destroy(&c->h);
    free(c);
}

void tp_spgemm_destroy(tp_spgemm *p) {
    if (!p) return;
    if (p->made > 4) p->a->plan_destroy(&p->plan);
    if (p->made > 3) p->a->alg_destroy(&p->alg);
    if (p->made > 2) p->a->mat_destroy(&p->mc);
    if (p->made > 1) p->a->mat_destroy(&p->mb);
    if (p->made > 0) p->a->mat_destroy(&p->ma);
    cudaFree(p->comp);
    cudaFree(p->comp_buf);
    cudaFree(p->ws);
    free(p);
}

size_t tp_spgemm_weight_bytes(const tp_spgemm *p) { return p ? p->comp_bytes : 0; }

void tp_spgemm_describe(const tp_spgemm *p, char *buf, size_t n) {
    if (!buf || !n) return;
    snprintf(buf, n, "algorithm %d of 0..%d, split-K %d%s, workspace %zu bytes", p->alg_id, p->alg_max - 1, p->split_k,
             p->split_k > 1 ? (p->split_k_mode == CUSPARSELT_SPLIT_K_MODE_TWO_KERNELS ? " (two kernels)" : " (one kernel)") : "", p->ws_bytes);
}

#define SPL(call)                                                                                              \
    do {                                                                                                       \
        cusparseStatus_t s_ = (call);                                                                          \
        if (s_ != CUSPARSE_STATUS_SUCCESS) {                                                                   \
            st = tp_fail(err, TP_ERR_CUDA, "sparse gemm %s: %s: %s", p->name, #call, a->error_string(s_));     \
            goto fail;                                                                                         \
        }                                                                                                      \
    } while (0)
#define CUDA(call)                                                                                             \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            st = tp_fail(err, e_ == cudaErrorMemoryAllocation ? TP_ERR_OOM : TP_ERR_CUDA, "sparse gemm %s: %s: %s", \
                         p->name, #call, cudaGetErrorString(e_));                                              \
            goto fail;                                                                                         \
        }                                                                                                      \
    } while (0)

tp_status tp_spgemm_create(tp_spgemm_ctx *c, const tp_spgemm_desc *d, const void *w, const void *x, const void *bias,
                           const void *residual, void *y, tp_stream stream, const char *name, tp_spgemm **out,
                           tp_error *err) {
    *out = NULL;
    char why[200];
    if (!tp_spgemm_supported(d, why, sizeof why))
        return tp_fail(err, TP_ERR_UNSUPPORTED, "sparse gemm %s: %s", name ? name : "", why);
    if (!w || !x || !y || (d->has_bias && !bias) || (d->residual && !residual))
        return tp_fail(err, TP_ERR_ARG, "sparse gemm %s: a missing device buffer", name ? name : "");
    const spl_api *a = c->a;
    tp_spgemm *p = calloc(1, sizeof *p);
    if (!p) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_status st = TP_OK;
    int *d_valid = NULL, valid = 1;
    cudaStream_t s = (cudaStream_t)stream;
    p->d = *d;
    p->a = a;
    snprintf(p->name, sizeof p->name, "%s", name ? name : "");
    const cudaDataType t = d->dt == TP_F16 ? CUDA_R_16F : d->dt == TP_BF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
    const cudaDataType to = out_of(d) == TP_F16 ? CUDA_R_16F : CUDA_R_16BF;
    p->alpha = d->alpha != 0.0f ? d->alpha : 1.0f;
    /* A = W (N, K) row-major, structured; B = x (M, K) row-major, op T; C = D = y as N x M column-major */
    SPL(a->structured_init(&c->h, &p->ma, d->N, d->K, d->K, 16, t, CUSPARSE_ORDER_ROW, CUSPARSELT_SPARSITY_50_PERCENT));
    p->made = 1;
    SPL(a->dense_init(&c->h, &p->mb, d->M, d->K, d->K, 16, t, CUSPARSE_ORDER_ROW));
    p->made = 2;
    SPL(a->dense_init(&c->h, &p->mc, d->N, d->M, d->N, 16, to, CUSPARSE_ORDER_COL));
    p->made = 3;
    SPL(a->matmul_init(&c->h, &p->mm, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_TRANSPOSE, &p->ma, &p->mb,
                       &p->mc, &p->mc, CUSPARSE_COMPUTE_32F));
    if (d->has_bias) { /* one value per row of D: per output feature */
        p->bias = bias;
        SPL(a->matmul_set(&c->h, &p->mm, CUSPARSELT_MATMUL_BIAS_POINTER, &p->bias, sizeof p->bias));
    }
    if (d->gelu) {
        const int on = 1;
        SPL(a->matmul_set(&c->h, &p->mm, CUSPARSELT_MATMUL_ACTIVATION_GELU, &on, sizeof on));
    }
    SPL(a->matmul_set(&c->h, &p->mm, CUSPARSELT_MATMUL_SPARSE_MAT_POINTER, &w, sizeof w));
    SPL(a->alg_init(&c->h, &p->alg, &p->mm, CUSPARSELT_MATMUL_ALG_DEFAULT));
    p->made = 4;
    SPL(a->alg_get(&c->h, &p->alg, CUSPARSELT_MATMUL_ALG_CONFIG_MAX_ID, &p->alg_max, sizeof p->alg_max));
    /* TPROF_SPGEMM_ALG=N (a lab switch, docs/sparsity.md): this configuration id, no search; an id the library does
     * not have is an error, not a fallback. CONFIG_MAX_ID reads as a count: cuSPARSELt 0.8.0 refuses the id equal to
     * it (an H100, 2026-11-27: bf16 21, f16 50 or 52 per shape) */
    const char *forced = getenv("TPROF_SPGEMM_ALG");
    if (forced && *forced) {
        char *end = NULL;
        const long id = strtol(forced, &end, 10);
        if (*end || id < 0 || id >= p->alg_max) {
            st = tp_fail(err, TP_ERR_ARG, "sparse gemm %s: TPROF_SPGEMM_ALG=%s: not a configuration id 0..%d",
                         p->name, forced, p->alg_max - 1);
            goto fail;
        }
        const int idv = (int)id;
        SPL(a->alg_set(&c->h, &p->alg, CUSPARSELT_MATMUL_ALG_CONFIG_ID, &idv, sizeof idv));
    }
    SPL(a->plan_init(&c->h, &p->plan, &p->mm, &p->alg));
    p->made = 5;
    /* the weight must already be 2:4 (tprof prunes on the host; cuSPARSELt checks what it is given) */
    /* TPROF_SPGEMM_COMPRESS=0 (a lab switch, docs/sparsity.md): no prune check, no compression (wrong values) */
    const char *cmp = getenv("TPROF_SPGEMM_COMPRESS");
    const int compress = !cmp || strcmp(cmp, "0") != 0;
    CUDA(cudaMalloc((void **)&d_valid, sizeof(int)));
    /* zeroed first: a fresh allocation may hold an earlier buffer's bytes, and a check that only flags violations
     * would report those (seen on an H100: the lab's second shape "not 2:4" after its first one's buffers freed) */
    CUDA(cudaMemsetAsync(d_valid, 0, sizeof(int), s));
    if (compress) SPL(a->prune_check(&c->h, &p->mm, w, d_valid, s));
    CUDA(cudaMemcpyAsync(&valid, d_valid, sizeof valid, cudaMemcpyDeviceToHost, s));
    CUDA(cudaStreamSynchronize(s));
    if (valid != 0) {
        st = tp_fail(err, TP_ERR_UNSUPPORTED, "sparse gemm %s: cuSPARSELt's check finds the weight not 2:4", p->name);
        goto fail;
    }
    size_t cb = 0;
    SPL(a->compressed_size(&c->h, &p->plan, &p->comp_bytes, &cb));
    /* allocated with a tile of slack: cuSPARSELt 0.8.0's sm_90 kernels read the compressed weight a whole K tile
     * at a time, past the size it reports when K is small (compute-sanitizer memcheck, an H100, 2026-11-26: 1024-byte
     * reads beyond a 1,280-byte buffer at N 64, K 16); the slack keeps such reads inside the allocation */
    const size_t slack = (size_t)((d->N + 255) / 256 * 256) * 128 * (d->dt == TP_E4M3 ? 1 : 2);
    CUDA(cudaMalloc(&p->comp, p->comp_bytes + slack));
    CUDA(cudaMemsetAsync(p->comp, 0, p->comp_bytes + slack, s));
    if (cb) CUDA(cudaMalloc(&p->comp_buf, cb));
    if (compress) SPL(a->compress(&c->h, &p->plan, w, p->comp, p->comp_buf, s));
    SPL(a->workspace(&c->h, &p->plan, &p->ws_bytes));
    if (p->ws_bytes) CUDA(cudaMalloc(&p->ws, p->ws_bytes));
    /* TPROF_SPGEMM_SEARCH=0 (a lab switch, docs/sparsity.md): the default (or the forced) algorithm, no search */
    const char *srch = getenv("TPROF_SPGEMM_SEARCH");
    if ((!srch || strcmp(srch, "0") != 0) && !(forced && *forced)) {
        const float alpha = p->alpha, beta = d->residual ? 1.0f : 0.0f;
        SPL(a->search(&c->h, &p->plan, &alpha, p->comp, x, &beta, d->residual ? residual : y, y, p->ws, &s, 1));
    }
    SPL(a->alg_get(&c->h, &p->alg, CUSPARSELT_MATMUL_ALG_CONFIG_ID, &p->alg_id, sizeof p->alg_id));
    SPL(a->alg_get(&c->h, &p->alg, CUSPARSELT_MATMUL_SPLIT_K, &p->split_k, sizeof p->split_k));
    SPL(a->alg_get(&c->h, &p->alg, CUSPARSELT_MATMUL_SPLIT_K_MODE, &p->split_k_mode, sizeof p->split_k_mode));
    size_t ws2 = 0; /* the algorithm the search kept may want more */
    SPL(a->workspace(&c->h, &p->plan, &ws2));
    if (ws2 > p->ws_bytes) {
        cudaFree(p->ws);
        p->ws = NULL;
        p->ws_bytes = ws2;
        CUDA(cudaMalloc(&p->ws, ws2));
    }
    CUDA(cudaStreamSynchronize(s));
    cudaFree(d_valid);
    *out = p;
    return TP_OK;
fail:
    cudaFree(d_valid);
    tp_spgemm_destroy(p);
    return st;
}

int tp_spgemm_run(tp_spgemm_ctx *c, const tp_spgemm *p, const void *x, const void *bias, const void *residual, void *y,
                  tp_stream stream) {
    if (!c || !p || !x || !y || bias != p->bias || (p->d.residual ? !residual : residual != NULL))
        return (int)CUSPARSE_STATUS_INVALID_VALUE;
    const float alpha = p->alpha, beta = p->d.residual ? 1.0f : 0.0f;
    cudaStream_t s = (cudaStream_t)stream;
    return (int)p->a->matmul(&c->h, &p->plan, &alpha, p->comp, x, &beta, p->d.residual ? residual : y, y, p->ws, &s,
                             1);
}

#endif /* TP_HAVE_CUSPARSELT_HEADER */
