/* test_gpu_pipeline_ops.c: the pipeline kernels (src/exec/cuda/kernels/pipeline_ops.h) against their CPU references
 * (cpu_ops.h, "pipelines"), at awkward shapes and in F32, F16 and BF16: SiLU, the Euler step (bit-exact in fp32),
 * the time embedding beside each row, concatenation and slices along tokens (bit-exact copies), and the masked
 * attention of pi0's prefix (one padded source, GQA 8 over 1, head dim 256) and expert (the prefix's K/V then its
 * own 51 tokens, the state token's first block), padding per sample. Inputs rounded to the storage type before the
 * reference runs; outputs poisoned (0xFF: NaN) so an unwritten element fails. */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/kernels/pipeline_ops.h"
#include "formats/dtype.h"

#define TP_GPU_MAX_TRACKED 1024
#define TP_GPU_POISON_ON_STREAM
#include "gpu_check.h"
#include "close_check.h"

Suite *gpu_pipeline_ops_suite(void);

static void setup(void) { gpu_setup(); }

static void teardown(void) {
    release_all();
    close_stream();
}

static void round_to(tp_dtype dt, float *x, size_t n) {
    void *tmp = hmalloc(n * esize(dt));
    tp_convert_from_f32(dt, x, tmp, n, 1.0f);
    tp_convert_to_f32(dt, tmp, x, n, 1.0f);
}

static float *rounded_normal(tp_dtype dt, size_t n, uint64_t seed, double std) {
    float *x = host_normal(n, seed, 0.0, std);
    round_to(dt, x, n);
    return x;
}

static tol_t tol_for(tp_dtype out) {
    tol_t t = {1e-5, 1e-4};
    if (out == TP_F16) t.rel_l2 = 2e-3, t.abs_frac = 4e-3;
    if (out == TP_BF16) t.rel_l2 = 1e-2, t.abs_frac = 2e-2;
    return t;
}

static const tp_dtype ACT[3] = {TP_F32, TP_F16, TP_BF16};

START_TEST(test_silu_euler_time) {
    const tp_dtype dt = ACT[_i];
    static const size_t ns[] = {1, 37, 50 * 1024 + 3};
    for (size_t c = 0; c < 3; c++) {
        const size_t n = ns[c];
        SET_CASE("silu %s n=%zu", dname(dt), n);
        float *x = rounded_normal(dt, n, 10 + c, 3.0), *ref = hmalloc(n * sizeof(float));
        tp_cpu_silu(x, ref, (int64_t)n);
        void *dx = dev_upload(dt, x, n, n), *dy = dev_alloc(dt, n);
        KERNEL_OK(tpk_silu(dx, dt, dy, dt, n, g_stream));
        check_close("silu", download_f32(dt, dy, n, 1.0f), ref, n, n, tol_for(dt));
        /* Euler: fp32 state, v in dt: the two fp32 roundings the reference makes, bit for bit */
        SET_CASE("euler v %s n=%zu", dname(dt), n);
        float *s = host_normal(n, 20 + c, 0.0, 1.0), *e = hmalloc(n * sizeof(float));
        tp_cpu_euler(s, x, e, (int64_t)n, -0.1f);
        float *ds = dev_floats(s, n), *de = (float *)dev_alloc(TP_F32, n);
        KERNEL_OK(tpk_euler(ds, dx, dt, de, -0.1f, n, g_stream));
        float *got = download_f32(TP_F32, de, n, 1.0f);
        ck_assert_int_eq(memcmp(got, e, n * sizeof(float)), 0);
        release_all();
    }
    /* the time embedding beside rows of 3 x 5 (C 7, D 12): the embedding computed on the host as the CPU does */
    enum { B = 3, T = 5, C = 7, D = 12 };
    SET_CASE("time concat %s", dname(dt));
    float *x = rounded_normal(dt, B * T * C, 30, 1.0), ref[B * T * (C + D)], emb[B * T * (C + D)];
    tp_cpu_time_concat(x, ref, B, T, C, D, 0.7f);
    round_to(dt, ref, B * T * (C + D));
    float z[C] = {0};
    tp_cpu_time_concat(z, emb, 1, 1, C, D, 0.7f); /* one row: its last D values are the embedding */
    void *dx = dev_upload(dt, x, B * T * C, B * T * C), *dy = dev_alloc(dt, B * T * (C + D));
    float *demb = dev_floats(emb + C, D);
    KERNEL_OK(tpk_time_concat(dx, dt, demb, dy, B * T, C, D, g_stream));
    float *got = download_f32(dt, dy, B * T * (C + D), 1.0f);
    ck_assert_int_eq(memcmp(got, ref, sizeof ref), 0);
}
END_TEST

START_TEST(test_concat_slice) {
    const tp_dtype dt = ACT[_i];
    enum { B = 3, Ta = 5, Tb = 2, C = 37 };
    SET_CASE("concat/slice %s", dname(dt));
    float *a = rounded_normal(dt, B * Ta * C, 40, 1.0), *b = rounded_normal(dt, B * Tb * C, 41, 1.0);
    float ref[B * (Ta + Tb) * C], sl[B * 3 * C];
    tp_cpu_concat_tokens(a, b, ref, B, Ta, Tb, C);
    void *da = dev_upload(dt, a, B * Ta * C, B * Ta * C), *db = dev_upload(dt, b, B * Tb * C, B * Tb * C);
    void *dy = dev_alloc(dt, B * (Ta + Tb) * C), *ds = dev_alloc(dt, B * 3 * C);
    KERNEL_OK(tpk_concat_tokens(da, db, dy, dt, B, Ta, Tb, C, g_stream));
    ck_assert_int_eq(memcmp(download_f32(dt, dy, B * (Ta + Tb) * C, 1.0f), ref, sizeof ref), 0);
    tp_cpu_slice_tokens(ref, sl, B, Ta + Tb, 4, 3, C);
    KERNEL_OK(tpk_slice_tokens(dy, ds, dt, B, Ta + Tb, 4, 3, C, g_stream));
    ck_assert_int_eq(memcmp(download_f32(dt, ds, B * 3 * C, 1.0f), sl, sizeof sl), 0);
    ck_assert_int_eq(tpk_slice_tokens(dy, ds, dt, B, Ta + Tb, 5, 3, C, g_stream), (int)cudaErrorInvalidValue);
}
END_TEST

/* pi0's two attentions at small lengths with pi0's heads: the prefix (19 tokens, the second sample's last 4
 * padded) and the expert (7 own tokens over that prefix), GQA 8 over 1, head dim 256; and GQA 4 over 2, D 64 */
START_TEST(test_masked_attention) {
    const tp_dtype dt = ACT[_i % 3];
    const int wide = _i < 3, H = wide ? 8 : 4, Hkv = wide ? 1 : 2, D = wide ? 256 : 64, B = 2, P = 19, S = 7;
    const int W = Hkv * D, prefix = 12;
    const float valid[2] = {7, 3}, scale = 1.0f / sqrtf((float)D);
    float *dvalid = dev_floats(valid, 2);
    /* the prefix: queries and keys its own 19 tokens */
    SET_CASE("masked attention prefix %s H %d/%d D %d", dname(dt), H, Hkv, D);
    float *q = rounded_normal(dt, (size_t)B * P * H * D, 50, 1.0), *k = rounded_normal(dt, (size_t)B * P * W, 51, 1.0);
    float *v = rounded_normal(dt, (size_t)B * P * W, 52, 1.0), *ref = hmalloc((size_t)B * P * H * D * sizeof(float));
    tp_cpu_masked_attn a = {.q = q, .k = k, .v = v, .valid = valid, .o = ref, .B = B, .H = H, .Hkv = Hkv, .D = D,
                            .Tq = P, .Tk = P, .prefix = prefix, .scale = scale};
    tp_cpu_masked_attention(&a);
    void *dq = dev_upload(dt, q, (size_t)B * P * H * D, (size_t)B * P * H * D);
    void *dk = dev_upload(dt, k, (size_t)B * P * W, (size_t)B * P * W), *dv = dev_upload(dt, v, (size_t)B * P * W, (size_t)B * P * W);
    void *dout = dev_alloc(dt, (size_t)B * P * H * D);
    KERNEL_OK(tpk_masked_attention(dq, dk, dv, NULL, NULL, dvalid, dout, dt, B, H, Hkv, D, P, P, 0, prefix, 0, scale,
                                   g_stream));
    check_close("prefix", download_f32(dt, dout, (size_t)B * P * H * D, 1.0f), ref, (size_t)B * P * H * D, (size_t)H * D,
                tol_for(dt));
    /* the expert: 7 own tokens over the prefix's K/V, the first query's own first block */
    SET_CASE("masked attention expert %s H %d/%d D %d", dname(dt), H, Hkv, D);
    float *q2 = rounded_normal(dt, (size_t)B * S * H * D, 60, 1.0), *k2 = rounded_normal(dt, (size_t)B * S * W, 61, 1.0);
    float *v2 = rounded_normal(dt, (size_t)B * S * W, 62, 1.0), *ref2 = hmalloc((size_t)B * S * H * D * sizeof(float));
    tp_cpu_masked_attn e = {.q = q2, .k = k2, .v = v2, .kp = k, .vp = v, .valid = valid, .o = ref2, .B = B, .H = H,
                            .Hkv = Hkv, .D = D, .Tq = S, .Tk = S, .Tp = P, .prefix = prefix, .first_block = 1,
                            .scale = scale};
    tp_cpu_masked_attention(&e);
    void *dq2 = dev_upload(dt, q2, (size_t)B * S * H * D, (size_t)B * S * H * D);
    void *dk2 = dev_upload(dt, k2, (size_t)B * S * W, (size_t)B * S * W), *dv2 = dev_upload(dt, v2, (size_t)B * S * W, (size_t)B * S * W);
    void *dout2 = dev_alloc(dt, (size_t)B * S * H * D);
    KERNEL_OK(tpk_masked_attention(dq2, dk2, dv2, dk, dv, dvalid, dout2, dt, B, H, Hkv, D, S, S, P, prefix, 1, scale,
                                   g_stream));
    check_close("expert", download_f32(dt, dout2, (size_t)B * S * H * D, 1.0f), ref2, (size_t)B * S * H * D,
                (size_t)H * D, tol_for(dt));
    /* refused: a head dim above 256, kp without vp */
    ck_assert_int_eq(tpk_masked_attention(dq, dk, dv, NULL, NULL, dvalid, dout, dt, B, 1, 1, 320, P, P, 0, 0, 0, 1.0f,
                                          g_stream), (int)cudaErrorInvalidValue);
    ck_assert_int_eq(tpk_masked_attention(dq2, dk2, dv2, dk, NULL, dvalid, dout2, dt, B, H, Hkv, D, S, S, P, prefix, 1,
                                          scale, g_stream), (int)cudaErrorInvalidValue);
}
END_TEST

Suite *gpu_pipeline_ops_suite(void) {
    Suite *s = suite_create("gpu_pipeline_ops");
    TCase *t = tcase_create("pipeline_ops");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, test_silu_euler_time, 0, 3);
    tcase_add_loop_test(t, test_concat_slice, 0, 3);
    tcase_add_loop_test(t, test_masked_attention, 0, 6);
    suite_add_tcase(s, t);
    return s;
}
