/* stats.c: latency statistics and accuracy metrics, all accumulated in fp64 so that the metric itself adds
 * no error comparable to what it measures (fp32 sums over 10^5 logits lose ~1e-4 relative).
 *
 * Degenerate inputs never crash and give documented values:
 *   latency, n <= 0 (or no samples):  every field 0, n = 0 (nothing measured; 0 prints better than NaN
 *                                     in tables and never trips the cov warning);
 *   latency, mean == 0:               cov = 0 (all samples 0: no variation to report);
 *   accuracy, rows <= 0 or cols <= 0: nothing compared: cosine, rel_l2, top1_agree NaN, max_abs 0,
 *                                     nonfinite 0;
 *   accuracy, a NaN/Inf in x:         nonfinite counts them and cosine, rel_l2, max_abs, top1_agree are NaN
 *                                     (a broken engine must never look accurate); the same four are NaN when
 *                                     r holds NaN/Inf (a broken reference), with nonfinite counting x only;
 *   accuracy, zero vectors:           cosine 1 when x and r are both all zeros, 0 when only one is;
 *                                     rel_l2 0 when x == r == 0, +Inf when r == 0 and x != 0. */
#include "core/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"

/* Total order even with NaN (sorted last), so qsort's contract holds whatever the samples are. */
static int cmp_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
    return (a > b) - (a < b);
}

/* Nearest rank: the value at 1-based rank ceil(p/100 * n). Integer arithmetic, because in floating point
 * 0.95 * 100 etc. may land a hair above an integer and ceil would skip a rank. */
static double nearest_rank(const double *sorted, int n, int p) {
    long long rank = ((long long)p * n + 99) / 100;
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return sorted[rank - 1];
}

void tp_latency_stats_compute(const double *samples_ms, int n, tp_latency_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (n <= 0 || !samples_ms) return;

    double *s = malloc((size_t)n * sizeof *s);
    CHECK_ALLOC(s); /* void API: a few KB of samples failing to allocate is not recoverable here */
    memcpy(s, samples_ms, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);

    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += s[i];
    double mean = sum / n;
    /* Two-pass variance: the one-pass sum-of-squares formula cancels catastrophically when the spread is
     * tiny compared with the mean, which is exactly the case of a stable benchmark. */
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (s[i] - mean) * (s[i] - mean);

    out->n = n;
    out->min = s[0];
    out->max = s[n - 1];
    out->mean = mean;
    out->median = nearest_rank(s, n, 50);
    out->p90 = nearest_rank(s, n, 90);
    out->p95 = nearest_rank(s, n, 95);
    out->p99 = nearest_rank(s, n, 99);
    out->stddev = sqrt(ss / n);
    out->cov = mean != 0.0 ? out->stddev / mean : 0.0;
    free(s);
}

void tp_accuracy_compute(const float *x, const float *r, int rows, int cols, tp_accuracy *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    out->rows = rows > 0 ? rows : 0;
    if (rows <= 0 || cols <= 0 || !x || !r) {
        out->cosine = out->rel_l2 = out->top1_agree = NAN;
        return;
    }
    const size_t n = (size_t)rows * (size_t)cols;

    int bad_x = 0, bad_r = 0;
    for (size_t i = 0; i < n; i++) {
        bad_x += !isfinite(x[i]);
        bad_r += !isfinite(r[i]);
    }
    out->nonfinite = bad_x;
    if (bad_x || bad_r) {
        out->cosine = out->rel_l2 = out->max_abs = out->top1_agree = NAN;
        return;
    }

    double xr = 0.0, xx = 0.0, rr = 0.0, dd = 0.0, maxd = 0.0;
    for (size_t i = 0; i < n; i++) {
        double a = x[i], b = r[i], d = a - b; /* exact: the difference of two floats fits a double */
        xr += a * b;
        xx += a * a;
        rr += b * b;
        dd += d * d;
        if (fabs(d) > maxd) maxd = fabs(d);
    }
    if (xx == 0.0 || rr == 0.0) out->cosine = (xx == 0.0 && rr == 0.0) ? 1.0 : 0.0;
    else {
        /* sqrt(xx * rr) rather than sqrt(xx) * sqrt(rr): for x == r it is exactly xx (sqrt of a correctly
         * rounded square), so identical tensors give exactly 1. The clamp removes rounding's excursions past
         * Cauchy-Schwarz. No overflow: xx, rr < n * 2^256. */
        double c = xr / sqrt(xx * rr);
        out->cosine = c > 1.0 ? 1.0 : (c < -1.0 ? -1.0 : c);
    }
    if (rr == 0.0) out->rel_l2 = dd == 0.0 ? 0.0 : INFINITY;
    else out->rel_l2 = sqrt(dd) / sqrt(rr);
    out->max_abs = maxd;

    /* argmax with the first maximum winning, as torch.argmax / numpy.argmax do, so ties in the logits
     * (common after FP8 quantization) compare the way the reference tools would. */
    int agree = 0;
    for (int i = 0; i < rows; i++) {
        const float *xi = x + (size_t)i * cols, *ri = r + (size_t)i * cols;
        int ax = 0, ar = 0;
        for (int j = 1; j < cols; j++) {
            if (xi[j] > xi[ax]) ax = j;
            if (ri[j] > ri[ar]) ar = j;
        }
        agree += ax == ar;
    }
    out->top1_agree = (double)agree / rows;
}

double tp_hist_percentile(const unsigned *bins, int nbins, double amax, double p) {
    double total = 0;
    for (int b = 0; b < nbins; b++) total += bins[b];
    if (total <= 0 || nbins < 1) return amax;
    const double want = p / 100.0 * total;
    double cum = 0;
    for (int b = 0; b < nbins; b++) {
        cum += bins[b];
        if (cum >= want) return amax * (double)(b + 1) / nbins;
    }
    return amax;
}

double tp_median(const double *x, int n) {
    if (n <= 0) return NAN;
    double *t = malloc(sizeof(double) * (size_t)n);
    if (!t) return NAN;
    memcpy(t, x, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    const double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

typedef struct {
    double v;
    int side; /* 0: a, 1: b */
} mw_item;

static int cmp_item(const void *pa, const void *pb) {
    const double a = ((const mw_item *)pa)->v, b = ((const mw_item *)pb)->v;
    return (a > b) - (a < b);
}

/* P(U <= u) under the null for samples of m and n values without ties: the number of arrangements with U = k,
 * c(m, n, k) = c(m - 1, n, k - n) + c(m, n - 1, k) (the largest value from the first sample or the second), over
 * C(m + n, m). Doubles: at most C(40, 20) ~ 1.4e11 arrangements, exact in a double. */
static double mw_exact_cdf(int m, int n, double u) {
    const int kmax = m * n;
    double *c = calloc((size_t)(m + 1) * (n + 1) * (kmax + 1), sizeof(double));
    if (!c) return NAN;
#define C(i, j, k) c[(((size_t)(i) * (n + 1)) + (j)) * (kmax + 1) + (k)]
    for (int i = 0; i <= m; i++)
        for (int j = 0; j <= n; j++) {
            if (i == 0 || j == 0) {
                C(i, j, 0) = 1.0;
                continue;
            }
            for (int k = 0; k <= i * j; k++) C(i, j, k) = (k >= j ? C(i - 1, j, k - j) : 0.0) + C(i, j - 1, k);
        }
    double below = 0.0, total = 0.0;
    for (int k = 0; k <= kmax; k++) {
        total += C(m, n, k);
        if (k <= u + 1e-9) below += C(m, n, k);
    }
#undef C
    free(c);
    return below / total;
}

void tp_mann_whitney(const double *a, int na, const double *b, int nb, double *u, double *p, int *exact) {
    *u = *p = NAN;
    if (exact) *exact = 0;
    if (na < 1 || nb < 1) return;
    const int N = na + nb;
    mw_item *it = malloc(sizeof *it * (size_t)N);
    if (!it) return;
    for (int i = 0; i < na; i++) it[i] = (mw_item){a[i], 0};
    for (int j = 0; j < nb; j++) it[na + j] = (mw_item){b[j], 1};
    for (int k = 0; k < N; k++)
        if (isnan(it[k].v)) {
            free(it);
            return;
        }
    qsort(it, (size_t)N, sizeof *it, cmp_item);
    /* average ranks over ties; the tie term sum(t^3 - t) for the variance */
    double ra = 0.0, ties = 0.0;
    for (int i = 0; i < N;) {
        int j = i;
        while (j + 1 < N && it[j + 1].v == it[i].v) j++;
        const double rank = 0.5 * (double)(i + j) + 1.0, t = (double)(j - i + 1);
        for (int k = i; k <= j; k++)
            if (it[k].side == 0) ra += rank;
        ties += t * t * t - t;
        i = j + 1;
    }
    free(it);
    const double U = ra - 0.5 * (double)na * (na + 1), mu = 0.5 * (double)na * nb;
    *u = U;
    if (na <= 20 && nb <= 20 && ties == 0.0) {
        /* two-sided: twice the smaller tail, at most 1 (U and na nb - U have the same null distribution) */
        const double lo = mw_exact_cdf(na, nb, fmin(U, (double)na * nb - U));
        *p = fmin(1.0, 2.0 * lo);
        if (exact) *exact = 1;
        return;
    }
    const double var = (double)na * nb / 12.0 * ((double)(N + 1) - ties / ((double)N * (N - 1)));
    if (!(var > 0.0)) { /* every value equal: no evidence of any difference */
        *p = 1.0;
        return;
    }
    const double z = fmax(0.0, fabs(U - mu) - 0.5) / sqrt(var);
    *p = erfc(z / sqrt(2.0));
}

void tp_bootstrap_median_ratio(const double *a, int na, const double *b, int nb, int iters, double level,
                               unsigned long long seed, double *lo, double *hi) {
    *lo = *hi = NAN;
    if (na < 1 || nb < 1 || iters < 1 || !(tp_median(a, na) > 0.0)) return;
    double *ra = malloc(sizeof(double) * (size_t)na), *rb = malloc(sizeof(double) * (size_t)nb);
    double *r = malloc(sizeof(double) * (size_t)iters);
    if (!ra || !rb || !r) {
        free(ra), free(rb), free(r);
        return;
    }
    tp_rng g;
    tp_rng_seed(&g, seed);
    for (int k = 0; k < iters; k++) {
        for (int i = 0; i < na; i++) ra[i] = a[(int)(tp_rng_uniform(&g) * na)];
        for (int j = 0; j < nb; j++) rb[j] = b[(int)(tp_rng_uniform(&g) * nb)];
        qsort(ra, (size_t)na, sizeof(double), cmp_double);
        qsort(rb, (size_t)nb, sizeof(double), cmp_double);
        const double ma = na % 2 ? ra[na / 2] : 0.5 * (ra[na / 2 - 1] + ra[na / 2]);
        const double mb = nb % 2 ? rb[nb / 2] : 0.5 * (rb[nb / 2 - 1] + rb[nb / 2]);
        r[k] = ma > 0.0 ? mb / ma : INFINITY;
    }
    qsort(r, (size_t)iters, sizeof(double), cmp_double);
    const double q0 = 0.5 * (1.0 - level), q1 = 0.5 * (1.0 + level);
    int i0 = (int)floor(q0 * (iters - 1)), i1 = (int)ceil(q1 * (iters - 1));
    if (i0 < 0) i0 = 0;
    if (i1 > iters - 1) i1 = iters - 1;
    *lo = r[i0], *hi = r[i1];
    free(ra), free(rb), free(r);
}
