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
