/* persist.cu: the persistent decode kernel (persist.h; the design and its measurements in docs/persistent.md).
 *
 * One block per SM: 8 consumer warps run the block's queue in order; a producer warp (one lane) walks the same queue
 * and issues every GEMV tile, one TMA bulk copy (cp.async.bulk) of up to 64 KB a tile, into a ring of shared-memory
 * stages (two mbarriers each: the bytes landed, the consumers released it), with L2's evict-first policy (the
 * weights are read once a step; the activations and the KV cache should stay in L2). The producer waits for no
 * activation, so while the consumers wait at a dependency hop the next op's weights are already on their way.
 *
 * Dependencies (docs/persistent.md, "No deadlock"): consumer thread 0 spins on each wait's counter with acquire
 * loads, then the consumers' named barrier passes the ordering to the others; activations written in this launch
 * are read through L2 (ld.global.cg) so a stale L1 line can never be seen. After an instruction, the barrier orders
 * every consumer's stores before thread 0's fence and counter add (the pattern of a grid barrier's arrival). The
 * queues are subsequences of one topological order and every block is resident (tpk_persist_check), so every wait
 * ends.
 *
 * GEMV tiles run on the tensor cores (gemv_tile); attention pieces stage their keys with cp.async, the first block
 * before their wait (run_attn, attn_prefetch). Measured on an H200: the LM head streams at 4.7 TB/s, the layers lose
 * to their dependency hops (bench/results/2026-11-28_h200_issue42_persistent_step.log). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exec/cuda/kernels/act_types.cuh"
#include "exec/cuda/kernels/e4m3.cuh"
#include "exec/cuda/persistent/persist.h"
#include "exec/cuda/ptx/attention_ptx.cuh" /* smem_u32, cp_async16 */
#include "exec/cuda/ptx/mma_ptx.cuh"

/* cp.async.bulk, mbarrier transaction counts and L2 cache policies exist from sm_90 on: older targets of a build get a
 * kernel that traps (tpk_persist_check refuses them first) */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define PK_SM90 1
#else
#define PK_SM90 0
#endif

namespace {

constexpr int kThreads = TPK_PERSIST_THREADS, kWarps = kThreads / 32, kMaxStages = TPK_PERSIST_MAX_STAGES;
constexpr int kRing = TPK_PERSIST_RING, kXs = TPK_PERSIST_XS, kMaxM = TPK_PERSIST_MAX_M, kAcc = TPK_PERSIST_ACC;
static_assert(kMaxM <= kWarps, "the norm prologue gives each row of x a warp");
/* a tile's partial sums: [warp][row (32 at most: E4M3)][column m of the mma's B, a sequence] */
constexpr int kRed = kWarps * 32 * kMaxM;
constexpr int kEpi = 64; /* rows of an instruction whose bias and residual the prologue fetches */
constexpr int kXsFloats = kXs / 4;
static_assert(256 + 1024 + 512 + 16 + 8 * 256 <= kXsFloats - 4096, "the attention's scratch and its staging"); /* GEMV (row, slice) partial sums an instruction at most (the host caps rows at 32) */
constexpr float kLog2e = 1.44269504088896340736f;
template <class T> constexpr int kIsHalf = 0;
template <> constexpr int kIsHalf<__half> = 1;
constexpr unsigned kFull = 0xffffffffu;

/* ---- PTX: shared-memory addresses, mbarriers, bulk copies, acquire loads -------------------------------------- */

__device__ __forceinline__ void mbar_init(uint64_t *b) {
#if PK_SM90
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(b)) : "memory");
#endif
}
__device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t bytes) {
#if PK_SM90
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
#if PK_SM90
    asm volatile("{\n\t.reg .pred P1;\n\tLAB_WAIT:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
                 "@P1 bra DONE;\n\tbra LAB_WAIT;\n\tDONE:\n\t}\n" ::"r"(smem_u32(b)),
                 "r"(parity)
                 : "memory");
#endif
}
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar, uint64_t pol) {
#if PK_SM90
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, "
                 "[%3], %4;\n" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(pol)
                 : "memory");
#endif
}
/* a bulk prefetch of global memory into L2 (no shared memory, no barrier: nothing waits for it) */
__device__ __forceinline__ void bulk_prefetch_l2(const void *src, uint32_t bytes) {
#if PK_SM90
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
#endif
}
/* The consumer warps' barrier (named barrier 1; the producer warp never joins it). */
__device__ __forceinline__ void csync(void) { asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory"); }
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
#if PK_SM90
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
#endif
}
__device__ __forceinline__ unsigned long long globaltimer(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ int ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* ---- element pairs ----------------------------------------------------------------------------------------- */

template <class T> __device__ __forceinline__ float2 f2(uint32_t u);
template <> __device__ __forceinline__ float2 f2<__half>(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return __half22float2(h);
}
template <> __device__ __forceinline__ float2 f2<__nv_bfloat16>(uint32_t u) {
    __nv_bfloat162 h;
    memcpy(&h, &u, 4);
    return __bfloat1622float2(h);
}
template <class T> __device__ __forceinline__ float round_to(float v) {
    T t[1];
    st1(t, 0, v);
    return ld1(t, 0);
}
/* a 16-bit value written in this launch by another SM: through L2 */
template <class T> __device__ __forceinline__ float ldcg1(const T *p, size_t i) {
    const unsigned short u = __ldcg(reinterpret_cast<const unsigned short *>(p) + i);
    T t;
    memcpy(&t, &u, 2);
    return ld1(&t, 0);
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    return v;
}
/* the block's sum, returned to every thread (red: kWarps + 1 floats) */
__device__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) red[w] = v;
    csync();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int k = 0; k < kWarps; k++) s += red[k];
        red[kWarps] = s;
    }
    csync();
    const float s = red[kWarps];
    csync();
    return s;
}

/* ---- instructions ------------------------------------------------------------------------------------------ */

template <class T> __device__ void run_embed(const tpk_pcall *c) {
    T *y = (T *)c->y;
    for (int e = threadIdx.x; e < c->M * c->N; e += kThreads) {
        const int m = e / c->N, j = e - m * c->N;
        const float f = c->ids[m];
        const int ok = f >= 0.0f && f < (float)c->V && f == truncf(f) && (int)f < c->V;
        const T *row = (const T *)c->table + (size_t)(ok ? (int)f : 0) * c->N;
        st1(y, (size_t)e, ok ? ld1(row, j) * c->escale : __int_as_float(0x7fc00000));
    }
}

__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v);
/* W8A8: FP16 x values to e4m3(x / s), back in FP16 (exact: every E4M3 value is an FP16 value); e4m3.cuh's rounding,
 * as gemv.cu's W8A8 loads do it. A pair in a word, or one value. */
__device__ __forceinline__ uint32_t q8_pair(uint32_t x, float s) {
    __half2 h;
    memcpy(&h, &x, 4);
    const float2 f = __half22float2(h);
    return e4m3x2_to_f16x2(tpk_to_e4m3x2(f.x, f.y, s));
}
__device__ __forceinline__ float q8_one(float v, float s) {
    const uint32_t h = e4m3x2_to_f16x2(tpk_to_e4m3x2(v, 0.0f, s));
    return __half2float(__ushort_as_half((unsigned short)(h & 0xFFFFu)));
}

/* Chunk j of x (columns j kc .. + kw of its M rows) into xs, rows c->xp values apart; 16-byte copies through L2 (x
 * was written in this launch); with q (W8A8, FP16) each value rounded to E4M3 under *c->xsc on the way. */
template <class T> __device__ void load_x(const tpk_pcall *c, int j, T *xs, bool q) {
    const int K = c->K, k0 = j * c->kc, per = min(c->kc, K - k0) / 8, M = c->M, xp = c->xp;
    const T *x = (const T *)c->x;
    const float s = q ? __ldg(c->xsc) : 1.0f;
    for (int m = 0; m < M; m++)
        for (int i = threadIdx.x; i < per; i += kThreads) {
            uint4 v = __ldcg(reinterpret_cast<const uint4 *>(x + (size_t)m * K + k0) + i);
            if (kIsHalf<T> && q) v = make_uint4(q8_pair(v.x, s), q8_pair(v.y, s), q8_pair(v.z, s), q8_pair(v.w, s));
            reinterpret_cast<uint4 *>(xs + (size_t)m * xp)[i] = v;
        }
}

/* x's first chunk (or RMSNorm(x) row by row, rounded to T as tpk_rmsnorm's store) into xs; K % 8 == 0. One row and
 * at most kEpi rows of output (a plain or residual GEMV): their bias and residual into eb, er in the same round
 * trip (else the epilogue reads them). rs: kMaxM floats. */
template <class T, int MB> __device__ void gemv_prologue(const tpk_pcall *c, const tpk_pinstr &in, T *xs, float *red,
                                                         float *eb, float *er, float *rs) {
    const int K = c->K, n = in.f1 - in.f0, M = MB == 1 ? 1 : c->M;
    load_x<T>(c, 0, xs, c->xsc && !c->norm_w); /* W8A8 after a norm: rounded as the norm stores (below) */
    if (M == 1 && c->epi < TPK_PE_GLU_SILU && n <= kEpi)
        for (int j = threadIdx.x; j < n; j += kThreads) {
            eb[j] = c->bias ? ld1((const T *)c->bias, (size_t)in.f0 + j) : 0.0f;
            er[j] = c->epi == TPK_PE_RES ? ldcg1((const T *)c->res, (size_t)in.f0 + j) : 0.0f;
        }
    csync();
    if (!c->norm_w) return; /* the host's rule: a norm prologue has one chunk (kc = K) */
    /* rmsnorm_kernel's arithmetic: fp32 FMAs of the widened values (summed in another order), IEEE sqrt and
     * division, then (x r) (offset + w) rounded once; a row a warp when there are several */
    if constexpr (MB == 1) {
        float ss = 0.0f;
        for (int j = threadIdx.x; j < K; j += kThreads) {
            const float v = ld1(xs, j);
            ss = fmaf(v, v, ss);
        }
        const float r = 1.0f / sqrtf(block_sum(ss, red) / (float)K + c->eps); /* every thread's (block_sum) */
        const float off = c->norm_off;
        if (kIsHalf<T> && c->xsc) { /* W8A8: the FP16 norm output, then e4m3 of it (the graph path's two roundings) */
            const float s = __ldg(c->xsc);
            for (int j = threadIdx.x; j < K; j += kThreads) {
                const float w = c->norm_w32 ? ((const float *)c->norm_w)[j] : ld1((const T *)c->norm_w, j);
                st1(xs, j, q8_one(round_to<T>(ld1(xs, j) * r * (off + w)), s));
            }
        } else {
            for (int j = threadIdx.x; j < K; j += kThreads) {
                const float w = c->norm_w32 ? ((const float *)c->norm_w)[j] : ld1((const T *)c->norm_w, j);
                st1(xs, j, ld1(xs, j) * r * (off + w));
            }
        }
        csync();
        return;
    } else {
        const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (w < M) {
            float ss = 0.0f;
            for (int j = lane; j < K; j += 32) {
                const float v = ld1(xs + (size_t)w * c->xp, j);
                ss = fmaf(v, v, ss);
            }
            ss = warp_sum(ss);
            if (lane == 0) rs[w] = 1.0f / sqrtf(ss / (float)K + c->eps);
        }
    }
    csync();
    const int w32 = c->norm_w32, xp = c->xp, q = kIsHalf<T> && c->xsc;
    const void *nw = c->norm_w;
    const float off = c->norm_off, s = q ? __ldg(c->xsc) : 1.0f;
    for (int j = threadIdx.x; j < K; j += kThreads) {
        const float w = off + (w32 ? ((const float *)nw)[j] : ld1((const T *)nw, j));
        for (int m = 0; m < M; m++) {
            T *row = xs + (size_t)m * xp;
            const float v = ld1(row, j) * rs[m] * w;
            st1(row, j, q ? q8_one(round_to<T>(v), s) : v);
        }
    }
    csync();
}

/* One tile of a GEMV instruction: rows (GLU: output columns) [r0, r0 + nc) of K chunk j (kw columns) from the tile in
 * shared memory (row r at r c->pitch bytes) against the chunk of x in xs, and their epilogue (e0: the tile's first
 * row within the instruction, for eb, er and acc).
 *
 * On the tensor cores, as gemv.cu: mma.m16n8k16 multiplies 16 of the tile's rows by x, column m of B holding row m
 * of x (a sequence; columns past M hold zeros). The 16 k slots of an mma may stand for any 16 positions of K as long
 * as A and B agree: lane (g, t) takes K positions kb .. kb + 7, kb = 32 step + 8 t, of rows g and g + 8 (one 16-byte
 * load each, or 8 bytes of E4M3 codes widened to FP16 pairs by cvt.rn.f16x2.e4m3x2, exact) and of x's row g, which
 * are its A and B registers for two mma (slots 2t, 2t+1, 2t+8, 2t+9 = positions kb + 0..3, then kb + 4..7). No
 * conversion instruction for 16-bit weights at all (a CUDA-core dot product needs one cvt per value, and cvt runs at
 * a quarter of the FMA rate). E4M3 tiles hold up to 32 rows: two row halves, each its own accumulators. The 8 warps
 * split K; their sums per (row, sequence) meet in red. E4M3's scales (channel, tensor) multiply each row's sum
 * before the bias and residual, as tpk_gemv_fp8's epilogue does. With K in chunks the sums of every chunk but the
 * last wait in acc (the same thread owns a (row, sequence) in every chunk: no barrier, a fixed order). */
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v) {
    uint32_t r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"((unsigned short)(v & 0xFFFFu)));
    return r;
}
template <int W8>
__device__ __forceinline__ uint4 load_a(const unsigned char *row, int kb) {
    if constexpr (W8) {
        const uint2 w = *reinterpret_cast<const uint2 *>(row + kb);
        return make_uint4(e4m3x2_to_f16x2(w.x), e4m3x2_to_f16x2(w.x >> 16), e4m3x2_to_f16x2(w.y),
                          e4m3x2_to_f16x2(w.y >> 16));
    } else {
        return *reinterpret_cast<const uint4 *>(row + 2 * kb);
    }
}
/* row n's sum times its scales (E4M3: channel x tensor, then W8A8's x scale, in gemv.cu's order: gemv.h's scale_n);
 * 16-bit weights: the sum */
__device__ __forceinline__ float row_scaled(const tpk_pcall *c, size_t n, float v) {
    if (c->wfmt != TPK_PW_E4M3) return v;
    v *= (c->wcs ? __ldg(c->wcs + n) : 1.0f) * (c->wts ? __ldg(c->wts) : 1.0f);
    return c->xsc ? v * __ldg(c->xsc) : v;
}

template <class T, int W8, int MB>
__device__ void gemv_tile(const tpk_pcall *c, int r0, int nc, int e0, int j, const unsigned char *tile, const T *xs,
                          float *red, const float *eb, const float *er, float *acc, bool pre, uint64_t *empty) {
    constexpr int NH = W8 ? 2 : 1; /* 16-row halves */
    /* MB: the kernel's batch class, 1 (M a constant, one column of red a row) or TPK_PERSIST_MAX_M */
    constexpr int RS = MB == 1 ? 1 : kMaxM;
    const int glu = c->epi >= TPK_PE_GLU_SILU, rows = glu ? 2 * nc : nc, pitch = c->pitch, M = MB == 1 ? 1 : c->M;
    const int kw = min(c->kc, c->K - j * c->kc);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nsteps = (kw + 31) / 32, per = (nsteps + kWarps - 1) / kWarps;
    const int s0 = warp * per, s1 = min(nsteps, s0 + per);
    const T *xg = xs + (size_t)(g < M ? g : 0) * c->xp;
    /* four steps in flight: their loads first, then four independent accumulator chains a half (an mma's latency,
     * not its rate, bounds a chain) */
    float acc4[NH][4][4] = {};
    for (int st = s0; st < s1; st += 4) {
        uint4 a[NH][4], b[NH][4], x[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int kb = (st + u) * 32 + 8 * t;
            const bool in = st + u < s1 && kb < kw;
            x[u] = in && g < M ? *reinterpret_cast<const uint4 *>(xg + kb) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int h = 0; h < NH; h++) {
                const int ga = 16 * h + g, gb = ga + 8;
                a[h][u] = in && ga < rows ? load_a<W8>(tile + (size_t)ga * pitch, kb) : make_uint4(0, 0, 0, 0);
                b[h][u] = in && gb < rows ? load_a<W8>(tile + (size_t)gb * pitch, kb) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int h = 0; h < NH; h++) {
                tpk_mma16816<T>(acc4[h][u], a[h][u].x, b[h][u].x, a[h][u].y, b[h][u].y, x[u].x, x[u].y);
                tpk_mma16816<T>(acc4[h][u], a[h][u].z, b[h][u].z, a[h][u].w, b[h][u].w, x[u].z, x[u].w);
            }
    }
    /* C fragment: (row g, columns 2t, 2t + 1) and (row g + 8, the same columns) */
#pragma unroll
    for (int h = 0; h < NH; h++) {
#pragma unroll
        for (int u = 1; u < 4; u++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc4[h][0][q] += acc4[h][u][q];
        float *ra = red + (warp * 32 + 16 * h + g) * RS, *rb = ra + 8 * RS;
        if (2 * t < M) ra[2 * t] = acc4[h][0][0], rb[2 * t] = acc4[h][0][2];
        if (2 * t + 1 < M) ra[2 * t + 1] = acc4[h][0][1], rb[2 * t + 1] = acc4[h][0][3];
    }
    csync();
    /* every warp has its tile bytes in registers: the stage goes back to the producer before the epilogue, and the
     * next tile's sums go to the other half of red (run_gemv), so no second barrier is needed here */
    if (threadIdx.x == 0) mbar_arrive(empty);
    /* the record's fields once, in registers (the stores below might alias it as far as the compiler knows) */
    const T *bias = (const T *)c->bias;
    const int N = c->N, nk = c->nk, n_mem = c->n_mem, epi = c->epi;
    if (glu) {
        const int gate0 = c->gate0, up0 = c->up0;
        T *y = (T *)c->y;
        for (int e = threadIdx.x; e < nc * M; e += kThreads) {
            const int jj = M == 1 ? e : e / M, m = e - jj * M;
            float gs = 0.0f, us = 0.0f;
            for (int w = 0; w < kWarps; w++) gs += red[(w * 32 + jj) * RS + m], us += red[(w * 32 + nc + jj) * RS + m];
            if (W8) gs = row_scaled(c, (size_t)gate0 + r0 + jj, gs), us = row_scaled(c, (size_t)up0 + r0 + jj, us);
            if (bias) gs += ld1(bias, (size_t)gate0 + r0 + jj), us += ld1(bias, (size_t)up0 + r0 + jj);
            const float av = epi == TPK_PE_GLU_SILU ? tpk_glu_act<0>(gs) : tpk_glu_act<1>(gs);
            st1(y, (size_t)m * N + r0 + jj, av * us);
        }
        return;
    }
    const T *res = (const T *)c->res;
    void *y = c->y;
    const int y32 = c->y32;
    for (int e = threadIdx.x; e < nc * M; e += kThreads) {
        const int jj = M == 1 ? e : e / M, m = e - jj * M;
        float v = 0.0f;
        for (int w = 0; w < kWarps; w++) v += red[(w * 32 + jj) * RS + m];
        if (MB > 1 && nk > 1) { /* K in chunks: the sums wait for the last chunk */
            float *s = acc + (size_t)(e0 + jj) * M + m;
            if (j > 0) v += *s;
            if (j < nk - 1) {
                *s = v;
                continue;
            }
        }
        const size_t n = (size_t)r0 + jj;
        size_t o = (size_t)m * N + n;
        if (MB > 1 && n_mem > 1) { /* a group's member (M, N_j) after (M, N_0) ... (batch 1: o = n either way) */
            int k = 0, off = 0;
            while (k < n_mem - 1 && (int)n >= off + c->mem_n[k]) off += c->mem_n[k++];
            o = (size_t)M * off + (size_t)m * c->mem_n[k] + (n - off);
        }
        if (W8) v = row_scaled(c, n, v);
        if (pre) {
            if (bias) v += eb[e0 + jj];
            if (epi == TPK_PE_RES) v += er[e0 + jj];
        } else {
            if (bias) v += ld1(bias, n);
            if (epi == TPK_PE_RES) v += ldcg1(res, o);
        }
        if (y32) ((float *)y)[o] = v;
        else st1((T *)y, o, v);
    }
}

/* NV consecutive 16-bit values at p as floats */
template <class T, int NV> __device__ __forceinline__ void ldv(const T *p, float *f) {
    if constexpr (NV == 2) {
        const float2 a = f2<T>(*reinterpret_cast<const uint32_t *>(p));
        f[0] = a.x, f[1] = a.y;
    } else if constexpr (NV == 4) {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        const float2 a = f2<T>(u.x), b = f2<T>(u.y);
        f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
    } else {
        const uint4 u = *reinterpret_cast<const uint4 *>(p);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 a = f2<T>(w[j]);
            f[2 * j] = a.x, f[2 * j + 1] = a.y;
        }
    }
}

/* cp.async of cache rows k0 .. k0 + nk - 1 of sequence b's KV head kvh (K, then V) into the staging [K; V][CK][D],
 * the row at `past` left out (this step's new key and value come from the q/k/v GEMV); one commit group. */
template <class T, int D>
__device__ void attn_stage(const tpk_pcall *c, int b, int kvh, int k0, int nk, int past, T *stg) {
    constexpr int CK = 4096 / D, EPC = 8, CPR = D / EPC; /* 16-byte chunks a row */
    const size_t W = (size_t)c->Hkv * D;
    const T *kb = (const T *)c->cache + (size_t)b * c->L * W + (size_t)kvh * D, *vb = kb + (size_t)c->M * c->L * W;
    for (int e = threadIdx.x; e < 2 * nk * CPR; e += kThreads) {
        const int plane = e / (nk * CPR), rem = e - plane * nk * CPR, j = rem / CPR, part = rem - j * CPR;
        if (k0 + j == past) continue;
        cp_async16(smem_u32(stg + (plane * CK + j) * D + part * EPC),
                   (plane ? vb : kb) + (size_t)(k0 + j) * W + part * EPC, 16);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Before an attention piece waits for its q, k, v: its first sub-chunk of cached keys and values (written by earlier
 * steps, never by this one) is already on its way. */
template <class T, int D> __device__ void attn_prefetch(const tpk_pcall *c, const tpk_pinstr &in, int past, float *sc) {
    constexpr int CK = 4096 / D;
    const int per = c->n_rg * c->n_chunks, per_b = c->Hkv * per, b = in.f0 / per_b, f = in.f0 - b * per_b;
    const int kvh = f / per, ch = (f - kvh * per) % c->n_chunks;
    const int lo = ch * c->chunk, hi = min(lo + c->chunk, past + 1);
    if (lo < hi) attn_stage<T, D>(c, b, kvh, lo, min(CK, hi - lo), past, reinterpret_cast<T *>(sc + kXsFloats - 4096));
}

/* One attention piece (persist.h ATTN); returns what its signals add: n_chunks from the last piece of its (KV head,
 * row group), 0 from the others. */
template <class T, int D>
__device__ int run_attn(const tpk_pcall *c, const tpk_pinstr &in, int past, float *sc, int *counters, int *flag) {
    constexpr int NV = D / 32, H2 = D / 2, U = 4; /* keys a warp step */
    constexpr int CK = 4096 / D;                  /* keys a staged sub-chunk: K and V rows in 16 KB */
    const int per = c->n_rg * c->n_chunks, per_b = c->Hkv * per, b = in.f0 / per_b, f = in.f0 - b * per_b;
    const int kvh = f / per, rem = f - kvh * per, rg = rem / c->n_chunks, ch = rem - rg * c->n_chunks;
    const int lo = ch * c->chunk, hi = min(lo + c->chunk, past + 1), r0 = rg * c->rb, nr = min(c->rb, c->G - r0);
    const int W = c->Hkv * D, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *cs = sc, *sn = cs + H2, *Qs = sn + H2, *kn = Qs + TPK_PERSIST_RB * 128, /* rb D <= 1024 (the host's rule) */ *vn = kn + D, *Mw = vn + D,
          *Lw = Mw + kWarps, *Aw = Lw + kWarps;
    T *stg = reinterpret_cast<T *>(sc + kXsFloats - 4096); /* the last 16 KB: [K; V][CK][D] */
    const size_t slot0 = ((((size_t)b * c->Hkv + kvh) * c->n_rg + rg) * c->n_chunks) * c->rb;
    /* sequence b's rows of q, k, v, the output and its cache planes */
    const size_t qo = (size_t)b * c->H * D, ko = (size_t)b * W, co = (size_t)b * c->L * W, vplane = (size_t)c->M * c->L * W;
    float *ws = c->ws;
    if (lo <= past) { /* block-uniform */
        for (int i = threadIdx.x; i < H2; i += kThreads) {
            const float a = __fmul_rn((float)past, c->inv_freq[i]); /* rope_kernel's angle */
            sincosf(a, &sn[i], &cs[i]);
        }
        csync();
        const float qs = c->scale * kLog2e;
        const T *q = (const T *)c->q, *k = (const T *)c->k, *v = (const T *)c->v;
        for (int e = threadIdx.x; e < nr * H2; e += kThreads) {
            const int r = e / H2, i = e - r * H2;
            const size_t o = qo + ((size_t)kvh * c->G + r0 + r) * D + i;
            const float a = ldcg1(q, o), bb = ldcg1(q, o + H2);
            Qs[r * D + i] = round_to<T>(a * cs[i] - bb * sn[i]) * qs;
            Qs[r * D + i + H2] = round_to<T>(bb * cs[i] + a * sn[i]) * qs;
        }
        const bool has_new = past < lo + c->chunk;
        if (has_new) {
            T *kc = (T *)c->cache + co + (size_t)past * W + (size_t)kvh * D;
            T *vc = kc + vplane;
            for (int i = threadIdx.x; i < H2; i += kThreads) {
                const size_t o = ko + (size_t)kvh * D + i;
                const float a = ldcg1(k, o), bb = ldcg1(k, o + H2);
                kn[i] = round_to<T>(a * cs[i] - bb * sn[i]);
                kn[i + H2] = round_to<T>(bb * cs[i] + a * sn[i]);
                vn[i] = ldcg1(v, o), vn[i + H2] = ldcg1(v, o + H2);
                if (rg == 0) {
                    st1(kc, i, kn[i]), st1(kc, i + H2, kn[i + H2]);
                    st1(vc, i, vn[i]), st1(vc, i + H2, vn[i + H2]);
                }
            }
        }
        csync();
        /* keys staged in sub-chunks of CK rows of K and V (cp.async, one round trip each), the new key's row from
         * kn, vn; warps: row r = warp / S, keys s, s + S, ... of each sub-chunk */
        const int S = kWarps / nr, r = warp / S, s = warp - r * S;
        float m = -INFINITY, l = 0.0f, acc[NV], qv[NV];
#pragma unroll
        for (int j = 0; j < NV; j++) acc[j] = 0.0f, qv[j] = r < nr ? Qs[r * D + lane * NV + j] : 0.0f;
        for (int k0 = lo; k0 < hi; k0 += CK) {
            const int nk = min(CK, hi - k0);
            if (k0 > lo) attn_stage<T, D>(c, b, kvh, k0, nk, past, stg); /* the first was issued before the wait */
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
            if (past >= k0 && past < k0 + nk)
                for (int d = threadIdx.x; d < D; d += kThreads) {
                    st1(stg, (size_t)(past - k0) * D + d, kn[d]);
                    st1(stg, (size_t)(CK + past - k0) * D + d, vn[d]);
                }
            csync();
            if (r < nr) {
                for (int j0 = s; j0 < nk; j0 += U * S) {
                    float kf[U][NV], vf[U][NV], d[U];
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        const int j = min(j0 + u * S, nk - 1);
                        ldv<T, NV>(stg + (size_t)j * D + lane * NV, kf[u]);
                        ldv<T, NV>(stg + (size_t)(CK + j) * D + lane * NV, vf[u]);
                    }
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        float t = 0.0f;
#pragma unroll
                        for (int x = 0; x < NV; x++) t = fmaf(qv[x], kf[u][x], t);
                        d[u] = t;
                    }
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
                        for (int u = 0; u < U; u++) d[u] += __shfl_xor_sync(kFull, d[u], o);
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        if (j0 + u * S >= nk) break;
                        const float mx = fmaxf(m, d[u]), alpha = exp2f(m - mx), p = exp2f(d[u] - mx);
                        l = fmaf(l, alpha, p);
#pragma unroll
                        for (int x = 0; x < NV; x++) acc[x] = fmaf(acc[x], alpha, p * vf[u][x]);
                        m = mx;
                    }
                }
            }
            csync(); /* the staging is free for the next sub-chunk */
        }
        if (lane == 0) Mw[warp] = m, Lw[warp] = l;
#pragma unroll
        for (int j = 0; j < NV; j++) Aw[warp * D + lane * NV + j] = acc[j];
        csync();
        /* the warps of a row merged: this piece's (max, sum, unnormalized output) per row */
        for (int e = threadIdx.x; e < nr * D; e += kThreads) {
            const int rr = e / D, dd = e - rr * D;
            float M = -INFINITY, L = 0.0f, A = 0.0f;
            for (int t = 0; t < S; t++) M = fmaxf(M, Mw[rr * S + t]);
            for (int t = 0; t < S; t++) {
                const float wgt = Mw[rr * S + t] == -INFINITY ? 0.0f : exp2f(Mw[rr * S + t] - M);
                L = fmaf(wgt, Lw[rr * S + t], L);
                A = fmaf(wgt, Aw[(rr * S + t) * D + dd], A);
            }
            float *o = ws + (slot0 + (size_t)ch * c->rb + rr) * (D + 2);
            o[dd] = A;
            if (dd == 0) o[D] = M, o[D + 1] = L;
        }
    }
    csync();
    if (threadIdx.x == 0) {
        __threadfence();
        *flag = atomicAdd(counters + c->arrive + (b * c->Hkv + kvh) * c->n_rg + rg, 1) == c->n_chunks - 1;
    }
    csync();
    if (!*flag) return 0;
    __threadfence();
    /* the last piece: the chunks that hold visible keys merged, normalized, written */
    const int n_vis = min(c->n_chunks, past / c->chunk + 1);
    T *out = (T *)c->out;
    for (int e = threadIdx.x; e < nr * D; e += kThreads) {
        const int rr = e / D, dd = e - rr * D;
        /* one pass, an online merge (the loads of several chunks in flight at once: this merge sits on the
         * step's critical path, between the attention and o_proj) */
        float M = -INFINITY, L = 0.0f, A = 0.0f;
#pragma unroll 4
        for (int t = 0; t < n_vis; t++) {
            const float *o = ws + (slot0 + (size_t)t * c->rb + rr) * (D + 2);
            const float mt = __ldcg(o + D), lt = __ldcg(o + D + 1), at = __ldcg(o + dd);
            if (mt == -INFINITY) continue;
            const float mx = fmaxf(M, mt), sa = exp2f(M - mx), sb = exp2f(mt - mx);
            L = fmaf(L, sa, lt * sb);
            A = fmaf(A, sa, at * sb);
            M = mx;
        }
        st1(out, qo + ((size_t)kvh * c->G + r0 + rr) * D + dd, A / L);
    }
    return c->n_chunks;
}

/* The weight bytes of tile t of instruction `in` (chunk j = t / row blocks, row block t % row blocks): nrows rows of
 * row_bytes each, stride bytes apart in W, from src[0] (or a GLU tile's gate rows from src[0], then its up rows from
 * src[1]); runs: 1 or 2. */
struct tile_src {
    const unsigned char *src[2];
    int runs, nrows;
    uint32_t row_bytes;
    size_t stride;
};
template <class T, int MB> __device__ __forceinline__ tile_src tile_runs(const tpk_pcall *c, const tpk_pinstr &in, int t) {
    /* the batch-1 kernel runs no K chunks (the host's rule: tpk_pprog.max_m) */
    const int nrb = MB == 1 ? 1 : (in.f1 - in.f0 + c->tile_rows - 1) / c->tile_rows, j = MB == 1 ? 0 : t / nrb,
              rb = MB == 1 ? t : t - j * nrb;
    const int r0 = in.f0 + rb * c->tile_rows, k0 = j * c->kc;
    const size_t eb = c->wfmt == TPK_PW_E4M3 ? 1 : sizeof(T);
    const unsigned char *w = (const unsigned char *)c->w + (size_t)k0 * eb;
    tile_src r;
    r.nrows = min(in.f1, r0 + c->tile_rows) - r0;
    r.row_bytes = (uint32_t)((size_t)min(c->kc, c->K - k0) * eb);
    r.stride = (size_t)c->K * eb;
    if (c->epi >= TPK_PE_GLU_SILU) {
        r.src[0] = w + ((size_t)c->gate0 + r0) * r.stride, r.src[1] = w + ((size_t)c->up0 + r0) * r.stride;
        r.runs = 2;
    } else {
        r.src[0] = w + (size_t)r0 * r.stride, r.src[1] = NULL;
        r.runs = 1;
    }
    return r;
}

/* the producer: tile t of instruction `in` into stage buffer dst, one bulk copy a row (rows c->pitch bytes apart:
 * a GLU tile's gate rows, then its up rows), counted on bar */
template <class T, int MB>
__device__ void issue_tile(const tpk_pcall *c, const tpk_pinstr &in, int t, unsigned char *dst, uint64_t *bar,
                           uint64_t pol) {
    const tile_src r = tile_runs<T, MB>(c, in, t);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* the generic reads of this stage come first */
    mbar_expect(bar, (uint32_t)(r.runs * r.nrows) * r.row_bytes);
#pragma unroll
    for (int k = 0; k < 2; k++) /* unrolled: src[k] stays in registers */
        for (int i = 0; k < r.runs && i < r.nrows; i++)
            bulk_load(dst + (size_t)(k * r.nrows + i) * c->pitch, r.src[k] + (size_t)i * r.stride, r.row_bytes, bar,
                      pol);
}

/* A position in a block's queue of tiles (the producer's two cursors: the ring's, and the L2 prefetch's ahead). */
struct tile_cursor {
    int q, t;
};
/* the next GEMV tile at or after cur in [.., q1), or q == q1 */
__device__ __forceinline__ void next_tile(const tpk_pprog &p, tile_cursor &cur, int q1) {
    while (cur.q < q1 && cur.t >= p.instrs[p.queue[cur.q]].n_tiles) cur.q++, cur.t = 0;
}

/* The weight pipeline: one producer warp (lane 0) walks the block's queue and issues every GEMV tile in order into
 * stage n % stages once the consumers have released it (empty[s]); the consumers wait for full[s], compute, and
 * release. The producer never waits for activations, so tiles stream across instruction boundaries and dependency
 * waits, `stages` deep. */
struct pipe {
    unsigned char *stages;
    uint64_t *full, *empty;
    int nuse; /* tiles the consumers have taken */
};

template <class T, int MB> __device__ void produce(const tpk_pprog &p, const pipe &ld, int q0, int q1, uint64_t pol) {
    tile_cursor pf = {q0, 0}; /* the next tile to prefetch into L2 */
    int n = 0, n_pf = 0;      /* tiles issued into the ring, tiles prefetched */
    for (int q = q0; q < q1; q++) {
        const tpk_pinstr in = p.instrs[p.queue[q]];
        if (in.n_tiles == 0) continue;
        const tpk_pcall *c = &p.calls[in.call];
        for (int t = 0; t < in.n_tiles; t++, n++) {
            /* before it may wait for a free stage, the producer has tiles n .. n + l2_ahead - 1 prefetched into L2:
             * while the ring is full and its consumers wait at a dependency, the block's share of HBM keeps
             * streaming (a tile the ring has already issued is not prefetched) */
            for (next_tile(p, pf, q1); pf.q < q1 && n_pf < n + p.l2_ahead; next_tile(p, pf, q1)) {
                if (n_pf >= n) {
                    const tpk_pinstr &a = p.instrs[p.queue[pf.q]];
                    const tile_src r = tile_runs<T, MB>(&p.calls[a.call], a, pf.t);
#pragma unroll
                    for (int k = 0; k < 2; k++) {
                        if (k >= r.runs) break;
                        if (r.stride == r.row_bytes) /* whole rows: one run */
                            bulk_prefetch_l2(r.src[k], (uint32_t)r.nrows * r.row_bytes);
                        else
                            for (int i = 0; i < r.nrows; i++) bulk_prefetch_l2(r.src[k] + (size_t)i * r.stride, r.row_bytes);
                    }
                }
                pf.t++, n_pf++;
            }
            const int s = n % p.stages;
            mbar_wait(&ld.empty[s], (uint32_t)((n / p.stages) & 1) ^ 1u); /* a fresh barrier passes parity 1 */
            issue_tile<T, MB>(c, in, t, ld.stages + (size_t)s * p.tile, &ld.full[s], pol);
        }
    }
}

/* A GEMV instruction: its prologue once, then its tiles as they arrive (chunk by chunk when K is cut: the next chunk
 * of x loaded once every warp is past the last tile's barrier, so none still reads the one before). */
template <class T, int MB>
__device__ void run_gemv(const tpk_pprog &p, const tpk_pcall *c, const tpk_pinstr &in, pipe &ld, T *xs, float *red,
                         float *eb, float *er, float *acc, float *rs) {
    gemv_prologue<T, MB>(c, in, xs, red, eb, er, rs);
    const bool pre = c->M == 1 && c->epi < TPK_PE_GLU_SILU && in.f1 - in.f0 <= kEpi;
    const int nrb = MB == 1 ? 1 : (in.f1 - in.f0 + c->tile_rows - 1) / c->tile_rows;
    for (int t = 0; t < in.n_tiles; t++) {
        const int j = MB == 1 ? 0 : t / nrb, rb = MB == 1 ? t : t - j * nrb;
        if (MB > 1 && j > 0 && rb == 0) {
            load_x<T>(c, j, xs, c->xsc != NULL); /* a chunked call has no norm */
            csync();
        }
        const int s = ld.nuse % p.stages, r0 = in.f0 + rb * c->tile_rows;
        mbar_wait(&ld.full[s], (uint32_t)(ld.nuse / p.stages) & 1u);
        /* red alternates halves tile by tile: tile n + 2 writes the half tile n's epilogue reads only after every
         * warp, the epilogue's included, has passed tile n + 1's barrier */
        const int nc = min(in.f1, r0 + c->tile_rows) - r0;
        float *rd = red + (ld.nuse & 1) * kRed;
        const unsigned char *tile = ld.stages + (size_t)s * p.tile;
        /* E4M3 weights widen to FP16 pairs: FP16 activations only (the host refuses BF16 with them) */
        if (kIsHalf<T> && c->wfmt == TPK_PW_E4M3)
            gemv_tile<T, kIsHalf<T>, MB>(c, r0, nc, r0 - in.f0, j, tile, xs, rd, eb, er, acc, pre, &ld.empty[s]);
        else
            gemv_tile<T, 0, MB>(c, r0, nc, r0 - in.f0, j, tile, xs, rd, eb, er, acc, pre, &ld.empty[s]);
        ld.nuse++;
    }
}

template <class T, int MB>
__global__ void __launch_bounds__(kThreads + 32, 1) persist_kernel(const tpk_pprog *__restrict__ pp) {
#if !PK_SM90
    __trap();
#else
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t full[kMaxStages], empty[kMaxStages];
    __shared__ float red[2 * kRed]; /* two tiles' partial sums (block_sum uses the first kWarps + 1) */
    __shared__ float eb[kEpi], er[kEpi], rs[kMaxM];
    __shared__ int flag;
    const tpk_pprog p = *pp;
    const int q0 = p.queue_start[blockIdx.x], q1 = p.queue_start[blockIdx.x + 1];
    if (threadIdx.x == 0) {
        for (int s = 0; s < p.stages; s++) mbar_init(&full[s]), mbar_init(&empty[s]);
        asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads(); /* the barriers ready for the producer warp and the consumers */
    pipe ld = {smem, full, empty, 0};
    if (threadIdx.x >= kThreads) { /* the producer warp */
        if (threadIdx.x == kThreads) {
            uint64_t pol;
            asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
            produce<T, MB>(p, ld, q0, q1, pol);
        }
        return;
    }
    unsigned char *xs = smem + (size_t)kRing;
    float *acc = (float *)(smem + (size_t)kRing + kXs); /* a K-chunked GEMV's sums until its last chunk */
    const int past = *p.past;
    for (int q = q0; q < q1; q++) {
        const int k = p.queue[q];
        const tpk_pinstr in = p.instrs[k];
        const tpk_pcall *c = &p.calls[in.call];
        if (c->kind == TPK_PI_ATTN) {
            if (c->D == 64) attn_prefetch<T, 64>(c, in, past, (float *)xs);
            else if (c->D == 128) attn_prefetch<T, 128>(c, in, past, (float *)xs);
            else attn_prefetch<T, 256>(c, in, past, (float *)xs);
        }
        if (threadIdx.x == 0) {
            if (p.rec) p.rec[3 * (size_t)k] = globaltimer();
            for (int w = 0; w < in.n_waits; w++) {
                const tpk_pwait wt = p.waits[in.first_wait + w];
                while (ld_acquire(p.counters + wt.counter) < wt.target) {
                }
            }
        }
        csync();
        if (threadIdx.x == 0 && p.rec) p.rec[3 * (size_t)k + 1] = globaltimer();
        int add = 1;
        switch (c->kind) {
        case TPK_PI_EMBED: run_embed<T>(c); break;
        case TPK_PI_GEMV: run_gemv<T, MB>(p, c, in, ld, (T *)xs, red, eb, er, acc, rs); break;
        case TPK_PI_ATTN:
            add = c->D == 64    ? run_attn<T, 64>(c, in, past, (float *)xs, p.counters, &flag)
                  : c->D == 128 ? run_attn<T, 128>(c, in, past, (float *)xs, p.counters, &flag)
                                : run_attn<T, 256>(c, in, past, (float *)xs, p.counters, &flag);
            break;
        default: break;
        }
        csync();
        if (threadIdx.x == 0 && add) {
            __threadfence();
            for (int s = 0; s < in.n_signals; s++) atomicAdd(p.counters + p.signals[in.first_signal + s], add);
        }
        if (threadIdx.x == 0 && p.rec) p.rec[3 * (size_t)k + 2] = globaltimer();
    }
#endif
}

} // namespace

extern "C" size_t tpk_persist_smem(void) { return (size_t)kRing + kXs + sizeof(float) * kAcc; }

/* the kernel of a step: its activation type and batch class (persist_kernel's MB) */
static const void *kernel_of(int bf16, int max_m) {
    if (bf16) return max_m > 1 ? (const void *)persist_kernel<__nv_bfloat16, kMaxM> : (const void *)persist_kernel<__nv_bfloat16, 1>;
    return max_m > 1 ? (const void *)persist_kernel<__half, kMaxM> : (const void *)persist_kernel<__half, 1>;
}

extern "C" int tpk_persist_check(int device, int n_blocks) {
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) return (int)e;
    if (prop.major < 9) return (int)cudaErrorInvalidDeviceFunction;
    if (n_blocks < 1 || n_blocks > prop.multiProcessorCount) return (int)cudaErrorInvalidValue;
    const int smem = (int)tpk_persist_smem();
    for (int k = 0; k < 4; k++)
        if ((e = cudaFuncSetAttribute(kernel_of(k & 1, k & 2 ? kMaxM : 1), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      smem)))
            return (int)e;
    int per_sm = 0;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_of(0, kMaxM), kThreads + 32, smem)))
        return (int)e;
    return per_sm >= 1 ? 0 : (int)cudaErrorInvalidValue;
}

extern "C" int tpk_persist_launch(const tpk_pprog *d_prog, const tpk_pprog *h, tp_stream stream) {
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = cudaMemsetAsync(h->counters, 0, sizeof(int) * (size_t)h->n_counters, s);
    if (e != cudaSuccess) return (int)e;
    const size_t smem = tpk_persist_smem();
    void *args[] = {(void *)&d_prog};
    e = cudaLaunchKernel(kernel_of(h->bf16, h->max_m), dim3((unsigned)h->n_blocks), dim3(kThreads + 32), args, smem, s);
    return e != cudaSuccess ? (int)e : (int)cudaGetLastError();
}
