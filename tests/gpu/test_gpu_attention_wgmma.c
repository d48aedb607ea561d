/* test_gpu_attention_wgmma.c: the Hopper attention kernel (tpk_flash_attention_wgmma, src/exec/cuda/attention/attention_wgmma.h)
 * against the fp64 CPU reference tp_cpu_attention, on the GPU.
 *
 * Method and tolerances as test_gpu_attention.c (same numerics contract; its header derives the bounds): qkv ~
 * N(0, 2^2) rounded to the input type before the reference runs, outputs poisoned with 0xFF (NaN in every output
 * type), every variant of the kernel (tpk_flash_attention_wgmma_variant 0..8).
 * Shapes (D = 64, the kernel's only head dim): T in {1, 7, 16, 64, 65, 197, 256, 257, 577}: one key and one
 * 16-key chunk, a partial chunk, exactly one 16-key chunk, exactly one 64-key chunk, 64 + 1 (a 16-key tail), ViT's
 * 197 = 3 x 64 + 5 (a 16-key tail with 11 masked keys), 256 (no tail), 257, 577 (9 chunks + 1: the largest T whose
 * head fits shared memory, many online rescalings and query-tile groups); B in {1, 3}, H in {1, 12}; F16 and BF16
 * in; F16, BF16, E4M3 out. Then: NaN rows after the last token and poison after the last output row (neither may
 * be touched), other scales (negative, zero, 1), graph capture replaying bit for bit, rejected arguments.
 * On a device that is not compute capability 9.0 the kernel must refuse every call (tested) and nothing else runs.
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
#include "exec/cuda/attention/attention_wgmma.h"
#include "formats/dtype.h"
#include "lab_variants.h" /* bench/: the lab-only kernel variants */

#define TP_GPU_MAX_TRACKED 1024
#include "gpu_check.h"
#include "attn_check.h"

Suite *gpu_attention_wgmma_suite(void);

static void setup(void) { gpu_setup(); }

static void teardown(void) {
    release_all();
    close_stream();
}

static const tp_dtype IN_T[] = {TP_F16, TP_BF16};
static const tp_dtype OUT_T[] = {TP_F16, TP_BF16, TP_E4M3};
#define N_WG_VARIANTS 9 /* tpk_flash_attention_wgmma_variant 0..8 */

/* 1 on a compute capability 9.0 device; otherwise checks that the kernel refuses, prints why, and returns 0 */
static int hopper_or_refused(void) {
    if (tpk_flash_attention_wgmma_supported(TP_F16, TP_F16, 197, 64)) return 1;
    char *buf = dev_alloc(TP_F16, 1 << 16);
    const int r = tpk_flash_attention_wgmma(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream);
    printf("  ok    wgmma attention: not a compute capability 9.0 device: refused (%d), nothing else tested\n", r);
    fflush(stdout);
    ck_assert_int_eq(r, (int)cudaErrorInvalidValue);
    return 0;
}

START_TEST(test_wgmma_attention) {
    if (!hopper_or_refused()) return;
    const tp_dtype idt = IN_T[_i];
    static const int Ts[] = {1, 7, 16, 64, 65, 197, 256, 257, 577}, Bs[] = {1, 3}, Hs[] = {1, 12};
    const int D = 64;
    uint64_t seed = 14100 + 1000 * (uint64_t)_i;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
            for (size_t hi = 0; hi < sizeof Hs / sizeof Hs[0]; hi++) {
                const int T = Ts[ti], B = Bs[bi], H = Hs[hi];
                const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
                const float scale = 1.0f / sqrtf((float)D);
                SET_CASE("wgmma %s B=%d T=%d H=%d", dname(idt), B, T, H);
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
                    for (int v = 0; v < N_WG_VARIANTS; v++) {
                        SET_CASE("wgmma %s->%s v%d B=%d T=%d H=%d", dname(idt), dname(odt), v, B, T, H);
                        void *d_out = dev_alloc(odt, n_out);
                        if (((v == 1 || v == 2) && T > 512) || ((v == 5 || v == 6) && T > 300)) { /* exceeds shared memory */
                            const int r = tpk_flash_attention_wgmma_variant(d_qkv, idt, d_out, odt, d_oscale, B, T, H,
                                                                            D, scale, v, g_stream);
                            printf("  %s  %s: one CTA per head does not fit shared memory: refused (%d)\n",
                                   r == (int)cudaErrorInvalidValue ? "ok  " : "FAIL", g_case, r);
                            ck_assert_int_eq(r, (int)cudaErrorInvalidValue);
                            continue;
                        }
                        KERNEL_OK(tpk_flash_attention_wgmma_variant(d_qkv, idt, d_out, odt, d_oscale, B, T, H, D,
                                                                    scale, v, g_stream));
                        check_close("out", download_f32(odt, d_out, n_out, oscale), ref, n_out, (size_t)H * D, tol);
                    }
                }
                release_all();
            }
}
END_TEST

/* NaN token rows after the input and poison rows after the output: never read, never written. */
START_TEST(test_wgmma_attention_padding) {
    if (!hopper_or_refused()) return;
    const tp_dtype idt = IN_T[_i];
    static const int cases[][3] = {{1, 1, 3}, {1, 7, 2}, {2, 64, 3}, {1, 197, 2}, {2, 200, 1}}; /* B, T, H */
    const int D = 64, PAD = 70;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2];
        const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
        const size_t pad_in = (size_t)PAD * 3 * H * D, pad_out = (size_t)PAD * H * D;
        const float scale = 0.125f;
        SET_CASE("wgmma padding %s B=%d T=%d H=%d", dname(idt), B, T, H);
        float *qkv = host_normal(n_in, 17000 + c, 0.0, 2.0);
        round_to(idt, qkv, n_in);
        float *ref = hmalloc(n_out * sizeof(float));
        tp_cpu_attention(qkv, ref, B, T, H, D, scale);
        const float vmax = host_vmax(qkv, B, T, H, D), refmax = host_amax(ref, n_out);
        void *d_qkv = dev_upload(idt, qkv, n_in, n_in + pad_in); /* the pad stays 0xFF: NaN */
        for (size_t oi = 0; oi < sizeof OUT_T / sizeof OUT_T[0]; oi++) {
            const tp_dtype odt = OUT_T[oi];
            const float oscale = odt == TP_E4M3 ? refmax / 448.0f : 1.0f;
            float *d_oscale = odt == TP_E4M3 ? dev_scalar(oscale) : NULL;
            for (int v = 0; v < N_WG_VARIANTS; v++) {
                SET_CASE("wgmma padding %s->%s v%d B=%d T=%d H=%d", dname(idt), dname(odt), v, B, T, H);
                void *d_out = dev_alloc(odt, n_out + pad_out);
                KERNEL_OK(tpk_flash_attention_wgmma_variant(d_qkv, idt, d_out, odt, d_oscale, B, T, H, D, scale, v,
                                                            g_stream));
                check_close("out rows < T", download_f32(odt, d_out, n_out, oscale), ref, n_out, (size_t)H * D,
                            fa_tol(idt, odt, n_out, T, vmax, refmax, oscale));
                check_untouched("rows >= T", d_out, n_out * esize(odt), (n_out + pad_out) * esize(odt));
            }
        }
        release_all();
    }
}
END_TEST

/* Negative (the sign is applied before the row max), zero (uniform weights: the mean of V) and 1 (near one-hot). */
START_TEST(test_wgmma_attention_scales) {
    if (!hopper_or_refused()) return;
    const tp_dtype idt = IN_T[_i];
    const int B = 2, T = 197, H = 3, D = 64;
    const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
    const float scales[] = {-0.125f, 0.0f, 1.0f};
    float *qkv = host_normal(n_in, 19000, 0.0, 2.0);
    round_to(idt, qkv, n_in);
    void *d_qkv = dev_upload(idt, qkv, n_in, n_in);
    const float vmax = host_vmax(qkv, B, T, H, D);
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
        float *ref = hmalloc(n_out * sizeof(float));
        tp_cpu_attention(qkv, ref, B, T, H, D, scales[si]);
        const float refmax = host_amax(ref, n_out);
        for (int v = 0; v < N_WG_VARIANTS; v++) {
            SET_CASE("wgmma scale %g %s->f16 v%d B=%d T=%d H=%d", scales[si], dname(idt), v, B, T, H);
            void *d_out = dev_alloc(TP_F16, n_out);
            KERNEL_OK(tpk_flash_attention_wgmma_variant(d_qkv, idt, d_out, TP_F16, NULL, B, T, H, D, scales[si], v,
                                                        g_stream));
            check_close("out", download_f32(TP_F16, d_out, n_out, 1.0f), ref, n_out, (size_t)H * D,
                        fa_tol(idt, TP_F16, n_out, T, vmax, refmax, 1.0f));
        }
    }
}
END_TEST

typedef struct {
    const void *qkv;
    const float *sc;
    int B, T, H, D;
} wg_launch_ctx;

static int wg_launch(const void *ctx, void *out, cudaStream_t st) {
    const wg_launch_ctx *c = ctx;
    return tpk_flash_attention_wgmma(c->qkv, TP_F16, out, TP_E4M3, c->sc, c->B, c->T, c->H, c->D, 0.125f, st);
}

/* Capture into a CUDA graph (global mode: a synchronizing or allocating call fails it); replay == eager. */
START_TEST(test_wgmma_attention_graph) {
    if (!hopper_or_refused()) return;
    const int B = 3, T = 197, H = 12, D = 64;
    const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
    SET_CASE("wgmma graph capture f16->e4m3 B=%d T=%d H=%d", B, T, H);
    float *qkv = host_normal(n_in, 18000, 0.0, 2.0);
    const wg_launch_ctx ctx = {dev_upload(TP_F16, qkv, n_in, n_in), dev_scalar(1.0f / 32.0f), B, T, H, D};
    check_graph_replay(wg_launch, &ctx, dev_alloc(TP_E4M3, n_out), dev_alloc(TP_E4M3, n_out), n_out);
}
END_TEST

START_TEST(test_wgmma_attention_rejects) {
    if (!hopper_or_refused()) return;
    SET_CASE("wgmma rejects");
    char *buf = dev_alloc(TP_F16, 1 << 16);
    const rejected_call r[] = {
        {"D = 32", tpk_flash_attention_wgmma(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 32, 0.1f, g_stream)},
        {"D = 128", tpk_flash_attention_wgmma(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 128, 0.1f, g_stream)},
        {"T = 2048 (shared memory)",
         tpk_flash_attention_wgmma(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 2048, 1, 64, 0.1f, g_stream)},
        {"f32 input", tpk_flash_attention_wgmma(buf, TP_F32, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"f32 output", tpk_flash_attention_wgmma(buf, TP_F16, buf + 8192, TP_F32, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"e4m3 output without scale",
         tpk_flash_attention_wgmma(buf, TP_F16, buf + 8192, TP_E4M3, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"qkv not 16-byte aligned",
         tpk_flash_attention_wgmma(buf + 2, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"NULL out", tpk_flash_attention_wgmma(buf, TP_F16, NULL, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"variant 9",
         tpk_flash_attention_wgmma_variant(buf, TP_F16, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, 9, g_stream)},
    };
    check_rejected(r, sizeof r / sizeof r[0]);
    ck_assert_int_eq(tpk_flash_attention_wgmma(NULL, TP_F16, NULL, TP_F16, NULL, 0, 4, 1, 64, 0.1f, g_stream), 0);
    ck_assert_int_eq(tpk_flash_attention_wgmma_supported(TP_F16, TP_F16, 2048, 64), 0);
    ck_assert_int_eq(tpk_flash_attention_wgmma_supported(TP_F16, TP_F16, 577, 64), 1);
}
END_TEST

Suite *gpu_attention_wgmma_suite(void) {
    Suite *s = suite_create("gpu_attention_wgmma");
    tcase_add_loop_test(new_tcase(s, "wgmma_attention"), test_wgmma_attention, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "wgmma_attention_padding"), test_wgmma_attention_padding, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "wgmma_attention_scales"), test_wgmma_attention_scales, 0, N_OF(IN_T));
    tcase_add_test(new_tcase(s, "wgmma_attention_graph"), test_wgmma_attention_graph);
    tcase_add_test(new_tcase(s, "wgmma_attention_rejects"), test_wgmma_attention_rejects);
    return s;
}
