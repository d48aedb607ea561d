/* drift.c: the per-stage drift (drift.h). */
#include "bench/drift.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float **tp_taps_alloc(const tp_graph *g) {
    if (g->n_taps <= 0) return NULL;
    float **t = calloc((size_t)g->n_taps, sizeof *t);
    for (int k = 0; t && k < g->n_taps; k++) {
        if ((t[k] = malloc(sizeof(float) * (size_t)tp_value_numel(&g->values[g->taps[k].value])))) continue;
        tp_taps_free(g, t);
        return NULL;
    }
    return t;
}

void tp_taps_free(const tp_graph *g, float **taps) {
    for (int k = 0; taps && k < g->n_taps; k++) free(taps[k]);
    free(taps);
}

/* values per sample of tap k */
static int64_t per_sample(const tp_graph *g, int k) {
    const tp_value *v = &g->values[g->taps[k].value];
    return v->shape[0] > 0 ? tp_value_numel(v) / v->shape[0] : 0;
}

int tp_stage_drift_compute(const tp_graph *g, float *const *x, const tp_graph *gref, float *const *r,
                           tp_stage_drift *out) {
    if (g->n_taps != gref->n_taps || gref->batch > g->batch) return -1;
    for (int k = 0; k < g->n_taps; k++)
        if (strcmp(g->taps[k].stage, gref->taps[k].stage) || per_sample(g, k) != per_sample(gref, k) ||
            g->values[g->taps[k].value].shape[0] != g->batch || gref->values[gref->taps[k].value].shape[0] != gref->batch)
            return -1;
    int n = 0;
    char *done = calloc((size_t)(g->n_taps ? g->n_taps : 1), 1);
    if (!done) return -2;
    for (int k = 0; k < g->n_taps; k++) {
        if (done[k]) continue;
        /* every tap of this label, the reference's samples of each, pooled into one row */
        size_t total = 0;
        int nv = 0;
        for (int j = k; j < g->n_taps; j++)
            if (!strcmp(g->taps[j].stage, g->taps[k].stage)) total += (size_t)(per_sample(g, j) * gref->batch), nv++;
        float *a = malloc(sizeof(float) * (total ? total : 1)), *b = malloc(sizeof(float) * (total ? total : 1));
        if (!a || !b) {
            free(a), free(b), free(done);
            return -2;
        }
        size_t at = 0;
        for (int j = k; j < g->n_taps; j++) {
            if (strcmp(g->taps[j].stage, g->taps[k].stage)) continue;
            const size_t m = (size_t)(per_sample(g, j) * gref->batch); /* the first samples: a prefix of both */
            memcpy(a + at, x[j], sizeof(float) * m);
            memcpy(b + at, r[j], sizeof(float) * m);
            at += m;
            done[j] = 1;
        }
        tp_stage_drift *d = &out[n++];
        snprintf(d->stage, sizeof d->stage, "%s", g->taps[k].stage);
        d->n_values = nv;
        d->numel = (double)total;
        tp_accuracy_compute(a, b, 1, (int)total, &d->acc);
        free(a), free(b);
    }
    free(done);
    return n;
}
