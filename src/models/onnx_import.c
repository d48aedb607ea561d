/* onnx_import.c: an ONNX file onto a tprof family (onnx_import.h). The walk follows the residual stream node by
 * node; the subgraphs between two weights (attention, GELU) are taken as the nodes on a path between them, their op
 * types checked; shape arithmetic is what remains, computed from Shape outputs and constants only. */
#include "models/onnx_import.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "models/vit.h"

enum { R_NONE = 0, R_MAIN, R_ATTN, R_GELU, R_SHAPE };

typedef struct {
    const tp_onnx_model *m;
    const char *path;
    int n;
    int **prod;          /* prod[i][k]: the node producing node i's input k, -1 for graph inputs, initializers, "" */
    unsigned char *role; /* R_* per node */
    unsigned char *mark; /* scratch for regions */
    tp_error *err;
} ix;

static const tp_onnx_node *nd(const ix *x, int i) { return tp_onnx_node_at(x->m, i); }
static int is(const ix *x, int i, const char *op) { return i >= 0 && !strcmp(nd(x, i)->op_type, op); }

/* "node 12 'name' (Op): " and the reason, as TP_ERR_UNSUPPORTED */
static tp_status fail_node(ix *x, int i, const char *fmt, const char *what) {
    const tp_onnx_node *n = nd(x, i);
    char why[400];
    snprintf(why, sizeof why, fmt, what ? what : "");
    return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "node %d '%s' (%s): %s", i, n->name ? n->name : "",
                        n->op_type, why);
}

static int producer(const ix *x, const char *v) {
    if (!v || !v[0]) return -1;
    for (int i = 0; i < x->n; i++)
        for (int o = 0; o < nd(x, i)->n_out; o++)
            if (!strcmp(nd(x, i)->out[o], v)) return i;
    return -1;
}

/* The consumers of value v, Shape nodes left out (they read only its shape), in file order; returns how many. */
static int consumers(const ix *x, const char *v, int *out, int max) {
    int k = 0;
    for (int i = 0; i < x->n; i++) {
        const tp_onnx_node *n = nd(x, i);
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
static int consumer_op(const ix *x, const char *v, const char *op) {
    int c[16], n = consumers(x, v, c, 16), found = -1;
    for (int k = 0; k < n && k < 16; k++)
        if (is(x, c[k], op)) {
            if (found >= 0) return -1;
            found = c[k];
        }
    return found;
}

/* name, or what an Identity chain before it copies (the TorchScript exporter shares equal initializers, e.g. every
 * block's zero bias in a freshly initialized model, through Identity nodes) */
static const char *unalias(const ix *x, const char *name) {
    for (int hops = 0; hops < 8; hops++) {
        const int p = producer(x, name);
        if (p < 0 || strcmp(nd(x, p)->op_type, "Identity") != 0 || nd(x, p)->n_in != 1) break;
        name = nd(x, p)->in[0];
    }
    return name;
}

/* The tensor behind a name: an initializer or a Constant node's `value`, through Identity nodes. */
static const tp_onnx_tensor *const_tensor(const ix *x, const char *name) {
    name = unalias(x, name);
    const tp_onnx_tensor *t = tp_onnx_find_initializer(x->m, name);
    if (t) return t;
    const int p = producer(x, name);
    if (is(x, p, "Constant")) {
        const tp_onnx_attr *a = tp_onnx_node_attr(nd(x, p), "value");
        if (a && a->type == TP_ONNX_ATTR_TENSOR) return a->t;
    }
    return NULL;
}

#define DYN INT64_MIN

/* The integer vector a value holds when the file fixes it: a constant (int64 or int32), or Concat / Unsqueeze of
 * such pieces, an entry computed at run time (a Gather of a Shape) given as DYN. Returns the length, or -1. */
static int const_ints(const ix *x, const char *name, int64_t *v, int max, int depth) {
    const tp_onnx_tensor *t = const_tensor(x, name);
    if (t) {
        if ((t->elem_type != TP_ONNX_INT64 && t->elem_type != TP_ONNX_INT32) || t->numel > max) return -1;
        for (int64_t k = 0; k < t->numel; k++)
            v[k] = t->elem_type == TP_ONNX_INT64 ? ((const int64_t *)t->data)[k] : ((const int32_t *)t->data)[k];
        return (int)t->numel;
    }
    const int p = producer(x, name);
    if (p < 0 || depth > 8) return -1;
    const tp_onnx_node *n = nd(x, p);
    if (!strcmp(n->op_type, "Concat")) {
        int len = 0;
        for (int j = 0; j < n->n_in; j++) {
            const int l = const_ints(x, n->in[j], v + len, max - len, depth + 1);
            if (l < 0) return -1;
            len += l;
        }
        return len;
    }
    if (!strcmp(n->op_type, "Unsqueeze") && max >= 1) { /* a scalar made a 1-vector: its value if fixed */
        int64_t s[1];
        v[0] = const_ints(x, n->in[0], s, 1, depth + 1) == 1 ? s[0] : DYN;
        return 1;
    }
    return -1;
}

/* ---- weights and linears -------------------------------------------------------------------------------- */

typedef struct {
    const tp_onnx_tensor *t;
    float scale; /* DequantizeLinear's per-tensor scale; 1 for a float initializer */
    int qtype;   /* the quantized element type, 0 for float */
    int dq;      /* the DequantizeLinear node, -1 */
} wref;

static int float_type(int e) { return e == TP_ONNX_FLOAT || e == TP_ONNX_FLOAT16 || e == TP_ONNX_BFLOAT16; }

/* A scalar float constant (a Q/DQ scale): 1 and *f, or 0. */
static int scalar_f32(const ix *x, const char *name, float *f) {
    const tp_onnx_tensor *t = const_tensor(x, name);
    if (!t || t->numel != 1) return 0;
    if (t->elem_type == TP_ONNX_FLOAT) *f = *(const float *)t->data;
    else if (t->elem_type == TP_ONNX_FLOAT16) tp_convert_to_f32(TP_F16, t->data, f, 1, 1.0f);
    else return 0;
    return 1;
}

/* A zero point that is absent or 0 (FLOAT8E4M3FN's zero is the byte 0, as are int8's and uint8's). */
static int zero_point_ok(const ix *x, const tp_onnx_node *n) {
    if (n->n_in < 3 || !n->in[2][0]) return 1;
    const tp_onnx_tensor *z = const_tensor(x, n->in[2]);
    if (!z || z->numel != 1) return 0;
    return ((const unsigned char *)z->data)[0] == 0;
}

/* name as a weight: a float initializer, or DequantizeLinear of an FLOAT8E4M3FN initializer with a per-tensor
 * scale and zero point 0 (ModelOpt's FP8 weights). */
static int weight_of(const ix *x, const char *name, wref *w) {
    memset(w, 0, sizeof *w);
    w->dq = -1;
    w->scale = 1.0f;
    name = unalias(x, name);
    const tp_onnx_tensor *t = tp_onnx_find_initializer(x->m, name);
    if (t && float_type(t->elem_type)) {
        w->t = t;
        return 1;
    }
    const int p = producer(x, name);
    if (!is(x, p, "DequantizeLinear")) return 0;
    const tp_onnx_node *n = nd(x, p);
    const tp_onnx_tensor *q = tp_onnx_find_initializer(x->m, n->in[0]);
    const tp_onnx_attr *bs = tp_onnx_node_attr(n, "block_size");
    if (!q || q->elem_type != TP_ONNX_FLOAT8E4M3FN || n->n_in < 2 || !scalar_f32(x, n->in[1], &w->scale) ||
        !zero_point_ok(x, n) || (bs && bs->i != 0))
        return 0;
    w->t = q, w->qtype = q->elem_type, w->dq = p;
    return 1;
}

typedef struct {
    int mm, add, q, dq;      /* the MatMul or Gemm, its bias Add (-1: Gemm's own C), the input's Q/DQ pair (-1) */
    wref w;
    const tp_onnx_tensor *b; /* (N) */
    int wt;                  /* 1: the weight is (K, N) (MatMul, Gemm transB 0): transposed into the Linear's */
    int64_t K, N;
    const char *in, *out;    /* the activation before its Q/DQ, and the output after the bias */
    float x_scale;
    int x_type;
} lin;

/* Node i as a linear: MatMul (x, W) + Add (b), or Gemm (x, W, b) with alpha 1, beta 1, transA 0; W (K, N) or, Gemm
 * transB 1, (N, K); x possibly through QuantizeLinear -> DequantizeLinear (per-tensor). K and N checked where
 * nonzero. 1: found. */
static int linear_at(const ix *x, int i, int64_t K, int64_t N, lin *L) {
    memset(L, 0, sizeof *L);
    L->add = L->q = L->dq = -1;
    L->mm = i;
    const int gemm = is(x, i, "Gemm");
    if (!gemm && !is(x, i, "MatMul")) return 0;
    const tp_onnx_node *n = nd(x, i);
    if (n->n_in < 2 || !weight_of(x, n->in[1], &L->w) || L->w.t->ndim != 2) return 0;
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
    const int dq = producer(x, L->in);
    if (is(x, dq, "DequantizeLinear")) { /* the input quantized and dequantized: its scale noted */
        const int q = producer(x, nd(x, dq)->in[0]);
        float s2 = 0;
        if (!is(x, q, "QuantizeLinear") || nd(x, dq)->n_in < 2 || nd(x, q)->n_in < 2 ||
            !scalar_f32(x, nd(x, dq)->in[1], &L->x_scale) || !scalar_f32(x, nd(x, q)->in[1], &s2) ||
            s2 != L->x_scale || !zero_point_ok(x, nd(x, q)) || !zero_point_ok(x, nd(x, dq)))
            return 0;
        const tp_onnx_tensor *z = nd(x, q)->n_in > 2 ? const_tensor(x, nd(x, q)->in[2]) : NULL;
        L->x_type = z ? z->elem_type : TP_ONNX_UINT8;
        L->q = q, L->dq = dq;
        L->in = nd(x, q)->in[0];
    }
    if (gemm) {
        if (n->n_in < 3 || !(L->b = const_tensor(x, n->in[2]))) return 0;
        L->out = n->out[0];
    } else {
        const int a = consumer_op(x, n->out[0], "Add");
        if (a < 0) return 0;
        const tp_onnx_node *an = nd(x, a);
        const char *other = !strcmp(an->in[0], n->out[0]) ? an->in[1] : an->in[0];
        if (!(L->b = const_tensor(x, other))) return 0;
        L->add = a;
        L->out = an->out[0];
    }
    return L->b->ndim == 1 && L->b->dims[0] == L->N && float_type(L->b->elem_type);
}

/* The linear reading value v (directly or through its Q/DQ pair), or 0. */
static int linear_of(const ix *x, const char *v, int64_t K, int64_t N, lin *L) {
    int c[16], n = consumers(x, v, c, 16);
    for (int k = 0; k < n && k < 16; k++) {
        if (linear_at(x, c[k], K, N, L) && !strcmp(L->in, v)) return 1;
        if (is(x, c[k], "QuantizeLinear")) {
            int c2[4], n2 = consumers(x, nd(x, c[k])->out[0], c2, 4);
            for (int j = 0; j < n2 && j < 4; j++) {
                int c3[4], n3 = is(x, c2[j], "DequantizeLinear") ? consumers(x, nd(x, c2[j])->out[0], c3, 4) : 0;
                for (int l = 0; l < n3 && l < 4; l++)
                    if (linear_at(x, c3[l], K, N, L) && !strcmp(L->in, v)) return 1;
            }
        }
    }
    return 0;
}

static void mark_linear(ix *x, const lin *L) {
    x->role[L->mm] = R_MAIN;
    if (L->add >= 0) x->role[L->add] = R_MAIN;
    if (L->q >= 0) x->role[L->q] = R_MAIN;
    if (L->dq >= 0) x->role[L->dq] = R_MAIN;
    if (L->w.dq >= 0) x->role[L->w.dq] = R_MAIN;
}

/* ---- regions -------------------------------------------------------------------------------------------- */

static int in_list(const char *op, const char *const *ops) {
    for (; *ops; ops++)
        if (!strcmp(op, *ops)) return 1;
    return 0;
}

/* Marks with role r the nodes on a path from value a to value b (forward from a's consumers, back from b's
 * producer), each of an op type in ops; counts[k] gets how many have op type count_ops[k]. TP_OK or the error. */
static tp_status mark_region(ix *x, const char *a, const char *b, int r, const char *const *ops, const char *what,
                             const char *const *count_ops, int *counts) {
    memset(x->mark, 0, (size_t)x->n);
    for (int i = 0; i < x->n; i++) { /* forward: file order is topological (the reader checks it) */
        const tp_onnx_node *n = nd(x, i);
        if (!strcmp(n->op_type, "Shape")) continue; /* it reads only the shape: what follows is shape arithmetic */
        for (int j = 0; j < n->n_in && !x->mark[i]; j++)
            x->mark[i] = !strcmp(n->in[j], a) || (x->prod[i][j] >= 0 && x->mark[x->prod[i][j]] == 1);
    }
    /* back from b over forward-reached nodes: those on a path (mark 2) */
    int *stack = malloc(sizeof(int) * (size_t)(x->n + 1)), sp = 0;
    if (!stack) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
    const int pb = producer(x, b);
    if (pb >= 0 && x->mark[pb] == 1) x->mark[pb] = 2, stack[sp++] = pb;
    while (sp > 0) {
        const int i = stack[--sp];
        for (int j = 0; j < nd(x, i)->n_in; j++) {
            const int p = x->prod[i][j];
            if (p >= 0 && x->mark[p] == 1) x->mark[p] = 2, stack[sp++] = p;
        }
    }
    free(stack);
    for (int k = 0; count_ops && count_ops[k]; k++) counts[k] = 0;
    for (int i = 0; i < x->n; i++) {
        if (x->mark[i] != 2) continue;
        if (x->role[i] != R_NONE && x->role[i] != r)
            return fail_node(x, i, "in two subgraphs at once (%s)", what);
        if (!in_list(nd(x, i)->op_type, ops))
            return fail_node(x, i, "an op type the %s subgraph of a ViT does not have", what);
        x->role[i] = (unsigned char)r;
        for (int k = 0; count_ops && count_ops[k]; k++) counts[k] += !strcmp(nd(x, i)->op_type, count_ops[k]);
    }
    return TP_OK;
}

/* ---- the ViT ---------------------------------------------------------------------------------------------- */

typedef struct {
    const tp_onnx_tensor *ln1w, *ln1b, *ln2w, *ln2b;
    lin qkv, proj, fc1, fc2;
} vit_block;

typedef struct {
    const tp_onnx_tensor *conv_w, *conv_b, *cls, *pos, *nw, *nb;
    lin head;
    int has_head;
    vit_block *blk;
    int depth, cap;
    int64_t S, P, C, T, H, Hd;
    int class_token, pool, gelu_tanh;
    float eps;
} vit_map;

/* The LayerNormalization reading v over its last axis with (C) scale and bias: its node, or -1. */
static int layernorm_of(ix *x, const char *v, int64_t C, const tp_onnx_tensor **w, const tp_onnx_tensor **b,
                        float *eps) {
    const int i = consumer_op(x, v, "LayerNormalization");
    if (i < 0) return -1;
    const tp_onnx_node *n = nd(x, i);
    const tp_onnx_attr *ax = tp_onnx_node_attr(n, "axis"), *ep = tp_onnx_node_attr(n, "epsilon");
    if (n->n_in < 3 || !(*w = const_tensor(x, n->in[1])) || !(*b = const_tensor(x, n->in[2])) ||
        (*w)->ndim != 1 || (*w)->dims[0] != C || (*b)->ndim != 1 || (*b)->dims[0] != C ||
        !float_type((*w)->elem_type) || !float_type((*b)->elem_type) || (ax && ax->i != -1 && ax->i != 2) ||
        n->n_out != 1)
        return -1;
    *eps = ep ? (float)ep->f : 1e-5f; /* the spec's default */
    x->role[i] = R_MAIN;
    return i;
}

/* The Add of value a and value b (either order), or -1. */
static int add_of(const ix *x, const char *a, const char *b) {
    int c[16], n = consumers(x, a, c, 16);
    for (int k = 0; k < n && k < 16; k++) {
        const tp_onnx_node *s = nd(x, c[k]);
        if (is(x, c[k], "Add") && s->n_in == 2 &&
            ((!strcmp(s->in[0], a) && !strcmp(s->in[1], b)) || (!strcmp(s->in[1], a) && !strcmp(s->in[0], b))))
            return c[k];
    }
    return -1;
}

/* The first linear after node `after` (file order) with weight K x N (0: any N) */
static int next_linear(const ix *x, int after, int64_t K, int64_t N, lin *L) {
    for (int i = after + 1; i < x->n; i++)
        if (x->role[i] == R_NONE && linear_at(x, i, K, N, L)) return 1;
    return 0;
}

static const char *const ATTN_OPS[] = {"Reshape", "Transpose", "Split", "Squeeze", "Unsqueeze", "Slice", "Gather",
                                       "Mul", "Div", "MatMul", "Softmax", "Concat", "Cast", NULL};
static const char *const GELU_OPS[] = {"Div", "Mul", "Add", "Erf", "Tanh", "Pow", "Gelu", "Cast", NULL};
/* shape arithmetic: what may compute from Shape outputs and constants */
static const char *const SHAPE_OPS[] = {"Shape", "Constant", "Identity", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
                                        "Cast", "Sqrt", "Div", "Mul", "Add", "Sub", "Reshape", "ConstantOfShape",
                                        "Equal", "Where", "Range", "Expand", NULL};

/* One block from the stream value v (its first LayerNormalization already read: ln1 node i1, output u). */
static tp_status vit_block_at(ix *x, vit_map *vm, const char *v, const char *u, vit_block *bk, const char **next) {
    const int64_t C = vm->C;
    mark_linear(x, &bk->qkv);
    /* heads: the Reshape of the qkv output to (B, T, 3, H, D) */
    int64_t sh[8];
    int64_t H = 0;
    int c[16], nc = consumers(x, bk->qkv.out, c, 16);
    for (int k = 0; k < nc && k < 16 && !H; k++) {
        if (!is(x, c[k], "Reshape") || nd(x, c[k])->n_in < 2) continue;
        const int l = const_ints(x, nd(x, c[k])->in[1], sh, 8, 0);
        if (l == 5 && sh[2] == 3) H = sh[3] > 0 ? sh[3] : (sh[4] > 0 && C % sh[4] == 0 ? C / sh[4] : 0);
    }
    if (H <= 0 || C % H != 0)
        return fail_node(x, bk->qkv.add >= 0 ? bk->qkv.add : bk->qkv.mm, "%sthe qkv output has no Reshape to (B, T, 3, "
                         "heads, head dim) with a fixed head count", "");
    if (vm->H && vm->H != H) return fail_node(x, bk->qkv.mm, "%sa head count other than the first block's", "");
    vm->H = H;
    const int last_qkv = bk->qkv.add >= 0 ? bk->qkv.add : bk->qkv.mm;
    if (!next_linear(x, last_qkv, C, C, &bk->proj))
        return fail_node(x, last_qkv, "%sno (C, C) projection linear follows the qkv linear", "");
    static const char *const attn_count[] = {"Softmax", "MatMul", NULL};
    int counts[3];
    tp_status st = mark_region(x, bk->qkv.out, bk->proj.in, R_ATTN, ATTN_OPS, "attention", attn_count, counts);
    if (st) return st;
    if (counts[0] != 1 || counts[1] != 2)
        return fail_node(x, bk->proj.mm, "%sthe attention before this linear has not one Softmax and two MatMul "
                         "(scaled dot-product attention)", "");
    mark_linear(x, &bk->proj);
    const int r1 = add_of(x, bk->proj.out, v);
    if (r1 < 0) return fail_node(x, bk->proj.add >= 0 ? bk->proj.add : bk->proj.mm, "%sno residual Add after it", "");
    x->role[r1] = R_MAIN;
    const char *s1 = nd(x, r1)->out[0];
    float eps2;
    const int i2 = layernorm_of(x, s1, C, &bk->ln2w, &bk->ln2b, &eps2);
    if (i2 < 0) return fail_node(x, r1, "%sno LayerNormalization over C reads the residual sum", "");
    if (eps2 != vm->eps) return fail_node(x, i2, "%san epsilon other than the first LayerNormalization's", "");
    if (!linear_of(x, nd(x, i2)->out[0], C, 0, &bk->fc1))
        return fail_node(x, i2, "%sno MLP linear (C, hidden) with a bias reads it", "");
    mark_linear(x, &bk->fc1);
    if (vm->Hd && bk->fc1.N != vm->Hd) return fail_node(x, bk->fc1.mm, "%san MLP width other than block 0's", "");
    vm->Hd = bk->fc1.N;
    const int last_fc1 = bk->fc1.add >= 0 ? bk->fc1.add : bk->fc1.mm;
    if (!next_linear(x, last_fc1, vm->Hd, C, &bk->fc2))
        return fail_node(x, last_fc1, "%sno (hidden, C) MLP linear follows", "");
    static const char *const gelu_count[] = {"Erf", "Tanh", "Gelu", NULL};
    if ((st = mark_region(x, bk->fc1.out, bk->fc2.in, R_GELU, GELU_OPS, "GELU", gelu_count, counts))) return st;
    int tanh_form = -1;
    if (counts[0] == 1 && !counts[1] && !counts[2]) tanh_form = 0;
    if (!counts[0] && counts[1] == 1 && !counts[2]) tanh_form = 1;
    for (int i = 0; i < x->n && counts[2] == 1 && !counts[0] && !counts[1]; i++)
        if (x->mark[i] == 2 && is(x, i, "Gelu")) {
            const tp_onnx_attr *ap = tp_onnx_node_attr(nd(x, i), "approximate");
            tanh_form = !ap || !strcmp(ap->s, "none") ? 0 : !strcmp(ap->s, "tanh") ? 1 : -1;
        }
    if (tanh_form < 0)
        return fail_node(x, bk->fc2.mm, "%sthe activation before this linear is not a GELU (one Erf, one Tanh or one "
                         "Gelu node)", "");
    if (vm->depth > 0 && tanh_form != vm->gelu_tanh)
        return fail_node(x, bk->fc2.mm, "%sa GELU form other than block 0's", "");
    vm->gelu_tanh = tanh_form;
    mark_linear(x, &bk->fc2);
    const int r2 = add_of(x, bk->fc2.out, s1);
    if (r2 < 0) return fail_node(x, bk->fc2.add >= 0 ? bk->fc2.add : bk->fc2.mm, "%sno residual Add after it", "");
    x->role[r2] = R_MAIN;
    (void)u;
    *next = nd(x, r2)->out[0];
    return TP_OK;
}

/* The patch embedding, class token and position embedding from the image input; *v the stream after them. */
static tp_status vit_stem(ix *x, vit_map *vm, const tp_onnx_value *in, const char **v) {
    const int cv = consumer_op(x, in->name, "Conv");
    if (cv < 0) {
        int c[4];
        const int n = consumers(x, in->name, c, 4);
        if (n > 0) return fail_node(x, c[0], "%sthe image input's first op is not the Conv patch embedding", "");
        return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "input '%s' is read by no Conv", in->name);
    }
    const tp_onnx_node *n = nd(x, cv);
    const tp_onnx_attr *ks = tp_onnx_node_attr(n, "kernel_shape"), *stv = tp_onnx_node_attr(n, "strides"),
                       *pd = tp_onnx_node_attr(n, "pads"), *dl = tp_onnx_node_attr(n, "dilations"),
                       *gr = tp_onnx_node_attr(n, "group"), *ap = tp_onnx_node_attr(n, "auto_pad");
    vm->conv_w = n->n_in > 1 ? const_tensor(x, n->in[1]) : NULL;
    vm->conv_b = n->n_in > 2 ? const_tensor(x, n->in[2]) : NULL;
    if (!vm->conv_w || vm->conv_w->ndim != 4 || vm->conv_w->dims[1] != 3 || vm->conv_w->dims[2] != vm->conv_w->dims[3] ||
        !float_type(vm->conv_w->elem_type) || !vm->conv_b || vm->conv_b->ndim != 1 ||
        vm->conv_b->dims[0] != vm->conv_w->dims[0])
        return fail_node(x, cv, "%sa patch embedding needs a (C, 3, P, P) weight and a (C) bias as initializers", "");
    vm->C = vm->conv_w->dims[0], vm->P = vm->conv_w->dims[2];
    int ok = (!gr || gr->i == 1) && (!ap || !strcmp(ap->s, "NOTSET"));
    for (int k = 0; k < 2 && ok; k++)
        ok = (!ks || (ks->n == 2 && ks->ints[k] == vm->P)) && stv && stv->n == 2 && stv->ints[k] == vm->P &&
             (!dl || (dl->n == 2 && dl->ints[k] == 1));
    for (size_t k = 0; pd && k < pd->n && ok; k++) ok = pd->ints[k] == 0;
    if (!ok) return fail_node(x, cv, "%snot a patch embedding (kernel = stride = P, no padding, group 1)", "");
    if (vm->S % vm->P != 0) return fail_node(x, cv, "%sthe patch does not divide the image side", "");
    x->role[cv] = R_MAIN;
    const char *cur = n->out[0];
    /* (B, C, S/P, S/P) -> (B, N, C): Reshape or Flatten to (B, C, N), then Transpose (0, 2, 1) */
    int r = consumer_op(x, cur, "Reshape");
    if (r < 0) r = consumer_op(x, cur, "Flatten");
    int t = r >= 0 ? consumer_op(x, nd(x, r)->out[0], "Transpose") : -1;
    const tp_onnx_attr *perm = t >= 0 ? tp_onnx_node_attr(nd(x, t), "perm") : NULL;
    if (t < 0 || !perm || perm->n != 3 || perm->ints[0] != 0 || perm->ints[1] != 2 || perm->ints[2] != 1)
        return fail_node(x, cv, "%sits output is not flattened to (B, C, N) and transposed to (B, N, C)", "");
    x->role[r] = x->role[t] = R_MAIN;
    cur = nd(x, t)->out[0];
    const int64_t Np = (vm->S / vm->P) * (vm->S / vm->P);
    const int cc = consumer_op(x, cur, "Concat");
    if (cc >= 0) { /* the class token in front: Concat(Expand(cls (1, 1, C)), patches) along axis 1 */
        const tp_onnx_node *c = nd(x, cc);
        const tp_onnx_attr *ax = tp_onnx_node_attr(c, "axis");
        const int e = c->n_in == 2 ? producer(x, c->in[0]) : -1;
        vm->cls = is(x, e, "Expand") ? const_tensor(x, nd(x, e)->in[0]) : c->n_in == 2 ? const_tensor(x, c->in[0]) : NULL;
        if (!ax || ax->i != 1 || strcmp(c->in[1], cur) != 0 || !vm->cls || vm->cls->ndim != 3 || vm->cls->dims[0] != 1 ||
            vm->cls->dims[1] != 1 || vm->cls->dims[2] != vm->C || !float_type(vm->cls->elem_type))
            return fail_node(x, cc, "%snot a class token: Concat along axis 1 of a (1, 1, C) initializer (through "
                             "Expand) before the patches", "");
        x->role[cc] = R_MAIN;
        if (is(x, e, "Expand")) x->role[e] = R_MAIN;
        vm->class_token = 1;
        cur = c->out[0];
    }
    vm->T = Np + vm->class_token;
    const int pa = consumer_op(x, cur, "Add");
    const tp_onnx_node *pn = pa >= 0 ? nd(x, pa) : NULL;
    vm->pos = pn ? const_tensor(x, !strcmp(pn->in[0], cur) ? pn->in[1] : pn->in[0]) : NULL;
    if (!vm->pos || vm->pos->ndim != 3 || vm->pos->dims[0] != 1 || vm->pos->dims[1] != vm->T ||
        vm->pos->dims[2] != vm->C || !float_type(vm->pos->elem_type))
        return pa >= 0 ? fail_node(x, pa, "%snot the position embedding: an Add of a (1, T, C) initializer", "")
                       : tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "no position embedding (an Add of a (1, %lld, "
                                      "%lld) initializer) after the patch embedding", (long long)vm->T, (long long)vm->C);
    x->role[pa] = R_MAIN;
    *v = pn->out[0];
    return TP_OK;
}

/* The walk: stem, blocks, final norm, pooling, head; the graph output must be where it ends. */
static tp_status vit_walk(ix *x, vit_map *vm, const tp_onnx_value *in, const tp_onnx_value *out) {
    const char *v = NULL;
    tp_status st = vit_stem(x, vm, in, &v);
    if (st) return st;
    for (;;) {
        const tp_onnx_tensor *w, *b;
        float eps;
        const int li = layernorm_of(x, v, vm->C, &w, &b, &eps);
        if (li < 0) {
            int c[4];
            const int n = consumers(x, v, c, 4);
            return n > 0 ? fail_node(x, c[0], "%sexpected a LayerNormalization over C here (opset 17 or later: the "
                                     "ReduceMean decomposition of older exports is not mapped)", "")
                         : tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "the residual stream ends without a norm");
        }
        if (vm->depth == 0 && !vm->nw) vm->eps = eps;
        if (eps != vm->eps) return fail_node(x, li, "%san epsilon other than the first LayerNormalization's", "");
        const char *u = nd(x, li)->out[0];
        lin qkv;
        if (!linear_of(x, u, vm->C, 3 * vm->C, &qkv)) { /* the final norm */
            vm->nw = w, vm->nb = b;
            v = u;
            break;
        }
        if (vm->depth == vm->cap) {
            vm->cap = vm->cap ? 2 * vm->cap : 16;
            vit_block *nb = realloc(vm->blk, sizeof *nb * (size_t)vm->cap);
            if (!nb) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
            vm->blk = nb;
        }
        vit_block *bk = &vm->blk[vm->depth];
        memset(bk, 0, sizeof *bk);
        bk->ln1w = w, bk->ln1b = b, bk->qkv = qkv;
        if ((st = vit_block_at(x, vm, v, u, bk, &v))) return st;
        vm->depth++;
    }
    if (vm->depth == 0) return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "no transformer block found");
    /* pooling: the class token's Gather (axis 1, index 0), or none (every token) */
    vm->pool = TP_VIT_POOL_NONE;
    const int g = consumer_op(x, v, "Gather");
    if (g >= 0) {
        const tp_onnx_attr *ax = tp_onnx_node_attr(nd(x, g), "axis");
        int64_t idx[2];
        if (!ax || ax->i != 1 || const_ints(x, nd(x, g)->in[1], idx, 2, 0) != 1 || idx[0] != 0 || !vm->class_token)
            return fail_node(x, g, "%snot the class token's pooling (a Gather of index 0 along axis 1)", "");
        x->role[g] = R_MAIN;
        vm->pool = TP_VIT_POOL_TOKEN;
        v = nd(x, g)->out[0];
    } else if (consumer_op(x, v, "ReduceMean") >= 0) {
        return fail_node(x, consumer_op(x, v, "ReduceMean"), "%smean pooling (timm's global_pool 'avg'): not mapped "
                         "yet", "");
    }
    if (strcmp(v, out->name) != 0) {
        if (!linear_of(x, v, vm->C, 0, &vm->head)) {
            int c[4];
            const int n = consumers(x, v, c, 4);
            return n > 0 ? fail_node(x, c[0], "%snot a classifier head (a Gemm or MatMul + Add of (C, classes))", "")
                         : tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "the pooled value is not the output");
        }
        mark_linear(x, &vm->head);
        vm->has_head = 1;
        if (strcmp(vm->head.out, out->name) != 0)
            return fail_node(x, vm->head.add >= 0 ? vm->head.add : vm->head.mm, "%sthe head's output is not the "
                             "graph's output", "");
    }
    return TP_OK;
}

/* ---- parameters ---------------------------------------------------------------------------------------------- */

static tp_status tensor_f32(ix *x, const tp_onnx_tensor *t, float scale, float *dst) {
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
static tp_status set_param(ix *x, tp_params *p, const char *name, const tp_onnx_tensor *t, float scale, int wt) {
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
    tp_status st = tensor_f32(x, t, scale, wt ? tmp : d);
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

static void note_qdq(tp_onnx_import_info *info, const char *layer, const lin *L) {
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

static tp_status set_linear(ix *x, tp_params *p, const char *layer, const lin *L, tp_onnx_import_info *info) {
    char wn[TP_NAME_LEN + 8], bn[TP_NAME_LEN + 8];
    snprintf(wn, sizeof wn, "%s.weight", layer);
    snprintf(bn, sizeof bn, "%s.bias", layer);
    note_qdq(info, layer, L);
    tp_status st = set_param(x, p, wn, L->w.t, L->w.scale, L->wt);
    return st ? st : set_param(x, p, bn, L->b, 1.0f, 0);
}

static tp_status vit_params(ix *x, const vit_map *vm, const tp_vit_config *cfg, tp_params *p,
                            tp_onnx_import_info *info) {
    tp_status st = tp_vit_params_shapes(cfg, p, x->err);
    if (st) return st;
    char n1[TP_NAME_LEN], n2[TP_NAME_LEN];
    st = set_param(x, p, "patch_embed.proj.weight", vm->conv_w, 1.0f, 0);
    if (!st) st = set_param(x, p, "patch_embed.proj.bias", vm->conv_b, 1.0f, 0);
    if (!st && vm->class_token) st = set_param(x, p, "cls_token", vm->cls, 1.0f, 0);
    if (!st) st = set_param(x, p, "pos_embed", vm->pos, 1.0f, 0);
    for (int d = 0; d < vm->depth && !st; d++) {
        const vit_block *b = &vm->blk[d];
        static const char *const lin_names[4] = {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"};
        const lin *ls[4] = {&b->qkv, &b->proj, &b->fc1, &b->fc2};
        for (int k = 0; k < 4 && !st; k++) {
            snprintf(n1, sizeof n1, "blocks.%d.%s", d, lin_names[k]);
            st = set_linear(x, p, n1, ls[k], info);
        }
        const tp_onnx_tensor *lt[4] = {b->ln1w, b->ln1b, b->ln2w, b->ln2b};
        for (int k = 0; k < 4 && !st; k++) {
            snprintf(n2, sizeof n2, "blocks.%d.norm%d.%s", d, 1 + k / 2, k % 2 ? "bias" : "weight");
            st = set_param(x, p, n2, lt[k], 1.0f, 0);
        }
    }
    if (!st) st = set_param(x, p, "norm.weight", vm->nw, 1.0f, 0);
    if (!st) st = set_param(x, p, "norm.bias", vm->nb, 1.0f, 0);
    if (!st && vm->has_head) st = set_linear(x, p, "head", &vm->head, info);
    for (int i = 0; !st && i < p->n_params; i++)
        if (!p->params[i].data)
            st = tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "no tensor in the file for tprof's parameter %s",
                              p->params[i].name);
    return st;
}

/* Every node not on the walk: shape arithmetic (computed from Shape outputs and constants only), or an error. */
static tp_status check_rest(ix *x, tp_onnx_import_info *info) {
    unsigned char *stat = x->mark; /* per node: its outputs are shape values */
    memset(stat, 0, (size_t)x->n);
    for (int i = 0; i < x->n; i++) {
        const tp_onnx_node *n = nd(x, i);
        if (x->role[i] == R_NONE) {
            int ok = in_list(n->op_type, SHAPE_OPS);
            for (int j = 0; j < n->n_in && ok && strcmp(n->op_type, "Shape") != 0; j++) {
                const int p = x->prod[i][j];
                ok = !n->in[j][0] || (p >= 0 ? stat[p] : tp_onnx_find_initializer(x->m, n->in[j]) != NULL);
            }
            if (!ok)
                return fail_node(x, i, "%soutside the ViT pattern: not on the residual stream, in an attention or GELU "
                                 "subgraph, or shape arithmetic", "");
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

static tp_status index_build(ix *x) {
    x->n = tp_onnx_n_nodes(x->m);
    x->role = calloc((size_t)x->n + 1, 1);
    x->mark = calloc((size_t)x->n + 1, 1);
    x->prod = calloc((size_t)x->n + 1, sizeof *x->prod);
    if (!x->role || !x->mark || !x->prod) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < x->n; i++) {
        const tp_onnx_node *n = nd(x, i);
        if (!(x->prod[i] = malloc(sizeof(int) * (size_t)(n->n_in + 1)))) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
        for (int j = 0; j < n->n_in; j++) {
            x->prod[i][j] = -1;
            for (int k = i - 1; k >= 0 && n->in[j][0] && x->prod[i][j] < 0; k--) /* producers come earlier */
                for (int o = 0; o < nd(x, k)->n_out; o++)
                    if (!strcmp(nd(x, k)->out[o], n->in[j])) x->prod[i][j] = k;
        }
    }
    return TP_OK;
}

static void index_free(ix *x) {
    for (int i = 0; x->prod && i < x->n; i++) free(x->prod[i]);
    free(x->prod), free(x->role), free(x->mark);
}

tp_status tp_onnx_import(const char *path, tp_model *m, tp_params *params, tp_onnx_import_info *info, tp_error *err) {
    memset(m, 0, sizeof *m);
    memset(params, 0, sizeof *params);
    if (info) memset(info, 0, sizeof *info);
    tp_onnx_model *om = NULL;
    tp_status st = tp_onnx_load(path, &om, err);
    if (st) return st;
    ix x = {.m = om, .path = path, .err = err};
    vit_map vm;
    memset(&vm, 0, sizeof vm);
    if ((st = index_build(&x))) goto done;
    if (tp_onnx_n_inputs(om) != 1 || tp_onnx_n_outputs(om) != 1) {
        st = tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "%d inputs and %d outputs: the architectures tprof maps have "
                          "one of each (an image batch in, logits or features out)", tp_onnx_n_inputs(om),
                          tp_onnx_n_outputs(om));
        goto done;
    }
    const tp_onnx_value *in = tp_onnx_input(om, 0), *out = tp_onnx_output(om, 0);
    if (in->elem_type != TP_ONNX_FLOAT || in->ndim != 4 || in->dims[1] != 3 || in->dims[2] <= 0 ||
        in->dims[2] != in->dims[3]) {
        st = tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "input '%s': not a float32 image batch (B, 3, S, S) with a "
                          "fixed side S", in->name);
        goto done;
    }
    vm.S = in->dims[2];
    if ((st = vit_walk(&x, &vm, in, out)) || (st = check_rest(&x, info))) goto done;
    tp_vit_config cfg;
    if ((st = tp_vit_config_preset("vit_base_patch16_224", &cfg, err))) goto done;
    const char *base = strrchr(path, '/');
    snprintf(cfg.name, sizeof cfg.name, "%s", base ? base + 1 : path);
    cfg.img_size = (int)vm.S, cfg.patch_size = (int)vm.P, cfg.in_chans = 3, cfg.embed_dim = (int)vm.C;
    cfg.depth = vm.depth, cfg.num_heads = (int)vm.H;
    cfg.mlp_ratio = (double)vm.Hd / (double)vm.C;
    cfg.class_token = vm.class_token, cfg.global_pool = vm.pool;
    cfg.num_classes = vm.has_head ? (int)vm.head.N : 0;
    cfg.gelu_tanh = vm.gelu_tanh, cfg.ln_eps = vm.eps;
    cfg.pre.img_size = (int)vm.S;
    snprintf(cfg.pre_source, sizeof cfg.pre_source, "not in the ONNX file: timm's ViT defaults (mean = std = 0.5, "
             "bicubic, crop 0.9)");
    if (tp_vit_mlp_hidden(&cfg) != vm.Hd) cfg.mlp_ratio = ((double)vm.Hd + 0.5) / (double)vm.C;
    if ((st = tp_vit_config_validate(&cfg, err))) goto done;
    tp_vit_model(&cfg, m);
    if ((st = vit_params(&x, &vm, &cfg, params, info))) goto done;
    if (info) {
        snprintf(info->family, sizeof info->family, "vit");
        info->opset = tp_onnx_opset(om, "");
        snprintf(info->producer, sizeof info->producer, "%s", tp_onnx_producer(om));
        snprintf(info->summary, sizeof info->summary, "timm VisionTransformer (%s, opset %lld)",
                 info->producer[0] ? info->producer : "unknown producer", (long long)info->opset);
        info->n_nodes = x.n;
        snprintf(info->batch_dim, sizeof info->batch_dim, "%s", in->dim_param[0] ? in->dim_param[0] : "");
        info->fixed_batch = in->dim_param[0] ? 0 : in->dims[0];
        snprintf(info->input_name, sizeof info->input_name, "%s", in->name);
        snprintf(info->output_name, sizeof info->output_name, "%s", out->name);
    }
done:
    if (st) {
        tp_params_free(params);
        memset(m, 0, sizeof *m);
    }
    free(vm.blk);
    index_free(&x);
    tp_onnx_free(om);
    return st;
}
