/* test_qformat.c: the quantized formats of src/formats/qformat.c (and the E4M3 codec of dtype.c they use)
 * against golden vectors from an independent implementation, plus worked examples checked by hand.
 *
 * tests/fixtures/formats_golden.bin is written by tools/make_format_golden.py (no Python is needed here):
 *   - the decoded value of every E2M1, E4M3 and UE8M0 code, from ml_dtypes;
 *   - the ml_dtypes E2M1 and E4M3 encodings of 1,000,000 FP32 inputs (all exponents, subnormals, NaN, Inf,
 *     values within 3 ulps of every E2M1/E4M3 rounding midpoint, the saturation region). The inputs are not
 *     stored: both sides generate them from a counter-based splitmix64 (gen_input below mirrors the script's
 *     gen_inputs), and the fixture's FNV-1a hash of the input bits proves the two generators agree;
 *   - block-quantizer results (fp8, fp8-block128, mxfp8, mxfp4, nvfp4) of a numpy quantizer written from the
 *     published rules in the script, on tensors whose K is not always a multiple of the block.
 * Saturation: ml_dtypes' E4M3 cast does not saturate, so the script encodes clip(x, -448, 448); its E2M1 cast
 * maps NaN to a zero, where qformat.h defines S.111, so NaN inputs are checked against qformat.h's rule. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "formats/qformat.h"

#include <omp.h>

#define GOLDEN_PATH "tests/fixtures/formats_golden.bin"

/* Check's assertions report to the parent on every call in fork mode; loops over a million values use this,
 * which reaches Check only on failure. */
#define REQUIRE(cond, ...)                      \
    do {                                        \
        if (!(cond)) ck_abort_msg(__VA_ARGS__); \
    } while (0)

#define f2u tp_f32_bits      /* formats/dtype.h */
#define u2f tp_f32_from_bits
/* Bit-exact FP32 equality, any NaN equal to any NaN (NaN payloads are not part of any rule here). */
static int same_f32(float a, float b) { return (isnan(a) && isnan(b)) || f2u(a) == f2u(b); }

/* ---- the fixture --------------------------------------------------------------------------------------- */

typedef struct {
    char label[96];
    int format, is_weight;
    int64_t rows, K;
    float global_in, s2;
    uint32_t scale_count, scale_size;
    const float *x, *y;
    const uint8_t *codes, *scales;
} blk_case;

#define MAX_CASES 64
static struct {
    uint8_t *data;
    size_t size;
    const uint8_t *e2dt, *e4dt, *u8dt, *e2en, *e4en;
    uint64_t seed, hash;
    uint32_t n;
    blk_case cases[MAX_CASES];
    int ncases;
    char error[256];
} G;

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static float rdf(const uint8_t *p) { return u2f(rd32(p)); }

static int parse_case(const uint8_t *p, uint32_t len, blk_case *c) {
    if (len < 4) return -1;
    uint32_t ll = rd32(p);
    if (ll + 4 + 32 > len) return -1;
    snprintf(c->label, sizeof c->label, "%.*s", (int)ll, (const char *)p + 4);
    const uint8_t *h = p + 4 + ll;
    c->format = (int)rd32(h);
    c->is_weight = (int)rd32(h + 4);
    c->rows = rd32(h + 8);
    c->K = rd32(h + 12);
    c->global_in = rdf(h + 16);
    c->s2 = rdf(h + 20);
    c->scale_count = rd32(h + 24);
    c->scale_size = rd32(h + 28);
    size_t n = (size_t)(c->rows * c->K);
    size_t need = 4 + ll + 32 + n * 9 + (size_t)c->scale_count * c->scale_size;
    if (need != len) return -1;
    const uint8_t *b = h + 32;
    /* the payload is not 4-aligned in the file: the floats are read through copies made at load time */
    float *xy = malloc(n * 2 * sizeof(float));
    if (!xy) return -1;
    for (size_t i = 0; i < 2 * n; i++) xy[i] = rdf(b + 4 * i);
    c->x = xy;
    c->y = xy + n;
    c->codes = b + 8 * n;
    c->scales = b + 9 * n;
    return 0;
}

static void load_golden(void) {
    memset(&G, 0, sizeof G);
    FILE *f = fopen(GOLDEN_PATH, "rb");
    if (!f) {
        snprintf(G.error, sizeof G.error, "cannot open %s (run from the repository root)", GOLDEN_PATH);
        return;
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    G.data = malloc((size_t)sz);
    if (!G.data || fread(G.data, 1, (size_t)sz, f) != (size_t)sz) {
        snprintf(G.error, sizeof G.error, "cannot read %s", GOLDEN_PATH);
        fclose(f);
        return;
    }
    fclose(f);
    G.size = (size_t)sz;
    if (G.size < 8 || memcmp(G.data, "TPQGOLD1", 8) != 0) {
        snprintf(G.error, sizeof G.error, "%s: bad magic", GOLDEN_PATH);
        return;
    }
    size_t off = 8;
    while (off + 8 <= G.size) {
        const uint8_t *tag = G.data + off;
        uint32_t len = rd32(G.data + off + 4);
        const uint8_t *p = G.data + off + 8;
        if (off + 8 + len > G.size) break;
        if (!memcmp(tag, "E2DT", 4) && len == 16 * 4) G.e2dt = p;
        else if (!memcmp(tag, "E4DT", 4) && len == 256 * 4) G.e4dt = p;
        else if (!memcmp(tag, "U8DT", 4) && len == 256 * 4) G.u8dt = p;
        else if (!memcmp(tag, "RNDI", 4) && len == 20) {
            G.seed = rd64(p);
            G.n = rd32(p + 8);
            G.hash = rd64(p + 12);
        } else if (!memcmp(tag, "E2EN", 4)) G.e2en = p;
        else if (!memcmp(tag, "E4EN", 4)) G.e4en = p;
        else if (!memcmp(tag, "BLKQ", 4) && G.ncases < MAX_CASES) {
            if (parse_case(p, len, &G.cases[G.ncases]) != 0) {
                snprintf(G.error, sizeof G.error, "%s: malformed BLKQ section %d", GOLDEN_PATH, G.ncases);
                return;
            }
            G.ncases++;
        }
        off += 8 + len;
    }
    if (!G.e2dt || !G.e4dt || !G.u8dt || !G.e2en || !G.e4en || G.n == 0 || G.ncases == 0)
        snprintf(G.error, sizeof G.error, "%s: a section is missing", GOLDEN_PATH);
}

static void free_golden(void) {
    for (int i = 0; i < G.ncases; i++) free((void *)G.cases[i].x);
    free(G.data);
    memset(&G, 0, sizeof G);
}

static void need_golden(void) { ck_assert_msg(G.error[0] == 0 && G.data, "golden fixture: %s", G.error); }

/* ---- the codec inputs (mirror of tools/make_format_golden.py gen_inputs) ------------------------------------ */

static uint64_t splitmix64_at(uint64_t seed, uint64_t j) {
    uint64_t z = seed + (j + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const uint32_t SPECIALS[16] = {0x00000000, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7F7FFFFF, 0x43E00000,
                                      0x43E80000, 0x43F00000, 0x40C00000, 0x40E00000, 0x3E800000, 0x3B000000,
                                      0x3A800000, 0x00000001, 0x3F800000, 0x00800000};

/* The midpoints come from the golden decode tables (v[k] + v[k+1]) / 2, exact in FP32. */
static float MID8[127], MID4[8];

static void make_midpoints(void) {
    for (int k = 0; k < 127; k++) {
        float lo = rdf(G.e4dt + 4 * k), hi = k == 126 ? 480.0f : rdf(G.e4dt + 4 * (k + 1));
        MID8[k] = (lo + hi) / 2.0f;
    }
    for (int k = 0; k < 8; k++) {
        float lo = rdf(G.e2dt + 4 * k), hi = k == 7 ? 8.0f : rdf(G.e2dt + 4 * (k + 1));
        MID4[k] = (lo + hi) / 2.0f;
    }
}

static uint32_t gen_input(uint64_t i) {
    uint64_t a = splitmix64_at(G.seed, 3 * i), b = splitmix64_at(G.seed, 3 * i + 1),
             c = splitmix64_at(G.seed, 3 * i + 2);
    unsigned cat = (unsigned)(a >> 60);
    uint32_t sign = (uint32_t)((a >> 59) & 1u) << 31;
    int d = (int)(c % 7) - 3;
    uint32_t bits;
    if (cat <= 3) bits = (uint32_t)b;
    else if (cat <= 7) bits = (uint32_t)(104 + b % 48) << 23 | (uint32_t)(c & 0x7FFFFFu);
    else if (cat <= 10) bits = (uint32_t)((int64_t)f2u(MID8[b % 127]) + d);
    else if (cat <= 13) bits = (uint32_t)((int64_t)f2u(MID4[b % 8]) + d);
    else if (cat == 14) bits = (uint32_t)b & 0x7FFFFFu;
    else bits = SPECIALS[b % 16];
    return bits | sign;
}

static uint32_t *make_inputs(void) {
    make_midpoints();
    uint32_t *in = malloc((size_t)G.n * 4);
    ck_assert_ptr_nonnull(in);
    uint64_t h = 0xCBF29CE484222325ull;
    for (uint32_t i = 0; i < G.n; i++) {
        in[i] = gen_input(i);
        for (int k = 0; k < 4; k++) h = (h ^ ((in[i] >> (8 * k)) & 0xFFu)) * 0x100000001B3ull;
    }
    ck_assert_msg(h == G.hash, "regenerated inputs differ from the script's (hash %016llx, fixture %016llx)",
                  (unsigned long long)h, (unsigned long long)G.hash);
    return in;
}

/* ---- codecs against the golden tables ----------------------------------------------------------------------- */

START_TEST(test_e2m1_decode_table) {
    need_golden();
    for (unsigned c = 0; c < 16; c++) {
        float want = rdf(G.e2dt + 4 * c), got = tp_e2m1_to_f32((uint8_t)c);
        ck_assert_msg(f2u(got) == f2u(want), "E2M1 code 0x%X: %a, ml_dtypes %a", c, (double)got, (double)want);
    }
    /* the high nibble is ignored by the decoder: the code is the low nibble */
    ck_assert_float_eq(tp_e2m1_to_f32(0xF7), 6.0f);
}
END_TEST

START_TEST(test_e4m3_decode_table) {
    need_golden();
    int nans = 0;
    for (unsigned c = 0; c < 256; c++) {
        float want = rdf(G.e4dt + 4 * c), got = tp_e4m3_to_f32((uint8_t)c);
        REQUIRE(same_f32(got, want), "E4M3 code 0x%02X: %a, ml_dtypes %a", c, (double)got, (double)want);
        nans += isnan(got);
    }
    ck_assert_int_eq(nans, 2); /* 0x7F and 0xFF */
}
END_TEST

START_TEST(test_ue8m0_decode_table) {
    need_golden();
    for (unsigned c = 0; c < 256; c++) {
        float want = rdf(G.u8dt + 4 * c), got = tp_ue8m0_to_f32((uint8_t)c);
        REQUIRE(same_f32(got, want), "UE8M0 code 0x%02X: %a, ml_dtypes %a", c, (double)got, (double)want);
    }
    ck_assert(isnan(tp_ue8m0_to_f32(0xFF)));
    ck_assert_float_eq(tp_ue8m0_to_f32(127), 1.0f);
    ck_assert_float_eq(tp_ue8m0_to_f32(0), 0x1p-127f);
}
END_TEST

START_TEST(test_e2m1_encode_golden) {
    need_golden();
    uint32_t *in = make_inputs();
    uint32_t nan_inputs = 0, ties = 0;
    for (uint32_t i = 0; i < G.n; i++) {
        float x = u2f(in[i]);
        uint8_t want = (uint8_t)((G.e2en[i / 2] >> (4 * (i & 1))) & 0xFu), got = tp_f32_to_e2m1(x);
        if (isnan(x)) { /* qformat.h: saturate with the NaN's sign (ml_dtypes gives a zero) */
            nan_inputs++;
            want = (uint8_t)(((in[i] >> 31) << 3) | 7u);
        }
        for (int k = 0; k < 8; k++) ties += fabsf(x) == MID4[k];
        REQUIRE(got == want, "E2M1 of %a (0x%08X, input %u): 0x%X, expected 0x%X", (double)x, in[i], i, got, want);
    }
    free(in);
    ck_assert_uint_gt(nan_inputs, 1000);
    ck_assert_uint_gt(ties, 1000); /* exact midpoints were exercised */
}
END_TEST

START_TEST(test_e4m3_encode_golden) {
    need_golden();
    uint32_t *in = make_inputs();
    uint32_t sat = 0, ties = 0;
    for (uint32_t i = 0; i < G.n; i++) {
        float x = u2f(in[i]);
        uint8_t want = G.e4en[i], got = tp_f32_to_e4m3(x);
        if (!isnan(x) && fabsf(x) > 464.0f) sat++;
        if (fabsf(x) < 480.0f && fabsf(x) > 0.0f) {
            float a = fabsf(x);
            int lo = 0, hi = 126; /* binary search in the sorted midpoints */
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (MID8[mid] < a) lo = mid + 1;
                else hi = mid;
            }
            ties += MID8[lo] == a;
        }
        REQUIRE(got == want, "E4M3 of %a (0x%08X, input %u): 0x%02X, expected 0x%02X", (double)x, in[i], i, got,
                want);
    }
    free(in);
    ck_assert_uint_gt(sat, 10000);
    ck_assert_uint_gt(ties, 10000);
}
END_TEST

START_TEST(test_e2m1_encode_by_hand) {
    /* every tie goes to the even code: 0|0.5 -> 0, 0.5|1 -> 1 (code 2), 1|1.5 -> 1, 1.5|2 -> 2, 2|3 -> 2,
     * 3|4 -> 4, 4|6 -> 4 */
    static const struct {
        float x;
        uint8_t c;
    } T[] = {{0.0f, 0},   {0.25f, 0},  {0.2500001f, 1}, {0.5f, 1},     {0.75f, 2},  {0.7499999f, 1},
             {1.25f, 2},  {1.2500001f, 3}, {1.75f, 4},  {1.7499999f, 3}, {2.5f, 4},  {2.5000002f, 5},
             {3.5f, 6},   {3.4999998f, 5}, {5.0f, 6},  {5.0000005f, 7}, {6.0f, 7},  {6.5f, 7},
             {7.0f, 7},   {1e30f, 7},  {INFINITY, 7},   {0x1p-149f, 0}, {-0.0f, 8}, {-0.1f, 8},
             {-0.5f, 9},  {-6.0f, 15}, {-INFINITY, 15}, {-1e30f, 15}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        ck_assert_msg(tp_f32_to_e2m1(T[i].x) == T[i].c, "E2M1(%a) = 0x%X, expected 0x%X", (double)T[i].x,
                      tp_f32_to_e2m1(T[i].x), T[i].c);
    ck_assert_uint_eq(tp_f32_to_e2m1(NAN), 0x7);
    ck_assert_uint_eq(tp_f32_to_e2m1(-NAN), 0xF);
    ck_assert_uint_eq(f2u(tp_e2m1_to_f32(0x8)), 0x80000000u); /* -0 decodes to -0 */
    for (unsigned c = 0; c < 16; c++) ck_assert_uint_eq(tp_f32_to_e2m1(tp_e2m1_to_f32((uint8_t)c)), c);
}
END_TEST

START_TEST(test_ue8m0_encode) {
    for (int e = -127; e <= 127; e++) {
        float p = ldexpf(1.0f, e);
        REQUIRE(tp_f32_to_ue8m0(p) == e + 127, "UE8M0(2^%d) = %u", e, tp_f32_to_ue8m0(p));
        REQUIRE(tp_ue8m0_to_f32((uint8_t)(e + 127)) == p, "UE8M0 decode of 2^%d", e);
        if (e > -127 && e < 127) /* just below a power of two floors to the binade below */
            REQUIRE(tp_f32_to_ue8m0(nextafterf(p, 0.0f)) == e + 126, "UE8M0 just below 2^%d", e);
    }
    ck_assert_uint_eq(tp_f32_to_ue8m0(1.5f), 127);  /* floor, not nearest (ml_dtypes would give 128) */
    ck_assert_uint_eq(tp_f32_to_ue8m0(0.75f), 126);
    ck_assert_uint_eq(tp_f32_to_ue8m0(1000.0f), 136);
    ck_assert_uint_eq(tp_f32_to_ue8m0(3.4028235e38f), 254);
    ck_assert_uint_eq(tp_f32_to_ue8m0(0x1p-149f), 0); /* below 2^-127: clamped */
    ck_assert_uint_eq(tp_f32_to_ue8m0(0.0f), 0);
    ck_assert_uint_eq(tp_f32_to_ue8m0(-0.0f), 0);
    ck_assert_uint_eq(tp_f32_to_ue8m0(-1.0f), 0xFF);
    ck_assert_uint_eq(tp_f32_to_ue8m0(INFINITY), 0xFF);
    ck_assert_uint_eq(tp_f32_to_ue8m0(NAN), 0xFF);
}
END_TEST

/* ---- block quantizers against the numpy reference ----------------------------------------------------------- */

static uint8_t code_at(const tp_qtensor *q, size_t i) {
    return tp_qformat_info(q->format)->bits == 4 ? (uint8_t)((q->elems[i / 2] >> (4 * (i & 1))) & 0xFu)
                                                 : q->elems[i];
}

START_TEST(test_blocks_golden) {
    need_golden();
    ck_assert_int_ge(G.ncases, 15);
    for (int ci = 0; ci < G.ncases; ci++) {
        const blk_case *c = &G.cases[ci];
        size_t n = (size_t)(c->rows * c->K);
        float *y = malloc(n * 4), *z = malloc(n * 4);
        ck_assert_ptr_nonnull(y);
        ck_assert_ptr_nonnull(z);
        tp_error err = {0};
        float s2 = -1.0f;
        ck_assert_int_eq(tp_qdq_f32((tp_qformat)c->format, c->x, y, c->rows, c->K, c->is_weight, c->global_in, &s2,
                                    &err),
                         TP_OK);
        ck_assert_msg(f2u(s2) == f2u(c->s2), "%s: s2 %a, expected %a", c->label, (double)s2, (double)c->s2);
        for (size_t i = 0; i < n; i++)
            REQUIRE(f2u(y[i]) == f2u(c->y[i]), "%s: y[%zu] (x %a) = %a, numpy %a", c->label, i, (double)c->x[i],
                    (double)y[i], (double)c->y[i]);

        /* in place */
        memcpy(z, c->x, n * 4);
        ck_assert_int_eq(tp_qdq_f32((tp_qformat)c->format, z, z, c->rows, c->K, c->is_weight, c->global_in, NULL,
                                    &err),
                         TP_OK);
        ck_assert_msg(memcmp(z, y, n * 4) == 0, "%s: in-place result differs", c->label);

        /* packed form: codes, scales, and dequantize == y * s2 */
        tp_qtensor q;
        ck_assert_int_eq(tp_quantize((tp_qformat)c->format, c->x, c->rows, c->K, c->is_weight, c->global_in, &q,
                                     &err),
                         TP_OK);
        ck_assert_msg(q.scale_bytes == (size_t)c->scale_count * c->scale_size, "%s: %zu scale bytes, expected %u",
                      c->label, q.scale_bytes, c->scale_count * c->scale_size);
        ck_assert_msg(memcmp(q.scales, c->scales, q.scale_bytes) == 0, "%s: scales differ", c->label);
        ck_assert_uint_eq(f2u(q.global_scale), f2u(c->s2));
        for (size_t i = 0; i < n; i++)
            REQUIRE(code_at(&q, i) == c->codes[i], "%s: code[%zu] (x %a) = 0x%X, numpy 0x%X", c->label, i,
                    (double)c->x[i], code_at(&q, i), c->codes[i]);
        ck_assert_int_eq(tp_dequantize(&q, z, &err), TP_OK);
        for (size_t i = 0; i < n; i++) {
            float want = c->format == TP_QF_NVFP4 ? c->y[i] * c->s2 : c->y[i];
            REQUIRE(f2u(z[i]) == f2u(want), "%s: dequantized[%zu] = %a, expected %a", c->label, i, (double)z[i],
                    (double)want);
        }
        tp_qtensor_free(&q);
        ck_assert_ptr_null(q.elems);
        free(y);
        free(z);
    }
}
END_TEST

/* ---- worked examples ---------------------------------------------------------------------------------------- */

static void qdq(tp_qformat f, const float *x, float *y, int64_t rows, int64_t K, int w, float gin, float *s2) {
    tp_error err = {0};
    ck_assert_msg(tp_qdq_f32(f, x, y, rows, K, w, gin, s2, &err) == TP_OK, "%s", err.msg);
}
static void quant(tp_qformat f, const float *x, int64_t rows, int64_t K, int w, float gin, tp_qtensor *q) {
    tp_error err = {0};
    ck_assert_msg(tp_quantize(f, x, rows, K, w, gin, q, &err) == TP_OK, "%s", err.msg);
}

START_TEST(test_mxfp8_zero_block) {
    float x[32] = {0}, y[32];
    x[5] = -0.0f;
    tp_qtensor q;
    quant(TP_QF_MXFP8, x, 1, 32, 0, 0, &q);
    ck_assert_uint_eq(q.scale_bytes, 1);
    ck_assert_uint_eq(q.scales[0], 0); /* shared_exp -127 */
    for (int i = 0; i < 32; i++) ck_assert_uint_eq(q.elems[i], i == 5 ? 0x80 : 0x00);
    tp_qtensor_free(&q);
    qdq(TP_QF_MXFP8, x, y, 1, 32, 0, 0, NULL);
    for (int i = 0; i < 32; i++) ck_assert_uint_eq(f2u(y[i]), i == 5 ? 0x80000000u : 0u);
}
END_TEST

START_TEST(test_mxfp8_outlier) {
    /* amax 1000: floor(log2 1000) = 9, shared_exp 9 - 8 = 1, X = 2 (code 128). 1000 / 2 = 500 > 448 saturates:
     * the MX rule keeps the outlier's binade and loses its top (896 instead of 1000). The small values are
     * quantized at X = 2: 1.0 -> 0.5 exact; 1.1 -> 0.55 -> (binade [0.5,1), step 1/16) 9/16 -> 1.125;
     * 0.9 -> 0.45 -> (binade [0.25,0.5), step 1/32) 14/32 -> 0.875; 0.3 -> 0.15 -> (step 1/64) 10/64 -> 0.3125. */
    float x[32], y[32];
    for (int i = 0; i < 32; i++) x[i] = (i % 3 == 0) ? 1.0f : (i % 3 == 1) ? 1.1f : 0.9f;
    x[7] = 1000.0f;
    x[8] = -0.3f;
    tp_qtensor q;
    quant(TP_QF_MXFP8, x, 1, 32, 0, 0, &q);
    ck_assert_uint_eq(q.scales[0], 128);
    ck_assert_uint_eq(q.elems[7], 0x7E); /* 448 */
    tp_qtensor_free(&q);
    qdq(TP_QF_MXFP8, x, y, 1, 32, 0, 0, NULL);
    for (int i = 0; i < 32; i++) {
        float want = i == 7 ? 896.0f : i == 8 ? -0.3125f : (i % 3 == 0) ? 1.0f : (i % 3 == 1) ? 1.125f : 0.875f;
        ck_assert_msg(y[i] == want, "y[%d] = %g, expected %g", i, (double)y[i], (double)want);
    }
}
END_TEST

START_TEST(test_mxfp8_power_of_two_amax) {
    /* amax 256 = 2^8: shared_exp 0, X = 1 (code 127), 256 is exact; 3.3 -> (binade [2,4), step 1/4) 3.25.
     * Second block, amax 448 * 2^-20: floor(log2) = 8 - 20 = -12, shared_exp -20, and the amax is exact.
     * A partial third block of 4 elements (K = 68). */
    float x[68], y[68];
    for (int i = 0; i < 68; i++) x[i] = 0.0f;
    x[0] = 256.0f;
    x[1] = 3.3f;
    x[2] = -17.0f; /* (binade [16,32), step 2) tie 16|18 -> even mantissa 16 */
    x[32] = 448.0f * 0x1p-20f;
    x[33] = 0x1p-29f; /* the subnormal E4M3 step at X = 2^-20 is 2^-29: exact */
    x[64] = 0.75f;    /* partial block: amax 0.75, shared_exp -1 - 8 = -9 */
    x[65] = 0.1f;
    tp_qtensor q;
    quant(TP_QF_MXFP8, x, 1, 68, 0, 0, &q);
    ck_assert_uint_eq(q.scale_bytes, 3);
    ck_assert_uint_eq(q.scales[0], 127);
    ck_assert_uint_eq(q.scales[1], 127 - 20);
    ck_assert_uint_eq(q.scales[2], 127 - 9);
    tp_qtensor_free(&q);
    qdq(TP_QF_MXFP8, x, y, 1, 68, 0, 0, NULL);
    ck_assert_float_eq(y[0], 256.0f);
    ck_assert_float_eq(y[1], 3.25f);
    ck_assert_float_eq(y[2], -16.0f);
    ck_assert_float_eq(y[32], 448.0f * 0x1p-20f);
    ck_assert_float_eq(y[33], 0x1p-29f);
    ck_assert_float_eq(y[64], 0.75f);
    /* 0.1 / 2^-9 = 51.2 -> (binade [32,64), step 4) 52 -> 52 * 2^-9 */
    ck_assert_float_eq(y[65], 52.0f * 0x1p-9f);
}
END_TEST

START_TEST(test_mxfp4_examples) {
    /* amax 6: floor(log2 6) = 2, shared_exp 2 - 2 = 0, X = 1; ties go to the even code. Second block amax 7:
     * also X = 1 (floor(log2 7) = 2), so 7 saturates to 6. Third block amax 0.5: shared_exp -1 - 2 = -3,
     * X = 1/8: 0.5 -> 4, 0.3 -> 2.4 -> 2 -> 0.25. */
    float x[96] = {0}, y[96];
    const float a[] = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.5f, -4.0f};
    const float w[] = {6.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, -0.5f, -4.0f};
    for (int i = 0; i < 10; i++) x[i] = a[i];
    x[32] = 7.0f;
    x[33] = 3.0f;
    x[64] = 0.5f;
    x[65] = 0.3f;
    qdq(TP_QF_MXFP4, x, y, 1, 96, 0, 0, NULL);
    for (int i = 0; i < 10; i++) ck_assert_msg(y[i] == w[i], "y[%d] = %g, expected %g", i, (double)y[i], (double)w[i]);
    ck_assert_float_eq(y[32], 6.0f);
    ck_assert_float_eq(y[33], 3.0f);
    ck_assert_float_eq(y[64], 0.5f);
    ck_assert_float_eq(y[65], 0.25f);
    tp_qtensor q;
    quant(TP_QF_MXFP4, x, 1, 96, 0, 0, &q);
    ck_assert_uint_eq(q.scales[0], 127);
    ck_assert_uint_eq(q.scales[1], 127);
    ck_assert_uint_eq(q.scales[2], 124);
    tp_qtensor_free(&q);
}
END_TEST

START_TEST(test_nvfp4_given_global_scale) {
    /* s2 = 1/64 (calibrated). Block 0, amax 12: 12 / (6/64) = 128 -> s = 128 (E4M3 0x70), d = 128/64 = 2:
     *   12 -> 6 (code 7), 5 -> 2.5 -> tie 2|3 -> 2, -3 -> -1.5, 0.5 -> 0.25 -> tie 0|0.5 -> 0, 0.6 -> 0.3 -> 0.5;
     *   y = q * 128, the true value y / 64. Block 1, amax 1: 1 / (6/64) = 10.67 -> (step 1 in [8,16)) s = 11
     *   (0x53), d = 11/64: 1 -> 5.82 -> 6; 0.25 -> 1.45 -> 1.5. Block 2 all zero: s = 0, y = 0. Block 3,
     *   amax 5e-5: 5e-5 * 64 / 6 = 5.3e-4 < 2^-10 (half the smallest subnormal 2^-9): s = 0, y = 0. */
    float x[64] = {0}, y[64];
    x[0] = 12.0f, x[1] = 5.0f, x[2] = -3.0f, x[3] = 0.5f, x[4] = 0.6f;
    x[16] = 1.0f, x[17] = 0.25f;
    x[48] = 5e-5f, x[49] = -2e-5f;
    float s2 = 0;
    qdq(TP_QF_NVFP4, x, y, 1, 64, 0, 1.0f / 64, &s2);
    ck_assert_float_eq(s2, 1.0f / 64);
    const float want0[] = {768.0f, 256.0f, -192.0f, 0.0f, 64.0f};
    for (int i = 0; i < 5; i++) ck_assert_msg(y[i] == want0[i], "y[%d] = %g", i, (double)y[i]);
    ck_assert_float_eq(y[16], 66.0f);
    ck_assert_float_eq(y[17], 16.5f);
    for (int i = 32; i < 64; i++) ck_assert_uint_eq(f2u(y[i]), 0);
    tp_qtensor q;
    quant(TP_QF_NVFP4, x, 1, 64, 0, 1.0f / 64, &q);
    ck_assert_uint_eq(q.scale_bytes, 4);
    ck_assert_uint_eq(q.scales[0], 0x70);
    ck_assert_uint_eq(q.scales[1], 0x53);
    ck_assert_uint_eq(q.scales[2], 0x00);
    ck_assert_uint_eq(q.scales[3], 0x00);
    ck_assert_float_eq(q.global_scale, 1.0f / 64);
    ck_assert_uint_eq(q.elem_bytes, 32);
    ck_assert_uint_eq(q.elems[0], 0x47); /* element 0 (6: code 7) low nibble, element 1 (2: code 4) high */
    ck_assert_uint_eq(q.elems[1], 0x0B); /* -1.5 (0xB) low, 0 high */
    ck_assert_uint_eq(q.elems[2], 0x01); /* 0.5 (code 1) low */
    float z[64];
    tp_error err;
    ck_assert_int_eq(tp_dequantize(&q, z, &err), TP_OK);
    ck_assert_float_eq(z[0], 12.0f);
    ck_assert_float_eq(z[16], 66.0f / 64);
    tp_qtensor_free(&q);

    /* the tensor's own s2: amax 12 -> s2 = 12 / 2688; block 0: 12 / (6 s2) = 448 -> s = 448 (0x7E) */
    qdq(TP_QF_NVFP4, x, y, 1, 64, 0, 0.0f, &s2);
    ck_assert_float_eq(s2, 12.0f / 2688.0f);
    ck_assert_float_eq(y[0], 6.0f * 448.0f);
}
END_TEST

START_TEST(test_fp8_tensor_examples) {
    /* amax 896: s = 2, every value on the E4M3 grid times 2 is exact; 3.3 / 2 = 1.65 -> (step 1/8) 1.625. */
    float x[5] = {896.0f, -2.0f, 3.3f, 0.0f, 0x1p-8f}, y[5];
    qdq(TP_QF_FP8_TENSOR, x, y, 1, 5, 0, 0, NULL);
    ck_assert_float_eq(y[0], 896.0f);
    ck_assert_float_eq(y[1], -2.0f);
    ck_assert_float_eq(y[2], 3.25f);
    ck_assert_float_eq(y[3], 0.0f);
    ck_assert_float_eq(y[4], 0x1p-8f); /* 2^-9 * 2: the smallest E4M3 subnormal */
    tp_qtensor q;
    quant(TP_QF_FP8_TENSOR, x, 1, 5, 0, 0, &q);
    float s;
    ck_assert_uint_eq(q.scale_bytes, 4);
    memcpy(&s, q.scales, 4);
    ck_assert_float_eq(s, 2.0f);
    ck_assert_float_eq(q.global_scale, 1.0f);
    tp_qtensor_free(&q);
    /* amax 0: s = 1 */
    float zx[3] = {0.0f, -0.0f, 0.0f}, zy[3];
    quant(TP_QF_FP8_TENSOR, zx, 3, 1, 0, 0, &q);
    memcpy(&s, q.scales, 4);
    ck_assert_float_eq(s, 1.0f);
    tp_qtensor_free(&q);
    qdq(TP_QF_FP8_TENSOR, zx, zy, 3, 1, 0, 0, NULL);
    ck_assert_uint_eq(f2u(zy[1]), 0x80000000u);
    /* amax 1: s = 1/448 rounded to FP32; y = q * s in FP32 (448 * s is not exactly 1) */
    float ox[2] = {1.0f, 0.5f}, oy[2];
    qdq(TP_QF_FP8_TENSOR, ox, oy, 1, 2, 0, 0, NULL);
    float s1 = (float)(1.0 / 448.0);
    ck_assert_uint_eq(f2u(oy[0]), f2u(448.0f * s1));
    ck_assert_uint_eq(f2u(oy[1]), f2u(tp_e4m3_to_f32(tp_f32_to_e4m3(0.5f / s1)) * s1));
}
END_TEST

START_TEST(test_fp8_block128_weight_tiles) {
    /* 130 x 260 weights: tiles 2 x 3 (the last row tile has 2 rows, the last column tile 4 columns). Tile
     * (rb, kb) holds values in [-1, 1] times 2^(3 rb + kb) and one element 448 * 2^(3 rb + kb), so its scale is
     * exactly 2^(3 rb + kb) and the amax element is exact. As activations (1 x 128) the same tensor gets 130 x 3
     * scales. */
    enum { R = 130, K = 260 };
    float *x = malloc(R * K * 4), *y = malloc(R * K * 4), *z = malloc(R * K * 4);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_nonnull(z);
    uint32_t st = 12345;
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++) {
            st = st * 1664525u + 1013904223u;
            float u = (float)(st >> 8) * 0x1p-24f * 2.0f - 1.0f;
            x[r * K + k] = ldexpf(u, 3 * (r / 128) + k / 128);
        }
    for (int rb = 0; rb < 2; rb++)
        for (int kb = 0; kb < 3; kb++) {
            int r = rb * 128 + (rb ? 1 : 77), k = kb * 128 + (kb == 2 ? 3 : 5);
            x[r * K + k] = ldexpf(-448.0f, 3 * rb + kb);
        }
    tp_qtensor q;
    quant(TP_QF_FP8_BLOCK128, x, R, K, 1, 0, &q);
    ck_assert_uint_eq(q.scale_bytes, 2 * 3 * 4);
    ck_assert_uint_eq(q.elem_bytes, R * K);
    for (int rb = 0; rb < 2; rb++)
        for (int kb = 0; kb < 3; kb++) {
            float s;
            memcpy(&s, q.scales + 4 * (rb * 3 + kb), 4);
            ck_assert_msg(s == ldexpf(1.0f, 3 * rb + kb), "tile (%d,%d) scale %g", rb, kb, (double)s);
        }
    qdq(TP_QF_FP8_BLOCK128, x, y, R, K, 1, 0, NULL);
    for (int rb = 0; rb < 2; rb++)
        for (int kb = 0; kb < 3; kb++) {
            int r = rb * 128 + (rb ? 1 : 77), k = kb * 128 + (kb == 2 ? 3 : 5);
            ck_assert_float_eq(y[r * K + k], x[r * K + k]);
        }
    /* element (128, 257) of the corner tile: the tile's own scale 2^5, q = E4M3(x / 32) */
    float xc = x[128 * K + 257];
    ck_assert_float_eq(y[128 * K + 257], tp_e4m3_to_f32(tp_f32_to_e4m3(xc / 32.0f)) * 32.0f);
    tp_error err;
    ck_assert_int_eq(tp_dequantize(&q, z, &err), TP_OK);
    ck_assert_int_eq(memcmp(y, z, R * K * 4), 0);
    tp_qtensor_free(&q);

    quant(TP_QF_FP8_BLOCK128, x, R, K, 0, 0, &q);
    ck_assert_uint_eq(q.scale_bytes, R * 3 * 4);
    ck_assert_int_eq(tp_dequantize(&q, z, &err), TP_OK);
    qdq(TP_QF_FP8_BLOCK128, x, y, R, K, 0, 0, NULL);
    ck_assert_int_eq(memcmp(y, z, R * K * 4), 0);
    tp_qtensor_free(&q);
    free(x);
    free(y);
    free(z);
}
END_TEST

START_TEST(test_quantize_dequantize_equals_qdq) {
    /* every format, a random tensor with odd K (partial blocks, an odd E2M1 count), weights and activations:
     * tp_dequantize(tp_quantize(x)) == tp_qdq_f32(x) * s2, bit for bit */
    enum { R = 7, K = 77 };
    float x[R * K], y[R * K], z[R * K];
    uint32_t st = 99;
    for (int i = 0; i < R * K; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = ldexpf((float)(int32_t)st * 0x1p-31f, (int)(st % 23) - 11);
    }
    for (int f = 1; f < TP_QF_COUNT; f++)
        for (int w = 0; w < 2; w++) {
            float s2 = 0;
            qdq((tp_qformat)f, x, y, R, K, w, 0, &s2);
            tp_qtensor q;
            quant((tp_qformat)f, x, R, K, w, 0, &q);
            ck_assert_uint_eq(f2u(q.global_scale), f2u(s2));
            if (tp_qformat_info((tp_qformat)f)->bits == 4) {
                ck_assert_uint_eq(q.elem_bytes, (R * K + 1) / 2);
                ck_assert_uint_eq(q.elems[q.elem_bytes - 1] >> 4, 0); /* odd count: the last high nibble is 0 */
            }
            tp_error err;
            ck_assert_int_eq(tp_dequantize(&q, z, &err), TP_OK);
            for (int i = 0; i < R * K; i++)
                REQUIRE(f2u(z[i]) == f2u(y[i] * s2), "%s w%d: [%d] %a vs %a", tp_qformat_info((tp_qformat)f)->name, w,
                        i, (double)z[i], (double)(y[i] * s2));
            if (f != TP_QF_NVFP4) ck_assert_float_eq(s2, 1.0f);
            tp_qtensor_free(&q);
        }
}
END_TEST

START_TEST(test_e2m1_packing) {
    /* mxfp4 with X = 1 (amax 6): element 2i in the low nibble, 2i+1 in the high */
    const float x[5] = {0.5f, 1.0f, -6.0f, 3.0f, -0.0f};
    tp_qtensor q;
    quant(TP_QF_MXFP4, x, 1, 5, 0, 0, &q);
    ck_assert_uint_eq(q.elem_bytes, 3);
    ck_assert_uint_eq(q.elems[0], 0x21);
    ck_assert_uint_eq(q.elems[1], 0x5F);
    ck_assert_uint_eq(q.elems[2], 0x08);
    ck_assert_uint_eq(q.scales[0], 127);
    tp_qtensor_free(&q);
    /* packing runs over the flattened tensor, across rows. (3, 3): row 0 {1, 1, 3}: amax 3, shared_exp
     * 1 - 2 = -1, X = 1/2: codes 4 4 7; row 1 {0.5, 2, 2}: X = 1/2: codes 2 6 6; row 2 {1, 1, 1}: shared_exp
     * -2, X = 1/4: codes 6 6 6. Byte 1 holds flat 2 (row 0) low and flat 3 (row 1) high. */
    const float x2[9] = {1, 1, 3, 0.5f, 2, 2, 1, 1, 1};
    quant(TP_QF_MXFP4, x2, 3, 3, 0, 0, &q);
    ck_assert_uint_eq(q.elem_bytes, 5);
    ck_assert_uint_eq(q.scale_bytes, 3);
    const uint8_t want[5] = {0x44, 0x27, 0x66, 0x66, 0x06};
    for (int i = 0; i < 5; i++) ck_assert_uint_eq(q.elems[i], want[i]);
    ck_assert_uint_eq(q.scales[0], 126);
    ck_assert_uint_eq(q.scales[1], 126);
    ck_assert_uint_eq(q.scales[2], 125);
    tp_qtensor_free(&q);
}
END_TEST

/* tp_qformat_global_scale: the s2 tp_quantize uses (NVFP4: amax / 2688; 1 for an all-zero tensor, NaN for an Inf
 * amax; 1 for formats without one), the GPU quantizer's input */
START_TEST(test_global_scale) {
    float x[3 * 40];
    for (int i = 0; i < 120; i++) x[i] = 0.01f * (float)((i * 37) % 101 - 50);
    x[77] = -9.5f;
    tp_qtensor q;
    quant(TP_QF_NVFP4, x, 3, 40, 1, 0, &q);
    const float s2 = tp_qformat_global_scale(TP_QF_NVFP4, x, 3, 40);
    ck_assert(memcmp(&s2, &q.global_scale, 4) == 0);
    ck_assert_float_eq(s2, (float)(9.5 / 2688.0));
    tp_qtensor_free(&q);
    ck_assert_float_eq(tp_qformat_global_scale(TP_QF_MXFP8, x, 3, 40), 1.0f);
    ck_assert_float_eq(tp_qformat_global_scale(TP_QF_FP8_TENSOR, x, 3, 40), 1.0f);
    float z[16] = {0};
    ck_assert_float_eq(tp_qformat_global_scale(TP_QF_NVFP4, z, 1, 16), 1.0f);
    z[5] = -INFINITY;
    ck_assert(isnan(tp_qformat_global_scale(TP_QF_NVFP4, z, 1, 16)));
    ck_assert_float_eq(tp_qformat_global_scale(TP_QF_NVFP4, NULL, 1, 16), 1.0f); /* nothing to measure */
}
END_TEST

START_TEST(test_non_finite) {
    /* mxfp8: a block holding Inf gets the NaN scale 0xFF and dequantizes to NaN; the next block is untouched;
     * a NaN element keeps its sign as the E4M3 NaN and does not enter amax */
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = 1.0f;
    x[3] = INFINITY;
    x[40] = -NAN;
    tp_qtensor q;
    quant(TP_QF_MXFP8, x, 1, 64, 0, 0, &q);
    ck_assert_uint_eq(q.scales[0], 0xFF);
    ck_assert_uint_eq(q.scales[1], 127 - 8);
    ck_assert_uint_eq(q.elems[3], 0);
    ck_assert_uint_eq(q.elems[40], 0xFF);
    ck_assert_uint_eq(q.elems[41], tp_f32_to_e4m3(256.0f));
    tp_qtensor_free(&q);
    qdq(TP_QF_MXFP8, x, y, 1, 64, 0, 0, NULL);
    for (int i = 0; i < 32; i++) ck_assert(isnan(y[i]));
    ck_assert(isnan(y[40]));
    ck_assert_float_eq(y[41], 1.0f);
    /* fp8 per tensor: Inf -> NaN scale, every element NaN */
    qdq(TP_QF_FP8_TENSOR, x, y, 1, 64, 0, 0, NULL);
    for (int i = 0; i < 64; i++) ck_assert(isnan(y[i]));
    /* nvfp4: amax_tensor Inf -> s2 NaN; a calibrated s2 keeps the other blocks finite */
    float s2 = 0;
    qdq(TP_QF_NVFP4, x, y, 1, 64, 0, 0, &s2);
    ck_assert(isnan(s2));
    /* s2 = 1/64: blocks of ones get s = E4M3(64 / 6) = 11 and q = E2M1(64 / 11) = 6 (y = 66); the -NaN element
     * encodes as -6 (E2M1 has no NaN): y = -66 */
    qdq(TP_QF_NVFP4, x, y, 1, 64, 0, 1.0f / 64, &s2);
    for (int i = 0; i < 16; i++) ck_assert(isnan(y[i]));
    ck_assert_float_eq(y[16], 66.0f);
    ck_assert_float_eq(y[40], -66.0f);
}
END_TEST

START_TEST(test_errors) {
    float x[4] = {1, 2, 3, 4}, y[4];
    tp_error err = {0};
    tp_qtensor q;
    ck_assert_int_eq(tp_qdq_f32(TP_QF_COUNT, x, y, 1, 4, 0, 0, NULL, &err), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "format"));
    ck_assert_int_eq(tp_qdq_f32((tp_qformat)-1, x, y, 1, 4, 0, 0, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_NONE, x, y, 1, 4, 0, 0, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_MXFP8, x, y, 1, 0, 0, 0, NULL, &err), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "mxfp8"));
    ck_assert_int_eq(tp_qdq_f32(TP_QF_MXFP8, x, y, 0, 4, 0, 0, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_MXFP8, x, y, -1, 4, 0, 0, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_MXFP8, NULL, y, 1, 4, 0, 0, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_NVFP4, x, y, 1, 4, 0, NAN, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_NVFP4, x, y, 1, 4, 0, INFINITY, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_NVFP4, x, y, INT64_MAX, 4, 0, 0, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_qdq_f32(TP_QF_NVFP4, x, y, 1, 4, 0, -1.0f, NULL, NULL), TP_OK); /* <= 0: own s2 */
    memset(&q, 0xAB, sizeof q);
    ck_assert_int_eq(tp_quantize(TP_QF_NVFP4, x, 1, 0, 0, 0, &q, &err), TP_ERR_ARG);
    ck_assert_ptr_null(q.elems);
    ck_assert_ptr_null(q.scales);
    ck_assert_int_eq(tp_quantize(TP_QF_NVFP4, x, 1, 4, 0, 0, NULL, &err), TP_ERR_ARG);
    /* inconsistent packed tensors */
    quant(TP_QF_MXFP8, x, 1, 4, 0, 0, &q);
    q.elem_bytes = 3;
    ck_assert_int_eq(tp_dequantize(&q, y, &err), TP_ERR_ARG);
    q.elem_bytes = 4;
    q.scale_bytes = 2;
    ck_assert_int_eq(tp_dequantize(&q, y, &err), TP_ERR_ARG);
    q.scale_bytes = 1;
    q.format = TP_QF_COUNT;
    ck_assert_int_eq(tp_dequantize(&q, y, &err), TP_ERR_ARG);
    q.format = TP_QF_MXFP8;
    ck_assert_int_eq(tp_dequantize(NULL, y, &err), TP_ERR_ARG);
    ck_assert_int_eq(tp_dequantize(&q, y, &err), TP_OK);
    tp_qtensor_free(&q);
    tp_qtensor_free(&q); /* idempotent */
    tp_qtensor_free(NULL);
}
END_TEST

START_TEST(test_traits_and_parse) {
    static const char *names[TP_QF_COUNT] = {"none", "fp8", "fp8-block128", "mxfp8", "nvfp4", "mxfp4"};
    for (int f = 0; f < TP_QF_COUNT; f++) {
        const tp_qformat_traits *t = tp_qformat_info((tp_qformat)f);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(t->name, names[f]);
        ck_assert_int_eq(tp_qformat_parse(names[f]), f);
        ck_assert_uint_gt(strlen(t->source), 10);
    }
    ck_assert_ptr_null(tp_qformat_info(TP_QF_COUNT));
    ck_assert_int_eq(tp_qformat_parse("fp4"), -1);
    ck_assert_int_eq(tp_qformat_parse("MXFP8"), -1);
    ck_assert_int_eq(tp_qformat_parse(""), -1);
    ck_assert_int_eq(tp_qformat_parse(NULL), -1);
    const tp_qformat_traits *t = tp_qformat_info(TP_QF_NVFP4);
    ck_assert(t->elem == TP_E2M1 && t->bits == 4 && t->block == 16 && t->scale == TP_UE4M3 && t->global_scale);
    t = tp_qformat_info(TP_QF_MXFP8);
    ck_assert(t->elem == TP_E4M3 && t->bits == 8 && t->block == 32 && t->scale == TP_UE8M0 && !t->global_scale);
    t = tp_qformat_info(TP_QF_MXFP4);
    ck_assert(t->elem == TP_E2M1 && t->bits == 4 && t->block == 32 && t->scale == TP_UE8M0);
    t = tp_qformat_info(TP_QF_FP8_BLOCK128);
    ck_assert(t->elem == TP_E4M3 && t->block == 128 && t->weight_rows == 128 && t->scale == TP_F32);
    t = tp_qformat_info(TP_QF_FP8_TENSOR);
    ck_assert(t->elem == TP_E4M3 && t->block == 0 && t->weight_rows == 1 && t->scale == TP_F32);
}
END_TEST

/* Entropy calibration (qformat.h tp_calib_entropy_threshold): an empty histogram and a flat one keep amax (folding
 * mass into the last bin only costs); |N(0, 1)| with three outliers at 50 sigma clips the outliers but keeps the
 * bulk (E4M3's relative step does not shrink with the scale, so nothing is gained by clipping into the bulk); the
 * threshold is a bin edge. */
START_TEST(test_calib_entropy) {
    enum { N = 2048 };
    unsigned *h = calloc(N, sizeof(unsigned));
    ck_assert_double_eq(tp_calib_entropy_threshold(h, N, 50.0), 50.0);
    for (int i = 0; i < N; i++) h[i] = 100;
    ck_assert_double_eq(tp_calib_entropy_threshold(h, N, 50.0), 50.0);
    memset(h, 0, N * sizeof(unsigned));
    uint64_t x = 12345;
    for (int i = 0; i < 400000; i++) { /* |N(0, 1)| by Box-Muller from a 64-bit LCG */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const double u1 = ((x >> 11) + 1.0) * 0x1.0p-53;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const double u2 = (x >> 11) * 0x1.0p-53, z = fabs(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
        const int b = (int)(z / 50.0 * N);
        h[b < N ? b : N - 1]++;
    }
    h[N - 1] += 3;
    const double t = tp_calib_entropy_threshold(h, N, 50.0);
    printf("entropy calibration: |N(0,1)| + 3 outliers at 50: threshold %.3f\n", t);
    ck_assert(t < 50.0 && t > 5.0);
    ck_assert_double_eq_tol(fmod(t / 50.0 * N, 1.0), 0.0, 1e-9);
    free(h);
}
END_TEST


/* Large tensors are quantized on several threads (qformat.c QPAR_MIN): the codes, scales, s2 and the QDQ values are
 * the same bits as on one thread, for every format, weights and activations, an even and an odd K, NaN and Inf
 * present (the row blocks are independent; the NVFP4 amax is order-free). */
START_TEST(test_threads_same_bits) {
    const int64_t rows = 300, Ks[2] = {1024, 1001}; /* above qformat.c's QPAR_MIN (2^18 elements) either way */
    for (int ki = 0; ki < 2; ki++) {
        const int64_t K = Ks[ki], n = rows * K;
        float *x = malloc(sizeof(float) * (size_t)n), *y1 = malloc(sizeof(float) * (size_t)n),
              *y2 = malloc(sizeof(float) * (size_t)n);
        uint32_t h = 12345u;
        for (int64_t i = 0; i < n; i++) {
            h = h * 1664525u + 1013904223u;
            x[i] = ((float)(h >> 8) * 0x1.0p-24f - 0.5f) * (1 + (i % 97 == 0 ? 40 : 0));
        }
        x[777] = NAN, x[5000] = INFINITY, x[rows * K - 3] = -INFINITY;
        for (int f = TP_QF_NONE + 1; f < TP_QF_COUNT; f++)
            for (int w = 0; w <= 1; w++) {
                tp_qtensor a, b;
                tp_error e;
                float ga = 0, gb = 0;
                omp_set_num_threads(1);
                ck_assert_int_eq(tp_quantize((tp_qformat)f, x, rows, K, w, 0.0f, &a, &e), TP_OK);
                ck_assert_int_eq(tp_qdq_f32((tp_qformat)f, x, y1, rows, K, w, 0.0f, &ga, &e), TP_OK);
                omp_set_num_threads(4);
                ck_assert_int_eq(tp_quantize((tp_qformat)f, x, rows, K, w, 0.0f, &b, &e), TP_OK);
                ck_assert_int_eq(tp_qdq_f32((tp_qformat)f, x, y2, rows, K, w, 0.0f, &gb, &e), TP_OK);
                ck_assert_msg(a.elem_bytes == b.elem_bytes && memcmp(a.elems, b.elems, a.elem_bytes) == 0,
                              "format %d weight %d K %lld: codes differ", f, w, (long long)K);
                ck_assert(a.scale_bytes == b.scale_bytes && memcmp(a.scales, b.scales, a.scale_bytes) == 0);
                ck_assert(memcmp(&a.global_scale, &b.global_scale, 4) == 0 && memcmp(&ga, &gb, 4) == 0);
                ck_assert(memcmp(y1, y2, sizeof(float) * (size_t)n) == 0);
                omp_set_num_threads(1);
                ck_assert_int_eq(tp_dequantize(&a, y1, &e), TP_OK);
                omp_set_num_threads(4);
                ck_assert_int_eq(tp_dequantize(&a, y2, &e), TP_OK);
                ck_assert(memcmp(y1, y2, sizeof(float) * (size_t)n) == 0);
                tp_qtensor_free(&a);
                tp_qtensor_free(&b);
            }
        free(x), free(y1), free(y2);
    }
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("qformat");
    TCase *tc = tcase_create("golden");
    tcase_add_unchecked_fixture(tc, load_golden, free_golden);
    tcase_set_timeout(tc, 120); /* ~1 s natively; valgrind is far slower */
    tcase_add_test(tc, test_e2m1_decode_table);
    tcase_add_test(tc, test_e4m3_decode_table);
    tcase_add_test(tc, test_ue8m0_decode_table);
    tcase_add_test(tc, test_e2m1_encode_golden);
    tcase_add_test(tc, test_e4m3_encode_golden);
    tcase_add_test(tc, test_blocks_golden);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("worked");
    tcase_set_timeout(tw, 60); /* test_threads_same_bits: ~0.3 s natively, seconds under the sanitizers */
    tcase_add_test(tw, test_e2m1_encode_by_hand);
    tcase_add_test(tw, test_ue8m0_encode);
    tcase_add_test(tw, test_mxfp8_zero_block);
    tcase_add_test(tw, test_mxfp8_outlier);
    tcase_add_test(tw, test_mxfp8_power_of_two_amax);
    tcase_add_test(tw, test_mxfp4_examples);
    tcase_add_test(tw, test_nvfp4_given_global_scale);
    tcase_add_test(tw, test_fp8_tensor_examples);
    tcase_add_test(tw, test_fp8_block128_weight_tiles);
    tcase_add_test(tw, test_quantize_dequantize_equals_qdq);
    tcase_add_test(tw, test_e2m1_packing);
    tcase_add_test(tw, test_non_finite);
    tcase_add_test(tw, test_global_scale);
    tcase_add_test(tw, test_errors);
    tcase_add_test(tw, test_traits_and_parse);
    tcase_add_test(tw, test_calib_entropy);
    tcase_add_test(tw, test_threads_same_bits);
    suite_add_tcase(s, tw);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
