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

/* The CPU emulation of a plan's block-scaled formats: as tp_cpu_run (FP32 storage, FP64 accumulation), except
 * that every Linear whose operands the plan reads in a quantized format (plan->value_qf) multiplies their exact
 * format values (tp_qdq_f32, weights and activations alike; NVFP4 activations with the calibrated per-tensor
 * scale act_amax[v] / (6 * 448), weights with their own) and applies the per-tensor scales after the
 * accumulation, as the GPU path does. It is what the GPU emulation must reproduce up to its own storage
 * roundings. act_amax: per value, host, or NULL when no format needs it. Errors: TP_ERR_OOM, TP_ERR_ARG. */
tp_status tp_cpu_run_emulated(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                              const float *input, float *output, tp_error *err);

#endif
