/* test_gpu_attention.c: the tensor-core fused attention (tpk_flash_attention, src/exec/cuda/attention/attention.h) against
 * the fp64 CPU reference tp_cpu_attention, on the GPU; and its general entry point tpk_flash_attention_ex (strided
 * Q/K/V/O, Tq != Tkv, causal, GQA, split-KV) against tp_cpu_attention_ex: see the flash_ex tests further down.
 * Seen on an H200 (2026-11-21, bench/results/2026-11-21_h200_gpu_tests_attention_decoder.log): 16 checks pass,
 * 1240 flash_ex configurations, the worst at 0.65 of its bound (an E4M3 output).
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
#include "exec/cuda/attention/attention.h"
#include "formats/dtype.h"
#include "lab_variants.h" /* bench/: the lab-only kernel variants */

#define TP_GPU_MAX_TRACKED 1024
#include "gpu_check.h"
#include "attn_check.h"

Suite *gpu_attention_suite(void);

/* ---- fixture: the tracked resources are released per shape (release_all) and at teardown ------------------- */

static void setup(void) { gpu_setup(); }

static void teardown(void) {
    release_all();
    close_stream();
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

typedef struct {
    const void *qkv;
    const float *sc;
    int B, T, H, D, variant;
} fa_launch_ctx;

static int fa_launch(const void *ctx, void *out, cudaStream_t st) {
    const fa_launch_ctx *c = ctx;
    return tpk_flash_attention_variant(c->qkv, TP_F16, out, TP_E4M3, c->sc, c->B, c->T, c->H, c->D, 0.125f,
                                       c->variant, st);
}

START_TEST(test_flash_attention_graph) {
    static const int cases[][4] = {{2, 197, 3, 128}, {3, 197, 12, 64}, {2, 197, 3, 128}, {3, 197, 12, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
        const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
        const int variant = c < 2 ? 0 : 6; /* the default, then the persistent kernel (host-side occupancy queries) */
        SET_CASE("flash graph capture f16->e4m3 v%d B=%d T=%d H=%d D=%d", variant, B, T, H, D);
        float *qkv = host_normal(n_in, 8000 + c, 0.0, 2.0);
        /* |out| <= max|V| ~ 9: |out / scale| < 448 */
        const fa_launch_ctx ctx = {dev_upload(TP_F16, qkv, n_in, n_in), dev_scalar(1.0f / 32.0f), B, T, H, D, variant};
        check_graph_replay(fa_launch, &ctx, dev_alloc(TP_E4M3, n_out), dev_alloc(TP_E4M3, n_out), n_out);
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * The general entry point tpk_flash_attention_ex (strided Q/K/V/O, Tq != Tkv, causal bottom-right, GQA, split-KV)
 * against tp_cpu_attention_ex.
 *
 * Layout: separate Q (B, Tq, H, D), K and V (B, Tkv, Hkv, D), O (B, Tq, H, D), each with a row stride longer than
 * its heads (8 to 24 extra elements) and a batch stride longer than its rows (64 extra): the gaps of the inputs
 * hold NaN (never to be read: 0 * NaN would poison an output), the gaps of O hold poison and must stay untouched.
 * Every output buffer is poisoned with 0xFF bytes (NaN) before each run.
 * Shapes (each for D 64 and 128, B 1 and 3, (H, Hkv) = (8, 2) (GQA, G = 4) and (4, 4) (MHA)):
 *   causal Tq = Tkv in {1, 197, 577}; Tq in {1, 7} x Tkv in {1, 63, 1000, 8192}, causal and not (Tkv = 1000: not a
 *   multiple of the 64-key tile; 8192: decode with split-KV; Tq 7 > Tkv 1: six rows see no key); causal Tq 300 /
 *   Tkv 1000; causal Tq 100 / Tkv 37 (Tq > Tkv: rows 0..62 see no key and must be exactly 0).
 * Each shape runs three ways: no workspace (one key range), the automatic plan (tpk_flash_attention_ex_plan's
 * workspace), and 3 forced key ranges (num_splits = 3, so split-KV with uneven ranges is exercised on any GPU).
 * Tolerances: fa_tol above (T = Tkv for the fp16 subnormal term); split-KV's fp32 merge adds ~1e-7 relative.
 * ============================================================================================================== */

typedef struct {
    int Tq, Tkv, causal;
} ex_shape;

/* Runs one configuration into a freshly poisoned O and checks it against ref (dense (B, Tq, H, D)); the gaps of O
 * must still be 0xFF. */
static void ex_run_check(tpk_attn_args *a, const float *ref, float vmax, float refmax, float oscale) {
    const size_t es = esize(a->out_dt), n_o = (size_t)a->B * (size_t)a->o_batch_stride;
    const size_t n_dense = (size_t)a->B * a->Tq * a->H * a->D;
    CUDA_OK(cudaMemset(a->o, 0xFF, n_o * es));
    KERNEL_OK(tpk_flash_attention_ex(a, g_stream));
    float *dense = hmalloc(n_dense * sizeof(float));
    const size_t touched = strided_gather(a->out_dt, download_bytes(a->o, n_o * es), a->B, a->Tq,
                                          (long long)a->H * a->D, a->o_row_stride, a->o_batch_stride, oscale, dense);
    check_close("out", dense, ref, n_dense, (size_t)a->H * a->D,
                fa_tol(a->in_dt, a->out_dt, n_dense, a->Tkv, vmax, refmax, oscale));
    ck_assert_msg(touched == 0, "[%s] %zu bytes of O outside its rows were written", g_case, touched);
}

START_TEST(test_flash_attention_ex) {
    const tp_dtype idt = IN_T[_i];
    static const ex_shape shapes[] = {
        {1, 1, 1},    {197, 197, 1}, {577, 577, 1}, {1, 1, 0},    {1, 63, 0},     {1, 63, 1},   {1, 1000, 0},
        {1, 1000, 1}, {1, 8192, 0},  {1, 8192, 1},  {7, 1, 0},    {7, 1, 1},      {7, 63, 0},   {7, 63, 1},
        {7, 1000, 0}, {7, 1000, 1},  {7, 8192, 0},  {7, 8192, 1}, {300, 1000, 1}, {100, 37, 1},
    };
    static const int Ds[] = {64, 128}, Bs[] = {1, 3}, HH[][2] = {{8, 2}, {4, 4}};
    uint64_t seed = 20000 + 1000 * (uint64_t)_i;
    int runs = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++)
            for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
                for (size_t hi = 0; hi < sizeof HH / sizeof HH[0]; hi++) {
                    const ex_shape sh = shapes[si];
                    const int D = Ds[di], B = Bs[bi], H = HH[hi][0], Hkv = HH[hi][1];
                    const long long q_rs = (long long)H * D + 16, k_rs = (long long)Hkv * D + 8,
                                    v_rs = (long long)Hkv * D + 24;
                    const long long q_bs = sh.Tq * q_rs + 64, k_bs = sh.Tkv * k_rs + 64, v_bs = sh.Tkv * v_rs + 64;
                    SET_CASE("flash_ex %s B=%d H=%d Hkv=%d Tq=%d Tkv=%d D=%d %s", dname(idt), B, H, Hkv, sh.Tq, sh.Tkv,
                             D, sh.causal ? "causal" : "full");
                    float *q = host_strided_normal(idt, B, sh.Tq, (long long)H * D, q_rs, q_bs, seed++, 2.0);
                    float *k = host_strided_normal(idt, B, sh.Tkv, (long long)Hkv * D, k_rs, k_bs, seed++, 2.0);
                    float *v = host_strided_normal(idt, B, sh.Tkv, (long long)Hkv * D, v_rs, v_bs, seed++, 2.0);
                    const size_t n_dense = (size_t)B * sh.Tq * H * D;
                    float *ref = hmalloc(n_dense * sizeof(float));
                    const tp_cpu_attn_args ca = {q, k, v, ref, q_bs, q_rs, k_bs, k_rs, v_bs, v_rs,
                                                 (int64_t)sh.Tq * H * D, (int64_t)H * D, B, H, Hkv, sh.Tq, sh.Tkv, D,
                                                 sh.causal, 1.0f / sqrtf((float)D)};
                    tp_cpu_attention_ex(&ca);
                    const float vmax = host_strided_amax(v, B, sh.Tkv, (long long)Hkv * D, v_rs, v_bs),
                                refmax = host_amax(ref, n_dense);
                    if (sh.causal && sh.Tq > sh.Tkv) { /* rows that see no key: the reference itself must be 0 */
                        const size_t zrows = (size_t)(sh.Tq - sh.Tkv) * H * D;
                        ck_assert_msg(host_amax(ref, zrows) == 0.0f, "[%s] reference rows without keys not 0", g_case);
                    }
                    void *dq = dev_upload(idt, q, (size_t)B * q_bs, (size_t)B * q_bs);
                    void *dk = dev_upload(idt, k, (size_t)B * k_bs, (size_t)B * k_bs);
                    void *dv = dev_upload(idt, v, (size_t)B * v_bs, (size_t)B * v_bs);
                    /* outputs: f16 always; bf16 and e4m3 at D = 64, B = 3, GQA only (the epilogue is shared) */
                    const int all_out = D == 64 && B == 3 && Hkv == 2;
                    for (size_t oi = 0; oi < sizeof OUT_T / sizeof OUT_T[0]; oi++) {
                        const tp_dtype odt = OUT_T[oi];
                        if (odt != TP_F16 && !all_out) continue;
                        const long long o_rs = (long long)H * D + (odt == TP_E4M3 ? 16 : 8), o_bs = sh.Tq * o_rs + 64;
                        const float oscale = odt == TP_E4M3 ? (refmax > 0 ? refmax : 1.0f) / 448.0f : 1.0f;
                        tpk_attn_args a;
                        memset(&a, 0, sizeof a);
                        a.q = dq, a.k = dk, a.v = dv, a.o = dev_alloc(odt, (size_t)B * o_bs);
                        a.q_batch_stride = q_bs, a.q_row_stride = q_rs, a.k_batch_stride = k_bs, a.k_row_stride = k_rs;
                        a.v_batch_stride = v_bs, a.v_row_stride = v_rs, a.o_batch_stride = o_bs, a.o_row_stride = o_rs;
                        a.B = B, a.H = H, a.Hkv = Hkv, a.Tq = sh.Tq, a.Tkv = sh.Tkv, a.D = D, a.causal = sh.causal;
                        a.scale = 1.0f / sqrtf((float)D), a.in_dt = idt, a.out_dt = odt;
                        a.out_scale = odt == TP_E4M3 ? dev_scalar(oscale) : NULL;
                        /* 1: no workspace -> one key range; 2: the automatic plan; 3: 3 forced key ranges */
                        for (int mode = 1; mode <= 3; mode++) {
                            a.num_splits = mode == 3 ? 3 : 0;
                            int splits = 0;
                            size_t ws = 0;
                            LAUNCH_OK(tpk_flash_attention_ex_plan(&a, &splits, &ws));
                            a.workspace = mode == 1 || ws == 0 ? NULL : dev_bytes(ws);
                            a.workspace_bytes = a.workspace ? ws : 0;
                            SET_CASE("flash_ex %s->%s B=%d H=%d Hkv=%d Tq=%d Tkv=%d D=%d %s splits=%d", dname(idt),
                                     dname(odt), B, H, Hkv, sh.Tq, sh.Tkv, D, sh.causal ? "causal" : "full",
                                     a.workspace ? splits : 1);
                            ex_run_check(&a, ref, vmax, refmax, oscale);
                            runs++;
                        }
                    }
                    release_all();
                }
    printf("  info  flash_ex %s: %d runs checked\n", dname(idt), runs);
}
END_TEST

/* ================================================================================================================
 * tpk_flash_attention_ex on the packed ViT layout (q = qkv, k = qkv + H D, v = qkv + 2 H D, row stride 3 H D; out
 * (B, T, H, D)), non-causal, against the fp64 reference and against tpk_flash_attention (both use the same tile
 * code in the same key order, so equal bits are expected and reported; the reference decides pass or fail). Also
 * a scale of 0 (uniform weights) and a negative scale, causal.
 * ============================================================================================================== */

START_TEST(test_flash_attention_ex_packed) {
    const tp_dtype idt = IN_T[_i];
    static const int cases[][4] = {{2, 197, 12, 64}, {1, 577, 3, 128}, {3, 7, 2, 80}, {1, 257, 1, 32}}; /* B T H D */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
        const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
        float *qkv = host_normal(n_in, 31000 + c, 0.0, 2.0);
        round_to(idt, qkv, n_in);
        void *d_qkv = dev_upload(idt, qkv, n_in, n_in);
        const size_t hd = (size_t)H * D * esize(idt);
        const float scales[] = {1.0f / sqrtf((float)D), 0.0f, -1.0f / sqrtf((float)D)};
        for (size_t si = 0; si < 3; si++)
            for (int causal = 0; causal <= 1; causal++) {
                if (si == 0 && causal) continue;
                SET_CASE("flash_ex packed %s B=%d T=%d H=%d D=%d scale=%g %s", dname(idt), B, T, H, D,
                         (double)scales[si], causal ? "causal" : "full");
                float *ref = hmalloc(n_out * sizeof(float));
                const tp_cpu_attn_args ca = {qkv, qkv + (size_t)H * D, qkv + 2 * (size_t)H * D, ref,
                                             (int64_t)T * 3 * H * D, 3 * H * D, (int64_t)T * 3 * H * D, 3 * H * D,
                                             (int64_t)T * 3 * H * D, 3 * H * D, (int64_t)T * H * D, H * D, B, H, H, T,
                                             T, D, causal, scales[si]};
                tp_cpu_attention_ex(&ca);
                if (si == 0) { /* the packed reference equals tp_cpu_attention's */
                    float *ref0 = hmalloc(n_out * sizeof(float));
                    tp_cpu_attention(qkv, ref0, B, T, H, D, scales[si]);
                    ck_assert_msg(memcmp(ref, ref0, n_out * sizeof(float)) == 0, "[%s] references differ", g_case);
                }
                tpk_attn_args a;
                memset(&a, 0, sizeof a);
                a.q = d_qkv, a.k = (const char *)d_qkv + hd, a.v = (const char *)d_qkv + 2 * hd;
                a.o = dev_alloc(TP_F16, n_out);
                a.q_batch_stride = a.k_batch_stride = a.v_batch_stride = (long long)T * 3 * H * D;
                a.q_row_stride = a.k_row_stride = a.v_row_stride = 3LL * H * D;
                a.o_batch_stride = (long long)T * H * D, a.o_row_stride = (long long)H * D;
                a.B = B, a.H = a.Hkv = H, a.Tq = a.Tkv = T, a.D = D, a.causal = causal, a.scale = scales[si];
                a.in_dt = idt, a.out_dt = TP_F16;
                ex_run_check(&a, ref, host_vmax(qkv, B, T, H, D), host_amax(ref, n_out), 1.0f);
                if (si == 0) {
                    void *d_legacy = dev_alloc(TP_F16, n_out);
                    KERNEL_OK(
                        tpk_flash_attention(d_qkv, idt, d_legacy, TP_F16, NULL, B, T, H, D, scales[si], g_stream));
                    const unsigned char *x = download_bytes(a.o, n_out * 2), *y = download_bytes(d_legacy, n_out * 2);
                    size_t diff = 0;
                    for (size_t i = 0; i < n_out * 2; i++)
                        diff += x[i] != y[i];
                    printf("  info  %s: vs tpk_flash_attention: %zu of %zu bytes differ\n", g_case, diff, n_out * 2);
                }
            }
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * tpk_flash_attention_ex: rejected arguments (cudaErrorInvalidValue, nothing launched), empty work, the plan query,
 * and capture into a CUDA graph with split-KV (the main kernel and the combine kernel), replaying bit for bit.
 * ============================================================================================================== */

static tpk_attn_args ex_dense(void *q, void *k, void *v, void *o, int B, int H, int Hkv, int Tq, int Tkv, int D) {
    tpk_attn_args a;
    memset(&a, 0, sizeof a);
    a.q = q, a.k = k, a.v = v, a.o = o;
    a.q_row_stride = (long long)H * D, a.q_batch_stride = (long long)Tq * H * D;
    a.k_row_stride = a.v_row_stride = (long long)Hkv * D,
    a.k_batch_stride = a.v_batch_stride = (long long)Tkv * Hkv * D;
    a.o_row_stride = (long long)H * D, a.o_batch_stride = (long long)Tq * H * D;
    a.B = B, a.H = H, a.Hkv = Hkv, a.Tq = Tq, a.Tkv = Tkv, a.D = D, a.causal = 1, a.scale = 0.125f;
    a.in_dt = TP_F16, a.out_dt = TP_F16;
    return a;
}

START_TEST(test_flash_attention_ex_rejects) {
    SET_CASE("flash_ex rejects");
    char *buf = dev_alloc(TP_F16, 1 << 20);
    char *q = buf, *k = buf + (1 << 18), *v = buf + (1 << 19), *o = buf + (3 << 18);
    tpk_attn_args good = ex_dense(q, k, v, o, 1, 4, 2, 4, 16, 64), a;
#define EX_BAD(what, stmt) (a = good, stmt, (rejected_call){what, tpk_flash_attention_ex(&a, g_stream)})
    const rejected_call r[] = {
        {"NULL args", tpk_flash_attention_ex(NULL, g_stream)},
        EX_BAD("H % Hkv != 0", a.Hkv = 3),
        EX_BAD("Hkv = 0", a.Hkv = 0),
        EX_BAD("D = 48", a.D = 48),
        EX_BAD("D = 256", a.D = 256),
        EX_BAD("f32 input", a.in_dt = TP_F32),
        EX_BAD("f32 output", a.out_dt = TP_F32),
        EX_BAD("e4m3 output without scale", a.out_dt = TP_E4M3),
        EX_BAD("q not 16-byte aligned", a.q = q + 2),
        EX_BAD("o not 16-byte aligned", a.o = o + 4),
        EX_BAD("k row stride not a multiple of 8", a.k_row_stride = 2 * 64 + 4),
        EX_BAD("o batch stride not a multiple of 8", a.o_batch_stride = 4 * 4 * 64 + 2),
        EX_BAD("e4m3 o row stride not a multiple of 16",
               (a.out_dt = TP_E4M3, a.out_scale = (float *)buf, a.o_row_stride = 4 * 64 + 8)),
        EX_BAD("negative row stride", a.v_row_stride = -128),
        EX_BAD("negative Tkv", a.Tkv = -1),
        EX_BAD("negative num_splits", a.num_splits = -2),
        EX_BAD("NULL k with keys", a.k = NULL),
        EX_BAD("NULL o", a.o = NULL),
        EX_BAD("infinite scale", a.scale = INFINITY),
        EX_BAD("workspace not 16-byte aligned", (a.workspace = buf + 8, a.workspace_bytes = 1024)),
    };
#undef EX_BAD
    check_rejected(r, sizeof r / sizeof r[0]);
    /* empty work: success without a launch, even with NULL pointers */
    a = ex_dense(NULL, NULL, NULL, NULL, 0, 4, 2, 4, 16, 64);
    ck_assert_int_eq(tpk_flash_attention_ex(&a, g_stream), 0);
    a.B = 2, a.Tq = 0;
    ck_assert_int_eq(tpk_flash_attention_ex(&a, g_stream), 0);
    /* the plan: no split without keys to split; 3 forced ranges of a 1000-key decode; never more than the tiles */
    int splits = -1;
    size_t ws = 1;
    a = ex_dense(q, k, v, o, 1, 4, 2, 1, 1000, 64);
    a.num_splits = 3;
    LAUNCH_OK(tpk_flash_attention_ex_plan(&a, &splits, &ws));
    ck_assert_msg(splits == 3 && ws == (size_t)3 * 4 * (64 + 2) * 4, "plan: %d splits, %zu bytes", splits, ws);
    a.num_splits = 100;
    LAUNCH_OK(tpk_flash_attention_ex_plan(&a, &splits, &ws));
    ck_assert_msg(splits == 16, "plan: %d splits for 16 key tiles", splits);
    a.num_splits = 0, a.Tkv = 40;
    LAUNCH_OK(tpk_flash_attention_ex_plan(&a, &splits, &ws));
    ck_assert_msg(splits == 1 && ws == 0, "plan: %d splits, %zu bytes for one key tile", splits, ws);
    printf("  ok    plan queries\n");
}
END_TEST

START_TEST(test_flash_attention_ex_graph) {
    const int B = 1, H = 8, Hkv = 2, Tq = 1, Tkv = 3000, D = 128;
    SET_CASE("flash_ex graph capture f16 B=%d H=%d Hkv=%d Tq=%d Tkv=%d D=%d split-KV", B, H, Hkv, Tq, Tkv, D);
    const size_t nq = (size_t)B * Tq * H * D, nk = (size_t)B * Tkv * Hkv * D;
    void *q = dev_upload(TP_F16, host_normal(nq, 41000, 0.0, 2.0), nq, nq);
    void *k = dev_upload(TP_F16, host_normal(nk, 41001, 0.0, 2.0), nk, nk);
    void *v = dev_upload(TP_F16, host_normal(nk, 41002, 0.0, 2.0), nk, nk);
    void *oa = dev_alloc(TP_F16, nq), *ob = dev_alloc(TP_F16, nq);
    tpk_attn_args a = ex_dense(q, k, v, oa, B, H, Hkv, Tq, Tkv, D);
    a.num_splits = 5;
    int splits = 0;
    size_t ws = 0;
    LAUNCH_OK(tpk_flash_attention_ex_plan(&a, &splits, &ws));
    ck_assert_msg(splits == 5 && ws > 0, "plan: %d splits, %zu bytes", splits, ws);
    a.workspace = dev_bytes(ws), a.workspace_bytes = ws;
    cudaStream_t cs;
    CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    const int r = tpk_flash_attention_ex(&a, cs);
    const cudaError_t ec = cudaStreamEndCapture(cs, &graph);
    ck_assert_msg(r == 0, "[%s] launch inside capture returned %d (%s)", g_case, r, cudaGetErrorName((cudaError_t)r));
    CUDA_OK(ec);
    size_t nodes = 0;
    CUDA_OK(cudaGraphGetNodes(graph, NULL, &nodes));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, cs));
    CUDA_OK(cudaStreamSynchronize(cs));
    a.o = ob;
    LAUNCH_OK(tpk_flash_attention_ex(&a, cs));
    CUDA_OK(cudaStreamSynchronize(cs));
    const unsigned char *x = download_bytes(oa, nq * 2), *y = download_bytes(ob, nq * 2);
    size_t diff = 0;
    for (size_t i = 0; i < nq * 2; i++)
        diff += x[i] != y[i];
    printf("  %s  %s: %zu graph nodes; replay vs eager, %zu of %zu bytes differ\n", diff ? "FAIL" : "ok  ", g_case,
           nodes, diff, nq * 2);
    fflush(stdout);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(cs);
    ck_assert_msg(nodes == 2, "[%s] %zu graph nodes, want 2 (attention + combine)", g_case, nodes);
    ck_assert_msg(diff == 0, "[%s] graph replay differs from the eager launch in %zu bytes", g_case, diff);
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------------------------- */

/* new_tcase (gpu_check.h): 600 s a test, for fp64 CPU references of up to ~3 GFLOP per shape */
Suite *gpu_attention_suite(void) {
    Suite *s = suite_create("gpu_attention");
    /* one case per input type where a case outgrows a 10-minute device call under compute-sanitizer racecheck
     * (CK_RUN_CASE=flash_attention_bf16 runs that half alone) */
    tcase_add_loop_test(new_tcase(s, "flash_attention"), test_flash_attention, 0, 1);
    tcase_add_loop_test(new_tcase(s, "flash_attention_bf16"), test_flash_attention, 1, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "flash_attention_padding"), test_flash_attention_padding, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "flash_attention_scales"), test_flash_attention_scales, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "flash_attention_persistent"), test_flash_attention_persistent, 0, N_OF(IN_T));
    tcase_add_test(new_tcase(s, "flash_attention_rejects"), test_flash_attention_rejects);
    tcase_add_test(new_tcase(s, "flash_attention_graph"), test_flash_attention_graph);
    tcase_add_loop_test(new_tcase(s, "flash_attention_ex"), test_flash_attention_ex, 0, 1);
    tcase_add_loop_test(new_tcase(s, "flash_attention_ex_bf16"), test_flash_attention_ex, 1, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "flash_attention_ex_packed"), test_flash_attention_ex_packed, 0, N_OF(IN_T));
    tcase_add_test(new_tcase(s, "flash_attention_ex_rejects"), test_flash_attention_ex_rejects);
    tcase_add_test(new_tcase(s, "flash_attention_ex_graph"), test_flash_attention_ex_graph);
    return s;
}
