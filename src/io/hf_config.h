/* hf_config.h: Hugging Face transformers checkpoints of decoder language models: config.json, and the weights
 * as one model.safetensors or sharded (model.safetensors.index.json: {"metadata": {...}, "weight_map":
 * {tensor name: shard file}}), as PreTrainedModel.save_pretrained writes them.
 *
 * config.json (transformers PretrainedConfig.to_json_file) holds the architecture in "architectures" (e.g.
 * ["LlamaForCausalLM"]) and "model_type", the sizes (hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim, vocab_size), rms_norm_eps, the activation (hidden_act;
 * Gemma's legacy "gelu" means the tanh approximation, as GemmaConfig.__post_init__ says), tie_word_embeddings,
 * attention_bias and mlp_bias, sliding_window (and Qwen2's use_sliding_window, max_window_layers, layer_types),
 * max_position_embeddings, and the rotary embedding: transformers 5's "rope_parameters" {"rope_type",
 * "rope_theta", "partial_rotary_factor", "factor", ...} or the older top-level "rope_theta",
 * "partial_rotary_factor" and "rope_scaling" {"rope_type" (or "type"), "factor", "low_freq_factor",
 * "high_freq_factor", "original_max_position_embeddings"}; transformers 5 still reads the older fields, and
 * hf_config.c says in which order. Other keys are ignored (token ids, torch_dtype, use_cache, ...). */
#ifndef TP_HF_CONFIG_H
#define TP_HF_CONFIG_H

#include <stddef.h>

#include "io/safetensors.h"
#include "ir/graph.h"
#include "tprof.h"

typedef struct {
    char architecture[64]; /* architectures[0], "" if absent */
    char model_type[32];   /* "llama", "mistral", "qwen2", "gemma"; "" if absent */
    /* -1 when absent (the family fills HF's default for the architecture) */
    int hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim;
    int vocab_size, max_position_embeddings, sliding_window; /* sliding_window: 0 when null */
    int use_sliding_window, max_window_layers;               /* Qwen2's switch and first sliding layer; -1 absent */
    int sliding_layers;     /* layer_types entries "sliding_attention"; -1 without layer_types */
    int tie_word_embeddings, attention_bias, mlp_bias;      /* -1 absent, else 0/1 */
    double rms_norm_eps;                                     /* NAN when absent */
    double query_pre_attn_scalar;                            /* Gemma 2's; NAN when absent or null */
    char hidden_act[32];                                     /* "" when absent */
    int has_rope;                                            /* rope_theta given (rope.theta), at either place */
    tp_rope rope;                                            /* type TP_ROPE_DEFAULT unless scaled */
} tp_hf_config;

/* Reads config.json at path into *out (written only on success).
 * Errors, one line starting with the path, naming the field and its value:
 *   TP_ERR_IO           missing or unreadable;
 *   TP_ERR_FORMAT       not JSON, not an object, a field of the wrong type or out of range (sizes positive
 *                       integers, eps a positive number, booleans true/false), layer_types not one entry per
 *                       layer, a llama3 rotary embedding missing a parameter;
 *   TP_ERR_UNSUPPORTED  what would change the model and tprof does not implement: a quantization_config
 *                       (pre-quantized checkpoints), a rope type other than default and llama3 (linear, dynamic,
 *                       yarn, longrope, ... named), rotary parameters per layer type, partial_rotary_factor other
 *                       than 1 (at either place), layer_types other than full_attention and sliding_attention,
 *                       attention or final logit soft-capping, bidirectional attention. */
tp_status tp_hf_config_read(const char *path, tp_hf_config *out, tp_error *err);

/* The checkpoint folder of weights_path (a folder itself, or the folder holding the file) into dir (n bytes).
 * Returns 0, or -1 when it does not fit. */
int tp_hf_checkpoint_dir(const char *weights_path, char *dir, size_t n);

/* Loads the expected parameters (as tp_st_load_params) from an HF checkpoint: weights_path is a .safetensors
 * file, a model.safetensors.index.json, or a folder holding model.safetensors or model.safetensors.index.json.
 * A sharded checkpoint is checked as one file: every expected tensor must be in the index's weight_map, the
 * index must name no other tensor, and each shard must hold exactly the tensors the index maps to it.
 * Errors: those of tp_st_load_params, naming the shard; TP_ERR_IO (no weights in the folder); TP_ERR_FORMAT (an
 * index that is not JSON, lacks weight_map, maps a tensor to a non-string or to a path with '/' or ".."). */
tp_status tp_hf_load_params(const char *weights_path, const tp_param_spec *specs, int n_specs, tp_error *err);

#endif
