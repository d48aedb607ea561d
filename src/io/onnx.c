/* onnx.c: an ONNX model read through protobuf-c and checked (contract in onnx.h). The unpacked message stays alive
 * behind the view: names and inline bytes point into it; what the reader makes (external data, typed fields packed
 * to bytes, NUL-terminated strings) is owned by the model's block list. */
#include "io/onnx.h"
#include "core/files.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx/onnx.pb-c.h"

struct tp_onnx_model {
    const char *path;
    Onnx__ModelProto *pb;
    char producer[160];
    tp_onnx_value *in, *out;
    int n_in, n_out;
    tp_onnx_tensor *init;
    int n_init;
    tp_onnx_node *nodes;
    int n_nodes;
    void **blocks; /* everything the reader allocated for the view */
    int n_blocks, cap_blocks;
};

/* ---- small helpers ---------------------------------------------------------------------------------------- */

/* protobuf-c leaves an absent proto2 string field NULL: every string the reader touches goes through S */
static const char *S(const char *s) { return s ? s : ""; }

static void *own(tp_onnx_model *m, size_t n) {
    if (m->n_blocks == m->cap_blocks) {
        const int cap = m->cap_blocks ? 2 * m->cap_blocks : 64;
        void **b = realloc(m->blocks, sizeof(void *) * (size_t)cap);
        if (!b) return NULL;
        m->blocks = b, m->cap_blocks = cap;
    }
    void *p = calloc(1, n ? n : 1);
    if (p) m->blocks[m->n_blocks++] = p;
    return p;
}

int tp_onnx_elem_bytes(int t) {
    switch (t) {
    case TP_ONNX_FLOAT: case TP_ONNX_INT32: return 4;
    case TP_ONNX_INT64: return 8;
    case TP_ONNX_FLOAT16: case TP_ONNX_BFLOAT16: return 2;
    case TP_ONNX_UINT8: case TP_ONNX_INT8: case TP_ONNX_BOOL: case TP_ONNX_FLOAT8E4M3FN: case TP_ONNX_FLOAT8E5M2: return 1;
    case TP_ONNX_FLOAT4E2M1: return 0;
    default: return -1;
    }
}

const char *tp_onnx_elem_name(int t) {
    switch (t) {
    case TP_ONNX_FLOAT: return "float32";
    case TP_ONNX_UINT8: return "uint8";
    case TP_ONNX_INT8: return "int8";
    case TP_ONNX_INT32: return "int32";
    case TP_ONNX_INT64: return "int64";
    case TP_ONNX_BOOL: return "bool";
    case TP_ONNX_FLOAT16: return "float16";
    case TP_ONNX_BFLOAT16: return "bfloat16";
    case TP_ONNX_FLOAT8E4M3FN: return "float8e4m3fn";
    case TP_ONNX_FLOAT8E5M2: return "float8e5m2";
    case TP_ONNX_FLOAT4E2M1: return "float4e2m1";
    case 11: return "float64 (not read by tprof)";
    case 8: return "string (not read by tprof)";
    default: return "an element type tprof does not read";
    }
}

/* A decimal string of at most 18 digits (external data's offset and length); -1 otherwise. */
static int64_t decimal(const char *s) {
    if (!s || !*s || strlen(s) > 18) return -1;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

/* An FNV-1a set of names (value names of the graph), open addressing; cap a power of two. */
typedef struct {
    const char **k;
    size_t cap;
} name_set;

static uint64_t fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}
/* 1 when s was added, 0 when it was there already */
static int set_add(name_set *t, const char *s) {
    for (size_t i = fnv(s) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (!t->k[i]) {
            t->k[i] = s;
            return 1;
        }
        if (strcmp(t->k[i], s) == 0) return 0;
    }
}
static int set_has(const name_set *t, const char *s) {
    for (size_t i = fnv(s) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (!t->k[i]) return 0;
        if (strcmp(t->k[i], s) == 0) return 1;
    }
}

/* ---- tensors ---------------------------------------------------------------------------------------------- */

/* Reads t's external bytes (n of them) into a block of m: the keys ExternalData.md defines, the location relative
 * and without "..", from the model's folder, offset + n within the file. */
static tp_status read_external(tp_onnx_model *m, const Onnx__TensorProto *t, const char *what, size_t n, void **out,
                               tp_error *err) {
    const char *loc = NULL;
    int64_t off = 0, len = -1;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const char *k = S(t->external_data[i]->key), *v = S(t->external_data[i]->value);
        if (strcmp(k, "location") == 0) loc = v;
        else if (strcmp(k, "offset") == 0) {
            if ((off = decimal(v)) < 0)
                return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: external data offset '%.40s' is not a "
                                    "non-negative decimal integer", what, v);
        } else if (strcmp(k, "length") == 0) {
            if ((len = decimal(v)) < 0)
                return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: external data length '%.40s' is not a "
                                    "non-negative decimal integer", what, v);
        } else if (strcmp(k, "checksum") != 0 && strcmp(k, "basepath") != 0)
            return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: unknown external data key '%.40s' (known: "
                                "location, offset, length, checksum, basepath)", what, k);
    }
    if (!loc || !*loc)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: external data without a location", what);
    if (loc[0] == '/' || strstr(loc, "\\"))
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: external data location '%.80s' is not a relative "
                            "POSIX path (onnx docs/ExternalData.md)", what, loc);
    for (const char *c = loc; *c;) { /* no ".." component */
        const char *e = strchr(c, '/');
        const size_t l = e ? (size_t)(e - c) : strlen(c);
        if (l == 2 && c[0] == '.' && c[1] == '.')
            return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: external data location '%.80s' leaves the model's "
                                "folder ('..' is not allowed: onnx docs/ExternalData.md)", what, loc);
        c += l + (e ? 1 : 0);
    }
    if (len >= 0 && (uint64_t)len != n)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: external data length %lld, its shape and type make "
                            "%zu bytes", what, (long long)len, n);
    const char *slash = strrchr(m->path, '/');
    const size_t dl = slash ? (size_t)(slash - m->path + 1) : 0;
    char *file = own(m, dl + strlen(loc) + 1);
    if (!file) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    memcpy(file, m->path, dl);
    strcpy(file + dl, loc);
    tp_error fe = {0};
    FILE *f = tp_input_open(file, "the external data file", &fe);
    if (!f) return tp_fail_path(err, TP_ERR_IO, m->path, "%s: %s", what, fe.msg);
    struct stat sb;
    tp_status st = TP_OK;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode))
        st = tp_fail_path(err, TP_ERR_IO, m->path, "%s: external data file %s is not a regular file", what, file);
    else if ((uint64_t)off > (uint64_t)sb.st_size || n > (uint64_t)sb.st_size - (uint64_t)off)
        st = tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: external data bytes %lld..%lld lie past the end of %s "
                          "(%lld bytes)", what, (long long)off, (long long)off + (long long)n, file,
                          (long long)sb.st_size);
    void *buf = st ? NULL : own(m, n);
    if (!st && !buf) st = tp_fail(err, TP_ERR_OOM, "out of host memory for %s (%zu bytes)", what, n);
    if (!st && (fseeko(f, (off_t)off, SEEK_SET) != 0 || fread(buf, 1, n, f) != n))
        st = tp_fail_path(err, TP_ERR_IO, m->path, "%s: reading %zu bytes of %s at %lld failed", what, n, file,
                          (long long)off);
    fclose(f);
    *out = buf;
    return st;
}

/* Packs a typed int32_data field (one value per element) into n elements of eb bytes each, checking each value
 * fits (16-bit types: their bit patterns; 8-bit and bool: the byte). */
static tp_status pack_int32(tp_onnx_model *m, const Onnx__TensorProto *t, const char *what, int eb, int64_t numel,
                            void **out, tp_error *err) {
    unsigned char *b = own(m, (size_t)numel * (size_t)eb);
    if (!b) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    const int signed8 = t->data_type == TP_ONNX_INT8;
    for (int64_t i = 0; i < numel; i++) {
        const int32_t v = t->int32_data[i];
        const int ok = eb == 2 ? v >= 0 && v <= 0xFFFF : signed8 ? v >= -128 && v <= 127 : v >= 0 && v <= 0xFF;
        if (!ok)
            return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: int32_data[%lld] = %d does not fit a %s element",
                                what, (long long)i, v, tp_onnx_elem_name(t->data_type));
        if (eb == 2) b[2 * i] = (unsigned char)(v & 0xFF), b[2 * i + 1] = (unsigned char)(v >> 8);
        else b[i] = (unsigned char)(v & 0xFF);
    }
    *out = b;
    return TP_OK;
}

/* The view of t (an initializer, or a node's constant attribute) with its bytes; what names it in messages. */
static tp_status tensor_view(tp_onnx_model *m, const Onnx__TensorProto *t, const char *what, tp_onnx_tensor *v,
                             tp_error *err) {
    memset(v, 0, sizeof *v);
    v->name = S(t->name);
    if (!t->has_data_type)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: no data_type", what);
    v->elem_type = t->data_type;
    const int eb = tp_onnx_elem_bytes(t->data_type);
    if (eb < 0)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: element type %d (%s)", what, t->data_type,
                            tp_onnx_elem_name(t->data_type));
    if (t->n_dims > TP_ONNX_MAX_DIMS)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: %zu dimensions (tprof reads at most %d)", what,
                            t->n_dims, TP_ONNX_MAX_DIMS);
    v->ndim = (int)t->n_dims;
    int64_t numel = 1;
    for (size_t d = 0; d < t->n_dims; d++) {
        if (t->dims[d] < 0 || (t->dims[d] > 0 && numel > ((int64_t)1 << 50) / t->dims[d]))
            return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: dimension %zu is %lld", what, d,
                                (long long)t->dims[d]);
        v->dims[d] = t->dims[d];
        numel *= t->dims[d];
    }
    v->numel = numel;
    v->nbytes = eb ? (size_t)numel * (size_t)eb : (size_t)(numel + 1) / 2;
    if (t->segment)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: a segmented tensor (not read by tprof)", what);
    void *data = NULL;
    tp_status st = TP_OK;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        st = read_external(m, t, what, v->nbytes, &data, err);
        v->external = 1;
    } else if (t->has_raw_data) {
        if (t->raw_data.len != v->nbytes)
            return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: raw_data holds %zu bytes, its shape and type make "
                                "%zu", what, t->raw_data.len, v->nbytes);
        data = t->raw_data.data;
    } else if (numel == 0) {
        data = NULL;
    } else {
        size_t have = 0;
        const char *field = "";
        switch (t->data_type) {
        case TP_ONNX_FLOAT: have = t->n_float_data, field = "float_data", data = t->float_data; break;
        case TP_ONNX_INT64: have = t->n_int64_data, field = "int64_data", data = t->int64_data; break;
        case TP_ONNX_INT32: have = t->n_int32_data, field = "int32_data", data = t->int32_data; break;
        case TP_ONNX_FLOAT4E2M1:
            return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: float4e2m1 read only from raw_data or external "
                                "data", what);
        default: have = t->n_int32_data, field = "int32_data"; break;
        }
        if (have != (size_t)numel)
            return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: %s holds %zu values, its shape makes %lld%s", what,
                                field, have, (long long)numel, have ? "" : " (no data given)");
        if (!data) st = pack_int32(m, t, what, eb, numel, &data, err);
    }
    v->data = data;
    return st;
}

/* ---- values and nodes ------------------------------------------------------------------------------------- */

static tp_status value_view(tp_onnx_model *m, const Onnx__ValueInfoProto *p, const char *role, tp_onnx_value *v,
                            tp_error *err) {
    memset(v, 0, sizeof *v);
    v->name = S(p->name);
    v->ndim = -1;
    if (!*v->name) return tp_fail_path(err, TP_ERR_FORMAT, m->path, "a graph %s without a name", role);
    if (!p->type || p->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !p->type->tensor_type) return TP_OK;
    const Onnx__TypeProto__Tensor *tt = p->type->tensor_type;
    v->elem_type = tt->has_elem_type ? tt->elem_type : 0;
    if (!tt->shape) return TP_OK;
    if (tt->shape->n_dim > TP_ONNX_MAX_DIMS)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "graph %s '%.80s': %zu dimensions (tprof reads at most %d)",
                            role, v->name, tt->shape->n_dim, TP_ONNX_MAX_DIMS);
    v->ndim = (int)tt->shape->n_dim;
    for (int d = 0; d < v->ndim; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
        v->dims[d] = -1;
        if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (dim->dim_value < 0)
                return tp_fail_path(err, TP_ERR_FORMAT, m->path, "graph %s '%.80s': dimension %d is %lld", role,
                                    v->name, d, (long long)dim->dim_value);
            v->dims[d] = dim->dim_value;
        } else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM) {
            v->dim_param[d] = S(dim->dim_param);
        }
    }
    return TP_OK;
}

static tp_status node_view(tp_onnx_model *m, int idx, const Onnx__NodeProto *p, tp_onnx_node *n, tp_error *err) {
    char what[200];
    snprintf(what, sizeof what, "node %d '%.60s' (%.40s)", idx, S(p->name), S(p->op_type));
    if (!*S(p->op_type))
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "node %d '%.60s': no op_type", idx, S(p->name));
    if (p->n_input > INT_MAX / 2 || p->n_output > INT_MAX / 2 || p->n_attribute > INT_MAX / 2)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: too many inputs, outputs or attributes", what);
    n->name = S(p->name), n->op_type = S(p->op_type), n->domain = S(p->domain);
    n->n_in = (int)p->n_input, n->n_out = (int)p->n_output, n->n_attr = (int)p->n_attribute;
    n->in = (const char *const *)p->input, n->out = (const char *const *)p->output;
    tp_onnx_attr *a = own(m, sizeof *a * p->n_attribute);
    if (!a) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    n->attr = a;
    for (size_t i = 0; i < p->n_attribute; i++) {
        const Onnx__AttributeProto *q = p->attribute[i];
        a[i].name = S(q->name);
        if (!*a[i].name) return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: an attribute without a name", what);
        if (!q->has_type)
            return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: attribute '%.60s' has no type", what, a[i].name);
        switch (q->type) {
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: a[i].type = TP_ONNX_ATTR_FLOAT, a[i].f = q->f; break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: a[i].type = TP_ONNX_ATTR_INT, a[i].i = q->i; break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
            char *s = own(m, q->s.len + 1);
            if (!s) return tp_fail(err, TP_ERR_OOM, "out of host memory");
            if (q->s.len) memcpy(s, q->s.data, q->s.len);
            a[i].type = TP_ONNX_ATTR_STRING, a[i].s = s, a[i].s_len = q->s.len;
            break;
        }
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
            if (!q->t) return tp_fail_path(err, TP_ERR_FORMAT, m->path, "%s: tensor attribute '%.60s' holds no "
                                           "tensor", what, a[i].name);
            tp_onnx_tensor *t = own(m, sizeof *t);
            char tw[260];
            snprintf(tw, sizeof tw, "%s attribute '%.40s'", what, a[i].name);
            if (!t) return tp_fail(err, TP_ERR_OOM, "out of host memory");
            tp_status st = tensor_view(m, q->t, tw, t, err);
            if (st) return st;
            a[i].type = TP_ONNX_ATTR_TENSOR, a[i].t = t;
            break;
        }
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
            a[i].type = TP_ONNX_ATTR_FLOATS, a[i].n = q->n_floats, a[i].floats = q->floats;
            break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
            a[i].type = TP_ONNX_ATTR_INTS, a[i].n = q->n_ints, a[i].ints = q->ints;
            break;
        case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: a[i].type = TP_ONNX_ATTR_STRINGS, a[i].n = q->n_strings; break;
        default: a[i].type = TP_ONNX_ATTR_OTHER; break;
        }
    }
    return TP_OK;
}

/* The spec's order: every node input is a graph input, an initializer or an earlier node's output; each name made
 * once; every graph output made. */
static tp_status check_order(tp_onnx_model *m, const Onnx__GraphProto *g, tp_error *err) {
    size_t total = g->n_input + g->n_initializer + 1;
    for (size_t i = 0; i < g->n_node; i++) total += g->node[i]->n_output;
    name_set s = {NULL, 16};
    while (s.cap < 2 * total) s.cap *= 2;
    if (!(s.k = calloc(s.cap, sizeof *s.k))) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_status st = TP_OK;
    for (size_t i = 0; i < g->n_initializer && !st; i++)
        if (!set_add(&s, S(g->initializer[i]->name)))
            st = tp_fail_path(err, TP_ERR_FORMAT, m->path, "initializer '%.80s' given twice", S(g->initializer[i]->name));
    name_set in = {NULL, s.cap};
    if (!st && !(in.k = calloc(in.cap, sizeof *in.k))) st = tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (size_t i = 0; i < g->n_input && !st; i++) {
        if (!set_add(&in, S(g->input[i]->name)))
            st = tp_fail_path(err, TP_ERR_FORMAT, m->path, "graph input '%.80s' given twice", S(g->input[i]->name));
        set_add(&s, S(g->input[i]->name)); /* an input may name an initializer (a default value, IR < 4) */
    }
    for (size_t i = 0; i < g->n_node && !st; i++) {
        const Onnx__NodeProto *n = g->node[i];
        for (size_t k = 0; k < n->n_input && !st; k++)
            if (*n->input[k] && !set_has(&s, n->input[k]))
                st = tp_fail_path(err, TP_ERR_FORMAT, m->path, "node %zu '%.60s' (%.40s) input '%.80s': not a graph "
                                  "input, an initializer or the output of an earlier node", i, S(n->name), S(n->op_type),
                                  n->input[k]);
        for (size_t k = 0; k < n->n_output && !st; k++)
            if (*n->output[k] && !set_add(&s, n->output[k]))
                st = tp_fail_path(err, TP_ERR_FORMAT, m->path, "node %zu '%.60s' (%.40s) output '%.80s': that name "
                                  "is made twice", i, S(n->name), S(n->op_type), n->output[k]);
    }
    for (size_t i = 0; i < g->n_output && !st; i++)
        if (!set_has(&s, S(g->output[i]->name)))
            st = tp_fail_path(err, TP_ERR_FORMAT, m->path, "graph output '%.80s' is made by no node", S(g->output[i]->name));
    free(s.k);
    free(in.k);
    return st;
}

/* ---- the model -------------------------------------------------------------------------------------------- */

static tp_status build_view(tp_onnx_model *m, tp_error *err) {
    const Onnx__ModelProto *pb = m->pb;
    const Onnx__GraphProto *g = pb->graph;
    if (!g) return tp_fail_path(err, TP_ERR_FORMAT, m->path, "no graph (is it an ONNX model file?)");
    if (!pb->has_ir_version || pb->ir_version < 3)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "ir_version %lld: tprof reads ONNX IR 3 and newer",
                            pb->has_ir_version ? (long long)pb->ir_version : 0LL);
    if (g->n_node > INT_MAX / 2 || g->n_initializer > INT_MAX / 2 || g->n_input > INT_MAX / 2 ||
        g->n_output > INT_MAX / 2)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "too many nodes, initializers, inputs or outputs");
    if (g->n_sparse_initializer)
        return tp_fail_path(err, TP_ERR_FORMAT, m->path, "sparse initializers (not read by tprof)");
    snprintf(m->producer, sizeof m->producer, "%.80s%s%.60s", S(pb->producer_name), *S(pb->producer_version) ? " " : "",
             S(pb->producer_version));
    tp_status st = check_order(m, g, err);
    if (st) return st;
    m->init = own(m, sizeof *m->init * g->n_initializer);
    m->in = own(m, sizeof *m->in * g->n_input);
    m->out = own(m, sizeof *m->out * g->n_output);
    m->nodes = own(m, sizeof *m->nodes * g->n_node);
    if (!m->init || !m->in || !m->out || !m->nodes) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (size_t i = 0; i < g->n_initializer && !st; i++) {
        char what[120];
        snprintf(what, sizeof what, "initializer '%.80s'", S(g->initializer[i]->name));
        if (!*S(g->initializer[i]->name)) st = tp_fail_path(err, TP_ERR_FORMAT, m->path, "initializer %zu has no name", i);
        else st = tensor_view(m, g->initializer[i], what, &m->init[m->n_init++], err);
    }
    for (size_t i = 0; i < g->n_input && !st; i++) {
        if (tp_onnx_find_initializer(m, S(g->input[i]->name))) continue; /* a default value, not fed by the caller */
        st = value_view(m, g->input[i], "input", &m->in[m->n_in++], err);
    }
    for (size_t i = 0; i < g->n_output && !st; i++) st = value_view(m, g->output[i], "output", &m->out[m->n_out++], err);
    for (size_t i = 0; i < g->n_node && !st; i++) st = node_view(m, (int)i, g->node[i], &m->nodes[m->n_nodes++], err);
    return st;
}

tp_status tp_onnx_load(const char *path, tp_onnx_model **out, tp_error *err) {
    *out = NULL;
    FILE *f = tp_input_open(path, "the ONNX file", err);
    if (!f) return err ? err->code : TP_ERR_IO;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return tp_fail_path(err, TP_ERR_IO, path, "not a regular file");
    }
    if (sb.st_size > INT_MAX) {
        fclose(f);
        return tp_fail_path(err, TP_ERR_FORMAT, path, "%lld bytes: one protobuf message holds at most 2 GiB; store "
                            "the weights as external data (onnx docs/ExternalData.md)", (long long)sb.st_size);
    }
    const size_t n = (size_t)sb.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        fclose(f);
        free(buf);
        return buf ? tp_fail_path(err, TP_ERR_IO, path, "read failed") : tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    fclose(f);
    tp_onnx_model *m = calloc(1, sizeof *m);
    char *p = malloc(strlen(path) + 1);
    if (!m || !p) {
        free(buf), free(m), free(p);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    strcpy(p, path);
    m->path = p;
    m->pb = onnx__model_proto__unpack(NULL, n, buf);
    free(buf); /* protobuf-c copies what it keeps */
    tp_status st = m->pb ? build_view(m, err)
                         : tp_fail_path(err, TP_ERR_FORMAT, path, "not an ONNX model: the protobuf message does not "
                                        "parse as a ModelProto (truncated or another file)");
    if (st) {
        tp_onnx_free(m);
        return st;
    }
    *out = m;
    return TP_OK;
}

void tp_onnx_free(tp_onnx_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_blocks; i++) free(m->blocks[i]);
    free(m->blocks);
    if (m->pb) onnx__model_proto__free_unpacked(m->pb, NULL);
    free((void *)m->path);
    free(m);
}

int64_t tp_onnx_ir_version(const tp_onnx_model *m) { return m->pb->ir_version; }

int64_t tp_onnx_opset(const tp_onnx_model *m, const char *domain) {
    const int dflt = !domain || !*domain || strcmp(domain, "ai.onnx") == 0;
    for (size_t i = 0; i < m->pb->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->pb->opset_import[i];
        const char *d = S(o->domain);
        const int od = !*d || strcmp(d, "ai.onnx") == 0;
        if (dflt ? od : strcmp(d, domain) == 0) return o->has_version ? o->version : -1;
    }
    return -1;
}

const char *tp_onnx_producer(const tp_onnx_model *m) { return m->producer; }
int tp_onnx_n_inputs(const tp_onnx_model *m) { return m->n_in; }
const tp_onnx_value *tp_onnx_input(const tp_onnx_model *m, int i) { return i >= 0 && i < m->n_in ? &m->in[i] : NULL; }
int tp_onnx_n_outputs(const tp_onnx_model *m) { return m->n_out; }
const tp_onnx_value *tp_onnx_output(const tp_onnx_model *m, int i) {
    return i >= 0 && i < m->n_out ? &m->out[i] : NULL;
}
int tp_onnx_n_initializers(const tp_onnx_model *m) { return m->n_init; }
const tp_onnx_tensor *tp_onnx_initializer(const tp_onnx_model *m, int i) {
    return i >= 0 && i < m->n_init ? &m->init[i] : NULL;
}
const tp_onnx_tensor *tp_onnx_find_initializer(const tp_onnx_model *m, const char *name) {
    for (int i = 0; i < m->n_init; i++) /* linear: a mapper looks up a few names per node */
        if (strcmp(m->init[i].name, name) == 0) return &m->init[i];
    return NULL;
}
int tp_onnx_n_nodes(const tp_onnx_model *m) { return m->n_nodes; }
const tp_onnx_node *tp_onnx_node_at(const tp_onnx_model *m, int i) {
    return i >= 0 && i < m->n_nodes ? &m->nodes[i] : NULL;
}
const tp_onnx_attr *tp_onnx_node_attr(const tp_onnx_node *n, const char *name) {
    for (int i = 0; i < n->n_attr; i++)
        if (strcmp(n->attr[i].name, name) == 0) return &n->attr[i];
    return NULL;
}
