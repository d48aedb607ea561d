/* attention_wgmma_fp8_variants.cu: tpk_flash_attention_wgmma_fp8_variant (bench/lab_variants.h), the FP8 wgmma
 * attention in an explicit configuration, for bench/attention_wgmma_lab.c and the GPU tests. Variants 0 and 3 run the
 * product's kernel (attention_wgmma_fp8.cu: 3 CTAs per SM) with 2 and 4 query tiles per CTA through
 * w8_flash_attention_qpc; variants 1 and 2 (4 CTAs per SM) are compiled only here, for sm_90a (CMakeLists.txt:
 * tprof_lab_variants_sm90a). The kernel is src/exec/cuda/attention/attention_wgmma_fp8_impl.cuh's. */
#include "exec/cuda/attention/attention_wgmma_fp8_impl.cuh"
#include "lab_variants.h"

static const w8_variant W8_VARIANTS[] = {
    {W8_DEFAULT_QPC, W8_DEFAULT_MINB}, /* 0: the default (bench/attention_wgmma_lab.c) */
    {2, 4}, /* 1: 4 CTAs per SM (shared memory allowing) */
    {1, 4}, /* 2: one query tile per CTA */
    {4, 3}, /* 3: four query tiles per CTA (a whole head up to T = 256) */
};
#define W8_NVAR ((int)(sizeof W8_VARIANTS / sizeof W8_VARIANTS[0]))

/* the lab-only kernel: 4 CTAs per SM (the configurations with W8_DEFAULT_MINB run the product's,
 * w8_flash_attention_qpc) */
template <typename TO>
static int w8_dispatch(const void *qkv, const float *qkv_scale, void *out, const float *out_scale, int B, int T,
                       int H, float scale, const w8_geom *g, tp_stream stream) {
    const bool neg = scale < 0.0f;
    return neg ? w8_launch<TO, true, 4>(qkv, qkv_scale, out, out_scale, B, T, H, scale, g, stream)
               : w8_launch<TO, false, 4>(qkv, qkv_scale, out, out_scale, B, T, H, scale, g, stream);
}

int tpk_flash_attention_wgmma_fp8_variant(const void *qkv, const float *qkv_scale, void *out, tp_dtype out_dt,
                                          const float *out_scale, int B, int T, int H, int D, float scale,
                                          int variant, tp_stream stream) {
    if (variant < 0 || variant >= W8_NVAR) return TPK_INVALID;
    const w8_variant *v = &W8_VARIANTS[variant];
    if (v->minb == W8_DEFAULT_MINB)
        return w8_flash_attention_qpc(qkv, qkv_scale, out, out_dt, out_scale, B, T, H, D, scale, v->qpc, stream);
    w8_geom g;
    const int rc = w8_prepare(qkv, qkv_scale, out, out_dt, out_scale, B, T, H, D, v->qpc, &g);
    if (rc != W8_GO) return rc;
    switch (out_dt) {
    case TP_F16: return w8_dispatch<__half>(qkv, qkv_scale, out, out_scale, B, T, H, scale, &g, stream);
    case TP_BF16: return w8_dispatch<__nv_bfloat16>(qkv, qkv_scale, out, out_scale, B, T, H, scale, &g, stream);
    default: return w8_dispatch<e4m3_t>(qkv, qkv_scale, out, out_scale, B, T, H, scale, &g, stream);
    }
}
