/* test_gpu_quantize.c: weights converted and quantized on the GPU (exec/cuda/kernels/quantize.h, issue 43) against
 * the CPU reference, bit for bit:
 *   - tpk_weight_convert against tp_convert_from_f32 (F16, BF16, E4M3 under a scale, an infinite one, a NaN one)
 *     over specials (NaN of both signs, +-Inf, +-0, FP32 subnormals, values on the rounding midpoints of each
 *     format, the overflow edges);
 *   - tpk_weight_quantize_rows against tp_quantize (NVFP4, MXFP8, MXFP4 weights) at awkward shapes (K not a multiple
 *     of the block, K 2, one row), the rows streamed in uneven chunks as the engine streams them, a row with Inf,
 *     NaN elements, an all-zero block, a block of FP32 subnormals; s2 from tp_qformat_global_scale equal to
 *     tp_quantize's; and the refusals (odd K for E2M1, a format with 128-row blocks);
 *   - whole engines (prefill, and a decode step whose q/k/v and gate/up are one GEMV each: the group layouts) built
 *     with the weights quantized on the GPU and on the host (TPROF_QUANTIZE_CPU=1), the same GEMM choices: the same
 *     logits, bit for bit, in fp16, bf16, fp8-wo and nvfp4-wo. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "exec/cuda/kernels/quantize.h"
#include "formats/dtype.h"
#include "formats/qformat.h"
#include "models/decoder.h"
#include "planner/plan.h"
#include "planner/policy.h"

#define CU(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

/* n values: normals of spread `std` with an outlier every 97, then the specials over the first entries */
static float *values(size_t n, uint64_t seed, double std) {
    float *x = malloc(sizeof(float) * n);
    tp_rng r;
    tp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)(tp_rng_normal(&r) * std * (i % 97 == 0 ? 20.0 : 1.0));
    return x;
}

static float fb(uint32_t u) { return tp_f32_from_bits(u); }

static float *dev_f32(const float *x, size_t n) {
    float *d = NULL;
    CU(cudaMalloc((void **)&d, sizeof(float) * n));
    CU(cudaMemcpy(d, x, sizeof(float) * n, cudaMemcpyHostToDevice));
    return d;
}

START_TEST(test_convert_bits) {
    const size_t n = 197 * 257 + 3;
    float *x = values(n, 41, 3.0);
    /* specials and rounding edges: FP16 (2^-24 grid below 2^-14, 65504 / 65520), BF16 ties, E4M3 under scale 1
     * (448, the 2^-9 grid, ties between codes) */
    const float sp[] = {NAN, -NAN, fb(0x7F800001u), fb(0xFFC00123u), INFINITY, -INFINITY, 0.0f, -0.0f,
                        fb(0x00000001u), fb(0x80000001u), fb(0x007FFFFFu), 0x1.0p-24f, 0x1.8p-25f, 0x1.0p-25f,
                        0x1.8p-24f, 0x1.ffcp-15f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1.0f + 0x1.0p-11f,
                        1.0f + 0x1.8p-11f, 1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f, 448.0f, 464.0f, 480.0f, 1e30f,
                        0x1.0p-9f, 0x1.8p-10f, 0x1.0p-10f, 0x1.4p-7f, 0x1.0p-6f, 1.0625f, 1.1875f, -0x1.8p-10f};
    const size_t ns = sizeof sp / sizeof sp[0];
    memcpy(x, sp, sizeof sp);
    float *dx = dev_f32(x, n);
    /* E4M3 under an infinite or NaN scale (a tensor whose amax is Inf): every quotient 0 or NaN, Inf / Inf's NaN
     * with x's sign on both sides */
    const tp_dtype types[] = {TP_F16, TP_BF16, TP_E4M3, TP_E4M3, TP_E4M3, TP_E4M3};
    const float scales[] = {1.0f, 1.0f, 1.0f, 0.0123f, INFINITY, NAN};
    for (int t = 0; t < 6; t++) {
        const size_t es = tp_dtype_info(types[t])->bytes;
        unsigned char *want = malloc(n * es), *got = malloc(n * es);
        void *dy = NULL;
        CU(cudaMalloc(&dy, n * es));
        CU(cudaMemset(dy, 0xA5, n * es)); /* poisoned */
        tp_convert_from_f32(types[t], x, want, n, scales[t]);
        ck_assert_int_eq(tpk_weight_convert(dx, dy, types[t], n, scales[t], NULL), 0);
        CU(cudaMemcpy(got, dy, n * es, cudaMemcpyDeviceToHost));
        size_t bad = 0, first = n;
        for (size_t i = 0; i < n; i++)
            if (memcmp(got + i * es, want + i * es, es)) bad++, first = first < i ? first : i;
        ck_assert_msg(bad == 0, "%s scale %g: %zu of %zu values differ, the first at %zu (x = %a%s)",
                      tp_dtype_info(types[t])->name, (double)scales[t], bad, n, first, (double)x[first < n ? first : 0],
                      first < ns ? ", a special" : "");
        CU(cudaFree(dy));
        free(want);
        free(got);
    }
    CU(cudaFree(dx));
    free(x);
}
END_TEST

/* shapes (rows, K): K not a multiple of 16 or 32, K 2, one row, a wide row */
static const long long QSHAPES[][2] = {{197, 258}, {3, 4096}, {577, 96}, {1, 2}, {64, 1000}, {33, 257}};
static const tp_qformat QFMTS[] = {TP_QF_NVFP4, TP_QF_MXFP8, TP_QF_MXFP4};

START_TEST(test_quantize_rows_bits) {
    const tp_qformat f = QFMTS[_i / 6];
    const long long rows = QSHAPES[_i % 6][0], K = QSHAPES[_i % 6][1];
    const char *name = tp_qformat_info(f)->name;
    if (!tpk_weight_quantize_ok(f, K)) { /* E2M1 at an odd K: refused, said so */
        ck_assert_int_eq(K % 2, 1);
        ck_assert_int_ne(tpk_weight_quantize_rows(f, (const float *)16, rows, K, 0, rows, 1.0f, (uint8_t *)16,
                                                  (uint8_t *)16, NULL), 0);
        return;
    }
    const size_t n = (size_t)(rows * K);
    float *x = values(n, 100 + (uint64_t)_i, 0.02);
    /* the specials, where the shape has room: an Inf in row 1, NaN elements in row 0, an all-zero block and a block of
     * FP32 subnormals in the last row */
    if (n > 4) x[1] = NAN, x[3] = -NAN;
    if (rows > 2) x[K + 5] = INFINITY;
    if (rows > 2 && K >= 64)
        for (int j = 0; j < 32; j++) x[(rows - 1) * K + j] = 0.0f, x[(rows - 1) * K + 32 + j] = fb(0x00000100u + (uint32_t)j);
    tp_qtensor q;
    tp_error e = {0};
    ck_assert_msg(tp_quantize(f, x, rows, K, 1, 0.0f, &q, &e) == TP_OK, "%s", e.msg);
    const float s2 = tp_qformat_global_scale(f, x, rows, K);
    ck_assert_msg(memcmp(&s2, &q.global_scale, 4) == 0, "%s: s2 %a, tp_quantize's %a", name, (double)s2,
                  (double)q.global_scale);
    float *dx = dev_f32(x, n);
    uint8_t *dc = NULL, *ds = NULL, *gc = malloc(q.elem_bytes), *gs = malloc(q.scale_bytes);
    CU(cudaMalloc((void **)&dc, q.elem_bytes));
    CU(cudaMalloc((void **)&ds, q.scale_bytes));
    for (int chunked = 0; chunked < 2; chunked++) {
        CU(cudaMemset(dc, 0xA5, q.elem_bytes));
        CU(cudaMemset(ds, 0xA5, q.scale_bytes));
        /* whole, or in uneven chunks of rows (as the engine streams a weight) */
        const long long cuts[] = {0, chunked ? rows / 3 : rows, chunked ? rows / 3 + (rows + 1) / 2 : rows, rows};
        for (int c = 0; c < 3; c++) {
            const long long r0 = cuts[c], r1 = cuts[c + 1] < r0 ? r0 : cuts[c + 1];
            ck_assert_int_eq(tpk_weight_quantize_rows(f, dx + r0 * K, rows, K, r0, r1, s2, dc, ds, NULL), 0);
        }
        CU(cudaMemcpy(gc, dc, q.elem_bytes, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(gs, ds, q.scale_bytes, cudaMemcpyDeviceToHost));
        size_t bc = 0, bs = 0, fc = q.elem_bytes, fs = q.scale_bytes;
        for (size_t i = 0; i < q.elem_bytes; i++)
            if (gc[i] != q.elems[i]) bc++, fc = fc < i ? fc : i;
        for (size_t i = 0; i < q.scale_bytes; i++)
            if (gs[i] != q.scales[i]) bs++, fs = fs < i ? fs : i;
        ck_assert_msg(bc == 0 && bs == 0,
                      "%s %lld x %lld%s: %zu of %zu code bytes differ (first %zu: %02x, host %02x), %zu of %zu scales "
                      "(first %zu)", name, rows, K, chunked ? " in chunks" : "", bc, q.elem_bytes, fc,
                      fc < q.elem_bytes ? gc[fc] : 0, fc < q.elem_bytes ? q.elems[fc] : 0, bs, q.scale_bytes, fs);
    }
    CU(cudaFree(dx));
    CU(cudaFree(dc));
    CU(cudaFree(ds));
    free(gc);
    free(gs);
    tp_qtensor_free(&q);
    free(x);
}
END_TEST

START_TEST(test_quantize_refusals) {
    uint8_t *p = (uint8_t *)16;
    /* a format whose weight blocks span 128 rows, the per-tensor one, an odd K for E2M1, rows out of range */
    ck_assert_int_ne(tpk_weight_quantize_rows(TP_QF_FP8_BLOCK128, (const float *)p, 128, 128, 0, 128, 1.0f, p, p, NULL), 0);
    ck_assert_int_ne(tpk_weight_quantize_rows(TP_QF_FP8_TENSOR, (const float *)p, 4, 64, 0, 4, 1.0f, p, p, NULL), 0);
    ck_assert_int_ne(tpk_weight_quantize_rows(TP_QF_NVFP4, (const float *)p, 4, 33, 0, 4, 1.0f, p, p, NULL), 0);
    ck_assert_int_ne(tpk_weight_quantize_rows(TP_QF_MXFP8, (const float *)p, 4, 64, 2, 5, 1.0f, p, p, NULL), 0);
    ck_assert_int_ne(tpk_weight_convert((const float *)p, p, TP_E2M1, 4, 1.0f, NULL), 0);
}
END_TEST

/* ---- whole engines: the GPU's quantization against the host's ---------------------------------------------- */

static tp_engine *build(const tp_graph *g, const tp_params *p, tp_plan *plan, tp_precision prec, int groups,
                        const int *choice, int cpu) {
    tp_error e = {0};
    tp_policy pol;
    tp_policy_default(&pol, prec);
    tp_gpu_info gi;
    ck_assert_msg(tp_gpu_query(0, &gi, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_plan_build_policy(g, &pol, gi.sm, plan, &e) == TP_OK, "%s", e.msg);
    /* the attention pinned to one implementation, the GEMMs to the first engine's choices: timed choices could differ */
    tp_engine_options eo = {.device = 0, .use_graph = 1, .attention = TP_ATTN_CLASSIC, .gemv_groups = groups,
                            .gemm_choice = choice};
    if (cpu) setenv("TPROF_QUANTIZE_CPU", "1", 1);
    else unsetenv("TPROF_QUANTIZE_CPU");
    tp_engine *en = NULL;
    const tp_status st = tp_engine_build(g, p, plan, &eo, &en, &e);
    unsetenv("TPROF_QUANTIZE_CPU");
    ck_assert_msg(st == TP_OK, "%s", e.msg);
    return en;
}

static const tp_precision EPREC[] = {TP_PREC_FP16, TP_PREC_BF16, TP_PREC_FP8_WO, TP_PREC_NVFP4_WO};

START_TEST(test_engine_gpu_quantized_same_logits) {
    const tp_precision prec = EPREC[_i];
    tp_model m;
    tp_error e = {0};
    ck_assert_msg(tp_model_preset("llama-tiny", &m, &e) == TP_OK, "%s", e.msg);
    tp_decoder_config c;
    memcpy(&c, m.cfg.bytes, sizeof c);
    c.hidden = 256, c.inter = 688, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 64, c.vocab = 1000;
    c.qkv_bias = 1, c.prompt = 37, c.gen = 2;
    memcpy(m.cfg.bytes, &c, sizeof c);
    tp_params p = {0};
    ck_assert_msg(tp_model_params_init(&m, 23, 1, &p, &e) == TP_OK, "%s", e.msg);
    float ids[37];
    for (int i = 0; i < 37; i++) ids[i] = (float)((i * 37 + 11) % c.vocab);
    /* the prefill (37 tokens), and a decode step at batch 1 with q/k/v and gate/up as one GEMV each */
    for (int decode = 0; decode < 2; decode++) {
        const tp_step_shape s = {1, decode ? 1 : 37, decode ? 37 : 0, 39, 0, 0, 0};
        tp_graph g;
        ck_assert_msg(tp_model_build_step(&m, &p, &s, &g, &e) == TP_OK, "%s", e.msg);
        tp_plan pa, pb;
        tp_engine *ea = build(&g, &p, &pa, prec, decode, NULL, 0);
        int *choice = malloc(sizeof(int) * (size_t)g.n_ops);
        for (int i = 0; i < g.n_ops; i++) choice[i] = tp_engine_gemm_choice(ea, i);
        tp_engine *eb = build(&g, &p, &pb, prec, decode, choice, 1);
        const size_t V = (size_t)c.vocab;
        float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
        for (int k = 0; k < 2; k++) {
            tp_engine *en = k ? eb : ea;
            ck_assert_msg(tp_engine_set_input(en, ids, &e) == TP_OK && tp_engine_forward(en, &e) == TP_OK &&
                              tp_engine_get_output(en, k ? lb : la, &e) == TP_OK, "%s", e.msg);
        }
        size_t bad = 0;
        for (size_t i = 0; i < V; i++) bad += memcmp(&la[i], &lb[i], 4) != 0;
        printf("quantize engines %s %s: weights quantized on the GPU and on the host, %zu of %zu logits differ; "
               "weights %.0f and %.0f bytes\n", tp_precision_name(prec), decode ? "decode step (groups)" : "prefill",
               bad, V, tp_engine_weight_bytes(ea), tp_engine_weight_bytes(eb));
        ck_assert_msg(bad == 0, "%s %s: %zu logits differ", tp_precision_name(prec), decode ? "decode" : "prefill", bad);
        ck_assert(tp_engine_weight_bytes(ea) == tp_engine_weight_bytes(eb));
        free(la);
        free(lb);
        free(choice);
        tp_engine_destroy(ea);
        tp_engine_destroy(eb);
        tp_plan_free(&pa);
        tp_plan_free(&pb);
        tp_graph_free(&g);
    }
    tp_params_free(&p);
}
END_TEST

Suite *gpu_quantize_suite(void) {
    Suite *s = suite_create("gpu_quantize");
    TCase *t = tcase_create("bits");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_convert_bits);
    tcase_add_loop_test(t, test_quantize_rows_bits, 0, 18);
    tcase_add_test(t, test_quantize_refusals);
    suite_add_tcase(s, t);
    TCase *en = tcase_create("engines");
    tcase_set_timeout(en, 240);
    tcase_add_loop_test(en, test_engine_gpu_quantized_same_logits, 0, 4);
    suite_add_tcase(s, en);
    return s;
}
