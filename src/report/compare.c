/* compare.c: `tprof compare`: the Amdahl figures and the report over several precisions (compare.h).
 *
 * The report is computed once into a model (coverage groups, per-pair op comparisons, Amdahl figures,
 * recommendations) and then rendered: Markdown and HTML through one small document writer, so the two can
 * never disagree, and JSON from the same model. The charts live in compare_svg.c.
 *
 * Time sums are integer nanoseconds from the traces, divided by the number of profiled passes only at the
 * end, so per-category figures add up to the totals they claim to split. */
#include "report/compare.h"
#include "report/compare_decode.h"
#include "report/compare_sparse.h"
#include "report/compare_stages.h"

#include <errno.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/files.h"
#include "core/util.h"
#include "formats/precision.h"
#include "report/doc.h"

#define TOP_KERNELS 10
#define TOP_GAPS 8 /* rows of each precision's largest gaps above the roofline floor */
#define MAX_RECO 48

/* Recommendation thresholds. A rule emits its recommendation only when its number clears the threshold, so
 * the report never proposes work whose payoff the measurements do not show. */
/* An unchanged category is a lever worth naming when it holds >= 20 % of the baseline time: below that, even
 * removing it entirely gains less than 1.25x. */
#define TH_LEVER_SHARE 0.20
/* A category "does not change" with the precision when < 5 % of its baseline time is in ops that changed. */
#define TH_UNCHANGED_FRAC 0.05
/* GEMMs that reach < 80 % of the measured peak-rate ratio leave a fifth of the format's advantage unused. */
#define TH_PEAK_FRACTION 0.80
/* 10 us per pass: per-op time differences below this are within the run-to-run spread of two traces (the
 * fixtures' repeated layers differ by about 1 %, a few us each). */
#define TH_MIN_MS 0.010
/* Extra work at precision boundaries (output conversion in ops that kept their precision, new quantize,
 * conversion or memory kernels) is worth a recommendation from 1 % of the entry's traced time. */
#define TH_BOUNDARY_SHARE 0.01
/* When even an infinitely fast format bounds the speedup under 2x (1/(1-f) < 2), most of the time is in ops the
 * format leaves alone, and converting more ops matters more than faster GEMMs. */
#define TH_CEILING 2.0
/* Accuracy against the FP32 reference below which a precision is flagged: top-1 agreement, cosine. */
#define TH_TOP1 0.99
#define TH_COSINE 0.999
/* Event-timed time not covered by kernels: flagged from 5 % of the pass and 50 us. */
#define TH_IDLE_FRAC 0.05
#define TH_IDLE_MS 0.050
/* A precision that loses accuracy should buy at least 10 % of speed. */
#define TH_PAYOFF 1.10
/* An FP8 attention layer whose output has cosine < 0.999 against FP16/BF16 attention on the same input (for
 * outputs of equal norm a relative L2 error of about 4.5 %: sqrt(2 (1 - cos))) is worth keeping in the higher
 * precision; the same bar as the logits' (TH_COSINE). */
#define TH_ATTN_COSINE 0.999
/* the layer (grouped across blocks) furthest above its roofline floor is named when that gap is at least this
 * share of the traced pass */
#define TH_GAP_FRAC 0.05

static const char *pname(tp_precision p) { return tp_precision_name(p); }

/* Orders the indices ord[0..n) by key[ord[i]] descending; stable, so ties keep their (category, kind) order. */
static void sort_desc(int *ord, int n, const double *key) {
    for (int a = 1; a < n; a++)
        for (int j = a; j > 0 && key[ord[j]] > key[ord[j - 1]]; j--) {
            int t = ord[j];
            ord[j] = ord[j - 1], ord[j - 1] = t;
        }
}

static double per_pass_ms(uint64_t ns, int iterations) { return (double)ns / iterations * 1e-6; }

/* ---- Amdahl ------------------------------------------------------------------------------------------------ */

static tp_status check_entry(const tp_compare_entry *x, tp_error *err) {
    if (!x->trace || !x->prof)
        return tp_fail(err, TP_ERR_ARG, "compare: the %s entry has no trace or profile", pname(x->prec));
    if (x->prof->n_layers != x->trace->n_ops || x->prof->iterations != x->trace->iterations || x->prof->iterations < 1)
        return tp_fail(err, TP_ERR_ARG,
                       "compare: the %s entry's profile is not the analysis of its trace (%d ops, %d "
                       "passes in the trace; %d, %d in the profile)",
                       pname(x->prec), x->trace->n_ops, x->trace->iterations, x->prof->n_layers, x->prof->iterations);
    return TP_OK;
}

static tp_status same_graph(const tp_compare_entry *b, const tp_compare_entry *e, tp_error *err) {
    tp_status st = check_entry(b, err);
    if (st || (st = check_entry(e, err))) return st;
    const tp_trace *x = b->trace, *y = e->trace;
    if (strcmp(x->model, y->model) != 0 || x->batch != y->batch)
        return tp_fail(err, TP_ERR_ARG, "compare: the %s trace is %s at batch %d, the %s trace %s at batch %d",
                       pname(b->prec), x->model, x->batch, pname(e->prec), y->model, y->batch);
    if (x->n_ops != y->n_ops)
        return tp_fail(err, TP_ERR_ARG, "compare: the %s and %s traces describe different graphs: %d ops against %d",
                       pname(b->prec), pname(e->prec), x->n_ops, y->n_ops);
    for (int i = 0; i < x->n_ops; i++)
        if (strcmp(x->ops[i].layer, y->ops[i].layer) != 0 || x->ops[i].kind != y->ops[i].kind)
            return tp_fail(err, TP_ERR_ARG, "compare: op %d is %s (%s) in the %s trace but %s (%s) in the %s trace", i,
                           x->ops[i].layer, tp_op_kind_name(x->ops[i].kind), pname(b->prec), y->ops[i].layer,
                           tp_op_kind_name(y->ops[i].kind), pname(e->prec));
    return TP_OK;
}

/* Sums t's profiled records' busy time (tp_trace_busy_ns: what the summary's categories split) per category into
 * in[] (op selected by sel) and out[] (the rest, unattributed records included). TP_ERR_OOM when out of memory. */
static tp_status split_ops(const tp_trace *t, const unsigned char *sel, uint64_t in[TP_CAT_COUNT],
                           uint64_t out[TP_CAT_COUNT], tp_error *err) {
    memset(in, 0, TP_CAT_COUNT * sizeof *in);
    memset(out, 0, TP_CAT_COUNT * sizeof *out);
    uint64_t *busy = malloc(sizeof *busy * (size_t)(t->n ? t->n : 1));
    if (!busy || tp_trace_busy_ns(t, busy) == UINT64_MAX) {
        free(busy);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int i = 0; i < t->n; i++) {
        const tp_trace_record *r = &t->rec[i];
        if (r->iteration < 0) continue;
        if (r->op >= 0 && sel[r->op])
            in[r->category] += busy[i];
        else
            out[r->category] += busy[i];
    }
    free(busy);
    return TP_OK;
}

/* The changed ops of e against b as a selection over op indices (caller frees); NULL when out of memory. */
static unsigned char *changed_ops(const tp_compare_entry *b, const tp_compare_entry *e, int *count) {
    int n = b->trace->n_ops;
    unsigned char *sel = calloc((size_t)(n ? n : 1), 1);
    if (!sel) return NULL;
    *count = 0;
    for (int i = 0; i < n; i++) *count += sel[i] = b->trace->ops[i].prec != e->trace->ops[i].prec;
    return sel;
}

tp_status tp_compare_amdahl(const tp_compare_entry *b, const tp_compare_entry *e, double r, tp_amdahl *out,
                            tp_error *err) {
    memset(out, 0, sizeof *out);
    if (!(r > 0) || !isfinite(r))
        return tp_fail(err, TP_ERR_ARG, "compare: peak-rate ratio %g is not a positive number", r);
    tp_status st = same_graph(b, e, err);
    if (st) return st;
    unsigned char *sel = changed_ops(b, e, &out->n_changed);
    if (!sel) return tp_fail(err, TP_ERR_OOM, "compare: out of host memory for %d ops", b->trace->n_ops);
    uint64_t chg[TP_CAT_COUNT], unch[TP_CAT_COUNT], chg_total = 0;
    st = split_ops(b->trace, sel, chg, unch, err);
    free(sel);
    if (st) return st;
    for (int c = 0; c < TP_CAT_COUNT; c++) chg_total += chg[c];
    const tp_profile_summary *pb = b->prof;
    out->f = pb->kernel_ns ? (double)chg_total / (double)pb->kernel_ns : 0;
    out->r = r;
    out->bound = 1.0 / ((1.0 - out->f) + out->f / r);
    out->measured = b->median_ms > 0 && e->median_ms > 0 ? b->median_ms / e->median_ms : 0;
    for (int c = 0; c < TP_CAT_COUNT; c++) {
        double ideal = ((double)unch[c] + (double)chg[c] / r) / pb->iterations * 1e-6;
        out->ideal_ms += ideal;
        out->gap_ms[c] = e->prof->cat_ns_per_iter[c] * 1e-6 - ideal;
    }
    out->actual_ms = e->prof->kernel_ns_per_iter * 1e-6;
    return TP_OK;
}

/* ---- FP8 attention cost ------------------------------------------------------------------------------------ */

int tp_compare_attn_worst(const tp_attn_cost *rows, int n) {
    if (!rows || n < 1) return -1;
    int w = 0;
    for (int k = 1; k < n && !isnan(rows[w].cosine); k++)
        if (isnan(rows[k].cosine) || rows[k].cosine < rows[w].cosine) w = k;
    return w;
}

static tp_status check_attn_cost(const tp_compare_entry *x, tp_error *err) {
    if (x->n_attn_cost < 0 || (x->n_attn_cost > 0 && !x->attn_cost))
        return tp_fail(err, TP_ERR_ARG, "compare: the %s entry has %d FP8 attention cost rows%s", pname(x->prec),
                       x->n_attn_cost, x->n_attn_cost > 0 ? " but no array" : "");
    for (int k = 0; k < x->n_attn_cost; k++) {
        const tp_attn_cost *r = &x->attn_cost[k];
        if (r->op < 0 || r->op >= x->trace->n_ops)
            return tp_fail(err, TP_ERR_ARG, "compare: the %s entry's FP8 attention cost row %d names op %d of %d",
                           pname(x->prec), k, r->op, x->trace->n_ops);
        if (x->trace->ops[r->op].kind != TP_OP_ATTENTION)
            return tp_fail(err, TP_ERR_ARG,
                           "compare: the %s entry's FP8 attention cost row %d names op %d (%s), a %s op, not attention",
                           pname(x->prec), k, r->op, x->trace->ops[r->op].layer,
                           tp_op_kind_name(x->trace->ops[r->op].kind));
        if (k > 0 && r->op <= x->attn_cost[k - 1].op)
            return tp_fail(err, TP_ERR_ARG,
                           "compare: the %s entry's FP8 attention cost rows are not in increasing op order (row %d: "
                           "op %d after op %d)",
                           pname(x->prec), k, r->op, x->attn_cost[k - 1].op);
    }
    return TP_OK;
}

/* ---- the model --------------------------------------------------------------------------------------------- */

enum { COV_NATIVE = 0, COV_EMULATED, COV_POLICY, COV_CLASSES };

/* Ops of one entry sharing kind, executed precision, reason and (block numbers aside) plan note. */
typedef struct {
    tp_op_kind kind;
    tp_precision prec;
    int cls;
    char how[256];            /* the plan's note, block numbers replaced by N */
    char kernel[48];          /* its call's kernel in the executed program ("in a gemm call" when fused into another
                                 op's; "-" when the trace records no program) */
    char layers[TP_NAME_LEN]; /* the layers' common pattern (blocks.N.attn), or the first layer */
    int same_pattern;         /* all layers match `layers` */
    int ops, first_op;
    double ms; /* per pass, all its ops */
} cov_group;

typedef struct {
    cov_group *g;
    int n_groups;
    int by_prec[TP_PREC_COUNT];
    int cls[COV_CLASSES];
    double own_ms; /* ops executed in the entry's own precision, ms per pass */
} coverage;

/* One entry against the baseline. */
typedef struct {
    int have;     /* Amdahl figures computed */
    char why[96]; /* why not */
    tp_amdahl am;
    double chg_b[TP_CAT_COUNT];   /* baseline ms per pass of the ops that changed precision */
    double chg_e[TP_CAT_COUNT];   /* this entry's ms per pass of the same ops */
    double noted_b[TP_CAT_COUNT]; /* baseline ms per pass of the ops in the same precision whose plan note
                                     changed (e.g. they now write the next GEMM's input in the new format) */
    /* ops in the same precision in both whose plan note differs (e.g. "writes e4m3 for ..."), per op kind */
    double kb[TP_OP_KIND_COUNT], ke[TP_OP_KIND_COUNT];
    int kn[TP_OP_KIND_COUNT], kop[TP_OP_KIND_COUNT];
} pair;

typedef struct {
    const char *rule;
    int entry;
    const char *metric;
    double value, threshold;
    char text[1024];
} reco;

typedef struct {
    const tp_compare_config *cfg;
    const tp_compare_entry *e;
    int n, base;
    coverage *cov;
    pair *pr;
    tp_amdahl *am; /* [n] for the chart: r == 0 where there is no bound */
    reco rec[MAX_RECO];
    int n_rec;
} model;

static int cov_class(const char *how) {
    if (strstr(how, "by policy")) return COV_POLICY;
    if (strstr(how, "emulat")) return COV_EMULATED;
    return COV_NATIVE;
}

static const char *cov_class_text(int cls, tp_precision prec, char *buf, size_t n) {
    if (cls == COV_POLICY)
        snprintf(buf, n, "kept %s by policy", pname(prec));
    else
        snprintf(buf, n, "%s", cls == COV_EMULATED ? "emulated" : "native");
    return buf;
}

/* Replaces a number between dots (".3.") by ".N.", so the notes and names of repeated blocks group together
 * while numbers that are part of a format's name (fp16, e4m3, amax/448) stay. */
static void normalize(const char *in, char *out, size_t n) {
    size_t o = 0;
    for (size_t i = 0; in[i] && o + 1 < n; i++) {
        out[o++] = in[i];
        if (in[i] == '.' && in[i + 1] >= '0' && in[i + 1] <= '9') {
            size_t j = i + 1;
            while (in[j] >= '0' && in[j] <= '9') j++;
            if (in[j] == '.' && o + 1 < n) out[o++] = 'N', i = j - 1;
        }
    }
    out[o] = '\0';
}

/* Ops of one entry with a known floor and time, grouped by layer name with block indices as N
 * (blocks.N.mlp.fc1: the same layer of every block) */
typedef struct {
    char name[TP_NAME_LEN];
    tp_op_kind kind;
    int ops;
    double ns, floor_ns, compute_ns; /* per pass, summed over the group */
} gap_row;

static int cmp_gap(const void *x, const void *y) {
    const gap_row *a = x, *b = y;
    const double ga = a->ns - a->floor_ns, gb = b->ns - b->floor_ns;
    return ga < gb ? 1 : ga > gb ? -1 : strcmp(a->name, b->name);
}

/* Fills rows (capacity: e's op count) with e's groups, the largest time above the floor first; returns how many. */
static int roofline_gaps(const tp_compare_entry *e, gap_row *rows) {
    const tp_profile_summary *s = e->prof;
    int n = 0;
    for (int o = 0; o < s->n_layers; o++) {
        const tp_layer_row *L = &s->layers[o];
        if (!L->floor.known || L->ns_per_iter <= 0) continue;
        char key[TP_NAME_LEN];
        normalize(L->layer, key, sizeof key);
        int g = 0;
        while (g < n && strcmp(rows[g].name, key) != 0) g++;
        if (g == n) {
            memset(&rows[n], 0, sizeof rows[n]);
            memcpy(rows[n].name, key, sizeof key);
            rows[n++].kind = L->kind;
        }
        rows[g].ops++;
        rows[g].ns += L->ns_per_iter;
        rows[g].floor_ns += L->floor.ns;
        rows[g].compute_ns += L->floor.compute_ns;
    }
    qsort(rows, (size_t)n, sizeof *rows, cmp_gap);
    return n;
}

static tp_status build_coverage(const tp_compare_entry *x, coverage *cv) {
    const tp_trace *t = x->trace;
    cv->g = calloc((size_t)(t->n_ops ? t->n_ops : 1), sizeof *cv->g);
    if (!cv->g) return TP_ERR_OOM;
    for (int i = 0; i < t->n_ops; i++) {
        const tp_trace_op *op = &t->ops[i];
        char how[256], lay[TP_NAME_LEN];
        normalize(op->how, how, sizeof how);
        normalize(op->layer, lay, sizeof lay);
        int cls = cov_class(op->how), k = 0;
        char kernel[48] = "-";
        if (op->call >= 0 && op->call != i) snprintf(kernel, sizeof kernel, "in a %s call", t->ops[op->call].kernel);
        else if (op->call >= 0) snprintf(kernel, sizeof kernel, "%s", op->kernel);
        while (k < cv->n_groups && !(cv->g[k].kind == op->kind && cv->g[k].prec == op->prec && cv->g[k].cls == cls &&
                                     strcmp(cv->g[k].how, how) == 0 && strcmp(cv->g[k].kernel, kernel) == 0))
            k++;
        cov_group *g = &cv->g[k];
        if (k == cv->n_groups) {
            cv->n_groups++;
            *g = (cov_group){.kind = op->kind, .prec = op->prec, .cls = cls, .first_op = i, .same_pattern = 1};
            snprintf(g->how, sizeof g->how, "%s", how);
            snprintf(g->kernel, sizeof g->kernel, "%s", kernel);
            snprintf(g->layers, sizeof g->layers, "%s", lay);
        } else if (strcmp(g->layers, lay) != 0) {
            g->same_pattern = 0;
        }
        g->ops++;
        g->ms += x->prof->layers[i].ns_per_iter * 1e-6;
        cv->by_prec[op->prec]++;
        cv->cls[cls]++;
        if (op->prec == x->prec) cv->own_ms += x->prof->layers[i].ns_per_iter * 1e-6;
    }
    return TP_OK;
}

static tp_status build_pair(const model *m, int i, pair *p, tp_error *err) {
    const tp_compare_entry *b = &m->e[m->base], *e = &m->e[i];
    int n_changed;
    unsigned char *sel = changed_ops(b, e, &n_changed);
    if (!sel) return tp_fail(err, TP_ERR_OOM, "compare: out of host memory for %d ops", b->trace->n_ops);
    uint64_t in[TP_CAT_COUNT], out[TP_CAT_COUNT];
    tp_status st = split_ops(b->trace, sel, in, out, err);
    for (int c = 0; c < TP_CAT_COUNT; c++) p->chg_b[c] = per_pass_ms(in[c], b->trace->iterations);
    if (!st) st = split_ops(e->trace, sel, in, out, err);
    for (int c = 0; c < TP_CAT_COUNT; c++) p->chg_e[c] = per_pass_ms(in[c], e->trace->iterations);
    if (st) {
        free(sel);
        return st;
    }
    for (int o = 0; o < b->trace->n_ops; o++) {
        const tp_trace_op *x = &b->trace->ops[o], *y = &e->trace->ops[o];
        /* a note that only adds "kept ... by policy" describes the same kernel as the baseline's */
        int noted = !sel[o] && strcmp(x->how, y->how) != 0 && cov_class(y->how) != COV_POLICY;
        sel[o] = (unsigned char)noted; /* reused: now selects the noted ops */
        if (!noted) continue;
        if (p->kn[x->kind]++ == 0) p->kop[x->kind] = o;
        p->kb[x->kind] += b->prof->layers[o].ns_per_iter * 1e-6;
        p->ke[x->kind] += e->prof->layers[o].ns_per_iter * 1e-6;
    }
    st = split_ops(b->trace, sel, in, out, err);
    for (int c = 0; c < TP_CAT_COUNT; c++) p->noted_b[c] = per_pass_ms(in[c], b->trace->iterations);
    free(sel);
    if (st) return st;
    double pb = m->cfg->peak_tflops[b->prec], pe = m->cfg->peak_tflops[e->prec];
    if (!(pb > 0) || !(pe > 0)) {
        snprintf(p->why, sizeof p->why, "peak GEMM rate of %s not measured", pname(pb > 0 ? e->prec : b->prec));
        return TP_OK;
    }
    st = tp_compare_amdahl(b, e, pe / pb, &p->am, err);
    if (st) return st;
    p->have = 1;
    return TP_OK;
}

/* ---- recommendations --------------------------------------------------------------------------------------- */

static reco *add_reco(model *m, const char *rule, int entry, const char *metric, double value, double threshold) {
    if (m->n_rec == MAX_RECO) return NULL;
    reco *r = &m->rec[m->n_rec++];
    *r = (reco){.rule = rule, .entry = entry, .metric = metric, .value = value, .threshold = threshold};
    return r;
}

/* Appends to a recommendation's text; truncates rather than fails (the text is prose). */
static void cat_text(reco *r, const char *fmt, ...) TP_PRINTF_LIKE(2, 3);
static void cat_text(reco *r, const char *fmt, ...) {
    size_t used = strlen(r->text);
    va_list ap;
    va_start(ap, fmt);
    if (used + 1 < sizeof r->text) vsnprintf(r->text + used, sizeof r->text - used, fmt, ap);
    va_end(ap);
}

static void pair_recos(model *m, int i) {
    const tp_compare_entry *b = &m->e[m->base], *e = &m->e[i];
    const pair *p = &m->pr[i];
    const char *bp = pname(b->prec), *ep = pname(e->prec);
    double bt = b->prof->kernel_ns_per_iter * 1e-6, et = e->prof->kernel_ns_per_iter * 1e-6;
    reco *r;

    /* The largest category that keeps its precision: the biggest lever the format leaves untouched. */
    int lc = -1;
    for (int c = 0; c < TP_CAT_COUNT; c++) {
        double base = b->prof->cat_ns_per_iter[c] * 1e-6;
        if (base > 0 && p->chg_b[c] < TH_UNCHANGED_FRAC * base &&
            (lc < 0 || base > b->prof->cat_ns_per_iter[lc] * 1e-6))
            lc = c;
    }
    if (lc >= 0 && bt > 0 && b->prof->cat_ns_per_iter[lc] * 1e-6 >= TH_LEVER_SHARE * bt) {
        double share = b->prof->cat_ns_per_iter[lc] * 1e-6 / bt, eb = e->prof->cat_ns_per_iter[lc] * 1e-6;
        const char *cn = tp_category_name((tp_category)lc);
        if ((r = add_reco(m, "unchanged_lever", i, "category_share_of_baseline", share, TH_LEVER_SHARE)))
            cat_text(r,
                     "%s is %.1f %% of %s kernel time (%.3f ms per pass) and does not change with %s (%.3f ms): a "
                     "faster, fused or %s %s is the largest lever; halving it would save %.2f ms per pass, %.1f %% of "
                     "the %s pass.",
                     cn, 100 * share, bp, b->prof->cat_ns_per_iter[lc] * 1e-6, ep, eb, ep, cn, eb / 2,
                     et > 0 ? 100 * eb / 2 / et : 0, ep);
    }
    if (p->have && p->am.f < 1) {
        double inf = 1 / (1 - p->am.f);
        if (inf < TH_CEILING && (r = add_reco(m, "amdahl_ceiling", i, "infinite_rate_bound", inf, TH_CEILING)))
            cat_text(r,
                     "Only %.1f %% of %s kernel time is in the %d ops that change precision with %s: even infinitely "
                     "fast %s kernels would bound the speedup at %.2f× (1/(1 − f)); at the measured peak-rate ratio "
                     "%.2f× the bound is %.3f×. Converting more of the time matters more than faster GEMMs.",
                     100 * p->am.f, bp, p->am.n_changed, ep, ep, inf, p->am.r, p->am.bound);
    }
    /* GEMMs of the changed ops against the peak-rate ratio. */
    double gb = p->chg_b[TP_CAT_GEMM], ge = p->chg_e[TP_CAT_GEMM];
    if (p->have && gb > 0 && ge > 0) {
        double got = gb / ge, frac = got / p->am.r;
        if (frac < TH_PEAK_FRACTION &&
            (r = add_reco(m, "gemm_peak_fraction", i, "gemm_speedup_over_peak_ratio", frac, TH_PEAK_FRACTION)))
            cat_text(r,
                     "%s GEMMs of the %d changed ops sped up %.2f× over %s (%.3f → %.3f ms per pass), only %.0f %% of "
                     "the measured peak-rate ratio %.2f× (%.0f / %.0f TFLOP/s%s%s): reaching it would save %.3f ms per "
                     "pass; these GEMMs are smaller than the peak measurement's, so look at the tiles and algorithms "
                     "cuBLASLt chose for them.",
                     ep, p->am.n_changed, got, bp, gb, ge, 100 * frac, p->am.r, m->cfg->peak_tflops[e->prec],
                     m->cfg->peak_tflops[b->prec], m->cfg->peak_shape ? " at " : "",
                     m->cfg->peak_shape ? m->cfg->peak_shape : "", ge - gb / p->am.r);
    }
    /* Output conversion in ops that kept their precision but whose plan changed (they write the next GEMM's
     * input in the new format). */
    double extra = 0;
    for (int k = 0; k < TP_OP_KIND_COUNT; k++)
        if (p->kn[k] && p->ke[k] - p->kb[k] >= TH_MIN_MS) extra += p->ke[k] - p->kb[k];
    if (et > 0 && extra >= TH_BOUNDARY_SHARE * et &&
        (r = add_reco(m, "boundary_cost", i, "boundary_ms_per_pass", extra, TH_BOUNDARY_SHARE * et))) {
        cat_text(r,
                 "Ops that keep their precision but whose plan changed for %s cost +%.3f ms per pass (%.1f %% of the "
                 "%s pass):",
                 ep, extra, 100 * extra / et, ep);
        int ord[TP_OP_KIND_COUNT], nk = 0, first = 1;
        for (int k = 0; k < TP_OP_KIND_COUNT; k++)
            if (p->kn[k] && p->ke[k] - p->kb[k] >= TH_MIN_MS) ord[nk++] = k;
        double cost[TP_OP_KIND_COUNT];
        for (int k = 0; k < TP_OP_KIND_COUNT; k++) cost[k] = p->ke[k] - p->kb[k];
        sort_desc(ord, nk, cost); /* largest cost first */
        for (int q = 0; q < nk; q++) {
            int k = ord[q];
            double d = p->ke[k] - p->kb[k];
            char note[128];
            normalize(e->trace->ops[p->kop[k]].how, note, sizeof note);
            cat_text(r, "%s %s +%.3f ms (%d ops, %.3f → %.3f ms, %+.1f %%; \"%s\")", first ? "" : ";",
                     tp_op_kind_name((tp_op_kind)k), d, p->kn[k], p->kb[k], p->ke[k],
                     p->kb[k] > 0 ? 100 * d / p->kb[k] : 0, note);
            first = 0;
        }
        cat_text(r, ". Where these kernels now write a narrower format they move fewer bytes and should not be "
                    "slower: look at their conversion and store path.");
    }
    /* New standalone kernels at precision boundaries. */
    static const tp_category NEWCAT[] = {TP_CAT_QUANT, TP_CAT_CONVERT, TP_CAT_MEMORY};
    double added = 0;
    for (int k = 0; k < 3; k++) {
        double d = (e->prof->cat_ns_per_iter[NEWCAT[k]] - b->prof->cat_ns_per_iter[NEWCAT[k]]) * 1e-6;
        if (d > 0) added += d;
    }
    if (et > 0 && added >= TH_BOUNDARY_SHARE * et &&
        (r = add_reco(m, "new_kernels", i, "added_ms_per_pass", added, TH_BOUNDARY_SHARE * et)))
        cat_text(
            r,
            "Quantize, conversion and memory kernels add +%.3f ms per pass in %s against %s (%.1f %% of the pass): "
            "fuse them into the neighbouring kernels.",
            added, ep, bp, 100 * added / et);
    /* Speed bought with accuracy. */
    double sp = b->median_ms > 0 && e->median_ms > 0 ? b->median_ms / e->median_ms : 0;
    if (sp > 0 && sp < TH_PAYOFF && e->ref_images > 0 && (e->top1 < b->top1 || e->cosine < b->cosine) &&
        (r = add_reco(m, "payoff", i, "measured_speedup", sp, TH_PAYOFF))) {
        char t1[80] = "";
        if (!isnan(e->top1)) snprintf(t1, sizeof t1, "top-1 agreement %.1f %% against %.1f %%, ", 100 * e->top1, 100 * b->top1);
        cat_text(r,
                 "%s is only %.3f× faster than %s (%.3f → %.3f ms per pass) for lower accuracy (%scosine %.6f against "
                 "%.6f): at this batch it does not pay off yet.",
                 ep, sp, bp, b->median_ms, e->median_ms, t1, e->cosine, b->cosine);
    }
}

static void entry_recos(model *m, int i) {
    const tp_compare_entry *e = &m->e[i];
    const char *ep = pname(e->prec);
    reco *r;
    if (e->ref_images > 0 && (e->top1 < TH_TOP1 || e->cosine < TH_COSINE) &&
        (r = add_reco(m, "accuracy", i, e->top1 < TH_TOP1 ? "top1" : "cosine", e->top1 < TH_TOP1 ? e->top1 : e->cosine,
                      e->top1 < TH_TOP1 ? TH_TOP1 : TH_COSINE)))
    {
        if (isnan(e->top1)) /* not logits: the cosine alone */
            cat_text(r,
                     "%s's outputs reach cosine %.5f (relative L2 %.4f) against the FP32 reference over %d samples, "
                     "under the %.3f threshold: keep the most sensitive layers in higher precision (the drift per "
                     "stage, where the model has stages, says where it is lost) or refine the scales.",
                     ep, e->cosine, e->rel_l2, e->ref_images, TH_COSINE);
        else
            cat_text(r,
                     "%s agrees with the FP32 reference on the top-1 class for %.1f %% of %d images (cosine %.5f, "
                     "relative L2 %.4f), under the %.0f %% / %.3f thresholds: check on more images (one image is "
                     "%.1f %% here), and keep the most sensitive layers in higher precision or refine the scales.",
                     ep, 100 * e->top1, e->ref_images, e->cosine, e->rel_l2, 100 * TH_TOP1, TH_COSINE,
                     100.0 / e->ref_images);
    }
    int w = tp_compare_attn_worst(e->attn_cost, e->n_attn_cost);
    if (w >= 0 && !(e->attn_cost[w].cosine >= TH_ATTN_COSINE)) {
        const tp_attn_cost *a = &e->attn_cost[w];
        int below = 0;
        for (int k = 0; k < e->n_attn_cost; k++) below += !(e->attn_cost[k].cosine >= TH_ATTN_COSINE);
        if ((r = add_reco(m, "fp8_attention_layer", i, "attention_cosine", a->cosine, TH_ATTN_COSINE)))
            cat_text(r,
                     "FP8 attention costs most accuracy in %s of the %s engine: cosine %.6f, relative L2 %.4g against "
                     "%s attention on the same input (%d of %d FP8 attention layers under %.3f); keep it in %s by "
                     "adding the policy rule %s=%s (later rules win).",
                     e->trace->ops[a->op].layer, ep, a->cosine, a->rel_l2, pname(a->ref), below, e->n_attn_cost,
                     TH_ATTN_COSINE, pname(a->ref), e->trace->ops[a->op].layer, pname(a->ref));
    }
    const tp_profile_summary *s = e->prof;
    gap_row *g = s->has_roofline && s->n_layers > 0 ? malloc(sizeof *g * (size_t)s->n_layers) : NULL;
    const int ng = g ? roofline_gaps(e, g) : 0;
    const double pass = s->kernel_ns_per_iter, above = ng ? g[0].ns - g[0].floor_ns : 0;
    if (ng && pass > 0 && above >= TH_GAP_FRAC * pass &&
        (r = add_reco(m, "roofline_gap", i, "above_floor_fraction", above / pass, TH_GAP_FRAC))) {
        const int compute = g[0].compute_ns * 2 > g[0].floor_ns;
        cat_text(r,
                 "In %s, %s (%d op%s) is the furthest above its roofline floor: %.3f ms per pass against a floor of "
                 "%.3f ms (%.1f %% attainment, %s-bound; %.1f %% of the pass above the floor)",
                 ep, g[0].name, g[0].ops, g[0].ops == 1 ? "" : "s", g[0].ns * 1e-6, g[0].floor_ns * 1e-6,
                 100 * g[0].floor_ns / g[0].ns, compute ? "compute" : "memory", 100 * above / pass);
        if (ng > 1)
            cat_text(r, "; next %s, %.3f ms above its floor", g[1].name, (g[1].ns - g[1].floor_ns) * 1e-6);
        cat_text(r, compute ? ". Its tensor cores run below the 8192³ GEMM rate: tile shapes, the epilogue's work, "
                              "or too few tiles per SM at this shape."
                            : ". It moves more bytes than it must or waits on latency: fuse it with its neighbour, "
                              "narrow its formats, or keep more loads in flight.");
    }
    free(g);
    double traced = e->prof->kernel_ns_per_iter * 1e-6, idle = e->median_ms - traced;
    if (e->median_ms > 0 && idle >= TH_IDLE_MS && idle >= TH_IDLE_FRAC * e->median_ms &&
        (r = add_reco(m, "idle_gpu", i, "idle_fraction", idle / e->median_ms, TH_IDLE_FRAC)))
        cat_text(r,
                 "%.3f ms of %s's %.3f ms per pass (%.1f %%) is not kernel time: launch gaps or synchronization; "
                 "capture the pass in one CUDA graph and keep host work off the timed region.",
                 idle, ep, e->median_ms, 100 * idle / e->median_ms);
}

static void model_free(model *m) {
    if (m->cov)
        for (int i = 0; i < m->n; i++) free(m->cov[i].g);
    free(m->cov);
    free(m->pr);
    free(m->am);
}

static tp_status model_build(model *m, tp_error *err) {
    m->cov = calloc((size_t)m->n, sizeof *m->cov);
    m->pr = calloc((size_t)m->n, sizeof *m->pr);
    m->am = calloc((size_t)m->n, sizeof *m->am);
    if (!m->cov || !m->pr || !m->am) return tp_fail(err, TP_ERR_OOM, "compare: out of host memory");
    for (int i = 0; i < m->n; i++) {
        if (build_coverage(&m->e[i], &m->cov[i])) return tp_fail(err, TP_ERR_OOM, "compare: out of host memory");
        if (i == m->base) continue;
        tp_status st = build_pair(m, i, &m->pr[i], err);
        if (st) return st;
        if (m->pr[i].have) m->am[i] = m->pr[i].am;
    }
    for (int i = 0; i < m->n; i++)
        if (i != m->base) pair_recos(m, i);
    for (int i = 0; i < m->n; i++) entry_recos(m, i);
    return TP_OK;
}

/* ---- report sections --------------------------------------------------------------------------------------- */

static void chart(tp_doc *d, const model *m, const char *file, const char *alt, int speedup) {
    if (!d->html) {
        fprintf(d->f, "![%s](%s)\n\n", alt, file);
        return;
    }
    fputs("<figure>\n", d->f);
    if (speedup)
        tp_compare_svg_speedup(d->f, m->e, m->am, m->n, m->base);
    else
        tp_compare_svg_breakdown(d->f, m->e, m->n);
    fputs("</figure>\n", d->f);
}

static void sec_summary(tp_doc *d, const model *m) {
    const tp_compare_entry *b = &m->e[m->base];
    char sp[48], wb[32], per_s[48], samples[40];
    const char *unit = m->cfg->unit && m->cfg->unit[0] ? m->cfg->unit : "image";
    tp_doc_heading(d, 2, "summary", "Summary");
    snprintf(sp, sizeof sp, "Speedup vs. %s", pname(b->prec));
    snprintf(per_s, sizeof per_s, "%c%ss/s", toupper((unsigned char)unit[0]), unit + 1); /* "Images/s" */
    if (tp_unit_hz(unit)) snprintf(per_s, sizeof per_s, "Hz (observations/s)");
    snprintf(samples, sizeof samples, "%c%ss", toupper((unsigned char)unit[0]), unit + 1);
    tp_doc_table_open(d, "lrrrrrrrrrrrrr", "Precision", "Median (ms)", "Mean (ms)", "p99 (ms)", "CoV", per_s,
                      "Batches/s", "Weights (format)", sp, "Cosine", "Rel. L2", "Max abs", "Top-1", samples, NULL);
    for (int i = 0; i < m->n; i++) {
        const tp_compare_entry *e = &m->e[i];
        tp_doc_tr_open(d);
        tp_doc_td(d, "%s%s", pname(e->prec), i == m->base ? " (baseline)" : "");
        tp_doc_td(d, "%.3f", e->median_ms);
        tp_doc_td(d, "%.3f", e->mean_ms);
        tp_doc_td(d, "%.3f", e->p99_ms);
        tp_doc_td(d, "%.2f %%", 100 * e->cov);
        tp_doc_td(d, "%.0f", e->images_per_s);
        tp_doc_td(d, "%.2f", e->qps);
        tp_doc_td(d, "%s (%.2f×)", tp_fmt_bytes(e->weight_bytes, wb, sizeof wb),
                  b->weight_bytes > 0 ? e->weight_bytes / b->weight_bytes : 0);
        tp_doc_td_ratio(d, b->median_ms, e->median_ms);
        if (e->ref_images > 0) {
            tp_doc_td(d, "%.6f", e->cosine);
            tp_doc_td(d, "%.4g", e->rel_l2);
            tp_doc_td(d, "%.4g", e->max_abs);
            if (isnan(e->top1)) tp_doc_td(d, "n/a");
            else tp_doc_td(d, "%.1f %%", 100 * e->top1);
            tp_doc_td(d, "%d", e->ref_images);
        } else {
            for (int k = 0; k < 5; k++) tp_doc_td(d, "n/a");
        }
        tp_doc_tr_close(d);
    }
    tp_doc_table_close(d);
    tp_doc_para(
        d,
        "Latency: event-timed GPU compute time per forward pass of batch %d (CUDA events; median, mean and p99 over "
        "the timed runs; host-device transfers excluded). Weights: in their format (the plan's bytes). Accuracy: "
        "%s against the %s reference on the same weights and inputs (cosine similarity, relative L2 error, largest "
        "absolute error%s).%s",
        m->cfg->batch, m->cfg->not_logits ? "the outputs" : "logits", m->cfg->reference ? m->cfg->reference : "FP32 CPU",
        m->cfg->not_logits ? "; no top-1: the output is not logits" : ", top-1 agreement",
        !tp_unit_hz(unit) ? "" : m->cfg->batch > 1 ? " Hz: observations per second over the batch (each of its "
                                                   "streams at the Batches/s rate)."
                                                 : " Hz: observations per second, the policy's control rate.");
}

static void sec_config(tp_doc *d, const model *m) {
    const tp_compare_config *c = m->cfg;
    const char *na = "unknown";
    tp_doc_heading(d, 2, "configuration", "Configuration");
    tp_doc_list_open(d);
    tp_doc_li_open(d), tp_doc_txt(d, "Model: %s, batch %d", c->model ? c->model : na, c->batch), tp_doc_li_close(d);
    tp_doc_li_open(d),
        tp_doc_txt(d, "GPU: %s; driver %s; CUDA %s; cuBLASLt %s", c->gpu ? c->gpu : na, c->driver ? c->driver : na,
                   c->cuda ? c->cuda : na, c->cublaslt ? c->cublaslt : na),
        tp_doc_li_close(d);
    tp_doc_li_open(d),
        tp_doc_txt(d,
                   "Timing: warm-up %.0f ms, then at least %d iterations and %.1f s per precision; CUDA graph %s; "
                   "data transfers excluded (GPU compute time from CUDA events)",
                   c->warmup_ms, c->iterations, c->duration_s, c->cuda_graph ? "on" : "off"),
        tp_doc_li_close(d);
    tp_doc_li_open(d),
        tp_doc_txt(d, "Profile: %d profiled forward passes per precision (CUPTI kernel trace)",
                   m->e[m->base].trace->iterations),
        tp_doc_li_close(d);
    tp_doc_li_open(d), tp_doc_txt(d, "Peak dense GEMM rates measured on this GPU%s%s:", c->peak_shape ? " at " : "",
                                  c->peak_shape ? c->peak_shape : "");
    int any = 0;
    for (int p = 0; p < TP_PREC_COUNT; p++)
        if (c->peak_tflops[p] > 0)
            tp_doc_txt(d, "%s %s %.0f TFLOP/s", any++ ? "," : "", pname((tp_precision)p), c->peak_tflops[p]);
    tp_doc_txt(d, "%s", any ? "" : " not measured"), tp_doc_li_close(d);
    tp_doc_li_open(d), tp_doc_txt(d, "Commit %s, %s", c->commit ? c->commit : na, c->date ? c->date : na),
        tp_doc_li_close(d);
    if (c->command) tp_doc_li_open(d), tp_doc_txt(d, "Command: "), tp_doc_code(d, c->command), tp_doc_li_close(d);
    tp_doc_list_close(d);
}

static void sec_breakdown(tp_doc *d, const model *m) {
    char id[64];
    tp_doc_heading(d, 2, "kernel-breakdown", "Kernel breakdown");
    tp_doc_para(d, "Traced GPU kernel time per forward pass (the sum of kernel, memcpy and memset durations inside the "
                   "profiled passes), by category.");
    chart(d, m, "breakdown.svg", "Kernel time per category and precision", 0);
    /* two columns per entry: headers and alignments built for this many entries */
    char *align = malloc((size_t)(2 * m->n + 2)), (*names)[32] = malloc((size_t)(2 * m->n) * sizeof *names);
    const char **heads = malloc((size_t)(2 * m->n + 2) * sizeof *heads);
    if (!align || !names || !heads) {
        tp_doc_para(d, "(out of host memory for this table)");
        free(align), free(names), free(heads);
        goto top;
    }
    align[0] = 'l', heads[0] = "Category";
    for (int i = 0; i < m->n; i++) {
        snprintf(names[2 * i], sizeof names[0], "%s (ms)", pname(m->e[i].prec));
        snprintf(names[2 * i + 1], sizeof names[0], "%s (%%)", pname(m->e[i].prec));
        heads[2 * i + 1] = names[2 * i], heads[2 * i + 2] = names[2 * i + 1];
        align[2 * i + 1] = align[2 * i + 2] = 'r';
    }
    align[2 * m->n + 1] = '\0', heads[2 * m->n + 1] = NULL;
    tp_doc_table_openv(d, align, heads);
    for (int c = 0; c <= TP_CAT_COUNT + 2; c++) {
        int any = c >= TP_CAT_COUNT;
        for (int i = 0; i < m->n && !any; i++) any = m->e[i].prof->cat_ns[c] > 0;
        if (!any) continue;
        tp_doc_tr_open(d);
        tp_doc_td(d, "%s",
                  c < TP_CAT_COUNT        ? tp_category_name((tp_category)c)
                  : c == TP_CAT_COUNT     ? "total traced"
                  : c == TP_CAT_COUNT + 1 ? "event-timed median"
                                          : "event − traced");
        for (int i = 0; i < m->n; i++) {
            const tp_compare_entry *e = &m->e[i];
            double t = e->prof->kernel_ns_per_iter * 1e-6;
            if (c < TP_CAT_COUNT)
                tp_doc_td(d, "%.3f", e->prof->cat_ns_per_iter[c] * 1e-6), tp_doc_td(d, "%.1f", e->prof->cat_pct[c]);
            else if (c == TP_CAT_COUNT)
                tp_doc_td(d, "%.3f", t), tp_doc_td(d, "100.0");
            else if (c == TP_CAT_COUNT + 1)
                tp_doc_td(d, "%.3f", e->median_ms), tp_doc_td(d, "%s", "");
            else
                tp_doc_td(d, "%.3f", e->median_ms - t),
                    tp_doc_td(d, "%.1f", e->median_ms > 0 ? 100 * (e->median_ms - t) / e->median_ms : 0);
        }
        tp_doc_tr_close(d);
    }
    tp_doc_table_close(d);
    free(align), free(names), free(heads);
top:
    for (int i = 0; i < m->n; i++) {
        const tp_compare_entry *e = &m->e[i];
        const tp_profile_summary *s = e->prof;
        int rows = s->n_kernels < TOP_KERNELS ? s->n_kernels : TOP_KERNELS;
        snprintf(id, sizeof id, "kernels-%s-%d", pname(e->prec), i);
        tp_doc_heading(d, 3, id, "Top kernels: %s (%d of %d)", pname(e->prec), rows, s->n_kernels);
        if (s->raw_kernel_ns > s->kernel_ns + s->kernel_ns / 1000)
            tp_doc_para(d, "Kernel durations, as nsys reports them: they overlap here (programmatic dependent launch), "
                           "so they sum to %.3f ms per pass against %.3f ms of busy time above, and the percentages "
                           "are of that sum.", s->raw_kernel_ns_per_iter * 1e-6, s->kernel_ns_per_iter * 1e-6);
        tp_doc_table_open(d, "rrrlll", "Time (%)", "ms per pass", "Launches per pass", "Category", "Layers", "Kernel",
                          NULL);
        for (int k = 0; k < rows; k++) {
            const tp_kernel_row *r = &s->kernels[k];
            tp_doc_tr_open(d);
            tp_doc_td(d, "%.1f", r->time_pct);
            tp_doc_td(d, "%.3f", per_pass_ms(r->total_ns, s->iterations));
            tp_doc_td(d, "%.2f", (double)r->instances / s->iterations);
            tp_doc_td(d, "%s", tp_category_name(r->category));
            tp_doc_td_open(d);
            if (r->n_layer_ops)
                tp_doc_code(d, e->trace->ops[r->layer_ops[0]].layer);
            else
                tp_doc_txt(d, "-");
            if (r->n_layer_ops > 1) tp_doc_txt(d, " … (+%d more)", r->n_layer_ops - 1);
            tp_doc_td_close(d);
            tp_doc_td_code(d, r->name);
            tp_doc_tr_close(d);
        }
        tp_doc_table_close(d);
    }
}

static void sec_roofline(tp_doc *d, const model *m) {
    tp_doc_heading(d, 2, "roofline", "Roofline");
    const tp_trace *rt = NULL;
    for (int i = 0; i < m->n && !rt; i++)
        if (m->e[i].prof->has_roofline) rt = m->e[i].trace;
    if (!rt) {
        tp_doc_para(d, "The traces carry no measured rates (recorded before tprof measured them): no roofline.");
        return;
    }
    tp_doc_para_open(d);
    tp_doc_txt(d, "Each op's floor is max(matmul FLOP / the dense GEMM rate of its precision, bytes / the copy rate), "
                  "the fewest bytes it can move at its storage types; the rates measured on this GPU before the "
                  "engines ran: GEMM");
    for (int p = 0; p < TP_PREC_COUNT; p++)
        if (rt->rates.peak_tflops[p] > 0) tp_doc_txt(d, " %s %.0f", pname((tp_precision)p), rt->rates.peak_tflops[p]);
    tp_doc_txt(d, " TFLOP/s (8192³, cuBLASLt, sustained), copy %.0f GB/s (read + write). The floor of a pass is the "
                  "sum over its ops; attainment is floor / time, above 100%% where an op beats the model (its "
                  "input still in L2).", rt->rates.copy_gbps);
    tp_doc_para_close(d);
    tp_doc_table_open(d, "lrrrrrr", "Precision", "Median (ms)", "Floor (ms)", "Compute-bound (ms)", "Memory-bound (ms)",
                      "Median / floor", "Traced attainment (%)", NULL);
    for (int i = 0; i < m->n; i++) {
        const tp_compare_entry *e = &m->e[i];
        const tp_profile_summary *s = e->prof;
        tp_doc_tr_open(d);
        tp_doc_td(d, "%s", pname(e->prec));
        tp_doc_td(d, "%.3f", e->median_ms);
        if (!s->has_roofline) {
            for (int k = 0; k < 5; k++) tp_doc_td(d, "n/a");
        } else {
            tp_doc_td(d, "%.3f%s", s->floor.ns * 1e-6, s->floor.known ? "" : " (partial)");
            tp_doc_td(d, "%.3f", s->floor.compute_ns * 1e-6);
            tp_doc_td(d, "%.3f", s->floor.memory_ns * 1e-6);
            tp_doc_td_ratio(d, e->median_ms, s->floor.ns * 1e-6);
            tp_doc_td(d, "%.1f", s->attributed_ns_per_iter > 0 ? 100 * s->floor.ns / s->attributed_ns_per_iter : 0);
        }
        tp_doc_tr_close(d);
    }
    tp_doc_table_close(d);
    gap_row *gr = malloc(sizeof *gr * (size_t)(rt->n_ops ? rt->n_ops : 1));
    for (int i = 0; i < m->n && gr; i++) {
        const tp_compare_entry *e = &m->e[i];
        const tp_profile_summary *s = e->prof;
        char id[64];
        if (!s->has_roofline || s->n_layers > rt->n_ops) continue;
        snprintf(id, sizeof id, "roofline-%s-%d", pname(e->prec), i);
        tp_doc_heading(d, 3, id, "%s by op kind, and the layers furthest above their floor", pname(e->prec));
        tp_compare_kind_table(d, s, 3);
        const int n = roofline_gaps(e, gr), rows = n < TOP_GAPS ? n : TOP_GAPS;
        tp_doc_table_open(d, "lllrrrrr", "Layer", "Op", "Bound", "Ops", "Time (ms)", "Floor (ms)", "Above floor (ms)",
                          "Attainment (%)", NULL);
        for (int k = 0; k < rows; k++) {
            const gap_row *g = &gr[k];
            tp_doc_tr_open(d);
            tp_doc_td_code(d, g->name);
            tp_doc_td(d, "%s", tp_op_kind_name(g->kind));
            tp_doc_td(d, "%s", g->compute_ns * 2 > g->floor_ns ? "compute" : g->floor_ns > 0 ? "memory" : "-");
            tp_doc_td(d, "%d", g->ops);
            tp_doc_td(d, "%.3f", g->ns * 1e-6);
            tp_doc_td(d, "%.3f", g->floor_ns * 1e-6);
            tp_doc_td(d, "%.3f", (g->ns - g->floor_ns) * 1e-6);
            tp_doc_td(d, "%.1f", 100 * g->floor_ns / g->ns);
            tp_doc_tr_close(d);
        }
        tp_doc_table_close(d);
    }
    free(gr);
}

static void sec_coverage(tp_doc *d, const model *m) {
    char buf[64], id[64];
    tp_doc_heading(d, 2, "coverage", "Coverage");
    tp_doc_para(
        d, "Which ops ran in which precision, and why (from the plan's note on each op): native: the op runs in "
           "that precision with its own kernel; emulated: computed in a wider format and rounded to the target; kept "
           "high by policy: the planner kept it in a higher precision on purpose. Kernel: the kernel of the op's call "
           "in the executed program, or the call it is fused into (traces recorded before the program show -).");
    /* one column per precision that some engine runs ops in */
    int used[TP_PREC_COUNT] = {0}, n_used = 0;
    for (int i = 0; i < m->n; i++)
        for (int p = 0; p < TP_PREC_COUNT; p++) used[p] |= m->cov[i].by_prec[p] > 0;
    char colname[TP_PREC_COUNT][32], align[TP_PREC_COUNT + 8];
    const char *hdr[TP_PREC_COUNT + 8];
    int nh = 0;
    hdr[nh++] = "Engine";
    hdr[nh++] = "Ops";
    for (int p = 0; p < TP_PREC_COUNT; p++)
        if (used[p]) {
            snprintf(colname[n_used], sizeof colname[0], "in %s", pname((tp_precision)p));
            hdr[nh++] = colname[n_used++];
        }
    hdr[nh++] = "native";
    hdr[nh++] = "emulated";
    hdr[nh++] = "kept by policy";
    hdr[nh++] = "Time in own precision";
    hdr[nh] = NULL;
    align[0] = 'l';
    for (int k = 1; k < nh; k++) align[k] = 'r';
    align[nh] = 0;
    tp_doc_table_openv(d, align, hdr);
    for (int i = 0; i < m->n; i++) {
        const coverage *cv = &m->cov[i];
        double t = m->e[i].prof->kernel_ns_per_iter * 1e-6;
        tp_doc_tr_open(d);
        tp_doc_td(d, "%s", pname(m->e[i].prec));
        tp_doc_td(d, "%d", m->e[i].trace->n_ops);
        for (int p = 0; p < TP_PREC_COUNT; p++)
            if (used[p]) tp_doc_td(d, "%d", cv->by_prec[p]);
        tp_doc_td(d, "%d", cv->cls[COV_NATIVE]);
        if (m->e[i].emulated_ops != cv->cls[COV_EMULATED])
            tp_doc_td(d, "%d (engine: %d)", cv->cls[COV_EMULATED], m->e[i].emulated_ops);
        else
            tp_doc_td(d, "%d", cv->cls[COV_EMULATED]);
        tp_doc_td(d, "%d", cv->cls[COV_POLICY]);
        tp_doc_td(d, "%.3f ms (%.1f %%)", cv->own_ms, t > 0 ? 100 * cv->own_ms / t : 0);
        tp_doc_tr_close(d);
    }
    tp_doc_table_close(d);
    for (int i = 0; i < m->n; i++) {
        const coverage *cv = &m->cov[i];
        double t = m->e[i].prof->kernel_ns_per_iter * 1e-6;
        snprintf(id, sizeof id, "coverage-%s-%d", pname(m->e[i].prec), i);
        tp_doc_heading(d, 3, id, "Ops of the %s engine", pname(m->e[i].prec));
        tp_doc_table_open(d, "lrlllrrll", "Op", "Ops", "Ran in", "Why", "Kernel", "ms per pass", "%", "Layers",
                          "Plan note", NULL);
        for (int k = 0; k < cv->n_groups; k++) {
            const cov_group *g = &cv->g[k];
            tp_doc_tr_open(d);
            tp_doc_td(d, "%s", tp_op_kind_name(g->kind));
            tp_doc_td(d, "%d", g->ops);
            tp_doc_td(d, "%s", pname(g->prec));
            tp_doc_td(d, "%s", cov_class_text(g->cls, g->prec, buf, sizeof buf));
            tp_doc_td(d, "%s", g->kernel);
            tp_doc_td(d, "%.3f", g->ms);
            tp_doc_td(d, "%.1f", t > 0 ? 100 * g->ms / t : 0);
            tp_doc_td_open(d);
            tp_doc_code(d, g->same_pattern ? g->layers : m->e[i].trace->ops[g->first_op].layer);
            if (!g->same_pattern) tp_doc_txt(d, " … (+%d more)", g->ops - 1);
            tp_doc_td_close(d);
            tp_doc_td(d, "%s", g->how);
            tp_doc_tr_close(d);
        }
        tp_doc_table_close(d);
    }
}

/* Cosine or relative L2 in a table cell; NaN (a non-finite output) says so. */
static void td_metric(tp_doc *d, const char *fmt, double v) {
    if (isnan(v))
        tp_doc_td(d, "n/a (non-finite)");
    else
        tp_doc_td(d, fmt, v);
}

static int any_attn_cost(const model *m) {
    for (int i = 0; i < m->n; i++)
        if (m->e[i].n_attn_cost > 0) return 1;
    return 0;
}

/* Per engine that runs attention in FP8: each such layer's output against FP16/BF16 attention on the same input,
 * the worst layer named; nothing when no engine does. */
static void sec_fp8_attention(tp_doc *d, const model *m) {
    char id[64];
    if (!any_attn_cost(m)) return;
    tp_doc_heading(d, 2, "fp8-attention", "FP8 attention accuracy");
    tp_doc_para_open(d);
    tp_doc_txt(d, "For every engine that runs attention in FP8 (e.g. ");
    tp_doc_code(d, "--policy 'blocks.*.attn=fp8'");
    tp_doc_txt(d, "): each FP8 attention op's output (E4M3 outputs dequantized with their scale) against the "
                  "FP16/BF16 flash attention kernel on the same input, the engine's own input to that layer, so each "
                  "row is that layer's accuracy cost alone: cosine similarity and relative L2 error (‖y_fp8 − "
                  "y_ref‖₂ / ‖y_ref‖₂). Engines without FP8 attention are not listed.");
    tp_doc_para_close(d);
    for (int i = 0; i < m->n; i++) {
        const tp_compare_entry *e = &m->e[i];
        if (e->n_attn_cost < 1) continue;
        const int w = tp_compare_attn_worst(e->attn_cost, e->n_attn_cost);
        const tp_attn_cost *a = &e->attn_cost[w];
        snprintf(id, sizeof id, "fp8-attention-%s-%d", pname(e->prec), i);
        tp_doc_heading(d, 3, id, "%s engine: %d attention op%s in FP8", pname(e->prec), e->n_attn_cost,
                       e->n_attn_cost == 1 ? "" : "s");
        tp_doc_para_open(d);
        tp_doc_txt(d, "Worst layer: ");
        tp_doc_code(d, e->trace->ops[a->op].layer);
        if (isnan(a->cosine))
            tp_doc_txt(d, ", non-finite output against %s attention.", pname(a->ref));
        else
            tp_doc_txt(d, ", cosine %.6f, relative L2 %.4g against %s attention.", a->cosine, a->rel_l2,
                       pname(a->ref));
        tp_doc_para_close(d);
        tp_doc_table_open(d, "llrr", "Layer", "Reference", "Cosine vs. reference", "Rel. L2", NULL);
        for (int k = 0; k < e->n_attn_cost; k++) {
            const tp_attn_cost *r = &e->attn_cost[k];
            tp_doc_tr_open(d);
            tp_doc_td_open(d);
            tp_doc_code(d, e->trace->ops[r->op].layer);
            if (k == w) tp_doc_txt(d, " (worst)");
            tp_doc_td_close(d);
            tp_doc_td(d, "%s attention", pname(r->ref));
            td_metric(d, "%.6f", r->cosine);
            td_metric(d, "%.3e", r->rel_l2);
            tp_doc_tr_close(d);
        }
        tp_doc_table_close(d);
    }
}

/* What a category's gap is made of, in words: new kernels; ops that kept their precision (and whether their
 * plan changed, for at least half of the category's time); or the changed ops, which either got slower than
 * in the baseline, sped up by less than r, or by more. */
static const char *gap_label(const model *m, int i, int c, char *buf, size_t n) {
    const pair *p = &m->pr[i];
    double base = m->e[m->base].prof->cat_ns_per_iter[c] * 1e-6, act = m->e[i].prof->cat_ns_per_iter[c] * 1e-6;
    const char *cn = tp_category_name((tp_category)c), *bp = pname(m->e[m->base].prec);
    if (base <= 0 && act <= 0)
        snprintf(buf, n, "none");
    else if (base <= 0)
        snprintf(buf, n, "new %s kernels", cn);
    else if (p->chg_b[c] < TH_UNCHANGED_FRAC * base)
        snprintf(buf, n, "%s unchanged in precision%s", cn, p->noted_b[c] >= 0.5 * base ? ", plan changed" : "");
    else if (p->chg_e[c] > p->chg_b[c])
        snprintf(buf, n, "%s of the changed ops: slower than in %s", cn, bp);
    else
        snprintf(buf, n, "%s of the changed ops: %s r", cn, p->am.gap_ms[c] >= 0 ? "short of" : "beyond");
    return buf;
}

/* Dense tensor-core rate of a format over FP16/BF16 on NVIDIA B200, from its datasheet (dense figures: FP4 9,
 * FP8 4.5, FP16/BF16 2.25 PFLOPS). A projection, labelled as one: no Blackwell GPU measured it here. */
static double blackwell_ratio(tp_precision p) {
    return tp_precision_info(p)->b200_ratio;
}

/* For every entry with emulated ops: what native Blackwell execution would change, from this run's numbers. */
static void blackwell_note(tp_doc *d, const model *m) {
    const tp_compare_entry *b = &m->e[m->base];
    int any = 0;
    for (int i = 0; i < m->n; i++) any |= m->e[i].emulated_ops > 0 && i != m->base;
    if (!any) return;
    tp_doc_heading(d, 3, "native-blackwell", "What native Blackwell execution would change");
    for (int i = 0; i < m->n; i++) {
        const tp_compare_entry *e = &m->e[i];
        double r = blackwell_ratio(e->prec);
        if (i == m->base || e->emulated_ops <= 0 || r <= 0 || e->prof->n_layers != b->prof->n_layers) continue;
        double f_ns = 0, emu_ns = 0;
        int n = 0;
        for (int k = 0; k < e->prof->n_layers; k++)
            if (e->prof->layers[k].prec == e->prec) {
                f_ns += b->prof->layers[k].ns_per_iter;
                emu_ns += e->prof->layers[k].ns_per_iter;
                n++;
            }
        const double base_ns = b->prof->kernel_ns_per_iter;
        const double f = base_ns > 0 ? f_ns / base_ns : 0, bound = 1.0 / ((1 - f) + f / r);
        const double q_ms = e->prof->cat_ns_per_iter[TP_CAT_QUANT] * 1e-6;
        tp_doc_para(d,
                    "%s: its %d ops ran emulated here (%.3f ms per pass, of which %.3f ms are quantize-dequantize "
                    "kernels a native path does not have). On Blackwell (sm_100, sm_103, sm_110, sm_120, sm_121) they "
                    "run as native block-scaled GEMMs at %.0fx the %s rate (B200 datasheet, dense; a projection, not "
                    "measured here). Those ops hold %.1f %% of %s's traced time on this GPU, so with everything else "
                    "unchanged the Amdahl bound is %.3fx over %s (at most %.3fx for infinitely fast GEMMs); the "
                    "emulation measured %.3fx.",
                    pname(e->prec), n, emu_ns * 1e-6, q_ms, r, pname(b->prec), 100 * f, pname(b->prec), bound,
                    pname(b->prec), f < 1 ? 1 / (1 - f) : INFINITY, e->median_ms > 0 ? b->median_ms / e->median_ms : 0);
    }
}

static void sec_amdahl(tp_doc *d, const model *m) {
    const tp_compare_entry *b = &m->e[m->base];
    const char *bp = pname(b->prec);
    char buf[96], id[64];
    tp_doc_heading(d, 2, "theoretical-vs-actual-speedup", "Theoretical vs. actual speedup");
    tp_doc_para(
        d,
        "f is the share of %s's traced kernel time in the ops whose executed precision changed; r is the ratio of "
        "the peak dense GEMM rates measured on this GPU; the Amdahl bound 1/((1 − f) + f/r) is the speedup if those "
        "ops sped up by r and nothing else changed. Ideal: %s's traced time with the changed ops divided by r. The "
        "measured speedup is the ratio of the event-timed medians, the traced one that of the traced kernel times; "
        "the gap (traced − ideal) is split by category below.",
        bp, bp);
    chart(d, m, "speedup.svg", "Measured speedup against the Amdahl bound", 1);
    tp_doc_table_open(d, "lrrrrrrrrrr", "Precision", "Changed ops", "f", "r", "Amdahl bound", "Bound at r = ∞",
                      "Measured speedup", "Traced speedup", "Ideal (ms)", "Traced (ms)", "Gap (ms)", NULL);
    for (int i = 0; i < m->n; i++) {
        if (i == m->base) continue;
        const pair *p = &m->pr[i];
        const tp_compare_entry *e = &m->e[i];
        tp_doc_tr_open(d);
        tp_doc_td(d, "%s", pname(e->prec));
        if (!p->have) {
            tp_doc_td(d, "n/a: %s", p->why);
            for (int k = 0; k < 4; k++) tp_doc_td(d, "n/a");
            tp_doc_td_ratio(d, b->median_ms, e->median_ms);
            tp_doc_td_ratio(d, b->prof->kernel_ns_per_iter, e->prof->kernel_ns_per_iter);
            for (int k = 0; k < 3; k++) tp_doc_td(d, "n/a");
        } else {
            tp_doc_td(d, "%d", p->am.n_changed);
            tp_doc_td(d, "%.1f %%", 100 * p->am.f);
            tp_doc_td(d, "%.3f", p->am.r);
            tp_doc_td(d, "%.3f×", p->am.bound);
            tp_doc_td_ratio(d, 1, 1 - p->am.f);
            tp_doc_td_ratio(d, b->median_ms, e->median_ms);
            tp_doc_td_ratio(d, b->prof->kernel_ns_per_iter, e->prof->kernel_ns_per_iter);
            tp_doc_td(d, "%.3f", p->am.ideal_ms);
            tp_doc_td(d, "%.3f", p->am.actual_ms);
            tp_doc_td(d, "%+.3f", p->am.actual_ms - p->am.ideal_ms);
        }
        tp_doc_tr_close(d);
    }
    tp_doc_table_close(d);
    for (int i = 0; i < m->n; i++) {
        const pair *p = &m->pr[i];
        if (i == m->base || !p->have) continue;
        const tp_compare_entry *e = &m->e[i];
        const char *ep = pname(e->prec);
        snprintf(id, sizeof id, "gap-%s-%d", ep, i);
        tp_doc_heading(d, 3, id, "%s against %s: where the gap goes", ep, bp);
        char h1[32], h2[48], h3[32];
        snprintf(h1, sizeof h1, "%s (ms)", bp);
        snprintf(h2, sizeof h2, "of which changed ops");
        snprintf(h3, sizeof h3, "%s (ms)", ep);
        tp_doc_table_open(d, "lrrrrrl", "Category", h1, h2, "Ideal (ms)", h3, "Gap (ms)", "Attribution", NULL);
        double tb = 0, tc = 0, ti = 0, te = 0;
        for (int c = 0; c < TP_CAT_COUNT; c++) {
            double base = b->prof->cat_ns_per_iter[c] * 1e-6, act = e->prof->cat_ns_per_iter[c] * 1e-6;
            if (base <= 0 && act <= 0) continue;
            double ideal = act - p->am.gap_ms[c];
            tb += base, tc += p->chg_b[c], ti += ideal, te += act;
            tp_doc_tr_open(d);
            tp_doc_td(d, "%s", tp_category_name((tp_category)c));
            tp_doc_td(d, "%.3f", base), tp_doc_td(d, "%.3f", p->chg_b[c]), tp_doc_td(d, "%.3f", ideal),
                tp_doc_td(d, "%.3f", act);
            tp_doc_td(d, "%+.3f", p->am.gap_ms[c]);
            tp_doc_td(d, "%s", gap_label(m, i, c, buf, sizeof buf));
            tp_doc_tr_close(d);
        }
        tp_doc_tr_open(d);
        tp_doc_td(d, "total"), tp_doc_td(d, "%.3f", tb), tp_doc_td(d, "%.3f", tc), tp_doc_td(d, "%.3f", ti),
            tp_doc_td(d, "%.3f", te);
        tp_doc_td(d, "%+.3f", p->am.actual_ms - p->am.ideal_ms), tp_doc_td(d, "traced − ideal");
        tp_doc_tr_close(d);
        tp_doc_table_close(d);
        /* The gap in one sentence, largest contributions first. */
        int ord[TP_CAT_COUNT], k = 0;
        for (int c = 0; c < TP_CAT_COUNT; c++)
            if (b->prof->cat_ns[c] || e->prof->cat_ns[c]) ord[k++] = c;
        double mag[TP_CAT_COUNT];
        for (int c = 0; c < TP_CAT_COUNT; c++) mag[c] = fabs(p->am.gap_ms[c]);
        sort_desc(ord, k, mag);
        tp_doc_para_open(d);
        double over = p->am.actual_ms - p->am.ideal_ms;
        tp_doc_txt(d, "%s is %.3f ms per pass %s than ideal (traced %.3f ms, ideal %.3f ms): ", ep, fabs(over),
                   over >= 0 ? "slower" : "faster", p->am.actual_ms, p->am.ideal_ms);
        for (int j = 0; j < k; j++)
            tp_doc_txt(d, "%s%s: %+.3f ms", j ? "; " : "", gap_label(m, i, ord[j], buf, sizeof buf),
                       p->am.gap_ms[ord[j]]);
        tp_doc_txt(d, ".");
        tp_doc_para_close(d);
    }
    blackwell_note(d, m);
}

static void sec_recos(tp_doc *d, const model *m) {
    tp_doc_heading(d, 2, "recommendations", "Recommendations");
    tp_doc_para(d,
                "Derived from the numbers above; each cites the number it rests on, and appears only when that number "
                "clears its rule's threshold (src/report/compare.c).");
    if (!m->n_rec) {
        tp_doc_para(d, "None: no rule's threshold was met.");
        return;
    }
    tp_doc_list_open(d);
    for (int k = 0; k < m->n_rec; k++) tp_doc_li_open(d), tp_doc_txt(d, "%s", m->rec[k].text), tp_doc_li_close(d);
    tp_doc_list_close(d);
}

static const char *OWN_FILES[] = {"report.md", "report.json", "report.html", "breakdown.svg", "speedup.svg"};
#define N_OWN ((int)(sizeof OWN_FILES / sizeof OWN_FILES[0]))

static void sec_artifacts(tp_doc *d, const model *m) {
    tp_doc_heading(d, 2, "artifacts", "Artifacts");
    tp_doc_list_open(d);
    for (int k = 0; k < N_OWN; k++) tp_doc_li_open(d), tp_doc_code(d, OWN_FILES[k]), tp_doc_li_close(d);
    for (int k = 0; k < m->cfg->n_artifacts && k < 32; k++)
        if (m->cfg->artifacts[k]) tp_doc_li_open(d), tp_doc_code(d, m->cfg->artifacts[k]), tp_doc_li_close(d);
    tp_doc_list_close(d);
}

static void write_doc(tp_doc *d, const model *m) {
    const tp_compare_config *c = m->cfg;
    char title[384];
    snprintf(title, sizeof title, "tprof compare: %s, batch %d, %s", c->model ? c->model : "model", c->batch,
             c->gpu ? c->gpu : "unknown GPU");
    if (d->html) {
        fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", d->f);
        tp_doc_put(d, title);
        fprintf(d->f, "</title>\n<style>%s</style>\n</head>\n<body>\n", tp_doc_css());
    }
    tp_doc_heading(d, 1, "top", "%s", title);
    tp_doc_para_open(d);
    tp_doc_txt(d, "Precisions ");
    for (int i = 0; i < m->n; i++) tp_doc_txt(d, "%s%s", i ? ", " : "", pname(m->e[i].prec));
    tp_doc_txt(d, " of the same model, batch, weights and inputs; baseline %s. Generated by tprof %s.",
               pname(m->e[m->base].prec), TPROF_VERSION);
    tp_doc_para_close(d);
    sec_summary(d, m);
    sec_config(d, m);
    sec_breakdown(d, m);
    sec_roofline(d, m);
    sec_coverage(d, m);
    sec_fp8_attention(d, m);
    tp_compare_decode_section(d, m->e, m->n);
    tp_compare_stages_section(d, m->e, m->n, m->base);
    tp_compare_sparse_section(d, m->cfg, m->e, m->n);
    sec_amdahl(d, m);
    sec_recos(d, m);
    sec_artifacts(d, m);
    if (d->html) fputs("</body>\n</html>\n", d->f);
}

/* ---- JSON -------------------------------------------------------------------------------------------------- */


int tp_unit_hz(const char *unit) { return unit && strcmp(unit, "observation") == 0; }
static json_t *jstr(const char *s) { return s ? json_string(s) : json_null(); }

static json_t *report_json(const model *m) {
    const tp_compare_config *c = m->cfg;
    const tp_compare_entry *b = &m->e[m->base];
    json_t *j = json_object(), *a, *o;
    char buf[96];
    json_object_set_new(j, "format", json_string("tprof-compare-1"));
    json_object_set_new(j, "tool", json_string("tprof " TPROF_VERSION));
    json_object_set_new(j, "model", jstr(c->model));
    json_object_set_new(j, "batch", json_integer(c->batch));
    json_object_set_new(j, "baseline", json_string(pname(b->prec)));

    json_t *peaks = json_object();
    for (int p = 0; p < TP_PREC_COUNT; p++)
        if (c->peak_tflops[p] > 0) json_object_set_new(peaks, pname((tp_precision)p), tp_json_num(c->peak_tflops[p]));
    json_object_set_new(j, "configuration",
                        json_pack("{s:o,s:o,s:o,s:o,s:o,s:i,s:o,s:b,s:s,s:s,s:i,s:o,s:o,s:o,s:o,s:o}", "gpu",
                                  jstr(c->gpu), "driver", jstr(c->driver), "cuda", jstr(c->cuda), "cublaslt",
                                  jstr(c->cublaslt), "warmup_ms", tp_json_num(c->warmup_ms), "iterations", c->iterations,
                                  "duration_s", tp_json_num(c->duration_s), "cuda_graph", c->cuda_graph, "data_transfers",
                                  "excluded", "timing", "GPU compute time per forward pass from CUDA events",
                                  "profiled_passes", b->trace->iterations, "peak_tflops", peaks, "peak_shape",
                                  jstr(c->peak_shape), "commit", jstr(c->commit), "date", jstr(c->date), "command",
                                  jstr(c->command)));
    a = json_array();
    for (int i = 0; i < m->n; i++) {
        const tp_compare_entry *e = &m->e[i];
        o = json_pack("{s:s,s:b,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "precision", pname(e->prec), "baseline",
                      i == m->base, "median_ms", tp_json_num(e->median_ms), "mean_ms", tp_json_num(e->mean_ms), "p99_ms",
                      tp_json_num(e->p99_ms), "cov", tp_json_num(e->cov), "qps", tp_json_num(e->qps), "images_per_s", tp_json_num(e->images_per_s),
                      "weight_bytes", tp_json_num(e->weight_bytes), "weight_ratio",
                      b->weight_bytes > 0 ? tp_json_num(e->weight_bytes / b->weight_bytes) : json_null(), "speedup",
                      b->median_ms > 0 && e->median_ms > 0 ? tp_json_num(b->median_ms / e->median_ms) : json_null(),
                      "traced_ms", tp_json_num(e->prof->kernel_ns_per_iter * 1e-6));
        if (tp_unit_hz(c->unit)) json_object_set_new(o, "hz", tp_json_num(e->images_per_s)); /* observations/s */
        json_object_set_new(o, "accuracy",
                            e->ref_images > 0
                                ? json_pack("{s:s,s:i,s:o,s:o,s:o,s:o}", "reference",
                                            c->reference ? c->reference : "FP32 CPU", "images",
                                            e->ref_images, "cosine", tp_json_num(e->cosine), "rel_l2", tp_json_num(e->rel_l2),
                                            "max_abs", tp_json_num(e->max_abs), "top1", tp_json_num(e->top1))
                                : json_null());
        json_array_append_new(a, o);
    }
    json_object_set_new(j, "summary", a);

    a = json_array();
    for (int i = 0; i < m->n; i++) {
        const tp_compare_entry *e = &m->e[i];
        const tp_profile_summary *s = e->prof;
        json_t *cats = json_array(), *ks = json_array();
        for (int k = 0; k < TP_CAT_COUNT; k++)
            json_array_append_new(cats, json_pack("{s:s,s:o,s:o}", "category", tp_category_name((tp_category)k), "ms",
                                                  tp_json_num(s->cat_ns_per_iter[k] * 1e-6), "percent", tp_json_num(s->cat_pct[k])));
        for (int k = 0; k < s->n_kernels && k < TOP_KERNELS; k++)
            json_array_append_new(ks, json_pack("{s:s,s:s,s:o,s:o,s:o}", "name", s->kernels[k].name, "category",
                                                tp_category_name(s->kernels[k].category), "ms",
                                                tp_json_num(per_pass_ms(s->kernels[k].total_ns, s->iterations)), "percent",
                                                tp_json_num(s->kernels[k].time_pct), "launches_per_pass",
                                                tp_json_num((double)s->kernels[k].instances / s->iterations)));
        json_array_append_new(a, json_pack("{s:s,s:o,s:o,s:o,s:o}", "precision", pname(e->prec), "traced_ms",
                                           tp_json_num(s->kernel_ns_per_iter * 1e-6), "event_median_ms", tp_json_num(e->median_ms),
                                           "categories", cats, "top_kernels", ks));
    }
    json_object_set_new(j, "breakdown", a);

    a = json_array();
    for (int i = 0; i < m->n; i++) {
        const coverage *cv = &m->cov[i];
        json_t *by = json_object(), *gs = json_array();
        for (int p = 0; p < TP_PREC_COUNT; p++)
            json_object_set_new(by, pname((tp_precision)p), json_integer(cv->by_prec[p]));
        for (int k = 0; k < cv->n_groups; k++) {
            const cov_group *g = &cv->g[k];
            json_array_append_new(
                gs, json_pack("{s:s,s:i,s:s,s:s,s:s,s:o,s:s,s:s,s:s}", "op", tp_op_kind_name(g->kind), "ops", g->ops,
                              "precision", pname(g->prec), "class",
                              g->cls == COV_POLICY     ? "policy"
                              : g->cls == COV_EMULATED ? "emulated"
                                                       : "native",
                              "why", cov_class_text(g->cls, g->prec, buf, sizeof buf), "ms", tp_json_num(g->ms), "layers",
                              g->same_pattern ? g->layers : m->e[i].trace->ops[g->first_op].layer, "how", g->how,
                              "kernel", g->kernel));
        }
        json_array_append_new(a, json_pack("{s:s,s:i,s:o,s:i,s:i,s:i,s:i,s:o,s:o}", "precision", pname(m->e[i].prec),
                                           "ops", m->e[i].trace->n_ops, "by_precision", by, "native",
                                           cv->cls[COV_NATIVE], "emulated", cv->cls[COV_EMULATED], "kept_by_policy",
                                           cv->cls[COV_POLICY], "engine_emulated_ops", m->e[i].emulated_ops,
                                           "own_precision_ms", tp_json_num(cv->own_ms), "groups", gs));
    }
    json_object_set_new(j, "coverage", a);

    if (any_attn_cost(m)) {
        a = json_array();
        for (int i = 0; i < m->n; i++) {
            const tp_compare_entry *e = &m->e[i];
            if (e->n_attn_cost < 1) continue;
            const int w = tp_compare_attn_worst(e->attn_cost, e->n_attn_cost);
            json_t *rows = json_array();
            for (int k = 0; k < e->n_attn_cost; k++) {
                const tp_attn_cost *r = &e->attn_cost[k];
                json_array_append_new(rows, json_pack("{s:s,s:i,s:s,s:o,s:o,s:b}", "layer", e->trace->ops[r->op].layer,
                                                      "op", r->op, "reference", pname(r->ref), "cosine",
                                                      tp_json_num(r->cosine), "rel_l2", tp_json_num(r->rel_l2), "worst", k == w));
            }
            const tp_attn_cost *x = &e->attn_cost[w];
            json_array_append_new(
                a, json_pack("{s:s,s:s,s:i,s:{s:s,s:i,s:s,s:o,s:o},s:o}", "precision", pname(e->prec), "measure",
                             "each FP8 attention op's output against FP16/BF16 flash attention on the same input",
                             "fp8_attention_ops", e->n_attn_cost, "worst", "layer", e->trace->ops[x->op].layer, "op",
                             x->op, "reference", pname(x->ref), "cosine", tp_json_num(x->cosine), "rel_l2", tp_json_num(x->rel_l2),
                             "layers", rows));
        }
        json_object_set_new(j, "fp8_attention_cost", a);
    }

    a = json_array();
    for (int i = 0; i < m->n; i++) {
        if (i == m->base) continue;
        const pair *p = &m->pr[i];
        const tp_compare_entry *e = &m->e[i];
        o = json_pack("{s:s,s:b}", "precision", pname(e->prec), "available", p->have);
        if (!p->have) {
            json_object_set_new(o, "reason", json_string(p->why));
            json_array_append_new(a, o);
            continue;
        }
        json_t *gaps = json_array();
        for (int c2 = 0; c2 < TP_CAT_COUNT; c2++) {
            double act = e->prof->cat_ns_per_iter[c2] * 1e-6;
            json_array_append_new(
                gaps, json_pack("{s:s,s:o,s:o,s:o,s:o,s:o,s:s}", "category", tp_category_name((tp_category)c2),
                                "baseline_ms", tp_json_num(b->prof->cat_ns_per_iter[c2] * 1e-6), "changed_baseline_ms",
                                tp_json_num(p->chg_b[c2]), "ideal_ms", tp_json_num(act - p->am.gap_ms[c2]), "actual_ms", tp_json_num(act),
                                "gap_ms", tp_json_num(p->am.gap_ms[c2]), "label", gap_label(m, i, c2, buf, sizeof buf)));
        }
        json_object_update_new(o, json_pack("{s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "n_changed",
                                            p->am.n_changed, "f", tp_json_num(p->am.f), "r", tp_json_num(p->am.r), "bound",
                                            tp_json_num(p->am.bound), "bound_infinite_rate",
                                            p->am.f < 1 ? tp_json_num(1 / (1 - p->am.f)) : json_null(), "measured",
                                            p->am.measured > 0 ? tp_json_num(p->am.measured) : json_null(), "traced_speedup",
                                            tp_json_num(b->prof->kernel_ns_per_iter / e->prof->kernel_ns_per_iter), "ideal_ms",
                                            tp_json_num(p->am.ideal_ms), "actual_ms", tp_json_num(p->am.actual_ms), "gap_total_ms",
                                            tp_json_num(p->am.actual_ms - p->am.ideal_ms), "gaps", gaps));
        json_array_append_new(a, o);
    }
    json_object_set_new(j, "amdahl", a);

    a = json_array();
    gap_row *gr = malloc(sizeof *gr * (size_t)(b->trace->n_ops ? b->trace->n_ops : 1));
    for (int i = 0; i < m->n && gr; i++) {
        const tp_compare_entry *e = &m->e[i];
        const tp_profile_summary *s = e->prof;
        if (!s->has_roofline || s->n_layers > b->trace->n_ops) continue;
        json_t *tg = json_array();
        const int n = roofline_gaps(e, gr), rows = n < TOP_GAPS ? n : TOP_GAPS;
        for (int k = 0; k < rows; k++)
            json_array_append_new(tg, json_pack("{s:s,s:s,s:i,s:o,s:o,s:o}", "layer", gr[k].name, "op",
                                                tp_op_kind_name(gr[k].kind), "ops", gr[k].ops, "time_ms",
                                                tp_json_num(gr[k].ns * 1e-6), "floor_ms", tp_json_num(gr[k].floor_ns * 1e-6),
                                                "above_floor_ms", tp_json_num((gr[k].ns - gr[k].floor_ns) * 1e-6)));
        const double fl = s->floor.ns * 1e-6;
        json_array_append_new(a, json_pack("{s:s,s:o,s:o,s:o,s:o,s:b,s:o,s:o}", "precision", pname(e->prec),
                                           "median_ms", tp_json_num(e->median_ms), "floor_ms", tp_json_num(fl), "compute_bound_ms",
                                           tp_json_num(s->floor.compute_ns * 1e-6), "memory_bound_ms",
                                           tp_json_num(s->floor.memory_ns * 1e-6), "floor_known", s->floor.known,
                                           "median_over_floor", fl > 0 ? tp_json_num(e->median_ms / fl) : json_null(),
                                           "top_gaps", tg));
    }
    free(gr);
    json_object_set_new(j, "roofline", a);
    if (tp_compare_has_decode(m->e, m->n)) json_object_set_new(j, "decode", tp_compare_decode_json(m->e, m->n));
    if (tp_compare_has_stages(m->e, m->n)) json_object_set_new(j, "stages", tp_compare_stages_json(m->e, m->n, m->base));
    for (int i = 0; i < m->n; i++)
        if (m->e[i].n_drift > 0) {
            json_object_set_new(j, "stage_drift", tp_compare_drift_json(m->e, m->n));
            break;
        }
    if (m->cfg->sparse_layers) json_object_set_new(j, "sparsity", tp_compare_sparse_json(m->cfg, m->e, m->n));

    a = json_array();
    for (int k = 0; k < m->n_rec; k++) {
        const reco *r = &m->rec[k];
        json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:{s:s,s:o,s:o}}", "rule", r->rule, "precision",
                                           pname(m->e[r->entry].prec), "text", r->text, "basis", "metric", r->metric,
                                           "value", tp_json_num(r->value), "threshold", tp_json_num(r->threshold)));
    }
    json_object_set_new(j, "recommendations", a);

    a = json_array();
    for (int k = 0; k < N_OWN; k++) json_array_append_new(a, json_string(OWN_FILES[k]));
    for (int k = 0; k < c->n_artifacts && k < 32; k++)
        if (c->artifacts[k]) json_array_append_new(a, json_string(c->artifacts[k]));
    json_object_set_new(j, "artifacts", a);

    a = json_array();
    for (int i = 0; i < m->n; i++) json_array_append_new(a, tp_profile_summary_json(m->e[i].trace, m->e[i].prof));
    json_object_set_new(j, "profiles", a);
    return j;
}

/* ---- files ------------------------------------------------------------------------------------------------- */

/* Each file through a temporary file renamed into place (core/files.h): a failed run leaves the folder's older
 * report files whole. */
static tp_status open_out(const char *dir, const char *name, char *path, size_t n, tp_outfile *o, tp_error *err) {
    snprintf(path, n, "%s/%s", dir, name);
    return tp_outfile_open(o, path, "the report", err);
}

static tp_status close_out(tp_outfile *o, int bad, const char *path, tp_error *err) {
    if (bad) {
        tp_outfile_abort(o);
        return tp_fail(err, TP_ERR_IO, "%s: write failed (disk full?)", path);
    }
    return tp_outfile_commit(o, err);
}

static tp_status write_files(const model *m, const char *dir, tp_error *err) {
    char path[4096];
    tp_outfile o;
    tp_status st;
    for (int k = 0; k < 2; k++) {
        if ((st = open_out(dir, k ? "speedup.svg" : "breakdown.svg", path, sizeof path, &o, err))) return st;
        int bad = k ? tp_compare_svg_speedup(o.f, m->e, m->am, m->n, m->base) : tp_compare_svg_breakdown(o.f, m->e, m->n);
        if ((st = close_out(&o, bad, path, err))) return st;
    }
    for (int k = 0; k < 2; k++) {
        if ((st = open_out(dir, k ? "report.html" : "report.md", path, sizeof path, &o, err))) return st;
        tp_doc d = {.f = o.f, .html = k};
        write_doc(&d, m);
        if ((st = close_out(&o, 0, path, err))) return st;
    }
    json_t *j = report_json(m);
    if (!j) return tp_fail(err, TP_ERR_OOM, "compare: out of host memory building report.json");
    snprintf(path, sizeof path, "%s/report.json", dir);
    st = tp_json_write_file(j, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER, "the report", err);
    json_decref(j);
    return st;
}

tp_status tp_compare_write(const tp_compare_config *cfg, const tp_compare_entry *entries, int n, int baseline,
                           const char *out_dir, tp_error *err) {
    if (!cfg || !entries || !out_dir || n < 1 || baseline < 0 || baseline >= n)
        return tp_fail(err, TP_ERR_ARG, "compare: %d entries with baseline %d (need at least one, baseline among them)",
                       n, baseline);
    for (int i = 0; i < n; i++) {
        tp_status st = i == baseline ? check_entry(&entries[i], err) : same_graph(&entries[baseline], &entries[i], err);
        if (st) return st;
        if ((unsigned)entries[i].prec >= TP_PREC_COUNT)
            return tp_fail(err, TP_ERR_ARG, "compare: entry %d has no valid precision", i);
        if ((st = check_attn_cost(&entries[i], err))) return st;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        return tp_fail(err, TP_ERR_IO, "%s: cannot create the report directory: %s", out_dir, strerror(errno));
    struct stat sb;
    if (stat(out_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return tp_fail(err, TP_ERR_IO, "%s: not a directory", out_dir);
    model m = {.cfg = cfg, .e = entries, .n = n, .base = baseline};
    tp_status st = model_build(&m, err);
    if (!st) st = write_files(&m, out_dir, err);
    model_free(&m);
    return st;
}
