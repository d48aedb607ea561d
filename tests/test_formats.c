/* test_formats.c: the host codecs of src/formats/dtype.c against references written independently here.
 *
 * The references are derived from the format definitions, not from dtype.c's method:
 *   - FP8 decode: the OCP OFP8 formula (-1)^s * 2^(e - bias) * (1 + m / 2^M), subnormals 2^(1 - bias) * m / 2^M,
 *     evaluated with repeated doubling/halving; FP8 encode: brute-force nearest among all decoded finite codes,
 *     ties to the even code (which is the even mantissa: the mantissa's last bit is the code's last bit);
 *   - FP16: IEEE binary16 formula for decode; encode by binary search in the sorted table of all finite
 *     values, with 65536 standing in for the first value past the range so that overflow happens where
 *     IEEE puts it (>= 65520 rounds to Inf);
 *   - BF16: the two bf16 neighbours of a float (truncated bit pattern and the next one) compared by distance
 *     in fp64, ties to even, 2^128 standing in for Inf.
 * Conventions checked (dtype.h): round to nearest, ties to even; FP8 saturates (|x| > max and +-Inf give
 * +-max), NaN gives the NaN code; FP16/BF16 overflow to Inf. The sign of zero is kept: -0.0f encodes to 0x80
 * (FP8) / 0x8000, and negative values too small to represent round to -0 (CUDA's cvt does the same). */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "formats/dtype.h"
#include "formats/precision.h"

/* For loops over thousands of codes: Check's assertions record a mark point on every successful call (a
 * message to the parent in fork mode); this reaches Check only on failure. */
#define REQUIRE(cond, ...)                      \
    do {                                        \
        if (!(cond)) ck_abort_msg(__VA_ARGS__); \
    } while (0)

#define f2u tp_f32_bits      /* formats/dtype.h */
#define u2f tp_f32_from_bits

/* 2^k by repeated doubling or halving: exact for the small |k| used here, and not ldexp, which dtype.c uses. */
static double pow2(int k) {
    double p = 1.0;
    for (; k > 0; k--) p *= 2.0;
    for (; k < 0; k++) p *= 0.5;
    return p;
}

/* ---- FP8 reference ----------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int ebits, mbits, bias;
    int has_inf;       /* E5M2: exponent all ones is Inf/NaN (IEEE-like); E4M3: only S.1111.111 is NaN */
    uint8_t max_code;  /* largest finite, positive */
    double max_value;
    uint8_t (*enc)(float);
    float (*dec)(uint8_t);
} fp8_fmt;

static const fp8_fmt E4M3 = {"e4m3", 4, 3, 7, 0, 0x7E, 448.0, tp_f32_to_e4m3, tp_e4m3_to_f32};
static const fp8_fmt E5M2 = {"e5m2", 5, 2, 15, 1, 0x7B, 57344.0, tp_f32_to_e5m2, tp_e5m2_to_f32};

enum { FIN = 0, INF = 1, NAN_ = 2 };

/* OCP OFP8 rev 1.0, section 5.3 (value of a code). */
static double fp8_ref_decode(const fp8_fmt *f, unsigned code, int *kind) {
    unsigned s = code >> 7, e = (code >> f->mbits) & ((1u << f->ebits) - 1), m = code & ((1u << f->mbits) - 1);
    unsigned emax = (1u << f->ebits) - 1, mmax = (1u << f->mbits) - 1;
    *kind = FIN;
    if (f->has_inf && e == emax) {
        *kind = m == 0 ? INF : NAN_;
        return m == 0 ? (s ? -INFINITY : INFINITY) : NAN;
    }
    if (!f->has_inf && e == emax && m == mmax) {
        *kind = NAN_;
        return NAN;
    }
    double v = e == 0 ? pow2(1 - f->bias) * ((double)m / (double)(1u << f->mbits))
                      : pow2((int)e - f->bias) * (1.0 + (double)m / (double)(1u << f->mbits));
    return s ? -v : v;
}

/* Nonnegative finite values in code order (codes 0..max_code are increasing in value). */
static int fp8_table(const fp8_fmt *f, double *vals) {
    int n = 0, kind;
    for (unsigned c = 0; c <= f->max_code; c++) {
        vals[n++] = fp8_ref_decode(f, c, &kind);
        REQUIRE(kind == FIN, "%s: code 0x%02X below max is not finite", f->name, c);
    }
    return n;
}

/* Brute force over every finite magnitude: the nearest, ties to the even code. Saturation falls out: the
 * nearest finite value of anything above max is max. */
static uint8_t fp8_ref_encode(const fp8_fmt *f, const double *vals, int n, float x) {
    uint8_t sign = (f2u(x) >> 31) ? 0x80 : 0;
    if (isnan(x)) return sign | 0x7F;
    if (isinf(x)) return sign | f->max_code;
    double a = fabs((double)x);
    /* above max the distances to all values round to the same double for huge x: decide before comparing */
    if (a >= vals[n - 1]) return sign | f->max_code;
    int best = 0;
    double bd = fabs(a - vals[0]);
    for (int i = 1; i < n; i++) {
        double d = fabs(a - vals[i]);
        if (d < bd || (d == bd && (i & 1) == 0)) best = i, bd = d;
    }
    return sign | (uint8_t)best;
}

static int fp8_is_nan_code(const fp8_fmt *f, uint8_t c) {
    return f->has_inf ? (c & 0x7F) > 0x7C : (c & 0x7F) == 0x7F;
}

/* ---- (a) FP8 decode tables --------------------------------------------------------------------------- */

static void check_fp8_decode(const fp8_fmt *f) {
    int nan = 0, inf = 0;
    for (unsigned c = 0; c < 256; c++) {
        int kind;
        double want = fp8_ref_decode(f, c, &kind);
        float got = f->dec((uint8_t)c);
        if (kind == NAN_) {
            REQUIRE(isnan(got), "%s 0x%02X: want NaN, got %a", f->name, c, (double)got);
            nan++;
        } else {
            inf += kind == INF;
            /* bit identity, so that -0 (0x80) decodes with its sign */
            REQUIRE(f2u(got) == f2u((float)want), "%s 0x%02X: want %a, got %a", f->name, c, want,
                          (double)got);
        }
    }
    ck_assert_int_eq(nan, f->has_inf ? 6 : 2);
    ck_assert_int_eq(inf, f->has_inf ? 2 : 0);
}

START_TEST(test_e4m3_decode_table) {
    check_fp8_decode(&E4M3);
    ck_assert(isnan(tp_e4m3_to_f32(0x7F)) && isnan(tp_e4m3_to_f32(0xFF)));
    ck_assert_float_eq(tp_e4m3_to_f32(0x7E), 448.0f);
    ck_assert_float_eq(tp_e4m3_to_f32(0xFE), -448.0f);
    ck_assert_float_eq(tp_e4m3_to_f32(0x7C), 384.0f); /* exponent all ones is normal in E4M3 */
    ck_assert_float_eq(tp_e4m3_to_f32(0x08), 0x1p-6f); /* min normal */
    ck_assert_float_eq(tp_e4m3_to_f32(0x01), 0x1p-9f); /* min subnormal */
    ck_assert_float_eq(tp_e4m3_to_f32(0x07), 7 * 0x1p-9f);
    ck_assert_float_eq(tp_e4m3_to_f32(0x38), 1.0f);
    ck_assert(signbit(tp_e4m3_to_f32(0x80)) && tp_e4m3_to_f32(0x80) == 0.0f);
    ck_assert_double_eq(tp_dtype_info(TP_E4M3)->max_finite, 448.0);
}
END_TEST

START_TEST(test_e5m2_decode_table) {
    check_fp8_decode(&E5M2);
    ck_assert_float_eq(tp_e5m2_to_f32(0x7B), 57344.0f);
    ck_assert_float_eq(tp_e5m2_to_f32(0xFB), -57344.0f);
    ck_assert(isinf(tp_e5m2_to_f32(0x7C)) && tp_e5m2_to_f32(0x7C) > 0);
    ck_assert(isinf(tp_e5m2_to_f32(0xFC)) && tp_e5m2_to_f32(0xFC) < 0);
    for (unsigned c = 0x7D; c <= 0x7F; c++) ck_assert(isnan(tp_e5m2_to_f32((uint8_t)c)) && isnan(tp_e5m2_to_f32((uint8_t)(c | 0x80))));
    ck_assert_float_eq(tp_e5m2_to_f32(0x04), 0x1p-14f); /* min normal */
    ck_assert_float_eq(tp_e5m2_to_f32(0x01), 0x1p-16f); /* min subnormal */
    ck_assert_float_eq(tp_e5m2_to_f32(0x3C), 1.0f);
    ck_assert_double_eq(tp_dtype_info(TP_E5M2)->max_finite, 57344.0);
}
END_TEST

/* ---- (b) FP8 encode ---------------------------------------------------------------------------------- */

static void check_fp8_encode(const fp8_fmt *f) {
    /* every finite code, both signs, round-trips; 0x80 (-0) included: the sign of zero is kept */
    for (unsigned c = 0; c < 256; c++) {
        int kind;
        fp8_ref_decode(f, c, &kind);
        if (kind != FIN) continue;
        uint8_t got = f->enc(f->dec((uint8_t)c));
        REQUIRE(got == c, "%s: encode(decode(0x%02X)) = 0x%02X", f->name, c, got);
    }
    ck_assert_int_eq(f->enc(-0.0f), 0x80);
    ck_assert_int_eq(f->enc(0.0f), 0x00);

    /* midpoints of all adjacent pairs (0 and the smallest subnormal, across binades, up to the largest
     * pair below max): ties to the even code; one float ulp either side: the nearer one */
    for (unsigned c = 0; c < f->max_code; c++) {
        float lo = f->dec((uint8_t)c), hi = f->dec((uint8_t)(c + 1));
        float mid = (lo + hi) * 0.5f; /* exact: two FP8 values need at most 5 significant bits */
        REQUIRE((double)mid == ((double)lo + (double)hi) / 2, "%s: midpoint of 0x%02X inexact", f->name, c);
        uint8_t even = (c & 1) ? (uint8_t)(c + 1) : (uint8_t)c;
        for (int s = 0; s < 2; s++) {
            float sg = s ? -1.0f : 1.0f;
            uint8_t sb = s ? 0x80 : 0;
            REQUIRE(f->enc(sg * mid) == (sb | even), "%s: %a (tie 0x%02X/0x%02X) -> 0x%02X, want 0x%02X",
                          f->name, (double)(sg * mid), c, c + 1, f->enc(sg * mid), sb | even);
            float above = nextafterf(mid, INFINITY), below = nextafterf(mid, 0.0f);
            REQUIRE(f->enc(sg * above) == (sb | (c + 1)), "%s: %a -> 0x%02X, want 0x%02X", f->name,
                          (double)(sg * above), f->enc(sg * above), sb | (c + 1));
            REQUIRE(f->enc(sg * below) == (sb | c), "%s: %a -> 0x%02X, want 0x%02X", f->name,
                          (double)(sg * below), f->enc(sg * below), sb | c);
        }
    }

    /* saturation: anything above max, up to Inf, gives max (CUDA __NV_SATFINITE) */
    float maxf = (float)f->max_value;
    float ulp_fp8 = maxf - f->dec((uint8_t)(f->max_code - 1));
    const float big[] = {nextafterf(maxf, INFINITY), maxf + ulp_fp8 * 0.5f, maxf + ulp_fp8,
                         maxf * 2.0f,                1e20f,                  FLT_MAX,
                         INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        REQUIRE(f->enc(big[i]) == f->max_code, "%s: %a -> 0x%02X, want max 0x%02X", f->name, (double)big[i],
                      f->enc(big[i]), f->max_code);
        REQUIRE(f->enc(-big[i]) == (0x80 | f->max_code), "%s: %a -> 0x%02X", f->name, -(double)big[i],
                      f->enc(-big[i]));
    }
    /* NaN (quiet, signalling, negative) -> a NaN code */
    const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFFC00000u, 0x7FFFFFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint8_t c = f->enc(u2f(nans[i]));
        REQUIRE(fp8_is_nan_code(f, c) && isnan(f->dec(c)), "%s: NaN 0x%08X -> 0x%02X", f->name, nans[i], c);
    }
    /* underflow: below half the smallest subnormal -> signed zero; denormal floats too */
    float tiny = f->dec(0x01);
    ck_assert_int_eq(f->enc(tiny * 0.5f), 0x00);
    ck_assert_int_eq(f->enc(nextafterf(tiny * 0.5f, 1.0f)), 0x01);
    ck_assert_int_eq(f->enc(1e-30f), 0x00);
    ck_assert_int_eq(f->enc(-1e-30f), 0x80);
    ck_assert_int_eq(f->enc(u2f(0x00000001u)), 0x00);
}

START_TEST(test_e4m3_encode) {
    check_fp8_encode(&E4M3);
    /* hand-picked values */
    ck_assert_int_eq(tp_f32_to_e4m3(1.0625f), 0x38); /* tie 1 / 1.125 -> 1 (mantissa 000) */
    ck_assert_int_eq(tp_f32_to_e4m3(1.1875f), 0x3A); /* tie 1.125 / 1.25 -> 1.25 (mantissa 010) */
    ck_assert_int_eq(tp_f32_to_e4m3(400.0f), 0x7C);  /* tie 384 / 416 -> 384 (mantissa 100) */
    ck_assert_int_eq(tp_f32_to_e4m3(432.0f), 0x7E);  /* tie 416 / 448 -> 448 (mantissa 110) */
    ck_assert_int_eq(tp_f32_to_e4m3(464.0f), 0x7E);  /* would be the 448/480 tie: saturates */
    ck_assert_int_eq(tp_f32_to_e4m3(0x1p-10f), 0x00); /* tie 0 / 2^-9 -> 0 */
    ck_assert_int_eq(tp_f32_to_e4m3(3 * 0x1p-10f), 0x02); /* tie 2^-9 / 2^-8 -> 2^-8 (code 2) */
    ck_assert_int_eq(tp_f32_to_e4m3(15 * 0x1p-10f), 0x08); /* tie max subnormal / min normal -> min normal */
}
END_TEST

START_TEST(test_e5m2_encode) {
    check_fp8_encode(&E5M2);
    ck_assert_int_eq(tp_f32_to_e5m2(1.125f), 0x3C);  /* tie 1 / 1.25 -> 1 */
    ck_assert_int_eq(tp_f32_to_e5m2(1.375f), 0x3E);  /* tie 1.25 / 1.5 -> 1.5 */
    ck_assert_int_eq(tp_f32_to_e5m2(53248.0f), 0x7A); /* tie 49152 / 57344 -> 49152 (mantissa 10) */
    ck_assert_int_eq(tp_f32_to_e5m2(61440.0f), 0x7B); /* the 57344/65536 tie saturates */
    ck_assert_int_eq(tp_f32_to_e5m2(INFINITY), 0x7B); /* saturating: Inf -> max, not the Inf code */
}
END_TEST

/* ---- (c) FP16 ---------------------------------------------------------------------------------------- */

/* IEEE 754 binary16. */
static double f16_ref_decode(uint16_t h, int *kind) {
    unsigned s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    *kind = FIN;
    if (e == 31) {
        *kind = m ? NAN_ : INF;
        return m ? NAN : (s ? -INFINITY : INFINITY);
    }
    double v = e == 0 ? pow2(-14) * (m / 1024.0) : pow2((int)e - 15) * (1.0 + m / 1024.0);
    return s ? -v : v;
}

START_TEST(test_f16_all_codes) {
    for (uint32_t h = 0; h < 65536; h++) {
        int kind;
        double want = f16_ref_decode((uint16_t)h, &kind);
        float f = tp_f16_to_f32((uint16_t)h);
        if (kind == NAN_) {
            REQUIRE(isnan(f), "f16 0x%04X: want NaN", h);
            uint16_t back = tp_f32_to_f16(f);
            REQUIRE((back & 0x7C00) == 0x7C00 && (back & 0x3FF), "f16 NaN 0x%04X -> 0x%04X not NaN", h, back);
            continue;
        }
        REQUIRE(f2u(f) == f2u((float)want), "f16 0x%04X: want %a, got %a", h, want, (double)f);
        uint16_t back = tp_f32_to_f16(f);
        REQUIRE(back == h, "f16: encode(decode(0x%04X)) = 0x%04X", h, back);
    }
}
END_TEST

START_TEST(test_f16_ties_and_overflow) {
    /* every adjacent pair of finite values, both signs: the midpoint goes to the even code, one float ulp
     * off it to the nearer; this covers subnormals, the subnormal/normal boundary and every binade */
    for (uint32_t h = 0; h < 0x7BFF; h++) {
        float lo = tp_f16_to_f32((uint16_t)h), hi = tp_f16_to_f32((uint16_t)(h + 1));
        float mid = (lo + hi) * 0.5f;
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        for (int s = 0; s < 2; s++) {
            float sg = s ? -1.0f : 1.0f;
            uint16_t sb = s ? 0x8000 : 0;
            REQUIRE(tp_f32_to_f16(sg * mid) == (sb | even), "f16 tie %a -> 0x%04X, want 0x%04X",
                          (double)(sg * mid), tp_f32_to_f16(sg * mid), sb | even);
            REQUIRE(tp_f32_to_f16(sg * nextafterf(mid, INFINITY)) == (sb | (h + 1)), "f16 above tie %a",
                          (double)mid);
            REQUIRE(tp_f32_to_f16(sg * nextafterf(mid, 0.0f)) == (sb | h), "f16 below tie %a", (double)mid);
        }
    }
    /* named cases */
    ck_assert_int_eq(tp_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
    ck_assert_int_eq(tp_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    ck_assert_int_eq(tp_f32_to_f16(0x1p-25f), 0x0000);        /* tie 0 / min subnormal */
    ck_assert_int_eq(tp_f32_to_f16(3 * 0x1p-25f), 0x0002);    /* tie 1 / 2 subnormal quanta */
    ck_assert_int_eq(tp_f32_to_f16(5 * 0x1p-25f), 0x0002);    /* tie 2 / 3 */
    ck_assert_int_eq(tp_f32_to_f16(2047 * 0x1p-25f), 0x0400); /* tie max subnormal / min normal */
    ck_assert_int_eq(tp_f32_to_f16(0x1p-26f), 0x0000);
    ck_assert_int_eq(tp_f32_to_f16(-0x1p-26f), 0x8000);
    ck_assert_int_eq(tp_f32_to_f16(-0.0f), 0x8000);
    /* overflow: 65504 is max; 65520 (halfway to 2^16) is a tie whose even side is Inf */
    ck_assert_int_eq(tp_f32_to_f16(65504.0f), 0x7BFF);
    ck_assert_int_eq(tp_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7BFF);
    ck_assert_int_eq(tp_f32_to_f16(65520.0f), 0x7C00);
    ck_assert_int_eq(tp_f32_to_f16(-65520.0f), 0xFC00);
    ck_assert_int_eq(tp_f32_to_f16(1e10f), 0x7C00);
    ck_assert_int_eq(tp_f32_to_f16(FLT_MAX), 0x7C00);
    ck_assert_int_eq(tp_f32_to_f16(INFINITY), 0x7C00);
    ck_assert_int_eq(tp_f32_to_f16(-INFINITY), 0xFC00);
    uint16_t n = tp_f32_to_f16(u2f(0x7F800001u)); /* signalling NaN: must not become Inf */
    ck_assert((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
}
END_TEST

/* ---- (d) BF16 ---------------------------------------------------------------------------------------- */

START_TEST(test_bf16_codes_and_ties) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tp_bf16_to_f32((uint16_t)h);
        REQUIRE(f2u(f) == h << 16, "bf16 0x%04X decodes to 0x%08X", h, f2u(f));
        uint16_t back = tp_f32_to_bf16(f);
        if (isnan(f)) REQUIRE(isnan(tp_bf16_to_f32(back)), "bf16 NaN 0x%04X -> 0x%04X", h, back);
        else REQUIRE(back == h, "bf16: encode(decode(0x%04X)) = 0x%04X", h, back);
    }
    /* every adjacent pair, both signs, including (max finite, Inf): the tie pattern is the low half 0x8000 */
    for (uint32_t h = 0; h < 0x7F80; h++) {
        for (uint32_t s = 0; s < 2; s++) {
            uint32_t sb = s << 31;
            uint32_t mid = sb | (h << 16) | 0x8000u;
            uint16_t even = (uint16_t)((sb >> 16) | ((h & 1) ? h + 1 : h));
            REQUIRE(tp_f32_to_bf16(u2f(mid)) == even, "bf16 tie 0x%08X -> 0x%04X, want 0x%04X", mid,
                          tp_f32_to_bf16(u2f(mid)), even);
            REQUIRE(tp_f32_to_bf16(u2f(mid + 1)) == ((sb >> 16) | (h + 1)), "bf16 0x%08X", mid + 1);
            REQUIRE(tp_f32_to_bf16(u2f(mid - 1)) == ((sb >> 16) | h), "bf16 0x%08X", mid - 1);
        }
    }
    ck_assert_int_eq(tp_f32_to_bf16(u2f(0x3F808000u)), 0x3F80);
    ck_assert_int_eq(tp_f32_to_bf16(u2f(0x3F818000u)), 0x3F82);
    ck_assert_int_eq(tp_f32_to_bf16(u2f(0x3F808001u)), 0x3F81);
    ck_assert_int_eq(tp_f32_to_bf16(u2f(0x3F807FFFu)), 0x3F80);
    ck_assert_int_eq(tp_f32_to_bf16(u2f(0x00008000u)), 0x0000); /* denormal float tie -> 0 */
    ck_assert_int_eq(tp_f32_to_bf16(u2f(0x7F7F8000u)), 0x7F80); /* max bf16 / Inf tie -> Inf */
    ck_assert_int_eq(tp_f32_to_bf16(FLT_MAX), 0x7F80);
    ck_assert_int_eq(tp_f32_to_bf16(u2f(0x7F7F7FFFu)), 0x7F7F);
    ck_assert_int_eq(tp_f32_to_bf16(INFINITY), 0x7F80);
    ck_assert_int_eq(tp_f32_to_bf16(-INFINITY), 0xFF80);
    /* NaNs whose payload lives only in the low 16 bits must stay NaN, not turn into Inf */
    const uint32_t nans[] = {0x7F800001u, 0xFF800001u, 0x7FC00000u, 0x7FFFFFFFu, 0x7F80FFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t b = tp_f32_to_bf16(u2f(nans[i]));
        REQUIRE(isnan(tp_bf16_to_f32(b)), "bf16 NaN 0x%08X -> 0x%04X", nans[i], b);
        ck_assert_int_eq(b >> 15, nans[i] >> 31);
    }
}
END_TEST

/* ---- (e) random sweep against the independent references --------------------------------------------- */

/* FP16 reference: sorted finite magnitudes (code order), then 65536 as the virtual next value (code 0x7C00). */
static float g_f16_tab[0x7C01];

static uint16_t f16_ref_encode(float x) {
    uint16_t sign = (f2u(x) >> 31) ? 0x8000 : 0;
    if (isnan(x)) return sign | 0x7E00;
    double a = fabs((double)x);
    int lo = 0, hi = 0x7C00; /* find the last index with value <= a */
    if (a >= g_f16_tab[hi]) return sign | 0x7C00;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (g_f16_tab[mid] <= a) lo = mid;
        else hi = mid;
    }
    double dl = a - g_f16_tab[lo], dh = g_f16_tab[hi] - a;
    int best = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    return sign | (uint16_t)best;
}

/* BF16 reference: the two neighbours of |x| on the bf16 grid, compared in fp64. */
static uint16_t bf16_ref_encode(float x) {
    uint32_t u = f2u(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (isnan(x)) return sign | 0x7FC0;
    uint32_t au = u & 0x7FFFFFFFu;
    if (au == 0x7F800000u) return sign | 0x7F80;
    uint32_t lo = au >> 16, hi = lo + 1;
    double a = fabs((double)x), vl = (double)u2f(lo << 16);
    double vh = hi == 0x7F80 ? 0x1p128 : (double)u2f(hi << 16);
    double dl = a - vl, dh = vh - a;
    uint32_t best = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    return sign | (uint16_t)best;
}

/* A mix that hits every regime: raw bit patterns (NaN, Inf, denormals, huge), log-uniform magnitudes over
 * the FP8/FP16 ranges, and values within a few float ulps of ties of each format. */
static float random_float(tp_rng *r) {
    uint64_t u = tp_rng_u64(r);
    uint32_t lo32 = (uint32_t)u;
    switch ((u >> 32) % 5) {
    case 0: return u2f(lo32);
    case 1: { /* sign * 2^[-28, 19] * random mantissa */
        uint32_t e = (uint32_t)(127 - 28 + (int)((u >> 40) % 48));
        return u2f((lo32 & 0x807FFFFFu) | (e << 23));
    }
    case 2: { /* near an FP8 tie */
        const fp8_fmt *f = (u >> 40) & 1 ? &E4M3 : &E5M2;
        unsigned c = (unsigned)((u >> 41) % f->max_code);
        float mid = (f->dec((uint8_t)c) + f->dec((uint8_t)(c + 1))) * 0.5f;
        uint32_t b = f2u(mid) + (uint32_t)((int)((u >> 50) % 5) - 2);
        return u2f(b | (lo32 & 0x80000000u));
    }
    case 3: { /* near an FP16 tie */
        unsigned h = (unsigned)((u >> 40) % 0x7BFF);
        float mid = (tp_f16_to_f32((uint16_t)h) + tp_f16_to_f32((uint16_t)(h + 1))) * 0.5f;
        uint32_t b = f2u(mid) + (uint32_t)((int)((u >> 56) % 5) - 2);
        return u2f(b | (lo32 & 0x80000000u));
    }
    default: /* near a BF16 tie */
        return u2f((lo32 & 0xFFFF0000u) | (uint32_t)(0x8000 + (int)((u >> 40) % 5) - 2));
    }
}

START_TEST(test_random_sweep) {
    double t43[256], t52[256];
    int n43 = fp8_table(&E4M3, t43), n52 = fp8_table(&E5M2, t52);
    for (int i = 0; i < 0x7C00; i++) {
        int kind;
        g_f16_tab[i] = (float)f16_ref_decode((uint16_t)i, &kind);
    }
    g_f16_tab[0x7C00] = 65536.0f;

    tp_rng r;
    tp_rng_seed(&r, 20240601);
    long bad16 = 0, badbf = 0, bad43 = 0, bad52 = 0;
    const long N = 1000000;
    for (long i = 0; i < N; i++) {
        float x = random_float(&r);
        uint16_t h = tp_f32_to_f16(x), hr = f16_ref_encode(x);
        if (isnan(x) ? !isnan(tp_f16_to_f32(h)) : h != hr) {
            if (bad16++ < 5) fprintf(stderr, "f16: x = %a (0x%08X): got 0x%04X, want 0x%04X\n", (double)x, f2u(x), h, hr);
        }
        uint16_t b = tp_f32_to_bf16(x), br = bf16_ref_encode(x);
        if (isnan(x) ? !isnan(tp_bf16_to_f32(b)) : b != br) {
            if (badbf++ < 5) fprintf(stderr, "bf16: x = %a (0x%08X): got 0x%04X, want 0x%04X\n", (double)x, f2u(x), b, br);
        }
        uint8_t q = tp_f32_to_e4m3(x), qr = fp8_ref_encode(&E4M3, t43, n43, x);
        if (isnan(x) ? !fp8_is_nan_code(&E4M3, q) : q != qr) {
            if (bad43++ < 5) fprintf(stderr, "e4m3: x = %a (0x%08X): got 0x%02X, want 0x%02X\n", (double)x, f2u(x), q, qr);
        }
        uint8_t p = tp_f32_to_e5m2(x), pr = fp8_ref_encode(&E5M2, t52, n52, x);
        if (isnan(x) ? !fp8_is_nan_code(&E5M2, p) : p != pr) {
            if (bad52++ < 5) fprintf(stderr, "e5m2: x = %a (0x%08X): got 0x%02X, want 0x%02X\n", (double)x, f2u(x), p, pr);
        }
    }
    REQUIRE(bad16 == 0 && badbf == 0 && bad43 == 0 && bad52 == 0,
                  "mismatches in %ld samples: f16 %ld, bf16 %ld, e4m3 %ld, e5m2 %ld (first ones on stderr)", N, bad16,
                  badbf, bad43, bad52);
}
END_TEST

/* ---- bulk conversion and the traits table ------------------------------------------------------------ */

START_TEST(test_convert_roundtrip) {
    enum { N = 4096 };
    static float src[N], back[N];
    static uint8_t buf[N * 8];
    tp_rng r;
    tp_rng_seed(&r, 7);
    for (int i = 0; i < N; i++) src[i] = (float)(tp_rng_normal(&r) * 10.0);
    /* element-wise agreement with the scalar codecs, for every type */
    tp_convert_from_f32(TP_F16, src, buf, N, 1.0f);
    for (int i = 0; i < N; i++) REQUIRE(((uint16_t *)buf)[i] == tp_f32_to_f16(src[i]), "f16 %d", i);
    tp_convert_to_f32(TP_F16, buf, back, N, 1.0f);
    for (int i = 0; i < N; i++) REQUIRE(back[i] == tp_f16_to_f32(((uint16_t *)buf)[i]), "f16 back %d", i);
    tp_convert_from_f32(TP_BF16, src, buf, N, 1.0f);
    for (int i = 0; i < N; i++) REQUIRE(((uint16_t *)buf)[i] == tp_f32_to_bf16(src[i]), "bf16 %d", i);
    tp_convert_from_f32(TP_F32, src, buf, N, 1.0f);
    ck_assert_int_eq(memcmp(buf, src, sizeof src), 0);
    tp_convert_from_f32(TP_F64, src, buf, N, 1.0f);
    tp_convert_to_f32(TP_F64, buf, back, N, 1.0f);
    ck_assert_int_eq(memcmp(back, src, sizeof src), 0);
    /* FP8 with a power-of-two scale (exact either way): q = sat(rne(x / scale)), x' = q * scale */
    tp_convert_from_f32(TP_E4M3, src, buf, N, 0.25f);
    for (int i = 0; i < N; i++) REQUIRE(buf[i] == tp_f32_to_e4m3(src[i] / 0.25f), "e4m3 %d", i);
    tp_convert_to_f32(TP_E4M3, buf, back, N, 0.25f);
    for (int i = 0; i < N; i++) REQUIRE(back[i] == tp_e4m3_to_f32(buf[i]) * 0.25f, "e4m3 back %d", i);
    tp_convert_from_f32(TP_E5M2, src, buf, N, 2.0f);
    for (int i = 0; i < N; i++) REQUIRE(buf[i] == tp_f32_to_e5m2(src[i] / 2.0f), "e5m2 %d", i);
}
END_TEST

/* KNOWN BUG IN src/formats/dtype.c (this test fails until it is fixed there; the test is right):
 * dtype.h documents q = sat(rne(x / scale)) for any scale, but tp_convert_from_f32 computes x * (1 / scale)
 * in fp32. For scales that are not powers of two the product can differ from the quotient by an ulp and land
 * on the other side of an FP8 rounding boundary (double rounding), e.g. x = 0x1.c7fffep+9, scale = 3:
 * x / 3 = 0x1.2ffffep+8 (just below the 288/320 tie) -> 0x79 (288), but x * 0.33333334f rounds to exactly
 * 304, the tie, -> 0x7A (320). About 1 in 10^7 normally distributed inputs are affected; the inputs below
 * are built next to ties so that the test sees it at once. Fix: divide (src[i] / scale) per element. */
START_TEST(test_convert_fp8_scale_divides_KNOWN_BUG_dtype_c) {
    enum { N = 200000 };
    static float src[N];
    static uint8_t q[N];
    const float scales[] = {3.0f, 0.1f, 1.7f, 448.0f / 3.7f, 0.0123f};
    tp_rng r;
    tp_rng_seed(&r, 11);
    long bad = 0, total = 0;
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
        float s = scales[k];
        /* x = s * (an FP8 tie +- a little), so that x / s lands on or next to a rounding boundary */
        for (int i = 0; i < N; i++) {
            unsigned c = (unsigned)(tp_rng_u64(&r) % 0x7E);
            float mid = (tp_e4m3_to_f32((uint8_t)c) + tp_e4m3_to_f32((uint8_t)(c + 1))) * 0.5f;
            src[i] = nextafterf(mid * s, (tp_rng_u64(&r) & 1) ? INFINITY : 0.0f);
            if (i & 2) src[i] = mid * s;
        }
        tp_convert_from_f32(TP_E4M3, src, q, N, s);
        for (int i = 0; i < N; i++, total++) {
            uint8_t want = tp_f32_to_e4m3(src[i] / s);
            if (q[i] != want && bad++ < 5)
                fprintf(stderr, "convert e4m3: x = %a, scale = %a: got 0x%02X, want e4m3(x / scale = %a) = 0x%02X\n",
                        (double)src[i], (double)s, q[i], (double)(src[i] / s), want);
        }
    }
    REQUIRE(bad == 0, "%ld of %ld scaled conversions differ from sat(rne(x / scale))", bad, total);
}
END_TEST

/* A NaN quotient in a scaled FP8 conversion takes x's sign (dtype.c's rule, which the GPU's converter shares:
 * which sign an invalid operation's NaN carries is the hardware's choice): NaN inputs of either sign, Inf / Inf under
 * an infinite scale, and everything under a NaN scale; finite quotients as before. */
START_TEST(test_convert_fp8_nan_quotient_sign) {
    const float x[] = {NAN, -NAN, INFINITY, -INFINITY, 1.0f, -1.0f, 0.0f, -0.0f};
    uint8_t q[8], r[8];
    tp_convert_from_f32(TP_E4M3, x, q, 8, INFINITY);
    const uint8_t want_inf[] = {0x7F, 0xFF, 0x7F, 0xFF, 0x00, 0x80, 0x00, 0x80}; /* x / Inf: NaN, +-0 */
    for (int i = 0; i < 8; i++) ck_assert_msg(q[i] == want_inf[i], "x %g / Inf: 0x%02X, want 0x%02X", (double)x[i], q[i], want_inf[i]);
    tp_convert_from_f32(TP_E4M3, x, q, 8, NAN);
    for (int i = 0; i < 8; i++) ck_assert_msg(q[i] == (signbit(x[i]) ? 0xFF : 0x7F), "x %g / NaN: 0x%02X", (double)x[i], q[i]);
    tp_convert_from_f32(TP_E4M3, x, q, 8, 2.0f);
    const uint8_t want2[] = {0x7F, 0xFF, 0x7E, 0xFE, tp_f32_to_e4m3(0.5f), tp_f32_to_e4m3(-0.5f), 0x00, 0x80};
    for (int i = 0; i < 8; i++) ck_assert_msg(q[i] == want2[i], "x %g / 2: 0x%02X, want 0x%02X", (double)x[i], q[i], want2[i]);
    tp_convert_from_f32(TP_E5M2, x, r, 8, INFINITY);
    ck_assert(r[2] == 0x7F && r[3] == 0xFF); /* E5M2 likewise */
}
END_TEST

/* The precision-traits table (precision.h): a row for every precision, its name parsed back, and the rules the
 * planner, the executors and the reports rely on when they read it instead of comparing precisions by name. */
START_TEST(test_precision_traits) {
    int n_quantized = 0, n_wo = 0, n_mx = 0;
    for (int i = 0; i < TP_PREC_COUNT; i++) {
        const tp_precision p = (tp_precision)i;
        const tp_precision_traits *t = tp_precision_info(p);
        tp_precision back;
        ck_assert_int_eq(tp_precision_parse(t->name, &back, NULL), TP_OK);
        ck_assert_int_eq(back, p);
        ck_assert_str_eq(tp_precision_name(p), t->name);
        const int q = tp_precision_quantized(p);
        n_quantized += q, n_wo += t->weight_only, n_mx += t->mx_block;
        /* the unquantized ops run in a plain precision of the same activation type */
        const tp_precision_traits *h = tp_precision_info(t->high);
        ck_assert_msg(h->qf == TP_QF_NONE && h->act == t->act, "%s: high %s", t->name, h->name);
        if (!q) ck_assert_int_eq(t->high, p);
        ck_assert(t->act == TP_F32 || t->act == TP_F16 || t->act == TP_BF16);
        /* weight-only: quantized weights, 16-bit activations, no activation scales, no GEMM shape rules of lint's */
        if (t->weight_only)
            ck_assert_msg(q && t->act != TP_F32 && !t->static_act_scales && t->lint_qf == TP_QF_NONE, "%s", t->name);
        else
            ck_assert_int_eq(t->lint_qf, t->qf);
        /* the MX/NV block formats: emulated with BF16 GEMMs on Hopper, and that is the peak they are held to */
        const int mx = t->qf == TP_QF_MXFP8 || t->qf == TP_QF_NVFP4 || t->qf == TP_QF_MXFP4;
        ck_assert_int_eq(t->mx_block, mx && !t->weight_only);
        if (t->mx_block) ck_assert(t->peak_ab == TP_BF16 && t->peak_d == TP_BF16);
        /* split over GPUs: nothing whose scales are calibrated or computed over a whole tensor on one GPU */
        if (t->tensor_parallel) ck_assert(!t->static_act_scales && (!q || t->weight_only));
        ck_assert(t->b200_ratio == 0 || (q && !t->weight_only && t->b200_ratio >= 2.0));
    }
    ck_assert_int_eq(n_quantized, 7);
    ck_assert_int_eq(n_wo, 2);
    ck_assert_int_eq(n_mx, 3);
}
END_TEST

START_TEST(test_traits) {
    tp_dtype t;
    ck_assert_int_eq(tp_dtype_from_st("F8_E4M3", &t), 0);
    ck_assert_int_eq(t, TP_E4M3);
    ck_assert_int_eq(tp_dtype_from_st("F8_E5M2", &t), 0);
    ck_assert_int_eq(t, TP_E5M2);
    ck_assert_int_eq(tp_dtype_from_st("BF16", &t), 0);
    ck_assert_int_eq(t, TP_BF16);
    ck_assert_int_eq(tp_dtype_from_st("F16", &t), 0);
    ck_assert_int_eq(t, TP_F16);
    ck_assert_int_eq(tp_dtype_from_st("bf16", &t), -1); /* safetensors names are upper case */
    ck_assert_int_eq(tp_dtype_from_st("F8_E4M3FNUZ", &t), -1);
    ck_assert_ptr_null(tp_dtype_info(TP_DTYPE_COUNT));
    ck_assert_ptr_null(tp_dtype_info((tp_dtype)-1));
    for (int i = 0; i < TP_DTYPE_COUNT; i++) ck_assert_ptr_nonnull(tp_dtype_info((tp_dtype)i));
    ck_assert_uint_eq(tp_dtype_info(TP_BF16)->bytes, 2);
    ck_assert_uint_eq(tp_dtype_info(TP_E4M3)->bytes, 1);
    ck_assert_double_eq(tp_dtype_info(TP_F16)->max_finite, 65504.0);
    ck_assert_double_eq(tp_dtype_info(TP_BF16)->max_finite, (double)tp_bf16_to_f32(0x7F7F));
    ck_assert_double_eq(tp_dtype_info(TP_F32)->max_finite, (double)FLT_MAX);
}
END_TEST


/* The E4M3 encoder and decoder on the float's bits against the generic double-arithmetic ones (dtype.c): every
 * code decoded alike; every float bit pattern with a stride of 251 (17 million, both signs, every binade, NaNs and
 * Infs) and every pattern within 4096 of each binade edge and of each midpoint between neighbouring E4M3 values
 * (the ties) encoded alike. */
START_TEST(test_e4m3_fast) {
    for (int c = 0; c < 256; c++) {
        const float a = tp_e4m3_to_f32((uint8_t)c), b = tp_e4m3_to_f32_ref((uint8_t)c);
        ck_assert_msg((isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0, "decode 0x%02x: %a vs %a", c, a, b);
    }
    long bad = 0;
#pragma omp parallel for reduction(+ : bad)
    for (int64_t i = 0; i < (int64_t)1 << 32; i += 251) {
        float f;
        const uint32_t u = (uint32_t)i;
        memcpy(&f, &u, 4);
        bad += tp_f32_to_e4m3(f) != tp_f32_to_e4m3_ref(f);
    }
    ck_assert_msg(bad == 0, "%ld strided patterns encode differently", bad);
    long edge_bad = 0;
    float first = 0;
    for (int c = 0; c < 127; c++) { /* around every value and every midpoint to the next one */
        const float v = tp_e4m3_to_f32_ref((uint8_t)c), w = tp_e4m3_to_f32_ref((uint8_t)(c + 1));
        const float pts[2] = {v, c < 126 ? 0.5f * (v + w) : 464.0f};
        for (int p = 0; p < 2; p++)
            for (int d = -4096; d <= 4096; d++) {
                uint32_t u;
                memcpy(&u, &pts[p], 4);
                u = (uint32_t)((int64_t)u + d);
                for (int sgn = 0; sgn < 2; sgn++) {
                    float f;
                    const uint32_t us = u | (sgn ? 0x80000000u : 0);
                    memcpy(&f, &us, 4);
                    if (tp_f32_to_e4m3(f) != tp_f32_to_e4m3_ref(f) && !edge_bad++) first = f;
                }
            }
    }
    ck_assert_msg(edge_bad == 0, "%ld patterns near the E4M3 values and midpoints encode differently, the first %a: "
                  "0x%02x vs 0x%02x", edge_bad, first, tp_f32_to_e4m3(first), tp_f32_to_e4m3_ref(first));
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("formats");
    TCase *tc = tcase_create("codecs");
    tcase_set_timeout(tc, 120); /* the sweep takes ~1 s natively, much longer under valgrind */
    tcase_add_test(tc, test_e4m3_decode_table);
    tcase_add_test(tc, test_e5m2_decode_table);
    tcase_add_test(tc, test_e4m3_encode);
    tcase_add_test(tc, test_e4m3_fast);
    tcase_add_test(tc, test_e5m2_encode);
    tcase_add_test(tc, test_f16_all_codes);
    tcase_add_test(tc, test_f16_ties_and_overflow);
    tcase_add_test(tc, test_bf16_codes_and_ties);
    tcase_add_test(tc, test_random_sweep);
    tcase_add_test(tc, test_convert_roundtrip);
    tcase_add_test(tc, test_convert_fp8_scale_divides_KNOWN_BUG_dtype_c);
    tcase_add_test(tc, test_convert_fp8_nan_quotient_sign);
    tcase_add_test(tc, test_traits);
    tcase_add_test(tc, test_precision_traits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
