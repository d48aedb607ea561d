/* test_gpu_gemm_sm90.c: tprof's Hopper GEMM (tpk_gemm_sm90 and, with E4M3 operands, tpk_gemm_sm90_fp8;
 * src/exec/cuda/gemm/gemm_sm90.h) against an fp64 CPU reference, on the GPU, element by element. The FP8 test's bounds
 * are at test_gemm_sm90_fp8; the 16-bit ones follow.
 *
 * Reference: v = sum_k A[m,k] W[n,k] + bias[n] in fp64 over the inputs as stored (rounded to F16/BF16 first), then
 * GELU(v) = 0.5 v erfc(-v / sqrt 2) in fp64 when asked. Bound per element, from the format (docs/
 * formats.md: unit roundoff 2^-11 for F16, 2^-8 for BF16):
 *   |got - ref| <= ulp_dt(ref) + 2 (K + 2) 2^-24 sum_k |A W| + 4e-7 |v|
 * one unit in the last place of the output type (RNE is half of one; the other half covers an accumulation error
 * that moves the exact value across a rounding midpoint), twice the classical worst-case bound of fp32 summation
 * (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 3.1: gamma_K sum |a_k b_k|; the factor 2 covers
 * the tensor cores' truncating additions, whose error per addition is up to one ulp instead of half, and GELU's
 * slope of at most 1.13 on random data, where the real error is ~sqrt(K) below the bound), and the erfc fit's error
 * (gelu.cuh: a few 1e-7 relative). Tight at small K (a tanh GELU, 4.7e-4 off at x = -2.7, fails at K 72); at
 * K 3072 the bound is ~18 f16 ulps and those shapes catch structural errors. A transposed operand, a wrong tile
 * offset, a skipped K step or a dropped bias is off by orders of magnitude more.
 * Outputs are poisoned (0xFF: NaN in F16 and BF16) with 64 poisoned elements past the end: an unwritten element
 * fails as NaN, a write past the end as touched poison.
 * Shapes (M, N, K): M in {1, 3, 197, 257, 577, 591} (batch 1 and 3 of ViT's 197 tokens, partial 128-row tiles);
 * N 8 .. 3072 (partial and several 128-column tiles); K 8, 72, 200, 264 (not multiples of 64: a partial last K
 * step zero-filled by TMA), 768 (12 steps: the 6-stage ring wraps twice), 3072 (fc2's K, 48 steps); M 1731 and
 * 2600 (336 and 378 tiles: both consumer warpgroups of a persistent CTA get tiles on a 132-SM GPU) and 3000 x 3072
 * x 136 (576 tiles, 3 K steps: 4-5 tiles per CTA, so each warpgroup waits on its turn barrier more than once and
 * the ring's phases run on across tiles; variant 1's 4-stage ring wraps 3 times at K 768). Each with and without
 * bias and GELU, F16 and BF16, in both kernel variants (tpk_gemm_sm90_variant; variant 1 must equal variant 0 bit
 * for bit: same arithmetic, other warps store it; its helper buffers alternate between the consumers over the
 * 576-tile shape's 4-5 tiles per CTA). Then graph capture (replay equal to an eager launch bit for bit), a chain
 * of kernels under programmatic dependent launch against the same chain serialized, and rejected arguments. On a device that is not compute capability 9.0 every call must be refused.
 * CPU work: about 4 G multiply-adds of fp64 per type. */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cuda/gemm/gemm_sm90.h"
#include "exec/cuda/vendor/gemm_cutlass.h"
#include "formats/dtype.h"
#include "formats/qformat.h"
#include "lab_variants.h" /* bench/: the lab-only kernel variants */

#define TP_GPU_MAX_TRACKED 1024
#include "gpu_check.h"
#include "attn_check.h"

Suite *gpu_gemm_sm90_suite(void);

static void setup(void) { gpu_setup(); }

static void teardown(void) {
    release_all();
    close_stream();
}

static const tp_dtype GT[] = {TP_F16, TP_BF16};

/* 1 on a compute capability 9.0 device; otherwise checks that the kernel refuses, prints why, and returns 0 */
static int hopper_or_refused(void) {
    if (tpk_gemm_sm90_supported()) return 1;
    char *buf = dev_alloc(TP_F16, 1 << 16);
    const int r = tpk_gemm_sm90(buf, buf, NULL, buf + 4096, TP_F16, 8, 8, 8, 0, g_stream);
    printf("  ok    gemm_sm90: not a compute capability 9.0 device: refused (%d), nothing else tested\n", r);
    fflush(stdout);
    ck_assert_int_eq(r, (int)cudaErrorInvalidValue);
    return 0;
}

/* one unit in the last place of dt at |x| (normal range; the subnormal spacing below it and at 0) */
static double ulp_of(tp_dtype dt, double x) {
    const int mant = dt == TP_F16 ? 10 : 7, emin = dt == TP_F16 ? -14 : -126;
    int e = 0;
    frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
    if (x == 0.0 || e - 1 < emin) e = emin + 1;
    return ldexp(1.0, e - 1 - mant);
}

static double gelu_ref(double v) { return 0.5 * v * erfc(-v * 0.70710678118654752440); }

/* v (M, N) = A (M, K) W (N, K)^T in fp64 and mag = the same sums of |A W| (the accumulation bounds' scale) */
static void ref_products(const float *A, const float *W, int M, int N, int K, double *v, double *mag) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0, a = 0.0;
            for (int k = 0; k < K; k++) {
                const double p = (double)A[(size_t)m * K + k] * W[(size_t)n * K + k];
                s += p, a += fabs(p);
            }
            v[(size_t)m * N + n] = s, mag[(size_t)m * N + n] = a;
        }
}

START_TEST(test_gemm_sm90) {
    if (!hopper_or_refused()) return;
    const tp_dtype dt = GT[_i];
    static const int shapes[][3] = {{197, 64, 72}, {591, 136, 200}, {257, 256, 768}, {577, 3072, 768},
                                    {197, 768, 3072}, {3, 8, 8},    {1, 2304, 64},  {1731, 3072, 72},
                                    {2600, 2304, 264}, {3000, 3072, 136}};
    uint64_t seed = 26000 + 100 * (uint64_t)_i;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
        const size_t nA = (size_t)M * K, nW = (size_t)N * K, nD = (size_t)M * N;
        float *A = host_normal(nA, seed++, 0.0, 1.0), *W = host_normal(nW, seed++, 0.0, 0.05);
        float *bias = host_normal((size_t)N, seed++, 0.0, 0.5);
        round_to(dt, A, nA);
        round_to(dt, W, nW);
        round_to(dt, bias, (size_t)N);
        double *v = hmalloc(nD * sizeof(double)), *mag = hmalloc(nD * sizeof(double));
        ref_products(A, W, M, N, K, v, mag);
        void *d_A = dev_upload(dt, A, nA, nA), *d_W = dev_upload(dt, W, nW, nW);
        void *d_bias = dev_upload(dt, bias, (size_t)N, (size_t)N);
        const float *v0 = NULL; /* variant 0's output of the current (bias, gelu) */
        for (int has_bias = 0; has_bias <= 1; has_bias++)
            for (int gelu = 0; gelu <= 1; gelu++)
                for (int variant = 0; variant <= 1; variant++) {
                    SET_CASE("gemm_sm90 v%d %s M=%d N=%d K=%d bias=%d gelu=%d", variant, dname(dt), M, N, K, has_bias,
                             gelu);
                    void *d_D = dev_alloc(dt, nD + 64);
                    KERNEL_OK(tpk_gemm_sm90_variant(d_A, d_W, has_bias ? d_bias : NULL, d_D, dt, M, N, K, gelu,
                                                    variant, g_stream));
                    const float *got = download_f32(dt, d_D, nD, 1.0f);
                    size_t bad = 0, worst = 0;
                    double worst_ratio = 0.0;
                    for (size_t i = 0; i < nD; i++) {
                        const double x = v[i] + (has_bias ? bias[i % (size_t)N] : 0.0), ref = gelu ? gelu_ref(x) : x;
                        const double tol = ulp_of(dt, ref) + 2.0 * (K + 2) * 0x1p-24 * mag[i] + 4e-7 * fabs(x);
                        const double err = fabs((double)got[i] - ref);
                        if (!(err <= tol)) bad++; /* NaN counts */
                        const double ratio = isfinite(err) ? err / tol : INFINITY;
                        if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
                    }
                    const double x = v[worst] + (has_bias ? bias[worst % (size_t)N] : 0.0);
                    printf("  %s  %s: %zu of %zu outside the bound; worst err/bound %.3f at [%zu,%zu] got %.7g ref "
                           "%.7g\n",
                           bad ? "FAIL" : "ok  ", g_case, bad, nD, worst_ratio, worst / (size_t)N, worst % (size_t)N,
                           got[worst], gelu ? gelu_ref(x) : x);
                    fflush(stdout);
                    ck_assert_msg(bad == 0, "[%s] %zu of %zu elements outside the bound (worst at %zu: got %.7g)",
                                  g_case, bad, nD, worst, got[worst]);
                    check_untouched("D past its end", d_D, nD * esize(dt), (nD + 64) * esize(dt));
                    if (variant == 0) v0 = got;
                    else /* the same arithmetic, other warps store it: bit for bit */
                        ck_assert_msg(memcmp(got, v0, nD * sizeof(float)) == 0, "[%s] differs from variant 0", g_case);
                }
    }
}
END_TEST

/* ---- weight-only FP8 and NVFP4 (tpk_gemm_sm90_wo_fp8, _nvfp4): weights converted to the activations' type in shared
 * memory -------------------------------------------------------------------------------------------------------------
 * Weights: normal (std 0.05) with every 97th value 20x larger. FP8: E4M3 codes under a per-tensor scale amax / 448
 * (tp_f32_to_e4m3 of w / s: the host codec, formats/dtype.h). NVFP4: tp_quantize(TP_QF_NVFP4) (packed E2M1 codes,
 * row-major UE4M3 block scales, s2), the values e2m1 x ue4m3 from tp_qdq_f32 (s2 apart). The reference multiplies A by
 * those values and scales the fp64 sum: ref = s sum_k A w + bias [+ R] (s: the FP8 scale or s2). Bound as
 * test_gemm_sm90's (the converted weights are exact in FP16 and BF16, so the arithmetic is the 16-bit kernel's), plus
 * 2^-22 of the scaled value for the epilogue's multiply by s. Shapes: M 1, 3, 128, 197, 257, 512 and 2600 (batch 1,
 * ViT's tokens, a prefill of 512; 2600 x 2048: 336 tiles, so both consumer warpgroups of a CTA take tiles); N 8 ..
 * 4096; K from one partial step to 48 steps (the ring wraps 8 times), FP8 K % 16, NVFP4 K % 32 (800: 12.5 steps, the
 * last half zero-filled, its block scales past K never read); bias, the residual in its own buffer and in place
 * (R == D); F16 and BF16. A wrong swizzle, nibble order or block scale, a conversion of the wrong part of the tile or
 * a stage read before its conversion is off by far more. The same cases for CUTLASS's mixed-input GEMM on the FP8
 * weights (vendor/gemm_cutlass.h), without the bias (its epilogue has none): the weights converted in registers are
 * the same exact 16-bit values, so the same bound. CPU work: about 3.5 G multiply-adds of fp64 per type and kernel. */
START_TEST(test_gemm_sm90_wo) {
    if (!hopper_or_refused()) return;
    const tp_dtype dt = GT[_i % N_OF(GT)];
    const int fp4 = _i / (int)N_OF(GT) == 1, cut = _i / (int)N_OF(GT) == 2; /* cut: CUTLASS's mixed-input GEMM */
    char why[160];
    if (cut && !tp_cutlass_available(why, sizeof why)) {
        printf("  skipped: CUTLASS's weight-only FP8 GEMM (%s)\n", why);
        return;
    }
    static const int shapes8[][3] = {{197, 64, 48},  {1, 4096, 784},   {128, 1024, 4096}, {3, 8, 16},
                                     {2600, 2048, 80}, {257, 136, 3072}, {512, 512, 3072}};
    static const int shapes4[][3] = {{197, 64, 96},  {1, 4096, 800},   {128, 1024, 4096}, {3, 8, 32},
                                     {2600, 2048, 96}, {257, 136, 3072}, {512, 512, 3072}};
    const char *fmt = fp4 ? "nvfp4" : cut ? "fp8 cutlass" : "fp8";
    uint64_t seed = 29000 + 100 * (uint64_t)_i;
    for (size_t c = 0; c < N_OF(shapes8); c++) {
        const int M = fp4 ? shapes4[c][0] : shapes8[c][0], N = fp4 ? shapes4[c][1] : shapes8[c][1],
                  K = fp4 ? shapes4[c][2] : shapes8[c][2];
        const size_t nA = (size_t)M * K, nW = (size_t)N * K, nD = (size_t)M * N;
        float *A = host_normal(nA, seed++, 0.0, 1.0), *W = host_normal(nW, seed++, 0.0, 0.05);
        float *bias = host_normal((size_t)N, seed++, 0.0, 0.5), *R = host_normal(nD, seed++, 0.0, 1.0);
        for (size_t i = 0; i < nW; i += 97) W[i] *= 20.0f;
        round_to(dt, A, nA);
        round_to(dt, bias, (size_t)N);
        round_to(dt, R, nD);
        float ws = 0.0f; /* the scale the kernel applies: FP8's per-tensor scale or NVFP4's s2 */
        void *d_W = NULL, *d_sc = NULL;
        float *wd = hmalloc(nW * sizeof(float)); /* the weights' values without ws */
        if (fp4) {
            tp_qtensor q;
            tp_error e;
            ck_assert_msg(tp_quantize(TP_QF_NVFP4, W, N, K, 1, 0.0f, &q, &e) == TP_OK, "%s", e.msg);
            ck_assert_msg(tp_qdq_f32(TP_QF_NVFP4, W, wd, N, K, 1, 0.0f, &ws, &e) == TP_OK, "%s", e.msg);
            ck_assert_msg(ws == q.global_scale, "[%s] s2 %g against tp_quantize's %g", g_case, ws, q.global_scale);
            d_W = dev_bytes(q.elem_bytes);
            d_sc = dev_bytes(q.scale_bytes);
            CUDA_OK(cudaMemcpy(d_W, q.elems, q.elem_bytes, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(d_sc, q.scales, q.scale_bytes, cudaMemcpyHostToDevice));
            tp_qtensor_free(&q);
        } else {
            float amax = 0.0f;
            for (size_t i = 0; i < nW; i++) amax = fmaxf(amax, fabsf(W[i]));
            ws = amax / 448.0f;
            unsigned char *codes = hmalloc(nW);
            for (size_t i = 0; i < nW; i++) {
                codes[i] = tp_f32_to_e4m3(W[i] / ws);
                wd[i] = tp_e4m3_to_f32(codes[i]);
            }
            d_W = dev_bytes(nW);
            CUDA_OK(cudaMemcpy(d_W, codes, nW, cudaMemcpyHostToDevice));
        }
        double *v = hmalloc(nD * sizeof(double)), *mag = hmalloc(nD * sizeof(double));
        ref_products(A, wd, M, N, K, v, mag);
        void *d_A = dev_upload(dt, A, nA, nA), *d_bias = dev_upload(dt, bias, (size_t)N, (size_t)N);
        float *d_ws = dev_scalar(ws);
        /* epilogues: 0 none, 1 bias, 2 bias + residual, 3 bias + residual in place (R == D) */
        for (int ep = 0; ep < 4; ep++) {
            if (cut && ep == 1) continue; /* CUTLASS's: alpha acc + beta C, no bias */
            const int tile = (ep + (int)c) % TP_CUTLASS_TILES; /* CUTLASS's: each tile under each epilogue */
            SET_CASE("gemm_sm90_wo %s %s M=%d N=%d K=%d epilogue %d%s%s", fmt, dname(dt), M, N, K, ep,
                     cut ? " tile " : "", cut ? tp_cutlass_tile_name(tile) : "");
            void *d_D = ep == 3 ? dev_upload(dt, R, nD, nD + 64) : dev_alloc(dt, nD + 64);
            const void *d_R = ep == 2 ? dev_upload(dt, R, nD, nD) : ep == 3 ? d_D : NULL;
            const int has_b = ep && !cut;
            const void *d_b = has_b ? d_bias : NULL;
            KERNEL_OK(fp4   ? tpk_gemm_sm90_wo_nvfp4(d_A, d_W, d_sc, d_ws, d_b, d_R, d_D, dt, M, N, K, g_stream)
                      : cut ? tp_cutlass_wo_fp8(d_A, d_W, d_ws, d_R, d_D, dt, M, N, K, tile, g_stream)
                            : tpk_gemm_sm90_wo_fp8(d_A, d_W, d_ws, d_b, d_R, d_D, dt, M, N, K, g_stream));
            const float *got = download_f32(dt, d_D, nD, 1.0f);
            size_t bad = 0, worst = 0;
            double worst_ratio = 0.0, worst_ref = 0.0;
            for (size_t i = 0; i < nD; i++) {
                const double a = (double)ws * v[i], b = has_b ? bias[i % (size_t)N] : 0.0, r = ep >= 2 ? R[i] : 0.0;
                const double ref = a + b + r;
                const double tol = ulp_of(dt, ref) + 2.0 * (K + 2) * 0x1p-24 * ws * mag[i] +
                                   0x1p-22 * (fabs(a) + fabs(b) + fabs(r));
                const double err = fabs((double)got[i] - ref);
                if (!(err <= tol)) bad++;
                const double ratio = isfinite(err) ? err / tol : INFINITY;
                if (ratio > worst_ratio) worst_ratio = ratio, worst = i, worst_ref = ref;
            }
            printf("  %s  %s: %zu of %zu outside the bound; worst err/bound %.3f at [%zu,%zu] got %.7g ref %.7g\n",
                   bad ? "FAIL" : "ok  ", g_case, bad, nD, worst_ratio, worst / (size_t)N, worst % (size_t)N, got[worst],
                   worst_ref);
            fflush(stdout);
            ck_assert_msg(bad == 0, "[%s] %zu of %zu elements outside the bound", g_case, bad, nD);
            check_untouched("D past its end", d_D, nD * esize(dt), (nD + 64) * esize(dt));
        }
        release_all();
    }
    /* refusals: K not a multiple of 16 (FP8) or 32 (NVFP4), no scale, a misaligned scale or residual */
    char *buf = dev_bytes(1 << 20);
    const float *s = (const float *)(buf + 4096);
    const char *sc = buf + 2048, *A = buf, *Wt = buf + 8192;
    void *D = buf + 65536;
    const rejected_call r[] = {
        {"fp8: K 24", tpk_gemm_sm90_wo_fp8(A, Wt, s, NULL, NULL, D, dt, 8, 8, 24, g_stream)},
        {"fp8: NULL scale", tpk_gemm_sm90_wo_fp8(A, Wt, NULL, NULL, NULL, D, dt, 8, 8, 32, g_stream)},
        {"fp8: scale at +2", tpk_gemm_sm90_wo_fp8(A, Wt, (const float *)(buf + 4098), NULL, NULL, D, dt, 8, 8, 32,
                                                  g_stream)},
        {"fp8: residual at +8", tpk_gemm_sm90_wo_fp8(A, Wt, s, NULL, buf + 8, D, dt, 8, 8, 32, g_stream)},
        {"nvfp4: K 48", tpk_gemm_sm90_wo_nvfp4(A, Wt, sc, s, NULL, NULL, D, dt, 8, 8, 48, g_stream)},
        {"nvfp4: NULL block scales", tpk_gemm_sm90_wo_nvfp4(A, Wt, NULL, s, NULL, NULL, D, dt, 8, 8, 64, g_stream)},
        {"nvfp4: block scales at +1", tpk_gemm_sm90_wo_nvfp4(A, Wt, sc + 1, s, NULL, NULL, D, dt, 8, 8, 64, g_stream)},
        {"nvfp4: NULL s2", tpk_gemm_sm90_wo_nvfp4(A, Wt, sc, NULL, NULL, NULL, D, dt, 8, 8, 64, g_stream)},
    };
    check_rejected(r, sizeof r / sizeof r[0]);
}
END_TEST

/* x rounded in place to the E4M3 grid of scale (the values the kernel reads: code * scale) */
static void to_e4m3_grid(float *x, size_t n, float scale) {
    void *tmp = hmalloc(n);
    tp_convert_from_f32(TP_E4M3, x, tmp, n, scale);
    tp_convert_to_f32(TP_E4M3, tmp, x, n, scale);
}

/* one unit in the last place of E4M3 at |x| / scale, in real units (3 mantissa bits; below 2^-6 the subnormal
 * spacing 2^-9) */
static double ulp_e4m3(double x, double scale) {
    int e = 0;
    frexp(fabs(x) / scale, &e);
    if (x == 0.0 || e - 1 < -6) e = -5;
    return scale * ldexp(1.0, e - 1 - 3);
}

/* FP8 operands (tpk_gemm_sm90_fp8): A, W normal, rounded to E4M3 with per-tensor scales amax / 448; F16 bias;
 * reference v = sum_k A W + bias in fp64 over the decoded operands. Bound per element:
 *   F16 D:  ulp_f16(ref) + 1.13 acc + 4e-7 |v|;   E4M3 D:  ulp_e4m3(ref) + 1.13 acc + 1e-6 |v|
 * with acc = (ceil(K / 32) + 2) 2^-13 sum_k |A W|: the tensor cores' FP8 accumulation without promotion, taken to
 * keep about 14 bits per addition (DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv:2412.19437, 3.3.2: "limited to
 * retaining around 14 bits" on H800), one such rounding per k32 instruction plus the scale and the bias; 1.13 is
 * GELU's largest slope; the last term the erfc fits' error (gelu.cuh). One output ulp: RNE's half, and half for
 * an error that moves the value across a midpoint. d_scale of an E4M3 D: the reference's amax / 448 (no
 * saturation). A transposed operand, a wrong K step (128 E4M3 per stage instead of 64 16-bit ones), a missing
 * scale or bias is off by far more. Same shapes as the 16-bit test where N and K allow (N % 16, K % 16), F16 and
 * E4M3 outputs, with and without bias and GELU, the variants bit-identical (v2, 128 x 96 tiles: F16 D only; the
 * same k32 instructions in the same order per output). */
START_TEST(test_gemm_sm90_fp8) {
    if (!hopper_or_refused()) return;
    static const int shapes[][3] = {{197, 64, 80},    {591, 144, 208}, {257, 256, 768},   {577, 3072, 768},
                                    {197, 768, 3072}, {3, 16, 16},     {1, 2304, 64},     {1731, 3072, 80},
                                    {3000, 3072, 144}};
    uint64_t seed = 26500;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
        const size_t nA = (size_t)M * K, nW = (size_t)N * K, nD = (size_t)M * N;
        float *A = host_normal(nA, seed++, 0.0, 1.0), *W = host_normal(nW, seed++, 0.0, 0.05);
        float *bias = host_normal((size_t)N, seed++, 0.0, 0.5);
        const float as = host_amax(A, nA) / 448.0f, ws = host_amax(W, nW) / 448.0f;
        to_e4m3_grid(A, nA, as);
        to_e4m3_grid(W, nW, ws);
        round_to(TP_F16, bias, (size_t)N);
        double *v = hmalloc(nD * sizeof(double)), *mag = hmalloc(nD * sizeof(double));
        ref_products(A, W, M, N, K, v, mag);
        void *d_A = dev_alloc(TP_E4M3, nA), *d_W = dev_alloc(TP_E4M3, nW);
        upload_to(d_A, TP_E4M3, A, nA, as);
        upload_to(d_W, TP_E4M3, W, nW, ws);
        void *d_bias = dev_upload(TP_F16, bias, (size_t)N, (size_t)N);
        const float *d_as = dev_scalar(as), *d_ws = dev_scalar(ws);
        double *ref = hmalloc(nD * sizeof(double));
        const tp_dtype outs[] = {TP_F16, TP_E4M3};
        for (size_t o = 0; o < N_OF(outs); o++)
            for (int has_bias = 0; has_bias <= 1; has_bias++)
                for (int gelu = 0; gelu <= 1; gelu++) {
                    const tp_dtype odt = outs[o];
                    double amax = 0.0;
                    for (size_t i = 0; i < nD; i++) {
                        const double x = v[i] + (has_bias ? bias[i % (size_t)N] : 0.0);
                        ref[i] = gelu ? gelu_ref(x) : x;
                        amax = fmax(amax, fabs(ref[i]));
                    }
                    const float ds = odt == TP_E4M3 ? (float)(amax / 448.0) : 1.0f;
                    const float *d_ds = dev_scalar(ds);
                    const float *v0 = NULL;
                    for (int variant = 0; variant <= 2; variant++) {
                        if (variant == 2 && odt != TP_F16) continue;
                        SET_CASE("gemm_sm90_fp8 v%d e4m3 -> %s M=%d N=%d K=%d bias=%d gelu=%d", variant, dname(odt),
                                 M, N, K, has_bias, gelu);
                        void *d_D = dev_alloc(odt, nD + 64);
                        KERNEL_OK(tpk_gemm_sm90_fp8_variant(d_A, d_as, d_W, d_ws, has_bias ? d_bias : NULL, NULL,
                                                            d_D, odt, d_ds, M, N, K, gelu, variant, g_stream));
                        const float *got = download_f32(odt, d_D, nD, ds);
                        size_t bad = 0, worst = 0;
                        double worst_ratio = 0.0;
                        for (size_t i = 0; i < nD; i++) {
                            const double x = v[i] + (has_bias ? bias[i % (size_t)N] : 0.0);
                            const double acc = ((K + 31) / 32 + 2) * 0x1p-13 * mag[i];
                            const double tol = odt == TP_E4M3
                                                   ? ulp_e4m3(ref[i], ds) + 1.13 * acc + 1e-6 * fabs(x)
                                                   : ulp_of(TP_F16, ref[i]) + 1.13 * acc + 4e-7 * fabs(x);
                            const double err = fabs((double)got[i] - ref[i]);
                            if (!(err <= tol)) bad++; /* NaN counts */
                            const double ratio = isfinite(err) ? err / tol : INFINITY;
                            if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
                        }
                        printf("  %s  %s: %zu of %zu outside the bound; worst err/bound %.3f at [%zu,%zu] got %.7g "
                               "ref %.7g\n",
                               bad ? "FAIL" : "ok  ", g_case, bad, nD, worst_ratio, worst / (size_t)N,
                               worst % (size_t)N, got[worst], ref[worst]);
                        fflush(stdout);
                        ck_assert_msg(bad == 0, "[%s] %zu of %zu elements outside the bound (worst at %zu: got %.7g)",
                                      g_case, bad, nD, worst, got[worst]);
                        check_untouched("D past its end", d_D, nD * esize(odt), (nD + 64) * esize(odt));
                        if (variant == 0) v0 = got;
                        else
                            ck_assert_msg(memcmp(got, v0, nD * sizeof(float)) == 0, "[%s] differs from variant 0",
                                          g_case);
                    }
                }
        /* the residual epilogue (F16 D, no GELU, variants 0 and 2): R in its own buffer (D poisoned), then R = D */
        float *res = host_normal(nD, seed++, 0.0, 1.0);
        round_to(TP_F16, res, nD);
        void *d_R = dev_upload(TP_F16, res, nD, nD);
        for (int inplace = 0; inplace <= 3; inplace++) {
            const int variant = inplace >> 1 ? 2 : 0, in_place = inplace & 1;
            SET_CASE("gemm_sm90_fp8 v%d e4m3 -> f16 + bias + residual%s M=%d N=%d K=%d", variant,
                     in_place ? " (in place)" : "", M, N, K);
            void *d_D = in_place ? dev_upload(TP_F16, res, nD, nD + 64) : dev_alloc(TP_F16, nD + 64);
            KERNEL_OK(tpk_gemm_sm90_fp8(d_A, d_as, d_W, d_ws, d_bias, in_place ? d_D : d_R, d_D, TP_F16, NULL, M, N,
                                        K, 0, variant, g_stream));
            const float *got = download_f32(TP_F16, d_D, nD, 1.0f);
            size_t bad = 0, worst = 0;
            double worst_ratio = 0.0;
            for (size_t i = 0; i < nD; i++) {
                const double x = v[i] + bias[i % (size_t)N] + res[i];
                const double tol = ulp_of(TP_F16, x) + ((K + 31) / 32 + 2) * 0x1p-13 * mag[i] + 4e-7 * fabs(x);
                const double err = fabs((double)got[i] - x), ratio = isfinite(err) ? err / tol : INFINITY;
                if (!(err <= tol)) bad++;
                if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
            }
            printf("  %s  %s: %zu of %zu outside the bound; worst err/bound %.3f\n", bad ? "FAIL" : "ok  ", g_case, bad,
                   nD, worst_ratio);
            fflush(stdout);
            ck_assert_msg(bad == 0, "[%s] %zu of %zu elements outside the bound (worst at %zu: got %.7g)", g_case, bad,
                          nD, worst, got[worst]);
            check_untouched("D past its end", d_D, nD * 2, (nD + 64) * 2);
        }
    }
}
END_TEST

typedef struct {
    const void *A, *W, *bias;
    int M, N, K;
} gm_launch_ctx;

static int gm_launch(const void *ctx, void *out, cudaStream_t stream) {
    const gm_launch_ctx *c = ctx;
    return tpk_gemm_sm90(c->A, c->W, c->bias, out, TP_F16, c->M, c->N, c->K, 1, (tp_stream)stream);
}

START_TEST(test_gemm_sm90_graph) {
    if (!hopper_or_refused()) return;
    const int M = 591, N = 384, K = 200;
    SET_CASE("gemm_sm90 graph capture f16 + bias + gelu M=%d N=%d K=%d", M, N, K);
    const gm_launch_ctx ctx = {dev_upload(TP_F16, host_normal((size_t)M * K, 27000, 0.0, 1.0), (size_t)M * K, (size_t)M * K),
                               dev_upload(TP_F16, host_normal((size_t)N * K, 27001, 0.0, 0.05), (size_t)N * K, (size_t)N * K),
                               dev_upload(TP_F16, host_normal((size_t)N, 27002, 0.0, 0.5), (size_t)N, (size_t)N), M, N, K};
    const size_t nD = (size_t)M * N;
    check_graph_replay(gm_launch, &ctx, dev_alloc(TP_F16, nD), dev_alloc(TP_F16, nD), nD * 2);
}
END_TEST

/* Programmatic dependent launch (pdl.cuh): the kernels are launched with it, so each may start while the one before
 * it runs; the producer loads its first stages' weights before griddepcontrol.wait, everything else waits first. A
 * chain of four GEMMs in one stream, each reading the previous one's output and the last two writing the buffers
 * the ones before them read (read-after-write and write-after-read across kernels), 16-bit and converting (E4M3
 * weights) kernels alternating: run eagerly without a gap and captured into a graph (programmatic edges), the last
 * output must equal, bit for bit, the chain run with the host waiting after every kernel (no overlap possible).
 * Weights scaled by 1/sqrt(K) keep the values in range over the four steps. */
typedef struct {
    const void *x0, *w16, *w8;
    const float *ws;
    void *b1, *b2;
    int M, K, sync;
} pdl_chain;

static int pdl_chain_run(const void *ctx, void *out, cudaStream_t st) {
    const pdl_chain *c = ctx;
    void *const dst[4] = {c->b1, c->b2, c->b1, out}; /* step 2 overwrites what step 1 read, step 3 reads it */
    const void *src[4] = {c->x0, c->b1, c->b2, c->b1};
    for (int k = 0; k < 4; k++) {
        const int r = k % 2 == 0 ? tpk_gemm_sm90(src[k], c->w16, NULL, dst[k], TP_F16, c->M, c->K, c->K, 0, (tp_stream)st)
                                 : tpk_gemm_sm90_wo_fp8(src[k], c->w8, c->ws, NULL, NULL, dst[k], TP_F16, c->M, c->K,
                                                        c->K, (tp_stream)st);
        if (r) return r;
        if (c->sync && cudaStreamSynchronize(st) != cudaSuccess) return (int)cudaErrorUnknown;
    }
    return 0;
}

START_TEST(test_gemm_sm90_pdl) {
    if (!hopper_or_refused()) return;
    const int M = 700, K = 1024; /* 6 x 8 tiles on 48 SMs, the rest free for the next kernel; 16 K steps */
    SET_CASE("gemm_sm90 PDL chain f16 / wo fp8 M=%d N=K=%d", M, K);
    const size_t nX = (size_t)M * K, nW = (size_t)K * K;
    float *w = host_normal(nW, 28001, 0.0, 1.0 / sqrt((double)K));
    pdl_chain c = {dev_upload(TP_F16, host_normal(nX, 28000, 0.0, 1.0), nX, nX), dev_upload(TP_F16, w, nW, nW),
                   NULL, dev_scalar(1.0f / 256.0f), dev_alloc(TP_F16, nX), dev_alloc(TP_F16, nX), M, K, 1};
    for (size_t i = 0; i < nW; i++) w[i] *= 256.0f; /* E4M3 codes of w / (1/256) */
    void *w8 = dev_alloc(TP_E4M3, nW);
    upload_to(w8, TP_E4M3, w, nW, 1.0f);
    c.w8 = w8;
    void *ref = dev_alloc(TP_F16, nX), *eager = dev_alloc(TP_F16, nX), *graph = dev_alloc(TP_F16, nX);
    LAUNCH_OK(pdl_chain_run(&c, ref, g_stream)); /* the host waits after each kernel */
    c.sync = 0;
    const unsigned char *g = check_graph_replay(pdl_chain_run, &c, graph, eager, nX * 2);
    const unsigned char *r = download_bytes(ref, nX * 2);
    size_t diff = 0, nan = 0;
    for (size_t i = 0; i < nX * 2; i++) diff += g[i] != r[i];
    const float *f = download_f32(TP_F16, ref, nX, 1.0f);
    for (size_t i = 0; i < nX; i++) nan += !isfinite(f[i]);
    printf("  %s  %s: chained (graph and eager) vs serialized, %zu of %zu bytes differ; %zu non-finite\n",
           diff || nan ? "FAIL" : "ok  ", g_case, diff, nX * 2, nan);
    ck_assert_msg(diff == 0 && nan == 0, "[%s] %zu bytes differ, %zu non-finite", g_case, diff, nan);
}
END_TEST

START_TEST(test_gemm_sm90_rejects) {
    if (!hopper_or_refused()) return;
    SET_CASE("gemm_sm90 rejects");
    char *buf = dev_alloc(TP_F16, 1 << 16), *D = buf + 65536;
    const float *sc = dev_scalar(1.0f);
    const rejected_call r[] = {
        {"K 100 (not a multiple of 8)", tpk_gemm_sm90(buf, buf, NULL, D, TP_F16, 16, 16, 100, 0, g_stream)},
        {"N 100 (not a multiple of 8)", tpk_gemm_sm90(buf, buf, NULL, D, TP_F16, 16, 100, 16, 0, g_stream)},
        {"M 0", tpk_gemm_sm90(buf, buf, NULL, D, TP_F16, 0, 16, 16, 0, g_stream)},
        {"f32", tpk_gemm_sm90(buf, buf, NULL, D, TP_F32, 16, 16, 16, 0, g_stream)},
        {"e4m3", tpk_gemm_sm90(buf, buf, NULL, D, TP_E4M3, 16, 16, 16, 0, g_stream)},
        {"gelu 2", tpk_gemm_sm90(buf, buf, NULL, D, TP_F16, 16, 16, 16, 2, g_stream)},
        {"A not 16-byte aligned", tpk_gemm_sm90(buf + 8, buf, NULL, D, TP_F16, 16, 16, 16, 0, g_stream)},
        {"W not 16-byte aligned", tpk_gemm_sm90(buf, buf + 2, NULL, D, TP_F16, 16, 16, 16, 0, g_stream)},
        {"D not 16-byte aligned", tpk_gemm_sm90(buf, buf, NULL, D + 8, TP_F16, 16, 16, 16, 0, g_stream)},
        {"bias not 4-byte aligned", tpk_gemm_sm90(buf, buf, buf + 2, D, TP_F16, 16, 16, 16, 0, g_stream)},
        {"NULL W", tpk_gemm_sm90(buf, NULL, NULL, D, TP_F16, 16, 16, 16, 0, g_stream)},
        {"variant 2", tpk_gemm_sm90_variant(buf, buf, NULL, D, TP_F16, 16, 16, 16, 0, 2, g_stream)},
        {"fp8: K 40 (not a multiple of 16)",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, NULL, D, TP_F16, NULL, 16, 16, 40, 0, 0, g_stream)},
        {"fp8: E4M3 D with N 24 (not a multiple of 16)",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, NULL, D, TP_E4M3, sc, 16, 24, 16, 0, 0, g_stream)},
        {"fp8: BF16 D", tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, NULL, D, TP_BF16, NULL, 16, 16, 16, 0, 0, g_stream)},
        {"fp8: NULL a_scale",
         tpk_gemm_sm90_fp8(buf, NULL, buf, sc, NULL, NULL, D, TP_F16, NULL, 16, 16, 16, 0, 0, g_stream)},
        {"fp8: NULL w_scale",
         tpk_gemm_sm90_fp8(buf, sc, buf, NULL, NULL, NULL, D, TP_F16, NULL, 16, 16, 16, 0, 0, g_stream)},
        {"fp8: E4M3 D without d_scale",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, NULL, D, TP_E4M3, NULL, 16, 16, 16, 0, 0, g_stream)},
        {"fp8: a_scale not 4-byte aligned",
         tpk_gemm_sm90_fp8(buf, (const float *)(buf + 2), buf, sc, NULL, NULL, D, TP_F16, NULL, 16, 16, 16, 0, 0,
                           g_stream)},
        {"fp8: variant 3",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, NULL, D, TP_F16, NULL, 16, 16, 16, 0, 3, g_stream)},
        {"fp8: variant 2 with an E4M3 D",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, NULL, D, TP_E4M3, sc, 16, 16, 16, 0, 2, g_stream)},
        {"fp8: variant -1",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, NULL, D, TP_F16, NULL, 16, 16, 16, 0, -1, g_stream)},
        {"fp8: residual with an E4M3 D",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, buf, D, TP_E4M3, sc, 16, 16, 16, 0, 0, g_stream)},
        {"fp8: residual with GELU",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, buf, D, TP_F16, NULL, 16, 16, 16, 1, 0, g_stream)},
        {"fp8: residual in variant 1",
         tpk_gemm_sm90_fp8_variant(buf, sc, buf, sc, NULL, buf, D, TP_F16, NULL, 16, 16, 16, 0, 1, g_stream)},
        {"fp8: variant 3 (lab entry)",
         tpk_gemm_sm90_fp8_variant(buf, sc, buf, sc, NULL, NULL, D, TP_F16, NULL, 16, 16, 16, 0, 3, g_stream)},
        {"fp8: variant 1 in the product's entry (lab-only)",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, NULL, D, TP_F16, NULL, 16, 16, 16, 0, 1, g_stream)},
        {"fp8: residual not 16-byte aligned",
         tpk_gemm_sm90_fp8(buf, sc, buf, sc, NULL, buf + 8, D, TP_F16, NULL, 16, 16, 16, 0, 0, g_stream)},
    };
    check_rejected(r, sizeof r / sizeof r[0]);
}
END_TEST

/* Sibling linears as one FP8 GEMM (tpk_gemm_sm90_fp8_group): members of their own weights and per-tensor scales
 * (normal weights, each member's std and so its scale different), their codes one after the other, one column
 * scale per output column, each member's output in its own buffer with guard bytes after it. Each member's output
 * must equal, bit for bit, tpk_gemm_sm90_fp8 on that member alone (the same k32 instructions in the same order per
 * output and the same fp32 alpha, a_scale times the member's scale), and lie within test_gemm_sm90_fp8's F16 bound
 * of the fp64 reference. Shapes: pi0's expert q/k/v (M 51, K 1024: 2048 + 256 + 256 columns) and gate/up (2 x 4096),
 * members whose boundaries fall inside 96- and 128-wide tiles (64 + 136 + 8, 4 x 96 at M 257), batch 1 and 3,
 * K 16 and 80 (partial K steps), with and without a bias. */
START_TEST(test_gemm_sm90_fp8_group) {
    if (!hopper_or_refused()) return;
    int dev = 0, sms = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    static const struct {
        int M, K, n, cols[4];
    } cases[] = {{51, 1024, 3, {2048, 256, 256}}, {51, 1024, 2, {4096, 4096}}, {197, 80, 3, {64, 136, 8}},
                 {257, 208, 4, {96, 96, 96, 96}}, {1, 16, 2, {8, 16}},           {3, 1024, 3, {2048, 256, 256}}};
    uint64_t seed = 27500;
    for (size_t c = 0; c < N_OF(cases); c++) {
        const int M = cases[c].M, K = cases[c].K, n = cases[c].n;
        int N = 0, off[5];
        for (int j = 0; j < n; j++) off[j] = N, N += cases[c].cols[j];
        off[n] = N;
        const size_t nA = (size_t)M * K, nW = (size_t)N * K;
        float *A = host_normal(nA, seed++, 0.0, 1.0), *W = hmalloc(nW * sizeof(float));
        float *bias = host_normal((size_t)N, seed++, 0.0, 0.5), *cs = hmalloc((size_t)N * sizeof(float)), ws[4];
        const float as = host_amax(A, nA) / 448.0f;
        to_e4m3_grid(A, nA, as);
        round_to(TP_F16, bias, (size_t)N);
        void *d_A = dev_alloc(TP_E4M3, nA), *d_W = dev_alloc(TP_E4M3, nW);
        upload_to(d_A, TP_E4M3, A, nA, as);
        for (int j = 0; j < n; j++) { /* member j: its rows, its scale */
            const size_t o = (size_t)off[j] * K, nj = (size_t)cases[c].cols[j] * K;
            float *Wj = host_normal(nj, seed++, 0.0, 0.02 * (j + 1));
            ws[j] = host_amax(Wj, nj) / 448.0f;
            to_e4m3_grid(Wj, nj, ws[j]);
            memcpy(W + o, Wj, nj * sizeof(float));
            upload_to((unsigned char *)d_W + o, TP_E4M3, Wj, nj, ws[j]);
            for (int k = off[j]; k < off[j + 1]; k++) cs[k] = ws[j];
        }
        double *v = hmalloc((size_t)M * N * sizeof(double)), *mag = hmalloc((size_t)M * N * sizeof(double));
        ref_products(A, W, M, N, K, v, mag);
        float *d_cs = dev_alloc(TP_F32, (size_t)N);
        CUDA_OK(cudaMemcpy(d_cs, cs, sizeof(float) * (size_t)N, cudaMemcpyHostToDevice));
        void *d_bias = dev_upload(TP_F16, bias, (size_t)N, (size_t)N);
        const float *d_as = dev_scalar(as);
        for (int has_bias = 0; has_bias <= 1; has_bias++) {
            SET_CASE("gemm_sm90_fp8_group M=%d K=%d members %d (N %d) bias=%d", M, K, n, N, has_bias);
            void *d_D[4];
            for (int j = 0; j < n; j++) d_D[j] = dev_alloc(TP_F16, (size_t)M * cases[c].cols[j] + 64);
            KERNEL_OK(tpk_gemm_sm90_fp8_group(d_A, d_as, d_W, d_cs, has_bias ? d_bias : NULL, n, cases[c].cols, d_D,
                                              M, K, sms, g_stream));
            size_t bad = 0, total = 0;
            double worst_ratio = 0.0;
            for (int j = 0; j < n; j++) {
                const int Nj = cases[c].cols[j];
                const size_t nD = (size_t)M * Nj;
                const float *got = download_f32(TP_F16, d_D[j], nD, 1.0f);
                for (size_t i = 0; i < nD; i++) {
                    const size_t gi = (i / (size_t)Nj) * (size_t)N + (size_t)off[j] + i % (size_t)Nj;
                    const double ref = v[gi] + (has_bias ? bias[off[j] + i % (size_t)Nj] : 0.0);
                    const double tol = ulp_of(TP_F16, ref) + 1.13 * ((K + 31) / 32 + 2) * 0x1p-13 * mag[gi] +
                                       4e-7 * fabs(ref);
                    const double err = fabs((double)got[i] - ref);
                    if (!(err <= tol)) bad++;
                    const double ratio = isfinite(err) ? err / tol : INFINITY;
                    if (ratio > worst_ratio) worst_ratio = ratio;
                }
                total += nD;
                check_untouched("a member's D past its end", d_D[j], nD * 2, (nD + 64) * 2);
                /* the member alone through tpk_gemm_sm90_fp8: the same bits */
                void *d_one = dev_alloc(TP_F16, nD), *d_ws = (void *)dev_scalar(ws[j]);
                KERNEL_OK(tpk_gemm_sm90_fp8(d_A, d_as, (unsigned char *)d_W + (size_t)off[j] * K, (const float *)d_ws,
                                            has_bias ? (const char *)d_bias + 2 * (size_t)off[j] : NULL, NULL, d_one,
                                            TP_F16, NULL, M, Nj, K, 0,
                                            tpk_gemm_sm90_fp8_pick_variant(TP_F16, M, Nj, sms), g_stream));
                const float *one = download_f32(TP_F16, d_one, nD, 1.0f);
                ck_assert_msg(memcmp(one, got, nD * sizeof(float)) == 0, "[%s] member %d differs from the member's "
                              "own GEMM", g_case, j);
            }
            printf("  %s  %s: %zu of %zu outside the bound; worst err/bound %.3f; every member bit-identical to its "
                   "own GEMM\n", bad ? "FAIL" : "ok  ", g_case, bad, total, worst_ratio);
            fflush(stdout);
            ck_assert_msg(bad == 0, "[%s] %zu of %zu elements outside the bound", g_case, bad, total);
        }
        release_all();
    }
    /* refused: a member width not a multiple of 8, too many members, misaligned column scales */
    const int bad_cols[2] = {12, 8}, five[5] = {8, 8, 8, 8, 8};
    void *d[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int j = 0; j < 5; j++) d[j] = dev_alloc(TP_F16, 64);
    void *a = dev_alloc(TP_E4M3, 64 * 16), *w = dev_alloc(TP_E4M3, 64 * 16);
    float *cs = dev_alloc(TP_F32, 64);
    const float *sc = dev_scalar(1.0f);
    ck_assert_int_eq(tpk_gemm_sm90_fp8_group(a, sc, w, cs, NULL, 2, bad_cols, d, 2, 16, sms, g_stream), (int)cudaErrorInvalidValue);
    ck_assert_int_eq(tpk_gemm_sm90_fp8_group(a, sc, w, cs, NULL, 5, five, d, 2, 16, sms, g_stream), (int)cudaErrorInvalidValue);
    ck_assert_int_eq(tpk_gemm_sm90_fp8_group(a, sc, w, cs + 1, NULL, 2, five, d, 2, 16, sms, g_stream), (int)cudaErrorInvalidValue);
    release_all();
}
END_TEST

/* tpk_gemm_sm90_fp8_pick_variant against the rule in gemm_sm90.h, computed here for the device's SM count: the
 * busiest SM's ceil(tiles / SMs) tile times, a 128 x 96 tile 0.82 of a 128 x 128 one (F16 D only) */
START_TEST(test_gemm_sm90_fp8_pick) {
    if (!hopper_or_refused()) return;
    int dev = 0, sms = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    static const int shapes[][2] = {{12608, 2304}, {12608, 768}, {12608, 3072}, {197, 768}, {3, 16}, {1576, 384}};
    int twos = 0;
    for (size_t c = 0; c < N_OF(shapes); c++) {
        const long long M = shapes[c][0], N = shapes[c][1], mt = (M + 127) / 128;
        const long long w128 = (mt * ((N + 127) / 128) + sms - 1) / sms * 100,
                        w96 = (mt * ((N + 95) / 96) + sms - 1) / sms * 82;
        const int want = w96 < w128 ? 2 : 0;
        SET_CASE("gemm_sm90_fp8 pick_variant M=%lld N=%lld on %d SMs", M, N, sms);
        ck_assert_msg(tpk_gemm_sm90_fp8_pick_variant(TP_F16, (int)M, (int)N, sms) == want, "[%s] want %d", g_case,
                      want);
        ck_assert_msg(tpk_gemm_sm90_fp8_pick_variant(TP_E4M3, (int)M, (int)N, sms) == 0, "[%s] E4M3 D: want 0", g_case);
        twos += want == 2;
    }
    if (sms == 132) /* H100 SXM / H200: ViT-B/16 batch 64's proj and fc2 take 96-wide tiles, qkv and fc1 not */
        ck_assert_msg(tpk_gemm_sm90_fp8_pick_variant(TP_F16, 12608, 2304, sms) == 0 &&
                          tpk_gemm_sm90_fp8_pick_variant(TP_F16, 12608, 768, sms) == 2 &&
                          tpk_gemm_sm90_fp8_pick_variant(TP_F16, 12608, 3072, sms) == 0,
                      "ViT-B/16 batch 64 on 132 SMs: want 0, 2, 0");
    printf("  ok    gemm_sm90_fp8 pick_variant: %d of %d shapes take 96-wide tiles on %d SMs\n", twos, N_OF(shapes),
           sms);
}
END_TEST

Suite *gpu_gemm_sm90_suite(void) {
    Suite *s = suite_create("gpu_gemm_sm90");
    tcase_add_loop_test(new_tcase(s, "gemm_sm90"), test_gemm_sm90, 0, N_OF(GT));
    tcase_add_test(new_tcase(s, "gemm_sm90_fp8"), test_gemm_sm90_fp8);
    tcase_add_test(new_tcase(s, "gemm_sm90_fp8_group"), test_gemm_sm90_fp8_group);
    tcase_add_loop_test(new_tcase(s, "gemm_sm90_wo"), test_gemm_sm90_wo, 0, 3 * N_OF(GT));
    tcase_add_test(new_tcase(s, "gemm_sm90_graph"), test_gemm_sm90_graph);
    tcase_add_test(new_tcase(s, "gemm_sm90_pdl"), test_gemm_sm90_pdl);
    tcase_add_test(new_tcase(s, "gemm_sm90_rejects"), test_gemm_sm90_rejects);
    tcase_add_test(new_tcase(s, "gemm_sm90_fp8_pick"), test_gemm_sm90_fp8_pick);
    return s;
}
