/* vit.h: the Vision Transformer family (tp_vit_family, model.h), exactly as timm's VisionTransformer
 * (timm/models/vision_transformer.py) names and lays out its parameters:
 *   cls_token (1, 1, C)                          when class_token
 *   pos_embed (1, T, C)                          T = (S/P)^2 + class_token (timm's no_embed_class=False)
 *   patch_embed.proj.weight (C, 3, P, P), patch_embed.proj.bias (C)
 *   blocks.N.norm1.{weight,bias} (C)
 *   blocks.N.attn.qkv.weight (3C, C), blocks.N.attn.qkv.bias (3C)
 *   blocks.N.attn.proj.weight (C, C), blocks.N.attn.proj.bias (C)
 *   blocks.N.norm2.{weight,bias} (C)
 *   blocks.N.mlp.fc1.weight (Hd, C), .bias (Hd);  blocks.N.mlp.fc2.weight (C, Hd), .bias (C)   Hd = C * mlp_ratio
 *   norm.{weight,bias} (C)                       global_pool 'token'  (timm applies it before pooling)
 *   fc_norm.{weight,bias} (C)                    global_pool 'avg'    (timm: norm is Identity, fc_norm after)
 *   head.weight (classes, C), head.bias (classes) when num_classes > 0
 * LayerNorm eps 1e-6, GELU (erf), qkv bias on, no layer scale, no register tokens: timm's defaults for the
 * vit_* presets. Only src/models sees this header: everything else goes through model.h. */
#ifndef TP_VIT_H
#define TP_VIT_H

#include <stdint.h>

#include "io/image.h"
#include "models/builder.h"
#include "models/model.h"
#include "tprof.h"

typedef struct {
    char name[64]; /* the timm preset name, or the preset it was derived from with "+custom" */
    int img_size, patch_size, in_chans, embed_dim, depth, num_heads;
    double mlp_ratio;
    int class_token; /* 1: prepend a class token */
    int global_pool; /* a tp_vit_pool: 'token' (class token output), 'avg' (mean of patch tokens, then fc_norm),
                        '' (none: every token after the final norm, the head applied to each, as timm's
                        global_pool='' and big_vision's pool_type='none' for PaliGemma's and pi0's image tokens) */
    int num_classes; /* 0: no head; the output is the pooled features (every token's features without pooling) */
    int gelu_tanh;   /* the MLP's activation: 0 timm's 'gelu' (exact erf), 1 'gelu_tanh' (the tanh approximation,
                        SigLIP's: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))) */
    float ln_eps;
    tp_preprocess pre; /* timm pretrained_cfg: mean, std, crop_pct, interpolation, crop mode at img_size */
    char pre_source[200]; /* where pre comes from: "the preset vit_base_patch16_224's timm pretrained_cfg",
                             "DIR/config.json", "the engine file" ... (informative, not stored in engine files) */
    unsigned pre_given;   /* TP_VIT_PRE_* bits: the preprocessing fields given on the command line, which the
                             checkpoint's config.json does not override */
} tp_vit_config;

typedef enum { TP_VIT_POOL_TOKEN = 0, TP_VIT_POOL_AVG = 1, TP_VIT_POOL_NONE = 2 } tp_vit_pool;
const char *tp_vit_pool_name(int pool); /* "token", "avg", "none" */

enum { TP_VIT_PRE_MEAN = 1, TP_VIT_PRE_STD = 2, TP_VIT_PRE_CROP_PCT = 4, TP_VIT_PRE_INTERP = 8, TP_VIT_PRE_CROP_MODE = 16 };

extern const tp_family tp_vit_family;

/* The configuration of a ViT model (m->family must be &tp_vit_family). */
static inline tp_vit_config *tp_vit_cfg(tp_model *m) { return (tp_vit_config *)(void *)m->cfg.bytes; }

/* The ViT presets, terminated by a NULL name (timm's registered vit_* models). */
typedef struct {
    const char *name;  /* timm name */
    const char *alias; /* tprof short alias */
    int img_size, patch_size, embed_dim, depth, num_heads;
} tp_vit_preset;
const tp_vit_preset *tp_vit_presets(void);

/* The family's own functions, which tp_vit_family wraps (and the tests call directly). */

/* Looks a preset up by timm name or alias. TP_ERR_ARG naming the model and listing the known names otherwise. */
tp_status tp_vit_config_preset(const char *name, tp_vit_config *cfg, tp_error *err);
/* Checks a configuration: img_size a multiple of patch_size, embed_dim a multiple of num_heads, positive
 * sizes, 'token' pooling only with a class token, valid preprocessing. TP_ERR_ARG naming the field. */
tp_status tp_vit_config_validate(const tp_vit_config *cfg, tp_error *err);
/* Wraps cfg into a model of the ViT family. */
void tp_vit_model(const tp_vit_config *cfg, tp_model *m);

/* Creates the parameter table with timm's names and shapes, values synthesized from seed with timm's
 * initialization (init_weights_vit_timm: Linear weights trunc_normal(std=.02), biases 0; pos_embed
 * trunc_normal(std=.02); cls_token normal(std=1e-6); LayerNorm weight 1, bias 0; the patch Conv2d keeps
 * PyTorch's default kaiming_uniform(a=sqrt 5): U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias).
 * If nonzero_bias, biases and LayerNorm affine parameters get small random values instead (tests use this so
 * that bias paths are exercised). TP_ERR_OOM. */
tp_status tp_vit_params_init(const tp_vit_config *cfg, uint64_t seed, int nonzero_bias, tp_params *out,
                             tp_error *err);
/* The table with names and shapes only (data NULL). */
tp_status tp_vit_params_shapes(const tp_vit_config *cfg, tp_params *out, tp_error *err);
/* The table loaded from a safetensors file (F32/F16/BF16), names and shapes checked (tp_model_params_load). */
tp_status tp_vit_params_load(const tp_vit_config *cfg, const char *path, tp_params *out, tp_error *err);
/* The forward graph for batch B: input (B, 3, S, S) fp32 -> output (B, num_classes) (or (B, C)); without pooling
 * (B, T, num_classes) (or (B, T, C)). */
tp_status tp_vit_build_graph(const tp_vit_config *cfg, const tp_params *params, int64_t B, tp_graph *g,
                             tp_error *err);

/* The ViT's ops into a graph under construction (a pipeline's vision stage; b->prefix names them, "vision."):
 * img the value of the images (B, 3, S, S); returns the output value, as tp_vit_build_graph's, or -1 with b->st
 * set. cfg must be valid (tp_vit_config_validate). */
int tp_vit_build_into(tp_graph_builder *b, const tp_vit_config *cfg, int img, int64_t B);

int tp_vit_tokens(const tp_vit_config *cfg);     /* T = (S/P)^2 + class_token */
int tp_vit_mlp_hidden(const tp_vit_config *cfg); /* int(C * mlp_ratio), as timm's Mlp(hidden_features=...) */

#endif
