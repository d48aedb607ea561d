/* wo_gemm_lab.c: weight-only FP8 and NVFP4 prefill GEMMs (issue 43 item 2) at Llama shapes, eight ways in one process on
 * one GPU, D (M, N) = A (M, K) W (N, K)^T in F16 (or BF16):
 *   "16-bit W"   cuBLASLt on 16-bit weights: what an fp16 engine runs, the time to match;
 *   "sm90 16"    tprof's Hopper GEMM (tpk_gemm_sm90) on the same 16-bit weights: the converting GEMMs' pipeline
 *                without the conversion, their ceiling;
 *   "dequant"    tpk_e4m3_to_16bit into a scratch weight, then cuBLASLt on it: today's fp8-wo prefill (its scale in
 *                alpha), both kernels timed as one;
 *   "sm90 wo"    tpk_gemm_sm90_wo_fp8 (gemm_sm90.h): E4M3 weights converted to 16 bits in shared memory stage by
 *                stage, no dequantized copy;
 *   "cutlass", "cutlass64": tp_cutlass_wo_fp8 (vendor/gemm_cutlass.h): CUTLASS's Hopper mixed-input GEMM, the
 *                E4M3 weights converted in registers, in 128 x 128 and 64 x 128 tiles of D (skipped, saying why, in a
 *                build without CUTLASS's headers);
 *   "dequant4", "sm90 wo4": the same two for NVFP4 weights (tpk_nvfp4_to_16bit; tpk_gemm_sm90_wo_nvfp4).
 * Shapes: Llama-3.1-8B's q/o (4096 x 4096), k/v (1024 x 4096), gate/up (14336 x 4096), down (4096 x 14336), and
 * Llama-3.2-1B's q/o (2048 x 2048), gate/up (8192 x 2048), down (2048 x 8192), at M = 512 (pp512, batch 1) and
 * M = 2048 (--m to change the first). cuBLASLt at its best: every heuristic candidate timed, the fastest kept.
 * Checks: every way's output finite after a NaN-poisoned run; "sm90 16" against "16-bit W", "sm90 wo" and the cutlass ways against
 * "dequant", "sm90 wo4" against "dequant4" (the same products, fp32 sums in other orders): rel L2 <= 1e-2 (~1e-3
 * expected). Timing: 5 warmups, then `runs` (default 30) each
 * between two CUDA events; median, min, max in us and the median's TFLOP/s (2 M N K).
 * Build: cmake --build <build dir> --target wo_gemm_lab. Run: ./wo_gemm_lab [runs] [f16|bf16] [M].
 * Exit status: 0; 1 when an output is not finite or a tprof way disagrees with its cuBLASLt way; 2 on a CUDA or cuBLAS error, bad
 * arguments, or a device that does not run tprof's Hopper GEMM. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_common.h"
#include "exec/cuda/gemm/gemm_sm90.h"
#include "exec/cuda/gemm/gemv.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/vendor/gemm_cutlass.h"
#include "formats/dtype.h"

typedef struct {
    const char *name;
    int N, K;
} shape;

static const shape SHAPES[] = {
    {"8b q/o", 4096, 4096},   {"8b k/v", 1024, 4096},  {"8b gate/up", 14336, 4096}, {"8b down", 4096, 14336},
    {"1b q/o", 2048, 2048},   {"1b gate/up", 8192, 2048}, {"1b down", 2048, 8192},
};
enum { WAY_16 = 0, WAY_SM16, WAY_DEQ, WAY_WO, WAY_CUT, WAY_CUT64, WAY_DEQ4, WAY_WO4, WAYS };
static const char *const WAY_NAME[WAYS] = {"16-bit W", "sm90 16",   "dequant",  "sm90 wo",
                                           "cutlass",  "cutlass64", "dequant4", "sm90 wo4"};

typedef struct {
    int way, M, N, K;
    tp_dtype dt;
    const void *A, *W16, *W8, *W4, *S4; /* W4, S4: NVFP4 codes and block scales */
    void *Wdq, *D;
    const float *ws;
    float alpha;
    tp_gemm_ctx *ctx;
    tp_gemm_plan *plan;
    cudaStream_t s;
} call;

static void run(const call *c) {
    switch (c->way) {
    case WAY_16: CK(tp_gemm_run(c->ctx, c->plan, c->A, c->W16, NULL, c->D, NULL, NULL, c->s)); break;
    case WAY_SM16: CK(tpk_gemm_sm90(c->A, c->W16, NULL, c->D, c->dt, c->M, c->N, c->K, 0, (tp_stream)c->s)); break;
    case WAY_DEQ:
        CK(tpk_e4m3_to_16bit(c->W8, c->Wdq, c->dt, (long long)c->N * c->K, (tp_stream)c->s));
        CK(tp_gemm_run_alpha(c->ctx, c->plan, c->A, c->Wdq, NULL, c->D, NULL, NULL, c->alpha, c->s));
        break;
    case WAY_WO:
        CK(tpk_gemm_sm90_wo_fp8(c->A, c->W8, c->ws, NULL, NULL, c->D, c->dt, c->M, c->N, c->K, (tp_stream)c->s));
        break;
    case WAY_CUT:
        CK(tp_cutlass_wo_fp8(c->A, c->W8, c->ws, NULL, c->D, c->dt, c->M, c->N, c->K, TP_CUTLASS_TILE_128X128,
                             (tp_stream)c->s));
        break;
    case WAY_CUT64:
        CK(tp_cutlass_wo_fp8(c->A, c->W8, c->ws, NULL, c->D, c->dt, c->M, c->N, c->K, TP_CUTLASS_TILE_64X128,
                             (tp_stream)c->s));
        break;
    case WAY_DEQ4:
        CK(tpk_nvfp4_to_16bit(c->W4, c->S4, c->Wdq, c->dt, c->N, c->K, (tp_stream)c->s));
        CK(tp_gemm_run_alpha(c->ctx, c->plan, c->A, c->Wdq, NULL, c->D, NULL, NULL, c->alpha, c->s));
        break;
    default:
        CK(tpk_gemm_sm90_wo_nvfp4(c->A, c->W4, c->S4, c->ws, NULL, NULL, c->D, c->dt, c->M, c->N, c->K,
                                  (tp_stream)c->s));
    }
}

static float time_call(const call *c, int runs, cudaEvent_t *ev, float *t, float *lo, float *hi) {
    for (int i = 0; i < 5; i++) run(c);
    for (int i = 0; i < runs; i++) {
        CK(cudaEventRecord(ev[2 * i], c->s));
        run(c);
        CK(cudaEventRecord(ev[2 * i + 1], c->s));
    }
    return lab_event_median(c->s, ev, runs, t, lo, hi);
}

/* the fastest of the plan's cuBLASLt candidates for call c (10 runs each), selected */
static void pick_best(call *c, cudaEvent_t *ev, float *t) {
    int best = 0;
    float bt = 1e30f, lo, hi;
    for (int k = 0; k < tp_gemm_plan_candidates(c->plan); k++) {
        tp_gemm_plan_select(c->plan, k);
        const float m = time_call(c, 10, ev, t, &lo, &hi);
        if (m < bt) bt = m, best = k;
    }
    tp_gemm_plan_select(c->plan, best);
}

/* D downloaded as floats; the count of non-finite values */
static size_t fetch(const call *c, float *out, void *raw) {
    const size_t n = (size_t)c->M * c->N;
    CK(cudaStreamSynchronize(c->s));
    CK(cudaMemcpy(raw, c->D, n * 2, cudaMemcpyDeviceToHost));
    tp_convert_to_f32(c->dt, raw, out, n, 1.0f);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(out[i]);
    return bad;
}

int main(int argc, char **argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 30;
    const tp_dtype dt = argc > 2 && strcmp(argv[2], "bf16") == 0 ? TP_BF16 : TP_F16;
    const int M0 = argc > 3 ? atoi(argv[3]) : 512;
    if (runs < 5 || runs > 1000 || M0 < 1 || (argc > 2 && strcmp(argv[2], "bf16") && strcmp(argv[2], "f16"))) {
        fprintf(stderr, "usage: wo_gemm_lab [runs 5..1000] [f16|bf16] [M >= 1]\n");
        return 2;
    }
    if (!tpk_gemm_sm90_supported()) {
        fprintf(stderr, "wo_gemm_lab: tprof's Hopper GEMM does not run on this device (compute capability 9.0 only)\n");
        return 2;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaEvent_t ev[2000];
    for (int i = 0; i < 2 * runs + 20 && i < 2000; i++) CK(cudaEventCreate(&ev[i]));
    float *t = malloc(sizeof(float) * 1000);
    tp_gemm_ctx *ctx = NULL;
    tp_error err;
    if (!t || tp_gemm_ctx_create(32u << 20, &ctx, &err)) {
        fprintf(stderr, "cuBLASLt: %s\n", t ? err.msg : "out of host memory");
        return 2;
    }
    char why[160] = "";
    const int have_cut = tp_cutlass_available(why, sizeof why);
    printf("wo_gemm_lab: %s, %d SMs; activations %s; %d runs after 5 warmups; cuBLASLt %zu; CUTLASS %s\n", prop.name,
           prop.multiProcessorCount, tp_dtype_info(dt)->name, runs, tp_gemm_lib_version(), tp_cutlass_version());
    if (!have_cut) printf("(the cutlass way skipped: %s)\n", why);
    printf("%-11s %5s %6s %6s | %-9s %9s %9s %9s %8s  %s\n", "shape", "M", "N", "K", "way", "us med", "min", "max",
           "TFLOP/s", "check");
    int bad = 0;
    const int Ms[2] = {M0, 2048};
    for (int si = 0; si < (int)(sizeof SHAPES / sizeof SHAPES[0]); si++)
        for (int mi = 0; mi < (M0 == 2048 ? 1 : 2); mi++) {
            const int M = Ms[mi], N = SHAPES[si].N, K = SHAPES[si].K;
            const size_t nA = (size_t)M * K, nW = (size_t)N * K, nD = (size_t)M * N;
            void *A, *W16, *W8, *W4, *S4, *Wdq, *D;
            float *ws;
            CK(cudaMalloc(&A, nA * 2));
            CK(cudaMalloc(&W16, nW * 2));
            CK(cudaMalloc(&W8, nW));
            CK(cudaMalloc(&W4, nW / 2));
            CK(cudaMalloc(&S4, nW / 16));
            CK(cudaMalloc(&Wdq, nW * 2));
            CK(cudaMalloc(&D, nD * 2));
            CK(cudaMalloc((void **)&ws, sizeof(float)));
            CK(tpk_fill_uniform(A, dt, nA, 1 + (uint64_t)si, (tp_stream)s));
            CK(tpk_fill_uniform(W8, TP_E4M3, nW, 100 + (uint64_t)si, (tp_stream)s)); /* codes of uniform values */
            CK(tpk_e4m3_to_16bit(W8, W16, dt, (long long)nW, (tp_stream)s));      /* the same weights in 16 bits */
            /* NVFP4: any byte is two valid E2M1 codes; scales: E4M3 codes of uniform values (never NaN) */
            CK(tpk_fill_uniform(W4, TP_E4M3, nW / 2, 200 + (uint64_t)si, (tp_stream)s));
            CK(tpk_fill_uniform(S4, TP_E4M3, nW / 16, 300 + (uint64_t)si, (tp_stream)s));
            const float one = 1.0f / 64.0f;
            CK(cudaMemcpy(ws, &one, sizeof one, cudaMemcpyHostToDevice));
            tp_gemm_desc d;
            memset(&d, 0, sizeof d);
            d.M = M, d.N = N, d.K = K, d.ab_dt = dt, d.d_dt = dt;
            tp_gemm_plan *plan16 = NULL, *plandq = NULL;
            if (tp_gemm_plan_create(ctx, &d, SHAPES[si].name, &plan16, &err) ||
                tp_gemm_plan_create(ctx, &d, SHAPES[si].name, &plandq, &err)) {
                fprintf(stderr, "cuBLASLt: %s\n", err.msg);
                return 2;
            }
            float *out[WAYS];
            void *raw = malloc(nD * 2);
            for (int w = 0; w < WAYS; w++) out[w] = malloc(nD * sizeof(float));
            for (int w = 0; w < WAYS; w++)
                if (!out[w]) return 2;
            if (!raw) return 2;
            for (int w = 0; w < WAYS; w++) {
                if ((w == WAY_CUT || w == WAY_CUT64) && !have_cut) continue;
                call c = {w, M, N, K, dt, A, W16, W8, W4, S4, Wdq, D, ws, one, ctx, w == WAY_16 ? plan16 : plandq, s};
                if (w == WAY_16 || w == WAY_DEQ || w == WAY_DEQ4) pick_best(&c, ev, t);
                CK(cudaMemset(D, 0xFF, nD * 2));
                run(&c);
                const size_t nonfinite = fetch(&c, out[w], raw);
                float lo, hi;
                const float med = time_call(&c, runs, ev, t, &lo, &hi);
                char check[80] = "ok (finite)";
                if (nonfinite) snprintf(check, sizeof check, "NON-FINITE: %zu", nonfinite), bad = 1;
                const int cut = w == WAY_CUT || w == WAY_CUT64;
                if ((w == WAY_SM16 || w == WAY_WO || cut || w == WAY_WO4) && !nonfinite) { /* against its cuBLASLt way */
                    const int ref = w == WAY_SM16 ? WAY_16 : w == WAY_WO || cut ? WAY_DEQ : WAY_DEQ4;
                    double num = 0, den = 0;
                    for (size_t i = 0; i < nD; i++) {
                        const double e = (double)out[w][i] - out[ref][i];
                        num += e * e, den += (double)out[ref][i] * out[ref][i];
                    }
                    const double rel = den > 0 ? sqrt(num / den) : 0.0;
                    snprintf(check, sizeof check, "rel L2 vs %s %.1e", WAY_NAME[ref], rel);
                    if (!(rel <= 1e-2)) bad = 1;
                }
                printf("%-11s %5d %6d %6d | %-9s %9.1f %9.1f %9.1f %8.1f  %s\n", SHAPES[si].name, M, N, K,
                       WAY_NAME[w], med, lo, hi, 2.0 * M * N * K / (med * 1e-6) / 1e12, check);
                fflush(stdout);
            }
            tp_gemm_plan_destroy(plan16);
            tp_gemm_plan_destroy(plandq);
            for (int w = 0; w < WAYS; w++) free(out[w]);
            free(raw);
            CK(cudaFree(A));
            CK(cudaFree(W16));
            CK(cudaFree(W8));
            CK(cudaFree(W4));
            CK(cudaFree(S4));
            CK(cudaFree(Wdq));
            CK(cudaFree(D));
            CK(cudaFree(ws));
        }
    tp_gemm_ctx_destroy(ctx);
    free(t);
    return bad;
}
