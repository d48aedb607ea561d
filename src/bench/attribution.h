/* attribution.h: `tprof bench --attribution` (issue 21): a pipeline's speed-up from a starting configuration to a
 * final one, measured one change at a time, each change's share of the whole. The path is the VLA note's: from the
 * first precision (default bf16) with a CUDA graph per stage and no fusion (`--pipeline modular --fusion off`), to
 * the second precision (default fp8) in one CUDA graph with fusion: precision, then graph, then fusion. Each step is
 * one tp_bench_run of one precision; interactions between changes fall to the later step, so the shares depend on
 * the order (bench/results, 2026-11-26: pi0 on an H100 gave 59/10/31 % in this order, 60/70/-30 % in another). */
#ifndef TP_ATTRIBUTION_H
#define TP_ATTRIBUTION_H

#include <jansson.h>
#include <stdio.h>

#include "bench/bench.h"

typedef struct {
    const char *step;      /* "start", "precision", "graph", "fusion" */
    tp_precision prec;
    int pipeline_mode;     /* tp_bench_options.pipeline_mode: 1 graph, 2 modular */
    int no_fusion;
    double median_ms;      /* the run's median GPU time per forward pass */
} tp_attr_step;

/* The table (Markdown): per step its configuration, median ms, Hz, the ms saved against the step before and that
 * saving's share of the whole (first minus last), then the total. n >= 2. */
void tp_attribution_print(const tp_attr_step *s, int n, FILE *f);
/* {total_saved_ms, speedup, steps [{step, precision, pipeline, fusion, median_ms, saved_ms, share}]} (saved_ms and
 * share null for the start); a new reference, NULL when out of memory. */
json_t *tp_attribution_json(const tp_attr_step *s, int n);

/* Runs the four configurations of o->model (o->precs: the start's and the end's precision, one or two given; a
 * single one is both) and prints each run's report, then the table; o->json_path gets the attribution's JSON.
 * Errors: tp_bench_run's (a pipeline mode on the CPU, a model that is not a pipeline), TP_ERR_ARG (more than two
 * precisions, --pipeline or --fusion given: the attribution sets them), TP_ERR_IO (the JSON file). */
tp_status tp_bench_attribution(const tp_bench_options *o, tp_error *err);

#endif
