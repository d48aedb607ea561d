/* engine_internal.h: what the engine's files share: the engine's definition, the functions one phase offers those
 * above it, and a few helpers. The files by phase, lowest first; a phase calls only the phases below it, so the
 * file call graph has no cycle (scripts/check_calls.py):
 *   memory     engine_memory.c   device allocations, weights converted and uploaded, activation buffers, a sibling
 *                                group's layout, a pipeline's constants, inputs and stage buffers
 *   launch     engine_launch.c   one op enqueued (tpe_launch_op) and its per-kind launchers
 *   run        engine_run.c      a whole pass (one engine, or every rank in lockstep), the warm-up and the CUDA graph
 *                                capture, stage handoffs, the public API of a built engine (runs, timings, queries)
 *   selection  engine_select.c   the build-time choices timed on the op's buffers (attention, GEMMs, groups, 2:4)
 *   build      cuda_engine.c     tpe_build, tp_engine_build, tp_engine_destroy, the GPU's facts, calibration
 *   tensor     engine_tp.c       tp_engine_build_tp: every rank's engine built, then warmed up and captured together
 *   parallelism
 * Not a public header: nothing outside src/exec/cuda includes it. C11. */
#ifndef TP_ENGINE_INTERNAL_H
#define TP_ENGINE_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "exec/cuda/attention/attention.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "exec/cuda/gemm/gemv.h"
#include "exec/cuda/vendor/cudnn_sdpa.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/vendor/nccl_comm.h"
#include "formats/dtype.h"
#include "formats/precision.h"
#include "planner/program.h"

/* A CUDA runtime call that can fail for reasons outside tprof (no device, out of memory): a status. */
#define CU_TRY(call)                                                                                  \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            st = tp_fail(err, e_ == cudaErrorMemoryAllocation ? TP_ERR_OOM : TP_ERR_CUDA, "%s: %s (%s:%d)", \
                         #call, cudaGetErrorString(e_), __FILE__, __LINE__);                          \
            goto fail;                                                                                \
        }                                                                                             \
    } while (0)

/* One scale per value, each in its own 16-byte slot: cuBLASLt rejects FP8 scale pointers that are only 4-byte
 * aligned (CUBLAS_STATUS_NOT_SUPPORTED at cublasLtMatmul, seen on H200 with cuBLASLt 13.1). */
#define SCALE_SLOT 4

#define TPE_MAX_STAGES 16 /* stages of a modular engine */

struct tp_engine {
    const tp_graph *g;
    const tp_params *params;
    const tp_plan *plan;
    int use_graph;
    int no_pdl;                /* tp_engine_options.no_pdl */
    int parallel_launch;       /* tp_engine_options.parallel_launch (the rank-0 engine's governs) */
    int pdl_edges, graph_edges; /* the captured graph's programmatic edges (after no_pdl) and all its edges */
    int graph_kernels;          /* and its kernel nodes */
    tp_launch_hook hook;
    void *hook_user;
    const tp_qtensor *const *weights_q;
    cudaStream_t stream;
    void **dptr;          /* per value */
    float *d_scales;      /* per value v at d_scales[SCALE_SLOT * v]: the fp32 per-tensor scale of E4M3 values;
                           * at d_scales[SCALE_SLOT * (n_values + v)] its reciprocal (a GEMM's E4M3 D scale) */
    float *d_amax;        /* per value: calibration scratch */
    float *act_amax;      /* per value, host: the calibrated amax its static scale came from (NaN: none); a decode
                             engine sharing this one takes its scales by value name */
    void *d_cols;         /* im2col scratch */
    void *d_qdq;          /* emulated block-scaled formats: the dequantized GEMM input (bf16) */
    void *d_q8;           /* fp8-block, native MX/NV: the codes of a GEMM input quantized by a standalone kernel */
    void **d_bscale;      /* per value: block scales as cuBLASLt reads them (fp8-block: fp32 (K/128, M_pad) for
                             activations, 128x128 tiles for weights; native MX/NV: codes in the 128x4 layout) */
    float *wglobal;       /* per value, host: a weight's per-tensor scale: NVFP4's second-level s2, a per-tensor E4M3
                             weight's amax / 448; 1 elsewhere */
    void *d_wdq;          /* weight-only FP8 linears of more than 8 rows: their weight dequantized to FP16 for the
                             GEMM (the largest one's size; one stream) */
    float *alpha;         /* per op: the GEMM's alpha (s2_a * s2_w for NVFP4, else 1), host */
    void **allocs;        /* everything cudaMalloc'ed, for destroy */
    int n_allocs, cap_allocs;
    tp_gemm_ctx *gemm;
    tp_gemm_plan **gplan; /* per op */
    tp_sdpa **sdpa;            /* per op: cuDNN's plan when it runs the op (plans are per op: they cache pointers) */
    void *d_sdpa_ws;           /* cuDNN's workspace, shared (one stream) */
    char (*impl_note)[200];    /* per op: what was chosen and the build-time timings */
    /* the program this engine runs (planner/program.h): the plan's, copied, with the build's choices rewriting its
     * calls' kernels (TP_CALL_GEMM_SM90_GELU: tprof's Hopper GEMM with the exact GELU joined to the call;
     * TP_CALL_GEMM_SM90: tprof's FP8 GEMM; TP_CALL_GEMV: the 16-bit decode GEMV; TP_CALL_GEMV_GROUP: a sibling group
     * joined into its leader's call; TP_CALL_GEMM_SPARSE; the attention implementations; a prefill's flash KV
     * attention; a masked attention's batched GEMMs). tpe_launch_op launches a call from its first op. */
    tp_program prog;
    tp_program prog_chosen;    /* prog as the choices left it, before tpe_fuse_built's joins (calibration runs it) */
    int *group_lead, *group_next; /* per op: sibling linears (engine_memory.c): the group's first op, the next member
                                     (-1: none) */
    float **group_cs;          /* per leader of a weight-only FP8 group: its members' per-tensor scales, one per
                                  output row (N fp32, device), the group GEMV's per-row scales */
    int groups_mode;           /* tp_engine_options.gemv_groups */
    double *gemm_us;           /* per GEMM op: the build-time time of what was chosen (0: not timed, or a member of a
                                  sibling group chosen by time, whose leader holds the group's) */
    int *cutlass_tile;         /* per op running CUTLASS's mixed-input GEMM: its tile shape (gemm_cutlass.h) */
    int fp8_promote;           /* tp_engine_options.fp8_promote */
    int sms;                   /* the device's SM count (tpk_gemm_sm90_fp8_pick_variant's tiling rule) */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    /* modular (tp_engine_options.modular): stage k is ops seg_first[k] .. seg_first[k + 1] - 1, its own graph; the
     * values it hands over (produced in it, read after it) copied into hand[k]'s buffers after it runs */
    int n_seg;
    int seg_first[TPE_MAX_STAGES + 1];
    cudaGraph_t seg_graph[TPE_MAX_STAGES];
    cudaGraphExec_t seg_exec[TPE_MAX_STAGES];
    int *hand_v;               /* the handed-over values, stage by stage */
    int hand_first[TPE_MAX_STAGES + 1];
    void **hand_copy;          /* per handed-over value: its copy's buffer */
    double weight_bytes, act_bytes;
    /* graphs with a KV cache (decoders) */
    const tp_engine *share;    /* tp_engine_options.share: its weights, KV cache and position are this engine's */
    int *d_past;               /* device: the cache positions filled (graph.h tp_graph.past); the share's if shared */
    int resets_past;           /* the graph starts from an empty cache (its past is 0): it zeroes *d_past first */
    int feed_argmax;           /* the graph ends by writing argmax(logits) into its own input (greedy decode) */
    float **d_invfreq;         /* per RoPE op: its D/2 inverse frequencies (tp_rope_inv_freq), device */
    float **d_opconst;         /* per TIME_CONCAT op: its step's time embedding (tp_time_embedding), device */
    tp_bgemm **mplan;          /* per op, 4 each: S = Q Kp^T, S = Q K^T, O = P Vp, O (+)= P V (NULL where absent) */
    float *d_mscore;           /* the unfused attention's scores, fp32 (the largest op's; one stream) */
    void *d_mprob;             /* its probabilities, in the activations' type */
    void *d_mws;               /* the masked flash attention's split-KV workspace (the largest op's; one stream) */
    size_t mws_bytes;
    int *msplits;              /* per op: the key ranges its masked flash kernel asks for (0: automatic), timed */
    struct tp_spgemm_ctx *spctx; /* cuSPARSELt's handle (tp_engine_options.sparse), NULL otherwise */
    struct tp_spgemm **spgemm;  /* per op: the planned sparse GEMM of a linear with 2:4 weights, NULL elsewhere */
    tp_call_kind *sparse_dense; /* per op: the kind a linear runs dense, kept while TP_CALL_GEMM_SPARSE runs it */
    double *sparse_us;          /* per op, 2 each: the sparse and the dense GEMM's build-time times */
    char (*sparse_why)[120];    /* per op: why a linear with a 2:4 weight has no sparse GEMM ("" otherwise) */
    int sparse_mode;            /* tp_engine_options.sparse */
    void *d_sq8;                /* the sparse FP8 GEMMs' E4M3 input, quantized as read (rows rounded up to 16) */
    size_t sq8_bytes;
    int *repeats;              /* per value: the earlier parameter value holding the same parameter, stored alike, whose
                                  device copy it shares (a pipeline's expert steps), or -1 */
    float *d_kv_ws;            /* the decode attention's split-KV workspace, shared by its ops (one stream) */
    size_t kv_ws_bytes;
    void *d_kv16;              /* an FP8 cache's prefill: its first T rows dequantized (2, B, T, W) for the flash
                                  kernel (the largest such op's; one stream) */
    float *d_f32x, *d_f32y;    /* --fp32-protect tensors: an FP32 layer's input and output (plan.h fp32_tensors; the
                                  largest RMSNorm or RoPE output's size, shared: one stream) */
    int device;                /* tp_engine_options.device: the GPU this engine runs on */
    /* tensor parallelism (engine_tp.c, engine_run.c): the engine tp_engine_build_tp returns is rank 0's, the leader, through
     * which every public function drives all ranks */
    int rank;                  /* this engine's rank (0 without tensor parallelism) */
    int n_ranks;               /* the leader's: the number of ranks (1 without tensor parallelism) */
    struct tp_engine **ranks;  /* the leader's: every rank's engine (ranks[0] is the leader); NULL elsewhere */
    tp_nccl *nccl;             /* every rank's: the communicators (NULL without tensor parallelism) */
    /* the persistent decode step (engine_persist.c): built when tp_engine_options.decode_kernel asks for it or lets
     * the build choose; pk_on: the step runs as it (one kernel) instead of the per-call kernels */
    struct tpe_persist *pk;
    int pk_on;
    tp_decode_kernel decode_kernel;
    char pk_note[320];         /* which form runs the step and why (the times the build measured) */
    int owns_nccl;             /* the leader's: it created nccl (a decode group uses its prefill group's) */
};

/* ---- the persistent decode step (engine_persist.c) ----------------------------------------------------------
 * tpe_persist_setup: e->pk from the built program (TP_ERR_UNSUPPORTED naming what the persistent step cannot run,
 * TP_ERR_OOM, TP_ERR_CUDA); tpe_persist_launch: the step enqueued on e->stream (its counters zeroed, the kernel), a
 * CUDA error code; tpe_persist_instructions: the stream's instruction count (0 without one). */
tp_status tpe_persist_setup(tp_engine *e, tp_error *err);
int tpe_persist_launch(tp_engine *e);
int tpe_persist_instructions(const tp_engine *e);
void tpe_persist_free(tp_engine *e);
/* tp_engine_persist_records (cuda_engine.h). */
tp_status tpe_persist_records(const tp_engine *e, int *op, int *sm, uint64_t *ready_ns, uint64_t *end_ns, int *n,
                              tp_error *err);
/* Lab (TPROF_PERSIST_TRACE set at build): the last step's per-instruction records summarised per role on f. */
tp_status tpe_persist_report(const tp_engine *e, FILE *f, tp_error *err);

/* ---- memory (engine_memory.c) ------------------------------------------------------------------------ */

/* cudaMalloc of `bytes` (16 when 0) recorded for tp_engine_destroy; TP_ERR_OOM naming `what` and the bytes, or
 * TP_ERR_CUDA. */
tp_status tpe_dev_alloc(tp_engine *e, size_t bytes, void **p, const char *what, tp_error *err);
/* p: an activation buffer of `bytes`, filled on e->stream with defined fp16 values in [-1, 1) from seed (never
 * zeros) before the build times kernels on it; TP_ERR_CUDA when the fill fails */
tp_status tpe_fill_defined(tp_engine *e, void *p, size_t bytes, unsigned seed, tp_error *err);
/* bytes of value v's activation buffer: its elements in the plan's type plus the PAD_ROWS rows of slack */
size_t tpe_act_alloc_bytes(const tp_engine *e, int v);
/* Representative inputs for the choices the build times (GEMMs, attention, 2:4 sparse): the values a model reads as
 * token ids, valid counts or position offsets zero (in range), every other input uniform in [-1, 1); never all
 * zeros. Errors: TP_ERR_CUDA. */
tp_status tpe_fill_inputs(tp_engine *e, tp_error *err);
/* Parameter value v's host bytes in its plan type into h (value_bytes(e, v) of them): a stored per-tensor FP8
 * weight (tp_engine_options.weights_q) as stored, else converted from the fp32 master, an E4M3 weight (value_scaled)
 * with the per-tensor scale amax / 448; *scale and e->wglobal[v] get that scale (1 for unscaled types). */
void tpe_weight_host(tp_engine *e, int v, void *h, float *scale);
/* Weight-only NVFP4 weight v as tprof's GEMV reads it (gemv.h's layouts): the engine file's stored tensor
 * (weights_q) when there is one, else *own, quantized here (freed by the caller with tp_qtensor_free, also after
 * an error); *q points at the one to use. Errors: tp_quantize's. */
tp_status tpe_nvfp4_weight(const tp_engine *e, int v, tp_qtensor *own, const tp_qtensor **q, tp_error *err);
/* The shared engine's device copy of parameter value v (the same parameter in the same storage), or -1. */
int tpe_shared_param(const tp_engine *e, int v);
/* Every parameter in its planned storage on the device (h_scales: the per-value scales for e->d_scales), a shared
 * engine's or a repeated value's copy reused. Errors: TP_ERR_OOM, TP_ERR_CUDA, tp_quantize's. */
tp_status tpe_upload_params(tp_engine *e, float *h_scales, tp_error *err);
/* The activation buffers of the plan's assignment (tp_plan_buffers), the inputs' own, the KV cache's, a sibling
 * group's outputs; all filled with defined values. Errors: TP_ERR_OOM, TP_ERR_CUDA, TP_ERR_ARG (a shared cache of
 * another size or type). */
tp_status tpe_alloc_activations(tp_engine *e, tp_error *err);

/* Sibling linears reading one input (q/k/v, gate/up) as one GEMV at one token a step (engine_memory.c lays them
 * out, engine_launch.c launches them, engine_select.c chooses them). tpe_find_groups: the groups
 * (planner/plan.h tp_plan_sibling_groups into e->group_lead, group_next); tpe_upload_groups: their weights and
 * biases laid out one after the other (engines without a share); tpe_group_pins: the outputs (pinned[v] = 1) that
 * take one contiguous allocation each group (tpe_alloc_group_outputs) instead of the activation pool;
 * tpe_fp4_group: the group of leader `lead` is weight-only NVFP4; tpe_b128_group: FP8 block-128; tpe_group_ready: the group of leader `lead` can
 * run as one GEMV (one token, its weights, biases and outputs contiguous), its summed N in *n_total;
 * tpe_choose_groups: the group's GEMV timed against the members' own choices (e->gemm_us), kept when faster (its
 * members joined into the leader's call, of kind TP_CALL_GEMV_GROUP), and a prefill's FP8 group's GEMM likewise
 * (TP_CALL_GEMM_SM90_GROUP), or as given (TP_GEMM_CHOICE_SM90_GROUP on its leader); tpe_launch_group: the GEMV of leader `lead`
 * with its fusion (gemv.h: a GLU epilogue; NULL: none). tpe_find_groups: the sibling groups of e's plan, or of
 * `layout` (tp_engine_options.group_layout) where it stores every member alike. */
void tpe_find_groups(tp_engine *e, const tp_plan *layout);
/* An FP8 (E4M3, weight-only or W8A8) or NVFP4 group's per-row scales (n fp32 on the device, into e->group_cs[lead]
 * once): member j's per-tensor scale or s2 over its rows; nothing for other groups. The graph path's group GEMV
 * (chosen in engine_select.c) and the persistent step (engine_persist.c, any batch) read them. Errors: TP_ERR_OOM,
 * TP_ERR_CUDA. */
tp_status tpe_group_scales(tp_engine *e, int lead, int64_t n, tp_error *err);
tp_status tpe_upload_groups(tp_engine *e, tp_error *err);
void tpe_group_pins(const tp_engine *e, unsigned char *pinned);
tp_status tpe_alloc_group_outputs(tp_engine *e, tp_error *err);
int tpe_fp4_group(const tp_engine *e, int lead);
int tpe_b128_group(const tp_engine *e, int lead);

/* A pipeline's graph. tpe_rope_tables: every RoPE op's inverse frequencies on the device (e->d_invfreq), those
 * not yet there; tpe_setup_pipeline: that and every TIME_CONCAT op's embedding (e->d_opconst), and each masked
 * attention op's batched GEMMs and buffers (or the CUDA-core kernel); tpe_upload_inputs: the packed per-sample rows
 * (B of tp_graph_input_layout's length, fp32) scattered into every input's buffer, enqueued on x->stream;
 * tpe_find_repeats: e->repeats. Errors: TP_ERR_OOM, TP_ERR_CUDA, TP_ERR_UNSUPPORTED (a RoPE head dim). */
tp_status tpe_rope_tables(tp_engine *e, tp_error *err);
tp_status tpe_setup_pipeline(tp_engine *e, tp_attn_impl want, tp_error *err);
tp_status tpe_upload_inputs(tp_engine *x, const float *rows, tp_error *err);
tp_status tpe_find_repeats(tp_engine *e, tp_error *err);
/* A modular engine's stages (e->n_seg, seg_first) and handed-over values with their copies' buffers; errors:
 * TP_ERR_UNSUPPORTED (a graph whose ops carry no stage names, or more than TPE_MAX_STAGES), TP_ERR_OOM. */
tp_status tpe_setup_stages(tp_engine *e, tp_error *err);
/* A masked attention op's shapes, as the unfused form reads them (tpe_mshape_of: op i's) */
typedef struct {
    int B, H, Hkv, G, D, Tq, Tk, Tp, two, o0, ld; /* o0: the own keys' first column in S and P */
} mshape;
mshape tpe_mshape_of(const tp_engine *e, int i);
/* The most key ranges the build times for a masked flash attention (tpe_choose_attention) */
#define TPE_MASKED_SPLITS 8
/* Masked attention op i as tpk_flash_attention_masked's arguments on the engine's buffers (workspace included);
 * 0 when the kernel does not take its types or head dim. */
int tpe_masked_flash_args(const tp_engine *e, int i, tpk_masked_attn_args *a);

/* ---- launch (engine_launch.c) ------------------------------------------------------------------------- */

/* enqueues op i as it is configured (its kernels, or nothing when another op's kernel computes it) on e->stream */
tp_status tpe_launch_op(tp_engine *e, int i, tp_error *err);
int tpe_launch_group(tp_engine *e, int lead, const tpk_gemv_fusion *fu);
int tpe_group_ready(const tp_engine *e, int lead, int64_t *n_total);
/* op i's sparse GEMM (a cusparseStatus_t); tpe_sparse_outputs: the output op i writes (its fused residual add's, if
 * any) and that add's other operand */
int tpe_launch_sparse(tp_engine *e, int i);
void tpe_sparse_outputs(const tp_engine *e, int i, void **y, const void **res);
/* op i of a pipeline kind (RESHAPE, CONCAT, SLICE, SILU, TIME_CONCAT, EULER, MASKED_ATTENTION) on s, a CUDA error
 * code */
int tpe_launch_pipeline_op(tp_engine *e, int i, cudaStream_t s);

/* ---- run (engine_run.c) ------------------------------------------------------------------------------- */

/* one run's launches from the host for one engine: the start (the cache position reset), op by op
 * (tpe_launch_op), the end (argmax fed back, the position advanced) */
tp_status tpe_launch_begin(tp_engine *e, tp_error *err);
tp_status tpe_launch_end(tp_engine *e, tp_error *err);
/* every rank's launches of one run, op by op in lockstep (the all-reduces of all ranks in one NCCL group), from
 * the leader */
tp_status tpe_launch_ranks(tp_engine *lead, tp_error *err);
/* The warm-up pass and the capture after tpe_build, for one engine or, from a leader, for every rank in lockstep. */
tp_status tpe_warm_capture(tp_engine *e, tp_error *err);
/* Stage k's handoff: its handed-over values copied, enqueued on e->stream; a CUDA error code. */
int tpe_handoff(tp_engine *e, int k);

/* ---- selection (engine_select.c) ---------------------------------------------------------------------- */

/* Attention: every attention op's implementation (tp_attn_impl; `want` AUTO: the eligible ones timed on the op's
 * buffers, the fastest kept), and cuDNN's workspace. GEMMs: every GEMM op's cuBLASLt candidate or tprof's Hopper
 * GEMM (TP_GEMM_CHOICE_SM90, _SM90_GELU), timed unless `first` or given. Both write the choice and its timings
 * into e->impl_note. Errors: TP_ERR_UNSUPPORTED (a choice that cannot run, naming the layer), TP_ERR_ARG,
 * TP_ERR_OOM, TP_ERR_CUDA. */
tp_status tpe_choose_attention(tp_engine *e, tp_attn_impl want, tp_error *err);
/* Op i's time as configured now, us: the mean of 10 back-to-back launches after 3 (the launch hook off). */
tp_status tpe_time_op(tp_engine *e, int i, double *us, tp_error *err);
tp_status tpe_choose_gemms(tp_engine *e, int first, int cublaslt_only, const int *given, tp_error *err);
tp_status tpe_choose_groups(tp_engine *e, const int *given, int cublaslt_only,
                            tp_status (*time_op)(tp_engine *, int, double *, tp_error *), tp_error *err);
/* With tp_engine_options.sparse, every linear whose weight is 2:4 (formats/sparsity.h) and whose GEMM cuSPARSELt
 * takes gets a planned sparse GEMM, timed against its dense one (tpe_time_op), the faster kept; the op's note says
 * which ran and both times, or why it was not eligible. Errors: cuSPARSELt's absence (TP_ERR_UNSUPPORTED: asked
 * for, it must be there), TP_ERR_OOM, TP_ERR_CUDA. tpe_sparse_free: what it planned (tp_engine_destroy). */
tp_status tpe_choose_sparse(tp_engine *e, tp_error *err);
void tpe_sparse_free(tp_engine *e);
/* The program's TP_FUSE_BUILT rules (planner/program.h: a GLU into its gate/up group's GEMV epilogue) once every
 * choice above is made (nothing rewrites the joined calls afterwards), unless the plan fuses nothing; a join whose
 * kernel would read an input in the memory it writes is refused. The rules' notes go to e->impl_note; the program
 * as the choices left it is kept for calibration (every value stored). TPROF_FUSE_SKIP=rule[,rule] (a lab switch,
 * for measuring a rule against its unfused calls) leaves those rules out. TP_ERR_OOM. */
tp_status tpe_fuse_built(tp_engine *e, tp_error *err);

/* ---- build (cuda_engine.c) ---------------------------------------------------------------------------- */

/* The build up to (not including) the warm-up pass and the capture (tpe_warm_capture). */
tp_status tpe_build(const tp_graph *g, const tp_params *params, const tp_plan *plan, const tp_engine_options *opt,
                    tp_engine **out, tp_error *err);

/* Helpers of every phase */

/* The program: op i's call kind (its call's, when another op heads it); a head's kind rewritten; the op of kind k
 * the plan fused into op i's call (its epilogue: a residual ADD, a tanh GELU, the token embedding), or -1. */
static inline tp_call_kind tpe_kind(const tp_engine *e, int i) { return tp_program_kind(&e->prog, i); }
static inline void tpe_set_kind(tp_engine *e, int i, tp_call_kind k) { e->prog.calls[i].kind = k; }
static inline int tpe_plan_fused(const tp_engine *e, int i, tp_op_kind k) {
    return tp_program_find(&e->plan->prog, e->g, i, k);
}
/* tp_attn_impl <-> the attention call kinds */
static inline tp_call_kind tpe_attn_kind(tp_attn_impl a) {
    return a == TP_ATTN_FLASH ? TP_CALL_ATTENTION_FLASH
           : a == TP_ATTN_WGMMA ? TP_CALL_ATTENTION_WGMMA
           : a == TP_ATTN_CUDNN ? TP_CALL_ATTENTION_CUDNN
                                : TP_CALL_ATTENTION;
}
static inline tp_attn_impl tpe_attn_impl(tp_call_kind k) {
    return k == TP_CALL_ATTENTION_FLASH ? TP_ATTN_FLASH
           : k == TP_CALL_ATTENTION_WGMMA ? TP_ATTN_WGMMA
           : k == TP_CALL_ATTENTION_CUDNN ? TP_ATTN_CUDNN
                                          : TP_ATTN_CLASSIC;
}
static inline size_t value_bytes(const tp_engine *e, int v) {
    return (size_t)tp_value_numel(&e->g->values[v]) * tp_dtype_info(e->plan->value_dt[v])->bytes;
}

/* Rows of an activation viewed as a GEMM operand (M, K), K its last dimension; fp8-block GEMMs run on rows
 * rounded up to a multiple of 4 (cuBLASLt refuses block scales otherwise) and cuSPARSELt's on rows rounded up to a
 * multiple of 8 (its dense 16-bit operand) or 16 (8-bit), so every activation buffer has PAD_ROWS rows of slack
 * after its last row. */
#define PAD_ROWS 15
static inline int64_t value_cols(const tp_engine *e, int v) {
    const tp_value *val = &e->g->values[v];
    return val->shape[val->ndim - 1];
}
static inline int64_t value_rows(const tp_engine *e, int v) { return tp_value_numel(&e->g->values[v]) / value_cols(e, v); }
static inline int64_t rows_pad(int64_t m) { return (m + 3) / 4 * 4; }
/* Op i is a GEMM on Blackwell's block-scaled MMA (a native MXFP8 / NVFP4 / MXFP4 plan). */
static inline int op_native_bs(const tp_engine *e, int i) {
    const tp_op *op = &e->g->ops[i];
    tp_qformat qf = op->kind == TP_OP_LINEAR ? e->plan->value_qf[op->in[0]] : TP_QF_NONE;
    return (qf == TP_QF_MXFP8 || qf == TP_QF_NVFP4 || qf == TP_QF_MXFP4) && !e->plan->op_emulated[i];
}

/* Op i is a weight-only linear: E4M3 or NVFP4 weights, 16-bit input (plan.c plan_weight_only; not an fp8-block
 * linear, whose input is also 16-bit until its quantize kernel runs). */
static inline int op_weight_only(const tp_engine *e, int i) {
    return e->g->ops[i].kind == TP_OP_LINEAR && tp_precision_info(e->plan->op_prec[i])->weight_only;
}

/* Op i is a W8A8 FP8 linear whose 16-bit input is quantized as it is read (plan.c: its producer does not write
 * E4M3): at most 8 rows, tprof's GEMV rounds x in registers (tpk_gemv_w8a8); more, a quantize kernel writes d_q8
 * for the FP8 GEMM. The input's scale is its calibrated amax / 448, as if it were stored in E4M3. */
static inline int op_fp8_quant_in(const tp_engine *e, int i) {
    const tp_op *op = &e->g->ops[i];
    return op->kind == TP_OP_LINEAR && e->plan->op_prec[i] == TP_PREC_FP8 && e->plan->value_dt[op->in[0]] != TP_E4M3;
}

/* Weight v is read by a weight-only NVFP4 linear: packed as the GEMV reads it (gemv.h) */
static inline int weight_nvfp4_wo(const tp_engine *e, int v) {
    for (int i = 0; i < e->g->n_ops; i++)
        if (e->g->ops[i].n_in > 1 && e->g->ops[i].in[1] == v && e->plan->op_prec[i] == TP_PREC_NVFP4_WO) return 1;
    return 0;
}

/* Weight v is read by a native block-scaled GEMM. */
static inline int weight_native_bs(const tp_engine *e, int v) {
    for (int i = 0; i < e->g->n_ops; i++)
        if (e->g->ops[i].n_in > 1 && e->g->ops[i].in[1] == v && op_native_bs(e, i)) return 1;
    return 0;
}

/* Two GEMMs of the same shape, types and epilogue (the same cuBLASLt candidates) */
static inline int tpe_same_gemm(const tp_gemm_desc *a, const tp_gemm_desc *b) {
    return a->M == b->M && a->N == b->N && a->K == b->K && a->ab_dt == b->ab_dt && a->d_dt == b->d_dt &&
           a->has_bias == b->has_bias && a->block128 == b->block128 && a->block_fmt == b->block_fmt &&
           a->residual == b->residual && a->gelu == b->gelu && a->fast_accum == b->fast_accum;
}

/* Before every kernel an op enqueues: the launch hook (profiling) with the op and the kernel's category. */
#define HOOK(e, op, cat)                                        \
    do {                                                        \
        if ((e)->hook) (e)->hook((e)->hook_user, (op), (int)(cat)); \
    } while (0)

#endif
