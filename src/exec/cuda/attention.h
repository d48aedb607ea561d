/* attention.h: fused multi-head attention on tensor cores (FlashAttention-2 style), C linkage; implemented in
 * attention.cu. Same conventions as kernels.h: enqueues on `stream`, returns cudaGetLastError() as an int
 * (0 = cudaSuccess), never synchronizes, never allocates (graph-capturable).
 *
 * Numerics: Q K^T and P V on tensor cores (mma.sync m16n8k16) with fp32 accumulation; softmax statistics in fp32;
 * the probabilities P are rounded to the input type (fp16 or bf16) before P V, while the row sums use the
 * unrounded fp32 values; the output is rounded once on store (RNE for F16/BF16; E4M3: q = sat_e4m3(rne(y / s))
 * through __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3), as kernels.cu does). */
#ifndef TP_ATTENTION_H
#define TP_ATTENTION_H

#include "exec/cuda/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* qkv (B, T, 3, H, D) row-major in in_dt (TP_F16 or TP_BF16), the fused QKV GEMM's output as timm lays it out;
 * out (B, T, H, D) row-major in out_dt (TP_F16, TP_BF16, or TP_E4M3 quantized with *out_scale:
 * q = sat_e4m3(rne(y / *out_scale)), out_scale a device fp32 pointer);
 * scale multiplies Q K^T (timm: D^-0.5). Non-causal. D in {32, 64, 80, 96, 128}; any T >= 1.
 * qkv and out must be 16-byte aligned (every cudaMalloc'd buffer is).
 * Returns cudaErrorInvalidValue without launching for an unsupported D or dtype, a misaligned or NULL pointer
 * with work to do, or a missing E4M3 scale; empty work (B, T or H = 0) returns cudaSuccess without a launch. */
int tpk_flash_attention(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale, int B,
                        int T, int H, int D, float scale, tp_stream stream);

/* The same with an explicit kernel configuration, for the benchmark lab (bench/attention_lab.cu) and tests:
 * variant 0 = the default tpk_flash_attention uses; 1 = 4 warps x 16 query rows per CTA, <= 128 registers a thread
 * for D <= 64 (4 CTAs per SM); 2 = 8 warps x 16 rows; 3 = 4 warps x 32 rows; 4 = 2 warps x 32 rows (3 and 4 only
 * for D <= 96); 5 = 4 warps x 16 rows, <= 168 registers for D <= 64; 6 = variant 1's tiles in a persistent grid
 * (each CTA loops over work items, loading the next item while finishing the current one).
 * Other values: cudaErrorInvalidValue. */
int tpk_flash_attention_variant(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale,
                                int B, int T, int H, int D, float scale, int variant, tp_stream stream);

#ifdef __cplusplus
}
#endif
#endif
