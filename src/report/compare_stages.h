/* compare_stages.h: the per-stage section of `tprof compare` (compare.h) for pipelines (issue 21): per stage of the
 * profiled pass (analysis.h's stages: vision, prefix, expert for pi0) and per precision, its traced time per pass,
 * its share of the pass, its roofline floor and attainment, and its speed-up over the baseline's same stage: where a
 * precision's gain lands, stage by stage. */
#ifndef TP_COMPARE_STAGES_H
#define TP_COMPARE_STAGES_H

#include <jansson.h>

#include "report/compare.h"
#include "report/doc.h"

/* 1 when some entry's profile has stages or it has a drift per stage (the section exists only then) */
int tp_compare_has_stages(const tp_compare_entry *e, int n);
/* The section "Per stage" (heading level 2, anchor "stages"): first, where entries have one, the accuracy drift
 * (a row per stage label and entry: cosine and relative L2 against the FP32 reference); then one table, a row per
 * stage and entry (stages in order
 * of first appearance over the entries; an entry without that stage has no row), per entry the time (ms per pass), share (%), floor (ms), attainment (%) and, but for the
 * baseline, the speed-up over the baseline's stage (its time / this time). */
void tp_compare_stages_section(tp_doc *d, const tp_compare_entry *e, int n, int baseline);
/* [{stage, entries [{precision, ms, pct, floor_ms (null without a roofline), attainment_pct (null),
 * speedup_vs_baseline (null for the baseline or a stage it lacks)}]}]; NULL when out of memory. */
json_t *tp_compare_stages_json(const tp_compare_entry *e, int n, int baseline);
/* [{stage, precision, cosine, rel_l2}] over every entry's drift rows; NULL when out of memory. */
json_t *tp_compare_drift_json(const tp_compare_entry *e, int n);

#endif
