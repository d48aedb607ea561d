/* qformat.c: the block-scaled quantizers of qformat.h, the bit-exact reference for every GPU path.
 *
 * Exact arithmetic (a GPU kernel that claims to implement a format must do exactly this; all of it is IEEE
 * round-to-nearest-even, no flush-to-zero, no fast-math, division as a true division, never a multiplication
 * by a reciprocal):
 *
 *   amax       max |x| over the block (or tensor) in FP32. NaN elements are skipped, as fmaxf skips them, so
 *              the order of the reduction does not matter. A partial last block takes the elements present.
 *   fp8,       s = (float)((double)amax / 448.0); s = 1 when that is 0 (amax 0, or amax so small that the
 *   fp8-block  FP32 quotient underflows). The double division rounded to FP32 equals the FP32 division
 *              amax / 448.0f (double rounding through binary64 is innocuous for one binary32 division), so a
 *              kernel may divide in FP32. Stored as FP32. q = E4M3_sat_rne((float)x / s) (FP32 division);
 *              y = e4m3(q) * s in FP32 (one rounding: q * s needs up to 28 significant bits).
 *   mxfp8,     shared_exp = ilogbf(amax) - emax (emax 8 for E4M3, 2 for E2M1; ilogbf is floor(log2) exactly,
 *   mxfp4      subnormal amax included; CUDA has ilogbf), -127 for amax 0, clamped to [-127, 127] (OCP MX v1.0
 *              section 6.3, microxcaling mx_ops.py _shared_exponents). Stored as UE8M0 code shared_exp + 127.
 *              X = 2^shared_exp as FP32 (2^-127 is an FP32 subnormal, exact). q = elem_sat_rne((float)x / X):
 *              the division by a power of two is exact for every FP32 x here. y = elem(q) * X, exact.
 *   nvfp4      s2 = (float)((double)amax_tensor / 2688.0) (2688 = 6 * 448; same remark as fp8: FP32 division
 *              gives the same bits), s2 = 1 when that is 0; or s2 = global_in when the caller passes a
 *              calibrated value > 0. Block: t = (double)amax_block / (6.0 * (double)s2) in FP64, then ONE
 *              rounding of t to E4M3 (saturating RNE; __nv_cvt_double_to_fp8(t, __NV_SATFINITE, __NV_E4M3)
 *              on the GPU). Rounding t to FP32 first would round twice: t can lie closer to an E4M3 midpoint
 *              than FP32 resolves (FP64 does: t is a quotient of a 24-bit by a 26-bit number, so it is either
 *              exactly a midpoint or about 2^-33 or more away, relatively). sd = e4m3(s) as FP32;
 *              d = sd * s2 in FP32; q = E2M1_sat_rne((float)x / d); y = e2m1(q) * sd (exact: at most 6
 *              significant bits); the true value is y * s2 (FP32, one rounding), which tp_dequantize returns.
 *              A block whose s is 0 (amax_block / (6 s2) < 2^-10), or whose d underflows to 0, stores element
 *              codes 0 and dequantizes to +0.
 *              Where ModelOpt's nvfp4_tensor.py differs (qformat.h's rule is followed): it computes t in FP32
 *              (double rounding on rare blocks; tests/fixtures has twelve such blocks), clamps s to >= 2^-9
 *              (a zero block gets s = 1) instead of storing 0, and dequantizes as q * fl(s * s2).
 *
 * Non-finite inputs (defined so that a GPU kernel can match them bit for bit; none of this is meaningful
 * numerically): a NaN element does not enter amax and encodes to the element format's NaN with its own sign
 * (E4M3 S.1111.111; E2M1 has no NaN: S.111, see tp_f32_to_e2m1). A block whose amax is +Inf (an element is
 * +-Inf) gets a NaN scale (FP32 quiet NaN 0x7FC00000, UE8M0 0xFF, UE4M3 0x7F: OCP MX v1.0 makes a NaN scale
 * mean "every element is NaN"), its element codes are 0 and it dequantizes to NaN. For nvfp4 an infinite
 * amax_tensor gives s2 = NaN and then every block is a NaN block. */
#include "formats/qformat.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"

/* The table of qformat.h. TP_QF_NONE is a row too ("none": plain storage, not quantized) so that the
 * table is indexable by every enum value; the quantizers reject it. */
static const tp_qformat_traits QTRAITS[TP_QF_COUNT] = {
    [TP_QF_NONE] = {"none", TP_F32, 32, 0, 1, TP_F32, 0, "plain FP32/FP16/BF16 storage, no quantization"},
    [TP_QF_FP8_TENSOR] = {"fp8", TP_E4M3, 8, 0, 1, TP_F32, 0,
                          "OCP OFP8 rev 1.0 E4M3; per-tensor current scaling amax/448 (NVIDIA Transformer "
                          "Engine); cuBLASLt SCALAR_32F"},
    [TP_QF_FP8_BLOCK128] = {"fp8-block128", TP_E4M3, 8, 128, 128, TP_F32, 0,
                            "DeepSeek-V3 technical report (arXiv:2412.19437) section 3.3: 1x128 activation and "
                            "128x128 weight tiles, scale amax/448; cuBLASLt VEC128_32F / BLK128x128_32F"},
    [TP_QF_MXFP8] = {"mxfp8", TP_E4M3, 8, 32, 1, TP_UE8M0, 0,
                     "OCP Microscaling Formats (MX) v1.0 section 6.3; reference emulator microsoft/microxcaling; "
                     "cuBLASLt VEC32_UE8M0"},
    [TP_QF_NVFP4] = {"nvfp4", TP_E2M1, 4, 16, 1, TP_UE4M3, 1,
                     "NVIDIA TensorRT Model Optimizer nvfp4_tensor.py (two-level scales); cuBLASLt VEC16_UE4M3"},
    [TP_QF_MXFP4] = {"mxfp4", TP_E2M1, 4, 32, 1, TP_UE8M0, 0,
                     "OCP Microscaling Formats (MX) v1.0 section 6.3 (E2M1 elements); microsoft/microxcaling; "
                     "cuBLASLt VEC32_UE8M0"},
};

const tp_qformat_traits *tp_qformat_info(tp_qformat f) {
    return (unsigned)f < TP_QF_COUNT ? &QTRAITS[f] : NULL;
}

/* Exact, case-sensitive match against the table's names ("none" included: it returns TP_QF_NONE). */
int tp_qformat_parse(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TP_QF_COUNT; i++)
        if (strcmp(QTRAITS[i].name, name) == 0) return i;
    return -1;
}


/* ---- E2M1 and UE8M0 codecs ------------------------------------------------------------------------------ */

/* OCP MX v1.0 section 5.3.3 (FP4 E2M1): bias 1, code S.EE.M; E = 0 is the subnormal 0.5 * M. */
static const float E2M1_VALUE[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

/* The grid is so small that RNE is a list of decision points: each midpoint between neighbours goes to the
 * neighbour with the even code (the even mantissa bit), which is why the comparisons alternate between <= and
 * <. Everything >= 5 (the 4|6 midpoint ties to code 6 = 4.0, so strictly above 5) saturates to 6, Inf
 * included. The sign is the input's sign bit, so -0 and negative values that round to zero give 0x8. */
uint8_t tp_f32_to_e2m1(float f) {
    uint8_t sign = (uint8_t)((tp_f32_bits(f) >> 28) & 0x8u);
    float a = fabsf(f);
    uint8_t c;
    if (isnan(f)) c = 7; /* no NaN in E2M1: the documented choice of qformat.h */
    else if (a <= 0.25f) c = 0;  /* 0.25: tie 0 | 0.5 -> code 0 */
    else if (a < 0.75f) c = 1;   /* 0.75: tie 0.5 | 1 -> code 2 */
    else if (a <= 1.25f) c = 2;  /* 1.25: tie 1 | 1.5 -> code 2 */
    else if (a < 1.75f) c = 3;   /* 1.75: tie 1.5 | 2 -> code 4 */
    else if (a <= 2.5f) c = 4;   /* 2.5: tie 2 | 3 -> code 4 */
    else if (a < 3.5f) c = 5;    /* 3.5: tie 3 | 4 -> code 6 */
    else if (a <= 5.0f) c = 6;   /* 5: tie 4 | 6 -> code 6 */
    else c = 7;
    return sign | c;
}

float tp_e2m1_to_f32(uint8_t v) {
    float m = E2M1_VALUE[v & 7u];
    return (v & 8u) ? -m : m;
}

/* floor(log2 f) + 127 clamped to [0, 254] (ilogbf is exact for subnormals). Zero, which UE8M0 cannot
 * represent, gives code 0 = 2^-127, the MX convention for an all-zero block; negative numbers, Inf and NaN
 * give 0xFF (NaN). */
uint8_t tp_f32_to_ue8m0(float f) {
    if (isnan(f) || isinf(f) || f < 0.0f) return 0xFF;
    if (f == 0.0f) return 0;
    int c = ilogbf(f) + 127;
    if (c < 0) c = 0;
    if (c > 254) c = 254; /* unreachable for finite FP32 (ilogbf <= 127) */
    return (uint8_t)c;
}

/* 2^(v - 127) built from its bit pattern: v >= 1 is the FP32 exponent field itself, v = 0 is the subnormal
 * 2^-127 (mantissa bit 22). */
float tp_ue8m0_to_f32(uint8_t v) {
    if (v == 0xFF) return tp_f32_from_bits(0x7FC00000u);
    if (v == 0) return tp_f32_from_bits(0x00400000u);
    return tp_f32_from_bits((uint32_t)v << 23);
}

/* E4M3, saturating RNE, from a non-negative double or NaN with a single rounding (the NVFP4 block-scale rule;
 * see the top of this file for why not through FP32). The magnitude is snapped to the grid of its binade
 * (quantum 2^(e-3), the subnormal grid 2^-9 below 2^-6): a / quantum is exact (a power-of-two scaling of a
 * double far from the double's range ends) and nearbyint rounds ties to even in the default rounding mode.
 * The snapped value is an E4M3 value, exact in FP32, so tp_f32_to_e4m3 encodes it without rounding. */
static uint8_t e4m3_from_f64_sat(double a) {
    if (isnan(a)) return 0x7F;
    if (a >= 448.0) return 0x7E;
    if (a <= 0.0) return 0x00;
    int e = ilogb(a);
    if (e < -6) e = -6;
    double quantum = ldexp(1.0, e - 3);
    double v = nearbyint(a / quantum) * quantum;
    return tp_f32_to_e4m3((float)v);
}

/* ---- block geometry and per-block scales ---------------------------------------------------------------- */

typedef struct {
    const tp_qformat_traits *t;
    tp_qformat f;
    int64_t rows, K;
    int64_t wr, bk;   /* block extent: rows, elements along K (per tensor: the whole tensor) */
    int64_t nrb, nkb; /* scale grid: row blocks, K blocks */
    size_t n;         /* rows * K */
    size_t elem_bytes, scale_bytes, scale_size;
} qgeom;

static tp_status make_geom(tp_qformat f, int64_t rows, int64_t K, int is_weight, qgeom *g, tp_error *err) {
    const tp_qformat_traits *t = tp_qformat_info(f);
    if (!t || f == TP_QF_NONE) return tp_fail(err, TP_ERR_ARG, "qformat: unknown quantized format %d", (int)f);
    if (rows < 1 || K < 1)
        return tp_fail(err, TP_ERR_ARG, "qformat %s: rows and K must be >= 1 (got %lld x %lld)", t->name,
                       (long long)rows, (long long)K);
    if (rows > INT64_MAX / K || (uint64_t)(rows * K) > (uint64_t)(SIZE_MAX / 4))
        return tp_fail(err, TP_ERR_ARG, "qformat %s: %lld x %lld elements is too many", t->name, (long long)rows,
                       (long long)K);
    memset(g, 0, sizeof *g);
    g->t = t;
    g->f = f;
    g->rows = rows;
    g->K = K;
    g->n = (size_t)(rows * K);
    if (t->block == 0) { /* per tensor: one block */
        g->wr = rows;
        g->bk = K;
    } else {
        g->wr = (f == TP_QF_FP8_BLOCK128 && is_weight) ? t->weight_rows : 1;
        g->bk = t->block;
    }
    g->nrb = (rows + g->wr - 1) / g->wr;
    g->nkb = (K + g->bk - 1) / g->bk;
    g->scale_size = t->scale == TP_F32 ? 4 : 1;
    g->scale_bytes = (size_t)(g->nrb * g->nkb) * g->scale_size;
    g->elem_bytes = t->bits == 4 ? (g->n + 1) / 2 : g->n;
    return TP_OK;
}

/* How one block's elements are encoded and decoded. */
typedef struct {
    float div;    /* q = enc(x / div) */
    float mult;   /* y = dec(q) * mult (NVFP4: excludes s2) */
    int zero;     /* store every element as code 0 (NaN scale, NVFP4 scale 0 or underflowed divisor) */
    uint8_t code; /* UE8M0 / UE4M3 scale code */
} blockscale;

/* Below this many elements a tensor is quantized on one thread (a parallel region costs microseconds). Above it the
 * blocks are shared among threads: each block's arithmetic is its own, so the codes and scales are the same bits
 * whatever the thread count (test_qformat's golden fixtures check them). */
#define QPAR_MIN ((int64_t)1 << 18)

static float block_amax(const float *x, int64_t K, int64_t r0, int64_t r1, int64_t k0, int64_t k1) {
    float m = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        const float *row = x + r * K;
        for (int64_t k = k0; k < k1; k++) {
            float a = fabsf(row[k]);
            if (a > m) m = a; /* false for NaN: skipped */
        }
    }
    return m;
}

/* The fp8 / fp8-block128 scale, also the NVFP4 s2 rule with div = 2688. */
static float amax_scale(float amax, double div) {
    if (isinf(amax)) return tp_f32_from_bits(0x7FC00000u);
    float s = (float)((double)amax / div);
    return s == 0.0f ? 1.0f : s;
}

static blockscale block_scale(const qgeom *g, float amax, float s2) {
    blockscale b = {1.0f, 1.0f, 0, 0};
    switch (g->f) {
    case TP_QF_FP8_TENSOR:
    case TP_QF_FP8_BLOCK128:
        b.div = b.mult = amax_scale(amax, 448.0);
        b.zero = isnan(b.div);
        break;
    case TP_QF_MXFP8:
    case TP_QF_MXFP4: {
        if (isinf(amax)) {
            b.code = 0xFF;
            b.zero = 1;
        } else {
            int emax = g->t->elem == TP_E4M3 ? 8 : 2;
            int se = amax == 0.0f ? -127 : ilogbf(amax) - emax;
            if (se < -127) se = -127;
            if (se > 127) se = 127;
            b.code = (uint8_t)(se + 127);
        }
        b.div = b.mult = tp_ue8m0_to_f32(b.code);
        break;
    }
    case TP_QF_NVFP4: {
        if (isinf(amax) || isnan(s2)) {
            b.code = 0x7F;
            b.zero = 1;
            b.div = b.mult = tp_f32_from_bits(0x7FC00000u);
            break;
        }
        b.code = e4m3_from_f64_sat((double)amax / (6.0 * (double)s2));
        float sd = tp_e4m3_to_f32(b.code);
        b.mult = sd;
        b.div = sd * s2;
        b.zero = (b.div == 0.0f);
        break;
    }
    default: break;
    }
    return b;
}

static uint8_t enc_elem(const qgeom *g, float v) {
    return g->t->elem == TP_E4M3 ? tp_f32_to_e4m3(v) : tp_f32_to_e2m1(v);
}
static float dec_elem(const qgeom *g, uint8_t c) {
    return g->t->elem == TP_E4M3 ? tp_e4m3_to_f32(c) : tp_e2m1_to_f32(c);
}

static float tensor_amax(const float *x, int64_t rows, int64_t K);

static float nvfp4_s2(const float *x, const qgeom *g, float global_in) {
    if (global_in > 0.0f) return global_in;
    return amax_scale(tensor_amax(x, g->rows, g->K), 2688.0);
}

/* The elements of rows [r0, r1) x [k0, k1) of one block, with its scale b: codes (packed as in tp_qtensor,
 * zero-initialized by the caller) and y, each optional. Each element is read before it is written. */
static void encode_rows(const qgeom *g, const blockscale *b, const float *x, int64_t r0, int64_t r1, int64_t k0,
                        int64_t k1, uint8_t *codes, float *y) {
    for (int64_t r = r0; r < r1; r++)
        for (int64_t k = k0; k < k1; k++) {
            size_t i = (size_t)(r * g->K + k);
            float xv = x[i];
            uint8_t c = b->zero ? 0 : isnan(xv) ? enc_elem(g, xv) : enc_elem(g, xv / b->div);
            if (codes) {
                if (g->t->bits == 4) codes[i / 2] |= (uint8_t)(c << (4 * (i & 1)));
                else codes[i] = c;
            }
            if (y) y[i] = dec_elem(g, c) * b->mult;
        }
}

/* max |x| over rows [0, rows) x [0, K), rows shared among threads (max is order-free; NaN skipped on every thread) */
static float tensor_amax(const float *x, int64_t rows, int64_t K) {
    float m = 0.0f;
#pragma omp parallel if (rows * K >= QPAR_MIN)
    {
        float t = 0.0f;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const float a = block_amax(x, K, r, r + 1, 0, K);
            if (a > t) t = a;
        }
#pragma omp critical(tp_qformat_amax)
        if (t > m) m = t;
    }
    return m;
}

/* One pass over the blocks. Each block's amax is read before any of its elements is written, and each
 * element is read before it is written, which is what makes y == x safe. codes (packed as in tp_qtensor,
 * zero-initialized by the caller), scales and y are each optional. A tensor with one block (per-tensor FP8) is
 * shared among threads by rows; with many blocks, the row blocks are; 4-bit codes with an odd K share a byte
 * across rows, so such a tensor is encoded on one thread. */
static void run_blocks(const qgeom *g, const float *x, float s2, uint8_t *codes, uint8_t *scales, float *y) {
    const int large = g->rows * g->K >= QPAR_MIN && !(codes && g->t->bits == 4 && g->K % 2);
    if (g->nrb == 1 && g->nkb == 1) {
        const blockscale b = block_scale(g, tensor_amax(x, g->rows, g->K), s2);
        if (scales) {
            if (g->scale_size == 4) memcpy(scales, &b.div, 4);
            else scales[0] = b.code;
        }
#pragma omp parallel for schedule(static) if (large)
        for (int64_t r = 0; r < g->rows; r++) encode_rows(g, &b, x, r, r + 1, 0, g->K, codes, y);
        return;
    }
#pragma omp parallel for schedule(static) if (large && g->nrb > 1)
    for (int64_t rb = 0; rb < g->nrb; rb++) {
        int64_t r0 = rb * g->wr, r1 = r0 + g->wr < g->rows ? r0 + g->wr : g->rows;
        for (int64_t kb = 0; kb < g->nkb; kb++) {
            int64_t k0 = kb * g->bk, k1 = k0 + g->bk < g->K ? k0 + g->bk : g->K;
            blockscale b = block_scale(g, block_amax(x, g->K, r0, r1, k0, k1), s2);
            if (scales) {
                size_t si = (size_t)(rb * g->nkb + kb);
                if (g->scale_size == 4) memcpy(scales + si * 4, &b.div, 4);
                else scales[si] = b.code;
            }
            encode_rows(g, &b, x, r0, r1, k0, k1, codes, y);
        }
    }
}

/* ---- public entry points --------------------------------------------------------------------------------- */

/* Layout: x and y row-major (rows, K) FP32; blocks run along K within a row (fp8-block128 weights: 128 x 128
 * tiles). Per-block rules and their exact arithmetic: the top of this file. Errors: TP_ERR_ARG for an unknown
 * or TP_QF_NONE format, rows or K < 1, NULL x or y, or a non-finite global_in. No allocation. */
tp_status tp_qdq_f32(tp_qformat f, const float *x, float *y, int64_t rows, int64_t K, int is_weight,
                     float global_in, float *global_scale, tp_error *err) {
    qgeom g;
    tp_status st = make_geom(f, rows, K, is_weight, &g, err);
    if (st != TP_OK) return st;
    if (!x || !y) return tp_fail(err, TP_ERR_ARG, "qformat %s: NULL tensor", g.t->name);
    if (!isfinite(global_in) && g.t->global_scale)
        return tp_fail(err, TP_ERR_ARG, "qformat %s: global scale %g is not finite", g.t->name, (double)global_in);
    float s2 = g.t->global_scale ? nvfp4_s2(x, &g, global_in) : 1.0f;
    run_blocks(&g, x, s2, NULL, NULL, y);
    if (global_scale) *global_scale = s2;
    return TP_OK;
}

float tp_qformat_global_scale(tp_qformat f, const float *x, int64_t rows, int64_t K) {
    const tp_qformat_traits *t = tp_qformat_info(f);
    if (!t || !t->global_scale || !x || rows < 1 || K < 1) return 1.0f;
    return amax_scale(tensor_amax(x, rows, K), 2688.0);
}

/* Packed form (see tp_qtensor in qformat.h): elems hold the codes of the flattened row-major tensor, one byte
 * each for E4M3, two per byte for E2M1 (flat element 2i in the low nibble, 2i+1 in the high; an odd count
 * leaves the last high nibble 0). scales is the plain row-major (ceil(rows / wr), ceil(K / block)) grid, wr =
 * 128 for fp8-block128 weights and 1 otherwise; F32 scales in host byte order (little-endian on every machine
 * tprof runs on), per-tensor fp8: one F32. cuBLASLt's swizzled VEC16/VEC32 scale layout is the executor's
 * business, not this one's. On error *out is zeroed; TP_ERR_OOM when the buffers cannot be allocated. */
tp_status tp_quantize(tp_qformat f, const float *x, int64_t rows, int64_t K, int is_weight, float global_in,
                      tp_qtensor *out, tp_error *err) {
    if (!out) return tp_fail(err, TP_ERR_ARG, "qformat: NULL output");
    memset(out, 0, sizeof *out);
    out->global_scale = 1.0f;
    qgeom g;
    tp_status st = make_geom(f, rows, K, is_weight, &g, err);
    if (st != TP_OK) return st;
    if (!x) return tp_fail(err, TP_ERR_ARG, "qformat %s: NULL tensor", g.t->name);
    if (!isfinite(global_in) && g.t->global_scale)
        return tp_fail(err, TP_ERR_ARG, "qformat %s: global scale %g is not finite", g.t->name, (double)global_in);
    uint8_t *elems = calloc(g.elem_bytes, 1);
    uint8_t *scales = calloc(g.scale_bytes, 1);
    if (!elems || !scales) {
        free(elems);
        free(scales);
        return tp_fail(err, TP_ERR_OOM, "qformat %s: cannot allocate %zu + %zu bytes", g.t->name, g.elem_bytes,
                       g.scale_bytes);
    }
    float s2 = g.t->global_scale ? nvfp4_s2(x, &g, global_in) : 1.0f;
    run_blocks(&g, x, s2, elems, scales, NULL);
    out->format = f;
    out->rows = rows;
    out->K = K;
    out->elems = elems;
    out->elem_bytes = g.elem_bytes;
    out->scales = scales;
    out->scale_bytes = g.scale_bytes;
    out->global_scale = s2;
    return TP_OK;
}

/* y (rows, K) FP32 = dec(q) * scale, with the NVFP4 value computed as (e2m1(q) * sd) * s2 in FP32, i.e.
 * tp_qdq_f32's y times s2 with the same two roundings (the first exact). tp_qtensor does not record whether
 * fp8-block128 scales are per 1x128 or 128x128: scale_bytes tells (rows x ceil(K/128) or ceil(rows/128) x
 * ceil(K/128) scales; with one row the two layouts coincide). Errors: TP_ERR_ARG for a NULL or inconsistent
 * tensor (unknown format, sizes that do not match rows and K). */
tp_status tp_dequantize(const tp_qtensor *q, float *y, tp_error *err) {
    if (!q || !y) return tp_fail(err, TP_ERR_ARG, "qformat: NULL tensor");
    qgeom g;
    tp_status st = make_geom(q->format, q->rows, q->K, 0, &g, err);
    if (st != TP_OK) return st;
    if (q->format == TP_QF_FP8_BLOCK128 && q->scale_bytes != g.scale_bytes) {
        qgeom gw;
        make_geom(q->format, q->rows, q->K, 1, &gw, err);
        if (q->scale_bytes == gw.scale_bytes) g = gw;
    }
    if (!q->elems || !q->scales || q->elem_bytes != g.elem_bytes || q->scale_bytes != g.scale_bytes)
        return tp_fail(err, TP_ERR_ARG,
                       "qformat %s: packed tensor %lld x %lld has %zu element and %zu scale bytes (expected %zu "
                       "and %zu)",
                       g.t->name, (long long)q->rows, (long long)q->K, q->elem_bytes, q->scale_bytes, g.elem_bytes,
                       g.scale_bytes);
    const int nv = g.f == TP_QF_NVFP4;
    const float s2 = q->global_scale;
#pragma omp parallel for schedule(static) if (g.rows * g.K >= QPAR_MIN)
    for (int64_t r = 0; r < g.rows; r++) {
        const int64_t rb = r / g.wr;
        for (int64_t kb = 0; kb < g.nkb; kb++) {
            size_t si = (size_t)(rb * g.nkb + kb);
            float m;
            if (g.scale_size == 4) memcpy(&m, q->scales + si * 4, 4);
            else if (g.t->scale == TP_UE8M0) m = tp_ue8m0_to_f32(q->scales[si]);
            else m = tp_e4m3_to_f32(q->scales[si]);
            int64_t k0 = kb * g.bk, k1 = k0 + g.bk < g.K ? k0 + g.bk : g.K;
            for (int64_t k = k0; k < k1; k++) {
                size_t i = (size_t)(r * g.K + k);
                uint8_t c = g.t->bits == 4 ? (uint8_t)((q->elems[i / 2] >> (4 * (i & 1))) & 0xFu) : q->elems[i];
                float v = dec_elem(&g, c) * m;
                y[i] = nv ? v * s2 : v;
            }
        }
    }
    return TP_OK;
}

void tp_qtensor_free(tp_qtensor *q) {
    if (!q) return;
    free(q->elems);
    free(q->scales);
    q->elems = q->scales = NULL;
    q->elem_bytes = q->scale_bytes = 0;
}

const char *tp_calib_describe(const tp_calib_options *co, char *buf, size_t n) {
    if (co && co->method == TP_CALIB_PERCENTILE) snprintf(buf, n, "percentile %g", co->percentile);
    else if (co && co->method == TP_CALIB_ENTROPY) snprintf(buf, n, "entropy");
    else snprintf(buf, n, "max");
    return buf;
}

/* KL(P || Q) of the first i bins at threshold bin i (tp_calib_entropy_threshold), code[] scratch of i entries */
static double entropy_kl(const unsigned *bins, int nbins, int i, uint8_t *code) {
    double outside = 0, total = 0;
    for (int j = i; j < nbins; j++) outside += bins[j];
    for (int j = 0; j < i; j++) total += bins[j];
    total += outside;
    if (total <= 0) return 0;
    /* each bin's center in units of the E4M3 scale T / 448 = i / 448 bins: center (j + 0.5) * 448 / i */
    for (int j = 0; j < i; j++) code[j] = tp_f32_to_e4m3((float)((j + 0.5) * 448.0 / i)) & 0x7F;
    double kl = 0;
    for (int j = 0; j < i;) {
        int e = j; /* [j, e): the bins of one E4M3 code (codes grow with j) */
        double mass = 0;
        int held = 0;
        while (e < i && code[e] == code[j]) {
            const double pj = bins[e] + (e == i - 1 ? outside : 0);
            mass += pj;
            held += pj > 0;
            e++;
        }
        for (int k = j; k < e; k++) {
            const double pk = bins[k] + (k == i - 1 ? outside : 0);
            if (pk <= 0) continue;
            const double P = pk / total, Q = mass / held / total;
            kl += P * log(P / Q);
        }
        j = e;
    }
    return kl;
}

double tp_calib_entropy_threshold(const unsigned *bins, int nbins, double amax) {
    double total = 0;
    for (int b = 0; b < nbins; b++) total += bins[b];
    if (total <= 0 || nbins < 16) return amax;
    uint8_t *code = malloc((size_t)nbins);
    if (!code) return amax;
    const int step = nbins >= 1024 ? 8 : 1; /* 2048 bins: 240 candidates, each one pass over its bins */
    int best = nbins;
    double best_kl = INFINITY;
    for (int i = nbins; i >= nbins / 16; i -= step) {
        const double kl = entropy_kl(bins, nbins, i, code);
        if (kl < best_kl) best_kl = kl, best = i;
    }
    free(code);
    return amax * best / nbins;
}
