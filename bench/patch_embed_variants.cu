/* patch_embed_variants.cu: tpk_patch_embed_variant (bench/lab_variants.h), the fused token embedding with an explicit
 * tile, for bench/patch_embed_lab.c and the GPU tests. Variant 0 is the product's tpk_patch_embed (patch_embed.cu);
 * variant 1's 128 x 256 tiles are compiled only here, for sm_90a (CMakeLists.txt: tprof_lab_variants_sm90a). The
 * kernel is src/exec/cuda/kernels/patch_embed_impl.cuh's. */
#include "exec/cuda/kernels/patch_embed_impl.cuh"
#include "lab_variants.h"

int tpk_patch_embed_variant(const float *img, const void *w, const void *bias, const void *cls, const void *pos,
                            void *x, tp_dtype dt, int B, int H, int W, int P, int C, int has_cls, int variant,
                            tp_stream stream) {
    if (variant < 0 || variant > 1) return TPK_INVALID;
    if (variant == PE_DEFAULT_VARIANT) /* the product's tile */
        return tpk_patch_embed(img, w, bias, cls, pos, x, dt, B, H, W, P, C, has_cls, stream);
    return pe_run<PE_BN(1)>(img, w, bias, cls, pos, x, dt, B, H, W, P, C, has_cls, stream);
}
