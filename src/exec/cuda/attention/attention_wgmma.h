/* attention_wgmma.h: fused multi-head attention on Hopper's warpgroup MMA (wgmma), C linkage; implemented in
 * attention_wgmma.cu (built for sm_90a only). Same conventions as attention.h: enqueues on `stream`, returns
 * cudaGetLastError() as an int (0 = cudaSuccess), never synchronizes, never allocates (graph-capturable); same
 * numerics as tpk_flash_attention (fp32 accumulation and softmax statistics, P rounded to the input type for P V,
 * one output rounding; E4M3 out: q = sat_e4m3(rne(y / *out_scale))). */
#ifndef TP_ATTENTION_WGMMA_H
#define TP_ATTENTION_WGMMA_H

#include "exec/cuda/kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when tpk_flash_attention_wgmma can run this configuration on the current device: compute capability 9.0
 * (wgmma exists on sm_90a only), D == 64, in_dt F16 or BF16, out_dt F16, BF16 or E4M3, and the head's Q, K and V
 * fit the device's shared memory per block (about 64 * ceil(T / 64) * 128 + 2 * 128 * ceil(T / 16) * 16 bytes:
 * T <= 577 on an H100/H200). 0 otherwise, or when the device cannot be queried. */
int tpk_flash_attention_wgmma_supported(tp_dtype in_dt, tp_dtype out_dt, int T, int D);

/* Same arguments and layouts as tpk_flash_attention (attention.h): qkv (B, T, 3, H, D) row-major in in_dt, out
 * (B, T, H, D) row-major in out_dt, scale multiplies Q K^T, non-causal. One CTA per (b, h) holds the head's Q, K
 * and V in shared memory. Returns cudaErrorInvalidValue without launching when the configuration is not supported
 * (see tpk_flash_attention_wgmma_supported), for a NULL or non-16-byte-aligned pointer, or a missing E4M3 scale;
 * empty work (B, T or H = 0) returns cudaSuccess without a launch. */
int tpk_flash_attention_wgmma(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale,
                              int B, int T, int H, int D, float scale, tp_stream stream);

/* tpk_flash_attention_wgmma runs one configuration (one warpgroup per 2 query tiles of 64 rows, 3 CTAs per SM:
 * attention_wgmma_impl.cuh), the only one the product compiles. The lab's others and
 * tpk_flash_attention_wgmma_variant, which picks one by number, are compiled only into the labs and the GPU tests:
 * bench/attention_wgmma_variants.cu, declared in bench/lab_variants.h. */

/* FP8 attention on FP8 tensor cores (attention_wgmma_fp8.cu): the numerics of tpk_flash_attention_fp8
 * (attention_fp8.h: S = Q K^T and O = P V on E4M3, P = sat_e4m3(rne(2^8 2^(S sl2 - m))) over 64-key tiles,
 * l = sum of the quantized P, out = O s_v / l) on inputs that are already E4M3:
 *   qkv (B, T, 3, H, D) row-major E4M3 codes q = sat_e4m3(rne(x / s)) with the per-tensor scales
 *   qkv_scale = device pointer to (s_q, s_k, s_v) fp32 (positive, finite, normal);
 *   out (B, T, H, D) row-major in out_dt (F16, BF16, or E4M3 with *out_scale as tpk_flash_attention);
 *   scale multiplies Q K^T (any sign), non-causal. D == 64; T up to what shared memory holds (about
 *   2 * 4096 + 64 * (2 tpad + 72 tpad / 64) bytes, tpad = T rounded up to 32: T <= 1000 or so on an H100/H200).
 * Runs on compute capability 9.0 only (wgmma). Returns cudaErrorInvalidValue without launching for an unsupported
 * configuration (see _supported), a NULL or non-16-byte-aligned pointer, a missing scale; empty work (B, T or
 * H = 0) returns cudaSuccess without a launch. */
int tpk_flash_attention_wgmma_fp8_supported(tp_dtype out_dt, int T, int D);
int tpk_flash_attention_wgmma_fp8(const void *qkv, const float *qkv_scale, void *out, tp_dtype out_dt,
                                  const float *out_scale, int B, int T, int H, int D, float scale, tp_stream stream);
/* tpk_flash_attention_wgmma_fp8 runs 2 query tiles of 64 rows per CTA with up to 168 registers a thread
 * (attention_wgmma_fp8_impl.cuh), the only configuration the product compiles. The lab's others and
 * tpk_flash_attention_wgmma_fp8_variant are compiled only into the labs and the GPU tests:
 * bench/attention_wgmma_fp8_variants.cu, declared in bench/lab_variants.h. */

#ifdef __cplusplus
}
#endif
#endif
