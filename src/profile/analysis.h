/* analysis.h: the profile tables computed from a trace (trace.h) alone, so they are the same whether the trace
 * was just recorded with CUPTI or loaded from a fixture on a machine without a GPU.
 *
 * Scope: only records inside profiled iterations (iteration >= 0) count; warm-up or stray activity outside
 * them (iteration -1) is ignored. "Kernel time" means the summed durations of all of those records: kernels,
 * memcpy and memset alike, so the category breakdown (memory included) and the kernel table both add up to it.
 * All times are integer nanoseconds of GPU timestamps unless a name says ms; per-iteration figures are totals
 * divided by the number of profiled iterations. */
#ifndef TP_ANALYSIS_H
#define TP_ANALYSIS_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "profile/roofline.h"
#include "profile/trace.h"

/* One row of the kernel summary (nsys stats' cuda_gpu_kern_sum): the records sharing a name and a category. */
typedef struct {
    char *name;               /* owned copy */
    tp_category category;
    int instances;            /* records over all profiled iterations */
    uint64_t total_ns, min_ns, max_ns;
    double avg_ns, med_ns;    /* median: mean of the two middle values for an even count */
    double stddev_ns;         /* population standard deviation (divides by instances) */
    double time_pct;          /* total_ns as a percentage of the summary's raw_kernel_ns */
    int *layer_ops;           /* distinct layers that launched it, as op indices into the trace, ascending; */
    int n_layer_ops;          /*   ops sharing a layer name appear once; empty for unattributed records */
    int first_record;         /* index in the trace of its first record (trace order) */
} tp_kernel_row;

/* One row per op of the trace, in op order. */
typedef struct {
    char layer[TP_NAME_LEN];
    tp_op_kind kind;
    tp_precision prec;        /* as the plan executed it (from the trace's ops) */
    uint64_t total_ns;        /* busy time of its records (tp_trace_busy_ns) over all profiled iterations */
    double ns_per_iter;
    double pct;               /* of the summary's kernel_ns (busy time) */
    double kernels_per_iter;  /* records launched by this op per iteration */
    int *kernels;             /* distinct kernel rows (indices into tp_profile_summary.kernels), first launch */
    int n_kernels;            /*   first */
    tp_roofline_floor floor;  /* its roofline floor per iteration (roofline.h) from the trace's op costs and rates */
} tp_layer_row;

/* Time against the roofline floor for the ops of one kind (linear, attention, ...), per iteration. */
typedef struct {
    tp_op_kind kind;
    int ops;                  /* ops of this kind with time or a floor */
    double ns_per_iter;       /* their traced time */
    tp_roofline_floor floor;  /* the sum of their floors */
} tp_roofline_row;

/* A pipeline's stage (its ops' layer names start "stage."): the time of its ops, per iteration. */
typedef struct {
    char name[32];
    int ops;
    double ns_per_iter;       /* the busy time of its ops' records */
    double pct;               /* of the summary's kernel_ns */
    tp_roofline_floor floor;  /* the sum of its ops' floors */
} tp_stage_row;

#define TP_PROFILE_MAX_STAGES 16

typedef struct {
    int iterations;             /* profiled forward passes (the trace's) */
    int records;                /* records inside them */
    uint64_t kernel_ns;         /* GPU busy time of those records: the length of the union of their intervals
                                   (tp_trace_busy_ns); their summed durations when no two overlap */
    double kernel_ns_per_iter;  /* kernel_ns / iterations */
    uint64_t raw_kernel_ns;     /* their summed durations (the kernel rows' basis); above kernel_ns when kernels
                                   overlap (programmatic dependent launch: a kernel's wait is in its duration) */
    double raw_kernel_ns_per_iter;
    double span_ns_per_iter;    /* mean over iterations of (last end - first start): includes launch gaps */
    uint64_t *iter_ns;          /* [iterations]: busy time per iteration */
    uint64_t *iter_span_ns;     /* [iterations]: last end - first start per iteration */
    uint64_t *iter_cat_ns;      /* [iterations][TP_CAT_COUNT], row-major: per iteration and category */
    uint64_t cat_ns[TP_CAT_COUNT];      /* totals; they sum to kernel_ns exactly */
    double cat_ns_per_iter[TP_CAT_COUNT];
    double cat_pct[TP_CAT_COUNT];       /* of kernel_ns; they sum to 100 */
    int unattributed;           /* records with op == -1 (not launched by a tprof op) */
    uint64_t unattributed_ns;
    tp_kernel_row *kernels;     /* sorted by total_ns descending, then name, then category */
    int n_kernels;
    tp_layer_row *layers;       /* one per trace op, in op order */
    int n_layers;
    /* a pipeline's stages, in order of first appearance: when every op's layer name has a first component ended
     * by a dot ("vision" of "vision.blocks.0.attn", "expert" of every "expert.stepN....") and there are 2 to
     * TP_PROFILE_MAX_STAGES of them; n_stages 0 otherwise (a ViT's "patch_embed", a decoder's "lm_head") */
    tp_stage_row stages[TP_PROFILE_MAX_STAGES];
    int n_stages;
    /* the roofline (roofline.h): has_roofline when the trace carries measured rates and op costs (traces
     * recorded before they existed do not); by_kind has one row per op kind present, in tp_op_kind order */
    int has_roofline;
    tp_roofline_floor floor;    /* per iteration, all ops */
    double attributed_ns_per_iter; /* traced time of the ops (the unattributed records excluded) */
    tp_roofline_row by_kind[TP_OP_KIND_COUNT];
    int n_by_kind;
} tp_profile_summary;

/* GPU busy time per record: busy[i] = the part of record i's interval not covered by records that started
 * before it (equal starts: the earlier in trace order), 0 for records outside the profiled iterations; returns
 * their sum, the length of the union of the profiled records' intervals. Each stretch of busy GPU time counts once,
 * for the kernel that extends it: a kernel launched early under programmatic dependent launch is charged only
 * for what it adds after its predecessor ended, and without overlap busy[i] is the record's duration. busy has
 * t->n entries. TP_ERR_OOM is the only failure (returns UINT64_MAX then). */
uint64_t tp_trace_busy_ns(const tp_trace *t, uint64_t *busy);
/* (One union over every record: memory copies and the kernels of other streams, NCCL's, count as busy time too.) */

/* Computes the summary of t into *s (overwritten; free with tp_profile_summary_free, also after an error).
 * Errors: TP_ERR_ARG naming the problem when the trace has no profiled iteration, an iteration without any
 * record, or a record whose iteration, op, category or kind is out of range or whose end precedes its start;
 * TP_ERR_OOM. */
tp_status tp_profile_analyze(const tp_trace *t, tp_profile_summary *s, tp_error *err);
/* Frees what analyze allocated; safe on a zeroed summary and twice. */
void tp_profile_summary_free(tp_profile_summary *s);

/* Prints the report of s (computed from t) to f: header (model, precision, batch, GPU, iterations); traced
 * kernel time, span and event-timed GPU time per iteration with their gap; the category breakdown (ms per
 * iteration, %); the top_n kernels (all when top_n <= 0) with nsys' cuda_gpu_kern_sum columns plus Category
 * and Layers (Name last, since it is unbounded); the per-layer table (with each op's roofline floor and the
 * attainment floor / time when the trace has the roofline); a pipeline's per-stage table; the roofline by op kind and for the whole pass.
 * Times in ns in the kernel table, ms elsewhere. */
void tp_profile_print(const tp_trace *t, const tp_profile_summary *s, int top_n, FILE *f);

/* The whole summary as a JSON object (new reference; caller json_decref's); NULL only when out of memory.
 * Keys: model, precision, batch, gpu, iterations, records, stages ([{stage, ops, ms_per_iter, percent, floor_ms}],
 * empty unless the trace is a pipeline's), kernel_ns_per_iter (busy time), raw_kernel_ns_per_iter
 * (summed durations), span_ns_per_iter,
 * traced_ms_per_iter, event_median_ms, gap_ms and gap_pct (event minus traced, null without event time),
 * unattributed, unattributed_ns_per_iter, per_iteration [{kernel_ns (busy time), span_ns}], categories [{category,
 * ns_per_iter, ms_per_iter, percent}], kernels [{name, category, instances, total_ns, avg_ns, med_ns, min_ns,
 * max_ns, stddev_ns, time_pct, layers [all names]}], layers [{layer, op, precision, how, kernels_per_iter,
 * kernels [names], total_ns, ns_per_iter, percent, floor_ns, bound ("compute", "memory" or null),
 * attainment (floor_ns / ns_per_iter, null without a floor or time)}], roofline (null without one: {gemm_peak_tflops
 * {precision: TFLOP/s}, copy_gbps, ms_per_iter (the ops' traced time), floor_ms, compute_bound_ms,
 * memory_bound_ms, floor_known, attainment, by_op [{op, ops, and the same six}]}). */
json_t *tp_profile_summary_json(const tp_trace *t, const tp_profile_summary *s);

/* Writes one profiled iteration (0 <= iteration < t->iterations) of t as a Chrome trace (Trace Event Format,
 * {"traceEvents": [...], "displayTimeUnit": "ns"}; opens in Perfetto and chrome://tracing) to path.
 * Process 1 "GPU"; thread 1 "kernels": one complete event per record; thread 2 "layers": one slice per op
 * spanning its first record's start to its last record's end, inside one slice "blocks.N" per transformer
 * block spanning the ops whose layer starts with "blocks.N." (NVTX-like ranges derived on the GPU timeline:
 * under CUDA-graph replay host ranges carry no GPU time). ts and dur are microseconds (floating point) from
 * the iteration's first start. Errors: TP_ERR_ARG (iteration out of range or without records), TP_ERR_IO,
 * TP_ERR_OOM. */
tp_status tp_chrome_trace_write(const tp_trace *t, int iteration, const char *path, tp_error *err);

/* FP8 attention's accuracy cost in one layer (tp_engine_attention_cost, src/exec/cuda/engine/cuda_engine.h): the output
 * of an attention op the engine runs in FP8 (E4M3 outputs dequantized with their scale) against the FP16/BF16
 * flash kernel's output on the same input, that is the engine's own input to the layer, so each row is that
 * layer's cost alone. */
typedef struct {
    int op;           /* index of the attention op in the entry's trace (trace->ops[op].layer names it) */
    tp_precision ref; /* the reference's precision: TP_PREC_FP16 or TP_PREC_BF16 (the type of the op's qkv input) */
    double cosine;    /* cosine similarity of the two outputs, flattened; NaN when not finite */
    double rel_l2;    /* |y_fp8 - y_ref|_2 / |y_ref|_2; NaN when not finite */
} tp_attn_cost;

#endif
