#include "ir/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static const char *KIND_NAMES[TP_OP_KIND_COUNT] = {
    [TP_OP_PATCH_EMBED] = "patch_embed", [TP_OP_EMBED_TOKENS] = "embed_tokens", [TP_OP_LAYERNORM] = "layernorm",
    [TP_OP_LINEAR] = "linear",           [TP_OP_ATTENTION] = "attention",        [TP_OP_GELU] = "gelu",
    [TP_OP_ADD] = "add",                 [TP_OP_POOL] = "pool",                  [TP_OP_TOKEN_EMBED] = "token_embed",
    [TP_OP_RMSNORM] = "rmsnorm",         [TP_OP_ROPE] = "rope",                  [TP_OP_GLU] = "glu",
    [TP_OP_KV_APPEND] = "kv_append",     [TP_OP_KV_ATTENTION] = "kv_attention",
    [TP_OP_ALL_REDUCE] = "all_reduce",   [TP_OP_RESHAPE] = "reshape",           [TP_OP_CONCAT] = "concat",
    [TP_OP_SLICE] = "slice",             [TP_OP_SILU] = "silu",                  [TP_OP_TIME_CONCAT] = "time_concat",
    [TP_OP_EULER] = "euler",             [TP_OP_MASKED_ATTENTION] = "masked_attention",
};

const char *tp_act_name(tp_act a) { return a == TP_ACT_SILU ? "silu" : a == TP_ACT_GELU_TANH ? "gelu_tanh" : "?"; }

void tp_rope_inv_freq(const tp_rope *r, int D, float *inv_freq) {
    /* HF: inv_freq = 1.0 / (base ** (arange(0, D, 2).float() / D)), every step in fp32 */
    for (int i = 0; i < D / 2; i++) {
        float e = (float)(2 * i) / (float)D;
        inv_freq[i] = 1.0f / powf((float)r->theta, e);
    }
    if (r->type != TP_ROPE_LLAMA3) return;
    /* HF _compute_llama3_parameters: wavelengths above the original context's low-frequency wavelength are
     * divided by factor, those under the high-frequency one kept, those between interpolated smoothly */
    const float factor = (float)r->factor, lo = (float)r->low_freq, hi = (float)r->high_freq;
    const float old = (float)r->orig_ctx, lo_wave = old / lo, hi_wave = old / hi;
    for (int i = 0; i < D / 2; i++) {
        float f = inv_freq[i], wave = (float)6.283185307179586 / f; /* 2 pi */
        float scaled = wave > lo_wave ? f / factor : f;
        float smooth = (old / wave - lo) / (hi - lo);
        float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
        int medium = !(wave < hi_wave) && !(wave > lo_wave);
        inv_freq[i] = medium ? smoothed : scaled;
    }
}

void tp_time_embedding(double t, int64_t D, float *e) {
    const int64_t h = D / 2;
    for (int64_t i = 0; i < h; i++) {
        const double f = h > 1 ? (double)i / (double)(h - 1) : 0.0, period = 4e-3 * pow(4.0 / 4e-3, f);
        const double a = t * (2.0 * 3.14159265358979323846 / period);
        e[i] = (float)sin(a);
        e[h + i] = (float)cos(a);
    }
}

void tp_graph_mark_state(tp_graph *g, int v) {
    CHECK(v >= 0 && v < g->n_values && g->values[v].kind == TP_VAL_ACT);
    g->values[v].kind = TP_VAL_STATE;
}

const char *tp_op_kind_name(tp_op_kind k) { return (unsigned)k < TP_OP_KIND_COUNT ? KIND_NAMES[k] : "?"; }

void tp_graph_init(tp_graph *g, int64_t batch) {
    memset(g, 0, sizeof *g);
    g->input = g->output = -1;
    g->batch = batch;
}

void tp_graph_free(tp_graph *g) {
    free(g->values);
    free(g->ops);
    memset(g, 0, sizeof *g);
}

int tp_graph_op_out(const tp_graph *g, int i) { return g->ops[i].out; }

void tp_graph_tap(tp_graph *g, int v, const char *stage) {
    CHECK(g->n_taps < TP_MAX_TAPS && v >= 0 && v < g->n_values);
    tp_tap *t = &g->taps[g->n_taps++];
    t->value = v;
    snprintf(t->stage, sizeof t->stage, "%s", stage);
}

tp_status tp_graph_check_ranks(const tp_graph *const *g, int n, tp_error *err) {
    if (n < 1) return tp_fail(err, TP_ERR_ARG, "%d ranks", n);
    for (int r = 0; r < n; r++) {
        if ((g[r]->tp_size > 1 ? g[r]->tp_size : 1) != n || (n > 1 && g[r]->tp_rank != r))
            return tp_fail(err, TP_ERR_ARG, "graph %d is rank %d of %d, not rank %d of %d", r, g[r]->tp_rank,
                           g[r]->tp_size, r, n);
        int same = g[r]->n_ops == g[0]->n_ops && g[r]->kv_len == g[0]->kv_len && g[r]->tokens == g[0]->tokens &&
                   g[r]->batch == g[0]->batch;
        for (int i = 0; same && i < g[0]->n_ops; i++) same = g[r]->ops[i].kind == g[0]->ops[i].kind;
        if (!same) return tp_fail(err, TP_ERR_ARG, "rank %d's graph is not rank 0's shard of the same step", r);
    }
    return TP_OK;
}

int64_t tp_value_numel(const tp_value *v) {
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    return n;
}

int tp_graph_add_value(tp_graph *g, const char *name, tp_value_kind kind, int ndim, const int64_t *shape,
                       int param_index) {
    CHECK(ndim >= 0 && ndim <= TP_MAX_DIMS);
    if (g->n_values == g->cap_values) {
        g->cap_values = g->cap_values ? 2 * g->cap_values : 64;
        g->values = realloc(g->values, sizeof(tp_value) * (size_t)g->cap_values);
        CHECK_ALLOC(g->values);
    }
    tp_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->kind = kind;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->shape[i] = shape[i];
    v->producer = -1;
    v->param_index = param_index;
    if (kind == TP_VAL_INPUT) {
        CHECK(g->n_inputs < TP_MAX_INPUTS);
        g->inputs[g->n_inputs++] = g->n_values;
    }
    return g->n_values++;
}

int64_t tp_graph_input_layout(const tp_graph *g, int64_t *off) {
    int64_t row = 0;
    for (int k = 0; k < g->n_inputs; k++) {
        const tp_value *v = &g->values[g->inputs[k]];
        if (off) off[k] = row;
        row += v->shape[0] > 0 ? tp_value_numel(v) / v->shape[0] : 0;
    }
    return row;
}

/* FLOP conventions (one multiply-add = 2 FLOP, as timm/fvcore's GMACs x 2):
 *   GEMM 2*M*N*K (+ M*N for the bias); attention 4*B*H*T*T*D for Q K^T and P V plus ~5*B*H*T*T for the
 *   softmax (scale, max, subtract, exp, sum, divide); LayerNorm ~8 per element; GELU ~8 per element (erf
 *   counted as a few operations); add 1; pooling 1 per summed element. Only the matrix products count
 *   toward matmul_flop, the figure timm's model tables report. */
static void fill_costs(tp_graph *g, tp_op *op) {
    const tp_value *o = &g->values[op->out];
    const tp_value *x = &g->values[op->in[0]];
    double out_n = (double)tp_value_numel(o);
    op->flop = op->matmul_flop = 0;
    switch (op->kind) {
    case TP_OP_PATCH_EMBED: {
        const tp_value *w = &g->values[op->in[1]];
        op->gemm_n = w->shape[0];
        op->gemm_k = w->shape[1] * w->shape[2] * w->shape[3];
        op->gemm_m = o->shape[0] * o->shape[1];
        op->matmul_flop = 2.0 * (double)op->gemm_m * (double)op->gemm_n * (double)op->gemm_k;
        op->flop = op->matmul_flop + out_n;
        break;
    }
    case TP_OP_LINEAR: {
        const tp_value *w = &g->values[op->in[1]];
        op->gemm_n = w->shape[0];
        op->gemm_k = w->shape[1];
        op->gemm_m = tp_value_numel(x) / op->gemm_k;
        op->matmul_flop = 2.0 * (double)op->gemm_m * (double)op->gemm_n * (double)op->gemm_k;
        op->flop = op->matmul_flop + (op->n_in > 2 ? out_n : 0);
        break;
    }
    case TP_OP_ATTENTION: {
        double B = (double)x->shape[0], T = (double)x->shape[1], H = op->heads, D = op->head_dim;
        op->matmul_flop = 4.0 * B * H * T * T * D;
        op->flop = op->matmul_flop + 5.0 * B * H * T * T;
        break;
    }
    case TP_OP_LAYERNORM: op->flop = 8.0 * out_n; break;
    case TP_OP_GELU: op->flop = 8.0 * out_n; break;
    case TP_OP_ADD: op->flop = out_n; break;
    case TP_OP_EMBED_TOKENS: op->flop = out_n; break;
    case TP_OP_POOL: op->flop = op->pool_mode == 1 ? (double)tp_value_numel(x) : 0; break;
    case TP_OP_TOKEN_EMBED: op->flop = op->scale != 1.0f ? out_n : 0; break;
    case TP_OP_RMSNORM: op->flop = 5.0 * out_n; break;
    case TP_OP_ROPE: op->flop = 3.0 * out_n; break;        /* two multiplies and an add per element */
    case TP_OP_GLU: op->flop = 10.0 * out_n; break;        /* the activation (~8) and the product */
    case TP_OP_KV_APPEND: op->flop = 0; break;
    case TP_OP_ALL_REDUCE: op->flop = 0; break; /* its additions are the network's, not counted as the model's */
    case TP_OP_RESHAPE:
    case TP_OP_CONCAT:
    case TP_OP_SLICE: op->flop = 0; break;
    case TP_OP_SILU: op->flop = 5.0 * out_n; break;
    case TP_OP_TIME_CONCAT: op->flop = 0; break; /* the embedding is a constant of the step */
    case TP_OP_EULER: op->flop = 2.0 * out_n; break;
    case TP_OP_MASKED_ATTENTION: {
        /* every (query, key) pair of both sources counted, masked or not (what a dense kernel computes) */
        const double B = (double)x->shape[0], Tq = (double)x->shape[1], H = op->heads, D = op->head_dim;
        double Tk = (double)g->values[op->in[1]].shape[1];
        if (op->n_in == 6) Tk += (double)g->values[op->in[3]].shape[1];
        op->matmul_flop = 4.0 * B * H * Tq * Tk * D;
        op->flop = op->matmul_flop + 5.0 * B * H * Tq * Tk;
        break;
    }
    case TP_OP_KV_ATTENTION: {
        /* each of the T queries sees past + t + 1 keys (causal): T * past + T (T + 1) / 2 (query, key) pairs */
        double B = (double)x->shape[0], T = (double)x->shape[1], H = op->heads, D = op->head_dim;
        double pairs = T * (double)g->past + T * (T + 1) / 2;
        op->matmul_flop = 4.0 * B * H * pairs * D;
        op->flop = op->matmul_flop + 5.0 * B * H * pairs;
        break;
    }
    default: break;
    }
}

int tp_graph_add_op(tp_graph *g, const tp_op *proto, const int *in, int n_in, int out_ndim,
                    const int64_t *out_shape, const char *out_name) {
    CHECK(n_in >= 1 && n_in <= TP_OP_MAX_IN);
    if (g->n_ops == g->cap_ops) {
        g->cap_ops = g->cap_ops ? 2 * g->cap_ops : 64;
        g->ops = realloc(g->ops, sizeof(tp_op) * (size_t)g->cap_ops);
        CHECK_ALLOC(g->ops);
    }
    char name[TP_NAME_LEN + 8];
    if (out_name) snprintf(name, sizeof name, "%s", out_name);
    else snprintf(name, sizeof name, "%s.out", proto->layer);
    int out = tp_graph_add_value(g, name, TP_VAL_ACT, out_ndim, out_shape, -1);
    tp_op *op = &g->ops[g->n_ops];
    *op = *proto;
    for (int i = 0; i < n_in; i++) {
        CHECK(in[i] >= 0 && in[i] < g->n_values);
        op->in[i] = in[i];
    }
    op->n_in = n_in;
    op->out = out;
    g->values[out].producer = g->n_ops;
    fill_costs(g, op);
    return g->n_ops++;
}

double tp_graph_flop(const tp_graph *g) {
    double s = 0;
    for (int i = 0; i < g->n_ops; i++) s += g->ops[i].flop;
    return s;
}

double tp_graph_matmul_flop(const tp_graph *g) {
    double s = 0;
    for (int i = 0; i < g->n_ops; i++) s += g->ops[i].matmul_flop;
    return s;
}

void tp_graph_last_use(const tp_graph *g, int *last_use) {
    for (int v = 0; v < g->n_values; v++) last_use[v] = -1;
    for (int i = 0; i < g->n_ops; i++)
        for (int j = 0; j < g->ops[i].n_in; j++) last_use[g->ops[i].in[j]] = i;
}

static const char *const CAT_NAMES[TP_CAT_COUNT] = {
    [TP_CAT_GEMM] = "GEMM",           [TP_CAT_ATTENTION] = "attention", [TP_CAT_NORM] = "normalization",
    [TP_CAT_ACTIVATION] = "activation", [TP_CAT_ELEMENTWISE] = "elementwise", [TP_CAT_QUANT] = "quantize",
    [TP_CAT_CONVERT] = "conversion",  [TP_CAT_MEMORY] = "memory",       [TP_CAT_OTHER] = "other",
    [TP_CAT_COMM] = "communication",
};

const char *tp_category_name(tp_category c) { return (unsigned)c < TP_CAT_COUNT ? CAT_NAMES[c] : "?"; }

int tp_category_parse(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < TP_CAT_COUNT; i++)
        if (strcmp(s, CAT_NAMES[i]) == 0) return i;
    return -1;
}

int tp_op_kind_pipeline(tp_op_kind k) {
    return k == TP_OP_RESHAPE || k == TP_OP_CONCAT || k == TP_OP_SLICE || k == TP_OP_SILU || k == TP_OP_TIME_CONCAT ||
           k == TP_OP_EULER || k == TP_OP_MASKED_ATTENTION;
}

size_t tp_layer_stage_len(const char *layer) {
    const char *dot = strchr(layer, '.');
    return dot ? (size_t)(dot - layer) : 0;
}

tp_category tp_op_category(tp_op_kind k) {
    switch (k) {
    case TP_OP_PATCH_EMBED:
    case TP_OP_LINEAR: return TP_CAT_GEMM;
    case TP_OP_ATTENTION:
    case TP_OP_MASKED_ATTENTION:
    case TP_OP_KV_ATTENTION: return TP_CAT_ATTENTION;
    case TP_OP_LAYERNORM:
    case TP_OP_RMSNORM: return TP_CAT_NORM;
    case TP_OP_GELU:
    case TP_OP_SILU:
    case TP_OP_GLU: return TP_CAT_ACTIVATION;
    case TP_OP_KV_APPEND:
    case TP_OP_RESHAPE:
    case TP_OP_CONCAT:
    case TP_OP_SLICE: return TP_CAT_MEMORY;
    case TP_OP_TOKEN_EMBED:
    case TP_OP_ROPE:
    case TP_OP_EMBED_TOKENS:
    case TP_OP_ADD:
    case TP_OP_TIME_CONCAT:
    case TP_OP_EULER:
    case TP_OP_POOL: return TP_CAT_ELEMENTWISE;
    case TP_OP_ALL_REDUCE: return TP_CAT_COMM;
    default: return TP_CAT_OTHER;
    }
}

int tp_value_readers(const tp_graph *g, int v) {
    int n = 0;
    for (int i = 0; i < g->n_ops; i++)
        for (int j = 0; j < g->ops[i].n_in; j++) n += g->ops[i].in[j] == v;
    return n;
}
