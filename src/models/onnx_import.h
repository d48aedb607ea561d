/* onnx_import.h: a model of one of tprof's families, and its parameters, from an ONNX file (issue 24).
 *
 * As llama.cpp maps a checkpoint onto one file per architecture, the import recognizes an architecture in the
 * node list and hands its hyper-parameters and weights to that family (src/models/vit.c, decoder.c): planner,
 * engines and reports stay family-agnostic, and the engine built from the file is the same as the preset's with the
 * same shapes. Recognized, by the input (an image batch or token ids):
 *   - a Llama-style decoder as torch.onnx's dynamo exporter writes transformers' LlamaForCausalLM (Qwen2's q/k/v
 *     biases, Gemma's scaled embedding, (1 + w) RMSNorm and GeGLU too) without a KV cache, token ids (batch, seq) in, every position's logits out (onnx_decoder.c):
 *     embedding Gather, RMSNorm decomposed, q/k/v, RoPE (its inverse frequencies matched to HF's default or llama3
 *     scaling), GQA, causal attention, o_proj, SwiGLU, the LM head (tied when it equals the embedding);
 *   - a timm VisionTransformer as torch.onnx exports it (TorchScript-based at opset 17 and later, or dynamo): Conv
 *     patch embedding, optional class token (Concat with an Expand of a (1, 1, C) initializer), position
 *     embedding (Add of a (1, T, C) initializer), pre-norm blocks of LayerNormalization, the attention subgraph
 *     between a (C, 3C) MatMul + bias and a (C, C) one (the head count read from the Reshape of the qkv output),
 *     a residual Add, LayerNormalization, MatMul + bias, GELU (its Erf form, its Tanh form, or the Gelu op),
 *     MatMul + bias, a residual Add; then LayerNormalization and the class token's Gather, or (global_pool 'avg')
 *     the patch tokens' ReduceMean and LayerNormalization; a Gemm or MatMul head.
 *   - Q/DQ: a weight given as an FLOAT8E4M3FN initializer through DequantizeLinear (per-tensor scale) is read as
 *     its dequantized values; an activation through QuantizeLinear -> DequantizeLinear before a linear is noted
 *     with its scale (tp_onnx_import_info.qdq).
 * Every node must be explained: on the path above, in one block's attention or GELU subgraph, or shape
 * arithmetic (nodes that compute only from Shape outputs and constants). Anything else is an error naming the
 * node ("node 57 'name' (OpType): ..."), never skipped. The mapping is then checked numerically by the caller
 * (bench/onnx_check.h runs the file's own graph against tprof's).
 *
 * Source of the semantics: the ONNX operator specification (onnx.ai/onnx/operators); timm's
 * vision_transformer.py for the architecture. */
#ifndef TP_MODELS_ONNX_IMPORT_H
#define TP_MODELS_ONNX_IMPORT_H

#include <stdint.h>

#include "io/onnx.h"
#include "models/model.h"
#include "tprof.h"

#define TP_ONNX_MAX_QDQ 512

/* One linear's Q/DQ as the file gives it: the weight's per-tensor scale (0: a float weight) and the scale of the
 * QuantizeLinear -> DequantizeLinear pair on its input (0: none), with the element type quantized to. */
typedef struct {
    char layer[TP_NAME_LEN]; /* tprof's layer name: "blocks.3.attn.qkv", "head" */
    float w_scale, x_scale;
    int w_type, x_type; /* ONNX DataType numbers (TP_ONNX_FLOAT8E4M3FN, ...), 0 for none */
    float w_max_code;   /* the weight's largest |E4M3 value| before its scale: 448 where the scale is amax / 448 */
} tp_onnx_qdq;

typedef struct tp_onnx_import_info_s {
    char family[16];     /* "vit" */
    char summary[200];   /* "timm VisionTransformer, TorchScript export (opset 17)" */
    int64_t opset;       /* the default domain's */
    char producer[64];   /* "pytorch 2.15.0" */
    int n_nodes;         /* nodes in the file, every one explained */
    int n_main, n_attention, n_gelu, n_shape; /* how: on the main path, in attention and GELU subgraphs, shape math */
    char batch_dim[64];  /* the input's symbolic batch dimension ("batch"), "" when it is fixed */
    int64_t fixed_batch; /* the input's fixed batch size, 0 when symbolic */
    char seq_dim[64];    /* decoders: the token input's symbolic sequence dimension ("seq"), "" when fixed */
    int64_t fixed_seq;   /* decoders: its fixed length, 0 when symbolic */
    char input_name[64], output_name[64];
    int n_qdq;           /* linears with a quantized weight or input */
    tp_onnx_qdq qdq[TP_ONNX_MAX_QDQ];
} tp_onnx_import_info;

/* Reads path (tp_onnx_load's checks), recognizes the architecture and fills m (its family's configuration; the name
 * is the file's base name) and params (tprof's names and layouts: a MatMul weight (K, N) becomes the Linear's
 * (N, K); float16 and bfloat16 initializers widened; FLOAT8E4M3FN ones through DequantizeLinear multiplied by their
 * scale). info (may be NULL): what was read. The input is an image batch (B, 3, S, S) float32 and the output the
 * logits or features.
 * Errors: the reader's (TP_ERR_IO, TP_ERR_FORMAT, TP_ERR_OOM); TP_ERR_UNSUPPORTED naming the node that falls
 * outside every recognized architecture, or the attribute or element type it cannot take. On error m and params are
 * left empty. */
tp_status tp_onnx_import(const char *path, tp_model *m, tp_params *params, tp_onnx_import_info *info, tp_error *err);
/* The same from a file already read (tp_onnx_load; path names it in errors), so that a caller that also runs it (the
 * import's check) reads it once. The parameters are copies: om may be freed after. */
tp_status tp_onnx_import_model(const tp_onnx_model *om, const char *path, tp_model *m, tp_params *params,
                               tp_onnx_import_info *info, tp_error *err);

#endif
