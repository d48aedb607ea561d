#include "exec/cpu/cpu_exec.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "exec/cpu/cpu_ops.h"
#include "formats/dtype.h"
#include "formats/qformat.h"

static int narrow(tp_dtype t) { return t == TP_F16 || t == TP_BF16; }

/* Rounds n values to what storage type t holds (fp16/bf16), out may equal in. */
static void round_to(tp_dtype t, const float *in, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = t == TP_F16 ? tp_f16_to_f32(tp_f32_to_f16(in[i])) : tp_bf16_to_f32(tp_f32_to_bf16(in[i]));
}

/* y = (qdq(x) @ qdq(W)^T) * s2x * s2w + bias, in the plan's format qf */
static tp_status linear_emulated(const tp_op *op, tp_qformat qf, float act_global, const float *x, const float *W,
                                 const float *bias, float *y, tp_error *err) {
    const int64_t M = op->gemm_m, N = op->gemm_n, K = op->gemm_k;
    float *qx = malloc(sizeof(float) * (size_t)(M * K)), *qw = malloc(sizeof(float) * (size_t)(N * K));
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
    free(qx);
    free(qw);
    return st;
}

static tp_status run(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                     const float *input, float *output, tp_error *err);

tp_status tp_cpu_run(const tp_graph *g, const tp_params *params, const float *input, float *output, tp_error *err) {
    return run(g, params, NULL, NULL, input, output, err);
}

tp_status tp_cpu_run_emulated(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                              const float *input, float *output, tp_error *err) {
    return run(g, params, plan, act_amax, input, output, err);
}

static tp_status run(const tp_graph *g, const tp_params *params, const tp_plan *plan, const float *act_amax,
                     const float *input, float *output, tp_error *err) {
    float **buf = calloc((size_t)g->n_values, sizeof(float *));
    float **rounded = calloc((size_t)g->n_values, sizeof(float *)); /* owned copies of rounded parameters */
    int *last = malloc(sizeof(int) * (size_t)g->n_values);
    tp_status st = TP_OK;
    if (!buf || !last || !rounded) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory (CPU executor)");
        goto done;
    }
    tp_graph_last_use(g, last);
    for (int v = 0; v < g->n_values; v++) {
        const tp_value *val = &g->values[v];
        if (val->kind == TP_VAL_PARAM) buf[v] = params->params[val->param_index].data;
        else if (val->kind == TP_VAL_INPUT) buf[v] = (float *)input;
        /* emulating a plan: parameters the engine stores in fp16/bf16 are read rounded to that type */
        if (plan && val->kind == TP_VAL_PARAM && plan->value_qf[v] == TP_QF_NONE && narrow(plan->value_dt[v])) {
            const tp_param *p = &params->params[val->param_index];
            if (!(rounded[v] = malloc(sizeof(float) * (size_t)p->numel))) {
                st = tp_fail(err, TP_ERR_OOM, "out of host memory (CPU executor)");
                goto done;
            }
            round_to(plan->value_dt[v], p->data, rounded[v], p->numel);
            buf[v] = rounded[v];
        }
    }
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        const tp_value *o = &g->values[op->out];
        const tp_value *xv = &g->values[op->in[0]];
        int64_t n = tp_value_numel(o);
        float *y = malloc(sizeof(float) * (size_t)n);
        if (!y) {
            st = tp_fail(err, TP_ERR_OOM, "out of host memory for %s (%lld floats)", o->name, (long long)n);
            goto done;
        }
        buf[op->out] = y;
        float *x = buf[op->in[0]];
        switch (op->kind) {
        case TP_OP_PATCH_EMBED: {
            int64_t B = xv->shape[0], H = xv->shape[2], W = xv->shape[3], P = op->patch;
            float *cols = malloc(sizeof(float) * (size_t)(op->gemm_m * op->gemm_k));
            if (!cols) {
                st = tp_fail(err, TP_ERR_OOM, "out of host memory for im2col of %s", op->layer);
                goto done;
            }
            tp_cpu_im2col(x, cols, B, H, W, P);
            /* emulating a plan: the engine's im2col writes the GEMM's input type */
            if (plan && narrow(plan->value_dt[op->in[1]]))
                round_to(plan->value_dt[op->in[1]], cols, cols, op->gemm_m * op->gemm_k);
            tp_cpu_linear(cols, buf[op->in[1]], buf[op->in[2]], y, op->gemm_m, op->gemm_n, op->gemm_k);
            free(cols);
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
            if (qf != TP_QF_NONE) {
                float glob = 0.0f; /* NVFP4 activations: the calibrated per-tensor scale */
                if (tp_qformat_info(qf)->global_scale) {
                    if (!act_amax || !(act_amax[op->in[0]] > 0)) {
                        st = tp_fail(err, TP_ERR_ARG, "layer %s: %s needs the calibrated amax of its input", op->layer,
                                     tp_qformat_info(qf)->name);
                        goto done;
                    }
                    glob = (float)((double)act_amax[op->in[0]] / (6.0 * 448.0));
                }
                st = linear_emulated(op, qf, glob, x, buf[op->in[1]], op->n_in > 2 ? buf[op->in[2]] : NULL, y, err);
                if (st) goto done;
                break;
            }
            tp_cpu_linear(x, buf[op->in[1]], op->n_in > 2 ? buf[op->in[2]] : NULL, y, op->gemm_m, op->gemm_n,
                          op->gemm_k);
            break;
        }
        case TP_OP_ATTENTION:
            tp_cpu_attention(x, y, xv->shape[0], xv->shape[1], op->heads, op->head_dim, op->scale);
            break;
        case TP_OP_GELU: tp_cpu_gelu(x, y, n); break;
        case TP_OP_ADD: tp_cpu_add(x, buf[op->in[1]], y, n); break;
        case TP_OP_POOL:
            tp_cpu_pool(x, y, xv->shape[0], xv->shape[1], xv->shape[2], op->pool_mode, op->prefix);
            break;
        default: CHECK(!"unknown op kind");
        }
        /* emulating a plan: the activation is stored in fp16/bf16 as the engine stores it, unless the op's
         * epilogue goes on with the next op (a fused residual add, GELU or token embedding: never stored) */
        const int stored = !plan || ((!plan->op_epilogue_add || plan->op_epilogue_add[i] < 0) &&
                                     (!plan->op_epilogue_gelu || plan->op_epilogue_gelu[i] < 0) &&
                                     (!plan->op_epilogue_embed || plan->op_epilogue_embed[i] < 0));
        if (plan && stored && narrow(plan->value_dt[op->out])) round_to(plan->value_dt[op->out], y, y, n);
        /* free what no later op reads (never params or the input) */
        for (int j = 0; j < op->n_in; j++) {
            int v = op->in[j];
            if (g->values[v].kind == TP_VAL_ACT && last[v] == i && v != g->output) {
                free(buf[v]);
                buf[v] = NULL;
            }
        }
    }
    memcpy(output, buf[g->output], sizeof(float) * (size_t)tp_value_numel(&g->values[g->output]));
done:
    if (buf && last)
        for (int v = 0; v < g->n_values; v++)
            if (g->values[v].kind == TP_VAL_ACT) free(buf[v]);
    if (rounded)
        for (int v = 0; v < g->n_values; v++) free(rounded[v]);
    free(rounded);
    free(buf);
    free(last);
    return st;
}
