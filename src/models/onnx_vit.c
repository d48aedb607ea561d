/* onnx_vit.c: a timm VisionTransformer export onto the ViT family (onnx_import.h): the residual stream walked node by
 * node from the Conv patch embedding to the head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/onnx_walk.h"
#include "models/vit.h"

/* ---- the ViT ---------------------------------------------------------------------------------------------- */

typedef struct {
    const tp_onnx_tensor *ln1w, *ln1b, *ln2w, *ln2b;
    ow_lin qkv, proj, fc1, fc2;
} vit_block;

typedef struct {
    const tp_onnx_tensor *conv_w, *conv_b, *cls, *pos, *nw, *nb;
    ow_lin head;
    int has_head;
    vit_block *blk;
    int depth, cap;
    int64_t S, P, C, T, H, Hd;
    int class_token, pool, gelu_tanh;
    float eps;
} vit_map;

/* The LayerNormalization reading v over its last axis with (C) scale and bias: its node, or -1. */
/* The axes of a ReduceMean is one value, the last axis (-1 or 2 of a (B, T, C) value), keepdims 1 */
static int mean_last(const ow_ix *x, int i) {
    const tp_onnx_node *n = ow_nd(x, i);
    const tp_onnx_attr *aa = tp_onnx_node_attr(n, "axes"), *kd = tp_onnx_node_attr(n, "keepdims");
    int64_t a[2];
    const int na = n->n_in > 1 ? ow_const_ints(x, n->in[1], a, 2, 0) : aa && aa->n == 1 ? (a[0] = aa->ints[0], 1) : -1;
    return na == 1 && (a[0] == -1 || a[0] == 2) && (!kd || kd->i == 1);
}

/* LayerNormalization as exports before opset 17 write it: mean = ReduceMean(x), d = x - mean, var = ReduceMean(d^2),
 * d / sqrt(var + eps) * w + b. Its last node (the Add of b), or -1. */
static int layernorm_decomposed(ow_ix *x, const char *v, int64_t C, const tp_onnx_tensor **w, const tp_onnx_tensor **b,
                                float *eps) {
    const int m1 = ow_consumer_op(x, v, "ReduceMean");
    if (m1 < 0 || !mean_last(x, m1)) return -1;
    const int sb = ow_binop_of(x, "Sub", v, ow_nd(x, m1)->out[0]);
    if (sb < 0 || strcmp(ow_nd(x, sb)->in[0], v) != 0) return -1;
    const char *d = ow_nd(x, sb)->out[0];
    const int pw = ow_consumer_op(x, d, "Pow");
    if (pw < 0 || ow_scalar_of(x, ow_nd(x, pw)->in[1]) != 2.0) return -1;
    const int m2 = ow_consumer_op(x, ow_nd(x, pw)->out[0], "ReduceMean");
    const int ad = m2 >= 0 && mean_last(x, m2) ? ow_consumer_op(x, ow_nd(x, m2)->out[0], "Add") : -1;
    const tp_onnx_node *an = ad >= 0 ? ow_nd(x, ad) : NULL;
    const double e = an ? ow_scalar_of(x, !strcmp(an->in[0], ow_nd(x, m2)->out[0]) ? an->in[1] : an->in[0]) : NAN;
    const int sq = e > 0 ? ow_consumer_op(x, an->out[0], "Sqrt") : -1;
    const int dv = sq >= 0 ? ow_binop_of(x, "Div", d, ow_nd(x, sq)->out[0]) : -1;
    if (dv < 0 || strcmp(ow_nd(x, dv)->in[0], d) != 0) return -1;
    const int mw = ow_consumer_op(x, ow_nd(x, dv)->out[0], "Mul");
    const int ab = mw >= 0 ? ow_consumer_op(x, ow_nd(x, mw)->out[0], "Add") : -1;
    if (ab < 0) return -1;
    const tp_onnx_node *mn = ow_nd(x, mw), *bn = ow_nd(x, ab);
    *w = ow_const_tensor(x, !strcmp(mn->in[0], ow_nd(x, dv)->out[0]) ? mn->in[1] : mn->in[0]);
    *b = ow_const_tensor(x, !strcmp(bn->in[0], mn->out[0]) ? bn->in[1] : bn->in[0]);
    if (!*w || !*b || (*w)->ndim != 1 || (*w)->dims[0] != C || (*b)->ndim != 1 || (*b)->dims[0] != C ||
        !ow_float_type((*w)->elem_type) || !ow_float_type((*b)->elem_type))
        return -1;
    *eps = (float)e;
    const int nodes[9] = {m1, sb, pw, m2, ad, sq, dv, mw, ab};
    for (int k = 0; k < 9; k++) x->role[nodes[k]] = R_MAIN;
    return ab;
}

static int layernorm_of(ow_ix *x, const char *v, int64_t C, const tp_onnx_tensor **w, const tp_onnx_tensor **b,
                        float *eps) {
    const int i = ow_consumer_op(x, v, "LayerNormalization");
    if (i < 0) return layernorm_decomposed(x, v, C, w, b, eps);
    const tp_onnx_node *n = ow_nd(x, i);
    const tp_onnx_attr *ax = tp_onnx_node_attr(n, "axis"), *ep = tp_onnx_node_attr(n, "epsilon");
    if (n->n_in < 3 || !(*w = ow_const_tensor(x, n->in[1])) || !(*b = ow_const_tensor(x, n->in[2])) ||
        (*w)->ndim != 1 || (*w)->dims[0] != C || (*b)->ndim != 1 || (*b)->dims[0] != C ||
        !ow_float_type((*w)->elem_type) || !ow_float_type((*b)->elem_type) || (ax && ax->i != -1 && ax->i != 2) ||
        n->n_out != 1)
        return -1;
    *eps = ep ? (float)ep->f : 1e-5f; /* the spec's default */
    x->role[i] = R_MAIN;
    return i;
}

static const char *const ATTN_OPS[] = {"Reshape", "Transpose", "Split", "Squeeze", "Unsqueeze", "Slice", "Gather",
                                       "Mul", "Div", "MatMul", "Softmax", "Concat", "Cast", NULL};
static const char *const GELU_OPS[] = {"Div", "Mul", "Add", "Erf", "Tanh", "Pow", "Gelu", "Cast", NULL};
/* shape arithmetic: what may compute from Shape outputs and constants */
static const char *const SHAPE_OPS[] = {"Shape", "Constant", "Identity", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
                                        "Cast", "Sqrt", "Div", "Mul", "Add", "Sub", "Reshape", "ConstantOfShape",
                                        "Equal", "Where", "Range", "Expand", NULL};

/* One block from the stream value v (its first LayerNormalization already read: ln1 node i1, output u). */
static tp_status vit_block_at(ow_ix *x, vit_map *vm, const char *v, const char *u, vit_block *bk, const char **next) {
    const int64_t C = vm->C;
    ow_mark_linear(x, &bk->qkv);
    /* heads: the Reshape of the qkv output to (B, T, 3, H, D) */
    int64_t sh[8];
    int64_t H = 0;
    int c[16], nc = ow_consumers(x, bk->qkv.out, c, 16);
    for (int k = 0; k < nc && k < 16 && !H; k++) {
        if (!ow_is(x, c[k], "Reshape") || ow_nd(x, c[k])->n_in < 2) continue;
        const int l = ow_const_ints(x, ow_nd(x, c[k])->in[1], sh, 8, 0);
        if (l == 5 && sh[2] == 3) H = sh[3] > 0 ? sh[3] : (sh[4] > 0 && C % sh[4] == 0 ? C / sh[4] : 0);
    }
    if (H <= 0 || C % H != 0)
        return ow_fail_node(x, bk->qkv.add >= 0 ? bk->qkv.add : bk->qkv.mm, "%sthe qkv output has no Reshape to (B, T, 3, "
                         "heads, head dim) with a fixed head count", "");
    if (vm->H && vm->H != H) return ow_fail_node(x, bk->qkv.mm, "%sa head count other than the first block's", "");
    vm->H = H;
    const int last_qkv = bk->qkv.add >= 0 ? bk->qkv.add : bk->qkv.mm;
    if (!ow_next_linear(x, last_qkv, C, C, &bk->proj))
        return ow_fail_node(x, last_qkv, "%sno (C, C) projection linear follows the qkv linear", "");
    static const char *const attn_count[] = {"Softmax", "MatMul", NULL};
    int counts[3];
    tp_status st = ow_mark_region(x, bk->qkv.out, bk->proj.in, R_ATTN, ATTN_OPS, "attention", attn_count, counts);
    if (st) return st;
    if (counts[0] != 1 || counts[1] != 2)
        return ow_fail_node(x, bk->proj.mm, "%sthe attention before this linear has not one Softmax and two MatMul "
                         "(scaled dot-product attention)", "");
    ow_mark_linear(x, &bk->proj);
    const int r1 = ow_add_of(x, bk->proj.out, v);
    if (r1 < 0) return ow_fail_node(x, bk->proj.add >= 0 ? bk->proj.add : bk->proj.mm, "%sno residual Add after it", "");
    x->role[r1] = R_MAIN;
    const char *s1 = ow_nd(x, r1)->out[0];
    float eps2;
    const int i2 = layernorm_of(x, s1, C, &bk->ln2w, &bk->ln2b, &eps2);
    if (i2 < 0) return ow_fail_node(x, r1, "%sno LayerNormalization over C reads the residual sum", "");
    if (eps2 != vm->eps) return ow_fail_node(x, i2, "%san epsilon other than the first LayerNormalization's", "");
    if (!ow_linear_of(x, ow_nd(x, i2)->out[0], C, 0, &bk->fc1))
        return ow_fail_node(x, i2, "%sno MLP linear (C, hidden) with a bias reads it", "");
    ow_mark_linear(x, &bk->fc1);
    if (vm->Hd && bk->fc1.N != vm->Hd) return ow_fail_node(x, bk->fc1.mm, "%san MLP width other than block 0's", "");
    vm->Hd = bk->fc1.N;
    const int last_fc1 = bk->fc1.add >= 0 ? bk->fc1.add : bk->fc1.mm;
    if (!ow_next_linear(x, last_fc1, vm->Hd, C, &bk->fc2))
        return ow_fail_node(x, last_fc1, "%sno (hidden, C) MLP linear follows", "");
    static const char *const gelu_count[] = {"Erf", "Tanh", "Gelu", NULL};
    if ((st = ow_mark_region(x, bk->fc1.out, bk->fc2.in, R_GELU, GELU_OPS, "GELU", gelu_count, counts))) return st;
    int tanh_form = -1;
    if (counts[0] == 1 && !counts[1] && !counts[2]) tanh_form = 0;
    if (!counts[0] && counts[1] == 1 && !counts[2]) tanh_form = 1;
    for (int i = 0; i < x->n && counts[2] == 1 && !counts[0] && !counts[1]; i++)
        if (x->mark[i] == 2 && ow_is(x, i, "Gelu")) {
            const tp_onnx_attr *ap = tp_onnx_node_attr(ow_nd(x, i), "approximate");
            tanh_form = !ap || !strcmp(ap->s, "none") ? 0 : !strcmp(ap->s, "tanh") ? 1 : -1;
        }
    if (tanh_form < 0)
        return ow_fail_node(x, bk->fc2.mm, "%sthe activation before this linear is not a GELU (one Erf, one Tanh or one "
                         "Gelu node)", "");
    if (vm->depth > 0 && tanh_form != vm->gelu_tanh)
        return ow_fail_node(x, bk->fc2.mm, "%sa GELU form other than block 0's", "");
    vm->gelu_tanh = tanh_form;
    ow_mark_linear(x, &bk->fc2);
    const int r2 = ow_add_of(x, bk->fc2.out, s1);
    if (r2 < 0) return ow_fail_node(x, bk->fc2.add >= 0 ? bk->fc2.add : bk->fc2.mm, "%sno residual Add after it", "");
    x->role[r2] = R_MAIN;
    (void)u;
    *next = ow_nd(x, r2)->out[0];
    return TP_OK;
}

/* The patch embedding, class token and position embedding from the image input; *v the stream after them. */
static tp_status vit_stem(ow_ix *x, vit_map *vm, const tp_onnx_value *in, const char **v) {
    const int cv = ow_consumer_op(x, in->name, "Conv");
    if (cv < 0) {
        int c[4];
        const int n = ow_consumers(x, in->name, c, 4);
        if (n > 0) return ow_fail_node(x, c[0], "%sthe image input's first op is not the Conv patch embedding", "");
        return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "input '%s' is read by no Conv", in->name);
    }
    const tp_onnx_node *n = ow_nd(x, cv);
    const tp_onnx_attr *ks = tp_onnx_node_attr(n, "kernel_shape"), *stv = tp_onnx_node_attr(n, "strides"),
                       *pd = tp_onnx_node_attr(n, "pads"), *dl = tp_onnx_node_attr(n, "dilations"),
                       *gr = tp_onnx_node_attr(n, "group"), *ap = tp_onnx_node_attr(n, "auto_pad");
    vm->conv_w = n->n_in > 1 ? ow_const_tensor(x, n->in[1]) : NULL;
    vm->conv_b = n->n_in > 2 ? ow_const_tensor(x, n->in[2]) : NULL;
    if (!vm->conv_w || vm->conv_w->ndim != 4 || vm->conv_w->dims[1] != 3 || vm->conv_w->dims[2] != vm->conv_w->dims[3] ||
        !ow_float_type(vm->conv_w->elem_type) || !vm->conv_b || vm->conv_b->ndim != 1 ||
        vm->conv_b->dims[0] != vm->conv_w->dims[0])
        return ow_fail_node(x, cv, "%sa patch embedding needs a (C, 3, P, P) weight and a (C) bias as initializers", "");
    vm->C = vm->conv_w->dims[0], vm->P = vm->conv_w->dims[2];
    int ok = (!gr || gr->i == 1) && (!ap || !strcmp(ap->s, "NOTSET"));
    for (int k = 0; k < 2 && ok; k++)
        ok = (!ks || (ks->n == 2 && ks->ints[k] == vm->P)) && stv && stv->n == 2 && stv->ints[k] == vm->P &&
             (!dl || (dl->n == 2 && dl->ints[k] == 1));
    for (size_t k = 0; pd && k < pd->n && ok; k++) ok = pd->ints[k] == 0;
    if (!ok) return ow_fail_node(x, cv, "%snot a patch embedding (kernel = stride = P, no padding, group 1)", "");
    if (vm->S % vm->P != 0) return ow_fail_node(x, cv, "%sthe patch does not divide the image side", "");
    x->role[cv] = R_MAIN;
    const char *cur = n->out[0];
    /* (B, C, S/P, S/P) -> (B, N, C): Reshape or Flatten to (B, C, N), then Transpose (0, 2, 1) */
    int r = ow_consumer_op(x, cur, "Reshape");
    if (r < 0) r = ow_consumer_op(x, cur, "Flatten");
    int t = r >= 0 ? ow_consumer_op(x, ow_nd(x, r)->out[0], "Transpose") : -1;
    const tp_onnx_attr *perm = t >= 0 ? tp_onnx_node_attr(ow_nd(x, t), "perm") : NULL;
    if (t < 0 || !perm || perm->n != 3 || perm->ints[0] != 0 || perm->ints[1] != 2 || perm->ints[2] != 1)
        return ow_fail_node(x, cv, "%sits output is not flattened to (B, C, N) and transposed to (B, N, C)", "");
    x->role[r] = x->role[t] = R_MAIN;
    cur = ow_nd(x, t)->out[0];
    const int64_t Np = (vm->S / vm->P) * (vm->S / vm->P);
    const int cc = ow_consumer_op(x, cur, "Concat");
    if (cc >= 0) { /* the class token in front: Concat(Expand(cls (1, 1, C)), patches) along axis 1 */
        const tp_onnx_node *c = ow_nd(x, cc);
        const tp_onnx_attr *ax = tp_onnx_node_attr(c, "axis");
        const int e = c->n_in == 2 ? ow_producer(x, c->in[0]) : -1;
        vm->cls = ow_is(x, e, "Expand") ? ow_const_tensor(x, ow_nd(x, e)->in[0]) : c->n_in == 2 ? ow_const_tensor(x, c->in[0]) : NULL;
        if (!ax || ax->i != 1 || c->n_in != 2 || strcmp(c->in[1], cur) != 0 || !vm->cls || vm->cls->ndim != 3 || vm->cls->dims[0] != 1 ||
            vm->cls->dims[1] != 1 || vm->cls->dims[2] != vm->C || !ow_float_type(vm->cls->elem_type))
            return ow_fail_node(x, cc, "%snot a class token: Concat along axis 1 of a (1, 1, C) initializer (through "
                             "Expand) before the patches", "");
        x->role[cc] = R_MAIN;
        if (ow_is(x, e, "Expand")) x->role[e] = R_MAIN;
        vm->class_token = 1;
        cur = c->out[0];
    }
    vm->T = Np + vm->class_token;
    const int pa = ow_consumer_op(x, cur, "Add");
    const tp_onnx_node *pn = pa >= 0 ? ow_nd(x, pa) : NULL;
    vm->pos = pn ? ow_const_tensor(x, !strcmp(pn->in[0], cur) ? pn->in[1] : pn->in[0]) : NULL;
    if (!vm->pos || vm->pos->ndim != 3 || vm->pos->dims[0] != 1 || vm->pos->dims[1] != vm->T ||
        vm->pos->dims[2] != vm->C || !ow_float_type(vm->pos->elem_type))
        return pa >= 0 ? ow_fail_node(x, pa, "%snot the position embedding: an Add of a (1, T, C) initializer", "")
                       : tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "no position embedding (an Add of a (1, %lld, "
                                      "%lld) initializer) after the patch embedding", (long long)vm->T, (long long)vm->C);
    x->role[pa] = R_MAIN;
    *v = pn->out[0];
    return TP_OK;
}

/* The walk: stem, blocks, final norm, pooling, head; the graph output must be where it ends. */
/* timm's global_pool 'avg' after the last block: (a Slice dropping the class token along axis 1,) ReduceMean over
 * axis 1 without keepdims, LayerNormalization (fc_norm). 0 when the stream is not read so; else 1, with *st the error
 * when the pattern starts but breaks, and *v the fc_norm's output. */
static int avg_pool(ow_ix *x, vit_map *vm, const char **v, tp_status *st_out) {
    *st_out = TP_OK;
    const char *pv = *v;
    const int sl = ow_consumer_op(x, pv, "Slice");
    int64_t s0[2], en[2], ax[2], sp[2];
    if (sl >= 0) {
        const tp_onnx_node *n = ow_nd(x, sl);
        if (n->n_in < 4 || ow_const_ints(x, n->in[1], s0, 2, 0) != 1 || ow_const_ints(x, n->in[2], en, 2, 0) != 1 ||
            ow_const_ints(x, n->in[3], ax, 2, 0) != 1 || (n->n_in > 4 && (ow_const_ints(x, n->in[4], sp, 2, 0) != 1 ||
                                                                          sp[0] != 1)) ||
            ax[0] != 1 || s0[0] != vm->class_token || en[0] < vm->T)
            return 0;
        pv = ow_nd(x, sl)->out[0];
    } else if (vm->class_token) {
        return 0; /* timm's mean leaves the class token out */
    }
    const int rm = ow_consumer_op(x, pv, "ReduceMean");
    if (rm < 0) return 0;
    const tp_onnx_node *rn = ow_nd(x, rm);
    const tp_onnx_attr *aa = tp_onnx_node_attr(rn, "axes"), *kd = tp_onnx_node_attr(rn, "keepdims");
    int64_t a[2];
    const int na = rn->n_in > 1 ? ow_const_ints(x, rn->in[1], a, 2, 0) : aa && aa->n == 1 ? (a[0] = aa->ints[0], 1) : -1;
    if (na != 1 || (a[0] != 1 && a[0] != -2) || !kd || kd->i != 0)
        return *st_out = ow_fail_node(x, rm, "%snot the mean over the tokens (axis 1, keepdims 0)", ""), 1;
    const tp_onnx_tensor *w, *b;
    float eps;
    const int ln = layernorm_of(x, rn->out[0], vm->C, &w, &b, &eps);
    if (ln < 0) return *st_out = ow_fail_node(x, rm, "%sthe mean is not read by a LayerNormalization (fc_norm)", ""), 1;
    if (eps != vm->eps) return *st_out = ow_fail_node(x, ln, "%san epsilon other than the blocks' LayerNormalization's", ""), 1;
    if (sl >= 0) x->role[sl] = R_MAIN;
    x->role[rm] = R_MAIN;
    vm->nw = w, vm->nb = b, vm->pool = TP_VIT_POOL_AVG;
    *v = ow_nd(x, ln)->out[0];
    return 1;
}

static tp_status vit_walk(ow_ix *x, vit_map *vm, const tp_onnx_value *in, const tp_onnx_value *out) {
    const char *v = NULL;
    tp_status st = vit_stem(x, vm, in, &v);
    if (st) return st;
    for (;;) {
        const tp_onnx_tensor *w, *b;
        float eps;
        const int li = layernorm_of(x, v, vm->C, &w, &b, &eps);
        if (li < 0 && vm->depth > 0 && avg_pool(x, vm, &v, &st)) {
            if (st) return st;
            break; /* timm's global_pool 'avg': no final norm, the mean of the patch tokens, then fc_norm */
        }
        if (li < 0) {
            int c[4];
            const int n = ow_consumers(x, v, c, 4);
            return n > 0 ? ow_fail_node(x, c[0], "%sexpected a LayerNormalization over C here (the op, or before opset "
                                     "17 its ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)", "")
                         : tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "the residual stream ends without a norm");
        }
        if (vm->depth == 0 && !vm->nw) vm->eps = eps;
        if (eps != vm->eps) return ow_fail_node(x, li, "%san epsilon other than the first LayerNormalization's", "");
        const char *u = ow_nd(x, li)->out[0];
        ow_lin qkv;
        if (!ow_linear_of(x, u, vm->C, 3 * vm->C, &qkv)) { /* the final norm */
            vm->nw = w, vm->nb = b;
            v = u;
            break;
        }
        void *arr = vm->blk;
        st = ow_grow(x, &arr, &vm->cap, vm->depth, sizeof *vm->blk);
        vm->blk = arr;
        if (st) return st;
        vit_block *bk = &vm->blk[vm->depth];
        memset(bk, 0, sizeof *bk);
        bk->ln1w = w, bk->ln1b = b, bk->qkv = qkv;
        if ((st = vit_block_at(x, vm, v, u, bk, &v))) return st;
        vm->depth++;
    }
    if (vm->depth == 0) return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "no transformer block found");
    /* pooling: the class token's Gather (axis 1, index 0), the mean (read above), or none (every token) */
    const int g = vm->pool == TP_VIT_POOL_AVG ? -1 : ow_consumer_op(x, v, "Gather");
    if (vm->pool != TP_VIT_POOL_AVG) vm->pool = TP_VIT_POOL_NONE;
    if (g >= 0) {
        const tp_onnx_attr *ax = tp_onnx_node_attr(ow_nd(x, g), "axis");
        int64_t idx[2];
        if (!ax || ax->i != 1 || ow_const_ints(x, ow_nd(x, g)->in[1], idx, 2, 0) != 1 || idx[0] != 0 || !vm->class_token)
            return ow_fail_node(x, g, "%snot the class token's pooling (a Gather of index 0 along axis 1)", "");
        x->role[g] = R_MAIN;
        vm->pool = TP_VIT_POOL_TOKEN;
        v = ow_nd(x, g)->out[0];
    }
    if (strcmp(v, out->name) != 0) {
        if (!ow_linear_of(x, v, vm->C, 0, &vm->head)) {
            int c[4];
            const int n = ow_consumers(x, v, c, 4);
            return n > 0 ? ow_fail_node(x, c[0], "%snot a classifier head (a Gemm or MatMul + Add of (C, classes))", "")
                         : tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "the pooled value is not the output");
        }
        ow_mark_linear(x, &vm->head);
        vm->has_head = 1;
        if (strcmp(vm->head.out, out->name) != 0)
            return ow_fail_node(x, vm->head.add >= 0 ? vm->head.add : vm->head.mm, "%sthe head's output is not the "
                             "graph's output", "");
    }
    return TP_OK;
}


static tp_status vit_params(ow_ix *x, const vit_map *vm, const tp_vit_config *cfg, tp_params *p,
                            tp_onnx_import_info *info) {
    tp_status st = tp_vit_params_shapes(cfg, p, x->err);
    if (st) return st;
    char n1[TP_NAME_LEN], n2[TP_NAME_LEN];
    st = ow_set_param(x, p, "patch_embed.proj.weight", vm->conv_w, 1.0f, 0);
    if (!st) st = ow_set_param(x, p, "patch_embed.proj.bias", vm->conv_b, 1.0f, 0);
    if (!st && vm->class_token) st = ow_set_param(x, p, "cls_token", vm->cls, 1.0f, 0);
    if (!st) st = ow_set_param(x, p, "pos_embed", vm->pos, 1.0f, 0);
    for (int d = 0; d < vm->depth && !st; d++) {
        const vit_block *b = &vm->blk[d];
        static const char *const lin_names[4] = {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"};
        const ow_lin *ls[4] = {&b->qkv, &b->proj, &b->fc1, &b->fc2};
        for (int k = 0; k < 4 && !st; k++) {
            snprintf(n1, sizeof n1, "blocks.%d.%s", d, lin_names[k]);
            st = ow_set_linear(x, p, n1, ls[k], info);
        }
        const tp_onnx_tensor *lt[4] = {b->ln1w, b->ln1b, b->ln2w, b->ln2b};
        for (int k = 0; k < 4 && !st; k++) {
            snprintf(n2, sizeof n2, "blocks.%d.norm%d.%s", d, 1 + k / 2, k % 2 ? "bias" : "weight");
            st = ow_set_param(x, p, n2, lt[k], 1.0f, 0);
        }
    }
    const char *fn = vm->pool == TP_VIT_POOL_AVG ? "fc_norm" : "norm"; /* timm: avg pooling's norm comes after it */
    char nw[32], nb[32];
    snprintf(nw, sizeof nw, "%s.weight", fn);
    snprintf(nb, sizeof nb, "%s.bias", fn);
    if (!st) st = ow_set_param(x, p, nw, vm->nw, 1.0f, 0);
    if (!st) st = ow_set_param(x, p, nb, vm->nb, 1.0f, 0);
    if (!st && vm->has_head) st = ow_set_linear(x, p, "head", &vm->head, info);
    if (!st) st = ow_check_filled(x, p);
    return st;
}

tp_status ow_import_vit(ow_ix *x, const tp_onnx_value *in, const tp_onnx_value *out, tp_model *m, tp_params *params,
                        tp_onnx_import_info *info) {
    if (in->elem_type != TP_ONNX_FLOAT || in->ndim != 4 || in->dims[1] != 3 || in->dims[2] <= 0 ||
        in->dims[2] != in->dims[3])
        return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "input '%s': not a float32 image batch (B, 3, S, S) "
                            "with a fixed side S", in->name);
    vit_map vm;
    memset(&vm, 0, sizeof vm);
    vm.S = in->dims[2];
    tp_vit_config cfg;
    tp_status st = vit_walk(x, &vm, in, out);
    if (!st) st = ow_check_rest(x, SHAPE_OPS, "ViT", info);
    if (!st) st = tp_vit_config_preset("vit_base_patch16_224", &cfg, x->err);
    if (st) goto done;
    const char *base = strrchr(x->path, '/');
    snprintf(cfg.name, sizeof cfg.name, "%s", base ? base + 1 : x->path);
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
    if ((st = tp_vit_config_validate(&cfg, x->err))) goto done;
    tp_vit_model(&cfg, m);
    if ((st = vit_params(x, &vm, &cfg, params, info))) goto done;
    if (info) {
        snprintf(info->family, sizeof info->family, "vit");
        snprintf(info->summary, sizeof info->summary, "timm VisionTransformer");
    }
done:
    free(vm.blk);
    return st;
}
