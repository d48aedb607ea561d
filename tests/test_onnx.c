/* test_onnx.c: the ONNX reader (src/io/onnx.h, issue 24) on files the `onnx` package wrote
 * (tools/make_onnx_fixtures.py): what it reads (opset, symbolic shapes, each way an initializer stores its bytes,
 * external data, node attributes), the model computed from what was read against onnxruntime's numbers, and one
 * error per check, each naming what is wrong. Then the reference interpreter (src/io/onnx_run.h) on the same files:
 * tiny.onnx and every timm ViT graph against onnxruntime's outputs, at batch 2 and 1, and its refusals. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/dtype.h"
#include "io/onnx.h"
#include "io/onnx_run.h"
#include "io/safetensors.h"
#include "exec/cpu/cpu_exec.h"
#include "bench/onnx_check.h"
#include "models/onnx_import.h"
#include "planner/plan.h"
#include "models/vit.h"

#define FX "tests/fixtures/onnx/"

static tp_onnx_model *load_ok(const char *path) {
    tp_onnx_model *m = NULL;
    tp_error e = {0};
    ck_assert_msg(tp_onnx_load(path, &m, &e) == TP_OK, "%s", e.msg);
    return m;
}

/* the initializer's values as float32 (float32 or float16 storage) */
static void values(const tp_onnx_tensor *t, float *out) {
    ck_assert_ptr_nonnull(t);
    if (t->elem_type == TP_ONNX_FLOAT) memcpy(out, t->data, t->nbytes);
    else if (t->elem_type == TP_ONNX_FLOAT16) tp_convert_to_f32(TP_F16, t->data, out, (size_t)t->numel, 1.0f);
    else ck_abort_msg("%s: unexpected type %d", t->name, t->elem_type);
}

/* y = 0.5 relu(x W + b) W2^T + c from the weights as read, against tiny.expect.txt (onnxruntime's, exact in fp32) */
static void check_model(const tp_onnx_model *m) {
    float W[12], b[3], W2[6], c[2];
    values(tp_onnx_find_initializer(m, "W"), W);
    values(tp_onnx_find_initializer(m, "b"), b);
    values(tp_onnx_find_initializer(m, "W2"), W2);
    values(tp_onnx_find_initializer(m, "c"), c);
    const float x[2][4] = {{1, 2, 3, 4}, {-1, 0.5f, 0, 2}};
    FILE *f = fopen(FX "tiny.expect.txt", "r");
    ck_assert_ptr_nonnull(f);
    for (int r = 0; r < 2; r++) {
        float h[3];
        for (int j = 0; j < 3; j++) {
            float s = b[j];
            for (int k = 0; k < 4; k++) s += x[r][k] * W[k * 3 + j];
            h[j] = s > 0 ? s : 0;
        }
        for (int o = 0; o < 2; o++) {
            float y = c[o], want;
            for (int j = 0; j < 3; j++) y += 0.5f * h[j] * W2[o * 3 + j];
            ck_assert_int_eq(fscanf(f, "%f", &want), 1);
            ck_assert_msg(fabsf(y - want) <= 1e-6f, "y[%d][%d] = %g, onnxruntime %g", r, o, y, want);
        }
    }
    fclose(f);
}

START_TEST(test_read_inline) {
    tp_onnx_model *m = load_ok(FX "tiny.onnx");
    ck_assert_int_eq(tp_onnx_ir_version(m), 8);
    ck_assert_int_eq(tp_onnx_opset(m, ""), 17);
    ck_assert_int_eq(tp_onnx_opset(m, "ai.onnx"), 17);
    ck_assert_int_eq(tp_onnx_opset(m, "com.microsoft"), -1);
    ck_assert_str_eq(tp_onnx_producer(m), "tprof-fixtures 1");
    /* the fed input: x (batch, 4), batch symbolic; initializers are not inputs */
    ck_assert_int_eq(tp_onnx_n_inputs(m), 1);
    const tp_onnx_value *x = tp_onnx_input(m, 0);
    ck_assert_str_eq(x->name, "x");
    ck_assert_int_eq(x->elem_type, TP_ONNX_FLOAT);
    ck_assert_int_eq(x->ndim, 2);
    ck_assert_int_eq(x->dims[0], -1);
    ck_assert_str_eq(x->dim_param[0], "batch");
    ck_assert_int_eq(x->dims[1], 4);
    ck_assert_ptr_null(x->dim_param[1]);
    ck_assert_int_eq(tp_onnx_n_outputs(m), 2);
    ck_assert_str_eq(tp_onnx_output(m, 1)->name, "rt");
    ck_assert_str_eq(tp_onnx_output(m, 1)->dim_param[1], "batch");
    /* each storage: raw_data (W, c), float_data (b), float16 bits in int32_data (W2) */
    ck_assert_int_eq(tp_onnx_n_initializers(m), 4);
    const tp_onnx_tensor *w2 = tp_onnx_find_initializer(m, "W2");
    ck_assert_int_eq(w2->elem_type, TP_ONNX_FLOAT16);
    ck_assert_int_eq(w2->ndim, 2);
    ck_assert_int_eq(w2->dims[0], 2);
    ck_assert_int_eq(w2->nbytes, 12);
    ck_assert_int_eq(w2->external, 0);
    ck_assert_ptr_null(tp_onnx_find_initializer(m, "x"));
    check_model(m);
    /* nodes in file order, with their attributes */
    ck_assert_int_eq(tp_onnx_n_nodes(m), 7);
    const tp_onnx_node *k = tp_onnx_node_at(m, 0), *g = tp_onnx_node_at(m, 5), *t = tp_onnx_node_at(m, 6);
    ck_assert_str_eq(k->op_type, "Constant");
    const tp_onnx_attr *v = tp_onnx_node_attr(k, "value");
    ck_assert(v && v->type == TP_ONNX_ATTR_TENSOR && v->t->numel == 1 && ((const float *)v->t->data)[0] == 0.0f);
    ck_assert_str_eq(g->op_type, "Gemm");
    ck_assert_int_eq(g->n_in, 3);
    ck_assert_str_eq(g->in[1], "W2f");
    ck_assert_int_eq(tp_onnx_node_attr(g, "transB")->i, 1);
    ck_assert(tp_onnx_node_attr(g, "alpha")->type == TP_ONNX_ATTR_FLOAT && tp_onnx_node_attr(g, "alpha")->f == 0.5);
    ck_assert_ptr_null(tp_onnx_node_attr(g, "beta"));
    const tp_onnx_attr *perm = tp_onnx_node_attr(t, "perm");
    ck_assert(perm && perm->type == TP_ONNX_ATTR_INTS && perm->n == 2 && perm->ints[0] == 1 && perm->ints[1] == 0);
    ck_assert_ptr_null(tp_onnx_node_at(m, 7));
    tp_onnx_free(m);
}
END_TEST

/* the same weights from an external data file, packed back to back as onnx.save_model writes them */
START_TEST(test_read_external) {
    tp_onnx_model *m = load_ok(FX "tiny_ext.onnx");
    ck_assert_int_eq(tp_onnx_find_initializer(m, "W")->external, 1);
    ck_assert_int_eq(tp_onnx_find_initializer(m, "c")->external, 1);
    check_model(m);
    tp_onnx_free(m);
}
END_TEST

/* The timm ViT exports (tools/make_onnx_vit_fixtures.py): what torch.onnx writes, read as the onnx package read it
 * (node count and op types from each sidecar), the parameters' bytes equal to timm's safetensors of the same model */
START_TEST(test_timm_exports) {
    static const char *const G[] = {"vit_op17", "vit_op18", "vit_dynamo_op18", "vit_fp8_qdq_op19"};
    tp_error e = {0};
    for (int k = 0; k < 4; k++) {
        char path[256], side[256];
        snprintf(path, sizeof path, "tests/fixtures/onnx_vit/%s.onnx", G[k]);
        snprintf(side, sizeof side, "tests/fixtures/onnx_vit/%s.json", G[k]);
        json_error_t je;
        json_t *j = json_load_file(side, 0, &je);
        ck_assert_msg(j, "%s: %s", side, je.text);
        tp_onnx_model *m = load_ok(path);
        ck_assert_int_eq(tp_onnx_n_nodes(m), json_integer_value(json_object_get(j, "nodes")));
        ck_assert_int_eq(tp_onnx_n_initializers(m), json_integer_value(json_object_get(j, "initializers")));
        const char *op;
        json_t *cnt;
        json_object_foreach(json_object_get(j, "op_types"), op, cnt) {
            int n = 0;
            for (int i = 0; i < tp_onnx_n_nodes(m); i++) n += !strcmp(tp_onnx_node_at(m, i)->op_type, op);
            ck_assert_msg(n == json_integer_value(cnt), "%s: %d %s nodes, the onnx package counted %lld", path, n, op,
                          (long long)json_integer_value(cnt));
        }
        const tp_onnx_value *in = tp_onnx_input(m, 0);
        ck_assert_str_eq(in->name, "input");
        ck_assert_int_eq(in->ndim, 4);
        ck_assert_ptr_nonnull(in->dim_param[0]);
        ck_assert_str_eq(in->dim_param[0], "batch");
        ck_assert_int_eq(in->dims[3], 32);
        /* a LayerNorm weight both files hold: byte for byte (the fp8 graph keeps it fp32 too) */
        const tp_onnx_tensor *w = tp_onnx_find_initializer(m, "blocks.1.norm2.weight");
        ck_assert_ptr_nonnull(w);
        ck_assert_int_eq(w->elem_type, TP_ONNX_FLOAT);
        tp_safetensors st;
        ck_assert_msg(tp_st_open("tests/fixtures/onnx_vit/model.safetensors", &st, &e) == TP_OK, "%s", e.msg);
        const tp_st_tensor *t = tp_st_find(&st, "blocks.1.norm2.weight");
        ck_assert_ptr_nonnull(t);
        ck_assert_uint_eq(t->end - t->begin, w->nbytes);
        ck_assert_int_eq(memcmp(st.data + t->begin, w->data, w->nbytes), 0);
        tp_st_close(&st);
        if (k == 3) { /* the Q/DQ graph's weights: E4M3, one byte each */
            const tp_onnx_tensor *q = tp_onnx_find_initializer(m, "blocks.0.attn.qkv.weight_fp8");
            ck_assert_ptr_nonnull(q);
            ck_assert_int_eq(q->elem_type, TP_ONNX_FLOAT8E4M3FN);
            ck_assert_uint_eq(q->nbytes, (size_t)q->numel);
            ck_assert_int_eq(q->numel, 48 * 144);
        }
        tp_onnx_free(m);
        json_decref(j);
    }
}
END_TEST

static void expect_error(const char *path, tp_status code, const char *a, const char *b) {
    tp_onnx_model *m = NULL;
    tp_error e = {0};
    ck_assert_int_eq(tp_onnx_load(path, &m, &e), code);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(e.msg, path) && strstr(e.msg, a) && (!b || strstr(e.msg, b)), "%s: %s", path, e.msg);
    ck_assert_ptr_null(strchr(e.msg, '\n'));
}

START_TEST(test_errors) {
    expect_error(FX "bad_order.onnx", TP_ERR_FORMAT, "node 1 'mm' (MatMul) input 'nobody'", "earlier node");
    expect_error(FX "bad_ext_updir.onnx", TP_ERR_FORMAT, "initializer 'W'", "'..' is not allowed");
    expect_error(FX "bad_ext_past_end.onnx", TP_ERR_FORMAT, "initializer 'W'", "past the end");
    expect_error(FX "bad_raw_len.onnx", TP_ERR_FORMAT, "initializer 'W': raw_data holds 47 bytes", "48");
    expect_error(FX "missing.onnx", TP_ERR_IO, "cannot open", NULL);
    expect_error("tests/fixtures", TP_ERR_IO, "is a folder; expected a file", NULL);
    /* another kind of file, and a model cut short: no ModelProto */
    expect_error(FX "tiny.expect.txt", TP_ERR_FORMAT, "not an ONNX model", NULL);
    char tmp[] = "/tmp/tprof_onnx_XXXXXX";
    const int fd = mkstemp(tmp);
    ck_assert_int_ge(fd, 0);
    FILE *in = fopen(FX "tiny.onnx", "rb");
    unsigned char buf[4096];
    const size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    ck_assert(n > 100 && n < sizeof buf);
    ck_assert_int_eq(write(fd, buf, n - 37), (ssize_t)(n - 37));
    close(fd);
    expect_error(tmp, TP_ERR_FORMAT, "not an ONNX model", "truncated");
    unlink(tmp);
}
END_TEST

START_TEST(test_elem_types) {
    ck_assert_int_eq(tp_onnx_elem_bytes(TP_ONNX_FLOAT8E4M3FN), 1);
    ck_assert_int_eq(tp_onnx_elem_bytes(TP_ONNX_BFLOAT16), 2);
    ck_assert_int_eq(tp_onnx_elem_bytes(TP_ONNX_FLOAT4E2M1), 0);
    ck_assert_int_eq(tp_onnx_elem_bytes(11), -1); /* float64 */
    ck_assert_str_eq(tp_onnx_elem_name(TP_ONNX_FLOAT8E4M3FN), "float8e4m3fn");
}
END_TEST

/* ---- the reference interpreter (src/io/onnx_run.h) ---------------------------------------------------------- */

#define VX "tests/fixtures/onnx_vit/"

static float *read_f32(const char *path, size_t n) {
    float *v = malloc(n * sizeof(float));
    FILE *f = fopen(path, "rb");
    ck_assert_msg(v && f, "%s", path);
    ck_assert_uint_eq(fread(v, sizeof(float), n, f), n);
    ck_assert_int_eq(fgetc(f), EOF); /* the file holds exactly n values */
    fclose(f);
    return v;
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return sqrt(d / r);
}

static double max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Runs a one-input graph with batch bound; returns the status, the first output in *r */
static tp_status run1(const tp_onnx_model *m, int64_t batch, const float *x, int64_t numel, tp_onnx_result *r,
                      tp_error *e) {
    const tp_onnx_dim dims[] = {{"batch", batch}};
    const float *const inputs[] = {x};
    const tp_onnx_run_args a = {.dims = dims, .n_dims = 1, .inputs = inputs, .input_numel = &numel};
    return tp_onnx_run(m, &a, 1, r, e);
}

/* tiny.onnx, both outputs: y against onnxruntime's numbers, rt = relu(x W + b)^T (the Max-with-0 node) */
START_TEST(test_run_tiny) {
    tp_onnx_model *m = load_ok(FX "tiny.onnx");
    const float x[8] = {1, 2, 3, 4, -1, 0.5f, 0, 2};
    const tp_onnx_dim dims[] = {{"batch", 2}};
    const float *const inputs[] = {x};
    const int64_t numel = 8;
    const tp_onnx_run_args a = {.dims = dims, .n_dims = 1, .inputs = inputs, .input_numel = &numel};
    tp_onnx_result r[2];
    tp_error e = {0};
    ck_assert_msg(tp_onnx_run(m, &a, 2, r, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(r[0].ndim, 2);
    ck_assert_int_eq(r[0].dims[0], 2);
    ck_assert_int_eq(r[0].dims[1], 2);
    FILE *f = fopen(FX "tiny.expect.txt", "r");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 4; i++) {
        float want;
        ck_assert_int_eq(fscanf(f, "%f", &want), 1);
        ck_assert_msg(fabsf(r[0].data[i] - want) <= 1e-6f, "y[%d] = %g, onnxruntime %g", i, r[0].data[i], want);
    }
    fclose(f);
    ck_assert_int_eq(r[1].ndim, 2);
    ck_assert_int_eq(r[1].dims[0], 3);
    ck_assert_int_eq(r[1].dims[1], 2);
    float W[12], b[3];
    values(tp_onnx_find_initializer(m, "W"), W);
    values(tp_onnx_find_initializer(m, "b"), b);
    for (int row = 0; row < 2; row++)
        for (int j = 0; j < 3; j++) {
            double h = b[j];
            for (int k = 0; k < 4; k++) h += (double)x[row * 4 + k] * W[k * 3 + j];
            ck_assert_msg(fabs(r[1].data[j * 2 + row] - fmax(h, 0)) <= 1e-6, "rt[%d][%d]", j, row);
        }
    tp_onnx_results_free(r, 2);
    tp_onnx_free(m);
}
END_TEST

/* Each timm graph on input.bin (2, 3, 32, 32) against onnxruntime's CPU output: the FP32 graphs to rel L2 1e-5; the
 * FP8 Q/DQ graph too (why in the loop); then batch 1 on the first image against row 0 of batch 2. */
START_TEST(test_run_timm) {
    static const char *const G[] = {"vit_op17", "vit_op18", "vit_dynamo_op18", "vit_fp8_qdq_op19"};
    const size_t n_in = 2 * 3 * 32 * 32;
    float *x = read_f32(VX "input.bin", n_in);
    for (int k = 0; k < 4; k++) {
        char path[256];
        snprintf(path, sizeof path, VX "%s.onnx", G[k]);
        tp_onnx_model *m = load_ok(path);
        snprintf(path, sizeof path, VX "%s.ort_output.bin", G[k]);
        float *want = read_f32(path, 20);
        tp_onnx_result r, r1;
        tp_error e = {0};
        ck_assert_msg(run1(m, 2, x, (int64_t)n_in, &r, &e) == TP_OK, "%s: %s", G[k], e.msg);
        ck_assert_int_eq(r.ndim, 2);
        ck_assert_int_eq(r.dims[0], 2);
        ck_assert_int_eq(r.dims[1], 10);
        const double l2 = rel_l2(r.data, want, 20), mx = max_abs(r.data, want, 20);
        ck_assert_msg(run1(m, 1, x, (int64_t)n_in / 2, &r1, &e) == TP_OK, "%s batch 1: %s", G[k], e.msg);
        ck_assert_int_eq(r1.dims[0], 1);
        const double b1 = max_abs(r1.data, r.data, 10);
        printf("onnx run %-18s vs onnxruntime: rel L2 %.3g, max abs %.3g; batch 1 vs batch 2 row 0: max abs %.3g\n",
               G[k], l2, mx, b1);
        /* The FP8 graph is held to the same 1e-5: measured 1.0e-7 (max abs 8.9e-8), the size of the FP32 graphs'
         * float32 summation-order differences. Its 9 activation Q/DQ outputs (6816 values), added as graph outputs
         * once (2026-11-26, onnxruntime 1.32), equal onnxruntime's bit for bit: every E4M3 code (RNE, saturating,
         * dtype.h) matches, and a code rounded the other way would move a Linear input by a whole E4M3 step. */
        const double lim = 1e-5;
        ck_assert_msg(l2 <= lim, "%s: rel L2 %g against onnxruntime (limit %g)", G[k], l2, lim);
        ck_assert_msg(b1 <= 1e-6, "%s: batch 1 differs from batch 2's row 0 by %g", G[k], b1);
        tp_onnx_results_free(&r, 1);
        tp_onnx_results_free(&r1, 1);
        free(want);
        tp_onnx_free(m);
    }
    free(x);
}
END_TEST

/* The tiny Llama (tests/fixtures/hf_llama_tiny exported by the dynamo exporter, tools/make_onnx_llama_fixture.py):
 * its 212 nodes (RMSNorm and RoPE decomposed, GQA through Expand, SiLU as Sigmoid, transformers' causal mask built
 * from Range, CumSum, GatherND, LessOrEqual, And, IsNaN) run by the interpreter against onnxruntime's logits,
 * batch 2 x 11 tokens, the token ids fed as float32 integers */
START_TEST(test_run_llama) {
    tp_onnx_model *m = load_ok("tests/fixtures/onnx_llama/llama_op18.onnx");
    FILE *f = fopen("tests/fixtures/onnx_llama/input_ids.bin", "rb");
    ck_assert_ptr_nonnull(f);
    int64_t ids[22];
    ck_assert_uint_eq(fread(ids, sizeof ids[0], 22, f), 22);
    fclose(f);
    float x[22];
    for (int i = 0; i < 22; i++) x[i] = (float)ids[i];
    float *want = read_f32("tests/fixtures/onnx_llama/llama_op18.ort_output.bin", 2 * 11 * 384);
    const tp_onnx_dim dims[] = {{"batch", 2}, {"seq", 11}};
    const float *const inputs[] = {x};
    const int64_t numel = 22;
    const tp_onnx_run_args a = {.dims = dims, .n_dims = 2, .inputs = inputs, .input_numel = &numel};
    tp_onnx_result r;
    tp_error e = {0};
    ck_assert_msg(tp_onnx_run(m, &a, 1, &r, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(r.ndim, 3);
    ck_assert_int_eq(r.dims[2], 384);
    const double l2 = rel_l2(r.data, want, 2 * 11 * 384);
    printf("onnx run llama_op18 vs onnxruntime: rel L2 %.3g, max abs %.3g\n", l2, max_abs(r.data, want, 2 * 11 * 384));
    ck_assert_msg(l2 <= 1e-5, "rel L2 %g against onnxruntime", l2);
    x[3] = 2.5f; /* not a token id */
    tp_onnx_results_free(&r, 1);
    ck_assert_int_eq(tp_onnx_run(m, &a, 1, &r, &e), TP_ERR_ARG);
    ck_assert_msg(strstr(e.msg, "input 'input_ids' is int64 and value 3 is 2.5"), "%s", e.msg);
    free(want);
    tp_onnx_free(m);
}
END_TEST

static void expect_run_error(const tp_onnx_model *m, const tp_onnx_run_args *a, tp_status code, const char *s1,
                             const char *s2) {
    tp_onnx_result r = {0};
    tp_error e = {0};
    ck_assert_int_eq(tp_onnx_run(m, a, 1, &r, &e), code);
    ck_assert_ptr_null(r.data);
    ck_assert_msg(strstr(e.msg, s1) && (!s2 || strstr(e.msg, s2)), "%s", e.msg);
    ck_assert_ptr_null(strchr(e.msg, '\n'));
}

/* Refusals, each one line naming what is wrong: an unbound or unknown symbolic dimension, an input of the wrong
 * size, an op type the interpreter does not run (tiny.onnx with its Max node renamed, same length, so the protobuf
 * lengths hold) */
START_TEST(test_run_errors) {
    tp_onnx_model *m = load_ok(FX "tiny.onnx");
    const float x[8] = {0};
    const float *const inputs[] = {x};
    int64_t numel = 8;
    const tp_onnx_dim batch2[] = {{"batch", 2}}, bach[] = {{"batch", 2}, {"bach", 2}};
    tp_onnx_run_args a = {.dims = NULL, .n_dims = 0, .inputs = inputs, .input_numel = &numel};
    expect_run_error(m, &a, TP_ERR_ARG, "input 'x' dimension 0 ('batch') is not bound", NULL);
    a.dims = bach, a.n_dims = 2;
    expect_run_error(m, &a, TP_ERR_ARG, "binding 'bach' names no symbolic dimension", NULL);
    a.dims = batch2, a.n_dims = 1, numel = 7;
    expect_run_error(m, &a, TP_ERR_ARG, "input 'x' needs 8 float32 values, 7 given", NULL);
    tp_onnx_result r[3];
    tp_error e = {0};
    ck_assert_int_eq(tp_onnx_run(m, &a, 3, r, &e), TP_ERR_ARG); /* more outputs than the graph has */
    tp_onnx_free(m);

    FILE *in = fopen(FX "tiny.onnx", "rb");
    unsigned char buf[4096];
    const size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    size_t at = 0;
    while (at + 3 <= n && memcmp(buf + at, "Max", 3)) at++;
    ck_assert_uint_lt(at + 3, n);
    buf[at + 1] = 'o'; /* "Mox" */
    char tmp[] = "/tmp/tprof_onnx_run_XXXXXX";
    const int fd = mkstemp(tmp);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
    close(fd);
    m = load_ok(tmp);
    unlink(tmp);
    numel = 8;
    expect_run_error(m, &a, TP_ERR_UNSUPPORTED, "node 3 'relu_as_max' (Mox)", "not supported");
    tp_onnx_free(m);
}
END_TEST

/* ---- the import (src/models/onnx_import.h) ---------------------------------------------------------------------- */

/* A fixture's bytes with the first `from` replaced by `to` (same length, so the protobuf lengths hold; an op type
 * is found by its field's tag and length in front, 0x22 and the length: NodeProto's op_type is field 4), written to
 * a temporary file whose path goes to tmp. */
static void patched(const char *path, const char *from, const char *to, char *tmp) {
    FILE *in = fopen(path, "rb");
    ck_assert_ptr_nonnull(in);
    fseek(in, 0, SEEK_END);
    const long n = ftell(in);
    fseek(in, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, in), (size_t)n);
    fclose(in);
    const size_t l = strlen(from);
    long at = 0;
    while (at + (long)l <= n && memcmp(buf + at, from, l)) at++;
    ck_assert_int_lt(at + (long)l, n + 1);
    memcpy(buf + at, to, l);
    strcpy(tmp, "/tmp/tprof_onnx_import_XXXXXX");
    const int fd = mkstemp(tmp);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, buf, (size_t)n), (ssize_t)n);
    close(fd);
    free(buf);
}

/* Each timm export imported as the ViT family: its configuration, every parameter equal to timm's checkpoint
 * (model.safetensors, the same model), and tprof's CPU executor on the imported model against onnxruntime's
 * outputs at batch 2 (the bar: FP32 relative L2 <= 1e-5). */
START_TEST(test_import_timm) {
    static const char *const G[] = {"vit_op17", "vit_op18", "vit_dynamo_op18"};
    const size_t n_in = 2 * 3 * 32 * 32;
    float *x = read_f32(VX "input.bin", n_in);
    for (int k = 0; k < 3; k++) {
        char path[256];
        snprintf(path, sizeof path, VX "%s.onnx", G[k]);
        tp_model m;
        tp_params p, ref;
        tp_onnx_import_info info;
        tp_error e = {0};
        ck_assert_msg(tp_onnx_import(path, &m, &p, &info, &e) == TP_OK, "%s: %s", G[k], e.msg);
        ck_assert_str_eq(m.family->name, "vit");
        const tp_vit_config *c = tp_vit_cfg(&m);
        ck_assert_int_eq(c->img_size, 32);
        ck_assert_int_eq(c->patch_size, 16);
        ck_assert_int_eq(c->embed_dim, 48);
        ck_assert_int_eq(c->depth, 2);
        ck_assert_int_eq(c->num_heads, 3);
        ck_assert_int_eq(tp_vit_mlp_hidden(c), 192);
        ck_assert_int_eq(c->class_token, 1);
        ck_assert_int_eq(c->global_pool, TP_VIT_POOL_TOKEN);
        ck_assert_int_eq(c->num_classes, 10);
        ck_assert_int_eq(c->gelu_tanh, 0);
        ck_assert(fabsf(c->ln_eps - 1e-6f) < 1e-12f);
        ck_assert_str_eq(info.batch_dim, "batch");
        ck_assert_int_eq(info.n_qdq, 0);
        ck_assert_int_eq(info.n_main + info.n_attention + info.n_gelu + info.n_shape, info.n_nodes);
        ck_assert_int_eq(info.n_attention > 0 && info.n_gelu > 0, 1);
        ck_assert_msg(tp_model_params_load(&m, VX "model.safetensors", &ref, &e) == TP_OK, "%s", e.msg);
        ck_assert_int_eq(ref.n_params, p.n_params);
        for (int i = 0; i < p.n_params; i++) {
            const int j = tp_params_find(&ref, p.params[i].name);
            ck_assert_int_ge(j, 0);
            ck_assert_int_eq(ref.params[j].numel, p.params[i].numel);
            ck_assert_msg(!memcmp(ref.params[j].data, p.params[i].data, sizeof(float) * (size_t)p.params[i].numel),
                          "%s: %s differs from timm's", G[k], p.params[i].name);
        }
        tp_graph g;
        ck_assert_msg(tp_model_build_graph(&m, &p, 2, &g, &e) == TP_OK, "%s", e.msg);
        float y[20];
        for (int i = 0; i < 20; i++) y[i] = NAN; /* poisoned: an unwritten logit shows */
        ck_assert_msg(tp_cpu_run(&g, &p, x, y, &e) == TP_OK, "%s", e.msg);
        snprintf(path, sizeof path, VX "%s.ort_output.bin", G[k]);
        float *want = read_f32(path, 20);
        const double l2 = rel_l2(y, want, 20);
        printf("onnx import %-16s (%d nodes: %d main, %d attention, %d GELU, %d shape): tprof CPU vs onnxruntime rel "
               "L2 %.3g\n", G[k], info.n_nodes, info.n_main, info.n_attention, info.n_gelu, info.n_shape, l2);
        ck_assert_msg(l2 <= 1e-5, "%s: rel L2 %g against onnxruntime", G[k], l2);
        free(want);
        tp_graph_free(&g);
        tp_params_free(&p);
        tp_params_free(&ref);
    }
    free(x);
}
END_TEST

/* The FP8 Q/DQ export: the 9 linears' weights read through DequantizeLinear (E4M3 values times the scale), each
 * one's input Q/DQ scale noted; the weights within E4M3's rounding of timm's */
START_TEST(test_import_qdq) {
    tp_model m;
    tp_params p, ref;
    tp_onnx_import_info info;
    tp_error e = {0};
    ck_assert_msg(tp_onnx_import(VX "vit_fp8_qdq_op19.onnx", &m, &p, &info, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(info.n_qdq, 9);
    for (int i = 0; i < info.n_qdq; i++) {
        ck_assert_int_eq(info.qdq[i].w_type, TP_ONNX_FLOAT8E4M3FN);
        ck_assert_int_eq(info.qdq[i].x_type, TP_ONNX_FLOAT8E4M3FN);
        ck_assert(info.qdq[i].w_scale > 0 && info.qdq[i].x_scale > 0);
    }
    ck_assert_str_eq(info.qdq[0].layer, "blocks.0.attn.qkv");
    ck_assert_str_eq(info.qdq[8].layer, "head");
    ck_assert_msg(tp_model_params_load(&m, VX "model.safetensors", &ref, &e) == TP_OK, "%s", e.msg);
    const int i = tp_params_find(&p, "blocks.1.mlp.fc1.weight"), j = tp_params_find(&ref, "blocks.1.mlp.fc1.weight");
    ck_assert_int_ge(i, 0);
    const double l2 = rel_l2(p.params[i].data, ref.params[j].data, (size_t)p.params[i].numel);
    ck_assert_msg(l2 > 0 && l2 < 0.05, "fc1 weight E4M3 against timm's: rel L2 %g", l2); /* E4M3: 3 mantissa bits */
    tp_params_free(&p);
    tp_params_free(&ref);
}
END_TEST

/* The Q/DQ export run as the file says (explicit quantization): its 9 linears in FP8 E4M3 with the file's weight and
 * input scales, the rest in fp32, through tprof's CPU emulation of that plan, against onnxruntime (the 1e-5) */
START_TEST(test_import_qdq_policy) {
    tp_model m;
    tp_params p;
    tp_onnx_import_info info;
    tp_error e = {0};
    ck_assert_msg(tp_onnx_import(VX "vit_fp8_qdq_op19.onnx", &m, &p, &info, &e) == TP_OK, "%s", e.msg);
    for (int i = 0; i < info.n_qdq; i++) ck_assert(info.qdq[i].w_max_code == 448.0f);
    tp_policy pol;
    ck_assert_msg(tp_onnx_qdq_policy(&info, TP_PREC_FP32, &pol, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(tp_onnx_qdq_policy(&info, TP_PREC_FP8, &pol, &e), TP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(e.msg, "--precision fp8 with a Q/DQ ONNX file"), "%s", e.msg);
    ck_assert_msg(tp_onnx_qdq_policy(&info, TP_PREC_FP32, &pol, &e) == TP_OK, "%s", e.msg);
    tp_graph g;
    ck_assert_msg(tp_model_build_graph(&m, &p, 2, &g, &e) == TP_OK, "%s", e.msg);
    tp_plan plan;
    memset(&plan, 0, sizeof plan);
    ck_assert_msg(tp_plan_build_policy(&g, &pol, 0, &plan, &e) == TP_OK, "%s", e.msg); /* the CPU emulation */
    int n8 = 0;
    for (int i = 0; i < g.n_ops; i++)
        if (g.ops[i].kind == TP_OP_LINEAR && plan.op_prec[i] == TP_PREC_FP8) {
            n8++;
            ck_assert_msg(strstr(plan.op_note[i], "activations at the ONNX file's Q/DQ scales"), "%s", plan.op_note[i]);
        }
    ck_assert_int_eq(n8, 9);
    float *amax = calloc((size_t)g.n_values, sizeof(float));
    ck_assert_msg(tp_onnx_qdq_scales(&info, &g, amax, &e) == TP_OK, "%s", e.msg);
    float *x = read_f32(VX "input.bin", 2 * 3 * 32 * 32), *want = read_f32(VX "vit_fp8_qdq_op19.ort_output.bin", 20);
    float y[20];
    for (int i = 0; i < 20; i++) y[i] = NAN;
    ck_assert_msg(tp_cpu_run_emulated(&g, &p, &plan, amax, x, y, &e) == TP_OK, "%s", e.msg);
    const double l2 = rel_l2(y, want, 20);
    printf("onnx import vit_fp8_qdq_op19 as the file quantizes it (9 linears fp8, the rest fp32): tprof CPU emulation "
           "vs onnxruntime rel L2 %.3g\n", l2);
    ck_assert_msg(l2 <= 1e-5, "rel L2 %g against onnxruntime", l2);
    free(x), free(want), free(amax);
    tp_plan_free(&plan);
    tp_graph_free(&g);
    tp_params_free(&p);
}
END_TEST

/* The tiny Llama export imported as the decoder family: its configuration (GQA, llama3 RoPE read back from the
 * inverse frequencies), every parameter equal to the checkpoint it was exported from (tests/fixtures/hf_llama_tiny),
 * and tprof's CPU executor on one prefill of the fixture's tokens, every position's logits, against onnxruntime's */
static void import_llama(const char *stem, const char *ids_file, int V, const char *ref_dir, const char *want_desc) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/onnx_llama/%s.onnx", stem);
    tp_model m;
    tp_params p, ref;
    tp_onnx_import_info info;
    tp_error e = {0};
    ck_assert_msg(tp_onnx_import(path, &m, &p, &info, &e) == TP_OK, "%s", e.msg);
    ck_assert_str_eq(m.family->name, "decoder");
    ck_assert_str_eq(info.family, "decoder");
    ck_assert_str_eq(info.seq_dim, "seq");
    char desc[256];
    tp_model_describe(&m, desc, sizeof desc);
    ck_assert_msg(strstr(desc, want_desc), "%s", desc);
    ck_assert_int_eq(info.n_main + info.n_attention + info.n_gelu + info.n_shape, info.n_nodes);
    memset(&ref, 0, sizeof ref);
    if (ref_dir) {
        ck_assert_msg(tp_model_params_load(&m, ref_dir, &ref, &e) == TP_OK, "%s", e.msg);
        ck_assert_int_eq(ref.n_params, p.n_params);
    }
    for (int i = 0; ref_dir && i < p.n_params; i++) {
        const int j = tp_params_find(&ref, p.params[i].name);
        ck_assert_int_ge(j, 0);
        ck_assert_msg(!memcmp(ref.params[j].data, p.params[i].data, sizeof(float) * (size_t)p.params[i].numel),
                      "%s differs from the checkpoint", p.params[i].name);
    }
    snprintf(path, sizeof path, "tests/fixtures/onnx_llama/%s", ids_file);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    int64_t ids[22];
    ck_assert_uint_eq(fread(ids, sizeof ids[0], 22, f), 22);
    fclose(f);
    float x[22], *y = malloc(sizeof(float) * 2 * 11 * V);
    for (int i = 0; i < 22; i++) x[i] = (float)ids[i];
    for (int i = 0; i < 2 * 11 * V; i++) y[i] = NAN;
    const tp_step_shape step = {.batch = 2, .tokens = 11, .past = 0, .kv_len = 11, .all_logits = 1};
    tp_graph g;
    ck_assert_msg(tp_model_build_step(&m, &p, &step, &g, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_cpu_run(&g, &p, x, y, &e) == TP_OK, "%s", e.msg);
    snprintf(path, sizeof path, "tests/fixtures/onnx_llama/%s.ort_output.bin", stem);
    float *want = read_f32(path, 2 * 11 * V);
    const double l2 = rel_l2(y, want, 2 * 11 * V);
    printf("onnx import %-16s (%d nodes: %d main, %d attention, %d activation, %d shape): tprof CPU vs "
           "onnxruntime rel L2 %.3g\n", stem, info.n_nodes, info.n_main, info.n_attention, info.n_gelu, info.n_shape, l2);
    ck_assert_msg(l2 <= 1e-5, "rel L2 %g against onnxruntime", l2);
    free(y), free(want);
    tp_graph_free(&g);
    tp_params_free(&p);
    tp_params_free(&ref);
}

/* transformers 5.24's export (RoPE's angles by a Mul), 5.17's (by a MatMul of the expanded tensors), a tied one, a
 * Gemma */
START_TEST(test_import_llama) {
    static const char *const desc = "dim 64, 2 layers, 4 heads (2 KV, head dim 16), MLP 176 SwiGLU, vocab 384, rope "
                                    "500000 llama3";
    import_llama("llama_op18", "input_ids.bin", 384, "tests/fixtures/hf_llama_tiny", desc);
    import_llama("llama_tf517_op18", "input_ids.bin", 384, "tests/fixtures/hf_llama_tiny", desc);
    /* tied embeddings: the exporter's folded transpose recognized as the embedding, one copy kept */
    import_llama("llama_tied_op18", "llama_tied_op18.input_ids.bin", 128, NULL, "vocab 128, rope 10000, tied");
    /* Gemma: the embedding times sqrt(C), RMSNorm by (1 + w) folded into one constant, GeGLU's tanh GELU, tied */
    import_llama("gemma_op18", "gemma_op18.input_ids.bin", 128, NULL,
                 "GemmaForCausalLM: dim 64, 1 layers, 4 heads (1 KV, head dim 16), MLP 128 GeGLU, vocab 128, rope 10000, "
                 "tied");
}
END_TEST

/* Exports by tools/export_timm_onnx.py --kwargs (img 32, dim 48, depth 2, 3 heads, 10 classes): timm's global_pool
 * 'avg' at opset 17 (the class token sliced off, ReduceMean over the tokens, its axes an attribute, fc_norm, the head),
 * and the token-pooled model at opset 16 (LayerNormalization decomposed: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
 * Div, Mul, Add); each against onnxruntime */
static void import_small(const char *stem, int pool) {
    char path[256];
    tp_model m;
    tp_params p;
    tp_onnx_import_info info;
    tp_error e = {0};
    snprintf(path, sizeof path, VX "%s.onnx", stem);
    ck_assert_msg(tp_onnx_import(path, &m, &p, &info, &e) == TP_OK, "%s: %s", stem, e.msg);
    ck_assert_int_eq(tp_vit_cfg(&m)->global_pool, pool);
    ck_assert_int_eq(tp_params_find(&p, "fc_norm.weight") >= 0, pool == TP_VIT_POOL_AVG);
    ck_assert_int_eq(tp_params_find(&p, "norm.weight") >= 0, pool != TP_VIT_POOL_AVG);
    snprintf(path, sizeof path, VX "%s.input.bin", stem);
    float *x = read_f32(path, 2 * 3 * 32 * 32);
    snprintf(path, sizeof path, VX "%s.ort_output.bin", stem);
    float *want = read_f32(path, 20);
    tp_graph g;
    ck_assert_msg(tp_model_build_graph(&m, &p, 2, &g, &e) == TP_OK, "%s", e.msg);
    float y[20];
    for (int i = 0; i < 20; i++) y[i] = NAN;
    ck_assert_msg(tp_cpu_run(&g, &p, x, y, &e) == TP_OK, "%s", e.msg);
    const double l2 = rel_l2(y, want, 20);
    printf("onnx import %-16s (%d nodes): tprof CPU vs onnxruntime rel L2 %.3g\n", stem, info.n_nodes, l2);
    ck_assert_msg(l2 <= 1e-5, "%s: rel L2 %g against onnxruntime", stem, l2);
    free(x), free(want);
    tp_graph_free(&g);
    tp_params_free(&p);
}

START_TEST(test_import_avg) {
    import_small("vit_avg_op17", TP_VIT_POOL_AVG);
    import_small("vit_op16", TP_VIT_POOL_TOKEN);
}
END_TEST

/* The numeric check behind every import (bench/onnx_check.h): a file whose structure maps but whose GELU divides by
 * 1.5 instead of sqrt 2 in block 0 (the constant's float bytes patched) imports, and the check refuses it; the file as
 * written passes it */
START_TEST(test_import_check) {
    char tmp[64];
    tp_model m;
    tp_params p;
    tp_onnx_import_info info;
    tp_error e = {0};
    double rel = 0, ms = 0;
    tp_onnx_model *om = load_ok(VX "vit_op17.onnx");
    ck_assert_msg(tp_onnx_import_model(om, "vit_op17.onnx", &m, &p, &info, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_onnx_check(om, "vit_op17.onnx", &m, &p, &info, 5, &rel, &ms, &e) == TP_OK, "%s", e.msg);
    tp_onnx_free(om);
    ck_assert_msg(rel <= TP_ONNX_CHECK_TOL, "rel L2 %g", rel);
    tp_params_free(&p);
    const float sqrt2 = 1.4142135381698608f, other = 1.5f;
    char from[5] = {0}, to[5] = {0};
    memcpy(from, &sqrt2, 4), memcpy(to, &other, 4); /* little-endian, as ONNX stores floats; patched() copies
                                                    * strlen(from) = 4 bytes (sqrt 2 has no zero byte) */
    patched(VX "vit_op17.onnx", from, to, tmp);
    om = load_ok(tmp);
    ck_assert_msg(tp_onnx_import_model(om, tmp, &m, &p, &info, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_onnx_check(om, tmp, &m, &p, &info, 5, &rel, &ms, &e) == TP_OK, "%s", e.msg);
    tp_onnx_free(om);
    printf("onnx check: the file's GELU altered in block 0: relative L2 %.3g against tprof's graph\n", rel);
    ck_assert_msg(rel > 1e-3, "rel L2 %g: the check missed a changed constant", rel);
    tp_params_free(&p);
    unlink(tmp);
}
END_TEST

static void expect_import_error(const char *path, tp_status code, const char *s1, const char *s2) {
    tp_model m;
    tp_params p;
    tp_error e = {0};
    const tp_status st = tp_onnx_import(path, &m, &p, NULL, &e);
    ck_assert_msg(st == code, "status %d, %d expected: %s", st, code, e.msg);
    ck_assert_ptr_null(p.params);
    ck_assert_msg(strstr(e.msg, s1) && (!s2 || strstr(e.msg, s2)), "%s", e.msg);
    ck_assert_ptr_null(strchr(e.msg, '\n'));
}

/* What the import refuses, each naming the node: an op where the pattern has none (Erf renamed Exp: the GELU is
 * another function), a LayerNormalization renamed, a Softmax renamed, a graph that is not a ViT, a node with fewer
 * inputs than its operator takes */
START_TEST(test_import_errors) {
    char tmp[64];
    patched(VX "vit_op17.onnx", "\x22\x03" "Erf", "\x22\x03" "Exp", tmp); /* op_type: field 4, 3 bytes */
    expect_import_error(tmp, TP_ERR_UNSUPPORTED, "(Exp): an op type the GELU subgraph of a ViT does not have", "node");
    unlink(tmp);
    patched(VX "vit_dynamo_op18.onnx", "\x22\x07" "Softmax", "\x22\x07" "Softmix", tmp);
    expect_import_error(tmp, TP_ERR_UNSUPPORTED, "(Softmix)", "attention");
    unlink(tmp);
    patched(VX "vit_dynamo_op18.onnx", "\x22\x12" "LayerNormalization", "\x22\x12" "LayerNormalizatiox", tmp);
    expect_import_error(tmp, TP_ERR_UNSUPPORTED, "(LayerNormalizatiox): expected a LayerNormalization", "opset 17");
    unlink(tmp);
    patched("tests/fixtures/onnx_llama/llama_op18.onnx", "\x22\x07" "Sigmoid", "\x22\x07" "Sigmaid", tmp);
    expect_import_error(tmp, TP_ERR_UNSUPPORTED, "not a gated MLP", "node");
    unlink(tmp);
    expect_import_error(FX "tiny.onnx", TP_ERR_UNSUPPORTED, "tiny.onnx: 1 inputs and 2 outputs", "an image batch or token ids in");
    /* fewer inputs than the operator takes (fuzz_onnx_import: a one-input Gather and a one-input Add were read past
     * their input lists): a Softmax renamed Reshape, which takes 2, is an invalid file, refused before any walk */
    patched(VX "vit_dynamo_op18.onnx", "\x22\x07" "Softmax", "\x22\x07" "Reshape", tmp);
    expect_import_error(tmp, TP_ERR_FORMAT, "(Reshape): 1 input(s) and 1 output(s); the ONNX operator takes at least 2",
                        "node");
    unlink(tmp);
}
END_TEST

int main(void) {
    Suite *su = suite_create("onnx");
    TCase *t = tcase_create("reader");
    tcase_add_test(t, test_read_inline);
    tcase_add_test(t, test_read_external);
    tcase_add_test(t, test_errors);
    tcase_add_test(t, test_elem_types);
    tcase_add_test(t, test_timm_exports);
    suite_add_tcase(su, t);
    TCase *r = tcase_create("run");
    tcase_set_timeout(r, 60);
    tcase_add_test(r, test_run_tiny);
    tcase_add_test(r, test_run_timm);
    tcase_add_test(r, test_run_llama);
    tcase_add_test(r, test_run_errors);
    suite_add_tcase(su, r);
    TCase *im = tcase_create("import");
    tcase_set_timeout(im, 60);
    tcase_add_test(im, test_import_timm);
    tcase_add_test(im, test_import_qdq);
    tcase_add_test(im, test_import_qdq_policy);
    tcase_add_test(im, test_import_llama);
    tcase_add_test(im, test_import_avg);
    tcase_add_test(im, test_import_check);
    tcase_add_test(im, test_import_errors);
    suite_add_tcase(su, im);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
