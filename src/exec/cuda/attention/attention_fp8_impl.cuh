/* attention_fp8_impl.cuh: fused multi-head attention with FP8 (E4M3) numerics: Q, K, V and P quantized to E4M3,
 * both products with fp32 accumulation (contract in attention_fp8.h). The kernel and its launch, included by
 * attention_fp8.cu (the product: product kind MK 1) and by bench/attention_fp8_variants.cu
 * (tpk_flash_attention_fp8_variant: MK 0 too). The structure follows attention.cu
 * (FlashAttention-2: a warp owns 16 query rows, S = Q K^T in registers, online softmax in fp32, P from the S
 * accumulators straight into A fragments, O += P V), with what FP8 changes.
 *
 * Two product kinds (tpk_flash_attention_fp8_variant, bench/lab_variants.h):
 *   MK 0: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 on E4M3 operands in shared memory (V^T stored
 *         transposed, see below). On sm_90 this PTX instruction is NOT native: ptxas lowers each one to
 *         F2FP.F16.E4M3.UNPACK_B conversions of both operands to fp16, two HMMA.16816.F32 from a zero accumulator and
 *         four FADDs into C (checked in the SASS of this file; Hopper's FP8 tensor cores are reached only through
 *         wgmma, which needs sm_90a). Kept as the literal E4M3-mma.sync implementation, in the labs and the GPU
 *         tests only (bench/attention_fp8_variants.cu): the product compiles MK 1 alone.
 *   MK 1 (the default): the same E4M3 values held as fp16 (every E4M3 value is exact in fp16), K and V row-major,
 *         mma.sync.m16n8k16.f16 with fp32 accumulation, V by ldmatrix.trans, P rounded to E4M3 then widened
 *         (cvt.rn.satfinite.e4m3x2.f32 + cvt.rn.f16x2.e4m3x2). The same products as MK 0 executes, without the
 *         unpacks and FADDs: 20% faster at ViT-B/16 (H200: 59 us against 74 us).
 *
 * Quantization on load. qkv arrives in fp16/bf16, so every element must be divided by its tensor's scale and
 * rounded to E4M3 on the way into shared memory (q = sat(rne(x / s)), x / s the IEEE quotient computed from
 * rcp = RN(1 / s) with one FMA correction, as attention.cu's E4M3 epilogue; two results per cvt.rn.satfinite.
 * e4m3x2.f32). That costs ~5 instructions per element, about as much per element as the whole attention costs per
 * key of a 16-row tile, so the work decomposition quantizes each K/V element as few times as possible: a CTA
 * (8 warps) quantizes a whole chunk of up to KCAP keys of its head into shared memory at once (every key when
 * T <= KCAP: 320 keys for D = 64 with MK 1, 640 with MK 0), then every warp runs its 16-row query tiles over all
 * resident keys without further barriers. "A head per CTA" (variants 1, 3; the default's choice when that still
 * gives 2 CTAs per SM, as ViT-B/16 at batch 64 with its 768 heads does) has the 8 warps take the head's query tiles
 * in rounds (T = 197: 13 tiles, 2 rounds), so each K/V element is read and quantized exactly once; "128 rows per
 * CTA" (variants 2, 4) gives more CTAs for few heads and quantizes K/V once per CTA. Keys beyond KCAP are streamed
 * chunk by chunk (128 rows per CTA then). Each warp quantizes its own 16 Q rows into a private tile.
 * Measured (bench/attention_fp8_lab.cu, H200, B 64, H 12, T 197, D 64): a tile-by-tile software pipeline of the
 * K/V loads (one barrier per tile) was slower (67 against 61 us), and so is quantizing K/V once per 128 rows (71
 * against 59 us).
 *
 * Why this is not faster than attention.cu (59 against 52 us at ViT-B/16 on the H200, 73 against 61 us at T = 256;
 * E4M3 output 64 us): on sm_90, mma.sync gives FP8 no more tensor throughput than fp16 (MK 0 is emulated on the fp16
 * path, MK 1 is that path), the per-tile work is the fp16 kernel's plus P's rounding to E4M3, and quantizing Q, K
 * and V adds ~5 instructions per element; only wgmma (sm_90a) could make FP8 attention faster on Hopper.
 *
 * Tiles, MK 0 (per warp, per 64-key tile; D = 64): S (16 x 64): 2 k32 steps x 8 n8 blocks = 16 mma.m16n8k32.e4m3 with
 * K's B fragments by ldmatrix (K row-major [key][d], 8-bit elements: an 8x8 b16 ldmatrix matrix is 8 keys x 16 d,
 * exactly the B fragment of k32 (4 consecutive d per thread)); row max over the quad, running max m, exp2 by the
 * SFU; P = 2^8 * 2^(S sl2 - m) packed to E4M3 four at a time; O (16 x D) += P V: 2 k32 steps x 8 n8 blocks, plus
 * one n8 block against a constant all-ones B operand (0x38 = 1.0 in every byte) that yields the row sum
 * l = sum of the quantized P in fp32 from the tensor core itself (no FADDs, no shuffles).
 *
 * (MK 0) P in registers. mma.m16n8k32's A fragment gives each thread 4 CONSECUTIVE k (keys) of a row (k = 4 t .. 4 t
 * + 3, t = lane % 4), while the S accumulators give it keys {2t, 2t + 1} of each n8 block. Instead of shuffling
 * bytes between threads, the k order of the P V product is permuted: A position 4 t + e of a 16-key half holds key 2
 * t + (e & 1) + 8 (e >> 1) (what the thread has: two adjacent keys from each of two n8 blocks), and V is stored in
 * shared memory with the same permutation of its key axis, so the sum is unchanged.
 *
 * (MK 0) V transposed. P V needs V as the "col" (K-major) B operand, i.e. V^T [d][key] with keys contiguous, and
 * ldmatrix .trans only transposes 16-bit elements. So V is transposed while it is quantized: a thread loads 8
 * d-values of 4 tokens (the 4 keys that fill one 32-bit word of the permuted order: 2j, 2j+1, 8+2j, 9+2j), quantizes
 * them and writes 8 words, one per row d of Vt. Rows of Vt hold kcap + 16 bytes (16 bytes of padding put the 8 rows
 * of an ldmatrix matrix in 8 different bank groups), rows of K and Q hold DP + 16 bytes for the same reason (DP = D
 * rounded up to 32; D = 80 is zero-padded to 96 along the Q K^T contraction).
 *
 * The scaling of P. p = 2^(S sl2 - m) lies in (0, 1]. E4M3's normal range starts at 2^-6 and its subnormals at
 * 2^-9, so unscaled P would lose all relative precision below 2^-6 and flush below 2^-10. Multiplying by the fixed
 * power of two 2^8 (folded into the exponent: p = ex2(S sl2 + (8 - m)), exact) keeps P in the normal range down
 * to p = 2^-14 (relative step 2^-3 at worst, as for every normal E4M3 value), and only p < 2^-18 flushes to 0, far
 * below what can change an fp16 output; 2^8 * 1 = 256 stays below 448, so nothing saturates. A larger power (e.g.
 * 2^8.8 ~ 448) would not be a power of two; 2^8 is the largest power of two below 448.
 * The row sum. l sums the quantized P (the ones column), not the fp32 p, so the weights applied to V,
 * P_j / l, sum to exactly 1: the output is a convex combination of the quantized V rows whatever the rounding of P,
 * and rounding P perturbs the output by sum_j dP_j (v_j - out) / l rather than sum_j dP_j v_j / l (attention
 * outputs often sit on a common offset of V, which the second form would scale by the rounding error). It also
 * costs nothing: one extra n8 block per k step instead of a tree of FADDs per tile.
 *
 * Softmax granularity. The running max is updated once per 64-key tile (keys [64 j, 64 j + 64) from key 0, in
 * every variant: chunk boundaries are multiples of 64), and each tile's P is quantized relative to the max so far,
 * then rescaled in fp32 when a later tile raises it; the test's CPU emulation does exactly this.
 *
 * Ragged T. Keys >= T are zero in shared memory (K and V, up to the next multiple of 32), get score -inf before
 * the row max and probability 0 after the exp; the last tile computes only the 32-key (MK 0) or 16-key (MK 1)
 * chunks that hold keys < T.
 * Query rows >= T are zero and never stored. Output rows are written straight from the accumulators (4 bytes per
 * thread and n8 block for F16/BF16, 2 for E4M3). */
#ifndef TP_ATTENTION_FP8_IMPL_CUH
#define TP_ATTENTION_FP8_IMPL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exec/cuda/attention/attention_fp8.h"
#include "exec/cuda/ptx/attention_ptx.cuh"

#define F8_INVALID ((int)cudaErrorInvalidValue)

namespace {

constexpr int F8_BN = 64;  /* keys per softmax tile */
constexpr int F8_NW = 8;   /* warps per CTA */
constexpr int F8_NT = F8_NW * 32;
constexpr uint32_t F8_ONES = 0x38383838u;     /* four E4M3 1.0 */
constexpr uint32_t F8_ONES_F16 = 0x3C003C00u; /* two fp16 1.0 */

struct e4m3_out {}; /* output tag: E4M3 with a scale */

/* Shared-memory geometry per head dim D and product kind MK (0: E4M3 operands, mma.m16n8k32.e4m3; 1: the same
 * E4M3 values held as fp16, mma.m16n8k16.f16). DP: Q K^T contraction length in shared memory (MK 0: D rounded up
 * to 32, zero-padded); LD: bytes per Q or K row (and V row for MK 1), 16 bytes of padding; KCAP: resident keys per
 * chunk, so that two CTAs fit in an SM's shared memory (K, V and 8 warps' Q tiles about 100 KB at most). */
template <int D, int MK> struct f8_geom {
    static constexpr int DP = MK == 0 ? (D + 31) / 32 * 32 : D;
    static constexpr int LD = MK == 0 ? DP + 16 : (D + 8) * 2;
    static constexpr int QF = MK == 0 ? DP / 32 : D / 16; /* A fragments (k steps) per 16-row Q tile */
    static constexpr int KCAP = MK == 0 ? (D <= 32 ? 1280 : D <= 64 ? 640 : D <= 96 ? 448 : 320)
                                        : (D <= 32 ? 576 : D <= 64 ? 320 : D <= 96 ? 192 : 128);
};

/* ---- PTX wrappers ---------------------------------------------------------------------------------------------- */

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void sts128(uint32_t addr, uint4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

/* c (16x8 fp32) += a (16x32 E4M3, row) * b (32x8 E4M3, col) */
__device__ __forceinline__ void mma_e4m3(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap(); /* E4M3 mma needs sm_89+ (the build targets sm_90) */
#endif
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* c (16x8 fp32) += a (16x16 fp16, row) * b (16x8 fp16, col) */
__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two fp32 -> E4M3 (sat, RNE) -> fp16 (exact: every E4M3 value is an fp16 value), x0 in the low half. */
__device__ __forceinline__ uint32_t qdq2_f16(float x0, float x1) {
    uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("{\n\t.reg .b16 t;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 t, %2, %1;\n\t"
        "cvt.rn.f16x2.e4m3x2 %0, t;\n}\n"
        : "=r"(r)
        : "f"(x0), "f"(x1));
#else
    r = 0;
    __trap();
#endif
    return r;
}

/* Four fp32 -> four E4M3 (sat, RNE) in one word, x0 in the lowest byte. cvt.e4m3x2.f32 d, a, b puts a in the
 * upper byte of d. */
__device__ __forceinline__ uint32_t pack4_e4m3(float x0, float x1, float x2, float x3) {
    uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("{\n\t.reg .b16 lo, hi;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n\t"
        "mov.b32 %0, {lo, hi};\n}\n"
        : "=r"(r)
        : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
#else
    r = 0;
    __trap();
#endif
    return r;
}
__device__ __forceinline__ uint16_t pack2_e4m3(float x0, float x1) {
    uint16_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;\n" : "=h"(r) : "f"(x0), "f"(x1));
#else
    r = 0;
    __trap();
#endif
    return r;
}

/* one 32-bit word of two input elements -> two floats (lo = the lower address) */
__device__ __forceinline__ float2 unpack2(uint32_t u, __half) {
    __half2 h;
    memcpy(&h, &u, 4);
    return __half22float2(h);
}
__device__ __forceinline__ float2 unpack2(uint32_t u, __nv_bfloat16) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xFFFF0000u));
}

/* 4 input elements (two words) -> 4 E4M3, sat(rne(x / s)) */
template <typename TI> __device__ __forceinline__ uint32_t quant4(uint32_t w0, uint32_t w1, float s, float rcp) {
    const float2 a = unpack2(w0, TI()), b = unpack2(w1, TI());
    return pack4_e4m3(div_rn(a.x, s, rcp), div_rn(a.y, s, rcp), div_rn(b.x, s, rcp), div_rn(b.y, s, rcp));
}

__device__ __forceinline__ uint4 ldg16(const void *p) { return __ldg(reinterpret_cast<const uint4 *>(p)); }

/* ---- quantizing loads ------------------------------------------------------------------------------------------ */

/* nfill rows of the Q or K layout (f8_geom: row stride LD bytes) at dst from rows of D input elements at src
 * (stride rs elements): rows < nvalid quantized, the rest (and, for MK 0, columns D..DP-1) zero. NTH threads take
 * part (tid in [0, NTH)); U items' loads are issued before any of them is converted.
 * MK 0: an item = 16 elements (two 16-byte loads) -> 16 E4M3 bytes (one 16-byte store);
 * MK 1: an item = 8 elements (one 16-byte load) -> 8 fp16 holding the E4M3 values (one 16-byte store). */
template <typename TI, int D, int MK, int NTH>
__device__ __forceinline__ void fill_rows(uint32_t dst, const TI *__restrict__ src, size_t rs, int nvalid, int nfill,
                                          float s, float rcp, int tid) {
    typedef f8_geom<D, MK> G;
    constexpr int LD = G::LD;
    if constexpr (MK == 0) {
        constexpr int CH = G::DP / 16, U = 4;
        const int items = nfill * CH;
        for (int base = tid; base < items; base += NTH * U) {
            uint4 raw[U][2];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int it = base + u * NTH, r = it / CH, c = it - r * CH;
                raw[u][0] = raw[u][1] = make_uint4(0u, 0u, 0u, 0u);
                if (it < items && r < nvalid && c * 16 < D) {
                    const TI *p = src + (size_t)r * rs + c * 16;
                    raw[u][0] = ldg16(p);
                    raw[u][1] = ldg16(p + 8);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int it = base + u * NTH, r = it / CH, c = it - r * CH;
                if (it < items) {
                    uint4 q;
                    q.x = quant4<TI>(raw[u][0].x, raw[u][0].y, s, rcp);
                    q.y = quant4<TI>(raw[u][0].z, raw[u][0].w, s, rcp);
                    q.z = quant4<TI>(raw[u][1].x, raw[u][1].y, s, rcp);
                    q.w = quant4<TI>(raw[u][1].z, raw[u][1].w, s, rcp);
                    sts128(dst + (uint32_t)(r * LD + c * 16), q);
                }
            }
        }
    } else {
        constexpr int CH = D / 8, U = 8;
        const int items = nfill * CH;
        for (int base = tid; base < items; base += NTH * U) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int it = base + u * NTH, r = it / CH, c = it - r * CH;
                raw[u] = make_uint4(0u, 0u, 0u, 0u);
                if (it < items && r < nvalid) raw[u] = ldg16(src + (size_t)r * rs + c * 8);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int it = base + u * NTH, r = it / CH, c = it - r * CH;
                if (it < items) {
                    const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
                    uint4 q;
                    uint32_t *qq = &q.x;
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const float2 f = unpack2(w[k], TI());
                        qq[k] = qdq2_f16(div_rn(f.x, s, rcp), div_rn(f.y, s, rcp));
                    }
                    sts128(dst + (uint32_t)(r * LD + c * 16), q);
                }
            }
        }
    }
}

/* MK 0: V^T [D][vs bytes] E4M3 for keys [0, nfill) (nfill a multiple of 32), the key axis permuted within each
 * 16-key half: position 4 j + e holds key 2 j + (e & 1) + 8 (e >> 1). An item = one 32-bit word position (4 keys)
 * x 8 d: 4 loads of 16 bytes, 8 stores of 4 bytes (rows d .. d + 7). Keys >= nvalid are zero. */
template <typename TI, int D, int NTH>
__device__ __forceinline__ void fill_vt(uint32_t vt, int vs, const TI *__restrict__ src, size_t rs, int nvalid,
                                        int nfill, float s, float rcp, int tid) {
    constexpr int DC = D / 8, U = 2;
    const int items = (nfill / 32) * 8 * DC;
    for (int base = tid; base < items; base += NTH * U) {
        uint4 raw[U][4];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int it = base + u * NTH, gi = it & 7, rest = it >> 3, dc = rest % DC, kc = rest / DC;
            const int t0 = kc * 32 + (gi >> 2) * 16 + 2 * (gi & 3);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = t0 + (e & 1) + 8 * (e >> 1);
                raw[u][e] = make_uint4(0u, 0u, 0u, 0u);
                if (it < items && t < nvalid) raw[u][e] = ldg16(src + (size_t)t * rs + dc * 8);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int it = base + u * NTH, gi = it & 7, rest = it >> 3, dc = rest % DC, kc = rest / DC;
            if (it < items) {
                const uint32_t a = vt + (uint32_t)(dc * 8 * vs + kc * 32 + (gi >> 2) * 16 + 4 * (gi & 3));
#pragma unroll
                for (int k = 0; k < 4; k++) { /* d = 2 k, 2 k + 1 of the item */
                    float2 f[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const uint32_t w = k == 0 ? raw[u][e].x : k == 1 ? raw[u][e].y : k == 2 ? raw[u][e].z : raw[u][e].w;
                        f[e] = unpack2(w, TI());
                    }
                    sts32(a + (uint32_t)(2 * k * vs), pack4_e4m3(div_rn(f[0].x, s, rcp), div_rn(f[1].x, s, rcp),
                                                                 div_rn(f[2].x, s, rcp), div_rn(f[3].x, s, rcp)));
                    sts32(a + (uint32_t)((2 * k + 1) * vs),
                          pack4_e4m3(div_rn(f[0].y, s, rcp), div_rn(f[1].y, s, rcp), div_rn(f[2].y, s, rcp),
                                     div_rn(f[3].y, s, rcp)));
                }
            }
        }
    }
}

/* ---- one 64-key tile for one warp ----------------------------------------------------------------------------- */

/* The softmax step of a tile on the raw scores s (NB n8 blocks; rows lane/4 and lane/4 + 8): keys >= valid masked
 * (MASK), row max over the quad, running max ms (log2 domain), s <- P = 2^(s sl2 + 8 - ms) (fp32, not yet rounded),
 * o (NO n8 blocks, the ones column included) rescaled by 2^(ms_old - ms). */
template <int NB, int NO, bool MASK>
__device__ __forceinline__ void online_softmax(float (&s)[NB][4], float (&o)[NO][4], float (&ms)[2], int valid,
                                               float sl2, int tig) {
    if (MASK) {
#pragma unroll
        for (int j = 0; j < NB; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (j * 8 + 2 * tig + (e & 1) >= valid) s[j][e] = -INFINITY;
    }
    float x0[NB], x1[NB];
#pragma unroll
    for (int j = 0; j < NB; j++) {
        x0[j] = fmaxf(s[j][0], s[j][1]);
        x1[j] = fmaxf(s[j][2], s[j][3]);
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
    /* key 0 of the tile is < T, so mx is finite; ms starts at -inf, so the rescale factor is 0 on the first tile */
    const float n0 = fmaxf(ms[0], mx0 * sl2), n1 = fmaxf(ms[1], mx1 * sl2);
    const float al0 = fast_exp2(ms[0] - n0), al1 = fast_exp2(ms[1] - n1);
    ms[0] = n0;
    ms[1] = n1;
    const float c0 = 8.0f - n0, c1 = 8.0f - n1; /* P = 2^8 2^(s sl2 - m) */
#pragma unroll
    for (int j = 0; j < NB; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = fast_exp2(fmaf(s[j][e], sl2, e < 2 ? c0 : c1));
            if (MASK && j * 8 + 2 * tig + (e & 1) >= valid) p = 0.0f; /* also right when sl2 = 0 */
            s[j][e] = p;
        }
    }
#pragma unroll
    for (int n = 0; n < NO; n++) {
        o[n][0] *= al0;
        o[n][1] *= al0;
        o[n][2] *= al1;
        o[n][3] *= al1;
    }
}

/* MK 0: S = Q K^T over NCH 32-key chunks of the tile (mma.m16n8k32.e4m3), softmax, O += P V. qa: the lane's
 * ldmatrix address in the warp's Q tile (QREG: Q's fragments already in qf); ka, va: the lane's ldmatrix addresses
 * at the tile's first key in K and V^T; vs16 = 16 rows of V^T in bytes. */
template <int D, int NCH, bool MASK, bool QREG>
__device__ __forceinline__ void tile_e4m3(float (&o)[D / 8 + 1][4], float (&ms)[2],
                                          const uint32_t (&qf)[QREG ? f8_geom<D, 0>::QF : 1][4], uint32_t qa,
                                          uint32_t ka, uint32_t va, uint32_t vs16, int valid, float sl2, int tig) {
    constexpr int LD = f8_geom<D, 0>::LD, KD = f8_geom<D, 0>::QF, ND = D / 8, NB = 4 * NCH;
    float s[NB][4];
#pragma unroll
    for (int j = 0; j < NB; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; kk++) {
        uint32_t a[4];
        if (QREG) {
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] = qf[QREG ? kk : 0][r];
        } else {
            ldsm_x4(qa + (uint32_t)(kk * 32), a[0], a[1], a[2], a[3]);
        }
#pragma unroll
        for (int jp = 0; jp < NB / 2; jp++) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4(ka + (uint32_t)(jp * 16 * LD + kk * 32), b0, b1, b2, b3);
            mma_e4m3(s[2 * jp], a, b0, b1);
            mma_e4m3(s[2 * jp + 1], a, b2, b3);
        }
    }
    online_softmax<NB, ND + 1, MASK>(s, o, ms, valid, sl2, tig);
    /* O += P V per 32-key chunk (A position 4 t + e = key 2 t + (e & 1) + 8 (e >> 1) of each 16-key half, the
     * order V^T was stored in); the ones column o[ND] accumulates l */
#pragma unroll
    for (int kc = 0; kc < NCH; kc++) {
        uint32_t pa[4];
        pa[0] = pack4_e4m3(s[4 * kc][0], s[4 * kc][1], s[4 * kc + 1][0], s[4 * kc + 1][1]);
        pa[1] = pack4_e4m3(s[4 * kc][2], s[4 * kc][3], s[4 * kc + 1][2], s[4 * kc + 1][3]);
        pa[2] = pack4_e4m3(s[4 * kc + 2][0], s[4 * kc + 2][1], s[4 * kc + 3][0], s[4 * kc + 3][1]);
        pa[3] = pack4_e4m3(s[4 * kc + 2][2], s[4 * kc + 2][3], s[4 * kc + 3][2], s[4 * kc + 3][3]);
#pragma unroll
        for (int dp = 0; dp < ND / 2; dp++) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4(va + (uint32_t)dp * vs16 + (uint32_t)(kc * 32), b0, b1, b2, b3);
            mma_e4m3(o[2 * dp], pa, b0, b1);
            mma_e4m3(o[2 * dp + 1], pa, b2, b3);
        }
        mma_e4m3(o[ND], pa, F8_ONES, F8_ONES);
    }
}

/* MK 1: the same products on the same E4M3 values, held as fp16 (exact), with mma.m16n8k16.f16 over NCH 16-key
 * chunks: K and V row-major, V's B fragments by ldmatrix.trans, P's A fragments straight from the S layout (the
 * FA2 register trick, as attention.cu), each P rounded to E4M3 and widened back to fp16. */
template <int D, int NCH, bool MASK, bool QREG>
__device__ __forceinline__ void tile_f16(float (&o)[D / 8 + 1][4], float (&ms)[2],
                                         const uint32_t (&qf)[QREG ? f8_geom<D, 1>::QF : 1][4], uint32_t qa,
                                         uint32_t ka, uint32_t va, int valid, float sl2, int tig) {
    constexpr int LD = f8_geom<D, 1>::LD, KD = D / 16, ND = D / 8, NB = 2 * NCH;
    float s[NB][4];
#pragma unroll
    for (int j = 0; j < NB; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; kk++) {
        uint32_t a[4];
        if (QREG) {
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] = qf[QREG ? kk : 0][r];
        } else {
            ldsm_x4(qa + (uint32_t)(kk * 32), a[0], a[1], a[2], a[3]);
        }
#pragma unroll
        for (int jp = 0; jp < NCH; jp++) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4(ka + (uint32_t)(jp * 16 * LD + kk * 32), b0, b1, b2, b3);
            mma_f16(s[2 * jp], a, b0, b1);
            mma_f16(s[2 * jp + 1], a, b2, b3);
        }
    }
    online_softmax<NB, ND + 1, MASK>(s, o, ms, valid, sl2, tig);
#pragma unroll
    for (int kk = 0; kk < NCH; kk++) {
        uint32_t pa[4];
        pa[0] = qdq2_f16(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = qdq2_f16(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = qdq2_f16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = qdq2_f16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < ND / 2; dp++) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4_t(va + (uint32_t)(kk * 16 * LD + dp * 32), b0, b1, b2, b3);
            mma_f16(o[2 * dp], pa, b0, b1);
            mma_f16(o[2 * dp + 1], pa, b2, b3);
        }
        mma_f16(o[ND], pa, F8_ONES_F16, F8_ONES_F16);
    }
}

/* The tile kt of the resident keys (valid = keys of it that are < the chunk's end; >= 64: a full tile). */
template <int D, int MK, bool QREG>
__device__ __forceinline__ void run_tile(float (&o)[D / 8 + 1][4], float (&ms)[2],
                                         const uint32_t (&qf)[QREG ? f8_geom<D, MK>::QF : 1][4], uint32_t qa,
                                         uint32_t ka, uint32_t va, uint32_t vs16, int kt, int valid, float sl2,
                                         int tig) {
    constexpr int LD = f8_geom<D, MK>::LD;
    const uint32_t kat = ka + (uint32_t)(kt * F8_BN * LD);
    if constexpr (MK == 0) {
        const uint32_t vat = va + (uint32_t)(kt * F8_BN);
        if (valid >= F8_BN)
            tile_e4m3<D, 2, false, QREG>(o, ms, qf, qa, kat, vat, vs16, valid, sl2, tig);
        else if (valid > 32)
            tile_e4m3<D, 2, true, QREG>(o, ms, qf, qa, kat, vat, vs16, valid, sl2, tig);
        else if (valid == 32)
            tile_e4m3<D, 1, false, QREG>(o, ms, qf, qa, kat, vat, vs16, valid, sl2, tig);
        else
            tile_e4m3<D, 1, true, QREG>(o, ms, qf, qa, kat, vat, vs16, valid, sl2, tig);
    } else {
        const uint32_t vat = va + (uint32_t)(kt * F8_BN * LD);
        if (valid >= F8_BN) {
            tile_f16<D, 4, false, QREG>(o, ms, qf, qa, kat, vat, valid, sl2, tig);
        } else {
            switch ((valid + 15) / 16) {
            case 1: tile_f16<D, 1, true, QREG>(o, ms, qf, qa, kat, vat, valid, sl2, tig); break;
            case 2: tile_f16<D, 2, true, QREG>(o, ms, qf, qa, kat, vat, valid, sl2, tig); break;
            case 3: tile_f16<D, 3, true, QREG>(o, ms, qf, qa, kat, vat, valid, sl2, tig); break;
            default: tile_f16<D, 4, true, QREG>(o, ms, qf, qa, kat, vat, valid, sl2, tig); break;
            }
        }
    }
}

/* ---- output ---------------------------------------------------------------------------------------------------- */

__device__ __forceinline__ void st2(__half *p, float a, float b, float, float) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void st2(__nv_bfloat16 *p, float a, float b, float, float) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void st2(e4m3_out *p, float a, float b, float sc, float rcp) {
    *reinterpret_cast<uint16_t *>(p) = pack2_e4m3(div_rn(a, sc, rcp), div_rn(b, sc, rcp));
}
template <typename TO> __device__ __forceinline__ float out_scale_of(const float *) { return 1.0f; }
template <> __device__ __forceinline__ float out_scale_of<e4m3_out>(const float *s) { return *s; }
template <typename TO> struct out_elem { static constexpr int bytes = 2; };
template <> struct out_elem<e4m3_out> { static constexpr int bytes = 1; };

/* ================================================================================================================
 * The kernel: CTA = (b, h, query group of R rounds x 8 warps x 16 rows), blockIdx.x with the group fastest.
 * Shared memory (dynamic, bytes): K [kcap][LD], then MK 0: V^T [D][kcap + 16] / MK 1: V [kcap][LD], then Q
 * [8 warps][16][LD].
 * ============================================================================================================== */
extern __shared__ __align__(16) unsigned char f8_smem[];

template <typename TI, typename TO, int D, int MK, int MINB>
__global__ void __launch_bounds__(F8_NT, MINB)
    flash_attn_fp8_kernel(const TI *__restrict__ qkv, TO *__restrict__ out, const float *__restrict__ qkv_scale,
                          const float *__restrict__ out_scale_p, int T, int H, float scale, int G, int R, int kcap) {
    typedef f8_geom<D, MK> GM;
    constexpr int LD = GM::LD, QF = GM::QF, ND = D / 8;
    constexpr bool QREG = D <= 64;
    constexpr int OB = out_elem<TO>::bytes;

    const int grp = blockIdx.x % G, bh = blockIdx.x / G, h = bh % H, b = bh / H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    const size_t rs = (size_t)3 * H * D;
    const TI *qb = qkv + (size_t)b * T * rs + (size_t)h * D;
    const TI *kb = qb + (size_t)H * D;
    const TI *vb = qb + 2 * (size_t)H * D;

    const int vs = kcap + 16; /* MK 0: bytes per V^T row */
    const uint32_t k_s = smem_u32(f8_smem), v_s = k_s + (uint32_t)(kcap * LD);
    const uint32_t q_s = v_s + (uint32_t)(MK == 0 ? D * vs : kcap * LD);
    const uint32_t qw_s = q_s + (uint32_t)(warp * 16 * LD); /* this warp's Q tile */

    /* scales: sl2 = ((s_q s_k) scale) log2 e in fp32; its sign goes into Q (x / -s_q = -(x / s_q) exactly) */
    const float sq = __ldg(qkv_scale), sk = __ldg(qkv_scale + 1), sv = __ldg(qkv_scale + 2);
    float sl2 = __fmul_rn(__fmul_rn(__fmul_rn(sq, sk), scale), 1.44269504088896340736f);
    const float sqd = sl2 < 0.0f ? -sq : sq;
    sl2 = fabsf(sl2);
    const float rq = 1.0f / sqd, rk = 1.0f / sk, rv = 1.0f / sv; /* IEEE divisions, once */

    const int mtiles = (T + 15) / 16, nkc = (T + kcap - 1) / kcap;

    /* per-lane ldmatrix addresses: Q (A: rows lane % 16, 16-byte column lane / 16), K (B: keys (lane & 7) + 8 (lane
     * / 16), 16-byte column (lane / 8) & 1); V: MK 0 V^T (B: rows d = (lane & 7) + 8 (lane / 16), 16-byte column
     * (lane / 8) & 1), MK 1 V row-major for ldmatrix.trans (rows lane % 16, 16-byte column lane / 16) */
    const uint32_t qa = qw_s + (uint32_t)((lane & 15) * LD + (lane >> 4) * 16);
    const uint32_t ka = k_s + (uint32_t)(((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 16);
    const uint32_t va = MK == 0 ? v_s + (uint32_t)(((lane & 7) + ((lane >> 4) << 3)) * vs + ((lane >> 3) & 1) * 16)
                                : v_s + (uint32_t)((lane & 15) * LD + (lane >> 4) * 16);
    const uint32_t vs16 = (uint32_t)(16 * vs);

    for (int r = 0; r < R; r++) {
        const int mt = (grp * R + r) * F8_NW + warp;
        const bool active = mt < mtiles; /* warp-uniform */
        const int q0 = mt * 16;
        uint32_t qf[QREG ? QF : 1][4];
        float o[ND + 1][4], ms[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n <= ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

        if (active) { /* the warp's 16 Q rows, into its own Q tile */
            fill_rows<TI, D, MK, 32>(qw_s, qb + (size_t)q0 * rs, rs, min(16, T - q0), 16, sqd, rq, lane);
            __syncwarp();
        }
        for (int c = 0; c < nkc; c++) {
            const int k0 = c * kcap, len = min(kcap, T - k0), nfill = (len + 31) & ~31;
            if (r == 0) { /* R > 1 only when there is one chunk: the keys stay resident across rounds */
                if (c > 0) __syncthreads(); /* every warp is done with chunk c - 1 */
                fill_rows<TI, D, MK, F8_NT>(k_s, kb + (size_t)k0 * rs, rs, len, nfill, sk, rk, tid);
                if constexpr (MK == 0)
                    fill_vt<TI, D, F8_NT>(v_s, vs, vb + (size_t)k0 * rs, rs, len, nfill, sv, rv, tid);
                else
                    fill_rows<TI, D, MK, F8_NT>(v_s, vb + (size_t)k0 * rs, rs, len, nfill, sv, rv, tid);
                __syncthreads();
            }
            if (!active) continue;
            if (QREG && c == 0) {
#pragma unroll
                for (int kk = 0; kk < (QREG ? QF : 1); kk++)
                    ldsm_x4(qa + (uint32_t)(kk * 32), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
            }
            for (int kt = 0; kt * F8_BN < len; kt++)
                run_tile<D, MK, QREG>(o, ms, qf, qa, ka, va, vs16, kt, len - kt * F8_BN, sl2, tig);
        }
        if (!active) continue;

        /* out = O s_v / l, l from the ones column (every column of o[ND] holds it) */
        const float osc = out_scale_of<TO>(out_scale_p), orcp = 1.0f / osc;
        const float f0 = sv / o[ND][0], f1 = sv / o[ND][2];
        const int t0 = q0 + g, t1 = q0 + g + 8;
        const size_t orow = (size_t)H * D * OB;
        unsigned char *p0 = reinterpret_cast<unsigned char *>(out) + ((size_t)b * T + t0) * orow +
                            (size_t)(h * D + 2 * tig) * OB;
        unsigned char *p1 = p0 + 8 * orow;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            if (t0 < T) st2(reinterpret_cast<TO *>(p0 + n * 8 * OB), o[n][0] * f0, o[n][1] * f0, osc, orcp);
            if (t1 < T) st2(reinterpret_cast<TO *>(p1 + n * 8 * OB), o[n][2] * f1, o[n][3] * f1, osc, orcp);
        }
    }
}

/* ---- host side ------------------------------------------------------------------------------------------------- */

struct f8_args {
    const void *qkv;
    const float *qkv_scale;
    void *out;
    const float *out_scale;
    int B, T, H;
    float scale;
    int decomp; /* 0 auto, 1 a head per CTA, 2 128 rows per CTA */
    cudaStream_t s;
};

template <typename TI, typename TO, int D, int MK> int f8_launch(const f8_args *a) {
    typedef f8_geom<D, MK> GM;
    constexpr int LD = GM::LD, KCAP = GM::KCAP, MINB = D <= 64 ? 2 : 1; /* <= 128 registers: 2 CTAs per SM */
    const int T = a->T;
    const int kcap = T <= KCAP ? (T + 63) / 64 * 64 : KCAP;
    const int nkc = (T + kcap - 1) / kcap, mtiles = (T + 15) / 16, rmax = (mtiles + F8_NW - 1) / F8_NW;
    const long long heads = (long long)a->B * a->H;
    int R = 1;
    if (nkc == 1 && a->decomp == 1) {
        R = rmax;
    } else if (nkc == 1 && a->decomp == 0) {
        /* the most rounds per CTA (fewest K/V quantizations) that still give 2 CTAs per SM */
        int dev = 0, sms = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return (int)e;
        for (R = rmax; R > 1; R--)
            if (heads * ((mtiles + F8_NW * R - 1) / (F8_NW * R)) >= 2LL * sms) break;
    }
    const int G = (mtiles + F8_NW * R - 1) / (F8_NW * R);
    const long long blocks = heads * G;
    if (blocks > 0x7FFFFFFFLL) return F8_INVALID;
    const size_t smem = (size_t)kcap * LD + (MK == 0 ? (size_t)D * (kcap + 16) : (size_t)kcap * LD) +
                        (size_t)F8_NW * 16 * LD;
    if (smem > 48 * 1024) {
        /* a host-side function attribute: no stream work, allowed while a stream is being captured */
        cudaError_t e = cudaFuncSetAttribute(flash_attn_fp8_kernel<TI, TO, D, MK, MINB>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return (int)e;
    }
    flash_attn_fp8_kernel<TI, TO, D, MK, MINB><<<(unsigned)blocks, F8_NT, smem, a->s>>>(
        (const TI *)a->qkv, (TO *)a->out, a->qkv_scale, a->out_scale, T, a->H, a->scale, G, R, kcap);
    return (int)cudaGetLastError();
}

template <typename TI, typename TO, int MK> int f8_by_d(int D, const f8_args *a) {
    switch (D) {
    case 32: return f8_launch<TI, TO, 32, MK>(a);
    case 64: return f8_launch<TI, TO, 64, MK>(a);
    case 80: return f8_launch<TI, TO, 80, MK>(a);
    case 96: return f8_launch<TI, TO, 96, MK>(a);
    case 128: return f8_launch<TI, TO, 128, MK>(a);
    default: return F8_INVALID;
    }
}

template <typename TI, int MK> int f8_by_out(tp_dtype out_dt, int D, const f8_args *a) {
    switch (out_dt) {
    case TP_F16: return f8_by_d<TI, __half, MK>(D, a);
    case TP_BF16: return f8_by_d<TI, __nv_bfloat16, MK>(D, a);
    case TP_E4M3: return f8_by_d<TI, e4m3_out, MK>(D, a);
    default: return F8_INVALID;
    }
}

template <int MK> int f8_by_in(tp_dtype in_dt, tp_dtype out_dt, int D, const f8_args *a) {
    switch (in_dt) {
    case TP_F16: return f8_by_out<__half, MK>(out_dt, D, a);
    case TP_BF16: return f8_by_out<__nv_bfloat16, MK>(out_dt, D, a);
    default: return F8_INVALID;
    }
}

/* the product kind of the default (variant 0) */
constexpr int F8_DEFAULT_MK = 1;

} // namespace

/* The argument checks of tpk_flash_attention_fp8 and of bench/'s tpk_flash_attention_fp8_variant, after the
 * latter's variant check (attention_fp8.h): cudaErrorInvalidValue, cudaSuccess for empty work (no launch), or F8_GO
 * to launch. */
#define F8_GO (-1)
static inline int f8_check(const void *qkv, tp_dtype in_dt, const float *qkv_scale, const void *out, tp_dtype out_dt,
                           const float *out_scale, int B, int T, int H, int D) {
    if (!(in_dt == TP_F16 || in_dt == TP_BF16) || !(out_dt == TP_F16 || out_dt == TP_BF16 || out_dt == TP_E4M3))
        return F8_INVALID;
    if (!(D == 32 || D == 64 || D == 80 || D == 96 || D == 128)) return F8_INVALID;
    if (B < 0 || T < 0 || H < 0) return F8_INVALID;
    if (B == 0 || T == 0 || H == 0) return (int)cudaSuccess;
    if (!qkv || !qkv_scale || !out || (out_dt == TP_E4M3 && !out_scale)) return F8_INVALID;
    if ((uintptr_t)qkv % 16 != 0 || (uintptr_t)out % 16 != 0) return F8_INVALID;
    return F8_GO;
}

/* The product's kernels (MK F8_DEFAULT_MK) with an explicit decomposition (f8_args.decomp: 0 = the default's choice,
 * 1 = a head per CTA, 2 = 128 rows per CTA): arguments, checks and errors as tpk_flash_attention_fp8, which is
 * decomp 0. Defined in attention_fp8.cu, for bench/attention_fp8_variants.cu (variants 0, 3 and 4). */
int f8_flash_attention_decomp(const void *qkv, tp_dtype in_dt, const float *qkv_scale, void *out, tp_dtype out_dt,
                              const float *out_scale, int B, int T, int H, int D, float scale, int decomp,
                              tp_stream stream);

#endif
