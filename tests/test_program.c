/* test_program.c: the executed program (planner/program.h). The generic fusion test, in the spirit of ggml's
 * test-backend-ops: every rule of tp_fusion_rules has an entry here (a rule without one fails), a small graph of its
 * chain at awkward shapes (197 tokens, batch 3, K not a multiple of 64). For each: the rule fires on it and on
 * nothing else, it does not fire when another op reads the chain's inner value, the fused call moves fewer bytes
 * than the unfused calls, and the CPU executor runs the fused program (its inner value never stored in fp16) and
 * the unfused one, both within fp16's tolerance of the FP32 reference and different from each other (the inner
 * rounding is gone: the CPU honours the program, not the graph alone). The CUDA kernel of each rule is checked
 * against this CPU run by the GPU suite. Also: lowering without fusion, the kernel registry, merge and split. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu_exec.h"
#include "models/model.h"
#include "planner/plan.h"
#include "planner/policy.h"
#include "planner/program.h"

static int add_param(tp_graph *g, tp_params *P, const char *name, int ndim, const int64_t *shape, double f) {
    P->params = realloc(P->params, sizeof *P->params * (size_t)(P->n_params + 1));
    ck_assert_ptr_nonnull(P->params);
    tp_param *p = &P->params[P->n_params];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int d = 0; d < ndim; d++) p->shape[d] = shape[d], p->numel *= shape[d];
    p->data = malloc(sizeof(float) * (size_t)p->numel);
    ck_assert_ptr_nonnull(p->data);
    for (int64_t i = 0; i < p->numel; i++) p->data[i] = (float)(0.25 * sin(f * (double)i + 0.3));
    return tp_graph_add_value(g, name, TP_VAL_PARAM, ndim, shape, P->n_params++);
}

static int add_op(tp_graph *g, tp_op_kind k, const char *layer, const int *in, int n_in, int ndim, const int64_t *shape,
                  int gelu_tanh) {
    tp_op proto;
    memset(&proto, 0, sizeof proto);
    proto.kind = k;
    proto.gelu_tanh = gelu_tanh;
    snprintf(proto.layer, sizeof proto.layer, "%s", layer);
    return tp_graph_op_out(g, tp_graph_add_op(g, &proto, in, n_in, ndim, shape, NULL));
}

/* One rule's case: its chain built at awkward shapes; extra adds an op reading the chain's first output too. A
 * TP_FUSE_BUILT rule's case also makes the choices an engine's build would (choose: the GEMV kernels, a sibling
 * group), which the rule then fuses into. */
typedef struct {
    const char *rule; /* tp_fusion_rules[].name */
    void (*build)(tp_graph *g, tp_params *P, int extra);
    int same; /* 1: the fused kernel stores what the unfused ops store (no rounding removed): bit-identical runs */
    void (*choose)(tp_program *prog, const tp_graph *g);
} fusion_case;

enum { B = 3, T = 197, K = 72, N = 136 };

static void build_linear_add(tp_graph *g, tp_params *P, int extra) {
    const int64_t xs[3] = {B, T, K}, ws[2] = {K, K}, bs[1] = {K};
    tp_graph_init(g, B);
    const int x = tp_graph_add_value(g, "x", TP_VAL_INPUT, 3, xs, -1);
    g->input = x;
    const int w = add_param(g, P, "proj.weight", 2, ws, 0.37), b = add_param(g, P, "proj.bias", 1, bs, 1.1);
    const int h = add_op(g, TP_OP_GELU, "pre", (int[]){x}, 1, 3, xs, 0); /* an activation: the residual stream */
    const int lin = add_op(g, TP_OP_LINEAR, "proj", (int[]){h, w, b}, 3, 3, xs, 0);
    g->output = add_op(g, TP_OP_ADD, "residual", (int[]){h, lin}, 2, 3, xs, 0);
    if (extra) g->output = add_op(g, TP_OP_ADD, "other_reader", (int[]){lin, g->output}, 2, 3, xs, 0);
}

static void build_linear_gelu(tp_graph *g, tp_params *P, int extra) {
    const int64_t xs[3] = {B, T, K}, ys[3] = {B, T, N}, ws[2] = {N, K}, bs[1] = {N};
    tp_graph_init(g, B);
    const int x = tp_graph_add_value(g, "x", TP_VAL_INPUT, 3, xs, -1);
    g->input = x;
    const int w = add_param(g, P, "fc1.weight", 2, ws, 0.53), b = add_param(g, P, "fc1.bias", 1, bs, 0.7);
    const int h = add_op(g, TP_OP_GELU, "pre", (int[]){x}, 1, 3, xs, 0); /* the linear reads an activation */
    const int lin = add_op(g, TP_OP_LINEAR, "fc1", (int[]){h, w, b}, 3, 3, ys, 0);
    g->output = add_op(g, TP_OP_GELU, "act", (int[]){lin}, 1, 3, ys, 1); /* the model's tanh form */
    if (extra) g->output = add_op(g, TP_OP_ADD, "other_reader", (int[]){lin, g->output}, 2, 3, ys, 0);
}

static void build_patch_embed(tp_graph *g, tp_params *P, int extra) {
    enum { S = 48, Pt = 16, C = 72, Np = (S / Pt) * (S / Pt) };
    const int64_t is[4] = {B, 3, S, S}, ws[4] = {C, 3, Pt, Pt}, bs[1] = {C}, ps[3] = {B, Np, C},
                  pos[3] = {1, Np + 1, C}, cls[3] = {1, 1, C}, os[3] = {B, Np + 1, C};
    tp_graph_init(g, B);
    const int x = tp_graph_add_value(g, "image", TP_VAL_INPUT, 4, is, -1);
    g->input = x;
    const int w = add_param(g, P, "patch_embed.proj.weight", 4, ws, 0.11);
    const int b = add_param(g, P, "patch_embed.proj.bias", 1, bs, 0.9);
    const int pe = add_param(g, P, "pos_embed", 3, pos, 0.05), ct = add_param(g, P, "cls_token", 3, cls, 1.7);
    tp_op proto;
    memset(&proto, 0, sizeof proto);
    proto.kind = TP_OP_PATCH_EMBED;
    proto.patch = Pt;
    snprintf(proto.layer, sizeof proto.layer, "patch_embed.proj");
    const int patches = tp_graph_op_out(g, tp_graph_add_op(g, &proto, (int[]){x, w, b}, 3, 3, ps, NULL));
    g->output = add_op(g, TP_OP_EMBED_TOKENS, "embed", (int[]){patches, pe, ct}, 3, 3, os, 0);
    if (extra) add_op(g, TP_OP_GELU, "other_reader", (int[]){patches}, 1, 3, ps, 0);
}

/* A decoder's attention at a prefill of 197 tokens into a cache of 257: q, k, v from linears, both rotated, k and v
 * appended, the attention over the cache (GQA: 4 heads over 2 KV heads of 64). */
static void build_rope_kv(tp_graph *g, tp_params *P, int extra) {
    enum { H = 4, Hkv = 2, D = 64, L = 257 };
    const int64_t xs[3] = {B, T, K}, qs[3] = {B, T, H * D}, ks[3] = {B, T, Hkv * D}, cs[4] = {2, B, L, Hkv * D};
    const int64_t wq[2] = {H * D, K}, wk[2] = {Hkv * D, K};
    tp_graph_init(g, B);
    g->tokens = T, g->past = 0, g->kv_len = L;
    const int x = tp_graph_add_value(g, "x", TP_VAL_INPUT, 3, xs, -1);
    g->input = x;
    const int h = add_op(g, TP_OP_GELU, "pre", (int[]){x}, 1, 3, xs, 0);
    const int q = add_op(g, TP_OP_LINEAR, "q_proj", (int[]){h, add_param(g, P, "q.weight", 2, wq, 0.21)}, 2, 3, qs, 0);
    const int k = add_op(g, TP_OP_LINEAR, "k_proj", (int[]){h, add_param(g, P, "k.weight", 2, wk, 0.43)}, 2, 3, ks, 0);
    const int v = add_op(g, TP_OP_LINEAR, "v_proj", (int[]){h, add_param(g, P, "v.weight", 2, wk, 0.67)}, 2, 3, ks, 0);
    tp_op rope = {.kind = TP_OP_ROPE, .head_dim = D, .rope = {.theta = 10000.0}};
    rope.heads = H;
    snprintf(rope.layer, sizeof rope.layer, "rope_q");
    const int rq = tp_graph_op_out(g, tp_graph_add_op(g, &rope, &q, 1, 3, qs, NULL));
    rope.heads = Hkv;
    snprintf(rope.layer, sizeof rope.layer, "rope_k");
    const int rk = tp_graph_op_out(g, tp_graph_add_op(g, &rope, &k, 1, 3, ks, NULL));
    const int kv = add_op(g, TP_OP_KV_APPEND, "kv_append", (int[]){rk, v}, 2, 4, cs, 0);
    tp_graph_mark_state(g, kv);
    tp_op att = {.kind = TP_OP_KV_ATTENTION, .heads = H, .kv_heads = Hkv, .head_dim = D, .scale = 0.125f};
    snprintf(att.layer, sizeof att.layer, "attn");
    g->output = tp_graph_op_out(g, tp_graph_add_op(g, &att, (int[]){rq, kv}, 2, 3, qs, NULL));
    if (extra) add_op(g, TP_OP_GELU, "other_reader", (int[]){rk}, 1, 3, ks, 0);
}

/* A decode step's MLP: gate and up linears of one input, their SwiGLU; N = 136, K = 72. */
static void build_gemv_glu(tp_graph *g, tp_params *P, int extra) {
    const int64_t xs[3] = {B, 1, K}, ys[3] = {B, 1, N}, ws[2] = {N, K};
    tp_graph_init(g, B);
    g->tokens = 1;
    const int x = tp_graph_add_value(g, "x", TP_VAL_INPUT, 3, xs, -1);
    g->input = x;
    const int h = add_op(g, TP_OP_GELU, "pre", (int[]){x}, 1, 3, xs, 0);
    const int gt = add_op(g, TP_OP_LINEAR, "gate_proj", (int[]){h, add_param(g, P, "gate.weight", 2, ws, 0.23)}, 2, 3, ys, 0);
    const int up = add_op(g, TP_OP_LINEAR, "up_proj", (int[]){h, add_param(g, P, "up.weight", 2, ws, 0.41)}, 2, 3, ys, 0);
    tp_op glu = {.kind = TP_OP_GLU, .act = 0};
    snprintf(glu.layer, sizeof glu.layer, "act");
    g->output = tp_graph_op_out(g, tp_graph_add_op(g, &glu, (int[]){gt, up}, 2, 3, ys, NULL));
    if (extra) g->output = add_op(g, TP_OP_ADD, "other_reader", (int[]){gt, g->output}, 2, 3, ys, 0);
}

/* What a decode engine's build chooses for a graph of 3 rows: every linear the 16-bit GEMV, the linears of one input
 * one group's GEMV (the first one's call) */
static void choose_gemv_groups(tp_program *prog, const tp_graph *g) {
    int lead = -1;
    for (int i = 0; i < g->n_ops; i++) {
        if (g->ops[i].kind != TP_OP_LINEAR || prog->calls[i].n_ops != 1) continue;
        prog->calls[i].kind = TP_CALL_GEMV;
        if (lead >= 0 && g->ops[lead].in[0] == g->ops[i].in[0]) {
            tp_program_merge(prog, lead, i);
            prog->calls[lead].kind = TP_CALL_GEMV_GROUP;
        } else {
            lead = i;
        }
    }
}

static const fusion_case CASES[] = {
    {"linear+add", build_linear_add, 0, NULL},
    {"linear+gelu", build_linear_gelu, 0, NULL},
    {"patch_embed+embed_tokens", build_patch_embed, 0, NULL},
    {"rope+kv_append", build_rope_kv, 1, NULL},
    {"gemv+glu", build_gemv_glu, 0, choose_gemv_groups},
};

static const fusion_case *case_of(const char *rule) {
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++)
        if (strcmp(CASES[k].rule, rule) == 0) return &CASES[k];
    return NULL;
}

/* The fp16 plan on sm_90 and its program: lowered (the TP_FUSE_LOWER rules unless no_fusion), then, for a case
 * with choices, the build's choices and (unless no_fusion) the TP_FUSE_BUILT rules. */
static void plan_fp16(const fusion_case *fc, const tp_graph *g, int no_fusion, tp_plan *p) {
    tp_policy pol;
    tp_error e = {0};
    tp_policy_default(&pol, TP_PREC_FP16);
    pol.no_fusion = no_fusion;
    ck_assert_msg(tp_plan_build_policy(g, &pol, 90, p, &e) == TP_OK, "%s", e.msg);
    if (!fc->choose) return;
    fc->choose(&p->prog, g);
    if (!no_fusion) ck_assert_int_ge(tp_program_fuse_built(&p->prog, g, p, 90, p->op_note, 0, NULL, NULL), 0);
}

/* The calls other than a build's choices (a group's merged members) */
static int n_fused_calls(const tp_program *prog, const tp_graph *g, int *head) {
    int n = 0;
    for (int i = 0; i < g->n_ops; i++)
        if (prog->calls[i].n_ops > 1 && prog->calls[i].rule >= 0) n++, *head = i;
    return n;
}

/* rel L2 of a against b */
static double rel_l2(const float *a, const float *b, int64_t n) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return sqrt(d / r);
}

START_TEST(test_every_rule_against_its_unfused_chain) {
    for (int r = 0; r < tp_fusion_rule_count; r++) {
        const tp_fusion_rule *rule = &tp_fusion_rules[r];
        const fusion_case *fc = case_of(rule->name);
        ck_assert_msg(fc != NULL, "fusion rule %s has no entry in the generic fusion test (tests/test_program.c)",
                      rule->name);
        tp_graph g;
        tp_params P = {0};
        fc->build(&g, &P, 0);
        ck_assert_msg((rule->stage == TP_FUSE_BUILT) == (fc->choose != NULL),
                      "%s: a rule applied after the build needs the build's choices in its case", rule->name);
        tp_plan fused, plain;
        plan_fp16(fc, &g, 0, &fused);
        plan_fp16(fc, &g, 1, &plain);
        /* the rule fired once, on its chain, and no other rule did */
        int head = -1, ph = -1;
        const int n_fused = n_fused_calls(&fused.prog, &g, &head);
        ck_assert_int_eq(n_fused_calls(&plain.prog, &g, &ph), 0);
        ck_assert_msg(n_fused == 1, "%s: %d fused calls", rule->name, n_fused);
        const tp_call *c = &fused.prog.calls[head];
        ck_assert_int_eq(c->rule, r);
        int links[2] = {-1, -1}; /* the chain's ops: each link's first op of its kind in the call */
        for (int k = 0; k < rule->n; k++) {
            links[k] = tp_program_first(&fused.prog, &g, head, rule->kinds[k]);
            ck_assert_msg(links[k] >= 0, "%s: no %s in the fused call", rule->name, tp_op_kind_name(rule->kinds[k]));
        }
        if (rule->stage == TP_FUSE_LOWER) {
            ck_assert_int_eq(c->n_ops, rule->n);
            for (int k = 0; k < rule->n; k++) ck_assert_int_eq(g.ops[c->ops[k]].kind, rule->kinds[k]);
        } else { /* the call keeps the kind of link `keep`'s call */
            ck_assert_int_eq(c->kind, tp_program_kind(&plain.prog, links[rule->keep]));
        }
        if (rule->kind != TP_CALL_NONE) ck_assert_int_eq(c->kind, rule->kind);
        ck_assert_int_eq(tp_program_n_calls(&fused.prog), tp_program_n_calls(&plain.prog) - rule->n + 1);
        /* bytes: the inner value neither written nor read back (and a value two ops of the chain read, read once) */
        double unfused = 0;
        for (int k = 0; k < rule->n; k++)
            unfused += tp_program_call_bytes(&plain.prog, &plain, &g, plain.prog.op_call[links[k]]);
        const double inner = (double)tp_value_numel(&g.values[g.ops[links[0]].out]) * 2.0; /* fp16 */
        ck_assert_msg(tp_program_call_bytes(&fused.prog, &fused, &g, head) <= unfused - 2.0 * inner + 0.5,
                      "%s: fused call %.0f bytes, unfused %.0f, inner value %.0f", rule->name,
                      tp_program_call_bytes(&fused.prog, &fused, &g, head), unfused, inner);
        /* the CPU runs both programs: each within fp16's tolerance of fp32, and not the same values */
        const int64_t nin = tp_value_numel(&g.values[g.input]), nout = tp_value_numel(&g.values[g.output]);
        float *in = malloc(sizeof(float) * (size_t)nin), *ref = malloc(sizeof(float) * (size_t)nout);
        float *yf = malloc(sizeof(float) * (size_t)nout), *yp = malloc(sizeof(float) * (size_t)nout);
        for (int64_t i = 0; i < nin; i++) in[i] = (float)sin(0.731 * (double)i);
        for (int64_t i = 0; i < nout; i++) ref[i] = yf[i] = yp[i] = NAN; /* poisoned */
        tp_error e = {0};
        ck_assert_msg(tp_cpu_run(&g, &P, in, ref, &e) == TP_OK, "%s", e.msg);
        ck_assert_msg(tp_cpu_run_emulated(&g, &P, &fused, NULL, in, yf, &e) == TP_OK, "%s", e.msg);
        ck_assert_msg(tp_cpu_run_emulated(&g, &P, &plain, NULL, in, yp, &e) == TP_OK, "%s", e.msg);
        const double ef = rel_l2(yf, ref, nout), ep = rel_l2(yp, ref, nout), d = rel_l2(yf, yp, nout);
        /* 8 units of fp16's roundoff (2^-11): the input, the weights and each stored value are rounded */
        const double tol = 8.0 * ldexp(1.0, -11);
        ck_assert_msg(ef < tol && ep < tol, "%s: rel L2 fused %.3g, unfused %.3g", rule->name, ef, ep);
        if (fc->same) ck_assert_msg(d == 0, "%s: the fused program differs from the unfused one (rel L2 %.3g)", rule->name, d);
        else ck_assert_msg(d > 0, "%s: the fused program computed the unfused one's values bit for bit", rule->name);
        free(in), free(ref), free(yf), free(yp);
        tp_plan_free(&fused);
        tp_plan_free(&plain);
        tp_graph_free(&g);
        tp_params_free(&P);
    }
}
END_TEST

/* A rule's chain whose inner value another op reads too is not fused (its value must be stored). */
START_TEST(test_rule_refuses_a_read_inner_value) {
    for (int r = 0; r < tp_fusion_rule_count; r++) {
        const fusion_case *fc = case_of(tp_fusion_rules[r].name);
        ck_assert_ptr_nonnull(fc);
        tp_graph g;
        tp_params P = {0};
        fc->build(&g, &P, 1);
        tp_plan p;
        plan_fp16(fc, &g, 0, &p);
        int head = -1;
        ck_assert_msg(n_fused_calls(&p.prog, &g, &head) == 0, "%s fused %s although another op reads its output",
                      tp_fusion_rules[r].name, head >= 0 ? g.ops[head].layer : "?");
        tp_plan_free(&p);
        tp_graph_free(&g);
        tp_params_free(&P);
    }
}
END_TEST

static int veto_all(void *user, const tp_program *prog, int h0, int h1) {
    (void)prog;
    int *calls = user;
    calls[0]++;
    return h0 < h1; /* every join refused (and the pair in graph order) */
}

/* A built rule joins nothing the executor vetoes or the caller skips, and joins once otherwise: its GEMV call then
 * holds the group's linears and the GLU, writes the GLU's output, and the gate and up outputs are inner values. */
START_TEST(test_built_rule_veto_and_skip) {
    tp_graph g;
    tp_params P = {0};
    build_gemv_glu(&g, &P, 0);
    tp_plan p;
    tp_policy pol;
    tp_error e = {0};
    tp_policy_default(&pol, TP_PREC_FP16);
    ck_assert_msg(tp_plan_build_policy(&g, &pol, 90, &p, &e) == TP_OK, "%s", e.msg);
    choose_gemv_groups(&p.prog, &g);
    const int n0 = tp_program_n_calls(&p.prog);
    int vetoes = 0, r = -1;
    for (int k = 0; k < tp_fusion_rule_count; k++)
        if (strcmp(tp_fusion_rules[k].name, "gemv+glu") == 0) r = k;
    ck_assert_int_ge(r, 0);
    ck_assert_int_eq(tp_program_fuse_built(&p.prog, &g, &p, 90, NULL, 0, veto_all, &vetoes), 0);
    ck_assert_int_gt(vetoes, 0);
    ck_assert_int_eq(tp_program_fuse_built(&p.prog, &g, &p, 90, NULL, 1u << r, NULL, NULL), 0);
    ck_assert_int_eq(tp_program_n_calls(&p.prog), n0);
    ck_assert_int_eq(tp_program_fuse_built(&p.prog, &g, &p, 90, NULL, 0, NULL, NULL), 1);
    ck_assert_int_eq(tp_program_n_calls(&p.prog), n0 - 1);
    const int gate = tp_program_first(&p.prog, &g, 1, TP_OP_LINEAR), glu = tp_program_first(&p.prog, &g, 1, TP_OP_GLU);
    ck_assert_int_eq(gate, 1);
    ck_assert_int_ge(glu, 0);
    ck_assert_int_eq(p.prog.calls[1].kind, TP_CALL_GEMV_GROUP);
    ck_assert_int_eq(tp_program_out(&p.prog, &g, 1), g.ops[glu].out);
    ck_assert(tp_program_inner(&p.prog, &g, g.ops[gate].out));
    ck_assert_int_eq(tp_program_fuse_built(&p.prog, &g, &p, 90, NULL, 0, NULL, NULL), 0); /* nothing left to join */
    tp_plan_free(&p);
    tp_graph_free(&g);
    tp_params_free(&P);
}
END_TEST

/* The CPU target and fp32 fuse nothing where the rules say so; every registered kernel has a name; merge and split
 * restore a call as it was. */
START_TEST(test_lowering_and_registry) {
    for (int k = 0; k < TP_CALL_KIND_COUNT; k++) {
        ck_assert_ptr_nonnull(tp_call_kind_get((tp_call_kind)k)->name);
        ck_assert_ptr_nonnull(tp_call_kind_get((tp_call_kind)k)->what);
    }
    tp_graph g;
    tp_params P = {0};
    build_linear_add(&g, &P, 0);
    tp_plan p;
    tp_error e = {0};
    ck_assert_msg(tp_plan_build(&g, TP_PREC_FP32, 0, &p, &e) == TP_OK, "%s", e.msg); /* the CPU: no fused kernel */
    ck_assert_int_eq(tp_program_n_calls(&p.prog), g.n_ops);
    ck_assert_int_eq(p.prog.calls[1].kind, TP_CALL_GEMM);
    ck_assert_int_eq(p.prog.calls[2].kind, TP_CALL_ADD);
    tp_program q;
    ck_assert(tp_program_copy(&p.prog, &q, &e) == TP_OK);
    tp_program_merge(&q, 1, 2);
    ck_assert_int_eq(tp_program_n_calls(&q), 2);
    ck_assert_int_eq(tp_program_fused_into(&q, 2), 1);
    ck_assert_int_eq(tp_program_out(&q, &g, 1), g.ops[2].out);
    ck_assert(tp_program_inner(&q, &g, g.ops[1].out));
    ck_assert(!tp_program_inner(&q, &g, g.ops[0].out)); /* the GELU's output: its readers are in another call */
    tp_program_split(&q, 2);
    ck_assert_int_eq(q.calls[2].kind, TP_CALL_ADD);
    ck_assert_int_eq(tp_program_n_calls(&q), 3);
    ck_assert(!tp_program_inner(&q, &g, g.ops[1].out));
    tp_program_free(&q);
    tp_plan_free(&p);
    tp_graph_free(&g);
    tp_params_free(&P);
}
END_TEST

int main(void) {
    Suite *s = suite_create("program");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_every_rule_against_its_unfused_chain);
    tcase_add_test(tc, test_rule_refuses_a_read_inner_value);
    tcase_add_test(tc, test_lowering_and_registry);
    tcase_add_test(tc, test_built_rule_veto_and_skip);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
