#include "formats/sparsity.h"

#include <math.h>
#include <stdio.h>

/* Non-zero for the pattern: anything but +0 and -0 (NaN included, so a corrupt weight is never taken for a hole) */
static int nonzero(float x) { return !(x == 0.0f); }

int64_t tp_sparse_violations(const float *w, int64_t N, int64_t K, int64_t *first) {
    int64_t bad = 0;
    if (first) *first = -1;
    for (int64_t i = 0; i < N * K; i += TP_SPARSE_M) {
        int nz = 0;
        for (int j = 0; j < TP_SPARSE_M; j++) nz += nonzero(w[i + j]);
        if (nz > TP_SPARSE_N) {
            if (first && bad == 0) *first = i;
            bad++;
        }
    }
    return bad;
}

int64_t tp_sparse_prune(float *w, int64_t N, int64_t K) {
    int64_t changed = 0;
    for (int64_t i = 0; i < N * K; i += TP_SPARSE_M) {
        float *g = w + i;
        int nz = 0;
        for (int j = 0; j < TP_SPARSE_M; j++) nz += nonzero(g[j]);
        if (nz <= TP_SPARSE_N) continue;
        /* the two largest magnitudes, the earlier of equal ones first (NaN ranks above every number: kept, seen) */
        int a = -1, b = -1;
        for (int j = 0; j < TP_SPARSE_M; j++) {
            const float m = isnan(g[j]) ? INFINITY : fabsf(g[j]);
            const float ma = a < 0 ? -1.0f : isnan(g[a]) ? INFINITY : fabsf(g[a]);
            const float mb = b < 0 ? -1.0f : isnan(g[b]) ? INFINITY : fabsf(g[b]);
            if (m > ma) {
                b = a;
                a = j;
            } else if (m > mb) {
                b = j;
            }
        }
        for (int j = 0; j < TP_SPARSE_M; j++)
            if (j != a && j != b) g[j] = 0.0f;
        changed++;
    }
    return changed;
}

int tp_sparse_shape_ok(int64_t N, int64_t K, char *why, int n) {
    if (N > 0 && K > 0 && K % TP_SPARSE_M == 0) return 1;
    if (why && n > 0)
        snprintf(why, (size_t)n, "2:4 sparsity needs K (%lld) a positive multiple of %d (groups of %d along K)",
                 (long long)K, TP_SPARSE_M, TP_SPARSE_M);
    return 0;
}
