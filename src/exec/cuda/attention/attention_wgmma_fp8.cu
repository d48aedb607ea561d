/* attention_wgmma_fp8.cu: the product's FP8 attention on Hopper's FP8 tensor cores (contract in attention_wgmma.h):
 * tpk_flash_attention_wgmma_fp8 runs the kernel of attention_wgmma_fp8_impl.cuh (its design is described there) in
 * the default configuration (2 query tiles of 64 rows per CTA, 3 CTAs per SM), the only one compiled here. The other
 * configurations and tpk_flash_attention_wgmma_fp8_variant are compiled only into the labs and the GPU tests
 * (bench/attention_wgmma_fp8_variants.cu), whose variants 0 and 3 run this file's kernel through
 * w8_flash_attention_qpc. Built for sm_90a only (CMakeLists.txt: the tprof_sm90a object library). */
#include "exec/cuda/attention/attention_wgmma_fp8_impl.cuh"

int tpk_flash_attention_wgmma_fp8_supported(tp_dtype out_dt, int T, int D) {
    return w8_shape_ok(out_dt, T, D) && w8_device_ok(w8_geometry(T, W8_DEFAULT_QPC, w8_out_bytes(out_dt)).smem);
}

template <typename TO>
static int w8_dispatch_default(const void *qkv, const float *qkv_scale, void *out, const float *out_scale, int B,
                               int T, int H, float scale, const w8_geom *g, tp_stream stream) {
    return scale < 0.0f
               ? w8_launch<TO, true, W8_DEFAULT_MINB>(qkv, qkv_scale, out, out_scale, B, T, H, scale, g, stream)
               : w8_launch<TO, false, W8_DEFAULT_MINB>(qkv, qkv_scale, out, out_scale, B, T, H, scale, g, stream);
}

int w8_flash_attention_qpc(const void *qkv, const float *qkv_scale, void *out, tp_dtype out_dt, const float *out_scale,
                           int B, int T, int H, int D, float scale, int qpc, tp_stream stream) {
    w8_geom g;
    const int rc = w8_prepare(qkv, qkv_scale, out, out_dt, out_scale, B, T, H, D, qpc, &g);
    if (rc != W8_GO) return rc;
    switch (out_dt) {
    case TP_F16: return w8_dispatch_default<__half>(qkv, qkv_scale, out, out_scale, B, T, H, scale, &g, stream);
    case TP_BF16:
        return w8_dispatch_default<__nv_bfloat16>(qkv, qkv_scale, out, out_scale, B, T, H, scale, &g, stream);
    default: return w8_dispatch_default<e4m3_t>(qkv, qkv_scale, out, out_scale, B, T, H, scale, &g, stream);
    }
}

int tpk_flash_attention_wgmma_fp8(const void *qkv, const float *qkv_scale, void *out, tp_dtype out_dt,
                                  const float *out_scale, int B, int T, int H, int D, float scale, tp_stream stream) {
    return w8_flash_attention_qpc(qkv, qkv_scale, out, out_dt, out_scale, B, T, H, D, scale, W8_DEFAULT_QPC, stream);
}
