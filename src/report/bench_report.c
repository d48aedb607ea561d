/* bench_report.c: the text, JSON and comparison-report writers of a benchmark run (bench_report.h). */
#include "report/bench_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/files.h"
#include "core/util.h"
#include "formats/precision.h"
#include "report/compare.h"
#include "tp_build_info.h"

static const char *reference_name(tp_reference_kind k) {
    switch (k) {
    case TP_REF_GPU: return "GPU FP32 engine: FP32 GEMMs with FP32 accumulation (cuBLASLt, no TF32), CUDA-core attention";
    case TP_REF_CPU: return "CPU executor, fp32 storage, fp64 accumulation";
    default: return "none (--reference none)";
    }
}


/* --sparsity: what was pruned per weight and what pruning cost against the dense FP32 model; null without it. */
static json_t *sparsity_json(const tp_bench_report *rep) {
    const tp_sparse_summary *s = &rep->sparse;
    if (!rep->o->sparsity) return json_null();
    json_t *rows = json_array();
    for (int k = 0; k < s->n_rows; k++) {
        const tp_sparse_row *r = &s->rows[k];
        json_array_append_new(rows, json_pack("{s:s,s:s,s:b,s:I,s:I,s:s}", "layer", r->layer, "param", r->param,
                                              "eligible", r->eligible, "groups", (json_int_t)r->groups,
                                              "pruned_groups", (json_int_t)r->pruned, "why", r->why));
    }
    json_t *cost = json_null();
    if (rep->has_prune_cost)
        cost = json_pack("{s:o,s:o,s:o,s:o,s:i}", "cosine", tp_json_num(rep->prune_cost.cosine), "rel_l2",
                         tp_json_num(rep->prune_cost.rel_l2), "max_abs", tp_json_num(rep->prune_cost.max_abs), "top1_agree",
                         rep->output.classes ? tp_json_num(rep->prune_cost.top1_agree) : json_null(), "samples",
                         rep->ref_rows);
    return json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:o,s:o,s:s}", "pattern", "2:4 along K (magnitude)", "layers", s->globs,
                     "linears", s->n_linears, "pruned", s->pruned, "already_2_4", s->already, "left_dense",
                     s->ineligible, "weights", rows, "prune_cost_vs_dense_fp32", cost, "sparse_kernels",
                     rep->dev != TP_DEVICE_GPU ? "the CPU reference runs the pruned weights"
                     : rep->o->sparse_gemm == 2 ? "none (--sparse-gemm off): the pruned weights run the dense GEMMs"
                     : rep->o->sparse_gemm == 1 ? "cuSPARSELt for every eligible linear (--sparse-gemm force); each "
                                                  "op's how in results[].plan says which ran and both times"
                                                : "cuSPARSELt per linear where faster than its dense GEMM at build; "
                                                  "each op's how in results[].plan says which ran and both times");
}

/* The plan per op, with each op's call in the program (its kernel; "^" where an earlier op's call computes it), then
 * the program's counts: calls, fused calls by rule */
static void print_plan(const tp_graph *g, const tp_plan *p) {
    const tp_program *prog = &p->prog;
    printf("  %-26s %-12s %-5s %-18s %10s %10s  %s\n", "layer", "op", "prec", "kernel", "GFLOP", "MB", "how");
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        printf("  %-26s %-12s %-5s %-18s %10.3f %10.2f  %s\n", op->layer, tp_op_kind_name(op->kind),
               tp_precision_name(p->op_prec[i]),
               tp_program_is_head(prog, i) ? tp_call_kind_get(prog->calls[i].kind)->name : "^ (fused)",
               op->flop * 1e-9, tp_program_op_bytes(prog, p, g, i) * 1e-6, p->op_note[i]);
    }
    printf("  program: %d calls for %d ops", tp_program_n_calls(prog), g->n_ops);
    for (int r = 0; r < tp_fusion_rule_count; r++) {
        int n = 0;
        for (int i = 0; i < g->n_ops; i++) n += prog->calls[i].n_ops > 1 && prog->calls[i].rule == r;
        if (n) printf("; %d x %s", n, tp_fusion_rules[r].name);
    }
    printf(" (an engine's build may rewrite calls: its choices are in each op's how)\n");
}

/* Decoders: the timed runs are the prefill (time to first token), then the greedy decode steps (decode.h). */
static void print_prefill_decode(const tp_bench_report *rep, const tp_bench_result *r) {
    const int B = rep->o->batch;
    if (isfinite(r->ppl))
        printf("Perplexity over %s (%d window%s of %d tokens, %d predicted): %.4f (FP32 reference: %.4f)\n",
               rep->o->perplexity, rep->ppl_windows, rep->ppl_windows == 1 ? "" : "s", rep->prompt, rep->ppl_tokens,
               r->ppl, rep->ref_ppl);
    if (rep->tp > 1)
        printf("Tensor parallel: %d GPUs joined by %s; graph replays launched %s\n", rep->tp, rep->tp_desc,
               rep->o->tp_parallel_launch ? "from one host thread per GPU (--tp-launch threads)" : "one after the other");
    printf("Prefill (pp%d): time to first token %.4f ms (median), %.1f prompt tokens/s\n", rep->prompt,
           r->lat.median, B * rep->prompt / (r->lat.median * 1e-3));
    if (!r->has_decode) return;
    const tp_latency_stats *d = &r->dec;
    printf("Decode (tg%d%s): %.4f ms per step (median), p99 %.4f ms, min %.4f ms, over %d steps in %d rounds -> %.1f "
           "tokens/s (batch %d)\n", r->gen, rep->dev == TP_DEVICE_CPU ? ", on the CPU executor, host clock" : "", d->median, d->p99, d->min, d->n, r->rounds, B / (d->median * 1e-3), B);
    if (r->dec_kernel_note[0]) printf("Decode step: %s\n", r->dec_kernel_note);
    if (r->dec_persistent)
        printf("Decode graph: the persistent kernel (%d instructions), then argmax and the position: %d kernels a "
               "step\n", r->dec_instrs, r->graph_kernels);
    else if (r->pdl_edges > 0)
        printf("Decode graph: %d kernels a step; %d of its %d edges programmatic (PDL: a kernel starts while its "
               "predecessor finishes; --pdl off for none)\n", r->graph_kernels, r->pdl_edges, r->graph_edges);
    else if (r->pdl_edges == 0)
        printf("Decode graph: %d kernels a step; no programmatic edges (%s): each kernel starts after its predecessor "
               "completed\n", r->graph_kernels, rep->o->no_pdl ? "--pdl off" : "none captured");
    if (isfinite(r->greedy_agree))
        printf("Greedy tokens vs the FP32 reference: %.1f %% agree (%d sequence%s x %d tokens, up to each one's first "
               "difference)%s\n", 100 * r->greedy_agree, rep->ref_rows, rep->ref_rows == 1 ? "" : "s", r->gen + 1,
               r->first_diff < 0 ? "; identical" : "");
    if (r->first_diff >= 0) printf("  first difference at generated token %d\n", r->first_diff);
}

/* "name 1.2 s, name 0.3 s, ..." of a phase list into buf */
static void phases_text(const tp_phases *ph, char *buf, size_t n) {
    buf[0] = 0;
    for (int i = 0; i < ph->n; i++)
        tp_append(buf, n, "%s%s %.*f s", i ? ", " : "", ph->p[i].name, ph->p[i].s < 10 ? 2 : 1, ph->p[i].s);
}

static json_t *phases_json(const tp_phases *ph) {
    json_t *a = json_array();
    for (int i = 0; i < ph->n; i++)
        json_array_append_new(a, json_pack("{s:s,s:o}", "phase", ph->p[i].name, "s", tp_json_num(ph->p[i].s)));
    return a;
}

static void print_summary(const tp_bench_report *rep, const tp_bench_result *r) {
    const tp_bench_options *o = rep->o;
    const char *device = rep->device, *unit = rep->input.unit;
    const double flop = rep->flop;
    const int ref_rows = rep->ref_rows;
    char wb[32], ab[32];
    const tp_latency_stats *l = &r->lat;
    printf("\n=== %s%s on %s: performance summary ===\n", tp_precision_name(r->prec),
           r->n_emulated_ops ? " (EMULATED)" : "", device);
    double qps = r->n / (r->wall_ms * 1e-3);
    char hz[96] = ""; /* a pipeline's rate as robotics users give it */
    if (tp_unit_hz(unit))
        snprintf(hz, sizeof hz, " = %.1f Hz", qps * o->batch);
    if (tp_unit_hz(unit) && o->batch > 1) tp_append(hz, sizeof hz, " (each of %d streams at %.1f Hz)", o->batch, qps);
    printf("Throughput: %.2f qps, %.1f %ss/s%s (batch %d)\n", qps, qps * o->batch, unit, hz, o->batch);
    printf("%s Compute Time: min = %.4f ms, max = %.4f ms, mean = %.4f ms, median = %.4f ms, "
           "percentile(90%%) = %.4f ms, percentile(95%%) = %.4f ms, percentile(99%%) = %.4f ms (%d runs)\n",
           o->device == TP_DEVICE_CPU ? "Host" : "GPU", l->min, l->max, l->mean, l->median, l->p90, l->p95, l->p99,
           l->n);
    printf("Coefficient of variation: %.2f %%%s\n", 100 * l->cov,
           l->cov > 0.025 ? "  WARNING: above 2.5%, the timings are noisy (other load, clocks, or too few runs)" : "");
    double rate = flop / (l->median * 1e-3);
    if (o->device == TP_DEVICE_CPU) {
        printf("Model compute: %.2f GFLOP per batch -> %.1f GFLOP/s at the median\n", flop * 1e-9, rate * 1e-9);
        printf("Weights: %s (%.0f bytes, fp32)\n", tp_fmt_bytes(r->weight_bytes, wb, sizeof wb), r->weight_bytes);
    } else {
        printf("Model compute: %.2f GFLOP per batch -> %.1f TFLOP/s at the median\n", flop * 1e-9, rate * 1e-12);
        printf("Weights: %s (%.0f bytes); activations and scratch: %s; engine build %.0f ms\n",
               tp_fmt_bytes(r->weight_bytes, wb, sizeof wb), r->weight_bytes,
               tp_fmt_bytes(r->act_bytes, ab, sizeof ab), r->build_ms);
        if (r->build_phases.n) {
            char pb[1200];
            phases_text(&r->build_phases, pb, sizeof pb);
            printf("Engine build: %s\n", pb);
        }
    }
    if (r->fwd_kernels > 0)
        printf("Forward graph: %d kernels; %d of its %d edges programmatic (PDL: a kernel starts while its predecessor "
               "finishes; --pdl off for none)\n", r->fwd_kernels, r->fwd_pdl_edges, r->fwd_edges);
    if (r->attn_impl[0]) printf("Attention (chosen when the engine was built): %s\n", r->attn_impl);
    if (rep->prompt > 0) print_prefill_decode(rep, r);
    if (r->gelu_impl[0]) printf("GEMM + GELU (chosen when the engine was built): %s\n", r->gelu_impl);
    /* the GEMMs' own precision: fp8-wo's prefill runs fp8's (W8A8) under --prefill-activations fp8 */
    const tp_precision gq = r->mfu_prec != r->prec && r->mfu_prec == TP_PREC_FP8 ? TP_PREC_FP8 : r->prec;
    if (r->n_quant_ops)
        printf("%s: %d of %d ops run %s GEMMs%s%s%s; the rest %s\n", tp_precision_name(r->prec), r->n_quant_ops, r->n_ops,
               tp_precision_name(gq),
               tp_precision_info(gq)->static_act_scales ? (o->calib.method == TP_CALIB_PERCENTILE ? " (static per-tensor scales, percentile calibration)"
                                         : o->calib.method == TP_CALIB_ENTROPY  ? " (static per-tensor scales, entropy calibration)"
                                                                                 : " (static per-tensor scales, max calibration)")
                                      : "",
               gq != r->prec ? " in the prefill (--prefill-activations fp8; the decode weight-only)" : "",
               r->n_emulated_ops ? ", EMULATED (no hardware path on this GPU: see --plan)" : "",
               tp_precision_name(tp_precision_info(r->prec)->high));
    if (r->n_emulated_ops && r->format_weight_bytes > 0 && fabs(r->format_weight_bytes - r->weight_bytes) > 0.5) {
        char fb[32];
        printf("Weights in %s: %s (%.0f bytes; the emulation keeps them dequantized on the device)\n",
               tp_precision_name(r->prec), tp_fmt_bytes(r->format_weight_bytes, fb, sizeof fb), r->format_weight_bytes);
    }
    const tp_accuracy *a = &r->acc;
    if (rep->reference == TP_REF_NONE) {
        printf("Accuracy: not checked (--reference none)%s\n", a->nonfinite ? "  NON-FINITE VALUES IN OUTPUT" : "");
        return;
    }
    char top1[64];
    snprintf(top1, sizeof top1, "top-1 agreement: n/a (the output is %s)", rep->output.what);
    if (rep->output.classes > 0)
        snprintf(top1, sizeof top1, "top-1 agreement = %.1f %% (%d/%d)", 100 * a->top1_agree,
                 (int)lround(a->top1_agree * a->rows), a->rows);
    printf("Accuracy vs FP32 %s reference (%d of %d %ss): cosine = %.6f, relative L2 = %.3e, "
           "max abs error = %.3e, %s%s\n",
           rep->reference == TP_REF_GPU ? "GPU" : "CPU", ref_rows, o->batch, unit, a->cosine, a->rel_l2, a->max_abs,
           top1, a->nonfinite ? "  NON-FINITE VALUES IN OUTPUT" : "");
}

static json_t *json_stats(const tp_latency_stats *l);

/* Decoders: llama-bench's tests (pp<prompt>, tg<gen>, each with avg and stddev tokens/s as llama-bench prints
 * them, here from the median), TTFT, the decode steps, the greedy agreement and the decode step's floor. */
static json_t *json_llm(const tp_bench_report *rep, const tp_bench_result *r) {
    const int B = rep->o->batch;
    json_t *j = json_object(), *tests = json_array();
    char name[32];
    snprintf(name, sizeof name, "pp%d", rep->prompt);
    json_array_append_new(tests, json_pack("{s:s,s:i,s:o}", "test", name, "n_tokens", B * rep->prompt,
                                           "tokens_per_s", tp_json_num(B * rep->prompt / (r->lat.median * 1e-3))));
    json_object_set_new(j, "ttft_ms", tp_json_num(r->lat.median));
    json_object_set_new(j, "tensor_parallel", json_integer(rep->tp > 1 ? rep->tp : 1));
    if (rep->tp > 1) json_object_set_new(j, "nccl", json_string(rep->tp_desc));
    if (rep->tp > 1) json_object_set_new(j, "tp_launch", json_string(rep->o->tp_parallel_launch ? "threads" : "serial"));
    if (r->fwd_kernels > 0) {
        json_object_set_new(j, "graph_kernels", json_integer(r->fwd_kernels));
        json_object_set_new(j, "graph_pdl_edges", json_integer(r->fwd_pdl_edges));
        json_object_set_new(j, "graph_edges", json_integer(r->fwd_edges));
    }
    if (r->has_decode) {
        snprintf(name, sizeof name, "tg%d", r->gen);
        json_array_append_new(tests, json_pack("{s:s,s:i,s:o}", "test", name, "n_tokens", B * r->gen, "tokens_per_s",
                                               tp_json_num(B / (r->dec.median * 1e-3))));
        json_object_set_new(j, "decode_step", json_stats(&r->dec));
        json_t *steps = json_array();
        for (int k = 0; k < r->rounds * r->gen; k++) json_array_append_new(steps, json_real(r->step_ms[k]));
        json_object_set_new(j, "decode_step_samples_ms", steps);
        json_object_set_new(j, "greedy_agreement", tp_json_num(r->greedy_agree));
        json_object_set_new(j, "decode_graph_pdl_edges", r->pdl_edges >= 0 ? json_integer(r->pdl_edges) : json_null());
        json_object_set_new(j, "decode_graph_edges", r->pdl_edges >= 0 ? json_integer(r->graph_edges) : json_null());
        json_object_set_new(j, "decode_graph_kernels", r->pdl_edges >= 0 ? json_integer(r->graph_kernels) : json_null());
        json_object_set_new(j, "decode_kernel", json_string(r->dec_persistent ? "persistent" : "graph"));
        json_object_set_new(j, "decode_kernel_note", json_string(r->dec_kernel_note));
        json_object_set_new(j, "decode_persistent_instructions", json_integer(r->dec_instrs));
        json_object_set_new(j, "first_difference", r->first_diff >= 0 ? json_integer(r->first_diff) : json_null());
        json_t *tok = json_array();
        for (int k = 0; k <= r->gen; k++) json_array_append_new(tok, json_integer((json_int_t)r->tokens[(size_t)k * B]));
        json_object_set_new(j, "tokens_sequence0", tok);
        if (r->dec_profile) json_object_set(j, "decode_profile", r->dec_profile);
        if (rep->rates)
            json_object_set_new(j, "decode_roofline",
                                json_pack("{s:o,s:o,s:b}", "floor_ms", tp_json_num(r->dec_floor.ns * 1e-6),
                                          "median_over_floor",
                                          r->dec_floor.ns > 0 ? tp_json_num(r->dec.median / (r->dec_floor.ns * 1e-6))
                                                              : json_null(),
                                          "floor_known", r->dec_floor.known));
    }
    json_object_set_new(j, "tests", tests);
    if (rep->o->perplexity)
        json_object_set_new(j, "perplexity", json_pack("{s:s,s:i,s:i,s:o,s:o}", "file", rep->o->perplexity, "windows",
                                                       rep->ppl_windows, "predicted_tokens", rep->ppl_tokens, "value",
                                                       tp_json_num(r->ppl), "fp32_reference", tp_json_num(rep->ref_ppl)));
    json_object_set_new(j, "prompt", json_integer(rep->prompt));
    json_object_set_new(j, "gen", json_integer(rep->gen));
    return j;
}

static json_t *json_stats(const tp_latency_stats *l) {
    return json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "runs", l->n, "min_ms", l->min, "max_ms", l->max,
                     "mean_ms", l->mean, "median_ms", l->median, "p90_ms", l->p90, "p95_ms", l->p95, "p99_ms",
                     l->p99, "stddev_ms", l->stddev, "cov", l->cov);
}

static tp_status write_json(const tp_bench_report *rep, tp_error *err) {
    const tp_bench_options *o = rep->o;
    const tp_gpu_info *gpu = &rep->gpu;
    const char *device = rep->device, *input_desc = rep->input_desc;
    const tp_graph *g = rep->g;
    const tp_bench_result *res = rep->res;
    const int n_res = rep->n_res, ref_rows = rep->ref_rows;
    const double flop = rep->flop, matmul_flop = rep->matmul_flop;
    const tp_roofline_rates *rt = rep->rates;
    char cpu[256], when[64];
    tp_host_cpu_name(cpu, sizeof cpu);
    time_t t = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    json_t *root = json_object();
    json_object_set_new(root, "tool", json_string("tprof bench " TPROF_VERSION));
    json_object_set_new(root, "commit", json_string(TP_GIT_COMMIT));
    json_object_set_new(root, "commit_dirty", json_boolean(TP_GIT_DIRTY));
    json_object_set_new(root, "date", json_string(when));
    json_object_set_new(root, "command", json_string(o->command_line ? o->command_line : ""));
    json_t *model = tp_model_to_json(&rep->model);
    if (model) json_object_set_new(model, "description", json_string(rep->model_desc));
    json_object_set_new(root, "model", model);
    json_t *cfg = json_pack("{s:i,s:f,s:i,s:f,s:s,s:b,s:s,s:s,s:I,s:i,s:s}", "batch", o->batch, "warmup_ms",
                            o->warmup_ms, "iterations", o->iterations, "duration_s", o->duration_s, "device", device,
                            "cuda_graph", o->use_graph, "weights", o->weights ? o->weights : "synthesized (the reference's init)",
                            "input", input_desc, "seed", (json_int_t)o->seed, "reference_images", ref_rows,
                            "timing", "GPU compute time per run from CUDA events; host-device transfers excluded");
    char cdesc[48];
    json_object_set_new(cfg, "calibration", json_string(tp_calib_describe(&o->calib, cdesc, sizeof cdesc)));
    json_object_set_new(cfg, "calibration_data", json_string(rep->calib_desc));
    json_object_set_new(cfg, "gelu",
                        json_string(o->gelu_tanh ? "tanh approximation in the epilogue of the GEMM before it "
                                                   "(--gelu tanh)"
                                    : o->cublaslt_only ? "exact (erf), its own kernel (--gemm cublaslt)"
                                                       : "exact (erf): its own kernel, or on sm_90 in the epilogue of "
                                                         "tprof's GEMM before it where that pair was faster at build "
                                                         "(each GEMM's implementation says which)"));
    json_object_set_new(cfg, "gemm_selection",
                        json_string(o->gemm_first      ? "cuBLASLt's first heuristic algorithm (--no-gemm-select)"
                                    : o->cublaslt_only ? "cuBLASLt's heuristic candidates timed at build, fastest kept "
                                                         "(--gemm cublaslt: no tprof GEMM)"
                                                       : "cuBLASLt's heuristic candidates timed at build, fastest "
                                                         "kept; on sm_90 tprof's GEMM with the GELU epilogue (FP8: "
                                                         "writing E4M3, no fp32 promotion) timed against cuBLASLt + "
                                                         "the GELU kernel, and for the other FP8 GEMMs (bias, "
                                                         "residual, no fp32 promotion) against cuBLASLt"));
    json_object_set_new(cfg, "fp8_accumulation",
                        json_string(o->fp8_promote ? "promote: cuBLASLt with fp32 promotion (--fp8-accum promote)"
                                                   : "fast: tensor cores without fp32 promotion (cuBLASLt FAST_ACCUM, "
                                                     "tprof's FP8 GEMM)"));
    json_object_set_new(cfg, "tensor_parallel", json_integer(rep->tp > 1 ? rep->tp : 1));
    if (rep->tp > 1)
        json_object_set_new(cfg, "tensor_parallel_how",
                            json_string("Megatron-LM layout: q/k/v and gate/up split by output rows, o_proj and "
                                        "down_proj by input columns, an NCCL all-reduce after each in every rank's "
                                        "CUDA graph; embedding, norms and LM head whole on every GPU. Weights, FLOP, "
                                        "bytes and floors are rank 0's, per GPU; a step's time is the slowest rank's"));
    static const char *const PM[] = {NULL, "graph", "modular", "eager"};
    if (o->pipeline_mode > 0 && o->pipeline_mode < 4)
        json_object_set_new(cfg, "pipeline", json_string(PM[o->pipeline_mode]));
    json_object_set_new(cfg, "fusion", json_string(o->no_fusion ? "off" : "on"));
    json_object_set_new(cfg, "fp32_protect", json_string(o->fp32_tensors ? "tensors" : "regs"));
    json_object_set_new(cfg, "preprocessing", json_string(rep->input.preprocess));
    json_object_set_new(cfg, "checkpoint_config", json_string(rep->checkpoint_note));
    if (o->onnx) {
        json_object_set_new(cfg, "onnx", json_string(o->onnx));
        json_object_set_new(cfg, "onnx_import", json_string(o->onnx_note ? o->onnx_note : ""));
    }
    json_object_set_new(root, "config", cfg);
    json_t *sys = json_pack("{s:s}", "cpu", cpu);
    if (gpu->present) {
        json_object_set_new(sys, "gpu", json_string(gpu->name));
        json_object_set_new(sys, "compute_capability", json_integer(gpu->sm));
        json_object_set_new(sys, "sm_count", json_integer(gpu->sm_count));
        json_object_set_new(sys, "gpu_memory_bytes", json_real(gpu->mem_bytes));
        json_object_set_new(sys, "driver", json_string(gpu->driver));
        json_object_set_new(sys, "driver_cuda_version", json_integer(gpu->driver_cuda));
        json_object_set_new(sys, "cuda_runtime_version", json_integer(gpu->runtime_cuda));
        json_object_set_new(sys, "cublaslt_version", json_integer((json_int_t)gpu->cublaslt_version));
    }
    if (rt) {
        json_object_set_new(sys, "measured_rates",
                            json_pack("{s:o,s:s,s:o,s:s}", "gemm_peak_tflops", tp_roofline_peaks_json(rt),
                                      "gemm_peak_shape",
                                      "8192 x 8192 x 8192 cuBLASLt", "copy_gbps", tp_json_num(rt->copy_gbps), "copy",
                                      "device-to-device cudaMemcpyAsync of 256 MiB, (read + written bytes) / median"));
    }
    json_object_set_new(root, "system", sys);
    json_object_set_new(root, "sparsity", sparsity_json(rep));
    json_object_set_new(root, "host_memory", json_pack("{s:o,s:o,s:s,s:s}", "estimate_bytes", tp_json_num(rep->host_need),
                                                       "available_bytes", tp_json_num(rep->host_have), "available_from",
                                                       rep->host_have_src, "parts", rep->host_parts));
    json_object_set_new(root, "model_flop_per_batch", json_real(flop));
    json_object_set_new(root, "model_matmul_flop_per_batch", json_real(matmul_flop));
    const int base = rep->base;
    json_object_set_new(root, "speedup_baseline", json_string(tp_precision_name(res[base].prec)));
    json_t *arr = json_array();
    for (int i = 0; i < n_res; i++) {
        const tp_bench_result *r = &res[i];
        json_t *p = json_object();
        json_object_set_new(p, "precision", json_string(tp_precision_name(r->prec)));
        json_object_set_new(p, "latency", json_stats(&r->lat));
        double qps = r->n / (r->wall_ms * 1e-3);
        json_object_set_new(p, "throughput_qps", tp_json_num(qps));
        char per_s[32];
        snprintf(per_s, sizeof per_s, "%ss_per_s", rep->input.unit);
        json_object_set_new(p, per_s, tp_json_num(qps * o->batch));
        if (tp_unit_hz(rep->input.unit)) /* the same rate, named as robotics users name it; per stream: qps */
            json_object_set_new(p, "hz", tp_json_num(qps * o->batch));
        const double tf = flop / (r->lat.median * 1e-3) * 1e-12;
        json_object_set_new(p, "tflops_at_median", tp_json_num(tf));
        json_object_set_new(p, "gemm_peak_tflops", r->peak_tflops > 0 ? json_real(r->peak_tflops) : json_null());
        json_object_set_new(p, "mfu", r->peak_tflops > 0 ? tp_json_num(tf / r->peak_tflops) : json_null());
        if (rt)
            json_object_set_new(p, "roofline",
                                json_pack("{s:o,s:o,s:o,s:b,s:o}", "floor_ms", tp_json_num(r->floor.ns * 1e-6),
                                          "compute_bound_ms", tp_json_num(r->floor.compute_ns * 1e-6), "memory_bound_ms",
                                          tp_json_num(r->floor.memory_ns * 1e-6), "floor_known", r->floor.known,
                                          "median_over_floor", r->floor.ns > 0
                                                                   ? tp_json_num(r->lat.median / (r->floor.ns * 1e-6))
                                                                   : json_null()));
        json_object_set_new(p, "weight_bytes", json_real(r->weight_bytes));
        json_object_set_new(p, "format_weight_bytes", json_real(r->format_weight_bytes));
        json_object_set_new(p, "quantized_ops", json_integer(r->n_quant_ops));
        json_object_set_new(p, "emulated_ops", json_integer(r->n_emulated_ops));
        json_object_set_new(p, "activation_bytes", json_real(r->act_bytes));
        json_object_set_new(p, "build_ms", json_real(r->build_ms));
        json_object_set_new(p, "speedup_vs_baseline", tp_json_num(res[base].lat.median / r->lat.median));
        json_t *acc = json_object();
        json_object_set_new(acc, "reference", json_string(reference_name(rep->reference)));
        json_object_set_new(acc, "images", json_integer(r->acc.rows));
        json_object_set_new(acc, "cosine", tp_json_num(r->acc.cosine));
        json_object_set_new(acc, "rel_l2", tp_json_num(r->acc.rel_l2));
        json_object_set_new(acc, "max_abs", tp_json_num(r->acc.max_abs));
        json_object_set_new(acc, "top1_agreement", rep->output.classes > 0 ? tp_json_num(r->acc.top1_agree) : json_null());
        json_object_set_new(acc, "nonfinite", json_integer(r->acc.nonfinite));
        json_object_set_new(p, "accuracy", acc);
        if (r->acc_wo.rows > 0) /* --prefill-activations fp8: the weight-only prefill's, for the activations' cost */
            json_object_set_new(p, "accuracy_weight_only_prefill",
                                json_pack("{s:o,s:o,s:o}", "cosine", tp_json_num(r->acc_wo.cosine), "rel_l2",
                                          tp_json_num(r->acc_wo.rel_l2), "max_abs", tp_json_num(r->acc_wo.max_abs)));
        if (rep->o->prefill_act_fp8 && r->prec == TP_PREC_FP8_WO) /* W8A8 prefill, weight-only decode */
            json_object_set_new(p, "prefill_activations", json_string("fp8"));
        json_t *s = json_array();
        for (int k = 0; k < r->n; k++) json_array_append_new(s, json_real(r->samples[k]));
        json_object_set_new(p, "samples_ms", s);
        json_object_set_new(p, "build_phases_s", phases_json(&r->build_phases));
        if (r->plan) json_object_set(p, "plan", r->plan);
        if (r->attn_cost) {
            json_t *ac = json_array();
            for (int k = 0; k < r->n_attn_cost; k++) {
                const tp_attn_cost *a = &r->attn_cost[k];
                json_array_append_new(ac, json_pack("{s:s,s:s,s:o,s:o}", "layer", g->ops[a->op].layer, "reference",
                                                    tp_precision_name(a->ref), "cosine", tp_json_num(a->cosine),
                                                    "rel_l2", tp_json_num(a->rel_l2)));
            }
            json_object_set_new(p, "fp8_attention_cost", ac);
        }
        if (r->n_drift) {
            json_t *dr = json_array();
            for (int k = 0; k < r->n_drift; k++) {
                const tp_stage_drift *d = &r->drift[k];
                json_array_append_new(dr, json_pack("{s:s,s:i,s:f,s:o,s:o,s:o}", "stage", d->stage, "tensors",
                                                    d->n_values, "values", d->numel, "cosine", tp_json_num(d->acc.cosine),
                                                    "rel_l2", tp_json_num(d->acc.rel_l2), "max_abs",
                                                    tp_json_num(d->acc.max_abs)));
            }
            json_object_set_new(p, "stage_drift", dr);
        }
        if (r->profile) json_object_set(p, "profile", r->profile);
        if (rep->prompt > 0) json_object_set_new(p, "llm", json_llm(rep, r));
        json_array_append_new(arr, p);
    }
    json_object_set_new(root, "results", arr);
    /* the phases that ended before this JSON was written (a profile's, which follow, are in the console only) */
    json_object_set_new(root, "phases_s", phases_json(&rep->phases));
    tp_status st = tp_json_write_file(root, o->json_path, JSON_INDENT(1) | JSON_PRESERVE_ORDER, "the JSON report", err);
    json_decref(root);
    if (st) return st;
    printf("\nJSON report: %s\n", o->json_path);
    return TP_OK;
}

#ifdef TPROF_HAVE_CUDA
static tp_status write_compare(const tp_bench_report *rep, tp_error *err) {
    const tp_bench_options *o = rep->o;
    const tp_gpu_info *gpu = &rep->gpu;
    const tp_bench_result *res = rep->res;
    const int base = rep->base, R = rep->ref_rows;
    tp_compare_config cfg;
    memset(&cfg, 0, sizeof cfg);
    char driver[128], cuda[64], lt[64], date[64], peak_shape[128], art[3 * TP_MAX_PRECISIONS + 1][1100];
    const int peak_n = 8192;
    /* the rates the run measured (bench.c rates_and_floors); a precision whose peak cannot be measured (a native
     * block-scaled format) stays 0, and the report says so instead of an Amdahl bound */
    for (int p = 0; rep->rates && p < TP_PREC_COUNT; p++) cfg.peak_tflops[p] = rep->rates->peak_tflops[p];
    snprintf(driver, sizeof driver, "%s", gpu->driver);
    snprintf(cuda, sizeof cuda, "driver %d.%d, runtime %d.%d", gpu->driver_cuda / 1000, gpu->driver_cuda % 1000 / 10,
             gpu->runtime_cuda / 1000, gpu->runtime_cuda % 1000 / 10);
    snprintf(lt, sizeof lt, "%zu", gpu->cublaslt_version);
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    int emu = 0;
    for (int i = 0; i < o->n_precs; i++) emu |= res[i].n_emulated_ops > 0;
    snprintf(peak_shape, sizeof peak_shape, "%d x %d x %d%s", peak_n, peak_n, peak_n,
             emu ? "; emulated formats on their emulation path (bf16 GEMM)" : "");
    cfg.model = tp_model_name(&rep->model);
    cfg.unit = rep->input.unit;
    cfg.not_logits = rep->output.classes <= 0;
    cfg.reference = rep->reference == TP_REF_GPU ? "FP32 GPU" : "FP32 CPU";
    cfg.batch = o->batch;
    cfg.gpu = gpu->name;
    cfg.driver = driver;
    cfg.cuda = cuda;
    cfg.cublaslt = lt;
    cfg.warmup_ms = o->warmup_ms;
    cfg.iterations = o->iterations;
    cfg.duration_s = o->duration_s;
    cfg.cuda_graph = o->use_graph;
    cfg.commit = TP_GIT_DIRTY ? TP_GIT_COMMIT " (with uncommitted changes)" : TP_GIT_COMMIT;
    cfg.date = date;
    cfg.command = o->command_line ? o->command_line : "";
    cfg.peak_shape = peak_shape;
    if (o->sparsity) {
        cfg.sparse_layers = rep->sparse.globs ? rep->sparse.globs : "*";
        cfg.prune_samples = rep->has_prune_cost ? rep->ref_rows : 0;
        cfg.prune_cosine = rep->prune_cost.cosine, cfg.prune_rel_l2 = rep->prune_cost.rel_l2;
        cfg.prune_top1 = rep->output.classes ? rep->prune_cost.top1_agree : NAN;
    }
    tp_compare_entry *ent = calloc((size_t)o->n_precs, sizeof *ent);
    if (!ent) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < o->n_precs; i++) {
        const tp_bench_result *r = &res[i];
        tp_compare_entry *e = &ent[i];
        e->prec = r->prec;
        e->trace = &r->trace;
        e->prof = &r->prof;
        e->median_ms = r->lat.median, e->mean_ms = r->lat.mean, e->p99_ms = r->lat.p99, e->cov = r->lat.cov;
        e->qps = r->n / (r->wall_ms * 1e-3);
        e->images_per_s = e->qps * o->batch; /* samples per second of the family's unit */
        e->weight_bytes = r->format_weight_bytes;
        e->emulated_ops = r->n_emulated_ops;
        e->cosine = r->acc.cosine, e->rel_l2 = r->acc.rel_l2, e->max_abs = r->acc.max_abs;
        e->top1 = rep->output.classes > 0 ? r->acc.top1_agree : NAN;
        e->drift = r->drift, e->n_drift = r->n_drift;
        e->ref_images = R;
        e->attn_cost = r->attn_cost; /* measured once, in the benchmark (attention_cost) */
        e->n_attn_cost = r->n_attn_cost;
        e->sparse = r->sparse;
        e->n_sparse = r->n_sparse;
        if (r->has_decode) {
            e->has_decode = 1;
            e->step_median_ms = r->dec.median, e->step_p99_ms = r->dec.p99;
            e->tokens_per_s = o->batch / (r->dec.median * 1e-3);
            e->step_floor_ms = r->dec_floor.ns * 1e-6;
            e->pdl_edges = r->pdl_edges, e->graph_edges = r->graph_edges, e->graph_kernels = r->graph_kernels;
            e->dec_persistent = r->dec_persistent, e->dec_instrs = r->dec_instrs;
            if (r->has_dec_prof && r->dec_prof.iterations > 0) e->dec_trace = &r->dec_trace, e->dec_prof = &r->dec_prof;
        }
        const char *ext[3] = {"trace", "chrome", "profile"};
        for (int k = 0; k < 3 && cfg.n_artifacts < 3 * TP_MAX_PRECISIONS; k++) {
            /* relative to the report, which sits in the same folder */
            snprintf(art[cfg.n_artifacts], sizeof art[0], "%s.%s.json", tp_precision_name(r->prec), ext[k]);
            cfg.artifacts[cfg.n_artifacts] = art[cfg.n_artifacts];
            cfg.n_artifacts++;
        }
    }
    if (o->json_path) cfg.artifacts[cfg.n_artifacts++] = o->json_path;
    tp_status st = tp_compare_write(&cfg, ent, o->n_precs, base, o->out_dir, err);
    free(ent);
    if (!st)
        printf("Comparison report: %s/report.md, %s/report.html, %s/report.json\n", o->out_dir, o->out_dir,
               o->out_dir);
    return st;
}

#endif

static void print_floors(const tp_bench_result *res, int n, const tp_roofline_rates *rt) {
    printf("\nRoofline floor per forward pass: each op at max(matmul FLOP / the GEMM peak of its precision, bytes / "
           "the copy rate %.0f GB/s), summed (profile/roofline.h)\n%-9s %10s %18s %17s %10s %15s\n", rt->copy_gbps,
           "precision", "floor ms", "compute-bound ms", "memory-bound ms", "median ms", "median / floor");
    for (int i = 0; i < n; i++) {
        const tp_bench_result *r = &res[i];
        char ratio[32] = "-";
        if (r->floor.ns > 0) snprintf(ratio, sizeof ratio, "%.2fx", r->lat.median / (r->floor.ns * 1e-6));
        printf("%-9s %10.4f %18.4f %17.4f %10.4f %15s%s\n", tp_precision_name(r->prec), r->floor.ns * 1e-6,
               r->floor.compute_ns * 1e-6, r->floor.memory_ns * 1e-6, r->lat.median, ratio,
               r->floor.known ? "" : "  (partial: a GEMM peak could not be measured)");
    }
}

/* FP8 attention's cost per layer, with its worst layer */
static void print_attention_cost(const tp_bench_report *rep, const tp_bench_result *r) {
    if (!r->n_attn_cost) return;
    printf("\nFP8 attention, accuracy cost per layer (its output against FP16/BF16 flash attention on the same "
           "input):\n  %-26s %-9s %10s %10s\n", "layer", "reference", "cosine", "rel L2");
    for (int k = 0; k < r->n_attn_cost; k++) {
        const tp_attn_cost *a = &r->attn_cost[k];
        printf("  %-26s %-9s %10.6f %10.3e\n", rep->g->ops[a->op].layer, tp_precision_name(a->ref), a->cosine,
               a->rel_l2);
    }
    int w = tp_compare_attn_worst(r->attn_cost, r->n_attn_cost);
    if (w >= 0)
        printf("  worst: %s (cosine %.6f, rel L2 %.3e)\n", rep->g->ops[r->attn_cost[w].op].layer,
               r->attn_cost[w].cosine, r->attn_cost[w].rel_l2);
}

static void text_start(const tp_bench_report *rep) {
    const tp_bench_options *o = rep->o;
    printf("tprof bench: %s (%s), batch %d, %.2f GFLOP/%s (matmul %.2f)\n", tp_model_name(&rep->model), rep->model_desc,
           o->batch, rep->flop / o->batch * 1e-9, rep->input.unit, rep->matmul_flop / o->batch * 1e-9);
    printf("Device: %s%s\n", rep->device,
           rep->dev == TP_DEVICE_GPU ? (o->pipeline_mode == 2 ? "; modular: one CUDA graph per stage, the host waiting "
                                                           "between stages, the tensors crossing each copied once"
                                  : o->use_graph && o->pipeline_mode != 3 ? "; forward pass in one CUDA graph"
                                  : o->pipeline_mode == 3 ? "; eager launches (--pipeline eager)"
                                                          : "; eager launches (--no-graph)")
                                     : "; CPU executor (fp32, the reference)");
    if (o->no_fusion && rep->dev == TP_DEVICE_GPU)
        printf("Fusion: off (--fusion off): every op its own kernel, no residual add, GELU or token step in a GEMM's "
               "epilogue\n");
    if (o->fp32_tensors)
        printf("FP32 protection: tensors (--fp32-protect tensors): RMSNorm and RoPE as FP32 layers, their input cast to "
               "fp32 and their output cast back, as TensorRT runs a layer pinned to FP32\n");
    const tp_gpu_info *gpu = &rep->gpu;
    if (gpu->present)
        printf("GPU: %d SMs, %.1f GB, driver %s, CUDA driver %d.%d, runtime %d.%d, cuBLASLt %zu\n", gpu->sm_count,
               gpu->mem_bytes * 1e-9, gpu->driver, gpu->driver_cuda / 1000, gpu->driver_cuda % 1000 / 10,
               gpu->runtime_cuda / 1000, gpu->runtime_cuda % 1000 / 10, gpu->cublaslt_version);
    printf("Weights: %s; input: %s\n",
           o->engine_path ? o->engine_path : o->onnx ? o->onnx : o->weights ? o->weights
                                                                            : "synthesized from the seed (the reference's init)",
           rep->input_desc);
    printf("Output: %s, %lld per %s\n", rep->output.what, (long long)rep->out_cols, rep->input.unit);
    if (rep->input.preprocess[0]) printf("Preprocessing: %s\n", rep->input.preprocess);
    if (rep->checkpoint_note[0]) printf("%s\n", rep->checkpoint_note);
    if (o->onnx_note) printf("%s\n", o->onnx_note);
    if (rep->tp > 1)
        printf("Tensor parallel: %d GPUs (0..%d), heads and MLP columns split, an all-reduce after o_proj and "
               "down_proj; FLOP, weights, bytes and floors below are per GPU (rank 0's)\n", rep->tp, rep->tp - 1);
    if (rep->host_need >= 1e9 || (rep->host_have > 0 && rep->host_need >= 0.25 * rep->host_have)) {
        char nb[32], hb[32]; /* a run that takes a good part of the machine says so before it starts */
        printf("Host memory: ~%s estimated (%s), %s available (%s)\n", tp_fmt_bytes(rep->host_need, nb, sizeof nb),
               rep->host_parts, tp_fmt_bytes(rep->host_have, hb, sizeof hb), rep->host_have_src);
    }
    fflush(stdout); /* the header is out before a long run starts */
}

static void text_plan(const tp_bench_report *rep, int i, const tp_plan *plan) {
    printf("\nPlan for %s:\n", tp_precision_name(rep->o->precs[i]));
    print_plan(rep->g, plan);
}

/* llama-bench's table: one row per precision and test, tokens/s; then the decode step against its floor. */
static void print_llm_table(const tp_bench_report *rep) {
    const int B = rep->o->batch;
    printf("\n| model | precision | batch | test | t/s | ms | floor ms | ms / floor |\n| --- | --- | ---: | --- | ---: | "
           "---: | ---: | ---: |\n");
    for (int pi = 0; pi < rep->n_res; pi++) {
        const tp_bench_result *r = &rep->res[pi];
        const char *pn = tp_precision_name(r->prec);
        char fl[32] = "", ra[32] = "";
        if (r->floor.known && r->floor.ns > 0) {
            snprintf(fl, sizeof fl, "%.4f", r->floor.ns * 1e-6);
            snprintf(ra, sizeof ra, "%.2f", r->lat.median / (r->floor.ns * 1e-6));
        }
        printf("| %s | %s | %d | pp%d | %.1f | %.4f | %s | %s |\n", tp_model_name(&rep->model), pn, B, rep->prompt,
               B * rep->prompt / (r->lat.median * 1e-3), r->lat.median, fl, ra);
        if (!r->has_decode) continue;
        fl[0] = ra[0] = 0;
        if (r->dec_floor.known && r->dec_floor.ns > 0) {
            snprintf(fl, sizeof fl, "%.4f", r->dec_floor.ns * 1e-6);
            snprintf(ra, sizeof ra, "%.2f", r->dec.median / (r->dec_floor.ns * 1e-6));
        }
        printf("| %s | %s | %d | tg%d | %.1f | %.4f | %s | %s |\n", tp_model_name(&rep->model), pn, B, r->gen,
               B / (r->dec.median * 1e-3), r->dec.median, fl, ra);
    }
    printf("(pp: the prefill, ms per batch = time to first token; tg: one decode step, ms per token per sequence, "
           "median over every step; floor: the roofline floor at the measured rates, a decode step's counted at the "
           "generation's middle context)\n");
}

/* A pipeline's accuracy stage by stage (bench/drift.h) */
static void print_drift(const tp_bench_report *rep, const tp_bench_result *r) {
    if (!r->n_drift) return;
    printf("\nDrift per stage, %s against the FP32 %s reference (%d sample%s; each stage's outputs pooled):\n"
           "  %-36s %7s %12s %10s %10s\n", tp_precision_name(r->prec), rep->reference == TP_REF_GPU ? "GPU" : "CPU",
           rep->ref_rows, rep->ref_rows == 1 ? "" : "s", "stage output", "tensors", "values", "cosine", "rel L2");
    for (int k = 0; k < r->n_drift; k++) {
        const tp_stage_drift *d = &r->drift[k];
        printf("  %-36s %7d %12.0f %10.6f %10.3e\n", d->stage, d->n_values, d->numel, d->acc.cosine, d->acc.rel_l2);
    }
}

static void text_result(const tp_bench_report *rep, int i) {
    print_drift(rep, &rep->res[i]);
    print_attention_cost(rep, &rep->res[i]);
    print_summary(rep, &rep->res[i]);
}

static tp_status text_end(const tp_bench_report *rep, tp_error *err) {
    const tp_bench_options *o = rep->o;
    const int B = o->batch, base = rep->base;
    printf("\n=== Comparison (%s, batch %d, %s) ===\n", tp_model_name(&rep->model), B, rep->device);
    char per_s[32];
    snprintf(per_s, sizeof per_s, tp_unit_hz(rep->input.unit) ? "Hz" : "%ss/s", rep->input.unit);
    printf("%-9s %12s %12s %12s %9s %10s %11s %11s %9s %9s %6s\n", "precision", "median ms", "p99 ms", per_s,
           "speedup", "weights MB", "cosine", "rel L2", "top-1 %", "TFLOP/s", "MFU %");
    for (int pi = 0; pi < rep->n_res; pi++) {
        const tp_bench_result *r = &rep->res[pi];
        double qps = r->n / (r->wall_ms * 1e-3), tf = rep->flop / (r->lat.median * 1e-3) * 1e-12;
        char mfu[16] = "-";
        if (r->peak_tflops > 0) snprintf(mfu, sizeof mfu, "%.1f", 100.0 * tf / r->peak_tflops);
        char top1[16] = "-";
        if (rep->output.classes > 0) snprintf(top1, sizeof top1, "%.1f", 100 * r->acc.top1_agree);
        printf("%-9s %12.4f %12.4f %12.1f %8.2fx %10.1f %11.6f %11.3e %9s %9.3f %6s\n", tp_precision_name(r->prec),
               r->lat.median, r->lat.p99, qps * B, rep->res[base].lat.median / r->lat.median, r->weight_bytes * 1e-6,
               r->acc.cosine, r->acc.rel_l2, top1, tf, mfu);
    }
    printf("(%sspeedup: median time of %s over each; accuracy over %d %s%s against the FP32 %s reference; %s)\n",
           tp_unit_hz(rep->input.unit) ? "Hz: observations per second over the batch; " : "",
           tp_precision_name(rep->res[base].prec), rep->ref_rows, rep->input.unit, rep->ref_rows == 1 ? "" : "s",
           rep->reference == TP_REF_GPU ? "GPU" : rep->reference == TP_REF_CPU ? "CPU" : "(none)",
           rep->dev == TP_DEVICE_GPU ? "TFLOP/s: model FLOPs per batch over the median; MFU: that over the dense GEMM "
                                       "peak of the precision measured on this GPU (8192^3 cuBLASLt)"
                                     : "TFLOP/s: model FLOPs per batch over the median; no MFU on the CPU");
    tp_status st = TP_OK;
    if (rep->rates) print_floors(rep->res, rep->n_res, rep->rates);
    if (rep->prompt > 0) print_llm_table(rep);
    char pb[2400];
    phases_text(&rep->phases, pb, sizeof pb);
    printf("Phases (wall clock, %.1f s so far): %s\n", (tp_now_ms() - rep->t_start) * 1e-3, pb);
    if (o->json_path) st = write_json(rep, err);
#ifdef TPROF_HAVE_CUDA
    if (!st && o->compare) st = write_compare(rep, err);
#endif
    return st;
}

const tp_bench_writer *tp_bench_text_writer(void) {
    static const tp_bench_writer W = {text_start, text_plan, text_result, text_end};
    return &W;
}

/* Decoders in a sweep: the decode steps per batch and precision, and the attainment chart. */
static tp_status print_decode_sweep(const tp_bench_options *o, const int *batches, int n_batches,
                                    const tp_bench_row *rows, tp_error *err) {
    const int P = o->n_precs;
    int any = 0;
    for (int k = 0; k < n_batches * P; k++) any |= rows[k].dec_ms > 0;
    if (!any) return TP_OK;
    printf("\n=== Decode sweep (%s) ===\n%7s %-9s %12s %12s %10s %12s\n", tp_model_name(&o->model), "batch",
           "precision", "tokens/s", "ms / step", "floor ms", "attainment");
    double *att = malloc(sizeof(double) * (size_t)(n_batches * P));
    if (!att) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int p = 0; p < P; p++)
        for (int b = 0; b < n_batches; b++) {
            const tp_bench_row *r = &rows[(size_t)b * P + p];
            att[(size_t)p * n_batches + b] = r->dec_ms > 0 && r->dec_floor_ms > 0 ? 100 * r->dec_floor_ms / r->dec_ms : NAN;
        }
    for (int b = 0; b < n_batches; b++)
        for (int p = 0; p < P; p++) {
            const tp_bench_row *r = &rows[(size_t)b * P + p];
            if (!(r->dec_ms > 0)) continue;
            char fl[16] = "-", at[16] = "-";
            if (r->dec_floor_ms > 0) {
                snprintf(fl, sizeof fl, "%.4f", r->dec_floor_ms);
                snprintf(at, sizeof at, "%.1f %%", att[(size_t)p * n_batches + b]);
            }
            printf("%7d %-9s %12.1f %12.4f %10s %12s\n", batches[b], tp_precision_name(r->prec), batches[b] / (r->dec_ms * 1e-3),
                   r->dec_ms, fl, at);
        }
    printf("(a decode step: one token per sequence; attainment: its roofline floor, weights and KV-cache bytes at the "
           "measured copy rate, over its median)\n");
    tp_status st = TP_OK;
    if (o->json_path) {
        char path[1100], ticks[32][16];
        const char *xt[32], *names[TP_MAX_PRECISIONS];
        const char *dot = strrchr(o->json_path, '.');
        const int stem = dot && strcmp(dot, ".json") == 0 ? (int)(dot - o->json_path) : (int)strlen(o->json_path);
        snprintf(path, sizeof path, "%.*s_decode_sweep.svg", stem, o->json_path);
        for (int b = 0; b < n_batches && b < 32; b++) {
            snprintf(ticks[b], sizeof ticks[b], "%d", batches[b]);
            xt[b] = ticks[b];
        }
        for (int p = 0; p < P; p++) names[p] = tp_precision_name(o->precs[p]);
        char title[200];
        snprintf(title, sizeof title, "%s: decode step, %% of its roofline floor", tp_model_name(&o->model));
        tp_outfile out;
        st = tp_outfile_open(&out, path, "the decode sweep chart", err);
        if (!st && tp_svg_percent_lines(out.f, title, "batch (sequences)", n_batches < 32 ? n_batches : 32, xt, P,
                                        names, att) != 0) {
            tp_outfile_abort(&out);
            st = tp_fail(err, TP_ERR_IO, "%s: cannot write the decode sweep chart", path);
        } else if (!st) {
            st = tp_outfile_commit(&out, err);
        }
        if (!st) printf("Decode sweep chart: %s\n", path);
    }
    free(att);
    return st;
}

tp_status tp_bench_print_sweep(const tp_bench_options *o, const int *batches, int n_batches, const tp_bench_row *rows,
                               tp_error *err) {
    tp_input_desc in;
    tp_model_input(&o->model, &in);
    char per_s[32];
    snprintf(per_s, sizeof per_s, tp_unit_hz(in.unit) ? "Hz" : "%ss/s", in.unit);
    printf("\n=== Batch sweep (%s) ===\n%7s %-9s %12s %12s %10s %7s %10s %9s\n", tp_model_name(&o->model), "batch",
           "precision", "median ms", per_s, "TFLOP/s", "MFU %", "floor ms", "/ floor");
    for (int b = 0; b < n_batches; b++)
        for (int p = 0; p < o->n_precs; p++) {
            const tp_bench_row *r = &rows[(size_t)b * (size_t)o->n_precs + (size_t)p];
            char mfu[16] = "-", fl[16] = "-", over[16] = "-";
            if (r->peak_tflops > 0) snprintf(mfu, sizeof mfu, "%.1f", 100.0 * r->mfu);
            if (r->floor_ms > 0) {
                snprintf(fl, sizeof fl, "%.4f", r->floor_ms);
                snprintf(over, sizeof over, "%.2fx", r->median_ms / r->floor_ms);
            }
            printf("%7d %-9s %12.4f %12.1f %10.3f %7s %10s %9s\n", batches[b], tp_precision_name(r->prec),
                   r->median_ms, r->samples_s, r->tflops, mfu, fl, over);
        }
    printf("(TFLOP/s: model FLOPs per batch over the median; MFU: that over the precision's dense GEMM peak "
           "measured on this GPU, 8192^3 cuBLASLt; floor: the engine's roofline floor, profile/roofline.h; "
           "neither on the CPU)\n");
    return print_decode_sweep(o, batches, n_batches, rows, err);
}
