/* test_istream.c: the instruction stream of a persistent kernel (planner/istream.h, docs/persistent.md): the cutting
 * covers every call's output features once, the queues hold every instruction once in global order, and the
 * stream runs to the end under many random interleavings with every read after its producers' writes, checked
 * against the graph itself (a Llama decode step and pi0-small, with the q/k/v and gate/up groups and the GLU epilogue
 * a build chooses, at 1, 3 and 132 SMs, 16 and 7 rows an instruction). A stream with one wait removed must fail the
 * simulation, so the check can fail. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"
#include "planner/istream.h"
#include "planner/plan.h"
#include "planner/policy.h"
#include "planner/program.h"

typedef struct {
    tp_model m;
    tp_params p;
    tp_graph g;
    tp_plan plan;
} fixture;

/* preset's graph (a decode step of 3 sequences at position 20 for a decoder, the pipeline's for pi0-small), its
 * fp16 plan on sm_90, and a build's choices: every linear a GEMV, siblings one group (as test_program.c's). */
static void setup_model(fixture *f, const char *preset, int groups) {
    tp_error e = {0};
    memset(f, 0, sizeof *f);
    ck_assert_msg(tp_model_preset(preset, &f->m, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_model_params_shapes(&f->m, &f->p, &e) == TP_OK, "%s", e.msg);
    if (f->m.family->build_step) {
        const tp_step_shape s = {3, 1, 20, 32, 0, 0, 0};
        ck_assert_msg(tp_model_build_step(&f->m, &f->p, &s, &f->g, &e) == TP_OK, "%s", e.msg);
    } else {
        ck_assert_msg(tp_model_build_graph(&f->m, &f->p, 2, &f->g, &e) == TP_OK, "%s", e.msg);
    }
    tp_policy pol;
    tp_policy_default(&pol, TP_PREC_FP16);
    ck_assert_msg(tp_plan_build_policy(&f->g, &pol, 90, &f->plan, &e) == TP_OK, "%s", e.msg);
    if (!groups) return;
    tp_program *prog = &f->plan.prog;
    int lead = -1;
    for (int i = 0; i < f->g.n_ops; i++) {
        if (f->g.ops[i].kind != TP_OP_LINEAR || prog->calls[i].n_ops != 1) continue;
        prog->calls[i].kind = TP_CALL_GEMV;
        if (lead >= 0 && f->g.ops[lead].in[0] == f->g.ops[i].in[0]) {
            tp_program_merge(prog, lead, i);
            prog->calls[lead].kind = TP_CALL_GEMV_GROUP;
        } else {
            lead = i;
        }
    }
    ck_assert_int_ge(tp_program_fuse_built(prog, &f->g, &f->plan, 90, NULL, 0, NULL, NULL), 0);
}

static void teardown_model(fixture *f) {
    tp_plan_free(&f->plan);
    tp_graph_free(&f->g);
    tp_params_free(&f->p);
}

/* Every op of prog reads only values of its own call or of calls in earlier slots (the global order the queues
 * follow is topological) */
static void check_topological(const tp_program *prog, const tp_graph *g) {
    for (int i = 0; i < g->n_ops; i++)
        for (int j = 0; j < g->ops[i].n_in; j++) {
            const int v = g->ops[i].in[j], p = v >= 0 ? g->values[v].producer : -1;
            if (p >= 0)
                ck_assert_msg(prog->op_call[p] <= prog->op_call[i], "%s (slot %d) reads %s of slot %d",
                              g->ops[i].layer, prog->op_call[i], g->values[v].name, prog->op_call[p]);
        }
}

/* prog's stream on sms SMs (16 rows an instruction, no cuts) runs right under 20 random interleavings; returns its
 * instruction count */
static int simulate_ok(const tp_program *prog, const tp_graph *g, int sms) {
    tp_istream s;
    tp_error e = {0};
    ck_assert_msg(tp_istream_build(prog, g, sms, 16, NULL, &s, &e) == TP_OK, "%s", e.msg);
    for (uint64_t seed = 1; seed <= 20; seed++)
        ck_assert_msg(tp_istream_simulate(&s, prog, g, seed, &e) == TP_OK, "seed %llu: %s", (unsigned long long)seed,
                      e.msg);
    const int n = s.n_instrs;
    tp_istream_free(&s);
    return n;
}

/* Every call's instructions: parts 0 .. n - 1 in order, features tiling [0, width) for a cut call; the queues a
 * permutation of the instructions, each queue increasing. */
static void check_layout(const tp_istream *s, const fixture *f) {
    const tp_program *prog = &f->plan.prog;
    int k = 0, calls = 0;
    for (int h = 0; h < f->g.n_ops; h++) {
        if (!tp_program_is_head(prog, h) || prog->calls[h].n_ops == 0) continue;
        calls++;
        ck_assert_int_lt(k, s->n_instrs);
        const int n = s->instrs[k].n_parts;
        int64_t f_end = 0;
        for (int p = 0; p < n; p++, k++) {
            ck_assert_int_eq(s->instrs[k].call, h);
            ck_assert_int_eq(s->instrs[k].part, p);
            ck_assert_int_eq(s->instrs[k].f0, f_end);
            ck_assert(s->instrs[k].f1 >= s->instrs[k].f0 && s->instrs[k].f1 - s->instrs[k].f0 <= s->rows);
            f_end = s->instrs[k].f1;
        }
        if (f->g.ops[h].kind == TP_OP_LINEAR) ck_assert_int_ge(f_end, f->g.ops[h].gemm_n);
    }
    ck_assert_int_eq(k, s->n_instrs);
    ck_assert_int_eq(calls, tp_program_n_calls(prog));
    char *seen = calloc((size_t)s->n_instrs, 1);
    ck_assert_ptr_nonnull(seen);
    ck_assert_int_eq(s->queue_start[s->n_sms], s->n_instrs);
    for (int sm = 0; sm < s->n_sms; sm++)
        for (int q = s->queue_start[sm]; q < s->queue_start[sm + 1]; q++) {
            const int i = s->queue[q];
            ck_assert(i >= 0 && i < s->n_instrs && !seen[i]);
            seen[i] = 1;
            if (q > s->queue_start[sm]) ck_assert_int_gt(i, s->queue[q - 1]);
        }
    free(seen);
}

static const char *const PRESETS[] = {"llama-tiny", "pi0-small"};

START_TEST(test_stream_runs) {
    const char *preset = PRESETS[_i / 2];
    const int groups = _i % 2;
    fixture f;
    setup_model(&f, preset, groups);
    static const int sms[] = {1, 3, 132}, rows[] = {16, 7};
    for (size_t a = 0; a < sizeof sms / sizeof sms[0]; a++)
        for (size_t b = 0; b < sizeof rows / sizeof rows[0]; b++) {
            tp_istream s;
            tp_error e = {0};
            ck_assert_msg(tp_istream_build(&f.plan.prog, &f.g, sms[a], rows[b], NULL, &s, &e) == TP_OK, "%s", e.msg);
            check_layout(&s, &f);
            ck_assert_int_gt(s.n_waits, 0);
            for (uint64_t seed = 1; seed <= 40; seed++)
                ck_assert_msg(tp_istream_simulate(&s, &f.plan.prog, &f.g, seed, &e) == TP_OK,
                              "%s%s, %d SMs, %d rows, seed %llu: %s", preset, groups ? " (groups)" : "", sms[a],
                              rows[b], (unsigned long long)seed, e.msg);
            if (a == 1 && b == 0)
                printf("%s%s: %d calls -> %d instructions, %d waits, %d counters\n", preset,
                       groups ? " (GEMV groups, GLU epilogue)" : "", tp_program_n_calls(&f.plan.prog), s.n_instrs,
                       s.n_waits, s.n_counters);
            tp_istream_free(&s);
        }
    teardown_model(&f);
}
END_TEST

/* A stream with the waits of one instruction that reads another call's value removed: some interleaving runs it
 * before its producer, and the simulation says so. With more SMs than instructions each queue holds one, so no
 * queue order hides the missing wait (with 1 SM the order alone keeps any stream right). */
START_TEST(test_missing_wait_fails) {
    fixture f;
    setup_model(&f, "llama-tiny", 1);
    tp_istream s;
    tp_error e = {0};
    ck_assert(tp_istream_build(&f.plan.prog, &f.g, 1000, 16, NULL, &s, &e) == TP_OK);
    ck_assert_int_lt(s.n_instrs, 1000);
    int victim = -1;
    for (int k = s.n_instrs - 1; k >= 0 && victim < 0; k--)
        if (s.instrs[k].n_waits > 0 && f.g.ops[s.instrs[k].call].kind == TP_OP_LINEAR) victim = k;
    ck_assert_int_ge(victim, 0);
    for (int w = 0; w < s.instrs[victim].n_waits; w++) s.waits[s.instrs[victim].first_wait + w].target = 0;
    int failed = 0;
    for (uint64_t seed = 1; seed <= 200 && !failed; seed++) {
        if (tp_istream_simulate(&s, &f.plan.prog, &f.g, seed, &e) != TP_OK) {
            failed = 1;
            ck_assert_msg(strstr(e.msg, "starts while"), "%s", e.msg);
        }
    }
    ck_assert_msg(failed, "a stream without instruction %d's waits ran right under 200 interleavings", victim);
    /* refused arguments */
    tp_istream t;
    ck_assert_int_eq(tp_istream_build(&f.plan.prog, &f.g, 0, 16, NULL, &t, &e), TP_ERR_ARG);
    ck_assert_int_eq(tp_istream_build(&f.plan.prog, &f.g, 4, 0, NULL, &t, &e), TP_ERR_ARG);
    tp_istream_free(&s);
    teardown_model(&f);
}
END_TEST

/* The persistent decode step's joins (tp_istream_decode_joins) on a Llama decode step at one token with the build's
 * groups: five calls a layer (norm + q/k/v, RoPE + append + attention, o_proj + residual, norm + gate/up + GLU,
 * down_proj + residual) plus the embedding and norm + last token + LM head; the joined program, cut as an executor
 * cuts it (attention into 5 pieces, GLU calls by columns), still runs right under random interleavings. */
START_TEST(test_decode_joins) {
    tp_error e = {0};
    fixture f;
    memset(&f, 0, sizeof f);
    ck_assert(tp_model_preset("llama-tiny", &f.m, &e) == TP_OK);
    ck_assert(tp_model_params_shapes(&f.m, &f.p, &e) == TP_OK);
    const tp_step_shape st = {1, 1, 20, 32, 0, 0, 0};
    ck_assert_msg(tp_model_build_step(&f.m, &f.p, &st, &f.g, &e) == TP_OK, "%s", e.msg);
    tp_policy pol;
    tp_policy_default(&pol, TP_PREC_FP16);
    ck_assert(tp_plan_build_policy(&f.g, &pol, 90, &f.plan, &e) == TP_OK);
    tp_program *prog = &f.plan.prog;
    int lead = -1, layers = 0;
    for (int i = 0; i < f.g.n_ops; i++) {
        layers += f.g.ops[i].kind == TP_OP_KV_ATTENTION;
        if (f.g.ops[i].kind != TP_OP_LINEAR || prog->calls[i].n_ops != 1) continue;
        prog->calls[i].kind = TP_CALL_GEMV;
        if (lead >= 0 && f.g.ops[lead].in[0] == f.g.ops[i].in[0]) {
            tp_program_merge(prog, lead, i);
            prog->calls[lead].kind = TP_CALL_GEMV_GROUP;
        } else {
            lead = i;
        }
    }
    ck_assert_int_ge(tp_program_fuse_built(prog, &f.g, &f.plan, 90, NULL, 0, NULL, NULL), 0);
    ck_assert_int_gt(tp_istream_decode_joins(prog, &f.g), 0);
    ck_assert_int_eq(tp_program_n_calls(prog), 5 * layers + 2);
    ck_assert_int_eq(tp_istream_decode_joins(prog, &f.g), 0); /* nothing left to join */
    tp_istream_cut *cuts = calloc((size_t)f.g.n_ops, sizeof *cuts);
    ck_assert_ptr_nonnull(cuts);
    int attn = 0, glu = 0;
    for (int h = 0; h < f.g.n_ops; h++) {
        if (!tp_program_is_head(prog, h) || prog->calls[h].n_ops == 0) continue;
        const int u = tp_program_first(prog, &f.g, h, TP_OP_GLU);
        if (tp_program_first(prog, &f.g, h, TP_OP_KV_ATTENTION) >= 0) {
            cuts[h] = (tp_istream_cut){5, 5};
            ck_assert_int_ge(tp_program_first(prog, &f.g, h, TP_OP_ROPE), 0);
            ck_assert_int_ge(tp_program_first(prog, &f.g, h, TP_OP_KV_APPEND), 0);
            attn++;
        } else if (u >= 0) {
            cuts[h] = (tp_istream_cut){3, f.g.values[f.g.ops[u].out].shape[2]};
            ck_assert_int_ge(tp_program_first(prog, &f.g, h, TP_OP_RMSNORM), 0);
            glu++;
        }
    }
    ck_assert_int_eq(attn, layers);
    ck_assert_int_eq(glu, layers);
    tp_istream s;
    ck_assert_msg(tp_istream_build(prog, &f.g, 7, 16, cuts, &s, &e) == TP_OK, "%s", e.msg);
    for (int k = 0; k < s.n_instrs; k++)
        if (cuts[s.instrs[k].call].parts == 5) ck_assert(s.instrs[k].f1 == s.instrs[k].f0 + 1);
    for (uint64_t seed = 1; seed <= 40; seed++)
        ck_assert_msg(tp_istream_simulate(&s, prog, &f.g, seed, &e) == TP_OK, "seed %llu: %s",
                      (unsigned long long)seed, e.msg);
    tp_istream_free(&s);
    cuts[0] = (tp_istream_cut){4, 2}; /* a width smaller than its parts */
    ck_assert_int_eq(tp_istream_build(prog, &f.g, 7, 16, cuts, &s, &e), TP_ERR_ARG);
    free(cuts);
    teardown_model(&f);
}
END_TEST

/* The same joins on pi0-small with the build's groups: every expert layer-step becomes five calls as a decoder
 * layer (norm + q/k/v, the two RoPEs + the masked attention over the prefix's K, V, o_proj + residual, norm + gate/up
 * + GLU, down_proj + residual), the prefix's masked attentions stay apart (their keys' RoPE is the expert's cache
 * too, in a later slot than the queries'), the slots stay in topological order, and the joined stream still runs
 * right under random interleavings, also with every call cut into one part per SM. */
START_TEST(test_expert_joins) {
    fixture f;
    setup_model(&f, "pi0-small", 1);
    tp_program *prog = &f.plan.prog;
    const int before = tp_program_n_calls(prog);
    ck_assert_int_gt(tp_istream_decode_joins(prog, &f.g), 0);
    ck_assert_int_lt(tp_program_n_calls(prog), before);
    int expert_layers = 0;
    for (int a = 0; a < f.g.n_ops; a++) {
        if (f.g.ops[a].kind != TP_OP_MASKED_ATTENTION) continue;
        const int h = prog->op_call[a];
        int ropes = 0;
        for (int k = 0; k < prog->calls[h].n_ops; k++) ropes += f.g.ops[prog->calls[h].ops[k]].kind == TP_OP_ROPE;
        /* the prefix's rotated keys are also the expert's cache (read by every step): they stay alone in their
         * slot, after the queries' RoPE, so neither joins the prefix's attention (the order must stay topological) */
        const int expert = strncmp(f.g.ops[a].layer, "expert.", 7) == 0;
        ck_assert_msg(ropes == (expert ? 2 : 0), "%s: %d RoPEs in its call", f.g.ops[a].layer, ropes);
        if (!expert) continue;
        /* the layer-step's ops: "expert.stepS.layers.I." */
        char pre[96];
        const char *end = strstr(f.g.ops[a].layer, ".self_attn");
        ck_assert_ptr_nonnull(end);
        snprintf(pre, sizeof pre, "%.*s.", (int)(end - f.g.ops[a].layer), f.g.ops[a].layer);
        int calls[16], n = 0;
        for (int i = 0; i < f.g.n_ops; i++) {
            if (strncmp(f.g.ops[i].layer, pre, strlen(pre))) continue;
            const int c = prog->op_call[i];
            int seen = 0;
            for (int j = 0; j < n; j++) seen |= calls[j] == c;
            if (!seen && prog->calls[c].kind != TP_CALL_NONE) {
                ck_assert_int_lt(n, 16);
                calls[n++] = c;
            }
        }
        ck_assert_msg(n == 5, "%s: %d calls", pre, n);
        expert_layers++;
    }
    ck_assert_int_gt(expert_layers, 0);
    check_topological(prog, &f.g);
    const int instrs = simulate_ok(prog, &f.g, 7);
    /* and with every call cut into one part per SM, as an executor cuts the attention: a call reading a later slot
     * deadlocks here (the queues follow the slots) */
    tp_istream_cut *cuts = calloc((size_t)f.g.n_ops, sizeof *cuts);
    ck_assert_ptr_nonnull(cuts);
    for (int h = 0; h < f.g.n_ops; h++)
        if (tp_program_is_head(prog, h) && prog->calls[h].n_ops > 0) cuts[h] = (tp_istream_cut){7, 7};
    tp_istream s;
    tp_error e = {0};
    ck_assert_msg(tp_istream_build(prog, &f.g, 7, 16, cuts, &s, &e) == TP_OK, "%s", e.msg);
    for (uint64_t seed = 1; seed <= 10; seed++)
        ck_assert_msg(tp_istream_simulate(&s, prog, &f.g, seed, &e) == TP_OK, "cut, seed %llu: %s",
                      (unsigned long long)seed, e.msg);
    tp_istream_free(&s);
    free(cuts);
    printf("pi0-small joined: %d calls (from %d), %d expert layer-steps of 5 calls, %d instructions\n",
           tp_program_n_calls(prog), before, expert_layers, instrs);
    teardown_model(&f);
}
END_TEST

/* Without the build's groups (q/k/v and gate/up apart) a norm has three or two reading calls and stays alone, the
 * GLU stays alone; the attention and the residual adds still join, and the stream still runs right. */
START_TEST(test_decode_joins_without_groups) {
    fixture f;
    setup_model(&f, "llama-tiny", 0);
    tp_program *prog = &f.plan.prog;
    int layers = 0;
    for (int i = 0; i < f.g.n_ops; i++) layers += f.g.ops[i].kind == TP_OP_KV_ATTENTION;
    const int before = tp_program_n_calls(prog);
    ck_assert_int_gt(tp_istream_decode_joins(prog, &f.g), 0);
    for (int i = 0; i < f.g.n_ops; i++) {
        if (f.g.ops[i].kind == TP_OP_RMSNORM && strstr(f.g.ops[i].layer, "layers."))
            ck_assert_msg(tp_program_is_head(prog, i) && prog->calls[i].n_ops == 1, "%s joined a call of several "
                          "readers", f.g.ops[i].layer);
        if (f.g.ops[i].kind == TP_OP_GLU) ck_assert_int_eq(prog->calls[prog->op_call[i]].n_ops, 1);
        if (f.g.ops[i].kind == TP_OP_KV_ATTENTION)
            ck_assert_int_ge(tp_program_first(prog, &f.g, prog->op_call[i], TP_OP_ROPE), 0);
    }
    ck_assert_int_lt(tp_program_n_calls(prog), before);
    simulate_ok(prog, &f.g, 5);
    ck_assert_int_gt(layers, 0);
    teardown_model(&f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("istream");
    TCase *t = tcase_create("istream");
    tcase_set_timeout(t, 120);
    tcase_add_loop_test(t, test_stream_runs, 0, 4);
    tcase_add_test(t, test_missing_wait_fails);
    tcase_add_test(t, test_decode_joins);
    tcase_add_test(t, test_decode_joins_without_groups);
    tcase_add_test(t, test_expert_joins);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    const int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
