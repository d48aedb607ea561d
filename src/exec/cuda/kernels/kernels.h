/* kernels.h: tprof's own CUDA kernels (C linkage; implemented in kernels.cu).
 *
 * Every function enqueues work on `stream` and returns cudaGetLastError() as an int (0 = cudaSuccess); it
 * never synchronizes, never allocates, so all of them can be captured into a CUDA graph.
 * Storage types: activations are TP_F32, TP_F16 or TP_BF16; outputs that feed an FP8 GEMM may be TP_E4M3,
 * quantized as q = sat_e4m3(rne(y / *scale)) with `scale` a device pointer to one fp32 per-tensor scale, a
 * positive normal number (>= 2^-126: below it a finite quotient may saturate) (OCP FP8 E4M3, saturating at +-448
 * as __NV_SATFINITE does). All arithmetic and statistics are fp32.
 * All tensors are row-major and contiguous. */
#ifndef TP_KERNELS_H
#define TP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "tprof.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *tp_stream; /* = cudaStream_t, without pulling CUDA headers into C files */

/* img (B, 3, H, W) fp32 -> cols (B * Np, 3 * P * P) in cols_dt, Np = (H/P) * (W/P), patch order row-major,
 * column index c*P*P + ky*P + kx (a Conv2d weight (C, 3, P, P) flattened). H, W multiples of P. */
int tpk_im2col(const float *img, void *cols, tp_dtype cols_dt, int B, int H, int W, int P, tp_stream stream);

/* x (B, T, C) = [cls + pos[0]] ++ (pe (B, Np, C) + pos[has_cls:]), T = Np + has_cls. pe, cls, pos, x all in
 * dtype dt; cls is NULL when has_cls is 0; pos is (T, C). */
int tpk_embed_tokens(const void *pe, const void *cls, const void *pos, void *x, tp_dtype dt, int B, int Np, int C,
                     int has_cls, tp_stream stream);

/* y (M, C) = (x - mean) * rsqrt(var + eps) * w + b per row, biased variance, fp32 statistics.
 * x in xdt (F32/F16/BF16); w, b (C) in wdt (F32/F16/BF16); y in ydt (F32/F16/BF16/E4M3, y_scale for E4M3). */
int tpk_layernorm(const void *x, tp_dtype xdt, const void *w, const void *b, tp_dtype wdt, void *y, tp_dtype ydt,
                  const float *y_scale, int M, int C, float eps, tp_stream stream);

/* y = GELU(x) = 0.5 x (1 + erf(x / sqrt 2)), n elements; x in xdt, y in ydt (E4M3 with y_scale). erf to a few
 * 1e-7 relative (Numerical Recipes' erfc fit) for F32/F16/BF16 outputs; for E4M3 outputs to 1.5e-7 absolute
 * (Abramowitz & Stegun 7.1.26), below the format's smallest step for scales over 4e-4 (kernels.cu). tanh_form: the
 * tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) instead (a model whose GELU is that: SigLIP), computed
 * as x / (1 + exp(-2 z)), z = sqrt(2/pi) (x + 0.044715 x^3) (no 1 + tanh cancellation for x < 0). */
int tpk_gelu(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, const float *y_scale, size_t n, int tanh_form,
             tp_stream stream);

/* y = x converted to ydt, n elements; x in F32/F16/BF16, y in F32/F16/BF16 (RNE) or E4M3 with y_scale
 * (sat(rne(x / *y_scale)), the per-tensor quantization of a W8A8 GEMM's input whose producer writes 16 bits).
 * y must not overlap x. */
int tpk_convert(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, const float *y_scale, size_t n, tp_stream stream);

/* y = a + b, n elements, all in dt (F32/F16/BF16); y may alias a or b. */
int tpk_add(const void *a, const void *b, void *y, tp_dtype dt, size_t n, tp_stream stream);

/* Fused multi-head attention, non-causal, online softmax in fp32 (the T x T scores never reach memory).
 * qkv (B, T, 3, H, D) in in_dt (F32/F16/BF16) -> out (B, T, H, D) in out_dt (E4M3 with out_scale).
 * scale multiplies Q K^T (timm: D^-0.5). D <= 128. Any T >= 1. */
int tpk_attention(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale, int B, int T,
                  int H, int D, float scale, tp_stream stream);

/* y (B, C) from x (B, T, C), dt in and out. mode 0: y[b] = x[b, 0] (timm 'token'); mode 1: mean over
 * tokens prefix..T-1 (timm 'avg'), fp32 sum. */
int tpk_pool(const void *x, void *y, tp_dtype dt, int B, int T, int C, int mode, int prefix, tp_stream stream);

/* *amax = max(*amax, max |x_i|) over n elements of x in dt (F32/F16/BF16); NaN propagates as NaN.
 * The caller initializes *amax (device fp32). Used by max calibration. */
int tpk_amax(const void *x, tp_dtype dt, size_t n, float *amax, tp_stream stream);

/* bins[b] += #{ i : b = min(nbins - 1, floor(|x_i| * nbins / *amax)) } over n elements of x in dt (F32/F16/BF16);
 * NaN is not counted; *amax (device fp32, > 0) is the range's top, from the max pass. 1 <= nbins <= 4096; the
 * caller zeroes bins. For percentile calibration (tp_calibrate, cuda_engine.h). */
int tpk_abs_histogram(const void *x, tp_dtype dt, size_t n, const float *amax, unsigned *bins, int nbins,
                      tp_stream stream);

/* Block-scaled quantize-dequantize along K, bit-exact with the CPU reference tp_qdq_f32 (src/formats/qformat.h):
 * x (rows, K) in xdt (F32/F16/BF16) -> y (rows, K) in ydt (F32/BF16) holding exactly the values of the format
 * (NVFP4: without the per-tensor scale s2, read from the device pointer global; NULL for MX formats).
 * qformat is a tp_qformat: TP_QF_MXFP8, TP_QF_NVFP4 or TP_QF_MXFP4. K must be a multiple of the block and x, y
 * aligned to 4 elements (cudaErrorInvalidValue otherwise).
 * The emulation of block-scaled GEMM operands on GPUs without block-scaled MMA (sm_89, sm_90). */
int tpk_block_qdq(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, long long rows, long long K, int qformat,
                  const float *global, tp_stream stream);

/* Native block-scaled operands for Blackwell's block-scaled MMA (cuBLASLt VEC32_UE8M0 / VEC16_UE4M3), bit-exact
 * with tp_quantize(qformat, is_weight 0) (src/formats/qformat.h): x (rows, K) row-major in xdt (F32/F16/BF16) ->
 * codes (rows, K) packed as tp_qtensor packs them (E4M3: a byte each; E2M1: two per byte, the even element in
 * the low nibble) and scales (UE8M0 / UE4M3 codes) in cuBLASLt's 128x4 tiled layout (scale_layout.h;
 * tp_swz_bytes(rows, K / block) bytes, the padding zeroed here). qformat: TP_QF_MXFP8, TP_QF_NVFP4 (global: the
 * device fp32 second-level scale s2) or TP_QF_MXFP4. K a multiple of the block; x aligned to 4 elements.
 * Runs on any GPU; only the GEMM that reads the result needs sm_100 or newer. */
int tpk_block_quant_native(const void *x, tp_dtype xdt, void *codes, void *scales, long long rows, long long K,
                           int qformat, const float *global, tp_stream stream);

/* FP8 block-128 activations (1 x 128 blocks along K), bit-exact with tp_quantize(TP_QF_FP8_BLOCK128, is_weight 0)
 * (src/formats/qformat.c): x (M, K) row-major in xdt (F32/F16/BF16) -> q (M_pad, K) E4M3 codes row-major and
 * scales (ceil(K/128), M_pad) fp32 with M_pad contiguous: scales[kb * M_pad + m] is the scale of
 * x[m, 128 kb .. 128 kb + 127], the layout cuBLASLt's VEC128_32F scale mode reads for the activation operand
 * (measured on H200: tools/probes/fp8_block128_layout.c). Rows M .. M_pad - 1 get codes 0 and scale 1
 * (cuBLASLt needs M % 4 == 0 with block scales; the caller pads). gelu 1 quantizes GELU(x) instead (the
 * GELU op writing its output in the format: no separate pass), 2 its tanh form (as tpk_gelu's tanh_form). K % 4 == 0; x aligned to 4 elements, q and scales
 * to 4 bytes (cudaErrorInvalidValue otherwise). */
int tpk_quant_fp8_b128(const void *x, tp_dtype xdt, int gelu, void *q, float *scales, int M, int M_pad, int K,
                       tp_stream stream);

/* LayerNorm (as tpk_layernorm) whose output is written as FP8 block-128 (as tpk_quant_fp8_b128): the fp32
 * normalized values are quantized directly, never rounded to a 16-bit type first. C % 4 == 0. */
int tpk_layernorm_fp8_b128(const void *x, tp_dtype xdt, const void *w, const void *b, tp_dtype wdt, void *q,
                           float *scales, int M, int M_pad, int C, float eps, tp_stream stream);

/* Fills n elements of p (dt: F32/F16/BF16/E4M3) with values uniform in [-1, 1) from a counter-based hash of
 * (seed, index): deterministic, no state, never all zeros. For benchmark operands (GEMM peak rates). */
int tpk_fill_uniform(void *p, tp_dtype dt, size_t n, uint64_t seed, tp_stream stream);

#ifdef __cplusplus
}
#endif
#endif
