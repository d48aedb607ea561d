/* cpu_exec.h: the CPU executor: runs a graph in FP32 with the reference ops of cpu_ops.h. It is the
 * reference for every test and for every accuracy figure tprof reports. */
#ifndef TP_CPU_EXEC_H
#define TP_CPU_EXEC_H

#include "ir/graph.h"
#include "models/model.h"
#include "tprof.h"

/* Runs g on input (the graph input's shape, fp32) and writes the graph output (fp32, its shape) to output.
 * Intermediate buffers are freed after their last use, so peak memory is a few activations, not all.
 * Errors: TP_ERR_OOM. */
tp_status tp_cpu_run(const tp_graph *g, const tp_params *params, const float *input, float *output, tp_error *err);

#endif
