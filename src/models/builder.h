/* builder.h: what the model families share to build their parameter tables and graphs (src/models only).
 *
 * A parameter table is built entry by entry with each tensor's initialization kind (the family's own enum, kept
 * beside the table so the family can synthesize values afterwards). A graph is built op by op through a builder
 * that keeps the first failure (a parameter missing from the table) and ignores every later call, so a family's
 * builder reads as the forward pass and checks once at the end. */
#ifndef TP_MODELS_BUILDER_H
#define TP_MODELS_BUILDER_H

#include <stdint.h>

#include "ir/graph.h"
#include "models/model.h"
#include "tprof.h"

typedef struct {
    tp_params *p;
    int *init;  /* per entry: the family's initialization kind */
    int cap;
    int alloc;  /* 0: names and shapes only (data NULL) */
} tp_param_builder;

/* Appends parameter name with shape (d0, .., d[ndim-1]) and initialization kind init; its data allocated (not
 * filled) when b->alloc. Returns 0, or -1 when out of memory (the table stays valid for tp_params_free). */
int tp_pb_add(tp_param_builder *b, const char *name, int init, int ndim, int64_t d0, int64_t d1, int64_t d2,
              int64_t d3);

typedef struct {
    tp_graph *g;
    const tp_params *p;
    tp_error *err;
    tp_status st;       /* the first failure; every helper does nothing once it is set */
    const char *prefix; /* NULL, or prepended to every parameter, op (layer) and output name: a family's graph
                           built as one stage of a pipeline ("vision." + timm's names) */
} tp_graph_builder;

/* The graph value of parameter "<layer>.<suffix>" (suffix NULL: the name is layer), or -1 with b->st set
 * (TP_ERR_SHAPE naming the parameter) when the table lacks it. */
int tp_gb_param(tp_graph_builder *b, const char *layer, const char *suffix);
/* Adds op (its kind and attributes set by the caller) named layer over in[0..n_in) with an output of shape
 * (ndim, shape), named out_name or "<layer>.out"; returns the output value, or -1 once the build has failed. */
int tp_gb_op(tp_graph_builder *b, tp_op *op, const char *layer, const int *in, int n_in, int ndim,
             const int64_t *shape, const char *out_name);
/* Linear "<layer>" with its weight and, when bias, its bias. */
int tp_gb_linear(tp_graph_builder *b, const char *layer, int x, int bias, int ndim, const int64_t *shape,
                 const char *out_name);
/* x + y (same shape (ndim, shape)), a residual add named layer. */
int tp_gb_add(tp_graph_builder *b, const char *layer, int x, int y, int ndim, const int64_t *shape,
              const char *out_name);

/* Appends one GEMM shape (N x K per token) to m->gemms for tprof lint (at most TP_SHAPES_MAX_GEMMS: CHECK). */
void tp_shapes_add_gemm(tp_model_shapes *m, const char *layer, int64_t n, int64_t k, int kept_high);

/* ---- command-line knobs and JSON configurations ---- */

/* s as an integer (or a real) in [lo, hi] into *out: 0, or -1 with TP_ERR_ARG "NAME 'S': expected ..." in err. */
int tp_fam_parse_long(const char *name, const char *s, long lo, long hi, long *out, tp_error *err);
int tp_fam_parse_real(const char *name, const char *s, double lo, double hi, double *out, tp_error *err);

/* Strict readers of a configuration object o (where: its name in messages): the key present (unless optional:
 * then *out is NULL when absent), of the right type and range, else TP_ERR_FORMAT naming it. */
tp_status tp_fam_jfield(const json_t *o, const char *where, const char *key, int optional, const json_t **out,
                        tp_error *err);
tp_status tp_fam_jint(const json_t *o, const char *where, const char *key, int lo, int hi, int *out, tp_error *err);
tp_status tp_fam_jnum(const json_t *o, const char *where, const char *key, double *out, tp_error *err);
/* TP_ERR_FORMAT naming the first key of o not in keys (NULL-terminated). */
tp_status tp_fam_jkeys(const json_t *o, const char *where, const char *const *keys, tp_error *err);

#endif
