/* decoder.h: the decoder family (tp_decoder_family, model.h): Llama-style causal language models exactly as HF
 * transformers names and lays out their parameters (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
 * GemmaForCausalLM; models/<arch>/modeling_<arch>.py):
 *   model.embed_tokens.weight (V, C)
 *   model.layers.N.input_layernorm.weight (C)
 *   model.layers.N.self_attn.{q,k,v}_proj.weight (H*D, C), (Hkv*D, C), (Hkv*D, C)   [.bias: qkv_bias]
 *   model.layers.N.self_attn.o_proj.weight (C, H*D)                                   [.bias: o_bias]
 *   model.layers.N.post_attention_layernorm.weight (C)
 *   model.layers.N.mlp.{gate,up}_proj.weight (I, C), mlp.down_proj.weight (C, I)      [.bias: mlp_bias]
 *   model.norm.weight (C)
 *   lm_head.weight (V, C)                                                            absent when tied
 * Each layer: x += o_proj(attn(rope(q), rope(k), v)) over RMSNorm(x), then x += down(act(gate) * up) over
 * RMSNorm(x); then RMSNorm and the LM head. Gemma: RMSNorm x_hat * (1 + w), embeddings scaled by sqrt(C), GeGLU
 * (GELU tanh), tied embeddings. Qwen2: q/k/v bias. Only src/models sees this header. */
#ifndef TP_DECODER_H
#define TP_DECODER_H

#include "ir/graph.h"
#include "models/model.h"
#include "tprof.h"

typedef enum { TP_DEC_LLAMA = 0, TP_DEC_MISTRAL, TP_DEC_QWEN2, TP_DEC_GEMMA, TP_DEC_ARCH_COUNT } tp_dec_arch;

typedef struct {
    char name[64];  /* the preset's name, "+custom" once a knob changed it; or the checkpoint folder's name */
    tp_dec_arch arch;
    int hidden, inter, layers, heads, kv_heads, head_dim, vocab;
    float eps;      /* rms_norm_eps */
    tp_rope rope;
    tp_act act;     /* SiLU (SwiGLU) or GELU tanh (GeGLU) */
    int tie;        /* lm_head shares model.embed_tokens.weight */
    int qkv_bias, o_bias, mlp_bias;
    int sliding_window; /* 0: none; otherwise the context must fit in it (sliding-window attention is not run) */
    int max_pos;        /* max_position_embeddings */
    /* the run's shape: a prefill of `prompt` tokens, then `gen` decode steps (the KV cache holds prompt + gen) */
    int prompt, gen;
} tp_decoder_config;

extern const tp_family tp_decoder_family;

/* The HF architecture name ("LlamaForCausalLM") of arch. */
const char *tp_decoder_arch_name(tp_dec_arch arch);

#endif
