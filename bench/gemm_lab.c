/* gemm_lab.c: tprof's Hopper GEMM (tpk_gemm_sm90, gemm_sm90.h) against cuBLASLt, in one process on one GPU, at the
 * four GEMM shapes of a ViT-B/16 block (batch B, default 64: M = 197 B tokens; F16 or BF16):
 *   fc1 + GELU  N 3072, K 768: cuBLASLt with the bias epilogue, then tpk_gelu (the exact GELU as its own kernel:
 *               what engines run for an erf-GELU model), against tpk_gemm_sm90 with the GELU in its epilogue;
 *   fc1, qkv (N 2304, K 768), proj (N 768, K 768), fc2 (N 768, K 3072): bias only, cuBLASLt against tpk_gemm_sm90.
 * tprof's kernel runs in both of its variants (tpk_gemm_sm90_variant: v0 the consumers write their whole tiles, v1
 * helper warps write half of each tile).
 * cuBLASLt is the baseline at its best: every heuristic candidate (tp_gemm_plan_candidates) timed, the fastest kept,
 * as tprof's engines select. Per way: one run on a NaN-poisoned output (none may remain) and the relative L2
 * difference of tprof's output to cuBLASLt's (both round once from fp32 sums in different orders; the unfused GELU
 * rounds twice: ~1e-3 expected for F16); 10 warmup runs, then `runs` (default 50) each between two CUDA events:
 * median, min, max in us, and the median's TFLOP/s (2 M N K; the GELU's work is not counted).
 *
 * Build: cmake --build <build dir> --target gemm_lab. Run: ./gemm_lab [runs] [batch] [f16|bf16].
 * Exit status: 0; 1 when an output has NaN/Inf or disagrees (rel L2 > 1e-2); 2 on a CUDA or cuBLAS error or bad
 * arguments. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_common.h"
#include "core/rng.h"
#include "exec/cuda/gemm_cublaslt.h"
#include "exec/cuda/gemm_sm90.h"
#include "exec/cuda/kernels.h"
#include "formats/dtype.h"


typedef struct {
    const char *name;
    int N, K, gelu;
} shape;

typedef struct {
    int M, N, K, gelu;
    tp_dtype dt;
    void *A, *W, *bias, *D, *H; /* H: the unfused path's pre-GELU output */
    tp_gemm_ctx *gemm;
    tp_gemm_plan *plan;
    cudaStream_t s;
} lab;

/* way 0: cuBLASLt (+ tpk_gelu); 1 + v: tpk_gemm_sm90's variant v. Returns the first error code (0: fine). */
static int run_way(const lab *l, int way) {
    if (way)
        return tpk_gemm_sm90_variant(l->A, l->W, l->bias, l->D, l->dt, l->M, l->N, l->K, l->gelu, way - 1,
                                     (tp_stream)l->s);
    int rc = tp_gemm_run(l->gemm, l->plan, l->A, l->W, l->bias, l->gelu ? l->H : l->D, NULL, NULL, (tp_stream)l->s);
    if (!rc && l->gelu) rc = tpk_gelu(l->H, l->dt, l->D, l->dt, NULL, (size_t)l->M * l->N, (tp_stream)l->s);
    return rc;
}

static void *upload(tp_dtype dt, size_t n, uint64_t seed, double std) {
    tp_rng r;
    float *x = malloc(n * sizeof(float));
    uint16_t *t = malloc(n * 2);
    void *d = NULL;
    if (!x || !t) exit(2);
    tp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * tp_rng_normal(&r));
    tp_convert_from_f32(dt, x, t, n, 1.0f);
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, t, n * 2, cudaMemcpyHostToDevice));
    free(x), free(t);
    return d;
}

/* median of `runs` timed calls of way (after 10 warmups), min and max into lo, hi; us */
static float time_way(const lab *l, int way, int runs, cudaEvent_t *ev, float *t, float *lo, float *hi) {
    for (int i = 0; i < 10; i++) CK(run_way(l, way));
    for (int i = 0; i < runs; i++) {
        CK(cudaEventRecord(ev[2 * i], l->s));
        CK(run_way(l, way));
        CK(cudaEventRecord(ev[2 * i + 1], l->s));
    }
    CK(cudaStreamSynchronize(l->s));
    for (int i = 0; i < runs; i++) {
        CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
        t[i] *= 1000.0f;
    }
    qsort(t, (size_t)runs, sizeof(float), cmp_float);
    *lo = t[0], *hi = t[runs - 1];
    return t[runs / 2];
}

int main(int argc, char **argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 50, B = argc > 2 ? atoi(argv[2]) : 64;
    const tp_dtype dt = argc > 3 && strcmp(argv[3], "bf16") == 0 ? TP_BF16 : TP_F16;
    if (runs < 1 || B < 1 || (argc > 3 && strcmp(argv[3], "bf16") != 0 && strcmp(argv[3], "f16") != 0)) {
        fprintf(stderr, "usage: gemm_lab [runs >= 1] [batch >= 1] [f16|bf16]\n");
        return 2;
    }
    if (!tpk_gemm_sm90_supported()) {
        fprintf(stderr, "gemm_lab: tpk_gemm_sm90 needs a compute capability 9.0 GPU\n");
        return 2;
    }
    static const shape shapes[] = {{"fc1 + GELU", 3072, 768, 1}, {"fc1", 3072, 768, 0}, {"qkv", 2304, 768, 0},
                                   {"proj", 768, 768, 0},        {"fc2", 768, 3072, 0}};
    const int M = B * 197;
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("gemm_lab: %s; ViT-B/16 batch %d (M %d), %s, %d runs; cuBLASLt %zu (best of its heuristic candidates)\n",
           prop.name, B, M, tp_dtype_info(dt)->name, runs, tp_gemm_lib_version());
    lab l = {.M = M, .dt = dt};
    tp_error err;
    CK(cudaStreamCreate(&l.s));
    if (tp_gemm_ctx_create(32u << 20, &l.gemm, &err)) {
        fprintf(stderr, "cuBLASLt: %s\n", err.msg);
        return 2;
    }
    float *t = malloc(sizeof(float) * (size_t)runs);
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * 2 * (size_t)runs);
    if (!t || !ev) return 2;
    for (int i = 0; i < 2 * runs; i++) CK(cudaEventCreate(&ev[i]));
    int bad = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *sh = &shapes[si];
        l.N = sh->N, l.K = sh->K, l.gelu = sh->gelu;
        const size_t nD = (size_t)M * l.N;
        l.A = upload(dt, (size_t)M * l.K, 10 + si, 1.0), l.W = upload(dt, (size_t)l.N * l.K, 20 + si, 0.03);
        l.bias = upload(dt, (size_t)l.N, 30 + si, 0.5);
        CK(cudaMalloc(&l.D, nD * 2));
        CK(cudaMalloc(&l.H, nD * 2));
        tp_gemm_desc d = {M, l.N, l.K, dt, dt, 1, 0, 0, 0, 0};
        if (tp_gemm_plan_create(l.gemm, &d, sh->name, &l.plan, &err)) {
            fprintf(stderr, "cuBLASLt: %s\n", err.msg);
            return 2;
        }
        /* cuBLASLt's candidates, the fastest kept (the GEMM alone) */
        int best = 0;
        float best_t = 1e30f, lo, hi;
        const int gelu = l.gelu;
        l.gelu = 0;
        for (int k = 0; k < tp_gemm_plan_candidates(l.plan); k++) {
            tp_gemm_plan_select(l.plan, k);
            const float m = time_way(&l, 0, runs < 20 ? runs : 20, ev, t, &lo, &hi);
            if (m < best_t) best_t = m, best = k;
        }
        tp_gemm_plan_select(l.plan, best);
        l.gelu = gelu;
        uint16_t *ref = malloc(nD * 2), *got = malloc(nD * 2);
        if (!ref || !got) return 2;
        const double flop = 2.0 * M * l.N * l.K;
        for (int way = 0; way <= 2; way++) {
            CK(cudaMemsetAsync(l.D, 0xFF, nD * 2, l.s)); /* NaN in f16 and bf16 */
            int rc = run_way(&l, way);
            if (rc) {
                fprintf(stderr, "%s way %d: error %d\n", sh->name, way, rc);
                return 2;
            }
            CK(cudaStreamSynchronize(l.s));
            CK(cudaMemcpy(way ? got : ref, l.D, nD * 2, cudaMemcpyDeviceToHost));
            size_t nonfinite = 0;
            double num = 0, den = 0;
            for (size_t i = 0; i < nD; i++) {
                float a, r;
                tp_convert_to_f32(dt, (way ? got : ref) + i, &a, 1, 1.0f);
                tp_convert_to_f32(dt, ref + i, &r, 1, 1.0f);
                if (!isfinite(a)) nonfinite++;
                num += ((double)a - r) * ((double)a - r), den += (double)r * r;
            }
            const double rel = den > 0 ? sqrt(num / den) : 0.0;
            const float med = time_way(&l, way, runs, ev, t, &lo, &hi);
            char name[96];
            if (way)
                snprintf(name, sizeof name, "%s tprof sm90 v%d%s", sh->name, way - 1, gelu ? ", GELU in epilogue" : "");
            else
                snprintf(name, sizeof name, "%s %s", sh->name, gelu ? "cuBLASLt + tpk_gelu" : "cuBLASLt");
            char algo[48] = "";
            if (!way) snprintf(algo, sizeof algo, "  (algo %d of %d)", best, tp_gemm_plan_candidates(l.plan));
            printf("%-46s median %8.1f us  min %8.1f  max %8.1f  %6.1f TFLOP/s  rel L2 vs cuBLASLt %.2e  non-finite "
                   "%zu%s\n",
                   name, med, lo, hi, flop / (med * 1e-6) / 1e12, rel, nonfinite, algo);
            bad |= nonfinite > 0 || rel > 1e-2;
        }
        free(ref), free(got);
        tp_gemm_plan_destroy(l.plan);
        CK(cudaFree(l.A));
        CK(cudaFree(l.W));
        CK(cudaFree(l.bias));
        CK(cudaFree(l.D));
        CK(cudaFree(l.H));
    }
    return bad;
}
