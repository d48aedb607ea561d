/* onnx_decoder.c: a Llama-style decoder export onto the decoder family (onnx_import.h, decoder.h): token ids in,
 * the logits of every position out. Walked from the embedding Gather (Gemma: then a Mul by sqrt(C)) along the
 * residual stream: per layer RMSNorm
 * (its decomposition Pow 2, ReduceMean, Add eps, Sqrt, Reciprocal, two Mul), q/k/v linears, the attention subgraph
 * up to o_proj (RoPE's rotate_half, GQA's Expand, the causal mask's Add, Softmax), the residual Add, RMSNorm,
 * gate and up linears, act(gate) times up (SiLU: x * Sigmoid(x); Gemma's tanh GELU), down, the residual Add; then
 * RMSNorm and the LM head. RoPE's
 * frequencies are read from the inv_freq constant the cos and sin come from, and matched to HF's default or llama3
 * scaling exactly (tp_rope_inv_freq). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/decoder.h"
#include "models/onnx_walk.h"

typedef struct {
    const tp_onnx_tensor *w;
    float eps;
    const char *out;
} rms_t;

typedef struct {
    rms_t n1, n2;
    ow_lin q, k, v, o, gate, up, down;
} dec_layer;

typedef struct {
    const tp_onnx_tensor *embed;
    dec_layer *ly;
    int n, cap;
    rms_t norm;
    ow_lin head;
    int64_t C, I, V, D, H, Hkv;
    float eps;
    int act;         /* tp_act of the gated MLP */
    float embed_scale; /* Gemma: the embedding multiplied by sqrt(C); 0: none */
} dec_map;

static const char *out0(const ow_ix *x, int i) { return ow_nd(x, i)->out[0]; }

/* RMSNorm over the last axis of v (C): x * 1 / sqrt(mean(x^2) + eps) * w, as transformers' LlamaRMSNorm is exported.
 * Its nodes marked; 0 when v is not read so. */
static int rmsnorm_of(ow_ix *x, const char *v, int64_t C, rms_t *r) {
    const int p = ow_consumer_op(x, v, "Pow");
    if (p < 0 || ow_scalar_of(x, ow_nd(x, p)->in[1]) != 2.0) return 0;
    const int rm = ow_consumer_op(x, out0(x, p), "ReduceMean");
    int64_t ax[2];
    const tp_onnx_attr *kd = rm >= 0 ? tp_onnx_node_attr(ow_nd(x, rm), "keepdims") : NULL;
    if (rm < 0 || ow_nd(x, rm)->n_in < 2 || ow_const_ints(x, ow_nd(x, rm)->in[1], ax, 2, 0) != 1 ||
        (ax[0] != -1 && ax[0] != 2) || (kd && kd->i != 1))
        return 0;
    const int ad = ow_consumer_op(x, out0(x, rm), "Add");
    const tp_onnx_node *an = ad >= 0 ? ow_nd(x, ad) : NULL;
    const double eps = an ? ow_scalar_of(x, !strcmp(an->in[0], out0(x, rm)) ? an->in[1] : an->in[0]) : NAN;
    const int sq = an ? ow_consumer_op(x, out0(x, ad), "Sqrt") : -1;
    if (!(eps > 0) || sq < 0) return 0;
    int rc = ow_consumer_op(x, out0(x, sq), "Reciprocal");
    if (rc < 0) { /* 1 / sqrt as a Div */
        rc = ow_consumer_op(x, out0(x, sq), "Div");
        if (rc >= 0 && (ow_scalar_of(x, ow_nd(x, rc)->in[0]) != 1.0 || strcmp(ow_nd(x, rc)->in[1], out0(x, sq)))) rc = -1;
    }
    const int m1 = rc >= 0 ? ow_binop_of(x, "Mul", v, out0(x, rc)) : -1;
    const int m2 = m1 >= 0 ? ow_consumer_op(x, out0(x, m1), "Mul") : -1;
    if (m2 < 0) return 0;
    const tp_onnx_node *mn = ow_nd(x, m2);
    r->w = ow_const_tensor(x, !strcmp(mn->in[0], out0(x, m1)) ? mn->in[1] : mn->in[0]);
    if (!r->w || r->w->ndim != 1 || r->w->dims[0] != C || !ow_float_type(r->w->elem_type)) return 0;
    r->eps = (float)eps;
    r->out = out0(x, m2);
    const int nodes[7] = {p, rm, ad, sq, rc, m1, m2};
    for (int k = 0; k < 7; k++) x->role[nodes[k]] = R_MAIN;
    return 1;
}

/* The linears reading v with K = C (file order), up to max; how many */
static int linears_reading(const ow_ix *x, const char *v, int64_t K, ow_lin *L, int max) {
    int c[16], n = ow_consumers(x, v, c, 16), k = 0;
    for (int j = 0; j < n && j < 16 && k < max; j++)
        if (ow_linear_at(x, c[j], K, 0, &L[k]) && !strcmp(L[k].in, v)) k++;
    return k;
}

static int last_node(const ow_lin *L) { return L->add >= 0 ? L->add : L->mm; }

static const char *const ATTN_OPS[] = {"Reshape", "Transpose", "Mul", "Div", "Slice", "Neg", "Concat", "Add",
                                       "Unsqueeze", "Squeeze", "Expand", "MatMul", "Softmax", "Where", "IsNaN", "Cast",
                                       "Sub", NULL};
/* shape arithmetic: positions, cos and sin, the causal mask, from Shape outputs and constants */
static const char *const SHAPE_OPS[] = {"Shape", "Constant", "Identity", "Gather", "Unsqueeze", "Squeeze", "Concat",
                                        "Slice", "Cast", "Sqrt", "Div", "Mul", "Add", "Sub", "Reshape",
                                        "ConstantOfShape", "Equal", "Where", "Range", "Expand", "Cos", "Sin", "CumSum",
                                        "GatherND", "LessOrEqual", "And", "Not", "Max", "Neg", "MatMul", "Transpose",
                                        NULL};

/* One layer from the stream value v; *next the stream after it */
static tp_status layer_at(ow_ix *x, dec_map *dm, const char *v, dec_layer *ly, const char **next) {
    const int64_t C = dm->C;
    if (!rmsnorm_of(x, v, C, &ly->n1)) {
        int c[4];
        const int n = ow_consumers(x, v, c, 4);
        return n ? ow_fail_node(x, c[0], "%sexpected RMSNorm (Pow 2, ReduceMean, Add eps, Sqrt, Reciprocal, Mul, Mul "
                                "by a (C) weight) here", "")
                 : tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "the residual stream ends without a norm");
    }
    ow_lin qkv[3];
    if (linears_reading(x, ly->n1.out, C, qkv, 3) != 3)
        return ow_fail_node(x, ow_producer(x, ly->n1.out), "%sits output is not read by three linears (q, k, v: a "
                            "fused qkv projection is not mapped)", "");
    ly->q = qkv[0], ly->k = qkv[1], ly->v = qkv[2]; /* torch module order, which the exporters keep */
    if (ly->k.N != ly->v.N || ly->q.N % ly->k.N)
        return ow_fail_node(x, ly->q.mm, "%sq, k, v widths that are not heads x dim with kv heads dividing heads", "");
    /* the head dim: the Reshape of q's output to (B, T, heads, dim) */
    int64_t D = 0, sh[8];
    int c[16], nc = ow_consumers(x, ly->q.out, c, 16);
    for (int k = 0; k < nc && k < 16 && !D; k++)
        if (ow_is(x, c[k], "Reshape") && ow_const_ints(x, ow_nd(x, c[k])->in[1], sh, 8, 0) == 4)
            D = sh[3] > 0 ? sh[3] : (sh[2] > 0 && ly->q.N % sh[2] == 0 ? ly->q.N / sh[2] : 0);
    if (D <= 0 || ly->q.N % D || ly->k.N % D)
        return ow_fail_node(x, last_node(&ly->q), "%sq's output has no Reshape to (B, T, heads, head dim) with a fixed "
                            "head dim", "");
    if (dm->D && (dm->D != D || dm->H != ly->q.N / D || dm->Hkv != ly->k.N / D))
        return ow_fail_node(x, ly->q.mm, "%sheads other than layer 0's", "");
    dm->D = D, dm->H = ly->q.N / D, dm->Hkv = ly->k.N / D;
    int after = last_node(&ly->q);
    for (int k = 1; k < 3; k++) after = last_node(&qkv[k]) > after ? last_node(&qkv[k]) : after;
    if (!ow_next_linear(x, after, ly->q.N, C, &ly->o))
        return ow_fail_node(x, after, "%sno (heads x dim, C) o_proj linear follows q, k, v", "");
    for (int k = 0; k < 3; k++) ow_mark_linear(x, &qkv[k]);
    /* the attention: the nodes on a path from q, k or v to o_proj's input; one Softmax and two MatMul in all */
    static const char *const cnt_ops[] = {"Softmax", "MatMul", NULL};
    int counts[2], sm = 0, mm = 0;
    for (int k = 0; k < 3; k++) {
        unsigned char *before = malloc((size_t)x->n + 1);
        if (!before) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
        memcpy(before, x->role, (size_t)x->n);
        tp_status st = ow_mark_region(x, qkv[k].out, ly->o.in, R_ATTN, ATTN_OPS, "attention", cnt_ops, counts);
        for (int i = 0; !st && i < x->n; i++) /* count each node once over the three paths */
            if (x->role[i] == R_ATTN && before[i] != R_ATTN) sm += ow_is(x, i, "Softmax"), mm += ow_is(x, i, "MatMul");
        free(before);
        if (st) return st;
    }
    if (sm != 1 || mm != 2)
        return ow_fail_node(x, ly->o.mm, "%sthe attention before this linear has not one Softmax and two MatMul", "");
    ow_mark_linear(x, &ly->o);
    const int r1 = ow_add_of(x, ly->o.out, v);
    if (r1 < 0) return ow_fail_node(x, last_node(&ly->o), "%sno residual Add after o_proj", "");
    x->role[r1] = R_MAIN;
    const char *s1 = out0(x, r1);
    if (!rmsnorm_of(x, s1, C, &ly->n2)) return ow_fail_node(x, r1, "%sthe residual sum is not read by RMSNorm", "");
    ow_lin gu[2];
    if (linears_reading(x, ly->n2.out, C, gu, 2) != 2 || gu[0].N != gu[1].N)
        return ow_fail_node(x, ow_producer(x, ly->n2.out), "%sits output is not read by two linears of one width "
                            "(gate and up)", "");
    /* the gated MLP: act(gate) * up, act SiLU (gate * Sigmoid(gate): SwiGLU) or the tanh GELU (GeGLU, Gemma's):
     * gate is the one whose output the activation reads (Sigmoid, or Pow 3 in the tanh form) */
    const int g = ow_consumer_op(x, gu[0].out, "Sigmoid") >= 0 || ow_consumer_op(x, gu[0].out, "Pow") >= 0 ? 0 : 1;
    ly->gate = gu[g], ly->up = gu[1 - g];
    static const char *const act_ops[] = {"Mul", "Add", "Pow", "Tanh", "Sigmoid", "Div", "Cast", NULL};
    static const char *const act_count[] = {"Sigmoid", "Tanh", NULL};
    int prod = -1, act = -1, cu[8];
    const int ncu = ow_consumers(x, ly->up.out, cu, 8);
    for (int k = 0; k < ncu && k < 8 && prod < 0; k++) {
        const tp_onnx_node *pn = ow_nd(x, cu[k]);
        if (!ow_is(x, cu[k], "Mul") || pn->n_in != 2) continue;
        const char *a = !strcmp(pn->in[0], ly->up.out) ? pn->in[1] : pn->in[0];
        int cnt[2] = {0, 0};
        tp_status st = ow_mark_region(x, ly->gate.out, a, R_GELU, act_ops, "gated MLP activation", act_count, cnt);
        if (st) return st;
        if (cnt[0] + cnt[1] == 1) prod = cu[k], act = cnt[1] ? TP_ACT_GELU_TANH : TP_ACT_SILU;
    }
    if (prod < 0)
        return ow_fail_node(x, ly->gate.mm, "%snot a gated MLP: act(gate) times up, act SiLU (x * Sigmoid(x)) or the "
                            "tanh GELU", "");
    if (dm->n > 0 && (int)act != dm->act) return ow_fail_node(x, ly->gate.mm, "%san activation other than layer 0's", "");
    dm->act = act;
    x->role[prod] = R_GELU;
    if (dm->I && dm->I != ly->gate.N) return ow_fail_node(x, ly->gate.mm, "%san MLP width other than layer 0's", "");
    dm->I = ly->gate.N;
    if (!ow_linear_of(x, out0(x, prod), dm->I, C, &ly->down))
        return ow_fail_node(x, prod, "%sno (intermediate, C) down linear reads the product", "");
    ow_mark_linear(x, &ly->gate), ow_mark_linear(x, &ly->up), ow_mark_linear(x, &ly->down);
    const int r2 = ow_add_of(x, ly->down.out, s1);
    if (r2 < 0) return ow_fail_node(x, last_node(&ly->down), "%sno residual Add after down", "");
    x->role[r2] = R_MAIN;
    *next = out0(x, r2);
    return TP_OK;
}

/* theta and the llama3 scaling that give the file's inverse frequencies exactly (as tp_rope_inv_freq computes them,
 * HF's fp32 arithmetic): theta from the second frequency (1 / theta^(2/D); llama3 keeps the high frequencies), rounded
 * to what a config.json writes, or one of the usual values; llama3's factor from the lowest frequency, tried with HF's
 * low 1, high 4 and original contexts up to 2^20 (each one to 4096, then multiples of 256). Parameters that
 * reproduce every frequency bit for bit compute the same model, whichever the checkpoint's config.json said. */
static int rope_from(const float *f, int D, tp_rope *r) {
    if (D < 4 || !(f[1] > 0) || f[0] != 1.0f) return 0;
    const double t0 = pow((double)f[1], -(double)D / 2.0);
    float g[512];
    if (D / 2 > 512) return 0;
    /* llama3 scales the second frequency too when the original context is short: config.json's usual thetas */
    const double cand[] = {t0, round(t0), round(t0 / 10) * 10, round(t0 / 100) * 100, round(t0 / 1000) * 1000,
                           10000, 100000, 500000, 1000000, 5000000, 10000000};
    for (size_t k = 0; k < sizeof cand / sizeof cand[0]; k++) {
        tp_rope d = {TP_ROPE_DEFAULT, cand[k], 0, 0, 0, 0};
        tp_rope_inv_freq(&d, D, g);
        if (!memcmp(g, f, sizeof(float) * (size_t)(D / 2))) {
            *r = d;
            return 1;
        }
        /* llama3: the lowest frequency divided by factor */
        const double factor = round((double)g[D / 2 - 1] / (double)f[D / 2 - 1] * 2.0) / 2.0;
        if (!(factor > 1)) continue;
        /* every context up to 4096, then the multiples of 256 (configs write 8192, 32768, ...): a few thousand tries */
        for (int ctx = 1; ctx <= (1 << 20); ctx += ctx < 4096 ? 1 : 256) {
            tp_rope l3 = {TP_ROPE_LLAMA3, cand[k], factor, 1.0, 4.0, ctx};
            tp_rope_inv_freq(&l3, D, g);
            if (!memcmp(g, f, sizeof(float) * (size_t)(D / 2))) {
                *r = l3;
                return 1;
            }
        }
    }
    return 0;
}

/* The inverse frequencies: the (D/2) float constant from which a Cos node is computed (transformers multiplies it by
 * the positions with a Mul, or with a MatMul of the expanded tensors, version by version) */
static const tp_onnx_tensor *inv_freq_of(ow_ix *x, int64_t D) {
    for (int i = 0; i < tp_onnx_n_initializers(x->m); i++) {
        const tp_onnx_tensor *t = tp_onnx_initializer(x->m, i);
        if (t->elem_type != TP_ONNX_FLOAT || t->numel != D / 2) continue;
        memset(x->mark, 0, (size_t)x->n); /* forward from it, file order being topological */
        for (int k = 0; k < x->n; k++) {
            const tp_onnx_node *n = ow_nd(x, k);
            for (int j = 0; j < n->n_in && !x->mark[k]; j++)
                x->mark[k] = !strcmp(ow_unalias(x, n->in[j]), t->name) || (x->prod[k][j] >= 0 && x->mark[x->prod[k][j]]);
            if (x->mark[k] && ow_is(x, k, "Cos")) return t;
        }
    }
    return NULL;
}

static tp_status walk(ow_ix *x, dec_map *dm, const tp_onnx_value *in, const tp_onnx_value *out) {
    const int ge = ow_consumer_op(x, in->name, "Gather");
    const tp_onnx_node *gn = ge >= 0 ? ow_nd(x, ge) : NULL;
    const tp_onnx_attr *ax = gn ? tp_onnx_node_attr(gn, "axis") : NULL;
    dm->embed = gn && !strcmp(gn->in[1], in->name) ? ow_const_tensor(x, gn->in[0]) : NULL;
    if (!dm->embed || (ax && ax->i != 0) || dm->embed->ndim != 2 || !ow_float_type(dm->embed->elem_type))
        return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "input '%s' is not read by an embedding Gather of a "
                            "(vocab, C) initializer", in->name);
    x->role[ge] = R_MAIN;
    dm->V = dm->embed->dims[0], dm->C = dm->embed->dims[1];
    const char *v = out0(x, ge);
    const int sc = ow_consumer_op(x, v, "Mul"); /* Gemma's normalizer: a Mul by a scalar constant */
    if (sc >= 0) {
        const tp_onnx_node *sn = ow_nd(x, sc);
        const double f = ow_scalar_of(x, !strcmp(sn->in[0], v) ? sn->in[1] : sn->in[0]);
        if (!isnan(f)) {
            if ((float)f != (float)sqrt((double)dm->C))
                return ow_fail_node(x, sc, "%sthe embedding scaled by another value than sqrt(C) (Gemma's)", "");
            dm->embed_scale = (float)f;
            x->role[sc] = R_MAIN;
            v = out0(x, sc);
        }
    }
    for (;;) {
        /* a layer starts with RMSNorm followed by three linears; the final norm by the LM head */
        rms_t probe;
        unsigned char *save = malloc((size_t)x->n + 1);
        if (!save) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
        memcpy(save, x->role, (size_t)x->n);
        ow_lin t3[3];
        const int is_layer = rmsnorm_of(x, v, dm->C, &probe) && linears_reading(x, probe.out, dm->C, t3, 3) == 3;
        memcpy(x->role, save, (size_t)x->n); /* the probe's marks undone: the layer walk marks again */
        free(save);
        if (!is_layer) break;
        void *arr = dm->ly;
        tp_status st = ow_grow(x, &arr, &dm->cap, dm->n, sizeof *dm->ly);
        dm->ly = arr;
        if (st) return st;
        dec_layer *ly = &dm->ly[dm->n];
        memset(ly, 0, sizeof *ly);
        st = layer_at(x, dm, v, ly, &v);
        if (st) return st;
        if (dm->n == 0) dm->eps = ly->n1.eps;
        if (ly->n1.eps != dm->eps || ly->n2.eps != dm->eps)
            return ow_fail_node(x, ly->q.mm, "%san RMSNorm epsilon other than layer 0's", "");
        dm->n++;
    }
    if (dm->n == 0) return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "no decoder layer found");
    if (!rmsnorm_of(x, v, dm->C, &dm->norm) || dm->norm.eps != dm->eps) {
        int c[4];
        const int n = ow_consumers(x, v, c, 4);
        return n ? ow_fail_node(x, c[0], "%sexpected the final RMSNorm here", "")
                 : tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "no final norm");
    }
    const char *u = dm->norm.out;
    for (int s; (s = ow_consumer_op(x, u, "Slice")) >= 0;) { /* transformers' logits_to_keep slices (all positions) */
        x->role[s] = R_MAIN;
        u = out0(x, s);
    }
    if (!ow_linear_of(x, u, dm->C, dm->V, &dm->head) || dm->head.b || strcmp(dm->head.out, out->name) != 0)
        return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "the final norm is not read by a (C, vocab) LM head "
                            "without bias giving the graph's output '%s' (tied embeddings are not mapped)", out->name);
    ow_mark_linear(x, &dm->head);
    return TP_OK;
}

/* Tied embeddings: the exporter folds lm_head's transpose into a second constant; the head is the embedding when
 * every value of the one is the other's, bit for bit (then one copy is kept, as HF's tie_word_embeddings does) */
static int tied(const dec_map *dm) {
    const tp_onnx_tensor *e = dm->embed, *h = dm->head.w.t;
    if (e->elem_type != TP_ONNX_FLOAT || h->elem_type != TP_ONNX_FLOAT || dm->head.w.qtype || e->numel != h->numel)
        return 0;
    const float *ev = e->data, *hv = h->data;
    const int64_t V = dm->V, C = dm->C;
    for (int64_t v = 0; v < V; v++)
        for (int64_t k = 0; k < C; k++)
            if (ev[v * C + k] != (dm->head.wt ? hv[k * V + v] : hv[v * C + k])) return 0;
    return 1;
}

static tp_status set_params(ow_ix *x, const dec_map *dm, const tp_model *m, tp_params *p, tp_onnx_import_info *info) {
    tp_status st = m->family->params_table(m->cfg.bytes, p, x->err);
    char n[TP_NAME_LEN];
    if (!st) st = ow_set_param(x, p, "model.embed_tokens.weight", dm->embed, 1.0f, 0);
    for (int l = 0; l < dm->n && !st; l++) {
        const dec_layer *ly = &dm->ly[l];
        static const char *const lin_names[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                 "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        const ow_lin *ls[7] = {&ly->q, &ly->k, &ly->v, &ly->o, &ly->gate, &ly->up, &ly->down};
        for (int k = 0; k < 7 && !st; k++) {
            snprintf(n, sizeof n, "model.layers.%d.%s", l, lin_names[k]);
            st = ow_set_linear(x, p, n, ls[k], info);
        }
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        if (!st) st = ow_set_param(x, p, n, ly->n1.w, 1.0f, 0);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        if (!st) st = ow_set_param(x, p, n, ly->n2.w, 1.0f, 0);
    }
    if (!st) st = ow_set_param(x, p, "model.norm.weight", dm->norm.w, 1.0f, 0);
    const tp_decoder_config *c = (const tp_decoder_config *)(const void *)m->cfg.bytes;
    if (!st && !c->tie) st = ow_set_linear(x, p, "lm_head", &dm->head, info);
    if (!st) st = ow_check_filled(x, p);
    /* Gemma's RMSNorm multiplies by (1 + w): the exporter folds it into one constant, the family stores w (exact:
     * 1 + ((1 + w) - 1) gives the file's value back for |w| <= 1, Sterbenz) */
    for (int i = 0; !st && c->arch == TP_DEC_GEMMA && i < p->n_params; i++) {
        const size_t l = strlen(p->params[i].name);
        if (l >= 11 && !strcmp(p->params[i].name + l - 11, "norm.weight"))
            for (int64_t k = 0; k < p->params[i].numel; k++) p->params[i].data[k] -= 1.0f;
    }
    return st;
}

tp_status ow_import_decoder(ow_ix *x, const tp_onnx_value *in, const tp_onnx_value *out, tp_model *m,
                            tp_params *params, tp_onnx_import_info *info) {
    if (in->ndim != 2)
        return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "input '%s': int64 but not (batch, seq) token ids",
                            in->name);
    dec_map dm;
    memset(&dm, 0, sizeof dm);
    tp_status st = walk(x, &dm, in, out);
    if (!st) st = ow_check_rest(x, SHAPE_OPS, "Llama-style decoder", info);
    if (st) goto done;
    const dec_layer *l0 = &dm.ly[0];
    const int qkv_bias = l0->q.b != NULL;
    for (int l = 0; l < dm.n; l++) { /* one bias layout for every layer, as the family's table has */
        const dec_layer *ly = &dm.ly[l];
        if ((ly->q.b != NULL) != qkv_bias || (ly->k.b != NULL) != qkv_bias || (ly->v.b != NULL) != qkv_bias ||
            (ly->o.b != NULL) != (l0->o.b != NULL) || (ly->gate.b != NULL) != (l0->gate.b != NULL) ||
            (ly->up.b != NULL) != (l0->gate.b != NULL) || (ly->down.b != NULL) != (l0->gate.b != NULL)) {
            st = ow_fail_node(x, ly->q.mm, "%sbiases on some of the linears of a kind and not on others", "");
            goto done;
        }
    }
    const tp_onnx_tensor *fr = inv_freq_of(x, dm.D);
    tp_rope rope;
    if (!fr || !rope_from((const float *)fr->data, (int)dm.D, &rope)) {
        st = tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "%s: RoPE inverse frequencies that neither HF's default "
                          "nor its llama3 scaling (low 1, high 4) reproduce", fr ? fr->name : "no inv_freq constant");
        goto done;
    }
    if ((st = tp_model_preset("llama-tiny", m, x->err))) goto done;
    tp_decoder_config *c = (tp_decoder_config *)(void *)m->cfg.bytes;
    const char *base = strrchr(x->path, '/');
    snprintf(c->name, sizeof c->name, "%.63s", base ? base + 1 : x->path);
    c->arch = dm.embed_scale ? TP_DEC_GEMMA : qkv_bias ? TP_DEC_QWEN2 : TP_DEC_LLAMA;
    c->hidden = (int)dm.C, c->inter = (int)dm.I, c->layers = dm.n, c->heads = (int)dm.H;
    c->kv_heads = (int)dm.Hkv, c->head_dim = (int)dm.D, c->vocab = (int)dm.V;
    c->eps = dm.eps, c->rope = rope, c->act = (tp_act)dm.act, c->tie = tied(&dm);
    c->qkv_bias = qkv_bias, c->o_bias = l0->o.b != NULL, c->mlp_bias = l0->gate.b != NULL;
    c->sliding_window = 0;
    c->max_pos = 0; /* the graph does not say max_position_embeddings (llama-tiny's 2048 is not its): no limit */
    if ((st = tp_model_validate(m, x->err)) || (st = set_params(x, &dm, m, params, info))) goto done;
    if (info) {
        snprintf(info->family, sizeof info->family, "decoder");
        snprintf(info->summary, sizeof info->summary, "%s-style decoder",
                 dm.embed_scale ? "Gemma" : qkv_bias ? "Qwen2" : "Llama");
        snprintf(info->seq_dim, sizeof info->seq_dim, "%s", in->dim_param[1] ? in->dim_param[1] : "");
        info->fixed_seq = in->dim_param[1] ? 0 : in->dims[1];
    }
done:
    if (st) memset(m, 0, sizeof *m);
    free(dm.ly);
    return st;
}
