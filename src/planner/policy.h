/* policy.h: the precision policy: which precision each GEMM layer is asked to run in, in the spirit of NVIDIA
 * ModelOpt's quant_cfg (a default plus overrides keyed by layer-name wildcards).
 *
 * A policy is a default precision and an ordered list of rules "glob=precision". A layer takes the precision of
 * the LAST rule whose glob matches its name, or the default when none does: later rules win, as in ModelOpt,
 * where quant_cfg entries are applied in order and a later matching entry overwrites an earlier one
 * (modelopt/torch/quantization/conversion.py, set_quantizer_by_cfg). So the practitioners' defaults come
 * first and anything the user writes after them overrides them.
 *
 * Globs are fnmatch(3) patterns with flags 0, matched against the op's layer name (timm's module path:
 * "patch_embed.proj", "blocks.3.attn.qkv", "blocks.3.mlp.fc1", "head"). With flags 0 '*' also matches '.',
 * so "blocks.*.mlp.*" matches "blocks.11.mlp.fc2" and "*mlp*" matches every MLP layer, as ModelOpt's
 * fnmatch-based wildcards do. '?' and bracket sets ("blocks.[0-3].*") work too.
 *
 * The policy decides the precision of GEMM ops (Linear, patch embedding) and of fused attention ops
 * ("blocks.3.attn"). The engine's format applies to GEMMs only: attention runs in a quantized format only when a
 * rule of the user's matches its layer name (e.g. "blocks.*.attn=fp8"), because quantizing Q, K, V and P is a
 * separate decision (FP8 attention costs accuracy in the softmax's inputs). What the planner keeps fixed is not a
 * policy matter: softmax statistics, LayerNorm/RMSNorm statistics and RoPE always run in FP32.
 *
 * Sources: the command line (--override "glob=prec,glob=prec") through tp_policy_parse, or a JSON file
 *   {"default": "nvfp4",
 *    "overrides": [{"layers": "head", "precision": "fp16"},
 *                  {"layers": ["blocks.0.*", "blocks.11.*"], "precision": "fp8"}]}
 * through tp_policy_load_json. A file is for the precision it names ("default"): tprof bench takes that precision
 * when --precision is not given, and refuses a --precision list without it (a list's other precisions run their own
 * default policy). */
#ifndef TP_POLICY_H
#define TP_POLICY_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "ir/graph.h"
#include "tprof.h"

#define TP_POLICY_MAX_RULES 64

typedef struct {
    char glob[TP_NAME_LEN]; /* fnmatch pattern, non-empty, at most TP_NAME_LEN - 1 bytes */
    tp_precision prec;
    int builtin; /* 1: added by tp_policy_default (a practitioners' default), not written by the user */
} tp_policy_rule;

typedef struct {
    tp_precision def; /* precision of a layer no rule matches */
    int n_rules;
    tp_policy_rule rules[TP_POLICY_MAX_RULES]; /* in order; later entries win */
    int gelu_tanh; /* 1 (`--gelu tanh`): GELU may run as the tanh approximation in the epilogue of the GEMM that
                      feeds it (cuBLASLt's GELU epilogue is that form: tools/probes/gelu_epilogue.c); 0: exact
                      erf GELU, its own kernel */
    int no_fusion; /* 1 (`--fusion off`): no op computed by another's kernel (the residual adds, a GELU and the
                      patch embedding's token step in GEMM epilogues): each op its own kernel, what fusion saves
                      measured against it */
    int fp32_tensors; /* 1 (`--fp32-protect tensors`): RMSNorm and RoPE run as FP32 layers, the way TensorRT runs a
                         layer pinned to FP32 between 16-bit or FP8 ones: the input cast to an FP32 tensor, the op
                         FP32 in and out, its output cast back (three kernels, 16 more bytes a value); 0 (`regs`,
                         the default): FP32 statistics and angles in registers, 16-bit tensors in memory */
    int kv_fp8;    /* 1 (`--kv-cache fp8`): a decoder's KV cache stored in E4M3 with one static scale per layer's
                      cache (plan.h); 0: in the activation type */
    int act_scales_file; /* 1: the activation scales come from the model file's Q/DQ nodes (bench/onnx_check.h),
                            not from calibration: said in each FP8 linear's note */
} tp_policy;

/* A policy with default def and no rules. */
void tp_policy_init(tp_policy *p, tp_precision def);

/* The default policy for a requested format: default = prec; for the quantized formats (fp8, fp8-block, mxfp8,
 * nvfp4, mxfp4, fp8-wo, nvfp4-wo) the rules "patch_embed.proj=fp16", "head=fp16" and a decoder's "lm_head=fp16" (builtin = 1),
 * because the first and last
 * layers are the ones practitioners keep in high precision (ModelOpt's default configs leave the output layer
 * unquantized; the patch embedding sees raw pixels and is a tiny share of the FLOP). No rules for fp32, fp16,
 * bf16. */
void tp_policy_default(tp_policy *p, tp_precision prec);

/* Appends one rule (so it wins over every earlier one). Errors: TP_ERR_ARG for an empty glob, a glob of
 * TP_NAME_LEN bytes or more, or more than TP_POLICY_MAX_RULES rules; the message names the glob. */
tp_status tp_policy_add(tp_policy *p, const char *glob, tp_precision prec, tp_error *err);

/* Appends the rules of spec, "glob=prec[,glob=prec...]" (e.g. "*patch_embed*=fp16,blocks.*.mlp.*=nvfp4"),
 * in order. Spaces around globs and precisions are dropped. A glob cannot contain ',' (use a JSON file). On
 * error p is left as it was. Errors: TP_ERR_ARG with one line naming the offending entry: an empty list or
 * entry, a missing '=', an empty glob, an unknown precision (and those of tp_policy_add). */
tp_status tp_policy_parse(tp_policy *p, const char *spec, tp_error *err);

/* Loads a policy file (format in the header comment): p becomes tp_policy_default("default") followed by the
 * file's overrides in order, so the file can override the practitioners' defaults too. "default" is required;
 * "overrides" is optional (an array of objects with "layers", a string or a non-empty array of strings, one rule
 * each, and "precision", a string). Keys beginning with '_' are ignored (JSON has no comments); any other
 * unknown key is an error, so that a misspelt key does not silently do nothing. On error p is left as it was.
 * Errors: TP_ERR_IO when the file cannot be opened; TP_ERR_FORMAT for invalid JSON or a wrong field, one line
 * naming the file and the field ("policy.json: overrides[2].precision: unknown precision 'fp17' ..."). */
tp_status tp_policy_load_json(const char *path, tp_policy *p, tp_error *err);

/* The precision for a layer: the last matching rule's, else the default. *rule (if non-NULL) receives the
 * index of the deciding rule, or -1 for the default. */
tp_precision tp_policy_resolve(const tp_policy *p, const char *layer, int *rule);

/* Writes "glob=prec" for rule i, or "default=prec" for i = -1, into buf (n bytes); returns buf. */
const char *tp_policy_rule_str(const tp_policy *p, int i, char *buf, size_t n);

/* Why a layer got its precision, for the planner's per-op note: "policy default nvfp4" (i = -1),
 * "default rule 'head=fp16'" (a builtin rule), "override 'blocks.*.mlp.*=nvfp4'" (a user rule). Returns buf. */
const char *tp_policy_reason(const tp_policy *p, int i, char *buf, size_t n);

/* What a rule did on a graph. Only GEMM ops (TP_OP_LINEAR, TP_OP_PATCH_EMBED) and attention ops take the
 * policy's precision. */
typedef enum {
    TP_RULE_USED = 0,  /* decides the precision of at least one GEMM or attention op */
    TP_RULE_UNMATCHED, /* matches no layer of the graph: a typo such as "blocks.*.mpl.*" */
    TP_RULE_NO_GEMM,   /* matches layers, but none is a GEMM or attention (e.g. "blocks.*.norm1"): it changes nothing */
    TP_RULE_SHADOWED   /* matches GEMMs or attention, but a later rule wins on every one of them */
} tp_rule_use;

/* Classifies every rule of p on graph g into use[i] (use: p->n_rules entries, or NULL). Returns how many of
 * the user's rules (builtin = 0) are not TP_RULE_USED: builtin rules are expected to go unused (no head, or
 * the user overrode it) and are not counted. */
int tp_policy_check(const tp_policy *p, const tp_graph *g, tp_rule_use *use);

/* Prints one warning line to f for each user rule tp_policy_check counts, e.g.
 *   tprof: warning: override 'blocks.*.mpl.*=nvfp4' matches no layer of the model
 * and returns their number. Warnings, not errors: a policy file shared between models may name layers that
 * one of them lacks. */
int tp_policy_warn(const tp_policy *p, const tp_graph *g, FILE *f);

/* The policy as JSON, for reports (new reference, NULL when out of memory):
 *   {"default": "nvfp4", "overrides": [{"layers": "head", "precision": "fp16", "builtin": true}, ...]} */
json_t *tp_policy_json(const tp_policy *p);

#endif
