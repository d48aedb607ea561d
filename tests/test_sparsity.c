#define _GNU_SOURCE /* setenv, open_memstream */
/* test_sparsity.c: 2:4 structured sparsity on the CPU (formats/sparsity.h, bench/sparse.h): magnitude pruning along
 * K with its tie and NaN rules, the pattern check, the shapes refused, and the selection of a model's linears by
 * glob (each weight pruned once, a glob that matches nothing refused by name). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/sparse.h"
#include "report/compare_sparse.h"
#include "formats/sparsity.h"
#include "models/model.h"

START_TEST(test_prune_rules) {
    /* 2 rows of K = 8: groups (3, -5, 1, 4) keep -5 and 4; (2, 2, 2, 1) a tie keeps the first two; (0, 7, 0, -1)
     * already 2:4; (NaN, 1, 9, 2) keeps the NaN (never taken for a hole) and 9 */
    float w[16] = {3, -5, 1, 4, 2, 2, 2, 1, 0, 7, 0, -1, NAN, 1, 9, 2};
    const float want[16] = {0, -5, 0, 4, 2, 2, 0, 0, 0, 7, 0, -1, NAN, 0, 9, 0};
    int64_t first = 0;
    ck_assert_int_eq(tp_sparse_violations(w, 2, 8, &first), 3);
    ck_assert_int_eq(first, 0);
    ck_assert_int_eq(tp_sparse_prune(w, 2, 8), 3);
    for (int i = 0; i < 16; i++) {
        if (isnan(want[i])) ck_assert(isnan(w[i]));
        else ck_assert_msg(w[i] == want[i] && !signbit(w[i] == 0 ? w[i] : 0.0f), "w[%d] = %g, want %g", i, w[i], want[i]);
    }
    ck_assert_int_eq(tp_sparse_violations(w, 2, 8, &first), 0);
    ck_assert_int_eq(first, -1);
    ck_assert_int_eq(tp_sparse_prune(w, 2, 8), 0); /* idempotent */
    /* -0 is a hole: (-0, 1, -0, 2) is 2:4 */
    float z[4] = {-0.0f, 1, -0.0f, 2};
    ck_assert_int_eq(tp_sparse_violations(z, 1, 4, NULL), 0);
    /* the first violation's index: row 1, group 1 */
    float v[16] = {1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0};
    ck_assert_int_eq(tp_sparse_violations(v, 2, 8, &first), 1);
    ck_assert_int_eq(first, 12);
}
END_TEST

START_TEST(test_shapes) {
    char why[160];
    ck_assert(tp_sparse_shape_ok(3, 64, why, sizeof why));
    ck_assert(!tp_sparse_shape_ok(3, 7, why, sizeof why));
    ck_assert_msg(strstr(why, "K (7)") != NULL, "%s", why);
    ck_assert(!tp_sparse_shape_ok(3, 0, why, sizeof why));
    ck_assert(!tp_sparse_shape_ok(0, 8, NULL, 0));
}
END_TEST

/* a ViT's linears by glob: every selected weight 2:4 afterwards, the others untouched */
START_TEST(test_apply_globs) {
    tp_model m;
    tp_error e = {0};
    tp_params p = {0}, q = {0};
    tp_graph g;
    ck_assert_int_eq(tp_model_preset("vit-tiny", &m, &e), TP_OK);
    ck_assert_int_eq(tp_model_params_init(&m, 1, 0, &p, &e), TP_OK);
    ck_assert_int_eq(tp_model_params_init(&m, 1, 0, &q, &e), TP_OK);
    ck_assert_int_eq(tp_model_build_graph(&m, &p, 1, &g, &e), TP_OK);
    tp_sparse_summary s;
    ck_assert_msg(tp_sparse_apply(&g, &p, "blocks.*.mlp.fc?,head", &s, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(s.n_rows, 2 * 12 + 1);
    ck_assert_int_eq(s.pruned, s.n_rows);
    ck_assert_int_eq(s.already, 0);
    ck_assert_int_eq(s.ineligible, 0);
    for (int k = 0; k < p.n_params; k++) {
        const tp_param *w = &p.params[k];
        int sel = 0;
        for (int r = 0; r < s.n_rows; r++) sel |= strcmp(s.rows[r].param, w->name) == 0;
        if (sel) {
            ck_assert_int_eq(tp_sparse_violations(w->data, w->shape[0], w->numel / w->shape[0], NULL), 0);
            ck_assert_int_eq(s.rows[0].groups, s.rows[0].pruned); /* random weights: every group had 4 non-zeros */
        } else {
            ck_assert_msg(memcmp(w->data, q.params[k].data, sizeof(float) * (size_t)w->numel) == 0, "%s changed",
                          w->name);
        }
    }
    tp_sparse_summary_free(&s);
    /* again: already 2:4, nothing changes */
    ck_assert_int_eq(tp_sparse_apply(&g, &p, "blocks.*.mlp.fc?", &s, &e), TP_OK);
    ck_assert_int_eq(s.already, 24);
    ck_assert_int_eq(s.pruned, 0);
    tp_sparse_summary_free(&s);
    /* refused: a glob that selects nothing (named), an empty one */
    ck_assert_int_eq(tp_sparse_apply(&g, &p, "blocks.*.mlp.fc1,nope*", &s, &e), TP_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "'nope*' matches no linear") != NULL, "%s", e.msg);
    ck_assert_int_eq(tp_sparse_apply(&g, &p, "blocks.*,,head", &s, &e), TP_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "empty glob") != NULL, "%s", e.msg);
    tp_graph_free(&g);
    tp_params_free(&p);
    tp_params_free(&q);
}
END_TEST

/* The compare report's sparsity section: the pruning cost, per engine what ran, "eligible" never shown as "ran" */
START_TEST(test_compare_section) {
    tp_trace t;
    tp_trace_init(&t);
    t.n_ops = 3;
    t.ops = calloc(3, sizeof *t.ops);
    ck_assert_ptr_nonnull(t.ops);
    snprintf(t.ops[0].layer, sizeof t.ops[0].layer, "blocks.0.mlp.fc1");
    snprintf(t.ops[1].layer, sizeof t.ops[1].layer, "blocks.0.mlp.fc2");
    snprintf(t.ops[2].layer, sizeof t.ops[2].layer, "head");
    tp_sparse_op_row rows[3] = {{.op = 0, .state = 1, .sparse_us = 40, .dense_us = 50},
                                {.op = 1, .state = 0, .sparse_us = 60, .dense_us = 50},
                                {.op = 2, .state = -1}};
    snprintf(rows[2].why, sizeof rows[2].why, "N 1000 not a multiple of 16");
    tp_compare_entry e = {.prec = TP_PREC_FP16, .trace = &t, .sparse = rows, .n_sparse = 3};
    tp_compare_config c = {.sparse_layers = "blocks.*,head", .prune_samples = 4, .prune_cosine = 0.98,
                           .prune_rel_l2 = 0.2, .prune_top1 = 0.75};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tp_doc d = {.f = f};
    tp_compare_sparse_section(&d, &c, &e, 1);
    fclose(f);
    ck_assert_msg(strstr(buf, "sparse ran for 1 of 3 linears") && strstr(buf, "dense kept") &&
                  strstr(buf, "not eligible") && strstr(buf, "N 1000 not a multiple of 16") &&
                  strstr(buf, "cosine 0.980000") && strstr(buf, "top-1 agreement 75.0 %") && strstr(buf, "1.25x"),
                  "%s", buf);
    free(buf);
    json_t *j = tp_compare_sparse_json(&c, &e, 1);
    json_t *eng = json_array_get(json_object_get(j, "engines"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(eng, "ran")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(eng, "eligible")), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(eng, "ops"), 1), "state")),
                     "dense kept");
    json_decref(j);
    c.sparse_layers = NULL; /* no sparsity: no section */
    buf = NULL;
    f = open_memstream(&buf, &len);
    d.f = f;
    tp_compare_sparse_section(&d, &c, &e, 1);
    fclose(f);
    ck_assert_int_eq((int)len, 0);
    free(buf);
    ck_assert_ptr_null(tp_compare_sparse_json(&c, &e, 1));
    tp_trace_free(&t);
}
END_TEST

#ifdef TPROF_HAVE_CUDA
#include "exec/cuda/vendor/sparse_cusparselt.h"

/* Where cuSPARSELt was looked for, said: TPROF_CUSPARSELT_LIB naming nothing is reported by name (the search then
 * goes on: the loader path, Python packages), and the GEMM rules need no library */
START_TEST(test_cusparselt_search) {
    setenv("TPROF_CUSPARSELT_LIB", "/nonexistent/libcusparseLt.so.0", 1);
    char msg[1024];
    const int ok = tp_spgemm_available(msg, sizeof msg);
    ck_assert_msg(ok || (strstr(msg, "TPROF_CUSPARSELT_LIB=/nonexistent/libcusparseLt.so.0: no such file") != NULL &&
                         strstr(msg, "Python package directories") != NULL) || strstr(msg, "header") != NULL,
                  "%s", msg);
    tp_spgemm_desc d = {.M = 16, .N = 64, .K = 64, .dt = TP_F16};
    char why[200];
    ck_assert(tp_spgemm_supported(&d, why, sizeof why));
    d.dt = TP_E4M3, d.out_dt = TP_F16;
    ck_assert(tp_spgemm_supported(&d, why, sizeof why));
    d.K = 48; /* 8-bit: multiples of 32 */
    ck_assert(!tp_spgemm_supported(&d, why, sizeof why));
    ck_assert_msg(strstr(why, "multiples of 32") != NULL, "%s", why);
    d.K = 64, d.M = 8; /* 8-bit dense operand: M a multiple of 16 */
    ck_assert(!tp_spgemm_supported(&d, why, sizeof why));
    d.M = 16, d.out_dt = TP_E4M3;
    ck_assert(!tp_spgemm_supported(&d, why, sizeof why));
}
END_TEST
#endif

int main(void) {
    Suite *su = suite_create("sparsity");
    TCase *t = tcase_create("sparsity");
    tcase_add_test(t, test_prune_rules);
    tcase_add_test(t, test_shapes);
    tcase_add_test(t, test_apply_globs);
    tcase_add_test(t, test_compare_section);
#ifdef TPROF_HAVE_CUDA
    tcase_add_test(t, test_cusparselt_search);
#endif
    suite_add_tcase(su, t);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
