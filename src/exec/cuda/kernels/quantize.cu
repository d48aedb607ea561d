/* quantize.cu: weight conversion and quantization on the GPU (quantize.h), each codec a transcription of the CPU
 * reference's integer and IEEE steps (formats/dtype.c tp_f32_to_f16, tp_f32_to_bf16, tp_f32_to_e4m3;
 * formats/qformat.c tp_f32_to_e2m1, e4m3_from_f64_sat, block_scale), so the bits agree whatever the hardware's
 * own converters do with NaN or ties: CUDA's __float2half_rn writes a canonical NaN, the host keeps the sign.
 * Divisions are explicitly IEEE (__fdiv_rn, __ddiv_rn), as the host's are; nothing here may be built with fast
 * math.
 * Overlap to remove: kernels.cu's block_quant_native_kernel (Blackwell's activation operands) computes the same
 * NVFP4 / MX block rule with the hardware's converters, for K a multiple of the block and cuBLASLt's tiled scale
 * layout; quant_rows_kernel here takes partial blocks and writes row-major scales. One kernel with the scale layout
 * as a parameter should serve both: a change to make with a GPU run of gpu_formats and gpu_quantize beside it. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "exec/cuda/kernels/quantize.h"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t bits(float f) { return __float_as_uint(f); }

/* tp_f32_to_f16: RNE, overflow to Inf, NaN -> sign | 0x7E00; below 2^-14 the value in units of 2^-24 rounded to
 * the nearest even integer (|f| 2^24 < 2^10 is exact in FP32, rintf rounds ties to even) */
__device__ __forceinline__ uint16_t f16_of(float f) {
    const uint32_t x = bits(f), ax = x & 0x7FFFFFFFu;
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if (ax >= 0x7F800000u) return sign | (ax > 0x7F800000u ? 0x7E00u : 0x7C00u);
    if (ax >= 0x477FF000u) return sign | 0x7C00u;
    if (ax < 0x38800000u) return sign | (uint16_t)rintf(__fmul_rn(__uint_as_float(ax), 16777216.0f));
    const uint32_t mant = ax & 0x7FFFFFu, rem = mant & 0x1FFFu;
    uint32_t h = ((((ax >> 23) - 127u + 15u) << 10) | (mant >> 13));
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return sign | (uint16_t)h;
}

/* tp_f32_to_bf16: RNE by the carry trick, NaN quieted (bit 6 of the kept half set) */
__device__ __forceinline__ uint16_t bf16_of(float f) {
    uint32_t x = bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* tp_f32_to_e4m3: saturating RNE on the float's bits; below 2^-6 the subnormal grid (step 2^-9: |f| 512 is exact,
 * rintf rounds ties to even) */
__device__ __forceinline__ uint8_t e4m3_of(float f) {
    const uint32_t x = bits(f), ax = x & 0x7FFFFFFFu;
    const uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    if (ax > 0x7F800000u) return sign | 0x7F;
    if (ax >= 0x43E00000u) return sign | 0x7E;
    if (ax < 0x3C800000u) return sign | (uint8_t)rintf(__fmul_rn(__uint_as_float(ax), 512.0f));
    const uint32_t r = ax + 0x7FFFFu + ((ax >> 20) & 1u);
    const uint32_t code = (r >> 20) - ((127u - 7u) << 3);
    return sign | (uint8_t)(code > 0x7Eu ? 0x7Eu : code);
}

/* tp_e4m3_to_f32 (exact) */
__device__ __forceinline__ float e4m3_value(uint8_t v) {
    const uint32_t sign = (uint32_t)(v & 0x80) << 24, e = (v >> 3) & 0xFu, m = v & 7u;
    if ((v & 0x7F) == 0x7F) return __uint_as_float(0x7FC00000u);
    if (e == 0) {
        const float a = (float)m * 0x1.0p-9f;
        return sign ? -a : a;
    }
    return __uint_as_float(sign | ((e - 7u + 127u) << 23) | (m << 20));
}

/* tp_f32_to_e2m1: the RNE decision points of the E2M1 grid, saturating to 6; NaN -> 7 with the NaN's sign */
__device__ __forceinline__ uint8_t e2m1_of(float f) {
    const uint8_t sign = (uint8_t)((bits(f) >> 28) & 0x8u);
    const float a = fabsf(f);
    uint8_t c;
    if (f != f) c = 7;
    else if (a <= 0.25f) c = 0;
    else if (a < 0.75f) c = 1;
    else if (a <= 1.25f) c = 2;
    else if (a < 1.75f) c = 3;
    else if (a <= 2.5f) c = 4;
    else if (a < 3.5f) c = 5;
    else if (a <= 5.0f) c = 6;
    else c = 7;
    return sign | c;
}

/* e4m3_from_f64_sat (qformat.c): a non-negative double or NaN to E4M3 with one rounding: the magnitude snapped
 * to its binade's grid (exact power-of-two scalings, rint ties to even), then encoded exactly */
__device__ __forceinline__ uint8_t e4m3_of_f64(double a) {
    if (a != a) return 0x7F;
    if (a >= 448.0) return 0x7E;
    if (a <= 0.0) return 0x00;
    int e = ilogb(a);
    if (e < -6) e = -6;
    const double quantum = ldexp(1.0, e - 3);
    return e4m3_of((float)(rint(__ddiv_rn(a, quantum)) * quantum));
}

/* floor(log2 f) for a finite f > 0, subnormals included (ilogbf's value, from the bits) */
__device__ __forceinline__ int ilog2_of(float f) {
    const uint32_t x = bits(f) & 0x7FFFFFFFu, e = x >> 23;
    if (e) return (int)e - 127;
    return (31 - __clz((int)x)) - 149;
}

/* 2^(v - 127) (tp_ue8m0_to_f32): v = 0 is the subnormal 2^-127, 0xFF NaN */
__device__ __forceinline__ float ue8m0_value(uint8_t v) {
    if (v == 0xFF) return __uint_as_float(0x7FC00000u);
    if (v == 0) return __uint_as_float(0x00400000u);
    return __uint_as_float((uint32_t)v << 23);
}

template <int Y> __global__ void __launch_bounds__(kThreads) convert_kernel(const float *x, void *y, size_t n, float s) {
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += (size_t)gridDim.x * kThreads) {
        const float v = x[i];
        if (Y == TP_F16) ((uint16_t *)y)[i] = f16_of(v);
        else if (Y == TP_BF16) ((uint16_t *)y)[i] = bf16_of(v);
        else { /* a NaN quotient (a NaN x, Inf / Inf) keeps x's sign, as tp_convert_from_f32 spells out */
            const float q = __fdiv_rn(v, s);
            ((uint8_t *)y)[i] = e4m3_of(q == q ? q : copysignf(__uint_as_float(0x7FC00000u), v));
        }
    }
}

/* One thread a block of one row (block() elements along K; the last of a row partial): its amax (NaN skipped,
 * Inf kept: `a > m` as block_amax), its scale as block_scale, its codes as encode_rows. */
template <int F>
__global__ void __launch_bounds__(kThreads) quant_rows_kernel(const float *x, int64_t K, int64_t r0, int64_t nrows,
                                                              float s2, uint8_t *codes, uint8_t *scales) {
    constexpr int BK = F == TP_QF_NVFP4 ? 16 : 32;
    constexpr bool FP4 = F != TP_QF_MXFP8;
    const int64_t nkb = (K + BK - 1) / BK, nb = nrows * nkb;
    for (int64_t b = (int64_t)blockIdx.x * kThreads + threadIdx.x; b < nb; b += (int64_t)gridDim.x * kThreads) {
        const int64_t rl = b / nkb, kb = b - rl * nkb, k0 = kb * BK, k1 = k0 + BK < K ? k0 + BK : K;
        const float *row = x + rl * K;
        float v[BK];
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < BK; j++) {
            v[j] = k0 + j < k1 ? row[k0 + j] : 0.0f;
            const float a = fabsf(v[j]);
            if (a > m) m = a;
        }
        float div = 1.0f;
        bool zero = false;
        uint8_t sc;
        if (F == TP_QF_NVFP4) {
            if (isinf(m) || s2 != s2) {
                sc = 0x7F, zero = true;
            } else {
                sc = e4m3_of_f64(__ddiv_rn((double)m, __dmul_rn(6.0, (double)s2)));
                div = __fmul_rn(e4m3_value(sc), s2);
                zero = div == 0.0f;
            }
        } else if (isinf(m)) {
            sc = 0xFF, zero = true;
        } else {
            int se = m == 0.0f ? -127 : ilog2_of(m) - (F == TP_QF_MXFP8 ? 8 : 2);
            se = se < -127 ? -127 : se > 127 ? 127 : se;
            sc = (uint8_t)(se + 127);
            div = ue8m0_value(sc);
        }
        scales[(r0 + rl) * nkb + kb] = sc;
        uint8_t c[BK];
#pragma unroll
        for (int j = 0; j < BK; j++) {
            const float q = v[j] != v[j] ? v[j] : __fdiv_rn(v[j], div);
            c[j] = zero ? 0 : FP4 ? e2m1_of(q) : e4m3_of(q);
        }
        const int64_t e0 = (r0 + rl) * K + k0;
        if (FP4) {
            uint8_t *o = codes + e0 / 2; /* e0 and k1 - k0 even (K even) */
            for (int j = 0; j < BK / 2 && k0 + 2 * j < k1; j++) o[j] = (uint8_t)(c[2 * j] | (c[2 * j + 1] << 4));
        } else {
            for (int j = 0; j < BK && k0 + j < k1; j++) codes[e0 + j] = c[j];
        }
    }
}

unsigned grid_for(size_t work) {
    const size_t g = (work + kThreads - 1) / kThreads;
    return (unsigned)(g < 1 ? 1 : g > 65535u * 8 ? 65535u * 8 : g);
}

} // namespace

extern "C" int tpk_weight_convert(const float *x, void *y, tp_dtype ydt, size_t n, float scale, tp_stream stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (n == 0) return (int)cudaSuccess;
    if (!x || !y) return (int)cudaErrorInvalidValue;
    switch (ydt) {
    case TP_F32: return (int)cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    case TP_F16: convert_kernel<TP_F16><<<grid_for(n), kThreads, 0, s>>>(x, y, n, scale); break;
    case TP_BF16: convert_kernel<TP_BF16><<<grid_for(n), kThreads, 0, s>>>(x, y, n, scale); break;
    case TP_E4M3: convert_kernel<TP_E4M3><<<grid_for(n), kThreads, 0, s>>>(x, y, n, scale); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int tpk_weight_quantize_ok(tp_qformat f, int64_t K) {
    if (K < 1) return 0;
    return f == TP_QF_MXFP8 || ((f == TP_QF_NVFP4 || f == TP_QF_MXFP4) && K % 2 == 0);
}

extern "C" int tpk_weight_quantize_rows(tp_qformat f, const float *x, int64_t rows, int64_t K, int64_t r0, int64_t r1,
                                        float s2, uint8_t *codes, uint8_t *scales, tp_stream stream) {
    cudaStream_t s = (cudaStream_t)stream;
    if (!tpk_weight_quantize_ok(f, K) || r0 < 0 || r1 < r0 || r1 > rows) return (int)cudaErrorInvalidValue;
    if (r1 == r0) return (int)cudaSuccess;
    if (!x || !codes || !scales) return (int)cudaErrorInvalidValue;
    const int64_t n = r1 - r0, bk = f == TP_QF_NVFP4 ? 16 : 32, nb = n * ((K + bk - 1) / bk);
    switch (f) {
    case TP_QF_NVFP4: quant_rows_kernel<TP_QF_NVFP4><<<grid_for((size_t)nb), kThreads, 0, s>>>(x, K, r0, n, s2, codes, scales); break;
    case TP_QF_MXFP8: quant_rows_kernel<TP_QF_MXFP8><<<grid_for((size_t)nb), kThreads, 0, s>>>(x, K, r0, n, s2, codes, scales); break;
    case TP_QF_MXFP4: quant_rows_kernel<TP_QF_MXFP4><<<grid_for((size_t)nb), kThreads, 0, s>>>(x, K, r0, n, s2, codes, scales); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}
