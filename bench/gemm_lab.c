/* gemm_lab.c: tprof's Hopper GEMM (tpk_gemm_sm90, gemm_sm90.h) against cuBLASLt, in one process on one GPU, at the
 * four GEMM shapes of a ViT-B/16 block (batch B, default 64: M = 197 B tokens; F16, BF16 or FP8):
 *   fc1 + GELU  N 3072, K 768: cuBLASLt with the bias epilogue, then tpk_gelu (the exact GELU as its own kernel:
 *               what engines run for an erf-GELU model), against tpk_gemm_sm90 with the GELU in its epilogue;
 *   fc1, qkv (N 2304, K 768), proj (N 768, K 768), fc2 (N 768, K 3072): bias only, cuBLASLt against tpk_gemm_sm90.
 * tprof's kernel runs in both of its variants (tpk_gemm_sm90_variant: v0 the consumers write their whole tiles, v1
 * helper warps write half of each tile), and for FP8 with an F16 output also in v2 (v0 with 128 x 96 tiles).
 * fp8: E4M3 operands with per-tensor scales (amax / 448), F16 bias, as the FP8 engines run them: fc1 + GELU is
 * cuBLASLt (E4M3 x E4M3 -> F16 + bias, FAST_ACCUM off) then tpk_gelu writing E4M3 (scale: the GELU output's amax /
 * 448), against tpk_gemm_sm90_fp8 writing the E4M3 codes itself; the plain shapes write F16 both ways; cuBLASLt
 * also with FAST_ACCUM ("fast-accum": no promotion, as tprof's FP8 kernel; what the engines' promotion costs). Since
 * tprof's FP8 kernel accumulates without cuBLASLt's promotion to fp32 (gemm_sm90.h), every way is also compared
 * with an fp64 reference on every 61st row (the decoded E4M3 inputs, the bias; GELU in fp64): "rel L2 vs fp64".
 * fp8 also times proj and fc2 with the residual add the engines fuse into them: "+ residual", an F16 R (M, N) in
 * its own buffer, cuBLASLt's C (beta 1) against tpk_gemm_sm90_fp8's R (variants 0 and 2).
 * cuBLASLt is the baseline at its best: every heuristic candidate (tp_gemm_plan_candidates) timed, the fastest kept,
 * as tprof's engines select. Per way: one run on a NaN-poisoned output (none may remain) and the relative L2
 * difference of tprof's output to cuBLASLt's (both round once from fp32 sums in different orders; the unfused GELU
 * rounds twice: ~1e-3 expected for F16; E4M3 outputs up to 5e-2); 10 warmup runs, then `runs` (default 50) each
 * between two CUDA events:
 * median, min, max in us, and the median's TFLOP/s (2 M N K; the GELU's work is not counted).
 *
 * Build: cmake --build <build dir> --target gemm_lab. Run: ./gemm_lab [runs] [batch] [f16|bf16|fp8].
 * Exit status: 0; 1 when an output has NaN/Inf or disagrees (rel L2 > 1e-2); 2 on a CUDA or cuBLAS error or bad
 * arguments. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_common.h"
#include "lab_variants.h"
#include "core/rng.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/gemm/gemm_sm90.h"
#include "exec/cuda/kernels/kernels.h"
#include "formats/dtype.h"


typedef struct {
    const char *name;
    int N, K, gelu, res;
} shape;

typedef struct {
    int M, N, K, gelu, res;
    tp_dtype dt;                /* operands: F16, BF16 or E4M3 */
    void *A, *W, *bias, *D, *H; /* H: the unfused path's pre-GELU output */
    void *R;                    /* res: the residual (M, N) F16 */
    float *scales;              /* E4M3: device a_scale, w_scale, d_scale (the GELU output's) at 0, 4, 8: cuBLASLt
                                 * wants each 16-byte aligned */
    tp_gemm_ctx *gemm;
    tp_gemm_plan *plan, *plan_fast; /* plan_fast: E4M3 with FAST_ACCUM (way WAY_FAST) */
    cudaStream_t s;
} lab;

/* way 0: cuBLASLt (+ tpk_gelu); 1 + v: tpk_gemm_sm90's variant v; WAY_FAST (E4M3): cuBLASLt with FAST_ACCUM
 * (+ tpk_gelu). Returns the first error code (0: fine). */
#define WAY_FAST 9 /* not 1 + any variant */
static int run_way(const lab *l, int way) {
    const int f8 = l->dt == TP_E4M3;
    const tp_dtype hdt = f8 ? TP_F16 : l->dt, ddt = f8 && l->gelu ? TP_E4M3 : hdt; /* GEMM output, final output */
    const float *as = f8 ? l->scales : NULL, *ws = f8 ? l->scales + 4 : NULL, *ds = f8 ? l->scales + 8 : NULL;
    if (way && way != WAY_FAST && f8)
        return tpk_gemm_sm90_fp8_variant(l->A, as, l->W, ws, l->bias, l->res ? l->R : NULL, l->D, ddt, ds, l->M, l->N,
                                         l->K, l->gelu, way - 1, (tp_stream)l->s);
    if (way && way != WAY_FAST)
        return tpk_gemm_sm90_variant(l->A, l->W, l->bias, l->D, l->dt, l->M, l->N, l->K, l->gelu, way - 1,
                                     (tp_stream)l->s);
    int rc = tp_gemm_run_q(l->gemm, way == WAY_FAST ? l->plan_fast : l->plan, l->A, l->W, l->bias,
                           l->res ? l->R : NULL, l->gelu ? l->H : l->D, as, ws, NULL, 1.0f, (tp_stream)l->s);
    if (!rc && l->gelu) rc = tpk_gelu(l->H, hdt, l->D, ddt, ds, (size_t)l->M * l->N, 0, (tp_stream)l->s);
    return rc;
}

/* n normal values (std) in dt on the device; E4M3 with the per-tensor scale amax / 448 (into *scale). The values
 * as stored (decoded, times the scale) into *host for the fp64 reference. */
static void *upload(tp_dtype dt, size_t n, uint64_t seed, double std, float *scale, float **host) {
    tp_rng r;
    const size_t es = tp_dtype_info(dt)->bytes;
    float *x = malloc(n * sizeof(float));
    unsigned char *t = malloc(n * es);
    void *d = NULL;
    if (!x || !t) exit(2);
    tp_rng_seed(&r, seed);
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(std * tp_rng_normal(&r));
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    }
    const float sc = dt == TP_E4M3 ? amax / 448.0f : 1.0f;
    if (scale) *scale = sc;
    tp_convert_from_f32(dt, x, t, n, sc);
    tp_convert_to_f32(dt, t, x, n, sc);
    CK(cudaMalloc(&d, n * es));
    CK(cudaMemcpy(d, t, n * es, cudaMemcpyHostToDevice));
    free(t);
    *host = x;
    return d;
}

static double gelu_ref(double v) { return 0.5 * v * erfc(-v * 0.70710678118654752440); }

/* the fp64 reference on rows 0, 61, 122, ... (M, N row-major, other rows unset); R: the residual or NULL */
#define REF_STEP 61
static double *fp64_ref(const float *A, const float *W, const float *bias, const float *R, int M, int N, int K,
                        int gelu) {
    double *r = malloc(sizeof(double) * (size_t)M * N);
    if (!r) exit(2);
    for (int m = 0; m < M; m += REF_STEP)
        for (int n = 0; n < N; n++) {
            double v = (double)bias[n] + (R ? R[(size_t)m * N + n] : 0.0);
            for (int k = 0; k < K; k++) v += (double)A[(size_t)m * K + k] * W[(size_t)n * K + k];
            r[(size_t)m * N + n] = gelu ? gelu_ref(v) : v;
        }
    return r;
}

/* relative L2 distance of out (M, N; decoded) to fp64_ref's rows */
static double rel_vs_fp64(const float *out, const double *ref, int M, int N) {
    double num = 0, den = 0;
    for (int m = 0; m < M; m += REF_STEP)
        for (int n = 0; n < N; n++) {
            const double v = ref[(size_t)m * N + n], e = (double)out[(size_t)m * N + n] - v;
            num += e * e, den += v * v;
        }
    return den > 0 ? sqrt(num / den) : 0.0;
}

/* median of `runs` timed calls of way (after 10 warmups), min and max into lo, hi; us */
static float time_way(const lab *l, int way, int runs, cudaEvent_t *ev, float *t, float *lo, float *hi) {
    for (int i = 0; i < 10; i++) CK(run_way(l, way));
    for (int i = 0; i < runs; i++) {
        CK(cudaEventRecord(ev[2 * i], l->s));
        CK(run_way(l, way));
        CK(cudaEventRecord(ev[2 * i + 1], l->s));
    }
    return lab_event_median(l->s, ev, runs, t, lo, hi);
}

int main(int argc, char **argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 50, B = argc > 2 ? atoi(argv[2]) : 64;
    const char *ty = argc > 3 ? argv[3] : "f16";
    const tp_dtype dt = strcmp(ty, "bf16") == 0 ? TP_BF16 : strcmp(ty, "fp8") == 0 ? TP_E4M3 : TP_F16;
    const int f8 = dt == TP_E4M3;
    if (runs < 1 || B < 1 || (strcmp(ty, "bf16") != 0 && strcmp(ty, "f16") != 0 && strcmp(ty, "fp8") != 0)) {
        fprintf(stderr, "usage: gemm_lab [runs >= 1] [batch >= 1] [f16|bf16|fp8]\n");
        return 2;
    }
    if (!tpk_gemm_sm90_supported()) {
        fprintf(stderr, "gemm_lab: tpk_gemm_sm90 needs a compute capability 9.0 GPU\n");
        return 2;
    }
    static const shape shapes[] = {{"fc1 + GELU", 3072, 768, 1, 0},    {"fc1", 3072, 768, 0, 0},
                                   {"qkv", 2304, 768, 0, 0},           {"proj", 768, 768, 0, 0},
                                   {"fc2", 768, 3072, 0, 0},           {"proj + residual", 768, 768, 0, 1},
                                   {"fc2 + residual", 768, 3072, 0, 1}};
    const int M = B * 197;
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("gemm_lab: %s; ViT-B/16 batch %d (M %d), %s, %d runs; cuBLASLt %zu (best of its heuristic candidates)\n",
           prop.name, B, M, f8 ? "e4m3 operands, f16 bias" : tp_dtype_info(dt)->name, runs, tp_gemm_lib_version());
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
        if (sh->res && !f8) continue; /* tpk_gemm_sm90 (16-bit) has no residual epilogue */
        l.N = sh->N, l.K = sh->K, l.gelu = sh->gelu, l.res = sh->res;
        const size_t nD = (size_t)M * l.N;
        const tp_dtype hdt = f8 ? TP_F16 : dt, ddt = f8 && l.gelu ? TP_E4M3 : hdt; /* GEMM output, final output */
        const size_t dsz = tp_dtype_info(ddt)->bytes;
        float sc[3] = {1.0f, 1.0f, 1.0f}, *hA, *hW, *hb, *hR = NULL;
        l.A = upload(dt, (size_t)M * l.K, 10 + si, 1.0, &sc[0], &hA);
        l.W = upload(dt, (size_t)l.N * l.K, 20 + si, 0.03, &sc[1], &hW);
        l.bias = upload(hdt, (size_t)l.N, 30 + si, 0.5, NULL, &hb);
        l.R = l.res ? upload(TP_F16, nD, 40 + si, 1.0, NULL, &hR) : NULL;
        CK(cudaMalloc(&l.D, nD * 2));
        CK(cudaMalloc(&l.H, nD * 2));
        CK(cudaMalloc((void **)&l.scales, 12 * sizeof(float)));
        for (int k = 0; k < 3; k++) CK(cudaMemcpy(l.scales + 4 * k, &sc[k], sizeof(float), cudaMemcpyHostToDevice));
        tp_gemm_desc d = {M, l.N, l.K, dt, hdt, 1, 0, 0, l.res, 0, 0};
        if (tp_gemm_plan_create(l.gemm, &d, sh->name, &l.plan, &err)) {
            fprintf(stderr, "cuBLASLt: %s\n", err.msg);
            return 2;
        }
        l.plan_fast = NULL;
        d.fast_accum = 1;
        if (f8 && tp_gemm_plan_create(l.gemm, &d, sh->name, &l.plan_fast, &err)) {
            fprintf(stderr, "cuBLASLt: %s\n", err.msg);
            return 2;
        }
        /* cuBLASLt's candidates, the fastest kept (the GEMM alone); with FAST_ACCUM too for E4M3 */
        int best = 0, best_fast = 0;
        float lo, hi;
        const int gelu = l.gelu;
        l.gelu = 0;
        for (int pf = 0; pf <= f8; pf++) {
            tp_gemm_plan *pp = pf ? l.plan_fast : l.plan;
            float best_t = 1e30f;
            int b = 0;
            for (int k = 0; k < tp_gemm_plan_candidates(pp); k++) {
                tp_gemm_plan_select(pp, k);
                const float m = time_way(&l, pf ? WAY_FAST : 0, runs < 20 ? runs : 20, ev, t, &lo, &hi);
                if (m < best_t) best_t = m, b = k;
            }
            tp_gemm_plan_select(pp, b);
            if (pf) best_fast = b;
            else best = b;
        }
        l.gelu = gelu;
        if (f8 && gelu) { /* the GELU output's scale: its amax (over cuBLASLt's F16 GEMM output) / 448 */
            uint16_t *h = malloc(nD * 2);
            if (!h) return 2;
            CK(tp_gemm_run(l.gemm, l.plan, l.A, l.W, l.bias, l.H, l.scales, l.scales + 4, (tp_stream)l.s));
            CK(cudaStreamSynchronize(l.s));
            CK(cudaMemcpy(h, l.H, nD * 2, cudaMemcpyDeviceToHost));
            float amax = 0.0f;
            for (size_t i = 0; i < nD; i++) {
                float v;
                tp_convert_to_f32(TP_F16, h + i, &v, 1, 1.0f);
                v = (float)gelu_ref(v);
                if (fabsf(v) > amax) amax = fabsf(v);
            }
            sc[2] = amax / 448.0f;
            CK(cudaMemcpy(l.scales + 8, &sc[2], sizeof(float), cudaMemcpyHostToDevice));
            free(h);
        }
        float *ref = malloc(nD * sizeof(float)), *got = malloc(nD * sizeof(float));
        unsigned char *raw = malloc(nD * dsz);
        double *r64 = fp64_ref(hA, hW, hb, hR, M, l.N, l.K, gelu);
        if (!ref || !got || !raw) return 2;
        const double flop = 2.0 * M * l.N * l.K;
        const int ways[] = {0, WAY_FAST, 1, 2, 3};
        for (int wi = 0; wi < 5; wi++) {
            const int way = ways[wi];
            if ((way == WAY_FAST && !f8) || (way == 2 && l.res) || (way == 3 && (!f8 || ddt != TP_F16))) continue;
            CK(cudaMemsetAsync(l.D, 0xFF, nD * dsz, l.s)); /* NaN in f16, bf16 and e4m3 */
            int rc = run_way(&l, way);
            if (rc) {
                fprintf(stderr, "%s way %d: error %d\n", sh->name, way, rc);
                return 2;
            }
            CK(cudaStreamSynchronize(l.s));
            CK(cudaMemcpy(raw, l.D, nD * dsz, cudaMemcpyDeviceToHost));
            float *a = way ? got : ref;
            tp_convert_to_f32(ddt, raw, a, nD, sc[2]);
            size_t nonfinite = 0;
            double num = 0, den = 0;
            for (size_t i = 0; i < nD; i++) {
                if (!isfinite(a[i])) nonfinite++;
                num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]), den += (double)ref[i] * ref[i];
            }
            const double rel = den > 0 ? sqrt(num / den) : 0.0;
            const double rel64 = rel_vs_fp64(a, r64, M, l.N);
            const float med = time_way(&l, way, runs, ev, t, &lo, &hi);
            char name[96];
            if (way == WAY_FAST)
                snprintf(name, sizeof name, "%s %s", sh->name,
                         gelu ? "cuBLASLt fast-accum + tpk_gelu" : "cuBLASLt fast-accum");
            else if (way)
                snprintf(name, sizeof name, "%s tprof sm90 v%d%s", sh->name, way - 1, gelu ? ", GELU in epilogue" : "");
            else
                snprintf(name, sizeof name, "%s %s", sh->name, gelu ? "cuBLASLt + tpk_gelu" : "cuBLASLt");
            char algo[48] = "";
            if (!way) snprintf(algo, sizeof algo, "  (algo %d of %d)", best, tp_gemm_plan_candidates(l.plan));
            if (way == WAY_FAST)
                snprintf(algo, sizeof algo, "  (algo %d of %d)", best_fast, tp_gemm_plan_candidates(l.plan_fast));
            printf("%-46s median %8.1f us  min %8.1f  max %8.1f  %6.1f TFLOP/s  rel L2 vs cuBLASLt %.2e  vs fp64 "
                   "%.2e  non-finite %zu%s\n",
                   name, med, lo, hi, flop / (med * 1e-6) / 1e12, rel, rel64, nonfinite, algo);
            /* E4M3 outputs: codes one step apart where the two paths' fp32 values straddle a rounding midpoint */
            bad |= nonfinite > 0 || rel > (ddt == TP_E4M3 ? 5e-2 : 1e-2);
        }
        free(ref), free(got), free(raw), free(r64), free(hA), free(hW), free(hb), free(hR);
        if (l.R) CK(cudaFree(l.R));
        CK(cudaFree(l.scales));
        tp_gemm_plan_destroy(l.plan);
        tp_gemm_plan_destroy(l.plan_fast);
        CK(cudaFree(l.A));
        CK(cudaFree(l.W));
        CK(cudaFree(l.bias));
        CK(cudaFree(l.D));
        CK(cudaFree(l.H));
    }
    return bad;
}
