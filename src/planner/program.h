/* program.h: the executed program, the planner's last output. A plan (plan.h) says what every value is stored in
 * and what every op runs in; the program says what will execute: a list of calls in graph order, each naming one
 * kernel of the registry below and the graph ops it computes (one op, a fused chain, or sibling linears run as
 * one), with a note saying why that kernel. Every reader of "what ran" reads it: the CPU executor (a fused call
 * runs its ops' references in order, its inner values never stored), the CUDA engine (one launcher per kernel, the
 * build's timed choices rewriting a call's kernel), the byte counts of the roofline, the buffer assignment, and
 * --plan.
 *
 * Lowering (graph + plan -> program) gives every op its call and its kernel from the op's kind and the plan's
 * formats, then applies the fusion rules (tp_fusion_rules) in table order: a rule is a chain of op kinds, each op
 * reading the previous one's output and that output read by nothing else, plus a predicate over the plan's formats
 * and the target; a match makes one call of the chain with the rule's kernel. As ggml-cuda matches its
 * {RMS_NORM, MUL, ...} sequences; adding a fusion is one rule here, one launcher (exec/cuda/engine/engine_launch.c)
 * and one entry of the generic fusion test (tests/test_program.c). C11. */
#ifndef TP_PROGRAM_H
#define TP_PROGRAM_H

#include <stddef.h>
#include <stdio.h>

#include "ir/graph.h"
#include "tprof.h"

/* The kernel registry: every kernel (or fixed kernel sequence) an executor launches for one call. The first group
 * is what lowering picks from the plan; the second what an engine's build may rewrite a call to after timing it. */
typedef enum {
    TP_CALL_NONE = 0,          /* no kernel (a default, never lowered to) */
    TP_CALL_IM2COL_GEMM,       /* patch embedding: im2col, then the GEMM (cuBLASLt) */
    TP_CALL_PATCH_EMBED_FUSED, /* patch embedding + token embedding, one sm_90 kernel (patch_embed.h) */
    TP_CALL_EMBED_TOKENS,
    TP_CALL_LAYERNORM,
    TP_CALL_LAYERNORM_FP8_B128, /* LayerNorm writing E4M3 with its 1x128 block scales */
    TP_CALL_RMSNORM_FP8_B128,  /* RMSNorm writing E4M3 with its 1x128 block scales */
    TP_CALL_GEMM,              /* cuBLASLt: 16-bit or per-tensor E4M3 operands, bias / residual / GELU epilogue */
    TP_CALL_GEMM_QUANT_IN,     /* W8A8 FP8 on a 16-bit input: a quantize kernel, then cuBLASLt */
    TP_CALL_GEMV_W8A8,         /* W8A8 FP8 at <= 8 rows: tprof's GEMV rounding x to E4M3 in registers */
    TP_CALL_GEMV_FP8_WO,       /* weight-only E4M3 at <= 8 rows: tprof's GEMV */
    TP_CALL_GEMV_NVFP4_WO,     /* weight-only NVFP4 at <= 8 rows: tprof's GEMV */
    TP_CALL_GEMV_FP8_BLOCK,    /* FP8 block-128 at <= 8 rows on a 16-bit input: tprof's GEMV, x quantized in registers */
    TP_CALL_GEMM_WO_DEQUANT,   /* weight-only at > 8 rows: the weight dequantized to 16 bits, then cuBLASLt */
    TP_CALL_GEMM_FP8_BLOCK,    /* FP8 block-128 (cuBLASLt's block scales), the input quantized first if 16-bit */
    TP_CALL_GEMM_BLOCK_NATIVE, /* MXFP8 / NVFP4 / MXFP4 on Blackwell: the input's codes and scales, then cuBLASLt */
    TP_CALL_GEMM_QDQ,          /* the same formats emulated: a QDQ kernel into BF16, then a BF16 cuBLASLt GEMM */
    TP_CALL_ATTENTION,         /* tprof's CUDA-core attention (kernels.h), the GPU reference */
    TP_CALL_ATTENTION_FP8,     /* FP8 attention on a 16-bit QKV (attention_fp8.h) */
    TP_CALL_ATTENTION_FP8_WGMMA, /* FP8 attention on an E4M3 QKV (attention_wgmma.h) */
    TP_CALL_GELU,
    TP_CALL_GELU_FP8_B128,     /* GELU writing E4M3 with its 1x128 block scales */
    TP_CALL_ADD,
    TP_CALL_POOL,
    TP_CALL_LAST_TOKEN,
    TP_CALL_ALL_REDUCE,        /* NCCL */
    TP_CALL_TOKEN_EMBED,
    TP_CALL_RMSNORM,
    TP_CALL_ROPE,
    TP_CALL_FP32_LAYER,        /* --fp32-protect tensors: RMSNorm or RoPE between two casts */
    TP_CALL_GLU,
    TP_CALL_KV_APPEND,
    TP_CALL_KV_ATTENTION,      /* split-KV decode attention over the cache */
    TP_CALL_RESHAPE,
    TP_CALL_CONCAT,
    TP_CALL_SLICE,
    TP_CALL_SILU,
    TP_CALL_TIME_CONCAT,
    TP_CALL_EULER,
    TP_CALL_MASKED_ATTENTION,  /* pipeline_ops.h's CUDA-core kernel */
    TP_CALL_ROPE_KV_APPEND,    /* the keys' RoPE and the KV-cache append in one kernel (decoder_ops.h) */
    /* rewrites an engine's build makes (timed, or by shape) */
    TP_CALL_GEMV,              /* tprof's 16-bit decode GEMV (gemv.h) */
    TP_CALL_GEMM_SM90,         /* tprof's Hopper FP8 GEMM, plain epilogue */
    TP_CALL_GEMM_SM90_WO,      /* tprof's Hopper GEMM, weight-only FP8 / NVFP4 weights converted in shared memory */
    TP_CALL_GEMM_CUTLASS_WO,   /* CUTLASS's Hopper mixed-input GEMM, weight-only FP8 weights converted in registers */
    TP_CALL_GEMM_SM90_GELU,    /* tprof's Hopper GEMM + bias + exact GELU: a LINEAR, GELU call */
    TP_CALL_GEMV_GROUP,        /* sibling linears (q/k/v, gate/up) as one GEMV over their concatenated rows */
    TP_CALL_GEMM_SM90_GROUP,   /* sibling FP8 linears of a prefill as one tprof Hopper GEMM, each output its own */
    TP_CALL_GEMM_SPARSE,       /* cuSPARSELt's 2:4 GEMM */
    TP_CALL_ATTENTION_FLASH,   /* tprof's FA2 kernel */
    TP_CALL_ATTENTION_WGMMA,   /* tprof's Hopper attention */
    TP_CALL_ATTENTION_CUDNN,   /* cuDNN's SDPA */
    TP_CALL_KV_ATTENTION_FLASH, /* a prefill's KV attention as the flash kernel over the first T rows */
    TP_CALL_MASKED_ATTENTION_GEMMS, /* cuBLASLt batched GEMMs around a masked softmax */
    TP_CALL_MASKED_ATTENTION_FLASH, /* the masked attention on tensor cores (attention.h, the general kernel) */
    TP_CALL_KIND_COUNT
} tp_call_kind;

typedef struct {
    const char *name;  /* short, for --plan and profiles: "gemm", "gemv_nvfp4_wo", ... */
    tp_category cat;   /* the main kernel's category (graph.h) */
    const char *what;  /* one line: what the kernel is */
} tp_call_kind_info;
const tp_call_kind_info *tp_call_kind_get(tp_call_kind k);
/* The kind named name (tp_call_kind_get's), or -1. */
int tp_call_kind_parse(const char *name);

#define TP_CALL_MAX_OPS 6

typedef struct {
    tp_call_kind kind;      /* an empty slot (n_ops 0) keeps its op's own kind for tp_program_split */
    int n_ops;
    int ops[TP_CALL_MAX_OPS]; /* graph ops it computes, the first is the slot's own: a chain (each op reads the one
                                 before) or siblings (every op reads the first one's input) */
    int rule;               /* the index in tp_fusion_rules of the rule that made it, or -1 */
    char note[160];         /* why this kernel ("" until an executor says) */
} tp_call;

/* calls[i] is the call whose first op is op i, or an empty slot when op i belongs to an earlier call; running the
 * non-empty slots in index order runs the graph. op_call[i]: the slot of the call computing op i. */
typedef struct {
    int n_ops;
    tp_call *calls;
    int *op_call;
} tp_program;

struct tp_plan;

/* When a rule applies. TP_FUSE_LOWER: at lowering, over ops each alone in its call (their kernels follow from the
 * plan). TP_FUSE_BUILT: once an executor's build has chosen its kernels (tp_program_fuse_built): a link is then the
 * whole call holding an op of the link's kind (a GEMV, a sibling group), which joins the next link's call when the
 * values it writes are read by that call alone; the joined call keeps the kind of link `keep`'s call. A decode
 * GEMV is a build's choice (timed against cuBLASLt), so a fusion into it can only be decided after the build. */
typedef enum { TP_FUSE_LOWER = 0, TP_FUSE_BUILT } tp_fuse_stage;

/* One fusion rule: a chain of op kinds (kinds[k + 1] reads kinds[k]'s output, nothing else reads it) that `fits`
 * accepts for plan p on target sm; the match becomes one call of kind `kind` (TP_CALL_NONE: the chain's first op's
 * own kind, its epilogue extended; a TP_FUSE_BUILT rule: the kind of link `keep`'s call). `fits` may write the ops'
 * plan notes (p->op_note); prog is the program being fused (its calls' kinds). */
typedef struct {
    const char *name;
    tp_op_kind kinds[3];
    int n;
    tp_call_kind kind;
    int (*fits)(const tp_program *prog, const tp_graph *g, struct tp_plan *p, int sm, const int *ops, int gelu_all);
    const char *why;
    tp_fuse_stage stage;
    int keep;
} tp_fusion_rule;
extern const tp_fusion_rule tp_fusion_rules[];
extern const int tp_fusion_rule_count;

/* Lowers graph g under plan p for target sm (0: the CPU): every op its call and kernel, then the fusion rules unless
 * `no_fusion` (sm 0 fuses nothing, as no executor there has a fused kernel; gelu_all: the policy's --gelu tanh). The
 * rules' matches write their notes into p->op_note. Errors: TP_ERR_OOM. */
tp_status tp_program_lower(const tp_graph *g, struct tp_plan *p, int sm, int no_fusion, int gelu_all,
                           tp_program *out, tp_error *err);
/* The TP_FUSE_BUILT rules over an executor's program, once its kernels are chosen (a 2-link chain each: the calls
 * holding the links joined into the earlier one's slot). veto (may be NULL) lets the executor refuse a join for
 * reasons of its own (its buffers: a kernel reading an input that shares memory with what it writes); it gets the
 * two calls' slots. notes (g->n_ops entries, or NULL) receive what the rules say of each op (plan p itself is
 * left as it is); the rules whose bit (1u << index in tp_fusion_rules) is set in skip are not applied. Returns the
 * number of joins, or -1 out of host memory. */
int tp_program_fuse_built(tp_program *prog, const tp_graph *g, const struct tp_plan *p, int sm, char (*notes)[256],
                          unsigned skip, int (*veto)(void *user, const tp_program *prog, int head0, int head1),
                          void *user);
/* The call of slot `other` joins the call of slot `head` (head < other): its ops appended in order, its slot emptied
 * (its kind kept, dormant). The caller sets the joined call's kind. Both calls together hold at most
 * TP_CALL_MAX_OPS ops. */
void tp_program_join(tp_program *prog, int head, int other);
/* The first op of kind k in the call of slot head (its first op included), or -1. */
int tp_program_first(const tp_program *prog, const tp_graph *g, int head, tp_op_kind k);
void tp_program_free(tp_program *prog);
/* A deep copy (an engine rewrites its own). TP_ERR_OOM. */
tp_status tp_program_copy(const tp_program *src, tp_program *dst, tp_error *err);

/* The call computing op i, and whether op i is that call's first op (its slot). */
static inline const tp_call *tp_program_call_of(const tp_program *prog, int i) {
    return &prog->calls[prog->op_call[i]];
}
static inline int tp_program_is_head(const tp_program *prog, int i) { return prog->op_call[i] == i; }
/* -1, or the first op of the call that computes op i when that is another op's (op i fused into it) */
static inline int tp_program_fused_into(const tp_program *prog, int i) {
    return prog->op_call[i] == i ? -1 : prog->op_call[i];
}
/* The kind of op i's call. */
static inline tp_call_kind tp_program_kind(const tp_program *prog, int i) { return tp_program_call_of(prog, i)->kind; }
/* Op `op` of the call whose slot is `head` of kind k (TP_OP_KIND_COUNT for any): its index in the graph, or -1. */
int tp_program_find(const tp_program *prog, const tp_graph *g, int head, tp_op_kind k);
/* 1 when op i, an FP8 block-128 linear of plan p, runs as tprof's block-scaled decode GEMV (exec/cuda/gemm/gemv.h
 * tpk_gemv_fp8_block, lowered as TP_CALL_GEMV_FP8_BLOCK): at most 8 rows (a decode step's), K % 16 == 0, its output
 * and bias in F16 or BF16 and its input in the same type (the GEMV quantizes each 1 x 128 block in registers: no
 * quantize kernel, no E4M3 copy) or in E4M3 with its 1 x 128 scales, as a RMSNorm writes it for all its fp8-block
 * readers (tpk_gemv_fp8_block_q). Otherwise cuBLASLt's block-scaled GEMM runs it. */
int tp_program_b128_gemv(const tp_graph *g, const struct tp_plan *p, int i);
/* The value call `head` writes: its op's output; a chain's last op's output (the GEMM of a LINEAR, ADD call writes
 * the add's output); a sibling group's first linear's (the members' outputs follow it), or the GLU's when the
 * group's GLU was joined to it. */
int tp_program_out(const tp_program *prog, const tp_graph *g, int head);
/* Op `op` joins the call of slot `head` (op's own slot emptied; op must be alone in it). tp_program_split: op
 * (not a head) leaves its call for its own slot again, of the kind it had before it joined. */
void tp_program_merge(tp_program *prog, int head, int op);
void tp_program_split(tp_program *prog, int op);
/* The call of slot `head` split into one call per op, each of the kind lowering gives the op alone under plan p (a
 * rule's match, or an engine's joins, undone). */
void tp_program_unfuse(tp_program *prog, const tp_graph *g, const struct tp_plan *p, int head);
/* Non-empty calls. */
int tp_program_n_calls(const tp_program *prog);
/* Value v is produced and read only inside one call (never stored in memory by a fused kernel). */
int tp_program_inner(const tp_program *prog, const tp_graph *g, int v);

/* Bytes call `head` moves through memory at plan p's storage types: every value it reads from outside read once
 * (a KV attention: the cached rows up to past + T; a class-token pool: those rows; weight-only NVFP4 weights: codes,
 * block scales and s2), every value it writes for readers outside written once; 0 for an empty slot. The
 * roofline's denominator. tp_program_op_bytes: op i's share in a per-op view: its call's bytes on the head, 0 on
 * the others. */
double tp_program_call_bytes(const tp_program *prog, const struct tp_plan *p, const tp_graph *g, int head);
double tp_program_op_bytes(const tp_program *prog, const struct tp_plan *p, const tp_graph *g, int i);
/* The FLOPs of call head's ops (their matrix-product FLOPs with matmul 1). */
double tp_program_call_flop(const tp_program *prog, const tp_graph *g, int head, int matmul);

/* --plan's program: one line per call (slot, kernel, layers, GFLOP, MB, note), then the fused-call and kernel
 * counts. */
void tp_program_print(FILE *f, const tp_program *prog, const struct tp_plan *p, const tp_graph *g);

#endif
