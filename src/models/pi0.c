/* pi0.c: the pi0 pipeline's parameters and graph (pi0.h). Only the graph is built here; the ops' semantics are
 * the IR's (graph.h: the pipeline ops) and the executors'. */
#include "models/pi0.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "core/util.h"
#include "formats/dtype.h"
#include "io/safetensors.h"
#include "models/builder.h"
#include "models/vit.h"

/* openpi's pi0 (Physical-Intelligence/openpi, pi0_config.py and gemma.py: PaliGemma's SigLIP So400m/14 at 224 and
 * Gemma-2B, the Gemma-300M-shaped action expert) and tprof's small one for the CPU golden
 * (bench/pi0_reference.py's CONFIGS, which must match) */
static const tp_pi0_config PRESETS[] = {
    {"pi0", 3, 224, 14, 1152, 27, 16, 4304, 2048, 18, 8, 1, 256, 16384, 257152, 48, 1024, 4096, 50, 32, 32, 10},
    {"pi0-small", 2, 28, 14, 48, 2, 4, 100, 64, 2, 4, 1, 16, 176, 97, 5, 32, 80, 6, 7, 7, 3},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))
#define LN_EPS 1e-6f   /* SigLIP's LayerNorm */
#define RMS_EPS 1e-6f  /* Gemma's RMSNorm */
#define ROPE_THETA 10000.0

static int n_img(const tp_pi0_config *c) { return c->cams * (c->img / c->patch) * (c->img / c->patch); }

/* The configuration's sizes, by their keys in JSON (to_json, from_json) and in messages */
#define FIELDS(X)                                                                                                    \
    X(cams) X(img) X(patch) X(v_width) X(v_depth) X(v_heads) X(v_mlp) X(width) X(depth) X(heads) X(kv_heads)      \
        X(head_dim) X(mlp) X(vocab) X(lang) X(e_width) X(e_mlp) X(horizon) X(action_dim) X(state_dim) X(steps)
#define NAME(f) #f,
static const char *const FIELD_NAMES[] = {FIELDS(NAME)};
#undef NAME

static tp_status validate(const void *cfg, tp_error *err) {
    const tp_pi0_config *c = cfg;
#define VAL(f) c->f,
    const int v[] = {FIELDS(VAL)};
#undef VAL
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] <= 0) return tp_fail(err, TP_ERR_ARG, "%s: every size must be positive ('%s' is %d)", c->name,
                                      FIELD_NAMES[i], v[i]);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) /* with the caps below, every size product fits int64 */
        if (v[i] > (1 << 20) && strcmp(FIELD_NAMES[i], "vocab") != 0) /* the vocabulary: up to 2^24 (below) */
            return tp_fail(err, TP_ERR_ARG, "%s: '%s' is %d, above 2^20", c->name, FIELD_NAMES[i], v[i]);
    if (c->img % c->patch)
        return tp_fail(err, TP_ERR_ARG, "%s: 'img' %d is not a multiple of 'patch' %d", c->name, c->img, c->patch);
    if ((int64_t)c->heads * c->head_dim > (1 << 20) || (int64_t)c->steps * c->depth > (1 << 14) || c->steps > 1024)
        return tp_fail(err, TP_ERR_ARG, "%s: 'heads' %d of 'head_dim' %d, 'steps' %d over 'depth' %d: beyond what "
                       "tprof unrolls (heads x head_dim <= 2^20, steps <= 1024, steps x depth <= 2^14)", c->name,
                       c->heads, c->head_dim, c->steps, c->depth);
    if (c->cams > 64 || (int64_t)(c->img / c->patch) * (c->img / c->patch) * c->cams + c->lang > (1 << 20))
        return tp_fail(err, TP_ERR_ARG, "%s: 'cams' %d of 'img' %d / 'patch' %d and 'lang' %d tokens: the prefix "
                       "exceeds 2^20 tokens or 64 cameras", c->name, c->cams, c->img, c->patch, c->lang);
    if (c->v_width % c->v_heads)
        return tp_fail(err, TP_ERR_ARG, "%s: 'v_width' %d is not a multiple of 'v_heads' %d", c->name, c->v_width,
                       c->v_heads);
    if (c->heads % c->kv_heads)
        return tp_fail(err, TP_ERR_ARG, "%s: 'heads' %d is not a multiple of 'kv_heads' %d", c->name, c->heads,
                       c->kv_heads);
    if (c->head_dim % 2)
        return tp_fail(err, TP_ERR_ARG, "%s: 'head_dim' %d is odd: the rotary embedding needs it even", c->name,
                       c->head_dim);
    if (c->e_width % 2)
        return tp_fail(err, TP_ERR_ARG, "%s: 'e_width' %d is odd: the time embedding needs it even", c->name,
                       c->e_width);
    if (c->vocab > (1 << 24)) return tp_fail(err, TP_ERR_ARG, "%s: 'vocab' %d is above 2^24", c->name, c->vocab);
    return TP_OK;
}

/* The vision tower as a ViT: no class token, no pooling, the projector as the per-token head, tanh GELU */
static void vision_cfg(const tp_pi0_config *c, tp_vit_config *v) {
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%.50s vision", c->name);
    v->img_size = c->img, v->patch_size = c->patch, v->in_chans = 3, v->embed_dim = c->v_width;
    v->depth = c->v_depth, v->num_heads = c->v_heads;
    v->mlp_ratio = (c->v_mlp + 0.5) / c->v_width; /* int(C * ratio) = v_mlp exactly */
    v->class_token = 0, v->global_pool = TP_VIT_POOL_NONE, v->num_classes = c->width, v->gelu_tanh = 1;
    v->ln_eps = LN_EPS;
    v->pre.img_size = c->img, v->pre.crop_pct = 1.0;
    for (int k = 0; k < 3; k++) v->pre.mean[k] = v->pre.std[k] = 0.5f;
}

/* ---- parameters ----------------------------------------------------------------------------------------- */

/* normal(0, 0.02) matrices and embeddings; 0.05 N(0, 1) biases; LayerNorm weights 1 + 0.1 N; Gemma's RMSNorm
 * offsets (x_hat (1 + w)) 0.1 N: no path through a trivial 0 or 1 (bench/pi0_reference.py's rule) */
typedef enum { K_W = 0, K_B, K_LN, K_RMS } init_kind;

static int gemma_table(tp_param_builder *b, const tp_pi0_config *c, const char *stage, int w, int mlp) {
    const int64_t hd = c->head_dim, H = c->heads, K = c->kv_heads;
    int bad = 0;
    char n[TP_NAME_LEN];
#define P(fmt, kind, nd, d0, d1) (snprintf(n, sizeof n, "%s.model.layers.%d." fmt, stage, i), tp_pb_add(b, n, kind, nd, d0, d1, 0, 0))
    for (int i = 0; i < c->depth; i++) {
        bad |= P("input_layernorm.weight", K_RMS, 1, w, 0);
        bad |= P("self_attn.q_proj.weight", K_W, 2, H * hd, w);
        bad |= P("self_attn.k_proj.weight", K_W, 2, K * hd, w);
        bad |= P("self_attn.v_proj.weight", K_W, 2, K * hd, w);
        bad |= P("self_attn.o_proj.weight", K_W, 2, w, H * hd);
        bad |= P("post_attention_layernorm.weight", K_RMS, 1, w, 0);
        bad |= P("mlp.gate_proj.weight", K_W, 2, mlp, w);
        bad |= P("mlp.up_proj.weight", K_W, 2, mlp, w);
        bad |= P("mlp.down_proj.weight", K_W, 2, w, mlp);
    }
#undef P
    return bad;
}

static tp_status build_table(const tp_pi0_config *c, tp_params *out, int **init, int alloc, tp_error *err) {
    memset(out, 0, sizeof *out);
    tp_param_builder b = {out, NULL, 0, alloc};
    const int V = c->v_width, W = c->width, E = c->e_width, g = c->img / c->patch;
    int bad = tp_pb_add(&b, "vision.patch_embed.proj.weight", K_W, 4, V, 3, c->patch, c->patch);
    bad |= tp_pb_add(&b, "vision.patch_embed.proj.bias", K_B, 1, V, 0, 0, 0);
    bad |= tp_pb_add(&b, "vision.pos_embed", K_W, 3, 1, g * g, V, 0);
    char n[TP_NAME_LEN];
#define VP(fmt, kind, nd, d0, d1) (snprintf(n, sizeof n, "vision.blocks.%d." fmt, i), tp_pb_add(&b, n, kind, nd, d0, d1, 0, 0))
    for (int i = 0; i < c->v_depth; i++) {
        /* one per statement: each reuses n */
        bad |= VP("norm1.weight", K_LN, 1, V, 0);
        bad |= VP("norm1.bias", K_B, 1, V, 0);
        bad |= VP("attn.qkv.weight", K_W, 2, 3 * V, V);
        bad |= VP("attn.qkv.bias", K_B, 1, 3 * V, 0);
        bad |= VP("attn.proj.weight", K_W, 2, V, V);
        bad |= VP("attn.proj.bias", K_B, 1, V, 0);
        bad |= VP("norm2.weight", K_LN, 1, V, 0);
        bad |= VP("norm2.bias", K_B, 1, V, 0);
        bad |= VP("mlp.fc1.weight", K_W, 2, c->v_mlp, V);
        bad |= VP("mlp.fc1.bias", K_B, 1, c->v_mlp, 0);
        bad |= VP("mlp.fc2.weight", K_W, 2, V, c->v_mlp);
        bad |= VP("mlp.fc2.bias", K_B, 1, V, 0);
    }
#undef VP
    bad |= tp_pb_add(&b, "vision.norm.weight", K_LN, 1, V, 0, 0, 0);
    bad |= tp_pb_add(&b, "vision.norm.bias", K_B, 1, V, 0, 0, 0);
    bad |= tp_pb_add(&b, "vision.head.weight", K_W, 2, W, V, 0, 0);
    bad |= tp_pb_add(&b, "vision.head.bias", K_B, 1, W, 0, 0, 0);
    bad |= tp_pb_add(&b, "prefix.model.embed_tokens.weight", K_W, 2, c->vocab, W, 0, 0);
    bad |= gemma_table(&b, c, "prefix", W, c->mlp);
    bad |= gemma_table(&b, c, "expert", E, c->e_mlp);
    bad |= tp_pb_add(&b, "expert.model.norm.weight", K_RMS, 1, E, 0, 0, 0);
    static const char *const lin[] = {"state_proj", "action_in_proj", "action_time_mlp_in", "action_time_mlp_out",
                                      "action_out_proj"};
    const int dims[5][2] = {{E, c->state_dim}, {E, c->action_dim}, {E, 2 * E}, {E, E}, {c->action_dim, E}};
    for (int k = 0; k < 5; k++) {
        snprintf(n, sizeof n, "expert.%s.weight", lin[k]);
        bad |= tp_pb_add(&b, n, K_W, 2, dims[k][0], dims[k][1], 0, 0);
        snprintf(n, sizeof n, "expert.%s.bias", lin[k]);
        bad |= tp_pb_add(&b, n, K_B, 1, dims[k][0], 0, 0, 0);
    }
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
    (void)nonzero_bias; /* the biases and norms are random already */
    int *init = NULL;
    tp_status s = validate(cfg, err);
    if (!s) s = build_table(cfg, out, &init, 1, err);
    if (s) return s;
    /* value j of a tensor is a function of its name and j (core/rng.h's counter-based draws): all threads a tensor */
    for (int i = 0; i < out->n_params; i++) {
        tp_param *t = &out->params[i];
        const uint64_t key = tp_ctr_key(seed, t->name);
        const int k = init[i];
        tp_ctr_fill_normal(t->data, t->numel, key, k == K_W ? 0.02 : k == K_B ? 0.05 : 0.1, k == K_LN ? 1.0 : 0.0);
    }
    free(init);
    return TP_OK;
}

/* ---- openpi's checkpoints ------------------------------------------------------------------------------------- */

#define OP_PE "paligemma_with_expert."
#define OP_VT OP_PE "paligemma.model.vision_tower.vision_model."
#define OP_LM OP_PE "paligemma.model.language_model."

/* openpi's name of tprof's parameter `name` (its PyTorch PI0Pytorch state_dict, as tools/check_pi0_openpi.py maps
 * it): into buf, with the part of a fused qkv (*part 0..2, q, k, v; -1 for a whole tensor). 0, or -1 when the name
 * is not one of the table's. */
static int openpi_name(const char *name, char *buf, size_t n, int *part) {
    static const struct {
        const char *from, *to;
    } vis[] = {{"norm1.", "layer_norm1."}, {"norm2.", "layer_norm2."}, {"attn.proj.", "self_attn.out_proj."},
               {"mlp.fc1.", "mlp.fc1."},    {"mlp.fc2.", "mlp.fc2."}};
    int i;
    char rest[TP_NAME_LEN];
    *part = -1;
    if (!strcmp(name, "vision.patch_embed.proj.weight")) return snprintf(buf, n, OP_VT "embeddings.patch_embedding.weight"), 0;
    if (!strcmp(name, "vision.patch_embed.proj.bias")) return snprintf(buf, n, OP_VT "embeddings.patch_embedding.bias"), 0;
    if (!strcmp(name, "vision.pos_embed")) return snprintf(buf, n, OP_VT "embeddings.position_embedding.weight"), 0;
    if (!strcmp(name, "vision.norm.weight")) return snprintf(buf, n, OP_VT "post_layernorm.weight"), 0;
    if (!strcmp(name, "vision.norm.bias")) return snprintf(buf, n, OP_VT "post_layernorm.bias"), 0;
    if (!strcmp(name, "vision.head.weight")) return snprintf(buf, n, OP_PE "paligemma.model.multi_modal_projector.linear.weight"), 0;
    if (!strcmp(name, "vision.head.bias")) return snprintf(buf, n, OP_PE "paligemma.model.multi_modal_projector.linear.bias"), 0;
    if (!strcmp(name, "prefix.model.embed_tokens.weight")) return snprintf(buf, n, OP_LM "embed_tokens.weight"), 0;
    if (sscanf(name, "vision.blocks.%d.%95s", &i, rest) == 2) {
        if (!strncmp(rest, "attn.qkv.", 9)) { /* timm's fused q, k, v: SigLIP's three projections */
            *part = 0;
            return snprintf(buf, n, OP_VT "encoder.layers.%d.self_attn.%%s_proj.%s", i, rest + 9), 0;
        }
        for (size_t k = 0; k < sizeof vis / sizeof vis[0]; k++)
            if (!strncmp(rest, vis[k].from, strlen(vis[k].from)))
                return snprintf(buf, n, OP_VT "encoder.layers.%d.%s%s", i, vis[k].to, rest + strlen(vis[k].from)), 0;
        return -1;
    }
    if (!strncmp(name, "prefix.model.layers.", 20)) return snprintf(buf, n, OP_LM "%s", name + 13), 0;
    if (!strncmp(name, "expert.model.", 13)) return snprintf(buf, n, OP_PE "gemma_expert.model.%s", name + 13), 0;
    if (!strncmp(name, "expert.", 7)) return snprintf(buf, n, "%s", name + 7), 0;
    return -1;
}

/* The tensors of an openpi checkpoint tprof does not read: the language model's final norm (the prefix's output
 * is only its K/V) and the two LM heads (pi0 produces actions, not tokens) */
static int openpi_unused(const char *name) {
    static const char *const ends[] = {"paligemma.lm_head.weight", "gemma_expert.lm_head.weight",
                                       "language_model.norm.weight"};
    for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
        const size_t a = strlen(name), b = strlen(ends[k]);
        if (a >= b && !strcmp(name + a - b, ends[k])) return 1;
    }
    return 0;
}

/* The shape without its leading 1s (openpi's position embedding is (N, C) where tprof's is (1, N, C)) */
static int squeezed(const int64_t *shape, int ndim, const int64_t **out) {
    while (ndim > 1 && shape[0] == 1) shape++, ndim--;
    *out = shape;
    return ndim;
}

/* One file tensor `fname` into dst as a tensor of shape (ndim, shape) (leading 1s aside), converted to fp32 */
static tp_status read_tensor(const tp_safetensors *st, const char *fname, const char *tname, int ndim,
                             const int64_t *shape, float *dst, unsigned char *used, tp_error *err) {
    const tp_st_tensor *t = tp_st_find(st, fname);
    if (!t) return tp_fail(err, TP_ERR_SHAPE, "%s: no tensor '%s' (openpi's name for %s)", st->path, fname, tname);
    const int64_t *a, *b;
    const int na = squeezed(t->shape, t->ndim, &a), nb = squeezed(shape, ndim, &b);
    int same = na == nb;
    for (int d = 0; same && d < na; d++) same = a[d] == b[d];
    if (!same)
        return tp_fail(err, TP_ERR_SHAPE, "%s: '%s' has shape (%lld%s), %s needs (%lld%s)", st->path, fname,
                       (long long)a[0], na > 1 ? ", ..." : "", tname, (long long)b[0], nb > 1 ? ", ..." : "");
    if (t->dtype != TP_F32 && t->dtype != TP_F16 && t->dtype != TP_BF16)
        return tp_fail(err, TP_ERR_SHAPE, "%s: '%s' is %s; tprof reads F32, F16 and BF16", st->path, fname,
                       tp_dtype_info(t->dtype)->name);
    /* the data section's offsets need not be aligned to the element: decode from an aligned copy */
    const size_t bytes = (size_t)(t->end - t->begin);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return tp_fail(err, TP_ERR_OOM, "out of host memory reading '%s'", fname);
    memcpy(tmp, st->data + t->begin, bytes);
    tp_convert_to_f32(t->dtype, tmp, dst, bytes / tp_dtype_info(t->dtype)->bytes, 1.0f);
    free(tmp);
    used[t - st->tensors] = 1;
    return TP_OK;
}

/* A checkpoint by tprof's names (bench/pi0_reference.py's) through the generic loader, or by openpi's
 * (PI0Pytorch's state_dict, as openpi's convert script saves it): every table entry found and sized, every
 * other tensor one openpi keeps and tprof does not need (else an error naming it). */
static tp_status params_load(const void *cfg, const char *path, tp_params *out, tp_error *err) {
    const tp_pi0_config *c = cfg;
    tp_safetensors st;
    tp_status s = tp_st_open(path, &st, err);
    if (s) return s;
    const int openpi = tp_st_find(&st, OP_VT "embeddings.patch_embedding.weight") != NULL;
    if (!openpi) {
        tp_st_close(&st);
        tp_model m;
        memset(&m, 0, sizeof m);
        m.family = &tp_pi0_family;
        memcpy(m.cfg.bytes, c, sizeof *c);
        return tp_model_params_load_names(&m, path, out, err);
    }
    unsigned char *used = calloc((size_t)(st.n_tensors ? st.n_tensors : 1), 1);
    if (!used || (s = build_table(c, out, NULL, 1, err))) {
        free(used);
        tp_st_close(&st);
        return s ? s : tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    char fname[2 * TP_NAME_LEN], pn[2 * TP_NAME_LEN];
    for (int i = 0; i < out->n_params && !s; i++) {
        tp_param *p = &out->params[i];
        int part;
        if (openpi_name(p->name, fname, sizeof fname, &part)) {
            s = tp_fail(err, TP_ERR_SHAPE, "%s: no openpi name for %s", path, p->name);
            break;
        }
        if (part < 0) {
            /* tied: a file may hold the embedding as the LM head only */
            if (!strcmp(p->name, "prefix.model.embed_tokens.weight") && !tp_st_find(&st, fname))
                snprintf(fname, sizeof fname, "%s", OP_PE "paligemma.lm_head.weight");
            s = read_tensor(&st, fname, p->name, p->ndim, p->shape, p->data, used, err);
            continue;
        }
        int64_t third[TP_MAX_DIMS]; /* q, k, v: a third of the rows each */
        memcpy(third, p->shape, sizeof third);
        third[0] /= 3;
        for (int k = 0; k < 3 && !s; k++) {
            snprintf(pn, sizeof pn, fname, k == 0 ? "q" : k == 1 ? "k" : "v");
            s = read_tensor(&st, pn, p->name, p->ndim, third, p->data + k * (p->numel / 3), used, err);
        }
    }
    for (int t = 0; !s && t < st.n_tensors; t++)
        if (!used[t] && !openpi_unused(st.tensors[t].name))
            s = tp_fail(err, TP_ERR_SHAPE, "%s: tensor '%s' is not part of %s (an openpi checkpoint of another model?)",
                        path, st.tensors[t].name, c->name);
    free(used);
    tp_st_close(&st);
    if (s) tp_params_free(out);
    return s;
}

/* ---- the graph -------------------------------------------------------------------------------------------- */

/* A linear whose parameters are `param` (weight, and bias when bias) and whose op is named `layer` (the expert's
 * steps share one set of weights under per-step op names); the weight's shape checked against the graph's. */
static int lin(tp_graph_builder *b, const char *param, const char *layer, int x, int bias, int ndim,
               const int64_t *shape) {
    tp_op op = {.kind = TP_OP_LINEAR};
    const int in[3] = {x, tp_gb_param(b, param, "weight"), bias ? tp_gb_param(b, param, "bias") : -1};
    if (b->st) return -1;
    const tp_value *xv = &b->g->values[x], *w = &b->g->values[in[1]];
    if (w->shape[0] != shape[ndim - 1] || w->shape[1] != xv->shape[xv->ndim - 1]) {
        b->st = tp_fail(b->err, TP_ERR_SHAPE, "%s: weight (%lld, %lld) where the graph needs (%lld, %lld)", w->name,
                        (long long)w->shape[0], (long long)w->shape[1], (long long)shape[ndim - 1],
                        (long long)xv->shape[xv->ndim - 1]);
        return -1;
    }
    return tp_gb_op(b, &op, layer, in, bias ? 3 : 2, ndim, shape, NULL);
}

static int rmsnorm(tp_graph_builder *b, const char *param, const char *layer, int x, const int64_t *s) {
    tp_op op = {.kind = TP_OP_RMSNORM, .eps = RMS_EPS, .norm_offset = 1.0f};
    const int in[2] = {x, tp_gb_param(b, param, NULL)};
    return tp_gb_op(b, &op, layer, in, 2, 3, s, NULL);
}

/* The K and V of each prefix layer, which every expert step reads */
typedef struct {
    int *k, *v;
} prefix_kv;

/* One Gemma layer of `stage` ("prefix" or "expert"; weights of layer i), ops named `opstage`.layers.i.*: x (B, T, w)
 * -> the layer's output. The prefix (kv->k NULL on the expert's side is read, on the prefix's side written):
 * attention over the own tokens, padded keys beyond n_img + valid[b] masked; the expert: over [the prefix's layer i
 * K, V ; its own], the state token seeing itself only among its own, positions after the valid prefix. */
static int gemma_layer(tp_graph_builder *b, const tp_pi0_config *c, const char *stage, const char *opstage, int i,
                       int x, int64_t T, int w, int mlp, int valid, prefix_kv *kv, int expert) {
    const int64_t B = b->g->batch, H = c->heads, Hk = c->kv_heads, hd = c->head_dim;
    const int64_t xs[3] = {B, T, w}, qs[3] = {B, T, H * hd}, ks[3] = {B, T, Hk * hd}, ms[3] = {B, T, mlp};
    char pn[TP_NAME_LEN], on[TP_NAME_LEN];
#define PN(s) (snprintf(pn, sizeof pn, "%s.model.layers.%d.%s", stage, i, s), pn)
#define ON(s) (snprintf(on, sizeof on, "%s.layers.%d.%s", opstage, i, s), on)
    int h = rmsnorm(b, PN("input_layernorm.weight"), ON("input_layernorm"), x, xs);
    int q = lin(b, PN("self_attn.q_proj"), ON("self_attn.q_proj"), h, 0, 3, qs);
    int k = lin(b, PN("self_attn.k_proj"), ON("self_attn.k_proj"), h, 0, 3, ks);
    int v = lin(b, PN("self_attn.v_proj"), ON("self_attn.v_proj"), h, 0, 3, ks);
    tp_op rq = {.kind = TP_OP_ROPE, .heads = (int)H, .head_dim = (int)hd, .rope = {.theta = ROPE_THETA},
                .prefix = expert ? n_img(c) : 0};
    tp_op rk = rq;
    rk.heads = (int)Hk;
    const int qin[2] = {q, valid}, kin[2] = {k, valid};
    q = tp_gb_op(b, &rq, ON("self_attn.rope_q"), qin, expert ? 2 : 1, 3, qs, NULL);
    k = tp_gb_op(b, &rk, ON("self_attn.rope_k"), kin, expert ? 2 : 1, 3, ks, NULL);
    tp_op at = {.kind = TP_OP_MASKED_ATTENTION, .heads = (int)H, .kv_heads = (int)Hk, .head_dim = (int)hd,
                .scale = (float)(1.0 / sqrt((double)hd)), .prefix = n_img(c), .pool_mode = expert};
    int a;
    if (expert) {
        const int in[6] = {q, k, v, kv->k[i], kv->v[i], valid};
        a = tp_gb_op(b, &at, ON("self_attn"), in, 6, 3, qs, NULL);
    } else {
        const int in[4] = {q, k, v, valid};
        a = tp_gb_op(b, &at, ON("self_attn"), in, 4, 3, qs, NULL);
        kv->k[i] = k;
        kv->v[i] = v;
    }
    a = lin(b, PN("self_attn.o_proj"), ON("self_attn.o_proj"), a, 0, 3, xs);
    x = tp_gb_add(b, ON("residual1"), x, a, 3, xs, NULL);
    h = rmsnorm(b, PN("post_attention_layernorm.weight"), ON("post_attention_layernorm"), x, xs);
    const int gt = lin(b, PN("mlp.gate_proj"), ON("mlp.gate_proj"), h, 0, 3, ms);
    const int up = lin(b, PN("mlp.up_proj"), ON("mlp.up_proj"), h, 0, 3, ms);
    tp_op glu = {.kind = TP_OP_GLU, .act = TP_ACT_GELU_TANH};
    const int gin[2] = {gt, up};
    h = tp_gb_op(b, &glu, ON("mlp.act"), gin, 2, 3, ms, NULL);
    h = lin(b, PN("mlp.down_proj"), ON("mlp.down_proj"), h, 0, 3, xs);
    return tp_gb_add(b, ON("residual2"), x, h, 3, xs, NULL);
#undef PN
#undef ON
}

static int op1(tp_graph_builder *b, tp_op_kind kind, const char *layer, int x, int ndim, const int64_t *s) {
    tp_op op = {.kind = kind};
    return tp_gb_op(b, &op, layer, &x, 1, ndim, s, NULL);
}

static int op2(tp_graph_builder *b, tp_op *op, const char *layer, int x, int y, int ndim, const int64_t *s) {
    const int in[2] = {x, y};
    return tp_gb_op(b, op, layer, in, 2, ndim, s, NULL);
}

static tp_status build_graph(const void *cfg, const tp_params *p, int64_t B, tp_graph *g, tp_error *err) {
    const tp_pi0_config *c = cfg;
    tp_status st = validate(cfg, err);
    if (st) return st;
    if (B <= 0) return tp_fail(err, TP_ERR_ARG, "--batch %lld: must be positive", (long long)B);
    tp_vit_config vc;
    vision_cfg(c, &vc);
    CHECK(tp_vit_mlp_hidden(&vc) == c->v_mlp);
    tp_graph_init(g, B);
    tp_graph_builder b = {g, p, err, TP_OK, NULL};
    const int64_t S = c->img, N = n_img(c), L = c->lang, P = N + L, W = c->width, E = c->e_width, Hn = c->horizon;
    const int64_t Np = N / c->cams;
    /* the inputs, in the packed row's order (pi0.h) */
    const int64_t is[4] = {B, 3 * c->cams, S, S}, ids_s[2] = {B, L}, vs[2] = {B, 1}, ss[2] = {B, c->state_dim},
                  ns[3] = {B, Hn, c->action_dim};
    g->input = tp_graph_add_value(g, "images", TP_VAL_INPUT, 4, is, -1);
    const int ids = tp_graph_add_value(g, "input_ids", TP_VAL_INPUT, 2, ids_s, -1);
    const int valid = tp_graph_add_value(g, "lang_valid", TP_VAL_INPUT, 2, vs, -1);
    const int state = tp_graph_add_value(g, "state", TP_VAL_INPUT, 2, ss, -1);
    int x = tp_graph_add_value(g, "noise", TP_VAL_INPUT, 3, ns, -1);

    /* vision: every camera an image of the ViT, its tokens then the sample's next camera's */
    const int64_t cams_s[4] = {B * c->cams, 3, S, S}, img_s[3] = {B, N, W};
    int img = op1(&b, TP_OP_RESHAPE, "vision.cameras", g->input, 4, cams_s);
    b.prefix = "vision.";
    img = tp_vit_build_into(&b, &vc, img, B * c->cams);
    b.prefix = NULL;
    img = op1(&b, TP_OP_RESHAPE, "vision.tokens", img, 3, img_s);
    (void)Np;
    if (!b.st) tp_graph_tap(g, img, "vision: image tokens");

    /* prefix: the image tokens, then the language tokens scaled by sqrt(width); its layers' K, V kept */
    const int64_t ls[3] = {B, L, W}, ps[3] = {B, P, W};
    tp_op te = {.kind = TP_OP_TOKEN_EMBED, .scale = (float)sqrt((double)W)};
    const int te_in[2] = {ids, tp_gb_param(&b, "prefix.model.embed_tokens", "weight")};
    const int lang = tp_gb_op(&b, &te, "prefix.model.embed_tokens", te_in, 2, 3, ls, NULL);
    tp_op cat = {.kind = TP_OP_CONCAT};
    int h = op2(&b, &cat, "prefix.tokens", img, lang, 3, ps);
    prefix_kv kv = {calloc((size_t)c->depth, sizeof(int)), calloc((size_t)c->depth, sizeof(int))};
    if (!kv.k || !kv.v) {
        free(kv.k);
        free(kv.v);
        tp_graph_free(g);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int i = 0; i < c->depth; i++) h = gemma_layer(&b, c, "prefix", "prefix", i, h, P, (int)W, c->mlp, valid, &kv, 0);
    /* what the expert reads of the prefix: its K, V cache (the last 20 layers' of a deeper prefix: taps are few) */
    const int first_kv = c->depth > 20 ? c->depth - 20 : 0;
    char kl[40];
    snprintf(kl, sizeof kl, first_kv ? "prefix: K, V of the last 20 layers" : "prefix: K, V of every layer");
    for (int i = first_kv; i < c->depth && !b.st; i++) {
        tp_graph_tap(g, kv.k[i], kl);
        tp_graph_tap(g, kv.v[i], kl);
    }

    /* the expert's steps from t = 1 (float32 steps of dt, as openpi's loop): the state token (one, every step's),
     * the action tokens with the time, the layers over the prefix's K, V, the velocity, x + dt v */
    const int64_t st_s[2] = {B, E}, st3[3] = {B, 1, E}, as[3] = {B, Hn, E}, a2[3] = {B, Hn, 2 * E},
                  sx[3] = {B, 1 + Hn, E}, vs3[3] = {B, Hn, c->action_dim};
    /* the state and x (fp32 inputs, x fp32 through the loop as openpi keeps it) reach their linears through a
     * RESHAPE each: the GPU plan makes it the conversion into the activations' type (plan.c) */
    const int64_t in_s[2] = {B, c->state_dim};
    int stok = op1(&b, TP_OP_RESHAPE, "expert.state_in", state, 2, in_s);
    stok = lin(&b, "expert.state_proj", "expert.state_proj", stok, 1, 2, st_s);
    stok = op1(&b, TP_OP_RESHAPE, "expert.state_token", stok, 3, st3);
    const float dt = (float)(-1.0 / c->steps);
    float t = 1.0f;
    char l[TP_NAME_LEN], os[48];
#define L(s) (snprintf(l, sizeof l, "expert.step%d.%s", s_i, s), l)
    for (int s_i = 0; s_i < c->steps; s_i++) {
        snprintf(os, sizeof os, "expert.step%d", s_i);
        int a = op1(&b, TP_OP_RESHAPE, L("x_in"), x, 3, vs3);
        a = lin(&b, "expert.action_in_proj", L("action_in_proj"), a, 1, 3, as);
        tp_op tc = {.kind = TP_OP_TIME_CONCAT, .scale = t};
        a = tp_gb_op(&b, &tc, L("time"), &a, 1, 3, a2, NULL);
        a = lin(&b, "expert.action_time_mlp_in", L("action_time_mlp_in"), a, 1, 3, as);
        a = op1(&b, TP_OP_SILU, L("action_time_act"), a, 3, as);
        a = lin(&b, "expert.action_time_mlp_out", L("action_time_mlp_out"), a, 1, 3, as);
        int e = op2(&b, &cat, L("tokens"), stok, a, 3, sx);
        for (int i = 0; i < c->depth; i++) e = gemma_layer(&b, c, "expert", os, i, e, 1 + Hn, (int)E, c->e_mlp, valid, &kv, 1);
        e = rmsnorm(&b, "expert.model.norm.weight", L("norm"), e, sx);
        tp_op sl = {.kind = TP_OP_SLICE, .prefix = 1};
        e = tp_gb_op(&b, &sl, L("action_tokens"), &e, 1, 3, as, NULL);
        const int v = lin(&b, "expert.action_out_proj", L("action_out_proj"), e, 1, 3, vs3);
        tp_op eu = {.kind = TP_OP_EULER, .scale = dt};
        x = tp_gb_op(&b, &eu, L("euler"), (const int[2]){x, v}, 2, 3, vs3, s_i + 1 == c->steps ? "actions" : NULL);
        char tl[40];
        snprintf(tl, sizeof tl, "expert: x after step %d of %d", s_i + 1, c->steps);
        if (!b.st && g->n_taps < TP_MAX_TAPS) tp_graph_tap(g, x, tl); /* a preset of many steps taps the first */
        t += dt;
    }
#undef L
    free(kv.k);
    free(kv.v);
    g->output = x;
    if (b.st) tp_graph_free(g);
    return b.st;
}

/* ---- the family interface (model.h) ------------------------------------------------------------------------- */

static int preset_count(void) { return N_PRESETS; }

static void preset_info(int i, const char **name, const char **alias) {
    *name = PRESETS[i].name;
    *alias = PRESETS[i].name;
}

static void preset_config(int i, void *cfg) { *(tp_pi0_config *)cfg = PRESETS[i]; }

static const char *model_name(const void *cfg) { return ((const tp_pi0_config *)cfg)->name; }

static const tp_knob KNOBS[] = {
    {"--steps", "N", "pipelines: the action expert's Euler steps (openpi: 10)"},
    {"--cameras", "N", "pipelines: camera images per observation (openpi's pi0: 3)"},
    {NULL, NULL, NULL},
};

static int knob(void *cfg, const char *name, const char *val, tp_error *err) {
    tp_pi0_config *c = cfg;
    long v;
    int *f = strcmp(name, "--steps") == 0 ? &c->steps : strcmp(name, "--cameras") == 0 ? &c->cams : NULL;
    if (!f) return 0;
    if (tp_fam_parse_long(name, val, 1, 64, &v, err)) return -1;
    *f = (int)v;
    if (!strstr(c->name, "+custom")) tp_append(c->name, sizeof c->name, "+custom");
    return 1;
}

static void describe(const void *cfg, char *buf, size_t n) {
    const tp_pi0_config *c = cfg;
    snprintf(buf, n, "pipeline: vision %d x %dpx/%d (dim %d, depth %d, %d heads, MLP %d, tanh GELU) -> %d image + %d "
             "language tokens through a prefix Gemma (dim %d, depth %d, %d heads over %d KV of %d, GeGLU %d) -> "
             "%d Euler steps of the expert (dim %d, MLP %d) over %d actions of %d",
             c->cams, c->img, c->patch, c->v_width, c->v_depth, c->v_heads, c->v_mlp, n_img(c), c->lang, c->width,
             c->depth, c->heads, c->kv_heads, c->head_dim, c->mlp, c->steps, c->e_width, c->e_mlp, c->horizon,
             c->action_dim);
}


static json_t *to_json(const void *cfg) {
    const tp_pi0_config *c = cfg;
    json_t *j = json_pack("{s:s}", "name", c->name);
#define PUT(f) if (j && json_object_set_new(j, #f, json_integer(c->f))) { json_decref(j); j = NULL; }
    FIELDS(PUT)
#undef PUT
    return j;
}

static tp_status from_json(const json_t *j, void *cfg, tp_error *err) {
#define NAME(f) #f,
    static const char *const keys[] = {"name", FIELDS(NAME) NULL};
#undef NAME
    tp_pi0_config *c = cfg;
    memset(c, 0, sizeof *c);
    const json_t *v;
    tp_status s = tp_fam_jkeys(j, "model", keys, err);
    if (!s) s = tp_fam_jfield(j, "model", "name", 0, &v, err);
    if (s) return s;
    if (!json_is_string(v) || json_string_length(v) >= sizeof c->name)
        return tp_fail(err, TP_ERR_FORMAT, "model: 'name' must be a string of at most %zu bytes", sizeof c->name - 1);
    snprintf(c->name, sizeof c->name, "%s", json_string_value(v));
#define GET(f) if (!s) s = tp_fam_jint(j, "model", #f, 1, 1 << 24, &c->f, err);
    FIELDS(GET)
#undef GET
    if (s) return s;
    tp_error ve;
    if (validate(c, &ve)) return tp_fail(err, TP_ERR_FORMAT, "model: %s", ve.msg);
    return TP_OK;
}

static tp_status checkpoint(void *cfg, const char *weights, char *note, size_t n, tp_error *err) {
    (void)cfg, (void)weights, (void)err;
    if (n) note[0] = 0; /* the weights' names say whose they are (params_load): nothing beside them to read */
    return TP_OK;
}

static int64_t row_len(const tp_pi0_config *c) {
    return (int64_t)c->cams * 3 * c->img * c->img + c->lang + 1 + c->state_dim + (int64_t)c->horizon * c->action_dim;
}

static void input(const void *cfg, tp_input_desc *d) {
    const tp_pi0_config *c = cfg;
    memset(d, 0, sizeof *d);
    d->kind = TP_INPUT_PACKED;
    d->ndim = 1;
    d->shape[0] = row_len(c);
    d->unit = "observation";
    snprintf(d->preprocess, sizeof d->preprocess, "one row per observation: %d images of 3 x %d x %d in [-1, 1], %d "
             "token ids, their valid count, a state of %d, noise of %d x %d", c->cams, c->img, c->img, c->lang,
             c->state_dim, c->horizon, c->action_dim);
}

static void output(const void *cfg, tp_output_desc *d) {
    const tp_pi0_config *c = cfg;
    d->ndim = 2;
    d->shape[0] = c->horizon;
    d->shape[1] = c->action_dim;
    d->what = "actions";
    d->classes = 0;
}

/* Random observations: images uniform in [-1, 1], token ids in [0, vocab) all valid, state and noise N(0, 1) */
static tp_status make_input(const void *cfg, int B, uint64_t seed, const char *path, float *dst, char *desc,
                            size_t n, tp_error *err) {
    const tp_pi0_config *c = cfg;
    if (path) return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: pipelines read no files yet (--image): synthesized "
                             "observations only", path);
    tp_rng r;
    tp_rng_seed_named(&r, seed, "observation");
    const int64_t nimg = (int64_t)c->cams * 3 * c->img * c->img, row = row_len(c);
    for (int64_t b = 0; b < B; b++) {
        float *d = dst + b * row;
        for (int64_t i = 0; i < nimg; i++) *d++ = (float)(2.0 * tp_rng_uniform(&r) - 1.0);
        for (int i = 0; i < c->lang; i++) *d++ = (float)(tp_rng_u64(&r) % (uint64_t)c->vocab);
        *d++ = (float)c->lang;
        for (int64_t i = 0; i < c->state_dim + (int64_t)c->horizon * c->action_dim; i++) *d++ = (float)tp_rng_normal(&r);
    }
    snprintf(desc, n, "random observations (images U[-1,1], %d valid token ids, state and noise N(0,1)), seed %llu",
             c->lang, (unsigned long long)seed);
    return TP_OK;
}

static tp_status shapes(const void *cfg, tp_model_shapes *s, tp_error *err) {
    (void)s;
    return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: tprof lint reads ViTs and decoders; pipelines not yet",
                   ((const tp_pi0_config *)cfg)->name);
}

static void fix(const void *cfg, const tp_model_shapes *s, tp_fix_kind kind, int block, int mult, char *buf, size_t n) {
    (void)cfg, (void)s, (void)kind, (void)block, (void)mult;
    if (n) buf[0] = 0;
}

const tp_family tp_pi0_family = {
    .name = "pipeline",
    .title = "vision-language-action pipeline (openpi's pi0: SigLIP vision, Gemma prefix, action expert)",
    .cfg_size = sizeof(tp_pi0_config),
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
    .params_load = params_load,
    .build_graph = build_graph,
    .build_step = NULL,
    .tp_check = NULL,
    .param_split = NULL,
    .input = input,
    .output = output,
    .make_input = make_input,
    .shapes = shapes,
    .fix = fix,
};
