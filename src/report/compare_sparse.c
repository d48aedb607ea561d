#include "report/compare_sparse.h"

#include <math.h>
#include <stdio.h>

static const char *layer_of(const tp_compare_entry *e, int op) {
    return e->trace && op >= 0 && op < e->trace->n_ops ? e->trace->ops[op].layer : "?";
}

static const char *state_name(int s) { return s > 0 ? "sparse ran" : s == 0 ? "dense kept" : "not eligible"; }

void tp_compare_sparse_section(tp_doc *d, const tp_compare_config *c, const tp_compare_entry *e, int n) {
    if (!c->sparse_layers) return;
    tp_doc_heading(d, 2, "sparsity", "2:4 sparsity");
    tp_doc_para_open(d);
    tp_doc_txt(d, "The linears ");
    tp_doc_code(d, c->sparse_layers);
    tp_doc_txt(d, " selects were pruned to 2:4 along K by magnitude; every engine and the FP32 reference ran the pruned "
                  "weights. ");
    if (c->prune_samples > 0) {
        tp_doc_txt(d, "What pruning cost: the pruned model's FP32 reference against the dense one's, over %d sample%s: "
                      "cosine %.6f, relative L2 %.4g", c->prune_samples, c->prune_samples == 1 ? "" : "s",
                   c->prune_cosine, c->prune_rel_l2);
        if (!isnan(c->prune_top1)) tp_doc_txt(d, ", top-1 agreement %.1f %%", 100.0 * c->prune_top1);
        tp_doc_txt(d, ". ");
    } else {
        tp_doc_txt(d, "The cost of pruning was not measured (no reference ran). ");
    }
    tp_doc_txt(d, "On the GPU each eligible linear's sparse GEMM (cuSPARSELt) was timed against its dense GEMM when the "
                  "engine was built and the faster kept: the table says which ran.");
    tp_doc_para_close(d);
    char id[64];
    for (int i = 0; i < n; i++) {
        const tp_compare_entry *x = &e[i];
        if (x->n_sparse < 1) continue;
        int ran = 0, kept = 0, no = 0;
        double ts = 0, td = 0;
        for (int k = 0; k < x->n_sparse; k++) {
            const tp_sparse_op_row *r = &x->sparse[k];
            ran += r->state > 0, kept += r->state == 0, no += r->state < 0;
            if (r->state >= 0) ts += r->sparse_us, td += r->dense_us;
        }
        snprintf(id, sizeof id, "sparsity-%s-%d", tp_precision_name(x->prec), i);
        tp_doc_heading(d, 3, id, "%s engine: sparse ran for %d of %d linears with 2:4 weights", tp_precision_name(x->prec),
                       ran, x->n_sparse);
        tp_doc_para(d, "%d ran sparse, %d eligible but the dense GEMM was faster, %d not eligible; the eligible ones' "
                       "GEMMs at build: %.1f us sparse against %.1f us dense (%.2fx).", ran, kept, no, ts, td,
                    ts > 0 ? td / ts : 0.0);
        tp_doc_table_open(d, "llrrrl", "Layer", "What ran", "Sparse us", "Dense us", "Sparse speedup", "Why not", NULL);
        for (int k = 0; k < x->n_sparse; k++) {
            const tp_sparse_op_row *r = &x->sparse[k];
            tp_doc_tr_open(d);
            tp_doc_td_open(d);
            tp_doc_code(d, layer_of(x, r->op));
            tp_doc_td_close(d);
            tp_doc_td(d, "%s", state_name(r->state));
            if (r->state >= 0) {
                tp_doc_td(d, "%.1f", r->sparse_us);
                tp_doc_td(d, "%.1f", r->dense_us);
                tp_doc_td(d, "%.2fx", r->sparse_us > 0 ? r->dense_us / r->sparse_us : 0.0);
            } else {
                tp_doc_td(d, "-");
                tp_doc_td(d, "-");
                tp_doc_td(d, "-");
            }
            tp_doc_td(d, "%s", r->why); /* a kept dense GEMM may say why too (the whole pass) */
            tp_doc_tr_close(d);
        }
        tp_doc_table_close(d);
    }
}

json_t *tp_compare_sparse_json(const tp_compare_config *c, const tp_compare_entry *e, int n) {
    if (!c->sparse_layers) return NULL;
    json_t *engines = json_array();
    for (int i = 0; engines && i < n; i++) {
        const tp_compare_entry *x = &e[i];
        json_t *ops = json_array();
        int ran = 0, kept = 0, no = 0;
        double ts = 0, td = 0;
        for (int k = 0; ops && k < x->n_sparse; k++) {
            const tp_sparse_op_row *r = &x->sparse[k];
            ran += r->state > 0, kept += r->state == 0, no += r->state < 0;
            if (r->state >= 0) ts += r->sparse_us, td += r->dense_us;
            json_array_append_new(ops, json_pack("{s:s,s:s,s:f,s:f,s:s}", "layer", layer_of(x, r->op), "state",
                                                 state_name(r->state), "sparse_us", r->state >= 0 ? r->sparse_us : 0.0,
                                                 "dense_us", r->state >= 0 ? r->dense_us : 0.0, "why", r->why));
        }
        json_array_append_new(engines, json_pack("{s:s,s:i,s:i,s:i,s:f,s:f,s:o}", "precision",
                                                 tp_precision_name(x->prec), "ran", ran, "eligible", ran + kept,
                                                 "not_eligible", no, "sparse_us", ts, "dense_us", td, "ops",
                                                 ops ? ops : json_null()));
    }
    json_t *cost = c->prune_samples > 0
                       ? json_pack("{s:i,s:f,s:f,s:o}", "samples", c->prune_samples, "cosine", c->prune_cosine,
                                   "rel_l2", c->prune_rel_l2, "top1", isnan(c->prune_top1) ? json_null()
                                                                                           : json_real(c->prune_top1))
                       : json_null();
    return json_pack("{s:s,s:o,s:o}", "layers", c->sparse_layers, "prune_cost", cost ? cost : json_null(), "engines",
                     engines ? engines : json_null());
}
