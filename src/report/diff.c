/* diff.c: reading tprof's JSON into runs and comparing them (diff.h); diff_write.c writes the result. */
#include "report/diff.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "core/util.h"

static char *dup(const char *s) {
    s = s ? s : "";
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* a field as text: a string as it is, an integer or real printed, "" when absent or of another type */
static char *field_text(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    char buf[64];
    if (json_is_string(v)) return dup(json_string_value(v));
    if (json_is_integer(v)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, sizeof buf, "%g", json_real_value(v));
    else buf[0] = 0;
    return dup(buf);
}

static double num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* an integer field (a batch): 0 when absent, not a number or out of int's range */
static int int_field(const json_t *o, const char *key) {
    const double v = num(o, key);
    return v >= -2147483647.0 && v <= 2147483647.0 ? (int)v : 0;
}

static int cmp_ms(const void *pa, const void *pb) {
    const double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* CUDA versions as the bench JSON holds them (13000) written as 13.0 */
static char *cuda_text(const json_t *sys) {
    const double drv = num(sys, "driver_cuda_version"), rt = num(sys, "cuda_runtime_version");
    char buf[64] = "";
    if (drv > 0 && rt > 0 && drv < 1e6 && rt < 1e6)
        snprintf(buf, sizeof buf, "driver %d.%d, runtime %d.%d", (int)drv / 1000, (int)drv % 1000 / 10, (int)rt / 1000,
                 (int)rt % 1000 / 10);
    return dup(buf);
}

typedef struct {
    tp_diff_run *run;
    const char *path;
    tp_error *err;
} loader;

static tp_status bad(loader *l, const char *what) {
    return tp_fail(l->err, TP_ERR_FORMAT, "%s: %s", l->path, what);
}

/* Appends a result; samples (ms) copied from a JSON array of numbers (scale multiplies each: ns to ms), or none. */
static tp_status add_result(loader *l, const char *model, const char *prec, int batch, const char *test,
                            const json_t *samples, double scale, const char *sample_key, double median,
                            double floor_ms, const json_t *profile, const json_t *plan) {
    tp_diff_run *r = l->run;
    tp_diff_result *nr = realloc(r->res, sizeof *nr * (size_t)(r->n_res + 1));
    if (!nr) return tp_fail(l->err, TP_ERR_OOM, "out of host memory");
    r->res = nr;
    tp_diff_result *x = &nr[r->n_res];
    memset(x, 0, sizeof *x);
    x->model = dup(model), x->precision = dup(prec), x->test = dup(test);
    x->batch = batch;
    x->floor_ms = floor_ms > 0 ? floor_ms : NAN;
    x->profile = profile, x->plan = json_is_array(plan) ? plan : NULL;
    x->q1_ms = x->q3_ms = NAN;
    r->n_res++;
    if (!x->model || !x->precision || !x->test) return tp_fail(l->err, TP_ERR_OOM, "out of host memory");
    const size_t n = json_is_array(samples) ? json_array_size(samples) : 0;
    if (n) {
        if (!(x->samples = malloc(sizeof(double) * n))) return tp_fail(l->err, TP_ERR_OOM, "out of host memory");
        for (size_t i = 0; i < n; i++) {
            const json_t *v = json_array_get(samples, i);
            const json_t *e = json_is_object(v) && sample_key ? json_object_get(v, sample_key) : v;
            if (!json_is_number(e)) {
                char what[160];
                snprintf(what, sizeof what, "%s %s %s: sample %zu is not a number", prec, test,
                         sample_key ? sample_key : "samples", i);
                return bad(l, what);
            }
            x->samples[i] = json_number_value(e) * scale;
        }
        x->n = (int)n;
        /* the median, and the quartiles by nearest rank (as the run's own percentiles), from one sorted copy */
        double *t = malloc(sizeof(double) * n);
        if (!t) return tp_fail(l->err, TP_ERR_OOM, "out of host memory");
        memcpy(t, x->samples, sizeof(double) * n); /* JSON has no NaN: a total order */
        qsort(t, n, sizeof(double), cmp_ms);
        const size_t k1 = (n + 3) / 4, k3 = (3 * n + 3) / 4;
        x->median_ms = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
        x->q1_ms = t[k1 ? k1 - 1 : 0], x->q3_ms = t[k3 ? k3 - 1 : 0];
        free(t);
    } else {
        x->median_ms = median;
    }
    return TP_OK;
}

/* a profile's stages as results "stage NAME" (traced ms per pass, no samples) */
static tp_status add_stages(loader *l, const char *model, const char *prec, int batch, const json_t *prof) {
    const json_t *st = json_object_get(prof, "stages");
    tp_status s = TP_OK;
    for (size_t i = 0; !s && json_is_array(st) && i < json_array_size(st); i++) {
        const json_t *e = json_array_get(st, i);
        const char *name = json_string_value(json_object_get(e, "stage"));
        if (!name) continue;
        char test[96];
        snprintf(test, sizeof test, "stage %s", name);
        s = add_result(l, model, prec, batch, test, NULL, 1, NULL, num(e, "ms_per_iter"), num(e, "floor_ms"), NULL,
                       NULL);
    }
    return s;
}

static tp_status load_bench(loader *l, const json_t *root) {
    tp_diff_run *r = l->run;
    const json_t *sys = json_object_get(root, "system"), *cfg = json_object_get(root, "config");
    r->kind = "bench";
    r->tool = field_text(root, "tool"), r->date = field_text(root, "date"), r->command = field_text(root, "command");
    char commit[80];
    snprintf(commit, sizeof commit, "%.12s%s", json_string_value(json_object_get(root, "commit")) ?: "",
             json_is_true(json_object_get(root, "commit_dirty")) ? " (modified)" : "");
    r->commit = dup(commit);
    r->gpu = field_text(sys, "gpu");
    if (!*r->gpu) free(r->gpu), r->gpu = field_text(cfg, "device");
    r->driver = field_text(sys, "driver"), r->cuda = cuda_text(sys), r->cublaslt = field_text(sys, "cublaslt_version");
    r->config = json_is_object(cfg) ? cfg : NULL;
    const json_t *model = json_object_get(root, "model");
    const char *name = json_string_value(json_object_get(model, "name"));
    if (!name) return bad(l, "model.name missing (not a tprof bench JSON?)");
    const int batch = int_field(cfg, "batch");
    const json_t *res = json_object_get(root, "results");
    tp_status s = TP_OK;
    for (size_t i = 0; !s && i < json_array_size(res); i++) {
        const json_t *e = json_array_get(res, i);
        const char *prec = json_string_value(json_object_get(e, "precision"));
        if (!prec) return bad(l, "results[].precision missing");
        const json_t *llm = json_object_get(e, "llm"), *prof = json_object_get(e, "profile");
        const json_t *roof = json_object_get(e, "roofline"), *plan = json_object_get(e, "plan");
        const double med = num(json_object_get(e, "latency"), "median_ms");
        prof = json_is_object(prof) ? prof : NULL;
        if (json_is_object(llm)) {
            const json_t *tests = json_object_get(llm, "tests");
            const char *pp = json_string_value(json_object_get(json_array_get(tests, 0), "test"));
            const char *tg = json_string_value(json_object_get(json_array_get(tests, 1), "test"));
            s = add_result(l, name, prec, batch, pp ? pp : "prefill", json_object_get(e, "samples_ms"), 1, NULL, med,
                           num(roof, "floor_ms"), prof, plan);
            const json_t *dprof = json_object_get(llm, "decode_profile"); /* tprof profile's traced steps */
            if (!s)
                s = add_result(l, name, prec, batch, tg ? tg : "decode", json_object_get(llm, "decode_step_samples_ms"),
                               1, NULL, num(json_object_get(llm, "decode_step"), "median_ms"),
                               num(json_object_get(llm, "decode_roofline"), "floor_ms"),
                               json_is_object(dprof) ? dprof : NULL, NULL);
        } else {
            s = add_result(l, name, prec, batch, "forward", json_object_get(e, "samples_ms"), 1, NULL, med,
                           num(roof, "floor_ms"), prof, plan);
        }
        if (!s && prof) s = add_stages(l, name, prec, batch, prof);
    }
    return s;
}

static tp_status load_profile(loader *l, const json_t *root) {
    tp_diff_run *r = l->run;
    r->kind = "profile";
    r->tool = dup("tprof profile"), r->gpu = field_text(root, "gpu");
    r->commit = dup(""), r->date = dup(""), r->driver = dup(""), r->cuda = dup(""), r->cublaslt = dup("");
    r->command = dup("");
    const char *model = json_string_value(json_object_get(root, "model"));
    const char *prec = json_string_value(json_object_get(root, "precision"));
    if (!model || !prec) return bad(l, "model or precision missing (not a tprof profile JSON?)");
    const int batch = int_field(root, "batch");
    const char *pass = json_string_value(json_object_get(root, "pass")); /* "decode": a decoder's traced steps */
    char test[64];
    snprintf(test, sizeof test, "traced%s%s", pass ? " " : "", pass ? pass : "");
    tp_status s = add_result(l, model, prec, batch, test, json_object_get(root, "per_iteration"), 1e-6, "kernel_ns",
                             num(root, "traced_ms_per_iter"), num(json_object_get(root, "roofline"), "floor_ms"), root,
                             NULL);
    return s ? s : add_stages(l, model, prec, batch, root);
}

/* the element of array a whose "precision" is prec */
static const json_t *by_prec(const json_t *a, const char *prec) {
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *p = json_string_value(json_object_get(json_array_get(a, i), "precision"));
        if (p && strcmp(p, prec) == 0) return json_array_get(a, i);
    }
    return NULL;
}

static tp_status load_compare(loader *l, const json_t *root) {
    tp_diff_run *r = l->run;
    const json_t *c = json_object_get(root, "configuration");
    r->kind = "compare";
    r->tool = field_text(root, "tool");
    r->commit = field_text(c, "commit"), r->date = field_text(c, "date"), r->gpu = field_text(c, "gpu");
    r->driver = field_text(c, "driver"), r->cuda = field_text(c, "cuda"), r->cublaslt = field_text(c, "cublaslt");
    r->command = field_text(c, "command");
    if (strlen(r->commit) > 12) r->commit[12] = 0;
    r->config = json_is_object(c) ? c : NULL;
    const char *model = json_string_value(json_object_get(root, "model"));
    if (!model) return bad(l, "model missing");
    const int batch = int_field(root, "batch");
    const json_t *sum = json_object_get(root, "summary"), *roof = json_object_get(root, "roofline");
    const json_t *profs = json_object_get(root, "profiles");
    tp_status s = TP_OK;
    for (size_t i = 0; !s && i < json_array_size(sum); i++) {
        const json_t *e = json_array_get(sum, i);
        const char *prec = json_string_value(json_object_get(e, "precision"));
        if (!prec) return bad(l, "summary[].precision missing");
        const json_t *prof = by_prec(profs, prec);
        s = add_result(l, model, prec, batch, "forward", NULL, 1, NULL, num(e, "median_ms"),
                       num(by_prec(roof, prec), "floor_ms"), prof, NULL);
        if (!s && prof) s = add_stages(l, model, prec, batch, prof);
    }
    return s;
}

tp_status tp_diff_load(const char *path, tp_diff_run *run, tp_error *err) {
    memset(run, 0, sizeof *run);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        if (je.line <= 0) return tp_fail(err, TP_ERR_IO, "%s: %s", path, je.text);
        return tp_fail(err, TP_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    }
    run->root = root;
    if (!(run->path = dup(path))) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    loader l = {run, path, err};
    tp_status s;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (fmt && strncmp(fmt, "tprof-compare", 13) == 0) s = load_compare(&l, root);
    else if (json_is_array(json_object_get(root, "results"))) s = load_bench(&l, root);
    else if (json_is_array(json_object_get(root, "layers")) && json_object_get(root, "precision"))
        s = load_profile(&l, root);
    else
        s = bad(&l, "not a JSON of tprof bench, profile or compare (no results, layers or format field)");
    if (!s && (!run->tool || !run->commit || !run->date || !run->gpu || !run->driver || !run->cuda ||
               !run->cublaslt || !run->command))
        s = tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (!s && run->n_res == 0) s = bad(&l, "no results in it");
    return s;
}

void tp_diff_run_free(tp_diff_run *run) {
    for (int i = 0; i < run->n_res; i++) {
        free(run->res[i].model), free(run->res[i].precision), free(run->res[i].test);
        free(run->res[i].samples);
    }
    free(run->res);
    free(run->path), free(run->tool), free(run->commit), free(run->date), free(run->gpu), free(run->driver);
    free(run->cuda), free(run->cublaslt), free(run->command);
    json_decref((json_t *)run->root);
    memset(run, 0, sizeof *run);
}

/* ---- profile pairs ------------------------------------------------------------------------------------------ */

typedef struct {
    tp_diff_row *r;
    int n, cap;
} rows;

/* the row of name (and op, unless op is NULL: kernels are one row per name whatever their category) */
static tp_diff_row *row_get(rows *t, const char *name, const char *op) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->r[i].name, name) == 0 && (!op || strcmp(t->r[i].op, op) == 0)) return &t->r[i];
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 64;
        tp_diff_row *nr = realloc(t->r, sizeof *nr * (size_t)cap);
        if (!nr) return NULL;
        t->r = nr, t->cap = cap;
    }
    tp_diff_row *x = &t->r[t->n];
    *x = (tp_diff_row){dup(name), dup(op), NULL, NULL, NAN, NAN};
    if (!x->name || !x->op) {
        free(x->name), free(x->op);
        return NULL;
    }
    t->n++;
    return x;
}

static void rows_free(tp_diff_row *r, int n) {
    for (int i = 0; i < n; i++) free(r[i].name), free(r[i].op), free(r[i].how_a), free(r[i].how_b);
    free(r);
}

static double change(const tp_diff_row *r) {
    return (isnan(r->b_ms) ? 0 : r->b_ms) - (isnan(r->a_ms) ? 0 : r->a_ms);
}

static int by_change(const void *pa, const void *pb) {
    const double a = fabs(change(pa)), b = fabs(change(pb));
    return (a < b) - (a > b);
}

/* keeps the top rows by |change|, plus (keep_new) every row present on one side only; frees the rest */
static void rows_top(rows *t, int top, int keep_new) {
    if (t->n > 1) qsort(t->r, (size_t)t->n, sizeof *t->r, by_change);
    int k = 0;
    for (int i = 0; i < t->n; i++) {
        const int one_side = isnan(t->r[i].a_ms) != isnan(t->r[i].b_ms);
        if (k < top || (keep_new && one_side)) t->r[k++] = t->r[i];
        else free(t->r[i].name), free(t->r[i].op), free(t->r[i].how_a), free(t->r[i].how_b);
    }
    t->n = k;
}

/* a profile's iterations (its kernel table's totals are over all of them) */
static double iters(const json_t *p) {
    const double n = num(p, "iterations");
    return n > 0 ? n : 1;
}

static tp_status profile_pair(const json_t *pa, const json_t *pb, int top, tp_diff_match *m, tp_error *err) {
    rows L = {0}, O = {0}, K = {0};
    const json_t *prof[2] = {pa, pb};
    for (int side = 0; side < 2; side++) {
        const json_t *lay = json_object_get(prof[side], "layers");
        for (size_t i = 0; i < json_array_size(lay); i++) {
            const json_t *e = json_array_get(lay, i);
            const char *name = json_string_value(json_object_get(e, "layer")),
                       *op = json_string_value(json_object_get(e, "op")),
                       *how = json_string_value(json_object_get(e, "how"));
            const double ms = num(e, "ns_per_iter") * 1e-6;
            if (!name) continue;
            tp_diff_row *r = row_get(&L, name, op ? op : ""), *o = row_get(&O, op ? op : "?", "");
            if (!r || !o) goto oom;
            double *v = side ? &r->b_ms : &r->a_ms, *w = side ? &o->b_ms : &o->a_ms;
            *v = (isnan(*v) ? 0 : *v) + (isnan(ms) ? 0 : ms);
            *w = (isnan(*w) ? 0 : *w) + (isnan(ms) ? 0 : ms);
            char **h = side ? &r->how_b : &r->how_a;
            if (how && !*h && !(*h = dup(how))) goto oom;
            /* every kernel a layer ran: present on this side, its time from the kernel table if listed there */
            const json_t *ks = json_object_get(e, "kernels");
            for (size_t j = 0; j < json_array_size(ks); j++) {
                const char *kn = json_string_value(json_array_get(ks, j));
                tp_diff_row *k = kn ? row_get(&K, kn, NULL) : NULL;
                if (kn && !k) goto oom;
                if (k && isnan(side ? k->b_ms : k->a_ms)) *(side ? &k->b_ms : &k->a_ms) = 0;
            }
        }
        const json_t *kt = json_object_get(prof[side], "kernels");
        for (size_t i = 0; i < json_array_size(kt); i++) {
            const json_t *e = json_array_get(kt, i);
            const char *kn = json_string_value(json_object_get(e, "name"));
            tp_diff_row *k = kn ? row_get(&K, kn, NULL) : NULL;
            if (kn && !k) goto oom;
            if (!k) continue;
            const char *cat = json_string_value(json_object_get(e, "category"));
            if (cat && !*k->op) free(k->op), k->op = dup(cat);
            *(side ? &k->b_ms : &k->a_ms) = num(e, "total_ns") * 1e-6 / iters(prof[side]);
        }
    }
    rows_top(&L, top, 0);
    rows_top(&K, top, 1);
    if (O.n > 1) qsort(O.r, (size_t)O.n, sizeof *O.r, by_change);
    m->layers = L.r, m->n_layers = L.n, m->ops = O.r, m->n_ops = O.n, m->kernels = K.r, m->n_kernels = K.n;
    for (int i = 0; i < K.n; i++) {
        m->n_appeared += isnan(K.r[i].a_ms) && !isnan(K.r[i].b_ms);
        m->n_disappeared += !isnan(K.r[i].a_ms) && isnan(K.r[i].b_ms);
    }
    return TP_OK;
oom:
    rows_free(L.r, L.n), rows_free(O.r, O.n), rows_free(K.r, K.n);
    return tp_fail(err, TP_ERR_OOM, "out of host memory");
}

/* the layers whose precision or kernel differ between two plans (by layer and op) */
static tp_status plan_pair(const json_t *a, const json_t *b, tp_diff_match *m, tp_error *err) {
    rows P = {0};
    for (size_t i = 0; i < json_array_size(b); i++) {
        const json_t *eb = json_array_get(b, i);
        const char *layer = json_string_value(json_object_get(eb, "layer")), *op = json_string_value(json_object_get(eb, "op"));
        if (!layer || !op) continue;
        const json_t *ea = NULL;
        for (size_t j = 0; j < json_array_size(a) && !ea; j++) {
            const json_t *x = json_array_get(a, j);
            const char *la = json_string_value(json_object_get(x, "layer")), *oa = json_string_value(json_object_get(x, "op"));
            if (la && oa && strcmp(la, layer) == 0 && strcmp(oa, op) == 0) ea = x;
        }
        char sa[256] = "(absent)", sb[256];
        if (ea)
            snprintf(sa, sizeof sa, "%s %s", json_string_value(json_object_get(ea, "precision")) ?: "?",
                     json_string_value(json_object_get(ea, "kernel")) ?: "?");
        snprintf(sb, sizeof sb, "%s %s", json_string_value(json_object_get(eb, "precision")) ?: "?",
                 json_string_value(json_object_get(eb, "kernel")) ?: "?");
        if (strcmp(sa, sb) == 0) continue;
        tp_diff_row *r = row_get(&P, layer, op);
        if (!r || !(r->how_a = dup(sa)) || !(r->how_b = dup(sb))) {
            rows_free(P.r, P.n);
            return tp_fail(err, TP_ERR_OOM, "out of host memory");
        }
    }
    m->plan = P.r, m->n_plan = P.n;
    return TP_OK;
}

/* ---- matching ----------------------------------------------------------------------------------------------- */

static int same_key(const tp_diff_result *a, const tp_diff_result *b) {
    return a->batch == b->batch && strcmp(a->model, b->model) == 0 && strcmp(a->precision, b->precision) == 0 &&
           strcmp(a->test, b->test) == 0;
}

static void compare_samples(const tp_diff_result *a, const tp_diff_result *b, tp_diff_match *m) {
    m->ratio = a->median_ms > 0 ? b->median_ms / a->median_ms : NAN;
    m->ci_lo = m->ci_hi = m->u = m->p = NAN;
    if (a->n < 1 || b->n < 1) {
        m->verdict = "no samples";
        return;
    }
    tp_mann_whitney(a->samples, a->n, b->samples, b->n, &m->u, &m->p, &m->exact);
    tp_bootstrap_median_ratio(a->samples, a->n, b->samples, b->n, TP_DIFF_BOOT, TP_DIFF_LEVEL, 1, &m->ci_lo,
                              &m->ci_hi);
    const int sig = m->p < TP_DIFF_ALPHA;
    m->verdict = sig && m->ci_lo > 1.0 ? "slower" : sig && m->ci_hi < 1.0 ? "faster" : "same";
}

static int add_unmatched(tp_diff *d, int *cap, int run, int res) {
    if (d->n_unmatched == *cap) {
        const int c = *cap ? 2 * *cap : 16;
        int *nu = realloc(d->unmatched, sizeof(int) * 2 * (size_t)c);
        if (!nu) return -1;
        d->unmatched = nu, *cap = c;
    }
    d->unmatched[2 * d->n_unmatched] = run, d->unmatched[2 * d->n_unmatched + 1] = res, d->n_unmatched++;
    return 0;
}

tp_status tp_diff_compute(tp_diff_run *runs, int n, int top, tp_diff *d, tp_error *err) {
    memset(d, 0, sizeof *d);
    if (n < 2) return tp_fail(err, TP_ERR_ARG, "tprof diff needs at least two runs (the first is the baseline)");
    d->runs = runs, d->n_runs = n, d->top = top < 1 ? 1 : top;
    int cap = 0, ucap = 0;
    const tp_diff_run *base = &runs[0];
    char *used = calloc((size_t)base->n_res + 1, 1);
    if (!used) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_status s = TP_OK;
    for (int k = 1; k < n && !s; k++)
        for (int j = 0; j < runs[k].n_res && !s; j++) {
            int ia = -1;
            for (int i = 0; i < base->n_res && ia < 0; i++)
                if (same_key(&base->res[i], &runs[k].res[j])) ia = i;
            if (ia < 0) { /* a later run's result without a partner */
                if (add_unmatched(d, &ucap, k, j)) s = tp_fail(err, TP_ERR_OOM, "out of host memory");
                continue;
            }
            used[ia] = 1;
            if (d->n_m == cap) {
                cap = cap ? 2 * cap : 16;
                tp_diff_match *nm = realloc(d->m, sizeof *nm * (size_t)cap);
                if (!nm) {
                    s = tp_fail(err, TP_ERR_OOM, "out of host memory");
                    break;
                }
                d->m = nm;
            }
            tp_diff_match *m = &d->m[d->n_m++];
            memset(m, 0, sizeof *m);
            m->run = k, m->ia = ia, m->ib = j;
            const tp_diff_result *a = &base->res[ia], *b = &runs[k].res[j];
            compare_samples(a, b, m);
            if (a->profile && b->profile) s = profile_pair(a->profile, b->profile, d->top, m, err);
            if (!s && a->plan && b->plan) s = plan_pair(a->plan, b->plan, m, err);
        }
    for (int i = 0; i < base->n_res && !s; i++) /* the baseline's results no later run has */
        if (!used[i] && add_unmatched(d, &ucap, 0, i)) s = tp_fail(err, TP_ERR_OOM, "out of host memory");
    free(used);
    return s;
}

void tp_diff_free(tp_diff *d) {
    for (int i = 0; i < d->n_m; i++) {
        rows_free(d->m[i].layers, d->m[i].n_layers), rows_free(d->m[i].ops, d->m[i].n_ops);
        rows_free(d->m[i].kernels, d->m[i].n_kernels), rows_free(d->m[i].plan, d->m[i].n_plan);
    }
    free(d->m);
    free(d->unmatched);
    memset(d, 0, sizeof *d);
}

int tp_diff_regressions(const tp_diff *d, double pct) {
    int n = 0;
    for (int i = 0; i < d->n_m; i++)
        n += strcmp(d->m[i].verdict, "slower") == 0 && d->m[i].ci_lo > 1.0 + pct / 100.0;
    return n;
}
