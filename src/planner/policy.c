/* policy.c: the precision policy of policy.h. */
#include "planner/policy.h"

#include "core/files.h"
#include "formats/precision.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

void tp_policy_init(tp_policy *p, tp_precision def) {
    memset(p, 0, sizeof *p);
    p->def = def;
}


static void add_rule(tp_policy *p, const char *glob, size_t len, tp_precision prec, int builtin) {
    tp_policy_rule *r = &p->rules[p->n_rules++];
    memcpy(r->glob, glob, len);
    r->glob[len] = '\0';
    r->prec = prec;
    r->builtin = builtin;
}

void tp_policy_default(tp_policy *p, tp_precision prec) {
    tp_policy_init(p, prec);
    if (!tp_precision_quantized(prec)) return;
    /* any stage's: a pipeline's vision stage names it vision.patch_embed.proj */
    add_rule(p, "*patch_embed.proj", strlen("*patch_embed.proj"), TP_PREC_FP16, 1);
    add_rule(p, "head", strlen("head"), TP_PREC_FP16, 1);
    /* a decoder's LM head, as NVIDIA ModelOpt's default quantization configs keep it ("*lm_head*" disabled) */
    add_rule(p, "lm_head", strlen("lm_head"), TP_PREC_FP16, 1);
}

/* Checks a glob of len bytes before it is added; the one place the limits are enforced. */
static tp_status check_glob(const tp_policy *p, const char *glob, size_t len, tp_error *err) {
    if (len == 0) return tp_fail(err, TP_ERR_ARG, "empty layer glob");
    if (len >= TP_NAME_LEN)
        return tp_fail(err, TP_ERR_ARG, "layer glob '%.*s' is %zu bytes; at most %d", (int)len, glob, len,
                       TP_NAME_LEN - 1);
    if (p->n_rules >= TP_POLICY_MAX_RULES)
        return tp_fail(err, TP_ERR_ARG, "layer glob '%.*s': more than %d rules", (int)len, glob, TP_POLICY_MAX_RULES);
    return TP_OK;
}

tp_status tp_policy_add(tp_policy *p, const char *glob, tp_precision prec, tp_error *err) {
    size_t len = strlen(glob);
    tp_status s = check_glob(p, glob, len, err);
    if (s) return s;
    if ((unsigned)prec >= TP_PREC_COUNT)
        return tp_fail(err, TP_ERR_ARG, "layer glob '%s': precision %d out of range", glob, (int)prec);
    add_rule(p, glob, len, prec, 0);
    return TP_OK;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Trims [*b, *e) of surrounding spaces. */
static void trim(const char **b, const char **e) {
    while (*b < *e && is_space(**b)) (*b)++;
    while (*e > *b && is_space((*e)[-1])) (*e)--;
}

tp_status tp_policy_parse(tp_policy *p, const char *spec, tp_error *err) {
    /* Parsed into a copy so that a bad entry late in the list leaves p untouched. */
    tp_policy *t = malloc(sizeof *t);
    if (!t) return tp_fail(err, TP_ERR_OOM, "out of host memory parsing overrides");
    *t = *p;
    tp_status s = TP_OK;
    const char *b0 = spec, *e0 = spec + strlen(spec);
    trim(&b0, &e0);
    if (b0 == e0) {
        s = tp_fail(err, TP_ERR_ARG, "empty override list '%s' (expected glob=precision[,glob=precision...])", spec);
        goto done;
    }
    int entry = 0;
    for (const char *b = spec;; entry++) {
        const char *end = strchr(b, ',');
        if (!end) end = b + strlen(b);
        const char *tb = b, *te = end;
        trim(&tb, &te);
        int n = (int)(te - tb);
        if (n == 0) {
            s = tp_fail(err, TP_ERR_ARG, "override list '%s': entry %d is empty", spec, entry + 1);
            goto done;
        }
        /* The last '=' splits, since precision names never contain one. */
        const char *eq = NULL;
        for (const char *c = tb; c < te; c++)
            if (*c == '=') eq = c;
        if (!eq) {
            s = tp_fail(err, TP_ERR_ARG, "override '%.*s': missing '=' (expected glob=precision, e.g. head=fp16)", n,
                        tb);
            goto done;
        }
        const char *gb = tb, *ge = eq, *pb = eq + 1, *pe = te;
        trim(&gb, &ge);
        trim(&pb, &pe);
        if (gb == ge) {
            s = tp_fail(err, TP_ERR_ARG, "override '%.*s': empty layer glob before '='", n, tb);
            goto done;
        }
        char pname[32];
        tp_precision prec;
        tp_error pe_err;
        snprintf(pname, sizeof pname, "%.*s", (int)(pe - pb), pb);
        if ((size_t)(pe - pb) >= sizeof pname || tp_precision_parse(pname, &prec, &pe_err) != TP_OK) {
            s = tp_fail(err, TP_ERR_ARG,
                        "override '%.*s': unknown precision '%.*s' (expected fp32, fp16, bf16, fp8, fp8-block, mxfp8, "
                        "nvfp4, mxfp4, fp8-wo or nvfp4-wo)",
                        n, tb, (int)(pe - pb), pb);
            goto done;
        }
        tp_error ge_err;
        if (check_glob(t, gb, (size_t)(ge - gb), &ge_err) != TP_OK) {
            s = tp_fail(err, TP_ERR_ARG, "override '%.*s': %s", n, tb, ge_err.msg);
            goto done;
        }
        add_rule(t, gb, (size_t)(ge - gb), prec, 0);
        if (!*end) break;
        b = end + 1;
    }
    *p = *t;
done:
    free(t);
    return s;
}

static const char *json_kind(const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Parses a JSON string field that names a precision; field names it in the message ("overrides[2].precision"). */
static tp_status json_prec(const char *path, const char *field, const json_t *v, tp_precision *out, tp_error *err) {
    if (!json_is_string(v))
        return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' is %s, expected a precision name such as \"nvfp4\"", path, field,
                       json_kind(v));
    tp_error pe;
    if (tp_precision_parse(json_string_value(v), out, &pe) != TP_OK)
        return tp_fail(err, TP_ERR_FORMAT, "%s: '%s': %s", path, field, pe.msg);
    return TP_OK;
}

static tp_status json_glob(const char *path, const char *field, const json_t *v, tp_policy *t, tp_precision prec,
                           tp_error *err) {
    if (!json_is_string(v))
        return tp_fail(err, TP_ERR_FORMAT, "%s: '%s' is %s, expected a layer glob string", path, field, json_kind(v));
    const char *g = json_string_value(v);
    tp_error ge;
    if (check_glob(t, g, strlen(g), &ge) != TP_OK)
        return tp_fail(err, TP_ERR_FORMAT, "%s: '%s': %s", path, field, ge.msg);
    add_rule(t, g, strlen(g), prec, 0);
    return TP_OK;
}

static tp_status load_doc(const char *path, const json_t *root, tp_policy *t, tp_error *err) {
    if (!json_is_object(root))
        return tp_fail(err, TP_ERR_FORMAT, "%s: the policy is %s, expected an object with \"default\" and "
                                           "\"overrides\"", path, json_kind(root));
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)root, key, val) {
        if (key[0] != '_' && strcmp(key, "default") != 0 && strcmp(key, "overrides") != 0)
            return tp_fail(err, TP_ERR_FORMAT, "%s: unknown key '%s' (expected \"default\" and \"overrides\")", path,
                           key);
    }
    const json_t *d = json_object_get(root, "default");
    if (!d)
        return tp_fail(err, TP_ERR_FORMAT, "%s: 'default' is missing (the precision of layers no override names)",
                       path);
    tp_precision def;
    tp_status s = json_prec(path, "default", d, &def, err);
    if (s) return s;
    tp_policy_default(t, def);
    const json_t *ov = json_object_get(root, "overrides");
    if (!ov) return TP_OK;
    if (!json_is_array(ov))
        return tp_fail(err, TP_ERR_FORMAT, "%s: 'overrides' is %s, expected an array of {\"layers\", \"precision\"}",
                       path, json_kind(ov));
    size_t i;
    const json_t *r;
    json_array_foreach(ov, i, r) {
        char f[64];
        if (!json_is_object(r))
            return tp_fail(err, TP_ERR_FORMAT, "%s: 'overrides[%zu]' is %s, expected an object with \"layers\" and "
                                               "\"precision\"", path, i, json_kind(r));
        json_object_foreach((json_t *)r, key, val) {
            if (key[0] != '_' && strcmp(key, "layers") != 0 && strcmp(key, "precision") != 0)
                return tp_fail(err, TP_ERR_FORMAT, "%s: overrides[%zu]: unknown key '%s' (expected \"layers\" and "
                                                   "\"precision\")", path, i, key);
        }
        const json_t *l = json_object_get(r, "layers"), *pr = json_object_get(r, "precision");
        if (!l) return tp_fail(err, TP_ERR_FORMAT, "%s: overrides[%zu]: 'layers' is missing", path, i);
        if (!pr) return tp_fail(err, TP_ERR_FORMAT, "%s: overrides[%zu]: 'precision' is missing", path, i);
        tp_precision prec;
        snprintf(f, sizeof f, "overrides[%zu].precision", i);
        if ((s = json_prec(path, f, pr, &prec, err))) return s;
        if (json_is_array(l)) {
            if (json_array_size(l) == 0)
                return tp_fail(err, TP_ERR_FORMAT, "%s: 'overrides[%zu].layers' is an empty array", path, i);
            size_t j;
            const json_t *g;
            json_array_foreach(l, j, g) {
                snprintf(f, sizeof f, "overrides[%zu].layers[%zu]", i, j);
                if ((s = json_glob(path, f, g, t, prec, err))) return s;
            }
        } else {
            snprintf(f, sizeof f, "overrides[%zu].layers", i);
            if ((s = json_glob(path, f, l, t, prec, err))) return s;
        }
    }
    return TP_OK;
}

tp_status tp_policy_load_json(const char *path, tp_policy *p, tp_error *err) {
    /* Opened here, not by jansson, so that a missing file (TP_ERR_IO) is told apart from a malformed one. */
    FILE *f = tp_input_open(path, "the policy file", err);
    if (!f) return err ? err->code : TP_ERR_IO;
    json_error_t je;
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    if (!root)
        return tp_fail(err, TP_ERR_FORMAT, "%s: line %d column %d: invalid JSON: %s", path, je.line, je.column,
                       je.text);
    tp_policy *t = malloc(sizeof *t);
    tp_status s = t ? load_doc(path, root, t, err) : tp_fail(err, TP_ERR_OOM, "%s: out of host memory", path);
    if (s == TP_OK) *p = *t;
    free(t);
    json_decref(root);
    return s;
}

tp_precision tp_policy_resolve(const tp_policy *p, const char *layer, int *rule) {
    for (int i = p->n_rules - 1; i >= 0; i--)
        if (fnmatch(p->rules[i].glob, layer, 0) == 0) {
            if (rule) *rule = i;
            return p->rules[i].prec;
        }
    if (rule) *rule = -1;
    return p->def;
}

const char *tp_policy_rule_str(const tp_policy *p, int i, char *buf, size_t n) {
    if (i < 0 || i >= p->n_rules) snprintf(buf, n, "default=%s", tp_precision_name(p->def));
    else snprintf(buf, n, "%s=%s", p->rules[i].glob, tp_precision_name(p->rules[i].prec));
    return buf;
}

const char *tp_policy_reason(const tp_policy *p, int i, char *buf, size_t n) {
    char r[TP_NAME_LEN + 32];
    if (i < 0 || i >= p->n_rules) snprintf(buf, n, "policy default %s", tp_precision_name(p->def));
    else snprintf(buf, n, "%s '%s'", p->rules[i].builtin ? "default rule" : "override",
                  tp_policy_rule_str(p, i, r, sizeof r));
    return buf;
}

static int is_gemm(const tp_op *op) { return op->kind == TP_OP_LINEAR || op->kind == TP_OP_PATCH_EMBED; }

int tp_policy_check(const tp_policy *p, const tp_graph *g, tp_rule_use *use) {
    int bad = 0;
    for (int i = 0; i < p->n_rules; i++) {
        int any = 0, gemm = 0, decides = 0;
        for (int o = 0; o < g->n_ops && !decides; o++) {
            const tp_op *op = &g->ops[o];
            if (fnmatch(p->rules[i].glob, op->layer, 0) != 0) continue;
            any = 1;
            if (!is_gemm(op) && op->kind != TP_OP_ATTENTION) continue;
            gemm = 1;
            int r;
            tp_policy_resolve(p, op->layer, &r);
            decides = r == i;
        }
        tp_rule_use u = decides ? TP_RULE_USED : !any ? TP_RULE_UNMATCHED : !gemm ? TP_RULE_NO_GEMM : TP_RULE_SHADOWED;
        if (use) use[i] = u;
        bad += u != TP_RULE_USED && !p->rules[i].builtin;
    }
    return bad;
}

int tp_policy_warn(const tp_policy *p, const tp_graph *g, FILE *f) {
    if (p->n_rules == 0) return 0;
    tp_rule_use use[TP_POLICY_MAX_RULES];
    int bad = tp_policy_check(p, g, use);
    for (int i = 0; i < p->n_rules; i++) {
        if (p->rules[i].builtin || use[i] == TP_RULE_USED) continue;
        char r[TP_NAME_LEN + 32];
        tp_policy_rule_str(p, i, r, sizeof r);
        const char *what = use[i] == TP_RULE_UNMATCHED ? "matches no layer of the model"
                           : use[i] == TP_RULE_NO_GEMM
                               ? "matches no GEMM or attention layer (only they take the policy's precision; "
                                 "softmax statistics, norms and RoPE stay FP32)"
                               : "is overridden by later rules on every layer it matches";
        fprintf(f, "tprof: warning: override '%s' %s\n", r, what);
    }
    return bad;
}

json_t *tp_policy_json(const tp_policy *p) {
    json_t *rows = json_array();
    json_t *o = json_pack("{s:s}", "default", tp_precision_name(p->def));
    if (!rows || !o) goto oom;
    for (int i = 0; i < p->n_rules; i++) {
        json_t *r = json_pack("{s:s, s:s, s:b}", "layers", p->rules[i].glob, "precision",
                              tp_precision_name(p->rules[i].prec), "builtin", p->rules[i].builtin != 0);
        if (!r || json_array_append_new(rows, r)) goto oom;
    }
    if (json_object_set_new(o, "overrides", rows)) {
        rows = NULL;
        goto oom;
    }
    return o;
oom:
    json_decref(rows);
    json_decref(o);
    return NULL;
}
