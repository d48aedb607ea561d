#include "models/builder.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/util.h"

int tp_pb_add(tp_param_builder *b, const char *name, int init, int ndim, int64_t d0, int64_t d1, int64_t d2,
              int64_t d3) {
    if (b->p->n_params == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        tp_param *np = realloc(b->p->params, sizeof(tp_param) * (size_t)b->cap);
        int *ni = realloc(b->init, sizeof(int) * (size_t)b->cap);
        if (np) b->p->params = np;
        if (ni) b->init = ni;
        if (!np || !ni) return -1;
    }
    tp_param *t = &b->p->params[b->p->n_params];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    const int64_t d[4] = {d0, d1, d2, d3};
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = d[i];
        t->numel *= d[i];
    }
    if (b->alloc && !(t->data = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1)))) return -1;
    b->init[b->p->n_params] = init;
    b->p->n_params++;
    return 0;
}

int tp_gb_param(tp_graph_builder *b, const char *layer, const char *suffix) {
    if (b->st) return -1;
    char name[TP_NAME_LEN + 32];
    snprintf(name, sizeof name, "%s%s%s%s", b->prefix ? b->prefix : "", layer, suffix ? "." : "", suffix ? suffix : "");
    int i = tp_params_find(b->p, name);
    if (i < 0) {
        b->st = tp_fail(b->err, TP_ERR_SHAPE, "parameter '%s' missing from the model's table", name);
        return -1;
    }
    return tp_graph_add_value(b->g, name, TP_VAL_PARAM, b->p->params[i].ndim, b->p->params[i].shape, i);
}

int tp_gb_op(tp_graph_builder *b, tp_op *op, const char *layer, const int *in, int n_in, int ndim,
             const int64_t *shape, const char *out_name) {
    if (b->st) return -1;
    const char *pre = b->prefix ? b->prefix : "";
    snprintf(op->layer, sizeof op->layer, "%s%s", pre, layer);
    char out[TP_NAME_LEN];
    if (out_name && *pre) snprintf(out, sizeof out, "%s%s", pre, out_name);
    return tp_graph_op_out(b->g, tp_graph_add_op(b->g, op, in, n_in, ndim, shape, out_name && *pre ? out : out_name));
}

int tp_gb_linear(tp_graph_builder *b, const char *layer, int x, int bias, int ndim, const int64_t *shape,
                 const char *out_name) {
    tp_op op = {.kind = TP_OP_LINEAR};
    const int in[3] = {x, tp_gb_param(b, layer, "weight"), bias ? tp_gb_param(b, layer, "bias") : -1};
    if (b->st) return -1;
    /* the table's shapes must be this linear's: a (N, K) weight, an (N) bias */
    const tp_value *xv = &b->g->values[x], *w = &b->g->values[in[1]];
    const int64_t N = shape[ndim - 1], K = xv->shape[xv->ndim - 1];
    if (w->ndim != 2 || w->shape[0] != N || w->shape[1] != K ||
        (bias && (b->g->values[in[2]].ndim != 1 || b->g->values[in[2]].shape[0] != N))) {
        b->st = tp_fail(b->err, TP_ERR_SHAPE, "%s: weight (%lld, %lld)%s where the graph needs (%lld, %lld)", w->name,
                        (long long)w->shape[0], (long long)(w->ndim > 1 ? w->shape[1] : 0),
                        bias ? " or its bias" : "", (long long)N, (long long)K);
        return -1;
    }
    return tp_gb_op(b, &op, layer, in, bias ? 3 : 2, ndim, shape, out_name);
}

int tp_gb_add(tp_graph_builder *b, const char *layer, int x, int y, int ndim, const int64_t *shape,
              const char *out_name) {
    tp_op op = {.kind = TP_OP_ADD};
    const int in[2] = {x, y};
    return tp_gb_op(b, &op, layer, in, 2, ndim, shape, out_name);
}

int tp_fam_parse_long(const char *name, const char *s, long lo, long hi, long *out, tp_error *err) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        tp_fail(err, TP_ERR_ARG, "%s '%s': expected an integer in [%ld, %ld]", name, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int tp_fam_parse_real(const char *name, const char *s, double lo, double hi, double *out, tp_error *err) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        tp_fail(err, TP_ERR_ARG, "%s '%s': expected a number in [%g, %g]", name, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

tp_status tp_fam_jfield(const json_t *o, const char *where, const char *key, int optional, const json_t **out,
                        tp_error *err) {
    *out = json_object_get(o, key);
    if (!*out && !optional) return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' is missing", where, key);
    return TP_OK;
}

tp_status tp_fam_jint(const json_t *o, const char *where, const char *key, int lo, int hi, int *out,
                      tp_error *err) {
    const json_t *v;
    tp_status s = tp_fam_jfield(o, where, key, 0, &v, err);
    if (s) return s;
    if (!json_is_integer(v))
        return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' is %s, expected an integer", where, key, tp_json_kind(v));
    if (json_integer_value(v) < lo || json_integer_value(v) > hi)
        return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' is %lld, expected %d..%d", where, key,
                       (long long)json_integer_value(v), lo, hi);
    *out = (int)json_integer_value(v);
    return TP_OK;
}

tp_status tp_fam_jnum(const json_t *o, const char *where, const char *key, double *out, tp_error *err) {
    const json_t *v;
    tp_status s = tp_fam_jfield(o, where, key, 0, &v, err);
    if (s) return s;
    if (!json_is_number(v))
        return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' is %s, expected a number", where, key, tp_json_kind(v));
    if (!isfinite(json_number_value(v)) || !isfinite((float)json_number_value(v)))
        return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' is %g, expected a finite f32", where, key, json_number_value(v));
    *out = json_number_value(v);
    return TP_OK;
}

tp_status tp_fam_jkeys(const json_t *o, const char *where, const char *const *keys, tp_error *err) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        int ok = 0;
        for (int i = 0; !ok && keys[i]; i++) ok = strcmp(k, keys[i]) == 0;
        if (!ok) return tp_fail(err, TP_ERR_FORMAT, "%s: unknown key '%.64s'", where, k);
    }
    return TP_OK;
}

void tp_shapes_add_gemm(tp_model_shapes *m, const char *layer, int64_t n, int64_t k, int kept_high) {
    CHECK(m->n_gemms < TP_SHAPES_MAX_GEMMS);
    tp_model_gemm *g = &m->gemms[m->n_gemms++];
    g->n = n;
    g->k = k;
    g->kept_high = kept_high;
    snprintf(g->layer, sizeof g->layer, "%s", layer);
}
