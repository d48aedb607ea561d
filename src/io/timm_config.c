/* timm_config.c: timm's config.json (layout and defaults in timm_config.h). */
#include "io/timm_config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/util.h"

/* timm's defaults (timm/data/constants.py, timm/data/config.py resolve_data_config). */
static const float kDefaultMean[3] = {0.485f, 0.456f, 0.406f};
static const float kDefaultStd[3] = {0.229f, 0.224f, 0.225f};
#define DEFAULT_IMG_SIZE 224
#define DEFAULT_CROP_PCT 0.875

typedef struct {
    const char *path;
    const char *prefix; /* "pretrained_cfg." or "" (legacy layout), for field names in messages */
    tp_error *err;
} ctx;

/* A value is "unset" for timm's resolve_data_config when the key is missing, null, or falsy (0, "", []): it
 * tests pretrained_cfg.get(key) for truth. */
static int unset(const json_t *v) {
    if (!v || json_is_null(v) || json_is_false(v)) return 1;
    if (json_is_string(v)) return json_string_length(v) == 0;
    if (json_is_array(v)) return json_array_size(v) == 0;
    if (json_is_number(v)) return json_number_value(v) == 0.0;
    return 0;
}

/* Copies string field `key` of obj into dst (n bytes); absent or null leaves dst "". */
static tp_status get_name(const ctx *c, const json_t *obj, const char *prefix, const char *key, char *dst,
                          size_t n) {
    const json_t *v = json_object_get(obj, key);
    dst[0] = 0;
    if (!v || json_is_null(v)) return TP_OK;
    if (!json_is_string(v))
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': expected a string", prefix, key);
    if (json_string_length(v) >= n)
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': longer than %zu bytes", prefix, key,
                            n - 1);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return TP_OK;
}

/* Integer field `key` >= 0 into *dst; absent or null leaves *dst. */
static tp_status get_count(const ctx *c, const json_t *obj, const char *prefix, const char *key, int *dst) {
    const json_t *v = json_object_get(obj, key);
    char b[48];
    if (!v || json_is_null(v)) return TP_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100000000)
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': expected an integer in [0, 100000000], "
                            "got %s", prefix, key, tp_json_brief(v, b, sizeof b));
    *dst = (int)json_integer_value(v);
    return TP_OK;
}

/* The string of a set string field, or a FORMAT error naming it. */
static tp_status get_string(const ctx *c, const json_t *v, const char *key, const char **s) {
    char b[48];
    if (!json_is_string(v))
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': expected a string, got %s", c->prefix, key,
                            tp_json_brief(v, b, sizeof b));
    *s = json_string_value(v);
    return TP_OK;
}

static tp_status get_triple(const ctx *c, const json_t *obj, const char *key, const float def[3], int nonzero,
                            float out[3]) {
    const json_t *v = json_object_get(obj, key);
    if (unset(v)) {
        memcpy(out, def, 3 * sizeof *out);
        return TP_OK;
    }
    char b[48];
    if (!json_is_array(v) || json_array_size(v) != 3)
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': expected 3 numbers, got %s", c->prefix,
                            key, tp_json_brief(v, b, sizeof b));
    for (size_t i = 0; i < 3; i++) {
        const json_t *e = json_array_get(v, i);
        double d = json_is_number(e) ? json_number_value(e) : NAN;
        float f = (float)d; /* torch.tensor(mean): float32 from the double */
        if (!isfinite(d) || !isfinite(f) || (nonzero && f == 0.0f))
            return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': expected 3 %snumbers, got %s",
                                c->prefix, key, nonzero ? "non-zero " : "", tp_json_brief(v, b, sizeof b));
        out[i] = f;
    }
    return TP_OK;
}

/* The data config of a pretrained_cfg object (or of the legacy layout's top level). */
static tp_status read_pre(const ctx *c, const json_t *pc, tp_preprocess *pre) {
    tp_status s;
    char b[48];
    memset(pre, 0, sizeof *pre);

    pre->img_size = DEFAULT_IMG_SIZE;
    const json_t *v = json_object_get(pc, "input_size");
    if (!unset(v)) {
        json_int_t d[3];
        if (!json_is_array(v) || json_array_size(v) != 3)
            return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%sinput_size': expected 3 integers "
                                "[channels, height, width], got %s", c->prefix, tp_json_brief(v, b, sizeof b));
        for (size_t i = 0; i < 3; i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_integer(e) || json_integer_value(e) < 1)
                return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%sinput_size': expected 3 positive "
                                    "integers [channels, height, width], got %s", c->prefix, tp_json_brief(v, b, sizeof b));
            d[i] = json_integer_value(e);
        }
        if (d[0] != 3)
            return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field '%sinput_size': %lld input channels; "
                                "tprof runs RGB models (3)", c->prefix, (long long)d[0]);
        if (d[1] != d[2])
            return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field '%sinput_size': [3, %lld, %lld] is not "
                                "square; tprof runs square inputs only", c->prefix, (long long)d[1],
                                (long long)d[2]);
        if (d[1] > 16384)
            return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%sinput_size': side %lld above 16384",
                                c->prefix, (long long)d[1]);
        pre->img_size = (int)d[1];
    }

    pre->crop_pct = DEFAULT_CROP_PCT;
    v = json_object_get(pc, "crop_pct");
    if (!unset(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0.0) || !isfinite(json_number_value(v)))
            return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%scrop_pct': expected a positive number, "
                                "got %s", c->prefix, tp_json_brief(v, b, sizeof b));
        pre->crop_pct = json_number_value(v);
    }

    const char *str = NULL;
    v = json_object_get(pc, "interpolation");
    pre->interpolation = TP_INTERP_BICUBIC;
    if (!unset(v)) {
        if ((s = get_string(c, v, "interpolation", &str))) return s;
        int i = tp_interp_parse(str);
        if (i < 0)
            return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field '%sinterpolation': '%.64s' is not "
                                "implemented (bicubic, bilinear, nearest are)", c->prefix, str);
        pre->interpolation = (tp_interp)i;
    }

    v = json_object_get(pc, "crop_mode");
    pre->crop_mode = TP_CROP_CENTER;
    if (!unset(v)) {
        if ((s = get_string(c, v, "crop_mode", &str))) return s;
        int m = tp_crop_mode_parse(str);
        if (m < 0)
            return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field '%scrop_mode': '%.64s' is not "
                                "implemented (center, squash are)", c->prefix, str);
        pre->crop_mode = (tp_crop_mode)m;
    }

    if ((s = get_triple(c, pc, "mean", kDefaultMean, 0, pre->mean))) return s;
    return get_triple(c, pc, "std", kDefaultStd, 1, pre->std);
}

/* Keys whose presence at the top level marks the legacy single-dict layout. */
static int looks_legacy(const json_t *root) {
    static const char *const keys[] = {"input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (json_object_get(root, keys[i])) return 1;
    return 0;
}

static tp_status read_doc(const char *path, const json_t *root, tp_timm_config *cfg, tp_error *err) {
    ctx c = {path, "", err};
    tp_status s;
    if (!json_is_object(root)) return tp_fail_path(err, TP_ERR_FORMAT, path, "top level: expected a JSON object");
    memset(cfg, 0, sizeof *cfg);
    cfg->num_classes = -1;
    cfg->num_features = -1;
    cfg->global_pool = TP_TIMM_POOL_ABSENT;

    if ((s = get_name(&c, root, "", "architecture", cfg->architecture, sizeof cfg->architecture))) return s;
    if ((s = get_count(&c, root, "", "num_classes", &cfg->num_classes))) return s;
    if ((s = get_count(&c, root, "", "num_features", &cfg->num_features))) return s;

    const json_t *gp = json_object_get(root, "global_pool");
    if (gp && !json_is_null(gp)) {
        if (!json_is_string(gp))
            return tp_fail_path(err, TP_ERR_FORMAT, path, "field 'global_pool': expected a string");
        const char *g = json_string_value(gp);
        if (!strcmp(g, "token")) cfg->global_pool = TP_TIMM_POOL_TOKEN;
        else if (!strcmp(g, "avg")) cfg->global_pool = TP_TIMM_POOL_AVG;
        else if (!*g) cfg->global_pool = TP_TIMM_POOL_NONE;
        else
            return tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "field 'global_pool': '%.64s': tprof's ViT "
                                "pools by token, avg or '' (none) only", g);
    }
    /* model_args (timm's save_config_for_hf writes the constructor's keyword arguments there when given) */
    cfg->act_layer = -1;
    const json_t *ma = json_object_get(root, "model_args");
    if (ma && !json_is_null(ma)) {
        if (!json_is_object(ma)) return tp_fail_path(err, TP_ERR_FORMAT, path, "field 'model_args': expected an object");
        const json_t *al = json_object_get(ma, "act_layer");
        if (al && !json_is_null(al)) {
            const char *a = json_is_string(al) ? json_string_value(al) : NULL;
            if (!a) return tp_fail_path(err, TP_ERR_FORMAT, path, "field 'model_args.act_layer': expected a string");
            if (!strcmp(a, "gelu")) cfg->act_layer = 0;
            else if (!strcmp(a, "gelu_tanh")) cfg->act_layer = 1;
            else
                return tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "field 'model_args.act_layer': '%.64s': tprof's "
                                    "ViT MLP runs gelu or gelu_tanh only", a);
        }
    }

    const json_t *pc = json_object_get(root, "pretrained_cfg");
    if (pc && !json_is_null(pc)) {
        if (!json_is_object(pc))
            return tp_fail_path(err, TP_ERR_FORMAT, path, "field 'pretrained_cfg': expected an object");
        c.prefix = "pretrained_cfg.";
    } else if (looks_legacy(root)) {
        pc = root; /* timm's _parse_model_cfg: the whole object is the pretrained_cfg */
    } else {
        return TP_OK; /* no data config: has_pre 0 */
    }
    if ((s = get_name(&c, pc, c.prefix, "tag", cfg->tag, sizeof cfg->tag))) return s;
    if (cfg->num_classes < 0 && (s = get_count(&c, pc, c.prefix, "num_classes", &cfg->num_classes))) return s;
    if ((s = read_pre(&c, pc, &cfg->pre))) return s;
    cfg->has_pre = 1;
    return TP_OK;
}

tp_status tp_timm_config_read(const char *path, tp_timm_config *out, tp_error *err) {
    if (!path || !*path) return tp_fail(err, TP_ERR_ARG, "timm config: no path given");
    if (!out) return tp_fail(err, TP_ERR_ARG, "timm config %s: no output given", path);
    json_t *root;
    tp_status rs = tp_json_read_file(path, "the timm config", &root, err);
    if (rs) return rs;
    tp_timm_config *cfg = malloc(sizeof *cfg);
    tp_status s = cfg ? read_doc(path, root, cfg, err) : tp_fail(err, TP_ERR_OOM, "%s: out of host memory", path);
    if (s == TP_OK) *out = *cfg;
    free(cfg);
    json_decref(root);
    return s;
}

int tp_timm_config_beside(const char *weights_path, char *cfg_path, size_t n) {
    if (!cfg_path || n == 0) return 0;
    cfg_path[0] = 0;
    if (!weights_path) return 0;
    const char *slash = strrchr(weights_path, '/');
    size_t dir_len = slash ? (size_t)(slash - weights_path) + 1 : 0; /* the folder with its '/' */
    static const char name[] = "config.json";
    if (dir_len + sizeof name > n) return 0;
    memcpy(cfg_path, weights_path, dir_len);
    memcpy(cfg_path + dir_len, name, sizeof name);
    struct stat sb;
    return stat(cfg_path, &sb) == 0 && S_ISREG(sb.st_mode);
}
