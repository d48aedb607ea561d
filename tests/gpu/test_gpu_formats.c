/* test_gpu_formats.c: the emulated block-scaled formats on the GPU against their CPU emulation.
 *   - the QDQ kernel reproduces tp_qdq_f32 bit for bit (every element, MXFP8, NVFP4, MXFP4);
 *   - an emulated GEMM (QDQ kernel + bf16 GEMM with fp32 accumulation, NVFP4 scales as alpha) equals the CPU
 *     emulation (tp_qdq_f32 operands, fp64 accumulation) within fp32 accumulation-order noise: relative L2 under
 *     1e-5 (K <= 3072 products of exact values, each sum rounding at 2^-24);
 * at awkward shapes: M = 197 * 64 + 1 rows, K not a multiple of 128. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/stats.h"
#include "core/rng.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/gemm_cublaslt.h"
#include "exec/cuda/kernels.h"
#include "formats/dtype.h"
#include "formats/qformat.h"

#define CU(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

static float *randn(size_t n, uint64_t seed, double std) {
    float *x = malloc(sizeof(float) * n);
    tp_rng r;
    tp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        double u = tp_rng_normal(&r) * std;
        /* a few outliers per block make the block scales differ from the tensor's */
        if (i % 97 == 0) u *= 20;
        x[i] = (float)u;
    }
    return x;
}

static void *upload(tp_dtype dt, const float *x, size_t n) {
    void *h = malloc(n * tp_dtype_info(dt)->bytes), *d = NULL;
    tp_convert_from_f32(dt, x, h, n, 1.0f);
    CU(cudaMalloc(&d, n * tp_dtype_info(dt)->bytes));
    CU(cudaMemcpy(d, h, n * tp_dtype_info(dt)->bytes, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static float *download(tp_dtype dt, const void *d, size_t n) {
    void *h = malloc(n * tp_dtype_info(dt)->bytes);
    float *f = malloc(sizeof(float) * n);
    CU(cudaMemcpy(h, d, n * tp_dtype_info(dt)->bytes, cudaMemcpyDeviceToHost));
    tp_convert_to_f32(dt, h, f, n, 1.0f);
    free(h);
    return f;
}

static const tp_qformat FORMATS[] = {TP_QF_MXFP8, TP_QF_NVFP4, TP_QF_MXFP4};

START_TEST(test_qdq_kernel_bit_exact) {
    const tp_qformat qf = FORMATS[_i];
    const long long M = 197 * 64 + 1, K = 160; /* K: 5 blocks of 32, 10 of 16, not a multiple of 128 */
    const size_t n = (size_t)(M * K);
    float *x = randn(n, 17 + _i, 1.0);
    /* the kernel reads bf16 activations: the CPU reference sees the same values */
    void *dx = upload(TP_BF16, x, n);
    float *xb = download(TP_BF16, dx, n);
    float g_in = 0.0f, g = 1.0f, *dg = NULL;
    if (tp_qformat_info(qf)->global_scale) {
        float amax = 0;
        for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(xb[i]));
        g_in = (float)((double)amax / (6.0 * 448.0));
        CU(cudaMalloc((void **)&dg, 16));
        CU(cudaMemcpy(dg, &g_in, sizeof g_in, cudaMemcpyHostToDevice));
    }
    float *ref = malloc(sizeof(float) * n);
    tp_error e;
    ck_assert_msg(tp_qdq_f32(qf, xb, ref, M, K, 0, g_in, &g, &e) == TP_OK, "%s", e.msg);
    void *dy = NULL;
    CU(cudaMalloc(&dy, n * 4));
    CU(cudaMemset(dy, 0xFF, n * 4)); /* poison: NaN */
    ck_assert_int_eq(tpk_block_qdq(dx, TP_BF16, dy, TP_F32, M, K, (int)qf, dg, NULL), 0);
    CU(cudaDeviceSynchronize());
    float *got = download(TP_F32, dy, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], 4) != 0 && !(got[i] == 0 && ref[i] == 0)) {
            if (!bad) first = i;
            bad++;
        }
    ck_assert_msg(bad == 0, "%s QDQ: %zu of %zu elements differ from tp_qdq_f32; first at %zu: x %.9g got %.9g want %.9g",
                  tp_qformat_info(qf)->name, bad, n, first, xb[first], got[first], ref[first]);
    printf("  qdq %-6s M=%lld K=%lld: bit-exact against tp_qdq_f32\n", tp_qformat_info(qf)->name, M, K);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dg);
    free(x);
    free(xb);
    free(ref);
    free(got);
}
END_TEST

START_TEST(test_emulated_gemm) {
    const tp_qformat qf = FORMATS[_i];
    const long long M = 197 * 64 + 1, K = 160, N = 96;
    const size_t nx = (size_t)(M * K), nw = (size_t)(N * K);
    float *x = randn(nx, 31 + _i, 1.0), *w = randn(nw, 41 + _i, 0.05);
    void *dx = upload(TP_BF16, x, nx);
    float *xb = download(TP_BF16, dx, nx);
    tp_error e;
    float gx_in = 0.0f, gx = 1.0f, gw = 1.0f, *dg = NULL;
    if (tp_qformat_info(qf)->global_scale) {
        float amax = 0;
        for (size_t i = 0; i < nx; i++) amax = fmaxf(amax, fabsf(xb[i]));
        gx_in = (float)((double)amax / (6.0 * 448.0));
        CU(cudaMalloc((void **)&dg, 16));
        CU(cudaMemcpy(dg, &gx_in, sizeof gx_in, cudaMemcpyHostToDevice));
    }
    /* CPU emulation: exact format values, fp64 accumulation, scales after */
    float *qx = malloc(sizeof(float) * nx), *qw = malloc(sizeof(float) * nw), *ref = malloc(sizeof(float) * M * N);
    ck_assert_int_eq(tp_qdq_f32(qf, xb, qx, M, K, 0, gx_in, &gx, &e), TP_OK);
    ck_assert_int_eq(tp_qdq_f32(qf, w, qw, N, K, 1, 0.0f, &gw, &e), TP_OK);
    tp_cpu_linear(qx, qw, NULL, ref, M, N, K);
    const float alpha = gx * gw;
    for (size_t i = 0; i < (size_t)(M * N); i++) ref[i] *= alpha;
    /* GPU: weights as the engine stores them (exact bf16), the activation through the QDQ kernel */
    void *dw = upload(TP_BF16, qw, nw), *dq = NULL, *dd = NULL;
    CU(cudaMalloc(&dq, nx * 2));
    CU(cudaMalloc(&dd, (size_t)(M * N) * 4));
    CU(cudaMemset(dd, 0xFF, (size_t)(M * N) * 4));
    ck_assert_int_eq(tpk_block_qdq(dx, TP_BF16, dq, TP_BF16, M, K, (int)qf, dg, NULL), 0);
    tp_gemm_ctx *ctx = NULL;
    tp_gemm_plan *plan = NULL;
    ck_assert_msg(tp_gemm_ctx_create(32u << 20, &ctx, &e) == TP_OK, "%s", e.msg);
    tp_gemm_desc d = {M, N, K, TP_BF16, TP_F32, 0};
    ck_assert_msg(tp_gemm_plan_create(ctx, &d, "emulated", &plan, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(tp_gemm_run_alpha(ctx, plan, dq, dw, NULL, dd, NULL, NULL, alpha, NULL), 0);
    CU(cudaDeviceSynchronize());
    float *got = download(TP_F32, dd, (size_t)(M * N));
    tp_accuracy a;
    tp_accuracy_compute(got, ref, (int)M, (int)N, &a);
    printf("  emulated %-6s GEMM M=%lld N=%lld K=%lld: rel L2 %.3e max abs %.3e vs CPU emulation\n",
           tp_qformat_info(qf)->name, M, N, K, a.rel_l2, a.max_abs);
    ck_assert_int_eq(a.nonfinite, 0);
    ck_assert_msg(a.rel_l2 < 1e-5, "%s emulated GEMM: rel L2 %.3e against the CPU emulation",
                  tp_qformat_info(qf)->name, a.rel_l2);
    tp_gemm_plan_destroy(plan);
    tp_gemm_ctx_destroy(ctx);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dq);
    cudaFree(dd);
    cudaFree(dg);
    free(x);
    free(w);
    free(xb);
    free(qx);
    free(qw);
    free(ref);
    free(got);
}
END_TEST

Suite *gpu_formats_suite(void) {
    Suite *s = suite_create("gpu_formats");
    TCase *t = tcase_create("block_scaled");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, test_qdq_kernel_bit_exact, 0, 3);
    tcase_add_loop_test(t, test_emulated_gemm, 0, 3);
    suite_add_tcase(s, t);
    return s;
}
