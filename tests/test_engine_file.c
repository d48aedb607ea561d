/* test_engine_file.c: the .tpe engine file: CRC-32, round trips of fp16 / fp8 / mxfp8 / nvfp4 engines of a small
 * ViT (config, policy, ops, calibration and every tensor bit for bit, decoded values against the quantizers),
 * the size per format, every kind of damaged file the reader must name (truncated, corrupted, wrong magic or
 * version, schema errors behind a valid checksum, missing file), writer errors, and a mutation fuzz loop.
 * Each test writes its files into its own mkdtemp directory, removed by the fixture's teardown. */
#include <check.h>

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/rng.h"
#include "formats/dtype.h"
#include "formats/qformat.h"
#include "planner/engine_file.h"
#include "models/vit.h"
#include "planner/plan.h"
#include "planner/policy.h"

/* ---- fixture and helpers ------------------------------------------------------------------------------ */

#define TP_TMPDIR_PREFIX "/tmp/tp_ef_test_"
#include "test_tmpdir.h"

static uint64_t le(const unsigned char *b, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

static void put_le(unsigned char *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The test model: vit-tiny cut to depth 2 at 64 px with 32 classes (every dim a multiple of 32), nonzero biases
 * so that every tensor has distinct values. */
typedef struct {
    tp_vit_config cfg;
    tp_model model; /* cfg as a model of the ViT family */
    tp_params params;
    tp_graph g;
    int *vmap; /* parameter index -> graph value */
} model;

static void make_model(model *m) {
    tp_error err = {0};
    ck_assert_int_eq(tp_vit_config_preset("vit-tiny", &m->cfg, &err), TP_OK);
    m->cfg.depth = 2;
    m->cfg.img_size = m->cfg.pre.img_size = 64;
    m->cfg.num_classes = 32;
    snprintf(m->cfg.name, sizeof m->cfg.name, "vit_tiny_patch16_224+custom");
    tp_vit_model(&m->cfg, &m->model);
    ck_assert_int_eq(tp_vit_params_init(&m->cfg, 1234, 1, &m->params, &err), TP_OK);
    ck_assert_msg(tp_vit_build_graph(&m->cfg, &m->params, 2, &m->g, &err) == TP_OK, "%s", err.msg);
    m->vmap = malloc(sizeof(int) * (size_t)m->params.n_params);
    ck_assert(m->vmap != NULL);
    for (int i = 0; i < m->params.n_params; i++) m->vmap[i] = -1;
    for (int v = 0; v < m->g.n_values; v++)
        if (m->g.values[v].kind == TP_VAL_PARAM) m->vmap[m->g.values[v].param_index] = v;
    for (int i = 0; i < m->params.n_params; i++) ck_assert(m->vmap[i] >= 0);
}

static void free_model(model *m) {
    tp_params_free(&m->params);
    tp_graph_free(&m->g);
    free(m->vmap);
}

/* Plans m for pol (or prec's default policy) on sm_90 and writes path. */
static void write_engine(const model *m, tp_precision prec, const tp_policy *pol, const float *amax, const char *path,
                         tp_plan *plan_out) {
    tp_error err = {0};
    tp_plan plan;
    if (pol) ck_assert_msg(tp_plan_build_policy(&m->g, pol, 90, &plan, &err) == TP_OK, "%s", err.msg);
    else ck_assert_msg(tp_plan_build(&m->g, prec, 90, &plan, &err) == TP_OK, "%s", err.msg);
    tp_status s = tp_engine_file_write(path, &m->model, prec, pol, 90, &m->params, &m->g, &plan, amax, NULL, &err);
    ck_assert_msg(s == TP_OK, "write %s: %s", tp_precision_name(prec), err.msg);
    if (plan_out) *plan_out = plan;
    else tp_plan_free(&plan);
}

/* Every message: one line, starting with the path, with a reason behind it. */
static void check_msg_form(const tp_error *err, const char *path) {
    ck_assert_msg(strchr(err->msg, '\n') == NULL && strchr(err->msg, '\r') == NULL, "multi-line message: %s",
                  err->msg);
    ck_assert_msg(strncmp(err->msg, path, strlen(path)) == 0, "message does not start with the path: %s", err->msg);
    ck_assert_msg(strlen(err->msg) > strlen(path) + 2, "empty reason: %s", err->msg);
}

static void expect_read_fail(const char *path, tp_status want, const char *sub1, const char *sub2) {
    tp_engine_file f;
    tp_error err = {0};
    tp_status s = tp_engine_file_read(path, &f, &err);
    ck_assert_msg(s == want, "status %s, expected %s (%s)", tp_status_name(s), tp_status_name(want), err.msg);
    ck_assert_int_eq(err.code, want);
    ck_assert_ptr_null(f.tensors);
    ck_assert_ptr_null(f.ops);
    ck_assert_int_eq(f.n_tensors, 0);
    check_msg_form(&err, path);
    if (sub1) ck_assert_msg(strstr(err.msg, sub1) != NULL, "message lacks \"%s\": %s", sub1, err.msg);
    if (sub2) ck_assert_msg(strstr(err.msg, sub2) != NULL, "message lacks \"%s\": %s", sub2, err.msg);
    tp_engine_file_free(&f); /* a no-op on the emptied struct */
}

/* The parsed header of an engine file image (new reference); *H and *D receive the header length and the
 * start of the data section. */
static json_t *header_of(const unsigned char *b, size_t n, uint64_t *H, uint64_t *D) {
    ck_assert(n >= 28);
    *H = le(b + 16, 8);
    *D = (24 + *H + 4 + 63) / 64 * 64;
    json_error_t je;
    json_t *root = json_loadb((const char *)b + 24, (size_t)*H, 0, &je);
    ck_assert_msg(root != NULL, "%s", je.text);
    return root;
}

static json_t *tensor_entry(json_t *root, const char *name) {
    json_t *ts = json_object_get(root, "tensors");
    size_t i;
    json_t *t;
    json_array_foreach(ts, i, t) {
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0) return t;
    }
    ck_abort_msg("no tensor %s", name);
    return NULL;
}

/* Writes to path an engine file with root as its header (valid checksum) and the data section of orig. */
static void write_with_header(const char *path, const unsigned char *orig, size_t n, json_t *root) {
    uint64_t H0 = le(orig + 16, 8), D0 = (24 + H0 + 4 + 63) / 64 * 64;
    char *h = json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(17));
    ck_assert(h != NULL);
    uint64_t H = strlen(h), D = (24 + H + 4 + 63) / 64 * 64;
    unsigned char *b = calloc((size_t)(D + (n - D0)) + 1, 1);
    ck_assert(b != NULL);
    memcpy(b, orig, 16);
    put_le(b + 16, H, 8);
    memcpy(b + 24, h, (size_t)H);
    put_le(b + 24 + H, tp_crc32(0, h, (size_t)H), 4);
    memcpy(b + D, orig + D0, n - D0);
    write_bytes(path, b, (size_t)(D + (n - D0)));
    free(b);
    free(h);
}

/* ---- CRC-32 ------------------------------------------------------------------------------------------- */

START_TEST(test_crc32) {
    ck_assert_uint_eq(tp_crc32(0, "123456789", 9), 0xCBF43926u); /* the CRC-32/ISO-HDLC check value */
    ck_assert_uint_eq(tp_crc32(0, "", 0), 0u);
    ck_assert_uint_eq(tp_crc32(0, "a", 1), 0xE8B7BE43u);
    ck_assert_uint_eq(tp_crc32(0, "The quick brown fox jumps over the lazy dog", 43), 0x414FA339u);
    /* chaining as zlib: crc(ab) == crc(crc(a), b) */
    ck_assert_uint_eq(tp_crc32(tp_crc32(0, "12345", 5), "6789", 4), 0xCBF43926u);
}
END_TEST

/* ---- round trips -------------------------------------------------------------------------------------- */

static void check_cfg_equal(const tp_vit_config *a, const tp_vit_config *b) {
    ck_assert_str_eq(a->name, b->name);
    ck_assert_int_eq(a->img_size, b->img_size);
    ck_assert_int_eq(a->patch_size, b->patch_size);
    ck_assert_int_eq(a->in_chans, b->in_chans);
    ck_assert_int_eq(a->embed_dim, b->embed_dim);
    ck_assert_int_eq(a->depth, b->depth);
    ck_assert_int_eq(a->num_heads, b->num_heads);
    ck_assert(memcmp(&a->mlp_ratio, &b->mlp_ratio, sizeof(double)) == 0);
    ck_assert_int_eq(a->class_token, b->class_token);
    ck_assert_int_eq(a->global_pool, b->global_pool);
    ck_assert_int_eq(a->num_classes, b->num_classes);
    ck_assert_uint_eq(bits(a->ln_eps), bits(b->ln_eps));
    ck_assert_int_eq(a->pre.img_size, b->pre.img_size);
    ck_assert(memcmp(&a->pre.crop_pct, &b->pre.crop_pct, sizeof(double)) == 0);
    for (int c = 0; c < 3; c++) {
        ck_assert_uint_eq(bits(a->pre.mean[c]), bits(b->pre.mean[c]));
        ck_assert_uint_eq(bits(a->pre.std[c]), bits(b->pre.std[c]));
    }
    ck_assert_int_eq(a->pre.interpolation, b->pre.interpolation);
    ck_assert_int_eq(a->pre.crop_mode, b->pre.crop_mode);
}

static void check_policy_equal(const tp_policy *a, const tp_policy *b) {
    ck_assert_int_eq(a->def, b->def);
    ck_assert_int_eq(a->n_rules, b->n_rules);
    for (int i = 0; i < a->n_rules; i++) {
        ck_assert_str_eq(a->rules[i].glob, b->rules[i].glob);
        ck_assert_int_eq(a->rules[i].prec, b->rules[i].prec);
        ck_assert_int_eq(a->rules[i].builtin, b->rules[i].builtin);
    }
}

/* The stored form a parameter must have under plan: the quantized format, or TP_QF_NONE and the plain dtype. */
static tp_qformat expected_qf(const tp_plan *plan, int v, tp_dtype *dt) {
    *dt = plan->value_dt[v];
    if (plan->value_qf[v] != TP_QF_NONE) return plan->value_qf[v];
    if (plan->value_dt[v] == TP_E4M3) return TP_QF_FP8_TENSOR;
    return TP_QF_NONE;
}

/* Checks every tensor of f against the masters of m under plan: the stored bytes equal a fresh conversion or
 * quantization of the master bit for bit, and the decoded fp32 equals the conversion / tp_qdq_f32 of it. */
static void check_tensors(const model *m, const tp_plan *plan, const tp_engine_file *f) {
    tp_error err = {0};
    tp_params dec;
    ck_assert_msg(tp_engine_file_params(f, &dec, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(dec.n_params, m->params.n_params);
    ck_assert_int_eq(f->n_tensors, m->params.n_params);
    uint64_t sum = 0;
    for (int i = 0; i < m->params.n_params; i++) {
        const tp_param *p = &m->params.params[i];
        const tp_engine_tensor *t = &f->tensors[i];
        ck_assert_str_eq(t->name, p->name);
        ck_assert_ptr_eq(tp_engine_file_find(f, p->name), t);
        ck_assert_int_eq(t->ndim, p->ndim);
        for (int d = 0; d < p->ndim; d++) ck_assert_int_eq(t->shape[d], p->shape[d]);
        ck_assert_int_eq(t->numel, p->numel);
        ck_assert_str_eq(dec.params[i].name, p->name);
        ck_assert_int_eq(dec.params[i].numel, p->numel);
        tp_dtype dt;
        tp_qformat qf = expected_qf(plan, m->vmap[i], &dt);
        ck_assert_msg(t->qf == qf, "%s: stored as %d, expected %d", p->name, (int)t->qf, (int)qf);
        float *want = malloc(sizeof(float) * (size_t)p->numel);
        ck_assert(want != NULL);
        if (qf == TP_QF_NONE) {
            ck_assert_int_eq(t->dtype, dt);
            size_t eb = tp_dtype_info(dt)->bytes * (size_t)p->numel;
            ck_assert_uint_eq(t->bytes, eb);
            void *ref = malloc(eb);
            ck_assert(ref != NULL);
            tp_convert_from_f32(dt, p->data, ref, (size_t)p->numel, 1.0f);
            ck_assert_msg(memcmp(ref, t->data, eb) == 0, "%s: stored bytes differ", p->name);
            tp_convert_to_f32(dt, ref, want, (size_t)p->numel, 1.0f);
            free(ref);
            sum += eb;
        } else {
            int64_t K = p->shape[p->ndim - 1];
            tp_qtensor q;
            ck_assert(tp_quantize(qf, p->data, p->numel / K, K, 1, 0.0f, &q, &err) == TP_OK);
            ck_assert_int_eq(t->q.format, qf);
            ck_assert_int_eq(t->q.rows, p->numel / K);
            ck_assert_int_eq(t->q.K, K);
            ck_assert_uint_eq(t->q.elem_bytes, q.elem_bytes);
            ck_assert_uint_eq(t->q.scale_bytes, q.scale_bytes);
            ck_assert_msg(memcmp(t->q.elems, q.elems, q.elem_bytes) == 0, "%s: stored elements differ", p->name);
            ck_assert_msg(memcmp(t->q.scales, q.scales, q.scale_bytes) == 0, "%s: stored scales differ", p->name);
            ck_assert_uint_eq(bits(t->q.global_scale), bits(q.global_scale));
            /* decoded = the QDQ values (times NVFP4's s2, in FP32 as tp_dequantize documents) */
            float s2 = 0;
            ck_assert(tp_qdq_f32(qf, p->data, want, p->numel / K, K, 1, 0.0f, &s2, &err) == TP_OK);
            if (qf == TP_QF_NVFP4)
                for (int64_t j = 0; j < p->numel; j++) want[j] = want[j] * s2;
            sum += q.elem_bytes + q.scale_bytes;
            tp_qtensor_free(&q);
        }
        /* first mismatch, then one assertion: Check records every passing assertion, which is slow per element */
        int64_t j = 0;
        while (j < p->numel && bits(dec.params[i].data[j]) == bits(want[j])) j++;
        ck_assert_msg(j == p->numel, "%s[%lld]: decoded %.9g, expected %.9g", p->name, (long long)j,
                      j < p->numel ? (double)dec.params[i].data[j] : 0.0, j < p->numel ? (double)want[j] : 0.0);
        free(want);
    }
    ck_assert_uint_eq(f->weight_bytes, sum);
    tp_params_free(&dec);
}

static const tp_precision FORMATS[4] = {TP_PREC_FP16, TP_PREC_FP8, TP_PREC_MXFP8, TP_PREC_NVFP4};

START_TEST(test_roundtrip) {
    const tp_precision prec = FORMATS[_i];
    model m;
    make_model(&m);
    const char *path = tpath("model.tpe");
    tp_plan plan;
    write_engine(&m, prec, NULL, NULL, path, &plan);
    tp_engine_file f;
    tp_error err = {0};
    ck_assert_msg(tp_engine_file_read(path, &f, &err) == TP_OK, "%s", err.msg);

    ck_assert_str_eq(f.tprof_version, TPROF_VERSION);
    ck_assert(f.commit[0] != '\0');
    ck_assert_ptr_eq(f.model.family, &tp_vit_family);
    check_cfg_equal(tp_vit_cfg(&f.model), &m.cfg);
    ck_assert_int_eq(f.precision, prec);
    tp_policy pol;
    tp_policy_default(&pol, prec);
    check_policy_equal(&f.policy, &pol);
    ck_assert_int_eq(f.target_sm, 90);
    ck_assert_int_eq(f.n_calib, 0);
    ck_assert_int_eq(f.n_ops, m.g.n_ops);
    for (int i = 0; i < m.g.n_ops; i++) {
        ck_assert_str_eq(f.ops[i].layer, m.g.ops[i].layer);
        ck_assert_int_eq(f.ops[i].kind, m.g.ops[i].kind);
        ck_assert_int_eq(f.ops[i].prec, plan.op_prec[i]);
        ck_assert_int_eq(f.ops[i].emulated, plan.op_emulated[i]);
        ck_assert_str_eq(f.ops[i].how, plan.op_note[i]);
        /* version 4: the program the plan lowered to */
        const int head = plan.prog.op_call[i];
        ck_assert_int_eq(f.ops[i].kernel, tp_program_kind(&plan.prog, i));
        ck_assert_str_eq(f.ops[i].fused_into, head != i ? m.g.ops[head].layer : "");
    }
    ck_assert(f.has_program);
    char why[256];
    ck_assert_int_eq(tp_engine_file_program_diff(&f, &m.g, &plan, why, sizeof why), 0);
    check_tensors(&m, &plan, &f);

    /* The file's weight bytes are the plan's estimate, less the NVFP4 global scales (JSON, not data). */
    int n_nvfp4 = 0;
    for (int i = 0; i < f.n_tensors; i++) n_nvfp4 += f.tensors[i].qf == TP_QF_NVFP4;
    ck_assert_msg(fabs((double)f.weight_bytes + 4.0 * n_nvfp4 - tp_plan_weight_bytes(&plan, &m.g)) < 0.5,
                  "%s: weight bytes %llu, plan %.0f", tp_precision_name(prec), (unsigned long long)f.weight_bytes,
                  tp_plan_weight_bytes(&plan, &m.g));
    struct stat sb;
    ck_assert(stat(path, &sb) == 0);
    ck_assert_uint_eq(f.file_bytes, (uint64_t)sb.st_size);
    ck_assert(f.file_bytes > f.weight_bytes);
    if (prec != TP_PREC_FP16) {
        int quantized = 0;
        for (int i = 0; i < f.n_tensors; i++) quantized += f.tensors[i].qf != TP_QF_NONE;
        ck_assert_int_eq(quantized, 4 * m.cfg.depth); /* qkv, proj, fc1, fc2 of each block */
    }

    /* Reading twice gives the same result; freeing twice is harmless. */
    tp_engine_file f2;
    ck_assert(tp_engine_file_read(path, &f2, &err) == TP_OK);
    ck_assert_uint_eq(f2.weight_bytes, f.weight_bytes);
    tp_engine_file_free(&f2);
    tp_engine_file_free(&f2);
    tp_engine_file_free(&f);
    tp_plan_free(&plan);
    free_model(&m);
}
END_TEST

/* The engine size per format: NVFP4 weights about 3.5x smaller than FP16 on the quantized layers. */
START_TEST(test_sizes) {
    model m;
    make_model(&m);
    uint64_t wb[4], qb[4], fb[4];
    char names[4][16];
    tp_engine_file f[4];
    tp_error err = {0};
    for (int k = 0; k < 4; k++) {
        snprintf(names[k], sizeof names[k], "%s.tpe", tp_precision_name(FORMATS[k]));
        write_engine(&m, FORMATS[k], NULL, NULL, tpath(names[k]), NULL);
        ck_assert_msg(tp_engine_file_read(tpath(names[k]), &f[k], &err) == TP_OK, "%s", err.msg);
        wb[k] = f[k].weight_bytes;
        fb[k] = f[k].file_bytes;
    }
    /* bytes of the layers the NVFP4 engine quantizes, in every format */
    for (int k = 0; k < 4; k++) {
        qb[k] = 0;
        for (int i = 0; i < f[3].n_tensors; i++) {
            if (f[3].tensors[i].qf == TP_QF_NONE) continue;
            const tp_engine_tensor *t = &f[k].tensors[i];
            qb[k] += t->qf ? t->q.elem_bytes + t->q.scale_bytes : t->bytes;
        }
    }
    printf("engine files of the test model (vit-tiny, depth 2, 64 px, 32 classes):\n");
    for (int k = 0; k < 4; k++)
        printf("  %-6s file %8llu bytes, weights %8llu bytes, quantized layers %8llu bytes (fp16/this %.2fx)\n",
               tp_precision_name(FORMATS[k]), (unsigned long long)fb[k], (unsigned long long)wb[k],
               (unsigned long long)qb[k], (double)qb[0] / (double)qb[k]);
    ck_assert_msg(qb[0] >= 3 * qb[3], "nvfp4 quantized layers %llu bytes, fp16 %llu", (unsigned long long)qb[3],
                  (unsigned long long)qb[0]);
    ck_assert_msg((double)qb[0] / (double)qb[3] > 3.5, "ratio %.3f", (double)qb[0] / (double)qb[3]);
    ck_assert(qb[1] * 2 <= qb[0] + 64 && qb[2] > qb[1] && qb[3] < qb[2]); /* fp8 halves, mxfp8 adds 1/32 */
    ck_assert(wb[3] < wb[2] && wb[2] < wb[0] && wb[1] < wb[0]);
    for (int k = 0; k < 4; k++) tp_engine_file_free(&f[k]);
    free_model(&m);
}
END_TEST

/* A policy with user overrides (builtin flags kept), a calibration table, and the policy object read back by
 * tp_policy_load_json, which must resolve every layer the same way. */
START_TEST(test_policy_and_calibration) {
    model m;
    make_model(&m);
    tp_error err = {0};
    tp_policy pol;
    tp_policy_default(&pol, TP_PREC_NVFP4);
    ck_assert(tp_policy_parse(&pol, "blocks.0.mlp.*=bf16, blocks.1.attn.qkv=nvfp4", &err) == TP_OK);
    float *amax = malloc(sizeof(float) * (size_t)m.g.n_values);
    ck_assert(amax != NULL);
    int n_cal = 0;
    for (int v = 0; v < m.g.n_values; v++) {
        int skip = m.g.values[v].kind == TP_VAL_PARAM || v % 5 == 3;
        amax[v] = skip ? NAN : 0.37f * (float)(v + 1) + 1e-7f;
        n_cal += !skip;
    }
    const char *path = tpath("pol.tpe");
    tp_plan plan;
    write_engine(&m, TP_PREC_NVFP4, &pol, amax, path, &plan);
    tp_engine_file f;
    ck_assert_msg(tp_engine_file_read(path, &f, &err) == TP_OK, "%s", err.msg);
    check_policy_equal(&f.policy, &pol);
    ck_assert_int_eq(f.policy.rules[0].builtin, 1);
    ck_assert_int_eq(f.policy.rules[2].builtin, 1); /* the defaults: patch_embed.proj, head, lm_head */
    ck_assert_int_eq(f.policy.rules[3].builtin, 0);
    ck_assert_int_eq(f.n_calib, n_cal);
    float *back = malloc(sizeof(float) * (size_t)m.g.n_values);
    ck_assert(back != NULL);
    ck_assert_int_eq(tp_engine_file_calibration(&f, &m.g, back), n_cal);
    for (int v = 0; v < m.g.n_values; v++) {
        if (isnan(amax[v])) ck_assert(isnan(back[v]));
        else ck_assert_uint_eq(bits(back[v]), bits(amax[v]));
    }
    check_tensors(&m, &plan, &f);
    ck_assert_int_eq(tp_engine_file_find(&f, "blocks.0.mlp.fc1.weight")->qf, TP_QF_NONE);
    ck_assert_int_eq(tp_engine_file_find(&f, "blocks.0.mlp.fc1.weight")->dtype, TP_BF16);
    ck_assert_int_eq(tp_engine_file_find(&f, "blocks.1.mlp.fc1.weight")->qf, TP_QF_NVFP4);
    ck_assert_int_eq(tp_engine_file_find(&f, "head.weight")->qf, TP_QF_NONE);
    ck_assert_ptr_null(tp_engine_file_find(&f, "no.such.tensor"));

    /* The plan rebuilt from the file alone equals the one that wrote it. */
    tp_params dec;
    tp_graph g2;
    tp_plan plan2;
    ck_assert(tp_engine_file_params(&f, &dec, &err) == TP_OK);
    ck_assert(tp_model_build_graph(&f.model, &dec, 2, &g2, &err) == TP_OK);
    ck_assert(tp_plan_build_policy(&g2, &f.policy, f.target_sm, &plan2, &err) == TP_OK);
    ck_assert_int_eq(plan2.n_ops, plan.n_ops);
    for (int i = 0; i < plan.n_ops; i++) ck_assert_str_eq(plan2.op_note[i], plan.op_note[i]);
    for (int v = 0; v < plan.n_values; v++) ck_assert_int_eq(plan2.value_qf[v], plan.value_qf[v]);
    tp_plan_free(&plan2);
    tp_graph_free(&g2);
    tp_params_free(&dec);

    /* The "policy" object is a policy file tp_policy_load_json reads. */
    size_t n;
    unsigned char *b = read_bytes(path, &n);
    uint64_t H, D;
    json_t *root = header_of(b, n, &H, &D);
    const char *pp = tpath("policy.json");
    ck_assert(json_dump_file(json_object_get(root, "policy"), pp, 0) == 0);
    tp_policy loaded;
    ck_assert_msg(tp_policy_load_json(pp, &loaded, &err) == TP_OK, "%s", err.msg);
    for (int i = 0; i < m.g.n_ops; i++)
        ck_assert_int_eq(tp_policy_resolve(&loaded, m.g.ops[i].layer, NULL),
                         tp_policy_resolve(&pol, m.g.ops[i].layer, NULL));
    json_decref(root);
    free(b);

    tp_engine_file_free(&f);
    tp_plan_free(&plan);
    free(amax);
    free(back);
    free_model(&m);
}
END_TEST

/* ---- damaged files ------------------------------------------------------------------------------------ */

/* The header as a file before version 4 holds it: no program in "ops" */
static void strip_program(json_t *root) {
    json_t *ops = json_object_get(root, "ops");
    for (size_t i = 0; i < json_array_size(ops); i++) {
        json_object_del(json_array_get(ops, i), "kernel");
        json_object_del(json_array_get(ops, i), "fused_into");
    }
}

/* A good nvfp4 engine file of the test model in memory, and the path it was written to. */
static unsigned char *good_file(const char *name, size_t *n) {
    model m;
    make_model(&m);
    write_engine(&m, TP_PREC_NVFP4, NULL, NULL, tpath(name), NULL);
    free_model(&m);
    return read_bytes(tpath(name), n);
}

START_TEST(test_missing_file) {
    const char *p = tpath("no_such.tpe");
    expect_read_fail(p, TP_ERR_IO, "cannot open", "No such file");
    expect_read_fail(g_dir, TP_ERR_IO, "is a folder; expected a file", NULL);
}
END_TEST

START_TEST(test_magic_version) {
    size_t n;
    unsigned char *b = good_file("good.tpe", &n);
    const char *p = tpath("bad.tpe");
    b[3] ^= 0x20;
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "not a tprof engine file", NULL);
    b[3] ^= 0x20;
    write_bytes(p, "{\"a\": 1}", 8); /* e.g. a JSON file passed by mistake */
    expect_read_fail(p, TP_ERR_FORMAT, "not a tprof engine file", NULL);
    write_bytes(p, "", 0);
    expect_read_fail(p, TP_ERR_FORMAT, "empty file", NULL);

    put_le(b + 8, 7, 4);
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "engine file version 7, this tprof reads versions 1 to 4", NULL);
    put_le(b + 8, 0, 4);
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "engine file version 0", NULL);
    put_le(b + 8, TP_ENGINE_VERSION, 4);
    put_le(b + 12, 5, 4);
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "reserved", NULL);
    put_le(b + 12, 0, 4);

    uint64_t H = le(b + 16, 8);
    put_le(b + 16, (uint64_t)1 << 60, 8);
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "header length", "out of range");
    put_le(b + 16, 1, 8);
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "header length 1", NULL);
    put_le(b + 16, n, 8); /* within the limit, past the end */
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "truncated", "header");
    put_le(b + 16, H - 1, 8); /* the checksum is then read from the last JSON byte on */
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "header checksum mismatch", NULL);
    put_le(b + 16, H, 8);
    write_bytes(p, b, n);
    tp_engine_file f;
    tp_error err = {0};
    ck_assert_msg(tp_engine_file_read(p, &f, &err) == TP_OK, "%s", err.msg);
    tp_engine_file_free(&f);
    free(b);
}
END_TEST

/* The GEMM selection (version 2): written and read back; null; version 1 files (no key) still read; a version 2
 * file without it, with the wrong number of entries or an index out of range is refused; the writer checks it. */
START_TEST(test_gemm_selection) {
    model m;
    make_model(&m);
    tp_plan plan;
    tp_error err = {0};
    ck_assert_msg(tp_plan_build(&m.g, TP_PREC_FP16, 90, &plan, &err) == TP_OK, "%s", err.msg);
    int *algo = malloc(sizeof(int) * (size_t)m.g.n_ops);
    ck_assert_ptr_nonnull(algo);
    int n_gemm = 0;
    for (int i = 0; i < m.g.n_ops; i++) {
        const int gemm = m.g.ops[i].kind == TP_OP_LINEAR;
        algo[i] = gemm ? i % 5 : -1;
        n_gemm += gemm;
    }
    ck_assert_int_gt(n_gemm, 2);
    tp_engine_gemm_sel gs = {"NVIDIA H200", 130100, 64, m.g.n_ops, algo, TP_FP8_ACCUM_PROMOTE};
    const char *p = tpath("gemm.tpe");
    ck_assert_msg(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 90, &m.params, &m.g, &plan, NULL, &gs, &err) ==
                      TP_OK, "%s", err.msg);
    tp_engine_file f;
    ck_assert_msg(tp_engine_file_read(p, &f, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(f.version, TP_ENGINE_VERSION);
    ck_assert_int_eq(f.has_gemm, 1);
    ck_assert_str_eq(f.gemm.gpu, "NVIDIA H200");
    ck_assert_int_eq(f.gemm.cublaslt, 130100);
    ck_assert_int_eq(f.gemm.batch, 64);
    ck_assert_int_eq(f.gemm.n_ops, m.g.n_ops);
    for (int i = 0; i < m.g.n_ops; i++) ck_assert_int_eq(f.gemm.algo[i], algo[i]);
    ck_assert_int_eq(f.gemm.fp8_accum, TP_FP8_ACCUM_PROMOTE);
    tp_engine_file_free(&f);

    /* the writer refuses a selection that does not fit the graph */
    gs.n_ops = m.g.n_ops - 1;
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 90, &m.params, &m.g, &plan, NULL, &gs, &err),
                     TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "GEMM selection"));
    gs.n_ops = m.g.n_ops;
    algo[0] = -2;
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 90, &m.params, &m.g, &plan, NULL, &gs, &err),
                     TP_ERR_ARG);
    algo[0] = -1;
    ck_assert_msg(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 90, &m.params, &m.g, &plan, NULL, &gs, &err) ==
                      TP_OK, "%s", err.msg);

    size_t n;
    unsigned char *b = read_bytes(p, &n);
    const size_t nb = n; /* b's size (n is reused for the version-1 copies below) */
    uint64_t H, D;
    const char *q = tpath("gemm_edit.tpe");
    json_t *root = header_of(b, n, &H, &D);
    json_object_set_new(root, "gemm_selection", json_null()); /* null: none */
    write_with_header(q, b, n, root);
    ck_assert_msg(tp_engine_file_read(q, &f, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(f.has_gemm, 0);
    ck_assert_ptr_null(f.gemm.algo);
    tp_engine_file_free(&f);

    json_object_del(root, "gemm_selection"); /* version 2 without the key */
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "missing key 'gemm_selection'", NULL);
    strip_program(root); /* and as version 1 holds it, without the program */
    write_with_header(q, b, n, root);
    unsigned char *v1 = read_bytes(q, &n); /* the same header as version 1: read, without a selection */
    put_le(v1 + 8, 1, 4);
    write_bytes(q, v1, n);
    ck_assert_msg(tp_engine_file_read(q, &f, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(f.version, 1);
    ck_assert_int_eq(f.has_gemm, 0);
    tp_engine_file_free(&f);
    free(v1);
    json_decref(root);

    root = header_of(b, n, &H, &D); /* version 1 with the key: unknown there */
    json_t *v1root = json_deep_copy(root);
    strip_program(v1root);
    write_with_header(q, b, n, v1root);
    json_decref(v1root);
    v1 = read_bytes(q, &n);
    put_le(v1 + 8, 1, 4);
    write_bytes(q, v1, n);
    expect_read_fail(q, TP_ERR_FORMAT, "unknown key 'gemm_selection'", NULL);
    free(v1);

    json_t *a = json_object_get(json_object_get(root, "gemm_selection"), "algos");
    json_array_append_new(a, json_integer(0)); /* one entry too many */
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "'algos' has", "entries");
    json_array_remove(a, json_array_size(a) - 1);
    json_array_set_new(a, 1, json_integer(-3));
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "algos[1]", "out of range");
    json_array_set_new(a, 1, json_string("3"));
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "algos[1]", "a string");
    json_array_set_new(a, 1, json_integer(1007)); /* above TP_GEMM_CHOICE_SM90_GROUP */
    write_with_header(q, b, nb, root);
    expect_read_fail(q, TP_ERR_FORMAT, "algos[1]", "out of range");
    json_array_set_new(a, 1, json_integer(1002)); /* TP_GEMM_CHOICE_GEMV: read as given */
    json_t *gsel = json_object_get(root, "gemm_selection");
    json_object_del(gsel, "fp8_accum"); /* a file from before the key: unknown accumulation */
    write_with_header(q, b, nb, root);
    ck_assert_msg(tp_engine_file_read(q, &f, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(f.gemm.algo[1], 1002);
    ck_assert_int_eq(f.gemm.fp8_accum, TP_FP8_ACCUM_UNKNOWN);
    tp_engine_file_free(&f);
    for (int c = 1004; c <= 1006; c++) { /* CUTLASS's two tiles, a sibling group's GEMM: read as given */
        json_array_set_new(a, 1, json_integer(c));
        write_with_header(q, b, nb, root);
        ck_assert_msg(tp_engine_file_read(q, &f, &err) == TP_OK, "%s", err.msg);
        ck_assert_int_eq(f.gemm.algo[1], c);
        tp_engine_file_free(&f);
    }
    json_array_set_new(a, 1, json_integer(1002));
    json_object_set_new(gsel, "fp8_accum", json_string("fast"));
    write_with_header(q, b, nb, root);
    ck_assert_msg(tp_engine_file_read(q, &f, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(f.gemm.fp8_accum, TP_FP8_ACCUM_FAST);
    tp_engine_file_free(&f);
    json_object_set_new(gsel, "fp8_accum", json_string("slow"));
    write_with_header(q, b, nb, root);
    expect_read_fail(q, TP_ERR_FORMAT, "'fp8_accum' is 'slow'", NULL);
    json_object_set_new(gsel, "fp8_accum", json_integer(1));
    write_with_header(q, b, nb, root);
    expect_read_fail(q, TP_ERR_FORMAT, "'fp8_accum' is an integer", NULL);
    json_object_set_new(gsel, "fp8_accum", json_string("fast"));
    json_array_set_new(a, 1, json_integer(-1));
    json_object_set_new(json_object_get(root, "gemm_selection"), "batch", json_integer(0));
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "batch", NULL);
    json_decref(root);
    free(b);
    free(algo);
    tp_plan_free(&plan);
    free_model(&m);
}
END_TEST

START_TEST(test_truncated) {
    size_t n;
    unsigned char *b = good_file("good.tpe", &n);
    uint64_t H, D;
    json_t *root = header_of(b, n, &H, &D);
    const char *p = tpath("cut.tpe");
    struct {
        size_t at;
        const char *sub1, *sub2;
    } cuts[] = {
        {5, "truncated", "prefix"},
        {20, "truncated", "prefix"},
        {24, "truncated", "header"},
        {24 + (size_t)H / 2, "truncated", "header and its checksum end at byte"},
        {24 + (size_t)H + 2, "truncated", "header"},
        {(size_t)D, "truncated: tensor 'cls_token'", "file has"},
        {(size_t)D + 10, "truncated: tensor 'cls_token'", "ends at byte"},
        {n / 2, "truncated: tensor", "ends at byte"},
        {n - 1, "truncated: tensor 'head.bias'", NULL},
    };
    if (24 + H + 4 < D) { /* a cut inside the padding before the data section */
        write_bytes(p, b, (size_t)D - 1);
        expect_read_fail(p, TP_ERR_FORMAT, "truncated", "data section starts");
    }
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_bytes(p, b, cuts[i].at);
        expect_read_fail(p, TP_ERR_FORMAT, cuts[i].sub1, cuts[i].sub2);
    }
    /* the byte counts in the message: the last tensor ends at byte n, the file has n - 1 */
    char want[96];
    snprintf(want, sizeof want, "ends at byte %zu, file has %zu bytes", n, n - 1);
    write_bytes(p, b, n - 1);
    expect_read_fail(p, TP_ERR_FORMAT, want, NULL);
    /* appended bytes are damage too */
    unsigned char *longer = calloc(n + 64, 1);
    ck_assert(longer != NULL);
    memcpy(longer, b, n);
    write_bytes(p, longer, n + 3);
    expect_read_fail(p, TP_ERR_FORMAT, "3 unexpected bytes after the last tensor", NULL);
    free(longer);
    json_decref(root);
    free(b);
}
END_TEST

START_TEST(test_corrupted) {
    size_t n;
    unsigned char *b = good_file("good.tpe", &n);
    uint64_t H, D;
    json_t *root = header_of(b, n, &H, &D);
    const char *p = tpath("flip.tpe");
    /* a byte of the JSON: the header checksum */
    for (uint64_t at = 24; at < 24 + H; at += H / 7) {
        b[at] ^= 0x01;
        write_bytes(p, b, n);
        expect_read_fail(p, TP_ERR_FORMAT, "header checksum mismatch (file corrupted)", NULL);
        b[at] ^= 0x01;
    }
    /* the checksum itself */
    b[24 + H + 3] ^= 0x80;
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "header checksum mismatch", NULL);
    b[24 + H + 3] ^= 0x80;
    /* a byte of a tensor's elements, and of its scales: named */
    json_t *t = tensor_entry(root, "blocks.1.mlp.fc1.weight");
    uint64_t off = (uint64_t)json_integer_value(json_object_get(t, "offset"));
    uint64_t soff = (uint64_t)json_integer_value(json_object_get(t, "scales_offset"));
    b[D + off + 100] ^= 0x10;
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "tensor 'blocks.1.mlp.fc1.weight': checksum mismatch (file corrupted)", NULL);
    b[D + off + 100] ^= 0x10;
    b[D + soff + 7] ^= 0x01;
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "tensor 'blocks.1.mlp.fc1.weight': scales checksum mismatch", NULL);
    b[D + soff + 7] ^= 0x01;
    /* a plain tensor */
    t = tensor_entry(root, "blocks.0.norm2.bias");
    off = (uint64_t)json_integer_value(json_object_get(t, "offset"));
    b[D + off] ^= 0xFF;
    write_bytes(p, b, n);
    expect_read_fail(p, TP_ERR_FORMAT, "tensor 'blocks.0.norm2.bias': checksum mismatch", NULL);
    b[D + off] ^= 0xFF;
    write_bytes(p, b, n);
    tp_engine_file f;
    tp_error err = {0};
    ck_assert_msg(tp_engine_file_read(p, &f, &err) == TP_OK, "%s", err.msg);
    tp_engine_file_free(&f);
    json_decref(root);
    free(b);
}
END_TEST

/* Schema errors behind a valid header checksum: each edit of the JSON is rejected naming the field. */
typedef void (*edit_fn)(json_t *root);

static void e_no_weight_bytes(json_t *r) { json_object_del(r, "weight_bytes"); }
static void e_depth_string(json_t *r) { json_object_set_new(json_object_get(r, "model"), "depth", json_string("2")); }
static void e_patch(json_t *r) { json_object_set_new(json_object_get(r, "model"), "patch_size", json_integer(15)); }
static void e_depth_huge(json_t *r) {
    json_object_set_new(json_object_get(r, "model"), "depth", json_integer(2000000000));
}
static void e_storage(json_t *r) {
    json_object_set_new(json_array_get(json_object_get(r, "tensors"), 0), "storage", json_string("fp17"));
}
static void e_bytes(json_t *r) {
    json_t *t = tensor_entry(r, "blocks.0.attn.qkv.weight");
    json_object_set_new(t, "bytes", json_integer(json_integer_value(json_object_get(t, "bytes")) + 1));
}
static void e_crc(json_t *r) {
    json_t *t = tensor_entry(r, "pos_embed");
    json_object_set_new(t, "crc32", json_integer(json_integer_value(json_object_get(t, "crc32")) ^ 1));
}
static void e_unknown_key(json_t *r) { json_object_set_new(r, "foo", json_integer(1)); }
static void e_precision(json_t *r) { json_object_set_new(r, "precision", json_string("fp8")); }
static void e_unaligned(json_t *r) {
    json_t *t = tensor_entry(r, "blocks.1.norm1.bias");
    json_object_set_new(t, "offset", json_integer(json_integer_value(json_object_get(t, "offset")) + 2));
}
static void e_overlap(json_t *r) {
    json_t *t = tensor_entry(r, "blocks.1.norm1.bias");
    json_object_set_new(t, "offset", json_integer(0));
}
static void e_past_end(json_t *r) {
    json_t *t = tensor_entry(r, "head.bias");
    json_object_set_new(t, "offset", json_integer(json_integer_value(json_object_get(t, "offset")) + 6400));
}
static void e_drop_tensor(json_t *r) { json_array_remove(json_object_get(r, "tensors"), 5); }
static void e_rename(json_t *r) {
    json_object_set_new(tensor_entry(r, "blocks.0.norm1.weight"), "name", json_string("blocks.0.norm9.weight"));
}
static void e_dup(json_t *r) {
    json_object_set_new(tensor_entry(r, "blocks.0.norm1.weight"), "name", json_string("blocks.0.norm1.bias"));
}
static void e_shape(json_t *r) {
    json_t *t = tensor_entry(r, "blocks.0.mlp.fc2.bias");
    json_array_set_new(json_object_get(t, "shape"), 0, json_integer(193));
}
static void e_weight_bytes(json_t *r) {
    json_object_set_new(r, "weight_bytes", json_integer(json_integer_value(json_object_get(r, "weight_bytes")) + 64));
}
static void e_global_scale(json_t *r) {
    json_object_set_new(tensor_entry(r, "blocks.0.mlp.fc1.weight"), "global_scale", json_real(-1.0));
}
static void e_calib(json_t *r) { json_object_set_new(json_object_get(r, "calibration"), "tokens", json_real(-2.0)); }
static void e_policy(json_t *r) {
    json_t *ov = json_object_get(json_object_get(r, "policy"), "overrides");
    json_object_set_new(json_array_get(ov, 0), "precision", json_string("fp17"));
}
static void e_op(json_t *r) {
    json_object_set_new(json_array_get(json_object_get(r, "ops"), 3), "op", json_string("conv3d"));
}
static void e_not_object(json_t *r) { json_object_set_new(r, "model", json_array()); }
static void e_name_newline(json_t *r) {
    json_object_set_new(tensor_entry(r, "head.bias"), "storage", json_string("bad\nstorage"));
}

/* Version 3 names the model's family; versions 1 and 2 hold a ViT without it (and without the preprocessing's
 * interpolation and crop mode: bicubic, center). */
START_TEST(test_model_family) {
    size_t n;
    unsigned char *b = good_file("family.tpe", &n);
    uint64_t H, D;
    const char *q = tpath("family_edit.tpe");
    json_t *root = header_of(b, n, &H, &D);
    json_t *model = json_object_get(root, "model");
    ck_assert_str_eq(json_string_value(json_object_get(model, "family")), "vit");
    json_object_set_new(model, "family", json_string("llama"));
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "model: unknown family 'llama'", NULL);
    json_object_del(model, "family");
    json_object_del(json_object_get(model, "preprocess"), "interpolation");
    json_object_del(json_object_get(model, "preprocess"), "crop_mode");
    strip_program(root);
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "model: 'family' is missing", NULL);
    size_t n2;
    unsigned char *v2 = read_bytes(q, &n2);
    put_le(v2 + 8, 2, 4); /* the same header as version 2: a ViT */
    write_bytes(q, v2, n2);
    tp_engine_file f;
    tp_error err = {0};
    ck_assert_msg(tp_engine_file_read(q, &f, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(f.version, 2);
    ck_assert_ptr_eq(f.model.family, &tp_vit_family);
    ck_assert_int_eq(tp_vit_cfg(&f.model)->pre.interpolation, TP_INTERP_BICUBIC);
    ck_assert_int_eq(tp_vit_cfg(&f.model)->pre.crop_mode, TP_CROP_CENTER);
    tp_engine_file_free(&f);
    free(v2);
    json_decref(root);
    free(b);
}
END_TEST

/* Version 4 records the program (each op's kernel and the call it is fused into); version 3 files have none and
 * still read; a program that differs from the run's is found and named; an unknown kernel or a missing key is
 * refused. */
START_TEST(test_program) {
    size_t n;
    model m;
    make_model(&m);
    write_engine(&m, TP_PREC_FP16, NULL, NULL, tpath("program.tpe"), NULL);
    free_model(&m);
    unsigned char *b = read_bytes(tpath("program.tpe"), &n);
    uint64_t H, D;
    const char *q = tpath("program_edit.tpe");
    json_t *root = header_of(b, n, &H, &D);
    json_t *ops = json_object_get(root, "ops");
    int fused = 0;
    for (size_t i = 0; i < json_array_size(ops); i++) fused += !json_is_null(json_object_get(json_array_get(ops, i), "fused_into"));
    ck_assert_int_gt(fused, 0); /* the sm_90 plan fuses the residual adds */
    json_t *op0 = json_array_get(ops, 0);
    json_object_set_new(op0, "kernel", json_string("warp_drive"));
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "ops[0]: unknown kernel 'warp_drive'", NULL);
    json_object_set_new(op0, "kernel", json_string("gemm"));
    json_object_set_new(op0, "fused_into", json_integer(3));
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "ops[0]: 'fused_into' is an integer, expected a layer name or null", NULL);
    /* another program than the run's: found, the first op named */
    json_object_set_new(op0, "fused_into", json_null());
    write_with_header(q, b, n, root);
    tp_engine_file f;
    tp_error err = {0};
    ck_assert_msg(tp_engine_file_read(q, &f, &err) == TP_OK, "%s", err.msg);
    tp_params p = {0};
    tp_graph g;
    tp_plan plan;
    ck_assert_msg(tp_engine_file_params(&f, &p, &err) == TP_OK, "%s", err.msg);
    ck_assert_msg(tp_model_build_graph(&f.model, &p, 2, &g, &err) == TP_OK, "%s", err.msg);
    ck_assert_msg(tp_plan_build_policy(&g, &f.policy, f.target_sm, &plan, &err) == TP_OK, "%s", err.msg);
    char why[512];
    const int d = tp_engine_file_program_diff(&f, &g, &plan, why, sizeof why);
    if (plan.prog.calls[0].kind == TP_CALL_GEMM) ck_assert_int_eq(d, 0);
    else ck_assert_msg(d == 1 && strstr(why, g.ops[0].layer) && strstr(why, "the file's gemm"), "%d: %s", d, why);
    tp_plan_free(&plan);
    tp_engine_file_free(&f);
    ck_assert_msg(tp_engine_file_read(tpath("program.tpe"), &f, &err) == TP_OK, "%s", err.msg); /* as written */
    ck_assert_msg(tp_plan_build_policy(&g, &f.policy, f.target_sm, &plan, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(tp_engine_file_program_diff(&f, &g, &plan, why, sizeof why), 0);
    tp_plan_free(&plan);
    tp_policy nf = f.policy;
    nf.no_fusion = 1; /* --fusion off: the first fused op differs */
    ck_assert_msg(tp_plan_build_policy(&g, &nf, f.target_sm, &plan, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(tp_engine_file_program_diff(&f, &g, &plan, why, sizeof why), 1);
    ck_assert_msg(strstr(why, "calls in the file's program") != NULL, "%s", why);
    tp_plan_free(&plan);
    tp_graph_free(&g);
    tp_params_free(&p);
    tp_engine_file_free(&f);
    /* version 4 without the keys: refused; version 3 without them: read, no program */
    strip_program(root);
    write_with_header(q, b, n, root);
    expect_read_fail(q, TP_ERR_FORMAT, "ops[0]: 'kernel' is missing", NULL);
    size_t n3;
    unsigned char *v3 = read_bytes(q, &n3);
    put_le(v3 + 8, 3, 4);
    write_bytes(q, v3, n3);
    ck_assert_msg(tp_engine_file_read(q, &f, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(f.version, 3);
    ck_assert_int_eq(f.has_program, 0);
    ck_assert_int_eq(f.ops[0].kernel, TP_CALL_NONE);
    tp_engine_file_free(&f);
    free(v3);
    json_decref(root);
    free(b);
}
END_TEST

START_TEST(test_schema) {
    size_t n;
    unsigned char *b = good_file("good.tpe", &n);
    uint64_t H, D;
    json_t *root = header_of(b, n, &H, &D);
    json_decref(root);
    const char *p = tpath("edited.tpe");
    struct {
        edit_fn f;
        const char *sub1, *sub2;
    } cases[] = {
        {e_no_weight_bytes, "header: 'weight_bytes' is missing", NULL},
        {e_depth_string, "model: 'depth' is a string, expected an integer", NULL},
        {e_patch, "model: ", "--patch-size 15"},
        {e_depth_huge, "model: 'depth' is 2000000000", NULL},
        {e_storage, "tensor 'cls_token': unknown storage 'fp17'", NULL},
        {e_bytes, "tensor 'blocks.0.attn.qkv.weight': 'bytes' is", NULL},
        {e_crc, "tensor 'pos_embed': checksum mismatch (file corrupted)", NULL},
        {e_unknown_key, "header: unknown key 'foo'", NULL},
        {e_precision, "'precision' is fp8 but the policy's default is nvfp4", NULL},
        {e_unaligned, "tensor 'blocks.1.norm1.bias'", "not a multiple of 64"},
        {e_overlap, "tensor 'blocks.1.norm1.bias'", "overlaps"},
        {e_past_end, "truncated: tensor 'head.bias'", NULL},
        {e_drop_tensor, "of the model is missing", NULL},
        {e_rename, "tensor 'blocks.0.norm1.weight' of the model is missing", NULL},
        {e_dup, "tensor 'blocks.0.norm1.bias' appears twice", NULL},
        {e_shape, "tensor 'blocks.0.mlp.fc2.bias': shape differs", NULL},
        {e_weight_bytes, "'weight_bytes' is", NULL},
        {e_global_scale, "tensor 'blocks.0.mlp.fc1.weight': 'global_scale' is -1", NULL},
        {e_calib, "calibration: 'tokens'", NULL},
        {e_policy, "policy.overrides[0]: 'precision'", "fp17"},
        {e_op, "ops[3]: unknown op kind 'conv3d'", NULL},
        {e_not_object, "header: 'model' is an array, expected an object", NULL},
        {e_name_newline, "unknown storage 'bad?storage'", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        root = header_of(b, n, &H, &D);
        cases[i].f(root);
        write_with_header(p, b, n, root);
        json_decref(root);
        expect_read_fail(p, TP_ERR_FORMAT, cases[i].sub1, cases[i].sub2);
    }
    /* and the unedited header, rewritten the same way, reads */
    root = header_of(b, n, &H, &D);
    write_with_header(p, b, n, root);
    json_decref(root);
    tp_engine_file f;
    tp_error err = {0};
    ck_assert_msg(tp_engine_file_read(p, &f, &err) == TP_OK, "%s", err.msg);
    tp_engine_file_free(&f);
    /* invalid JSON behind a valid checksum */
    unsigned char *c = malloc(n);
    ck_assert(c != NULL);
    memcpy(c, b, n);
    c[24] = '[';
    put_le(c + 24 + H, tp_crc32(0, c + 24, (size_t)H), 4);
    write_bytes(p, c, n);
    expect_read_fail(p, TP_ERR_FORMAT, "header: invalid JSON at line", NULL);
    free(c);
    free(b);
}
END_TEST

/* ---- writer errors ------------------------------------------------------------------------------------ */

static int count_temp_files(void) {
    DIR *d = opendir(g_dir);
    ck_assert(d != NULL);
    struct dirent *e;
    int k = 0;
    while ((e = readdir(d)) != NULL) k += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return k;
}

START_TEST(test_write_errors) {
    model m;
    make_model(&m);
    tp_error err = {0};
    tp_plan plan;
    ck_assert(tp_plan_build(&m.g, TP_PREC_FP16, 90, &plan, &err) == TP_OK);
    const char *p = tpath("w.tpe");
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP8, NULL, 90, &m.params, &m.g, &plan, NULL, NULL, &err),
                     TP_ERR_ARG);
    check_msg_form(&err, p);
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 100, &m.params, &m.g, &plan, NULL, NULL, &err),
                     TP_ERR_ARG);
    tp_policy pol;
    tp_policy_default(&pol, TP_PREC_BF16);
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP16, &pol, 90, &m.params, &m.g, &plan, NULL, NULL, &err),
                     TP_ERR_ARG);
    float *amax = calloc((size_t)m.g.n_values, sizeof(float));
    ck_assert(amax != NULL);
    amax[m.g.output] = -1.0f;
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 90, &m.params, &m.g, &plan, amax, NULL, &err),
                     TP_ERR_ARG);
    ck_assert_msg(strstr(err.msg, "calibration") != NULL, "%s", err.msg);
    amax[m.g.output] = INFINITY;
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 90, &m.params, &m.g, &plan, amax, NULL, &err),
                     TP_ERR_ARG);
    ck_assert(access(p, F_OK) != 0); /* nothing written */

    /* a parameter the graph lacks */
    tp_params fewer = m.params;
    fewer.n_params--;
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 90, &fewer, &m.g, &plan, NULL, NULL, &err),
                     TP_ERR_SHAPE);
    check_msg_form(&err, p);

    /* an unwritable place: TP_ERR_IO, and no temporary file left anywhere */
    const char *bad = tpath("no_dir/x.tpe");
    ck_assert_int_eq(tp_engine_file_write(bad, &m.model, TP_PREC_FP16, NULL, 90, &m.params, &m.g, &plan, NULL, NULL, &err),
                     TP_ERR_IO);
    check_msg_form(&err, bad);

    /* A good write replaces an existing file; a failed one leaves it as it was. */
    write_bytes(p, "old", 3);
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 90, &m.params, &m.g, &plan, NULL, NULL, &err),
                     TP_OK);
    size_t n1;
    unsigned char *b1 = read_bytes(p, &n1);
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP8, NULL, 90, &m.params, &m.g, &plan, NULL, NULL, &err),
                     TP_ERR_ARG);
    size_t n2;
    unsigned char *b2 = read_bytes(p, &n2);
    ck_assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
    ck_assert_int_eq(count_temp_files(), 0);
    /* the writer is deterministic */
    ck_assert_int_eq(tp_engine_file_write(p, &m.model, TP_PREC_FP16, NULL, 90, &m.params, &m.g, &plan, NULL, NULL, &err),
                     TP_OK);
    free(b2);
    b2 = read_bytes(p, &n2);
    ck_assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
    /* file layout: magic, version, reserved, the data section 64-byte aligned */
    ck_assert(memcmp(b1, "TPRFENG\0", 8) == 0);
    ck_assert_uint_eq(le(b1 + 8, 4), TP_ENGINE_VERSION);
    ck_assert_uint_eq(le(b1 + 12, 4), 0);
    uint64_t H = le(b1 + 16, 8);
    ck_assert_uint_eq(le(b1 + 24 + H, 4), tp_crc32(0, b1 + 24, (size_t)H));
    free(b1);
    free(b2);
    free(amax);
    tp_plan_free(&plan);
    free_model(&m);
}
END_TEST

/* ---- fuzz --------------------------------------------------------------------------------------------- */

START_TEST(test_fuzz) {
    size_t n0;
    unsigned char *orig = good_file("seed.tpe", &n0);
    const uint64_t H = le(orig + 16, 8);
    unsigned char *buf = malloc(n0 + 64);
    ck_assert(buf != NULL);
    const char *p = tpath("fuzz.tpe");
    /* bytes that keep the JSON plausible, so mutations behind a recomputed checksum reach the schema checks */
    static const char alphabet[] = "0123456789-.eE[]{}\",: abfnrstu_";
    tp_rng r;
    tp_rng_seed(&r, 20250101);
    int n_ok = 0, n_fail = 0, n_schema = 0;
    for (int it = 0; it < 500; it++) {
        size_t n = n0;
        memcpy(buf, orig, n0);
        int fix_crc = 0;
        int ops = 1 + (int)(tp_rng_u64(&r) % 3);
        for (int k = 0; k < ops; k++) {
            uint64_t op = tp_rng_u64(&r) % 10, x = tp_rng_u64(&r);
            if (op < 2) { /* flip a bit anywhere */
                buf[x % n] ^= (unsigned char)(1u << (tp_rng_u64(&r) % 8));
            } else if (op < 5) { /* a JSON-ish byte inside the header, checksum fixed */
                buf[24 + x % H] = (unsigned char)alphabet[tp_rng_u64(&r) % (sizeof alphabet - 1)];
                fix_crc = 1;
            } else if (op < 7) { /* a digit changed inside the header, checksum fixed */
                size_t at = 24 + x % H;
                while (at < 24 + H && !(buf[at] >= '0' && buf[at] <= '9')) at++;
                if (at < 24 + H) buf[at] = (unsigned char)('0' + tp_rng_u64(&r) % 10);
                fix_crc = 1;
            } else if (op < 8) { /* trim */
                n = (size_t)(x % (n + 1));
            } else if (op < 9) { /* a random byte of the prefix */
                buf[x % 24] = (unsigned char)tp_rng_u64(&r);
            } else { /* a byte of the data section */
                uint64_t D = (24 + H + 4 + 63) / 64 * 64;
                buf[D + x % (n0 - D)] = (unsigned char)tp_rng_u64(&r);
            }
        }
        if (fix_crc && n >= 24 + H + 4 && le(buf + 16, 8) == H) put_le(buf + 24 + H, tp_crc32(0, buf + 24, H), 4);
        write_bytes(p, buf, n);
        tp_engine_file f;
        tp_error err = {0};
        tp_status s = tp_engine_file_read(p, &f, &err);
        if (s == TP_OK) {
            n_ok++;
            for (int i = 0; i < f.n_tensors; i++) {
                const tp_engine_tensor *t = &f.tensors[i];
                ck_assert(t->qf ? t->q.elems != NULL && t->q.scales != NULL : t->data != NULL);
            }
            tp_params dec;
            ck_assert_msg(tp_engine_file_params(&f, &dec, &err) == TP_OK, "%s", err.msg);
            tp_params_free(&dec);
            tp_engine_file_free(&f);
        } else {
            n_fail++;
            n_schema += fix_crc && strstr(err.msg, "checksum") == NULL;
            ck_assert_msg(s == TP_ERR_FORMAT, "iteration %d: %s: %s", it, tp_status_name(s), err.msg);
            check_msg_form(&err, p);
            ck_assert_ptr_null(f.tensors);
        }
    }
    printf("fuzz: %d mutated files read, %d rejected (%d by the schema behind a valid checksum)\n", n_ok, n_fail,
           n_schema);
    ck_assert_int_gt(n_fail, 400);
    ck_assert_int_gt(n_schema, 50);
    free(buf);
    free(orig);
}
END_TEST

static Suite *engine_file_suite(void) {
    Suite *s = suite_create("engine_file");
    TCase *crc = tcase_create("crc32");
    tcase_add_test(crc, test_crc32);
    suite_add_tcase(s, crc);

    TCase *rt = tcase_create("roundtrip");
    tcase_add_checked_fixture(rt, setup, teardown);
    tcase_set_timeout(rt, 120);
    tcase_add_loop_test(rt, test_roundtrip, 0, 4);
    tcase_add_test(rt, test_sizes);
    tcase_add_test(rt, test_policy_and_calibration);
    suite_add_tcase(s, rt);

    TCase *bad = tcase_create("damaged");
    tcase_add_checked_fixture(bad, setup, teardown);
    tcase_set_timeout(bad, 120);
    tcase_add_test(bad, test_missing_file);
    tcase_add_test(bad, test_magic_version);
    tcase_add_test(bad, test_program);
    tcase_add_test(bad, test_model_family);
    tcase_add_test(bad, test_gemm_selection);
    tcase_add_test(bad, test_truncated);
    tcase_add_test(bad, test_corrupted);
    tcase_add_test(bad, test_schema);
    suite_add_tcase(s, bad);

    TCase *wr = tcase_create("write");
    tcase_add_checked_fixture(wr, setup, teardown);
    tcase_set_timeout(wr, 120);
    tcase_add_test(wr, test_write_errors);
    suite_add_tcase(s, wr);

    TCase *fz = tcase_create("fuzz");
    tcase_add_checked_fixture(fz, setup, teardown);
    tcase_set_timeout(fz, 300); /* 500 files written and read; slow under valgrind */
    tcase_add_test(fz, test_fuzz);
    suite_add_tcase(s, fz);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(engine_file_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
