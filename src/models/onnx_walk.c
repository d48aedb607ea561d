/* onnx_walk.c: the shared parts of the ONNX import's architecture walks (onnx_walk.h). The subgraphs between two
 * weights are taken as the nodes on a path between them; shape arithmetic is what remains, computed from Shape
 * outputs and constants only. */
#include "models/onnx_walk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"

const tp_onnx_node *ow_nd(const ow_ix *x, int i) { return tp_onnx_node_at(x->m, i); }
int ow_is(const ow_ix *x, int i, const char *op) { return i >= 0 && !strcmp(ow_nd(x, i)->op_type, op); }

/* "node 12 'name' (Op): " and the reason, as TP_ERR_UNSUPPORTED */
tp_status ow_fail_node(ow_ix *x, int i, const char *fmt, const char *what) {
    const tp_onnx_node *n = ow_nd(x, i);
    char why[400];
    snprintf(why, sizeof why, fmt, what ? what : "");
    return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "node %d '%s' (%s): %s", i, n->name ? n->name : "",
                        n->op_type, why);
}

int ow_producer(const ow_ix *x, const char *v) {
    if (!v || !v[0]) return -1;
    for (int i = 0; i < x->n; i++)
        for (int o = 0; o < ow_nd(x, i)->n_out; o++)
            if (!strcmp(ow_nd(x, i)->out[o], v)) return i;
    return -1;
}

/* The consumers of value v, Shape nodes left out (they read only its shape), in file order; returns how many. */
int ow_consumers(const ow_ix *x, const char *v, int *out, int max) {
    int k = 0;
    for (int i = 0; i < x->n; i++) {
        const tp_onnx_node *n = ow_nd(x, i);
        if (!strcmp(n->op_type, "Shape")) continue;
        for (int j = 0; j < n->n_in; j++)
            if (!strcmp(n->in[j], v)) {
                if (k < max) out[k] = i;
                k++;
                break;
            }
    }
    return k;
}

/* The one consumer of v of op type op (Shape nodes aside), or -1. */
int ow_consumer_op(const ow_ix *x, const char *v, const char *op) {
    int c[16], n = ow_consumers(x, v, c, 16), found = -1;
    for (int k = 0; k < n && k < 16; k++)
        if (ow_is(x, c[k], op)) {
            if (found >= 0) return -1;
            found = c[k];
        }
    return found;
}

/* name, or what an Identity chain before it copies (the TorchScript exporter shares equal initializers, e.g. every
 * block's zero bias in a freshly initialized model, through Identity nodes) */
const char *ow_unalias(const ow_ix *x, const char *name) {
    for (int hops = 0; hops < 8; hops++) {
        const int p = ow_producer(x, name);
        if (p < 0 || strcmp(ow_nd(x, p)->op_type, "Identity") != 0 || ow_nd(x, p)->n_in != 1) break;
        name = ow_nd(x, p)->in[0];
    }
    return name;
}

/* The tensor behind a name: an initializer or a Constant node's `value`, through Identity nodes. */
const tp_onnx_tensor *ow_const_tensor(const ow_ix *x, const char *name) {
    name = ow_unalias(x, name);
    const tp_onnx_tensor *t = tp_onnx_find_initializer(x->m, name);
    if (t) return t;
    const int p = ow_producer(x, name);
    if (ow_is(x, p, "Constant")) {
        const tp_onnx_attr *a = tp_onnx_node_attr(ow_nd(x, p), "value");
        if (a && a->type == TP_ONNX_ATTR_TENSOR) return a->t;
    }
    return NULL;
}


/* The integer vector a value holds when the file fixes it: a constant (int64 or int32), or Concat / Unsqueeze of
 * such pieces, an entry computed at run time (a Gather of a Shape) given as DYN. Returns the length, or -1. */
int ow_const_ints(const ow_ix *x, const char *name, int64_t *v, int max, int depth) {
    const tp_onnx_tensor *t = ow_const_tensor(x, name);
    if (t) {
        if ((t->elem_type != TP_ONNX_INT64 && t->elem_type != TP_ONNX_INT32) || t->numel > max) return -1;
        for (int64_t k = 0; k < t->numel; k++)
            v[k] = t->elem_type == TP_ONNX_INT64 ? ((const int64_t *)t->data)[k] : ((const int32_t *)t->data)[k];
        return (int)t->numel;
    }
    const int p = ow_producer(x, name);
    if (p < 0 || depth > 8) return -1;
    const tp_onnx_node *n = ow_nd(x, p);
    if (!strcmp(n->op_type, "Concat")) {
        int len = 0;
        for (int j = 0; j < n->n_in; j++) {
            const int l = ow_const_ints(x, n->in[j], v + len, max - len, depth + 1);
            if (l < 0) return -1;
            len += l;
        }
        return len;
    }
    if (!strcmp(n->op_type, "Shape")) { /* a slice of a run-time shape (start and end given): so many DYN entries */
        const tp_onnx_attr *sa = tp_onnx_node_attr(n, "start"), *ea = tp_onnx_node_attr(n, "end");
        if (!sa || !ea || sa->i < 0 || ea->i <= sa->i || ea->i - sa->i > max) return -1;
        for (int64_t k = 0; k < ea->i - sa->i; k++) v[k] = DYN;
        return (int)(ea->i - sa->i);
    }
    if (!strcmp(n->op_type, "Unsqueeze") && max >= 1) { /* a scalar made a 1-vector: its value if fixed */
        int64_t s[1];
        v[0] = ow_const_ints(x, n->in[0], s, 1, depth + 1) == 1 ? s[0] : DYN;
        return 1;
    }
    return -1;
}

/* ---- weights and linears -------------------------------------------------------------------------------- */


int ow_float_type(int e) { return e == TP_ONNX_FLOAT || e == TP_ONNX_FLOAT16 || e == TP_ONNX_BFLOAT16; }

/* A scalar float constant (a Q/DQ scale): 1 and *f, or 0. */
int ow_scalar_f32(const ow_ix *x, const char *name, float *f) {
    const tp_onnx_tensor *t = ow_const_tensor(x, name);
    if (!t || t->numel != 1) return 0;
    if (t->elem_type == TP_ONNX_FLOAT) *f = *(const float *)t->data;
    else if (t->elem_type == TP_ONNX_FLOAT16) tp_convert_to_f32(TP_F16, t->data, f, 1, 1.0f);
    else return 0;
    return 1;
}

/* A zero point that is absent or 0 (FLOAT8E4M3FN's zero is the byte 0, as are int8's and uint8's). */
int ow_zero_point_ok(const ow_ix *x, const tp_onnx_node *n) {
    if (n->n_in < 3 || !n->in[2][0]) return 1;
    const tp_onnx_tensor *z = ow_const_tensor(x, n->in[2]);
    if (!z || z->numel != 1) return 0;
    return ((const unsigned char *)z->data)[0] == 0;
}

/* name as a weight: a float initializer, or DequantizeLinear of an FLOAT8E4M3FN initializer with a per-tensor
 * scale and zero point 0 (ModelOpt's FP8 weights). */
int ow_weight_of(const ow_ix *x, const char *name, ow_wref *w) {
    memset(w, 0, sizeof *w);
    w->dq = -1;
    w->scale = 1.0f;
    name = ow_unalias(x, name);
    const tp_onnx_tensor *t = tp_onnx_find_initializer(x->m, name);
    if (t && ow_float_type(t->elem_type)) {
        w->t = t;
        return 1;
    }
    const int p = ow_producer(x, name);
    if (!ow_is(x, p, "DequantizeLinear")) return 0;
    const tp_onnx_node *n = ow_nd(x, p);
    const tp_onnx_tensor *q = tp_onnx_find_initializer(x->m, n->in[0]);
    const tp_onnx_attr *bs = tp_onnx_node_attr(n, "block_size");
    if (!q || q->elem_type != TP_ONNX_FLOAT8E4M3FN || n->n_in < 2 || !ow_scalar_f32(x, n->in[1], &w->scale) ||
        !ow_zero_point_ok(x, n) || (bs && bs->i != 0))
        return 0;
    w->t = q, w->qtype = q->elem_type, w->dq = p;
    return 1;
}


/* Node i as a linear: MatMul (x, W) + Add (b), or Gemm (x, W, b) with alpha 1, beta 1, transA 0; W (K, N) or, Gemm
 * transB 1, (N, K); x possibly through QuantizeLinear -> DequantizeLinear (per-tensor). K and N checked where
 * nonzero. 1: found. */
int ow_linear_at(const ow_ix *x, int i, int64_t K, int64_t N, ow_lin *L) {
    memset(L, 0, sizeof *L);
    L->add = L->q = L->dq = -1;
    L->mm = i;
    const int gemm = ow_is(x, i, "Gemm");
    if (!gemm && !ow_is(x, i, "MatMul")) return 0;
    const tp_onnx_node *n = ow_nd(x, i);
    if (n->n_in < 2 || !ow_weight_of(x, n->in[1], &L->w) || L->w.t->ndim != 2) return 0;
    if (gemm) {
        const tp_onnx_attr *ta = tp_onnx_node_attr(n, "transA"), *tb = tp_onnx_node_attr(n, "transB"),
                           *al = tp_onnx_node_attr(n, "alpha"), *be = tp_onnx_node_attr(n, "beta");
        if ((ta && ta->i) || (al && al->f != 1.0) || (be && be->f != 1.0)) return 0;
        L->wt = !(tb && tb->i);
    } else {
        L->wt = 1;
    }
    L->K = L->w.t->dims[L->wt ? 0 : 1], L->N = L->w.t->dims[L->wt ? 1 : 0];
    if ((K && L->K != K) || (N && L->N != N)) return 0;
    L->in = n->in[0];
    const int dq = ow_producer(x, L->in);
    if (ow_is(x, dq, "DequantizeLinear")) { /* the input quantized and dequantized: its scale noted */
        const int q = ow_producer(x, ow_nd(x, dq)->in[0]);
        float s2 = 0;
        if (!ow_is(x, q, "QuantizeLinear") || ow_nd(x, dq)->n_in < 2 || ow_nd(x, q)->n_in < 2 ||
            !ow_scalar_f32(x, ow_nd(x, dq)->in[1], &L->x_scale) || !ow_scalar_f32(x, ow_nd(x, q)->in[1], &s2) ||
            s2 != L->x_scale || !ow_zero_point_ok(x, ow_nd(x, q)) || !ow_zero_point_ok(x, ow_nd(x, dq)))
            return 0;
        const tp_onnx_tensor *z = ow_nd(x, q)->n_in > 2 ? ow_const_tensor(x, ow_nd(x, q)->in[2]) : NULL;
        L->x_type = z ? z->elem_type : TP_ONNX_UINT8;
        L->q = q, L->dq = dq;
        L->in = ow_nd(x, q)->in[0];
    }
    if (gemm) {
        if (n->n_in > 2 && n->in[2][0] && !(L->b = ow_const_tensor(x, n->in[2]))) return 0;
        L->out = n->out[0];
    } else { /* a bias: an Add of a constant (N) right after; an Add of anything else (a residual) is not one */
        L->out = n->out[0];
        const int a = ow_consumer_op(x, n->out[0], "Add");
        const tp_onnx_node *an = a >= 0 ? ow_nd(x, a) : NULL;
        const char *other = an ? (!strcmp(an->in[0], n->out[0]) ? an->in[1] : an->in[0]) : NULL;
        const tp_onnx_tensor *b = other ? ow_const_tensor(x, other) : NULL;
        int only = 0, c[4];
        if (b) only = ow_consumers(x, n->out[0], c, 4) == 1; /* the product goes nowhere else */
        if (b && only && b->ndim == 1 && b->dims[0] == L->N) L->b = b, L->add = a, L->out = an->out[0];
    }
    return !L->b || (L->b->ndim == 1 && L->b->dims[0] == L->N && ow_float_type(L->b->elem_type));
}

/* The linear reading value v (directly or through its Q/DQ pair), or 0. */
int ow_linear_of(const ow_ix *x, const char *v, int64_t K, int64_t N, ow_lin *L) {
    int c[16], n = ow_consumers(x, v, c, 16);
    for (int k = 0; k < n && k < 16; k++) {
        if (ow_linear_at(x, c[k], K, N, L) && !strcmp(L->in, v)) return 1;
        if (ow_is(x, c[k], "QuantizeLinear")) {
            int c2[4], n2 = ow_consumers(x, ow_nd(x, c[k])->out[0], c2, 4);
            for (int j = 0; j < n2 && j < 4; j++) {
                int c3[4], n3 = ow_is(x, c2[j], "DequantizeLinear") ? ow_consumers(x, ow_nd(x, c2[j])->out[0], c3, 4) : 0;
                for (int l = 0; l < n3 && l < 4; l++)
                    if (ow_linear_at(x, c3[l], K, N, L) && !strcmp(L->in, v)) return 1;
            }
        }
    }
    return 0;
}

void ow_mark_linear(ow_ix *x, const ow_lin *L) {
    x->role[L->mm] = R_MAIN;
    if (L->add >= 0) x->role[L->add] = R_MAIN;
    if (L->q >= 0) x->role[L->q] = R_MAIN;
    if (L->dq >= 0) x->role[L->dq] = R_MAIN;
    if (L->w.dq >= 0) x->role[L->w.dq] = R_MAIN;
}

/* ---- regions -------------------------------------------------------------------------------------------- */

int ow_in_list(const char *op, const char *const *ops) {
    for (; *ops; ops++)
        if (!strcmp(op, *ops)) return 1;
    return 0;
}

/* Marks with role r the nodes on a path from value a to value b (forward from a's consumers, back from b's
 * producer), each of an op type in ops; counts[k] gets how many have op type count_ops[k]. TP_OK or the error. */
tp_status ow_mark_region(ow_ix *x, const char *a, const char *b, int r, const char *const *ops, const char *what,
                             const char *const *count_ops, int *counts) {
    memset(x->mark, 0, (size_t)x->n);
    for (int i = 0; i < x->n; i++) { /* forward: file order is topological (the reader checks it) */
        const tp_onnx_node *n = ow_nd(x, i);
        if (!strcmp(n->op_type, "Shape")) continue; /* it reads only the shape: what follows is shape arithmetic */
        for (int j = 0; j < n->n_in && !x->mark[i]; j++)
            x->mark[i] = !strcmp(n->in[j], a) || (x->prod[i][j] >= 0 && x->mark[x->prod[i][j]] == 1);
    }
    /* back from b over forward-reached nodes: those on a path (mark 2) */
    int *stack = malloc(sizeof(int) * (size_t)(x->n + 1)), sp = 0;
    if (!stack) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
    const int pb = ow_producer(x, b);
    if (pb >= 0 && x->mark[pb] == 1) x->mark[pb] = 2, stack[sp++] = pb;
    while (sp > 0) {
        const int i = stack[--sp];
        for (int j = 0; j < ow_nd(x, i)->n_in; j++) {
            const int p = x->prod[i][j];
            if (p >= 0 && x->mark[p] == 1) x->mark[p] = 2, stack[sp++] = p;
        }
    }
    free(stack);
    for (int k = 0; count_ops && count_ops[k]; k++) counts[k] = 0;
    for (int i = 0; i < x->n; i++) {
        if (x->mark[i] != 2) continue;
        if (x->role[i] != R_NONE && x->role[i] != r)
            return ow_fail_node(x, i, "in two subgraphs at once (%s)", what);
        if (!ow_in_list(ow_nd(x, i)->op_type, ops))
            return ow_fail_node(x, i, "an op type the %s subgraph of a ViT does not have", what);
        x->role[i] = (unsigned char)r;
        for (int k = 0; count_ops && count_ops[k]; k++) counts[k] += !strcmp(ow_nd(x, i)->op_type, count_ops[k]);
    }
    return TP_OK;
}


/* The Add of value a and value b (either order), or -1. */
int ow_add_of(const ow_ix *x, const char *a, const char *b) {
    int c[16], n = ow_consumers(x, a, c, 16);
    for (int k = 0; k < n && k < 16; k++) {
        const tp_onnx_node *s = ow_nd(x, c[k]);
        if (ow_is(x, c[k], "Add") && s->n_in == 2 &&
            ((!strcmp(s->in[0], a) && !strcmp(s->in[1], b)) || (!strcmp(s->in[1], a) && !strcmp(s->in[0], b))))
            return c[k];
    }
    return -1;
}

/* The first linear after node `after` (file order) with weight K x N (0: any N) */
int ow_next_linear(const ow_ix *x, int after, int64_t K, int64_t N, ow_lin *L) {
    for (int i = after + 1; i < x->n; i++)
        if (x->role[i] == R_NONE && ow_linear_at(x, i, K, N, L)) return 1;
    return 0;
}

/* ---- parameters ---------------------------------------------------------------------------------------------- */

tp_status ow_tensor_f32(ow_ix *x, const tp_onnx_tensor *t, float scale, float *dst) {
    const size_t n = (size_t)t->numel;
    switch (t->elem_type) {
    case TP_ONNX_FLOAT: memcpy(dst, t->data, n * sizeof(float)); break;
    case TP_ONNX_FLOAT16: tp_convert_to_f32(TP_F16, t->data, dst, n, 1.0f); break;
    case TP_ONNX_BFLOAT16: tp_convert_to_f32(TP_BF16, t->data, dst, n, 1.0f); break;
    case TP_ONNX_FLOAT8E4M3FN: tp_convert_to_f32(TP_E4M3, t->data, dst, n, scale); return TP_OK;
    default:
        return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "initializer '%s': %s weights are not read", t->name,
                            tp_onnx_elem_name(t->elem_type));
    }
    if (scale != 1.0f)
        for (size_t k = 0; k < n; k++) dst[k] *= scale;
    return TP_OK;
}

/* The parameter `name` of the table from t (transposed from (K, N) when wt). */
tp_status ow_set_param(ow_ix *x, tp_params *p, const char *name, const tp_onnx_tensor *t, float scale, int wt) {
    const int i = tp_params_find(p, name);
    if (i < 0 || p->params[i].numel != t->numel)
        return tp_fail_path(x->err, TP_ERR_SHAPE, x->path, "initializer '%s' (%lld values) for tprof's %s (%lld)",
                            t->name, (long long)t->numel, name, i < 0 ? 0LL : (long long)p->params[i].numel);
    tp_param *q = &p->params[i];
    float *d = malloc(sizeof(float) * (size_t)t->numel), *tmp = wt ? malloc(sizeof(float) * (size_t)t->numel) : NULL;
    if (!d || (wt && !tmp)) {
        free(d), free(tmp);
        return tp_fail(x->err, TP_ERR_OOM, "out of host memory reading '%s'", t->name);
    }
    tp_status st = ow_tensor_f32(x, t, scale, wt ? tmp : d);
    if (!st && wt) { /* (K, N) -> (N, K) */
        const int64_t K = t->dims[0], N = t->dims[1];
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) d[n * K + k] = tmp[k * N + n];
    }
    free(tmp);
    if (st) {
        free(d);
        return st;
    }
    free(q->data);
    q->data = d;
    return TP_OK;
}

void ow_note_qdq(tp_onnx_import_info *info, const char *layer, const ow_lin *L) {
    if (!info || (!L->w.qtype && !L->x_type) || info->n_qdq >= TP_ONNX_MAX_QDQ) return;
    tp_onnx_qdq *q = &info->qdq[info->n_qdq++];
    snprintf(q->layer, sizeof q->layer, "%s", layer);
    q->w_scale = L->w.qtype ? L->w.scale : 0.0f, q->w_type = L->w.qtype;
    q->w_max_code = 0.0f;
    for (int64_t k = 0; L->w.qtype == TP_ONNX_FLOAT8E4M3FN && k < L->w.t->numel; k++) {
        const float v = fabsf(tp_e4m3_to_f32(((const unsigned char *)L->w.t->data)[k]));
        if (v > q->w_max_code) q->w_max_code = v;
    }
    q->x_scale = L->x_type ? L->x_scale : 0.0f, q->x_type = L->x_type;
}

tp_status ow_set_linear(ow_ix *x, tp_params *p, const char *layer, const ow_lin *L, tp_onnx_import_info *info) {
    if (!L->b) { /* no bias in the file: only a table without one takes it */
        char wn[TP_NAME_LEN + 8], bn[TP_NAME_LEN + 8];
        snprintf(wn, sizeof wn, "%s.weight", layer);
        snprintf(bn, sizeof bn, "%s.bias", layer);
        if (tp_params_find(p, bn) >= 0)
            return ow_fail_node(x, L->mm, "%s has no bias in the file; this family's layer has one", layer);
        ow_note_qdq(info, layer, L);
        return ow_set_param(x, p, wn, L->w.t, L->w.scale, L->wt);
    }
    char wn[TP_NAME_LEN + 8], bn[TP_NAME_LEN + 8];
    snprintf(wn, sizeof wn, "%s.weight", layer);
    snprintf(bn, sizeof bn, "%s.bias", layer);
    ow_note_qdq(info, layer, L);
    tp_status st = ow_set_param(x, p, wn, L->w.t, L->w.scale, L->wt);
    return st ? st : ow_set_param(x, p, bn, L->b, 1.0f, 0);
}

/* Every node not on the walk: shape arithmetic (computed from Shape outputs and constants only), or an error. */
tp_status ow_check_rest(ow_ix *x, const char *const *shape_ops, const char *family, tp_onnx_import_info *info) {
    unsigned char *stat = x->mark; /* per node: its outputs are shape values */
    memset(stat, 0, (size_t)x->n);
    for (int i = 0; i < x->n; i++) {
        const tp_onnx_node *n = ow_nd(x, i);
        if (x->role[i] == R_NONE) {
            int ok = ow_in_list(n->op_type, shape_ops);
            for (int j = 0; j < n->n_in && ok && strcmp(n->op_type, "Shape") != 0; j++) {
                const int p = x->prod[i][j];
                ok = !n->in[j][0] || (p >= 0 ? stat[p] : tp_onnx_find_initializer(x->m, n->in[j]) != NULL);
            }
            if (!ok)
                return ow_fail_node(x, i, "outside the %s pattern: not on the residual stream, in an attention or activation "
                                 "subgraph, or shape arithmetic", family);
            x->role[i] = R_SHAPE;
            stat[i] = 1;
        }
        if (info) {
            info->n_main += x->role[i] == R_MAIN, info->n_attention += x->role[i] == R_ATTN;
            info->n_gelu += x->role[i] == R_GELU, info->n_shape += x->role[i] == R_SHAPE;
        }
    }
    return TP_OK;
}

/* The fewest inputs the ONNX operator spec (onnx/docs/Operators.md) allows each operator the walks read, in every
 * opset tprof reads: a node with fewer is not a valid model. The walks index in[] and out[0] by these counts, so a
 * file that breaks them is refused here, before any walk (fuzz_onnx_import found a one-input Gather read past its
 * input list, a one-input Add a linear's bias Add). Operators not listed are compared by name only or read through
 * loops bounded by n_in. */
static int min_inputs(const char *op) {
    static const char *const two[] = {"Add", "Sub", "Mul", "Div", "Pow", "MatMul", "Equal", "Gather", "Reshape",
                                      "Expand", "Gemm", "Conv", "QuantizeLinear", "DequantizeLinear",
                                      "LayerNormalization", NULL};
    static const char *const one[] = {"Softmax", "Erf", "Sqrt", "Cos", "Sin", "Neg", "Sigmoid", "Tanh", "Transpose",
                                      "Cast", "Shape", "ReduceMean", "Squeeze", "Unsqueeze", "Split", "Concat",
                                      "Identity", "Slice", "ConstantOfShape", "Gelu", "Flatten", NULL};
    if (!strcmp(op, "Where")) return 3;
    return ow_in_list(op, two) ? 2 : ow_in_list(op, one) ? 1 : 0;
}

tp_status ow_index_build(ow_ix *x) {
    x->n = tp_onnx_n_nodes(x->m);
    for (int i = 0; i < x->n; i++) {
        const tp_onnx_node *n = ow_nd(x, i);
        const int need = min_inputs(n->op_type);
        if (n->n_in < need || n->n_out < 1)
            return tp_fail_path(x->err, TP_ERR_FORMAT, x->path, "node %d '%s' (%s): %d input(s) and %d output(s); "
                                "the ONNX operator takes at least %d and 1", i, n->name ? n->name : "", n->op_type,
                                n->n_in, n->n_out, need);
    }
    x->role = calloc((size_t)x->n + 1, 1);
    x->mark = calloc((size_t)x->n + 1, 1);
    x->prod = calloc((size_t)x->n + 1, sizeof *x->prod);
    if (!x->role || !x->mark || !x->prod) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < x->n; i++) {
        const tp_onnx_node *n = ow_nd(x, i);
        if (!(x->prod[i] = malloc(sizeof(int) * (size_t)(n->n_in + 1)))) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
        for (int j = 0; j < n->n_in; j++) {
            x->prod[i][j] = -1;
            for (int k = i - 1; k >= 0 && n->in[j][0] && x->prod[i][j] < 0; k--) /* producers come earlier */
                for (int o = 0; o < ow_nd(x, k)->n_out; o++)
                    if (!strcmp(ow_nd(x, k)->out[o], n->in[j])) x->prod[i][j] = k;
        }
    }
    return TP_OK;
}

void ow_index_free(ow_ix *x) {
    for (int i = 0; x->prod && i < x->n; i++) free(x->prod[i]);
    free(x->prod), free(x->role), free(x->mark);
}

/* The node of op type op reading both a and b (either order), or -1 */
int ow_binop_of(const ow_ix *x, const char *op, const char *a, const char *b) {
    int c[16], n = ow_consumers(x, a, c, 16);
    for (int k = 0; k < n && k < 16; k++) {
        const tp_onnx_node *s = ow_nd(x, c[k]);
        if (ow_is(x, c[k], op) && s->n_in == 2 &&
            ((!strcmp(s->in[0], a) && !strcmp(s->in[1], b)) || (!strcmp(s->in[1], a) && !strcmp(s->in[0], b))))
            return c[k];
    }
    return -1;
}

/* A scalar constant's value, or NAN */
double ow_scalar_of(const ow_ix *x, const char *name) {
    float f;
    return ow_scalar_f32(x, name, &f) ? (double)f : NAN;
}

tp_status ow_check_filled(ow_ix *x, const tp_params *p) {
    for (int i = 0; i < p->n_params; i++)
        if (!p->params[i].data)
            return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "no tensor in the file for tprof's parameter %s",
                                p->params[i].name);
    return TP_OK;
}

tp_status ow_grow(ow_ix *x, void **arr, int *cap, int n, size_t elt) {
    if (n < *cap) return TP_OK;
    const int nc = *cap ? 2 * *cap : 16;
    void *na = realloc(*arr, elt * (size_t)nc);
    if (!na) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
    *arr = na, *cap = nc;
    return TP_OK;
}
