/* wgmma_ptx.cuh: the warpgroup-MMA (wgmma) synchronization wrappers shared by the Hopper kernels
 * (attention_wgmma.cu, attention_wgmma_fp8.cu, patch_embed.cu, gemm_sm90.cu), the m64n128 MMA of the GEMM kernels
 * (patch_embed.cu, gemm_sm90.cu; k16 for F16/BF16, k32 for E4M3; also m64n96 for E4M3), and the shared-memory
 * matrix descriptor (PTX ISA, "Matrix Descriptor Format" of wgmma: start address >> 4 in bits 0-13, leading byte
 * offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, layout in 62-63: 1 = 128-byte swizzle, 2 = 64-byte,
 * 3 = 32-byte). Header-only, CUDA C.
 * wgmma exists only in the sm_90a pass; every other pass (the host pass parses device code too) gets empty
 * synchronization bodies, and the files that include this one trap in their MMA wrappers there. */
#ifndef TP_WGMMA_PTX_CUH
#define TP_WGMMA_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_HAVE_WGMMA 1
#else
#define WG_HAVE_WGMMA 0
#endif

/* K-major operand descriptor: `layout` 1 (128-byte swizzle) or 2 (64-byte), stride byte offset `sbo` (the bytes
 * between consecutive groups of 8 rows), leading byte offset unused (the k extent of one wgmma stays inside one
 * swizzle row) and set to 16 bytes. */
__device__ __forceinline__ uint64_t wg_make_desc(uint32_t saddr, uint32_t sbo, uint32_t layout) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(sbo >> 4) << 32) |
           ((uint64_t)layout << 62);
}

#if WG_HAVE_WGMMA
__device__ __forceinline__ void wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0(void) { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait1(void) { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
#else
__device__ __forceinline__ void wg_fence(void) {}
__device__ __forceinline__ void wg_commit(void) {}
__device__ __forceinline__ void wg_wait0(void) {}
__device__ __forceinline__ void wg_wait1(void) {}
#endif

/* keeps the compiler from moving register reads/writes of an accumulator across an asynchronous wgmma */
__device__ __forceinline__ void wg_reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }
template <int N> __device__ __forceinline__ void wg_fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) wg_reg_fence(r[i]);
}

/* D (64 x 128 fp32: 64 registers per thread in the mma C layout) = or += A (64 x 16) * B (16 x 128), both from
 * shared memory, K-major (descriptors da, db); acc = 0 overwrites D. The GEMM kernels' shape (patch_embed.cu,
 * gemm_sm90.cu). */
#if WG_HAVE_WGMMA
__device__ __forceinline__ void wg_ss_n128_h(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_ss_n128_b(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc));
}
/* the same for E4M3 operands: k32 per instruction (32 bytes of K, as k16 of a 16-bit type); FP8 wgmma has no
 * transpose immediates (K-major only) */
__device__ __forceinline__ void wg_ss_n128_e4(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc));
}
/* E4M3, N = 96 (48 registers per thread): gemm_sm90.cu's 128 x 96 tiles */
__device__ __forceinline__ void wg_ss_n96_e4(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                 : "l"(da), "l"(db), "r"(acc));
}
#else
__device__ __forceinline__ void wg_ss_n128_h(float *, uint64_t, uint64_t, int) { __trap(); }
__device__ __forceinline__ void wg_ss_n128_b(float *, uint64_t, uint64_t, int) { __trap(); }
__device__ __forceinline__ void wg_ss_n128_e4(float *, uint64_t, uint64_t, int) { __trap(); }
__device__ __forceinline__ void wg_ss_n96_e4(float *, uint64_t, uint64_t, int) { __trap(); }
#endif
/* the same chosen by the element type (a tag value of __half, __nv_bfloat16 or __nv_fp8_e4m3), for kernels templated
 * on it */
__device__ __forceinline__ void wg_ss_n128(float *d, uint64_t da, uint64_t db, int acc, __half) {
    wg_ss_n128_h(d, da, db, acc);
}
__device__ __forceinline__ void wg_ss_n128(float *d, uint64_t da, uint64_t db, int acc, __nv_bfloat16) {
    wg_ss_n128_b(d, da, db, acc);
}
__device__ __forceinline__ void wg_ss_n128(float *d, uint64_t da, uint64_t db, int acc, __nv_fp8_e4m3) {
    wg_ss_n128_e4(d, da, db, acc);
}

#endif
