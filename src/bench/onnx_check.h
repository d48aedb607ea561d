/* onnx_check.h: an ONNX import (models/onnx_import.h) checked against the file's own graph, so that a mapping that
 * recognized the structure but misread a detail (a scale, an epsilon, the order of two ops) is caught before any
 * engine is built from it (issue 24). */
#ifndef TP_BENCH_ONNX_CHECK_H
#define TP_BENCH_ONNX_CHECK_H

#include <stdint.h>

#include "models/model.h"
#include "models/onnx_import.h"
#include "planner/policy.h"
#include "tprof.h"

/* The bound on *rel below which the import counts as checked: both sides compute in FP32 with FP64 accumulation of
 * their dot products, so they differ only by summation order and the FP32 roundings between ops (the timm
 * fixtures: 4.4e-7); an op misread gives 1e-2 and more. */
#define TP_ONNX_CHECK_TOL 1e-5

/* Runs the file om (read from path, which errors name) with tprof's ONNX interpreter (io/onnx_run.h; a Q/DQ model with its activation Q/DQ
 * switched off, its quantized weights dequantized as the import read them) and tprof's CPU executor on the imported
 * model m and params at batch 1 (the file's batch when fixed), on one input drawn from seed (uniform in [-1, 1); a
 * decoder: 7 token ids uniform in the vocabulary, its prefill graph giving every position's logits),
 * and gives *rel, the relative L2 of tprof's output against the file's, and *ms, the seconds both took (ms).
 * Errors: the interpreter's (TP_ERR_UNSUPPORTED naming the node it does not run), the executor's,
 * TP_ERR_SHAPE when the outputs' sizes differ. A *rel over TP_ONNX_CHECK_TOL is the caller's to refuse. */
tp_status tp_onnx_check(const tp_onnx_model *om, const char *path, const tp_model *m, const tp_params *params,
                        const tp_onnx_import_info *info,
                        uint64_t seed, double *rel, double *ms, tp_error *err);

/* Explicit quantization, as TensorRT takes a Q/DQ network: the linears the file quantizes (info->qdq: FP8 E4M3 weight
 * and input, per tensor) run fp8 and everything else in `rest` (fp32, fp16 or bf16): pol becomes that policy
 * (default rest, one rule "<layer>=fp8" per linear). Errors: TP_ERR_UNSUPPORTED when rest is not one of those three,
 * when a linear quantizes only one operand or to another type than E4M3 (naming it), or when a weight's scale is not
 * amax / 448 (its largest E4M3 value is not 448: tprof's per-tensor FP8 weights are scaled so, and would round the
 * file's values again); TP_ERR_ARG from the policy. */
tp_status tp_onnx_qdq_policy(const tp_onnx_import_info *info, tp_precision rest, tp_policy *pol, tp_error *err);

/* The file's activation scales as static per-tensor amax (what calibration fills) for graph g: amax[v] of each
 * quantized linear's input v set so that amax[v] / 448, as the engines and the CPU emulation compute the scale,
 * equals the file's scale exactly in float (overwriting what calibration put there). Other entries are left as they
 * are. Errors: TP_ERR_UNSUPPORTED when a
 * layer of info->qdq is not a linear of g, or one input has two different scales. */
tp_status tp_onnx_qdq_scales(const tp_onnx_import_info *info, const tp_graph *g, float *amax, tp_error *err);

#endif
