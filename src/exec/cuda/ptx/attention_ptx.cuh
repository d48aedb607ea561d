/* attention_ptx.cuh: device helpers shared by the attention kernels (attention.cu, attention_wgmma.cu,
 * attention_fp8.cu) and the persistent decode kernel (persist.cu): shared-memory addresses, cp.async, packing fp32 pairs into 16-bit fragments, the SFU's
 * exp2 and the Markstein-corrected division. Header-only, __device__ __forceinline__; CUDA C. */
#ifndef TP_ATTENTION_PTX_CUH
#define TP_ATTENTION_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, bypassing L1; src_bytes = 0 writes 16 zero bytes and reads nothing. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

/* Two fp32 -> one 32-bit register of the input type, lo in the low half (the lower column of a fragment). */
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __half) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __nv_bfloat16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* y / s correctly rounded (the IEEE quotient kernels.cu uses), from rcp = RN(1 / s) by one FMA correction
 * (Markstein: with rcp within half an ulp of 1 / s and q0 within one ulp of y / s, RN(q0 + RN(y - s q0) rcp) is
 * RN(y / s); y - s q0 is exact in an FMA), for any normal finite s > 0 whose reciprocal is normal: 3 instructions
 * instead of the division's subroutine. */
__device__ __forceinline__ float div_rn(float y, float s, float rcp) {
    const float q0 = y * rcp;
    return fmaf(fmaf(-q0, s, y), rcp, q0);
}

/* 2^x with the SFU (ex2.approx.ftz: max relative error 2^-22; 2^-inf = +0) */
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

#endif
