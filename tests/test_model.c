/* test_model.c: ViT presets, parameter names and shapes (timm's), graph shapes and FLOP counts, the planner's
 * decisions (without a GPU), and the CPU executor against timm's own output (golden fixtures made by
 * tools/make_timm_golden.py with torch and timm). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "core/rng.h"
#include "core/stats.h"
#include "exec/cpu/cpu_exec.h"
#include "exec/cpu/cpu_ops.h"
#include "io/hf_hub.h"
#include "io/safetensors.h"
#include "models/vit.h"
#include "planner/plan.h"
#include "planner/policy.h"

#define TP_TMPDIR_PREFIX "/tmp/tp_model_test_"
#include "test_tmpdir.h"

static tp_vit_config preset(const char *name) {
    tp_vit_config c;
    tp_error e;
    ck_assert_msg(tp_vit_config_preset(name, &c, &e) == TP_OK, "%s", e.msg);
    return c;
}

static const tp_param *find(const tp_params *p, const char *name) {
    int i = tp_params_find(p, name);
    ck_assert_msg(i >= 0, "parameter %s missing", name);
    return &p->params[i];
}

static void assert_shape(const tp_params *p, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                         int64_t d3) {
    const tp_param *t = find(p, name);
    int64_t d[4] = {d0, d1, d2, d3};
    ck_assert_int_eq(t->ndim, ndim);
    for (int i = 0; i < ndim; i++) ck_assert_msg(t->shape[i] == d[i], "%s dim %d: %lld != %lld", name, i,
                                                 (long long)t->shape[i], (long long)d[i]);
}

START_TEST(test_presets) {
    tp_vit_config a = preset("vit-b16"), b = preset("vit_base_patch16_224");
    ck_assert_str_eq(a.name, "vit_base_patch16_224");
    ck_assert_int_eq(a.embed_dim, 768);
    ck_assert_int_eq(b.depth, 12);
    ck_assert_int_eq(tp_vit_tokens(&a), 197);
    ck_assert_int_eq(tp_vit_mlp_hidden(&a), 3072);
    tp_vit_config c = preset("vit_base_patch16_384");
    ck_assert_int_eq(tp_vit_tokens(&c), 577);
    ck_assert(c.pre.crop_pct == 1.0);
    tp_vit_config l = preset("vit-l16");
    ck_assert_int_eq(l.depth, 24);
    ck_assert_int_eq(l.embed_dim, 1024);
    tp_error e;
    tp_vit_config x;
    ck_assert_int_eq(tp_vit_config_preset("vit-zzz", &x, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "vit-zzz"));
    ck_assert_ptr_null(strchr(e.msg, '\n'));
}
END_TEST

START_TEST(test_config_validation) {
    tp_error e;
    tp_vit_config c = preset("vit-b16");
    c.patch_size = 15;
    ck_assert_int_eq(tp_vit_config_validate(&c, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "--patch-size 15"));
    c = preset("vit-b16");
    c.num_heads = 7;
    ck_assert_int_eq(tp_vit_config_validate(&c, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "--heads 7"));
    c = preset("vit-b16");
    c.class_token = 0;
    ck_assert_int_eq(tp_vit_config_validate(&c, &e), TP_ERR_ARG);
    c.global_pool = 1;
    ck_assert_int_eq(tp_vit_config_validate(&c, &e), TP_OK);
}
END_TEST

START_TEST(test_param_names_shapes) {
    tp_vit_config c = preset("vit-b16");
    tp_params p = {0};
    tp_error e;
    ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
    ck_assert_int_eq(p.n_params, 4 + 12 * 12 + 2 + 2);
    assert_shape(&p, "cls_token", 3, 1, 1, 768, 0);
    assert_shape(&p, "pos_embed", 3, 1, 197, 768, 0);
    assert_shape(&p, "patch_embed.proj.weight", 4, 768, 3, 16, 16);
    assert_shape(&p, "blocks.0.attn.qkv.weight", 2, 2304, 768, 0, 0);
    assert_shape(&p, "blocks.0.attn.qkv.bias", 1, 2304, 0, 0, 0);
    assert_shape(&p, "blocks.11.attn.proj.weight", 2, 768, 768, 0, 0);
    assert_shape(&p, "blocks.11.mlp.fc1.weight", 2, 3072, 768, 0, 0);
    assert_shape(&p, "blocks.11.mlp.fc2.weight", 2, 768, 3072, 0, 0);
    assert_shape(&p, "blocks.5.norm2.bias", 1, 768, 0, 0, 0);
    assert_shape(&p, "norm.weight", 1, 768, 0, 0, 0);
    assert_shape(&p, "head.weight", 2, 1000, 768, 0, 0);
    ck_assert_int_eq(tp_params_find(&p, "fc_norm.weight"), -1);
    /* timm: vit_base_patch16_224 has 86,567,656 parameters */
    ck_assert_uint_eq(tp_params_count(&p), 86567656u);
    tp_params_free(&p);

    c.global_pool = 1;
    c.class_token = 0;
    c.num_classes = 0;
    ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
    ck_assert_int_eq(tp_params_find(&p, "cls_token"), -1);
    ck_assert_int_eq(tp_params_find(&p, "norm.weight"), -1);
    ck_assert_int_eq(tp_params_find(&p, "head.weight"), -1);
    assert_shape(&p, "fc_norm.weight", 1, 768, 0, 0, 0);
    assert_shape(&p, "pos_embed", 3, 1, 196, 768, 0);
    tp_params_free(&p);
}
END_TEST

static double matmul_gflop_per_image(const char *name) {
    tp_vit_config c = preset(name);
    tp_params p = {0};
    tp_graph g;
    tp_error e;
    ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
    ck_assert_int_eq(tp_vit_build_graph(&c, &p, 3, &g, &e), TP_OK);
    double gf = tp_graph_matmul_flop(&g) / 3 * 1e-9;
    tp_graph_free(&g);
    tp_params_free(&p);
    return gf;
}

START_TEST(test_flop_counts) {
    /* timm's model tables list GMACs per image; FLOP = 2 x MAC. ViT-B/16: 17.58 GMACs = 35.16 GFLOP. */
    struct {
        const char *name;
        double gmacs;
    } cases[] = {{"vit_base_patch16_224", 17.58}, {"vit_tiny_patch16_224", 1.26}, {"vit_small_patch16_224", 4.61},
                 {"vit_base_patch32_224", 4.41},  {"vit_large_patch16_224", 61.6}, {"vit_base_patch16_384", 55.54}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double gf = matmul_gflop_per_image(cases[i].name), want = 2 * cases[i].gmacs;
        ck_assert_msg(fabs(gf - want) / want < 0.01, "%s: %.3f GFLOP, timm %.3f", cases[i].name, gf, want);
    }
    double b16 = matmul_gflop_per_image("vit-b16");
    ck_assert_msg(fabs(b16 - 35.1) / 35.1 < 0.01, "ViT-B/16: %.3f GFLOP", b16);
}
END_TEST

START_TEST(test_graph_shapes) {
    tp_vit_config c = preset("vit-b16");
    tp_params p = {0};
    tp_graph g;
    tp_error e;
    ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
    ck_assert_int_eq(tp_vit_build_graph(&c, &p, 64, &g, &e), TP_OK);
    ck_assert_int_eq(g.n_ops, 2 + 12 * 10 + 2 + 1);
    const tp_value *out = &g.values[g.output];
    ck_assert_int_eq(out->ndim, 2);
    ck_assert_int_eq(out->shape[0], 64);
    ck_assert_int_eq(out->shape[1], 1000);
    int seen_fc1 = 0;
    for (int i = 0; i < g.n_ops; i++) {
        const tp_op *op = &g.ops[i];
        if (strcmp(op->layer, "blocks.3.mlp.fc1") == 0) {
            seen_fc1 = 1;
            ck_assert_int_eq(op->kind, TP_OP_LINEAR);
            ck_assert_int_eq(op->gemm_m, 64 * 197);
            ck_assert_int_eq(op->gemm_n, 3072);
            ck_assert_int_eq(op->gemm_k, 768);
            ck_assert(op->matmul_flop == 2.0 * 64 * 197 * 3072 * 768);
        }
        if (op->kind == TP_OP_ATTENTION) {
            ck_assert_int_eq(op->heads, 12);
            ck_assert_int_eq(op->head_dim, 64);
            ck_assert(fabsf(op->scale - 0.125f) < 1e-7f);
        }
    }
    ck_assert(seen_fc1);
    tp_graph_free(&g);
    ck_assert_int_eq(tp_vit_build_graph(&c, &p, 0, &g, &e), TP_ERR_ARG);
    tp_params_free(&p);
}
END_TEST

START_TEST(test_planner) {
    tp_vit_config c = preset("vit-b16");
    tp_params p = {0};
    tp_graph g;
    tp_plan plan;
    tp_error e;
    ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
    ck_assert_int_eq(tp_vit_build_graph(&c, &p, 2, &g, &e), TP_OK);
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_FP8, 90, &plan, &e), TP_OK);
    int n8 = 0;
    for (int i = 0; i < g.n_ops; i++) {
        const tp_op *op = &g.ops[i];
        n8 += plan.op_prec[i] == TP_PREC_FP8;
        if (strcmp(op->layer, "head") == 0 || op->kind == TP_OP_PATCH_EMBED) {
            ck_assert_int_eq(plan.op_prec[i], TP_PREC_FP16);
            ck_assert_msg(strstr(plan.op_note[i], "kept high") && strstr(plan.op_note[i], "=fp16"), "%s: %s",
                          op->layer, plan.op_note[i]);
        }
        if (strcmp(op->layer, "blocks.0.attn.qkv") == 0) {
            ck_assert_int_eq(plan.value_dt[op->in[0]], TP_E4M3); /* norm1 writes E4M3 directly */
            ck_assert_int_eq(plan.value_dt[op->in[1]], TP_E4M3);
            ck_assert_int_eq(plan.value_dt[op->in[2]], TP_F16); /* bias in the output type */
            ck_assert_int_eq(plan.value_dt[op->out], TP_F16);
        }
    }
    ck_assert_int_eq(n8, 4 * 12);
    /* FP8 weights: about half the FP16 engine's bytes */
    tp_plan p16;
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_FP16, 90, &p16, &e), TP_OK);
    double r = tp_plan_weight_bytes(&plan, &g) / tp_plan_weight_bytes(&p16, &g);
    ck_assert_msg(r > 0.5 && r < 0.53, "fp8/fp16 weight bytes %.3f", r);
    tp_plan_free(&p16);
    tp_plan_free(&plan);

    /* impossible combinations are errors that name the format and the target */
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_FP8, 80, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "fp8"));
    ck_assert_ptr_nonnull(strstr(e.msg, "sm_80"));
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_BF16, 75, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_FP16, 0, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "CPU"));
    tp_graph_free(&g);
    tp_params_free(&p);

    /* K not a multiple of 16: an FP8 GEMM cuBLASLt cannot run, named by layer */
    c.embed_dim = 72;
    c.num_heads = 3;
    ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
    ck_assert_int_eq(tp_vit_build_graph(&c, &p, 1, &g, &e), TP_OK);
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_FP8, 90, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "blocks.0.attn.qkv"));
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_FP16, 90, &plan, &e), TP_OK);
    tp_plan_free(&plan);
    tp_graph_free(&g);
    tp_params_free(&p);

    tp_precision pr;
    ck_assert_int_eq(tp_precision_parse("fp8", &pr, &e), TP_OK);
    ck_assert_int_eq(pr, TP_PREC_FP8);
    ck_assert_int_eq(tp_precision_parse("fp4", &pr, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "fp4"));
}
END_TEST

START_TEST(test_synthesized_weights) {
    /* deterministic, timm's distributions */
    tp_vit_config c = preset("vit-tiny");
    tp_params a = {0}, b = {0};
    tp_error e;
    ck_assert_int_eq(tp_vit_params_init(&c, 7, 0, &a, &e), TP_OK);
    ck_assert_int_eq(tp_vit_params_init(&c, 7, 0, &b, &e), TP_OK);
    for (int i = 0; i < a.n_params; i++)
        ck_assert(memcmp(a.params[i].data, b.params[i].data, sizeof(float) * (size_t)a.params[i].numel) == 0);
    const tp_param *w = find(&a, "blocks.0.mlp.fc1.weight");
    double s = 0, s2 = 0;
    for (int64_t j = 0; j < w->numel; j++) s += w->data[j], s2 += (double)w->data[j] * w->data[j];
    double mean = s / w->numel, sd = sqrt(s2 / w->numel - mean * mean);
    ck_assert_msg(fabs(mean) < 1e-3 && fabs(sd - 0.02) < 1e-3, "fc1 init mean %g std %g", mean, sd);
    ck_assert(find(&a, "norm.weight")->data[5] == 1.0f);
    ck_assert(find(&a, "blocks.1.attn.qkv.bias")->data[3] == 0.0f);
    tp_params_free(&a);
    tp_params_free(&b);
}
END_TEST

/* core/rng.h's counter-based draws, behind every synthesized weight: splitmix64's published first output, the
 * normal draw an exact multiple of 2^-16 within +-6, its moments, and any draw recomputed alone equal to the same
 * draw in a parallel fill (the property the GPU generator relies on). */
START_TEST(test_counter_draws) {
    ck_assert(tp_ctr_u64(0, 0) == 0xE220A8397B1DCDAFull); /* splitmix64 seeded with 0, first output */
    const uint64_t key = tp_ctr_key(7, "blocks.0.mlp.fc1.weight");
    ck_assert(key != tp_ctr_key(7, "blocks.0.mlp.fc2.weight") && key != tp_ctr_key(8, "blocks.0.mlp.fc1.weight"));
    const int n = 1 << 20;
    float *x = malloc(sizeof(float) * n);
#pragma omp parallel for
    for (int i = 0; i < n; i++) x[i] = tp_ctr_normal(key, (uint64_t)i);
    double s = 0, s2 = 0, s4 = 0, us = 0;
    long bad = 0; /* counted, asserted once: a million assertions cost seconds under the sanitizers */
    for (int i = 0; i < n; i++) {
        const double v = x[i];
        bad += !(fabs(v) <= 6.0 && v * 65536.0 == floor(v * 65536.0));
        s += v, s2 += v * v, s4 += v * v * v * v;
        const float u = tp_ctr_uniform(key, (uint64_t)i);
        bad += !(u >= 0.0f && u < 1.0f);
        us += u;
    }
    for (int i = 0; i < n; i += 4099) bad += x[i] != tp_ctr_normal(key, (uint64_t)i); /* order-free */
    ck_assert_msg(bad == 0, "%ld draws outside their grid or range, or different when drawn alone", bad);
    const double mean = s / n, var = s2 / n - mean * mean, kurt = s4 / n / (var * var);
    /* sampling error of the mean ~1e-3, of the variance ~1.4e-3; Irwin-Hall(12)'s kurtosis is 3 - 1.2/12 = 2.9 */
    ck_assert_msg(fabs(mean) < 5e-3 && fabs(var - 1.0) < 7e-3 && fabs(kurt - 2.9) < 0.03, "mean %g var %g kurtosis %g",
                  mean, var, kurt);
    ck_assert_msg(fabs(us / n - 0.5) < 2e-3, "uniform mean %g", us / n);
    free(x);
}
END_TEST

/* tp_ctr_fill_normal (the synthesized weights' fill: OpenMP, and on AVX-512 CPUs a vector clone picked at run time)
 * equals, bit for bit, the scalar formula the models used before it, offset + scale * draw in double with the
 * product rounded before the sum (a volatile forces the rounding here), then one rounding to float: weights,
 * biases (offset 0) and norm weights (offset 1, 1 + w's Gemma 0), an odd length (a vector loop's tail), and a
 * short one below the parallel threshold. */
START_TEST(test_counter_fill) {
    static const double cases[][2] = {{0.02, 0.0}, {0.05, 0.0}, {0.1, 1.0}, {1e-6, 0.0}, {0.1, 0.0}};
    static const int64_t lens[] = {1000003, 77};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t l = 0; l < 2; l++) {
            const int64_t n = lens[l];
            const uint64_t key = tp_ctr_key(11 + c, "model.layers.0.mlp.up_proj.weight");
            float *x = malloc(sizeof(float) * (size_t)n);
            ck_assert_ptr_nonnull(x);
            tp_ctr_fill_normal(x, n, key, cases[c][0], cases[c][1]);
            long bad = 0;
            for (int64_t j = 0; j < n; j++) {
                volatile double prod = cases[c][0] * (double)tp_ctr_normal(key, (uint64_t)j);
                const float want = (float)(cases[c][1] + prod);
                bad += memcmp(&x[j], &want, sizeof want) != 0;
            }
            ck_assert_msg(bad == 0, "scale %g offset %g n %lld: %ld values differ from the scalar formula", cases[c][0],
                          cases[c][1], (long long)n, bad);
            free(x);
        }
}
END_TEST

/* Golden fixtures: tests/fixtures/<name>.safetensors holds timm's state_dict (weights perturbed so that
 * biases and LayerNorm affines are non-trivial); <name>.io.safetensors holds "input" (B,3,S,S) and timm's
 * fp32 "output". The configurations below must match tools/make_timm_golden.py. */
static void golden(const char *name, tp_vit_config c, int B) {
    char wpath[256], iopath[256];
    snprintf(wpath, sizeof wpath, "tests/fixtures/%s.safetensors", name);
    snprintf(iopath, sizeof iopath, "tests/fixtures/%s.io.safetensors", name);
    tp_params p = {0};
    tp_error e;
    ck_assert_msg(tp_vit_params_load(&c, wpath, &p, &e) == TP_OK, "%s", e.msg);
    /* per sample: the classes, or without pooling (T, classes) */
    const int S = c.img_size, T = c.global_pool == TP_VIT_POOL_NONE ? tp_vit_tokens(&c) : 1,
              classes = T * c.num_classes;
    float *in = malloc(sizeof(float) * (size_t)B * 3 * S * S), *want = malloc(sizeof(float) * (size_t)B * classes);
    float *got = malloc(sizeof(float) * (size_t)B * classes);
    tp_param_spec io[2] = {{"input", 4, {B, 3, S, S}, in}, {"output", 2, {B, classes}, want}};
    if (T > 1) io[1] = (tp_param_spec){"output", 3, {B, T, c.num_classes}, want};
    ck_assert_msg(tp_st_load_params(iopath, io, 2, &e) == TP_OK, "%s", e.msg);
    tp_graph g;
    ck_assert_int_eq(tp_vit_build_graph(&c, &p, B, &g, &e), TP_OK);
    ck_assert_msg(tp_cpu_run(&g, &p, in, got, &e) == TP_OK, "%s", e.msg);
    tp_accuracy acc;
    tp_accuracy_compute(got, want, B, classes, &acc);
    ck_assert_int_eq(acc.nonfinite, 0);
    ck_assert_msg(acc.rel_l2 < 1e-5, "%s: relative L2 error against timm %.3e (max abs %.3e)", name, acc.rel_l2,
                  acc.max_abs);
    if (T == 1) ck_assert(acc.top1_agree == 1.0);
    tp_graph_free(&g);
    tp_params_free(&p);
    free(in);
    free(want);
    free(got);
}

START_TEST(test_golden_timm_token) {
    tp_vit_config c = preset("vit-tiny");
    c.img_size = c.pre.img_size = 48;
    c.patch_size = 16;
    c.embed_dim = 64;
    c.depth = 2;
    c.num_heads = 2;
    c.num_classes = 10;
    golden("timm_vit_token", c, 3);
}
END_TEST

START_TEST(test_golden_timm_avg) {
    tp_vit_config c = preset("vit-tiny");
    c.img_size = c.pre.img_size = 32;
    c.patch_size = 8;
    c.embed_dim = 48;
    c.depth = 2;
    c.num_heads = 3;
    c.mlp_ratio = 2.5;
    c.class_token = 0;
    c.global_pool = 1;
    c.num_classes = 7;
    golden("timm_vit_avg", c, 2);
}
END_TEST

/* SigLIP's layout (issue 21's vision stage): no class token, no pooling, the head on every token, tanh GELU */
static tp_vit_config siglip_like(void) {
    tp_vit_config c = preset("vit-tiny");
    c.img_size = c.pre.img_size = 42;
    c.patch_size = 14;
    c.embed_dim = 48;
    c.depth = 2;
    c.num_heads = 3;
    c.mlp_ratio = 3.7362;
    c.class_token = 0;
    c.global_pool = TP_VIT_POOL_NONE;
    c.num_classes = 40;
    c.gelu_tanh = 1;
    return c;
}

START_TEST(test_golden_timm_tokens_gelu_tanh) { golden("timm_vit_tokens_gelu_tanh", siglip_like(), 3); }
END_TEST

/* Without pooling: the output is (B, T, N), every token's head output; the head is the one linear applied to
 * each token's normed features (the same model without a head gives those); the tanh GELU is another function
 * than the erf one (the outputs move), and both survive the engine file's JSON. */
START_TEST(test_vit_tokens_output) {
    tp_vit_config c = siglip_like();
    const int B = 2, T = tp_vit_tokens(&c), N = c.num_classes, C = c.embed_dim, S = c.img_size;
    ck_assert_int_eq(T, 9);
    tp_params p = {0};
    tp_error e = {0};
    ck_assert_int_eq(tp_vit_params_init(&c, 3, 1, &p, &e), TP_OK);
    /* fc1 scaled up so that the GELUs see inputs of order 1, where tanh's and erf's differ by ~1e-4 (timm's 0.02
     * init leaves them near 0, where the two agree to ~1e-7 and whether the outputs move depends on the draw) */
    for (int i = 0; i < p.n_params; i++)
        if (strstr(p.params[i].name, "mlp.fc1.weight"))
            for (int64_t j = 0; j < p.params[i].numel; j++) p.params[i].data[j] *= 50.0f;
    tp_graph g;
    ck_assert_msg(tp_vit_build_graph(&c, &p, B, &g, &e) == TP_OK, "%s", e.msg);
    const tp_value *o = &g.values[g.output];
    ck_assert_int_eq(o->ndim, 3);
    ck_assert_int_eq(o->shape[1], T);
    ck_assert_int_eq(o->shape[2], N);
    float *in = malloc(sizeof(float) * (size_t)B * 3 * S * S), *y = malloc(sizeof(float) * (size_t)B * T * N);
    float *f = malloc(sizeof(float) * (size_t)B * T * C), *yh = malloc(sizeof(float) * (size_t)B * T * N);
    for (int i = 0; i < B * 3 * S * S; i++) in[i] = (float)sin(0.37 * i);
    ck_assert_msg(tp_cpu_run(&g, &p, in, y, &e) == TP_OK, "%s", e.msg);
    /* the same weights without the head: the normed token features */
    tp_vit_config cf = c;
    cf.num_classes = 0;
    tp_graph gf;
    ck_assert_msg(tp_vit_build_graph(&cf, &p, B, &gf, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_cpu_run(&gf, &p, in, f, &e) == TP_OK, "%s", e.msg);
    const tp_param *w = &p.params[tp_params_find(&p, "head.weight")], *b = &p.params[tp_params_find(&p, "head.bias")];
    tp_cpu_linear(f, w->data, b->data, yh, (int64_t)B * T, N, C);
    for (int i = 0; i < B * T * N; i++) ck_assert_float_eq_tol(y[i], yh[i], 1e-5f * (1.0f + fabsf(yh[i])));
    /* the erf GELU gives other outputs */
    tp_vit_config ce = c;
    ce.gelu_tanh = 0;
    tp_graph ge;
    ck_assert_int_eq(tp_vit_build_graph(&ce, &p, B, &ge, &e), TP_OK);
    ck_assert_msg(tp_cpu_run(&ge, &p, in, yh, &e) == TP_OK, "%s", e.msg);
    double d = 0;
    for (int i = 0; i < B * T * N; i++) d = fmax(d, fabs((double)y[i] - yh[i]));
    ck_assert_msg(d > 1e-6, "the tanh and erf GELU models gave the same outputs (max diff %g)", d);
    /* the engine file's JSON keeps both */
    tp_model m, back;
    tp_vit_model(&c, &m);
    json_t *j = tp_model_to_json(&m);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "global_pool")), "none");
    ck_assert_str_eq(json_string_value(json_object_get(j, "act_layer")), "gelu_tanh");
    ck_assert_msg(tp_model_from_json(j, "vit", &back, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(tp_vit_cfg(&back)->global_pool, TP_VIT_POOL_NONE);
    ck_assert_int_eq(tp_vit_cfg(&back)->gelu_tanh, 1);
    json_decref(j);
    tp_graph_free(&ge);
    tp_graph_free(&gf);
    tp_graph_free(&g);
    tp_params_free(&p);
    free(in);
    free(y);
    free(f);
    free(yh);
}
END_TEST

/* Golden checkpoints made from image files by timm's own eval transform (tools/make_timm_golden.py, run where
 * torch and timm are): tests/fixtures/<name>/ holds model.safetensors and timm's config.json beside it (HF hub
 * layout; its pretrained_cfg is the preprocessing), io.safetensors holds timm's "input" (its transform of the two
 * PNGs, in order) and fp32 "output". The path a user takes: the preset and knobs of the architecture, the
 * checkpoint's config.json, the weights, the images through tprof's preprocessing, the CPU reference; logits within
 * relative L2 1e-5 of timm's (issue 19), and tprof's preprocessed input equal to timm's. */
static void golden_checkpoint(const char *name, const char *const *knobs, int classes) {
    static const char *const IMAGES[2] = {"tests/fixtures/preprocess_timm_a.png", "tests/fixtures/preprocess_timm_b.png"};
    char wpath[256], iopath[256], note[700], desc[600];
    snprintf(wpath, sizeof wpath, "tests/fixtures/%s/model.safetensors", name);
    snprintf(iopath, sizeof iopath, "tests/fixtures/%s/io.safetensors", name);
    tp_model m;
    tp_error e = {0};
    ck_assert_int_eq(tp_model_preset("vit-tiny", &m, &e), TP_OK);
    for (int i = 0; knobs[i]; i += 2) ck_assert_msg(tp_model_knob(&m, knobs[i], knobs[i + 1], &e) == 1, "%s", e.msg);
    ck_assert_msg(tp_model_checkpoint(&m, wpath, note, sizeof note, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(strncmp(note, "preprocessing from", 18) == 0, "%s", note);
    tp_params p = {0};
    ck_assert_msg(tp_model_params_load(&m, wpath, &p, &e) == TP_OK, "%s", e.msg);
    const int B = 2, S = 32, n1 = 3 * S * S;
    float *in = malloc(sizeof(float) * B * n1), *timm_in = malloc(sizeof(float) * B * n1);
    float *want = malloc(sizeof(float) * B * classes), *got = malloc(sizeof(float) * B * classes);
    ck_assert(in && timm_in && want && got);
    for (int i = 0; i < B * n1; i++) in[i] = NAN; /* poison */
    for (int b = 0; b < B; b++)
        ck_assert_msg(tp_model_make_input(&m, 1, 0, IMAGES[b], in + b * n1, desc, sizeof desc, &e) == TP_OK, "%s",
                      e.msg);
    tp_param_spec io[2] = {{"input", 4, {B, 3, S, S}, timm_in}, {"output", 2, {B, classes}, want}};
    ck_assert_msg(tp_st_load_params(iopath, io, 2, &e) == TP_OK, "%s", e.msg);
    double worst = 0;
    for (int i = 0; i < B * n1; i++) worst = fmax(worst, fabs((double)in[i] - timm_in[i]));
    ck_assert_msg(worst <= 1e-6, "%s: tprof's preprocessing differs from timm's by up to %g", name, worst);
    tp_graph g;
    ck_assert_int_eq(tp_model_build_graph(&m, &p, B, &g, &e), TP_OK);
    for (int i = 0; i < B * classes; i++) got[i] = NAN;
    ck_assert_msg(tp_cpu_run(&g, &p, in, got, &e) == TP_OK, "%s", e.msg);
    tp_accuracy acc;
    tp_accuracy_compute(got, want, B, classes, &acc);
    printf("%s: input max |tprof - timm| %.3g; logits relative L2 %.3e against timm\n", name, worst, acc.rel_l2);
    ck_assert_int_eq(acc.nonfinite, 0);
    ck_assert_msg(acc.rel_l2 <= 1e-5, "%s: relative L2 error against timm %.3e (max abs %.3e)", name, acc.rel_l2,
                  acc.max_abs);
    ck_assert(acc.top1_agree == 1.0);
    /* without the checkpoint's config (the preset's preprocessing), the input is not timm's: the silent error this
     * reading prevents */
    tp_model bare;
    ck_assert_int_eq(tp_model_preset("vit-tiny", &bare, &e), TP_OK);
    for (int i = 0; knobs[i]; i += 2) ck_assert_int_eq(tp_model_knob(&bare, knobs[i], knobs[i + 1], &e), 1);
    ck_assert_int_eq(tp_model_make_input(&bare, 1, 0, IMAGES[0], in, desc, sizeof desc, &e), TP_OK);
    double off = 0;
    for (int i = 0; i < n1; i++) off = fmax(off, fabs((double)in[i] - timm_in[i]));
    ck_assert_msg(off > 0.05, "%s: the preset's preprocessing gives timm's input too (%g): the test shows nothing",
                  name, off);
    tp_graph_free(&g);
    tp_params_free(&p);
    free(in);
    free(timm_in);
    free(want);
    free(got);
}

/* ImageNet mean and std, crop_pct 0.9, bicubic */
START_TEST(test_golden_checkpoint_crop090) {
    static const char *const K[] = {"--img-size", "32", "--patch-size", "8", "--embed-dim", "48", "--depth", "2",
                                    "--heads", "3", "--num-classes", "10", NULL};
    golden_checkpoint("timm_in1k_crop090", K, 10);
}
END_TEST

/* mean and std 0.5, crop_pct 1.0, bilinear, no class token, average pooling */
START_TEST(test_golden_checkpoint_crop100) {
    static const char *const K[] = {"--img-size", "32", "--patch-size", "8", "--embed-dim", "64", "--depth", "2",
                                    "--heads", "2", "--mlp-ratio", "3", "--no-class-token", NULL, "--global-pool",
                                    "avg", "--num-classes", "6", NULL};
    golden_checkpoint("timm_crop100", K, 6);
}
END_TEST

/* vit-tiny with 2 blocks, shapes only (the planner needs no weights), at batch B. */
static void tiny2(tp_vit_config *c, int B, tp_params *p, tp_graph *g) {
    tp_error e;
    *c = preset("vit-tiny");
    c->depth = 2;
    memset(p, 0, sizeof *p);
    ck_assert_int_eq(tp_vit_params_shapes(c, p, &e), TP_OK);
    ck_assert_int_eq(tp_vit_build_graph(c, p, B, g, &e), TP_OK);
}

START_TEST(test_planner_block_formats) {
    tp_vit_config c;
    tp_params p;
    tp_graph g;
    tp_plan plan;
    tp_error e;
    tiny2(&c, 1, &p, &g);
    /* Hopper: emulated, labelled; Blackwell: native (cuBLASLt block scale modes) */
    for (int arch = 0; arch < 2; arch++) {
        int sm = arch ? 100 : 90;
        tp_policy pol;
        tp_policy_default(&pol, TP_PREC_NVFP4);
        ck_assert_int_eq(tp_policy_parse(&pol, "blocks.0.*=bf16", &e), TP_OK);
        ck_assert_msg(tp_plan_build_policy(&g, &pol, sm, &plan, &e) == TP_OK, "%s", e.msg);
        ck_assert_int_eq(plan.act_dt, TP_BF16);
        int n4 = 0;
        for (int i = 0; i < g.n_ops; i++) {
            const tp_op *op = &g.ops[i];
            if (op->kind != TP_OP_LINEAR) continue;
            if (strncmp(op->layer, "blocks.0.", 9) == 0 || strcmp(op->layer, "head") == 0) {
                ck_assert_int_eq(plan.op_prec[i], TP_PREC_BF16);
                ck_assert_msg(strstr(plan.op_note[i], "kept high"), "%s: %s", op->layer, plan.op_note[i]);
                ck_assert_int_eq(plan.value_qf[op->in[1]], TP_QF_NONE);
            } else {
                n4++;
                ck_assert_int_eq(plan.op_prec[i], TP_PREC_NVFP4);
                ck_assert_int_eq(plan.op_emulated[i], sm < 100);
                ck_assert_ptr_nonnull(strstr(plan.op_note[i], sm < 100 ? "emulated on sm_90" : "native"));
                ck_assert_int_eq(plan.value_qf[op->in[0]], TP_QF_NVFP4);
                ck_assert_int_eq(plan.value_scaled[op->in[0]], 1); /* calibrated per-tensor scale */
            }
        }
        ck_assert_int_eq(n4, 4);
        tp_plan_free(&plan);
    }
    /* two quantized formats of one activation type in one engine (issue 21): each layer in its own, each planner's
     * notes and scales on its layers only */
    tp_policy pol;
    tp_policy_default(&pol, TP_PREC_MXFP8);
    ck_assert_int_eq(tp_policy_parse(&pol, "blocks.1.mlp.fc1=nvfp4", &e), TP_OK);
    ck_assert_msg(tp_plan_build_policy(&g, &pol, 90, &plan, &e) == TP_OK, "%s", e.msg);
    for (int i = 0; i < g.n_ops; i++) {
        const tp_op *op = &g.ops[i];
        if (op->kind != TP_OP_LINEAR || strcmp(op->layer, "head") == 0) continue;
        const int fc1 = strcmp(op->layer, "blocks.1.mlp.fc1") == 0;
        ck_assert_int_eq(plan.op_prec[i], fc1 ? TP_PREC_NVFP4 : TP_PREC_MXFP8);
        ck_assert_int_eq(plan.value_qf[op->in[1]], fc1 ? TP_QF_NVFP4 : TP_QF_MXFP8);
        ck_assert_ptr_nonnull(strstr(plan.op_note[i], fc1 ? "nvfp4" : "mxfp8"));
    }
    tp_plan_free(&plan);
    /* FP16 engines: fp8 and the weight-only formats together, the rest fp16 */
    tp_policy_init(&pol, TP_PREC_FP16);
    ck_assert_int_eq(tp_policy_parse(&pol, "blocks.0.*=fp8,blocks.1.mlp.*=nvfp4-wo", &e), TP_OK);
    ck_assert_msg(tp_plan_build_policy(&g, &pol, 90, &plan, &e) == TP_OK, "%s", e.msg);
    int n8 = 0, nwo = 0, n16 = 0;
    for (int i = 0; i < g.n_ops; i++) {
        const tp_op *op = &g.ops[i];
        if (op->kind != TP_OP_LINEAR) continue;
        n8 += plan.op_prec[i] == TP_PREC_FP8 && plan.value_dt[op->in[1]] == TP_E4M3 && plan.value_scaled[op->in[0]];
        nwo += plan.op_prec[i] == TP_PREC_NVFP4_WO && strncmp(op->layer, "blocks.1.mlp.", 13) == 0;
        n16 += plan.op_prec[i] == TP_PREC_FP16;
    }
    ck_assert_int_eq(plan.act_dt, TP_F16);
    ck_assert_int_eq(n8, 4);  /* blocks.0: qkv, proj, fc1, fc2 */
    ck_assert_int_eq(nwo, 2); /* blocks.1.mlp: fc1, fc2 */
    ck_assert_int_eq(n16, 3); /* blocks.1.attn: qkv, proj; head */
    tp_plan_free(&plan);
    /* formats of the other activation type, and any in an fp32 engine: refused, naming the layer and both types
     * (before issue 21 an fp16 engine kept such layers fp16 without a word) */
    static const struct { tp_precision def; const char *spec, *want; } bad[] = {
        {TP_PREC_MXFP8, "blocks.1.mlp.fc1=fp8", "fp8 runs with fp16 activations, this engine's are bf16"},
        {TP_PREC_FP16, "blocks.1.mlp.fc1=nvfp4", "nvfp4 runs with bf16 activations, this engine's are fp16"},
        {TP_PREC_BF16, "blocks.1.mlp.fc1=fp8-wo", "fp8-wo runs with fp16 activations, this engine's are bf16"},
        {TP_PREC_FP32, "blocks.1.mlp.fc1=fp8", "this engine's are fp32"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tp_policy_default(&pol, bad[k].def); /* a quantized default keeps the patch embedding high */
        ck_assert_int_eq(tp_policy_parse(&pol, bad[k].spec, &e), TP_OK);
        ck_assert_int_eq(tp_plan_build_policy(&g, &pol, 90, &plan, &e), TP_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(e.msg, "blocks.1.mlp.fc1") && strstr(e.msg, bad[k].want), "%s: %s", bad[k].spec, e.msg);
    }
    /* a 16-bit rule the engine's type overrides is said */
    tp_policy_init(&pol, TP_PREC_BF16);
    ck_assert_int_eq(tp_policy_parse(&pol, "head=fp16", &e), TP_OK);
    ck_assert_msg(tp_plan_build_policy(&g, &pol, 90, &plan, &e) == TP_OK, "%s", e.msg);
    for (int i = 0; i < g.n_ops; i++)
        if (strcmp(g.ops[i].layer, "head") == 0)
            ck_assert_msg(strstr(plan.op_note[i], "the policy asks fp16") && plan.op_prec[i] == TP_PREC_BF16, "%s",
                          plan.op_note[i]);
    tp_plan_free(&plan);
    /* a quantized patch embedding is refused with the fix */
    tp_policy_init(&pol, TP_PREC_MXFP8);
    ck_assert_int_eq(tp_plan_build_policy(&g, &pol, 90, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "patch_embed.proj"));
    /* fp8 engines below sm_89 */
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_MXFP8, 86, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "sm_86"));
    tp_graph_free(&g);
    tp_params_free(&p);
    /* K not a multiple of the block */
    c.embed_dim = 48;
    ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
    ck_assert_int_eq(tp_vit_build_graph(&c, &p, 1, &g, &e), TP_OK);
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_MXFP8, 90, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "K % 32") && strstr(e.msg, "48"), "%s", e.msg);
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_NVFP4, 90, &plan, &e), TP_OK); /* 48 = 3 blocks of 16 */
    tp_plan_free(&plan);
    tp_graph_free(&g);
    tp_params_free(&p);
}
END_TEST

START_TEST(test_planner_fp8_block) {
    tp_vit_config c;
    tp_params p;
    tp_graph g;
    tp_plan plan;
    tp_error e;
    tiny2(&c, 3, &p, &g);
    ck_assert_msg(tp_plan_build(&g, TP_PREC_FP8_BLOCK, 90, &plan, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(plan.act_dt, TP_BF16);
    int nq = 0, fused = 0;
    for (int i = 0; i < g.n_ops; i++) {
        const tp_op *op = &g.ops[i];
        if (op->kind != TP_OP_LINEAR) continue;
        int x = op->in[0], w = op->in[1];
        if (strcmp(op->layer, "head") == 0) {
            ck_assert_int_eq(plan.value_qf[w], TP_QF_NONE);
            continue;
        }
        nq++;
        ck_assert_int_eq(plan.op_prec[i], TP_PREC_FP8_BLOCK);
        ck_assert_int_eq(plan.op_emulated[i], 0);
        ck_assert_int_eq(plan.value_qf[x], TP_QF_FP8_BLOCK128);
        ck_assert_int_eq(plan.value_qf[w], TP_QF_FP8_BLOCK128);
        ck_assert_int_eq(plan.value_dt[w], TP_E4M3);
        ck_assert_int_eq(plan.value_scaled[x], 0); /* dynamic: no calibration */
        tp_op_kind pk = g.ops[g.values[x].producer].kind;
        if (pk == TP_OP_LAYERNORM || pk == TP_OP_GELU) {
            /* the producer writes the format: E4M3 storage, and its note says so */
            fused++;
            ck_assert_int_eq(plan.value_dt[x], TP_E4M3);
            ck_assert_ptr_nonnull(strstr(plan.op_note[g.values[x].producer], "writes fp8 block-128"));
            ck_assert_ptr_nonnull(strstr(plan.op_note[i], "by its producer"));
        } else {
            ck_assert_int_eq(pk, TP_OP_ATTENTION);
            ck_assert_int_eq(plan.value_dt[x], TP_BF16);
            ck_assert_ptr_nonnull(strstr(plan.op_note[i], "standalone"));
        }
        ck_assert_ptr_nonnull(strstr(plan.op_note[i], "VEC128_32F/BLK128x128_32F"));
    }
    ck_assert_int_eq(nq, 8);
    ck_assert_int_eq(fused, 6);
    /* weight bytes: 1 byte per element plus one fp32 per 128x128 tile */
    double wb = tp_plan_weight_bytes(&plan, &g);
    tp_plan_free(&plan);
    ck_assert_msg(tp_plan_build(&g, TP_PREC_BF16, 90, &plan, &e) == TP_OK, "%s", e.msg);
    ck_assert(wb < tp_plan_weight_bytes(&plan, &g));
    tp_plan_free(&plan);
    /* native on Hopper only: Ada and Blackwell are refused at plan time, naming the missing path */
    for (int k = 0; k < 2; k++) {
        int sm = k ? 100 : 89;
        ck_assert_int_eq(tp_plan_build(&g, TP_PREC_FP8_BLOCK, sm, &plan, &e), TP_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(e.msg, "fp8-block") && strstr(e.msg, "not implemented"), "%s", e.msg);
    }
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_FP8_BLOCK, 80, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "sm_89 or newer"));
    tp_graph_free(&g);
    tp_params_free(&p);
}
END_TEST

/* Attention precision through the policy: only the user's rules quantize it; fp8 plans a calibrated qkv, the
 * block formats are refused with their shape rules. */
START_TEST(test_planner_attention_policy) {
    tp_vit_config c;
    tp_params p;
    tp_graph g;
    tp_plan plan;
    tp_error e;
    tiny2(&c, 2, &p, &g);
    int attn = -1;
    for (int i = 0; i < g.n_ops && attn < 0; i++)
        if (g.ops[i].kind == TP_OP_ATTENTION) attn = i;
    ck_assert_int_ge(attn, 0);
    /* the engine's format alone never quantizes attention */
    ck_assert_int_eq(tp_plan_build(&g, TP_PREC_FP8, 90, &plan, &e), TP_OK);
    ck_assert_int_eq(plan.op_prec[attn], TP_PREC_FP16);
    tp_plan_free(&plan);
    tp_policy pol;
    tp_policy_default(&pol, TP_PREC_FP16);
    ck_assert_int_eq(tp_policy_parse(&pol, "blocks.*.attn=fp8", &e), TP_OK);
    ck_assert_msg(tp_plan_build_policy(&g, &pol, 90, &plan, &e) == TP_OK, "%s", e.msg);
    int n8 = 0;
    for (int i = 0; i < g.n_ops; i++) {
        if (g.ops[i].kind == TP_OP_ATTENTION) {
            n8++;
            ck_assert_int_eq(plan.op_prec[i], TP_PREC_FP8);
            ck_assert_int_eq(plan.value_qf[g.ops[i].in[0]], TP_QF_FP8_TENSOR);
            ck_assert_int_eq(plan.value_scaled[g.ops[i].in[0]], 1);
            ck_assert_ptr_nonnull(strstr(plan.op_note[i], "blocks.*.attn=fp8"));
            ck_assert_ptr_nonnull(strstr(plan.op_note[i], "sm_90: fp16 MMA"));
        } else if (g.ops[i].kind == TP_OP_LINEAR) {
            ck_assert_int_eq(plan.op_prec[i], TP_PREC_FP16); /* GEMMs untouched */
        }
    }
    ck_assert_int_eq(n8, 2);
    tp_rule_use use[TP_POLICY_MAX_RULES];
    ck_assert_int_eq(tp_policy_check(&pol, &g, use), 0); /* a rule on attention ops only is a used rule */
    tp_plan_free(&plan);
    /* fp8 attention before sm_89, and block formats (197 tokens is no multiple of 32) are refused */
    ck_assert_int_eq(tp_plan_build_policy(&g, &pol, 86, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "sm_89"));
    tp_policy_default(&pol, TP_PREC_FP16);
    ck_assert_int_eq(tp_policy_parse(&pol, "blocks.1.attn=mxfp8", &e), TP_OK);
    ck_assert_int_eq(tp_plan_build_policy(&g, &pol, 90, &plan, &e), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "blocks.1.attn") && strstr(e.msg, "multiples of 32") && strstr(e.msg, "197") &&
                      strstr(e.msg, "tprof lint"),
                  "%s", e.msg);
    /* an FP8 engine with FP8 attention: on sm_90 (head dim 64 here) the QKV GEMM writes E4M3 Q/K/V for the wgmma
     * kernel; on sm_89 the attention kernel quantizes f16 Q/K/V as it loads them */
    for (int sm = 89; sm <= 90; sm++) {
        tp_policy_default(&pol, TP_PREC_FP8);
        ck_assert_int_eq(tp_policy_parse(&pol, "blocks.*.attn=fp8", &e), TP_OK);
        ck_assert_msg(tp_plan_build_policy(&g, &pol, sm, &plan, &e) == TP_OK, "%s", e.msg);
        int n8 = 0;
        for (int i = 0; i < g.n_ops; i++) {
            if (g.ops[i].kind != TP_OP_ATTENTION) continue;
            const int x = g.ops[i].in[0], prod = g.values[x].producer;
            n8++;
            ck_assert_int_eq(plan.op_prec[i], TP_PREC_FP8);
            ck_assert_int_eq(plan.op_prec[prod], TP_PREC_FP8);
            ck_assert_int_eq(plan.value_dt[x], sm == 90 ? TP_E4M3 : plan.act_dt);
            ck_assert_int_eq(strstr(plan.op_note[i], "from the QKV GEMM") != NULL, sm == 90);
            ck_assert_int_eq(strstr(plan.op_note[prod], "writes e4m3 for") != NULL, sm == 90);
        }
        ck_assert_int_eq(n8, 2);
        tp_plan_free(&plan);
    }
    /* a high-precision rule on attention is fine */
    tp_policy_default(&pol, TP_PREC_FP8);
    ck_assert_int_eq(tp_policy_parse(&pol, "blocks.*=fp8,blocks.0.attn=fp16", &e), TP_OK);
    ck_assert_msg(tp_plan_build_policy(&g, &pol, 90, &plan, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(plan.op_prec[attn], TP_PREC_FP16);
    tp_plan_free(&plan);
    tp_graph_free(&g);
    tp_params_free(&p);
}
END_TEST

/* The roofline's bytes of a pool (plan.h): a class-token pool reads one row of each image and writes it, a mean
 * pool reads every row; B 3, T 197, C 192 (vit-tiny), fp16: 2 * 3 * 192 * 2 bytes against (3 * 197 + 3) * 192 * 2. */
START_TEST(test_plan_pool_bytes) {
    for (int mode = 0; mode < 2; mode++) {
        tp_vit_config c = preset("vit-tiny");
        c.depth = 1;
        c.global_pool = mode;
        tp_params p;
        tp_graph g;
        tp_plan plan;
        tp_error e;
        memset(&p, 0, sizeof p);
        ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
        ck_assert_int_eq(tp_vit_build_graph(&c, &p, 3, &g, &e), TP_OK);
        ck_assert_msg(tp_plan_build(&g, TP_PREC_FP16, 90, &plan, &e) == TP_OK, "%s", e.msg);
        int n = 0;
        for (int i = 0; i < g.n_ops; i++) {
            if (g.ops[i].kind != TP_OP_POOL) continue;
            n++;
            const double rows_in = mode == 0 ? 3.0 : 3.0 * 197, want = (rows_in + 3.0) * 192 * 2;
            ck_assert_msg(tp_program_op_bytes(&plan.prog, &plan, &g, i) == want, "pool mode %d: %g bytes, want %g", mode,
                          tp_program_op_bytes(&plan.prog, &plan, &g, i), want);
        }
        ck_assert_int_eq(n, 1);
        tp_plan_free(&plan);
        tp_graph_free(&g);
        tp_params_free(&p);
    }
}
END_TEST

/* Residual adds run in the epilogue of the GEMM producing their branch (plan.h): on a GPU target when that GEMM
 * reads f32/f16/bf16 or per-tensor E4M3 operands; never on the CPU, never for block-scaled GEMMs. */
START_TEST(test_planner_residual_fusion) {
    tp_vit_config c;
    tp_params p;
    tp_graph g;
    tp_plan plan;
    tp_error e;
    tiny2(&c, 2, &p, &g);
    static const struct {
        tp_precision prec;
        int sm, fused;
    } cases[] = {{TP_PREC_FP16, 90, 1}, {TP_PREC_BF16, 90, 1}, {TP_PREC_FP8, 90, 1}, {TP_PREC_FP32, 90, 1},
                 {TP_PREC_FP32, 0, 0},  {TP_PREC_MXFP8, 90, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ck_assert_msg(tp_plan_build(&g, cases[k].prec, cases[k].sm, &plan, &e) == TP_OK, "%s", e.msg);
        int n_add = 0, n_fused = 0;
        for (int i = 0; i < g.n_ops; i++) {
            const tp_op *op = &g.ops[i];
            if (op->kind != TP_OP_ADD) {
                if (op->kind != TP_OP_EMBED_TOKENS) ck_assert_int_eq(tp_program_fused_into(&plan.prog, i), -1);
                continue;
            }
            n_add++;
            const int j = tp_program_fused_into(&plan.prog, i);
            if (j < 0) continue;
            n_fused++;
            /* the GEMM whose output is one operand, read by this add alone, does it and writes its output */
            ck_assert_int_eq(g.ops[j].kind, TP_OP_LINEAR);
            ck_assert_int_eq(tp_program_find(&plan.prog, &g, j, TP_OP_ADD), i);
            ck_assert(op->in[0] == g.ops[j].out || op->in[1] == g.ops[j].out);
            ck_assert(strstr(g.ops[j].layer, strstr(op->layer, "residual1") ? "attn.proj" : "mlp.fc2") != NULL);
            ck_assert_ptr_nonnull(strstr(plan.op_note[i], g.ops[j].layer));
            ck_assert_ptr_nonnull(strstr(plan.op_note[j], op->layer));
            ck_assert(tp_program_op_bytes(&plan.prog, &plan, &g, i) == 0.0);
            const double res = (double)tp_value_numel(&g.values[op->out]) * tp_dtype_info(plan.value_dt[op->out])->bytes;
            ck_assert(tp_program_op_bytes(&plan.prog, &plan, &g, j) > res);
        }
        ck_assert_int_eq(n_add, 4);
        ck_assert_int_eq(n_fused, cases[k].fused ? 4 : 0);
        tp_plan_free(&plan);
    }
    tp_graph_free(&g);
    tp_params_free(&p);
}
END_TEST

/* The token embedding in the patch embedding's kernel (plan.h, patch_embed.h): on sm_90 for 16-bit patch
 * embeddings whose shape the kernel takes; not on other GPUs, not in fp32, not on the CPU, not for P = 14. */
START_TEST(test_planner_embed_fusion) {
    tp_vit_config c;
    tp_params p;
    tp_graph g;
    tp_plan plan;
    tp_error e;
    static const struct {
        tp_precision prec;
        int sm, patch, fused;
    } cases[] = {{TP_PREC_FP16, 90, 16, 1}, {TP_PREC_BF16, 90, 16, 1}, {TP_PREC_FP8, 90, 16, 1},
                 {TP_PREC_NVFP4, 90, 16, 1}, {TP_PREC_FP16, 89, 16, 0}, {TP_PREC_FP16, 100, 16, 0},
                 {TP_PREC_FP32, 90, 16, 0},  {TP_PREC_FP32, 0, 16, 0},  {TP_PREC_FP16, 90, 14, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        c = preset("vit-tiny");
        c.depth = 1;
        c.patch_size = cases[k].patch;
        c.img_size = 14 * 16;
        memset(&p, 0, sizeof p);
        ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
        ck_assert_int_eq(tp_vit_build_graph(&c, &p, 3, &g, &e), TP_OK);
        ck_assert_msg(tp_plan_build(&g, cases[k].prec, cases[k].sm, &plan, &e) == TP_OK, "%s", e.msg);
        int pe = -1, emb = -1;
        for (int i = 0; i < g.n_ops; i++) {
            if (g.ops[i].kind == TP_OP_PATCH_EMBED) pe = i;
            if (g.ops[i].kind == TP_OP_EMBED_TOKENS) emb = i;
        }
        ck_assert(pe >= 0 && emb >= 0);
        if (cases[k].fused) {
            ck_assert_int_eq(tp_program_find(&plan.prog, &g, pe, TP_OP_EMBED_TOKENS), emb);
            ck_assert_int_eq(tp_program_fused_into(&plan.prog, emb), pe);
            ck_assert_ptr_nonnull(strstr(plan.op_note[pe], "one tprof kernel"));
            ck_assert_ptr_nonnull(strstr(plan.op_note[emb], g.ops[pe].layer));
            ck_assert(tp_program_op_bytes(&plan.prog, &plan, &g, emb) == 0.0);
            /* the fused op reads the image, weights, bias, position embedding and class token, writes the tokens */
            const tp_value *x = &g.values[g.ops[emb].out], *img = &g.values[g.input];
            ck_assert(tp_program_op_bytes(&plan.prog, &plan, &g, pe) >
                      (double)tp_value_numel(x) * tp_dtype_info(plan.value_dt[g.ops[emb].out])->bytes +
                          (double)tp_value_numel(img) * 4.0);
        } else {
            ck_assert_int_eq(tp_program_find(&plan.prog, &g, pe, TP_OP_EMBED_TOKENS), -1);
            ck_assert_int_eq(tp_program_fused_into(&plan.prog, emb), -1);
        }
        tp_plan_free(&plan);
        tp_graph_free(&g);
        tp_params_free(&p);
    }
}
END_TEST

/* GELU in the fc1 epilogue only when the policy asks for the tanh form (plan.h), on a GPU target: the GEMM then
 * writes the GELU's output (E4M3 in an FP8 engine); never by default, never on the CPU, never for block formats. */
START_TEST(test_planner_gelu_fusion) {
    tp_vit_config c;
    tp_params p;
    tp_graph g;
    tp_plan plan;
    tp_error e;
    tiny2(&c, 2, &p, &g);
    static const struct {
        tp_precision prec;
        int sm, tanh_form, fused;
    } cases[] = {{TP_PREC_FP16, 90, 1, 1}, {TP_PREC_FP8, 90, 1, 1}, {TP_PREC_BF16, 90, 1, 1},
                 {TP_PREC_FP16, 90, 0, 0}, {TP_PREC_FP32, 0, 1, 0},  {TP_PREC_NVFP4, 90, 1, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tp_policy pol;
        tp_policy_default(&pol, cases[k].prec);
        pol.gelu_tanh = cases[k].tanh_form;
        ck_assert_msg(tp_plan_build_policy(&g, &pol, cases[k].sm, &plan, &e) == TP_OK, "%s", e.msg);
        int n_gelu = 0, n_fused = 0;
        for (int i = 0; i < g.n_ops; i++) {
            const tp_op *op = &g.ops[i];
            if (op->kind != TP_OP_GELU) continue;
            n_gelu++;
            const int j = tp_program_fused_into(&plan.prog, i);
            if (j < 0) continue;
            n_fused++;
            ck_assert_int_eq(g.ops[j].kind, TP_OP_LINEAR);
            ck_assert_int_eq(g.ops[j].out, op->in[0]);
            ck_assert_int_eq(tp_program_find(&plan.prog, &g, j, TP_OP_GELU), i);
            ck_assert_ptr_nonnull(strstr(plan.op_note[i], "tanh approximation"));
            ck_assert_ptr_nonnull(strstr(plan.op_note[j], "GELU (tanh approximation)"));
            if (cases[k].prec == TP_PREC_FP8) ck_assert_int_eq(plan.value_dt[op->out], TP_E4M3);
            ck_assert(tp_program_op_bytes(&plan.prog, &plan, &g, i) == 0.0);
        }
        ck_assert_int_eq(n_gelu, 2);
        ck_assert_int_eq(n_fused, cases[k].fused ? 2 : 0);
        tp_plan_free(&plan);
    }
    /* a model whose GELU is the tanh form (SigLIP): fused without the policy's flag, the note saying it is the
     * model's own function; the CPU (sm 0) keeps it unfused; tprof's exact-GELU GEMM never takes it */
    c.gelu_tanh = 1;
    tp_graph gt;
    ck_assert_int_eq(tp_vit_build_graph(&c, &p, 2, &gt, &e), TP_OK);
    for (int sm = 0; sm <= 90; sm += 90) {
        tp_policy pol;
        tp_policy_default(&pol, sm ? TP_PREC_FP16 : TP_PREC_FP32);
        ck_assert_msg(tp_plan_build_policy(&gt, &pol, sm, &plan, &e) == TP_OK, "%s", e.msg);
        int n_fused = 0;
        for (int i = 0; i < gt.n_ops; i++) {
            if (gt.ops[i].kind != TP_OP_GELU) continue;
            ck_assert_int_eq(gt.ops[i].gelu_tanh, 1);
            if (tp_program_fused_into(&plan.prog, i) < 0) continue;
            n_fused++;
            ck_assert_ptr_nonnull(strstr(plan.op_note[i], "the model's tanh form"));
        }
        ck_assert_int_eq(n_fused, sm ? 2 : 0);
        tp_plan_free(&plan);
    }
    tp_graph_free(&gt);
    tp_graph_free(&g);
    tp_params_free(&p);
}
END_TEST


/* In an FP8 plan the attention writes E4M3 for the proj GEMM only at the head dims tprof's flash kernels take
 * (vit-tiny's 64); at SigLIP's 72 its output stays 16-bit (cuDNN can run it) and proj quantizes it as read. */
START_TEST(test_planner_fp8_attention_output) {
    for (int k = 0; k < 2; k++) {
        tp_vit_config c = preset("vit-tiny");
        c.depth = 1;
        if (k) c.embed_dim = 288, c.num_heads = 4; /* 4 heads of 72 */
        tp_params p = {0};
        tp_graph g;
        tp_plan plan;
        tp_error e;
        ck_assert_int_eq(tp_vit_params_shapes(&c, &p, &e), TP_OK);
        ck_assert_int_eq(tp_vit_build_graph(&c, &p, 2, &g, &e), TP_OK);
        ck_assert_msg(tp_plan_build(&g, TP_PREC_FP8, 90, &plan, &e) == TP_OK, "%s", e.msg);
        int seen = 0;
        for (int i = 0; i < g.n_ops; i++) {
            if (g.ops[i].kind != TP_OP_ATTENTION) continue;
            seen++;
            const int y = g.ops[i].out, proj = i + 1;
            ck_assert_int_eq(g.ops[i].head_dim, k ? 72 : 64);
            ck_assert_str_eq(g.ops[proj].layer, "blocks.0.attn.proj");
            ck_assert_int_eq(plan.op_prec[proj], TP_PREC_FP8);
            ck_assert_int_eq(plan.value_scaled[y], 1);
            ck_assert_int_eq(plan.value_dt[y], k ? TP_F16 : TP_E4M3);
            ck_assert_ptr_nonnull(k ? strstr(plan.op_note[proj], "input quantized as read")
                                    : strstr(plan.op_note[i], "writes e4m3"));
        }
        ck_assert_int_eq(seen, 1);
        tp_plan_free(&plan);
        tp_graph_free(&g);
        tp_params_free(&p);
    }
}
END_TEST

/* A graph of two inputs (graph.h tp_graph.inputs): the executor's input holds them packed per sample, sample b's
 * row the first input's b-th slice then the second's; the CPU executor reads each where it lies. */
START_TEST(test_graph_two_inputs) {
    enum { B = 3, T = 2, C = 5 };
    tp_graph g;
    tp_graph_init(&g, B);
    const int64_t s[3] = {B, T, C};
    g.input = tp_graph_add_value(&g, "a", TP_VAL_INPUT, 3, s, -1);
    const int bv = tp_graph_add_value(&g, "b", TP_VAL_INPUT, 3, s, -1);
    ck_assert_int_eq(g.n_inputs, 2);
    ck_assert_int_eq(g.inputs[0], g.input);
    ck_assert_int_eq(g.inputs[1], bv);
    int64_t off[TP_MAX_INPUTS];
    ck_assert_int_eq(tp_graph_input_layout(&g, off), 2 * T * C);
    ck_assert_int_eq(off[1], T * C);
    tp_op add = {.kind = TP_OP_ADD};
    snprintf(add.layer, sizeof add.layer, "sum");
    const int in[2] = {g.input, bv};
    g.output = tp_graph_op_out(&g, tp_graph_add_op(&g, &add, in, 2, 3, s, "out"));
    float rows[B * 2 * T * C], out[B * T * C];
    for (int i = 0; i < B * 2 * T * C; i++) rows[i] = (float)(i * i % 97) - 40.0f;
    tp_params none = {0};
    tp_error e = {0};
    ck_assert_msg(tp_cpu_run(&g, &none, rows, out, &e) == TP_OK, "%s", e.msg);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T * C; j++)
            ck_assert_float_eq(out[b * T * C + j], rows[b * 2 * T * C + j] + rows[b * 2 * T * C + T * C + j]);
    tp_graph_free(&g);
}
END_TEST

/* ---- the family interface (models/model.h) ------------------------------------------------------------------- */

/* A preset through the interface: found by timm name or alias in the registry, knobs applied by the family
 * (architecture knobs rename the model, preprocessing knobs do not), errors name the value. */
START_TEST(test_family_interface) {
    tp_model m;
    tp_error e = {0};
    ck_assert_ptr_eq(tp_family_find("vit"), &tp_vit_family);
    ck_assert_ptr_null(tp_family_find("llama"));
    ck_assert_int_eq(tp_model_preset("nope", &m, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "unknown model 'nope'"));
    ck_assert_ptr_nonnull(strstr(e.msg, "vit-b16 (vit_base_patch16_224)"));
    ck_assert_int_eq(tp_model_preset("vit-b16", &m, &e), TP_OK);
    ck_assert_str_eq(tp_model_name(&m), "vit_base_patch16_224");
    ck_assert_int_eq(tp_model_knob(&m, "--mean", "0.485,0.456,0.406", &e), 1);
    ck_assert_str_eq(tp_model_name(&m), "vit_base_patch16_224");
    ck_assert_int_eq(tp_model_knob(&m, "--depth", "2", &e), 1);
    ck_assert_str_eq(tp_model_name(&m), "vit_base_patch16_224+custom");
    ck_assert_int_eq(tp_model_knob(&m, "--no-such-knob", "1", &e), 0);
    ck_assert_int_eq(tp_model_knob(&m, "--heads", "x", &e), -1);
    ck_assert_ptr_nonnull(strstr(e.msg, "--heads 'x'"));
    ck_assert_int_eq(tp_model_knob(&m, "--mean", "1,2", &e), -1);
    ck_assert_ptr_nonnull(strstr(e.msg, "R,G,B"));
    ck_assert_int_eq(tp_model_knob(&m, "--interpolation", "lanczos", &e), -1);
    ck_assert_int_eq(tp_model_knob(&m, "--interpolation", "bilinear", &e), 1);
    ck_assert_int_eq(tp_model_knob(&m, "--crop-mode", "border", &e), -1);
    /* the input: one image (3, 224, 224); its preprocessing says where it comes from */
    tp_input_desc d;
    tp_model_input(&m, &d);
    ck_assert_int_eq(d.kind, TP_INPUT_IMAGE);
    ck_assert_int_eq(d.ndim, 3);
    ck_assert(d.shape[0] == 3 && d.shape[1] == 224 && d.shape[2] == 224);
    ck_assert_int_eq(tp_model_input_numel(&m), 3 * 224 * 224);
    ck_assert_ptr_nonnull(strstr(d.preprocess, "bilinear"));
    ck_assert_msg(strstr(d.preprocess, "mean (0.485, 0.456, 0.406)"), "%s", d.preprocess);
    /* the JSON round trip (engine files) keeps every field, preprocessing included */
    json_t *j = tp_model_to_json(&m);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(json_string_value(json_object_get(j, "family")), "vit");
    tp_model back;
    ck_assert_msg(tp_model_from_json(j, NULL, &back, &e) == TP_OK, "%s", e.msg);
    const tp_vit_config *a = tp_vit_cfg(&m), *b = tp_vit_cfg(&back);
    ck_assert_str_eq(a->name, b->name);
    ck_assert_int_eq(a->depth, b->depth);
    ck_assert_int_eq(b->pre.interpolation, TP_INTERP_BILINEAR);
    ck_assert(a->pre.mean[0] == b->pre.mean[0] && a->pre.std[2] == b->pre.std[2]);
    json_object_set_new(j, "depth", json_string("2"));
    ck_assert_int_eq(tp_model_from_json(j, NULL, &back, &e), TP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "'depth' is a string"));
    json_object_del(j, "depth");
    ck_assert_int_eq(tp_model_from_json(j, NULL, &back, &e), TP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "'depth' is missing"));
    json_object_set_new(j, "family", json_string("llama"));
    ck_assert_int_eq(tp_model_from_json(j, NULL, &back, &e), TP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "unknown family 'llama'"));
    json_decref(j);
}
END_TEST

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

#define TIMM_CFG(classes, size)                                                                               \
    "{\"architecture\": \"deit_tiny_patch16_224\", \"num_classes\": " classes ", \"global_pool\": \"token\", " \
    "\"pretrained_cfg\": {\"input_size\": [3, " size ", " size "], \"interpolation\": \"bilinear\", "           \
    "\"crop_pct\": 0.875, \"mean\": [0.485, 0.456, 0.406], \"std\": [0.229, 0.224, 0.225]}}"

/* The checkpoint's own preprocessing (issue 19): config.json beside the weights sets it (the command line's fields
 * stay), a checkpoint without one gets a warning, and a config that contradicts the model is an error. */
START_TEST(test_checkpoint_config) {
    tp_model m;
    tp_error e = {0};
    char note[700];
    const char *w = tpath("model.safetensors"); /* only its folder matters: config.json is read beside it */
    ck_assert_int_eq(tp_model_preset("vit-tiny", &m, &e), TP_OK);
    ck_assert_int_eq(tp_model_checkpoint(&m, w, note, sizeof note, &e), TP_OK);
    ck_assert_msg(strncmp(note, "warning: no config.json beside", 30) == 0, "%s", note);
    ck_assert(tp_vit_cfg(&m)->pre.mean[0] == 0.5f);

    write_text(tpath("config.json"), TIMM_CFG("1000", "224"));
    ck_assert_msg(tp_model_checkpoint(&m, w, note, sizeof note, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(strstr(note, "preprocessing from") && strstr(note, "deit_tiny_patch16_224"), "%s", note);
    const tp_preprocess *p = &tp_vit_cfg(&m)->pre;
    ck_assert(p->mean[0] == 0.485f && p->std[2] == 0.225f && p->crop_pct == 0.875);
    ck_assert_int_eq(p->interpolation, TP_INTERP_BILINEAR);
    tp_input_desc d;
    tp_model_input(&m, &d);
    ck_assert_msg(strstr(d.preprocess, "config.json") && strstr(d.preprocess, "shorter side to 256"), "%s",
                  d.preprocess);

    /* the command line's mean stays; the file sets the rest */
    ck_assert_int_eq(tp_model_preset("vit-tiny", &m, &e), TP_OK);
    ck_assert_int_eq(tp_model_knob(&m, "--mean", "0.1,0.2,0.3", &e), 1);
    ck_assert_int_eq(tp_model_checkpoint(&m, w, note, sizeof note, &e), TP_OK);
    ck_assert(p->mean[0] == 0.1f && p->std[0] == 0.229f);
    ck_assert_ptr_nonnull(strstr(note, "field by field"));

    /* contradictions are errors naming the file and the field */
    write_text(tpath("config.json"), TIMM_CFG("10", "224"));
    ck_assert_int_eq(tp_model_preset("vit-tiny", &m, &e), TP_OK);
    ck_assert_int_eq(tp_model_checkpoint(&m, w, note, sizeof note, &e), TP_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(e.msg, "num_classes 10"));
    write_text(tpath("config.json"), TIMM_CFG("1000", "384"));
    ck_assert_int_eq(tp_model_checkpoint(&m, w, note, sizeof note, &e), TP_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(e.msg, "input_size is 384"));
    write_text(tpath("config.json"), "{\"pretrained_cfg\": {\"mean\": [1, 2]}}");
    ck_assert_int_eq(tp_model_checkpoint(&m, w, note, sizeof note, &e), TP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "config.json"));
}
END_TEST

/* The model a checkpoint describes, no preset named (issue 40): transformers' config.json gives a decoder named by
 * its folder; timm's the ViT of its architecture and model_args, the same configuration as the golden test's knobs;
 * what tprof does not build is refused by name. */
START_TEST(test_model_from_checkpoint) {
    tp_model m, k;
    tp_error e = {0};
    char note[700];
    ck_assert_int_eq(tp_model_checkpoint_kind("tests/fixtures/hf_qwen2_tiny"), TP_CKPT_HF);
    ck_assert_int_eq(tp_model_checkpoint_kind("tests/fixtures/timm_crop100/model.safetensors"), TP_CKPT_TIMM);
    ck_assert_int_eq(tp_model_checkpoint_kind("tests/fixtures/timm_vit_avg.safetensors"), TP_CKPT_NONE);
    ck_assert_msg(tp_model_from_checkpoint("tests/fixtures/hf_qwen2_tiny", &m, note, sizeof note, &e) == TP_OK, "%s",
                  e.msg);
    ck_assert_str_eq(m.family->name, "decoder");
    ck_assert_str_eq(tp_model_name(&m), "hf_qwen2_tiny");
    ck_assert_ptr_nonnull(strstr(note, "Qwen2ForCausalLM"));

    ck_assert_msg(tp_model_from_checkpoint("tests/fixtures/timm_crop100/model.safetensors", &m, note, sizeof note, &e) ==
                  TP_OK, "%s", e.msg);
    ck_assert_str_eq(tp_model_name(&m), "vit_tprof_golden_patch8_32");
    static const char *const K[] = {"--img-size", "32", "--patch-size", "8", "--embed-dim", "64", "--depth", "2",
                                    "--heads", "2", "--mlp-ratio", "3", "--no-class-token", NULL, "--global-pool",
                                    "avg", "--num-classes", "6", NULL};
    ck_assert_int_eq(tp_model_preset("vit-tiny", &k, &e), TP_OK);
    for (int i = 0; K[i]; i += 2) ck_assert_int_eq(tp_model_knob(&k, K[i], K[i + 1], &e), 1);
    ck_assert_int_eq(tp_model_checkpoint(&k, "tests/fixtures/timm_crop100/model.safetensors", note, sizeof note, &e),
                     TP_OK);
    json_t *a = tp_model_to_json(&m), *b = tp_model_to_json(&k);
    ck_assert_str_eq(json_string_value(json_object_get(a, "name")), "vit_tprof_golden_patch8_32");
    json_object_del(a, "name");
    json_object_del(b, "name");
    ck_assert_msg(json_equal(a, b), "the checkpoint's model differs from the golden test's knobs");
    json_decref(a);
    json_decref(b);
    /* a knob that changes the shape marks the checkpoint's name as the family marks a preset's */
    ck_assert_int_eq(tp_model_knob(&m, "--depth", "1", &e), 1);
    ck_assert_str_eq(tp_model_name(&m), "vit_tprof_golden_patch8_32+custom");
    ck_assert_int_eq(tp_model_from_checkpoint("tests/fixtures/timm_crop100", &m, note, sizeof note, &e), TP_OK);
    ck_assert_int_eq(tp_model_knob(&m, "--mean", "0.1,0.2,0.3", &e), 1); /* the preprocessing: not the shape */
    ck_assert_str_eq(tp_model_name(&m), "vit_tprof_golden_patch8_32");

    const char *w = tpath("model.safetensors");
    write_text(tpath("config.json"), "{\"architecture\": \"vit_tiny_patch16_224\", \"model_args\": {\"drop_rate\": 0.1}}");
    ck_assert_int_eq(tp_model_from_checkpoint(w, &m, note, sizeof note, &e), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "model_args.drop_rate"), "%s", e.msg);
    write_text(tpath("config.json"), "{\"architecture\": \"resnet50\"}");
    ck_assert_int_eq(tp_model_from_checkpoint(w, &m, note, sizeof note, &e), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "'resnet50' is not one of tprof's ViT presets"), "%s", e.msg);
    write_text(tpath("config.json"), "{\"architecture\": \"vit_tiny_patch16_224\", \"num_classes\": 10}");
    ck_assert_msg(tp_model_from_checkpoint(w, &m, note, sizeof note, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(tp_vit_cfg(&m)->num_classes, 10);
    ck_assert_str_eq(tp_model_name(&m), "vit_tiny_patch16_224");
    write_text(tpath("config.json"), "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\"}");
    ck_assert_int_eq(tp_model_from_checkpoint(w, &m, note, sizeof note, &e), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "GPT2LMHeadModel"), "%s", e.msg);
    write_text(tpath("config.json"), "{\"hidden\": 3}");
    ck_assert_int_eq(tp_model_from_checkpoint(w, &m, note, sizeof note, &e), TP_ERR_UNSUPPORTED);
    ck_assert_int_eq(tp_model_checkpoint_kind(w), TP_CKPT_OTHER);
    ck_assert_int_eq(tp_model_from_checkpoint("tests/fixtures/timm_vit_avg.safetensors", &m, note, sizeof note, &e),
                     TP_ERR_IO);
    ck_assert_msg(strstr(e.msg, "no config.json beside it"), "%s", e.msg);
}
END_TEST

/* Hub ids by the hub's rules, and a snapshot path back to its id */
START_TEST(test_hf_hub_ids) {
    ck_assert(tp_hf_hub_is_id("meta-llama/Llama-3.2-1B") && tp_hf_hub_is_id("gpt2") && tp_hf_hub_is_id("a_b/c.d"));
    static const char *const BAD[] = {"", "a/b/c", "/abs", "a/", "-a/b", "a/.b", "a--b/c", "a/b..c", "a b/c", "./x"};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) ck_assert_msg(!tp_hf_hub_is_id(BAD[i]), "%s", BAD[i]);
    char id[128];
    ck_assert(tp_hf_hub_id_of("/c/hub/models--Qwen--Qwen2.5-0.5B/snapshots/abc", id, sizeof id));
    ck_assert_str_eq(id, "Qwen/Qwen2.5-0.5B");
    ck_assert(tp_hf_hub_id_of("hub/models--gpt2/snapshots/abc/model.safetensors", id, sizeof id));
    ck_assert_str_eq(id, "gpt2");
    ck_assert(!tp_hf_hub_id_of("/c/hub/models--a--b/snapshots", id, sizeof id));
    ck_assert(!tp_hf_hub_id_of("/c/snapshots/abc", id, sizeof id));
    ck_assert(!tp_hf_hub_id_of("tests/fixtures/hf_qwen2_tiny", id, sizeof id));
    tp_error e = {0};
    ck_assert_int_eq(tp_hf_hub_resolve("a/b/c", id, sizeof id, &e), TP_ERR_ARG);
}
END_TEST

/* ---- the CPU executor's memory estimate (cpu_exec.h tp_cpu_mem_estimate) ---- */

typedef struct {
    int calls, last_op, order_ok;
} op_log;

static void log_op(void *user, const tp_graph *g, int op, int done) {
    op_log *l = user;
    (void)g;
    l->order_ok &= done ? op == l->last_op : op == l->last_op + 1; /* before op i, after op i, before i + 1 */
    l->last_op = op;
    l->calls++;
}

/* One run of model `name` at batch B (prec FP32: the plain executor; else the emulation of its plan on sm_90, every
 * activation's amax 4): the bytes its watch counts at their peak are the estimate's, exactly; nothing stays once
 * the session is freed; on_op saw every op before and after. */
static void mem_case(const char *name, int B, tp_precision prec) {
    tp_model m;
    tp_error e = {0};
    ck_assert_msg(tp_model_preset(name, &m, &e) == TP_OK, "%s", e.msg);
    if (strcmp(name, "vit-tiny") == 0) /* the catalogue's small ViT (tests/test_cli.sh tok), to keep the test short */
        ck_assert(tp_model_knob(&m, "--img-size", "64", &e) == 1 && tp_model_knob(&m, "--depth", "2", &e) == 1);
    tp_params p;
    ck_assert_msg(tp_model_params_init(&m, 3, 0, &p, &e) == TP_OK, "%s", e.msg);
    tp_graph g;
    ck_assert_msg(tp_model_build_graph(&m, &p, B, &g, &e) == TP_OK, "%s", e.msg);
    char desc[600];
    float *in = malloc(sizeof(float) * (size_t)(B * tp_model_input_numel(&m)));
    float *out = malloc(sizeof(float) * (size_t)tp_value_numel(&g.values[g.output]));
    float *amax = malloc(sizeof(float) * (size_t)g.n_values);
    ck_assert(in && out && amax);
    for (int v = 0; v < g.n_values; v++) amax[v] = 4.0f;
    ck_assert_msg(tp_model_make_input(&m, B, 1, NULL, in, desc, sizeof desc, &e) == TP_OK, "%s", e.msg);
    tp_plan plan;
    tp_policy pol;
    tp_policy_default(&pol, prec);
    if (prec != TP_PREC_FP32) ck_assert_msg(tp_plan_build_policy(&g, &pol, 90, &plan, &e) == TP_OK, "%s", e.msg);
    const tp_plan *pp = prec != TP_PREC_FP32 ? &plan : NULL;
    tp_cpu_mem est;
    ck_assert_int_eq(tp_cpu_mem_estimate(&g, pp, 4, &est, &e), TP_OK);
    op_log lg = {0, -1, 1};
    tp_cpu_watch w = {0, 0, log_op, &lg};
    tp_cpu_session s = {.watch = &w};
    ck_assert_msg(tp_cpu_run_session_emulated(&g, &p, pp, amax, &s, in, out, &e) == TP_OK, "%s: %s", name, e.msg);
    printf("%s %s batch %d: the executor's peak %lld bytes, estimated %.0f (state %.0f, held %.0f, live %.0f, "
           "scratch %.0f at op %d; per-thread rows %.0f)\n", name, tp_precision_name(prec), B, (long long)w.bytes_peak,
           est.peak, est.state, est.held, est.live, est.scratch, est.peak_op, est.threads);
    ck_assert_msg((double)w.bytes_peak == est.peak, "%s: peak %lld, estimated %.0f", name, (long long)w.bytes_peak,
                  est.peak);
    ck_assert(est.total >= est.peak && est.live > 0);
    ck_assert_msg((double)w.bytes_now == est.state, "%s: %lld held after the run", name, (long long)w.bytes_now);
    ck_assert(lg.order_ok && lg.calls == 2 * g.n_ops);
    tp_cpu_session_free(&s);
    ck_assert_int_eq(w.bytes_now, 0);
    ck_assert_ptr_eq(s.watch, &w);
    /* the same through tp_cpu_run_watched, from a fresh count */
    w = (tp_cpu_watch){0};
    if (!pp) {
        ck_assert_int_eq(tp_cpu_run_watched(&g, &p, in, out, NULL, &w, &e), TP_OK);
        ck_assert((double)w.bytes_peak == est.peak && w.bytes_now == 0);
    }
    if (pp) tp_plan_free(&plan);
    free(in);
    free(out);
    free(amax);
    tp_graph_free(&g);
    tp_params_free(&p);
}

START_TEST(test_cpu_mem_estimate) {
    mem_case("vit-tiny", 3, TP_PREC_FP32);
    mem_case("vit-tiny", 2, TP_PREC_FP16); /* rounded parameter copies */
    mem_case("vit-tiny", 2, TP_PREC_FP8);  /* quantized operands, per linear */
    mem_case("llama-tiny", 2, TP_PREC_FP32); /* the KV cache, token ids, RoPE */
    mem_case("llama-tiny", 2, TP_PREC_NVFP4_WO);
    mem_case("pi0-small", 2, TP_PREC_FP32); /* several inputs unpacked, the masked attention */
    mem_case("pi0-small", 1, TP_PREC_BF16);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model");
    TCase *t = tcase_create("vit");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_presets);
    tcase_add_test(t, test_planner_residual_fusion);
    tcase_add_test(t, test_planner_gelu_fusion);
    tcase_add_test(t, test_planner_embed_fusion);
    tcase_add_test(t, test_config_validation);
    tcase_add_test(t, test_param_names_shapes);
    tcase_add_test(t, test_flop_counts);
    tcase_add_test(t, test_graph_shapes);
    tcase_add_test(t, test_planner);
    tcase_add_test(t, test_planner_block_formats);
    tcase_add_test(t, test_planner_fp8_block);
    tcase_add_test(t, test_planner_attention_policy);
    tcase_add_test(t, test_plan_pool_bytes);
    tcase_add_test(t, test_synthesized_weights);
    tcase_add_test(t, test_counter_draws);
    tcase_add_test(t, test_counter_fill);
    tcase_add_test(t, test_golden_timm_token);
    tcase_add_test(t, test_golden_timm_avg);
    tcase_add_test(t, test_golden_timm_tokens_gelu_tanh);
    tcase_add_test(t, test_vit_tokens_output);
    tcase_add_test(t, test_planner_fp8_attention_output);
    tcase_add_test(t, test_graph_two_inputs);
    tcase_add_test(t, test_golden_checkpoint_crop090);
    tcase_add_test(t, test_golden_checkpoint_crop100);
    suite_add_tcase(s, t);
    TCase *f = tcase_create("family");
    tcase_set_timeout(f, 60);
    tcase_add_checked_fixture(f, setup, teardown);
    tcase_add_test(f, test_family_interface);
    tcase_add_test(f, test_checkpoint_config);
    tcase_add_test(f, test_model_from_checkpoint);
    tcase_add_test(f, test_hf_hub_ids);
    tcase_add_test(f, test_cpu_mem_estimate);
    suite_add_tcase(s, f);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
