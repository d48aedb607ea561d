/* attention_fp8.h: fused multi-head attention with both products on FP8 (E4M3) tensor cores, C linkage; implemented
 * in attention_fp8.cu. Same conventions as kernels.h and attention.h: enqueues on `stream`, returns
 * cudaGetLastError() as an int (0 = cudaSuccess), never synchronizes, never allocates (graph-capturable).
 *
 * Numerics (attention_fp8.cu's header comment has the reasons; tests/gpu/test_gpu_attention_fp8.c emulates them):
 *   - Q, K, V quantized to E4M3 when loaded: q = sat_e4m3(rne(x / s)), x / s the IEEE quotient (as kernels.cu),
 *     s = qkv_scale[0], [1], [2] for Q, K, V;
 *   - S = Q K^T on E4M3 tensor cores (mma.sync m16n8k32, fp32 accumulation); the logits are S * sl2 with
 *     sl2 = ((s_q * s_k) * scale) * log2(e) rounded in fp32, softmax in the log2 domain with fp32 statistics;
 *   - online softmax over key tiles of 64 keys (keys [64 j, 64 j + 64)): each tile's probabilities are taken
 *     relative to the running row max m after that tile, P = sat_e4m3(rne(2^8 * 2^(S sl2 - m))), i.e. scaled by
 *     2^8 = 256 before quantization (so P >= 2^-14 stays in E4M3's normal range, the largest P is 256, and
 *     P < 2^-18 becomes 0);
 *   - O = P V on E4M3 tensor cores (fp32 accumulation), the fp32 row sum l = sum of the QUANTIZED P (computed by
 *     the same tensor-core product against a column of ones), so the 2^8 cancels and the weights that multiply V
 *     sum to exactly 1: out = O * s_v / l, rounded once on store (F16/BF16 RNE; E4M3 sat(rne(y / *out_scale))).
 * Limitation: x / s must be finite in fp32 (|x| < 3.4e38 s: every fp16 input for s >= 2^-112); scales must be
 * positive, finite and normal, with normal reciprocals. */
#ifndef TP_ATTENTION_FP8_H
#define TP_ATTENTION_FP8_H

#include "exec/cuda/kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* qkv (B, T, 3, H, D) row-major in in_dt (TP_F16 or TP_BF16: the QKV GEMM's output); qkv_scale: device pointer
 * to 3 fp32 per-tensor scales (s_q, s_k, s_v), static from calibration (amax / 448);
 * out (B, T, H, D) in out_dt (TP_F16, TP_BF16, or TP_E4M3 with *out_scale as tpk_flash_attention does).
 * scale multiplies Q K^T (timm: D^-0.5; any sign). Non-causal. D in {32, 64, 80, 96, 128}; any T >= 1.
 * qkv and out must be 16-byte aligned (every cudaMalloc'd buffer is).
 * Returns cudaErrorInvalidValue without launching for an unsupported D or dtype, a misaligned or NULL pointer with
 * work to do, or a missing scale; empty work (B, T or H = 0) returns cudaSuccess without a launch. */
int tpk_flash_attention_fp8(const void *qkv, tp_dtype in_dt, const float *qkv_scale, void *out, tp_dtype out_dt,
                            const float *out_scale, int B, int T, int H, int D, float scale, tp_stream stream);

/* The kernel's configurations ("variants"; attention_fp8_impl.cuh): all compute the numerics above (they may differ
 * only in the fp32 accumulation inside the tensor cores).
 *   product kind: E4M3 = mma.sync.m16n8k32.e4m3 on E4M3 operands in shared memory (V stored transposed);
 *                 F16 = mma.sync.m16n8k16.f16 on the same E4M3 values held as fp16 (exact). On sm_90 ptxas lowers
 *                 the E4M3 mma.sync to F2FP unpacks to fp16 plus two HMMA.16816 and FADDs (Hopper's FP8 tensor
 *                 cores are reached only through wgmma), so F16 does the same work in fewer instructions.
 *   decomposition: a head per CTA when its keys fit in shared memory (each K/V element quantized once; the 8 warps
 *                 take the head's 16-row query tiles in rounds), else as below; or 128 query rows per CTA.
 * tpk_flash_attention_fp8 runs F16 products, with a head per CTA when that still gives 2 CTAs per SM, else fewer
 * rounds per CTA: the product compiles the F16 kind alone. The E4M3 kind and tpk_flash_attention_fp8_variant, which
 * picks a kind and a decomposition by number, are compiled only into the labs and the GPU tests:
 * bench/attention_fp8_variants.cu, declared in bench/lab_variants.h. */

#ifdef __cplusplus
}
#endif
#endif
