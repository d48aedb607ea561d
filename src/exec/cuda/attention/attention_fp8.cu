/* attention_fp8.cu: the product's FP8 attention (contract in attention_fp8.h): tpk_flash_attention_fp8 runs the
 * kernel of attention_fp8_impl.cuh (its design and measurements are there) with the E4M3 values held as fp16 (product
 * kind MK 1), the only kind compiled here. The other kind (MK 0: mma.sync on E4M3 operands) and
 * tpk_flash_attention_fp8_variant are compiled only into the labs and the GPU tests
 * (bench/attention_fp8_variants.cu), whose variants 3 and 4 run this file's kernels through
 * f8_flash_attention_decomp. */
#include "exec/cuda/attention/attention_fp8_impl.cuh"

int f8_flash_attention_decomp(const void *qkv, tp_dtype in_dt, const float *qkv_scale, void *out, tp_dtype out_dt,
                              const float *out_scale, int B, int T, int H, int D, float scale, int decomp,
                              tp_stream stream) {
    const int rc = f8_check(qkv, in_dt, qkv_scale, out, out_dt, out_scale, B, T, H, D);
    if (rc != F8_GO) return rc;
    f8_args a = {qkv, qkv_scale, out, out_scale, B, T, H, scale, decomp, (cudaStream_t)stream};
    return f8_by_in<F8_DEFAULT_MK>(in_dt, out_dt, D, &a);
}

extern "C" int tpk_flash_attention_fp8(const void *qkv, tp_dtype in_dt, const float *qkv_scale, void *out,
                                       tp_dtype out_dt, const float *out_scale, int B, int T, int H, int D,
                                       float scale, tp_stream stream) {
    return f8_flash_attention_decomp(qkv, in_dt, qkv_scale, out, out_dt, out_scale, B, T, H, D, scale, 0, stream);
}
