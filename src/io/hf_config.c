/* hf_config.c: HF transformers decoder checkpoints (hf_config.h). */
#include "io/hf_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/util.h"

typedef struct {
    const char *path;
    tp_error *err;
} ctx;

/* Integer field key of o: absent or null leaves *dst; otherwise an integer in [lo, hi]. */
static tp_status get_int(const ctx *c, const json_t *o, const char *where, const char *key, long lo, long hi,
                         int *dst) {
    const json_t *v = json_object_get(o, key);
    char b[48];
    if (!v || json_is_null(v)) return TP_OK;
    if (!json_is_integer(v))
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': expected an integer in [%ld, %ld], got %s",
                            where, key, lo, hi, tp_json_brief(v, b, sizeof b));
    if (json_integer_value(v) < lo || json_integer_value(v) > hi)
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': %lld is outside [%ld, %ld]", where, key,
                            (long long)json_integer_value(v), lo, hi);
    *dst = (int)json_integer_value(v);
    return TP_OK;
}

/* Number field key > 0 (and finite): absent or null leaves *dst. */
static tp_status get_pos(const ctx *c, const json_t *o, const char *where, const char *key, double *dst) {
    const json_t *v = json_object_get(o, key);
    char b[48];
    if (!v || json_is_null(v)) return TP_OK;
    if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v)))
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': expected a positive number, got %s", where,
                            key, tp_json_brief(v, b, sizeof b));
    *dst = json_number_value(v);
    return TP_OK;
}

static tp_status get_bool(const ctx *c, const json_t *o, const char *key, int *dst) {
    const json_t *v = json_object_get(o, key);
    char b[48];
    if (!v || json_is_null(v)) return TP_OK;
    if (!json_is_boolean(v))
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s': expected true or false, got %s", key,
                            tp_json_brief(v, b, sizeof b));
    *dst = json_is_true(v);
    return TP_OK;
}

static tp_status get_str(const ctx *c, const json_t *o, const char *where, const char *key, char *dst, size_t n) {
    const json_t *v = json_object_get(o, key);
    char b[48];
    if (!v || json_is_null(v)) return TP_OK;
    if (!json_is_string(v) || json_string_length(v) >= n)
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': expected a string of at most %zu bytes, "
                            "got %s", where, key, n - 1, tp_json_brief(v, b, sizeof b));
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return TP_OK;
}

/* An object field (or null): *dst NULL when absent, null or empty. */
static tp_status get_obj(const ctx *c, const json_t *o, const char *key, const json_t **dst) {
    const json_t *v = json_object_get(o, key);
    char b[48];
    *dst = NULL;
    if (!v || json_is_null(v)) return TP_OK;
    if (!json_is_object(v))
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s': expected an object or null, got %s", key,
                            tp_json_brief(v, b, sizeof b));
    if (json_object_size(v)) *dst = v;
    return TP_OK;
}

/* partial_rotary_factor at o (where: its prefix): 1 or absent, else refused (tprof rotates every dimension). */
static tp_status full_rotary(const ctx *c, const json_t *o, const char *where) {
    double f = 1.0;
    tp_status s = get_pos(c, o, where, "partial_rotary_factor", &f);
    if (s || f == 1.0) return s;
    return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field '%spartial_rotary_factor' %g: transformers would "
                        "rotate only that share of each head's dimensions; tprof implements full rotary embeddings "
                        "(1.0) only", where, f);
}

/* The rotary embedding where transformers reads it. transformers 5 (modeling_rope_utils.py,
 * RotaryEmbeddingConfigMixin.convert_rope_params_to_dict and standardize_rope_params) takes a non-empty top-level
 * rope_scaling in place of rope_parameters ("self.rope_parameters = rope_scaling or self.rope_parameters"), then
 * setdefault()s rope_theta and partial_rotary_factor from the top level into it (the dict's own value first, then
 * the top level, then rope_theta 10000), the type from "rope_type", else "type", else "default", and for llama3
 * original_max_position_embeddings from max_position_embeddings. transformers 4 (_compute_default_rope_parameters)
 * reads the top-level rope_theta and getattr(config, "partial_rotary_factor", 1.0). A partial factor other than 1
 * is refused at either place, so the versions' difference over which one wins cannot change what tprof runs. */
static tp_status read_rope(const ctx *c, const json_t *root, tp_hf_config *h) {
    const json_t *rp, *rs;
    tp_status s;
    if ((s = get_obj(c, root, "rope_parameters", &rp)) || (s = get_obj(c, root, "rope_scaling", &rs))) return s;
    const json_t *d = rs ? rs : rp;
    const char *where = rs ? "rope_scaling." : "rope_parameters.";
    const char *key;
    const json_t *v;
    if (d) json_object_foreach((json_t *)d, key, v) /* {"full_attention": {...}, "sliding_attention": {...}} */
        if (json_is_object(v))
            return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field '%s%s': rotary parameters per layer type "
                                "are not implemented (tprof runs one rotary embedding in every layer)", where, key);
    h->rope.type = TP_ROPE_DEFAULT;
    double theta = NAN, top = NAN;
    if ((d && (s = get_pos(c, d, where, "rope_theta", &theta))) || (s = get_pos(c, root, "", "rope_theta", &top)))
        return s;
    if (!isfinite(theta)) theta = top;
    if (isfinite(theta)) {
        h->has_rope = 1;
        h->rope.theta = theta;
    }
    if ((d && (s = full_rotary(c, d, where))) || (s = full_rotary(c, root, ""))) return s;
    if (!d) return TP_OK;
    char type[32] = "default";
    if ((s = get_str(c, d, where, "type", type, sizeof type))) return s; /* the older key */
    if ((s = get_str(c, d, where, "rope_type", type, sizeof type))) return s;
    if (strcmp(type, "default") == 0) return TP_OK;
    if (strcmp(type, "llama3") != 0)
        return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field '%srope_type' \"%s\": tprof implements "
                            "\"default\" and \"llama3\" rotary embeddings", where, type);
    h->rope.type = TP_ROPE_LLAMA3;
    h->rope.factor = h->rope.low_freq = h->rope.high_freq = NAN;
    h->rope.orig_ctx = h->max_position_embeddings; /* standardize_rope_params' default */
    if ((s = get_pos(c, d, where, "factor", &h->rope.factor)) ||
        (s = get_pos(c, d, where, "low_freq_factor", &h->rope.low_freq)) ||
        (s = get_pos(c, d, where, "high_freq_factor", &h->rope.high_freq)) ||
        (s = get_int(c, d, where, "original_max_position_embeddings", 1, 100000000, &h->rope.orig_ctx)))
        return s;
    const char *missing = !isfinite(h->rope.factor)      ? "factor"
                          : !isfinite(h->rope.low_freq)  ? "low_freq_factor"
                          : !isfinite(h->rope.high_freq) ? "high_freq_factor"
                          : h->rope.orig_ctx < 0         ? "original_max_position_embeddings"
                                                         : NULL;
    if (missing)
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%s%s': missing (llama3 rotary embedding)", where,
                            missing);
    if (!(h->rope.high_freq > h->rope.low_freq))
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field '%shigh_freq_factor' %g: must exceed "
                            "low_freq_factor %g", where, h->rope.high_freq, h->rope.low_freq);
    return TP_OK;
}

/* layer_types (transformers 5: one entry a layer): full_attention or sliding_attention, counted. */
static tp_status read_layer_types(const ctx *c, const json_t *root, tp_hf_config *h) {
    const json_t *lt = json_object_get(root, "layer_types");
    char b[48];
    h->sliding_layers = -1;
    if (!lt || json_is_null(lt)) return TP_OK;
    if (!json_is_array(lt) || (h->num_hidden_layers > 0 && json_array_size(lt) != (size_t)h->num_hidden_layers))
        return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field 'layer_types': expected a list of %d names (one a "
                            "layer: num_hidden_layers), got %s", h->num_hidden_layers, tp_json_brief(lt, b, sizeof b));
    h->sliding_layers = 0;
    for (size_t i = 0; i < json_array_size(lt); i++) {
        const json_t *e = json_array_get(lt, i);
        const char *t = json_is_string(e) ? json_string_value(e) : "";
        if (strcmp(t, "sliding_attention") == 0) h->sliding_layers++;
        else if (strcmp(t, "full_attention") != 0)
            return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field 'layer_types[%zu]' %s: tprof's decoder "
                                "layers are full_attention (or sliding_attention within its window)", i,
                                tp_json_brief(e, b, sizeof b));
    }
    return TP_OK;
}

/* Fields of other architectures that change the output where they are read (Gemma 2's soft-capping, bidirectional
 * attention); the four architectures tprof reads have none of them, so a config holding one is refused rather
 * than run without it. */
static tp_status refuse_others(const ctx *c, const json_t *root) {
    static const char *const caps[] = {"attn_logit_softcapping", "final_logit_softcapping"};
    char b[48];
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(root, caps[i]);
        if (v && !json_is_null(v))
            return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field '%s' %s: tprof does not soft-cap logits "
                                "(Gemma 2's tanh capping)", caps[i], tp_json_brief(v, b, sizeof b));
    }
    const json_t *v = json_object_get(root, "use_bidirectional_attention");
    if (json_is_true(v))
        return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field 'use_bidirectional_attention' true: tprof's "
                            "decoders attend causally");
    return TP_OK;
}

static tp_status read_doc(const ctx *c, const json_t *root, tp_hf_config *h) {
    if (!json_is_object(root)) return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "expected a JSON object");
    const json_t *q = json_object_get(root, "quantization_config");
    if (q && !json_is_null(q))
        return tp_fail_path(c->err, TP_ERR_UNSUPPORTED, c->path, "field 'quantization_config': pre-quantized "
                            "checkpoints are not read; give the unquantized one (tprof quantizes it itself)");
    memset(h, 0, sizeof *h);
    h->hidden_size = h->intermediate_size = h->num_hidden_layers = h->num_attention_heads = -1;
    h->num_key_value_heads = h->head_dim = h->vocab_size = h->max_position_embeddings = -1;
    h->use_sliding_window = h->max_window_layers = h->tie_word_embeddings = h->attention_bias = h->mlp_bias = -1;
    h->rms_norm_eps = h->query_pre_attn_scalar = NAN;
    const json_t *arch = json_object_get(root, "architectures");
    if (arch && !json_is_null(arch)) {
        if (!json_is_array(arch) || json_array_size(arch) < 1 || !json_is_string(json_array_get(arch, 0)))
            return tp_fail_path(c->err, TP_ERR_FORMAT, c->path, "field 'architectures': expected a list of names");
        snprintf(h->architecture, sizeof h->architecture, "%s", json_string_value(json_array_get(arch, 0)));
    }
    const long BIG = 100000000;
    tp_status s;
    if ((s = get_str(c, root, "", "model_type", h->model_type, sizeof h->model_type)) ||
        (s = get_int(c, root, "", "hidden_size", 1, BIG, &h->hidden_size)) ||
        (s = get_int(c, root, "", "intermediate_size", 1, BIG, &h->intermediate_size)) ||
        (s = get_int(c, root, "", "num_hidden_layers", 1, 100000, &h->num_hidden_layers)) ||
        (s = get_int(c, root, "", "num_attention_heads", 1, 100000, &h->num_attention_heads)) ||
        (s = get_int(c, root, "", "num_key_value_heads", 1, 100000, &h->num_key_value_heads)) ||
        (s = get_int(c, root, "", "head_dim", 1, 100000, &h->head_dim)) ||
        (s = get_int(c, root, "", "vocab_size", 1, 1 << 24, &h->vocab_size)) ||
        (s = get_int(c, root, "", "max_position_embeddings", 1, BIG, &h->max_position_embeddings)) ||
        (s = get_int(c, root, "", "sliding_window", 0, BIG, &h->sliding_window)) ||
        (s = get_bool(c, root, "use_sliding_window", &h->use_sliding_window)) ||
        (s = get_int(c, root, "", "max_window_layers", 0, 100000, &h->max_window_layers)) ||
        (s = get_bool(c, root, "tie_word_embeddings", &h->tie_word_embeddings)) ||
        (s = get_bool(c, root, "attention_bias", &h->attention_bias)) ||
        (s = get_bool(c, root, "mlp_bias", &h->mlp_bias)) ||
        (s = get_pos(c, root, "", "rms_norm_eps", &h->rms_norm_eps)) ||
        (s = get_pos(c, root, "", "query_pre_attn_scalar", &h->query_pre_attn_scalar)) ||
        (s = get_str(c, root, "", "hidden_act", h->hidden_act, sizeof h->hidden_act)) ||
        (s = get_str(c, root, "", "hidden_activation", h->hidden_act, sizeof h->hidden_act)) ||
        (s = read_layer_types(c, root, h)) || (s = refuse_others(c, root)))
        return s;
    if (h->sliding_window < 0) h->sliding_window = 0;
    return read_rope(c, root, h);
}

tp_status tp_hf_config_read(const char *path, tp_hf_config *out, tp_error *err) {
    json_t *root;
    tp_status s = tp_json_read_file(path, "the HF config", &root, err);
    if (s) return s;
    ctx c = {path, err};
    tp_hf_config h;
    s = read_doc(&c, root, &h);
    json_decref(root);
    if (!s) *out = h;
    return s;
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

int tp_hf_checkpoint_dir(const char *weights_path, char *dir, size_t n) {
    if (is_dir(weights_path)) return snprintf(dir, n, "%s", weights_path) < (int)n ? 0 : -1;
    const char *slash = strrchr(weights_path, '/');
    if (!slash) return snprintf(dir, n, ".") < (int)n ? 0 : -1;
    return snprintf(dir, n, "%.*s", (int)(slash - weights_path), weights_path) < (int)n ? 0 : -1;
}

/* The sharded checkpoint of index file `index` (in folder dir). */
static tp_status load_sharded(const char *index, const char *dir, const tp_param_spec *specs, int n_specs,
                              tp_error *err) {
    json_t *root;
    tp_status s = tp_json_read_file(index, "the safetensors index", &root, err);
    if (s) return s;
    const json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    tp_param_spec *sub = malloc(sizeof *sub * (size_t)(n_specs ? n_specs : 1));
    const char **shard_of = calloc((size_t)(n_specs ? n_specs : 1), sizeof *shard_of);
    if (!sub || !shard_of) s = tp_fail(err, TP_ERR_OOM, "%s: out of host memory", index);
    else if (!json_is_object(wm)) s = tp_fail_path(err, TP_ERR_FORMAT, index, "no 'weight_map' object");
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)wm, key, val) {
        if (s) break;
        const char *f = json_is_string(val) ? json_string_value(val) : NULL;
        if (!f || !*f || strchr(f, '/') || strstr(f, ".."))
            s = tp_fail_path(err, TP_ERR_FORMAT, index, "weight_map['%s']: expected a file name in the folder", key);
        int found = -1;
        for (int i = 0; !s && i < n_specs && found < 0; i++)
            if (strcmp(specs[i].name, key) == 0) found = i;
        if (!s && found < 0)
            s = tp_fail_path(err, TP_ERR_SHAPE, index, "tensor '%s' (in %s) is not a parameter of the model", key, f);
        if (!s) shard_of[found] = f;
    }
    for (int i = 0; !s && i < n_specs; i++)
        if (!shard_of[i]) s = tp_fail_path(err, TP_ERR_SHAPE, index, "tensor '%s' missing from weight_map", specs[i].name);
    /* each shard once, with exactly the tensors the index maps to it */
    for (int i = 0; !s && i < n_specs; i++) {
        int seen = 0, n = 0;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(shard_of[j], shard_of[i]) == 0;
        if (seen) continue;
        for (int j = i; j < n_specs; j++)
            if (strcmp(shard_of[j], shard_of[i]) == 0) sub[n++] = specs[j];
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, shard_of[i]) >= (int)sizeof path)
            s = tp_fail_path(err, TP_ERR_ARG, index, "shard path too long");
        else s = tp_st_load_params(path, sub, n, err);
    }
    free(sub);
    free(shard_of);
    json_decref(root);
    return s;
}

tp_status tp_hf_load_params(const char *weights_path, const tp_param_spec *specs, int n_specs, tp_error *err) {
    char dir[4096], p[4200];
    const size_t L = strlen(weights_path);
    static const char IDX[] = ".safetensors.index.json";
    if (tp_hf_checkpoint_dir(weights_path, dir, sizeof dir))
        return tp_fail(err, TP_ERR_ARG, "%s: path too long", weights_path);
    if (L >= sizeof IDX - 1 && strcmp(weights_path + L - (sizeof IDX - 1), IDX) == 0)
        return load_sharded(weights_path, dir, specs, n_specs, err);
    if (!is_dir(weights_path)) return tp_st_load_params(weights_path, specs, n_specs, err);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (is_file(p)) return tp_st_load_params(p, specs, n_specs, err);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    if (is_file(p)) return load_sharded(p, dir, specs, n_specs, err);
    return tp_fail(err, TP_ERR_IO, "%s: a folder without model.safetensors or model.safetensors.index.json",
                   weights_path);
}
