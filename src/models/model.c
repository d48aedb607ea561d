/* model.c: the family registry and what every family shares (parameter tables, loading, JSON framing). */
#include "models/model.h"

#include <stdio.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/util.h"
#include "io/hf_config.h"
#include "io/hf_hub.h"
#include "io/timm_config.h"
#include "io/safetensors.h"
#include "models/decoder.h"
#include "models/pi0.h"
#include "models/vit.h"

static const tp_family *const FAMILIES[] = {&tp_vit_family, &tp_decoder_family, &tp_pi0_family, NULL};

const tp_family *const *tp_families(void) { return FAMILIES; }

const tp_family *tp_family_find(const char *name) {
    for (int i = 0; FAMILIES[i]; i++)
        if (strcmp(FAMILIES[i]->name, name) == 0) return FAMILIES[i];
    return NULL;
}

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

static void model_init(tp_model *m, const tp_family *f) {
    CHECK(f->cfg_size <= TP_MODEL_CFG_BYTES);
    memset(m, 0, sizeof *m);
    m->family = f;
}

tp_status tp_model_preset(const char *name, tp_model *m, tp_error *err) {
    for (int k = 0; FAMILIES[k]; k++) {
        const tp_family *f = FAMILIES[k];
        for (int i = 0; i < f->preset_count(); i++) {
            const char *pn, *alias;
            f->preset_info(i, &pn, &alias);
            if (strcmp(name, pn) != 0 && strcmp(name, alias) != 0) continue;
            model_init(m, f);
            f->preset_config(i, m->cfg.bytes);
            return TP_OK;
        }
    }
    char list[2048] = "";
    for (int k = 0; FAMILIES[k]; k++)
        for (int i = 0; i < FAMILIES[k]->preset_count(); i++) {
            const char *pn, *alias;
            FAMILIES[k]->preset_info(i, &pn, &alias);
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s (%s)", l ? ", " : "", alias, pn);
        }
    return tp_fail(err, TP_ERR_ARG, "unknown model '%s'; known: %s", name, list);
}

const char *tp_model_name(const tp_model *m) {
    return m->label[0] ? m->label : m->family->model_name(m->cfg.bytes);
}

/* The checkpoint's name for m (model.h, tp_model.label), "+custom" kept where the family marks a changed shape;
 * at most TP_MODEL_LABEL_LEN - 9 bytes of it, so that the mark fits. */
static void set_label(tp_model *m, const char *name) {
    snprintf(m->label, sizeof m->label, "%.*s", (int)sizeof m->label - 9, name);
    if (strstr(m->family->model_name(m->cfg.bytes), "+custom")) tp_append(m->label, sizeof m->label, "+custom");
}

tp_status tp_model_validate(const tp_model *m, tp_error *err) {
    if (!m->family) return tp_fail(err, TP_ERR_ARG, "no model given");
    return m->family->validate(m->cfg.bytes, err);
}

int tp_model_knob(tp_model *m, const char *name, const char *val, tp_error *err) {
    const int was = strstr(m->family->model_name(m->cfg.bytes), "+custom") != NULL;
    const int r = m->family->knob(m->cfg.bytes, name, val, err);
    if (r != 1 || !m->label[0] || strstr(m->label, "+custom")) return r;
    /* the label marked as the family marks its name, when this knob changes the shape; where the family's name is
     * marked already (a checkpoint's shape set through knobs), the knob is tried on a preset to see */
    int shape = !was && strstr(m->family->model_name(m->cfg.bytes), "+custom");
    if (was) {
        tp_model *probe = malloc(sizeof *probe);
        tp_error pe = {0};
        if (probe) {
            model_init(probe, m->family);
            m->family->preset_config(0, probe->cfg.bytes);
        }
        shape = !probe || m->family->knob(probe->cfg.bytes, name, val, &pe) != 1 ||
                strstr(m->family->model_name(probe->cfg.bytes), "+custom");
        free(probe);
    }
    if (shape) tp_append(m->label, sizeof m->label, "+custom");
    return r;
}

void tp_model_describe(const tp_model *m, char *buf, size_t n) { m->family->describe(m->cfg.bytes, buf, n); }

void tp_model_input(const tp_model *m, tp_input_desc *d) {
    memset(d, 0, sizeof *d);
    m->family->input(m->cfg.bytes, d);
}

void tp_model_output(const tp_model *m, tp_output_desc *d) {
    memset(d, 0, sizeof *d);
    m->family->output(m->cfg.bytes, d);
}

int64_t tp_model_input_numel(const tp_model *m) {
    tp_input_desc d;
    tp_model_input(m, &d);
    int64_t n = 1;
    for (int i = 0; i < d.ndim; i++) n *= d.shape[i];
    return n;
}

json_t *tp_model_to_json(const tp_model *m) {
    json_t *j = m->family->to_json(m->cfg.bytes);
    if (!j) return NULL;
    /* the family first, so a reader sees what the rest means */
    json_t *o = json_object();
    if (m->label[0] && json_object_get(j, "name") && json_object_set_new(j, "name", json_string(m->label))) {
        json_decref(o);
        json_decref(j);
        return NULL;
    }
    if (!o || json_object_set_new(o, "family", json_string(m->family->name)) || json_object_update(o, j)) {
        json_decref(o);
        json_decref(j);
        return NULL;
    }
    json_decref(j);
    return o;
}

tp_status tp_model_from_json(const json_t *j, const char *family_default, tp_model *m, tp_error *err) {
    if (!json_is_object(j)) return tp_fail(err, TP_ERR_FORMAT, "model: expected an object");
    const json_t *fj = json_object_get(j, "family");
    const char *fname = family_default;
    if (fj && !json_is_string(fj)) return tp_fail(err, TP_ERR_FORMAT, "model: 'family' must be a string");
    if (fj) fname = json_string_value(fj);
    if (!fname) return tp_fail(err, TP_ERR_FORMAT, "model: 'family' is missing");
    const tp_family *f = tp_family_find(fname);
    if (!f) {
        char list[256] = "";
        for (int k = 0; FAMILIES[k]; k++) {
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", FAMILIES[k]->name);
        }
        return tp_fail(err, TP_ERR_FORMAT, "model: unknown family '%.64s' (this tprof knows %s)", fname, list);
    }
    json_t *rest = json_copy((json_t *)j); /* shallow: only the "family" key is dropped */
    if (!rest) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    json_object_del(rest, "family");
    model_init(m, f);
    tp_status st = f->from_json(rest, m->cfg.bytes, err);
    json_decref(rest);
    return st;
}

tp_status tp_model_from_file(const char *path, tp_model *m, tp_error *err) {
    json_t *j = NULL;
    tp_status st = tp_json_read_file(path, "the model description", &j, err);
    if (st) return st;
    tp_error e = {0};
    st = tp_model_from_json(j, NULL, m, &e);
    json_decref(j);
    return st ? tp_fail(err, st, "%s: %.450s", path, e.msg) : TP_OK;
}

tp_status tp_model_checkpoint(tp_model *m, const char *weights_path, char *note, size_t n, tp_error *err) {
    if (n) note[0] = 0;
    tp_status st = m->family->checkpoint(m->cfg.bytes, weights_path, note, n, err);
    char id[128];
    if (!st && !m->label[0] && tp_hf_hub_id_of(weights_path, id, sizeof id)) set_label(m, id);
    return st;
}

/* config.json in the checkpoint folder of weights_path into path (n bytes); 0, or -1 when it does not fit */
static int config_beside(const char *weights_path, char *path, size_t n) {
    char dir[4096];
    if (tp_hf_checkpoint_dir(weights_path, dir, sizeof dir)) return -1;
    return snprintf(path, n, "%s/config.json", dir) < (int)n ? 0 : -1;
}

static tp_ckpt_kind kind_of(const json_t *j) {
    if (!json_is_object(j)) return TP_CKPT_OTHER;
    if (json_is_string(json_object_get(j, "architecture"))) return TP_CKPT_TIMM; /* timm's, also in HF's timm_wrapper */
    if (json_object_get(j, "architectures") || json_object_get(j, "model_type")) return TP_CKPT_HF;
    return TP_CKPT_OTHER;
}

tp_ckpt_kind tp_model_checkpoint_kind(const char *weights_path) {
    char path[4200];
    struct stat sb;
    if (config_beside(weights_path, path, sizeof path) || stat(path, &sb) != 0) return TP_CKPT_NONE;
    json_t *j = NULL;
    tp_error e = {0};
    if (tp_json_read_file(path, "the checkpoint's config", &j, &e)) return TP_CKPT_OTHER;
    const tp_ckpt_kind k = kind_of(j);
    json_decref(j);
    return k;
}

/* One knob from a timm config value: integers and reals as text, strings as they are ("" global_pool: none),
 * booleans as a flag pair. 1 applied, else an error naming where. */
static tp_status timm_knob(tp_model *m, const char *path, const char *key, const char *knob, const json_t *v,
                           tp_error *err) {
    char val[64];
    const char *arg = val;
    if (json_is_integer(v)) snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(val, sizeof val, "%.17g", json_real_value(v));
    else if (json_is_string(v)) snprintf(val, sizeof val, "%s", *json_string_value(v) ? json_string_value(v) : "none");
    else if (json_is_boolean(v) && !strcmp(knob, "--class-token")) knob = json_is_true(v) ? "--class-token" : "--no-class-token", arg = NULL;
    else return tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "field '%s' is %s: tprof's ViT takes a number or a name "
                             "there", key, tp_json_kind(v));
    tp_error e = {0};
    if (tp_model_knob(m, knob, arg, &e) != 1)
        return tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "field '%s': %.300s", key, e.msg);
    return TP_OK;
}

/* timm's model_args (the keyword arguments the model was created with) over m, each through the ViT's knob */
static tp_status timm_model_args(tp_model *m, const char *path, const json_t *args, tp_error *err) {
    static const char *const MAP[][2] = {{"img_size", "--img-size"},     {"patch_size", "--patch-size"},
                                         {"embed_dim", "--embed-dim"},   {"depth", "--depth"},
                                         {"num_heads", "--heads"},       {"mlp_ratio", "--mlp-ratio"},
                                         {"class_token", "--class-token"}, {"global_pool", "--global-pool"},
                                         {"num_classes", "--num-classes"}, {"act_layer", "--act-layer"}};
    if (!args || json_is_null(args)) return TP_OK;
    if (!json_is_object(args)) return tp_fail_path(err, TP_ERR_FORMAT, path, "field 'model_args': expected an object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)args, key, v) {
        const char *knob = NULL;
        for (size_t i = 0; i < sizeof MAP / sizeof MAP[0] && !knob; i++)
            if (!strcmp(key, MAP[i][0])) knob = MAP[i][1];
        /* timm's defaults, which tprof's ViT builds: harmless to say */
        if (!knob && ((!strcmp(key, "in_chans") && json_integer_value(v) == 3) || (!strcmp(key, "qkv_bias") && json_is_true(v))))
            continue;
        char where[96];
        snprintf(where, sizeof where, "model_args.%.80s", key);
        if (!knob)
            return tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "field '%s': tprof's ViT does not build it (it reads "
                                "img_size, patch_size, embed_dim, depth, num_heads, mlp_ratio, class_token, "
                                "global_pool, num_classes, act_layer)", where);
        tp_status st = timm_knob(m, path, where, knob, v, err);
        if (st) return st;
    }
    return TP_OK;
}

/* A ViT from timm's config.json at path */
static tp_status from_timm(const char *path, const json_t *j, tp_model *m, tp_error *err) {
    tp_timm_config tc;
    tp_status st = tp_timm_config_read(path, &tc, err);
    if (st) return st;
    tp_error e = {0};
    const int preset = tp_model_preset(tc.architecture, m, &e) == TP_OK && m->family == tp_family_find("vit");
    const json_t *args = json_object_get(j, "model_args");
    if (!preset && (strncmp(tc.architecture, "vit_", 4) != 0 || !json_is_object(args)))
        return tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "architecture '%.100s' is not one of tprof's ViT presets "
                            "(tprof models) and the file has no model_args for timm's VisionTransformer: name a "
                            "preset and its knobs with --model PRESET --weights", tc.architecture);
    if (!preset && (st = tp_model_preset("vit_base_patch16_224", m, err))) return st; /* VisionTransformer()'s */
    if ((st = timm_model_args(m, path, args, err))) return st;
    /* the top-level fields timm writes from the model itself (num_classes also from pretrained_cfg) */
    static const char *const POOLS[] = {"token", "avg", "none"};
    char classes[24];
    snprintf(classes, sizeof classes, "%d", tc.num_classes);
    if ((tc.num_classes >= 0 && tp_model_knob(m, "--num-classes", classes, &e) != 1) ||
        (tc.global_pool >= 0 && tp_model_knob(m, "--global-pool", POOLS[tc.global_pool], &e) != 1))
        return tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "%.400s", e.msg);
    m->label[0] = 0;
    set_label(m, tc.architecture);
    m->label[strcspn(m->label, "+")] = 0; /* the checkpoint's own shape: nothing custom about it */
    return TP_OK;
}

tp_status tp_model_from_checkpoint(const char *weights_path, tp_model *m, char *note, size_t n, tp_error *err) {
    char path[4200];
    if (n) note[0] = 0;
    if (config_beside(weights_path, path, sizeof path)) return tp_fail(err, TP_ERR_ARG, "%s: path too long", weights_path);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return tp_fail(err, TP_ERR_IO, "%s: no config.json beside it to tell the model by (transformers' or timm's); "
                       "name the model: --model PRESET --weights %s", weights_path, weights_path);
    json_t *j = NULL;
    tp_status st = tp_json_read_file(path, "the checkpoint's config", &j, err);
    if (st) return st;
    const tp_ckpt_kind kind = kind_of(j);
    if (kind == TP_CKPT_TIMM) {
        st = from_timm(path, j, m, err);
    } else if (kind == TP_CKPT_HF) { /* every size from the file (the decoder's checkpoint), its run defaults kept */
        const tp_family *f = tp_family_find("decoder");
        model_init(m, f);
        f->preset_config(0, m->cfg.bytes);
    } else {
        st = tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "neither transformers' config (\"architectures\") nor timm's "
                          "(\"architecture\"): tprof cannot tell which model it describes");
    }
    json_decref(j);
    if (!st) st = tp_model_checkpoint(m, weights_path, note, n, err);
    return st;
}

tp_status tp_model_limits(const tp_model *m, int strict, char *warn, size_t n, tp_error *err) {
    char line[400] = "";
    if (n) warn[0] = 0;
    if (m->family->limits) m->family->limits(m->cfg.bytes, line, sizeof line);
    if (!line[0]) return TP_OK;
    if (strict) return tp_fail(err, TP_ERR_ARG, "%s (--strict)", line);
    snprintf(warn, n, "warning: %s (--strict refuses this)", line);
    return TP_OK;
}

tp_status tp_model_params_shapes(const tp_model *m, tp_params *out, tp_error *err) {
    memset(out, 0, sizeof *out);
    tp_status st = tp_model_validate(m, err);
    return st ? st : m->family->params_table(m->cfg.bytes, out, err);
}

tp_status tp_model_params_init(const tp_model *m, uint64_t seed, int nonzero_bias, tp_params *out, tp_error *err) {
    memset(out, 0, sizeof *out);
    tp_status st = tp_model_validate(m, err);
    return st ? st : m->family->params_init(m->cfg.bytes, seed, nonzero_bias, out, err);
}

tp_status tp_model_params_load(const tp_model *m, const char *path, tp_params *out, tp_error *err) {
    if (m->family->params_load) {
        memset(out, 0, sizeof *out);
        tp_status v = tp_model_validate(m, err);
        return v ? v : m->family->params_load(m->cfg.bytes, path, out, err);
    }
    return tp_model_params_load_names(m, path, out, err);
}

tp_status tp_model_params_load_names(const tp_model *m, const char *path, tp_params *out, tp_error *err) {
    tp_status s = tp_model_params_shapes(m, out, err);
    if (s) return s;
    tp_param_spec *specs = calloc((size_t)out->n_params, sizeof *specs);
    if (!specs) {
        tp_params_free(out);
        return tp_fail(err, TP_ERR_OOM, "out of host memory loading %s", path);
    }
    for (int i = 0; i < out->n_params && !s; i++) {
        tp_param *p = &out->params[i];
        p->data = malloc(sizeof(float) * (size_t)(p->numel ? p->numel : 1));
        if (!p->data) s = tp_fail(err, TP_ERR_OOM, "out of host memory for %s (%lld values)", p->name,
                                  (long long)p->numel);
        specs[i].name = p->name;
        specs[i].ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) specs[i].shape[d] = p->shape[d];
        specs[i].dst = p->data;
    }
    if (!s) s = tp_hf_load_params(path, specs, out->n_params, err);
    free(specs);
    if (s) tp_params_free(out);
    return s;
}

int tp_params_nonfinite(const tp_params *p, const char *path, tp_error *err) {
    int tensors = 0, first = -1;
    int64_t first_n = 0;
    for (int i = 0; i < p->n_params; i++) {
        const tp_param *q = &p->params[i];
        int64_t bad = 0;
        if (!q->data) continue;
        /* once per load, but over every weight (tens of GB for a large checkpoint): all cores */
#pragma omp parallel for reduction(+ : bad) if (q->numel > (1 << 20))
        for (int64_t k = 0; k < q->numel; k++) bad += !isfinite(q->data[k]);
        if (!bad) continue;
        if (first < 0) first = i, first_n = bad;
        tensors++;
    }
    if (tensors)
        tp_fail(err, TP_ERR_FORMAT, "%s: tensor '%s' holds %lld non-finite value%s (NaN or Inf) of %lld%s", path,
                p->params[first].name, (long long)first_n, first_n == 1 ? "" : "s",
                (long long)p->params[first].numel, tensors > 1 ? "; more tensors do too" : "");
    return tensors;
}

tp_status tp_model_build_graph(const tp_model *m, const tp_params *params, int64_t B, tp_graph *g, tp_error *err) {
    tp_status st = tp_model_validate(m, err);
    if (st) return st;
    if (B <= 0) return tp_fail(err, TP_ERR_ARG, "--batch %lld: must be positive", (long long)B);
    return m->family->build_graph(m->cfg.bytes, params, B, g, err);
}

tp_status tp_model_build_step(const tp_model *m, const tp_params *params, const tp_step_shape *step, tp_graph *g,
                              tp_error *err) {
    tp_status st = tp_model_validate(m, err);
    if (st) return st;
    if (!m->family->build_step)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "model %s (%s): no KV cache, so no prefill or decode steps",
                       tp_model_name(m), m->family->name);
    if (step->batch <= 0 || step->tokens <= 0 || step->past < 0 || step->past + step->tokens > step->kv_len)
        return tp_fail(err, TP_ERR_ARG, "step of %lld x %lld tokens after %lld cached: outside a KV cache of %lld "
                       "positions", (long long)step->batch, (long long)step->tokens, (long long)step->past,
                       (long long)step->kv_len);
    return m->family->build_step(m->cfg.bytes, params, step, g, err);
}

tp_status tp_model_tp_check(const tp_model *m, int n, tp_error *err) {
    if (n < 1) return tp_fail(err, TP_ERR_ARG, "--tp %d: must be at least 1", n);
    if (n == 1) return TP_OK;
    if (!m->family->tp_check || !m->family->param_split)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "--tp %d: model %s (%s) has no tensor-parallel layout", n,
                       tp_model_name(m), m->family->name);
    return m->family->tp_check(m->cfg.bytes, n, err);
}

/* Where parameter f goes on rank r of n: *d the dimension cut (-1: whole on every rank, -2: rank 0 only). */
static tp_status shard_dim(const tp_model *m, const tp_param *f, int n, int *d, tp_error *err) {
    const tp_split sp = n == 1 ? TP_SPLIT_NONE : m->family->param_split(m->cfg.bytes, f->name);
    *d = sp == TP_SPLIT_FIRST ? -2 : sp == TP_SPLIT_ROWS ? 0 : sp == TP_SPLIT_COLS ? 1 : -1;
    if (*d >= f->ndim || (*d >= 0 && f->shape[*d] % n))
        return tp_fail(err, TP_ERR_SHAPE, "%s: dimension %d (%lld) does not split over %d ranks", f->name, *d,
                       *d < f->ndim ? (long long)f->shape[*d] : 0LL, n);
    return TP_OK;
}

/* Rank r's copy of f cut along d into *p (data allocated and filled when f has data). Returns 0, or -1 when out
 * of host memory. */
static int shard_one(const tp_param *f, int d, int rank, int n, tp_param *p) {
    *p = *f;
    p->data = NULL;
    if (d >= 0) p->shape[d] /= n;
    p->numel = f->numel / (d >= 0 ? n : 1);
    if (!f->data) return 0;
    if (!(p->data = malloc(sizeof(float) * (size_t)p->numel))) return -1;
    /* rows: one contiguous block; columns: a block of each row */
    const int64_t rows = d == 1 ? f->shape[0] : 1, w = p->numel / rows, fw = d == 1 ? f->shape[1] : 0;
    const int64_t off = d == 0 ? (int64_t)rank * p->numel : d == 1 ? (int64_t)rank * w : 0;
    for (int64_t r = 0; r < rows; r++) memcpy(p->data + r * w, f->data + r * fw + off, sizeof(float) * (size_t)w);
    return 0;
}

tp_status tp_model_shard_params(const tp_model *m, const tp_params *full, int rank, int n, tp_params *out,
                                tp_error *err) {
    memset(out, 0, sizeof *out);
    tp_status st = tp_model_tp_check(m, n, err);
    if (st) return st;
    if (rank < 0 || rank >= n) return tp_fail(err, TP_ERR_ARG, "rank %d of %d", rank, n);
    if (!(out->params = calloc((size_t)(full->n_params ? full->n_params : 1), sizeof(tp_param))))
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < full->n_params; i++) {
        const tp_param *f = &full->params[i];
        int d;
        if ((st = shard_dim(m, f, n, &d, err))) break;
        if (d == -2 && rank > 0) continue;
        if (shard_one(f, d, rank, n, &out->params[out->n_params++])) {
            st = tp_fail(err, TP_ERR_OOM, "out of host memory for %s's shard", f->name);
            break;
        }
    }
    if (st) tp_params_free(out);
    return st;
}

tp_status tp_model_shard_all(const tp_model *m, tp_params *full, int n, int release, tp_params *out, tp_error *err) {
    if (n < 1) return tp_fail(err, TP_ERR_ARG, "%d ranks: at least 1", n);
    memset(out, 0, sizeof *out * (size_t)n);
    tp_status st = tp_model_tp_check(m, n, err);
    if (st) return st;
    int *dim = malloc(sizeof(int) * (size_t)(full->n_params ? full->n_params : 1));
    int *slot = malloc(sizeof(int) * (size_t)(full->n_params ? full->n_params : 1));
    for (int r = 0; r < n && dim && slot; r++)
        if (!(out[r].params = calloc((size_t)(full->n_params ? full->n_params : 1), sizeof(tp_param)))) break;
    if (!dim || !slot || !out[n - 1].params) st = tp_fail(err, TP_ERR_OOM, "out of host memory");
    /* every rank's table in the order tp_model_shard_params gives; rank 0 has every tensor, so slot i of rank
     * r > 0 is the count of tensors before i that rank r has */
    int kept = 0;
    for (int i = 0; i < full->n_params && !st; i++) {
        if ((st = shard_dim(m, &full->params[i], n, &dim[i], err))) break;
        slot[i] = dim[i] == -2 ? -1 : kept++;
    }
    int oom = -1;
    /* the tensors in parallel: a 70B model's 280 GB of fp32 values are copied at the machine's memory bandwidth,
     * and with release each full tensor is freed as soon as its shards exist (the peak stays near one copy) */
    const int nt = omp_get_max_threads() < TP_SHARD_THREADS ? omp_get_max_threads() : TP_SHARD_THREADS;
#pragma omp parallel for schedule(dynamic) num_threads(nt)
    for (int i = 0; i < (st ? 0 : full->n_params); i++) {
        tp_param *f = &full->params[i];
        int failed = 0;
        for (int r = 0; r < n && !failed; r++) {
            if (dim[i] == -2 && r > 0) continue;
            failed = shard_one(f, dim[i], r, n, &out[r].params[r == 0 ? i : slot[i]]) != 0;
        }
        if (failed) {
#pragma omp atomic write
            oom = i;
        } else if (release) { /* this tensor's values now live in its shards */
            free(f->data);
            f->data = NULL;
        }
    }
    if (!st && oom >= 0) st = tp_fail(err, TP_ERR_OOM, "out of host memory for %s's shards", full->params[oom].name);
    for (int r = 0; r < n && out[r].params; r++) out[r].n_params = r == 0 ? full->n_params : kept;
    if (st)
        for (int r = 0; r < n; r++) tp_params_free(&out[r]);
    free(dim);
    free(slot);
    return st;
}

tp_status tp_model_make_input(const tp_model *m, int B, uint64_t seed, const char *path, float *dst, char *desc,
                              size_t desc_n, tp_error *err) {
    if (desc_n) desc[0] = 0;
    return m->family->make_input(m->cfg.bytes, B, seed, path, dst, desc, desc_n, err);
}
