/* attention_wgmma.cu: the product's fused attention on Hopper's wgmma (contract in attention_wgmma.h):
 * tpk_flash_attention_wgmma runs the kernel of attention_wgmma_impl.cuh (its design is described there) in the default
 * configuration (one warpgroup per 2 query tiles of 64 rows, 3 CTAs per SM), the only one compiled here. The other
 * configurations and tpk_flash_attention_wgmma_variant are compiled only into the labs and the GPU tests
 * (bench/attention_wgmma_variants.cu), whose variants 0, 3 and 4 run this file's kernel through
 * wg_flash_attention_qpc. Built for sm_90a only (CMakeLists.txt: the tprof_sm90a object library). */
#include "exec/cuda/attention/attention_wgmma_impl.cuh"

int tpk_flash_attention_wgmma_supported(tp_dtype in_dt, tp_dtype out_dt, int T, int D) {
    return wg_shape_ok(in_dt, out_dt, T, D) && wg_device_ok(wg_geometry(T, WG_DEFAULT_QPC, 0).smem);
}

template <typename TI>
static int wg_dispatch_default(const void *qkv, void *out, tp_dtype out_dt, const float *out_scale, int B, int T,
                               int H, float sl2, const wg_geom *g, tp_stream stream) {
    switch (out_dt) {
    case TP_F16:
        return wg_launch<TI, __half, WG_DEFAULT_NWG, WG_DEFAULT_MINB, 0>(qkv, out, out_scale, B, T, H, sl2, g, stream);
    case TP_BF16:
        return wg_launch<TI, __nv_bfloat16, WG_DEFAULT_NWG, WG_DEFAULT_MINB, 0>(qkv, out, out_scale, B, T, H, sl2, g,
                                                                               stream);
    case TP_E4M3:
        return wg_launch<TI, e4m3_t, WG_DEFAULT_NWG, WG_DEFAULT_MINB, 0>(qkv, out, out_scale, B, T, H, sl2, g, stream);
    default: return TPK_INVALID;
    }
}

int wg_flash_attention_qpc(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale, int B,
                           int T, int H, int D, float scale, int qpc, tp_stream stream) {
    wg_geom g;
    float sl2 = 0.0f;
    const int rc = wg_prepare(qkv, in_dt, out, out_dt, out_scale, B, T, H, D, scale, qpc, 0, &g, &sl2);
    if (rc != WG_GO) return rc;
    if (in_dt == TP_F16) return wg_dispatch_default<__half>(qkv, out, out_dt, out_scale, B, T, H, sl2, &g, stream);
    return wg_dispatch_default<__nv_bfloat16>(qkv, out, out_dt, out_scale, B, T, H, sl2, &g, stream);
}

int tpk_flash_attention_wgmma(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale,
                              int B, int T, int H, int D, float scale, tp_stream stream) {
    return wg_flash_attention_qpc(qkv, in_dt, out, out_dt, out_scale, B, T, H, D, scale, WG_DEFAULT_QPC, stream);
}
