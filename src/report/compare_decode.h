/* compare_decode.h: the decode-step section of `tprof compare` (compare.h) for decoders: per precision the
 * event-timed step (median, p99, tokens/s) against its roofline floor, how its kernels were launched (a CUDA graph,
 * with how many programmatic edges, or eager), and from the traced steps (tprof's CUPTI profile of the decode
 * engine): kernels per step, traced kernel time (GPU busy time, analysis.h), span and the launch-gap share
 * (event-timed step minus busy time, over the step), the step's
 * time and floor per op kind, and the layers that take the most time with their attainment (floor / time). */
#ifndef TP_COMPARE_DECODE_H
#define TP_COMPARE_DECODE_H

#include <jansson.h>

#include "report/compare.h"
#include "report/doc.h"

/* The table of s's roofline by op kind (s->has_roofline): kind, ops, time and floor in ms with `digits` decimals,
 * attainment in %. */
void tp_compare_kind_table(tp_doc *d, const tp_profile_summary *s, int digits);
/* 1 when some entry has decode measurements (the section and the JSON key exist only then) */
int tp_compare_has_decode(const tp_compare_entry *e, int n);
/* The section "Decode steps" (heading level 2, anchor "decode"). */
void tp_compare_decode_section(tp_doc *d, const tp_compare_entry *e, int n);
/* One JSON object per entry with has_decode: precision, step_median_ms, step_p99_ms, tokens_per_s, floor_ms,
 * median_over_floor, launch ("graph", "eager" or "persistent", with persistent_instructions), pdl_edges, graph_edges, and when traced: kernels_per_step,
 * traced_ms, span_ms, event_ms, launch_gap_ms, launch_gap_pct, by_kind (kind, ops, time_ms, floor_ms), top_layers
 * (layer, kind, time_ms, floor_ms, attainment_pct). A new reference, or NULL when out of memory. */
json_t *tp_compare_decode_json(const tp_compare_entry *e, int n);

#endif
