/* gemv.h: decode GEMVs, the memory-bound matrix-vector products of LLM decoding (gemv.cu):
 *     y (M, N) = x (M, K) @ W (N, K)^T  [+ bias (N)]  [+ residual (M, N)]
 * PyTorch's Linear convention, every tensor row-major and contiguous, M = the decode batch (1..8 rows per pass;
 * larger M runs in passes of 8 rows, each re-reading W: use a GEMM there), N and K in the thousands. The weight
 * stream dominates the bytes (x, y and the scales are a few percent), so the kernels are built to read W once
 * at close to DRAM bandwidth: 16-byte loads that skip L1, several in flight per thread (two register buffers
 * of two 16-byte chunks of each of its two rows; four 8-byte chunks on the narrow paths), x read through L1 (it is
 * small and shared by every block), the reduction over K on the tensor cores (mma.sync m16n8k16: 16 weight rows x
 * 8 batch rows per warp, fp32 accumulation), K split over the 4 warps of a block and, when N / 16 blocks would not
 * fill the GPU, over a thread-block cluster of 2, 4 or 8 blocks whose partial sums meet in distributed shared
 * memory. gemv.cu explains the layout and the predicted
 * bandwidth; bench/gemv_lab.c measures it against the device copy rate and cuBLASLt.
 *
 * Four weight formats, x and y FP16 or BF16 (dt) in all of them (the fourth, FP8 block-128, below
 * tpk_gemv_fp8_block):
 *   tpk_gemv        W in dt (IEEE binary16 / bfloat16);
 *   tpk_gemv_fp8    W as OCP FP8 E4M3 codes (OFP8 rev 1.0; docs/formats.md: bias 7, max 448, NaN 0x7F/0xFF)
 *                   with a per-output-channel fp32 scale and/or a per-tensor fp32 scale: W[n, k] =
 *                   e4m3(q[n, k]) * channel_scale[n] * tensor_scale. tp_quantize(TP_QF_FP8_TENSOR) makes the
 *                   per-tensor codes and scale (src/formats/qformat.h; the same rule per row gives the
 *                   per-channel ones);
 *   tpk_gemv_nvfp4  W as NVFP4 (NVIDIA ModelOpt's two-level scheme, qformat.h's TP_QF_NVFP4 and tp_qtensor):
 *                   E2M1 codes, one UE4M3 scale per 16 consecutive K elements of a row, one fp32 per-tensor scale
 *                   s2: W[n, k] = e2m1(q[n, k]) * ue4m3(s[n, k / 16]) * s2.
 * The weights are decoded in registers (no dequantized copy in memory); every decoded product e2m1 * ue4m3 and
 * every e4m3 is exact in the 16-bit type the tensor cores multiply, so the only roundings are the fp32
 * accumulation's and the one rounding of y.
 *
 * Packed layouts (exactly what tp_quantize writes into tp_qtensor.elems and .scales):
 *   E4M3 W      N * K bytes, byte n * K + k = the code of W[n, k].
 *   NVFP4 W     N * K / 2 bytes, row n at byte n * K / 2; byte n * K / 2 + i holds element k = 2i of row n in its
 *               low nibble (bits 0-3) and k = 2i + 1 in its high nibble (bits 4-7); a nibble is an E2M1 code
 *               s.ee.m (bit 3 the sign): +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
 *   NVFP4 scales  N * (K / 16) bytes, row-major (N, K / 16): byte n * (K / 16) + b = the UE4M3 code (E4M3 bits,
 *               sign 0) of block b = elements 16 b .. 16 b + 15 of row n. Plain row-major: NOT cuBLASLt's
 *               128 x 4 tiled VEC16_UE4M3 layout (scale_layout.h).
 *   s2          one fp32 in device memory (tp_qtensor.global_scale).
 *
 * Arithmetic and epilogue: acc = sum_k x[m, k] * Wd[n, k] in fp32 on the tensor cores, where Wd is the decoded
 * weight without its fp32 scales (E4M3: e4m3(q); NVFP4: e2m1(q) * ue4m3(s), times a power of two the scale
 * undoes exactly); then, in fp32, v = acc * scale_n + bias[n] + residual[m, n], and y[m, n] = RNE(v) to dt, the
 * only rounding of the output. scale_n = 1 (16-bit W), channel_scale[n] * tensor_scale (FP8; an absent one
 * counts 1), 128 * s2 (NVFP4). The sum's order differs from a sequential loop (fp32 partial sums per warp and
 * block, added in a fixed order): results are deterministic, launch after launch and in a graph replay.
 * NaN: E4M3 NaN codes and NaN block scales give NaN outputs, as the dequantized weights would.
 *
 * Arguments, common to the three:
 *   x         (M, K) in dt, 16-byte aligned, not overlapping y;  y (M, N) in dt, 2-byte aligned;
 *   bias      (N) in dt or NULL;  residual (M, N) in dt or NULL, may be y itself (y += x W^T in place) but must
 *             not otherwise overlap it;
 *   dt        TP_F16 or TP_BF16;  M, N >= 1;  K >= 1 with the format's multiple (below).
 * Conventions of kernels.h: enqueues on `stream`, returns cudaGetLastError() as an int (0 = cudaSuccess), never
 * synchronizes or allocates, so every call can be captured into a CUDA graph. Errors: cudaErrorInvalidValue
 * without a launch (nothing written, no sticky error) for a bad dt, M, N or K < 1, K not a multiple of the
 * format's rule (8 for 16-bit and FP8 weights, 16 for NVFP4), a NULL required pointer or a misaligned one;
 * otherwise the launch's error. Compiled for sm_90 (H100/H200): cvt.f16x2.e4m3x2 needs sm_89 and clusters sm_90;
 * elsewhere the launch fails with the runtime's error. */
#ifndef TP_GEMV_H
#define TP_GEMV_H

#include "exec/cuda/kernels/kernels.h"
#include "tprof.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 16-bit weights: W (N, K) row-major in dt, 16-byte aligned. K % 8 == 0 (16-byte rows). */
int tpk_gemv(const void *x, const void *w, const void *bias, const void *residual, void *y, tp_dtype dt, int M,
             int N, int K, tp_stream stream);

/* Weight-only FP8: w (N, K) E4M3 codes row-major, 16-byte aligned when K % 16 == 0, else 8-byte aligned (the
 * slower 8-byte path). K % 8 == 0. channel_scale: N fp32 (device, 4-byte aligned) or NULL; tensor_scale: one
 * fp32 (device) or NULL; W = e4m3(w) * channel_scale[n] * tensor_scale (per-tensor scaling is tensor_scale alone,
 * or N equal channel scales). Both NULL: scale 1. */
int tpk_gemv_fp8(const void *x, const void *w, const float *channel_scale, const float *tensor_scale,
                 const void *bias, const void *residual, void *y, tp_dtype dt, int M, int N, int K, tp_stream stream);

/* W8A8 FP8 (both operands E4M3, per-tensor scales): as tpk_gemv_fp8, with x (16-bit, as the previous op wrote it)
 * rounded to E4M3 as it is loaded, xq[m, k] = sat(rne(x[m, k] / *x_scale)) (the rounding of kernels.h's E4M3
 * stores and of the host codec tp_f32_to_e4m3), and *x_scale joining the epilogue's scale_n:
 * y = (sum_k xq[m, k] e4m3(w[n, k])) * channel_scale[n] * tensor_scale * x_scale [+ bias] [+ residual]. Every
 * product of two E4M3 values is exact in fp32, so this is an FP8 GEMM's arithmetic (E4M3 x E4M3, fp32
 * accumulation) on the tensor cores' 16-bit path, without a quantize kernel before it. x_scale: one fp32
 * (device, not NULL, 4-byte aligned; normal). Errors as tpk_gemv_fp8's. */
int tpk_gemv_w8a8(const void *x, const float *x_scale, const void *w, const float *channel_scale,
                  const float *tensor_scale, const void *bias, const void *residual, void *y, tp_dtype dt, int M,
                  int N, int K, tp_stream stream);

/* Weight-only NVFP4: w (N * K / 2 bytes) and scales (N * K / 16 UE4M3 bytes) in the layouts above, global_scale
 * the device fp32 s2 (not NULL). K % 16 == 0. Alignment: w 8-byte aligned; the fast path (16-byte loads) needs
 * K % 32 == 0, w 16-byte aligned and scales 2-byte aligned, and is taken whenever they hold; otherwise 8-byte
 * loads, one block per load. */
int tpk_gemv_nvfp4(const void *x, const void *w, const void *scales, const float *global_scale, const void *bias,
                   const void *residual, void *y, tp_dtype dt, int M, int N, int K, tp_stream stream);
/* The same with one s2 per output row: row_s2 N fp32 (device, 4-byte aligned, not NULL), row n's W = e2m1 * ue4m3 *
 * row_s2[n]: several NVFP4 tensors of one K stacked by rows (sibling linears run as one GEMV), each row under its
 * own tensor's s2, applied exactly as tpk_gemv_nvfp4 applies global_scale. Errors as tpk_gemv_nvfp4's. */
int tpk_gemv_nvfp4_rows(const void *x, const void *w, const void *scales, const float *row_s2, const void *bias,
                        const void *residual, void *y, tp_dtype dt, int M, int N, int K, tp_stream stream);

/* FP8 block-128 (DeepSeek-V3's fine-grained FP8, section 3.3; tp_quantize(TP_QF_FP8_BLOCK128) is the reference):
 * w (N, K) E4M3 codes row-major, 16-byte aligned, one fp32 scale per 128 x 128 block in w_scales, laid out as
 * cuBLASLt reads them (gemm_cublaslt.h tp_gemm_b128_weight_scales): (ceil(N / 128), ld) row-major, ld =
 * ceil(K / 128) rounded up to a multiple of 4, block (nb, kb) at w_scales[nb * ld + kb] (4-byte aligned). x is
 * 16-bit: the kernel quantizes each 1 x 128 block of each row as it loads it, bit for bit as tpk_quant_fp8_b128
 * (kernels.h): xs = amax / 448 (1 when 0), xq = e4m3(x / xs); then
 *     y[m, n] = sum_kb (sum_{k in kb} xq[m, k] e4m3(w[n, k])) * xs[m, kb] * ws[n / 128, kb]  [+ bias] [+ residual]
 * each block's sum in fp32 on the tensor cores (every product of two E4M3 values is exact), scaled and added in
 * fp32: a block-scaled FP8 GEMM's arithmetic (cuBLASLt's VEC128_32F x BLK128x128_32F), with no quantize kernel
 * before it and no E4M3 copy of x. K % 16 == 0. Errors as the others'. A group of such tensors stacked by rows
 * (sibling linears) is one such tensor when every member but the last has N % 128 == 0 (its scale rows then stack
 * too). */
int tpk_gemv_fp8_block(const void *x, const void *w, const float *w_scales, const void *bias, const void *residual,
                       void *y, tp_dtype dt, int M, int N, int K, tp_stream stream);

/* The prefill's side of weight-only FP8: n E4M3 codes (w) to their exact values in dt (TP_F16 or TP_BF16: every
 * E4M3 value is exact in both), for a 16-bit GEMM that applies the weight's scale in alpha. Errors as above
 * (cudaErrorInvalidValue for a bad dt, n < 1 or a NULL pointer). */
int tpk_e4m3_to_16bit(const void *w, void *y, tp_dtype dt, long long n, tp_stream stream);
/* Weight-only NVFP4's: w and scales (N, K) in the layouts above to y (N, K) row-major in dt, each element
 * e2m1(q) * ue4m3(s) exactly (at most 6 significant bits, within [2^-10, 2688]: exact in FP16 and BF16), s2 left
 * to the GEMM's alpha. K % 16 == 0. Errors as tpk_e4m3_to_16bit. */
int tpk_nvfp4_to_16bit(const void *w, const void *scales, void *y, tp_dtype dt, long long N, long long K,
                       tp_stream stream);

/* ---- the fused form (planner/program.h's rule gemv+glu) ------------------------------------------------------
 * A gate/up sibling group's GEMV may compute the GLU that consumes its two outputs (an epilogue): one kernel where a
 * decode step ran two, and the gate and up outputs are never written. All zero: no fusion.
 *   glu      1 (SiLU: SwiGLU) or 2 (tanh GELU: GeGLU): y is (M, glu_n) = act(g) * u, g[m, j] the GEMV's output
 *            row gate_row + j and u row up_row + j, each in fp32 with its scale and bias (never rounded on the way),
 *            act tpk_glu's (decoder_ops.h), one rounding to dt. gate_row + glu_n <= N, up_row + glu_n <= N: the
 *            two members of a sibling group, stacked by rows (W, its scales and the bias alike). Each block takes
 *            8 gate rows and the 8 up rows of the same output columns (instead of 16 consecutive rows), so both
 *            values of an output meet in the block's epilogue.
 * The fused forms take no residual. Errors as the plain forms', and cudaErrorInvalidValue for a fusion that breaks
 * these rules (nothing launched). */
typedef struct {
    int glu, glu_n, gate_row, up_row;
} tpk_gemv_fusion;

/* tpk_gemv with a fusion (f may be NULL: none). */
int tpk_gemv_fused(const void *x, const void *w, const void *bias, void *y, tp_dtype dt, int M, int N, int K,
                   const tpk_gemv_fusion *f, tp_stream stream);
/* tpk_gemv_fp8 (x_scale NULL) or tpk_gemv_w8a8 (x_scale the input's scale) with a fusion. */
int tpk_gemv_fp8_fused(const void *x, const float *x_scale, const void *w, const float *channel_scale,
                       const float *tensor_scale, const void *bias, void *y, tp_dtype dt, int M, int N, int K,
                       const tpk_gemv_fusion *f, tp_stream stream);
/* tpk_gemv_nvfp4 (s2_per_row 0: s2 one fp32) or tpk_gemv_nvfp4_rows (1: one per row) with a fusion. */
int tpk_gemv_nvfp4_fused(const void *x, const void *w, const void *scales, const float *s2, int s2_per_row,
                         const void *bias, void *y, tp_dtype dt, int M, int N, int K, const tpk_gemv_fusion *f,
                         tp_stream stream);

/* tpk_gemv_fp8_block on an input its producer already quantized (a decoder's RMSNorm writing FP8 block-128): xq (M,
 * K) E4M3 codes row-major, 16-byte aligned, x_scales (ceil(K / 128), x_ld) fp32 with x_ld >= M contiguous (kernels.h
 * tpk_quant_fp8_b128's layout, x_ld its M_pad), 4-byte aligned: y = sum_kb (sum_k xq w) xs ws as above, without the
 * quantization. Errors as tpk_gemv_fp8_block's, and cudaErrorInvalidValue for NULL or misaligned x_scales or x_ld <
 * M. */
int tpk_gemv_fp8_block_q(const void *xq, const float *x_scales, int x_ld, const void *w, const float *w_scales,
                         const void *bias, const void *residual, void *y, tp_dtype dt, int M, int N, int K,
                         tp_stream stream);
int tpk_gemv_fp8_block_q_fused(const void *xq, const float *x_scales, int x_ld, const void *w, const float *w_scales,
                               const void *bias, void *y, tp_dtype dt, int M, int N, int K, const tpk_gemv_fusion *f,
                               tp_stream stream);

/* tpk_gemv_fp8_block with a fusion. */
int tpk_gemv_fp8_block_fused(const void *x, const void *w, const float *w_scales, const void *bias, void *y,
                             tp_dtype dt, int M, int N, int K, const tpk_gemv_fusion *f, tp_stream stream);

/* Programmatic dependent launch (kernels/pdl.cuh): the GEMVs are launched with it and issue their first loads of w
 * (and of NVFP4's block scales) before waiting for the previous kernels in the stream, which may still be running:
 * no kernel still running earlier in the stream may write w or its scales (a decode step never does). x, the
 * residual, bias, the fp32 scales and y are touched only after the wait. */

/* Bytes the weights of one call occupy (elements and scales; what a GEMV must stream once): format 0 = 16-bit,
 * 1 = FP8 (+ 4 N for channel scales when channel_scales), 2 = NVFP4 (K / 2 + K / 16 per row + 4), 3 = FP8
 * block-128 (N K + the block scales as laid out above). For the lab's bandwidth figures. */
long long tpk_gemv_weight_bytes(int format, long long N, long long K, int channel_scales);

#ifdef __cplusplus
}
#endif
#endif
