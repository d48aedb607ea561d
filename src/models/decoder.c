/* decoder.c: the decoder family (decoder.h): presets, HF config.json, parameters with HF names, the prefill and
 * decode graphs. */
#include "models/decoder.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/rng.h"
#include "core/util.h"
#include "io/hf_config.h"
#include "io/tokens.h"
#include "models/builder.h"

static const char *const ARCH_NAMES[TP_DEC_ARCH_COUNT] = {"LlamaForCausalLM", "MistralForCausalLM",
                                                          "Qwen2ForCausalLM", "GemmaForCausalLM"};
static const char *const MODEL_TYPES[TP_DEC_ARCH_COUNT] = {"llama", "mistral", "qwen2", "gemma"};

const char *tp_decoder_arch_name(tp_dec_arch a) { return (unsigned)a < TP_DEC_ARCH_COUNT ? ARCH_NAMES[a] : "?"; }

/* The presets: the shapes of the public checkpoints' config.json (Hugging Face hub, repository in the comment). */
typedef struct {
    const char *name, *alias;
    tp_dec_arch arch;
    int hidden, inter, layers, heads, kv_heads, head_dim, vocab;
    float eps;
    double theta;
    int llama3; /* llama3 rope scaling with this factor (low 1, high 4, original context 8192) */
    int tie, max_pos;
} preset;

static const preset PRESETS[] = {
    /* meta-llama/Llama-3.2-1B */
    {"Llama-3.2-1B", "llama-3.2-1b", TP_DEC_LLAMA, 2048, 8192, 16, 32, 8, 64, 128256, 1e-5f, 500000, 32, 1, 131072},
    /* meta-llama/Llama-3.1-8B */
    {"Llama-3.1-8B", "llama-3.1-8b", TP_DEC_LLAMA, 4096, 14336, 32, 32, 8, 128, 128256, 1e-5f, 500000, 8, 0, 131072},
    /* meta-llama/Llama-3.1-70B (141 GB in fp16: more than one H100 or H200 holds; for --tp 4 or 8) */
    {"Llama-3.1-70B", "llama-3.1-70b", TP_DEC_LLAMA, 8192, 28672, 80, 64, 8, 128, 128256, 1e-5f, 500000, 8, 0, 131072},
    /* meta-llama/Llama-2-7b-hf */
    {"Llama-2-7b-hf", "llama-2-7b", TP_DEC_LLAMA, 4096, 11008, 32, 32, 32, 128, 32000, 1e-5f, 10000, 0, 0, 4096},
    /* mistralai/Mistral-7B-v0.3 */
    {"Mistral-7B-v0.3", "mistral-7b", TP_DEC_MISTRAL, 4096, 14336, 32, 32, 8, 128, 32768, 1e-5f, 1e6, 0, 0, 32768},
    /* Qwen/Qwen2.5-0.5B */
    {"Qwen2.5-0.5B", "qwen2.5-0.5b", TP_DEC_QWEN2, 896, 4864, 24, 14, 2, 64, 151936, 1e-6f, 1e6, 0, 1, 32768},
    /* Qwen/Qwen2.5-7B */
    {"Qwen2.5-7B", "qwen2.5-7b", TP_DEC_QWEN2, 3584, 18944, 28, 28, 4, 128, 152064, 1e-6f, 1e6, 0, 0, 131072},
    /* google/gemma-2b */
    {"gemma-2b", "gemma-2b", TP_DEC_GEMMA, 2048, 16384, 18, 8, 1, 256, 256000, 1e-6f, 10000, 0, 1, 8192},
    /* tprof's own, for tests on the CPU: GQA (4 heads over 2), llama3 rope, odd sizes */
    {"llama-tiny", "llama-tiny", TP_DEC_LLAMA, 64, 176, 2, 4, 2, 16, 384, 1e-5f, 500000, 32, 0, 2048},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

#define DEFAULT_PROMPT 128
#define DEFAULT_GEN 128

/* HF's per-architecture choices that config.json does not always spell out */
static void arch_defaults(tp_decoder_config *c) {
    c->act = c->arch == TP_DEC_GEMMA ? TP_ACT_GELU_TANH : TP_ACT_SILU;
    c->qkv_bias = c->arch == TP_DEC_QWEN2;
    c->o_bias = c->mlp_bias = 0;
    c->sliding_window = 0;
}

static void from_preset(const preset *p, tp_decoder_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", p->name);
    c->arch = p->arch;
    c->hidden = p->hidden;
    c->inter = p->inter;
    c->layers = p->layers;
    c->heads = p->heads;
    c->kv_heads = p->kv_heads;
    c->head_dim = p->head_dim;
    c->vocab = p->vocab;
    c->eps = p->eps;
    c->rope.theta = p->theta;
    if (p->llama3) c->rope = (tp_rope){TP_ROPE_LLAMA3, p->theta, p->llama3, 1.0, 4.0, 8192};
    c->tie = p->tie;
    c->max_pos = p->max_pos;
    arch_defaults(c);
    c->prompt = DEFAULT_PROMPT;
    c->gen = DEFAULT_GEN;
}

static tp_status validate(const void *cfg, tp_error *err) {
    const tp_decoder_config *c = cfg;
    if ((unsigned)c->arch >= TP_DEC_ARCH_COUNT) return tp_fail(err, TP_ERR_ARG, "%s: unknown architecture", c->name);
    if (c->hidden <= 0 || c->inter <= 0 || c->layers <= 0 || c->heads <= 0 || c->kv_heads <= 0 || c->head_dim <= 0 ||
        c->vocab <= 0)
        return tp_fail(err, TP_ERR_ARG, "%s: sizes must be positive (hidden %d, intermediate %d, layers %d, heads %d, "
                       "kv heads %d, head dim %d, vocab %d)", c->name, c->hidden, c->inter, c->layers, c->heads,
                       c->kv_heads, c->head_dim, c->vocab);
    if (c->heads % c->kv_heads)
        return tp_fail(err, TP_ERR_ARG, "%s: %d attention heads are not a multiple of %d KV heads", c->name, c->heads,
                       c->kv_heads);
    if (c->head_dim % 2) return tp_fail(err, TP_ERR_ARG, "%s: head dim %d: RoPE needs it even", c->name, c->head_dim);
    if (c->vocab > (1 << 24))
        return tp_fail(err, TP_ERR_ARG, "%s: vocabulary %d above 2^24: token ids are carried as fp32", c->name, c->vocab);
    if (!(c->eps > 0) || !(c->rope.theta > 0)) return tp_fail(err, TP_ERR_ARG, "%s: eps and rope theta must be positive", c->name);
    if (c->prompt <= 0 || c->gen < 0)
        return tp_fail(err, TP_ERR_ARG, "--prompt %d --gen %d: the prompt must be positive, gen >= 0", c->prompt, c->gen);
    const int ctx = c->prompt + c->gen;
    if (c->sliding_window > 0 && ctx > c->sliding_window)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: context %d (--prompt %d + --gen %d) exceeds the sliding window %d; "
                       "tprof attends to the whole context, so past the window it would compute another model: "
                       "keep --prompt + --gen <= %d", c->name, ctx, c->prompt, c->gen, c->sliding_window,
                       c->sliding_window);
    return TP_OK;
}

/* ---- parameters ---------------------------------------------------------------------------------------- */

/* HF _init_weights: Linear and Embedding normal(0, initializer_range 0.02), biases 0; RMSNorm weight 1 (Gemma's
 * 1 + w: 0). */
typedef enum { INIT_NORMAL02 = 0, INIT_ZERO, INIT_NORM } init_kind;

static tp_status build_table(const tp_decoder_config *c, tp_params *out, int **init, int alloc, tp_error *err) {
    tp_param_builder b = {out, NULL, 0, alloc};
    memset(out, 0, sizeof *out);
    const int64_t C = c->hidden, I = c->inter, QD = (int64_t)c->heads * c->head_dim;
    const int64_t KD = (int64_t)c->kv_heads * c->head_dim;
    char name[TP_NAME_LEN];
    int bad = tp_pb_add(&b, "model.embed_tokens.weight", INIT_NORMAL02, 2, c->vocab, C, 0, 0);
    for (int i = 0; i < c->layers && !bad; i++) {
#define P(suffix, kind, nd, d0, d1)                                     \
    snprintf(name, sizeof name, "model.layers.%d.%s", i, suffix);      \
    bad |= tp_pb_add(&b, name, kind, nd, d0, d1, 0, 0);
        P("input_layernorm.weight", INIT_NORM, 1, C, 0);
        P("self_attn.q_proj.weight", INIT_NORMAL02, 2, QD, C);
        if (c->qkv_bias) { P("self_attn.q_proj.bias", INIT_ZERO, 1, QD, 0); }
        P("self_attn.k_proj.weight", INIT_NORMAL02, 2, KD, C);
        if (c->qkv_bias) { P("self_attn.k_proj.bias", INIT_ZERO, 1, KD, 0); }
        P("self_attn.v_proj.weight", INIT_NORMAL02, 2, KD, C);
        if (c->qkv_bias) { P("self_attn.v_proj.bias", INIT_ZERO, 1, KD, 0); }
        P("self_attn.o_proj.weight", INIT_NORMAL02, 2, C, QD);
        if (c->o_bias) { P("self_attn.o_proj.bias", INIT_ZERO, 1, C, 0); }
        P("post_attention_layernorm.weight", INIT_NORM, 1, C, 0);
        P("mlp.gate_proj.weight", INIT_NORMAL02, 2, I, C);
        if (c->mlp_bias) { P("mlp.gate_proj.bias", INIT_ZERO, 1, I, 0); }
        P("mlp.up_proj.weight", INIT_NORMAL02, 2, I, C);
        if (c->mlp_bias) { P("mlp.up_proj.bias", INIT_ZERO, 1, I, 0); }
        P("mlp.down_proj.weight", INIT_NORMAL02, 2, C, I);
        if (c->mlp_bias) { P("mlp.down_proj.bias", INIT_ZERO, 1, C, 0); }
#undef P
    }
    bad |= tp_pb_add(&b, "model.norm.weight", INIT_NORM, 1, C, 0, 0, 0);
    if (!c->tie) bad |= tp_pb_add(&b, "lm_head.weight", INIT_NORMAL02, 2, c->vocab, C, 0, 0);
    if (bad) {
        tp_params_free(out);
        free(b.init);
        return tp_fail(err, TP_ERR_OOM, "out of host memory for the parameters of %s", c->name);
    }
    if (init) *init = b.init;
    else free(b.init);
    return TP_OK;
}

static tp_status params_table(const void *cfg, tp_params *out, tp_error *err) {
    tp_status s = validate(cfg, err);
    return s ? s : build_table(cfg, out, NULL, 0, err);
}

static tp_status params_init(const void *cfg, uint64_t seed, int nonzero_bias, tp_params *out, tp_error *err) {
    const tp_decoder_config *c = cfg;
    int *init = NULL;
    tp_status s = build_table(c, out, &init, 1, err);
    if (s) return s;
    const double norm_one = c->arch == TP_DEC_GEMMA ? 0.0 : 1.0;
    /* value j of a tensor is a function of its name and j (core/rng.h's counter-based draws): every tensor is
     * filled by all threads (an 8B model's 16 GB of masters in about a second on 16 cores) */
    for (int i = 0; i < out->n_params; i++) {
        tp_param *t = &out->params[i];
        const uint64_t key = tp_ctr_key(seed, t->name);
        switch ((init_kind)init[i]) {
        case INIT_NORMAL02: tp_ctr_fill_normal(t->data, t->numel, key, 0.02, 0.0); break;
        case INIT_ZERO:
            if (nonzero_bias) tp_ctr_fill_normal(t->data, t->numel, key, 0.05, 0.0);
            else memset(t->data, 0, sizeof(float) * (size_t)t->numel);
            break;
        case INIT_NORM:
            if (nonzero_bias) tp_ctr_fill_normal(t->data, t->numel, key, 0.1, norm_one);
            else
                for (int64_t j = 0; j < t->numel; j++) t->data[j] = (float)norm_one;
            break;
        }
    }
    free(init);
    return TP_OK;
}

/* ---- the graph ----------------------------------------------------------------------------------------- */

static int rmsnorm(tp_graph_builder *b, const tp_decoder_config *c, const char *layer, int x, int ndim,
                   const int64_t *shape) {
    tp_op op = {.kind = TP_OP_RMSNORM, .eps = c->eps, .norm_offset = c->arch == TP_DEC_GEMMA ? 1.0f : 0.0f};
    const int in[2] = {x, tp_gb_param(b, layer, "weight")};
    return tp_gb_op(b, &op, layer, in, 2, ndim, shape, NULL);
}

static int rope(tp_graph_builder *b, const tp_decoder_config *c, const char *layer, int x, int heads,
                const int64_t *shape) {
    tp_op op = {.kind = TP_OP_ROPE, .heads = heads, .head_dim = c->head_dim, .rope = c->rope};
    return tp_gb_op(b, &op, layer, &x, 1, 3, shape, NULL);
}

/* The partial sums of a row-parallel linear (o_proj, down_proj) over the ranks: x itself without tensor
 * parallelism */
static int all_reduce(tp_graph_builder *b, const char *layer, int x, int n, const int64_t *shape) {
    if (n <= 1) return x;
    tp_op op = {.kind = TP_OP_ALL_REDUCE};
    return tp_gb_op(b, &op, layer, &x, 1, 3, shape, NULL);
}

/* One decoder layer over x (B, T, C); returns the layer's output. Rank r of n computes heads r H/n .. (r+1) H/n
 * - 1 with their KV heads (contiguous, so GQA's head-to-KV-head map stays within the rank) and MLP columns
 * r I/n ..; o_proj and down_proj give partial sums that an all-reduce joins (Megatron-LM's layout). */
static int layer(tp_graph_builder *b, const tp_decoder_config *c, const tp_step_shape *s, int i, int x) {
    const int n = s->tp_size > 1 ? s->tp_size : 1, first = n == 1 || s->tp_rank == 0;
    const int H = c->heads / n, Hkv = c->kv_heads / n;
    const int64_t B = s->batch, T = s->tokens, C = c->hidden, D = c->head_dim;
    const int64_t xs[3] = {B, T, C}, qs[3] = {B, T, H * D}, ks[3] = {B, T, Hkv * D};
    const int64_t is[3] = {B, T, c->inter / n}, cache[4] = {2, B, s->kv_len, Hkv * D};
    char l[TP_NAME_LEN], out[TP_NAME_LEN];
#define L(fmt) (snprintf(l, sizeof l, "model.layers.%d." fmt, i), l)
    int h = rmsnorm(b, c, L("input_layernorm"), x, 3, xs);
    int q = tp_gb_linear(b, L("self_attn.q_proj"), h, c->qkv_bias, 3, qs, NULL);
    int k = tp_gb_linear(b, L("self_attn.k_proj"), h, c->qkv_bias, 3, ks, NULL);
    int v = tp_gb_linear(b, L("self_attn.v_proj"), h, c->qkv_bias, 3, ks, NULL);
    q = rope(b, c, L("self_attn.rope_q"), q, H, qs);
    k = rope(b, c, L("self_attn.rope_k"), k, Hkv, ks);
    tp_op app = {.kind = TP_OP_KV_APPEND};
    const int kv_in[2] = {k, v};
    snprintf(out, sizeof out, "model.layers.%d.self_attn.kv_cache", i);
    int kv = tp_gb_op(b, &app, L("self_attn.kv_append"), kv_in, 2, 4, cache, out);
    if (kv >= 0) tp_graph_mark_state(b->g, kv);
    tp_op att = {.kind = TP_OP_KV_ATTENTION, .heads = H, .kv_heads = Hkv, .head_dim = c->head_dim,
                 .scale = (float)(1.0 / sqrt((double)D))};
    const int at_in[2] = {q, kv};
    h = tp_gb_op(b, &att, L("self_attn"), at_in, 2, 3, qs, NULL);
    h = tp_gb_linear(b, L("self_attn.o_proj"), h, c->o_bias && first, 3, xs, NULL);
    h = all_reduce(b, L("self_attn.all_reduce"), h, n, xs);
    x = tp_gb_add(b, L("residual1"), x, h, 3, xs, NULL);
    h = rmsnorm(b, c, L("post_attention_layernorm"), x, 3, xs);
    int gate = tp_gb_linear(b, L("mlp.gate_proj"), h, c->mlp_bias, 3, is, NULL);
    int up = tp_gb_linear(b, L("mlp.up_proj"), h, c->mlp_bias, 3, is, NULL);
    tp_op glu = {.kind = TP_OP_GLU, .act = c->act};
    const int glu_in[2] = {gate, up};
    h = tp_gb_op(b, &glu, L("mlp.act"), glu_in, 2, 3, is, NULL);
    h = tp_gb_linear(b, L("mlp.down_proj"), h, c->mlp_bias && first, 3, xs, NULL);
    h = all_reduce(b, L("mlp.all_reduce"), h, n, xs);
    snprintf(out, sizeof out, "model.layers.%d.out", i);
    return tp_gb_add(b, L("residual2"), x, h, 3, xs, out);
#undef L
}

/* Tensor parallelism: whole heads, whole KV heads (each rank keeps its own; none is replicated) and whole MLP
 * columns per rank. The embedding, the norms and the LM head stay whole on every rank: each rank computes the
 * logits itself (no gather), at the cost of reading the LM head's weight on every GPU. */
static tp_status tp_check(const void *cfg, int n, tp_error *err) {
    const tp_decoder_config *c = cfg;
    if (c->heads % n || c->kv_heads % n || c->inter % n)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: --tp %d needs the %d attention heads, %d KV heads and MLP width "
                       "%d to be multiples of %d: each GPU takes whole heads and whole KV heads of its own", c->name, n,
                       c->heads, c->kv_heads, c->inter, n);
    return TP_OK;
}

static int ends_with(const char *s, const char *suffix) {
    const size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static tp_split param_split(const void *cfg, const char *name) {
    (void)cfg;
    static const char *const column[] = {"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
                                         "v_proj.weight", "v_proj.bias", "gate_proj.weight", "gate_proj.bias",
                                         "up_proj.weight", "up_proj.bias"};
    for (size_t i = 0; i < sizeof column / sizeof column[0]; i++)
        if (ends_with(name, column[i])) return TP_SPLIT_ROWS;
    if (ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight")) return TP_SPLIT_COLS;
    if (ends_with(name, "o_proj.bias") || ends_with(name, "down_proj.bias")) return TP_SPLIT_FIRST;
    return TP_SPLIT_NONE;
}

static tp_status build_step(const void *cfg, const tp_params *p, const tp_step_shape *s, tp_graph *g,
                            tp_error *err) {
    const tp_decoder_config *c = cfg;
    tp_status st = validate(c, err);
    if (!st && s->tp_size > 1) st = tp_check(c, s->tp_size, err);
    if (!st && s->tp_size > 1 && (s->tp_rank < 0 || s->tp_rank >= s->tp_size))
        st = tp_fail(err, TP_ERR_ARG, "rank %d of %d", s->tp_rank, s->tp_size);
    if (st) return st;
    const int64_t B = s->batch, T = s->tokens, C = c->hidden, V = c->vocab;
    tp_graph_init(g, B);
    g->tp_rank = s->tp_size > 1 ? s->tp_rank : 0;
    g->tp_size = s->tp_size > 1 ? s->tp_size : 1;
    g->tokens = T;
    g->past = s->past;
    g->kv_len = s->kv_len;
    tp_graph_builder b = {g, p, err, TP_OK, NULL};
    const int64_t ids_s[2] = {B, T}, xs[3] = {B, T, C};
    g->input = tp_graph_add_value(g, "input_ids", TP_VAL_INPUT, 2, ids_s, -1);
    tp_op emb = {.kind = TP_OP_TOKEN_EMBED, .scale = c->arch == TP_DEC_GEMMA ? (float)sqrt((double)C) : 1.0f};
    const int e_in[2] = {g->input, tp_gb_param(&b, "model.embed_tokens", "weight")};
    int x = tp_gb_op(&b, &emb, "model.embed_tokens", e_in, 2, 3, xs, "hidden");
    for (int i = 0; i < c->layers; i++) x = layer(&b, c, s, i, x);
    x = rmsnorm(&b, c, "model.norm", x, 3, xs);
    int ndim = 3;
    int64_t ls[3] = {B, T, V};
    if (!s->all_logits) { /* generation reads the last position's logits only */
        const int64_t ps[2] = {B, C};
        tp_op last = {.kind = TP_OP_POOL, .pool_mode = 2};
        x = tp_gb_op(&b, &last, "last_token", &x, 1, 2, ps, NULL);
        ndim = 2;
        ls[1] = V;
    }
    tp_op head = {.kind = TP_OP_LINEAR};
    const int h_in[2] = {x, tp_gb_param(&b, c->tie ? "model.embed_tokens.weight" : "lm_head.weight", NULL)};
    g->output = tp_gb_op(&b, &head, "lm_head", h_in, 2, ndim, ls, "logits");
    if (b.st) tp_graph_free(g);
    return b.st;
}

/* tprof bench's graph: the prefill of the prompt, returning the next token's logits */
static tp_status build_graph(const void *cfg, const tp_params *p, int64_t B, tp_graph *g, tp_error *err) {
    const tp_decoder_config *c = cfg;
    const tp_step_shape s = {B, c->prompt, 0, (int64_t)c->prompt + c->gen, 0, 0, 0};
    return build_step(cfg, p, &s, g, err);
}

/* ---- the family interface (model.h) -------------------------------------------------------------------- */

static int preset_count(void) { return (int)(sizeof PRESETS / sizeof PRESETS[0]) - 1; }

static void preset_info(int i, const char **name, const char **alias) {
    *name = PRESETS[i].name;
    *alias = PRESETS[i].alias;
}

static void preset_config(int i, void *cfg) { from_preset(&PRESETS[i], cfg); }

static const char *model_name(const void *cfg) { return ((const tp_decoder_config *)cfg)->name; }

static const tp_knob KNOBS[] = {
    {"--prompt", "N", "prompt tokens: the prefill's length (default 128)"},
    {"--gen", "N", "tokens generated after the prompt: decode steps (default 128)"},
    {"--layers", "N", "decoder layers (num_hidden_layers)"},
    {"--vocab", "N", "vocabulary (vocab_size): e.g. a layer's decode time without the LM head's weight"},
    {NULL, NULL, NULL},
};

static void mark_custom(tp_decoder_config *c) {
    if (!strstr(c->name, "+custom")) tp_append(c->name, sizeof c->name, "+custom");
}

static int knob(void *cfg, const char *name, const char *val, tp_error *err) {
    tp_decoder_config *c = cfg;
    long v;
    if (strcmp(name, "--prompt") == 0) {
        if (tp_fam_parse_long(name, val, 1, 1 << 20, &v, err)) return -1;
        c->prompt = (int)v;
    } else if (strcmp(name, "--gen") == 0) {
        if (tp_fam_parse_long(name, val, 0, 1 << 20, &v, err)) return -1;
        c->gen = (int)v;
    } else if (strcmp(name, "--layers") == 0) {
        if (tp_fam_parse_long(name, val, 1, 4096, &v, err)) return -1;
        c->layers = (int)v;
        mark_custom(c);
    } else if (strcmp(name, "--vocab") == 0) {
        if (tp_fam_parse_long(name, val, 1, 1 << 24, &v, err)) return -1;
        c->vocab = (int)v;
        mark_custom(c);
    } else {
        return 0;
    }
    return 1;
}

static void describe(const void *cfg, char *buf, size_t n) {
    const tp_decoder_config *c = cfg;
    snprintf(buf, n, "%s: dim %d, %d layers, %d heads (%d KV, head dim %d), MLP %d %s, vocab %d, rope %g%s%s%s; "
             "prompt %d + gen %d", tp_decoder_arch_name(c->arch), c->hidden, c->layers, c->heads, c->kv_heads,
             c->head_dim, c->inter, c->act == TP_ACT_SILU ? "SwiGLU" : "GeGLU", c->vocab, c->rope.theta,
             c->rope.type == TP_ROPE_LLAMA3 ? " llama3" : "", c->tie ? ", tied embeddings" : "",
             c->qkv_bias ? ", qkv bias" : "", c->prompt, c->gen);
}

/* ---- JSON: the configuration as engine files store it --------------------------------------------------- */

static const char *const ROPE_NAMES[] = {"default", "llama3"};

static json_t *to_json(const void *cfg) {
    const tp_decoder_config *c = cfg;
    json_t *r = json_pack("{s:s,s:f,s:f,s:f,s:f,s:i}", "type", ROPE_NAMES[c->rope.type], "theta", c->rope.theta,
                          "factor", c->rope.type ? c->rope.factor : 0.0, "low_freq", c->rope.type ? c->rope.low_freq : 0.0,
                          "high_freq", c->rope.type ? c->rope.high_freq : 0.0, "orig_ctx", c->rope.type ? c->rope.orig_ctx : 0);
    if (!r) return NULL;
    json_t *j = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:o,s:s,s:b,s:b,s:b,s:b}", "name", c->name,
                          "architecture", ARCH_NAMES[c->arch], "hidden", c->hidden, "intermediate", c->inter, "layers",
                          c->layers, "heads", c->heads, "kv_heads", c->kv_heads, "head_dim", c->head_dim, "vocab",
                          c->vocab, "eps", (double)c->eps, "rope", r, "act", tp_act_name(c->act), "tie", c->tie,
                          "qkv_bias", c->qkv_bias, "o_bias", c->o_bias, "mlp_bias", c->mlp_bias);
    if (j && json_object_update_new(j, json_pack("{s:i,s:i,s:i,s:i}", "sliding_window", c->sliding_window, "max_pos",
                                                 c->max_pos, "prompt", c->prompt, "gen", c->gen))) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static tp_status jbool(const json_t *o, const char *key, int *out, tp_error *err) {
    const json_t *v;
    tp_status s = tp_fam_jfield(o, "model", key, 0, &v, err);
    if (s) return s;
    if (!json_is_boolean(v)) return tp_fail(err, TP_ERR_FORMAT, "model: '%s' is %s, expected true or false", key, tp_json_kind(v));
    *out = json_is_true(v);
    return TP_OK;
}

static tp_status jname(const json_t *o, const char *where, const char *key, const char *const *names, int count,
                       int *out, tp_error *err) {
    const json_t *v;
    tp_status s = tp_fam_jfield(o, where, key, 0, &v, err);
    if (s) return s;
    for (int i = 0; json_is_string(v) && i < count; i++)
        if (strcmp(json_string_value(v), names[i]) == 0) {
            *out = i;
            return TP_OK;
        }
    return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' has an unknown value", where, key);
}

static tp_status from_json(const json_t *m, void *cfg, tp_error *err) {
    static const char *const keys[] = {"name", "architecture", "hidden", "intermediate", "layers", "heads",
                                       "kv_heads", "head_dim", "vocab", "eps", "rope", "act", "tie", "qkv_bias",
                                       "o_bias", "mlp_bias", "sliding_window", "max_pos", "prompt", "gen", NULL};
    static const char *const rkeys[] = {"type", "theta", "factor", "low_freq", "high_freq", "orig_ctx", NULL};
    static const char *const ACTS[] = {"silu", "gelu_tanh"};
    tp_decoder_config *c = cfg;
    memset(c, 0, sizeof *c);
    const json_t *v, *r;
    int arch = 0, act = 0, rt = 0;
    double eps;
    const int BIG = 100000000;
    tp_status s = tp_fam_jkeys(m, "model", keys, err);
    if (!s) s = tp_fam_jfield(m, "model", "name", 0, &v, err);
    if (!s && (!json_is_string(v) || json_string_length(v) >= sizeof c->name))
        s = tp_fail(err, TP_ERR_FORMAT, "model: 'name' must be a string of at most %zu bytes", sizeof c->name - 1);
    if (!s) snprintf(c->name, sizeof c->name, "%s", json_string_value(v));
    if (!s) s = jname(m, "model", "architecture", ARCH_NAMES, TP_DEC_ARCH_COUNT, &arch, err);
    if (!s) s = tp_fam_jint(m, "model", "hidden", 1, BIG, &c->hidden, err);
    if (!s) s = tp_fam_jint(m, "model", "intermediate", 1, BIG, &c->inter, err);
    if (!s) s = tp_fam_jint(m, "model", "layers", 1, 100000, &c->layers, err);
    if (!s) s = tp_fam_jint(m, "model", "heads", 1, 100000, &c->heads, err);
    if (!s) s = tp_fam_jint(m, "model", "kv_heads", 1, 100000, &c->kv_heads, err);
    if (!s) s = tp_fam_jint(m, "model", "head_dim", 1, 100000, &c->head_dim, err);
    if (!s) s = tp_fam_jint(m, "model", "vocab", 1, 1 << 24, &c->vocab, err);
    if (!s) s = tp_fam_jnum(m, "model", "eps", &eps, err);
    if (!s) s = tp_fam_jfield(m, "model", "rope", 0, &r, err);
    if (!s && !json_is_object(r)) s = tp_fail(err, TP_ERR_FORMAT, "model: 'rope' must be an object");
    if (!s) s = tp_fam_jkeys(r, "model.rope", rkeys, err);
    if (!s) s = jname(r, "model.rope", "type", ROPE_NAMES, 2, &rt, err);
    if (!s) s = tp_fam_jnum(r, "model.rope", "theta", &c->rope.theta, err);
    if (!s) s = tp_fam_jnum(r, "model.rope", "factor", &c->rope.factor, err);
    if (!s) s = tp_fam_jnum(r, "model.rope", "low_freq", &c->rope.low_freq, err);
    if (!s) s = tp_fam_jnum(r, "model.rope", "high_freq", &c->rope.high_freq, err);
    if (!s) s = tp_fam_jint(r, "model.rope", "orig_ctx", 0, BIG, &c->rope.orig_ctx, err);
    if (!s) s = jname(m, "model", "act", ACTS, 2, &act, err);
    if (!s) s = jbool(m, "tie", &c->tie, err);
    if (!s) s = jbool(m, "qkv_bias", &c->qkv_bias, err);
    if (!s) s = jbool(m, "o_bias", &c->o_bias, err);
    if (!s) s = jbool(m, "mlp_bias", &c->mlp_bias, err);
    if (!s) s = tp_fam_jint(m, "model", "sliding_window", 0, BIG, &c->sliding_window, err);
    if (!s) s = tp_fam_jint(m, "model", "max_pos", 0, BIG, &c->max_pos, err);
    if (!s) s = tp_fam_jint(m, "model", "prompt", 1, 1 << 20, &c->prompt, err);
    if (!s) s = tp_fam_jint(m, "model", "gen", 0, 1 << 20, &c->gen, err);
    if (s) return s;
    c->arch = (tp_dec_arch)arch;
    c->act = (tp_act)act;
    c->rope.type = (tp_rope_type)rt;
    c->eps = (float)eps;
    return validate(c, err);
}

/* ---- the checkpoint's config.json ---------------------------------------------------------------------- */

/* The architecture config.json names: transformers' AutoModelForCausalLM builds the class of model_type's config,
 * architectures[0] names it too; either alone, or both when they agree. */
static tp_status arch_of(const tp_hf_config *h, const char *path, int *arch, tp_error *err) {
    int by_arch = -1, by_type = -1;
    for (int a = 0; a < TP_DEC_ARCH_COUNT; a++) {
        if (strcmp(h->architecture, ARCH_NAMES[a]) == 0) by_arch = a;
        if (strcmp(h->model_type, MODEL_TYPES[a]) == 0) by_type = a;
    }
    if (h->architecture[0] && h->model_type[0] && by_arch >= 0 && by_type != by_arch)
        return tp_fail(err, TP_ERR_FORMAT, "%s: model_type '%s' and architectures [\"%s\"] disagree (transformers "
                       "builds the model model_type names; a %s checkpoint says '%s')", path, h->model_type,
                       h->architecture, ARCH_NAMES[by_arch], MODEL_TYPES[by_arch]);
    *arch = h->architecture[0] ? by_arch : by_type;
    if (*arch < 0)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: architecture '%s' (model_type '%s'): the decoder family reads "
                       "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and GemmaForCausalLM", path,
                       h->architecture, h->model_type);
    return TP_OK;
}

/* The attention shapes of config.json, each error naming its fields and values: HF's head_dim default
 * (hidden_size / num_attention_heads, which then must divide), an even head dim (rotate_half pairs dimension i with
 * i + head_dim / 2), whole query heads per KV head. */
static tp_status hf_heads(const tp_hf_config *h, const char *path, tp_decoder_config *n, tp_error *err) {
    n->heads = h->num_attention_heads;
    n->kv_heads = h->num_key_value_heads > 0 ? h->num_key_value_heads : n->heads;
    if (h->head_dim > 0) n->head_dim = h->head_dim;
    else if (h->hidden_size % h->num_attention_heads)
        return tp_fail(err, TP_ERR_FORMAT, "%s: num_attention_heads %d does not divide hidden_size %d (and no head_dim "
                       "is given)", path, h->num_attention_heads, h->hidden_size);
    else n->head_dim = h->hidden_size / h->num_attention_heads;
    if (n->head_dim % 2) {
        if (h->head_dim > 0)
            return tp_fail(err, TP_ERR_FORMAT, "%s: head_dim %d is odd: the rotary embedding needs it even", path,
                           h->head_dim);
        return tp_fail(err, TP_ERR_FORMAT, "%s: hidden_size %d / num_attention_heads %d = head dim %d, odd: the rotary "
                       "embedding needs it even", path, h->hidden_size, h->num_attention_heads, n->head_dim);
    }
    if (n->heads % n->kv_heads)
        return tp_fail(err, TP_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       path, n->heads, n->kv_heads);
    /* Gemma 2 scales scores by query_pre_attn_scalar^-0.5; these architectures by head_dim^-0.5 */
    if (isfinite(h->query_pre_attn_scalar) && h->query_pre_attn_scalar != n->head_dim)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: query_pre_attn_scalar %g: tprof scales attention scores by "
                       "1/sqrt(head_dim %d)", path, h->query_pre_attn_scalar, n->head_dim);
    return TP_OK;
}

/* The sliding window HF applies, and the context against it: Mistral slides every layer; Qwen2 only with
 * use_sliding_window, the layers layer_types marks sliding_attention, or without layer_types those from
 * max_window_layers on (Qwen2Config's default 28). tprof attends to the whole context: a context past the window
 * would compute another model. */
static tp_status hf_window(const tp_hf_config *h, const char *path, tp_decoder_config *n, tp_error *err) {
    n->sliding_window = 0;
    if (n->arch == TP_DEC_MISTRAL) n->sliding_window = h->sliding_window;
    if (n->arch == TP_DEC_QWEN2 && h->use_sliding_window > 0) {
        const int first = h->max_window_layers >= 0 ? h->max_window_layers : 28;
        const int sliding = h->sliding_layers >= 0 ? h->sliding_layers : n->layers > first ? n->layers - first : 0;
        if (sliding > 0) n->sliding_window = h->sliding_window;
    }
    const int ctx = n->prompt + n->gen;
    if (n->sliding_window > 0 && ctx > n->sliding_window)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: sliding_window %d: the context %d (--prompt %d + --gen %d) "
                       "exceeds it; tprof attends to the whole context, so past the window it would compute another "
                       "model: keep --prompt + --gen <= %d", path, n->sliding_window, ctx, n->prompt, n->gen,
                       n->sliding_window);
    return TP_OK;
}

/* The configuration config.json describes, over cfg (its prompt and gen kept), named name; HF's defaults where a
 * key is absent: num_key_value_heads = heads, head_dim = hidden / heads, the architecture's activation and biases. */
static tp_status apply_hf(const tp_hf_config *h, const char *path, const char *name, tp_decoder_config *c,
                          tp_error *err) {
    int arch;
    tp_status s = arch_of(h, path, &arch, err);
    if (s) return s;
    const char *missing = h->hidden_size < 0 ? "hidden_size" : h->intermediate_size < 0 ? "intermediate_size"
                          : h->num_hidden_layers < 0 ? "num_hidden_layers" : h->num_attention_heads < 0
                          ? "num_attention_heads" : h->vocab_size < 0 ? "vocab_size" : NULL;
    if (missing) return tp_fail(err, TP_ERR_FORMAT, "%s: field '%s' is missing", path, missing);
    tp_decoder_config n = *c;
    snprintf(n.name, sizeof n.name, "%.63s", name);
    n.arch = (tp_dec_arch)arch;
    arch_defaults(&n);
    n.hidden = h->hidden_size;
    n.inter = h->intermediate_size;
    n.layers = h->num_hidden_layers;
    s = hf_heads(h, path, &n, err);
    if (!s) s = hf_window(h, path, &n, err);
    if (s) return s;
    n.vocab = h->vocab_size;
    n.eps = isfinite(h->rms_norm_eps) ? (float)h->rms_norm_eps : 1e-6f; /* the configs' default */
    n.rope = h->rope;
    if (!h->has_rope) n.rope.theta = 10000.0; /* RotaryEmbeddingConfigMixin.default_theta */
    n.tie = h->tie_word_embeddings >= 0 ? h->tie_word_embeddings : arch == TP_DEC_GEMMA;
    n.max_pos = h->max_position_embeddings > 0 ? h->max_position_embeddings : 0;
    if (arch == TP_DEC_LLAMA || arch == TP_DEC_MISTRAL || arch == TP_DEC_GEMMA) {
        n.qkv_bias = n.o_bias = h->attention_bias > 0;
        n.mlp_bias = arch == TP_DEC_LLAMA && h->mlp_bias > 0;
    }
    if (h->hidden_act[0]) {
        if (strcmp(h->hidden_act, "silu") == 0) n.act = TP_ACT_SILU;
        else if (strcmp(h->hidden_act, "gelu_pytorch_tanh") == 0 || (arch == TP_DEC_GEMMA && strcmp(h->hidden_act, "gelu") == 0))
            n.act = TP_ACT_GELU_TANH; /* Gemma's legacy "gelu" means the tanh form (GemmaConfig.__post_init__) */
        else
            return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: hidden_act '%s': tprof implements silu and gelu_pytorch_tanh",
                           path, h->hidden_act);
    }
    if ((s = validate(&n, err))) return s;
    *c = n;
    return TP_OK;
}

static tp_status checkpoint(void *cfg, const char *weights, char *note, size_t n, tp_error *err) {
    tp_decoder_config *c = cfg;
    char dir[4096], path[4200];
    if (tp_hf_checkpoint_dir(weights, dir, sizeof dir)) return tp_fail(err, TP_ERR_ARG, "%s: path too long", weights);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (access(path, F_OK) != 0) {
        snprintf(note, n, "warning: no config.json beside %s: the checkpoint is read as the preset %s's shapes", weights,
                 c->name);
        return TP_OK;
    }
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    tp_hf_config h;
    tp_status s = tp_hf_config_read(path, &h, err);
    if (!s) s = apply_hf(&h, path, base, c, err);
    if (s) return s;
    snprintf(note, n, "configuration from %s (%s)", path, ARCH_NAMES[c->arch]);
    return TP_OK;
}

/* ---- input and output ---------------------------------------------------------------------------------- */

static void input(const void *cfg, tp_input_desc *d) {
    const tp_decoder_config *c = cfg;
    d->kind = TP_INPUT_TOKENS;
    d->ndim = 1;
    d->shape[0] = c->prompt;
    d->unit = "sequence";
    snprintf(d->preprocess, sizeof d->preprocess, "token ids (a prompt of %d tokens)", c->prompt);
}

static void output(const void *cfg, tp_output_desc *d) {
    const tp_decoder_config *c = cfg;
    d->ndim = 1;
    d->shape[0] = c->vocab;
    d->what = "next-token logits";
    d->classes = c->vocab; /* top-1 agreement: the same greedy next token */
}

/* Token ids: random in [0, vocab) from seed, or the first prompt ids of a text file of whitespace-separated
 * integers, the same prompt for every sequence of the batch. */
static tp_status make_input(const void *cfg, int B, uint64_t seed, const char *path, float *dst, char *desc,
                            size_t n, tp_error *err) {
    const tp_decoder_config *c = cfg;
    const int T = c->prompt;
    if (!path) {
        tp_rng r;
        tp_rng_seed_named(&r, seed, "input_ids");
        for (int64_t i = 0; i < (int64_t)B * T; i++) dst[i] = (float)(tp_rng_u64(&r) % (uint64_t)c->vocab);
        snprintf(desc, n, "random token ids in [0, %d), seed %llu", c->vocab, (unsigned long long)seed);
        return TP_OK;
    }
    int got = 0;
    tp_status s = tp_tokens_read(path, c->vocab, T, dst, &got, err);
    if (!s && got < T)
        s = tp_fail(err, TP_ERR_FORMAT, "%s: %d token ids, the prompt needs %d (--prompt)", path, got, T);
    if (s) return s;
    for (int b = 1; b < B; b++) memcpy(dst + (int64_t)b * T, dst, sizeof(float) * (size_t)T);
    snprintf(desc, n, "%s (the first %d token ids)", path, T);
    return TP_OK;
}

/* ---- tprof lint ---------------------------------------------------------------------------------------- */

static tp_status shapes(const void *cfg, tp_model_shapes *m, tp_error *err) {
    const tp_decoder_config *c = cfg;
    memset(m, 0, sizeof *m);
    tp_status s = validate(c, err);
    if (s) return s;
    m->tokens = c->prompt;
    snprintf(m->tokens_how, sizeof m->tokens_how, "a prompt of %d tokens (--prompt)", c->prompt);
    m->heads = c->heads;
    m->kv_heads = c->kv_heads;
    m->head_dim = c->head_dim;
    m->embed_dim = c->hidden;
    m->mlp_hidden = c->inter;
    m->depth = c->layers;
    const int64_t C = c->hidden, QD = (int64_t)c->heads * c->head_dim, KD = (int64_t)c->kv_heads * c->head_dim;
    tp_shapes_add_gemm(m, "model.layers.*.self_attn.q_proj", QD, C, 0);
    tp_shapes_add_gemm(m, "model.layers.*.self_attn.k_proj", KD, C, 0);
    tp_shapes_add_gemm(m, "model.layers.*.self_attn.v_proj", KD, C, 0);
    tp_shapes_add_gemm(m, "model.layers.*.self_attn.o_proj", C, QD, 0);
    tp_shapes_add_gemm(m, "model.layers.*.mlp.gate_proj", c->inter, C, 0);
    tp_shapes_add_gemm(m, "model.layers.*.mlp.up_proj", c->inter, C, 0);
    tp_shapes_add_gemm(m, "model.layers.*.mlp.down_proj", C, c->inter, 0);
    tp_shapes_add_gemm(m, "lm_head", c->vocab, C, 1);
    return TP_OK;
}

static void fix(const void *cfg, const tp_model_shapes *m, tp_fix_kind kind, int block, int mult, char *buf,
                size_t n) {
    const tp_decoder_config *c = cfg;
    switch (kind) {
    case TP_FIX_SEQ_BLOCK: {
        const int lo = m->tokens / block * block, hi = lo + block;
        tp_append(buf, n, "use --prompt %d", hi);
        if (lo > 0) tp_append(buf, n, " or %d", lo);
        tp_append(buf, n, " (multiples of %d)", block);
        break;
    }
    case TP_FIX_HEAD_DIM:
        tp_append(buf, n, "the head dim %d is the checkpoint's: no knob changes it; keep attention in fp16/bf16",
                  c->head_dim);
        break;
    case TP_FIX_GEMM_DIMS:
        tp_append(buf, n, "the GEMM sizes are the checkpoint's (hidden %d, intermediate %d): keep the layers whose K or "
                  "N is not a multiple of %d in fp16/bf16 with --policy", c->hidden, c->inter, mult);
        break;
    case TP_FIX_CLASS_TOKEN:
    case TP_FIX_PATCH: tp_append(buf, n, "not applicable to a decoder"); break;
    }
}

/* Positions past max_position_embeddings run (RoPE has no table to overflow) but outside the model's training */
static void limits(const void *cfg, char *buf, size_t n) {
    const tp_decoder_config *c = cfg;
    const long ctx = (long)c->prompt + c->gen;
    if (c->max_pos > 0 && ctx > c->max_pos)
        snprintf(buf, n, "%s: the context %ld (--prompt %d + --gen %d) exceeds max_position_embeddings %d: positions "
                 "past it are outside what the model was trained for", c->name, ctx, c->prompt, c->gen, c->max_pos);
}

const tp_family tp_decoder_family = {
    .name = "decoder",
    .title = "Llama-style decoder (HF LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GemmaForCausalLM)",
    .cfg_size = sizeof(tp_decoder_config),
    .knobs = KNOBS,
    .preset_count = preset_count,
    .preset_info = preset_info,
    .preset_config = preset_config,
    .model_name = model_name,
    .validate = validate,
    .knob = knob,
    .describe = describe,
    .to_json = to_json,
    .from_json = from_json,
    .checkpoint = checkpoint,
    .params_table = params_table,
    .params_init = params_init,
    .build_graph = build_graph,
    .build_step = build_step,
    .tp_check = tp_check,
    .param_split = param_split,
    .input = input,
    .output = output,
    .make_input = make_input,
    .shapes = shapes,
    .fix = fix,
    .limits = limits,
};
