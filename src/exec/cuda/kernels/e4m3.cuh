/* e4m3.cuh: the device-side rounding of fp32 values to OCP FP8 E4M3 under a per-tensor scale, shared by every
 * kernel that writes or reads quantized activations (kernels.cu's E4M3 stores, gemv.cu's W8A8 inputs), so they
 * round alike and alike to the host codec tp_f32_to_e4m3 (src/formats/dtype.c): q = sat(rne(v / scale)); and the
 * FP8 block-128 activations' scales and codes (below). */
#ifndef TP_E4M3_CUH
#define TP_E4M3_CUH

#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

/* v / scale, correctly rounded, without the division: with r = RN(1 / scale) (rcp.rn: one PTX instruction, so
 * every store with this scale shares it), q = RN(v r) is within an ulp of v / scale and one correction step
 * RN(q + (v - q scale) r), the remainder exact through the FMA, is the correctly rounded quotient (Markstein's
 * theorem; Muller et al., Handbook of Floating-Point Arithmetic, 2nd ed., 4.7 and 5.5). Branch-free: where the
 * corrected quotient is not finite (v infinite or NaN, overflow) the plain product is, like v / scale, +-inf or
 * NaN; a zero quotient is the product (its sign that of v / scale). Outside the theorem's hypotheses: quotients
 * below 2^-126 may differ in the last bit, and all of them round to zero in E4M3 (smallest subnormal 2^-9);
 * scales that are not normal (below 2^-126, kernels.h asks for normal ones) may saturate a quotient that is
 * finite. */
static __device__ __forceinline__ float tpk_div_by_scale(float v, float scale) {
    const float r = __frcp_rn(scale);
    const float q = v * r, q1 = fmaf(fmaf(-q, scale, v), r, q);
    /* a zero quotient keeps the plain product's sign: the correction of -0 is +0 (-0 + +0), while -0 / scale is -0
     * and encodes as E4M3 -0 (0x80), as the host codec does */
    return isfinite(q1) && q1 != 0.0f ? q1 : q;
}

/* Two values in one cvt.rn.satfinite.e4m3x2.f32: lo / scale in bits 0-7, hi / scale in bits 8-15 (saturating to
 * +-448, NaN kept). */
static __device__ __forceinline__ uint32_t tpk_to_e4m3x2(float lo, float hi, float scale) {
    float2 f = make_float2(tpk_div_by_scale(lo, scale), tpk_div_by_scale(hi, scale));
    return (uint32_t)__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
}

/* FP8 block-128 activations (1 x 128 blocks along K; DeepSeek-V3 section 3.3; cuBLASLt VEC128_32F), as
 * tp_quantize(TP_QF_FP8_BLOCK128, is_weight 0) computes them (src/formats/qformat.c), bit for bit, for every kernel
 * that writes them (kernels.cu: the quantizer, LayerNorm and GELU; decoder_ops.cu: RMSNorm) or quantizes them as it
 * reads them (gemv.cu): the block's scale from its amax (NaN skipped: fmaxf) is amax / 448 in fp32 (equal to the
 * fp64 division rounded once, qformat.c says why), 1 when that is 0, a quiet NaN when amax is Inf (then every code
 * is 0). */
static __device__ __forceinline__ float tpk_b128_scale(float amax) {
    const float s = isinf(amax) ? __int_as_float(0x7FC00000) : amax / 448.0f;
    return s == 0.0f ? 1.0f : s;
}

/* One value's code: E4M3_satfinite(rne(v / s)); a NaN v encoded directly, keeping its sign (S.1111.111) as the
 * host codec does (neither v / s nor __nv_cvt_float_to_fp8 keeps it); 0 in a NaN block. */
static __device__ __forceinline__ uint32_t tpk_b128_code(float v, float s, bool nan_block) {
    if (nan_block) return 0;
    if (v != v) return ((__float_as_uint(v) >> 24) & 0x80u) | 0x7Fu;
    return (uint32_t)__nv_cvt_float_to_fp8(v / s, __NV_SATFINITE, __NV_E4M3);
}

/* One block held by a warp, lane l holding its elements 4 l .. 4 l + 3 in v (live: whether the lane holds any; a
 * partial last block leaves lanes out, which pass zeros: they cannot raise the amax). Codes go to q (4-byte
 * aligned), lane 0 writes *scale. Every lane of the warp must call it. */
static __device__ __forceinline__ void tpk_b128_store(const float v[4], bool live, uint8_t *q, float *scale,
                                                      int lane) {
    float a = live ? fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3]))) : 0.0f;
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    const float s = tpk_b128_scale(a);
    const bool nan_block = s != s;
    if (live)
        *reinterpret_cast<uint32_t *>(q) = tpk_b128_code(v[0], s, nan_block) |
                                           (tpk_b128_code(v[1], s, nan_block) << 8) |
                                           (tpk_b128_code(v[2], s, nan_block) << 16) |
                                           (tpk_b128_code(v[3], s, nan_block) << 24);
    if (lane == 0) *scale = s;
}

/* A pad row (rows M .. M_pad - 1: cuBLASLt wants M % 4 == 0 with block scales): codes 0, scales 1, by one warp.
 * scales (ceil(K / 128), M_pad) with M_pad contiguous. */
static __device__ __forceinline__ void tpk_b128_pad_row(uint8_t *qr, float *scales, int row, int M_pad, int K,
                                                        int lane) {
    for (int k = lane * 4; k < K; k += 128) *reinterpret_cast<uint32_t *>(qr + k) = 0u;
    for (int kb = lane; kb < (K + 127) / 128; kb += 32) scales[(size_t)kb * M_pad + row] = 1.0f;
}

#endif
