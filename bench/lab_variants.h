/* lab_variants.h: tprof's kernels in explicit configurations ("variants"), for the labs under bench/ and the GPU
 * tests (tests/gpu/), C linkage. The product (tprof_lib) compiles only the configurations its engines can pick, each
 * behind its own entry point in src/exec/cuda (attention.h, attention_fp8.h, attention_wgmma.h, gemm_sm90.h,
 * patch_embed.h); the other configurations and these entry points are compiled only into the labs and test_gpu,
 * from bench/<kernel>_variants.cu (CMakeLists.txt: the object libraries tprof_lab_variants and, for the wgmma
 * kernels, tprof_lab_variants_sm90a), as llm.c keeps its dev/cuda kernels apart from its training code. Each such
 * file includes its kernel's src/exec/cuda/<part>/<kernel>_impl.cuh, so a variant is the same template as the
 * product's; a variant that is the product's configuration calls the product's entry point (or its launch with
 * another grid, where the _impl.cuh says so), so those run the very kernels the engines run.
 * Same conventions as the product's entry points: enqueue on `stream`, return cudaGetLastError() as an int
 * (0 = cudaSuccess), never synchronize, never allocate (graph-capturable); arguments, numerics and errors as the
 * product's entry point named with each, and cudaErrorInvalidValue for a variant number not listed. */
#ifndef TP_LAB_VARIANTS_H
#define TP_LAB_VARIANTS_H

#include "exec/cuda/kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tpk_flash_attention (attention.h) with an explicit kernel configuration (bench/attention_lab.cu, the tests;
 * bench/attention_variants.cu): variant 0 = the default tpk_flash_attention uses; 1 = 4 warps x 16 query rows per
 * CTA, <= 128 registers a thread for D <= 64 (4 CTAs per SM); 2 = 8 warps x 16 rows; 3 = 4 warps x 32 rows; 4 = 2
 * warps x 32 rows (3 and 4 only for D <= 96); 5 = 4 warps x 16 rows, <= 168 registers for D <= 64; 6 = variant 1's
 * tiles in a persistent grid (each CTA loops over work items, loading the next item while finishing the current one).
 * 0 and 1 are tpk_flash_attention itself. Compiled with TPK_FA_ABLATIONS (attention_lab only): also the diagnostics
 * 90-94 (f16 -> f16, D = 64; wrong results, timing only). Other values: cudaErrorInvalidValue. */
int tpk_flash_attention_variant(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale,
                                int B, int T, int H, int D, float scale, int variant, tp_stream stream);

/* tpk_flash_attention_fp8 (attention_fp8.h: its numerics, and the product kinds and decompositions named here) with
 * an explicit kernel configuration (bench/attention_fp8_lab.cu, the tests; bench/attention_fp8_variants.cu); all
 * compute the same numerics (they may differ only in the fp32 accumulation inside the tensor cores).
 * variant 0 = the default (tpk_flash_attention_fp8's choice: F16 products; a head per CTA when that still gives
 * 2 CTAs per SM, else fewer rounds per CTA); 1 = E4M3, a head per CTA; 2 = E4M3, 128 rows per CTA; 3 = F16, a head
 * per CTA; 4 = F16, 128 rows per CTA. 0, 3 and 4 run the product's kernels. Other values: cudaErrorInvalidValue. */
int tpk_flash_attention_fp8_variant(const void *qkv, tp_dtype in_dt, const float *qkv_scale, void *out,
                                    tp_dtype out_dt, const float *out_scale, int B, int T, int H, int D, float scale,
                                    int variant, tp_stream stream);

/* tpk_flash_attention_wgmma (attention_wgmma.h) with an explicit kernel configuration (bench/attention_wgmma_lab.c,
 * the tests; bench/attention_wgmma_variants.cu): variant 0 = the default; 1 = one CTA per head, 2 warpgroups, <= 128
 * registers (2 CTAs per SM; the wgmma's are serialized by ptxas for want of registers); 2 = one CTA per head, 2
 * warpgroups, 1 CTA per SM; 3 = one warpgroup per 2 query tiles of 64 rows (K and V loaded once per 128 rows, 3 CTAs
 * per SM); 4 = one warpgroup per query tile; 5 = persistent: one CTA of 2 warpgroups per SM loops over heads with the
 * next head's copy in flight (two buffers: T <= about 300); 6 = 5 with the full 64-key chunks software-pipelined
 * (Q K^T of chunk j + 1 on the tensor cores during the softmax of chunk j); 7 = 3 with its second query tile
 * pipelined likewise; 8 = one warpgroup computes its 2 query tiles together (two independent softmaxes per warp), 2
 * CTAs per SM. 0 and 3 (the same configuration) and 4 run the product's kernel. Other values: cudaErrorInvalidValue. */
int tpk_flash_attention_wgmma_variant(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt,
                                      const float *out_scale, int B, int T, int H, int D, float scale, int variant,
                                      tp_stream stream);

/* tpk_flash_attention_wgmma_fp8 (attention_wgmma.h) with an explicit kernel configuration
 * (bench/attention_wgmma_lab.c, the tests; bench/attention_wgmma_fp8_variants.cu): variant 0 = the default (2 query
 * tiles of 64 rows per CTA, up to 168 registers a thread); 1 = 2 tiles, 4 CTAs per SM (128 registers); 2 = 1 tile
 * per CTA, 4 CTAs per SM; 3 = 4 tiles per CTA. 0 and 3 run the product's kernel. Other values: invalid. */
int tpk_flash_attention_wgmma_fp8_variant(const void *qkv, const float *qkv_scale, void *out, tp_dtype out_dt,
                                          const float *out_scale, int B, int T, int H, int D, float scale,
                                          int variant, tp_stream stream);

/* tpk_gemm_sm90 (gemm_sm90.h) with an explicit kernel version (bench/gemm_lab.c, the tests;
 * bench/gemm_sm90_variants.cu): variant 0 = each consumer warpgroup writes its whole 128 x 128 tile (6 pipeline
 * stages); 1 = rows 64-127 of each tile go through shared memory in fp32 to three helper warps, which add the bias,
 * apply the GELU and store them while the consumer writes rows 0-63 (4 stages). Same results bit for bit; errors as
 * tpk_gemm_sm90, and cudaErrorInvalidValue for another variant. TPK_GEMM_SM90_DEFAULT_VARIANT(gelu) is
 * tpk_gemm_sm90 itself. */
int tpk_gemm_sm90_variant(const void *A, const void *W, const void *bias, void *D, tp_dtype dt, int M, int N, int K,
                          int gelu, int variant, tp_stream stream);

/* tpk_gemm_sm90_fp8 (gemm_sm90.h: arguments, numerics, errors) with every variant (bench/gemm_lab.c, the tests;
 * bench/gemm_sm90_variants.cu): 0 and 2 as tpk_gemm_sm90_fp8 (which it calls), and 1: variant 0 with the helper
 * warps of tpk_gemm_sm90_variant's variant 1 (no residual). Other values: cudaErrorInvalidValue. */
int tpk_gemm_sm90_fp8_variant(const void *A, const float *a_scale, const void *W, const float *w_scale,
                              const void *bias, const void *R, void *D, tp_dtype d_dt, const float *d_scale, int M,
                              int N, int K, int gelu, int variant, tp_stream stream);

/* tpk_patch_embed (patch_embed.h) with an explicit tile (bench/patch_embed_lab.c, the tests;
 * bench/patch_embed_variants.cu): variant 0 = 128 x 128 tiles, 2 CTAs per SM (the default, tpk_patch_embed itself);
 * 1 = 128 x 256 tiles (half the image traffic), 1 CTA per SM. Other values: cudaErrorInvalidValue. */
int tpk_patch_embed_variant(const float *img, const void *w, const void *bias, const void *cls, const void *pos,
                            void *x, tp_dtype dt, int B, int H, int W, int P, int C, int has_cls, int variant,
                            tp_stream stream);

#ifdef __cplusplus
}
#endif

#endif
