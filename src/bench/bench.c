#include "bench/bench.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/stats.h"
#include "core/rng.h"
#include "core/util.h"
#include "exec/cpu/cpu_exec.h"
#include "formats/dtype.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "planner/plan.h"
#include "planner/policy.h"
#include "profile/analysis.h"
#include "profile/trace.h"
#include "report/compare.h"
#include "tp_build_info.h"
#ifdef TPROF_HAVE_CUDA
#include "exec/cuda/cuda_engine.h"
#include "exec/cuda/gemm_peak.h"
#include "profile/profile_run.h"
#else
typedef struct {
    int present;
    char name[256];
    int sm, sm_count;
    double mem_bytes, l2_bytes;
    char driver[96];
    int driver_cuda, runtime_cuda;
    size_t cublaslt_version;
} tp_gpu_info;
#endif

/* An op's roofline inputs (profile/roofline.h), kept from its plan */
typedef struct {
    tp_precision prec;
    double matmul_flop, bytes;
} op_cost;

typedef struct {
    tp_precision prec;
    int ok;
    double *samples;
    int n;
    double wall_ms;
    tp_latency_stats lat;
    tp_accuracy acc;
    double weight_bytes, act_bytes;
    double build_ms;
    int n_quant_ops, n_emulated_ops, n_ops; /* ops in the requested quantized format; of them emulated */
    double format_weight_bytes;             /* weights in their format (what an engine file stores) */
    json_t *plan;    /* per op: layer, op, precision, FLOP, bytes (the engine's on a GPU), how (owned) */
    char attn_impl[200]; /* the attention implementation the engine chose, with its build-time timings */
    char gelu_impl[240]; /* the first GEMM feeding a GELU: fused or not, with its build-time timings */
    tp_attn_cost *attn_cost; /* FP8 attention ops, in op order: cosine and rel L2 against FP16/BF16 attention on
                                the same input (owned; NULL when the engine runs no attention in FP8) */
    int n_attn_cost;
    json_t *profile; /* tprof profile: the kernel-level summary (owned) */
    float *logits;   /* --save-output: a copy of the output (B, classes) fp32 */
    int has_prof;    /* trace and prof below are owned */
    double peak_tflops; /* measured dense GEMM peak of this precision (0: not measured) */
    op_cost *cost;      /* per op of the plan: what its roofline floor needs (owned) */
    int n_cost;
    unsigned rate_mask; /* bit p: the floor needs the GEMM peak of tp_precision p (one gemm_peak.h can time) */
    tp_roofline_floor floor; /* the engine's roofline floor per forward pass (GPU runs) */
    tp_trace trace;
    tp_profile_summary prof;
} prec_result;

/* Random inputs: pixels uniform in [0, 1), normalized with the preset's mean and std, as a real image would
 * be after timm's preprocessing (never zeros). */
static void random_images(const tp_vit_config *c, int B, uint64_t seed, float *dst) {
    tp_rng r;
    tp_rng_seed_named(&r, seed, "input");
    const int64_t S = c->img_size;
    for (int64_t b = 0; b < B; b++)
        for (int ch = 0; ch < 3; ch++)
            for (int64_t i = 0; i < S * S; i++)
                dst[((b * 3 + ch) * S * S) + i] = ((float)tp_rng_uniform(&r) - c->pre.mean[ch]) / c->pre.std[ch];
}

static void host_cpu_name(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ') p++;
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, n, "%s", p);
            }
            break;
        }
    fclose(f);
}

static void print_plan(const tp_graph *g, const tp_plan *p) {
    printf("  %-26s %-12s %-5s %10s %10s  %s\n", "layer", "op", "prec", "GFLOP", "MB", "how");
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        printf("  %-26s %-12s %-5s %10.3f %10.2f  %s\n", op->layer, tp_op_kind_name(op->kind),
               tp_precision_name(p->op_prec[i]), op->flop * 1e-9, tp_plan_op_bytes(p, g, i) * 1e-6, p->op_note[i]);
    }
}

static json_t *json_plan(const tp_graph *g, const tp_plan *p) {
    json_t *a = json_array();
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:f,s:f,s:s}", "layer", op->layer, "op",
                                           tp_op_kind_name(op->kind), "precision", tp_precision_name(p->op_prec[i]),
                                           "flop", op->flop, "bytes", tp_plan_op_bytes(p, g, i), "how",
                                           p->op_note[i]));
    }
    return a;
}

#ifdef TPROF_HAVE_CUDA
/* FP8 attention's cost layer by layer (tp_engine_attention_cost): printed with its worst layer, and kept in r
 * (r->attn_cost, one row per attention op the plan runs in FP8) for the JSON and the comparison report. The
 * reference's precision is that of the op's qkv input (plan->value_dt). */
static tp_status attention_cost(tp_engine *e, const tp_graph *g, const tp_plan *plan, prec_result *r, tp_error *err) {
    double *cs = malloc(sizeof(double) * (size_t)g->n_ops), *rl = malloc(sizeof(double) * (size_t)g->n_ops);
    int n = 0;
    tp_status st = cs && rl ? tp_engine_attention_cost(e, cs, rl, &n, err) : tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (!st && !(r->attn_cost = calloc((size_t)g->n_ops, sizeof *r->attn_cost)))
        st = tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (!st) {
        printf("\nFP8 attention, accuracy cost per layer (its output against FP16/BF16 flash attention on the same "
               "input):\n  %-26s %-9s %10s %10s\n", "layer", "reference", "cosine", "rel L2");
        for (int i = 0; i < g->n_ops; i++) {
            if (g->ops[i].kind != TP_OP_ATTENTION || plan->op_prec[i] != TP_PREC_FP8) continue;
            tp_attn_cost *a = &r->attn_cost[r->n_attn_cost++];
            a->op = i;
            a->ref = plan->value_dt[g->ops[i].in[0]] == TP_BF16 ? TP_PREC_BF16 : TP_PREC_FP16;
            a->cosine = cs[i];
            a->rel_l2 = rl[i];
            printf("  %-26s %-9s %10.6f %10.3e\n", g->ops[i].layer, tp_precision_name(a->ref), cs[i], rl[i]);
        }
        int w = tp_compare_attn_worst(r->attn_cost, r->n_attn_cost);
        if (w >= 0)
            printf("  worst: %s (cosine %.6f, rel L2 %.3e)\n", g->ops[r->attn_cost[w].op].layer,
                   r->attn_cost[w].cosine, r->attn_cost[w].rel_l2);
    }
    free(cs);
    free(rl);
    return st;
}
#endif

static void print_summary(const tp_bench_options *o, const prec_result *r, const char *device, double flop,
                          int ref_rows) {
    char wb[32], ab[32];
    const tp_latency_stats *l = &r->lat;
    printf("\n=== %s%s on %s: performance summary ===\n", tp_precision_name(r->prec),
           r->n_emulated_ops ? " (EMULATED)" : "", device);
    double qps = r->n / (r->wall_ms * 1e-3);
    printf("Throughput: %.2f qps, %.1f images/s (batch %d)\n", qps, qps * o->batch, o->batch);
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
    }
    if (r->attn_impl[0]) printf("Attention (chosen when the engine was built): %s\n", r->attn_impl);
    if (r->gelu_impl[0]) printf("GEMM + GELU (chosen when the engine was built): %s\n", r->gelu_impl);
    if (r->n_quant_ops)
        printf("%s: %d of %d ops run %s GEMMs%s%s; the rest %s\n", tp_precision_name(r->prec), r->n_quant_ops, r->n_ops,
               tp_precision_name(r->prec),
               r->prec == TP_PREC_FP8 ? (o->calib.method == TP_CALIB_PERCENTILE
                                             ? " (static per-tensor scales, percentile calibration)"
                                             : " (static per-tensor scales, max calibration)")
                                      : "",
               r->n_emulated_ops ? ", EMULATED (no hardware path on this GPU: see --plan)" : "",
               r->prec == TP_PREC_FP8 ? "fp16" : "bf16");
    if (r->format_weight_bytes > 0 && fabs(r->format_weight_bytes - r->weight_bytes) > 0.5) {
        char fb[32];
        printf("Weights in %s: %s (%.0f bytes; the emulation keeps them dequantized on the device)\n",
               tp_precision_name(r->prec), tp_fmt_bytes(r->format_weight_bytes, fb, sizeof fb), r->format_weight_bytes);
    }
    const tp_accuracy *a = &r->acc;
    printf("Accuracy vs FP32 CPU reference (%d of %d images): cosine = %.6f, relative L2 = %.3e, "
           "max abs error = %.3e, top-1 agreement = %.1f %% (%d/%d)%s\n",
           ref_rows, o->batch, a->cosine, a->rel_l2, a->max_abs, 100 * a->top1_agree,
           (int)lround(a->top1_agree * a->rows), a->rows, a->nonfinite ? "  NON-FINITE VALUES IN OUTPUT" : "");
}

/* Speedups are against FP16 when it was run (the precision users compare against), else the first. */
static int baseline_index(const prec_result *res, int n) {
    for (int i = 0; i < n; i++)
        if (res[i].prec == TP_PREC_FP16) return i;
    return 0;
}

static json_t *json_stats(const tp_latency_stats *l) {
    return json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "runs", l->n, "min_ms", l->min, "max_ms", l->max,
                     "mean_ms", l->mean, "median_ms", l->median, "p90_ms", l->p90, "p95_ms", l->p95, "p99_ms",
                     l->p99, "stddev_ms", l->stddev, "cov", l->cov);
}

static json_t *json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* 1 when gemm_peak.h can time precision p for an op (or engine) that runs it emulated or not: a block-scaled
 * format on native block-scaled MMA (Blackwell) cannot be, its floor stays partial */
static int peak_measurable(tp_precision p, int emulated) {
    const int block = p == TP_PREC_MXFP8 || p == TP_PREC_NVFP4 || p == TP_PREC_MXFP4;
    return !block || emulated;
}

/* The GEMM peaks an engine of precision prec planned as p needs (bit q: tp_precision q): its own, MFU's
 * denominator, and those of every op with matrix products, for the roofline */
static unsigned rate_mask(const tp_graph *g, const tp_plan *p, tp_precision prec) {
    int emulated = 0;
    for (int i = 0; i < g->n_ops; i++) emulated += p->op_emulated[i];
    unsigned m = peak_measurable(prec, emulated) ? 1u << prec : 0;
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].matmul_flop > 0 && peak_measurable(p->op_prec[i], p->op_emulated[i])) m |= 1u << p->op_prec[i];
    return m;
}

#ifdef TPROF_HAVE_CUDA
/* Measures what rt lacks: the GEMM peak of each precision in mask (bit p: tp_precision p) and the copy rate. */
static tp_status measure_rates(tp_roofline_rates *rt, unsigned mask, tp_error *err) {
    for (int p = 0; p < TP_PREC_COUNT; p++) {
        if (!(mask >> p & 1) || rt->peak_tflops[p] > 0) continue;
        tp_status st = tp_gemm_peak((tp_precision)p, 8192, 50, &rt->peak_tflops[p], err);
        if (st) return st;
    }
    return rt->copy_gbps > 0 ? TP_OK : tp_copy_rate((size_t)256 << 20, 20, &rt->copy_gbps, err);
}

/* The engines' roofline floors beside their medians */
static void print_floors(const prec_result *res, int n, const tp_roofline_rates *rt) {
    printf("\nRoofline floor per forward pass: each op at max(matmul FLOP / the GEMM peak of its precision, bytes / "
           "the copy rate %.0f GB/s), summed (profile/roofline.h)\n%-9s %10s %18s %17s %10s %15s\n", rt->copy_gbps,
           "precision", "floor ms", "compute-bound ms", "memory-bound ms", "median ms", "median / floor");
    for (int i = 0; i < n; i++) {
        const prec_result *r = &res[i];
        char ratio[32] = "-";
        if (r->floor.ns > 0) snprintf(ratio, sizeof ratio, "%.2fx", r->lat.median / (r->floor.ns * 1e-6));
        printf("%-9s %10.4f %18.4f %17.4f %10.4f %15s%s\n", tp_precision_name(r->prec), r->floor.ns * 1e-6,
               r->floor.compute_ns * 1e-6, r->floor.memory_ns * 1e-6, r->lat.median, ratio,
               r->floor.known ? "" : "  (partial: a GEMM peak could not be measured)");
    }
}
#endif

static tp_status write_json(const tp_bench_options *o, const tp_gpu_info *gpu, const char *device,
                            const tp_graph *g, const prec_result *res, int n_res, double flop, double matmul_flop,
                            int ref_rows, const char *input_desc, const tp_roofline_rates *rt, tp_error *err) {
    char cpu[256], when[64];
    host_cpu_name(cpu, sizeof cpu);
    time_t t = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    json_t *root = json_object();
    json_object_set_new(root, "tool", json_string("tprof bench " TPROF_VERSION));
    json_object_set_new(root, "commit", json_string(TP_GIT_COMMIT));
    json_object_set_new(root, "commit_dirty", json_boolean(TP_GIT_DIRTY));
    json_object_set_new(root, "date", json_string(when));
    json_object_set_new(root, "command", json_string(o->command_line ? o->command_line : ""));
    const tp_vit_config *c = &o->cfg;
    json_t *model = json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:f,s:b,s:s,s:i,s:f,s:i}", "name", c->name, "img_size",
                              c->img_size, "patch_size", c->patch_size, "embed_dim", c->embed_dim, "depth", c->depth,
                              "num_heads", c->num_heads, "mlp_ratio", c->mlp_ratio, "class_token", c->class_token,
                              "global_pool", c->global_pool ? "avg" : "token", "num_classes", c->num_classes,
                              "ln_eps", (double)c->ln_eps, "tokens", tp_vit_tokens(c));
    json_object_set_new(root, "model", model);
    json_t *cfg = json_pack("{s:i,s:f,s:i,s:f,s:s,s:b,s:s,s:s,s:I,s:i,s:s}", "batch", o->batch, "warmup_ms",
                            o->warmup_ms, "iterations", o->iterations, "duration_s", o->duration_s, "device", device,
                            "cuda_graph", o->use_graph, "weights", o->weights ? o->weights : "synthesized (timm init)",
                            "input", input_desc, "seed", (json_int_t)o->seed, "reference_images", ref_rows,
                            "timing", "GPU compute time per run from CUDA events; host-device transfers excluded");
    char cdesc[48];
    json_object_set_new(cfg, "calibration", json_string(tp_calib_describe(&o->calib, cdesc, sizeof cdesc)));
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
                                      "8192 x 8192 x 8192 cuBLASLt", "copy_gbps", json_num(rt->copy_gbps), "copy",
                                      "device-to-device cudaMemcpyAsync of 256 MiB, (read + written bytes) / median"));
    }
    json_object_set_new(root, "system", sys);
    json_object_set_new(root, "model_flop_per_batch", json_real(flop));
    json_object_set_new(root, "model_matmul_flop_per_batch", json_real(matmul_flop));
    int base = baseline_index(res, n_res);
    json_object_set_new(root, "speedup_baseline", json_string(tp_precision_name(res[base].prec)));
    json_t *arr = json_array();
    for (int i = 0; i < n_res; i++) {
        const prec_result *r = &res[i];
        json_t *p = json_object();
        json_object_set_new(p, "precision", json_string(tp_precision_name(r->prec)));
        json_object_set_new(p, "latency", json_stats(&r->lat));
        double qps = r->n / (r->wall_ms * 1e-3);
        json_object_set_new(p, "throughput_qps", json_num(qps));
        json_object_set_new(p, "images_per_s", json_num(qps * o->batch));
        const double tf = flop / (r->lat.median * 1e-3) * 1e-12;
        json_object_set_new(p, "tflops_at_median", json_num(tf));
        json_object_set_new(p, "gemm_peak_tflops", r->peak_tflops > 0 ? json_real(r->peak_tflops) : json_null());
        json_object_set_new(p, "mfu", r->peak_tflops > 0 ? json_num(tf / r->peak_tflops) : json_null());
        if (rt)
            json_object_set_new(p, "roofline",
                                json_pack("{s:o,s:o,s:o,s:b,s:o}", "floor_ms", json_num(r->floor.ns * 1e-6),
                                          "compute_bound_ms", json_num(r->floor.compute_ns * 1e-6), "memory_bound_ms",
                                          json_num(r->floor.memory_ns * 1e-6), "floor_known", r->floor.known,
                                          "median_over_floor", r->floor.ns > 0
                                                                   ? json_num(r->lat.median / (r->floor.ns * 1e-6))
                                                                   : json_null()));
        json_object_set_new(p, "weight_bytes", json_real(r->weight_bytes));
        json_object_set_new(p, "format_weight_bytes", json_real(r->format_weight_bytes));
        json_object_set_new(p, "quantized_ops", json_integer(r->n_quant_ops));
        json_object_set_new(p, "emulated_ops", json_integer(r->n_emulated_ops));
        json_object_set_new(p, "activation_bytes", json_real(r->act_bytes));
        json_object_set_new(p, "build_ms", json_real(r->build_ms));
        json_object_set_new(p, "speedup_vs_baseline", json_num(res[base].lat.median / r->lat.median));
        json_t *acc = json_object();
        json_object_set_new(acc, "reference", json_string("CPU executor, fp32 storage, fp64 accumulation"));
        json_object_set_new(acc, "images", json_integer(r->acc.rows));
        json_object_set_new(acc, "cosine", json_num(r->acc.cosine));
        json_object_set_new(acc, "rel_l2", json_num(r->acc.rel_l2));
        json_object_set_new(acc, "max_abs", json_num(r->acc.max_abs));
        json_object_set_new(acc, "top1_agreement", json_num(r->acc.top1_agree));
        json_object_set_new(acc, "nonfinite", json_integer(r->acc.nonfinite));
        json_object_set_new(p, "accuracy", acc);
        json_t *s = json_array();
        for (int k = 0; k < r->n; k++) json_array_append_new(s, json_real(r->samples[k]));
        json_object_set_new(p, "samples_ms", s);
        if (r->plan) json_object_set(p, "plan", r->plan);
        if (r->attn_cost) {
            json_t *ac = json_array();
            for (int k = 0; k < r->n_attn_cost; k++) {
                const tp_attn_cost *a = &r->attn_cost[k];
                json_array_append_new(ac, json_pack("{s:s,s:s,s:o,s:o}", "layer", g->ops[a->op].layer, "reference",
                                                    tp_precision_name(a->ref), "cosine", json_num(a->cosine),
                                                    "rel_l2", json_num(a->rel_l2)));
            }
            json_object_set_new(p, "fp8_attention_cost", ac);
        }
        if (r->profile) json_object_set(p, "profile", r->profile);
        json_array_append_new(arr, p);
    }
    json_object_set_new(root, "results", arr);
    int rc = json_dump_file(root, o->json_path, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (rc) return tp_fail(err, TP_ERR_IO, "%s: cannot write the JSON report", o->json_path);
    printf("\nJSON report: %s\n", o->json_path);
    return TP_OK;
}

/* Times the CPU executor on the whole batch (host wall clock; the CPU path has no asynchronous work). */
static tp_status bench_cpu(const tp_bench_options *o, const tp_graph *g, const tp_params *params, const float *in,
                           float *out, prec_result *r, tp_error *err) {
    tp_status st;
    double t0 = tp_now_ms();
    do {
        if ((st = tp_cpu_run(g, params, in, out, err))) return st;
    } while (tp_now_ms() - t0 < o->warmup_ms);
    int n = o->iterations > 0 ? o->iterations : 1;
    r->samples = malloc(sizeof(double) * (size_t)n);
    if (!r->samples) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    double w0 = tp_now_ms();
    for (int i = 0; i < n; i++) {
        double a = tp_now_ms();
        if ((st = tp_cpu_run(g, params, in, out, err))) return st;
        r->samples[i] = tp_now_ms() - a;
    }
    r->wall_ms = tp_now_ms() - w0;
    r->n = n;
    return TP_OK;
}


#ifdef TPROF_HAVE_CUDA
/* tprof compare: the GEMM peak rates of this GPU, then the report over all precisions. */
static tp_status write_compare(const tp_bench_options *o, const tp_gpu_info *gpu, const prec_result *res, int base,
                               int R, tp_error *err) {
    tp_compare_config cfg;
    memset(&cfg, 0, sizeof cfg);
    char driver[128], cuda[64], lt[64], date[64], peak_shape[128], art[3 * TP_MAX_PRECISIONS + 1][1100];
    const int peak_n = 8192;
    printf("\nMeasuring dense GEMM peak rates (%d x %d x %d, cuBLASLt):", peak_n, peak_n, peak_n);
    for (int i = 0; i < o->n_precs; i++)
        if (res[i].peak_tflops > 0) cfg.peak_tflops[res[i].prec] = res[i].peak_tflops; /* measured by the bench */
    for (int i = 0; i < o->n_precs; i++) {
        tp_precision p = res[i].prec;
        if (cfg.peak_tflops[p] > 0) continue;
        tp_status st = tp_gemm_peak(p, peak_n, 50, &cfg.peak_tflops[p], err);
        if (st) return st;
        printf(" %s %.0f TFLOP/s", tp_precision_name(p), cfg.peak_tflops[p]);
    }
    printf("\n");
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
    cfg.model = o->cfg.name;
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
    tp_compare_entry *ent = calloc((size_t)o->n_precs, sizeof *ent);
    if (!ent) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < o->n_precs; i++) {
        const prec_result *r = &res[i];
        tp_compare_entry *e = &ent[i];
        e->prec = r->prec;
        e->trace = &r->trace;
        e->prof = &r->prof;
        e->median_ms = r->lat.median, e->mean_ms = r->lat.mean, e->p99_ms = r->lat.p99, e->cov = r->lat.cov;
        e->qps = r->n / (r->wall_ms * 1e-3);
        e->images_per_s = e->qps * o->batch;
        e->weight_bytes = r->format_weight_bytes;
        e->emulated_ops = r->n_emulated_ops;
        e->cosine = r->acc.cosine, e->rel_l2 = r->acc.rel_l2, e->max_abs = r->acc.max_abs;
        e->top1 = r->acc.top1_agree;
        e->ref_images = R;
        e->attn_cost = r->attn_cost; /* measured once, in the benchmark (attention_cost) */
        e->n_attn_cost = r->n_attn_cost;
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

/* The policy of one engine: the --policy-file's when its default is this precision, else the precision's
 * default (patch embedding and head kept high for quantized formats), plus the --policy overrides. */
static tp_status make_policy(const tp_bench_options *o, tp_precision prec, tp_policy *pol, tp_error *err) {
    if (o->engine_file) {
        *pol = o->engine_file->policy; /* the engine as it was built; the GELU form is chosen when it runs */
        pol->gelu_tanh = o->gelu_tanh;
        return TP_OK;
    }
    tp_policy_default(pol, prec);
    if (o->policy_file) {
        tp_policy fp;
        tp_status st = tp_policy_load_json(o->policy_file, &fp, err);
        if (st) return st;
        if (fp.def == prec) *pol = fp;
    }
    tp_status st = o->policy ? tp_policy_parse(pol, o->policy, err) : TP_OK;
    pol->gelu_tanh = o->gelu_tanh;
    return st;
}

tp_status tp_bench_run(const tp_bench_options *o, tp_error *err) {
    tp_status st = tp_vit_config_validate(&o->cfg, err);
    if (st) return st;
#ifdef TPROF_HAVE_CUDA
    tp_cupti *cupti = NULL; /* tprof profile's CUPTI session, open before any engine is built */
    const tp_qtensor **wq = NULL; /* --engine: per parameter, the stored quantized weight */
#endif
    if (o->batch <= 0) return tp_fail(err, TP_ERR_ARG, "--batch %d: must be positive", o->batch);
    if (o->n_precs <= 0) return tp_fail(err, TP_ERR_ARG, "--precision: no precision given");
    const tp_vit_config *c = &o->cfg;
    tp_gpu_info gpu;
    memset(&gpu, 0, sizeof gpu);
    tp_device_kind dev = o->device;
    tp_error gerr = {0};
#ifdef TPROF_HAVE_CUDA
    if (dev != TP_DEVICE_CPU) {
        if (tp_gpu_query(0, &gpu, &gerr) == TP_OK) dev = TP_DEVICE_GPU;
        else if (dev == TP_DEVICE_GPU) return tp_fail(err, TP_ERR_NO_GPU, "--device gpu: %s", gerr.msg);
        else dev = TP_DEVICE_CPU;
    }
#else
    if (dev == TP_DEVICE_GPU)
        return tp_fail(err, TP_ERR_NO_GPU, "--device gpu: this tprof was built without CUDA (CPU-only build)");
    snprintf(gerr.msg, sizeof gerr.msg, "this tprof was built without CUDA");
    dev = TP_DEVICE_CPU;
#endif
    if (o->profile_iters > 0 && dev != TP_DEVICE_GPU)
        return tp_fail(err, TP_ERR_NO_GPU, "tprof profile traces GPU kernels and needs a GPU (%s)",
                       o->device == TP_DEVICE_CPU ? "--device cpu was given" : gerr.msg);
    if (dev == TP_DEVICE_CPU && o->device == TP_DEVICE_AUTO) printf("No GPU (%s): running on the CPU.\n", gerr.msg);
    char device[300];
    if (dev == TP_DEVICE_GPU || gpu.present) snprintf(device, sizeof device, "%s (sm_%d)", gpu.name, gpu.sm);
    else host_cpu_name(device, sizeof device);

    /* parameters, inputs, graphs */
    tp_params params = {0};
    st = o->engine_file ? tp_engine_file_params(o->engine_file, &params, err)
         : o->weights   ? tp_vit_params_load(c, o->weights, &params, err)
                        : tp_vit_params_init(c, o->seed, 0, &params, err);
    if (st) return st;
    const int B = o->batch, S = c->img_size;
    const size_t img_n = (size_t)B * 3 * S * S;
    /* the input and calibration batches live on the host too: refuse before touching memory the machine lacks
     * (an overcommitted malloc would succeed and the process be killed while filling it) */
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    double host_need = 2.0 * (double)img_n * sizeof(float), host_have = (double)pages * (double)psize;
    if (pages > 0 && psize > 0 && host_need > 0.8 * host_have) {
        char nb[32], hb[32];
        tp_params_free(&params);
        return tp_fail(err, TP_ERR_OOM, "--batch %d: the input and calibration images need %s of host memory; this "
                       "machine has %s", B, tp_fmt_bytes(host_need, nb, sizeof nb),
                       tp_fmt_bytes(host_have, hb, sizeof hb));
    }
    float *images = malloc(sizeof(float) * img_n), *calib = malloc(sizeof(float) * img_n);
    int R = o->ref_images > 0 && o->ref_images < B ? o->ref_images : B;
    int out_cols = c->num_classes > 0 ? c->num_classes : c->embed_dim;
    float *ref = malloc(sizeof(float) * (size_t)R * out_cols);
    float *out = malloc(sizeof(float) * (size_t)B * out_cols);
    prec_result *res = calloc((size_t)o->n_precs, sizeof *res);
#ifdef TPROF_HAVE_CUDA
    tp_roofline_rates rt_local;
    memset(&rt_local, 0, sizeof rt_local);
    tp_roofline_rates *rt = o->rates_cache ? o->rates_cache : &rt_local;
#endif
    tp_graph g = {0}, gref = {0};
    char input_desc[600];
    if (!images || !calib || !ref || !out || !res) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory for batch %d", B);
        goto done;
    }
    if (o->image) {
        int n_files = 0;
        if ((st = tp_image_load_batch(o->image, &c->pre, B, images, &n_files, err))) goto done;
        memcpy(calib, images, sizeof(float) * img_n);
        snprintf(input_desc, sizeof input_desc, "%s (%d image%s, timm eval preprocessing)", o->image, n_files,
                 n_files == 1 ? "" : "s");
    } else {
        random_images(c, B, o->seed, images);
        random_images(c, B, o->seed + 1, calib);
        snprintf(input_desc, sizeof input_desc, "random pixels U[0,1) normalized, seed %llu",
                 (unsigned long long)o->seed);
    }
    if ((st = tp_vit_build_graph(c, &params, B, &g, err))) goto done;
#ifdef TPROF_HAVE_CUDA
    /* an engine file's quantized weights are uploaded as stored */
    if (o->engine_file) {
        wq = calloc((size_t)params.n_params, sizeof *wq);
        if (!wq) {
            st = tp_fail(err, TP_ERR_OOM, "out of host memory");
            goto done;
        }
        for (int i = 0; i < params.n_params && i < o->engine_file->n_tensors; i++)
            if (o->engine_file->tensors[i].qf != TP_QF_NONE) wq[i] = &o->engine_file->tensors[i].q;
    }
#endif
    if ((st = tp_vit_build_graph(c, &params, R, &gref, err))) goto done;
    const double flop = tp_graph_flop(&g), mflop = tp_graph_matmul_flop(&g);
    printf("tprof bench: %s (img %d, patch %d, dim %d, depth %d, heads %d, %d tokens), batch %d, %.2f GFLOP/image "
           "(matmul %.2f)\n",
           c->name, S, c->patch_size, c->embed_dim, c->depth, c->num_heads, tp_vit_tokens(c), B, flop / B * 1e-9,
           mflop / B * 1e-9);
    printf("Device: %s%s\n", device,
           dev == TP_DEVICE_GPU ? (o->use_graph ? "; forward pass in one CUDA graph" : "; eager launches (--no-graph)")
                                : "; CPU executor (fp32, the reference)");
    if (gpu.present)
        printf("GPU: %d SMs, %.1f GB, driver %s, CUDA driver %d.%d, runtime %d.%d, cuBLASLt %zu\n", gpu.sm_count,
               gpu.mem_bytes * 1e-9, gpu.driver, gpu.driver_cuda / 1000, gpu.driver_cuda % 1000 / 10,
               gpu.runtime_cuda / 1000, gpu.runtime_cuda % 1000 / 10, gpu.cublaslt_version);
    printf("Weights: %s; input: %s\n",
           o->engine_path ? o->engine_path : o->weights ? o->weights : "synthesized from the seed (timm init)",
           input_desc);

#ifdef TPROF_HAVE_CUDA
    if (o->profile_iters > 0 && dev == TP_DEVICE_GPU && (st = tp_cupti_create(&cupti, err))) goto done;
#endif

    /* the FP32 reference on the first R images */
    double t0 = tp_now_ms();
    if ((st = tp_cpu_run(&gref, &params, images, ref, err))) goto done;
    printf("CPU FP32 reference: %d image%s in %.0f ms\n", R, R == 1 ? "" : "s", tp_now_ms() - t0);

#ifdef TPROF_HAVE_CUDA
    /* Profiling prints the roofline with each profile, so the rates come first: measured after an engine's timed
     * runs they would leave the GPU in another power state for its profiled ones (an FP8 forward pass traced at
     * 3.96 ms against 3.51 event-timed, on an H200). Without profiling they follow all timed runs. */
    for (int pi = 0; cupti && pi < o->n_precs && !st; pi++) {
        tp_policy pol;
        tp_plan plan;
        unsigned m = 0;
        if (!(st = make_policy(o, o->precs[pi], &pol, err)) &&
            !(st = tp_plan_build_policy(&g, &pol, gpu.sm, &plan, err))) {
            m = rate_mask(&g, &plan, o->precs[pi]);
            tp_plan_free(&plan);
        }
        if (!st) st = measure_rates(rt, m, err);
    }
    if (st) goto done;
#endif
    for (int pi = 0; pi < o->n_precs; pi++) {
        prec_result *r = &res[pi];
        r->prec = o->precs[pi];
        tp_plan plan;
        tp_policy pol;
        if ((st = make_policy(o, r->prec, &pol, err))) goto done;
        if (pi == 0 || o->policy || o->policy_file) tp_policy_warn(&pol, &g, stdout);
        if ((st = tp_plan_build_policy(&g, &pol, dev == TP_DEVICE_GPU ? gpu.sm : 0, &plan, err))) goto done;
        r->n_ops = g.n_ops;
        for (int i = 0; i < g.n_ops; i++) {
            r->n_quant_ops += plan.op_prec[i] == r->prec && r->prec >= TP_PREC_FP8;
            r->n_emulated_ops += plan.op_emulated[i];
        }
        r->format_weight_bytes = tp_plan_weight_bytes(&plan, &g);
        r->plan = json_plan(&g, &plan);
        if (!(r->cost = malloc(sizeof *r->cost * (size_t)g.n_ops))) {
            tp_plan_free(&plan);
            st = tp_fail(err, TP_ERR_OOM, "out of host memory");
            goto done;
        }
        r->n_cost = g.n_ops;
        r->rate_mask = rate_mask(&g, &plan, r->prec);
        for (int i = 0; i < g.n_ops; i++)
            r->cost[i] = (op_cost){plan.op_prec[i], g.ops[i].matmul_flop, tp_plan_op_bytes(&plan, &g, i)};
        if (o->print_plan) {
            printf("\nPlan for %s:\n", tp_precision_name(r->prec));
            print_plan(&g, &plan);
        }
        double b0 = tp_now_ms();
#ifdef TPROF_HAVE_CUDA
        tp_engine *e = NULL; /* kept until after the summary: the profiled run follows the timed one */
        float *amax = NULL;
#endif
        if (dev == TP_DEVICE_CPU) {
            r->weight_bytes = tp_plan_weight_bytes(&plan, &g);
            r->build_ms = tp_now_ms() - b0; /* nothing to build: the CPU executor runs the graph as it is */
            st = bench_cpu(o, &g, &params, images, out, r, err);
        } else {
#ifdef TPROF_HAVE_CUDA
            int calibrate = 0; /* static per-tensor activation scales need the FP16 engine's amax */
            for (int v = 0; v < g.n_values; v++) calibrate |= plan.value_scaled[v] && g.values[v].kind == TP_VAL_ACT;
            if (calibrate && o->engine_file) {
                amax = malloc(sizeof(float) * (size_t)g.n_values);
                if (!amax) st = tp_fail(err, TP_ERR_OOM, "out of host memory");
                else if (tp_engine_file_calibration(o->engine_file, &g, amax) > 0) calibrate = 0; /* as stored */
                else {
                    free(amax);
                    amax = NULL;
                }
            }
            if (calibrate && !st) {
                amax = malloc(sizeof(float) * (size_t)g.n_values);
                st = amax ? tp_calibrate(&g, &params, 0, gpu.sm, calib, &o->calib, amax, err)
                          : tp_fail(err, TP_ERR_OOM, "out of host memory");
            }
            /* an engine file's GEMM selection, when it was timed where this runs (engine_file.h) */
            const int *given = NULL;
            if (o->engine_file && o->engine_file->has_gemm && !o->gemm_first) {
                const tp_engine_gemm_sel *gs = &o->engine_file->gemm;
                int file_fused = 0; /* the file runs GEMMs in tprof's kernel (TP_GEMM_CHOICE_SM90(_GELU)) */
                for (int i = 0; i < gs->n_ops; i++)
                    file_fused |= gs->algo[i] == TP_GEMM_CHOICE_SM90_GELU || gs->algo[i] == TP_GEMM_CHOICE_SM90;
                const int accum = o->fp8_promote ? TP_FP8_ACCUM_PROMOTE : TP_FP8_ACCUM_FAST;
                int has_fp8 = 0; /* the FP8 accumulation matters to a plan with E4M3 GEMMs only */
                for (int i = 0; i < g.n_ops; i++)
                    has_fp8 |= g.ops[i].kind == TP_OP_LINEAR && plan.value_dt[g.ops[i].in[0]] == TP_E4M3;
                if (gs->n_ops == g.n_ops && gs->batch == B && (size_t)gs->cublaslt == gpu.cublaslt_version &&
                    strcmp(gs->gpu, gpu.name) == 0 && !pol.gelu_tanh && (!o->cublaslt_only || !file_fused) &&
                    (!has_fp8 || gs->fp8_accum == accum)) {
                    given = gs->algo;
                    printf("GEMM algorithms: as stored in the engine file (timed on this GPU, cuBLASLt %d, batch %d)\n",
                           gs->cublaslt, gs->batch);
                } else {
                    printf("GEMM algorithms: timed again (the engine file's are for %s, cuBLASLt %d, batch %d%s)\n",
                           gs->gpu, gs->cublaslt, gs->batch,
                           pol.gelu_tanh                 ? ", without --gelu tanh"
                           : o->cublaslt_only && file_fused ? ", without --gemm cublaslt"
                           : has_fp8 && gs->fp8_accum != accum ? ", with another or unrecorded --fp8-accum"
                                                             : "");
                }
            }
            tp_engine_options eo = {.device = 0, .use_graph = o->use_graph, .gemm_first = o->gemm_first,
                                    .cublaslt_only = o->cublaslt_only, .fp8_promote = o->fp8_promote,
                                    .gemm_choice = given, .act_amax = amax,
                                    .hook = cupti ? tp_cupti_hook : NULL, .hook_user = cupti, .weights_q = wq,
                                    .attention = (tp_attn_impl)o->attention};
            if (!st) st = tp_engine_build(&g, &params, &plan, &eo, &e, err);
            r->build_ms = tp_now_ms() - b0;
            for (int i = 0; !st && i < g.n_ops; i++) {
                /* what the engine chose where it chose (attention), into the plan's record and the summary */
                const char *im = tp_engine_op_impl(e, i);
                if (!im) continue;
                json_t *row = json_array_get(r->plan, (size_t)i);
                char how[520];
                snprintf(how, sizeof how, "%s; %s", plan.op_note[i], im);
                json_object_set_new(row, "how", json_string(how));
                json_object_set_new(row, "implementation", json_string(im));
                if (!r->attn_impl[0] && g.ops[i].kind == TP_OP_ATTENTION)
                    snprintf(r->attn_impl, sizeof r->attn_impl, "%s", im);
                if (!r->gelu_impl[0] && g.ops[i].kind == TP_OP_LINEAR && strstr(im, "GELU"))
                    snprintf(r->gelu_impl, sizeof r->gelu_impl, "%s: %s", g.ops[i].layer, im);
            }
            for (int i = 0; !st && i < g.n_ops; i++) { /* the bytes of the fusions the build made (a GELU) */
                r->cost[i].bytes = tp_engine_op_bytes(e, i);
                json_object_set_new(json_array_get(r->plan, (size_t)i), "bytes", json_real(r->cost[i].bytes));
            }
            if (!st) st = tp_engine_set_input(e, images, err);
            if (!st) st = tp_engine_forward(e, err);
            if (!st) st = tp_engine_get_output(e, out, err);
            if (!st) st = tp_engine_benchmark(e, o->warmup_ms, o->iterations, o->duration_s * 1e3, &r->samples, &r->n,
                                              &r->wall_ms, err);
            int n_fp8_attn = 0;
            for (int i = 0; i < g.n_ops; i++) n_fp8_attn += g.ops[i].kind == TP_OP_ATTENTION && plan.op_prec[i] == TP_PREC_FP8;
            if (!st && n_fp8_attn) st = attention_cost(e, &g, &plan, r, err);
            if (e) {
                r->weight_bytes = tp_engine_weight_bytes(e);
                r->act_bytes = tp_engine_activation_bytes(e);
            }
#endif
        }
        if (!st) {
            tp_latency_stats_compute(r->samples, r->n, &r->lat);
            tp_accuracy_compute(out, ref, R, out_cols, &r->acc);
            /* rows beyond the reference still must be finite */
            for (size_t k = (size_t)R * out_cols; k < (size_t)B * out_cols; k++) r->acc.nonfinite += !isfinite(out[k]);
            r->ok = 1;
            print_summary(o, r, device, flop, R);
            if (o->save_output) {
                r->logits = malloc(sizeof(float) * (size_t)B * out_cols);
                if (r->logits) memcpy(r->logits, out, sizeof(float) * (size_t)B * out_cols);
                else st = tp_fail(err, TP_ERR_OOM, "out of host memory");
            }
        }
#ifdef TPROF_HAVE_CUDA
        if (!st && cupti) {
            tp_profile_request req = {c->name, B, gpu.name, r->lat.median, o->profile_iters, o->top_n, o->out_dir, rt};
            st = tp_profile_engine(cupti, e, &g, &plan, &req, &r->trace, &r->prof, &r->profile, err);
            r->has_prof = 1; /* trace and summary are owned even after an error */
        }
        tp_engine_destroy(e);
        free(amax);
#endif
        tp_plan_free(&plan);
        if (st) {
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%s", err->msg);
            tp_fail(err, st, "%s engine: %s", tp_precision_name(r->prec), m);
            goto done;
        }
    }

    int base = baseline_index(res, o->n_precs);
#ifdef TPROF_HAVE_CUDA
    if (dev == TP_DEVICE_GPU) { /* MFU's and the roofline's denominators, measured (once per sweep) */
        unsigned mask = 0;
        for (int pi = 0; pi < o->n_precs; pi++) mask |= res[pi].rate_mask;
        if ((st = measure_rates(rt, mask, err))) goto done;
        for (int pi = 0; pi < o->n_precs; pi++) {
            prec_result *r = &res[pi];
            r->peak_tflops = r->rate_mask >> r->prec & 1 ? rt->peak_tflops[r->prec] : 0.0;
            r->floor = (tp_roofline_floor){0, 0, 0, 1};
            for (int i = 0; i < r->n_cost; i++) {
                tp_roofline_floor f;
                tp_roofline_op(rt, r->cost[i].prec, r->cost[i].matmul_flop, r->cost[i].bytes, &f);
                tp_roofline_add(&r->floor, &f);
            }
        }
        printf("\nDense GEMM peaks measured on this GPU (8192^3, cuBLASLt; the MFU denominators):");
        for (int p = 0; p < TP_PREC_COUNT; p++)
            if (mask >> p & 1) printf(" %s %.0f TFLOP/s", tp_precision_name((tp_precision)p), rt->peak_tflops[p]);
        printf("; device-to-device copy %.0f GB/s (read + write)\n", rt->copy_gbps);
    }
#endif
    printf("\n=== Comparison (%s, batch %d, %s) ===\n", c->name, B, device);
    printf("%-9s %12s %12s %12s %9s %10s %11s %11s %9s %9s %6s\n", "precision", "median ms", "p99 ms", "images/s",
           "speedup", "weights MB", "cosine", "rel L2", "top-1 %", "TFLOP/s", "MFU %");
    for (int pi = 0; pi < o->n_precs; pi++) {
        const prec_result *r = &res[pi];
        double qps = r->n / (r->wall_ms * 1e-3), tf = flop / (r->lat.median * 1e-3) * 1e-12;
        char mfu[16] = "-";
        if (r->peak_tflops > 0) snprintf(mfu, sizeof mfu, "%.1f", 100.0 * tf / r->peak_tflops);
        printf("%-9s %12.4f %12.4f %12.1f %8.2fx %10.1f %11.6f %11.3e %9.1f %9.3f %6s\n", tp_precision_name(r->prec),
               r->lat.median, r->lat.p99, qps * B, res[base].lat.median / r->lat.median, r->weight_bytes * 1e-6,
               r->acc.cosine, r->acc.rel_l2, 100 * r->acc.top1_agree, tf, mfu);
        if (o->rows_out)
            o->rows_out[pi] = (tp_bench_row){r->prec, r->lat.median, qps * B, tf, r->peak_tflops,
                                             r->peak_tflops > 0 ? tf / r->peak_tflops : 0.0,
                                             r->floor.known ? r->floor.ns * 1e-6 : 0.0};
    }
    printf("(speedup: median time of %s over each; accuracy over %d image%s against the FP32 CPU reference; %s)\n",
           tp_precision_name(res[base].prec), R, R == 1 ? "" : "s",
           dev == TP_DEVICE_GPU ? "TFLOP/s: model FLOPs per batch over the median; MFU: that over the dense GEMM "
                                  "peak of the precision measured on this GPU (8192^3 cuBLASLt)"
                                : "TFLOP/s: model FLOPs per batch over the median; no MFU on the CPU");
    const tp_roofline_rates *rates = NULL; /* measured on a GPU only */
#ifdef TPROF_HAVE_CUDA
    if (dev == TP_DEVICE_GPU) print_floors(res, o->n_precs, rates = rt);
#endif
    if (o->json_path) st = write_json(o, &gpu, device, &g, res, o->n_precs, flop, mflop, R, input_desc, rates, err);
#ifdef TPROF_HAVE_CUDA
    if (!st && o->compare) st = write_compare(o, &gpu, res, base, R, err);
#endif
    if (!st && o->save_output) {
        tp_st_write_entry ent[TP_MAX_PRECISIONS];
        for (int i = 0; i < o->n_precs; i++) {
            memset(&ent[i], 0, sizeof ent[i]);
            ent[i].name = tp_precision_name(res[i].prec);
            ent[i].dtype = TP_F32;
            ent[i].ndim = 2;
            ent[i].shape[0] = B;
            ent[i].shape[1] = out_cols;
            ent[i].data = res[i].logits;
        }
        st = tp_st_write(o->save_output, ent, o->n_precs, err);
        if (!st) printf("Outputs (logits per precision, safetensors): %s\n", o->save_output);
    }

done:
#ifdef TPROF_HAVE_CUDA
    tp_cupti_destroy(cupti);
    free(wq);
#endif
    if (res)
        for (int i = 0; i < o->n_precs; i++) {
            free(res[i].samples);
            free(res[i].logits);
            json_decref(res[i].plan);
            free(res[i].attn_cost);
            free(res[i].cost);
            json_decref(res[i].profile);
            if (res[i].has_prof) {
                tp_trace_free(&res[i].trace);
                tp_profile_summary_free(&res[i].prof);
            }
        }
    free(res);
    free(images);
    free(calib);
    free(ref);
    free(out);
    tp_graph_free(&g);
    tp_graph_free(&gref);
    tp_params_free(&params);
    return st;
}

tp_status tp_build_run(const tp_bench_options *o, const char *out_path, int sm, tp_error *err) {
    tp_status st = tp_vit_config_validate(&o->cfg, err);
    if (st) return st;
    if (o->n_precs != 1) return tp_fail(err, TP_ERR_ARG, "tprof build: give one --precision (an engine has one)");
    const tp_vit_config *c = &o->cfg;
    const tp_precision prec = o->precs[0];
    tp_gpu_info gpu;
    memset(&gpu, 0, sizeof gpu);
    tp_error gerr = {0};
#ifdef TPROF_HAVE_CUDA
    if (tp_gpu_query(0, &gpu, &gerr) != TP_OK) gpu.present = 0;
#else
    snprintf(gerr.msg, sizeof gerr.msg, "this tprof was built without CUDA");
#endif
    if (!sm) {
        if (!gpu.present) return tp_fail(err, TP_ERR_NO_GPU, "tprof build: no GPU (%s); name the target with --arch", gerr.msg);
        sm = gpu.sm;
    }
    tp_params params = {0};
    tp_graph g = {0};
    tp_plan plan;
    memset(&plan, 0, sizeof plan);
    tp_policy pol;
    float *amax = NULL, *calib = NULL;
    st = o->weights ? tp_vit_params_load(c, o->weights, &params, err) : tp_vit_params_init(c, o->seed, 0, &params, err);
    if (st) return st;
    if ((st = make_policy(o, prec, &pol, err))) goto done;
    if ((st = tp_vit_build_graph(c, &params, o->batch, &g, err))) goto done;
    tp_policy_warn(&pol, &g, stdout);
    if ((st = tp_plan_build_policy(&g, &pol, sm, &plan, err))) goto done;
    int calibrate = 0;
    for (int v = 0; v < g.n_values; v++) calibrate |= plan.value_scaled[v] && g.values[v].kind == TP_VAL_ACT;
    if (calibrate) {
#ifdef TPROF_HAVE_CUDA
        if (!gpu.present) {
            st = tp_fail(err, TP_ERR_NO_GPU, "tprof build: %s needs activation scales from calibration on a GPU (%s)",
                         tp_precision_name(prec), gerr.msg);
            goto done;
        }
        const size_t img_n = (size_t)o->batch * 3 * c->img_size * c->img_size;
        amax = malloc(sizeof(float) * (size_t)g.n_values);
        calib = malloc(sizeof(float) * img_n);
        if (!amax || !calib) {
            st = tp_fail(err, TP_ERR_OOM, "out of host memory");
            goto done;
        }
        int n_files = 0;
        if (o->image) st = tp_image_load_batch(o->image, &c->pre, o->batch, calib, &n_files, err);
        else random_images(c, o->batch, o->seed + 1, calib);
        if (!st) st = tp_calibrate(&g, &params, 0, gpu.sm, calib, &o->calib, amax, err);
        if (st) goto done;
        char cd[48];
        printf("Calibrated on %s (batch %d, %s calibration)\n", o->image ? o->image : "random inputs (seed + 1)",
               o->batch, tp_calib_describe(&o->calib, cd, sizeof cd));
#else
        st = tp_fail(err, TP_ERR_NO_GPU, "tprof build: %s needs calibration on a GPU (%s)", tp_precision_name(prec),
                     gerr.msg);
        goto done;
#endif
    }
    /* GEMM selection on the target itself (engine_file.h "gemm_selection"): the engine built once here */
    tp_engine_gemm_sel gsel = {0}, *gs = NULL;
#ifdef TPROF_HAVE_CUDA
    if (gpu.present && gpu.sm == sm && !o->gemm_first) {
        tp_engine *e = NULL;
        tp_engine_options eo = {.device = 0, .use_graph = 0, .act_amax = amax, .cublaslt_only = o->cublaslt_only,
                                .fp8_promote = o->fp8_promote, .attention = (tp_attn_impl)o->attention};
        double t0 = tp_now_ms();
        if ((st = tp_engine_build(&g, &params, &plan, &eo, &e, err))) goto done;
        gsel.algo = malloc(sizeof(int) * (size_t)g.n_ops);
        if (!gsel.algo) {
            tp_engine_destroy(e);
            st = tp_fail(err, TP_ERR_OOM, "out of host memory");
            goto done;
        }
        int n_gemm = 0;
        for (int i = 0; i < g.n_ops; i++) n_gemm += (gsel.algo[i] = tp_engine_gemm_choice(e, i)) >= 0;
        tp_engine_destroy(e);
        snprintf(gsel.gpu, sizeof gsel.gpu, "%s", gpu.name);
        gsel.cublaslt = (int)gpu.cublaslt_version;
        gsel.batch = o->batch;
        gsel.fp8_accum = o->fp8_promote ? TP_FP8_ACCUM_PROMOTE : TP_FP8_ACCUM_FAST;
        gsel.n_ops = g.n_ops;
        gs = &gsel;
        printf("GEMM selection: %d GEMMs timed on %s at batch %d (%.0f ms), stored in the engine\n", n_gemm, gpu.name,
               o->batch, tp_now_ms() - t0);
    }
#endif
    st = tp_engine_file_write(out_path, c, prec, &pol, sm, &params, &g, &plan, amax, gs, err);
    free(gsel.algo);
    if (st) goto done;
    {
        char b[32];
        int emulated = 0;
        for (int i = 0; i < g.n_ops; i++) emulated += plan.op_emulated[i];
        printf("Engine %s: %s for sm_%d, %s of weights in their format%s\n", out_path, tp_precision_name(prec), sm,
               tp_fmt_bytes(tp_plan_weight_bytes(&plan, &g), b, sizeof b),
               emulated ? " (its block-scaled GEMMs run emulated on this target)" : "");
    }
done:
    free(amax);
    free(calib);
    tp_plan_free(&plan);
    tp_graph_free(&g);
    tp_params_free(&params);
    return st;
}

tp_status tp_bench_sweep(const tp_bench_options *o, const int *batches, int n_batches, tp_error *err) {
    if (n_batches <= 0) return tp_fail(err, TP_ERR_ARG, "--batch: no batch size given");
    tp_roofline_rates rates;
    memset(&rates, 0, sizeof rates);
    tp_bench_row *rows = calloc((size_t)n_batches * (size_t)o->n_precs, sizeof *rows);
    char *json = o->json_path ? malloc(strlen(o->json_path) + 32) : NULL;
    if (!rows || (o->json_path && !json)) {
        free(rows);
        free(json);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    tp_status st = TP_OK;
    for (int b = 0; b < n_batches && !st; b++) {
        tp_bench_options ob = *o;
        ob.batch = batches[b];
        ob.rates_cache = &rates;
        ob.rows_out = rows + (size_t)b * (size_t)o->n_precs;
        if (json) { /* out.json -> out_b64.json; no extension: out_b64 */
            const char *dot = strrchr(o->json_path, '.'), *slash = strrchr(o->json_path, '/');
            const size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - o->json_path) : strlen(o->json_path);
            snprintf(json, strlen(o->json_path) + 32, "%.*s_b%d%s", (int)stem, o->json_path, batches[b],
                     o->json_path + stem);
            ob.json_path = json;
        }
        printf("\n##### batch %d (%d of %d) #####\n", batches[b], b + 1, n_batches);
        st = tp_bench_run(&ob, err);
        if (st) {
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%s", err->msg);
            tp_fail(err, st, "batch %d: %s", batches[b], m);
        } else if (json) {
            printf("JSON for batch %d: %s\n", batches[b], json);
        }
    }
    if (!st) {
        printf("\n=== Batch sweep (%s) ===\n%7s %-9s %12s %12s %10s %7s %10s %9s\n", o->cfg.name, "batch", "precision",
               "median ms", "images/s", "TFLOP/s", "MFU %", "floor ms", "/ floor");
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
                       r->median_ms, r->images_s, r->tflops, mfu, fl, over);
            }
        printf("(TFLOP/s: model FLOPs per batch over the median; MFU: that over the precision's dense GEMM peak "
               "measured on this GPU, 8192^3 cuBLASLt; floor: the engine's roofline floor, profile/roofline.h; "
               "neither on the CPU)\n");
    }
    free(rows);
    free(json);
    return st;
}
