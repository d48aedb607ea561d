/* close_check.h: the comparisons of GPU results the kernel tests share (test_gpu_ops.c, test_gpu_decoder_ops.c):
 * against a host reference within a tolerance derived from the output format (relative L2 over the tensor, and
 * every element within a fraction of max |ref|; NaN or Inf in the output, i.e. unwritten poison, fails), and bit
 * for bit against a host encoding. Include after gpu_check.h (g_case, esize, dname). */
#ifndef TP_TEST_CLOSE_CHECK_H
#define TP_TEST_CLOSE_CHECK_H

#include <string.h>

typedef struct {
    double rel_l2, abs_frac; /* relative L2 bound; max abs error bound as a fraction of max |ref| */
} tol_t;

/* got vs ref over n values laid out as rows of `cols` (for the printed (row, col) of an index). */
static inline void check_close(const char *what, const float *got, const float *ref, size_t n, size_t cols, tol_t tol) {
    double num = 0.0, den = 0.0, max_abs = 0.0, ref_max = 0.0;
    size_t worst = 0, bad = 0, first_bad = 0, bad_ref = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ref[i])) {
            bad_ref++;
            continue;
        }
        ref_max = fmax(ref_max, fabs((double)ref[i]));
        if (!isfinite(got[i])) {
            if (bad++ == 0) first_bad = i;
            continue;
        }
        double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > max_abs) max_abs = fabs(d), worst = i;
    }
    const double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    const double atol = tol.abs_frac * ref_max;
    const int ok = bad == 0 && bad_ref == 0 && rel <= tol.rel_l2 && max_abs <= atol;
    if (cols == 0) cols = 1;
    printf("  %s  %s | %s: n=%zu rel_l2=%.3e (tol %.1e) max_abs=%.3e (tol %.3e = %.0e*max|ref| %.4g) at %zu=[%zu,%zu] "
           "got %.7g ref %.7g%s\n",
           ok ? "ok  " : "FAIL", g_case, what, n, rel, tol.rel_l2, max_abs, atol, tol.abs_frac, ref_max, worst,
           worst / cols, worst % cols, n ? got[worst] : 0.0, n ? ref[worst] : 0.0, bad ? " (+NaN outputs)" : "");
    fflush(stdout);
    ck_assert_msg(bad_ref == 0, "[%s] %s: test bug: %zu non-finite reference values", g_case, what, bad_ref);
    ck_assert_msg(bad == 0,
                  "[%s] %s: %zu of %zu outputs are NaN/Inf (never written: the 0xFF poison is still there, or the "
                  "kernel produced NaN); first at %zu = [%zu,%zu], ref there %.7g",
                  g_case, what, bad, n, first_bad, first_bad / cols, first_bad % cols, ref[first_bad]);
    ck_assert_msg(rel <= tol.rel_l2, "[%s] %s: relative L2 error %.3e > %.1e (max abs %.3e at %zu=[%zu,%zu]: got %.7g ref %.7g)",
                  g_case, what, rel, tol.rel_l2, max_abs, worst, worst / cols, worst % cols, got[worst], ref[worst]);
    ck_assert_msg(max_abs <= atol, "[%s] %s: max abs error %.3e > %.3e (%.0e * max|ref| %.4g) at %zu=[%zu,%zu]: got %.7g ref %.7g (rel L2 %.3e)",
                  g_case, what, max_abs, atol, tol.abs_frac, ref_max, worst, worst / cols, worst % cols, got[worst],
                  ref[worst], rel);
}

/* Bit-exact comparison of n elements of dt. */
static inline void check_bytes_equal(const char *what, tp_dtype dt, const void *got, const void *want, size_t n, size_t cols) {
    const size_t es = esize(dt);
    size_t mism = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0)
            if (mism++ == 0) first = i;
    if (cols == 0) cols = 1;
    printf("  %s  %s | %s: n=%zu bit-exact mismatches=%zu\n", mism ? "FAIL" : "ok  ", g_case, what, n, mism);
    fflush(stdout);
    if (mism) {
        float g, w;
        tp_convert_to_f32(dt, (const char *)got + first * es, &g, 1, 1.0f);
        tp_convert_to_f32(dt, (const char *)want + first * es, &w, 1, 1.0f);
        ck_abort_msg("[%s] %s: %zu of %zu elements differ from the host result bit for bit; first at %zu=[%zu,%zu]: "
                     "got %.8g want %.8g (%s)",
                     g_case, what, mism, n, first, first / cols, first % cols, g, w, dname(dt));
    }
}

#endif
