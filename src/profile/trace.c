/* trace.c: the trace container and its JSON file format ("tprof-trace-1").
 *
 * The file is written one op and one record per line, so committed fixtures diff line by line and stay
 * greppable. Loading validates everything (presence, type, range of every field): a trace file is input from
 * another machine, and the analysis indexes ops and categories with these values. */
#include "profile/trace.h"
#include "core/files.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_FORMAT "tprof-trace-1"


static const char *REC_KIND_NAMES[] = {[TP_REC_KERNEL] = "kernel", [TP_REC_MEMCPY] = "memcpy",
                                       [TP_REC_MEMSET] = "memset"};
#define REC_KIND_COUNT ((int)(sizeof REC_KIND_NAMES / sizeof REC_KIND_NAMES[0]))

static int rec_kind_parse(const char *s) {
    for (int i = 0; i < REC_KIND_COUNT; i++)
        if (strcmp(s, REC_KIND_NAMES[i]) == 0) return i;
    return -1;
}

/* tp_op_kind_name's inverse; the graph module has no parser because nothing else reads op kinds back. */
static int op_kind_parse(const char *s) {
    for (int i = 0; i < TP_OP_KIND_COUNT; i++)
        if (strcmp(s, tp_op_kind_name((tp_op_kind)i)) == 0) return i;
    return -1;
}

void tp_trace_init(tp_trace *t) { memset(t, 0, sizeof *t); }

void tp_trace_free(tp_trace *t) {
    for (int i = 0; i < t->n; i++) free(t->rec[i].name);
    free(t->rec);
    free(t->ops);
    memset(t, 0, sizeof *t);
}

tp_status tp_trace_add(tp_trace *t, const tp_trace_record *r, tp_error *err) {
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        tp_trace_record *p = realloc(t->rec, (size_t)cap * sizeof *p);
        if (!p) return tp_fail(err, TP_ERR_OOM, "out of host memory for %d trace records", cap);
        t->rec = p;
        t->cap = cap;
    }
    /* A record without a name still gets one: every writer of names (JSON, tables) assumes a string. */
    char *name = strdup(r->name ? r->name : "(unnamed)");
    if (!name) return tp_fail(err, TP_ERR_OOM, "out of host memory for a trace record name");
    t->rec[t->n] = *r;
    t->rec[t->n].name = name;
    t->n++;
    return TP_OK;
}

/* ---- save ------------------------------------------------------------------------------------------------ */

/* json_string refuses invalid UTF-8 (returns NULL); a stray byte in a demangled name or a note must not make
 * the whole trace unsavable, so such bytes become '?'. */
static json_t *jstr(const char *s) {
    json_t *j = json_string(s);
    if (j) return j;
    char *c = strdup(s);
    if (!c) return NULL;
    for (char *p = c; *p; p++)
        if ((unsigned char)*p >= 0x80) *p = '?';
    j = json_string(c);
    free(c);
    return j;
}

static json_t *jint3(const int v[3]) {
    json_t *a = json_array();
    for (int i = 0; i < 3; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *op_json(const tp_trace_op *o) {
    json_t *j = json_object();
    json_object_set_new(j, "layer", jstr(o->layer));
    json_object_set_new(j, "op", json_string(tp_op_kind_name(o->kind)));
    json_object_set_new(j, "precision", json_string(tp_precision_name(o->prec)));
    json_object_set_new(j, "how", jstr(o->how));
    json_object_set_new(j, "matmul_flop", json_real(o->matmul_flop));
    json_object_set_new(j, "bytes", json_real(o->bytes));
    if (o->call >= 0) { /* the executed program (optional: traces before it have neither) */
        json_object_set_new(j, "call", json_integer(o->call));
        json_object_set_new(j, "kernel", jstr(o->kernel));
    }
    return j;
}

static json_t *record_json(const tp_trace_record *r) {
    json_t *j = json_object();
    json_object_set_new(j, "kind", json_string((unsigned)r->kind < (unsigned)REC_KIND_COUNT ? REC_KIND_NAMES[r->kind]
                                                                                           : "?"));
    json_object_set_new(j, "name", jstr(r->name));
    json_object_set_new(j, "start_ns", json_integer((json_int_t)r->start_ns));
    json_object_set_new(j, "end_ns", json_integer((json_int_t)r->end_ns));
    json_object_set_new(j, "iteration", json_integer(r->iteration));
    json_object_set_new(j, "op", json_integer(r->op));
    json_object_set_new(j, "category", json_string(tp_category_name(r->category)));
    json_object_set_new(j, "grid", jint3(r->grid));
    json_object_set_new(j, "block", jint3(r->block));
    json_object_set_new(j, "registers", json_integer(r->registers));
    json_object_set_new(j, "smem_static", json_integer(r->smem_static));
    json_object_set_new(j, "smem_dynamic", json_integer(r->smem_dynamic));
    json_object_set_new(j, "bytes", json_integer((json_int_t)r->bytes));
    json_object_set_new(j, "stream", json_integer((json_int_t)r->stream));
    json_object_set_new(j, "graph_node", json_integer((json_int_t)r->graph_node));
    return j;
}

/* Writes one value compactly; returns 0 on success. */
static int dump(json_t *j, FILE *f) {
    int rc = j ? json_dumpf(j, f, JSON_COMPACT) : -1;
    json_decref(j);
    return rc;
}

/* an instruction by its ready time (ties by index) */
typedef struct {
    uint64_t ready;
    int k;
} ready_key;
static int cmp_ready(const void *a, const void *b) {
    const ready_key *x = a, *y = b;
    if (x->ready != y->ready) return x->ready < y->ready ? -1 : 1;
    return (x->k > y->k) - (x->k < y->k);
}

tp_status tp_trace_add_persistent(tp_trace *t, int iteration, const int *op, const int *sm, const uint64_t *ready_ns,
                                  const uint64_t *end_ns, int n, int n_sms, int threads, tp_error *err) {
    if (n < 0) return tp_fail(err, TP_ERR_ARG, "persistent records: a count of %d", n);
    for (int k = 0; k < n; k++) {
        if (op[k] < 0 || op[k] >= t->n_ops)
            return tp_fail(err, TP_ERR_ARG, "persistent record %d: op %d outside the trace's %d ops", k, op[k], t->n_ops);
        if (end_ns[k] < ready_ns[k])
            return tp_fail(err, TP_ERR_ARG, "persistent record %d (%s): it ends before it starts", k,
                           t->ops[op[k]].layer);
        const tp_op_kind kind = t->ops[op[k]].kind;
        const char *name = kind == TP_OP_LINEAR         ? "persistent gemv"
                           : kind == TP_OP_KV_ATTENTION ? "persistent attention"
                           : kind == TP_OP_TOKEN_EMBED  ? "persistent embed"
                                                        : "persistent instruction";
        tp_trace_record r = {.kind = TP_REC_KERNEL, .name = (char *)name, .start_ns = ready_ns[k],
                             .end_ns = end_ns[k], .iteration = iteration, .op = op[k],
                             .category = tp_op_category(kind), .grid = {n_sms, 1, 1}, .block = {threads, 1, 1},
                             .stream = (uint32_t)sm[k]};
        tp_status st = tp_trace_add(t, &r, err);
        if (st) return st;
    }
    /* The stretches inside the step where no SM runs an instruction, every one waiting on a counter: each is the
     * dependency hop into the instruction that ends it (the first to become ready after it), charged to that
     * instruction's op, category other. They overlap no instruction, so every instruction's busy time stays its
     * own, and the step's traced time is its span. */
    ready_key *ord = malloc(sizeof *ord * (size_t)(n > 0 ? n : 1));
    if (!ord) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int k = 0; k < n; k++) ord[k] = (ready_key){ready_ns[k], k};
    qsort(ord, (size_t)n, sizeof *ord, cmp_ready);
    uint64_t covered = n ? ord[0].ready : 0;
    tp_status st = TP_OK;
    for (int j = 0; j < n && !st; j++) {
        const int k = ord[j].k;
        if (ready_ns[k] > covered) {
            tp_trace_record w = {.kind = TP_REC_KERNEL, .name = (char *)"persistent dependency wait",
                                 .start_ns = covered, .end_ns = ready_ns[k], .iteration = iteration, .op = op[k],
                                 .category = TP_CAT_OTHER, .grid = {n_sms, 1, 1}, .block = {threads, 1, 1},
                                 .stream = (uint32_t)sm[k]};
            st = tp_trace_add(t, &w, err);
        }
        if (end_ns[k] > covered) covered = end_ns[k];
    }
    free(ord);
    if (st) return st;
    t->persistent = 1;
    if (iteration + 1 > t->iterations) t->iterations = iteration + 1;
    return TP_OK;
}

tp_status tp_trace_save(const tp_trace *t, const char *path, tp_error *err) {
    tp_outfile out;
    tp_status st = tp_outfile_open(&out, path, "the trace", err);
    if (st) return st;
    FILE *f = out.f;
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string(TRACE_FORMAT));
    json_object_set_new(meta, "model", jstr(t->model));
    json_object_set_new(meta, "precision", jstr(t->precision));
    json_object_set_new(meta, "batch", json_integer(t->batch));
    json_object_set_new(meta, "gpu", jstr(t->gpu));
    json_object_set_new(meta, "iterations", json_integer(t->iterations));
    json_object_set_new(meta, "event_median_ms", json_real(t->event_median_ms));
    json_object_set_new(meta, "gemm_peak_tflops", tp_roofline_peaks_json(&t->rates));
    json_object_set_new(meta, "copy_gbps", json_real(t->rates.copy_gbps));
    if (t->persistent) json_object_set_new(meta, "persistent", json_true());
    /* The meta object is dumped whole, then reopened (its closing brace dropped) to append the two arrays
     * one element per line. */
    char *m = json_dumps(meta, JSON_COMPACT);
    json_decref(meta);
    int bad = !m;
    if (m) {
        m[strlen(m) - 1] = '\0';
        bad |= fprintf(f, "%s,\n\"ops\":[", m) < 0;
        free(m);
    }
    for (int i = 0; i < t->n_ops && !bad; i++) {
        bad |= fputs(i ? ",\n" : "\n", f) < 0;
        bad |= dump(op_json(&t->ops[i]), f) != 0;
    }
    bad |= fputs("],\n\"records\":[", f) < 0;
    for (int i = 0; i < t->n && !bad; i++) {
        bad |= fputs(i ? ",\n" : "\n", f) < 0;
        bad |= dump(record_json(&t->rec[i]), f) != 0;
    }
    bad |= fputs("]}\n", f) < 0;
    if (bad) {
        tp_outfile_abort(&out);
        return tp_fail(err, TP_ERR_IO, "%s: write failed (disk full?)", path);
    }
    return tp_outfile_commit(&out, err);
}

/* ---- load ------------------------------------------------------------------------------------------------ */

/* Where a field lives, for the one-line error: "<path>: <where>: field \"<key>\" <problem>". */
typedef struct {
    const char *path;
    char where[48]; /* "top level", "ops[3]", "records[12]" */
    tp_error *err;
} loc;

static tp_status bad_field(const loc *l, const char *key, const char *problem) {
    return tp_fail(l->err, TP_ERR_FORMAT, "%s: %s: field \"%s\" %s", l->path, l->where, key, problem);
}

static tp_status get_field(const loc *l, const json_t *o, const char *key, json_t **v) {
    *v = json_object_get(o, key);
    return *v ? TP_OK : bad_field(l, key, "missing");
}

/* An integer field within [lo, hi]. */
static tp_status get_int(const loc *l, const json_t *o, const char *key, long long lo, long long hi,
                         long long *out) {
    json_t *v;
    tp_status st = get_field(l, o, key, &v);
    if (st) return st;
    if (!json_is_integer(v)) return bad_field(l, key, "must be an integer");
    long long x = (long long)json_integer_value(v);
    if (x < lo || x > hi) {
        char msg[128];
        snprintf(msg, sizeof msg, "is %lld, outside [%lld, %lld]", x, lo, hi);
        return bad_field(l, key, msg);
    }
    *out = x;
    return TP_OK;
}

static tp_status get_i32(const loc *l, const json_t *o, const char *key, long long lo, long long hi, int *out) {
    long long x = 0;
    tp_status st = get_int(l, o, key, lo, hi, &x);
    if (!st) *out = (int)x;
    return st;
}

/* A string field; copied into dst (cap bytes) when dst is given, else returned in *s. */
static tp_status get_str(const loc *l, const json_t *o, const char *key, char *dst, size_t cap, const char **s) {
    json_t *v;
    tp_status st = get_field(l, o, key, &v);
    if (st) return st;
    if (!json_is_string(v)) return bad_field(l, key, "must be a string");
    const char *x = json_string_value(v);
    if (dst) {
        if (strlen(x) >= cap) {
            char msg[64];
            snprintf(msg, sizeof msg, "is longer than %zu characters", cap - 1);
            return bad_field(l, key, msg);
        }
        memcpy(dst, x, strlen(x) + 1);
    }
    if (s) *s = x;
    return TP_OK;
}

/* An array of exactly three non-negative integers (grid, block). */
static tp_status get_dim3(const loc *l, const json_t *o, const char *key, int out[3]) {
    json_t *v;
    tp_status st = get_field(l, o, key, &v);
    if (st) return st;
    if (!json_is_array(v) || json_array_size(v) != 3) return bad_field(l, key, "must be an array of 3 integers");
    for (int i = 0; i < 3; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT_MAX)
            return bad_field(l, key, "must be an array of 3 integers in [0, 2147483647]");
        out[i] = (int)json_integer_value(e);
    }
    return TP_OK;
}

/* An optional number >= 0 (a roofline input): absent leaves *out 0. */
static tp_status get_opt_nonneg(const loc *l, const json_t *o, const char *key, double *out) {
    json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v) return TP_OK;
    if (!json_is_number(v) || !(json_number_value(v) >= 0) || !isfinite(json_number_value(v)))
        return bad_field(l, key, "must be a finite number >= 0");
    *out = json_number_value(v);
    return TP_OK;
}

static tp_status load_op(const loc *l, const json_t *o, tp_trace_op *op) {
    const char *s;
    tp_status st;
    if (!json_is_object(o)) return tp_fail(l->err, TP_ERR_FORMAT, "%s: %s: must be an object", l->path, l->where);
    if ((st = get_str(l, o, "layer", op->layer, sizeof op->layer, NULL))) return st;
    if ((st = get_str(l, o, "op", NULL, 0, &s))) return st;
    int k = op_kind_parse(s);
    if (k < 0) return bad_field(l, "op", "is not a known op kind");
    op->kind = (tp_op_kind)k;
    if ((st = get_str(l, o, "precision", NULL, 0, &s))) return st;
    if (tp_precision_parse(s, &op->prec, NULL)) return bad_field(l, "precision", "is not fp32, fp16, bf16 or fp8");
    if ((st = get_opt_nonneg(l, o, "matmul_flop", &op->matmul_flop))) return st;
    if ((st = get_opt_nonneg(l, o, "bytes", &op->bytes))) return st;
    op->call = -1;
    const json_t *c = json_object_get(o, "call");
    if (c) { /* its call in the executed program; its range is checked once every op is read */
        if (!json_is_integer(c) || json_integer_value(c) < 0 || json_integer_value(c) > INT_MAX)
            return bad_field(l, "call", "must be an op index");
        op->call = (int)json_integer_value(c);
        if ((st = get_str(l, o, "kernel", op->kernel, sizeof op->kernel, NULL))) return st;
    }
    return get_str(l, o, "how", op->how, sizeof op->how, NULL);
}

static tp_status load_record(const loc *l, const json_t *o, const tp_trace *t, tp_trace_record *r) {
    const char *s;
    long long x;
    tp_status st;
    if (!json_is_object(o)) return tp_fail(l->err, TP_ERR_FORMAT, "%s: %s: must be an object", l->path, l->where);
    if ((st = get_str(l, o, "kind", NULL, 0, &s))) return st;
    int k = rec_kind_parse(s);
    if (k < 0) return bad_field(l, "kind", "is not kernel, memcpy or memset");
    r->kind = (tp_record_kind)k;
    if ((st = get_str(l, o, "name", NULL, 0, &s))) return st;
    r->name = (char *)s; /* borrowed from the JSON document; tp_trace_add copies it */
    if ((st = get_int(l, o, "start_ns", 0, LLONG_MAX, &x))) return st;
    r->start_ns = (uint64_t)x;
    if ((st = get_int(l, o, "end_ns", (long long)r->start_ns, LLONG_MAX, &x))) return st;
    r->end_ns = (uint64_t)x;
    if ((st = get_i32(l, o, "iteration", -1, (long long)t->iterations - 1, &r->iteration))) return st;
    if ((st = get_i32(l, o, "op", -1, (long long)t->n_ops - 1, &r->op))) return st;
    if ((st = get_str(l, o, "category", NULL, 0, &s))) return st;
    int c = tp_category_parse(s);
    if (c < 0) return bad_field(l, "category", "is not a known category");
    r->category = (tp_category)c;
    if ((st = get_dim3(l, o, "grid", r->grid))) return st;
    if ((st = get_dim3(l, o, "block", r->block))) return st;
    if ((st = get_i32(l, o, "registers", 0, INT_MAX, &r->registers))) return st;
    if ((st = get_i32(l, o, "smem_static", 0, INT_MAX, &r->smem_static))) return st;
    if ((st = get_i32(l, o, "smem_dynamic", 0, INT_MAX, &r->smem_dynamic))) return st;
    if ((st = get_int(l, o, "bytes", 0, LLONG_MAX, &x))) return st;
    r->bytes = (uint64_t)x;
    if ((st = get_int(l, o, "stream", 0, UINT32_MAX, &x))) return st;
    r->stream = (uint32_t)x;
    if ((st = get_int(l, o, "graph_node", 0, LLONG_MAX, &x))) return st;
    r->graph_node = (uint64_t)x;
    return TP_OK;
}

static tp_status load_doc(const loc *top, const json_t *root, tp_trace *t) {
    loc l = *top;
    const char *s;
    long long x;
    tp_status st;
    snprintf(l.where, sizeof l.where, "top level");
    if (!json_is_object(root)) return tp_fail(l.err, TP_ERR_FORMAT, "%s: not a JSON object", l.path);
    if ((st = get_str(&l, root, "format", NULL, 0, &s))) return st;
    if (strcmp(s, TRACE_FORMAT) != 0) return bad_field(&l, "format", "is not \"" TRACE_FORMAT "\"");
    if ((st = get_str(&l, root, "model", t->model, sizeof t->model, NULL))) return st;
    if ((st = get_str(&l, root, "precision", t->precision, sizeof t->precision, NULL))) return st;
    if ((st = get_i32(&l, root, "batch", 0, INT_MAX, &t->batch))) return st;
    if ((st = get_str(&l, root, "gpu", t->gpu, sizeof t->gpu, NULL))) return st;
    if ((st = get_int(&l, root, "iterations", 0, INT_MAX, &x))) return st;
    t->iterations = (int)x;
    json_t *v;
    if ((st = get_field(&l, root, "event_median_ms", &v))) return st;
    if (!json_is_number(v) || !(json_number_value(v) >= 0))
        return bad_field(&l, "event_median_ms", "must be a number >= 0");
    t->event_median_ms = json_number_value(v);
    if ((st = get_opt_nonneg(&l, root, "copy_gbps", &t->rates.copy_gbps))) return st;
    json_t *ps = json_object_get(root, "persistent");
    if (ps && !json_is_boolean(ps)) return bad_field(&l, "persistent", "must be true or false");
    t->persistent = ps && json_is_true(ps);
    json_t *pk = json_object_get(root, "gemm_peak_tflops");
    if (pk) {
        if (!json_is_object(pk)) return bad_field(&l, "gemm_peak_tflops", "must be an object");
        const char *key;
        json_t *pv;
        json_object_foreach(pk, key, pv) {
            tp_precision p;
            if (tp_precision_parse(key, &p, NULL))
                return bad_field(&l, "gemm_peak_tflops", "names an unknown precision");
            if (!json_is_number(pv) || !(json_number_value(pv) >= 0) || !isfinite(json_number_value(pv)))
                return bad_field(&l, "gemm_peak_tflops", "must map each precision to a finite number >= 0");
            t->rates.peak_tflops[p] = json_number_value(pv);
        }
    }

    json_t *ops, *recs;
    if ((st = get_field(&l, root, "ops", &ops))) return st;
    if (!json_is_array(ops)) return bad_field(&l, "ops", "must be an array");
    if ((st = get_field(&l, root, "records", &recs))) return st;
    if (!json_is_array(recs)) return bad_field(&l, "records", "must be an array");
    size_t n_ops = json_array_size(ops), n_rec = json_array_size(recs);
    if (n_ops > INT_MAX / 2 || n_rec > INT_MAX / 2) return bad_field(&l, "records", "has too many elements");
    if (n_ops) {
        t->ops = calloc(n_ops, sizeof *t->ops);
        if (!t->ops) return tp_fail(l.err, TP_ERR_OOM, "%s: out of host memory for %zu ops", l.path, n_ops);
    }
    for (size_t i = 0; i < n_ops; i++) {
        snprintf(l.where, sizeof l.where, "ops[%zu]", i);
        if ((st = load_op(&l, json_array_get(ops, i), &t->ops[i]))) return st;
        t->n_ops = (int)i + 1;
    }
    for (size_t i = 0; i < n_ops; i++) { /* a call is an earlier op's or the op's own, and that op heads its call */
        const int c = t->ops[i].call;
        snprintf(l.where, sizeof l.where, "ops[%zu]", i);
        if (c >= 0 && (c > (int)i || t->ops[c].call != c))
            return bad_field(&l, "call", "must be the op's own index or an earlier op's that heads its call");
    }
    for (size_t i = 0; i < n_rec; i++) {
        tp_trace_record r;
        memset(&r, 0, sizeof r);
        snprintf(l.where, sizeof l.where, "records[%zu]", i);
        if ((st = load_record(&l, json_array_get(recs, i), t, &r))) return st;
        if ((st = tp_trace_add(t, &r, l.err))) return st;
    }
    return TP_OK;
}

tp_status tp_trace_load(const char *path, tp_trace *t, tp_error *err) {
    tp_trace_init(t);
    /* Opened here, not by jansson, so that a missing file (TP_ERR_IO) is told apart from a malformed one. */
    FILE *f = tp_input_open(path, "the trace", err);
    if (!f) return err ? err->code : TP_ERR_IO;
    json_error_t je;
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    if (!root)
        return tp_fail(err, TP_ERR_FORMAT, "%s: line %d column %d: invalid JSON: %s", path, je.line, je.column,
                       je.text);
    loc l = {.path = path, .err = err};
    tp_status st = load_doc(&l, root, t);
    json_decref(root);
    if (st) tp_trace_free(t);
    return st;
}
