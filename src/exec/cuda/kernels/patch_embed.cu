/* patch_embed.cu: the product's fused token embedding (contract in patch_embed.h): tpk_patch_embed with the
 * default tile (variant 0) and tpk_patch_embed_supported. The kernel, its design and its measurements are in
 * patch_embed_impl.cuh; the lab's other tile (variant 1) is compiled only into the labs and the GPU tests
 * (bench/patch_embed_variants.cu). Built for sm_90a only (CMakeLists.txt: the tprof_sm90a object library). */
#include "exec/cuda/kernels/patch_embed_impl.cuh"

int tpk_patch_embed_supported(tp_dtype dt, int P, int C) { return pe_supported(dt, P, C); }

int tpk_patch_embed(const float *img, const void *w, const void *bias, const void *cls, const void *pos, void *x,
                    tp_dtype dt, int B, int H, int W, int P, int C, int has_cls, tp_stream stream) {
    return pe_run<PE_BN(PE_DEFAULT_VARIANT)>(img, w, bias, cls, pos, x, dt, B, H, W, P, C, has_cls, stream);
}
