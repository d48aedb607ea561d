/* gemm_peak.h: the dense GEMM rate of this GPU per precision, measured through the same cuBLASLt path the
 * engines use. It is the denominator of tprof's peak-rate ratios (e.g. FP8/FP16 for the Amdahl bound of an
 * FP8 engine): measured, not a datasheet figure. */
#ifndef TP_GEMM_PEAK_H
#define TP_GEMM_PEAK_H

#include "tprof.h"

/* Times D (n, n) = A (n, n) @ W (n, n)^T in precision prec (fp32: F32 in/out; fp16, bf16: in and out; fp8: E4M3
 * in, F16 out, unit scales; fp8-block: E4M3 in, BF16 out, unit 1x128 / 128x128 block scales; mxfp8, nvfp4, mxfp4:
 * the bf16 GEMM their emulation runs on, the only path on a GPU without block-scaled MMA; callers on Blackwell
 * must not use this for them) on random operands (never zeros), `iters` runs after 20 warm-up runs, CUDA events
 * around each; *tflops receives 2 n^3 / median time. Errors: TP_ERR_OOM (3 n^2 elements on the GPU), TP_ERR_CUDA,
 * TP_ERR_UNSUPPORTED. */
tp_status tp_gemm_peak(tp_precision prec, int n, int iters, double *tflops, tp_error *err);

#endif
