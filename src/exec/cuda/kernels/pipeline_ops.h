/* pipeline_ops.h: CUDA kernels of the pipeline ops (src/ir/graph.h, issue 21: openpi's pi0 as one graph), each the
 * GPU form of a CPU reference in src/exec/cpu/cpu_ops.h and checked against it (tests/gpu/test_gpu_pipeline_ops.c).
 * Element types: F32, F16, BF16 (widened to fp32, computed in fp32, rounded once on store). Every entry point
 * returns 0 (cudaSuccess), the launch's error, or cudaErrorInvalidValue for arguments it refuses (checked before
 * anything is launched). The engine calls them from engine_launch.c. */
#ifndef TP_PIPELINE_OPS_H
#define TP_PIPELINE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "exec/cuda/kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = x sigmoid(x) over n values (tp_cpu_silu), as x / (1 + e^-x). */
int tpk_silu(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, size_t n, tp_stream stream);

/* y = x + dt v over n values (tp_cpu_euler): x, y fp32 (the flow-matching state stays fp32), v in vdt; the product
 * and the sum each rounded to fp32, as the reference's float32 tensors compute them. y may be x. */
int tpk_euler(const float *x, const void *v, tp_dtype vdt, float *y, float dt, size_t n, tp_stream stream);

/* y (rows, C + D) = x (rows, C), then emb (D fp32, device) on every row (tp_cpu_time_concat with the embedding
 * computed once on the host: it is a constant of the step). x, y in dt. */
int tpk_time_concat(const void *x, tp_dtype dt, const float *emb, void *y, int64_t rows, int C, int D,
                    tp_stream stream);

/* y (B, Ta + Tb, C) = a (B, Ta, C)'s tokens then b (B, Tb, C)'s (tp_cpu_concat_tokens); y (B, n, C) = x (B, T, C)'s
 * tokens start .. start + n - 1 (tp_cpu_slice_tokens). One element type dt throughout; two or one strided copies
 * (cudaMemcpy2DAsync), no kernel. */
int tpk_concat_tokens(const void *a, const void *b, void *y, tp_dtype dt, int B, int64_t Ta, int64_t Tb, int64_t C,
                      tp_stream stream);
int tpk_slice_tokens(const void *x, void *y, tp_dtype dt, int B, int64_t T, int64_t start, int64_t n, int64_t C,
                     tp_stream stream);

/* GQA attention of q (B, Tq, H*D) over [kp, vp (B, Tp, Hkv*D) ; k, v (B, Tk, Hkv*D)] (kp NULL: k, v alone, Tp 0),
 * softmax(scale q k^T) in fp32 (tp_cpu_masked_attention): the padded source's keys (kp, else k) below prefix +
 * valid[b] (valid: device, B fp32 counts) only; first_block: query 0 sees its own first key only. o (B, Tq, H*D).
 * All of q, k, v, kp, vp, o in dt. One block per (query, head, sample), the scores in shared memory: Tp + Tk <=
 * TPK_MASKED_ATTN_MAX_KEYS, D <= 256, H % Hkv == 0. A CUDA-core kernel: correct first, not yet fast. */
#define TPK_MASKED_ATTN_MAX_KEYS 8192
int tpk_masked_attention(const void *q, const void *k, const void *v, const void *kp, const void *vp,
                         const float *valid, void *o, tp_dtype dt, int B, int H, int Hkv, int D, int Tq, int Tk,
                         int Tp, int prefix, int first_block, float scale, tp_stream stream);

/* The softmax of the unfused masked attention (engine_launch.c: cuBLASLt's batched GEMMs around it): S holds the
 * scaled scores fp32, one row per (b, h, t) in that order (row r at S + r ld): columns 0 .. Tp - 1 the padded
 * source's keys (two: the prefix's K), Tp .. o0 - 1 unused (o0 >= Tp aligns the next block), o0 .. o0 + Tk - 1 the
 * own keys (one source: Tp = o0 = 0, the own keys the padded ones); P (same rows, same ld, in pdt) = softmax over
 * the visible keys with tpk_masked_attention's rules, 0 at masked and unused columns; a row with no visible key is
 * zeros. ld >= o0 + Tk. */
int tpk_masked_softmax(const float *S, void *P, tp_dtype pdt, const float *valid, int B, int H, int Tq, int Tp,
                       int o0, int Tk, int ld, int prefix, int two, int first_block, tp_stream stream);

#ifdef __cplusplus
}
#endif

#endif
