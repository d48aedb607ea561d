/* decode.h: the decode phase of tprof bench for models with a KV cache (decoders), inside the bench layer: the
 * FP32 reference's greedy tokens, and per engine the greedy decoding after its prefill, each step one replay of a
 * decode graph that shares the prefill engine's weights and KV cache (exec/cuda/engine/cuda_engine.h
 * tp_engine_options.share), or on the CPU one step of the executor's session over its KV cache. */
#ifndef TP_BENCH_DECODE_H
#define TP_BENCH_DECODE_H

#include "bench/bench.h"
#include "exec/executor.h"
#include "planner/policy.h"
#include "profile/profile_run.h"

/* The reference's greedy generation: rep->gen tokens for each of rows sequences of input (rows x prompt ids),
 * into rep->ref_tokens (gen + 1 x rows, malloc'ed), and its prefill's next-token logits into logits (rows x
 * rep->out_cols: the reference the engines' prefill is compared with, so it is not computed twice): on the GPU
 * (gpu: FP32 engines as tp_gpu_reference builds them) or the CPU executor (a session: prefill, then one-token
 * steps). Errors: the engines' or the executor's, TP_ERR_OOM. */
tp_status tp_bench_reference_decode(tp_bench_report *rep, const tp_params *params, const float *input, int rows,
                                    int gpu, float *logits, tp_error *err);

/* --perplexity FILE: the perplexity exp(mean NLL) of the file's token ids, cut into windows of rep->prompt tokens
 * (at most 8 windows, the file's first 8 * prompt ids; each window predicts its tokens 2 .. prompt from the ones
 * before them, from zero context: the windows are independent sequences), under the plan of `pol` (an engine on
 * the GPU, its static activation scales taken from `calibrated`, the engine of the same plan bench built, when
 * the plan has any; pol NULL: the FP32 reference, tp_gpu_reference on the GPU when gpu, else the CPU executor). *ppl
 * receives it; rep->ppl_windows and ppl_tokens the counts. Errors: TP_ERR_IO (the file), TP_ERR_FORMAT (not
 * integers, an id outside the vocabulary, fewer than prompt ids), the planner's and the engine's. */
struct tp_engine;
tp_status tp_bench_perplexity(tp_bench_report *rep, const tp_params *params, const tp_policy *pol, int gpu,
                              const struct tp_engine *calibrated, double *ppl, tp_error *err);

/* The decode phase on the CPU executor (a run on the CPU, whose engine is the executor itself): rounds of a fresh
 * session's prefill over input (batch x prompt ids) and rep->gen greedy one-token steps, each step timed on the host
 * clock with its argmax (r->step_ms, r->dec); the first round's tokens (r->tokens, gen + 1 x batch) and their
 * agreement with rep->ref_tokens when the reference generated (r->greedy_agree, first_diff). r->step_ms and
 * r->tokens are allocated even on error (freed with r). Errors: the executor's, TP_ERR_OOM; TP_ERR_ARG for gen or
 * rounds under 1. */
tp_status tp_bench_decode_cpu(const tp_bench_report *rep, const tp_params *params, const float *input, int rounds,
                              tp_bench_result *r, tp_error *err);

/* Engine r's decode phase after its timed prefill (prefill: the built prefill engine, its input set): the decode
 * graph and plan of the same policy, the decode engine sharing the prefill's weights and cache, rounds of
 * prefill + rep->gen greedy steps (r->step_ms, r->dec, r->tokens), the greedy agreement with rep->ref_tokens,
 * and the decode graph's per-op costs for its roofline floor (r->dec_cost). With cupti (tprof profile), then a
 * fresh prefill and min(--profile-iters, gen) decode steps traced (r->dec_trace, dec_prof, dec_profile; the
 * artifacts <precision>_decode.* in --out; rates: the roofline columns'). Errors: the planner's, the engine's,
 * the profiler's. */
tp_status tp_bench_decode(const tp_bench_report *rep, const tp_params *params, const tp_policy *pol,
                          tp_engine *prefill, tp_cupti *cupti, const tp_roofline_rates *rates, tp_bench_result *r,
                          tp_error *err);

#endif
