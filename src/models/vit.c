#include "models/vit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "io/safetensors.h"

/* timm's registered ViTs (vision_transformer.py); embed dim, depth and heads from their model_args. */
static const tp_vit_preset PRESETS[] = {
    {"vit_tiny_patch16_224", "vit-tiny", 224, 16, 192, 12, 3},
    {"vit_tiny_patch16_384", "vit-tiny-384", 384, 16, 192, 12, 3},
    {"vit_small_patch32_224", "vit-s32", 224, 32, 384, 12, 6},
    {"vit_small_patch16_224", "vit-small", 224, 16, 384, 12, 6},
    {"vit_small_patch16_384", "vit-small-384", 384, 16, 384, 12, 6},
    {"vit_base_patch8_224", "vit-b8", 224, 8, 768, 12, 12},
    {"vit_base_patch16_224", "vit-b16", 224, 16, 768, 12, 12},
    {"vit_base_patch32_224", "vit-b32", 224, 32, 768, 12, 12},
    {"vit_base_patch16_384", "vit-b16-384", 384, 16, 768, 12, 12},
    {"vit_large_patch16_224", "vit-l16", 224, 16, 1024, 24, 16},
    {"vit_large_patch16_384", "vit-l16-384", 384, 16, 1024, 24, 16},
    {"vit_huge_patch14_224", "vit-h14", 224, 14, 1280, 32, 16},
    {NULL, NULL, 0, 0, 0, 0, 0},
};

const tp_vit_preset *tp_vit_presets(void) { return PRESETS; }

tp_status tp_vit_config_preset(const char *name, tp_vit_config *cfg, tp_error *err) {
    for (const tp_vit_preset *p = PRESETS; p->name; p++) {
        if (strcmp(name, p->name) != 0 && strcmp(name, p->alias) != 0) continue;
        memset(cfg, 0, sizeof *cfg);
        snprintf(cfg->name, sizeof cfg->name, "%s", p->name);
        cfg->img_size = p->img_size;
        cfg->patch_size = p->patch_size;
        cfg->in_chans = 3;
        cfg->embed_dim = p->embed_dim;
        cfg->depth = p->depth;
        cfg->num_heads = p->num_heads;
        cfg->mlp_ratio = 4.0;
        cfg->class_token = 1;
        cfg->global_pool = 0;
        /* timm's default pretrained tags (augreg in21k fine-tuned on in1k) have 1000 classes; the huge model's
         * only tag (orig_in21k) has no head. */
        cfg->num_classes = strcmp(p->name, "vit_huge_patch14_224") == 0 ? 0 : 1000;
        cfg->ln_eps = 1e-6f;
        /* pretrained_cfg of those tags: mean = std = (0.5, 0.5, 0.5), bicubic, crop_pct 0.9 at 224 and 1.0 at
         * 384 */
        cfg->pre.img_size = p->img_size;
        cfg->pre.crop_pct = p->img_size >= 384 ? 1.0 : 0.9;
        for (int c = 0; c < 3; c++) cfg->pre.mean[c] = cfg->pre.std[c] = 0.5f;
        return TP_OK;
    }
    char list[1024] = "";
    for (const tp_vit_preset *p = PRESETS; p->name; p++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s (%s)", l ? ", " : "", p->alias, p->name);
    }
    return tp_fail(err, TP_ERR_ARG, "unknown model '%s'; known: %s", name, list);
}

tp_status tp_vit_config_validate(const tp_vit_config *c, tp_error *err) {
    if (c->img_size <= 0) return tp_fail(err, TP_ERR_ARG, "--img-size %d: must be positive", c->img_size);
    if (c->patch_size <= 0 || c->img_size % c->patch_size)
        return tp_fail(err, TP_ERR_ARG, "--patch-size %d: must divide the image size %d", c->patch_size,
                       c->img_size);
    if (c->in_chans != 3) return tp_fail(err, TP_ERR_ARG, "in_chans %d: only 3-channel images", c->in_chans);
    if (c->embed_dim <= 0) return tp_fail(err, TP_ERR_ARG, "--embed-dim %d: must be positive", c->embed_dim);
    if (c->num_heads <= 0 || c->embed_dim % c->num_heads)
        return tp_fail(err, TP_ERR_ARG, "--heads %d: must divide the embed dim %d", c->num_heads, c->embed_dim);
    if (c->depth <= 0) return tp_fail(err, TP_ERR_ARG, "--depth %d: must be positive", c->depth);
    if (!(c->mlp_ratio > 0) || tp_vit_mlp_hidden(c) <= 0)
        return tp_fail(err, TP_ERR_ARG, "--mlp-ratio %g: must give a positive hidden size", c->mlp_ratio);
    if (c->num_classes < 0) return tp_fail(err, TP_ERR_ARG, "--num-classes %d: must be >= 0", c->num_classes);
    if (!(c->ln_eps > 0)) return tp_fail(err, TP_ERR_ARG, "--ln-eps %g: must be positive", (double)c->ln_eps);
    if (c->global_pool == 0 && !c->class_token)
        return tp_fail(err, TP_ERR_ARG, "--global-pool token needs a class token (use --global-pool avg)");
    if (c->global_pool < 0 || c->global_pool > 1) return tp_fail(err, TP_ERR_ARG, "unknown global pool");
    return TP_OK;
}

int tp_vit_tokens(const tp_vit_config *c) {
    int g = c->img_size / c->patch_size;
    return g * g + (c->class_token ? 1 : 0);
}

int tp_vit_mlp_hidden(const tp_vit_config *c) { return (int)(c->embed_dim * c->mlp_ratio); }

void tp_params_free(tp_params *p) {
    for (int i = 0; i < p->n_params; i++) free(p->params[i].data);
    free(p->params);
    p->params = NULL;
    p->n_params = 0;
}

int tp_params_find(const tp_params *p, const char *name) {
    for (int i = 0; i < p->n_params; i++)
        if (strcmp(p->params[i].name, name) == 0) return i;
    return -1;
}

size_t tp_params_count(const tp_params *p) {
    size_t n = 0;
    for (int i = 0; i < p->n_params; i++) n += (size_t)p->params[i].numel;
    return n;
}

/* How each parameter is initialized (timm init_weights_vit_timm plus PyTorch defaults). */
typedef enum { INIT_TRUNC02, INIT_ZERO, INIT_ONE, INIT_CLS, INIT_CONV_W, INIT_CONV_B } init_kind;

typedef struct {
    tp_params *p;
    init_kind *init;
    int cap;
    int alloc; /* 0: names and shapes only */
} param_builder;

static int add_param(param_builder *b, const char *name, init_kind k, int ndim, int64_t d0, int64_t d1, int64_t d2,
                     int64_t d3) {
    int alloc = b->alloc;
    if (b->p->n_params == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        tp_param *np = realloc(b->p->params, sizeof(tp_param) * (size_t)b->cap);
        init_kind *ni = realloc(b->init, sizeof(init_kind) * (size_t)b->cap);
        if (!np || !ni) {
            if (np) b->p->params = np;
            if (ni) b->init = ni;
            return -1;
        }
        b->p->params = np;
        b->init = ni;
    }
    tp_param *t = &b->p->params[b->p->n_params];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    int64_t d[4] = {d0, d1, d2, d3};
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = d[i];
        t->numel *= d[i];
    }
    if (alloc) {
        t->data = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
        if (!t->data) return -1;
    }
    b->init[b->p->n_params] = k;
    b->p->n_params++;
    return 0;
}

static tp_status build_table(const tp_vit_config *c, tp_params *out, init_kind **init, int alloc, tp_error *err) {
    param_builder b = {out, NULL, 0, alloc};
    memset(out, 0, sizeof *out);
    const int64_t C = c->embed_dim, P = c->patch_size, T = tp_vit_tokens(c), Hd = tp_vit_mlp_hidden(c);
    char name[TP_NAME_LEN];
    int bad = 0;
    if (c->class_token) bad |= add_param(&b, "cls_token", INIT_CLS, 3, 1, 1, C, 0);
    bad |= add_param(&b, "pos_embed", INIT_TRUNC02, 3, 1, T, C, 0);
    bad |= add_param(&b, "patch_embed.proj.weight", INIT_CONV_W, 4, C, 3, P, P);
    bad |= add_param(&b, "patch_embed.proj.bias", INIT_CONV_B, 1, C, 0, 0, 0);
    for (int i = 0; i < c->depth && !bad; i++) {
#define P1(suffix, kind, n)                                         \
    snprintf(name, sizeof name, "blocks.%d.%s", i, suffix);        \
    bad |= add_param(&b, name, kind, 1, n, 0, 0, 0);
#define P2(suffix, kind, n, k)                                      \
    snprintf(name, sizeof name, "blocks.%d.%s", i, suffix);        \
    bad |= add_param(&b, name, kind, 2, n, k, 0, 0);
        P1("norm1.weight", INIT_ONE, C);
        P1("norm1.bias", INIT_ZERO, C);
        P2("attn.qkv.weight", INIT_TRUNC02, 3 * C, C);
        P1("attn.qkv.bias", INIT_ZERO, 3 * C);
        P2("attn.proj.weight", INIT_TRUNC02, C, C);
        P1("attn.proj.bias", INIT_ZERO, C);
        P1("norm2.weight", INIT_ONE, C);
        P1("norm2.bias", INIT_ZERO, C);
        P2("mlp.fc1.weight", INIT_TRUNC02, Hd, C);
        P1("mlp.fc1.bias", INIT_ZERO, Hd);
        P2("mlp.fc2.weight", INIT_TRUNC02, C, Hd);
        P1("mlp.fc2.bias", INIT_ZERO, C);
#undef P1
#undef P2
    }
    const char *norm = c->global_pool == 1 ? "fc_norm" : "norm";
    snprintf(name, sizeof name, "%s.weight", norm);
    bad |= add_param(&b, name, INIT_ONE, 1, C, 0, 0, 0);
    snprintf(name, sizeof name, "%s.bias", norm);
    bad |= add_param(&b, name, INIT_ZERO, 1, C, 0, 0, 0);
    if (c->num_classes > 0) {
        bad |= add_param(&b, "head.weight", INIT_TRUNC02, 2, c->num_classes, C, 0, 0);
        bad |= add_param(&b, "head.bias", INIT_ZERO, 1, c->num_classes, 0, 0, 0);
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

tp_status tp_vit_params_init(const tp_vit_config *c, uint64_t seed, int nonzero_bias, tp_params *out,
                             tp_error *err) {
    init_kind *init = NULL;
    tp_status s = build_table(c, out, &init, 1, err);
    if (s) return s;
    for (int i = 0; i < out->n_params; i++) {
        tp_param *t = &out->params[i];
        tp_rng r;
        tp_rng_seed_named(&r, seed, t->name); /* each tensor's values depend on its name only */
        double fan_in = (double)c->in_chans * c->patch_size * c->patch_size, bound = 1.0 / sqrt(fan_in);
        for (int64_t j = 0; j < t->numel; j++) {
            double v = 0;
            switch (init[i]) {
            case INIT_TRUNC02: v = tp_rng_trunc_normal(&r, 0, 0.02, -2, 2); break;
            case INIT_ZERO: v = nonzero_bias ? 0.05 * tp_rng_normal(&r) : 0.0; break;
            case INIT_ONE: v = nonzero_bias ? 1.0 + 0.1 * tp_rng_normal(&r) : 1.0; break;
            case INIT_CLS: v = nonzero_bias ? 0.02 * tp_rng_normal(&r) : 1e-6 * tp_rng_normal(&r); break;
            case INIT_CONV_W:
            case INIT_CONV_B: v = bound * (2.0 * tp_rng_uniform(&r) - 1.0); break;
            }
            t->data[j] = (float)v;
        }
    }
    free(init);
    return TP_OK;
}

tp_status tp_vit_params_shapes(const tp_vit_config *c, tp_params *out, tp_error *err) {
    tp_status s = tp_vit_config_validate(c, err);
    return s ? s : build_table(c, out, NULL, 0, err);
}

tp_status tp_vit_params_load(const tp_vit_config *c, const char *path, tp_params *out, tp_error *err) {
    tp_status s = build_table(c, out, NULL, 1, err);
    if (s) return s;
    tp_param_spec *specs = calloc((size_t)out->n_params, sizeof *specs);
    if (!specs) {
        tp_params_free(out);
        return tp_fail(err, TP_ERR_OOM, "out of host memory loading %s", path);
    }
    for (int i = 0; i < out->n_params; i++) {
        specs[i].name = out->params[i].name;
        specs[i].ndim = out->params[i].ndim;
        for (int d = 0; d < out->params[i].ndim; d++) specs[i].shape[d] = out->params[i].shape[d];
        specs[i].dst = out->params[i].data;
    }
    s = tp_st_load_params(path, specs, out->n_params, err);
    free(specs);
    if (s) tp_params_free(out);
    return s;
}

static int param_value(tp_graph *g, const tp_params *p, const char *name, tp_error *err, tp_status *st) {
    int i = tp_params_find(p, name);
    if (i < 0) {
        *st = tp_fail(err, TP_ERR_SHAPE, "parameter '%s' missing from the model's table", name);
        return -1;
    }
    return tp_graph_add_value(g, name, TP_VAL_PARAM, p->params[i].ndim, p->params[i].shape, i);
}

tp_status tp_vit_build_graph(const tp_vit_config *c, const tp_params *p, int64_t B, tp_graph *g, tp_error *err) {
    tp_status st = tp_vit_config_validate(c, err);
    if (st) return st;
    if (B <= 0) return tp_fail(err, TP_ERR_ARG, "--batch %lld: must be positive", (long long)B);
    tp_graph_init(g, B);
    const int64_t S = c->img_size, C = c->embed_dim, Pz = c->patch_size, Np = (S / Pz) * (S / Pz);
    const int64_t T = tp_vit_tokens(c), H = c->num_heads, D = C / H, Hd = tp_vit_mlp_hidden(c);
    st = TP_OK;
#define PV(name) param_value(g, p, name, err, &st)
    int64_t img_shape[4] = {B, 3, S, S};
    g->input = tp_graph_add_value(g, "input", TP_VAL_INPUT, 4, img_shape, -1);

    tp_op op;
    memset(&op, 0, sizeof op);
    op.kind = TP_OP_PATCH_EMBED;
    op.patch = (int)Pz;
    snprintf(op.layer, sizeof op.layer, "patch_embed.proj");
    int in[4] = {g->input, PV("patch_embed.proj.weight"), PV("patch_embed.proj.bias")};
    if (st) goto fail;
    int64_t pe_shape[3] = {B, Np, C};
    int x = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 3, pe_shape, NULL));

    memset(&op, 0, sizeof op);
    op.kind = TP_OP_EMBED_TOKENS;
    snprintf(op.layer, sizeof op.layer, "pos_embed");
    int64_t xs[3] = {B, T, C};
    in[0] = x;
    in[1] = PV("pos_embed");
    int n_in = 2;
    if (c->class_token) in[n_in++] = PV("cls_token");
    if (st) goto fail;
    x = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, n_in, 3, xs, "tokens"));

    char name[TP_NAME_LEN], pn[TP_NAME_LEN + 32];
    for (int i = 0; i < c->depth; i++) {
        int64_t qkv_s[3] = {B, T, 3 * C}, hid_s[3] = {B, T, Hd};
        /* norm1 */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_LAYERNORM;
        op.eps = c->ln_eps;
        snprintf(op.layer, sizeof op.layer, "blocks.%d.norm1", i);
        snprintf(pn, sizeof pn, "%s.weight", op.layer), in[1] = PV(pn);
        snprintf(pn, sizeof pn, "%s.bias", op.layer), in[2] = PV(pn);
        in[0] = x;
        if (st) goto fail;
        int h = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 3, xs, NULL));
        /* attn.qkv */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_LINEAR;
        snprintf(op.layer, sizeof op.layer, "blocks.%d.attn.qkv", i);
        snprintf(pn, sizeof pn, "%s.weight", op.layer), in[1] = PV(pn);
        snprintf(pn, sizeof pn, "%s.bias", op.layer), in[2] = PV(pn);
        in[0] = h;
        if (st) goto fail;
        h = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 3, qkv_s, NULL));
        /* attention core */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_ATTENTION;
        op.heads = (int)H;
        op.head_dim = (int)D;
        op.scale = (float)(1.0 / sqrt((double)D));
        snprintf(op.layer, sizeof op.layer, "blocks.%d.attn", i);
        in[0] = h;
        h = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 1, 3, xs, NULL));
        /* attn.proj */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_LINEAR;
        snprintf(op.layer, sizeof op.layer, "blocks.%d.attn.proj", i);
        snprintf(pn, sizeof pn, "%s.weight", op.layer), in[1] = PV(pn);
        snprintf(pn, sizeof pn, "%s.bias", op.layer), in[2] = PV(pn);
        in[0] = h;
        if (st) goto fail;
        h = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 3, xs, NULL));
        /* residual 1 */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_ADD;
        snprintf(op.layer, sizeof op.layer, "blocks.%d.residual1", i);
        in[0] = x;
        in[1] = h;
        x = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 2, 3, xs, NULL));
        /* norm2 */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_LAYERNORM;
        op.eps = c->ln_eps;
        snprintf(op.layer, sizeof op.layer, "blocks.%d.norm2", i);
        snprintf(pn, sizeof pn, "%s.weight", op.layer), in[1] = PV(pn);
        snprintf(pn, sizeof pn, "%s.bias", op.layer), in[2] = PV(pn);
        in[0] = x;
        if (st) goto fail;
        h = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 3, xs, NULL));
        /* mlp.fc1 */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_LINEAR;
        snprintf(op.layer, sizeof op.layer, "blocks.%d.mlp.fc1", i);
        snprintf(pn, sizeof pn, "%s.weight", op.layer), in[1] = PV(pn);
        snprintf(pn, sizeof pn, "%s.bias", op.layer), in[2] = PV(pn);
        in[0] = h;
        if (st) goto fail;
        h = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 3, hid_s, NULL));
        /* mlp.act */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_GELU;
        snprintf(op.layer, sizeof op.layer, "blocks.%d.mlp.act", i);
        in[0] = h;
        h = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 1, 3, hid_s, NULL));
        /* mlp.fc2 */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_LINEAR;
        snprintf(op.layer, sizeof op.layer, "blocks.%d.mlp.fc2", i);
        snprintf(pn, sizeof pn, "%s.weight", op.layer), in[1] = PV(pn);
        snprintf(pn, sizeof pn, "%s.bias", op.layer), in[2] = PV(pn);
        in[0] = h;
        if (st) goto fail;
        h = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 3, xs, NULL));
        /* residual 2 */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_ADD;
        snprintf(op.layer, sizeof op.layer, "blocks.%d.residual2", i);
        in[0] = x;
        in[1] = h;
        snprintf(name, sizeof name, "blocks.%d.out", i);
        x = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 2, 3, xs, name));
    }
    int64_t pooled_s[2] = {B, C};
    if (c->global_pool == 0) {
        /* timm: x = norm(x) over all tokens, then pool takes the class token */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_LAYERNORM;
        op.eps = c->ln_eps;
        snprintf(op.layer, sizeof op.layer, "norm");
        in[0] = x, in[1] = PV("norm.weight"), in[2] = PV("norm.bias");
        if (st) goto fail;
        x = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 3, xs, NULL));
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_POOL;
        op.pool_mode = 0;
        snprintf(op.layer, sizeof op.layer, "pool");
        in[0] = x;
        x = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 1, 2, pooled_s, NULL));
    } else {
        /* timm: avg over the non-prefix tokens, then fc_norm */
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_POOL;
        op.pool_mode = 1;
        op.prefix = c->class_token ? 1 : 0;
        snprintf(op.layer, sizeof op.layer, "pool");
        in[0] = x;
        x = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 1, 2, pooled_s, NULL));
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_LAYERNORM;
        op.eps = c->ln_eps;
        snprintf(op.layer, sizeof op.layer, "fc_norm");
        in[0] = x, in[1] = PV("fc_norm.weight"), in[2] = PV("fc_norm.bias");
        if (st) goto fail;
        x = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 2, pooled_s, NULL));
    }
    if (c->num_classes > 0) {
        int64_t logit_s[2] = {B, c->num_classes};
        memset(&op, 0, sizeof op);
        op.kind = TP_OP_LINEAR;
        snprintf(op.layer, sizeof op.layer, "head");
        in[0] = x, in[1] = PV("head.weight"), in[2] = PV("head.bias");
        if (st) goto fail;
        x = tp_graph_op_out(g, tp_graph_add_op(g, &op, in, 3, 2, logit_s, "logits"));
    }
    g->output = x;
#undef PV
    return TP_OK;
fail:
    tp_graph_free(g);
    return st;
}
