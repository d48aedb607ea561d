/* onnx_check.h: an ONNX import (models/onnx_import.h) checked against the file's own graph, so that a mapping that
 * recognized the structure but misread a detail (a scale, an epsilon, the order of two ops) is caught before any
 * engine is built from it (issue 24). */
#ifndef TP_BENCH_ONNX_CHECK_H
#define TP_BENCH_ONNX_CHECK_H

#include <stdint.h>

#include "models/model.h"
#include "models/onnx_import.h"
#include "tprof.h"

/* The bound on *rel below which the import counts as checked: both sides compute in FP32 with FP64 accumulation of
 * their dot products, so they differ only by summation order and the FP32 roundings between ops (the timm
 * fixtures: 4.4e-7); an op misread gives 1e-2 and more. */
#define TP_ONNX_CHECK_TOL 1e-5

/* Runs the file at path with tprof's ONNX interpreter (io/onnx_run.h; a Q/DQ model with its activation Q/DQ
 * switched off, its quantized weights dequantized as the import read them) and tprof's CPU executor on the imported
 * model m and params at batch 1 (the file's batch when fixed), on one input drawn from seed (uniform in [-1, 1)),
 * and gives *rel, the relative L2 of tprof's output against the file's, and *ms, the seconds both took (ms).
 * Errors: the reader's, the interpreter's (TP_ERR_UNSUPPORTED naming the node it does not run), the executor's,
 * TP_ERR_SHAPE when the outputs' sizes differ. A *rel over TP_ONNX_CHECK_TOL is the caller's to refuse. */
tp_status tp_onnx_check(const char *path, const tp_model *m, const tp_params *params, const tp_onnx_import_info *info,
                        uint64_t seed, double *rel, double *ms, tp_error *err);

#endif
