/* test_profile.c: the trace file format and the profile analysis, on synthetic traces with hand-computed
 * answers (no GPU), and on the GPU traces committed as fixtures (tests/fixtures, files *.trace.json) when present:
 * category sums equal the total, percentages sum to 100, every report section is present, the Chrome trace
 * is valid JSON with properly nested layer slices. */
#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profile/analysis.h"
#include "profile/trace.h"

/* ---- the synthetic trace ---------------------------------------------------------------------------------
 * 5 ops (patch_embed; two ops in blocks.0; two in blocks.1), 2 profiled iterations, one memcpy and one
 * foreign (unattributed) kernel, one warm-up record outside the iterations. Records are back to back with a
 * 5 ns gap. Durations (ns), iteration 0 / 1:
 *   memcpy HtoD     op -1  memory      64 / -
 *   im2col          op 0   conversion 100 / 110
 *   gemm_a          op 0   GEMM       400 / 420
 *   gemm_a          op 1   GEMM       300 / 310
 *   gelu            op 2   activation  50 / 54
 *   gemm_a          op 3   GEMM       300 / 306
 *   gemm_a          op 4   GEMM       600 / 604
 *   foreign_kernel  op -1  other        - / 12
 * Totals: iteration 0 1814, iteration 1 1816, all 3630; spans 1844 and 1846 (6 gaps of 5 ns each). */
enum { GAP = 5 };

typedef struct {
    const char *name;
    int op;
    tp_category cat;
    tp_record_kind kind;
    uint64_t dur;
} rec_spec;

static const rec_spec ITER0[] = {
    {"memcpy HtoD", -1, TP_CAT_MEMORY, TP_REC_MEMCPY, 64}, {"im2col", 0, TP_CAT_CONVERT, TP_REC_KERNEL, 100},
    {"gemm_a", 0, TP_CAT_GEMM, TP_REC_KERNEL, 400},        {"gemm_a", 1, TP_CAT_GEMM, TP_REC_KERNEL, 300},
    {"gelu", 2, TP_CAT_ACTIVATION, TP_REC_KERNEL, 50},     {"gemm_a", 3, TP_CAT_GEMM, TP_REC_KERNEL, 300},
    {"gemm_a", 4, TP_CAT_GEMM, TP_REC_KERNEL, 600},
};
static const rec_spec ITER1[] = {
    {"im2col", 0, TP_CAT_CONVERT, TP_REC_KERNEL, 110}, {"gemm_a", 0, TP_CAT_GEMM, TP_REC_KERNEL, 420},
    {"gemm_a", 1, TP_CAT_GEMM, TP_REC_KERNEL, 310},    {"gelu", 2, TP_CAT_ACTIVATION, TP_REC_KERNEL, 54},
    {"gemm_a", 3, TP_CAT_GEMM, TP_REC_KERNEL, 306},    {"gemm_a", 4, TP_CAT_GEMM, TP_REC_KERNEL, 604},
    {"foreign_kernel", -1, TP_CAT_OTHER, TP_REC_KERNEL, 12},
};
#define N_ITER0 ((int)(sizeof ITER0 / sizeof ITER0[0]))
#define N_ITER1 ((int)(sizeof ITER1 / sizeof ITER1[0]))

static void add(tp_trace *t, const rec_spec *s, int iteration, uint64_t start, int salt) {
    tp_trace_record r;
    memset(&r, 0, sizeof r);
    r.kind = s->kind;
    r.name = (char *)s->name;
    r.start_ns = start;
    r.end_ns = start + s->dur;
    r.iteration = iteration;
    r.op = s->op;
    r.category = s->cat;
    if (s->kind == TP_REC_KERNEL) {
        r.grid[0] = 100 + salt, r.grid[1] = 2, r.grid[2] = 1;
        r.block[0] = 256, r.block[1] = 1, r.block[2] = 1;
        r.registers = 32 + salt;
        r.smem_static = 1024;
        r.smem_dynamic = 48 * 1024 + salt;
        r.graph_node = 1000 + (uint64_t)salt;
    } else {
        r.bytes = 602112;
    }
    r.stream = 7;
    tp_error e;
    ck_assert_msg(tp_trace_add(t, &r, &e) == TP_OK, "%s", e.msg);
}

static void add_iteration(tp_trace *t, const rec_spec *s, int n, int iteration, uint64_t start) {
    for (int i = 0; i < n; i++) {
        add(t, &s[i], iteration, start, i);
        start += s[i].dur + GAP;
    }
}

static void make_trace(tp_trace *t) {
    static const struct {
        const char *layer;
        tp_op_kind kind;
        tp_precision prec;
    } OPS[] = {{"patch_embed", TP_OP_PATCH_EMBED, TP_PREC_FP16},
               {"blocks.0.attn.qkv", TP_OP_LINEAR, TP_PREC_FP8},
               {"blocks.0.mlp.act", TP_OP_GELU, TP_PREC_FP16},
               {"blocks.1.attn.qkv", TP_OP_LINEAR, TP_PREC_FP8},
               {"blocks.1.mlp.fc1", TP_OP_LINEAR, TP_PREC_FP8}};
    tp_trace_init(t);
    t->n_ops = 5;
    t->ops = calloc(5, sizeof *t->ops);
    ck_assert_ptr_nonnull(t->ops);
    for (int i = 0; i < 5; i++) {
        snprintf(t->ops[i].layer, sizeof t->ops[i].layer, "%s", OPS[i].layer);
        t->ops[i].kind = OPS[i].kind;
        t->ops[i].prec = OPS[i].prec;
        snprintf(t->ops[i].how, sizeof t->ops[i].how, "note \"%d\" for op %d", i, i);
        t->ops[i].call = -1; /* no program recorded, as in traces before it */
    }
    snprintf(t->model, sizeof t->model, "vit_test");
    snprintf(t->precision, sizeof t->precision, "fp8");
    snprintf(t->gpu, sizeof t->gpu, "Synthetic GPU");
    t->batch = 4;
    t->iterations = 2;
    t->event_median_ms = 0.0021; /* 2100 ns against 1815 traced: gap 285 ns, 13.57 % */
    static const rec_spec warm = {"gemm_a", 1, TP_CAT_GEMM, TP_REC_KERNEL, 9999};
    add(t, &warm, -1, 500000, 0);
    add_iteration(t, ITER0, N_ITER0, 0, 1000000);
    add_iteration(t, ITER1, N_ITER1, 1, 2000000);
}

static void analyze(const tp_trace *t, tp_profile_summary *s) {
    tp_error e;
    ck_assert_msg(tp_profile_analyze(t, s, &e) == TP_OK, "%s", e.msg);
}

static void tmp_path(char *buf, size_t n, const char *tag) {
    const char *dir = getenv("TMPDIR");
    snprintf(buf, n, "%s/tprof_test_profile_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), tag);
}

static const tp_kernel_row *row_named(const tp_profile_summary *s, const char *name) {
    for (int k = 0; k < s->n_kernels; k++)
        if (strcmp(s->kernels[k].name, name) == 0) return &s->kernels[k];
    ck_abort_msg("kernel row %s missing", name);
    return NULL;
}

/* ---- analysis ------------------------------------------------------------------------------------------ */

START_TEST(test_totals_and_categories) {
    tp_trace t;
    make_trace(&t);
    tp_profile_summary s;
    analyze(&t, &s);
    ck_assert_int_eq(s.iterations, 2);
    ck_assert_int_eq(s.records, N_ITER0 + N_ITER1);
    ck_assert_uint_eq(s.kernel_ns, 3630);
    ck_assert_uint_eq(s.iter_ns[0], 1814);
    ck_assert_uint_eq(s.iter_ns[1], 1816);
    ck_assert(s.kernel_ns_per_iter == 1815.0);
    ck_assert_uint_eq(s.iter_span_ns[0], 1844);
    ck_assert_uint_eq(s.iter_span_ns[1], 1846);
    ck_assert(s.span_ns_per_iter == 1845.0);
    ck_assert_uint_eq(s.cat_ns[TP_CAT_GEMM], 3240);
    ck_assert_uint_eq(s.cat_ns[TP_CAT_CONVERT], 210);
    ck_assert_uint_eq(s.cat_ns[TP_CAT_ACTIVATION], 104);
    ck_assert_uint_eq(s.cat_ns[TP_CAT_MEMORY], 64);
    ck_assert_uint_eq(s.cat_ns[TP_CAT_OTHER], 12);
    ck_assert_uint_eq(s.cat_ns[TP_CAT_ATTENTION], 0);
    /* exact integer sums, in total and per iteration */
    uint64_t sum = 0;
    double pct = 0, per_iter = 0;
    for (int c = 0; c < TP_CAT_COUNT; c++) {
        sum += s.cat_ns[c];
        pct += s.cat_pct[c];
        per_iter += s.cat_ns_per_iter[c];
    }
    ck_assert_uint_eq(sum, s.kernel_ns);
    ck_assert(fabs(pct - 100.0) < 1e-9);
    ck_assert(fabs(per_iter - s.kernel_ns_per_iter) < 1e-9);
    for (int i = 0; i < 2; i++) {
        uint64_t it = 0;
        for (int c = 0; c < TP_CAT_COUNT; c++) it += s.iter_cat_ns[i * TP_CAT_COUNT + c];
        ck_assert_uint_eq(it, s.iter_ns[i]);
    }
    ck_assert_uint_eq(s.iter_cat_ns[0 * TP_CAT_COUNT + TP_CAT_MEMORY], 64);
    ck_assert_uint_eq(s.iter_cat_ns[1 * TP_CAT_COUNT + TP_CAT_GEMM], 1640);
    ck_assert(fabs(s.cat_pct[TP_CAT_GEMM] - 100.0 * 3240 / 3630) < 1e-12);
    ck_assert_int_eq(s.unattributed, 2);
    ck_assert_uint_eq(s.unattributed_ns, 76);
    tp_profile_summary_free(&s);
    tp_profile_summary_free(&s); /* twice is safe */
    tp_trace_free(&t);
}
END_TEST

/* Overlapping kernels, as programmatic dependent launch makes them: in one iteration gemm_a (op 1) runs 0..400,
 * gelu (op 2) starts early at 100 and ends at 460 (its wait inside its duration), gemm_a (op 3) starts at 450 and
 * ends at 600, fully inside nothing. Busy time: 400, 60, 140 = 600 = the span; the durations sum to 910. */
START_TEST(test_overlap_busy_time) {
    tp_trace t;
    tp_trace_init(&t);
    t.n_ops = 5;
    t.ops = calloc(5, sizeof *t.ops);
    ck_assert_ptr_nonnull(t.ops);
    for (int i = 0; i < 5; i++) snprintf(t.ops[i].layer, sizeof t.ops[i].layer, "op%d", i), t.ops[i].kind = TP_OP_LINEAR;
    t.iterations = 1;
    static const rec_spec A = {"gemm_a", 1, TP_CAT_GEMM, TP_REC_KERNEL, 400}, G = {"gelu", 2, TP_CAT_ACTIVATION,
                                                                                    TP_REC_KERNEL, 360},
                          C = {"gemm_a", 3, TP_CAT_GEMM, TP_REC_KERNEL, 150}, W = {"gemm_a", 1, TP_CAT_GEMM,
                                                                                    TP_REC_KERNEL, 50};
    add(&t, &W, -1, 10, 0); /* a warm-up record overlapping nothing profiled: busy 0, not counted */
    add(&t, &C, 0, 1450, 2); /* trace order is not start order */
    add(&t, &A, 0, 1000, 0);
    add(&t, &G, 0, 1100, 1);
    uint64_t busy[4];
    ck_assert(tp_trace_busy_ns(&t, busy) == 600);
    ck_assert(busy[0] == 0 && busy[1] == 140 && busy[2] == 400 && busy[3] == 60);
    tp_profile_summary s;
    analyze(&t, &s);
    ck_assert(s.kernel_ns == 600 && s.raw_kernel_ns == 910);
    ck_assert(s.cat_ns[TP_CAT_GEMM] == 540 && s.cat_ns[TP_CAT_ACTIVATION] == 60);
    ck_assert(s.layers[1].total_ns == 400 && s.layers[2].total_ns == 60 && s.layers[3].total_ns == 140);
    ck_assert(fabs(s.span_ns_per_iter - 600) < 1e-9);
    /* the kernel table keeps durations: gelu's 360 ns, its wait included */
    ck_assert(row_named(&s, "gelu")->total_ns == 360 && row_named(&s, "gemm_a")->total_ns == 550);
    char path[512];
    tmp_path(path, sizeof path, "overlap");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    tp_profile_print(&t, &s, 0, f);
    fclose(f);
    f = fopen(path, "r");
    char buf[8192];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    remove(path);
    ck_assert_msg(strstr(buf, "Kernels overlap: their durations sum to 0.0009 ms per iteration, the GPU is busy 0.0006 ms"),
                  "%s", buf);
    tp_profile_summary_free(&s);
    tp_trace_free(&t);
}
END_TEST

START_TEST(test_kernel_rows) {
    tp_trace t;
    make_trace(&t);
    tp_profile_summary s;
    analyze(&t, &s);
    ck_assert_int_eq(s.n_kernels, 5);
    static const char *ORDER[] = {"gemm_a", "im2col", "gelu", "memcpy HtoD", "foreign_kernel"};
    for (int k = 0; k < 5; k++) ck_assert_str_eq(s.kernels[k].name, ORDER[k]);
    for (int k = 1; k < 5; k++) ck_assert(s.kernels[k - 1].total_ns >= s.kernels[k].total_ns);

    /* gemm_a: 300 300 306 310 400 420 600 604 (the warm-up 9999 excluded) */
    const tp_kernel_row *g = row_named(&s, "gemm_a");
    ck_assert_int_eq(g->category, TP_CAT_GEMM);
    ck_assert_int_eq(g->instances, 8);
    ck_assert_uint_eq(g->total_ns, 3240);
    ck_assert_uint_eq(g->min_ns, 300);
    ck_assert_uint_eq(g->max_ns, 604);
    ck_assert(g->avg_ns == 405.0);
    ck_assert(g->med_ns == 355.0); /* (310 + 400) / 2 */
    /* deviations -105 -105 -99 -95 -5 15 195 199: squares sum to 118752; population: / 8 */
    ck_assert(fabs(g->stddev_ns - sqrt(118752.0 / 8)) < 1e-9);
    ck_assert(fabs(g->time_pct - 100.0 * 3240 / 3630) < 1e-12);
    ck_assert_int_eq(g->n_layer_ops, 4);
    static const int GOPS[] = {0, 1, 3, 4};
    for (int i = 0; i < 4; i++) ck_assert_int_eq(g->layer_ops[i], GOPS[i]);
    ck_assert_int_eq(g->first_record, 3); /* after the warm-up record (not counted), the memcpy, im2col */

    const tp_kernel_row *c = row_named(&s, "im2col");
    ck_assert_int_eq(c->instances, 2);
    ck_assert(c->med_ns == 105.0 && c->avg_ns == 105.0 && c->stddev_ns == 5.0);
    ck_assert_int_eq(c->n_layer_ops, 1);
    ck_assert_int_eq(c->layer_ops[0], 0);
    const tp_kernel_row *m = row_named(&s, "memcpy HtoD");
    ck_assert_int_eq(m->category, TP_CAT_MEMORY);
    ck_assert(m->med_ns == 64.0 && m->stddev_ns == 0.0);
    ck_assert_int_eq(m->n_layer_ops, 0);
    double pct = 0;
    uint64_t sum = 0;
    for (int k = 0; k < s.n_kernels; k++) pct += s.kernels[k].time_pct, sum += s.kernels[k].total_ns;
    ck_assert(fabs(pct - 100.0) < 1e-9);
    ck_assert_uint_eq(sum, s.kernel_ns);
    tp_profile_summary_free(&s);
    tp_trace_free(&t);
}
END_TEST

START_TEST(test_kernel_row_ties_and_categories) {
    /* Equal totals sort by name; one name in two categories makes two rows. */
    tp_trace t;
    tp_trace_init(&t);
    t.iterations = 1;
    static const rec_spec R[] = {{"zeta", -1, TP_CAT_OTHER, TP_REC_KERNEL, 10},
                                 {"alpha", -1, TP_CAT_OTHER, TP_REC_KERNEL, 10},
                                 {"alpha", -1, TP_CAT_NORM, TP_REC_KERNEL, 30}};
    add_iteration(&t, R, 3, 0, 100);
    tp_profile_summary s;
    analyze(&t, &s);
    ck_assert_int_eq(s.n_kernels, 3);
    ck_assert(strcmp(s.kernels[0].name, "alpha") == 0 && s.kernels[0].category == TP_CAT_NORM);
    ck_assert(strcmp(s.kernels[1].name, "alpha") == 0 && s.kernels[1].category == TP_CAT_OTHER);
    ck_assert_str_eq(s.kernels[2].name, "zeta");
    ck_assert_int_eq(s.n_layers, 0);
    ck_assert_int_eq(s.unattributed, 3);
    tp_profile_summary_free(&s);
    tp_trace_free(&t);
}
END_TEST

START_TEST(test_layer_rows) {
    tp_trace t;
    make_trace(&t);
    tp_profile_summary s;
    analyze(&t, &s);
    ck_assert_int_eq(s.n_layers, 5);
    static const uint64_t TOTAL[] = {1030, 610, 104, 606, 1204};
    static const double KPI[] = {2, 1, 1, 1, 1};
    uint64_t sum = s.unattributed_ns;
    double pct = 100.0 * (double)s.unattributed_ns / (double)s.kernel_ns;
    for (int o = 0; o < 5; o++) {
        const tp_layer_row *L = &s.layers[o];
        ck_assert_str_eq(L->layer, t.ops[o].layer);
        ck_assert_int_eq(L->kind, t.ops[o].kind);
        ck_assert_int_eq(L->prec, t.ops[o].prec);
        ck_assert_uint_eq(L->total_ns, TOTAL[o]);
        ck_assert(L->ns_per_iter == TOTAL[o] / 2.0);
        ck_assert(L->kernels_per_iter == KPI[o]);
        ck_assert(fabs(L->pct - 100.0 * (double)TOTAL[o] / 3630) < 1e-12);
        sum += L->total_ns;
        pct += L->pct;
    }
    ck_assert_uint_eq(sum, s.kernel_ns);
    ck_assert(fabs(pct - 100.0) < 1e-9);
    ck_assert(s.layers[0].ns_per_iter == 515.0 && s.layers[4].ns_per_iter == 602.0);
    /* patch_embed launched im2col first, then gemm_a */
    ck_assert_int_eq(s.layers[0].n_kernels, 2);
    ck_assert_str_eq(s.kernels[s.layers[0].kernels[0]].name, "im2col");
    ck_assert_str_eq(s.kernels[s.layers[0].kernels[1]].name, "gemm_a");
    ck_assert_int_eq(s.layers[2].n_kernels, 1);
    ck_assert_str_eq(s.kernels[s.layers[2].kernels[0]].name, "gelu");
    tp_profile_summary_free(&s);
    tp_trace_free(&t);
}
END_TEST

START_TEST(test_analyze_errors) {
    tp_trace t;
    tp_profile_summary s;
    tp_error e;
    make_trace(&t);
    t.iterations = 3; /* iteration 2 has no record */
    ck_assert_int_eq(tp_profile_analyze(&t, &s, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "iteration 2"));
    tp_profile_summary_free(&s);
    t.iterations = 2;
    t.rec[3].op = 5;
    ck_assert_int_eq(tp_profile_analyze(&t, &s, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "op"));
    tp_profile_summary_free(&s);
    t.rec[3].op = 0;
    t.rec[3].end_ns = t.rec[3].start_ns - 1;
    ck_assert_int_eq(tp_profile_analyze(&t, &s, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "end_ns"));
    tp_profile_summary_free(&s);
    t.iterations = 0;
    ck_assert_int_eq(tp_profile_analyze(&t, &s, &e), TP_ERR_ARG);
    tp_profile_summary_free(&s);
    tp_trace_free(&t);
}
END_TEST

/* ---- report and summary JSON ------------------------------------------------------------------------------ */

static char *print_report(const tp_trace *t, const tp_profile_summary *s, int top_n) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    tp_profile_print(t, s, top_n, f);
    fclose(f);
    return buf;
}

/* A pipeline's trace (layer names "stage.rest") gets per-stage rows summing its ops; a ViT's does not. */
START_TEST(test_stage_rows) {
    tp_trace t;
    make_trace(&t);
    tp_profile_summary s;
    analyze(&t, &s);
    ck_assert_int_eq(s.n_stages, 0); /* "patch_embed" has no stage */
    tp_profile_summary_free(&s);
    static const char *NAMES[5] = {"vision.patch_embed", "vision.blocks.0.attn.qkv", "prefix.layers.0.act",
                                   "expert.step0.layers.0.qkv", "expert.step1.layers.0.fc1"};
    for (int o = 0; o < 5; o++) snprintf(t.ops[o].layer, sizeof t.ops[o].layer, "%s", NAMES[o]);
    analyze(&t, &s);
    ck_assert_int_eq(s.n_stages, 3);
    ck_assert_str_eq(s.stages[0].name, "vision");
    ck_assert_str_eq(s.stages[1].name, "prefix");
    ck_assert_str_eq(s.stages[2].name, "expert");
    ck_assert_int_eq(s.stages[0].ops, 2);
    ck_assert_int_eq(s.stages[2].ops, 2);
    ck_assert(s.stages[0].ns_per_iter == (1030 + 610) / 2.0);
    ck_assert(s.stages[1].ns_per_iter == 104 / 2.0);
    ck_assert(s.stages[2].ns_per_iter == (606 + 1204) / 2.0);
    ck_assert(fabs(s.stages[0].pct + s.stages[1].pct + s.stages[2].pct + 100.0 * (double)s.unattributed_ns /
                   (double)s.kernel_ns - 100.0) < 1e-9);
    char *rep = print_report(&t, &s, 0);
    ck_assert_msg(strstr(rep, "Per-stage time") && strstr(rep, "expert            2"), "%s", rep);
    free(rep);
    json_t *j = tp_profile_summary_json(&t, &s);
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "stages")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "stages"), 1), "stage")),
                     "prefix");
    json_decref(j);
    tp_profile_summary_free(&s);
    tp_trace_free(&t);
}
END_TEST

START_TEST(test_print_sections) {
    tp_trace t;
    make_trace(&t);
    tp_profile_summary s;
    analyze(&t, &s);
    char *out = print_report(&t, &s, 3);
    static const char *WANT[] = {
        "vit_test",           "fp8",           "batch 4",         "Synthetic GPU",    "2 profiled iterations",
        "Traced kernel time per iteration 0.0018 ms", "span 0.0018 ms", "event-timed GPU compute time 0.0021 ms",
        "gap 0.0003 ms, 13.6 %", "Category breakdown", "GEMM", "conversion", "Top 3 kernels", "Time (%)",
        "Total Time (ns)",    "Instances",     "Avg (ns)",        "Med (ns)",         "Min (ns)",
        "Max (ns)",           "StdDev (ns)",   "Category",        "Layers",           "Name",
        "patch_embed ... (+3 more)", "Per-layer time", "Layer", "Precision", "Kernel(s)", "blocks.1.mlp.fc1",
        "im2col, gemm_a",     "(unattributed)", "total"};
    for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++)
        ck_assert_msg(strstr(out, WANT[i]) != NULL, "report lacks \"%s\":\n%s", WANT[i], out);
    /* top 3: the fourth kernel row is not in the kernel table (it is in no per-layer row either) */
    ck_assert_ptr_null(strstr(out, "foreign_kernel"));
    free(out);
    t.event_median_ms = 0;
    out = print_report(&t, &s, 0);
    ck_assert_ptr_null(strstr(out, "event-timed"));
    ck_assert_ptr_nonnull(strstr(out, "Top 5 kernels"));
    ck_assert_ptr_nonnull(strstr(out, "foreign_kernel"));
    free(out);
    tp_profile_summary_free(&s);
    tp_trace_free(&t);
}
END_TEST

START_TEST(test_summary_json) {
    tp_trace t;
    make_trace(&t);
    tp_profile_summary s;
    analyze(&t, &s);
    json_t *j = tp_profile_summary_json(&t, &s);
    ck_assert_ptr_nonnull(j);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    json_error_t je;
    j = json_loads(text, 0, &je);
    free(text);
    ck_assert_msg(j != NULL, "summary is not valid JSON: %s", je.text);
    ck_assert(json_number_value(json_object_get(j, "kernel_ns_per_iter")) == 1815.0);
    ck_assert(fabs(json_number_value(json_object_get(j, "gap_ms")) - 0.000285) < 1e-12);
    json_t *cats = json_object_get(j, "categories");
    ck_assert_int_eq((int)json_array_size(cats), TP_CAT_COUNT);
    double pct = 0;
    for (size_t i = 0; i < json_array_size(cats); i++)
        pct += json_number_value(json_object_get(json_array_get(cats, i), "percent"));
    ck_assert(fabs(pct - 100.0) < 1e-9);
    json_t *k0 = json_array_get(json_object_get(j, "kernels"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(k0, "name")), "gemm_a");
    ck_assert(json_number_value(json_object_get(k0, "med_ns")) == 355.0);
    ck_assert_int_eq((int)json_array_size(json_object_get(k0, "layers")), 4); /* the full list */
    json_t *layers = json_object_get(j, "layers");
    ck_assert_int_eq((int)json_array_size(layers), 5);
    json_t *l1 = json_array_get(layers, 1);
    ck_assert_str_eq(json_string_value(json_object_get(l1, "precision")), "fp8");
    ck_assert_str_eq(json_string_value(json_object_get(l1, "op")), "linear");
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "per_iteration")), 2);
    json_decref(j);
    tp_profile_summary_free(&s);
    tp_trace_free(&t);
}
END_TEST

/* ---- roofline ------------------------------------------------------------------------------------------------
 * Rates of 1 FLOP/ns at fp16, 2 FLOP/ns at fp8 and 2 bytes/ns of copy; op costs and floors (ns per iteration):
 *   op 0 patch_embed fp16  400 FLOP  600 B: compute 400, memory 300 -> 400 compute; time 515
 *   op 1 qkv fp8           400 FLOP  800 B: compute 200, memory 400 -> 400 memory;  time 305 (131 %: beats it)
 *   op 2 gelu fp16           0 FLOP    0 B: fused, floor 0;                           time  52
 *   op 3 qkv fp8           600 FLOP    0 B: compute 300 -> 300 compute;               time 303
 *   op 4 fc1 fp8          1000 FLOP 1000 B: 500 and 500, a tie -> 500 memory;         time 602
 * Total floor 1600 (compute 700, memory 900) against the ops' 1777 ns. */
static const double OP_FLOP[5] = {400, 400, 0, 600, 1000}, OP_BYTES[5] = {600, 800, 0, 0, 1000};

static void add_roofline(tp_trace *t) {
    t->rates.peak_tflops[TP_PREC_FP16] = 1e-3; /* 1e9 FLOP/s = 1 FLOP/ns */
    t->rates.peak_tflops[TP_PREC_FP8] = 2e-3;
    t->rates.copy_gbps = 2; /* 2 bytes/ns */
    for (int i = 0; i < 5; i++) t->ops[i].matmul_flop = OP_FLOP[i], t->ops[i].bytes = OP_BYTES[i];
}

START_TEST(test_roofline_op) {
    tp_roofline_rates r;
    memset(&r, 0, sizeof r);
    tp_roofline_floor f;
    tp_roofline_op(&r, TP_PREC_FP16, 0, 0, &f); /* nothing of its own: known without any rate */
    ck_assert(f.known && f.ns == 0 && f.compute_ns == 0 && f.memory_ns == 0);
    tp_roofline_op(&r, TP_PREC_FP16, 10, 0, &f); /* a needed rate missing */
    ck_assert(!f.known);
    r.copy_gbps = 4;
    tp_roofline_op(&r, TP_PREC_FP16, 10, 8, &f); /* memory known, compute not: partial */
    ck_assert(!f.known && f.ns == 2 && f.memory_ns == 2);
    r.peak_tflops[TP_PREC_FP16] = 1e-3;
    tp_roofline_op(&r, TP_PREC_FP16, 10, 8, &f);
    ck_assert(f.known && f.ns == 10 && f.compute_ns == 10 && f.memory_ns == 0);
    tp_roofline_op(&r, TP_PREC_COUNT, 10, 0, &f); /* an out-of-range precision has no rate */
    ck_assert(!f.known);
    tp_roofline_floor acc = {0, 0, 0, 1}, g = {5, 5, 0, 1};
    tp_roofline_add(&acc, &g);
    tp_roofline_add(&acc, &(tp_roofline_floor){3, 0, 3, 0});
    ck_assert(acc.ns == 8 && acc.compute_ns == 5 && acc.memory_ns == 3 && !acc.known);
}
END_TEST

START_TEST(test_roofline_analysis) {
    tp_trace t;
    make_trace(&t);
    tp_profile_summary s;
    analyze(&t, &s);
    ck_assert_int_eq(s.has_roofline, 0); /* no rates, no costs: no roofline, as in older traces */
    char *out = print_report(&t, &s, 0);
    ck_assert_ptr_null(strstr(out, "Roofline"));
    ck_assert_ptr_null(strstr(out, "floor ms"));
    free(out);
    json_t *j = tp_profile_summary_json(&t, &s);
    ck_assert(json_is_null(json_object_get(j, "roofline")));
    ck_assert(json_is_null(json_object_get(json_array_get(json_object_get(j, "layers"), 0), "floor_ns")));
    json_decref(j);
    tp_profile_summary_free(&s);

    add_roofline(&t);
    analyze(&t, &s);
    ck_assert_int_eq(s.has_roofline, 1);
    static const double FLOOR[5] = {400, 400, 0, 300, 500}, COMPUTE[5] = {400, 0, 0, 300, 0};
    for (int o = 0; o < 5; o++) {
        ck_assert_msg(s.layers[o].floor.known && s.layers[o].floor.ns == FLOOR[o] &&
                          s.layers[o].floor.compute_ns == COMPUTE[o] &&
                          s.layers[o].floor.memory_ns == FLOOR[o] - COMPUTE[o],
                      "op %d: floor %g (compute %g, memory %g)", o, s.layers[o].floor.ns, s.layers[o].floor.compute_ns,
                      s.layers[o].floor.memory_ns);
    }
    ck_assert(s.floor.known && s.floor.ns == 1600 && s.floor.compute_ns == 700 && s.floor.memory_ns == 900);
    ck_assert(s.attributed_ns_per_iter == 1777);
    ck_assert_int_eq(s.n_by_kind, 3); /* in order of first appearance; the fused GELU has time, so a row */
    ck_assert(s.by_kind[0].kind == TP_OP_PATCH_EMBED && s.by_kind[0].ops == 1 && s.by_kind[0].floor.ns == 400);
    ck_assert(s.by_kind[1].kind == TP_OP_LINEAR && s.by_kind[1].ops == 3 && s.by_kind[1].ns_per_iter == 1210);
    ck_assert(s.by_kind[1].floor.ns == 1200 && s.by_kind[1].floor.compute_ns == 300);
    ck_assert(s.by_kind[2].kind == TP_OP_GELU && s.by_kind[2].ops == 1 && s.by_kind[2].floor.ns == 0);

    out = print_report(&t, &s, 0);
    static const char *WANT[] = {"floor ms", "bound", "attain %", "Roofline by op", "fp16 0.001 fp8 0.002 TFLOP/s",
                                 "copy 2 GB/s", "compute-bound", "memory-bound", "attainment %",
                                 "131.1", /* op 1 beats its floor: printed as measured */
                                 "77.7", "total             5     0.0018     0.0016         0.0007        0.0009",
                                 "would take 0.0016 ms", "1.31x the floor"};
    for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++)
        ck_assert_msg(strstr(out, WANT[i]) != NULL, "report lacks \"%s\":\n%s", WANT[i], out);
    free(out);
    j = tp_profile_summary_json(&t, &s);
    json_t *rf = json_object_get(j, "roofline"), *l1 = json_array_get(json_object_get(j, "layers"), 1);
    ck_assert(fabs(json_number_value(json_object_get(rf, "floor_ms")) - 1600e-6) < 1e-15);
    ck_assert(fabs(json_number_value(json_object_get(rf, "attainment")) - 1600.0 / 1777.0) < 1e-12);
    ck_assert(json_number_value(json_object_get(json_object_get(rf, "gemm_peak_tflops"), "fp8")) == 2e-3);
    ck_assert_int_eq((int)json_array_size(json_object_get(rf, "by_op")), 3);
    ck_assert_str_eq(json_string_value(json_object_get(l1, "bound")), "memory");
    ck_assert(fabs(json_number_value(json_object_get(l1, "attainment")) - 400.0 / 305.0) < 1e-12);
    ck_assert(json_is_null(json_object_get(json_array_get(json_object_get(j, "layers"), 2), "bound")));
    json_decref(j);
    tp_profile_summary_free(&s);

    t.rates.peak_tflops[TP_PREC_FP8] = 0; /* a rate not measured: those floors are partial, and said so */
    analyze(&t, &s);
    ck_assert(s.layers[0].floor.known && !s.layers[1].floor.known && !s.layers[3].floor.known && !s.floor.known);
    ck_assert(s.layers[1].floor.ns == 400); /* its memory term still counts */
    out = print_report(&t, &s, 0);
    ck_assert_ptr_nonnull(strstr(out, "partial"));
    free(out);
    tp_profile_summary_free(&s);
    tp_trace_free(&t);
}
END_TEST

/* ---- trace file -------------------------------------------------------------------------------------------- */

static void assert_traces_equal(const tp_trace *a, const tp_trace *b) {
    ck_assert_str_eq(a->model, b->model);
    ck_assert_str_eq(a->precision, b->precision);
    ck_assert_str_eq(a->gpu, b->gpu);
    ck_assert_int_eq(a->batch, b->batch);
    ck_assert_int_eq(a->iterations, b->iterations);
    ck_assert(a->event_median_ms == b->event_median_ms);
    ck_assert_int_eq(a->n_ops, b->n_ops);
    for (int i = 0; i < a->n_ops; i++) {
        ck_assert_str_eq(a->ops[i].layer, b->ops[i].layer);
        ck_assert_int_eq(a->ops[i].kind, b->ops[i].kind);
        ck_assert_int_eq(a->ops[i].prec, b->ops[i].prec);
        ck_assert_str_eq(a->ops[i].how, b->ops[i].how);
        ck_assert(a->ops[i].matmul_flop == b->ops[i].matmul_flop && a->ops[i].bytes == b->ops[i].bytes);
        ck_assert_int_eq(a->ops[i].call, b->ops[i].call);
        ck_assert_str_eq(a->ops[i].kernel, b->ops[i].kernel);
    }
    ck_assert(memcmp(&a->rates, &b->rates, sizeof a->rates) == 0);
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        const tp_trace_record *x = &a->rec[i], *y = &b->rec[i];
        ck_assert_str_eq(x->name, y->name);
        ck_assert(x->kind == y->kind && x->start_ns == y->start_ns && x->end_ns == y->end_ns);
        ck_assert(x->iteration == y->iteration && x->op == y->op && x->category == y->category);
        ck_assert(memcmp(x->grid, y->grid, sizeof x->grid) == 0 && memcmp(x->block, y->block, sizeof x->block) == 0);
        ck_assert(x->registers == y->registers && x->smem_static == y->smem_static);
        ck_assert(x->smem_dynamic == y->smem_dynamic && x->bytes == y->bytes && x->stream == y->stream);
        ck_assert(x->graph_node == y->graph_node);
    }
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    ck_assert_int_eq((long)fread(b, 1, (size_t)n, f), n);
    b[n] = '\0';
    fclose(f);
    return b;
}

START_TEST(test_save_load_roundtrip) {
    tp_trace t, u;
    make_trace(&t);
    /* timestamps beyond 32 bits, as CUPTI's are */
    for (int i = 0; i < t.n; i++) t.rec[i].start_ns += 1700000000000000000ull, t.rec[i].end_ns += 1700000000000000000ull;
    t.rec[1].bytes = 5000000000ull;
    t.rec[2].graph_node = 1ull << 40;
    t.rec[2].stream = 4000000000u;
    t.event_median_ms = 1.0 / 3.0;
    add_roofline(&t);
    t.rates.peak_tflops[TP_PREC_BF16] = 1.0 / 7.0; /* not representable in decimal: the round trip must be exact */
    t.ops[4].bytes = 5e12 / 3.0;
    char p1[512], p2[512];
    tmp_path(p1, sizeof p1, "a.trace.json");
    tmp_path(p2, sizeof p2, "b.trace.json");
    tp_error e;
    ck_assert_msg(tp_trace_save(&t, p1, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_trace_load(p1, &u, &e) == TP_OK, "%s", e.msg);
    assert_traces_equal(&t, &u);
    ck_assert_msg(tp_trace_save(&u, p2, &e) == TP_OK, "%s", e.msg);
    char *a = slurp(p1), *b = slurp(p2);
    ck_assert_str_eq(a, b); /* saving is deterministic */
    ck_assert_ptr_nonnull(strstr(a, "\"format\":\"tprof-trace-1\""));
    free(a);
    free(b);
    tp_trace_free(&u);
    /* empty trace */
    tp_trace_free(&t);
    ck_assert_msg(tp_trace_save(&t, p1, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_trace_load(p1, &u, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(u.n, 0);
    ck_assert_int_eq(u.n_ops, 0);
    tp_trace_free(&u);
    remove(p1);
    remove(p2);
}
END_TEST

/* Saves the synthetic trace, applies edit to its JSON, and expects load to fail with code naming `want`. */
typedef void (*json_edit)(json_t *root);

static void expect_load_error(json_edit edit, tp_status code, const char *want1, const char *want2) {
    tp_trace t, u;
    make_trace(&t);
    char p[512];
    tmp_path(p, sizeof p, "bad.trace.json");
    tp_error e;
    ck_assert_msg(tp_trace_save(&t, p, &e) == TP_OK, "%s", e.msg);
    tp_trace_free(&t);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    ck_assert_ptr_nonnull(root);
    edit(root);
    ck_assert_int_eq(json_dump_file(root, p, 0), 0);
    json_decref(root);
    e.msg[0] = '\0';
    ck_assert_int_eq(tp_trace_load(p, &u, &e), code);
    ck_assert_msg(strstr(e.msg, p) != NULL, "message lacks the file: %s", e.msg);
    ck_assert_msg(strstr(e.msg, want1) != NULL, "message lacks %s: %s", want1, e.msg);
    if (want2) ck_assert_msg(strstr(e.msg, want2) != NULL, "message lacks %s: %s", want2, e.msg);
    ck_assert_ptr_null(strchr(e.msg, '\n'));
    ck_assert_int_eq(u.n, 0); /* left empty */
    ck_assert_ptr_null(u.ops);
    tp_trace_free(&u);
    remove(p);
}

static json_t *rec(json_t *root, size_t i) { return json_array_get(json_object_get(root, "records"), i); }
static void e_missing_start(json_t *r) { json_object_del(rec(r, 2), "start_ns"); }
static void e_op_type(json_t *r) { json_object_set_new(rec(r, 1), "op", json_string("x")); }
static void e_op_range(json_t *r) { json_object_set_new(rec(r, 3), "op", json_integer(99)); }
static void e_category(json_t *r) { json_object_set_new(rec(r, 0), "category", json_string("bogus")); }
static void e_kind(json_t *r) { json_object_set_new(rec(r, 4), "kind", json_string("sync")); }
static void e_grid(json_t *r) { json_object_set_new(rec(r, 5), "grid", json_pack("[i,i]", 1, 2)); }
static void e_end(json_t *r) { json_object_set_new(rec(r, 6), "end_ns", json_integer(3)); }
static void e_iteration(json_t *r) { json_object_set_new(rec(r, 7), "iteration", json_integer(2)); }
static void e_op_prec(json_t *r) { json_object_del(json_array_get(json_object_get(r, "ops"), 1), "precision"); }
static void e_op_kind(json_t *r) {
    json_object_set_new(json_array_get(json_object_get(r, "ops"), 4), "op", json_string("conv3d"));
}
static void e_iterations(json_t *r) { json_object_del(r, "iterations"); }
static void e_format(json_t *r) { json_object_set_new(r, "format", json_string("tprof-trace-0")); }
static void e_records(json_t *r) { json_object_set_new(r, "records", json_object()); }
static void e_op_bytes(json_t *r) {
    json_object_set_new(json_array_get(json_object_get(r, "ops"), 3), "bytes", json_real(-1));
}
static void e_op_flop(json_t *r) {
    json_object_set_new(json_array_get(json_object_get(r, "ops"), 2), "matmul_flop", json_string("many"));
}
static void e_peak_prec(json_t *r) {
    json_object_set_new(json_object_get(r, "gemm_peak_tflops"), "fp7", json_real(100));
}
static void e_peak_value(json_t *r) {
    json_object_set_new(json_object_get(r, "gemm_peak_tflops"), "fp16", json_string("fast"));
}
static void e_copy(json_t *r) { json_object_set_new(r, "copy_gbps", json_real(-3)); }

START_TEST(test_load_errors) {
    expect_load_error(e_missing_start, TP_ERR_FORMAT, "records[2]", "\"start_ns\" missing");
    expect_load_error(e_op_type, TP_ERR_FORMAT, "records[1]", "\"op\" must be an integer");
    expect_load_error(e_op_range, TP_ERR_FORMAT, "records[3]", "\"op\" is 99");
    expect_load_error(e_category, TP_ERR_FORMAT, "records[0]", "\"category\"");
    expect_load_error(e_kind, TP_ERR_FORMAT, "records[4]", "\"kind\"");
    expect_load_error(e_grid, TP_ERR_FORMAT, "records[5]", "\"grid\"");
    expect_load_error(e_end, TP_ERR_FORMAT, "records[6]", "\"end_ns\"");
    expect_load_error(e_iteration, TP_ERR_FORMAT, "records[7]", "\"iteration\"");
    expect_load_error(e_op_prec, TP_ERR_FORMAT, "ops[1]", "\"precision\" missing");
    expect_load_error(e_op_kind, TP_ERR_FORMAT, "ops[4]", "\"op\"");
    expect_load_error(e_iterations, TP_ERR_FORMAT, "top level", "\"iterations\" missing");
    expect_load_error(e_format, TP_ERR_FORMAT, "\"format\"", NULL);
    expect_load_error(e_records, TP_ERR_FORMAT, "\"records\" must be an array", NULL);
    expect_load_error(e_op_bytes, TP_ERR_FORMAT, "ops[3]", "\"bytes\" must be a finite number >= 0");
    expect_load_error(e_op_flop, TP_ERR_FORMAT, "ops[2]", "\"matmul_flop\"");
    expect_load_error(e_peak_prec, TP_ERR_FORMAT, "\"gemm_peak_tflops\"", "unknown precision");
    expect_load_error(e_peak_value, TP_ERR_FORMAT, "\"gemm_peak_tflops\"", "finite number");
    expect_load_error(e_copy, TP_ERR_FORMAT, "top level", "\"copy_gbps\"");

    tp_trace u;
    tp_error e;
    char p[512];
    tmp_path(p, sizeof p, "missing.trace.json");
    ck_assert_int_eq(tp_trace_load(p, &u, &e), TP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, p));
    tmp_path(p, sizeof p, "syntax.trace.json");
    FILE *f = fopen(p, "w");
    fputs("{\"format\": \"tprof-trace-1\",\n \"model\": }", f);
    fclose(f);
    ck_assert_int_eq(tp_trace_load(p, &u, &e), TP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "line 2"));
    ck_assert_ptr_null(strchr(e.msg, '\n'));
    remove(p);
}
END_TEST

/* The executed program in a trace (each op's call and its kernel): saved and read back, an op fused into another's
 * call shown in the per-layer table with that call's kernel and layer, a call that is no earlier head refused. */
START_TEST(test_trace_program) {
    tp_trace t, u;
    make_trace(&t);
    t.ops = realloc(t.ops, 6 * sizeof *t.ops);
    ck_assert_ptr_nonnull(t.ops);
    memset(&t.ops[5], 0, sizeof t.ops[5]);
    snprintf(t.ops[5].layer, sizeof t.ops[5].layer, "blocks.1.residual2");
    t.ops[5].kind = TP_OP_ADD;
    t.ops[5].prec = TP_PREC_FP16;
    t.n_ops = 6;
    for (int i = 0; i < 5; i++) {
        t.ops[i].call = i;
        snprintf(t.ops[i].kernel, sizeof t.ops[i].kernel, "%s", t.ops[i].kind == TP_OP_GELU ? "gelu" : "gemm");
    }
    t.ops[5].call = 4; /* the residual add in fc1's epilogue (in this synthetic graph) */
    snprintf(t.ops[5].kernel, sizeof t.ops[5].kernel, "gemm");
    char p[512];
    tmp_path(p, sizeof p, "program.trace.json");
    tp_error e;
    ck_assert_msg(tp_trace_save(&t, p, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_trace_load(p, &u, &e) == TP_OK, "%s", e.msg);
    assert_traces_equal(&t, &u);
    tp_profile_summary s;
    analyze(&u, &s);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tp_profile_print(&u, &s, 0, f);
    fclose(f);
    const char *row = strstr(buf, "\nblocks.1.residual2");
    ck_assert_ptr_nonnull(row);
    const char *eol = strchr(row + 1, '\n');
    ck_assert_msg(strstr(row, "(in the gemm call of blocks.1.mlp.fc1)") && strstr(row, "(in the gemm call of") < eol,
                  "%.200s", row);
    free(buf);
    tp_profile_summary_free(&s);
    tp_trace_free(&u);
    /* a call that is not an earlier op heading its own call */
    t.ops[5].call = 2; /* op 2 heads its call: fine */
    ck_assert_msg(tp_trace_save(&t, p, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_trace_load(p, &u, &e) == TP_OK, "%s", e.msg);
    tp_trace_free(&u);
    t.ops[3].call = 2;
    t.ops[5].call = 3; /* op 3 is fused into op 2's call: no head */
    ck_assert_msg(tp_trace_save(&t, p, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(tp_trace_load(p, &u, &e), TP_ERR_FORMAT);
    ck_assert_msg(strstr(e.msg, "ops[5]") && strstr(e.msg, "\"call\""), "%s", e.msg);
    tp_trace_free(&u);
    tp_trace_free(&t);
    remove(p);
}
END_TEST

START_TEST(test_category_names) {
    static const char *NAMES[] = {"GEMM",     "attention",  "normalization", "activation", "elementwise",
                                  "quantize", "conversion", "memory",        "other",      "communication"};
    for (int c = 0; c < TP_CAT_COUNT; c++) {
        ck_assert_str_eq(tp_category_name((tp_category)c), NAMES[c]);
        ck_assert_int_eq(tp_category_parse(NAMES[c]), c);
    }
    ck_assert_int_eq(tp_category_parse("gemm"), -1);
    ck_assert_int_eq(tp_category_parse(NULL), -1);
    ck_assert_str_eq(tp_category_name(TP_CAT_COUNT), "?");
}
END_TEST

/* ---- Chrome trace ------------------------------------------------------------------------------------------- */

static double num(json_t *ev, const char *k) { return json_number_value(json_object_get(ev, k)); }
static int tid(json_t *ev) { return (int)json_integer_value(json_object_get(ev, "tid")); }
static const char *str(json_t *ev, const char *k) { return json_string_value(json_object_get(ev, k)); }

START_TEST(test_chrome_trace) {
    tp_trace t;
    make_trace(&t);
    char p[512];
    tmp_path(p, sizeof p, "chrome.json");
    tp_error e;
    ck_assert_int_eq(tp_chrome_trace_write(&t, 2, p, &e), TP_ERR_ARG);
    ck_assert_msg(tp_chrome_trace_write(&t, 1, p, &e) == TP_OK, "%s", e.msg);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    ck_assert_msg(root != NULL, "Chrome trace is not valid JSON: %s at line %d", je.text, je.line);
    ck_assert_str_eq(str(root, "displayTimeUnit"), "ns");
    json_t *ev = json_object_get(root, "traceEvents");
    ck_assert(json_is_array(ev));

    int kernels = 0, meta = 0, seen[N_ITER1] = {0};
    int block_at[2] = {-1, -1}, layer_at[5] = {-1, -1, -1, -1, -1};
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *x = json_array_get(ev, i);
        const char *ph = str(x, "ph");
        ck_assert_ptr_nonnull(ph);
        if (strcmp(ph, "M") == 0) {
            meta++;
            continue;
        }
        ck_assert_str_eq(ph, "X");
        ck_assert_int_eq((int)json_integer_value(json_object_get(x, "pid")), 1);
        if (tid(x) == 1) {
            /* each record of iteration 1, in order, at its offset from the iteration's first start */
            ck_assert_int_lt(kernels, N_ITER1);
            ck_assert_str_eq(str(x, "name"), ITER1[kernels].name);
            ck_assert(fabs(num(x, "dur") - ITER1[kernels].dur / 1000.0) < 1e-12);
            json_t *args = json_object_get(x, "args");
            ck_assert_str_eq(str(args, "category"), tp_category_name(ITER1[kernels].cat));
            ck_assert_ptr_nonnull(json_object_get(args, "grid"));
            ck_assert_ptr_nonnull(json_object_get(args, "registers"));
            if (kernels == 0) ck_assert(num(x, "ts") == 0.0);
            seen[kernels]++;
            kernels++;
        } else {
            ck_assert_int_eq(tid(x), 2);
            const char *name = str(x, "name");
            if (strcmp(name, "blocks.0") == 0) block_at[0] = (int)i;
            else if (strcmp(name, "blocks.1") == 0) block_at[1] = (int)i;
            else {
                int o = 0;
                while (o < 5 && strcmp(t.ops[o].layer, name) != 0) o++;
                ck_assert_msg(o < 5, "unexpected slice %s", name);
                layer_at[o] = (int)i;
                ck_assert_str_eq(str(json_object_get(x, "args"), "precision"), tp_precision_name(t.ops[o].prec));
            }
        }
    }
    ck_assert_int_eq(kernels, N_ITER1);
    ck_assert_int_ge(meta, 3);
    for (int o = 0; o < 5; o++) ck_assert_msg(layer_at[o] >= 0, "no slice for %s", t.ops[o].layer);
    /* layer slices: first to last kernel of the op; blocks contain their layers and come before them */
    json_t *pe = json_array_get(ev, (size_t)layer_at[0]);
    ck_assert(num(pe, "ts") == 0.0 && fabs(num(pe, "dur") - (110 + GAP + 420) / 1000.0) < 1e-12);
    for (int o = 1; o < 5; o++) {
        int b = o <= 2 ? 0 : 1;
        ck_assert_int_ge(block_at[b], 0);
        ck_assert_int_lt(block_at[b], layer_at[o]);
        json_t *B = json_array_get(ev, (size_t)block_at[b]), *L = json_array_get(ev, (size_t)layer_at[o]);
        ck_assert_int_eq(tid(B), tid(L));
        ck_assert(num(B, "ts") <= num(L, "ts"));
        ck_assert(num(B, "ts") + num(B, "dur") >= num(L, "ts") + num(L, "dur") - 1e-9);
    }
    /* blocks do not overlap each other nor patch_embed */
    json_t *B0 = json_array_get(ev, (size_t)block_at[0]), *B1 = json_array_get(ev, (size_t)block_at[1]);
    ck_assert(num(pe, "ts") + num(pe, "dur") <= num(B0, "ts"));
    ck_assert(num(B0, "ts") + num(B0, "dur") <= num(B1, "ts"));
    ck_assert(fabs(num(B0, "dur") - (310 + GAP + 54) / 1000.0) < 1e-12);
    json_decref(root);
    remove(p);
    tp_trace_free(&t);
}
END_TEST

/* A persistent decode step's records (tp_trace_add_persistent): instructions on SMs become kernel records named by
 * what they are, on their SM's stream; where no SM runs one, a dependency wait charged to the op of the instruction
 * that ends it; the busy time is the step's span; the Chrome trace has one row per SM; save and load keep the
 * flag. Ops: 0 the embedding, 1 a linear, 2 the KV attention. Iteration 0 (ns): SM 0 embed [0, 10), gemv [20, 120);
 * SM 1 gemv [30, 110), attention [130, 150); iteration 1 the same shifted by 1000. Instructions busy 10 + 100 + 20 =
 * 130 a step; waits [10, 20) (into the linear) and [120, 130) (into the attention): the linear 110, the attention
 * 30, the step 150. */
START_TEST(test_persistent_records) {
    tp_trace t;
    tp_trace_init(&t);
    t.n_ops = 3;
    t.ops = calloc(3, sizeof *t.ops);
    ck_assert_ptr_nonnull(t.ops);
    static const char *const layers[] = {"model.embed_tokens", "model.layers.0.mlp.down_proj", "model.layers.0.self_attn"};
    static const tp_op_kind kinds[] = {TP_OP_TOKEN_EMBED, TP_OP_LINEAR, TP_OP_KV_ATTENTION};
    for (int o = 0; o < 3; o++) {
        snprintf(t.ops[o].layer, sizeof t.ops[o].layer, "%s", layers[o]);
        t.ops[o].kind = kinds[o];
        t.ops[o].call = o;
    }
    snprintf(t.model, sizeof t.model, "llama");
    snprintf(t.precision, sizeof t.precision, "fp16");
    const int op[] = {0, 1, 1, 2}, sm[] = {0, 0, 1, 1};
    tp_error e;
    for (int it = 0; it < 2; it++) {
        const uint64_t base = 1000u * (uint64_t)it;
        const uint64_t a[] = {base, base + 20, base + 30, base + 130}, b[] = {base + 10, base + 120, base + 110, base + 150};
        ck_assert_msg(tp_trace_add_persistent(&t, it, op, sm, a, b, 4, 2, 288, &e) == TP_OK, "%s", e.msg);
    }
    ck_assert_int_eq(t.persistent, 1);
    ck_assert_int_eq(t.iterations, 2);
    ck_assert_int_eq(t.n, 12); /* 4 instructions and 2 waits a step */
    ck_assert_str_eq(t.rec[1].name, "persistent gemv");
    ck_assert_str_eq(t.rec[3].name, "persistent attention");
    ck_assert_str_eq(t.rec[0].name, "persistent embed");
    ck_assert_int_eq((int)t.rec[2].stream, 1);
    ck_assert_int_eq(t.rec[3].category, TP_CAT_ATTENTION);
    ck_assert_str_eq(t.rec[4].name, "persistent dependency wait");
    ck_assert_int_eq(t.rec[4].op, 1);
    ck_assert_int_eq(t.rec[4].category, TP_CAT_OTHER);
    ck_assert_int_eq((int)(t.rec[4].end_ns - t.rec[4].start_ns), 10);
    ck_assert_int_eq(t.rec[5].op, 2);
    ck_assert_int_eq((int)t.rec[5].start_ns, 120);
    ck_assert_int_eq((int)t.rec[5].stream, 1);
    tp_profile_summary s;
    ck_assert_msg(tp_profile_analyze(&t, &s, &e) == TP_OK, "%s", e.msg);
    ck_assert(fabs(s.kernel_ns_per_iter - 150.0) < 1e-9);
    ck_assert(fabs(s.raw_kernel_ns_per_iter - 230.0) < 1e-9);
    ck_assert(fabs(s.cat_ns_per_iter[TP_CAT_OTHER] - 20.0) < 1e-9);
    ck_assert_int_eq(s.n_layers, 3);
    ck_assert(fabs(s.layers[1].ns_per_iter - 110.0) < 1e-9);
    ck_assert(fabs(s.layers[2].ns_per_iter - 30.0) < 1e-9);
    char out[1 << 14];
    FILE *f = fmemopen(out, sizeof out, "w");
    ck_assert_ptr_nonnull(f);
    tp_profile_print(&t, &s, 5, f);
    fclose(f);
    ck_assert_msg(strstr(out, "A persistent decode step: CUPTI sees one kernel"), "%s", out);
    json_t *j = tp_profile_summary_json(&t, &s);
    ck_assert_str_eq(str(j, "source"), "persistent kernel instructions (%globaltimer)");
    json_decref(j);
    tp_profile_summary_free(&s);
    /* the Chrome trace: one row per SM */
    char p[512];
    tmp_path(p, sizeof p, "persistent_chrome.json");
    ck_assert_msg(tp_chrome_trace_write(&t, 0, p, &e) == TP_OK, "%s", e.msg);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    ck_assert_ptr_nonnull(root);
    json_t *ev = json_object_get(root, "traceEvents");
    int sm_rows = 0, on_sm1 = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *x = json_array_get(ev, i);
        if (strcmp(str(x, "ph"), "M") == 0) {
            const char *name = str(json_object_get(x, "args"), "name");
            sm_rows += strncmp(name, "SM ", 3) == 0;
        } else if (tid(x) == 3 + 1) {
            on_sm1++;
        }
    }
    ck_assert_int_eq(sm_rows, 2);
    ck_assert_int_eq(on_sm1, 3); /* the gemv, the attention and the wait that ends at it */
    json_decref(root);
    remove(p);
    /* save and load keep the flag */
    tmp_path(p, sizeof p, "persistent.trace.json");
    ck_assert_msg(tp_trace_save(&t, p, &e) == TP_OK, "%s", e.msg);
    tp_trace u;
    ck_assert_msg(tp_trace_load(p, &u, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(u.persistent, 1);
    ck_assert_int_eq(u.n, 12);
    tp_trace_free(&u);
    remove(p);
    /* refused: an op outside the trace, an end before its start */
    const int bad_op[] = {3};
    const uint64_t a0[] = {5}, b0[] = {9}, b1[] = {4};
    ck_assert_int_eq(tp_trace_add_persistent(&t, 0, bad_op, sm, a0, b0, 1, 2, 288, &e), TP_ERR_ARG);
    ck_assert_int_eq(tp_trace_add_persistent(&t, 0, op, sm, a0, b1, 1, 2, 288, &e), TP_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "ends before it starts"), "%s", e.msg);
    tp_trace_free(&t);
}
END_TEST

/* ---- GPU traces committed as fixtures ------------------------------------------------------------------------ */

START_TEST(test_fixture_traces) {
    glob_t g;
    int rc = glob("tests/fixtures/*.trace.json", 0, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        fprintf(stderr, "test_profile: no tests/fixtures/*.trace.json yet; fixture checks skipped\n");
        return;
    }
    ck_assert_int_eq(rc, 0);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        tp_trace t;
        tp_profile_summary s;
        tp_error e;
        ck_assert_msg(tp_trace_load(path, &t, &e) == TP_OK, "%s", e.msg);
        ck_assert_msg(tp_profile_analyze(&t, &s, &e) == TP_OK, "%s: %s", path, e.msg);
        int bad = 0;
        for (int r = 0; r < t.n; r++) bad += t.rec[r].iteration >= 0 && t.rec[r].kind == TP_REC_KERNEL && t.rec[r].op < 0;
        ck_assert_msg(bad == 0, "%s: %d kernels not attributed to an op", path, bad);
        uint64_t sum = 0;
        double pct = 0;
        for (int c = 0; c < TP_CAT_COUNT; c++) sum += s.cat_ns[c], pct += s.cat_pct[c];
        ck_assert_msg(sum == s.kernel_ns, "%s: categories sum to %llu ns, kernels to %llu", path,
                      (unsigned long long)sum, (unsigned long long)s.kernel_ns);
        ck_assert_msg(fabs(pct - 100.0) < 1e-9, "%s: category percentages sum to %.12f", path, pct);
        if (t.event_median_ms > 0) {
            double rel = fabs(s.kernel_ns_per_iter * 1e-6 - t.event_median_ms) / t.event_median_ms;
            ck_assert_msg(rel < 0.05, "%s: traced %.4f ms per iteration vs event-timed %.4f ms: %.1f %% apart", path,
                          s.kernel_ns_per_iter * 1e-6, t.event_median_ms, 100 * rel);
        }
        if (s.has_roofline) { /* recorded with the roofline: the rows add up, each floor is positive and sane */
            double sum = 0;
            for (int k = 0; k < s.n_by_kind; k++) sum += s.by_kind[k].floor.ns;
            ck_assert_msg(fabs(sum - s.floor.ns) <= 1e-9 * s.floor.ns, "%s: by-op floors %g, total %g", path, sum,
                          s.floor.ns);
            ck_assert_msg(s.floor.known && s.floor.ns > 0 && s.floor.ns < s.attributed_ns_per_iter * 1.5,
                          "%s: floor %g ns against %g traced", path, s.floor.ns, s.attributed_ns_per_iter);
        }
        char *out = print_report(&t, &s, 10);
        ck_assert_ptr_nonnull(strstr(out, "Category breakdown"));
        ck_assert_ptr_nonnull(strstr(out, "Per-layer time"));
        free(out);
        char p[512];
        tmp_path(p, sizeof p, "fixture.chrome.json");
        ck_assert_msg(tp_chrome_trace_write(&t, t.iterations - 1, p, &e) == TP_OK, "%s", e.msg);
        json_error_t je;
        json_t *root = json_load_file(p, 0, &je);
        ck_assert_msg(root != NULL, "%s: Chrome trace is not valid JSON: %s", path, je.text);
        json_decref(root);
        remove(p);
        tp_profile_summary_free(&s);
        tp_trace_free(&t);
    }
    globfree(&g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("profile");
    TCase *t = tcase_create("analysis");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_category_names);
    tcase_add_test(t, test_totals_and_categories);
    tcase_add_test(t, test_overlap_busy_time);
    tcase_add_test(t, test_kernel_rows);
    tcase_add_test(t, test_kernel_row_ties_and_categories);
    tcase_add_test(t, test_layer_rows);
    tcase_add_test(t, test_stage_rows);
    tcase_add_test(t, test_analyze_errors);
    tcase_add_test(t, test_print_sections);
    tcase_add_test(t, test_summary_json);
    tcase_add_test(t, test_roofline_op);
    tcase_add_test(t, test_roofline_analysis);
    tcase_add_test(t, test_save_load_roundtrip);
    tcase_add_test(t, test_load_errors);
    tcase_add_test(t, test_trace_program);
    tcase_add_test(t, test_chrome_trace);
    tcase_add_test(t, test_persistent_records);
    tcase_add_test(t, test_fixture_traces);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
