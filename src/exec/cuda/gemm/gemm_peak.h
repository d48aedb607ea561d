/* gemm_peak.h: the dense GEMM rate of this GPU per precision, measured through the same cuBLASLt path the
 * engines use. It is the denominator of tprof's peak-rate ratios (e.g. FP8/FP16 for the Amdahl bound of an
 * FP8 engine): measured, not a datasheet figure. */
#ifndef TP_GEMM_PEAK_H
#define TP_GEMM_PEAK_H

#include <stddef.h>

#include "tprof.h"

/* Times D (n, n) = A (n, n) @ W (n, n)^T in precision prec (fp32: F32 in/out; fp16, bf16: in and out; fp8: E4M3
 * in, F16 out, unit scales; fp8-block: E4M3 in, BF16 out, unit 1x128 / 128x128 block scales; mxfp8, nvfp4, mxfp4:
 * the bf16 GEMM their emulation runs on, the only path on a GPU without block-scaled MMA; callers on Blackwell
 * must not use this for them) on random operands (never zeros): at least 20 and 0.5 s of back-to-back warm-up runs
 * (the sustained, power-limited clocks the engines' timed runs see), then `iters` runs back to back with a CUDA
 * event between each two; *tflops receives 2 n^3 / median time. Errors: TP_ERR_ARG (n or iters < 1), TP_ERR_OOM
 * (3 n^2 elements on the GPU), TP_ERR_CUDA, TP_ERR_UNSUPPORTED. */
tp_status tp_gemm_peak(tp_precision prec, int n, int iters, double *tflops, tp_error *err);

/* The memory rate of this GPU as a device-to-device cudaMemcpyAsync of `bytes` (rounded down to a multiple of 4;
 * use well over the L2 size: the bench takes 256 MiB) between two fresh buffers of random contents, `iters` runs
 * after 5 warm-up runs, CUDA events around each; *gbps receives 2 bytes / median time / 1e9 (bytes read plus
 * bytes written per second: the denominator of a roofline's memory term, profile/roofline.h). Errors: TP_ERR_ARG
 * (bytes < 4 or iters < 1), TP_ERR_OOM (the two buffers), TP_ERR_CUDA. */
tp_status tp_copy_rate(size_t bytes, int iters, double *gbps, tp_error *err);

#endif
