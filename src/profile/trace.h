/* trace.h: a recorded GPU trace of profiled forward passes, independent of how it was recorded (CUPTI in
 * process, or a fixture file), and everything needed to attribute it to the model: each record carries the
 * index of the IR op that launched it and a category. The analysis (analysis.h) works on this alone, so it is
 * tested on the CPU from traces recorded on a real GPU and committed as fixtures. */
#ifndef TP_TRACE_H
#define TP_TRACE_H

#include <stdint.h>

#include "ir/graph.h"
#include "profile/roofline.h"
#include "tprof.h"


typedef enum { TP_REC_KERNEL = 0, TP_REC_MEMCPY, TP_REC_MEMSET } tp_record_kind;

typedef struct {
    tp_record_kind kind;
    char *name;               /* demangled kernel name, or "memcpy DtoH" / "memset" */
    uint64_t start_ns, end_ns; /* GPU timestamps (CUPTI clock) */
    int iteration;            /* which profiled forward pass, 0-based; -1 outside them */
    int op;                   /* index of the IR op that launched it; -1 if none (not tprof's) */
    tp_category category;
    int grid[3], block[3];    /* kernels */
    int registers;            /* per thread */
    int smem_static, smem_dynamic; /* bytes per block */
    uint64_t bytes;           /* memcpy / memset */
    uint32_t stream;
    uint64_t graph_node;      /* CUPTI graph node id (0 when not launched from a graph) */
} tp_trace_record;

typedef struct {
    char layer[TP_NAME_LEN];
    tp_op_kind kind;
    tp_precision prec; /* the precision the plan executed it in */
    char how[256];     /* the plan's note */
    double matmul_flop; /* FLOP of its matrix products per forward pass (ir/graph.h); 0 when none or unknown */
    double bytes;       /* its fewest bytes per forward pass at the planned types (plan.h); 0: fused or unknown */
    int call;           /* the op whose call in the executed program (planner/program.h) computes it: its own
                           index, another op's (fused into that call: no kernel of its own), -1 unknown (a trace
                           written before the program) */
    char kernel[32];    /* that call's kernel (tp_call_kind_get's name); "" unknown */
} tp_trace_op;

typedef struct {
    tp_trace_record *rec;
    int n, cap;
    int iterations;           /* profiled forward passes in the trace */
    tp_trace_op *ops;         /* the graph's ops, so a trace file stands alone */
    int n_ops;
    char precision[16];       /* the engine's requested precision */
    char model[64];
    int batch;
    char gpu[128];
    double event_median_ms;   /* event-timed GPU compute time per forward pass (the benchmark), 0 if unknown */
    tp_roofline_rates rates;  /* the GPU's measured rates (roofline.h); zeros when not measured */
    int persistent;           /* the records are a persistent decode kernel's instructions (tp_trace_add_persistent),
                                 not CUPTI's kernels: `stream` is the SM that ran each one */
} tp_trace;

void tp_trace_init(tp_trace *t);
void tp_trace_free(tp_trace *t);
/* Appends a copy of r (the name is duplicated). TP_ERR_OOM. */
tp_status tp_trace_add(tp_trace *t, const tp_trace_record *r, tp_error *err);

/* Appends one persistent decode step's instructions as records of profiled iteration `iteration` (the engine's
 * tp_engine_persist_records: n instructions, op[k] the op carrying instruction k's time, sm[k] its SM, its work
 * from ready_ns[k] to end_ns[k], %globaltimer ns). Each becomes a kernel record named after what the instruction
 * is ("persistent gemv", "persistent attention", "persistent embed"; t->ops gives the op's kind), of the op's
 * category, on stream sm[k], grid (n_sms) and block (threads). Every stretch between the first ready and the last
 * end where no instruction runs (all SMs waiting on counters) becomes a "persistent dependency wait" record of
 * category other, charged to the op of the instruction that ends it, on that instruction's SM. t->persistent is
 * set. TP_ERR_ARG for an op outside t->ops or end < ready, TP_ERR_OOM. */
tp_status tp_trace_add_persistent(tp_trace *t, int iteration, const int *op, const int *sm, const uint64_t *ready_ns,
                                  const uint64_t *end_ns, int n, int n_sms, int threads, tp_error *err);

/* Saves / loads the trace as JSON (jansson): {"format": "tprof-trace-1", meta..., "ops": [...], "records": [...]}.
 * meta "persistent" (optional on load, false when absent) says the records are a persistent kernel's instructions.
 * The roofline inputs are optional on load (traces recorded before they existed): meta "gemm_peak_tflops"
 * {precision: TFLOP/s} and "copy_gbps", each op's "matmul_flop" and "bytes"; absent means 0 (not measured).
 * Load errors name the file and the field: TP_ERR_IO, TP_ERR_FORMAT (also for a present but negative or
 * non-numeric roofline field, or an unknown precision in gemm_peak_tflops). */
tp_status tp_trace_save(const tp_trace *t, const char *path, tp_error *err);
tp_status tp_trace_load(const char *path, tp_trace *t, tp_error *err);

#endif
