#include "planner/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "formats/precision.h"
#include "planner/caps.h"
#include "planner/policy.h"
#include "planner/supports.h"

void tp_plan_free(tp_plan *p) {
    free(p->value_dt);
    free(p->value_scaled);
    free(p->value_qf);
    free(p->op_emulated);
    tp_program_free(&p->prog);
    free(p->op_prec);
    free(p->op_note);
    memset(p, 0, sizeof *p);
}


/* The activation type of an engine (precision.h's act of its default precision): FP8 (per-tensor) and the
 * weight-only formats read and write FP16, the block formats (emulated on Hopper through BF16 GEMMs) and fp8-block
 * BF16. An engine has one activation type, so the formats one engine holds share it. */
static tp_dtype engine_act(tp_precision def) { return tp_precision_info(def)->act; }

static const char *act_name(tp_dtype t) { return t == TP_F32 ? "fp32" : t == TP_F16 ? "fp16" : "bf16"; }

/* The policy's word on each GEMM op of g (prec: the engine's default): keep[i] = 1 when it stays in the engine's
 * high precision, with the reason in why[i]; else qprec[i] is its quantized format, which may differ from the
 * default's (issue 21: `prefix.*=fp8,expert.*=nvfp4-wo` in an fp16 engine) where both share the engine's activation
 * type. A format of the other activation type is an error naming both, and so is a quantized patch embedding (its
 * im2col input has no quantized path yet). A 16-bit rule the engine's type overrides is said in the note. */
static tp_status resolve_policy(const tp_graph *g, const tp_policy *pol, tp_precision prec, int sm, int *keep,
                                tp_precision *qprec, char (*why)[200], tp_error *err) {
    const tp_dtype act = engine_act(prec);
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        keep[i] = 1;
        qprec[i] = prec;
        why[i][0] = 0;
        if (op->kind != TP_OP_LINEAR && op->kind != TP_OP_PATCH_EMBED) continue;
        int rule = -1;
        tp_precision want = tp_policy_resolve(pol, op->layer, &rule);
        char reason[160];
        tp_policy_reason(pol, rule, reason, sizeof reason);
        if (!tp_precision_quantized(want)) {
            const tp_precision high = act == TP_F32 ? TP_PREC_FP32 : act == TP_F16 ? TP_PREC_FP16 : TP_PREC_BF16;
            if (tp_precision_quantized(prec)) snprintf(why[i], sizeof why[i], "kept high by policy (%s)", reason);
            else if (want != high && rule >= 0)
                snprintf(why[i], sizeof why[i], "the policy asks %s (%.120s): runs %s, the engine's activation type",
                         tp_precision_name(want), reason, tp_precision_name(high));
            continue;
        }
        /* the GPU engines' kernels hold one activation type; the CPU executor's emulation (sm 0) takes any mix, as
         * an ONNX file's explicit quantization asks: FP8 linears in an FP32 graph (bench/onnx_check.h) */
        if (sm && tp_precision_info(want)->act != act)
            return tp_fail(err, TP_ERR_UNSUPPORTED,
                           "layer %s: the policy asks %s (%s) in a %s engine: %s runs with %s activations, this "
                           "engine's are %s; one engine holds formats of one activation type (fp16: fp8, fp8-wo, "
                           "nvfp4-wo; bf16: fp8-block, mxfp8, nvfp4, mxfp4)",
                           op->layer, tp_precision_name(want), reason, tp_precision_name(prec),
                           tp_precision_name(want), act_name(tp_precision_info(want)->act), act_name(act));
        if (op->kind == TP_OP_PATCH_EMBED)
            return tp_fail(err, TP_ERR_UNSUPPORTED,
                           "layer %s: %s patch embedding (%s) is not supported in this build; keep it high, e.g. "
                           "--policy '%s=fp16'",
                           op->layer, tp_precision_name(want), reason, op->layer);
        keep[i] = 0;
        qprec[i] = want;
    }
    return TP_OK;
}

/* Weight-only formats (W8A16, W4A16): each quantized linear's weight stored as E4M3 with a per-tensor scale
 * (fp8-wo: amax / 448, as the FP8 GEMMs' weights) or as NVFP4 (nvfp4-wo: E2M1 codes, a UE4M3 scale per 16 along
 * K, an FP32 scale per tensor, qformat.h), its input and output in FP16. The engine decodes the weights in
 * registers where the linear reads at most 8 rows (a decode step: tprof's GEMV, gemv.h) and expands them to FP16,
 * exactly, for cuBLASLt's FP16 GEMM with the FP32 per-tensor scale in alpha otherwise (engine_launch.c). The GEMV
 * reads K in multiples of 8 (E4M3) or 16 (NVFP4). */
static tp_status plan_weight_only(const tp_graph *g, const int *keep, tp_precision prec, tp_plan *p, tp_error *err) {
    const int fp4 = prec == TP_PREC_NVFP4_WO, kmult = fp4 ? 16 : 8;
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_LINEAR || keep[i]) continue;
        if (op->gemm_k % kmult)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: K = %lld: the %s weight-only GEMV reads K in multiples "
                           "of %d; keep the layer high (--policy '%s=fp16')", op->layer, (long long)op->gemm_k,
                           fp4 ? "NVFP4" : "FP8", kmult, op->layer);
        const int w = op->in[1];
        p->op_prec[i] = prec;
        if (fp4) {
            p->value_dt[w] = TP_E2M1;
            p->value_qf[w] = TP_QF_NVFP4;
            snprintf(p->op_note[i], sizeof p->op_note[i],
                     "weight-only: nvfp4 weights (e2m1, ue4m3 per 16, fp32 per tensor), fp16 in/out; <= 8 rows: tprof "
                     "GEMV decoding them in registers; more: expanded to fp16 for an fp16 GEMM");
            continue;
        }
        p->value_dt[w] = TP_E4M3;
        p->value_scaled[w] = 1;
        snprintf(p->op_note[i], sizeof p->op_note[i],
                 "weight-only: e4m3 weights (per-tensor scale amax/448), fp16 in/out; <= 8 rows: tprof GEMV decoding "
                 "them in registers; more: dequantized to fp16 for an fp16 GEMM");
    }
    return TP_OK;
}

/* The block-scaled formats (see plan.h): the Linear layers of the blocks read MXFP8 / NVFP4 / MXFP4 operands. */
static tp_status plan_block_scaled(const tp_graph *g, tp_precision prec, int sm, const int *keep, tp_plan *p,
                                   tp_error *err) {
    const tp_qformat qf = tp_precision_info(prec)->qf;
    const tp_qformat_traits *qt = tp_qformat_info(qf);
    const int native = sm >= 100; /* block-scaled MMA: compute capability 10.x, 11.x, 12.x (formats.md) */
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_LINEAR || keep[i]) continue;
        int x = op->in[0], w = op->in[1];
        const tp_kernel_shape ks = {TP_F32, op->gemm_m, op->gemm_n, op->gemm_k, 0, qt->block};
        char why[200];
        if (!tp_supports(TP_KERNEL_GEMM_BLOCK_SCALED, &ks, why, sizeof why)) {
            return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: %s: %s", op->layer, qt->name, why);
        }
        p->value_qf[x] = qf;
        p->value_qf[w] = qf;
        /* NVFP4's second-level per-tensor scale of an activation is static (calibrated amax / (6 * 448)) */
        p->value_scaled[x] = qt->global_scale;
        p->op_prec[i] = prec;
        p->op_emulated[i] = !native;
        if (native)
            snprintf(p->op_note[i], sizeof p->op_note[i], "native %s GEMM (cuBLASLt %s block scales), fp32 accumulate",
                     qt->name, qf == TP_QF_NVFP4 ? "VEC16_UE4M3" : "VEC32_UE8M0");
        else
            snprintf(p->op_note[i], sizeof p->op_note[i],
                     "emulated on sm_%d: %s operands (activations quantized per %d-block by a QDQ kernel%s, weights "
                     "offline) dequantized exactly to bf16, bf16 GEMM, fp32 accumulate%s",
                     sm, qt->name, qt->block, qt->global_scale ? ", per-tensor scale calibrated" : "",
                     qt->global_scale ? ", per-tensor scales as alpha" : "");
    }
    return TP_OK;
}

/* 1 when every reader of x is a linear this fp8-block plan quantizes (not in keep) reading x as its input: cuBLASLt's
 * block-scaled GEMM (more than 8 rows) or the decode GEMV (tpk_gemv_fp8_block_q), both reading E4M3 with 1x128
 * scales, K % 16 == 0 */
static int b128_gemm_readers_only(const tp_graph *g, const int *keep, int x) {
    int n = 0;
    for (int k = 0; k < g->n_ops; k++)
        for (int j = 0; j < g->ops[k].n_in; j++) {
            if (g->ops[k].in[j] != x) continue;
            const tp_op *r = &g->ops[k];
            if (r->kind != TP_OP_LINEAR || j != 0 || keep[k] || r->gemm_k % 16) return 0;
            n++;
        }
    return n > 0;
}

/* fp8-block (see plan.h): the Linear layers of the blocks read E4M3 operands with FP32 block scales. */
static tp_status plan_fp8_block(const tp_graph *g, int sm, const int *keep, tp_plan *p, tp_error *err) {
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_LINEAR || keep[i]) continue;
        int x = op->in[0], w = op->in[1];
        const tp_kernel_shape ks = {TP_E4M3, op->gemm_m, op->gemm_n, op->gemm_k, 0, 128};
        char why[200];
        if (!tp_supports(TP_KERNEL_GEMM_FP8_BLOCK, &ks, why, sizeof why))
            return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: %s", op->layer, why);
        int prod = g->values[x].producer;
        tp_op_kind pk = prod >= 0 ? g->ops[prod].kind : TP_OP_KIND_COUNT;
        /* LayerNorm and GELU hold a whole 1x128 block in one warp, so they write the format themselves, and so
         * does a decoder's RMSNorm for its q/k/v and gate/up (one E4M3 copy for all its readers, where each prefill
         * GEMM would run a quantize kernel and each decode GEMV quantize in registers); the attention output's
         * 128-blocks span two heads, so it is quantized by a standalone kernel or the decode GEMV */
        const int fused = ((pk == TP_OP_LAYERNORM || pk == TP_OP_GELU) && tp_value_readers(g, x) == 1) ||
                          (pk == TP_OP_RMSNORM && !p->fp32_tensors && op->gemm_k % 4 == 0 &&
                           b128_gemm_readers_only(g, keep, x));
        p->value_qf[x] = TP_QF_FP8_BLOCK128;
        p->value_qf[w] = TP_QF_FP8_BLOCK128;
        p->value_dt[w] = TP_E4M3;
        if (fused) p->value_dt[x] = TP_E4M3;
        p->op_prec[i] = TP_PREC_FP8_BLOCK;
        if (tp_program_b128_gemv(g, p, i)) { /* a decode step's */
            snprintf(p->op_note[i], sizeof p->op_note[i],
                     "native on sm_%d: tprof's FP8 block-128 GEMV (<= 8 rows): %s input quantized per 1x128 block in "
                     "registers (dynamic), weights 128x128 (offline), block sums in fp32 scaled by both",
                     sm, tp_dtype_info(p->value_dt[x])->name);
            continue;
        }
        snprintf(p->op_note[i], sizeof p->op_note[i],
                 "native on sm_%d: e4m3 x e4m3 GEMM, FP32 block scales (activations 1x128, dynamic; weights 128x128, "
                 "offline; cuBLASLt VEC128_32F/BLK128x128_32F), fp32 accumulate, bf16 out; input quantized %s",
                 sm, fused ? "by its producer" : "by a standalone kernel");
        if (fused && !strstr(p->op_note[prod], "; writes fp8 block-128")) { /* once for all its readers */
            size_t l = strlen(p->op_note[prod]);
            snprintf(p->op_note[prod] + l, sizeof p->op_note[prod] - l, "; writes fp8 block-128 for %s%s", op->layer,
                     tp_value_readers(g, x) > 1 ? " and its siblings" : "");
        }
    }
    return TP_OK;
}

/* 1 when every reader of value x is a linear this FP8 plan quantizes (not in keep) reading x as its input, on
 * more than 8 rows: a decode GEMV (<= 8 rows) takes a 16-bit input and rounds it in registers, a cuBLASLt or
 * tprof FP8 GEMM reads E4M3. All readers share x's one calibrated scale, so one E4M3 copy serves them all. */
static int fp8_gemm_readers_only(const tp_graph *g, const int *keep, int x) {
    int n = 0;
    for (int k = 0; k < g->n_ops; k++)
        for (int j = 0; j < g->ops[k].n_in; j++) {
            if (g->ops[k].in[j] != x) continue;
            const tp_op *r = &g->ops[k];
            if (r->kind != TP_OP_LINEAR || j != 0 || keep[k] || r->gemm_m <= 8) return 0;
            n++;
        }
    return n > 0;
}

/* Per-tensor FP8 (see plan.h): the linears not in keep read E4M3 operands with static per-tensor scales. */
static tp_status plan_fp8(const tp_graph *g, int sm, const int *keep, int act_scales_file, tp_plan *p, tp_error *err) {
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_LINEAR || keep[i]) continue;
        int x = op->in[0], w = op->in[1];
        const tp_kernel_shape ks = {TP_E4M3, op->gemm_m, op->gemm_n, op->gemm_k, 0, 0};
        char why[200];
        if (sm && !tp_supports(TP_KERNEL_GEMM_FP8, &ks, why, sizeof why)) /* the CPU emulation takes any shape */
            return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: %s", op->layer, why);
        int prod = g->values[x].producer;
        tp_op_kind pk = prod >= 0 ? g->ops[prod].kind : TP_OP_KIND_COUNT;
        /* LayerNorm, GELU, ViT's attention and pi0's masked attention (its flash kernel) write E4M3 themselves for
         * their one reader; RMSNorm and the GLU for their readers when those are all FP8 GEMMs (q/k/v, gate/up,
         * down: pi0's expert and prefix, a decoder's prefill; a decode GEMV rounds a 16-bit input in registers);
         * any other input (the KV attention's) stays 16-bit and is quantized when the GEMM reads it, with the same
         * calibrated per-tensor scale. An attention whose head dim tprof's
         * flash kernels do not take stays 16-bit too: writing E4M3 would leave it the CUDA-core kernel (SigLIP's
         * head dim 72: 62 us a layer against cuDNN's 8.8 us on an H100, bench/results/README.md), while cuDNN
         * writes 16 bits and the quantize as read costs one pass over its output */
        const tp_kernel_shape fs = {.dt = p->value_dt[x], .k = pk == TP_OP_ATTENTION || pk == TP_OP_MASKED_ATTENTION
                                                                    ? g->ops[prod].head_dim : 0};
        const int writes8 = ((pk == TP_OP_LAYERNORM || pk == TP_OP_GELU ||
                              (pk == TP_OP_ATTENTION && tp_supports(TP_KERNEL_ATTENTION_FLASH, &fs, NULL, 0)) ||
                              (pk == TP_OP_MASKED_ATTENTION &&
                               tp_supports(TP_KERNEL_ATTENTION_MASKED_FLASH, &fs, NULL, 0))) &&
                             tp_value_readers(g, x) == 1) ||
                            ((pk == TP_OP_RMSNORM || pk == TP_OP_GLU) && fp8_gemm_readers_only(g, keep, x));
        if (writes8) p->value_dt[x] = TP_E4M3;
        p->value_scaled[x] = 1;
        p->value_dt[w] = TP_E4M3;
        p->value_scaled[w] = 1;
        p->op_prec[i] = TP_PREC_FP8;
        snprintf(p->op_note[i], sizeof p->op_note[i],
                 "e4m3 x e4m3 GEMM, fp32 accumulate, fp16 out; per-tensor scales (weights amax/448, "
                 "activations %s)%s", act_scales_file ? "at the ONNX file's Q/DQ scales" : "max-calibrated",
                 writes8 ? "" : "; input quantized as read: <= 8 rows in tprof's GEMV registers, more by a "
                                "quantize kernel");
        if (writes8) {
            size_t l = strlen(p->op_note[prod]);
            snprintf(p->op_note[prod] + l, sizeof p->op_note[prod] - l, "; writes e4m3 for %s", op->layer);
        }
    }
    /* FP8 attention whose Q/K/V come from an FP8 GEMM read by nothing else: the GEMM writes them in E4M3 (cuBLASLt
     * quantizes D with the calibrated per-tensor scale, the one the attention kernel would quantize with on load)
     * where the kernel on E4M3 inputs runs (attention_wgmma.h: sm_90, head dim 64, T <= 1024 in shared memory).
     * Half the bytes into the attention op, and its products on the FP8 tensor cores. */
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_ATTENTION || p->op_prec[i] != TP_PREC_FP8) continue;
        const int x = op->in[0], prod = g->values[x].producer;
        if (sm != 90 || op->head_dim != 64 || g->values[x].shape[1] > 1024 || prod < 0 ||
            g->ops[prod].kind != TP_OP_LINEAR || p->op_prec[prod] != TP_PREC_FP8 || g->ops[prod].gemm_n % 16 ||
            tp_value_readers(g, x) != 1)
            continue;
        p->value_dt[x] = TP_E4M3;
        snprintf(p->op_note[i], sizeof p->op_note[i],
                 "fp8: Q/K/V e4m3 from the QKV GEMM (per-tensor, calibrated), P e4m3, fp32 softmax; wgmma on e4m3");
        size_t l = strlen(p->op_note[prod]);
        snprintf(p->op_note[prod] + l, sizeof p->op_note[prod] - l, "; writes e4m3 for %s", op->layer);
    }
    return TP_OK;
}

/* An attention op's precision (policy.h): high unless one of the user's rules matching its layer asks for a
 * quantized format. FP8 quantizes Q, K, V with static per-tensor scales (the qkv value calibrated, quantized by
 * the attention kernel as it loads) and P after an FP32 softmax; the block formats have no attention kernel in
 * this build, and their shape rules are checked first so the error says what a future kernel would need. */
static tp_status plan_attention(const tp_graph *g, const tp_policy *pol, int i, int sm, tp_plan *p, tp_error *err) {
    const tp_op *op = &g->ops[i];
    const char *act = tp_dtype_info(p->act_dt)->name;
    int rule = -1;
    tp_precision want = tp_policy_resolve(pol, op->layer, &rule);
    char reason[160];
    tp_policy_reason(pol, rule, reason, sizeof reason);
    if (rule < 0 || pol->rules[rule].builtin || !tp_precision_quantized(want)) {
        snprintf(p->op_note[i], sizeof p->op_note[i], "fused, %s Q/K/V, fp32 softmax and accumulation%s%s", act,
                 rule >= 0 && !pol->rules[rule].builtin ? "; " : "",
                 rule >= 0 && !pol->rules[rule].builtin ? reason : "");
        return TP_OK;
    }
    const int x = op->in[0];
    const int64_t T = g->values[x].shape[1];
    if (tp_precision_info(want)->weight_only)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: %s (%s) quantizes weights, and attention has none: "
                       "give it fp8 or leave it high", op->layer, tp_precision_name(want), reason);
    if (want != TP_PREC_FP8) {
        const int blk = tp_qformat_info(tp_precision_info(want)->qf)->block;
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "layer %s: %s attention (%s) is not available in this build (no block-scaled attention kernel); "
                       "the format would also need the sequence length and head dim to be multiples of %d (here "
                       "%lld and %d): `tprof lint --precision %s` gives the fixes",
                       op->layer, tp_precision_name(want), reason, blk, (long long)T, op->head_dim,
                       tp_precision_name(want));
    }
    if (sm && sm < 89)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: fp8 attention (%s) needs sm_89 or newer; this GPU is sm_%d",
                       op->layer, reason, sm);
    const int d = op->head_dim;
    const tp_kernel_shape fs = {.dt = p->act_dt, .k = d};
    if (!tp_supports(TP_KERNEL_ATTENTION_FLASH, &fs, NULL, 0))
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "layer %s: fp8 attention (%s) needs f16/bf16 Q/K/V and head dim 32, 64, 80, 96 or 128; here "
                       "%s and %d",
                       op->layer, reason, act, d);
    p->op_prec[i] = TP_PREC_FP8;
    p->value_qf[x] = TP_QF_FP8_TENSOR;
    p->value_scaled[x] = 1;
    snprintf(p->op_note[i], sizeof p->op_note[i],
             "fp8: Q/K/V e4m3 on load (per-tensor, calibrated), P e4m3, fp32 softmax/accumulate%s; %.90s",
             sm == 90 ? "; sm_90: fp16 MMA on e4m3 values (no e4m3 mma.sync)" : "", reason);
    return TP_OK;
}

/* --kv-cache fp8 (policy kv_fp8): every KV cache in E4M3 under one static per-tensor scale, calibrated as the amax
 * of the k and v its append writes over 448 (the engine's and the CPU emulation's rule); appended rows quantized by
 * tpk_kv_append, read back by the decode attention (code x scale, the scale folded into Q and the output) and,
 * for a prefill's flash kernel, dequantized to the activation type first. */
static tp_status plan_kv_cache(const tp_graph *g, const tp_policy *pol, int sm, tp_plan *p, tp_error *err) {
    if (!pol->kv_fp8) return TP_OK;
    const char *act = tp_dtype_info(p->act_dt)->name;
    int n = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_KV_APPEND) continue;
        const tp_value *c = &g->values[op->out];
        if (p->act_dt != TP_F16 && p->act_dt != TP_BF16)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "--kv-cache fp8: layer %s: the cache is quantized from 16-bit k and "
                           "v; this engine's activations are %s (use fp16, bf16 or a quantized format)", op->layer, act);
        if (sm && sm < 89)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "--kv-cache fp8 needs sm_89 or newer (E4M3 conversions); this GPU "
                           "is sm_%d", sm);
        if (c->shape[c->ndim - 1] % 2)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "--kv-cache fp8: layer %s: a cache row of %lld values (the kernels "
                           "write E4M3 pairs)", op->layer, (long long)c->shape[c->ndim - 1]);
        p->value_dt[op->out] = TP_E4M3;
        p->value_scaled[op->out] = 1;
        snprintf(p->op_note[i], sizeof p->op_note[i], "KV cache in e4m3: rows quantized as appended, one static scale "
                 "(calibrated amax of k and v / 448)");
        n++;
    }
    if (!n) return tp_fail(err, TP_ERR_UNSUPPORTED, "--kv-cache fp8: this model has no KV cache (decoders only)");
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_KV_ATTENTION || p->value_dt[op->in[1]] != TP_E4M3) continue;
        snprintf(p->op_note[i], sizeof p->op_note[i], "%s Q, e4m3 KV cache (its scale folded into Q and the output; a "
                 "prefill's rows dequantized to %s for the flash kernel), causal, %d heads over %d KV heads, fp32 softmax",
                 act, act, op->heads, op->kv_heads);
    }
    return TP_OK;
}

tp_status tp_plan_build(const tp_graph *g, tp_precision prec, int sm, tp_plan *p, tp_error *err) {
    tp_policy pol;
    tp_policy_default(&pol, prec);
    return tp_plan_build_policy(g, &pol, sm, p, err);
}

/* The ops the CUDA engine (exec/cuda/engine/engine_launch.c) launches in any plan; a GPU plan
 * refuses the others by name. Every op runs in every precision's activation type (fp32, fp16, bf16): the quantized
 * formats change the linears alone (and, for fp8, the attention when asked). */
static int cuda_runs(const tp_op *op) {
    switch (op->kind) {
    case TP_OP_PATCH_EMBED:
    case TP_OP_EMBED_TOKENS:
    case TP_OP_LAYERNORM:
    case TP_OP_LINEAR:
    case TP_OP_ATTENTION:
    case TP_OP_GELU:
    case TP_OP_ADD: return 1;
    case TP_OP_POOL: return 1;
    case TP_OP_ROPE: return 1;
    case TP_OP_TOKEN_EMBED:
    case TP_OP_RMSNORM:
    case TP_OP_GLU:
    case TP_OP_KV_APPEND:
    case TP_OP_KV_ATTENTION:
    case TP_OP_ALL_REDUCE: return 1; /* in the plan's 16-bit activation type (bf16 under the block formats) */
    default: return tp_op_kind_pipeline(op->kind); /* the pipeline ops (pipeline_ops.h) */
    }
}

/* Value v is an input of a linear. */
static int read_by_linear(const tp_graph *g, int v) {
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == TP_OP_LINEAR && g->ops[i].in[0] == v) return 1;
    return 0;
}

/* The plan's note of an op that is neither a GEMM, a LayerNorm nor the fused attention (act: the activations' type). */
static void other_note(const tp_op *op, const char *act, char *note, size_t n) {
    switch (op->kind) {
    case TP_OP_RMSNORM:
        snprintf(note, n, "%s in/out, fp32 statistics%s", act, op->norm_offset != 0.0f ? ", x_hat * (1 + w)" : "");
        break;
    case TP_OP_ROPE: snprintf(note, n, "%s in/out, fp32 angles as HF forms them, accurate sin/cos", act); break;
    case TP_OP_KV_APPEND: snprintf(note, n, "KV cache in %s", act); break;
    case TP_OP_ALL_REDUCE: snprintf(note, n, "NCCL all-reduce (sum) over the tensor-parallel ranks, in %s", act); break;
    case TP_OP_KV_ATTENTION:
        snprintf(note, n, "%s Q and KV cache, causal, %d heads over %d KV heads, fp32 softmax", act, op->heads,
                 op->kv_heads);
        break;
    case TP_OP_GELU: snprintf(note, n, "%s, fp32 math%s", act, op->gelu_tanh ? ", tanh form (the model's)" : ""); break;
    case TP_OP_RESHAPE: snprintf(note, n, "a copy (into %s where a linear reads an fp32 value)", act); break;
    case TP_OP_CONCAT: snprintf(note, n, "%s, two strided copies along tokens", act); break;
    case TP_OP_SLICE: snprintf(note, n, "%s, one strided copy from token %d on", act, op->prefix); break;
    case TP_OP_TIME_CONCAT: snprintf(note, n, "%s, the step's time embedding (a constant, fp64 then fp32) beside each row", act); break;
    case TP_OP_EULER: snprintf(note, n, "x + dt v, x fp32 (the flow-matching state), v %s", act); break;
    case TP_OP_MASKED_ATTENTION:
        snprintf(note, n, "%s Q/K/V, fp32 softmax, %d heads over %d KV heads, padded keys masked%s; on the GPU tprof's "
                 "flash kernel or cuBLASLt GEMMs around a softmax (the engine times them), on the CPU the reference",
                 act, op->heads, op->kv_heads, op->n_in == 6 ? ", over the prefix's K, V too" : "");
        break;
    default: snprintf(note, n, "%s, fp32 math", act); break;
    }
}

tp_status tp_plan_build_policy(const tp_graph *g, const tp_policy *pol, int sm, tp_plan *p, tp_error *err) {
    const tp_precision prec = pol->def;
    memset(p, 0, sizeof *p);
    const char *target = sm ? "GPU" : "CPU";
    char tname[32];
    if (sm) snprintf(tname, sizeof tname, "sm_%d", sm);
    else snprintf(tname, sizeof tname, "the CPU executor");
    if (sm == 0 && prec != TP_PREC_FP32)
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "precision %s: the CPU executor runs fp32 only (it is the reference); use --device gpu",
                       tp_precision_name(prec));
    if (prec == TP_PREC_BF16 && sm && sm < 80)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "precision bf16 needs sm_80 or newer; this %s is %s", target,
                       tname);
    const tp_precision_traits *pt = tp_precision_info(prec);
    for (int i = 0; sm && i < g->n_ops; i++)
        if (!cuda_runs(&g->ops[i]))
            return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: %s has no CUDA kernel in this tprof (asked: a %s "
                           "engine on the GPU)", g->ops[i].layer,
                           tp_op_kind_name(g->ops[i].kind), tp_precision_name(prec));
    p->requested = prec;
    p->sm = sm;
    p->n_values = g->n_values;
    p->n_ops = g->n_ops;
    p->act_dt = pt->act;
    p->value_dt = malloc(sizeof(tp_dtype) * (size_t)g->n_values);
    p->value_scaled = calloc((size_t)g->n_values, sizeof(int));
    p->value_qf = calloc((size_t)g->n_values, sizeof(tp_qformat));
    p->op_emulated = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(int));
    p->op_prec = malloc(sizeof(tp_precision) * (size_t)(g->n_ops ? g->n_ops : 1));
    p->op_note = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *p->op_note);
    int *keep = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(int));
    int *keepf = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(int));
    tp_precision *qprec = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(tp_precision));
    char(*why)[200] = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *why);
    if (!p->value_dt || !p->value_scaled || !p->value_qf || !p->op_emulated || !p->op_prec || !p->op_note || !keep ||
        !why || !keepf || !qprec) {
        free(keep);
        free(keepf);
        free(qprec);
        free(why);
        tp_plan_free(p);
        return tp_fail(err, TP_ERR_OOM, "out of host memory planning the engine");
    }
    tp_status st = resolve_policy(g, pol, prec, sm, keep, qprec, why, err);
    if (st) goto out;
    /* the quantized formats this engine holds (the default's, and the policy's per layer), each checked on the target */
    unsigned used = tp_precision_quantized(prec) ? 1u << prec : 0;
    for (int i = 0; i < g->n_ops; i++)
        if (!keep[i]) used |= 1u << qprec[i];
    for (int f = TP_PREC_FP8; f < TP_PREC_COUNT && !st; f++) {
        if (!(used & (1u << f))) continue;
        const int wo = tp_precision_info((tp_precision)f)->weight_only;
        if (!wo && sm && sm < 89)
            st = tp_fail(err, TP_ERR_UNSUPPORTED, "precision %s needs sm_89 or newer (E4M3 tensor cores); this %s is "
                         "%s", tp_precision_name((tp_precision)f), target, tname);
        else if (f == TP_PREC_FP8_BLOCK || (wo && sm)) /* native on Hopper only; else the capability table says why */
            st = tp_caps_require(sm, NULL, (tp_precision)f, NULL, err);
    }
    if (st) goto out;
    for (int v = 0; v < g->n_values; v++) p->value_dt[v] = g->values[v].kind == TP_VAL_INPUT ? TP_F32 : p->act_dt;
    /* a pipeline's edges (pi0): the Euler state stays fp32; a RESHAPE keeps its input's type, except where a linear
     * reads it: there it converts an fp32 input (the state, x) into the activations' type */
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind == TP_OP_EULER) p->value_dt[op->out] = TP_F32;
        if (op->kind == TP_OP_RESHAPE) p->value_dt[op->out] = read_by_linear(g, op->out) ? p->act_dt : p->value_dt[op->in[0]];
    }
    const char *act = tp_dtype_info(p->act_dt)->name;
    const tp_precision high = pt->high; /* what the ops it does not quantize run in */
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        p->op_prec[i] = high;
        switch (op->kind) {
        case TP_OP_LINEAR:
        case TP_OP_PATCH_EMBED:
            if (!keep[i]) break; /* quantized: decided below */
            snprintf(p->op_note[i], sizeof p->op_note[i], "%s GEMM, %s accumulate%s%s", act,
                     prec == TP_PREC_FP32 ? "fp32 (TF32 off)" : "fp32", why[i][0] ? "; " : "", why[i]);
            break;
        case TP_OP_LAYERNORM:
            snprintf(p->op_note[i], sizeof p->op_note[i], "%s in/out, fp32 statistics", act);
            break;
        case TP_OP_ATTENTION:
            if (sm && op->head_dim > 128) {
                st = tp_fail(err, TP_ERR_UNSUPPORTED,
                             "layer %s: head dim %d: the CUDA attention kernel takes at most 128", op->layer,
                             op->head_dim);
                goto out;
            }
            if ((st = plan_attention(g, pol, i, sm, p, err))) goto out;
            break;
        default: other_note(op, act, p->op_note[i], sizeof p->op_note[i]); break;
        }
    }
    if ((st = plan_kv_cache(g, pol, sm, p, err))) goto out;
    /* each quantized format over its own layers (keepf: every other op high for that planner) */
    for (int f = TP_PREC_FP8; f < TP_PREC_COUNT && !st; f++) {
        if (!(used & (1u << f))) continue;
        for (int i = 0; i < g->n_ops; i++) keepf[i] = keep[i] || qprec[i] != (tp_precision)f;
        switch ((tp_precision)f) {
        case TP_PREC_MXFP8:
        case TP_PREC_NVFP4:
        case TP_PREC_MXFP4: st = plan_block_scaled(g, (tp_precision)f, sm, keepf, p, err); break;
        case TP_PREC_FP8_BLOCK: st = plan_fp8_block(g, sm, keepf, p, err); break;
        case TP_PREC_FP8_WO:
        case TP_PREC_NVFP4_WO: st = plan_weight_only(g, keepf, (tp_precision)f, p, err); break;
        case TP_PREC_FP8: st = plan_fp8(g, sm, keepf, pol->act_scales_file, p, err); break;
        default: break;
        }
    }
    p->fp32_tensors = pol->fp32_tensors;
    for (int i = 0; i < g->n_ops && !st && pol->fp32_tensors; i++) /* the protection as TensorRT's FP32 layers */
        if (g->ops[i].kind == TP_OP_RMSNORM || g->ops[i].kind == TP_OP_ROPE) {
            const size_t n = strlen(p->op_note[i]);
            snprintf(p->op_note[i] + n, sizeof p->op_note[i] - n, "; FP32 layer (--fp32-protect tensors): input cast "
                     "to fp32, fp32 in/out, output cast to %s", tp_dtype_info(p->value_dt[g->ops[i].out])->name);
        }
out:
    p->no_fusion = pol->no_fusion;
    /* the program: every op's kernel, then the fusion rules (program.h) */
    if (!st) st = tp_program_lower(g, p, sm, pol->no_fusion, pol->gelu_tanh, &p->prog, err);
    free(keep);
    free(keepf);
    free(qprec);
    free(why);
    if (st) tp_plan_free(p);
    return st;
}

/* The kind of the first op reading value v (TP_OP_KIND_COUNT when none does) */
static tp_op_kind reader_kind(const tp_graph *g, int v) {
    for (int i = 0; i < g->n_ops; i++)
        for (int j = 0; j < g->ops[i].n_in; j++)
            if (g->ops[i].in[j] == v) return g->ops[i].kind;
    return TP_OP_KIND_COUNT;
}

/* 1 when an earlier value holds the same parameter in the same storage for the same kind of op (a pipeline's
 * expert read at every step): stored once. A tied embedding, read by the token embedding and by the LM head, is
 * not merged: the GPU engine uploads it for each (engine_memory.c tpe_upload_params), and this is what it uploads. */
static int same_weight_before(const tp_plan *p, const tp_graph *g, int v) {
    tp_op_kind kv = TP_OP_KIND_COUNT;
    for (int u = 0; u < v; u++) {
        if (g->values[u].kind != TP_VAL_PARAM || g->values[u].param_index != g->values[v].param_index ||
            p->value_dt[u] != p->value_dt[v] || p->value_qf[u] != p->value_qf[v])
            continue;
        if (kv == TP_OP_KIND_COUNT) kv = reader_kind(g, v);
        if (reader_kind(g, u) == kv) return 1;
    }
    return 0;
}

double tp_plan_weight_bytes(const tp_plan *p, const tp_graph *g) {
    double b = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].kind != TP_VAL_PARAM || same_weight_before(p, g, v)) continue;
        double n = (double)tp_value_numel(&g->values[v]);
        if (p->value_qf[v] != TP_QF_NONE) {
            /* what the weights occupy in their format (as an engine file stores them), not the emulation's bf16 */
            const tp_qformat_traits *qt = tp_qformat_info(p->value_qf[v]);
            const tp_value *val = &g->values[v];
            double K = (double)val->shape[val->ndim - 1], rows = n / K;
            double blocks = ceil(rows / qt->weight_rows) * ceil(K / qt->block);
            b += n * qt->bits / 8.0 + blocks * tp_dtype_info(qt->scale)->bytes + (qt->global_scale ? 4 : 0);
            continue;
        }
        b += n * (double)tp_dtype_info(p->value_dt[v])->bytes;
        if (p->value_scaled[v]) b += 4;
    }
    return b;
}

int tp_plan_buffers(const tp_graph *g, const tp_plan *p, const size_t *bytes, const unsigned char *pinned, int *slot,
                    size_t *slot_bytes) {
    int *last = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    int *pool = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1)); /* free slots */
    int n_slots = 0, n_free = 0;
    if (!last || !pool) {
        free(last);
        free(pool);
        return -1;
    }
    tp_graph_last_use(g, last);
    for (int v = 0; v < g->n_values; v++) slot[v] = -1;
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        /* this op's output, then (its call's first op) the outputs its kernel writes for the ops fused into it */
        const tp_call *c = &p->prog.calls[i];
        for (int f = 0; f < (tp_program_is_head(&p->prog, i) ? c->n_ops : 1); f++) {
            const int v = g->ops[f == 0 ? i : c->ops[f]].out;
            if (v < 0 || slot[v] >= 0 || g->values[v].kind != TP_VAL_ACT || (pinned && pinned[v])) continue;
            int k = 0;
            while (k < n_free && slot_bytes[pool[k]] != bytes[v]) k++;
            if (k < n_free) {
                slot[v] = pool[k];
                pool[k] = pool[--n_free];
            } else {
                slot_bytes[n_slots] = bytes[v];
                slot[v] = n_slots++;
            }
        }
        for (int j = 0; j < op->n_in; j++) { /* released once their last reader has run (never the output) */
            const int v = op->in[j];
            if (g->values[v].kind != TP_VAL_ACT || last[v] != i || v == g->output || slot[v] < 0) continue;
            int dup = 0;
            for (int k = 0; k < n_free; k++) dup |= pool[k] == slot[v];
            if (!dup) pool[n_free++] = slot[v];
        }
    }
    free(last);
    free(pool);
    return n_slots;
}

/* Op i can be a sibling-group member (tp_plan_sibling_groups): a 16-bit linear, a weight-only FP8 or NVFP4 one
 * (E4M3 weights with a per-tensor scale each, NVFP4 ones with an s2 each: the group's GEMV applies them per row),
 * a W8A8 FP8 one whose 16-bit input is quantized as read (the members share that input, hence its scale), or an FP8
 * block-128 one on a 16-bit input with whole 128-row weight blocks (N % 128 == 0: the members' 128x128 scales then
 * stack by rows as their codes do; the decode GEMV quantizes the shared input per 1x128 block). Prefill linears
 * (more than 8 rows) qualify alike: their groups lay out the weights a decode engine shares; and a prefill's W8A8
 * FP8 linear whose input its producer writes in E4M3 (a RMSNorm for its FP8 readers: the group's GEMM reads it as
 * it is, tpk_gemm_sm90_fp8_group), its output 16-bit. */
static int sibling_ok(const tp_graph *g, const tp_plan *p, int i) {
    const tp_op *op = &g->ops[i];
    const int w = op->in[1];
    const int w8 = (p->op_prec[i] == TP_PREC_FP8_WO || p->op_prec[i] == TP_PREC_FP8) && p->value_dt[w] == TP_E4M3 &&
                   p->value_qf[w] == TP_QF_NONE;
    const int w4 = p->op_prec[i] == TP_PREC_NVFP4_WO && p->value_qf[w] == TP_QF_NVFP4;
    const int wb = p->op_prec[i] == TP_PREC_FP8_BLOCK && p->value_qf[w] == TP_QF_FP8_BLOCK128 &&
                   p->value_qf[op->in[0]] == TP_QF_FP8_BLOCK128 && op->gemm_n % 128 == 0;
    if (op->kind != TP_OP_LINEAR || op->gemm_k % (w4 || wb ? 16 : 8) || (p->value_qf[op->in[0]] != TP_QF_NONE && !wb) ||
        (p->value_qf[w] != TP_QF_NONE && !w4 && !wb) || (p->value_scaled[w] && !w8) ||
        !tp_program_is_head(&p->prog, i) || p->prog.calls[i].n_ops != 1)
        return 0;
    /* fp8-block: a prefill's input may be E4M3 (its RMSNorm writes the format): the group lays out the weights a
     * decode engine shares, whose input is 16-bit; the activation type is the output's */
    const int e8 = w8 && p->op_prec[i] == TP_PREC_FP8 && op->gemm_m > 8 && p->value_dt[op->in[0]] == TP_E4M3;
    const tp_dtype dt = wb || e8 ? p->value_dt[op->out] : p->value_dt[op->in[0]];
    if (wb && p->value_dt[op->in[0]] != dt && p->value_dt[op->in[0]] != TP_E4M3) return 0;
    return (dt == TP_F16 || dt == TP_BF16) && (w8 || w4 || wb || p->value_dt[w] == dt) && p->value_dt[op->out] == dt &&
           (op->n_in < 3 || p->value_dt[op->in[2]] == dt);
}

void tp_plan_sibling_groups(const tp_graph *g, const tp_plan *p, int *lead, int *next) {
    for (int i = 0; i < g->n_ops; i++) lead[i] = next[i] = -1;
    for (int i = 0; i < g->n_ops; i++) {
        if (lead[i] >= 0 || !sibling_ok(g, p, i)) continue;
        const tp_op *a = &g->ops[i];
        int last = i;
        for (int j = i + 1; j < g->n_ops; j++) {
            const tp_op *b = &g->ops[j];
            if (lead[j] >= 0 || !sibling_ok(g, p, j) || b->in[0] != a->in[0] || b->gemm_k != a->gemm_k ||
                b->n_in != a->n_in || p->value_dt[b->in[1]] != p->value_dt[a->in[1]])
                continue;
            if (last == i) lead[i] = i;
            lead[j] = i;
            next[last] = j;
            last = j;
        }
    }
}
