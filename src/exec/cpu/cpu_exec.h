/* cpu_exec.h: the CPU executor: runs a graph in FP32 with the reference ops of cpu_ops.h. It is the
 * reference for every test and for every accuracy figure tprof reports. */
#ifndef TP_CPU_EXEC_H
#define TP_CPU_EXEC_H

#include "ir/graph.h"
#include "models/model.h"
#include "planner/plan.h"
#include "tprof.h"

/* Runs g on input (the graph input's shape, fp32) and writes the graph output (fp32, its shape) to output.
 * Intermediate buffers are freed after their last use, so peak memory is a few activations, not all.
 * Errors: TP_ERR_OOM. */
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
