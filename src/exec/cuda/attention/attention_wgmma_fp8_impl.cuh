/* attention_wgmma_fp8_impl.cuh: fused multi-head attention with both products on Hopper's FP8 tensor cores (wgmma
 * on E4M3), contract in attention_wgmma.h (tpk_flash_attention_wgmma_fp8): the kernel, its launch and the argument
 * checks, included by attention_wgmma_fp8.cu (the product: the default configuration) and by
 * bench/attention_wgmma_fp8_variants.cu (tpk_flash_attention_wgmma_fp8_variant: every configuration). Built for
 * sm_90a only, like attention_wgmma.cu; on any other device the entry points refuse without launching.
 *
 * Numerics: those of tpk_flash_attention_fp8 (attention_fp8.h) on Q, K, V that arrive already quantized (the QKV
 * GEMM writes E4M3 with the calibrated scales): S = Q K^T exact products, fp32 accumulation; logits S sl2 with
 * sl2 = ((s_q s_k) scale) log2 e; online softmax over 64-key tiles in the log2 domain; P = sat_e4m3(rne(2^8 *
 * 2^(S sl2 - m))); O = P V and the row sum l = sum of the quantized P both on the tensor cores (V^T gets 8 extra
 * rows of ones, so one m64n72k32 wgmma yields O's 64 columns and l); out = O s_v / l rounded once.
 *
 * Work decomposition (as attention_wgmma.cu's default): one warpgroup per CTA, `qpc` query tiles of 64 rows per
 * CTA (the CTAs of one head adjacent in the grid, so the head's K and V come from L2 after the first), the head's
 * K and V resident in shared memory. Per 64-key chunk j: S = Q K_j^T (2 k32 steps, A and B from shared memory),
 * softmax on S's registers, P packed to E4M3 in registers as the A operand of O += P V_j (2 k32 steps).
 *
 * Why V is transposed in shared memory: FP8 wgmma takes both operands K-major (the transposed modes exist only for
 * 16-bit types), and P V's reduction dimension is the key. V arrives [key][d]; the CTA copies it to a staging area
 * and writes V^T [d][key] in 64-key chunks. The transpose also reorders the keys inside every 32-key block: the
 * accumulator layout of S gives thread (quad lane q) of a row the keys {2q, 2q+1, 8+2q, 9+2q} (and 16 more), while
 * the register A operand of a k32 step holds k = {4q .. 4q+3} (and 16 more) (PTX ISA, wgmma register fragments,
 * as mma.m16n8k32's); a product does not care in which order k runs as long as A and B agree, so V^T's position
 * p = 4q + i (i < 4) of a block holds key 8 (i / 2) + 2q + i % 2 (plus 16 for p >= 16), and P needs no shuffles.
 *
 * Shared memory (every operand K-major, rows of 64 bytes in the 64-byte swizzle: 16-byte chunk c of row r stored
 * at chunk c ^ ((r / 2) % 4), the pattern CUTLASS calls Swizzle<2,4,3>; tiles 512-byte aligned; descriptor stride
 * byte offset 512 = 8 rows; a k32 step moves the start address by 32 bytes):
 *   Q      qpc tiles of 64 rows x 64 B;
 *   K      tpad rows x 64 B (tpad = T rounded up to 32);
 *   V^T    one 72-row tile per 64-key chunk: rows 0..63 = d, rows 64..71 = 1.0 (0x38), 64 B of keys each;
 *   X      V's staging rows (tpad x 64 B), later each warp's output staging (16 rows, padded).
 * Ragged T: rows >= T of Q, K and V are zero-filled by cp.async (never NaN into a product); keys >= T get P = 0;
 * the last chunk is 32 keys when T % 64 is in 1..32. */
#ifndef TP_ATTENTION_WGMMA_FP8_IMPL_CUH
#define TP_ATTENTION_WGMMA_FP8_IMPL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "exec/cuda/ptx/attention_ptx.cuh"
#include "exec/cuda/attention/attention_wgmma.h"
#include "exec/cuda/ptx/wgmma_ptx.cuh"

typedef __nv_fp8_e4m3 e4m3_t; /* storage tag only */

#define TPK_INVALID ((int)cudaErrorInvalidValue)
#define W8_D 64
#define W8_ROWB 64                    /* bytes per shared-memory row: 64 E4M3 */
#define W8_QTILE 4096                 /* 64 rows x 64 B */
#define W8_VT_CHUNK (72 * W8_ROWB)    /* 64 d rows + 8 rows of ones */
#define W8_KCHUNK_DESC (4096 >> 4)    /* one 64-key chunk of K in descriptor units */
#define W8_VCHUNK_DESC (W8_VT_CHUNK >> 4)

/* byte offset of 16-byte chunk c of row r in a 64-byte-swizzled tile */
__device__ __forceinline__ uint32_t w8_sw(int r, int c) { return (uint32_t)(r * W8_ROWB + ((c ^ ((r >> 1) & 3)) << 4)); }
__device__ __forceinline__ uint64_t w8_desc(uint32_t saddr) { return wg_make_desc(saddr, 512, 2); }

/* D (64 x N fp32) = or += A (64 x 32 E4M3, descriptor) * B (32 x N, descriptor), both K-major ("ss"); and the
 * register-A form D (64 x 72) += A (registers, 4 x 4 E4M3) * B (32 x 72, descriptor) ("rs"). */
#if WG_HAVE_WGMMA
__device__ __forceinline__ void w8_ss_n32(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void w8_ss_n64(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void w8_rs_n72(float *d, const uint32_t *a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %41, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n72k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35}, {%36, %37, %38, %39}, %40, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
#else
__device__ __forceinline__ void w8_ss_n32(float *, uint64_t, uint64_t, int) { __trap(); }
__device__ __forceinline__ void w8_ss_n64(float *, uint64_t, uint64_t, int) { __trap(); }
__device__ __forceinline__ void w8_rs_n72(float *, const uint32_t *, uint64_t) { __trap(); }
#endif
template <int N> __device__ __forceinline__ void w8_ss(float *d, uint64_t da, uint64_t db, int acc) {
    if constexpr (N == 32) w8_ss_n32(d, da, db, acc);
    else w8_ss_n64(d, da, db, acc);
}

/* four fp32 -> four E4M3 (sat(rne)), a in the lowest byte */
__device__ __forceinline__ uint32_t w8_pack4(float a, float b, float c, float d) {
    uint32_t r;
    asm("{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\ncvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
        "mov.b32 %0, {lo, hi};\n}\n"
        : "=r"(r)
        : "f"(a), "f"(b), "f"(c), "f"(d));
    return r;
}

__device__ __forceinline__ uint32_t w8_prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

/* ================================================================================================================
 * One chunk of N keys (32 or 64; the first at key0) for the warpgroup's 64 query rows. Thread layout of S (the
 * accumulator of m64nN): rows r0 = 16 warp + lane / 4 (s[4j], s[4j + 1]) and r0 + 8 (s[4j + 2], s[4j + 3]) at
 * columns 8j + 2 (lane % 4) + {0, 1}. o[36]: O's 64 columns in the same layout (o[0..31]) and l (o[32..35]).
 * ============================================================================================================== */
template <int N, bool MASK, bool NEG>
__device__ __forceinline__ void w8_chunk(float (&o)[36], float (&m)[2], uint64_t qd, uint64_t kd, uint64_t vd,
                                         int key0, int T, float sl2, float asl2, int lane) {
    float s[N / 2];
    wg_fence();
    w8_ss<N>(s, qd, kd, 0);
    w8_ss<N>(s, qd + 2, kd + 2, 1); /* + 32 bytes: the second k32 step over D = 64 */
    wg_commit();
    wg_wait0(); /* this S, and the previous chunk's P V */
    wg_fence_regs(s);
    wg_fence_regs(o);
    const int c0 = key0 + 2 * (lane & 3);
    float pm[2][4];
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
    float al[2], nm[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = fmaxf(fmaxf(pm[r][0], pm[r][1]), fmaxf(pm[r][2], pm[r][3]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m[r], mx * asl2); /* finite: every chunk holds a key < T */
        al[r] = fast_exp2(m[r] - mn);            /* 0 on the first chunk (m = -inf) */
        m[r] = mn;
        nm[r] = 8.0f - mn; /* P carries 2^8 (attention_fp8.h) */
    }
#pragma unroll
    for (int j = 0; j < N / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float a = fast_exp2(fmaf(s[4 * j + e], sl2, nm[0])), c = fast_exp2(fmaf(s[4 * j + 2 + e], sl2, nm[1]));
            if (MASK && c0 + 8 * j + e >= T) a = c = 0.0f;
            s[4 * j + e] = a;
            s[4 * j + 2 + e] = c;
        }
#pragma unroll
    for (int j = 0; j < 9; j++) {
        o[4 * j] *= al[0];
        o[4 * j + 1] *= al[0];
        o[4 * j + 2] *= al[1];
        o[4 * j + 3] *= al[1];
    }
    /* k32 block kb covers the accumulator's n8 blocks 4kb .. 4kb + 3 (see the header: V^T's key order) */
    uint32_t a[N / 32][4];
#pragma unroll
    for (int kb = 0; kb < N / 32; kb++) {
        const float *x = s + 16 * kb;
        a[kb][0] = w8_pack4(x[0], x[1], x[4], x[5]);    /* row r0, keys 2q, 2q+1, 8+2q, 9+2q */
        a[kb][1] = w8_pack4(x[2], x[3], x[6], x[7]);    /* row r0 + 8 */
        a[kb][2] = w8_pack4(x[8], x[9], x[12], x[13]);  /* row r0, keys 16 + ... */
        a[kb][3] = w8_pack4(x[10], x[11], x[14], x[15]); /* row r0 + 8 */
    }
    wg_fence_regs(o);
    wg_fence();
#pragma unroll
    for (int kb = 0; kb < N / 32; kb++) w8_rs_n72(o, a[kb], vd + 2 * kb);
    wg_commit();
    wg_fence_regs(o);
}

/* The end of a query tile: out = O s_v / l, rounded once, staged per warp (16 rows, rows padded by 16 bytes so
 * the fragment stores hit distinct banks), written as 16-byte row chunks of out (B, T, H, 64); rows >= T not
 * written. */
__device__ __forceinline__ void w8_st2(unsigned char *p, float a, float b, float, __half) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void w8_st2(unsigned char *p, float a, float b, float, __nv_bfloat16) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void w8_st2(unsigned char *p, float a, float b, float s, e4m3_t) {
    /* q = sat(rne(y / s)), y / s the IEEE quotient by div_rn (attention_ptx.cuh: s and 1 / s normal, the limitation
     * attention_fp8.h states); the reciprocal is the same for every call and hoisted by the compiler */
    const float r = __frcp_rn(s);
    const uint16_t lo = __nv_cvt_float_to_fp8(div_rn(a, s, r), __NV_SATFINITE, __NV_E4M3);
    const uint16_t hi = __nv_cvt_float_to_fp8(div_rn(b, s, r), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint16_t *>(p) = (uint16_t)(lo | (hi << 8));
}

template <typename TO>
__device__ __forceinline__ void w8_epilogue(const float (&o)[36], unsigned char *st, int qt, int T, int H, int b,
                                            int h, TO *__restrict__ out, float s_v, float osc, int lane) {
    constexpr int RB = W8_D * (int)sizeof(TO), STRIDE = RB + 16, CPR = RB / 16;
    const TO otag = TO();
    const float inv0 = s_v / o[32], inv1 = s_v / o[34]; /* l: every ones-column holds the full row sum */
    const int r0 = lane >> 2, cb = 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        w8_st2(st + r0 * STRIDE + (8 * j + cb) * (int)sizeof(TO), o[4 * j] * inv0, o[4 * j + 1] * inv0, osc, otag);
        w8_st2(st + (r0 + 8) * STRIDE + (8 * j + cb) * (int)sizeof(TO), o[4 * j + 2] * inv1, o[4 * j + 3] * inv1,
               osc, otag);
    }
    __syncwarp();
    const int warp = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int i = 0; i < 16 * CPR / 32; i++) {
        const int idx = lane + 32 * i, row = idx / CPR, c = idx % CPR, q = qt * 64 + warp * 16 + row;
        if (q < T)
            *reinterpret_cast<uint4 *>(reinterpret_cast<unsigned char *>(out) +
                                       (((size_t)b * T + q) * H + h) * RB + c * 16) =
                *reinterpret_cast<const uint4 *>(st + row * STRIDE + c * 16);
    }
    __syncwarp(); /* the staging rows are rewritten by this warp's next tile */
}

/* ================================================================================================================
 * The kernel: grid B * H * nqg (b, h = blockIdx.x / nqg; query-tile group qg = blockIdx.x % nqg), 128 threads,
 * dynamic shared memory 1024 (alignment slack) + the regions of the header at q 0, k_off, vt_off, x_off.
 * qkv (B, T, 3, H, 64) E4M3; qkv_scale: s_q, s_k, s_v (device); scale: the softmax scale; NEG: scale < 0.
 * ============================================================================================================== */
template <typename TO, bool NEG, int MINB>
__global__ void __launch_bounds__(128, MINB)
    w8_attention_kernel(const uint8_t *__restrict__ qkv, const float *__restrict__ qkv_scale, TO *__restrict__ out,
                        const float *__restrict__ out_scale, int T, int H, float scale, int nqt, int qpc, int nqg,
                        int tpad, uint32_t k_off, uint32_t vt_off, uint32_t x_off) {
#if WG_HAVE_WGMMA
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char *sm = smem_raw + (base - raw);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int bh = blockIdx.x / nqg, qg = blockIdx.x % nqg, b = bh / H, h = bh % H;
    const int q_lo = qg * qpc, q_hi = min(nqt, q_lo + qpc);
    const size_t rs = (size_t)3 * H * W8_D; /* bytes per token row of qkv */
    const uint8_t *src = qkv + (size_t)b * T * rs + (size_t)h * W8_D;
    const int nkc = (tpad + 63) >> 6; /* key chunks */

    /* Q rows of this CTA's tiles, K rows, and V rows into the staging area X, all swizzled (for X only to spread the
     * transpose's reads over the banks) */
    for (int idx = tid; idx < (q_hi - q_lo) * 64 * 4; idx += 128) {
        const int r = idx >> 2, c = idx & 3, t = q_lo * 64 + r;
        const bool in = t < T;
        cp_async16(base + w8_sw(r, c), src + (in ? (size_t)t * rs : 0) + c * 16, in ? 16 : 0);
    }
    for (int idx = tid; idx < tpad * 4; idx += 128) {
        const int r = idx >> 2, c = idx & 3;
        const bool in = r < T;
        const uint8_t *p = src + (in ? (size_t)r * rs : 0) + c * 16;
        cp_async16(base + k_off + w8_sw(r, c), p + (size_t)H * W8_D, in ? 16 : 0);
        cp_async16(base + x_off + w8_sw(r, c), p + (size_t)2 * H * W8_D, in ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    /* rows 64..71 of every V^T chunk: 1.0 (the row sums); no swizzle needed, every byte is the same */
    for (int idx = tid; idx < nkc * 128; idx += 128) {
        const int ch = idx >> 7, w = idx & 127;
        *reinterpret_cast<uint32_t *>(sm + vt_off + ch * W8_VT_CHUNK + 64 * W8_ROWB + 4 * w) = 0x38383838u;
    }
    const float s_q = qkv_scale[0], s_k = qkv_scale[1], s_v = qkv_scale[2];
    float sl2 = s_q * s_k; /* the rounding order of attention_fp8.h */
    sl2 *= scale;
    sl2 *= 1.44269504088896340736f;
    const float asl2 = fabsf(sl2), osc = sizeof(TO) == 1 ? *out_scale : 1.0f;
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();

    /* V^T: item (block kb of 32 keys, position group pg of 4, d group dg of 4): 4 x 4 bytes transposed. A warp
     * takes 8 position groups x 4 d groups: reads and writes at most 2-way bank conflicts. */
    for (int idx = tid; idx < (tpad >> 5) * 128; idx += 128) {
        const int kb = idx >> 7, pg = idx & 7, dg = (idx >> 3) & 15;
        const int k0 = kb * 32 + 16 * (pg >> 2) + 2 * (pg & 3); /* keys k0, k0+1, k0+8, k0+9 -> positions 4pg.. */
        const unsigned char *x = sm + x_off + (dg & 3) * 4;
        const uint32_t r0 = *reinterpret_cast<const uint32_t *>(x + w8_sw(k0, dg >> 2));
        const uint32_t r1 = *reinterpret_cast<const uint32_t *>(x + w8_sw(k0 + 1, dg >> 2));
        const uint32_t r2 = *reinterpret_cast<const uint32_t *>(x + w8_sw(k0 + 8, dg >> 2));
        const uint32_t r3 = *reinterpret_cast<const uint32_t *>(x + w8_sw(k0 + 9, dg >> 2));
        const uint32_t t0 = w8_prmt(r0, r1, 0x5140), t1 = w8_prmt(r2, r3, 0x5140); /* bytes 0, 1 interleaved */
        const uint32_t t2 = w8_prmt(r0, r1, 0x7362), t3 = w8_prmt(r2, r3, 0x7362); /* bytes 2, 3 */
        const uint32_t w[4] = {w8_prmt(t0, t1, 0x5410), w8_prmt(t0, t1, 0x7632), w8_prmt(t2, t3, 0x5410),
                               w8_prmt(t2, t3, 0x7632)};
        const int pos = (kb & 1) * 32 + 4 * pg; /* key position inside the 64-key chunk */
        unsigned char *vt = sm + vt_off + (kb >> 1) * W8_VT_CHUNK;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int d = 4 * dg + j;
            *reinterpret_cast<uint32_t *>(vt + w8_sw(d, pos >> 4) + (pos & 15)) = w[j];
        }
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* generic-proxy writes -> the tensor cores */
    __syncthreads();

    const int nfull = T >> 6, rem = T & 63;
    const uint64_t kd0 = w8_desc(base + k_off), vd0 = w8_desc(base + vt_off);
    unsigned char *st = sm + x_off + warp * 16 * (W8_D * (int)sizeof(TO) + 16);
    for (int qt = q_lo; qt < q_hi; qt++) {
        const uint64_t qd = w8_desc(base + (qt - q_lo) * W8_QTILE);
        float o[36], m[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int i = 0; i < 36; i++) o[i] = 0.0f;
        for (int j = 0; j < nfull; j++)
            w8_chunk<64, false, NEG>(o, m, qd, kd0 + j * W8_KCHUNK_DESC, vd0 + j * W8_VCHUNK_DESC, j * 64, T, sl2,
                                     asl2, lane);
        if (rem) {
            const uint64_t kd = kd0 + nfull * W8_KCHUNK_DESC, vd = vd0 + nfull * W8_VCHUNK_DESC;
            if (rem <= 32) w8_chunk<32, true, NEG>(o, m, qd, kd, vd, nfull * 64, T, sl2, asl2, lane);
            else w8_chunk<64, true, NEG>(o, m, qd, kd, vd, nfull * 64, T, sl2, asl2, lane);
        }
        wg_wait0();
        wg_fence_regs(o);
        w8_epilogue<TO>(o, st, qt, T, H, b, h, out, s_v, osc, lane);
    }
#else
    (void)qkv, (void)qkv_scale, (void)out, (void)out_scale, (void)T, (void)H, (void)scale, (void)nqt, (void)qpc,
        (void)nqg, (void)tpad, (void)k_off, (void)vt_off, (void)x_off;
#endif
}

/* ---- host ----------------------------------------------------------------------------------------------------- */

/* Kernel configurations (tpk_flash_attention_wgmma_fp8_variant): query tiles per CTA, CTAs per SM for the register
 * allocation (__launch_bounds__: 3 -> up to 168 registers a thread, 4 -> 128). */
typedef struct {
    int qpc, minb;
} w8_variant;
/* the default configuration (variant 0 of tpk_flash_attention_wgmma_fp8_variant, bench/lab_variants.h): 2 query
 * tiles per CTA, 3 CTAs per SM; its kernel (w8_attention_kernel<TO, NEG, 3>) is the only one the product compiles */
#define W8_DEFAULT_QPC 2
#define W8_DEFAULT_MINB 3

typedef struct {
    int nqt, qpc, nqg, tpad;
    uint32_t k_off, vt_off, x_off;
    size_t smem;
} w8_geom;

static w8_geom w8_geometry(int T, int qpc, size_t out_bytes) {
    w8_geom g;
    g.nqt = (T + 63) / 64;
    g.qpc = qpc < g.nqt ? qpc : g.nqt;
    g.nqg = (g.nqt + g.qpc - 1) / g.qpc;
    g.tpad = (T + 31) & ~31;
    const size_t kbytes = ((size_t)g.tpad * W8_ROWB + 511) & ~(size_t)511;
    const size_t vtbytes = (size_t)((g.tpad + 63) / 64) * W8_VT_CHUNK;
    const size_t stage = (size_t)4 * 16 * (W8_D * out_bytes + 16); /* 4 warps x 16 output rows */
    const size_t xbytes = (size_t)g.tpad * W8_ROWB > stage ? (size_t)g.tpad * W8_ROWB : stage;
    g.k_off = (uint32_t)g.qpc * W8_QTILE;
    g.vt_off = g.k_off + (uint32_t)kbytes;
    g.x_off = g.vt_off + (uint32_t)vtbytes;
    g.smem = 1024 + g.x_off + xbytes;
    return g;
}

static size_t w8_out_bytes(tp_dtype out_dt) { return out_dt == TP_E4M3 ? 1 : 2; }

/* 1 when the current device is compute capability 9.0 and `smem` bytes fit one CTA */
static int w8_device_ok(size_t smem) {
    int dev = 0, major = 0, minor = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    return major == 9 && minor == 0 && smem <= (size_t)optin;
}

static int w8_shape_ok(tp_dtype out_dt, int T, int D) {
    return D == W8_D && T >= 1 && (out_dt == TP_F16 || out_dt == TP_BF16 || out_dt == TP_E4M3);
}

template <typename TO, bool NEG, int MINB>
static int w8_launch(const void *qkv, const float *qkv_scale, void *out, const float *out_scale, int B, int T, int H,
                     float scale, const w8_geom *g, tp_stream stream) {
    cudaError_t e = cudaFuncSetAttribute(w8_attention_kernel<TO, NEG, MINB>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g->smem);
    if (e != cudaSuccess) return (int)e;
    w8_attention_kernel<TO, NEG, MINB><<<(unsigned)((size_t)B * H * g->nqg), 128, g->smem, (cudaStream_t)stream>>>(
        (const uint8_t *)qkv, qkv_scale, (TO *)out, out_scale, T, H, scale, g->nqt, g->qpc, g->nqg, g->tpad, g->k_off,
        g->vt_off, g->x_off);
    return (int)cudaGetLastError();
}

/* The argument checks every configuration shares (qpc query tiles per CTA), in
 * tpk_flash_attention_wgmma_fp8_variant's order after its variant check: cudaErrorInvalidValue, cudaSuccess for
 * empty work (no launch), or W8_GO with the geometry in *g. */
#define W8_GO (-1)
static inline int w8_prepare(const void *qkv, const float *qkv_scale, const void *out, tp_dtype out_dt,
                             const float *out_scale, int B, int T, int H, int D, int qpc, w8_geom *g) {
    if (B < 0 || T < 0 || H < 0) return TPK_INVALID;
    if (B == 0 || T == 0 || H == 0) return (int)cudaSuccess;
    *g = w8_geometry(T, qpc, w8_out_bytes(out_dt));
    if (!w8_shape_ok(out_dt, T, D) || !w8_device_ok(g->smem)) return TPK_INVALID;
    if (!qkv || !out || !qkv_scale || ((uintptr_t)qkv & 15) || ((uintptr_t)out & 15)) return TPK_INVALID;
    if (out_dt == TP_E4M3 && !out_scale) return TPK_INVALID;
    if ((size_t)B * H * g->nqg > 0x7fffffffu) return TPK_INVALID;
    return W8_GO;
}

/* The product's kernel with qpc query tiles per CTA: arguments, checks and errors as tpk_flash_attention_wgmma_fp8,
 * which is qpc W8_DEFAULT_QPC. Defined in attention_wgmma_fp8.cu, for bench/attention_wgmma_fp8_variants.cu
 * (variants 0 and 3). */
int w8_flash_attention_qpc(const void *qkv, const float *qkv_scale, void *out, tp_dtype out_dt, const float *out_scale,
                           int B, int T, int H, int D, float scale, int qpc, tp_stream stream);

#endif
