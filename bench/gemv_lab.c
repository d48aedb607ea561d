/* gemv_lab.c: the decode GEMVs (tpk_gemv, tpk_gemv_fp8, tpk_gemv_nvfp4, tpk_gemv_w8a8, tpk_gemv_fp8_block, _q;
 * src/exec/cuda/gemm/gemv.h) timed against the device copy rate and cuBLASLt, in one process on one GPU.
 *
 * Shapes (N x K): Llama-7B's decode layer: q/k/v/o 4096x4096, gate/up 11008x4096, down 4096x11008; Llama-3.2-1B:
 * q/o 2048x2048, k/v 512x2048, gate/up 8192x2048, down 2048x8192, LM head 128256x2048; each at M = 1, 4, 8 (batch).
 * Formats: "16-bit" (W in the activation type), "fp8" (E4M3 with per-channel fp32 scales), "nvfp4" (packed E2M1,
 * UE4M3 scale per 16, fp32 s2), "w8a8" (fp8's weights, x rounded to E4M3 under a per-tensor scale as it is read),
 * "fp8b" (FP8 block-128: E4M3 with 128 x 128 fp32 block scales, x quantized per 1 x 128 block as it is read),
 * "fp8bq" (the same on x already in E4M3 with 1 x 128 scales, as a decoder's RMSNorm writes it). Weights are filled
 * on the GPU (tpk_fill_uniform: uniform values, never zeros;
 * NVFP4 bytes and scales are E4M3 codes of uniform values, any bit pattern being a valid E2M1 pair), x too; no
 * bias, no residual (the epilogue is 16 x 8 values per block: nothing to time).
 *
 * Method (the workplace's METHOD.md): the copy rate first, cudaMemcpyAsync of 1 GiB device to device, bytes read +
 * written over the median of 20 copies: the bandwidth ceiling a streaming kernel can hope for. Per shape, format
 * and M: enough copies of the weights that one rotation streams more than --rotate-mb (default 256 MB, five times
 * the 50 MB L2), each call on the next copy, so no call finds its weights in L2; 10 warmup calls, then --runs
 * (default 100, at least 50) calls, each between two CUDA events; median, min, max, p10, p90 in us. Bytes per call:
 * the weights and their scales (tpk_gemv_weight_bytes) + x (M K) + y (M N) in the 16-bit type; GB/s = bytes / the
 * median; % of the copy rate. Baseline: cuBLASLt's GEMM in the activation type (D = x W^T, M x N x K, fp32
 * accumulation, tp_gemm_plan_create with M = 1 .. 8: cuBLASLt takes any M), every heuristic candidate timed
 * (20 calls each) and the fastest kept, then timed like the GEMVs on the same rotating 16-bit weights.
 * Checks: every output is poisoned (NaN) before one untimed call and must come back finite; the 16-bit GEMV's output
 * must equal cuBLASLt's within rel L2 1e-2 (both round once from fp32 sums in different orders: ~1e-4 expected).
 *
 * Build: cmake --build <build dir> --target gemv_lab.
 * Run:   ./gemv_lab [--runs N] [--dt f16|bf16] [--rotate-mb MB] [--json FILE]
 * Output: one line per shape, format and M; the JSON (--json) holds every number printed and the spreads.
 * Exit status: 0; 1 when an output is not finite or the 16-bit GEMV disagrees with cuBLASLt; 2 on a CUDA or cuBLAS
 * error or bad arguments. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_common.h"
#include "exec/cuda/gemm/gemv.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "formats/dtype.h"

typedef struct {
    const char *name;
    int N, K;
} shape;

static const shape SHAPES[] = {
    {"llama7b q/k/v/o", 4096, 4096},  {"llama7b gate/up", 11008, 4096}, {"llama7b down", 4096, 11008},
    {"llama1b q/o", 2048, 2048},      {"llama1b k/v", 512, 2048},       {"llama1b gate/up", 8192, 2048},
    {"llama1b down", 2048, 8192},     {"llama1b lm_head", 128256, 2048},
};
static const int MS[] = {1, 4, 8};
/* F_W8A8: the fp8 weights with x rounded to E4M3 under a per-tensor scale on load (tpk_gemv_w8a8); F_FP8B: FP8
 * block-128 (tpk_gemv_fp8_block: x quantized per 1x128 block on load, 128x128 weight scales); F_FP8BQ: the same
 * weights on an x its producer quantized (tpk_gemv_fp8_block_q: E4M3 codes and 1x128 scales, as a decoder's RMSNorm
 * writes them) */
enum { F_16 = 0, F_FP8, F_NVFP4, F_W8A8, F_FP8B, F_FP8BQ, F_COUNT };
static const char *const FNAME[F_COUNT] = {"16-bit", "fp8", "nvfp4", "w8a8", "fp8b", "fp8bq"};
static const int FBYTES[F_COUNT] = {0, 1, 2, 1, 3, 3}; /* tpk_gemv_weight_bytes's format */

#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))
#define NMS ((int)(sizeof MS / sizeof MS[0]))

typedef struct {
    double med, lo, hi, p10, p90;
} timing;

typedef struct {
    int shape, fmt, M, copies;
    long long wbytes, bytes;
    timing t;
    double gbs, pct;
    /* the cuBLASLt baseline at this shape and M (same numbers on every format's row) */
    timing bl;
    long long bl_bytes;
    double bl_gbs, bl_pct;
    int bl_algo, bl_candidates;
    double rel_vs_cublaslt; /* 16-bit only; -1 otherwise */
} result;

/* one format's weights on the device: `copies` copies, each elements + scales (+ the per-tensor scale) */
typedef struct {
    int fmt, N, K, copies;
    void **w;          /* per copy: weights */
    void **s;          /* per copy: NVFP4 block scales */
    float **cs;        /* per copy: FP8 channel scales */
    float *s2;         /* NVFP4 per-tensor scale, W8A8's x scale (1 float) */
    void *xq;          /* F_FP8BQ: x as E4M3 codes (8 rows of K) */
    float *xs;         /* F_FP8BQ: x's 1x128 block scales (ceil(K / 128), 8) */
    long long wbytes;  /* per copy, as tpk_gemv_weight_bytes counts */
} weights;

static int g_runs = 100;
static tp_dtype g_dt = TP_F16;

static timing stats(float *t, int n) {
    qsort(t, (size_t)n, sizeof(float), cmp_float);
    timing r = {t[n / 2], t[0], t[n - 1], t[n / 10], t[(9 * n) / 10 < n ? (9 * n) / 10 : n - 1]};
    return r;
}

static weights make_weights(int fmt, int N, int K, long long rotate_bytes, cudaStream_t s) {
    weights w;
    memset(&w, 0, sizeof w);
    w.fmt = fmt, w.N = N, w.K = K;
    w.wbytes = tpk_gemv_weight_bytes(FBYTES[fmt], N, K, fmt == F_FP8 || fmt == F_W8A8);
    w.copies = (int)((rotate_bytes + w.wbytes - 1) / w.wbytes);
    if (w.copies < 1) w.copies = 1;
    w.w = calloc((size_t)w.copies, sizeof(void *));
    w.s = calloc((size_t)w.copies, sizeof(void *));
    w.cs = calloc((size_t)w.copies, sizeof(float *));
    if (!w.w || !w.s || !w.cs) exit(2);
    const size_t nW = (size_t)N * K;
    for (int c = 0; c < w.copies; c++) {
        const uint64_t seed = 1000 + 97 * (uint64_t)c + 7 * (uint64_t)fmt;
        if (fmt == F_16) {
            CK(cudaMalloc(&w.w[c], nW * 2));
            CK(tpk_fill_uniform(w.w[c], g_dt, nW, seed, (tp_stream)s));
        } else if (fmt == F_FP8 || fmt == F_W8A8 || fmt == F_FP8B || fmt == F_FP8BQ) {
            /* FP8B, FP8BQ: cs holds the 128x128 block scales (gemv.h's layout) instead of channel scales */
            const size_t ns = fmt == F_FP8B || fmt == F_FP8BQ ? (size_t)((N + 127) / 128) * (size_t)(((K + 127) / 128 + 3) / 4 * 4)
                                            : (size_t)N;
            CK(cudaMalloc(&w.w[c], nW));
            CK(tpk_fill_uniform(w.w[c], TP_E4M3, nW, seed, (tp_stream)s));
            CK(cudaMalloc((void **)&w.cs[c], ns * sizeof(float)));
            CK(tpk_fill_uniform(w.cs[c], TP_F32, ns, seed + 1, (tp_stream)s));
        } else {
            CK(cudaMalloc(&w.w[c], nW / 2));
            CK(tpk_fill_uniform(w.w[c], TP_E4M3, nW / 2, seed, (tp_stream)s)); /* any byte is two valid E2M1 codes */
            CK(cudaMalloc(&w.s[c], nW / 16));
            CK(tpk_fill_uniform(w.s[c], TP_E4M3, nW / 16, seed + 1, (tp_stream)s)); /* never the NaN code */
        }
    }
    if (fmt == F_FP8BQ) { /* uniform codes and scales, never zeros */
        CK(cudaMalloc(&w.xq, (size_t)8 * K));
        CK(tpk_fill_uniform(w.xq, TP_E4M3, (size_t)8 * K, 17, (tp_stream)s));
        CK(cudaMalloc((void **)&w.xs, sizeof(float) * 8 * (size_t)((K + 127) / 128)));
        CK(tpk_fill_uniform(w.xs, TP_F32, (size_t)8 * ((K + 127) / 128), 18, (tp_stream)s));
    }
    if (fmt == F_NVFP4 || fmt == F_W8A8) {
        const float one = fmt == F_NVFP4 ? 1.0f / 64.0f : 1.0f / 448.0f; /* x uniform in [-1, 1): E4M3 unsaturated */
        CK(cudaMalloc((void **)&w.s2, sizeof(float)));
        CK(cudaMemcpy(w.s2, &one, sizeof one, cudaMemcpyHostToDevice));
    }
    CK(cudaStreamSynchronize(s));
    return w;
}

static void free_weights(weights *w) {
    for (int c = 0; c < w->copies; c++) {
        if (w->w[c]) CK(cudaFree(w->w[c]));
        if (w->s[c]) CK(cudaFree(w->s[c]));
        if (w->cs[c]) CK(cudaFree(w->cs[c]));
    }
    if (w->s2) CK(cudaFree(w->s2));
    if (w->xq) CK(cudaFree(w->xq));
    if (w->xs) CK(cudaFree(w->xs));
    free(w->w), free(w->s), free(w->cs);
}

static int run_gemv(const weights *w, int c, const void *x, void *y, int M, cudaStream_t s) {
    switch (w->fmt) {
    case F_16: return tpk_gemv(x, w->w[c], NULL, NULL, y, g_dt, M, w->N, w->K, (tp_stream)s);
    case F_FP8: return tpk_gemv_fp8(x, w->w[c], w->cs[c], NULL, NULL, NULL, y, g_dt, M, w->N, w->K, (tp_stream)s);
    case F_W8A8:
        return tpk_gemv_w8a8(x, w->s2, w->w[c], w->cs[c], NULL, NULL, NULL, y, g_dt, M, w->N, w->K, (tp_stream)s);
    case F_FP8B: return tpk_gemv_fp8_block(x, w->w[c], w->cs[c], NULL, NULL, y, g_dt, M, w->N, w->K, (tp_stream)s);
    case F_FP8BQ:
        return tpk_gemv_fp8_block_q(w->xq, w->xs, 8, w->w[c], w->cs[c], NULL, NULL, y, g_dt, M, w->N, w->K,
                                    (tp_stream)s);
    default: return tpk_gemv_nvfp4(x, w->w[c], w->s[c], w->s2, NULL, NULL, y, g_dt, M, w->N, w->K, (tp_stream)s);
    }
}

/* way 0: the GEMV; way 1: cuBLASLt's plan. Call i uses weight copy i % copies. */
typedef struct {
    const weights *w;
    const void *x;
    void *y;
    int M;
    tp_gemm_ctx *ctx;
    tp_gemm_plan *plan;
    cudaStream_t s;
} call_ctx;

static int call(const call_ctx *cc, int way, int i) {
    const int c = i % cc->w->copies;
    if (way == 0) return run_gemv(cc->w, c, cc->x, cc->y, cc->M, cc->s);
    return tp_gemm_run(cc->ctx, cc->plan, cc->x, cc->w->w[c], NULL, cc->y, NULL, NULL, (tp_stream)cc->s);
}

static timing time_way(const call_ctx *cc, int way, int runs, cudaEvent_t *ev, float *t) {
    for (int i = 0; i < 10; i++) CK(call(cc, way, i));
    for (int i = 0; i < runs; i++) {
        CK(cudaEventRecord(ev[2 * i], cc->s));
        CK(call(cc, way, 10 + i));
        CK(cudaEventRecord(ev[2 * i + 1], cc->s));
    }
    CK(cudaStreamSynchronize(cc->s));
    for (int i = 0; i < runs; i++) {
        CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
        t[i] *= 1000.0f;
    }
    return stats(t, runs);
}

/* one untimed call on a NaN-poisoned y; the output decoded into out (M N floats); returns the non-finite count */
static size_t checked_call(const call_ctx *cc, int way, float *out, uint16_t *raw) {
    const size_t nY = (size_t)cc->M * cc->w->N;
    CK(cudaMemsetAsync(cc->y, 0xFF, nY * 2, cc->s));
    CK(call(cc, way, 0));
    CK(cudaStreamSynchronize(cc->s));
    CK(cudaMemcpy(raw, cc->y, nY * 2, cudaMemcpyDeviceToHost));
    tp_convert_to_f32(g_dt, raw, out, nY, 1.0f);
    size_t bad = 0;
    for (size_t i = 0; i < nY; i++) bad += !isfinite(out[i]);
    return bad;
}

static double copy_rate_gbs(cudaStream_t s, cudaEvent_t *ev, float *t, timing *out) {
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemsetAsync(a, 0x3C, bytes, s));
    for (int i = 0; i < 3; i++) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    const int n = 20;
    for (int i = 0; i < n; i++) {
        CK(cudaEventRecord(ev[2 * i], s));
        CK(cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, bytes, cudaMemcpyDeviceToDevice, s));
        CK(cudaEventRecord(ev[2 * i + 1], s));
    }
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
    const timing tm = stats(t, n);
    *out = tm;
    CK(cudaFree(a));
    CK(cudaFree(b));
    printf("copy rate: cudaMemcpyAsync 1 GiB device to device, median of %d: %.3f ms (min %.3f, max %.3f) -> %.1f GB/s "
           "(read + write)\n",
           n, tm.med, tm.lo, tm.hi, 2.0 * bytes / (tm.med * 1e-3) / 1e9);
    return 2.0 * bytes / (tm.med * 1e-3) / 1e9;
}

static void json_timing(FILE *f, const char *key, const timing *t) {
    fprintf(f, "\"%s\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f, \"p10\": %.3f, \"p90\": %.3f}", key, t->med,
            t->lo, t->hi, t->p10, t->p90);
}

static int write_json(const char *path, const char *dev, int sms, double copy_gbs, const timing *copy_ms,
                      long long rotate_bytes, const result *res, int nres) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gemv_lab: cannot write %s\n", path);
        return 2;
    }
    fprintf(f, "{\n  \"lab\": \"gemv_lab\",\n  \"device\": \"%s\",\n  \"sms\": %d,\n  \"dtype\": \"%s\",\n", dev, sms,
            tp_dtype_info(g_dt)->name);
    fprintf(f, "  \"runs\": %d,\n  \"warmup\": 10,\n  \"rotate_bytes\": %lld,\n  \"cublaslt_version\": %zu,\n", g_runs,
            rotate_bytes, tp_gemm_lib_version());
    fprintf(f, "  \"copy_rate_gbs\": %.2f,\n  \"copy_bytes\": %lld,\n  ", copy_gbs, 2LL << 30);
    json_timing(f, "copy_ms", copy_ms);
    fprintf(f, ",\n  \"times_unit\": \"us\",\n  \"results\": [\n");
    for (int i = 0; i < nres; i++) {
        const result *r = &res[i];
        const shape *sh = &SHAPES[r->shape];
        fprintf(f,
                "    {\"shape\": \"%s\", \"N\": %d, \"K\": %d, \"M\": %d, \"format\": \"%s\", \"weight_bytes\": %lld, "
                "\"bytes\": %lld, \"copies\": %d, ",
                sh->name, sh->N, sh->K, r->M, FNAME[r->fmt], r->wbytes, r->bytes, r->copies);
        json_timing(f, "us", &r->t);
        fprintf(f, ", \"gbs\": %.2f, \"pct_copy\": %.2f, ", r->gbs, r->pct);
        json_timing(f, "cublaslt_us", &r->bl);
        fprintf(f,
                ", \"cublaslt_bytes\": %lld, \"cublaslt_gbs\": %.2f, \"cublaslt_pct_copy\": %.2f, \"cublaslt_algo\": "
                "%d, \"cublaslt_candidates\": %d, \"speedup_vs_cublaslt\": %.4f",
                r->bl_bytes, r->bl_gbs, r->bl_pct, r->bl_algo, r->bl_candidates, r->bl.med / r->t.med);
        if (r->rel_vs_cublaslt >= 0) fprintf(f, ", \"rel_l2_vs_cublaslt\": %.3e", r->rel_vs_cublaslt);
        fprintf(f, "}%s\n", i + 1 < nres ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: gemv_lab [--runs N >= 50] [--dt f16|bf16] [--rotate-mb MB > 200] [--json FILE]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *json = NULL;
    long long rotate_mb = 256;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) g_runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--rotate-mb") && i + 1 < argc) rotate_mb = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--dt") && i + 1 < argc) {
            const char *d = argv[++i];
            if (!strcmp(d, "f16")) g_dt = TP_F16;
            else if (!strcmp(d, "bf16")) g_dt = TP_BF16;
            else usage();
        } else usage();
    }
    if (g_runs < 50 || rotate_mb <= 200) usage();
    const long long rotate_bytes = rotate_mb * 1000000LL;

    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    float *t = malloc(sizeof(float) * (size_t)(g_runs > 20 ? g_runs : 20));
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * 2 * (size_t)(g_runs > 20 ? g_runs : 20));
    if (!t || !ev) return 2;
    for (int i = 0; i < 2 * (g_runs > 20 ? g_runs : 20); i++) CK(cudaEventCreate(&ev[i]));
    printf("gemv_lab: %s, %d SMs, L2 %d MB; activations %s; %d runs after 10 warmups; weights rotated over > %lld MB; "
           "cuBLASLt %zu\n",
           prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, tp_dtype_info(g_dt)->name, g_runs, rotate_mb,
           tp_gemm_lib_version());
    timing copy_ms;
    const double copy_gbs = copy_rate_gbs(s, ev, t, &copy_ms);

    tp_gemm_ctx *gctx = NULL;
    tp_error err;
    if (tp_gemm_ctx_create(32u << 20, &gctx, &err)) {
        fprintf(stderr, "cuBLASLt: %s\n", err.msg);
        return 2;
    }
    result *res = calloc((size_t)NSHAPES * NMS * F_COUNT, sizeof(result));
    if (!res) return 2;
    int nres = 0, bad = 0;
    printf("%-17s %-6s %2s %9s %9s %9s %8s %6s | %10s %8s %6s %7s  %s\n", "shape (N x K)", "format", "M", "us med",
           "min", "max", "GB/s", "%copy", "cuBLASLt us", "GB/s", "%copy", "speedup", "check");
    for (int si = 0; si < NSHAPES; si++) {
        const shape *sh = &SHAPES[si];
        const int N = sh->N, K = sh->K;
        void *x = NULL, *y = NULL;
        CK(cudaMalloc(&x, (size_t)8 * K * 2));
        CK(cudaMalloc(&y, (size_t)8 * N * 2));
        CK(tpk_fill_uniform(x, g_dt, (size_t)8 * K, 7, (tp_stream)s));
        float *out = malloc(sizeof(float) * 8 * (size_t)N), *ref = malloc(sizeof(float) * 8 * (size_t)N);
        uint16_t *raw = malloc(2 * 8 * (size_t)N);
        if (!out || !ref || !raw) return 2;
        /* the baseline per M, on the 16-bit weights: timed once, reported on every format's row */
        timing bl[NMS] = {{0, 0, 0, 0, 0}};
        int bl_algo[NMS] = {0}, bl_cand[NMS] = {0};
        for (int f = 0; f < F_COUNT; f++) {
            weights w = make_weights(f, N, K, rotate_bytes, s);
            for (int mi = 0; mi < NMS; mi++) {
                const int M = MS[mi];
                call_ctx cc = {&w, x, y, M, gctx, NULL, s};
                result *r = &res[nres++];
                r->shape = si, r->fmt = f, r->M = M, r->copies = w.copies, r->wbytes = w.wbytes;
                r->bytes = w.wbytes + 2LL * M * K + 2LL * M * N;
                r->rel_vs_cublaslt = -1.0;
                size_t nonfinite = checked_call(&cc, 0, out, raw);
                if (f == F_16) { /* cuBLASLt: the fastest heuristic candidate, its output as the check's reference */
                    tp_gemm_desc d;
                    memset(&d, 0, sizeof d);
                    d.M = M, d.N = N, d.K = K, d.ab_dt = g_dt, d.d_dt = g_dt;
                    if (tp_gemm_plan_create(gctx, &d, sh->name, &cc.plan, &err)) {
                        fprintf(stderr, "cuBLASLt: %s\n", err.msg);
                        return 2;
                    }
                    int best = 0;
                    double best_t = 1e30;
                    for (int k = 0; k < tp_gemm_plan_candidates(cc.plan); k++) {
                        tp_gemm_plan_select(cc.plan, k);
                        const timing tk = time_way(&cc, 1, 20, ev, t);
                        if (tk.med < best_t) best_t = tk.med, best = k;
                    }
                    tp_gemm_plan_select(cc.plan, best);
                    nonfinite += checked_call(&cc, 1, ref, raw);
                    bl[mi] = time_way(&cc, 1, g_runs, ev, t);
                    bl_algo[mi] = best, bl_cand[mi] = tp_gemm_plan_candidates(cc.plan);
                    tp_gemm_plan_destroy(cc.plan);
                    cc.plan = NULL;
                    double num = 0, den = 0;
                    for (size_t i = 0; i < (size_t)M * N; i++) {
                        const double e = (double)out[i] - ref[i];
                        num += e * e, den += (double)ref[i] * ref[i];
                    }
                    r->rel_vs_cublaslt = den > 0 ? sqrt(num / den) : 0.0;
                    bad |= !(r->rel_vs_cublaslt <= 1e-2);
                }
                bad |= nonfinite > 0;
                r->t = time_way(&cc, 0, g_runs, ev, t);
                r->gbs = r->bytes / (r->t.med * 1e-6) / 1e9;
                r->pct = 100.0 * r->gbs / copy_gbs;
                r->bl = bl[mi], r->bl_algo = bl_algo[mi], r->bl_candidates = bl_cand[mi];
                r->bl_bytes = tpk_gemv_weight_bytes(0, N, K, 0) + 2LL * M * K + 2LL * M * N;
                r->bl_gbs = r->bl_bytes / (r->bl.med * 1e-6) / 1e9;
                r->bl_pct = 100.0 * r->bl_gbs / copy_gbs;
                char check[64];
                if (r->rel_vs_cublaslt >= 0)
                    snprintf(check, sizeof check, "%s rel L2 vs cuBLASLt %.1e", nonfinite ? "NON-FINITE" : "ok",
                             r->rel_vs_cublaslt);
                else
                    snprintf(check, sizeof check, "%s", nonfinite ? "NON-FINITE" : "ok (finite)");
                char nm[40];
                snprintf(nm, sizeof nm, "%dx%d", N, K);
                printf("%-17s %-6s %2d %9.2f %9.2f %9.2f %8.1f %5.1f%% | %10.2f %8.1f %5.1f%% %6.2fx  %s  [%s, %d "
                       "copies]\n",
                       nm, FNAME[f], M, r->t.med, r->t.lo, r->t.hi, r->gbs, r->pct, r->bl.med, r->bl_gbs, r->bl_pct,
                       r->bl.med / r->t.med, check, sh->name, w.copies);
                fflush(stdout);
            }
            free_weights(&w);
        }
        free(out), free(ref), free(raw);
        CK(cudaFree(x));
        CK(cudaFree(y));
    }
    if (json && write_json(json, prop.name, prop.multiProcessorCount, copy_gbs, &copy_ms, rotate_bytes, res, nres))
        return 2;
    if (json) printf("wrote %s\n", json);
    tp_gemm_ctx_destroy(gctx);
    free(res), free(t), free(ev);
    return bad;
}
