/* e4m3.cuh: the device-side rounding of fp32 values to OCP FP8 E4M3 under a per-tensor scale, shared by every
 * kernel that writes or reads quantized activations (kernels.cu's E4M3 stores, gemv.cu's W8A8 inputs), so they
 * round alike and alike to the host codec tp_f32_to_e4m3 (src/formats/dtype.c): q = sat(rne(v / scale)). */
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

#endif
