/* test_diff.c: `tprof diff` (src/report/diff.h, issue 44) and the statistics under it (core/stats.h), on the CPU:
 * the Mann-Whitney U test against hand-counted exact p-values and the normal approximation's formula, ties and
 * degenerate inputs; the bootstrap interval of a ratio of medians; two real H200 runs committed as fixtures
 * (tools/make_diff_fixtures.py: ViT-B/16 batch 64 before and after cuDNN attention) read, matched and compared,
 * down to the attention layers and the kernels that appeared and disappeared; the regression gate on a doctored
 * slower copy and on a run against itself; tprof profile's and tprof compare's JSON read as runs; every output
 * format holding the same fields. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "report/diff.h"

#define BEFORE "tests/fixtures/diff/vit_b16_b64_before.json"
#define AFTER "tests/fixtures/diff/vit_b16_b64_after.json"
#define SLOWER "tests/fixtures/diff/vit_b16_b64_slower.json"
#define PROFILE "bench/results/2026-11-21_h200_profile_vit-b16_b64/fp16.profile.json"
#define COMPARE "bench/results/2026-11-21_h200_compare_vit-b16_b64_attention/report.json"

/* ---- statistics ------------------------------------------------------------------------------------------ */

START_TEST(test_mann_whitney_exact) {
    double u, p;
    int exact;
    /* every a below every b: U = 0; of the C(6, 3) = 20 arrangements one has U = 0, two-sided p = 2/20 */
    const double a[] = {1, 2, 3}, b[] = {4, 5, 6};
    tp_mann_whitney(a, 3, b, 3, &u, &p, &exact);
    ck_assert(exact);
    ck_assert_double_eq_tol(u, 0, 1e-12);
    ck_assert_double_eq_tol(p, 0.1, 1e-12);
    /* the other way round: U = 9, the same p */
    tp_mann_whitney(b, 3, a, 3, &u, &p, &exact);
    ck_assert_double_eq_tol(u, 9, 1e-12);
    ck_assert_double_eq_tol(p, 0.1, 1e-12);
    /* 5 against 5 separated: 2 / C(10, 5) = 2/252 */
    const double c[] = {1, 2, 3, 4, 5}, e[] = {6, 7, 8, 9, 10};
    tp_mann_whitney(c, 5, e, 5, &u, &p, &exact);
    ck_assert_double_eq_tol(p, 2.0 / 252.0, 1e-12);
    /* U = 1 for a = {1, 2, 4}, b = {3, 5, 6}: arrangements with U <= 1 are 2 of 20, p = 4/20 */
    const double f[] = {1, 2, 4}, g[] = {3, 5, 6};
    tp_mann_whitney(f, 3, g, 3, &u, &p, &exact);
    ck_assert_double_eq_tol(u, 1, 1e-12);
    ck_assert_double_eq_tol(p, 0.2, 1e-12);
    /* interleaved: U = n m / 2 is the middle of the distribution, p = 1 */
    const double h[] = {1, 4, 5, 8}, k[] = {2, 3, 6, 7};
    tp_mann_whitney(h, 4, k, 4, &u, &p, &exact);
    ck_assert_double_eq_tol(u, 8, 1e-12);
    ck_assert_double_eq_tol(p, 1.0, 1e-12);
}
END_TEST

START_TEST(test_mann_whitney_normal_and_ties) {
    double u, p;
    int exact = 1;
    /* ties: pairs (1,1) (1,2) (1,2) (1,1) (1,2) (1,2) (2,1) (2,2) (2,2): U = 0.5 + 0.5 + 1 + 0.5 + 0.5 = 3 */
    const double a[] = {1, 1, 2}, b[] = {1, 2, 2};
    tp_mann_whitney(a, 3, b, 3, &u, &p, &exact);
    ck_assert(!exact);
    ck_assert_double_eq_tol(u, 3, 1e-12);
    /* the normal approximation by hand: N = 6, ties of 3 and 3: sum(t^3 - t) = 48; var = 9/12 (7 - 48/30) */
    const double var = 9.0 / 12.0 * (7.0 - 48.0 / 30.0), z = fmax(0.0, fabs(3.0 - 4.5) - 0.5) / sqrt(var);
    ck_assert_double_eq_tol(p, erfc(z / sqrt(2.0)), 1e-12);
    /* 30 against 30, b shifted by 0.5 of a unit spread: the formula again, no ties */
    double x[30], y[30];
    for (int i = 0; i < 30; i++) x[i] = i, y[i] = i + 10.5;
    tp_mann_whitney(x, 30, y, 30, &u, &p, &exact);
    ck_assert(!exact);
    /* pairs with x_i > y_j: x_i > j + 10.5 means j <= i - 11: sum over i of max(0, i - 10) = 19 * 20 / 2 */
    ck_assert_double_eq_tol(u, 190, 1e-9);
    const double v2 = 900.0 / 12.0 * 61.0, z2 = (fabs(190 - 450.0) - 0.5) / sqrt(v2);
    ck_assert_double_eq_tol(p, erfc(z2 / sqrt(2.0)), 1e-12);
    /* all equal: nothing to tell apart */
    const double one[] = {2, 2, 2}, two[] = {2, 2};
    tp_mann_whitney(one, 3, two, 2, &u, &p, NULL);
    ck_assert_double_eq_tol(p, 1.0, 1e-12);
    /* a NaN, or an empty side: NaN */
    const double nan1[] = {1, NAN};
    tp_mann_whitney(nan1, 2, b, 3, &u, &p, NULL);
    ck_assert(isnan(p) && isnan(u));
    tp_mann_whitney(a, 0, b, 3, &u, &p, NULL);
    ck_assert(isnan(p));
}
END_TEST

START_TEST(test_bootstrap_ratio) {
    double a[201], b[201], lo, hi, lo2, hi2;
    /* a: 10 ms with a +-1 % spread; b: the same shape 10 % higher */
    for (int i = 0; i < 201; i++) a[i] = 10.0 * (1.0 + 0.01 * sin(i * 1.7)), b[i] = 1.1 * a[i];
    ck_assert_double_eq_tol(tp_median(b, 201) / tp_median(a, 201), 1.1, 1e-12);
    tp_bootstrap_median_ratio(a, 201, b, 201, 2000, 0.95, 1, &lo, &hi);
    ck_assert_msg(lo < 1.1 && hi > 1.1 && lo > 1.05 && hi < 1.15, "interval %g-%g", lo, hi);
    tp_bootstrap_median_ratio(a, 201, b, 201, 2000, 0.95, 1, &lo2, &hi2); /* the same seed, the same interval */
    ck_assert(lo == lo2 && hi == hi2);
    tp_bootstrap_median_ratio(a, 201, a, 201, 2000, 0.95, 1, &lo, &hi); /* a run against itself holds 1 */
    ck_assert_msg(lo <= 1.0 && hi >= 1.0, "interval %g-%g", lo, hi);
    ck_assert(hi - lo < 0.01);
    const double z[] = {0, 0};
    tp_bootstrap_median_ratio(z, 2, b, 201, 100, 0.95, 1, &lo, &hi); /* a zero median: no ratio */
    ck_assert(isnan(lo) && isnan(hi));
    ck_assert_double_eq_tol(tp_median((const double[]){3, 1, 2, 10}, 4), 2.5, 1e-12);
    ck_assert(isnan(tp_median(a, 0)));
}
END_TEST

/* ---- runs ------------------------------------------------------------------------------------------------- */

static void load2(const char *pa, const char *pb, tp_diff_run *r, tp_diff *d) {
    tp_error err = {0};
    ck_assert_msg(tp_diff_load(pa, &r[0], &err) == TP_OK, "%s", err.msg);
    ck_assert_msg(tp_diff_load(pb, &r[1], &err) == TP_OK, "%s", err.msg);
    ck_assert_msg(tp_diff_compute(r, 2, 6, d, &err) == TP_OK, "%s", err.msg);
}

static void free2(tp_diff_run *r, tp_diff *d) {
    tp_diff_free(d);
    tp_diff_run_free(&r[0]);
    tp_diff_run_free(&r[1]);
}

static const tp_diff_match *find(const tp_diff *d, const char *prec) {
    for (int i = 0; i < d->n_m; i++)
        if (strcmp(d->runs[d->m[i].run].res[d->m[i].ib].precision, prec) == 0) return &d->m[i];
    return NULL;
}

START_TEST(test_real_runs) {
    tp_diff_run r[2];
    tp_diff d;
    load2(BEFORE, AFTER, r, &d);
    ck_assert_str_eq(r[0].kind, "bench");
    ck_assert_str_eq(r[0].commit, "13770103e9a6");
    ck_assert_str_eq(r[1].commit, "ce687c20e6fd");
    ck_assert_str_eq(r[0].gpu, "NVIDIA H200");
    ck_assert_int_eq(d.n_m, 2);
    ck_assert_int_eq(d.n_unmatched, 0);
    const tp_diff_match *m = find(&d, "fp16");
    ck_assert_ptr_nonnull(m);
    const tp_diff_result *a = &r[0].res[m->ia], *b = &r[1].res[m->ib];
    ck_assert_str_eq(b->test, "forward");
    ck_assert_int_eq(b->batch, 64);
    ck_assert_int_eq(a->n, 285);
    ck_assert_int_eq(b->n, 513);
    /* the medians recomputed from the samples: the bench's own medians (nearest rank) are within one sample */
    ck_assert_double_eq_tol(a->median_ms, 10.633, 0.002);
    ck_assert_double_eq_tol(b->median_ms, 6.024, 0.002);
    ck_assert_double_eq_tol(m->ratio, b->median_ms / a->median_ms, 1e-12);
    ck_assert_str_eq(m->verdict, "faster");
    ck_assert(m->p < 1e-50 && m->ci_hi < 0.6 && m->ci_lo > 0.5);
    ck_assert(a->q1_ms <= a->median_ms && a->median_ms <= a->q3_ms);
    /* the profile pair: the attention layers changed most, about 0.43 ms faster each; attention's op kind first */
    ck_assert_int_eq(m->n_layers, 6);
    ck_assert_str_eq(m->layers[0].op, "attention");
    ck_assert_msg(strstr(m->layers[0].name, ".attn") != NULL, "%s", m->layers[0].name);
    ck_assert_double_eq_tol(m->layers[0].b_ms - m->layers[0].a_ms, -0.426, 0.002);
    ck_assert_str_eq(m->ops[0].name, "attention");
    ck_assert_double_eq_tol(m->ops[0].a_ms, 5.7174, 0.0005);
    int appeared = 0, gone = 0;
    for (int i = 0; i < m->n_kernels; i++) {
        const tp_diff_row *k = &m->kernels[i];
        if (isnan(k->a_ms) && strstr(k->name, "cudnn_generated_fort_native_sdpa")) appeared = 1;
        if (isnan(k->b_ms) && strstr(k->name, "attention_kernel<__half, __half, 2>")) gone = 1;
    }
    ck_assert(appeared && gone);
    ck_assert_int_eq(m->n_appeared, 1);
    ck_assert_int_eq(m->n_disappeared, 1);
    ck_assert_int_eq(tp_diff_regressions(&d, 0), 0);
    free2(r, &d);
}
END_TEST

START_TEST(test_gate) {
    tp_diff_run r[2];
    tp_diff d;
    load2(AFTER, SLOWER, r, &d); /* fp16 doctored 5 % slower, fp8 untouched */
    const tp_diff_match *m16 = find(&d, "fp16"), *m8 = find(&d, "fp8");
    ck_assert_str_eq(m16->verdict, "slower");
    ck_assert_double_eq_tol(m16->ratio, 1.05, 1e-9);
    ck_assert(m16->ci_lo > 1.04 && m16->ci_hi < 1.06);
    ck_assert_str_eq(m8->verdict, "same");
    ck_assert_double_eq_tol(m8->ratio, 1.0, 1e-12);
    ck_assert_double_eq_tol(m8->p, 1.0, 1e-9);
    ck_assert_int_eq(tp_diff_regressions(&d, 2), 1);
    ck_assert_int_eq(tp_diff_regressions(&d, 10), 0);
    free2(r, &d);
    load2(AFTER, AFTER, r, &d); /* a run against itself */
    for (int i = 0; i < d.n_m; i++) ck_assert_str_eq(d.m[i].verdict, "same");
    ck_assert_int_eq(tp_diff_regressions(&d, 0), 0);
    ck_assert_int_eq(d.m[0].n_plan, 0);
    free2(r, &d);
}
END_TEST

START_TEST(test_profile_and_compare_json) {
    tp_diff_run p = {0}, c = {0};
    tp_error err = {0};
    ck_assert_msg(tp_diff_load(PROFILE, &p, &err) == TP_OK, "%s", err.msg);
    ck_assert_str_eq(p.kind, "profile");
    ck_assert_str_eq(p.res[0].test, "traced");
    ck_assert_int_eq(p.res[0].n, 20); /* per_iteration */
    ck_assert_ptr_nonnull(p.res[0].profile);
    ck_assert_msg(tp_diff_load(COMPARE, &c, &err) == TP_OK, "%s", err.msg);
    ck_assert_str_eq(c.kind, "compare");
    ck_assert_int_eq(c.n_res, 3);
    ck_assert_int_eq(c.res[0].n, 0); /* compare's JSON holds medians only */
    ck_assert_ptr_nonnull(c.res[0].profile);
    /* a compare report against the bench JSON of the same run: matched, no samples on one side */
    tp_diff_run r[2] = {c, {0}};
    ck_assert_msg(tp_diff_load(AFTER, &r[1], &err) == TP_OK, "%s", err.msg);
    tp_diff d;
    ck_assert(tp_diff_compute(r, 2, 5, &d, &err) == TP_OK);
    ck_assert_int_eq(d.n_m, 2);           /* fp16 and fp8; compare's bf16 has no partner */
    ck_assert_int_eq(d.n_unmatched, 1);
    ck_assert_str_eq(d.m[0].verdict, "no samples");
    ck_assert_double_eq_tol(d.m[0].ratio, 1.0, 0.002); /* the same run: compare's median is the bench's */
    tp_diff_free(&d);
    tp_diff_run_free(&r[1]);
    tp_diff_run_free(&c);
    tp_diff_run_free(&p);
}
END_TEST

START_TEST(test_bad_inputs) {
    tp_diff_run r = {0};
    tp_error err = {0};
    ck_assert_int_eq(tp_diff_load("tests/fixtures/diff/nonexistent.json", &r, &err), TP_ERR_IO);
    ck_assert(strstr(err.msg, "nonexistent.json") != NULL);
    tp_diff_run_free(&r);
    FILE *f = fopen("/tmp/tp_diff_bad.json", "w");
    fputs("{\"results\": [{\"precision\": \"fp16\"", f);
    fclose(f);
    ck_assert_int_eq(tp_diff_load("/tmp/tp_diff_bad.json", &r, &err), TP_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "/tmp/tp_diff_bad.json: line") != NULL, "%s", err.msg);
    tp_diff_run_free(&r);
    f = fopen("/tmp/tp_diff_bad.json", "w");
    fputs("{\"model\": {\"name\": \"m\"}, \"config\": {\"batch\": 1}, \"results\": [{\"precision\": \"fp16\", "
          "\"samples_ms\": [1.0, \"x\"]}]}", f);
    fclose(f);
    ck_assert_int_eq(tp_diff_load("/tmp/tp_diff_bad.json", &r, &err), TP_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "sample 1 is not a number") != NULL, "%s", err.msg);
    tp_diff_run_free(&r);
    f = fopen("/tmp/tp_diff_bad.json", "w");
    fputs("{\"hello\": 1}", f);
    fclose(f);
    ck_assert_int_eq(tp_diff_load("/tmp/tp_diff_bad.json", &r, &err), TP_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "not a JSON of tprof bench, profile or compare") != NULL, "%s", err.msg);
    tp_diff_run_free(&r);
    remove("/tmp/tp_diff_bad.json");
    tp_diff d;
    ck_assert_int_eq(tp_diff_compute(&r, 1, 5, &d, &err), TP_ERR_ARG);
}
END_TEST

/* a decoder's runs: pp and tg matched as their own tests, the decode steps' profile (llm.decode_profile) on the tg
 * match, a standalone decode profile named "traced decode" */
static const char *dec_json(const char *k2, double l1, double l2) {
    static char buf[2][2048];
    static int which;
    char *b = buf[which ^= 1];
    snprintf(b, sizeof buf[0],
             "{\"tool\": \"tprof bench 0.1.0\", \"commit\": \"abc\", \"model\": {\"name\": \"llama-tiny\"}, "
             "\"config\": {\"batch\": 1}, \"system\": {\"gpu\": \"NVIDIA H200\"}, \"results\": [{\"precision\": "
             "\"fp16\", \"latency\": {\"median_ms\": 2.0}, \"samples_ms\": [2.0, 2.1, 1.9, 2.05, 1.95], \"llm\": "
             "{\"tests\": [{\"test\": \"pp8\"}, {\"test\": \"tg4\"}], \"decode_step\": {\"median_ms\": 0.5}, "
             "\"decode_step_samples_ms\": [0.5, 0.51, 0.49], \"decode_profile\": {\"iterations\": 2, \"layers\": "
             "[{\"layer\": \"model.layers.0.self_attn.q_proj\", \"op\": \"linear\", \"ns_per_iter\": %g, "
             "\"kernels\": [\"%s\"]}, {\"layer\": \"model.layers.0.mlp.down_proj\", \"op\": \"linear\", "
             "\"ns_per_iter\": %g, \"kernels\": [\"%s\"]}], \"kernels\": [{\"name\": \"%s\", \"category\": "
             "\"GEMM\", \"total_ns\": 4000}]}}}]}",
             l1, k2, l2, k2, k2);
    return b;
}

START_TEST(test_decoder_runs) {
    const char *pa = "/tmp/tp_diff_dec_a.json", *pb = "/tmp/tp_diff_dec_b.json";
    FILE *f = fopen(pa, "w");
    fputs(dec_json("gemv", 1000, 2000), f);
    fclose(f);
    f = fopen(pb, "w");
    fputs(dec_json("persistent", 1000, 500), f);
    fclose(f);
    tp_diff_run r[2];
    tp_diff d;
    load2(pa, pb, r, &d);
    ck_assert_int_eq(d.n_m, 2);
    const tp_diff_match *tg = NULL, *pp = NULL;
    for (int i = 0; i < d.n_m; i++) {
        const char *t = r[1].res[d.m[i].ib].test;
        if (strcmp(t, "tg4") == 0) tg = &d.m[i];
        if (strcmp(t, "pp8") == 0) pp = &d.m[i];
    }
    ck_assert(tg && pp);
    ck_assert_ptr_null(pp->layers);
    ck_assert_int_eq(tg->n_layers, 2);
    ck_assert_str_eq(tg->layers[0].name, "model.layers.0.mlp.down_proj"); /* -1.5 us: the largest change */
    ck_assert_double_eq_tol(tg->layers[0].b_ms - tg->layers[0].a_ms, -0.0015, 1e-12);
    ck_assert_int_eq(tg->n_appeared, 1);
    ck_assert_int_eq(tg->n_disappeared, 1);
    free2(r, &d);
    /* a standalone decode profile: its own test name */
    f = fopen(pa, "w");
    fputs("{\"model\": \"llama-tiny\", \"precision\": \"fp16\", \"batch\": 1, \"pass\": \"decode\", "
          "\"per_iteration\": [{\"kernel_ns\": 500000}], \"layers\": [], \"kernels\": []}", f);
    fclose(f);
    tp_diff_run p = {0};
    tp_error e = {0};
    ck_assert_msg(tp_diff_load(pa, &p, &e) == TP_OK, "%s", e.msg);
    ck_assert_str_eq(p.res[0].test, "traced decode");
    ck_assert_double_eq_tol(p.res[0].median_ms, 0.5, 1e-12);
    tp_diff_run_free(&p);
    remove(pa);
    remove(pb);
}
END_TEST

/* every format carries the same fields; the HTML inlines well-formed charts */
START_TEST(test_formats) {
    tp_diff_run r[2];
    tp_diff d;
    load2(BEFORE, AFTER, r, &d);
    tp_error err = {0};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert(tp_diff_write(&d, TP_DIFF_JSON, f, &err) == TP_OK);
    fclose(f);
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "format")), "tprof-diff-1");
    json_t *res = json_object_get(j, "results");
    ck_assert_int_eq(json_array_size(res), 2);
    const char *keys[64];
    int nk = 0;
    const char *key;
    json_t *v;
    json_object_foreach(json_array_get(res, 0), key, v) keys[nk++] = key;
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(res, 0), "verdict")), "faster");
    ck_assert_int_eq(json_array_size(json_object_get(j, "profiles")), 2);
    free(buf);
    f = open_memstream(&buf, &len);
    ck_assert(tp_diff_write(&d, TP_DIFF_CSV, f, &err) == TP_OK);
    fclose(f);
    char *nl = strchr(buf, '\n');
    ck_assert_ptr_nonnull(nl);
    *nl = 0;
    int ncols = 1;
    for (char *c = buf; *c; c++) ncols += *c == ',';
    ck_assert_int_eq(ncols, nk); /* the CSV header names the JSON's fields, in the same order */
    char *tok = strtok(buf, ",");
    for (int i = 0; tok; i++, tok = strtok(NULL, ",")) ck_assert_str_eq(tok, keys[i]);
    int rows = 0;
    for (char *c = nl + 1; *c; c++) rows += *c == '\n';
    ck_assert_int_eq(rows, 2);
    json_decref(j);
    free(buf);
    f = open_memstream(&buf, &len);
    ck_assert(tp_diff_write(&d, TP_DIFF_HTML, f, &err) == TP_OK);
    fclose(f);
    ck_assert(strstr(buf, "<!DOCTYPE html>") == buf);
    int open = 0, close = 0;
    for (const char *s = buf; (s = strstr(s, "<svg ")); s++) open++;
    for (const char *s = buf; (s = strstr(s, "</svg>")); s++) close++;
    ck_assert_int_eq(open, 3); /* the medians, and the layers of each profile pair */
    ck_assert_int_eq(close, 3);
    ck_assert(strstr(buf, "attention_kernel&lt;__half") != NULL); /* kernel names escaped */
    ck_assert(strstr(buf, "attention_kernel<") == NULL);
    free(buf);
    f = open_memstream(&buf, &len);
    ck_assert(tp_diff_write(&d, TP_DIFF_MD, f, &err) == TP_OK);
    fclose(f);
    ck_assert(strstr(buf, "## Results") && strstr(buf, "| B | vit_base_patch16_224 fp16 | 64 | forward |"));
    ck_assert(strstr(buf, "What differs, B against A: commit, date"));
    free(buf);
    free2(r, &d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("diff");
    TCase *t = tcase_create("diff");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_mann_whitney_exact);
    tcase_add_test(t, test_mann_whitney_normal_and_ties);
    tcase_add_test(t, test_bootstrap_ratio);
    tcase_add_test(t, test_real_runs);
    tcase_add_test(t, test_gate);
    tcase_add_test(t, test_profile_and_compare_json);
    tcase_add_test(t, test_bad_inputs);
    tcase_add_test(t, test_formats);
    tcase_add_test(t, test_decoder_runs);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    const int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
