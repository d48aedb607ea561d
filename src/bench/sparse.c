#include "bench/sparse.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "formats/sparsity.h"

/* Whether layer matches one of the comma-separated globs; hit[k] set for each glob k that does. */
static int selected(const char *globs, const char *layer, unsigned char *hit) {
    int any = 0, k = 0;
    for (const char *s = globs; *s; k++) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        char glob[TP_NAME_LEN];
        if (n >= sizeof glob) n = sizeof glob - 1;
        memcpy(glob, s, n);
        glob[n] = '\0';
        if (fnmatch(glob, layer, 0) == 0) any = hit[k] = 1;
        s += e ? (size_t)(e - s) + 1 : n;
    }
    return any;
}

void tp_sparse_summary_free(tp_sparse_summary *s) {
    free(s->rows);
    memset(s, 0, sizeof *s);
}

tp_status tp_sparse_apply(const tp_graph *g, tp_params *p, const char *globs, tp_sparse_summary *s, tp_error *err) {
    memset(s, 0, sizeof *s);
    s->globs = globs && *globs ? globs : "*";
    int n_globs = 1;
    for (const char *c = s->globs; *c; c++) n_globs += *c == ',';
    for (const char *c = s->globs; *c; c++)
        if ((c == s->globs && *c == ',') || (*c == ',' && (c[1] == ',' || c[1] == '\0')))
            return tp_fail(err, TP_ERR_ARG, "--sparse-layers '%s': an empty glob", s->globs);
    unsigned char *hit = calloc((size_t)n_globs, 1);
    unsigned char *seen = calloc((size_t)(p->n_params ? p->n_params : 1), 1);
    s->rows = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *s->rows);
    if (!hit || !seen || !s->rows) {
        free(hit);
        free(seen);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_LINEAR) continue;
        s->n_linears++;
        const int pi = g->values[op->in[1]].param_index;
        if (!selected(s->globs, op->layer, hit) || pi < 0 || pi >= p->n_params || seen[pi]) continue;
        seen[pi] = 1;
        tp_param *w = &p->params[pi];
        tp_sparse_row *r = &s->rows[s->n_rows++];
        snprintf(r->layer, sizeof r->layer, "%s", op->layer);
        snprintf(r->param, sizeof r->param, "%s", w->name);
        const int64_t N = w->shape[0], K = w->numel / (N > 0 ? N : 1);
        r->eligible = w->ndim == 2 && tp_sparse_shape_ok(N, K, r->why, sizeof r->why);
        if (!r->eligible) {
            s->ineligible++;
            continue;
        }
        r->groups = N * K / TP_SPARSE_M;
        r->pruned = tp_sparse_prune(w->data, N, K);
        if (r->pruned) s->pruned++;
        else s->already++;
    }
    tp_status st = TP_OK;
    int k = 0;
    for (const char *c = s->globs; *c && !st; k++) { /* a glob that selects nothing is a mistake, said */
        const char *e = strchr(c, ',');
        const size_t n = e ? (size_t)(e - c) : strlen(c);
        if (!hit[k])
            st = tp_fail(err, TP_ERR_ARG, "--sparse-layers: '%.*s' matches no linear layer of %s", (int)n, c,
                         g->n_ops ? "the model" : "an empty graph");
        c += e ? n + 1 : n;
    }
    free(hit);
    free(seen);
    if (st) tp_sparse_summary_free(s);
    return st;
}
