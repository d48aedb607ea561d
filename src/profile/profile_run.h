/* profile_run.h: the profiled run of an engine: forward passes under CUPTI, separate from the timed ones, then
 * the analysis (tables), and the artifacts: the trace (tprof's JSON, re-analyzable on any machine), a Chrome
 * trace of one forward pass, and the summary JSON. */
#ifndef TP_PROFILE_RUN_H
#define TP_PROFILE_RUN_H

#include <jansson.h>

#include "exec/cuda/engine/cuda_engine.h"
#include "profile/analysis.h"
#include "profile/cupti_trace.h"

/* The engine's launch hook for a CUPTI session (pass the session as user). */
void tp_cupti_hook(void *session, int op, int category);

typedef struct {
    const char *model;
    int batch;
    const char *gpu;
    double event_median_ms; /* the timed run's median GPU compute time per forward pass */
    int iterations;         /* profiled forward passes */
    int top_n;              /* rows of the top-kernel table */
    const char *out_dir;    /* where <precision>.trace.json, .chrome.json, .profile.json go; NULL: none */
    const tp_roofline_rates *rates; /* this GPU's measured rates for the roofline columns; NULL: none */
    const char *tag;        /* NULL, or a name the artifacts carry after the precision ("decode": fp16_decode.*) */
} tp_profile_request;

/* Runs req->iterations forward passes (a decode engine: decode steps) of e with CUPTI recording, attributes every record to its op (e must
 * have been built with tp_cupti_hook on this session), prints the tables to stdout and writes the artifacts.
 * The caller owns what it gets back, also after an error: *t (tp_trace_free), *s (tp_profile_summary_free)
 * and *summary, the summary as JSON (json_decref; NULL on error). Errors: CUPTI failures (TP_ERR_UNSUPPORTED),
 * TP_ERR_IO for the artifacts, TP_ERR_CUDA. */
tp_status tp_profile_engine(tp_cupti *c, tp_engine *e, const tp_graph *g, const tp_plan *p,
                            const tp_profile_request *req, tp_trace *t, tp_profile_summary *s, json_t **summary,
                            tp_error *err);

#endif
