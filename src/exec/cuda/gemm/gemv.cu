/* gemv.cu: decode GEMVs for FP16/BF16, weight-only FP8 (E4M3) and weight-only NVFP4 weights (contracts in gemv.h).
 *
 * The work. y (M, N) = x (M, K) W (N, K)^T with M <= 8 moves N K weight elements once (2, 1 or 0.56 bytes each)
 * and does 2 M N K flops: at M = 8 and 3.35 TB/s that is 8 flops per weight byte for FP16 (27 TFLOP/s), 16 for FP8
 * and 28 for NVFP4 (95 TFLOP/s). FP32 FMAs (67 TFLOP/s on an H100 SXM, fewer once the decode takes issue slots)
 * would make the quantized formats compute-bound at M = 8, so the dot products run on the tensor cores instead:
 * one mma.sync.m16n8k16 multiplies 16 weight rows by 8 batch rows over 16 values of K. The kernels are then
 * limited by the weight stream alone, at every M from 1 to 8.
 *
 * Layout. A warp owns 16 weight rows (n0 + 0..15) and a contiguous slice of K. Lane (g, t) = (lane / 4, lane % 4)
 * loads rows n0 + g and n0 + g + 8: per step, VEC bytes (16, or 8 on the narrow paths) of each row at chunk
 * 4 step + t, so the four lanes of a row read 4 VEC contiguous bytes and a warp instruction reads whole 32-byte
 * sectors of 8 rows. The chunk's elements are the lane's own A-fragment values (mma's a0..a3: rows g, g + 8;
 * k slots 2t, 2t + 1, 2t + 8, 2t + 9): a dot product does not depend on the order of K, so the k slots of an mma
 * may stand for any K positions as long as A (weights) and B (x) agree, and every lane with the same t maps its
 * slots to the same positions. Each lane thus uses the words it loaded directly, with no shuffle or shared-memory
 * staging: FP16 words are the A registers; an E4M3 word gives two f16x2 registers (cvt.rn.f16x2.e4m3x2, exact);
 * an NVFP4 word (8 nibbles) gives four 16-bit pairs (elements i, i + 4) by shifts and masks, each multiplied by its
 * block scale (below). B: lane (g, t) reads row m = g of x at the same positions through L1 (x is M K <= 176 KB,
 * read by every block: it stays in L1/L2), zero for m >= M; NVFP4's (i, i + 4) pairs take one byte permute per x
 * pair, shared by the two weight rows. Rows n >= N and chunks past the row are predicated off (zeros in A and B).
 *
 * NVFP4 decode without rounding: the nibble s.ee.m placed at the top of an f16 (bf16) exponent field is
 * e2m1 * 2^-14 (2^-126) exactly, E2M1's subnormal 0.5 included (both formats' subnormals line up). Multiplied by
 * the block scale as f16 sd * 2^7 (bf16 sd * 2^119) it becomes e2m1 * sd * 2^-7: at most 6 significant bits, in
 * [2^-17, 21], so the 16-bit product is exact; the epilogue multiplies the fp32 sum by 2^7 s2. (The bf16 path
 * multiplies bf16 subnormals, as vLLM's Marlin dequantization does; the test's E2M1 0.5 codes check it.) BF16 from
 * E4M3 goes through f16 and fp32 (exact, NaN kept). The epilogue order and rounding are gemv.h's.
 *
 * Memory level parallelism. Two register buffers of U chunks per row (U = 2 at 16 bytes, 4 at 8): the loads of the
 * next buffer (ld.global.nc.L1::no_allocate, 16 bytes) are issued before the current one is decoded and
 * multiplied, so each warp keeps 2 rows x U x 512 bytes = 2 KB in flight while it computes. The 4 warps of a
 * block split K; when ceil(N / 16) blocks give fewer than 12 warps per SM (N = 4096: 1024 warps on 132 SMs), K is
 * split further over a cluster of 2, 4 or 8 blocks (at least one step per warp), whose 16 x 8 partial sums meet in
 * rank 0's registers through distributed shared memory, in rank order: deterministic, no workspace, no atomics.
 * Bandwidth needed per SM at 3.35 TB/s: ~14.5 bytes per cycle; in flight at ~800 ns latency: ~20 KB per SM, i.e.
 * ten such warps; the grids give 12 to 16 resident warps per SM.
 *
 * Instruction budget at full bandwidth, per SM and cycle (3.35 TB/s / 132 SMs / 1.75 GHz = 14.5 weight bytes), in
 * thread instructions against 128 issue slots: FP16 7 elements: ~1 mma, a few address and load instructions. FP8
 * 14.5 elements: 7 cvt + 2 mma (f16), or 29 (bf16: cvt, two f16 -> f32, one pack per pair). NVFP4 26 elements:
 * per pair two shifts (IMAD.SHL), a mask and a merge (LOP3), one HMUL2, and per x pair one PRMT: ~51 integer, 13
 * HMUL2, 6 PRMT, 3 mma, ~75 in all (60% of issue; the ALU pipe, 64 lanes per cycle, ~50% busy): the tightest of the
 * three, still under the memory floor on paper. x traffic from L1 per weight byte: 0.5 (FP16), 1 (FP8), 2 (NVFP4)
 * bytes at M = 8, i.e. up to 29 of L1's 128 bytes per cycle. The SASS (cuobjdump) shows the intended code: HMMA.16816
 * (.BF16), LDG.E.NA.128 for the weights, F2FP.F16.E4M3.UNPACK_B, HMUL2(.BF16_V2), no local memory. */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "exec/cuda/gemm/gemv.h"
#include "exec/cuda/kernels/act_types.cuh"
#include "exec/cuda/kernels/e4m3.cuh"
#include "exec/cuda/kernels/pdl.cuh"
#include "exec/cuda/ptx/mma_ptx.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int kWarps = 4;                /* warps per block, each on its own K slice */
constexpr int kThreads = 32 * kWarps;    /* = 128 = the 16 x 8 outputs of a block, one per thread in the epilogue */
constexpr int kRows = 16;                /* weight rows per block (the mma's M) */
constexpr int kMB = 8;                   /* batch rows per pass (the mma's N) */
constexpr int kMaxCluster = 8;           /* portable cluster size */
constexpr int kWarpsPerSmTarget = 12;    /* split K over a cluster until the grid has this many warps per SM */

/* FMT_FP8B: FP8 block-128 (E4M3 weights under one fp32 scale per 128 x 128 block, the 16-bit input quantized here
 * per 1 x 128 block of each row, DeepSeek-V3's scheme as tp_quantize(TP_QF_FP8_BLOCK128) defines it) */
enum { FMT_16 = 0, FMT_FP8 = 1, FMT_NVFP4 = 2, FMT_FP8B = 3 };

struct gemv_params {
    const void *x;           /* (M, K) in T, this pass's rows */
    const unsigned char *w;  /* weight rows, row_bytes apart */
    const unsigned char *ws; /* NVFP4: UE4M3 block scales (N, K / 16) */
    const float *cs, *ts;    /* FP8: channel (N) and tensor scales, each may be NULL; NVFP4: ts = s2, or cs = one s2
                                per row (ts NULL) */
    const float *xs;         /* W8A8 (QX): x's per-tensor scale; x is rounded to e4m3(x / xs) as it is loaded */
    const float *bs;         /* FP8B: the weights' 128 x 128 block scales, (ceil(N / 128), bld) fp32 */
    int bld;                 /* FP8B: floats per row of bs (ceil(K / 128) rounded up to a multiple of 4) */
    const float *xbs;        /* FP8B with QX: x arrives as E4M3 codes with these 1 x 128 scales, (kb, xld) */
    int xld;                 /* FP8B with QX: x's scale rows (M_pad >= M) */
    const void *bias, *res;  /* (N), (M, N) in T, or NULL */
    void *y;                 /* (M, N) in T */
    long long row_bytes;     /* bytes per weight row */
    int srow;                /* NVFP4 scale bytes per row (K / 16) */
    int M, N, K;             /* M <= kMB */
    int nchunks;             /* chunks (VEC bytes) per row */
    int nsteps;              /* ceil(nchunks / 4): a step is one chunk per lane of a row's 4 lanes */
    int csplit;              /* blocks per cluster along K (1, 2, 4, 8) */
};

/* The GLU epilogue's rows (gemv.h tpk_gemv_fusion), a parameter of its own: the plain kernels keep their code */
struct glu_params {
    int glu;            /* 1 SiLU, 2 tanh GELU (0: none) */
    int ng, gate0, up0; /* output columns, the first W rows of gate and of up */
};

/* ---- element types --------------------------------------------------------------------------------------- */

template <class T> struct tt;
template <> struct tt<__half> {
    static __device__ __forceinline__ float tof(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half fromf(float v) { return __float2half_rn(v); }
};
template <> struct tt<__nv_bfloat16> {
    static __device__ __forceinline__ float tof(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 fromf(float v) { return __float2bfloat16_rn(v); }
};

template <class V> __device__ __forceinline__ uint32_t bits32(V v) {
    static_assert(sizeof(V) == 4, "32-bit pair");
    uint32_t r;
    memcpy(&r, &v, 4);
    return r;
}
template <class V> __device__ __forceinline__ V from32(uint32_t u) {
    V v;
    memcpy(&v, &u, 4);
    return v;
}

/* ---- predicated loads (zeros when off; the address is never touched then) ------------------------------- */

/* the weight stream: read once, so it bypasses L1. TPK_GEMV_L2_PREFETCH (a build option: 0, 64, 128 or 256) adds
 * PTX's L2 prefetch-size hint, asking L2 to fetch that many bytes around each access (a warp's next steps read the
 * following bytes of the same rows); 0 (default) leaves it to the hardware. Untimed as of this writing: the lab
 * (bench/gemv_lab.c) is the place to try it. */
#ifndef TPK_GEMV_L2_PREFETCH
#define TPK_GEMV_L2_PREFETCH 0
#endif
#if TPK_GEMV_L2_PREFETCH == 0
#define TPK_GEMV_L2_HINT ""
#elif TPK_GEMV_L2_PREFETCH == 64
#define TPK_GEMV_L2_HINT ".L2::64B"
#elif TPK_GEMV_L2_PREFETCH == 128
#define TPK_GEMV_L2_HINT ".L2::128B"
#elif TPK_GEMV_L2_PREFETCH == 256
#define TPK_GEMV_L2_HINT ".L2::256B"
#else
#error "TPK_GEMV_L2_PREFETCH must be 0, 64, 128 or 256"
#endif
__device__ __forceinline__ void ld_stream(uint32_t (&d)[4], const unsigned char *p, bool on) {
    d[0] = d[1] = d[2] = d[3] = 0u;
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "@p ld.global.nc.L1::no_allocate" TPK_GEMV_L2_HINT ".v4.u32 {%0, %1, %2, %3}, [%5];\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"((int)on), "l"(p));
}
__device__ __forceinline__ void ld_stream(uint32_t (&d)[2], const unsigned char *p, bool on) {
    d[0] = d[1] = 0u;
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %2, 0;\n\t"
                 "@p ld.global.nc.L1::no_allocate" TPK_GEMV_L2_HINT ".v2.u32 {%0, %1}, [%3];\n}\n"
                 : "+r"(d[0]), "+r"(d[1])
                 : "r"((int)on), "l"(p));
}
/* NVFP4 block scales: 2 codes (16-byte chunks) or 1 (8-byte chunks); through L1 (the 4 lanes of a row share
 * sectors across steps) */
__device__ __forceinline__ uint32_t ld_scale(const unsigned char *p, bool on, int nbytes) {
    uint32_t d = 0u;
    if (nbytes == 2)
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %1, 0;\n\t@p ld.global.nc.u16 %0, [%2];\n}\n"
                     : "+r"(d)
                     : "r"((int)on), "l"(p));
    else
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %1, 0;\n\t@p ld.global.nc.u8 %0, [%2];\n}\n"
                     : "+r"(d)
                     : "r"((int)on), "l"(p));
    return d;
}
/* FP8B's weight-block scales: one fp32 (its bits), through L1 (the lanes of a warp share it) */
__device__ __forceinline__ uint32_t ld_f32_bits(const float *p, bool on) {
    uint32_t d = 0u;
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %1, 0;\n\t@p ld.global.nc.u32 %0, [%2];\n}\n"
                 : "+r"(d)
                 : "r"((int)on), "l"(p));
    return d;
}
/* x: 8 elements, through L1 (every block reads all of x); only after the PDL wait (pdl.cuh), which makes the
 * previous kernels' writes visible to this grid. Not .nc, the conservative choice: that path promises data
 * read-only for the whole life of the kernel, and under PDL this grid is alive while the previous kernel writes x
 * (decoder_ops.cu's kernels read their activations through .nc after the same wait). volatile, so the compiler
 * cannot hoist the load above the wait. */
__device__ __forceinline__ void ld_x(uint32_t *d, const void *p, bool on) {
    d[0] = d[1] = d[2] = d[3] = 0u;
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t@p ld.global.v4.u32 {%0, %1, %2, %3}, [%5];\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"((int)on), "l"(p));
}

/* ---- decoding ------------------------------------------------------------------------------------------- */

/* two E4M3 codes (low byte first) -> f16x2, exact (every E4M3 value is an f16 value; NaN -> NaN) */
__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t v) {
    uint32_t r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"((unsigned short)(v & 0xFFFFu)));
    return r;
}
/* two E4M3 codes -> the 16-bit pair of T, exact */
template <class T> __device__ __forceinline__ uint32_t e4m3x2_t(uint32_t v);
template <> __device__ __forceinline__ uint32_t e4m3x2_t<__half>(uint32_t v) { return e4m3x2_f16x2(v); }
template <> __device__ __forceinline__ uint32_t e4m3x2_t<__nv_bfloat16>(uint32_t v) {
    const float2 f = __half22float2(from32<__half2>(e4m3x2_f16x2(v)));
    return bits32(__float22bfloat162_rn(f));
}

/* W8A8: a pair of x in T to e4m3(x / s) each (e4m3.cuh: correctly rounded quotient, saturated), back in T: exact,
 * every E4M3 value being a T value */
template <class T> __device__ __forceinline__ uint32_t q_e4m3_pair(uint32_t x, float s);
template <> __device__ __forceinline__ uint32_t q_e4m3_pair<__half>(uint32_t x, float s) {
    const float2 f = __half22float2(from32<__half2>(x));
    return e4m3x2_t<__half>(tpk_to_e4m3x2(f.x, f.y, s));
}
template <> __device__ __forceinline__ uint32_t q_e4m3_pair<__nv_bfloat16>(uint32_t x, float s) {
    const float2 f = __bfloat1622float2(from32<__nv_bfloat162>(x));
    return e4m3x2_t<__nv_bfloat16>(tpk_to_e4m3x2(f.x, f.y, s));
}

/* t holds an E2M1 code in bits 12-15 (low half) and one in bits 28-31 (high half): the pair as T's bits, valued
 * e2m1 * 2^-14 (f16) or e2m1 * 2^-126 (bf16), exactly */
template <class T> __device__ __forceinline__ uint32_t e2m1x2_t(uint32_t t);
template <> __device__ __forceinline__ uint32_t e2m1x2_t<__half>(uint32_t t) {
    return (t & 0x80008000u) | ((t >> 3) & 0x0E000E00u);
}
template <> __device__ __forceinline__ uint32_t e2m1x2_t<__nv_bfloat16>(uint32_t t) {
    return (t & 0x80008000u) | ((t >> 6) & 0x01C001C0u);
}
template <class T> __device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b);
template <> __device__ __forceinline__ uint32_t mul2<__half>(uint32_t a, uint32_t b) {
    return bits32(__hmul2(from32<__half2>(a), from32<__half2>(b)));
}
template <> __device__ __forceinline__ uint32_t mul2<__nv_bfloat16>(uint32_t a, uint32_t b) {
    return bits32(__hmul2(from32<__nv_bfloat162>(a), from32<__nv_bfloat162>(b)));
}
/* two UE4M3 block-scale codes (low byte: the first block) -> each as a T pair replicated in both halves, times
 * 2^7 (f16) or 2^119 (bf16): exact (sd <= 448, 4 significant bits) */
template <class T> __device__ __forceinline__ void ue4m3_scales(uint32_t codes, uint32_t &s0, uint32_t &s1);
template <> __device__ __forceinline__ void ue4m3_scales<__half>(uint32_t codes, uint32_t &s0, uint32_t &s1) {
    const uint32_t h = bits32(__hmul2(from32<__half2>(e4m3x2_f16x2(codes)), __float2half2_rn(128.0f)));
    s0 = __byte_perm(h, 0u, 0x1010);
    s1 = __byte_perm(h, 0u, 0x3232);
}
template <>
__device__ __forceinline__ void ue4m3_scales<__nv_bfloat16>(uint32_t codes, uint32_t &s0, uint32_t &s1) {
    const float2 f = __half22float2(from32<__half2>(e4m3x2_f16x2(codes)));
    s0 = bits32(__float2bfloat162_rn(f.x * 0x1p119f));
    s1 = bits32(__float2bfloat162_rn(f.y * 0x1p119f));
}

/* ---- one buffer of U chunks per row ---------------------------------------------------------------------- */

template <int VW, int U> struct wbuf {
    uint32_t a[U][VW], b[U][VW]; /* rows g and g + 8 */
    uint32_t sa[U], sb[U];       /* NVFP4 block-scale codes of those chunks */
    uint32_t xv[2];              /* FP8B at M = 1: the lane's 4 values of x's block (load_xb) */
};

struct warp_ctx {
    const unsigned char *w0, *w1, *s0, *s1; /* rows g, g + 8: weights, scales */
    const unsigned char *xr;                /* x row g (bytes) */
    const float *b0, *b1;                   /* FP8B: the block-scale rows of weight rows g and g + 8 */
    const unsigned char *x;                 /* FP8B: x row 0 (bytes) */
    uint32_t *xsm;                          /* FP8B at M = 1: the warp's 128 values of x in shared memory */
    const float *xbs;                       /* FP8B with QX: x's block scales; xld their rows */
    int xld;
    bool ok0, ok1, xok;
    int lane, M, K;
    int tig, st1, nchunks;
    float xs; /* W8A8: x's scale (read after the PDL wait) */
};

template <int FMT, int VEC, int U>
__device__ __forceinline__ void load_buf(wbuf<VEC / 4, U> &B, const warp_ctx &c, int step) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int ch = (step + u) * 4 + c.tig;
        const bool on = step + u < c.st1 && ch < c.nchunks;
        ld_stream(B.a[u], c.w0 + (long long)ch * VEC, on && c.ok0);
        ld_stream(B.b[u], c.w1 + (long long)ch * VEC, on && c.ok1);
        if (FMT == FMT_NVFP4) {
            B.sa[u] = ld_scale(c.s0 + (long long)ch * (VEC / 8), on && c.ok0, VEC / 8);
            B.sb[u] = ld_scale(c.s1 + (long long)ch * (VEC / 8), on && c.ok1, VEC / 8);
        }
    }
    if (FMT == FMT_FP8B) { /* the buffer's 128 x 128 weight-block scales, streamed with its weights */
        const bool on = step < c.st1;
        B.sa[0] = ld_f32_bits(c.b0 + (step >> 1), on && c.ok0);
        B.sb[0] = ld_f32_bits(c.b1 + (step >> 1), on && c.ok1);
    }
}

/* four 16-bit values of x (8 bytes) after the PDL wait, zeros when off (ld_x's reasons) */
__device__ __forceinline__ void ld_x4(uint32_t (&d)[2], const void *p, bool on) {
    d[0] = d[1] = 0u;
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %2, 0;\n\t@p ld.global.v2.u32 {%0, %1}, [%3];\n}\n"
                 : "+r"(d[0]), "+r"(d[1])
                 : "r"((int)on), "l"(p));
}

/* FP8B at M = 1: x's values for the buffer at `step` (block step / 2; lane l holds elements 4 l .. 4 l + 3), loaded
 * with the buffer's weights a buffer ahead of its use (only after the PDL wait), so the block's quantization does
 * not start with a load's latency */
template <int U> __device__ __forceinline__ void load_xb(wbuf<4, U> &B, const warp_ctx &c, int step) {
    const int k = 64 * step + 4 * c.lane;
    ld_x4(B.xv, c.x + (long long)k * 2, step < c.st1 && k < c.K);
}

template <class T> __device__ __forceinline__ float absmax2(float a, uint32_t pair) {
    const T *h = reinterpret_cast<const T *>(&pair);
    return fmaxf(a, fmaxf(fabsf(tt<T>::tof(h[0])), fabsf(tt<T>::tof(h[1]))));
}

/* FP8B: one 128-element block's E4M3 x E4M3 sum on the tensor cores (the lane's weight words of the buffer's U chunks
 * against its x fragments XX), in fp32, then scaled by the block's scales (x0, x1: x's of batch rows 2 t and 2 t + 1;
 * the buffer's weight-block scales of rows g and g + 8) into acc */
template <class T, int U>
__device__ __forceinline__ void b128_block_mma(const wbuf<4, U> &B, const warp_ctx &c, int step,
                                               const uint32_t (&XX)[U][8], float x0, float x1, float (&acc)[4]) {
    float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (step + u >= c.st1) break; /* warp-uniform: a last block of one step */
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t wa = B.a[u][j], wb = B.b[u][j];
            tpk_mma16816<T>(blk, e4m3x2_t<T>(wa), e4m3x2_t<T>(wb), e4m3x2_t<T>(wa >> 16), e4m3x2_t<T>(wb >> 16),
                            XX[u][2 * j], XX[u][2 * j + 1]);
        }
    }
    const float w0 = __uint_as_float(B.sa[0]), w1 = __uint_as_float(B.sb[0]);
    acc[0] += blk[0] * (x0 * w0);
    acc[1] += blk[1] * (x1 * w0);
    acc[2] += blk[2] * (x0 * w1);
    acc[3] += blk[3] * (x1 * w1);
}

/* FP8B, one buffer = steps step and step + 1 (U = 2, step even) = K elements 128 kb .. 128 kb + 127, kb = step / 2,
 * and the weight blocks' scales (load_buf: B.sa[0], B.sb[0] for rows g and g + 8, which may lie in different
 * 128-row blocks: a GLU's gate and up rows). x's blocks are quantized with e4m3.cuh's tpk_b128_scale and correctly
 * rounded quotient (as tpk_quant_fp8_b128), the codes exact in T; the block's products summed in fp32 on the tensor
 * cores; the sum joins acc times x's scale for the accumulator's batch row (column 2 t: row 2 t, 2 t + 1: row
 * 2 t + 1) times the weight block's.
 * Who quantizes x: the mma wants lane (g, t) to hold x row g (32 of the block's values), so with the values loaded
 * that way each lane quantizes 32 of them, whatever M: 8 rows' worth, zeros but one row at M = 1, in every block of
 * the grid. At M = 1 the warp quantizes the one row with all 32 lanes instead (4 values a lane, the amax over the
 * warp), writes the codes' values to its shared-memory row and the lanes of row 0 read their fragments back: 1/8 of
 * the arithmetic. Per row that way costs more than the per-lane way costs for all 8 (bench/gemv_lab.c on an H200,
 * Llama-7B gate/up: 25.3 us at M = 1, 45.1 at M = 4 quantized by rows, 30.0 at M = 8 by lanes), hence M = 1 only. */
template <class T, int U>
__device__ __forceinline__ void compute_block(const wbuf<4, U> &B, const warp_ctx &c, int step, float (&acc)[4]) {
    static_assert(U == 2, "FP8B: a buffer is one 128-element block");
    const int t = c.tig, g = c.lane >> 2;
    uint32_t XX[U][8];
    float x0, x1; /* x's block scales of batch rows 2 t and 2 t + 1 */
    if (c.M == 1) {
        __syncwarp(); /* the previous block's fragments are read */
        const uint32_t v[2] = {B.xv[0], B.xv[1]}; /* loaded a buffer ahead (load_xb) */
        float a = absmax2<T>(absmax2<T>(0.0f, v[0]), v[1]);
#pragma unroll
        for (int o = 16; o >= 1; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        const float s = tpk_b128_scale(a);
        *reinterpret_cast<uint2 *>(&c.xsm[2 * c.lane]) = make_uint2(q_e4m3_pair<T>(v[0], s), q_e4m3_pair<T>(v[1], s));
        __syncwarp();
#pragma unroll
        for (int u = 0; u < U; u++) /* lane (0, t)'s chunk u: the block's elements 64 u + 16 t .. + 15 */
#pragma unroll
            for (int l = 0; l < 2; l++) {
                uint4 q = make_uint4(0u, 0u, 0u, 0u);
                if (g == 0) q = *reinterpret_cast<const uint4 *>(&c.xsm[32 * u + 8 * t + 4 * l]);
                XX[u][4 * l] = q.x, XX[u][4 * l + 1] = q.y, XX[u][4 * l + 2] = q.z, XX[u][4 * l + 3] = q.w;
            }
        x0 = s, x1 = 1.0f; /* batch row 0 (column 0 of lane t = 0); the other columns' sums are zeros */
    } else {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int ch = (step + u) * 4 + t;
#pragma unroll
            for (int l = 0; l < 2; l++)
                ld_x(&XX[u][4 * l], c.xr + ((long long)ch * 16 + 8 * l) * 2,
                     c.xok && step + u < c.st1 && ch < c.nchunks);
        }
        float a = 0.0f;
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int k = 0; k < 8; k++) a = absmax2<T>(a, XX[u][k]);
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 1));
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 2));
        const float s = tpk_b128_scale(a);
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int k = 0; k < 8; k++) XX[u][k] = q_e4m3_pair<T>(XX[u][k], s);
        x0 = __shfl_sync(0xffffffffu, s, 8 * t);
        x1 = __shfl_sync(0xffffffffu, s, 8 * t + 4);
    }
    b128_block_mma<T, U>(B, c, step, XX, x0, x1, acc);
}

template <class T, int FMT, int VEC, int U, bool QX>
__device__ __forceinline__ void compute_buf(const wbuf<VEC / 4, U> &B, const warp_ctx &c, int step, float (&acc)[4]) {
    constexpr int VW = VEC / 4;
    constexpr int EPC = FMT == FMT_16 ? VEC / 2 : FMT == FMT_NVFP4 ? 2 * VEC : VEC; /* elements per chunk */
    constexpr int XL = EPC / 8;                                                    /* 16-byte x loads per chunk */
    uint32_t XX[U][4 * XL]; /* x for the whole buffer first: one L1 latency per buffer, not per chunk */
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int ch = (step + u) * 4 + c.tig;
#pragma unroll
        for (int l = 0; l < XL; l++)
            ld_x(&XX[u][4 * l], c.xr + ((long long)ch * EPC + 8 * l) * 2,
                 c.xok && step + u < c.st1 && ch < c.nchunks);
    }
    if (QX) /* W8A8: x's E4M3 values (rows m >= M are zeros and stay zeros) */
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int k = 0; k < 4 * XL; k++) XX[u][k] = q_e4m3_pair<T>(XX[u][k], c.xs);
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (step + u >= c.st1) break; /* warp-uniform */
        const uint32_t *X = XX[u];
        if (FMT == FMT_16) {
#pragma unroll
            for (int j = 0; j < VW / 2; j++)
                tpk_mma16816<T>(acc, B.a[u][2 * j], B.b[u][2 * j], B.a[u][2 * j + 1], B.b[u][2 * j + 1],
                                X[2 * j], X[2 * j + 1]);
        } else if (FMT == FMT_FP8) {
#pragma unroll
            for (int j = 0; j < VW; j++) {
                const uint32_t wa = B.a[u][j], wb = B.b[u][j];
                tpk_mma16816<T>(acc, e4m3x2_t<T>(wa), e4m3x2_t<T>(wb), e4m3x2_t<T>(wa >> 16),
                                e4m3x2_t<T>(wb >> 16), X[2 * j], X[2 * j + 1]);
            }
        } else {
            uint32_t sa[2], sb[2];
            ue4m3_scales<T>(B.sa[u], sa[0], sa[1]);
            ue4m3_scales<T>(B.sb[u], sb[0], sb[1]);
#pragma unroll
            for (int q = 0; q < VW; q++) { /* word q: elements 8q .. 8q + 7 of the chunk, block q / 2 */
                const uint32_t wa = B.a[u][q], wb = B.b[u][q], Sa = sa[q >> 1], Sb = sb[q >> 1];
                uint32_t pa[4], pb[4]; /* pairs (i, i + 4) */
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    pa[i] = mul2<T>(e2m1x2_t<T>(wa << (12 - 4 * i)), Sa);
                    pb[i] = mul2<T>(e2m1x2_t<T>(wb << (12 - 4 * i)), Sb);
                }
                const uint32_t x0 = X[4 * q], x1 = X[4 * q + 1], x2 = X[4 * q + 2], x3 = X[4 * q + 3];
                tpk_mma16816<T>(acc, pa[0], pb[0], pa[1], pb[1], __byte_perm(x0, x2, 0x5410),
                                __byte_perm(x0, x2, 0x7632));
                tpk_mma16816<T>(acc, pa[2], pb[2], pa[3], pb[3], __byte_perm(x1, x3, 0x5410),
                                __byte_perm(x1, x3, 0x7632));
            }
        }
    }
}

/* a 4-byte scale after the PDL wait (written by the previous kernel: not .nc), 0 when off */
__device__ __forceinline__ float ld_scale_f32(const float *p, bool on) {
    uint32_t d = 0u;
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %1, 0;\n\t@p ld.global.u32 %0, [%2];\n}\n"
                 : "+r"(d)
                 : "r"((int)on), "l"(p));
    return __uint_as_float(d);
}

/* FP8B with QX: the block's x already quantized by its producer (the RMSNorm writing FP8 block-128: codes (M, K)
 * row-major, scales (kb, xld)): lane (g, t) reads its 16 codes of row g per chunk (the weights' positions) and turns
 * them into T pairs (exact), the block's sum as compute_block's, x's scale of batch rows 2 t and 2 t + 1 read here */
template <class T, int U>
__device__ __forceinline__ void compute_block_q(const wbuf<4, U> &B, const warp_ctx &c, int step, float (&acc)[4]) {
    static_assert(U == 2, "FP8B: a buffer is one 128-element block");
    const int t = c.tig, kb = step >> 1;
    uint32_t XX[U][8];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int ch = (step + u) * 4 + t;
        uint32_t q[4];
        ld_x(q, c.xr + (long long)ch * 16, c.xok && step + u < c.st1 && ch < c.nchunks);
#pragma unroll
        for (int j = 0; j < 4; j++) XX[u][2 * j] = e4m3x2_t<T>(q[j]), XX[u][2 * j + 1] = e4m3x2_t<T>(q[j] >> 16);
    }
    const float x0 = ld_scale_f32(c.xbs + (long long)kb * c.xld + 2 * t, 2 * t < c.M),
                x1 = ld_scale_f32(c.xbs + (long long)kb * c.xld + 2 * t + 1, 2 * t + 1 < c.M);
    b128_block_mma<T, U>(B, c, step, XX, x0, x1, acc);
}

/* one buffer, whatever the format */
template <class T, int FMT, int VEC, int U, bool QX>
__device__ __forceinline__ void compute_any(const wbuf<VEC / 4, U> &B, const warp_ctx &c, int step, float (&acc)[4]) {
    if constexpr (FMT == FMT_FP8B && QX) compute_block_q<T, U>(B, c, step, acc);
    else if constexpr (FMT == FMT_FP8B) compute_block<T, U>(B, c, step, acc);
    else compute_buf<T, FMT, VEC, U, QX>(B, c, step, acc);
}

/* The sum of weight row n times its scales (gemv.h's scale_n) */
template <int FMT, bool QX> __device__ __forceinline__ float scaled(const gemv_params &p, int n, float xs, float v) {
    if (FMT == FMT_FP8) v *= (p.cs ? __ldg(p.cs + n) : 1.0f) * (p.ts ? __ldg(p.ts) : 1.0f);
    if (QX && FMT != FMT_FP8B) v *= xs;
    if (FMT == FMT_NVFP4) v *= (p.cs ? __ldg(p.cs + n) : __ldg(p.ts)) * 128.0f;
    return v;
}

/* One block: weight rows 16 * (blockIdx.x / csplit) + 0..15 (with a GLU epilogue: gate rows gate0 + 8 j + 0..7 and
 * the up rows up0 + 8 j + 0..7 of output columns 8 j .. 8 j + 7, j = blockIdx.x / csplit), K slice (cluster rank,
 * warp) of csplit * 4; one pass of up to 8 batch rows. */
template <class T, int FMT, int VEC, int U, bool QX, bool GLU>
__global__ void __launch_bounds__(kThreads, 4) gemv_kernel(const gemv_params p, const glu_params gp) {
    constexpr int VW = VEC / 4;
    __shared__ __align__(16) float red[kWarps][128];
    __shared__ float part[128];
    __shared__ __align__(16) uint32_t xsm[FMT == FMT_FP8B ? kWarps * 64 : 4]; /* FP8B: x at M = 1 */

    tpk_pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
    const int C = p.csplit, group = blockIdx.x / C, rank = blockIdx.x - group * C;
    const int S = C * kWarps, slice = rank * kWarps + warp;
    int st0 = (int)((long long)p.nsteps * slice / S);

    warp_ctx c;
    c.tig = lane & 3;
    c.st1 = (int)((long long)p.nsteps * (slice + 1) / S);
    if (FMT == FMT_FP8B) { /* slices of whole 128-element blocks (two steps each) */
        const int nb = (p.nsteps + 1) / 2;
        st0 = 2 * (int)((long long)nb * slice / S);
        c.st1 = min(p.nsteps, 2 * (int)((long long)nb * (slice + 1) / S));
    }
    c.nchunks = p.nchunks;
    int n0, n1;
    if (GLU) { /* this lane's gate and up rows of output column jg */
        const int jg = group * 8 + g;
        n0 = gp.gate0 + jg;
        n1 = gp.up0 + jg;
        c.ok0 = c.ok1 = jg < gp.ng;
    } else {
        n0 = group * kRows + g;
        n1 = n0 + 8;
        c.ok0 = n0 < p.N;
        c.ok1 = n1 < p.N;
    }
    c.w0 = p.w + (long long)n0 * p.row_bytes;
    c.w1 = p.w + (long long)n1 * p.row_bytes;
    c.s0 = FMT == FMT_NVFP4 ? p.ws + (long long)n0 * p.srow : nullptr;
    c.s1 = FMT == FMT_NVFP4 ? p.ws + (long long)n1 * p.srow : nullptr;
    c.b0 = FMT == FMT_FP8B ? p.bs + (long long)(n0 >> 7) * p.bld : nullptr;
    c.b1 = FMT == FMT_FP8B ? p.bs + (long long)(n1 >> 7) * p.bld : nullptr;
    c.x = (const unsigned char *)p.x;
    c.xsm = xsm + (FMT == FMT_FP8B ? warp * 64 : 0);
    c.lane = lane;
    c.M = p.M;
    c.K = p.K;
    c.xok = g < p.M;
    /* x row g: 16-bit values, or FP8B's E4M3 codes (QX) */
    c.xr = (const unsigned char *)p.x + (long long)(c.xok ? g : 0) * p.K * (FMT == FMT_FP8B && QX ? 1 : 2);
    c.xbs = p.xbs;
    c.xld = p.xld;

    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    wbuf<VW, U> A, B;
    int s = st0;
    /* PDL (pdl.cuh): both buffers' weight loads go out before the wait, while the previous kernel still runs;
     * x, the residual and y only after it */
    load_buf<FMT, VEC, U>(A, c, s);
    load_buf<FMT, VEC, U>(B, c, s + U);
    tpk_pdl_wait();
    c.xs = QX && FMT != FMT_FP8B ? __ldg(p.xs) : 1.0f;
    if constexpr (FMT == FMT_FP8B && !QX) { /* at M = 1, x a buffer ahead too */
        if (c.M == 1) load_xb<U>(A, c, s), load_xb<U>(B, c, s + U);
    }
    while (s < c.st1) { /* one buffer's loads are in flight while the other is decoded and multiplied */
        compute_any<T, FMT, VEC, U, QX>(A, c, s, acc);
        s += U;
        if (s >= c.st1) break;
        load_buf<FMT, VEC, U>(A, c, s + U);
        if constexpr (FMT == FMT_FP8B && !QX) {
            if (c.M == 1) load_xb<U>(A, c, s + U);
        }
        compute_any<T, FMT, VEC, U, QX>(B, c, s, acc);
        s += U;
        if (s >= c.st1) break;
        load_buf<FMT, VEC, U>(B, c, s + U);
        if constexpr (FMT == FMT_FP8B && !QX) {
            if (c.M == 1) load_xb<U>(B, c, s + U);
        }
    }

    /* the 4 warps' fragments, then output o = threadIdx.x: row r = o % 16, batch row m = o / 16 (consecutive
     * threads write consecutive n); its fragment slot: lane (r % 8) * 4 + m / 2, register 2 (r / 8) + m % 2 */
    *reinterpret_cast<float4 *>(&red[warp][lane * 4]) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    const int o = threadIdx.x, r = o & 15, m = o >> 4;
    const int src = ((r & 7) * 4 + (m >> 1)) * 4 + ((r >> 3) << 1) + (m & 1);
    float v = red[0][src];
#pragma unroll
    for (int w = 1; w < kWarps; w++) v += red[w][src];
    bool store = true;
    if (C > 1) { /* the cluster's blocks hold the other K slices: rank 0 adds them in rank order */
        cg::cluster_group cl = cg::this_cluster();
        part[o] = v;
        cl.sync();
        if (rank == 0) {
            v = 0.0f;
            for (int q = 0; q < C; q++) v += cl.map_shared_rank(part, q)[o];
        }
        store = rank == 0;
        cl.sync(); /* keeps every block's shared memory alive until rank 0 has read it */
    }
    if (!GLU) {
        const int n = group * kRows + r;
        if (!store || m >= p.M || n >= p.N) return;
        v = scaled<FMT, QX>(p, n, c.xs, v);
        const long long oi = (long long)m * p.N + n;
        if (p.bias) v += tt<T>::tof(reinterpret_cast<const T *>(p.bias)[n]);
        if (p.res) v += tt<T>::tof(reinterpret_cast<const T *>(p.res)[oi]); /* plain load: residual may be y */
        reinterpret_cast<T *>(p.y)[oi] = tt<T>::fromf(v);
        return;
    }
    /* GLU: output column j of this block; the gate value (row r < 8) meets its up value (row r + 8) through shared
     * memory, y = act(gate) * up, both in fp32 with their scales and bias (never rounded to T on the way), one
     * rounding */
    if (!store) return; /* block-uniform */
    const int j = group * 8 + (r & 7);
    const int n = (r < 8 ? gp.gate0 : gp.up0) + j; /* the weight row */
    const bool ok = m < p.M && j < gp.ng;
    if (ok) {
        v = scaled<FMT, QX>(p, n, c.xs, v);
        if (p.bias) v += tt<T>::tof(reinterpret_cast<const T *>(p.bias)[n]);
    }
    __syncthreads(); /* every thread has read red */
    red[0][o] = v;
    __syncthreads();
    if (r >= 8 || !ok) return;
    const float u = red[0][o + 8];
    reinterpret_cast<T *>(p.y)[(long long)m * gp.ng + j] =
        tt<T>::fromf((gp.glu == 1 ? tpk_glu_act<0>(v) : tpk_glu_act<1>(v)) * u);
}

/* ---- host side -------------------------------------------------------------------------------------------- */

inline bool aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* chunks per register buffer on the 16-byte path; a build option for the lab (bench/gemv_lab.c) */
#ifndef TPK_GEMV_U16
#define TPK_GEMV_U16 2
#endif

template <class T, int FMT, int VEC, bool QX, bool GLU>
cudaError_t launch(gemv_params p, const glu_params &gp, int M, cudaStream_t stream) {
    constexpr int U = FMT == FMT_FP8B ? 2 : VEC == 16 ? TPK_GEMV_U16 : 4; /* FP8B: a buffer is one 128-block */
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    p.nchunks = (int)(p.row_bytes / VEC);
    p.nsteps = (p.nchunks + 3) / 4;
    const long long G = GLU ? (gp.ng + 7) / 8 : (p.N + kRows - 1) / kRows; /* a GLU block: 8 gate + 8 up rows */
    int C = 1;
    while (C < kMaxCluster && G * kWarps * C < (long long)sms * kWarpsPerSmTarget && p.nsteps >= kWarps * 2 * C)
        C *= 2;
    p.csplit = C;
    tpk_pdl_launch L; /* PDL (pdl.cuh) and, when K is split, the cluster */
    tpk_pdl_config(&L, dim3((unsigned)(G * C)), dim3(kThreads), 0, stream);
    L.attr[1].id = cudaLaunchAttributeClusterDimension;
    L.attr[1].val.clusterDim.x = (unsigned)C;
    L.attr[1].val.clusterDim.y = 1;
    L.attr[1].val.clusterDim.z = 1;
    L.cfg.numAttrs = C > 1 ? 2 : 1;
    const T *x = reinterpret_cast<const T *>(p.x);
    const T *res = reinterpret_cast<const T *>(p.res);
    T *y = reinterpret_cast<T *>(p.y);
    for (int m0 = 0; m0 < M; m0 += kMB) { /* passes of 8 batch rows */
        gemv_params q = p;
        q.M = M - m0 < kMB ? M - m0 : kMB;
        if (FMT == FMT_FP8B && QX) { /* E4M3 codes, a byte each, and their scales' rows */
            q.x = (const unsigned char *)p.x + (long long)m0 * p.K;
            q.xbs = p.xbs + m0;
        } else {
            q.x = x + (long long)m0 * p.K;
        }
        q.res = res ? res + (long long)m0 * p.N : nullptr;
        q.y = y + (long long)m0 * (GLU ? gp.ng : p.N);
        e = cudaLaunchKernelEx(&L.cfg, gemv_kernel<T, FMT, VEC, U, QX, GLU>, q, gp);
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* returned here; not left pending */
            return e;
        }
    }
    return cudaGetLastError();
}

template <int FMT, int VEC, bool QX, bool GLU>
cudaError_t dispatch_t(const gemv_params &p, const glu_params &gp, tp_dtype dt, int M, cudaStream_t stream) {
    return dt == TP_F16 ? launch<__half, FMT, VEC, QX, GLU>(p, gp, M, stream)
                        : launch<__nv_bfloat16, FMT, VEC, QX, GLU>(p, gp, M, stream);
}
template <int FMT, int VEC, bool QX = false>
cudaError_t dispatch(const gemv_params &p, const glu_params &gp, tp_dtype dt, int M, cudaStream_t stream) {
    return gp.glu ? dispatch_t<FMT, VEC, QX, true>(p, gp, dt, M, stream)
                  : dispatch_t<FMT, VEC, QX, false>(p, gp, dt, M, stream);
}

/* A fusion's arguments into gp (after common_ok filled p); false when they break gemv.h's rules. */
bool fusion_ok(const tpk_gemv_fusion *f, const void *residual, const gemv_params *p, glu_params *gp) {
    memset(gp, 0, sizeof *gp);
    if (!f) return true;
    if (f->glu) {
        if (f->glu < 0 || f->glu > 2 || residual || f->glu_n < 1 || f->gate_row < 0 || f->up_row < 0 ||
            (long long)f->gate_row + f->glu_n > p->N || (long long)f->up_row + f->glu_n > p->N)
            return false;
        gp->glu = f->glu;
        gp->ng = f->glu_n;
        gp->gate0 = f->gate_row;
        gp->up0 = f->up_row;
    }
    return true;
}

/* the checks every format shares; fills p's common fields */
bool common_ok(const void *x, const void *bias, const void *residual, void *y, tp_dtype dt, int M, int N, int K,
               int kmult, gemv_params *p) {
    if (dt != TP_F16 && dt != TP_BF16) return false;
    if (M < 1 || N < 1 || K < 1 || K % kmult != 0) return false;
    if (!x || !y || !aligned(x, 16) || !aligned(y, 2)) return false;
    if ((bias && !aligned(bias, 2)) || (residual && !aligned(residual, 2))) return false;
    memset(p, 0, sizeof *p);
    p->x = x;
    p->bias = bias;
    p->res = residual;
    p->y = y;
    p->M = M;
    p->N = N;
    p->K = K;
    return true;
}

} /* namespace */

static int gemv_16(const void *x, const void *w, const void *bias, const void *residual, void *y, tp_dtype dt, int M,
                   int N, int K, const tpk_gemv_fusion *f, tp_stream stream) {
    gemv_params p;
    glu_params gp;
    if (!common_ok(x, bias, residual, y, dt, M, N, K, 8, &p) || !fusion_ok(f, residual, &p, &gp) || !w || !aligned(w, 16))
        return (int)cudaErrorInvalidValue;
    p.w = (const unsigned char *)w;
    p.row_bytes = 2LL * K;
    return (int)dispatch<FMT_16, 16>(p, gp, dt, M, (cudaStream_t)stream);
}

extern "C" int tpk_gemv(const void *x, const void *w, const void *bias, const void *residual, void *y, tp_dtype dt,
                        int M, int N, int K, tp_stream stream) {
    return gemv_16(x, w, bias, residual, y, dt, M, N, K, NULL, stream);
}

extern "C" int tpk_gemv_fused(const void *x, const void *w, const void *bias, void *y, tp_dtype dt, int M, int N, int K,
                              const tpk_gemv_fusion *f, tp_stream stream) {
    return gemv_16(x, w, bias, NULL, y, dt, M, N, K, f, stream);
}

/* tpk_gemv_fp8 (x_scale NULL) and tpk_gemv_w8a8 (x rounded to E4M3 under x_scale on load) */
static int gemv_fp8(const void *x, const float *x_scale, const void *w, const float *channel_scale,
                    const float *tensor_scale, const void *bias, const void *residual, void *y, tp_dtype dt, int M,
                    int N, int K, const tpk_gemv_fusion *f, tp_stream stream) {
    gemv_params p;
    glu_params gp;
    if (!common_ok(x, bias, residual, y, dt, M, N, K, 8, &p) || !fusion_ok(f, residual, &p, &gp) || !w)
        return (int)cudaErrorInvalidValue;
    if ((channel_scale && !aligned(channel_scale, 4)) || (tensor_scale && !aligned(tensor_scale, 4)) ||
        (x_scale && !aligned(x_scale, 4)))
        return (int)cudaErrorInvalidValue;
    p.w = (const unsigned char *)w;
    p.cs = channel_scale;
    p.ts = tensor_scale;
    p.xs = x_scale;
    p.row_bytes = K;
    cudaStream_t s = (cudaStream_t)stream;
    const bool wide = K % 16 == 0 && aligned(w, 16);
    if (!wide && !aligned(w, 8)) return (int)cudaErrorInvalidValue;
    if (x_scale) return (int)(wide ? dispatch<FMT_FP8, 16, true>(p, gp, dt, M, s) : dispatch<FMT_FP8, 8, true>(p, gp, dt, M, s));
    return (int)(wide ? dispatch<FMT_FP8, 16>(p, gp, dt, M, s) : dispatch<FMT_FP8, 8>(p, gp, dt, M, s));
}

extern "C" int tpk_gemv_fp8(const void *x, const void *w, const float *channel_scale, const float *tensor_scale,
                            const void *bias, const void *residual, void *y, tp_dtype dt, int M, int N, int K,
                            tp_stream stream) {
    return gemv_fp8(x, NULL, w, channel_scale, tensor_scale, bias, residual, y, dt, M, N, K, NULL, stream);
}

extern "C" int tpk_gemv_w8a8(const void *x, const float *x_scale, const void *w, const float *channel_scale,
                             const float *tensor_scale, const void *bias, const void *residual, void *y, tp_dtype dt,
                             int M, int N, int K, tp_stream stream) {
    if (!x_scale) return (int)cudaErrorInvalidValue;
    return gemv_fp8(x, x_scale, w, channel_scale, tensor_scale, bias, residual, y, dt, M, N, K, NULL, stream);
}

extern "C" int tpk_gemv_fp8_fused(const void *x, const float *x_scale, const void *w, const float *channel_scale,
                                  const float *tensor_scale, const void *bias, void *y, tp_dtype dt, int M, int N, int K,
                                  const tpk_gemv_fusion *f, tp_stream stream) {
    return gemv_fp8(x, x_scale, w, channel_scale, tensor_scale, bias, NULL, y, dt, M, N, K, f, stream);
}

/* tpk_gemv_nvfp4 (per_row 0: s2 one scalar) and tpk_gemv_nvfp4_rows (per_row 1: s2 one per row) */
static int gemv_nvfp4(const void *x, const void *w, const void *scales, const float *s2, int per_row, const void *bias,
                      const void *residual, void *y, tp_dtype dt, int M, int N, int K, const tpk_gemv_fusion *f,
                      tp_stream stream) {
    gemv_params p;
    glu_params gp;
    if (!common_ok(x, bias, residual, y, dt, M, N, K, 16, &p) || !fusion_ok(f, residual, &p, &gp) || !w || !scales || !s2 ||
        !aligned(s2, 4))
        return (int)cudaErrorInvalidValue;
    p.w = (const unsigned char *)w;
    p.ws = (const unsigned char *)scales;
    (per_row ? p.cs : p.ts) = s2;
    p.row_bytes = K / 2;
    p.srow = K / 16;
    if (K % 32 == 0 && aligned(w, 16) && aligned(scales, 2))
        return (int)dispatch<FMT_NVFP4, 16>(p, gp, dt, M, (cudaStream_t)stream);
    if (!aligned(w, 8)) return (int)cudaErrorInvalidValue;
    return (int)dispatch<FMT_NVFP4, 8>(p, gp, dt, M, (cudaStream_t)stream);
}

extern "C" int tpk_gemv_nvfp4(const void *x, const void *w, const void *scales, const float *global_scale,
                              const void *bias, const void *residual, void *y, tp_dtype dt, int M, int N, int K,
                              tp_stream stream) {
    return gemv_nvfp4(x, w, scales, global_scale, 0, bias, residual, y, dt, M, N, K, NULL, stream);
}

extern "C" int tpk_gemv_nvfp4_rows(const void *x, const void *w, const void *scales, const float *row_s2,
                                   const void *bias, const void *residual, void *y, tp_dtype dt, int M, int N, int K,
                                   tp_stream stream) {
    return gemv_nvfp4(x, w, scales, row_s2, 1, bias, residual, y, dt, M, N, K, NULL, stream);
}

extern "C" int tpk_gemv_nvfp4_fused(const void *x, const void *w, const void *scales, const float *s2, int s2_per_row,
                                    const void *bias, void *y, tp_dtype dt, int M, int N, int K,
                                    const tpk_gemv_fusion *f, tp_stream stream) {
    return gemv_nvfp4(x, w, scales, s2, s2_per_row ? 1 : 0, bias, NULL, y, dt, M, N, K, f, stream);
}

/* tpk_gemv_fp8_block and its fused form */
static int gemv_fp8_block(const void *x, const void *w, const float *w_scales, const void *bias, const void *residual,
                          void *y, tp_dtype dt, int M, int N, int K, const tpk_gemv_fusion *f, tp_stream stream) {
    gemv_params p;
    glu_params gp;
    if (!common_ok(x, bias, residual, y, dt, M, N, K, 16, &p) || !fusion_ok(f, residual, &p, &gp) || !w ||
        !aligned(w, 16) || !w_scales || !aligned(w_scales, 4))
        return (int)cudaErrorInvalidValue;
    p.w = (const unsigned char *)w;
    p.bs = w_scales;
    p.bld = ((K + 127) / 128 + 3) / 4 * 4;
    p.row_bytes = K;
    return (int)dispatch<FMT_FP8B, 16>(p, gp, dt, M, (cudaStream_t)stream);
}

/* tpk_gemv_fp8_block_q and its fused form: x already E4M3 with its 1 x 128 scales */
static int gemv_fp8_block_q(const void *xq, const float *x_scales, int x_ld, const void *w, const float *w_scales,
                            const void *bias, const void *residual, void *y, tp_dtype dt, int M, int N, int K,
                            const tpk_gemv_fusion *f, tp_stream stream) {
    gemv_params p;
    glu_params gp;
    if (!common_ok(xq, bias, residual, y, dt, M, N, K, 16, &p) || !fusion_ok(f, residual, &p, &gp) || !w ||
        !aligned(w, 16) || !w_scales || !aligned(w_scales, 4) || !x_scales || !aligned(x_scales, 4) || x_ld < M)
        return (int)cudaErrorInvalidValue;
    p.w = (const unsigned char *)w;
    p.bs = w_scales;
    p.bld = ((K + 127) / 128 + 3) / 4 * 4;
    p.xbs = x_scales;
    p.xld = x_ld;
    p.row_bytes = K;
    return (int)dispatch<FMT_FP8B, 16, true>(p, gp, dt, M, (cudaStream_t)stream);
}

extern "C" int tpk_gemv_fp8_block_q(const void *xq, const float *x_scales, int x_ld, const void *w,
                                    const float *w_scales, const void *bias, const void *residual, void *y, tp_dtype dt,
                                    int M, int N, int K, tp_stream stream) {
    return gemv_fp8_block_q(xq, x_scales, x_ld, w, w_scales, bias, residual, y, dt, M, N, K, NULL, stream);
}

extern "C" int tpk_gemv_fp8_block_q_fused(const void *xq, const float *x_scales, int x_ld, const void *w,
                                          const float *w_scales, const void *bias, void *y, tp_dtype dt, int M, int N,
                                          int K, const tpk_gemv_fusion *f, tp_stream stream) {
    return gemv_fp8_block_q(xq, x_scales, x_ld, w, w_scales, bias, NULL, y, dt, M, N, K, f, stream);
}

extern "C" int tpk_gemv_fp8_block(const void *x, const void *w, const float *w_scales, const void *bias,
                                  const void *residual, void *y, tp_dtype dt, int M, int N, int K, tp_stream stream) {
    return gemv_fp8_block(x, w, w_scales, bias, residual, y, dt, M, N, K, NULL, stream);
}

extern "C" int tpk_gemv_fp8_block_fused(const void *x, const void *w, const float *w_scales, const void *bias, void *y,
                                        tp_dtype dt, int M, int N, int K, const tpk_gemv_fusion *f, tp_stream stream) {
    return gemv_fp8_block(x, w, w_scales, bias, NULL, y, dt, M, N, K, f, stream);
}

/* 4 codes a thread: e4m3x2 pairs through the hardware conversion (exact); bf16 from the exact f16 value */
template <class T>
__global__ void e4m3_to_16bit_kernel(const unsigned char *__restrict__ w, T *__restrict__ y, long long n) {
    const long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    if (i + 4 <= n && ((uintptr_t)(w + i) & 3) == 0) {
        const uint32_t q = *(const uint32_t *)(w + i);
        const __half2 a = from32<__half2>(e4m3x2_f16x2(q)), b = from32<__half2>(e4m3x2_f16x2(q >> 16));
        y[i] = T(__low2float(a)), y[i + 1] = T(__high2float(a)), y[i + 2] = T(__low2float(b)), y[i + 3] = T(__high2float(b));
        return;
    }
    for (long long k = i; k < n && k < i + 4; k++) y[k] = T(__low2float(from32<__half2>(e4m3x2_f16x2(w[k]))));
}

extern "C" int tpk_e4m3_to_16bit(const void *w, void *y, tp_dtype dt, long long n, tp_stream stream) {
    if (!w || !y || n < 1 || (dt != TP_F16 && dt != TP_BF16)) return (int)cudaErrorInvalidValue;
    const long long threads = (n + 3) / 4;
    const unsigned blocks = (unsigned)((threads + 255) / 256);
    if (dt == TP_F16)
        e4m3_to_16bit_kernel<__half><<<blocks, 256, 0, (cudaStream_t)stream>>>((const unsigned char *)w, (__half *)y, n);
    else
        e4m3_to_16bit_kernel<__nv_bfloat16>
            <<<blocks, 256, 0, (cudaStream_t)stream>>>((const unsigned char *)w, (__nv_bfloat16 *)y, n);
    return (int)cudaGetLastError();
}

/* one thread per byte: two E2M1 codes of one row and their block's scale. K % 16 == 0, so byte b's scale is b / 8
 * (8 bytes a block) and its elements are 2b and 2b + 1, whatever the row. */
__device__ __forceinline__ float e2m1_value(unsigned c) {
    /* s.ee.m: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; from the bits, no table in local memory */
    const unsigned e = (c >> 1) & 3, m = c & 1;
    const float mag = e == 0 ? 0.5f * (float)m : (float)(1u << (e - 1)) * (1.0f + 0.5f * (float)m);
    return c & 8 ? -mag : mag;
}

template <class T>
__global__ void nvfp4_to_16bit_kernel(const unsigned char *__restrict__ w, const unsigned char *__restrict__ sc,
                                      T *__restrict__ y, long long n_bytes) {
    const long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_bytes) return;
    const float s = __low2float(from32<__half2>(e4m3x2_f16x2(sc[b >> 3]))); /* UE4M3: E4M3 bits, sign 0 */
    const unsigned q = w[b];
    y[2 * b] = T(e2m1_value(q & 15) * s);
    y[2 * b + 1] = T(e2m1_value(q >> 4) * s);
}

extern "C" int tpk_nvfp4_to_16bit(const void *w, const void *scales, void *y, tp_dtype dt, long long N, long long K,
                                  tp_stream stream) {
    if (!w || !scales || !y || N < 1 || K < 16 || K % 16 || (dt != TP_F16 && dt != TP_BF16))
        return (int)cudaErrorInvalidValue;
    const long long threads = N * (K / 2);
    const unsigned blocks = (unsigned)((threads + 255) / 256);
    const unsigned char *wc = (const unsigned char *)w, *sc = (const unsigned char *)scales;
    if (dt == TP_F16)
        nvfp4_to_16bit_kernel<__half><<<blocks, 256, 0, (cudaStream_t)stream>>>(wc, sc, (__half *)y, threads);
    else
        nvfp4_to_16bit_kernel<__nv_bfloat16><<<blocks, 256, 0, (cudaStream_t)stream>>>(wc, sc, (__nv_bfloat16 *)y, threads);
    return (int)cudaGetLastError();
}

extern "C" long long tpk_gemv_weight_bytes(int format, long long N, long long K, int channel_scales) {
    switch (format) {
    case 0: return 2 * N * K;
    case 1: return N * K + (channel_scales ? 4 * N : 0) + 4;
    case 2: return N * K / 2 + N * (K / 16) + 4;
    case 3: return N * K + 4 * ((N + 127) / 128) * (((K + 127) / 128 + 3) / 4 * 4);
    default: return 0;
    }
}
