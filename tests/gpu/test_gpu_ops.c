/* test_gpu_ops.c: every CUDA kernel (kernels.h) and the cuBLASLt GEMM (gemm_cublaslt.h) against the CPU
 * reference (cpu_ops.h), on the GPU, at awkward shapes (T = 1, 50, 197, 257, 577; C = 100, 37; K = 80; misaligned
 * base pointers that force the scalar paths).
 *
 * Method, the same for every op:
 *   - inputs are random, non-zero (src/core/rng.h), and rounded to the storage type on the host BEFORE the CPU
 *     reference runs, so the reference sees exactly the values the kernel sees and only the kernel's own error
 *     (fp32 arithmetic + the output rounding) is measured;
 *   - every output buffer is poisoned with 0xFF bytes first (NaN in F32, F16, BF16 and E4M3), and any NaN/Inf left
 *     afterwards fails the test (an element the kernel never wrote);
 *   - ops whose result is a pure copy or one fp32 add (im2col, embed_tokens, add, pool mode 0) must match the host
 *     codecs of dtype.c bit for bit; the others are judged by relative L2 error |x - r| / |r| and by the largest
 *     absolute error, bounded by a fraction of max |r| (so one wrong element in a million, which barely moves the
 *     L2 norm, still fails). Tolerances per output format are in tol_for().
 * Every comparison prints one line (ok/FAIL, the case, rel_l2, max_abs and where), so a log shows the margins.
 * Failure messages name the case, the tensor, the flat index and its (row, col).
 *
 * CUDA is initialized inside each test (checked fixture), never in the runner's parent process: the Check
 * framework forks one child per test (CK_FORK=yes under ctest), and a CUDA context does not survive fork(). */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/kernels/patch_embed.h"
#include "formats/dtype.h"
#include "lab_variants.h" /* bench/: the lab-only kernel variants */

#define TP_GPU_MAX_TRACKED 4096
#define TP_GPU_POISON_ON_STREAM /* new device buffers are poisoned on g_stream (cudaMemsetAsync, then a sync) */
#include "gpu_check.h"
#include "close_check.h"

Suite *gpu_ops_suite(void);

/* ---- this file's resources, freed by the fixture's teardown (which also runs after a failure under CK_FORK=no) */

static cudaStream_t g_cap_stream; /* non-blocking stream for graph capture; destroyed at teardown */
static tp_gemm_ctx *g_gemm;
static tp_gemm_plan *g_plans[64];
static int g_nplans;

static void setup(void) {
    g_nplans = 0;
    g_gemm = NULL;
    gpu_setup();
}

/* Tracked allocations are freed here only: intermediate frees are not needed, tests are small. */
static void teardown(void) {
    if (g_stream) cudaStreamSynchronize(g_stream);
    for (int i = 0; i < g_nplans; i++) tp_gemm_plan_destroy(g_plans[i]);
    if (g_gemm) tp_gemm_ctx_destroy(g_gemm);
    free_tracked();
    if (g_cap_stream) cudaStreamDestroy(g_cap_stream);
    g_cap_stream = NULL;
    close_stream();
    g_gemm = NULL;
    g_nplans = 0;
}

/* Device buffer of n elements of dt, starting `offset` elements into the allocation (offset 1 makes the base
 * misaligned for 4-element vectors, forcing the kernels' scalar paths), poisoned with 0xFF bytes (gpu_check.h). */
static void *dev_alloc_at(tp_dtype dt, size_t n, size_t offset) {
    return (char *)dev_bytes((n + offset) * esize(dt)) + offset * esize(dt);
}

/* Converts n fp32 values to dt (FP8: divided by scale) and uploads them. */
static void *dev_upload_at(tp_dtype dt, const float *x, size_t n, float scale, size_t offset) {
    void *d = dev_alloc_at(dt, n, offset);
    upload_to(d, dt, x, n, scale);
    return d;
}

/* Rounds x in place to what storage type dt holds (FP8 with scale). */
static void round_to(tp_dtype dt, float *x, size_t n, float scale) {
    void *tmp = hmalloc(n * esize(dt));
    tp_convert_from_f32(dt, x, tmp, n, scale);
    tp_convert_to_f32(dt, tmp, x, n, scale);
}

/* ---- comparisons -------------------------------------------------------------------------------------------- */

/* Tolerances by the OUTPUT storage format (inputs are pre-rounded, so only the kernel's error counts):
 *   F32:  pure fp32 arithmetic vs the fp64 reference, ~1e-6 relative in practice -> rel L2 <= 1e-5; any single
 *         element within 1e-4 * max|ref|.
 *   F16:  the output rounding alone is up to 2^-11 = 4.9e-4 relative per element (RMS ~2.8e-4) -> rel L2 <= 2e-3;
 *         max abs error <= 4e-3 * max|ref| (8x the worst single rounding).
 *   BF16: 2^-8 = 3.9e-3 per element -> rel L2 <= 1e-2, max abs <= 2e-2 * max|ref|.
 *   E4M3: 3 mantissa bits, rounding error up to 2^-4 = 6.25e-2 relative per element; over many elements the
 *         RMS is 2.65e-2 (measured with the host codec on normal, GELU and LayerNorm-like data at scale amax/448)
 *         -> rel L2 <= 4e-2 for n >= 4096. Below that a handful of large elements dominate the norm and the
 *         statistical margin is gone, so small tensors get the hard bound 2^-4 (+1%): every element's relative
 *         error is at most that (subnormals excepted, whose absolute error 2^-10 * scale is negligible).
 *         max abs <= 8e-2 * max|ref| (measured 3.6e-2: the scale maps max|ref| to 448 exactly). */
static tol_t tol_for(tp_dtype out, size_t n) {
    tol_t t = {1e-5, 1e-4};
    switch (out) {
    case TP_F16: t.rel_l2 = 2e-3, t.abs_frac = 4e-3; break;
    case TP_BF16: t.rel_l2 = 1e-2, t.abs_frac = 2e-2; break;
    case TP_E4M3: t.rel_l2 = n >= 4096 ? 4e-2 : 0.0625 * 1.01, t.abs_frac = 8e-2; break;
    default: break;
    }
    return t;
}


/* Every element of a device tensor is finite (no poison left, no NaN produced). */
static void check_finite(const char *what, tp_dtype dt, const void *d, size_t n, size_t cols) {
    const float *f = download_f32(dt, d, n, 1.0f);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(f[i]))
            if (bad++ == 0) first = i;
    printf("  %s  %s | %s: n=%zu non-finite=%zu\n", bad ? "FAIL" : "ok  ", g_case, what, n, bad);
    fflush(stdout);
    ck_assert_msg(bad == 0, "[%s] %s: %zu of %zu elements are NaN/Inf; first at %zu=[%zu,%zu]", g_case, what, bad, n,
                  first, first / cols, first % cols);
}

static const tp_dtype ACT[3] = {TP_F32, TP_F16, TP_BF16};

/* ================================================================================================================
 * im2col: a pure gather, so cols must equal the host conversion of the CPU result exactly.
 * ============================================================================================================== */

START_TEST(test_im2col) {
    const tp_dtype dt = ACT[_i];
    static const int cases[][4] = {{2, 224, 224, 16}, {3, 48, 32, 16}, {1, 32, 48, 8}}; /* B, H, W, P */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], H = cases[c][1], W = cases[c][2], P = cases[c][3];
        SET_CASE("im2col %s B=%d H=%d W=%d P=%d", dname(dt), B, H, W, P);
        const size_t n_img = (size_t)B * 3 * H * W, Np = (size_t)(H / P) * (W / P), K = 3 * (size_t)P * P;
        const size_t n = B * Np * K;
        float *img = host_normal(n_img, 100 + c, 0.0, 1.0);
        void *d_img = dev_upload_at(TP_F32, img, n_img, 1.0f, 0);
        void *d_cols = dev_alloc_at(dt, n, 0);
        KERNEL_OK(tpk_im2col(d_img, d_cols, dt, B, H, W, P, g_stream));
        float *ref = hmalloc(n * sizeof(float));
        tp_cpu_im2col(img, ref, B, H, W, P);
        void *want = hmalloc(n * esize(dt));
        tp_convert_from_f32(dt, ref, want, n, 1.0f);
        check_bytes_equal("cols", dt, download_bytes(d_cols, n * esize(dt)), want, n, K);
    }
}
END_TEST

/* ================================================================================================================
 * embed_tokens: one fp32 add per element, rounded once: bit-exact against fp32 host adds + host codec.
 * ============================================================================================================== */

START_TEST(test_embed_tokens) {
    const tp_dtype dt = ACT[_i];
    static const int cases[][4] = {{2, 196, 192, 1}, {2, 196, 192, 0}, {3, 6, 100, 1}, {3, 6, 100, 0}, {1, 1, 37, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], Np = cases[c][1], C = cases[c][2], has_cls = cases[c][3], T = Np + has_cls;
        SET_CASE("embed_tokens %s B=%d Np=%d C=%d cls=%d", dname(dt), B, Np, C, has_cls);
        const size_t n_pe = (size_t)B * Np * C, n_x = (size_t)B * T * C;
        float *pe = host_normal(n_pe, 200 + c, 0.0, 1.0), *pos = host_normal((size_t)T * C, 300 + c, 0.0, 0.02);
        float *cls = host_normal((size_t)C, 400 + c, 0.0, 0.5);
        round_to(dt, pe, n_pe, 1.0f);
        round_to(dt, pos, (size_t)T * C, 1.0f);
        round_to(dt, cls, (size_t)C, 1.0f);
        void *d_pe = dev_upload_at(dt, pe, n_pe, 1.0f, 0), *d_pos = dev_upload_at(dt, pos, (size_t)T * C, 1.0f, 0);
        void *d_cls = has_cls ? dev_upload_at(dt, cls, (size_t)C, 1.0f, 0) : NULL;
        void *d_x = dev_alloc_at(dt, n_x, 0);
        KERNEL_OK(tpk_embed_tokens(d_pe, d_cls, d_pos, d_x, dt, B, Np, C, has_cls, g_stream));
        float *ref = hmalloc(n_x * sizeof(float));
        tp_cpu_embed_tokens(pe, has_cls ? cls : NULL, pos, ref, B, Np, C, has_cls);
        void *want = hmalloc(n_x * esize(dt));
        tp_convert_from_f32(dt, ref, want, n_x, 1.0f);
        check_bytes_equal("x", dt, download_bytes(d_x, n_x * esize(dt)), want, n_x, (size_t)C);
    }
}
END_TEST

/* ================================================================================================================
 * patch_embed (patch_embed.h): the fused token embedding against the CPU path it replaces, im2col -> the GEMM's
 * input type -> linear (fp64 accumulation) + bias -> + position embedding (no rounding between: the kernel rounds
 * once), and the class token rows. Shapes: several row tiles with a partial last one (B 3 at 224: M = 588), a
 * partial column tile (C 40, 136), P 8 (K 192: three K steps), no class token, no bias, B 1. On a device other
 * than compute capability 9.0 the entry point must refuse.
 * ============================================================================================================== */

START_TEST(test_patch_embed) {
    const tp_dtype dt = _i ? TP_BF16 : TP_F16;
    /* B, H, W, P, C, has_cls, has_bias */
    static const int cases[][7] = {{3, 224, 224, 16, 768, 1, 1}, {1, 32, 48, 16, 40, 1, 1}, {2, 24, 40, 8, 136, 0, 1},
                                   {3, 64, 64, 16, 192, 1, 0},   {64, 16, 16, 16, 64, 1, 1}};
    if (!tpk_patch_embed_supported(dt, 16, 768)) {
        int major = 0, minor = 0, dev = 0;
        CUDA_OK(cudaGetDevice(&dev));
        CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        ck_assert_msg(!(major == 9 && minor == 0), "patch_embed unsupported on compute capability 9.0");
        ck_assert_int_ne(tpk_patch_embed(NULL, NULL, NULL, NULL, NULL, NULL, dt, 1, 16, 16, 16, 768, 1, g_stream), 0);
        return;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], H = cases[c][1], W = cases[c][2], P = cases[c][3], C = cases[c][4];
        const int has_cls = cases[c][5], has_bias = cases[c][6];
        const int Np = (H / P) * (W / P), K = 3 * P * P, T = Np + has_cls;
        const size_t M = (size_t)B * Np, n_img = (size_t)B * 3 * H * W, n_x = (size_t)B * T * C;
        float *img = host_normal(n_img, 1100 + c, 0.2, 1.0), *w = host_normal((size_t)C * K, 1200 + c, 0.0, 0.03);
        float *bias = host_normal((size_t)C, 1300 + c, 0.0, 0.5), *pos = host_normal((size_t)T * C, 1400 + c, 0.0, 0.5);
        float *cls = host_normal((size_t)C, 1500 + c, 0.0, 0.5);
        round_to(dt, w, (size_t)C * K, 1.0f);
        round_to(dt, bias, (size_t)C, 1.0f);
        round_to(dt, pos, (size_t)T * C, 1.0f);
        round_to(dt, cls, (size_t)C, 1.0f);
        float *cols = hmalloc(M * K * sizeof(float)), *pe = hmalloc(M * C * sizeof(float));
        float *ref = hmalloc(n_x * sizeof(float));
        tp_cpu_im2col(img, cols, B, H, W, P);
        round_to(dt, cols, M * K, 1.0f);
        tp_cpu_linear(cols, w, has_bias ? bias : NULL, pe, (int64_t)M, C, K);
        tp_cpu_embed_tokens(pe, has_cls ? cls : NULL, pos, ref, B, Np, C, has_cls);
        void *d_img = dev_upload_at(TP_F32, img, n_img, 1.0f, 0), *d_w = dev_upload_at(dt, w, (size_t)C * K, 1.0f, 0);
        void *d_bias = has_bias ? dev_upload_at(dt, bias, (size_t)C, 1.0f, 0) : NULL;
        void *d_pos = dev_upload_at(dt, pos, (size_t)T * C, 1.0f, 0), *d_cls = dev_upload_at(dt, cls, (size_t)C, 1.0f, 0);
        for (int v = 0; v < 2; v++) { /* both tile variants (patch_embed.h) */
            SET_CASE("patch_embed %s variant %d B=%d H=%d W=%d P=%d C=%d cls=%d bias=%d", dname(dt), v, B, H, W, P, C,
                     has_cls, has_bias);
            void *d_x = dev_alloc_at(dt, n_x + 16, 0); /* 16 poisoned elements past the end must stay so */
            KERNEL_OK(tpk_patch_embed_variant(d_img, d_w, d_bias, d_cls, d_pos, d_x, dt, B, H, W, P, C, has_cls, v,
                                              g_stream));
            check_close("x", download_f32(dt, d_x, n_x, 1.0f), ref, n_x, (size_t)C, tol_for(dt, n_x));
            check_untouched("x past its end", (const char *)d_x + n_x * esize(dt), 0, 16 * esize(dt));
            if (has_cls) { /* class token rows: one fp32 add, one rounding: bit-exact */
                float *row = hmalloc((size_t)C * sizeof(float));
                for (int n = 0; n < C; n++) row[n] = cls[n] + pos[n];
                void *want = hmalloc((size_t)C * esize(dt));
                tp_convert_from_f32(dt, row, want, (size_t)C, 1.0f);
                for (int b = 0; b < B; b++)
                    check_bytes_equal("class token row", dt,
                                      download_bytes((const char *)d_x + (size_t)b * T * C * esize(dt), C * esize(dt)),
                                      want, (size_t)C, (size_t)C);
            }
        }
    }
    /* rejections: shapes the kernel cannot take, misaligned image, fp32 */
    void *buf = dev_bytes(1 << 20);
    const rejected_call bad[] = {
        {"patch 14 (K 588 not a multiple of 64)", tpk_patch_embed(buf, buf, NULL, buf, buf, buf, dt, 1, 28, 28, 14, 64, 1, g_stream)},
        {"C 100 (not a multiple of 8)", tpk_patch_embed(buf, buf, NULL, buf, buf, buf, dt, 1, 32, 32, 16, 100, 1, g_stream)},
        {"H not a multiple of P", tpk_patch_embed(buf, buf, NULL, buf, buf, buf, dt, 1, 40, 32, 16, 64, 1, g_stream)},
        {"misaligned image", tpk_patch_embed((const float *)buf + 1, buf, NULL, buf, buf, buf, dt, 1, 32, 32, 16, 64, 1, g_stream)},
        {"fp32 weights", tpk_patch_embed(buf, buf, NULL, buf, buf, buf, TP_F32, 1, 32, 32, 16, 64, 1, g_stream)},
        {"no position embedding", tpk_patch_embed(buf, buf, NULL, buf, NULL, buf, dt, 1, 32, 32, 16, 64, 1, g_stream)},
        {"variant 2", tpk_patch_embed_variant(buf, buf, NULL, buf, buf, buf, dt, 1, 32, 32, 16, 64, 1, 2, g_stream)},
    };
    check_rejected(bad, sizeof bad / sizeof bad[0]);
}
END_TEST

/* ================================================================================================================
 * LayerNorm: rows of M = B*T tokens; x has a non-zero mean (1.5) so a one-pass variance would lose digits.
 * ============================================================================================================== */

static const struct {
    tp_dtype x, w, y;
} LN_COMBOS[] = {
    {TP_F32, TP_F32, TP_F32},   {TP_F16, TP_F16, TP_F16},   {TP_BF16, TP_BF16, TP_BF16},
    {TP_F16, TP_F32, TP_F16},   {TP_BF16, TP_F32, TP_BF16}, {TP_F32, TP_F32, TP_F16},
    {TP_F32, TP_F32, TP_E4M3},  {TP_F16, TP_F16, TP_E4M3},  {TP_BF16, TP_BF16, TP_E4M3},
};

START_TEST(test_layernorm) {
    const tp_dtype xdt = LN_COMBOS[_i].x, wdt = LN_COMBOS[_i].w, ydt = LN_COMBOS[_i].y;
    /* M, C, base offset in elements (1 = misaligned: scalar path) */
    /* C % 128 == 0 and C <= 1024 take the row-in-registers kernel (384, 768, 1024; 768 misaligned and 1152 do
     * not), the others the three-pass one */
    static const int cases[][3] = {{1, 192, 0}, {591, 768, 0},  {100, 100, 0}, {591, 192, 1}, {150, 768, 1},
                                   {50, 37, 0}, {1, 100, 1},    {3, 384, 0},   {197, 1024, 0}, {7, 1152, 0}};
    const float eps = 1e-6f;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int M = cases[c][0], C = cases[c][1];
        const size_t off = (size_t)cases[c][2], n = (size_t)M * C;
        SET_CASE("layernorm x=%s w=%s y=%s M=%d C=%d offset=%zu", dname(xdt), dname(wdt), dname(ydt), M, C, off);
        float *x = host_normal(n, 500 + c, 1.5, 3.0), *w = host_normal((size_t)C, 600 + c, 1.0, 0.2);
        float *b = host_normal((size_t)C, 700 + c, 0.0, 0.5);
        round_to(xdt, x, n, 1.0f);
        round_to(wdt, w, (size_t)C, 1.0f);
        round_to(wdt, b, (size_t)C, 1.0f);
        float *ref = hmalloc(n * sizeof(float));
        tp_cpu_layernorm(x, w, b, ref, M, C, eps);
        const float scale = ydt == TP_E4M3 ? host_amax(ref, n) / 448.0f : 1.0f;
        void *d_x = dev_upload_at(xdt, x, n, 1.0f, off), *d_w = dev_upload_at(wdt, w, (size_t)C, 1.0f, off);
        void *d_b = dev_upload_at(wdt, b, (size_t)C, 1.0f, off), *d_y = dev_alloc_at(ydt, n, off);
        float *d_scale = ydt == TP_E4M3 ? dev_scalar(scale) : NULL;
        KERNEL_OK(tpk_layernorm(d_x, xdt, d_w, d_b, wdt, d_y, ydt, d_scale, M, C, eps, g_stream));
        check_close("y", download_f32(ydt, d_y, n, scale), ref, n, (size_t)C, tol_for(ydt, n));
    }
}
END_TEST

/* ================================================================================================================
 * GELU
 * ============================================================================================================== */

static const struct {
    tp_dtype x, y;
} GELU_COMBOS[] = {
    {TP_F32, TP_F32}, {TP_F16, TP_F16}, {TP_BF16, TP_BF16}, {TP_F32, TP_F16},
    {TP_F16, TP_F32}, {TP_F32, TP_E4M3}, {TP_F16, TP_E4M3}, {TP_BF16, TP_E4M3},
};

START_TEST(test_gelu) {
    const tp_dtype xdt = GELU_COMBOS[_i].x, ydt = GELU_COMBOS[_i].y;
    static const size_t cases[][2] = {{1, 0}, {3, 1}, {591 * 768, 0}, {1000003, 0}, {50 * 100, 1}, {3 * 192 * 4, 1}};
    for (size_t c = 0; c < 2 * sizeof cases / sizeof cases[0]; c++) { /* the erf form, then the tanh form */
        const int form = c >= sizeof cases / sizeof cases[0];
        const size_t n = cases[c % (sizeof cases / sizeof cases[0])][0], off = cases[c % (sizeof cases / sizeof cases[0])][1];
        SET_CASE("gelu%s %s->%s n=%zu offset=%zu", form ? " tanh" : "", dname(xdt), dname(ydt), n, off);
        float *x = host_normal(n, 800 + c, 0.0, 2.0);
        round_to(xdt, x, n, 1.0f);
        float *ref = hmalloc(n * sizeof(float));
        tp_cpu_gelu(x, ref, (int64_t)n, form);
        const float scale = ydt == TP_E4M3 ? host_amax(ref, n) / 448.0f : 1.0f;
        void *d_x = dev_upload_at(xdt, x, n, 1.0f, off), *d_y = dev_alloc_at(ydt, n, off);
        float *d_scale = ydt == TP_E4M3 ? dev_scalar(scale) : NULL;
        KERNEL_OK(tpk_gelu(d_x, xdt, d_y, ydt, d_scale, n, form, g_stream));
        const float *got = download_f32(ydt, d_y, n, scale);
        check_close("y", got, ref, n, n, tol_for(ydt, n));
        if (ydt == TP_E4M3) { /* every element within half an E4M3 step of the exact GELU (+ the erf's 1e-6) */
            size_t worse = 0, first = 0;
            for (size_t i = 0; i < n; i++) {
                const double a = fabs((double)ref[i]) / scale;
                const double step = a < 0x1p-6 ? 0x1p-9 : ldexp(1.0, (int)floor(log2(a)) - 3);
                if (fabs((double)got[i] - ref[i]) > 0.5 * step * scale + 1e-6 * fabs((double)ref[i]) + 1e-6)
                    if (worse++ == 0) first = i;
            }
            printf("  %s  %s | within half an e4m3 step: %zu of %zu beyond\n", worse ? "FAIL" : "ok  ", g_case, worse, n);
            ck_assert_msg(worse == 0, "[%s] %zu elements beyond half an E4M3 step, first %zu: x %.9g got %.9g ref %.9g",
                          g_case, worse, first, x[first], got[first], ref[first]);
        }
    }
}
END_TEST

/* ================================================================================================================
 * E4M3 outputs are rounded like the host codec: q = sat(rne(y / scale)). The kernels divide by a reciprocal
 * and one correction step (div_by_scale in kernels.cu), so this test aims at the inputs where that could go
 * wrong: y / scale within a few ulps of a midpoint between two E4M3 values, for scales that are not powers of
 * two. GELU is the identity (to the bit) for x >= 6 in fp32 (erfc(-x / sqrt 2) < 2e-9 rounds 2 - erfc to 2),
 * so y = x there and the quotients are chosen exactly; the f32 output of the same kernel checks that premise.
 * The data must be able to fail: a bare multiply by RN(1 / scale) rounds some of them differently.
 * ============================================================================================================== */

START_TEST(test_e4m3_rounding) {
    static const float scales[] = {0.1f, 0.3f, 1.0f / 3.0f, 0.7f, 1.1f, 0.0137f * 1000.0f / 7.0f};
    enum { MAX_N = 4096 };
    float *x = hmalloc(MAX_N * sizeof(float));
    size_t n_bare_differs = 0;
    for (int si = 0; si < N_OF(scales); si++) {
        const float sc = scales[si], r = 1.0f / sc;
        size_t n = 0;
        /* midpoints between consecutive E4M3 values from 64 to 448 (spacing 8, 16, 32), +-0..6 ulps around m*sc */
        for (float lo = 64.0f; lo < 448.0f;) {
            const float step = lo < 128.0f ? 8.0f : lo < 256.0f ? 16.0f : 32.0f, m = lo + step / 2;
            float c = m * sc;
            for (int k = 0; k < 6; k++) c = nextafterf(c, 0.0f);
            for (int k = 0; k < 13 && n < MAX_N; k++, c = nextafterf(c, INFINITY))
                if (c >= 6.0f) x[n++] = c;
            lo += step;
        }
        SET_CASE("e4m3 rounding: gelu f32 -> e4m3, scale %.9g, %zu values near midpoints", sc, n);
        for (size_t i = 0; i < n; i++)
            if (tp_f32_to_e4m3(x[i] * r) != tp_f32_to_e4m3(x[i] / sc)) n_bare_differs++;
        void *d_x = dev_upload_at(TP_F32, x, n, 1.0f, 0), *d_y32 = dev_alloc_at(TP_F32, n, 0);
        void *d_y8 = dev_alloc_at(TP_E4M3, n, 0);
        float *d_scale = dev_scalar(sc);
        KERNEL_OK(tpk_gelu(d_x, TP_F32, d_y32, TP_F32, NULL, n, 0, g_stream));
        KERNEL_OK(tpk_gelu(d_x, TP_F32, d_y8, TP_E4M3, d_scale, n, 0, g_stream));
        const float *y32 = download_bytes(d_y32, n * sizeof(float));
        ck_assert_msg(memcmp(y32, x, n * sizeof(float)) == 0, "gelu(x) != x for x >= 6 in fp32: the premise fails");
        uint8_t *want = hmalloc(n);
        tp_convert_from_f32(TP_E4M3, x, want, n, sc);
        check_bytes_equal("gelu e4m3", TP_E4M3, download_bytes(d_y8, n), want, n, n);
    }
    ck_assert_msg(n_bare_differs > 0, "no input where a bare multiply by 1/scale rounds differently: test is blind");
}
END_TEST

/* ================================================================================================================
 * add: one fp32 add, rounded once: bit-exact. Also y aliasing a, and y aliasing b.
 * ============================================================================================================== */

START_TEST(test_add) {
    const tp_dtype dt = ACT[_i];
    /* n, offset, alias (0 none, 1 y = a, 2 y = b) */
    static const size_t cases[][3] = {{1, 0, 0},       {5, 1, 0},       {591 * 192, 0, 0}, {1000003, 0, 0},
                                      {10001, 1, 0},   {591 * 768, 0, 1}, {4099, 1, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t n = cases[c][0], off = cases[c][1], alias = cases[c][2];
        SET_CASE("add %s n=%zu offset=%zu alias=%s", dname(dt), n, off, alias == 0 ? "none" : alias == 1 ? "y=a" : "y=b");
        float *a = host_normal(n, 900 + c, 0.0, 1.0), *b = host_normal(n, 1000 + c, 0.0, 3.0);
        round_to(dt, a, n, 1.0f);
        round_to(dt, b, n, 1.0f);
        void *d_a = dev_upload_at(dt, a, n, 1.0f, off), *d_b = dev_upload_at(dt, b, n, 1.0f, off);
        void *d_y = alias == 1 ? d_a : alias == 2 ? d_b : dev_alloc_at(dt, n, off);
        KERNEL_OK(tpk_add(d_a, d_b, d_y, dt, n, g_stream));
        float *ref = hmalloc(n * sizeof(float));
        tp_cpu_add(a, b, ref, (int64_t)n);
        void *want = hmalloc(n * esize(dt));
        tp_convert_from_f32(dt, ref, want, n, 1.0f);
        check_bytes_equal("y", dt, download_bytes(d_y, n * esize(dt)), want, n, n);
    }
}
END_TEST

/* ================================================================================================================
 * Attention: every T of interest (1: a single key; 50 and 197: partial last key tile; 257: just past a multiple
 * of 32 and 16; 577: many tiles), B in {1, 3}, head dims covering each register-tile width (D <= 32, 64, 96,
 * 128), D not a multiple of 32 (80, 100) and D not a multiple of 4 (33: the scalar load path).
 * q, k ~ N(0, 2^2) gives scores with a standard deviation of 4 after the D^-0.5 scale, so softmaxes are peaked
 * and the running max changes across key tiles, exercising the online rescaling.
 * ============================================================================================================== */

static const struct {
    tp_dtype in, out;
} ATT_COMBOS[] = {
    {TP_F32, TP_F32}, {TP_F16, TP_F16}, {TP_BF16, TP_BF16}, {TP_F16, TP_E4M3}, {TP_BF16, TP_E4M3}, {TP_F32, TP_BF16},
};

START_TEST(test_attention) {
    const tp_dtype idt = ATT_COMBOS[_i].in, odt = ATT_COMBOS[_i].out;
    static const int Ts[] = {1, 50, 197, 257, 577}, Bs[] = {1, 3};
    static const int HD[][2] = {{3, 64}, {2, 80}, {1, 128}, {2, 32}, {1, 33}, {1, 96}, {2, 100}};
    uint64_t seed = 1100;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
            for (size_t hi = 0; hi < sizeof HD / sizeof HD[0]; hi++) {
                const int T = Ts[ti], B = Bs[bi], H = HD[hi][0], D = HD[hi][1];
                SET_CASE("attention %s->%s B=%d T=%d H=%d D=%d", dname(idt), dname(odt), B, T, H, D);
                const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
                const float scale = 1.0f / sqrtf((float)D);
                float *qkv = host_normal(n_in, seed++, 0.0, 2.0);
                round_to(idt, qkv, n_in, 1.0f);
                float *ref = hmalloc(n_out * sizeof(float));
                tp_cpu_attention(qkv, ref, B, T, H, D, scale);
                const float oscale = odt == TP_E4M3 ? host_amax(ref, n_out) / 448.0f : 1.0f;
                void *d_qkv = dev_upload_at(idt, qkv, n_in, 1.0f, 0), *d_out = dev_alloc_at(odt, n_out, 0);
                float *d_oscale = odt == TP_E4M3 ? dev_scalar(oscale) : NULL;
                KERNEL_OK(tpk_attention(d_qkv, idt, d_out, odt, d_oscale, B, T, H, D, scale, g_stream));
                tol_t tol = tol_for(odt, n_out);
                /* F32 output: the fp32 dot products carry ~3e-6 absolute error into the scores (D = 128,
                 * |q.k| ~ 45 before scaling), i.e. ~3e-6 relative into the weights and the output (a CPU emulation
                 * of this kernel measured 1e-6 rel L2); 2e-5 leaves a margin for the GPU's exp2f (2 ulp). */
                if (odt == TP_F32) tol.rel_l2 = 2e-5, tol.abs_frac = 2e-4;
                check_close("out", download_f32(odt, d_out, n_out, oscale), ref, n_out, (size_t)H * D, tol);
            }
}
END_TEST

/* ================================================================================================================
 * pool: mode 0 is a copy (bit-exact); mode 1 an fp32 mean (tolerance of the format).
 * ============================================================================================================== */

START_TEST(test_pool) {
    const tp_dtype dt = ACT[_i];
    /* B, T, C, mode, prefix */
    static const int cases[][5] = {{3, 197, 192, 0, 0}, {3, 197, 192, 1, 1}, {2, 50, 100, 1, 0},
                                   {1, 1, 768, 1, 0},   {1, 1, 768, 0, 0},   {2, 257, 768, 1, 1}, {2, 577, 37, 1, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], C = cases[c][2], mode = cases[c][3], prefix = cases[c][4];
        SET_CASE("pool %s B=%d T=%d C=%d mode=%d prefix=%d", dname(dt), B, T, C, mode, prefix);
        const size_t n_x = (size_t)B * T * C, n_y = (size_t)B * C;
        float *x = host_normal(n_x, 1200 + c, 0.5, 1.0);
        round_to(dt, x, n_x, 1.0f);
        void *d_x = dev_upload_at(dt, x, n_x, 1.0f, 0), *d_y = dev_alloc_at(dt, n_y, 0);
        KERNEL_OK(tpk_pool(d_x, d_y, dt, B, T, C, mode, prefix, g_stream));
        float *ref = hmalloc(n_y * sizeof(float));
        tp_cpu_pool(x, ref, B, T, C, mode, prefix);
        if (mode == 0) {
            void *want = hmalloc(n_y * esize(dt));
            tp_convert_from_f32(dt, ref, want, n_y, 1.0f);
            check_bytes_equal("y", dt, download_bytes(d_y, n_y * esize(dt)), want, n_y, (size_t)C);
        } else {
            check_close("y", download_f32(dt, d_y, n_y, 1.0f), ref, n_y, (size_t)C, tol_for(dt, n_y));
        }
    }
}
END_TEST

/* ================================================================================================================
 * amax: exact (a max of representable values). Planted extreme at the last index with a negative sign (|x| must
 * be taken), initial values below and above the data, accumulation over two calls, NaN propagation, n = 0.
 * ============================================================================================================== */

static float run_amax(tp_dtype dt, const void *d_x, size_t n, float init) {
    float *d_m = dev_scalar(init), m;
    KERNEL_OK(tpk_amax(d_x, dt, n, d_m, g_stream));
    CUDA_OK(cudaMemcpy(&m, d_m, sizeof m, cudaMemcpyDeviceToHost));
    return m;
}

START_TEST(test_amax) {
    const tp_dtype dt = ACT[_i];
    static const size_t cases[][2] = {{1, 0}, {7, 1}, {1000003, 0}, {591 * 768, 1}, {4097, 0}}; /* n, offset */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t n = cases[c][0], off = cases[c][1];
        SET_CASE("amax %s n=%zu offset=%zu", dname(dt), n, off);
        float *x = host_normal(n, 1300 + c, 0.0, 1.0);
        x[n - 1] = -9.5f; /* exact in every format; beyond the normal samples' range */
        round_to(dt, x, n, 1.0f);
        const float want = host_amax(x, n);
        void *d_x = dev_upload_at(dt, x, n, 1.0f, off);
        float got = run_amax(dt, d_x, n, 0.0f);
        printf("  %s  %s: amax=%.8g want %.8g\n", got == want ? "ok  " : "FAIL", g_case, got, want);
        ck_assert_msg(got == want, "[%s] init 0: amax %.8g, want %.8g", g_case, got, want);
        got = run_amax(dt, d_x, n, -1.0f);
        ck_assert_msg(got == want, "[%s] init -1 (must lose to any |x|): amax %.8g, want %.8g", g_case, got, want);
        got = run_amax(dt, d_x, n, 100.0f);
        ck_assert_msg(got == 100.0f, "[%s] init 100 (above the data, must stay): amax %.8g", g_case, got);

        /* two tensors into one amax: max over both */
        float *d_m = dev_scalar(0.0f);
        float *y = host_normal(n, 1400 + c, 0.0, 1.0);
        y[0] = 12.25f;
        round_to(dt, y, n, 1.0f);
        void *d_y = dev_upload_at(dt, y, n, 1.0f, 0);
        KERNEL_OK(tpk_amax(d_x, dt, n, d_m, g_stream));
        KERNEL_OK(tpk_amax(d_y, dt, n, d_m, g_stream));
        CUDA_OK(cudaMemcpy(&got, d_m, sizeof got, cudaMemcpyDeviceToHost));
        const float want2 = fmaxf(want, host_amax(y, n));
        ck_assert_msg(got == want2, "[%s] accumulated over two tensors: amax %.8g, want %.8g", g_case, got, want2);

        /* a NaN anywhere makes the result NaN, whatever the order blocks finish in */
        x[n / 2] = NAN;
        void *d_xn = dev_upload_at(dt, x, n, 1.0f, off);
        got = run_amax(dt, d_xn, n, 0.0f);
        ck_assert_msg(isnan(got), "[%s] NaN at index %zu: amax %.8g, want NaN", g_case, n / 2, got);
        got = run_amax(dt, d_xn, n, 1e30f);
        ck_assert_msg(isnan(got), "[%s] NaN at index %zu with init 1e30: amax %.8g, want NaN", g_case, n / 2, got);
    }
    SET_CASE("amax %s n=0", dname(dt));
    float *d_m = dev_scalar(3.0f), m;
    LAUNCH_OK(tpk_amax(d_m, dt, 0, d_m, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
    CUDA_OK(cudaMemcpy(&m, d_m, sizeof m, cudaMemcpyDeviceToHost));
    ck_assert_msg(m == 3.0f, "[%s] n = 0 must leave amax alone: %.8g", g_case, m);
}
END_TEST

/* The |x| histogram of percentile calibration: the same float arithmetic on the host gives the same bins, so
 * the counts must match exactly (every element lands in one bin; NaN in none). */
START_TEST(test_abs_histogram) {
    const tp_dtype dt = ACT[_i];
    const size_t n = 591 * 768 + 3;
    const int nbins = 2048;
    SET_CASE("abs histogram %s n=%zu", dname(dt), n);
    float *x = host_normal(n, 1500, 0.0, 1.0);
    x[7] = -6.5f;
    x[11] = NAN;
    round_to(dt, x, n, 1.0f);
    float amax = 0;
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    unsigned *want = calloc((size_t)nbins, sizeof *want), *got = calloc((size_t)nbins, sizeof *got);
    const float per = (float)nbins / amax;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a != a) continue;
        int b = (int)(a * per);
        want[b < nbins ? b : nbins - 1]++;
    }
    void *d_x = dev_upload_at(dt, x, n, 1.0f, 0);
    float *d_amax = dev_scalar(amax);
    unsigned *d_bins = NULL;
    CUDA_OK(cudaMalloc((void **)&d_bins, sizeof(unsigned) * (size_t)nbins));
    CUDA_OK(cudaMemset(d_bins, 0, sizeof(unsigned) * (size_t)nbins));
    KERNEL_OK(tpk_abs_histogram(d_x, dt, n, d_amax, d_bins, nbins, g_stream));
    CUDA_OK(cudaMemcpy(got, d_bins, sizeof(unsigned) * (size_t)nbins, cudaMemcpyDeviceToHost));
    size_t total = 0;
    int bad = 0;
    for (int b = 0; b < nbins; b++) {
        total += got[b];
        bad += got[b] != want[b];
    }
    printf("  %s  %s: %zu counted (NaN left out), %d bins differ\n", bad ? "FAIL" : "ok  ", g_case, total, bad);
    ck_assert_msg(bad == 0 && total == n - 1, "[%s] %d bins differ, %zu counted", g_case, bad, total);
    ck_assert_int_ne(tpk_abs_histogram(d_x, dt, n, d_amax, d_bins, 4097, g_stream), 0);
    cudaFree(d_bins);
    free(want);
    free(got);
}
END_TEST

/* ================================================================================================================
 * GEMM through cuBLASLt. Reference: tp_cpu_linear (fp64 accumulation) on the inputs as stored (rounded to
 * F16/BF16, or quantized to E4M3 and dequantized with the same per-tensor scales), so the only error left is the
 * fp32 accumulation order and the output rounding: tolerances of the output format (tol_for). For F32 that
 * means 1e-5, which TF32 (10-bit mantissa, ~5e-4) would fail: the test also proves TF32 is off.
 * ============================================================================================================== */

static const struct {
    tp_dtype ab, d;
} GEMM_TYPES[] = {{TP_F32, TP_F32},  {TP_F16, TP_F16},   {TP_BF16, TP_BF16},
                 {TP_E4M3, TP_F16}, {TP_E4M3, TP_BF16}, {TP_E4M3, TP_E4M3}};

static void gemm_ctx(void) {
    if (g_gemm) return;
    tp_error err = {0};
    tp_status st = tp_gemm_ctx_create(32u << 20, &g_gemm, &err);
    ck_assert_msg(st == TP_OK, "[%s] tp_gemm_ctx_create: %s: %s", g_case, tp_status_name(st), err.msg);
}

static tp_gemm_plan *gemm_plan_r(tp_dtype ab, tp_dtype d, int64_t M, int64_t N, int64_t K, int bias, int residual,
                                 int gelu) {
    gemm_ctx();
    tp_gemm_desc desc = {M, N, K, ab, d, bias, 0, 0, residual, gelu, 0};
    tp_gemm_plan *p = NULL;
    tp_error err = {0};
    tp_status st = tp_gemm_plan_create(g_gemm, &desc, "test", &p, &err);
    ck_assert_msg(st == TP_OK, "[%s] tp_gemm_plan_create: %s: %s", g_case, tp_status_name(st), err.msg);
    ck_assert_msg(g_nplans < 64, "test bug: too many plans");
    g_plans[g_nplans++] = p;
    return p;
}
static tp_gemm_plan *gemm_plan(tp_dtype ab, tp_dtype d, int64_t M, int64_t N, int64_t K, int bias) {
    return gemm_plan_r(ab, d, M, N, K, bias, 0, 0);
}

START_TEST(test_gemm) {
    const tp_dtype ab = GEMM_TYPES[_i].ab, dt = GEMM_TYPES[_i].d;
    const int fp8 = ab == TP_E4M3, q8 = dt == TP_E4M3;
    /* FP8 needs K % 16 == 0 and N % 8 == 0 (N % 16 == 0 for an E4M3 D; see gemm_cublaslt.c), so its tiny case is
     * (3, 16, 80). An E4M3 D: bias in F16, D's storage scale amax(reference) / 448, its reciprocal as d_scale;
     * the tolerance of an E4M3 output (one rounding of the exact result). */
    const tp_dtype bdt = q8 ? TP_F16 : dt;
    const int64_t shapes[][3] = {{197 * 3, 2304, 768}, {50, q8 ? 1008 : 1000, 192}, {3, fp8 ? 16 : 10, 80}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        const size_t nA = (size_t)(M * K), nW = (size_t)(N * K), nD = (size_t)(M * N);
        SET_CASE("gemm %s->%s M=%lld N=%lld K=%lld", dname(ab), dname(dt), (long long)M, (long long)N, (long long)K);
        float *A = host_normal(nA, 1500 + s, 0.0, 1.0), *W = host_normal(nW, 1600 + s, 0.0, 0.05);
        float *bias = host_normal((size_t)N, 1700 + s, 0.0, 0.5);
        const float a_scale = fp8 ? host_amax(A, nA) / 448.0f : 1.0f, w_scale = fp8 ? host_amax(W, nW) / 448.0f : 1.0f;
        round_to(ab, A, nA, a_scale); /* for E4M3: quantize, then dequantize with the same scale */
        round_to(ab, W, nW, w_scale);
        round_to(bdt, bias, (size_t)N, 1.0f);
        float *ref = hmalloc(nD * sizeof(float)), *ref_b = hmalloc(nD * sizeof(float));
        tp_cpu_linear(A, W, NULL, ref, M, N, K);
        for (size_t i = 0; i < nD; i++) ref_b[i] = (float)((double)ref[i] + bias[i % (size_t)N]);

        void *d_A = dev_upload_at(ab, A, nA, a_scale, 0), *d_W = dev_upload_at(ab, W, nW, w_scale, 0);
        void *d_bias = dev_upload_at(bdt, bias, (size_t)N, 1.0f, 0);
        float *d_as = fp8 ? dev_scalar(a_scale) : NULL, *d_ws = fp8 ? dev_scalar(w_scale) : NULL;
        for (int has_bias = 0; has_bias <= 1; has_bias++) {
            SET_CASE("gemm %s->%s M=%lld N=%lld K=%lld bias=%d", dname(ab), dname(dt), (long long)M, (long long)N,
                     (long long)K, has_bias);
            tp_gemm_plan *p = gemm_plan(ab, dt, M, N, K, has_bias);
            void *d_D = dev_alloc_at(dt, nD, 0);
            const float *want = has_bias ? ref_b : ref, ds = q8 ? host_amax(want, nD) / 448.0f : 1.0f;
            float *d_ds = q8 ? dev_scalar(1.0f / ds) : NULL;
            int r = tp_gemm_run_q(g_gemm, p, d_A, d_W, has_bias ? d_bias : NULL, NULL, d_D, d_as, d_ws, d_ds, 1.0f,
                                  g_stream);
            ck_assert_msg(r == 0, "[%s] tp_gemm_run_q returned cuBLAS status %d", g_case, r);
            CUDA_OK(cudaStreamSynchronize(g_stream));
            check_close("D", download_f32(dt, d_D, nD, ds), want, nD, (size_t)N, tol_for(dt, nD));
            if (q8) /* the E4M3 D without its scale: refused */
                ck_assert_msg(tp_gemm_run(g_gemm, p, d_A, d_W, has_bias ? d_bias : NULL, d_D, d_as, d_ws, g_stream) != 0,
                              "[%s] E4M3 D without d_scale accepted", g_case);
            if (!q8) { /* + a residual R in the epilogue (C, beta = 1): D = A W^T (+ bias) + R, rounded once */
                SET_CASE("gemm %s->%s M=%lld N=%lld K=%lld bias=%d + residual", dname(ab), dname(dt), (long long)M,
                         (long long)N, (long long)K, has_bias);
                float *R = host_normal(nD, 1800 + s, 0.0, 1.0), *ref_r = hmalloc(nD * sizeof(float));
                round_to(dt, R, nD, 1.0f);
                for (size_t i = 0; i < nD; i++) ref_r[i] = (float)((double)want[i] + R[i]);
                void *d_R = dev_upload_at(dt, R, nD, 1.0f, 0), *d_DR = dev_alloc_at(dt, nD, 0);
                tp_gemm_plan *pr = gemm_plan_r(ab, dt, M, N, K, has_bias, 1, 0);
                r = tp_gemm_run_q(g_gemm, pr, d_A, d_W, has_bias ? d_bias : NULL, d_R, d_DR, d_as, d_ws, NULL, 1.0f,
                                  g_stream);
                ck_assert_msg(r == 0, "[%s] tp_gemm_run_q returned cuBLAS status %d", g_case, r);
                CUDA_OK(cudaStreamSynchronize(g_stream));
                check_close("D", download_f32(dt, d_DR, nD, 1.0f), ref_r, nD, (size_t)N, tol_for(dt, nD));
                /* the same in place (R is D), and a residual plan without its residual: refused */
                r = tp_gemm_run_q(g_gemm, pr, d_A, d_W, has_bias ? d_bias : NULL, d_R, d_R, d_as, d_ws, NULL, 1.0f,
                                  g_stream);
                ck_assert_msg(r == 0, "[%s] in place: cuBLAS status %d", g_case, r);
                CUDA_OK(cudaStreamSynchronize(g_stream));
                check_close("D in place", download_f32(dt, d_R, nD, 1.0f), ref_r, nD, (size_t)N, tol_for(dt, nD));
                ck_assert_msg(tp_gemm_run_q(g_gemm, pr, d_A, d_W, has_bias ? d_bias : NULL, NULL, d_DR, d_as, d_ws, NULL,
                                            1.0f, g_stream) != 0,
                              "[%s] residual plan without a residual accepted", g_case);
            }
            { /* GELU in the epilogue (GELU / GELU_BIAS): cuBLASLt's tanh form against it in fp64, E4M3 D included */
                SET_CASE("gemm %s->%s M=%lld N=%lld K=%lld bias=%d + gelu (tanh)", dname(ab), dname(dt), (long long)M,
                         (long long)N, (long long)K, has_bias);
                float *ref_g = hmalloc(nD * sizeof(float));
                for (size_t i = 0; i < nD; i++) {
                    const double v = (has_bias ? ref_b : ref)[i];
                    ref_g[i] = (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
                }
                const float gs = q8 ? host_amax(ref_g, nD) / 448.0f : 1.0f;
                float *d_gs = q8 ? dev_scalar(1.0f / gs) : NULL;
                void *d_DG = dev_alloc_at(dt, nD, 0);
                tp_gemm_plan *pg = gemm_plan_r(ab, dt, M, N, K, has_bias, 0, 1);
                r = tp_gemm_run_q(g_gemm, pg, d_A, d_W, has_bias ? d_bias : NULL, NULL, d_DG, d_as, d_ws, d_gs, 1.0f,
                                  g_stream);
                ck_assert_msg(r == 0, "[%s] tp_gemm_run_q returned cuBLAS status %d", g_case, r);
                CUDA_OK(cudaStreamSynchronize(g_stream));
                check_close("D", download_f32(dt, d_DG, nD, gs), ref_g, nD, (size_t)N, tol_for(dt, nD));
            }
        }
    }
}
END_TEST

static void expect_plan_rejected(tp_dtype ab, tp_dtype d, int64_t M, int64_t N, int64_t K, tp_status want,
                                 const char *must_mention) {
    gemm_ctx();
    tp_gemm_desc desc = {M, N, K, ab, d, 1, 0, 0, 0, 0, 0};
    tp_gemm_plan *p = NULL;
    tp_error err = {0};
    SET_CASE("gemm plan %s->%s M=%lld N=%lld K=%lld must fail", dname(ab), dname(d), (long long)M, (long long)N,
             (long long)K);
    tp_status st = tp_gemm_plan_create(g_gemm, &desc, "blocks.7.mlp.fc2", &p, &err);
    if (p) g_plans[g_nplans++] = p;
    printf("  %s  %s: %s: %s\n", st == want ? "ok  " : "FAIL", g_case, tp_status_name(st), err.msg);
    ck_assert_msg(st == want, "[%s] status %s (%s), want %s", g_case, tp_status_name(st), err.msg, tp_status_name(want));
    ck_assert_msg(p == NULL, "[%s] a failed plan must leave *out NULL", g_case);
    ck_assert_msg(strstr(err.msg, "blocks.7.mlp.fc2") != NULL, "[%s] message must name the layer: %s", g_case, err.msg);
    ck_assert_msg(strstr(err.msg, must_mention) != NULL, "[%s] message must mention '%s': %s", g_case, must_mention,
                  err.msg);
}

START_TEST(test_gemm_rejects) {
    expect_plan_rejected(TP_E4M3, TP_F16, 50, 1000, 88, TP_ERR_UNSUPPORTED, "K=88");
    expect_plan_rejected(TP_E4M3, TP_BF16, 50, 1000, 88, TP_ERR_UNSUPPORTED, "K=88");
    expect_plan_rejected(TP_E4M3, TP_F16, 3, 10, 80, TP_ERR_UNSUPPORTED, "N=10");
    expect_plan_rejected(TP_E4M3, TP_F32, 64, 64, 64, TP_ERR_UNSUPPORTED, "f32");
    expect_plan_rejected(TP_F16, TP_F32, 64, 64, 64, TP_ERR_UNSUPPORTED, "f16");
    expect_plan_rejected(TP_E5M2, TP_F16, 64, 64, 64, TP_ERR_UNSUPPORTED, "e5m2");
    expect_plan_rejected(TP_F32, TP_F32, 0, 64, 64, TP_ERR_ARG, "M=0");

    /* run-time argument checks: caller bugs must be errors, not silently unscaled or unbiased results */
    SET_CASE("gemm run argument checks");
    tp_gemm_plan *p8 = gemm_plan(TP_E4M3, TP_F16, 32, 32, 32, 1);
    void *a = dev_alloc_at(TP_E4M3, 32 * 32, 0), *w = dev_alloc_at(TP_E4M3, 32 * 32, 0);
    void *d = dev_alloc_at(TP_F16, 32 * 32, 0);
    void *b = dev_alloc_at(TP_F16, 32, 0);
    float *s = dev_scalar(1.0f);
    ck_assert_msg(tp_gemm_run(g_gemm, p8, a, w, b, d, NULL, s, g_stream) != 0, "[%s] FP8 without a_scale accepted", g_case);
    ck_assert_msg(tp_gemm_run(g_gemm, p8, a, w, b, d, s, NULL, g_stream) != 0, "[%s] FP8 without w_scale accepted", g_case);
    ck_assert_msg(tp_gemm_run(g_gemm, p8, a, w, NULL, d, s, s, g_stream) != 0, "[%s] bias plan without bias accepted", g_case);
    ck_assert_msg(tp_gemm_run(g_gemm, p8, (char *)a + 1, w, b, d, s, s, g_stream) != 0,
                  "[%s] misaligned A accepted", g_case);
    float *s4 = (float *)dev_alloc_at(TP_F32, 8, 1); /* 4-byte aligned only */
    ck_assert_msg(tp_gemm_run(g_gemm, p8, a, w, b, d, s4, s, g_stream) != 0, "[%s] 4-byte-aligned a_scale accepted",
                  g_case);
    printf("  info  cuBLASLt version %zu\n", tp_gemm_lib_version());
    ck_assert_msg(tp_gemm_lib_version() >= 120000, "[%s] implausible cuBLASLt version %zu", g_case, tp_gemm_lib_version());
}
END_TEST

/* ================================================================================================================
 * Graph capture: a block-like chain (layernorm -> qkv GEMM + bias -> attention -> residual add, all F16) and an
 * FP8 GEMM with device scales are captured into one CUDA graph in global capture mode, which rejects any
 * synchronizing or allocating call. The replay must reproduce the eager results bit for bit (same kernels, same
 * arguments, same cuBLASLt algorithm), which also shows the FP8 scale and bias pointers set at capture time are
 * the ones the graph uses.
 * ============================================================================================================== */

typedef struct {
    void *x, *lw, *lb, *h, *wqkv, *bqkv, *qkv, *att, *y;
    void *a8, *w8, *b8, *d8;
    float *as, *ws;
    tp_gemm_plan *pqkv, *p8;
} chain_t;

enum { CH_B = 3, CH_T = 197, CH_H = 3, CH_D = 64, CH_C = CH_H * CH_D, CH_M = CH_B * CH_T };
enum { CH8_M = 197, CH8_N = 384, CH8_K = 192 };

static void chain_enqueue(const chain_t *c, cudaStream_t s, int check_sync) {
    LAUNCH_OK(tpk_layernorm(c->x, TP_F16, c->lw, c->lb, TP_F16, c->h, TP_F16, NULL, CH_M, CH_C, 1e-6f, s));
    int r = tp_gemm_run(g_gemm, c->pqkv, c->h, c->wqkv, c->bqkv, c->qkv, NULL, NULL, s);
    ck_assert_msg(r == 0, "[%s] qkv gemm: cuBLAS status %d", g_case, r);
    LAUNCH_OK(tpk_attention(c->qkv, TP_F16, c->att, TP_F16, NULL, CH_B, CH_T, CH_H, CH_D, 0.125f, s));
    LAUNCH_OK(tpk_add(c->att, c->x, c->y, TP_F16, (size_t)CH_M * CH_C, s));
    r = tp_gemm_run(g_gemm, c->p8, c->a8, c->w8, c->b8, c->d8, c->as, c->ws, s);
    ck_assert_msg(r == 0, "[%s] fp8 gemm: cuBLAS status %d", g_case, r);
    if (check_sync) CUDA_OK(cudaStreamSynchronize(s));
}

static void chain_poison(const chain_t *c) {
    CUDA_OK(cudaMemsetAsync(c->h, 0xFF, (size_t)CH_M * CH_C * 2, g_stream));
    CUDA_OK(cudaMemsetAsync(c->qkv, 0xFF, (size_t)CH_M * 3 * CH_C * 2, g_stream));
    CUDA_OK(cudaMemsetAsync(c->att, 0xFF, (size_t)CH_M * CH_C * 2, g_stream));
    CUDA_OK(cudaMemsetAsync(c->y, 0xFF, (size_t)CH_M * CH_C * 2, g_stream));
    CUDA_OK(cudaMemsetAsync(c->d8, 0xFF, (size_t)CH8_M * CH8_N * 2, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
}

START_TEST(test_graph_capture) {
    SET_CASE("graph capture: layernorm -> gemm f16 -> attention -> add; gemm e4m3->bf16");
    chain_t c;
    const size_t nx = (size_t)CH_M * CH_C, nw = (size_t)3 * CH_C * CH_C;
    c.x = dev_upload_at(TP_F16, host_normal(nx, 1800, 0.3, 1.0), nx, 1.0f, 0);
    c.lw = dev_upload_at(TP_F16, host_normal(CH_C, 1801, 1.0, 0.2), CH_C, 1.0f, 0);
    c.lb = dev_upload_at(TP_F16, host_normal(CH_C, 1802, 0.0, 0.2), CH_C, 1.0f, 0);
    c.wqkv = dev_upload_at(TP_F16, host_normal(nw, 1803, 0.0, 0.1), nw, 1.0f, 0);
    c.bqkv = dev_upload_at(TP_F16, host_normal(3 * CH_C, 1804, 0.0, 0.2), 3 * CH_C, 1.0f, 0);
    c.h = dev_alloc_at(TP_F16, nx, 0);
    c.qkv = dev_alloc_at(TP_F16, 3 * nx, 0);
    c.att = dev_alloc_at(TP_F16, nx, 0);
    c.y = dev_alloc_at(TP_F16, nx, 0);
    c.pqkv = gemm_plan(TP_F16, TP_F16, CH_M, 3 * CH_C, CH_C, 1);
    float *a8 = host_normal((size_t)CH8_M * CH8_K, 1805, 0.0, 1.0), *w8 = host_normal((size_t)CH8_N * CH8_K, 1806, 0.0, 0.05);
    const float as = host_amax(a8, (size_t)CH8_M * CH8_K) / 448.0f, ws = host_amax(w8, (size_t)CH8_N * CH8_K) / 448.0f;
    c.a8 = dev_upload_at(TP_E4M3, a8, (size_t)CH8_M * CH8_K, as, 0);
    c.w8 = dev_upload_at(TP_E4M3, w8, (size_t)CH8_N * CH8_K, ws, 0);
    c.b8 = dev_upload_at(TP_BF16, host_normal(CH8_N, 1807, 0.0, 0.5), CH8_N, 1.0f, 0);
    c.d8 = dev_alloc_at(TP_BF16, (size_t)CH8_M * CH8_N, 0);
    c.as = dev_scalar(as);
    c.ws = dev_scalar(ws);
    c.p8 = gemm_plan(TP_E4M3, TP_BF16, CH8_M, CH8_N, CH8_K, 1);

    chain_enqueue(&c, g_stream, 1);
    void *y_eager = download_bytes(c.y, nx * 2), *d8_eager = download_bytes(c.d8, (size_t)CH8_M * CH8_N * 2);
    /* the eager results must be complete before they serve as the reference */
    check_finite("eager y", TP_F16, c.y, nx, CH_C);
    check_finite("eager fp8 gemm D", TP_BF16, c.d8, (size_t)CH8_M * CH8_N, CH8_N);

    chain_poison(&c);
    /* Capture on a non-blocking stream, with every earlier operation (uploads, poisoning) complete. */
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaStreamCreateWithFlags(&g_cap_stream, cudaStreamNonBlocking));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CUDA_OK(cudaStreamBeginCapture(g_cap_stream, cudaStreamCaptureModeGlobal));
    chain_enqueue(&c, g_cap_stream, 0);
    CUDA_OK(cudaStreamEndCapture(g_cap_stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 2; rep++) { /* replayed twice: a graph must be re-runnable */
        SET_CASE("graph capture: replay %d", rep);
        CUDA_OK(cudaGraphLaunch(exec, g_cap_stream));
        CUDA_OK(cudaStreamSynchronize(g_cap_stream));
        check_bytes_equal("y (graph vs eager)", TP_F16, download_bytes(c.y, nx * 2), y_eager, nx, CH_C);
        check_bytes_equal("fp8 gemm D (graph vs eager)", TP_BF16, download_bytes(c.d8, (size_t)CH8_M * CH8_N * 2),
                          d8_eager, (size_t)CH8_M * CH8_N, CH8_N);
        chain_poison(&c);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
}
END_TEST

/* ================================================================================================================
 * Argument checks: an unsupported type or size is cudaErrorInvalidValue without a launch, and leaves no sticky
 * error behind (cudaGetLastError stays cudaSuccess).
 * ============================================================================================================== */

START_TEST(test_kernel_rejects) {
    SET_CASE("kernel argument checks");
    void *buf = dev_alloc_at(TP_F32, 4096, 0);
    float *sc = dev_scalar(1.0f);
    const rejected_call r[] = {
        {"im2col to e4m3 (no scale argument)", tpk_im2col(buf, buf, TP_E4M3, 1, 32, 32, 16, g_stream)},
        {"im2col H not a multiple of P", tpk_im2col(buf, buf, TP_F32, 1, 30, 32, 16, g_stream)},
        {"embed_tokens e4m3", tpk_embed_tokens(buf, buf, buf, buf, TP_E4M3, 1, 4, 8, 1, g_stream)},
        {"layernorm e4m3 input", tpk_layernorm(buf, TP_E4M3, buf, buf, TP_F32, buf, TP_F32, NULL, 4, 8, 1e-6f, g_stream)},
        {"layernorm e4m3 weights", tpk_layernorm(buf, TP_F32, buf, buf, TP_E4M3, buf, TP_F32, NULL, 4, 8, 1e-6f, g_stream)},
        {"layernorm e5m2 output", tpk_layernorm(buf, TP_F32, buf, buf, TP_F32, buf, TP_E5M2, sc, 4, 8, 1e-6f, g_stream)},
        {"layernorm e4m3 output without scale",
         tpk_layernorm(buf, TP_F32, buf, buf, TP_F32, buf, TP_E4M3, NULL, 4, 8, 1e-6f, g_stream)},
        {"gelu f64 input", tpk_gelu(buf, TP_F64, buf, TP_F32, NULL, 16, 0, g_stream)},
        {"gelu e4m3 output without scale", tpk_gelu(buf, TP_F32, buf, TP_E4M3, NULL, 16, 0, g_stream)},
        {"add e4m3", tpk_add(buf, buf, buf, TP_E4M3, 16, g_stream)},
        {"attention D = 129", tpk_attention(buf, TP_F16, buf, TP_F16, NULL, 1, 4, 1, 129, 0.1f, g_stream)},
        {"attention e4m3 input", tpk_attention(buf, TP_E4M3, buf, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"attention e4m3 output without scale",
         tpk_attention(buf, TP_F16, buf, TP_E4M3, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"pool mode 2", tpk_pool(buf, buf, TP_F32, 1, 4, 8, 2, 0, g_stream)},
        {"pool avg with prefix = T (no tokens)", tpk_pool(buf, buf, TP_F32, 1, 4, 8, 1, 4, g_stream)},
        {"amax e4m3", tpk_amax(buf, TP_E4M3, 16, sc, g_stream)},
    };
    check_rejected(r, sizeof r / sizeof r[0]);
    /* empty work is a successful no-op */
    ck_assert_int_eq(tpk_gelu(buf, TP_F32, buf, TP_F32, NULL, 0, 0, g_stream), 0);
    ck_assert_int_eq(tpk_attention(buf, TP_F16, buf, TP_F16, NULL, 0, 4, 1, 64, 0.1f, g_stream), 0);
    ck_assert_int_eq(tpk_layernorm(buf, TP_F32, buf, buf, TP_F32, buf, TP_F32, NULL, 0, 8, 1e-6f, g_stream), 0);
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------------------------- */

/* new_tcase (gpu_check.h): 600 s a test, for CUDA context creation (per forked test) plus fp64 CPU references of
 * up to ~2 GFLOP per case */

Suite *gpu_ops_suite(void) {
    Suite *s = suite_create("gpu_ops");
    TCase *tc;
    tcase_add_loop_test(new_tcase(s, "im2col"), test_im2col, 0, N_OF(ACT));
    tcase_add_loop_test(new_tcase(s, "patch_embed"), test_patch_embed, 0, 2);
    tcase_add_loop_test(new_tcase(s, "embed_tokens"), test_embed_tokens, 0, N_OF(ACT));
    tcase_add_loop_test(new_tcase(s, "layernorm"), test_layernorm, 0, N_OF(LN_COMBOS));
    tc = new_tcase(s, "gelu");
    tcase_add_loop_test(tc, test_gelu, 0, N_OF(GELU_COMBOS));
    tcase_add_test(tc, test_e4m3_rounding);
    tcase_add_loop_test(new_tcase(s, "add"), test_add, 0, N_OF(ACT));
    tcase_add_loop_test(new_tcase(s, "attention"), test_attention, 0, N_OF(ATT_COMBOS));
    tcase_add_loop_test(new_tcase(s, "pool"), test_pool, 0, N_OF(ACT));
    tc = new_tcase(s, "amax");
    tcase_add_loop_test(tc, test_amax, 0, N_OF(ACT));
    tcase_add_loop_test(tc, test_abs_histogram, 0, N_OF(ACT));
    tc = new_tcase(s, "gemm");
    tcase_add_loop_test(tc, test_gemm, 0, N_OF(GEMM_TYPES));
    tcase_add_test(tc, test_gemm_rejects);
    tcase_add_test(new_tcase(s, "graph"), test_graph_capture);
    tcase_add_test(new_tcase(s, "rejects"), test_kernel_rejects);
    return s;
}
