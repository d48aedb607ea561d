/* gemm_sm90_impl.cuh: tprof's own GEMM on Hopper, contract in gemm_sm90.h: the kernel, its launch and the
 * argument checks, included by gemm_sm90.cu (the product: the variants the engines run) and by
 * bench/gemm_sm90_variants.cu (the labs' and tests' tpk_gemm_sm90_variant and tpk_gemm_sm90_fp8_variant,
 * bench/lab_variants.h: every variant). Built for sm_90a only (CMakeLists.txt: the tprof_sm90a and
 * tprof_lab_variants_sm90a object libraries); elsewhere the entry points refuse without launching.
 *
 * D (M, N) = epi(A (M, K) W (N, K)^T + bias), both operands K-major (row-major A and W), the layout wgmma reads.
 * Tiles of 128 x 128, K in steps of one 128-byte swizzle row: 64 16-bit elements, or 128 E4M3 ones (the FP8
 * instantiations: wgmma m64n128k32 e4m3, 32 bytes of K per instruction as k16 of a 16-bit type, so descriptors,
 * stages and swizzle are the same bytes; alpha = a_scale w_scale and the bias in the epilogue, E4M3 outputs
 * rounded as cuBLASLt rounds them: times the reciprocal of their scale). ViT-B/16 batch 64 on an H200
 * (bench/gemm_lab.c fp8, commit 7b94749): fc1 + GELU -> E4M3 74.8 us (variant 0; 85.3 in variant 1: with 128 of K
 * per stage fc1's whole K fits in variant 0's 6 stages) against cuBLASLt + the GELU kernel's 94.2 (FAST_ACCUM);
 * plain GEMMs 3-24% faster than cuBLASLt with its fp32 promotion and from 9% faster to 3% slower than cuBLASLt
 * without it.
 * A residual R (FP8 operands, F16 D; RES): each consumer thread reads R at its accumulators' positions (4-byte
 * pairs of the C layout) into registers before the K loop, rows 0-63 of the tile (32 registers; the rows 64-127
 * go into L2 then and into the same registers once rounds 0 and 1 have used them: 64 would not fit beside the
 * 128 accumulators), and adds them in fp32 before the rounding. An fp32-staged version (coalesced 8-byte reads in
 * the epilogue, 5 stages; commit 0627eff) ran as slowly: proj + residual 28.2 against 18.0 us without.
 * Persistent: one CTA per SM, tile t of the CTA is blockIdx.x + t gridDim.x (the N tiles of a row tile adjacent, so
 * A's rows come from DRAM once). 384 threads, warp-specialized as CUTLASS's sm90 "ping-pong" GEMMs (their
 * structure only):
 *   warpgroup 0, thread 0 (the producer): for each K step of each tile waits until ring stage s is free (mbarrier
 *       empty[s]), announces its 32 KB on full[s] (arrive.expect_tx) and issues two TMA loads (cp.async.bulk.tensor.2d:
 *       A rows m0 .. m0 + 127, W rows n0 .. n0 + 127, columns k0 .. k0 + 63) that complete on full[s]. TMA writes the
 *       128-byte swizzle itself (CU_TENSOR_MAP_SWIZZLE_128B: 16-byte chunk c of row r at c ^ (r % 8)) and zero-fills
 *       what lies outside the tensor, so ragged M, N and K need no code in the loads (the stores check their
 *       bounds). 6 stages; the producer runs on across tiles.
 *   warpgroups 1 and 2 (consumers) take the CTA's tiles in turn. Per K step: wait for full[s], 8 wgmma m64n128k16
 *       (rows 0-63 and 64-127, 4 k16 steps; descriptors as wgmma_ptx.cuh: stride byte offset 1024, +32 bytes per
 *       k16), commit, wait until only this step's group is in flight, free the previous stage (arrive on empty).
 *       128 fp32 accumulators per thread (setmaxnreg: 232 registers for the consumers, 40 for the producer).
 *   Epilogue: bias (fetched before the K loop) and the GELU in fp32, one rounding, out through per-warp staging rows
 *       in shared memory as 16-byte row-contiguous stores (the C layout's 4-byte pieces of 8 rows cost fc1 14 us).
 *   Variant 1 (HELP, tpk_gemm_sm90's choice when it computes the GELU): warps 1-3 of the producer warpgroup are
 *       helpers. A consumer writes its tile's rows 64-127 raw (fp32) to its helper buffer in shared memory
 *       (mbarriers hfull / hempty per consumer: count 128 / 96) and then writes rows 0-63 itself; the helpers add
 *       the bias, apply the GELU and store those rows (8 bytes per lane, whole rows per warp). The buffers take
 *       the room of two ring stages (4 instead of 6). Results are bit-identical to variant 0 (same arithmetic).
 *   Variant 2 (E4M3 operands, F16 D; BN = 96): variant 0 with 128 x 96 tiles (wgmma m64n96k32, 96 accumulators per
 *       consumer thread, 28 KB stages). A persistent CTA runs its tiles one after another, so a GEMM takes about
 *       ceil(tiles / SMs) tile times: ViT-B/16 batch 64's N 768 GEMMs (proj, fc2) have 594 tiles of 128 x 128 on
 *       132 SMs (5 on some SMs, 4 on others) but 792 of 128 x 96 (6 on every SM, each 0.82 of the time, measured:
 *       not 0.75). tpk_gemm_sm90_fp8_pick_variant applies that rule; its
 *       measured effect is in gemm_sm90.h. With a residual the narrower tile gains more (proj + residual 24.4
 *       against 28.0 us, plain proj 17.6 against 18.0), not yet explained.
 * Where the time goes (ViT-B/16 batch 64 shapes, bench/gemm_lab.c, a globaltimer trace of one SM, nvidia-smi
 * during a sustained run; bench/results/README.md): plain GEMMs run 2-14% behind cuBLASLt's best heuristic
 * algorithm (H200 f16: proj 28.2 vs 27.7 us, qkv 72.1 vs 70.6, fc1 93.1 vs 85.5, fc2 94.2 vs 82.4). fc1 + GELU: on
 * an H200 127.0 us (variant 0) against cuBLASLt + tpk_gelu's 127.9; on an H100, whose DRAM makes the GELU kernel
 * slower, 124 (variant 1) against 146. The GELU costs ~30 us per fc1 in either variant, wherever it runs: in
 * variant 0 the exact GELU of a 128 x 128 tile (~4.7 us, one warp per scheduler) does not hide behind the other
 * warpgroup's ~4.6 us K loop; in variant 1 each half of it still costs ~14 us whether the consumers or the helpers
 * compute it, because these GEMMs run at the GPU's 700 W power cap (SM clocks 1.2-1.6 GHz under sustained load,
 * throttle reason "SW power cap"): arithmetic costs watts, so it costs time even where it overlaps. What fusing
 * saves is the hidden activation's round trip through DRAM.
 * Sources: PTX ISA 8.x (wgmma, cp.async.bulk.tensor, mbarrier try_wait.parity / expect_tx, setmaxnreg, bar.sync /
 * bar.arrive), the CUDA driver API's cuTensorMapEncodeTiled. */
#ifndef TP_GEMM_SM90_IMPL_CUH
#define TP_GEMM_SM90_IMPL_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "exec/cuda/ptx/attention_ptx.cuh"
#include "exec/cuda/kernels/gelu.cuh"
#include "exec/cuda/kernels/pdl.cuh"
#include "exec/cuda/gemm/gemm_sm90.h"
#include "exec/cuda/ptx/wgmma_ptx.cuh"

#define TPK_INVALID ((int)cudaErrorInvalidValue)
#define GM_BM 128
#define GM_BN 128 /* the N extent of a tile; variant 2 (E4M3 operands, F16 D) has GM_BN96 */
#define GM_BN96 96
/* a 128 x 96 tile's time in hundredths of a 128 x 128 one's: 82, not 75 (likely the m64n96 wgmma's larger
 * shared-memory reads per FLOP; not verified); ViT-B/16 batch 64 on an H200 (gemm_lab fp8, commit f5d8f33): fc2
 * (K 3072) 48.8 us in 6 tiles per SM against 49.7 in 5 */
#define GM_T96 82
#define GM_ROWB 128 /* bytes of K per stage row: one swizzle row */
#define GM_THREADS 384 /* a producer warpgroup (one thread issues the TMA) + two consumer warpgroups */
#define GM_TILE_A (GM_BM * GM_ROWB)
#define GM_STAGE(bn) (GM_TILE_A + (bn) * GM_ROWB) /* a multiple of 1024 bytes for bn 128 and 96 */
#define GM_STAGES 6 /* variants 0 and 2; variant 1 has GM_STAGES_H (its helpers' buffers take the rest) */
#define GM_STAGES_H 4
/* the epilogue's staging rows: per consumer warp 8 rows of bn 16-bit values, each row padded by 16 bytes (a row
 * then starts 4 banks (bn 128) or 20 (bn 96) after the previous one: the 8 rows x 4 lanes of a C-layout store hit
 * 32 banks) */
#define GM_STG_ROW(bn) ((bn) * 2 + 16)
#define GM_STG_WARP(bn) (8 * GM_STG_ROW(bn))
/* variant 1: per consumer warpgroup a buffer of its tile's rows 64-127 in fp32 for the helper warps, rows padded by
 * 32 bytes (8 banks: the 4 rows x 4 lanes x 8 bytes of a half-warp's C-layout store hit 32 banks) */
#define GM_HB_ROW (GM_BN * 4 + 32)
#define GM_HB (64 * GM_HB_ROW)
#define GM_HELPERS 96 /* warps 1-3 of the producer warpgroup */
/* 1024: slack to align the stages to 1024 bytes */
#define GM_SMEM(help, bn)                                                                                           \
    (1024 + ((help) ? GM_STAGES_H : GM_STAGES) * GM_STAGE(bn) + 8 * GM_STG_WARP(bn) + ((help) ? 2 * GM_HB : 0))


/* ---- mbarrier and TMA (PTX ISA: mbarrier, cp.async.bulk.tensor) ------------------------------------------------ */

#if WG_HAVE_WGMMA
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* until the phase with parity `parity` of the barrier has completed (a fresh barrier is in phase 0, so waiting
 * for parity 1 returns at once: the producer's first pass over the stages) */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* box at (c0 = column, c1 = row) of the tensor map into shared memory at dst, completing on bar */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}

/* 4 bytes from global memory by a plain (coherent, not .nc) load: the residual may be the output itself, which
 * this thread overwrites later in the kernel */
__device__ __forceinline__ uint32_t ld_global_b32(const void *p) {
    uint32_t v;
    asm volatile("ld.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
#endif

/* ---- epilogue helpers -------------------------------------------------------------------------------------------- */

typedef __nv_fp8_e4m3 e4m3_t; /* storage tag only: E4M3 operands and outputs move as bytes */

/* a packed pair of the bias type as two floats */
__device__ __forceinline__ float2 gm_unpack2(uint32_t v, __half) {
    return __half22float2(*reinterpret_cast<__half2 *>(&v));
}
__device__ __forceinline__ float2 gm_unpack2(uint32_t v, __nv_bfloat16) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&v));
}

/* The epilogue's arithmetic on one fp32 accumulator a: v = alpha a + b for E4M3 operands (alpha = a_scale w_scale,
 * cuBLASLt's D = alpha (A W^T) + bias), a + b for 16-bit ones (no multiply: bit-identical to the 16-bit kernel
 * before FP8 existed); then the GELU when asked, gelu_as for an E4M3 output (the function tpk_gelu applies for one),
 * gelu_f otherwise (gelu.cuh). */
template <int F8, int O8, int GELU> __device__ __forceinline__ float gm_epi(float a, float alpha, float b) {
    float v = F8 ? fmaf(a, alpha, b) : a + b;
    if (GELU) v = O8 ? gelu_as(v) : gelu_f(v);
    return v;
}

/* two outputs packed for storing: a 16-bit type in a 32-bit word (lo first); E4M3 as sat(rne(RN(v r))) in bits
 * 0-15, r = RN(1 / d_scale) (cvt.rn.satfinite.e4m3x2). The product by the reciprocal is cuBLASLt's rounding of an
 * E4M3 D (it multiplies by the D scale it is given, gemm_cublaslt.c passes 1 / s), not kernels.cu's correctly
 * rounded quotient: the two differ by at most 1.5 fp32 ulps before the E4M3 rounding, so a code moves (by one)
 * only where v / s lies that close to a midpoint of the E4M3 grid. The correction to the quotient (two FMAs and a
 * finiteness check per output, 512 of the kernel's 3455 SASS instructions) cost fc1 + GELU -> E4M3 12 us on an
 * H200 (86.0 against 73.8 at engine build; bench/results/README.md): that epilogue is bound by instruction issue.
 * Infinities saturate, NaN stays NaN, as in the division. */
__device__ __forceinline__ uint32_t gm_pack(float x, float y, float, __half) { return pack2(x, y, __half()); }
__device__ __forceinline__ uint32_t gm_pack(float x, float y, float, __nv_bfloat16) {
    return pack2(x, y, __nv_bfloat16());
}
__device__ __forceinline__ uint32_t gm_pack(float x, float y, float r, e4m3_t) {
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(x * r, y * r), __NV_SATFINITE, __NV_E4M3);
}

/* gm_epi on round r's accumulators (bias as packed pairs of TB, gm_unpack2), in place */
template <int F8, int O8, int GELU, typename TB, int BN>
__device__ __forceinline__ void gm_epi_round(float *acc, const uint32_t *bpk, int r, float alpha) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        float *aj = acc + (r >> 1) * (BN / 2) + 4 * j + 2 * (r & 1);
        const float2 b = gm_unpack2(bpk[j], TB());
        aj[0] = gm_epi<F8, O8, GELU>(aj[0], alpha, b.x), aj[1] = gm_epi<F8, O8, GELU>(aj[1], alpha, b.y);
    }
}

/* the residual pairs (TR, packed) at a consumer lane's accumulators of rows 64 h .. 64 h + 63 of the tile at (m0,
 * n0): rpk[BN / 8 (r % 2) + j] for round r = 2 h + r % 2 (gm_epi_round's rows and columns); 0 outside R */
template <int BN, typename TR>
__device__ __forceinline__ void gm_load_res(uint32_t *rpk, const TR *R, int m0, int n0, int h, int warp, int lane,
                                            int M, int N) {
#pragma unroll
    for (int q = 0; q < 2; q++)
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            const int m = m0 + 64 * h + warp * 16 + 8 * q + (lane >> 2), n = n0 + 8 * j + 2 * (lane & 3);
            rpk[q * (BN / 8) + j] = m < M && n < N ? ld_global_b32(R + (size_t)m * N + n) : 0u;
        }
}

/* round r's accumulators += the residual pairs rpk[BN / 8 (r % 2) + j] (gm_load_res) */
template <typename TR, int BN>
__device__ __forceinline__ void gm_add_round(float *acc, const uint32_t *rpk, int r) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        float *aj = acc + (r >> 1) * (BN / 2) + 4 * j + 2 * (r & 1);
        const float2 v = gm_unpack2(rpk[(r & 1) * (BN / 8) + j], TR());
        aj[0] += v.x, aj[1] += v.y;
    }
}

/* one k step of a 64 x BN block: wgmma m64n128 (any operand type) or m64n96 (E4M3) */
template <int BN, typename TI>
__device__ __forceinline__ void gm_mma(float *acc, uint64_t da, uint64_t db, int accumulate, TI tag) {
    if constexpr (BN == GM_BN96) wg_ss_n96_e4(acc, da, db, accumulate);
    else wg_ss_n128(acc, da, db, accumulate, tag);
}

/* ---- weights converted in shared memory (WC: weight-only FP8) ---------------------------------------------------- */

/* four E4M3 codes (a 32-bit word, low byte first) as two packed pairs of T, exact (every E4M3 value is an FP16 and a
 * BF16 value; NaN stays NaN) */
__device__ __forceinline__ void gm_e4m3x4(uint32_t v, uint32_t &lo, uint32_t &hi, __half) {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(lo) : "h"((unsigned short)(v & 0xFFFFu)));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(hi) : "h"((unsigned short)(v >> 16)));
}
__device__ __forceinline__ void gm_e4m3x4(uint32_t v, uint32_t &lo, uint32_t &hi, __nv_bfloat16) {
    uint32_t a, b;
    gm_e4m3x4(v, a, b, __half());
    const float2 fa = __half22float2(*reinterpret_cast<__half2 *>(&a)), fb = __half22float2(*reinterpret_cast<__half2 *>(&b));
    __nv_bfloat162 ba = __float22bfloat162_rn(fa), bb = __float22bfloat162_rn(fb);
    lo = *reinterpret_cast<uint32_t *>(&ba), hi = *reinterpret_cast<uint32_t *>(&bb);
}

/* NCH 16-byte chunks of converted values (v: 4 NCH words) into row r of the W tile at dst, chunks c0 .. c0 + NCH - 1
 * of the row, where TMA's 128-byte swizzle puts them (chunk c at 16 (c ^ (r % 8))) */
template <int NCH>
__device__ __forceinline__ void gm_store_chunks(uint32_t dst, int r, int c0, const uint32_t *v) {
    const uint32_t row = dst + 128u * (uint32_t)r;
#pragma unroll
    for (int h = 0; h < NCH; h++)
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n"
                     ::"r"(row + 16u * (uint32_t)((c0 + h) ^ (r & 7))), "r"(v[4 * h]), "r"(v[4 * h + 1]),
                     "r"(v[4 * h + 2]), "r"(v[4 * h + 3])
                     : "memory");
}
/* the conversion's end: the writes made visible to the async proxy (wgmma), then the warpgroup's barrier */
__device__ __forceinline__ void gm_convert_done(int bar) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("bar.sync %0, 128;\n" ::"r"(bar) : "memory");
}

/* The converting warpgroup's first half of a stage's conversion: its U 16-byte units of codes (u = ctid, ctid + 128,
 * ...) from shared memory into registers, then named barrier bar, so that no thread writes values over codes another
 * has not read (the codes and the values share the W tile) */
template <int U> __device__ __forceinline__ void gm_load_units(uint4 (&q)[U], uint32_t src, int ctid, int bar) {
#pragma unroll
    for (int k = 0; k < U; k++)
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(q[k].x), "=r"(q[k].y), "=r"(q[k].z), "=r"(q[k].w)
                     : "r"(src + 16u * (uint32_t)(k * 128 + ctid))
                     : "memory");
    asm volatile("bar.sync %0, 128;\n" ::"r"(bar) : "memory");
}

/* A weight stage's BN rows x 64 E4M3 codes (TMA, no swizzle: row r's 64 bytes at src + 64 r; src = the upper half
 * of the stage's W tile) rewritten in place as BN rows x 64 values of T in the layout TMA's 128-byte swizzle gives a
 * 16-bit tile (16-byte chunk c of row r at dst + 128 r + 16 (c ^ (r % 8)), dst 1024-aligned), which the wgmma
 * descriptors read. By the consumer warpgroup (128 threads, ctid), named barrier bar: every code is read into
 * registers before any value is written (the two halves overlap), then the writes are made visible to the async
 * proxy (wgmma) before any thread of the warpgroup issues one. A thread takes 16-byte units u ctid, ctid + 128, ...
 * (row u / 4, chunk u % 4: a warp reads 512 contiguous bytes, no bank conflict) and writes each as 32 bytes, row r's
 * values 16 c .. 16 c + 15 (chunks 2 c and 2 c + 1). */
template <typename T, int BN>
__device__ __forceinline__ void gm_convert_w(uint32_t dst, uint32_t src, int ctid, int bar) {
    enum { U = BN * 64 / 16 / 128 }; /* units per thread: 4 (BN 128) */
    uint4 q[U];
    gm_load_units<U>(q, src, ctid, bar);
#pragma unroll
    for (int k = 0; k < U; k++) {
        const int u = k * 128 + ctid, r = u >> 2, c = u & 3;
        uint32_t v[8];
        gm_e4m3x4(q[k].x, v[0], v[1], T());
        gm_e4m3x4(q[k].y, v[2], v[3], T());
        gm_e4m3x4(q[k].z, v[4], v[5], T());
        gm_e4m3x4(q[k].w, v[6], v[7], T());
        gm_store_chunks<2>(dst, r, 2 * c, v);
    }
    gm_convert_done(bar);
}

/* Weight-only NVFP4 (WC 2): a stage's BN rows x 64 E2M1 codes (32 bytes a row, the even element in the low nibble:
 * gemv.h's layout) by TMA, unswizzled, at src (the last quarter of the W tile), and the row's 4 UE4M3 block scales
 * of the stage (one per 16 values) in sc: rewritten in place as values of T, e2m1 x ue4m3 (at most 6 significant
 * bits within [2^-10, 2688]: exact in FP16 and BF16; the per-tensor s2 is the epilogue's alpha), in the swizzled
 * layout gm_convert_w writes. A thread takes units u = ctid, ctid + 128 (row u / 2, half u % 2 of the row's 32 bytes
 * = values 32 (u % 2) .. + 31, scales 2 (u % 2), + 1: sc[k] holds unit k's two scale codes, low byte first). Each
 * nibble goes to the top of an FP16 exponent (e2m1 2^-14, exact, E2M1's subnormal 0.5 included), then times the
 * scale 2^14 in fp32 (exact), then to T (exact). */
__device__ __forceinline__ uint32_t gm_e2m1x2_f16(uint32_t t) { /* codes at bits 12-15 and 28-31 */
    return (t & 0x80008000u) | ((t >> 3) & 0x0E000E00u);
}
template <typename T> __device__ __forceinline__ uint32_t gm_pair(float a, float b);
template <> __device__ __forceinline__ uint32_t gm_pair<__half>(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t gm_pair<__nv_bfloat16>(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <typename T, int BN>
__device__ __forceinline__ void gm_convert_w4(uint32_t dst, uint32_t src, const uint32_t *sc, int ctid, int bar) {
    enum { U = BN * 32 / 16 / 128 }; /* units per thread: 2 (BN 128) */
    uint4 q[U];
    gm_load_units<U>(q, src, ctid, bar);
#pragma unroll
    for (int k = 0; k < U; k++) {
        const int u = k * 128 + ctid, r = u >> 1, c = u & 1;
        uint32_t sh;
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(sh) : "h"((unsigned short)(sc[k] & 0xFFFFu)));
        const float2 sf = __half22float2(*reinterpret_cast<__half2 *>(&sh));
        const float s0 = sf.x * 16384.0f, s1 = sf.y * 16384.0f; /* values 0-15, 16-31 of the unit */
        const uint32_t w[4] = {q[k].x, q[k].y, q[k].z, q[k].w};
        uint32_t v[16]; /* 32 values as 16 pairs of T, in order */
#pragma unroll
        for (int b = 0; b < 4; b++)   /* word b: values 8 b .. 8 b + 7 */
#pragma unroll
            for (int i = 0; i < 4; i++) { /* byte i of the word: values 8 b + 2 i (low nibble), + 1 (high) */
                const uint32_t byte = (w[b] >> (8 * i)) & 0xFFu;
                const uint32_t h = gm_e2m1x2_f16((byte << 12) | (byte << 24)); /* low nibble at 12-15, high at 28-31 */
                const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h));
                const float s = b < 2 ? s0 : s1;
                v[4 * b + i] = gm_pair<T>(f.x * s, f.y * s);
            }
        gm_store_chunks<4>(dst, r, 4 * c, v); /* values 32 c .. 32 c + 31: chunks 4 c .. 4 c + 3 */
    }
    gm_convert_done(bar);
}

/* a unit's two UE4M3 scale codes (gm_convert_w4's sc[k]) of stage kt: row n, bytes 4 kt + 2 c, + 1 of the (N, K / 16)
 * scales (K % 32 == 0: 2-byte aligned); 0 for a row past N or scales past K (their codes are TMA's zeros anyway) */
__device__ __forceinline__ uint32_t gm_scale2(const unsigned char *wsc, int n, int N, int K, int kt, int c) {
    const int b = 4 * kt + 2 * c;
    if (n >= N || b >= K / 16) return 0u;
    unsigned short v;
    asm volatile("ld.global.nc.u16 %0, [%1];\n" : "=h"(v) : "l"(wsc + (size_t)n * (K / 16) + b));
    return v;
}

/* Sibling linears as one GEMM (GRP, tpk_gemm_sm90_fp8_group): W their E4M3 weights one after the other (N rows in
 * all), cs N fp32 column scales (member j's per-tensor weight scale over its columns: alpha = a_scale cs[n]),
 * member j's columns [off[j], off[j + 1]) written to D[j], (M, off[j + 1] - off[j]) row-major. Every off a multiple
 * of 8, so a 16-byte chunk of the output never spans two members. */
#define GM_GROUP_MAX 4
typedef struct {
    const float *cs;
    void *D[GM_GROUP_MAX];
    int off[GM_GROUP_MAX + 1];
    int n;
} gm_group;

/* GRP: the member holding column n (constant indices only, so the parameter stays in its bank) and its output
 * address for row m */
template <typename TO> __device__ __forceinline__ TO *gm_group_at(const gm_group &g, int m, int n) {
    const int j = (n >= g.off[1]) + (g.n > 2 && n >= g.off[2]) + (g.n > 3 && n >= g.off[3]);
    const int o = j == 0 ? 0 : j == 1 ? g.off[1] : j == 2 ? g.off[2] : g.off[3];
    const int w = (j == 0 ? g.off[1] : j == 1 ? g.off[2] : j == 2 ? g.off[3] : g.off[4]) - o;
    TO *d = (TO *)(j == 0 ? g.D[0] : j == 1 ? g.D[1] : j == 2 ? g.D[2] : g.D[3]);
    return d + (size_t)m * w + (n - o);
}

/* gm_epi_round for GRP: alpha times this lane's column scales (cpk[j]: columns n0 + 8 j + 2 (lane % 4), + 1) */
template <int O8, int GELU, typename TB, int BN>
__device__ __forceinline__ void gm_epi_round_cs(float *acc, const uint32_t *bpk, const float2 *cpk, int r,
                                                float alpha) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        float *aj = acc + (r >> 1) * (BN / 2) + 4 * j + 2 * (r & 1);
        const float2 b = gm_unpack2(bpk[j], TB());
        aj[0] = gm_epi<1, O8, GELU>(aj[0], alpha * cpk[j].x, b.x);
        aj[1] = gm_epi<1, O8, GELU>(aj[1], alpha * cpk[j].y, b.y);
    }
}

/* ---- the kernel ---------------------------------------------------------------------------------------------------- */

/* TI: the operands' type (__half, __nv_bfloat16, e4m3_t); TB: the bias's (TO for 16-bit operands, __half for E4M3
 * ones); TO: the output's (TI for 16-bit operands; __half or e4m3_t for E4M3 ones). HELP 0: variant 0 (each
 * consumer warpgroup's epilogue writes its whole tile); 1: variant 1 (rows 64-127 of each tile go through shared
 * memory to the helper warps). a_scale, w_scale: E4M3 operands' storage scales; d_scale: an E4M3 output's (device
 * pointers, read once per thread: graph replays see their current values). */
template <typename TI, typename TB, typename TO, int GELU, int HELP, int RES, int BN, int WC, int GRP>
__global__ void __launch_bounds__(GM_THREADS, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                     const TB *__restrict__ bias, const TO *R, TO *D, const float *__restrict__ a_scale,
                     const float *__restrict__ w_scale, const float *__restrict__ d_scale, int M, int N, int K,
                     const unsigned char *__restrict__ wsc, const __grid_constant__ gm_group grp) {
#if WG_HAVE_WGMMA
    /* F8: E4M3 operands; WC: 16-bit A and weights converted to TI in shared memory, E4M3 (1) or NVFP4 (2, its block
     * scales wsc, alpha = its s2), alpha = w_scale; SC: the epilogue scales by alpha */
    enum { F8 = sizeof(TI) == 1, O8 = sizeof(TO) == 1, SC = F8 || WC };
    extern __shared__ unsigned char smem_raw[];
    /* full[s], then empty[s], then (variant 1) hfull[c], hempty[c] of the helper buffers */
    __shared__ __align__(8) uint64_t bars[2 * GM_STAGES + 4];
    static_assert(!RES || (sizeof(TO) == 2 && !GELU && !HELP), "the residual epilogue: 16-bit D, variant 0, no GELU");
    static_assert(BN == GM_BN || (BN == GM_BN96 && sizeof(TI) == 1 && sizeof(TO) == 2 && !HELP),
                  "96-wide tiles: E4M3 operands, F16 D, no helpers");
    static_assert(!WC || (sizeof(TI) == 2 && sizeof(TO) == 2 && BN == GM_BN && !HELP),
                  "converted weights: 16-bit A and D, 128-wide tiles, no helpers");
    static_assert(!GRP || (sizeof(TI) == 1 && sizeof(TO) == 2 && !RES && !HELP && !WC && !GELU),
                  "sibling groups: E4M3 operands, F16 D, plain epilogue, no helpers");
    const int S = HELP ? GM_STAGES_H : GM_STAGES;
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u, bar0 = smem_u32(bars);
    const int tid = threadIdx.x, wg = tid >> 7;
    const int BK = GM_ROWB / (int)sizeof(TI), KT = (K + BK - 1) / BK;
    const int tiles_n = (N + BN - 1) / BN, tiles = tiles_n * ((M + GM_BM - 1) / GM_BM);
#define FULL(s) (bar0 + 8u * (uint32_t)(s))
#define EMPTY(s) (bar0 + 8u * (uint32_t)(GM_STAGES + (s)))
#define HFULL(c) (bar0 + 8u * (uint32_t)(2 * GM_STAGES + (c)))
#define HEMPTY(c) (bar0 + 8u * (uint32_t)(2 * GM_STAGES + 2 + (c)))
    const uint32_t hbuf = base + S * GM_STAGE(BN) + 8 * GM_STG_WARP(BN); /* variant 1: the helper buffers */
    if (tid == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(FULL(s), 1);    /* the producer's expect_tx; the TMA bytes complete the phase */
            mbar_init(EMPTY(s), 128); /* every thread of the consuming warpgroup, after its wgmma's on the stage */
        }
        for (int c = 0; c < 2 && HELP; c++) {
            mbar_init(HFULL(c), 128);         /* consumer c's threads, after writing their rows 64-127 */
            mbar_init(HEMPTY(c), GM_HELPERS); /* the helpers, after reading them */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    /* PDL (pdl.cuh): the next kernel may be scheduled now (on the SMs this grid leaves free, or once its CTAs
     * exit); every thread but the producer waits here for the kernels before, since it reads activations, their
     * scales or the residual, or writes D; the producer first issues the weight loads of its first stages
     * (constants), then waits before any activation load */
    tpk_pdl_trigger();
    if (tid != 0) tpk_pdl_wait();
    const float alpha = tid == 0 ? 1.0f
                        : F8     ? __ldg(a_scale) * (GRP ? 1.0f : __ldg(w_scale)) /* GRP: the columns' own */
                        : WC     ? __ldg(w_scale)
                                 : 1.0f;
    const float os = O8 && tid != 0 ? __frcp_rn(__ldg(d_scale)) : 1.0f; /* r = RN(1 / d_scale): gm_pack */

    /* the CTA's i-th tile is blockIdx.x + i gridDim.x (N tiles of one row tile adjacent); its K steps are the
     * pipeline's steps i KT .. i KT + KT - 1 (stage = step % S, phase = (step / S) & 1) */
    /* setmaxnreg (the whole warpgroup, same value): the 384 x 168 registers of the launch go 40 / 232 / 232 to
     * the producer warpgroup and the consumers, or 56 / 224 / 224 when its warps 1-3 are variant 1's helpers. The
     * sum cannot exceed the launch's: an increase waits for registers the other warpgroup freed, forever when
     * there are too few (session 9's converter-warp kernels at 96 / 208 hung). */
    enum { REG_P = HELP ? 56 : 40, REG_C = HELP ? 224 : 232 };
    static_assert(REG_P + 2 * REG_C <= GM_THREADS / 128 * 168, "setmaxnreg: more registers than the launch has");
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"((int)REG_P) : "memory");
        if (tid == 0) {
            /* the first tile's first npre stages: their weights before the PDL wait (the stages are empty at the
             * start: no wait), the activations after it */
            const uint32_t npre = blockIdx.x < (unsigned)tiles ? (uint32_t)min(S, KT) : 0u;
            const uint32_t wbytes = WC == 1 ? BN * 64 : WC == 2 ? BN * 32 : GM_STAGE(BN) - GM_TILE_A;
            const uint32_t woff = GM_TILE_A + (WC == 1 ? BN * 64 : WC == 2 ? BN * 96 : 0);
            for (uint32_t kt = 0; kt < npre; kt++) {
                mbar_expect_tx(FULL(kt), GM_TILE_A + wbytes);
                tma_load_2d(base + kt * GM_STAGE(BN) + woff, &tmB, WC == 2 ? (int)kt * 32 : (int)kt * BK,
                            (int)(blockIdx.x % (unsigned)tiles_n) * BN, FULL(kt));
            }
            tpk_pdl_wait();
            uint32_t step = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int m0 = (t / tiles_n) * GM_BM, n0 = (t % tiles_n) * BN;
                for (int kt = 0; kt < KT; kt++, step++) {
                    const uint32_t s = step % S, ph = (step / S) & 1u, sa = base + s * GM_STAGE(BN);
                    /* WC: the weights' BN x 64 E4M3 codes into the upper half of the W tile (gm_convert_w);
                     * WC 2: BN x 32 bytes of E2M1 codes into the last quarter (gm_convert_w4) */
                    if (step >= npre) {
                        mbar_wait(EMPTY(s), ph ^ 1u);
                        mbar_expect_tx(FULL(s), GM_TILE_A + wbytes);
                    }
                    tma_load_2d(sa, &tmA, kt * BK, m0, FULL(s));
                    if (step >= npre) tma_load_2d(sa + woff, &tmB, WC == 2 ? kt * 32 : kt * BK, n0, FULL(s));
                }
            }
        } else if (HELP && tid >= 32) {
            /* variant 1's helpers: the CTA's i-th tile belongs to consumer i % 2, its rows 64-127 wait in that
             * consumer's buffer (hfull's phase i / 2). Warp h (0-2) takes rows h, h + 3, ...; lane l columns
             * 4 l .. 4 l + 3 (16 bytes of fp32 in, 4 outputs out: a warp reads and writes whole rows). */
            const int hw = (tid >> 5) - 1, lane = tid & 31;
            for (int i = 0, t = blockIdx.x; t < tiles; i++, t += gridDim.x) {
                const int c = i & 1, m0 = (t / tiles_n) * GM_BM + 64, n = (t % tiles_n) * BN + 4 * lane;
                float2 b01 = make_float2(0.0f, 0.0f), b23 = b01;
                if (bias && n < N) { /* 4-byte aligned: two pairs */
                    b01 = gm_unpack2(__ldg(reinterpret_cast<const unsigned int *>(bias + n)), TB());
                    b23 = gm_unpack2(__ldg(reinterpret_cast<const unsigned int *>(bias + n + 2)), TB());
                }
                mbar_wait(HFULL(c), (uint32_t)(i >> 1) & 1u);
                const uint32_t hb = hbuf + (uint32_t)(c * GM_HB) + 16u * (uint32_t)lane;
#pragma unroll 4
                for (int row = hw; row < 64; row += 3) {
                    float4 v;
                    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                                 : "r"(hb + (uint32_t)(row * GM_HB_ROW))
                                 : "memory");
                    const uint32_t lo = gm_pack(gm_epi<SC, O8, GELU>(v.x, alpha, b01.x),
                                                gm_epi<SC, O8, GELU>(v.y, alpha, b01.y), os, TO()),
                                   hi = gm_pack(gm_epi<SC, O8, GELU>(v.z, alpha, b23.x),
                                                gm_epi<SC, O8, GELU>(v.w, alpha, b23.y), os, TO());
                    if (m0 + row < M && n < N) {
                        TO *p = D + (size_t)(m0 + row) * N + n;
                        if (O8) *reinterpret_cast<uint32_t *>(p) = lo | (hi << 16);
                        else *reinterpret_cast<uint2 *>(p) = make_uint2(lo, hi);
                    }
                }
                mbar_arrive(HEMPTY(c));
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"((int)REG_C) : "memory");

    /* consumer warpgroup c = wg - 1 takes the CTA's tiles i = c, c + 2, ... The two take turns at the tensor cores
     * (named barriers 1 and 2, 256 threads: warpgroup 1 runs its K loop, arrives on 1 and goes to its epilogue,
     * while warpgroup 2, which waited on 1, runs its K loop and then arrives on 2, ...): one's epilogue overlaps
     * the other's MMAs, and a warpgroup starts waiting on the full barrier of step i KT only after the other has
     * consumed step i KT - 1: a phase-parity wait would pass on an older phase of the same parity otherwise. */
    const int c = wg - 1, ctid = tid & 127, warp = ctid >> 5, lane = tid & 31;
    float acc[BN]; /* rows 0-63: acc[0 .. BN/2), rows 64-127: acc[BN/2 .. BN) (m64nBN C layout each) */
    for (int i = c, t = blockIdx.x + c * gridDim.x; t < tiles; i += 2, t += 2 * gridDim.x) {
        const int m0 = (t / tiles_n) * GM_BM, n0 = (t % tiles_n) * BN;
        uint32_t step = (uint32_t)i * (uint32_t)KT;
        /* this lane's bias pairs (columns n0 + 8 j + 2 (lane % 4), + 1), loaded now so the K loop hides them */
        uint32_t bpk[BN / 8];
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            const int n = n0 + 8 * j + 2 * (lane & 3);
            bpk[j] = bias && n < N ? __ldg(reinterpret_cast<const unsigned int *>(bias + n)) : 0u; /* N % 8 == 0 */
        }
        float2 cpk[GRP ? BN / 8 : 1]; /* GRP: the same columns' scales */
        if constexpr (GRP)
#pragma unroll
            for (int j = 0; j < BN / 8; j++) {
                const int n = n0 + 8 * j + 2 * (lane & 3);
                cpk[j] = n < N ? __ldg(reinterpret_cast<const float2 *>(grp.cs + n)) : make_float2(0.0f, 0.0f);
            }
        /* the residual at this lane's accumulators of rows 0-63 (rounds 0 and 1), loaded now so the K loop hides
         * their latency (rows 64-127 into L2 now, into these registers once rounds 0 and 1 have used them: the
         * whole tile's would not fit beside the accumulators); added in fp32 before the one rounding */
        uint32_t rpk[RES ? 2 * BN / 8 : 1];
        if constexpr (RES) {
            gm_load_res<BN>(rpk, R, m0, n0, 0, warp, lane, M, N);
            if (m0 + 64 + (ctid >> 1) < M && n0 + 64 * (ctid & 1) < N)
                asm volatile("prefetch.global.L2 [%0];\n" ::"l"(R + (size_t)(m0 + 64 + (ctid >> 1)) * N + n0 +
                                                                 64 * (ctid & 1)));
        }
        /* WC 2: this thread's units' block scales, a stage ahead of their conversion (gm_scale2: global loads) */
        uint32_t scl[2] = {0u, 0u};
        if constexpr (WC == 2)
#pragma unroll
            for (int k = 0; k < 2; k++) scl[k] = gm_scale2(wsc, n0 + ((k * 128 + ctid) >> 1), N, K, 0, ctid & 1);
        if (i > 0) asm volatile("bar.sync %0, 256;\n" ::"r"(2 - c) : "memory"); /* the other's K loop is done */
        for (int kt = 0; kt < KT; kt++, step++) {
            const uint32_t s = step % S, sa = base + s * GM_STAGE(BN);
            mbar_wait(FULL(s), (step / S) & 1u);
            /* WC: while the previous step's wgmma's run (one group stays in flight), this stage's codes become
             * TI values in the swizzled layout (named barriers 3 and 4: one per consumer warpgroup) */
            if constexpr (WC == 1) gm_convert_w<TI, BN>(sa + GM_TILE_A, sa + GM_TILE_A + BN * 64, ctid, 3 + c);
            if constexpr (WC == 2) {
                const uint32_t cur[2] = {scl[0], scl[1]};
                if (kt + 1 < KT)
#pragma unroll
                    for (int k = 0; k < 2; k++)
                        scl[k] = gm_scale2(wsc, n0 + ((k * 128 + ctid) >> 1), N, K, kt + 1, ctid & 1);
                gm_convert_w4<TI, BN>(sa + GM_TILE_A, sa + GM_TILE_A + BN * 96, cur, ctid, 3 + c);
            }
            const uint64_t da = wg_make_desc(sa, 1024, 1), db = wg_make_desc(sa + GM_TILE_A, 1024, 1);
            wg_fence_regs(acc);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) { /* +32 bytes (2 in descriptor units) per k16 / k32; rows 64.. 8 KB on */
                gm_mma<BN>(acc, da + 2 * kk, db + 2 * kk, kt > 0 || kk > 0, TI());
                gm_mma<BN>(acc + BN / 2, da + 512 + 2 * kk, db + 2 * kk, kt > 0 || kk > 0, TI());
            }
            wg_commit();
            wg_wait1(); /* the previous step's wgmma's are done: its stage may be overwritten */
            wg_fence_regs(acc);
            if (kt > 0) mbar_arrive(EMPTY((step - 1) % S));
        }
        /* the other warpgroup's turn, when it has a next tile (arrivals stay balanced: none is left pending) */
        if (t + (int)gridDim.x < tiles) asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + c) : "memory");
        wg_wait0();
        wg_fence_regs(acc);
        mbar_arrive(EMPTY((step - 1) % S));

        /* epilogue, in 4 rounds of 8 rows (r: the warp's rows 64 (r / 2) + 16 warp + 8 (r % 2) + 0..7, 2 BN / 8
         * accumulators per lane): scale, bias (fetched before the K loop) and GELU in fp32, one rounding, then out
         * through this warp's staging rows. The C layout gives a lane 2 outputs of 8 rows per store; through shared
         * memory each lane stores 16 bytes and a warp whole rows. The next round's GELU is issued between this
         * round's shared-memory writes and its global stores, so the ALU work overlaps the memory work (one warp per
         * scheduler: no other latency hiding). */
        if (HELP) { /* rows 64-127, raw fp32, to the helpers (once they have read this buffer's previous tile) */
            mbar_wait(HEMPTY(c), ((uint32_t)(i >> 1) & 1u) ^ 1u);
            const uint32_t hb = hbuf + (uint32_t)(c * GM_HB) + (uint32_t)((warp * 16 + (lane >> 2)) * GM_HB_ROW) +
                                8u * (uint32_t)(lane & 3);
#pragma unroll
            for (int j = 0; j < BN / 8; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n"
                                 ::"r"(hb + (uint32_t)(8 * h * GM_HB_ROW + 32 * j)),
                                 "f"(acc[BN / 2 + 4 * j + 2 * h]), "f"(acc[BN / 2 + 4 * j + 2 * h + 1])
                                 : "memory");
            mbar_arrive(HFULL(c));
        }
        const int NR = HELP ? 2 : 4; /* rounds this warpgroup writes */
        /* a staged row: BN outputs, CH chunks of 16 bytes (16 for a 16-bit type, 8 for E4M3) */
        enum { OB = sizeof(TO), CH = BN * sizeof(TO) / 16 };
        const uint32_t stg = base + S * GM_STAGE(BN) + (uint32_t)((c * 4 + warp) * GM_STG_WARP(BN));
        if constexpr (GRP) gm_epi_round_cs<O8, GELU, TB, BN>(acc, bpk, cpk, 0, alpha);
        else gm_epi_round<SC, O8, GELU, TB, BN>(acc, bpk, 0, alpha);
        if constexpr (RES) gm_add_round<TO, BN>(acc, rpk, 0);
#pragma unroll
        for (int r = 0; r < NR; r++) {
#pragma unroll
            for (int j = 0; j < BN / 8; j++) {
                const float *aj = acc + (r >> 1) * (BN / 2) + 4 * j + 2 * (r & 1);
                const uint32_t v = gm_pack(aj[0], aj[1], os, TO()),
                               at = stg + (lane >> 2) * GM_STG_ROW(BN) + 8 * OB * j + 2 * OB * (lane & 3);
                if (O8) asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(at), "h"((unsigned short)v) : "memory");
                else asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
            }
            __syncwarp(); /* also orders a residual R == D: every lane has used its R values before any stores */
            if constexpr (GRP) {
                if (r < NR - 1) gm_epi_round_cs<O8, GELU, TB, BN>(acc, bpk, cpk, r + 1, alpha);
            } else if (r < NR - 1) gm_epi_round<SC, O8, GELU, TB, BN>(acc, bpk, r + 1, alpha);
            if constexpr (RES) {
                if (r < NR - 1) gm_add_round<TO, BN>(acc, rpk, r + 1);
                if (r == 0) gm_load_res<BN>(rpk, R, m0, n0, 1, warp, lane, M, N); /* rounds 2 and 3 */
            }
            const int mr = m0 + 64 * (r >> 1) + warp * 16 + 8 * (r & 1);
#pragma unroll
            for (int q = 0; q < 8 * CH / 32; q++) { /* 8 rows x CH chunks of 16 bytes, 32 lanes */
                const int idx = q * 32 + lane, row = idx / CH, ch = idx % CH;
                const int m = mr + row, n = n0 + ch * (16 / OB);
                uint4 v;
                asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                             : "r"(stg + row * GM_STG_ROW(BN) + 16 * ch)
                             : "memory");
                if (m < M && n < N) { /* N % (16 / OB) == 0 */
                    if constexpr (GRP) *reinterpret_cast<uint4 *>(gm_group_at<TO>(grp, m, n)) = v;
                    else *reinterpret_cast<uint4 *>(D + (size_t)m * N + n) = v;
                }
            }
            __syncwarp();
        }
    }
#undef FULL
#undef EMPTY
#undef HFULL
#undef HEMPTY
#else
    (void)tmA, (void)tmB, (void)bias, (void)R, (void)D, (void)a_scale, (void)w_scale, (void)d_scale;
    (void)M, (void)N, (void)K, (void)wsc, (void)grp;
#endif
}

/* ---- host ---------------------------------------------------------------------------------------------------------- */

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled through the runtime (no link against libcuda; cudaGetDriverEntryPointByVersion is CUDA
 * 12.5+, README's toolkit is 13); NULL when the driver has none */
static encode_tiled_fn gm_encoder(void) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return (encode_tiled_fn)fn;
}

/* 1 when the current device has compute capability 9.0 */
static int gm_sm90_device(void) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return 0;
    return major == 9 && minor == 0;
}

/* rows x K row-major matrix of dt (F16, BF16 or E4M3) at p, boxes of box_rows rows x 128 bytes of K (one swizzle
 * row), 128-byte swizzle, zeros outside */
static int gm_map(encode_tiled_fn enc, CUtensorMap *map, const void *p, tp_dtype dt, int rows, int K, int box_rows,
                  int wc = 0) {
    const int es = dt == TP_E4M3 ? 1 : 2;
    /* wc: converted weights, unswizzled, a 16-bit stage's 64 values a box: 1 E4M3 (64 bytes, gm_convert_w); 2 NVFP4
     * (the packed codes as K / 2 bytes a row: 32, gm_convert_w4) */
    const int kb = wc == 2 ? K / 2 : K;
    const cuuint64_t dims[2] = {(cuuint64_t)kb, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)kb * es};
    const cuuint32_t box[2] = {wc == 2 ? 32u : wc ? 64u : GM_ROWB / (cuuint32_t)es, (cuuint32_t)box_rows},
                     elem[2] = {1, 1};
    const CUtensorMapDataType t = dt == TP_E4M3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                  : dt == TP_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    CUresult r = enc(map, t, 2, (void *)p, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     wc ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : TPK_INVALID;
}

/* the arguments of one launch */
typedef struct {
    const void *A, *W, *bias, *R;
    void *D;
    const float *a_scale, *w_scale, *d_scale;
    tp_dtype in_dt;
    int M, N, K;
    const unsigned char *wsc; /* NVFP4 weights' UE4M3 block scales (N, K / 16), the converting kernel's WC 2 */
    const gm_group *grp;      /* GRP: the sibling group's column scales and outputs */
} gm_args;

template <typename TI, typename TB, typename TO, int GELU, int HELP, int RES, int BN, int WC = 0, int GRP = 0>
static int gm_launch(encode_tiled_fn enc, const gm_args *a, cudaStream_t s) {
    CUtensorMap ma, mb;
    if (gm_map(enc, &ma, a->A, a->in_dt, a->M, a->K, GM_BM) ||
        gm_map(enc, &mb, a->W, WC ? TP_E4M3 : a->in_dt, a->N, a->K, BN, WC))
        return TPK_INVALID;
    cudaError_t e = cudaFuncSetAttribute(gemm_sm90_kernel<TI, TB, TO, GELU, HELP, RES, BN, WC, GRP>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, GM_SMEM(HELP, BN));
    if (e != cudaSuccess) return (int)e;
    int dev = 0, sms = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
        return (int)e;
    const long long tiles = (long long)((a->N + BN - 1) / BN) * ((a->M + GM_BM - 1) / GM_BM);
    if (tiles > 0x7fffffffLL) return TPK_INVALID;
    const unsigned grid = (unsigned)(tiles < sms ? tiles : sms); /* persistent: one CTA per SM */
    /* with the PDL attribute (pdl.cuh): in a stream or a captured graph the kernel may start while the one before
     * it finishes, its weights' first stages already loading */
    const gm_group none = {};
    return tpk_pdl_launched(tpk_pdl_launch_kernel(gemm_sm90_kernel<TI, TB, TO, GELU, HELP, RES, BN, WC, GRP>,
                                                  dim3(grid), dim3(GM_THREADS), (size_t)GM_SMEM(HELP, BN), s, ma, mb,
                                                  (const TB *)a->bias, (const TO *)a->R, (TO *)a->D, a->a_scale,
                                                  a->w_scale, a->d_scale, a->M, a->N, a->K, a->wsc,
                                                  a->grp ? *a->grp : none));
}

/* the checks both entry points share: flags, operand and output pointers, the device and its encoder (looked up
 * once per call); NULL when one fails */
static encode_tiled_fn gm_check(const void *A, const void *W, const void *bias, const void *D, int gelu,
                                int variant, int max_variant) {
    if ((gelu != 0 && gelu != 1) || variant < 0 || variant > max_variant) return NULL;
    if (!A || !W || !D || ((uintptr_t)A & 15) || ((uintptr_t)W & 15) || ((uintptr_t)D & 15) || ((uintptr_t)bias & 3))
        return NULL;
    return gm_sm90_device() ? gm_encoder() : NULL;
}

/* the checks of tpk_gemm_sm90_fp8 (gemm_sm90.h) and bench/'s tpk_gemm_sm90_fp8_variant, gm_check's included; NULL
 * when one fails */
static encode_tiled_fn gm_fp8_check(const void *A, const float *a_scale, const void *W, const float *w_scale,
                                    const void *bias, const void *R, const void *D, tp_dtype d_dt,
                                    const float *d_scale, int M, int N, int K, int gelu, int variant) {
    if (!tpk_gemm_sm90_fp8_shape_ok(d_dt, M, N, K) || !a_scale || !w_scale || ((uintptr_t)a_scale & 3) ||
        ((uintptr_t)w_scale & 3) || (d_dt == TP_E4M3 && (!d_scale || ((uintptr_t)d_scale & 3))) ||
        (R && (d_dt != TP_F16 || gelu || variant == 1 || ((uintptr_t)R & 15))) || (variant == 2 && d_dt != TP_F16))
        return NULL;
    return gm_check(A, W, bias, D, gelu, variant, 2);
}

#endif
