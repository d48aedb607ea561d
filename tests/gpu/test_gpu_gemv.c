/* test_gpu_gemv.c: the decode GEMVs (tpk_gemv, tpk_gemv_fp8, tpk_gemv_w8a8, tpk_gemv_nvfp4; gemv.h) and their
 * fused forms with a GLU epilogue (tpk_gemv_fused, tpk_gemv_fp8_fused, tpk_gemv_nvfp4_fused) against an fp64 CPU
 * reference, on the GPU, element by element; and the FP8 block-128 GEMV (tpk_gemv_fp8_block, _fused).
 *
 * Weights: normal (std 0.05) with every 97th value 20x larger (block scales then differ from the tensor's) and row 3
 * scaled by 1e-3 (small scales: E4M3-subnormal NVFP4 block scales and FP8 codes, fp16-subnormal weights and decoded
 * NVFP4 products), then made into each format by qformat.h's CPU quantizers, the reference of every GPU path:
 *   16-bit          W rounded to the activation type;
 *   fp8 per-channel tp_quantize(TP_QF_FP8_TENSOR) row by row: E4M3 codes and one fp32 scale per row
 *                   (channel_scale, no tensor_scale);
 *   fp8 per-tensor  tp_quantize(TP_QF_FP8_TENSOR) over the whole tensor (tensor_scale only);
 *   fp8 both        the per-channel codes and scales and a tensor_scale of 0.75 (W = e4m3 * cs[n] * 0.75);
 *   w8a8            fp8 both, x rounded to E4M3 on load under x scale 3/448 (tpk_gemv_w8a8): the reference
 *                   multiplies the host codec's sat(rne(x / xs)) values (about 0.3 % saturated), xs in s_n;
 *   nvfp4           tp_quantize(TP_QF_NVFP4): packed E2M1 codes, row-major UE4M3 block scales, s2; the exact
 *                   values from tp_qdq_f32 (y = e2m1 * ue4m3, s2 apart), and, as a check of the layout gemv.h
 *                   documents, the same values decoded here from the packed bytes (even element in the low nibble).
 *   fp8 block-128   tp_quantize(TP_QF_FP8_BLOCK128, weights): E4M3 codes, one fp32 scale per 128 x 128 block
 *                   (uploaded in cuBLASLt's layout, as the engines hold them); x quantized per 1 x 128 block by the
 *                   kernel (tpk_gemv_fp8_block) or by tp_quantize on the host and uploaded as a RMSNorm writes it,
 *                   codes and (kb, M_pad) scales (tpk_gemv_fp8_block_q), referenced by tp_quantize on the same x:
 *                   each block's sum scaled by x's and W's block
 *                   scales (ref_fp8b, s_n = 1); x's rows and 128-blocks given magnitudes 1..4 and 2^-1..2 so that
 *                   a scale from the wrong row or block shows. M <= 4 and M > 4 run two ways of quantizing x
 *                   (gemv.cu compute_block): both at every shape list's M.
 * Activations x (M, K) and the residual normal (std 1), the bias normal (std 0.5), all rounded to the activation
 * type first, so the reference sees exactly what the GPU reads:
 *   ref[m, n] = s_n * sum_k x[m, k] Wd[n, k] + bias[n] + residual[m, n]        (fp64)
 * with Wd the decoded weights without their fp32 scales and s_n the scale product (1; cs[n]; ts; cs[n] * ts; s2).
 * Bound per element, from the output type (one rounding of y):
 *   |got - ref| <= ulp_dt(ref) + 2 (K + 2) 2^-24 s_n sum_k |x Wd| + 2^-22 (|s_n acc| + |bias| + |residual|)
 * one unit in the last place of F16 (2^-10 relative at most: "~1e-3 per element") or BF16 (2^-7: "~8e-3"): RNE's
 * half and half for an accumulation error that moves the value across a midpoint; twice the worst-case bound of an
 * fp32 sum over K (Higham 3.1; the tensor cores' additions may truncate); the fp32 epilogue (scale product, the
 * multiply, two adds). A wrong k mapping, a wrong nibble order, a wrong block scale or a dropped term is off by far
 * more. Outputs are poisoned (0xFF: NaN in F16 and BF16) with 64 poisoned elements past the end: an unwritten
 * element fails as NaN, a write past the end as touched poison.
 * Shapes: M in {1, 3, 8} x N in {1, 5, 200, 4104} x K in {16, 48, 784, 4096} (every format: K % 16 == 0), and
 * M 11 (two passes of 8 rows), K 200 (16-bit and FP8: K % 16 == 8, FP8's 8-byte path), K 2064 (NVFP4: K % 32 == 16,
 * 8-byte path), weights at an 8-byte offset (FP8 and NVFP4 8-byte paths at K 4096 and 784; NVFP4 scales at an odd
 * address). NVFP4 at K 4096 runs the 16-byte path, below it the 8-byte one. N 1 to 200 and N 4104 at K >= 784 split
 * K over thread-block clusters of 2 to 8 (gemv.cu). Epilogues per shape: none; residual; bias + residual in place
 * (residual == y); bias alone. F16 and BF16 activations, each format.
 * Then graph capture (replay equal to the eager launch, byte for byte), and rejected arguments (each returns
 * cudaErrorInvalidValue, launches nothing, leaves no error pending and writes nothing: y stays poisoned).
 * CPU work: about 0.3 G fp64 multiply-adds per format and type. */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cuda/gemm/gemv.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "formats/dtype.h"
#include "formats/qformat.h"

#define TP_GPU_MAX_TRACKED 256
#include "gpu_check.h"

Suite *gpu_gemv_suite(void);

static void setup(void) { gpu_setup(); }

static void teardown(void) {
    release_all();
    close_stream();
}

typedef enum {
    WF_16 = 0, WF_FP8_CH, WF_FP8_T, WF_FP8_CT, WF_NVFP4, WF_NVFP4_ROWS, WF_W8A8, WF_FP8B, WF_FP8BQ, WF_COUNT
} wfmt;
static const char *const WF_NAME[WF_COUNT] = {"16-bit", "fp8 per-channel", "fp8 per-tensor", "fp8 channel x tensor",
                                              "nvfp4", "nvfp4, one s2 per row", "w8a8 (x to e4m3 on load)",
                                              "fp8 block-128 (x quantized per 1x128 on load)",
                                              "fp8 block-128 (x quantized by its producer)"};
/* WF_FP8BQ: x's E4M3 codes and 1x128 scales (kb, g_xld) on the device, as a RMSNorm writes them (set_xq) */
static const void *g_xq;
static const float *g_xs;
static int g_xld;

/* x (M, K), as the device holds it in the activation type, quantized by tp_quantize(TP_QF_FP8_BLOCK128) into
 * g_xq / g_xs, the scales in tpk_quant_fp8_b128's layout with M_pad = M rounded up to 4 (pad scales 1) */
static void set_xq(const float *x, int M, int K) {
    tp_qtensor q;
    tp_error e;
    ck_assert_msg(tp_quantize(TP_QF_FP8_BLOCK128, x, M, K, 0, 0.0f, &q, &e) == TP_OK, "%s", e.msg);
    const int KB = (K + 127) / 128, Mp = (M + 3) / 4 * 4;
    float *sc = hmalloc(sizeof(float) * (size_t)KB * Mp);
    for (int kb = 0; kb < KB; kb++)
        for (int m = 0; m < Mp; m++) {
            float v = 1.0f;
            if (m < M) memcpy(&v, q.scales + sizeof(float) * ((size_t)m * KB + kb), sizeof v);
            sc[(size_t)kb * Mp + m] = v;
        }
    unsigned char *d = dev_bytes((size_t)M * K);
    CUDA_OK(cudaMemcpy(d, q.elems, (size_t)M * K, cudaMemcpyHostToDevice));
    g_xq = d;
    g_xs = dev_floats(sc, (size_t)KB * Mp);
    g_xld = Mp;
    tp_qtensor_free(&q);
}
/* W8A8's x scale: x (std 1) / XS saturates E4M3 (448) where |x| > 3, about 0.3 % of the elements */
#define W8A8_XS (3.0f / 448.0f)
static const tp_dtype DT[] = {TP_F16, TP_BF16};
#define FP8_CT_TENSOR_SCALE 0.75f

/* x rounded in place to dt */
static void round_dt(tp_dtype dt, float *x, size_t n) {
    void *tmp = malloc(n * esize(dt));
    ck_assert_msg(tmp != NULL, "[%s] out of host memory", g_case);
    tp_convert_from_f32(dt, x, tmp, n, 1.0f);
    tp_convert_to_f32(dt, tmp, x, n, 1.0f);
    free(tmp);
}

/* one unit in the last place of dt at |x| (normal range; the subnormal spacing below it and at 0) */
static double ulp_of(tp_dtype dt, double x) {
    const int mant = dt == TP_F16 ? 10 : 7, emin = dt == TP_F16 ? -14 : -126;
    int e = 0;
    frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
    if (x == 0.0 || e - 1 < emin) e = emin + 1;
    return ldexp(1.0, e - 1 - mant);
}

/* ---- the weights of one format ------------------------------------------------------------------------------ */

typedef struct {
    wfmt f;
    tp_dtype dt;
    int N, K;
    const void *w;       /* device: 16-bit values, E4M3 codes or packed E2M1 codes (maybe at an offset) */
    const void *scales;  /* device NVFP4 block scales */
    const float *cs;     /* device channel scales (fp8) or NULL */
    const float *ts;     /* device tensor scale (fp8) or s2 (nvfp4) or NULL */
    const float *xs;     /* device x scale (w8a8) */
    const float *bs;     /* device fp8 block-128 weight scales, cuBLASLt's layout (gemm_cublaslt.h) */
    float *hbs;          /* host fp8 block-128 weight scales, plain (ceil(N / 128), ceil(K / 128)) */
    float *wd;           /* host (N, K): the decoded weights without their fp32 scales, exact */
    double *s;           /* host (N): the scale product s_n */
} wset;

static void *dev_copy(const void *h, size_t bytes, size_t offset) {
    unsigned char *d = dev_bytes(bytes + offset + 16);
    CUDA_OK(cudaMemcpy(d + offset, h, bytes, cudaMemcpyHostToDevice));
    return d + offset;
}

/* Weights (N, K) of format f for activations dt; woff > 0 places W (and NVFP4's scales, at woff / 8 bytes) at that
 * offset from an aligned allocation. */
static wset make_weights(wfmt f, tp_dtype dt, int N, int K, size_t woff, uint64_t seed) {
    const size_t nW = (size_t)N * K;
    float *W = host_normal(nW, seed, 0.0, 0.05);
    for (size_t i = 0; i < nW; i += 97) W[i] *= 20.0f;
    if (N > 3)
        for (int k = 0; k < K; k++) W[(size_t)3 * K + k] *= 1e-3f;
    wset w = {f,    dt,   N,    K,    NULL, NULL, NULL, NULL, NULL, NULL, NULL, hmalloc(nW * sizeof(float)),
              hmalloc((size_t)N * sizeof(double))};
    tp_error e;
    if (f == WF_16) {
        round_dt(dt, W, nW);
        memcpy(w.wd, W, nW * sizeof(float));
        for (int n = 0; n < N; n++) w.s[n] = 1.0;
        void *h = hmalloc(nW * esize(dt));
        tp_convert_from_f32(dt, W, h, nW, 1.0f);
        w.w = dev_copy(h, nW * esize(dt), woff);
    } else if (f == WF_FP8B || f == WF_FP8BQ) { /* codes and plain 128 x 128 scales; the device gets cuBLASLt's layout */
        tp_qtensor q;
        ck_assert_msg(tp_quantize(TP_QF_FP8_BLOCK128, W, N, K, 1, 0.0f, &q, &e) == TP_OK, "%s", e.msg);
        const size_t nb = (size_t)(N + 127) / 128, kb = (size_t)(K + 127) / 128;
        ck_assert_msg(q.elem_bytes == nW && q.scale_bytes == nb * kb * sizeof(float), "[%s] fp8-block sizes %zu, %zu",
                      g_case, q.elem_bytes, q.scale_bytes);
        for (size_t i = 0; i < nW; i++) w.wd[i] = tp_e4m3_to_f32(q.elems[i]);
        for (int n = 0; n < N; n++) w.s[n] = 1.0;
        w.hbs = hmalloc(nb * kb * sizeof(float));
        memcpy(w.hbs, q.scales, nb * kb * sizeof(float));
        const size_t ns = tp_gemm_b128_weight_scale_count(N, K);
        float *lay = hmalloc(ns * sizeof(float));
        tp_gemm_b128_weight_scales(w.hbs, N, K, lay);
        w.w = dev_copy(q.elems, nW, woff);
        w.bs = dev_floats(lay, ns);
        tp_qtensor_free(&q);
    } else if (f == WF_FP8_T) {
        tp_qtensor q;
        ck_assert_msg(tp_quantize(TP_QF_FP8_TENSOR, W, N, K, 1, 0.0f, &q, &e) == TP_OK, "%s", e.msg);
        float ts;
        memcpy(&ts, q.scales, sizeof ts);
        for (size_t i = 0; i < nW; i++) w.wd[i] = tp_e4m3_to_f32(q.elems[i]);
        for (int n = 0; n < N; n++) w.s[n] = ts;
        w.w = dev_copy(q.elems, nW, woff);
        w.ts = dev_scalar(ts);
        tp_qtensor_free(&q);
    } else if (f == WF_FP8_CH || f == WF_FP8_CT || f == WF_W8A8) {
        unsigned char *codes = hmalloc(nW);
        float *cs = hmalloc((size_t)N * sizeof(float));
        for (int n = 0; n < N; n++) {
            tp_qtensor q;
            ck_assert_msg(tp_quantize(TP_QF_FP8_TENSOR, W + (size_t)n * K, 1, K, 1, 0.0f, &q, &e) == TP_OK, "%s",
                          e.msg);
            memcpy(codes + (size_t)n * K, q.elems, (size_t)K);
            memcpy(&cs[n], q.scales, sizeof(float));
            tp_qtensor_free(&q);
        }
        const double ts = f != WF_FP8_CH ? FP8_CT_TENSOR_SCALE : 1.0, xs = f == WF_W8A8 ? W8A8_XS : 1.0;
        for (size_t i = 0; i < nW; i++) w.wd[i] = tp_e4m3_to_f32(codes[i]);
        for (int n = 0; n < N; n++) w.s[n] = (double)cs[n] * ts * xs;
        w.w = dev_copy(codes, nW, woff);
        w.cs = dev_floats(cs, (size_t)N);
        w.ts = f != WF_FP8_CH ? dev_scalar(FP8_CT_TENSOR_SCALE) : NULL;
        w.xs = f == WF_W8A8 ? dev_scalar(W8A8_XS) : NULL;
    } else {
        tp_qtensor q;
        ck_assert_msg(tp_quantize(TP_QF_NVFP4, W, N, K, 1, 0.0f, &q, &e) == TP_OK, "%s", e.msg);
        float s2 = 0.0f;
        ck_assert_msg(tp_qdq_f32(TP_QF_NVFP4, W, w.wd, N, K, 1, 0.0f, &s2, &e) == TP_OK, "%s", e.msg);
        ck_assert_msg(s2 == q.global_scale, "[%s] tp_qdq_f32's s2 %g differs from tp_quantize's %g", g_case, s2,
                      q.global_scale);
        ck_assert_msg(q.elem_bytes == nW / 2 && q.scale_bytes == nW / 16, "[%s] NVFP4 sizes %zu, %zu", g_case,
                      q.elem_bytes, q.scale_bytes);
        /* the packed layout of gemv.h, decoded here: byte n K / 2 + i holds k = 2i (low nibble), 2i + 1 (high);
         * scale byte n (K / 16) + k / 16 */
        size_t diff = 0;
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                const uint8_t byte = q.elems[((size_t)n * K + k) / 2], code = k & 1 ? byte >> 4 : byte & 15;
                const float v = tp_e2m1_to_f32(code) * tp_e4m3_to_f32(q.scales[(size_t)n * (K / 16) + k / 16]);
                diff += v != w.wd[(size_t)n * K + k];
            }
        ck_assert_msg(diff == 0, "[%s] %zu packed NVFP4 values differ from tp_qdq_f32's", g_case, diff);
        w.w = dev_copy(q.elems, q.elem_bytes, woff);
        w.scales = dev_copy(q.scales, q.scale_bytes, woff / 8);
        if (f == WF_NVFP4_ROWS) { /* stacked tensors: rows under s2, 1.5 s2 and 0.25 s2 in turn */
            float *rs = hmalloc((size_t)N * sizeof(float));
            for (int n = 0; n < N; n++) rs[n] = s2 * (n % 3 == 0 ? 1.0f : n % 3 == 1 ? 1.5f : 0.25f);
            for (int n = 0; n < N; n++) w.s[n] = rs[n];
            w.cs = dev_floats(rs, (size_t)N);
        } else {
            for (int n = 0; n < N; n++) w.s[n] = s2;
            w.ts = dev_scalar(s2);
        }
        tp_qtensor_free(&q);
    }
    return w;
}

static int run_gemv(const wset *w, const void *x, const void *bias, const void *res, void *y, int M,
                    cudaStream_t s) {
    switch (w->f) {
    case WF_16: return tpk_gemv(x, w->w, bias, res, y, w->dt, M, w->N, w->K, (tp_stream)s);
    case WF_NVFP4:
        return tpk_gemv_nvfp4(x, w->w, w->scales, w->ts, bias, res, y, w->dt, M, w->N, w->K, (tp_stream)s);
    case WF_NVFP4_ROWS:
        return tpk_gemv_nvfp4_rows(x, w->w, w->scales, w->cs, bias, res, y, w->dt, M, w->N, w->K, (tp_stream)s);
    case WF_W8A8:
        return tpk_gemv_w8a8(x, w->xs, w->w, w->cs, w->ts, bias, res, y, w->dt, M, w->N, w->K, (tp_stream)s);
    case WF_FP8B: return tpk_gemv_fp8_block(x, w->w, w->bs, bias, res, y, w->dt, M, w->N, w->K, (tp_stream)s);
    case WF_FP8BQ:
        return tpk_gemv_fp8_block_q(g_xq, g_xs, g_xld, w->w, w->bs, bias, res, y, w->dt, M, w->N, w->K, (tp_stream)s);
    default: return tpk_gemv_fp8(x, w->w, w->cs, w->ts, bias, res, y, w->dt, M, w->N, w->K, (tp_stream)s);
    }
}

/* acc (M, N) = x Wd^T and mag = sum |x Wd| in fp64 */
static void ref_products(const float *x, const float *wd, int M, int N, int K, double *acc, double *mag) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)m * K, *wr = wd + (size_t)n * K;
            double s = 0.0, a = 0.0;
            for (int k = 0; k < K; k++) {
                const double p = (double)xr[k] * wr[k];
                s += p, a += fabs(p);
            }
            acc[(size_t)m * N + n] = s, mag[(size_t)m * N + n] = a;
        }
}

/* fp8 block-128: x quantized per 1 x 128 block by tp_quantize (the reference of the kernel's in-register
 * quantization), then acc = sum_kb xs[m, kb] ws[n / 128, kb] sum_{k in kb} xq wq and mag the same over |products|
 * (s_n = 1), fp64 */
static void ref_fp8b(const wset *w, const float *x, int M, double *acc, double *mag) {
    const int N = w->N, K = w->K, KB = (K + 127) / 128;
    tp_qtensor q;
    tp_error e;
    ck_assert_msg(tp_quantize(TP_QF_FP8_BLOCK128, x, M, K, 0, 0.0f, &q, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(q.scale_bytes == (size_t)M * KB * sizeof(float), "[%s] x scales %zu bytes", g_case, q.scale_bytes);
    const float *xs = (const float *)q.scales;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0, a = 0.0;
            for (int kb = 0; kb < KB; kb++) {
                double bs = 0.0, ba = 0.0;
                for (int k = 128 * kb; k < K && k < 128 * kb + 128; k++) {
                    const double p = (double)tp_e4m3_to_f32(q.elems[(size_t)m * K + k]) * w->wd[(size_t)n * K + k];
                    bs += p, ba += fabs(p);
                }
                const double sc = (double)xs[(size_t)m * KB + kb] * w->hbs[(size_t)(n / 128) * KB + kb];
                s += bs * sc, a += ba * fabs(sc);
            }
            acc[(size_t)m * N + n] = s, mag[(size_t)m * N + n] = a;
        }
    tp_qtensor_free(&q);
}

/* fp8 block-128's activations: row m scaled by 1 + m % 4 and block kb by 2^(kb % 3 - 1), so x's block scales
 * differ along both axes (a scale taken from the wrong row or block is off by a factor); at most 8x, so the fused
 * GLU's products stay inside FP16's range */
static void vary_blocks(float *x, int M, int K) {
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) x[(size_t)m * K + k] *= (float)(1 + m % 4) * ldexpf(1.0f, (k / 128) % 3 - 1);
}

/* y (downloaded) against the reference under the header's bound; returns the worst error / bound */
static double check_y(const wset *w, const void *d_y, int M, const double *acc, const double *mag,
                      const float *bias, const float *res) {
    const int N = w->N, K = w->K;
    const size_t nY = (size_t)M * N;
    const float *got = download_f32(w->dt, d_y, nY, 1.0f);
    size_t bad = 0, worst = 0;
    double worst_ratio = 0.0, worst_ref = 0.0;
    for (size_t i = 0; i < nY; i++) {
        const int n = (int)(i % (size_t)N);
        const double a = w->s[n] * acc[i], b = bias ? bias[n] : 0.0, r = res ? res[i] : 0.0, ref = a + b + r;
        const double tol =
            ulp_of(w->dt, ref) + 2.0 * (K + 2) * 0x1p-24 * w->s[n] * mag[i] + 0x1p-22 * (fabs(a) + fabs(b) + fabs(r));
        const double err = fabs((double)got[i] - ref);
        if (!(err <= tol)) bad++; /* NaN counts */
        const double ratio = isfinite(err) ? err / tol : INFINITY;
        if (ratio > worst_ratio) worst_ratio = ratio, worst = i, worst_ref = ref;
    }
    if (bad) {
        printf("  FAIL  %s: %zu of %zu outside the bound; worst err/bound %.3f at [%zu,%zu] got %.7g ref %.7g\n",
               g_case, bad, nY, worst_ratio, worst / (size_t)N, worst % (size_t)N, got[worst], worst_ref);
        fflush(stdout);
    }
    ck_assert_msg(bad == 0, "[%s] %zu of %zu elements outside the bound (worst at [%zu,%zu]: got %.7g, ref %.7g)",
                  g_case, bad, nY, worst / (size_t)N, worst % (size_t)N, got[worst], worst_ref);
    return worst_ratio;
}

typedef struct {
    int M, N, K;
    size_t woff; /* weights at this byte offset (FP8, NVFP4 only) */
} shape;

static int shape_ok(wfmt f, const shape *s) {
    if (f == WF_NVFP4 || f == WF_NVFP4_ROWS) return s->K % 16 == 0;
    if (f == WF_FP8B || f == WF_FP8BQ) return s->K % 16 == 0 && s->woff % 16 == 0;
    if (f == WF_16) return s->K % 8 == 0 && s->woff % 16 == 0;
    return s->K % 8 == 0;
}

/* every shape of the header for format f and type dt: 4 epilogues each */
static void run_shapes(wfmt f, tp_dtype dt) {
    static const int Ms[] = {1, 3, 8}, Ns[] = {1, 5, 200, 4104}, Ks[] = {16, 48, 784, 4096};
    static const shape extra[] = {{11, 200, 784, 0},  {3, 200, 200, 0},  {8, 4104, 200, 0}, {3, 200, 2064, 0},
                                  {3, 200, 4096, 8}, {8, 4104, 784, 8}, {5, 1000, 4096, 0}};
    shape shapes[N_OF(Ms) * N_OF(Ns) * N_OF(Ks) + N_OF(extra)];
    int ns = 0;
    for (int a = 0; a < N_OF(Ms); a++)
        for (int b = 0; b < N_OF(Ns); b++)
            for (int c = 0; c < N_OF(Ks); c++) shapes[ns++] = (shape){Ms[a], Ns[b], Ks[c], 0};
    for (int e = 0; e < N_OF(extra); e++) shapes[ns++] = extra[e];
    uint64_t seed = 41000 + 1000 * (uint64_t)f + 500 * (uint64_t)(dt == TP_BF16);
    int done = 0;
    for (int si = 0; si < ns; si++) {
        const shape *sh = &shapes[si];
        if (!shape_ok(f, sh)) continue;
        const int M = sh->M, N = sh->N, K = sh->K;
        SET_CASE("gemv %s %s M=%d N=%d K=%d woff=%zu", WF_NAME[f], dname(dt), M, N, K, sh->woff);
        const size_t nX = (size_t)M * K, nY = (size_t)M * N;
        const wset w = make_weights(f, dt, N, K, sh->woff, seed++);
        float *x = host_normal(nX, seed++, 0.0, 1.0), *bias = host_normal((size_t)N, seed++, 0.0, 0.5);
        float *res = host_normal(nY, seed++, 0.0, 1.0);
        if (f == WF_FP8B || f == WF_FP8BQ) vary_blocks(x, M, K);
        round_dt(dt, x, nX);
        round_dt(dt, bias, (size_t)N);
        round_dt(dt, res, nY);
        double *acc = hmalloc(nY * sizeof(double)), *mag = hmalloc(nY * sizeof(double));
        /* W8A8: the products of x's E4M3 values, sat(rne(x / xs)) by the host codec (xs in s_n) */
        float *xq = f == WF_W8A8 ? hmalloc(nX * sizeof(float)) : x;
        if (f == WF_W8A8)
            for (size_t i = 0; i < nX; i++) xq[i] = tp_e4m3_to_f32(tp_f32_to_e4m3(x[i] / W8A8_XS));
        if (f == WF_FP8B || f == WF_FP8BQ) ref_fp8b(&w, x, M, acc, mag);
        else ref_products(xq, w.wd, M, N, K, acc, mag);
        if (f == WF_FP8BQ) set_xq(x, M, K);
        const void *d_x = dev_upload(dt, x, nX, nX), *d_b = dev_upload(dt, bias, (size_t)N, (size_t)N);
        const void *d_r = dev_upload(dt, res, nY, nY);
        double worst = 0.0;
        /* epilogues: 0 none, 1 residual, 2 bias + residual in place (residual == y), 3 bias */
        for (int ep = 0; ep < 4; ep++) {
            SET_CASE("gemv %s %s M=%d N=%d K=%d woff=%zu epilogue %s", WF_NAME[f], dname(dt), M, N, K, sh->woff,
                     ep == 0 ? "none" : ep == 1 ? "residual" : ep == 2 ? "bias + residual in place" : "bias");
            void *d_y = ep == 2 ? dev_upload(dt, res, nY, nY + 64) : dev_alloc(dt, nY + 64);
            const void *b = ep >= 2 ? d_b : NULL, *r = ep == 1 ? d_r : ep == 2 ? d_y : NULL;
            KERNEL_OK(run_gemv(&w, d_x, b, r, d_y, M, g_stream));
            const double wr = check_y(&w, d_y, M, acc, mag, ep >= 2 ? bias : NULL, ep == 1 || ep == 2 ? res : NULL);
            if (wr > worst) worst = wr;
            const size_t es = esize(dt);
            const unsigned char *tail = download_bytes((const char *)d_y + nY * es, 64 * es);
            size_t touched = 0;
            for (size_t i = 0; i < 64 * es; i++) touched += tail[i] != 0xFF;
            ck_assert_msg(touched == 0, "[%s] %zu bytes past y were written", g_case, touched);
        }
        printf("  ok    gemv %s %s M=%d N=%d K=%d woff=%zu: 4 epilogues within the bound, worst err/bound %.3f\n",
               WF_NAME[f], dname(dt), M, N, K, sh->woff, worst);
        fflush(stdout);
        release_all();
        done++;
    }
    ck_assert_int_gt(done, 40);
}

START_TEST(test_gemv) {
    /* _i: format-major over DT */
    run_shapes((wfmt)(_i / N_OF(DT)), DT[_i % N_OF(DT)]);
}
END_TEST

/* ---- graph capture -------------------------------------------------------------------------------------------- */

typedef struct {
    const wset *w;
    const void *x, *bias, *res;
    int M;
} gv_launch_ctx;

static int gv_launch(const void *ctx, void *out, cudaStream_t stream) {
    const gv_launch_ctx *c = ctx;
    return run_gemv(c->w, c->x, c->bias, c->res, out, c->M, stream);
}

/* per format: N 1000 at K 4096 splits K over clusters of 8 (63 row groups); N 4104 at M 11 runs two passes */
START_TEST(test_gemv_graph) {
    static const int shapes[][3] = {{5, 1000, 4096}, {11, 4104, 784}};
    const tp_dtype dt = DT[_i % N_OF(DT)];
    for (int f = 0; f < WF_COUNT; f++)
        for (int si = 0; si < N_OF(shapes); si++) {
            const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
            SET_CASE("gemv graph capture %s %s + bias + residual M=%d N=%d K=%d", WF_NAME[f], dname(dt), M, N, K);
            const wset w = make_weights((wfmt)f, dt, N, K, 0, 43000 + 10 * (uint64_t)f + (uint64_t)si);
            const size_t nX = (size_t)M * K, nY = (size_t)M * N;
            if (f == WF_FP8BQ) { /* the quantized x of the same values as the 16-bit x below */
                float *xh = host_normal(nX, 43100, 0.0, 1.0);
                round_dt(dt, xh, nX);
                set_xq(xh, M, K);
            }
            const gv_launch_ctx ctx = {&w, dev_upload(dt, host_normal(nX, 43100, 0.0, 1.0), nX, nX),
                                       dev_upload(dt, host_normal((size_t)N, 43101, 0.0, 0.5), (size_t)N, (size_t)N),
                                       dev_upload(dt, host_normal(nY, 43102, 0.0, 1.0), nY, nY), M};
            const unsigned char *a =
                check_graph_replay(gv_launch, &ctx, dev_alloc(dt, nY), dev_alloc(dt, nY), nY * esize(dt));
            size_t nonfinite = 0;
            float *y = hmalloc(nY * sizeof(float));
            tp_convert_to_f32(dt, a, y, nY, 1.0f);
            for (size_t i = 0; i < nY; i++) nonfinite += !isfinite(y[i]);
            ck_assert_msg(nonfinite == 0, "[%s] %zu outputs not finite", g_case, nonfinite);
            release_all();
        }
}
END_TEST

/* ---- the fused form: the GLU epilogue (gemv.h tpk_gemv_fusion) ---------------------------------------------------
 * Reference in fp64: y = act(g) u with g, u the gate and up rows' reference values (scale, bias: ref_products as
 * above); the bound adds their own bounds (the header's, without the residual) times |act'| <= 1.2 and |act(g)| (both
 * activations' derivatives stay below 1.13), and the fp32 epilogue's roundings. A wrong row pairing, a wrong
 * activation or a dropped scale is off by far more. Shapes: M 1, 3, 8 and 11 (two passes), K 200 (16-bit and FP8,
 * K % 16 == 8), 784, 2048 and 2064 (NVFP4's 8-byte path), glu_n 5, 100 and 2052 (clusters split K at small N);
 * gate and up rows in either order; SiLU and the tanh GELU; every format and both activation types. */
static double act_ref(int glu, double g) {
    const double u = glu == 1 ? g : 1.5957691216057308 * (g + 0.044715 * g * g * g);
    return g / (1.0 + exp(-u));
}

static void run_fused(wfmt f, tp_dtype dt, int M, int K, int ng, int glu, int up_first, uint64_t seed) {
    const int N = 2 * ng;
    const int gate0 = up_first ? ng : 0, up0 = up_first ? 0 : ng;
    SET_CASE("gemv fused %s %s M=%d N=%d K=%d + %s%s", WF_NAME[f], dname(dt), M, N, K, glu == 1 ? "swiglu" : "geglu",
             up_first ? " (up rows first)" : "");
    const size_t nX = (size_t)M * K, nY = (size_t)M * ng;
    const wset w = make_weights(f, dt, N, K, 0, seed);
    float *x = host_normal(nX, seed + 1, 0.3, 1.5), *bias = host_normal((size_t)N, seed + 3, 0.0, 0.5);
    if (f == WF_FP8B || f == WF_FP8BQ) vary_blocks(x, M, K);
    round_dt(dt, x, nX);
    round_dt(dt, bias, (size_t)N);
    float *xq = f == WF_W8A8 ? hmalloc(nX * sizeof(float)) : x; /* W8A8: x's E4M3 values under xs */
    if (f == WF_W8A8)
        for (size_t i = 0; i < nX; i++) xq[i] = tp_e4m3_to_f32(tp_f32_to_e4m3(x[i] / W8A8_XS));
    double *acc = hmalloc((size_t)M * N * sizeof(double)), *mag = hmalloc((size_t)M * N * sizeof(double));
    if (f == WF_FP8B || f == WF_FP8BQ) ref_fp8b(&w, x, M, acc, mag);
    else ref_products(xq, w.wd, M, N, K, acc, mag);
    if (f == WF_FP8BQ) set_xq(x, M, K);
    const void *d_x = dev_upload(dt, x, nX, nX), *d_b = dev_upload(dt, bias, (size_t)N, (size_t)N);
    void *d_y = dev_alloc(dt, nY + 64);
    const tpk_gemv_fusion fu = {glu, ng, gate0, up0};
    int rc;
    switch (f) {
    case WF_16: rc = tpk_gemv_fused(d_x, w.w, d_b, d_y, dt, M, N, K, &fu, g_stream); break;
    case WF_NVFP4: rc = tpk_gemv_nvfp4_fused(d_x, w.w, w.scales, w.ts, 0, d_b, d_y, dt, M, N, K, &fu, g_stream); break;
    case WF_NVFP4_ROWS:
        rc = tpk_gemv_nvfp4_fused(d_x, w.w, w.scales, w.cs, 1, d_b, d_y, dt, M, N, K, &fu, g_stream);
        break;
    case WF_W8A8: rc = tpk_gemv_fp8_fused(d_x, w.xs, w.w, w.cs, w.ts, d_b, d_y, dt, M, N, K, &fu, g_stream); break;
    case WF_FP8B: rc = tpk_gemv_fp8_block_fused(d_x, w.w, w.bs, d_b, d_y, dt, M, N, K, &fu, g_stream); break;
    case WF_FP8BQ:
        rc = tpk_gemv_fp8_block_q_fused(g_xq, g_xs, g_xld, w.w, w.bs, d_b, d_y, dt, M, N, K, &fu, g_stream);
        break;
    default: rc = tpk_gemv_fp8_fused(d_x, NULL, w.w, w.cs, w.ts, d_b, d_y, dt, M, N, K, &fu, g_stream); break;
    }
    KERNEL_OK(rc);
    const float *got = download_f32(dt, d_y, nY, 1.0f);
    size_t bad = 0, worst_i = 0;
    double worst = 0, worst_ref = 0;
    for (int m = 0; m < M; m++)
        for (int j = 0; j < ng; j++) {
            const int ngr = gate0 + j, nu = up0 + j;
            const size_t ig = (size_t)m * N + ngr, iu = (size_t)m * N + nu;
            const double g = w.s[ngr] * acc[ig] + bias[ngr], u = w.s[nu] * acc[iu] + bias[nu];
            const double tg = 2.0 * (K + 2) * 0x1p-24 * w.s[ngr] * mag[ig] + 0x1p-22 * fabs(g);
            const double tu = 2.0 * (K + 2) * 0x1p-24 * w.s[nu] * mag[iu] + 0x1p-22 * fabs(u);
            const double ref = act_ref(glu, g) * u;
            const double tol = ulp_of(dt, ref) + 1.2 * tg * (fabs(u) + tu) + fabs(act_ref(glu, g)) * tu + 0x1p-20 * fabs(ref);
            const size_t i = (size_t)m * ng + j;
            const double err = fabs((double)got[i] - ref);
            if (!(err <= tol)) bad++;
            const double ratio = isfinite(err) ? err / tol : INFINITY;
            if (ratio > worst) worst = ratio, worst_i = i, worst_ref = ref;
        }
    ck_assert_msg(bad == 0, "[%s] %zu of %zu elements outside the bound (worst at [%zu,%zu]: got %.7g, ref %.7g)",
                  g_case, bad, nY, worst_i / (size_t)ng, worst_i % (size_t)ng, got[worst_i], worst_ref);
    const unsigned char *tail = download_bytes((const char *)d_y + nY * esize(dt), 64 * esize(dt));
    size_t touched = 0;
    for (size_t i = 0; i < 64 * esize(dt); i++) touched += tail[i] != 0xFF;
    ck_assert_msg(touched == 0, "[%s] %zu bytes past y were written", g_case, touched);
    printf("  ok    %s: worst err/bound %.3f\n", g_case, worst);
    fflush(stdout);
    release_all();
}

START_TEST(test_gemv_fused) {
    const wfmt f = (wfmt)(_i / N_OF(DT));
    const tp_dtype dt = DT[_i % N_OF(DT)];
    const int kmul = f == WF_NVFP4 || f == WF_NVFP4_ROWS || f == WF_FP8B || f == WF_FP8BQ ? 16 : 8;
    static const int Ks[] = {200, 784, 2048, 2064}, Ms[] = {1, 3, 8, 11}, NGs[] = {5, 100, 2052};
    uint64_t seed = 47000 + 1000 * (uint64_t)_i;
    int done = 0;
    for (int a = 0; a < N_OF(Ks); a++) {
        if (Ks[a] % kmul) continue;
        for (int b = 0; b < N_OF(Ms); b++) {
            run_fused(f, dt, Ms[b], Ks[a], NGs[(a + b) % N_OF(NGs)], 1 + ((a + b) & 1), b & 1, seed += 10);
            done++;
        }
    }
    ck_assert_int_gt(done, 10);
}
END_TEST

/* ---- rejected arguments --------------------------------------------------------------------------------------- */

START_TEST(test_gemv_rejects) {
    SET_CASE("gemv rejects");
    const tp_dtype h = TP_F16;
    char *buf = dev_bytes(1 << 20), *y = dev_bytes(1 << 16);
    const char *x = buf, *w = buf + 65536, *sc = buf + 262144;
    const float *s = (const float *)(buf + 524288);
    CUDA_OK(cudaMemset(buf, 0, 1 << 20));
    const tpk_gemv_fusion glu_bad = {3, 8, 0, 8}, glu_past = {1, 8, 0, 9}, glu_zero = {1, 0, 0, 8};
    const rejected_call r[] = {
        {"16-bit: K 12 (not a multiple of 8)", tpk_gemv(x, w, NULL, NULL, y, h, 1, 16, 12, g_stream)},
        {"16-bit: M 0", tpk_gemv(x, w, NULL, NULL, y, h, 0, 16, 16, g_stream)},
        {"16-bit: N 0", tpk_gemv(x, w, NULL, NULL, y, h, 1, 0, 16, g_stream)},
        {"16-bit: K 0", tpk_gemv(x, w, NULL, NULL, y, h, 1, 16, 0, g_stream)},
        {"16-bit: f32", tpk_gemv(x, w, NULL, NULL, y, TP_F32, 1, 16, 16, g_stream)},
        {"16-bit: e4m3", tpk_gemv(x, w, NULL, NULL, y, TP_E4M3, 1, 16, 16, g_stream)},
        {"16-bit: NULL x", tpk_gemv(NULL, w, NULL, NULL, y, h, 1, 16, 16, g_stream)},
        {"16-bit: NULL w", tpk_gemv(x, NULL, NULL, NULL, y, h, 1, 16, 16, g_stream)},
        {"16-bit: NULL y", tpk_gemv(x, w, NULL, NULL, NULL, h, 1, 16, 16, g_stream)},
        {"16-bit: x not 16-byte aligned", tpk_gemv(x + 8, w, NULL, NULL, y, h, 1, 16, 16, g_stream)},
        {"16-bit: w not 16-byte aligned", tpk_gemv(x, w + 8, NULL, NULL, y, h, 1, 16, 16, g_stream)},
        {"16-bit: y not 2-byte aligned", tpk_gemv(x, w, NULL, NULL, y + 1, h, 1, 16, 16, g_stream)},
        {"16-bit: bias not 2-byte aligned", tpk_gemv(x, w, w + 1, NULL, y, h, 1, 16, 16, g_stream)},
        {"16-bit: residual not 2-byte aligned", tpk_gemv(x, w, NULL, w + 1, y, h, 1, 16, 16, g_stream)},
        {"fp8: K 20 (not a multiple of 8)", tpk_gemv_fp8(x, w, s, NULL, NULL, NULL, y, h, 1, 16, 20, g_stream)},
        {"fp8: bf16 M -1", tpk_gemv_fp8(x, w, s, NULL, NULL, NULL, y, TP_BF16, -1, 16, 16, g_stream)},
        {"fp8: w not 8-byte aligned", tpk_gemv_fp8(x, w + 4, s, NULL, NULL, NULL, y, h, 1, 16, 16, g_stream)},
        {"fp8: channel_scale not 4-byte aligned",
         tpk_gemv_fp8(x, w, (const float *)(sc + 2), NULL, NULL, NULL, y, h, 1, 16, 16, g_stream)},
        {"fp8: NULL w", tpk_gemv_fp8(x, NULL, s, s, NULL, NULL, y, h, 1, 16, 16, g_stream)},
        {"fp8: f32", tpk_gemv_fp8(x, w, s, s, NULL, NULL, y, TP_F32, 1, 16, 16, g_stream)},
        {"nvfp4: K 24 (not a multiple of 16)", tpk_gemv_nvfp4(x, w, sc, s, NULL, NULL, y, h, 1, 16, 24, g_stream)},
        {"nvfp4: K 8", tpk_gemv_nvfp4(x, w, sc, s, NULL, NULL, y, h, 1, 16, 8, g_stream)},
        {"nvfp4: NULL scales", tpk_gemv_nvfp4(x, w, NULL, s, NULL, NULL, y, h, 1, 16, 32, g_stream)},
        {"nvfp4: NULL global scale", tpk_gemv_nvfp4(x, w, sc, NULL, NULL, NULL, y, h, 1, 16, 32, g_stream)},
        {"nvfp4: global scale not 4-byte aligned",
         tpk_gemv_nvfp4(x, w, sc, (const float *)(sc + 1), NULL, NULL, y, h, 1, 16, 32, g_stream)},
        {"nvfp4: w not 8-byte aligned", tpk_gemv_nvfp4(x, w + 4, sc, s, NULL, NULL, y, h, 1, 16, 32, g_stream)},
        {"nvfp4: x not 16-byte aligned", tpk_gemv_nvfp4(x + 2, w, sc, s, NULL, NULL, y, h, 1, 16, 32, g_stream)},
        {"nvfp4: N -5", tpk_gemv_nvfp4(x, w, sc, s, NULL, NULL, y, h, 1, -5, 32, g_stream)},
        {"nvfp4: bf16 K 40", tpk_gemv_nvfp4(x, w, sc, s, NULL, NULL, y, TP_BF16, 3, 16, 40, g_stream)},
        {"w8a8: NULL x scale", tpk_gemv_w8a8(x, NULL, w, s, s, NULL, NULL, y, h, 1, 16, 16, g_stream)},
        {"w8a8: x scale not 4-byte aligned",
         tpk_gemv_w8a8(x, (const float *)(sc + 2), w, s, NULL, NULL, NULL, y, h, 1, 16, 16, g_stream)},
        {"w8a8: K 12", tpk_gemv_w8a8(x, s, w, s, NULL, NULL, NULL, y, h, 1, 16, 12, g_stream)},
        {"fused: glu 3", tpk_gemv_fused(x, w, NULL, y, h, 1, 16, 16, &glu_bad, g_stream)},
        {"fused: glu rows past N", tpk_gemv_fp8_fused(x, NULL, w, s, NULL, NULL, y, h, 1, 16, 16, &glu_past, g_stream)},
        {"fused: glu_n 0", tpk_gemv_nvfp4_fused(x, w, sc, s, 0, NULL, y, h, 1, 16, 32, &glu_zero, g_stream)},
        {"fp8-block: K 24 (not a multiple of 16)", tpk_gemv_fp8_block(x, w, s, NULL, NULL, y, h, 1, 16, 24, g_stream)},
        {"fp8-block: NULL scales", tpk_gemv_fp8_block(x, w, NULL, NULL, NULL, y, h, 1, 16, 32, g_stream)},
        {"fp8-block: scales not 4-byte aligned",
         tpk_gemv_fp8_block(x, w, (const float *)(sc + 2), NULL, NULL, y, h, 1, 16, 32, g_stream)},
        {"fp8-block: w not 16-byte aligned", tpk_gemv_fp8_block(x, w + 8, s, NULL, NULL, y, h, 1, 16, 32, g_stream)},
        {"fp8-block: f32", tpk_gemv_fp8_block(x, w, s, NULL, NULL, y, TP_F32, 1, 16, 32, g_stream)},
        {"fp8-block q: NULL x scales", tpk_gemv_fp8_block_q(x, NULL, 4, w, s, NULL, NULL, y, h, 1, 16, 32, g_stream)},
        {"fp8-block q: x_ld < M", tpk_gemv_fp8_block_q(x, s, 2, w, s, NULL, NULL, y, h, 3, 16, 32, g_stream)},
        {"fp8-block q: K 24", tpk_gemv_fp8_block_q(x, s, 4, w, s, NULL, NULL, y, h, 1, 16, 24, g_stream)},
        {"fp8-block fused: glu rows past N",
         tpk_gemv_fp8_block_fused(x, w, s, NULL, y, h, 1, 16, 32, &glu_past, g_stream)},
    };
    check_rejected(r, sizeof r / sizeof r[0]);
    check_untouched("y after the rejected calls", y, 0, 1 << 16);
}
END_TEST

Suite *gpu_gemv_suite(void) {
    Suite *s = suite_create("gpu_gemv");
    tcase_add_loop_test(new_tcase(s, "gemv"), test_gemv, 0, WF_COUNT * N_OF(DT));
    tcase_add_loop_test(new_tcase(s, "gemv_graph"), test_gemv_graph, 0, N_OF(DT));
    tcase_add_loop_test(new_tcase(s, "gemv_fused"), test_gemv_fused, 0, WF_COUNT * N_OF(DT));
    tcase_add_test(new_tcase(s, "gemv_rejects"), test_gemv_rejects);
    return s;
}
