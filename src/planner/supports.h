/* supports.h: the kernel-capability table. Every shape and type rule a kernel or library path imposes lives here
 * once, as data the planner, the lint and the kernels' own argument checks all read (the spirit of ggml's
 * supports_op: the planner can say why it did not choose a path). A rule answers yes, or no with a one-line
 * reason naming the value at fault. No device is needed: the rules are arithmetic, so CPU-only builds plan and
 * lint exactly as CUDA builds do; a kernel's run-time check adds only what depends on the GPU (compute
 * capability, driver entry points).
 *
 * Sources: cuBLASLt's FP8 and block-scaled operand requirements (cuBLAS documentation, cublasLtMatmul: 16-byte
 * aligned rows, K a multiple of the scale block); OCP MX v1.0 section 5 (32-element blocks) and NVIDIA's NVFP4
 * (16-element blocks, cuBLASLt VEC16_UE4M3); tprof's kernels' tile and TMA constraints (their headers under
 * src/exec/cuda say why each holds). */
#ifndef TP_SUPPORTS_H
#define TP_SUPPORTS_H

#include <stddef.h>
#include <stdint.h>

#include "tprof.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TP_KERNEL_GEMM_FP8 = 0,       /* cuBLASLt E4M3 x E4M3, per-tensor scales: K % 16, N % 16 */
    TP_KERNEL_GEMM_FP8_BLOCK,     /* cuBLASLt E4M3, 1x128 / 128x128 FP32 block scales: K % 16, N % 8 */
    TP_KERNEL_GEMM_BLOCK_SCALED,  /* MXFP8 / NVFP4 / MXFP4 operands (native or emulated): K % block */
    TP_KERNEL_GEMM_SM90,          /* tprof's Hopper GEMM (gemm_sm90.h), 16-bit: dt F16/BF16, K % 8, N % 8 */
    TP_KERNEL_GEMM_SM90_FP8,      /* tprof's Hopper FP8 GEMM: D F16 or E4M3, K % 16, N % 8 (F16 D) or 16 (E4M3) */
    TP_KERNEL_PATCH_EMBED_FUSED,  /* tprof's fused token embedding (patch_embed.h): F16/BF16, P % 4, 3P^2 % 64,
                                     C % 8 */
    TP_KERNEL_ATTENTION_FLASH,    /* tprof's FA2 flash attention (attention.h; its causal and KV-cache forms too):
                                     F16/BF16 Q/K/V, head dim (k) 32, 64, 80, 96 or 128 */
    TP_KERNEL_ATTENTION_MASKED_FLASH, /* the same kernel with pi0's masks (attention.h tpk_flash_attention_masked):
                                     F16/BF16 Q/K/V, head dim (k) 16, 32, 64, 128 or 256 */
    TP_KERNEL_ROPE_KV_APPEND,     /* tprof's RoPE of the keys fused with the KV-cache append (decoder_ops.h): head
                                     dim (k) even and at most 1024, the cache row (n = KV heads x head dim) at most
                                     4096 values (held in shared memory) */
    TP_KERNEL_COUNT
} tp_kernel;

/* What a rule reads; fields a kernel does not use are ignored. */
typedef struct {
    tp_dtype dt;        /* the operands' (GEMM_SM90, PATCH_EMBED_FUSED, ATTENTION_FLASH: Q/K/V) or the output's
                           (GEMM_SM90_FP8) type */
    int64_t m, n, k;    /* GEMM: rows, output columns, reduction; PATCH_EMBED_FUSED: n = channels C;
                           ATTENTION_FLASH: k = head dim; ROPE_KV_APPEND: n = the cache row, k = head dim */
    int patch;          /* PATCH_EMBED_FUSED: the patch side P */
    int block;          /* GEMM_BLOCK_SCALED: elements per scale along K */
} tp_kernel_shape;

/* The per-dimension rules the GEMM entries are made of, which tprof lint checks one dimension at a time:
 *   TP_DIM_K_BLOCK  K a whole number of blocks of `param` elements (one scale per block along K; block-scaled
 *                   GEMMs take no partial block);
 *   TP_DIM_ROW16    a row of x elements of `param` bits a whole number of 16 bytes (cuBLASLt's FP8 and FP4
 *                   operands; for N, the output's rows at 8 bits). */
typedef enum { TP_DIM_K_BLOCK = 0, TP_DIM_ROW16 } tp_dim_rule;

/* 1 when x satisfies rule r with param (block elements, or element bits); *mult (if non-NULL) receives the
 * multiple x needs (block, or 128 / bits). 0 for x <= 0 or param <= 0. */
int tp_supports_dim(tp_dim_rule r, int64_t x, int param, int64_t *mult);

/* "cuBLASLt FP8 GEMM", ... */
const char *tp_kernel_name(tp_kernel k);

/* 1 when kernel k takes shape s. Otherwise 0, and why (if non-NULL, n > 0) receives one line naming the rule
 * and the values, e.g. "fp8 GEMM needs K and N multiples of 16 (cuBLASLt FP8 alignment); K = 200, N = 768". */
int tp_supports(tp_kernel k, const tp_kernel_shape *s, char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif
