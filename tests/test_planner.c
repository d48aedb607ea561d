/* test_planner.c: the capability table (every architecture x precision against a table written out here, not
 * derived by the rules caps.c uses), architecture parsing, and the precision policy (parsing, order, fnmatch
 * semantics on timm layer names, JSON files, the practitioners' defaults, rules that match nothing). No GPU. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/vit.h"
#include "exec/cuda/kernels/scale_layout.h"
#include "planner/caps.h"
#include "planner/policy.h"
#include "planner/supports.h"

/* ---- capability table ---------------------------------------------------------------------------------- */

/* Columns in tp_precision order: fp32 fp16 bf16 fp8 fp8-block mxfp8 nvfp4 mxfp4.
 * kinds: N native, E emulated, U unsupported; impl: 1 when tprof implements the path today. */
static const struct {
    int sm;
    const char *kinds, *impl;
} TABLE[] = {
    /* the last columns, fp8-wo and nvfp4-wo: tprof's weight-only GEMVs, built for sm_90 only */
    {89, "NNNNEEEEUU", "1111011100"},  /* Ada: FP8 yes, FP8 block-128 scales no (Hopper only), no block-scaled MMA */
    {90, "NNNNNEEENN", "1111111111"},  /* Hopper: VEC128/BLK128x128 native, MX/NV emulated */
    {100, "NNNNENNNUU", "1111011100"}, /* Blackwell: block-scaled MMA; FP8 block-128 emulated; none written yet */
    {103, "NNNNENNNUU", "1111011100"},
    {110, "NNNNENNNUU", "1111011100"},
    {120, "NNNNENNNUU", "1111011100"},
    {121, "NNNNENNNUU", "1111011100"},
    /* not in the table: derived */
    {80, "NNNUUEEEUU", "1110000000"},  /* A100: no FP8; MX/NV could be emulated in BF16 but nobody has */
    {86, "NNNUUEEEUU", "1110000000"},
    {75, "NNUUUUUUUU", "1100000000"},  /* Turing: no BF16 */
    {70, "UUUUUUUUUU", "0000000000"},  /* Volta: CUDA 13 dropped it */
    {130, "NNNNENNNUU", "1111011100"}, /* a future Blackwell successor follows Blackwell's rules */
};
#define N_TABLE ((int)(sizeof TABLE / sizeof TABLE[0]))

static tp_path_kind kind_of(char c) {
    return c == 'N' ? TP_PATH_NATIVE : c == 'E' ? TP_PATH_EMULATED : TP_PATH_UNSUPPORTED;
}

START_TEST(test_caps_archs) {
    int n = 0;
    const tp_arch *a = tp_caps_archs(&n);
    static const int want[] = {89, 90, 100, 103, 110, 120, 121};
    ck_assert_int_eq(n, 7);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(a[i].sm, want[i]);
        ck_assert_ptr_eq(tp_caps_arch_find(want[i]), &a[i]);
        ck_assert(strlen(a[i].family) > 0 && strlen(a[i].products) > 0);
    }
    ck_assert_ptr_nonnull(strstr(tp_caps_arch_find(89)->products, "L40S"));
    ck_assert_ptr_nonnull(strstr(tp_caps_arch_find(90)->products, "H100"));
    ck_assert_ptr_nonnull(strstr(tp_caps_arch_find(100)->products, "B200"));
    ck_assert_str_eq(tp_caps_arch_find(103)->family, "Blackwell Ultra");
    ck_assert_ptr_nonnull(strstr(tp_caps_arch_find(110)->products, "Jetson Thor"));
    ck_assert_ptr_nonnull(strstr(tp_caps_arch_find(120)->products, "RTX PRO 6000"));
    ck_assert_ptr_nonnull(strstr(tp_caps_arch_find(121)->products, "GB10"));
    ck_assert_ptr_null(tp_caps_arch_find(80));
    ck_assert_ptr_null(tp_caps_arch_find(0));
}
END_TEST

START_TEST(test_caps_every_entry) {
    for (int t = 0; t < N_TABLE; t++) {
        int sm = TABLE[t].sm;
        for (int p = 0; p < TP_PREC_COUNT; p++) {
            tp_cap c = tp_caps_lookup(sm, (tp_precision)p);
            const char *pn = tp_precision_name((tp_precision)p);
            ck_assert_msg(c.kind == kind_of(TABLE[t].kinds[p]), "sm_%d %s: %s, expected %c", sm, pn,
                          tp_path_kind_name(c.kind), TABLE[t].kinds[p]);
            ck_assert_msg(c.implemented == TABLE[t].impl[p] - '0', "sm_%d %s: implemented %d", sm, pn, c.implemented);
            ck_assert_msg(c.derived == (tp_caps_arch_find(sm) == NULL), "sm_%d derived %d", sm, c.derived);
            ck_assert_msg(c.how && strlen(c.how) > 10, "sm_%d %s: how '%s'", sm, pn, c.how ? c.how : "(null)");
            ck_assert_msg((c.cost != NULL) == (c.kind == TP_PATH_EMULATED), "sm_%d %s: cost iff emulated", sm, pn);
        }
    }
    /* out-of-range precision never crashes */
    ck_assert_int_eq(tp_caps_lookup(90, TP_PREC_COUNT).kind, TP_PATH_UNSUPPORTED);
}
END_TEST

START_TEST(test_caps_how_strings) {
    ck_assert_ptr_nonnull(strstr(tp_caps_lookup(90, TP_PREC_FP8).how, "E4M3, per-tensor scales"));
    ck_assert_ptr_nonnull(strstr(tp_caps_lookup(90, TP_PREC_FP8_BLOCK).how, "VEC128_32F/BLK128x128_32F"));
    ck_assert_ptr_nonnull(strstr(tp_caps_lookup(89, TP_PREC_FP8_BLOCK).how, "per 128-wide K slice, FP32 rescale"));
    ck_assert_ptr_nonnull(strstr(tp_caps_lookup(100, TP_PREC_FP8_BLOCK).how, "per 128-wide K slice"));
    for (int sm = 100; sm <= 121; sm++) {
        if (!tp_caps_arch_find(sm)) continue;
        const char *m = tp_caps_lookup(sm, TP_PREC_MXFP8).how, *n = tp_caps_lookup(sm, TP_PREC_NVFP4).how;
        ck_assert_msg(strstr(m, "VEC32_UE8M0") && strstr(m, "128x4 swizzled"), "sm_%d mxfp8: %s", sm, m);
        ck_assert_msg(strstr(n, "VEC16_UE4M3 + FP32 alpha"), "sm_%d nvfp4: %s", sm, n);
    }
    const char *e = tp_caps_lookup(90, TP_PREC_MXFP8).how;
    ck_assert_ptr_nonnull(strstr(e, "exact dequantization to BF16"));
    ck_assert_ptr_nonnull(strstr(e, "FP32 accumulation"));
    e = tp_caps_lookup(90, TP_PREC_NVFP4).how;
    ck_assert_ptr_nonnull(strstr(e, "BF16"));
    ck_assert_ptr_nonnull(strstr(e, "alpha"));
    ck_assert_ptr_nonnull(strstr(tp_caps_lookup(80, TP_PREC_FP8).how, "sm_89"));
    ck_assert_ptr_nonnull(strstr(tp_caps_lookup(75, TP_PREC_BF16).how, "sm_80"));
    ck_assert_str_eq(tp_path_kind_name(TP_PATH_NATIVE), "native");
    ck_assert_str_eq(tp_path_kind_name(TP_PATH_EMULATED), "emulated");
    ck_assert_str_eq(tp_path_kind_name(TP_PATH_UNSUPPORTED), "unsupported");
}
END_TEST

START_TEST(test_caps_parse_arch) {
    static const struct {
        const char *s;
        int sm;
    } good[] = {{"sm_90", 90}, {"90", 90},     {"sm90", 90},     {"SM_90", 90},  {"sm_89", 89},
                {"sm_100a", 100}, {"sm_120f", 120}, {"sm_121", 121}, {"9.0", 90},  {"12.1", 121},
                {"8.9", 89},   {"sm_80", 80},  {"75", 75},       {"sm_90a", 90}, {"110", 110}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int sm = -1;
        tp_error e = {0};
        ck_assert_msg(tp_caps_parse_arch(good[i].s, &sm, &e) == TP_OK, "%s: %s", good[i].s, e.msg);
        ck_assert_msg(sm == good[i].sm, "%s -> %d", good[i].s, sm);
    }
    static const char *bad[] = {"", "sm_", "sm_9", "sm_9x", "sm_90b", "9.", "9.10", "1000", "sm_1000", "abc",
                                "sm_9.0", " 90", "90 ", "-90", "0.5", "sm__90", "h100"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int sm = 12345;
        tp_error e = {0};
        ck_assert_msg(tp_caps_parse_arch(bad[i], &sm, &e) == TP_ERR_ARG, "'%s' accepted as %d", bad[i], sm);
        ck_assert_int_eq(sm, 12345);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        ck_assert_msg(strstr(e.msg, quoted), "message does not name '%s': %s", bad[i], e.msg);
        ck_assert_ptr_null(strchr(e.msg, '\n'));
    }
    tp_error e;
    int sm;
    ck_assert_int_eq(tp_caps_parse_arch(NULL, &sm, &e), TP_ERR_ARG);
}
END_TEST

START_TEST(test_caps_require) {
    tp_error e = {0};
    ck_assert_int_eq(tp_caps_require(90, NULL, TP_PREC_FP8, "blocks.0.mlp.fc1", &e), TP_OK);
    ck_assert_int_eq(tp_caps_require(90, NULL, TP_PREC_NVFP4, "blocks.0.mlp.fc1", &e), TP_OK); /* emulated */
    ck_assert_int_eq(tp_caps_require(89, NULL, TP_PREC_MXFP8, NULL, &e), TP_OK);
    /* hardware cannot: names the layer, the format and the GPU, and why */
    ck_assert_int_eq(tp_caps_require(80, "NVIDIA A100-SXM4-80GB", TP_PREC_FP8, "blocks.3.attn.qkv", &e),
                     TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "blocks.3.attn.qkv"));
    ck_assert_ptr_nonnull(strstr(e.msg, "fp8"));
    ck_assert_ptr_nonnull(strstr(e.msg, "NVIDIA A100-SXM4-80GB"));
    ck_assert_ptr_nonnull(strstr(e.msg, "sm_80"));
    ck_assert_ptr_nonnull(strstr(e.msg, "sm_89 or newer"));
    ck_assert_ptr_null(strchr(e.msg, '\n'));
    /* hardware can, tprof cannot yet */
    ck_assert_int_eq(tp_caps_require(100, NULL, TP_PREC_NVFP4, "head", &e), TP_OK);
    ck_assert_int_eq(tp_caps_require(100, NULL, TP_PREC_FP8_BLOCK, "head", &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "layer head"));
    ck_assert_ptr_nonnull(strstr(e.msg, "fp8-block"));
    ck_assert_ptr_nonnull(strstr(e.msg, "sm_100 (Blackwell: B200, GB200)"));
    ck_assert_ptr_nonnull(strstr(e.msg, "not implemented in this build"));
    ck_assert_int_eq(tp_caps_require(90, NULL, TP_PREC_FP8_BLOCK, "blocks.0.attn.proj", &e), TP_OK);
    ck_assert_int_eq(tp_caps_require(100, NULL, TP_PREC_FP8_BLOCK, "blocks.0.attn.proj", &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "emulated path"));
    ck_assert_int_eq(tp_caps_require(86, NULL, TP_PREC_MXFP4, NULL, &e), TP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "emulated path"));
    ck_assert_ptr_null(strstr(e.msg, "layer"));
}
END_TEST

/* The 128x4 tiled scale layout the Blackwell block-scaled GEMMs read (src/exec/cuda/kernels/scale_layout.h). */
START_TEST(test_scale_layout_128x4) {
    const int64_t rows = 200, kb = 7; /* padded to 256 x 8: 2 x 2 tiles of 512 bytes */
    ck_assert_uint_eq(tp_swz_bytes(rows, kb), 2048);
    ck_assert_uint_eq(tp_swz_bytes(128, 4), 512);
    ck_assert_uint_eq(tp_swz_bytes(1, 1), 512);
    /* worked positions: row r of a tile is (r % 32) * 16 + (r / 32) * 4, column c adds c; tiles row-major */
    ck_assert_uint_eq(tp_swz_offset(0, 0, kb), 0);
    ck_assert_uint_eq(tp_swz_offset(0, 1, kb), 1);
    ck_assert_uint_eq(tp_swz_offset(0, 3, kb), 3);
    ck_assert_uint_eq(tp_swz_offset(1, 0, kb), 16);
    ck_assert_uint_eq(tp_swz_offset(32, 0, kb), 4);
    ck_assert_uint_eq(tp_swz_offset(33, 2, kb), 16 + 4 + 2);
    ck_assert_uint_eq(tp_swz_offset(127, 3, kb), 31 * 16 + 3 * 4 + 3);
    ck_assert_uint_eq(tp_swz_offset(0, 4, kb), 512);   /* second tile of the first row of tiles */
    ck_assert_uint_eq(tp_swz_offset(128, 0, kb), 1024); /* first tile of the second row of tiles */
    ck_assert_uint_eq(tp_swz_offset(199, 6, kb), 1024 + 512 + (71 % 32) * 16 + (71 / 32) * 4 + 2);
    /* a bijection from the padded matrix onto its bytes */
    unsigned char seen[2048] = {0};
    for (int64_t r = 0; r < 256; r++)
        for (int64_t c = 0; c < 8; c++) {
            size_t o = tp_swz_offset(r, c, kb);
            ck_assert_uint_lt(o, 2048);
            ck_assert_int_eq(seen[o], 0);
            seen[o] = 1;
        }
}
END_TEST

static char *capture_print(int sm) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    ck_assert_ptr_nonnull(f);
    tp_caps_print(sm, f);
    fclose(f);
    return buf;
}

/* The row of precision name in printed text (a copy the caller frees), or NULL. */
static char *row_of(const char *text, const char *name) {
    char key[32];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *r = strstr(text, key);
    if (!r) return NULL;
    r++;
    const char *e = strchr(r, '\n');
    return strndup(r, e ? (size_t)(e - r) : strlen(r));
}

START_TEST(test_caps_print) {
    char *t = capture_print(90);
    ck_assert_ptr_nonnull(strstr(t, "sm_90  Hopper (H100, H200)"));
    ck_assert_ptr_nonnull(strstr(t, "precision"));
    ck_assert_ptr_nonnull(strstr(t, "hardware"));
    ck_assert_ptr_nonnull(strstr(t, "in this build"));
    ck_assert_ptr_nonnull(strstr(t, "cost: "));
    ck_assert_ptr_null(strstr(t, "derived"));
    int cuda = tp_caps_build_has_cuda();
    for (int p = 0; p < TP_PREC_COUNT; p++) {
        char *r = row_of(t, tp_precision_name((tp_precision)p));
        ck_assert_msg(r != NULL, "no row for %s", tp_precision_name((tp_precision)p));
        tp_cap c = tp_caps_lookup(90, (tp_precision)p);
        ck_assert_ptr_nonnull(strstr(r, tp_path_kind_name(c.kind)));
        ck_assert_ptr_nonnull(strstr(r, c.how));
        size_t l = strlen(r);
        int yes = l >= 3 && strcmp(r + l - 3, "yes") == 0;
        ck_assert_msg(yes == (cuda && c.implemented), "%s row: %s", tp_precision_name((tp_precision)p), r);
        free(r);
    }
    free(t);
    t = capture_print(80);
    ck_assert_ptr_nonnull(strstr(t, "sm_80"));
    ck_assert_ptr_nonnull(strstr(t, "not in the table; derived from compute capability"));
    char *r = row_of(t, "fp8");
    ck_assert_ptr_nonnull(strstr(r, "unsupported"));
    free(r);
    free(t);
}
END_TEST

START_TEST(test_caps_json) {
    json_t *j = tp_caps_json(100);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "sm")), 100);
    ck_assert_str_eq(json_string_value(json_object_get(j, "arch")), "sm_100");
    ck_assert_str_eq(json_string_value(json_object_get(j, "compute_capability")), "10.0");
    ck_assert_str_eq(json_string_value(json_object_get(j, "family")), "Blackwell");
    ck_assert(json_is_false(json_object_get(j, "derived")));
    ck_assert(json_is_null(json_object_get(j, "note")));
    int cuda = json_is_true(json_object_get(j, "cuda_executor"));
    ck_assert_int_eq(cuda, tp_caps_build_has_cuda());
    json_t *rows = json_object_get(j, "precisions");
    ck_assert_int_eq((int)json_array_size(rows), TP_PREC_COUNT);
    for (int p = 0; p < TP_PREC_COUNT; p++) {
        json_t *r = json_array_get(rows, (size_t)p);
        tp_cap c = tp_caps_lookup(100, (tp_precision)p);
        ck_assert_str_eq(json_string_value(json_object_get(r, "precision")), tp_precision_name((tp_precision)p));
        ck_assert_str_eq(json_string_value(json_object_get(r, "path")), tp_path_kind_name(c.kind));
        ck_assert_str_eq(json_string_value(json_object_get(r, "how")), c.how);
        ck_assert_int_eq(json_is_true(json_object_get(r, "implemented")), c.implemented);
        ck_assert_int_eq(json_is_true(json_object_get(r, "in_this_build")), c.implemented && cuda);
        ck_assert_int_eq(json_is_string(json_object_get(r, "cost")), c.kind == TP_PATH_EMULATED);
    }
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(rows, TP_PREC_NVFP4), "path")), "native");
    json_decref(j);
    j = tp_caps_json(86);
    ck_assert(json_is_true(json_object_get(j, "derived")));
    ck_assert(json_is_null(json_object_get(j, "family")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "compute_capability")), "8.6");
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(j, "note")), "derived from compute capability"));
    json_decref(j);
}
END_TEST

/* ---- policy -------------------------------------------------------------------------------------------- */

static tp_policy parse_ok(tp_precision def, const char *spec) {
    tp_policy p;
    tp_error e = {0};
    tp_policy_init(&p, def);
    ck_assert_msg(tp_policy_parse(&p, spec, &e) == TP_OK, "%s: %s", spec, e.msg);
    return p;
}

START_TEST(test_policy_parse) {
    tp_policy p = parse_ok(TP_PREC_FP8, "*patch_embed*=fp16,blocks.*.mlp.*=nvfp4,head=fp16");
    ck_assert_int_eq(p.def, TP_PREC_FP8);
    ck_assert_int_eq(p.n_rules, 3);
    ck_assert_str_eq(p.rules[0].glob, "*patch_embed*");
    ck_assert_int_eq(p.rules[0].prec, TP_PREC_FP16);
    ck_assert_str_eq(p.rules[1].glob, "blocks.*.mlp.*");
    ck_assert_int_eq(p.rules[1].prec, TP_PREC_NVFP4);
    ck_assert_str_eq(p.rules[2].glob, "head");
    ck_assert_int_eq(p.rules[2].builtin, 0);
    /* spaces around entries, globs and precisions are dropped; every precision name parses */
    p = parse_ok(TP_PREC_FP16, " head = fp32 , a=fp8-block,b=mxfp8,c=mxfp4,d=bf16 ");
    ck_assert_int_eq(p.n_rules, 5);
    ck_assert_str_eq(p.rules[0].glob, "head");
    ck_assert_int_eq(p.rules[0].prec, TP_PREC_FP32);
    ck_assert_int_eq(p.rules[1].prec, TP_PREC_FP8_BLOCK);
    ck_assert_int_eq(p.rules[2].prec, TP_PREC_MXFP8);
    ck_assert_int_eq(p.rules[3].prec, TP_PREC_MXFP4);
    ck_assert_int_eq(p.rules[4].prec, TP_PREC_BF16);
    /* parse appends: a second list comes after the first */
    tp_error e;
    ck_assert_int_eq(tp_policy_parse(&p, "e=fp8", &e), TP_OK);
    ck_assert_int_eq(p.n_rules, 6);
    ck_assert_str_eq(p.rules[5].glob, "e");
}
END_TEST

START_TEST(test_policy_parse_errors) {
    static const struct {
        const char *spec, *names;
    } bad[] = {
        {"=fp16", "'=fp16'"},                      /* empty glob */
        {"head", "'head'"},                        /* missing '=' */
        {"a=fp16,head,b=fp8", "'head'"},           /* missing '=' in the middle */
        {"head=fp17", "'fp17'"},                   /* unknown precision, named */
        {"head=", "''"},                           /* empty precision */
        {"a=fp16,,b=fp8", "entry 2"},              /* empty entry */
        {"a=fp16,", "entry 2"},                    /* trailing comma */
        {"", "empty override list"},               /* nothing */
        {"   ", "empty override list"},
        {" =nvfp4", "empty layer glob"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tp_policy p;
        tp_policy_default(&p, TP_PREC_NVFP4);
        tp_policy before = p;
        tp_error e = {0};
        ck_assert_msg(tp_policy_parse(&p, bad[i].spec, &e) == TP_ERR_ARG, "'%s' accepted", bad[i].spec);
        ck_assert_msg(strstr(e.msg, bad[i].names), "'%s': message does not name %s: %s", bad[i].spec, bad[i].names,
                      e.msg);
        ck_assert_ptr_null(strchr(e.msg, '\n'));
        ck_assert_msg(memcmp(&p, &before, sizeof p) == 0, "'%s' changed the policy", bad[i].spec);
    }
    /* the unknown-precision message names the whole entry too */
    tp_policy p;
    tp_policy_init(&p, TP_PREC_FP8);
    tp_error e;
    ck_assert_int_eq(tp_policy_parse(&p, "blocks.*.mlp.*=nvfp5", &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "'blocks.*.mlp.*=nvfp5'"));
    ck_assert_ptr_nonnull(strstr(e.msg, "unknown precision 'nvfp5'"));
    /* too long a glob, too many rules */
    char longspec[TP_NAME_LEN + 16];
    memset(longspec, 'x', TP_NAME_LEN);
    strcpy(longspec + TP_NAME_LEN, "=fp16");
    ck_assert_int_eq(tp_policy_parse(&p, longspec, &e), TP_ERR_ARG);
    ck_assert_int_eq(p.n_rules, 0);
    for (int i = 0; i < TP_POLICY_MAX_RULES; i++) ck_assert_int_eq(tp_policy_add(&p, "a", TP_PREC_FP16, &e), TP_OK);
    ck_assert_int_eq(tp_policy_add(&p, "b", TP_PREC_FP16, &e), TP_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "'b'"));
    ck_assert_int_eq(tp_policy_add(&p, "", TP_PREC_FP16, &e), TP_ERR_ARG);
}
END_TEST

START_TEST(test_policy_order) {
    /* later entries win */
    tp_policy p = parse_ok(TP_PREC_NVFP4, "blocks.*=fp8,blocks.1*.mlp.*=fp16,blocks.11.mlp.fc2=bf16");
    int r = 99;
    ck_assert_int_eq(tp_policy_resolve(&p, "blocks.0.attn.qkv", &r), TP_PREC_FP8);
    ck_assert_int_eq(r, 0);
    ck_assert_int_eq(tp_policy_resolve(&p, "blocks.10.mlp.fc1", &r), TP_PREC_FP16);
    ck_assert_int_eq(r, 1);
    ck_assert_int_eq(tp_policy_resolve(&p, "blocks.11.mlp.fc2", &r), TP_PREC_BF16);
    ck_assert_int_eq(r, 2);
    ck_assert_int_eq(tp_policy_resolve(&p, "head", &r), TP_PREC_NVFP4);
    ck_assert_int_eq(r, -1);
    ck_assert_int_eq(tp_policy_resolve(&p, "head", NULL), TP_PREC_NVFP4);
    /* the same rules in the other order: the broad rule, last, wins everywhere it matches */
    p = parse_ok(TP_PREC_NVFP4, "blocks.11.mlp.fc2=bf16,blocks.*=fp8");
    ck_assert_int_eq(tp_policy_resolve(&p, "blocks.11.mlp.fc2", &r), TP_PREC_FP8);
    ck_assert_int_eq(r, 1);
    char buf[128];
    ck_assert_str_eq(tp_policy_rule_str(&p, 1, buf, sizeof buf), "blocks.*=fp8");
    ck_assert_str_eq(tp_policy_rule_str(&p, -1, buf, sizeof buf), "default=nvfp4");
    ck_assert_str_eq(tp_policy_reason(&p, 0, buf, sizeof buf), "override 'blocks.11.mlp.fc2=bf16'");
    ck_assert_str_eq(tp_policy_reason(&p, -1, buf, sizeof buf), "policy default nvfp4");
}
END_TEST

static int matches(const char *glob, const char *layer) {
    tp_policy p;
    tp_error e;
    tp_policy_init(&p, TP_PREC_FP32);
    ck_assert_int_eq(tp_policy_add(&p, glob, TP_PREC_FP16, &e), TP_OK);
    int r;
    tp_policy_resolve(&p, layer, &r);
    return r == 0;
}

START_TEST(test_policy_fnmatch) {
    /* '*' crosses dots (flags 0, as Python's fnmatch in ModelOpt) */
    ck_assert(matches("blocks.*.mlp.*", "blocks.11.mlp.fc2"));
    ck_assert(matches("blocks.*.mlp.*", "blocks.0.mlp.fc1"));
    ck_assert(!matches("blocks.*.mlp.*", "blocks.0.attn.qkv"));
    ck_assert(!matches("blocks.*.mlp.*", "blocks.0.mlp")); /* needs something after "mlp." */
    ck_assert(matches("*mlp*", "blocks.3.mlp.act"));
    ck_assert(matches("*patch_embed*", "patch_embed.proj"));
    ck_assert(matches("blocks.*", "blocks.3.attn.proj"));
    ck_assert(matches("*.fc1", "blocks.7.mlp.fc1"));
    ck_assert(!matches("*.fc1", "blocks.7.mlp.fc2"));
    ck_assert(matches("*attn.proj", "blocks.0.attn.proj"));
    ck_assert(!matches("*attn.proj", "patch_embed.proj"));
    /* exact names are exact: no prefix match */
    ck_assert(matches("head", "head"));
    ck_assert(!matches("head", "head_drop"));
    ck_assert(!matches("blocks.1.mlp.fc1", "blocks.11.mlp.fc1"));
    /* '?' is one character; bracket sets */
    ck_assert(matches("blocks.?.attn.qkv", "blocks.3.attn.qkv"));
    ck_assert(!matches("blocks.?.attn.qkv", "blocks.11.attn.qkv"));
    ck_assert(matches("blocks.[0-3].*", "blocks.2.mlp.fc2"));
    ck_assert(!matches("blocks.[0-3].*", "blocks.4.mlp.fc2"));
    ck_assert(matches("blocks.1[01].*", "blocks.10.attn.qkv"));
    ck_assert(!matches("blocks.1[01].*", "blocks.1.attn.qkv"));
    /* case matters, as in timm's names */
    ck_assert(!matches("HEAD", "head"));
}
END_TEST

START_TEST(test_policy_defaults) {
    static const tp_precision quantized[] = {TP_PREC_FP8, TP_PREC_FP8_BLOCK, TP_PREC_MXFP8, TP_PREC_NVFP4,
                                             TP_PREC_MXFP4};
    for (size_t i = 0; i < sizeof quantized / sizeof quantized[0]; i++) {
        tp_policy p;
        tp_policy_default(&p, quantized[i]);
        int r;
        ck_assert_int_eq(p.def, quantized[i]);
        ck_assert_int_eq(tp_policy_resolve(&p, "patch_embed.proj", &r), TP_PREC_FP16);
        ck_assert(r >= 0 && p.rules[r].builtin);
        ck_assert_int_eq(tp_policy_resolve(&p, "vision.patch_embed.proj", &r), TP_PREC_FP16);
        ck_assert_int_eq(tp_policy_resolve(&p, "head", &r), TP_PREC_FP16);
        ck_assert(r >= 0 && p.rules[r].builtin);
        ck_assert_int_eq(tp_policy_resolve(&p, "blocks.0.mlp.fc1", &r), quantized[i]);
        ck_assert_int_eq(r, -1);
        ck_assert_int_eq(tp_policy_resolve(&p, "blocks.11.attn.qkv", &r), quantized[i]);
    }
    static const tp_precision high[] = {TP_PREC_FP32, TP_PREC_FP16, TP_PREC_BF16};
    for (size_t i = 0; i < sizeof high / sizeof high[0]; i++) {
        tp_policy p;
        tp_policy_default(&p, high[i]);
        ck_assert_int_eq(p.n_rules, 0);
        ck_assert_int_eq(tp_policy_resolve(&p, "head", NULL), high[i]);
    }
    /* the user's rules come after the defaults, so they win: "unless overridden" */
    tp_policy p;
    tp_error e;
    tp_policy_default(&p, TP_PREC_NVFP4);
    ck_assert_int_eq(tp_policy_parse(&p, "head=nvfp4", &e), TP_OK);
    int r;
    ck_assert_int_eq(tp_policy_resolve(&p, "head", &r), TP_PREC_NVFP4);
    ck_assert_int_eq(r, 3); /* after the defaults: patch_embed.proj, head, lm_head */
    ck_assert_int_eq(tp_policy_resolve(&p, "lm_head", NULL), TP_PREC_FP16);
    ck_assert_int_eq(tp_policy_resolve(&p, "patch_embed.proj", &r), TP_PREC_FP16);
    char buf[128];
    ck_assert_str_eq(tp_policy_reason(&p, r, buf, sizeof buf), "default rule '*patch_embed.proj=fp16'");
    ck_assert_str_eq(tp_policy_reason(&p, 3, buf, sizeof buf), "override 'head=nvfp4'");
}
END_TEST

static char *write_temp(const char *text) {
    char *path = strdup("/tmp/tprof_policy_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static tp_status load_text(const char *text, tp_policy *p, tp_error *e, char **path_out) {
    char *path = write_temp(text);
    tp_status s = tp_policy_load_json(path, p, e);
    unlink(path);
    if (path_out) *path_out = path;
    else free(path);
    return s;
}

START_TEST(test_policy_json_good) {
    tp_policy p;
    tp_error e = {0};
    const char *doc = "{\"_comment\": \"ViT-B/16 on H100\", \"default\": \"nvfp4\",\n"
                      " \"overrides\": [{\"layers\": \"blocks.*.attn.*\", \"precision\": \"fp8\"},\n"
                      "               {\"layers\": [\"blocks.0.*\", \"blocks.11.*\"], \"precision\": \"fp16\","
                      "                \"_why\": \"first and last blocks are sensitive\"},\n"
                      "               {\"layers\": \"head\", \"precision\": \"bf16\"}]}";
    ck_assert_msg(load_text(doc, &p, &e, NULL) == TP_OK, "%s", e.msg);
    ck_assert_int_eq(p.def, TP_PREC_NVFP4);
    ck_assert_int_eq(p.n_rules, 7); /* 3 defaults + 4 from the file */
    ck_assert_int_eq(p.rules[0].builtin, 1);
    ck_assert_int_eq(p.rules[1].builtin, 1);
    ck_assert_int_eq(p.rules[2].builtin, 1);
    ck_assert_str_eq(p.rules[4].glob, "blocks.0.*");
    ck_assert_str_eq(p.rules[5].glob, "blocks.11.*");
    ck_assert_int_eq(p.rules[5].builtin, 0);
    int r;
    ck_assert_int_eq(tp_policy_resolve(&p, "blocks.5.attn.qkv", &r), TP_PREC_FP8);
    ck_assert_int_eq(tp_policy_resolve(&p, "blocks.11.attn.qkv", &r), TP_PREC_FP16); /* later entry wins */
    ck_assert_int_eq(tp_policy_resolve(&p, "blocks.5.mlp.fc1", &r), TP_PREC_NVFP4);
    ck_assert_int_eq(tp_policy_resolve(&p, "head", &r), TP_PREC_BF16); /* the file overrides the default rule */
    ck_assert_int_eq(r, 6);
    ck_assert_int_eq(tp_policy_resolve(&p, "patch_embed.proj", &r), TP_PREC_FP16);
    /* no overrides at all */
    ck_assert_int_eq(load_text("{\"default\": \"bf16\"}", &p, &e, NULL), TP_OK);
    ck_assert_int_eq(p.def, TP_PREC_BF16);
    ck_assert_int_eq(p.n_rules, 0);
    ck_assert_int_eq(load_text("{\"default\": \"fp8\", \"overrides\": []}", &p, &e, NULL), TP_OK);
    ck_assert_int_eq(p.n_rules, 3); /* the defaults */
    /* round trip through tp_policy_json */
    json_t *j = tp_policy_json(&p);
    ck_assert_str_eq(json_string_value(json_object_get(j, "default")), "fp8");
    json_t *ov = json_object_get(j, "overrides");
    ck_assert_int_eq((int)json_array_size(ov), 3);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ov, 1), "layers")), "head");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ov, 1), "precision")), "fp16");
    ck_assert(json_is_true(json_object_get(json_array_get(ov, 1), "builtin")));
    json_decref(j);
}
END_TEST

START_TEST(test_policy_json_errors) {
    static const struct {
        const char *doc, *names;
    } bad[] = {
        {"{\"default\": \"nvfp4\", ", "invalid JSON"},
        {"[\"nvfp4\"]", "expected an object"},
        {"{\"overrides\": []}", "'default' is missing"},
        {"{\"default\": 4}", "'default' is a number"},
        {"{\"default\": \"fp4\"}", "'fp4'"},
        {"{\"default\": \"fp8\", \"overides\": []}", "unknown key 'overides'"},
        {"{\"default\": \"fp8\", \"overrides\": {\"head\": \"fp16\"}}", "'overrides' is an object"},
        {"{\"default\": \"fp8\", \"overrides\": [\"head=fp16\"]}", "'overrides[0]' is a string"},
        {"{\"default\": \"fp8\", \"overrides\": [{\"layers\": \"head\", \"precision\": \"fp16\"},"
         " {\"layers\": \"x\", \"precision\": \"fp17\"}]}",
         "overrides[1].precision"},
        {"{\"default\": \"fp8\", \"overrides\": [{\"layers\": \"head\"}]}", "overrides[0]: 'precision' is missing"},
        {"{\"default\": \"fp8\", \"overrides\": [{\"precision\": \"fp16\"}]}", "overrides[0]: 'layers' is missing"},
        {"{\"default\": \"fp8\", \"overrides\": [{\"layer\": \"head\", \"precision\": \"fp16\"}]}",
         "unknown key 'layer'"},
        {"{\"default\": \"fp8\", \"overrides\": [{\"layers\": 3, \"precision\": \"fp16\"}]}",
         "'overrides[0].layers' is a number"},
        {"{\"default\": \"fp8\", \"overrides\": [{\"layers\": [], \"precision\": \"fp16\"}]}", "empty array"},
        {"{\"default\": \"fp8\", \"overrides\": [{\"layers\": [\"a\", 1], \"precision\": \"fp16\"}]}",
         "'overrides[0].layers[1]' is a number"},
        {"{\"default\": \"fp8\", \"overrides\": [{\"layers\": \"\", \"precision\": \"fp16\"}]}", "empty layer glob"},
        {"{\"default\": \"fp8\", \"overrides\": [{\"layers\": \"head\", \"precision\": 16}]}",
         "'overrides[0].precision' is a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tp_policy p;
        tp_policy_default(&p, TP_PREC_MXFP8);
        tp_policy before = p;
        tp_error e = {0};
        char *path = NULL;
        tp_status s = load_text(bad[i].doc, &p, &e, &path);
        ck_assert_msg(s == TP_ERR_FORMAT, "doc %zu: status %s: %s", i, tp_status_name(s), e.msg);
        ck_assert_msg(strstr(e.msg, bad[i].names), "doc %zu: message lacks \"%s\": %s", i, bad[i].names, e.msg);
        ck_assert_msg(strstr(e.msg, path), "doc %zu: message does not name the file: %s", i, e.msg);
        ck_assert_ptr_null(strchr(e.msg, '\n'));
        ck_assert_msg(memcmp(&p, &before, sizeof p) == 0, "doc %zu changed the policy", i);
        free(path);
    }
    tp_policy p;
    tp_error e;
    ck_assert_int_eq(tp_policy_load_json("/nonexistent/tprof_policy.json", &p, &e), TP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent/tprof_policy.json"));
}
END_TEST

static void vit_tiny(int num_classes, tp_graph *g) {
    tp_vit_config c;
    tp_params prm = {0};
    tp_error e;
    ck_assert_msg(tp_vit_config_preset("vit-tiny", &c, &e) == TP_OK, "%s", e.msg);
    c.num_classes = num_classes;
    ck_assert_msg(tp_vit_params_shapes(&c, &prm, &e) == TP_OK, "%s", e.msg);
    ck_assert_msg(tp_vit_build_graph(&c, &prm, 2, g, &e) == TP_OK, "%s", e.msg);
    tp_params_free(&prm);
}

START_TEST(test_policy_on_vit_graph) {
    tp_graph g;
    vit_tiny(1000, &g);
    tp_policy p;
    tp_error e;
    tp_policy_default(&p, TP_PREC_NVFP4);
    ck_assert_int_eq(tp_policy_parse(&p, "blocks.*.mlp.*=fp8", &e), TP_OK);
    /* every GEMM of vit-tiny (12 blocks x qkv, proj, fc1, fc2; patch embedding; head) */
    int count[TP_PREC_COUNT] = {0}, gemms = 0;
    for (int i = 0; i < g.n_ops; i++) {
        if (g.ops[i].kind != TP_OP_LINEAR && g.ops[i].kind != TP_OP_PATCH_EMBED) continue;
        gemms++;
        count[tp_policy_resolve(&p, g.ops[i].layer, NULL)]++;
    }
    ck_assert_int_eq(gemms, 12 * 4 + 2);
    ck_assert_int_eq(count[TP_PREC_FP16], 2);
    ck_assert_int_eq(count[TP_PREC_FP8], 24);
    ck_assert_int_eq(count[TP_PREC_NVFP4], 24);
    tp_rule_use use[TP_POLICY_MAX_RULES];
    ck_assert_int_eq(tp_policy_check(&p, &g, use), 0);
    for (int i = 0; i < p.n_rules; i++) /* the default lm_head rule (decoders') matches nothing in a ViT */
        ck_assert_int_eq(use[i], strcmp(p.rules[i].glob, "lm_head") == 0 ? TP_RULE_UNMATCHED : TP_RULE_USED);
    tp_graph_free(&g);
}
END_TEST

START_TEST(test_policy_unmatched_rules) {
    tp_graph g;
    vit_tiny(1000, &g);
    tp_policy p;
    tp_error e;
    tp_policy_default(&p, TP_PREC_NVFP4);
    ck_assert_int_eq(tp_policy_parse(&p,
                                     "blocks.*.mpl.*=nvfp4,"       /* 2: typo, matches nothing */
                                     "blocks.*.norm1=fp8,"         /* 3: LayerNorms only, no GEMM */
                                     "blocks.1.mlp.fc1=fp8,"       /* 4: shadowed by 6 */
                                     "blocks.*.attn.qkv=fp8,"      /* 5: used */
                                     "blocks.1.*=fp16",            /* 6: used */
                                     &e),
                     TP_OK);
    tp_rule_use use[TP_POLICY_MAX_RULES];
    ck_assert_int_eq(tp_policy_check(&p, &g, use), 3);
    ck_assert_int_eq(use[0], TP_RULE_USED);      /* patch_embed.proj */
    ck_assert_int_eq(use[1], TP_RULE_USED);      /* head */
    ck_assert_int_eq(use[2], TP_RULE_UNMATCHED); /* lm_head: a default, not counted */
    ck_assert_int_eq(use[3], TP_RULE_UNMATCHED);
    ck_assert_int_eq(use[4], TP_RULE_NO_GEMM);
    ck_assert_int_eq(use[5], TP_RULE_SHADOWED);
    ck_assert_int_eq(use[6], TP_RULE_USED);
    ck_assert_int_eq(use[7], TP_RULE_USED);
    ck_assert_int_eq(tp_policy_check(&p, &g, NULL), 3);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    ck_assert_int_eq(tp_policy_warn(&p, &g, f), 3);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "tprof: warning: override 'blocks.*.mpl.*=nvfp4' matches no layer"));
    ck_assert_ptr_nonnull(strstr(buf, "'blocks.*.norm1=fp8' matches no GEMM or attention layer"));
    ck_assert_ptr_nonnull(strstr(buf, "'blocks.1.mlp.fc1=fp8' is overridden by later rules"));
    ck_assert_ptr_null(strstr(buf, "attn.qkv"));
    ck_assert_ptr_null(strstr(buf, "head"));
    int lines = 0;
    for (char *c = buf; *c; c++) lines += *c == '\n';
    ck_assert_int_eq(lines, 3);
    free(buf);
    tp_graph_free(&g);

    /* a model without a head: the builtin 'head=fp16' rule matches nothing, and that is no warning */
    vit_tiny(0, &g);
    tp_policy_default(&p, TP_PREC_FP8);
    ck_assert_int_eq(tp_policy_check(&p, &g, use), 0);
    ck_assert_int_eq(use[1], TP_RULE_UNMATCHED);
    ck_assert_int_eq(tp_policy_warn(&p, &g, stderr), 0);
    /* but a user rule naming it is */
    ck_assert_int_eq(tp_policy_parse(&p, "head=fp32", &e), TP_OK);
    ck_assert_int_eq(tp_policy_check(&p, &g, use), 1);
    ck_assert_int_eq(use[2], TP_RULE_UNMATCHED);
    tp_graph_free(&g);
}
END_TEST

/* The kernel-capability table (supports.h): each rule's yes at a shape that holds and its no, with the reason naming
 * the values, at an awkward one; the per-dimension rules tprof lint shares. */
START_TEST(test_supports) {
    char why[256];
    tp_kernel_shape s = {TP_E4M3, 197 * 3, 768, 768, 0, 0};
    ck_assert(tp_supports(TP_KERNEL_GEMM_FP8, &s, why, sizeof why));
    ck_assert_str_eq(why, "");
    s.k = 200; /* 200 % 16 = 8 */
    ck_assert(!tp_supports(TP_KERNEL_GEMM_FP8, &s, why, sizeof why));
    ck_assert_msg(strstr(why, "multiples of 16") && strstr(why, "K = 200"), "%s", why);
    s.k = 768, s.n = 1000; /* N 1000: 16-byte rows of the output fail for FP8, pass for fp8-block (N % 8) */
    ck_assert(!tp_supports(TP_KERNEL_GEMM_FP8, &s, why, sizeof why));
    ck_assert(tp_supports(TP_KERNEL_GEMM_FP8_BLOCK, &s, why, sizeof why));
    s.k = 48, s.block = 32;
    ck_assert(!tp_supports(TP_KERNEL_GEMM_BLOCK_SCALED, &s, why, sizeof why));
    ck_assert_msg(strstr(why, "K % 32 == 0") && strstr(why, "K = 48"), "%s", why);
    s.block = 16;
    ck_assert(tp_supports(TP_KERNEL_GEMM_BLOCK_SCALED, &s, NULL, 0));
    s.block = 0;
    ck_assert(!tp_supports(TP_KERNEL_GEMM_BLOCK_SCALED, &s, why, sizeof why));
    tp_kernel_shape g = {TP_F16, 591, 384, 200, 0, 0};
    ck_assert(tp_supports(TP_KERNEL_GEMM_SM90, &g, NULL, 0));
    g.k = 100;
    ck_assert(!tp_supports(TP_KERNEL_GEMM_SM90, &g, why, sizeof why));
    g.k = 200, g.dt = TP_F32;
    ck_assert(!tp_supports(TP_KERNEL_GEMM_SM90, &g, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "f16 or bf16"));
    tp_kernel_shape f8 = {TP_E4M3, 591, 24, 32, 0, 0}; /* E4M3 D needs N % 16, F16 D N % 8 */
    ck_assert(!tp_supports(TP_KERNEL_GEMM_SM90_FP8, &f8, why, sizeof why));
    f8.dt = TP_F16;
    ck_assert(tp_supports(TP_KERNEL_GEMM_SM90_FP8, &f8, NULL, 0));
    tp_kernel_shape pe = {TP_F16, 0, 768, 0, 16, 0};
    ck_assert(tp_supports(TP_KERNEL_PATCH_EMBED_FUSED, &pe, NULL, 0));
    pe.patch = 14; /* ViT-H: 14 % 4 != 0 */
    ck_assert(!tp_supports(TP_KERNEL_PATCH_EMBED_FUSED, &pe, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "P = 14"));
    pe.patch = 8; /* 3 * 64 % 64 == 0 */
    ck_assert(tp_supports(TP_KERNEL_PATCH_EMBED_FUSED, &pe, NULL, 0));
    ck_assert_str_eq(tp_kernel_name(TP_KERNEL_GEMM_FP8), "cuBLASLt FP8 GEMM");
    int64_t mult;
    ck_assert(tp_supports_dim(TP_DIM_ROW16, 32, 4, &mult) && mult == 32);  /* FP4: 32 elements per 16 bytes */
    ck_assert(!tp_supports_dim(TP_DIM_ROW16, 16, 4, &mult));
    ck_assert(tp_supports_dim(TP_DIM_ROW16, 16, 8, &mult) && mult == 16);
    ck_assert(!tp_supports_dim(TP_DIM_K_BLOCK, 197, 32, &mult) && mult == 32);
    ck_assert(!tp_supports_dim(TP_DIM_K_BLOCK, 0, 32, NULL));
    ck_assert(!tp_supports_dim(TP_DIM_K_BLOCK, 64, 0, NULL));
}
END_TEST

int main(void) {
    Suite *s = suite_create("planner");
    TCase *c = tcase_create("caps");
    tcase_add_test(c, test_caps_archs);
    tcase_add_test(c, test_caps_every_entry);
    tcase_add_test(c, test_caps_how_strings);
    tcase_add_test(c, test_caps_parse_arch);
    tcase_add_test(c, test_caps_require);
    tcase_add_test(c, test_caps_print);
    tcase_add_test(c, test_caps_json);
    tcase_add_test(c, test_scale_layout_128x4);
    tcase_add_test(c, test_supports);
    suite_add_tcase(s, c);
    TCase *p = tcase_create("policy");
    tcase_add_test(p, test_policy_parse);
    tcase_add_test(p, test_policy_parse_errors);
    tcase_add_test(p, test_policy_order);
    tcase_add_test(p, test_policy_fnmatch);
    tcase_add_test(p, test_policy_defaults);
    tcase_add_test(p, test_policy_json_good);
    tcase_add_test(p, test_policy_json_errors);
    tcase_add_test(p, test_policy_on_vit_graph);
    tcase_add_test(p, test_policy_unmatched_rules);
    suite_add_tcase(s, p);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
