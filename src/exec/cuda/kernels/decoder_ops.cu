/* decoder_ops.cu: the decoder ops' kernels (contracts in decoder_ops.h).
 *
 * Style as kernels.cu: CUDA C, templates only for element types and compile-time sizes, every public entry point
 * dispatches over tp_dtype and refuses an unsupported combination with cudaErrorInvalidValue before launching.
 * Values are widened to fp32 on load, computed in fp32, rounded once on store.
 *
 * Vector paths: the row and elementwise kernels move 4 elements per access when the row length and every base
 * pointer allow it (decided on the host and passed as a flag), else single elements. The pure copies
 * (kv_append, last_token) move the widest unit (16, 8, 4 or 2 bytes) that divides the row and every address.
 *
 * Decode-step shapes are tiny (one token: a few KB per op), so these kernels are latency-bound there: each one
 * is a single launch, reads its inputs once, and keeps its loads independent so that they are in flight
 * together. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exec/cuda/kernels/act_types.cuh"
#include "exec/cuda/kernels/decoder_ops.h"
#include "exec/cuda/kernels/e4m3.cuh"
#include "exec/cuda/kernels/pdl.cuh"
#include "exec/cuda/ptx/attention_ptx.cuh"

#define DEC_THREADS 256
#define DEC_MAX_BLOCKS 8192 /* grid-stride kernels: many waves of blocks on 132 SMs */
#define DEC_INVALID ((int)cudaErrorInvalidValue)
#define DEC_FULL 0xffffffffu

#define DEC_BY_ACT TPK_BY_ACT /* act_types.cuh */

/* ---- element access (ld1, st1: act_types.cuh) ---------------------------------------------------------------- */

/* NB bytes (4, 8, 16 or 32) from p, aligned to min(NB, 16), as 32-bit words. Works on global and shared memory. */
template <int NB> static __device__ __forceinline__ void ld_raw(const void *p, uint32_t *w) {
    if (NB >= 16) {
#pragma unroll
        for (int i = 0; i < NB / 16; i++) {
            const uint4 t = reinterpret_cast<const uint4 *>(p)[i];
            w[4 * i] = t.x, w[4 * i + 1] = t.y, w[4 * i + 2] = t.z, w[4 * i + 3] = t.w;
        }
    } else if (NB == 8) {
        const uint2 t = *reinterpret_cast<const uint2 *>(p);
        w[0] = t.x, w[1] = t.y;
    } else {
        w[0] = *reinterpret_cast<const uint32_t *>(p);
    }
}
template <int NB> static __device__ __forceinline__ void st_raw(void *p, const uint32_t *w) {
    if (NB >= 16) {
#pragma unroll
        for (int i = 0; i < NB / 16; i++)
            reinterpret_cast<uint4 *>(p)[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
    } else if (NB == 8) {
        *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
    } else {
        *reinterpret_cast<uint32_t *>(p) = w[0];
    }
}

/* N consecutive elements (N even, N * size a power of two >= 4 bytes) at p, aligned to that many bytes (16 at
 * most), widened to fp32; stn rounds and stores them. */
template <int N> static __device__ __forceinline__ void ldn(const float *p, float *v) {
    uint32_t w[N];
    ld_raw<4 * N>(p, w);
#pragma unroll
    for (int i = 0; i < N; i++) v[i] = __uint_as_float(w[i]);
}
template <int N> static __device__ __forceinline__ void ldn(const __half *p, float *v) {
    uint32_t w[N / 2];
    ld_raw<2 * N>(p, w);
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        __half2 h;
        memcpy(&h, &w[i], 4);
        const float2 f = __half22float2(h);
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
}
template <int N> static __device__ __forceinline__ void ldn(const __nv_bfloat16 *p, float *v) {
    uint32_t w[N / 2];
    ld_raw<2 * N>(p, w);
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        __nv_bfloat162 h;
        memcpy(&h, &w[i], 4);
        const float2 f = __bfloat1622float2(h);
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
}
/* An FP8 KV cache's E4M3 codes (N = 2, 4, 8 or 16, aligned to N bytes), widened to fp32 exactly (through f16x2);
 * the cache's per-tensor scale is the caller's to apply. */
typedef __nv_fp8_e4m3 kv_e4m3;
template <int N> static __device__ __forceinline__ void ldn(const kv_e4m3 *p, float *v) {
    uint32_t w[N >= 4 ? N / 4 : 1];
    if constexpr (N >= 4) ld_raw<N>(p, w);
    else w[0] = *reinterpret_cast<const unsigned short *>(p);
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i / 2] >> (16 * (i & 1))), __NV_E4M3);
        const float2 f = __half22float2(__half2(hr));
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
}
template <int N> static __device__ __forceinline__ void stn(float *p, const float *v) {
    uint32_t w[N];
#pragma unroll
    for (int i = 0; i < N; i++) w[i] = __float_as_uint(v[i]);
    st_raw<4 * N>(p, w);
}
template <int N> static __device__ __forceinline__ void stn(__half *p, const float *v) {
    uint32_t w[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) w[i] = pack2(v[2 * i], v[2 * i + 1], __half()); /* attention_ptx.cuh */
    st_raw<2 * N>(p, w);
}
template <int N> static __device__ __forceinline__ void stn(__nv_bfloat16 *p, const float *v) {
    uint32_t w[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) w[i] = pack2(v[2 * i], v[2 * i + 1], __nv_bfloat16());
    st_raw<2 * N>(p, w);
}

/* Stores whose destination may be E4M3 under the per-tensor scale sc (e4m3.cuh's rounding, q = sat(rne(v / sc)));
 * the fp32 and 16-bit overloads ignore sc. A producer writing its GEMM reader's E4M3 input saves the quantize
 * kernel the reader would otherwise run. */
template <typename T> static __device__ __forceinline__ void sts1(T *p, size_t i, float v, float) { st1(p, i, v); }
static __device__ __forceinline__ void sts1(kv_e4m3 *p, size_t i, float v, float sc) {
    reinterpret_cast<unsigned char *>(p)[i] = (unsigned char)(tpk_to_e4m3x2(v, 0.0f, sc) & 0xFFu);
}
template <int N, typename T> static __device__ __forceinline__ void stsn(T *p, const float *v, float) { stn<N>(p, v); }
template <int N> static __device__ __forceinline__ void stsn(kv_e4m3 *p, const float *v, float sc) {
    static_assert(N == 4, "E4M3 stores of 4 values (4 bytes)");
    *reinterpret_cast<uint32_t *>(p) = tpk_to_e4m3x2(v[0], v[1], sc) | (tpk_to_e4m3x2(v[2], v[3], sc) << 16);
}

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(DEC_FULL, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(DEC_FULL, v, o));
    return v;
}

/* The sum of v over the block (blockDim.x a multiple of 32, <= 1024), returned to every thread. red: 33 floats of
 * shared memory; the trailing barrier lets the caller reuse it. */
static __device__ __forceinline__ float block_sum(float v, float *red) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < nw ? red[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) red[32] = t;
    }
    __syncthreads();
    return red[32];
}

/* ---- host-side helpers ----------------------------------------------------------------------------------------- */

static int aligned(const void *p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }
static size_t esz(tp_dtype t) { return t == TP_F32 ? 4 : 2; } /* activation types only (checked by the callers) */
static int is_act(tp_dtype t) { return t == TP_F32 || t == TP_F16 || t == TP_BF16; }

static unsigned grid_for(size_t work, unsigned threads) {
    const size_t b = (work + threads - 1) / threads;
    return (unsigned)(b < DEC_MAX_BLOCKS ? b : DEC_MAX_BLOCKS);
}

/* Threads for a block that owns one row of C elements, ~8 elements a thread: a decode row (M = 1, C = 4096) is
 * then read by 512 threads with one or two loads each in flight, instead of a long dependent loop. */
static unsigned row_threads(int C) {
    unsigned t = (unsigned)(((C + 7) / 8 + 31) / 32 * 32);
    return t < 32 ? 32 : t > 1024 ? 1024 : t;
}

/* ================================================================================================================
 * token_embed: one block a row; the id is validated on the device (a miss writes NaN, never reads outside).
 * ============================================================================================================== */

template <typename TT, typename TY>
__global__ void __launch_bounds__(DEC_THREADS)
    token_embed_kernel(const float *__restrict__ ids, const TT *__restrict__ table, TY *__restrict__ y, int C, int V,
                       float scale, int vec) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    const float f = ids[blockIdx.x];
    /* NaN fails every comparison; (float)V may round up for V > 2^24, hence the integer check as well */
    const int ok = f >= 0.0f && f < (float)V && f == truncf(f) && (int)f < V;
    const TT *tr = table + (size_t)(ok ? (int)f : 0) * C;
    TY *yr = y + (size_t)blockIdx.x * C;
    const float nan = __int_as_float(0x7fc00000);
    if (vec) {
        for (int c = threadIdx.x * 4; c < C; c += 4 * blockDim.x) {
            float v[4] = {nan, nan, nan, nan};
            if (ok) {
                ldn<4>(tr + c, v);
#pragma unroll
                for (int k = 0; k < 4; k++) v[k] *= scale;
            }
            stn<4>(yr + c, v);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) st1(yr, c, ok ? ld1(tr, c) * scale : nan);
    }
}

template <typename TT, typename TY>
static int token_embed_launch(const float *ids, const void *table, void *y, int n, int C, int V, float scale,
                              cudaStream_t s) {
    const int vec = C % 4 == 0 && aligned(table, 4 * sizeof(TT)) && aligned(y, 4 * sizeof(TY));
    const unsigned thr = row_threads(C) < DEC_THREADS ? row_threads(C) : DEC_THREADS; /* a copy: ~8 a thread */
    return tpk_pdl_launched(tpk_pdl_launch_kernel(token_embed_kernel<TT, TY>, dim3((unsigned)n), dim3(thr), 0, s, ids,
                                              (const TT *)table, (TY *)y, C, V, scale, vec));
}

extern "C" int tpk_token_embed(const float *ids, const void *table, tp_dtype tdt, void *y, tp_dtype ydt, int n,
                               int C, int V, float scale, tp_stream stream) {
    if (n < 0 || C < 0 || V < 0) return DEC_INVALID;
    if (n == 0 || C == 0) return (int)cudaSuccess;
    if (!ids || !table || !y || V == 0) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(tdt, TT, DEC_BY_ACT(ydt, TY, return token_embed_launch<TT, TY>(ids, table, y, n, C, V, scale, s)))
}

/* ================================================================================================================
 * RMSNorm: one block a row (row_threads: up to 1024 threads, ~8 elements each), two passes over the row: the sum
 * of squares (fp32, per-thread then warp then block), then the scaled output. The second pass re-reads the row
 * from L1 (a decode row is 8 KB in f16), which keeps the kernel valid for any C without a register budget.
 * ============================================================================================================== */

template <typename TX, typename TW, typename TY>
__global__ void __launch_bounds__(1024)
    rmsnorm_kernel(const TX *__restrict__ x, const TW *__restrict__ w, TY *__restrict__ y, int C, float eps,
                   float offset, int vec, const float *__restrict__ ys) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    __shared__ float red[33];
    const float sc = ys ? *ys : 1.0f; /* an E4M3 output's scale */
    const TX *xr = x + (size_t)blockIdx.x * C;
    TY *yr = y + (size_t)blockIdx.x * C;
    float ss = 0.0f;
    if (vec) {
        for (int c = threadIdx.x * 4; c < C; c += 4 * blockDim.x) {
            float v[4];
            ldn<4>(xr + c, v);
#pragma unroll
            for (int k = 0; k < 4; k++) ss = fmaf(v[k], v[k], ss);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            const float v = ld1(xr, c);
            ss = fmaf(v, v, ss);
        }
    }
    /* IEEE sqrt and division (not rsqrtf's 2 ulp): once a row, free, and the reference is fp64 */
    const float r = 1.0f / sqrtf(block_sum(ss, red) / (float)C + eps);
    if (vec) {
        for (int c = threadIdx.x * 4; c < C; c += 4 * blockDim.x) {
            float v[4], wv[4];
            ldn<4>(xr + c, v);
            ldn<4>(w + c, wv);
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = v[k] * r * (offset + wv[k]);
            stsn<4>(yr + c, v, sc);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) sts1(yr, c, ld1(xr, c) * r * (offset + ld1(w, c)), sc);
    }
}

template <typename TX, typename TW, typename TY>
static int rmsnorm_launch(const void *x, const void *w, void *y, int M, int C, float eps, float offset,
                          cudaStream_t s, const float *ys = NULL) {
    const int vec = C % 4 == 0 && aligned(x, 4 * sizeof(TX)) && aligned(w, 4 * sizeof(TW)) &&
                    aligned(y, 4 * sizeof(TY));
    return tpk_pdl_launched(tpk_pdl_launch_kernel(rmsnorm_kernel<TX, TW, TY>, dim3((unsigned)M), dim3(row_threads(C)), 0, s,
                                              (const TX *)x, (const TW *)w, (TY *)y, C, eps, offset, vec, ys));
}

extern "C" int tpk_rmsnorm(const void *x, tp_dtype xdt, const void *w, tp_dtype wdt, void *y, tp_dtype ydt, int M,
                           int C, float eps, float offset, tp_stream stream) {
    if (M < 0 || C < 0 || (M > 0 && C == 0)) return DEC_INVALID; /* an empty row has no mean square */
    if (M == 0) return (int)cudaSuccess;
    if (!x || !w || !y) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(xdt, TX, DEC_BY_ACT(wdt, TW, DEC_BY_ACT(ydt, TY,
               return rmsnorm_launch<TX, TW, TY>(x, w, y, M, C, eps, offset, s))))
}

extern "C" int tpk_rmsnorm_e4m3(const void *x, tp_dtype xdt, const void *w, tp_dtype wdt, void *y,
                                const float *y_scale, int M, int C, float eps, float offset, tp_stream stream) {
    if (M < 0 || C < 0 || (M > 0 && C == 0)) return DEC_INVALID;
    if (M == 0) return (int)cudaSuccess;
    if (!x || !w || !y || !y_scale) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(xdt, TX, DEC_BY_ACT(wdt, TW, return rmsnorm_launch<TX, TW, kv_e4m3>(x, w, y, M, C, eps, offset, s,
                                                                                   y_scale)))
}

/* RMSNorm writing FP8 block-128 (e4m3.cuh tpk_b128_store): one block a row, the sum of squares and r as
 * rmsnorm_kernel computes them (its vector path), then each warp quantizes 1 x 128 blocks w, w + warps, ... of the
 * fp32 normalized values directly (never rounded to 16 bits first). Rows M .. M_pad - 1: pad rows. */
template <typename TX, typename TW>
__global__ void __launch_bounds__(1024) /* row_threads: up to 1024 (512 at C 4096), as rmsnorm_kernel */
    rmsnorm_b128_kernel(const TX *__restrict__ x, const TW *__restrict__ w, uint8_t *__restrict__ q,
                        float *__restrict__ scales, int M, int M_pad, int C, float eps, float offset) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    __shared__ float red[33];
    const int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    uint8_t *qr = q + (size_t)row * C;
    if (row >= M) { /* block-uniform */
        if (warp == 0) tpk_b128_pad_row(qr, scales, row, M_pad, C, lane);
        return;
    }
    const TX *xr = x + (size_t)row * C;
    float ss = 0.0f;
    for (int c = threadIdx.x * 4; c < C; c += 4 * blockDim.x) {
        float v[4];
        ldn<4>(xr + c, v);
#pragma unroll
        for (int k = 0; k < 4; k++) ss = fmaf(v[k], v[k], ss);
    }
    const float r = 1.0f / sqrtf(block_sum(ss, red) / (float)C + eps);
    for (int kb = warp; kb < (C + 127) / 128; kb += nw) {
        const int c = kb * 128 + lane * 4;
        const bool live = c < C;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (live) {
            float wv[4];
            ldn<4>(xr + c, v);
            ldn<4>(w + c, wv);
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = v[k] * r * (offset + wv[k]);
        }
        tpk_b128_store(v, live, qr + c, &scales[(size_t)kb * M_pad + row], lane);
    }
}

extern "C" int tpk_rmsnorm_fp8_b128(const void *x, tp_dtype xdt, const void *w, tp_dtype wdt, void *q, float *scales,
                                    int M, int M_pad, int C, float eps, float offset, tp_stream stream) {
    if (M < 1 || M_pad < M || C < 4 || C % 4 || !x || !w || !q || !scales) return DEC_INVALID;
    if (!aligned(q, 4) || !aligned(scales, 4)) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(xdt, TX, DEC_BY_ACT(wdt, TW, {
        if (!aligned(x, 4 * sizeof(TX)) || !aligned(w, 4 * sizeof(TW))) return DEC_INVALID;
        return tpk_pdl_launched(tpk_pdl_launch_kernel(rmsnorm_b128_kernel<TX, TW>, dim3((unsigned)M_pad),
                                                  dim3(row_threads(C)), 0, s, (const TX *)x, (const TW *)w,
                                                  (uint8_t *)q, scales, M, M_pad, C, eps, offset));
    }))
}

/* ================================================================================================================
 * RoPE: one block a token (b, t). Its D/2 cosines and sines are computed once into shared memory (accurate
 * sincosf: the angle of position 1000 at inv_freq 1 is 1000 rad, where __sinf's error is ~1e-4), then every
 * thread rotates (i, i + D/2) pairs of all H heads. A pair is read and written by the same thread, so y may be x.
 * ============================================================================================================== */

#define ROPE_MAX_HALF 512

template <typename TX, typename TY>
__global__ void __launch_bounds__(DEC_THREADS)
    rope_kernel(const TX *x, TY *y, int T, int H, int D, const float *__restrict__ inv_freq, const int *past,
                const float *valid, int prefix) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    const int bt = blockIdx.x, h2 = D / 2;
    /* exact below 2^24; a per-sample start truncates its count as the CPU's (int64_t) cast does */
    const int start = (past ? *past : 0) + (valid ? prefix + (int)valid[bt / T] : 0);
    const float pos = (float)(start + bt % T);
    for (int i = threadIdx.x; i < h2; i += blockDim.x) {
        const float a = __fmul_rn(pos, inv_freq[i]); /* the fp32 product HF forms, never fused into anything */
        sincosf(a, &sn[i], &cs[i]);
    }
    __syncthreads();
    const size_t base = (size_t)bt * H * D;
    for (int e = threadIdx.x; e < H * h2; e += blockDim.x) {
        const int h = e / h2, i = e - h * h2;
        const size_t o = base + (size_t)h * D + i;
        const float a = ld1(x, o), b = ld1(x, o + h2), c = cs[i], s = sn[i];
        st1(y, o, a * c - b * s);
        st1(y, o + h2, b * c + a * s);
    }
}

template <typename TX, typename TY>
static int rope_launch(const void *x, void *y, int B, int T, int H, int D, const float *inv_freq, const int *past,
                       const float *valid, int prefix, cudaStream_t s) {
    const int pairs = H * (D / 2);
    const unsigned thr = pairs >= DEC_THREADS ? DEC_THREADS : (unsigned)((pairs + 31) / 32 * 32);
    return tpk_pdl_launched(tpk_pdl_launch_kernel(rope_kernel<TX, TY>, dim3((unsigned)(B * T)), dim3(thr), 0, s,
                                              (const TX *)x, (TY *)y, T, H, D, inv_freq, past, valid,
                                              prefix));
}

extern "C" int tpk_rope_at(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, int B, int T, int H, int D,
                           const float *inv_freq, const int *past, const float *valid, int prefix, tp_stream stream) {
    if (B < 0 || T < 0 || H < 0 || D < 2 || D % 2 != 0 || D > 2 * ROPE_MAX_HALF || prefix < 0) return DEC_INVALID;
    if (B == 0 || T == 0 || H == 0) return (int)cudaSuccess;
    if (!x || !y || !inv_freq || (long long)B * T > 0x7FFFFFFFLL || (long long)H * D > 0x7FFFFFFFLL)
        return DEC_INVALID;
    if (x == y && (!is_act(xdt) || !is_act(ydt) || esz(xdt) != esz(ydt))) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(xdt, TX,
               DEC_BY_ACT(ydt, TY, return rope_launch<TX, TY>(x, y, B, T, H, D, inv_freq, past, valid, prefix, s)))
}

extern "C" int tpk_rope(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, int B, int T, int H, int D,
                        const float *inv_freq, const int *past, tp_stream stream) {
    if (!past) return DEC_INVALID;
    return tpk_rope_at(x, xdt, y, ydt, B, T, H, D, inv_freq, past, NULL, 0, stream);
}

/* ================================================================================================================
 * GLU: y = act(gate) * up, grid-stride; both activations as g * sigmoid(u) = g / (1 + e^-u) with u = g (SiLU) or
 * u = 2 sqrt(2/pi) (g + 0.044715 g^3) (GELU tanh: 0.5 (1 + tanh(z)) = sigmoid(2z)), so no 1 + tanh cancellation.
 * No __restrict__: y may alias gate or up (each element read before it is written, by the same thread).
 * ============================================================================================================== */


template <typename TI, typename TY, int ACT>
__global__ void __launch_bounds__(DEC_THREADS)
    glu_kernel(const TI *gate, const TI *up, TY *y, size_t n, int vec, const float *__restrict__ ys) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    const float sc = ys ? *ys : 1.0f; /* an E4M3 output's scale */
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t done = 0;
    if (vec) {
        const size_t n4 = n / 4;
        for (size_t i = tid; i < n4; i += stride) {
            float g[4], u[4];
            ldn<4>(gate + 4 * i, g);
            ldn<4>(up + 4 * i, u);
#pragma unroll
            for (int k = 0; k < 4; k++) g[k] = tpk_glu_act<ACT>(g[k]) * u[k];
            stsn<4>(y + 4 * i, g, sc);
        }
        done = n4 * 4;
    }
    for (size_t i = done + tid; i < n; i += stride) sts1(y, i, tpk_glu_act<ACT>(ld1(gate, i)) * ld1(up, i), sc);
}

template <typename TI, typename TY>
static int glu_launch(const void *gate, const void *up, void *y, size_t n, int act, cudaStream_t s,
                      const float *ys = NULL) {
    const int vec = aligned(gate, 4 * sizeof(TI)) && aligned(up, 4 * sizeof(TI)) && aligned(y, 4 * sizeof(TY));
    const unsigned blocks = grid_for(vec ? (n + 3) / 4 : n, DEC_THREADS);
    return tpk_pdl_launched(tpk_pdl_launch_kernel(act == 0 ? glu_kernel<TI, TY, 0> : glu_kernel<TI, TY, 1>, dim3(blocks),
                                              dim3(DEC_THREADS), 0, s, (const TI *)gate, (const TI *)up, (TY *)y, n,
                                              vec, ys));
}

extern "C" int tpk_glu(const void *gate, const void *up, tp_dtype dt, void *y, tp_dtype ydt, size_t n, int act,
                       tp_stream stream) {
    if (act != 0 && act != 1) return DEC_INVALID;
    if (n == 0) return (int)cudaSuccess;
    if (!gate || !up || !y) return DEC_INVALID;
    if ((y == gate || y == up) && dt != ydt) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(dt, TI, DEC_BY_ACT(ydt, TY, return glu_launch<TI, TY>(gate, up, y, n, act, s)))
}

extern "C" int tpk_glu_e4m3(const void *gate, const void *up, tp_dtype dt, void *y, const float *y_scale, size_t n,
                            int act, tp_stream stream) {
    if (act != 0 && act != 1) return DEC_INVALID;
    if (n == 0) return (int)cudaSuccess;
    if (!gate || !up || !y || !y_scale || y == gate || y == up) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(dt, TI, return glu_launch<TI, kv_e4m3>(gate, up, y, n, act, s, y_scale))
}

/* ================================================================================================================
 * Copies: kv_append and last_token move whole rows in units U (uint4, uint2, uint32_t or uint16_t), the widest
 * that divides the row's bytes and every base address (so every row start is aligned too). One thread a unit.
 * ============================================================================================================== */

template <typename U>
__global__ void __launch_bounds__(DEC_THREADS)
    kv_append_kernel(const U *__restrict__ k, const U *__restrict__ v, U *__restrict__ kv, int B, int T, int L,
                     size_t upr, const int *__restrict__ past_p, size_t total) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    const int past = *past_p;
    if (past < 0 || past > L - T) return; /* a caller error: write nothing rather than outside the cache */
    const size_t bt_n = (size_t)B * T;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / upr, u = i - row * upr;
        const size_t plane = row / bt_n, bt = row - plane * bt_n, b = bt / T, t = bt - b * T;
        const U *src = (plane ? v : k) + bt * upr + u;
        kv[((plane * B + b) * L + (size_t)past + t) * upr + u] = *src;
    }
}

/* The FP8 cache's append: k and v (B, T, W) in TI quantized to E4M3 under the cache's scale, two elements a
 * thread (W even), sat(rne(x / scale)) as every E4M3 store in tprof (e4m3.cuh). */
template <typename TI>
__global__ void __launch_bounds__(DEC_THREADS)
    kv_append_e4m3_kernel(const TI *__restrict__ k, const TI *__restrict__ v, unsigned char *__restrict__ kv, int B,
                          int T, int L, int W, const int *__restrict__ past_p, const float *__restrict__ scale_p,
                          size_t total) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    const int past = *past_p;
    if (past < 0 || past > L - T) return;
    const float sc = *scale_p;
    const size_t half = (size_t)W / 2, bt_n = (size_t)B * T;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / half, c = 2 * (i - row * half);
        const size_t plane = row / bt_n, bt = row - plane * bt_n, b = bt / T, t = bt - b * T;
        const TI *src = (plane ? v : k) + bt * W + c;
        const uint32_t q = tpk_to_e4m3x2(ld1(src, 0), ld1(src, 1), sc);
        *reinterpret_cast<unsigned short *>(kv + ((plane * B + b) * L + (size_t)past + t) * W + c) = (unsigned short)q;
    }
}

/* Rows 0 .. T - 1 of an FP8 cache (2, B, L, W) into y (2, B, T, W) in TY, each code times the scale: the K and V
 * a prefill's flash attention reads (the values the decode steps read from the cache). */
template <typename TY>
__global__ void __launch_bounds__(DEC_THREADS)
    kv_dequant_kernel(const unsigned char *__restrict__ kv, const float *__restrict__ scale_p, TY *__restrict__ y,
                      int B, int T, int L, int W, size_t total) {
    tpk_pdl_trigger();
    tpk_pdl_wait();
    const float sc = *scale_p;
    const size_t half = (size_t)W / 2, bt_n = (size_t)B * T;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / half, c = 2 * (i - row * half);
        const size_t plane = row / bt_n, bt = row - plane * bt_n, b = bt / T, t = bt - b * T;
        float f[2];
        ldn<2>(reinterpret_cast<const kv_e4m3 *>(kv + ((plane * B + b) * L + t) * W + c), f);
        st1(y, row * W + c, f[0] * sc);
        st1(y, row * W + c + 1, f[1] * sc);
    }
}

template <typename U>
__global__ void __launch_bounds__(DEC_THREADS)
    last_token_kernel(const U *__restrict__ x, U *__restrict__ y, int T, size_t upr, size_t total) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / upr, u = i - b * upr;
        y[i] = x[(b * T + (size_t)(T - 1)) * upr + u];
    }
}

/* The widest copy unit (bytes) dividing row_bytes and the addresses a, b, c (c may be NULL). */
static size_t copy_unit(size_t row_bytes, const void *a, const void *b, const void *c) {
    size_t u = 16;
    while (u > 1 && (row_bytes % u || !aligned(a, u) || !aligned(b, u) || (c && !aligned(c, u)))) u >>= 1;
    return u;
}

template <typename U>
static int kv_append_launch(const void *k, const void *v, void *kv, int B, int T, int L, size_t row_bytes,
                            const int *past, cudaStream_t s) {
    const size_t upr = row_bytes / sizeof(U), total = 2 * (size_t)B * T * upr;
    return tpk_pdl_launched(tpk_pdl_launch_kernel(kv_append_kernel<U>, dim3(grid_for(total, DEC_THREADS)),
                                              dim3(DEC_THREADS), 0, s, (const U *)k, (const U *)v, (U *)kv, B, T, L,
                                              upr, past, total));
}

extern "C" int tpk_kv_append(const void *k, const void *v, void *kv, tp_dtype dt, tp_dtype kv_dt,
                             const float *kv_scale, int B, int T, int L, int W, const int *past, tp_stream stream) {
    if (!is_act(dt) || B < 0 || T < 0 || W < 0 || L < T) return DEC_INVALID;
    if (kv_dt != dt && !(kv_dt == TP_E4M3 && dt != TP_F32 && kv_scale && W % 2 == 0)) return DEC_INVALID;
    if (B == 0 || T == 0 || W == 0) return (int)cudaSuccess;
    if (!k || !v || !kv || !past) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    if (kv_dt == TP_E4M3) {
        if (!aligned(kv, 2)) return DEC_INVALID; /* E4M3 pairs are stored as 16-bit words */
        const size_t total = (size_t)B * T * (size_t)W; /* 2 planes x B T W / 2 pairs */
        DEC_BY_ACT(dt, TI,
                   return tpk_pdl_launched(tpk_pdl_launch_kernel(kv_append_e4m3_kernel<TI>,
                                                             dim3(grid_for(total, DEC_THREADS)), dim3(DEC_THREADS), 0,
                                                             s, (const TI *)k, (const TI *)v, (unsigned char *)kv, B,
                                                             T, L, W, past, kv_scale, total)))
    }
    const size_t row = (size_t)W * esz(dt);
    switch (copy_unit(row, k, v, kv)) {
    case 16: return kv_append_launch<uint4>(k, v, kv, B, T, L, row, past, s);
    case 8: return kv_append_launch<uint2>(k, v, kv, B, T, L, row, past, s);
    case 4: return kv_append_launch<uint32_t>(k, v, kv, B, T, L, row, past, s);
    case 2: return kv_append_launch<uint16_t>(k, v, kv, B, T, L, row, past, s);
    default: return DEC_INVALID; /* an odd address of a 16-bit tensor */
    }
}

/* RoPE + KV append (tpk_rope_kv_append): one block a token (b, t). Its cosines and sines as rope_kernel computes them,
 * then the token's keys rotated into shared memory (each value rounded to TI, the keys' type, as rope_kernel's store
 * rounds it), then the K row and the V row written into the cache: copied (TI) or quantized in pairs (E4M3). */
#define ROPE_KV_MAX_W 4096

template <typename TI> static __device__ __forceinline__ float round_to(float x) {
    TI t[1];
    st1(t, 0, x);
    return ld1(t, 0);
}

template <typename TI, int E4M3>
__global__ void __launch_bounds__(DEC_THREADS)
    rope_kv_append_kernel(const TI *__restrict__ k, const TI *__restrict__ v, void *__restrict__ kv, int B, int T,
                          int L, int H, int D, const float *__restrict__ inv_freq, const int *__restrict__ past_p,
                          const float *__restrict__ scale_p) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF], kr[ROPE_KV_MAX_W];
    const int past = *past_p;
    if (past < 0 || past > L - T) return; /* a caller error: write nothing rather than outside the cache */
    const int bt = blockIdx.x, h2 = D / 2, W = H * D, b = bt / T, t = bt - b * T;
    const float pos = (float)(past + t);
    for (int i = threadIdx.x; i < h2; i += blockDim.x) {
        const float a = __fmul_rn(pos, inv_freq[i]);
        sincosf(a, &sn[i], &cs[i]);
    }
    __syncthreads();
    const size_t base = (size_t)bt * W;
    for (int e = threadIdx.x; e < H * h2; e += blockDim.x) {
        const int h = e / h2, i = e - h * h2, o = h * D + i;
        const float a = ld1(k, base + o), bb = ld1(k, base + o + h2), c = cs[i], s = sn[i];
        kr[o] = round_to<TI>(a * c - bb * s);
        kr[o + h2] = round_to<TI>(bb * c + a * s);
    }
    __syncthreads();
    const size_t krow = ((size_t)b * L + (size_t)past + t) * W, vrow = (((size_t)B + b) * L + (size_t)past + t) * W;
    if (E4M3) {
        const float sc = *scale_p;
        unsigned char *q = (unsigned char *)kv;
        for (int c = 2 * threadIdx.x; c < W; c += 2 * blockDim.x) {
            *reinterpret_cast<unsigned short *>(q + krow + c) = (unsigned short)tpk_to_e4m3x2(kr[c], kr[c + 1], sc);
            *reinterpret_cast<unsigned short *>(q + vrow + c) =
                (unsigned short)tpk_to_e4m3x2(ld1(v, base + c), ld1(v, base + c + 1), sc);
        }
    } else {
        TI *o = (TI *)kv;
        for (int c = threadIdx.x; c < W; c += blockDim.x) {
            st1(o, krow + c, kr[c]); /* exact: kr holds TI values */
            o[vrow + c] = v[base + c];
        }
    }
}

template <typename TI>
static int rope_kv_launch(const void *k, const void *v, void *kv, int e4m3, const float *kv_scale, int B, int T, int L,
                          int H, int D, const float *inv_freq, const int *past, cudaStream_t s) {
    const int pairs = H * (D / 2);
    const unsigned thr = pairs >= DEC_THREADS ? DEC_THREADS : (unsigned)((pairs + 31) / 32 * 32);
    if (e4m3)
        return tpk_pdl_launched(tpk_pdl_launch_kernel(rope_kv_append_kernel<TI, 1>, dim3((unsigned)(B * T)), dim3(thr), 0,
                                                  s, (const TI *)k, (const TI *)v, kv, B, T, L, H, D, inv_freq, past,
                                                  kv_scale));
    return tpk_pdl_launched(tpk_pdl_launch_kernel(rope_kv_append_kernel<TI, 0>, dim3((unsigned)(B * T)), dim3(thr), 0, s,
                                              (const TI *)k, (const TI *)v, kv, B, T, L, H, D, inv_freq, past,
                                              kv_scale));
}

extern "C" int tpk_rope_kv_append(const void *k, const void *v, void *kv, tp_dtype dt, tp_dtype kv_dt,
                                  const float *kv_scale, int B, int T, int L, int H, int D, const float *inv_freq,
                                  const int *past, tp_stream stream) {
    if (!is_act(dt) || B < 0 || T < 0 || H < 0 || D < 2 || D % 2 || D > 2 * ROPE_MAX_HALF || L < T ||
        (long long)H * D > ROPE_KV_MAX_W)
        return DEC_INVALID;
    const int e4m3 = kv_dt == TP_E4M3;
    if (kv_dt != dt && !(e4m3 && dt != TP_F32 && kv_scale)) return DEC_INVALID;
    if (B == 0 || T == 0 || H == 0) return (int)cudaSuccess;
    if (!k || !v || !kv || !past || !inv_freq || (long long)B * T > 0x7FFFFFFFLL) return DEC_INVALID;
    if (e4m3 && !aligned(kv, 2)) return DEC_INVALID; /* E4M3 pairs are stored as 16-bit words */
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(dt, TI, return rope_kv_launch<TI>(k, v, kv, e4m3, kv_scale, B, T, L, H, D, inv_freq, past, s))
}

extern "C" int tpk_kv_dequant(const void *kv, const float *kv_scale, void *y, tp_dtype ydt, int B, int T, int L,
                              int W, tp_stream stream) {
    if (!is_act(ydt) || B < 0 || T < 0 || W < 0 || L < T || W % 2) return DEC_INVALID;
    if (B == 0 || T == 0 || W == 0) return (int)cudaSuccess;
    if (!kv || !kv_scale || !y || !aligned(kv, 2)) return DEC_INVALID;
    const size_t total = (size_t)B * T * (size_t)W;
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(ydt, TY,
               return tpk_pdl_launched(tpk_pdl_launch_kernel(kv_dequant_kernel<TY>, dim3(grid_for(total, DEC_THREADS)),
                                                         dim3(DEC_THREADS), 0, s, (const unsigned char *)kv, kv_scale,
                                                         (TY *)y, B, T, L, W, total)))
}

template <typename U>
static int last_token_launch(const void *x, void *y, int B, int T, size_t row_bytes, cudaStream_t s) {
    const size_t upr = row_bytes / sizeof(U), total = (size_t)B * upr;
    return tpk_pdl_launched(tpk_pdl_launch_kernel(last_token_kernel<U>, dim3(grid_for(total, DEC_THREADS)),
                                              dim3(DEC_THREADS), 0, s, (const U *)x, (U *)y, T, upr, total));
}

extern "C" int tpk_last_token(const void *x, void *y, tp_dtype dt, int B, int T, int C, tp_stream stream) {
    if (!is_act(dt) || B < 0 || T < 0 || C < 0 || (B > 0 && C > 0 && T == 0)) return DEC_INVALID;
    if (B == 0 || C == 0) return (int)cudaSuccess;
    if (!x || !y) return DEC_INVALID;
    const size_t row = (size_t)C * esz(dt);
    cudaStream_t s = (cudaStream_t)stream;
    switch (copy_unit(row, x, y, NULL)) {
    case 16: return last_token_launch<uint4>(x, y, B, T, row, s);
    case 8: return last_token_launch<uint2>(x, y, B, T, row, s);
    case 4: return last_token_launch<uint32_t>(x, y, B, T, row, s);
    case 2: return last_token_launch<uint16_t>(x, y, B, T, row, s);
    default: return DEC_INVALID;
    }
}

/* ================================================================================================================
 * argmax: one 1024-thread block a row (a vocabulary row of 32K-256K logits), each thread scanning its elements in
 * increasing index order with ARGMAX_UNROLL independent loads in flight, then a warp and block reduction on
 * (value, index). The order: NaN above every number; equal values: the lower index (first occurrence).
 * ============================================================================================================== */

#define ARGMAX_THREADS 1024
#define ARGMAX_UNROLL 4
#define ARGMAX_NONE 0x7fffffff /* index of "no element yet" */

/* (a, ia) ranks before (b, ib): NaN first (the lowest NaN index), then the larger value, then the lower index. */
static __device__ __forceinline__ bool am_before(float a, int ia, float b, int ib) {
    if (ia == ARGMAX_NONE) return false;
    if (ib == ARGMAX_NONE) return true;
    const bool na = a != a, nb = b != b;
    if (na || nb) return na && (!nb || ia < ib);
    return a > b || (a == b && ia < ib);
}

/* A later element (higher index) replaces the running best only if strictly better. */
static __device__ __forceinline__ void am_take(float v, int i, float *best, int *bi) {
    if (*bi == ARGMAX_NONE || v > *best || (v != v && *best == *best)) *best = v, *bi = i;
}

template <typename TX>
__global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_kernel(const TX *__restrict__ x, float *__restrict__ ids_out, int N, int vec) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    __shared__ float sv[32];
    __shared__ int si[32];
    const TX *xr = x + (size_t)blockIdx.x * N;
    float best = -INFINITY;
    int bi = ARGMAX_NONE;
    int done = 0;
    if (vec) {
        const int step = 4 * ARGMAX_THREADS;
        for (int c0 = threadIdx.x * 4; c0 < N; c0 += ARGMAX_UNROLL * step) {
            float v[ARGMAX_UNROLL][4];
#pragma unroll
            for (int u = 0; u < ARGMAX_UNROLL; u++)
                if (c0 + u * step < N - 3) ldn<4>(xr + c0 + u * step, v[u]);
#pragma unroll
            for (int u = 0; u < ARGMAX_UNROLL; u++)
                if (c0 + u * step < N - 3)
#pragma unroll
                    for (int k = 0; k < 4; k++) am_take(v[u][k], c0 + u * step + k, &best, &bi);
        }
        done = N; /* vec only when N % 4 == 0 */
    }
    for (int c = done + threadIdx.x; c < N; c += ARGMAX_THREADS) am_take(ld1(xr, c), c, &best, &bi);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(DEC_FULL, best, o);
        const int oi = __shfl_xor_sync(DEC_FULL, bi, o);
        if (am_before(ov, oi, best, bi)) best = ov, bi = oi;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) sv[warp] = best, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        best = sv[lane], bi = si[lane]; /* ARGMAX_THREADS / 32 == 32 warps */
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(DEC_FULL, best, o);
            const int oi = __shfl_xor_sync(DEC_FULL, bi, o);
            if (am_before(ov, oi, best, bi)) best = ov, bi = oi;
        }
        if (lane == 0) ids_out[blockIdx.x] = (float)bi;
    }
}

template <typename TX> static int argmax_launch(const void *x, float *ids, int M, int N, cudaStream_t s) {
    const int vec = N % 4 == 0 && aligned(x, 4 * sizeof(TX));
    return tpk_pdl_launched(tpk_pdl_launch_kernel(argmax_kernel<TX>, dim3((unsigned)M), dim3(ARGMAX_THREADS), 0, s,
                                              (const TX *)x, ids, N, vec));
}

extern "C" int tpk_argmax(const void *x, tp_dtype xdt, float *ids_out, int M, int N, tp_stream stream) {
    if (M < 0 || N < 0 || (M > 0 && N == 0) || N > (1 << 24)) return DEC_INVALID;
    if (M == 0) return (int)cudaSuccess;
    if (!x || !ids_out) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    DEC_BY_ACT(xdt, TX, return argmax_launch<TX>(x, ids_out, M, N, s))
}

/* ================================================================================================================
 * advance: the decode graph's last node.
 * ============================================================================================================== */

__global__ void advance_kernel(int *past, int by) {
    tpk_pdl_trigger();
    tpk_pdl_wait();
    *past += by;
}

extern "C" int tpk_advance(int *past, int by, tp_stream stream) {
    if (!past) return DEC_INVALID;
    return tpk_pdl_launched(tpk_pdl_launch_kernel(advance_kernel, dim3(1), dim3(1), 0, (cudaStream_t)stream, past, by));
}

/* ================================================================================================================
 * KV attention (decode): split-KV / flash-decoding on CUDA cores.
 *
 * Why this shape. One decode step of Llama-3-8B attention (B 1, H 32, Hkv 8, D 128, past 1024) reads 4.2 MB of
 * cache and does 8 M multiply-adds: it is a few microseconds of DRAM traffic spread thin, so what matters is
 * that every SM has its share of loads in flight at once. The grid is (chunk, row group, b * Hkv + kv head):
 *   - a chunk is a range of `chunk` cache positions (a multiple of KVA_STEP = 64; the count depends on B, T, L
 *     only, see kva_plan), so Llama's step above runs 17 chunks x 8 heads = 136 blocks of 32 KB each;
 *   - a row group is up to KVA_RB = 8 query rows of one KV head (rows r = t G + g: the G query heads sharing the
 *     KV head, for each of the T tokens), so the K and V of a KV head are read once for all its query heads;
 *   - blocks whose chunk starts at or beyond past + T return before loading anything.
 * Inside a block the 4 warps split the chunk's keys (warp w takes keys lo + 16 w + 64 i), each with its own online
 * softmax over all the block's rows and its own slice of shared memory, so the key loop has no block barrier:
 *   1. cp.async stages the warp's 16 K rows and 16 V rows (keys past the visible end are zero-filled, never read);
 *   2. scores: lane (key kk = lane % 16, half hh = lane / 16) dots half of the key's D dims with each row's Q
 *      (fp32 in shared memory, pre-scaled by scale * log2 e; read as broadcast float4), one shuffle joins halves;
 *   3. online softmax in base 2, masked per row (key j visible to row r iff j <= past + t_r);
 *   4. P V: lane owns D / 32 consecutive output dims, the 16 probabilities per row come from shared memory.
 * Then the 4 warps' states merge in shared memory (re-using the staging buffers) into the block's (max, sum,
 * unnormalized output) per row, written to the workspace; kva_combine merges the chunks. Staged rows are padded by
 * 16 bytes, so the 8 lanes of a 16-byte shared-memory phase hit 8 distinct bank groups.
 * Rows that see no key of a chunk (early tokens of T > 1 against a late chunk) write max -inf, sum 0, output 0,
 * and weigh 0 in the merge; chunk 0 always holds key 0, which every row sees, so every merged sum is >= 1.
 * ============================================================================================================== */

#define KVA_WARPS 4
#define KVA_THREADS (KVA_WARPS * 32)
#define KVA_KW 16                      /* keys per warp per step */
#define KVA_STEP (KVA_WARPS * KVA_KW)  /* keys per block step; chunk sizes are multiples of it */
#define KVA_RB 8                       /* query rows per block */
#define KVA_MAX_CHUNKS 128
#define KVA_LOG2E 1.44269504088896340736f

typedef struct {
    const void *q, *kv;
    void *out;
    float *ws_o, *ws_ml; /* partials: [chunk][row][D] and [chunk][row][2] (max, sum); row = (b T + t) H + h */
    const int *past;
    const float *kv_scale;     /* an FP8 cache's scale (device), else NULL: folded into Q's pre-scale and the output */
    int B, T, H, Hkv, G, L, R; /* R = G T rows per KV head */
    int chunk, n_chunks;
    float qscale;
} kva_params;

/* The shared memory of the split kernel: Q rows (fp32), per-warp probabilities, per-warp K and V staging (TK: the
 * cache's element type). */
template <typename TK, int D> static size_t kva_smem_bytes(void) {
    constexpr int PITCH = D + 16 / (int)sizeof(TK);
    size_t stage = sizeof(TK) * (size_t)KVA_WARPS * 2 * KVA_KW * PITCH;
    const size_t merge = sizeof(float) * (size_t)KVA_WARPS * KVA_RB * D; /* the staging re-used for the warps' merge */
    if (stage < merge) stage = merge;
    return sizeof(float) * (KVA_RB * D + KVA_WARPS * KVA_RB * KVA_KW) + stage;
}

/* Chunk size (keys) and count for B T query rows over a cache of L positions. More chunks means more blocks at
 * small past (parallelism), but a bigger workspace and combine; the cap shrinks as B T grows, because then the
 * batch and the row groups already give the blocks: 128 chunks for B T <= 4 down to 4 for B T >= 128. */
static int kva_plan(int B, int T, int L, int *n_chunks) {
    const long long rows = (long long)B * T;
    long long cap = 512 / (rows > 0 ? rows : 1);
    cap = cap < 4 ? 4 : cap > KVA_MAX_CHUNKS ? KVA_MAX_CHUNKS : cap;
    long long ch = (L + cap - 1) / cap;
    ch = (ch + KVA_STEP - 1) / KVA_STEP * KVA_STEP;
    if (ch < KVA_STEP) ch = KVA_STEP;
    *n_chunks = (int)((L + ch - 1) / ch);
    return (int)ch;
}

/* Stages keys k0 .. k0 + 15 (those < k0 + nk) of the K and V planes into Ks, Vs (KVA_KW rows of PITCH elements),
 * zero-filling the rest; the calling warp's lanes only. Returns after the data is visible to the whole warp. */
template <typename TI, int D, int PITCH>
static __device__ __forceinline__ void kva_stage(TI *Ks, TI *Vs, const TI *kb, const TI *vb, size_t W, int k0, int nk,
                                                 int lane) {
    constexpr int EPC = 16 / (int)sizeof(TI), CPR = D / EPC; /* elements per 16-byte chunk, chunks per row */
    __syncwarp();                                           /* the previous step's reads of Ks, Vs are done */
#pragma unroll 4
    for (int c = lane; c < 2 * KVA_KW * CPR; c += 32) {
        const int plane = c / (KVA_KW * CPR), rem = c - plane * (KVA_KW * CPR), j = rem / CPR, part = rem - j * CPR;
        const TI *src = (plane ? vb : kb) + (size_t)(k0 + j) * W + part * EPC;
        TI *dst = (plane ? Vs : Ks) + j * PITCH + part * EPC;
        cp_async16(smem_u32(dst), j < nk ? src : kb, j < nk ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    __syncwarp();
}

/* Scores of the warp's staged keys against the block's nr rows: s[r] for key lane % 16, complete in both halves
 * of the warp. Qs rows are pre-scaled by scale * log2 e. */
template <typename TI, int D, int PITCH>
static __device__ __forceinline__ void kva_scores(const TI *Ks, const float *Qs, int nr, int lane, float *s) {
    constexpr int HALF = D / 2, EPL = 8; /* elements a load: 16 B (16-bit) or 32 B (fp32) */
    const TI *krow = Ks + (lane & 15) * PITCH + (lane >> 4) * HALF;
    const float *qh = Qs + (lane >> 4) * HALF;
#pragma unroll
    for (int r = 0; r < KVA_RB; r++) s[r] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < HALF; d += EPL) {
        float kf[EPL];
        ldn<EPL>(krow + d, kf);
#pragma unroll
        for (int r = 0; r < KVA_RB; r++) {
            if (r < nr) {
                const float4 a = *reinterpret_cast<const float4 *>(qh + r * D + d);
                const float4 b = *reinterpret_cast<const float4 *>(qh + r * D + d + 4);
                float t = s[r];
                t = fmaf(a.x, kf[0], t), t = fmaf(a.y, kf[1], t), t = fmaf(a.z, kf[2], t), t = fmaf(a.w, kf[3], t);
                t = fmaf(b.x, kf[4], t), t = fmaf(b.y, kf[5], t), t = fmaf(b.z, kf[6], t), t = fmaf(b.w, kf[7], t);
                s[r] = t;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < KVA_RB; r++) s[r] += __shfl_xor_sync(DEC_FULL, s[r], 16);
}

template <typename TI, typename TK, typename TO, int D>
__global__ void __launch_bounds__(KVA_THREADS) kva_split_kernel(kva_params p) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    constexpr int PITCH = D + 16 / (int)sizeof(TK), NV = D / 32;
    extern __shared__ __align__(16) unsigned char kva_smem[];
    float *Qs = reinterpret_cast<float *>(kva_smem);                /* [RB][D] */
    float *Ps = Qs + KVA_RB * D;                                    /* [warp][RB][KW] */
    TK *stage = reinterpret_cast<TK *>(Ps + KVA_WARPS * KVA_RB * KVA_KW); /* [warp][K; V][KW][PITCH] */
    /* an FP8 cache: K = s k_q, V = s v_q, so q . K = (s q) . k_q and sum p V = s sum p v_q */
    const float kvs = p.kv_scale ? *p.kv_scale : 1.0f;
    __shared__ float Mw[KVA_WARPS][KVA_RB], Lw[KVA_WARPS][KVA_RB];

    const int chunk = blockIdx.x, r0 = blockIdx.y * KVA_RB, b = blockIdx.z / p.Hkv, kvh = blockIdx.z % p.Hkv;
    const int past = *p.past;
    const int kv_end = min(past + p.T, p.L), lo = chunk * p.chunk;
    if (lo >= kv_end) return; /* block-uniform: nothing visible in this chunk (the combine skips it too) */
    const int hi = min(lo + p.chunk, kv_end), nr = min(KVA_RB, p.R - r0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const TI *q = (const TI *)p.q;

    for (int e = threadIdx.x; e < KVA_RB * D; e += KVA_THREADS) {
        const int r = e / D, d = e - r * D;
        float v = 0.0f;
        if (r < nr) {
            const int rr = r0 + r, t = rr / p.G, g = rr - t * p.G;
            v = ld1(q, (((size_t)b * p.T + t) * p.H + (size_t)kvh * p.G + g) * D + d) * (p.qscale * kvs);
        }
        Qs[e] = v;
    }
    int lim[KVA_RB]; /* the last key row r sees */
    float m[KVA_RB], l[KVA_RB], acc[KVA_RB][NV];
#pragma unroll
    for (int r = 0; r < KVA_RB; r++) {
        lim[r] = past + (r0 + r) / p.G;
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int v = 0; v < NV; v++) acc[r][v] = 0.0f;
    }
    __syncthreads();

    const size_t W = (size_t)p.Hkv * D;
    const TK *kb = (const TK *)p.kv + (size_t)b * p.L * W + (size_t)kvh * D, *vb = kb + (size_t)p.B * p.L * W;
    TK *Ks = stage + (size_t)warp * 2 * KVA_KW * PITCH, *Vs = Ks + KVA_KW * PITCH;
    float *Pw = Ps + warp * KVA_RB * KVA_KW;
    const int kk = lane & 15;
    for (int k0 = lo + warp * KVA_KW; k0 < hi; k0 += KVA_STEP) {
        const int nk = min(KVA_KW, hi - k0);
        kva_stage<TK, D, PITCH>(Ks, Vs, kb, vb, W, k0, nk, lane);
        float s[KVA_RB];
        kva_scores<TK, D, PITCH>(Ks, Qs, nr, lane, s);
#pragma unroll
        for (int r = 0; r < KVA_RB; r++) {
            if (r >= nr) break;
            const float sr = (kk < nk && k0 + kk <= lim[r]) ? s[r] : -INFINITY;
            float mx = sr; /* both half-warps hold the same 16 scores: a 16-lane max */
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(DEC_FULL, mx, o));
            mx = fmaxf(m[r], mx);
            const float mref = mx == -INFINITY ? 0.0f : mx; /* no visible key yet: p = 0 and alpha = 0, not NaN */
            const float alpha = exp2f(m[r] - mref), pr = exp2f(sr - mref);
            l[r] = fmaf(l[r], alpha, lane < 16 ? pr : 0.0f);
#pragma unroll
            for (int v = 0; v < NV; v++) acc[r][v] *= alpha;
            m[r] = mx;
            if (lane < 16) Pw[r * KVA_KW + kk] = pr;
        }
        __syncwarp();
        /* P V over all 16 staged keys: p = 0 for masked keys, and the zero-filled rows past nk add 0 * 0 */
#pragma unroll
        for (int j4 = 0; j4 < KVA_KW; j4 += 4) {
            float vv[4][NV];
#pragma unroll
            for (int u = 0; u < 4; u++) ldn<NV>(Vs + (j4 + u) * PITCH + lane * NV, vv[u]);
#pragma unroll
            for (int r = 0; r < KVA_RB; r++) {
                if (r >= nr) break;
                const float4 p4 = *reinterpret_cast<const float4 *>(Pw + r * KVA_KW + j4);
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    float a = acc[r][v];
                    a = fmaf(p4.x, vv[0][v], a), a = fmaf(p4.y, vv[1][v], a);
                    a = fmaf(p4.z, vv[2][v], a), a = fmaf(p4.w, vv[3][v], a);
                    acc[r][v] = a;
                }
            }
        }
    }

    /* merge the 4 warps' states; the staging buffers become Aw [warp][RB][D] */
    __syncthreads();
    float *Aw = reinterpret_cast<float *>(stage);
#pragma unroll
    for (int r = 0; r < KVA_RB; r++) {
        if (r >= nr) break;
        const float lt = warp_sum(l[r]);
        if (lane == 0) Mw[warp][r] = m[r], Lw[warp][r] = lt;
        float *a = Aw + (warp * KVA_RB + r) * D + lane * NV;
#pragma unroll
        for (int v = 0; v < NV; v++) a[v] = acc[r][v];
    }
    __syncthreads();
    const size_t rows = (size_t)p.B * p.T * p.H;
    for (int e = threadIdx.x; e < nr * D; e += KVA_THREADS) {
        const int r = e / D, d = e - r * D;
        float M = -INFINITY, Ls = 0.0f, A = 0.0f;
#pragma unroll
        for (int w = 0; w < KVA_WARPS; w++) M = fmaxf(M, Mw[w][r]);
#pragma unroll
        for (int w = 0; w < KVA_WARPS; w++) {
            const float ew = Mw[w][r] == -INFINITY ? 0.0f : exp2f(Mw[w][r] - M);
            Ls = fmaf(ew, Lw[w][r], Ls);
            A = fmaf(ew, Aw[(w * KVA_RB + r) * D + d], A);
        }
        A *= kvs;
        const int rr = r0 + r, t = rr / p.G, g = rr - t * p.G;
        const size_t orow = ((size_t)b * p.T + t) * p.H + (size_t)kvh * p.G + g;
        if (p.n_chunks == 1) {
            st1((TO *)p.out, orow * D + d, A / Ls);
        } else {
            p.ws_o[((size_t)chunk * rows + orow) * D + d] = A;
            if (d == 0) {
                p.ws_ml[((size_t)chunk * rows + orow) * 2] = M;
                p.ws_ml[((size_t)chunk * rows + orow) * 2 + 1] = Ls;
            }
        }
    }
}

/* Merges the chunks that ran (those starting below past + T) of every output row: one warp a row, 4 rows a block.
 * M = max_s m_s, w_s = 2^(m_s - M) (0 for a chunk where the row saw no key), out = sum_s w_s O_s / sum_s w_s l_s.
 * The weights go through shared memory; the O_s loads (lane: D / 32 consecutive floats) are independent, 4 in
 * flight. */
template <typename TO, int D>
__global__ void __launch_bounds__(128)
    kva_combine_kernel(const float *__restrict__ ws_o, const float *__restrict__ ws_ml, TO *__restrict__ out,
                       int rows, int T, int L, int chunk, int n_chunks, const int *__restrict__ past_p) {
    tpk_pdl_trigger(); /* pdl.cuh: nothing before the wait reads what earlier kernels write */
    tpk_pdl_wait();
    constexpr int NV = D / 32;
    __shared__ float wsh[4][KVA_MAX_CHUNKS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, row = blockIdx.x * 4 + warp;
    if (row >= rows) return; /* warp-uniform; only __syncwarp below */
    const int kv_end = min(*past_p + T, L), n = min(n_chunks, (kv_end + chunk - 1) / chunk);
    float M = -INFINITY;
    for (int s = lane; s < n; s += 32) M = fmaxf(M, ws_ml[((size_t)s * rows + row) * 2]);
    M = warp_max(M);
    float Ls = 0.0f;
    for (int s = lane; s < n; s += 32) {
        const float ms = ws_ml[((size_t)s * rows + row) * 2], w = ms == -INFINITY ? 0.0f : exp2f(ms - M);
        wsh[warp][s] = w;
        Ls = fmaf(w, ws_ml[((size_t)s * rows + row) * 2 + 1], Ls);
    }
    Ls = warp_sum(Ls);
    __syncwarp();
    float acc[NV];
#pragma unroll
    for (int v = 0; v < NV; v++) acc[v] = 0.0f;
#pragma unroll 4
    for (int s = 0; s < n; s++) {
        float o[NV];
        ldn<NV>(ws_o + ((size_t)s * rows + row) * D + lane * NV, o);
        const float w = wsh[warp][s];
#pragma unroll
        for (int v = 0; v < NV; v++) acc[v] = fmaf(w, o[v], acc[v]);
    }
    const float inv = 1.0f / Ls;
#pragma unroll
    for (int v = 0; v < NV; v++) st1(out, (size_t)row * D + lane * NV + v, acc[v] * inv);
}

template <typename TI, typename TK, typename TO, int D> static int kva_launch(const kva_params *p, cudaStream_t s) {
    const size_t smem = kva_smem_bytes<TK, D>();
    cudaError_t e = cudaSuccess;
    if (smem > 48 * 1024) /* every call: the attribute lives in the current device's context */
        e = cudaFuncSetAttribute(kva_split_kernel<TI, TK, TO, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem);
    if (e != cudaSuccess) return (int)e;
    const dim3 grid((unsigned)p->n_chunks, (unsigned)((p->R + KVA_RB - 1) / KVA_RB), (unsigned)(p->B * p->Hkv));
    e = tpk_pdl_launch_kernel(kva_split_kernel<TI, TK, TO, D>, grid, dim3(KVA_THREADS), smem, s, *p);
    if (e != cudaSuccess || p->n_chunks == 1) return tpk_pdl_launched(e);
    e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    const int rows = p->B * p->T * p->H;
    return tpk_pdl_launched(tpk_pdl_launch_kernel(kva_combine_kernel<TO, D>, dim3((unsigned)((rows + 3) / 4)), dim3(128), 0,
                                              s, (const float *)p->ws_o, (const float *)p->ws_ml, (TO *)p->out, rows,
                                              p->T, p->L, p->chunk, p->n_chunks, (const int *)p->past));
}

template <typename TI, typename TK, typename TO> static int kva_by_d(int D, const kva_params *p, cudaStream_t s) {
    switch (D) {
    case 64: return kva_launch<TI, TK, TO, 64>(p, s);
    case 128: return kva_launch<TI, TK, TO, 128>(p, s);
    case 256: return kva_launch<TI, TK, TO, 256>(p, s);
    default: return DEC_INVALID;
    }
}

/* Shape checks shared by the workspace query and the launch: 1 when the sizes are supported. */
static int kva_shape_ok(int B, int T, int H, int D, int L) {
    if (B < 1 || T < 1 || H < 1 || T > L) return 0;
    if (D != 64 && D != 128 && D != 256) return 0;
    return (long long)B * T * H <= 0x7FFFFFFFLL / 4;
}

extern "C" size_t tpk_kv_attention_workspace(int B, int T, int H, int D, int L) {
    if (!kva_shape_ok(B, T, H, D, L)) return 0;
    int n = 1;
    kva_plan(B, T, L, &n);
    return n > 1 ? (size_t)n * B * T * H * (size_t)(D + 2) * sizeof(float) : 0;
}

extern "C" int tpk_kv_attention(const void *q, const void *kv, tp_dtype dt, tp_dtype kv_dt, const float *kv_scale,
                                void *out, tp_dtype out_dt, int B, int T, int H, int Hkv, int D, int L,
                                const int *past, float scale, float *workspace, size_t workspace_bytes,
                                tp_stream stream) {
    if (B < 0 || T < 0 || H < 0 || Hkv < 1 || L < 0) return DEC_INVALID;
    if (kv_dt == TP_E4M3 ? !((dt == TP_F16 || dt == TP_BF16) && out_dt == dt && kv_scale) : kv_dt != dt)
        return DEC_INVALID;
    if (B == 0 || T == 0 || H == 0) return (int)cudaSuccess;
    if (!kva_shape_ok(B, T, H, D, L) || H % Hkv != 0 || (long long)B * Hkv > 65535) return DEC_INVALID;
    if (!q || !kv || !out || !past || !aligned(kv, 16)) return DEC_INVALID;
    kva_params p;
    p.chunk = kva_plan(B, T, L, &p.n_chunks);
    const size_t need = tpk_kv_attention_workspace(B, T, H, D, L);
    if (need > 0 && (!workspace || workspace_bytes < need || !aligned(workspace, 16))) return DEC_INVALID;
    p.q = q, p.kv = kv, p.out = out, p.past = past;
    p.kv_scale = kv_dt == TP_E4M3 ? kv_scale : NULL;
    p.ws_o = workspace;
    p.ws_ml = workspace ? workspace + (size_t)p.n_chunks * B * T * H * D : NULL;
    p.B = B, p.T = T, p.H = H, p.Hkv = Hkv, p.G = H / Hkv, p.L = L, p.R = p.G * T;
    p.qscale = scale * KVA_LOG2E;
    if ((p.R + KVA_RB - 1) / KVA_RB > 65535) return DEC_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    if (kv_dt == TP_E4M3) /* 16-bit Q and output only: six more kernels, not eighteen */
        return dt == TP_F16 ? kva_by_d<__half, kv_e4m3, __half>(D, &p, s)
                            : kva_by_d<__nv_bfloat16, kv_e4m3, __nv_bfloat16>(D, &p, s);
    DEC_BY_ACT(dt, TI, DEC_BY_ACT(out_dt, TO, return kva_by_d<TI, TI, TO>(D, &p, s)))
}
