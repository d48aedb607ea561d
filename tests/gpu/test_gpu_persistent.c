/* test_gpu_persistent.c: the persistent decode step (exec/cuda/persistent/persist.h, docs/persistent.md) against the
 * CUDA graph of per-call kernels (itself checked against the CPU in test_gpu_decoder_engine.c), both sharing one
 * prefill engine's weights and KV cache. Teacher-forced: at every step both engines start from the same cache
 * position and token, the graph's greedy token feeds the next step, and the logits must agree within the format's
 * tolerance; where the graph's best logit leads the second by more than the difference between the two engines, both
 * must pick the same token. Then both decode greedily on their own. Shapes: head dims 64, 128 and 256; GQA and MQA;
 * contexts from 1 to 4095 (a cache of 4096); an LM head of Llama 3's 128256 rows over K = 2048 and an MLP of K = 8192
 * (the tiles of Llama-3.2-1B); K = 688 (not a multiple of 64); FP16, BF16, weight-only FP8 and W8A8 FP8 (static
 * activation scales calibrated over the prompt); batches of 1, 3 and 8 sequences (at 8 the K = 8192
 * and K = 14336 down projections stream K in chunks, and Llama-3.1-8B's hidden 4096 fills the shared memory for x).
 * Combinations the persistent step does not take are refused when asked for and left to the graph under auto,
 * saying why. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "models/decoder.h"
#include "planner/plan.h"
#include "planner/policy.h"

enum { G = 5 };

/* per case: hidden, intermediate, heads, KV heads, head dim, vocab, prompt, Gemma-like */
static const int CASES[][8] = {
    {256, 688, 4, 2, 64, 1000, 37, 0},        /* GQA, q/k/v bias, K = 688 */
    {256, 512, 2, 1, 256, 777, 257, 1},       /* MQA, head dim 256, GeGLU, 1 + w norm, tied embeddings */
    {512, 1024, 8, 2, 128, 1000, 1, 0},       /* head dim 128, a context of 1 */
    {256, 512, 4, 1, 64, 1000, 4090, 0},      /* a cache of 4096 (the last step sees 4095 keys) */
    {2048, 8192, 32, 8, 64, 128256, 200, 0},  /* Llama-3.2-1B's widths, two layers */
    {4096, 14336, 32, 8, 128, 1000, 100, 0},  /* Llama-3.1-8B's widths, two layers, a small vocabulary */
};

static tp_model model_case(int k, int *T) {
    tp_model m;
    tp_error e = {0};
    ck_assert_msg(tp_model_preset("llama-tiny", &m, &e) == TP_OK, "%s", e.msg);
    tp_decoder_config c;
    memcpy(&c, m.cfg.bytes, sizeof c);
    const int *x = CASES[k];
    c.hidden = x[0], c.inter = x[1], c.heads = x[2], c.kv_heads = x[3], c.head_dim = x[4], c.vocab = x[5];
    c.layers = 2, c.qkv_bias = k == 0;
    if (x[7]) {
        c.arch = TP_DEC_GEMMA, c.act = TP_ACT_GELU_TANH, c.tie = 1;
        c.rope = (tp_rope){TP_ROPE_DEFAULT, 10000.0, 0, 0, 0, 0};
    }
    *T = x[6];
    c.prompt = x[6];
    c.gen = G + 1;
    memcpy(m.cfg.bytes, &c, sizeof c);
    return m;
}

static tp_graph step_graph(const tp_model *m, const tp_params *p, int B, int t, int past, int T) {
    tp_graph g;
    tp_error e = {0};
    const tp_step_shape s = {B, t, past, T + G + 1, 0, 0, 0};
    ck_assert_msg(tp_model_build_step(m, p, &s, &g, &e) == TP_OK, "%s", e.msg);
    return g;
}

/* amax: W8A8's calibrated activations (tp_calibrate_max) for a prefill engine; its decode engines take them by
 * value name from the engine they share */
static tp_status engine_amax(const tp_graph *g, const tp_params *p, tp_plan *plan, tp_precision prec,
                             const tp_engine *share, int feed, tp_decode_kernel dk, const float *amax, tp_engine **out,
                             tp_error *e) {
    tp_policy pol;
    tp_policy_default(&pol, prec);
    tp_gpu_info gi;
    ck_assert_msg(tp_gpu_query(0, &gi, e) == TP_OK, "%s", e->msg);
    ck_assert_msg(tp_plan_build_policy(g, &pol, gi.sm, plan, e) == TP_OK, "%s", e->msg);
    tp_engine_options eo = {.device = 0, .use_graph = 1, .share = share, .feed_argmax = feed, .gemv_groups = 1,
                            .decode_kernel = dk, .act_amax = amax};
    return tp_engine_build(g, p, plan, &eo, out, e);
}

static tp_status engine(const tp_graph *g, const tp_params *p, tp_plan *plan, tp_precision prec,
                        const tp_engine *share, int feed, tp_decode_kernel dk, tp_engine **out, tp_error *e) {
    return engine_amax(g, p, plan, prec, share, feed, dk, NULL, out, e);
}

static int argmax2(const float *x, int n, float *margin) {
    int a = 0, b = -1;
    for (int i = 1; i < n; i++) {
        if (x[i] > x[a]) b = a, a = i;
        else if (b < 0 || x[i] > x[b]) b = i;
    }
    *margin = b >= 0 ? x[a] - x[b] : INFINITY;
    return a;
}

/* Case k in precision prec with B sequences of T prompt tokens each (different tokens per sequence). */
static void run_case(int k, tp_precision prec, int B) {
    int T;
    tp_model m = model_case(k, &T);
    tp_error e = {0};
    tp_params p = {0};
    ck_assert_msg(tp_model_params_init(&m, 13, 1, &p, &e) == TP_OK, "%s", e.msg);
    const int V = CASES[k][5];
    const size_t BV = (size_t)B * V;
    float *ids = malloc(sizeof(float) * (size_t)B * T), *lg = malloc(sizeof(float) * BV), *lp = malloc(sizeof(float) * BV);
    float *tok = malloc(sizeof(float) * (size_t)(G + 1) * B), *gt = malloc(sizeof(float) * (size_t)G * B),
          *pt = malloc(sizeof(float) * (size_t)G * B);
    ck_assert(ids && lg && lp && tok && gt && pt);
    tp_rng r;
    tp_rng_seed(&r, 40 + (uint64_t)k);
    for (int i = 0; i < B * T; i++) ids[i] = (float)(tp_rng_u64(&r) % (uint64_t)V);
    tp_graph gp = step_graph(&m, &p, B, T, 0, T), gd = step_graph(&m, &p, B, 1, T, T);
    tp_plan pp, pg, pk;
    tp_engine *ep = NULL, *eg = NULL, *ek = NULL;
    float *amax = NULL;
    if (prec == TP_PREC_FP8) { /* W8A8: static activation scales calibrated over the prompt */
        tp_gpu_info gi;
        ck_assert_msg(tp_gpu_query(0, &gi, &e) == TP_OK, "%s", e.msg);
        amax = malloc(sizeof(float) * (size_t)gp.n_values);
        ck_assert(amax);
        ck_assert_msg(tp_calibrate_max(&gp, &p, 0, gi.sm, ids, amax, &e) == TP_OK, "%s", e.msg);
    }
    ck_assert_msg(engine_amax(&gp, &p, &pp, prec, NULL, 0, TP_DECODE_GRAPH, amax, &ep, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(engine(&gd, &p, &pg, prec, ep, 1, TP_DECODE_GRAPH, &eg, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(engine(&gd, &p, &pk, prec, ep, 1, TP_DECODE_PERSISTENT, &ek, &e) == TP_OK, "case %d %s: %s", k,
                  tp_precision_name(prec), e.msg);
    const char *note = NULL;
    int instrs = 0;
    ck_assert_int_eq(tp_engine_decode_kernel(eg, NULL, NULL), 0);
    ck_assert_int_eq(tp_engine_decode_kernel(ek, &note, &instrs), 1);
    ck_assert_int_gt(instrs, 0);
    ck_assert_int_le(tp_engine_graph_kernels(ek), 3); /* the step, the argmax, the position */

    /* W8A8: both engines round x to E4M3 alike; on the small cases below they agree to 1e-7 (H200, 2026-11-29) */
    const double tol = prec == TP_PREC_BF16 ? 2e-2 : prec == TP_PREC_FP8 ? 1e-2 : 4e-3;
    ck_assert_msg(tp_engine_set_input(ep, ids, &e) == TP_OK && tp_engine_forward(ep, &e) == TP_OK &&
                      tp_engine_get_output(ep, lg, &e) == TP_OK, "%s", e.msg);
    float margin;
    for (int b = 0; b < B; b++) tok[b] = (float)argmax2(lg + (size_t)b * V, V, &margin);
    double worst = 0;
    int same = 0, decided = 0;
    for (int st = 0; st < G; st++) {
        float *in = tok + (size_t)st * B;
        ck_assert_msg(tp_engine_set_past(eg, T + st, &e) == TP_OK && tp_engine_set_input(eg, in, &e) == TP_OK &&
                          tp_engine_forward(eg, &e) == TP_OK && tp_engine_get_output(eg, lg, &e) == TP_OK,
                      "%s", e.msg);
        ck_assert_msg(tp_engine_set_past(ek, T + st, &e) == TP_OK && tp_engine_set_input(ek, in, &e) == TP_OK &&
                          tp_engine_forward(ek, &e) == TP_OK && tp_engine_get_output(ek, lp, &e) == TP_OK,
                      "%s", e.msg);
        for (int b = 0; b < B; b++) { /* each sequence on its own: a row mixed up with another fails here */
            const float *g = lg + (size_t)b * V, *q = lp + (size_t)b * V;
            double num = 0, den = 0, dmax = 0;
            for (int i = 0; i < V; i++) {
                ck_assert_msg(isfinite(q[i]), "case %d %s B %d step %d: sequence %d's logit %d is %g", k,
                              tp_precision_name(prec), B, st, b, i, (double)q[i]);
                const double d = (double)q[i] - g[i];
                num += d * d, den += (double)g[i] * g[i], dmax = fmax(dmax, fabs(d));
            }
            const double rl2 = sqrt(num / (den > 0 ? den : 1));
            worst = fmax(worst, rl2);
            ck_assert_msg(rl2 <= tol, "case %d %s B %d step %d (position %d) sequence %d: persistent vs graph logits "
                          "rel L2 %.3e > %.1e", k, tp_precision_name(prec), B, st, T + st, b, rl2, tol);
            float mg, mp;
            const int ag = argmax2(g, V, &mg), ap = argmax2(q, V, &mp);
            if (mg > 2 * dmax) {
                decided++;
                ck_assert_msg(ag == ap, "case %d %s B %d step %d sequence %d: token %d (graph, margin %.3g) vs %d "
                              "(persistent)", k, tp_precision_name(prec), B, st, b, ag, (double)mg, ap);
            }
            same += ag == ap;
            tok[(size_t)(st + 1) * B + b] = (float)ag;
        }
    }
    ck_assert_int_gt(decided, 0);
    /* greedy decoding inside each engine's graph, from the same prefill */
    double ms[G], msp[G];
    ck_assert_msg(tp_engine_forward(ep, &e) == TP_OK && tp_engine_feed_argmax(ep, eg, &e) == TP_OK &&
                      tp_engine_decode(eg, G, ms, gt, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_engine_forward(ep, &e) == TP_OK && tp_engine_feed_argmax(ep, ek, &e) == TP_OK &&
                      tp_engine_decode(ek, G, msp, pt, &e) == TP_OK, "%s", e.msg);
    int gsame = 0;
    for (int i = 0; i < G * B; i++) gsame += gt[i] == pt[i];
    printf("persistent case %d %s B %d (T %d, H %d/%d, D %d): %d instructions; logits rel L2 <= %.3e over %d steps, "
           "argmax %d/%d equal (%d decided); greedy %d/%d equal; a step %.3f ms (graph %.3f ms)\n", k,
           tp_precision_name(prec), B, T, CASES[k][2], CASES[k][3], CASES[k][4], instrs, worst, G, same, G * B,
           decided, gsame, G * B, msp[G - 1], ms[G - 1]);
    tp_engine_destroy(ek);
    tp_engine_destroy(eg);
    tp_engine_destroy(ep);
    tp_plan_free(&pk);
    tp_plan_free(&pg);
    tp_plan_free(&pp);
    tp_graph_free(&gd);
    tp_graph_free(&gp);
    tp_params_free(&p);
    free(ids);
    free(lg);
    free(lp);
    free(tok);
    free(gt);
    free(pt);
    free(amax);
}

START_TEST(test_persistent_fp16) { run_case(_i, TP_PREC_FP16, 1); }
END_TEST
START_TEST(test_persistent_bf16) { run_case(_i, TP_PREC_BF16, 1); }
END_TEST
/* weight-only FP8: E4M3 tiles widened in registers, per-tensor scales (single GEMVs) and per-row ones (groups) */
START_TEST(test_persistent_fp8_wo) { run_case(_i, TP_PREC_FP8_WO, 1); }
END_TEST
/* W8A8 FP8: x rounded to E4M3 under its calibrated scale as it enters shared memory (after the RMSNorm's FP16), on
 * cases 0-3. Not at Llama-3.2-1B's widths nor at batch > 1: there the two engines drift apart by 1e-2 to 5e-2 (H200,
 * 2026-11-29: an FP16 value one ulp away on an E4M3 rounding boundary lands on the next code, 2^-3 away, where the
 * persistent RMSNorm sums in another order, and at batch > 1 the graph path rounds gate and up to FP16 before its
 * GLU kernel while the persistent GLU epilogue does not), which wants a bound relative to the format's own error
 * (the graph path's W8A8 against its FP16), not yet written. */
START_TEST(test_persistent_fp8) { run_case(_i, TP_PREC_FP8, 1); }
END_TEST
/* batches: (case, precision, B); at 8 the 1B and 8B widths cut the down projection's K into chunks */
static const int BATCHED[][3] = {
    {0, TP_PREC_FP16, 3}, {1, TP_PREC_BF16, 3}, {3, TP_PREC_FP16, 3}, {4, TP_PREC_FP16, 8},
    {0, TP_PREC_FP8_WO, 8}, {4, TP_PREC_FP8_WO, 8}, {5, TP_PREC_FP16, 8}, {2, TP_PREC_FP16, 8},
};
START_TEST(test_persistent_batch) { run_case(BATCHED[_i][0], (tp_precision)BATCHED[_i][1], BATCHED[_i][2]); }
END_TEST

/* What the persistent step does not take: refused when asked for (naming why), the graph under auto (saying why);
 * and auto on what it takes times both and says so. */
START_TEST(test_persistent_refusals) {
    int T;
    tp_model m = model_case(0, &T);
    tp_error e = {0};
    tp_params p = {0};
    ck_assert(tp_model_params_init(&m, 13, 1, &p, &e) == TP_OK);
    tp_graph gp = step_graph(&m, &p, 1, T, 0, T), gd = step_graph(&m, &p, 1, 1, T, T), g3 = step_graph(&m, &p, 9, 1, T, T);
    tp_plan pp, p3, pw, pa, pb;
    tp_engine *ep = NULL, *ed = NULL;
    ck_assert(engine(&gp, &p, &pp, TP_PREC_FP16, NULL, 0, TP_DECODE_GRAPH, &ep, &e) == TP_OK);
    /* batch 9: more sequences than an mma's 8 columns */
    ck_assert_int_eq(engine(&g3, &p, &p3, TP_PREC_FP16, NULL, 1, TP_DECODE_PERSISTENT, &ed, &e), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "batch 8"), "%s", e.msg);
    /* weight-only NVFP4: refused when asked for, the graph under auto */
    ck_assert_int_eq(engine(&gd, &p, &pw, TP_PREC_NVFP4_WO, NULL, 1, TP_DECODE_PERSISTENT, &ed, &e), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "quantized formats"), "%s", e.msg);
    tp_plan_free(&pw);
    ck_assert_msg(engine(&gd, &p, &pw, TP_PREC_NVFP4_WO, NULL, 1, TP_DECODE_AUTO, &ed, &e) == TP_OK, "%s", e.msg);
    const char *note = NULL;
    ck_assert_int_eq(tp_engine_decode_kernel(ed, &note, NULL), 0);
    ck_assert_msg(strstr(note, "graph of per-call kernels") && strstr(note, "quantized formats"), "%s", note);
    tp_engine_destroy(ed);
    /* fp16 under auto: both timed */
    ck_assert_msg(engine(&gd, &p, &pa, TP_PREC_FP16, ep, 1, TP_DECODE_AUTO, &ed, &e) == TP_OK, "%s", e.msg);
    tp_engine_decode_kernel(ed, &note, NULL);
    ck_assert_msg(strstr(note, "timed at build") != NULL, "%s", note);
    printf("persistent under auto (case 0, fp16): %s\n", note);
    tp_engine_destroy(ed);
    /* the graph alone when not asked */
    ck_assert(engine(&gd, &p, &pb, TP_PREC_FP16, ep, 1, TP_DECODE_GRAPH, &ed, &e) == TP_OK);
    ck_assert_int_eq(tp_engine_decode_kernel(ed, &note, NULL), 0);
    tp_engine_destroy(ed);
    tp_engine_destroy(ep);
    tp_plan_free(&pb);
    tp_plan_free(&pa);
    tp_plan_free(&pw);
    tp_plan_free(&p3);
    tp_plan_free(&pp);
    tp_graph_free(&g3);
    tp_graph_free(&gd);
    tp_graph_free(&gp);
    tp_params_free(&p);
}
END_TEST

Suite *gpu_persistent_suite(void) {
    Suite *s = suite_create("gpu_persistent");
    TCase *t = tcase_create("persistent");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, test_persistent_fp16, 0, 5);
    tcase_add_loop_test(t, test_persistent_bf16, 0, 2);
    tcase_add_loop_test(t, test_persistent_fp8_wo, 0, 5);
    tcase_add_loop_test(t, test_persistent_fp8, 0, 4);
    tcase_add_loop_test(t, test_persistent_batch, 0, (int)(sizeof BATCHED / sizeof BATCHED[0]));
    tcase_add_test(t, test_persistent_refusals);
    suite_add_tcase(s, t);
    return s;
}
