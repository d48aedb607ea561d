/* patch_embed_impl.cuh: the token embedding of a ViT as one GEMM kernel on Hopper's wgmma, contract in
 * patch_embed.h. The kernel and its launch, included by patch_embed.cu (the product: the default tile, variant 0)
 * and by bench/patch_embed_variants.cu (tpk_patch_embed_variant, bench/lab_variants.h: variant 1 too), both
 * built for sm_90a only (CMakeLists.txt: the tprof_sm90a and tprof_lab_variants_sm90a object libraries);
 * elsewhere the entry points refuse.
 *
 * GEMM: D (M = B Np, N = C) = A (M, K = 3 P^2) W^T, A the im2col of the image, never stored. CTA tile 128 x BN
 * (BN 128, variant 0, the default; 256, variant 1), 2 warpgroups (warpgroup g owns rows 64 g .. 64 g + 63, BN / 128
 * wgmma m64n128k16 per k16 step), K in steps of 64. Grid (ceil(C / BN), ceil(M / 128)): the N tiles of one row
 * tile are adjacent, so the image rows they all read come from L2 after the first.
 *
 * Operands in shared memory, two stages of 16 KB (A) + BN * 128 bytes (B), each row 64 elements = 128 bytes in the
 * 128-byte swizzle
 * the descriptors name (16-byte chunk c of row r at chunk c ^ (r % 8), as attention_wgmma.cu):
 *   A: thread t loads float4 q = t % 16 (k = k0 + 4q) of rows t / 16 + 16 i, i < 8, from the image with __ldg
 *      (a 64-wide K step is 64 / P rows of P pixels of one channel, so a float4 never straddles a pixel row when
 *      P % 4 == 0), rounds them to the 16-bit type and stores 8 bytes; the next step's loads are issued before
 *      this step's wgmma's and stored after them, so their latency hides behind the tensor work.
 *   B: the weight rows n0 .. n0 + 127, 16-byte cp.async chunks; rows >= C zero-filled.
 * Per step: wait for the copies, fence.proxy.async (generic-proxy stores, then the tensor cores' async-proxy reads)
 * and a barrier; issue 4 wgmma's on the stage; store the prefetched A into the other stage; wait; barrier (the
 * other warpgroup may still read the stage the next step's copies overwrite).
 *
 * Where the time goes (ViT-B/16, batch 64, H200: 88 us alone in bench/patch_embed_lab.c, 101 us in the engine,
 * against 149 us for im2col + cuBLASLt + embed_tokens): the 6 column tiles each read their row tile's fp32 image
 * (231 MB in all) and the 98 row tiles each read the weights (116 MB), 347 MB from L2 at about 3.5-4 TB/s, near
 * what L2 delivers to the SMs. A version with a 3-stage cp.async pipeline of the fp32 image and a shared-memory
 * cast (no registers staged, 1 CTA per SM) took 115 us in the engine; variant 1's 128 x 256 tiles (231 MB, 1 CTA
 * per SM) 93 us alone at batch 64 and 279 against 291 us at batch 256. Next: the image rows shared by a
 * cluster's CTAs (TMA multicast), so that each is read once.
 *
 * Epilogue from the accumulators (mma C layout: rows 16 warp + lane / 4 and + 8, columns 8 j + 2 (lane % 4) and
 * + 1): (acc + bias) + pos in fp32, one rounding, 4-byte stores to token row has_cls + p of image b. The CTAs of
 * the first row tile also write the class-token rows of every image for their columns. */
#ifndef TP_PATCH_EMBED_IMPL_CUH
#define TP_PATCH_EMBED_IMPL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "exec/cuda/ptx/attention_ptx.cuh"
#include "exec/cuda/kernels/patch_embed.h"
#include "exec/cuda/ptx/wgmma_ptx.cuh"

#define TPK_INVALID ((int)cudaErrorInvalidValue)
#define PE_BM 128
#define PE_BK 64 /* tpk_patch_embed_shape_ok's 64 */
#define PE_DEFAULT_VARIANT 0
#define PE_THREADS 256
#define PE_ROWS_PER_THREAD (PE_BM * PE_BK / 4 / PE_THREADS) /* float4 loads of A per thread per step: 8 */
#define PE_TILE_A (PE_BM * 128)
/* BN: the CTA's columns, 128 (variant 0: 2 CTAs per SM) or 256 (variant 1: the image read half as often, 1 CTA
 * per SM for its 128 accumulators per thread) */
#define PE_TILE_B(BN) ((BN) * 128)
#define PE_STAGE(BN) (PE_TILE_A + PE_TILE_B(BN))
#define PE_SMEM(BN) (1024 + 2 * PE_STAGE(BN)) /* 1024: slack to align the stages to the swizzle's 1024-byte period */
/* the CTA's columns of a variant (patch_embed.h): 128 for variant 0, 256 for variant 1 */
#define PE_BN(variant) ((variant) ? 256 : 128)

/* ---- type helpers ---------------------------------------------------------------------------------------------- */

__device__ __forceinline__ uint2 pe_pack4(float4 v, __half) {
    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    return make_uint2(*reinterpret_cast<uint32_t *>(&a), *reinterpret_cast<uint32_t *>(&b));
}
__device__ __forceinline__ uint2 pe_pack4(float4 v, __nv_bfloat16) {
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    return make_uint2(*reinterpret_cast<uint32_t *>(&a), *reinterpret_cast<uint32_t *>(&b));
}
__device__ __forceinline__ float pe_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float pe_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void pe_st2(__half *p, float a, float b) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void pe_st2(__nv_bfloat16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void pe_st1(__half *p, float a) { *p = __float2half_rn(a); }
__device__ __forceinline__ void pe_st1(__nv_bfloat16 *p, float a) { *p = __float2bfloat16_rn(a); }

/* ---- operand loads ----------------------------------------------------------------------------------------------- */

typedef struct {
    int H, W, P, PP, K;
} pe_geom;

/* This thread's 8 float4 of A for the K step at k0 (k = k0 + 4q): rows with rbase < 0 (past M) read as zeros. */
__device__ __forceinline__ void pe_load_a(float4 (&av)[PE_ROWS_PER_THREAD], const float *__restrict__ img,
                                          const int (&rbase)[PE_ROWS_PER_THREAD], int k, pe_geom g) {
    const int ch = k / g.PP, rem = k - ch * g.PP, ky = rem / g.P, kx = rem - ky * g.P;
    const int off = (ch * g.H + ky) * g.W + kx;
#pragma unroll
    for (int i = 0; i < PE_ROWS_PER_THREAD; i++)
        av[i] = rbase[i] >= 0 ? __ldg(reinterpret_cast<const float4 *>(img + rbase[i] + off))
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

template <typename TE>
__device__ __forceinline__ void pe_store_a(uint32_t sa, const float4 (&av)[PE_ROWS_PER_THREAD], int r0, int q) {
#pragma unroll
    for (int i = 0; i < PE_ROWS_PER_THREAD; i++) {
        const int r = r0 + 16 * i;
        const uint2 v = pe_pack4(av[i], TE());
        const uint32_t addr = sa + r * 128 + ((((q >> 1) ^ (r & 7)) << 4) | ((q & 1) << 3));
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr), "r"(v.x), "r"(v.y) : "memory");
    }
}

/* The weight rows n0 .. n0 + BN - 1, columns k0 .. k0 + 63, as BN * 8 16-byte chunks; no commit. */
template <typename TE, int BN>
__device__ __forceinline__ void pe_load_b(uint32_t sb, const TE *__restrict__ w, int n0, int C, int K, int k0,
                                          int tid) {
#pragma unroll
    for (int j = 0; j < BN * 8 / PE_THREADS; j++) {
        const int idx = j * PE_THREADS + tid, n = idx >> 3, c = idx & 7;
        const bool in = n0 + n < C;
        cp_async16(sb + n * 128 + ((c ^ (n & 7)) << 4), w + (size_t)(in ? n0 + n : 0) * K + k0 + c * 8, in ? 16 : 0);
    }
}

/* ---- the kernel ---------------------------------------------------------------------------------------------------- */

template <typename TE, int BN>
__global__ void __launch_bounds__(PE_THREADS, BN == 128 ? 2 : 1)
    patch_embed_kernel(const float *__restrict__ img, const TE *__restrict__ w, const TE *__restrict__ bias,
                       const TE *__restrict__ cls, const TE *__restrict__ pos, TE *__restrict__ x, int B, int H, int W,
                       int P, int C, int has_cls) {
#if WG_HAVE_WGMMA
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
    const pe_geom g = {H, W, P, P * P, 3 * P * P};
    const int gw = W / P, Np = (H / P) * gw, M = B * Np, T = Np + has_cls, KT = g.K / PE_BK;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * PE_BM, tid = threadIdx.x, q = tid & 15, r0 = tid >> 4;

    int rbase[PE_ROWS_PER_THREAD]; /* offset of each of this thread's A rows' patch corner in img, -1 past M */
#pragma unroll
    for (int i = 0; i < PE_ROWS_PER_THREAD; i++) {
        const int m = m0 + r0 + 16 * i;
        if (m < M) {
            const int b = m / Np, p = m - b * Np, py = p / gw, px = p - py * gw;
            rbase[i] = (b * 3 * H + py * P) * W + px * P;
        } else {
            rbase[i] = -1;
        }
    }

    float4 av[PE_ROWS_PER_THREAD];
    float acc[BN / 2]; /* BN / 128 blocks of 64 (one m64n128 accumulator each) */
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
    pe_load_a(av, img, rbase, 4 * q, g);
    pe_load_b<TE, BN>(base + PE_TILE_A, w, n0, C, g.K, 0, tid);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    pe_store_a<TE>(base, av, r0, q);

    const int wg = tid >> 7;
    for (int kt = 0; kt < KT; kt++) {
        const uint32_t cur = base + (kt & 1) * PE_STAGE(BN), nxt = base + ((kt + 1) & 1) * PE_STAGE(BN);
        const bool more = kt + 1 < KT;
        if (more) {
            pe_load_a(av, img, rbase, (kt + 1) * PE_BK + 4 * q, g);
            pe_load_b<TE, BN>(nxt + PE_TILE_A, w, n0, C, g.K, (kt + 1) * PE_BK, tid);
            asm volatile("cp.async.commit_group;\n" ::: "memory");
            asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        const uint64_t da = wg_make_desc(cur + wg * 64 * 128, 1024, 1), db = wg_make_desc(cur + PE_TILE_A, 1024, 1);
        wg_fence_regs(acc);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < PE_BK / 16; kk++) /* +32 bytes per k16 step; the next 128 columns 16 KB further */
#pragma unroll
            for (int h = 0; h < BN / 128; h++) wg_ss_n128(acc + 64 * h, da + 2 * kk, db + 1024 * h + 2 * kk, 1, TE());
        wg_commit();
        if (more) pe_store_a<TE>(nxt, av, r0, q);
        wg_wait0();
        wg_fence_regs(acc);
        __syncthreads();
    }

    /* epilogue: (acc + bias) + pos, one rounding, into the token rows */
    const int warp = (tid >> 5) & 3, lane = tid & 31;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = m0 + wg * 64 + warp * 16 + (lane >> 2) + 8 * h;
        if (m >= M) continue;
        const int b = m / Np, t = m - b * Np + has_cls;
        TE *xr = x + ((size_t)b * T + t) * C;
        const TE *pr = pos + (size_t)t * C;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            const int n = n0 + 8 * j + 2 * (lane & 3);
            if (n < C) { /* C % 8 == 0: n + 1 < C too */
                const float *aj = acc + 64 * (j / 16) + 4 * (j % 16) + 2 * h;
                float a0 = aj[0], a1 = aj[1];
                if (bias) a0 += pe_f(bias[n]), a1 += pe_f(bias[n + 1]);
                pe_st2(xr + n, a0 + pe_f(pr[n]), a1 + pe_f(pr[n + 1]));
            }
        }
    }
    if (has_cls && blockIdx.y == 0)
        for (int idx = tid; idx < B * BN; idx += PE_THREADS) {
            const int b = idx / BN, n = n0 + idx % BN;
            if (n < C) pe_st1(x + (size_t)b * T * C + n, pe_f(cls[n]) + pe_f(pos[n]));
        }
#else
    (void)img, (void)w, (void)bias, (void)cls, (void)pos, (void)x, (void)B, (void)H, (void)W, (void)P, (void)C,
        (void)has_cls;
#endif
}

/* ---- host ---------------------------------------------------------------------------------------------------------- */

template <typename TE, int BN>
static int pe_launch(const float *img, const void *w, const void *bias, const void *cls, const void *pos, void *x,
                     int B, int H, int W, int P, int C, int has_cls, cudaStream_t s) {
    cudaError_t e = cudaFuncSetAttribute(patch_embed_kernel<TE, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         PE_SMEM(BN));
    if (e != cudaSuccess) return (int)e;
    const long long M = (long long)B * (H / P) * (W / P);
    dim3 grid((unsigned)((C + BN - 1) / BN), (unsigned)((M + PE_BM - 1) / PE_BM));
    patch_embed_kernel<TE, BN><<<grid, PE_THREADS, PE_SMEM(BN), s>>>(
        img, (const TE *)w, (const TE *)bias, (const TE *)cls, (const TE *)pos, (TE *)x, B, H, W, P, C, has_cls);
    return (int)cudaGetLastError();
}

/* tpk_patch_embed_supported's test (patch_embed.h): the shape rules and compute capability 9.0 (the wgmma path is
 * built for sm_90a only). Here, beside the launch that needs it, so that the kernel's file does not call back into
 * patch_embed.cu. */
static inline int pe_supported(tp_dtype dt, int P, int C) {
    int dev = 0, major = 0, minor = 0;
    if (!tpk_patch_embed_shape_ok(dt, P, C)) return 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return 0;
    return major == 9 && minor == 0;
}

/* The checks and the launch of one tile width BN (PE_BN): tpk_patch_embed runs BN 128, bench/'s
 * tpk_patch_embed_variant 256 for variant 1. Errors as tpk_patch_embed (patch_embed.h). */
template <int BN>
static int pe_run(const float *img, const void *w, const void *bias, const void *cls, const void *pos, void *x,
                  tp_dtype dt, int B, int H, int W, int P, int C, int has_cls, tp_stream stream) {
    if (B < 0 || H <= 0 || W <= 0 || P <= 0 || H % P != 0 || W % P != 0 || (has_cls != 0 && has_cls != 1))
        return TPK_INVALID;
    if (!pe_supported(dt, P, C)) return TPK_INVALID;
    if (B == 0) return (int)cudaSuccess;
    if (!img || !w || !pos || !x || (has_cls && !cls)) return TPK_INVALID;
    if (((uintptr_t)img & 15) || ((uintptr_t)w & 15) || ((uintptr_t)x & 3)) return TPK_INVALID;
    if ((long long)B * 3 * H * W >= 0x7fffffffLL) return TPK_INVALID; /* 32-bit pixel offsets */
    if (dt == TP_F16) return pe_launch<__half, BN>(img, w, bias, cls, pos, x, B, H, W, P, C, has_cls, stream);
    return pe_launch<__nv_bfloat16, BN>(img, w, bias, cls, pos, x, B, H, W, P, C, has_cls, stream);
}

#endif
