/* sparse.h: `--sparsity 2:4` in a run (issue 22): the linears --sparse-layers selects (comma-separated fnmatch globs
 * over the ops' layer names, default "*") pruned to 2:4 along K by magnitude (formats/sparsity.h), a weight already
 * 2:4 used as it is, a linear whose K cannot take the pattern named and left dense. The reference, the calibration
 * and every engine then run on the pruned weights; the bench measures what pruning costs against the dense FP32
 * model. */
#ifndef TP_BENCH_SPARSE_H
#define TP_BENCH_SPARSE_H

#include <stdint.h>

#include "ir/graph.h"
#include "models/model.h"
#include "tprof.h"

/* One selected linear's weight. */
typedef struct {
    char layer[TP_NAME_LEN];   /* the first op reading it */
    char param[TP_NAME_LEN];
    int64_t groups;            /* groups of 4 along K (N * K / 4) */
    int64_t pruned;            /* groups that had more than 2 non-zeros (0: already 2:4) */
    int eligible;              /* 0: its shape cannot take the pattern (why) */
    char why[128];
} tp_sparse_row;

/* A linear with a 2:4 weight (--sparsity, issue 22) in one engine: what ran. */
typedef struct {
    int op;                         /* the graph's (and the trace's) op index */
    int state;                      /* 1: cuSPARSELt's sparse GEMM ran; 0: eligible, the faster dense GEMM kept;
                                       -1: not eligible (why) */
    double sparse_us, dense_us;     /* build-time times of the two (state >= 0) */
    char why[120];
} tp_sparse_op_row;

typedef struct {
    const char *globs;         /* as given ("*" by default) */
    tp_sparse_row *rows;       /* one per distinct weight, in graph order */
    int n_rows;
    int n_linears;             /* linear ops in the graph */
    int pruned, already, ineligible; /* weights */
} tp_sparse_summary;

/* Prunes p's weights of the linears of g that globs selects (NULL: "*"), in place; fills s (free with
 * tp_sparse_summary_free). A weight several linears read is pruned once. Errors: TP_ERR_ARG (a glob that matches
 * no linear, naming it; an empty glob), TP_ERR_OOM. */
tp_status tp_sparse_apply(const tp_graph *g, tp_params *p, const char *globs, tp_sparse_summary *s, tp_error *err);
void tp_sparse_summary_free(tp_sparse_summary *s);

#endif
