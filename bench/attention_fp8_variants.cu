/* attention_fp8_variants.cu: tpk_flash_attention_fp8_variant (bench/lab_variants.h), the FP8 attention in an explicit
 * configuration, for bench/attention_fp8_lab.cu and the GPU tests. Variants 0, 3 and 4 use the product's kernels
 * (attention_fp8.cu: E4M3 values held as fp16, MK 1) through f8_flash_attention_decomp; variants 1 and 2 (mma.sync on
 * E4M3 operands, MK 0) are compiled only here (CMakeLists.txt: tprof_lab_variants, and attention_fp8_lab's own
 * sources). The kernel is src/exec/cuda/attention/attention_fp8_impl.cuh's. */
#include "exec/cuda/attention/attention_fp8_impl.cuh"
#include "lab_variants.h"

extern "C" int tpk_flash_attention_fp8_variant(const void *qkv, tp_dtype in_dt, const float *qkv_scale, void *out,
                                               tp_dtype out_dt, const float *out_scale, int B, int T, int H, int D,
                                               float scale, int variant, tp_stream stream) {
    if (variant < 0 || variant > 4) return F8_INVALID;
    /* variant: 0 default; 1, 2: E4M3 mma; 3, 4: fp16 mma; odd: a head per CTA, even: 128 rows per CTA */
    const int mk = variant == 0 ? F8_DEFAULT_MK : (variant - 1) / 2;
    const int decomp = variant == 0 ? 0 : 2 - variant % 2;
    if (mk == F8_DEFAULT_MK) /* the product's kernels */
        return f8_flash_attention_decomp(qkv, in_dt, qkv_scale, out, out_dt, out_scale, B, T, H, D, scale, decomp,
                                         stream);
    const int rc = f8_check(qkv, in_dt, qkv_scale, out, out_dt, out_scale, B, T, H, D);
    if (rc != F8_GO) return rc;
    f8_args a = {qkv, qkv_scale, out, out_scale, B, T, H, scale, decomp, (cudaStream_t)stream};
    return f8_by_in<0>(in_dt, out_dt, D, &a);
}
