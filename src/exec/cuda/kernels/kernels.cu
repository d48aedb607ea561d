/* kernels.cu: tprof's own CUDA kernels (the contract of every entry point is in kernels.h).
 *
 * Style: CUDA C. Templates appear only for element types and compile-time sizes; every public entry point
 * dispatches over tp_dtype with switch statements, and an unsupported type combination returns
 * cudaErrorInvalidValue without launching anything (never a silent fallback to another type).
 *
 * Numerics: every value is widened to fp32 on load, all arithmetic and statistics are fp32, and the result is
 * rounded once on store: RNE for F16/BF16, and for E4M3 q = sat(rne(y / scale)) through
 * __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3), matching the host codec tp_f32_to_e4m3 (dtype.c).
 * The division by scale is correctly rounded (tpk_div_by_scale, e4m3.cuh: a reciprocal and one exact correction, not a bare
 * multiply by 1/scale) because kernels.h specifies y / scale and the two differ in the last bit for some scales.
 *
 * Vector paths: elementwise and row kernels move 4 elements per access (16 bytes for fp32, 8 for 16-bit types,
 * 4 for FP8) when every pointer involved is aligned to that width; otherwise they fall back to scalar accesses.
 * The choice is made on the host and passed as a flag, so both paths live in one kernel.
 *
 * Errors: arguments are validated on the host (negative sizes, NULL pointers with work to do, a missing
 * E4M3 scale); empty work returns cudaSuccess without a launch (a zero-sized grid is a launch error). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exec/cuda/kernels/e4m3.cuh"
#include "exec/cuda/kernels/gelu.cuh"
#include "exec/cuda/kernels/pdl.cuh"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/kernels/scale_layout.h"
#include "formats/qformat.h"

typedef __nv_fp8_e4m3 e4m3_t; /* storage tag only: accessed through __nv_fp8_storage_t bytes */

#define TPK_THREADS 256     /* elementwise and row kernels */
#define TPK_MAX_BLOCKS 8192 /* grid-stride kernels: enough blocks to fill 132 SMs many times over */

/* ---- element load/store helpers --------------------------------------------------------------------------- */

__device__ __forceinline__ float ld1(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld1(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float ld1(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }

/* scale is used only by the E4M3 overload (1.0f elsewhere). */
__device__ __forceinline__ void st1(float *p, size_t i, float v, float) { p[i] = v; }
__device__ __forceinline__ void st1(__half *p, size_t i, float v, float) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void st1(__nv_bfloat16 *p, size_t i, float v, float) { p[i] = __float2bfloat16_rn(v); }
/* v / scale correctly rounded, saturated to E4M3: e4m3.cuh (shared with gemv.cu's W8A8 inputs) */
__device__ __forceinline__ __nv_fp8_storage_t to_e4m3(float v, float scale) {
    return __nv_cvt_float_to_fp8(tpk_div_by_scale(v, scale), __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ uint32_t to_e4m3x2(float lo, float hi, float scale) { return tpk_to_e4m3x2(lo, hi, scale); }
__device__ __forceinline__ void st1(e4m3_t *p, size_t i, float v, float scale) {
    reinterpret_cast<__nv_fp8_storage_t *>(p)[i] = to_e4m3(v, scale);
}

/* 4 consecutive elements starting at p + i; p + i must be aligned to 4 elements (host checks). */
__device__ __forceinline__ void ld4(const float *p, size_t i, float v[4]) {
    float4 t = *reinterpret_cast<const float4 *>(p + i);
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
}
__device__ __forceinline__ void ld4(const __half *p, size_t i, float v[4]) {
    uint2 t = *reinterpret_cast<const uint2 *>(p + i);
    __half2 a, b;
    memcpy(&a, &t.x, 4);
    memcpy(&b, &t.y, 4);
    float2 fa = __half22float2(a), fb = __half22float2(b);
    v[0] = fa.x, v[1] = fa.y, v[2] = fb.x, v[3] = fb.y;
}
__device__ __forceinline__ void ld4(const __nv_bfloat16 *p, size_t i, float v[4]) {
    uint2 t = *reinterpret_cast<const uint2 *>(p + i);
    __nv_bfloat162 a, b;
    memcpy(&a, &t.x, 4);
    memcpy(&b, &t.y, 4);
    float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    v[0] = fa.x, v[1] = fa.y, v[2] = fb.x, v[3] = fb.y;
}

__device__ __forceinline__ void st4(float *p, size_t i, const float v[4], float) {
    *reinterpret_cast<float4 *>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void st4(__half *p, size_t i, const float v[4], float) {
    __half2 a = __floats2half2_rn(v[0], v[1]), b = __floats2half2_rn(v[2], v[3]);
    uint2 t;
    memcpy(&t.x, &a, 4);
    memcpy(&t.y, &b, 4);
    *reinterpret_cast<uint2 *>(p + i) = t;
}
__device__ __forceinline__ void st4(__nv_bfloat16 *p, size_t i, const float v[4], float) {
    __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]), b = __floats2bfloat162_rn(v[2], v[3]);
    uint2 t;
    memcpy(&t.x, &a, 4);
    memcpy(&t.y, &b, 4);
    *reinterpret_cast<uint2 *>(p + i) = t;
}
__device__ __forceinline__ void st4(e4m3_t *p, size_t i, const float v[4], float scale) {
    *reinterpret_cast<uint32_t *>(p + i) = to_e4m3x2(v[0], v[1], scale) | (to_e4m3x2(v[2], v[3], scale) << 16);
}

/* 8 consecutive elements (16 bytes of a 16-bit type): p + i aligned to 8 elements (host checks). The
 * bandwidth-bound elementwise kernels use these; 4-element accesses of 16-bit data are only 8 bytes. */
__device__ __forceinline__ void ld8(const float *p, size_t i, float v[8]) {
    ld4(p, i, v);
    ld4(p, i + 4, v + 4);
}
template <typename T2, typename T>
__device__ __forceinline__ void ld8_16(const T *p, size_t i, float v[8], float2 (*cvt)(T2)) {
    uint4 t = *reinterpret_cast<const uint4 *>(p + i);
    const uint32_t w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        T2 h;
        memcpy(&h, &w[k], 4);
        float2 f = cvt(h);
        v[2 * k] = f.x, v[2 * k + 1] = f.y;
    }
}
__device__ __forceinline__ float2 h2f2(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float2 b2f2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
__device__ __forceinline__ void ld8(const __half *p, size_t i, float v[8]) { ld8_16<__half2>(p, i, v, h2f2); }
__device__ __forceinline__ void ld8(const __nv_bfloat16 *p, size_t i, float v[8]) {
    ld8_16<__nv_bfloat162>(p, i, v, b2f2);
}
__device__ __forceinline__ void st8(float *p, size_t i, const float v[8], float sc) {
    st4(p, i, v, sc);
    st4(p, i + 4, v + 4, sc);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __half) {
    __half2 h = __floats2half2_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &h, 4);
    return w;
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __nv_bfloat16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &h, 4);
    return w;
}
template <typename T> __device__ __forceinline__ void st8_16(T *p, size_t i, const float v[8]) {
    *reinterpret_cast<uint4 *>(p + i) = make_uint4(pack2(v[0], v[1], T()), pack2(v[2], v[3], T()),
                                                   pack2(v[4], v[5], T()), pack2(v[6], v[7], T()));
}
__device__ __forceinline__ void st8(__half *p, size_t i, const float v[8], float) { st8_16(p, i, v); }
__device__ __forceinline__ void st8(__nv_bfloat16 *p, size_t i, const float v[8], float) { st8_16(p, i, v); }
__device__ __forceinline__ void st8(e4m3_t *p, size_t i, const float v[8], float sc) {
    uint32_t w[2];
#pragma unroll
    for (int k = 0; k < 2; k++)
        w[k] = to_e4m3x2(v[4 * k], v[4 * k + 1], sc) | (to_e4m3x2(v[4 * k + 2], v[4 * k + 3], sc) << 16);
    *reinterpret_cast<uint2 *>(p + i) = make_uint2(w[0], w[1]);
}

/* The per-tensor output scale: read from device memory only for E4M3 outputs (the pointer may be NULL
 * otherwise). */
template <typename TY> __device__ __forceinline__ float out_scale(const float *) { return 1.0f; }
template <> __device__ __forceinline__ float out_scale<e4m3_t>(const float *s) { return *s; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- host-side helpers -------------------------------------------------------------------------------------- */

static int aligned(const void *p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }

/* Blocks for a grid-stride loop over `work` items, TPK_THREADS per block. work > 0. */
static unsigned grid_for(size_t work) {
    size_t b = (work + TPK_THREADS - 1) / TPK_THREADS;
    return (unsigned)(b < TPK_MAX_BLOCKS ? b : TPK_MAX_BLOCKS);
}

static int launched(void) { return (int)cudaGetLastError(); }

#define TPK_INVALID ((int)cudaErrorInvalidValue)

/* ================================================================================================================
 * im2col: img (B, 3, H, W) fp32 -> cols (B*Np, 3*P*P). One thread per output element: consecutive threads write
 * consecutive columns (coalesced) and read runs of P consecutive pixels of one image row.
 * ============================================================================================================== */

template <typename TO>
__global__ void im2col_kernel(const float *__restrict__ img, TO *__restrict__ cols, int H, int W, int P, int gw,
                              int Np, size_t total) {
    const size_t K = 3 * (size_t)P * P, PP = (size_t)P * P;
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < total; o += (size_t)gridDim.x * blockDim.x) {
        size_t r = o / K, c = o % K;
        size_t b = r / Np, p = r % Np;
        size_t py = p / gw, px = p % gw;
        size_t ch = c / PP, ky = (c % PP) / P, kx = c % P;
        float v = img[((b * 3 + ch) * H + py * P + ky) * W + px * P + kx];
        st1(cols, o, v, 1.0f);
    }
}

template <typename TO>
static int im2col_launch(const float *img, void *cols, int B, int H, int W, int P, cudaStream_t s) {
    int gw = W / P, Np = (H / P) * gw;
    size_t total = (size_t)B * Np * 3 * P * P;
    im2col_kernel<TO><<<grid_for(total), TPK_THREADS, 0, s>>>(img, (TO *)cols, H, W, P, gw, Np, total);
    return launched();
}

extern "C" int tpk_im2col(const float *img, void *cols, tp_dtype cols_dt, int B, int H, int W, int P,
                          tp_stream stream) {
    if (B < 0 || H < 0 || W < 0 || P <= 0 || H % P != 0 || W % P != 0) return TPK_INVALID;
    if (B == 0 || H == 0 || W == 0) return (int)cudaSuccess;
    if (!img || !cols) return TPK_INVALID;
    switch (cols_dt) {
    case TP_F32: return im2col_launch<float>(img, cols, B, H, W, P, stream);
    case TP_F16: return im2col_launch<__half>(img, cols, B, H, W, P, stream);
    case TP_BF16: return im2col_launch<__nv_bfloat16>(img, cols, B, H, W, P, stream);
    default: return TPK_INVALID; /* E4M3 would need a scale argument kernels.h does not have */
    }
}

/* ================================================================================================================
 * embed_tokens: x (B, T, C) = [cls + pos[0]] ++ (pe + pos[has_cls:]). One thread per output element; the sum is
 * computed in fp32 and rounded once to dt.
 * ============================================================================================================== */

template <typename TE>
__global__ void embed_kernel(const TE *__restrict__ pe, const TE *__restrict__ cls, const TE *__restrict__ pos,
                             TE *__restrict__ x, int Np, int C, int has_cls, size_t total) {
    const size_t T = (size_t)Np + has_cls;
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < total; o += (size_t)gridDim.x * blockDim.x) {
        size_t c = o % C, bt = o / C, t = bt % T, b = bt / T;
        float base = (has_cls && t == 0) ? ld1(cls, c) : ld1(pe, (b * Np + (t - has_cls)) * C + c);
        st1(x, o, base + ld1(pos, t * C + c), 1.0f);
    }
}

template <typename TE>
static int embed_launch(const void *pe, const void *cls, const void *pos, void *x, int B, int Np, int C, int has_cls,
                        cudaStream_t s) {
    size_t total = (size_t)B * (Np + has_cls) * C;
    embed_kernel<TE><<<grid_for(total), TPK_THREADS, 0, s>>>((const TE *)pe, (const TE *)cls, (const TE *)pos,
                                                              (TE *)x, Np, C, has_cls, total);
    return launched();
}

extern "C" int tpk_embed_tokens(const void *pe, const void *cls, const void *pos, void *x, tp_dtype dt, int B,
                                int Np, int C, int has_cls, tp_stream stream) {
    if (B < 0 || Np < 0 || C < 0 || (has_cls != 0 && has_cls != 1)) return TPK_INVALID;
    if (B == 0 || C == 0 || Np + has_cls == 0) return (int)cudaSuccess;
    if (!pos || !x || (Np > 0 && !pe) || (has_cls && !cls)) return TPK_INVALID;
    switch (dt) {
    case TP_F32: return embed_launch<float>(pe, cls, pos, x, B, Np, C, has_cls, stream);
    case TP_F16: return embed_launch<__half>(pe, cls, pos, x, B, Np, C, has_cls, stream);
    case TP_BF16: return embed_launch<__nv_bfloat16>(pe, cls, pos, x, B, Np, C, has_cls, stream);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * LayerNorm: one warp per row, 8 rows per 256-thread block. Three passes over the row (sum -> mean; sum of
 * squared deviations -> biased variance; normalize and store): the two-pass variance avoids the cancellation of
 * E[x^2] - mean^2 when |mean| >> std, and the second and third passes hit L1 (a ViT row is at most a few KB).
 * ============================================================================================================== */

#define LN_ROWS_PER_BLOCK (TPK_THREADS / 32)

/* mean and 1/sqrt(var + eps) of one row, computed by the 32 lanes of a warp (every lane gets both). */
template <typename TX>
__device__ __forceinline__ void ln_row_stats(const TX *__restrict__ xr, int C, int lane, int vec, float eps,
                                             float *mean_out, float *rstd_out) {
    float s = 0.0f;
    if (vec) {
        for (int c = lane * 4; c < C; c += 128) {
            float v[4];
            ld4(xr, c, v);
            s += (v[0] + v[1]) + (v[2] + v[3]);
        }
    } else {
        for (int c = lane; c < C; c += 32) s += ld1(xr, c);
    }
    const float mean = warp_sum(s) / (float)C;

    float q = 0.0f;
    if (vec) {
        for (int c = lane * 4; c < C; c += 128) {
            float v[4];
            ld4(xr, c, v);
#pragma unroll
            for (int k = 0; k < 4; k++) q = fmaf(v[k] - mean, v[k] - mean, q);
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float d = ld1(xr, c) - mean;
            q = fmaf(d, d, q);
        }
    }
    *mean_out = mean;
    *rstd_out = rsqrtf(warp_sum(q) / (float)C + eps);
}

template <typename TX, typename TW, typename TY>
__global__ void __launch_bounds__(TPK_THREADS)
    layernorm_kernel(const TX *__restrict__ x, const TW *__restrict__ w, const TW *__restrict__ b, TY *__restrict__ y,
                     const float *__restrict__ y_scale, int M, int C, float eps, int vec) {
    const int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= M) return; /* whole warps leave together; the kernel has no block-wide barrier */
    const TX *xr = x + (size_t)row * C;
    TY *yr = y + (size_t)row * C;
    float mean, rstd;
    ln_row_stats(xr, C, lane, vec, eps, &mean, &rstd);
    const float sc = out_scale<TY>(y_scale);

    if (vec) {
        for (int c = lane * 4; c < C; c += 128) {
            float v[4], wv[4], bv[4];
            ld4(xr, c, v);
            ld4(w, c, wv);
            ld4(b, c, bv);
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = fmaf((v[k] - mean) * rstd, wv[k], bv[k]);
            st4(yr, c, v, sc);
        }
    } else {
        for (int c = lane; c < C; c += 32) st1(yr, c, fmaf((ld1(xr, c) - mean) * rstd, ld1(w, c), ld1(b, c)), sc);
    }
}

/* The same arithmetic, in the same order, with the row read from memory once into registers (LN_REG_VECS
 * 4-element vectors per lane): for C % 128 == 0 and C <= 32 * 4 * LN_REG_VECS (ViT-S/B/L's 384, 768, 1024).
 * The three-pass kernel above re-reads the row twice from L1 and spent ~12 us on ViT-B's 12608 x 768 f16 rows
 * on an H200, 1.5x the time of its 39 MB of traffic. Results are bit-identical to it. */
#define LN_REG_VECS 8

template <typename TX, typename TW, typename TY>
__global__ void __launch_bounds__(TPK_THREADS)
    layernorm_reg_kernel(const TX *__restrict__ x, const TW *__restrict__ w, const TW *__restrict__ b,
                         TY *__restrict__ y, const float *__restrict__ y_scale, int M, int C, float eps) {
    const int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32, nv = C / 128;
    if (row >= M) return;
    const TX *xr = x + (size_t)row * C;
    TY *yr = y + (size_t)row * C;
    float v[LN_REG_VECS][4];
#pragma unroll
    for (int i = 0; i < LN_REG_VECS; i++)
        if (i < nv) ld4(xr, lane * 4 + 128 * i, v[i]);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < LN_REG_VECS; i++)
        if (i < nv) s += (v[i][0] + v[i][1]) + (v[i][2] + v[i][3]);
    const float mean = warp_sum(s) / (float)C;
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < LN_REG_VECS; i++)
        if (i < nv)
#pragma unroll
            for (int k = 0; k < 4; k++) q = fmaf(v[i][k] - mean, v[i][k] - mean, q);
    const float rstd = rsqrtf(warp_sum(q) / (float)C + eps), sc = out_scale<TY>(y_scale);
#pragma unroll
    for (int i = 0; i < LN_REG_VECS; i++) {
        if (i >= nv) break;
        const int c = lane * 4 + 128 * i;
        float wv[4], bv[4];
        ld4(w, c, wv);
        ld4(b, c, bv);
#pragma unroll
        for (int k = 0; k < 4; k++) v[i][k] = fmaf((v[i][k] - mean) * rstd, wv[k], bv[k]);
        st4(yr, c, v[i], sc);
    }
}

typedef struct {
    const void *x, *w, *b;
    void *y;
    const float *y_scale;
    int M, C;
    float eps;
    cudaStream_t s;
} ln_args;

template <typename TX, typename TW, typename TY> static int ln_launch(const ln_args *a) {
    int vec = a->C % 4 == 0 && aligned(a->x, 4 * sizeof(TX)) && aligned(a->w, 4 * sizeof(TW)) &&
              aligned(a->b, 4 * sizeof(TW)) && aligned(a->y, 4 * sizeof(TY));
    unsigned blocks = (unsigned)((a->M + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    if (vec && a->C % 128 == 0 && a->C <= 128 * LN_REG_VECS) {
        layernorm_reg_kernel<TX, TW, TY><<<blocks, TPK_THREADS, 0, a->s>>>(
            (const TX *)a->x, (const TW *)a->w, (const TW *)a->b, (TY *)a->y, a->y_scale, a->M, a->C, a->eps);
        return launched();
    }
    layernorm_kernel<TX, TW, TY><<<blocks, TPK_THREADS, 0, a->s>>>((const TX *)a->x, (const TW *)a->w,
                                                                  (const TW *)a->b, (TY *)a->y, a->y_scale, a->M,
                                                                  a->C, a->eps, vec);
    return launched();
}

template <typename TX, typename TW> static int ln_by_y(tp_dtype ydt, const ln_args *a) {
    switch (ydt) {
    case TP_F32: return ln_launch<TX, TW, float>(a);
    case TP_F16: return ln_launch<TX, TW, __half>(a);
    case TP_BF16: return ln_launch<TX, TW, __nv_bfloat16>(a);
    case TP_E4M3: return ln_launch<TX, TW, e4m3_t>(a);
    default: return TPK_INVALID;
    }
}

template <typename TX> static int ln_by_w(tp_dtype wdt, tp_dtype ydt, const ln_args *a) {
    switch (wdt) {
    case TP_F32: return ln_by_y<TX, float>(ydt, a);
    case TP_F16: return ln_by_y<TX, __half>(ydt, a);
    case TP_BF16: return ln_by_y<TX, __nv_bfloat16>(ydt, a);
    default: return TPK_INVALID;
    }
}

extern "C" int tpk_layernorm(const void *x, tp_dtype xdt, const void *w, const void *b, tp_dtype wdt, void *y,
                             tp_dtype ydt, const float *y_scale, int M, int C, float eps, tp_stream stream) {
    if (M < 0 || C < 0 || (M > 0 && C == 0)) return TPK_INVALID; /* an empty row has no mean */
    if (M == 0) return (int)cudaSuccess;
    if (!x || !w || !b || !y || (ydt == TP_E4M3 && !y_scale)) return TPK_INVALID;
    ln_args a = {x, w, b, y, y_scale, M, C, eps, stream};
    switch (xdt) {
    case TP_F32: return ln_by_w<float>(wdt, ydt, &a);
    case TP_F16: return ln_by_w<__half>(wdt, ydt, &a);
    case TP_BF16: return ln_by_w<__nv_bfloat16>(wdt, ydt, &a);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * GELU (exact erf form, as torch.nn.GELU() and the CPU reference; the erfc fits in gelu.cuh, shared with the GELU
 * epilogue of gemm_sm90.cu) and add: grid-stride elementwise kernels.
 * The vector path covers the first n - n % 4 elements, the scalar tail the rest.
 * ============================================================================================================== */

template <typename TY> __device__ __forceinline__ float gelu_y(float v) { return gelu_f(v); }
template <> __device__ __forceinline__ float gelu_y<e4m3_t>(float v) { return gelu_as(v); }

/* G: 0 the identity (a conversion), 1 the exact GELU, 2 its tanh form */
template <typename TY, int G> __device__ __forceinline__ float gelu_g(float v) {
    return G == 0 ? v : G == 1 ? gelu_y<TY>(v) : gelu_tanh_f(v);
}

#define GELU_UNROLL 2 /* 8-element vectors per thread per step, loaded before any is computed */

/* G = 0: the identity (tpk_convert: a type conversion, E4M3 with its scale); 1 GELU; 2 GELU's tanh form */
template <typename TX, typename TY, int G>
__global__ void __launch_bounds__(TPK_THREADS)
    gelu_kernel(const TX *__restrict__ x, TY *__restrict__ y, const float *__restrict__ y_scale, size_t n, int vec) {
    tpk_pdl_trigger(); /* PDL (pdl.cuh): x and the scale come from the kernels before */
    tpk_pdl_wait();
    const float sc = out_scale<TY>(y_scale);
    size_t done = 0;
    if (vec) {
        /* step: GELU_UNROLL runs of blockDim.x consecutive vectors, so each load instruction stays coalesced */
        const size_t n8 = n / 8, step = (size_t)blockDim.x * GELU_UNROLL;
        for (size_t base = blockIdx.x * step + threadIdx.x; base < n8; base += (size_t)gridDim.x * step) {
            float v[GELU_UNROLL][8];
#pragma unroll
            for (int u = 0; u < GELU_UNROLL; u++)
                if (base + u * blockDim.x < n8) ld8(x, 8 * (base + u * blockDim.x), v[u]);
#pragma unroll
            for (int u = 0; u < GELU_UNROLL; u++) {
                if (base + u * blockDim.x >= n8) break;
#pragma unroll
                for (int k = 0; k < 8; k++) v[u][k] = gelu_g<TY, G>(v[u][k]);
                st8(y, 8 * (base + u * blockDim.x), v[u], sc);
            }
        }
        done = n8 * 8;
    }
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t i = done + tid; i < n; i += stride) {
        const float v = ld1(x, i);
        st1(y, i, gelu_g<TY, G>(v), sc);
    }
}

template <typename TX, typename TY, int G>
static int gelu_launch(const void *x, void *y, const float *y_scale, size_t n, cudaStream_t s) {
    int vec = aligned(x, 8 * sizeof(TX)) && aligned(y, 8 * sizeof(TY));
    size_t work = vec ? (n / 8 + GELU_UNROLL - 1) / GELU_UNROLL : n;
    if (work == 0) work = 1; /* n < 8: only the scalar tail */
    size_t blocks = (work + TPK_THREADS - 1) / TPK_THREADS;
    if (blocks > 4 * TPK_MAX_BLOCKS) blocks = 4 * TPK_MAX_BLOCKS;
    /* with the PDL attribute (pdl.cuh): the conversions before FP8 GEMMs sit in chains of short kernels */
    return tpk_pdl_launched(tpk_pdl_launch_kernel(gelu_kernel<TX, TY, G>, dim3((unsigned)blocks), dim3(TPK_THREADS),
                                                  (size_t)0, s, (const TX *)x, (TY *)y, y_scale, n, vec));
}

template <typename TX, int G> static int gelu_by_y(tp_dtype ydt, const void *x, void *y, const float *sc, size_t n,
                                                   cudaStream_t s) {
    switch (ydt) {
    case TP_F32: return gelu_launch<TX, float, G>(x, y, sc, n, s);
    case TP_F16: return gelu_launch<TX, __half, G>(x, y, sc, n, s);
    case TP_BF16: return gelu_launch<TX, __nv_bfloat16, G>(x, y, sc, n, s);
    case TP_E4M3: return gelu_launch<TX, e4m3_t, G>(x, y, sc, n, s);
    default: return TPK_INVALID;
    }
}

template <int G>
static int gelu_or_convert(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, const float *y_scale, size_t n,
                           cudaStream_t stream) {
    if (n == 0) return (int)cudaSuccess;
    if (!x || !y || (ydt == TP_E4M3 && !y_scale)) return TPK_INVALID;
    switch (xdt) {
    case TP_F32: return gelu_by_y<float, G>(ydt, x, y, y_scale, n, stream);
    case TP_F16: return gelu_by_y<__half, G>(ydt, x, y, y_scale, n, stream);
    case TP_BF16: return gelu_by_y<__nv_bfloat16, G>(ydt, x, y, y_scale, n, stream);
    default: return TPK_INVALID;
    }
}

extern "C" int tpk_convert(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, const float *y_scale, size_t n,
                           tp_stream stream) {
    return gelu_or_convert<0>(x, xdt, y, ydt, y_scale, n, (cudaStream_t)stream);
}

extern "C" int tpk_gelu(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, const float *y_scale, size_t n,
                        int tanh_form, tp_stream stream) {
    return tanh_form ? gelu_or_convert<2>(x, xdt, y, ydt, y_scale, n, (cudaStream_t)stream)
                     : gelu_or_convert<1>(x, xdt, y, ydt, y_scale, n, (cudaStream_t)stream);
}

/* No __restrict__: y may alias a or b (each element is read before it is written, by the same thread). */
template <typename TE> __global__ void add_kernel(const TE *a, const TE *b, TE *y, size_t n, int vec) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t done = 0;
    if (vec) {
        const size_t n4 = n / 4;
        for (size_t i = tid; i < n4; i += stride) {
            float va[4], vb[4];
            ld4(a, 4 * i, va);
            ld4(b, 4 * i, vb);
#pragma unroll
            for (int k = 0; k < 4; k++) va[k] += vb[k];
            st4(y, 4 * i, va, 1.0f);
        }
        done = n4 * 4;
    }
    for (size_t i = done + tid; i < n; i += stride) st1(y, i, ld1(a, i) + ld1(b, i), 1.0f);
}

template <typename TE> static int add_launch(const void *a, const void *b, void *y, size_t n, cudaStream_t s) {
    int vec = aligned(a, 4 * sizeof(TE)) && aligned(b, 4 * sizeof(TE)) && aligned(y, 4 * sizeof(TE));
    add_kernel<TE><<<grid_for(vec ? (n + 3) / 4 : n), TPK_THREADS, 0, s>>>((const TE *)a, (const TE *)b, (TE *)y, n,
                                                                             vec);
    return launched();
}

extern "C" int tpk_add(const void *a, const void *b, void *y, tp_dtype dt, size_t n, tp_stream stream) {
    if (n == 0) return (int)cudaSuccess;
    if (!a || !b || !y) return TPK_INVALID;
    switch (dt) {
    case TP_F32: return add_launch<float>(a, b, y, n, stream);
    case TP_F16: return add_launch<__half>(a, b, y, n, stream);
    case TP_BF16: return add_launch<__nv_bfloat16>(a, b, y, n, stream);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * Fused attention (non-causal), flash-attention style with an online softmax.
 *
 * Grid: one 128-thread block per (b, h, tile of ATT_QT = 16 queries), flattened into blockIdx.x with the query
 * tile fastest, so the blocks of one head run together and share its K/V in L2. Each of the 4 warps owns 4
 * queries. The block walks the keys in tiles of ATT_KT = 32, staged in shared memory as fp32:
 *   - scores: lane j computes the score of key j for each of its warp's 4 queries (Q rows in shared memory,
 *     read as float4 broadcasts; K rows padded by one float so the 32 lanes hit 32 different banks);
 *   - online softmax in the log2 domain (Q is pre-multiplied by scale * log2(e), so exp becomes exp2f): the
 *     running max m and each lane's partial sum l are rescaled by exp2(m_old - m_new) whenever the max grows;
 *   - P V: the warp's probabilities go through shared memory (float4 broadcasts), and lane l accumulates output
 *     dims l, l+32, ... (NV = ceil(D/32) registers per query) over the tile's keys.
 * The T x T score matrix never leaves registers. Rows and dims past T and D are zero-filled in shared memory and
 * keys >= T get score -inf, so any T >= 1 and any D <= 128 work (D need not be a multiple of 32 or 4).
 * The first key tile always holds key 0 (< T), so the running max is finite after it and exp2f(-inf - m) = 0
 * initializes the accumulators cleanly.
 * ============================================================================================================== */

#define ATT_THREADS 128
#define ATT_WARPS 4
#define ATT_QPW 4 /* queries per warp */
#define ATT_QT (ATT_WARPS * ATT_QPW)
#define ATT_KT 32

template <typename TI, typename TO, int NV>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_kernel(const TI *__restrict__ qkv, TO *__restrict__ out, const float *__restrict__ out_scale_p, int T,
                     int H, int D, float qscale, int n_qtiles, int vec) {
    constexpr int DP = NV * 32; /* padded head dim */
    __shared__ __align__(16) float Qs[ATT_QT][DP];
    __shared__ float Ks[ATT_KT][DP + 1];
    __shared__ __align__(16) float Vs[ATT_KT][DP];
    __shared__ __align__(16) float Ps[ATT_WARPS][ATT_QPW][ATT_KT];

    const int qt = blockIdx.x % n_qtiles, bh = blockIdx.x / n_qtiles;
    const int h = bh % H, b = bh / H;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const size_t row = 3 * (size_t)H * D; /* elements from one token's qkv row to the next */
    const TI *qbase = qkv + (size_t)b * T * row + (size_t)h * D;
    const TI *kbase = qbase + (size_t)H * D;
    const TI *vbase = qbase + 2 * (size_t)H * D;
    const int q0 = qt * ATT_QT;

    for (int e = threadIdx.x; e < ATT_QT * DP; e += ATT_THREADS) {
        int qi = e / DP, d = e % DP, t = q0 + qi;
        Qs[qi][d] = (t < T && d < D) ? ld1(qbase, (size_t)t * row + d) * qscale : 0.0f;
    }

    float m[ATT_QPW], l[ATT_QPW], acc[ATT_QPW][NV];
#pragma unroll
    for (int q = 0; q < ATT_QPW; q++) {
        m[q] = -INFINITY;
        l[q] = 0.0f;
#pragma unroll
        for (int v = 0; v < NV; v++) acc[q][v] = 0.0f;
    }
    const int Dp4 = (D + 3) & ~3; /* score loop bound; Qs/Ks are zero in [D, DP) */

    for (int k0 = 0; k0 < T; k0 += ATT_KT) {
        __syncthreads(); /* previous tile fully consumed (and, on the first pass, Qs written) */
        if (vec) {       /* D % 4 == 0 and the base pointer 4-element aligned: every row chunk is aligned */
            constexpr int CPR = DP / 4; /* 4-element chunks per padded row */
            for (int e = threadIdx.x; e < ATT_KT * CPR; e += ATT_THREADS) {
                int j = e / CPR, d = (e % CPR) * 4, t = k0 + j;
                float kv[4] = {0.0f, 0.0f, 0.0f, 0.0f}, vv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                if (t < T && d < D) {
                    ld4(kbase, (size_t)t * row + d, kv);
                    ld4(vbase, (size_t)t * row + d, vv);
                }
#pragma unroll
                for (int k = 0; k < 4; k++) Ks[j][d + k] = kv[k];
                *reinterpret_cast<float4 *>(&Vs[j][d]) = make_float4(vv[0], vv[1], vv[2], vv[3]);
            }
        } else {
            for (int e = threadIdx.x; e < ATT_KT * DP; e += ATT_THREADS) {
                int j = e / DP, d = e % DP, t = k0 + j;
                bool in = t < T && d < D;
                Ks[j][d] = in ? ld1(kbase, (size_t)t * row + d) : 0.0f;
                Vs[j][d] = in ? ld1(vbase, (size_t)t * row + d) : 0.0f;
            }
        }
        __syncthreads();

        float s[ATT_QPW];
#pragma unroll
        for (int q = 0; q < ATT_QPW; q++) s[q] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < Dp4; d += 4) {
            const float k0v = Ks[lane][d], k1v = Ks[lane][d + 1], k2v = Ks[lane][d + 2], k3v = Ks[lane][d + 3];
#pragma unroll
            for (int q = 0; q < ATT_QPW; q++) {
                const float4 qv = *reinterpret_cast<const float4 *>(&Qs[warp * ATT_QPW + q][d]);
                s[q] = fmaf(qv.x, k0v, s[q]);
                s[q] = fmaf(qv.y, k1v, s[q]);
                s[q] = fmaf(qv.z, k2v, s[q]);
                s[q] = fmaf(qv.w, k3v, s[q]);
            }
        }

        const bool valid = k0 + lane < T;
#pragma unroll
        for (int q = 0; q < ATT_QPW; q++) {
            const float sq = valid ? s[q] : -INFINITY;
            const float mnew = fmaxf(m[q], warp_max(sq));
            const float alpha = exp2f(m[q] - mnew);
            const float p = exp2f(sq - mnew);
            l[q] = fmaf(l[q], alpha, p); /* per-lane partial sum; alpha is warp-uniform */
#pragma unroll
            for (int v = 0; v < NV; v++) acc[q][v] *= alpha;
            m[q] = mnew;
            Ps[warp][q][lane] = p;
        }
        __syncwarp();

        const int jn = min(ATT_KT, T - k0); /* keys past jn have p = 0 and zero V rows: skip them */
        for (int j = 0; j < jn; j += 4) {
            float4 p4[ATT_QPW];
#pragma unroll
            for (int q = 0; q < ATT_QPW; q++) p4[q] = *reinterpret_cast<const float4 *>(&Ps[warp][q][j]);
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const float v0 = Vs[j][lane + 32 * v], v1 = Vs[j + 1][lane + 32 * v];
                const float v2 = Vs[j + 2][lane + 32 * v], v3 = Vs[j + 3][lane + 32 * v];
#pragma unroll
                for (int q = 0; q < ATT_QPW; q++) {
                    acc[q][v] = fmaf(p4[q].x, v0, acc[q][v]);
                    acc[q][v] = fmaf(p4[q].y, v1, acc[q][v]);
                    acc[q][v] = fmaf(p4[q].z, v2, acc[q][v]);
                    acc[q][v] = fmaf(p4[q].w, v3, acc[q][v]);
                }
            }
        }
    }

    const float sc = out_scale<TO>(out_scale_p);
#pragma unroll
    for (int q = 0; q < ATT_QPW; q++) {
        const float inv = 1.0f / warp_sum(l[q]);
        const int t = q0 + warp * ATT_QPW + q;
        if (t < T) {
            TO *o = out + ((size_t)b * T + t) * ((size_t)H * D) + (size_t)h * D;
#pragma unroll
            for (int v = 0; v < NV; v++) {
                const int d = lane + 32 * v;
                if (d < D) st1(o, d, acc[q][v] * inv, sc);
            }
        }
    }
}

typedef struct {
    const void *qkv;
    void *out;
    const float *out_scale;
    int B, T, H, D;
    float scale;
    cudaStream_t s;
} att_args;

template <typename TI, typename TO, int NV> static int att_launch(const att_args *a) {
    const int n_qtiles = (a->T + ATT_QT - 1) / ATT_QT;
    const size_t blocks = (size_t)a->B * a->H * n_qtiles;
    if (blocks > 0x7FFFFFFFu) return TPK_INVALID;
    const int vec = a->D % 4 == 0 && aligned(a->qkv, 4 * sizeof(TI));
    const float qscale = a->scale * 1.44269504088896340736f; /* log2(e): softmax evaluated with exp2f */
    attention_kernel<TI, TO, NV><<<(unsigned)blocks, ATT_THREADS, 0, a->s>>>(
        (const TI *)a->qkv, (TO *)a->out, a->out_scale, a->T, a->H, a->D, qscale, n_qtiles, vec);
    return launched();
}

template <typename TI, typename TO> static int att_by_nv(const att_args *a) {
    switch ((a->D + 31) / 32) {
    case 1: return att_launch<TI, TO, 1>(a);
    case 2: return att_launch<TI, TO, 2>(a);
    case 3: return att_launch<TI, TO, 3>(a);
    case 4: return att_launch<TI, TO, 4>(a);
    default: return TPK_INVALID;
    }
}

template <typename TI> static int att_by_out(tp_dtype out_dt, const att_args *a) {
    switch (out_dt) {
    case TP_F32: return att_by_nv<TI, float>(a);
    case TP_F16: return att_by_nv<TI, __half>(a);
    case TP_BF16: return att_by_nv<TI, __nv_bfloat16>(a);
    case TP_E4M3: return att_by_nv<TI, e4m3_t>(a);
    default: return TPK_INVALID;
    }
}

extern "C" int tpk_attention(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale,
                             int B, int T, int H, int D, float scale, tp_stream stream) {
    if (B < 0 || T < 0 || H < 0 || D <= 0 || D > 128) return TPK_INVALID;
    if (B == 0 || T == 0 || H == 0) return (int)cudaSuccess;
    if (!qkv || !out || (out_dt == TP_E4M3 && !out_scale)) return TPK_INVALID;
    att_args a = {qkv, out, out_scale, B, T, H, D, scale, stream};
    switch (in_dt) {
    case TP_F32: return att_by_out<float>(out_dt, &a);
    case TP_F16: return att_by_out<__half>(out_dt, &a);
    case TP_BF16: return att_by_out<__nv_bfloat16>(out_dt, &a);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * pool: one thread per (b, c); consecutive threads read consecutive channels of one token (coalesced).
 * Mode 0 copies through fp32, which is exact for every storage type.
 * ============================================================================================================== */

template <typename TE>
__global__ void pool_kernel(const TE *__restrict__ x, TE *__restrict__ y, int T, int C, int mode, int prefix,
                            size_t total) {
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < total; o += (size_t)gridDim.x * blockDim.x) {
        const size_t b = o / C, c = o % C;
        const TE *xb = x + b * T * (size_t)C + c;
        float r;
        if (mode == 0) {
            r = ld1(xb, 0);
        } else {
            float s = 0.0f;
            for (int t = prefix; t < T; t++) s += ld1(xb, (size_t)t * C);
            r = s / (float)(T - prefix);
        }
        st1(y, o, r, 1.0f);
    }
}

template <typename TE>
static int pool_launch(const void *x, void *y, int B, int T, int C, int mode, int prefix, cudaStream_t s) {
    size_t total = (size_t)B * C;
    pool_kernel<TE><<<grid_for(total), TPK_THREADS, 0, s>>>((const TE *)x, (TE *)y, T, C, mode, prefix, total);
    return launched();
}

extern "C" int tpk_pool(const void *x, void *y, tp_dtype dt, int B, int T, int C, int mode, int prefix,
                        tp_stream stream) {
    if (B < 0 || T <= 0 || C < 0 || (mode != 0 && mode != 1)) return TPK_INVALID;
    if (mode == 1 && (prefix < 0 || prefix >= T)) return TPK_INVALID; /* the mean needs at least one token */
    if (B == 0 || C == 0) return (int)cudaSuccess;
    if (!x || !y) return TPK_INVALID;
    switch (dt) {
    case TP_F32: return pool_launch<float>(x, y, B, T, C, mode, prefix, stream);
    case TP_F16: return pool_launch<__half>(x, y, B, T, C, mode, prefix, stream);
    case TP_BF16: return pool_launch<__nv_bfloat16>(x, y, B, T, C, mode, prefix, stream);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * amax: grid-stride max |x|, then a warp and a block reduction, then one atomicMax per block on the float's bit
 * pattern: for non-negative floats (and +Inf) the IEEE order equals the signed-integer order of the bits, and
 * any negative initial value (sign bit set: a negative int) loses to every result. fmaxf drops NaNs, so NaNs are
 * tracked separately and published as 0x7FFFFFFF, a NaN whose bits exceed every other non-negative float's:
 * once written, no later atomicMax can replace it.
 * ============================================================================================================== */

#define AMAX_NAN_BITS 0x7FFFFFFF

template <typename TE> __global__ void __launch_bounds__(TPK_THREADS) amax_kernel(const TE *__restrict__ x, size_t n,
                                                                                  float *amax, int vec) {
    __shared__ float wmax[TPK_THREADS / 32];
    __shared__ int wnan[TPK_THREADS / 32];
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    float mx = 0.0f;
    int nan = 0;
    size_t done = 0;
    if (vec) {
        const size_t n4 = n / 4;
        for (size_t i = tid; i < n4; i += stride) {
            float v[4];
            ld4(x, 4 * i, v);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                mx = fmaxf(mx, fabsf(v[k]));
                nan |= v[k] != v[k];
            }
        }
        done = n4 * 4;
    }
    for (size_t i = done + tid; i < n; i += stride) {
        float v = ld1(x, i);
        mx = fmaxf(mx, fabsf(v));
        nan |= v != v;
    }
    mx = warp_max(mx);
    nan = __any_sync(0xffffffffu, nan);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        wmax[warp] = mx;
        wnan[warp] = nan;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < TPK_THREADS / 32; w++) {
            mx = fmaxf(mx, wmax[w]);
            nan |= wnan[w];
        }
        atomicMax(reinterpret_cast<int *>(amax), nan ? AMAX_NAN_BITS : __float_as_int(mx));
    }
}

template <typename TE> static int amax_launch(const void *x, size_t n, float *amax, cudaStream_t s) {
    int vec = aligned(x, 4 * sizeof(TE));
    amax_kernel<TE><<<grid_for(vec ? (n + 3) / 4 : n), TPK_THREADS, 0, s>>>((const TE *)x, n, amax, vec);
    return launched();
}

extern "C" int tpk_amax(const void *x, tp_dtype dt, size_t n, float *amax, tp_stream stream) {
    if (n == 0) return (int)cudaSuccess;
    if (!x || !amax) return TPK_INVALID;
    switch (dt) {
    case TP_F32: return amax_launch<float>(x, n, amax, stream);
    case TP_F16: return amax_launch<__half>(x, n, amax, stream);
    case TP_BF16: return amax_launch<__nv_bfloat16>(x, n, amax, stream);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * fill: splitmix64 of (seed + index) mapped to [-1, 1); used for benchmark operands only.
 * ============================================================================================================== */

template <typename TE> __global__ void fill_kernel(TE *p, size_t n, uint64_t seed) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float v = (float)(z >> 40) * (1.0f / 8388608.0f) - 1.0f; /* 24 random bits -> [-1, 1) */
        st1(p, i, v, 1.0f);
    }
}

template <typename TE> static int fill_launch(void *p, size_t n, uint64_t seed, cudaStream_t s) {
    fill_kernel<TE><<<grid_for(n), TPK_THREADS, 0, s>>>((TE *)p, n, seed);
    return launched();
}

extern "C" int tpk_fill_uniform(void *p, tp_dtype dt, size_t n, uint64_t seed, tp_stream stream) {
    if (n == 0) return (int)cudaSuccess;
    if (!p) return TPK_INVALID;
    switch (dt) {
    case TP_F32: return fill_launch<float>(p, n, seed, stream);
    case TP_F16: return fill_launch<__half>(p, n, seed, stream);
    case TP_BF16: return fill_launch<__nv_bfloat16>(p, n, seed, stream);
    case TP_E4M3: return fill_launch<e4m3_t>(p, n, seed, stream);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * Block QDQ (MXFP8, NVFP4, MXFP4), four elements per thread, BLK / 4 lanes per block (BLK = 32 or 16).
 * The arithmetic mirrors tp_qdq_f32 step by step (src/formats/qformat.c), so the two agree bit for bit:
 *   MX:    amax over the block; shared_exp = floor(log2 amax) - emax_elem, clamped to [-127, 127] (amax 0:
 *          -127); X = 2^shared_exp; q = enc(x / X) in fp32; y = dec(q) * X.
 *   NVFP4: s = E4M3_sat(amax / (6 s2)) rounded once from fp64; d = s * s2 in fp32; q = E2M1(x / d);
 *          y = dec(q) * s (s2 stays out: the GEMM's alpha). d = 0 (s encodes to 0): y = 0.
 * ============================================================================================================== */

/* max |v| over one block held by LPB aligned lanes, 4 values each (every lane of the warp must call it); NaN is
 * skipped, as fmaxf skips it. */
template <int LPB> __device__ __forceinline__ float block_amax4(const float v[4]) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = LPB / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    return amax;
}

/* The OCP MX shared exponent (qformat.c): floor(log2 amax) - emax (frexpf is exact, subnormals included),
 * -127 for amax 0, clamped to [-127, 127]. */
__device__ __forceinline__ int mx_shared_exp(float amax, int emax) {
    int e;
    int shared = amax == 0.0f ? -127 : (frexpf(amax, &e), e - 1) - emax;
    return shared < -127 ? -127 : shared > 127 ? 127 : shared;
}

__device__ __forceinline__ float e2m1_qdq(float v) {
    __nv_fp4_storage_t q = __nv_cvt_float_to_fp4(v, __NV_E2M1, cudaRoundNearest);
    __half_raw h = __nv_cvt_fp4_to_halfraw(q, __NV_E2M1);
    return __half2float(__half(h));
}

__device__ __forceinline__ float e4m3_qdq(float v) {
    __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    __half_raw h = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3);
    return __half2float(__half(h));
}

template <int QF, typename TX, typename TY>
__global__ void block_qdq_kernel(const TX *__restrict__ x, TY *__restrict__ y, long long rows, long long K,
                                 const float *__restrict__ global) {
    /* 4 consecutive elements per thread (one 8- or 16-byte access), LPB lanes per block: the 2-byte scalar
     * version was bound by its memory accesses */
    constexpr int BLK = QF == TP_QF_NVFP4 ? 16 : 32;
    constexpr int LPB = BLK / 4;   /* lanes per block */
    constexpr int GPW = 32 / LPB;  /* blocks per warp */
    const long long nblk_row = K / BLK, nblk = rows * nblk_row;
    const int wl = threadIdx.x % 32, lib = wl % LPB; /* lane in warp, lane in block */
    const float s2 = QF == TP_QF_NVFP4 ? *global : 1.0f;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const long long n_warps = (long long)gridDim.x * blockDim.x / 32;
    /* the loop runs per warp (b0 is the same for all its lanes), so every lane reaches the shuffles */
    for (long long b0 = warp * GPW; b0 < nblk; b0 += n_warps * GPW) {
        const long long b = b0 + wl / LPB;
        const bool live = b < nblk;
        const long long i = live ? (b / nblk_row) * K + (b % nblk_row) * BLK + lib * 4 : 0;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (live) ld4(x, (size_t)i, v);
        const float amax = block_amax4<LPB>(v);
        float out[4];
        if (QF == TP_QF_NVFP4) {
            /* the block scale once per block (fp64), then broadcast; one rounding from fp64 to E4M3: through fp32
             * it would round twice (qformat.c explains) */
            float sd = 0.0f;
            if (lib == 0) {
                __nv_fp8_storage_t sc =
                    __nv_cvt_double_to_fp8((double)amax / (6.0 * (double)s2), __NV_SATFINITE, __NV_E4M3);
                sd = __half2float(__half(__nv_cvt_fp8_to_halfraw(sc, __NV_E4M3)));
            }
            sd = __shfl_sync(0xffffffffu, sd, wl - lib);
            const float d = sd * s2;
#pragma unroll
            for (int k = 0; k < 4; k++) out[k] = d == 0.0f ? 0.0f : e2m1_qdq(v[k] / d) * sd;
        } else {
            const int shared = mx_shared_exp(amax, QF == TP_QF_MXFP8 ? 8 : 2);
            const float X = ldexpf(1.0f, shared);
            /* X is a power of two, so is 1/X (2^-127..2^127 are all representable): v * (1/X) rounds the same
             * exact value v / X rounds, once */
            const float inv = ldexpf(1.0f, -shared);
#pragma unroll
            for (int k = 0; k < 4; k++)
                out[k] = (QF == TP_QF_MXFP8 ? e4m3_qdq(v[k] * inv) : e2m1_qdq(v[k] * inv)) * X;
        }
        if (live) st4(y, (size_t)i, out, 1.0f);
    }
}

template <int QF, typename TX>
static int block_qdq_by_y(const void *x, tp_dtype ydt, void *y, long long rows, long long K, const float *g,
                          cudaStream_t s) {
    const int blk = QF == TP_QF_NVFP4 ? 16 : 32;
    const size_t threads = (size_t)rows * (size_t)K / 4; /* four elements each */
    if (!aligned(x, 4 * sizeof(TX)) || !aligned(y, 4 * (ydt == TP_F32 ? 4 : 2))) return TPK_INVALID;
    const unsigned grid = grid_for(threads);
    (void)blk;
    switch (ydt) {
    case TP_F32: block_qdq_kernel<QF, TX, float><<<grid, TPK_THREADS, 0, s>>>((const TX *)x, (float *)y, rows, K, g); break;
    case TP_BF16:
        block_qdq_kernel<QF, TX, __nv_bfloat16><<<grid, TPK_THREADS, 0, s>>>((const TX *)x, (__nv_bfloat16 *)y, rows, K, g);
        break;
    default: return TPK_INVALID;
    }
    return launched();
}

template <int QF>
static int block_qdq_by_x(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, long long rows, long long K,
                          const float *g, cudaStream_t s) {
    switch (xdt) {
    case TP_F32: return block_qdq_by_y<QF, float>(x, ydt, y, rows, K, g, s);
    case TP_F16: return block_qdq_by_y<QF, __half>(x, ydt, y, rows, K, g, s);
    case TP_BF16: return block_qdq_by_y<QF, __nv_bfloat16>(x, ydt, y, rows, K, g, s);
    default: return TPK_INVALID;
    }
}

extern "C" int tpk_block_qdq(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, long long rows, long long K,
                             int qformat, const float *global, tp_stream stream) {
    if (rows <= 0 || K <= 0) return rows == 0 || K == 0 ? (int)cudaSuccess : TPK_INVALID;
    if (!x || !y) return TPK_INVALID;
    switch (qformat) {
    case TP_QF_MXFP8: return K % 32 ? TPK_INVALID : block_qdq_by_x<TP_QF_MXFP8>(x, xdt, y, ydt, rows, K, global, stream);
    case TP_QF_MXFP4: return K % 32 ? TPK_INVALID : block_qdq_by_x<TP_QF_MXFP4>(x, xdt, y, ydt, rows, K, global, stream);
    case TP_QF_NVFP4:
        if (K % 16 || !global) return TPK_INVALID;
        return block_qdq_by_x<TP_QF_NVFP4>(x, xdt, y, ydt, rows, K, global, stream);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * FP8 block-128 activations (1 x 128 blocks along K; DeepSeek-V3 section 3.3; cuBLASLt VEC128_32F), written
 * directly by their producer (LayerNorm, GELU) or by a standalone quantizer. The arithmetic is tp_quantize's
 * for fp8-block128 (qformat.c), bit for bit: amax over the block with NaN skipped (fmaxf skips it); s = amax /
 * 448 in fp32 (equal to the fp64 division rounded once, qformat.c says why), 1 when that is 0, a quiet NaN when
 * amax is Inf (then every code is 0); q = E4M3_satfinite(rne(x / s)), a NaN x encoded directly (keeping its
 * sign, which neither x / s nor __nv_cvt_float_to_fp8 keeps).
 * One warp per block, lane l holding elements 4l..4l+3 (K % 4 == 0, so a lane holds all four or none). Rows M to
 * M_pad - 1 (cuBLASLt wants M % 4 == 0 for block scales: the engine pads) get codes 0 and scale 1, so the
 * padded GEMM rows read defined values.
 * ============================================================================================================== */

/* the block's codes and scale: e4m3.cuh tpk_b128_store, tpk_b128_pad_row */

template <typename TX, int GELU>
__global__ void __launch_bounds__(TPK_THREADS)
    quant_b128_kernel(const TX *__restrict__ x, uint8_t *__restrict__ q, float *__restrict__ scales, int M, int M_pad,
                      int K) {
    const int KB = (K + 127) / 128, lane = threadIdx.x % 32;
    const long long nblk = (long long)M_pad * KB;
    const long long n_warps = (long long)gridDim.x * blockDim.x / 32;
    /* block b = (row, kb), kb fastest: neighbouring warps read neighbouring 256-byte spans of one row */
    for (long long b = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32; b < nblk; b += n_warps) {
        const int row = (int)(b / KB), kb = (int)(b % KB), k = kb * 128 + lane * 4;
        uint8_t *qr = q + (size_t)row * K;
        if (row >= M) {
            if (k < K) *reinterpret_cast<uint32_t *>(qr + k) = 0u;
            if (lane == 0) scales[(size_t)kb * M_pad + row] = 1.0f;
            continue;
        }
        const bool live = k < K;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (live) ld4(x, (size_t)row * K + k, v);
        if (GELU) {
#pragma unroll
            for (int j = 0; j < 4; j++) v[j] = GELU == 2 ? gelu_tanh_f(v[j]) : gelu_f(v[j]);
        }
        tpk_b128_store(v, live, qr + k, &scales[(size_t)kb * M_pad + row], lane);
    }
}

template <typename TX, typename TW>
__global__ void __launch_bounds__(TPK_THREADS)
    layernorm_b128_kernel(const TX *__restrict__ x, const TW *__restrict__ w, const TW *__restrict__ b,
                          uint8_t *__restrict__ q, float *__restrict__ scales, int M, int M_pad, int C, float eps) {
    const int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= M_pad) return;
    uint8_t *qr = q + (size_t)row * C;
    if (row >= M) {
        tpk_b128_pad_row(qr, scales, row, M_pad, C, lane);
        return;
    }
    const TX *xr = x + (size_t)row * C;
    float mean, rstd;
    ln_row_stats(xr, C, lane, 1, eps, &mean, &rstd);
    for (int kb = 0; kb < (C + 127) / 128; kb++) {
        const int c = kb * 128 + lane * 4;
        const bool live = c < C;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (live) {
            float wv[4], bv[4];
            ld4(xr, c, v);
            ld4(w, c, wv);
            ld4(b, c, bv);
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = fmaf((v[k] - mean) * rstd, wv[k], bv[k]);
        }
        tpk_b128_store(v, live, qr + c, &scales[(size_t)kb * M_pad + row], lane);
    }
}

template <typename TX>
static int quant_b128_launch(const void *x, int gelu, void *q, float *scales, int M, int M_pad, int K,
                             cudaStream_t s) {
    if (!aligned(x, 4 * sizeof(TX))) return TPK_INVALID;
    const size_t threads = (size_t)M_pad * ((K + 127) / 128) * 32;
    if (gelu == 2)
        quant_b128_kernel<TX, 2><<<grid_for(threads), TPK_THREADS, 0, s>>>((const TX *)x, (uint8_t *)q, scales, M,
                                                                          M_pad, K);
    else if (gelu)
        quant_b128_kernel<TX, 1><<<grid_for(threads), TPK_THREADS, 0, s>>>((const TX *)x, (uint8_t *)q, scales, M,
                                                                          M_pad, K);
    else
        quant_b128_kernel<TX, 0><<<grid_for(threads), TPK_THREADS, 0, s>>>((const TX *)x, (uint8_t *)q, scales, M,
                                                                          M_pad, K);
    return launched();
}

static int b128_args_ok(const void *x, const void *q, const float *scales, int M, int M_pad, int K) {
    return M >= 0 && M_pad >= M && K > 0 && K % 4 == 0 && x && q && scales && aligned(q, 4) && aligned(scales, 4);
}

extern "C" int tpk_quant_fp8_b128(const void *x, tp_dtype xdt, int gelu, void *q, float *scales, int M, int M_pad,
                                  int K, tp_stream stream) {
    if (M_pad == 0) return M == 0 ? (int)cudaSuccess : TPK_INVALID;
    if (!b128_args_ok(x, q, scales, M, M_pad, K)) return TPK_INVALID;
    switch (xdt) {
    case TP_F32: return quant_b128_launch<float>(x, gelu, q, scales, M, M_pad, K, stream);
    case TP_F16: return quant_b128_launch<__half>(x, gelu, q, scales, M, M_pad, K, stream);
    case TP_BF16: return quant_b128_launch<__nv_bfloat16>(x, gelu, q, scales, M, M_pad, K, stream);
    default: return TPK_INVALID;
    }
}

template <typename TX, typename TW>
static int ln_b128_launch(const void *x, const void *w, const void *b, void *q, float *scales, int M, int M_pad,
                          int C, float eps, cudaStream_t s) {
    if (!aligned(x, 4 * sizeof(TX)) || !aligned(w, 4 * sizeof(TW)) || !aligned(b, 4 * sizeof(TW))) return TPK_INVALID;
    unsigned blocks = (unsigned)((M_pad + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_b128_kernel<TX, TW><<<blocks, TPK_THREADS, 0, s>>>((const TX *)x, (const TW *)w, (const TW *)b,
                                                                 (uint8_t *)q, scales, M, M_pad, C, eps);
    return launched();
}

template <typename TX>
static int ln_b128_by_w(tp_dtype wdt, const void *x, const void *w, const void *b, void *q, float *scales, int M,
                        int M_pad, int C, float eps, cudaStream_t s) {
    switch (wdt) {
    case TP_F32: return ln_b128_launch<TX, float>(x, w, b, q, scales, M, M_pad, C, eps, s);
    case TP_F16: return ln_b128_launch<TX, __half>(x, w, b, q, scales, M, M_pad, C, eps, s);
    case TP_BF16: return ln_b128_launch<TX, __nv_bfloat16>(x, w, b, q, scales, M, M_pad, C, eps, s);
    default: return TPK_INVALID;
    }
}

extern "C" int tpk_layernorm_fp8_b128(const void *x, tp_dtype xdt, const void *w, const void *b, tp_dtype wdt,
                                      void *q, float *scales, int M, int M_pad, int C, float eps, tp_stream stream) {
    if (M_pad == 0) return M == 0 ? (int)cudaSuccess : TPK_INVALID;
    if (!b128_args_ok(x, q, scales, M, M_pad, C) || !w || !b) return TPK_INVALID;
    switch (xdt) {
    case TP_F32: return ln_b128_by_w<float>(wdt, x, w, b, q, scales, M, M_pad, C, eps, stream);
    case TP_F16: return ln_b128_by_w<__half>(wdt, x, w, b, q, scales, M, M_pad, C, eps, stream);
    case TP_BF16: return ln_b128_by_w<__nv_bfloat16>(wdt, x, w, b, q, scales, M, M_pad, C, eps, stream);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * Native block-scaled operands (Blackwell): x (rows, K) -> the format's element codes and its block scales in
 * cuBLASLt's 128x4 tiled layout (scale_layout.h). Same arithmetic as the QDQ kernel above and tp_quantize
 * (qformat.c), codes instead of dequantized values: E4M3 one byte each; E2M1 two per byte, element 2i in the low
 * nibble (tp_qtensor's packing, which is also CUDA's __nv_fp4x2 order). A block whose amax is Inf gets the
 * format's NaN scale (UE8M0 0xFF, UE4M3 0x7F) and codes 0, a NaN element keeps its sign, as on the host.
 * Runs on any GPU (tested bit-exact on sm_90); only the GEMM that reads it needs Blackwell.
 * ============================================================================================================== */

__device__ __forceinline__ uint32_t e2m1_code(float v) {
    if (v != v) return ((__float_as_uint(v) >> 28) & 0x8u) | 0x7u; /* host rule: 0x7 with the NaN's sign */
    return (uint32_t)__nv_cvt_float_to_fp4(v, __NV_E2M1, cudaRoundNearest) & 0xFu;
}
__device__ __forceinline__ uint32_t e4m3_code(float v) {
    if (v != v) return ((__float_as_uint(v) >> 24) & 0x80u) | 0x7Fu;
    return (uint32_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

template <int QF, typename TX>
__global__ void block_quant_native_kernel(const TX *__restrict__ x, uint8_t *__restrict__ codes,
                                          uint8_t *__restrict__ scales, long long rows, long long K,
                                          const float *__restrict__ global) {
    constexpr int BLK = QF == TP_QF_NVFP4 ? 16 : 32;
    constexpr int LPB = BLK / 4, GPW = 32 / LPB;
    constexpr bool FP4 = QF != TP_QF_MXFP8;
    const long long kb_row = K / BLK, nblk = rows * kb_row;
    const int wl = threadIdx.x % 32, lib = wl % LPB;
    const float s2 = QF == TP_QF_NVFP4 ? *global : 1.0f;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const long long n_warps = (long long)gridDim.x * blockDim.x / 32;
    for (long long b0 = warp * GPW; b0 < nblk; b0 += n_warps * GPW) {
        const long long b = b0 + wl / LPB;
        const bool live = b < nblk;
        const long long r = live ? b / kb_row : 0, kb = live ? b % kb_row : 0;
        const long long i = r * K + kb * BLK + lib * 4;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (live) ld4(x, (size_t)i, v);
        const float amax = block_amax4<LPB>(v);
        uint32_t c[4], sc;
        const bool inf_block = isinf(amax);
        if (QF == TP_QF_NVFP4) {
            float sd = 0.0f;
            uint32_t code = 0;
            if (lib == 0) {
                code = inf_block || s2 != s2 ? 0x7Fu
                                             : (uint32_t)__nv_cvt_double_to_fp8((double)amax / (6.0 * (double)s2),
                                                                                __NV_SATFINITE, __NV_E4M3);
                sd = __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)code, __NV_E4M3)));
            }
            sd = __shfl_sync(0xffffffffu, sd, wl - lib);
            sc = __shfl_sync(0xffffffffu, code, wl - lib);
            const float d = sd * s2;
            const bool zero = inf_block || s2 != s2 || d == 0.0f;
#pragma unroll
            for (int k = 0; k < 4; k++) c[k] = zero ? 0u : v[k] != v[k] ? e2m1_code(v[k]) : e2m1_code(v[k] / d);
        } else {
            const int shared = mx_shared_exp(amax, QF == TP_QF_MXFP8 ? 8 : 2);
            sc = inf_block ? 0xFFu : (uint32_t)(shared + 127);
            const float inv = ldexpf(1.0f, -shared); /* exact: see the QDQ kernel */
#pragma unroll
            for (int k = 0; k < 4; k++)
                c[k] = inf_block ? 0u : FP4 ? e2m1_code(v[k] != v[k] ? v[k] : v[k] * inv)
                                            : e4m3_code(v[k] != v[k] ? v[k] : v[k] * inv);
        }
        if (!live) continue;
        if (FP4)
            *reinterpret_cast<uint16_t *>(codes + i / 2) =
                (uint16_t)(c[0] | (c[1] << 4) | (c[2] << 8) | (c[3] << 12));
        else
            *reinterpret_cast<uint32_t *>(codes + i) = c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24);
        if (lib == 0) scales[tp_swz_offset(r, kb, kb_row)] = (uint8_t)sc;
    }
}

template <int QF, typename TX>
static int block_quant_native_launch(const void *x, void *codes, void *scales, long long rows, long long K,
                                     const float *g, cudaStream_t s) {
    if (!aligned(x, 4 * sizeof(TX)) || !aligned(codes, QF == TP_QF_MXFP8 ? 4 : 2)) return TPK_INVALID;
    /* the padding of the tiled layout holds zeros (the memset is captured into a graph like a kernel) */
    cudaError_t ce = cudaMemsetAsync(scales, 0, tp_swz_bytes(rows, K / (QF == TP_QF_NVFP4 ? 16 : 32)), s);
    if (ce != cudaSuccess) return (int)ce;
    block_quant_native_kernel<QF, TX><<<grid_for((size_t)rows * (size_t)K / 4), TPK_THREADS, 0, s>>>(
        (const TX *)x, (uint8_t *)codes, (uint8_t *)scales, rows, K, g);
    return launched();
}

template <int QF>
static int block_quant_native_by_x(const void *x, tp_dtype xdt, void *codes, void *scales, long long rows,
                                   long long K, const float *g, cudaStream_t s) {
    switch (xdt) {
    case TP_F32: return block_quant_native_launch<QF, float>(x, codes, scales, rows, K, g, s);
    case TP_F16: return block_quant_native_launch<QF, __half>(x, codes, scales, rows, K, g, s);
    case TP_BF16: return block_quant_native_launch<QF, __nv_bfloat16>(x, codes, scales, rows, K, g, s);
    default: return TPK_INVALID;
    }
}

extern "C" int tpk_block_quant_native(const void *x, tp_dtype xdt, void *codes, void *scales, long long rows,
                                      long long K, int qformat, const float *global, tp_stream stream) {
    if (rows <= 0 || K <= 0) return rows == 0 || K == 0 ? (int)cudaSuccess : TPK_INVALID;
    if (!x || !codes || !scales) return TPK_INVALID;
    switch (qformat) {
    case TP_QF_MXFP8:
        return K % 32 ? TPK_INVALID : block_quant_native_by_x<TP_QF_MXFP8>(x, xdt, codes, scales, rows, K, global, stream);
    case TP_QF_MXFP4:
        return K % 32 ? TPK_INVALID : block_quant_native_by_x<TP_QF_MXFP4>(x, xdt, codes, scales, rows, K, global, stream);
    case TP_QF_NVFP4:
        if (K % 16 || !global) return TPK_INVALID;
        return block_quant_native_by_x<TP_QF_NVFP4>(x, xdt, codes, scales, rows, K, global, stream);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * |x| histogram for percentile calibration: nbins equal bins over [0, *amax] (the value's calibrated max), the
 * last bin closed; |x| >= amax (only amax itself after the max pass) counts in the last bin, NaN nowhere. Per-block
 * shared-memory counts, then one atomicAdd per bin and block.
 * ============================================================================================================== */

#define HIST_MAX_BINS 4096

template <typename TE>
__global__ void __launch_bounds__(TPK_THREADS)
    abs_hist_kernel(const TE *__restrict__ x, size_t n, const float *__restrict__ amax_p, unsigned *bins, int nbins) {
    __shared__ unsigned h[HIST_MAX_BINS];
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) h[b] = 0;
    __syncthreads();
    const float amax = *amax_p, per = amax > 0.0f ? (float)nbins / amax : 0.0f;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        float a = fabsf(ld1(x, i));
        if (a != a) continue;
        int b = (int)(a * per);
        atomicAdd(&h[b < nbins ? b : nbins - 1], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x)
        if (h[b]) atomicAdd(&bins[b], h[b]);
}

template <typename TE>
static int abs_hist_launch(const void *x, size_t n, const float *amax, unsigned *bins, int nbins, cudaStream_t s) {
    abs_hist_kernel<TE><<<grid_for(n), TPK_THREADS, 0, s>>>((const TE *)x, n, amax, bins, nbins);
    return launched();
}

extern "C" int tpk_abs_histogram(const void *x, tp_dtype dt, size_t n, const float *amax, unsigned *bins, int nbins,
                                 tp_stream stream) {
    if (nbins < 1 || nbins > HIST_MAX_BINS) return TPK_INVALID;
    if (n == 0) return (int)cudaSuccess;
    if (!x || !amax || !bins) return TPK_INVALID;
    switch (dt) {
    case TP_F32: return abs_hist_launch<float>(x, n, amax, bins, nbins, stream);
    case TP_F16: return abs_hist_launch<__half>(x, n, amax, bins, nbins, stream);
    case TP_BF16: return abs_hist_launch<__nv_bfloat16>(x, n, amax, bins, nbins, stream);
    default: return TPK_INVALID;
    }
}
