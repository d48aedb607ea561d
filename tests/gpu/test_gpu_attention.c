/* test_gpu_attention.c: the tensor-core fused attention (tpk_flash_attention, src/exec/cuda/attention.h) against
 * the fp64 CPU reference tp_cpu_attention, on the GPU.
 *
 * Method (as test_gpu_ops.c):
 *   - qkv ~ N(0, 2^2), never zero, rounded to the input type on the host BEFORE the reference runs, so only the
 *     kernel's own error is measured. Scores q.k * D^-0.5 then have a standard deviation of 4: peaked softmaxes
 *     whose running max changes across key tiles (the online rescaling is exercised);
 *   - every output buffer is poisoned with 0xFF bytes (NaN in F16, BF16 and E4M3); a NaN/Inf left fails;
 *   - shapes: every T in {1, 7, 64, 197, 257, 577} (1 key; a tile with 7 valid keys; exactly one 64-key tile;
 *     ViT's 197 = 3 tiles + 5 keys; 257 = 4 tiles + 1; 577 = 9 tiles + 1, many rescalings), B in {1, 3},
 *     (H, D) in {(1, 32), (3, 64), (12, 64), (3, 80), (1, 96), (3, 128)}; inputs F16 and BF16; outputs F16, BF16
 *     and E4M3; every kernel variant (1..6; 3 and 4 do not exist for D = 128);
 *   - the persistent variant (6) with more work items than resident CTAs, so every CTA loops over several items;
 *   - other scales: negative (the kernel folds the sign into Q), zero (uniform weights) and 1 (very peaked);
 *   - a padded-buffer check: rows >= T of qkv are NaN and rows >= T of out are poison, and must stay so;
 *   - argument rejection, and capture into a CUDA graph (global capture mode rejects any synchronizing or
 *     allocating call) replaying bit for bit.
 *
 * Tolerances, from the formats (inputs are exact, so the kernel's error comes from):
 *   (a) P rounded to the input type before P V, while the row sum l uses the unrounded fp32 p: each term
 *       p_j v_j carries a relative error <= u_p (u_p = 2^-11 for fp16, 2^-8 for bf16), so
 *       |O~ - O| <= u_p * sum_j p_j |v_j| / l <= u_p * max|V|, for every element; fp16 P below 2^-14 is subnormal
 *       with absolute error <= 2^-25 per term: at most T * 2^-25 * max|V| more (l >= 1, the max term is 1);
 *   (b) the output rounding: <= u_o |y| with u_o = 2^-11 (F16), 2^-8 (BF16), 2^-4 (E4M3; plus 2^-10 * scale for
 *       E4M3 subnormals);
 *   (c) fp32 accumulation in the tensor cores and ex2.approx (rel. error ~2^-22): ~1e-6 relative, negligible.
 * Max abs error bound: 1.5 * ((a) + u_o * max|ref| (+ the E4M3 subnormal term)): the proven bound with 50% slack.
 * Relative L2 bound: the roundings are independent and unbiased, so the expected relative L2 error is about
 * sqrt(u_p^2 + u_o^2) / sqrt(3) (for zero-mean V, sum p^2 v^2 ~ |sum p v|^2 in expectation); bound 2 (u_p + u_o)
 * for F16/BF16 outputs (a margin >= 3.5x), and for E4M3 the measured-RMS bound of test_gpu_ops.c (4e-2 for
 * n >= 4096, else the hard per-element 2^-4 * 1.01) plus 2 u_p.
 *
 * CUDA is initialized only inside tests (checked fixture), never in the runner's parent process. */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/attention.h"
#include "formats/dtype.h"

#define TP_GPU_MAX_TRACKED 1024
#include "gpu_check.h"

Suite *gpu_attention_suite(void);

/* ---- fixture: the tracked resources are released per shape (release_all) and at teardown ------------------- */

static void setup(void) { gpu_setup(); }

static void teardown(void) {
    release_all();
    close_stream();
}

static void round_to(tp_dtype dt, float *x, size_t n) {
    void *tmp = hmalloc(n * esize(dt));
    tp_convert_from_f32(dt, x, tmp, n, 1.0f);
    tp_convert_to_f32(dt, tmp, x, n, 1.0f);
    g_host[--g_nhost] = NULL; /* tmp was the last allocation: free it now */
    free(tmp);
}

/* max |V| over the V part of qkv (B, T, 3, H, D) */
static float host_vmax(const float *qkv, int B, int T, int H, int D) {
    float m = 0.0f;
    for (size_t bt = 0; bt < (size_t)B * T; bt++) m = fmaxf(m, host_amax(qkv + (bt * 3 + 2) * H * D, (size_t)H * D));
    return m;
}

static double unit_round(tp_dtype t) { return t == TP_F16 ? 0x1p-11 : t == TP_BF16 ? 0x1p-8 : 0x1p-4; }

typedef struct {
    double rel_l2, abs;
} tol_t;

/* the bounds of the header comment */
static tol_t fa_tol(tp_dtype in, tp_dtype out, size_t n, int T, float vmax, float refmax, float oscale) {
    const double up = unit_round(in), uo = unit_round(out);
    double pa = up * vmax + (in == TP_F16 ? T * 0x1p-25 * vmax : 0.0);
    double ob = uo * refmax + (out == TP_E4M3 ? 0x1p-10 * oscale : 0.0);
    tol_t t;
    t.abs = 1.5 * (pa + ob);
    t.rel_l2 = out == TP_E4M3 ? (n >= 4096 ? 4e-2 : 0.0625 * 1.01) + 2.0 * up : 2.0 * (up + uo);
    return t;
}

static void check_close(const char *what, const float *got, const float *ref, size_t n, size_t cols, tol_t tol) {
    double num = 0.0, den = 0.0, max_abs = 0.0;
    size_t worst = 0, bad = 0, first_bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            if (bad++ == 0) first_bad = i;
            continue;
        }
        const double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > max_abs) max_abs = fabs(d), worst = i;
    }
    const double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    const int ok = bad == 0 && rel <= tol.rel_l2 && max_abs <= tol.abs;
    printf("  %s  %s | %s: n=%zu rel_l2=%.3e (tol %.1e) max_abs=%.3e (tol %.3e) at %zu=[%zu,%zu] got %.7g ref "
           "%.7g%s\n",
           ok ? "ok  " : "FAIL", g_case, what, n, rel, tol.rel_l2, max_abs, tol.abs, worst, worst / cols,
           worst % cols, n ? got[worst] : 0.0, n ? ref[worst] : 0.0, bad ? " (+NaN outputs)" : "");
    fflush(stdout);
    ck_assert_msg(bad == 0, "[%s] %s: %zu of %zu outputs are NaN/Inf (poison never overwritten, or a NaN produced); "
                  "first at %zu = [%zu,%zu], ref there %.7g",
                  g_case, what, bad, n, first_bad, first_bad / cols, first_bad % cols, ref[first_bad]);
    ck_assert_msg(rel <= tol.rel_l2, "[%s] %s: relative L2 error %.3e > %.1e (max abs %.3e at %zu: got %.7g ref %.7g)",
                  g_case, what, rel, tol.rel_l2, max_abs, worst, got[worst], ref[worst]);
    ck_assert_msg(max_abs <= tol.abs, "[%s] %s: max abs error %.3e > %.3e at %zu=[%zu,%zu]: got %.7g ref %.7g", g_case,
                  what, max_abs, tol.abs, worst, worst / cols, worst % cols, got[worst], ref[worst]);
}

static const tp_dtype IN_T[] = {TP_F16, TP_BF16};
static const tp_dtype OUT_T[] = {TP_F16, TP_BF16, TP_E4M3};
#define N_VARIANTS 6 /* tpk_flash_attention_variant 1..6 */

static int variant_exists(int v, int D) { return !((v == 3 || v == 4) && D > 96); }

/* ================================================================================================================
 * Every shape x output type x variant against the reference (one reference per shape and input type).
 * ============================================================================================================== */

START_TEST(test_flash_attention) {
    const tp_dtype idt = IN_T[_i];
    static const int Ts[] = {1, 7, 64, 197, 257, 577}, Bs[] = {1, 3};
    static const int HD[][2] = {{1, 32}, {3, 64}, {12, 64}, {3, 80}, {1, 96}, {3, 128}};
    uint64_t seed = 4100 + 1000 * (uint64_t)_i;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
            for (size_t hi = 0; hi < sizeof HD / sizeof HD[0]; hi++) {
                const int T = Ts[ti], B = Bs[bi], H = HD[hi][0], D = HD[hi][1];
                const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
                const float scale = 1.0f / sqrtf((float)D);
                SET_CASE("flash %s B=%d T=%d H=%d D=%d", dname(idt), B, T, H, D);
                float *qkv = host_normal(n_in, seed++, 0.0, 2.0);
                round_to(idt, qkv, n_in);
                float *ref = hmalloc(n_out * sizeof(float));
                tp_cpu_attention(qkv, ref, B, T, H, D, scale);
                const float vmax = host_vmax(qkv, B, T, H, D), refmax = host_amax(ref, n_out);
                void *d_qkv = dev_upload(idt, qkv, n_in, n_in);
                for (size_t oi = 0; oi < sizeof OUT_T / sizeof OUT_T[0]; oi++) {
                    const tp_dtype odt = OUT_T[oi];
                    const float oscale = odt == TP_E4M3 ? refmax / 448.0f : 1.0f;
                    float *d_oscale = odt == TP_E4M3 ? dev_scalar(oscale) : NULL;
                    const tol_t tol = fa_tol(idt, odt, n_out, T, vmax, refmax, oscale);
                    for (int v = 1; v <= N_VARIANTS; v++) {
                        if (!variant_exists(v, D)) continue;
                        SET_CASE("flash %s->%s v%d B=%d T=%d H=%d D=%d", dname(idt), dname(odt), v, B, T, H, D);
                        void *d_out = dev_alloc(odt, n_out);
                        KERNEL_OK(tpk_flash_attention_variant(d_qkv, idt, d_out, odt, d_oscale, B, T, H, D, scale,
                                                              v, g_stream));
                        check_close("out", download_f32(odt, d_out, n_out, oscale), ref, n_out, (size_t)H * D, tol);
                    }
                    SET_CASE("flash %s->%s default B=%d T=%d H=%d D=%d", dname(idt), dname(odt), B, T, H, D);
                    void *d_out = dev_alloc(odt, n_out);
                    KERNEL_OK(tpk_flash_attention(d_qkv, idt, d_out, odt, d_oscale, B, T, H, D, scale, g_stream));
                    check_close("out", download_f32(odt, d_out, n_out, oscale), ref, n_out, (size_t)H * D, tol);
                }
                release_all();
            }
}
END_TEST

/* ================================================================================================================
 * Padded buffers: qkv has PAD extra token rows of NaN after the last batch's T rows, out has PAD extra rows of
 * poison. The kernel must neither read the NaN rows (keys/queries >= T are masked or zero-filled, never loaded:
 * 0 * NaN would poison the output) nor write past row T.
 * ============================================================================================================== */

START_TEST(test_flash_attention_padding) {
    const tp_dtype idt = IN_T[_i];
    static const int cases[][4] = {{1, 1, 3, 64}, {1, 7, 2, 32}, {2, 64, 3, 64}, {1, 197, 2, 80},
                                   {2, 200, 1, 128}, {1, 129, 4, 96}}; /* B, T, H, D */
    const int PAD = 70;                                                 /* > one tile of rows */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
        const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
        const size_t pad_in = (size_t)PAD * 3 * H * D, pad_out = (size_t)PAD * H * D;
        const float scale = 1.0f / sqrtf((float)D);
        SET_CASE("flash padding %s B=%d T=%d H=%d D=%d", dname(idt), B, T, H, D);
        float *qkv = host_normal(n_in, 7000 + c, 0.0, 2.0);
        round_to(idt, qkv, n_in);
        float *ref = hmalloc(n_out * sizeof(float));
        tp_cpu_attention(qkv, ref, B, T, H, D, scale);
        const float vmax = host_vmax(qkv, B, T, H, D), refmax = host_amax(ref, n_out);
        void *d_qkv = dev_upload(idt, qkv, n_in, n_in + pad_in); /* the pad stays 0xFF: NaN */
        for (size_t oi = 0; oi < sizeof OUT_T / sizeof OUT_T[0]; oi++) {
            const tp_dtype odt = OUT_T[oi];
            const float oscale = odt == TP_E4M3 ? refmax / 448.0f : 1.0f;
            float *d_oscale = odt == TP_E4M3 ? dev_scalar(oscale) : NULL;
            for (int v = 0; v <= N_VARIANTS; v++) {
                if (!variant_exists(v, D)) continue;
                SET_CASE("flash padding %s->%s v%d B=%d T=%d H=%d D=%d", dname(idt), dname(odt), v, B, T, H, D);
                void *d_out = dev_alloc(odt, n_out + pad_out);
                KERNEL_OK(tpk_flash_attention_variant(d_qkv, idt, d_out, odt, d_oscale, B, T, H, D, scale, v,
                                                      g_stream));
                check_close("out rows < T", download_f32(odt, d_out, n_out, oscale), ref, n_out, (size_t)H * D,
                            fa_tol(idt, odt, n_out, T, vmax, refmax, oscale));
                const unsigned char *tail =
                    download_bytes((const char *)d_out + n_out * esize(odt), pad_out * esize(odt));
                size_t touched = 0, first = 0;
                for (size_t i = 0; i < pad_out * esize(odt); i++)
                    if (tail[i] != 0xFF)
                        if (touched++ == 0) first = i;
                printf("  %s  %s | rows >= T untouched: %zu bytes, %zu overwritten\n", touched ? "FAIL" : "ok  ",
                       g_case, pad_out * esize(odt), touched);
                fflush(stdout);
                ck_assert_msg(touched == 0, "[%s] %zu of %zu bytes past row T were written; first at byte %zu (row T+%zu)",
                              g_case, touched, pad_out * esize(odt), first, first / ((size_t)H * D * esize(odt)));
            }
        }
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * Scales other than D^-0.5: negative (softmax of -|s| q.k: the kernel negates Q's fragments and uses |scale|),
 * zero (every weight 1/T: the output is the mean of V, a case where exp2(s * 0 - 0) must give exactly 1 and masked
 * keys must still give 0) and 1 (scores with a standard deviation of 32: near one-hot softmaxes).
 * ============================================================================================================== */

START_TEST(test_flash_attention_scales) {
    const tp_dtype idt = IN_T[_i];
    static const int cases[][4] = {{2, 197, 3, 64}, {1, 70, 2, 128}, {3, 7, 1, 32}}; /* B, T, H, D */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
        const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
        const float scales[] = {-1.0f / sqrtf((float)D), 0.0f, 1.0f};
        float *qkv = host_normal(n_in, 9000 + c, 0.0, 2.0);
        round_to(idt, qkv, n_in);
        void *d_qkv = dev_upload(idt, qkv, n_in, n_in);
        const float vmax = host_vmax(qkv, B, T, H, D);
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
            float *ref = hmalloc(n_out * sizeof(float));
            tp_cpu_attention(qkv, ref, B, T, H, D, scales[si]);
            const float refmax = host_amax(ref, n_out);
            for (int v = 0; v <= N_VARIANTS; v++) {
                if (!variant_exists(v, D)) continue;
                SET_CASE("flash scale %g %s->f16 v%d B=%d T=%d H=%d D=%d", scales[si], dname(idt), v, B, T, H, D);
                void *d_out = dev_alloc(TP_F16, n_out);
                KERNEL_OK(tpk_flash_attention_variant(d_qkv, idt, d_out, TP_F16, NULL, B, T, H, D, scales[si], v,
                                                      g_stream));
                check_close("out", download_f32(TP_F16, d_out, n_out, 1.0f), ref, n_out, (size_t)H * D,
                            fa_tol(idt, TP_F16, n_out, T, vmax, refmax, 1.0f));
            }
        }
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * The persistent kernel (variant 6) over more work items (B * H * query tiles) than the grid has CTAs (132 SMs x
 * 4 resident CTAs for D <= 64, x 2 for D = 128): each CTA loops over several items, prefetching the next item's Q
 * and first K/V tile while it finishes the current one. Also the default variant on the same data.
 * ============================================================================================================== */

START_TEST(test_flash_attention_persistent) {
    const tp_dtype idt = IN_T[_i];
    /* B, T, H, D: 1536 items (split-mode last tiles of 5 rows); 720 items (D = 80, 1-row last tiles); 576 items
     * (D = 128: 2-row last tiles, 2-key last key tile); 768 single-tile items of 7 rows (split mode only) */
    static const int cases[][4] = {{32, 197, 12, 64}, {24, 257, 6, 80}, {16, 130, 12, 128}, {64, 7, 12, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
        const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
        const float scale = 1.0f / sqrtf((float)D);
        float *qkv = host_normal(n_in, 9500 + c, 0.0, 2.0);
        round_to(idt, qkv, n_in);
        float *ref = hmalloc(n_out * sizeof(float));
        tp_cpu_attention(qkv, ref, B, T, H, D, scale);
        const float vmax = host_vmax(qkv, B, T, H, D), refmax = host_amax(ref, n_out);
        void *d_qkv = dev_upload(idt, qkv, n_in, n_in);
        for (size_t oi = 0; oi < sizeof OUT_T / sizeof OUT_T[0]; oi++) {
            const tp_dtype odt = OUT_T[oi];
            const float oscale = odt == TP_E4M3 ? refmax / 448.0f : 1.0f;
            float *d_oscale = odt == TP_E4M3 ? dev_scalar(oscale) : NULL;
            static const int vs[] = {6, 0};
            for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
                SET_CASE("flash many items %s->%s v%d B=%d T=%d H=%d D=%d", dname(idt), dname(odt), vs[vi], B, T, H,
                         D);
                void *d_out = dev_alloc(odt, n_out);
                KERNEL_OK(tpk_flash_attention_variant(d_qkv, idt, d_out, odt, d_oscale, B, T, H, D, scale, vs[vi],
                                                      g_stream));
                check_close("out", download_f32(odt, d_out, n_out, oscale), ref, n_out, (size_t)H * D,
                            fa_tol(idt, odt, n_out, T, vmax, refmax, oscale));
            }
        }
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * Rejected arguments (cudaErrorInvalidValue, nothing launched) and empty work (cudaSuccess).
 * ============================================================================================================== */

START_TEST(test_flash_attention_rejects) {
    SET_CASE("flash rejects");
    char *buf = dev_alloc(TP_F16, 1 << 16);
    float *sc = dev_alloc(TP_F32, 1);
    CUDA_OK(cudaMemset(sc, 0, sizeof(float)));
    const rejected_call r[] = {
        {"D = 48", tpk_flash_attention(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 48, 0.1f, g_stream)},
        {"D = 129", tpk_flash_attention(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 129, 0.1f, g_stream)},
        {"D = 256", tpk_flash_attention(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 256, 0.1f, g_stream)},
        {"f32 input", tpk_flash_attention(buf, TP_F32, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"e4m3 input", tpk_flash_attention(buf, TP_E4M3, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"f32 output", tpk_flash_attention(buf, TP_F16, buf + 8192, TP_F32, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"e4m3 output without scale",
         tpk_flash_attention(buf, TP_F16, buf + 8192, TP_E4M3, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"qkv not 16-byte aligned",
         tpk_flash_attention(buf + 2, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"out not 16-byte aligned",
         tpk_flash_attention(buf, TP_F16, buf + 8194, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"NULL qkv", tpk_flash_attention(NULL, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"negative T", tpk_flash_attention(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, -1, 1, 64, 0.1f, g_stream)},
        {"variant 7",
         tpk_flash_attention_variant(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, 7, g_stream)},
        {"variant -1",
         tpk_flash_attention_variant(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, -1, g_stream)},
        {"variant 3 with D = 128",
         tpk_flash_attention_variant(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 128, 0.1f, 3, g_stream)},
    };
    check_rejected(r, sizeof r / sizeof r[0]);
    /* empty work: a successful no-op, even with NULL pointers */
    ck_assert_int_eq(tpk_flash_attention(NULL, TP_F16, NULL, TP_F16, NULL, 0, 4, 1, 64, 0.1f, g_stream), 0);
    ck_assert_int_eq(tpk_flash_attention(NULL, TP_BF16, NULL, TP_E4M3, NULL, 2, 0, 1, 64, 0.1f, g_stream), 0);
    ck_assert_int_eq(tpk_flash_attention(NULL, TP_F16, NULL, TP_BF16, NULL, 2, 4, 0, 32, 0.1f, g_stream), 0);
    (void)sc;
}
END_TEST

/* ================================================================================================================
 * Graph capture (global mode: any synchronizing or allocating call inside fails the capture), for the default
 * variant and the persistent one (whose launcher also queries the SM count and occupancy). D = 128 needs more than
 * 48 KB of shared memory, so each launcher's cudaFuncSetAttribute runs inside the capture the first time.
 * The replay must equal an eager launch bit for bit.
 * ============================================================================================================== */

START_TEST(test_flash_attention_graph) {
    static const int cases[][4] = {{2, 197, 3, 128}, {3, 197, 12, 64}, {2, 197, 3, 128}, {3, 197, 12, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
        const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
        const int variant = c < 2 ? 0 : 6; /* the default, then the persistent kernel (host-side occupancy queries) */
        SET_CASE("flash graph capture f16->e4m3 v%d B=%d T=%d H=%d D=%d", variant, B, T, H, D);
        float *qkv = host_normal(n_in, 8000 + c, 0.0, 2.0);
        void *d_qkv = dev_upload(TP_F16, qkv, n_in, n_in);
        void *d_a = dev_alloc(TP_E4M3, n_out), *d_b = dev_alloc(TP_E4M3, n_out);
        float *d_sc = dev_scalar(1.0f / 32.0f); /* |out| <= max|V| ~ 9: |out / scale| < 448 */
        cudaStream_t cs;
        CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
        const int r = tpk_flash_attention_variant(d_qkv, TP_F16, d_a, TP_E4M3, d_sc, B, T, H, D, 0.125f, variant, cs);
        const cudaError_t ec = cudaStreamEndCapture(cs, &graph);
        ck_assert_msg(r == 0, "[%s] launch inside capture returned %d (%s)", g_case, r, cudaGetErrorName((cudaError_t)r));
        CUDA_OK(ec);
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        CUDA_OK(cudaGraphLaunch(exec, cs));
        CUDA_OK(cudaStreamSynchronize(cs));
        LAUNCH_OK(tpk_flash_attention_variant(d_qkv, TP_F16, d_b, TP_E4M3, d_sc, B, T, H, D, 0.125f, variant, cs));
        CUDA_OK(cudaStreamSynchronize(cs));
        const unsigned char *a = download_bytes(d_a, n_out), *b = download_bytes(d_b, n_out);
        size_t diff = 0;
        for (size_t i = 0; i < n_out; i++) diff += a[i] != b[i];
        printf("  %s  %s: replay vs eager, %zu of %zu bytes differ\n", diff ? "FAIL" : "ok  ", g_case, diff, n_out);
        fflush(stdout);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(cs);
        ck_assert_msg(diff == 0, "[%s] graph replay differs from the eager launch in %zu bytes", g_case, diff);
        release_all();
    }
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------------------------- */

/* new_tcase (gpu_check.h): 600 s a test, for fp64 CPU references of up to ~3 GFLOP per shape */
Suite *gpu_attention_suite(void) {
    Suite *s = suite_create("gpu_attention");
    tcase_add_loop_test(new_tcase(s, "flash_attention"), test_flash_attention, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "flash_attention_padding"), test_flash_attention_padding, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "flash_attention_scales"), test_flash_attention_scales, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "flash_attention_persistent"), test_flash_attention_persistent, 0, N_OF(IN_T));
    tcase_add_test(new_tcase(s, "flash_attention_rejects"), test_flash_attention_rejects);
    tcase_add_test(new_tcase(s, "flash_attention_graph"), test_flash_attention_graph);
    return s;
}
