/* compare.h: `tprof compare`: one report over several precisions of the same model, batch, weights and
 * inputs, written as Markdown, JSON and a self-contained HTML page, with SVG bar charts. Everything in it is
 * derived from measured data: the benchmark (CUDA-event GPU compute time), the accuracy check against the FP32
 * CPU reference, the CUPTI profile of each engine, and the GEMM peak rates measured on the same GPU. */
#ifndef TP_COMPARE_H
#define TP_COMPARE_H

#include <jansson.h>
#include <stdio.h>

#include "bench/drift.h"  /* tp_stage_drift */
#include "bench/sparse.h" /* tp_sparse_op_row */
#include "profile/analysis.h"
#include "profile/trace.h"
#include "tprof.h"

/* 1 when samples of this unit are a pipeline's observations, whose rate robotics users give in Hz (observations per
 * second over the batch): the summaries, tables and JSON name it so beside the latencies */
int tp_unit_hz(const char *unit);


/* One precision's measurements. */
typedef struct {
    tp_precision prec;
    const tp_trace *trace;          /* its profiled trace: ops carry the precision each op executed in */
    const tp_profile_summary *prof; /* the analysis of trace */
    double median_ms, mean_ms, p99_ms, cov; /* event-timed GPU compute time per forward pass */
    double qps, images_per_s;
    double weight_bytes;
    double cosine, rel_l2, max_abs, top1; /* against the FP32 CPU reference */
    int ref_images;
    int emulated_ops;               /* ops run emulated (0 until block-scaled formats exist) */
    const tp_attn_cost *attn_cost;  /* one row per attention op the engine runs in FP8, ops in increasing order;
                                       NULL with n_attn_cost 0 for an engine without FP8 attention */
    int n_attn_cost;
    /* Decoders (tprof bench's decode phase): has_decode, then one decode step = one token per sequence, timed with
     * CUDA events: its median and p99 (ms), tokens/s over the batch, its roofline floor (ms; 0: unknown), the
     * decode graph's programmatic (PDL) edges, all its edges and its kernels (pdl_edges -1: eager launches), and the traced
     * steps with their analysis (dec_trace and dec_prof both NULL: not traced). The trace and profile above are
     * the prefill's. */
    int has_decode;
    double step_median_ms, step_p99_ms, tokens_per_s, step_floor_ms;
    int pdl_edges, graph_edges, graph_kernels;
    int dec_persistent, dec_instrs; /* the step ran as one persistent kernel of dec_instrs instructions (--decode-kernel) */
    const tp_trace *dec_trace;
    const tp_profile_summary *dec_prof;
    /* --sparsity: one row per linear with a 2:4 weight (NULL, 0 without) */
    const tp_sparse_op_row *sparse;
    int n_sparse;
    /* a pipeline's accuracy per stage against the FP32 reference (bench/drift.h; NULL, 0 without) */
    const tp_stage_drift *drift;
    int n_drift;
} tp_compare_entry;

typedef struct {
    const char *model;
    int batch;
    const char *unit;  /* what one sample is ("image", "sequence", "observation"); NULL: "image" */
    int not_logits;    /* 1: the output is not logits (actions, features): no top-1 agreement */
    const char *gpu, *driver, *cuda, *cublaslt; /* versions as strings */
    double warmup_ms;
    int iterations;
    double duration_s;
    int cuda_graph;
    const char *commit, *date, *command;
    double peak_tflops[TP_PREC_COUNT]; /* dense GEMM rate measured on this GPU per precision, TFLOP/s (0: not
                                          measured) */
    const char *peak_shape;            /* e.g. "8192 x 8192 x 8192" */
    const char *reference;             /* where the FP32 reference behind the accuracy figures ran: "FP32 GPU" or
                                          "FP32 CPU"; NULL: "FP32 CPU" */
    const char *sparse_layers;         /* --sparsity 2:4: the globs that chose the layers (NULL: no sparsity) */
    int prune_samples;                 /* the pruning cost measured on this many samples (0: not measured) */
    double prune_cosine, prune_rel_l2, prune_top1; /* the pruned model's FP32 reference against the dense one's
                                                      (top-1 NaN: the output is not logits) */
    const char *artifacts[32];         /* files written besides the report (per-precision JSON, traces) */
    int n_artifacts;
} tp_compare_config;

/* Amdahl bound of precision e against the baseline b (issue 3):
 *   changed   = ops whose executed precision differs between b and e (from the traces' ops);
 *   f         = their share of b's traced kernel time;
 *   r         = peak_tflops[e's precision] / peak_tflops[b's precision] (the format's measured peak-rate ratio);
 *   bound     = 1 / ((1 - f) + f / r)    speedup if the changed ops sped up by r and nothing else changed;
 *   measured  = b.median_ms / e.median_ms;
 *   gap per category (ms per forward pass) = e's time in the category - its ideal time, the ideal being b's
 *               time of that category's unchanged ops plus b's time of its changed ops divided by r. The gaps
 *               sum to e's traced time minus the ideal total. */
typedef struct {
    int n_changed;           /* ops */
    double f;                /* 0..1 */
    double r;
    double bound, measured;  /* measured is 0 when either median_ms is not > 0 (unknown) */
    double ideal_ms;         /* b's traced time per pass with the changed ops divided by r */
    double actual_ms;        /* e's traced time per pass */
    double gap_ms[TP_CAT_COUNT];
} tp_amdahl;

/* Computes the Amdahl figures of e against b with the given peak-rate ratio r (> 0). Ops are matched by index.
 * TP_ERR_ARG when the two traces do not describe the same graph (model name, batch, op count, layer names or op
 * kinds differ), when r is not a positive finite number, or when an entry lacks its trace or profile (or the
 * profile is not the analysis of that trace). */
tp_status tp_compare_amdahl(const tp_compare_entry *b, const tp_compare_entry *e, double r, tp_amdahl *out,
                            tp_error *err);

/* The worst row of an FP8 attention cost table: the lowest cosine, a NaN cosine counting as lowest (the first
 * NaN row); on ties the first row. -1 when n < 1 or rows is NULL. */
int tp_compare_attn_worst(const tp_attn_cost *rows, int n);

/* Writes out_dir/report.md, out_dir/report.json, out_dir/report.html and the SVG charts
 * (out_dir/breakdown.svg: stacked category bars per precision, ms per forward pass; out_dir/speedup.svg:
 * measured against Amdahl-bound speedup). entries[baseline] is the reference for speedups (normally fp16).
 * Sections: summary, configuration, kernel breakdown per precision, roofline (per entry whose profile has one,
 * profile/roofline.h: the floor of a pass, median / floor, traced attainment, the floor by op kind, and the
 * TOP_GAPS layers furthest above their floor, the same layer of every block as one row, blocks.N.mlp.fc1; JSON key
 * "roofline", one element per such entry; one sentence when none has), coverage (which ops ran in which precision
 * and why: native, emulated, kept high by policy), FP8 attention accuracy (only when some entry has attn_cost
 * rows: per such entry a table of layer, reference, cosine and relative L2, the worst layer (tp_compare_attn_worst)
 * named; JSON key "fp8_attention_cost", absent when no entry has rows), theoretical against actual speedup with the
 * gap attributed to categories in ms, recommendations (each citing the number it rests on; rules and thresholds in
 * compare.c), decode steps (only when some entry has_decode: compare_decode.h; JSON key "decode"), artifacts (the
 * five files above, then cfg->artifacts). An entry whose precision or the baseline's has
 * no peak_tflops gets no Amdahl figures, with the reason in the report. out_dir is created when missing (not its
 * parents); existing report files in it are overwritten.
 * Errors: TP_ERR_IO naming the file, TP_ERR_ARG for inconsistent entries (n < 1, baseline out of range, an entry
 * without trace or profile, traces of different graphs: see tp_compare_amdahl; attn_cost rows that are missing
 * (NULL with n_attn_cost > 0), negative in number, name an op out of range or not an attention op, or are not in
 * increasing op order). */
tp_status tp_compare_write(const tp_compare_config *cfg, const tp_compare_entry *entries, int n, int baseline,
                           const char *out_dir, tp_error *err);

/* The charts, also usable alone (compare_svg.c). Each writes one complete SVG 1.1 document without an XML
 * declaration, so the same text is a standalone file and an inline element of the HTML page; all text is
 * XML-escaped. Return 0, or -1 when writing to f failed (ferror).
 *   breakdown: one horizontal stacked bar per entry, a segment per category (ms per forward pass of the traced
 *              kernel time, labeled where it fits), fixed category colors, a legend;
 *   speedup:   per entry other than baseline, the measured speedup (median_ms ratio) and the Amdahl bound
 *              am[i].bound; am[i].r == 0 means no bound (peak rate not measured) and is labeled so. */
int tp_compare_svg_breakdown(FILE *f, const tp_compare_entry *entries, int n);
int tp_compare_svg_speedup(FILE *f, const tp_compare_entry *entries, const tp_amdahl *am, int n, int baseline);
/* A line chart of n_series series over n_x categories (x tick labels xticks), y[s * n_x + x] in percent (0 ..
 * 100; NAN: no point), one color and one legend entry (names[s]) per series; tprof bench's decode sweep draws the
 * decode step's attainment of its roofline floor against the batch. Returns 0, or -1 when f fails. */
int tp_svg_percent_lines(FILE *f, const char *title, const char *xlabel, int n_x, const char *const *xticks,
                         int n_series, const char *const *names, const double *y);
/* The fixed fill color ("#rrggbb") of a category in the charts. */
const char *tp_compare_category_color(tp_category c);

#endif
