/* cpu_ops.h: the reference implementation of every op, in FP32 storage with FP64 accumulation.
 * Plain loops, obviously correct; the CUDA kernels and whole engines are tested against these.
 * All tensors row-major fp32. Thread parallelism (OpenMP) only over independent outputs, so results do not
 * depend on the thread count. */
#ifndef TP_CPU_OPS_H
#define TP_CPU_OPS_H
#include <stdint.h>

/* y (M, C) = LayerNorm(x (M, C)) * w (C) + b (C); biased variance, eps inside the sqrt (torch.nn.LayerNorm). */
void tp_cpu_layernorm(const float *x, const float *w, const float *b, float *y, int64_t M, int64_t C, float eps);

/* y (M, N) = x (M, K) @ W (N, K)^T + bias (N); bias may be NULL. 2*M*N*K FLOP. */
void tp_cpu_linear(const float *x, const float *W, const float *bias, float *y, int64_t M, int64_t N, int64_t K);

/* y = GELU(x) over n values: exact erf form 0.5 x (1 + erf(x / sqrt 2)) (Hendrycks and Gimpel 2016; torch's
 * default), or with tanh_form the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (the same
 * paper; torch's approximate='tanh', timm's gelu_tanh), in double. */
void tp_cpu_gelu(const float *x, float *y, int64_t n, int tanh_form);

/* y = a + b, elementwise over n values (y may alias a or b). */
void tp_cpu_add(const float *a, const float *b, float *y, int64_t n);

/* Multi-head self-attention core, timm layout.
 * qkv: (B, T, 3, H, D) (the qkv Linear's output, reshaped as timm's Attention.forward does);
 * out: (B, T, H, D) = softmax(scale * Q K^T) V per (b, h), non-causal. 4*B*H*T*T*D FLOP. */
void tp_cpu_attention(const float *qkv, float *out, int64_t B, int64_t T, int64_t H, int64_t D, float scale);

/* The general attention reference (the contract of tpk_flash_attention_ex, src/exec/cuda/attention/attention.h, in fp32
 * storage, fp64 math): separate strided Q, K, V, O; Tq queries, Tkv keys; grouped-query attention; causal masks
 * aligned bottom-right.
 *   o[b, t, h, :] = sum_{j in S(t)} softmax_j(scale * q[b, t, h, :] . k[b, j, h / G, :]) v[b, j, h / G, :]
 * with G = H / Hkv, S(t) = [0, Tkv) when !causal, else {j < Tkv : j <= t + Tkv - Tq} (FlashAttention >= 2.1 and
 * cuDNN's BOTTOM_RIGHT alignment: the last query sees every key). A row with S(t) empty (causal, t < Tq - Tkv) is
 * written as zeros. Element (b, t, h, d) of Q is q[b * q_bs + t * q_rs + h * D + d]; K, V (Hkv heads, Tkv rows) and
 * O (H heads, Tq rows) likewise with their own strides, in elements. Requires H % Hkv == 0 (not checked).
 * 4 * D * (number of visible (t, j) pairs) * B * H FLOP. */
typedef struct {
    const float *q, *k, *v;
    float *o;
    int64_t q_bs, q_rs, k_bs, k_rs, v_bs, v_rs, o_bs, o_rs;
    int64_t B, H, Hkv, Tq, Tkv, D;
    int causal;
    float scale;
} tp_cpu_attn_args;
void tp_cpu_attention_ex(const tp_cpu_attn_args *a);

/* Patch extraction for a stride-P, kernel-P convolution (Conv2d as a GEMM).
 * img: (B, 3, H, W); cols: (B * Np, 3 * P * P) with Np = (H / P) * (W / P) patches in row-major patch order
 * and column index c * P * P + ky * P + kx, matching a Conv2d weight (C, 3, P, P) flattened to (C, 3*P*P). */
void tp_cpu_im2col(const float *img, float *cols, int64_t B, int64_t H, int64_t W, int64_t P);

/* Token sequence: x (B, T, C) with T = Np + has_cls; x[b, 0] = cls + pos[0] when has_cls, and
 * x[b, has_cls + p] = pe[b, p] + pos[has_cls + p]. pe: (B, Np, C); cls: (C) or NULL; pos: (T, C). */
void tp_cpu_embed_tokens(const float *pe, const float *cls, const float *pos, float *x, int64_t B, int64_t Np,
                         int64_t C, int has_cls);

/* Pooling of x (B, T, C) into y (B, C). mode 0 (timm 'token'): y[b] = x[b, 0]; mode 1 (timm 'avg'): mean of
 * x[b, prefix:], the prefix (class) tokens excluded; mode 2 (a decoder's next-token position): y[b] = x[b, T-1]. */
void tp_cpu_pool(const float *x, float *y, int64_t B, int64_t T, int64_t C, int mode, int64_t prefix);

/* ---- decoders (HF transformers' LlamaForCausalLM and relatives) ---- */

/* y (n, C) = table (V, C)[ids[i]] * scale; ids in [0, V) (the caller checks). Gemma scales by sqrt(C). */
void tp_cpu_token_embed(const int32_t *ids, const float *table, float *y, int64_t n, int64_t C, float scale);

/* y (M, C) = x / sqrt(mean_c(x^2) + eps) * (offset + w) (Zhang and Sennrich 2019; HF LlamaRMSNorm: offset 0,
 * GemmaRMSNorm: offset 1). */
void tp_cpu_rmsnorm(const float *x, const float *w, float *y, int64_t M, int64_t C, float eps, float offset);

/* Rotary embedding of x (B, T, H, D) into y (may not alias x), HF's rotate_half convention: for i < D/2, with
 * angle a = (pos0 + t) * inv_freq[i] (fp32 product, as HF forms it) and c, s its cosine and sine rounded to fp32,
 *   y[i] = x[i] c - x[i + D/2] s,   y[i + D/2] = x[i + D/2] c + x[i] s. */
void tp_cpu_rope(const float *x, float *y, int64_t B, int64_t T, int64_t H, int64_t D, const float *inv_freq,
                 int64_t pos0);
/* As tp_cpu_rope, each sample b starting at pos0 + start[b] (start NULL: at pos0). */
void tp_cpu_rope_at(const float *x, float *y, int64_t B, int64_t T, int64_t H, int64_t D, const float *inv_freq,
                    int64_t pos0, const int64_t *start);

/* y = act(gate) * up over n values; act 0: SiLU g / (1 + e^-g); 1: GELU tanh approximation
 * 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (HF gelu_pytorch_tanh). */
void tp_cpu_glu(const float *gate, const float *up, float *y, int64_t n, int act);

/* KV cache kv (2, B, L, W): kv[0, b, past + t] = k[b, t], kv[1, b, past + t] = v[b, t] for t < T; k, v (B, T, W).
 * Requires past + T <= L (the caller checks). */
void tp_cpu_kv_append(const float *k, const float *v, float *kv, int64_t B, int64_t T, int64_t L, int64_t W,
                      int64_t past);

/* idx[m] = the first n maximizing x (M, N)[m, n] (torch.argmax's tie rule). */
void tp_cpu_argmax(const float *x, int32_t *idx, int64_t M, int64_t N);

/* ---- pipelines (issue 21; the math of openpi's pi0, docs/pipelines.md) ---- */

/* y (B, Ta + Tb, C) = a (B, Ta, C)'s tokens then b (B, Tb, C)'s. */
void tp_cpu_concat_tokens(const float *a, const float *b, float *y, int64_t B, int64_t Ta, int64_t Tb, int64_t C);
/* y (B, n, C) = x (B, T, C)'s tokens start .. start + n - 1. */
void tp_cpu_slice_tokens(const float *x, float *y, int64_t B, int64_t T, int64_t start, int64_t n, int64_t C);
/* y = x sigmoid(x) over n values, in double. */
void tp_cpu_silu(const float *x, float *y, int64_t n);
/* y (B, T, C + D) = x (B, T, C), then on every token the sinusoidal embedding of time t (D even): sin then cos of
 * t 2 pi / period, period = 4e-3 (4 / 4e-3)^f, f = linspace(0, 1, D / 2), in double, stored fp32 (openpi pi0
 * create_sinusoidal_pos_embedding, min period 4e-3, max period 4). */
void tp_cpu_time_concat(const float *x, float *y, int64_t B, int64_t T, int64_t C, int64_t D, double t);
/* y = x + dt v over n values (a flow-matching Euler step). */
void tp_cpu_euler(const float *x, const float *v, float *y, int64_t n, float dt);

/* GQA attention of q (B, Tq, H*D) over [kp, vp (B, Tp, Hkv*D) ; k, v (B, Tk, Hkv*D)] (kp NULL: over k, v only,
 * Tp 0), softmax(scale q k^T) in double. The padded source (kp, else k) shows its keys j < prefix + valid[b]
 * only; first_block: query 0 sees its own first key only (among k), as pi0's state token. o: (B, Tq, H*D). */
typedef struct {
    const float *q, *k, *v, *kp, *vp, *valid;
    float *o;
    int64_t B, H, Hkv, D, Tq, Tk, Tp, prefix;
    int first_block;
    float scale;
} tp_cpu_masked_attn;
void tp_cpu_masked_attention(const tp_cpu_masked_attn *a);

#endif
