/* test_gpu_sparse.c: 2:4 sparse GEMMs through cuSPARSELt (src/exec/cuda/vendor/sparse_cusparselt.h) against the CPU
 * on the pruned weights, in F16 and BF16 and E4M3 (scales in alpha, a 16-bit output), at awkward shapes (M = 197 x 3 rounded up to cuSPARSELt's 8 with the rows
 * beyond M ignored, bias, a residual), the refusals (K not a multiple of 16, a weight that is not 2:4), and a whole
 * ViT engine with every eligible linear forced sparse against the CPU reference on its pruned weights. Skipped when
 * cuSPARSELt is not found, unless TPROF_REQUIRE_CUSPARSELT is set. Outputs poisoned (0xFF: NaN). */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "exec/cpu/cpu_exec.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "exec/cuda/vendor/sparse_cusparselt.h"
#include "formats/dtype.h"
#include "formats/sparsity.h"
#include "models/model.h"
#include "planner/plan.h"

#define TP_GPU_MAX_TRACKED 256
#include "gpu_check.h"
#include "close_check.h"

Suite *gpu_sparse_suite(void);

static void setup(void) { gpu_setup(); }

static void teardown(void) {
    release_all();
    close_stream();
}

/* 1 when cuSPARSELt is usable; otherwise prints the skip reason and returns 0, or fails under
 * TPROF_REQUIRE_CUSPARSELT. */
static int cusparselt_here(const char *test) {
    char msg[1024];
    const int ok = tp_spgemm_available(msg, sizeof msg);
    return gpu_lib_here(test, ok, msg, "TPROF_REQUIRE_CUSPARSELT");
}

#define round_to gpu_round_to /* gpu_check.h */

typedef struct {
    int M, N, K, bias, residual;
} sp_shape;

/* 16-bit: F16 and BF16 at each shape */
static const sp_shape SHAPES[] = {
    {197 * 3, 768, 3072, 1, 1}, /* ViT-B/16's fc2 at batch 3: M rounded up to 592 */
    {197, 2304, 768, 1, 0},     /* its qkv at batch 1 */
    {8, 64, 16, 0, 0},          /* the smallest */
    {40, 48, 1024, 0, 1},
};
static const tp_dtype DTS[2] = {TP_F16, TP_BF16};

/* E4M3 (N and K multiples of 32), each with its 16-bit output */
static const sp_shape SHAPES8[] = {
    {197 * 3, 768, 3072, 1, 1}, /* M rounded up to 8-bit operands' 16: 592 */
    {197, 2304, 768, 1, 0},
    {40, 64, 1024, 0, 1},
    {16, 32, 32, 0, 0}, /* the smallest 8-bit shape */
};
static const tp_dtype OUTS8[] = {TP_F16, TP_BF16, TP_F16, TP_BF16};

/* One sparse GEMM against the CPU on the same pruned, rounded values. x (M, K) and W (N, K) in dt; for E4M3 they
 * are quantized on the host with per-tensor scales (x / sx, W / sw) folded into alpha, as the FP8 engines run them,
 * and the reference uses the dequantized values. Bias and R in out. Rows are rounded up to cuSPARSELt's multiple
 * (8; 16 for 8-bit operands) and the extra rows ignored. Seeds: W seed + i, x seed + 100 + i, bias seed + 200,
 * R seed + 201. */
static void check_spgemm(tp_dtype dt, tp_dtype out, const sp_shape *sh, uint64_t seed, int i) {
    const int f8 = dt == TP_E4M3, Mr = f8 ? (sh->M + 15) / 16 * 16 : (sh->M + 7) / 8 * 8;
    const float sx = f8 ? 0.125f : 1.0f, sw = f8 ? 0.0125f : 1.0f; /* E4M3: x within +-40, W within +-20 */
    SET_CASE("sparse GEMM %s%s%s M %d N %d K %d%s%s", dname(dt), f8 ? "->" : "", f8 ? dname(out) : "", sh->M, sh->N,
             sh->K, sh->bias ? " +bias" : "", sh->residual ? " +residual" : "");
    if (!cusparselt_here(g_case)) return;
    const size_t nw = (size_t)sh->N * sh->K, nx = (size_t)Mr * sh->K, ny = (size_t)Mr * sh->N;
    float *w = host_normal(nw, seed + (uint64_t)i, 0.0, 0.05);
    tp_sparse_prune(w, sh->N, sh->K);
    float *x = host_normal(nx, seed + 100 + (uint64_t)i, 0.0, 1.0);
    for (size_t j = 0; j < nw; j++) w[j] /= sw;
    for (size_t j = 0; j < nx; j++) x[j] /= sx;
    round_to(dt, w, nw);
    round_to(dt, x, nx);
    float *b = host_normal((size_t)sh->N, seed + 200, 0.0, 0.5), *r = host_normal(ny, seed + 201, 0.0, 1.0);
    round_to(out, b, (size_t)sh->N);
    round_to(out, r, ny);
    float *ref = hmalloc(sizeof(float) * (size_t)sh->M * sh->N);
    for (int m = 0; m < sh->M; m++)
        for (int n = 0; n < sh->N; n++) {
            double acc = 0.0;
            for (int k = 0; k < sh->K; k++) acc += (double)x[(size_t)m * sh->K + k] * w[(size_t)n * sh->K + k];
            acc = acc * sx * sw + (sh->bias ? b[n] : 0.0) + (sh->residual ? r[(size_t)m * sh->N + n] : 0.0);
            ref[(size_t)m * sh->N + n] = (float)acc;
        }
    void *dw = dev_upload(dt, w, nw, nw), *dx = dev_upload(dt, x, nx, nx);
    void *db = sh->bias ? dev_upload(out, b, (size_t)sh->N, (size_t)sh->N) : NULL;
    void *dr = sh->residual ? dev_upload(out, r, ny, ny) : NULL;
    void *dy = dev_alloc(out, ny);
    tp_spgemm_ctx *c = NULL;
    tp_spgemm *p = NULL;
    tp_error e = {0};
    ck_assert_msg(tp_spgemm_ctx_create(&c, &e) == TP_OK, "%s", e.msg);
    tp_spgemm_desc d = {.M = Mr, .N = sh->N, .K = sh->K, .dt = dt, .out_dt = out, .alpha = sx * sw,
                        .has_bias = sh->bias, .residual = sh->residual};
    ck_assert_msg(tp_spgemm_create(c, &d, dw, dx, db, dr, dy, g_stream, g_case, &p, &e) == TP_OK, "%s", e.msg);
    CUDA_OK(cudaMemsetAsync(dy, 0xFF, ny * esize(out), g_stream)); /* the search's result poisoned */
    ck_assert_int_eq(tp_spgemm_run(c, p, dx, db, dr, dy, g_stream), 0);
    CUDA_OK(cudaStreamSynchronize(g_stream));
    char alg[128]; /* printed before the check, so a failure names the algorithm that computed it */
    tp_spgemm_describe(p, alg, sizeof alg);
    printf("  %s: compressed weight %zu bytes (dense %zu); %s\n", g_case, tp_spgemm_weight_bytes(p), nw * esize(dt),
           alg);
    /* the products are exact and summed in fp32, then rounded once to the output type: the 16-bit bars */
    tol_t t = {out == TP_F16 ? 2e-3 : 1e-2, out == TP_F16 ? 4e-3 : 2e-2};
    check_close(g_case, download_f32(out, dy, (size_t)sh->M * sh->N, 1.0f), ref, (size_t)sh->M * sh->N,
                (size_t)sh->N, t);
    tp_spgemm_destroy(p);
    tp_spgemm_ctx_destroy(c);
}

START_TEST(test_spgemm) { check_spgemm(DTS[_i % 2], DTS[_i % 2], &SHAPES[_i / 2], 100, _i); }
END_TEST

START_TEST(test_spgemm_fp8) { check_spgemm(TP_E4M3, OUTS8[_i], &SHAPES8[_i], 500, _i); }
END_TEST

/* Refused with the reason: K not a multiple of 16 (before cuSPARSELt), a weight that is not 2:4 (its check) */
START_TEST(test_spgemm_refusals) {
    SET_CASE("sparse GEMM refusals");
    char why[200];
    tp_spgemm_desc bad = {.M = 64, .N = 64, .K = 24, .dt = TP_F16};
    ck_assert(!tp_spgemm_supported(&bad, why, sizeof why));
    ck_assert_msg(strstr(why, "multiples of 16") != NULL, "%s", why);
    bad.K = 32, bad.M = 60;
    ck_assert(!tp_spgemm_supported(&bad, why, sizeof why));
    ck_assert_msg(strstr(why, "multiple of 8") != NULL, "%s", why);
    tp_spgemm_desc bad8 = {.M = 64, .N = 48, .K = 64, .dt = TP_E4M3, .out_dt = TP_F16}; /* 8-bit: N, K by 32 */
    ck_assert(!tp_spgemm_supported(&bad8, why, sizeof why));
    ck_assert_msg(strstr(why, "multiples of 32") != NULL && strstr(why, "8-bit") != NULL, "%s", why);
    bad8.N = 64, bad8.M = 40;
    ck_assert(!tp_spgemm_supported(&bad8, why, sizeof why));
    ck_assert_msg(strstr(why, "multiple of 16") != NULL, "%s", why);
    bad8.M = 48, bad8.out_dt = TP_E4M3;
    ck_assert(!tp_spgemm_supported(&bad8, why, sizeof why));
    ck_assert_msg(strstr(why, "output type") != NULL, "%s", why);
    if (!cusparselt_here(g_case)) return;
    const int M = 16, N = 32, K = 64;
    float *w = host_normal((size_t)N * K, 7, 0.0, 1.0); /* dense: not 2:4 */
    void *dw = dev_upload(TP_F16, w, (size_t)N * K, (size_t)N * K), *dx = dev_alloc(TP_F16, (size_t)M * K);
    void *dy = dev_alloc(TP_F16, (size_t)M * N);
    CUDA_OK(cudaMemset(dx, 0, (size_t)M * K * 2));
    tp_spgemm_ctx *c = NULL;
    tp_spgemm *p = NULL;
    tp_error e = {0};
    ck_assert_msg(tp_spgemm_ctx_create(&c, &e) == TP_OK, "%s", e.msg);
    tp_spgemm_desc d = {.M = M, .N = N, .K = K, .dt = TP_F16};
    ck_assert_int_eq(tp_spgemm_create(c, &d, dw, dx, NULL, NULL, dy, g_stream, "dense weight", &p, &e),
                     TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "not 2:4") != NULL, "%s", e.msg);
    tp_spgemm_ctx_destroy(c);
}
END_TEST

/* vit-tiny at batch 3 (M = 591, not a multiple of 8 or 16) in fp16 and fp8 (calibrated per-tensor scales), every
 * linear pruned, every eligible one forced sparse (tp_engine_options.sparse 2): against the CPU on the same pruned
 * weights; the head (N 1000) stays dense */
START_TEST(test_sparse_engine) {
    const tp_precision prec = _i ? TP_PREC_FP8 : TP_PREC_FP16;
    SET_CASE("ViT engine %s, 2:4 sparse GEMMs forced", tp_precision_name(prec));
    if (!cusparselt_here(g_case)) return;
    tp_model m;
    tp_error e = {0};
    tp_params p = {0};
    tp_graph g;
    tp_plan pl;
    enum { B = 3 };
    ck_assert_int_eq(tp_model_preset("vit-tiny", &m, &e), TP_OK);
    ck_assert_int_eq(tp_model_params_init(&m, 11, 1, &p, &e), TP_OK);
    ck_assert_int_eq(tp_model_build_graph(&m, &p, B, &g, &e), TP_OK);
    for (int i = 0; i < g.n_ops; i++)
        if (g.ops[i].kind == TP_OP_LINEAR) {
            tp_param *w = &p.params[g.values[g.ops[i].in[1]].param_index];
            tp_sparse_prune(w->data, w->shape[0], w->numel / w->shape[0]);
        }
    const size_t in_n = (size_t)B * (size_t)tp_model_input_numel(&m), out_n = (size_t)tp_value_numel(&g.values[g.output]);
    float *in = host_normal(in_n, 5, 0.0, 1.0), *ref = hmalloc(sizeof(float) * out_n), *got = hmalloc(sizeof(float) * out_n);
    ck_assert_msg(tp_cpu_run(&g, &p, in, ref, &e) == TP_OK, "%s", e.msg);
    int dev = 0;
    struct cudaDeviceProp dp;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaGetDeviceProperties(&dp, dev));
    const int sm = dp.major * 10 + dp.minor;
    ck_assert_msg(tp_plan_build(&g, prec, sm, &pl, &e) == TP_OK, "%s", e.msg);
    float *amax = NULL;
    if (prec == TP_PREC_FP8) { /* static activation scales from a calibration batch of its own */
        float *calib = host_normal(in_n, 6, 0.0, 1.0);
        amax = hmalloc(sizeof(float) * (size_t)g.n_values);
        ck_assert_msg(tp_calibrate_max(&g, &p, 0, sm, calib, amax, &e) == TP_OK, "%s", e.msg);
    }
    /* cuBLASLt for the dense GEMMs (tprof's GEMM + GELU would keep fc1 from the sparse path) */
    tp_engine_options o = {.device = dev, .use_graph = 1, .sparse = 2, .gemm_first = 1, .cublaslt_only = 1,
                           .act_amax = amax};
    tp_engine *eng = NULL;
    ck_assert_msg(tp_engine_build(&g, &p, &pl, &o, &eng, &e) == TP_OK, "%s", e.msg);
    int ran = 0, dense = 0;
    for (int i = 0; i < g.n_ops; i++) {
        if (g.ops[i].kind != TP_OP_LINEAR) continue;
        double a = 0, b = 0;
        const int k = tp_engine_sparse_op(eng, i, &a, &b, NULL);
        if (k == 1) ran++;
        else dense++, printf("  dense: %s: %s\n", g.ops[i].layer, tp_engine_op_impl(eng, i));
    }
    printf("  %s: %d linears sparse, %d dense\n", g_case, ran, dense);
    ck_assert_msg(ran >= 4 * 12, "%s: only %d linears ran sparse", g_case, ran);
    memset(got, 0xFF, sizeof(float) * out_n);
    ck_assert_int_eq(tp_engine_set_input(eng, in, &e), TP_OK);
    ck_assert_msg(tp_engine_forward(eng, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(tp_engine_get_output(eng, got, &e), TP_OK);
    tp_accuracy a;
    tp_accuracy_compute(got, ref, B, (int)(out_n / B), &a);
    printf("  %s: cosine %.7f rel L2 %.3e top-1 %.2f\n", g_case, a.cosine, a.rel_l2, a.top1_agree);
    ck_assert_msg(a.nonfinite == 0 && a.cosine >= (prec == TP_PREC_FP8 ? 0.99 : 0.999), "%s: cosine %.6f, %d non-finite",
                  g_case, a.cosine, a.nonfinite);
    tp_engine_destroy(eng);
    tp_plan_free(&pl);
    tp_graph_free(&g);
    tp_params_free(&p);
}
END_TEST

Suite *gpu_sparse_suite(void) {
    Suite *s = suite_create("gpu_sparse");
    TCase *t = tcase_create("sparse");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, test_spgemm, 0, 2 * (int)(sizeof SHAPES / sizeof SHAPES[0]));
    tcase_add_loop_test(t, test_spgemm_fp8, 0, (int)(sizeof SHAPES8 / sizeof SHAPES8[0]));
    tcase_add_test(t, test_spgemm_refusals);
    suite_add_tcase(s, t);
    /* apart, so CK_RUN_CASE=sparse runs the GEMM checks alone (a few seconds; the engines take ~30 s) */
    TCase *te = tcase_create("sparse_engine");
    tcase_add_checked_fixture(te, setup, teardown);
    tcase_set_timeout(te, 300);
    tcase_add_loop_test(te, test_sparse_engine, 0, 2);
    suite_add_tcase(s, te);
    return s;
}
