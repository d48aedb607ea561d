/* attention_impl.cuh: fused multi-head attention on tensor cores, FlashAttention-2 style (contract in attention.h).
 * The kernels and their launches, included by attention.cu (the product's default configuration; its general
 * kernel reuses the per-tile code) and by bench/attention_variants.cu (tpk_flash_attention_variant: every variant).
 *
 * Style: CUDA C, as kernels.cu. Templates only for compile-time constants (element types, head dim, warps per
 * CTA); the public entry point dispatches over tp_dtype and D with switch statements, and anything unsupported
 * returns cudaErrorInvalidValue without launching.
 *
 * Work decomposition. One CTA per (batch b, head h, tile of BM = 16 * NW query rows), flattened into blockIdx.x
 * with the query tile fastest, so the CTAs of one head run together and share its K/V in L2. Each warp owns 16
 * query rows and walks all keys in tiles of BN = 64:
 *   S (16 x 64) = Q K^T        mma.sync m16n8k16 (fp16 or bf16 in, fp32 accumulate); Q's A fragments are loaded
 *                              once (ldmatrix) and kept in registers, K's B fragments come by ldmatrix from
 *                              shared memory (K row-major [key][d] is exactly the "col" B operand);
 *   online softmax in fp32     scores scaled by scale * log2(e) so exp becomes exp2f; running row max m and row
 *                              sum l per thread (each thread holds 2 rows: lane/4 and lane/4 + 8; a row's 64
 *                              scores are spread over the 4 threads of a quad, reduced with two shuffles);
 *   O (16 x D) += P V          P goes from the S accumulators straight into A fragments (the C layout of two
 *                              adjacent n8 blocks is the A layout of one k16 step: the FA2 register trick),
 *                              rounded to the input type; V's B fragments by ldmatrix.trans ([key][d] -> col).
 * K and V tiles are double-buffered in shared memory with cp.async, one barrier per tile: wait for tile kt,
 * barrier, issue tile kt + 1 into the other buffer, compute kt. Rows are padded by 8 elements (16 bytes): a row
 * stride of D + 8 halves puts the 8 rows of an ldmatrix 8x8 matrix in 8 different 4-bank groups for every D here
 * (32, 64, 80, 96, 128), so no bank conflicts, and keeps every 16-byte chunk aligned for cp.async.
 * Full key tiles run a branch-free copy of the tile code (fa_tile), so the compiler batches the ldmatrix loads
 * ahead of their mma's; the last, partial tile runs a copy specialized to its number of 16-key chunks.
 *
 * Ragged T. Query rows >= T and key rows >= T are zero-filled by cp.async (src-size 0), never read from memory.
 * In the last key tile, keys >= T get probability 0, 16-key chunks wholly past T are not computed, and the zero V
 * rows keep 0 * V finite. Warps whose 16 rows all lie past T skip the math (but still help load). On store, rows
 * >= T are not written. The first key tile always holds key 0, so the running max is finite after it.
 * Split mode: a CTA whose query tile holds at most 16 rows < T (ViT's T = 197, 257, 577 end with 5, 1, 1 rows)
 * has all its warps work on those rows, each on its own 16 keys of every tile, and merges the partial softmax
 * states through shared memory at the end, instead of holding an SM slot with one busy warp.
 *
 * Epilogue. O / l is converted to the output type (F16/BF16 RNE, E4M3 = sat(rne(y / scale)) with the IEEE
 * quotient, as kernels.cu), staged in the warp's own (no longer needed) Q rows of shared memory, and written as
 * 16-byte row chunks.
 *
 * Variants (tpk_flash_attention_variant, bench/lab_variants.h) differ in warps per CTA, rows per warp, register
 * budget and a persistent grid; variant 1 (4 warps x 16 rows, <= 128 registers, 4 CTAs and 16 warps per SM for
 * D <= 64) was the fastest or within 2% of it at every shape bench/attention_lab.cu times on an H200, and is the
 * default, the only one the product compiles (attention.cu).
 * Where the time goes (ViT-B/16, B 64, S 197, D 64, 52 us on an H200): issue-limited at ~1.9 IPC of 4 per SM,
 * stalls mostly fixed-latency dependencies (mma/ldmatrix/MUFU chains) and memory waits with 4 warps per
 * scheduler; ~300 instructions per warp and 64-key tile, of which 64 HMMA, 32 LDSM and ~130 softmax ALU/MUFU.
 *
 * attention.cu holds the general kernel behind tpk_flash_attention_ex (separate strided Q/K/V/O, Tq != Tkv,
 * bottom-right causal masks, grouped-query attention, split-KV with a combine kernel); it reuses fa_tile and
 * fa_load_tile (fa_tile's ROWS mode, off for the kernels here, which compile to the same PTX as before it
 * existed). tpk_flash_attention keeps its own kernels: on the packed ViT layout the general kernel gives the same
 * bits but is slower (64.2 against 51.9 us at B 64, H 12, T 197, D 64 on an H200, L2 flushed before each call;
 * bench/results/2026-11-21_h200_decoder_attention_lab.log). */
#ifndef TP_ATTENTION_IMPL_CUH
#define TP_ATTENTION_IMPL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exec/cuda/attention/attention.h"
#include "exec/cuda/ptx/attention_ptx.cuh"
#include "exec/cuda/ptx/mma_ptx.cuh"

typedef __nv_fp8_e4m3 e4m3_t; /* storage tag only */

#define TPK_INVALID ((int)cudaErrorInvalidValue)
#define FA_BN 64 /* keys per tile */

/* ---- PTX wrappers ---------------------------------------------------------------------------------------------- */

__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* c (16x8 fp32) += a (16x16, row) * b (16x8, col), the input type by tag (mma_ptx.cuh) */
template <class T> __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, T) {
    tpk_mma16816<T>(c, a[0], a[1], a[2], a[3], b0, b1);
}

/* Two adjacent outputs into shared memory (staging), in the output type. */
__device__ __forceinline__ void st2(unsigned char *p, float a, float b, float, float, __half) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void st2(unsigned char *p, float a, float b, float, float, __nv_bfloat16) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void st2(unsigned char *p, float a, float b, float scale, float rcp, e4m3_t) {
    /* q = sat(rne(y / scale)), y / scale the IEEE quotient as in kernels.cu (div_rn), saturating to +-448 */
    const uint16_t lo = __nv_cvt_float_to_fp8(div_rn(a, scale, rcp), __NV_SATFINITE, __NV_E4M3);
    const uint16_t hi = __nv_cvt_float_to_fp8(div_rn(b, scale, rcp), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint16_t *>(p) = (uint16_t)(lo | (hi << 8));
}

template <typename TO> __device__ __forceinline__ float fa_out_scale(const float *) { return 1.0f; }
template <> __device__ __forceinline__ float fa_out_scale<e4m3_t>(const float *s) { return *s; }

/* Split mode's merge: warps 1..NW-1 hand their partial softmax states (running max ms, sum l, accumulators o of
 * the same rows and columns, in the same lanes) to warp 0 through mb, laid out [warp - 1][value][lane] (conflict
 * free), and warp 0 combines them: m = max, each state weighted by 2^(m_w - m). A warp that saw no key (m = -inf,
 * l = 0) weighs 0; when every m is -inf the reference point is 0, so the weights are 2^-inf = 0, never NaN.
 * Every thread of the CTA calls it (it synchronizes); returns 1 in warp 0, which continues, and 0 elsewhere. */
template <int NW, int ND>
__device__ __forceinline__ int fa_merge_warps(float (&ms)[2], float (&l)[2], float (&o)[ND][4], float *mb, int warp,
                                              int lane) {
    constexpr int NV = 4 + 4 * ND; /* ms[2], l[2], o[ND][4] */
    __syncthreads();               /* every warp is done with the last K/V tile, whose buffers mb reuses */
    if (warp > 0) {
        float *q = mb + (size_t)(warp - 1) * NV * 32 + lane;
        q[0] = ms[0], q[32] = ms[1], q[64] = l[0], q[96] = l[1];
#pragma unroll
        for (int n = 0; n < ND; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) q[(4 + 4 * n + e) * 32] = o[n][e];
    }
    __syncthreads();
    if (warp > 0) return 0;
#pragma unroll 1
    for (int w = 1; w < NW; w++) {
        const float *q = mb + (size_t)(w - 1) * NV * 32 + lane;
        const float m0 = fmaxf(ms[0], q[0]), m1 = fmaxf(ms[1], q[32]);
        const float r0 = m0 == -INFINITY ? 0.0f : m0, r1 = m1 == -INFINITY ? 0.0f : m1;
        const float a0 = fast_exp2(ms[0] - r0), a1 = fast_exp2(ms[1] - r1);
        const float b0 = fast_exp2(q[0] - r0), b1 = fast_exp2(q[32] - r1);
        ms[0] = m0, ms[1] = m1;
        l[0] = l[0] * a0 + q[64] * b0;
        l[1] = l[1] * a1 + q[96] * b1;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            o[n][0] = o[n][0] * a0 + q[(4 + 4 * n) * 32] * b0;
            o[n][1] = o[n][1] * a0 + q[(5 + 4 * n) * 32] * b0;
            o[n][2] = o[n][2] * a1 + q[(6 + 4 * n) * 32] * b1;
            o[n][3] = o[n][3] * a1 + q[(7 + 4 * n) * 32] * b1;
        }
    }
    return 1;
}

/* ROWS rows of D elements, the first at src (row stride rs elements), -> shared memory at byte address dst, rows
 * of D + 8 elements. Only the first `nvalid` rows are read; the others (tokens >= T) are zero-filled by cp.async
 * with src-size 0. FULL: every row is valid (no bounds test). All NT threads take part. When CH = D / 8 divides NT
 * (D = 32, 64, 128) each thread keeps one 16-byte column and steps down the rows: one 64-bit add per chunk. */
template <typename TI, int D, int ROWS, int NT, bool FULL>
__device__ __forceinline__ void fa_load_tile(uint32_t dst, const TI *src, size_t rs, int nvalid, int tid) {
    constexpr int CH = D / 8, LDB = (D + 8) * (int)sizeof(TI), N = ROWS * CH, ITERS = (N + NT - 1) / NT;
    if (NT % CH == 0) {
        constexpr int RS = NT / CH; /* rows per iteration */
        const int r0 = tid / CH, c = tid % CH;
        const TI *p = src + (size_t)r0 * rs + c * 8;
        const size_t step = (size_t)RS * rs;
#pragma unroll
        for (int i = 0; i < ITERS; i++) {
            if (N % NT == 0 || r0 + i * RS < ROWS) {
                const bool in = FULL || r0 + i * RS < nvalid;
                cp_async16(dst + (uint32_t)((r0 + i * RS) * LDB + c * 16), in ? p : src, in ? 16 : 0);
            }
            p += step;
        }
    } else {
#pragma unroll
        for (int i = 0; i < ITERS; i++) {
            const int e = tid + i * NT;
            if (N % NT == 0 || e < N) {
                const int r = e / CH, c = e % CH;
                const bool in = FULL || r < nvalid;
                const TI *p = src + (size_t)(in ? r : 0) * rs + c * 8;
                cp_async16(dst + (uint32_t)(r * LDB + c * 16), p, in ? 16 : 0);
            }
        }
    }
}

/* ================================================================================================================
 * One key tile for one warp: S = Q K^T, online softmax, O += P V, over the first NCH 16-key chunks of the tile
 * (compile time: full tiles NCH = BN / 16; the last tile NCH = ceil(valid / 16), so a tile of 5 keys costs one
 * chunk). MASK: keys >= valid get probability 0 (the last tile). ROWS (the general kernel, MT = 1): the limit is
 * per row, valid for the thread's row lane/4 and valid_b for row lane/4 + 8 (either may be <= 0 or >= the tile:
 * causal diagonals, rows that see no key). ROWS = false compiles to the same code as before it existed. There is
 * no run-time branch inside, so the compiler can batch the ldmatrix loads ahead of their mma's.
 * Softmax in the log2 domain: raw scores s, ms = running row max of s * sl2 (sl2 = |scale| log2 e >= 0; a negative
 * scale is handled by negating Q's fragments), p = 2^(s sl2 - ms) by one FFMA and one MUFU.EX2 per score.
 * ============================================================================================================== */
template <typename TI, int D, int MT, bool QREG, int NCH, bool MASK, int ABL, bool ROWS = false>
__device__ __forceinline__ void fa_tile(float (&o)[MT][D / 8][4], float (&ms)[MT][2], float (&l)[MT][2],
                                        const uint32_t (&qf)[QREG ? D / 16 : 1][4], uint32_t q_addr, uint32_t kb,
                                        uint32_t vb, int valid, float sl2, uint32_t qneg, int lane,
                                        int valid_b = 0) {
    constexpr int LD = D + 8, KD = D / 16, ND = D / 8, NB = 2 * NCH; /* n8 blocks of S computed */
    const TI tag = TI();

    float s[MT][NB][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NB; j++) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; kk++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            if (QREG) {
#pragma unroll
                for (int r = 0; r < 4; r++) a[mt][r] = qf[QREG ? kk : 0][r];
            } else {
                ldsm_x4(q_addr + (uint32_t)((mt * 16 * LD + kk * 16) * sizeof(TI)), a[mt][0], a[mt][1], a[mt][2],
                        a[mt][3]);
#pragma unroll
                for (int r = 0; r < 4; r++) a[mt][r] ^= qneg;
            }
        }
#pragma unroll
        for (int jp = 0; jp < NCH; jp++) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4(kb + (uint32_t)((jp * 16 * LD + kk * 16) * sizeof(TI)), b0, b1, b2, b3);
            if (ABL != 94) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816(s[mt][2 * jp], a[mt], b0, b1, tag);
                    mma16816(s[mt][2 * jp + 1], a[mt], b2, b3, tag);
                }
            }
        }
    }

    const int c2 = 2 * (lane & 3); /* this thread's first key column within an n8 block */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        if (MASK) {
#pragma unroll
            for (int j = 0; j < NB; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (j * 8 + c2 + (e & 1) >= (ROWS && e >= 2 ? valid_b : valid)) s[mt][j][e] = -INFINITY;
        }
        /* row max of the raw scores: a tree over the thread's 16 values per row, then over the quad */
        float x0[NB], x1[NB];
#pragma unroll
        for (int j = 0; j < NB; j++) {
            x0[j] = fmaxf(s[mt][j][0], s[mt][j][1]);
            x1[j] = fmaxf(s[mt][j][2], s[mt][j][3]);
        }
#pragma unroll
        for (int w = 1; w < NB; w *= 2)
#pragma unroll
            for (int j = 0; j + w < NB; j += 2 * w) {
                x0[j] = fmaxf(x0[j], x0[j + w]);
                x1[j] = fmaxf(x1[j], x1[j + w]);
            }
        float mx0 = x0[0], mx1 = x1[0];
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        /* every tile holds a key < T, so mx is finite; ms starts at -inf, so alpha = 0 on the first tile.
         * ROWS (per-row limits: causal masks, split-KV): a row may have seen no key yet (mx = -inf and ms = -inf;
         * fmaxf drops the NaN of -inf * 0 when sl2 = 0); its reference is then 0, so alpha = 2^-inf = 0 and every
         * p = 0 (masked), never 2^(-inf + inf) = NaN. */
        const float n0 = fmaxf(ms[mt][0], mx0 * sl2), n1 = fmaxf(ms[mt][1], mx1 * sl2);
        const float r0 = ROWS && n0 == -INFINITY ? 0.0f : n0, r1 = ROWS && n1 == -INFINITY ? 0.0f : n1;
        const float a0 = fast_exp2(ms[mt][0] - r0), a1 = fast_exp2(ms[mt][1] - r1);
        ms[mt][0] = n0;
        ms[mt][1] = n1;
#pragma unroll
        for (int j = 0; j < NB; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float x = fmaf(s[mt][j][e], sl2, -(e < 2 ? r0 : r1));
                float p = ABL == 91 ? x : fast_exp2(x);
                if (MASK && j * 8 + c2 + (e & 1) >= (ROWS && e >= 2 ? valid_b : valid))
                    p = 0.0f; /* also right when sl2 = 0 */
                s[mt][j][e] = p;
            }
        }
        /* row sums of the fp32 p (before their rounding for P V), as a tree */
#pragma unroll
        for (int j = 0; j < NB; j++) {
            x0[j] = s[mt][j][0] + s[mt][j][1];
            x1[j] = s[mt][j][2] + s[mt][j][3];
        }
#pragma unroll
        for (int w = 1; w < NB; w *= 2)
#pragma unroll
            for (int j = 0; j + w < NB; j += 2 * w) {
                x0[j] += x0[j + w];
                x1[j] += x1[j + w];
            }
        l[mt][0] = fmaf(l[mt][0], a0, x0[0]);
        l[mt][1] = fmaf(l[mt][1], a1, x1[0]);
#pragma unroll
        for (int n = 0; n < ND; n++) {
            o[mt][n][0] *= a0;
            o[mt][n][1] *= a0;
            o[mt][n][2] *= a1;
            o[mt][n][3] *= a1;
        }
    }

    /* O += P V over the k16 steps holding valid keys; P straight from the S accumulators */
#pragma unroll
    for (int kk = 0; kk < NCH; kk++) {
        {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                pa[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1], tag);
                pa[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3], tag);
                pa[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1], tag);
                pa[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3], tag);
            }
#pragma unroll
            for (int dp = 0; dp < ND / 2; dp++) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(vb + (uint32_t)((kk * 16 * LD + dp * 16) * sizeof(TI)), b0, b1, b2, b3);
                if (ABL != 93) {
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816(o[mt][2 * dp], pa[mt], b0, b1, tag);
                        mma16816(o[mt][2 * dp + 1], pa[mt], b2, b3, tag);
                    }
                }
            }
        }
    }
}

/* ================================================================================================================
 * The kernel. TI: __half or __nv_bfloat16; TO: __half, __nv_bfloat16 or e4m3_t; D: head dim (multiple of 16);
 * NW: warps per CTA; MT: m16 row tiles per warp (1 or 2: a warp owns 16 * MT query rows, so every K/V fragment
 * read from shared memory feeds MT mma's); QREG: Q's A fragments kept in registers for the whole kernel (else
 * re-read from shared memory once per key tile and k16 step); MINB: CTAs per SM asked of the register allocator
 * (__launch_bounds__). BM = 16 * MT * NW query rows per CTA. sl2 = |scale| * log2(e); qneg = 0x80008000 when
 * scale < 0 (flips the sign of Q's fp16/bf16 pairs, exactly). Shared memory (dynamic): Q [BM][D+8],
 * K [2][BN][D+8], V [2][BN][D+8], all TI.
 * ============================================================================================================== */
extern __shared__ __align__(16) unsigned char fa_smem[];

template <typename TI, typename TO, int D, int NW, int MT, bool QREG, int MINB, int ABL>
__global__ void __launch_bounds__(NW * 32, MINB)
    flash_attn_kernel(const TI *__restrict__ qkv, TO *__restrict__ out, const float *__restrict__ out_scale_p, int T,
                      int H, float sl2, uint32_t qneg, int n_qtiles) {
    constexpr int BM = NW * 16 * MT, BN = FA_BN, LD = D + 8, NT = NW * 32;
    constexpr int KD = D / 16, ND = D / 8;

    TI *Qs = reinterpret_cast<TI *>(fa_smem);
    TI *Ks = Qs + BM * LD;
    TI *Vs = Ks + 2 * BN * LD;

    const int qt = blockIdx.x % n_qtiles, bh = blockIdx.x / n_qtiles;
    const int h = bh % H, b = bh / H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t rs = (size_t)3 * H * D; /* elements from one token's qkv row to the next */
    const TI *qbase = qkv + (size_t)b * T * rs + (size_t)h * D;
    const TI *kbase = qbase + (size_t)H * D;
    const TI *vbase = qbase + 2 * (size_t)H * D;
    const int q0 = qt * BM, w0 = q0 + warp * 16 * MT; /* first query row of the CTA, of the warp */

    const uint32_t q_s = smem_u32(Qs), k_s = smem_u32(Ks), v_s = smem_u32(Vs);
    constexpr uint32_t TILE_B = (uint32_t)(BN * LD * sizeof(TI)); /* bytes of one K or V tile */
    fa_load_tile<TI, D, BM, NT, false>(q_s, qbase + (size_t)q0 * rs, rs, T - q0, tid);
    fa_load_tile<TI, D, BN, NT, false>(k_s, kbase, rs, T, tid);
    fa_load_tile<TI, D, BN, NT, false>(v_s, vbase, rs, T, tid);
    cp_async_commit();

    /* Split mode (CTA-uniform): when at most 16 query rows remain (ViT's T = 197, 257, 577 leave 5, 1, 1 rows in
     * the last query tile), the warps all work on those 16 rows and split every key tile instead: warp w takes keys
     * [16 w, 16 w + 16) of each tile, keeping its own (max, sum, O) partial state; the partials are merged through
     * shared memory at the end. Such a CTA then finishes in about 1/NW of the time instead of holding its SM slot
     * with one busy warp. */
    const bool split = MT == 1 && NW > 1 && T - q0 <= 16;
    const int qw = split ? 0 : warp;      /* whose 16 * MT query rows the warp computes */
    const int kw = split ? warp * 16 : 0; /* the warp's first key within a tile */
    /* warp-uniform: the warp has work (with 8 warps only the first BN / 16 = 4 have a key chunk in split mode) */
    const bool active = split ? kw < BN : w0 < T;

    /* per-lane shared-memory addresses of the ldmatrix rows */
    const uint32_t q_addr = q_s + (uint32_t)(((qw * 16 * MT + (lane & 15)) * LD + (lane >> 4) * 8) * sizeof(TI));
    const uint32_t k_addr =
        k_s + (uint32_t)(((kw + (lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8) * sizeof(TI));
    const uint32_t v_addr = v_s + (uint32_t)(((kw + (lane & 15)) * LD + (lane >> 4) * 8) * sizeof(TI));

    uint32_t qf[QREG ? KD : 1][4];
    float o[MT][ND][4];
    float ms[MT][2], l[MT][2]; /* rows lane/4 and lane/4 + 8 of each m-tile */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < ND; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
        ms[mt][0] = ms[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    /* Pipeline, one barrier per tile: wait for tile kt (the only group in flight), barrier (tile kt visible to all;
     * every warp is done with tile kt - 1, whose buffer is buf ^ 1), issue tile kt + 1 into buf ^ 1, compute kt. */
    const int nkt = (T + BN - 1) / BN;
    for (int kt = 0; kt < nkt; kt++) {
        const int buf = ABL == 92 ? 0 : kt & 1;
        cp_async_wait<0>();
        __syncthreads();
        if (kt + 1 < nkt && ABL != 92) {
            const int r1 = (kt + 1) * BN;
            const uint32_t nb = (uint32_t)(buf ^ 1) * TILE_B;
            if (r1 + BN <= T) {
                fa_load_tile<TI, D, BN, NT, true>(k_s + nb, kbase + (size_t)r1 * rs, rs, BN, tid);
                fa_load_tile<TI, D, BN, NT, true>(v_s + nb, vbase + (size_t)r1 * rs, rs, BN, tid);
            } else {
                fa_load_tile<TI, D, BN, NT, false>(k_s + nb, kbase + (size_t)r1 * rs, rs, T - r1, tid);
                fa_load_tile<TI, D, BN, NT, false>(v_s + nb, vbase + (size_t)r1 * rs, rs, T - r1, tid);
            }
            cp_async_commit();
        }

        if (active) {
            if (QREG && kt == 0) {
#pragma unroll
                for (int kk = 0; kk < (QREG ? KD : 1); kk++) {
                    ldsm_x4(q_addr + kk * 32, qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
#pragma unroll
                    for (int r = 0; r < 4; r++) qf[kk][r] ^= qneg;
                }
            }
            const uint32_t kb = k_addr + (uint32_t)buf * TILE_B, vb = v_addr + (uint32_t)buf * TILE_B;
            /* keys of this tile (split: of the warp's 16-key chunk) that are < T; >= BN: a full tile */
            const int valid = split ? min(T - kt * BN - kw, 16) : T - kt * BN;
            if (valid <= 0) {
                /* split mode: no key of the warp's chunk is < T */
            } else if (valid >= BN) {
                fa_tile<TI, D, MT, QREG, BN / 16, false, ABL>(o, ms, l, qf, q_addr, kb, vb, BN, sl2, qneg, lane);
            } else {
                switch ((valid + 15) / 16) { /* BN = 64: 1..3 chunks of 16 keys, or 4 with a ragged end */
                case 1:
                    fa_tile<TI, D, MT, QREG, 1, true, ABL>(o, ms, l, qf, q_addr, kb, vb, valid, sl2, qneg, lane);
                    break;
                case 2:
                    fa_tile<TI, D, MT, QREG, 2, true, ABL>(o, ms, l, qf, q_addr, kb, vb, valid, sl2, qneg, lane);
                    break;
                case 3:
                    fa_tile<TI, D, MT, QREG, 3, true, ABL>(o, ms, l, qf, q_addr, kb, vb, valid, sl2, qneg, lane);
                    break;
                default:
                    fa_tile<TI, D, MT, QREG, 4, true, ABL>(o, ms, l, qf, q_addr, kb, vb, valid, sl2, qneg, lane);
                    break;
                }
            }
        }
    }

    if (split) {
        /* merge the NW partial states into warp 0's, lane by lane (every warp holds the same rows and columns in
         * the same lanes), through the K/V buffers: layout [warp - 1][value][lane], conflict-free */
        constexpr int NV = 4 + 4 * ND; /* ms[2], l[2], o[ND][4] */
        static_assert((NW - 1) * NV * 32 * 4 <= 4 * BN * LD * (int)sizeof(TI), "merge buffer exceeds K/V smem");
        float *mb = reinterpret_cast<float *>(fa_smem + (size_t)BM * LD * sizeof(TI));
        if (!fa_merge_warps<NW, ND>(ms[0], l[0], o[0], mb, warp, lane)) return;
    }

    /* epilogue: stage the warp's rows in its own Q rows (read only by this warp), then 16-byte row chunks */
    constexpr int SROW = LD * (int)sizeof(TI);    /* bytes per staging row, >= D * sizeof(TO) */
    constexpr int OCH = D * (int)sizeof(TO) / 16; /* 16-byte chunks per output row */
    const float sc = fa_out_scale<TO>(out_scale_p), rcp = 1.0f / sc; /* rcp: IEEE division, once */
    const size_t orow = (size_t)H * D * sizeof(TO);
    unsigned char *obase = reinterpret_cast<unsigned char *>(out) + (size_t)h * D * sizeof(TO);
    const int g = lane >> 2, c2 = 2 * (lane & 3);
    /* the staging overwrites Q rows the warp's lanes read with ldmatrix in the last tile: every lane's read comes
     * first (a write-after-read between lanes, reported by compute-sanitizer racecheck without it) */
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        if (w0 + mt * 16 >= T) continue; /* warp-uniform: no row of this m-tile is < T */
        float l0 = l[mt][0], l1 = l[mt][1];
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
        unsigned char *st = fa_smem + (size_t)(warp * MT + mt) * 16 * SROW;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            st2(st + g * SROW + (n * 8 + c2) * (int)sizeof(TO), o[mt][n][0] * inv0, o[mt][n][1] * inv0, sc, rcp,
                TO());
            st2(st + (g + 8) * SROW + (n * 8 + c2) * (int)sizeof(TO), o[mt][n][2] * inv1, o[mt][n][3] * inv1, sc,
                rcp, TO());
        }
        __syncwarp();
#pragma unroll
        for (int i = 0; i < (16 * OCH + 31) / 32; i++) {
            const int e = lane + i * 32;
            if ((16 * OCH) % 32 == 0 || e < 16 * OCH) {
                const int r = e / OCH, c = e % OCH, t = w0 + mt * 16 + r;
                if (t < T)
                    *reinterpret_cast<uint4 *>(obase + ((size_t)b * T + t) * orow + c * 16) =
                        *reinterpret_cast<const uint4 *>(st + r * SROW + c * 16);
            }
        }
    }
}

/* ================================================================================================================
 * Persistent variant (6): a grid of at most (SMs x resident CTAs) CTAs; CTA c takes work items c, c + G, c + 2G,
 * ... (item = (b, h, query tile), query tile fastest, so the CTAs running at any time cover neighbouring items and
 * share K/V in L2). The K/V tile stream runs on across items: while the last key tile of an item is computed, the
 * next item's Q (second Q buffer) and first K/V tile are already loading, so only a CTA's first item waits for
 * its loads, and the epilogue's stores overlap the next item's loads. Otherwise the same per-tile code as the
 * kernel above (4 warps x 16 rows, Q in registers, split mode for a last query tile of <= 16 rows, whose merge
 * uses the K and V buffers of the tile just finished: 2 warps' partial states fill one tile buffer exactly).
 * Shared memory: Q [2][BM][D+8], K [2][BN][D+8], V [2][BN][D+8].
 * ============================================================================================================== */

/* Issues (one cp.async group) key tile kt of work item `item` into the K/V buffers at k_dst / v_dst, and, when
 * with_q, the item's Q tile into q_dst first. */
template <typename TI, int D, int BM, int NT>
__device__ __forceinline__ void fa_issue_item(const TI *qkv, int T, int H, size_t rs, int n_qtiles, int item, int kt,
                                              bool with_q, uint32_t q_dst, uint32_t k_dst, uint32_t v_dst, int tid) {
    constexpr int BN = FA_BN;
    const int qt = item % n_qtiles, bh = item / n_qtiles, h = bh % H, b = bh / H;
    const TI *qbase = qkv + (size_t)b * T * rs + (size_t)h * D;
    if (with_q) fa_load_tile<TI, D, BM, NT, false>(q_dst, qbase + (size_t)qt * BM * rs, rs, T - qt * BM, tid);
    const int r1 = kt * BN;
    const TI *kb = qbase + (size_t)H * D + (size_t)r1 * rs, *vb = qbase + 2 * (size_t)H * D + (size_t)r1 * rs;
    if (r1 + BN <= T) {
        fa_load_tile<TI, D, BN, NT, true>(k_dst, kb, rs, BN, tid);
        fa_load_tile<TI, D, BN, NT, true>(v_dst, vb, rs, BN, tid);
    } else {
        fa_load_tile<TI, D, BN, NT, false>(k_dst, kb, rs, T - r1, tid);
        fa_load_tile<TI, D, BN, NT, false>(v_dst, vb, rs, T - r1, tid);
    }
    cp_async_commit();
}

template <typename TI, typename TO, int D, int NW, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB)
    flash_attn_persistent_kernel(const TI *__restrict__ qkv, TO *__restrict__ out,
                                 const float *__restrict__ out_scale_p, int T, int H, float sl2, uint32_t qneg,
                                 int n_qtiles, int n_items) {
    constexpr int BM = NW * 16, BN = FA_BN, LD = D + 8, NT = NW * 32, KD = D / 16, ND = D / 8;
    constexpr uint32_t QB = (uint32_t)(BM * LD * sizeof(TI)), TILE_B = (uint32_t)(BN * LD * sizeof(TI));
    static_assert(NW == 4, "the split-mode merge below places 3 partial states in one K and one V buffer");
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t rs = (size_t)3 * H * D;
    const uint32_t q_s = smem_u32(fa_smem), k_s = q_s + 2 * QB, v_s = k_s + 2 * TILE_B;
    const int nkt = (T + BN - 1) / BN, G = (int)gridDim.x;
    const float sc = fa_out_scale<TO>(out_scale_p), rcp = 1.0f / sc;
    const size_t orow = (size_t)H * D * sizeof(TO);
    const int g = lane >> 2, c2 = 2 * (lane & 3);

    int item = blockIdx.x, qbi = 0, step = 0;
    if (item >= n_items) return;
    fa_issue_item<TI, D, BM, NT>(qkv, T, H, rs, n_qtiles, item, 0, true, q_s, k_s, v_s, tid);

    for (;;) {
        const int qt = item % n_qtiles, bh = item / n_qtiles, h = bh % H, b = bh / H;
        const int q0 = qt * BM, w0 = q0 + warp * 16;
        const bool split = T - q0 <= 16;
        const int qw = split ? 0 : warp, kw = split ? warp * 16 : 0;
        const bool active = split || w0 < T;
        const uint32_t q_addr = q_s + (uint32_t)qbi * QB +
                                (uint32_t)(((qw * 16 + (lane & 15)) * LD + (lane >> 4) * 8) * sizeof(TI));
        const uint32_t k_addr =
            k_s + (uint32_t)(((kw + (lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8) * sizeof(TI));
        const uint32_t v_addr = v_s + (uint32_t)(((kw + (lane & 15)) * LD + (lane >> 4) * 8) * sizeof(TI));

        uint32_t qf[KD][4];
        float o[1][ND][4], ms[1][2], l[1][2];
#pragma unroll
        for (int n = 0; n < ND; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
        ms[0][0] = ms[0][1] = -INFINITY;
        l[0][0] = l[0][1] = 0.0f;

        for (int kt = 0; kt < nkt; kt++, step++) {
            const int buf = step & 1;
            cp_async_wait<0>();
            __syncthreads(); /* tile (item, kt) landed and is visible; every warp is done with buffer buf ^ 1 */
            const uint32_t nb = (uint32_t)(buf ^ 1) * TILE_B;
            if (kt + 1 < nkt)
                fa_issue_item<TI, D, BM, NT>(qkv, T, H, rs, n_qtiles, item, kt + 1, false, 0, k_s + nb, v_s + nb,
                                             tid);
            else if (item + G < n_items)
                fa_issue_item<TI, D, BM, NT>(qkv, T, H, rs, n_qtiles, item + G, 0, true,
                                             q_s + (uint32_t)(qbi ^ 1) * QB, k_s + nb, v_s + nb, tid);
            if (active) {
                if (kt == 0) {
#pragma unroll
                    for (int kk = 0; kk < KD; kk++) {
                        ldsm_x4(q_addr + kk * 32, qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
#pragma unroll
                        for (int r = 0; r < 4; r++) qf[kk][r] ^= qneg;
                    }
                }
                const uint32_t kb = k_addr + (uint32_t)buf * TILE_B, vb = v_addr + (uint32_t)buf * TILE_B;
                const int valid = split ? min(T - kt * BN - kw, 16) : T - kt * BN;
                if (valid <= 0) {
                } else if (valid >= BN) {
                    fa_tile<TI, D, 1, true, BN / 16, false, 0>(o, ms, l, qf, q_addr, kb, vb, BN, sl2, qneg, lane);
                } else {
                    switch ((valid + 15) / 16) {
                    case 1:
                        fa_tile<TI, D, 1, true, 1, true, 0>(o, ms, l, qf, q_addr, kb, vb, valid, sl2, qneg, lane);
                        break;
                    case 2:
                        fa_tile<TI, D, 1, true, 2, true, 0>(o, ms, l, qf, q_addr, kb, vb, valid, sl2, qneg, lane);
                        break;
                    case 3:
                        fa_tile<TI, D, 1, true, 3, true, 0>(o, ms, l, qf, q_addr, kb, vb, valid, sl2, qneg, lane);
                        break;
                    default:
                        fa_tile<TI, D, 1, true, 4, true, 0>(o, ms, l, qf, q_addr, kb, vb, valid, sl2, qneg, lane);
                        break;
                    }
                }
            }
        }

        bool store = active && w0 < T; /* split mode: warp 0 only (w0 = q0 < T for it) */
        if (split) {
            /* merge into warp 0 through the buffers of the tile just computed (buffer (step - 1) & 1; the other one
             * holds the next item's first tile): warps 1, 2 in its K buffer, warp 3 in its V buffer */
            constexpr int NV = 4 + 4 * ND;
            const uint32_t last = (uint32_t)((step - 1) & 1) * TILE_B;
            unsigned char *kreg = fa_smem + (2 * QB + last), *vreg = fa_smem + (2 * QB + 2 * TILE_B + last);
            __syncthreads(); /* every warp is done reading that buffer */
            if (warp > 0) {
                float *p = reinterpret_cast<float *>(warp < 3 ? kreg + (warp - 1) * NV * 128 : vreg) + lane;
                p[0] = ms[0][0], p[32] = ms[0][1], p[64] = l[0][0], p[96] = l[0][1];
#pragma unroll
                for (int n = 0; n < ND; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) p[(4 + 4 * n + e) * 32] = o[0][n][e];
            }
            __syncthreads();
            if (warp == 0) {
#pragma unroll 1
                for (int w = 1; w < NW; w++) {
                    const float *p = reinterpret_cast<const float *>(w < 3 ? kreg + (w - 1) * NV * 128 : vreg) + lane;
                    const float m0 = fmaxf(ms[0][0], p[0]), m1 = fmaxf(ms[0][1], p[32]);
                    const float a0 = fast_exp2(ms[0][0] - m0), a1 = fast_exp2(ms[0][1] - m1);
                    const float b0 = fast_exp2(p[0] - m0), b1 = fast_exp2(p[32] - m1);
                    ms[0][0] = m0, ms[0][1] = m1;
                    l[0][0] = l[0][0] * a0 + p[64] * b0;
                    l[0][1] = l[0][1] * a1 + p[96] * b1;
#pragma unroll
                    for (int n = 0; n < ND; n++) {
                        o[0][n][0] = o[0][n][0] * a0 + p[(4 + 4 * n) * 32] * b0;
                        o[0][n][1] = o[0][n][1] * a0 + p[(5 + 4 * n) * 32] * b0;
                        o[0][n][2] = o[0][n][2] * a1 + p[(6 + 4 * n) * 32] * b1;
                        o[0][n][3] = o[0][n][3] * a1 + p[(7 + 4 * n) * 32] * b1;
                    }
                }
            }
            store = warp == 0;
        }

        if (store) {
            /* stage in the warp's own rows of this item's Q buffer, then 16-byte row chunks */
            constexpr int SROW = LD * (int)sizeof(TI), OCH = D * (int)sizeof(TO) / 16;
            float l0 = l[0][0], l1 = l[0][1];
            l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
            l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
            l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
            l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
            const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
            unsigned char *st = fa_smem + (size_t)qbi * QB + (size_t)warp * 16 * SROW;
            __syncwarp(); /* every lane's last ldmatrix of these Q rows before any lane overwrites them */
#pragma unroll
            for (int n = 0; n < ND; n++) {
                st2(st + g * SROW + (n * 8 + c2) * (int)sizeof(TO), o[0][n][0] * inv0, o[0][n][1] * inv0, sc, rcp,
                    TO());
                st2(st + (g + 8) * SROW + (n * 8 + c2) * (int)sizeof(TO), o[0][n][2] * inv1, o[0][n][3] * inv1, sc,
                    rcp, TO());
            }
            __syncwarp();
            unsigned char *obase = reinterpret_cast<unsigned char *>(out) + (size_t)h * D * sizeof(TO);
#pragma unroll
            for (int i = 0; i < (16 * OCH + 31) / 32; i++) {
                const int e = lane + i * 32;
                if ((16 * OCH) % 32 == 0 || e < 16 * OCH) {
                    const int r = e / OCH, c = e % OCH, t = w0 + r;
                    if (t < T)
                        *reinterpret_cast<uint4 *>(obase + ((size_t)b * T + t) * orow + c * 16) =
                            *reinterpret_cast<const uint4 *>(st + r * SROW + c * 16);
                }
            }
        }

        item += G;
        qbi ^= 1;
        if (item >= n_items) break;
    }
}

/* ---- host side ------------------------------------------------------------------------------------------------- */

typedef struct {
    const void *qkv;
    void *out;
    const float *out_scale;
    int B, T, H;
    float scale;
    cudaStream_t s;
} fa_args;

template <typename TI, typename TO, int D, int NW, int MT, bool QREG, int MINB, int ABL = 0>
static int fa_launch(const fa_args *a) {
    constexpr int BM = NW * 16 * MT;
    const size_t smem = (size_t)(BM + 4 * FA_BN) * (D + 8) * sizeof(TI);
    const int n_qtiles = (a->T + BM - 1) / BM;
    const size_t blocks = (size_t)a->B * a->H * n_qtiles;
    if (blocks > 0x7FFFFFFFu) return TPK_INVALID;
    if (smem > 48 * 1024) {
        /* a host-side function attribute: no stream work, allowed while a stream is being captured */
        cudaError_t e = cudaFuncSetAttribute(flash_attn_kernel<TI, TO, D, NW, MT, QREG, MINB, ABL>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return (int)e;
    }
    /* log2(e): softmax evaluated with exp2; the sign of scale goes into Q */
    const float sl2 = fabsf(a->scale) * 1.44269504088896340736f;
    const uint32_t qneg = a->scale < 0.0f ? 0x80008000u : 0u;
    flash_attn_kernel<TI, TO, D, NW, MT, QREG, MINB, ABL><<<(unsigned)blocks, NW * 32, smem, a->s>>>(
        (const TI *)a->qkv, (TO *)a->out, a->out_scale, a->T, a->H, sl2, qneg, n_qtiles);
    return (int)cudaGetLastError();
}

/* The persistent kernel: grid = min(items, SMs x resident CTAs per SM), both read from the runtime (host-side
 * queries: no stream work, allowed during capture). */
template <typename TI, typename TO, int D, int MINB> static int fa_launch_persist(const fa_args *a) {
    constexpr int NW = 4, BM = NW * 16;
    const size_t smem = (size_t)(2 * BM + 4 * FA_BN) * (D + 8) * sizeof(TI);
    const int n_qtiles = (a->T + BM - 1) / BM;
    const long long items = (long long)a->B * a->H * n_qtiles;
    if (items > 0x7FFFFFFFLL) return TPK_INVALID;
    cudaError_t e = cudaSuccess;
    if (smem > 48 * 1024)
        e = cudaFuncSetAttribute(flash_attn_persistent_kernel<TI, TO, D, NW, MINB>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    int dev = 0, sms = 0, per_sm = 0;
    if (e == cudaSuccess) e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, flash_attn_persistent_kernel<TI, TO, D, NW, MINB>,
                                                          NW * 32, smem);
    if (e != cudaSuccess) return (int)e;
    const long long slots = (long long)(sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
    const int grid = (int)(items < slots ? items : slots);
    const float sl2 = fabsf(a->scale) * 1.44269504088896340736f;
    const uint32_t qneg = a->scale < 0.0f ? 0x80008000u : 0u;
    flash_attn_persistent_kernel<TI, TO, D, NW, MINB><<<grid, NW * 32, smem, a->s>>>(
        (const TI *)a->qkv, (TO *)a->out, a->out_scale, a->T, a->H, sl2, qneg, n_qtiles, (int)items);
    return (int)cudaGetLastError();
}

/* The argument checks tpk_flash_attention and bench/'s tpk_flash_attention_variant share (attention.h), after the
 * latter's variant check: cudaErrorInvalidValue, cudaSuccess for empty work (no launch), or FA_GO to launch. */
#define FA_GO (-1)
static inline int fa_check(const void *qkv, tp_dtype in_dt, const void *out, tp_dtype out_dt, const float *out_scale,
                           int B, int T, int H, int D) {
    if (!((in_dt == TP_F16 || in_dt == TP_BF16) && (out_dt == TP_F16 || out_dt == TP_BF16 || out_dt == TP_E4M3) &&
          (D == 32 || D == 64 || D == 80 || D == 96 || D == 128)))
        return TPK_INVALID;
    if (B < 0 || T < 0 || H < 0) return TPK_INVALID;
    if (B == 0 || T == 0 || H == 0) return (int)cudaSuccess;
    if (!qkv || !out || (out_dt == TP_E4M3 && !out_scale)) return TPK_INVALID;
    if ((uintptr_t)qkv % 16 != 0 || (uintptr_t)out % 16 != 0) return TPK_INVALID;
    return FA_GO;
}

#endif
