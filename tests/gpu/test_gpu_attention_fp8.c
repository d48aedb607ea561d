/* test_gpu_attention_fp8.c: the FP8 fused attention (tpk_flash_attention_fp8, src/exec/cuda/attention/attention_fp8.h) on
 * the GPU, against (1) a CPU emulation of exactly its numerics and (2) the FP32 CPU reference tp_cpu_attention.
 *
 * Method (as test_gpu_attention.c):
 *   - qkv ~ N(0, 2^2) plus outliers (one element in 2048, and at least 3, set to +-(8..16) sigma: 16 to 32),
 *     rounded to the input type on the host BEFORE anything else; per-tensor scales s = amax / 448 of the Q, K and
 *     V parts (static calibration on the same data). Scores q.k * D^-0.5 have a standard deviation of 4 (peaked
 *     softmaxes whose running max changes across the 64-key tiles) and the outliers make a few rows very peaked;
 *   - every output buffer is poisoned with 0xFF bytes (NaN in F16, BF16 and E4M3); a NaN/Inf left fails;
 *   - shapes: T in {1, 7, 197, 257, 577} (1 key; 7; ViT's 197 = 3 tiles + 5; 257 = 4 tiles + 1; 577 = 9 tiles + 1),
 *     B in {1, 3}, H in {1, 12}, D in {64, 128}; inputs F16 and BF16; outputs F16, BF16 and E4M3; every variant
 *     (0 = default; 1, 2 = E4M3 mma, a head / 128 rows per CTA; 3, 4 = fp16 mma on the E4M3 values). Key chunks
 *     streamed through shared memory are covered too (E4M3 products: 320 resident keys for D = 128; fp16: 320 for
 *     D = 64 and 128 for D = 128, so T = 197, 257, 577 take 2, 3, 5 chunks there); also D = 32, 80, 96;
 *   - other scales (negative: folded into Q's quantization; zero: uniform weights), padded buffers (rows >= T of
 *     qkv NaN, of out poison: neither read nor written), argument rejection, graph capture (bit-exact replay).
 *
 * (1) The emulation (fp64): Q, K, V quantized with the host codec, q = tp_f32_to_e4m3(x / s) (float division, as
 * the kernel), decoded exactly; logits t = (q.k) sl2 with sl2 = ((s_q s_k) scale) log2 e rounded in fp32 as the
 * kernel does; keys in tiles of 64 from key 0, the running max m updated once per tile, P_j = e4m3(2^(t_j - m + 8))
 * (the kernel's power of two 2^8), O and l = sum of the quantized P_j rescaled by 2^(m_old - m_new), out = O s_v / l.
 * What may still differ, and the tolerance for it:
 *   (a) the output rounding (the emulation is not rounded): u_o |y| per element, u_o = 2^-11 (F16; plus 2^-25 for
 *       F16 subnormals), 2^-8 (BF16), 2^-4 (E4M3; plus 2^-10 * out_scale, half the subnormal step);
 *   (b) fp32 accumulation in the tensor cores (S, O and l; e4m3 products are exact in fp16 and fp32) and fp32
 *       rescaling: O and l take at most T/16 + 2 T/64 roundings of 2^-24 relative to l * vmax, i.e. < 2^-19 vmax
 *       at T = 577 (vmax = max |dequantized V|): allowed 2^-16 vmax;
 *   (c) P rounding flips: the kernel's logits carry fp32 errors (S accumulated in fp32, m rounded to fp32,
 *       ex2.approx's 2^-22), ~1e-5 relative in P, so a P that lies that close to an E4M3 rounding boundary rounds
 *       the other way than in the fp64 emulation: one E4M3 step, at most 2^-3 P_j, which moves the outputs of its
 *       row by at most 2^-3 (P_j / l) |v_j - y| <= 2^-2 vmax.
 *   Checks: every element within (a) + (b) ("tight"), except a small fraction (<= 1% + 16: rows hit by a flip of a P
 *   that matters) which must be within (a) + 2^-2 vmax ("one flip"); relative L2 error <= the output rounding's
 *   (2 u_o for F16/BF16; for E4M3 the RMS bound of test_gpu_ops.c: 4e-2 for n >= 4096, else 2^-4 * 1.01) + 1e-3
 *   for the flips. Measured on an H200: at most 0.14% of the elements beyond the tight bound (the worst 14x it,
 *   within one flip), relative L2 at most 3.0e-4 (F16 out), 2.2e-3 (BF16), 2.8e-2 (E4M3).
 *
 * (2) Against FP32 (tp_cpu_attention, fp64 inside): the error of the format itself. An E4M3 rounding has a
 * relative error of at most 2^-4 and, for values spread over a binade, an RMS relative error
 * eps = 2^-3 / sqrt(12) * sqrt(E[1/m^2]) = 0.0265 (m log-uniform in [1, 2)). Quantizing V gives ~eps relative in
 * the output; quantizing Q and K perturbs each logit by ~sqrt(2) eps sigma_l (sigma_l: the logits' standard
 * deviation, |scale| sqrt(D) rms(Q) rms(K)), which moves the softmax weights by that much relative; P's own
 * rounding averages over the keys (< eps / 4 measured). So rel_L2 ~ eps sqrt(1 + 2 sigma_l^2): 0.027 for flat
 * attention (sigma_l -> 0), 0.15 for sigma_l = 4. Measured with the emulation (no GPU) on these inputs: 0.08 to
 * 0.11 (cosine 0.994 to 0.997) at sigma_l = 4, of which Q and K quantization alone 0.077, V 0.027, P 0.006.
 * Bound: rel_L2 <= 1.5 eps sqrt(1 + 2 sigma_l^2) (the model overestimates peaked softmaxes, whose few dominant
 * keys move together, and is tight for flat ones: scale 0 gives rel_L2 0.028 ~ eps, the V term alone) and
 * cosine >= 1 - bound^2 / 2; an E4M3 output adds its own rounding (the RMS bound of (1)) in quadrature. Measured on
 * an H200: rel_L2 up to 0.125 and cosine >= 0.992 at sigma_l ~ 4.3 (bound 0.245), at most half the bound. The thresholds cosine >= 0.999 and
 * rel_L2 <= 5e-2 hold only for near-flat attention: checked on qkv ~ N(0, 0.5^2) without outliers (sigma_l =
 * 0.25; measured rel_L2 <= 0.040, cosine >= 0.99920).
 *
 * The FP8 kernel on Hopper's FP8 tensor cores (tpk_flash_attention_wgmma_fp8, E4M3 inputs) is checked against the
 * same emulation further down, with the tolerances its tensor cores' accumulation needs (comment there).
 *
 * CUDA is initialized only inside tests (checked fixture), never in the runner's parent process. */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/attention/attention_fp8.h"
#include "exec/cuda/attention/attention_wgmma.h"
#include "formats/dtype.h"
#include "lab_variants.h" /* bench/: the lab-only kernel variants */

#define TP_GPU_MAX_TRACKED 1024
#include "gpu_check.h"

Suite *gpu_attention_fp8_suite(void);

/* ---- fixture: the tracked resources are released per shape (release_all) and at teardown ------------------- */

static void setup(void) { gpu_setup(); }

static void teardown(void) {
    release_all();
    close_stream();
}

/* qkv ~ N(0, sigma^2), never zero, plus (outliers) n / 2048 + 3 elements at +-(8..16) sigma, rounded to dt */
static float *make_qkv(tp_dtype dt, size_t n, uint64_t seed, double sigma, int outliers) {
    float *x = hmalloc(n * sizeof(float));
    tp_rng r;
    tp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        const float v = (float)(sigma * tp_rng_normal(&r));
        x[i] = v != 0.0f ? v : (float)(sigma * 1e-3);
    }
    if (outliers) {
        const size_t k = n / 2048 + 3;
        for (size_t j = 0; j < k; j++) {
            const size_t i = (size_t)(tp_rng_u64(&r) % n);
            const double m = (8.0 + 8.0 * tp_rng_uniform(&r)) * sigma;
            x[i] = (float)(tp_rng_u64(&r) & 1 ? -m : m);
        }
    }
    void *tmp = malloc(n * esize(dt));
    ck_assert(tmp != NULL);
    tp_convert_from_f32(dt, x, tmp, n, 1.0f);
    tp_convert_to_f32(dt, tmp, x, n, 1.0f);
    free(tmp);
    return x;
}

/* per-tensor amax / 448 of the Q, K, V parts of qkv (B, T, 3, H, D); rms[] = their RMS */
static void qkv_scales(const float *qkv, int B, int T, int H, int D, float s[3], double rms[3]) {
    const size_t C = (size_t)H * D;
    float am[3] = {0.0f, 0.0f, 0.0f};
    double ss[3] = {0.0, 0.0, 0.0};
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (int w = 0; w < 3; w++)
            for (size_t i = 0; i < C; i++) {
                const float v = qkv[(bt * 3 + w) * C + i];
                am[w] = fmaxf(am[w], fabsf(v));
                ss[w] += (double)v * v;
            }
    for (int w = 0; w < 3; w++) {
        s[w] = am[w] > 0.0f ? am[w] / 448.0f : 1.0f;
        rms[w] = sqrt(ss[w] / ((double)B * T * C));
    }
}

static float e4m3_qdq(float x, float s) { return tp_e4m3_to_f32(tp_f32_to_e4m3(x / s)); }

/* The kernel's numerics in fp64 (header comment (1)); out (B, T, H, D) unrounded. Also returns max |dequantized
 * V| in *vmax. */
static void emulate_fp8(const float *qkv, float *out, int B, int T, int H, int D, float scale, const float s[3],
                        double *vmax) {
    float sl2 = s[0] * s[1];
    sl2 *= scale;
    sl2 *= 1.44269504088896340736f;
    const size_t C = (size_t)H * D, row = 3 * C;
    double vm = 0.0;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) reduction(max : vm)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            float *q = malloc(sizeof(float) * (size_t)T * D * 3);
            double *t = malloc(sizeof(double) * 64), *o = malloc(sizeof(double) * (size_t)D);
            if (!q || !t || !o) abort();
            float *k = q + (size_t)T * D, *v = k + (size_t)T * D;
            for (int i = 0; i < T; i++)
                for (int d = 0; d < D; d++) {
                    const float *x = qkv + ((size_t)b * T + i) * row + (size_t)h * D + d;
                    q[(size_t)i * D + d] = e4m3_qdq(x[0], s[0]);
                    k[(size_t)i * D + d] = e4m3_qdq(x[C], s[1]);
                    v[(size_t)i * D + d] = e4m3_qdq(x[2 * C], s[2]);
                    if (fabs((double)v[(size_t)i * D + d] * s[2]) > vm) vm = fabs((double)v[(size_t)i * D + d] * s[2]);
                }
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, l = 0.0;
                for (int d = 0; d < D; d++) o[d] = 0.0;
                for (int j0 = 0; j0 < T; j0 += 64) {
                    const int j1 = j0 + 64 < T ? j0 + 64 : T;
                    double mt = -INFINITY;
                    for (int j = j0; j < j1; j++) {
                        double a = 0.0;
                        for (int d = 0; d < D; d++) a += (double)q[(size_t)i * D + d] * k[(size_t)j * D + d];
                        t[j - j0] = a * sl2;
                        if (t[j - j0] > mt) mt = t[j - j0];
                    }
                    const double mn = m > mt ? m : mt, al = m == -INFINITY ? 0.0 : exp2(m - mn);
                    l *= al;
                    for (int d = 0; d < D; d++) o[d] *= al;
                    for (int j = j0; j < j1; j++) {
                        const double P = tp_e4m3_to_f32(tp_f32_to_e4m3((float)exp2(t[j - j0] - mn + 8.0)));
                        l += P;
                        for (int d = 0; d < D; d++) o[d] += P * v[(size_t)j * D + d];
                    }
                    m = mn;
                }
                float *y = out + ((size_t)b * T + i) * C + (size_t)h * D;
                for (int d = 0; d < D; d++) y[d] = (float)(o[d] * s[2] / l);
            }
            free(q);
            free(t);
            free(o);
        }
    *vmax = vm;
}

static double unit_round(tp_dtype t) { return t == TP_F16 ? 0x1p-11 : t == TP_BF16 ? 0x1p-8 : 0x1p-4; }

/* Tolerance knobs of check_emulation beyond the header's model (the FP8 wgmma kernel's section explains them):
 * acc: added to the tight bound, in units of vmax (and, relative to the outputs' RMS, to the relative L2 bound);
 * above_frac: the fraction of elements allowed beyond the tight
 * bound (before the + 16); rel_extra: added to the relative L2 bound. */
typedef struct {
    double acc, above_frac, rel_extra;
} emu_tol;
static const emu_tol EMU_TOL_MMA = {0.0, 0.01, 1e-3};

/* (1): against the emulation (header comment) */
static void check_emulation_tol(const float *got, const float *emu, size_t n, size_t cols, tp_dtype odt,
                                float oscale, double vmax, emu_tol tol) {
    const double uo = unit_round(odt);
    const double floor_ =
        (odt == TP_F16 ? 0x1p-25 : odt == TP_E4M3 ? 0x1p-10 * oscale : 0.0) + (0x1p-16 + tol.acc) * vmax;
    const double flip = 0x1p-2 * vmax;
    double num = 0.0, den = 0.0, worst_ratio = 0.0;
    size_t bad = 0, above = 0, beyond = 0, worst = 0, first_beyond = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            bad++;
            continue;
        }
        const double d = fabs((double)got[i] - (double)emu[i]), tight = uo * fabs((double)emu[i]) + floor_;
        num += d * d;
        den += (double)emu[i] * emu[i];
        if (d > tight) above++;
        if (d > tight + flip)
            if (beyond++ == 0) first_beyond = i;
        if (d / tight > worst_ratio) worst_ratio = d / tight, worst = i;
    }
    const double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    /* + the accumulation bound of every element relative to the outputs' RMS */
    const double rel_tol = (odt == TP_E4M3 ? (n >= 4096 ? 4e-2 : 0.0625 * 1.01) : 2.0 * uo) + tol.rel_extra +
                           (den > 0.0 ? tol.acc * vmax / sqrt(den / (double)n) : 0.0);
    const size_t above_max = (size_t)(tol.above_frac * (double)n) + 16; /* + 16: a flip in a tiny case */
    const int ok = bad == 0 && rel <= rel_tol && above <= above_max && beyond == 0;
    printf("  %s  %s | vs emulation: rel_l2=%.3e (tol %.1e) beyond tight=%zu of %zu (max %zu), worst %.2fx tight at "
           "[%zu,%zu] got %.7g emu %.7g%s\n",
           ok ? "ok  " : "FAIL", g_case, rel, rel_tol, above, n, above_max, worst_ratio, worst / cols, worst % cols,
           n ? got[worst] : 0.0, n ? emu[worst] : 0.0, bad ? " (+NaN outputs)" : "");
    fflush(stdout);
    ck_assert_msg(bad == 0, "[%s] %zu of %zu outputs are NaN/Inf", g_case, bad, n);
    ck_assert_msg(rel <= rel_tol, "[%s] relative L2 error vs emulation %.3e > %.1e", g_case, rel, rel_tol);
    ck_assert_msg(beyond == 0, "[%s] %zu of %zu outputs differ from the emulation by more than one P flip (first at "
                  "%zu: got %.7g emu %.7g)", g_case, beyond, n, first_beyond, got[first_beyond], emu[first_beyond]);
    ck_assert_msg(above <= above_max, "[%s] %zu of %zu outputs beyond the tight bound (max %zu)", g_case, above, n,
                  above_max);
}

static void check_emulation(const float *got, const float *emu, size_t n, size_t cols, tp_dtype odt, float oscale,
                            double vmax) {
    check_emulation_tol(got, emu, n, cols, odt, oscale, vmax, EMU_TOL_MMA);
}

/* (2): against FP32; bound (header comment) from sigma_l, or the fixed 5e-2 / 0.999 when flat (F16/BF16 outputs
 * only); an E4M3 output adds its rounding in quadrature */
static void check_fp32(const float *got, const float *ref, size_t n, double sigma_l, int flat, tp_dtype odt) {
    double num = 0.0, den = 0.0, gg = 0.0, dot = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        gg += (double)got[i] * got[i];
        dot += (double)got[i] * ref[i];
    }
    const double rel = den > 0.0 ? sqrt(num / den) : sqrt(num), cs = (den > 0.0 && gg > 0.0) ? dot / sqrt(den * gg) : 1.0;
    const double eps = 0.0265;
    double rel_tol = flat ? 5e-2 : 1.5 * eps * sqrt(1.0 + 2.0 * sigma_l * sigma_l);
    if (odt == TP_E4M3) { /* plus the output's own rounding, independent: in quadrature (RMS bound of (1)) */
        const double ro = n >= 4096 ? 4e-2 : 0.0625 * 1.01;
        rel_tol = sqrt(rel_tol * rel_tol + ro * ro);
    }
    const double cos_tol = flat ? 0.999 : 1.0 - rel_tol * rel_tol / 2.0;
    const int ok = rel <= rel_tol && cs >= cos_tol;
    printf("  %s  %s | vs fp32: rel_l2=%.4f (tol %.3f) cosine=%.6f (tol %.6f) sigma_l=%.2f\n", ok ? "ok  " : "FAIL",
           g_case, rel, rel_tol, cs, cos_tol, sigma_l);
    fflush(stdout);
    ck_assert_msg(rel <= rel_tol, "[%s] relative L2 error vs fp32 %.4f > %.3f", g_case, rel, rel_tol);
    ck_assert_msg(cs >= cos_tol, "[%s] cosine vs fp32 %.6f < %.6f", g_case, cs, cos_tol);
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static const tp_dtype IN_T[] = {TP_F16, TP_BF16};
static const tp_dtype OUT_T[] = {TP_F16, TP_BF16, TP_E4M3};
#define N_VARIANTS 4 /* tpk_flash_attention_fp8_variant 1..4, plus 0 = the default */

/* One shape: references, then every output type x variant. flat: N(0, 0.5^2) without outliers and the fixed
 * thresholds of (2); else N(0, 2^2) with outliers. vmin..vmax: the variants to run (0 = the default). */
static void run_shape(tp_dtype idt, int B, int T, int H, int D, float scale, uint64_t seed, int flat, int vmin,
                      int vmax_v, int n_out_t) {
    const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
    SET_CASE("fp8 %s B=%d T=%d H=%d D=%d scale=%g%s", dname(idt), B, T, H, D, scale, flat ? " flat" : "");
    float *qkv = make_qkv(idt, n_in, seed, flat ? 0.5 : 2.0, !flat);
    float s[3];
    double rms[3], vmax;
    qkv_scales(qkv, B, T, H, D, s, rms);
    float *ref = hmalloc(n_out * sizeof(float)), *emu = hmalloc(n_out * sizeof(float));
    tp_cpu_attention(qkv, ref, B, T, H, D, scale);
    emulate_fp8(qkv, emu, B, T, H, D, scale, s, &vmax);
    const double sigma_l = fabs(scale) * sqrt((double)D) * rms[0] * rms[1];
    const float emu_amax = host_amax(emu, n_out);
    void *d_qkv = dev_upload(idt, qkv, n_in, n_in);
    float *d_s = dev_floats(s, 3);
    for (int oi = 0; oi < n_out_t; oi++) {
        const tp_dtype odt = OUT_T[oi];
        const float oscale = odt == TP_E4M3 ? emu_amax / 448.0f : 1.0f;
        float *d_os = odt == TP_E4M3 ? dev_floats(&oscale, 1) : NULL;
        for (int v = vmin; v <= vmax_v; v++) {
            SET_CASE("fp8 %s->%s v%d B=%d T=%d H=%d D=%d scale=%g%s", dname(idt), dname(odt), v, B, T, H, D, scale,
                     flat ? " flat" : "");
            void *d_out = dev_alloc(odt, n_out);
            KERNEL_OK(tpk_flash_attention_fp8_variant(d_qkv, idt, d_s, d_out, odt, d_os, B, T, H, D, scale, v,
                                                      g_stream));
            const float *got = download_f32(odt, d_out, n_out, oscale);
            check_emulation(got, emu, n_out, (size_t)H * D, odt, oscale, vmax);
            check_fp32(got, ref, n_out, sigma_l, flat, odt);
        }
    }
    printf("       (the format's own error, emulation vs fp32: rel_l2=%.4f)\n", rel_l2(emu, ref, n_out));
    release_all();
}

/* ================================================================================================================
 * Every shape x output type x variant against both references (one pair of references per shape and input type).
 * ============================================================================================================== */

START_TEST(test_fp8_attention) {
    const tp_dtype idt = IN_T[_i];
    static const int Ts[] = {1, 7, 197, 257, 577}, Bs[] = {1, 3}, Hs[] = {1, 12}, Ds[] = {64, 128};
    uint64_t seed = 51000 + 1000 * (uint64_t)_i;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
            for (size_t hi = 0; hi < sizeof Hs / sizeof Hs[0]; hi++)
                for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++) {
                    const int D = Ds[di];
                    run_shape(idt, Bs[bi], Ts[ti], Hs[hi], D, 1.0f / sqrtf((float)D), seed++, 0, 0, N_VARIANTS, 3);
                }
}
END_TEST

/* Near-flat attention (sigma_l = 0.25): the fixed thresholds cosine >= 0.999, rel_L2 <= 5e-2 against FP32. */
START_TEST(test_fp8_attention_flat) {
    const tp_dtype idt = IN_T[_i];
    static const int cases[][4] = {{2, 7, 3, 64}, {2, 197, 12, 64}, {1, 577, 4, 64}, {2, 197, 3, 128}, {1, 257, 2, 128}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        run_shape(idt, cases[c][0], cases[c][1], cases[c][2], cases[c][3], 1.0f / sqrtf((float)cases[c][3]),
                  61000 + 100 * (uint64_t)_i + c, 1, 0, N_VARIANTS, 2);
}
END_TEST

/* The other head dims (D = 32, 80, 96), and other scales (negative: the kernel folds the sign into Q's
 * quantization; zero: uniform weights, the mean of the quantized V), against both references. */
START_TEST(test_fp8_attention_dims_scales) {
    const tp_dtype idt = IN_T[_i];
    static const int cases[][4] = {{2, 197, 3, 32}, {2, 197, 3, 80}, {1, 257, 2, 96}, {3, 70, 2, 80}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        run_shape(idt, cases[c][0], cases[c][1], cases[c][2], cases[c][3], 1.0f / sqrtf((float)cases[c][3]),
                  62000 + 100 * (uint64_t)_i + c, 0, 0, N_VARIANTS, 3);
    static const int sc_cases[][4] = {{2, 197, 3, 64}, {1, 70, 2, 128}};
    for (size_t c = 0; c < sizeof sc_cases / sizeof sc_cases[0]; c++) {
        const int D = sc_cases[c][3];
        const float scales[] = {-1.0f / sqrtf((float)D), 0.0f};
        for (size_t si = 0; si < 2; si++)
            run_shape(idt, sc_cases[c][0], sc_cases[c][1], sc_cases[c][2], D, scales[si],
                      63000 + 100 * (uint64_t)_i + 10 * c + si, 0, 0, N_VARIANTS, 1);
    }
}
END_TEST

/* ================================================================================================================
 * Padded buffers: qkv has PAD extra token rows of NaN after the last batch's T rows, out has PAD extra rows of
 * poison. The kernel must neither read the NaN rows (0 * NaN would poison the output) nor write past row T.
 * ============================================================================================================== */

START_TEST(test_fp8_attention_padding) {
    const tp_dtype idt = IN_T[_i];
    static const int cases[][4] = {{1, 7, 3, 64}, {2, 197, 2, 64}, {1, 129, 4, 128}, {2, 70, 1, 80}}; /* B T H D */
    const int PAD = 70;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
        const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
        const size_t pad_in = (size_t)PAD * 3 * H * D, pad_out = (size_t)PAD * H * D;
        const float scale = 1.0f / sqrtf((float)D);
        SET_CASE("fp8 padding %s B=%d T=%d H=%d D=%d", dname(idt), B, T, H, D);
        float *qkv = make_qkv(idt, n_in, 64000 + c, 2.0, 1);
        float s[3];
        double rms[3], vmax;
        qkv_scales(qkv, B, T, H, D, s, rms);
        float *emu = hmalloc(n_out * sizeof(float));
        emulate_fp8(qkv, emu, B, T, H, D, scale, s, &vmax);
        void *d_qkv = dev_upload(idt, qkv, n_in, n_in + pad_in); /* the pad stays 0xFF: NaN */
        float *d_s = dev_floats(s, 3);
        for (size_t oi = 0; oi < sizeof OUT_T / sizeof OUT_T[0]; oi++) {
            const tp_dtype odt = OUT_T[oi];
            const float oscale = odt == TP_E4M3 ? host_amax(emu, n_out) / 448.0f : 1.0f;
            float *d_os = odt == TP_E4M3 ? dev_floats(&oscale, 1) : NULL;
            for (int v = 0; v <= N_VARIANTS; v++) {
                SET_CASE("fp8 padding %s->%s v%d B=%d T=%d H=%d D=%d", dname(idt), dname(odt), v, B, T, H, D);
                void *d_out = dev_alloc(odt, n_out + pad_out);
                KERNEL_OK(tpk_flash_attention_fp8_variant(d_qkv, idt, d_s, d_out, odt, d_os, B, T, H, D, scale, v,
                                                          g_stream));
                check_emulation(download_f32(odt, d_out, n_out, oscale), emu, n_out, (size_t)H * D, odt, oscale, vmax);
                check_untouched("rows >= T", d_out, n_out * esize(odt), (n_out + pad_out) * esize(odt));
            }
        }
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * Argument rejection: cudaErrorInvalidValue without launching; empty work is a successful no-op.
 * ============================================================================================================== */

START_TEST(test_fp8_attention_rejects) {
    SET_CASE("fp8 rejects");
    char *buf = dev_alloc(TP_E4M3, 1 << 16);
    const float *sc = (const float *)(buf + 32768);
    const rejected_call r[] = {
        {"D = 48", tpk_flash_attention_fp8(buf, TP_F16, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 48, 0.1f, g_stream)},
        {"D = 256", tpk_flash_attention_fp8(buf, TP_F16, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 256, 0.1f, g_stream)},
        {"f32 input", tpk_flash_attention_fp8(buf, TP_F32, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"e4m3 input", tpk_flash_attention_fp8(buf, TP_E4M3, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"f32 output", tpk_flash_attention_fp8(buf, TP_F16, sc, buf + 8192, TP_F32, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"e4m3 output without scale",
         tpk_flash_attention_fp8(buf, TP_F16, sc, buf + 8192, TP_E4M3, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"no qkv scales", tpk_flash_attention_fp8(buf, TP_F16, NULL, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"qkv not 16-byte aligned",
         tpk_flash_attention_fp8(buf + 2, TP_F16, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"out not 16-byte aligned",
         tpk_flash_attention_fp8(buf, TP_F16, sc, buf + 8194, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"NULL qkv", tpk_flash_attention_fp8(NULL, TP_F16, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"NULL out", tpk_flash_attention_fp8(buf, TP_F16, sc, NULL, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"negative T", tpk_flash_attention_fp8(buf, TP_F16, sc, buf + 8192, TP_F16, NULL, 1, -1, 1, 64, 0.1f, g_stream)},
        {"negative B", tpk_flash_attention_fp8(buf, TP_F16, sc, buf + 8192, TP_F16, NULL, -1, 4, 1, 64, 0.1f, g_stream)},
        {"variant 5", tpk_flash_attention_fp8_variant(buf, TP_F16, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, 5,
                                                      g_stream)},
        {"variant -1", tpk_flash_attention_fp8_variant(buf, TP_F16, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f,
                                                       -1, g_stream)},
    };
    check_rejected(r, sizeof r / sizeof r[0]);
    ck_assert_int_eq(tpk_flash_attention_fp8(NULL, TP_F16, NULL, NULL, TP_F16, NULL, 0, 4, 1, 64, 0.1f, g_stream), 0);
    ck_assert_int_eq(tpk_flash_attention_fp8(NULL, TP_BF16, NULL, NULL, TP_E4M3, NULL, 2, 0, 1, 64, 0.1f, g_stream), 0);
    ck_assert_int_eq(tpk_flash_attention_fp8(NULL, TP_F16, NULL, NULL, TP_BF16, NULL, 2, 4, 0, 128, 0.1f, g_stream), 0);
}
END_TEST

/* ================================================================================================================
 * Graph capture (global mode: any synchronizing or allocating call inside fails the capture) of the default (whose
 * launcher queries the SM count) and of each variant; D = 128 and T = 577 need more than 48 KB of shared memory,
 * so cudaFuncSetAttribute runs inside the capture. The replay must equal an eager launch bit for bit.
 * ============================================================================================================== */

typedef struct {
    const void *qkv;
    const float *s, *os;
    int B, T, H, D, variant, wgmma; /* wgmma: tpk_flash_attention_wgmma_fp8_variant on E4M3 qkv */
} fp8_launch_ctx;

static int fp8_launch(const void *ctx, void *out, cudaStream_t st) {
    const fp8_launch_ctx *c = ctx;
    return c->wgmma ? tpk_flash_attention_wgmma_fp8_variant(c->qkv, c->s, out, TP_E4M3, c->os, c->B, c->T, c->H, c->D,
                                                            0.125f, c->variant, st)
                    : tpk_flash_attention_fp8_variant(c->qkv, TP_F16, c->s, out, TP_E4M3, c->os, c->B, c->T, c->H,
                                                      c->D, 0.125f, c->variant, st);
}

/* the replay must also hold no NaN (0xFF / 0x7F in E4M3) */
static void check_fp8_graph(const fp8_launch_ctx *c, size_t n_out) {
    void *d_a = dev_alloc(TP_E4M3, n_out), *d_b = dev_alloc(TP_E4M3, n_out);
    const unsigned char *a = check_graph_replay(fp8_launch, c, d_a, d_b, n_out);
    size_t poison = 0;
    for (size_t i = 0; i < n_out; i++) poison += a[i] == 0xFF || a[i] == 0x7F;
    ck_assert_msg(poison == 0, "[%s] %zu NaN outputs", g_case, poison);
}

START_TEST(test_fp8_attention_graph) {
    static const int cases[][4] = {{2, 577, 3, 128}, {3, 197, 12, 64}}; /* B T H D */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int variant = 0; variant <= N_VARIANTS; variant++) {
            const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
            const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
            SET_CASE("fp8 graph capture f16->e4m3 v%d B=%d T=%d H=%d D=%d", variant, B, T, H, D);
            float *qkv = make_qkv(TP_F16, n_in, 65000 + c, 2.0, 1);
            float s[3], osc = 1.0f / 32.0f;
            double rms[3];
            qkv_scales(qkv, B, T, H, D, s, rms);
            const fp8_launch_ctx ctx = {dev_upload(TP_F16, qkv, n_in, n_in), dev_floats(s, 3), dev_floats(&osc, 1),
                                        B, T, H, D, variant, 0};
            check_fp8_graph(&ctx, n_out);
            release_all();
        }
}
END_TEST

/* ================================================================================================================
 * The same numerics on E4M3 inputs, on Hopper's FP8 tensor cores (tpk_flash_attention_wgmma_fp8, D = 64). On a
 * device other than compute capability 9.0 the kernel must refuse every call (checked instead).
 *
 * What differs from the mma.sync kernel: Hopper's FP8 tensor cores do not accumulate in IEEE fp32 but keep about
 * 14 mantissa bits (DeepSeek-V3 technical report, arXiv 2412.19437, section 3.3.2, measured on an H800; on an
 * H200 this kernel's logits on N(0, 2^2) data move the E4M3 P of ~1% of the keys one step from the fp64
 * emulation's). Hence two kinds of data:
 *   exact    Q and K codes in {+-0.5, +-1, +-1.5, +-2} (all scales 1): every partial sum of S is a multiple of 0.25
 *            below 256, exact in 11 bits, so S is the emulation's, and only fp32 effects remain in the logits (the
 *            header's flip model holds, as for the mma.sync kernel). V ~ N(0, 8^2) as codes. O and l still
 *            accumulate with >= 13 bits: bound (b) becomes 2 ceil(T / 32) 2^-13 vmax (each k32 step adds at most
 *            2^-13 relative to the running sums of O <= l vmax and l). The header's checks, with that bound;
 *   random   N(0, 2^2) with outliers and per-tensor scales (the realistic case): logits carry ~2^-14 relative
 *            errors, many P's flip, so vs the emulation only: no NaN, no element beyond one flip, relative L2
 *            within the output rounding's + 1e-2 (measured on an H200: <= 2.6e-3 for F16 out); vs FP32 the
 *            header's bound (2) unchanged.
 * ============================================================================================================== */

static int is_sm90(void) {
    int dev = 0, major = 0, minor = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major == 9 && minor == 0;
}

/* qkv (B, T, 3, H, D) fp32 -> E4M3 codes q = e4m3(x / s_part), into a device buffer of n_alloc bytes (the rest
 * poison: 0xFF, an E4M3 NaN) */
static void *upload_e4m3_qkv(const float *qkv, int B, int T, int H, int D, const float s[3], size_t n_alloc) {
    const size_t C = (size_t)H * D, n = (size_t)B * T * 3 * C;
    unsigned char *codes = hmalloc(n);
    for (size_t i = 0; i < n; i++) codes[i] = tp_f32_to_e4m3(qkv[i] / s[(i / C) % 3]);
    void *d = dev_bytes(n_alloc);
    CUDA_OK(cudaMemcpy(d, codes, n, cudaMemcpyHostToDevice));
    return d;
}

/* the `exact` data above: Q, K in {+-0.5, +-1, +-1.5, +-2}, V = e4m3(N(0, 8^2)), never zero */
static float *make_exact_qkv(size_t n, size_t C, uint64_t seed) {
    float *x = hmalloc(n * sizeof(float));
    tp_rng r;
    tp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        if ((i / C) % 3 < 2) {
            const uint64_t u = tp_rng_u64(&r);
            x[i] = (float)(0.5 * (double)(1 + (u & 3))) * ((u >> 2) & 1 ? -1.0f : 1.0f);
        } else {
            const float v = (float)(8.0 * tp_rng_normal(&r));
            x[i] = tp_e4m3_to_f32(tp_f32_to_e4m3(v != 0.0f ? v : 1.0f));
        }
    }
    return x;
}

#define N_W8_VARIANTS 3 /* tpk_flash_attention_wgmma_fp8_variant 1..3, plus 0 = the default */

/* One shape, every output type (the first n_out_t of OUT_T) x variant. exact: the data kind above (else random,
 * flat: N(0, 0.5^2) without outliers); pad: NaN token rows after the input and poison after the output. */
static void run_shape_w8(int B, int T, int H, float scale, uint64_t seed, int exact, int flat, int n_out_t, int pad) {
    const int D = 64;
    const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
    const size_t pad_in = (size_t)pad * 3 * H * D, pad_out = (size_t)pad * H * D;
    const char *kind = exact ? "exact" : flat ? "random flat" : "random";
    SET_CASE("wgmma fp8 %s B=%d T=%d H=%d scale=%g", kind, B, T, H, scale);
    float *qkv = exact ? make_exact_qkv(n_in, (size_t)H * D, seed) : make_qkv(TP_F16, n_in, seed, flat ? 0.5 : 2.0, !flat);
    float s[3] = {1.0f, 1.0f, 1.0f};
    double rms[3], vmax;
    if (!exact) qkv_scales(qkv, B, T, H, D, s, rms);
    float *ref = hmalloc(n_out * sizeof(float)), *emu = hmalloc(n_out * sizeof(float));
    if (!exact) tp_cpu_attention(qkv, ref, B, T, H, D, scale);
    emulate_fp8(qkv, emu, B, T, H, D, scale, s, &vmax);
    const double sigma_l = exact ? 0.0 : fabs(scale) * sqrt((double)D) * rms[0] * rms[1];
    void *d_qkv = upload_e4m3_qkv(qkv, B, T, H, D, s, n_in + pad_in);
    float *d_s = dev_floats(s, 3);
    const emu_tol tol = exact ? (emu_tol){2.0 * ((T + 31) / 32) * 0x1p-13, 0.01, 1e-3} : (emu_tol){0.0, 1.0, 1e-2};
    for (int oi = 0; oi < n_out_t; oi++) {
        const tp_dtype odt = OUT_T[oi];
        const float oscale = odt == TP_E4M3 ? host_amax(emu, n_out) / 448.0f : 1.0f;
        float *d_os = odt == TP_E4M3 ? dev_floats(&oscale, 1) : NULL;
        ck_assert_msg(tpk_flash_attention_wgmma_fp8_supported(odt, T, D), "[%s] not supported on compute capability "
                      "9.0", g_case);
        for (int v = 0; v <= N_W8_VARIANTS; v++) {
            SET_CASE("wgmma fp8 %s e4m3->%s v%d B=%d T=%d H=%d scale=%g%s", kind, dname(odt), v, B, T, H, scale,
                     pad ? " padded" : "");
            void *d_out = dev_alloc(odt, n_out + pad_out);
            KERNEL_OK(tpk_flash_attention_wgmma_fp8_variant(d_qkv, d_s, d_out, odt, d_os, B, T, H, D, scale, v,
                                                            g_stream));
            const float *got = download_f32(odt, d_out, n_out, oscale);
            check_emulation_tol(got, emu, n_out, (size_t)H * D, odt, oscale, vmax, tol);
            if (!exact && !pad) check_fp32(got, ref, n_out, sigma_l, flat, odt);
            if (pad) check_untouched("rows >= T", d_out, n_out * esize(odt), (n_out + pad_out) * esize(odt));
        }
    }
    release_all();
}

START_TEST(test_fp8_wgmma_attention) {
    if (!is_sm90()) {
        SET_CASE("wgmma fp8 on a device other than compute capability 9.0");
        ck_assert_int_eq(tpk_flash_attention_wgmma_fp8_supported(TP_F16, 197, 64), 0);
        char *buf = dev_alloc(TP_E4M3, 1 << 16);
        ck_assert_int_eq(tpk_flash_attention_wgmma_fp8(buf, (const float *)(buf + 32768), buf + 8192, TP_F16, NULL,
                                                       1, 4, 1, 64, 0.1f, g_stream),
                         (int)cudaErrorInvalidValue);
        printf("  ok    %s: refused\n", g_case);
        return;
    }
    /* T: 1 key; 7; 32 and 33 (one 32-key chunk; 32 + 1); 64, 65 (a full chunk; + a 32-key tail); 100 (+ a 64-key
     * tail); ViT's 197 (3 x 64 + a 32-key tail), 256, 257, 577; B 1 and 3, H 1 and 12. Scale 0.25 on the exact
     * data gives logits of standard deviation ~3.7 (peaked softmaxes whose max moves across chunks). */
    static const int Ts[] = {1, 7, 32, 33, 64, 65, 100, 197, 256, 257, 577};
    const int ex = _i == 0;
    uint64_t seed = 71000 + 1000 * (uint64_t)_i;
    const float sc = ex ? 0.25f : 0.125f;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        run_shape_w8(1, Ts[ti], 1, sc, seed++, ex, 0, 3, 0);
        run_shape_w8(3, Ts[ti], 12, sc, seed++, ex, 0, Ts[ti] > 257 ? 1 : 3, 0);
    }
    run_shape_w8(2, 197, 3, -sc, seed++, ex, 0, 1, 0);   /* negative scale */
    run_shape_w8(2, 70, 2, 0.0f, seed++, ex, 0, 1, 0);   /* uniform weights */
    run_shape_w8(2, 197, 2, sc, seed++, ex, 0, 3, 70);   /* NaN rows after the input, poison after the output */
    run_shape_w8(1, 7, 3, sc, seed++, ex, 0, 3, 70);
    if (!ex) {
        run_shape_w8(2, 197, 12, sc, seed++, 0, 1, 2, 0); /* near-flat: cosine >= 0.999 against FP32 */
        run_shape_w8(2, 577, 3, sc, seed++, 0, 1, 1, 0);
    }
}
END_TEST

START_TEST(test_fp8_wgmma_rejects) {
    SET_CASE("wgmma fp8 rejects");
    char *buf = dev_alloc(TP_E4M3, 1 << 16);
    const float *sc = (const float *)(buf + 32768);
    const rejected_call r[] = {
        {"D = 128", tpk_flash_attention_wgmma_fp8(buf, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 128, 0.1f, g_stream)},
        {"D = 32", tpk_flash_attention_wgmma_fp8(buf, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 32, 0.1f, g_stream)},
        {"f32 output", tpk_flash_attention_wgmma_fp8(buf, sc, buf + 8192, TP_F32, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"e4m3 output without scale",
         tpk_flash_attention_wgmma_fp8(buf, sc, buf + 8192, TP_E4M3, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"no qkv scales", tpk_flash_attention_wgmma_fp8(buf, NULL, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"qkv not 16-byte aligned",
         tpk_flash_attention_wgmma_fp8(buf + 8, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"out not 16-byte aligned",
         tpk_flash_attention_wgmma_fp8(buf, sc, buf + 8200, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"NULL qkv", tpk_flash_attention_wgmma_fp8(NULL, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"NULL out", tpk_flash_attention_wgmma_fp8(buf, sc, NULL, TP_F16, NULL, 1, 4, 1, 64, 0.1f, g_stream)},
        {"T beyond shared memory",
         tpk_flash_attention_wgmma_fp8(buf, sc, buf + 8192, TP_F16, NULL, 1, 100000, 1, 64, 0.1f, g_stream)},
        {"negative T", tpk_flash_attention_wgmma_fp8(buf, sc, buf + 8192, TP_F16, NULL, 1, -1, 1, 64, 0.1f, g_stream)},
        {"negative H", tpk_flash_attention_wgmma_fp8(buf, sc, buf + 8192, TP_F16, NULL, 1, 4, -1, 64, 0.1f, g_stream)},
        {"variant 4", tpk_flash_attention_wgmma_fp8_variant(buf, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, 4,
                                                            g_stream)},
        {"variant -1", tpk_flash_attention_wgmma_fp8_variant(buf, sc, buf + 8192, TP_F16, NULL, 1, 4, 1, 64, 0.1f, -1,
                                                             g_stream)},
    };
    check_rejected(r, sizeof r / sizeof r[0]);
    ck_assert_int_eq(tpk_flash_attention_wgmma_fp8(NULL, NULL, NULL, TP_F16, NULL, 0, 4, 1, 64, 0.1f, g_stream), 0);
    ck_assert_int_eq(tpk_flash_attention_wgmma_fp8(NULL, NULL, NULL, TP_E4M3, NULL, 2, 0, 1, 64, 0.1f, g_stream), 0);
}
END_TEST

/* Graph capture of the FP8 wgmma kernel (every variant): the replay equals an eager launch bit for bit. */
START_TEST(test_fp8_wgmma_graph) {
    if (!is_sm90()) return; /* refused everywhere else: test_fp8_wgmma_attention */
    const int B = 3, T = 197, H = 12, D = 64;
    const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
    for (int variant = 0; variant <= N_W8_VARIANTS; variant++) {
        SET_CASE("wgmma fp8 graph capture e4m3->e4m3 v%d B=%d T=%d H=%d", variant, B, T, H);
        float *qkv = make_qkv(TP_F16, n_in, 72000, 2.0, 1);
        float s[3], osc = 1.0f / 32.0f;
        double rms[3];
        qkv_scales(qkv, B, T, H, D, s, rms);
        const fp8_launch_ctx ctx = {upload_e4m3_qkv(qkv, B, T, H, D, s, n_in), dev_floats(s, 3), dev_floats(&osc, 1),
                                    B, T, H, D, variant, 1};
        check_fp8_graph(&ctx, n_out);
        release_all();
    }
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------------------------- */

/* new_tcase (gpu_check.h): 600 s a test, for fp64 CPU references and emulation of up to ~4 GFLOP per shape */
Suite *gpu_attention_fp8_suite(void) {
    Suite *s = suite_create("gpu_attention_fp8");
    tcase_add_loop_test(new_tcase(s, "fp8_attention"), test_fp8_attention, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "fp8_attention_flat"), test_fp8_attention_flat, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "fp8_attention_dims_scales"), test_fp8_attention_dims_scales, 0, N_OF(IN_T));
    tcase_add_loop_test(new_tcase(s, "fp8_attention_padding"), test_fp8_attention_padding, 0, N_OF(IN_T));
    tcase_add_test(new_tcase(s, "fp8_attention_rejects"), test_fp8_attention_rejects);
    tcase_add_test(new_tcase(s, "fp8_attention_graph"), test_fp8_attention_graph);
    tcase_add_loop_test(new_tcase(s, "fp8_wgmma_attention"), test_fp8_wgmma_attention, 0, 2); /* exact, random */
    tcase_add_test(new_tcase(s, "fp8_wgmma_rejects"), test_fp8_wgmma_rejects);
    tcase_add_test(new_tcase(s, "fp8_wgmma_graph"), test_fp8_wgmma_graph);
    return s;
}
