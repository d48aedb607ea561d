/* decoder_ops.h: the CUDA kernels of the decoder ops (TP_OP_TOKEN_EMBED .. TP_OP_KV_ATTENTION, src/ir/graph.h),
 * C linkage; implemented in decoder_ops.cu. Each one computes what its CPU reference in src/exec/cpu/cpu_ops.h
 * ("decoders") computes, in fp32 arithmetic on values widened from their storage type.
 *
 * Conventions, as kernels.h: every function enqueues work on `stream` and returns cudaGetLastError() as an int
 * (0 = cudaSuccess); it never synchronizes and never allocates, so a whole decode step can be captured into one
 * CUDA graph. Activation storage types are TP_F32, TP_F16 and TP_BF16 (any other type, or a NULL pointer with
 * work to do, or a negative size: cudaErrorInvalidValue without a launch; empty work: cudaSuccess without a
 * launch). Outputs are rounded once (RNE) to their type. All tensors are row-major and contiguous.
 *
 * The cache position. A decode graph is captured once and replayed at every step, so the position of the step's
 * first token (`past`, the number of tokens already in the KV cache) cannot be a kernel argument: it is read at
 * run time from a device int (`const int *past`), and tpk_advance, the graph's last node, moves it on. The
 * kernels that take it read it on the device when they run; the host never sees it.
 *
 * Programmatic dependent launch (pdl.cuh): every kernel here is launched with it, lets the next kernel start at
 * once, and waits for the kernels before it in the stream before reading or writing any tensor (the cache position
 * included), so consecutive launches overlap only in their scheduling. */
#ifndef TP_DECODER_OPS_H
#define TP_DECODER_OPS_H

#include <stddef.h>

#include "exec/cuda/kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y (n, C) in ydt = table (V, C)[ids[i]] * scale in tdt, the product in fp32 (bit-exact with tp_cpu_token_embed
 * and one rounding). ids (n) is fp32 holding integers (the graph's input value; exact below 2^24). An id that is
 * not an integer in [0, V) (negative, >= V, fractional, NaN) writes a row of NaN: the host validates ids before a
 * run, and the NaN makes a miss visible instead of reading outside the table. */
int tpk_token_embed(const float *ids, const void *table, tp_dtype tdt, void *y, tp_dtype ydt, int n, int C, int V,
                    float scale, tp_stream stream);

/* y (M, C) in ydt = x * (1 / sqrt(mean_c(x^2) + eps)) * (offset + w): RMSNorm (offset 0: Llama; 1: Gemma's
 * x_hat * (1 + w)). x in xdt, w (C) in wdt; the sum of squares in fp32 (one block a row, warp then block
 * reduction), sqrt and division IEEE. C >= 1. */
int tpk_rmsnorm(const void *x, tp_dtype xdt, const void *w, tp_dtype wdt, void *y, tp_dtype ydt, int M, int C,
                float eps, float offset, tp_stream stream);
/* tpk_rmsnorm writing E4M3 under the per-tensor scale *y_scale (device fp32): y = sat(rne(y_f32 / *y_scale)), the
 * fp32 result rounded once (e4m3.cuh), for FP8 GEMMs that read it (no quantize kernel before them). y 4-byte
 * aligned for the vector path (else element by element). */
int tpk_rmsnorm_e4m3(const void *x, tp_dtype xdt, const void *w, tp_dtype wdt, void *y, const float *y_scale, int M,
                     int C, float eps, float offset, tp_stream stream);
/* tpk_rmsnorm writing FP8 block-128 for its fp8-block GEMM readers (no quantize kernel before them): the fp32
 * results quantized per 1 x 128 block as tpk_quant_fp8_b128 (kernels.h) quantizes, bit for bit (e4m3.cuh): q
 * (M_pad, C) E4M3 codes row-major, scales (ceil(C / 128), M_pad) fp32 with M_pad contiguous; rows M .. M_pad - 1
 * codes 0 and scale 1. C % 4 == 0; x and w aligned to 4 elements, q and scales to 4 bytes (cudaErrorInvalidValue
 * otherwise, nothing launched). */
int tpk_rmsnorm_fp8_b128(const void *x, tp_dtype xdt, const void *w, tp_dtype wdt, void *q, float *scales, int M,
                         int M_pad, int C, float eps, float offset, tp_stream stream);

/* Rotary position embedding of x (B, T, H, D) in xdt into y in ydt, HF's rotate_half convention, as tp_cpu_rope:
 * for token t and i < D/2, with a = (float)(*past + t) * inv_freq[i] (one fp32 product, as HF forms the angle)
 * and c, s its accurate sincosf (not the __sinf intrinsic: angles reach thousands of radians),
 *   y[i] = x[i] c - x[i + D/2] s,   y[i + D/2] = x[i + D/2] c + x[i] s.
 * inv_freq: device, D/2 fp32 (tp_rope_inv_freq, src/ir/graph.h); past: device int, the position of t = 0.
 * y may be x itself (in place; then xdt and ydt must have the same size) or disjoint from it.
 * D even, 2 <= D <= 1024. */
int tpk_rope(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, int B, int T, int H, int D, const float *inv_freq,
             const int *past, tp_stream stream);
/* tpk_rope with the start of each sample's positions (tp_cpu_rope_at): (past ? *past : 0) + (valid ? prefix +
 * (int)valid[b] : 0) for sample b; valid: device, B fp32 counts (pi0's expert: its tokens follow the image tokens
 * and sample b's valid language tokens), or NULL; past may be NULL (0). prefix >= 0. */
int tpk_rope_at(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, int B, int T, int H, int D, const float *inv_freq,
                const int *past, const float *valid, int prefix, tp_stream stream);

/* y = act(gate) * up over n values; gate, up in dt, y in ydt (y may alias gate or up when dt == ydt).
 * act 0 (TP_ACT_SILU): g / (1 + e^-g); act 1 (TP_ACT_GELU_TANH): 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))),
 * evaluated as g / (1 + e^(-2z)), the same function without the cancellation of 1 + tanh(z) for z << 0.
 * Other act: cudaErrorInvalidValue. */
int tpk_glu(const void *gate, const void *up, tp_dtype dt, void *y, tp_dtype ydt, size_t n, int act,
            tp_stream stream);
/* tpk_glu writing E4M3 under *y_scale (device fp32), as tpk_rmsnorm_e4m3; y must not alias gate or up. */
int tpk_glu_e4m3(const void *gate, const void *up, tp_dtype dt, void *y, const float *y_scale, size_t n, int act,
                 tp_stream stream);

/* The KV cache kv (2, B, L, W) in kv_dt (K at index 0, V at 1): rows *past .. *past + T - 1 of batch b get k[b] and
 * v[b] (B, T, W) in dt; every other row is left untouched. kv_dt == dt: copied bit for bit. kv_dt == TP_E4M3 (an
 * FP8 cache; dt F16 or BF16, W even, kv 2-byte aligned): each element quantized, sat(rne(x / *kv_scale)) (kernels' E4M3 rounding,
 * e4m3.cuh), one static per-tensor scale for the whole cache (kv_scale: device fp32). The caller guarantees
 * 0 <= *past <= L - T; a past outside that range writes nothing (no access outside the cache). T <= L. */
int tpk_kv_append(const void *k, const void *v, void *kv, tp_dtype dt, tp_dtype kv_dt, const float *kv_scale, int B,
                  int T, int L, int W, const int *past, tp_stream stream);

/* RoPE of the keys fused with the append (planner/program.h, the rope+kv_append rule): k (B, T, H * D) in dt rotated
 * at positions *past + t as tpk_rope_at rotates them (the same fp32 angles, sincosf, the same products), each
 * rotated value rounded to dt, then written with v (B, T, H * D) into rows *past .. *past + T - 1 of the cache kv
 * (2, B, L, H * D) as tpk_kv_append writes them (kv_dt == dt, or TP_E4M3 under *kv_scale for a 16-bit dt): the
 * cache receives the bits the unfused pair writes, in one launch and without the rotated copy. D even, D / 2 <= 512,
 * H * D <= 4096 (supports.h TP_KERNEL_ROPE_KV_APPEND); inv_freq: D / 2 fp32 on the device; 0 <= *past <= L - T (else
 * nothing is written). cudaErrorInvalidValue for other shapes, types or NULL pointers. */
int tpk_rope_kv_append(const void *k, const void *v, void *kv, tp_dtype dt, tp_dtype kv_dt, const float *kv_scale,
                       int B, int T, int L, int H, int D, const float *inv_freq, const int *past, tp_stream stream);

/* An FP8 cache's rows 0 .. T - 1 of each sequence, kv (2, B, L, W) E4M3, into y (2, B, T, W) in ydt (F32/F16/BF16),
 * each value code * *kv_scale rounded once: the K and V of a prefill, for attention kernels that read 16 bits. W
 * even, kv 2-byte aligned. */
int tpk_kv_dequant(const void *kv, const float *kv_scale, void *y, tp_dtype ydt, int B, int T, int L, int W,
                   tp_stream stream);

/* y (B, C) = x (B, T, C)[b, T - 1] (the next-token position: tp_cpu_pool mode 2), dt in and out, bit for bit.
 * y must not overlap x. */
int tpk_last_token(const void *x, void *y, tp_dtype dt, int B, int T, int C, tp_stream stream);

/* ids_out[m] = the first n maximizing x (M, N)[m, n] (torch.argmax's tie rule; NaN counts as larger than every
 * number, the first NaN wins, as in torch), written as an fp32 integer: it is the next decode step's token-id input
 * (tpk_token_embed). x in xdt; N >= 1 (exact in fp32 below 2^24). One block a row. */
int tpk_argmax(const void *x, tp_dtype xdt, float *ids_out, int M, int N, tp_stream stream);

/* *past += by (device int; one thread): the last node of a decode graph, so the next replay runs one step on. */
int tpk_advance(int *past, int by, tp_stream stream);

/* Decode attention over the KV cache: causal grouped-query attention of the T new queries (positions *past ..
 * *past + T - 1) over the cached keys j <= *past + t (this step's keys already appended by tpk_kv_append):
 *   out[b, t, h, :] = sum_{j <= past + t} softmax_j(scale q[b, t, h, :] . K[b, j, h / G, :]) V[b, j, h / G, :],
 * G = H / Hkv; the semantics of tp_cpu_attention_ex with Tq = T, Tkv = past + T, causal = 1 (bottom-right).
 *   q   (B, T, H * D) in dt;   kv (2, B, L, Hkv * D) in kv_dt (K plane, then V plane), 16-byte aligned: dt, or
 *       TP_E4M3 (an FP8 cache, dt F16 or BF16 and out_dt == dt) whose values are code * *kv_scale (device fp32;
 *       the scale is folded into Q's pre-scale and the output, the codes widened exactly);
 *   out (B, T, H * D) in out_dt (any alignment; must not overlap q or kv).
 * Split-KV (flash-decoding): the cache's L positions are cut into chunks whose number and size depend only on
 * host-known sizes (B, T, L), never on *past, so one captured graph serves every step. Each block handles one
 * (chunk, group of up to 8 query rows of one KV head, batch) and writes the rows' partial softmax state (max,
 * sum, unnormalized fp32 output) to the workspace; a combine kernel merges the chunks that ran. Blocks whose
 * chunk starts at or past *past + T return at once, so a step costs what its past + T keys cost. With a single
 * chunk (L <= 64) the first kernel writes out directly and no workspace is needed.
 * Numerics: fp32 throughout; Q pre-scaled by scale * log2(e) and the softmax in base 2 (exp2f); keys beyond
 * *past + T are never read (zero-filled in shared memory), so stale cache rows cannot leak in.
 * D in {64, 128, 256}; H % Hkv == 0; 1 <= T <= L; B * Hkv <= 65535. The caller guarantees 0 <= *past <= L - T.
 * workspace: device fp32, 16-byte aligned, at least tpk_kv_attention_workspace(B, T, H, D, L) bytes (may be
 * NULL when that is 0). Returns cudaErrorInvalidValue without a launch for an unsupported D or dtype,
 * H % Hkv != 0, T > L, a NULL or misaligned pointer, or a too small workspace. */
int tpk_kv_attention(const void *q, const void *kv, tp_dtype dt, tp_dtype kv_dt, const float *kv_scale, void *out,
                     tp_dtype out_dt, int B, int T, int H, int Hkv, int D, int L, const int *past, float scale,
                     float *workspace, size_t workspace_bytes, tp_stream stream);

/* The workspace tpk_kv_attention needs, in bytes: n_chunks * B * T * H * (D + 2) * 4 when the cache is split into
 * n_chunks > 1 chunks, else 0 (also 0 for invalid sizes). At most about 128 (B T <= 4) to 4 chunks (B T >= 128):
 * for B = 1, T = 1, H = 32, D = 128 at most 2.1 MB. */
size_t tpk_kv_attention_workspace(int B, int T, int H, int D, int L);

#ifdef __cplusplus
}
#endif
#endif
