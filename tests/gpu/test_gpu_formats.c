/* test_gpu_formats.c: the emulated block-scaled formats on the GPU against their CPU emulation.
 *   - the QDQ kernel reproduces tp_qdq_f32 bit for bit (every element, MXFP8, NVFP4, MXFP4);
 *   - an emulated GEMM (QDQ kernel + bf16 GEMM with fp32 accumulation, NVFP4 scales as alpha) equals the CPU
 *     emulation (tp_qdq_f32 operands, fp64 accumulation) within fp32 accumulation-order noise: relative L2 under
 *     1e-5 (K <= 3072 products of exact values, each sum rounding at 2^-24);
 * at awkward shapes: M = 197 * 64 + 1 rows, K not a multiple of 128.
 * FP8 block-128 (native on sm_90):
 *   - the quantizer kernels (standalone, GELU-fused, LayerNorm-fused) reproduce tp_quantize's codes and scales
 *     bit for bit, given the same fp32 inputs (the unfused GELU / LayerNorm kernels with an fp32 output compute
 *     exactly the values the fused ones quantize), NaN and Inf blocks included; pad rows hold codes 0, scale 1;
 *   - the native GEMM (cuBLASLt VEC128_32F x BLK128x128_32F, bf16 out) equals the CPU emulation up to the bf16
 *     rounding of D: unit roundoff 2^-9, about 1.1e-3 relative L2 for uniformly spread rounding errors; bound
 *     4e-3 (a wrong scale layout gives 0.5 or more, tools/probes/fp8_block128_layout.c).
 * Native MXFP8 / NVFP4 / MXFP4 (Blackwell):
 *   - the operand quantizer (codes + 128x4-tiled scale codes) equals tp_quantize and the host tiling bit for bit
 *     (it runs on any GPU);
 *   - the block-scaled GEMM: on sm_100+ against the CPU emulation (bf16 output rounding, 4e-3); before sm_100
 *     cuBLASLt must refuse it at plan time with TP_ERR_UNSUPPORTED (never a wrong answer). */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "core/rng.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/kernels/scale_layout.h"
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
    tp_gemm_desc d = {M, N, K, TP_BF16, TP_F32, 0, 0, 0, 0, 0, 0};
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

/* ---- FP8 block-128 ----------------------------------------------------------------------------------- */

static void *dalloc(size_t bytes) {
    void *d = NULL;
    CU(cudaMalloc(&d, bytes));
    return d;
}

/* GPU codes (M_pad, K) and scales (KB, M_pad) against tp_quantize of the fp32 values xf (M, K). */
static void check_b128(const float *xf, long long M, long long Mp, long long K, const void *dq, const float *ds,
                       const char *what) {
    const long long KB = (K + 127) / 128;
    tp_qtensor ref;
    tp_error e;
    ck_assert_msg(tp_quantize(TP_QF_FP8_BLOCK128, xf, M, K, 0, 0.0f, &ref, &e) == TP_OK, "%s", e.msg);
    uint8_t *q = malloc((size_t)(Mp * K));
    float *sc = malloc(sizeof(float) * (size_t)(KB * Mp));
    CU(cudaMemcpy(q, dq, (size_t)(Mp * K), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(sc, ds, sizeof(float) * (size_t)(KB * Mp), cudaMemcpyDeviceToHost));
    long long bad_codes = 0, bad_scales = 0, first = -1;
    for (long long i = 0; i < M * K; i++)
        if (q[i] != ref.elems[i]) bad_codes++, first = first < 0 ? i : first;
    for (long long i = M * K; i < Mp * K; i++) bad_codes += q[i] != 0;
    const float *rs = (const float *)ref.scales; /* (M, KB) row-major */
    for (long long m = 0; m < Mp; m++)
        for (long long kb = 0; kb < KB; kb++) {
            float want = m < M ? rs[m * KB + kb] : 1.0f, got = sc[kb * Mp + m];
            bad_scales += memcmp(&want, &got, 4) != 0;
        }
    printf("  fp8-block quantizer %-10s M=%lld (pad %lld) K=%lld: %lld codes, %lld scales differ\n", what, M, Mp, K,
           bad_codes, bad_scales);
    ck_assert_msg(bad_codes == 0 && bad_scales == 0, "%s: %lld codes (first at %lld: %02x vs %02x), %lld scales differ",
                  what, bad_codes, first, first >= 0 ? q[first] : 0, first >= 0 ? ref.elems[first] : 0, bad_scales);
    tp_qtensor_free(&ref);
    free(q);
    free(sc);
}

/* _i: 0 standalone (f32 input with NaN and Inf), 1 standalone bf16, 2 GELU-fused, 3 LayerNorm-fused, 4 tanh-GELU-fused */
START_TEST(test_fp8_block_quantizers) {
    const long long M = 197 * 3 + 2, Mp = (M + 3) / 4 * 4;
    const long long Ks[2] = {192, 768}; /* 1.5 blocks; 6 blocks */
    for (int ki = 0; ki < 2; ki++) {
        const long long K = Ks[ki], KB = (K + 127) / 128;
        const size_t n = (size_t)(M * K);
        float *x = randn(n, 77 + ki, 1.0);
        if (_i == 0) {
            x[5] = tp_f32_from_bits(0xFFC00000u); /* -NaN: skipped by amax, encoded as a NaN of its sign */
            x[K + 7] = INFINITY;                  /* row 1, block 0: a NaN scale, codes 0 */
        }
        tp_dtype xdt = _i == 0 ? TP_F32 : TP_BF16;
        void *dx = upload(xdt, x, n), *dq = dalloc((size_t)(Mp * K)), *df = dalloc(n * 4);
        float *ds = dalloc(sizeof(float) * (size_t)(KB * Mp));
        CU(cudaMemset(dq, 0x7F, (size_t)(Mp * K))); /* poison: E4M3 NaN */
        CU(cudaMemset(ds, 0xFF, sizeof(float) * (size_t)(KB * Mp)));
        float *xf = NULL;
        if (_i <= 1) {
            ck_assert_int_eq(tpk_quant_fp8_b128(dx, xdt, 0, dq, ds, (int)M, (int)Mp, (int)K, NULL), 0);
            xf = download(xdt, dx, n);
        } else if (_i == 2 || _i == 4) { /* the GELU (4: its tanh form) quantized as it is written */
            ck_assert_int_eq(tpk_quant_fp8_b128(dx, xdt, _i == 4 ? 2 : 1, dq, ds, (int)M, (int)Mp, (int)K, NULL), 0);
            ck_assert_int_eq(tpk_gelu(dx, xdt, df, TP_F32, NULL, n, _i == 4, NULL), 0);
            xf = download(TP_F32, df, n);
        } else {
            float *w = randn((size_t)K, 5, 0.5), *b = randn((size_t)K, 6, 0.2);
            void *dw = upload(TP_BF16, w, (size_t)K), *db = upload(TP_BF16, b, (size_t)K);
            ck_assert_int_eq(tpk_layernorm_fp8_b128(dx, xdt, dw, db, TP_BF16, dq, ds, (int)M, (int)Mp, (int)K, 1e-6f,
                                                    NULL),
                             0);
            ck_assert_int_eq(tpk_layernorm(dx, xdt, dw, db, TP_BF16, df, TP_F32, NULL, (int)M, (int)K, 1e-6f, NULL), 0);
            xf = download(TP_F32, df, n);
            cudaFree(dw);
            cudaFree(db);
            free(w);
            free(b);
        }
        CU(cudaDeviceSynchronize());
        static const char *names[] = {"f32", "bf16", "gelu", "layernorm", "gelu tanh"};
        check_b128(xf, M, Mp, K, dq, ds, names[_i]);
        cudaFree(dx);
        cudaFree(dq);
        cudaFree(df);
        cudaFree(ds);
        free(x);
        free(xf);
    }
}
END_TEST

START_TEST(test_fp8_block_gemm) {
    const long long M = 197 * 64 + 1, Mp = (M + 3) / 4 * 4, K = 592, N = 384, KB = (K + 127) / 128;
    const size_t nx = (size_t)(M * K), nw = (size_t)(N * K);
    float *x = randn(nx, 91, 1.0), *w = randn(nw, 92, 0.05), *bias = randn((size_t)N, 93, 0.5);
    tp_error e;
    /* GPU: x in bf16 through the standalone quantizer; W quantized offline, scales re-laid for cuBLASLt */
    void *dx = upload(TP_BF16, x, nx), *dq = dalloc((size_t)(Mp * K)), *db = upload(TP_BF16, bias, (size_t)N);
    float *xb = download(TP_BF16, dx, nx), *bb = download(TP_BF16, db, (size_t)N);
    float *dxs = dalloc(sizeof(float) * (size_t)(KB * Mp));
    ck_assert_int_eq(tpk_quant_fp8_b128(dx, TP_BF16, 0, dq, dxs, (int)M, (int)Mp, (int)K, NULL), 0);
    tp_qtensor wq;
    ck_assert_msg(tp_quantize(TP_QF_FP8_BLOCK128, w, N, K, 1, 0.0f, &wq, &e) == TP_OK, "%s", e.msg);
    size_t nws = tp_gemm_b128_weight_scale_count(N, K);
    float *ws = malloc(sizeof(float) * nws), *dws = dalloc(sizeof(float) * nws);
    tp_gemm_b128_weight_scales((const float *)wq.scales, N, K, ws);
    void *dw = dalloc(nw);
    CU(cudaMemcpy(dw, wq.elems, nw, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dws, ws, sizeof(float) * nws, cudaMemcpyHostToDevice));
    void *dd = dalloc((size_t)(Mp * N) * 2);
    CU(cudaMemset(dd, 0xFF, (size_t)(Mp * N) * 2)); /* poison: bf16 NaN */
    tp_gemm_ctx *ctx = NULL;
    tp_gemm_plan *plan = NULL;
    ck_assert_msg(tp_gemm_ctx_create(32u << 20, &ctx, &e) == TP_OK, "%s", e.msg);
    tp_gemm_desc d = {Mp, N, K, TP_E4M3, TP_BF16, 1, 1, 0, 0, 0, 0};
    ck_assert_msg(tp_gemm_plan_create(ctx, &d, "fp8-block", &plan, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(tp_gemm_run(ctx, plan, dq, dw, db, dd, dxs, dws, NULL), 0);
    CU(cudaDeviceSynchronize());
    float *got = download(TP_BF16, dd, (size_t)(M * N));
    /* CPU emulation: exact format values (the same bf16 input), fp64 accumulation */
    float *qx = malloc(sizeof(float) * nx), *qw = malloc(sizeof(float) * nw), *ref = malloc(sizeof(float) * M * N);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_FP8_BLOCK128, xb, qx, M, K, 0, 0.0f, NULL, &e), TP_OK);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_FP8_BLOCK128, w, qw, N, K, 1, 0.0f, NULL, &e), TP_OK);
    tp_cpu_linear(qx, qw, bb, ref, M, N, K);
    tp_accuracy a;
    tp_accuracy_compute(got, ref, (int)M, (int)N, &a);
    printf("  native fp8-block GEMM M=%lld (run as %lld) N=%lld K=%lld +bias: rel L2 %.3e max abs %.3e vs CPU "
           "emulation\n",
           M, Mp, N, K, a.rel_l2, a.max_abs);
    ck_assert_int_eq(a.nonfinite, 0);
    ck_assert_msg(a.rel_l2 < 4e-3, "fp8-block GEMM: rel L2 %.3e against the CPU emulation", a.rel_l2);
    /* M not a multiple of 4 is refused at plan time, naming M */
    tp_gemm_plan *bad = NULL;
    tp_gemm_desc d2 = {M, N, K, TP_E4M3, TP_BF16, 1, 1, 0, 0, 0, 0};
    ck_assert_int_eq(tp_gemm_plan_create(ctx, &d2, "fp8-block", &bad, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "M % 4"));
    tp_gemm_plan_destroy(plan);
    tp_gemm_ctx_destroy(ctx);
    tp_qtensor_free(&wq);
    cudaFree(dx);
    cudaFree(dq);
    cudaFree(db);
    cudaFree(dxs);
    cudaFree(dws);
    cudaFree(dw);
    cudaFree(dd);
    free(x);
    free(w);
    free(bias);
    free(xb);
    free(bb);
    free(ws);
    free(got);
    free(qx);
    free(qw);
    free(ref);
}
END_TEST

/* ---- native block-scaled operands (Blackwell) ------------------------------------------------------------------ */

START_TEST(test_native_quant_and_gemm) {
    const tp_qformat qf = FORMATS[_i];
    const tp_qformat_traits *qt = tp_qformat_info(qf);
    const long long M = 197 * 3 + 1, K = 160, N = 96, kb = K / qt->block;
    const size_t nx = (size_t)(M * K), nw = (size_t)(N * K);
    float *x = randn(nx, 51 + _i, 1.0), *w = randn(nw, 61 + _i, 0.05);
    x[3] = tp_f32_from_bits(0xFFC00000u); /* -NaN keeps its sign */
    x[K + 40] = -INFINITY;                  /* row 1: an Inf block, NaN scale, codes 0 */
    tp_error e;
    void *dx = upload(TP_F32, x, nx);
    float g2 = 0.0f, *dg = NULL;
    if (qt->global_scale) {
        g2 = 0.0123f;
        CU(cudaMalloc((void **)&dg, 16));
        CU(cudaMemcpy(dg, &g2, sizeof g2, cudaMemcpyHostToDevice));
    }
    tp_qtensor ref;
    ck_assert_msg(tp_quantize(qf, x, M, K, 0, g2, &ref, &e) == TP_OK, "%s", e.msg);
    const size_t sb = tp_swz_bytes(M, kb);
    void *dc = dalloc(ref.elem_bytes), *ds = dalloc(sb);
    CU(cudaMemset(dc, 0x55, ref.elem_bytes));
    CU(cudaMemset(ds, 0x55, sb));
    ck_assert_int_eq(tpk_block_quant_native(dx, TP_F32, dc, ds, M, K, (int)qf, dg, NULL), 0);
    CU(cudaDeviceSynchronize());
    uint8_t *codes = malloc(ref.elem_bytes), *sc = malloc(sb), *want = calloc(sb, 1);
    CU(cudaMemcpy(codes, dc, ref.elem_bytes, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(sc, ds, sb, cudaMemcpyDeviceToHost));
    for (long long r = 0; r < M; r++)
        for (long long c = 0; c < kb; c++) want[tp_swz_offset(r, c, kb)] = ref.scales[r * kb + c];
    long long bad_c = 0, bad_s = 0;
    for (size_t i = 0; i < ref.elem_bytes; i++) bad_c += codes[i] != ref.elems[i];
    for (size_t i = 0; i < sb; i++) bad_s += sc[i] != want[i];
    printf("  native %-6s quantizer M=%lld K=%lld: %lld code bytes, %lld scale bytes (of %zu, padding included) "
           "differ\n",
           qt->name, M, K, bad_c, bad_s, sb);
    ck_assert_msg(bad_c == 0 && bad_s == 0, "%s native quantizer: %lld codes, %lld scales differ", qt->name, bad_c,
                  bad_s);

    /* the GEMM: Blackwell only */
    tp_qtensor wq;
    ck_assert_msg(tp_quantize(qf, w, N, K, 1, 0.0f, &wq, &e) == TP_OK, "%s", e.msg);
    tp_gemm_ctx *ctx = NULL;
    tp_gemm_plan *plan = NULL;
    ck_assert_msg(tp_gemm_ctx_create(32u << 20, &ctx, &e) == TP_OK, "%s", e.msg);
    tp_gemm_desc d = {M, N, K, qt->elem, TP_BF16, 0, 0, (int)qf, 0, 0, 0};
    int dev = 0, major = 0;
    CU(cudaGetDevice(&dev));
    CU(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    tp_status pst = tp_gemm_plan_create(ctx, &d, "native", &plan, &e);
    if (major < 10) {
        printf("  native %-6s GEMM on sm_%d: refused at plan time (%s)\n", qt->name, major * 10, e.msg);
        ck_assert_int_eq(pst, TP_ERR_UNSUPPORTED);
    } else {
        ck_assert_msg(pst == TP_OK, "%s", e.msg);
        /* x without the NaN/Inf for the product check */
        x[3] = 0.5f;
        x[K + 40] = -0.5f;
        tp_qtensor xq;
        ck_assert_msg(tp_quantize(qf, x, M, K, 0, g2, &xq, &e) == TP_OK, "%s", e.msg);
        CU(cudaMemcpy(dx, x, nx * 4, cudaMemcpyHostToDevice));
        ck_assert_int_eq(tpk_block_quant_native(dx, TP_F32, dc, ds, M, K, (int)qf, dg, NULL), 0);
        size_t swb = tp_swz_bytes(N, kb);
        uint8_t *wsw = calloc(swb, 1);
        for (long long r = 0; r < N; r++)
            for (long long c = 0; c < kb; c++) wsw[tp_swz_offset(r, c, kb)] = wq.scales[r * kb + c];
        void *dw = dalloc(wq.elem_bytes), *dws = dalloc(swb), *dd = dalloc((size_t)(M * N) * 2);
        CU(cudaMemcpy(dw, wq.elems, wq.elem_bytes, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dws, wsw, swb, cudaMemcpyHostToDevice));
        CU(cudaMemset(dd, 0xFF, (size_t)(M * N) * 2));
        const float alpha = xq.global_scale * wq.global_scale;
        ck_assert_int_eq(tp_gemm_run_alpha(ctx, plan, dc, dw, NULL, dd, (const float *)ds, (const float *)dws, alpha,
                                           NULL),
                         0);
        CU(cudaDeviceSynchronize());
        float *got = download(TP_BF16, dd, (size_t)(M * N)), *qx = malloc(sizeof(float) * nx),
              *qw = malloc(sizeof(float) * nw), *refo = malloc(sizeof(float) * (size_t)(M * N));
        ck_assert_int_eq(tp_dequantize(&xq, qx, &e), TP_OK);
        ck_assert_int_eq(tp_dequantize(&wq, qw, &e), TP_OK);
        tp_cpu_linear(qx, qw, NULL, refo, M, N, K);
        tp_accuracy a;
        tp_accuracy_compute(got, refo, (int)M, (int)N, &a);
        printf("  native %-6s GEMM M=%lld N=%lld K=%lld: rel L2 %.3e vs CPU emulation\n", qt->name, M, N, K, a.rel_l2);
        ck_assert_int_eq(a.nonfinite, 0);
        ck_assert_msg(a.rel_l2 < 4e-3, "native %s GEMM: rel L2 %.3e", qt->name, a.rel_l2);
        tp_qtensor_free(&xq);
        cudaFree(dw);
        cudaFree(dws);
        cudaFree(dd);
        free(wsw);
        free(got);
        free(qx);
        free(qw);
        free(refo);
    }
    tp_gemm_plan_destroy(plan);
    tp_gemm_ctx_destroy(ctx);
    tp_qtensor_free(&ref);
    tp_qtensor_free(&wq);
    cudaFree(dx);
    cudaFree(dc);
    cudaFree(ds);
    cudaFree(dg);
    free(x);
    free(w);
    free(codes);
    free(sc);
    free(want);
}
END_TEST

Suite *gpu_formats_suite(void) {
    Suite *s = suite_create("gpu_formats");
    TCase *t = tcase_create("block_scaled");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, test_qdq_kernel_bit_exact, 0, 3);
    tcase_add_loop_test(t, test_emulated_gemm, 0, 3);
    tcase_add_loop_test(t, test_fp8_block_quantizers, 0, 5);
    tcase_add_test(t, test_fp8_block_gemm);
    tcase_add_loop_test(t, test_native_quant_and_gemm, 0, 3);
    suite_add_tcase(s, t);
    return s;
}
