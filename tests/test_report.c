/* test_report.c: `tprof compare` (src/report/compare.h) without a GPU: the Amdahl figures on a tiny synthetic
 * pair of traces with hand-computed answers, and on the two H200 traces committed as fixtures (ViT-B/16, batch
 * 64, fp16 and fp8) against values recomputed here from the raw records and the per-layer rows; the report
 * files written from those fixtures: every section present, the JSON parses and holds the data, both SVGs are
 * well-formed XML, the HTML inlines them and escapes kernel names; FP8 attention's per-layer accuracy cost in every
 * format (Markdown, HTML, JSON) for the engines that have it, absent for the others. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile/analysis.h"
#include "profile/trace.h"
#include "report/bench_report.h"
#include "report/compare.h"

#define FIX16 "tests/fixtures/h200_vit-b16_b64_fp16.trace.json"
#define FIX8 "tests/fixtures/h200_vit-b16_b64_fp8.trace.json"
#define FIX16R "tests/fixtures/h200_vit-b16_b64_fp16_roofline.trace.json" /* recorded with the roofline's inputs */
#define FIX8R "tests/fixtures/h200_vit-b16_b64_fp8_roofline.trace.json"
#define PEAK16 765.0 /* TFLOP/s, FP16 GEMM 8192^3 measured on the H200 (docs/device.md) */
#define PEAK8 1387.0 /* TFLOP/s, FP8 E4M3 GEMM 8192^3 */

/* Relative closeness; values near zero (small gaps) compare against `scale` instead of themselves. */
static int close_to(double a, double b, double scale) {
    double m = fmax(fmax(fabs(a), fabs(b)), scale);
    return fabs(a - b) <= 1e-9 * m;
}

/* ---- the synthetic pair ------------------------------------------------------------------------------------
 * 3 ops, 2 profiled passes, identical per pass. Baseline (all fp16): op 0 GEMM 10 ns, op 1 GEMM 20 ns, op 2
 * attention 30 ns. Entry: op 1 runs in fp8 (the only changed op): op 0 GEMM 10, op 1 GEMM 14 plus a quantize
 * kernel of 4, op 2 attention 31. With r = 2:
 *   f = 20 / 60 = 1/3; bound = 1 / (40/60 + 10/60) = 1.2;
 *   ideal = 10 + 20/2 + 30 = 50 ns = 5e-5 ms; actual = 10 + 14 + 4 + 31 = 59 ns;
 *   gaps: GEMM 24 - (10 + 10) = 4 ns, attention 31 - 30 = 1 ns, quantize 4 - 0 = 4 ns; sum 9 = 59 - 50. */
typedef struct {
    int op;
    tp_category cat;
    uint64_t dur;
    const char *name;
} spec;

static void make_trace(tp_trace *t, const spec *s, int n, int fp8_op1) {
    static const char *LAYERS[] = {"blocks.0.attn.qkv", "blocks.0.mlp.fc1", "blocks.0.attn"};
    static const tp_op_kind KINDS[] = {TP_OP_LINEAR, TP_OP_LINEAR, TP_OP_ATTENTION};
    tp_trace_init(t);
    t->n_ops = 3;
    t->ops = calloc(3, sizeof *t->ops);
    ck_assert_ptr_nonnull(t->ops);
    for (int i = 0; i < 3; i++) {
        snprintf(t->ops[i].layer, sizeof t->ops[i].layer, "%s", LAYERS[i]);
        t->ops[i].kind = KINDS[i];
        t->ops[i].prec = i == 1 && fp8_op1 ? TP_PREC_FP8 : TP_PREC_FP16;
        snprintf(t->ops[i].how, sizeof t->ops[i].how, "%s",
                 i == 1 && fp8_op1   ? "e4m3 GEMM"
                 : i == 0 && fp8_op1 ? "f16 GEMM; kept fp16 by policy"
                                     : "f16 GEMM");
    }
    snprintf(t->model, sizeof t->model, "tiny");
    snprintf(t->precision, sizeof t->precision, fp8_op1 ? "fp8" : "fp16");
    snprintf(t->gpu, sizeof t->gpu, "Synthetic GPU");
    t->batch = 2;
    t->iterations = 2;
    uint64_t at = 1000;
    for (int it = 0; it < 2; it++)
        for (int k = 0; k < n; k++) {
            tp_trace_record r;
            memset(&r, 0, sizeof r);
            r.name = (char *)s[k].name;
            r.start_ns = at;
            r.end_ns = at + s[k].dur;
            r.iteration = it;
            r.op = s[k].op;
            r.category = s[k].cat;
            at = r.end_ns + 3;
            tp_error e;
            ck_assert_msg(tp_trace_add(t, &r, &e) == TP_OK, "%s", e.msg);
        }
}

static const spec BASE[] = {{0, TP_CAT_GEMM, 10, "gemm<half>"},
                            {1, TP_CAT_GEMM, 20, "gemm<half>"},
                            {2, TP_CAT_ATTENTION, 30, "attn<half> | a&b"}};
static const spec ENTRY[] = {{0, TP_CAT_GEMM, 10, "gemm<half>"},
                             {1, TP_CAT_GEMM, 14, "gemm<e4m3>"},
                             {1, TP_CAT_QUANT, 4, "quantize<e4m3>"},
                             {2, TP_CAT_ATTENTION, 31, "attn<half> | a&b"}};

typedef struct {
    tp_trace t;
    tp_profile_summary s;
    tp_compare_entry e;
} loaded;

static void finish(loaded *x, tp_precision p, double median_ms) {
    tp_error err;
    ck_assert_msg(tp_profile_analyze(&x->t, &x->s, &err) == TP_OK, "%s", err.msg);
    memset(&x->e, 0, sizeof x->e);
    x->e.prec = p;
    x->e.trace = &x->t;
    x->e.prof = &x->s;
    x->e.median_ms = median_ms;
}

static void make_pair(loaded *b, loaded *e) {
    make_trace(&b->t, BASE, 3, 0);
    make_trace(&e->t, ENTRY, 4, 1);
    finish(b, TP_PREC_FP16, 0.006);
    finish(e, TP_PREC_FP8, 0.005);
}

static void unload(loaded *x) {
    tp_profile_summary_free(&x->s);
    tp_trace_free(&x->t);
}

START_TEST(test_amdahl_synthetic) {
    loaded b, e;
    make_pair(&b, &e);
    tp_amdahl a;
    tp_error err;
    ck_assert_msg(tp_compare_amdahl(&b.e, &e.e, 2.0, &a, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(a.n_changed, 1);
    ck_assert(close_to(a.f, 1.0 / 3.0, 0));
    ck_assert(a.r == 2.0);
    ck_assert(close_to(a.bound, 1.2, 0));
    ck_assert(close_to(a.measured, 1.2, 0));
    ck_assert(close_to(a.ideal_ms, 50e-6, 0));
    ck_assert(close_to(a.actual_ms, 59e-6, 0));
    ck_assert(close_to(a.gap_ms[TP_CAT_GEMM], 4e-6, 0));
    ck_assert(close_to(a.gap_ms[TP_CAT_ATTENTION], 1e-6, 0));
    ck_assert(close_to(a.gap_ms[TP_CAT_QUANT], 4e-6, 0));
    double sum = 0;
    for (int c = 0; c < TP_CAT_COUNT; c++) {
        if (c != TP_CAT_GEMM && c != TP_CAT_ATTENTION && c != TP_CAT_QUANT) ck_assert(a.gap_ms[c] == 0);
        sum += a.gap_ms[c];
    }
    ck_assert(close_to(sum, 9e-6, 0));

    /* r = 1: the bound is 1 whatever f, and the ideal is the baseline itself */
    ck_assert(tp_compare_amdahl(&b.e, &e.e, 1.0, &a, &err) == TP_OK);
    ck_assert(close_to(a.bound, 1.0, 0) && close_to(a.ideal_ms, 60e-6, 0));
    /* unknown latency: measured is 0 */
    e.e.median_ms = 0;
    ck_assert(tp_compare_amdahl(&b.e, &e.e, 2.0, &a, &err) == TP_OK);
    ck_assert(a.measured == 0);
    /* errors */
    ck_assert_int_eq(tp_compare_amdahl(&b.e, &e.e, 0, &a, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_compare_amdahl(&b.e, &e.e, NAN, &a, &err), TP_ERR_ARG);
    snprintf(e.t.ops[2].layer, sizeof e.t.ops[2].layer, "blocks.0.attention");
    ck_assert_int_eq(tp_compare_amdahl(&b.e, &e.e, 2.0, &a, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "op 2") && strstr(err.msg, "blocks.0.attention"), "%s", err.msg);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
    snprintf(e.t.ops[2].layer, sizeof e.t.ops[2].layer, "blocks.0.attn");
    e.t.ops[2].kind = TP_OP_GELU;
    ck_assert_int_eq(tp_compare_amdahl(&b.e, &e.e, 2.0, &a, &err), TP_ERR_ARG);
    e.t.ops[2].kind = TP_OP_ATTENTION;
    e.t.batch = 4;
    ck_assert_int_eq(tp_compare_amdahl(&b.e, &e.e, 2.0, &a, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "batch 4") != NULL, "%s", err.msg);
    e.t.batch = 2;
    ck_assert(tp_compare_amdahl(&b.e, &e.e, 2.0, &a, &err) == TP_OK);
    e.e.prof = NULL;
    ck_assert_int_eq(tp_compare_amdahl(&b.e, &e.e, 2.0, &a, &err), TP_ERR_ARG);
    unload(&b);
    unload(&e);
}
END_TEST

/* ---- the H200 fixtures --------------------------------------------------------------------------------------- */

static void load_fixture(loaded *x, const char *path, tp_precision p) {
    tp_error err;
    ck_assert_msg(tp_trace_load(path, &x->t, &err) == TP_OK, "%s", err.msg);
    finish(x, p, x->t.event_median_ms);
    ck_assert_msg(x->t.event_median_ms > 0, "%s: no event_median_ms", path);
}

/* Plausible benchmark and accuracy numbers around the traces (the H200 run of the same day). */
static void load_fixtures(loaded *b, loaded *e) {
    load_fixture(b, FIX16, TP_PREC_FP16);
    load_fixture(e, FIX8, TP_PREC_FP8);
    loaded *x[2] = {b, e};
    static const double W[2] = {173135312.0, 88200848.0}, COS[2] = {0.9999989447, 0.9949193542},
                        L2[2] = {0.0014529318, 0.1007593650}, MAXA[2] = {0.0030671358, 0.2108811140},
                        TOP1[2] = {1.0, 0.75};
    for (int i = 0; i < 2; i++) {
        tp_compare_entry *c = &x[i]->e;
        c->mean_ms = c->median_ms * 1.003;
        c->p99_ms = c->median_ms * 1.04;
        c->cov = 0.0116;
        c->qps = 1000.0 / c->median_ms;
        c->images_per_s = 64 * c->qps;
        c->weight_bytes = W[i];
        c->cosine = COS[i], c->rel_l2 = L2[i], c->max_abs = MAXA[i], c->top1 = TOP1[i];
        c->ref_images = 8;
    }
}

START_TEST(test_fixture_categories) {
    loaded x[2];
    load_fixtures(&x[0], &x[1]);
    for (int i = 0; i < 2; i++) {
        const tp_profile_summary *s = &x[i].s;
        uint64_t sum = 0;
        double pct = 0;
        for (int c = 0; c < TP_CAT_COUNT; c++) sum += s->cat_ns[c], pct += s->cat_pct[c];
        ck_assert_uint_eq(sum, s->kernel_ns);
        ck_assert(fabs(pct - 100.0) < 1e-9);
        ck_assert_int_eq(s->n_layers, 125);
        ck_assert_int_eq(s->iterations, 3);
    }
    unload(&x[0]);
    unload(&x[1]);
}
END_TEST

START_TEST(test_amdahl_fixtures) {
    loaded b, e;
    load_fixtures(&b, &e);
    const double r = PEAK8 / PEAK16;
    tp_amdahl a;
    tp_error err;
    ck_assert_msg(tp_compare_amdahl(&b.e, &e.e, r, &a, &err) == TP_OK, "%s", err.msg);

    /* By hand from the per-layer rows: the changed ops are those whose executed precision differs. */
    int n_changed = 0;
    double chg_ns = 0;
    for (int o = 0; o < b.s.n_layers; o++) {
        ck_assert_str_eq(b.s.layers[o].layer, e.s.layers[o].layer);
        if (b.s.layers[o].prec == e.s.layers[o].prec) continue;
        n_changed++;
        chg_ns += b.s.layers[o].ns_per_iter;
        ck_assert_int_eq(b.s.layers[o].kind, TP_OP_LINEAR); /* only block linears go to fp8 here */
        ck_assert_int_eq(e.s.layers[o].prec, TP_PREC_FP8);
    }
    ck_assert_int_eq(n_changed, 48); /* qkv, proj, fc1, fc2 of 12 blocks; patch_embed and head kept fp16 */
    double f = chg_ns / b.s.kernel_ns_per_iter, bound = 1.0 / ((1.0 - f) + f / r);
    double ideal = (b.s.kernel_ns_per_iter - chg_ns + chg_ns / r) * 1e-6;
    ck_assert_int_eq(a.n_changed, 48);
    ck_assert_msg(close_to(a.f, f, 0), "f %.15g against %.15g", a.f, f);
    ck_assert(close_to(a.r, r, 0));
    ck_assert_msg(close_to(a.bound, bound, 0), "bound %.15g against %.15g", a.bound, bound);
    ck_assert_msg(close_to(a.ideal_ms, ideal, 0), "ideal %.15g against %.15g", a.ideal_ms, ideal);
    ck_assert(close_to(a.measured, b.t.event_median_ms / e.t.event_median_ms, 0));
    ck_assert(close_to(a.actual_ms, e.s.kernel_ns_per_iter * 1e-6, 0));
    ck_assert(f > 0.25 && f < 0.35); /* the fp16 GEMM share of this model at batch 64 */

    /* Per-category gaps from the records' busy time (tp_trace_busy_ns) in both traces: CUPTI's intervals of
     * consecutive kernels overlap by a few ns here, so busy time is slightly below the summed durations */
    double ideal_c[TP_CAT_COUNT] = {0}, act_c[TP_CAT_COUNT] = {0};
    uint64_t *bb = malloc(sizeof *bb * (size_t)b.t.n), *eb = malloc(sizeof *eb * (size_t)e.t.n);
    ck_assert(bb && eb);
    const uint64_t bt = tp_trace_busy_ns(&b.t, bb);
    ck_assert(bt == b.s.kernel_ns && bt <= b.s.raw_kernel_ns && bt > b.s.raw_kernel_ns - b.s.raw_kernel_ns / 1000);
    ck_assert(tp_trace_busy_ns(&e.t, eb) == e.s.kernel_ns);
    for (int i = 0; i < b.t.n; i++) {
        const tp_trace_record *x = &b.t.rec[i];
        if (x->iteration < 0) continue;
        double d = (double)bb[i];
        int changed = x->op >= 0 && b.t.ops[x->op].prec != e.t.ops[x->op].prec;
        ideal_c[x->category] += (changed ? d / r : d) / b.t.iterations * 1e-6;
    }
    for (int i = 0; i < e.t.n; i++) {
        const tp_trace_record *x = &e.t.rec[i];
        if (x->iteration >= 0) act_c[x->category] += (double)eb[i] / e.t.iterations * 1e-6;
    }
    free(bb);
    free(eb);
    double sum = 0;
    for (int c = 0; c < TP_CAT_COUNT; c++) {
        ck_assert_msg(close_to(a.gap_ms[c], act_c[c] - ideal_c[c], a.actual_ms), "%s: gap %.15g against %.15g",
                      tp_category_name((tp_category)c), a.gap_ms[c], act_c[c] - ideal_c[c]);
        sum += a.gap_ms[c];
    }
    ck_assert_msg(close_to(sum, a.actual_ms - a.ideal_ms, a.actual_ms), "gaps sum to %.15g, traced - ideal %.15g", sum,
                  a.actual_ms - a.ideal_ms);
    /* attention does not change precision: its gap is the fp8 trace's attention time minus fp16's */
    ck_assert(close_to(a.gap_ms[TP_CAT_ATTENTION],
                       (e.s.cat_ns_per_iter[TP_CAT_ATTENTION] - b.s.cat_ns_per_iter[TP_CAT_ATTENTION]) * 1e-6, 1));

    /* a trace of another graph is refused: one op renamed */
    loaded z;
    load_fixture(&z, FIX8, TP_PREC_FP8);
    snprintf(z.t.ops[7].layer, sizeof z.t.ops[7].layer, "blocks.0.renamed");
    ck_assert_int_eq(tp_compare_amdahl(&b.e, &z.e, r, &a, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "blocks.0.renamed") != NULL, "%s", err.msg);
    unload(&z);
    unload(&b);
    unload(&e);
}
END_TEST

/* ---- report files ---------------------------------------------------------------------------------------------- */

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s missing", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq((long)fread(b, 1, (size_t)n, f), n);
    b[n] = '\0';
    fclose(f);
    return b;
}

/* Fallback when python3 is missing: tags balance (comments, declarations and self-closing tags aside),
 * attribute values are quoted, and every & starts an entity. Returns 1 when well-formed in that sense. */
static int xml_balanced(const char *s) {
    const char *stack[256];
    size_t len[256];
    int depth = 0, roots = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '&') {
            static const char *ENT[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#"};
            int ok = 0;
            for (int k = 0; k < 6 && !ok; k++) ok = strncmp(p, ENT[k], strlen(ENT[k])) == 0;
            if (!ok) return 0;
            continue;
        }
        if (*p == '>') return 0; /* a '>' outside a tag is legal XML, but this writer always escapes it */
        if (*p != '<') continue;
        if (strncmp(p, "<!--", 4) == 0 || strncmp(p, "<?", 2) == 0) {
            const char *end = strstr(p, p[1] == '!' ? "-->" : "?>");
            if (!end) return 0;
            p = strchr(end, '>');
            continue;
        }
        const char *q = p + 1;
        int closing = *q == '/', quote = 0;
        if (closing) q++;
        const char *name = q;
        while (*q && *q != ' ' && *q != '>' && *q != '/' && *q != '\n') q++;
        size_t n = (size_t)(q - name);
        if (n == 0) return 0;
        for (; *q && (quote || *q != '>'); q++)
            if (*q == '"') quote = !quote;
        if (!*q) return 0;
        int self = q[-1] == '/';
        if (closing) {
            if (depth == 0 || len[depth - 1] != n || strncmp(stack[depth - 1], name, n) != 0) return 0;
            depth--;
        } else if (!self) {
            if (depth == 0) roots++;
            if (depth == 256) return 0;
            stack[depth] = name, len[depth] = n, depth++;
        } else if (depth == 0) {
            roots++;
        }
        p = q;
    }
    return depth == 0 && roots == 1;
}

/* Well-formed XML: Python's parser when python3 exists (exit 127 from the shell means it does not). */
static void assert_xml(const char *path) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sys,xml.etree.ElementTree as E; E.parse(sys.argv[1])\" '%s' >/dev/null 2>&1", path);
    int rc = system(cmd);
    ck_assert_int_ne(rc, -1);
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 127) {
        fprintf(stderr, "test_report: no python3; checking %s by tag balance\n", path);
        char *s = slurp(path);
        ck_assert_msg(xml_balanced(s), "%s is not well-formed", path);
        free(s);
        return;
    }
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s is not well-formed XML (python3 exit %d)", path,
                  WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
}

START_TEST(test_xml_fallback) {
    ck_assert(xml_balanced("<svg a=\"x>y\"><g><rect/><text>a &amp; b &lt;c&gt;</text></g><!-- c --></svg>\n"));
    ck_assert(!xml_balanced("<svg><g></svg></g>"));
    ck_assert(!xml_balanced("<svg><text>a & b</text></svg>"));
    ck_assert(!xml_balanced("<svg><text>k<half></text></svg>"));
    ck_assert(!xml_balanced("<svg></svg><svg></svg>"));
}
END_TEST

static const char *SECTIONS[] = {
    "## Summary", "## Configuration",  "## Kernel breakdown", "## Roofline", "## Coverage",
    "## Theoretical vs. actual speedup", "## Recommendations", "## Artifacts"};
#define N_SECTIONS ((int)(sizeof SECTIONS / sizeof SECTIONS[0]))
static const char *FILES[] = {"report.md", "report.json", "report.html", "breakdown.svg", "speedup.svg"};

static void make_dir(char *buf, size_t n) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/tprof_test_report_XXXXXX", t && *t ? t : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(buf));
}

static void remove_dir(const char *dir) {
    if (getenv("TP_REPORT_KEEP")) {
        fprintf(stderr, "test_report: kept %s\n", dir);
        return;
    }
    char p[1200];
    for (size_t k = 0; k < sizeof FILES / sizeof FILES[0]; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, FILES[k]);
        remove(p);
    }
    ck_assert_int_eq(rmdir(dir), 0);
}

static char *read_in(const char *dir, const char *name) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return slurp(p);
}

static tp_compare_config fixture_config(void) {
    tp_compare_config c;
    memset(&c, 0, sizeof c);
    c.model = "vit_base_patch16_224";
    c.batch = 64;
    c.gpu = "NVIDIA H200";
    c.driver = "580.159.04";
    c.cuda = "13.0";
    c.cublaslt = "130100";
    c.warmup_ms = 200;
    c.iterations = 10;
    c.duration_s = 3;
    c.cuda_graph = 1;
    c.commit = "6af0f20";
    c.date = "2026-11-21T06:00:21Z";
    c.command = "tprof compare --model vit-b16 --batch 64 --precision fp16,fp8 --out report";
    c.peak_tflops[TP_PREC_FP16] = PEAK16;
    c.peak_tflops[TP_PREC_FP8] = PEAK8;
    c.peak_shape = "8192 x 8192 x 8192";
    c.artifacts[0] = "fp16.trace.json";
    c.artifacts[1] = "fp8.trace.json";
    c.n_artifacts = 2;
    return c;
}

static json_t *jget(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    ck_assert_msg(v != NULL, "report.json lacks \"%s\"", k);
    return v;
}

/* Writes the report of the pair x (baseline x[0]) into a fresh directory, named in dir. */
static void write_pair(const loaded x[2], char *dir, size_t n) {
    tp_compare_entry entries[2] = {x[0].e, x[1].e};
    tp_compare_config cfg = fixture_config();
    make_dir(dir, n);
    tp_error err;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
}

START_TEST(test_write_fixtures) {
    loaded x[2];
    load_fixtures(&x[0], &x[1]);
    /* the fp8 trace as one with the executed program recorded: each residual add fused into the call of the linear
     * before it (the fixtures predate the program: the fp16 one stays without, its column "-") */
    tp_trace *t8 = &x[1].t;
    int fused_adds = 0;
    for (int i = 0; i < t8->n_ops; i++) {
        const int prev = i - 1;
        t8->ops[i].call = i;
        snprintf(t8->ops[i].kernel, sizeof t8->ops[i].kernel, "%s", t8->ops[i].kind == TP_OP_LINEAR ? "gemm" : "other");
        if (t8->ops[i].kind == TP_OP_ADD && prev >= 0 && t8->ops[prev].kind == TP_OP_LINEAR)
            t8->ops[i].call = prev, fused_adds++;
    }
    ck_assert_int_gt(fused_adds, 0);
    char dir[1024];
    write_pair(x, dir, sizeof dir);

    char *md = read_in(dir, "report.md");
    for (int k = 0; k < N_SECTIONS; k++)
        ck_assert_msg(strstr(md, SECTIONS[k]) != NULL, "report.md lacks \"%s\"", SECTIONS[k]);
    for (int k = 1; k < N_SECTIONS; k++) ck_assert(strstr(md, SECTIONS[k - 1]) < strstr(md, SECTIONS[k]));
    static const char *MD[] = {"# tprof compare: vit_base_patch16_224, batch 64, NVIDIA H200",
                               "fp16 (baseline)",
                               "![",
                               "breakdown.svg",
                               "speedup.svg",
                               "kept fp16 by policy",
                               "CUDA graph on",
                               "data transfers excluded",
                               "765 TFLOP/s",
                               "1387 TFLOP/s",
                               "580.159.04",
                               "130100",
                               "`void attention_kernel<__half, __nv_fp8_e4m3, 2>(",
                               "attention unchanged in precision",
                               "`fp16.trace.json`",
                               "`report.html`",
                               "blocks.N.attn"};
    for (size_t k = 0; k < sizeof MD / sizeof MD[0]; k++)
        ck_assert_msg(strstr(md, MD[k]) != NULL, "report.md lacks \"%s\"", MD[k]);
    /* no engine here runs attention in FP8: no such section; traces from before the roofline: a sentence */
    ck_assert_ptr_null(strstr(md, "FP8 attention accuracy"));
    ck_assert_ptr_nonnull(strstr(md, "no roofline"));
    ck_assert_ptr_null(strstr(md, "(worst)"));
    /* Outside code spans no raw angle bracket: names with <> are in backticks, other text is escaped. */
    int in_code = 0;
    for (const char *p = md; *p; p++) {
        if (*p == '`')
            in_code = !in_code;
        else if (!in_code)
            ck_assert_msg(*p != '<' && *p != '>', "raw %c in report.md: %.60s", *p, p);
    }

    /* JSON: everything in the Markdown as data */
    json_error_t je;
    char p[1200];
    snprintf(p, sizeof p, "%s/report.json", dir);
    json_t *j = json_load_file(p, 0, &je);
    ck_assert_msg(j != NULL, "report.json: %s at line %d", je.text, je.line);
    ck_assert_str_eq(json_string_value(jget(j, "format")), "tprof-compare-1");
    ck_assert_str_eq(json_string_value(jget(j, "baseline")), "fp16");
    ck_assert_ptr_null(json_object_get(j, "fp8_attention_cost"));
    ck_assert_int_eq((int)json_array_size(jget(j, "roofline")), 0);
    json_t *rules = jget(j, "recommendations");
    for (size_t k = 0; k < json_array_size(rules); k++) /* no floor: no roofline advice */
        ck_assert_str_ne(json_string_value(jget(json_array_get(rules, k), "rule")), "roofline_gap");
    json_t *conf = jget(j, "configuration");
    ck_assert(json_is_true(jget(conf, "cuda_graph")));
    ck_assert_str_eq(json_string_value(jget(conf, "data_transfers")), "excluded");
    ck_assert(json_number_value(jget(jget(conf, "peak_tflops"), "fp8")) == PEAK8);
    json_t *sum = jget(j, "summary");
    ck_assert_int_eq((int)json_array_size(sum), 2);
    json_t *s8 = json_array_get(sum, 1);
    ck_assert(close_to(json_number_value(jget(s8, "speedup")), x[0].t.event_median_ms / x[1].t.event_median_ms, 0));
    ck_assert(json_number_value(jget(jget(s8, "accuracy"), "top1")) == 0.75);
    json_t *bd = jget(j, "breakdown");
    ck_assert_int_eq((int)json_array_size(bd), 2);
    for (int i = 0; i < 2; i++) {
        json_t *cats = jget(json_array_get(bd, (size_t)i), "categories");
        double ms = 0, pct = 0;
        for (size_t c = 0; c < json_array_size(cats); c++) {
            ms += json_number_value(jget(json_array_get(cats, c), "ms"));
            pct += json_number_value(jget(json_array_get(cats, c), "percent"));
        }
        ck_assert(close_to(ms, x[i].s.kernel_ns_per_iter * 1e-6, 0) ||
                  fabs(ms - x[i].s.kernel_ns_per_iter * 1e-6) < 1e-12);
        ck_assert(fabs(pct - 100) < 1e-9);
        ck_assert_int_eq((int)json_array_size(jget(json_array_get(bd, (size_t)i), "top_kernels")),
                         x[i].s.n_kernels < 10 ? x[i].s.n_kernels : 10);
    }
    ck_assert_ptr_nonnull(strstr(md, "in a gemm call")); /* the program's column */
    json_t *cov = json_array_get(jget(j, "coverage"), 1);
    ck_assert_int_eq((int)json_integer_value(jget(jget(cov, "by_precision"), "fp8")), 48);
    ck_assert_int_eq((int)json_integer_value(jget(cov, "kept_by_policy")), 2); /* patch_embed.proj, head */
    ck_assert_int_eq((int)json_array_size(jget(j, "amdahl")), 1);
    json_t *am = json_array_get(jget(j, "amdahl"), 0);
    tp_amdahl a;
    tp_error err;
    ck_assert(tp_compare_amdahl(&x[0].e, &x[1].e, PEAK8 / PEAK16, &a, &err) == TP_OK);
    ck_assert(json_is_true(jget(am, "available")));
    ck_assert(close_to(json_number_value(jget(am, "f")), a.f, 0));
    ck_assert(close_to(json_number_value(jget(am, "bound")), a.bound, 0));
    ck_assert(close_to(json_number_value(jget(am, "ideal_ms")), a.ideal_ms, 0));
    ck_assert_int_eq((int)json_array_size(jget(am, "gaps")), TP_CAT_COUNT);
    json_t *recs = jget(j, "recommendations");
    ck_assert_int_ge((int)json_array_size(recs), 1);
    int lever = 0;
    for (size_t k = 0; k < json_array_size(recs); k++) {
        json_t *r = json_array_get(recs, k), *basis = jget(r, "basis");
        ck_assert(json_is_number(jget(basis, "value")) && json_is_number(jget(basis, "threshold")));
        const char *text = json_string_value(jget(r, "text"));
        ck_assert_msg(strstr(md, text) != NULL, "recommendation not in report.md: %s", text);
        if (strcmp(json_string_value(jget(r, "rule")), "unchanged_lever") == 0) {
            lever = 1;
            ck_assert_msg(strstr(text, "attention is 54.") != NULL, "%s", text);
            ck_assert(json_number_value(jget(basis, "value")) >= json_number_value(jget(basis, "threshold")));
        }
    }
    ck_assert_msg(lever, "no recommendation about attention, 54 %% of fp16 time");
    json_t *arts = jget(j, "artifacts");
    ck_assert_int_eq((int)json_array_size(arts), 7);
    ck_assert_str_eq(json_string_value(json_array_get(arts, 6)), "fp8.trace.json");
    json_t *prof = jget(j, "profiles");
    ck_assert_int_eq((int)json_array_size(prof), 2);
    ck_assert_int_eq((int)json_array_size(jget(json_array_get(prof, 1), "layers")), 125);
    json_decref(j);

    char *html = read_in(dir, "report.html");
    ck_assert_ptr_nonnull(strstr(html, "<!DOCTYPE html>"));
    ck_assert_ptr_nonnull(strstr(html, "<style>"));
    const char *svg = strstr(html, "<svg");
    ck_assert_ptr_nonnull(svg);
    ck_assert_ptr_nonnull(strstr(svg + 4, "<svg")); /* both charts */
    ck_assert_ptr_nonnull(strstr(html, "attention_kernel&lt;__half, __nv_fp8_e4m3, 2&gt;"));
    ck_assert_ptr_null(strstr(html, "<__half"));
    ck_assert_ptr_null(strstr(html, "<script"));
    ck_assert_ptr_null(strstr(html, "<link"));
    ck_assert_ptr_null(strstr(html, "src="));
    ck_assert_ptr_null(strstr(html, "FP8 attention accuracy"));
    for (int k = 0; k < N_SECTIONS; k++)
        ck_assert_msg(strstr(html, SECTIONS[k] + 3) != NULL, "html lacks %s", SECTIONS[k]);

    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, k ? "speedup.svg" : "breakdown.svg");
        assert_xml(p);
        char *s = slurp(p);
        ck_assert_ptr_nonnull(strstr(s, "xmlns=\"http://www.w3.org/2000/svg\""));
        ck_assert_msg(strstr(html, s) != NULL, "%s is not inlined verbatim in report.html", p);
        if (k == 0) {
            ck_assert_ptr_nonnull(strstr(s, "attention"));
            ck_assert_ptr_nonnull(strstr(s, tp_compare_category_color(TP_CAT_ATTENTION)));
        } else {
            char want[32];
            snprintf(want, sizeof want, "%.3f×", a.bound);
            ck_assert_msg(strstr(s, want) != NULL, "speedup.svg lacks the bound %s", want);
        }
        free(s);
    }
    free(md);
    free(html);
    remove_dir(dir);
    unload(&x[0]);
    unload(&x[1]);
}
END_TEST

/* Names with <, >, & and | through every writer; a pair without peak rates (no bound); a baseline alone. */
/* The fixtures recorded with the roofline (rates and op costs in the traces): the section's tables, and the JSON's
 * floors, consistent with the profiles and ordered by the gap above the floor. */
START_TEST(test_write_roofline) {
    loaded x[2];
    load_fixture(&x[0], FIX16R, TP_PREC_FP16);
    load_fixture(&x[1], FIX8R, TP_PREC_FP8);
    ck_assert(x[0].s.has_roofline && x[1].s.has_roofline);
    char dir[1024];
    write_pair(x, dir, sizeof dir);
    char *md = read_in(dir, "report.md");
    static const char *MD[] = {"## Roofline", "bytes / the copy rate", "GB/s (read + write)", "Median / floor",
                               "fp16 by op kind", "fp8 by op kind", "Above floor (ms)", "| linear |", "| attention |",
                               "`blocks."};
    for (size_t k = 0; k < sizeof MD / sizeof MD[0]; k++)
        ck_assert_msg(strstr(md, MD[k]) != NULL, "report.md lacks \"%s\"", MD[k]);
    ck_assert_ptr_null(strstr(md, "no roofline"));
    ck_assert(strstr(md, "## Kernel breakdown") < strstr(md, "## Roofline"));
    /* the recommendation names the group furthest above its floor (fp16: fc1 with its GELU; fp8: attention) */
    ck_assert_ptr_nonnull(strstr(md, "In fp16, blocks.N.mlp.fc1 (12 ops) is the furthest above its roofline floor"));
    ck_assert_ptr_nonnull(strstr(md, "In fp8, blocks.N.attn (12 ops) is the furthest above its roofline floor"));
    free(md);
    json_error_t je;
    char p[1200];
    snprintf(p, sizeof p, "%s/report.json", dir);
    json_t *j = json_load_file(p, 0, &je);
    ck_assert_msg(j != NULL, "report.json: %s", je.text);
    json_t *rf = jget(j, "roofline");
    ck_assert_int_eq((int)json_array_size(rf), 2);
    for (int i = 0; i < 2; i++) {
        json_t *r = json_array_get(rf, (size_t)i);
        ck_assert_str_eq(json_string_value(jget(r, "precision")), i ? "fp8" : "fp16");
        ck_assert(close_to(json_number_value(jget(r, "floor_ms")), x[i].s.floor.ns * 1e-6, 0));
        ck_assert(json_number_value(jget(r, "median_over_floor")) > 1); /* these engines are above their floor */
        json_t *tg = jget(r, "top_gaps");
        ck_assert_int_eq((int)json_array_size(tg), 8);
        double prev = INFINITY;
        for (size_t k = 0; k < json_array_size(tg); k++) {
            json_t *g = json_array_get(tg, k);
            const double above = json_number_value(jget(g, "above_floor_ms"));
            ck_assert(above <= prev);
            ck_assert(close_to(above, json_number_value(jget(g, "time_ms")) - json_number_value(jget(g, "floor_ms")),
                               1e-6));
            prev = above;
        }
    }
    json_decref(j);
    remove_dir(dir);
    unload(&x[0]);
    unload(&x[1]);
}
END_TEST

START_TEST(test_write_synthetic) {
    loaded b, e;
    make_pair(&b, &e);
    tp_compare_entry entries[2] = {b.e, e.e};
    tp_compare_config cfg;
    memset(&cfg, 0, sizeof cfg); /* no versions, no peak rates: every field reads unknown / n/a */
    cfg.model = "tiny & <small>";
    cfg.batch = 2;
    char dir[1024], p[1200];
    make_dir(dir, sizeof dir);
    tp_error err;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
    char *md = read_in(dir, "report.md"), *html = read_in(dir, "report.html");
    ck_assert_ptr_nonnull(strstr(md, "`attn<half> \\| a&b`"));
    ck_assert_ptr_nonnull(strstr(md, "tiny &amp; &lt;small&gt;"));
    ck_assert_ptr_nonnull(strstr(md, "peak GEMM rate of fp16 not measured"));
    ck_assert_ptr_nonnull(strstr(html, "<code>attn&lt;half&gt; | a&amp;b</code>"));
    ck_assert_ptr_nonnull(strstr(html, "tiny &amp; &lt;small&gt;"));
    for (int k = 0; k < N_SECTIONS; k++) ck_assert_ptr_nonnull(strstr(md, SECTIONS[k]));
    snprintf(p, sizeof p, "%s/report.json", dir);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    ck_assert(json_is_false(jget(json_array_get(jget(j, "amdahl"), 0), "available")));
    ck_assert(json_is_null(jget(jget(j, "configuration"), "gpu")));
    ck_assert_ptr_null(json_object_get(j, "decode")); /* no decode measurements: no section, no key */
    json_decref(j);
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, k ? "speedup.svg" : "breakdown.svg");
        assert_xml(p);
    }
    free(md);
    free(html);
    /* the baseline alone: the speedup chart says there is nothing to compare */
    ck_assert_msg(tp_compare_write(&cfg, entries, 1, 0, dir, &err) == TP_OK, "%s", err.msg);
    snprintf(p, sizeof p, "%s/speedup.svg", dir);
    assert_xml(p);
    char *s = slurp(p);
    ck_assert_ptr_nonnull(strstr(s, "No precision besides the baseline"));
    free(s);
    remove_dir(dir);
    unload(&b);
    unload(&e);
}
END_TEST

/* Decoders: the decode-step section, from one traced entry (the synthetic trace standing in for decode steps: 59 ns
 * of kernels a step, 4 kernel records, event-timed 1e-4 ms, so the launch gaps are 41 % of the step) and one that was not
 * traced (eager); absent from a report without decode measurements (test_write_synthetic). */
START_TEST(test_write_decode) {
    loaded b, e;
    make_pair(&b, &e);
    e.t.event_median_ms = 1e-4;
    tp_compare_entry entries[3] = {b.e, e.e, b.e};
    entries[0].has_decode = 1, entries[0].step_median_ms = 2.0, entries[0].step_p99_ms = 2.5;
    entries[0].tokens_per_s = 500, entries[0].pdl_edges = -1;
    entries[1].has_decode = 1, entries[1].step_median_ms = 1.5, entries[1].step_p99_ms = 1.6;
    entries[1].tokens_per_s = 666.7, entries[1].step_floor_ms = 1.0, entries[1].pdl_edges = 5;
    entries[1].graph_edges = 7, entries[1].graph_kernels = 6, entries[1].dec_trace = &e.t, entries[1].dec_prof = &e.s;
    /* a persistent step (--decode-kernel persistent), not traced */
    entries[2].has_decode = 1, entries[2].step_median_ms = 1.2, entries[2].step_p99_ms = 1.3;
    entries[2].tokens_per_s = 833.3, entries[2].pdl_edges = 0, entries[2].graph_kernels = 3;
    entries[2].dec_persistent = 1, entries[2].dec_instrs = 9797;
    entries[2].prec = TP_PREC_BF16;
    tp_compare_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.model = "tiny";
    cfg.batch = 2;
    char dir[1024], p[1200];
    make_dir(dir, sizeof dir);
    tp_error err;
    ck_assert_msg(tp_compare_write(&cfg, entries, 3, 0, dir, &err) == TP_OK, "%s", err.msg);
    char *md = read_in(dir, "report.md");
    static const char *MD[] = {"## Decode steps", "persistent kernel of 9797 instructions, then argmax and position", "| fp16 | 2.0000 | 2.5000 | 500.0 | n/a | n/a | eager |",
                               "not traced",
                               ("| fp8 | 1.5000 | 1.6000 | 666.7 | 1.0000 | 1.500× | CUDA graph of 6 kernels, PDL "
                                "on 5 of 7 edges | 4 | 0.0001 |"),
                               "| 41.0 |", "fp8: a decode step by op kind",
                               "`blocks.0.attn`"};
    for (size_t k = 0; k < sizeof MD / sizeof MD[0]; k++)
        ck_assert_msg(strstr(md, MD[k]) != NULL, "report.md lacks \"%s\"", MD[k]);
    ck_assert_ptr_null(strstr(md, "fp16: a decode step")); /* not traced: no per-layer table */
    /* the most expensive layer first: blocks.0.attn (31 ns) before blocks.0.mlp.fc1 (18 ns) */
    ck_assert(strstr(md, "`blocks.0.attn`") < strstr(md, "`blocks.0.mlp.fc1`"));
    free(md);
    snprintf(p, sizeof p, "%s/report.json", dir);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    json_t *dj = jget(j, "decode");
    ck_assert_int_eq((int)json_array_size(dj), 3);
    json_t *d0 = json_array_get(dj, 0), *d1 = json_array_get(dj, 1), *d2 = json_array_get(dj, 2);
    ck_assert_str_eq(json_string_value(jget(d2, "launch")), "persistent");
    ck_assert_int_eq((int)json_integer_value(jget(d2, "persistent_instructions")), 9797);
    ck_assert_str_eq(json_string_value(jget(d0, "launch")), "eager");
    ck_assert(json_is_null(jget(d0, "pdl_edges")) && json_is_null(jget(d0, "floor_ms")));
    ck_assert_ptr_null(json_object_get(d0, "traced_ms"));
    ck_assert_int_eq((int)json_integer_value(jget(d1, "pdl_edges")), 5);
    ck_assert_int_eq((int)json_integer_value(jget(d1, "graph_kernels")), 6);
    ck_assert(json_is_null(jget(d0, "graph_kernels")));
    ck_assert(close_to(json_number_value(jget(d1, "median_over_floor")), 1.5, 0));
    ck_assert(close_to(json_number_value(jget(d1, "traced_ms")), 5.9e-5, 0));
    ck_assert(close_to(json_number_value(jget(d1, "launch_gap_pct")), 41.0, 1e-9));
    ck_assert(close_to(json_number_value(jget(d1, "kernels_per_step")), 4.0, 0));
    json_t *tl = jget(d1, "top_layers");
    ck_assert_str_eq(json_string_value(jget(json_array_get(tl, 0), "layer")), "blocks.0.attn");
    json_decref(j);
    remove_dir(dir);
    unload(&b);
    unload(&e);
}
END_TEST

/* Pipelines: the per-stage section from two entries' stage rows (set by hand here: the fixture is a ViT, whose
 * layer names make no stages), the baseline lacking one stage; absent from a report without stages. */
static void set_stage(tp_stage_row *r, const char *name, int ops, double ms, double pct, double floor_ms) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ops = ops, r->ns_per_iter = ms * 1e6, r->pct = pct, r->floor.ns = floor_ms * 1e6;
}

START_TEST(test_write_stages) {
    loaded b, e;
    make_pair(&b, &e);
    tp_compare_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.model = "pipeline";
    cfg.batch = 1;
    char dir[1024], p[1200];
    make_dir(dir, sizeof dir);
    tp_error err;
    tp_compare_entry entries[2] = {b.e, e.e};
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
    char *md = read_in(dir, "report.md");
    ck_assert_ptr_null(strstr(md, "## Per stage"));
    free(md);
    set_stage(&e.s.stages[0], "vision", 10, 1.5, 10.0, 0.75);
    set_stage(&e.s.stages[1], "expert", 40, 6.0, 60.0, 1.2);
    e.s.n_stages = 2;
    set_stage(&b.s.stages[0], "expert", 40, 12.0, 80.0, 0);
    b.s.n_stages = 1;
    entries[0] = b.e, entries[1] = e.e;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
    md = read_in(dir, "report.md");
    static const char *MD[] = {"## Per stage", "| `vision` | fp8 | 1.500 | 10.0 | 0.750 | 50.0 | - |",
                               "| `expert` | fp16 (baseline) | 12.000 | 80.0 | - | - | - |",
                               "| `expert` | fp8 | 6.000 | 60.0 | 1.200 | 20.0 | 2.00× |"};
    for (size_t k = 0; k < sizeof MD / sizeof MD[0]; k++)
        ck_assert_msg(strstr(md, MD[k]) != NULL, "report.md lacks \"%s\"", MD[k]);
    ck_assert_ptr_null(strstr(md, "| `vision` | fp16")); /* the baseline has no vision stage: no row */
    free(md);
    /* the drift per stage, where the entries have one: a row per stage label and entry, in the JSON too */
    tp_stage_drift dr[2][2];
    memset(dr, 0, sizeof dr);
    snprintf(dr[0][0].stage, sizeof dr[0][0].stage, "vision: image tokens");
    snprintf(dr[0][1].stage, sizeof dr[0][1].stage, "prefix: K, V of every layer");
    dr[1][0] = dr[0][0], dr[1][1] = dr[0][1];
    dr[0][0].acc.cosine = 0.999908, dr[0][0].acc.rel_l2 = 1.354e-2, dr[0][1].acc.cosine = 0.999629, dr[0][1].acc.rel_l2 = 2.724e-2;
    dr[1][0].acc.cosine = 0.994618, dr[1][0].acc.rel_l2 = 1.038e-1, dr[1][1].acc.cosine = 0.962460, dr[1][1].acc.rel_l2 = 2.737e-1;
    entries[0].drift = dr[0], entries[0].n_drift = 2;
    entries[1].drift = dr[1], entries[1].n_drift = 2;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
    md = read_in(dir, "report.md");
    ck_assert_msg(strstr(md, "Accuracy drift per stage") && strstr(md, "| prefix: K, V of every layer | fp8 | 0.962460 | 2.737e-01 |") &&
                      strstr(md, "| vision: image tokens | fp16 | 0.999908 | 1.354e-02 |"),
                  "%s", md);
    free(md);
    snprintf(p, sizeof p, "%s/report.json", dir);
    json_error_t dje;
    json_t *dj = json_load_file(p, 0, &dje);
    ck_assert_msg(dj != NULL, "%s", dje.text);
    ck_assert_int_eq((int)json_array_size(jget(dj, "stage_drift")), 4);
    ck_assert(close_to(json_number_value(jget(json_array_get(jget(dj, "stage_drift"), 3), "cosine")), 0.962460, 1e-12));
    json_decref(dj);
    entries[0].drift = entries[1].drift = NULL, entries[0].n_drift = entries[1].n_drift = 0;
    /* a policy's outputs are actions: its unit in the throughput column, no top-1 */
    cfg.unit = "observation";
    cfg.not_logits = 1;
    entries[0].ref_images = entries[1].ref_images = 1;
    entries[0].top1 = entries[1].top1 = NAN;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
    md = read_in(dir, "report.md");
    /* its rate in Hz, as robotics users give it (observations per second over the batch), beside the latencies */
    ck_assert_msg(strstr(md, "| Hz (observations/s) |") && !strstr(md, "Images/s") && strstr(md, "| n/a | 1 |") &&
                      strstr(md, "the outputs against") && !strstr(md, "top-1 class") &&
                      strstr(md, "Hz: observations per second"),
                  "%s", md);
    free(md);
    snprintf(p, sizeof p, "%s/report.json", dir);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    for (int i = 0; i < 2; i++) { /* the old key stays, "hz" beside it */
        json_t *row = json_array_get(jget(j, "summary"), (size_t)i);
        ck_assert(close_to(json_number_value(jget(row, "hz")), entries[i].images_per_s, 1e-9));
        ck_assert(close_to(json_number_value(jget(row, "images_per_s")), entries[i].images_per_s, 1e-9));
    }
    json_t *st = jget(j, "stages");
    ck_assert_int_eq((int)json_array_size(st), 2);
    json_t *ex = json_array_get(st, 1);
    ck_assert_str_eq(json_string_value(jget(ex, "stage")), "vision"); /* the baseline's expert first */
    ex = json_array_get(st, 0);
    ck_assert_str_eq(json_string_value(jget(ex, "stage")), "expert");
    json_t *en = jget(ex, "entries");
    ck_assert(json_is_null(jget(json_array_get(en, 0), "speedup_vs_baseline")));
    ck_assert(json_is_null(jget(json_array_get(en, 0), "floor_ms")));
    ck_assert(close_to(json_number_value(jget(json_array_get(en, 1), "speedup_vs_baseline")), 2.0, 1e-12));
    ck_assert(close_to(json_number_value(jget(json_array_get(en, 1), "attainment_pct")), 20.0, 1e-9));
    json_decref(j);
    remove_dir(dir);
    unload(&b);
    unload(&e);
}
END_TEST

START_TEST(test_write_errors) {
    loaded b, e;
    make_pair(&b, &e);
    tp_compare_entry entries[2] = {b.e, e.e};
    tp_compare_config cfg = fixture_config();
    tp_error err;
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 2, "/tmp", &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 0, 0, "/tmp", &err), TP_ERR_ARG);
    char dir[1024], bad[1200];
    make_dir(dir, sizeof dir);
    snprintf(bad, sizeof bad, "%s/no/such/dir", dir);
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 0, bad, &err), TP_ERR_IO);
    ck_assert_msg(strstr(err.msg, bad) != NULL && !strchr(err.msg, '\n'), "%s", err.msg);
    e.t.ops[1].kind = TP_OP_GELU; /* another graph */
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 0, dir, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "op 1") != NULL, "%s", err.msg);
    ck_assert_int_eq(rmdir(dir), 0); /* nothing was written */
    unload(&b);
    unload(&e);
}
END_TEST

/* ---- FP8 attention's accuracy cost ------------------------------------------------------------------------------ */

START_TEST(test_attn_worst) {
    tp_attn_cost r[4] = {{2, TP_PREC_FP16, 0.9995, 3e-2}, {5, TP_PREC_FP16, 0.9999, 1e-2},
                         {8, TP_PREC_FP16, 0.9990, 4e-2}, {9, TP_PREC_FP16, 0.9990, 5e-2}};
    ck_assert_int_eq(tp_compare_attn_worst(r, 4), 2); /* lowest cosine; the first of a tie */
    ck_assert_int_eq(tp_compare_attn_worst(r, 2), 0);
    ck_assert_int_eq(tp_compare_attn_worst(r, 1), 0);
    ck_assert_int_eq(tp_compare_attn_worst(r, 0), -1);
    ck_assert_int_eq(tp_compare_attn_worst(NULL, 3), -1);
    r[1].cosine = NAN; /* a non-finite output is the worst there is */
    ck_assert_int_eq(tp_compare_attn_worst(r, 4), 1);
    r[3].cosine = NAN;
    ck_assert_int_eq(tp_compare_attn_worst(r, 4), 1);
}
END_TEST

/* The attention ops of a fixture trace (ViT-B/16: blocks.0.attn .. blocks.11.attn), in op order. */
static int attention_ops(const tp_trace *t, int *ops, int cap) {
    int n = 0;
    for (int i = 0; i < t->n_ops && n < cap; i++)
        if (t->ops[i].kind == TP_OP_ATTENTION) ops[n++] = i;
    return n;
}

/* Writes the fixtures' report with the fp8 entry carrying FP8 attention cost rows (cosine rising from 0.99955 in
 * block 0 to 0.99999 in block 11, as measured on the H200 with --policy 'blocks.*.attn=fp8'; rel L2 falling),
 * the fp16 entry without: the section, the table, the worst layer and the JSON fields are there for fp8 only. */
START_TEST(test_write_attn_cost) {
    loaded x[2];
    load_fixtures(&x[0], &x[1]);
    int ops[32];
    const int n = attention_ops(&x[1].t, ops, 32);
    ck_assert_int_eq(n, 12);
    tp_attn_cost rows[12];
    for (int k = 0; k < n; k++)
        rows[k] = (tp_attn_cost){ops[k], TP_PREC_FP16, 0.99955 + k * (0.99999 - 0.99955) / 11, 3.0e-2 - k * 2.0e-3};
    tp_compare_entry entries[2] = {x[0].e, x[1].e};
    entries[1].attn_cost = rows;
    entries[1].n_attn_cost = n;
    tp_compare_config cfg = fixture_config();
    char dir[1024], p[1200], want[512];
    make_dir(dir, sizeof dir);
    tp_error err;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);

    /* Markdown: the section between coverage and the speedup analysis, a table for fp8 alone */
    char *md = read_in(dir, "report.md");
    const char *sec = strstr(md, "## FP8 attention accuracy");
    ck_assert_ptr_nonnull(sec);
    ck_assert(strstr(md, "## Coverage") < sec && sec < strstr(md, "## Theoretical vs. actual speedup"));
    ck_assert_ptr_nonnull(strstr(md, "`--policy 'blocks.*.attn=fp8'`"));
    ck_assert_ptr_nonnull(strstr(sec, "### fp8 engine: 12 attention ops in FP8"));
    ck_assert_ptr_null(strstr(md, "### fp16 engine:"));
    ck_assert_ptr_nonnull(strstr(sec, "| Layer | Reference | Cosine vs. reference | Rel. L2 |"));
    ck_assert_msg(strstr(sec, "Worst layer: `blocks.0.attn`, cosine 0.999550, relative L2 0.03 against fp16 "
                              "attention.") != NULL,
                  "%.400s", sec);
    for (int k = 0; k < n; k++) {
        snprintf(want, sizeof want, "| `%s`%s | fp16 attention | %.6f | %.3e |", x[1].t.ops[ops[k]].layer,
                 k == 0 ? " (worst)" : "", rows[k].cosine, rows[k].rel_l2);
        ck_assert_msg(strstr(sec, want) != NULL, "report.md lacks the row \"%s\"", want);
    }
    ck_assert_ptr_nonnull(strstr(sec, "| `blocks.11.attn` | fp16 attention | 0.999990 | 8.000e-03 |"));
    const char *worst = strstr(md, "(worst)");
    ck_assert_ptr_nonnull(worst);
    ck_assert_ptr_null(strstr(worst + 1, "(worst)")); /* one worst layer */
    ck_assert_ptr_null(strstr(md, "fp8_attention_layer"));
    ck_assert_ptr_null(strstr(md, "FP8 attention costs most accuracy")); /* every layer clears 0.999 */

    /* HTML: the same content */
    char *html = read_in(dir, "report.html");
    ck_assert_ptr_nonnull(strstr(html, "<h2 id=\"fp8-attention\">FP8 attention accuracy</h2>"));
    ck_assert_ptr_nonnull(strstr(html, "id=\"fp8-attention-fp8-1\""));
    ck_assert_ptr_nonnull(strstr(html, "<td><code>blocks.0.attn</code> (worst)</td>"));
    ck_assert_ptr_nonnull(strstr(html, "<td class=\"r\">0.999550</td>"));
    ck_assert_ptr_null(strstr(html, "fp8-attention-fp16"));

    /* JSON: the rows as data, for fp8 alone */
    snprintf(p, sizeof p, "%s/report.json", dir);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    ck_assert_msg(j != NULL, "report.json: %s at line %d", je.text, je.line);
    json_t *ac = jget(j, "fp8_attention_cost");
    ck_assert_int_eq((int)json_array_size(ac), 1);
    json_t *a8 = json_array_get(ac, 0);
    ck_assert_str_eq(json_string_value(jget(a8, "precision")), "fp8");
    ck_assert_int_eq((int)json_integer_value(jget(a8, "fp8_attention_ops")), 12);
    json_t *w = jget(a8, "worst");
    ck_assert_str_eq(json_string_value(jget(w, "layer")), "blocks.0.attn");
    ck_assert_int_eq((int)json_integer_value(jget(w, "op")), ops[0]);
    ck_assert_str_eq(json_string_value(jget(w, "reference")), "fp16");
    ck_assert(json_real_value(jget(w, "cosine")) == rows[0].cosine);
    ck_assert(json_real_value(jget(w, "rel_l2")) == rows[0].rel_l2);
    json_t *ls = jget(a8, "layers");
    ck_assert_int_eq((int)json_array_size(ls), 12);
    for (int k = 0; k < n; k++) {
        json_t *r = json_array_get(ls, (size_t)k);
        ck_assert_str_eq(json_string_value(jget(r, "layer")), x[1].t.ops[ops[k]].layer);
        ck_assert_int_eq((int)json_integer_value(jget(r, "op")), ops[k]);
        ck_assert_str_eq(json_string_value(jget(r, "reference")), "fp16");
        ck_assert(json_real_value(jget(r, "cosine")) == rows[k].cosine);
        ck_assert(json_real_value(jget(r, "rel_l2")) == rows[k].rel_l2);
        ck_assert(json_is_true(jget(r, "worst")) == (k == 0));
    }
    json_decref(j);
    free(md);
    free(html);

    /* block 5 under the 0.999 bar: it is the worst layer and a recommendation keeps it in fp16 */
    rows[5].cosine = 0.9982;
    rows[5].rel_l2 = 6.1e-2;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
    md = read_in(dir, "report.md");
    ck_assert_ptr_nonnull(strstr(md, "Worst layer: `blocks.5.attn`, cosine 0.998200, relative L2 0.061 against"));
    ck_assert_ptr_nonnull(strstr(md, "| `blocks.5.attn` (worst) | fp16 attention | 0.998200 | 6.100e-02 |"));
    ck_assert_ptr_nonnull(strstr(md, "| `blocks.0.attn` | fp16 attention | 0.999550 |"));
    ck_assert_ptr_nonnull(strstr(md, "FP8 attention costs most accuracy in blocks.5.attn of the fp8 engine: cosine "
                                     "0.998200, relative L2 0.061 against fp16 attention on the same input (1 of 12 "
                                     "FP8 attention layers under 0.999); keep it in fp16 by adding the policy rule "
                                     "blocks.5.attn=fp16"));
    j = json_load_file(p, 0, &je);
    ck_assert_msg(j != NULL, "report.json: %s", je.text);
    ck_assert_str_eq(json_string_value(jget(jget(json_array_get(jget(j, "fp8_attention_cost"), 0), "worst"), "layer")),
                     "blocks.5.attn");
    json_t *recs = jget(j, "recommendations");
    int found = 0;
    for (size_t k = 0; k < json_array_size(recs); k++) {
        json_t *r = json_array_get(recs, k);
        if (strcmp(json_string_value(jget(r, "rule")), "fp8_attention_layer") != 0) continue;
        found++;
        ck_assert_str_eq(json_string_value(jget(r, "precision")), "fp8");
        ck_assert(json_real_value(jget(jget(r, "basis"), "value")) == 0.9982);
        ck_assert(json_real_value(jget(jget(r, "basis"), "threshold")) == 0.999);
    }
    ck_assert_int_eq(found, 1);
    json_decref(j);
    free(md);

    /* a non-finite output: n/a in the table, null in the JSON, and the worst layer */
    rows[7].cosine = NAN;
    rows[7].rel_l2 = NAN;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
    md = read_in(dir, "report.md");
    ck_assert_ptr_nonnull(strstr(md, "Worst layer: `blocks.7.attn`, non-finite output against fp16 attention."));
    ck_assert_ptr_nonnull(
        strstr(md, "| `blocks.7.attn` (worst) | fp16 attention | n/a (non-finite) | n/a (non-finite) |"));
    j = json_load_file(p, 0, &je);
    ck_assert_msg(j != NULL, "report.json: %s", je.text);
    json_t *r7 = json_array_get(jget(json_array_get(jget(j, "fp8_attention_cost"), 0), "layers"), 7);
    ck_assert(json_is_null(jget(r7, "cosine")) && json_is_null(jget(r7, "rel_l2")) && json_is_true(jget(r7, "worst")));
    json_decref(j);
    free(md);

    /* both engines with FP8 attention (the policy applies to every precision compare runs): two tables */
    rows[7].cosine = 0.99991, rows[7].rel_l2 = 1.2e-2;
    tp_attn_cost rows16[12];
    for (int k = 0; k < n; k++) rows16[k] = (tp_attn_cost){ops[k], TP_PREC_FP16, 0.9999, 1e-2};
    rows16[3].cosine = 0.99962;
    entries[0].attn_cost = rows16;
    entries[0].n_attn_cost = n;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
    md = read_in(dir, "report.md");
    ck_assert_ptr_nonnull(strstr(md, "### fp16 engine: 12 attention ops in FP8"));
    ck_assert_ptr_nonnull(strstr(md, "### fp8 engine: 12 attention ops in FP8"));
    ck_assert_ptr_nonnull(strstr(md, "| `blocks.3.attn` (worst) | fp16 attention | 0.999620 |"));
    j = json_load_file(p, 0, &je);
    ck_assert_msg(j != NULL, "report.json: %s", je.text);
    ck_assert_int_eq((int)json_array_size(jget(j, "fp8_attention_cost")), 2);
    ck_assert_str_eq(json_string_value(jget(json_array_get(jget(j, "fp8_attention_cost"), 0), "precision")), "fp16");
    json_decref(j);
    free(md);
    remove_dir(dir);
    unload(&x[0]);
    unload(&x[1]);
}
END_TEST

/* Rows that do not fit the entry's trace are refused before anything is written. */
START_TEST(test_attn_cost_errors) {
    loaded b, e;
    make_pair(&b, &e); /* ops: 0 qkv (linear), 1 fc1 (linear), 2 attn (attention) */
    tp_compare_entry entries[2] = {b.e, e.e};
    tp_compare_config cfg = fixture_config();
    tp_attn_cost rows[2] = {{2, TP_PREC_FP16, 0.9995, 3e-2}, {2, TP_PREC_FP16, 0.9996, 2e-2}};
    char dir[1024];
    make_dir(dir, sizeof dir);
    tp_error err;
    entries[1].attn_cost = rows;
    entries[1].n_attn_cost = 1;
    ck_assert_msg(tp_compare_write(&cfg, entries, 2, 0, dir, &err) == TP_OK, "%s", err.msg);
    char *md = read_in(dir, "report.md");
    ck_assert_ptr_nonnull(strstr(md, "### fp8 engine: 1 attention op in FP8"));
    ck_assert_ptr_nonnull(strstr(md, "| `blocks.0.attn` (worst) | fp16 attention | 0.999500 | 3.000e-02 |"));
    free(md);
    remove_dir(dir);
    make_dir(dir, sizeof dir);
    entries[1].n_attn_cost = 2; /* op 2 twice */
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 0, dir, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "increasing op order") && strstr(err.msg, "fp8") && !strchr(err.msg, '\n'), "%s",
                  err.msg);
    rows[0].op = 1; /* a linear op */
    entries[1].n_attn_cost = 1;
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 0, dir, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "blocks.0.mlp.fc1") && strstr(err.msg, "not attention"), "%s", err.msg);
    rows[0].op = 3; /* out of range */
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 0, dir, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "op 3 of 3") != NULL, "%s", err.msg);
    rows[0].op = -1;
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 0, dir, &err), TP_ERR_ARG);
    rows[0].op = 2;
    entries[1].attn_cost = NULL; /* rows promised, none given */
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 0, dir, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "no array") != NULL, "%s", err.msg);
    entries[1].attn_cost = rows;
    entries[1].n_attn_cost = -1;
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 0, dir, &err), TP_ERR_ARG);
    entries[1].n_attn_cost = 0;
    entries[0].attn_cost = rows; /* the baseline is checked too */
    entries[0].n_attn_cost = 1;
    rows[0].op = 0;
    ck_assert_int_eq(tp_compare_write(&cfg, entries, 2, 0, dir, &err), TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "fp16") != NULL, "%s", err.msg);
    ck_assert_int_eq(rmdir(dir), 0); /* nothing was written */
    unload(&b);
    unload(&e);
}
END_TEST

/* tprof bench's decode sweep (decoders, --batch list): the table and the attainment chart beside the JSON, one
 * line per precision, a point per batch that ran, the floor over the median in percent. */
START_TEST(test_decode_sweep_chart) {
    tp_bench_options o = {.n_precs = 2, .precs = {TP_PREC_FP16, TP_PREC_BF16}};
    tp_error e = {0};
    ck_assert_int_eq(tp_model_preset("llama-3.2-1b", &o.model, &e), TP_OK);
    char dir[] = "/tmp/tp_sweep_XXXXXX", json[80], svg[96];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(json, sizeof json, "%s/run.json", dir);
    snprintf(svg, sizeof svg, "%s/run_decode_sweep.svg", dir);
    o.json_path = json;
    const int batches[3] = {1, 8, 32};
    tp_bench_row rows[6];
    memset(rows, 0, sizeof rows);
    for (int b = 0; b < 3; b++)
        for (int p = 0; p < 2; p++) {
            tp_bench_row *r = &rows[b * 2 + p];
            r->prec = o.precs[p];
            r->median_ms = 2.0;
            r->dec_ms = 1.6 + 0.1 * b; /* floor 0.8: attainment 50, 47.1, 44.4 % */
            r->dec_floor_ms = p == 1 && b == 2 ? 0 : 0.8; /* bf16 at batch 32: floor unknown, no point */
        }
    ck_assert_int_eq(tp_bench_print_sweep(&o, batches, 3, rows, &e), TP_OK);
    FILE *f = fopen(svg, "r");
    ck_assert_ptr_nonnull(f);
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "<svg"));
    ck_assert_ptr_nonnull(strstr(buf, "</svg>"));
    ck_assert_ptr_nonnull(strstr(buf, ">bf16</text>"));
    ck_assert_ptr_nonnull(strstr(buf, "<title>50.0%</title>"));
    ck_assert_ptr_nonnull(strstr(buf, "<title>44.4%</title>"));
    int points = 0;
    for (const char *q = buf; (q = strstr(q, "<circle")); q++) points++;
    ck_assert_int_eq(points, 5); /* 3 fp16 + 2 bf16 */
    /* an unwritable chart is an error naming the file */
    snprintf(json, sizeof json, "/nonexistent_dir_tp/run.json");
    ck_assert_int_eq(tp_bench_print_sweep(&o, batches, 3, rows, &e), TP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "run_decode_sweep.svg"));
    remove(svg);
    rmdir(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("report");
    TCase *t = tcase_create("compare");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_amdahl_synthetic);
    tcase_add_test(t, test_fixture_categories);
    tcase_add_test(t, test_amdahl_fixtures);
    tcase_add_test(t, test_xml_fallback);
    tcase_add_test(t, test_write_fixtures);
    tcase_add_test(t, test_write_roofline);
    tcase_add_test(t, test_write_synthetic);
    tcase_add_test(t, test_write_decode);
    tcase_add_test(t, test_write_stages);
    tcase_add_test(t, test_write_errors);
    tcase_add_test(t, test_attn_worst);
    tcase_add_test(t, test_write_attn_cost);
    tcase_add_test(t, test_attn_cost_errors);
    tcase_add_test(t, test_decode_sweep_chart);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
