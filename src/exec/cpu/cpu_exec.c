#include "exec/cpu/cpu_exec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "exec/cpu/cpu_ops.h"
#include "formats/dtype.h"
#include "formats/qformat.h"
#include "formats/precision.h"

static int narrow(tp_dtype t) { return t == TP_F16 || t == TP_BF16; }

/* Every buffer of the executor goes through these two, counted in the session's watch when it has one: what
 * tp_cpu_mem_estimate computes ahead, and its test measures */
static void *w_alloc(tp_cpu_watch *w, size_t bytes) {
    void *p = malloc(bytes);
    if (p && w) {
        w->bytes_now += (int64_t)bytes;
        if (w->bytes_now > w->bytes_peak) w->bytes_peak = w->bytes_now;
    }
    return p;
}

static void w_free(tp_cpu_watch *w, void *p, size_t bytes) {
    if (p && w) w->bytes_now -= (int64_t)bytes;
    free(p);
}

/* the bytes of a value's own buffer (an activation, a state, an unpacked input or a rounded parameter) */
static size_t value_bytes(const tp_value *v) {
    const int64_t n = tp_value_numel(v);
    return sizeof(float) * (size_t)(n > 0 ? n : 1);
}

/* Rounds n values to what storage type t holds (fp16/bf16), out may equal in. */
static void round_to(tp_dtype t, const float *in, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = t == TP_F16 ? tp_f16_to_f32(tp_f32_to_f16(in[i])) : tp_bf16_to_f32(tp_f32_to_bf16(in[i]));
}

/* An FP8 KV cache (plan.c plan_kv_cache): the rows just appended, past .. past + T - 1 of both planes of c (2, B, L,
 * W), replaced by e4m3(x / s) s with s = max(amax of k, amax of v) / 448, as the engine stores them. */
static tp_status kv_rows_e4m3(const tp_op *op, const tp_value *c, const float *act_amax, int64_t past, int64_t T,
                              float *kv, tp_error *err) {
    const float ak = act_amax ? act_amax[op->in[0]] : NAN, av = act_amax ? act_amax[op->in[1]] : NAN;
    if (!(ak >= 0) || !(av >= 0) || !(fmaxf(ak, av) > 0))
        return tp_fail(err, TP_ERR_ARG, "layer %s: an fp8 KV cache needs the calibrated amax of k and v", op->layer);
    const float s = (float)((double)fmaxf(ak, av) / 448.0);
    const int64_t B = c->shape[1], L = c->shape[2], W = c->shape[3];
    for (int64_t pb = 0; pb < 2 * B; pb++)
        for (int64_t j = 0; j < T * W; j++) {
            float *x = kv + (pb * L + past) * W + j;
            *x = tp_e4m3_to_f32(tp_f32_to_e4m3(*x / s)) * s;
        }
    return TP_OK;
}

/* W8A8 FP8: y = (e4m3(x / xs) xs) @ qdq(W)^T + bias, x's scale xs static (calibrated), W's amax / 448: the values
 * the engine's FP8 GEMM (or GEMV) multiplies, whether x was stored in E4M3 or is quantized as it is read */
static tp_status linear_w8a8(tp_cpu_watch *w, const tp_op *op, float xs, const float *x, const float *W,
                             const float *bias, float *y, tp_error *err) {
    const int64_t M = op->gemm_m, N = op->gemm_n, K = op->gemm_k;
    float *qx = w_alloc(w, sizeof(float) * (size_t)(M * K)), *qw = w_alloc(w, sizeof(float) * (size_t)(N * K));
    tp_status st = qx && qw ? TP_OK : tp_fail(err, TP_ERR_OOM, "out of host memory emulating %s", op->layer);
    for (int64_t j = 0; !st && j < M * K; j++) qx[j] = tp_e4m3_to_f32(tp_f32_to_e4m3(x[j] / xs)) * xs;
    if (!st) st = tp_qdq_f32(TP_QF_FP8_TENSOR, W, qw, N, K, 1, 0.0f, NULL, err);
    if (!st) tp_cpu_linear(qx, qw, bias, y, M, N, K);
    w_free(w, qx, sizeof(float) * (size_t)(M * K));
    w_free(w, qw, sizeof(float) * (size_t)(N * K));
    return st;
}

/* y = (qdq(x) @ qdq(W)^T) * s2x * s2w + bias, in the plan's format qf */
static tp_status linear_emulated(tp_cpu_watch *w, const tp_op *op, tp_qformat qf, float act_global, const float *x,
                                 const float *W, const float *bias, float *y, tp_error *err) {
    const int64_t M = op->gemm_m, N = op->gemm_n, K = op->gemm_k;
    float *qx = w_alloc(w, sizeof(float) * (size_t)(M * K)), *qw = w_alloc(w, sizeof(float) * (size_t)(N * K));
    float gx = 1.0f, gw = 1.0f;
    tp_status st = TP_OK;
    if (!qx || !qw) st = tp_fail(err, TP_ERR_OOM, "out of host memory emulating %s", op->layer);
    if (!st) st = tp_qdq_f32(qf, x, qx, M, K, 0, act_global, &gx, err);
    if (!st) st = tp_qdq_f32(qf, W, qw, N, K, 1, 0.0f, &gw, err);
    if (!st) {
        tp_cpu_linear(qx, qw, NULL, y, M, N, K);
        const float alpha = gx * gw;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) y[m * N + n] = y[m * N + n] * alpha + (bias ? bias[n] : 0.0f);
    }
    w_free(w, qx, sizeof(float) * (size_t)(M * K));
    w_free(w, qw, sizeof(float) * (size_t)(N * K));
    return st;
}

static tp_status run(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                     tp_cpu_session *sess, const float *input, float *output, tp_error *err);

/* A run without a session: a graph without state, or one that starts from an empty cache (a prefill). */
static tp_status run_alone(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                           const float *input, float *output, tp_error *err) {
    if (g->past > 0)
        return tp_fail(err, TP_ERR_ARG, "the graph runs after %lld cached tokens: it needs a session holding them "
                       "(tp_cpu_run_session)", (long long)g->past);
    tp_cpu_session s = {0};
    tp_status st = run(g, params, plan, act_amax, &s, input, output, err);
    tp_cpu_session_free(&s);
    return st;
}

tp_status tp_cpu_run(const tp_graph *g, const tp_params *params, const float *input, float *output, tp_error *err) {
    return run_alone(g, params, NULL, NULL, input, output, err);
}

tp_status tp_cpu_run_emulated(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                              const float *input, float *output, tp_error *err) {
    return run_alone(g, params, plan, act_amax, input, output, err);
}

tp_status tp_cpu_run_session(const tp_graph *g, const tp_params *params, tp_cpu_session *s, const float *input,
                             float *output, tp_error *err) {
    return run(g, params, NULL, NULL, s, input, output, err);
}

tp_status tp_cpu_run_session_emulated(const tp_graph *g, const tp_params *params, const tp_plan *plan,
                                      const float *act_amax, tp_cpu_session *s, const float *input, float *output,
                                      tp_error *err) {
    return run(g, params, plan, act_amax, s, input, output, err);
}

void tp_cpu_session_free(tp_cpu_session *s) {
    tp_cpu_watch *w = s->watch;
    for (int i = 0; i < s->n; i++) w_free(w, s->bufs[i].data, sizeof(float) * (size_t)s->bufs[i].numel);
    free(s->bufs);
    memset(s, 0, sizeof *s);
    s->watch = w;
}

/* The session's buffer for state value v: found by name (its size checked), or allocated and poisoned with NaN,
 * so that a read of a position no step wrote shows in the output. */
static tp_status state_buffer(tp_cpu_session *s, const tp_value *v, float **out, tp_error *err) {
    const int64_t n = tp_value_numel(v);
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->bufs[i].name, v->name) != 0) continue;
        if (s->bufs[i].numel != n)
            return tp_fail(err, TP_ERR_SHAPE, "state %s: %lld values in this graph, %lld in the session", v->name,
                           (long long)n, (long long)s->bufs[i].numel);
        *out = s->bufs[i].data;
        return TP_OK;
    }
    tp_cpu_state_buf *nb = realloc(s->bufs, sizeof *nb * (size_t)(s->n + 1));
    if (!nb) return tp_fail(err, TP_ERR_OOM, "out of host memory for %s", v->name);
    s->bufs = nb;
    tp_cpu_state_buf *b = &s->bufs[s->n];
    snprintf(b->name, sizeof b->name, "%s", v->name);
    b->numel = n;
    if (!(b->data = w_alloc(s->watch, sizeof(float) * (size_t)n)))
        return tp_fail(err, TP_ERR_OOM, "out of host memory for %s (%lld floats)", v->name, (long long)n);
    for (int64_t i = 0; i < n; i++) b->data[i] = NAN;
    s->n++;
    *out = b->data;
    return TP_OK;
}

/* Token ids (stored as fp32) as integers, each checked: an integer in [0, V). */
static tp_status token_ids(tp_cpu_watch *w, const tp_op *op, const float *x, int64_t n, int64_t V, int32_t **ids,
                           tp_error *err) {
    if (!(*ids = w_alloc(w, sizeof(int32_t) * (size_t)n))) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int64_t i = 0; i < n; i++) {
        if (!(x[i] >= 0 && x[i] < (float)V && x[i] == floorf(x[i])))
            return tp_fail(err, TP_ERR_ARG, "%s: token %lld is %g, not an id in [0, %lld)", op->layer, (long long)i,
                           (double)x[i], (long long)V);
        (*ids)[i] = (int32_t)x[i];
    }
    return TP_OK;
}

/* The decoder ops (graph.h), past the cache position of this run. */
static tp_status run_decoder_op(tp_cpu_watch *w, const tp_graph *g, const tp_op *op, float **buf, int64_t past,
                                float *y, tp_error *err) {
    const tp_value *o = &g->values[op->out], *xv = &g->values[op->in[0]];
    const float *x = buf[op->in[0]];
    const int64_t n = tp_value_numel(o);
    switch (op->kind) {
    case TP_OP_TOKEN_EMBED: {
        const tp_value *tab = &g->values[op->in[1]];
        int32_t *ids = NULL;
        tp_status st = token_ids(w, op, x, tp_value_numel(xv), tab->shape[0], &ids, err);
        if (!st) tp_cpu_token_embed(ids, buf[op->in[1]], y, tp_value_numel(xv), tab->shape[1], op->scale);
        w_free(w, ids, sizeof(int32_t) * (size_t)tp_value_numel(xv));
        return st;
    }
    case TP_OP_RMSNORM: {
        const int64_t C = o->shape[o->ndim - 1];
        tp_cpu_rmsnorm(x, buf[op->in[1]], y, n / C, C, op->eps, op->norm_offset);
        return TP_OK;
    }
    case TP_OP_ROPE: {
        const int64_t B = xv->shape[0];
        const size_t ib = sizeof(float) * (size_t)(op->head_dim / 2 + 1), sb = sizeof(int64_t) * (size_t)B;
        float *inv = w_alloc(w, ib);
        int64_t *start = op->n_in > 1 ? w_alloc(w, sb) : NULL;
        if (!inv || (op->n_in > 1 && !start)) {
            w_free(w, inv, ib);
            w_free(w, start, sb);
            return tp_fail(err, TP_ERR_OOM, "out of host memory");
        }
        for (int64_t b = 0; start && b < B; b++) start[b] = op->prefix + (int64_t)buf[op->in[1]][b];
        tp_rope_inv_freq(&op->rope, op->head_dim, inv);
        tp_cpu_rope_at(x, y, B, xv->shape[1], op->heads, op->head_dim, inv, past, start);
        w_free(w, inv, ib);
        w_free(w, start, sb);
        return TP_OK;
    }
    case TP_OP_GLU: tp_cpu_glu(x, buf[op->in[1]], y, n, op->act); return TP_OK;
    case TP_OP_KV_APPEND:
        tp_cpu_kv_append(x, buf[op->in[1]], y, xv->shape[0], xv->shape[1], o->shape[2], o->shape[3], past);
        return TP_OK;
    case TP_OP_KV_ATTENTION: {
        const tp_value *cv = &g->values[op->in[1]];
        const int64_t B = xv->shape[0], T = xv->shape[1], L = cv->shape[2], W = cv->shape[3];
        const int64_t H = op->heads, D = op->head_dim;
        const float *kv = buf[op->in[1]];
        tp_cpu_attn_args a = {.q = x, .k = kv, .v = kv + B * L * W, .o = y, .q_bs = T * H * D, .q_rs = H * D,
                              .k_bs = L * W, .k_rs = W, .v_bs = L * W, .v_rs = W, .o_bs = T * H * D, .o_rs = H * D,
                              .B = B, .H = H, .Hkv = op->kv_heads, .Tq = T, .Tkv = past + T, .D = D, .causal = 1,
                              .scale = op->scale};
        tp_cpu_attention_ex(&a);
        return TP_OK;
    }
    default: CHECK(!"not a decoder op"); return TP_OK;
    }
}

/* The pipelines' ops (graph.h, issue 21) */
static tp_status run_pipeline_op(const tp_graph *g, const tp_op *op, float **buf, float *y, tp_error *err) {
    const tp_value *o = &g->values[op->out], *xv = &g->values[op->in[0]];
    const float *x = buf[op->in[0]];
    const int64_t n = tp_value_numel(o);
    switch (op->kind) {
    case TP_OP_RESHAPE: memcpy(y, x, sizeof(float) * (size_t)n); return TP_OK;
    case TP_OP_CONCAT:
        tp_cpu_concat_tokens(x, buf[op->in[1]], y, xv->shape[0], xv->shape[1], g->values[op->in[1]].shape[1],
                             xv->shape[2]);
        return TP_OK;
    case TP_OP_SLICE:
        tp_cpu_slice_tokens(x, y, xv->shape[0], xv->shape[1], op->prefix, o->shape[1], xv->shape[2]);
        return TP_OK;
    case TP_OP_SILU: tp_cpu_silu(x, y, n); return TP_OK;
    case TP_OP_TIME_CONCAT:
        tp_cpu_time_concat(x, y, xv->shape[0], xv->shape[1], xv->shape[2], o->shape[2] - xv->shape[2], op->scale);
        return TP_OK;
    case TP_OP_EULER: tp_cpu_euler(x, buf[op->in[1]], y, n, op->scale); return TP_OK;
    case TP_OP_MASKED_ATTENTION: {
        const int two = op->n_in == 6;
        const tp_value *kv = &g->values[op->in[1]];
        tp_cpu_masked_attn a = {.q = x, .k = buf[op->in[1]], .v = buf[op->in[2]],
                                .kp = two ? buf[op->in[3]] : NULL, .vp = two ? buf[op->in[4]] : NULL,
                                .valid = buf[op->in[two ? 5 : 3]], .o = y, .B = xv->shape[0], .H = op->heads,
                                .Hkv = op->kv_heads, .D = op->head_dim, .Tq = xv->shape[1], .Tk = kv->shape[1],
                                .Tp = two ? g->values[op->in[3]].shape[1] : 0, .prefix = op->prefix,
                                .first_block = op->pool_mode == 1, .scale = op->scale};
        tp_cpu_masked_attention(&a);
        return TP_OK;
    }
    default: return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: op %s is not a pipeline op", op->layer,
                            tp_op_kind_name(op->kind));
    }
}

/* One rank's run of its graph (one rank without tensor parallelism): its buffers per value (parameters, the
 * input, state and the live activations), owned copies of rounded parameters, each value's last reader. */
typedef struct {
    const tp_graph *g;
    const tp_params *params;
    tp_cpu_session *sess;
    float **buf, **rounded;
    int *last;
} rank_run;

/* Input value v of a graph of several inputs, copied out of the packed per-sample rows (tp_graph.inputs) into a
 * tensor of its own in *out (freed with the run's rounded copies). */
static tp_status unpack_input(tp_cpu_watch *wa, const tp_graph *g, int v, const float *input, float **out,
                              tp_error *err) {
    int64_t off[TP_MAX_INPUTS];
    const int64_t row = tp_graph_input_layout(g, off);
    int k = 0;
    while (k < g->n_inputs && g->inputs[k] != v) k++;
    CHECK(k < g->n_inputs);
    const tp_value *val = &g->values[v];
    const int64_t B = val->shape[0], w = B > 0 ? tp_value_numel(val) / B : 0;
    if (!(*out = w_alloc(wa, value_bytes(val))))
        return tp_fail(err, TP_ERR_OOM, "out of host memory (CPU executor)");
    for (int64_t b = 0; b < B; b++) memcpy(*out + b * w, input + b * row + off[k], sizeof(float) * (size_t)w);
    return TP_OK;
}

static tp_status rank_init(rank_run *r, const tp_plan *plan, const float *input, tp_error *err) {
    const tp_graph *g = r->g;
    r->buf = calloc((size_t)g->n_values, sizeof(float *));
    r->rounded = calloc((size_t)g->n_values, sizeof(float *));
    r->last = malloc(sizeof(int) * (size_t)g->n_values);
    if (!r->buf || !r->last || !r->rounded) return tp_fail(err, TP_ERR_OOM, "out of host memory (CPU executor)");
    tp_graph_last_use(g, r->last);
    tp_status st = TP_OK;
    for (int v = 0; v < g->n_values; v++) {
        const tp_value *val = &g->values[v];
        if (val->kind == TP_VAL_PARAM) r->buf[v] = r->params->params[val->param_index].data;
        else if (val->kind == TP_VAL_INPUT && g->n_inputs <= 1) r->buf[v] = (float *)input;
        else if (val->kind == TP_VAL_INPUT && (st = unpack_input(r->sess->watch, g, v, input, &r->rounded[v], err)))
            return st;
        if (val->kind == TP_VAL_INPUT && g->n_inputs > 1) r->buf[v] = r->rounded[v];
        else if (val->kind == TP_VAL_STATE && (st = state_buffer(r->sess, val, &r->buf[v], err))) return st;
        /* emulating a plan: parameters the engine stores in fp16/bf16 are read rounded to that type */
        if (plan && val->kind == TP_VAL_PARAM && plan->value_qf[v] == TP_QF_NONE && narrow(plan->value_dt[v])) {
            const tp_param *p = &r->params->params[val->param_index];
            if (!(r->rounded[v] = w_alloc(r->sess->watch, value_bytes(val))))
                return tp_fail(err, TP_ERR_OOM, "out of host memory (CPU executor)");
            round_to(plan->value_dt[v], p->data, r->rounded[v], p->numel);
            r->buf[v] = r->rounded[v];
        }
    }
    return TP_OK;
}

static void rank_free(rank_run *r) {
    const tp_graph *g = r->g;
    tp_cpu_watch *w = r->sess->watch;
    if (r->buf && r->last)
        for (int v = 0; v < g->n_values; v++)
            if (g->values[v].kind == TP_VAL_ACT) w_free(w, r->buf[v], value_bytes(&g->values[v]));
    if (r->rounded)
        for (int v = 0; v < g->n_values; v++) w_free(w, r->rounded[v], value_bytes(&g->values[v]));
    free(r->rounded);
    free(r->buf);
    free(r->last);
}

/* op i's output buffer: the state's own, or a new one */
static tp_status op_output(rank_run *r, int i, tp_error *err) {
    const tp_value *o = &r->g->values[r->g->ops[i].out];
    const int64_t n = tp_value_numel(o);
    float *y = o->kind == TP_VAL_STATE ? r->buf[r->g->ops[i].out] : w_alloc(r->sess->watch, value_bytes(o));
    if (!y) return tp_fail(err, TP_ERR_OOM, "out of host memory for %s (%lld floats)", o->name, (long long)n);
    r->buf[r->g->ops[i].out] = y;
    return TP_OK;
}

/* Computes op i of one rank (every op but the all-reduce) into its output buffer. */
static tp_status rank_op(rank_run *r, const tp_plan *plan, const float *act_amax, int i, tp_error *err) {
    const tp_graph *g = r->g;
    float **buf = r->buf;
    const tp_op *op = &g->ops[i];
    const tp_value *o = &g->values[op->out];
    const tp_value *xv = &g->values[op->in[0]];
    tp_cpu_watch *w = r->sess->watch;
    int64_t n = tp_value_numel(o);
    tp_status st = op_output(r, i, err);
    if (st) return st;
    float *y = buf[op->out];
    float *x = buf[op->in[0]];
    switch (op->kind) {
    case TP_OP_PATCH_EMBED: {
        int64_t B = xv->shape[0], H = xv->shape[2], W = xv->shape[3], P = op->patch;
        float *cols = w_alloc(w, sizeof(float) * (size_t)(op->gemm_m * op->gemm_k));
        if (!cols) {
            st = tp_fail(err, TP_ERR_OOM, "out of host memory for im2col of %s", op->layer);
            return st;
        }
        tp_cpu_im2col(x, cols, B, H, W, P);
        /* emulating a plan: the engine's im2col writes the GEMM's input type */
        if (plan && narrow(plan->value_dt[op->in[1]]))
            round_to(plan->value_dt[op->in[1]], cols, cols, op->gemm_m * op->gemm_k);
        tp_cpu_linear(cols, buf[op->in[1]], buf[op->in[2]], y, op->gemm_m, op->gemm_n, op->gemm_k);
        w_free(w, cols, sizeof(float) * (size_t)(op->gemm_m * op->gemm_k));
        break;
    }
    case TP_OP_EMBED_TOKENS: {
        int has_cls = op->n_in > 2;
        int64_t Np = xv->shape[1];
        tp_cpu_embed_tokens(x, has_cls ? buf[op->in[2]] : NULL, buf[op->in[1]], y, xv->shape[0], Np,
                            xv->shape[2], has_cls);
        break;
    }
    case TP_OP_LAYERNORM: {
        int64_t C = o->shape[o->ndim - 1];
        tp_cpu_layernorm(x, buf[op->in[1]], buf[op->in[2]], y, n / C, C, op->eps);
        break;
    }
    case TP_OP_LINEAR: {
        tp_qformat qf = plan ? plan->value_qf[op->in[0]] : TP_QF_NONE;
        if (plan && tp_precision_info(plan->op_prec[i])->weight_only) {
            /* weight-only: the weight's values in its format as the engine stores them (E4M3 per tensor, amax / 448;
             * NVFP4 with its own per-tensor scale s2, applied after the sum as the engine does), the input exact */
            const int64_t wn = op->gemm_n * op->gemm_k, M = op->gemm_m, N = op->gemm_n;
            const tp_qformat wqf = tp_precision_info(plan->op_prec[i])->qf;
            float *qw = w_alloc(w, sizeof(float) * (size_t)wn), s2 = 1.0f;
            if (!qw) return tp_fail(err, TP_ERR_OOM, "out of host memory emulating %s", op->layer);
            st = tp_qdq_f32(wqf, buf[op->in[1]], qw, N, op->gemm_k, 1, 0.0f, &s2, err);
            if (!st) tp_cpu_linear(x, qw, NULL, y, M, N, op->gemm_k);
            w_free(w, qw, sizeof(float) * (size_t)wn);
            if (st) return st;
            const float *bias = op->n_in > 2 ? buf[op->in[2]] : NULL;
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) y[m * N + n] = y[m * N + n] * s2 + (bias ? bias[n] : 0.0f);
            break;
        }
        if (plan && plan->op_prec[i] == TP_PREC_FP8) {
            if (!act_amax || !(act_amax[op->in[0]] > 0))
                return tp_fail(err, TP_ERR_ARG, "layer %s: fp8 needs the calibrated amax of its input", op->layer);
            st = linear_w8a8(w, op, (float)((double)act_amax[op->in[0]] / 448.0), x, buf[op->in[1]],
                             op->n_in > 2 ? buf[op->in[2]] : NULL, y, err);
            if (st) return st;
            break;
        }
        if (qf != TP_QF_NONE) {
            float glob = 0.0f; /* NVFP4 activations: the calibrated per-tensor scale */
            if (tp_qformat_info(qf)->global_scale) {
                if (!act_amax || !(act_amax[op->in[0]] > 0))
                    return tp_fail(err, TP_ERR_ARG, "layer %s: %s needs the calibrated amax of its input", op->layer,
                                   tp_qformat_info(qf)->name);
                glob = (float)((double)act_amax[op->in[0]] / (6.0 * 448.0));
            }
            st = linear_emulated(w, op, qf, glob, x, buf[op->in[1]], op->n_in > 2 ? buf[op->in[2]] : NULL, y, err);
            if (st) return st;
            break;
        }
        tp_cpu_linear(x, buf[op->in[1]], op->n_in > 2 ? buf[op->in[2]] : NULL, y, op->gemm_m, op->gemm_n,
                      op->gemm_k);
        break;
    }
    case TP_OP_ATTENTION:
        tp_cpu_attention(x, y, xv->shape[0], xv->shape[1], op->heads, op->head_dim, op->scale);
        break;
    case TP_OP_GELU: tp_cpu_gelu(x, y, n, op->gelu_tanh); break;
    case TP_OP_ADD: tp_cpu_add(x, buf[op->in[1]], y, n); break;
    case TP_OP_POOL:
        tp_cpu_pool(x, y, xv->shape[0], xv->shape[1], xv->shape[2], op->pool_mode, op->prefix);
        break;
    default:
        if (tp_op_kind_pipeline(op->kind)) {
            if ((st = run_pipeline_op(g, op, buf, y, err))) return st;
            break;
        }
        if ((st = run_decoder_op(w, g, op, buf, r->sess->past, y, err))) return st;
        if (op->kind == TP_OP_KV_APPEND && plan && plan->value_dt[op->out] == TP_E4M3)
            st = kv_rows_e4m3(op, o, act_amax, r->sess->past, xv->shape[1], y, err);
        if (st) return st;
        break;
    }
    /* emulating a plan: the activation is stored in fp16/bf16 as the engine stores it, unless it is a value inside
     * one call of the program (a fused chain's kernel goes on with it in registers: never stored) */
    const int stored = !plan || !tp_program_inner(&plan->prog, g, op->out);
    if (plan && stored && narrow(plan->value_dt[op->out])) round_to(plan->value_dt[op->out], y, y, n);
    return TP_OK;
}

/* Frees what no later op of the rank reads (never params or the input). */
static void rank_release(rank_run *r, int i) {
    const tp_graph *g = r->g;
    const tp_op *op = &g->ops[i];
    for (int j = 0; j < op->n_in; j++) {
        int v = op->in[j];
        if (g->values[v].kind == TP_VAL_ACT && r->last[v] == i && v != g->output) {
            w_free(r->sess->watch, r->buf[v], value_bytes(&g->values[v]));
            r->buf[v] = NULL;
        }
    }
}

/* The all-reduce, op i of every rank: each output the sum of the ranks' inputs, added in rank order in double
 * (every rank receives the same bits, as NCCL gives every rank the same result) */
static tp_status all_reduce(rank_run *r, int n, int i, tp_error *err) {
    tp_status st = TP_OK;
    for (int k = 0; k < n && !st; k++) st = op_output(&r[k], i, err);
    if (st) return st;
    const int64_t m = tp_value_numel(&r[0].g->values[r[0].g->ops[i].out]);
    for (int64_t e = 0; e < m; e++) {
        double sum = 0;
        for (int k = 0; k < n; k++) sum += r[k].buf[r[k].g->ops[i].in[0]][e];
        for (int k = 0; k < n; k++) r[k].buf[r[k].g->ops[i].out][e] = (float)sum;
    }
    return TP_OK;
}

/* Runs the n ranks' graphs op by op in lockstep (n = 1: one graph), each with its own parameters and session. */
static tp_status run_ranks(const tp_graph *const *gs, const tp_params *const *ps, int n, const tp_plan *plan,
                           const float *act_amax, tp_cpu_session *sess, const float *input, float *output,
                           float *const *taps, tp_error *err) {
    const tp_graph *g = gs[0];
    tp_status cs = tp_graph_check_ranks(gs, n, err);
    if (cs) return cs;
    for (int k = 1; k < n; k++) {
        if (sess[k].past != sess[0].past)
            return tp_fail(err, TP_ERR_ARG, "rank %d's session holds %lld cached tokens, rank 0's %lld", k,
                           (long long)sess[k].past, (long long)sess[0].past);
    }
    if (g->kv_len > 0 && sess->past + g->tokens > g->kv_len)
        return tp_fail(err, TP_ERR_ARG, "KV cache full: %lld cached + %lld new tokens > its %lld positions",
                       (long long)sess->past, (long long)g->tokens, (long long)g->kv_len);
    rank_run *r = calloc((size_t)n, sizeof *r);
    if (!r) return tp_fail(err, TP_ERR_OOM, "out of host memory (CPU executor)");
    tp_status st = TP_OK;
    for (int k = 0; k < n; k++) r[k] = (rank_run){gs[k], ps[k], &sess[k], NULL, NULL, NULL};
    for (int k = 0; k < n && !st; k++) st = rank_init(&r[k], plan, input, err);
    /* the order the ops run in: the program's calls, each call's ops in turn (a fused call runs its ops'
     * references in order), each value released after its last reader in that order */
    int *order = malloc(sizeof(int) * (size_t)(g->n_ops ? g->n_ops : 1));
    if (!order) st = tp_fail(err, TP_ERR_OOM, "out of host memory (CPU executor)");
    for (int i = 0, n_order = 0; i < g->n_ops && !st; i++) {
        const tp_call *c = plan ? &plan->prog.calls[i] : NULL;
        if (!c) order[n_order++] = i;
        for (int k = 0; c && k < c->n_ops; k++) order[n_order++] = c->ops[k];
    }
    for (int k = 0; k < n && !st; k++)
        for (int o = 0; o < g->n_ops; o++)
            for (int j = 0; j < r[k].g->ops[order[o]].n_in; j++) r[k].last[r[k].g->ops[order[o]].in[j]] = order[o];
    tp_cpu_watch *w = sess[0].watch;
    for (int oi = 0; oi < g->n_ops && !st; oi++) {
        const int i = order[oi];
        if (w && w->on_op) w->on_op(w->user, g, i, 0);
        if (g->ops[i].kind == TP_OP_ALL_REDUCE) st = all_reduce(r, n, i, err);
        for (int k = 0; k < n && !st && g->ops[i].kind != TP_OP_ALL_REDUCE; k++)
            st = rank_op(&r[k], plan, act_amax, i, err);
        for (int t = 0; taps && !st && t < g->n_taps; t++) { /* rank 0's, as the output */
            const int v = g->taps[t].value;
            if (v == g->ops[i].out && taps[t])
                memcpy(taps[t], r[0].buf[v], sizeof(float) * (size_t)tp_value_numel(&g->values[v]));
        }
        for (int k = 0; k < n && !st; k++) rank_release(&r[k], i);
        if (!st && w && w->on_op) w->on_op(w->user, g, i, 1);
    }
    if (!st) {
        memcpy(output, r[0].buf[g->output], sizeof(float) * (size_t)tp_value_numel(&g->values[g->output]));
        for (int k = 0; k < n; k++) sess[k].past += g->tokens;
    }
    for (int k = 0; k < n; k++) rank_free(&r[k]);
    free(r);
    free(order);
    return st;
}

static tp_status run(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                     tp_cpu_session *sess, const float *input, float *output, tp_error *err) {
    return run_ranks(&g, &params, 1, plan, act_amax, sess, input, output, NULL, err);
}

tp_status tp_cpu_run_taps(const tp_graph *g, const tp_params *params, const float *input, float *output,
                          float *const *taps, tp_error *err) {
    return tp_cpu_run_watched(g, params, input, output, taps, NULL, err);
}

tp_status tp_cpu_run_watched(const tp_graph *g, const tp_params *params, const float *input, float *output,
                             float *const *taps, tp_cpu_watch *w, tp_error *err) {
    if (g->past > 0) return tp_cpu_run(g, params, input, output, err); /* its error */
    tp_cpu_session s = {.watch = w};
    tp_status st = run_ranks(&g, &params, 1, NULL, NULL, &s, input, output, taps, err);
    tp_cpu_session_free(&s);
    return st;
}

tp_status tp_cpu_run_tp_session(const tp_graph *const *g, const tp_params *const *params, int n, tp_cpu_session *s,
                                const float *input, float *output, tp_error *err) {
    return run_ranks(g, params, n, NULL, NULL, s, input, output, NULL, err);
}

/* ---- the memory estimate: the executor's allocation sequence, replayed without the data ---- */

/* The scratch op i allocates in rank_op (and the helpers it calls) while its output is held: what w_alloc takes
 * and w_free returns within the op, in the same cases. */
static double op_scratch_bytes(const tp_graph *g, const tp_plan *plan, int i) {
    const tp_op *op = &g->ops[i];
    const tp_value *xv = &g->values[op->in[0]];
    const double M = (double)op->gemm_m, N = (double)op->gemm_n, K = (double)op->gemm_k;
    switch (op->kind) {
    case TP_OP_PATCH_EMBED: return sizeof(float) * M * K;
    case TP_OP_TOKEN_EMBED: return sizeof(int32_t) * (double)tp_value_numel(xv);
    case TP_OP_ROPE:
        return sizeof(float) * (double)(op->head_dim / 2 + 1) + (op->n_in > 1 ? sizeof(int64_t) * (double)xv->shape[0] : 0);
    case TP_OP_LINEAR:
        if (!plan) return 0;
        if (tp_precision_info(plan->op_prec[i])->weight_only) return sizeof(float) * N * K;
        if (plan->op_prec[i] == TP_PREC_FP8 || plan->value_qf[op->in[0]] != TP_QF_NONE) return sizeof(float) * (M + N) * K;
        return 0;
    default: return 0;
    }
}

/* The rows each task of op i allocates inside cpu_ops.c (attention's scores and accumulator per batch row and
 * head, the time embedding), times the tasks that run at once: not watched, counted apart. */
static double op_thread_bytes(const tp_graph *g, int i, int threads) {
    const tp_op *op = &g->ops[i];
    const tp_value *xv = &g->values[op->in[0]];
    const double tasks = fmin((double)(threads > 0 ? threads : 1), (double)xv->shape[0] * (double)op->heads);
    double row = 0;
    if (op->kind == TP_OP_ATTENTION) row = (double)(xv->shape[1] + op->head_dim);
    else if (op->kind == TP_OP_KV_ATTENTION) row = (double)(g->values[op->in[1]].shape[2] + op->head_dim); /* past + T <= L */
    else if (op->kind == TP_OP_MASKED_ATTENTION) {
        const int64_t Tp = op->n_in == 6 ? g->values[op->in[3]].shape[1] : 0, Tk = g->values[op->in[1]].shape[1];
        row = (double)((Tp + Tk > 0 ? Tp + Tk : 1) + op->head_dim);
    } else if (op->kind == TP_OP_TIME_CONCAT) {
        const int64_t D = g->values[op->out].shape[2] - xv->shape[2];
        return sizeof(float) * (double)(D > 0 ? D : 1);
    }
    return sizeof(double) * row * tasks;
}

tp_status tp_cpu_mem_estimate(const tp_graph *g, const tp_plan *plan, int threads, tp_cpu_mem *m, tp_error *err) {
    memset(m, 0, sizeof *m);
    m->peak_op = -1;
    int *last = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    if (!last) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_graph_last_use(g, last);
    for (int v = 0; v < g->n_values; v++) { /* rank_init */
        const tp_value *val = &g->values[v];
        if (val->kind == TP_VAL_STATE) m->state += sizeof(float) * (double)tp_value_numel(val);
        else if (val->kind == TP_VAL_INPUT && g->n_inputs > 1) m->held += (double)value_bytes(val);
        else if (plan && val->kind == TP_VAL_PARAM && plan->value_qf[v] == TP_QF_NONE && narrow(plan->value_dt[v]))
            m->held += (double)value_bytes(val);
    }
    m->peak = m->state + m->held;
    double live = 0;
    for (int i = 0; i < g->n_ops; i++) { /* op_output, the op's scratch, rank_release */
        const tp_op *op = &g->ops[i];
        const tp_value *o = &g->values[op->out];
        const double out = o->kind == TP_VAL_STATE ? 0 : (double)value_bytes(o), s = op_scratch_bytes(g, plan, i);
        if (m->state + m->held + live + out + s > m->peak) {
            m->peak = m->state + m->held + live + out + s;
            m->live = live + out, m->scratch = s, m->peak_op = i;
        }
        live += out;
        for (int j = 0; j < op->n_in; j++) {
            const int v = op->in[j];
            int seen = 0; /* an input given twice is released once */
            for (int k = 0; k < j; k++) seen |= op->in[k] == v;
            if (!seen && g->values[v].kind == TP_VAL_ACT && last[v] == i && v != g->output)
                live -= (double)value_bytes(&g->values[v]);
        }
        m->threads = fmax(m->threads, op_thread_bytes(g, i, threads));
    }
    free(last);
    m->total = m->peak + m->threads;
    return TP_OK;
}
