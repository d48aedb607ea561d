/* stats.h: latency statistics and accuracy metrics. */
#ifndef TP_STATS_H
#define TP_STATS_H

#include <stddef.h>

typedef struct {
    int n;
    double min, max, mean, median, p90, p95, p99, stddev;
    double cov; /* coefficient of variation = stddev / mean (trtexec warns above 1%; tprof above 2.5%) */
} tp_latency_stats;

/* Statistics over n samples (ms). Percentiles: nearest-rank on the sorted samples (value at index
 * ceil(p/100 * n) - 1), as trtexec reports them. Standard deviation is the population one. */
void tp_latency_stats_compute(const double *samples_ms, int n, tp_latency_stats *out);

/* The p-th percentile (0 < p <= 100) of |x| from its histogram: bins (nbins counts of equal width over [0, amax],
 * the last bin closed). Returns the top edge of the first bin at which the cumulative count reaches p% of the
 * total, so the result is within amax / nbins above the true percentile and never above amax (histogram
 * percentile calibration, as TensorRT's IInt8EntropyCalibrator family and NVIDIA ModelOpt's "percentile"
 * calibrator compute it at their bin resolution). An empty histogram returns amax. */
double tp_hist_percentile(const unsigned *bins, int nbins, double amax, double p);

/* Two independent samples compared (tprof diff): Mann-Whitney U (Mann and Whitney 1947; the two-sided test of
 * whether a value of one sample tends to be larger than one of the other). u: U of a, the number of pairs (a_i,
 * b_j) with a_i > b_j plus half the ties. p: the two-sided p-value, exact (the null distribution of U counted over
 * all arrangements, Mann and Whitney's recursion) when both samples have at most 20 values and no ties, else the
 * normal approximation with the tie correction and a continuity correction of 1/2. *exact says which (may be
 * NULL). Fewer than one value on a side, or a NaN anywhere: p = NaN, u = NaN. */
void tp_mann_whitney(const double *a, int na, const double *b, int nb, double *u, double *p, int *exact);

/* The median of x (n values; NaN for n <= 0): the middle value, or the mean of the two middle ones. */
double tp_median(const double *x, int n);

/* A percentile bootstrap confidence interval (Efron 1979) of median(b) / median(a): `iters` resamples of each sample
 * with replacement from a fixed seed (the same inputs give the same interval), the (1 - level) / 2 and
 * (1 + level) / 2 quantiles of the resampled ratios. Fewer than one value on a side, or a median of a <= 0 in the
 * data: lo = hi = NaN. Errors: none (scratch allocation failing gives NaN too). */
void tp_bootstrap_median_ratio(const double *a, int na, const double *b, int nb, int iters, double level,
                               unsigned long long seed, double *lo, double *hi);

typedef struct {
    double cosine;      /* <x, r> / (|x| |r|) over all values, fp64 */
    double rel_l2;      /* |x - r| / |r| */
    double max_abs;     /* max |x_i - r_i| */
    double top1_agree;  /* fraction of rows whose argmax equals the reference's */
    int rows;
    int nonfinite;      /* count of NaN/Inf in x (any makes the metrics NaN) */
} tp_accuracy;

/* Compares x against the reference r, both (rows, cols) row-major fp32. */
void tp_accuracy_compute(const float *x, const float *r, int rows, int cols, tp_accuracy *out);

#endif
