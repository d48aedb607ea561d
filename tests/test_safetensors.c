/* test_safetensors.c: the safetensors reader and writer against good files, every kind of malformed file
 * the reader must name, the model-loading checks, and a mutation fuzz loop (no crash, one-line errors).
 * Each test writes its files into its own mkdtemp directory, removed by the fixture's teardown. */
#include <check.h>

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "formats/dtype.h"
#include "io/safetensors.h"

/* ---- fixture and helpers ------------------------------------------------------------------------------ */

#define TP_TMPDIR_PREFIX "/tmp/tp_st_test_"
#include "test_tmpdir.h"

/* A file written by hand: the 8-byte length of json, json, then data. */
static void write_raw(const char *path, const char *json, const void *data, size_t dlen) {
    size_t jl = strlen(json);
    unsigned char *b = malloc(8 + jl + dlen + 1);
    ck_assert(b != NULL);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)jl >> (8 * i));
    memcpy(b + 8, json, jl);
    if (dlen) memcpy(b + 8 + jl, data, dlen);
    write_bytes(path, b, 8 + jl + dlen);
    free(b);
}

static void write_len_only(const char *path, uint64_t n, const char *rest) {
    unsigned char b[256];
    size_t rl = strlen(rest);
    ck_assert(rl + 8 <= sizeof b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
    memcpy(b + 8, rest, rl);
    write_bytes(path, b, 8 + rl);
}

/* Every message: one line, starting with the path. */
static void check_msg_form(const tp_error *err, const char *path) {
    ck_assert_msg(strchr(err->msg, '\n') == NULL && strchr(err->msg, '\r') == NULL, "multi-line message: %s",
                  err->msg);
    ck_assert_msg(strncmp(err->msg, path, strlen(path)) == 0, "message does not start with the path: %s", err->msg);
    ck_assert_msg(strlen(err->msg) > strlen(path) + 2, "empty reason: %s", err->msg);
}

static void check_contains(const tp_error *err, const char *sub) {
    if (sub) ck_assert_msg(strstr(err->msg, sub) != NULL, "message lacks \"%s\": %s", sub, err->msg);
}

/* tp_st_open must fail with want, and the message must contain sub1 and sub2 (when non-NULL). */
static void expect_open_fail(const char *path, tp_status want, const char *sub1, const char *sub2) {
    tp_safetensors st;
    tp_error err = {0};
    tp_status s = tp_st_open(path, &st, &err);
    ck_assert_msg(s == want, "status %s, expected %s (%s)", tp_status_name(s), tp_status_name(want), err.msg);
    ck_assert_int_eq(err.code, want);
    ck_assert_ptr_null(st.tensors);
    ck_assert_ptr_null(st.data);
    ck_assert_int_eq(st.n_tensors, 0);
    check_msg_form(&err, path);
    check_contains(&err, sub1);
    check_contains(&err, sub2);
}

static void expect_raw_fail(const char *json, const void *data, size_t dlen, const char *sub1, const char *sub2) {
    const char *p = tpath("raw.safetensors");
    write_raw(p, json, data, dlen);
    expect_open_fail(p, TP_ERR_FORMAT, sub1, sub2);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

#define ASSERT_BITS_EQ(a, b) \
    ck_assert_msg(bits(a) == bits(b), "%s = %.9g (0x%08X), expected %.9g (0x%08X)", #a, (double)(a), bits(a), \
                  (double)(b), bits(b))

/* ---- good files --------------------------------------------------------------------------------------- */

static const float F32_VALS[6] = {1.5f, -2.25f, 0.003f, 1.0e30f, 7.0f, -1.0e-20f};

START_TEST(test_roundtrip_f32_f16_bf16) {
    /* 0.1 is not representable in f16/bf16: the stored codes are the round-to-nearest-even ones. */
    uint16_t f16[5] = {0x3C00, 0xC000, 0x7BFF, 0x0001, tp_f32_to_f16(0.1f)};
    uint16_t bf16[4] = {0x3F80, 0xC0A0, tp_f32_to_bf16(0.1f), 0x0001};
    ck_assert_uint_eq(f16[4], 0x2E66);
    ck_assert_uint_eq(bf16[2], 0x3DCD);
    tp_st_write_entry e[3] = {
        {"w32", TP_F32, 2, {2, 3}, F32_VALS},
        {"w16", TP_F16, 1, {5}, f16},
        {"wbf", TP_BF16, 2, {2, 2}, bf16},
    };
    const char *p = tpath("good.safetensors");
    tp_error err = {0};
    ck_assert_int_eq(tp_st_write(p, e, 3, &err), TP_OK);

    /* Layout as the reference writer makes it: aligned, space-padded, keys and fields in order. */
    size_t n;
    unsigned char *b = read_bytes(p, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | b[i];
    ck_assert_uint_eq((8 + hl) % 8, 0);
    ck_assert_uint_eq(n, 8 + hl + 24 + 10 + 8);
    const char *want = "{\"w32\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"w16\":{\"dtype\":\"F16\",\"shape\":[5],\"data_offsets\":[24,34]},"
                       "\"wbf\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[34,42]}}";
    ck_assert_uint_ge(hl, strlen(want));
    ck_assert(memcmp(b + 8, want, strlen(want)) == 0);
    for (size_t i = strlen(want); i < hl; i++) ck_assert_int_eq(b[8 + i], ' ');
    ck_assert(memcmp(b + 8 + hl, F32_VALS, 24) == 0);
    free(b);

    tp_safetensors st;
    ck_assert_int_eq(tp_st_open(p, &st, &err), TP_OK);
    ck_assert_int_eq(st.n_tensors, 3);
    ck_assert_uint_eq(st.data_size, 42);
    ck_assert_str_eq(st.path, p);
    ck_assert_str_eq(st.tensors[0].name, "w32");
    ck_assert_str_eq(st.tensors[1].name, "w16");
    ck_assert_str_eq(st.tensors[2].name, "wbf");
    const tp_st_tensor *t = tp_st_find(&st, "wbf");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, TP_BF16);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 2);
    ck_assert_uint_eq(t->begin, 34);
    ck_assert_uint_eq(t->end, 42);
    ck_assert_int_eq(tp_st_find(&st, "w16")->dtype, TP_F16);
    ck_assert_ptr_null(tp_st_find(&st, "nope"));
    tp_st_close(&st);
    ck_assert_ptr_null(st.tensors);
    tp_st_close(&st); /* twice is harmless */

    float a[6], h[5], bb[4];
    tp_param_spec specs[3] = {
        {"wbf", 2, {2, 2}, bb}, /* order differs from the file on purpose */
        {"w32", 2, {2, 3}, a},
        {"w16", 1, {5}, h},
    };
    ck_assert_msg(tp_st_load_params(p, specs, 3, &err) == TP_OK, "%s", err.msg);
    for (int i = 0; i < 6; i++) ASSERT_BITS_EQ(a[i], F32_VALS[i]);
    ASSERT_BITS_EQ(h[0], 1.0f);
    ASSERT_BITS_EQ(h[1], -2.0f);
    ASSERT_BITS_EQ(h[2], 65504.0f);
    ASSERT_BITS_EQ(h[3], 0x1.0p-24f);
    ASSERT_BITS_EQ(h[4], 0.0999755859375f); /* 0x2E66 = 1638/16384 */
    ASSERT_BITS_EQ(bb[0], 1.0f);
    ASSERT_BITS_EQ(bb[1], -5.0f);
    ASSERT_BITS_EQ(bb[2], 0.10009765625f); /* 0x3DCD */
    ASSERT_BITS_EQ(bb[3], 0x1.0p-133f);    /* bf16 subnormal, an fp32 subnormal */
}
END_TEST

START_TEST(test_shapes_and_scalar) {
    float t4[12], s0 = 42.5f;
    for (int i = 0; i < 12; i++) t4[i] = (float)(i + 1) * 0.5f;
    uint16_t v[3] = {0x4000, 0x4040, 0xBF80}; /* bf16 2, 3, -1 */
    tp_st_write_entry e[4] = {
        {"t4", TP_F32, 4, {2, 1, 3, 2}, t4},
        {"scalar", TP_F32, 0, {0}, &s0},
        {"empty", TP_F16, 2, {0, 5}, NULL},
        {"v", TP_BF16, 1, {3}, v},
    };
    const char *p = tpath("shapes.safetensors");
    tp_error err = {0};
    ck_assert_msg(tp_st_write(p, e, 4, &err) == TP_OK, "%s", err.msg);
    tp_safetensors st;
    ck_assert_int_eq(tp_st_open(p, &st, &err), TP_OK);
    const tp_st_tensor *t = tp_st_find(&st, "t4");
    ck_assert_int_eq(t->ndim, 4);
    ck_assert(t->shape[0] == 2 && t->shape[1] == 1 && t->shape[2] == 3 && t->shape[3] == 2);
    ck_assert_uint_eq(t->end - t->begin, 48);
    t = tp_st_find(&st, "scalar");
    ck_assert_int_eq(t->ndim, 0);
    ck_assert_uint_eq(t->begin, 48);
    ck_assert_uint_eq(t->end, 52); /* a scalar is one element */
    t = tp_st_find(&st, "empty");
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_uint_eq(t->begin, t->end);
    tp_st_close(&st);

    float o4[12], os = 0, ov[3];
    tp_param_spec specs[4] = {
        {"t4", 4, {2, 1, 3, 2}, o4},
        {"scalar", 0, {0}, &os},
        {"empty", 2, {0, 5}, NULL},
        {"v", 1, {3}, ov},
    };
    ck_assert_msg(tp_st_load_params(p, specs, 4, &err) == TP_OK, "%s", err.msg);
    for (int i = 0; i < 12; i++) ASSERT_BITS_EQ(o4[i], t4[i]);
    ASSERT_BITS_EQ(os, 42.5f);
    ASSERT_BITS_EQ(ov[0], 2.0f);
    ASSERT_BITS_EQ(ov[1], 3.0f);
    ASSERT_BITS_EQ(ov[2], -1.0f);

    /* A scalar is not a [1] tensor. */
    specs[1].ndim = 1;
    specs[1].shape[0] = 1;
    ck_assert_int_eq(tp_st_load_params(p, specs, 4, &err), TP_ERR_SHAPE);
    check_contains(&err, "'scalar': shape [] in file, model expects [1]");
}
END_TEST

START_TEST(test_unaligned_and_metadata) {
    /* Offsets need not be aligned (hand-written files, gaps between tensors): 16-bit values at an odd offset. */
    unsigned char data[7] = {0xAA, 0x00, 0x3C, 0x80, 0x3F, 0x00, 0xC0}; /* f16 1.0 at 1; bf16 1.0, f16 -2 */
    const char *p = tpath("odd.safetensors");
    write_raw(p,
              "{\"__metadata__\":{\"format\":\"pt\"},\"u\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[1,3]},"
              " \"b\" : {\"data_offsets\":[3,5],\"shape\":[1],\"dtype\":\"BF16\"},"
              "\"c\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[5,7]}}   ",
              data, sizeof data);
    tp_safetensors st;
    tp_error err = {0};
    ck_assert_msg(tp_st_open(p, &st, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(st.n_tensors, 3); /* __metadata__ is not a tensor */
    ck_assert_ptr_null(tp_st_find(&st, "__metadata__"));
    tp_st_close(&st);
    float u = 0, b = 0, c = 0;
    tp_param_spec specs[3] = {{"u", 1, {1}, &u}, {"b", 1, {1}, &b}, {"c", 1, {1}, &c}};
    ck_assert_msg(tp_st_load_params(p, specs, 3, &err) == TP_OK, "%s", err.msg);
    ASSERT_BITS_EQ(u, 1.0f);
    ASSERT_BITS_EQ(b, 1.0f);
    ASSERT_BITS_EQ(c, -2.0f);

    /* An empty header object is a valid (empty) file. */
    write_raw(p, "{}", NULL, 0);
    ck_assert_int_eq(tp_st_open(p, &st, &err), TP_OK);
    ck_assert_int_eq(st.n_tensors, 0);
    ck_assert_uint_eq(st.data_size, 0);
    tp_st_close(&st);
    ck_assert_int_eq(tp_st_load_params(p, NULL, 0, &err), TP_OK);
}
END_TEST

/* ---- malformed files ---------------------------------------------------------------------------------- */

/* Writes a good two-tensor file to p; returns its size and header length. */
static size_t write_two(const char *p, uint64_t *hl) {
    float a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    tp_st_write_entry e[2] = {{"first", TP_F32, 2, {2, 2}, a}, {"trunc_me", TP_F32, 1, {2}, b}};
    tp_error err = {0};
    ck_assert_int_eq(tp_st_write(p, e, 2, &err), TP_OK);
    size_t n;
    unsigned char *bytes = read_bytes(p, &n);
    *hl = 0;
    for (int i = 7; i >= 0; i--) *hl = (*hl << 8) | bytes[i];
    free(bytes);
    return n;
}

START_TEST(test_truncated) {
    const char *p = tpath("t.safetensors"), *q = tpath("cut.safetensors");
    uint64_t hl;
    size_t n = write_two(p, &hl);
    unsigned char *b = read_bytes(p, &n);

    write_bytes(q, b, n - 4); /* data section cut short: the last tensor runs past it */
    expect_open_fail(q, TP_ERR_FORMAT, "'trunc_me'", "data_offsets [16, 24]");
    write_bytes(q, b, 8 + hl + 1); /* almost all data gone: the first tensor already fails */
    expect_open_fail(q, TP_ERR_FORMAT, "'first'", "past the end of the data section (1 bytes");
    write_bytes(q, b, 8 + hl / 2); /* cut inside the header */
    expect_open_fail(q, TP_ERR_FORMAT, "header length", "past the end of the file");
    write_bytes(q, b, 5); /* cut inside the length */
    expect_open_fail(q, TP_ERR_FORMAT, "5 bytes", "header length");
    write_bytes(q, b, 0);
    expect_open_fail(q, TP_ERR_FORMAT, "0 bytes", NULL);

    /* The same truncation seen through tp_st_load_params is the same format error. */
    float a[4], c[2];
    tp_param_spec specs[2] = {{"first", 2, {2, 2}, a}, {"trunc_me", 1, {2}, c}};
    write_bytes(q, b, n - 1);
    free(b);
    tp_error err = {0};
    ck_assert_int_eq(tp_st_load_params(q, specs, 2, &err), TP_ERR_FORMAT);
    check_msg_form(&err, q);
}
END_TEST

START_TEST(test_header_length) {
    const char *p = tpath("len.safetensors");
    write_len_only(p, 123456, "{}");
    expect_open_fail(p, TP_ERR_FORMAT, "header length 123456 is past the end of the file (10 bytes)", NULL);
    write_len_only(p, UINT64_MAX, "{}"); /* would overflow 8 + N */
    expect_open_fail(p, TP_ERR_FORMAT, "header length 18446744073709551615", "past the end");
    write_len_only(p, 1, "{");
    expect_open_fail(p, TP_ERR_FORMAT, "header length 1", "too short");
    write_len_only(p, 0, "");
    expect_open_fail(p, TP_ERR_FORMAT, "header length 0", "too short");
    write_bytes(p, "\x02\0\0\0\0", 5);
    expect_open_fail(p, TP_ERR_FORMAT, "file is 5 bytes", NULL);

    /* Over the 100 MB limit but inside the file: a sparse file keeps this cheap. */
    write_len_only(p, 100000001, "{");
    ck_assert(truncate(p, 8 + 100000001 + 16) == 0);
    expect_open_fail(p, TP_ERR_FORMAT, "header length 100000001", "limit");
}
END_TEST

START_TEST(test_bad_json) {
    expect_raw_fail("{\"a\": ", NULL, 0, "header JSON", NULL);
    expect_raw_fail("{\"a\": {}} x", NULL, 0, "header JSON", NULL);
    expect_raw_fail("{\"a\" 1}", NULL, 0, "header JSON", "line 1");
    expect_raw_fail("{\"\xff\": 1}", NULL, 0, "header JSON", NULL); /* not UTF-8 */
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", NULL, 0,
                    "header JSON", NULL); /* too big for a 64-bit integer */
    /* A newline inside the JSON error excerpt still yields one line. */
    expect_raw_fail("{\"a\nb\": 1}", NULL, 0, "header JSON", NULL);
}
END_TEST

START_TEST(test_not_object) {
    expect_raw_fail("[1, 2]", NULL, 0, "an array", "expected an object");
    expect_raw_fail("\"str\"", NULL, 0, "header JSON", NULL);
    expect_raw_fail("{\"w\": 3}", NULL, 0, "'w'", "expected an object");
    expect_raw_fail("{\"__metadata__\": [\"x\"]}", NULL, 0, "'__metadata__'", "an array");
}
END_TEST

START_TEST(test_missing_and_bad_fields) {
    float d[4] = {0};
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", d, 4, "'w'", "missing field 'data_offsets'");
    expect_raw_fail("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4, "'w'", "missing field 'dtype'");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", d, 4, "'w'", "missing field 'shape'");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"foo\":1}}", d, 4, "'w'",
                    "unexpected field 'foo'");
    expect_raw_fail("{\"w\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4, "'w'", "'dtype'");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", d, 4, "'w'", "'shape'");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", d, 4, "'w'",
                    "shape[0] is a real number");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,-1],\"data_offsets\":[0,4]}}", d, 4, "'w'",
                    "shape[1] is negative (-1)");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", d, 4, "'w'",
                    "9 dimensions");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", d, 4, "'w'", "data_offsets");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{}}}", d, 4, "'w'", "data_offsets");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", d, 4, "'w'",
                    "data_offsets[1] is a string");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,4]}}", d, 4, "'w'",
                    "data_offsets[0] is negative");
}
END_TEST

START_TEST(test_unknown_dtype) {
    float d[1] = {1};
    expect_raw_fail("{\"w\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4, "'w'",
                    "unknown dtype 'F7'");
    expect_raw_fail("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4, "'w'", "'f32'");
    /* A name with a newline and a tab is escaped, keeping the message on one line. */
    expect_raw_fail("{\"a\\nb\\tc\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4, "'a\\x0Ab\\x09c'",
                    "F7");
    /* A very long name is shortened so the rest of the message survives. */
    char json[2048], name[1001];
    memset(name, 'n', 1000);
    name[1000] = '\0';
    snprintf(json, sizeof json, "{\"%s\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}", name);
    expect_raw_fail(json, d, 4, "...'", "unknown dtype 'F7'");
}
END_TEST

START_TEST(test_offsets_inconsistent) {
    float d[4] = {1, 2, 3, 4};
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", d, 16, "'w'",
                    "data_offsets [0, 12] span 12 bytes, but shape [2, 2] of F32 needs 16");
    expect_raw_fail("{\"w\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", d, 16, "'w'", "needs 8");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,4]}}", d, 16, "'w'",
                    "end before they begin");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}", d, 16, "'w'",
                    "past the end of the data section (16 bytes");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,16]}}", d,
                    16, "'w'", "too many elements");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,16]}}", d, 16,
                    "'w'", "too many elements"); /* numel fits, numel * 4 does not */
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,9223372036854775807]}}", d, 16,
                    "'w'", "past the end");
}
END_TEST

/* Tensors sharing bytes of the data section, and a key given twice: refused with the names, never loaded. */
START_TEST(test_overlaps_and_duplicates) {
    float d[4] = {1, 2, 3, 4};
    expect_raw_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                    d, 16, "tensors 'a' (data_offsets [0, 12]) and 'b' ([8, 16]) overlap", NULL);
    /* the header's order does not matter; a tensor inside another overlaps it too */
    expect_raw_fail("{\"inner\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                    "\"outer\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                    d, 16, "'outer'", "'inner'");
    expect_raw_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                    d, 16, "duplicate", "w");
    /* adjacent tensors and empty ones at any offset are fine */
    const char *p = tpath("raw.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
              d, 16);
    tp_safetensors st;
    tp_error err = {0};
    ck_assert_msg(tp_st_open(p, &st, &err) == TP_OK, "%s", err.msg);
    ck_assert_int_eq(st.n_tensors, 3);
    tp_st_close(&st);
}
END_TEST

START_TEST(test_missing_file) {
    const char *p = tpath("does_not_exist.safetensors");
    expect_open_fail(p, TP_ERR_IO, "cannot open", NULL);
    float a[1];
    tp_param_spec s = {"a", 1, {1}, a};
    tp_error err = {0};
    ck_assert_int_eq(tp_st_load_params(p, &s, 1, &err), TP_ERR_IO);
    check_msg_form(&err, p);
    expect_open_fail(g_dir, TP_ERR_IO, "is a folder; expected a file", NULL);

    /* A newline in the path itself is masked: the message stays one line. */
    const char *nl = tpath("new\nline.safetensors");
    tp_safetensors st;
    ck_assert_int_eq(tp_st_open(nl, &st, &err), TP_ERR_IO);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "multi-line message: %s", err.msg);
    check_contains(&err, "new?line.safetensors: cannot open");
}
END_TEST

/* ---- loading into a model ----------------------------------------------------------------------------- */

/* a [2,3] F32, b [4] F16, c [3] BF16, plus what extra says. */
static const char *write_model(const char *name, int with_i64, int with_e4m3) {
    static const float a[6] = {1, 2, 3, 4, 5, 6};
    static const uint16_t b[4] = {0x3C00, 0x4000, 0x4200, 0x4400}, c[3] = {0x3F80, 0x4000, 0x4040};
    static const int64_t i[2] = {7, -8};
    static const uint8_t q[2] = {0x38, 0xB8};
    tp_st_write_entry e[5] = {
        {"a", TP_F32, 2, {2, 3}, a},
        {"b", TP_F16, 1, {4}, b},
        {"c", TP_BF16, 1, {3}, c},
    };
    int n = 3;
    if (with_i64) e[n++] = (tp_st_write_entry){"idx", TP_I64, 1, {2}, i};
    if (with_e4m3) e[n++] = (tp_st_write_entry){"q8", TP_E4M3, 1, {2}, q};
    const char *p = tpath(name);
    tp_error err = {0};
    ck_assert_int_eq(tp_st_write(p, e, n, &err), TP_OK);
    return p;
}

static float g_a[6], g_b[4], g_c[3], g_x[8];

static void expect_load_fail(const char *p, const tp_param_spec *specs, int n, tp_status want, const char *sub1,
                             const char *sub2) {
    tp_error err = {0};
    tp_status s = tp_st_load_params(p, specs, n, &err);
    ck_assert_msg(s == want, "status %s, expected %s (%s)", tp_status_name(s), tp_status_name(want), err.msg);
    check_msg_form(&err, p);
    check_contains(&err, sub1);
    check_contains(&err, sub2);
}

START_TEST(test_load_wrong_shape) {
    const char *p = write_model("m.safetensors", 0, 0);
    for (int i = 0; i < 6; i++) g_a[i] = -99.0f;
    tp_param_spec specs[3] = {{"a", 2, {3, 2}, g_a}, {"b", 1, {4}, g_b}, {"c", 1, {3}, g_c}};
    expect_load_fail(p, specs, 3, TP_ERR_SHAPE, "tensor 'a': shape [2, 3] in file, model expects [3, 2]", NULL);
    for (int i = 0; i < 6; i++) ASSERT_BITS_EQ(g_a[i], -99.0f); /* nothing written on failure */
    tp_param_spec rank[3] = {{"a", 1, {6}, g_a}, {"b", 1, {4}, g_b}, {"c", 2, {1, 3}, g_c}};
    expect_load_fail(p, rank, 3, TP_ERR_SHAPE, "tensor 'a': shape [2, 3] in file, model expects [6]",
                     "(and 1 more");
}
END_TEST

START_TEST(test_load_missing) {
    const char *p = write_model("m.safetensors", 0, 0);
    tp_param_spec specs[5] = {{"a", 2, {2, 3}, g_a}, {"b", 1, {4}, g_b}, {"c", 1, {3}, g_c},
                              {"norm.weight", 1, {8}, g_x}, {"norm.bias", 1, {8}, g_x}};
    expect_load_fail(p, specs, 5, TP_ERR_SHAPE, "missing tensor 'norm.weight' (and 1 more)", NULL);
    /* Missing and extra together: another model's checkpoint. Both are reported. */
    tp_param_spec other[2] = {{"a", 2, {2, 3}, g_a}, {"z", 1, {4}, g_b}};
    expect_load_fail(p, other, 2, TP_ERR_SHAPE, "missing tensor 'z'", "2 tensors the model lacks, first 'b'");
}
END_TEST

START_TEST(test_load_extra) {
    const char *p = write_model("m.safetensors", 0, 0);
    tp_param_spec specs[2] = {{"a", 2, {2, 3}, g_a}, {"b", 1, {4}, g_b}};
    expect_load_fail(p, specs, 2, TP_ERR_SHAPE, "tensor 'c' is not a parameter of the model", NULL);
    expect_load_fail(p, specs, 1, TP_ERR_SHAPE, "tensor 'b' is not a parameter of the model (and 1 more)", NULL);
}
END_TEST

START_TEST(test_load_unsupported_dtype) {
    const char *p = write_model("i.safetensors", 1, 0);
    tp_param_spec specs[4] = {{"a", 2, {2, 3}, g_a}, {"b", 1, {4}, g_b}, {"c", 1, {3}, g_c}, {"idx", 1, {2}, g_x}};
    expect_load_fail(p, specs, 4, TP_ERR_SHAPE, "tensor 'idx': dtype I64", "F32, F16 or BF16");

    /* FP8 is readable by tp_st_open, but not loadable as parameters. */
    p = write_model("q.safetensors", 0, 1);
    tp_safetensors st;
    tp_error err = {0};
    ck_assert_int_eq(tp_st_open(p, &st, &err), TP_OK);
    ck_assert_int_eq(tp_st_find(&st, "q8")->dtype, TP_E4M3);
    ck_assert_uint_eq(st.data[tp_st_find(&st, "q8")->begin], 0x38);
    tp_st_close(&st);
    specs[3] = (tp_param_spec){"q8", 1, {2}, g_x};
    expect_load_fail(p, specs, 4, TP_ERR_SHAPE, "tensor 'q8': dtype F8_E4M3", NULL);

    /* A good load of the same model for contrast. */
    p = write_model("m.safetensors", 0, 0);
    ck_assert_msg(tp_st_load_params(p, specs, 3, &err) == TP_OK, "%s", err.msg);
    ASSERT_BITS_EQ(g_a[5], 6.0f);
    ASSERT_BITS_EQ(g_b[3], 4.0f);
    ASSERT_BITS_EQ(g_c[2], 3.0f);
}
END_TEST

/* ---- writer arguments --------------------------------------------------------------------------------- */

START_TEST(test_write_errors) {
    float v[4] = {1, 2, 3, 4};
    const char *p = tpath("w.safetensors");
    tp_error err = {0};
    tp_st_write_entry dup[2] = {{"x", TP_F32, 1, {2}, v}, {"x", TP_F32, 1, {2}, v}};
    ck_assert_int_eq(tp_st_write(p, dup, 2, &err), TP_ERR_ARG);
    check_msg_form(&err, p);
    check_contains(&err, "'x' appears twice");
    ck_assert_int_eq(access(p, F_OK), -1); /* nothing written */

    tp_st_write_entry bad = {"y", TP_F32, 9, {1}, v};
    ck_assert_int_eq(tp_st_write(p, &bad, 1, &err), TP_ERR_ARG);
    check_contains(&err, "'y': ndim 9");
    bad = (tp_st_write_entry){"y", TP_F32, 2, {2, -2}, v};
    ck_assert_int_eq(tp_st_write(p, &bad, 1, &err), TP_ERR_ARG);
    check_contains(&err, "shape[1] is negative");
    bad = (tp_st_write_entry){"y", (tp_dtype)99, 1, {2}, v};
    ck_assert_int_eq(tp_st_write(p, &bad, 1, &err), TP_ERR_ARG);
    check_contains(&err, "invalid dtype");
    bad = (tp_st_write_entry){"__metadata__", TP_F32, 1, {2}, v};
    ck_assert_int_eq(tp_st_write(p, &bad, 1, &err), TP_ERR_ARG);
    check_contains(&err, "__metadata__");
    bad = (tp_st_write_entry){"y", TP_F32, 1, {2}, NULL};
    ck_assert_int_eq(tp_st_write(p, &bad, 1, &err), TP_ERR_ARG);
    check_contains(&err, "no data");
    bad = (tp_st_write_entry){"bad\xff", TP_F32, 1, {2}, v};
    ck_assert_int_eq(tp_st_write(p, &bad, 1, &err), TP_ERR_ARG);
    check_contains(&err, "UTF-8");
    check_msg_form(&err, p);

    const char *nodir = tpath("no/such/dir.safetensors");
    bad = (tp_st_write_entry){"y", TP_F32, 1, {2}, v};
    ck_assert_int_eq(tp_st_write(nodir, &bad, 1, &err), TP_ERR_IO);
    check_msg_form(&err, nodir);

    /* Zero tensors: a valid file holding "{}" padded to 8 bytes. */
    ck_assert_int_eq(tp_st_write(p, NULL, 0, &err), TP_OK);
    size_t n;
    unsigned char *b = read_bytes(p, &n);
    ck_assert_uint_eq(n, 16);
    ck_assert(memcmp(b + 8, "{}      ", 8) == 0);
    free(b);
}
END_TEST

/* ---- fuzz --------------------------------------------------------------------------------------------- */

START_TEST(test_fuzz_open) {
    float a[6] = {1, 2, 3, 4, 5, 6}, oa[6], ob[5], oc[4];
    uint16_t b[5] = {0x3C00, 0x4000, 0x4200, 0x4400, 0x4500}, c[4] = {0x3F80, 0x4000, 0x4040, 0x4080};
    tp_st_write_entry e[3] = {
        {"blocks.0.attn.qkv.weight", TP_F32, 2, {2, 3}, a},
        {"b", TP_F16, 1, {5}, b},
        {"norm.bias", TP_BF16, 3, {1, 2, 2}, c},
    };
    tp_param_spec specs[3] = {
        {"blocks.0.attn.qkv.weight", 2, {2, 3}, oa}, {"b", 1, {5}, ob}, {"norm.bias", 3, {1, 2, 2}, oc}};
    const char *src = tpath("seed.safetensors"), *p = tpath("fuzz.safetensors");
    tp_error err = {0};
    ck_assert_int_eq(tp_st_write(src, e, 3, &err), TP_OK);
    size_t n0;
    unsigned char *orig = read_bytes(src, &n0);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | orig[i];
    unsigned char *buf = malloc(n0 + 64);
    ck_assert(buf != NULL);

    /* Bytes that keep the JSON structurally plausible, so mutations get past the parser into validation. */
    static const char alphabet[] = "0123456789-.eE[]{}\",: F16BF32I64_8";
    tp_rng r;
    tp_rng_seed(&r, 20240611);
    int n_ok = 0, n_fail = 0;
    for (int it = 0; it < 2000; it++) {
        size_t n = n0;
        memcpy(buf, orig, n0);
        int ops = 1 + (int)(tp_rng_u64(&r) % 4);
        for (int k = 0; k < ops; k++) {
            uint64_t op = tp_rng_u64(&r) % 10, x = tp_rng_u64(&r);
            if (op < 3) { /* flip a bit anywhere */
                buf[x % n] ^= (unsigned char)(1u << (tp_rng_u64(&r) % 8));
            } else if (op < 7) { /* a JSON-ish byte inside the header */
                buf[8 + x % hl] = (unsigned char)alphabet[tp_rng_u64(&r) % (sizeof alphabet - 1)];
            } else if (op < 8) { /* trim */
                n = (size_t)(x % (n + 1));
            } else if (op < 9) { /* a random byte of the length field */
                buf[x % 8] = (unsigned char)tp_rng_u64(&r);
            } else { /* a digit run inside the header turned huge */
                size_t at = 8 + x % hl;
                for (int j = 0; j < 12 && at + (size_t)j < 8 + hl; j++)
                    if (buf[at + j] >= '0' && buf[at + j] <= '9') buf[at + j] = '9';
            }
            if (n == 0) break;
        }
        write_bytes(p, buf, n);
        tp_safetensors st;
        tp_status s = tp_st_open(p, &st, &err);
        if (s == TP_OK) {
            n_ok++;
            for (int i = 0; i < st.n_tensors; i++) {
                const tp_st_tensor *t = &st.tensors[i];
                ck_assert(t->begin <= t->end && t->end <= st.data_size);
                ck_assert(t->ndim >= 0 && t->ndim <= TP_ST_MAX_DIMS);
                ck_assert(tp_dtype_info(t->dtype) != NULL);
            }
            tp_st_close(&st);
        } else {
            n_fail++;
            ck_assert_msg(s == TP_ERR_FORMAT, "iteration %d: %s: %s", it, tp_status_name(s), err.msg);
            check_msg_form(&err, p);
            ck_assert_ptr_null(st.tensors);
        }
        /* The loader on top must hold up too: dst sizes match the good file, so any OK means the shapes matched. */
        tp_status ls = tp_st_load_params(p, specs, 3, &err);
        if (ls != TP_OK) {
            ck_assert_msg(ls == TP_ERR_FORMAT || ls == TP_ERR_SHAPE, "iteration %d: %s: %s", it,
                          tp_status_name(ls), err.msg);
            check_msg_form(&err, p);
        } else {
            ck_assert_int_eq(s, TP_OK);
        }
    }
    ck_assert_int_gt(n_ok, 20);
    ck_assert_int_gt(n_fail, 1000);
    free(buf);
    free(orig);
}
END_TEST

static Suite *safetensors_suite(void) {
    Suite *s = suite_create("safetensors");
    TCase *good = tcase_create("good");
    tcase_add_checked_fixture(good, setup, teardown);
    tcase_add_test(good, test_roundtrip_f32_f16_bf16);
    tcase_add_test(good, test_shapes_and_scalar);
    tcase_add_test(good, test_unaligned_and_metadata);
    suite_add_tcase(s, good);

    TCase *bad = tcase_create("malformed");
    tcase_add_checked_fixture(bad, setup, teardown);
    tcase_add_test(bad, test_truncated);
    tcase_add_test(bad, test_header_length);
    tcase_add_test(bad, test_bad_json);
    tcase_add_test(bad, test_not_object);
    tcase_add_test(bad, test_missing_and_bad_fields);
    tcase_add_test(bad, test_unknown_dtype);
    tcase_add_test(bad, test_offsets_inconsistent);
    tcase_add_test(bad, test_overlaps_and_duplicates);
    tcase_add_test(bad, test_missing_file);
    suite_add_tcase(s, bad);

    TCase *load = tcase_create("load_params");
    tcase_add_checked_fixture(load, setup, teardown);
    tcase_add_test(load, test_load_wrong_shape);
    tcase_add_test(load, test_load_missing);
    tcase_add_test(load, test_load_extra);
    tcase_add_test(load, test_load_unsupported_dtype);
    suite_add_tcase(s, load);

    TCase *wr = tcase_create("write");
    tcase_add_checked_fixture(wr, setup, teardown);
    tcase_add_test(wr, test_write_errors);
    suite_add_tcase(s, wr);

    TCase *fz = tcase_create("fuzz");
    tcase_add_checked_fixture(fz, setup, teardown);
    tcase_set_timeout(fz, 120); /* 2000 files written and parsed; slow under sanitizers */
    tcase_add_test(fz, test_fuzz_open);
    suite_add_tcase(s, fz);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(safetensors_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
