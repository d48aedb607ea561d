/* diff.h: `tprof diff` (issue 44): runs compared across commits, GPUs and settings, from the JSON that `tprof bench`,
 * `tprof profile` and `tprof compare` write (also `bench --engine` runs: the same bench JSON).
 *
 * A run (one file) holds results, each keyed by model, precision, batch and test: "forward" (one pass of a ViT or a
 * pipeline), "ppN" (a decoder's prefill of N tokens, ms per prefill), "tgN" (its decode, ms per token), "traced" (a
 * profile's per-pass traced kernel time; "traced decode" for a decoder's profiled steps) and "stage NAME" (a
 * pipeline stage's traced time); a decoder's tgN result carries its decode steps' profile where the bench JSON has
 * one (tprof profile's llm.decode_profile). The first run is the
 * baseline; every other run's results are matched to the baseline's by that key and compared:
 *   - the medians with their interquartile range, the ratio later / baseline (> 1: slower);
 *   - whether the difference exceeds the runs' noise, from the samples both files hold: the two-sided Mann-Whitney
 *     U test (core/stats.h) at alpha TP_DIFF_ALPHA and a 95 % percentile bootstrap interval of the ratio of
 *     medians. "slower" (or "faster") needs both: p < alpha and the interval entirely above (below) 1. The noise is
 *     the within-run noise; what varies only between runs (clocks, another machine of the same kind) is not in the
 *     samples, so repeat runs where that matters;
 *   - the roofline floors and the attainment floor / median where the files have them;
 *   - with profiles on both sides, the layers, op kinds and kernels whose time changed most, and the kernels that
 *     appeared or disappeared; with plans on both sides, the layers whose precision or kernel changed.
 * Results without a partner are listed, never dropped. */
#ifndef TP_DIFF_H
#define TP_DIFF_H

#include <stdio.h>

#include "tprof.h"

#define TP_DIFF_ALPHA 0.01   /* the Mann-Whitney U test's significance level */
#define TP_DIFF_BOOT 2000    /* bootstrap resamples */
#define TP_DIFF_LEVEL 0.95   /* the bootstrap interval's coverage */

typedef struct {
    char *model, *precision, *test;
    int batch;
    double median_ms;         /* from the samples when there are any, else the file's own median */
    double q1_ms, q3_ms;      /* interquartile range of the samples (NaN without samples) */
    double *samples;          /* ms, n of them (NULL, 0: the file holds a median only) */
    int n;
    double floor_ms;          /* the roofline floor (NaN: not in the file) */
    const void *profile;      /* the profile's JSON object (json_t *; borrowed from the run), or NULL */
    const void *plan;         /* the plan's JSON array, or NULL */
} tp_diff_result;

typedef struct {
    char *path;
    const char *kind;         /* "bench", "profile" or "compare" */
    /* what the run says about itself; "" when the file does not say */
    char *tool, *commit, *date, *gpu, *driver, *cuda, *cublaslt, *command;
    const void *config;       /* the options (json_t * object), or NULL */
    void *root;               /* the parsed file (json_t *) */
    tp_diff_result *res;
    int n_res;
} tp_diff_run;

/* One layer, op kind or kernel of a profile pair: time per pass in both runs (NaN: absent from that run). */
typedef struct {
    char *name, *op, *how_a, *how_b;
    double a_ms, b_ms;
} tp_diff_row;

typedef struct {
    int run;                  /* the later run (index into the runs), compared with run 0 */
    int ia, ib;               /* result indices in run 0 and in `run` */
    double ratio;             /* median b / median a */
    double ci_lo, ci_hi;      /* the bootstrap interval of the ratio (NaN without samples on both sides) */
    double u, p;              /* Mann-Whitney U and its two-sided p-value (NaN without samples) */
    int exact;                /* p from the exact distribution */
    const char *verdict;      /* "slower", "faster", "same" (within noise), "no samples" */
    /* profiles on both sides: layers (top by |change|), op kinds, kernels (top by |change|, plus every kernel that
     * appeared or disappeared), in that order of importance */
    tp_diff_row *layers, *ops, *kernels;
    int n_layers, n_ops, n_kernels;
    int n_appeared, n_disappeared;
    /* plans on both sides: layers whose precision or kernel differ (a: baseline's "precision kernel", b: later) */
    tp_diff_row *plan;
    int n_plan;
} tp_diff_match;

typedef struct {
    tp_diff_run *runs;
    int n_runs;
    tp_diff_match *m;
    int n_m;
    int top;                  /* rows kept per profile table */
    /* results without a partner: (run, result) pairs */
    int *unmatched;
    int n_unmatched;
} tp_diff;

/* Reads one JSON of tprof bench, profile or compare. Errors (one line, naming the file and the field):
 * TP_ERR_IO (cannot open or parse: "PATH: line L: ..."), TP_ERR_FORMAT (not one of tprof's JSON, or a field of the
 * wrong type), TP_ERR_OOM. */
tp_status tp_diff_load(const char *path, tp_diff_run *run, tp_error *err);
void tp_diff_run_free(tp_diff_run *run);

/* Matches runs[1..n-1] against runs[0] and computes every comparison; top: rows kept per profile table (>= 1).
 * Errors: TP_ERR_ARG (fewer than two runs), TP_ERR_OOM. The runs must outlive d. */
tp_status tp_diff_compute(tp_diff_run *runs, int n, int top, tp_diff *d, tp_error *err);
void tp_diff_free(tp_diff *d);

/* Matches whose later run is slower by more than pct percent beyond the noise: verdict "slower" and the interval's
 * lower end above 1 + pct / 100. Returns their count. */
int tp_diff_regressions(const tp_diff *d, double pct);

typedef enum { TP_DIFF_MD = 0, TP_DIFF_CSV, TP_DIFF_JSON, TP_DIFF_HTML } tp_diff_format;

/* Writes the comparison to f: Markdown (the runs, what differs between them, the results table, the unmatched
 * results, per profile pair the changed layers, op kinds and kernels, the plan changes), CSV (the results table:
 * one row per match, the fields of the JSON's "results"), JSON ("format": "tprof-diff-1"), or HTML (the Markdown's
 * content with SVG charts: per test the medians and their interquartile ranges per run; per profile pair the
 * layers' change). Errors: TP_ERR_IO when the stream fails. */
tp_status tp_diff_write(const tp_diff *d, tp_diff_format fmt, FILE *f, tp_error *err);

#endif
