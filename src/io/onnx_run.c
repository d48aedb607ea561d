/* onnx_run.c: the ONNX reference interpreter (contract in onnx_run.h). Each op follows its page in the ONNX operator
 * specification (https://onnx.ai/onnx/operators/onnx__<Op>.html, cited per op below); the graph runs in file order,
 * which the reader has checked is topological. Values live in one slot per name (graph inputs, initializers, node
 * outputs); a value is freed after the last node that reads it, so memory follows the live set, not the graph. */
#include "io/onnx_run.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"

#define MAXD TP_ONNX_MAX_DIMS
#define MAX_NUMEL ((int64_t)1 << 40) /* far above any model tprof runs; keeps size arithmetic from overflowing */

typedef struct {
    int type; /* ONNX DataType; 0 while the slot holds no value */
    int ndim;
    int64_t dims[MAXD];
    int64_t numel;
    void *data;
    int owned; /* 0: the caller's input or an aligned initializer's bytes, never freed here */
} tensor;

typedef struct {
    const tp_onnx_model *m;
    const tp_onnx_run_args *a;
    tp_error *err;
    int64_t opset;
    const char **names; /* per slot */
    tensor *vals;
    int *last_use; /* the last node reading the slot; INT32_MAX for graph outputs */
    int n_slots;
    int *table; /* open addressing: slot + 1, 0 empty */
    size_t cap;
    int node_i;
    const tp_onnx_node *node;
    const char *bad_attr; /* an attribute read with the wrong type: the node fails rather than run on a default */
} ctx;

typedef tp_status (*op_fn)(ctx *c);

/* ---- errors, names, slots ----------------------------------------------------------------------------------- */

/* Every error of a node names it: "node 12 'name' (OpType): reason" */
static tp_status nfail(ctx *c, tp_status code, const char *fmt, ...) {
    char tail[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    return tp_fail(c->err, code, "node %d '%s' (%s): %s", c->node_i, c->node->name ? c->node->name : "",
                   c->node->op_type, tail);
}

static size_t hash(const char *s) {
    size_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static int lookup(const ctx *c, const char *name) {
    for (size_t i = hash(name) & (c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
        if (!c->table[i]) return -1;
        if (!strcmp(c->names[c->table[i] - 1], name)) return c->table[i] - 1;
    }
}

static int add_slot(ctx *c, const char *name) {
    const int s = lookup(c, name);
    if (s >= 0) return s;
    size_t i = hash(name) & (c->cap - 1);
    while (c->table[i]) i = (i + 1) & (c->cap - 1);
    c->names[c->n_slots] = name;
    c->table[i] = c->n_slots + 1;
    return c->n_slots++;
}

static void drop(tensor *t) {
    if (t->owned) free(t->data);
    memset(t, 0, sizeof *t);
}

static int esize(int type) { return tp_onnx_elem_bytes(type); }

static int64_t prod(const int64_t *d, int a, int b) {
    int64_t n = 1;
    for (int i = a; i < b; i++) n *= d[i];
    return n;
}

/* ---- node inputs, outputs and attributes ------------------------------------------------------------------ */

static int has_in(const ctx *c, int k) { return k < c->node->n_in && c->node->in[k][0]; }
static int has_out(const ctx *c, int k) { return k < c->node->n_out && c->node->out[k][0]; }

static const tensor *in(ctx *c, int k) { return has_in(c, k) ? &c->vals[lookup(c, c->node->in[k])] : NULL; }

/* A required input of one of the given types (0 ends the list) */
static tp_status need(ctx *c, int k, const tensor **t, int t1, int t2, int t3) {
    *t = in(c, k);
    if (!*t) return nfail(c, TP_ERR_FORMAT, "input %d is required", k);
    const int ty = (*t)->type;
    if (t1 && ty != t1 && ty != t2 && ty != t3)
        return nfail(c, TP_ERR_UNSUPPORTED, "input %d '%s' is %s, which this op does not take here", k,
                     c->node->in[k], tp_onnx_elem_name(ty));
    return TP_OK;
}

/* Makes output k with its shape, zero-filled */
static tp_status mk(ctx *c, int k, int type, int nd, const int64_t *dims, tensor **out) {
    if (!has_out(c, k)) return nfail(c, TP_ERR_FORMAT, "output %d is required", k);
    if (nd > MAXD) return nfail(c, TP_ERR_UNSUPPORTED, "output of rank %d (at most %d)", nd, MAXD);
    int64_t n = 1;
    for (int d = 0; d < nd; d++) {
        if (dims[d] < 0) return nfail(c, TP_ERR_SHAPE, "output dimension %d is %lld", d, (long long)dims[d]);
        if (dims[d] && n > MAX_NUMEL / dims[d]) return nfail(c, TP_ERR_UNSUPPORTED, "output too large");
        n *= dims[d];
    }
    tensor *t = &c->vals[lookup(c, c->node->out[k])];
    drop(t);
    t->data = calloc((size_t)(n ? n : 1), (size_t)esize(type));
    if (!t->data) return nfail(c, TP_ERR_OOM, "out of memory for %lld values", (long long)n);
    t->type = type, t->ndim = nd, t->numel = n, t->owned = 1;
    if (nd) memcpy(t->dims, dims, sizeof(int64_t) * (size_t)nd); /* a scalar passes dims NULL */
    *out = t;
    return TP_OK;
}

static const tp_onnx_attr *attr(const ctx *c, const char *name) { return tp_onnx_node_attr(c->node, name); }
static int64_t attr_i(ctx *c, const char *name, int64_t def) {
    const tp_onnx_attr *a = attr(c, name);
    if (a && a->type != TP_ONNX_ATTR_INT) c->bad_attr = name;
    return a && a->type == TP_ONNX_ATTR_INT ? a->i : def;
}
static double attr_f(ctx *c, const char *name, double def) {
    const tp_onnx_attr *a = attr(c, name);
    if (a && a->type != TP_ONNX_ATTR_FLOAT) c->bad_attr = name;
    return a && a->type == TP_ONNX_ATTR_FLOAT ? a->f : def;
}

/* A 1-D int64 (or int32) tensor's values, at most max of them */
static tp_status ints_of(ctx *c, int k, int64_t *v, int max, int *n) {
    const tensor *t;
    tp_status s = need(c, k, &t, TP_ONNX_INT64, TP_ONNX_INT32, 0);
    if (s) return s;
    if (t->ndim > 1 || t->numel > max)
        return nfail(c, TP_ERR_SHAPE, "input %d '%s' must be 1-D with at most %d values", k, c->node->in[k], max);
    for (int64_t i = 0; i < t->numel; i++)
        v[i] = t->type == TP_ONNX_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
    *n = (int)t->numel;
    return TP_OK;
}

/* axis in [-r, r) to [0, r) */
static tp_status axis_of(ctx *c, int64_t axis, int r, int *out) {
    *out = 0;
    if (axis < -r || axis >= r) return nfail(c, TP_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)axis, r);
    *out = (int)(axis < 0 ? axis + r : axis);
    return TP_OK;
}

/* ---- element access ------------------------------------------------------------------------------------------ */

static int is_int(int ty) {
    return ty == TP_ONNX_INT64 || ty == TP_ONNX_INT32 || ty == TP_ONNX_INT8 || ty == TP_ONNX_UINT8 ||
           ty == TP_ONNX_BOOL;
}

static int64_t int_at(const tensor *t, int64_t i) {
    switch (t->type) {
    case TP_ONNX_INT64: return ((const int64_t *)t->data)[i];
    case TP_ONNX_INT32: return ((const int32_t *)t->data)[i];
    case TP_ONNX_INT8: return ((const int8_t *)t->data)[i];
    default: return ((const uint8_t *)t->data)[i]; /* uint8, bool */
    }
}

/* A floating value as float32 (float32, float16, bfloat16, float8e4m3fn) */
static float flt_at(const tensor *t, int64_t i) {
    switch (t->type) {
    case TP_ONNX_FLOAT: return ((const float *)t->data)[i];
    case TP_ONNX_FLOAT16: return tp_f16_to_f32(((const uint16_t *)t->data)[i]);
    case TP_ONNX_BFLOAT16: return tp_bf16_to_f32(((const uint16_t *)t->data)[i]);
    default: return tp_e4m3_to_f32(((const uint8_t *)t->data)[i]);
    }
}

/* ---- broadcasting (numpy rules: onnx docs/Broadcasting.md) --------------------------------------------------- */

typedef struct {
    int nd, n;
    int64_t dims[MAXD], st[3][MAXD], idx[MAXD], off[3];
} iter;

/* Strides of a tensor of shape tdims (rank tnd, row-major, unit elements per step) seen in a shape of rank nd that it
 * broadcasts to, right-aligned: 0 where it repeats */
static void bstrides(int nd, int tnd, const int64_t *tdims, int64_t unit, int64_t *st) {
    for (int d = 0; d < nd; d++) st[d] = 0;
    int64_t s = unit;
    for (int d = tnd - 1; d >= 0; d--) {
        st[nd - tnd + d] = tdims[d] == 1 ? 0 : s;
        s *= tdims[d];
    }
}

static void it_init(iter *it, int nd, const int64_t *dims) {
    memset(it, 0, sizeof *it);
    it->nd = nd;
    memcpy(it->dims, dims, sizeof(int64_t) * (size_t)nd);
}

static void it_next(iter *it) {
    for (int d = it->nd - 1; d >= 0; d--) {
        for (int k = 0; k < 3; k++) it->off[k] += it->st[k][d];
        if (++it->idx[d] < it->dims[d]) return;
        for (int k = 0; k < 3; k++) it->off[k] -= it->st[k][d] * it->dims[d];
        it->idx[d] = 0;
    }
}

/* The shape n tensors broadcast to, or a shape error */
static tp_status bshape(ctx *c, const tensor *const *ts, int n, int *nd, int64_t *dims) {
    *nd = 0;
    for (int k = 0; k < n; k++) *nd = ts[k]->ndim > *nd ? ts[k]->ndim : *nd;
    for (int d = 0; d < *nd; d++) {
        int64_t v = 1;
        for (int k = 0; k < n; k++) {
            const int td = d - (*nd - ts[k]->ndim);
            const int64_t x = td >= 0 ? ts[k]->dims[td] : 1;
            if (x == 1) continue;
            if (v != 1 && v != x)
                return nfail(c, TP_ERR_SHAPE, "inputs do not broadcast: dimension %d is %lld and %lld", d,
                             (long long)v, (long long)x);
            v = x;
        }
        dims[d] = v;
    }
    return TP_OK;
}

/* ---- elementwise ops ---------------------------------------------------------------------------------------- */

enum { B_ADD, B_MUL, B_DIV, B_MAX, B_EQUAL, B_SUB, B_POW, B_LE, B_AND };

/* Output k_out of type for a and b broadcast together, and the iterator walking a (stream 0) and b (stream 1) */
static tp_status bcast_out(ctx *c, const tensor *a, const tensor *b, int k_out, int type, tensor **y, iter *it) {
    const tensor *ts[2] = {a, b};
    int nd;
    int64_t dims[MAXD];
    tp_status s = bshape(c, ts, 2, &nd, dims);
    if (!s) s = mk(c, k_out, type, nd, dims, y);
    if (s) return s;
    it_init(it, nd, dims);
    bstrides(nd, a->ndim, a->dims, 1, it->st[0]);
    bstrides(nd, b->ndim, b->dims, 1, it->st[1]);
    return TP_OK;
}

/* Pow (opset 15): float32 base, float32 or int64 exponent, broadcast */
static tp_status binary_pow(ctx *c, const tensor *a, const tensor *b) {
    if (a->type != TP_ONNX_FLOAT || (b->type != TP_ONNX_FLOAT && b->type != TP_ONNX_INT64))
        return nfail(c, TP_ERR_UNSUPPORTED, "Pow of %s by %s (float32 by float32 or int64)", tp_onnx_elem_name(a->type),
                     tp_onnx_elem_name(b->type));
    tensor *y;
    iter it;
    tp_status s = bcast_out(c, a, b, 0, TP_ONNX_FLOAT, &y, &it);
    if (s) return s;
    for (int64_t i = 0; i < y->numel; i++, it_next(&it)) {
        const double e = b->type == TP_ONNX_FLOAT ? (double)((const float *)b->data)[it.off[1]]
                                                  : (double)int_at(b, it.off[1]);
        ((float *)y->data)[i] = (float)pow((double)((const float *)a->data)[it.off[0]], e);
    }
    return TP_OK;
}

/* Add, Sub, Mul, Div, Max (two at a time: Max is variadic), Equal, LessOrEqual, And: same element type both sides
 * (the specs' T), numpy broadcasting; Pow: a float32 base, a float32 or int64 exponent, pow in double rounded once.
 * int64 Div truncates toward zero as C and onnxruntime do; a zero divisor is an error. And takes bool. */
static tp_status binary(ctx *c, const tensor *a, const tensor *b, int op, int k_out) {
    if (op == B_POW) return binary_pow(c, a, b);
    if (op == B_AND && (a->type != TP_ONNX_BOOL || b->type != TP_ONNX_BOOL))
        return nfail(c, TP_ERR_UNSUPPORTED, "And of %s and %s (bool only)", tp_onnx_elem_name(a->type),
                     tp_onnx_elem_name(b->type));
    if (a->type != b->type)
        return nfail(c, TP_ERR_SHAPE, "inputs differ in type (%s, %s)", tp_onnx_elem_name(a->type),
                     tp_onnx_elem_name(b->type));
    const int fl = a->type == TP_ONNX_FLOAT;
    const int cmp = op == B_EQUAL || op == B_LE || op == B_AND; /* a bool output */
    if (!fl && a->type != TP_ONNX_INT64 && !((op == B_EQUAL || op == B_AND) && is_int(a->type)))
        return nfail(c, TP_ERR_UNSUPPORTED, "element type %s", tp_onnx_elem_name(a->type));
    tensor *y;
    iter it;
    tp_status s = bcast_out(c, a, b, k_out, cmp ? TP_ONNX_BOOL : a->type, &y, &it);
    if (s) return s;
    for (int64_t i = 0; i < y->numel; i++, it_next(&it)) {
        if (op == B_AND) {
            ((uint8_t *)y->data)[i] = int_at(a, it.off[0]) && int_at(b, it.off[1]);
        } else if (cmp) {
            const int eq = op == B_EQUAL;
            ((uint8_t *)y->data)[i] =
                fl ? (eq ? ((const float *)a->data)[it.off[0]] == ((const float *)b->data)[it.off[1]]
                         : ((const float *)a->data)[it.off[0]] <= ((const float *)b->data)[it.off[1]])
                   : (eq ? int_at(a, it.off[0]) == int_at(b, it.off[1]) : int_at(a, it.off[0]) <= int_at(b, it.off[1]));
        } else if (fl) {
            const float x = ((const float *)a->data)[it.off[0]], z = ((const float *)b->data)[it.off[1]];
            float r = op == B_ADD ? x + z : op == B_SUB ? x - z : op == B_MUL ? x * z : op == B_DIV ? x / z
                      : (x >= z || isnan(x)) ? x : z;
            ((float *)y->data)[i] = r; /* Max propagates NaN, as numpy.maximum */
        } else {
            const int64_t x = ((const int64_t *)a->data)[it.off[0]], z = ((const int64_t *)b->data)[it.off[1]];
            if (op == B_DIV && (z == 0 || (x == INT64_MIN && z == -1)))
                return nfail(c, TP_ERR_SHAPE, "int64 division of %lld by %lld", (long long)x, (long long)z);
            ((int64_t *)y->data)[i] = op == B_ADD ? (int64_t)((uint64_t)x + (uint64_t)z)
                                      : op == B_SUB ? (int64_t)((uint64_t)x - (uint64_t)z)
                                      : op == B_MUL ? (int64_t)((uint64_t)x * (uint64_t)z)
                                      : op == B_DIV ? x / z : (x > z ? x : z);
        }
    }
    return TP_OK;
}

static tp_status op_bin(ctx *c, int op) {
    const tensor *a, *b;
    tp_status s = need(c, 0, &a, 0, 0, 0);
    if (!s) s = need(c, 1, &b, 0, 0, 0);
    return s ? s : binary(c, a, b, op, 0);
}
static tp_status op_add(ctx *c) { return op_bin(c, B_ADD); }
static tp_status op_mul(ctx *c) { return op_bin(c, B_MUL); }
static tp_status op_div(ctx *c) { return op_bin(c, B_DIV); }
static tp_status op_equal(ctx *c) { return op_bin(c, B_EQUAL); }
static tp_status op_sub(ctx *c) { return op_bin(c, B_SUB); }
static tp_status op_pow(ctx *c) { return op_bin(c, B_POW); }
static tp_status op_less_or_equal(ctx *c) { return op_bin(c, B_LE); }
static tp_status op_and(ctx *c) { return op_bin(c, B_AND); }

/* Max (opset 13): one or more inputs, folded pairwise into the output */
static tp_status op_max(ctx *c) {
    const tensor *a;
    tp_status s = need(c, 0, &a, TP_ONNX_FLOAT, TP_ONNX_INT64, 0);
    if (s) return s;
    if (c->node->n_in == 1) return binary(c, a, a, B_MAX, 0);
    for (int k = 1; k < c->node->n_in; k++) {
        const tensor *b;
        if ((s = need(c, k, &b, 0, 0, 0))) return s;
        tensor acc = {0};
        if (k > 1) { /* the running result is output 0 itself: move it aside before it is remade */
            acc = c->vals[lookup(c, c->node->out[0])];
            memset(&c->vals[lookup(c, c->node->out[0])], 0, sizeof(tensor));
            a = &acc;
        }
        s = binary(c, a, b, B_MAX, 0);
        drop(&acc);
        if (s) return s;
    }
    return TP_OK;
}

enum { U_ERF, U_SQRT, U_RELU, U_NEG, U_RECIP, U_SIGMOID, U_SIN, U_COS, U_TANH };

/* Erf, Sqrt, Relu, Neg, Reciprocal, Sigmoid, Sin, Cos, Tanh on float32 (Neg on int64 too): each in double rounded once
 * to float, the correctly rounded value */
static tp_status unary(ctx *c, int op) {
    const tensor *x;
    tensor *y;
    tp_status s = need(c, 0, &x, TP_ONNX_FLOAT, op == U_NEG ? TP_ONNX_INT64 : 0, 0);
    if (!s) s = mk(c, 0, x->type, x->ndim, x->dims, &y);
    if (s) return s;
    if (x->type == TP_ONNX_INT64) {
        for (int64_t i = 0; i < x->numel; i++)
            ((int64_t *)y->data)[i] = (int64_t)(0 - (uint64_t)((const int64_t *)x->data)[i]);
        return TP_OK;
    }
    const float *xs = x->data;
    float *ys = y->data;
    for (int64_t i = 0; i < x->numel; i++) {
        const double v = xs[i];
        ys[i] = op == U_ERF ? (float)erf(v) : op == U_SQRT ? sqrtf(xs[i]) : op == U_RELU ? (xs[i] > 0 ? xs[i] : 0.0f)
                : op == U_NEG ? -xs[i] : op == U_RECIP ? (float)(1.0 / v) : op == U_SIGMOID ? (float)(1.0 / (1.0 + exp(-v)))
                : op == U_SIN ? (float)sin(v) : op == U_COS ? (float)cos(v) : (float)tanh(v);
    }
    return TP_OK;
}
static tp_status op_neg(ctx *c) { return unary(c, U_NEG); }
static tp_status op_reciprocal(ctx *c) { return unary(c, U_RECIP); }
static tp_status op_sigmoid(ctx *c) { return unary(c, U_SIGMOID); }
static tp_status op_sin(ctx *c) { return unary(c, U_SIN); }
static tp_status op_cos(ctx *c) { return unary(c, U_COS); }
static tp_status op_tanh(ctx *c) { return unary(c, U_TANH); }

/* IsNaN (float32 -> bool), Not (bool -> bool) */
static tp_status op_isnan_not(ctx *c, int isnan_op) {
    const tensor *x;
    tensor *y;
    tp_status s = need(c, 0, &x, isnan_op ? TP_ONNX_FLOAT : TP_ONNX_BOOL, 0, 0);
    if (!s) s = mk(c, 0, TP_ONNX_BOOL, x->ndim, x->dims, &y);
    if (s) return s;
    for (int64_t i = 0; i < x->numel; i++)
        ((uint8_t *)y->data)[i] = isnan_op ? isnan(((const float *)x->data)[i]) != 0 : !((const uint8_t *)x->data)[i];
    return TP_OK;
}
static tp_status op_isnan(ctx *c) { return op_isnan_not(c, 1); }
static tp_status op_not(ctx *c) { return op_isnan_not(c, 0); }
static tp_status op_erf(ctx *c) { return unary(c, U_ERF); }
static tp_status op_sqrt(ctx *c) { return unary(c, U_SQRT); }
static tp_status op_relu(ctx *c) { return unary(c, U_RELU); }

/* Where (opset 16): condition bool, X and Y one type, three-way broadcasting */
static tp_status op_where(ctx *c) {
    const tensor *cond, *a, *b;
    tp_status s = need(c, 0, &cond, TP_ONNX_BOOL, 0, 0);
    if (!s) s = need(c, 1, &a, 0, 0, 0);
    if (!s) s = need(c, 2, &b, 0, 0, 0);
    if (s) return s;
    if (a->type != b->type) return nfail(c, TP_ERR_SHAPE, "X and Y differ in type");
    const tensor *ts[3] = {cond, a, b};
    int nd;
    int64_t dims[MAXD];
    tensor *y;
    if ((s = bshape(c, ts, 3, &nd, dims)) || (s = mk(c, 0, a->type, nd, dims, &y))) return s;
    iter it;
    it_init(&it, nd, dims);
    for (int k = 0; k < 3; k++) bstrides(nd, ts[k]->ndim, ts[k]->dims, 1, it.st[k]);
    const size_t e = (size_t)esize(a->type);
    for (int64_t i = 0; i < y->numel; i++, it_next(&it)) {
        const int pick = ((const uint8_t *)cond->data)[it.off[0]] ? 1 : 2;
        memcpy((char *)y->data + (size_t)i * e, (const char *)ts[pick]->data + (size_t)it.off[pick] * e, e);
    }
    return TP_OK;
}

/* Cast: to float32, int64 or bool from float32/16, bfloat16, float8e4m3fn, int64/32/8, uint8, bool. Float to int64
 * truncates toward zero (onnxruntime's static_cast); NaN or out of range is an error, not the C UB. */
static tp_status op_cast(ctx *c) {
    const tensor *x;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (s) return s;
    const int to = (int)attr_i(c, "to", 0);
    if (to != TP_ONNX_FLOAT && to != TP_ONNX_INT64 && to != TP_ONNX_BOOL)
        return nfail(c, TP_ERR_UNSUPPORTED, "cast to %s (float32, int64 and bool are run)", tp_onnx_elem_name(to));
    const int xi = is_int(x->type);
    if (!xi && x->type != TP_ONNX_FLOAT && x->type != TP_ONNX_FLOAT16 && x->type != TP_ONNX_BFLOAT16 &&
        x->type != TP_ONNX_FLOAT8E4M3FN)
        return nfail(c, TP_ERR_UNSUPPORTED, "cast from %s", tp_onnx_elem_name(x->type));
    tensor *y;
    if ((s = mk(c, 0, to, x->ndim, x->dims, &y))) return s;
    for (int64_t i = 0; i < x->numel; i++) {
        if (to == TP_ONNX_FLOAT) {
            ((float *)y->data)[i] = xi ? (float)int_at(x, i) : flt_at(x, i);
        } else if (to == TP_ONNX_BOOL) {
            ((uint8_t *)y->data)[i] = xi ? int_at(x, i) != 0 : flt_at(x, i) != 0.0f;
        } else if (xi) {
            ((int64_t *)y->data)[i] = int_at(x, i);
        } else {
            const float f = flt_at(x, i);
            if (!(f > -9.2233720368547758e18f && f < 9.2233720368547758e18f))
                return nfail(c, TP_ERR_SHAPE, "value %g does not fit int64", (double)f);
            ((int64_t *)y->data)[i] = (int64_t)f;
        }
    }
    return TP_OK;
}

/* ---- constants and shapes ----------------------------------------------------------------------------------- */

/* Copies a reader tensor (its bytes may be unaligned inside the protobuf buffer) into output k */
static tp_status from_onnx_tensor(ctx *c, const tp_onnx_tensor *src, int k) {
    if (esize(src->elem_type) <= 0)
        return nfail(c, TP_ERR_UNSUPPORTED, "a constant of type %s", tp_onnx_elem_name(src->elem_type));
    tensor *y;
    tp_status s = mk(c, k, src->elem_type, src->ndim, src->dims, &y);
    if (!s && src->nbytes) memcpy(y->data, src->data, src->nbytes);
    return s;
}

/* Constant (opset 13): value, value_float(s) or value_int(s); sparse and string values are not run */
static tp_status op_constant(ctx *c) {
    const tp_onnx_attr *a = c->node->n_attr == 1 ? &c->node->attr[0] : NULL;
    if (!a) return nfail(c, TP_ERR_FORMAT, "needs exactly one attribute, has %d", c->node->n_attr);
    tensor *y;
    tp_status s;
    int64_t n = (int64_t)a->n;
    if (!strcmp(a->name, "value") && a->type == TP_ONNX_ATTR_TENSOR) return from_onnx_tensor(c, a->t, 0);
    if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_int")) {
        const int fl = a->name[6] == 'f';
        if (a->type != (fl ? TP_ONNX_ATTR_FLOAT : TP_ONNX_ATTR_INT))
            return nfail(c, TP_ERR_FORMAT, "attribute '%s' has the wrong type", a->name);
        if ((s = mk(c, 0, fl ? TP_ONNX_FLOAT : TP_ONNX_INT64, 0, NULL, &y))) return s;
        if (fl) ((float *)y->data)[0] = (float)a->f;
        else ((int64_t *)y->data)[0] = a->i;
        return TP_OK;
    }
    if (!strcmp(a->name, "value_floats") || !strcmp(a->name, "value_ints")) {
        const int fl = a->name[6] == 'f';
        if (a->type != (fl ? TP_ONNX_ATTR_FLOATS : TP_ONNX_ATTR_INTS))
            return nfail(c, TP_ERR_FORMAT, "attribute '%s' has the wrong type", a->name);
        if ((s = mk(c, 0, fl ? TP_ONNX_FLOAT : TP_ONNX_INT64, 1, &n, &y))) return s;
        if (n) memcpy(y->data, fl ? (const void *)a->floats : (const void *)a->ints, (size_t)n * (fl ? 4 : 8));
        return TP_OK;
    }
    return nfail(c, TP_ERR_UNSUPPORTED, "attribute '%s'", a->name);
}

/* ConstantOfShape (opset 9, 20 adds types): the shape from input 0, filled with the one-element value (float 0) */
static tp_status op_constant_of_shape(ctx *c) {
    int64_t dims[MAXD];
    int nd;
    tp_status s = ints_of(c, 0, dims, MAXD, &nd);
    if (s) return s;
    const tp_onnx_attr *a = attr(c, "value");
    if (a && (a->type != TP_ONNX_ATTR_TENSOR || a->t->numel != 1 || esize(a->t->elem_type) <= 0))
        return nfail(c, TP_ERR_UNSUPPORTED, "'value' must be a one-element tensor");
    tensor *y;
    if ((s = mk(c, 0, a ? a->t->elem_type : TP_ONNX_FLOAT, nd, dims, &y))) return s;
    if (a) {
        const size_t e = (size_t)esize(a->t->elem_type);
        for (int64_t i = 0; i < y->numel; i++) memcpy((char *)y->data + (size_t)i * e, a->t->data, e);
    }
    return TP_OK;
}

/* Shape (opset 15): start and end clamped to [0, rank] after adding rank to negatives */
static tp_status op_shape(ctx *c) {
    const tensor *x;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (s) return s;
    const int r = x->ndim;
    int64_t a = attr_i(c, "start", 0), b = attr_i(c, "end", r);
    a = a < 0 ? a + r : a, b = b < 0 ? b + r : b;
    a = a < 0 ? 0 : a > r ? r : a, b = b < 0 ? 0 : b > r ? r : b;
    int64_t n = b > a ? b - a : 0;
    tensor *y;
    if ((s = mk(c, 0, TP_ONNX_INT64, 1, &n, &y))) return s;
    for (int64_t i = 0; i < n; i++) ((int64_t *)y->data)[i] = x->dims[a + i];
    return TP_OK;
}

/* Output 0 as input 0's bytes with another shape (Reshape, Squeeze, Unsqueeze) */
static tp_status same_data(ctx *c, const tensor *x, int nd, const int64_t *dims) {
    if (prod(dims, 0, nd) != x->numel)
        return nfail(c, TP_ERR_SHAPE, "%lld values cannot take a shape of %lld", (long long)x->numel,
                     (long long)prod(dims, 0, nd));
    tensor *y;
    tp_status s = mk(c, 0, x->type, nd, dims, &y);
    if (!s && x->numel) memcpy(y->data, x->data, (size_t)x->numel * (size_t)esize(x->type));
    return s;
}

/* Reshape (opset 14): 0 copies the input's dimension unless allowzero 1 (then it is a zero), one -1 is inferred */
static tp_status op_reshape(ctx *c) {
    const tensor *x;
    int64_t d[MAXD];
    int nd;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (!s) s = ints_of(c, 1, d, MAXD, &nd);
    if (s) return s;
    const int64_t allowzero = attr_i(c, "allowzero", 0);
    int infer = -1, zero = 0;
    int64_t known = 1;
    for (int i = 0; i < nd; i++) {
        if (d[i] == 0 && !allowzero) {
            if (i >= x->ndim) return nfail(c, TP_ERR_SHAPE, "target dimension %d is 0 past the input's rank", i);
            d[i] = x->dims[i];
        }
        zero |= d[i] == 0;
        if (d[i] == -1) {
            if (infer >= 0) return nfail(c, TP_ERR_SHAPE, "more than one -1 in the target shape");
            infer = i;
        } else if (d[i] < 0) {
            return nfail(c, TP_ERR_SHAPE, "target dimension %d is %lld", i, (long long)d[i]);
        } else {
            known *= d[i];
        }
    }
    if (infer >= 0) {
        if (allowzero && zero) return nfail(c, TP_ERR_SHAPE, "allowzero with both 0 and -1 in the target shape");
        if (known == 0 || x->numel % known)
            return nfail(c, TP_ERR_SHAPE, "%lld values do not divide by %lld to infer the -1", (long long)x->numel,
                         (long long)known);
        d[infer] = x->numel / known;
    }
    return same_data(c, x, nd, d);
}

/* Identity: the input's values and shape (the TorchScript exporter shares equal initializers through it) */
static tp_status op_identity(ctx *c) {
    const tensor *x;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    return s ? s : same_data(c, x, x->ndim, x->dims);
}

/* Unsqueeze (opset 13): axes from input 1, in the output's rank, no repeats */
static tp_status op_unsqueeze(ctx *c) {
    const tensor *x;
    int64_t ax[MAXD], d[MAXD];
    int na;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (!s) s = ints_of(c, 1, ax, MAXD, &na);
    if (s) return s;
    const int r = x->ndim + na;
    if (r > MAXD) return nfail(c, TP_ERR_UNSUPPORTED, "rank %d", r);
    int mark[MAXD] = {0};
    for (int i = 0; i < na; i++) {
        int a;
        if ((s = axis_of(c, ax[i], r, &a))) return s;
        if (mark[a]++) return nfail(c, TP_ERR_SHAPE, "axis %d given twice", a);
    }
    for (int i = 0, j = 0; i < r; i++) d[i] = mark[i] ? 1 : x->dims[j++];
    return same_data(c, x, r, d);
}

/* Squeeze (opset 13): axes from input 1 (each of size 1), or every dimension of size 1 without it */
static tp_status op_squeeze(ctx *c) {
    const tensor *x;
    int64_t ax[MAXD], d[MAXD];
    int na = 0, nd = 0, mark[MAXD] = {0};
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (!s && has_in(c, 1)) s = ints_of(c, 1, ax, MAXD, &na);
    if (s) return s;
    for (int i = 0; i < na; i++) {
        int a;
        if ((s = axis_of(c, ax[i], x->ndim, &a))) return s;
        if (x->dims[a] != 1) return nfail(c, TP_ERR_SHAPE, "axis %d has size %lld, not 1", a, (long long)x->dims[a]);
        mark[a] = 1;
    }
    for (int i = 0; i < x->ndim; i++)
        if (!(has_in(c, 1) ? mark[i] : x->dims[i] == 1)) d[nd++] = x->dims[i];
    return same_data(c, x, nd, d);
}

/* Expand (opset 13): input and shape broadcast both ways */
static tp_status op_expand(ctx *c) {
    const tensor *x;
    tensor sh = {0}, *y;
    int nd;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (!s) s = ints_of(c, 1, sh.dims, MAXD, &sh.ndim);
    if (s) return s;
    const tensor *ts[2] = {x, &sh};
    int64_t dims[MAXD];
    if ((s = bshape(c, ts, 2, &nd, dims)) || (s = mk(c, 0, x->type, nd, dims, &y))) return s;
    iter it;
    it_init(&it, nd, dims);
    bstrides(nd, x->ndim, x->dims, 1, it.st[0]);
    const size_t e = (size_t)esize(x->type);
    for (int64_t i = 0; i < y->numel; i++, it_next(&it))
        memcpy((char *)y->data + (size_t)i * e, (const char *)x->data + (size_t)it.off[0] * e, e);
    return TP_OK;
}

/* Copies x into y through an iterator whose stream 0 walks x (Transpose, Slice) */
static void gather_iter(const tensor *x, tensor *y, iter *it) {
    const size_t e = (size_t)esize(x->type);
    for (int64_t i = 0; i < y->numel; i++, it_next(it))
        memcpy((char *)y->data + (size_t)i * e, (const char *)x->data + (size_t)it->off[0] * e, e);
}

/* Transpose (opset 13): perm, reversed dimensions by default */
static tp_status op_transpose(ctx *c) {
    const tensor *x;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (s) return s;
    const tp_onnx_attr *p = attr(c, "perm");
    const int r = x->ndim;
    int64_t perm[MAXD], d[MAXD], st[MAXD];
    int seen[MAXD] = {0};
    if (p && (p->type != TP_ONNX_ATTR_INTS || (int)p->n != r)) return nfail(c, TP_ERR_SHAPE, "perm has %d values for rank %d", (int)p->n, r);
    for (int i = 0; i < r; i++) {
        perm[i] = p ? p->ints[i] : r - 1 - i;
        if (perm[i] < 0 || perm[i] >= r || seen[perm[i]]++) return nfail(c, TP_ERR_SHAPE, "perm is not a permutation");
        d[i] = x->dims[perm[i]];
    }
    bstrides(r, r, x->dims, 1, st);
    tensor *y;
    if ((s = mk(c, 0, x->type, r, d, &y))) return s;
    iter it;
    it_init(&it, r, d);
    for (int i = 0; i < r; i++) it.st[0][i] = x->dims[perm[i]] == 1 ? 0 : st[perm[i]];
    gather_iter(x, y, &it);
    return TP_OK;
}

/* Slice (opset 13): starts, ends, optional axes and steps as inputs. Negatives count from the end; then for a
 * positive step start and end clamp to [0, dim], for a negative one start to [0, dim-1] and end to [-1, dim-1]. */
static tp_status op_slice(ctx *c) {
    const tensor *x;
    int64_t st[MAXD], en[MAXD], ax[MAXD], sp[MAXD], str[MAXD], d[MAXD];
    int ns, ne, na, np;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (!s) s = ints_of(c, 1, st, MAXD, &ns);
    if (!s) s = ints_of(c, 2, en, MAXD, &ne);
    if (!s && has_in(c, 3)) s = ints_of(c, 3, ax, MAXD, &na);
    if (!s && has_in(c, 4)) s = ints_of(c, 4, sp, MAXD, &np);
    if (s) return s;
    if (!has_in(c, 3)) for (na = 0; na < ns; na++) ax[na] = na;
    if (!has_in(c, 4)) for (np = 0; np < ns; np++) sp[np] = 1;
    if (ne != ns || na != ns || np != ns) return nfail(c, TP_ERR_SHAPE, "starts, ends, axes, steps differ in length");
    const int r = x->ndim;
    int64_t first[MAXD] = {0}, step[MAXD];
    int seen[MAXD] = {0};
    for (int i = 0; i < r; i++) d[i] = x->dims[i], step[i] = 1;
    for (int i = 0; i < ns; i++) {
        int a;
        if ((s = axis_of(c, ax[i], r, &a))) return s;
        if (seen[a]++) return nfail(c, TP_ERR_SHAPE, "axis %d given twice", a);
        if (sp[i] == 0) return nfail(c, TP_ERR_SHAPE, "step 0");
        const int64_t n = x->dims[a];
        int64_t b = st[i] < 0 ? st[i] + n : st[i], e = en[i] < 0 ? en[i] + n : en[i];
        if (sp[i] > 0) {
            b = b < 0 ? 0 : b > n ? n : b, e = e < 0 ? 0 : e > n ? n : e;
            d[a] = e > b ? (e - b + sp[i] - 1) / sp[i] : 0;
        } else {
            b = b < 0 ? 0 : b > n - 1 ? n - 1 : b, e = e < -1 ? -1 : e > n - 1 ? n - 1 : e;
            d[a] = b > e ? (b - e - sp[i] - 1) / -sp[i] : 0;
        }
        first[a] = b, step[a] = sp[i];
    }
    tensor *y;
    if ((s = mk(c, 0, x->type, r, d, &y))) return s;
    iter it;
    it_init(&it, r, d);
    for (int i = 0; i < r; i++) {
        str[i] = prod(x->dims, i + 1, r);
        it.off[0] += (d[i] ? first[i] : 0) * str[i];
        it.st[0][i] = step[i] * str[i];
    }
    gather_iter(x, y, &it);
    return TP_OK;
}

/* Concat (opset 13): one type, one rank, equal dimensions but on axis */
static tp_status op_concat(ctx *c) {
    const tensor *x0, *x;
    tp_status s = need(c, 0, &x0, 0, 0, 0);
    if (s) return s;
    if (!attr(c, "axis")) return nfail(c, TP_ERR_FORMAT, "attribute 'axis' is required");
    int a;
    if ((s = axis_of(c, attr_i(c, "axis", 0), x0->ndim, &a))) return s;
    int64_t d[MAXD];
    memcpy(d, x0->dims, sizeof d);
    d[a] = 0;
    for (int k = 0; k < c->node->n_in; k++) {
        if ((s = need(c, k, &x, x0->type, 0, 0))) return s;
        for (int i = 0; i < x0->ndim; i++)
            if (x->ndim != x0->ndim || (i != a && x->dims[i] != x0->dims[i]))
                return nfail(c, TP_ERR_SHAPE, "input %d's shape does not match input 0's but on axis %d", k, a);
        d[a] += x->dims[a];
    }
    tensor *y;
    if ((s = mk(c, 0, x0->type, x0->ndim, d, &y))) return s;
    const int64_t outer = prod(d, 0, a), inner = prod(d, a + 1, x0->ndim);
    const size_t e = (size_t)esize(x0->type);
    int64_t at = 0; /* where the next input starts along the axis */
    for (int k = 0; k < c->node->n_in; k++) {
        x = in(c, k);
        const size_t chunk = (size_t)(x->dims[a] * inner) * e;
        for (int64_t o = 0; o < outer && chunk; o++)
            memcpy((char *)y->data + ((size_t)(o * d[a] + at) * (size_t)inner) * e,
                   (const char *)x->data + (size_t)o * chunk,
                   chunk);
        at += x->dims[a];
    }
    return TP_OK;
}

/* Split (opset 13; 18 adds num_outputs): sizes from input 1, else equal parts, the last smaller from opset 18 */
static tp_status op_split(ctx *c) {
    const tensor *x;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (s) return s;
    int a, n = c->node->n_out, ns;
    if ((s = axis_of(c, attr_i(c, "axis", 0), x->ndim, &a))) return s;
    int64_t sz[64];
    if (n > 64) return nfail(c, TP_ERR_UNSUPPORTED, "%d outputs", n);
    const int64_t dim = x->dims[a];
    if (has_in(c, 1)) {
        if ((s = ints_of(c, 1, sz, 64, &ns))) return s;
        int64_t sum = 0;
        for (int i = 0; i < ns; i++) sum += sz[i] < 0 ? dim + 1 : sz[i];
        if (ns != n || sum != dim)
            return nfail(c, TP_ERR_SHAPE, "split sizes do not fit %d outputs of axis %lld", n, (long long)dim);
    } else {
        if (attr(c, "num_outputs") && attr_i(c, "num_outputs", 0) != n)
            return nfail(c, TP_ERR_SHAPE, "num_outputs %lld for %d outputs", (long long)attr_i(c, "num_outputs", 0), n);
        const int64_t chunk = (dim + n - 1) / n;
        if ((c->opset < 18 && dim % n) || chunk * (n - 1) >= dim + (dim == 0))
            return nfail(c, TP_ERR_SHAPE, "axis of %lld does not split into %d parts", (long long)dim, n);
        for (int i = 0; i < n; i++) sz[i] = i < n - 1 ? chunk : dim - chunk * (n - 1);
    }
    const int64_t outer = prod(x->dims, 0, a), inner = prod(x->dims, a + 1, x->ndim);
    const size_t e = (size_t)esize(x->type);
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        int64_t d[MAXD];
        memcpy(d, x->dims, sizeof d);
        d[a] = sz[k];
        tensor *y;
        if ((s = mk(c, k, x->type, x->ndim, d, &y))) return s;
        const size_t chunk = (size_t)(sz[k] * inner) * e;
        for (int64_t o = 0; o < outer && chunk; o++)
            memcpy((char *)y->data + (size_t)o * chunk,
                   (const char *)x->data + ((size_t)(o * dim + at) * (size_t)inner) * e,
                   chunk);
        at += sz[k];
    }
    return TP_OK;
}

/* Gather (opset 13): out = data[:axis] + indices' shape + data[axis+1:], negative indices from the end */
static tp_status op_gather(ctx *c) {
    const tensor *x, *ix;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (!s) s = need(c, 1, &ix, TP_ONNX_INT64, TP_ONNX_INT32, 0);
    if (s) return s;
    int a, nd = 0;
    if ((s = axis_of(c, attr_i(c, "axis", 0), x->ndim, &a))) return s;
    int64_t d[2 * MAXD];
    if (x->ndim + ix->ndim - 1 > MAXD) return nfail(c, TP_ERR_UNSUPPORTED, "output rank above %d", MAXD);
    for (int i = 0; i < a; i++) d[nd++] = x->dims[i];
    for (int i = 0; i < ix->ndim; i++) d[nd++] = ix->dims[i];
    for (int i = a + 1; i < x->ndim; i++) d[nd++] = x->dims[i];
    tensor *y;
    if ((s = mk(c, 0, x->type, nd, d, &y))) return s;
    const int64_t outer = prod(x->dims, 0, a), inner = prod(x->dims, a + 1, x->ndim), n = x->dims[a];
    const size_t e = (size_t)esize(x->type), row = (size_t)inner * e;
    for (int64_t j = 0; j < ix->numel; j++) {
        int64_t k = int_at(ix, j);
        if (k < -n || k >= n)
            return nfail(c, TP_ERR_SHAPE, "index %lld out of range [-%lld, %lld)", (long long)k, (long long)n,
                         (long long)n);
        k = k < 0 ? k + n : k;
        for (int64_t o = 0; o < outer && row; o++)
            memcpy((char *)y->data + (size_t)(o * ix->numel + j) * row,
                   (const char *)x->data + (size_t)(o * n + k) * row,
                   row);
    }
    return TP_OK;
}

/* Range (opset 11): scalars start, limit, delta of one type (int64 or float32); max(ceil((limit - start) / delta), 0)
 * values */
static tp_status op_range(ctx *c) {
    const tensor *a, *l, *d;
    tp_status s = need(c, 0, &a, TP_ONNX_INT64, TP_ONNX_FLOAT, 0);
    if (!s) s = need(c, 1, &l, a->type, 0, 0);
    if (!s) s = need(c, 2, &d, a->type, 0, 0);
    if (s) return s;
    if (a->numel != 1 || l->numel != 1 || d->numel != 1) return nfail(c, TP_ERR_SHAPE, "start, limit, delta not scalars");
    const int fl = a->type == TP_ONNX_FLOAT;
    const double st = fl ? flt_at(a, 0) : (double)int_at(a, 0), li = fl ? flt_at(l, 0) : (double)int_at(l, 0),
                 de = fl ? flt_at(d, 0) : (double)int_at(d, 0);
    if (de == 0) return nfail(c, TP_ERR_SHAPE, "delta 0");
    const double nn = ceil((li - st) / de);
    if (!(nn < (double)MAX_NUMEL)) return nfail(c, TP_ERR_SHAPE, "%g values", nn);
    int64_t n = nn > 0 ? (int64_t)nn : 0;
    tensor *y;
    if ((s = mk(c, 0, a->type, 1, &n, &y))) return s;
    for (int64_t i = 0; i < n; i++) {
        if (fl) ((float *)y->data)[i] = (float)(st + (double)i * de);
        else ((int64_t *)y->data)[i] = int_at(a, 0) + i * int_at(d, 0);
    }
    return TP_OK;
}

/* ReduceMean: float32, axes from input 1 (opset 18) or the axes attribute (13 to 17; absent: all, or none with
 * noop_with_empty_axes), keepdims; sums in double */
static tp_status op_reduce_mean(ctx *c) {
    const tensor *x;
    int64_t ax[MAXD];
    int na = 0;
    tp_status s = need(c, 0, &x, TP_ONNX_FLOAT, 0, 0);
    if (!s && has_in(c, 1)) s = ints_of(c, 1, ax, MAXD, &na);
    if (s) return s;
    const tp_onnx_attr *aa = attr(c, "axes"); /* opset 13 to 17: the axes an attribute */
    if (!has_in(c, 1) && aa) {
        if (aa->type != TP_ONNX_ATTR_INTS || aa->n > MAXD) return nfail(c, TP_ERR_FORMAT, "attribute axes");
        for (size_t i = 0; i < aa->n; i++) ax[na++] = aa->ints[i];
    }
    int red[MAXD] = {0};
    if (na == 0 && attr_i(c, "noop_with_empty_axes", 0)) return same_data(c, x, x->ndim, x->dims);
    for (int i = 0; i < x->ndim; i++) red[i] = na == 0;
    for (int i = 0; i < na; i++) {
        int a;
        if ((s = axis_of(c, ax[i], x->ndim, &a))) return s;
        red[a] = 1;
    }
    const int keep = (int)attr_i(c, "keepdims", 1);
    int64_t d[MAXD];
    int nd = 0;
    int64_t cnt = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (red[i]) cnt *= x->dims[i];
        if (!red[i]) d[nd++] = x->dims[i];
        else if (keep) d[nd++] = 1;
    }
    tensor *y;
    if ((s = mk(c, 0, TP_ONNX_FLOAT, nd, d, &y))) return s;
    double *acc = calloc((size_t)(y->numel ? y->numel : 1), sizeof(double));
    if (!acc) return nfail(c, TP_ERR_OOM, "out of host memory");
    int64_t idx[MAXD] = {0};
    for (int64_t i = 0; i < x->numel; i++) { /* the output index of each input element */
        int64_t o = 0;
        for (int k = 0; k < x->ndim; k++) o = red[k] ? o : o * x->dims[k] + idx[k];
        acc[o] += ((const float *)x->data)[i];
        for (int k = x->ndim - 1; k >= 0 && ++idx[k] == x->dims[k]; k--) idx[k] = 0;
    }
    for (int64_t o = 0; o < y->numel; o++) ((float *)y->data)[o] = cnt ? (float)(acc[o] / (double)cnt) : NAN;
    free(acc);
    return TP_OK;
}

/* CumSum (opset 14): int64 or float32 along the scalar axis of input 1; exclusive, reverse */
static tp_status op_cumsum(ctx *c) {
    const tensor *x;
    int64_t ax[1];
    int na, a;
    tp_status s = need(c, 0, &x, TP_ONNX_INT64, TP_ONNX_FLOAT, 0);
    if (!s) s = ints_of(c, 1, ax, 1, &na);
    if (!s && na != 1) s = nfail(c, TP_ERR_SHAPE, "axis is not one value");
    if (!s) s = axis_of(c, ax[0], x->ndim, &a);
    tensor *y;
    if (!s) s = mk(c, 0, x->type, x->ndim, x->dims, &y);
    if (s) return s;
    const int excl = (int)attr_i(c, "exclusive", 0), rev = (int)attr_i(c, "reverse", 0);
    const int64_t outer = prod(x->dims, 0, a), n = x->dims[a], inner = prod(x->dims, a + 1, x->ndim);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double fs = 0;
            int64_t is = 0;
            for (int64_t t = 0; t < n; t++) {
                const int64_t j = rev ? n - 1 - t : t, at = (o * n + j) * inner + in;
                if (x->type == TP_ONNX_FLOAT) {
                    const double v = ((const float *)x->data)[at];
                    if (!excl) fs += v;
                    ((float *)y->data)[at] = (float)fs;
                    if (excl) fs += v;
                } else {
                    const int64_t v = ((const int64_t *)x->data)[at];
                    if (!excl) is = (int64_t)((uint64_t)is + (uint64_t)v);
                    ((int64_t *)y->data)[at] = is;
                    if (excl) is = (int64_t)((uint64_t)is + (uint64_t)v);
                }
            }
        }
    return TP_OK;
}

/* GatherND (opset 13): int64 indices whose last dimension q indexes data's first q dimensions after batch_dims;
 * negative indices count from the end */
static tp_status op_gather_nd(ctx *c) {
    const tensor *x, *ix;
    tp_status s = need(c, 0, &x, 0, 0, 0);
    if (!s) s = need(c, 1, &ix, TP_ONNX_INT64, 0, 0);
    if (s) return s;
    const int b = (int)attr_i(c, "batch_dims", 0);
    if (ix->ndim < 1 || b < 0 || b >= ix->ndim || b >= x->ndim)
        return nfail(c, TP_ERR_SHAPE, "batch_dims %d with indices of rank %d and data of rank %d", b, ix->ndim, x->ndim);
    const int q = (int)ix->dims[ix->ndim - 1];
    if (q < 1 || b + q > x->ndim) return nfail(c, TP_ERR_SHAPE, "index tuples of %d for data of rank %d", q, x->ndim);
    for (int i = 0; i < b; i++)
        if (ix->dims[i] != x->dims[i]) return nfail(c, TP_ERR_SHAPE, "batch dimension %d differs", i);
    int64_t d[2 * MAXD];
    int nd = 0;
    for (int i = 0; i < ix->ndim - 1; i++) d[nd++] = ix->dims[i];
    for (int i = b + q; i < x->ndim; i++) d[nd++] = x->dims[i];
    if (nd > MAXD) return nfail(c, TP_ERR_UNSUPPORTED, "output rank above %d", MAXD);
    tensor *y;
    if ((s = mk(c, 0, x->type, nd, d, &y))) return s;
    const int64_t nb = prod(ix->dims, 0, b), per = prod(ix->dims, b, ix->ndim - 1),
                  slice = prod(x->dims, b + q, x->ndim), xb = prod(x->dims, b, x->ndim);
    const size_t e = (size_t)esize(x->type);
    for (int64_t bi = 0; bi < nb; bi++)
        for (int64_t t = 0; t < per; t++) {
            const int64_t *tu = (const int64_t *)ix->data + (bi * per + t) * q;
            int64_t off = 0;
            for (int k = 0; k < q; k++) {
                const int64_t n = x->dims[b + k];
                int64_t v = tu[k];
                if (v < -n || v >= n)
                    return nfail(c, TP_ERR_SHAPE, "index %lld out of range [-%lld, %lld)", (long long)v, (long long)n,
                                 (long long)n);
                off = off * n + (v < 0 ? v + n : v);
            }
            memcpy((char *)y->data + (size_t)((bi * per + t) * slice) * e,
                   (const char *)x->data + (size_t)(bi * xb + off * slice) * e, (size_t)slice * e);
        }
    return TP_OK;
}

/* ---- linear algebra ------------------------------------------------------------------------------------------ */

/* MatMul (opset 13): numpy.matmul. 1-D operands gain a dimension that is dropped again; the batch dimensions
 * broadcast. float32, dot products accumulated in double. */
static tp_status op_matmul(ctx *c) {
    const tensor *a, *b;
    tp_status s = need(c, 0, &a, TP_ONNX_FLOAT, 0, 0);
    if (!s) s = need(c, 1, &b, TP_ONNX_FLOAT, 0, 0);
    if (s) return s;
    if (a->ndim < 1 || b->ndim < 1) return nfail(c, TP_ERR_SHAPE, "a scalar operand");
    /* A 1-D a is (1, K), a 1-D b is (K, 1) */
    const int an = a->ndim, bn = b->ndim;
    const int64_t M = an == 1 ? 1 : a->dims[an - 2], K = a->dims[an - 1];
    const int64_t Kb = bn == 1 ? b->dims[0] : b->dims[bn - 2], N = bn == 1 ? 1 : b->dims[bn - 1];
    if (K != Kb) return nfail(c, TP_ERR_SHAPE, "inner dimensions %lld and %lld differ", (long long)K, (long long)Kb);
    tensor ba = {0}, bb = {0}; /* the batch shapes */
    ba.ndim = an > 2 ? an - 2 : 0, bb.ndim = bn > 2 ? bn - 2 : 0;
    memcpy(ba.dims, a->dims, sizeof(int64_t) * (size_t)ba.ndim);
    memcpy(bb.dims, b->dims, sizeof(int64_t) * (size_t)bb.ndim);
    const tensor *ts[2] = {&ba, &bb};
    int nd;
    int64_t d[MAXD + 2];
    if ((s = bshape(c, ts, 2, &nd, d))) return s;
    const int64_t nb = prod(d, 0, nd);
    if (an > 1) d[nd++] = M;
    if (bn > 1) d[nd++] = N;
    tensor *y;
    if ((s = mk(c, 0, TP_ONNX_FLOAT, nd, d, &y))) return s;
    iter it;
    it_init(&it, ba.ndim > bb.ndim ? ba.ndim : bb.ndim, d);
    bstrides(it.nd, ba.ndim, ba.dims, M * K, it.st[0]);
    bstrides(it.nd, bb.ndim, bb.dims, K * N, it.st[1]);
    const float *A = a->data, *B = b->data;
    float *Y = y->data;
    int oom = 0;
    for (int64_t t = 0; t < nb && !oom; t++, it_next(&it)) {
        const float *At = A + it.off[0], *Bt = B + it.off[1];
        float *Yt = Y + t * M * N;
        /* rows over threads; each output's sum in k order, as one dot product would take it, a row of N
         * accumulators walking B's rows contiguously (a ViT-B/16 import check: 30 s to a few on 16 cores) */
#pragma omp parallel reduction(| : oom)
        {
            double *acc = malloc(sizeof(double) * (size_t)(N ? N : 1));
            if (!acc) oom = 1;
#pragma omp for schedule(static)
            for (int64_t i = 0; i < M; i++) {
                if (!acc) continue;
                for (int64_t j = 0; j < N; j++) acc[j] = 0.0;
                for (int64_t k = 0; k < K; k++) {
                    const double av = At[i * K + k];
                    const float *Bk = Bt + k * N;
                    for (int64_t j = 0; j < N; j++) acc[j] += av * Bk[j];
                }
                for (int64_t j = 0; j < N; j++) Yt[i * N + j] = (float)acc[j];
            }
            free(acc);
        }
    }
    return oom ? nfail(c, TP_ERR_OOM, "out of host memory") : TP_OK;
}

/* Gemm (opset 13): Y = alpha op(A) op(B) + beta C, op a transpose by transA/transB, C broadcast to (M, N) */
static tp_status op_gemm(ctx *c) {
    const tensor *a, *b, *cc = NULL;
    tp_status s = need(c, 0, &a, TP_ONNX_FLOAT, 0, 0);
    if (!s) s = need(c, 1, &b, TP_ONNX_FLOAT, 0, 0);
    if (!s && has_in(c, 2)) s = need(c, 2, &cc, TP_ONNX_FLOAT, 0, 0);
    if (s) return s;
    if (a->ndim != 2 || b->ndim != 2) return nfail(c, TP_ERR_SHAPE, "A and B must be 2-D");
    const int ta = attr_i(c, "transA", 0) != 0, tb = attr_i(c, "transB", 0) != 0;
    const double alpha = attr_f(c, "alpha", 1.0), beta = attr_f(c, "beta", 1.0);
    const int64_t M = a->dims[ta], K = a->dims[!ta], N = b->dims[!tb];
    if (b->dims[tb] != K) return nfail(c, TP_ERR_SHAPE, "inner dimensions %lld and %lld differ", (long long)K,
                                      (long long)b->dims[tb]);
    int64_t d[2] = {M, N};
    iter it;
    it_init(&it, 2, d);
    if (cc) {
        if (cc->ndim > 2) return nfail(c, TP_ERR_SHAPE, "C of rank %d", cc->ndim);
        for (int i = 0; i < cc->ndim; i++)
            if (cc->dims[i] != 1 && cc->dims[i] != d[2 - cc->ndim + i])
                return nfail(c, TP_ERR_SHAPE, "C does not broadcast to (%lld, %lld)", (long long)M, (long long)N);
        bstrides(2, cc->ndim, cc->dims, 1, it.st[0]);
    }
    tensor *y;
    if ((s = mk(c, 0, TP_ONNX_FLOAT, 2, d, &y))) return s;
    const float *A = a->data, *B = b->data;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++, it_next(&it)) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (double)A[ta ? k * M + i : i * K + k] * B[tb ? j * K + k : k * N + j];
            double v = alpha * acc;
            if (cc) v += beta * ((const float *)cc->data)[it.off[0]];
            ((float *)y->data)[i * N + j] = (float)v;
        }
    return TP_OK;
}

/* Reads a 2-value INTS attribute (Conv's strides, dilations) or the default */
static tp_status pair_attr(ctx *c, const char *name, int n, int64_t def, int64_t *v) {
    const tp_onnx_attr *a = attr(c, name);
    for (int i = 0; i < n; i++) v[i] = def;
    if (!a) return TP_OK;
    if (a->type != TP_ONNX_ATTR_INTS || (int)a->n != n)
        return nfail(c, TP_ERR_UNSUPPORTED, "'%s' must hold %d values for a 2-D convolution", name, n);
    for (int i = 0; i < n; i++) v[i] = a->ints[i];
    return TP_OK;
}

/* Conv (opset 11): 2-D, group 1, auto_pad NOTSET or VALID; pads (top, left, bottom, right).
 * out = floor((in + pad_begin + pad_end - ((k - 1) dilation + 1)) / stride) + 1 */
static tp_status op_conv(ctx *c) {
    const tensor *x, *w, *bias = NULL;
    tp_status s = need(c, 0, &x, TP_ONNX_FLOAT, 0, 0);
    if (!s) s = need(c, 1, &w, TP_ONNX_FLOAT, 0, 0);
    if (!s && has_in(c, 2)) s = need(c, 2, &bias, TP_ONNX_FLOAT, 0, 0);
    if (s) return s;
    if (x->ndim != 4 || w->ndim != 4) return nfail(c, TP_ERR_UNSUPPORTED, "only 2-D convolutions (4-D X and W)");
    const tp_onnx_attr *ap = attr(c, "auto_pad");
    if (ap && strcmp(ap->s ? ap->s : "", "NOTSET") && strcmp(ap->s ? ap->s : "", "VALID"))
        return nfail(c, TP_ERR_UNSUPPORTED, "auto_pad %s", ap->s ? ap->s : "");
    if (attr_i(c, "group", 1) != 1) return nfail(c, TP_ERR_UNSUPPORTED, "group %lld", (long long)attr_i(c, "group", 1));
    int64_t st[2], dl[2], pd[4], ks[2];
    if ((s = pair_attr(c, "strides", 2, 1, st)) || (s = pair_attr(c, "dilations", 2, 1, dl)) ||
        (s = pair_attr(c, "pads", 4, 0, pd)) || (s = pair_attr(c, "kernel_shape", 2, -1, ks)))
        return s;
    const int64_t Nb = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    const int64_t M = w->dims[0], kh = w->dims[2], kw = w->dims[3];
    if (w->dims[1] != C)
        return nfail(c, TP_ERR_SHAPE, "W has %lld input channels, X %lld", (long long)w->dims[1], (long long)C);
    if ((ks[0] >= 0 && ks[0] != kh) || (ks[1] >= 0 && ks[1] != kw))
        return nfail(c, TP_ERR_SHAPE, "kernel_shape is not W's");
    if (bias && (bias->ndim != 1 || bias->dims[0] != M))
        return nfail(c, TP_ERR_SHAPE, "B must be (%lld)", (long long)M);
    for (int i = 0; i < 2; i++)
        if (st[i] < 1 || dl[i] < 1 || pd[i] < 0 || pd[i + 2] < 0)
            return nfail(c, TP_ERR_UNSUPPORTED, "strides, dilations must be >= 1 and pads >= 0");
    const int64_t OH = (H + pd[0] + pd[2] - ((kh - 1) * dl[0] + 1)) / st[0] + 1;
    const int64_t OW = (W + pd[1] + pd[3] - ((kw - 1) * dl[1] + 1)) / st[1] + 1;
    if (OH < 1 || OW < 1) return nfail(c, TP_ERR_SHAPE, "the kernel does not fit the padded input");
    int64_t d[4] = {Nb, M, OH, OW};
    tensor *y;
    if ((s = mk(c, 0, TP_ONNX_FLOAT, 4, d, &y))) return s;
    const float *X = x->data, *Wt = w->data;
    float *Y = y->data;
    for (int64_t n = 0; n < Nb; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = bias ? ((const float *)bias->data)[m] : 0.0;
                    for (int64_t ci = 0; ci < C; ci++)
                        for (int64_t i = 0; i < kh; i++) {
                            const int64_t ih = oh * st[0] - pd[0] + i * dl[0];
                            if (ih < 0 || ih >= H) continue;
                            for (int64_t j = 0; j < kw; j++) {
                                const int64_t iw = ow * st[1] - pd[1] + j * dl[1];
                                if (iw < 0 || iw >= W) continue;
                                acc += (double)X[((n * C + ci) * H + ih) * W + iw] *
                                       Wt[((m * C + ci) * kh + i) * kw + j];
                            }
                        }
                    Y[((n * M + m) * OH + oh) * OW + ow] = (float)acc;
                }
    return TP_OK;
}

/* ---- normalizations ------------------------------------------------------------------------------------------ */

/* LayerNormalization (opset 17): over dimensions axis.. of X, Y = (X - mean) / sqrt(var + epsilon) * Scale + B with
 * Scale and B broadcast to those dimensions; optional outputs Mean and InvStdDev of shape X[:axis] + 1s. stash_type 1
 * (float32) only; the statistics are accumulated in double, which float32's stash rounds less exactly. */
static tp_status op_layernorm(ctx *c) {
    const tensor *x, *sc, *bi = NULL;
    tp_status s = need(c, 0, &x, TP_ONNX_FLOAT, 0, 0);
    if (!s) s = need(c, 1, &sc, TP_ONNX_FLOAT, 0, 0);
    if (!s && has_in(c, 2)) s = need(c, 2, &bi, TP_ONNX_FLOAT, 0, 0);
    if (s) return s;
    if (attr_i(c, "stash_type", 1) != 1)
        return nfail(c, TP_ERR_UNSUPPORTED, "stash_type %lld (1, float32, is run)",
                     (long long)attr_i(c, "stash_type", 1));
    int a;
    if ((s = axis_of(c, attr_i(c, "axis", -1), x->ndim, &a))) return s;
    const double eps = attr_f(c, "epsilon", 1e-5);
    const int nn = x->ndim - a;
    const int64_t rows = prod(x->dims, 0, a), n = prod(x->dims, a, x->ndim);
    const tensor *sb[2] = {sc, bi};
    int64_t st[2][MAXD];
    for (int k = 0; k < 2; k++) {
        if (!sb[k]) continue;
        const tensor *t = sb[k];
        int ok = t->ndim <= nn;
        for (int i = 0; ok && i < t->ndim; i++) ok = t->dims[i] == 1 || t->dims[i] == x->dims[x->ndim - t->ndim + i];
        if (!ok) return nfail(c, TP_ERR_SHAPE, "%s does not broadcast to the normalized dimensions", k ? "B" : "Scale");
        bstrides(nn, t->ndim, t->dims, 1, st[k]);
    }
    tensor *y, *mo = NULL, *io = NULL;
    int64_t sd[MAXD];
    memcpy(sd, x->dims, sizeof sd);
    for (int i = a; i < x->ndim; i++) sd[i] = 1;
    if ((s = mk(c, 0, TP_ONNX_FLOAT, x->ndim, x->dims, &y))) return s;
    if (has_out(c, 1) && (s = mk(c, 1, TP_ONNX_FLOAT, x->ndim, sd, &mo))) return s;
    if (has_out(c, 2) && (s = mk(c, 2, TP_ONNX_FLOAT, x->ndim, sd, &io))) return s;
    for (int64_t r = 0; r < rows; r++) {
        const float *X = (const float *)x->data + r * n;
        float *Y = (float *)y->data + r * n;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++) mean += X[i];
        mean /= (double)n;
        for (int64_t i = 0; i < n; i++) var += (X[i] - mean) * (X[i] - mean);
        const double inv = 1.0 / sqrt(var / (double)n + eps);
        iter it;
        it_init(&it, nn, x->dims + a);
        memcpy(it.st[0], st[0], sizeof st[0]);
        if (bi) memcpy(it.st[1], st[1], sizeof st[1]);
        for (int64_t i = 0; i < n; i++, it_next(&it)) {
            double v = (X[i] - mean) * inv * ((const float *)sc->data)[it.off[0]];
            if (bi) v += ((const float *)bi->data)[it.off[1]];
            Y[i] = (float)v;
        }
        if (mo) ((float *)mo->data)[r] = (float)mean;
        if (io) ((float *)io->data)[r] = (float)inv;
    }
    return TP_OK;
}

/* Softmax (opset 13): along one axis (default -1), exp(x - max) / sum; the sum in double */
static tp_status op_softmax(ctx *c) {
    const tensor *x;
    tensor *y;
    tp_status s = need(c, 0, &x, TP_ONNX_FLOAT, 0, 0);
    int a;
    if (!s) s = axis_of(c, attr_i(c, "axis", -1), x->ndim, &a);
    if (!s) s = mk(c, 0, TP_ONNX_FLOAT, x->ndim, x->dims, &y);
    if (s) return s;
    const int64_t outer = prod(x->dims, 0, a), n = x->dims[a], inner = prod(x->dims, a + 1, x->ndim);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in_ = 0; in_ < inner; in_++) {
            const float *X = (const float *)x->data + o * n * inner + in_;
            float *Y = (float *)y->data + o * n * inner + in_;
            float mx = -INFINITY;
            for (int64_t i = 0; i < n; i++) mx = X[i * inner] > mx ? X[i * inner] : mx;
            double sum = 0;
            for (int64_t i = 0; i < n; i++) sum += Y[i * inner] = expf(X[i * inner] - mx);
            for (int64_t i = 0; i < n; i++) Y[i * inner] = (float)(Y[i * inner] / sum);
        }
    return TP_OK;
}

/* ---- quantization -------------------------------------------------------------------------------------------- */

/* The per-tensor or per-axis scale (and zero point) layout shared by QuantizeLinear and DequantizeLinear:
 * *inner and *ch give element i's scale index (i / inner) % ch; a one-element scale is per-tensor. */
static tp_status q_layout(ctx *c, const tensor *x, const tensor *sc, const tensor *zp, int64_t *inner, int64_t *ch) {
    if (attr_i(c, "block_size", 0) != 0) return nfail(c, TP_ERR_UNSUPPORTED, "blocked quantization (block_size)");
    if (zp && (zp->ndim != sc->ndim || zp->numel != sc->numel))
        return nfail(c, TP_ERR_SHAPE, "zero point's shape is not the scale's");
    *inner = 1, *ch = 1;
    if (sc->numel == 1 && sc->ndim <= 1) return TP_OK;
    int a;
    tp_status s = axis_of(c, attr_i(c, "axis", 1), x->ndim, &a);
    if (s) return s;
    if (sc->ndim != 1 || sc->dims[0] != x->dims[a])
        return nfail(c, TP_ERR_SHAPE, "scale must be 1 value or 1-D of axis %d's size", a);
    *inner = prod(x->dims, a + 1, x->ndim), *ch = x->dims[a];
    return TP_OK;
}

/* DequantizeLinear (opset 19): y = (x - zero_point) * scale in float32; a float8 zero point must be 0 */
/* A float value through unchanged (the activations' Q/DQ switched off: tp_onnx_run_args.activation_qdq_off) */
static tp_status pass_through(ctx *c, const tensor *x) {
    tensor *y;
    tp_status s = mk(c, 0, TP_ONNX_FLOAT, x->ndim, x->dims, &y);
    if (!s) memcpy(y->data, x->data, sizeof(float) * (size_t)x->numel);
    return s;
}

static tp_status op_dequantize(ctx *c) {
    const tensor *x, *sc, *zp = NULL;
    if (c->a->activation_qdq_off && in(c, 0) && in(c, 0)->type == TP_ONNX_FLOAT) return pass_through(c, in(c, 0));
    tp_status s = need(c, 0, &x, TP_ONNX_FLOAT8E4M3FN, TP_ONNX_INT8, TP_ONNX_UINT8);
    if (!s) s = need(c, 1, &sc, TP_ONNX_FLOAT, 0, 0);
    if (!s && has_in(c, 2)) s = need(c, 2, &zp, x->type, 0, 0);
    int64_t inner, ch;
    tensor *y;
    if (!s) s = q_layout(c, x, sc, zp, &inner, &ch);
    if (!s) s = mk(c, 0, TP_ONNX_FLOAT, x->ndim, x->dims, &y);
    if (s) return s;
    const int f8 = x->type == TP_ONNX_FLOAT8E4M3FN;
    for (int64_t i = 0; zp && f8 && i < zp->numel; i++)
        if (flt_at(zp, i) != 0.0f) return nfail(c, TP_ERR_UNSUPPORTED, "a nonzero float8 zero point");
    for (int64_t i = 0; i < x->numel; i++) {
        const int64_t q = (i / inner) % ch;
        const float v = f8 ? flt_at(x, i) : (float)(int_at(x, i) - (zp ? int_at(zp, q) : 0));
        ((float *)y->data)[i] = v * ((const float *)sc->data)[q];
    }
    return TP_OK;
}

/* QuantizeLinear (opset 19): y = saturate(x / scale + zero_point), x / scale in float32 (the scale's type) rounded
 * to nearest even; the zero point's type is y's (uint8 without one). float8e4m3fn: saturate 1 clamps to +-448
 * (tprof's RNE encoder, dtype.h); saturate 0 (out of range to NaN) is not run. */
static tp_status op_quantize(ctx *c) {
    const tensor *x, *sc, *zp = NULL;
    tp_status s = need(c, 0, &x, TP_ONNX_FLOAT, 0, 0);
    if (!s && c->a->activation_qdq_off) return pass_through(c, x);
    if (!s) s = need(c, 1, &sc, TP_ONNX_FLOAT, 0, 0);
    if (!s && has_in(c, 2)) s = need(c, 2, &zp, TP_ONNX_FLOAT8E4M3FN, TP_ONNX_INT8, TP_ONNX_UINT8);
    if (s) return s;
    if (attr(c, "output_dtype")) return nfail(c, TP_ERR_UNSUPPORTED, "attribute output_dtype");
    const int ty = zp ? zp->type : TP_ONNX_UINT8, f8 = ty == TP_ONNX_FLOAT8E4M3FN;
    if (f8 && attr_i(c, "saturate", 1) != 1) return nfail(c, TP_ERR_UNSUPPORTED, "saturate 0");
    int64_t inner, ch;
    tensor *y;
    if ((s = q_layout(c, x, sc, zp, &inner, &ch)) || (s = mk(c, 0, ty, x->ndim, x->dims, &y))) return s;
    for (int64_t i = 0; zp && f8 && i < zp->numel; i++)
        if (flt_at(zp, i) != 0.0f) return nfail(c, TP_ERR_UNSUPPORTED, "a nonzero float8 zero point");
    const float lo = ty == TP_ONNX_INT8 ? -128.0f : 0.0f, hi = ty == TP_ONNX_INT8 ? 127.0f : 255.0f;
    for (int64_t i = 0; i < x->numel; i++) {
        const int64_t q = (i / inner) % ch;
        const float v = ((const float *)x->data)[i] / ((const float *)sc->data)[q];
        if (f8) {
            ((uint8_t *)y->data)[i] = tp_f32_to_e4m3(v);
            continue;
        }
        float r = nearbyintf(v) + (float)(zp ? int_at(zp, q) : 0); /* the default rounding mode: to nearest even */
        r = isnan(r) ? 0.0f : r < lo ? lo : r > hi ? hi : r;
        if (ty == TP_ONNX_INT8) ((int8_t *)y->data)[i] = (int8_t)r;
        else ((uint8_t *)y->data)[i] = (uint8_t)r;
    }
    return TP_OK;
}

/* ---- the graph ----------------------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    op_fn fn;
} OPS[] = {
    {"Add", op_add}, {"And", op_and}, {"Cast", op_cast}, {"Concat", op_concat}, {"Constant", op_constant},
    {"ConstantOfShape", op_constant_of_shape}, {"Conv", op_conv}, {"Cos", op_cos}, {"CumSum", op_cumsum},
    {"DequantizeLinear", op_dequantize}, {"Div", op_div}, {"Equal", op_equal}, {"Erf", op_erf},
    {"Expand", op_expand}, {"Gather", op_gather}, {"GatherND", op_gather_nd}, {"Gemm", op_gemm},
    {"Identity", op_identity}, {"IsNaN", op_isnan}, {"LayerNormalization", op_layernorm},
    {"LessOrEqual", op_less_or_equal}, {"MatMul", op_matmul}, {"Max", op_max}, {"Mul", op_mul}, {"Neg", op_neg},
    {"Not", op_not}, {"Pow", op_pow}, {"QuantizeLinear", op_quantize}, {"Range", op_range},
    {"Reciprocal", op_reciprocal}, {"ReduceMean", op_reduce_mean}, {"Relu", op_relu}, {"Reshape", op_reshape},
    {"Shape", op_shape}, {"Sigmoid", op_sigmoid}, {"Sin", op_sin}, {"Slice", op_slice}, {"Softmax", op_softmax},
    {"Split", op_split}, {"Sqrt", op_sqrt}, {"Squeeze", op_squeeze}, {"Sub", op_sub}, {"Tanh", op_tanh}, {"Transpose", op_transpose},
    {"Unsqueeze", op_unsqueeze}, {"Where", op_where},
};

/* Binds the fed inputs: float32, the declared shape with every symbolic dimension bound, the element count given */
static tp_status bind_inputs(ctx *c) {
    const tp_onnx_run_args *a = c->a;
    int used[64] = {0};
    if (a->n_dims < 0 || a->n_dims > 64)
        return tp_fail(c->err, TP_ERR_ARG, "onnx run: %d dimension bindings", a->n_dims);
    for (int i = 0; i < tp_onnx_n_inputs(c->m); i++) {
        const tp_onnx_value *v = tp_onnx_input(c->m, i);
        if (v->elem_type != TP_ONNX_FLOAT && v->elem_type != TP_ONNX_INT64)
            return tp_fail(c->err, TP_ERR_UNSUPPORTED, "onnx run: input '%s' is %s; float32 and int64 inputs are fed",
                           v->name, tp_onnx_elem_name(v->elem_type));
        if (v->ndim < 0)
            return tp_fail(c->err, TP_ERR_UNSUPPORTED, "onnx run: input '%s' has no declared shape", v->name);
        tensor *t = &c->vals[lookup(c, v->name)];
        t->type = TP_ONNX_FLOAT, t->ndim = v->ndim, t->numel = 1;
        for (int d = 0; d < v->ndim; d++) {
            int64_t x = v->dims[d];
            if (x < 0) {
                int k = -1;
                for (int j = 0; j < a->n_dims && v->dim_param[d]; j++)
                    if (a->dims[j].name && !strcmp(a->dims[j].name, v->dim_param[d])) k = j;
                if (k < 0)
                    return tp_fail(c->err, TP_ERR_ARG, "onnx run: input '%s' dimension %d ('%s') is not bound", v->name,
                                   d, v->dim_param[d] ? v->dim_param[d] : "unnamed");
                used[k] = 1, x = a->dims[k].value;
                if (x < 0 || x > MAX_NUMEL)
                    return tp_fail(c->err, TP_ERR_ARG, "onnx run: '%s' bound to %lld", a->dims[k].name, (long long)x);
            }
            t->dims[d] = x;
            t->numel = t->numel > MAX_NUMEL / (x ? x : 1) ? MAX_NUMEL + 1 : t->numel * x;
        }
        if (!a->inputs || !a->inputs[i] || !a->input_numel || a->input_numel[i] != t->numel)
            return tp_fail(c->err, TP_ERR_ARG, "onnx run: input '%s' needs %lld float32 values, %lld given", v->name,
                           (long long)t->numel,
                           a->input_numel && a->inputs && a->inputs[i] ? (long long)a->input_numel[i] : 0LL);
        t->data = (void *)a->inputs[i]; /* read, never written */
        if (v->elem_type == TP_ONNX_INT64) { /* token ids and the like, given as float32 integers (tprof's inputs) */
            int64_t *q = malloc(sizeof(int64_t) * (size_t)(t->numel ? t->numel : 1));
            if (!q) return tp_fail(c->err, TP_ERR_OOM, "out of host memory");
            for (int64_t k = 0; k < t->numel; k++) {
                const float f = a->inputs[i][k];
                if (!(f == floorf(f) && fabsf(f) <= 16777216.0f)) {
                    free(q);
                    return tp_fail(c->err, TP_ERR_ARG, "onnx run: input '%s' is int64 and value %lld is %g, not an "
                                   "integer of at most 2^24", v->name, (long long)k, (double)f);
                }
                q[k] = (int64_t)f;
            }
            t->type = TP_ONNX_INT64, t->data = q, t->owned = 1;
        }
    }
    for (int j = 0; j < a->n_dims; j++)
        if (!used[j])
            return tp_fail(c->err, TP_ERR_ARG, "onnx run: binding '%s' names no symbolic dimension of the inputs",
                           a->dims[j].name ? a->dims[j].name : "(null)");
    return TP_OK;
}

/* Initializers: their bytes in place when aligned for their type, else a copy (they may sit at any offset inside the
 * protobuf buffer, and a misaligned float load is undefined behaviour) */
static tp_status bind_initializers(ctx *c) {
    for (int i = 0; i < tp_onnx_n_initializers(c->m); i++) {
        const tp_onnx_tensor *src = tp_onnx_initializer(c->m, i);
        tensor *t = &c->vals[lookup(c, src->name)];
        if (t->type) continue; /* a fed input of the same name overrides its default */
        const int e = esize(src->elem_type);
        if (e <= 0) continue; /* 4-bit: an error where a node reads it */
        t->type = src->elem_type, t->ndim = src->ndim, t->numel = src->numel;
        memcpy(t->dims, src->dims, sizeof t->dims);
        if ((uintptr_t)src->data % (uintptr_t)e == 0) {
            t->data = (void *)src->data;
            continue;
        }
        if (!(t->data = malloc(src->nbytes ? src->nbytes : 1)))
            return tp_fail(c->err, TP_ERR_OOM, "onnx run: out of memory copying '%s'", src->name);
        memcpy(t->data, src->data, src->nbytes);
        t->owned = 1;
    }
    return TP_OK;
}

/* The slots and each one's last reader */
static tp_status make_slots(ctx *c) {
    const tp_onnx_model *m = c->m;
    int n = tp_onnx_n_inputs(m) + tp_onnx_n_initializers(m);
    for (int i = 0; i < tp_onnx_n_nodes(m); i++) n += tp_onnx_node_at(m, i)->n_out;
    for (c->cap = 16; c->cap < 2 * (size_t)n; c->cap *= 2) {}
    c->names = calloc((size_t)n + 1, sizeof *c->names);
    c->vals = calloc((size_t)n + 1, sizeof *c->vals);
    c->last_use = calloc((size_t)n + 1, sizeof *c->last_use);
    c->table = calloc(c->cap, sizeof *c->table);
    if (!c->names || !c->vals || !c->last_use || !c->table)
        return tp_fail(c->err, TP_ERR_OOM, "onnx run: out of memory");
    for (int i = 0; i < tp_onnx_n_inputs(m); i++) add_slot(c, tp_onnx_input(m, i)->name);
    for (int i = 0; i < tp_onnx_n_initializers(m); i++) add_slot(c, tp_onnx_initializer(m, i)->name);
    for (int i = 0; i < tp_onnx_n_nodes(m); i++) {
        const tp_onnx_node *nd = tp_onnx_node_at(m, i);
        for (int k = 0; k < nd->n_out; k++)
            if (nd->out[k][0]) add_slot(c, nd->out[k]);
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k][0]) c->last_use[lookup(c, nd->in[k])] = i;
    }
    for (int i = 0; i < tp_onnx_n_outputs(m); i++) {
        const int s = lookup(c, tp_onnx_output(m, i)->name);
        if (s < 0)
            return tp_fail(c->err, TP_ERR_FORMAT, "onnx run: graph output '%s' is produced by nothing",
                           tp_onnx_output(m, i)->name);
        c->last_use[s] = INT32_MAX;
    }
    return TP_OK;
}

static tp_status run_nodes(ctx *c) {
    for (int i = 0; i < tp_onnx_n_nodes(c->m); i++) {
        c->node_i = i, c->node = tp_onnx_node_at(c->m, i);
        const char *dom = c->node->domain ? c->node->domain : "";
        if (*dom && strcmp(dom, "ai.onnx")) return nfail(c, TP_ERR_UNSUPPORTED, "domain '%s' is not run", dom);
        op_fn fn = NULL;
        for (size_t k = 0; k < sizeof OPS / sizeof OPS[0] && !fn; k++)
            if (!strcmp(OPS[k].name, c->node->op_type)) fn = OPS[k].fn;
        if (!fn) return nfail(c, TP_ERR_UNSUPPORTED, "op type not supported by the reference interpreter");
        for (int k = 0; k < c->node->n_in; k++)
            if (has_in(c, k) && !in(c, k)->type)
                return nfail(c, TP_ERR_UNSUPPORTED, "input %d '%s' holds no value tprof reads", k, c->node->in[k]);
        c->bad_attr = NULL;
        tp_status s = fn(c);
        if (s) return s;
        if (c->bad_attr) return nfail(c, TP_ERR_FORMAT, "attribute '%s' has the wrong type", c->bad_attr);
        for (int k = 0; k < c->node->n_in; k++) /* free what no later node reads */
            if (has_in(c, k) && c->last_use[lookup(c, c->node->in[k])] == i) drop(&c->vals[lookup(c, c->node->in[k])]);
    }
    return TP_OK;
}

/* Output i as float32, checked against its declared shape */
static tp_status take_output(ctx *c, int i, tp_onnx_result *r) {
    const tp_onnx_value *v = tp_onnx_output(c->m, i);
    const tensor *t = &c->vals[lookup(c, v->name)];
    if (t->type != TP_ONNX_FLOAT)
        return tp_fail(c->err, TP_ERR_UNSUPPORTED, "onnx run: output '%s' is %s; float32 outputs are returned", v->name,
                       tp_onnx_elem_name(t->type));
    int ok = v->ndim < 0 || v->ndim == t->ndim;
    for (int d = 0; ok && v->ndim > 0 && d < v->ndim; d++) {
        int64_t want = v->dims[d];
        for (int j = 0; want < 0 && v->dim_param[d] && j < c->a->n_dims; j++)
            if (!strcmp(c->a->dims[j].name, v->dim_param[d])) want = c->a->dims[j].value;
        ok = want < 0 || want == t->dims[d];
    }
    if (!ok)
        return tp_fail(c->err, TP_ERR_SHAPE, "onnx run: output '%s' came out of another shape than declared", v->name);
    r->data = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (!r->data) return tp_fail(c->err, TP_ERR_OOM, "onnx run: out of memory");
    if (t->numel) memcpy(r->data, t->data, (size_t)t->numel * sizeof(float));
    r->ndim = t->ndim, r->numel = t->numel;
    memcpy(r->dims, t->dims, sizeof r->dims);
    return TP_OK;
}

tp_status tp_onnx_run(const tp_onnx_model *m, const tp_onnx_run_args *args, int n_out, tp_onnx_result *out,
                      tp_error *err) {
    if (!m || !args || !out || n_out < 1 || n_out > tp_onnx_n_outputs(m))
        return tp_fail(err, TP_ERR_ARG, "onnx run: %d outputs asked, the graph has %d", n_out,
                       m ? tp_onnx_n_outputs(m) : 0);
    memset(out, 0, sizeof *out * (size_t)n_out);
    ctx c = {.m = m, .a = args, .err = err, .opset = tp_onnx_opset(m, "")};
    if (c.opset < 13)
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "onnx run: default-domain opset %lld; the interpreter follows opset 13 and later",
                       (long long)c.opset);
    tp_status s = make_slots(&c);
    if (!s) s = bind_inputs(&c);
    if (!s) s = bind_initializers(&c);
    if (!s) s = run_nodes(&c);
    for (int i = 0; !s && i < n_out; i++) s = take_output(&c, i, &out[i]);
    if (s) tp_onnx_results_free(out, n_out);
    for (int i = 0; c.vals && i < c.n_slots; i++) drop(&c.vals[i]);
    free(c.names), free(c.vals), free(c.last_use), free(c.table);
    return s;
}

void tp_onnx_results_free(tp_onnx_result *out, int n) {
    for (int i = 0; out && i < n; i++) {
        free(out[i].data);
        memset(&out[i], 0, sizeof out[i]);
    }
}
