/* wgmma_ptx.cuh: the warpgroup-MMA (wgmma) synchronization wrappers shared by the Hopper kernels
 * (attention_wgmma.cu, attention_wgmma_fp8.cu), and the shared-memory matrix descriptor (PTX ISA, "Matrix
 * Descriptor Format" of wgmma: start address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29, stride byte
 * offset >> 4 in 32-45, layout in 62-63: 1 = 128-byte swizzle, 2 = 64-byte, 3 = 32-byte). Header-only, CUDA C.
 * wgmma exists only in the sm_90a pass; every other pass (the host pass parses device code too) gets empty
 * synchronization bodies, and the files that include this one trap in their MMA wrappers there. */
#ifndef TP_WGMMA_PTX_CUH
#define TP_WGMMA_PTX_CUH

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

#endif
