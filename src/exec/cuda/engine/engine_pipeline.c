/* engine_pipeline.c: what an engine needs for a pipeline's graph (issue 21: openpi's pi0 as one graph,
 * src/models/pi0.c): the per-op constants (each TIME_CONCAT's embedding, the RoPE frequencies of a graph without a
 * KV cache), the launches of the pipeline ops (pipeline_ops.h), the scatter of several inputs' packed per-sample
 * rows (graph.h tp_graph_input_layout), and which parameter values repeat an earlier one (the expert's weights,
 * read by every denoise step through a value of their own), so each is uploaded once. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "exec/cuda/engine/engine_internal.h"
#include "exec/cuda/kernels/decoder_ops.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/kernels/pipeline_ops.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "formats/dtype.h"

static tp_status put(tp_engine *e, const float *h, size_t n, float **d, const char *what, tp_error *err) {
    tp_status st = tpe_dev_alloc(e, sizeof(float) * n, (void **)d, what, err);
    if (!st && cudaMemcpy(*d, h, sizeof(float) * n, cudaMemcpyHostToDevice) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "uploading the constants of %s", what);
    return st;
}

tp_status tpe_rope_tables(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    if (!e->d_invfreq && !(e->d_invfreq = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(float *))))
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_ROPE || e->d_invfreq[i]) continue;
        float f[512];
        if (op->head_dim < 2 || op->head_dim > 1024)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: head dim %d (RoPE takes 2 to 1024)", op->layer, op->head_dim);
        tp_rope_inv_freq(&op->rope, op->head_dim, f);
        tp_status st = put(e, f, (size_t)(op->head_dim / 2), &e->d_invfreq[i], op->layer, err);
        if (st) return st;
    }
    return TP_OK;
}

/* A masked attention op's shapes, as the unfused form reads them */
typedef struct {
    int B, H, Hkv, G, D, Tq, Tk, Tp, two, o0, ld; /* o0: the own keys' first column in S and P */
} mshape;

static mshape mshape_of(const tp_engine *e, int i) {
    const tp_graph *g = e->g;
    const tp_op *op = &g->ops[i];
    mshape m;
    m.two = op->n_in == 6;
    m.B = (int)g->values[op->in[0]].shape[0];
    m.Tq = (int)g->values[op->in[0]].shape[1];
    m.Tk = (int)g->values[op->in[1]].shape[1];
    m.Tp = m.two ? (int)g->values[op->in[3]].shape[1] : 0;
    m.H = op->heads, m.Hkv = op->kv_heads, m.G = op->heads / op->kv_heads, m.D = op->head_dim;
    m.o0 = (m.Tp + 7) / 8 * 8; /* 16-byte aligned blocks and rows for the GEMMs */
    m.ld = (m.o0 + m.Tk + 7) / 8 * 8;
    return m;
}

/* The largest power of two <= 16 dividing every byte count (the pointers' offsets: cudaMalloc'd bases are aligned) */
static unsigned align_of(const long long *bytes, int n) {
    unsigned a = 16;
    for (int k = 0; k < n; k++)
        while (a > 1 && bytes[k] % a) a /= 2;
    return a;
}

/* Op i's four batched GEMMs (per sample and KV head: the G query heads of that KV head as the batch), or the
 * reason they do not plan in *why. */
static tp_status plan_unfused(tp_engine *e, int i, tp_error *why) {
    const tp_op *op = &e->g->ops[i];
    const mshape m = mshape_of(e, i);
    const tp_dtype dt = e->plan->value_dt[op->in[0]];
    const long long es = (long long)tp_dtype_info(dt)->bytes;
    const long long offs[] = {m.D * es, (long long)m.H * m.D * es, (long long)m.Hkv * m.D * es, m.ld * 4LL, m.ld * es,
                              m.o0 * 4LL, m.o0 * es};
    const unsigned al = align_of(offs, (int)(sizeof offs / sizeof offs[0]));
    /* S (Tq, keys) = scale Q K^T: Q rows H D apart, the G heads D apart; K rows Hkv D apart, shared by the G heads */
    tp_bgemm_desc s = {.M = m.Tq, .K = m.D, .trans_b = 1, /* scores fp32 */ .ab_dt = dt, .c_dt = TP_F32, .lda = (int64_t)m.H * m.D,
                       .ldb = (int64_t)m.Hkv * m.D, .ldc = m.ld, .batch = m.G, .sa = m.D, .sb = 0,
                       .sc = (int64_t)m.Tq * m.ld, .alpha = op->scale, .beta = 0.0f, .align = al};
    /* O (Tq, D) = P V: P rows ld apart, a head's Tq ld further; V rows Hkv D apart; O rows H D apart, heads D */
    tp_bgemm_desc o = {.M = m.Tq, .N = m.D, .trans_b = 0, .ab_dt = dt, .c_dt = dt, .lda = m.ld,
                       .ldb = (int64_t)m.Hkv * m.D, .ldc = (int64_t)m.H * m.D, .batch = m.G,
                       .sa = (int64_t)m.Tq * m.ld, .sb = 0, .sc = m.D, .alpha = 1.0f, .align = al};
    tp_bgemm **pl = &e->mplan[4 * i];
    tp_status st = TP_OK;
    if (m.two) {
        s.N = m.Tp;
        o.K = m.Tp;
        o.beta = 0.0f;
        if (!st) st = tp_bgemm_create(e->gemm, &s, op->layer, &pl[0], why);
        if (!st) st = tp_bgemm_create(e->gemm, &o, op->layer, &pl[2], why);
    }
    s.N = m.Tk;
    o.K = m.Tk;
    o.beta = m.two ? 1.0f : 0.0f; /* the own keys' share added to the prefix's */
    if (!st) st = tp_bgemm_create(e->gemm, &s, op->layer, &pl[1], why);
    if (!st) st = tp_bgemm_create(e->gemm, &o, op->layer, &pl[3], why);
    return st;
}

static tp_status setup_masked(tp_engine *e, tp_attn_impl want, tp_error *err) {
    const tp_graph *g = e->g;
    size_t sbytes = 0, pbytes = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_MASKED_ATTENTION) continue;
        if (!e->masked_gemm) {
            e->masked_gemm = calloc((size_t)g->n_ops, 1);
            e->mplan = calloc((size_t)(4 * g->n_ops), sizeof(tp_bgemm *));
            if (!e->masked_gemm || !e->mplan) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        }
        tp_error why = {0};
        tp_status st = want == TP_ATTN_CLASSIC ? TP_ERR_UNSUPPORTED : plan_unfused(e, i, &why);
        if (st == TP_ERR_OOM) return tp_fail(err, st, "%s", why.msg);
        e->masked_gemm[i] = st == TP_OK;
        if (st) {
            for (int k = 0; k < 4; k++) tp_bgemm_destroy(e->mplan[4 * i + k]), e->mplan[4 * i + k] = NULL;
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof CUDA-core kernel (pipeline_ops.h): %.150s",
                     want == TP_ATTN_CLASSIC ? "as asked (--attention classic)" : why.msg);
            continue;
        }
        const mshape m = mshape_of(e, i);
        const size_t rows = (size_t)m.B * m.H * m.Tq;
        if (rows * m.ld * 4 > sbytes) sbytes = rows * m.ld * 4;
        const size_t pb = rows * m.ld * tp_dtype_info(e->plan->value_dt[op->in[0]])->bytes;
        if (pb > pbytes) pbytes = pb;
        snprintf(e->impl_note[i], sizeof e->impl_note[i], "cuBLASLt batched GEMMs (S = scale Q K^T in fp32%s, P V%s) "
                 "around tprof's masked softmax (P in %s)", m.two ? ", over the prefix's K and the own" : "",
                 m.two ? " in two parts" : "", tp_dtype_info(e->plan->value_dt[op->in[0]])->name);
    }
    tp_status st = TP_OK;
    if (sbytes && !(st = tpe_dev_alloc(e, sbytes, (void **)&e->d_mscore, "the attention scores", err)))
        st = tpe_dev_alloc(e, pbytes, &e->d_mprob, "the attention probabilities", err);
    if (!st) e->act_bytes += (double)(sbytes + pbytes);
    return st;
}

/* Op i by its batched GEMMs: every (sample, KV head)'s scores, the softmax of every row, every P V. */
static int launch_unfused(tp_engine *e, int i, cudaStream_t s) {
    const tp_graph *g = e->g;
    const tp_op *op = &g->ops[i];
    const mshape m = mshape_of(e, i);
    const tp_dtype dt = e->plan->value_dt[op->in[0]];
    const size_t es = tp_dtype_info(dt)->bytes;
    const char *q = e->dptr[op->in[0]], *k = e->dptr[op->in[1]], *v = e->dptr[op->in[2]];
    const char *kp = m.two ? e->dptr[op->in[3]] : NULL, *vp = m.two ? e->dptr[op->in[4]] : NULL;
    const float *valid = e->dptr[op->in[m.two ? 5 : 3]];
    char *o = e->dptr[op->out], *P = e->d_mprob;
    float *S = e->d_mscore;
    tp_bgemm *const *pl = &e->mplan[4 * i];
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        if (pass == 1 && (rc = tpk_masked_softmax(S, P, dt, valid, m.B, m.H, m.Tq, m.Tp, m.o0, m.Tk, m.ld, op->prefix,
                                                  m.two, op->pool_mode == 1, s)))
            return rc;
        for (int b = 0; b < m.B && !rc; b++)
            for (int h0 = 0; h0 < m.H && !rc; h0 += m.G) { /* the G query heads of KV head h0 / G */
                const size_t kvh = (size_t)(h0 / m.G) * m.D, heads = (size_t)(b * m.H + h0) * m.Tq * m.ld;
                const char *qb = q + ((size_t)b * m.Tq * m.H + h0) * m.D * es;
                const char *kb = k + ((size_t)b * m.Tk * m.Hkv * m.D + kvh) * es;
                const char *vb = v + ((size_t)b * m.Tk * m.Hkv * m.D + kvh) * es;
                char *ob = o + ((size_t)b * m.Tq * m.H + h0) * m.D * es;
                if (pass == 0) {
                    if (m.two)
                        rc = tp_bgemm_run(e->gemm, pl[0], qb, kp + ((size_t)b * m.Tp * m.Hkv * m.D + kvh) * es,
                                          S + heads, s);
                    if (!rc) rc = tp_bgemm_run(e->gemm, pl[1], qb, kb, S + heads + m.o0, s);
                } else {
                    if (m.two)
                        rc = tp_bgemm_run(e->gemm, pl[2], P + heads * es,
                                          vp + ((size_t)b * m.Tp * m.Hkv * m.D + kvh) * es, ob, s);
                    if (!rc) rc = tp_bgemm_run(e->gemm, pl[3], P + (heads + (size_t)m.o0) * es, vb, ob, s);
                }
            }
    }
    return rc ? (int)cudaErrorUnknown : 0; /* a cuBLAS status: reported as a launch failure of the op */
}

tp_status tpe_setup_pipeline(tp_engine *e, tp_attn_impl want, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = tpe_rope_tables(e, err);
    if (!st) st = setup_masked(e, want, err);
    if (st) return st;
    if (!(e->d_opconst = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(float *))))
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < g->n_ops && !st; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_TIME_CONCAT) continue;
        const tp_value *x = &g->values[op->in[0]], *y = &g->values[op->out];
        const int64_t D = y->shape[y->ndim - 1] - x->shape[x->ndim - 1];
        float *h = malloc(sizeof(float) * (size_t)(D > 0 ? D : 1));
        if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        tp_time_embedding(op->scale, D, h); /* the step's time: a constant of the graph */
        st = put(e, h, (size_t)D, &e->d_opconst[i], op->layer, err);
        free(h);
    }
    return st;
}

int tpe_launch_pipeline_op(tp_engine *e, int i, cudaStream_t s) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    const tp_op *op = &g->ops[i];
    const tp_value *o = &g->values[op->out], *xv = &g->values[op->in[0]];
    void *y = e->dptr[op->out];
    const void *x = e->dptr[op->in[0]];
    const tp_dtype xdt = pl->value_dt[op->in[0]], ydt = pl->value_dt[op->out];
    const size_t n = (size_t)tp_value_numel(o);
    switch (op->kind) {
    case TP_OP_RESHAPE: /* a copy, or the conversion of an fp32 input into the activations' type (plan.c) */
        if (xdt == ydt) return (int)cudaMemcpyAsync(y, x, value_bytes(e, op->out), cudaMemcpyDeviceToDevice, s);
        return tpk_convert(x, xdt, y, ydt, NULL, n, s);
    case TP_OP_CONCAT: {
        const tp_value *bv = &g->values[op->in[1]];
        if (pl->value_dt[op->in[1]] != xdt || ydt != xdt) return (int)cudaErrorInvalidValue;
        return tpk_concat_tokens(x, e->dptr[op->in[1]], y, xdt, (int)xv->shape[0], xv->shape[1], bv->shape[1],
                                 xv->shape[2], s);
    }
    case TP_OP_SLICE:
        if (ydt != xdt) return (int)cudaErrorInvalidValue;
        return tpk_slice_tokens(x, y, xdt, (int)xv->shape[0], xv->shape[1], op->prefix, o->shape[1], xv->shape[2], s);
    case TP_OP_SILU: return tpk_silu(x, xdt, y, ydt, n, s);
    case TP_OP_TIME_CONCAT: {
        const int C = (int)xv->shape[xv->ndim - 1];
        if (ydt != xdt) return (int)cudaErrorInvalidValue;
        return tpk_time_concat(x, xdt, e->d_opconst[i], y, (int64_t)(n / (size_t)o->shape[o->ndim - 1]), C,
                               (int)o->shape[o->ndim - 1] - C, s);
    }
    case TP_OP_EULER:
        if (xdt != TP_F32 || ydt != TP_F32) return (int)cudaErrorInvalidValue;
        return tpk_euler((const float *)x, e->dptr[op->in[1]], pl->value_dt[op->in[1]], (float *)y, op->scale, n, s);
    case TP_OP_MASKED_ATTENTION: {
        if (e->masked_gemm && e->masked_gemm[i]) return launch_unfused(e, i, s);
        const int two = op->n_in == 6;
        for (int j = 1; j < (two ? 5 : 3); j++)
            if (pl->value_dt[op->in[j]] != xdt) return (int)cudaErrorInvalidValue;
        if (ydt != xdt || pl->value_dt[op->in[two ? 5 : 3]] != TP_F32) return (int)cudaErrorInvalidValue;
        return tpk_masked_attention(x, e->dptr[op->in[1]], e->dptr[op->in[2]], two ? e->dptr[op->in[3]] : NULL,
                                    two ? e->dptr[op->in[4]] : NULL, e->dptr[op->in[two ? 5 : 3]], y, xdt,
                                    (int)xv->shape[0], op->heads, op->kv_heads, op->head_dim, (int)xv->shape[1],
                                    (int)g->values[op->in[1]].shape[1], two ? (int)g->values[op->in[3]].shape[1] : 0,
                                    op->prefix, op->pool_mode == 1, op->scale, s);
    }
    default: return (int)cudaErrorInvalidValue;
    }
}

tp_status tpe_upload_inputs(tp_engine *x, const float *rows, tp_error *err) {
    const tp_graph *g = x->g;
    int64_t off[TP_MAX_INPUTS];
    const int64_t row = tp_graph_input_layout(g, off), B = g->batch;
    for (int k = 0; k < g->n_inputs; k++) {
        const int v = g->inputs[k];
        const size_t w = (size_t)(tp_value_numel(&g->values[v]) / B) * sizeof(float);
        CHECK(x->plan->value_dt[v] == TP_F32); /* every input is fp32 (plan.c) */
        cudaError_t ce = g->n_inputs == 1
                             ? cudaMemcpyAsync(x->dptr[v], rows, value_bytes(x, v), cudaMemcpyHostToDevice, x->stream)
                             : cudaMemcpy2DAsync(x->dptr[v], w, rows + off[k], (size_t)row * sizeof(float), w,
                                                 (size_t)B, cudaMemcpyHostToDevice, x->stream);
        if (ce != cudaSuccess)
            return tp_fail(err, TP_ERR_CUDA, "copying input %s to the GPU: %s", g->values[v].name,
                           cudaGetErrorString(ce));
    }
    return TP_OK;
}

tp_status tpe_find_repeats(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    const int np = e->params ? e->params->n_params : 0;
    int *first = malloc(sizeof(int) * (size_t)(np ? np : 1));
    unsigned char *how = calloc((size_t)(g->n_values ? g->n_values : 1), 1); /* how its GEMMs read a weight */
    if (!(e->repeats = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1))) || !first || !how) {
        free(first);
        free(how);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int k = 0; k < np; k++) first[k] = -1;
    for (int i = 0; i < g->n_ops; i++) /* one pass: weight_nvfp4_wo and weight_native_bs for every value */
        if (g->ops[i].n_in > 1)
            how[g->ops[i].in[1]] |= (e->plan->op_prec[i] == TP_PREC_NVFP4_WO ? 1 : 0) | (op_native_bs(e, i) ? 2 : 0);
    for (int v = 0; v < g->n_values; v++) {
        const tp_value *val = &g->values[v];
        e->repeats[v] = -1;
        if (val->kind != TP_VAL_PARAM || val->param_index < 0 || val->param_index >= np) continue;
        const int u = first[val->param_index];
        if (u < 0) {
            first[val->param_index] = v;
            continue;
        }
        /* the same bytes only when stored alike (a tied embedding read as a table and as an FP8 GEMM's weight is
         * not); a value a sibling group lays out (engine_group.c) keeps its group's copy (upload_params skips it) */
        const tp_plan *p = e->plan;
        if (p->value_dt[u] == p->value_dt[v] && p->value_qf[u] == p->value_qf[v] &&
            p->value_scaled[u] == p->value_scaled[v] && how[u] == how[v])
            e->repeats[v] = u;
    }
    free(first);
    free(how);
    return TP_OK;
}

tp_status tpe_setup_stages(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    e->n_seg = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const size_t n = tp_layer_stage_len(g->ops[i].layer);
        if (n == 0)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "modular mode: op %s has no stage (a pipeline's layer names start "
                           "with their stage: vision., prefix., expert.)", g->ops[i].layer);
        const tp_op *prev = i ? &g->ops[i - 1] : NULL;
        if (prev && tp_layer_stage_len(prev->layer) == n && strncmp(prev->layer, g->ops[i].layer, n) == 0) continue;
        if (e->n_seg == TPE_MAX_STAGES)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "modular mode: more than %d stages", TPE_MAX_STAGES);
        e->seg_first[e->n_seg++] = i;
    }
    e->seg_first[e->n_seg] = g->n_ops;
    int *stage_of = malloc(sizeof(int) * (size_t)(g->n_ops ? g->n_ops : 1));
    int *last = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    e->hand_v = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    e->hand_copy = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof(void *));
    if (!stage_of || !last || !e->hand_v || !e->hand_copy) {
        free(stage_of);
        free(last);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int k = 0; k < e->n_seg; k++)
        for (int i = e->seg_first[k]; i < e->seg_first[k + 1]; i++) stage_of[i] = k;
    for (int v = 0; v < g->n_values; v++) last[v] = -1; /* the last stage reading v */
    for (int i = 0; i < g->n_ops; i++)
        for (int j = 0; j < g->ops[i].n_in; j++) last[g->ops[i].in[j]] = stage_of[i];
    int n = 0;
    tp_status st = TP_OK;
    for (int k = 0; k < e->n_seg && !st; k++) {
        e->hand_first[k] = n;
        for (int i = e->seg_first[k]; i < e->seg_first[k + 1] && !st; i++) {
            const int v = g->ops[i].out;
            if (g->values[v].kind != TP_VAL_ACT || last[v] <= k || !e->dptr[v]) continue;
            e->hand_v[n] = v;
            st = tpe_dev_alloc(e, value_bytes(e, v), &e->hand_copy[n], "a stage's handoff copy", err);
            if (!st) e->act_bytes += (double)value_bytes(e, v);
            n++;
        }
    }
    e->hand_first[e->n_seg] = n;
    free(stage_of);
    free(last);
    return st;
}

int tpe_handoff(tp_engine *e, int k) {
    for (int h = e->hand_first[k]; h < e->hand_first[k + 1]; h++) {
        const int v = e->hand_v[h];
        cudaError_t ce = cudaMemcpyAsync(e->hand_copy[h], e->dptr[v], value_bytes(e, v), cudaMemcpyDeviceToDevice,
                                         e->stream);
        if (ce != cudaSuccess) return (int)ce;
    }
    return 0;
}

int tp_engine_stages(const tp_engine *e, int i, char *name, size_t n, double *bytes) {
    if (!e || e->n_seg == 0) return 0;
    if (i >= 0 && i < e->n_seg) {
        const tp_op *op = &e->g->ops[e->seg_first[i]];
        if (name && n) snprintf(name, n, "%.*s", (int)tp_layer_stage_len(op->layer), op->layer);
        if (bytes) {
            *bytes = 0;
            for (int h = e->hand_first[i]; h < e->hand_first[i + 1]; h++) *bytes += (double)value_bytes(e, e->hand_v[h]);
        }
    }
    return e->n_seg;
}
