/* gemm_cublaslt.h: every GEMM of tprof goes through cuBLASLt.
 *
 * Computes, with PyTorch's Linear convention and row-major tensors,
 *     D (M, N) = alpha * (A (M, K) @ W (N, K)^T) + bias (N)        alpha = a_scale * w_scale for FP8
 * In cuBLASLt's column-major terms this is D^T = W^T' * A^T, i.e. op(A_lt) = T on W and op(B_lt) = N on A,
 * the "TN" layout FP8 GEMMs require on Hopper (cuBLAS docs, cublasLtMatmul, FP8 section).
 *
 * Supported (type of A and W / type of D / compute):
 *   F32  / F32       / CUBLAS_COMPUTE_32F (pure fp32, TF32 off)
 *   F16  / F16       / CUBLAS_COMPUTE_32F (fp32 accumulation)
 *   BF16 / BF16      / CUBLAS_COMPUTE_32F
 *   E4M3 / F16 or BF16 / CUBLAS_COMPUTE_32F with per-tensor scales: device fp32 pointers a_scale, w_scale
 *                     (CUBLASLT_MATMUL_DESC_B_SCALE_POINTER / A_SCALE_POINTER); K a multiple of 16.
 *   E4M3 / E4M3      / the same, D quantized by cuBLASLt: Dq = sat_e4m3(rne(d_scale * (alpha * A @ W^T + bias)))
 *                     with d_scale (CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, device fp32) the reciprocal of D's
 *                     storage scale; bias in F16; K % 16 == 0, N % 16 == 0 (tp_gemm_run_q).
 *   E4M3 / BF16      / CUBLAS_COMPUTE_32F with FP8 block-128 scales (desc.block128, sm_90): a_scale points to the
 *                     activations' (ceil(K/128), M) fp32 1x128 scales, M contiguous (VEC128_32F), w_scale to the
 *                     weights' 128x128 scales as tp_gemm_b128_weight_scales lays them out (BLK128x128_32F);
 *                     M % 4 == 0 (the caller pads rows), K % 16 == 0, N % 8 == 0. The layouts were established on
 *                     an H200 with cuBLASLt 13.1 against the CPU reference (tools/probes/fp8_block128_layout.c);
 *                     PyTorch's _scaled_mm uses the same ones for its BlockWise1x128 / BlockWise128x128 recipes.
 *   E4M3 (MXFP8), E2M1 (NVFP4, MXFP4) / BF16 with block scales (desc.block_fmt; Blackwell, sm_100 and newer):
 *                     cuBLASLt VEC32_UE8M0 (MX) or VEC16_UE4M3 (NVFP4) scale modes; a_scale and w_scale point to the
 *                     operands' scale codes (bytes, not fp32) in the 128x4 tiled layout (scale_layout.h), the
 *                     NVFP4 per-tensor scales go into alpha; K % 32 == 0, N % 8 == 0. Built and planned
 *                     everywhere; cuBLASLt finds no algorithm before sm_100 (TP_ERR_UNSUPPORTED at plan time).
 * Bias (optional) is fused as the BIAS epilogue, in D's type (F32 for F32); a residual (optional) as C with
 * beta = 1, in D's type (not with an E4M3 D); GELU (optional, tanh form) as the GELU / GELU_BIAS epilogue. Anything else: TP_ERR_UNSUPPORTED
 * at plan time, naming the combination. */
#ifndef TP_GEMM_CUBLASLT_H
#define TP_GEMM_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "exec/cuda/kernels/kernels.h"
#include "tprof.h"

typedef struct tp_gemm_ctx tp_gemm_ctx;     /* one cuBLASLt handle and one workspace */
typedef struct tp_gemm_plan tp_gemm_plan;   /* one GEMM shape and types, algorithm chosen */

typedef struct {
    int64_t M, N, K;
    tp_dtype ab_dt;  /* type of A and W */
    tp_dtype d_dt;   /* type of D (and of bias) */
    int has_bias;
    int block128;    /* E4M3 only: FP8 block-128 scales instead of per-tensor ones */
    int block_fmt;   /* a tp_qformat (TP_QF_MXFP8, TP_QF_NVFP4, TP_QF_MXFP4) for native block-scaled MMA, else 0 */
    int residual;    /* D = ... + R: a residual (M, N) in D's type added in the epilogue (C = R, beta = 1) */
    int gelu;        /* D = GELU(A W^T + bias), cuBLASLt's GELU epilogue: the tanh approximation
                        (tools/probes/gelu_epilogue.c); not with a residual */
    int fast_accum;  /* E4M3 only: 1 sets CUBLASLT_MATMUL_DESC_FAST_ACCUM (the tensor cores' partial sums are not
                        promoted to fp32 every few K blocks; Transformer Engine's forward GEMMs run so). The engines
                        set it unless tp_engine_options.fp8_promote (--fp8-accum promote); bench/gemm_lab.c times
                        both */
} tp_gemm_desc;

/* The weights' 128x128 block scales in the layout BLK128x128_32F reads: from the plain row-major
 * (ceil(N/128), ceil(K/128)) grid (tp_quantize's, src/formats/qformat.h) to (ceil(N/128), ld) row-major with
 * ld = ceil(K/128) rounded up to a multiple of 4 (padding 0). out holds tp_gemm_b128_weight_scale_count floats. */
size_t tp_gemm_b128_weight_scale_count(int64_t N, int64_t K);
void tp_gemm_b128_weight_scales(const float *plain, int64_t N, int64_t K, float *out);

/* Creates the handle and a workspace of workspace_bytes on the current device. TP_ERR_CUDA/TP_ERR_OOM. */
tp_status tp_gemm_ctx_create(size_t workspace_bytes, tp_gemm_ctx **out, tp_error *err);
void tp_gemm_ctx_destroy(tp_gemm_ctx *ctx);
/* cuBLASLt's version number (cublasLtGetVersion, e.g. 130100 for 13.1.0). */
size_t tp_gemm_lib_version(void);

/* Plans a GEMM: validates the type combination and alignment, creates descriptors and keeps cuBLASLt's heuristic
 * algorithms, the first selected (see GEMM selection below). `name` (the layer) goes into error messages. */
tp_status tp_gemm_plan_create(tp_gemm_ctx *ctx, const tp_gemm_desc *desc, const char *name, tp_gemm_plan **out,
                              tp_error *err);
void tp_gemm_plan_destroy(tp_gemm_plan *plan);

/* GEMM selection. tp_gemm_plan_create keeps up to TP_GEMM_MAX_CANDIDATES of cuBLASLt's heuristic algorithms
 * (cublasLtMatmulAlgoGetHeuristic, best-ranked first; every one fits the context's workspace) and runs the first;
 * the engine times them on the real buffers when it is built and selects the fastest (cuda_engine.c), as
 * TensorRT's tactic selection does. candidates: how many (>= 1 for a created plan); choice: the index that runs;
 * select: runs candidate k from the next tp_gemm_run on (0, or -1 for k out of range: nothing changes); desc:
 * the plan's shape and types (for a cache of choices by shape). */
#define TP_GEMM_MAX_CANDIDATES 8
int tp_gemm_plan_candidates(const tp_gemm_plan *plan);
int tp_gemm_plan_choice(const tp_gemm_plan *plan);
int tp_gemm_plan_select(tp_gemm_plan *plan, int k);
const tp_gemm_desc *tp_gemm_plan_desc(const tp_gemm_plan *plan);

/* Enqueues D = A @ W^T (+ bias) on stream. a_scale and w_scale are device fp32 pointers for E4M3, NULL
 * otherwise. Returns 0 or the cublasStatus_t value. No allocation, no synchronization (graph-capturable). */
int tp_gemm_run(tp_gemm_ctx *ctx, const tp_gemm_plan *plan, const void *A, const void *W, const void *bias,
                void *D, const float *a_scale, const float *w_scale, tp_stream stream);
/* As tp_gemm_run with D = alpha * (A @ W^T) + bias: alpha (a host value, read when the call is enqueued, so a
 * captured CUDA graph keeps it) carries per-tensor scales that are known when the engine is built, e.g. NVFP4's
 * second-level scales s2_a * s2_w. */
int tp_gemm_run_alpha(tp_gemm_ctx *ctx, const tp_gemm_plan *plan, const void *A, const void *W, const void *bias,
                      void *D, const float *a_scale, const float *w_scale, float alpha, tp_stream stream);
/* The general form. residual: R (M, N) row-major in D's type, added in the epilogue with the bias:
 * D = alpha * (A @ W^T) + bias + R, rounded once (cuBLASLt's C with beta = 1; R may be D itself); required by a
 * plan with desc.residual, NULL otherwise. d_scale: for a plan whose D is E4M3 (device fp32, 16-byte aligned), it
 * multiplies the result before cuBLASLt rounds it to E4M3 (saturating), i.e. 1 / the storage scale of D; NULL
 * for any other D type. Same return values; a missing, misaligned or unexpected residual or d_scale is
 * CUBLAS_STATUS_INVALID_VALUE. */
int tp_gemm_run_q(tp_gemm_ctx *ctx, const tp_gemm_plan *plan, const void *A, const void *W, const void *bias,
                  const void *residual, void *D, const float *a_scale, const float *w_scale, const float *d_scale,
                  float alpha, tp_stream stream);

/* ---- strided-batched GEMMs (attention's unfused form, engine_memory.c, engine_launch.c) -------------------------------------
 * Per batch i < batch, with row-major matrices at A + i sa, B + i sb, C + i sc (strides in elements, 0: the same
 * matrix for every batch):
 *     C (M, N) = alpha * A (M, K) @ op(B) + beta * C,   op(B) = B^T for B (N, K) (trans_b), else B (K, N),
 * rows lda, ldb, ldc elements apart. A and B in ab_dt (F32, F16 or BF16), C in c_dt (ab_dt, or F32 for 16-bit
 * inputs); fp32 accumulation (CUBLAS_COMPUTE_32F, TF32 off). align: the byte alignment (1 to 16, a power of two)
 * every pointer the plan will be run on is guaranteed to have, offsets and strides included: the heuristic is told
 * so (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*) and tp_bgemm_run checks it. cuBLASLt's batched layouts:
 * CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT and _STRIDED_BATCH_OFFSET (cuBLAS documentation, cublasLtMatrixLayoutAttribute_t).
 * Errors: TP_ERR_ARG (a dimension or batch < 1, a leading dimension shorter than its row, align not a power of two
 * in 1..16), TP_ERR_UNSUPPORTED (types; or cuBLASLt has no algorithm, its status named), TP_ERR_OOM, TP_ERR_CUDA. */
typedef struct {
    int64_t M, N, K;
    int trans_b;
    tp_dtype ab_dt, c_dt;
    int64_t lda, ldb, ldc;
    int batch;
    int64_t sa, sb, sc;
    float alpha, beta;
    unsigned align;
} tp_bgemm_desc;
typedef struct tp_bgemm tp_bgemm;
tp_status tp_bgemm_create(tp_gemm_ctx *ctx, const tp_bgemm_desc *d, const char *name, tp_bgemm **out, tp_error *err);
/* Enqueues one planned batched GEMM on stream; 0 or a cublasStatus_t (CUBLAS_STATUS_INVALID_VALUE for a NULL or
 * less aligned pointer than the plan's align). */
int tp_bgemm_run(tp_gemm_ctx *ctx, const tp_bgemm *p, const void *A, const void *B, void *C, tp_stream stream);
void tp_bgemm_destroy(tp_bgemm *p);

#endif
