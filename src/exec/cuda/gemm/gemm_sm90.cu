/* gemm_sm90.cu: the product's entry points of tprof's Hopper GEMM (contract in gemm_sm90.h): tpk_gemm_sm90 in
 * its default variant for each epilogue (TPK_GEMM_SM90_DEFAULT_VARIANT: the helper warps with the GELU, none
 * without), tpk_gemm_sm90_fp8 in the variants tpk_gemm_sm90_fp8_pick_variant chooses (0 and 2), the rule itself
 * and tpk_gemm_sm90_supported. The kernel, its design and its measurements are in gemm_sm90_impl.cuh; the other
 * variants (16-bit operands: helper warps without the GELU, none with it; E4M3 operands: variant 1) are compiled
 * only into the labs and the GPU tests (bench/gemm_sm90_variants.cu). Built for sm_90a only (CMakeLists.txt: the
 * tprof_sm90a object library). */
#include "exec/cuda/gemm/gemm_sm90_impl.cuh"

int tpk_gemm_sm90_supported(void) { return gm_sm90_device() && gm_encoder() != NULL; }

/* the default variant of each epilogue: HELP = TPK_GEMM_SM90_DEFAULT_VARIANT(gelu) */
template <typename T> static int gm_launch_default(encode_tiled_fn enc, const gm_args *a, int gelu, cudaStream_t s) {
    return gelu ? gm_launch<T, T, T, 1, TPK_GEMM_SM90_DEFAULT_VARIANT(1), 0, GM_BN>(enc, a, s)
                : gm_launch<T, T, T, 0, TPK_GEMM_SM90_DEFAULT_VARIANT(0), 0, GM_BN>(enc, a, s);
}

int tpk_gemm_sm90(const void *A, const void *W, const void *bias, void *D, tp_dtype dt, int M, int N, int K, int gelu,
                  tp_stream stream) {
    if (!tpk_gemm_sm90_shape_ok(dt, M, N, K)) return TPK_INVALID;
    encode_tiled_fn enc = gm_check(A, W, bias, D, gelu, TPK_GEMM_SM90_DEFAULT_VARIANT(gelu), 1);
    if (!enc) return TPK_INVALID;
    const gm_args a = {A, W, bias, NULL, D, NULL, NULL, NULL, dt, M, N, K};
    cudaStream_t s = (cudaStream_t)stream;
    return dt == TP_F16 ? gm_launch_default<__half>(enc, &a, gelu, s)
                        : gm_launch_default<__nv_bfloat16>(enc, &a, gelu, s);
}

int tpk_gemm_sm90_fp8(const void *A, const float *a_scale, const void *W, const float *w_scale, const void *bias,
                      const void *R, void *D, tp_dtype d_dt, const float *d_scale, int M, int N, int K, int gelu,
                      int variant, tp_stream stream) {
    if (variant == 1) return TPK_INVALID; /* the helper warps: bench/'s tpk_gemm_sm90_fp8_variant only */
    encode_tiled_fn enc = gm_fp8_check(A, a_scale, W, w_scale, bias, R, D, d_dt, d_scale, M, N, K, gelu, variant);
    if (!enc) return TPK_INVALID;
    const gm_args a = {A, W, bias, R, D, a_scale, w_scale, d_dt == TP_E4M3 ? d_scale : NULL, TP_E4M3, M, N, K};
    cudaStream_t s = (cudaStream_t)stream;
    if (variant == 2) {
        if (R) return gm_launch<e4m3_t, __half, __half, 0, 0, 1, GM_BN96>(enc, &a, s);
        return gelu ? gm_launch<e4m3_t, __half, __half, 1, 0, 0, GM_BN96>(enc, &a, s)
                    : gm_launch<e4m3_t, __half, __half, 0, 0, 0, GM_BN96>(enc, &a, s);
    }
    if (R) return gm_launch<e4m3_t, __half, __half, 0, 0, 1, GM_BN>(enc, &a, s);
    if (d_dt == TP_E4M3)
        return gelu ? gm_launch<e4m3_t, __half, e4m3_t, 1, 0, 0, GM_BN>(enc, &a, s)
                    : gm_launch<e4m3_t, __half, e4m3_t, 0, 0, 0, GM_BN>(enc, &a, s);
    return gelu ? gm_launch<e4m3_t, __half, __half, 1, 0, 0, GM_BN>(enc, &a, s)
                : gm_launch<e4m3_t, __half, __half, 0, 0, 0, GM_BN>(enc, &a, s);
}

/* the converting kernel WC (1 E4M3, 2 NVFP4 weights) for a 16-bit dt, with or without the residual */
template <int WC> static int gm_launch_wo(encode_tiled_fn enc, const gm_args *a, tp_dtype dt, int res, cudaStream_t s) {
    if (dt == TP_F16)
        return res ? gm_launch<__half, __half, __half, 0, 0, 1, GM_BN, WC>(enc, a, s)
                   : gm_launch<__half, __half, __half, 0, 0, 0, GM_BN, WC>(enc, a, s);
    return res ? gm_launch<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 0, 0, 1, GM_BN, WC>(enc, a, s)
               : gm_launch<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 0, 0, 0, GM_BN, WC>(enc, a, s);
}

int tpk_gemm_sm90_wo_fp8(const void *A, const void *W, const float *w_scale, const void *bias, const void *R, void *D,
                         tp_dtype dt, int M, int N, int K, tp_stream stream) {
    if (!tpk_gemm_sm90_shape_ok(dt, M, N, K) || K % 16 || !w_scale || ((uintptr_t)w_scale & 3) ||
        ((uintptr_t)R & 15))
        return TPK_INVALID;
    encode_tiled_fn enc = gm_check(A, W, bias, D, 0, 0, 0);
    if (!enc) return TPK_INVALID;
    const gm_args a = {A, W, bias, R, D, NULL, w_scale, NULL, dt, M, N, K};
    return gm_launch_wo<1>(enc, &a, dt, R != NULL, (cudaStream_t)stream);
}

int tpk_gemm_sm90_wo_nvfp4(const void *A, const void *W, const void *scales, const float *s2, const void *bias,
                           const void *R, void *D, tp_dtype dt, int M, int N, int K, tp_stream stream) {
    if (!tpk_gemm_sm90_shape_ok(dt, M, N, K) || K % 32 || !s2 || ((uintptr_t)s2 & 3) || !scales ||
        ((uintptr_t)scales & 1) || ((uintptr_t)R & 15))
        return TPK_INVALID;
    encode_tiled_fn enc = gm_check(A, W, bias, D, 0, 0, 0);
    if (!enc) return TPK_INVALID;
    const gm_args a = {A, W, bias, R, D, NULL, s2, NULL, dt, M, N, K, (const unsigned char *)scales};
    return gm_launch_wo<2>(enc, &a, dt, R != NULL, (cudaStream_t)stream);
}

static_assert(GM_GROUP_MAX == TPK_GEMM_SM90_GROUP_MAX, "gemm_sm90.h and the kernel agree on the group size");

int tpk_gemm_sm90_fp8_group(const void *A, const float *a_scale, const void *W, const float *col_scales,
                            const void *bias, int n, const int *cols, void *const *D, int M, int K, int sms,
                            tp_stream stream) {
    if (n < 1 || n > TPK_GEMM_SM90_GROUP_MAX || !cols || !D || !col_scales || ((uintptr_t)col_scales & 7) ||
        !a_scale || ((uintptr_t)a_scale & 3))
        return TPK_INVALID;
    gm_group g = {};
    g.cs = col_scales;
    g.n = n;
    long long N = 0;
    for (int j = 0; j < n; j++) {
        if (cols[j] <= 0 || cols[j] % 8 || !D[j] || ((uintptr_t)D[j] & 15)) return TPK_INVALID;
        g.off[j] = (int)N;
        g.D[j] = D[j];
        N += cols[j];
    }
    for (int j = n; j <= GM_GROUP_MAX; j++) g.off[j] = (int)N; /* the unused members: empty, past every column */
    if (N > 0x7fffffffLL || !tpk_gemm_sm90_fp8_shape_ok(TP_F16, M, (int)N, K)) return TPK_INVALID;
    /* D is only checked for a pointer: member 0's */
    encode_tiled_fn enc = gm_check(A, W, bias, D[0], 0, 0, 0);
    if (!enc) return TPK_INVALID;
    gm_args a = {A, W, bias, NULL, D[0], a_scale, col_scales, NULL, TP_E4M3, M, (int)N, K};
    a.grp = &g;
    cudaStream_t s = (cudaStream_t)stream;
    return tpk_gemm_sm90_fp8_pick_variant(TP_F16, M, (int)N, sms) == 2
               ? gm_launch<e4m3_t, __half, __half, 0, 0, 0, GM_BN96, 0, 1>(enc, &a, s)
               : gm_launch<e4m3_t, __half, __half, 0, 0, 0, GM_BN, 0, 1>(enc, &a, s);
}

int tpk_gemm_sm90_fp8_pick_variant(tp_dtype d_dt, int M, int N, int sms) {
    if (d_dt != TP_F16 || sms <= 0 || M <= 0 || N <= 0) return 0;
    /* per SM, tiles run one after the other on the tensor cores: the busiest SM takes ceil(tiles / SMs) tile
     * times, a 128 x 96 tile GM_T96 hundredths of a 128 x 128 one's (gemm_sm90.h) */
    const long long mt = (M + GM_BM - 1) / GM_BM, t128 = mt * ((N + GM_BN - 1) / GM_BN),
                    t96 = mt * ((N + GM_BN96 - 1) / GM_BN96);
    return (t96 + sms - 1) / sms * GM_T96 < (t128 + sms - 1) / sms * 100 ? 2 : 0;
}
