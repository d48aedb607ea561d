/* attention_wgmma_variants.cu: tpk_flash_attention_wgmma_variant (bench/lab_variants.h), the wgmma attention in an
 * explicit configuration, for bench/attention_wgmma_lab.c and the GPU tests. Variants 0, 3 and 4 run the product's
 * kernel (attention_wgmma.cu: one warpgroup, 3 CTAs per SM) with 2, 2 and 1 query tiles per CTA through
 * wg_flash_attention_qpc; the others' kernels are compiled only here, for sm_90a (CMakeLists.txt:
 * tprof_lab_variants_sm90a). The kernels are src/exec/cuda/attention/attention_wgmma_impl.cuh's. */
#include "exec/cuda/attention/attention_wgmma_impl.cuh"
#include "lab_variants.h"

static const wg_variant WG_VARIANTS[] = {
    {WG_DEFAULT_NWG, WG_DEFAULT_MINB, WG_DEFAULT_QPC, 0, 0}, /* 0: the default (bench/attention_wgmma_lab.c) */
    {2, 2, 0, 0, 0}, /* 1: one CTA per head, 2 warpgroups, <= 128 registers */
    {2, 1, 0, 0, 0}, /* 2: one CTA per head, 2 warpgroups, one CTA per SM */
    {1, 3, 2, 0, 0}, /* 3: one warpgroup per 2 query tiles */
    {1, 3, 1, 0, 0}, /* 4: one warpgroup per query tile (K and V read once per tile, from L2 after the first) */
    {2, 1, 0, 1, 0}, /* 5: persistent, one CTA per SM looping over heads, the next head's copy in flight */
    {2, 1, 0, 1, 1}, /* 6: 5 with the full chunks software-pipelined (S of chunk j + 1 during softmax j) */
    {1, 3, 2, 0, 1}, /* 7: 3 with its second query tile software-pipelined */
    {1, 2, 2, 0, 2}, /* 8: one warpgroup runs its 2 query tiles together (pipe = 2): twice the ILP, 2 CTAs per SM */
};
#define WG_NVAR ((int)(sizeof WG_VARIANTS / sizeof WG_VARIANTS[0]))

/* the lab-only kernels (the configurations wg_uses_default accepts run the product's, wg_flash_attention_qpc) */
template <typename TI, typename TO>
static int wg_dispatch_var(const void *qkv, void *out, const float *out_scale, int B, int T, int H, float sl2,
                           const wg_variant *v, const wg_geom *g, tp_stream stream) {
    if (v->persistent && v->pipe)
        return sl2 < 0.0f ? wg_launch_persistent<TI, TO, true, true>(qkv, out, out_scale, B, T, H, sl2, g, stream)
                          : wg_launch_persistent<TI, TO, false, true>(qkv, out, out_scale, B, T, H, sl2, g, stream);
    if (v->persistent)
        return sl2 < 0.0f ? wg_launch_persistent<TI, TO, true, false>(qkv, out, out_scale, B, T, H, sl2, g, stream)
                          : wg_launch_persistent<TI, TO, false, false>(qkv, out, out_scale, B, T, H, sl2, g, stream);
    if (v->nwg == 2 && v->minb == 2) return wg_launch<TI, TO, 2, 2, 0>(qkv, out, out_scale, B, T, H, sl2, g, stream);
    if (v->nwg == 2 && v->minb == 1) return wg_launch<TI, TO, 2, 1, 0>(qkv, out, out_scale, B, T, H, sl2, g, stream);
    if (v->nwg == 1 && v->minb == 3 && v->pipe == 1)
        return wg_launch<TI, TO, 1, 3, 1>(qkv, out, out_scale, B, T, H, sl2, g, stream);
    if (v->nwg == 1 && v->minb == 2 && v->pipe == 2)
        return wg_launch<TI, TO, 1, 2, 2>(qkv, out, out_scale, B, T, H, sl2, g, stream);
    return TPK_INVALID;
}

template <typename TI>
static int wg_dispatch_out(const void *qkv, void *out, tp_dtype out_dt, const float *out_scale, int B, int T, int H,
                           float sl2, const wg_variant *v, const wg_geom *g, tp_stream stream) {
    switch (out_dt) {
    case TP_F16: return wg_dispatch_var<TI, __half>(qkv, out, out_scale, B, T, H, sl2, v, g, stream);
    case TP_BF16: return wg_dispatch_var<TI, __nv_bfloat16>(qkv, out, out_scale, B, T, H, sl2, v, g, stream);
    case TP_E4M3: return wg_dispatch_var<TI, e4m3_t>(qkv, out, out_scale, B, T, H, sl2, v, g, stream);
    default: return TPK_INVALID;
    }
}

/* 1 when configuration v runs the product's kernel (with its own number of query tiles per CTA) */
static int wg_uses_default(const wg_variant *v) {
    return v->nwg == WG_DEFAULT_NWG && v->minb == WG_DEFAULT_MINB && !v->persistent && !v->pipe;
}

int tpk_flash_attention_wgmma_variant(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt,
                                      const float *out_scale, int B, int T, int H, int D, float scale, int variant,
                                      tp_stream stream) {
    if (variant < 0 || variant >= WG_NVAR) return TPK_INVALID;
    const wg_variant *v = &WG_VARIANTS[variant];
    if (wg_uses_default(v))
        return wg_flash_attention_qpc(qkv, in_dt, out, out_dt, out_scale, B, T, H, D, scale, v->qpc, stream);
    wg_geom g;
    float sl2 = 0.0f;
    const int rc = wg_prepare(qkv, in_dt, out, out_dt, out_scale, B, T, H, D, scale, v->qpc, v->persistent, &g, &sl2);
    if (rc != WG_GO) return rc;
    if (in_dt == TP_F16) return wg_dispatch_out<__half>(qkv, out, out_dt, out_scale, B, T, H, sl2, v, &g, stream);
    return wg_dispatch_out<__nv_bfloat16>(qkv, out, out_dt, out_scale, B, T, H, sl2, v, &g, stream);
}
