/* cpu_exec.h: the CPU executor: runs a graph in FP32 with the reference ops of cpu_ops.h. It is the
 * reference for every test and for every accuracy figure tprof reports. */
#ifndef TP_CPU_EXEC_H
#define TP_CPU_EXEC_H

#include "ir/graph.h"
#include "models/model.h"
#include "planner/plan.h"
#include "tprof.h"

/* The KV cache and position of a sequence of runs (prefill, then decode steps) of graphs of one model: the
 * buffers of the graphs' state values (ir/graph.h TP_VAL_STATE), matched by name, allocated at first use and
 * poisoned with NaN; past: the cache positions filled so far (each run advances it by the graph's tokens). */
typedef struct {
    char name[TP_NAME_LEN];
    int64_t numel;
    float *data;
} tp_cpu_state_buf;
typedef struct {
    tp_cpu_state_buf *bufs;
    int n;
    int64_t past;
} tp_cpu_session;

/* Runs g at cache position s->past (for the decoder ops: RoPE positions past.., the cache rows written and the
 * keys attended), reading and writing the session's state, then advances s->past by g->tokens. Start from a
 * zeroed session; free it with tp_cpu_session_free. Errors: TP_ERR_ARG (the cache would overflow: past + tokens >
 * g->kv_len; a token id outside the vocabulary), TP_ERR_SHAPE (a state value of another size in the session),
 * TP_ERR_OOM. */
tp_status tp_cpu_run_session(const tp_graph *g, const tp_params *params, tp_cpu_session *s, const float *input,
                             float *output, tp_error *err);
void tp_cpu_session_free(tp_cpu_session *s);

/* Runs g on input (the graph input's shape, fp32) and writes the graph output (fp32, its shape) to output.
 * Intermediate buffers are freed after their last use, so peak memory is a few activations, not all. A graph with
 * a KV cache runs from an empty cache (a prefill: g->past must be 0). Errors: TP_ERR_OOM, TP_ERR_ARG (g->past > 0;
 * a token id outside the vocabulary). */
tp_status tp_cpu_run(const tp_graph *g, const tp_params *params, const float *input, float *output, tp_error *err);

/* The CPU emulation of a plan: as tp_cpu_run (FP32 math, FP64 accumulation), except that
 *   - every Linear whose operands the plan reads in a quantized format (plan->value_qf) multiplies their exact
 *     format values (tp_qdq_f32, weights and activations alike; NVFP4 activations with the calibrated per-tensor
 *     scale act_amax[v] / (6 * 448), weights with their own) and applies the per-tensor scales after the
 *     accumulation, as the GPU path does;
 *   - every value the plan stores in fp16 or bf16 (activations after each op, parameters) is rounded to it.
 * So it computes what the engine computes, up to summation order and the kernels' fp32 math: a block-scaled
 * engine must match it closely, since a rounding decision flips only when the two differ at a midpoint.
 * act_amax: per value, host, or NULL when no format needs it. Errors: TP_ERR_OOM, TP_ERR_ARG. */
tp_status tp_cpu_run_emulated(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                              const float *input, float *output, tp_error *err);

#endif
