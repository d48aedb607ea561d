/* test_gpu_decoder_engine.c: decoder engines on the GPU against the CPU executor (itself checked against HF
 * transformers in tests/test_decoder.c): the prefill's logits, then decode steps over the KV cache the decode
 * engine shares with the prefill engine (each step's logits against the CPU session's), greedy decoding inside
 * the graph (tp_engine_decode) against the CPU's greedy tokens, and eager launches against the graph. Two models:
 * Llama-like with q/k/v bias and GQA (head dim 64: the prefill runs the flash kernel), Gemma-like with MQA, head dim
 * 256, 1 + w RMSNorm, GeGLU and tied embeddings (the decode kernel runs the prefill too). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/stats.h"
#include "exec/cpu/cpu_exec.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "exec/cuda/gemm/gemm_sm90.h"
#include "exec/cuda/vendor/gemm_cutlass.h"
#include "models/decoder.h"
#include "planner/plan.h"
#include "planner/policy.h"

enum { G = 6, MAXB = 12, MAXT = 200 };
/* per case: the model (0 Llama-like, 1 Gemma-like), batch, prompt; batch 12 decodes more than 8 rows a step (a
 * GEMM, not the GEMV: for fp8-wo the weights' fp16 copy) */
static const int CASES[][3] = {{0, 3, 37}, {1, 3, 37}, {2, 8, 200}, {0, 1, 37}, {1, 1, 37}, {0, 12, 37}};
static int B, T;

static tp_model model_case(int k) {
    tp_model m;
    tp_error e = {0};
    ck_assert_msg(tp_model_preset("llama-tiny", &m, &e) == TP_OK, "%s", e.msg);
    tp_decoder_config cc, *c = &cc; /* a copy: see test_gpu_tensor_parallel.c model() */
    memcpy(&cc, m.cfg.bytes, sizeof cc);
    if (k == 0 || k == 2) { /* Llama-like, Qwen2's q/k/v bias, GQA 4 over 2, head dim 64, llama3 RoPE (the preset's) */
        c->hidden = 256, c->inter = 688, c->layers = 2, c->heads = 4, c->kv_heads = 2, c->head_dim = 64;
        c->vocab = 1000, c->qkv_bias = 1;
    } else { /* Gemma-like */
        c->arch = TP_DEC_GEMMA, c->hidden = 256, c->inter = 512, c->layers = 2, c->heads = 2, c->kv_heads = 1;
        c->head_dim = 256, c->vocab = 777, c->act = TP_ACT_GELU_TANH, c->tie = 1, c->qkv_bias = 0;
        c->rope = (tp_rope){TP_ROPE_DEFAULT, 10000.0, 0, 0, 0, 0};
    }
    if (k == 2) c->vocab = 128256; /* Llama 3's vocabulary: the LM head's GEMM at its real width */
    c->prompt = T;
    c->gen = G;
    memcpy(m.cfg.bytes, &cc, sizeof cc);
    return m;
}

/* m's synthesized weights (seed 11, non-zero biases) into p; returns its vocabulary */
static int model_params(const tp_model *m, tp_params *p) {
    tp_error e = {0};
    ck_assert_msg(tp_model_params_init(m, 11, 1, p, &e) == TP_OK, "%s", e.msg);
    tp_decoder_config cfg;
    memcpy(&cfg, m->cfg.bytes, sizeof cfg);
    return cfg.vocab;
}

static tp_graph step(const tp_model *m, const tp_params *p, int t, int past, int all) {
    tp_graph g;
    tp_error e = {0};
    const tp_step_shape s = {B, t, past, T + G, all, 0, 0};
    ck_assert_msg(tp_model_build_step(m, p, &s, &g, &e) == TP_OK, "%s", e.msg);
    return g;
}

static int g_groups; /* tp_engine_options.gemv_groups of the decode engines built next */
static int g_no_pdl; /* tp_engine_options.no_pdl of the engines built next */
static const int *g_choice; /* tp_engine_options.gemm_choice of the engines built next */
static int g_kv8;            /* --kv-cache fp8 (tp_policy.kv_fp8) in the plans built next, CPU and GPU */
static const float *g_amax;  /* tp_engine_options.act_amax of the engines built next (decode engines: NULL, the
                                prefill engine's amax by value name) */

/* plan (the default policy of prec on this GPU, an FP8 KV cache when kv8) and an engine of g with options eo */
static tp_engine *plan_and_build(const tp_graph *g, const tp_params *p, tp_plan *plan, tp_precision prec, int kv8,
                                 const tp_engine_options *eo) {
    tp_error e = {0};
    tp_policy pol;
    tp_policy_default(&pol, prec);
    pol.kv_fp8 = kv8;
    tp_gpu_info gi;
    ck_assert_msg(tp_gpu_query(0, &gi, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_plan_build_policy(g, &pol, gi.sm, plan, &e) == TP_OK, "%s", e.msg);
    tp_engine *en = NULL;
    ck_assert_msg(tp_engine_build(g, p, plan, eo, &en, &e) == TP_OK, "%s", e.msg);
    return en;
}

static tp_engine *engine(const tp_graph *g, const tp_params *p, tp_plan *plan, tp_precision prec, int graph,
                         const tp_engine *share, int feed) {
    const tp_engine_options eo = {.device = 0, .use_graph = graph, .share = share, .feed_argmax = feed,
                                  .gemv_groups = g_groups, .no_pdl = g_no_pdl, .gemm_choice = g_choice,
                                  .act_amax = share ? NULL : g_amax};
    return plan_and_build(g, p, plan, prec, g_kv8, &eo);
}

static double rel(const float *got, const float *want, int rows, int V, int *agree) {
    tp_accuracy a;
    tp_accuracy_compute(got, want, rows, V, &a);
    ck_assert_int_eq(a.nonfinite, 0);
    *agree = (int)lround(a.top1_agree * rows);
    return a.rel_l2;
}

/* The prefill of case k with the GEMM choices `choice` given (tp_engine_options.gemm_choice, whatever the timing):
 * every op given one of the n_forced choices from `forced` on must run the call kind `kname` and report its choice; its logits against the emulation (want, within tol) and
 * against the engine built with its own timed choices (got: printed). Then its choices read back (an engine file's
 * round trip) build an engine running the same kernels, bit for bit where every op's kernel agrees (the attention is
 * chosen by time in each build). `what` names the case in messages. Returns how many ops were forced. */
static int forced_prefill(int k, const tp_graph *gp, const tp_params *p, tp_precision prec, int *choice, int forced,
                          int n_forced, const char *kname, const float *ids, const float *want, const float *got, int V, double tol,
                          const char *what) {
    tp_error e = {0};
    g_choice = choice;
    tp_plan pf;
    tp_engine *ef = engine(gp, p, &pf, prec, 1, NULL, 0);
    g_choice = NULL;
    int n = 0;
    for (int i = 0; i < gp->n_ops; i++) {
        if (choice[i] < forced || choice[i] >= forced + n_forced) continue;
        const char *kn = NULL;
        tp_engine_op_call(ef, i, &kn);
        ck_assert_msg(kn && strcmp(kn, kname) == 0, "case %d %s: %s runs %s", k, what, gp->ops[i].layer, kn);
        ck_assert_int_eq(tp_engine_gemm_choice(ef, i), choice[i]);
        n++;
    }
    float *fg = malloc(sizeof(float) * B * V), *fr = malloc(sizeof(float) * B * V);
    ck_assert_ptr_nonnull(fg);
    ck_assert_ptr_nonnull(fr);
    ck_assert_msg(tp_engine_set_input(ef, ids, &e) == TP_OK && tp_engine_forward(ef, &e) == TP_OK &&
                      tp_engine_get_output(ef, fg, &e) == TP_OK, "%s", e.msg);
    int ag;
    const double dg = rel(fg, want, B, V, &ag), dd = rel(fg, got, B, V, &ag);
    printf("decoder case %d (B %d, T %d) %s prefill, %d ops %s: rel L2 %.3e against the emulation, %.3e against the "
           "engine's own choices\n", k, B, T, tp_precision_name(prec), n, what, dg, dd);
    ck_assert_int_gt(n, 0);
    ck_assert_msg(dg <= tol, "case %d %s: prefill rel L2 %.3e > %.1e", k, what, dg, tol);
    for (int i = 0; i < gp->n_ops; i++) choice[i] = tp_engine_gemm_choice(ef, i);
    g_choice = choice;
    tp_plan pr;
    tp_engine *er = engine(gp, p, &pr, prec, 1, NULL, 0);
    g_choice = NULL;
    ck_assert_msg(tp_engine_set_input(er, ids, &e) == TP_OK && tp_engine_forward(er, &e) == TP_OK &&
                      tp_engine_get_output(er, fr, &e) == TP_OK, "%s", e.msg);
    int same_kernels = 1;
    for (int i = 0; i < gp->n_ops; i++) {
        const char *ka = NULL, *kb = NULL;
        tp_engine_op_call(ef, i, &ka);
        tp_engine_op_call(er, i, &kb);
        if (choice[i] >= forced && choice[i] < forced + n_forced)
            ck_assert_msg(kb && strcmp(kb, kname) == 0, "case %d %s: rebuilt, %s runs %s", k, what, gp->ops[i].layer,
                          kb);
        same_kernels &= ka && kb && strcmp(ka, kb) == 0;
    }
    if (same_kernels)
        ck_assert_msg(memcmp(fr, fg, sizeof(float) * B * V) == 0, "case %d %s: rebuilt from its choices, it differs",
                      k, what);
    else
        ck_assert_msg(rel(fr, fg, B, V, &ag) <= 1e-2, "case %d %s: rebuilt from its choices, it differs", k, what);
    tp_engine_destroy(er);
    tp_plan_free(&pr);
    tp_engine_destroy(ef);
    tp_plan_free(&pf);
    free(fg);
    free(fr);
    return n;
}

static void run_case(int kc, tp_precision prec) {
    const int k = CASES[kc][0];
    B = CASES[kc][1];
    T = CASES[kc][2];
    const int wo = prec == TP_PREC_FP8_WO || prec == TP_PREC_NVFP4_WO;
    /* formats whose linears quantize their activations too: W8A8 FP8, fp8-block, and the block formats (emulated
     * on Hopper) */
    const int qact = prec == TP_PREC_FP8 || prec == TP_PREC_FP8_BLOCK || prec == TP_PREC_MXFP8 ||
                     prec == TP_PREC_NVFP4 || prec == TP_PREC_MXFP4;
    const int fp4 = prec == TP_PREC_NVFP4 || prec == TP_PREC_MXFP4, kv8 = g_kv8;
    /* W8A8: the GPU's and the CPU's fp16 activations differ in the last bit here and there, and where that moves one
     * across an E4M3 rounding midpoint the input of the next GEMM differs by an E4M3 step (1/8): up to ~3e-2 on the
     * Llama-like model (H100, bench/results/2026-11-26_h100_gpu_tests_decoder_engine_w8a8.log). The check that
     * the engine quantizes at all is below: it must be much closer to the emulation than the emulation is to fp32. */
    const double tol = prec == TP_PREC_FP32         ? 1e-4
                       : kv8 && !qact                ? 3e-2 /* the cache's E4M3 codes: last-bit flips as above */
                       : prec == TP_PREC_FP16 || wo ? 5e-3
                       : fp4                         ? 0.15
                       : qact                        ? 6e-2
                                                     : 3e-2;
    tp_model m = model_case(k);
    tp_error e = {0};
    tp_params p = {0};
    const int V = model_params(&m, &p);
    float ids[MAXB * MAXT], tok[(G + 1) * MAXB];
    tp_rng r;
    tp_rng_seed(&r, 5 + (uint64_t)k);
    for (int i = 0; i < B * T; i++) ids[i] = (float)(tp_rng_u64(&r) % (uint64_t)V);
    float *want = malloc(sizeof(float) * B * V), *got = malloc(sizeof(float) * B * V);
    float *want_steps = malloc(sizeof(float) * G * B * V);
    int32_t arg[MAXB];

    /* the CPU: the prefill, then greedy steps (the reference logits of each); weight-only formats against the CPU's
     * emulation of their plans (the weights' E4M3 or NVFP4 values, fp16 activations), W8A8 FP8 and the block formats
     * too (the inputs of their linears in the format, static scales calibrated on the GPU over this prompt, the
     * decode steps' by value name) */
    tp_graph gp = step(&m, &p, T, 0, 0), gd = step(&m, &p, 1, T, 0);
    tp_cpu_session s = {0};
    tp_plan cpp = {0}, cpd = {0};
    const int emu = wo || qact || kv8;
    float *amax_p = NULL, *amax_d = NULL;
    if (qact || kv8) {
        tp_gpu_info gi;
        ck_assert_int_eq(tp_gpu_query(0, &gi, &e), TP_OK);
        amax_p = malloc(sizeof(float) * (size_t)gp.n_values);
        amax_d = malloc(sizeof(float) * (size_t)gd.n_values);
        ck_assert_msg(tp_calibrate_max(&gp, &p, 0, gi.sm, ids, amax_p, &e) == TP_OK, "%s", e.msg);
        for (int v = 0; v < gd.n_values; v++) {
            amax_d[v] = NAN;
            for (int u = 0; u < gp.n_values; u++)
                if (strcmp(gd.values[v].name, gp.values[u].name) == 0) amax_d[v] = amax_p[u];
        }
    }
    if (emu) {
        tp_policy pol;
        tp_policy_default(&pol, prec);
        pol.kv_fp8 = kv8;
        ck_assert_int_eq(tp_plan_build_policy(&gp, &pol, 90, &cpp, &e), TP_OK);
        ck_assert_int_eq(tp_plan_build_policy(&gd, &pol, 90, &cpd, &e), TP_OK);
    }
    ck_assert_msg((emu ? tp_cpu_run_session_emulated(&gp, &p, &cpp, amax_p, &s, ids, want, &e)
                       : tp_cpu_run_session(&gp, &p, &s, ids, want, &e)) == TP_OK, "%s", e.msg);
    tp_cpu_argmax(want, arg, B, V);
    for (int b = 0; b < B; b++) tok[b] = (float)arg[b];
    for (int st = 0; st < G; st++) {
        float *ws = want_steps + (size_t)st * B * V;
        ck_assert_msg((emu ? tp_cpu_run_session_emulated(&gd, &p, &cpd, amax_d, &s, tok + st * B, ws, &e)
                           : tp_cpu_run_session(&gd, &p, &s, tok + st * B, ws, &e)) == TP_OK, "%s", e.msg);
        tp_cpu_argmax(want_steps + (size_t)st * B * V, arg, B, V);
        for (int b = 0; b < B; b++) tok[(st + 1) * B + b] = (float)arg[b];
    }
    tp_cpu_session_free(&s);
    tp_plan_free(&cpp);
    tp_plan_free(&cpd);

    /* the GPU: prefill engine, decode engine sharing its weights and cache, fed the CPU's tokens; at batch 1 the
     * decode engine runs q/k/v and gate/up as one GEMV each (forced: the layout's path, whatever the timing) */
    g_groups = B == 1 ? 1 : 0;
    g_amax = amax_p;
    tp_plan pp, pd, pg, pe;
    tp_engine *ep = engine(&gp, &p, &pp, prec, 1, NULL, 0);
    tp_engine *ed = engine(&gd, &p, &pd, prec, 1, ep, 0);
    if (prec == TP_PREC_FP8_BLOCK) { /* which kernel each decode linear runs: the block-scaled GEMV at <= 8 rows */
        int gemv = 0, grouped = 0, lins = 0;
        for (int i = 0; i < gd.n_ops; i++) {
            if (gd.ops[i].kind != TP_OP_LINEAR || pd.op_prec[i] != TP_PREC_FP8_BLOCK) continue;
            const char *kn = NULL;
            tp_engine_op_call(ed, i, &kn);
            lins++;
            gemv += strcmp(kn, "gemv_fp8_block") == 0;
            grouped += strcmp(kn, "gemv_group") == 0;
            if (B > 8) ck_assert_msg(strcmp(kn, "gemm_fp8_block") == 0, "case %d: %s runs %s", k, gd.ops[i].layer, kn);
        }
        printf("decoder case %d (B %d) fp8-block decode: %d linears, %d as the block-scaled GEMV, %d in sibling "
               "groups\n", k, B, lins, gemv, grouped);
        ck_assert_int_gt(lins, 0);
        if (B <= 8) ck_assert_msg(gemv + grouped == lins, "case %d: %d of %d fp8-block decode linears run another "
                                  "kernel than the block-scaled GEMV", k, lins - gemv - grouped, lins);
        if (B == 1) ck_assert_msg(grouped > 0, "case %d: no fp8-block sibling group at batch 1", k);
    }
    /* the decode engine reads the prefill engine's weights (E4M3 ones with their scales too): none of its own */
    ck_assert_msg(tp_engine_weight_bytes(ed) == 0.0, "case %d %s: the decode engine uploaded %.0f bytes of weights", k,
                  tp_precision_name(prec), tp_engine_weight_bytes(ed));
    ck_assert_msg(tp_engine_set_input(ep, ids, &e) == TP_OK && tp_engine_forward(ep, &e) == TP_OK &&
                      tp_engine_get_output(ep, got, &e) == TP_OK, "%s", e.msg);
    int agree;
    double worst = rel(got, want, B, V, &agree);
    if (prec == TP_PREC_FP32) { /* the GPU FP32 reference tprof bench compares against (tp_gpu_reference) */
        tp_gpu_info gi;
        ck_assert_int_eq(tp_gpu_query(0, &gi, &e), TP_OK);
        float *gr = malloc(sizeof(float) * B * V);
        ck_assert_msg(tp_gpu_reference(&gp, &p, gi.sm, ids, gr, &e) == TP_OK, "%s", e.msg);
        const double dr = rel(gr, want, B, V, &agree);
        printf("decoder case %d (B %d, T %d): the GPU FP32 reference's logits rel L2 %.3e against the CPU\n", k, B, T, dr);
        ck_assert_msg(dr <= tol, "case %d: tp_gpu_reference rel L2 %.3e", k, dr);
        free(gr);
    }
    ck_assert_msg(worst <= tol, "case %d %s prefill: rel L2 %.3e > %.1e", k, tp_precision_name(prec), worst, tol);
    if (prec == TP_PREC_FP8_WO && tp_cutlass_available(NULL, 0)) {
        /* CUTLASS's mixed-input GEMM (vendor/gemm_cutlass.h) given for every prefill linear it takes (weight-only
         * FP8, no bias: the Llama-like model's o/gate/up/down, the Gemma-like one's q/k/v too), whatever the timing,
         * its two tile shapes in turn: the same exact 16-bit weights as the dequantized path, so the same tolerance */
        int *choice = malloc(sizeof(int) * (size_t)gp.n_ops);
        ck_assert_ptr_nonnull(choice);
        for (int i = 0; i < gp.n_ops; i++) {
            const tp_op *o = &gp.ops[i];
            choice[i] = o->kind == TP_OP_LINEAR && pp.op_prec[i] == TP_PREC_FP8_WO && o->n_in < 3 && o->gemm_m > 8 &&
                                pp.value_dt[o->in[1]] == TP_E4M3 &&
                                tp_cutlass_wo_shape_ok(pp.value_dt[o->in[0]], o->gemm_m, o->gemm_n, o->gemm_k)
                            ? TP_GEMM_CHOICE_CUTLASS_WO + i % TP_CUTLASS_TILES
                            : -1;
        }
        forced_prefill(k, &gp, &p, prec, choice, TP_GEMM_CHOICE_CUTLASS_WO, TP_CUTLASS_TILES, "gemm_cutlass_wo", ids,
                       want, got, V, tol, "through CUTLASS's mixed-input GEMM");
        free(choice);
    }
    if (prec == TP_PREC_FP8 && tpk_gemm_sm90_supported()) {
        /* sibling linears (q/k/v with the Llama-like model's biases, gate/up) as one tprof FP8 GEMM
         * (tpk_gemm_sm90_fp8_group) on the RMSNorm's E4M3 output, given on every group's leader whatever the
         * timing, with the group layout on (--gemv-groups auto) */
        int *lead = malloc(sizeof(int) * (size_t)gp.n_ops), *next = malloc(sizeof(int) * (size_t)gp.n_ops);
        int *choice = malloc(sizeof(int) * (size_t)gp.n_ops);
        ck_assert(lead && next && choice);
        tp_plan_sibling_groups(&gp, &pp, lead, next);
        for (int i = 0; i < gp.n_ops; i++) choice[i] = lead[i] == i ? TP_GEMM_CHOICE_SM90_GROUP : -1;
        const int keep = g_groups;
        g_groups = 2;
        forced_prefill(k, &gp, &p, prec, choice, TP_GEMM_CHOICE_SM90_GROUP, 1, "gemm_sm90_group", ids, want, got, V,
                       tol, "with sibling linears as one FP8 GEMM");
        g_groups = keep;
        free(lead);
        free(next);
        free(choice);
    }
    if (qact || kv8) {
        /* the quantization shows: FP32 is further from the emulation than the engine is, by 2x with fp16
         * activations (fp8). bf16 ones (fp8-block, the block formats) carry 8 significant bits against fp16's 11,
         * so a last-bit difference between CPU and GPU crosses an E4M3 / E2M1 rounding midpoint 8x as often; and
         * fp8-block's native GEMM accumulates in the FP8 tensor cores' reduced precision (not the emulation's
         * fp32): measured 0.48 (nvfp4) and 0.57 (fp8-block) at worst on an H100
         * (bench/results/2026-11-26_h100_gpu_tests_decoder_engine_blockfmt.log); an engine that skipped the
         * quantization would be at about 1 */
        const double ratio = prec == TP_PREC_FP8 || (kv8 && !qact) ? 0.5 : 0.75;
        float *f32 = malloc(sizeof(float) * B * V);
        ck_assert_msg(tp_cpu_run(&gp, &p, ids, f32, &e) == TP_OK, "%s", e.msg);
        const double d32 = rel(f32, want, B, V, &agree);
        printf("decoder case %d (B %d, T %d) %s%s prefill: engine vs emulation rel L2 %.3e, fp32 vs emulation %.3e\n",
               k, B, T, tp_precision_name(prec), kv8 ? " + fp8 KV cache" : "", worst, d32);
        ck_assert_msg(worst < ratio * d32, "case %d %s: the engine (%.3e) is not much closer to the format's "
                      "emulation than fp32 is (%.3e)", k, tp_precision_name(prec), worst, d32);
        free(f32);
    }
    for (int st = 0; st < G; st++) {
        ck_assert_msg(tp_engine_set_input(ed, tok + st * B, &e) == TP_OK && tp_engine_forward(ed, &e) == TP_OK &&
                          tp_engine_get_output(ed, got, &e) == TP_OK, "%s", e.msg);
        double d = rel(got, want_steps + (size_t)st * B * V, B, V, &agree);
        ck_assert_msg(d <= tol, "case %d %s decode step %d: rel L2 %.3e > %.1e", k, tp_precision_name(prec), st, d, tol);
        worst = fmax(worst, d);
    }
    /* one step more than the cache holds is refused */
    ck_assert_int_eq(tp_engine_set_past(ed, T + G, &e), TP_ERR_ARG);

    /* greedy decoding inside the graph, and the same without a graph (eager launches); at batch 1 the eager
     * engine keeps the linears apart, so the two also compare the grouped GEMVs with the separate ones */
    g_groups = B == 1 ? 1 : 0;
    tp_engine *eg = engine(&gd, &p, &pg, prec, 1, ep, 1);
    g_groups = 0;
    tp_engine *ee = engine(&gd, &p, &pe, prec, 0, ep, 1);
    float gtok[G * MAXB], etok[G * MAXB];
    double ms[G];
    ck_assert_msg(tp_engine_forward(ep, &e) == TP_OK && tp_engine_feed_argmax(ep, eg, &e) == TP_OK &&
                      tp_engine_decode(eg, G, ms, gtok, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_engine_forward(ep, &e) == TP_OK && tp_engine_feed_argmax(ep, ee, &e) == TP_OK &&
                      tp_engine_decode(ee, G, ms, etok, &e) == TP_OK, "%s", e.msg);
    /* bit for bit where both run the same kernels; with the grouped GEMV (batch 1) the sums' order differs, so
     * there both must match the CPU's tokens in fp32 (below) */
    if (B > 1)
        ck_assert_msg(memcmp(gtok, etok, sizeof(float) * G * B) == 0, "case %d %s: graph and eager decoding chose "
                      "other tokens", k, tp_precision_name(prec));
    int esame = 0;
    for (int i = 0; i < G * B; i++) esame += etok[i] == tok[B + i];
    if (prec == TP_PREC_FP32) ck_assert_int_eq(esame, G * B);
    int same = 0;
    for (int i = 0; i < G * B; i++) same += gtok[i] == tok[B + i];
    printf("decoder case %d (B %d, T %d) %s: logits rel L2 <= %.3e (prefill and %d steps); greedy tokens %d/%d equal to the CPU's; "
           "a step %.3f ms\n", k, B, T, tp_precision_name(prec), worst, G, same, G * B, ms[G - 1]);
    if (prec == TP_PREC_FP32) ck_assert_int_eq(same, G * B);

    /* programmatic dependent launch (pdl.cuh) changes when kernels start, never what they compute: the graph
     * with ordinary edges, running the same GEMM choices (timed selection may pick others in another build),
     * decodes the same tokens and ends with bit-identical logits */
    int total = 0;
    ck_assert_msg(tp_engine_pdl_edges(eg, &total) > 0, "case %d %s: no programmatic edge in the decode graph (%d edges)",
                  k, tp_precision_name(prec), total);
    ck_assert_int_eq(tp_engine_pdl_edges(ee, NULL), -1);
    g_groups = B == 1 ? 1 : 0;
    g_no_pdl = 1;
    int *choice = malloc(sizeof(int) * (size_t)gd.n_ops);
    ck_assert_ptr_nonnull(choice);
    for (int i = 0; i < gd.n_ops; i++) choice[i] = tp_engine_gemm_choice(eg, i);
    g_choice = choice;
    tp_plan pn;
    tp_engine *en = engine(&gd, &p, &pn, prec, 1, ep, 1);
    g_no_pdl = 0;
    g_choice = NULL;
    free(choice);
    ck_assert_int_eq(tp_engine_pdl_edges(en, &total), 0);
    float ntok[G * MAXB];
    ck_assert_msg(tp_engine_forward(ep, &e) == TP_OK && tp_engine_feed_argmax(ep, en, &e) == TP_OK &&
                      tp_engine_decode(en, G, ms, ntok, &e) == TP_OK && tp_engine_get_output(en, want, &e) == TP_OK,
                  "%s", e.msg);
    ck_assert_msg(tp_engine_forward(ep, &e) == TP_OK && tp_engine_feed_argmax(ep, eg, &e) == TP_OK &&
                      tp_engine_decode(eg, G, ms, gtok, &e) == TP_OK && tp_engine_get_output(eg, got, &e) == TP_OK,
                  "%s", e.msg);
    ck_assert_msg(memcmp(gtok, ntok, sizeof(float) * G * B) == 0 && memcmp(got, want, sizeof(float) * B * V) == 0,
                  "case %d %s: the decode graph with and without PDL differ", k, tp_precision_name(prec));
    tp_engine_destroy(en);
    tp_plan_free(&pn);
    tp_engine_destroy(ee);
    tp_engine_destroy(eg);
    tp_engine_destroy(ed);
    tp_engine_destroy(ep);
    tp_plan_free(&pe);
    tp_plan_free(&pg);
    tp_plan_free(&pd);
    tp_plan_free(&pp);
    tp_graph_free(&gd);
    tp_graph_free(&gp);
    tp_params_free(&p);
    free(want);
    free(got);
    free(want_steps);
    free(amax_p);
    free(amax_d);
    g_amax = NULL;
}

START_TEST(test_decoder_fp32) { run_case(_i, TP_PREC_FP32); }
END_TEST
START_TEST(test_decoder_fp16) { run_case(_i, TP_PREC_FP16); }
END_TEST
START_TEST(test_decoder_bf16) { run_case(_i, TP_PREC_BF16); }
END_TEST
/* weight-only FP8 and NVFP4: the prefill expands the weights for cuBLASLt (M = B x T rows), the decode steps' GEMV
 * decodes them in registers (batch 12: a GEMM again), the decode engine shares the prefill's weights and scales */
START_TEST(test_decoder_fp8_wo) { run_case(_i, TP_PREC_FP8_WO); }
END_TEST
START_TEST(test_decoder_nvfp4_wo) { run_case(_i, TP_PREC_NVFP4_WO); }
END_TEST
/* W8A8 FP8: every linear but the LM head E4M3 x E4M3 with static scales (calibrated on the GPU), its 16-bit input
 * quantized as read: the prefill through a quantize kernel and cuBLASLt's FP8 GEMM, the decode steps in tprof's
 * GEMV rounding x in registers (batch 1: q/k/v and gate/up grouped), the decode engines' scales the prefill
 * engine's by value name */
START_TEST(test_decoder_fp8) { run_case(_i, TP_PREC_FP8); }
END_TEST
/* fp8-block (native on sm_90: the prefill's 1x128 activation blocks quantized by a standalone kernel for
 * cuBLASLt's block-scaled GEMM; the decode steps' (<= 8 rows) by tprof's block-scaled GEMV in registers, q/k/v and
 * gate/up grouped at batch 1 where every member has whole 128-row blocks) and the block formats, emulated on Hopper (QDQ of the activations, bf16 GEMMs; NVFP4's activation s2 calibrated);
 * MXFP8 on the Gemma-like cases only: the Llama-like MLP's K = 688 is not a multiple of 32 (refused, test_decoder.c) */
START_TEST(test_decoder_fp8_block) { run_case(_i, TP_PREC_FP8_BLOCK); }
END_TEST
START_TEST(test_decoder_nvfp4) { run_case(_i, TP_PREC_NVFP4); }
END_TEST
START_TEST(test_decoder_mxfp8) { run_case(_i ? 4 : 1, TP_PREC_MXFP8); }
END_TEST
/* --kv-cache fp8: fp16 engines (and one W8A8 case) whose KV cache holds E4M3 under a scale calibrated from k and v:
 * the prefill's flash kernel on its dequantized rows, the decode steps' attention on the codes */
START_TEST(test_decoder_kv_fp8) {
    g_kv8 = 1;
    run_case(_i < 6 ? _i : 0, _i < 6 ? TP_PREC_FP16 : TP_PREC_FP8);
    g_kv8 = 0;
}
END_TEST

/* --prefill-activations fp8 (tprof bench): a W8A8 prefill engine whose weights are laid out for the fp8-wo decode
 * engine's sibling groups (tp_engine_options.group_layout), and that decode engine sharing its weights and cache:
 * nothing uploaded twice, the step's q/k/v and gate/up each one GEMV, the logits against the CPU's emulation of the
 * same pair (the W8A8 prefill, then fp8-wo steps over the session's cache). */
static tp_engine *engine_layout(const tp_graph *g, const tp_params *p, tp_plan *plan, tp_precision prec,
                                const tp_engine *share, const float *amax, const tp_plan *layout) {
    const tp_engine_options eo = {.device = 0, .use_graph = 1, .share = share, .gemv_groups = 1, .act_amax = amax,
                                  .group_layout = layout};
    return plan_and_build(g, p, plan, prec, 0, &eo);
}

START_TEST(test_decoder_a8_prefill) {
    B = 1, T = 37;
    tp_model m = model_case(0);
    tp_error e = {0};
    tp_params p = {0};
    const int V = model_params(&m, &p);
    float ids[MAXT], tok[1];
    for (int i = 0; i < T; i++) ids[i] = (float)((i * 131 + 7) % V);
    tp_graph gp = step(&m, &p, T, 0, 0), gd = step(&m, &p, 1, T, 0);
    tp_gpu_info gi;
    ck_assert_int_eq(tp_gpu_query(0, &gi, &e), TP_OK);
    float *amax = malloc(sizeof(float) * (size_t)gp.n_values), *want = malloc(sizeof(float) * V),
          *want1 = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    ck_assert_msg(tp_calibrate_max(&gp, &p, 0, gi.sm, ids, amax, &e) == TP_OK, "%s", e.msg);
    /* the CPU: the W8A8 prefill's emulation, then an fp8-wo step on the same session */
    tp_policy p8, pw;
    tp_policy_default(&p8, TP_PREC_FP8);
    tp_policy_default(&pw, TP_PREC_FP8_WO);
    tp_plan cpp, cpd, lp;
    ck_assert_int_eq(tp_plan_build_policy(&gp, &p8, 90, &cpp, &e), TP_OK);
    ck_assert_int_eq(tp_plan_build_policy(&gd, &pw, 90, &cpd, &e), TP_OK);
    ck_assert_int_eq(tp_plan_build_policy(&gp, &pw, gi.sm, &lp, &e), TP_OK); /* the decode's groups, on the prefill */
    tp_cpu_session s = {0};
    ck_assert_msg(tp_cpu_run_session_emulated(&gp, &p, &cpp, amax, &s, ids, want, &e) == TP_OK, "%s", e.msg);
    int32_t arg;
    tp_cpu_argmax(want, &arg, 1, V);
    tok[0] = (float)arg;
    ck_assert_msg(tp_cpu_run_session_emulated(&gd, &p, &cpd, NULL, &s, tok, want1, &e) == TP_OK, "%s", e.msg);
    tp_cpu_session_free(&s);
    /* the GPU */
    tp_plan pp, pd;
    tp_engine *ep = engine_layout(&gp, &p, &pp, TP_PREC_FP8, NULL, amax, &lp);
    tp_engine *ed = engine_layout(&gd, &p, &pd, TP_PREC_FP8_WO, ep, NULL, NULL);
    ck_assert_msg(tp_engine_weight_bytes(ed) == 0.0, "the fp8-wo decode engine uploaded %.0f bytes of weights",
                  tp_engine_weight_bytes(ed));
    int grouped = 0, linears = 0;
    for (int i = 0; i < gd.n_ops; i++) {
        if (gd.ops[i].kind != TP_OP_LINEAR || gd.ops[i].gemm_n == V) continue;
        const char *kn = NULL;
        tp_engine_op_call(ed, i, &kn);
        linears++, grouped += kn && strstr(kn, "group") != NULL;
    }
    tp_decoder_config cfg;
    memcpy(&cfg, m.cfg.bytes, sizeof cfg);
    ck_assert_msg(grouped >= 5 * cfg.layers, "%d of the step's %d linears (LM head aside) in a group's GEMV", grouped,
                  linears);
    int agree;
    ck_assert_msg(tp_engine_set_input(ep, ids, &e) == TP_OK && tp_engine_forward(ep, &e) == TP_OK &&
                      tp_engine_get_output(ep, got, &e) == TP_OK, "%s", e.msg);
    const double dp = rel(got, want, 1, V, &agree);
    ck_assert_msg(tp_engine_set_input(ed, tok, &e) == TP_OK && tp_engine_forward(ed, &e) == TP_OK &&
                      tp_engine_get_output(ed, got, &e) == TP_OK, "%s", e.msg);
    const double dd = rel(got, want1, 1, V, &agree);
    printf("decoder W8A8 prefill + fp8-wo decode: %d of %d step linears grouped; prefill rel L2 %.3e, decode step "
           "%.3e against the CPU's emulation\n", grouped, linears, dp, dd);
    /* W8A8's last-bit midpoint crossings, as run_case's tolerance for it */
    ck_assert_msg(dp <= 6e-2 && dd <= 6e-2, "prefill %.3e, decode step %.3e", dp, dd);
    tp_engine_destroy(ed);
    tp_engine_destroy(ep);
    tp_plan_free(&pd);
    tp_plan_free(&pp);
    tp_plan_free(&lp);
    tp_plan_free(&cpd);
    tp_plan_free(&cpp);
    tp_graph_free(&gd);
    tp_graph_free(&gp);
    tp_params_free(&p);
    free(amax);
    free(want);
    free(want1);
    free(got);
}
END_TEST

Suite *gpu_decoder_engine_suite(void) {
    Suite *s = suite_create("gpu_decoder_engine");
    TCase *t = tcase_create("decoder_engine");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, test_decoder_fp32, 0, 6);
    tcase_add_loop_test(t, test_decoder_fp16, 0, 6);
    tcase_add_loop_test(t, test_decoder_bf16, 0, 6);
    tcase_add_loop_test(t, test_decoder_fp8_wo, 0, 6);
    tcase_add_loop_test(t, test_decoder_nvfp4_wo, 0, 6);
    tcase_add_loop_test(t, test_decoder_fp8, 0, 6);
    tcase_add_loop_test(t, test_decoder_fp8_block, 0, 6);
    tcase_add_loop_test(t, test_decoder_nvfp4, 0, 6);
    tcase_add_loop_test(t, test_decoder_mxfp8, 0, 2);
    tcase_add_loop_test(t, test_decoder_kv_fp8, 0, 7);
    tcase_add_test(t, test_decoder_a8_prefill);
    suite_add_tcase(s, t);
    return s;
}
