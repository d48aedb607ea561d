/* analysis.c: profile tables, summary JSON and the Chrome trace, from a tp_trace alone.
 *
 * Sums are kept in integer nanoseconds so that the category totals and the layer rows add up to the busy total,
 * and the kernel rows to the summed durations, exactly; only per-iteration means and percentages are floating
 * point. Busy time, not summed durations, is what categories and layers split: with programmatic dependent launch
 * a kernel starts before its predecessor ends and waits inside its own duration, and summing durations would
 * count that wait as work (tp_trace_busy_ns). */
#include "profile/analysis.h"

#include "core/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t dur_ns(const tp_trace_record *r) { return r->end_ns - r->start_ns; }

/* record indices by start time, then trace order (qsort_r is not C11: a file-scope pointer would be a global) */
typedef struct {
    uint64_t start;
    int i;
} start_key;

static int cmp_start(const void *a, const void *b) {
    const start_key *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

uint64_t tp_trace_busy_ns(const tp_trace *t, uint64_t *busy) {
    start_key *k = malloc(sizeof *k * (size_t)(t->n ? t->n : 1));
    if (!k) return UINT64_MAX;
    int m = 0;
    for (int i = 0; i < t->n; i++) {
        busy[i] = 0;
        if (t->rec[i].iteration >= 0) k[m++] = (start_key){t->rec[i].start_ns, i};
    }
    qsort(k, (size_t)m, sizeof *k, cmp_start);
    uint64_t covered = 0, total = 0; /* the furthest end so far */
    for (int j = 0; j < m; j++) {
        const tp_trace_record *r = &t->rec[k[j].i];
        const uint64_t from = r->start_ns > covered ? r->start_ns : covered;
        busy[k[j].i] = r->end_ns > from ? r->end_ns - from : 0;
        total += busy[k[j].i];
        if (r->end_ns > covered) covered = r->end_ns;
    }
    free(k);
    return total;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Groups records by (name, category); ties by address keep trace order inside a group, so a group's first
 * element is its first record. */
static int cmp_rec_key(const void *a, const void *b) {
    const tp_trace_record *x = *(const tp_trace_record *const *)a, *y = *(const tp_trace_record *const *)b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if (x->category != y->category) return x->category < y->category ? -1 : 1;
    return (x > y) - (x < y);
}

static int same_key(const tp_trace_record *x, const tp_trace_record *y) {
    return x->category == y->category && strcmp(x->name, y->name) == 0;
}

/* Total time descending; name and category break ties so the order is deterministic across runs. */
static int cmp_row(const void *a, const void *b) {
    const tp_kernel_row *x = a, *y = b;
    if (x->total_ns != y->total_ns) return x->total_ns > y->total_ns ? -1 : 1;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return (x->category > y->category) - (x->category < y->category);
}

void tp_profile_summary_free(tp_profile_summary *s) {
    for (int i = 0; i < s->n_kernels; i++) {
        free(s->kernels[i].name);
        free(s->kernels[i].layer_ops);
    }
    free(s->kernels);
    for (int i = 0; i < s->n_layers; i++) free(s->layers[i].kernels);
    free(s->layers);
    free(s->iter_ns);
    free(s->iter_span_ns);
    free(s->iter_cat_ns);
    memset(s, 0, sizeof *s);
}

static tp_status check_records(const tp_trace *t, tp_error *err) {
    if (t->iterations < 1) return tp_fail(err, TP_ERR_ARG, "the trace has no profiled iteration");
    for (int i = 0; i < t->n; i++) {
        const tp_trace_record *r = &t->rec[i];
        const char *bad = r->iteration < -1 || r->iteration >= t->iterations ? "iteration"
                          : r->op < -1 || r->op >= t->n_ops                   ? "op"
                          : (unsigned)r->category >= TP_CAT_COUNT              ? "category"
                          : (unsigned)r->kind > TP_REC_MEMSET                  ? "kind"
                          : r->end_ns < r->start_ns                           ? "end_ns"
                                                                              : NULL;
        if (bad)
            return tp_fail(err, TP_ERR_ARG, "trace record %d (%s): %s out of range (iteration %d of %d, op %d of %d)",
                           i, r->name, bad, r->iteration, t->iterations, r->op, t->n_ops);
    }
    return TP_OK;
}

/* Fills kernel row k from the group in[0..m) (same name and category); dur and ops are scratch of m. */
static tp_status fill_row(const tp_trace *t, const tp_trace_record **in, int m, uint64_t *dur, int *ops,
                          tp_kernel_row *k) {
    k->name = strdup(in[0]->name);
    if (!k->name) return TP_ERR_OOM;
    k->category = in[0]->category;
    k->instances = m;
    k->first_record = (int)(in[0] - t->rec);
    int n_ops = 0;
    for (int j = 0; j < m; j++) {
        dur[j] = dur_ns(in[j]);
        k->total_ns += dur[j];
        if (in[j]->op >= 0) ops[n_ops++] = in[j]->op;
    }
    qsort(dur, (size_t)m, sizeof *dur, cmp_u64);
    k->min_ns = dur[0];
    k->max_ns = dur[m - 1];
    k->med_ns = m % 2 ? (double)dur[m / 2] : 0.5 * ((double)dur[m / 2 - 1] + (double)dur[m / 2]);
    k->avg_ns = (double)k->total_ns / m;
    double ss = 0; /* two-pass: the deviations are small next to the timestamps' magnitude */
    for (int j = 0; j < m; j++) ss += ((double)dur[j] - k->avg_ns) * ((double)dur[j] - k->avg_ns);
    k->stddev_ns = sqrt(ss / m);

    qsort(ops, (size_t)n_ops, sizeof *ops, cmp_int);
    int u = 0;
    for (int j = 0; j < n_ops; j++) {
        int dup = 0;
        for (int q = 0; q < u && !dup; q++) dup = ops[q] == ops[j] || strcmp(t->ops[ops[q]].layer, t->ops[ops[j]].layer) == 0;
        if (!dup) ops[u++] = ops[j];
    }
    if (u) {
        k->layer_ops = malloc((size_t)u * sizeof *k->layer_ops);
        if (!k->layer_ops) return TP_ERR_OOM;
        memcpy(k->layer_ops, ops, (size_t)u * sizeof *ops);
    }
    k->n_layer_ops = u;
    return TP_OK;
}

/* Adds kernel row `row` to layer L's distinct list; the list doubles at powers of two. */
static tp_status layer_add_kernel(tp_layer_row *L, int row) {
    for (int j = 0; j < L->n_kernels; j++)
        if (L->kernels[j] == row) return TP_OK;
    int n = L->n_kernels;
    if (n == 0 || (n & (n - 1)) == 0) {
        int *p = realloc(L->kernels, (size_t)(n ? 2 * n : 1) * sizeof *p);
        if (!p) return TP_ERR_OOM;
        L->kernels = p;
    }
    L->kernels[L->n_kernels++] = row;
    return TP_OK;
}

/* The roofline columns: each op's floor from the trace's op costs and rates, summed by op kind and over the
 * pass. Only when the trace has a copy rate and op costs (older traces have neither). */
static void roofline(const tp_trace *t, tp_profile_summary *s) {
    int costs = 0;
    for (int o = 0; o < t->n_ops; o++) costs |= t->ops[o].bytes > 0 || t->ops[o].matmul_flop > 0;
    s->has_roofline = costs && t->rates.copy_gbps > 0;
    if (!s->has_roofline) return;
    int row_of_kind[TP_OP_KIND_COUNT];
    for (int k = 0; k < TP_OP_KIND_COUNT; k++) row_of_kind[k] = -1;
    s->floor = (tp_roofline_floor){0, 0, 0, 1};
    for (int o = 0; o < s->n_layers; o++) {
        tp_layer_row *L = &s->layers[o];
        tp_roofline_op(&t->rates, t->ops[o].prec, t->ops[o].matmul_flop, t->ops[o].bytes, &L->floor);
        tp_roofline_add(&s->floor, &L->floor);
        s->attributed_ns_per_iter += L->ns_per_iter;
        if (L->ns_per_iter <= 0 && L->floor.ns <= 0) continue; /* fused into another op: nothing of its own */
        const int k = (unsigned)L->kind < TP_OP_KIND_COUNT ? (int)L->kind : 0;
        if (row_of_kind[k] < 0) row_of_kind[k] = s->n_by_kind++;
        tp_roofline_row *R = &s->by_kind[row_of_kind[k]];
        if (!R->ops) R->floor = (tp_roofline_floor){0, 0, 0, 1};
        R->kind = L->kind;
        R->ops++;
        R->ns_per_iter += L->ns_per_iter;
        tp_roofline_add(&R->floor, &L->floor);
    }
}

/* The stages of a pipeline's trace (tp_profile_summary.stages): none unless every layer name has one. */
static void stages(tp_profile_summary *s) {
    s->n_stages = 0;
    for (int o = 0; o < s->n_layers; o++) {
        const tp_layer_row *L = &s->layers[o];
        const size_t n = tp_layer_stage_len(L->layer);
        if (n == 0 || n >= sizeof s->stages[0].name) {
            s->n_stages = 0;
            return;
        }
        int k = 0;
        while (k < s->n_stages && (strlen(s->stages[k].name) != n || strncmp(s->stages[k].name, L->layer, n) != 0)) k++;
        if (k == s->n_stages) {
            if (k == TP_PROFILE_MAX_STAGES) {
                s->n_stages = 0;
                return;
            }
            memset(&s->stages[k], 0, sizeof s->stages[k]);
            memcpy(s->stages[k].name, L->layer, n);
            s->stages[k].floor.known = 1;
            s->n_stages++;
        }
        tp_stage_row *S = &s->stages[k];
        S->ops++;
        S->ns_per_iter += L->ns_per_iter;
        S->pct += L->pct;
        S->floor.ns += L->floor.ns;
        S->floor.compute_ns += L->floor.compute_ns;
        S->floor.memory_ns += L->floor.memory_ns;
        S->floor.known &= L->floor.known;
    }
    if (s->n_stages < 2) s->n_stages = 0;
}

tp_status tp_profile_analyze(const tp_trace *t, tp_profile_summary *s, tp_error *err) {
    memset(s, 0, sizeof *s);
    tp_status st = check_records(t, err);
    if (st) return st;
    const int I = t->iterations;
    size_t n = (size_t)(t->n ? t->n : 1);
    s->iterations = I;
    s->iter_ns = calloc((size_t)I, sizeof *s->iter_ns);
    s->iter_span_ns = calloc((size_t)I, sizeof *s->iter_span_ns);
    s->iter_cat_ns = calloc((size_t)I * TP_CAT_COUNT, sizeof *s->iter_cat_ns);
    uint64_t *first = malloc((size_t)I * sizeof *first), *dur = malloc(n * sizeof *dur);
    uint64_t *busy = malloc(n * sizeof *busy);
    const tp_trace_record **in = malloc(n * sizeof *in);
    int *row_of = malloc(n * sizeof *row_of), *ops = malloc(n * sizeof *ops), *perm = NULL;
    if (!s->iter_ns || !s->iter_span_ns || !s->iter_cat_ns || !first || !dur || !busy || !in || !row_of || !ops)
        goto oom;
    if (tp_trace_busy_ns(t, busy) == UINT64_MAX) goto oom;

    /* Totals; iter_span_ns holds each iteration's last end until the spans are taken. */
    for (int i = 0; i < I; i++) first[i] = UINT64_MAX;
    int n_in = 0;
    for (int i = 0; i < t->n; i++) {
        const tp_trace_record *r = &t->rec[i];
        int it = r->iteration;
        if (it < 0) continue;
        const uint64_t d = busy[i];
        in[n_in++] = r;
        s->raw_kernel_ns += dur_ns(r);
        s->kernel_ns += d;
        s->iter_ns[it] += d;
        s->iter_cat_ns[(size_t)it * TP_CAT_COUNT + r->category] += d;
        s->cat_ns[r->category] += d;
        if (r->start_ns < first[it]) first[it] = r->start_ns;
        if (r->end_ns > s->iter_span_ns[it]) s->iter_span_ns[it] = r->end_ns;
        if (r->op < 0) {
            s->unattributed++;
            s->unattributed_ns += d;
        }
    }
    s->records = n_in;
    for (int i = 0; i < I && !st; i++)
        if (first[i] == UINT64_MAX)
            st = tp_fail(err, TP_ERR_ARG, "profiled iteration %d of %d has no records in the trace", i, I);
    if (st) goto done;
    double span = 0;
    for (int i = 0; i < I; i++) {
        s->iter_span_ns[i] -= first[i];
        span += (double)s->iter_span_ns[i];
    }
    s->kernel_ns_per_iter = (double)s->kernel_ns / I;
    s->raw_kernel_ns_per_iter = (double)s->raw_kernel_ns / I;
    s->span_ns_per_iter = span / I;
    for (int c = 0; c < TP_CAT_COUNT; c++) {
        s->cat_ns_per_iter[c] = (double)s->cat_ns[c] / I;
        s->cat_pct[c] = s->kernel_ns ? 100.0 * (double)s->cat_ns[c] / (double)s->kernel_ns : 0;
    }

    /* Kernel rows: group, then sort by time; row_of maps each record to its group, then to its sorted row. */
    qsort(in, (size_t)n_in, sizeof *in, cmp_rec_key);
    int groups = 0;
    for (int j = 0; j < n_in; j++) groups += j == 0 || !same_key(in[j - 1], in[j]);
    s->kernels = calloc((size_t)groups, sizeof *s->kernels);
    perm = malloc((size_t)groups * sizeof *perm);
    if (!s->kernels || !perm) goto oom;
    for (int a = 0, g = 0; a < n_in; g++) {
        int b = a + 1;
        while (b < n_in && same_key(in[a], in[b])) b++;
        s->n_kernels = g + 1;
        if (fill_row(t, in + a, b - a, dur, ops, &s->kernels[g])) goto oom;
        for (int j = a; j < b; j++) row_of[in[j] - t->rec] = g;
        a = b;
    }
    for (int k = 0; k < s->n_kernels; k++)
        s->kernels[k].time_pct =
            s->raw_kernel_ns ? 100.0 * (double)s->kernels[k].total_ns / (double)s->raw_kernel_ns : 0;
    qsort(s->kernels, (size_t)s->n_kernels, sizeof *s->kernels, cmp_row);
    for (int k = 0; k < s->n_kernels; k++) perm[row_of[s->kernels[k].first_record]] = k;
    for (int i = 0; i < t->n; i++)
        if (t->rec[i].iteration >= 0) row_of[i] = perm[row_of[i]];

    /* Layer rows, in op order; kernels_per_iter counts records until the division. */
    if (t->n_ops) {
        s->layers = calloc((size_t)t->n_ops, sizeof *s->layers);
        if (!s->layers) goto oom;
    }
    s->n_layers = t->n_ops;
    for (int o = 0; o < t->n_ops; o++) {
        memcpy(s->layers[o].layer, t->ops[o].layer, sizeof s->layers[o].layer);
        s->layers[o].kind = t->ops[o].kind;
        s->layers[o].prec = t->ops[o].prec;
    }
    for (int i = 0; i < t->n; i++) {
        const tp_trace_record *r = &t->rec[i];
        if (r->iteration < 0 || r->op < 0) continue;
        tp_layer_row *L = &s->layers[r->op];
        L->total_ns += busy[i];
        L->kernels_per_iter += 1;
        if (layer_add_kernel(L, row_of[i])) goto oom;
    }
    for (int o = 0; o < s->n_layers; o++) {
        tp_layer_row *L = &s->layers[o];
        L->ns_per_iter = (double)L->total_ns / I;
        L->pct = s->kernel_ns ? 100.0 * (double)L->total_ns / (double)s->kernel_ns : 0;
        L->kernels_per_iter /= I;
    }
    roofline(t, s);
    stages(s);
    goto done;
oom:
    st = tp_fail(err, TP_ERR_OOM, "out of host memory analyzing a trace of %d records", t->n);
done:
    free(busy);
    free(first);
    free(dur);
    free(in);
    free(row_of);
    free(ops);
    free(perm);
    if (st) tp_profile_summary_free(s);
    return st;
}

/* ---- report ---------------------------------------------------------------------------------------------- */

/* The Layers cell: up to three names, else the first one and a count, so the table stays one line a kernel
 * (the JSON keeps the full list). */
static void layers_cell(const tp_trace *t, const tp_kernel_row *k, char *buf, size_t n) {
    if (k->n_layer_ops == 0) {
        snprintf(buf, n, "-");
        return;
    }
    if (k->n_layer_ops > 3) {
        snprintf(buf, n, "%s ... (+%d more)", t->ops[k->layer_ops[0]].layer, k->n_layer_ops - 1);
        return;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int j = 0; j < k->n_layer_ops && used < n; j++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", j ? ", " : "", t->ops[k->layer_ops[j]].layer);
}

static double traced_ms(const tp_profile_summary *s) { return s->kernel_ns_per_iter * 1e-6; }

/* "compute", "memory", or "-" for an op without a floor (fused, no cost) or without the rate it needs */
static const char *bound_name(const tp_roofline_floor *fl) {
    if (!fl->known || fl->ns <= 0) return "-";
    return fl->compute_ns > 0 ? "compute" : "memory";
}

static void roofline_line(FILE *f, const char *name, int ops, double ns, const tp_roofline_floor *fl) {
    char at[16] = "-";
    if (fl->ns > 0 && ns > 0) snprintf(at, sizeof at, "%.1f", 100.0 * fl->ns / ns);
    fprintf(f, "%-13s %5d %10.4f %10.4f %14.4f %13.4f %13s%s\n", name, ops, ns * 1e-6, fl->ns * 1e-6,
            fl->compute_ns * 1e-6, fl->memory_ns * 1e-6, at, fl->known ? "" : "  (partial: a rate was not measured)");
}

static void print_roofline(const tp_trace *t, const tp_profile_summary *s, FILE *f) {
    fprintf(f, "\nRoofline by op (per iteration; profile/roofline.h): each op's floor is max(matmul FLOP / the GEMM "
               "peak of its precision,\nbytes / the copy rate), with the rates measured on this GPU: GEMM peaks");
    for (int p = 0; p < TP_PREC_COUNT; p++)
        if (t->rates.peak_tflops[p] > 0)
            fprintf(f, " %s %.4g", tp_precision_name((tp_precision)p), t->rates.peak_tflops[p]);
    fprintf(f, " TFLOP/s (8192^3 cuBLASLt), copy %.4g GB/s (read + write).\nAttainment = floor / time: above 100%% "
               "where an op beats the model (its input still in L2, or clocks above the peak run's)\n",
            t->rates.copy_gbps);
    fprintf(f, "%-13s %5s %10s %10s %14s %13s %13s\n", "Op", "Ops", "ms/iter", "floor ms", "compute-bound",
            "memory-bound", "attainment %");
    int ops = 0;
    for (int r = 0; r < s->n_by_kind; r++) {
        const tp_roofline_row *R = &s->by_kind[r];
        roofline_line(f, tp_op_kind_name(R->kind), R->ops, R->ns_per_iter, &R->floor);
        ops += R->ops;
    }
    roofline_line(f, "total", ops, s->attributed_ns_per_iter, &s->floor);
    if (s->floor.ns > 0 && t->event_median_ms > 0)
        fprintf(f, "At the floor a forward pass would take %.4f ms; the event-timed one takes %.4f ms (%.2fx the "
                   "floor)\n", s->floor.ns * 1e-6, t->event_median_ms, t->event_median_ms / (s->floor.ns * 1e-6));
}

void tp_profile_print(const tp_trace *t, const tp_profile_summary *s, int top_n, FILE *f) {
    fprintf(f, "=== Profile: %s, %s, batch %d, on %s: %d profiled iteration%s ===\n", t->model, t->precision,
            t->batch, t->gpu[0] ? t->gpu : "unknown GPU", s->iterations, s->iterations == 1 ? "" : "s");
    fprintf(f, "Traced kernel time per iteration %.4f ms; span %.4f ms", traced_ms(s), s->span_ns_per_iter * 1e-6);
    if (t->event_median_ms > 0) {
        double gap = t->event_median_ms - traced_ms(s);
        fprintf(f, "; event-timed GPU compute time %.4f ms (gap %.4f ms, %.1f %%)", t->event_median_ms, gap,
                100.0 * gap / t->event_median_ms);
    }
    if (s->raw_kernel_ns > s->kernel_ns + s->kernel_ns / 1000)
        fprintf(f, "\nKernels overlap: their durations sum to %.4f ms per iteration, the GPU is busy %.4f ms. Under "
                   "programmatic dependent launch a kernel starts before its predecessor ends and waits inside its "
                   "own duration: the kernel table shows durations, the category and layer times count each "
                   "stretch of busy time once, for the kernel that extends it (tprof's --pdl off runs them one "
                   "after another in a CUDA graph)", s->raw_kernel_ns_per_iter * 1e-6, traced_ms(s));
    if (t->persistent)
        fprintf(f, "\nA persistent decode step: CUPTI sees one kernel, so these records are the kernel's own, one per "
                   "instruction (%%globaltimer from the end of its waits to its signal); where no SM runs an "
                   "instruction (all wait on counters) the stretch is a \"persistent dependency wait\" (category "
                   "other) charged to the op whose instruction ends it; the counters' memset, the argmax and the "
                   "position kernels around the step are not in them. \"Kernels\" below are instructions, their "
                   "time the busy time of the SMs running them");
    fprintf(f, "\nRecords not launched by a tprof op: %d (%.4f ms per iteration)\n", s->unattributed,
            (double)s->unattributed_ns / s->iterations * 1e-6);

    fprintf(f, "\nCategory breakdown (per iteration)\n%-13s %12s %8s\n", "Category", "ms/iter", "%");
    for (int c = 0; c < TP_CAT_COUNT; c++)
        if (s->cat_ns[c])
            fprintf(f, "%-13s %12.4f %8.2f\n", tp_category_name((tp_category)c), s->cat_ns_per_iter[c] * 1e-6,
                    s->cat_pct[c]);
    fprintf(f, "%-13s %12.4f %8.2f\n", "total", traced_ms(s), s->kernel_ns ? 100.0 : 0.0);

    int rows = top_n > 0 && top_n < s->n_kernels ? top_n : s->n_kernels;
    int lw = (int)strlen("Layers");
    char cell[512];
    for (int k = 0; k < rows; k++) {
        layers_cell(t, &s->kernels[k], cell, sizeof cell);
        if ((int)strlen(cell) > lw) lw = (int)strlen(cell);
    }
    fprintf(f, "\nTop %d kernels by total time (of %d; all profiled iterations)\n", rows, s->n_kernels);
    fprintf(f, "%8s  %15s  %9s  %12s  %12s  %10s  %10s  %12s  %-13s  %-*s  %s\n", "Time (%)", "Total Time (ns)",
            "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Category", lw, "Layers",
            "Name");
    for (int k = 0; k < rows; k++) {
        const tp_kernel_row *r = &s->kernels[k];
        layers_cell(t, r, cell, sizeof cell);
        fprintf(f, "%8.1f  %15llu  %9d  %12.1f  %12.1f  %10llu  %10llu  %12.1f  %-13s  %-*s  %s\n", r->time_pct,
                (unsigned long long)r->total_ns, r->instances, r->avg_ns, r->med_ns, (unsigned long long)r->min_ns,
                (unsigned long long)r->max_ns, r->stddev_ns, tp_category_name(r->category), lw, cell, r->name);
    }

    int w = (int)strlen("(unattributed)");
    for (int o = 0; o < s->n_layers; o++)
        if ((int)strlen(s->layers[o].layer) > w) w = (int)strlen(s->layers[o].layer);
    const int rf = s->has_roofline;
    fprintf(f, "\nPer-layer time (per iteration%s)\n%-*s  %-12s  %-9s  %12s  %10s  %7s  ",
            rf ? "; floor: roofline.h" : "", w, "Layer", "Op", "Precision", "Kernels/iter", "ms/iter", "%");
    if (rf) fprintf(f, "%10s  %-7s  %9s  ", "floor ms", "bound", "attain %");
    fputs("Kernel(s)\n", f);
    for (int o = 0; o < s->n_layers; o++) {
        const tp_layer_row *L = &s->layers[o];
        fprintf(f, "%-*s  %-12s  %-9s  %12.2f  %10.4f  %7.2f  ", w, L->layer, tp_op_kind_name(L->kind),
                tp_precision_name(L->prec), L->kernels_per_iter, L->ns_per_iter * 1e-6, L->pct);
        if (rf) {
            char fl[16] = "-", at[16] = "-";
            if (L->floor.known) snprintf(fl, sizeof fl, "%.4f", L->floor.ns * 1e-6);
            if (L->floor.known && L->floor.ns > 0 && L->ns_per_iter > 0)
                snprintf(at, sizeof at, "%.1f", 100.0 * L->floor.ns / L->ns_per_iter);
            fprintf(f, "%10s  %-7s  %9s  ", fl, bound_name(&L->floor), at);
        }
        for (int j = 0; j < L->n_kernels; j++) fprintf(f, "%s%s", j ? ", " : "", s->kernels[L->kernels[j]].name);
        const int c = o < t->n_ops ? t->ops[o].call : -1; /* fused into another op's call: that call's kernel */
        if (!L->n_kernels && c >= 0 && c != o) fprintf(f, "(in the %s call of %s)\n", t->ops[c].kernel, t->ops[c].layer);
        else fputs(L->n_kernels ? "\n" : "-\n", f);
    }
    if (s->unattributed)
        fprintf(f, "%-*s  %-12s  %-9s  %12.2f  %10.4f  %7.2f  -\n", w, "(unattributed)", "-", "-",
                (double)s->unattributed / s->iterations, (double)s->unattributed_ns / s->iterations * 1e-6,
                s->kernel_ns ? 100.0 * (double)s->unattributed_ns / (double)s->kernel_ns : 0.0);
    if (s->n_stages) {
        fprintf(f, "\nPer-stage time (per iteration)\n%-12s  %5s  %10s  %7s%s\n", "Stage", "Ops", "ms/iter", "%",
                rf ? "   floor ms  attain %" : "");
        for (int k = 0; k < s->n_stages; k++) {
            const tp_stage_row *S = &s->stages[k];
            fprintf(f, "%-12s  %5d  %10.4f  %7.2f", S->name, S->ops, S->ns_per_iter * 1e-6, S->pct);
            if (rf && S->floor.known && S->floor.ns > 0 && S->ns_per_iter > 0)
                fprintf(f, "  %9.4f  %8.1f", S->floor.ns * 1e-6, 100.0 * S->floor.ns / S->ns_per_iter);
            fputc('\n', f);
        }
    }
    if (rf) print_roofline(t, s, f);
}

/* ---- summary JSON ---------------------------------------------------------------------------------------- */

static json_t *jnum(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *floor_json(json_t *o, double ns, const tp_roofline_floor *fl) {
    json_object_set_new(o, "ms_per_iter", jnum(ns * 1e-6));
    json_object_set_new(o, "floor_ms", jnum(fl->ns * 1e-6));
    json_object_set_new(o, "compute_bound_ms", jnum(fl->compute_ns * 1e-6));
    json_object_set_new(o, "memory_bound_ms", jnum(fl->memory_ns * 1e-6));
    json_object_set_new(o, "floor_known", json_boolean(fl->known));
    json_object_set_new(o, "attainment", fl->ns > 0 && ns > 0 ? jnum(fl->ns / ns) : json_null());
    return o;
}

static json_t *roofline_json(const tp_trace *t, const tp_profile_summary *s) {
    json_t *r = json_object(), *a = json_array();
    json_object_set_new(r, "gemm_peak_tflops", tp_roofline_peaks_json(&t->rates));
    json_object_set_new(r, "copy_gbps", jnum(t->rates.copy_gbps));
    floor_json(r, s->attributed_ns_per_iter, &s->floor);
    for (int k = 0; k < s->n_by_kind; k++) {
        const tp_roofline_row *R = &s->by_kind[k];
        json_t *o = json_pack("{s:s,s:i}", "op", tp_op_kind_name(R->kind), "ops", R->ops);
        json_array_append_new(a, floor_json(o, R->ns_per_iter, &R->floor));
    }
    json_object_set_new(r, "by_op", a);
    return r;
}

json_t *tp_profile_summary_json(const tp_trace *t, const tp_profile_summary *s) {
    json_t *j = json_object();
    if (!j) return NULL;
    json_object_set_new(j, "model", json_string(t->model));
    json_object_set_new(j, "precision", json_string(t->precision));
    json_object_set_new(j, "batch", json_integer(t->batch));
    json_object_set_new(j, "gpu", json_string(t->gpu));
    json_object_set_new(j, "iterations", json_integer(s->iterations));
    json_object_set_new(j, "records", json_integer(s->records));
    /* a persistent decode step's records are its instructions, not CUPTI's kernels */
    json_object_set_new(j, "source", json_string(t->persistent ? "persistent kernel instructions (%globaltimer)"
                                                               : "CUPTI kernel records"));
    json_object_set_new(j, "kernel_ns_per_iter", jnum(s->kernel_ns_per_iter));
    json_object_set_new(j, "raw_kernel_ns_per_iter", jnum(s->raw_kernel_ns_per_iter));
    json_object_set_new(j, "span_ns_per_iter", jnum(s->span_ns_per_iter));
    json_object_set_new(j, "traced_ms_per_iter", jnum(traced_ms(s)));
    json_object_set_new(j, "event_median_ms", jnum(t->event_median_ms));
    double gap = t->event_median_ms - traced_ms(s);
    json_object_set_new(j, "gap_ms", t->event_median_ms > 0 ? jnum(gap) : json_null());
    json_object_set_new(j, "gap_pct", t->event_median_ms > 0 ? jnum(100.0 * gap / t->event_median_ms) : json_null());
    json_object_set_new(j, "unattributed", json_integer(s->unattributed));
    json_object_set_new(j, "unattributed_ns_per_iter", jnum((double)s->unattributed_ns / s->iterations));

    json_t *a = json_array();
    for (int i = 0; i < s->iterations; i++)
        json_array_append_new(a, json_pack("{s:I,s:I}", "kernel_ns", (json_int_t)s->iter_ns[i], "span_ns",
                                           (json_int_t)s->iter_span_ns[i]));
    json_object_set_new(j, "per_iteration", a);

    a = json_array();
    for (int c = 0; c < TP_CAT_COUNT; c++)
        json_array_append_new(a, json_pack("{s:s,s:o,s:o,s:o}", "category", tp_category_name((tp_category)c),
                                           "ns_per_iter", jnum(s->cat_ns_per_iter[c]), "ms_per_iter",
                                           jnum(s->cat_ns_per_iter[c] * 1e-6), "percent", jnum(s->cat_pct[c])));
    json_object_set_new(j, "categories", a);

    a = json_array();
    for (int k = 0; k < s->n_kernels; k++) {
        const tp_kernel_row *r = &s->kernels[k];
        json_t *layers = json_array();
        for (int q = 0; q < r->n_layer_ops; q++) json_array_append_new(layers, json_string(t->ops[r->layer_ops[q]].layer));
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(r->name));
        json_object_set_new(o, "category", json_string(tp_category_name(r->category)));
        json_object_set_new(o, "instances", json_integer(r->instances));
        json_object_set_new(o, "total_ns", json_integer((json_int_t)r->total_ns));
        json_object_set_new(o, "avg_ns", jnum(r->avg_ns));
        json_object_set_new(o, "med_ns", jnum(r->med_ns));
        json_object_set_new(o, "min_ns", json_integer((json_int_t)r->min_ns));
        json_object_set_new(o, "max_ns", json_integer((json_int_t)r->max_ns));
        json_object_set_new(o, "stddev_ns", jnum(r->stddev_ns));
        json_object_set_new(o, "time_pct", jnum(r->time_pct));
        json_object_set_new(o, "layers", layers);
        json_array_append_new(a, o);
    }
    json_object_set_new(j, "kernels", a);

    a = json_array();
    for (int i = 0; i < s->n_layers; i++) {
        const tp_layer_row *L = &s->layers[i];
        json_t *names = json_array();
        for (int q = 0; q < L->n_kernels; q++) json_array_append_new(names, json_string(s->kernels[L->kernels[q]].name));
        json_t *o = json_object();
        json_object_set_new(o, "layer", json_string(L->layer));
        json_object_set_new(o, "op", json_string(tp_op_kind_name(L->kind)));
        json_object_set_new(o, "precision", json_string(tp_precision_name(L->prec)));
        json_object_set_new(o, "how", json_string(i < t->n_ops ? t->ops[i].how : ""));
        json_object_set_new(o, "kernels_per_iter", jnum(L->kernels_per_iter));
        json_object_set_new(o, "kernels", names);
        json_object_set_new(o, "total_ns", json_integer((json_int_t)L->total_ns));
        json_object_set_new(o, "ns_per_iter", jnum(L->ns_per_iter));
        json_object_set_new(o, "percent", jnum(L->pct));
        const int fk = s->has_roofline && L->floor.known;
        json_object_set_new(o, "floor_ns", fk ? jnum(L->floor.ns) : json_null());
        json_object_set_new(o, "bound", fk && L->floor.ns > 0 ? json_string(bound_name(&L->floor)) : json_null());
        const int at = fk && L->floor.ns > 0 && L->ns_per_iter > 0;
        json_object_set_new(o, "attainment", at ? jnum(L->floor.ns / L->ns_per_iter) : json_null());
        json_array_append_new(a, o);
    }
    json_object_set_new(j, "layers", a);
    a = json_array();
    for (int k = 0; k < s->n_stages; k++) {
        const tp_stage_row *S = &s->stages[k];
        json_array_append_new(a, json_pack("{s:s,s:i,s:o,s:o,s:o}", "stage", S->name, "ops", S->ops, "ms_per_iter",
                                           jnum(S->ns_per_iter * 1e-6), "percent", jnum(S->pct), "floor_ms",
                                           s->has_roofline && S->floor.known ? jnum(S->floor.ns * 1e-6) : json_null()));
    }
    json_object_set_new(j, "stages", a);
    json_object_set_new(j, "roofline", s->has_roofline ? roofline_json(t, s) : json_null());
    return j;
}

/* ---- Chrome trace ---------------------------------------------------------------------------------------- */

/* A slice on the "layers" thread: an op (depth 1) or a transformer block (depth 0). */
typedef struct {
    uint64_t start, end;
    int depth;
    int op;        /* op index for depth 1; block number for depth 0 */
    int kernels;   /* records (op) or ops (block) inside */
} slice;

/* Perfetto nests complete events of one thread by containment and takes equal starts in file order, so
 * parents must come first: start ascending, then the longer (enclosing) slice, then the shallower. */
static int cmp_slice(const void *a, const void *b) {
    const slice *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->end != y->end) return x->end > y->end ? -1 : 1;
    return (x->depth > y->depth) - (x->depth < y->depth);
}

static int cmp_rec_start(const void *a, const void *b) {
    const tp_trace_record *x = *(const tp_trace_record *const *)a, *y = *(const tp_trace_record *const *)b;
    if (x->start_ns != y->start_ns) return x->start_ns < y->start_ns ? -1 : 1;
    return (x > y) - (x < y);
}

/* The block number N of a layer "blocks.N....", or -1. */
static int block_of(const char *layer) {
    if (strncmp(layer, "blocks.", 7) != 0 || layer[7] < '0' || layer[7] > '9') return -1;
    char *end;
    long n = strtol(layer + 7, &end, 10);
    return *end == '.' && n < 1000000 ? (int)n : -1;
}

static json_t *meta_event(const char *what, int tid, const char *name) {
    return json_pack("{s:s,s:s,s:i,s:i,s:{s:s}}", "name", what, "ph", "M", "pid", 1, "tid", tid, "args", "name", name);
}

static json_t *x_event(const char *name, const char *cat, int tid, uint64_t t0, uint64_t start, uint64_t end,
                       json_t *args) {
    return json_pack("{s:s,s:s,s:s,s:i,s:i,s:f,s:f,s:o}", "name", name, "cat", cat, "ph", "X", "pid", 1, "tid", tid,
                     "ts", (double)(start - t0) / 1000.0, "dur", (double)(end - start) / 1000.0, "args", args);
}

static json_t *dim3(const int v[3]) { return json_pack("[i,i,i]", v[0], v[1], v[2]); }

tp_status tp_chrome_trace_write(const tp_trace *t, int iteration, const char *path, tp_error *err) {
    if (iteration < 0 || iteration >= t->iterations)
        return tp_fail(err, TP_ERR_ARG, "Chrome trace: iteration %d outside the %d profiled iterations", iteration,
                       t->iterations);
    const tp_trace_record **recs = malloc((size_t)(t->n ? t->n : 1) * sizeof *recs);
    slice *sl = malloc((size_t)(2 * t->n_ops + 1) * sizeof *sl);
    if (!recs || !sl) {
        free(recs);
        free(sl);
        return tp_fail(err, TP_ERR_OOM, "out of host memory writing %s", path);
    }
    int n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->rec[i].iteration == iteration) recs[n++] = &t->rec[i];
    if (n == 0) {
        free(recs);
        free(sl);
        return tp_fail(err, TP_ERR_ARG, "Chrome trace: iteration %d has no records", iteration);
    }
    qsort(recs, (size_t)n, sizeof *recs, cmp_rec_start);
    uint64_t t0 = recs[0]->start_ns;

    /* Op slices from their records; then one block slice per block number over its ops' slices. */
    int n_sl = 0;
    for (int o = 0; o < t->n_ops; o++) sl[o] = (slice){UINT64_MAX, 0, 1, o, 0};
    for (int i = 0; i < n; i++) {
        const tp_trace_record *r = recs[i];
        if (r->op < 0 || r->op >= t->n_ops) continue;
        slice *x = &sl[r->op];
        if (r->start_ns < x->start) x->start = r->start_ns;
        if (r->end_ns > x->end) x->end = r->end_ns;
        x->kernels++;
    }
    for (int o = 0; o < t->n_ops; o++)
        if (sl[o].kernels) sl[n_sl++] = sl[o]; /* compacts in place: n_sl <= o */
    int n_ops_sl = n_sl;
    for (int i = 0; i < n_ops_sl; i++) {
        int b = block_of(t->ops[sl[i].op].layer);
        if (b < 0) continue;
        int k = n_ops_sl;
        while (k < n_sl && sl[k].op != b) k++;
        if (k == n_sl) sl[n_sl++] = (slice){sl[i].start, sl[i].end, 0, b, 0};
        if (sl[i].start < sl[k].start) sl[k].start = sl[i].start;
        if (sl[i].end > sl[k].end) sl[k].end = sl[i].end;
        sl[k].kernels++;
    }
    qsort(sl, (size_t)n_sl, sizeof *sl, cmp_slice);

    json_t *ev = json_array();
    json_array_append_new(ev, meta_event("process_name", 0, "GPU"));
    json_array_append_new(ev, meta_event("thread_name", 1, "kernels"));
    json_array_append_new(ev, meta_event("thread_name", 2, "layers"));
    int sms = 0; /* a persistent step's instructions: one row per SM (tid 3 + SM) */
    for (int i = 0; t->persistent && i < n; i++) sms = (int)recs[i]->stream + 1 > sms ? (int)recs[i]->stream + 1 : sms;
    for (int k = 0; k < sms; k++) {
        char sm[16];
        snprintf(sm, sizeof sm, "SM %d", k);
        json_array_append_new(ev, meta_event("thread_name", 3 + k, sm));
    }
    for (int i = 0; i < n; i++) {
        const tp_trace_record *r = recs[i];
        const tp_trace_op *op = r->op >= 0 && r->op < t->n_ops ? &t->ops[r->op] : NULL;
        json_t *args = json_pack("{s:s,s:s,s:s,s:i}", "layer", op ? op->layer : "-", "op",
                                 op ? tp_op_kind_name(op->kind) : "-", "category", tp_category_name(r->category),
                                 "stream", (int)r->stream);
        if (r->kind == TP_REC_KERNEL) {
            json_object_set_new(args, "grid", dim3(r->grid));
            json_object_set_new(args, "block", dim3(r->block));
            json_object_set_new(args, "registers", json_integer(r->registers));
            json_object_set_new(args, "smem_static", json_integer(r->smem_static));
            json_object_set_new(args, "smem_dynamic", json_integer(r->smem_dynamic));
        } else {
            json_object_set_new(args, "bytes", json_integer((json_int_t)r->bytes));
        }
        json_array_append_new(ev, x_event(r->name, tp_category_name(r->category), t->persistent ? 3 + (int)r->stream : 1,
                                          t0, r->start_ns, r->end_ns, args));
    }
    for (int i = 0; i < n_sl; i++) {
        const slice *x = &sl[i];
        char name[32];
        json_t *args;
        if (x->depth == 0) {
            snprintf(name, sizeof name, "blocks.%d", x->op);
            args = json_pack("{s:i}", "ops", x->kernels);
        } else {
            const tp_trace_op *op = &t->ops[x->op];
            args = json_pack("{s:s,s:s,s:i,s:s}", "precision", tp_precision_name(op->prec), "op",
                             tp_op_kind_name(op->kind), "kernels", x->kernels, "how", op->how);
        }
        json_array_append_new(ev, x_event(x->depth ? t->ops[x->op].layer : name, x->depth ? "layer" : "block", 2,
                                          t0, x->start, x->end, args));
    }
    json_t *root = json_pack("{s:o,s:s,s:{s:s,s:s,s:s,s:i,s:s,s:i}}", "traceEvents", ev, "displayTimeUnit", "ns",
                             "otherData", "tool", "tprof " TPROF_VERSION, "model", t->model, "precision",
                             t->precision, "batch", t->batch, "gpu", t->gpu, "iteration", iteration);
    free(recs);
    free(sl);
    if (!root) return tp_fail(err, TP_ERR_OOM, "out of host memory writing %s", path);
    tp_status st = tp_json_write_file(root, path, JSON_COMPACT, "the Chrome trace", err);
    json_decref(root);
    return st;
}
