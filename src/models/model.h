/* model.h: the model-family interface. Everything downstream of src/models (planner, executors, bench, profile,
 * report, lint, engine files, the command line) sees a model only through this header: a tp_model is a family
 * (tp_family: one file under src/models per architecture, in the spirit of llama.cpp's model files) and that
 * family's configuration, opaque to everyone else. A family, from its configuration alone:
 *   - builds the IR graph (ir/graph.h) at a batch size, its layers named with the checkpoint's module paths;
 *   - names and shapes its parameters exactly as the reference implementation's checkpoints do (timm for ViT), so
 *     a safetensors file loads as it is, and synthesizes them with the reference's initialization;
 *   - describes its input (images today; token ids, positions and a KV cache next) and makes it: random, or from
 *     files with the checkpoint's own preprocessing;
 *   - parses its own command-line knobs, reads its checkpoint's config file, and writes and reads its
 *     configuration as JSON (engine files, bench JSON);
 *   - describes its shapes for `tprof lint` and writes the lint's fixes in its own knobs.
 * Adding a family: one file implementing tp_family, and one line in model.c's registry.
 *
 * Parameters: a table of named fp32 master tensors from which every engine derives its own storage (FP16, BF16,
 * FP8 with scales). Row-major; a Linear weight is (out_features, in_features) as in PyTorch. */
#ifndef TP_MODEL_H
#define TP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ir/graph.h"
#include "tprof.h"

typedef struct {
    char name[TP_NAME_LEN];
    int ndim;
    int64_t shape[TP_MAX_DIMS];
    int64_t numel;
    float *data; /* numel fp32 values, row-major; NULL in a table of names and shapes only */
} tp_param;

typedef struct {
    tp_param *params;
    int n_params;
} tp_params;

void tp_params_free(tp_params *p);
int tp_params_find(const tp_params *p, const char *name); /* index or -1 */
size_t tp_params_count(const tp_params *p);                /* total number of values */

/* ---- the family interface ---------------------------------------------------------------------------- */

#define TP_MODEL_CFG_BYTES 4096 /* a family's configuration lives inside tp_model, so models copy by value */

/* TP_INPUT_TOKENS: token ids, stored as fp32 integers (exact below 2^24: vocabularies are checked against it). */
typedef enum { TP_INPUT_IMAGE = 0, TP_INPUT_TOKENS, TP_INPUT_PACKED /* several inputs, one row per sample (graph.h) */ } tp_input_kind;

/* One step of a model with a KV cache (a decoder): `batch` sequences, `tokens` new tokens each at cache positions
 * past .. past + tokens - 1 (past: the position the graph's costs are counted at; the executors take the real one
 * at run time), a cache of kv_len positions; the graph returns the logits of every token (all_logits: (B, T, V))
 * or of the last one ((B, V)). */
typedef struct {
    int64_t batch, tokens, past, kv_len;
    int all_logits;
    /* tensor parallelism: the graph of rank tp_rank of tp_size (0 or 1: the whole model). Its parameters are
     * tp_model_shard_params's for that rank. */
    int tp_rank, tp_size;
} tp_step_shape;

/* How tensor parallelism splits a parameter over the ranks (Megatron-LM's layout, Shoeybi et al. 2019,
 * arXiv:1909.08053, section 3): column-parallel linears (q/k/v, gate/up) split their weight's rows (output
 * features), row-parallel ones (o_proj, down_proj) their weight's columns (input features), each rank taking one
 * contiguous block; a row-parallel linear's bias is added once, by rank 0. */
typedef enum {
    TP_SPLIT_NONE = 0, /* every rank holds the whole tensor (embeddings, norms, the LM head) */
    TP_SPLIT_ROWS,     /* dimension 0 cut into tp_size equal blocks */
    TP_SPLIT_COLS,     /* dimension 1 cut into tp_size equal blocks */
    TP_SPLIT_FIRST     /* rank 0 only */
} tp_split;

/* What the graph's input is, per sample (the batch dimension excluded). */
typedef struct {
    tp_input_kind kind;
    int ndim;
    int64_t shape[TP_MAX_DIMS - 1]; /* image: (3, S, S) fp32, normalized; tokens: (T) ids */
    const char *unit;               /* what one sample is called in throughputs ("image": images/s) */
    char preprocess[384];           /* how files become input, for the summary ("timm eval: shorter side to 248
                                       (bicubic), center crop 224, mean (0.485, ...), std (...); source: ...");
                                       empty if none */
} tp_input_desc;

/* What the graph's output is, per sample. */
typedef struct {
    int ndim;
    int64_t shape[TP_MAX_DIMS - 1]; /* ViT: (classes) logits, or (C) pooled features without a head */
    const char *what;               /* "logits" or "features" */
    int classes;                    /* classification outputs (top-1 is meaningful); 0 for features */
} tp_output_desc;

/* One command-line knob of a family, for parsing and help. */
typedef struct {
    const char *name; /* "--img-size" */
    const char *arg;  /* "N", "X", "token|avg", ...; NULL: a flag without a value */
    const char *help;
} tp_knob;

/* The family-neutral shapes tprof lint's rules read (lint/lint.h). */
#define TP_SHAPES_MAX_GEMMS 8
/* One GEMM shape of the model, per token: Y (M x n) = X (M x k) W^T, M = batch x tokens. */
typedef struct {
    char layer[48]; /* module path with the block index as '*': "blocks.*.attn.qkv" */
    int64_t n, k;
    int kept_high;  /* 1: tprof's default policy keeps it in fp16/bf16 for quantized formats */
} tp_model_gemm;
typedef struct {
    int img_size, patch_size; /* image families: the image and patch sides (0 for other families) */
    int grid, patches;     /* image families: patches per side and in all */
    int extra_tokens;      /* tokens that are not patches (class token) */
    int tokens;            /* attention sequence length T */
    char tokens_how[160];  /* how T comes about, in the family's words */
    int heads, head_dim, embed_dim, mlp_hidden, depth;
    int kv_heads;   /* KV heads (grouped-query attention); heads when every head has its own */
    int packed_qkv; /* 1: attention reads one (B, T, 3, H, D) qkv tensor (ViT); 0: separate q, k, v (decoders) */
    int n_gemms;
    tp_model_gemm gemms[TP_SHAPES_MAX_GEMMS];
} tp_model_shapes;

/* What a lint rule asks the family to fix, with the format's block (elements per scale along K, 0: none) and
 * the multiple the GEMM dims need (mult). */
typedef enum {
    TP_FIX_SEQ_BLOCK = 0, /* T a multiple of block */
    TP_FIX_CLASS_TOKEN,   /* no extra token */
    TP_FIX_HEAD_DIM,      /* head dim a multiple of block */
    TP_FIX_PATCH,         /* the patch divides the image */
    TP_FIX_GEMM_DIMS      /* every GEMM's K and N multiples of mult */
} tp_fix_kind;

typedef struct tp_family {
    const char *name;  /* "vit": the key engine files and JSON store */
    const char *title; /* "Vision Transformer (timm VisionTransformer)" */
    size_t cfg_size;   /* <= TP_MODEL_CFG_BYTES */
    const tp_knob *knobs; /* terminated by a NULL name */
    /* presets: i in 0..n-1; name is the reference's (timm's), alias tprof's short one */
    int (*preset_count)(void);
    void (*preset_info)(int i, const char **name, const char **alias);
    void (*preset_config)(int i, void *cfg);
    const char *(*model_name)(const void *cfg); /* the preset's name, "+custom" appended once a knob changed it */
    tp_status (*validate)(const void *cfg, tp_error *err);
    /* 1: name is this family's knob and was applied (val: its value, NULL for a flag); 0: not a knob of this
     * family; -1: a bad value, with the reason in err (TP_ERR_ARG) */
    int (*knob)(void *cfg, const char *name, const char *val, tp_error *err);
    /* one line: "img 224, patch 16, dim 768, depth 12, heads 12, 197 tokens" */
    void (*describe)(const void *cfg, char *buf, size_t n);
    json_t *(*to_json)(const void *cfg);
    /* strict: every key of to_json present, no other; TP_ERR_FORMAT naming the key ("model: 'depth' is ...") */
    tp_status (*from_json)(const json_t *j, void *cfg, tp_error *err);
    /* the checkpoint's own configuration beside weights_path (timm: config.json), applied to cfg; note receives
     * one line saying what was read, or a warning starting "warning:" when nothing tells the preprocessing */
    tp_status (*checkpoint)(void *cfg, const char *weights_path, char *note, size_t n, tp_error *err);
    /* parameters: names and shapes (data NULL), or synthesized with the reference's initialization (nonzero_bias:
     * biases and norm affines random too, for tests) */
    tp_status (*params_table)(const void *cfg, tp_params *out, tp_error *err);
    tp_status (*params_init)(const void *cfg, uint64_t seed, int nonzero_bias, tp_params *out, tp_error *err);
    /* optional: a checkpoint whose names are not tprof's (openpi's pi0), else NULL (tprof's names, the generic
     * loader); out as params_init's, filled from weights_path */
    tp_status (*params_load)(const void *cfg, const char *weights_path, tp_params *out, tp_error *err);
    tp_status (*build_graph)(const void *cfg, const tp_params *params, int64_t batch, tp_graph *g, tp_error *err);
    /* families with a KV cache: the graph of one step (tp_step_shape); NULL for the others */
    tp_status (*build_step)(const void *cfg, const tp_params *params, const tp_step_shape *step, tp_graph *g,
                            tp_error *err);
    /* tensor parallelism; NULL for families that do not split: tp_check says whether the model splits over n
     * ranks (TP_ERR_UNSUPPORTED naming the size that does not divide), param_split how parameter `name` does */
    tp_status (*tp_check)(const void *cfg, int n, tp_error *err);
    tp_split (*param_split)(const void *cfg, const char *name);
    void (*input)(const void *cfg, tp_input_desc *d);
    void (*output)(const void *cfg, tp_output_desc *d);
    /* fills dst (B, input shape) fp32: from path (files or a folder; desc says what was read) or, path NULL,
     * random from seed (never zeros) */
    tp_status (*make_input)(const void *cfg, int B, uint64_t seed, const char *path, float *dst, char *desc,
                            size_t desc_n, tp_error *err);
    tp_status (*shapes)(const void *cfg, tp_model_shapes *s, tp_error *err);
    void (*fix)(const void *cfg, const tp_model_shapes *s, tp_fix_kind kind, int block, int mult, char *buf,
                size_t n);
    /* optional (NULL: no limit): one line in buf when the run's shape goes past what the model was made for (it
     * runs, outside its training: a decoder's --prompt + --gen beyond max_position_embeddings), else "" */
    void (*limits)(const void *cfg, char *buf, size_t n);
} tp_family;

#define TP_MODEL_LABEL_LEN 64
typedef struct {
    const tp_family *family;
    union {
        long double align;
        unsigned char bytes[TP_MODEL_CFG_BYTES];
    } cfg;
    /* the checkpoint's own name for the model where the family's configuration would name it after a preset or a
     * hash: a Hugging Face hub id ("Qwen/Qwen2.5-0.5B"), a timm architecture; "" otherwise. tp_model_name says it
     * (with "+custom" once a knob changes the shape) and tp_model_to_json writes it as the "name". */
    char label[TP_MODEL_LABEL_LEN];
} tp_model;

/* The registered families, terminated by NULL. */
const tp_family *const *tp_families(void);
const tp_family *tp_family_find(const char *name); /* NULL if unknown */

/* Looks a preset up by name or alias in every family and fills m with its configuration. TP_ERR_ARG naming the
 * model and listing the known ones. */
tp_status tp_model_preset(const char *name, tp_model *m, tp_error *err);
/* The preset's (or "+custom") name. */
const char *tp_model_name(const tp_model *m);
tp_status tp_model_validate(const tp_model *m, tp_error *err);
/* Applies one command-line knob (name "--depth", val its value or NULL for a flag) through the model's family:
 * 1 applied, 0 not a knob of this family, -1 a bad value with the reason in err (TP_ERR_ARG). */
int tp_model_knob(tp_model *m, const char *name, const char *val, tp_error *err);
void tp_model_describe(const tp_model *m, char *buf, size_t n);
void tp_model_input(const tp_model *m, tp_input_desc *d);
void tp_model_output(const tp_model *m, tp_output_desc *d);
/* Values per sample of the input (the product of tp_input_desc.shape). */
int64_t tp_model_input_numel(const tp_model *m);

/* {"family": "vit", <the family's keys>}; NULL when out of memory. */
json_t *tp_model_to_json(const tp_model *m);
/* The inverse. family_default: the family when j has no "family" key (files written before families existed),
 * or NULL to require it. TP_ERR_FORMAT naming the key. */
tp_status tp_model_from_json(const json_t *j, const char *family_default, tp_model *m, tp_error *err);
/* A model described by a JSON file: {"family": "pipeline", <that family's keys, as tp_model_to_json writes
 * them>}, e.g. a pi0-shaped pipeline of other sizes, steps or cameras without code. Errors: the file's
 * (TP_ERR_IO, TP_ERR_FORMAT with line and column) and tp_model_from_json's, prefixed with the path. */
tp_status tp_model_from_file(const char *path, tp_model *m, tp_error *err);

/* The checkpoint's configuration beside weights_path (as tp_family.checkpoint): for the ViT family timm's
 * config.json (io/timm_config.h), whose pretrained_cfg sets the preprocessing field by field under the command
 * line's. note (n bytes) receives one line; it starts with "warning:" when the checkpoint's preprocessing is
 * unknown. Errors: the reader's (TP_ERR_IO, TP_ERR_FORMAT, TP_ERR_UNSUPPORTED, naming the file and field), and
 * TP_ERR_SHAPE where the file contradicts the model (num_classes, global_pool, input_size), naming both values. */
tp_status tp_model_checkpoint(tp_model *m, const char *weights_path, char *note, size_t n, tp_error *err);
/* (A checkpoint in a Hugging Face hub cache's snapshot folder is named by its hub id, not by its hash.) */

/* What the config.json beside weights_path (a folder, or a file in one) says the checkpoint is: transformers'
 * (an "architectures" list or a "model_type": a decoder), timm's (an "architecture" name: a ViT), another JSON
 * object or an unreadable file (OTHER), or no config.json (NONE). */
typedef enum { TP_CKPT_NONE = 0, TP_CKPT_HF, TP_CKPT_TIMM, TP_CKPT_OTHER } tp_ckpt_kind;
tp_ckpt_kind tp_model_checkpoint_kind(const char *weights_path);

/* The model a checkpoint describes, from its config.json alone, no preset named (what tprof does with
 * `--model DIR`): transformers' -> the decoder family, the architecture from "architectures" (Llama, Mistral,
 * Qwen2, Gemma; others refused by name) and every size from the file, the family's run defaults (--prompt,
 * --gen); timm's -> the ViT preset named by "architecture", its "model_args", "num_classes" and "global_pool"
 * applied over it (an architecture that is not a preset: timm's VisionTransformer defaults, which are
 * vit_base_patch16_224's, and model_args; a model_args key tprof's ViT does not build is refused by name); then
 * tp_model_checkpoint (the preprocessing, note). Named by the checkpoint: its hub id in a hub cache, else the
 * decoder's folder or timm's architecture. Errors: TP_ERR_IO (no config.json: the family cannot be told; name a
 * preset with --model PRESET --weights PATH), TP_ERR_UNSUPPORTED (an architecture or key tprof does not build,
 * or a config.json of neither kind), and the readers' (TP_ERR_FORMAT naming the field). */
tp_status tp_model_from_checkpoint(const char *weights_path, tp_model *m, char *note, size_t n, tp_error *err);

/* The run's shape against the model's own limits (tp_family.limits): TP_OK with warn "" within them; beyond them
 * TP_OK with warn (n bytes) a line starting "warning:", or with strict (--strict) TP_ERR_ARG saying the same. */
tp_status tp_model_limits(const tp_model *m, int strict, char *warn, size_t n, tp_error *err);

/* Parameters: names and shapes only (data NULL: enough to build a graph and count FLOP); synthesized from seed;
 * or loaded from a safetensors file, an HF sharded checkpoint (model.safetensors.index.json) or a checkpoint
 * folder holding either (F32/F16/BF16, names and shapes checked against the table: io/hf_config.h
 * tp_hf_load_params).
 * Errors: TP_ERR_ARG (invalid configuration), TP_ERR_OOM, and the loader's. */
tp_status tp_model_params_shapes(const tp_model *m, tp_params *out, tp_error *err);
tp_status tp_model_params_init(const tp_model *m, uint64_t seed, int nonzero_bias, tp_params *out, tp_error *err);
tp_status tp_model_params_load(const tp_model *m, const char *path, tp_params *out, tp_error *err);
/* The generic loader: the checkpoint by tprof's own parameter names (what tp_model_params_load does for a family
 * without a loader of its own). */
tp_status tp_model_params_load_names(const tp_model *m, const char *path, tp_params *out, tp_error *err);

/* Non-finite (NaN, Inf) values in loaded parameters (path: where they came from, for the message): 0 when every
 * value is finite; else the number of tensors holding some, with a one-line message naming the first one, its
 * count and the tensors' total in *err (code TP_ERR_FORMAT): the caller refuses the weights or warns. */
int tp_params_nonfinite(const tp_params *p, const char *path, tp_error *err);

/* Builds the forward graph at batch B (input: B x the input shape, fp32 -> the model's output). */
tp_status tp_model_build_graph(const tp_model *m, const tp_params *params, int64_t B, tp_graph *g, tp_error *err);
/* The graph of one step of a model with a KV cache (prefill: tokens = the prompt, past 0; decode: tokens 1 at
 * past = the cached positions). Errors: TP_ERR_UNSUPPORTED (a family without a cache, named), TP_ERR_ARG (batch,
 * tokens or past out of range, past + tokens > kv_len). */
tp_status tp_model_build_step(const tp_model *m, const tp_params *params, const tp_step_shape *step, tp_graph *g,
                              tp_error *err);

/* Tensor parallelism over n ranks. tp_model_tp_check: TP_ERR_UNSUPPORTED when the family does not split or the
 * model's heads, KV heads or MLP width are not multiples of n (naming which). tp_model_shard_params: rank's part
 * of full (every parameter as tp_family.param_split says; names kept, shapes cut; a table without data gives one
 * without data). Errors: the check's, TP_ERR_ARG (rank outside [0, n)), TP_ERR_OOM. */
tp_status tp_model_tp_check(const tp_model *m, int n, tp_error *err);
tp_status tp_model_shard_params(const tp_model *m, const tp_params *full, int rank, int n, tp_params *out,
                                tp_error *err);
/* Every rank's parameters at once: out[0..n-1] as tp_model_shard_params gives them, the tensors copied in parallel
 * (OpenMP). release: each full tensor's data freed once its shards exist (full keeps its names and shapes), so a
 * model near the host's memory is split without a second copy. Errors: as tp_model_shard_params; n < 1 is
 * TP_ERR_ARG; on an error every out[r] is empty, and with release the tensors already split have lost their values
 * in full too (the caller gives up the model). */
tp_status tp_model_shard_all(const tp_model *m, tp_params *full, int n, int release, tp_params *out, tp_error *err);
/* The threads tp_model_shard_all copies with: enough for the host's memory bandwidth, few enough that the tensors
 * in flight (each whole and in shards at once) stay a small part of a large model's host memory. */
#define TP_SHARD_THREADS 16

/* The input of B samples into dst (B x tp_model_input_numel fp32, row-major; for images (B, 3, S, S) normalized):
 * from path (an image file repeated over the batch, or a folder's images cycled; desc says what was read) with the
 * model's preprocessing, or, path NULL, random from seed (pixels U[0, 1) normalized: never zeros). Errors:
 * TP_ERR_IO (missing file or empty folder), TP_ERR_FORMAT (not a decodable image), TP_ERR_ARG (bad
 * preprocessing). */
tp_status tp_model_make_input(const tp_model *m, int B, uint64_t seed, const char *path, float *dst, char *desc,
                              size_t desc_n, tp_error *err);

#endif
