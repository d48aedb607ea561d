/* decode.c: the decode phase of tprof bench (decode.h). Token t0 comes from the prefill's logits; decode step s
 * reads token t_s, appends it to the KV cache and chooses t_(s+1), so `gen` steps process gen tokens (llama-bench's
 * tg<gen>) and the cache ends holding prompt + gen positions. Tokens are kept as (gen + 1, rows): t0 .. t_gen. */
#include "bench/decode.h"
#include "bench/progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "core/util.h"
#include "exec/executor.h"
#include "io/tokens.h"
#include "exec/cpu/cpu_ops.h"
#include "planner/plan.h"

/* the greedy token of each of rows rows of logits (rows, V), as fp32 integers */
static tp_status argmax_rows(const float *logits, int rows, int V, float *tok, tp_error *err) {
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)rows);
    if (!idx) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_cpu_argmax(logits, idx, rows, V);
    for (int b = 0; b < rows; b++) tok[b] = (float)idx[b];
    free(idx);
    return TP_OK;
}

static tp_status step_graph(const tp_bench_report *rep, const tp_params *params, int rows, int tokens, int past,
                            tp_graph *g, tp_error *err) {
    const tp_step_shape s = {rows, tokens, past, (int64_t)rep->prompt + rep->gen, 0, 0, 0};
    return tp_model_build_step(&rep->model, params, &s, g, err);
}

/* The progress of a CPU decode phase (progress.h), started after its prefill (begun at t0): `steps` runs of the
 * decode step gd, at the rate the prefill gp ran (decode steps, small and memory-bound, run slower: the estimate is
 * a lower bound and the progress line corrects it as steps complete); the session reports each step's ops to it. */
static tp_progress *decode_progress(const char *label, const tp_graph *gp, const tp_graph *gd, int steps, double t0,
                                    tp_cpu_session *s) {
    const double ms = tp_now_ms() - t0, gflops = ms > 0 ? tp_graph_flop(gp) / ms * 1e-6 : 0;
    char l[160];
    snprintf(l, sizeof l, "%s (%d steps)", label, steps);
    tp_progress *pg = tp_progress_start(l, gd, steps, gflops, "the prefill");
    s->watch = tp_progress_watch(pg);
    return pg;
}

/* The CPU executor's greedy generation: one session, the prefill, then one-token steps. */
static tp_status cpu_decode(tp_bench_report *rep, const tp_params *params, const float *input, int rows,
                            float *tok, float *first, tp_error *err) {
    const int V = rep->out_cols;
    tp_graph gp, gd;
    tp_cpu_session s = {0};
    float *logits = malloc(sizeof(float) * (size_t)rows * (size_t)V);
    tp_status st = logits ? step_graph(rep, params, rows, rep->prompt, 0, &gp, err)
                          : tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (st) {
        free(logits);
        return st;
    }
    if (!(st = step_graph(rep, params, rows, 1, rep->prompt, &gd, err))) {
        const double t0 = tp_now_ms();
        st = tp_cpu_run_session(&gp, params, &s, input, first, err);
        if (!st) st = argmax_rows(first, rows, V, tok, err);
        tp_progress *pg = st ? NULL : decode_progress("CPU FP32 reference, decode", &gp, &gd, rep->gen, t0, &s);
        for (int k = 0; !st && k < rep->gen; k++) {
            st = tp_cpu_run_session(&gd, params, &s, tok + (size_t)k * rows, logits, err);
            if (!st) st = argmax_rows(logits, rows, V, tok + (size_t)(k + 1) * rows, err);
        }
        tp_progress_stop(pg);
        s.watch = NULL;
        tp_graph_free(&gd);
    }
    tp_graph_free(&gp);
    tp_cpu_session_free(&s);
    free(logits);
    return st;
}

/* The GPU FP32 reference's greedy generation: FP32 plans, cuBLASLt's first algorithm, no fusion, eager launches
 * (as tp_gpu_reference), a decode engine sharing the prefill's weights and cache. */
static tp_status gpu_decode(tp_bench_report *rep, const tp_params *params, const float *input, int rows, float *tok,
                            float *logits, tp_error *err) {
    tp_graph gp, gd;
    tp_policy pol;
    tp_plan pp = {0}, pd = {0};
    tp_engine *ep = NULL, *ed = NULL;
    double *ms = malloc(sizeof(double) * (size_t)(rep->gen ? rep->gen : 1));
    tp_policy_default(&pol, TP_PREC_FP32);
    tp_status st = ms ? step_graph(rep, params, rows, rep->prompt, 0, &gp, err)
                      : tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (st) goto out0;
    if ((st = step_graph(rep, params, rows, 1, rep->prompt, &gd, err))) goto out1;
    tp_engine_options eo = {.device = 0, .gemm_first = 1, .cublaslt_only = 1, .attention = TP_ATTN_CLASSIC};
    if (!(st = tp_plan_build_policy(&gp, &pol, rep->gpu.sm, &pp, err)) &&
        !(st = tp_plan_build_policy(&gd, &pol, rep->gpu.sm, &pd, err)) &&
        !(st = tp_engine_build(&gp, params, &pp, &eo, &ep, err))) {
        eo.share = ep;
        eo.feed_argmax = 1;
        st = tp_engine_build(&gd, params, &pd, &eo, &ed, err);
    }
    if (!st) st = tp_engine_set_input(ep, input, err);
    if (!st) st = tp_engine_forward(ep, err);
    if (!st) st = tp_engine_get_output(ep, logits, err);
    if (!st) st = argmax_rows(logits, rows, rep->out_cols, tok, err);
    if (!st) st = tp_engine_feed_argmax(ep, ed, err);
    if (!st && rep->gen) st = tp_engine_decode(ed, rep->gen, ms, tok + rows, err);
    tp_engine_destroy(ed);
    tp_engine_destroy(ep);
    tp_plan_free(&pd);
    tp_plan_free(&pp);
    tp_graph_free(&gd);
out1:
    tp_graph_free(&gp);
out0:
    free(ms);
    return st;
}

tp_status tp_bench_reference_decode(tp_bench_report *rep, const tp_params *params, const float *input, int rows,
                                    int gpu, float *logits, tp_error *err) {
    float *tok = malloc(sizeof(float) * (size_t)(rep->gen + 1) * (size_t)rows);
    if (!tok) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_status st = gpu ? gpu_decode(rep, params, input, rows, tok, logits, err)
                       : cpu_decode(rep, params, input, rows, tok, logits, err);
    if (st) {
        free(tok);
        return st;
    }
    rep->ref_tokens = tok;
    return TP_OK;
}

/* mean over the windows' positions t < T - 1 of -log softmax(logits[b, t])[ids[b, t + 1]], in double */
static double mean_nll(const float *logits, const float *ids, int W, int T, int V) {
    double sum = 0;
    for (int b = 0; b < W; b++)
        for (int t = 0; t + 1 < T; t++) {
            const float *l = logits + ((size_t)b * T + t) * V;
            double mx = l[0], z = 0;
            for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
            for (int v = 0; v < V; v++) z += exp((double)l[v] - mx);
            sum += mx + log(z) - l[(int)ids[(size_t)b * T + t + 1]];
        }
    return sum / ((double)W * (T - 1));
}

tp_status tp_bench_perplexity(tp_bench_report *rep, const tp_params *params, const tp_policy *pol, int gpu,
                              const struct tp_engine *calibrated, double *ppl, tp_error *err) {
    const int T = rep->prompt, V = rep->out_cols, maxw = 8;
    const char *path = rep->o->perplexity;
    *ppl = NAN;
    if (T < 2) return tp_fail(err, TP_ERR_ARG, "--perplexity: the windows (--prompt) need at least 2 tokens");
    float *ids = malloc(sizeof(float) * (size_t)maxw * T);
    if (!ids) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    int n = 0;
    tp_status st = tp_tokens_read(path, V, maxw * T, ids, &n, err);
    const int W = n / T;
    if (!st && W < 1) st = tp_fail(err, TP_ERR_FORMAT, "%s: %d token ids, a window needs %d (--prompt)", path, n, T);
    float *logits = st ? NULL : malloc(sizeof(float) * (size_t)W * T * V);
    if (!st && !logits) st = tp_fail(err, TP_ERR_OOM, "out of host memory for %d x %d x %d logits", W, T, V);
    tp_graph g;
    const tp_step_shape s = {W, T, 0, T, 1, 0, 0};
    if (!st && !(st = tp_model_build_step(&rep->model, params, &s, &g, err))) {
        if (!pol && !gpu) {
            st = tp_cpu_run(&g, params, ids, logits, err);
        } else {
            if (!pol) {
                st = tp_gpu_reference(&g, params, rep->gpu.sm, ids, logits, err);
            } else {
                tp_plan plan;
                tp_engine *e = NULL;
                tp_engine_options eo = {.device = 0, .use_graph = 0, .gemm_first = 1, .scales_from = calibrated,
                                        .fp8_promote = rep->o->fp8_promote};
                if (!(st = tp_plan_build_policy(&g, pol, rep->gpu.sm, &plan, err))) {
                    st = tp_engine_build(&g, params, &plan, &eo, &e, err);
                    if (!st) st = tp_engine_set_input(e, ids, err);
                    if (!st) st = tp_engine_forward(e, err);
                    if (!st) st = tp_engine_get_output(e, logits, err);
                    tp_engine_destroy(e);
                    tp_plan_free(&plan);
                }
            }
        }
        tp_graph_free(&g);
    }
    if (!st) {
        *ppl = exp(mean_nll(logits, ids, W, T, V));
        rep->ppl_windows = W;
        rep->ppl_tokens = W * (T - 1);
    }
    free(ids);
    free(logits);
    return st;
}

/* Of the reference's rows, the share of tokens equal to the reference's before each row's first difference (a
 * greedy sequence that differs once goes on from another context, so later agreement means nothing), and the
 * first step where any row differs (-1: none). */
static void agreement(const tp_bench_report *rep, tp_bench_result *r) {
    const int B = rep->o->batch, rows = rep->ref_rows, n = rep->gen + 1;
    int same = 0;
    r->first_diff = -1;
    for (int b = 0; b < rows; b++) {
        int k = 0;
        while (k < n && r->tokens[(size_t)k * B + b] == rep->ref_tokens[(size_t)k * rows + b]) k++;
        same += k;
        if (k < n && (r->first_diff < 0 || k < r->first_diff)) r->first_diff = k;
    }
    r->greedy_agree = (double)same / ((double)rows * n);
}

/* A finished decode phase of rounds x rep->gen timed steps (r->step_ms, r->tokens): its statistics and its greedy
 * agreement with the reference's tokens. */
static void decode_done(const tp_bench_report *rep, int rounds, tp_bench_result *r) {
    r->has_decode = 1;
    r->gen = rep->gen;
    r->rounds = rounds;
    tp_latency_stats_compute(r->step_ms, rounds * rep->gen, &r->dec);
    r->greedy_agree = NAN;
    r->first_diff = -1;
    if (rep->ref_tokens) agreement(rep, r);
}

/* One round on the CPU executor: a fresh session's prefill, then gen greedy steps (each timed on the host clock:
 * the session's step and its argmax, as a GPU step's time holds its argmax kernel), tokens into tok (gen + 1, B). */
static tp_status cpu_round(const tp_bench_report *rep, const tp_params *params, const tp_graph *gp,
                           const tp_graph *gd, const float *input, float *logits, float *tok, double *ms,
                           const char *label, tp_error *err) {
    const int B = rep->o->batch, V = rep->out_cols;
    tp_cpu_session s = {0};
    const double t_pre = tp_now_ms();
    tp_status st = tp_cpu_run_session(gp, params, &s, input, logits, err);
    if (!st) st = argmax_rows(logits, B, V, tok, err);
    tp_progress *pg = st ? NULL : decode_progress(label, gp, gd, rep->gen, t_pre, &s);
    for (int k = 0; !st && k < rep->gen; k++) {
        const double t0 = tp_now_ms();
        st = tp_cpu_run_session(gd, params, &s, tok + (size_t)k * B, logits, err);
        if (!st) st = argmax_rows(logits, B, V, tok + (size_t)(k + 1) * B, err);
        ms[k] = tp_now_ms() - t0;
    }
    tp_progress_stop(pg);
    s.watch = NULL;
    tp_cpu_session_free(&s);
    return st;
}

tp_status tp_bench_decode_cpu(const tp_bench_report *rep, const tp_params *params, const float *input, int rounds,
                              tp_bench_result *r, tp_error *err) {
    const int B = rep->o->batch, gen = rep->gen;
    if (gen <= 0 || rounds <= 0) return tp_fail(err, TP_ERR_ARG, "decode on the CPU: gen %d, %d rounds", gen, rounds);
    float *logits = malloc(sizeof(float) * (size_t)B * (size_t)rep->out_cols);
    float *spare = malloc(sizeof(float) * (size_t)(gen + 1) * (size_t)B); /* the later rounds' tokens */
    r->step_ms = malloc(sizeof(double) * (size_t)rounds * (size_t)gen);
    r->tokens = malloc(sizeof(float) * (size_t)(gen + 1) * (size_t)B);
    tp_graph gp, gd;
    tp_status st = logits && spare && r->step_ms && r->tokens ? step_graph(rep, params, B, rep->prompt, 0, &gp, err)
                                                                : tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (!st) {
        if (!(st = step_graph(rep, params, B, 1, rep->prompt, &gd, err))) {
            for (int k = 0; !st && k < rounds; k++) {
                char label[64];
                snprintf(label, sizeof label, "CPU decode, round %d of %d", k + 1, rounds);
                st = cpu_round(rep, params, &gp, &gd, input, logits, k ? spare : r->tokens, r->step_ms + (size_t)k * gen,
                               label, err);
            }
            tp_graph_free(&gd);
        }
        tp_graph_free(&gp);
    }
    free(logits);
    free(spare);
    if (st) return st;
    decode_done(rep, rounds, r);
    r->pdl_edges = r->graph_edges = r->graph_kernels = -1; /* no CUDA graph: the executor runs op by op */
    return TP_OK;
}

/* tprof profile on the decode steps: a fresh prefill, then up to gen steps traced (their launch gaps, per-layer
 * times and each GEMV's bytes against its floor in the tables tp_profile_engine prints). */
static tp_status profile_decode(const tp_bench_report *rep, tp_engine *prefill, tp_engine *e, const tp_graph *g,
                                const tp_plan *plan, tp_cupti *cupti, const tp_roofline_rates *rates,
                                tp_bench_result *r, tp_error *err) {
    const tp_bench_options *o = rep->o;
    const int steps = o->profile_iters < rep->gen ? o->profile_iters : rep->gen;
    tp_status st = tp_engine_forward(prefill, err);
    if (!st) st = tp_engine_feed_argmax(prefill, e, err);
    if (st) return st;
    printf("\n=== %s: %d decode steps traced (one token per sequence each; %s) ===", tp_precision_name(r->prec),
           steps, o->use_graph ? "one CUDA graph replay per step" : "eager launches, --no-graph");
    tp_profile_request req = {tp_model_name(&rep->model), o->batch, rep->gpu.name, r->dec.median, steps, o->top_n,
                              o->out_dir, rates, "decode"};
    st = tp_profile_engine(cupti, e, g, plan, &req, &r->dec_trace, &r->dec_prof, &r->dec_profile, err);
    r->has_dec_prof = 1; /* owned even after an error */
    return st;
}

/* The decode engine: one, or --tp's ranks (rank r's graph and plan in g[r], plan[r]; n entries each, rank 0's the
 * per-GPU costs). */
static tp_status decode_engine(const tp_bench_report *rep, const tp_params *params, const tp_policy *pol,
                               const tp_engine_options *eo, tp_graph *g, tp_plan *plan, tp_engine **e, tp_error *err) {
    const int n = rep->tp > 1 ? rep->tp : 1, B = rep->o->batch;
    /* the decode graph's costs are counted at the middle of the generation's context */
    const tp_step_shape s0 = {B, 1, rep->prompt + rep->gen / 2, (int64_t)rep->prompt + rep->gen, 0, 0, n > 1 ? n : 0};
    const tp_graph **gs = calloc((size_t)n, sizeof *gs);
    const tp_params **ps = calloc((size_t)n, sizeof *ps);
    const tp_plan **pls = calloc((size_t)n, sizeof *pls);
    tp_status st = gs && ps && pls ? TP_OK : tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int r = 0; r < n && !st; r++) {
        tp_step_shape s = s0;
        s.tp_rank = r;
        ps[r] = n > 1 ? &rep->tp_params[r] : params;
        if (!(st = tp_model_build_step(&rep->model, ps[r], &s, &g[r], err))) {
            st = tp_plan_build_policy(&g[r], pol, rep->gpu.sm, &plan[r], err);
            if (st) tp_graph_free(&g[r]);
        }
        gs[r] = &g[r];
        pls[r] = &plan[r];
    }
    if (!st) st = n > 1 ? tp_engine_build_tp(gs, ps, pls, n, eo, e, err) : tp_engine_build(&g[0], params, &plan[0], eo, e, err);
    free(gs);
    free(ps);
    free(pls);
    return st;
}

tp_status tp_bench_decode(const tp_bench_report *rep, const tp_params *params, const tp_policy *pol,
                          tp_engine *prefill, tp_cupti *cupti, const tp_roofline_rates *rates, tp_bench_result *r,
                          tp_error *err) {
    const tp_bench_options *o = rep->o;
    const int B = o->batch, gen = rep->gen, rounds = 3, n = rep->tp > 1 ? rep->tp : 1;
    tp_graph *gr = calloc((size_t)n, sizeof *gr);
    tp_plan *pr = calloc((size_t)n, sizeof *pr);
    tp_engine *e = NULL;
    float *logits = malloc(sizeof(float) * (size_t)B * (size_t)rep->out_cols);
    r->step_ms = malloc(sizeof(double) * (size_t)(rounds * gen));
    r->tokens = malloc(sizeof(float) * (size_t)(gen + 1) * (size_t)B);
    if (!logits || !r->step_ms || !r->tokens || !gr || !pr) {
        free(logits);
        free(gr);
        free(pr);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    tp_engine_options eo = {.device = 0, .use_graph = o->use_graph, .gemm_first = o->gemm_first,
                            .cublaslt_only = o->cublaslt_only, .fp8_promote = o->fp8_promote, .share = prefill,
                            .feed_argmax = 1,
                            .gemv_groups = o->gemv_groups, .no_pdl = o->no_pdl, .parallel_launch = o->tp_parallel_launch,
                            .decode_kernel = (tp_decode_kernel)o->decode_kernel,
                            .hook = cupti ? tp_cupti_hook : NULL,
                            .hook_user = cupti};
    char blabel[96];
    snprintf(blabel, sizeof blabel, "%s: building the decode engine", tp_precision_name(r->prec));
    tp_phase_clock clk = {tp_progress_beat(blabel), &r->build_phases, "decode engine: ", NULL, 0};
    eo.on_phase = tp_phase_clock_next, eo.phase_user = &clk;
    tp_status st = decode_engine(rep, params, pol, &eo, gr, pr, &e, err);
    tp_phase_clock_next(&clk, NULL);
    tp_progress_stop(clk.beat);
    for (int k = 0; !st && k < rounds; k++) {
        st = tp_engine_forward(prefill, err); /* a fresh prefill: the cache from position 0 */
        if (!st && k == 0) st = tp_engine_get_output(prefill, logits, err);
        if (!st && k == 0) st = argmax_rows(logits, B, rep->out_cols, r->tokens, err);
        if (!st) st = tp_engine_feed_argmax(prefill, e, err);
        if (!st) st = tp_engine_decode(e, gen, r->step_ms + (size_t)k * gen, k == 0 ? r->tokens + B : NULL, err);
    }
    if (!st) {
        decode_done(rep, rounds, r);
        r->pdl_edges = tp_engine_pdl_edges(e, &r->graph_edges);
        r->graph_kernels = tp_engine_graph_kernels(e);
        const char *note = NULL;
        r->dec_persistent = tp_engine_decode_kernel(e, &note, &r->dec_instrs);
        if (r->dec_persistent && getenv("TPROF_PERSIST_TRACE")) tp_engine_persist_report(e, stdout, err);
        snprintf(r->dec_kernel_note, sizeof r->dec_kernel_note, "%s", note ? note : "");
        /* the roofline's costs: rank 0's (each GPU's share) */
        const tp_graph *g = &gr[0];
        r->dec_cost = calloc((size_t)g->n_ops, sizeof *r->dec_cost);
        if (!r->dec_cost) st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        for (int i = 0; !st && i < g->n_ops; i++)
            r->dec_cost[i] = (tp_op_cost){pr[0].op_prec[i], g->ops[i].matmul_flop, tp_engine_op_bytes(e, i)};
        if (!st) r->n_dec_cost = g->n_ops;
    }
    if (!st && cupti) st = profile_decode(rep, prefill, e, &gr[0], &pr[0], cupti, rates, r, err);
    tp_engine_destroy(e);
    for (int k = 0; k < n; k++) {
        tp_plan_free(&pr[k]);
        tp_graph_free(&gr[k]);
    }
    free(gr);
    free(pr);
    free(logits);
    return st;
}
