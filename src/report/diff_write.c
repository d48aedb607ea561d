/* diff_write.c: `tprof diff`'s outputs (diff.h tp_diff_write): Markdown and HTML through one document writer
 * (report/doc.h), the HTML with hand-written SVG charts (no script, no external reference); CSV and JSON with the
 * same field list for the results table (llama-bench's convention: every format carries the same fields). */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "report/diff.h"
#include "report/doc.h"
#include "tp_build_info.h"

static const char *label(int k) {
    static const char *const L[] = {"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M",
                                    "N", "O", "P", "Q", "R", "S", "T", "U", "V", "W", "X", "Y", "Z"};
    return k < 26 ? L[k] : "?";
}

static const tp_diff_result *res_a(const tp_diff *d, const tp_diff_match *m) { return &d->runs[0].res[m->ia]; }
static const tp_diff_result *res_b(const tp_diff *d, const tp_diff_match *m) { return &d->runs[m->run].res[m->ib]; }

/* ---- the fields of the results table (CSV and JSON) ---------------------------------------------------------- */

typedef enum { F_STR, F_INT, F_NUM } ftype;
typedef struct {
    const char *name;
    ftype t;
} field;

static const field FIELDS[] = {
    {"run", F_STR},         {"file", F_STR},        {"model", F_STR},       {"precision", F_STR},
    {"batch", F_INT},       {"test", F_STR},        {"a_median_ms", F_NUM}, {"a_q1_ms", F_NUM},
    {"a_q3_ms", F_NUM},     {"a_samples", F_INT},   {"b_median_ms", F_NUM}, {"b_q1_ms", F_NUM},
    {"b_q3_ms", F_NUM},     {"b_samples", F_INT},   {"ratio", F_NUM},       {"ci_lo", F_NUM},
    {"ci_hi", F_NUM},       {"mann_whitney_u", F_NUM}, {"p_value", F_NUM},  {"p_exact", F_INT},
    {"verdict", F_STR},     {"a_floor_ms", F_NUM},  {"b_floor_ms", F_NUM},  {"a_attainment", F_NUM},
    {"b_attainment", F_NUM},
};
enum { N_FIELDS = sizeof FIELDS / sizeof FIELDS[0] };

typedef struct {
    const char *s;
    double v;
} fval;

static void match_fields(const tp_diff *d, const tp_diff_match *m, fval *v) {
    const tp_diff_result *a = res_a(d, m), *b = res_b(d, m);
    const fval x[N_FIELDS] = {
        {label(m->run), 0},        {d->runs[m->run].path, 0}, {b->model, 0},           {b->precision, 0},
        {NULL, b->batch},          {b->test, 0},              {NULL, a->median_ms},    {NULL, a->q1_ms},
        {NULL, a->q3_ms},          {NULL, a->n},              {NULL, b->median_ms},    {NULL, b->q1_ms},
        {NULL, b->q3_ms},          {NULL, b->n},              {NULL, m->ratio},        {NULL, m->ci_lo},
        {NULL, m->ci_hi},          {NULL, m->u},              {NULL, m->p},            {NULL, m->exact},
        {m->verdict, 0},           {NULL, a->floor_ms},       {NULL, b->floor_ms},     {NULL, a->floor_ms / a->median_ms},
        {NULL, b->floor_ms / b->median_ms},
    };
    memcpy(v, x, sizeof x);
}

static void csv_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void write_csv(const tp_diff *d, FILE *f) {
    for (int k = 0; k < N_FIELDS; k++) fprintf(f, "%s%s", k ? "," : "", FIELDS[k].name);
    fputc('\n', f);
    for (int i = 0; i < d->n_m; i++) {
        fval v[N_FIELDS];
        match_fields(d, &d->m[i], v);
        for (int k = 0; k < N_FIELDS; k++) {
            if (k) fputc(',', f);
            if (FIELDS[k].t == F_STR) csv_str(f, v[k].s);
            else if (FIELDS[k].t == F_INT) fprintf(f, "%lld", (long long)v[k].v);
            else if (isfinite(v[k].v)) fprintf(f, "%.9g", v[k].v);
        }
        fputc('\n', f);
    }
}

/* ---- JSON --------------------------------------------------------------------------------------------------- */

static json_t *rows_json(const tp_diff_row *r, int n, int kernels) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        json_t *o = json_pack("{s:s,s:s,s:o,s:o,s:o}", "name", r[i].name, kernels ? "category" : "op", r[i].op,
                              "a_ms", tp_json_num(r[i].a_ms), "b_ms", tp_json_num(r[i].b_ms), "delta_ms",
                              tp_json_num((isnan(r[i].b_ms) ? 0 : r[i].b_ms) - (isnan(r[i].a_ms) ? 0 : r[i].a_ms)));
        if (r[i].how_a || r[i].how_b) {
            json_object_set_new(o, "how_a", r[i].how_a ? json_string(r[i].how_a) : json_null());
            json_object_set_new(o, "how_b", r[i].how_b ? json_string(r[i].how_b) : json_null());
        }
        if (kernels)
            json_object_set_new(o, "status", json_string(isnan(r[i].a_ms)   ? "appeared"
                                                         : isnan(r[i].b_ms) ? "disappeared"
                                                                            : "in both"));
        json_array_append_new(a, o);
    }
    return a;
}

/* The options (config keys) whose values differ between run 0 and run k, as "key" strings into out. */
static int config_diffs(const tp_diff *d, int k, const char **out, int cap) {
    const json_t *a = d->runs[0].config, *b = d->runs[k].config;
    int n = 0;
    const char *key;
    const json_t *v;
    if (!a || !b) return 0;
    json_object_foreach((json_t *)a, key, v) {
        if (!json_equal(v, json_object_get(b, key)) && n < cap) out[n++] = key;
    }
    json_object_foreach((json_t *)b, key, v) {
        if (!json_object_get(a, key) && n < cap) out[n++] = key;
    }
    return n;
}

typedef struct {
    const char *name;
    size_t off;
} meta_field;
#define RUN_FIELD(f) {#f, offsetof(tp_diff_run, f)}
static const meta_field META[] = {RUN_FIELD(tool),   RUN_FIELD(commit),   RUN_FIELD(date), RUN_FIELD(gpu),
                                  RUN_FIELD(driver), RUN_FIELD(cuda),     RUN_FIELD(cublaslt)};
enum { N_META = sizeof META / sizeof META[0] };
static const char *meta(const tp_diff_run *r, int k) { return *(char *const *)((const char *)r + META[k].off); }

static json_t *json_doc(const tp_diff *d) {
    json_t *root = json_pack("{s:s,s:s}", "format", "tprof-diff-1", "tool", "tprof diff " TPROF_VERSION);
    json_object_set_new(root, "method",
                        json_pack("{s:s,s:f,s:s,s:i,s:f,s:s}", "test", "Mann-Whitney U, two-sided (exact up to 20 "
                                  "samples a side without ties, else the normal approximation with tie and "
                                  "continuity corrections)", "alpha", TP_DIFF_ALPHA, "interval",
                                  "percentile bootstrap of median(b) / median(a)", "resamples", TP_DIFF_BOOT, "level",
                                  TP_DIFF_LEVEL, "noise", "the samples within each run; variation between runs "
                                  "(clocks, another machine of the same kind) is not in them"));
    json_t *runs = json_array(), *diffs = json_array();
    for (int k = 0; k < d->n_runs; k++) {
        const tp_diff_run *r = &d->runs[k];
        json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "run", label(k), "file", r->path, "kind", r->kind, "command",
                              r->command);
        for (int f = 0; f < N_META; f++) json_object_set_new(o, META[f].name, json_string(meta(r, f)));
        json_array_append_new(runs, o);
        if (k == 0) continue;
        for (int f = 0; f < N_META; f++)
            if (strcmp(meta(&d->runs[0], f), meta(r, f)) != 0)
                json_array_append_new(diffs, json_pack("{s:s,s:s,s:s,s:s}", "run", label(k), "field", META[f].name,
                                                       "a", meta(&d->runs[0], f), "b", meta(r, f)));
        const char *keys[64];
        const int nk = config_diffs(d, k, keys, 64);
        for (int i = 0; i < nk; i++) {
            json_t *va = json_object_get(d->runs[0].config, keys[i]), *vb = json_object_get(r->config, keys[i]);
            char field[96];
            snprintf(field, sizeof field, "config.%s", keys[i]);
            json_array_append_new(diffs, json_pack("{s:s,s:s,s:O,s:O}", "run", label(k), "field", field, "a",
                                                   va ? va : json_null(), "b", vb ? vb : json_null()));
        }
    }
    json_object_set_new(root, "runs", runs);
    json_object_set_new(root, "differences", diffs);
    json_t *res = json_array(), *profs = json_array(), *plans = json_array();
    for (int i = 0; i < d->n_m; i++) {
        const tp_diff_match *m = &d->m[i];
        fval v[N_FIELDS];
        match_fields(d, m, v);
        json_t *o = json_object();
        for (int k = 0; k < N_FIELDS; k++)
            json_object_set_new(o, FIELDS[k].name, FIELDS[k].t == F_STR   ? json_string(v[k].s)
                                                   : FIELDS[k].t == F_INT ? json_integer((json_int_t)v[k].v)
                                                                          : tp_json_num(v[k].v));
        json_array_append_new(res, o);
        const tp_diff_result *b = res_b(d, m);
        if (m->layers || m->kernels)
            json_array_append_new(profs, json_pack("{s:s,s:s,s:s,s:i,s:s,s:o,s:o,s:o}", "run", label(m->run), "model",
                                                   b->model, "precision", b->precision, "batch", b->batch, "test",
                                                   b->test, "layers", rows_json(m->layers, m->n_layers, 0),
                                                   "op_kinds", rows_json(m->ops, m->n_ops, 0), "kernels",
                                                   rows_json(m->kernels, m->n_kernels, 1)));
        if (m->n_plan)
            json_array_append_new(plans, json_pack("{s:s,s:s,s:s,s:i,s:s,s:o}", "run", label(m->run), "model",
                                                   b->model, "precision", b->precision, "batch", b->batch, "test",
                                                   b->test, "layers", rows_json(m->plan, m->n_plan, 0)));
    }
    json_object_set_new(root, "results", res);
    json_t *un = json_array();
    for (int i = 0; i < d->n_unmatched; i++) {
        const int k = d->unmatched[2 * i];
        const tp_diff_result *r = &d->runs[k].res[d->unmatched[2 * i + 1]];
        json_array_append_new(un, json_pack("{s:s,s:s,s:s,s:i,s:s}", "run", label(k), "model", r->model, "precision",
                                            r->precision, "batch", r->batch, "test", r->test));
    }
    json_object_set_new(root, "unmatched", un);
    json_object_set_new(root, "profiles", profs);
    json_object_set_new(root, "plan_changes", plans);
    return root;
}

/* ---- SVG (HTML only) ------------------------------------------------------------------------------------------ */

static void svg_esc(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

#define SVG_FONT "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\""

/* Per test, every run's median and interquartile range relative to the baseline's median (A = 100 %): one row a
 * run, one group a test, a vertical line at 100 %. */
static void svg_medians(FILE *f, const tp_diff *d) {
    const int n = d->n_m;
    double lo = 100, hi = 100;
    for (int i = 0; i < n; i++) {
        const tp_diff_result *a = res_a(d, &d->m[i]), *b = res_b(d, &d->m[i]);
        const double s = 100.0 / a->median_ms;
        const double v[] = {a->q1_ms * s, a->q3_ms * s, b->q1_ms * s, b->q3_ms * s, b->median_ms * s};
        for (int k = 0; k < 5; k++)
            if (isfinite(v[k])) lo = fmin(lo, v[k]), hi = fmax(hi, v[k]);
    }
    const double pad = fmax(0.5, 0.1 * (hi - lo));
    lo -= pad, hi += pad;
    const double left = 330, width = 520, row = 16, gap = 10;
    const double H = 40 + n * (2 * row + gap);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               SVG_FONT ">\n", left + width + 20, H + 20, left + width + 20, H + 20);
#define X(v) (left + ((v) - lo) / (hi - lo) * width)
    fprintf(f, "<line x1=\"%.1f\" y1=\"20\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n",
            X(100.0), X(100.0), H);
    fprintf(f, "<text x=\"%.1f\" y=\"14\" text-anchor=\"middle\">A = 100 %%</text>\n", X(100.0));
    fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"start\">%.1f %%</text><text x=\"%.1f\" y=\"%.0f\" "
               "text-anchor=\"end\">%.1f %%</text>\n", left, H + 14, lo, left + width, H + 14, hi);
    for (int i = 0; i < n; i++) {
        const tp_diff_match *m = &d->m[i];
        const tp_diff_result *rs[2] = {res_a(d, m), res_b(d, m)};
        const double s = 100.0 / rs[0]->median_ms, y0 = 30 + i * (2 * row + gap);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", left - 8, y0 + row + 4);
        svg_esc(f, label(m->run));
        fputs(": ", f);
        svg_esc(f, rs[1]->precision);
        fprintf(f, " b%d ", rs[1]->batch);
        svg_esc(f, rs[1]->test);
        fprintf(f, " (%s)</text>\n", m->verdict);
        for (int side = 0; side < 2; side++) {
            const tp_diff_result *r = rs[side];
            const double y = y0 + side * row + row / 2;
            const char *col = side ? (strcmp(m->verdict, "slower") == 0   ? "#e15759"
                                      : strcmp(m->verdict, "faster") == 0 ? "#59a14f"
                                                                          : "#4e79a7")
                                   : "#999";
            if (isfinite(r->q1_ms) && isfinite(r->q3_ms))
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n",
                        X(r->q1_ms * s), y, X(r->q3_ms * s), y, col);
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>%s %.4f ms</title></circle>\n",
                    X(r->median_ms * s), y, col, side ? label(m->run) : "A", r->median_ms);
        }
    }
#undef X
    fputs("</svg>\n", f);
}

/* A profile pair's layers: the change in ms per pass, bars left (faster) or right (slower) of zero. */
static void svg_layers(FILE *f, const tp_diff_match *m) {
    double mx = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const tp_diff_row *r = &m->layers[i];
        mx = fmax(mx, fabs((isnan(r->b_ms) ? 0 : r->b_ms) - (isnan(r->a_ms) ? 0 : r->a_ms)));
    }
    if (!(mx > 0)) mx = 1;
    const double left = 330, width = 520, row = 18, H = 30 + m->n_layers * row;
    const double zero = left + width / 2;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               SVG_FONT ">\n", left + width + 20, H + 20, left + width + 20, H + 20);
    fprintf(f, "<line x1=\"%.1f\" y1=\"16\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n", zero, zero, H);
    fprintf(f, "<text x=\"%.1f\" y=\"12\" text-anchor=\"start\">-%.3f ms</text><text x=\"%.1f\" y=\"12\" "
               "text-anchor=\"end\">+%.3f ms (slower)</text>\n", left, mx, left + width, mx);
    for (int i = 0; i < m->n_layers; i++) {
        const tp_diff_row *r = &m->layers[i];
        const double dv = (isnan(r->b_ms) ? 0 : r->b_ms) - (isnan(r->a_ms) ? 0 : r->a_ms);
        const double y = 22 + i * row, w = fabs(dv) / mx * (width / 2);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", left - 8, y + 12);
        svg_esc(f, r->name);
        fputs("</text>\n", f);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%+.4f ms</title></rect>\n",
                dv >= 0 ? zero : zero - w, y + 2, w, row - 5, dv >= 0 ? "#e15759" : "#59a14f", dv);
    }
    fputs("</svg>\n", f);
}

/* ---- Markdown and HTML ------------------------------------------------------------------------------------- */

static void td_ms(tp_doc *doc, double v) {
    if (isfinite(v)) tp_doc_td(doc, "%.4f", v);
    else tp_doc_td(doc, "-");
}

static void td_median(tp_doc *doc, const tp_diff_result *r) {
    if (!isfinite(r->median_ms)) tp_doc_td(doc, "-");
    else if (isfinite(r->q1_ms)) tp_doc_td(doc, "%.4f (%.4f-%.4f, n %d)", r->median_ms, r->q1_ms, r->q3_ms, r->n);
    else tp_doc_td(doc, "%.4f (no samples)", r->median_ms);
}

static void sec_runs(tp_doc *doc, const tp_diff *d) {
    tp_doc_heading(doc, 2, "runs", "Runs");
    tp_doc_table_open(doc, "llllllllll", "run", "file", "kind", "tool", "commit", "date", "GPU", "driver", "CUDA",
                      "cuBLASLt", NULL);
    for (int k = 0; k < d->n_runs; k++) {
        const tp_diff_run *r = &d->runs[k];
        tp_doc_tr_open(doc);
        tp_doc_td(doc, "%s%s", label(k), k ? "" : " (baseline)");
        tp_doc_td_code(doc, r->path);
        tp_doc_td(doc, "%s", r->kind);
        for (int f = 0; f < N_META; f++) tp_doc_td(doc, "%s", *meta(r, f) ? meta(r, f) : "-");
        tp_doc_tr_close(doc);
    }
    tp_doc_table_close(doc);
    tp_doc_list_open(doc);
    for (int k = 1; k < d->n_runs; k++) {
        const tp_diff_run *r = &d->runs[k];
        tp_doc_li_open(doc);
        tp_doc_txt(doc, "What differs, %s against A: ", label(k));
        int any = 0;
        for (int f = 0; f < N_META; f++)
            if (strcmp(meta(&d->runs[0], f), meta(r, f)) != 0) tp_doc_txt(doc, "%s%s", any++ ? ", " : "", META[f].name);
        const char *keys[64];
        const int nk = config_diffs(d, k, keys, 64);
        for (int i = 0; i < nk; i++) {
            char av[96] = "(absent)", bv[96] = "(absent)";
            const json_t *va = json_object_get(d->runs[0].config, keys[i]), *vb = json_object_get(r->config, keys[i]);
            if (va) tp_json_brief(va, av, sizeof av);
            if (vb) tp_json_brief(vb, bv, sizeof bv);
            tp_doc_txt(doc, "%s", any++ ? ", " : "");
            tp_doc_txt(doc, "option %s (%s -> %s)", keys[i], av, bv);
        }
        if (strcmp(d->runs[0].command, r->command) != 0) {
            tp_doc_txt(doc, "%scommand ", any++ ? "; " : "");
            tp_doc_code(doc, r->command);
        }
        if (!any) tp_doc_txt(doc, "nothing the files record");
        tp_doc_li_close(doc);
    }
    tp_doc_list_close(doc);
}

static void sec_results(tp_doc *doc, const tp_diff *d) {
    tp_doc_heading(doc, 2, "results", "Results");
    tp_doc_para(doc, "Medians in ms (interquartile range, samples). Ratio > 1: the later run is slower. Verdict: "
                     "two-sided Mann-Whitney U test at alpha %.2f and a %.0f %% percentile bootstrap interval of the "
                     "ratio of medians (%d resamples); slower or faster only when both agree. The noise is each run's "
                     "own samples: variation between runs (clocks, another machine of the same kind) is not in them.",
                TP_DIFF_ALPHA, 100 * TP_DIFF_LEVEL, TP_DIFF_BOOT);
    tp_doc_table_open(doc, "llrlllrlrlrr", "run", "model, precision", "batch", "test", "A median ms",
                      "later median ms", "ratio", "95 % interval", "p (U test)", "verdict", "floor ms A / later",
                      "attainment A / later", NULL);
    for (int i = 0; i < d->n_m; i++) {
        const tp_diff_match *m = &d->m[i];
        const tp_diff_result *a = res_a(d, m), *b = res_b(d, m);
        tp_doc_tr_open(doc);
        tp_doc_td(doc, "%s", label(m->run));
        tp_doc_td(doc, "%s %s", b->model, b->precision);
        tp_doc_td(doc, "%d", b->batch);
        tp_doc_td(doc, "%s", b->test);
        td_median(doc, a);
        td_median(doc, b);
        if (isfinite(m->ratio)) tp_doc_td(doc, "%.4f", m->ratio);
        else tp_doc_td(doc, "-");
        if (isfinite(m->ci_lo)) tp_doc_td(doc, "%.4f-%.4f", m->ci_lo, m->ci_hi);
        else tp_doc_td(doc, "-");
        if (isfinite(m->p)) tp_doc_td(doc, "%.2g%s", m->p, m->exact ? " (exact)" : "");
        else tp_doc_td(doc, "-");
        tp_doc_td(doc, "%s", m->verdict);
        if (isfinite(a->floor_ms) || isfinite(b->floor_ms)) tp_doc_td(doc, "%.4f / %.4f", a->floor_ms, b->floor_ms);
        else tp_doc_td(doc, "-");
        if (isfinite(a->floor_ms) || isfinite(b->floor_ms))
            tp_doc_td(doc, "%.1f %% / %.1f %%", 100 * a->floor_ms / a->median_ms, 100 * b->floor_ms / b->median_ms);
        else tp_doc_td(doc, "-");
        tp_doc_tr_close(doc);
    }
    tp_doc_table_close(doc);
    if (doc->html && d->n_m) {
        fputs("<figure>\n", doc->f);
        svg_medians(doc->f, d);
        fputs("<figcaption>Each run's median (dot) and interquartile range (bar) relative to A's median.</figcaption>"
              "\n</figure>\n", doc->f);
    }
    if (!d->n_unmatched) return;
    tp_doc_para(doc, "Results without a partner (same model, precision, batch and test) in the other run:");
    tp_doc_list_open(doc);
    for (int i = 0; i < d->n_unmatched; i++) {
        const int k = d->unmatched[2 * i];
        const tp_diff_result *r = &d->runs[k].res[d->unmatched[2 * i + 1]];
        tp_doc_li_open(doc);
        tp_doc_txt(doc, "%s: %s %s batch %d %s (%.4f ms)", label(k), r->model, r->precision, r->batch, r->test,
                   r->median_ms);
        tp_doc_li_close(doc);
    }
    tp_doc_list_close(doc);
}

/* kind: 0 layers, 1 kernels, 2 op kinds */
static void rows_table(tp_doc *doc, const tp_diff_row *r, int n, int kind) {
    static const char *const H[3][8] = { /* NULL-terminated */
        {"layer", "op", "A ms", "later ms", "change ms", "change", "how (A -> later)"},
        {"kernel", "category", "A ms", "later ms", "change ms", "change", "status"},
        {"op kind", "A ms", "later ms", "change ms", "change", NULL, NULL},
    };
    tp_doc_table_openv(doc, kind == 2 ? "lrrrr" : "llrrrrl", H[kind]);
    const int kernels = kind == 1;
    for (int i = 0; i < n; i++) {
        const double a = r[i].a_ms, b = r[i].b_ms, dv = (isnan(b) ? 0 : b) - (isnan(a) ? 0 : a);
        tp_doc_tr_open(doc);
        tp_doc_td_code(doc, r[i].name);
        if (kind != 2) tp_doc_td(doc, "%s", r[i].op);
        td_ms(doc, a);
        td_ms(doc, b);
        tp_doc_td(doc, "%+.4f", dv);
        if (a > 0 && isfinite(b)) tp_doc_td(doc, "%+.1f %%", 100 * (b - a) / a);
        else tp_doc_td(doc, "-");
        if (kind == 2) {
        } else if (kernels) tp_doc_td(doc, "%s", isnan(a) ? "appeared" : isnan(b) ? "disappeared" : "in both");
        else if (r[i].how_a && r[i].how_b && strcmp(r[i].how_a, r[i].how_b) != 0)
            tp_doc_td(doc, "%s -> %s", r[i].how_a, r[i].how_b);
        else tp_doc_td(doc, "%s", r[i].how_b ? r[i].how_b : r[i].how_a ? r[i].how_a : "");
        tp_doc_tr_close(doc);
    }
    tp_doc_table_close(doc);
}

static void sec_profiles(tp_doc *doc, const tp_diff *d) {
    for (int i = 0; i < d->n_m; i++) {
        const tp_diff_match *m = &d->m[i];
        const tp_diff_result *b = res_b(d, m);
        if (!m->layers && !m->kernels && !m->n_plan) continue;
        char id[32];
        snprintf(id, sizeof id, "match%d", i);
        tp_doc_heading(doc, 2, id, "%s against A: %s %s batch %d %s", label(m->run), b->model, b->precision, b->batch,
                       b->test);
        if (m->layers) {
            tp_doc_para(doc, "The %d layers whose traced time per pass changed most:", m->n_layers);
            rows_table(doc, m->layers, m->n_layers, 0);
            if (doc->html) {
                fputs("<figure>\n", doc->f);
                svg_layers(doc->f, m);
                fputs("<figcaption>Change per layer, ms per pass (right: slower).</figcaption>\n</figure>\n", doc->f);
            }
            tp_doc_para(doc, "By op kind:");
            rows_table(doc, m->ops, m->n_ops, 2);
            tp_doc_para(doc, "Kernels (time per pass from each profile's kernel table, its top kernels; - where a "
                             "kernel ran but is not in that table): %d appeared, %d disappeared.",
                        m->n_appeared, m->n_disappeared);
            rows_table(doc, m->kernels, m->n_kernels, 1);
        }
        if (m->n_plan) {
            tp_doc_para(doc, "Plan changes (precision and kernel per layer):");
            tp_doc_table_open(doc, "llll", "layer", "op", "A", "later", NULL);
            for (int k = 0; k < m->n_plan; k++) {
                tp_doc_tr_open(doc);
                tp_doc_td_code(doc, m->plan[k].name);
                tp_doc_td(doc, "%s", m->plan[k].op);
                tp_doc_td(doc, "%s", m->plan[k].how_a);
                tp_doc_td(doc, "%s", m->plan[k].how_b);
                tp_doc_tr_close(doc);
            }
            tp_doc_table_close(doc);
        }
    }
}

static void write_doc(tp_doc *doc, const tp_diff *d) {
    if (doc->html)
        fprintf(doc->f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tprof diff"
                        "</title>\n<style>%s</style>\n</head>\n<body>\n", tp_doc_css());
    if (d->n_runs == 2) tp_doc_heading(doc, 1, "top", "tprof diff: B against A");
    else tp_doc_heading(doc, 1, "top", "tprof diff: B to %s against A", label(d->n_runs - 1));
    sec_runs(doc, d);
    sec_results(doc, d);
    sec_profiles(doc, d);
    if (doc->html) fputs("</body>\n</html>\n", doc->f);
}

tp_status tp_diff_write(const tp_diff *d, tp_diff_format fmt, FILE *f, tp_error *err) {
    if (fmt == TP_DIFF_CSV) {
        write_csv(d, f);
    } else if (fmt == TP_DIFF_JSON) {
        json_t *root = json_doc(d);
        if (!root || json_dumpf(root, f, JSON_INDENT(1) | JSON_REAL_PRECISION(10)))
            return json_decref(root), tp_fail(err, TP_ERR_IO, "writing the diff's JSON failed");
        fputc('\n', f);
        json_decref(root);
    } else {
        tp_doc doc = {f, fmt == TP_DIFF_HTML, NULL, 0};
        write_doc(&doc, d);
    }
    if (fflush(f) || ferror(f)) return tp_fail(err, TP_ERR_IO, "writing the diff failed");
    return TP_OK;
}
