/* patch_embed.h: a ViT's whole token embedding in one kernel (patch_embed.cu, Hopper only): the patch
 * embedding GEMM reading its A operand straight from the fp32 image (im2col and the cast to 16 bits happen in the
 * loads into shared memory), with the bias, the position embedding and the class token in its epilogue. It
 * replaces three kernels and two round trips through memory (im2col -> cols, GEMM -> patch embeddings,
 * embed_tokens -> tokens; tprof profile, ViT-B/16 batch 64 on an H200: 92 + 27 + 48 us).
 * Same conventions as kernels.h: enqueues on `stream`, returns cudaGetLastError() as an int (0 = cudaSuccess),
 * never synchronizes or allocates (graph-capturable). */
#ifndef TP_PATCH_EMBED_H
#define TP_PATCH_EMBED_H

#include "exec/cuda/kernels/kernels.h"
#include "planner/supports.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape rules of tpk_patch_embed without a device (planner/supports.h, TP_KERNEL_PATCH_EMBED_FUSED): dt F16 or
 * BF16, P % 4 == 0 (a patch row is whole float4 loads), 3 P^2 % 64 == 0 (each 64-wide K step stays in one
 * channel), C % 8 == 0. 1 when they hold. */
static inline int tpk_patch_embed_shape_ok(tp_dtype dt, int P, int C) {
    tp_kernel_shape s = {dt, 0, C, 0, P, 0};
    return tp_supports(TP_KERNEL_PATCH_EMBED_FUSED, &s, NULL, 0);
}

/* 1 when tpk_patch_embed can run on the current device: tpk_patch_embed_shape_ok and compute capability 9.0
 * (the kernel uses wgmma, which exists on sm_90a only). */
int tpk_patch_embed_supported(tp_dtype dt, int P, int C);

/* x (B, T, C) row-major in dt, T = Np + has_cls, Np = (H / P) (W / P), from
 *   img  (B, 3, H, W) row-major fp32, 16-byte aligned;
 *   w    (C, 3 P P) row-major in dt (the convolution weight (C, 3, P, P) flattened: k = ch P^2 + ky P + kx);
 *   bias (C) in dt, or NULL for none;  cls (C) in dt (used when has_cls);  pos (T, C) in dt;
 * as x[b, has_cls + p, n] = rne_dt((sum_k rne_dt(A[b p, k]) w[n, k] + bias[n]) + pos[has_cls + p, n]) with
 * A = im2col(img) (patch p = py (W / P) + px, its rows and columns row-major), fp32 accumulation and one
 * rounding (the unfused path rounds the GEMM output, then the sum with pos), and x[b, 0, n] =
 * rne_dt(cls[n] + pos[0, n]) when has_cls (embed_tokens' rounding).
 * Errors: cudaErrorInvalidValue without a launch when !tpk_patch_embed_supported, H or W not a multiple of P,
 * a NULL or misaligned pointer (img 16 bytes, w 16 bytes, x 4 bytes), or B * 3 * H * W >= 2^31; empty work
 * (B == 0) returns cudaSuccess without a launch. */
int tpk_patch_embed(const float *img, const void *w, const void *bias, const void *cls, const void *pos, void *x,
                    tp_dtype dt, int B, int H, int W, int P, int C, int has_cls, tp_stream stream);

/* tpk_patch_embed runs 128 x 128 tiles, 2 CTAs per SM (variant 0, patch_embed_impl.cuh), the only tile the product
 * compiles. The lab's 128 x 256 tiles (variant 1) and tpk_patch_embed_variant, which picks either, are compiled only
 * into the labs and the GPU tests: bench/patch_embed_variants.cu, declared in bench/lab_variants.h. */

#ifdef __cplusplus
}
#endif

#endif
