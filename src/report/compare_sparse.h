/* compare_sparse.h: the 2:4 sparsity section of `tprof compare` (compare.h; issue 22): what pruning cost against
 * the dense FP32 model, then per engine and linear with a 2:4 weight whether cuSPARSELt's sparse GEMM ran, its and
 * the dense GEMM's build-time times and the speedup, or why it was not eligible: "eligible" is never shown as "ran". */
#ifndef TP_COMPARE_SPARSE_H
#define TP_COMPARE_SPARSE_H

#include <jansson.h>

#include "report/compare.h"
#include "report/doc.h"

/* The section "2:4 sparsity" (heading level 2, anchor "sparsity"); nothing when c->sparse_layers is NULL. */
void tp_compare_sparse_section(tp_doc *d, const tp_compare_config *c, const tp_compare_entry *e, int n);
/* {layers, prune_cost {samples, cosine, rel_l2, top1}, engines [{precision, ran, eligible, not_eligible, sparse_us,
 * dense_us, ops [{layer, state ("sparse ran", "dense kept", "not eligible"), sparse_us, dense_us, why}]}]}; NULL
 * without sparsity (or out of memory). */
json_t *tp_compare_sparse_json(const tp_compare_config *c, const tp_compare_entry *e, int n);

#endif
