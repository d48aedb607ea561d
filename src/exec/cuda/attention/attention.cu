/* attention.cu: fused multi-head attention on tensor cores, FlashAttention-2 style (contract in attention.h).
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
 * Variants (tpk_flash_attention_variant, attention.h) differ in warps per CTA, rows per warp, register budget and
 * a persistent grid; variant 1 (4 warps x 16 rows, <= 128 registers, 4 CTAs and 16 warps per SM for D <= 64) was
 * the fastest or within 2% of it at every shape bench/attention_lab.cu times on an H200, and is the default.
 * Where the time goes (ViT-B/16, B 64, S 197, D 64, 52 us on an H200): issue-limited at ~1.9 IPC of 4 per SM,
 * stalls mostly fixed-latency dependencies (mma/ldmatrix/MUFU chains) and memory waits with 4 warps per
 * scheduler; ~300 instructions per warp and 64-key tile, of which 64 HMMA, 32 LDSM and ~130 softmax ALU/MUFU.
 *
 * The second half of this file is the general kernel behind tpk_flash_attention_ex (separate strided Q/K/V/O,
 * Tq != Tkv, bottom-right causal masks, grouped-query attention, split-KV with a combine kernel); it reuses fa_tile
 * and fa_load_tile (fa_tile's ROWS mode, off for the kernels above, which compile to the same PTX as before it
 * existed). tpk_flash_attention keeps its own kernels: on the packed ViT layout the general kernel gives the same
 * bits but is slower (64.2 against 51.9 us at B 64, H 12, T 197, D 64 on an H200, L2 flushed before each call;
 * bench/results/2026-11-21_h200_decoder_attention_lab.log). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exec/cuda/attention/attention.h"
#include "exec/cuda/ptx/attention_ptx.cuh"

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

/* c (16x8 fp32) += a (16x16, row) * b (16x8, col) */
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, __half) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, __nv_bfloat16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

/* Variants (attention.h): 1 = 4 warps x 16 rows (<= 128 registers: 4 CTAs/SM), 2 = 8 warps x 16 rows, 3 = 4 warps
 * x 32 rows, 4 = 2 warps x 32 rows (3 and 4: D <= 96, Q re-read from shared memory to leave registers for the two
 * m-tiles), 5 = 4 warps x 16 rows with up to 168 registers (3 CTAs/SM), 6 = variant 1's tiles in the persistent
 * kernel. 0 = the default for D (fa_resolve). */
static int fa_resolve(int variant, int D) {
    if (variant == 0) return 1;
#ifdef TPK_FA_ABLATIONS
    if (variant >= 90 && variant <= 94) return variant; /* lab-only diagnostics: wrong results, timing only */
#endif
    if (variant < 1 || variant > 6 || ((variant == 3 || variant == 4) && D > 96)) return -1;
    return variant;
}

#ifdef TPK_FA_ABLATIONS
/* Lab-only diagnostics (f16 -> f16, D = 64, variant 1's shape): 90 = control, 91 = no exp, 92 = no global K/V
 * reloads (tile 0 reused), 93 = no P V mma, 94 = no Q K^T mma. Their results are wrong: timing only. */
template <typename TI, typename TO, int D> static int fa_ablation(int, const fa_args *) { return TPK_INVALID; }
template <> int fa_ablation<__half, __half, 64>(int variant, const fa_args *a) {
    switch (variant) {
    case 90: return fa_launch<__half, __half, 64, 4, 1, true, 4, 90>(a);
    case 91: return fa_launch<__half, __half, 64, 4, 1, true, 4, 91>(a);
    case 92: return fa_launch<__half, __half, 64, 4, 1, true, 4, 92>(a);
    case 93: return fa_launch<__half, __half, 64, 4, 1, true, 4, 93>(a);
    case 94: return fa_launch<__half, __half, 64, 4, 1, true, 4, 94>(a);
    default: return TPK_INVALID;
    }
}
#endif

template <typename TI, typename TO, int D> static int fa_two_mtiles(int variant, const fa_args *a) {
    switch (variant) {
    case 3: return fa_launch<TI, TO, D, 4, 2, false, 1>(a);
    case 4: return fa_launch<TI, TO, D, 2, 2, false, 1>(a);
    default: return TPK_INVALID;
    }
}

template <typename TI, typename TO, int D> static int fa_by_variant(int variant, const fa_args *a) {
#ifdef TPK_FA_ABLATIONS
    if (variant >= 90) return fa_ablation<TI, TO, D>(variant, a);
#endif
    switch (variant) {
    case 1: return fa_launch<TI, TO, D, 4, 1, true, D <= 64 ? 4 : 1>(a);
    case 2: return fa_launch<TI, TO, D, 8, 1, true, D <= 64 ? 2 : 1>(a);
    case 5: return fa_launch<TI, TO, D, 4, 1, true, D <= 64 ? 3 : 1>(a);
    case 6: return fa_launch_persist<TI, TO, D, D <= 64 ? 4 : 1>(a);
    default: return D <= 96 ? fa_two_mtiles<TI, TO, D <= 96 ? D : 96>(variant, a) : TPK_INVALID;
    }
}

template <typename TI, typename TO> static int fa_by_d(int D, int variant, const fa_args *a) {
    switch (D) {
    case 32: return fa_by_variant<TI, TO, 32>(variant, a);
    case 64: return fa_by_variant<TI, TO, 64>(variant, a);
    case 80: return fa_by_variant<TI, TO, 80>(variant, a);
    case 96: return fa_by_variant<TI, TO, 96>(variant, a);
    case 128: return fa_by_variant<TI, TO, 128>(variant, a);
    default: return TPK_INVALID;
    }
}

template <typename TI> static int fa_by_out(tp_dtype out_dt, int D, int variant, const fa_args *a) {
    switch (out_dt) {
    case TP_F16: return fa_by_d<TI, __half>(D, variant, a);
    case TP_BF16: return fa_by_d<TI, __nv_bfloat16>(D, variant, a);
    case TP_E4M3: return fa_by_d<TI, e4m3_t>(D, variant, a);
    default: return TPK_INVALID;
    }
}

static int fa_supported(tp_dtype in_dt, tp_dtype out_dt, int D, int variant) {
    return (in_dt == TP_F16 || in_dt == TP_BF16) && (out_dt == TP_F16 || out_dt == TP_BF16 || out_dt == TP_E4M3) &&
           (D == 32 || D == 64 || D == 80 || D == 96 || D == 128) && fa_resolve(variant, D) > 0;
}

extern "C" int tpk_flash_attention_variant(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt,
                                           const float *out_scale, int B, int T, int H, int D, float scale,
                                           int variant, tp_stream stream) {
    if (!fa_supported(in_dt, out_dt, D, variant)) return TPK_INVALID;
    if (B < 0 || T < 0 || H < 0) return TPK_INVALID;
    if (B == 0 || T == 0 || H == 0) return (int)cudaSuccess;
    if (!qkv || !out || (out_dt == TP_E4M3 && !out_scale)) return TPK_INVALID;
    if ((uintptr_t)qkv % 16 != 0 || (uintptr_t)out % 16 != 0) return TPK_INVALID;
    fa_args a = {qkv, out, out_scale, B, T, H, scale, (cudaStream_t)stream};
    variant = fa_resolve(variant, D);
    switch (in_dt) {
    case TP_F16: return fa_by_out<__half>(out_dt, D, variant, &a);
    case TP_BF16: return fa_by_out<__nv_bfloat16>(out_dt, D, variant, &a);
    default: return TPK_INVALID;
    }
}

extern "C" int tpk_flash_attention(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt,
                                   const float *out_scale, int B, int T, int H, int D, float scale,
                                   tp_stream stream) {
    return tpk_flash_attention_variant(qkv, in_dt, out, out_dt, out_scale, B, T, H, D, scale, 0, stream);
}

/* ================================================================================================================
 * The general kernel (tpk_flash_attention_ex, attention.h): separate strided Q/K/V/O, Tq != Tkv, causal masks
 * aligned bottom-right, grouped-query attention, split-KV. Same per-tile code as above (fa_tile, fa_load_tile; the
 * per-row limits through fa_tile's ROWS mode), 4 warps a CTA, Q in registers.
 *
 * Rows. A CTA owns a tile of "rows" of one (batch b, KV head hk): row r = t * G + i is query t of head
 * hk * G + i (G = H / Hkv), so the G query heads that share a KV head share every K/V tile the CTA loads, and M =
 * G * Tq rows exist per (b, hk). Tiles: BMR = 64 rows (4 warps x 16; prefill) or, when M <= 16 (decode: Tq * G
 * <= 16), BMR = 16 rows (DEC: less shared memory, so 3 CTAs per SM at D = 128 instead of 2, registers capped at
 * 168 for that: more K/V bytes in flight). A tile holding <= 16 rows (always with DEC) runs in split mode as the
 * kernel above: each warp takes 16 keys of every 64-key tile and the 4 partial states are merged through shared
 * memory at the end.
 * Keys. Split s (of n_splits) covers keys [s L, s L + L) (L a multiple of 64). With causal, row r sees keys
 * j < lim(r) = t + Tkv - Tq + 1 (t = r / G), so the CTA's key loop ends at lim(its last row): tiles wholly above the
 * diagonal are never loaded. Per warp and 64-key tile: no row of the warp sees a key there -> skipped; every row
 * sees all of it -> the unmasked tile code; else the masked code with each row's own limit (fa_tile ROWS).
 * Work order: the (b, KV head) pairs are cut into groups of hg whose K/V fit in half the L2 (hg = L2 / 2 / (Tkv
 * D 4 bytes)); blockIdx.x runs group by group, and inside a group over query tiles (slowest) then pairs, then
 * splits (fastest). So the CTAs running together share the K/V of a few heads in L2, and the longest query tiles
 * start first (causal: the last tiles, which see the most keys; non-causal: the full tiles before the ragged last
 * one), so short CTAs fill the tail. Measured on an H200 (causal prefill, H 32, D 128): query tile slowest over all
 * heads, B 8 S 4096 streamed each head's 2 MB of K/V from HBM for every tile (218 TFLOP/s against 275 at B 1);
 * heads slowest, B 1 S 1024 lost the longest-first balance (178 -> 139 TFLOP/s). Groups keep both.
 * Measured (H200, f16, D 128, H 32, bench/results/2026-11-21_h200_decoder_attention.json; cuDNN 9.19 alongside):
 * causal prefill 181 (B 1, S 1024) to 263 (B 8, S 4096) TFLOP/s, 26-38% of the measured FP16 GEMM peak, against
 * cuDNN's 258-535 (its Hopper engine uses wgmma; mma.sync here); decode (Tq 1) at B 64 reads K/V at 3.5-4.3 TB/s
 * (cuDNN 4.0-4.6) and at B 1 takes 3-13% longer than cuDNN (split-KV: 8 to 43 key ranges).
 * Output: n_splits = 1 -> O / l written in out_dt (l = 0: a row that saw no key -> zeros); n_splits > 1 -> per row
 * the fp32 partial state (m = row max of s * |scale| log2 e, l = sum of 2^(s |scale| log2 e - m), unnormalized O)
 * to the workspace, merged by flash_attn_combine_kernel.
 * ============================================================================================================== */

#define FX_MAX_SPLITS 128
#define FX_MAX_DEV 64

typedef struct {
    const void *q, *k, *v;
    void *o;
    long long q_bs, q_rs, k_bs, k_rs, v_bs, v_rs, o_bs, o_rs; /* elements */
    const float *out_scale;
    float *ws_o, *ws_ml; /* split-KV partials: [split][row][D] and [split][row][2] (m, l); row = (b H + h) Tq + t */
    long long R;         /* B * H * Tq */
    int H, Hkv, G, Tq, Tkv, M, n_bh, n_mtiles, n_splits, split_keys, off, causal;
    int hg; /* (b, KV head) pairs per group of the work order */
    float sl2;
    uint32_t qneg;
} fx_params;

/* Exclusive end of the keys row r sees, clamped to the CTA's key range end kv_hi. */
__device__ __forceinline__ int fx_lim(const fx_params &p, int kv_hi, int r) {
    return p.causal ? min(kv_hi, r / p.G + p.off + 1) : kv_hi;
}

/* Rows row0 .. row0 + ROWS - 1 of (b, hk) into shared memory at dst (rows of D + 8 elements); rows >= M are
 * zero-filled (cp.async with src-size 0 reads nothing). */
template <typename TI, int D, int ROWS, int NT>
__device__ __forceinline__ void fx_load_q(uint32_t dst, const fx_params &p, int b, int hk, int row0, int tid) {
    constexpr int CH = D / 8, LDB = (D + 8) * (int)sizeof(TI), N = ROWS * CH, ITERS = (N + NT - 1) / NT;
    const TI *q = reinterpret_cast<const TI *>(p.q) + (long long)b * p.q_bs + (long long)hk * p.G * D;
#pragma unroll
    for (int i = 0; i < ITERS; i++) {
        const int e = tid + i * NT;
        if (N % NT == 0 || e < N) {
            const int r = e / CH, c = e % CH, row = row0 + r;
            const bool in = row < p.M;
            const int t = in ? row / p.G : 0, hi = in ? row - t * p.G : 0;
            cp_async16(dst + (uint32_t)(r * LDB + c * 16), q + (long long)t * p.q_rs + hi * D + c * 8, in ? 16 : 0);
        }
    }
}

/* Per-row destination of output row r of (b, hk), in bytes from p.o. */
template <typename TO>
__device__ __forceinline__ long long fx_out_off(const fx_params &p, int b, int hk, int r, int D) {
    const int t = r / p.G, h = hk * p.G + (r - t * p.G);
    return ((long long)b * p.o_bs + (long long)t * p.o_rs + (long long)h * D) * (long long)sizeof(TO);
}

template <typename TI, typename TO, int D, bool DEC>
__global__ void __launch_bounds__(128, D <= 64 ? 4 : DEC ? 3 : 2) flash_attn_ex_kernel(const fx_params p) {
    constexpr int NW = 4, BMR = DEC ? 16 : NW * 16, BN = FA_BN, LD = D + 8, NT = NW * 32, KD = D / 16, ND = D / 8;
    constexpr uint32_t QB = (uint32_t)(BMR * LD * sizeof(TI)), TILE_B = (uint32_t)(BN * LD * sizeof(TI));
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c2 = 2 * (lane & 3);

    const int sp = (int)(blockIdx.x % (unsigned)p.n_splits), rest = (int)(blockIdx.x / (unsigned)p.n_splits);
    const int grp = rest / (p.hg * p.n_mtiles), within = rest - grp * p.hg * p.n_mtiles; /* group, place in it */
    const int gh = min(p.hg, p.n_bh - grp * p.hg);                                          /* pairs in it */
    const int j = within / gh, bh = grp * p.hg + (within - j * gh);
    const int mt = p.causal ? p.n_mtiles - 1 - j : j;
    const int b = bh / p.Hkv, hk = bh - b * p.Hkv;
    const int row0 = mt * BMR, last = min(row0 + BMR, p.M) - 1; /* the tile's rows: row0 .. last */
    const bool split = DEC || last - row0 < 16;                  /* CTA-uniform */
    const int kv_lo = sp * p.split_keys;
    int kv_hi = min(p.Tkv, kv_lo + p.split_keys);
    if (p.causal) kv_hi = min(kv_hi, last / p.G + p.off + 1); /* the last row's diagonal: nothing above it loads */
    const int nkt = kv_hi > kv_lo ? (kv_hi - kv_lo + BN - 1) / BN : 0;

    const uint32_t q_s = smem_u32(fa_smem), k_s = q_s + QB, v_s = k_s + 2 * TILE_B;
    const size_t krs = (size_t)p.k_rs, vrs = (size_t)p.v_rs;
    const TI *kbase = NULL, *vbase = NULL;
    fx_load_q<TI, D, BMR, NT>(q_s, p, b, hk, row0, tid);
    if (nkt > 0) {
        kbase = reinterpret_cast<const TI *>(p.k) + (long long)b * p.k_bs + (long long)hk * D +
                (long long)kv_lo * p.k_rs;
        vbase = reinterpret_cast<const TI *>(p.v) + (long long)b * p.v_bs + (long long)hk * D +
                (long long)kv_lo * p.v_rs;
        fa_load_tile<TI, D, BN, NT, false>(k_s, kbase, krs, kv_hi - kv_lo, tid);
        fa_load_tile<TI, D, BN, NT, false>(v_s, vbase, vrs, kv_hi - kv_lo, tid);
    }
    cp_async_commit();

    const int qw = split ? 0 : warp, kw = split ? warp * 16 : 0;
    const int w0 = row0 + qw * 16, wl = min(w0 + 15, last); /* the warp's rows w0 .. wl */
    const bool active = w0 <= last;                         /* warp-uniform */
    const int lim_a = fx_lim(p, kv_hi, min(w0 + g, wl)), lim_b = fx_lim(p, kv_hi, min(w0 + g + 8, wl));
    const int w_lo = fx_lim(p, kv_hi, w0), w_hi = fx_lim(p, kv_hi, wl); /* lim is monotone in r */

    const uint32_t q_addr = q_s + (uint32_t)(((qw * 16 + (lane & 15)) * LD + (lane >> 4) * 8) * sizeof(TI));
    const uint32_t k_addr =
        k_s + (uint32_t)(((kw + (lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8) * sizeof(TI));
    const uint32_t v_addr = v_s + (uint32_t)(((kw + (lane & 15)) * LD + (lane >> 4) * 8) * sizeof(TI));

    uint32_t qf[KD][4];
    float o[1][ND][4], ms[1][2], l[1][2];
#pragma unroll
    for (int n = 0; n < ND; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
    ms[0][0] = ms[0][1] = -INFINITY;
    l[0][0] = l[0][1] = 0.0f;

    for (int kt = 0; kt < nkt; kt++) {
        const int buf = kt & 1;
        cp_async_wait<0>();
        __syncthreads(); /* tile kt visible to all; every warp is done with buffer buf ^ 1 */
        if (kt + 1 < nkt) {
            const int r1 = (kt + 1) * BN;
            const uint32_t nb = (uint32_t)(buf ^ 1) * TILE_B;
            if (kv_lo + r1 + BN <= kv_hi) {
                fa_load_tile<TI, D, BN, NT, true>(k_s + nb, kbase + (size_t)r1 * krs, krs, BN, tid);
                fa_load_tile<TI, D, BN, NT, true>(v_s + nb, vbase + (size_t)r1 * vrs, vrs, BN, tid);
            } else {
                fa_load_tile<TI, D, BN, NT, false>(k_s + nb, kbase + (size_t)r1 * krs, krs, kv_hi - kv_lo - r1, tid);
                fa_load_tile<TI, D, BN, NT, false>(v_s + nb, vbase + (size_t)r1 * vrs, vrs, kv_hi - kv_lo - r1, tid);
            }
            cp_async_commit();
        }
        if (!active) continue;
        if (kt == 0) {
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                ldsm_x4(q_addr + kk * 32, qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
#pragma unroll
                for (int r = 0; r < 4; r++) qf[kk][r] ^= p.qneg;
            }
        }
        const uint32_t kb = k_addr + (uint32_t)buf * TILE_B, vb = v_addr + (uint32_t)buf * TILE_B;
        const int k0 = kv_lo + kt * BN + kw; /* the first key of the warp's part of the tile */
        if (k0 >= w_hi) continue;           /* no row of the warp sees a key here */
        if (split) {
            if (k0 + 16 <= w_lo)
                fa_tile<TI, D, 1, true, 1, false, 0>(o, ms, l, qf, q_addr, kb, vb, 16, p.sl2, p.qneg, lane);
            else
                fa_tile<TI, D, 1, true, 1, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, lim_a - k0, p.sl2, p.qneg,
                                                          lane, lim_b - k0);
        } else if (k0 + BN <= w_lo) {
            fa_tile<TI, D, 1, true, BN / 16, false, 0>(o, ms, l, qf, q_addr, kb, vb, BN, p.sl2, p.qneg, lane);
        } else {
            const int va = lim_a - k0, vb2 = lim_b - k0;
            switch ((min(BN, w_hi - k0) + 15) / 16) {
            case 1:
                fa_tile<TI, D, 1, true, 1, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, va, p.sl2, p.qneg, lane, vb2);
                break;
            case 2:
                fa_tile<TI, D, 1, true, 2, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, va, p.sl2, p.qneg, lane, vb2);
                break;
            case 3:
                fa_tile<TI, D, 1, true, 3, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, va, p.sl2, p.qneg, lane, vb2);
                break;
            default:
                fa_tile<TI, D, 1, true, 4, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, va, p.sl2, p.qneg, lane, vb2);
                break;
            }
        }
    }
    if (nkt == 0) { /* no K/V tile: the Q copies must land before the staging below reuses their rows */
        cp_async_wait<0>();
        __syncthreads();
    }

    if (split) {
        /* merge the 4 partial states into warp 0's through the K/V buffers, as flash_attn_kernel does; a warp that
         * saw no key has m = -inf and l = 0 (reference 0 when every m is -inf: weights 2^-inf = 0, never NaN) */
        constexpr int NV = 4 + 4 * ND;
        static_assert((NW - 1) * NV * 32 * 4 <= 4 * BN * LD * (int)sizeof(TI), "merge buffer exceeds K/V smem");
        float *mb = reinterpret_cast<float *>(fa_smem + QB);
        if (!fa_merge_warps<NW, ND>(ms[0], l[0], o[0], mb, warp, lane)) return;
    }
    if (!active) return;

    float l0 = l[0][0], l1 = l[0][1];
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);

    if (p.n_splits > 1) {
        /* the partial state of the thread's two rows (ms is already the same in the 4 threads of a quad) */
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = w0 + g + 8 * half;
            if (r > last) continue;
            const int t = r / p.G, h = hk * p.G + (r - t * p.G);
            const long long slot = (long long)sp * p.R + ((long long)b * p.H + h) * p.Tq + t;
            float *po = p.ws_o + slot * D + c2;
#pragma unroll
            for (int n = 0; n < ND; n++)
                *reinterpret_cast<float2 *>(po + n * 8) = make_float2(o[0][n][2 * half], o[0][n][2 * half + 1]);
            if ((lane & 3) == 0)
                *reinterpret_cast<float2 *>(p.ws_ml + 2 * slot) = make_float2(ms[0][half], half ? l1 : l0);
        }
        return;
    }

    /* O / l in out_dt, staged in the warp's own Q rows (split mode: warp 0, rows 0..15), then 16-byte chunks */
    constexpr int SROW = LD * (int)sizeof(TI), OCH = D * (int)sizeof(TO) / 16;
    const float sc = fa_out_scale<TO>(p.out_scale), rcp = 1.0f / sc;
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f; /* no key seen: 0 */
    unsigned char *st = fa_smem + (size_t)warp * 16 * SROW;
#pragma unroll
    for (int n = 0; n < ND; n++) {
        st2(st + g * SROW + (n * 8 + c2) * (int)sizeof(TO), o[0][n][0] * inv0, o[0][n][1] * inv0, sc, rcp, TO());
        st2(st + (g + 8) * SROW + (n * 8 + c2) * (int)sizeof(TO), o[0][n][2] * inv1, o[0][n][3] * inv1, sc, rcp,
            TO());
    }
    __syncwarp();
    unsigned char *obase = reinterpret_cast<unsigned char *>(p.o);
#pragma unroll
    for (int i = 0; i < (16 * OCH + 31) / 32; i++) {
        const int e = lane + i * 32;
        if ((16 * OCH) % 32 == 0 || e < 16 * OCH) {
            const int r = e / OCH, c = e % OCH;
            if (w0 + r <= last)
                *reinterpret_cast<uint4 *>(obase + fx_out_off<TO>(p, b, hk, w0 + r, D) + c * 16) =
                    *reinterpret_cast<const uint4 *>(st + r * SROW + c * 16);
        }
    }
}

/* Merges the n_splits partial states of every row, one CTA (4 warps) a row: m = max_s m_s, weights w_s =
 * 2^(m_s - m) (0 for a split that saw no key), l = sum_s w_s l_s, O = sum_s w_s O_s / l (0 when l = 0), written in
 * out_dt as the main kernel's epilogue would. Warp w sums the splits s = w, w + 4, ... with 16-byte loads (lane: 4
 * columns), 4 splits' loads in flight at a time; the 4 warp sums meet in shared memory. (A first version, one warp
 * a row looping over the splits with dependent 8-byte loads, took ~25 us for 43 splits at B 1 on an H200: a chain of
 * L2 latencies with 8 CTAs in the whole grid.) */
template <typename TO> __global__ void __launch_bounds__(128) flash_attn_combine_kernel(const fx_params p, int D) {
    __shared__ float wsh[FX_MAX_SPLITS], red[2][4];
    __shared__ float4 part[4][32];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, n = p.n_splits;
    const long long row = blockIdx.x;
    const float2 *ml = reinterpret_cast<const float2 *>(p.ws_ml);
    const float2 st = tid < n ? ml[tid * p.R + row] : make_float2(-INFINITY, 0.0f); /* n <= 128 = threads */
    float m = st.x;
#pragma unroll
    for (int w = 16; w >= 1; w >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
    if (lane == 0) red[0][warp] = m;
    __syncthreads();
    m = fmaxf(fmaxf(red[0][0], red[0][1]), fmaxf(red[0][2], red[0][3]));
    const float ref = m == -INFINITY ? 0.0f : m;
    const float w_s = st.x == -INFINITY ? 0.0f : fast_exp2(st.x - ref);
    if (tid < n) wsh[tid] = w_s;
    float L = w_s * st.y;
#pragma unroll
    for (int w = 16; w >= 1; w >>= 1) L += __shfl_xor_sync(0xffffffffu, L, w);
    if (lane == 0) red[1][warp] = L;
    __syncthreads();
    L = red[1][0] + red[1][1] + red[1][2] + red[1][3];
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (4 * lane < D) {
        const float *base = p.ws_o + row * D + 4 * lane;
#pragma unroll 4
        for (int s = warp; s < n; s += 4) {
            const float4 x = *reinterpret_cast<const float4 *>(base + (long long)s * p.R * D);
            const float w = wsh[s]; /* the O of a split that saw no key is 0 (written so), never garbage */
            acc.x = fmaf(w, x.x, acc.x), acc.y = fmaf(w, x.y, acc.y);
            acc.z = fmaf(w, x.z, acc.z), acc.w = fmaf(w, x.w, acc.w);
        }
    }
    part[warp][lane] = acc;
    __syncthreads();
    if (warp > 0 || 4 * lane >= D) return;
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    float4 o = part[0][lane];
    for (int w = 1; w < 4; w++) {
        const float4 x = part[w][lane];
        o.x += x.x, o.y += x.y, o.z += x.z, o.w += x.w;
    }
    const int t = (int)(row % p.Tq), bh = (int)(row / p.Tq), h = bh % p.H, b = bh / p.H;
    unsigned char *orow = reinterpret_cast<unsigned char *>(p.o) +
                          ((long long)b * p.o_bs + (long long)t * p.o_rs + (long long)h * D + 4 * lane) *
                              (long long)sizeof(TO);
    const float sc = fa_out_scale<TO>(p.out_scale), rcp = 1.0f / sc;
    st2(orow, o.x * inv, o.y * inv, sc, rcp, TO());
    st2(orow + 2 * sizeof(TO), o.z * inv, o.w * inv, sc, rcp, TO());
}

/* ---- host side of the general kernel --------------------------------------------------------------------------- */

/* Key ranges actually used when asking for n over ntiles 64-key tiles (whole tiles per range). */
static int fx_ranges(int n, int ntiles) {
    const int per = (ntiles + n - 1) / n;
    return (ntiles + per - 1) / per;
}

/* Key ranges for ctas CTAs over ntiles 64-key tiles, slots resident CTAs on the device. Requested (>= 1): that
 * many, at most one a tile. Automatic, as FlashAttention-2's num_splits_heuristic (flash_api.cpp) reasons: for
 * every n up to min(ntiles, FX_MAX_SPLITS), the wave efficiency e(n) = w / ceil(w) of w = ctas * ranges(n) / slots
 * waves, and the smallest n within 85% of the best e (a CTA's run time is about its share of the keys, so a last
 * partial wave costs a whole wave's time: B 64 x 8 KV heads decode is 512 CTAs, 1.3 waves of 396 at D 128, so it
 * takes 2 key ranges); none when there are 4 or more waves already (e >= 0.8). FlashAttention-2 also returns 1
 * once the CTAs fill 80% of the slots; that would leave the 1.3-wave case above unsplit. */
static int fx_splits(int requested, long long ctas, int ntiles, long long slots) {
    const int cap = ntiles < FX_MAX_SPLITS ? ntiles : FX_MAX_SPLITS;
    if (cap <= 1) return 1;
    if (requested >= 1) return fx_ranges(requested < cap ? requested : cap, ntiles);
    if (ctas >= 4 * slots) return 1;
    double eff[FX_MAX_SPLITS + 1], best = 0.0;
    for (int n = 1; n <= cap; n++) {
        const double w = (double)ctas * fx_ranges(n, ntiles) / (double)slots;
        eff[n] = w / ceil(w);
        if (eff[n] > best) best = eff[n];
    }
    for (int n = 1; n <= cap; n++)
        if (eff[n] >= 0.85 * best) return fx_ranges(n, ntiles);
    return 1;
}

/* Plans (and unless plan_only, launches) one instantiation: kernel attribute and occupancy cached per device
 * (host-side queries only: allowed during stream capture), the split count, the workspace. */
template <typename TI, typename TO, int D, bool DEC>
static int fx_run(const tpk_attn_args *a, fx_params *p, int plan_only, int *splits_out, size_t *bytes_out,
                  cudaStream_t stream) {
    constexpr int BMR = DEC ? 16 : 64;
    const size_t smem = (size_t)(BMR + 4 * FA_BN) * (D + 8) * sizeof(TI);
    static int s_occ[FX_MAX_DEV], s_sms[FX_MAX_DEV], s_l2[FX_MAX_DEV]; /* 0 = not queried yet (benign races) */
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return (int)e;
    if (dev < 0 || dev >= FX_MAX_DEV) return TPK_INVALID;
    if (smem > 48 * 1024) /* every call, as fa_launch: it lives in the device's context */
        e = cudaFuncSetAttribute(flash_attn_ex_kernel<TI, TO, D, DEC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem);
    if (e != cudaSuccess) return (int)e;
    if (s_occ[dev] == 0) {
        int sms = 0, occ = 0, l2 = 0;
        e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
        if (e == cudaSuccess)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, flash_attn_ex_kernel<TI, TO, D, DEC>, 128, smem);
        if (e != cudaSuccess) return (int)e;
        s_sms[dev] = sms > 0 ? sms : 1;
        s_l2[dev] = l2 > 0 ? l2 : 1;
        s_occ[dev] = occ > 0 ? occ : 1;
    }
    p->n_mtiles = (p->M + BMR - 1) / BMR;
    const long long kv_pair = (long long)a->Tkv * D * 2 * (long long)sizeof(TI); /* K and V of one (b, hk) */
    const long long hg = kv_pair > 0 ? (long long)s_l2[dev] / 2 / kv_pair : p->n_bh;
    p->hg = hg < 1 ? 1 : hg > p->n_bh ? p->n_bh : (int)hg;
    const long long ctas = (long long)p->n_bh * p->n_mtiles;
    const int ntiles = (a->Tkv + FA_BN - 1) / FA_BN;
    int n = a->Tkv > 0 ? fx_splits(a->num_splits, ctas, ntiles, (long long)s_sms[dev] * s_occ[dev]) : 1;
    const size_t per_split = (size_t)p->R * (size_t)(D + 2) * sizeof(float);
    if (!plan_only && n > 1 && (size_t)n * per_split > a->workspace_bytes) {
        const size_t fit = a->workspace ? a->workspace_bytes / per_split : 0;
        n = fit >= 2 ? (int)fit : 1;
    }
    /* L = whole tiles per range; the count actually needed for L */
    const int tiles_per = (ntiles + n - 1) / (n > 0 ? n : 1);
    p->split_keys = (tiles_per > 0 ? tiles_per : 1) * FA_BN;
    p->n_splits = a->Tkv > 0 ? (a->Tkv + p->split_keys - 1) / p->split_keys : 1;
    if (splits_out) *splits_out = p->n_splits;
    if (bytes_out) *bytes_out = p->n_splits > 1 ? (size_t)p->n_splits * per_split : 0;
    if (plan_only) return 0;
    const long long blocks = ctas * p->n_splits;
    if (blocks > 0x7FFFFFFFLL) return TPK_INVALID;
    if (p->n_splits > 1) {
        p->ws_o = reinterpret_cast<float *>(a->workspace);
        p->ws_ml = p->ws_o + (size_t)p->n_splits * (size_t)p->R * D;
    }
    flash_attn_ex_kernel<TI, TO, D, DEC><<<(unsigned)blocks, 128, smem, stream>>>(*p);
    e = cudaGetLastError();
    if (e != cudaSuccess || p->n_splits == 1) return (int)e;
    const long long cblocks = p->R; /* one CTA a row */
    if (cblocks > 0x7FFFFFFFLL) return TPK_INVALID;
    flash_attn_combine_kernel<TO><<<(unsigned)cblocks, 128, 0, stream>>>(*p, D);
    return (int)cudaGetLastError();
}

template <typename TI, typename TO, int D>
static int fx_by_mode(const tpk_attn_args *a, fx_params *p, int plan_only, int *splits, size_t *bytes,
                      cudaStream_t s) {
    return p->M <= 16 ? fx_run<TI, TO, D, true>(a, p, plan_only, splits, bytes, s)
                      : fx_run<TI, TO, D, false>(a, p, plan_only, splits, bytes, s);
}

template <typename TI, typename TO>
static int fx_by_d(const tpk_attn_args *a, fx_params *p, int plan_only, int *splits, size_t *bytes, cudaStream_t s) {
    switch (a->D) {
    case 32: return fx_by_mode<TI, TO, 32>(a, p, plan_only, splits, bytes, s);
    case 64: return fx_by_mode<TI, TO, 64>(a, p, plan_only, splits, bytes, s);
    case 80: return fx_by_mode<TI, TO, 80>(a, p, plan_only, splits, bytes, s);
    case 96: return fx_by_mode<TI, TO, 96>(a, p, plan_only, splits, bytes, s);
    case 128: return fx_by_mode<TI, TO, 128>(a, p, plan_only, splits, bytes, s);
    default: return TPK_INVALID;
    }
}

template <typename TI>
static int fx_by_out(const tpk_attn_args *a, fx_params *p, int plan_only, int *splits, size_t *bytes,
                     cudaStream_t s) {
    switch (a->out_dt) {
    case TP_F16: return fx_by_d<TI, __half>(a, p, plan_only, splits, bytes, s);
    case TP_BF16: return fx_by_d<TI, __nv_bfloat16>(a, p, plan_only, splits, bytes, s);
    case TP_E4M3: return fx_by_d<TI, e4m3_t>(a, p, plan_only, splits, bytes, s);
    default: return TPK_INVALID;
    }
}

/* Checks *a and fills the kernel parameters; 1 = work to do, 0 = empty (success, no launch), < 0 = invalid.
 * check_ptrs: also the pointers (the enqueue; the plan query ignores them). */
static int fx_prepare(const tpk_attn_args *a, fx_params *p, int check_ptrs) {
    if (!a) return -1;
    if ((a->in_dt != TP_F16 && a->in_dt != TP_BF16) ||
        (a->out_dt != TP_F16 && a->out_dt != TP_BF16 && a->out_dt != TP_E4M3))
        return -1;
    if (a->D != 32 && a->D != 64 && a->D != 80 && a->D != 96 && a->D != 128) return -1;
    if (a->B < 0 || a->H < 0 || a->Hkv < 1 || a->Tq < 0 || a->Tkv < 0 || a->num_splits < 0) return -1;
    if (a->H % a->Hkv != 0 || !isfinite(a->scale)) return -1;
    const long long s_in[6] = {a->q_batch_stride, a->q_row_stride, a->k_batch_stride,
                               a->k_row_stride,   a->v_batch_stride, a->v_row_stride};
    for (int i = 0; i < 6; i++)
        if (s_in[i] < 0 || s_in[i] % 8 != 0) return -1; /* 16-byte steps for cp.async */
    const long long oq = a->out_dt == TP_E4M3 ? 16 : 8;  /* 16-byte output chunks */
    if (a->o_batch_stride < 0 || a->o_row_stride < 0 || a->o_batch_stride % oq != 0 || a->o_row_stride % oq != 0)
        return -1;
    if (a->B == 0 || a->H == 0 || a->Tq == 0) return 0;
    const long long M = (long long)(a->H / a->Hkv) * a->Tq, R = (long long)a->B * a->H * a->Tq;
    if (M > 0x7FFFFFFFLL - 64 || (long long)a->B * a->Hkv > 0x7FFFFFFFLL || (long long)a->Tkv + FA_BN > 0x7FFFFFFFLL)
        return -1;
    if (check_ptrs) {
        if (!a->q || !a->o || (a->Tkv > 0 && (!a->k || !a->v))) return -1;
        if (((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v | (uintptr_t)a->o | (uintptr_t)a->workspace) % 16)
            return -1;
        if (a->out_dt == TP_E4M3 && !a->out_scale) return -1;
    }
    memset(p, 0, sizeof *p);
    p->q = a->q, p->k = a->k, p->v = a->v, p->o = a->o;
    p->q_bs = a->q_batch_stride, p->q_rs = a->q_row_stride, p->k_bs = a->k_batch_stride, p->k_rs = a->k_row_stride;
    p->v_bs = a->v_batch_stride, p->v_rs = a->v_row_stride, p->o_bs = a->o_batch_stride, p->o_rs = a->o_row_stride;
    p->out_scale = a->out_scale;
    p->R = R;
    p->H = a->H, p->Hkv = a->Hkv, p->G = a->H / a->Hkv, p->Tq = a->Tq, p->Tkv = a->Tkv, p->M = (int)M;
    p->n_bh = a->B * a->Hkv;
    p->off = a->Tkv - a->Tq;
    p->causal = a->causal != 0;
    p->sl2 = fabsf(a->scale) * 1.44269504088896340736f; /* log2(e): softmax with exp2; the sign goes into Q */
    p->qneg = a->scale < 0.0f ? 0x80008000u : 0u;
    return 1;
}

static int fx_dispatch(const tpk_attn_args *a, int plan_only, int *splits, size_t *bytes, cudaStream_t s) {
    fx_params p;
    const int r = fx_prepare(a, &p, !plan_only);
    if (r < 0) return TPK_INVALID;
    if (r == 0) {
        if (splits) *splits = 1;
        if (bytes) *bytes = 0;
        return (int)cudaSuccess;
    }
    return a->in_dt == TP_F16 ? fx_by_out<__half>(a, &p, plan_only, splits, bytes, s)
                              : fx_by_out<__nv_bfloat16>(a, &p, plan_only, splits, bytes, s);
}

extern "C" int tpk_flash_attention_ex(const tpk_attn_args *a, tp_stream stream) {
    return fx_dispatch(a, 0, NULL, NULL, (cudaStream_t)stream);
}

extern "C" int tpk_flash_attention_ex_plan(const tpk_attn_args *a, int *splits, size_t *bytes) {
    return fx_dispatch(a, 1, splits, bytes, (cudaStream_t)0);
}
