/* drift.h: a pipeline's accuracy stage by stage (issue 21): the values each stage hands on (the graph's taps,
 * ir/graph.h tp_tap: pi0's image tokens, its prefix's K, V cache, each denoise step's state) of an engine against the
 * FP32 reference's, so a cosine of 0.994 on the actions can be traced to the stage that lost it. */
#ifndef TP_DRIFT_H
#define TP_DRIFT_H

#include "core/stats.h"
#include "ir/graph.h"

typedef struct {
    char stage[40]; /* the taps' label (tp_tap.stage) */
    int n_values;   /* tapped values pooled under it */
    double numel;   /* values compared (over the reference's samples) */
    tp_accuracy acc; /* cosine, relative L2, max abs of the pooled values (rows 1); NaN where a value is not finite */
} tp_stage_drift;

/* One fp32 buffer per tap of g (tp_value_numel of each tapped value), in taps[k]; NULL when out of host memory or
 * when g has no taps. Free with tp_taps_free(g, taps). */
float **tp_taps_alloc(const tp_graph *g);
void tp_taps_free(const tp_graph *g, float **taps);

/* The drift per stage label, in the order the labels first appear: x[k], tap k of g (an engine's, g->batch samples),
 * against r[k], tap k of gref (the reference's, gref->batch samples; the same model, so the same taps), over the
 * first gref->batch samples of each (every tapped value is batch-major: sample b's values are its b-th slice). out
 * holds at least g->n_taps entries; returns the number of stages, -1 when the two graphs' taps differ (count, label
 * or per-sample size), -2 when out of host memory. */
int tp_stage_drift_compute(const tp_graph *g, float *const *x, const tp_graph *gref, float *const *r,
                           tp_stage_drift *out);

#endif
