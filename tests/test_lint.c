/* test_lint.c: `tprof lint`'s rules (src/lint/lint.h) on ViT configurations whose outcome is worked out by hand
 * here: ViT-B/16 at 224 with a class token (197 tokens) fails MXFP8/NVFP4 attention and the 256/16 variant without
 * one passes; fp8 per tensor has no block rule; a head dim of 40 fails MXFP8; the fixes name concrete numbers
 * (image 256, embed dims, an --mlp-ratio that gives the hidden size it says); the JSON round-trips. No GPU. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TP_TMPDIR_PREFIX "/tmp/tp_lint_test_"
#include "test_tmpdir.h"

#include "lint/lint.h"
#include "models/vit.h"

static tp_vit_config preset(const char *name) {
    tp_vit_config c;
    tp_error e;
    ck_assert_int_eq(tp_vit_config_preset(name, &c, &e), TP_OK);
    return c;
}

static tp_vit_config no_cls(tp_vit_config c, int img) {
    c.img_size = img;
    c.class_token = 0;
    c.global_pool = 1; /* avg */
    return c;
}

/* The rules on a ViT configuration, through the family interface as tprof lint runs them. */
static tp_status lint_vit(const tp_vit_config *c, const tp_precision *p, int n, tp_lint_result *r, tp_error *e) {
    tp_model m;
    tp_vit_model(c, &m);
    return tp_lint(&m, p, n, r, e);
}

/* Runs the rules; the result lives in static storage (it is ~100 KB, and each test uses one at a time). */
static const tp_lint_result *lint(const tp_vit_config *c, const char *precs) {
    static tp_lint_result r;
    tp_precision p[TP_PREC_COUNT];
    int n = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", precs);
    tp_error e = {0};
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) ck_assert_int_eq(tp_precision_parse(t, &p[n++], &e), TP_OK);
    ck_assert_msg(lint_vit(c, p, n, &r, &e) == TP_OK, "%s", e.msg);
    return &r;
}

static const tp_lint_check *rule(const tp_lint_format *f, const char *id) {
    for (int i = 0; i < TP_LINT_N_RULES; i++)
        if (strcmp(f->checks[i].id, id) == 0) return &f->checks[i];
    ck_abort_msg("no rule %s", id);
    return NULL;
}

/* The ids of the failing rules, comma-separated, in table order. */
static const char *failing(const tp_lint_format *f) {
    static char buf[256];
    buf[0] = 0;
    for (int i = 0; i < TP_LINT_N_RULES; i++)
        if (f->checks[i].status == TP_LINT_FAIL) {
            size_t l = strlen(buf);
            snprintf(buf + l, sizeof buf - l, "%s%s", l ? "," : "", f->checks[i].id);
        }
    return buf;
}

static int64_t val(const tp_lint_check *c, const char *name) {
    for (int i = 0; i < c->n_values; i++)
        if (strcmp(c->values[i].name, name) == 0) return c->values[i].v;
    ck_abort_msg("rule %s has no value %s", c->id, name);
    return -1;
}

START_TEST(test_rule_table) {
    const tp_lint_rule_info *r = tp_lint_rules();
    static const char *ids[TP_LINT_N_RULES] = {"attn.seq_block", "attn.head_dim_block", "attn.class_token",
                                               "model.patch_divides_image", "gemm.k_block", "gemm.row_align",
                                               "gemm.kept_high", "attn.layout", "gemm.sparse_24"};
    for (int i = 0; i < TP_LINT_N_RULES; i++) {
        ck_assert_str_eq(r[i].id, ids[i]);
        ck_assert(strlen(r[i].description) > 20 && strlen(r[i].source) > 10);
        ck_assert(strcmp(r[i].area, "attention") == 0 || strcmp(r[i].area, "gemm") == 0 ||
                  strcmp(r[i].area, "model") == 0);
    }
    ck_assert_ptr_nonnull(strstr(r[0].source, "OCP Microscaling"));
    ck_assert_ptr_nonnull(strstr(r[0].source, "VEC16_UE4M3"));
    ck_assert_str_eq(tp_lint_status_name(TP_LINT_NA), "N-A");
}
END_TEST

START_TEST(test_vit_b16_224_class_token_fails) {
    tp_vit_config c = preset("vit-b16");
    const tp_lint_result *r = lint(&c, "mxfp8,nvfp4");
    ck_assert_int_eq(r->model.sh.tokens, 197);
    ck_assert_int_eq(r->model.sh.patches, 196);
    ck_assert_int_eq(r->model.sh.head_dim, 64);
    ck_assert_int_eq(tp_lint_ok(r), 0);
    for (int i = 0; i < 2; i++) {
        const tp_lint_format *f = &r->formats[i];
        ck_assert_int_eq(f->block, i == 0 ? 32 : 16);
        ck_assert_str_eq(failing(f), "attn.seq_block,attn.class_token");
        const tp_lint_check *s = rule(f, "attn.seq_block");
        ck_assert_int_eq(val(s, "T"), 197);
        ck_assert_int_eq(val(s, "block"), f->block);
        ck_assert_int_eq(val(s, "T_padded"), i == 0 ? 224 : 208);
        ck_assert_ptr_nonnull(strstr(s->fix, "--no-class-token --global-pool avg"));
        ck_assert_msg(strstr(s->fix, "--img-size 256 ") != NULL, "%s", s->fix);
        ck_assert_ptr_nonnull(strstr(rule(f, "attn.class_token")->fix, "--no-class-token --global-pool avg"));
        ck_assert_int_eq(rule(f, "attn.layout")->status, TP_LINT_PASS);
        ck_assert_int_eq(rule(f, "gemm.k_block")->status, TP_LINT_PASS);
        ck_assert_int_eq(rule(f, "gemm.row_align")->status, TP_LINT_PASS);
        ck_assert_int_eq(rule(f, "gemm.kept_high")->status, TP_LINT_WARN); /* head N 1000 */
        ck_assert_int_eq(f->n_fail, 2);
    }
    /* the padding cost: (224^2 - 197^2) / 197^2 = 29.29%; NVFP4 (208): 11.48%; and NVFP4's other side: 192 */
    ck_assert_ptr_nonnull(strstr(rule(&r->formats[0], "attn.seq_block")->fix, "+29.3% attention FLOP"));
    ck_assert_ptr_nonnull(strstr(rule(&r->formats[1], "attn.seq_block")->fix, "+11.5% attention FLOP"));
    ck_assert_ptr_nonnull(strstr(rule(&r->formats[1], "attn.seq_block")->fix, "or 192: 144 tokens"));
    char v[512];
    tp_lint_verdict(&r->formats[0], v, sizeof v);
    ck_assert_str_eq(v, "mxfp8: attention cannot run as asked: 2 rules fail (attn.seq_block, attn.class_token)");
}
END_TEST

START_TEST(test_vit_b16_256_no_class_token_passes) {
    tp_vit_config c = no_cls(preset("vit-b16"), 256);
    const tp_lint_result *r = lint(&c, "mxfp8,nvfp4,mxfp4");
    ck_assert_int_eq(r->model.sh.tokens, 256);
    ck_assert_int_eq(tp_lint_ok(r), 1);
    for (int i = 0; i < r->n_formats; i++) {
        ck_assert_str_eq(failing(&r->formats[i]), "");
        ck_assert_int_eq(rule(&r->formats[i], "attn.seq_block")->status, TP_LINT_PASS);
        ck_assert_int_eq(rule(&r->formats[i], "attn.class_token")->status, TP_LINT_PASS);
        ck_assert_str_eq(rule(&r->formats[i], "attn.seq_block")->fix, "");
    }
    char v[512];
    tp_lint_verdict(&r->formats[1], v, sizeof v);
    ck_assert_str_eq(v, "nvfp4: usable as asked: 7 rules pass, 1 warns (layers kept high), 1 N-A");
    /* 224 without the class token: 196 = 12.25 x 16, still fails, and only that rule */
    c = no_cls(preset("vit-b16"), 224);
    r = lint(&c, "nvfp4");
    ck_assert_str_eq(failing(&r->formats[0]), "attn.seq_block");
    ck_assert_ptr_null(strstr(rule(&r->formats[0], "attn.seq_block")->fix, "class token"));
    ck_assert_ptr_nonnull(strstr(rule(&r->formats[0], "attn.seq_block")->fix, "--img-size 256"));
}
END_TEST

START_TEST(test_fp8_per_tensor_and_plain) {
    tp_vit_config c = preset("vit-b16");
    const tp_lint_result *r = lint(&c, "fp8,fp16");
    ck_assert_int_eq(tp_lint_ok(r), 1);
    const tp_lint_format *f = &r->formats[0];
    ck_assert_int_eq(f->block, 0);
    ck_assert_int_eq(f->bits, 8);
    ck_assert_int_eq(rule(f, "attn.seq_block")->status, TP_LINT_NA);
    ck_assert_int_eq(rule(f, "attn.head_dim_block")->status, TP_LINT_NA);
    ck_assert_int_eq(rule(f, "attn.class_token")->status, TP_LINT_NA);
    ck_assert_int_eq(rule(f, "gemm.k_block")->status, TP_LINT_NA);
    ck_assert_int_eq(rule(f, "gemm.row_align")->status, TP_LINT_PASS);
    ck_assert_int_eq(rule(f, "model.patch_divides_image")->status, TP_LINT_PASS);
    f = &r->formats[1];
    ck_assert_int_eq(f->n_pass, 3); /* only the model, layout and 2:4 sparsity rules apply to a plain format */
    ck_assert_int_eq(f->n_na, TP_LINT_N_RULES - 3);
    ck_assert_int_eq(rule(f, "gemm.sparse_24")->status, TP_LINT_PASS);
    ck_assert_int_eq(rule(&r->formats[0], "gemm.sparse_24")->status, TP_LINT_NA); /* fp8: not yet */
}
END_TEST

/* gemm.sparse_24 warns, naming the layers that would stay dense, where N or K is not a multiple of 16 */
START_TEST(test_sparse_rule_warns) {
    tp_vit_config c = preset("vit-b16");
    c.mlp_ratio = 3.9; /* mlp hidden 2995: fc1's N and fc2's K */
    const tp_lint_result *r = lint(&c, "bf16");
    const tp_lint_check *s = rule(&r->formats[0], "gemm.sparse_24");
    ck_assert_int_eq(s->status, TP_LINT_WARN);
    ck_assert_msg(strstr(s->fix, "mlp.fc2") && strstr(s->fix, "mlp.fc1") && strstr(s->fix, "stay dense"), "%s", s->fix);
    ck_assert_int_eq(tp_lint_ok(r), 1); /* a WARN: the model runs, dense there */
}
END_TEST

START_TEST(test_head_dim_fails) {
    tp_vit_config c = no_cls(preset("vit-b16"), 256);
    c.embed_dim = 200;
    c.num_heads = 5; /* D = 40 */
    const tp_lint_result *r = lint(&c, "mxfp8");
    const tp_lint_format *f = &r->formats[0];
    ck_assert_int_eq(tp_lint_ok(r), 0);
    const tp_lint_check *h = rule(f, "attn.head_dim_block");
    ck_assert_int_eq(h->status, TP_LINT_FAIL);
    ck_assert_int_eq(val(h, "D"), 40);
    /* no divisor of 200 is a multiple of 32, so the fix keeps 5 heads: 160 (D 32) or 320 (D 64), or pads to 64 */
    ck_assert_ptr_nonnull(strstr(h->fix, "no head count splits embed 200"));
    ck_assert_ptr_nonnull(strstr(h->fix, "--embed-dim 160 (head dim 32) or 320 (head dim 64)"));
    ck_assert_ptr_nonnull(strstr(h->fix, "zero-pad the head dim to 64"));
    /* K = 200 fails the block and the 16-byte rows; the proposed embed dims satisfy the head-dim rule as well */
    ck_assert_str_eq(failing(f), "attn.head_dim_block,gemm.k_block,gemm.row_align");
    ck_assert_ptr_nonnull(strstr(rule(f, "gemm.k_block")->fix, "--embed-dim 160 (head dim 32)"));
    char v[512];
    tp_lint_verdict(f, v, sizeof v);
    ck_assert_ptr_nonnull(strstr(v, "mxfp8: attention and the GEMMs cannot run as asked: 3 rules fail"));
    /* a head count that works exists for fp8-block on ViT-B (768 / 6 = 128) */
    c = preset("vit-b16");
    r = lint(&c, "fp8-block");
    ck_assert_ptr_nonnull(strstr(rule(&r->formats[0], "attn.head_dim_block")->fix, "--heads 6 (head dim 128)"));
}
END_TEST

START_TEST(test_mlp_ratio_fix_round_trips) {
    tp_vit_config c = no_cls(preset("vit-b16"), 256);
    c.mlp_ratio = 3.9; /* hidden int(768 * 3.9) = 2995 */
    const tp_lint_result *r = lint(&c, "nvfp4");
    const tp_lint_check *k = rule(&r->formats[0], "gemm.k_block");
    ck_assert_int_eq(k->status, TP_LINT_FAIL);
    ck_assert_int_eq(val(k, "mlp.fc2.K"), 2995);
    const char *p = strstr(k->fix, "--mlp-ratio ");
    ck_assert_ptr_nonnull(p);
    double ratio = strtod(p + strlen("--mlp-ratio "), NULL);
    const char *h = strstr(p, "mlp hidden ");
    ck_assert_ptr_nonnull(h);
    int hidden = atoi(h + strlen("mlp hidden "));
    /* the fix satisfies k_block and row_align at once: a multiple of 32 for 4-bit rows */
    ck_assert_int_eq(hidden % 32, 0);
    ck_assert_int_eq((int)(768 * ratio), hidden);
    c.mlp_ratio = ratio;
    r = lint(&c, "nvfp4");
    ck_assert_str_eq(failing(&r->formats[0]), "");
}
END_TEST

START_TEST(test_patch_and_layout) {
    tp_vit_config c = preset("vit-b16");
    c.img_size = 230; /* 14 x 14 patches, 6 px cropped */
    const tp_lint_result *r = lint(&c, "fp16,nvfp4");
    for (int i = 0; i < 2; i++) {
        const tp_lint_check *p = rule(&r->formats[i], "model.patch_divides_image");
        ck_assert_int_eq(p->status, TP_LINT_FAIL);
        ck_assert_ptr_nonnull(strstr(p->fix, "--img-size 224 or 240"));
    }
    ck_assert_int_eq(r->model.sh.tokens, 197);
    /* vit-h14: patch embedding K = 3 * 14^2 = 588 is no multiple of 16: a WARN (kept high), never a FAIL */
    c = preset("vit-h14");
    r = lint(&c, "nvfp4");
    const tp_lint_check *k = rule(&r->formats[0], "gemm.kept_high");
    ck_assert_int_eq(k->status, TP_LINT_WARN);
    ck_assert_int_eq(val(k, "patch_embed.proj.K"), 588);
    ck_assert_ptr_nonnull(strstr(k->fix, "keep patch_embed.proj in fp16/bf16"));
    /* 257 tokens: dropping the class token is the whole fix */
    ck_assert_ptr_nonnull(strstr(rule(&r->formats[0], "attn.seq_block")->fix, "-> 256 tokens = 16 x 16"));
    /* a head dim over 128 fails the layout rule in every format (tprof's attention kernel) */
    c = preset("vit-b16");
    c.num_heads = 4; /* D = 192 */
    r = lint(&c, "fp16");
    ck_assert_int_eq(rule(&r->formats[0], "attn.layout")->status, TP_LINT_FAIL);
    ck_assert_ptr_nonnull(strstr(rule(&r->formats[0], "attn.layout")->fix, "--heads 6 (head dim 128)"));
}
END_TEST

START_TEST(test_errors) {
    tp_vit_config c = preset("vit-b16");
    tp_precision p[3] = {TP_PREC_MXFP8, TP_PREC_NVFP4, TP_PREC_MXFP8};
    static tp_lint_result r;
    tp_error e = {0};
    ck_assert_int_eq(lint_vit(&c, p, 3, &r, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "mxfp8 given twice"));
    ck_assert_int_eq(lint_vit(&c, p, 0, &r, &e), TP_ERR_ARG);
    c.img_size = 8;
    ck_assert_int_eq(lint_vit(&c, p, 1, &r, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "--img-size 8"));
    c = preset("vit-b16");
    c.num_heads = 7;
    ck_assert_int_eq(lint_vit(&c, p, 1, &r, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "--heads 7"));
    c = preset("vit-b16");
    c.class_token = 0; /* with 'token' pooling */
    ck_assert_int_eq(lint_vit(&c, p, 1, &r, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "--global-pool"));
}
END_TEST

START_TEST(test_json_and_text) {
    tp_vit_config c = preset("vit-b16");
    const tp_lint_result *r = lint(&c, "mxfp8,fp8");
    tp_error e = {0};
    const char *path = tpath("lint.json");
    ck_assert_int_eq(tp_lint_write_json(r, path, &e), TP_OK);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j != NULL, "%s", je.text);
    ck_assert(json_is_false(json_object_get(j, "ok")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "tokens")), 197);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "head_dim")), 64);
    json_t *model = json_object_get(j, "model");
    ck_assert_str_eq(json_string_value(json_object_get(model, "name")), "vit_base_patch16_224");
    ck_assert(json_is_true(json_object_get(model, "class_token")));
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "gemms")), 6);
    json_t *fm = json_array_get(json_object_get(j, "formats"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(fm, "precision")), "mxfp8");
    ck_assert_int_eq(json_integer_value(json_object_get(fm, "block")), 32);
    ck_assert(json_is_false(json_object_get(fm, "usable")));
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(fm, "counts"), "fail")), 2);
    json_t *rules = json_object_get(fm, "rules");
    ck_assert_int_eq((int)json_array_size(rules), TP_LINT_N_RULES);
    json_t *s = json_array_get(rules, 0);
    ck_assert_str_eq(json_string_value(json_object_get(s, "id")), "attn.seq_block");
    ck_assert_str_eq(json_string_value(json_object_get(s, "status")), "FAIL");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(s, "values"), "T")), 197);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(s, "fix")), "--img-size 256"));
    ck_assert(json_is_null(json_object_get(json_array_get(rules, 1), "fix"))); /* head dim passes */
    fm = json_array_get(json_object_get(j, "formats"), 1);
    ck_assert(json_is_true(json_object_get(fm, "usable")));
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(fm, "rules"), 0), "status")),
                     "N-A");
    json_decref(j);

    /* a directory that is a file: one error naming the path */
    write_bytes(tpath("file"), "x", 1);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/lint.json", tpath("file"));
    ck_assert_int_eq(tp_lint_write_json(r, bad, &e), TP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, bad));

    /* the text report: a row per rule and format, the fixes, the verdicts */
    FILE *f = fopen(tpath("lint.txt"), "w");
    ck_assert_ptr_nonnull(f);
    tp_lint_print(r, f);
    fclose(f);
    size_t n;
    char *txt = (char *)read_bytes(tpath("lint.txt"), &n);
    txt[n] = 0;
    ck_assert_ptr_nonnull(strstr(txt, "196 patches + 1 class token = 197 tokens"));
    ck_assert_ptr_nonnull(strstr(txt, "attn.seq_block             mxfp8      FAIL"));
    ck_assert_ptr_nonnull(strstr(txt, "fix: drop the class token"));
    ck_assert_ptr_nonnull(strstr(txt, "\nmxfp8: attention cannot run as asked: 2 rules fail"));
    ck_assert_ptr_nonnull(strstr(txt, "\nfp8: usable as asked"));
    free(txt);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lint");
    TCase *c = tcase_create("rules");
    tcase_add_test(c, test_rule_table);
    tcase_add_test(c, test_vit_b16_224_class_token_fails);
    tcase_add_test(c, test_vit_b16_256_no_class_token_passes);
    tcase_add_test(c, test_fp8_per_tensor_and_plain);
    tcase_add_test(c, test_sparse_rule_warns);
    tcase_add_test(c, test_head_dim_fails);
    tcase_add_test(c, test_mlp_ratio_fix_round_trips);
    tcase_add_test(c, test_patch_and_layout);
    tcase_add_test(c, test_errors);
    suite_add_tcase(s, c);
    TCase *o = tcase_create("output");
    tcase_add_checked_fixture(o, setup, teardown);
    tcase_add_test(o, test_json_and_text);
    suite_add_tcase(s, o);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
