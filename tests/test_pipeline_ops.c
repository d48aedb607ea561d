/* test_pipeline_ops.c: the CPU references of the pipeline ops (issue 21, graph.h: concat, slice, SiLU, the time
 * embedding, the Euler step, RoPE from per-sample starts, the masked attention of pi0's prefix and expert), each
 * against values written out by hand or against the plain attention it must reduce to, through the CPU executor
 * where the op's graph plumbing matters. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu_exec.h"
#include "exec/cpu/cpu_ops.h"
#include "io/safetensors.h"
#include "formats/dtype.h"
#include "bench/attribution.h"
#include "bench/drift.h"
#include "models/pi0.h"
#include "planner/plan.h"
#include "planner/policy.h"
#define TP_TMPDIR_PREFIX "/tmp/tp_pipeline_test_"
#include "test_tmpdir.h"

static float *filled(size_t n, double a, double b) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) x[i] = (float)sin(a * (double)i + b);
    return x;
}

START_TEST(test_concat_slice_silu_euler) {
    enum { B = 2, Ta = 3, Tb = 2, C = 4 };
    float *a = filled(B * Ta * C, 0.3, 0.1), *b = filled(B * Tb * C, 0.7, 1.0), y[B * (Ta + Tb) * C], s[B * 2 * C];
    tp_cpu_concat_tokens(a, b, y, B, Ta, Tb, C);
    for (int i = 0; i < B; i++)
        for (int t = 0; t < Ta + Tb; t++)
            for (int c = 0; c < C; c++)
                ck_assert_float_eq(y[(i * (Ta + Tb) + t) * C + c],
                                   t < Ta ? a[(i * Ta + t) * C + c] : b[(i * Tb + t - Ta) * C + c]);
    tp_cpu_slice_tokens(y, s, B, Ta + Tb, 3, 2, C); /* the last two tokens: b's */
    ck_assert_int_eq(memcmp(s, b, sizeof s), 0);
    float x[3] = {-2.0f, 0.0f, 3.0f}, z[3];
    tp_cpu_silu(x, z, 3);
    ck_assert_float_eq_tol(z[0], -2.0 / (1.0 + exp(2.0)), 1e-7);
    ck_assert_float_eq(z[1], 0.0f);
    ck_assert_float_eq_tol(z[2], 3.0 / (1.0 + exp(-3.0)), 1e-6);
    float v[3] = {1.0f, 2.0f, -4.0f};
    tp_cpu_euler(x, v, z, 3, -0.25f);
    ck_assert_float_eq(z[0], -2.25f);
    ck_assert_float_eq(z[2], 4.0f);
    free(a);
    free(b);
}
END_TEST

/* openpi's sinusoid at D = 8: f = 0, 1/3, 2/3, 1; periods 4e-3, 4e-2, 0.4, 4 */
START_TEST(test_time_concat) {
    enum { B = 2, T = 3, C = 2, D = 8 };
    float *x = filled(B * T * C, 0.5, 0.0), y[B * T * (C + D)];
    const double t = 0.7f; /* a float32 time, as the Euler loop's */
    tp_cpu_time_concat(x, y, B, T, C, D, t);
    const double period[4] = {4e-3, 4e-2, 0.4, 4.0};
    for (int r = 0; r < B * T; r++) {
        ck_assert_float_eq(y[r * (C + D)], x[r * C]);
        ck_assert_float_eq(y[r * (C + D) + 1], x[r * C + 1]);
        for (int i = 0; i < 4; i++) {
            const double a = t * 2 * 3.14159265358979323846 / period[i];
            ck_assert_float_eq_tol(y[r * (C + D) + C + i], sin(a), 2e-6);
            ck_assert_float_eq_tol(y[r * (C + D) + C + 4 + i], cos(a), 2e-6);
        }
    }
    free(x);
}
END_TEST

/* RoPE from per-sample starts equals RoPE of each sample alone at that position */
START_TEST(test_rope_at) {
    enum { B = 2, T = 3, H = 2, D = 8 };
    float *x = filled(B * T * H * D, 0.11, 0.2), y[B * T * H * D], y1[T * H * D], inv[D / 2];
    for (int i = 0; i < D / 2; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / D);
    const int64_t start[B] = {5, 17};
    tp_cpu_rope_at(x, y, B, T, H, D, inv, 0, start);
    for (int b = 0; b < B; b++) {
        tp_cpu_rope(x + b * T * H * D, y1, 1, T, H, D, inv, start[b]);
        ck_assert_int_eq(memcmp(y + b * T * H * D, y1, sizeof y1), 0);
    }
    free(x);
}
END_TEST

/* The masked attention: with nothing masked it is the plain (non-causal) GQA attention over [kp ; k]; padded keys
 * beyond prefix + valid[b] do not count (changing them changes nothing); the first-block rule leaves the first
 * query its own first key and the padded source. */
START_TEST(test_masked_attention) {
    enum { B = 2, H = 4, Hkv = 2, D = 8, Tq = 3, Tk = 3, Tp = 5 };
    const int W = Hkv * D;
    float *q = filled(B * Tq * H * D, 0.37, 0.0), *k = filled(B * Tk * W, 0.21, 0.5), *v = filled(B * Tk * W, 0.13, 0.9);
    float *kp = filled(B * Tp * W, 0.17, 1.3), *vp = filled(B * Tp * W, 0.29, 2.1);
    float o[B * Tq * H * D], r[B * Tq * H * D];
    float valid[B] = {3, 1}; /* prefix 2: sample 0 sees kp rows 0..4, sample 1 rows 0..2 */
    tp_cpu_masked_attn a = {.q = q, .k = k, .v = v, .kp = kp, .vp = vp, .valid = valid, .o = o, .B = B, .H = H,
                            .Hkv = Hkv, .D = D, .Tq = Tq, .Tk = Tk, .Tp = Tp, .prefix = 2, .first_block = 0,
                            .scale = 0.35f};
    tp_cpu_masked_attention(&a);
    /* the reference: keys [kp rows < 2 + valid[b] ; k] in one buffer, plain attention */
    for (int b = 0; b < B; b++) {
        const int np = 2 + (int)valid[b], nk = np + Tk;
        float *kk = malloc(sizeof(float) * nk * W), *vv = malloc(sizeof(float) * nk * W);
        memcpy(kk, kp + b * Tp * W, sizeof(float) * np * W);
        memcpy(kk + np * W, k + b * Tk * W, sizeof(float) * Tk * W);
        memcpy(vv, vp + b * Tp * W, sizeof(float) * np * W);
        memcpy(vv + np * W, v + b * Tk * W, sizeof(float) * Tk * W);
        tp_cpu_attn_args ra = {.q = q + b * Tq * H * D, .k = kk, .v = vv, .o = r + b * Tq * H * D, .q_bs = 0,
                               .q_rs = H * D, .k_bs = 0, .k_rs = W, .v_bs = 0, .v_rs = W, .o_bs = 0, .o_rs = H * D,
                               .B = 1, .H = H, .Hkv = Hkv, .Tq = Tq, .Tkv = nk, .D = D, .causal = 0, .scale = 0.35f};
        tp_cpu_attention_ex(&ra);
        free(kk);
        free(vv);
    }
    for (int i = 0; i < B * Tq * H * D; i++) ck_assert_float_eq_tol(o[i], r[i], 1e-6);
    /* the padded keys of sample 1 (rows 3, 4) are not read */
    for (int i = 3 * W; i < 5 * W; i++) kp[Tp * W + i] = vp[Tp * W + i] = 1e6f;
    float o2[B * Tq * H * D];
    a.o = o2;
    tp_cpu_masked_attention(&a);
    ck_assert_int_eq(memcmp(o, o2, sizeof o), 0);
    /* first block: query 0 of each sample over [its valid kp rows ; k row 0] only; the other queries unchanged */
    a.first_block = 1;
    tp_cpu_masked_attention(&a);
    for (int b = 0; b < B; b++) {
        const int np = 2 + (int)valid[b];
        float *kk = malloc(sizeof(float) * (np + 1) * W), *vv = malloc(sizeof(float) * (np + 1) * W), r0[H * D];
        memcpy(kk, kp + b * Tp * W, sizeof(float) * np * W);
        memcpy(kk + np * W, k + b * Tk * W, sizeof(float) * W);
        memcpy(vv, vp + b * Tp * W, sizeof(float) * np * W);
        memcpy(vv + np * W, v + b * Tk * W, sizeof(float) * W);
        tp_cpu_attn_args ra = {.q = q + b * Tq * H * D, .k = kk, .v = vv, .o = r0, .q_rs = H * D, .k_rs = W,
                               .v_rs = W, .o_rs = H * D, .B = 1, .H = H, .Hkv = Hkv, .Tq = 1, .Tkv = np + 1, .D = D,
                               .scale = 0.35f};
        tp_cpu_attention_ex(&ra);
        for (int i = 0; i < H * D; i++) ck_assert_float_eq_tol(o2[b * Tq * H * D + i], r0[i], 1e-6);
        for (int i = H * D; i < Tq * H * D; i++) ck_assert_float_eq(o2[b * Tq * H * D + i], o[b * Tq * H * D + i]);
        free(kk);
        free(vv);
    }
    /* one source (pi0's prefix): k itself padded, keys j < prefix + valid[b] */
    a.kp = a.vp = NULL;
    a.Tp = 0;
    a.first_block = 0;
    a.prefix = 0;
    valid[0] = 3;
    valid[1] = 2;
    tp_cpu_masked_attention(&a);
    for (int b = 0; b < B; b++) {
        tp_cpu_attn_args ra = {.q = q + b * Tq * H * D, .k = k + b * Tk * W, .v = v + b * Tk * W, .o = r, .q_rs = H * D,
                               .k_rs = W, .v_rs = W, .o_rs = H * D, .B = 1, .H = H, .Hkv = Hkv, .Tq = Tq,
                               .Tkv = (int64_t)valid[b], .D = D, .scale = 0.35f};
        tp_cpu_attention_ex(&ra);
        for (int i = 0; i < Tq * H * D; i++) ck_assert_float_eq_tol(o2[b * Tq * H * D + i], r[i], 1e-6);
    }
    free(q);
    free(k);
    free(v);
    free(kp);
    free(vp);
}
END_TEST

/* pi0-small on the CPU against bench/pi0_reference.py (PyTorch, fp32): its weights by tprof's names, its inputs
 * packed per sample (pi0.h), its actions; the fixture's second sample ends in 2 padded language tokens. */
START_TEST(test_pi0_small_golden) {
    tp_model m;
    tp_error e = {0};
    ck_assert_msg(tp_model_preset("pi0-small", &m, &e) == TP_OK, "%s", e.msg);
    const tp_pi0_config *c = (const tp_pi0_config *)(const void *)m.cfg.bytes;
    enum { B = 2 };
    tp_params p = {0};
    ck_assert_msg(tp_model_params_load(&m, "tests/fixtures/pi0_small.safetensors", &p, &e) == TP_OK, "%s", e.msg);
    const int64_t S = c->img, nimg = (int64_t)c->cams * 3 * S * S, L = c->lang, Ds = c->state_dim,
                  na = (int64_t)c->horizon * c->action_dim;
    float *img = malloc(sizeof(float) * B * nimg), *ids = malloc(sizeof(float) * B * L), valid[B];
    float *st = malloc(sizeof(float) * B * Ds), *noise = malloc(sizeof(float) * B * na);
    float *want = malloc(sizeof(float) * B * na), *got = malloc(sizeof(float) * B * na);
    /* the fixture holds each stage's output too (read, not checked here: the graph's output is the actions) */
    const int64_t Ni = (int64_t)c->cams * (S / c->patch) * (S / c->patch), P = Ni + L;
    float *vis = malloc(sizeof(float) * B * Ni * c->width), *kl = malloc(sizeof(float) * B * P * c->kv_heads * c->head_dim);
    float *vl = malloc(sizeof(float) * B * P * c->kv_heads * c->head_dim), *v0 = malloc(sizeof(float) * B * na);
    tp_param_spec io[10] = {{"images", 5, {B, c->cams, 3, S, S}, img}, {"ids", 2, {B, L}, ids},
                            {"lang_valid", 1, {B}, valid},           {"state", 2, {B, Ds}, st},
                            {"noise", 3, {B, c->horizon, c->action_dim}, noise},
                            {"actions", 3, {B, c->horizon, c->action_dim}, want},
                            {"vision_out", 3, {B, Ni, c->width}, vis},
                            {"prefix_k_last", 4, {B, P, c->kv_heads, c->head_dim}, kl},
                            {"prefix_v_last", 4, {B, P, c->kv_heads, c->head_dim}, vl},
                            {"velocity_step0", 3, {B, c->horizon, c->action_dim}, v0}};
    ck_assert_msg(tp_st_load_params("tests/fixtures/pi0_small.io.safetensors", io, 10, &e) == TP_OK, "%s", e.msg);
    ck_assert_float_eq(valid[1], (float)(L - 2));
    const int64_t row = tp_model_input_numel(&m);
    ck_assert_int_eq(row, nimg + L + 1 + Ds + na);
    float *in = malloc(sizeof(float) * B * row);
    for (int b = 0; b < B; b++) {
        float *r = in + b * row;
        memcpy(r, img + b * nimg, sizeof(float) * nimg);
        memcpy(r + nimg, ids + b * L, sizeof(float) * L);
        r[nimg + L] = valid[b];
        memcpy(r + nimg + L + 1, st + b * Ds, sizeof(float) * Ds);
        memcpy(r + nimg + L + 1 + Ds, noise + b * na, sizeof(float) * na);
    }
    tp_graph g;
    ck_assert_msg(tp_model_build_graph(&m, &p, B, &g, &e) == TP_OK, "%s", e.msg);
    for (int i = 0; i < B * na; i++) got[i] = NAN; /* poisoned: an unwritten action shows */
    /* the stage outputs the drift per stage compares (bench/drift.h), tapped as the graph runs */
    ck_assert_int_eq(g.n_taps, 1 + 2 * c->depth + c->steps);
    float **taps = tp_taps_alloc(&g);
    ck_assert_ptr_nonnull(taps);
    for (int k = 0; k < g.n_taps; k++)
        for (int64_t i = 0; i < tp_value_numel(&g.values[g.taps[k].value]); i++) taps[k][i] = NAN;
    ck_assert_msg(tp_cpu_run_taps(&g, &p, in, got, taps, &e) == TP_OK, "%s", e.msg);
    char last[40];
    snprintf(last, sizeof last, "expert: x after step %d of %d", c->steps, c->steps);
    const struct { int tap; const float *want; int64_t n; const char *what; } stage[4] = {
        {0, vis, B * Ni * c->width, "vision: image tokens"},
        {2 * c->depth - 1, kl, B * P * c->kv_heads * c->head_dim, "prefix: K, V of every layer"},
        {2 * c->depth, vl, B * P * c->kv_heads * c->head_dim, "prefix: K, V of every layer"},
        {g.n_taps - 1, want, B * na, last}};
    /* K's and V's rows of padded tokens are never read (masked keys) and differ by design: the reference repeats the
     * last valid RoPE position there and lets padded queries attend to nothing (a uniform softmax), tprof does
     * neither: compared over the valid rows, the padded ones set to the reference's */
    const int64_t kvw = (int64_t)c->kv_heads * c->head_dim;
    for (int bb = 0; bb < B; bb++)
        for (int64_t t = Ni + (int64_t)valid[bb]; t < P; t++) {
            memcpy(taps[2 * c->depth - 1] + (bb * P + t) * kvw, kl + (bb * P + t) * kvw, sizeof(float) * kvw);
            memcpy(taps[2 * c->depth] + (bb * P + t) * kvw, vl + (bb * P + t) * kvw, sizeof(float) * kvw);
        }
    ck_assert(valid[1] < L); /* so the fixture has padded rows */
    for (int k = 0; k < 4; k++) { /* each against PyTorch's own value of that stage */
        ck_assert_str_eq(g.taps[stage[k].tap].stage, stage[k].what);
        ck_assert_int_eq(tp_value_numel(&g.values[g.taps[stage[k].tap].value]), stage[k].n);
        tp_accuracy a;
        tp_accuracy_compute(taps[stage[k].tap], stage[k].want, 1, (int)stage[k].n, &a);
        printf("pi0-small tap %d (%s) against the reference's: relative L2 %.3e\n", stage[k].tap, stage[k].what, a.rel_l2);
        ck_assert_msg(a.rel_l2 <= 1e-5, "tap %d: relative L2 %.3e", stage[k].tap, a.rel_l2);
    }
    /* the drift of the taps against themselves is none; one K perturbed moves the prefix's row alone */
    tp_stage_drift dr[TP_MAX_TAPS];
    ck_assert_int_eq(tp_stage_drift_compute(&g, taps, &g, taps, dr), 2 + c->steps);
    for (int k = 0; k < 2 + c->steps; k++) ck_assert(dr[k].acc.rel_l2 == 0.0 && dr[k].acc.cosine == 1.0);
    ck_assert_str_eq(dr[1].stage, "prefix: K, V of every layer");
    ck_assert_int_eq(dr[1].n_values, 2 * c->depth);
    float **pert = tp_taps_alloc(&g);
    ck_assert_ptr_nonnull(pert);
    for (int k = 0; k < g.n_taps; k++)
        memcpy(pert[k], taps[k], sizeof(float) * (size_t)tp_value_numel(&g.values[g.taps[k].value]));
    pert[1][5] += 0.5f;
    ck_assert_int_eq(tp_stage_drift_compute(&g, pert, &g, taps, dr), 2 + c->steps);
    ck_assert(dr[0].acc.rel_l2 == 0.0 && dr[1].acc.rel_l2 > 0.0 && dr[2].acc.rel_l2 == 0.0);
    /* a reference of one sample: the engine's first sample compared */
    tp_graph g1;
    ck_assert_msg(tp_model_build_graph(&m, &p, 1, &g1, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(tp_stage_drift_compute(&g, taps, &g1, taps, dr), 2 + c->steps);
    ck_assert(dr[0].acc.rel_l2 == 0.0 && dr[0].numel == (double)(Ni * c->width));
    ck_assert_int_eq(tp_stage_drift_compute(&g1, taps, &g, taps, dr), -1); /* the reference holds more samples */
    tp_graph_free(&g1);
    tp_taps_free(&g, pert);
    tp_taps_free(&g, taps);
    free(vis), free(kl), free(vl), free(v0);
    double d = 0, n = 0;
    for (int i = 0; i < B * na; i++) {
        ck_assert_msg(isfinite(got[i]), "action %d not written", i);
        d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        n += (double)want[i] * want[i];
    }
    printf("pi0-small against bench/pi0_reference.py: actions relative L2 %.3e (%d x %d x %d)\n", sqrt(d / n), B,
           c->horizon, c->action_dim);
    ck_assert_msg(sqrt(d / n) <= 1e-5, "pi0-small: actions relative L2 %.3e against the PyTorch reference", sqrt(d / n));
    tp_graph_free(&g);
    tp_params_free(&p);
    free(img), free(ids), free(st), free(noise), free(want), free(got), free(in);
}
END_TEST

/* openpi's name of a pi0 parameter, written out here from openpi's PI0Pytorch state_dict (tools/check_pi0_openpi.py
 * checked the same map against the module itself): the test's own statement of the map, not the loader's code */
static void openpi_of(const char *name, char *buf, size_t n, int *qkv) { /* n >= 256 */
    const char *pe = "paligemma_with_expert.", *vt = "paligemma_with_expert.paligemma.model.vision_tower.vision_model.";
    int i;
    char rest[128];
    *qkv = 0;
    if (!strcmp(name, "vision.patch_embed.proj.weight")) snprintf(buf, n, "%sembeddings.patch_embedding.weight", vt);
    else if (!strcmp(name, "vision.patch_embed.proj.bias")) snprintf(buf, n, "%sembeddings.patch_embedding.bias", vt);
    else if (!strcmp(name, "vision.pos_embed")) snprintf(buf, n, "%sembeddings.position_embedding.weight", vt);
    else if (!strncmp(name, "vision.norm.", 12)) snprintf(buf, n, "%spost_layernorm.%s", vt, name + 12);
    else if (!strncmp(name, "vision.head.", 12))
        snprintf(buf, n, "%spaligemma.model.multi_modal_projector.linear.%s", pe, name + 12);
    else if (sscanf(name, "vision.blocks.%d.%127s", &i, rest) == 2) {
        const char *to = !strncmp(rest, "norm1.", 6) ? "layer_norm1." : !strncmp(rest, "norm2.", 6) ? "layer_norm2."
                         : !strncmp(rest, "attn.proj.", 10) ? "self_attn.out_proj." : !strncmp(rest, "attn.qkv.", 9) ? "self_attn.%s_proj."
                                                                                                                       : "mlp.";
        const char *tail = strrchr(rest, '.') + 1;
        if (!strncmp(rest, "mlp.", 4)) snprintf(buf, n, "%sencoder.layers.%d.%s", vt, i, rest);
        else {
            snprintf(buf, n, "%sencoder.layers.%d.%s%s", vt, i, to, tail);
            *qkv = !strncmp(rest, "attn.qkv.", 9);
        }
    } else if (!strncmp(name, "prefix.model.", 13))
        snprintf(buf, n, "%spaligemma.model.language_model.%s", pe, name + 13);
    else if (!strncmp(name, "expert.model.", 13)) snprintf(buf, n, "%sgemma_expert.model.%s", pe, name + 13);
    else snprintf(buf, n, "%s", name + 7); /* expert.state_proj... -> state_proj... */
}

/* The attribution table: each step's saving and share of the whole (bench/attribution.h), pi0's H100 numbers */
START_TEST(test_attribution_table) {
    const tp_attr_step s[4] = {{"start", TP_PREC_BF16, 2, 1, 24.6452},
                               {"precision", TP_PREC_FP8, 2, 1, 23.1907},
                               {"graph", TP_PREC_FP8, 1, 1, 22.9556},
                               {"fusion", TP_PREC_FP8, 1, 0, 22.1919}};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tp_attribution_print(s, 4, f);
    fclose(f);
    ck_assert_msg(strstr(buf, "| precision | fp8, modular, fusion off | 23.1907 | 43.1 | 1.4545 | 59.3 % |") &&
                  strstr(buf, "| graph | fp8, graph, fusion off | 22.9556 | 43.6 | 0.2351 | 9.6 % |") &&
                  strstr(buf, "| fusion | fp8, graph, fusion on | 22.1919 | 45.1 | 0.7637 | 31.1 % |") &&
                  strstr(buf, "total saved 2.4533 ms"), "%s", buf);
    free(buf);
    json_t *j = tp_attribution_json(s, 4);
    ck_assert(fabs(json_real_value(json_object_get(j, "total_saved_ms")) - 2.4533) < 1e-9);
    json_t *st = json_array_get(json_object_get(j, "steps"), 3);
    ck_assert(fabs(json_real_value(json_object_get(st, "share")) - 0.7637 / 2.4533) < 1e-9);
    ck_assert(json_is_null(json_object_get(json_array_get(json_object_get(j, "steps"), 0), "share")));
    json_decref(j);
}
END_TEST

/* pi0-small planned for an sm_90 GPU in fp16: every op has a kernel; the inputs and the Euler state stay fp32,
 * the RESHAPEs a linear reads convert them into fp16, the camera reshape before the patch embedding keeps fp32. */
START_TEST(test_pi0_gpu_plan) {
    tp_model m;
    tp_error e = {0};
    tp_params p = {0};
    tp_graph g;
    tp_plan pl;
    ck_assert_int_eq(tp_model_preset("pi0-small", &m, &e), TP_OK);
    ck_assert_int_eq(tp_model_params_init(&m, 3, 0, &p, &e), TP_OK);
    ck_assert_msg(tp_model_build_graph(&m, &p, 3, &g, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_plan_build(&g, TP_PREC_FP16, 90, &pl, &e) == TP_OK, "%s", e.msg);
    int euler = 0, conv = 0, kept = 0;
    for (int i = 0; i < g.n_ops; i++) {
        const tp_op *op = &g.ops[i];
        if (op->kind == TP_OP_EULER) {
            euler++;
            ck_assert_int_eq(pl.value_dt[op->out], TP_F32);
            ck_assert_int_eq(pl.value_dt[op->in[0]], TP_F32);
            ck_assert_int_eq(pl.value_dt[op->in[1]], TP_F16);
        }
        if (op->kind != TP_OP_RESHAPE) continue;
        const int lin = g.values[op->in[0]].kind == TP_VAL_INPUT || pl.value_dt[op->in[0]] == TP_F32;
        if (strstr(op->layer, "x_in") || strstr(op->layer, "state_in")) {
            ck_assert_msg(lin, "%s", op->layer);
            ck_assert_int_eq(pl.value_dt[op->out], TP_F16);
            conv++;
        } else if (strcmp(op->layer, "vision.cameras") == 0) {
            ck_assert_int_eq(pl.value_dt[op->out], TP_F32);
            kept++;
        }
    }
    const int steps = ((const tp_pi0_config *)(const void *)m.cfg.bytes)->steps;
    ck_assert_int_eq(euler, steps);
    ck_assert_int_eq(conv, steps + 1);
    ck_assert_int_eq(kept, 1);
    for (int k = 0; k < g.n_inputs; k++) ck_assert_int_eq(pl.value_dt[g.inputs[k]], TP_F32);
    ck_assert_int_eq(pl.value_dt[g.output], TP_F32);
    int fused = 0;
    for (int i = 0; i < g.n_ops; i++) fused += tp_program_fused_into(&pl.prog, i) >= 0;
    ck_assert_msg(fused > 0, "no residual add or GELU fused into a GEMM's epilogue");
    tp_plan_free(&pl);
    /* --fusion off: every op its own kernel */
    tp_policy pol;
    tp_policy_default(&pol, TP_PREC_FP16);
    pol.no_fusion = 1;
    ck_assert_msg(tp_plan_build_policy(&g, &pol, 90, &pl, &e) == TP_OK, "%s", e.msg);
    for (int i = 0; i < g.n_ops; i++)
        ck_assert_msg(tp_program_fused_into(&pl.prog, i) < 0 && pl.prog.calls[i].n_ops == 1,
                      "%s fused with --fusion off", g.ops[i].layer);
    ck_assert_int_eq(pl.no_fusion, 1);
    tp_plan_free(&pl);
    /* --fp32-protect tensors: RMSNorm and RoPE as FP32 layers, their casts' 16 bytes a value counted, said in "how";
     * every other op as in the default plan */
    tp_plan regs;
    ck_assert_msg(tp_plan_build(&g, TP_PREC_FP16, 90, &regs, &e) == TP_OK, "%s", e.msg);
    tp_policy_default(&pol, TP_PREC_FP16);
    pol.fp32_tensors = 1;
    ck_assert_msg(tp_plan_build_policy(&g, &pol, 90, &pl, &e) == TP_OK, "%s", e.msg);
    int prot = 0;
    for (int i = 0; i < g.n_ops; i++) {
        const int k = g.ops[i].kind == TP_OP_RMSNORM || g.ops[i].kind == TP_OP_ROPE;
        const double extra = tp_program_op_bytes(&pl.prog, &pl, &g, i) - tp_program_op_bytes(&regs.prog, &regs, &g, i);
        ck_assert_msg(extra == (k ? 16.0 * (double)tp_value_numel(&g.values[g.ops[i].out]) : 0.0), "%s: %.0f bytes more",
                      g.ops[i].layer, extra);
        ck_assert_msg(!k == !strstr(pl.op_note[i], "FP32 layer (--fp32-protect tensors)"), "%s: %s", g.ops[i].layer,
                      pl.op_note[i]);
        ck_assert_int_eq(pl.value_dt[g.ops[i].out], regs.value_dt[g.ops[i].out]);
        prot += k;
    }
    ck_assert_int_gt(prot, 0);
    tp_plan_free(&regs);
    tp_plan_free(&pl);
    tp_graph_free(&g);
    tp_params_free(&p);
}
END_TEST

/* pi0's weights saved under openpi's names (SigLIP's separate q, k, v; the position embedding without its batch
 * dimension; bf16 as openpi's convert script saves them) load back to the same tprof parameters; a missing
 * tensor and a stray one are named. */
START_TEST(test_pi0_openpi_names) {
    tp_model m;
    tp_error e = {0};
    ck_assert_int_eq(tp_model_preset("pi0-small", &m, &e), TP_OK);
    tp_params p = {0}, q = {0};
    ck_assert_int_eq(tp_model_params_init(&m, 7, 0, &p, &e), TP_OK);
    tp_st_write_entry *w = calloc((size_t)(3 * p.n_params + 2), sizeof *w);
    char (*names)[256] = calloc((size_t)(3 * p.n_params + 2), sizeof *names);
    uint16_t *bf = malloc(sizeof(uint16_t) * tp_params_count(&p));
    int n = 0;
    size_t off = 0;
    for (int i = 0; i < p.n_params; i++) {
        const tp_param *t = &p.params[i];
        for (int64_t j = 0; j < t->numel; j++) bf[off + j] = tp_f32_to_bf16(t->data[j]);
        char fmt[256];
        int qkv;
        openpi_of(t->name, fmt, sizeof fmt, &qkv);
        for (int k = 0; k < (qkv ? 3 : 1); k++) {
            tp_st_write_entry *x = &w[n];
            if (qkv) snprintf(names[n], sizeof names[n], fmt, k == 0 ? "q" : k == 1 ? "k" : "v");
            else snprintf(names[n], sizeof names[n], "%s", fmt);
            x->name = names[n];
            x->dtype = TP_BF16;
            x->ndim = !strcmp(t->name, "vision.pos_embed") ? 2 : t->ndim; /* openpi: (N, C) */
            for (int d = 0; d < x->ndim; d++) x->shape[d] = t->shape[d + (t->ndim - x->ndim)];
            if (qkv) x->shape[0] /= 3;
            x->data = bf + off + (qkv ? k * (t->numel / 3) : 0);
            n++;
        }
        off += (size_t)t->numel;
    }
    const char *path = tpath("pi0_openpi.safetensors");
    ck_assert_msg(tp_st_write(path, w, n, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_model_params_load(&m, path, &q, &e) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(q.n_params, p.n_params);
    for (int i = 0; i < p.n_params; i++) {
        ck_assert_str_eq(q.params[i].name, p.params[i].name);
        for (int64_t j = 0; j < p.params[i].numel; j++) /* exactly the bf16 rounding of the originals */
            ck_assert_float_eq(q.params[i].data[j], tp_bf16_to_f32(tp_f32_to_bf16(p.params[i].data[j])));
    }
    tp_params_free(&q);
    /* the tensors openpi keeps and pi0 does not read (the LM heads, the language model's final norm) are skipped,
     * and a file holding the tied embedding as the LM head alone loads it from there */
    const int emb = tp_params_find(&p, "prefix.model.embed_tokens.weight");
    ck_assert_int_ge(emb, 0);
    int we = -1;
    for (int i = 0; i < n; i++)
        if (strstr(w[i].name, "language_model.embed_tokens.weight")) we = i;
    ck_assert_int_ge(we, 0);
    tp_st_write_entry extra[3] = {w[we], w[we], w[0]}; /* the unused ones' contents do not matter */
    extra[0].name = "paligemma_with_expert.paligemma.lm_head.weight"; /* the embedding under this name only */
    extra[1].name = "paligemma_with_expert.gemma_expert.lm_head.weight";
    extra[2].name = "paligemma_with_expert.paligemma.model.language_model.norm.weight";
    tp_st_write_entry *w2 = calloc((size_t)n + 3, sizeof *w2);
    int n2 = 0;
    for (int i = 0; i < n; i++)
        if (i != we) w2[n2++] = w[i];
    for (int k = 0; k < 3; k++) w2[n2++] = extra[k];
    ck_assert_int_eq(tp_st_write(path, w2, n2, &e), TP_OK);
    ck_assert_msg(tp_model_params_load(&m, path, &q, &e) == TP_OK, "%s", e.msg);
    for (int64_t j = 0; j < p.params[emb].numel; j++)
        ck_assert_float_eq(q.params[emb].data[j], tp_bf16_to_f32(tp_f32_to_bf16(p.params[emb].data[j])));
    tp_params_free(&q);
    free(w2);
    /* a stray tensor: named */
    w[n] = w[0];
    w[n].name = "paligemma_with_expert.something_else.weight";
    ck_assert_int_eq(tp_st_write(path, w, n + 1, &e), TP_OK);
    ck_assert_int_eq(tp_model_params_load(&m, path, &q, &e), TP_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(e.msg, "something_else"));
    /* a missing one (the last: action_out_proj's bias): named by openpi's name and tprof's */
    ck_assert_int_eq(tp_st_write(path, w, n - 1, &e), TP_OK);
    ck_assert_int_eq(tp_model_params_load(&m, path, &q, &e), TP_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(e.msg, "'action_out_proj.bias'"));
    ck_assert_ptr_nonnull(strstr(e.msg, "expert.action_out_proj.bias"));
    tp_params_free(&p);
    free(w);
    free(names);
    free(bf);
}
END_TEST

Suite *pipeline_ops_suite(void) {
    Suite *s = suite_create("pipeline_ops");
    TCase *t = tcase_create("cpu");
    tcase_add_test(t, test_concat_slice_silu_euler);
    tcase_add_test(t, test_time_concat);
    tcase_add_test(t, test_rope_at);
    tcase_add_test(t, test_masked_attention);
    tcase_add_test(t, test_pi0_small_golden);
    tcase_add_test(t, test_pi0_gpu_plan);
    tcase_add_test(t, test_attribution_table);
    TCase *f = tcase_create("files");
    tcase_add_checked_fixture(f, setup, teardown);
    tcase_add_test(f, test_pi0_openpi_names);
    suite_add_tcase(s, f);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(pipeline_ops_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
