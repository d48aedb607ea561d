/* attention.h: fused multi-head attention on tensor cores (FlashAttention-2 style), C linkage; implemented in
 * attention.cu. Same conventions as kernels.h: enqueues on `stream`, returns cudaGetLastError() as an int
 * (0 = cudaSuccess), never synchronizes, never allocates (graph-capturable).
 *
 * Numerics: Q K^T and P V on tensor cores (mma.sync m16n8k16) with fp32 accumulation; softmax statistics in fp32;
 * the probabilities P are rounded to the input type (fp16 or bf16) before P V, while the row sums use the
 * unrounded fp32 values; the output is rounded once on store (RNE for F16/BF16; E4M3: q = sat_e4m3(rne(y / s))
 * through __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E4M3), as kernels.cu does). */
#ifndef TP_ATTENTION_H
#define TP_ATTENTION_H

#include "exec/cuda/kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* qkv (B, T, 3, H, D) row-major in in_dt (TP_F16 or TP_BF16), the fused QKV GEMM's output as timm lays it out;
 * out (B, T, H, D) row-major in out_dt (TP_F16, TP_BF16, or TP_E4M3 quantized with *out_scale:
 * q = sat_e4m3(rne(y / *out_scale)), out_scale a device fp32 pointer);
 * scale multiplies Q K^T (timm: D^-0.5). Non-causal. D in {32, 64, 80, 96, 128}; any T >= 1.
 * qkv and out must be 16-byte aligned (every cudaMalloc'd buffer is).
 * Returns cudaErrorInvalidValue without launching for an unsupported D or dtype, a misaligned or NULL pointer
 * with work to do, or a missing E4M3 scale; empty work (B, T or H = 0) returns cudaSuccess without a launch. */
int tpk_flash_attention(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt, const float *out_scale, int B,
                        int T, int H, int D, float scale, tp_stream stream);

/* tpk_flash_attention runs one configuration of its kernel (4 warps x 16 query rows: attention_impl.cuh), the only
 * one the product compiles. The lab's others and tpk_flash_attention_variant, which picks one by number, are
 * compiled only into the labs and the GPU tests: bench/attention_variants.cu, declared in bench/lab_variants.h. */

/* ================================================================================================================
 * The general entry point: separate, strided Q, K, V and O; KV length != query length; causal (decoder) masks;
 * grouped-query attention; split-KV (flash-decoding) for decode.
 *
 *   o[b, t, h, :] = sum_j softmax_j(scale * q[b, t, h, :] . k[b, j, h / G, :]) v[b, j, h / G, :],  G = H / Hkv,
 *
 * j over the keys query t sees: every j in [0, Tkv) when !causal; with causal, j <= t + (Tkv - Tq). That is the
 * causal mask aligned to the bottom-right corner of the Tq x Tkv score matrix: the last query sees every key, as
 * when the queries are the last Tq tokens of a sequence whose first Tkv - Tq tokens are cached (decode: Tq = 1
 * sees all Tkv keys; prefill: Tq = Tkv is the usual lower-triangular mask). It is the convention of
 * FlashAttention >= 2.1 (flash_attn_func with causal=True and seqlen_q != seqlen_k, its README's 2.1 change
 * notes) and of cuDNN's BOTTOM_RIGHT diagonal alignment (cudnn-frontend causal_mask_bottom_right: keep
 * row + s_kv - s_q >= col). Rows that see no key (causal with Tq > Tkv: rows t < Tq - Tkv; or Tkv = 0) are
 * written as zeros (the empty sum; no softmax exists there), never NaN.
 *
 * Layouts (every stride in elements, >= 0): element (b, t, h, d) of Q is q[b * q_batch_stride + t * q_row_stride
 * + h * D + d] (heads contiguous at h * D inside a token's row), K and V likewise with Hkv heads and Tkv rows, O
 * like Q in out_dt. timm's packed qkv (B, T, 3, H, D) is q = qkv, k = qkv + H D, v = qkv + 2 H D, row stride 3 H D,
 * batch stride 3 T H D; a (B, T, H, D) tensor has row stride H D and batch stride T H D.
 * GQA: query head h reads key/value head h / G (G consecutive query heads share one KV head, as in Llama and
 * torch's scaled_dot_product_attention(enable_gqa=True)); Hkv = H is multi-head attention.
 *
 * Split-KV: when B * Hkv * (query tiles) CTAs cannot fill the GPU (decode), the keys are cut into num_splits
 * ranges; each CTA writes its partial softmax state (row max, row sum, unnormalized fp32 O) to the workspace and a
 * second kernel merges them (the flash-decoding scheme: Dao, Haziza, Massa, Sizov, "Flash-Decoding for
 * long-context inference", 2023). Workspace: num_splits * B * H * Tq * (D + 2) fp32 values; with fewer bytes given,
 * fewer splits are used (none when workspace_bytes is 0), so the result never depends on the workspace, only the
 * speed. Query heads of one KV head are processed together (the G heads x Tq rows of a (b, KV head) in one tile
 * of rows), so a decode step reads each K/V row once per KV head, not once per query head.
 *
 * Numerics as tpk_flash_attention (header of this file); with split-KV the partial states are fp32 and merged in
 * fp32 (max, rescale by 2^(m_s - m), sum), adding ~1e-7 relative error. */
typedef struct {
    const void *q, *k, *v; /* device pointers in in_dt, 16-byte aligned (k, v may be NULL when Tkv = 0) */
    void *o;               /* device pointer in out_dt, 16-byte aligned */
    long long q_batch_stride, q_row_stride; /* elements; multiples of 8 (16 bytes) */
    long long k_batch_stride, k_row_stride;
    long long v_batch_stride, v_row_stride;
    long long o_batch_stride, o_row_stride; /* elements of out_dt; multiples of 16 / sizeof(out_dt) */
    int B, H, Hkv, Tq, Tkv, D;              /* H % Hkv == 0; D in {32, 64, 80, 96, 128} */
    int causal;                             /* 0: every key; 1: bottom-right aligned causal mask (above) */
    float scale;                            /* multiplies Q K^T (e.g. D^-0.5); any finite value */
    tp_dtype in_dt, out_dt;                 /* in: TP_F16 or TP_BF16; out: TP_F16, TP_BF16 or TP_E4M3 */
    const float *out_scale;                 /* device fp32, E4M3 output only: q = sat_e4m3(rne(y / *out_scale)) */
    int num_splits;                         /* 0: automatic (fill the GPU); n >= 1: at most n key ranges */
    void *workspace;                        /* device, 16-byte aligned, for split-KV; NULL with 0 bytes */
    size_t workspace_bytes;
} tpk_attn_args;

/* Enqueues the attention described by *a on stream (no allocation, no synchronization: graph-capturable; the
 * host-side queries it makes, device attributes and occupancy, are allowed during capture). One kernel, plus the
 * combine kernel when split-KV is used. Causal key tiles wholly above the diagonal are neither loaded nor
 * computed, and a query tile's key loop ends at its last row's diagonal.
 * Returns 0, or cudaErrorInvalidValue without launching for: NULL a, an unsupported D or dtype, H % Hkv != 0,
 * a negative size or stride, a misaligned pointer or stride, NULL pointers with work to do, a missing E4M3
 * scale, more than 2^31 - 1 CTAs; empty work (B, H or Tq = 0) returns 0 without a launch. */
int tpk_flash_attention_ex(const tpk_attn_args *a, tp_stream stream);

/* The plan tpk_flash_attention_ex would make for *a on the current device, ignoring a->workspace_bytes:
 * *splits (the number of key ranges, 1 = no split-KV) and *bytes (the workspace that number needs, 0 when 1);
 * either may be NULL. Give a workspace of *bytes to get that plan. Same errors as tpk_flash_attention_ex (the
 * pointers are not checked). */
int tpk_flash_attention_ex_plan(const tpk_attn_args *a, int *splits, size_t *bytes);

/* pi0's masked attention (TP_OP_MASKED_ATTENTION; the semantics of tp_cpu_masked_attention, cpu_ops.h) on the
 * general kernel above: grouped-query attention of q over [kp, vp ; k, v] (without kp, vp: over k, v), softmax
 * in fp32. The padded source (kp, vp; else k, v) shows sample b its keys below prefix + (int)valid[b] only; with
 * first_block, query 0 sees the own source's first key only (pi0's state token; other queries all own keys). A
 * row that sees no key is written as zeros.
 * Layouts, contiguous: q, o (B, Tq, H * D); k, v (B, Tk, Hkv * D); kp, vp (B, Tp, Hkv * D); valid (B) fp32
 * counts, device. The two sources are tiled separately (the padded one's 64-key tiles first), so split-KV ranges
 * and masks never mix them. Types: q, k, v, kp, vp in in_dt (F16 or BF16); o in out_dt: in_dt, or E4M3 with
 * out_scale (device fp32: q = sat_e4m3(rne(y / *out_scale))). D in {16, 32, 64, 128, 256} (at 256 Q is re-read
 * from shared memory every key tile, one CTA per SM). Workspace for split-KV as tpk_flash_attention_ex's (fewer
 * bytes: fewer splits, same result). Returns 0, or cudaErrorInvalidValue without launching for an unsupported
 * type or D, H % Hkv != 0, kp without vp (or the reverse), Tp != 0 without kp, negative sizes, NULL or
 * unaligned (16 bytes) pointers with work to do, a missing E4M3 scale. */
typedef struct {
    const void *q, *k, *v, *kp, *vp;
    const float *valid;
    void *o;
    int B, H, Hkv, D, Tq, Tk, Tp;
    int prefix, first_block;
    float scale;
    tp_dtype in_dt, out_dt;
    const float *out_scale;
    int num_splits; /* 0: automatic */
    void *workspace;
    size_t workspace_bytes;
} tpk_masked_attn_args;

/* 1 when tpk_flash_attention_masked takes these types and head dim. */
int tpk_flash_attention_masked_supported(tp_dtype in_dt, tp_dtype out_dt, int D);
int tpk_flash_attention_masked(const tpk_masked_attn_args *a, tp_stream stream);
/* The split count and workspace bytes tpk_flash_attention_masked would use (pointers not checked). */
int tpk_flash_attention_masked_plan(const tpk_masked_attn_args *a, int *splits, size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
