#include "models/vit.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/util.h"
#include "core/rng.h"
#include "io/timm_config.h"
#include "models/builder.h"

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
        cfg->pre.interpolation = TP_INTERP_BICUBIC;
        cfg->pre.crop_mode = TP_CROP_CENTER;
        snprintf(cfg->pre_source, sizeof cfg->pre_source, "the preset %s's timm pretrained_cfg", p->name);
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
    if (c->global_pool == TP_VIT_POOL_TOKEN && !c->class_token)
        return tp_fail(err, TP_ERR_ARG, "--global-pool token needs a class token (use --global-pool avg or none)");
    if (c->global_pool < 0 || c->global_pool > TP_VIT_POOL_NONE) return tp_fail(err, TP_ERR_ARG, "unknown global pool");
    if (c->gelu_tanh != 0 && c->gelu_tanh != 1) return tp_fail(err, TP_ERR_ARG, "unknown MLP activation");
    if (c->pre.img_size != c->img_size)
        return tp_fail(err, TP_ERR_ARG, "preprocessing crops %d px but the model takes %d", c->pre.img_size,
                       c->img_size);
    if (!(c->pre.crop_pct > 0) || !isfinite(c->pre.crop_pct))
        return tp_fail(err, TP_ERR_ARG, "--crop-pct %g: must be a positive number", c->pre.crop_pct);
    for (int k = 0; k < 3; k++)
        if (!isfinite(c->pre.mean[k]) || !isfinite(c->pre.std[k]) || c->pre.std[k] == 0.0f)
            return tp_fail(err, TP_ERR_ARG, "preprocessing: mean[%d] = %g, std[%d] = %g: need finite values, std != 0",
                           k, (double)c->pre.mean[k], k, (double)c->pre.std[k]);
    return TP_OK;
}

int tp_vit_tokens(const tp_vit_config *c) {
    int g = c->img_size / c->patch_size;
    return g * g + (c->class_token ? 1 : 0);
}

int tp_vit_mlp_hidden(const tp_vit_config *c) { return (int)(c->embed_dim * c->mlp_ratio); }

const char *tp_vit_pool_name(int pool) {
    return pool == TP_VIT_POOL_TOKEN ? "token" : pool == TP_VIT_POOL_AVG ? "avg" : pool == TP_VIT_POOL_NONE ? "none" : "?";
}

static int pool_parse(const char *s) {
    return !strcmp(s, "token") ? TP_VIT_POOL_TOKEN : !strcmp(s, "avg") ? TP_VIT_POOL_AVG
                                                 : !strcmp(s, "none") ? TP_VIT_POOL_NONE : -1;
}

/* timm's act_layer names for the two GELU forms */
static const char *act_name(int tanh_form) { return tanh_form ? "gelu_tanh" : "gelu"; }
static int act_parse(const char *s) { return !strcmp(s, "gelu") ? 0 : !strcmp(s, "gelu_tanh") ? 1 : -1; }

/* How each parameter is initialized (timm init_weights_vit_timm plus PyTorch defaults). */
typedef enum { INIT_TRUNC02, INIT_ZERO, INIT_ONE, INIT_CLS, INIT_CONV_W, INIT_CONV_B } init_kind;

static tp_status build_table(const tp_vit_config *c, tp_params *out, int **init, int alloc, tp_error *err) {
    tp_param_builder b = {out, NULL, 0, alloc};
    memset(out, 0, sizeof *out);
    const int64_t C = c->embed_dim, P = c->patch_size, T = tp_vit_tokens(c), Hd = tp_vit_mlp_hidden(c);
    char name[TP_NAME_LEN];
    int bad = 0;
    if (c->class_token) bad |= tp_pb_add(&b, "cls_token", INIT_CLS, 3, 1, 1, C, 0);
    bad |= tp_pb_add(&b, "pos_embed", INIT_TRUNC02, 3, 1, T, C, 0);
    bad |= tp_pb_add(&b, "patch_embed.proj.weight", INIT_CONV_W, 4, C, 3, P, P);
    bad |= tp_pb_add(&b, "patch_embed.proj.bias", INIT_CONV_B, 1, C, 0, 0, 0);
    for (int i = 0; i < c->depth && !bad; i++) {
#define P1(suffix, kind, n)                                         \
    snprintf(name, sizeof name, "blocks.%d.%s", i, suffix);        \
    bad |= tp_pb_add(&b, name, kind, 1, n, 0, 0, 0);
#define P2(suffix, kind, n, k)                                      \
    snprintf(name, sizeof name, "blocks.%d.%s", i, suffix);        \
    bad |= tp_pb_add(&b, name, kind, 2, n, k, 0, 0);
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
    const char *norm = c->global_pool == TP_VIT_POOL_AVG ? "fc_norm" : "norm";
    snprintf(name, sizeof name, "%s.weight", norm);
    bad |= tp_pb_add(&b, name, INIT_ONE, 1, C, 0, 0, 0);
    snprintf(name, sizeof name, "%s.bias", norm);
    bad |= tp_pb_add(&b, name, INIT_ZERO, 1, C, 0, 0, 0);
    if (c->num_classes > 0) {
        bad |= tp_pb_add(&b, "head.weight", INIT_TRUNC02, 2, c->num_classes, C, 0, 0);
        bad |= tp_pb_add(&b, "head.bias", INIT_ZERO, 1, c->num_classes, 0, 0, 0);
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
    int *init = NULL;
    tp_status s = build_table(c, out, &init, 1, err);
    if (s) return s;
    /* value j of a tensor is a function of its name and j (core/rng.h's counter-based draws), so every tensor is
     * filled by all threads. timm's trunc_normal_(std 0.02, a -2, b 2) is untruncated in effect: the Irwin-Hall
     * draw's support of +-6 std (+-0.12) never reaches +-2. */
    const double fan_in = (double)c->in_chans * c->patch_size * c->patch_size, bound = 1.0 / sqrt(fan_in);
    for (int i = 0; i < out->n_params; i++) {
        tp_param *t = &out->params[i];
        const uint64_t key = tp_ctr_key(seed, t->name);
        const int k = init[i];
        if (k == INIT_CONV_W || k == INIT_CONV_B) { /* uniform in +-1 / sqrt(fan_in), as torch's conv default */
#pragma omp parallel for schedule(static) if (t->numel > 65536)
            for (int64_t j = 0; j < t->numel; j++)
                t->data[j] = (float)(bound * (2.0 * tp_ctr_uniform(key, (uint64_t)j) - 1.0));
            continue;
        }
        /* the normal draws: (scale, offset) per kind; a constant where nonzero_bias leaves no draw */
        const double sc = k == INIT_TRUNC02 ? 0.02 : k == INIT_ZERO ? 0.05 : k == INIT_ONE ? 0.1 : nonzero_bias ? 0.02 : 1e-6;
        const double off = k == INIT_ONE ? 1.0 : 0.0;
        if (nonzero_bias || k == INIT_TRUNC02 || k == INIT_CLS) tp_ctr_fill_normal(t->data, t->numel, key, sc, off);
        else
            for (int64_t j = 0; j < t->numel; j++) t->data[j] = (float)off;
    }
    free(init);
    return TP_OK;
}

tp_status tp_vit_params_shapes(const tp_vit_config *c, tp_params *out, tp_error *err) {
    tp_status s = tp_vit_config_validate(c, err);
    return s ? s : build_table(c, out, NULL, 0, err);
}

tp_status tp_vit_params_load(const tp_vit_config *c, const char *path, tp_params *out, tp_error *err) {
    tp_model m;
    tp_vit_model(c, &m);
    return tp_model_params_load(&m, path, out, err);
}

/* LayerNorm "<layer>" with its weight and bias */
static int layernorm(tp_graph_builder *b, const tp_vit_config *c, const char *layer, int x, int ndim, const int64_t *shape) {
    tp_op op = {.kind = TP_OP_LAYERNORM, .eps = c->ln_eps};
    const int in[3] = {x, tp_gb_param(b, layer, "weight"), tp_gb_param(b, layer, "bias")};
    return tp_gb_op(b, &op, layer, in, 3, ndim, shape, NULL);
}

/* One of timm's Blocks: x + attn(norm1(x)), then + mlp(norm2(x)); returns the block's output */
static int vit_block(tp_graph_builder *b, const tp_vit_config *c, int i, int x, int64_t B) {
    const int64_t C = c->embed_dim, T = tp_vit_tokens(c), H = c->num_heads, Hd = tp_vit_mlp_hidden(c);
    const int64_t xs[3] = {B, T, C}, qkv_s[3] = {B, T, 3 * C}, hid_s[3] = {B, T, Hd};
    char l[TP_NAME_LEN];
#define LAYER(fmt) (snprintf(l, sizeof l, "blocks.%d." fmt, i), l)
    int h = layernorm(b, c, LAYER("norm1"), x, 3, xs);
    h = tp_gb_linear(b, LAYER("attn.qkv"), h, 1, 3, qkv_s, NULL);
    tp_op att = {.kind = TP_OP_ATTENTION, .heads = (int)H, .head_dim = (int)(C / H),
                 .scale = (float)(1.0 / sqrt((double)(C / H)))};
    h = tp_gb_op(b, &att, LAYER("attn"), &h, 1, 3, xs, NULL);
    h = tp_gb_linear(b, LAYER("attn.proj"), h, 1, 3, xs, NULL);
    x = tp_gb_add(b, LAYER("residual1"), x, h, 3, xs, NULL);
    h = layernorm(b, c, LAYER("norm2"), x, 3, xs);
    h = tp_gb_linear(b, LAYER("mlp.fc1"), h, 1, 3, hid_s, NULL);
    tp_op gelu = {.kind = TP_OP_GELU, .gelu_tanh = c->gelu_tanh};
    h = tp_gb_op(b, &gelu, LAYER("mlp.act"), &h, 1, 3, hid_s, NULL);
    h = tp_gb_linear(b, LAYER("mlp.fc2"), h, 1, 3, xs, NULL);
    char out[TP_NAME_LEN];
    snprintf(out, sizeof out, "blocks.%d.out", i);
    return tp_gb_add(b, LAYER("residual2"), x, h, 3, xs, out);
#undef LAYER
}

/* timm's head: 'token' pooling normalizes every token, then takes the class token; 'avg' averages the
 * non-prefix tokens, then applies fc_norm; then the classifier when there is one. Without pooling every token is
 * normalized and the head applied to each (timm's global_pool='': forward_head's pool leaves the tokens). */
static int vit_head(tp_graph_builder *b, const tp_vit_config *c, int x, int64_t B) {
    const int64_t C = c->embed_dim, T = tp_vit_tokens(c), xs[3] = {B, T, C}, pooled_s[2] = {B, C};
    if (c->global_pool == TP_VIT_POOL_NONE) {
        x = layernorm(b, c, "norm", x, 3, xs);
        if (c->num_classes <= 0) return x;
        const int64_t ys[3] = {B, T, c->num_classes};
        return tp_gb_linear(b, "head", x, 1, 3, ys, "logits");
    }
    tp_op pool = {.kind = TP_OP_POOL, .pool_mode = c->global_pool, .prefix = c->class_token ? 1 : 0};
    if (c->global_pool == 0) {
        x = layernorm(b, c, "norm", x, 3, xs);
        pool.prefix = 0;
        x = tp_gb_op(b, &pool, "pool", &x, 1, 2, pooled_s, NULL);
    } else {
        x = tp_gb_op(b, &pool, "pool", &x, 1, 2, pooled_s, NULL);
        x = layernorm(b, c, "fc_norm", x, 2, pooled_s);
    }
    if (c->num_classes <= 0) return x;
    const int64_t logit_s[2] = {B, c->num_classes};
    return tp_gb_linear(b, "head", x, 1, 2, logit_s, "logits");
}

int tp_vit_build_into(tp_graph_builder *b, const tp_vit_config *c, int img, int64_t B) {
    const int64_t S = c->img_size, C = c->embed_dim, Pz = c->patch_size, Np = (S / Pz) * (S / Pz);
    const int64_t pe_shape[3] = {B, Np, C}, xs[3] = {B, tp_vit_tokens(c), C};
    (void)S;
    /* patch_embed.proj: Conv2d(3, C, P, stride P) as im2col + GEMM; then the class token and pos_embed */
    tp_op pe = {.kind = TP_OP_PATCH_EMBED, .patch = (int)Pz};
    int in[3] = {img, tp_gb_param(b, "patch_embed.proj", "weight"), tp_gb_param(b, "patch_embed.proj", "bias")};
    int x = tp_gb_op(b, &pe, "patch_embed.proj", in, 3, 3, pe_shape, NULL);
    tp_op emb = {.kind = TP_OP_EMBED_TOKENS};
    in[0] = x;
    in[1] = tp_gb_param(b, "pos_embed", NULL);
    int n_in = 2;
    if (c->class_token) in[n_in++] = tp_gb_param(b, "cls_token", NULL);
    x = tp_gb_op(b, &emb, "pos_embed", in, n_in, 3, xs, "tokens");
    for (int i = 0; i < c->depth; i++) x = vit_block(b, c, i, x, B);
    return vit_head(b, c, x, B);
}

tp_status tp_vit_build_graph(const tp_vit_config *c, const tp_params *p, int64_t B, tp_graph *g, tp_error *err) {
    tp_status st = tp_vit_config_validate(c, err);
    if (st) return st;
    if (B <= 0) return tp_fail(err, TP_ERR_ARG, "--batch %lld: must be positive", (long long)B);
    tp_graph_init(g, B);
    tp_graph_builder b = {g, p, err, TP_OK, NULL};
    const int64_t S = c->img_size, img_shape[4] = {B, 3, S, S};
    g->input = tp_graph_add_value(g, "input", TP_VAL_INPUT, 4, img_shape, -1);
    g->output = tp_vit_build_into(&b, c, g->input, B);
    if (b.st) tp_graph_free(g);
    return b.st;
}

void tp_vit_model(const tp_vit_config *cfg, tp_model *m) {
    memset(m, 0, sizeof *m);
    m->family = &tp_vit_family;
    *tp_vit_cfg(m) = *cfg;
}

/* ---- the family interface (model.h) --------------------------------------------------------------------- */

#define CFG(p) ((const tp_vit_config *)(p))

static int vit_preset_count(void) { return (int)(sizeof PRESETS / sizeof PRESETS[0]) - 1; }

static void vit_preset_info(int i, const char **name, const char **alias) {
    *name = PRESETS[i].name;
    *alias = PRESETS[i].alias;
}

static void vit_preset_config(int i, void *cfg) {
    tp_error e;
    CHECK(tp_vit_config_preset(PRESETS[i].name, cfg, &e) == TP_OK);
}

static const char *vit_name(const void *cfg) { return CFG(cfg)->name; }

static tp_status vit_validate(const void *cfg, tp_error *err) { return tp_vit_config_validate(cfg, err); }

static const tp_knob KNOBS[] = {
    {"--img-size", "N", "image side (the preprocessing crop follows)"},
    {"--patch-size", "N", "patch side"},
    {"--embed-dim", "N", "width C"},
    {"--depth", "N", "transformer blocks"},
    {"--heads", "N", "attention heads"},
    {"--mlp-ratio", "X", "MLP hidden = int(C * X)"},
    {"--class-token", NULL, "prepend a class token (the presets have one)"},
    {"--no-class-token", NULL, "no class token"},
    {"--global-pool", "token|avg|none", "class token output, the mean of the patch tokens then fc_norm, or every "
                                        "token (the head applied to each: SigLIP's image tokens in PaliGemma, pi0)"},
    {"--num-classes", "N", "classifier outputs (0: no head, the output is the pooled features)"},
    {"--act-layer", "gelu|gelu_tanh", "the MLP's GELU: exact erf (timm's default) or the tanh form (SigLIP)"},
    {"--ln-eps", "X", "LayerNorm epsilon"},
    {"--mean", "R,G,B", "preprocessing mean (overrides the checkpoint's config.json and the preset)"},
    {"--std", "R,G,B", "preprocessing std"},
    {"--crop-pct", "X", "resize the shorter side to floor(img / X), then center crop"},
    {"--interpolation", "bicubic|bilinear", "resampling filter of the resize"},
    {"--crop-mode", "center|squash", "timm's crop mode"},
    {"--pillow", "N", "reproduce Pillow N's resize order: 13+ (default) or 12 and older"},
    {NULL, NULL, NULL},
};



/* "R,G,B": three finite numbers */
static int parse_rgb(const char *name, const char *s, float out[3], tp_error *err) {
    const char *p = s;
    for (int c = 0; c < 3; c++) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (errno || end == p || !isfinite(v) || (c < 2 ? *end != ',' : *end != 0)) {
            tp_fail(err, TP_ERR_ARG, "%s '%s': expected three numbers R,G,B", name, s);
            return -1;
        }
        out[c] = (float)v;
        p = end + 1;
    }
    return 0;
}

/* Architecture knobs make the model another one than the preset; preprocessing knobs only say how inputs are
 * made. */
static void mark_custom(tp_vit_config *c) {
    if (!strstr(c->name, "+custom")) {
        size_t l = strlen(c->name);
        snprintf(c->name + l, sizeof c->name - l, "+custom");
    }
}

static int vit_knob(void *cfg, const char *name, const char *val, tp_error *err) {
    tp_vit_config *c = cfg;
    static const struct {
        const char *name;
        long lo, hi;
        size_t off;
    } INTS[] = {{"--img-size", 1, 8192, offsetof(tp_vit_config, img_size)},
                {"--patch-size", 1, 1024, offsetof(tp_vit_config, patch_size)},
                {"--embed-dim", 1, 65536, offsetof(tp_vit_config, embed_dim)},
                {"--depth", 1, 1024, offsetof(tp_vit_config, depth)},
                {"--heads", 1, 1024, offsetof(tp_vit_config, num_heads)},
                {"--num-classes", 0, 1 << 20, offsetof(tp_vit_config, num_classes)}};
    long v;
    double x;
    for (size_t i = 0; i < sizeof INTS / sizeof INTS[0]; i++) {
        if (strcmp(name, INTS[i].name) != 0) continue;
        if (tp_fam_parse_long(name, val, INTS[i].lo, INTS[i].hi, &v, err)) return -1;
        *(int *)(void *)((char *)c + INTS[i].off) = (int)v;
        if (INTS[i].off == offsetof(tp_vit_config, img_size)) c->pre.img_size = (int)v;
        mark_custom(c);
        return 1;
    }
    if (strcmp(name, "--mlp-ratio") == 0) {
        if (tp_fam_parse_real(name, val, 1e-3, 64, &x, err)) return -1;
        c->mlp_ratio = x;
    } else if (strcmp(name, "--ln-eps") == 0) {
        if (tp_fam_parse_real(name, val, 1e-30, 1, &x, err)) return -1;
        c->ln_eps = (float)x;
    } else if (strcmp(name, "--class-token") == 0 || strcmp(name, "--no-class-token") == 0) {
        c->class_token = strcmp(name, "--class-token") == 0;
    } else if (strcmp(name, "--global-pool") == 0) {
        if (pool_parse(val) < 0) {
            tp_fail(err, TP_ERR_ARG, "--global-pool '%s': expected token, avg or none", val);
            return -1;
        }
        c->global_pool = pool_parse(val);
    } else if (strcmp(name, "--act-layer") == 0) {
        if (act_parse(val) < 0) {
            tp_fail(err, TP_ERR_ARG, "--act-layer '%s': expected gelu or gelu_tanh", val);
            return -1;
        }
        c->gelu_tanh = act_parse(val);
    } else if (strcmp(name, "--mean") == 0 || strcmp(name, "--std") == 0) {
        float rgb[3];
        if (parse_rgb(name, val, rgb, err)) return -1;
        memcpy(name[2] == 'm' ? c->pre.mean : c->pre.std, rgb, sizeof rgb);
        c->pre_given |= name[2] == 'm' ? TP_VIT_PRE_MEAN : TP_VIT_PRE_STD;
        return 1;
    } else if (strcmp(name, "--crop-pct") == 0) {
        if (tp_fam_parse_real(name, val, 1e-3, 10, &x, err)) return -1;
        c->pre.crop_pct = x;
        c->pre_given |= TP_VIT_PRE_CROP_PCT;
        return 1;
    } else if (strcmp(name, "--interpolation") == 0) {
        int k = tp_interp_parse(val);
        if (k < 0) {
            tp_fail(err, TP_ERR_ARG, "--interpolation '%s': expected bicubic or bilinear", val);
            return -1;
        }
        c->pre.interpolation = (tp_interp)k;
        c->pre_given |= TP_VIT_PRE_INTERP;
        return 1;
    } else if (strcmp(name, "--pillow") == 0) {
        if (tp_fam_parse_long(name, val, 1, 99, &v, err)) return -1;
        c->pre.pillow_version = v >= 13 ? 0 : (int)v;
        return 1;
    } else if (strcmp(name, "--crop-mode") == 0) {
        int k = tp_crop_mode_parse(val);
        if (k < 0) {
            tp_fail(err, TP_ERR_ARG, "--crop-mode '%s': expected center or squash", val);
            return -1;
        }
        c->pre.crop_mode = (tp_crop_mode)k;
        c->pre_given |= TP_VIT_PRE_CROP_MODE;
        return 1;
    } else {
        return 0;
    }
    mark_custom(c);
    return 1;
}

static void vit_describe(const void *cfg, char *buf, size_t n) {
    const tp_vit_config *c = cfg;
    snprintf(buf, n, "img %d, patch %d, dim %d, depth %d, heads %d, %d tokens%s, %s pool, %d classes%s%s",
             c->img_size, c->patch_size, c->embed_dim, c->depth, c->num_heads, tp_vit_tokens(c),
             c->class_token ? " (class token)" : "", tp_vit_pool_name(c->global_pool), c->num_classes,
             c->global_pool == TP_VIT_POOL_NONE ? " per token" : "", c->gelu_tanh ? ", GELU tanh" : "");
}

/* ---- JSON: the configuration as engine files store it -------------------------------------------------- */

static json_t *floats3(const float *x) {
    return json_pack("[f,f,f]", (double)x[0], (double)x[1], (double)x[2]);
}

static json_t *vit_to_json(const void *cfg) {
    const tp_vit_config *c = cfg;
    json_t *pre = json_pack("{s:i,s:f,s:o,s:o,s:s,s:s,s:i}", "img_size", c->pre.img_size, "crop_pct", c->pre.crop_pct,
                            "mean", floats3(c->pre.mean), "std", floats3(c->pre.std), "interpolation",
                            tp_interp_name(c->pre.interpolation), "crop_mode", tp_crop_mode_name(c->pre.crop_mode),
                            "pillow", c->pre.pillow_version);
    if (!pre) return NULL;
    return json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:b,s:s,s:i,s:f,s:s,s:o}", "name", c->name, "img_size",
                     c->img_size, "patch_size", c->patch_size, "in_chans", c->in_chans, "embed_dim", c->embed_dim,
                     "depth", c->depth, "num_heads", c->num_heads, "mlp_ratio", c->mlp_ratio, "class_token",
                     c->class_token, "global_pool", tp_vit_pool_name(c->global_pool), "num_classes",
                     c->num_classes, "ln_eps", (double)c->ln_eps, "act_layer", act_name(c->gelu_tanh), "preprocess",
                     pre);
}




static tp_status jfloats3(const json_t *o, const char *where, const char *key, float *out, tp_error *err) {
    const json_t *a;
    tp_status s = tp_fam_jfield(o, where, key, 0, &a, err);
    if (s) return s;
    if (!json_is_array(a) || json_array_size(a) != 3)
        return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' must be an array of 3 numbers", where, key);
    for (size_t i = 0; i < 3; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_number(v) || !isfinite((float)json_number_value(v)))
            return tp_fail(err, TP_ERR_FORMAT, "%s: '%s[%zu]' must be a finite number", where, key, i);
        out[i] = (float)json_number_value(v);
    }
    return TP_OK;
}

/* A string key parsed by parse (index, or -1 when unknown); absent and optional: *out keeps its value */
static tp_status jenum(const json_t *o, const char *where, const char *key, int optional, int (*parse)(const char *),
                       int *out, tp_error *err) {
    const json_t *v;
    tp_status s = tp_fam_jfield(o, where, key, optional, &v, err);
    if (s || !v) return s;
    int k = json_is_string(v) ? parse(json_string_value(v)) : -1;
    if (k < 0) return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' has an unknown value", where, key);
    *out = k;
    return TP_OK;
}


static tp_status vit_from_json(const json_t *m, void *cfg, tp_error *err) {
    static const char *const keys[] = {"name", "img_size", "patch_size", "in_chans", "embed_dim", "depth",
                                       "num_heads", "mlp_ratio", "class_token", "global_pool", "num_classes",
                                       "ln_eps", "act_layer", "preprocess", NULL};
    /* interpolation, crop_mode and pillow: engine files of version <= 2 have none (bicubic, center, 0: the newest
     * Pillow's resize) */
    static const char *const pkeys[] = {"img_size", "crop_pct", "mean", "std", "interpolation", "crop_mode",
                                        "pillow", NULL};
    static const int MAX_IMG = 16384, MAX_DIM = 65536, MAX_DEPTH = 4096, MAX_CLASSES = 10000000;
    tp_vit_config *c = cfg;
    memset(c, 0, sizeof *c);
    const char *w = "model";
    const json_t *v, *pre;
    tp_status s;
    double x;
    int interp = TP_INTERP_BICUBIC, crop = TP_CROP_CENTER;
    if (!json_is_object(m)) return tp_fail(err, TP_ERR_FORMAT, "model: expected an object");
    if ((s = tp_fam_jkeys(m, w, keys, err))) return s;
    if ((s = tp_fam_jfield(m, w, "name", 0, &v, err))) return s;
    if (!json_is_string(v) || json_string_length(v) >= sizeof c->name ||
        strlen(json_string_value(v)) != json_string_length(v))
        return tp_fail(err, TP_ERR_FORMAT, "model: 'name' must be a string of at most %zu bytes", sizeof c->name - 1);
    snprintf(c->name, sizeof c->name, "%s", json_string_value(v));
    if ((s = tp_fam_jint(m, w, "img_size", 1, MAX_IMG, &c->img_size, err)) ||
        (s = tp_fam_jint(m, w, "patch_size", 1, MAX_IMG, &c->patch_size, err)) ||
        (s = tp_fam_jint(m, w, "in_chans", 1, 64, &c->in_chans, err)) ||
        (s = tp_fam_jint(m, w, "embed_dim", 1, MAX_DIM, &c->embed_dim, err)) ||
        (s = tp_fam_jint(m, w, "depth", 1, MAX_DEPTH, &c->depth, err)) ||
        (s = tp_fam_jint(m, w, "num_heads", 1, MAX_DIM, &c->num_heads, err)) ||
        (s = tp_fam_jint(m, w, "num_classes", 0, MAX_CLASSES, &c->num_classes, err)))
        return s;
    if ((s = tp_fam_jnum(m, w, "mlp_ratio", &x, err))) return s;
    if (!(x > 0 && x <= 64)) return tp_fail(err, TP_ERR_FORMAT, "model: 'mlp_ratio' is %g, expected (0, 64]", x);
    c->mlp_ratio = x;
    if ((s = tp_fam_jfield(m, w, "class_token", 0, &v, err))) return s;
    if (!json_is_boolean(v)) return tp_fail(err, TP_ERR_FORMAT, "model: 'class_token' must be a boolean");
    c->class_token = json_is_true(v);
    if ((s = jenum(m, w, "global_pool", 0, pool_parse, &c->global_pool, err))) return s;
    /* engine files before act_layer: timm's default 'gelu' */
    if ((s = jenum(m, w, "act_layer", 1, act_parse, &c->gelu_tanh, err))) return s;
    if ((s = tp_fam_jnum(m, w, "ln_eps", &x, err))) return s;
    c->ln_eps = (float)x;
    if ((s = tp_fam_jfield(m, w, "preprocess", 0, &pre, err))) return s;
    w = "model.preprocess";
    if (!json_is_object(pre)) return tp_fail(err, TP_ERR_FORMAT, "%s: expected an object", w);
    if ((s = tp_fam_jkeys(pre, w, pkeys, err)) || (s = tp_fam_jint(pre, w, "img_size", 1, MAX_IMG, &c->pre.img_size, err)) ||
        (s = tp_fam_jnum(pre, w, "crop_pct", &c->pre.crop_pct, err)) || (s = jfloats3(pre, w, "mean", c->pre.mean, err)) ||
        (s = jfloats3(pre, w, "std", c->pre.std, err)) ||
        (s = jenum(pre, w, "interpolation", 1, tp_interp_parse, &interp, err)) ||
        (s = jenum(pre, w, "crop_mode", 1, tp_crop_mode_parse, &crop, err)))
        return s;
    if (json_object_get(pre, "pillow") && (s = tp_fam_jint(pre, w, "pillow", 0, 12, &c->pre.pillow_version, err))) return s;
    c->pre.interpolation = (tp_interp)interp;
    c->pre.crop_mode = (tp_crop_mode)crop;
    snprintf(c->pre_source, sizeof c->pre_source, "the engine file");
    tp_error ve;
    if (tp_vit_config_validate(c, &ve)) return tp_fail(err, TP_ERR_FORMAT, "model: %s", ve.msg);
    return TP_OK;
}

/* ---- the checkpoint's own configuration (timm's config.json beside model.safetensors) --------------------- */

/* The preprocessing as one line, for notes */
static void pre_text(const tp_preprocess *p, char *buf, size_t n) {
    snprintf(buf, n, "mean %.4g,%.4g,%.4g std %.4g,%.4g,%.4g, crop_pct %.4g, %s, crop mode %s", (double)p->mean[0],
             (double)p->mean[1], (double)p->mean[2], (double)p->std[0], (double)p->std[1], (double)p->std[2],
             p->crop_pct, tp_interp_name(p->interpolation), tp_crop_mode_name(p->crop_mode));
}

/* The checkpoint's config.json, field by field under the command line's: what --mean, --std, --crop-pct,
 * --interpolation and --crop-mode gave stays (pre_given), the file sets the rest. */
static tp_status vit_checkpoint(void *cfg, const char *weights, char *note, size_t n, tp_error *err) {
    tp_vit_config *c = cfg;
    char path[4096], pt[200];
    const unsigned all = TP_VIT_PRE_MEAN | TP_VIT_PRE_STD | TP_VIT_PRE_CROP_PCT | TP_VIT_PRE_INTERP |
                         TP_VIT_PRE_CROP_MODE;
    pre_text(&c->pre, pt, sizeof pt);
    if (!tp_timm_config_beside(weights, path, sizeof path)) {
        if ((c->pre_given & all) != all)
            snprintf(note, n, "warning: no config.json beside %s: the checkpoint's preprocessing is unknown; using "
                     "%s (%s%s). If it was trained with another, give --mean, --std, --crop-pct, --interpolation",
                     weights, c->pre_source, pt, c->pre_given ? ", with the command line's" : "");
        return TP_OK;
    }
    tp_timm_config tc;
    tp_status st = tp_timm_config_read(path, &tc, err);
    if (st) return st;
    if (tc.num_classes >= 0 && tc.num_classes != c->num_classes)
        return tp_fail_path(err, TP_ERR_SHAPE, path, "num_classes %d, but the model has %d (--num-classes)",
                            tc.num_classes, c->num_classes);
    if (tc.global_pool >= 0 && tc.global_pool != c->global_pool)
        return tp_fail_path(err, TP_ERR_SHAPE, path, "global_pool '%s', but the model pools by '%s' (--global-pool)",
                            tp_vit_pool_name(tc.global_pool), tp_vit_pool_name(c->global_pool));
    if (tc.act_layer >= 0 && tc.act_layer != c->gelu_tanh)
        return tp_fail_path(err, TP_ERR_SHAPE, path, "model_args.act_layer '%s', but the model's MLP uses '%s' "
                            "(--act-layer)", act_name(tc.act_layer), act_name(c->gelu_tanh));
    if (!tc.has_pre) {
        snprintf(note, n, "warning: %s has no pretrained_cfg: the checkpoint's preprocessing is unknown; using %s (%s)",
                 path, c->pre_source, pt);
        return TP_OK;
    }
    if (tc.pre.img_size != c->img_size)
        return tp_fail_path(err, TP_ERR_SHAPE, path, "pretrained_cfg.input_size is %d px, but the model takes %d "
                            "(--img-size)", tc.pre.img_size, c->img_size);
    const unsigned g = c->pre_given;
    if (!(g & TP_VIT_PRE_MEAN)) memcpy(c->pre.mean, tc.pre.mean, sizeof c->pre.mean);
    if (!(g & TP_VIT_PRE_STD)) memcpy(c->pre.std, tc.pre.std, sizeof c->pre.std);
    if (!(g & TP_VIT_PRE_CROP_PCT)) c->pre.crop_pct = tc.pre.crop_pct;
    if (!(g & TP_VIT_PRE_INTERP)) c->pre.interpolation = tc.pre.interpolation;
    if (!(g & TP_VIT_PRE_CROP_MODE)) c->pre.crop_mode = tc.pre.crop_mode;
    snprintf(c->pre_source, sizeof c->pre_source, "%.150s%s", path, g ? " and the command line" : "");
    snprintf(note, n, "preprocessing from %s%s%s%s%s", path, tc.architecture[0] ? " (" : "", tc.architecture,
             tc.architecture[0] ? ")" : "", g ? "; the command line's values override it field by field" : "");
    return TP_OK;
}

/* ---- parameters, graph and input ---------------------------------------------------------------------------- */

static tp_status vit_params_table(const void *cfg, tp_params *out, tp_error *err) {
    return tp_vit_params_shapes(cfg, out, err);
}

static tp_status vit_params_init(const void *cfg, uint64_t seed, int nonzero_bias, tp_params *out, tp_error *err) {
    return tp_vit_params_init(cfg, seed, nonzero_bias, out, err);
}

static tp_status vit_build_graph(const void *cfg, const tp_params *p, int64_t B, tp_graph *g, tp_error *err) {
    return tp_vit_build_graph(cfg, p, B, g, err);
}

static void vit_input(const void *cfg, tp_input_desc *d) {
    const tp_vit_config *c = cfg;
    d->kind = TP_INPUT_IMAGE;
    d->ndim = 3;
    d->shape[0] = 3;
    d->shape[1] = d->shape[2] = c->img_size;
    d->unit = "image";
    const tp_preprocess *p = &c->pre;
    snprintf(d->preprocess, sizeof d->preprocess,
             "timm eval: %s to %d (%s), center crop %d, mean (%.4g, %.4g, %.4g), std (%.4g, %.4g, %.4g); "
             "source: %.150s%s",
             p->crop_mode == TP_CROP_SQUASH ? "both sides" : "shorter side", (int)floor(p->img_size / p->crop_pct),
             tp_interp_name(p->interpolation), p->img_size, (double)p->mean[0], (double)p->mean[1],
             (double)p->mean[2], (double)p->std[0], (double)p->std[1], (double)p->std[2], c->pre_source,
             c->pre_given && !strstr(c->pre_source, "command line") ? " and the command line" : "");
}

/* timm's forward: the head's logits, or the pooled (and normed) features when there is no head */
static void vit_output(const void *cfg, tp_output_desc *d) {
    const tp_vit_config *c = cfg;
    const int cols = c->num_classes > 0 ? c->num_classes : c->embed_dim;
    if (c->global_pool == TP_VIT_POOL_NONE) { /* every token's: no class to pick, top-1 has no meaning */
        d->ndim = 2;
        d->shape[0] = tp_vit_tokens(c);
        d->shape[1] = cols;
        d->what = c->num_classes > 0 ? "token outputs" : "token features";
        d->classes = 0;
        return;
    }
    d->ndim = 1;
    d->shape[0] = cols;
    d->what = c->num_classes > 0 ? "logits" : "features";
    d->classes = c->num_classes;
}

/* Random inputs: pixels uniform in [0, 1), normalized with the preprocessing's mean and std, as a real image would
 * be after timm's preprocessing (never zeros). */
static tp_status vit_make_input(const void *cfg, int B, uint64_t seed, const char *path, float *dst, char *desc,
                                size_t n, tp_error *err) {
    const tp_vit_config *c = cfg;
    if (path) {
        int n_files = 0;
        tp_status st = tp_image_load_batch(path, &c->pre, B, dst, &n_files, err);
        if (!st) snprintf(desc, n, "%s (%d image%s, timm eval preprocessing)", path, n_files, n_files == 1 ? "" : "s");
        return st;
    }
    tp_rng r;
    tp_rng_seed_named(&r, seed, "input");
    const int64_t S = c->img_size;
    for (int64_t b = 0; b < B; b++)
        for (int ch = 0; ch < 3; ch++)
            for (int64_t i = 0; i < S * S; i++)
                dst[((b * 3 + ch) * S * S) + i] = ((float)tp_rng_uniform(&r) - c->pre.mean[ch]) / c->pre.std[ch];
    snprintf(desc, n, "random pixels U[0,1) normalized, seed %llu", (unsigned long long)seed);
    return TP_OK;
}

/* Of the two candidates (0: none), the one closer to x; on a tie the larger (a larger image or dimension keeps
 * what the model sees or holds, a smaller one throws some of it away). */
static int64_t nearer(int64_t x, int64_t a, int64_t b) {
    if (!a || !b) return a ? a : b;
    int64_t da = llabs(a - x), db = llabs(b - x);
    return da < db ? a : db < da ? b : a > b ? a : b;
}

/* ---- tprof lint: the shapes the rules read, and fixes in this family's knobs (lint/lint.h) ------------------ */

/* How far from the image size the search for another goes: 64 px, or 4 patches for patches above 16 px. */
static int vit_window(int P) { return 4 * P > 64 ? 4 * P : 64; }

/* Image sizes near S (multiples of the patch P within vit_window, S excluded) whose token count without a
 * class token is a multiple of block: the nearest (ties: the larger) and the nearest on its other side of S; 0
 * where none. (With a class token, T = g^2 + 1 is never a multiple of a block of 16 or more, see
 * attn.class_token, and every block of qformat.h is 16, 32 or 128.) */
static void vit_near_images(int S, int P, int block, int *best, int *other) {
    const int W = vit_window(P);
    int below = 0, above = 0;
    for (int s = P; s <= S + W; s += P) {
        const int g = s / P;
        if (s == S || s < S - W || (g * g) % block) continue;
        if (s < S) below = s; /* ascending: the last one below is the nearest */
        else if (!above) above = s;
    }
    *best = (int)nearer(S, below, above);
    *other = *best == above ? below : above;
}

static void vit_fix_seq(const tp_vit_config *v, const tp_model_shapes *m, int b, char *buf, size_t n) {
    if (m->extra_tokens) {
        tp_append(buf, n, "drop the class token and pool by average (--no-class-token --global-pool avg) -> %d tokens",
            m->patches);
        if (m->patches % b == 0) {
            tp_append(buf, n, " = %d x %d", m->patches / b, b);
            return;
        }
        tp_append(buf, n, ", still not a multiple of %d: ", b);
    }
    int best, other; /* without a class token from here on (vit_near_images says why) */
    vit_near_images(v->img_size, v->patch_size, b, &best, &other);
    if (!best) {
        tp_append(buf, n, "no image size within %d px of %d gives a multiple of %d tokens", vit_window(v->patch_size),
            v->img_size, b);
        return;
    }
    const int g = best / v->patch_size;
    tp_append(buf, n, "use --img-size %d (%d x %d = %d tokens, %.2fx today's %d", best, g, g, g * g,
        (double)(g * g) / m->tokens, m->tokens);
    if (other) tp_append(buf, n, "; or %d: %d tokens", other, (other / v->patch_size) * (other / v->patch_size));
    tp_append(buf, n, ")");
}

static void vit_fix_class_token(const tp_model_shapes *m, int b, char *buf, size_t n) {
    tp_append(buf, n, "--no-class-token --global-pool avg (timm's 'avg' pooling: the mean of the patch tokens) -> %d tokens",
        m->patches);
    if (m->patches % b == 0) tp_append(buf, n, ", a multiple of %d", b);
    else tp_append(buf, n, ", not yet a multiple of %d: see attn.seq_block", b);
}

static void vit_fix_head_dim(const tp_model_shapes *m, int b, char *buf, size_t n) {
    const int C = m->embed_dim, h = m->heads;
    int best = 0;
    for (int k = 1; k <= C; k++)
        if (C % k == 0 && (C / k) % b == 0 && (!best || abs(k - h) < abs(best - h) ||
                                               (abs(k - h) == abs(best - h) && k > best)))
            best = k;
    if (best) tp_append(buf, n, "use --heads %d (head dim %d); or ", best, C / best);
    else tp_append(buf, n, "no head count splits embed %d into head dims that are multiples of %d; ", C, b);
    const int step = h * b, lo = C / step * step, hi = lo + step;
    tp_append(buf, n, "keep %d heads with --embed-dim ", h);
    if (lo > 0) tp_append(buf, n, "%d (head dim %d) or ", lo, lo / h);
    tp_append(buf, n, "%d (head dim %d)", hi, hi / h);
}

static void vit_fix_patch(const tp_vit_config *v, const tp_model_shapes *m, char *buf, size_t n) {
    const int P = v->patch_size, lo = m->grid * P, hi = lo + P;
    const int best = (int)nearer(v->img_size, lo, hi);
    tp_append(buf, n, "use --img-size %d or %d (multiples of the patch %d)", best, best == lo ? hi : lo, P);
}

/* An --mlp-ratio text that gives exactly hidden H from embed C under timm's int(C * ratio). */
static void ratio_text(int C, int H, char *rbuf, size_t rn) {
    double r = (double)H / C;
    for (int d = 1; d <= 17; d++) {
        snprintf(rbuf, rn, "%.*g", d, r);
        if ((int)(C * strtod(rbuf, NULL)) == H) return;
    }
    snprintf(rbuf, rn, "%.17g", nextafter(r, 2 * r)); /* r rounded down in binary: one ulp up floors to H */
}

/* K and N of the blocks' GEMMs: embed_dim (qkv/proj/fc1 K, proj/fc2 N, and 3C for qkv N) and the mlp hidden
 * size (fc2 K, fc1 N), to multiples of mult. An embed dim is proposed only where the heads still divide it
 * and, for a block format, the head dim stays a multiple of the block (attn.head_dim_block). */
static void vit_fix_dims(const tp_model_shapes *m, int block, int mult, char *buf, size_t n) {
    const int C = m->embed_dim, H = m->mlp_hidden, h = m->heads;
    if (C % mult) {
        const int L = (int)tp_lcm64(mult, (int64_t)h * (block ? block : 1)), lo = C / L * L, hi = lo + L;
        const int best = (int)nearer(C, lo, hi), other = best == lo ? hi : lo;
        tp_append(buf, n, "use --embed-dim %d (head dim %d)", best, best / h);
        if (other > 0) tp_append(buf, n, " or %d (head dim %d)", other, other / h);
        tp_append(buf, n, " with %d heads: K and N multiples of %d", h, mult);
    }
    if (H % mult) {
        const int lo = H / mult * mult, hi = lo + mult, best = (int)nearer(H, lo, hi);
        char r[32];
        ratio_text(C, best, r, sizeof r);
        tp_append(buf, n, "%s--mlp-ratio %s (mlp hidden %d = %d x %d)", C % mult ? "; and " : "use ", r, best, best / mult,
            mult);
    }
}

/* An image the patch does not divide is a lint rule (the model would crop it), not an error: the rest of the
 * configuration is validated with the image cropped to whole patches. */
static tp_status vit_shapes(const void *c_, tp_model_shapes *m, tp_error *err) {
    const tp_vit_config *cfg = c_;
    memset(m, 0, sizeof *m);
    if (cfg->patch_size <= 0) return tp_fail(err, TP_ERR_ARG, "--patch-size %d: must be positive", cfg->patch_size);
    if (cfg->img_size < cfg->patch_size)
        return tp_fail(err, TP_ERR_ARG, "--img-size %d: smaller than one patch (%d)", cfg->img_size,
                       cfg->patch_size);
    tp_vit_config v = *cfg;
    v.img_size = v.pre.img_size = cfg->img_size / cfg->patch_size * cfg->patch_size;
    tp_status st = tp_vit_config_validate(&v, err);
    if (st) return st;
    m->img_size = cfg->img_size;
    m->patch_size = cfg->patch_size;
    m->grid = v.img_size / v.patch_size;
    m->patches = m->grid * m->grid;
    m->extra_tokens = cfg->class_token ? 1 : 0;
    m->tokens = m->patches + m->extra_tokens;
    m->heads = cfg->num_heads;
    m->embed_dim = cfg->embed_dim;
    m->head_dim = cfg->embed_dim / cfg->num_heads;
    m->kv_heads = cfg->num_heads;
    m->packed_qkv = 1;
    m->mlp_hidden = tp_vit_mlp_hidden(cfg);
    m->depth = cfg->depth;
    snprintf(m->tokens_how, sizeof m->tokens_how, "image %d, patch %d -> %d x %d = %d patches", cfg->img_size,
             cfg->patch_size, m->grid, m->grid, m->patches);
    if (m->extra_tokens)
        tp_append(m->tokens_how, sizeof m->tokens_how, " + 1 class token = %d tokens", m->tokens);
    else
        tp_append(m->tokens_how, sizeof m->tokens_how, " = %d tokens (no class token)", m->tokens);
    const int64_t C = cfg->embed_dim, H = m->mlp_hidden, P = cfg->patch_size;
    tp_shapes_add_gemm(m, "blocks.*.attn.qkv", 3 * C, C, 0);
    tp_shapes_add_gemm(m, "blocks.*.attn.proj", C, C, 0);
    tp_shapes_add_gemm(m, "blocks.*.mlp.fc1", H, C, 0);
    tp_shapes_add_gemm(m, "blocks.*.mlp.fc2", C, H, 0);
    tp_shapes_add_gemm(m, "patch_embed.proj", C, 3 * P * P, 1); /* Conv2d(3, C, P, stride P) as a GEMM */
    if (cfg->num_classes > 0) tp_shapes_add_gemm(m, "head", cfg->num_classes, C, 1);
    return TP_OK;
}


static void vit_fix(const void *cfg, const tp_model_shapes *m, tp_fix_kind kind, int block, int mult, char *buf,
                    size_t n) {
    switch (kind) {
    case TP_FIX_SEQ_BLOCK: vit_fix_seq(cfg, m, block, buf, n); break;
    case TP_FIX_CLASS_TOKEN: vit_fix_class_token(m, block, buf, n); break;
    case TP_FIX_HEAD_DIM: vit_fix_head_dim(m, block, buf, n); break;
    case TP_FIX_PATCH: vit_fix_patch(cfg, m, buf, n); break;
    case TP_FIX_GEMM_DIMS: vit_fix_dims(m, block, mult, buf, n); break;
    }
}

const tp_family tp_vit_family = {
    .name = "vit",
    .title = "Vision Transformer (timm VisionTransformer)",
    .cfg_size = sizeof(tp_vit_config),
    .knobs = KNOBS,
    .preset_count = vit_preset_count,
    .preset_info = vit_preset_info,
    .preset_config = vit_preset_config,
    .model_name = vit_name,
    .validate = vit_validate,
    .knob = vit_knob,
    .describe = vit_describe,
    .to_json = vit_to_json,
    .from_json = vit_from_json,
    .checkpoint = vit_checkpoint,
    .params_table = vit_params_table,
    .params_init = vit_params_init,
    .build_graph = vit_build_graph,
    .input = vit_input,
    .output = vit_output,
    .make_input = vit_make_input,
    .shapes = vit_shapes,
    .fix = vit_fix,
};
