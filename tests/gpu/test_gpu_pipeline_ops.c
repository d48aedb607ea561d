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

#include "core/stats.h"
#include "bench/drift.h"
#include "exec/cpu/cpu_exec.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/attention/attention.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "exec/cuda/kernels/decoder_ops.h"
#include "exec/cuda/kernels/pipeline_ops.h"
#include "formats/dtype.h"
#include "ir/graph.h"
#include "models/model.h"
#include "models/pi0.h"
#include "planner/plan.h"

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

#define round_to gpu_round_to /* gpu_check.h */

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

/* The masked attention on tensor cores (tpk_flash_attention_masked) against tp_cpu_masked_attention at awkward
 * shapes: pi0's expert (51 queries over 816 prefix keys and its own, head dim 256, GQA 8 over 1) and prefix (one
 * padded source, 257 tokens), a padded source of 197 and 64 keys (its 64-key tiles end inside it, or exactly), own
 * sources of 7 to 577, head dims 16 to 256, batch 1 to 3 with a sample whose count shows no key at all (its rows
 * must be zeros), a count beyond the source, split-KV off, forced and automatic, and an E4M3 output. */
typedef struct {
    int B, H, Hkv, D, Tq, Tp, prefix, first, splits;
    float valid[3];
    tp_dtype dt, odt;
} mflash_case;

static const mflash_case MFLASH[] = {
    {1, 8, 1, 256, 51, 816, 768, 1, 0, {48}, TP_F16, TP_F16},
    {3, 8, 1, 256, 51, 816, 768, 1, 0, {48, 45, 3}, TP_BF16, TP_BF16},
    {2, 8, 1, 256, 257, 0, 200, 0, 0, {57, 12}, TP_BF16, TP_BF16},
    {3, 4, 2, 64, 7, 197, 150, 1, 1, {5, 0, 100}, TP_F16, TP_F16},
    {2, 4, 1, 16, 19, 0, 12, 1, 3, {7, 3}, TP_F16, TP_F16},
    {1, 2, 2, 128, 577, 64, 10, 1, 0, {0}, TP_F16, TP_E4M3},
    {1, 8, 1, 256, 51, 816, 768, 1, 1, {48}, TP_BF16, TP_E4M3},
    {2, 4, 4, 32, 33, 0, 0, 0, 0, {0, 20}, TP_F16, TP_F16},
};

START_TEST(test_masked_flash) {
    const mflash_case *c = &MFLASH[_i];
    const int B = c->B, H = c->H, D = c->D, W = c->Hkv * c->D, Tq = c->Tq, Tp = c->Tp, two = Tp > 0;
    SET_CASE("masked flash %s->%s B %d H %d/%d D %d Tq %d Tp %d splits %d", dname(c->dt), dname(c->odt), B, H,
             c->Hkv, D, Tq, Tp, c->splits);
    const size_t nq = (size_t)B * Tq * H * D, nk = (size_t)B * Tq * W, np = (size_t)B * Tp * W;
    float *q = rounded_normal(c->dt, nq, 90 + _i, 1.0), *k = rounded_normal(c->dt, nk, 91 + _i, 1.0);
    float *v = rounded_normal(c->dt, nk, 92 + _i, 1.0), *ref = hmalloc(nq * sizeof(float));
    float *kp = two ? rounded_normal(c->dt, np, 93 + _i, 1.0) : NULL, *vp = two ? rounded_normal(c->dt, np, 94 + _i, 1.0) : NULL;
    tp_cpu_masked_attn a = {.q = q, .k = k, .v = v, .kp = kp, .vp = vp, .valid = c->valid, .o = ref, .B = B, .H = H,
                            .Hkv = c->Hkv, .D = D, .Tq = Tq, .Tk = Tq, .Tp = Tp, .prefix = c->prefix,
                            .first_block = c->first, .scale = 1.0f / sqrtf((float)D)};
    tp_cpu_masked_attention(&a);
    const float oscale = c->odt == TP_E4M3 ? host_amax(ref, nq) / 448.0f : 1.0f;
    tpk_masked_attn_args m = {.q = dev_upload(c->dt, q, nq, nq), .k = dev_upload(c->dt, k, nk, nk),
                              .v = dev_upload(c->dt, v, nk, nk), .kp = two ? dev_upload(c->dt, kp, np, np) : NULL,
                              .vp = two ? dev_upload(c->dt, vp, np, np) : NULL, .valid = dev_floats(c->valid, B),
                              .o = dev_alloc(c->odt, nq), .B = B, .H = H, .Hkv = c->Hkv, .D = D, .Tq = Tq, .Tk = Tq,
                              .Tp = Tp, .prefix = c->prefix, .first_block = c->first, .scale = a.scale,
                              .in_dt = c->dt, .out_dt = c->odt,
                              .out_scale = c->odt == TP_E4M3 ? dev_scalar(oscale) : NULL, .num_splits = c->splits};
    int splits = 0;
    size_t ws = 0;
    ck_assert_int_eq(tpk_flash_attention_masked_plan(&m, &splits, &ws), 0);
    m.workspace = ws ? dev_bytes(ws) : NULL, m.workspace_bytes = ws;
    KERNEL_OK(tpk_flash_attention_masked(&m, g_stream));
    printf("  %s: %d key range%s\n", g_case, splits, splits == 1 ? "" : "s");
    if (c->splits >= 1) ck_assert_int_le(splits, c->splits);
    tol_t t = tol_for(c->dt);
    if (c->odt == TP_E4M3) t.rel_l2 = 4e-2, t.abs_frac = 8e-2; /* 3 mantissa bits: 2^-4 relative per element */
    const float *got = download_f32(c->odt, m.o, nq, oscale);
    check_close("masked flash", got, ref, nq, (size_t)H * D, t);
    /* rows that see no key are zeros, exactly */
    for (size_t i = 0; i < nq; i++)
        if (ref[i] == 0.0f) ck_assert_msg(got[i] == 0.0f, "%s: element %zu is %g where no key is visible", g_case, i,
                                          (double)got[i]);
    /* refused: kp without vp, an unsupported head dim, an E4M3 output without its scale */
    tpk_masked_attn_args bad = m;
    bad.kp = m.kp ? m.kp : m.k, bad.vp = NULL, bad.Tp = Tp ? Tp : 1;
    ck_assert_int_eq(tpk_flash_attention_masked(&bad, g_stream), (int)cudaErrorInvalidValue);
    bad = m, bad.D = 80;
    ck_assert_int_eq(tpk_flash_attention_masked(&bad, g_stream), (int)cudaErrorInvalidValue);
    bad = m, bad.out_dt = TP_E4M3, bad.out_scale = NULL;
    ck_assert_int_eq(tpk_flash_attention_masked(&bad, g_stream), (int)cudaErrorInvalidValue);
}
END_TEST

/* RoPE from per-sample starts (tpk_rope_at, pi0's expert): prefix + valid[b] + t, past absent, against
 * tp_cpu_rope_at; a count that is not an integer truncates as the CPU's cast does. */
START_TEST(test_rope_at) {
    const tp_dtype dt = ACT[_i];
    enum { B = 3, T = 5, H = 3, D = 10, PRE = 4 };
    SET_CASE("rope_at %s", dname(dt));
    const float valid[B] = {2.0f, 0.0f, 7.9f};
    const int64_t start[B] = {PRE + 2, PRE + 0, PRE + 7};
    tp_rope r = {.theta = 10000.0};
    float inv[D / 2], *x = rounded_normal(dt, (size_t)B * T * H * D, 70, 1.0), ref[B * T * H * D];
    tp_rope_inv_freq(&r, D, inv);
    tp_cpu_rope_at(x, ref, B, T, H, D, inv, 0, start);
    void *dx = dev_upload(dt, x, (size_t)B * T * H * D, (size_t)B * T * H * D), *dy = dev_alloc(dt, (size_t)B * T * H * D);
    KERNEL_OK(tpk_rope_at(dx, dt, dy, dt, B, T, H, D, dev_floats(inv, D / 2), NULL, dev_floats(valid, B), PRE, g_stream));
    check_close("rope_at", download_f32(dt, dy, (size_t)B * T * H * D, 1.0f), ref, (size_t)B * T * H * D, (size_t)H * D,
                tol_for(dt));
}
END_TEST

/* pi0's two attentions at their real shapes (the prefix: 816 tokens, 8 heads over 1 KV head of 256, padding per
 * sample; the expert: 51 queries over the prefix's 816 keys and its own 51, the state token's first block), each
 * as a one-op graph whose inputs are Q, K, V (K, V of the prefix) and the valid counts, in an fp32 engine (the
 * unfused cuBLASLt form, then the CUDA-core kernel) against the CPU reference: the indexing and masking of both
 * implementations where the small model does not reach (head dim 256, hundreds of keys). */
START_TEST(test_masked_attention_pi0_shapes) {
    const int expert = _i / 2, classic = _i % 2;
    enum { B = 2, H = 8, HKV = 1, D = 256, NIMG = 768, P = 816, S = 51 };
    SET_CASE("masked attention at pi0's %s shape, fp32 engine, %s", expert ? "expert" : "prefix",
             classic ? "CUDA-core" : "unfused");
    const int Tq = expert ? S : P, Tk = Tq;
    tp_graph g;
    tp_graph_init(&g, B);
    const int64_t qs[3] = {B, Tq, H * D}, ks[3] = {B, Tk, HKV * D}, ps[3] = {B, P, HKV * D}, vs[2] = {B, 1};
    int in[6];
    in[0] = tp_graph_add_value(&g, "q", TP_VAL_INPUT, 3, qs, -1);
    in[1] = tp_graph_add_value(&g, "k", TP_VAL_INPUT, 3, ks, -1);
    in[2] = tp_graph_add_value(&g, "v", TP_VAL_INPUT, 3, ks, -1);
    if (expert) {
        in[3] = tp_graph_add_value(&g, "kp", TP_VAL_INPUT, 3, ps, -1);
        in[4] = tp_graph_add_value(&g, "vp", TP_VAL_INPUT, 3, ps, -1);
    }
    in[expert ? 5 : 3] = tp_graph_add_value(&g, "valid", TP_VAL_INPUT, 2, vs, -1);
    g.input = in[0];
    tp_op at = {.kind = TP_OP_MASKED_ATTENTION, .heads = H, .kv_heads = HKV, .head_dim = D, .scale = 1.0f / 16.0f,
                .prefix = NIMG, .pool_mode = expert};
    snprintf(at.layer, sizeof at.layer, "attn");
    g.output = tp_graph_op_out(&g, tp_graph_add_op(&g, &at, in, expert ? 6 : 4, 3, qs, "o"));
    const int64_t row = tp_graph_input_layout(&g, NULL);
    float *x = host_normal((size_t)(row * B), 80 + (uint64_t)_i, 0.0, 1.0);
    /* the valid counts (the row's last value): 48 and 45 language tokens, 3 padded in sample 1 */
    x[row - 1] = 48.0f;
    x[2 * row - 1] = 45.0f;
    const size_t on = (size_t)B * Tq * H * D;
    float *ref = hmalloc(on * sizeof(float)), *got = hmalloc(on * sizeof(float));
    tp_error e = {0};
    tp_params none = {0}; /* the graph has no parameters */
    ck_assert_msg(tp_cpu_run(&g, &none, x, ref, &e) == TP_OK, "%s", e.msg);
    tp_plan pl;
    ck_assert_msg(tp_plan_build(&g, TP_PREC_FP32, 90, &pl, &e) == TP_OK, "%s", e.msg);
    tp_engine_options o = {.device = 0, .use_graph = 1, .attention = classic ? TP_ATTN_CLASSIC : TP_ATTN_AUTO};
    tp_engine *eng = NULL;
    ck_assert_msg(tp_engine_build(&g, &none, &pl, &o, &eng, &e) == TP_OK, "%s: %s", g_case, e.msg);
    const char *im = tp_engine_op_impl(eng, 0);
    ck_assert_msg(im && strstr(im, classic ? "CUDA-core" : "cuBLASLt"), "%s: %s", g_case, im ? im : "(none)");
    memset(got, 0xFF, on * sizeof(float));
    ck_assert_msg(tp_engine_set_input(eng, x, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_engine_forward(eng, &e) == TP_OK, "%s: %s", g_case, e.msg);
    ck_assert_msg(tp_engine_get_output(eng, got, &e) == TP_OK, "%s", e.msg);
    tol_t t = {2e-5, 1e-4};
    check_close(g_case, got, ref, on, (size_t)H * D, t);
    printf("  %s: %s\n", g_case, im);
    tp_engine_destroy(eng);
    tp_plan_free(&pl);
    tp_graph_free(&g);
}
END_TEST

/* pi0-small as one engine (every stage, every denoise step, one CUDA graph; and eager) against the CPU reference
 * on the same synthesized weights and inputs (batch 3: padded language tokens differ per sample): the actions in
 * fp32 to 1e-4 relative L2, fp16 and bf16 by cosine; the expert's weights uploaded once for all steps. */
static const tp_precision PI0_PRECS[] = {TP_PREC_FP32, TP_PREC_FP16, TP_PREC_BF16};

START_TEST(test_pi0_small_engine) {
    const tp_precision prec = PI0_PRECS[_i / 6];
    const int graph = _i % 2 == 0, mode = (_i / 2) % 3, classic = mode == 1, flash = mode == 2; /* mode 0: auto */
    tp_model m;
    tp_error e = {0};
    tp_params p = {0};
    tp_graph g;
    tp_plan pl;
    enum { B = 3 };
    SET_CASE("pi0-small engine %s %s, %s attention", tp_precision_name(prec), graph ? "graph" : "eager",
             classic ? "CUDA-core" : flash ? "flash" : "auto");
    ck_assert_int_eq(tp_model_preset("pi0-small", &m, &e), TP_OK);
    ck_assert_int_eq(tp_model_params_init(&m, 5, 1, &p, &e), TP_OK);
    ck_assert_msg(tp_model_build_graph(&m, &p, B, &g, &e) == TP_OK, "%s", e.msg);
    const size_t row = (size_t)tp_model_input_numel(&m), out_n = (size_t)tp_value_numel(&g.values[g.output]);
    float *in = hmalloc(sizeof(float) * row * B), *ref = hmalloc(sizeof(float) * out_n);
    float *got = hmalloc(sizeof(float) * out_n);
    char desc[256];
    ck_assert_msg(tp_model_make_input(&m, B, 9, NULL, in, desc, sizeof desc, &e) == TP_OK, "%s", e.msg);
    float **rtaps = tp_taps_alloc(&g), **taps = tp_taps_alloc(&g); /* each stage's outputs (bench/drift.h) */
    ck_assert(rtaps && taps);
    ck_assert_msg(tp_cpu_run_taps(&g, &p, in, ref, rtaps, &e) == TP_OK, "%s", e.msg);
    int dev = 0;
    struct cudaDeviceProp dp;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaGetDeviceProperties(&dp, dev));
    ck_assert_msg(tp_plan_build(&g, prec, dp.major * 10 + dp.minor, &pl, &e) == TP_OK, "%s", e.msg);
    tp_engine_options o = {.device = dev, .use_graph = graph,
                           .attention = classic ? TP_ATTN_CLASSIC : flash ? TP_ATTN_FLASH : TP_ATTN_AUTO};
    tp_engine *eng = NULL;
    if (flash) { /* refused, never another kernel: the masked flash kernel takes 16-bit Q/K/V, and the vision
                  * attention's head dim (12 here) is not one of the ViT flash kernel's */
        ck_assert_int_eq(tp_engine_build(&g, &p, &pl, &o, &eng, &e), TP_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(e.msg, prec == TP_PREC_FP32 ? "masked flash kernel needs f16/bf16"
                                                         : "vision.blocks.0.attn: --attention flash needs"),
                      "%s: %s", g_case, e.msg);
        tp_taps_free(&g, taps);
        tp_taps_free(&g, rtaps);
        tp_plan_free(&pl);
        tp_graph_free(&g);
        tp_params_free(&p);
        return;
    }
    ck_assert_msg(tp_engine_build(&g, &p, &pl, &o, &eng, &e) == TP_OK, "%s: %s", g_case, e.msg);
    memset(got, 0xFF, sizeof(float) * out_n);
    ck_assert_msg(tp_engine_set_input(eng, in, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_engine_forward(eng, &e) == TP_OK, "%s: %s", g_case, e.msg);
    ck_assert_msg(tp_engine_get_output(eng, got, &e) == TP_OK, "%s", e.msg);
    int shown = 0;
    for (int i = 0; i < g.n_ops; i++) /* each attention as asked: the kernel, or auto's timed candidates */
        if (g.ops[i].kind == TP_OP_MASKED_ATTENTION) {
            const char *im = tp_engine_op_impl(eng, i);
            const char *want = classic ? "CUDA-core" : prec == TP_PREC_FP32 ? "cuBLASLt" : "flash (tprof";
            ck_assert_msg(im && strstr(im, want), "%s: %s: %s", g_case, g.ops[i].layer, im ? im : "(none)");
            if (!classic && prec != TP_PREC_FP32 && !shown++) printf("  %s: %s: %s\n", g_case, g.ops[i].layer, im);
        }
    tp_accuracy a;
    tp_accuracy_compute(got, ref, B, (int)(out_n / B), &a);
    /* every parameter once: the expert's steps share their weights */
    double wbytes = 0;
    for (int k = 0; k < p.n_params; k++)
        wbytes += (double)p.params[k].numel * tp_dtype_info(prec == TP_PREC_FP32 ? TP_F32 : TP_F16)->bytes;
    printf("  %s: actions cosine %.7f rel L2 %.3e max abs %.3e; weights %.0f bytes on the GPU (%.0f in the model)\n",
           g_case, a.cosine, a.rel_l2, a.max_abs, tp_engine_weight_bytes(eng), wbytes);
    fflush(stdout);
    ck_assert_msg(a.nonfinite == 0, "%s: %d non-finite actions", g_case, a.nonfinite);
    if (prec == TP_PREC_FP32) ck_assert_msg(a.rel_l2 <= 1e-4, "%s: rel L2 %.3e", g_case, a.rel_l2);
    else ck_assert_msg(a.cosine >= (prec == TP_PREC_FP16 ? 0.999 : 0.99), "%s: cosine %.6f", g_case, a.cosine);
    ck_assert_msg(tp_engine_weight_bytes(eng) <= 1.01 * wbytes, "%s: %.0f weight bytes for a %.0f-byte model", g_case,
                  tp_engine_weight_bytes(eng), wbytes);
    /* the drift per stage: the engine's stage outputs (poisoned first) against the CPU's; the last stage is the
     * actions, so its figure is the one above */
    for (int k = 0; k < g.n_taps; k++) memset(taps[k], 0xFF, sizeof(float) * (size_t)tp_value_numel(&g.values[g.taps[k].value]));
    ck_assert_msg(tp_engine_capture(eng, taps, &e) == TP_OK, "%s: %s", g_case, e.msg);
    tp_stage_drift dr[TP_MAX_TAPS];
    const int nd = tp_stage_drift_compute(&g, taps, &g, rtaps, dr);
    ck_assert_int_eq(nd, 2 + ((const tp_pi0_config *)(const void *)m.cfg.bytes)->steps);
    for (int k = 0; k < nd; k++) {
        printf("  %s: drift %-30s cosine %.7f rel L2 %.3e\n", g_case, dr[k].stage, dr[k].acc.cosine, dr[k].acc.rel_l2);
        ck_assert_msg(dr[k].acc.nonfinite == 0, "%s: %s: %d values not written", g_case, dr[k].stage, dr[k].acc.nonfinite);
        if (prec == TP_PREC_FP32) ck_assert_msg(dr[k].acc.rel_l2 <= 1e-4, "%s: %s: rel L2 %.3e", g_case, dr[k].stage, dr[k].acc.rel_l2);
        else ck_assert_msg(dr[k].acc.cosine >= 0.99, "%s: %s: cosine %.6f", g_case, dr[k].stage, dr[k].acc.cosine);
    }
    ck_assert_msg(fabs(dr[nd - 1].acc.rel_l2 - a.rel_l2) <= 1e-3 * a.rel_l2 + 1e-9, "%s: last stage %.6e, actions %.6e",
                  g_case, dr[nd - 1].acc.rel_l2, a.rel_l2);
    tp_taps_free(&g, taps);
    tp_taps_free(&g, rtaps);
    if (graph) { /* modular: a graph per stage, the same ops in the same order */
        tp_engine_options om = o;
        om.modular = 1;
        tp_engine *em = NULL;
        float *gm = hmalloc(sizeof(float) * out_n);
        memset(gm, 0xFF, sizeof(float) * out_n);
        ck_assert_msg(tp_engine_build(&g, &p, &pl, &om, &em, &e) == TP_OK, "%s modular: %s", g_case, e.msg);
        ck_assert_msg(tp_engine_set_input(em, in, &e) == TP_OK, "%s", e.msg);
        ck_assert_msg(tp_engine_forward(em, &e) == TP_OK, "%s modular: %s", g_case, e.msg);
        ck_assert_msg(tp_engine_get_output(em, gm, &e) == TP_OK, "%s", e.msg);
        tp_accuracy am; /* the builds time their GEMM choices apart: equal up to the format's rounding */
        tp_accuracy_compute(gm, got, B, (int)(out_n / B), &am);
        ck_assert_msg(am.nonfinite == 0 && am.rel_l2 <= (prec == TP_PREC_FP32 ? 1e-5 : 2e-2),
                      "%s: modular actions against the one graph's: rel L2 %.3e", g_case, am.rel_l2);
        static const char *const ST[3] = {"vision", "prefix", "expert"};
        char name[32];
        double hb = 0;
        ck_assert_int_eq(tp_engine_stages(em, 0, NULL, 0, NULL), 3);
        for (int k = 0; k < 3; k++) {
            tp_engine_stages(em, k, name, sizeof name, &hb);
            ck_assert_str_eq(name, ST[k]);
            ck_assert_msg(k == 2 ? hb == 0 : hb > 0, "%s: stage %s hands over %.0f bytes", g_case, name, hb);
        }
        tp_engine_destroy(em);
        /* programmatic dependent launch (pdl.cuh: the decoder ops, the GEMMs of gemm_sm90.h, the flash attention
         * and the elementwise pipeline kernels): the one graph has programmatic edges; with ordinary ones (no_pdl)
         * and the same GEMM choices the actions agree (the attention's split counts are timed apart: equal up to
         * the format's rounding), and two replays of the PDL graph agree bit for bit */
        int edges = 0;
        ck_assert_msg(tp_engine_pdl_edges(eng, &edges) > 0, "%s: no programmatic edge among %d", g_case, edges);
        int *choice = hmalloc(sizeof(int) * (size_t)g.n_ops);
        for (int i = 0; i < g.n_ops; i++) choice[i] = tp_engine_gemm_choice(eng, i);
        tp_engine_options on = o;
        on.no_pdl = 1;
        on.gemm_choice = choice;
        tp_engine *en = NULL;
        memset(gm, 0xFF, sizeof(float) * out_n);
        ck_assert_msg(tp_engine_build(&g, &p, &pl, &on, &en, &e) == TP_OK, "%s no PDL: %s", g_case, e.msg);
        ck_assert_int_eq(tp_engine_pdl_edges(en, NULL), 0);
        ck_assert_msg(tp_engine_set_input(en, in, &e) == TP_OK && tp_engine_forward(en, &e) == TP_OK &&
                          tp_engine_get_output(en, gm, &e) == TP_OK, "%s no PDL: %s", g_case, e.msg);
        tp_accuracy_compute(gm, got, B, (int)(out_n / B), &am);
        float *again = hmalloc(sizeof(float) * out_n);
        ck_assert_msg(tp_engine_forward(eng, &e) == TP_OK && tp_engine_forward(eng, &e) == TP_OK &&
                          tp_engine_get_output(eng, again, &e) == TP_OK, "%s: %s", g_case, e.msg);
        printf("  %s: %d programmatic edges; actions against ordinary edges: rel L2 %.3e; replays %s\n", g_case, edges,
               am.rel_l2, memcmp(again, got, sizeof(float) * out_n) ? "DIFFER" : "bit-identical");
        fflush(stdout);
        ck_assert_msg(am.nonfinite == 0 && am.rel_l2 <= (prec == TP_PREC_FP32 ? 1e-5 : 2e-2),
                      "%s: actions with ordinary edges against PDL's: rel L2 %.3e", g_case, am.rel_l2);
        ck_assert_msg(memcmp(again, got, sizeof(float) * out_n) == 0, "%s: two replays differ", g_case);
        tp_engine_destroy(en);
        /* --fp32-protect tensors: RMSNorm and RoPE as FP32 layers between casts: the same math, so the same actions up
         * to the builds' GEMM choices (timed apart) */
        tp_policy pol;
        tp_plan pt;
        tp_policy_default(&pol, prec);
        pol.fp32_tensors = 1;
        ck_assert_msg(tp_plan_build_policy(&g, &pol, dp.major * 10 + dp.minor, &pt, &e) == TP_OK, "%s", e.msg);
        tp_engine *et = NULL;
        memset(gm, 0xFF, sizeof(float) * out_n);
        ck_assert_msg(tp_engine_build(&g, &p, &pt, &o, &et, &e) == TP_OK, "%s fp32 tensors: %s", g_case, e.msg);
        ck_assert_msg(tp_engine_set_input(et, in, &e) == TP_OK, "%s", e.msg);
        ck_assert_msg(tp_engine_forward(et, &e) == TP_OK, "%s fp32 tensors: %s", g_case, e.msg);
        ck_assert_msg(tp_engine_get_output(et, gm, &e) == TP_OK, "%s", e.msg);
        tp_accuracy_compute(gm, got, B, (int)(out_n / B), &am);
        printf("  %s: --fp32-protect tensors against regs: actions rel L2 %.3e\n", g_case, am.rel_l2);
        fflush(stdout);
        ck_assert_msg(am.nonfinite == 0 && am.rel_l2 <= (prec == TP_PREC_FP32 ? 1e-5 : 2e-2),
                      "%s: fp32-tensor actions against the default engine's: rel L2 %.3e", g_case, am.rel_l2);
        tp_engine_destroy(et);
        tp_plan_free(&pt);
    }
    tp_engine_destroy(eng);
    tp_plan_free(&pl);
    tp_graph_free(&g);
    tp_params_free(&p);
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
    tcase_add_loop_test(t, test_masked_flash, 0, N_OF(MFLASH));
    tcase_add_loop_test(t, test_rope_at, 0, 3);
    suite_add_tcase(s, t);
    TCase *en = tcase_create("pi0_engine");
    tcase_add_checked_fixture(en, setup, teardown);
    tcase_set_timeout(en, 300);
    tcase_add_loop_test(en, test_pi0_small_engine, 0, 18);
    tcase_add_loop_test(en, test_masked_attention_pi0_shapes, 0, 4);
    suite_add_tcase(s, en);
    return s;
}
