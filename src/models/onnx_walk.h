/* onnx_walk.h: what the architecture walks of the ONNX import share (src/models only; onnx_import.h is the
 * interface): an index of the file's nodes (each input's producer, a role per node), constants behind names, linears
 * (MatMul + bias Add, or Gemm, their weights possibly through DequantizeLinear), the subgraph between two values, and
 * the final check that every node has a role. One walk per architecture: onnx_vit.c, onnx_decoder.c. */
#ifndef TP_MODELS_ONNX_WALK_H
#define TP_MODELS_ONNX_WALK_H

#include <stdint.h>

#include "io/onnx.h"
#include "models/model.h"
#include "models/onnx_import.h"
#include "tprof.h"

/* A node's role once explained: on the residual stream, in an attention or activation subgraph, shape arithmetic */
enum { R_NONE = 0, R_MAIN, R_ATTN, R_GELU, R_SHAPE };

/* An integer the file computes at run time (a Gather of a Shape), in ow_const_ints's vectors */
#define DYN INT64_MIN

typedef struct {
    const tp_onnx_model *m;
    const char *path;
    int n;
    int **prod;          /* prod[i][k]: the node producing node i's input k, -1 for graph inputs, initializers, "" */
    unsigned char *role; /* R_* per node */
    unsigned char *mark; /* scratch for regions */
    tp_error *err;
} ow_ix;

typedef struct {
    const tp_onnx_tensor *t;
    float scale; /* DequantizeLinear's per-tensor scale; 1 for a float initializer */
    int qtype;   /* the quantized element type, 0 for float */
    int dq;      /* the DequantizeLinear node, -1 */
} ow_wref;

typedef struct {
    int mm, add, q, dq;      /* the MatMul or Gemm, its bias Add (-1: Gemm's own C), the input's Q/DQ pair (-1) */
    ow_wref w;
    const tp_onnx_tensor *b; /* (N) */
    int wt;                  /* 1: the weight is (K, N) (MatMul, Gemm transB 0): transposed into the Linear's */
    int64_t K, N;
    const char *in, *out;    /* the activation before its Q/DQ, and the output after the bias */
    float x_scale;
    int x_type;
} ow_lin;

/* The index over the file's nodes (ow_index_build; ow_index_free) and lookups by value name: the node producing it
 * (-1), its consumers in file order without Shape nodes (which read only the shape), the one consumer of an op type
 * (-1 when none or several). */
const tp_onnx_node *ow_nd(const ow_ix *x, int i);
int ow_is(const ow_ix *x, int i, const char *op);
tp_status ow_fail_node(ow_ix *x, int i, const char *fmt, const char *what);
int ow_producer(const ow_ix *x, const char *v);
int ow_consumers(const ow_ix *x, const char *v, int *out, int max);
int ow_consumer_op(const ow_ix *x, const char *v, const char *op);
const char *ow_unalias(const ow_ix *x, const char *name);
const tp_onnx_tensor *ow_const_tensor(const ow_ix *x, const char *name);
int ow_const_ints(const ow_ix *x, const char *name, int64_t *v, int max, int depth);
int ow_float_type(int e);
int ow_scalar_f32(const ow_ix *x, const char *name, float *f);
int ow_zero_point_ok(const ow_ix *x, const tp_onnx_node *n);
int ow_weight_of(const ow_ix *x, const char *name, ow_wref *w);
int ow_linear_at(const ow_ix *x, int i, int64_t K, int64_t N, ow_lin *L);
int ow_linear_of(const ow_ix *x, const char *v, int64_t K, int64_t N, ow_lin *L);
void ow_mark_linear(ow_ix *x, const ow_lin *L);
int ow_in_list(const char *op, const char *const *ops);
tp_status ow_mark_region(ow_ix *x, const char *a, const char *b, int r, const char *const *ops, const char *what,
                             const char *const *count_ops, int *counts);
int ow_add_of(const ow_ix *x, const char *a, const char *b);
int ow_next_linear(const ow_ix *x, int after, int64_t K, int64_t N, ow_lin *L);
tp_status ow_tensor_f32(ow_ix *x, const tp_onnx_tensor *t, float scale, float *dst);
tp_status ow_set_param(ow_ix *x, tp_params *p, const char *name, const tp_onnx_tensor *t, float scale, int wt);
void ow_note_qdq(tp_onnx_import_info *info, const char *layer, const ow_lin *L);
tp_status ow_set_linear(ow_ix *x, tp_params *p, const char *layer, const ow_lin *L, tp_onnx_import_info *info);
tp_status ow_check_rest(ow_ix *x, const char *const *shape_ops, const char *family, tp_onnx_import_info *info);
tp_status ow_index_build(ow_ix *x);
void ow_index_free(ow_ix *x);

/* The node of op type op reading both values a and b (either order), or -1; a scalar float constant's value, or NAN */
int ow_binop_of(const ow_ix *x, const char *op, const char *a, const char *b);
double ow_scalar_of(const ow_ix *x, const char *name);

/* Room for element n in the array *arr of *cap elements of elt bytes (doubled as it fills); TP_ERR_OOM */
tp_status ow_grow(ow_ix *x, void **arr, int *cap, int n, size_t elt);

/* Every parameter of the family's table given a value by the walk, else TP_ERR_UNSUPPORTED naming the first one */
tp_status ow_check_filled(ow_ix *x, const tp_params *p);

/* The architecture walks: fill m and params (and info's family and summary) from the indexed file whose one input is
 * in and one output out; errors name the node that breaks the pattern. */
tp_status ow_import_vit(ow_ix *x, const tp_onnx_value *in, const tp_onnx_value *out, tp_model *m, tp_params *params,
                        tp_onnx_import_info *info);
tp_status ow_import_decoder(ow_ix *x, const tp_onnx_value *in, const tp_onnx_value *out, tp_model *m,
                            tp_params *params, tp_onnx_import_info *info);

#endif
