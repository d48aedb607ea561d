#include "formats/dtype.h"

#include <math.h>
#include <string.h>

static const tp_dtype_traits TRAITS[TP_DTYPE_COUNT] = {
    [TP_F32] = {"f32", "F32", 4, 32, 1, 3.4028234663852886e38},
    [TP_F16] = {"f16", "F16", 2, 16, 1, 65504.0},
    [TP_BF16] = {"bf16", "BF16", 2, 16, 1, 3.3895313892515355e38},
    [TP_E4M3] = {"e4m3", "F8_E4M3", 1, 8, 1, 448.0},
    [TP_E5M2] = {"e5m2", "F8_E5M2", 1, 8, 1, 57344.0},
    [TP_F64] = {"f64", "F64", 8, 64, 1, 1.7976931348623157e308},
    [TP_I64] = {"i64", "I64", 8, 64, 0, 0.0},
    /* safetensors has no names for these; "-" never matches a file's dtype string */
    [TP_E2M1] = {"e2m1", "-", 1, 4, 1, 6.0},
    [TP_UE8M0] = {"ue8m0", "F8_E8M0", 1, 8, 1, 1.7014118346046923e38},
    [TP_UE4M3] = {"ue4m3", "-", 1, 8, 1, 448.0},
};

_Static_assert(sizeof(float) == 4, "fp32 must be 4 bytes");
_Static_assert(sizeof(double) == 8, "fp64 must be 8 bytes");

const tp_dtype_traits *tp_dtype_info(tp_dtype t) { return (unsigned)t < TP_DTYPE_COUNT ? &TRAITS[t] : NULL; }

int tp_dtype_from_st(const char *s, tp_dtype *out) {
    for (int i = 0; i < TP_DTYPE_COUNT; i++)
        if (strcmp(TRAITS[i].st_name, s) == 0) {
            *out = (tp_dtype)i;
            return 0;
        }
    return -1;
}


/* binary32 -> binary16, RNE, overflow to Inf (IEEE semantics, as __float2half_rn). */
uint16_t tp_f32_to_f16(float f) {
    uint32_t x = tp_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) return sign | (ax > 0x7F800000u ? 0x7E00u : 0x7C00u);
    if (ax >= 0x477FF000u) return sign | 0x7C00u; /* rounds to >= 65520 -> Inf */
    if (ax < 0x38800000u) {                       /* below 2^-14: subnormal or zero */
        /* value / 2^-24 rounded to nearest even integer; exact in double */
        double v = (double)tp_f32_from_bits(ax) * 16777216.0;
        double r = nearbyint(v); /* default rounding mode is to-nearest-even */
        return sign | (uint16_t)r;
    }
    uint32_t mant = ax & 0x7FFFFFu;
    int32_t exp = (int32_t)(ax >> 23) - 127 + 15;
    uint32_t h = ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return sign | (uint16_t)h;
}

float tp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0) {
        float v = (float)mant * 0x1.0p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return tp_f32_from_bits(sign | 0x7F800000u | (mant << 13));
    return tp_f32_from_bits(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t tp_f32_to_bf16(float f) {
    uint32_t x = tp_f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7FFFu + lsb;
    return (uint16_t)(x >> 16);
}

float tp_bf16_to_f32(uint16_t h) { return tp_f32_from_bits((uint32_t)h << 16); }

/* Generic saturating RNE encoder for OCP FP8 formats with ebits exponent bits and mbits mantissa bits.
 * Works on the magnitude in double: values are snapped to the grid of the binade they fall in (or the
 * subnormal grid), ties to even mantissa, then clamped to max_finite. */
static uint8_t fp8_encode(float f, int mbits, int bias, double maxf, uint8_t max_code, uint8_t nan_code) {
    uint32_t x = tp_f32_bits(f);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    if (isnan(f)) return sign | nan_code;
    double a = fabs((double)f);
    if (a >= maxf) return sign | max_code;
    int min_exp = 1 - bias; /* exponent of the smallest normal */
    int e;
    if (a == 0.0) return sign;
    frexp(a, &e);
    e -= 1; /* a = m * 2^e with m in [1, 2) */
    if (e < min_exp) e = min_exp;
    double quantum = ldexp(1.0, e - mbits);
    double q = nearbyint(a / quantum); /* ties to even */
    double v = q * quantum;
    if (v >= maxf) v = maxf;
    if (v == 0.0) return sign;
    /* encode v exactly */
    frexp(v, &e);
    e -= 1;
    uint32_t code;
    if (e < min_exp) { /* subnormal */
        code = (uint32_t)nearbyint(v / ldexp(1.0, min_exp - mbits));
    } else {
        uint32_t mant = (uint32_t)nearbyint((v / ldexp(1.0, e) - 1.0) * (double)(1u << mbits));
        code = ((uint32_t)(e + bias) << mbits) | mant;
    }
    return sign | (uint8_t)code;
}

static float fp8_decode(uint8_t v, int mbits, int bias) {
    int sign = v & 0x80;
    int exp = (v & 0x7F) >> mbits;
    int mant = v & ((1 << mbits) - 1);
    double r;
    if (exp == 0) r = ldexp((double)mant, 1 - bias - mbits);
    else r = ldexp(1.0 + (double)mant / (double)(1 << mbits), exp - bias);
    return (float)(sign ? -r : r);
}

/* E4M3 both ways on the float's bits (the weights of a large model are billions of values; fp8_encode's frexp,
 * ldexp and nearbyint cost ~30 ns each): the same saturating round-to-nearest-even, checked against fp8_encode on
 * every float with a stride and at every binade edge (test_formats test_e4m3_fast). Normal results (|f| >= 2^-6):
 * the mantissa rounded to 3 bits with the carry into the exponent, rebiased from 127 to 7; subnormal ones: |f| in
 * units of 2^-9, rounded by adding and subtracting 2^23 (exact for values below 2^22, ties to even in the default
 * rounding mode); the code layout makes a subnormal that rounds up to 2^-6 the smallest normal code. */
uint8_t tp_f32_to_e4m3(float f) {
    const uint32_t x = tp_f32_bits(f), ax = x & 0x7FFFFFFFu;
    const uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    if (ax > 0x7F800000u) return sign | 0x7F;       /* NaN */
    if (ax >= 0x43E00000u) return sign | 0x7E;      /* |f| >= 448 (Inf too): saturate */
    if (ax < 0x3C800000u) {                          /* |f| < 2^-6: the subnormal grid, step 2^-9 */
        volatile float t = tp_f32_from_bits(ax) * 512.0f + 0x1.0p23f; /* the product is exact: fused or not */
        return sign | (uint8_t)(t - 0x1.0p23f);
    }
    const uint32_t r = ax + 0x7FFFFu + ((ax >> 20) & 1u); /* round the 20 dropped bits, ties to even */
    const uint32_t code = (r >> 20) - ((127u - 7u) << 3);
    return sign | (uint8_t)(code > 0x7Eu ? 0x7Eu : code);
}

float tp_e4m3_to_f32(uint8_t v) {
    const uint32_t sign = (uint32_t)(v & 0x80) << 24, e = (v >> 3) & 0xFu, m = v & 7u;
    if ((v & 0x7F) == 0x7F) return NAN;
    if (e == 0) { /* subnormal: m * 2^-9, exact */
        const float a = (float)m * 0x1.0p-9f;
        return sign ? -a : a;
    }
    return tp_f32_from_bits(sign | ((e - 7u + 127u) << 23) | (m << 20));
}

/* The generic forms, kept as the reference the fast E4M3 ones are tested against. */
uint8_t tp_f32_to_e4m3_ref(float f) { return fp8_encode(f, 3, 7, 448.0, 0x7E, 0x7F); }
float tp_e4m3_to_f32_ref(uint8_t v) {
    if ((v & 0x7F) == 0x7F) return NAN;
    return fp8_decode(v, 3, 7);
}
uint8_t tp_f32_to_e5m2(float f) { return fp8_encode(f, 2, 15, 57344.0, 0x7B, 0x7F); }
float tp_e5m2_to_f32(uint8_t v) {
    if ((v & 0x7F) == 0x7C) return (v & 0x80) ? -INFINITY : INFINITY;
    if ((v & 0x7F) > 0x7C) return NAN;
    return fp8_decode(v, 2, 15);
}

/* Conversions of at least this many values run on every core (OpenMP): a 70B model's weights are 70 billion. */
#define PAR_MIN (1u << 20)

/* x / scale, a NaN quotient given x's sign: which sign an invalid operation's NaN carries is the hardware's choice
 * (x86 answers Inf / Inf with a negative NaN, a GPU with a positive one), and the E4M3 code keeps the sign, so the
 * rule is spelled out here and in the GPU's converter (exec/cuda/kernels/quantize.cu) alike. */
static inline float scaled(float x, float scale) {
    const float q = x / scale;
    return q == q ? q : copysignf(NAN, x);
}

void tp_convert_from_f32(tp_dtype t, const float *src, void *dst, size_t n, float scale) {
    switch (t) {
    case TP_F32: memcpy(dst, src, n * 4); break;
    case TP_F16:
#pragma omp parallel for if (n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tp_f32_to_f16(src[i]);
        break;
    case TP_BF16:
#pragma omp parallel for if (n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tp_f32_to_bf16(src[i]);
        break;
    case TP_E4M3:
#pragma omp parallel for if (n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = tp_f32_to_e4m3(scaled(src[i], scale));
        break;
    case TP_E5M2:
#pragma omp parallel for if (n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = tp_f32_to_e5m2(scaled(src[i], scale));
        break;
    case TP_F64:
        for (size_t i = 0; i < n; i++) ((double *)dst)[i] = src[i];
        break;
    default: break;
    }
}

void tp_convert_to_f32(tp_dtype t, const void *src, float *dst, size_t n, float scale) {
    switch (t) {
    case TP_F32: memcpy(dst, src, n * 4); break;
    case TP_F16:
        for (size_t i = 0; i < n; i++) dst[i] = tp_f16_to_f32(((const uint16_t *)src)[i]);
        break;
    case TP_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = tp_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    case TP_E4M3:
        for (size_t i = 0; i < n; i++) dst[i] = tp_e4m3_to_f32(((const uint8_t *)src)[i]) * scale;
        break;
    case TP_E5M2:
        for (size_t i = 0; i < n; i++) dst[i] = tp_e5m2_to_f32(((const uint8_t *)src)[i]) * scale;
        break;
    case TP_F64:
        for (size_t i = 0; i < n; i++) dst[i] = (float)((const double *)src)[i];
        break;
    default: break;
    }
}
