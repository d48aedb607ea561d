/* test_tensor_parallel.c: tensor parallelism on the CPU (models/model.h tp_model_shard_params, the decoder's rank
 * graphs, exec/cpu/cpu_exec.h tp_cpu_run_tp_session): each rank's shard is the right block of every tensor, the
 * ranks' graphs hold their heads and MLP columns with an all-reduce after o_proj and down_proj, and the ranks run
 * in lockstep compute the whole model's logits (prefill and decode steps over the sharded KV caches), with every
 * bias of the model set (q/k/v, o_proj, the MLP's) so a row-parallel bias added more than once would show. The
 * GPU's tensor-parallel engines are checked against the same in tests/gpu/test_gpu_tensor_parallel.c. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu_exec.h"
#include "models/model.h"

static tp_model model_of(const char *preset) {
    tp_model m;
    tp_error e = {0};
    ck_assert_msg(tp_model_preset(preset, &m, &e) == TP_OK, "%s", e.msg);
    return m;
}

/* llama-tiny (4 heads over 2 KV heads, MLP 176) with every bias on: a checkpoint's config.json sets them */
static tp_model tiny_with_biases(void) {
    tp_model m = model_of("llama-tiny");
    json_t *j = tp_model_to_json(&m);
    ck_assert_ptr_nonnull(j);
    json_object_set_new(j, "qkv_bias", json_true());
    json_object_set_new(j, "o_bias", json_true());
    json_object_set_new(j, "mlp_bias", json_true());
    tp_error e = {0};
    ck_assert_msg(tp_model_from_json(j, NULL, &m, &e) == TP_OK, "%s", e.msg);
    json_decref(j);
    return m;
}

static const tp_param *find(const tp_params *p, const char *name) {
    int i = tp_params_find(p, name);
    return i < 0 ? NULL : &p->params[i];
}

static float *poisoned(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* Each tensor's shard: the rows, the columns or the whole of the full tensor, as Megatron-LM splits them. */
START_TEST(test_shard_params) {
    tp_model m = tiny_with_biases();
    tp_params full = {0}, r1 = {0};
    tp_error e = {0};
    ck_assert_msg(tp_model_params_init(&m, 3, 1, &full, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_model_shard_params(&m, &full, 1, 2, &r1, &e) == TP_OK, "%s", e.msg);
    /* rank 1 of 2: q rows 32..63 (heads 2, 3), k rows 16..31 (KV head 1), gate rows 88..175, o/down columns */
    const tp_param *q = find(&r1, "model.layers.0.self_attn.q_proj.weight"),
                   *qf = find(&full, "model.layers.0.self_attn.q_proj.weight");
    ck_assert_ptr_nonnull(q);
    ck_assert_int_eq(q->shape[0], 32);
    ck_assert_int_eq(q->shape[1], 64);
    ck_assert_float_eq(q->data[0], qf->data[32 * 64]);
    ck_assert_float_eq(q->data[31 * 64 + 63], qf->data[63 * 64 + 63]);
    const tp_param *kb = find(&r1, "model.layers.1.self_attn.k_proj.bias"),
                   *kbf = find(&full, "model.layers.1.self_attn.k_proj.bias");
    ck_assert_int_eq(kb->shape[0], 16);
    ck_assert_float_eq(kb->data[0], kbf->data[16]);
    const tp_param *d = find(&r1, "model.layers.0.mlp.down_proj.weight"),
                   *df = find(&full, "model.layers.0.mlp.down_proj.weight");
    ck_assert_int_eq(d->shape[0], 64);
    ck_assert_int_eq(d->shape[1], 88);
    ck_assert_float_eq(d->data[5 * 88 + 3], df->data[5 * 176 + 88 + 3]);
    const tp_param *o = find(&r1, "model.layers.0.self_attn.o_proj.weight");
    ck_assert_int_eq(o->shape[0], 64);
    ck_assert_int_eq(o->shape[1], 32);
    /* row-parallel biases: rank 0 only; norms and embeddings whole */
    ck_assert_ptr_null(find(&r1, "model.layers.0.self_attn.o_proj.bias"));
    ck_assert_ptr_null(find(&r1, "model.layers.0.mlp.down_proj.bias"));
    const tp_param *emb = find(&r1, "model.embed_tokens.weight"), *embf = find(&full, "model.embed_tokens.weight");
    ck_assert_int_eq(emb->numel, embf->numel);
    ck_assert_int_eq(memcmp(emb->data, embf->data, sizeof(float) * (size_t)emb->numel), 0);
    /* a table of names and shapes shards into one */
    tp_params shapes = {0}, s0 = {0};
    ck_assert_int_eq(tp_model_params_shapes(&m, &shapes, &e), TP_OK);
    ck_assert_int_eq(tp_model_shard_params(&m, &shapes, 0, 2, &s0, &e), TP_OK);
    ck_assert_ptr_null(s0.params[0].data);
    ck_assert_int_eq(s0.n_params, full.n_params);
    tp_params_free(&s0);
    tp_params_free(&shapes);
    tp_params_free(&r1);
    tp_params_free(&full);
}
END_TEST

/* All ranks at once (tp_model_shard_all, parallel over tensors): each rank's table equal to tp_model_shard_params's
 * (names, order, shapes, values), rank 0 with the row-parallel biases and the others without; with release the
 * whole model keeps its names and shapes and loses its values. */
START_TEST(test_shard_all) {
    tp_model m = tiny_with_biases();
    tp_params full = {0}, one[2] = {{0}}, all[3];
    tp_error e = {0};
    ck_assert_msg(tp_model_params_init(&m, 5, 1, &full, &e) == TP_OK, "%s", e.msg);
    for (int r = 0; r < 2; r++) ck_assert_int_eq(tp_model_shard_params(&m, &full, r, 2, &one[r], &e), TP_OK);
    for (int release = 0; release < 2; release++) {
        ck_assert_msg(tp_model_shard_all(&m, &full, 2, release, all, &e) == TP_OK, "%s", e.msg);
        for (int r = 0; r < 2; r++) {
            ck_assert_int_eq(all[r].n_params, one[r].n_params);
            for (int i = 0; i < one[r].n_params; i++) {
                const tp_param *a = &all[r].params[i], *b = &one[r].params[i];
                ck_assert_str_eq(a->name, b->name);
                ck_assert_int_eq(a->numel, b->numel);
                ck_assert_int_eq(memcmp(a->shape, b->shape, sizeof a->shape), 0);
                ck_assert_int_eq(memcmp(a->data, b->data, sizeof(float) * (size_t)a->numel), 0);
            }
        }
        ck_assert_int_lt(all[1].n_params, all[0].n_params); /* o_proj and down_proj biases: rank 0's */
        for (int i = 0; i < full.n_params; i++)
            ck_assert(release ? full.params[i].data == NULL : full.params[i].data != NULL);
        for (int r = 0; r < 2; r++) tp_params_free(&all[r]);
    }
    ck_assert_int_gt((long long)tp_params_count(&full), 0); /* names and shapes stay */
    /* a split the heads do not allow: refused, every rank's table empty */
    ck_assert_int_eq(tp_model_shard_all(&m, &full, 3, 0, all, &e), TP_ERR_UNSUPPORTED);
    ck_assert_int_eq(all[0].n_params, 0);
    for (int r = 0; r < 2; r++) tp_params_free(&one[r]);
    tp_params_free(&full);
}
END_TEST

/* The ranks' graphs: a quarter or half of the heads, an all-reduce after each row-parallel linear, none at TP 1. */
START_TEST(test_rank_graphs) {
    tp_model m = model_of("llama-tiny");
    tp_params full = {0}, r0 = {0};
    tp_error e = {0};
    ck_assert_int_eq(tp_model_params_shapes(&m, &full, &e), TP_OK);
    ck_assert_int_eq(tp_model_shard_params(&m, &full, 0, 2, &r0, &e), TP_OK);
    tp_graph g1, g2;
    const tp_step_shape s1 = {3, 5, 0, 9, 0, 0, 0}, s2 = {3, 5, 0, 9, 0, 0, 2};
    ck_assert_int_eq(tp_model_build_step(&m, &full, &s1, &g1, &e), TP_OK);
    ck_assert_msg(tp_model_build_step(&m, &r0, &s2, &g2, &e) == TP_OK, "%s", e.msg);
    int ar1 = 0, ar2 = 0;
    for (int i = 0; i < g1.n_ops; i++) ar1 += g1.ops[i].kind == TP_OP_ALL_REDUCE;
    for (int i = 0; i < g2.n_ops; i++) {
        const tp_op *op = &g2.ops[i];
        if (op->kind == TP_OP_ALL_REDUCE) {
            ar2++;
            const tp_op *prev = &g2.ops[g2.values[op->in[0]].producer];
            ck_assert_msg(strstr(prev->layer, "o_proj") || strstr(prev->layer, "down_proj"), "%s", prev->layer);
            ck_assert_int_eq(tp_op_category(op->kind), TP_CAT_COMM);
        }
        if (op->kind == TP_OP_KV_ATTENTION) {
            ck_assert_int_eq(op->heads, 2);
            ck_assert_int_eq(op->kv_heads, 1);
        }
    }
    ck_assert_int_eq(ar1, 0);
    ck_assert_int_eq(ar2, 2 * 2); /* two layers */
    ck_assert_int_eq(g2.tp_size, 2);
    ck_assert_int_eq(g2.tp_rank, 0);
    tp_graph_free(&g1);
    tp_graph_free(&g2);
    /* a graph for a rank whose parameters are the whole model's is refused by name (shapes differ) */
    ck_assert_int_ne(tp_model_build_step(&m, &full, &s2, &g2, &e), TP_OK);
    tp_params_free(&r0);
    tp_params_free(&full);
}
END_TEST

/* Sizes that do not split are refused with the sizes named: 4 heads over 3 ranks; 2 KV heads over 4 ranks. */
START_TEST(test_refusals) {
    tp_model m = model_of("llama-tiny");
    tp_error e = {0};
    ck_assert_int_eq(tp_model_tp_check(&m, 1, &e), TP_OK);
    ck_assert_int_eq(tp_model_tp_check(&m, 2, &e), TP_OK);
    ck_assert_int_eq(tp_model_tp_check(&m, 3, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "--tp 3"));
    ck_assert_int_eq(tp_model_tp_check(&m, 4, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "2 KV heads"));
    ck_assert_int_eq(tp_model_tp_check(&m, 0, &e), TP_ERR_ARG);
    tp_model v = model_of("vit-tiny");
    ck_assert_int_eq(tp_model_tp_check(&v, 2, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "no tensor-parallel layout"));
    tp_params full = {0}, out = {0};
    ck_assert_int_eq(tp_model_params_shapes(&m, &full, &e), TP_OK);
    ck_assert_int_eq(tp_model_shard_params(&m, &full, 2, 2, &out, &e), TP_ERR_ARG);
    tp_params_free(&full);
}
END_TEST

/* Prefill and decode steps of TP 2 in lockstep give the whole model's logits (the sum over ranks only reorders
 * additions: fp32 rounding), from sharded KV caches; every bias on. */
START_TEST(test_lockstep_equals_whole) {
    tp_model m = tiny_with_biases();
    tp_params full = {0}, rp[2] = {{0}};
    tp_error e = {0};
    ck_assert_int_eq(tp_model_params_init(&m, 11, 1, &full, &e), TP_OK);
    for (int r = 0; r < 2; r++) ck_assert_int_eq(tp_model_shard_params(&m, &full, r, 2, &rp[r], &e), TP_OK);
    const int Bq = 3, T = 19, S = 4, N = T + S, V = 384;
    float *ids = malloc(sizeof(float) * Bq * T);
    for (int i = 0; i < Bq * T; i++) ids[i] = (float)((i * 7919 + 5) % V);
    tp_cpu_session whole = {0}, ranks[2] = {{0}};
    float *want = poisoned((size_t)Bq * V), *got = poisoned((size_t)Bq * V), tok[3];
    double worst = 0;
    for (int step = 0; step <= S; step++) {
        const int t = step ? 1 : T, past = step ? T + step - 1 : 0;
        tp_graph gw, gr[2];
        const tp_step_shape sw = {Bq, t, past, N, 0, 0, 0};
        ck_assert_int_eq(tp_model_build_step(&m, &full, &sw, &gw, &e), TP_OK);
        for (int r = 0; r < 2; r++) {
            tp_step_shape s = sw;
            s.tp_rank = r;
            s.tp_size = 2;
            ck_assert_msg(tp_model_build_step(&m, &rp[r], &s, &gr[r], &e) == TP_OK, "%s", e.msg);
        }
        const float *in = step ? tok : ids;
        ck_assert_msg(tp_cpu_run_session(&gw, &full, &whole, in, want, &e) == TP_OK, "%s", e.msg);
        const tp_graph *gs[2] = {&gr[0], &gr[1]};
        const tp_params *ps[2] = {&rp[0], &rp[1]};
        for (int k = 0; k < Bq * V; k++) got[k] = NAN;
        ck_assert_msg(tp_cpu_run_tp_session(gs, ps, 2, ranks, in, got, &e) == TP_OK, "%s", e.msg);
        double num = 0, den = 0;
        for (int k = 0; k < Bq * V; k++) {
            ck_assert_msg(isfinite(got[k]), "step %d: logit %d unwritten or non-finite", step, k);
            num += (got[k] - want[k]) * (double)(got[k] - want[k]);
            den += (double)want[k] * want[k];
        }
        worst = fmax(worst, sqrt(num / den));
        /* greedy: the next token from the whole model's logits, fed to both */
        for (int b = 0; b < Bq; b++) {
            int best = 0;
            for (int v = 1; v < V; v++)
                if (want[b * V + v] > want[b * V + best]) best = v;
            tok[b] = (float)best;
        }
        tp_graph_free(&gw);
        for (int r = 0; r < 2; r++) tp_graph_free(&gr[r]);
    }
    ck_assert_msg(worst < 1e-6, "TP 2 logits differ from the whole model's by rel L2 %g", worst);
    ck_assert_int_eq(ranks[0].past, N);
    ck_assert_int_eq(ranks[1].past, N);
    /* the ranks' graphs in the wrong order are refused */
    tp_graph ga, gb;
    const tp_step_shape s0 = {1, 1, 0, 4, 0, 0, 2}, s1 = {1, 1, 0, 4, 0, 1, 2};
    ck_assert_int_eq(tp_model_build_step(&m, &rp[0], &s0, &ga, &e), TP_OK);
    ck_assert_int_eq(tp_model_build_step(&m, &rp[1], &s1, &gb, &e), TP_OK);
    const tp_graph *swapped[2] = {&gb, &ga};
    const tp_params *ps[2] = {&rp[1], &rp[0]};
    tp_cpu_session fresh[2] = {{0}};
    ck_assert_int_eq(tp_cpu_run_tp_session(swapped, ps, 2, fresh, tok, got, &e), TP_ERR_ARG);
    tp_graph_free(&ga);
    tp_graph_free(&gb);
    for (int r = 0; r < 2; r++) {
        tp_cpu_session_free(&ranks[r]);
        tp_params_free(&rp[r]);
    }
    tp_cpu_session_free(&whole);
    tp_params_free(&full);
    free(ids);
    free(want);
    free(got);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tensor_parallel");
    TCase *t = tcase_create("cpu");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_shard_params);
    tcase_add_test(t, test_shard_all);
    tcase_add_test(t, test_rank_graphs);
    tcase_add_test(t, test_refusals);
    tcase_add_test(t, test_lockstep_equals_whole);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
