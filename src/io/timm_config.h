/* timm_config.h: reader of timm's config.json, the file beside model.safetensors in timm's Hugging Face hub
 * repositories (timm/vit_base_patch16_224.augreg2_in21k_ft_in1k, timm/deit_tiny_patch16_224.fb_in1k, ...).
 *
 * The layout is what timm 1.0.x writes (timm/models/_hub.py, save_config_for_hf) and reads
 * (load_model_config_from_hf -> _parse_model_cfg):
 *   {"architecture": "vit_base_patch16_224", "num_classes": 1000, "num_features": 768, "global_pool": "token",
 *    "model_args": {...}, "label_names": [...],
 *    "pretrained_cfg": {"tag": "augreg2_in21k_ft_in1k", "input_size": [3, 224, 224], "fixed_input_size": true,
 *        "interpolation": "bicubic", "crop_pct": 0.9, "crop_mode": "center", "mean": [0.5, 0.5, 0.5],
 *        "std": [0.5, 0.5, 0.5], "num_classes": 1000, "pool_size": null, "first_conv": "patch_embed.proj",
 *        "classifier": "head", "license": "apache-2.0"}}
 * timm drops null values from pretrained_cfg when it writes the file (except pool_size, first_conv,
 * classifier), and writes global_pool only when it is a non-empty string. Older hub repositories use the legacy
 * single-dict layout, with no "pretrained_cfg" key and the pretrained_cfg's fields at the top level; timm reads
 * such a file as if the whole object were the pretrained_cfg, and so does this reader.
 *
 * The data config is resolved as timm.data.resolve_data_config(pretrained_cfg=...) does with no overrides and
 * use_test_size False (test_input_size and test_crop_pct are ignored), each missing, null or empty field taking
 * timm's default: input_size (3, 224, 224), interpolation "bicubic", mean (0.485, 0.456, 0.406), std (0.229,
 * 0.224, 0.225), crop_pct 0.875 (also for 0, which timm treats as unset), crop_mode "center". The mean and std
 * are rounded to float32, as torch.tensor(mean) does before Normalize.
 *
 * Unknown keys are ignored (model_args, label_names, license, ...): tprof builds the model from the weights and
 * its own configuration, not from model_args. */
#ifndef TP_TIMM_CONFIG_H
#define TP_TIMM_CONFIG_H

#include <stddef.h>

#include "io/image.h"
#include "tprof.h"

#define TP_TIMM_NAME_LEN 128 /* architecture and tag, terminating NUL included */

/* The model's head pooling (top-level "global_pool"). */
typedef enum {
    TP_TIMM_POOL_ABSENT = -1, /* no "global_pool" in the file */
    TP_TIMM_POOL_TOKEN = 0,   /* "token": the class token */
    TP_TIMM_POOL_AVG = 1,     /* "avg": mean over the patch tokens */
    TP_TIMM_POOL_NONE = 2     /* "": no pooling, every token (the head applied to each) */
} tp_timm_pool;

typedef struct {
    char architecture[TP_TIMM_NAME_LEN]; /* e.g. "vit_base_patch16_224"; "" if absent */
    char tag[TP_TIMM_NAME_LEN];          /* pretrained_cfg.tag, e.g. "augreg2_in21k_ft_in1k"; "" if absent */
    int num_classes;   /* top-level num_classes, else pretrained_cfg.num_classes, else -1; 0 = no head */
    int num_features;  /* top-level num_features (informational in timm); -1 if absent */
    int global_pool;   /* a tp_timm_pool */
    int act_layer;     /* model_args.act_layer: 0 "gelu", 1 "gelu_tanh"; -1 when absent (the architecture's own) */
    int has_pre;       /* 1 when the file has a pretrained_cfg (or the legacy layout's data fields) */
    tp_preprocess pre; /* when has_pre: img_size = input_size[1] (== input_size[2]), crop_pct, mean, std,
                        * interpolation, crop_mode, defaults filled in as above; when not, zeroes */
} tp_timm_config;

/* Reads timm's config.json at path into *out (written only on success).
 * Errors, one line starting with the path and naming the field (as "pretrained_cfg.mean"):
 *   TP_ERR_ARG          path or out NULL;
 *   TP_ERR_IO           missing, unreadable, a directory;
 *   TP_ERR_FORMAT       not JSON (line and column), not an object, a field of the wrong type (architecture,
 *                       tag, global_pool, interpolation, crop_mode not strings; num_classes, num_features not
 *                       non-negative integers; input_size not 3 positive integers; mean/std not 3 finite
 *                       numbers, std with a 0; crop_pct not a positive number), a name longer than
 *                       TP_TIMM_NAME_LEN - 1 bytes, input_size above 16384;
 *   TP_ERR_UNSUPPORTED  a valid timm value tprof does not run, named: global_pool other than "token"/"avg"/"",
 *                       model_args.act_layer other than "gelu"/"gelu_tanh",
 *                       interpolation other than bicubic/bilinear/nearest, crop_mode other than center/squash
 *                       ("border" included), a non-square input_size, input channels other than 3. */
tp_status tp_timm_config_read(const char *path, tp_timm_config *out, tp_error *err);

/* The path of config.json in the folder of weights_path ("dir/model.safetensors" -> "dir/config.json",
 * "model.safetensors" -> "config.json") into cfg_path (n bytes). Returns 1 when that path fits and is an
 * existing regular file (after following links), else 0 (cfg_path then holds the path if it fits, "" if not). */
int tp_timm_config_beside(const char *weights_path, char *cfg_path, size_t n);

#endif
