/* program.c: lowering a planned graph into the executed program (program.h): the kernel registry, the fusion
 * rules, the calls' byte counts and --plan's listing. C11. */
#include "planner/program.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "formats/dtype.h"
#include "formats/precision.h"
#include "planner/plan.h"
#include "planner/supports.h"

static const tp_call_kind_info KINDS[TP_CALL_KIND_COUNT] = {
    [TP_CALL_NONE] = {"none", TP_CAT_OTHER, "no kernel: computed by an earlier call"},
    [TP_CALL_IM2COL_GEMM] = {"im2col_gemm", TP_CAT_GEMM, "im2col, then a cuBLASLt GEMM"},
    [TP_CALL_PATCH_EMBED_FUSED] = {"patch_embed_fused", TP_CAT_GEMM,
                                   "tprof sm_90 kernel: im2col in the loads, bias + position embedding + class token "
                                   "in the epilogue"},
    [TP_CALL_EMBED_TOKENS] = {"embed_tokens", TP_CAT_ELEMENTWISE, "position embedding and class token"},
    [TP_CALL_LAYERNORM] = {"layernorm", TP_CAT_NORM, "tprof LayerNorm, fp32 statistics"},
    [TP_CALL_LAYERNORM_FP8_B128] = {"layernorm_fp8_b128", TP_CAT_NORM, "LayerNorm writing E4M3 with 1x128 scales"},
    [TP_CALL_RMSNORM_FP8_B128] = {"rmsnorm_fp8_b128", TP_CAT_NORM, "RMSNorm writing E4M3 with 1x128 scales"},
    [TP_CALL_GEMM] = {"gemm", TP_CAT_GEMM, "cuBLASLt GEMM, bias and fused epilogue"},
    [TP_CALL_GEMM_QUANT_IN] = {"gemm_quant_in", TP_CAT_GEMM, "quantize kernel into E4M3, then a cuBLASLt FP8 GEMM"},
    [TP_CALL_GEMV_W8A8] = {"gemv_w8a8", TP_CAT_GEMM, "tprof W8A8 GEMV, x rounded to E4M3 in registers"},
    [TP_CALL_GEMV_FP8_WO] = {"gemv_fp8_wo", TP_CAT_GEMM, "tprof weight-only E4M3 GEMV"},
    [TP_CALL_GEMV_NVFP4_WO] = {"gemv_nvfp4_wo", TP_CAT_GEMM, "tprof weight-only NVFP4 GEMV"},
    [TP_CALL_GEMV_FP8_BLOCK] = {"gemv_fp8_block", TP_CAT_GEMM,
                                "tprof FP8 block-128 GEMV, x quantized per 1x128 block in registers"},
    [TP_CALL_GEMM_WO_DEQUANT] = {"gemm_wo_dequant", TP_CAT_GEMM, "weight dequantized to 16 bits, then cuBLASLt"},
    [TP_CALL_GEMM_FP8_BLOCK] = {"gemm_fp8_block", TP_CAT_GEMM, "cuBLASLt FP8 block-128 GEMM"},
    [TP_CALL_GEMM_BLOCK_NATIVE] = {"gemm_block_native", TP_CAT_GEMM, "block quantize, then cuBLASLt block-scaled MMA"},
    [TP_CALL_GEMM_QDQ] = {"gemm_qdq", TP_CAT_GEMM, "emulated: QDQ into BF16, then a BF16 cuBLASLt GEMM"},
    [TP_CALL_ATTENTION] = {"attention", TP_CAT_ATTENTION, "tprof CUDA-core attention"},
    [TP_CALL_ATTENTION_FP8] = {"attention_fp8", TP_CAT_ATTENTION, "tprof FP8 attention (mma.sync)"},
    [TP_CALL_ATTENTION_FP8_WGMMA] = {"attention_fp8_wgmma", TP_CAT_ATTENTION, "tprof FP8 attention (wgmma)"},
    [TP_CALL_GELU] = {"gelu", TP_CAT_ACTIVATION, "tprof GELU"},
    [TP_CALL_GELU_FP8_B128] = {"gelu_fp8_b128", TP_CAT_ACTIVATION, "GELU writing E4M3 with 1x128 scales"},
    [TP_CALL_ADD] = {"add", TP_CAT_ELEMENTWISE, "residual add"},
    [TP_CALL_POOL] = {"pool", TP_CAT_ELEMENTWISE, "class token or mean pooling"},
    [TP_CALL_LAST_TOKEN] = {"last_token", TP_CAT_ELEMENTWISE, "each sequence's last row"},
    [TP_CALL_ALL_REDUCE] = {"all_reduce", TP_CAT_COMM, "NCCL all-reduce"},
    [TP_CALL_TOKEN_EMBED] = {"token_embed", TP_CAT_ELEMENTWISE, "embedding rows by token id"},
    [TP_CALL_RMSNORM] = {"rmsnorm", TP_CAT_NORM, "tprof RMSNorm, fp32 statistics"},
    [TP_CALL_ROPE] = {"rope", TP_CAT_ELEMENTWISE, "tprof RoPE at the cache position"},
    [TP_CALL_FP32_LAYER] = {"fp32_layer", TP_CAT_NORM, "cast to fp32, the op in fp32, cast back"},
    [TP_CALL_GLU] = {"glu", TP_CAT_ACTIVATION, "act(gate) * up"},
    [TP_CALL_KV_APPEND] = {"kv_append", TP_CAT_MEMORY, "k and v rows written into the cache"},
    [TP_CALL_KV_ATTENTION] = {"kv_attention", TP_CAT_ATTENTION, "tprof split-KV attention over the cache"},
    [TP_CALL_RESHAPE] = {"reshape", TP_CAT_MEMORY, "a copy"},
    [TP_CALL_CONCAT] = {"concat", TP_CAT_MEMORY, "two strided copies"},
    [TP_CALL_SLICE] = {"slice", TP_CAT_MEMORY, "one strided copy"},
    [TP_CALL_SILU] = {"silu", TP_CAT_ACTIVATION, "x sigmoid(x)"},
    [TP_CALL_TIME_CONCAT] = {"time_concat", TP_CAT_ELEMENTWISE, "the time embedding beside every row"},
    [TP_CALL_EULER] = {"euler", TP_CAT_ELEMENTWISE, "x + dt v"},
    [TP_CALL_MASKED_ATTENTION] = {"masked_attention", TP_CAT_ATTENTION, "tprof CUDA-core masked attention"},
    [TP_CALL_ROPE_KV_APPEND] = {"rope_kv_append", TP_CAT_ELEMENTWISE,
                                "tprof: the keys rotated and written into the KV cache, one kernel"},
    [TP_CALL_GEMV] = {"gemv", TP_CAT_GEMM, "tprof 16-bit decode GEMV"},
    [TP_CALL_GEMM_SM90] = {"gemm_sm90", TP_CAT_GEMM, "tprof Hopper FP8 GEMM"},
    [TP_CALL_GEMM_SM90_WO] = {"gemm_sm90_wo", TP_CAT_GEMM,
                              "tprof Hopper GEMM, FP8 / NVFP4 weights converted to 16 bits in shared memory"},
    [TP_CALL_GEMM_CUTLASS_WO] = {"gemm_cutlass_wo", TP_CAT_GEMM,
                                 "CUTLASS Hopper mixed-input GEMM, FP8 weights converted to 16 bits in registers"},
    [TP_CALL_GEMM_SM90_GELU] = {"gemm_sm90_gelu", TP_CAT_GEMM, "tprof Hopper GEMM + bias + exact GELU"},
    [TP_CALL_GEMV_GROUP] = {"gemv_group", TP_CAT_GEMM, "sibling linears as one tprof GEMV"},
    [TP_CALL_GEMM_SM90_GROUP] = {"gemm_sm90_group", TP_CAT_GEMM, "sibling FP8 linears as one tprof Hopper GEMM"},
    [TP_CALL_GEMM_SPARSE] = {"gemm_sparse", TP_CAT_GEMM, "cuSPARSELt 2:4 GEMM"},
    [TP_CALL_ATTENTION_FLASH] = {"attention_flash", TP_CAT_ATTENTION, "tprof FA2 flash attention"},
    [TP_CALL_ATTENTION_WGMMA] = {"attention_wgmma", TP_CAT_ATTENTION, "tprof Hopper attention"},
    [TP_CALL_ATTENTION_CUDNN] = {"attention_cudnn", TP_CAT_ATTENTION, "cuDNN SDPA"},
    [TP_CALL_KV_ATTENTION_FLASH] = {"kv_attention_flash", TP_CAT_ATTENTION, "a prefill's attention, flash kernel"},
    [TP_CALL_MASKED_ATTENTION_GEMMS] = {"masked_attention_gemms", TP_CAT_ATTENTION,
                                        "cuBLASLt batched GEMMs around a masked softmax"},
    [TP_CALL_MASKED_ATTENTION_FLASH] = {"masked_attention_flash", TP_CAT_ATTENTION,
                                        "tprof flash attention with pi0's masks, tensor cores"},
};

int tp_call_kind_parse(const char *name) {
    for (int k = 0; name && k < TP_CALL_KIND_COUNT; k++)
        if (KINDS[k].name && strcmp(KINDS[k].name, name) == 0) return k;
    return -1;
}

const tp_call_kind_info *tp_call_kind_get(tp_call_kind k) {
    CHECK(k >= 0 && k < TP_CALL_KIND_COUNT && KINDS[k].name);
    return &KINDS[k];
}

/* ---- lowering: each op's own kernel -------------------------------------------------------------------- */

int tp_program_b128_gemv(const tp_graph *g, const tp_plan *p, int i) {
    const tp_op *op = &g->ops[i];
    if (op->kind != TP_OP_LINEAR || p->value_qf[op->in[0]] != TP_QF_FP8_BLOCK128 || op->gemm_m > 8 || op->gemm_k % 16)
        return 0;
    const tp_dtype dt = p->value_dt[op->out], xdt = p->value_dt[op->in[0]];
    return (dt == TP_F16 || dt == TP_BF16) && (xdt == dt || xdt == TP_E4M3) &&
           (op->n_in < 3 || p->value_dt[op->in[2]] == dt);
}

static tp_call_kind linear_kind(const tp_graph *g, const tp_plan *p, int i) {
    const tp_op *op = &g->ops[i];
    const tp_qformat qf = p->value_qf[op->in[0]];
    if (qf == TP_QF_FP8_BLOCK128) return tp_program_b128_gemv(g, p, i) ? TP_CALL_GEMV_FP8_BLOCK : TP_CALL_GEMM_FP8_BLOCK;
    if (qf == TP_QF_MXFP8 || qf == TP_QF_NVFP4 || qf == TP_QF_MXFP4)
        return p->op_emulated[i] ? TP_CALL_GEMM_QDQ : TP_CALL_GEMM_BLOCK_NATIVE;
    if (qf != TP_QF_NONE) return TP_CALL_GEMM_QDQ;
    if (tp_precision_info(p->op_prec[i])->weight_only) {
        if (op->gemm_m > 8) return TP_CALL_GEMM_WO_DEQUANT;
        return p->op_prec[i] == TP_PREC_NVFP4_WO ? TP_CALL_GEMV_NVFP4_WO : TP_CALL_GEMV_FP8_WO;
    }
    if (p->op_prec[i] == TP_PREC_FP8 && p->value_dt[op->in[0]] != TP_E4M3)
        return op->gemm_m <= 8 ? TP_CALL_GEMV_W8A8 : TP_CALL_GEMM_QUANT_IN;
    return TP_CALL_GEMM;
}

/* The kernel op i runs alone under plan p (what tp_program_lower starts from). */
static tp_call_kind op_kind(const tp_graph *g, const tp_plan *p, int i) {
    const tp_op *op = &g->ops[i];
    const int b128_out = p->value_qf[op->out] == TP_QF_FP8_BLOCK128 && p->value_dt[op->out] == TP_E4M3;
    switch (op->kind) {
    case TP_OP_PATCH_EMBED: return TP_CALL_IM2COL_GEMM;
    case TP_OP_EMBED_TOKENS: return TP_CALL_EMBED_TOKENS;
    case TP_OP_LAYERNORM: return b128_out ? TP_CALL_LAYERNORM_FP8_B128 : TP_CALL_LAYERNORM;
    case TP_OP_LINEAR: return linear_kind(g, p, i);
    case TP_OP_ATTENTION:
        if (p->op_prec[i] != TP_PREC_FP8) return TP_CALL_ATTENTION;
        return p->value_dt[op->in[0]] == TP_E4M3 ? TP_CALL_ATTENTION_FP8_WGMMA : TP_CALL_ATTENTION_FP8;
    case TP_OP_GELU: return b128_out ? TP_CALL_GELU_FP8_B128 : TP_CALL_GELU;
    case TP_OP_ADD: return TP_CALL_ADD;
    case TP_OP_POOL: return op->pool_mode == 2 ? TP_CALL_LAST_TOKEN : TP_CALL_POOL;
    case TP_OP_TOKEN_EMBED: return TP_CALL_TOKEN_EMBED;
    case TP_OP_RMSNORM:
        return p->fp32_tensors ? TP_CALL_FP32_LAYER : b128_out ? TP_CALL_RMSNORM_FP8_B128 : TP_CALL_RMSNORM;
    case TP_OP_ROPE: return p->fp32_tensors ? TP_CALL_FP32_LAYER : TP_CALL_ROPE;
    case TP_OP_GLU: return TP_CALL_GLU;
    case TP_OP_KV_APPEND: return TP_CALL_KV_APPEND;
    case TP_OP_KV_ATTENTION: return TP_CALL_KV_ATTENTION;
    case TP_OP_ALL_REDUCE: return TP_CALL_ALL_REDUCE;
    case TP_OP_RESHAPE: return TP_CALL_RESHAPE;
    case TP_OP_CONCAT: return TP_CALL_CONCAT;
    case TP_OP_SLICE: return TP_CALL_SLICE;
    case TP_OP_SILU: return TP_CALL_SILU;
    case TP_OP_TIME_CONCAT: return TP_CALL_TIME_CONCAT;
    case TP_OP_EULER: return TP_CALL_EULER;
    case TP_OP_MASKED_ATTENTION: return TP_CALL_MASKED_ATTENTION;
    default: CHECK(!"an op kind without a kernel"); return TP_CALL_NONE;
    }
}

/* ---- the fusion rules ---------------------------------------------------------------------------------- */

static void note_append(char *note, size_t n, const char *s) {
    const size_t l = strlen(note);
    if (l < n) snprintf(note + l, n - l, "%s", s);
}

/* LINEAR, ADD: the residual add done by the GEMM's epilogue (D = A W^T + bias + residual, one rounding; cuBLASLt
 * beta = 1), when every storage type of the add is one and not E4M3 and the GEMM reads no block format (those
 * keep their own GEMM paths). (FP8 GEMMs with a C operand need the engine's GEMM selection: cuBLASLt's first
 * heuristic algorithm for ViT-B's proj and fc2 took 56 us instead of 37 on an H200,
 * bench/results/2026-11-21_h200_vit-b16_b64_fusion_profile.log; the timed choice makes the fused FP8 engine 4 %
 * faster, ..._fp8_residual_fusion.log.) */
static int fits_residual(const tp_program *prog, const tp_graph *g, tp_plan *p, int sm, const int *ops, int gelu_all) {
    (void)prog, (void)sm, (void)gelu_all;
    const tp_op *lin = &g->ops[ops[0]], *op = &g->ops[ops[1]];
    if (op->n_in != 2) return 0;
    const tp_dtype dt = p->value_dt[op->out];
    if (dt == TP_E4M3 || p->value_dt[op->in[0]] != dt || p->value_dt[op->in[1]] != dt) return 0;
    if (p->value_qf[lin->in[0]] != TP_QF_NONE && !tp_program_b128_gemv(g, p, ops[0])) return 0;
    const int res = op->in[0] == lin->out ? op->in[1] : op->in[0];
    snprintf(p->op_note[ops[1]], sizeof p->op_note[ops[1]], "fused: done by the epilogue of %s (+ %s, one rounding)",
             lin->layer, g->values[res].name);
    char s[200];
    snprintf(s, sizeof s, "; + residual in the epilogue (%s)", op->layer);
    note_append(p->op_note[ops[0]], sizeof p->op_note[ops[0]], s);
    return 1;
}

/* LINEAR, GELU (the policy's gelu_tanh for every GELU; always for a model whose GELU is the tanh form, which
 * cuBLASLt's epilogue computes as it is): an E4M3 GELU output needs the FP8 GEMM (cuBLASLt writes E4M3 only from
 * E4M3 operands), any other the GEMM's own output type; block formats keep their kernels; the weight-only GEMV has
 * no GELU; fp32 engines (the GPU reference) keep the GELU kernel for a tanh-form model. */
static int fits_gelu(const tp_program *prog, const tp_graph *g, tp_plan *p, int sm, const int *ops, int all) {
    (void)prog, (void)sm;
    const int j = ops[0], i = ops[1];
    const tp_op *op = &g->ops[i];
    const int x = op->in[0], y = op->out, a = g->ops[j].in[0];
    if (!all && !op->gelu_tanh) return 0;
    if (tp_precision_info(p->op_prec[j])->weight_only) return 0;
    if (!all && p->value_dt[x] == TP_F32) return 0;
    if (p->value_qf[a] != TP_QF_NONE || p->value_qf[y] != TP_QF_NONE) return 0;
    if (p->value_dt[y] == TP_E4M3 ? p->value_dt[a] != TP_E4M3 : p->value_dt[y] != p->value_dt[x]) return 0;
    snprintf(p->op_note[i], sizeof p->op_note[i], "fused: bias + GELU in the epilogue of %s, %s", g->ops[j].layer,
             op->gelu_tanh ? "the model's tanh form (cuBLASLt's GELU epilogue)"
                           : "tanh approximation (cuBLASLt; --gelu tanh)");
    char s[120];
    snprintf(s, sizeof s, "; + GELU (tanh approximation) in the epilogue, writes %s", tp_dtype_info(p->value_dt[y])->name);
    note_append(p->op_note[j], sizeof p->op_note[j], s);
    return 1;
}

/* PATCH_EMBED, EMBED_TOKENS on sm_90 (the kernel is wgmma): the weights, the position embedding, the class token and
 * both outputs in one 16-bit type and the image in fp32, when the kernel's shape rules hold: no im2col, no cast, no
 * concatenation kernel. */
static int fits_patch_embed(const tp_program *prog, const tp_graph *g, tp_plan *p, int sm, const int *ops, int gelu_all) {
    (void)prog, (void)gelu_all;
    if (sm != 90) return 0;
    const tp_op *op = &g->ops[ops[0]], *eo = &g->ops[ops[1]];
    const tp_dtype dt = p->value_dt[op->in[1]];
    const tp_kernel_shape ks = {dt, 0, op->gemm_n, 0, op->patch, 0};
    int ok = p->value_dt[op->in[0]] == TP_F32 && tp_supports(TP_KERNEL_PATCH_EMBED_FUSED, &ks, NULL, 0);
    const int vals[] = {op->in[1], op->n_in > 2 ? op->in[2] : op->in[1], op->out, eo->in[1],
                        eo->n_in > 2 ? eo->in[2] : eo->in[1], eo->out};
    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
        ok = ok && p->value_dt[vals[k]] == dt && p->value_qf[vals[k]] == TP_QF_NONE;
    if (!ok) return 0;
    snprintf(p->op_note[ops[1]], sizeof p->op_note[ops[1]],
             "fused: done by the epilogue of %s (+ position embedding%s, one rounding)", op->layer,
             eo->n_in > 2 ? ", class token rows" : "");
    char s[200];
    snprintf(s, sizeof s, "; one tprof kernel: im2col + cast to %s in the loads, bias + %s in the epilogue",
             tp_dtype_info(dt)->name, eo->layer);
    note_append(p->op_note[ops[0]], sizeof p->op_note[ops[0]], s);
    return 1;
}

/* ROPE, KV_APPEND: a decoder's rotated keys go straight into the cache: one kernel rotates each token's keys and
 * writes them and its values into the cache rows (no rotated copy written and read back, one launch fewer per
 * layer and step). The rotated key is rounded to the keys' type before it is stored (or quantized into an E4M3
 * cache), as the unfused pair stores it, so the cache holds the same bits. A RoPE with a per-sample start (a
 * pipeline's) or run as an FP32 layer (--fp32-protect tensors) keeps its kernel; the kernel's shape rules are
 * supports.h's. */
static int fits_rope_kv(const tp_program *prog, const tp_graph *g, tp_plan *p, int sm, const int *ops, int gelu_all) {
    (void)prog, (void)sm, (void)gelu_all;
    const tp_op *r = &g->ops[ops[0]], *a = &g->ops[ops[1]];
    if (r->n_in != 1 || p->fp32_tensors || a->in[0] != r->out) return 0; /* the rotated keys are the append's k */
    const tp_dtype dt = p->value_dt[r->out];
    if (p->value_dt[r->in[0]] != dt || p->value_dt[a->in[1]] != dt) return 0;
    const tp_kernel_shape ks = {.dt = dt, .n = (int64_t)r->heads * r->head_dim, .k = r->head_dim};
    if (!tp_supports(TP_KERNEL_ROPE_KV_APPEND, &ks, NULL, 0)) return 0;
    snprintf(p->op_note[ops[1]], sizeof p->op_note[ops[1]], "fused: the kernel of %s writes the rotated keys into "
             "the cache (%s)", r->layer, tp_dtype_info(p->value_dt[a->out])->name);
    note_append(p->op_note[ops[0]], sizeof p->op_note[ops[0]], "; + the KV-cache append in the same kernel");
    return 1;
}

/* 1 when every reader of v is an FP8 block-128 decode GEMV reading it as its input (tp_program_b128_gemv): v stays
 * 16-bit in memory, each GEMV quantizing its 1x128 blocks as it reads them, so whoever writes v needs no format. */
static int b128_gemv_readers(const tp_graph *g, const tp_plan *p, int v) {
    int n = 0;
    for (int k = 0; k < g->n_ops; k++)
        for (int j = 0; j < g->ops[k].n_in; j++) {
            if (g->ops[k].in[j] != v) continue;
            if (j != 0 || !tp_program_b128_gemv(g, p, k)) return 0;
            n++;
        }
    return n > 0;
}

/* LINEAR, GLU (built): a gate/up sibling group's GEMV computes act(gate) * up in its epilogue: each block takes 8
 * gate rows and the 8 up rows of the same columns, so both values of an output meet in the block (gemv.h): the
 * group's two outputs are never written. The group's two linears are exactly the GLU's gate and up. */
static int fits_gemv_glu(const tp_program *prog, const tp_graph *g, tp_plan *p, int sm, const int *ops, int gelu_all) {
    (void)sm, (void)gelu_all;
    const int t = ops[1];
    const tp_op *glu = &g->ops[t];
    const int head = prog->op_call[ops[0]];
    const tp_call *c = &prog->calls[head];
    if (c->kind != TP_CALL_GEMV_GROUP || tp_program_call_of(prog, t)->n_ops != 1 || glu->n_in != 2) return 0;
    int lins = 0;
    for (int k = 0; k < c->n_ops; k++) {
        if (g->ops[c->ops[k]].kind != TP_OP_LINEAR) return 0;
        lins++;
    }
    const int pg = g->values[glu->in[0]].producer, pu = g->values[glu->in[1]].producer;
    if (lins != 2 || pg < 0 || pu < 0 || pg == pu || prog->op_call[pg] != head || prog->op_call[pu] != head) return 0;
    const tp_dtype dt = p->value_dt[glu->out];
    if ((dt != TP_F16 && dt != TP_BF16) || p->value_dt[glu->in[0]] != dt || p->value_dt[glu->in[1]] != dt ||
        (p->value_qf[glu->out] != TP_QF_NONE && !b128_gemv_readers(g, p, glu->out)) || (glu->act != 0 && glu->act != 1))
        return 0;
    snprintf(p->op_note[t], sizeof p->op_note[t], "fused: done by the epilogue of the GEMV of %s and %s",
             g->ops[pg].layer, g->ops[pu].layer);
    note_append(p->op_note[pg], sizeof p->op_note[pg], "; + the GLU in the GEMV's epilogue (gate and up never stored)");
    return 1;
}

const tp_fusion_rule tp_fusion_rules[] = {
    {"linear+add", {TP_OP_LINEAR, TP_OP_ADD}, 2, TP_CALL_NONE, fits_residual,
     "the residual add in the GEMM's epilogue (beta = 1, one rounding)", TP_FUSE_LOWER, 0},
    {"linear+gelu", {TP_OP_LINEAR, TP_OP_GELU}, 2, TP_CALL_NONE, fits_gelu,
     "bias + GELU (tanh form) in the GEMM's epilogue", TP_FUSE_LOWER, 0},
    {"patch_embed+embed_tokens", {TP_OP_PATCH_EMBED, TP_OP_EMBED_TOKENS}, 2, TP_CALL_PATCH_EMBED_FUSED,
     fits_patch_embed, "im2col in the GEMM's loads, position embedding and class token in its epilogue", TP_FUSE_LOWER,
     0},
    {"rope+kv_append", {TP_OP_ROPE, TP_OP_KV_APPEND}, 2, TP_CALL_ROPE_KV_APPEND, fits_rope_kv,
     "the keys rotated and written into the KV cache by one kernel", TP_FUSE_LOWER, 0},
    {"gemv+glu", {TP_OP_LINEAR, TP_OP_GLU}, 2, TP_CALL_NONE, fits_gemv_glu,
     "the GLU in the gate/up GEMV's epilogue", TP_FUSE_BUILT, 0},
};
const int tp_fusion_rule_count = (int)(sizeof tp_fusion_rules / sizeof tp_fusion_rules[0]);

/* Rule r's chain ending at ops[k + 1], links k .. 0 still to find: walks back through the inputs of ops[k + 1], the
 * last slot first (an ADD's second operand: the block's branch in timm's order); a link is an op of the rule's kind
 * whose output only the next op reads and that is alone in its call. The first whole chain the rule's predicate
 * accepts wins. */
static int match_back(const tp_graph *g, tp_plan *p, int sm, int gelu_all, const tp_program *prog,
                      const tp_fusion_rule *r, int k, int *ops) {
    if (k < 0) return r->fits(prog, g, p, sm, ops, gelu_all);
    const tp_op *next = &g->ops[ops[k + 1]];
    for (int s = next->n_in - 1; s >= 0; s--) {
        const int v = next->in[s], j = g->values[v].producer;
        if (j < 0 || g->ops[j].kind != r->kinds[k] || tp_value_readers(g, v) != 1) continue;
        if (!tp_program_is_head(prog, j) || prog->calls[j].n_ops != 1) continue;
        ops[k] = j;
        if (match_back(g, p, sm, gelu_all, prog, r, k - 1, ops)) return 1;
    }
    return 0;
}

static void apply_rule(const tp_graph *g, tp_plan *p, int sm, int gelu_all, int r, tp_program *prog) {
    const tp_fusion_rule *rule = &tp_fusion_rules[r];
    for (int t = 0; t < g->n_ops; t++) {
        if (g->ops[t].kind != rule->kinds[rule->n - 1]) continue;
        if (!tp_program_is_head(prog, t) || prog->calls[t].n_ops != 1) continue;
        int ops[3];
        ops[rule->n - 1] = t;
        if (!match_back(g, p, sm, gelu_all, prog, rule, rule->n - 2, ops)) continue;
        for (int k = 1; k < rule->n; k++) tp_program_merge(prog, ops[0], ops[k]);
        tp_call *c = &prog->calls[ops[0]];
        if (rule->kind != TP_CALL_NONE) c->kind = rule->kind;
        c->rule = r;
        snprintf(c->note, sizeof c->note, "%s: %s", rule->name, rule->why);
    }
}

tp_status tp_program_lower(const tp_graph *g, tp_plan *p, int sm, int no_fusion, int gelu_all, tp_program *out,
                           tp_error *err) {
    memset(out, 0, sizeof *out);
    out->n_ops = g->n_ops;
    out->calls = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *out->calls);
    out->op_call = malloc(sizeof(int) * (size_t)(g->n_ops ? g->n_ops : 1));
    if (!out->calls || !out->op_call) {
        tp_program_free(out);
        return tp_fail(err, TP_ERR_OOM, "out of host memory lowering the program");
    }
    for (int i = 0; i < g->n_ops; i++) {
        tp_call *c = &out->calls[i];
        c->kind = op_kind(g, p, i);
        c->n_ops = 1;
        c->ops[0] = i;
        c->rule = -1;
        out->op_call[i] = i;
    }
    if (sm > 0 && !no_fusion)
        for (int r = 0; r < tp_fusion_rule_count; r++)
            if (tp_fusion_rules[r].stage == TP_FUSE_LOWER) apply_rule(g, p, sm, gelu_all, r, out);
    return TP_OK;
}

/* Every value call h0 writes that an op outside it reads is read by call h1 alone, and h1 reads one of them. */
static int feeds_only(const tp_program *prog, const tp_graph *g, int h0, int h1) {
    int fed = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const int c = prog->op_call[i];
        if (c == h0) continue;
        for (int s = 0; s < g->ops[i].n_in; s++) {
            const int pr = g->values[g->ops[i].in[s]].producer;
            if (pr < 0 || prog->op_call[pr] != h0) continue;
            if (c != h1) return 0;
            fed = 1;
        }
    }
    const tp_call *c0 = &prog->calls[h0];
    for (int k = 0; k < c0->n_ops; k++)
        if (g->ops[c0->ops[k]].out == g->output) return 0;
    return fed;
}

int tp_program_fuse_built(tp_program *prog, const tp_graph *g, const tp_plan *p, int sm, char (*notes)[256],
                          unsigned skip, int (*veto)(void *user, const tp_program *prog, int head0, int head1),
                          void *user) {
    int joins = 0;
    tp_plan q = *p; /* the rules write their notes into q.op_note: the caller's, or a scratch array */
    q.op_note = notes ? notes : calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *q.op_note);
    if (!q.op_note) return -1;
    for (int r = 0; r < tp_fusion_rule_count; r++) {
        const tp_fusion_rule *rule = &tp_fusion_rules[r];
        if (rule->stage != TP_FUSE_BUILT || (r < 32 && (skip >> r & 1u))) continue;
        CHECK(rule->n == 2);
        for (int t = 0; t < g->n_ops; t++) {
            if (g->ops[t].kind != rule->kinds[1]) continue;
            const int h1 = prog->op_call[t];
            for (int s = 0; s < g->ops[t].n_in; s++) { /* the producers of op t's inputs */
                const int j = g->values[g->ops[t].in[s]].producer;
                if (j < 0 || g->ops[j].kind != rule->kinds[0] || prog->op_call[j] == h1) continue;
                const int h0 = prog->op_call[j];
                if (prog->calls[h0].n_ops + prog->calls[h1].n_ops > TP_CALL_MAX_OPS || !feeds_only(prog, g, h0, h1))
                    continue;
                const int a = h0 < h1 ? h0 : h1, b = h0 < h1 ? h1 : h0;
                if (veto && veto(user, prog, a, b)) continue;
                const int ops[2] = {j, t};
                if (!rule->fits(prog, g, &q, sm, ops, 0)) continue;
                const tp_call_kind kind = prog->calls[rule->keep ? h1 : h0].kind;
                tp_program_join(prog, a, b);
                prog->calls[a].kind = kind;
                prog->calls[a].rule = r;
                snprintf(prog->calls[a].note, sizeof prog->calls[a].note, "%s: %s", rule->name, rule->why);
                joins++;
                break;
            }
        }
    }
    if (!notes) free(q.op_note);
    return joins;
}

void tp_program_join(tp_program *prog, int head, int other) {
    tp_call *c = &prog->calls[head], *o = &prog->calls[other];
    CHECK(head < other && tp_program_is_head(prog, head) && tp_program_is_head(prog, other) &&
          c->n_ops + o->n_ops <= TP_CALL_MAX_OPS);
    for (int k = 0; k < o->n_ops; k++) {
        c->ops[c->n_ops++] = o->ops[k];
        prog->op_call[o->ops[k]] = head;
    }
    o->n_ops = 0; /* its kind stays, dormant */
}

int tp_program_first(const tp_program *prog, const tp_graph *g, int head, tp_op_kind k) {
    const tp_call *c = &prog->calls[head];
    for (int j = 0; j < c->n_ops; j++)
        if (g->ops[c->ops[j]].kind == k) return c->ops[j];
    return -1;
}

void tp_program_free(tp_program *prog) {
    free(prog->calls);
    free(prog->op_call);
    memset(prog, 0, sizeof *prog);
}

tp_status tp_program_copy(const tp_program *src, tp_program *dst, tp_error *err) {
    const size_t n = (size_t)(src->n_ops ? src->n_ops : 1);
    dst->n_ops = src->n_ops;
    dst->calls = malloc(sizeof *dst->calls * n);
    dst->op_call = malloc(sizeof(int) * n);
    if (!dst->calls || !dst->op_call) {
        tp_program_free(dst);
        return tp_fail(err, TP_ERR_OOM, "out of host memory copying the program");
    }
    memcpy(dst->calls, src->calls, sizeof *dst->calls * n);
    memcpy(dst->op_call, src->op_call, sizeof(int) * n);
    return TP_OK;
}

int tp_program_find(const tp_program *prog, const tp_graph *g, int head, tp_op_kind k) {
    const tp_call *c = &prog->calls[head];
    for (int j = 1; j < c->n_ops; j++)
        if (k == TP_OP_KIND_COUNT || g->ops[c->ops[j]].kind == k) return c->ops[j];
    return -1;
}

int tp_program_out(const tp_program *prog, const tp_graph *g, int head) {
    const tp_call *c = &prog->calls[head];
    if (c->n_ops < 2) return g->ops[head].out;
    const int last = c->ops[c->n_ops - 1];
    if ((c->kind == TP_CALL_GEMV_GROUP || c->kind == TP_CALL_GEMM_SM90_GROUP) && g->ops[last].kind == TP_OP_LINEAR)
        return g->ops[tp_program_first(prog, g, head, TP_OP_LINEAR)].out;
    return g->ops[last].out;
}

void tp_program_merge(tp_program *prog, int head, int op) {
    tp_call *c = &prog->calls[head], *o = &prog->calls[op];
    CHECK(tp_program_is_head(prog, head) && tp_program_is_head(prog, op) && o->n_ops == 1 && c->n_ops < TP_CALL_MAX_OPS);
    c->ops[c->n_ops++] = op;
    o->n_ops = 0; /* its kind stays, dormant, for tp_program_split */
    prog->op_call[op] = head;
}

void tp_program_split(tp_program *prog, int op) {
    const int head = prog->op_call[op];
    CHECK(head != op);
    tp_call *c = &prog->calls[head];
    int k = 0;
    for (int j = 0; j < c->n_ops; j++)
        if (c->ops[j] != op) c->ops[k++] = c->ops[j];
    c->n_ops = k;
    tp_call *o = &prog->calls[op];
    const tp_call_kind kind = o->kind;
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->n_ops = 1;
    o->ops[0] = op;
    o->rule = -1;
    prog->op_call[op] = op;
}

void tp_program_unfuse(tp_program *prog, const tp_graph *g, const tp_plan *p, int head) {
    tp_call *c = &prog->calls[head];
    while (c->n_ops > 1) {
        const int op = c->ops[c->n_ops - 1];
        tp_program_split(prog, op);
        prog->calls[op].kind = op_kind(g, p, op);
    }
    c->kind = op_kind(g, p, head);
    c->rule = -1;
    c->note[0] = 0;
}

int tp_program_n_calls(const tp_program *prog) {
    int n = 0;
    for (int i = 0; i < prog->n_ops; i++) n += prog->calls[i].n_ops > 0;
    return n;
}

int tp_program_inner(const tp_program *prog, const tp_graph *g, int v) {
    const int j = g->values[v].producer;
    if (j < 0 || v == g->output || g->values[v].kind != TP_VAL_ACT) return 0;
    const int c = prog->op_call[j];
    int readers = 0;
    for (int i = 0; i < g->n_ops; i++)
        for (int s = 0; s < g->ops[i].n_in; s++)
            if (g->ops[i].in[s] == v) {
                if (prog->op_call[i] != c) return 0;
                readers++;
            }
    /* a chained call's inner value is read by the next op of the chain; a group's outputs are read outside */
    return readers > 0;
}

/* ---- bytes ----------------------------------------------------------------------------------------------- */

/* The bytes of the decoder ops that read part of a tensor: -1 for the others. */
static double decoder_op_bytes(const tp_plan *p, const tp_graph *g, const tp_op *op) {
    const tp_value *x = &g->values[op->in[0]], *o = &g->values[op->out];
    const double xb = (double)tp_value_numel(x) * (double)tp_dtype_info(p->value_dt[op->in[0]])->bytes;
    const double ob = tp_dtype_info(p->value_dt[op->out])->bytes;
    switch (op->kind) {
    case TP_OP_TOKEN_EMBED: /* the ids, one table row per token, the output */
        return xb + 2.0 * (double)tp_value_numel(o) * ob;
    case TP_OP_KV_APPEND: /* k and v read, their rows written into the cache (in its type) */
        return 2.0 * xb + 2.0 * (double)tp_value_numel(x) * (double)tp_dtype_info(p->value_dt[op->out])->bytes;
    case TP_OP_KV_ATTENTION: { /* q, the past + T cached K and V rows, the output */
        const tp_value *c = &g->values[op->in[1]];
        const double rows = (double)c->shape[1] * (double)(g->past + g->tokens);
        return xb + 2.0 * rows * (double)c->shape[3] * (double)tp_dtype_info(p->value_dt[op->in[1]])->bytes +
               (double)tp_value_numel(o) * ob;
    }
    case TP_OP_POOL: /* one row of each sequence */
        if (op->pool_mode != 2) return -1;
        return 2.0 * (double)tp_value_numel(o) * ob;
    default: return -1;
    }
}

/* Input j of op i as it is read: weight-only NVFP4 weights are codes, a scale per 16 and the per-tensor one. */
static double in_bytes(const tp_plan *p, const tp_graph *g, int i, int j) {
    const tp_op *op = &g->ops[i];
    const double n = (double)tp_value_numel(&g->values[op->in[j]]);
    if (j == 1 && p->op_prec && p->op_prec[i] == TP_PREC_NVFP4_WO) return n / 2 + n / 16 + 4;
    return n * (double)tp_dtype_info(p->value_dt[op->in[j]])->bytes;
}

static double val_bytes(const tp_plan *p, const tp_graph *g, int v) {
    return (double)tp_value_numel(&g->values[v]) * (double)tp_dtype_info(p->value_dt[v])->bytes;
}

/* One op alone in its call. */
static double op_alone_bytes(const tp_plan *p, const tp_graph *g, int i) {
    const tp_op *op = &g->ops[i];
    const double db = decoder_op_bytes(p, g, op);
    if (db >= 0) return db;
    double b = 0;
    if (p->fp32_tensors && (op->kind == TP_OP_RMSNORM || op->kind == TP_OP_ROPE)) /* the casts: fp32 written, read */
        b += 16.0 * (double)tp_value_numel(&g->values[op->out]);
    for (int j = 0; j < op->n_in; j++) b += in_bytes(p, g, i, j);
    if (op->kind == TP_OP_POOL && op->pool_mode == 0) /* the class token's row of each image, not all T rows */
        b -= (double)(tp_value_numel(&g->values[op->in[0]]) - tp_value_numel(&g->values[op->out])) *
             (double)tp_dtype_info(p->value_dt[op->in[0]])->bytes;
    return b + val_bytes(p, g, op->out);
}

double tp_program_call_bytes(const tp_program *prog, const tp_plan *p, const tp_graph *g, int head) {
    const tp_call *c = &prog->calls[head];
    if (c->n_ops == 0) return 0.0;
    if (c->n_ops == 1) return op_alone_bytes(p, g, head);
    double b = 0;
    int seen[TP_CALL_MAX_OPS * TP_OP_MAX_IN], n_seen = 0;
    for (int k = 0; k < c->n_ops; k++) { /* what it reads from outside, each value once */
        const tp_op *op = &g->ops[c->ops[k]];
        for (int j = 0; j < op->n_in; j++) {
            const int v = op->in[j], pr = g->values[v].producer;
            int dup = pr >= 0 && prog->op_call[pr] == head;
            for (int s = 0; s < n_seen && !dup; s++) dup = seen[s] == v;
            if (dup) continue;
            seen[n_seen++] = v;
            b += in_bytes(p, g, c->ops[k], j);
        }
    }
    for (int k = 0; k < c->n_ops; k++) { /* what it writes for readers outside (a KV append: its rows only) */
        const tp_op *op = &g->ops[c->ops[k]];
        if (tp_program_inner(prog, g, op->out)) continue;
        b += op->kind == TP_OP_KV_APPEND ? 2.0 * (double)tp_value_numel(&g->values[op->in[0]]) *
                                               (double)tp_dtype_info(p->value_dt[op->out])->bytes
                                         : val_bytes(p, g, op->out);
    }
    return b;
}

double tp_program_op_bytes(const tp_program *prog, const tp_plan *p, const tp_graph *g, int i) {
    return tp_program_is_head(prog, i) ? tp_program_call_bytes(prog, p, g, i) : 0.0;
}

double tp_program_call_flop(const tp_program *prog, const tp_graph *g, int head, int matmul) {
    const tp_call *c = &prog->calls[head];
    double f = 0;
    for (int k = 0; k < c->n_ops; k++) f += matmul ? g->ops[c->ops[k]].matmul_flop : g->ops[c->ops[k]].flop;
    return f;
}

/* ---- --plan ---------------------------------------------------------------------------------------------- */

void tp_program_print(FILE *f, const tp_program *prog, const tp_plan *p, const tp_graph *g) {
    int n_calls = 0, n_fused = 0, n_ops_fused = 0;
    fprintf(f, "program: the calls an executor runs, in order (kernel, layers, GFLOP, MB)\n");
    for (int i = 0; i < prog->n_ops; i++) {
        const tp_call *c = &prog->calls[i];
        if (!c->n_ops) continue;
        n_calls++;
        if (c->n_ops > 1) n_fused++, n_ops_fused += c->n_ops;
        fprintf(f, "  %4d  %-20s %-40s %9.4f %9.3f", n_calls - 1, tp_call_kind_get(c->kind)->name, g->ops[i].layer,
                tp_program_call_flop(prog, g, i, 0) * 1e-9, tp_program_call_bytes(prog, p, g, i) * 1e-6);
        for (int k = 1; k < c->n_ops; k++) fprintf(f, " + %s", g->ops[c->ops[k]].layer);
        if (c->note[0]) fprintf(f, "  [%s]", c->note);
        fputc('\n', f);
    }
    fprintf(f, "program: %d calls for %d ops; %d fused calls cover %d ops\n", n_calls, prog->n_ops, n_fused,
            n_ops_fused);
}
