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
/* What a run holds and where it is, for the memory estimate's test and the bench's progress line: the bytes of
 * the executor's own buffers (activations, state, unpacked inputs, rounded parameter copies, each op's scratch in
 * cpu_exec.c; not the per-thread rows inside cpu_ops.c), now and at their peak; and, when on_op is set, a call
 * before (done 0) and after (done 1) each op i of g (rank 0's, with tensor parallelism). */
typedef struct tp_cpu_watch {
    int64_t bytes_now, bytes_peak;
    void (*on_op)(void *user, const tp_graph *g, int op, int done);
    void *user;
} tp_cpu_watch;

typedef struct {
    tp_cpu_state_buf *bufs;
    int n;
    int64_t past;
    tp_cpu_watch *watch; /* NULL: nothing counted or reported; kept by tp_cpu_session_free */
} tp_cpu_session;

/* Runs g at cache position s->past (for the decoder ops: RoPE positions past.., the cache rows written and the
 * keys attended), reading and writing the session's state, then advances s->past by g->tokens. Start from a
 * zeroed session; free it with tp_cpu_session_free. Errors: TP_ERR_ARG (the cache would overflow: past + tokens >
 * g->kv_len; a token id outside the vocabulary), TP_ERR_SHAPE (a state value of another size in the session),
 * TP_ERR_OOM. */
tp_status tp_cpu_run_session(const tp_graph *g, const tp_params *params, tp_cpu_session *s, const float *input,
                             float *output, tp_error *err);
void tp_cpu_session_free(tp_cpu_session *s);

/* Tensor parallelism on the CPU: the n ranks' graphs of one model (tp_model_build_step with tp_rank k of tp_size n,
 * over tp_model_shard_params's rank-k parameters) run op by op in lockstep, each with its own session s[k]; at
 * each all-reduce every rank receives the sum of the ranks' partial results (added in rank order in double). The
 * output is rank 0's (every rank computes the same logits). n = 1 runs one whole-model graph as
 * tp_cpu_run_session. The reference for the GPU's tensor-parallel engines (tp_engine_build_tp). Errors: those of
 * tp_cpu_run_session, TP_ERR_ARG (graphs that are not ranks 0..n-1 of one model's step, sessions at different
 * positions). */
tp_status tp_cpu_run_tp_session(const tp_graph *const *g, const tp_params *const *params, int n, tp_cpu_session *s,
                                const float *input, float *output, tp_error *err);

/* Runs g on input (the graph input's shape, fp32) and writes the graph output (fp32, its shape) to output.
 * Intermediate buffers are freed after their last use, so peak memory is a few activations, not all. A graph with
 * a KV cache runs from an empty cache (a prefill: g->past must be 0). Errors: TP_ERR_OOM, TP_ERR_ARG (g->past > 0;
 * a token id outside the vocabulary). */
tp_status tp_cpu_run(const tp_graph *g, const tp_params *params, const float *input, float *output, tp_error *err);
/* tp_cpu_run, and each tapped value g->taps[k] copied as it is made into taps[k] (fp32, the value's shape; NULL: not
 * that one). Errors as tp_cpu_run. */
tp_status tp_cpu_run_taps(const tp_graph *g, const tp_params *params, const float *input, float *output,
                          float *const *taps, tp_error *err);

/* tp_cpu_run_taps (taps may be NULL) with a watch (may be NULL): its byte counts go on from where they are (the
 * run's state buffers are freed at its end), on_op is called around each op. Errors as tp_cpu_run. */
tp_status tp_cpu_run_watched(const tp_graph *g, const tp_params *params, const float *input, float *output,
                             float *const *taps, tp_cpu_watch *w, tp_error *err);

/* The host memory of one run of g (a fresh session; plan: an emulated plan's, or NULL for FP32), computed before
 * the run from the same allocation sequence the executor follows, in bytes: state (the KV cache), held (unpacked
 * inputs and rounded parameter copies), and at the peak the live activations (the op's output included) and the
 * op's scratch; peak, their sum, is exactly what tp_cpu_watch.bytes_peak reaches on that run. threads: the ops'
 * per-thread rows inside cpu_ops.c (attention scores) for `threads` threads at once, not watched; total = peak +
 * threads. Parameters, the input and the output are the caller's. Errors: TP_ERR_OOM. */
typedef struct {
    double state, held, live, scratch, peak, threads, total;
    int peak_op; /* the op at the peak, -1: before the first */
} tp_cpu_mem;
tp_status tp_cpu_mem_estimate(const tp_graph *g, const tp_plan *plan, int threads, tp_cpu_mem *m, tp_error *err);

/* The CPU emulation of a plan: as tp_cpu_run (FP32 math, FP64 accumulation), except that
 *   - every Linear whose operands the plan reads in a quantized format (plan->value_qf) multiplies their exact
 *     format values (tp_qdq_f32, weights and activations alike; NVFP4 activations with the calibrated per-tensor
 *     scale act_amax[v] / (6 * 448), weights with their own) and applies the per-tensor scales after the
 *     accumulation, as the GPU path does;
 *   - every Linear the plan runs in fp8 (W8A8) multiplies e4m3(x / xs) xs, xs = act_amax[x] / 448 (its input's
 *     static scale, whether the engine stores the input in E4M3 or quantizes it as it reads it), by the weight's
 *     per-tensor E4M3 values (amax / 448);
 *   - an FP8 KV cache (plan value_dt E4M3) holds e4m3(x / s) s of every appended k and v, s = max(amax of k, amax
 *     of v) / 448; the engine's prefills that take the flash kernel read those values rounded once more to the
 *     activation type (tpk_kv_dequant), which this emulation does not do (one fp16/bf16 rounding of K and V);
 *   - every Linear the plan runs weight-only (op_prec TP_PREC_FP8_WO, TP_PREC_NVFP4_WO) multiplies the weight's
 *     values in its format (per-tensor E4M3, amax / 448; NVFP4 with its own per-tensor scale, applied after the
 *     sum) by the exact input;
 *   - every value the plan stores in fp16 or bf16 (activations after each op, parameters) is rounded to it.
 * So it computes what the engine computes, up to summation order and the kernels' fp32 math: a block-scaled
 * engine must match it closely, since a rounding decision flips only when the two differ at a midpoint.
 * act_amax: per value, host, or NULL when no format needs it. Errors: TP_ERR_OOM, TP_ERR_ARG. */
tp_status tp_cpu_run_emulated(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                              const float *input, float *output, tp_error *err);
/* tp_cpu_run_emulated over a session (a decoder's prefill, then decode steps, each with its own plan), as
 * tp_cpu_run_session runs them in FP32. Errors as both. */
tp_status tp_cpu_run_session_emulated(const tp_graph *g, const tp_params *params, const tp_plan *plan,
                                      const float *act_amax, tp_cpu_session *s, const float *input, float *output,
                                      tp_error *err);

#endif
