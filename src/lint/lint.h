/* lint.h: `tprof lint`: checks a model configuration against the shape rules of each quantized format
 * (src/formats/qformat.h) for running attention and the GEMMs in that format, with a concrete fix for every
 * rule that fails. No GPU: the rules are arithmetic on the configuration.
 *
 * Why shapes matter: every block-scaled format puts one scale on a run of consecutive elements along the
 * contraction (K) dimension of a matrix product (OCP MX v1.0 section 5: 32 elements; NVIDIA NVFP4: 16, cuBLASLt
 * VEC16_UE4M3; FP8 block-128: 128, cuBLASLt VEC128_32F). A product whose K is not a multiple of the block has a
 * partial last block, which cuBLASLt's block-scaled GEMMs do not take and tprof's planner refuses. Attention
 * has two products: Q K^T contracts over the head dim D, P V over the sequence T (the keys); so running
 * attention in a block format needs D and T multiples of the block. The rules check the format's own block
 * rule, not any kernel's tile size (kernels pad to their tiles internally).
 *
 * The rules (one table in lint.c, in this order; ids are stable, they are what tests and JSON readers use):
 *   attn.seq_block            T % block == 0 (P V contracts over T)                         block formats
 *   attn.head_dim_block       D % block == 0 (Q K^T contracts over D)                       block formats
 *   attn.class_token          no class token (T = patches + 1, and g^2 + 1 is never a      block formats
 *                             multiple of 16: squares mod 16 are 0, 1, 4, 9)
 *   model.patch_divides_image image size % patch size == 0 (else the edge is cropped)       every format
 *   gemm.k_block              K % block == 0 for the Linear layers of the blocks            block formats
 *   gemm.row_align            16-byte rows: K * bits / 8 % 16 == 0, and N % 16 == 0         quantized formats
 *   gemm.kept_high            the same checks for the layers tprof's default policy keeps  quantized formats
 *                             high (patch embedding, head): WARN, never FAIL
 *   attn.layout               tprof's attention reads the fused qkv in place               every format
 * "block formats": fp8-block (128), mxfp8 (32), nvfp4 (16), mxfp4 (32); "quantized": those and fp8 (per
 * tensor, no block). A rule that does not apply to a format is N-A. A format is usable as asked when none of
 * its rules is FAIL.
 *
 * The GEMM rules check each dimension with the kernel-capability table's per-dimension rules (planner/supports.h,
 * tp_supports_dim: K a whole number of blocks, 16-byte rows), the ones the planner's GEMM entries are made of.
 *
 * Families: the rules read a family-neutral description (tp_model_shapes, models/model.h: sequence length, heads,
 * head dim, the GEMM list) that the model's family fills (tp_family.shapes); only the fix strings know the
 * family's knobs, and the family writes them (tp_family.fix). A new family adds its filler and fix text; the rules
 * stay.
 *
 * Usage:
 *   tp_lint_result r;
 *   tp_precision p[2] = {TP_PREC_MXFP8, TP_PREC_NVFP4};
 *   if (tp_lint(&model, p, 2, &r, &err)) ...;    // TP_ERR_ARG: the configuration itself is invalid
 *   tp_lint_print(&r, stdout);
 *   tp_lint_write_json(&r, "lint.json", &err);
 *   exit(tp_lint_ok(&r) ? 0 : 1);
 */
#ifndef TP_LINT_H
#define TP_LINT_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "formats/qformat.h"
#include "models/model.h"
#include "tprof.h"

#define TP_LINT_MAX_VALUES 20 /* row_align: K and N of up to 8 GEMMs, and the row size */
#define TP_LINT_N_RULES 9

typedef enum { TP_LINT_PASS = 0, TP_LINT_FAIL, TP_LINT_WARN, TP_LINT_NA } tp_lint_status;

/* "PASS", "FAIL", "WARN", "N-A". */
const char *tp_lint_status_name(tp_lint_status s);

/* What the rules read: the model and its family's description of its shapes. */
typedef struct {
    tp_model model;
    tp_model_shapes sh;
} tp_lint_model;

/* One rule's outcome for one format. Strings are static or inside the struct. */
typedef struct {
    const char *id;          /* "attn.seq_block" */
    const char *area;        /* "attention", "gemm" or "model" */
    const char *description; /* what the rule asks and why */
    const char *source;      /* where the rule comes from */
    tp_lint_status status;
    char detail[320];        /* the measured values, e.g. "T = 197 (196 patches + 1 class token); 197 % 32 = 5" */
    char fix[640];           /* FAIL and WARN: a concrete change naming numbers; empty otherwise */
    int n_values;            /* the measured values again, for JSON */
    struct {
        char name[28]; /* "T", "block", "attn.qkv.K", ... */
        int64_t v;
    } values[TP_LINT_MAX_VALUES];
} tp_lint_check;

typedef struct {
    tp_precision prec;
    tp_qformat qf; /* TP_QF_NONE for fp32/fp16/bf16 */
    int block;     /* elements per scale along K; 0: per tensor or not quantized */
    int bits;      /* element bits: 4, 8, or 16/32 when not quantized */
    int n_pass, n_fail, n_warn, n_na;
    tp_lint_check checks[TP_LINT_N_RULES]; /* in rule-table order */
} tp_lint_format;

typedef struct {
    tp_lint_model model;
    int n_formats;
    tp_lint_format formats[TP_PREC_COUNT];
} tp_lint_result;

/* The rule table, for documentation and tests: TP_LINT_N_RULES entries in the order above. Static storage. */
typedef struct {
    const char *id, *area, *description, *source;
} tp_lint_rule_info;
const tp_lint_rule_info *tp_lint_rules(void);

/* Describes a model for the rules (tp_family.shapes). An image the patch does not divide is a rule
 * (model.patch_divides_image), not an error; anything else the family refuses is TP_ERR_ARG naming the field. */
tp_status tp_lint_describe(const tp_model *model, tp_lint_model *m, tp_error *err);

/* Runs every rule for each of the n precisions (1..TP_PREC_COUNT, no repeats) on the model. Pure: no I/O.
 * Errors: TP_ERR_ARG (n out of range, a precision repeated or out of range). */
tp_status tp_lint_run(const tp_lint_model *m, const tp_precision *precs, int n, tp_lint_result *out,
                      tp_error *err);
/* tp_lint_describe, then tp_lint_run. */
tp_status tp_lint(const tp_model *model, const tp_precision *precs, int n, tp_lint_result *out, tp_error *err);

/* 1 when no rule of any format is FAIL (WARN and N-A do not count). */
int tp_lint_ok(const tp_lint_result *r);
/* 1 when no rule of this format is FAIL. */
int tp_lint_format_ok(const tp_lint_format *f);
/* One line without newline: "mxfp8: attention cannot run as asked: 2 rules fail (attn.seq_block,
 * attn.class_token)" or "nvfp4: usable as asked: 6 rules pass, 1 warns, 1 N-A". */
void tp_lint_verdict(const tp_lint_format *f, char *buf, size_t n);

/* The human report: the model's shapes, one table row per (format, rule) (rule, format, status, detail) with
 * the fix on a continuation line, then the verdict of each format. */
void tp_lint_print(const tp_lint_result *r, FILE *f);

/* Everything as JSON (new reference; NULL when out of memory):
 *   {"tool": "tprof lint 0.1.0", "ok": false,
 *    "model": tp_model_to_json's object ({"family": "vit", "name", "img_size", ...: engine files' "model"),
 *    "grid", "patches", "tokens", "head_dim", "gemms": [{"layer", "n", "k", "kept_high"}],
 *    "formats": [{"precision", "qformat", "block", "element_bits", "usable", "verdict",
 *                 "counts": {"pass", "fail", "warn", "na"},
 *                 "rules": [{"id", "area", "description", "source", "status": "PASS"|..., "detail",
 *                            "fix": null|"...", "values": {"T": 197, ...}}]}]} */
json_t *tp_lint_json(const tp_lint_result *r);
/* Writes tp_lint_json to path. Errors: TP_ERR_IO naming the path, TP_ERR_OOM. */
tp_status tp_lint_write_json(const tp_lint_result *r, const char *path, tp_error *err);

#endif
