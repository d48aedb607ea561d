/* attention_wgmma_impl.cuh: fused multi-head attention with Hopper's warpgroup MMA (wgmma), contract in
 * attention_wgmma.h: the kernels, their launches and the argument checks, included by attention_wgmma.cu (the
 * product: the default configuration) and by bench/attention_wgmma_variants.cu (tpk_flash_attention_wgmma_variant:
 * every configuration). Built for sm_90a only (CMakeLists.txt compiles both with that target alone, in the
 * tprof_sm90a and tprof_lab_variants_sm90a object libraries: wgmma exists on no other architecture); on any other
 * device the entry points refuse without launching.
 *
 * Work decomposition. One CTA per (batch b, head h): 2 warpgroups (256 threads). The whole head's K and V (T <=
 * TPK_WGMMA_MAX_T keys) and all its query tiles of 64 rows are copied once into shared memory with cp.async, so K
 * and V come from DRAM/L2 once per head (the FA2 kernel reads them once per 64-row query tile). Warpgroup w then
 * takes query tiles w, w + 2, ...; for each it walks the keys in chunks of 64 (the last chunk rounded up to 16):
 *   S (64 x N) = Q K^T      wgmma m64nNk16, A (Q) and B (K) from shared memory, K-major, fp32 accumulators;
 *   online softmax in fp32  the S fragment is mma.sync's C layout per warp (16 rows per warp, each thread 2 rows);
 *                           row max and sum over the quad; scores scaled by scale * log2(e) and exp2 on the SFU;
 *   O (64 x 64) += P V      wgmma m64n64k16 with A = P straight from the S registers (the C layout of two adjacent
 *                           n8 blocks is the A layout of one k16 step, as in FA2), rounded to the input type, and
 *                           B = V from shared memory, MN-major (V is [key][d], d contiguous: the transposed-B mode
 *                           that wgmma offers for 16-bit types).
 * P V of one chunk is left running while the next chunk's Q K^T is issued; the two warpgroups of a CTA and the two
 * CTAs an SM holds (96 KB of shared memory each at T = 197) overlap one's softmax with the others' tensor work.
 *
 * Shared-memory layout: every tile is rows of 64 elements = 128 bytes in the 128-byte swizzle the wgmma
 * descriptors name (16-byte chunk c of row r stored at chunk c ^ (r % 8); tiles 1024-byte aligned), written that
 * way by cp.async. Descriptors (PTX ISA, "Matrix Descriptor Format" of wgmma, and the canonical layouts of
 * CUTLASS's cute/atom/mma_traits_sm90_gmma.hpp): start address >> 4; for K-major operands (Q, K) the stride byte
 * offset is 1024 (8 rows of 128 bytes) and the leading offset is unused; a k16 step moves the start by 32 bytes
 * inside the swizzled row. For the MN-major V the stride byte offset (8 keys of 128 bytes) is 1024 too and a k16
 * step moves the start by 16 rows = 2048 bytes; the leading offset (the next 64 columns) is unused at D = 64.
 *
 * Ragged T: query and key rows >= T are zero-filled by cp.async (src-size 0), never read. Keys >= T in the last
 * chunk get probability 0; the chunk is computed only up to the next multiple of 16 (T = 197: 3 x 64 + 16 keys,
 * not 4 x 64). Query rows >= T are computed (a warpgroup multiplies 64 rows at a time) but not stored.
 *
 * Numerics as tpk_flash_attention (attention.h): fp32 accumulation and softmax statistics, P rounded to the input
 * type for P V while the row sums use the unrounded fp32 values, one rounding of O / l on store (F16/BF16 RNE;
 * E4M3 q = sat_e4m3(rne(y / *out_scale)) with the IEEE quotient). */
#ifndef TP_ATTENTION_WGMMA_IMPL_CUH
#define TP_ATTENTION_WGMMA_IMPL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "exec/cuda/attention/attention_wgmma.h"
#include "exec/cuda/ptx/attention_ptx.cuh"
#include "exec/cuda/ptx/wgmma_ptx.cuh"

typedef __nv_fp8_e4m3 e4m3_t; /* storage tag only */

#define TPK_INVALID ((int)cudaErrorInvalidValue)
#define WG_D 64          /* head dim of this kernel: one 128-byte swizzle atom per row */
#define WG_ROWB 128      /* bytes per shared-memory row */
#define WG_QTILE 8192    /* one 64-row query tile */
#define WG_THREADS 256   /* 2 warpgroups */


/* ---- PTX wrappers ---------------------------------------------------------------------------------------------- */

/* wgmma shared-memory descriptor, 128-byte swizzle, stride byte offset 1024 (8 rows of 128 bytes) */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) { return wg_make_desc(saddr, 1024, 1); }

/* Generated (one per shape and type): D (64 x N fp32, per thread N / 2 registers in the mma C layout) = or +=
 * A (64 x 16, descriptor da) * B (16 x N, descriptor db), both K-major ("ss"); and the register-A form
 * D (64 x 64) += A (registers, mma A layout) * B (16 x 64, MN-major: trans-b = 1) ("rs"). */
#if WG_HAVE_WGMMA
__device__ __forceinline__ void wg_ss_n16_h(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_ss_n32_h(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_ss_n48_h(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %26, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, %24, %25, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_ss_n64_h(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_rs_n64_h(float *d, const uint32_t *a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
__device__ __forceinline__ void wg_ss_n16_b(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_ss_n32_b(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_ss_n48_b(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %26, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, %24, %25, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_ss_n64_b(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_rs_n64_b(float *d, const uint32_t *a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
#else
/* The host compilation pass parses the device code too, without wgmma: these bodies let it, and trap if ever run
 * (they cannot be: the only device pass is sm_90a, and the entry points refuse other devices). */
#define WG_NO_WGMMA_SS(n, t) \
    __device__ __forceinline__ void wg_ss_n##n##_##t(float *, uint64_t, uint64_t, int) { __trap(); }
WG_NO_WGMMA_SS(16, h) WG_NO_WGMMA_SS(32, h) WG_NO_WGMMA_SS(48, h) WG_NO_WGMMA_SS(64, h)
WG_NO_WGMMA_SS(16, b) WG_NO_WGMMA_SS(32, b) WG_NO_WGMMA_SS(48, b) WG_NO_WGMMA_SS(64, b)
__device__ __forceinline__ void wg_rs_n64_h(float *, const uint32_t *, uint64_t) { __trap(); }
__device__ __forceinline__ void wg_rs_n64_b(float *, const uint32_t *, uint64_t) { __trap(); }
#endif

template <int N> __device__ __forceinline__ void wg_ss(float *d, uint64_t da, uint64_t db, int acc, __half) {
    if constexpr (N == 16) wg_ss_n16_h(d, da, db, acc);
    else if constexpr (N == 32) wg_ss_n32_h(d, da, db, acc);
    else if constexpr (N == 48) wg_ss_n48_h(d, da, db, acc);
    else wg_ss_n64_h(d, da, db, acc);
}
template <int N> __device__ __forceinline__ void wg_ss(float *d, uint64_t da, uint64_t db, int acc, __nv_bfloat16) {
    if constexpr (N == 16) wg_ss_n16_b(d, da, db, acc);
    else if constexpr (N == 32) wg_ss_n32_b(d, da, db, acc);
    else if constexpr (N == 48) wg_ss_n48_b(d, da, db, acc);
    else wg_ss_n64_b(d, da, db, acc);
}
__device__ __forceinline__ void wg_rs(float *d, const uint32_t *a, uint64_t db, __half) { wg_rs_n64_h(d, a, db); }
__device__ __forceinline__ void wg_rs(float *d, const uint32_t *a, uint64_t db, __nv_bfloat16) {
    wg_rs_n64_b(d, a, db);
}

/* an E4M3 output's scale and its reciprocal (s, RN(1 / s)), read once per thread; (1, 1) for other outputs */
template <typename TO> __device__ __forceinline__ float2 wg_out_scale(const float *p) {
    if (sizeof(TO) != 1) return make_float2(1.0f, 1.0f);
    const float s = *p;
    return make_float2(s, __frcp_rn(s));
}

/* Two adjacent outputs (columns c, c + 1 of staging row `row`) into the 128-byte-swizzled staging tile. */
__device__ __forceinline__ void wg_st2(unsigned char *st, int row, int col, float a, float b, float2, __half) {
    *reinterpret_cast<__half2 *>(st + row * WG_ROWB + ((((col >> 3) ^ (row & 7))) << 4) + (col & 7) * 2) =
        __floats2half2_rn(a, b);
}
__device__ __forceinline__ void wg_st2(unsigned char *st, int row, int col, float a, float b, float2,
                                       __nv_bfloat16) {
    *reinterpret_cast<__nv_bfloat162 *>(st + row * WG_ROWB + ((((col >> 3) ^ (row & 7))) << 4) + (col & 7) * 2) =
        __floats2bfloat162_rn(a, b);
}
/* E4M3: q = sat(rne(y / s)), y / s the IEEE quotient (kernels.cu's convention), saturating to +-448; sr = (s, RN(1 /
 * s)): div_rn's 3 instructions instead of __fdiv_rn's subroutine (32 per thread and query tile: with it the FP8
 * engines' attention took 51.8 us per ViT-B layer at batch 64 on an H200 against 44.0 with an F16 output) */
__device__ __forceinline__ void wg_st2(unsigned char *st, int row, int col, float a, float b, float2 sr, e4m3_t) {
    const uint16_t lo = __nv_cvt_float_to_fp8(div_rn(a, sr.x, sr.y), __NV_SATFINITE, __NV_E4M3);
    const uint16_t hi = __nv_cvt_float_to_fp8(div_rn(b, sr.x, sr.y), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint16_t *>(st + row * WG_ROWB + ((((col >> 4) ^ (row & 7))) << 4) + (col & 15)) =
        (uint16_t)(lo | (hi << 8));
}

/* ================================================================================================================
 * One chunk of N keys (the first at key0) for one warpgroup's 64 query rows: S = Q K^T (4 k16 steps over D = 64),
 * online softmax, then O += P V issued and left running (the caller's next wgmma wait covers it).
 * Each thread holds rows r0 = 16 warp + lane / 4 (s[4j], s[4j + 1]) and r0 + 8 (s[4j + 2], s[4j + 3]) at columns
 * 8j + 2 (lane % 4) + {0, 1}. MASK: keys >= T get probability 0 (the last chunk).
 * Softmax in the log2 domain: sl2 = scale * log2 e (NEG: sl2 < 0), m = running row max of s * sl2,
 * p = 2^(s * sl2 - m); l accumulates per thread and is reduced over the quad once, at the end.
 * ============================================================================================================== */
template <typename TI, int N>
__device__ __forceinline__ void wg_issue_s(float (&s)[N / 2], uint64_t qd, uint64_t kd) {
    const TI tag = TI();
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < WG_D / 16; kk++) wg_ss<N>(s, qd + 2 * kk, kd + 2 * kk, kk, tag); /* +32 bytes per step */
    wg_commit();
}

/* Softmax of a computed S chunk (its wgmma complete) and O += P V issued (not waited for). */
/* The softmax step of one chunk on registers only (the caller fences them against the wgmma's): updates m, l,
 * rescales o, and leaves P in a[] as the A fragments of P V. */
template <typename TI, int N, bool MASK, bool NEG>
__device__ __forceinline__ void wg_softmax(float (&o)[32], float (&m)[2], float (&l)[2], float (&s)[N / 2],
                                           uint32_t (&a)[N / 16][4], int key0, int T, float sl2, float asl2,
                                           int lane) {
    const TI tag = TI();
    /* row max of v = +-s (NEG: scale < 0, so the largest scaled score is the smallest raw one): FMNMX takes the
     * negation for free, and p = 2^(s sl2 - m) is then one FFMA and one MUFU per score */
    const int c0 = key0 + 2 * (lane & 3);
    float pm[2][4]; /* 4 independent partial maxima per row: a tree, not one 16-long dependency chain */
#pragma unroll
    for (int k = 0; k < 4; k++) pm[0][k] = pm[1][k] = -INFINITY;
#pragma unroll
    for (int j = 0; j < N / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float a = NEG ? -s[4 * j + e] : s[4 * j + e], c = NEG ? -s[4 * j + 2 + e] : s[4 * j + 2 + e];
            if (MASK && c0 + 8 * j + e >= T) a = c = -INFINITY;
            pm[0][(2 * j + e) & 3] = fmaxf(pm[0][(2 * j + e) & 3], a);
            pm[1][(2 * j + e) & 3] = fmaxf(pm[1][(2 * j + e) & 3], c);
        }
    float mx[2] = {fmaxf(fmaxf(pm[0][0], pm[0][1]), fmaxf(pm[0][2], pm[0][3])),
                   fmaxf(fmaxf(pm[1][0], pm[1][1]), fmaxf(pm[1][2], pm[1][3]))};
    float al[2], rs[2] = {0.0f, 0.0f}, nm[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        /* finite: every chunk holds a key < T; asl2 = |sl2| */
        const float mn = fmaxf(m[r], mx[r] * asl2);
        al[r] = fast_exp2(m[r] - mn); /* 0 on the first chunk (m = -inf) */
        m[r] = mn;
        nm[r] = -mn;
    }
#pragma unroll
    for (int j = 0; j < N / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float a = fast_exp2(fmaf(s[4 * j + e], sl2, nm[0])), c = fast_exp2(fmaf(s[4 * j + 2 + e], sl2, nm[1]));
            if (MASK && c0 + 8 * j + e >= T) a = c = 0.0f; /* also right for scale 0, where s sl2 - m is not -inf */
            s[4 * j + e] = a;
            s[4 * j + 2 + e] = c;
            rs[0] += a;
            rs[1] += c;
        }
    l[0] = l[0] * al[0] + rs[0];
    l[1] = l[1] * al[1] + rs[1];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        o[4 * j] *= al[0];
        o[4 * j + 1] *= al[0];
        o[4 * j + 2] *= al[1];
        o[4 * j + 3] *= al[1];
    }
#pragma unroll
    for (int k = 0; k < N / 16; k++) {
        a[k][0] = pack2(s[8 * k + 0], s[8 * k + 1], tag);
        a[k][1] = pack2(s[8 * k + 2], s[8 * k + 3], tag);
        a[k][2] = pack2(s[8 * k + 4], s[8 * k + 5], tag);
        a[k][3] = pack2(s[8 * k + 6], s[8 * k + 7], tag);
    }
}

/* O += P V for one chunk (N keys, V's descriptor vd), issued without a commit. */
template <typename TI, int N>
__device__ __forceinline__ void wg_issue_pv(float (&o)[32], const uint32_t (&a)[N / 16][4], uint64_t vd) {
    const TI tag = TI();
#pragma unroll
    for (int k = 0; k < N / 16; k++) wg_rs(o, a[k], vd + (uint64_t)((k * 16 * WG_ROWB) >> 4), tag);
}


/* Softmax of a computed S chunk (its wgmma complete) and O += P V issued (not waited for). */
template <typename TI, int N, bool MASK, bool NEG>
__device__ __forceinline__ void wg_softmax_pv(float (&o)[32], float (&m)[2], float (&l)[2], float (&s)[N / 2],
                                              uint64_t vd, int key0, int T, float sl2, float asl2, int lane) {
    wg_fence_regs(s);
    wg_fence_regs(o);
    uint32_t a[N / 16][4];
    wg_softmax<TI, N, MASK, NEG>(o, m, l, s, a, key0, T, sl2, asl2, lane);
    wg_fence_regs(o);
    wg_fence();
    wg_issue_pv<TI, N>(o, a, vd);
    wg_commit();
    wg_fence_regs(o);
}

/* Two query tiles of one warpgroup on one chunk at once (variant 8): both S issued as one group, both softmaxes
 * (independent instruction streams the scheduler can interleave: twice the instruction-level parallelism of a
 * warp), then both P V issued as one group. */
template <typename TI, int N, bool MASK, bool NEG>
__device__ __forceinline__ void wg_chunk2(float (&o0)[32], float (&o1)[32], float (&m0)[2], float (&m1)[2],
                                          float (&l0)[2], float (&l1)[2], uint64_t qd0, uint64_t qd1, uint64_t kd,
                                          uint64_t vd, int key0, int T, float sl2, float asl2, int lane) {
    const TI tag = TI();
    float s0[N / 2], s1[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) s0[i] = s1[i] = 0.0f;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < WG_D / 16; kk++) {
        wg_ss<N>(s0, qd0 + 2 * kk, kd + 2 * kk, kk, tag);
        wg_ss<N>(s1, qd1 + 2 * kk, kd + 2 * kk, kk, tag);
    }
    wg_commit();
    wg_wait0();
    wg_fence_regs(s0);
    wg_fence_regs(s1);
    wg_fence_regs(o0);
    wg_fence_regs(o1);
    uint32_t a0[N / 16][4], a1[N / 16][4];
    wg_softmax<TI, N, MASK, NEG>(o0, m0, l0, s0, a0, key0, T, sl2, asl2, lane);
    wg_softmax<TI, N, MASK, NEG>(o1, m1, l1, s1, a1, key0, T, sl2, asl2, lane);
    wg_fence_regs(o0);
    wg_fence_regs(o1);
    wg_fence();
    wg_issue_pv<TI, N>(o0, a0, vd);
    wg_issue_pv<TI, N>(o1, a1, vd);
    wg_commit();
    wg_fence_regs(o0);
    wg_fence_regs(o1);
}


/* One chunk, not overlapped: S issued and waited for (with the previous chunk's P V), softmax, P V issued. */
template <typename TI, int N, bool MASK, bool NEG>
__device__ __forceinline__ void wg_chunk(float (&o)[32], float (&m)[2], float (&l)[2], uint64_t qd, uint64_t kd,
                                         uint64_t vd, int key0, int T, float sl2, float asl2, int lane) {
    float s[N / 2];
    wg_issue_s<TI, N>(s, qd, kd);
    wg_wait0(); /* this S, and the previous chunk's P V */
    wg_softmax_pv<TI, N, MASK, NEG>(o, m, l, s, vd, key0, T, sl2, asl2, lane);
}

/* One full chunk j of the software-pipelined loop (FA3's intra-warpgroup overlap): S(j) was issued earlier into
 * cur; S(j + 1) is issued into nxt (when `more`) before waiting, so the tensor cores compute it while this
 * warpgroup does chunk j's softmax. wgmma.wait_group 1 leaves only the newest group (S(j + 1)) in flight: S(j) and
 * the P V of chunk j - 1 are complete. */
template <typename TI, bool NEG>
__device__ __forceinline__ void wg_chunk_pipe(float (&o)[32], float (&m)[2], float (&l)[2], float (&cur)[32],
                                              float (&nxt)[32], bool more, uint64_t qd, uint64_t kd_next,
                                              uint64_t vd, int key0, int T, float sl2, float asl2, int lane) {
    if (more) {
        wg_issue_s<TI, 64>(nxt, qd, kd_next);
        wg_wait1();
    } else {
        wg_wait0();
    }
    wg_softmax_pv<TI, 64, false, NEG>(o, m, l, cur, vd, key0, T, sl2, asl2, lane);
}

/* Waits until at most `pending` of this thread's cp.async groups are in flight (more than 7: waits for all but 7,
 * which is conservative), makes the landed data visible to the async proxy the tensor cores read through, and
 * synchronizes the CTA so every thread's chunks have landed. Called by every thread of the CTA the same number
 * of times. */
__device__ __forceinline__ void wg_chunk_ready(int pending) {
    switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
}

/* The end of a query tile: O / l rounded once, staged in this tile's own query rows (st: no wgmma reads them any
 * more), then written as 16-byte row chunks of out (B, T, H, 64); rows >= T are not written. */
template <typename TO>
__device__ __forceinline__ void wg_epilogue(float (&o)[32], float (&l)[2], unsigned char *st, int qt, int T, int H,
                                            int b, int h, TO *__restrict__ out, float2 osc, int warp, int lane) {
    const TO otag = TO();
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
    }
    const int r0 = warp * 16 + (lane >> 2), cb = 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        wg_st2(st, r0, 8 * j + cb, o[4 * j] * inv[0], o[4 * j + 1] * inv[0], osc, otag);
        wg_st2(st, r0 + 8, 8 * j + cb, o[4 * j + 2] * inv[1], o[4 * j + 3] * inv[1], osc, otag);
    }
    __syncwarp();
    constexpr int CPR = WG_D * (int)sizeof(TO) / 16; /* 16-byte chunks per output row */
#pragma unroll
    for (int i = 0; i < 16 * CPR / 32; i++) {
        const int idx = lane + 32 * i, row = warp * 16 + idx / CPR, c = idx % CPR, q = qt * 64 + row;
        if (q < T) {
            const uint4 v = *reinterpret_cast<const uint4 *>(st + row * WG_ROWB + ((c ^ (row & 7)) << 4));
            *reinterpret_cast<uint4 *>(reinterpret_cast<unsigned char *>(out) +
                                       (((size_t)b * T + q) * H + h) * WG_D * sizeof(TO) + c * 16) = v;
        }
    }
}

/* ================================================================================================================
 * One query tile of 64 rows (qt, the tile's index in the head) for one warpgroup: every key chunk, then the
 * epilogue. q_addr: the tile's Q in shared memory (also its output staging, `st`); kd0, vd0: descriptors of the
 * head's K and V. first: chunk j may still be landing (wg_chunk_ready before it; every warpgroup of the CTA must
 * then make the same calls). out: (B, T, H, 64) row-major; rows >= T are not written.
 * ============================================================================================================== */
template <typename TI, typename TO, bool NEG, bool PIPE>
__device__ __forceinline__ void wg_tile(uint32_t q_addr, unsigned char *st, uint64_t kd0, uint64_t vd0, int qt,
                                        bool first, int nch, int T, int H, int b, int h, TO *__restrict__ out,
                                        float sl2, float asl2, float2 osc, int warp, int lane) {
    const int nfull = T >> 6, rem = T & 63, ntail = (rem + 15) & ~15;
    const uint64_t qd = wg_desc(q_addr);
    float o[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = 0.0f;
    if (PIPE && !first) { /* the full chunks software-pipelined (all of K and V has landed) */
        constexpr uint64_t CH = (uint64_t)((64 * WG_ROWB) >> 4); /* one chunk in descriptor units */
        float sa[32], sb[32];
        if (nfull > 0) wg_issue_s<TI, 64>(sa, qd, kd0);
        for (int j = 0; j < nfull; j += 2) {
            wg_chunk_pipe<TI, NEG>(o, m, l, sa, sb, j + 1 < nfull, qd, kd0 + (j + 1) * CH, vd0 + j * CH, j * 64, T,
                                   sl2, asl2, lane);
            if (j + 1 < nfull)
                wg_chunk_pipe<TI, NEG>(o, m, l, sb, sa, j + 2 < nfull, qd, kd0 + (j + 2) * CH, vd0 + (j + 1) * CH,
                                       (j + 1) * 64, T, sl2, asl2, lane);
        }
    } else {
        for (int j = 0; j < nfull; j++) {
            if (first) wg_chunk_ready(nch - 1 - j);
            const uint64_t off = (uint64_t)((j * 64 * WG_ROWB) >> 4);
            wg_chunk<TI, 64, false, NEG>(o, m, l, qd, kd0 + off, vd0 + off, j * 64, T, sl2, asl2, lane);
        }
    }
    if (rem) {
        if (first) wg_chunk_ready(0);
        const uint64_t off = (uint64_t)((nfull * 64 * WG_ROWB) >> 4);
        const int k0 = nfull * 64;
        switch (ntail) {
        case 16: wg_chunk<TI, 16, true, NEG>(o, m, l, qd, kd0 + off, vd0 + off, k0, T, sl2, asl2, lane); break;
        case 32: wg_chunk<TI, 32, true, NEG>(o, m, l, qd, kd0 + off, vd0 + off, k0, T, sl2, asl2, lane); break;
        case 48: wg_chunk<TI, 48, true, NEG>(o, m, l, qd, kd0 + off, vd0 + off, k0, T, sl2, asl2, lane); break;
        default: wg_chunk<TI, 64, true, NEG>(o, m, l, qd, kd0 + off, vd0 + off, k0, T, sl2, asl2, lane); break;
        }
    }
    wg_wait0();
#pragma unroll
    for (int i = 0; i < 32; i++) wg_reg_fence(o[i]);

    wg_epilogue<TO>(o, l, st, qt, T, H, b, h, out, osc, warp, lane);
}

/* Two query tiles (qt, qt + 1) of one warpgroup at once, every chunk through wg_chunk2 (variant 8); all of K
 * and V has landed. */
template <typename TI, typename TO, bool NEG>
__device__ __forceinline__ void wg_tile2(uint32_t q_addr, unsigned char *st, uint64_t kd0, uint64_t vd0, int qt,
                                         int T, int H, int b, int h, TO *__restrict__ out, float sl2, float asl2,
                                         float2 osc, int warp, int lane) {
    const int nfull = T >> 6, rem = T & 63, ntail = (rem + 15) & ~15;
    const uint64_t qd0 = wg_desc(q_addr), qd1 = wg_desc(q_addr + WG_QTILE);
    float o0[32], o1[32], m0[2] = {-INFINITY, -INFINITY}, m1[2] = {-INFINITY, -INFINITY};
    float l0[2] = {0.0f, 0.0f}, l1[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 32; i++) o0[i] = o1[i] = 0.0f;
    for (int j = 0; j < nfull; j++) {
        const uint64_t off = (uint64_t)((j * 64 * WG_ROWB) >> 4);
        wg_chunk2<TI, 64, false, NEG>(o0, o1, m0, m1, l0, l1, qd0, qd1, kd0 + off, vd0 + off, j * 64, T, sl2, asl2,
                                      lane);
    }
    if (rem) {
        const uint64_t off = (uint64_t)((nfull * 64 * WG_ROWB) >> 4), kd = kd0 + off, vd = vd0 + off;
        const int k0 = nfull * 64;
        switch (ntail) {
        case 16: wg_chunk2<TI, 16, true, NEG>(o0, o1, m0, m1, l0, l1, qd0, qd1, kd, vd, k0, T, sl2, asl2, lane); break;
        case 32: wg_chunk2<TI, 32, true, NEG>(o0, o1, m0, m1, l0, l1, qd0, qd1, kd, vd, k0, T, sl2, asl2, lane); break;
        case 48: wg_chunk2<TI, 48, true, NEG>(o0, o1, m0, m1, l0, l1, qd0, qd1, kd, vd, k0, T, sl2, asl2, lane); break;
        default: wg_chunk2<TI, 64, true, NEG>(o0, o1, m0, m1, l0, l1, qd0, qd1, kd, vd, k0, T, sl2, asl2, lane); break;
        }
    }
    wg_wait0();
    wg_fence_regs(o0);
    wg_fence_regs(o1);
    wg_epilogue<TO>(o0, l0, st, qt, T, H, b, h, out, osc, warp, lane);
    wg_epilogue<TO>(o1, l1, st + WG_QTILE, qt + 1, T, H, b, h, out, osc, warp, lane);
}

/* Copies Q rows [q_lo * 64, q_hi * 64) and K, V rows [0, tpad) of head (b, h) into the swizzled tiles at
 * base (Q), base + k_off, base + v_off, all NT threads taking part; rows >= T zero-filled (never read). Commits
 * nothing: the caller groups. */
template <typename TI, int NT>
__device__ __forceinline__ void wg_load_head(uint32_t base, uint32_t k_off, uint32_t v_off, const TI *src, size_t rs,
                                             int H, int T, int tpad, int q_lo, int q_hi, int tid) {
    const int c = tid & 7;
    for (int r = tid >> 3; r < (q_hi - q_lo) * 64; r += NT / 8) {
        const int t = q_lo * 64 + r;
        const bool in = t < T;
        cp_async16(base + r * WG_ROWB + ((c ^ (r & 7)) << 4), src + (in ? (size_t)t * rs : 0) + c * 8, in ? 16 : 0);
    }
    for (int r = tid >> 3; r < tpad; r += NT / 8) {
        const bool in = r < T;
        const TI *p = src + (in ? (size_t)r * rs : 0) + c * 8;
        const uint32_t sw = r * WG_ROWB + ((c ^ (r & 7)) << 4);
        cp_async16(base + k_off + sw, p + (size_t)H * WG_D, in ? 16 : 0);
        cp_async16(base + v_off + sw, p + (size_t)2 * H * WG_D, in ? 16 : 0);
    }
}

/* ================================================================================================================
 * The kernel: grid B * H * nqg (b, h = blockIdx.x / nqg; query-tile group qg = blockIdx.x % nqg, so the CTAs of
 * one head are adjacent and share its K and V in L2), NWG * 128 threads, dynamic shared memory 1024 (alignment
 * slack) + qpc * WG_QTILE (the group's query tiles) + 2 * kv_bytes (K at k_off, V at v_off, tpad rows each).
 * The CTA's query tiles are qg * qpc ... min(nqt, (qg + 1) * qpc) - 1; warpgroup w takes every NWG-th of them.
 * MINB: CTAs per SM the register allocation must allow (__launch_bounds__). NEG: scale < 0.
 * ============================================================================================================== */
template <typename TI, typename TO, int NWG, int MINB, bool NEG, int MODE>
__global__ void __launch_bounds__(NWG * 128, MINB)
    wg_attention_kernel(const TI *__restrict__ qkv, TO *__restrict__ out, const float *__restrict__ out_scale, int T,
                        int H, float sl2, int nqt, int qpc, int nqg, int tpad, uint32_t k_off, uint32_t v_off) {
#if WG_HAVE_WGMMA
    constexpr int NT = NWG * 128;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u; /* the swizzle pattern repeats every 1024 bytes */
    unsigned char *sm = smem_raw + (base - raw);
    const int tid = threadIdx.x;
    const int bh = blockIdx.x / nqg, qg = blockIdx.x % nqg, b = bh / H, h = bh % H;
    const int q_lo = qg * qpc, q_hi = min(nqt, q_lo + qpc); /* query tiles of this CTA */
    const size_t rs = (size_t)3 * H * WG_D; /* elements per token row of qkv (B, T, 3, H, D) */
    const TI *src = qkv + (size_t)b * T * rs + (size_t)h * WG_D;

    /* every 16-byte chunk of the CTA's Q tiles and the head's K and V, swizzled; rows >= T zero-filled. One
     * cp.async group per 64-key chunk (the first also holds Q), so the first query tile's work on chunk j starts
     * as soon as chunk j has landed, while the later chunks are still in flight. */
    const int nch = (tpad + 63) >> 6;
    {
        const int c = tid & 7;
        for (int r = tid >> 3; r < (q_hi - q_lo) * 64; r += NT / 8) {
            const int t = q_lo * 64 + r;
            const bool in = t < T;
            cp_async16(base + r * WG_ROWB + ((c ^ (r & 7)) << 4), src + (in ? (size_t)t * rs : 0) + c * 8, in ? 16 : 0);
        }
        for (int j = 0; j < nch; j++) { /* K and V rows of chunk j: wg_load_head's loop, one group per chunk */
            const int r_end = min(tpad, 64 * (j + 1));
            for (int r = 64 * j + (tid >> 3); r < r_end; r += NT / 8) {
                const bool in = r < T;
                const TI *p = src + (in ? (size_t)r * rs : 0) + c * 8;
                const uint32_t sw = r * WG_ROWB + ((c ^ (r & 7)) << 4);
                cp_async16(base + k_off + sw, p + (size_t)H * WG_D, in ? 16 : 0);
                cp_async16(base + v_off + sw, p + (size_t)2 * H * WG_D, in ? 16 : 0);
            }
            asm volatile("cp.async.commit_group;\n" ::: "memory");
        }
    }

    const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const uint64_t kd0 = wg_desc(base + k_off), vd0 = wg_desc(base + v_off);
    const float2 osc = wg_out_scale<TO>(out_scale);
    const float asl2 = fabsf(sl2);
    if (MODE == 2 && NWG == 1 && q_hi - q_lo == 2) { /* both tiles at once, once everything has landed */
        wg_chunk_ready(0);
        wg_tile2<TI, TO, NEG>(base, sm, kd0, vd0, q_lo, T, H, b, h, out, sl2, asl2, osc, warp, lane);
        return;
    }
    if (q_lo + wg >= q_hi) /* no query tile here: still take part in the chunk barriers */
        for (int j = 0; j < nch; j++) wg_chunk_ready(nch - 1 - j);
    for (int qt = q_lo + wg; qt < q_hi; qt += NWG)
        wg_tile<TI, TO, NEG, MODE == 1>(base + (qt - q_lo) * WG_QTILE, sm + (qt - q_lo) * WG_QTILE, kd0, vd0, qt,
                             qt == q_lo + wg, nch, T, H, b, h, out, sl2, asl2, osc, warp, lane);
#else
    (void)qkv, (void)out, (void)out_scale, (void)T, (void)H, (void)sl2, (void)nqt, (void)qpc, (void)nqg, (void)tpad,
        (void)k_off, (void)v_off;
#endif
}

/* ================================================================================================================
 * Persistent variant: grid <= number of SMs, 2 warpgroups, one CTA per SM; CTA c handles heads c, c + grid, ...
 * (bh = b * H + h). Two buffers of buf_bytes (each: all query tiles of a head, its K and V at k_off, v_off): while
 * both warpgroups work on one head, the next head's copy is in flight into the other buffer, so memory and
 * compute overlap inside the SM instead of alternating between waves of CTAs.
 * ============================================================================================================== */
template <typename TI, typename TO, bool NEG, bool PIPE>
__global__ void __launch_bounds__(256, 1)
    wg_attention_persistent_kernel(const TI *__restrict__ qkv, TO *__restrict__ out,
                                   const float *__restrict__ out_scale, int T, int H, int nitems, float sl2, int nqt,
                                   int tpad, uint32_t k_off, uint32_t v_off, uint32_t buf_bytes) {
#if WG_HAVE_WGMMA
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char *sm = smem_raw + (base - raw);
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const size_t rs = (size_t)3 * H * WG_D;
    const float2 osc = wg_out_scale<TO>(out_scale);
    const float asl2 = fabsf(sl2);
    int item = blockIdx.x;
    if (item >= nitems) return;
    {
        const int b = item / H, h = item % H;
        wg_load_head<TI, 256>(base, k_off, v_off, qkv + (size_t)b * T * rs + (size_t)h * WG_D, rs, H, T, tpad, 0, nqt,
                              tid);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    for (int it = 0; item < nitems; item += gridDim.x, it++) {
        const uint32_t cur = base + (uint32_t)(it & 1) * buf_bytes;
        const int next = item + gridDim.x;
        if (next < nitems) { /* the other buffer was released by the barrier that ended the previous head */
            const int b = next / H, h = next % H;
            wg_load_head<TI, 256>(base + (uint32_t)((it + 1) & 1) * buf_bytes, k_off, v_off,
                                  qkv + (size_t)b * T * rs + (size_t)h * WG_D, rs, H, T, tpad, 0, nqt, tid);
            asm volatile("cp.async.commit_group;\ncp.async.wait_group 1;\n" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        const int b = item / H, h = item % H;
        const uint64_t kd0 = wg_desc(cur + k_off), vd0 = wg_desc(cur + v_off);
        for (int qt = wg; qt < nqt; qt += 2)
            wg_tile<TI, TO, NEG, PIPE>(cur + qt * WG_QTILE, sm + (cur - base) + qt * WG_QTILE, kd0, vd0, qt, false, 0, T,
                                 H, b, h, out, sl2, asl2, osc, warp, lane);
        __syncthreads(); /* this buffer is reloaded at the next iteration but one */
    }
#else
    (void)qkv, (void)out, (void)out_scale, (void)T, (void)H, (void)nitems, (void)sl2, (void)nqt, (void)tpad,
        (void)k_off, (void)v_off, (void)buf_bytes;
#endif
}

/* ---- host ----------------------------------------------------------------------------------------------------- */

/* Kernel configurations (tpk_flash_attention_wgmma_variant): warpgroups per CTA, CTAs per SM for the register
 * allocation, query tiles per CTA (0 = all of the head's). With 2 warpgroups and 2 CTAs per SM the registers are
 * capped at 128 a thread and ptxas serializes the wgmma's (warning C7512); 1 warpgroup and 3 CTAs per SM allow
 * 168, enough for asynchronous wgmma. */
typedef struct {
    int nwg, minb, qpc, persistent, pipe; /* pipe: 1 software-pipelined chunks, 2 two query tiles at once */
} wg_variant;
/* the default configuration (variant 0 of tpk_flash_attention_wgmma_variant, bench/lab_variants.h): one warpgroup
 * per 2 query tiles, 3 CTAs per SM; its kernel (wg_attention_kernel<TI, TO, 1, 3, NEG, 0>) is the only one the
 * product compiles */
#define WG_DEFAULT_NWG 1
#define WG_DEFAULT_MINB 3
#define WG_DEFAULT_QPC 2

typedef struct {
    int nqt, qpc, nqg, tpad;
    uint32_t k_off, v_off, buf; /* buf: one head's buffer (persistent variant) */
    size_t smem;
} wg_geom;

static wg_geom wg_geometry(int T, int qpc, int persistent) {
    wg_geom g;
    g.nqt = (T + 63) / 64;
    g.qpc = qpc > 0 && qpc < g.nqt ? qpc : g.nqt;
    g.nqg = (g.nqt + g.qpc - 1) / g.qpc;
    g.tpad = (T + 15) & ~15;
    const uint32_t kv = (uint32_t)(((size_t)g.tpad * WG_ROWB + 1023) & ~(size_t)1023);
    g.k_off = (uint32_t)g.qpc * WG_QTILE;
    g.v_off = g.k_off + kv;
    g.buf = g.v_off + kv;
    g.smem = 1024 + (size_t)g.buf * (persistent ? 2 : 1);
    return g;
}

/* 1 when the current device is compute capability 9.0 and `smem` bytes fit one CTA; 0 otherwise or on error */
static int wg_device_ok(size_t smem) {
    int dev = 0, major = 0, minor = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    return major == 9 && minor == 0 && smem <= (size_t)optin;
}

static int wg_shape_ok(tp_dtype in_dt, tp_dtype out_dt, int T, int D) {
    if (D != WG_D || T < 1 || (in_dt != TP_F16 && in_dt != TP_BF16)) return 0;
    return out_dt == TP_F16 || out_dt == TP_BF16 || out_dt == TP_E4M3;
}

template <typename TI, typename TO, int NWG, int MINB, bool NEG, int MODE>
static int wg_launch1(const void *qkv, void *out, const float *out_scale, int B, int T, int H, float sl2,
                      const wg_geom *g, tp_stream stream) {
    cudaError_t e = cudaFuncSetAttribute(wg_attention_kernel<TI, TO, NWG, MINB, NEG, MODE>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g->smem);
    if (e != cudaSuccess) return (int)e;
    wg_attention_kernel<TI, TO, NWG, MINB, NEG, MODE><<<(unsigned)((size_t)B * H * g->nqg), NWG * 128, g->smem,
                                                  (cudaStream_t)stream>>>((const TI *)qkv, (TO *)out, out_scale, T, H,
                                                                          sl2, g->nqt, g->qpc, g->nqg, g->tpad,
                                                                          g->k_off, g->v_off);
    return (int)cudaGetLastError();
}
template <typename TI, typename TO, bool NEG, bool PIPE>
static int wg_launch_persistent(const void *qkv, void *out, const float *out_scale, int B, int T, int H, float sl2,
                                const wg_geom *g, tp_stream stream) {
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(wg_attention_persistent_kernel<TI, TO, NEG, PIPE>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g->smem);
    if (e != cudaSuccess) return (int)e;
    const int nitems = B * H, grid = nitems < sms ? nitems : sms;
    wg_attention_persistent_kernel<TI, TO, NEG, PIPE><<<grid, 256, g->smem, (cudaStream_t)stream>>>(
        (const TI *)qkv, (TO *)out, out_scale, T, H, nitems, sl2, g->nqt, g->tpad, g->k_off, g->v_off, g->buf);
    return (int)cudaGetLastError();
}

template <typename TI, typename TO, int NWG, int MINB, int MODE>
static int wg_launch(const void *qkv, void *out, const float *out_scale, int B, int T, int H, float sl2,
                     const wg_geom *g, tp_stream stream) {
    return sl2 < 0.0f ? wg_launch1<TI, TO, NWG, MINB, true, MODE>(qkv, out, out_scale, B, T, H, sl2, g, stream)
                      : wg_launch1<TI, TO, NWG, MINB, false, MODE>(qkv, out, out_scale, B, T, H, sl2, g, stream);
}

/* The argument checks every configuration shares (qpc query tiles per CTA, persistent or not), in
 * tpk_flash_attention_wgmma_variant's order after its variant check: cudaErrorInvalidValue, cudaSuccess for empty
 * work (no launch), or WG_GO with the geometry in *g and Q K^T's log2-domain scale in *sl2. */
#define WG_GO (-1)
static inline int wg_prepare(const void *qkv, tp_dtype in_dt, const void *out, tp_dtype out_dt, const float *out_scale,
                             int B, int T, int H, int D, float scale, int qpc, int persistent, wg_geom *g, float *sl2) {
    if (B < 0 || T < 0 || H < 0) return TPK_INVALID;
    if (B == 0 || T == 0 || H == 0) return (int)cudaSuccess;
    *g = wg_geometry(T, qpc, persistent);
    if (!wg_shape_ok(in_dt, out_dt, T, D) || !wg_device_ok(g->smem)) return TPK_INVALID;
    if (!qkv || !out || ((uintptr_t)qkv & 15) || ((uintptr_t)out & 15)) return TPK_INVALID;
    if (out_dt == TP_E4M3 && !out_scale) return TPK_INVALID;
    if ((size_t)B * H * g->nqg > 0x7fffffffu) return TPK_INVALID;
    *sl2 = scale * 1.4426950408889634f;
    return WG_GO;
}

/* The product's kernel with qpc query tiles per CTA (the default has WG_DEFAULT_QPC): arguments, checks and errors
 * as tpk_flash_attention_wgmma, which is qpc WG_DEFAULT_QPC. Defined in attention_wgmma.cu, for
 * bench/attention_wgmma_variants.cu (variants 0, 3 and 4). */
int wg_flash_attention_qpc(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale, int B,
                           int T, int H, int D, float scale, int qpc, tp_stream stream);

#endif
