/* test_gpu_tensor_parallel.c: tensor-parallel decoder engines (cuda_engine.h tp_engine_build_tp) on 2 and 4 GPUs
 * against the CPU's whole model (itself equal to the CPU's lockstep ranks, tests/test_tensor_parallel.c) and
 * against the same model on one GPU: the prefill's logits, decode steps over the sharded KV caches, greedy
 * decoding in the ranks' CUDA graphs and eagerly, in fp32, fp16 and bf16. A Llama-like model with every bias on
 * (q/k/v, o_proj, the MLP's: a row-parallel bias added by more than one rank would show), 2N heads over N KV
 * heads at TP N (2 heads over 1 KV head on each rank), head dim 64 (the prefill runs the flash kernel). A case that
 * needs more GPUs than the machine has says so and is not run; the refusals run on any. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/stats.h"
#include "exec/cpu/cpu_exec.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "models/decoder.h"
#include "planner/plan.h"
#include "planner/policy.h"

enum { MAXN = 4, G = 5, MAXB = 3, T = 37 };
static int B, N = 2; /* batch and ranks of the case */

static tp_model model(void) {
    tp_model m;
    tp_error e = {0};
    ck_assert_msg(tp_model_preset("llama-tiny", &m, &e) == TP_OK, "%s", e.msg);
    /* through a copy: writing the configuration through a cast of cfg.bytes breaks C's aliasing rules, and gcc -O2
     * moved those stores past the return's copy of m (2026-11-25: the engines saw the preset's head dim 16) */
    tp_decoder_config c;
    memcpy(&c, m.cfg.bytes, sizeof c);
    c.hidden = 256, c.inter = 688, c.layers = 2, c.heads = 2 * N, c.kv_heads = N, c.head_dim = 64; /* GQA 2 over 1 on each rank */
    c.vocab = 1000, c.qkv_bias = 1, c.o_bias = 1, c.mlp_bias = 1;
    c.prompt = T;
    c.gen = G;
    memcpy(m.cfg.bytes, &c, sizeof c);
    return m;
}

/* the step's graph: the whole model (rank -1) or rank r of N */
static tp_graph step(const tp_model *m, const tp_params *p, int t, int past, int rank) {
    tp_graph g;
    tp_error e = {0};
    const tp_step_shape s = {B, t, past, T + G, 0, rank < 0 ? 0 : rank, rank < 0 ? 0 : N};
    ck_assert_msg(tp_model_build_step(m, p, &s, &g, &e) == TP_OK, "%s", e.msg);
    return g;
}

static int sm_of(void) {
    tp_gpu_info gi;
    tp_error e = {0};
    ck_assert_msg(tp_gpu_query(0, &gi, &e) == TP_OK, "%s", e.msg);
    return gi.sm;
}

/* the N ranks' engines of one step; plans in pl[MAXN] */
static tp_engine *tp_engine_of(tp_graph *g, tp_params *p, tp_plan *pl, tp_precision prec, int graph,
                               const tp_engine *share, int feed) {
    tp_error e = {0};
    tp_policy pol;
    tp_policy_default(&pol, prec);
    const tp_graph *gs[MAXN];
    const tp_params *ps[MAXN];
    const tp_plan *pls[MAXN];
    for (int r = 0; r < N; r++) {
        ck_assert_msg(tp_plan_build_policy(&g[r], &pol, sm_of(), &pl[r], &e) == TP_OK, "%s", e.msg);
        gs[r] = &g[r], ps[r] = &p[r], pls[r] = &pl[r];
    }
    tp_engine_options eo = {.device = 0, .use_graph = graph, .share = share, .feed_argmax = feed};
    tp_engine *en = NULL;
    ck_assert_msg(tp_engine_build_tp(gs, ps, pls, N, &eo, &en, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(tp_engine_tp_size(en), N);
    ck_assert_ptr_nonnull(tp_engine_nccl(en));
    return en;
}

static tp_engine *one_gpu(const tp_graph *g, const tp_params *p, tp_plan *plan, tp_precision prec) {
    tp_error e = {0};
    tp_policy pol;
    tp_policy_default(&pol, prec);
    ck_assert_msg(tp_plan_build_policy(g, &pol, sm_of(), plan, &e) == TP_OK, "%s", e.msg);
    tp_engine_options eo = {.device = 0, .use_graph = 1};
    tp_engine *en = NULL;
    ck_assert_msg(tp_engine_build(g, p, plan, &eo, &en, &e) == TP_OK, "%s", e.msg);
    return en;
}

static double rel(const float *got, const float *want, int rows, int V) {
    tp_accuracy a;
    tp_accuracy_compute(got, want, rows, V, &a);
    ck_assert_int_eq(a.nonfinite, 0);
    return a.rel_l2;
}

static int gpus(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    return n;
}

static void run_case(int batch, tp_precision prec) {
    B = batch;
    const double tol = prec == TP_PREC_FP32 ? 1e-4 : prec == TP_PREC_FP16 ? 5e-3 : 3e-2;
    tp_model m = model();
    const int V = 1000;
    tp_error e = {0};
    tp_params p = {0}, rp[MAXN] = {{0}};
    ck_assert_msg(tp_model_params_init(&m, 11, 1, &p, &e) == TP_OK, "%s", e.msg);
    for (int r = 0; r < N; r++) ck_assert_int_eq(tp_model_shard_params(&m, &p, r, N, &rp[r], &e), TP_OK);
    float ids[MAXB * T], tok[(G + 1) * MAXB];
    tp_rng rg;
    tp_rng_seed(&rg, 17);
    for (int i = 0; i < B * T; i++) ids[i] = (float)(tp_rng_u64(&rg) % (uint64_t)V);
    float *want = malloc(sizeof(float) * B * V), *got = malloc(sizeof(float) * B * V), *one = malloc(sizeof(float) * B * V);
    float *want_steps = malloc(sizeof(float) * G * B * V);
    int32_t arg[MAXB];

    /* the CPU's whole model: the prefill, then greedy steps */
    tp_graph gp = step(&m, &p, T, 0, -1), gd = step(&m, &p, 1, T, -1);
    tp_cpu_session s = {0};
    ck_assert_msg(tp_cpu_run_session(&gp, &p, &s, ids, want, &e) == TP_OK, "%s", e.msg);
    tp_cpu_argmax(want, arg, B, V);
    for (int b = 0; b < B; b++) tok[b] = (float)arg[b];
    for (int st = 0; st < G; st++) {
        ck_assert_int_eq(tp_cpu_run_session(&gd, &p, &s, tok + st * B, want_steps + (size_t)st * B * V, &e), TP_OK);
        tp_cpu_argmax(want_steps + (size_t)st * B * V, arg, B, V);
        for (int b = 0; b < B; b++) tok[(st + 1) * B + b] = (float)arg[b];
    }
    tp_cpu_session_free(&s);

    /* TP 2: prefill, decode steps fed the CPU's tokens (one engine sharing the prefill's weights and caches) */
    tp_graph rgp[MAXN], rgd[MAXN];
    for (int r = 0; r < N; r++) rgp[r] = step(&m, &rp[r], T, 0, r), rgd[r] = step(&m, &rp[r], 1, T, r);
    tp_plan pp[MAXN], pd[MAXN], pg[MAXN], pe[MAXN], p1;
    tp_engine *ep = tp_engine_of(rgp, rp, pp, prec, 1, NULL, 0);
    tp_engine *ed = tp_engine_of(rgd, rp, pd, prec, 1, ep, 0);
    ck_assert_msg(tp_engine_set_input(ep, ids, &e) == TP_OK && tp_engine_forward(ep, &e) == TP_OK &&
                      tp_engine_get_output(ep, got, &e) == TP_OK, "%s", e.msg);
    double worst = rel(got, want, B, V);
    ck_assert_msg(worst <= tol, "TP %d %s prefill: rel L2 %.3e > %.1e", N, tp_precision_name(prec), worst, tol);
    /* the same model on one GPU: TP 2 within the format's tolerance of TP 1 */
    tp_engine *e1 = one_gpu(&gp, &p, &p1, prec);
    ck_assert_msg(tp_engine_set_input(e1, ids, &e) == TP_OK && tp_engine_forward(e1, &e) == TP_OK &&
                      tp_engine_get_output(e1, one, &e) == TP_OK, "%s", e.msg);
    const double d1 = rel(got, one, B, V);
    ck_assert_msg(d1 <= tol, "TP %d against TP 1 (%s): rel L2 %.3e > %.1e", N, tp_precision_name(prec), d1, tol);
    for (int st = 0; st < G; st++) {
        ck_assert_msg(tp_engine_set_input(ed, tok + st * B, &e) == TP_OK && tp_engine_forward(ed, &e) == TP_OK &&
                          tp_engine_get_output(ed, got, &e) == TP_OK, "%s", e.msg);
        const double d = rel(got, want_steps + (size_t)st * B * V, B, V);
        ck_assert_msg(d <= tol, "TP %d %s decode step %d: rel L2 %.3e > %.1e", N, tp_precision_name(prec), st, d, tol);
        worst = fmax(worst, d);
    }
    /* greedy decoding in the ranks' graphs, and eagerly (lockstep launches): the CPU's tokens in fp32 */
    tp_engine *eg = tp_engine_of(rgd, rp, pg, prec, 1, ep, 1);
    tp_engine *ee = tp_engine_of(rgd, rp, pe, prec, 0, ep, 1);
    float gtok[G * MAXB], etok[G * MAXB];
    double ms[G], ems[G];
    ck_assert_msg(tp_engine_forward(ep, &e) == TP_OK && tp_engine_feed_argmax(ep, eg, &e) == TP_OK &&
                      tp_engine_decode(eg, G, ms, gtok, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_engine_forward(ep, &e) == TP_OK && tp_engine_feed_argmax(ep, ee, &e) == TP_OK &&
                      tp_engine_decode(ee, G, ems, etok, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(memcmp(gtok, etok, sizeof(float) * G * B) == 0, "TP %s: graph and eager decoding chose other tokens",
                  tp_precision_name(prec));
    int same = 0;
    for (int i = 0; i < G * B; i++) same += gtok[i] == tok[B + i];
    printf("TP %d (B %d, T %d) %s: logits rel L2 <= %.3e against the CPU (prefill and %d steps), %.3e against one "
           "GPU; greedy tokens %d/%d equal to the CPU's; a step %.3f ms in the graphs, %.3f eager\n", N, B, T,
           tp_precision_name(prec), worst, G, d1, same, G * B, ms[G - 1], ems[G - 1]);
    if (prec == TP_PREC_FP32) ck_assert_int_eq(same, G * B);
    tp_engine_destroy(ee);
    tp_engine_destroy(eg);
    tp_engine_destroy(e1);
    tp_engine_destroy(ed);
    tp_engine_destroy(ep);
    tp_plan_free(&p1);
    for (int r = 0; r < N; r++) {
        tp_plan_free(&pp[r]), tp_plan_free(&pd[r]), tp_plan_free(&pg[r]), tp_plan_free(&pe[r]);
        tp_graph_free(&rgp[r]), tp_graph_free(&rgd[r]);
        tp_params_free(&rp[r]);
    }
    tp_graph_free(&gd);
    tp_graph_free(&gp);
    tp_params_free(&p);
    free(want);
    free(got);
    free(one);
    free(want_steps);
}

static const int BATCH[] = {3, 1};
static const tp_precision PREC[] = {TP_PREC_FP32, TP_PREC_FP16, TP_PREC_BF16};

/* cases 0-5 at TP 2, 6-11 at TP 4 */
START_TEST(test_tp) {
    N = _i < 6 ? 2 : 4;
    if (gpus() < N) {
        printf("gpu_tensor_parallel: %d GPU(s); the TP %d checks need %d (not run)\n", gpus(), N, N);
        return;
    }
    run_case(BATCH[_i % 2], PREC[_i % 6 / 2]);
}
END_TEST

/* More ranks than GPUs, a whole-model graph given to the tensor-parallel build, and a rank's graph given to the
 * one-GPU build: refused, by name. */
START_TEST(test_refusals) {
    B = 1;
    N = 2;
    tp_model m = model();
    tp_error e = {0};
    tp_params p = {0}, rp[MAXN] = {{0}};
    ck_assert_int_eq(tp_model_params_init(&m, 1, 0, &p, &e), TP_OK);
    for (int r = 0; r < N; r++) ck_assert_int_eq(tp_model_shard_params(&m, &p, r, N, &rp[r], &e), TP_OK);
    tp_graph rg[MAXN];
    for (int r = 0; r < N; r++) rg[r] = step(&m, &rp[r], 1, 0, r);
    tp_plan pl[MAXN];
    tp_policy pol;
    tp_policy_default(&pol, TP_PREC_FP16);
    const tp_graph *gs[MAXN] = {&rg[0], &rg[1], NULL, NULL};
    const tp_params *ps[MAXN] = {&rp[0], &rp[1], NULL, NULL};
    const tp_plan *pls[MAXN] = {&pl[0], &pl[1], NULL, NULL};
    for (int r = 0; r < N; r++) ck_assert_int_eq(tp_plan_build_policy(&rg[r], &pol, sm_of(), &pl[r], &e), TP_OK);
    tp_engine *en = NULL;
    tp_engine_options eo = {.device = gpus(), .use_graph = 1}; /* GPUs gpus() .. : none there */
    ck_assert_int_eq(tp_engine_build_tp(gs, ps, pls, N, &eo, &en, &e), TP_ERR_NO_GPU);
    ck_assert_ptr_nonnull(strstr(e.msg, "--tp 2"));
    eo.device = 0;
    ck_assert_int_eq(tp_engine_build(&rg[1], &rp[1], &pl[1], &eo, &en, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "rank 1 of 2"));
    const tp_graph *swapped[MAXN] = {&rg[1], &rg[0], NULL, NULL};
    ck_assert_int_eq(tp_engine_build_tp(swapped, ps, pls, N, &eo, &en, &e), TP_ERR_ARG);
    ck_assert_ptr_null(en);
    for (int r = 0; r < N; r++) {
        tp_plan_free(&pl[r]);
        tp_graph_free(&rg[r]);
        tp_params_free(&rp[r]);
    }
    tp_params_free(&p);
}
END_TEST

Suite *gpu_tensor_parallel_suite(void) {
    Suite *s = suite_create("gpu_tensor_parallel");
    TCase *t = tcase_create("tensor_parallel");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, test_refusals);
    tcase_add_loop_test(t, test_tp, 0, 12);
    suite_add_tcase(s, t);
    return s;
}
