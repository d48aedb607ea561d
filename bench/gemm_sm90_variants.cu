/* gemm_sm90_variants.cu: tpk_gemm_sm90_variant and tpk_gemm_sm90_fp8_variant (bench/lab_variants.h), tprof's Hopper
 * GEMM with an explicit variant, for bench/gemm_lab.c and the GPU tests. The variants the engines run go through the
 * product's entry points (gemm_sm90.cu: tpk_gemm_sm90's default for each epilogue, tpk_gemm_sm90_fp8's variants 0
 * and 2); the others are compiled only here, for sm_90a (CMakeLists.txt: tprof_lab_variants_sm90a): 16-bit operands
 * with the helper warps and no GELU or without them and with the GELU, E4M3 operands with the helper warps
 * (variant 1). The kernel is src/exec/cuda/gemm/gemm_sm90_impl.cuh's. */
#include "exec/cuda/gemm/gemm_sm90_impl.cuh"
#include "lab_variants.h"

/* the variant of each epilogue that is not its default: helper warps without the GELU, none with it */
template <typename T> static int gm_launch_other(encode_tiled_fn enc, const gm_args *a, int gelu, cudaStream_t s) {
    return gelu ? gm_launch<T, T, T, 1, 0, 0, GM_BN>(enc, a, s) : gm_launch<T, T, T, 0, 1, 0, GM_BN>(enc, a, s);
}

int tpk_gemm_sm90_variant(const void *A, const void *W, const void *bias, void *D, tp_dtype dt, int M, int N, int K,
                          int gelu, int variant, tp_stream stream) {
    if (variant == TPK_GEMM_SM90_DEFAULT_VARIANT(gelu)) /* the product's kernel (a bad gelu: its error) */
        return tpk_gemm_sm90(A, W, bias, D, dt, M, N, K, gelu, stream);
    if (!tpk_gemm_sm90_shape_ok(dt, M, N, K)) return TPK_INVALID;
    encode_tiled_fn enc = gm_check(A, W, bias, D, gelu, variant, 1);
    if (!enc) return TPK_INVALID;
    const gm_args a = {A, W, bias, NULL, D, NULL, NULL, NULL, dt, M, N, K};
    cudaStream_t s = (cudaStream_t)stream;
    return dt == TP_F16 ? gm_launch_other<__half>(enc, &a, gelu, s) : gm_launch_other<__nv_bfloat16>(enc, &a, gelu, s);
}

int tpk_gemm_sm90_fp8_variant(const void *A, const float *a_scale, const void *W, const float *w_scale,
                              const void *bias, const void *R, void *D, tp_dtype d_dt, const float *d_scale, int M,
                              int N, int K, int gelu, int variant, tp_stream stream) {
    if (variant != 1) /* 0 and 2: the product's kernels; any other value: its error */
        return tpk_gemm_sm90_fp8(A, a_scale, W, w_scale, bias, R, D, d_dt, d_scale, M, N, K, gelu, variant, stream);
    encode_tiled_fn enc = gm_fp8_check(A, a_scale, W, w_scale, bias, R, D, d_dt, d_scale, M, N, K, gelu, variant);
    if (!enc) return TPK_INVALID; /* also a residual, which variant 1 does not take */
    const gm_args a = {A, W, bias, NULL, D, a_scale, w_scale, d_dt == TP_E4M3 ? d_scale : NULL, TP_E4M3, M, N, K};
    cudaStream_t s = (cudaStream_t)stream;
    if (d_dt == TP_E4M3)
        return gelu ? gm_launch<e4m3_t, __half, e4m3_t, 1, 1, 0, GM_BN>(enc, &a, s)
                    : gm_launch<e4m3_t, __half, e4m3_t, 0, 1, 0, GM_BN>(enc, &a, s);
    return gelu ? gm_launch<e4m3_t, __half, __half, 1, 1, 0, GM_BN>(enc, &a, s)
                : gm_launch<e4m3_t, __half, __half, 0, 1, 0, GM_BN>(enc, &a, s);
}
