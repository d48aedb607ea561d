/* act_types.cuh: the activation element types of tprof's elementwise and row kernels (decoder_ops.cu,
 * pipeline_ops.cu): F32, F16 and BF16, widened to fp32 on load and rounded once (to nearest even) on store, and the
 * dispatch of an entry point over tp_dtype. CUDA C, included by .cu files only. */
#ifndef TP_ACT_TYPES_CUH
#define TP_ACT_TYPES_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>

#include "formats/dtype.h"

/* Runs the statements after T (they end in a return) with T the element type of activation dtype dt; any other
 * dtype returns cudaErrorInvalidValue. Nests for two or three types. */
#define TPK_BY_ACT(dt, T, ...)                                                                                      \
    switch (dt) {                                                                                                   \
    case TP_F32: {                                                                                                  \
        typedef float T;                                                                                            \
        __VA_ARGS__;                                                                                                \
    }                                                                                                               \
    case TP_F16: {                                                                                                  \
        typedef __half T;                                                                                           \
        __VA_ARGS__;                                                                                                \
    }                                                                                                               \
    case TP_BF16: {                                                                                                 \
        typedef __nv_bfloat16 T;                                                                                    \
        __VA_ARGS__;                                                                                                \
    }                                                                                                               \
    default: return (int)cudaErrorInvalidValue;                                                                     \
    }

static __device__ __forceinline__ float ld1(const float *p, size_t i) { return p[i]; }
static __device__ __forceinline__ float ld1(const __half *p, size_t i) { return __half2float(p[i]); }
static __device__ __forceinline__ float ld1(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ void st1(float *p, size_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void st1(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }
static __device__ __forceinline__ void st1(__nv_bfloat16 *p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

/* The GLU's activation of the gate g (decoder_ops.h tpk_glu): ACT 0 SiLU g / (1 + e^-g); ACT 1 the tanh GELU
 * 0.5 g (1 + tanh(z)), z = sqrt(2/pi) (g + 0.044715 g^3), evaluated as g / (1 + e^(-2z)) (no cancellation for
 * z << 0). Shared by the GLU kernel and the GEMV's GLU epilogue (gemv.cu), so both compute the same function. */
template <int ACT> static __device__ __forceinline__ float tpk_glu_act(float g) {
    const float u = ACT == 0 ? g : 1.5957691216057308f * fmaf(0.044715f * g, g * g, g);
    return g / (1.0f + expf(-u));
}

#endif
