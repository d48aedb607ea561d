/* attn_check.h: helpers shared by the GPU attention tests (test_gpu_attention.c, test_gpu_attention_wgmma.c,
 * test_gpu_sdpa.c):
 * rounding test inputs to the kernel's input type, max |V|, the format-derived tolerances of a fused attention
 * (derived in test_gpu_attention.c's header comment) and the checked comparison against the CPU reference.
 * Include after gpu_check.h (g_case, hmalloc, esize, host_amax). */
#ifndef TP_TEST_ATTN_CHECK_H
#define TP_TEST_ATTN_CHECK_H

static inline void round_to(tp_dtype dt, float *x, size_t n) {
    void *tmp = hmalloc(n * esize(dt));
    tp_convert_from_f32(dt, x, tmp, n, 1.0f);
    tp_convert_to_f32(dt, tmp, x, n, 1.0f);
    g_host[--g_nhost] = NULL; /* tmp was the last allocation: free it now */
    free(tmp);
}

/* max |V| over the V part of qkv (B, T, 3, H, D) */
static inline float host_vmax(const float *qkv, int B, int T, int H, int D) {
    float m = 0.0f;
    for (size_t bt = 0; bt < (size_t)B * T; bt++) m = fmaxf(m, host_amax(qkv + (bt * 3 + 2) * H * D, (size_t)H * D));
    return m;
}

static inline double unit_round(tp_dtype t) { return t == TP_F16 ? 0x1p-11 : t == TP_BF16 ? 0x1p-8 : 0x1p-4; }

typedef struct {
    double rel_l2, abs;
} tol_t;

/* the bounds of the header comment */
static inline tol_t fa_tol(tp_dtype in, tp_dtype out, size_t n, int T, float vmax, float refmax, float oscale) {
    const double up = unit_round(in), uo = unit_round(out);
    double pa = up * vmax + (in == TP_F16 ? T * 0x1p-25 * vmax : 0.0);
    double ob = uo * refmax + (out == TP_E4M3 ? 0x1p-10 * oscale : 0.0);
    tol_t t;
    t.abs = 1.5 * (pa + ob);
    t.rel_l2 = out == TP_E4M3 ? (n >= 4096 ? 4e-2 : 0.0625 * 1.01) + 2.0 * up : 2.0 * (up + uo);
    return t;
}

static inline void check_close(const char *what, const float *got, const float *ref, size_t n, size_t cols, tol_t tol) {
    double num = 0.0, den = 0.0, max_abs = 0.0;
    size_t worst = 0, bad = 0, first_bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            if (bad++ == 0) first_bad = i;
            continue;
        }
        const double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > max_abs) max_abs = fabs(d), worst = i;
    }
    const double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    const int ok = bad == 0 && rel <= tol.rel_l2 && max_abs <= tol.abs;
    printf("  %s  %s | %s: n=%zu rel_l2=%.3e (tol %.1e) max_abs=%.3e (tol %.3e) at %zu=[%zu,%zu] got %.7g ref "
           "%.7g%s\n",
           ok ? "ok  " : "FAIL", g_case, what, n, rel, tol.rel_l2, max_abs, tol.abs, worst, worst / cols,
           worst % cols, n ? got[worst] : 0.0, n ? ref[worst] : 0.0, bad ? " (+NaN outputs)" : "");
    fflush(stdout);
    ck_assert_msg(bad == 0, "[%s] %s: %zu of %zu outputs are NaN/Inf (poison never overwritten, or a NaN produced); "
                  "first at %zu = [%zu,%zu], ref there %.7g",
                  g_case, what, bad, n, first_bad, first_bad / cols, first_bad % cols, ref[first_bad]);
    ck_assert_msg(rel <= tol.rel_l2, "[%s] %s: relative L2 error %.3e > %.1e (max abs %.3e at %zu: got %.7g ref %.7g)",
                  g_case, what, rel, tol.rel_l2, max_abs, worst, got[worst], ref[worst]);
    ck_assert_msg(max_abs <= tol.abs, "[%s] %s: max abs error %.3e > %.3e at %zu=[%zu,%zu]: got %.7g ref %.7g", g_case,
                  what, max_abs, tol.abs, worst, worst / cols, worst % cols, got[worst], ref[worst]);
}

#endif
