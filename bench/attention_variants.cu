/* attention_variants.cu: tpk_flash_attention_variant (bench/lab_variants.h), the FlashAttention-2-style kernel in an
 * explicit configuration, for bench/attention_lab.cu and the GPU tests. Variants 0 and 1 (the default) are the
 * product's tpk_flash_attention (attention.cu); the others (2-6, and with TPK_FA_ABLATIONS, which only attention_lab
 * defines, the diagnostics 90-94) are compiled only here (CMakeLists.txt: tprof_lab_variants, and attention_lab's
 * own sources). The kernels are src/exec/cuda/attention/attention_impl.cuh's. */
#include "exec/cuda/attention/attention_impl.cuh"
#include "lab_variants.h"

/* Variants (bench/lab_variants.h): 1 = 4 warps x 16 rows (<= 128 registers: 4 CTAs/SM), 2 = 8 warps x 16 rows,
 * 3 = 4 warps x 32 rows, 4 = 2 warps x 32 rows (3 and 4: D <= 96, Q re-read from shared memory to leave registers
 * for the two m-tiles), 5 = 4 warps x 16 rows with up to 168 registers (3 CTAs/SM), 6 = variant 1's tiles in the
 * persistent kernel. 0 = the default for D (fa_resolve). 0 and 1 run through the product's tpk_flash_attention
 * (attention.cu), the only configuration it compiles, and never reach the dispatch below. */
static int fa_resolve(int variant, int D) {
    if (variant == 0) return 1;
#ifdef TPK_FA_ABLATIONS
    if (variant >= 90 && variant <= 94) return variant; /* lab-only diagnostics: wrong results, timing only */
#endif
    if (variant < 1 || variant > 6 || ((variant == 3 || variant == 4) && D > 96)) return -1;
    return variant;
}

#ifdef TPK_FA_ABLATIONS
/* Lab-only diagnostics (f16 -> f16, D = 64, variant 1's shape): 90 = control, 91 = no exp, 92 = no global K/V
 * reloads (tile 0 reused), 93 = no P V mma, 94 = no Q K^T mma. Their results are wrong: timing only. */
template <typename TI, typename TO, int D> static int fa_ablation(int, const fa_args *) { return TPK_INVALID; }
template <> int fa_ablation<__half, __half, 64>(int variant, const fa_args *a) {
    switch (variant) {
    case 90: return fa_launch<__half, __half, 64, 4, 1, true, 4, 90>(a);
    case 91: return fa_launch<__half, __half, 64, 4, 1, true, 4, 91>(a);
    case 92: return fa_launch<__half, __half, 64, 4, 1, true, 4, 92>(a);
    case 93: return fa_launch<__half, __half, 64, 4, 1, true, 4, 93>(a);
    case 94: return fa_launch<__half, __half, 64, 4, 1, true, 4, 94>(a);
    default: return TPK_INVALID;
    }
}
#endif

template <typename TI, typename TO, int D> static int fa_two_mtiles(int variant, const fa_args *a) {
    switch (variant) {
    case 3: return fa_launch<TI, TO, D, 4, 2, false, 1>(a);
    case 4: return fa_launch<TI, TO, D, 2, 2, false, 1>(a);
    default: return TPK_INVALID;
    }
}

template <typename TI, typename TO, int D> static int fa_by_variant(int variant, const fa_args *a) {
#ifdef TPK_FA_ABLATIONS
    if (variant >= 90) return fa_ablation<TI, TO, D>(variant, a);
#endif
    switch (variant) { /* 1: tpk_flash_attention's */
    case 2: return fa_launch<TI, TO, D, 8, 1, true, D <= 64 ? 2 : 1>(a);
    case 5: /* for D > 64 the same kernel as variant 1 (MINB 1): tpk_flash_attention's (fa_is_default) */
        if constexpr (D <= 64) return fa_launch<TI, TO, D, 4, 1, true, 3>(a);
        else return TPK_INVALID;
    case 6: return fa_launch_persist<TI, TO, D, D <= 64 ? 4 : 1>(a);
    default: return D <= 96 ? fa_two_mtiles<TI, TO, D <= 96 ? D : 96>(variant, a) : TPK_INVALID;
    }
}

template <typename TI, typename TO> static int fa_by_d(int D, int variant, const fa_args *a) {
    switch (D) {
    case 32: return fa_by_variant<TI, TO, 32>(variant, a);
    case 64: return fa_by_variant<TI, TO, 64>(variant, a);
    case 80: return fa_by_variant<TI, TO, 80>(variant, a);
    case 96: return fa_by_variant<TI, TO, 96>(variant, a);
    case 128: return fa_by_variant<TI, TO, 128>(variant, a);
    default: return TPK_INVALID;
    }
}

template <typename TI> static int fa_by_out(tp_dtype out_dt, int D, int variant, const fa_args *a) {
    switch (out_dt) {
    case TP_F16: return fa_by_d<TI, __half>(D, variant, a);
    case TP_BF16: return fa_by_d<TI, __nv_bfloat16>(D, variant, a);
    case TP_E4M3: return fa_by_d<TI, e4m3_t>(D, variant, a);
    default: return TPK_INVALID;
    }
}

/* 1 when the variant's kernel at D is the product's, the default configuration (variant 1): variants 0 and 1, and
 * variant 5 for D > 64, where its register cap (3 CTAs per SM) does not apply and its kernel is variant 1's */
static int fa_is_default(int variant, int D) { return fa_resolve(variant, D) == 1 || (variant == 5 && D > 64); }

extern "C" int tpk_flash_attention_variant(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt,
                                           const float *out_scale, int B, int T, int H, int D, float scale,
                                           int variant, tp_stream stream) {
    if (fa_is_default(variant, D)) /* the product's kernel */
        return tpk_flash_attention(qkv, in_dt, out, out_dt, out_scale, B, T, H, D, scale, stream);
    if (fa_resolve(variant, D) < 0) return TPK_INVALID;
    const int rc = fa_check(qkv, in_dt, out, out_dt, out_scale, B, T, H, D);
    if (rc != FA_GO) return rc;
    fa_args a = {qkv, out, out_scale, B, T, H, scale, (cudaStream_t)stream};
    variant = fa_resolve(variant, D);
    switch (in_dt) {
    case TP_F16: return fa_by_out<__half>(out_dt, D, variant, &a);
    case TP_BF16: return fa_by_out<__nv_bfloat16>(out_dt, D, variant, &a);
    default: return TPK_INVALID;
    }
}
