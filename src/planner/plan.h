/* plan.h: the planner decides, for one requested precision and one target, the storage type of every value
 * and the precision every op really executes in, with the reason. Nothing falls back silently: a combination
 * the target cannot run is an error naming the op, the format and the target.
 *
 * Policy (issue 2; a configurable policy comes with the block-scaled formats):
 *   fp32  everything FP32 (GEMMs with TF32 off).
 *   fp16  activations and weights FP16; GEMMs accumulate in FP32; LayerNorm statistics and softmax in FP32.
 *   bf16  as fp16 with BF16 storage (needs sm_80+).
 *   fp8   (needs sm_89+) the Linear layers inside the transformer blocks run E4M3 x E4M3 with FP32
 *         accumulation and FP16 output: weights quantized offline per tensor (scale = amax / 448), activations
 *         with a static per-tensor scale from max calibration. The producers of those activations (LayerNorm,
 *         attention, GELU) write E4M3 directly when the GEMM is their only reader, so no standalone quantize
 *         kernel runs; any other input (a decoder's RMSNorm output read by q/k/v, its GLU and KV-attention
 *         outputs) stays FP16 and is quantized with its calibrated scale as the GEMM reads it (a decode step's
 *         GEMV rounds it in registers, tpk_gemv_w8a8; a prefill's GEMM reads it through a quantize kernel).
 *         Patch embedding, head and a decoder's lm_head stay FP16, as practitioners keep them; everything else
 *         is FP16 storage with FP32 statistics.
 *   mxfp8, nvfp4, mxfp4 (sm_89+)  the same Linear layers read MXFP8 / NVFP4 / MXFP4 operands
 *         (src/formats/qformat.h), the rest runs BF16 (BF16's range holds every dequantized block-scaled value). Native on Blackwell (sm_100+);
 *         on sm_89/sm_90, which have no block-scaled MMA, emulated with identical numerics: weights quantized
 *         offline and dequantized exactly into BF16, activations quantized per block (dynamically; NVFP4's
 *         per-tensor scale static from calibration) and dequantized exactly into BF16 by a QDQ kernel before a
 *         BF16 GEMM with FP32 accumulation; NVFP4's per-tensor scales are the GEMM's alpha. The blocks run
 *         along K, so K must be a multiple of the block (32; NVFP4 16). Every such op is labelled emulated.
 *   fp8-block (native on sm_90 only)  the same Linear layers run E4M3 x E4M3 with FP32 block scales (DeepSeek-V3
 *         recipe): weights per 128 x 128 tile, offline; activations per 1 x 128 block along K, computed when the
 *         engine runs (dynamic, no calibration) by the producer (LayerNorm, GELU write the format themselves) or
 *         by a standalone quantize kernel (the attention output, whose 128-blocks span two heads). cuBLASLt's
 *         VEC128_32F / BLK128x128_32F scale modes, FP32 accumulation, BF16 output; the rest runs BF16. A partial
 *         last block along K is allowed (K % 16 == 0 is cuBLASLt's FP8 rule).
 * KV cache (decoders): in the activation type, or with the policy's kv_fp8 (`--kv-cache fp8`) in E4M3 under one
 * static scale per layer's cache (calibrated: amax of the k and v appended / 448), for 16-bit engines on sm_89+.
 * Fusion (GPU targets; the rules of program.h, applied by tp_program_lower as the plan's last step): a residual add whose one operand is a GEMM output read by nothing else runs in that GEMM's
 * epilogue (C = the other operand, beta = 1) when the GEMM reads f32, f16, bf16 or per-tensor E4M3 operands and
 * writes the add's storage type: the add's kernel and its 3 passes over the activations disappear, and the sum is
 * rounded once instead of twice. Block-scaled GEMMs keep their add. With the policy's gelu_tanh
 * (`--gelu tanh`), a GELU whose input is a GEMM output read by nothing else runs in that GEMM's epilogue as the
 * tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (cuBLASLt's GELU; the model's exact erf GELU
 * differs by up to 4.7e-4), the GEMM writing the GELU's output in its storage type (E4M3 with its scale for an FP8
 * GEMM); labelled in every op note. A model whose GELU is itself the tanh form (tp_op.gelu_tanh: SigLIP) has it
 * fused so without the policy's flag: there the epilogue computes the model's own function. */
#ifndef TP_PLAN_H
#define TP_PLAN_H

#include "formats/qformat.h"
#include "ir/graph.h"
#include "planner/program.h"
#include "tprof.h"

typedef struct tp_plan {
    tp_precision requested;
    int no_fusion;    /* the policy's: no op fused into another's kernel (tp_policy.no_fusion) */
    int fp32_tensors; /* the policy's: RMSNorm and RoPE as FP32 layers between casts (tp_policy.fp32_tensors) */
    int sm;           /* target compute capability x 10 (90 = sm_90); 0 = the CPU executor */
    tp_dtype act_dt;  /* storage type of activations that are not quantized */
    int n_values, n_ops;
    tp_dtype *value_dt;        /* per value: storage type (parameters included) */
    int *value_scaled;         /* per value: 1 when it needs a static per-tensor fp32 scale (E4M3 storage, or the
                                  NVFP4 second-level scale of an activation): from calibration or the weights */
    tp_qformat *value_qf;      /* per value: the quantized format a GEMM reads it in (TP_QF_NONE: as stored) */
    int *op_emulated;          /* per op: 1 when the format is emulated on this target (no hardware path) */
    tp_precision *op_prec;     /* per op: the precision its main math runs in */
    char (*op_note)[256];      /* per op: how and why, e.g. "e4m3 GEMM, fp32 accumulate, fp16 out" */
    tp_program prog;           /* what executes (program.h): the calls, their kernels, the fusion rules' matches; the
                                  plan's lowering, which executors copy and rewrite */
} tp_plan;

/* Plans graph g for precision prec on target sm (0: CPU, which supports fp32 only).
 * Errors: TP_ERR_UNSUPPORTED naming the op, the format and the target (e.g. fp8 on sm_80, an FP8 GEMM with
 * K not a multiple of 16, head dim over 128 for the CUDA attention kernel). */
tp_status tp_plan_build(const tp_graph *g, tp_precision prec, int sm, tp_plan *out, tp_error *err);
void tp_plan_free(tp_plan *p);

/* As tp_plan_build with an explicit precision policy (src/planner/policy.h): the engine's format is the policy's
 * default; each GEMM op is quantized or kept high as the policy resolves its layer name, and the note of every
 * op says which rule decided. Errors as tp_plan_build, plus TP_ERR_UNSUPPORTED when the policy mixes two
 * quantized formats in one engine or quantizes the patch embedding. */
#include "planner/policy.h"
tp_status tp_plan_build_policy(const tp_graph *g, const tp_policy *pol, int sm, tp_plan *p, tp_error *err);

/* Bytes of all parameters at their planned storage types (plus 4 bytes per FP8 scale), a parameter the graph
 * reads through several values in one storage for one kind of op (a pipeline's expert at every step) counted
 * once; a tied embedding twice, as the GPU engine holds it. */
double tp_plan_weight_bytes(const tp_plan *p, const tp_graph *g);

/* The activation buffers of an engine of plan p: slot[v] for every activation value v (-1 for inputs, parameters,
 * state values and the values pinned[v] marks (pinned may be NULL), which have buffers of their own), slots reused in op order by later values of the same byte
 * size (bytes[v], per value) once every reader of their value has run. A value computed by the kernel of an
 * earlier op (a residual add, GELU or token embedding fused into that op's epilogue) takes its slot at that op,
 * before that op's inputs are released, so no kernel writes over its own operand (a GEMM writing D over its A is
 * wrong once it runs in several waves). slot_bytes receives each slot's size (n_values entries at most). Returns
 * the number of slots, or -1 when out of host memory. */
int tp_plan_buffers(const tp_graph *g, const tp_plan *p, const size_t *bytes, const unsigned char *pinned, int *slot,
                    size_t *slot_bytes);

/* Sibling linears: groups of linear ops reading the same input value with 16-bit unquantized weights of one type
 * (or weight-only FP8 or NVFP4 ones: a per-tensor scale or s2 each), one K (a multiple of 8; 16 for NVFP4), all with a bias or none, no epilogue fused into them (a decoder's q/k/v projections,
 * its gate/up): lead[i] the group's first op (-1: op i is in no group of two or more), next[i] the group's next
 * op in graph order (-1: the last). An engine may lay their weights out one after the other and run them as one
 * GEMV (exec/cuda/engine/engine_memory.c, engine_select.c). lead and next: n_ops entries each. */
void tp_plan_sibling_groups(const tp_graph *g, const tp_plan *p, int *lead, int *next);

#endif
