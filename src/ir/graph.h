/* graph.h: tprof's IR. A model is built once as a graph of ops over values; both executors (CPU reference,
 * CUDA) run the same graph, and the planner annotates it with the precision each op executes in.
 *
 * Values are tensors: the graph input (images), parameters (a model's named weights) and activations.
 * Shapes are logical and row-major; the storage type of each value is decided by the planner, not here.
 * Every op carries its layer name (the model's module path, e.g. timm's "blocks.3.mlp.fc1") and its FLOP
 * count at the graph's batch size, so profiles and reports can be mapped back to the model. */
#ifndef TP_GRAPH_H
#define TP_GRAPH_H

#include <stdint.h>

#include "tprof.h"

#define TP_MAX_DIMS 4
#define TP_OP_MAX_IN 6
#define TP_NAME_LEN 96
#define TP_MAX_INPUTS 8
#define TP_MAX_TAPS 64

/* TP_VAL_STATE: an activation whose buffer outlives one run of the graph (a KV cache): the executor allocates it
 * once per session, its producer writes part of it in place (the rows of this step's tokens), and later runs,
 * of this graph or of another graph of the same model (prefill, then decode), read what earlier runs wrote. A
 * state value is identified across graphs by its name and shape. */
typedef enum { TP_VAL_INPUT = 0, TP_VAL_PARAM, TP_VAL_ACT, TP_VAL_STATE } tp_value_kind;

typedef struct {
    char name[TP_NAME_LEN];
    tp_value_kind kind;
    int ndim;
    int64_t shape[TP_MAX_DIMS];
    int producer;    /* op index; -1 for inputs and parameters */
    int param_index; /* index into the model's parameter table (TP_VAL_PARAM), else -1 */
} tp_value;

typedef enum {
    TP_OP_PATCH_EMBED = 0, /* in: image (B,3,H,W), weight (C,3,P,P), bias (C) -> (B, Np, C): im2col + GEMM */
    TP_OP_EMBED_TOKENS,    /* in: patches (B,Np,C), pos (1,T,C), [cls (1,1,C)] -> (B, T, C) */
    TP_OP_LAYERNORM,       /* in: x (..., C), weight (C), bias (C) -> same shape */
    TP_OP_LINEAR,          /* in: x (..., K), weight (N, K), [bias (N)] -> (..., N) */
    TP_OP_ATTENTION,       /* in: qkv (B, T, 3*H*D) -> (B, T, H*D); softmax(scale Q K^T) V per head */
    TP_OP_GELU,            /* in: x -> same shape */
    TP_OP_ADD,             /* in: a, b (same shape) -> same shape (residual) */
    TP_OP_POOL,            /* in: x (B, T, C) -> (B, C): class token, mean of the non-prefix tokens, or last token */
    /* decoders (the cache-position semantics: see tp_graph.past) */
    TP_OP_TOKEN_EMBED,     /* in: ids (B, T) (integers stored as fp32), table (V, C) -> (B, T, C) = table[id] * scale */
    TP_OP_RMSNORM,         /* in: x (..., C), weight (C) -> x / sqrt(mean(x^2) + eps) * (norm_offset + weight) */
    TP_OP_ROPE,            /* in: x (B, T, H*D), [offset (B, 1)] -> same: rotary position embedding of each head,
                              positions past + t (with offset: + prefix + offset[b], a per-sample start) */
    TP_OP_GLU,             /* in: gate, up (same shape) -> act(gate) * up (SwiGLU: SiLU; GeGLU: GELU tanh) */
    TP_OP_KV_APPEND,       /* in: k, v (B, T, Hkv*D) -> the KV cache (2, B, L, Hkv*D), a state value: rows
                              past .. past+T-1 of K (index 0) and V (index 1) written, the others kept */
    TP_OP_KV_ATTENTION,    /* in: q (B, T, H*D), cache (2, B, L, Hkv*D) -> (B, T, H*D): causal GQA attention of
                              the T queries over the past + T cached keys */
    /* tensor parallelism (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053): one graph per rank */
    TP_OP_ALL_REDUCE,      /* in: x (...) -> same: the sum of x over the graph's tp_size ranks, every rank
                              receiving it (after a row-parallel linear: o_proj, down_proj) */
    /* pipelines (issue 21: pi0's stages in one graph; docs/pipelines.md) */
    TP_OP_RESHAPE,         /* in: x -> the same values in another shape (row-major, same numel) */
    TP_OP_CONCAT,          /* in: a (B, Ta, C), b (B, Tb, C) -> (B, Ta + Tb, C): a's tokens, then b's */
    TP_OP_SLICE,           /* in: x (B, T, C) -> (B, n, C): tokens prefix .. prefix + n - 1 */
    TP_OP_SILU,            /* in: x -> x sigmoid(x) */
    TP_OP_TIME_CONCAT,     /* in: x (B, T, C) -> (B, T, C + D): x, then the sinusoidal embedding of the time
                              `scale` (openpi's: sin then cos of t 2 pi / period, period 4e-3 (4 / 4e-3)^f,
                              f = linspace(0, 1, D / 2)) on every token */
    TP_OP_EULER,           /* in: x, v (same shape) -> x + scale v (a flow-matching Euler step, scale = dt) */
    TP_OP_MASKED_ATTENTION,/* in: q (B, Tq, H*D), k, v (B, Tk, Hkv*D), [kp, vp (B, Tp, Hkv*D)], valid (B, 1) ->
                              (B, Tq, H*D): GQA attention over [kp, vp ; k, v] (without kp: over k, v). The keys
                              of the padded source (kp, else k) beyond prefix + valid[b] are masked; with
                              pool_mode 1 the first query sees its own first key only (pi0's state token) */
    TP_OP_KIND_COUNT
} tp_op_kind;

/* The activation of a gated MLP (TP_OP_GLU). */
typedef enum { TP_ACT_SILU = 0, TP_ACT_GELU_TANH } tp_act;
const char *tp_act_name(tp_act a); /* "silu", "gelu_tanh" */

/* Rotary position embedding (Su et al. 2021, RoFormer) as HF transformers applies it (rotate_half: dimension i
 * pairs with i + D/2). TP_ROPE_LLAMA3 rescales the frequencies as Llama 3.1 does (HF modeling_rope_utils
 * _compute_llama3_parameters: factor, low_freq_factor, high_freq_factor, original_max_position_embeddings). */
typedef enum { TP_ROPE_DEFAULT = 0, TP_ROPE_LLAMA3 } tp_rope_type;
typedef struct {
    tp_rope_type type;
    double theta;                       /* rope_theta (base) */
    double factor, low_freq, high_freq; /* llama3 */
    int orig_ctx;                       /* llama3: original_max_position_embeddings */
} tp_rope;

/* The D/2 inverse frequencies of head dim D (even), in fp32 exactly as HF computes them in fp32 (1 / theta^(2i/D),
 * then the llama3 rescaling), so that the angles pos * inv_freq[i] match the reference implementation's. */
void tp_rope_inv_freq(const tp_rope *r, int head_dim, float *inv_freq);

/* pi0's time embedding of t (openpi's create_sinusoidal_pos_embedding with min period 4e-3 and max period 4), the
 * constant a TIME_CONCAT op puts beside every row: e[i] = sin(t 2 pi / p_i), e[D/2 + i] = cos(...), p_i = 4e-3
 * (4 / 4e-3)^(i / (D/2 - 1)) for i < D/2, computed in float64 and rounded to fp32 once, as openpi does. D even. */
void tp_time_embedding(double t, int64_t D, float *e);

typedef struct {
    tp_op_kind kind;
    char layer[TP_NAME_LEN]; /* model module path; for ops without a module (add) a descriptive path */
    int in[TP_OP_MAX_IN];
    int n_in;
    int out;
    /* attributes */
    float eps;          /* LayerNorm */
    int heads, head_dim; /* attention */
    float scale;        /* attention: multiplies Q K^T */
    int pool_mode;      /* 0 token, 1 avg */
    int prefix;         /* tokens excluded by avg pooling (class token) */
    int patch;          /* patch embedding: P */
    int kv_heads;       /* KV attention: Hkv (H % Hkv == 0; grouped-query attention when Hkv < H) */
    float norm_offset;  /* RMSNorm: 0 (Llama: x_hat * w) or 1 (Gemma: x_hat * (1 + w)) */
    tp_act act;         /* GLU */
    int gelu_tanh;      /* GELU: 1 the model's GELU is the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
                           (timm's gelu_tanh, SigLIP), 0 the exact erf form */
    tp_rope rope;       /* RoPE */
    /* costs at the graph's batch size */
    int64_t gemm_m, gemm_n, gemm_k; /* the GEMM view of LINEAR and PATCH_EMBED (M rows, N out, K reduction) */
    double flop;        /* floating-point operations; a multiply-add is 2 FLOP */
    double matmul_flop; /* the part of flop done by matrix products (GEMMs, Q K^T, P V) */
} tp_op;

/* A value a stage hands on, kept for the accuracy drift per stage (issue 21): a pipeline taps its image tokens, its
 * prefix's K and V of every layer, each denoise step's state; the executors copy it out as they make it
 * (tp_cpu_run_taps, tp_engine_capture), and the bench compares an engine's taps with the FP32 reference's, the
 * values of one stage label pooled into one cosine and relative L2. */
typedef struct {
    int value;
    char stage[40]; /* the label the drift table shows ("vision: image tokens", "prefix: K, V cache") */
} tp_tap;

typedef struct {
    tp_value *values;
    int n_values, cap_values;
    tp_op *ops;
    int n_ops, cap_ops;
    int input;  /* value id of the (first) input (images, or token ids) */
    /* every input value, in the order the family added them: a graph of several inputs (a pipeline's images,
     * token ids, state, noise) takes them packed per sample: sample b's row of the executors' input holds each
     * input's b-th slice (its numel / shape[0] values) in this order (tp_graph_input_layout). n_inputs 1: the row
     * is the one input's, as it always was. Every input's dimension 0 is the batch. */
    int inputs[TP_MAX_INPUTS];
    int n_inputs;
    int output; /* value id of the model output (logits, or features when there is no head) */
    int64_t batch;
    /* graphs with a KV cache (decoders): one step processes `tokens` new tokens per sequence at cache positions
     * past .. past + tokens - 1, the cache holding kv_len positions. The executor supplies past at run time
     * (the same graph replays at every decode step); the graph's `past` is the position its FLOP and bytes are
     * counted at. 0, 0, 0 for graphs without a cache. */
    int64_t tokens, past, kv_len;
    /* tensor parallelism: this graph is rank tp_rank's shard of a model split over tp_size GPUs (its heads and MLP
     * columns; the all-reduce ops join the partial sums); 0, 0 (or 0, 1) for a whole model */
    int tp_rank, tp_size;
    tp_tap taps[TP_MAX_TAPS]; /* in the order added; values of one stage label added together */
    int n_taps;
} tp_graph;

const char *tp_op_kind_name(tp_op_kind k);
/* 1 for the pipeline ops (RESHAPE, CONCAT, SLICE, SILU, TIME_CONCAT, EULER, MASKED_ATTENTION: pi0's, issue 21),
 * which each executor runs through one function of its own. */
int tp_op_kind_pipeline(tp_op_kind k);
/* The length of a layer name's stage: its first component before a dot ("vision" of "vision.blocks.0.attn"), 0 when
 * it has none. A pipeline names every op by its stage; the modular engine and the profile's stage rows split on it. */
size_t tp_layer_stage_len(const char *layer);

/* The packed per-sample input row of g (tp_graph.inputs): its length in values, and if off is non-NULL each
 * input's offset within the row (off[k] for g->inputs[k]). */
int64_t tp_graph_input_layout(const tp_graph *g, int64_t *off);

/* What kind of work a kernel does, for profiles: each op kind has one (tp_op_category); kernels an op launches
 * besides its main one (quantize, im2col) name their own. */
typedef enum {
    TP_CAT_GEMM = 0,
    TP_CAT_ATTENTION,
    TP_CAT_NORM,        /* LayerNorm, RMSNorm */
    TP_CAT_ACTIVATION,  /* GELU, SiLU */
    TP_CAT_ELEMENTWISE, /* residual add, token embedding, pooling */
    TP_CAT_QUANT,       /* standalone quantize / dequantize, amax */
    TP_CAT_CONVERT,     /* format conversion: layout (im2col), cast, reformat */
    TP_CAT_MEMORY,      /* memcpy, memset */
    TP_CAT_OTHER,
    TP_CAT_COMM,        /* collective communication between GPUs (NCCL all-reduce) */
    TP_CAT_COUNT
} tp_category;

const char *tp_category_name(tp_category c); /* "GEMM", "attention", "normalization", ... */
/* Parses a name from tp_category_name; -1 if unknown. */
int tp_category_parse(const char *s);
/* The category of op kind k's main kernel: GEMM for linear and patch embedding, attention, norm, ... */
tp_category tp_op_category(tp_op_kind k);

void tp_graph_init(tp_graph *g, int64_t batch);
void tp_graph_free(tp_graph *g);
/* Adds a value; returns its id. ndim <= TP_MAX_DIMS. */
int tp_graph_add_value(tp_graph *g, const char *name, tp_value_kind kind, int ndim, const int64_t *shape,
                       int param_index);
/* Adds an op whose inputs are ids in `in`; creates its output value named "<layer>.out" (or out_name) with
 * the given shape, fills FLOP counts from the op kind and shapes; returns the op index. */
int tp_graph_add_op(tp_graph *g, const tp_op *proto, const int *in, int n_in, int out_ndim,
                    const int64_t *out_shape, const char *out_name);

/* g[0..n) are ranks 0..n-1 of one model step (n = 1: one whole-model graph): each graph's tp_rank and tp_size, the
 * same ops of the same kinds, batch, tokens and cache. A rank's graph alone would sum its partial results with
 * nothing. TP_ERR_ARG naming the first graph that is not. */
tp_status tp_graph_check_ranks(const tp_graph *const *g, int n, tp_error *err);

/* Taps value v (an activation) under the stage label `stage` (tp_tap); at most TP_MAX_TAPS (a broken invariant
 * beyond: the families tap a fixed few). */
void tp_graph_tap(tp_graph *g, int v, const char *stage);

/* Marks value v (an op's output) as state (TP_VAL_STATE). */
void tp_graph_mark_state(tp_graph *g, int v);

/* The output value id of op i (a function, not g->ops[...], because adding an op may move g->ops). */
int tp_graph_op_out(const tp_graph *g, int i);
int64_t tp_value_numel(const tp_value *v);
/* Total FLOP and matrix-product FLOP of the graph (one forward pass at g->batch). */
double tp_graph_flop(const tp_graph *g);
double tp_graph_matmul_flop(const tp_graph *g);
/* How many op inputs read value v (an op reading it twice counts twice). */
int tp_value_readers(const tp_graph *g, int v);
/* Index of the op that consumes value v last (-1 if none): used to free or reuse buffers. */
void tp_graph_last_use(const tp_graph *g, int *last_use /* n_values */);

#endif
