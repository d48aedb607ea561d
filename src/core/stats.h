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
