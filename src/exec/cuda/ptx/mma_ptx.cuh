/* mma_ptx.cuh: the warp-level tensor-core product every mma.sync kernel of tprof uses (the decode GEMVs, gemv.cu; the
 * FA2 attention, attention_impl.cuh; the persistent decode kernel, persist.cu): c (16 x 8 fp32) += a (16 x 16, row)
 * b (16 x 8, col) with 16-bit inputs of type T (__half or __nv_bfloat16), mma.sync.m16n8k16. Register layout
 * (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane (g, t) = (lane / 4, lane % 4) holds a0 = A[g][2t, 2t+1],
 * a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]; b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g];
 * c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]. Header-only; CUDA C. */
#ifndef TP_MMA_PTX_CUH
#define TP_MMA_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

template <class T>
__device__ __forceinline__ void tpk_mma16816(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                             uint32_t b1);
template <>
__device__ __forceinline__ void tpk_mma16816<__half>(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                     uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void tpk_mma16816<__nv_bfloat16>(float *c, uint32_t a0, uint32_t a1, uint32_t a2,
                                                            uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

#endif
