/* dtype.h: one table of traits for every storage format, and bit-exact host codecs.
 *
 * Rounding is round-to-nearest, ties-to-even everywhere (IEEE 754-2019 roundTiesToEven). FP8 encoders
 * saturate to the largest finite value (CUDA's __NV_SATFINITE behaviour), which is what quantizers in this
 * field do; NaN maps to the format's NaN. Sources: IEEE 754 (binary16), the bfloat16 layout (top 16 bits of
 * binary32), OCP 8-bit Floating Point Specification (OFP8) rev 1.0 for E4M3/E5M2; summarized in
 * docs/formats.md. */
#ifndef TP_DTYPE_H
#define TP_DTYPE_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "tprof.h"

typedef struct {
    const char *name;        /* tprof's name: "f32", "f16", "bf16", "e4m3", "e5m2", ... */
    const char *st_name;     /* safetensors dtype string: "F32", "F16", "BF16", "F8_E4M3", ... */
    size_t bytes;            /* bytes per element (1 for the 4-bit E2M1: see bits) */
    int bits;                /* bits per element */
    int is_float;
    double max_finite;       /* largest finite value; 0 for integers */
} tp_dtype_traits;

const tp_dtype_traits *tp_dtype_info(tp_dtype t);

/* The bits of a binary32 and back (memcpy: the defined way to type-pun in C). */
static inline uint32_t tp_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float tp_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Looks a safetensors dtype string up; returns 0 and sets *out, or -1 if unknown. */
int tp_dtype_from_st(const char *st_name, tp_dtype *out);

uint16_t tp_f32_to_f16(float f);
float tp_f16_to_f32(uint16_t h);
uint16_t tp_f32_to_bf16(float f);
float tp_bf16_to_f32(uint16_t h);
uint8_t tp_f32_to_e4m3(float f); /* saturating, RNE */
float tp_e4m3_to_f32(uint8_t v);
/* The generic FP8 encoder and decoder at E4M3's parameters (double arithmetic, frexp and ldexp): the reference the
 * two above, on the float's bits, are tested against. */
uint8_t tp_f32_to_e4m3_ref(float f);
float tp_e4m3_to_f32_ref(uint8_t v);
uint8_t tp_f32_to_e5m2(float f); /* saturating, RNE */
float tp_e5m2_to_f32(uint8_t v);

/* Converts n fp32 values to dtype t into dst (n * bytes). For FP8 the values are divided by scale first
 * (q = sat(rne(x / scale)); a NaN quotient, such as Inf / Inf, is the NaN code with x's sign); scale is ignored for
 * other types. */
void tp_convert_from_f32(tp_dtype t, const float *src, void *dst, size_t n, float scale);
/* Converts n values of dtype t to fp32 (times scale for FP8). */
void tp_convert_to_f32(tp_dtype t, const void *src, float *dst, size_t n, float scale);

#endif
