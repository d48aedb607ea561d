/* cuda_engine.h: the CUDA executor. An engine is one graph planned for one precision on one GPU: weights
 * converted and uploaded once, every activation buffer allocated once (buffers reused by liveness), GEMMs
 * planned with cuBLASLt, and the whole forward pass captured in one CUDA graph. Running and timing it does
 * no allocation and no host synchronization inside the timed region. */
#ifndef TP_CUDA_ENGINE_H
#define TP_CUDA_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/system.h"
#include "ir/graph.h"
#include "models/model.h"
#include "formats/qformat.h"
#include "planner/plan.h"
#include "tprof.h"


/* Fills info for device `device`. TP_ERR_NO_GPU (with the CUDA reason) when there is none. */
tp_status tp_gpu_query(int device, tp_gpu_info *info, tp_error *err);

typedef struct tp_engine tp_engine;

/* Called before every kernel or GEMM the engine enqueues (also while capturing the CUDA graph), with the IR op
 * and the category of what follows (a tp_category); op -1 after the last. The profiler attributes kernels
 * through it. */
typedef void (*tp_launch_hook)(void *user, int op, int category);

/* Which implementation runs the fused attention ops. AUTO times every eligible one on the op's shape when the
 * engine is built and keeps the fastest (once per distinct shape); the others force one, and are an error at
 * build time where it cannot run the op. */
typedef enum {
    TP_ATTN_AUTO = 0,
    TP_ATTN_FLASH,   /* tprof's tensor-core kernel (attention.h): F16/BF16 inputs, D in {32, 64, 80, 96, 128} */
    TP_ATTN_CUDNN,   /* cuDNN's SDPA (cudnn_sdpa.h), loaded at run time: F16/BF16 in and out (no E4M3 output) */
    TP_ATTN_CLASSIC, /* tprof's CUDA-core kernel (kernels.h tpk_attention): any type, the reference on the GPU */
    TP_ATTN_WGMMA,   /* tprof's Hopper kernel (attention_wgmma.h): compute capability 9.0, F16/BF16 in, D = 64 */
    TP_ATTN_COUNT
} tp_attn_impl;
/* "auto", "flash", "cudnn", "classic", "wgmma"; parse returns -1 for anything else. */
const char *tp_attn_impl_name(tp_attn_impl a);
int tp_attn_impl_parse(const char *s);

/* How a decode engine (feed_argmax) runs its step (issue 42, docs/persistent.md). GRAPH: the CUDA graph of one kernel
 * per call; PERSISTENT: one persistent kernel running the step's instruction stream (exec/cuda/persistent/persist.h),
 * an error (TP_ERR_UNSUPPORTED, naming why) where it cannot run the step; AUTO: both built, each timed over a few
 * steps at build, the faster kept (a persistent step that cannot be built, an eager engine, or a profiled one
 * (the hook: CUPTI would see one kernel) keeps the graph). tp_engine_decode_kernel says which ran and why. */
typedef enum { TP_DECODE_GRAPH = 0, TP_DECODE_PERSISTENT, TP_DECODE_AUTO } tp_decode_kernel;

typedef struct {
    int device;
    int use_graph;           /* 1: capture the forward pass in one CUDA graph (default); 0: eager launches */
    tp_attn_impl attention;  /* fused attention implementation (default AUTO) */
    size_t workspace_bytes;  /* cuBLASLt workspace; 0 = 32 MiB */
    int gemm_first;          /* 1: run cuBLASLt's first heuristic algorithm (and every GELU as its own kernel);
                                0 (default): time its candidates at build and keep the fastest per GEMM shape
                                (gemm_cublaslt.h, GEMM selection), and on sm_90 time tprof's GEMM against it where
                                it can run the op: with the exact GELU after it in its epilogue
                                (TP_GEMM_CHOICE_SM90_GELU), or a per-tensor FP8 op without (TP_GEMM_CHOICE_SM90) */
    int cublaslt_only;       /* 1: never tprof's own GEMM (TP_GEMM_CHOICE_SM90_GELU, TP_GEMM_CHOICE_SM90): every
                                GEMM in cuBLASLt, every GELU its own kernel */
    int fp8_promote;         /* per-tensor FP8 GEMMs' accumulation. 0 (default, --fp8-accum fast): in the tensor
                                cores without periodic promotion to fp32, as Transformer Engine's forward GEMMs:
                                cuBLASLt with FAST_ACCUM, and on sm_90 tprof's FP8 GEMM timed against it; 1
                                (--fp8-accum promote): cuBLASLt with its fp32 promotion (FAST_ACCUM off), never
                                tprof's FP8 GEMM. bench/gemm_lab.c measures both (10-17% apart on an H200) */
    const int *gemm_choice;  /* optional, per op: the candidate index to run (tp_engine_gemm_choice of another
                                engine of the same graph and plan, TP_GEMM_CHOICE_SM90(_GELU) included), taken as
                                given; -1 entries: as above */
    const float *act_amax;   /* per graph value: calibrated max |x| for values the plan stores as scaled E4M3 (or
                                quantizes to it as its W8A8 GEMMs read it). NULL: taken by value name from
                                scales_from, else from share (a decode step's values are named as the prefill's) */
    const struct tp_engine *scales_from; /* optional: an engine of the same model and plan precision (another step
                                shape) whose calibrated amax this one takes, by value name, when act_amax is NULL */
    tp_launch_hook hook;     /* optional */
    void *hook_user;
    /* Optional, per parameter index: the weight already quantized (an engine file's tensors). Used as stored
     * for the values the plan quantizes, so an engine loaded from a file is bit-exact with the one that wrote
     * it (re-quantizing decoded values is not idempotent for every format). NULL entries: quantize the fp32
     * master. */
    const tp_qtensor *const *weights_q;
    /* Graphs with a KV cache (decoders). share: an engine of the same model and precision (the prefill engine)
     * whose weights, KV cache and cache position this engine uses instead of its own (values matched by parameter
     * index and storage, state values by name and size); it must outlive this engine. feed_argmax: the graph ends
     * by writing the greedy next token, argmax of its (B, V) logits, into its own (B, 1) input, so each replay
     * decodes one more token on its own (tp_engine_decode). */
    const struct tp_engine *share;
    int feed_argmax;
    /* Sibling linears reading one input (a decoder's q/k/v, gate/up) at one token a step as one GEMV over their
     * concatenated weights (engine_memory.c, engine_select.c): 0 never, 1 wherever the layout allows, 2 where it is faster than the
     * members apart (timed at build: each GEMV alone, which misses what programmatic launch gains in a step). The
     * CLI's default is 1: Llama-3.2-1B's decode step 9 % faster on an H100 with PDL
     * (bench/results/2026-11-25_h100_pdl_groups.log). */
    int gemv_groups;
    /* Optional: the plan (of this graph) whose sibling groups lay out the weights, where it stores every member as
     * this engine's plan does; NULL: this engine's own. Only the layout: the engine runs its own plan's groups. A W8A8
     * prefill engine (--prefill-activations fp8) lays its weights out for the fp8-wo decode engine that shares them
     * and groups its GEMVs; the layout costs the prefill's GEMMs nothing (they read each member, or a group's GEMM
     * reads them all). */
    const struct tp_plan *group_layout;
    /* 1: no kernel overlap in the CUDA graph. The decode path's kernels (decoder_ops.h, gemv.h) are launched with
     * programmatic dependent launch (kernels/pdl.cuh): each may start while the previous one finishes, streaming
     * its weights early; capture turns that into programmatic graph edges. no_pdl makes them ordinary edges (each
     * kernel starts after the previous one has completed: per-kernel traced times without overlap, and the
     * baseline PDL is measured against). Eager launches (use_graph 0) keep PDL either way. */
    int no_pdl;
    /* tensor parallelism: 1 launches the ranks' CUDA graphs from one host thread each (OpenMP), so the GPUs start a
     * replay together; 0 (default) one after the other from the calling thread, GPU 0 first (`--tp-launch`). */
    int parallel_launch;
    /* A pipeline's modular mode (`--pipeline modular`; with use_graph, one engine): one CUDA graph per stage (the
     * ops' layer names' first component, "vision." ...: contiguous runs of ops), launched one after another with
     * the host waiting for each (cudaStreamSynchronize) before launching the next, and every tensor that crosses a
     * stage boundary copied device to device once after its stage (the handoff separate engines would make; the
     * next stage reads the original, the copy costs what a handoff costs). Not with tensor parallelism. */
    int modular;
    /* 2:4 sparsity (issue 22): every linear whose weight is 2:4 (formats/sparsity.h) and whose GEMM cuSPARSELt takes
     * runs cuSPARSELt's sparse GEMM where that was faster than its dense one at build (engine_select.c; the op's
     * tp_engine_op_impl says which and both times). cuSPARSELt must be found (TP_ERR_UNSUPPORTED otherwise). 2: every
     * eligible linear runs sparse, whatever the times (tests). */
    int sparse;
    tp_decode_kernel decode_kernel; /* decode engines: how the step runs (default GRAPH) */
    /* optional: called as the build enters each of its long steps, with a name that outlives the engine ("weights:
     * quantize and upload", "attention selection", "GEMM selection", "fusion selection", "CUDA graph capture",
     * "decode-kernel choice"); a caller times them and shows them while they run (issue 43, item 4) */
    void (*on_phase)(void *user, const char *phase);
    void *phase_user;
} tp_engine_options;

/* Builds an engine. g, params and plan must outlive it. Errors: TP_ERR_NO_GPU, TP_ERR_OOM (device memory,
 * naming the bytes asked), TP_ERR_UNSUPPORTED (a GEMM cuBLASLt cannot run, naming the layer), TP_ERR_ARG
 * (an FP8 plan without calibration data), TP_ERR_CUDA. */
tp_status tp_engine_build(const tp_graph *g, const tp_params *params, const tp_plan *plan,
                          const tp_engine_options *opt, tp_engine **out, tp_error *err);
void tp_engine_destroy(tp_engine *e);

/* Tensor parallelism (Megatron-LM, arXiv:1909.08053): n engines, rank r's on GPU opt->device + r, built from the n
 * ranks' graphs of one model step (tp_model_build_step with tp_rank r of tp_size n), their parameters
 * (tp_model_shard_params) and plans (the same policy), joined by NCCL (nccl_comm.h: one communicator per GPU,
 * ncclCommInitAll; the all-reduces between them in each rank's CUDA graph). One host thread drives every rank: the
 * returned engine is rank 0's, and every function of this header taking it works on all ranks (the same input to
 * each; a run's time is the slowest rank's; the output is rank 0's, which every rank computes alike). Rank 0 chooses
 * the GEMM implementations by time and every rank runs its choices (ops that every rank computes alike must round
 * alike); a GEMM only rank 0 runs with a bias (a row-parallel one) keeps cuBLASLt's first candidate elsewhere. opt->share, when given, is a tensor-parallel
 * engine of the same n ranks (the prefill): rank r shares rank r's weights and KV cache, and the communicators.
 * opt->hook sees rank 0's launches only. Errors: tp_engine_build's, TP_ERR_NO_GPU (fewer than opt->device + n
 * GPUs), TP_ERR_UNSUPPORTED (NCCL not found: nccl_comm.h's search list), TP_ERR_ARG (graphs that are not ranks
 * 0..n-1 of one step, n < 2). */
tp_status tp_engine_build_tp(const tp_graph *const *g, const tp_params *const *params, const tp_plan *const *plan,
                             int n, const tp_engine_options *opt, tp_engine **out, tp_error *err);
/* The number of ranks (1 without tensor parallelism) and, for a tensor-parallel engine, the NCCL it loaded
 * ("NCCL 2.28.9 (/lib/x86_64-linux-gnu/libnccl.so.2)"; NULL otherwise). */
int tp_engine_tp_size(const tp_engine *e);
/* Programmatic (overlapping, pdl.cuh) kernel-to-kernel edges of rank 0's CUDA graph after tp_engine_options.no_pdl
 * was applied, and all its edges (*total, may be NULL); -1 for an engine without a graph (eager). */
int tp_engine_pdl_edges(const tp_engine *e, int *total);
/* The form that runs a decode engine's step: 1 the persistent kernel, 0 the per-call kernels; *note (may be NULL)
 * one line saying why (the build's times under AUTO, or why the persistent step could not be built); *instrs (may
 * be NULL) the persistent step's instruction count. */
int tp_engine_decode_kernel(const tp_engine *e, const char **note, int *instrs);
/* The last persistent decode step's per-instruction records (issue 42's profiling; persist.h rec), indexed by the
 * instruction's place in the stream's global order: op[k] the graph op that carries instruction k's time (a GEMV call's first linear, an
 * attention call's KV attention, the embedding), sm[k] the block (one per SM) that ran it, ready_ns[k] and
 * end_ns[k] %globaltimer when its waits were met and when it signalled (the wait before is idle time, not its
 * work). *n: the instruction count (the arrays' length; pass op NULL for the count alone). Recorded by a persistent
 * engine built with a launch hook (tprof profile) or with TPROF_PERSIST_TRACE set. TP_ERR_ARG without records,
 * TP_ERR_CUDA. */
tp_status tp_engine_persist_records(const tp_engine *e, int *op, int *sm, uint64_t *ready_ns, uint64_t *end_ns,
                                    int *n, tp_error *err);
/* Lab: with TPROF_PERSIST_TRACE set when the engine was built, the last persistent step's per-instruction records
 * (wait and run times per role) printed on f. TP_ERR_ARG without records. */
tp_status tp_engine_persist_report(const tp_engine *e, FILE *f, tp_error *err);
/* The kernel nodes of rank 0's CUDA graph (a decode engine's: the kernels of one step), -1 without a graph. */
int tp_engine_graph_kernels(const tp_engine *e);
const char *tp_engine_nccl(const tp_engine *e);
/* With tp_engine_options.sparse: op `op`'s 2:4 sparse GEMM, 1 when it runs, 0 when the dense GEMM was kept (faster
 * at build alone, or the whole pass faster without the sparse GEMMs: then *why says so), -2 when the op is a linear
 * with a 2:4 weight but has none (*why, may be NULL: the reason, as long as the engine), -1 otherwise; *sparse_us
 * and *dense_us (may be NULL): the build-time times of both (tpe_time_op's mean of 10). Under auto (sparse 1) the
 * picks are kept only when the whole forward pass, timed eagerly with and without them, is faster with them; a
 * sparse GEMM whose output differs from the dense one's (relative L2 over 1e-2 in F16, 3e-2 otherwise) is never
 * kept. */
int tp_engine_sparse_op(const tp_engine *e, int op, double *sparse_us, double *dense_us, const char **why);
/* A modular engine's stages (tp_engine_options.modular): their number (0 otherwise) and, for i below it, stage i's
 * name into name (n bytes) and *bytes, the bytes it hands over to later stages. */
int tp_engine_stages(const tp_engine *e, int i, char *name, size_t n, double *bytes);

/* What runs op `op` when the engine chose among implementations: attention ops, e.g. "wgmma: flash (tprof)
 * 50.9 us wgmma (tprof) 44.0 us cudnn 46.5 us" (the choice, then the build-time timings: mean of 10 back-to-back
 * runs, us); GEMM ops, e.g. "cuBLASLt algorithm 3 of 8 by time: 41.2 us (the heuristic's first: 44.0 us)" or
 * "tprof sm90 GEMM + bias + exact GELU in the epilogue (by time: ...)", and a GELU op run by that epilogue, "in the
 * epilogue of <layer> (tprof sm90 GEMM): no GELU kernel"; NULL for other ops. The string lives as long as the
 * engine. */
const char *tp_engine_op_impl(const tp_engine *e, int op);
/* The op whose call in the engine's program (planner/program.h, as its build rewrote it) computes op: op itself, or
 * the first op of the call it is fused into; *kernel (if non-NULL) receives that call's kernel name. -1 for an op
 * out of range. */
int tp_engine_op_call(const tp_engine *e, int op, const char **kernel);

/* Bytes op `op` moves per forward pass in this engine (the roofline's memory term, profile/roofline.h): the plan's
 * (tp_plan_op_bytes: every input read once, the output written once), except where the build fused more than the
 * plan: a GEMM run as TP_GEMM_CHOICE_SM90_GELU writes its GELU's output instead of its own, and that GELU op moves
 * nothing; sibling linears run as one GEMV (tp_engine_options.gemv_groups): the leader moves the group's bytes, the
 * other members nothing (they launch no kernel). 0 for a bad index. */
double tp_engine_op_bytes(const tp_engine *e, int op);

/* The attention implementation op `op` runs (never TP_ATTN_AUTO once built: pass it as tp_engine_options.attention
 * to build an engine that runs the same kernels); -1 for a non-attention op, an FP8 attention op (one kernel) or a
 * bad index. */
int tp_engine_attention_choice(const tp_engine *e, int op);

/* A GEMM choice (tp_engine_gemm_choice, tp_engine_options.gemm_choice, an engine file's "algos") that is not a
 * cuBLASLt candidate: tprof's Hopper GEMM (gemm_sm90.h) with the bias and the exact GELU of the op after it in its
 * epilogue, one kernel writing the GELU's output (that GELU op then launches nothing). Only for a linear read by
 * nothing but an exact GELU, with 16-bit operands (the GELU in their type) or per-tensor E4M3 ones (an F16 GEMM
 * output; the GELU writing F16 or E4M3: tpk_gemm_sm90_fp8; not with fp8_promote), on compute capability 9.0;
 * elsewhere the build refuses it. */
#define TP_GEMM_CHOICE_SM90_GELU 1000
/* The other such choice: tprof's Hopper GEMM with E4M3 operands and no GELU (tpk_gemm_sm90_fp8), the bias and a
 * residual add fused by the plan in its epilogue, writing F16 or E4M3; accumulation in the tensor cores without
 * cuBLASLt's fp32 promotion (gemm_sm90.h). Only for a per-tensor FP8 linear that TP_GEMM_CHOICE_SM90_GELU does
 * not take (no exact GELU after it, or one it cannot fuse: the GELU kernel then runs after this GEMM), whose output
 * lies apart from its input and whose residual is F16 and either the output or apart from it, on compute
 * capability 9.0, and not with fp8_promote; elsewhere the build refuses it. Chosen by time against cuBLASLt's best
 * candidate when the engine is built. */
#define TP_GEMM_CHOICE_SM90 1001
/* And tprof's decode GEMV (gemv.h tpk_gemv): a 16-bit linear of at most 8 rows, K a multiple of 8, input, weight,
 * bias and output in one type, no GELU in its epilogue; elsewhere the build refuses it. Chosen by time against
 * cuBLASLt's best candidate when the engine is built; given, two builds run the same kernels (bit-identical). */
#define TP_GEMM_CHOICE_GEMV 1002
/* And CUTLASS's Hopper mixed-input GEMM (vendor/gemm_cutlass.h) for a weight-only FP8 linear of more than 8 rows:
 * 16-bit input, output and residual in one type, no bias, K % 16 == 0, N % 8 == 0, on compute capability 9.0 in a
 * build with CUTLASS's headers; elsewhere the build refuses it. TP_GEMM_CHOICE_CUTLASS_WO + t runs tile shape t
 * (TP_CUTLASS_TILE_*, t < TP_CUTLASS_TILES). Chosen by time, both tiles, against dequantize + cuBLASLt and tprof's
 * converting GEMM when the engine is built. (1003 is kept for a fused GLU GEMM's choice.) */
#define TP_GEMM_CHOICE_CUTLASS_WO 1004
/* And, on the leader of sibling linears (a prefill's q/k/v or gate/up: per-tensor FP8 linears writing F16 on one
 * E4M3 input, their weights laid out one after the other), the group as one tprof Hopper FP8 GEMM
 * (gemm_sm90.h tpk_gemm_sm90_fp8_group); the leader's own GEMM is timed as usual and the other members keep their
 * own choices for when the group is not formed. Chosen by time against the members' GEMMs when the engine is
 * built; given, where the group or the kernel does not hold, the build refuses it. */
#define TP_GEMM_CHOICE_SM90_GROUP 1006

/* The cuBLASLt candidate GEMM op `op` runs (an index for tp_engine_options.gemm_choice), TP_GEMM_CHOICE_SM90_GELU
 * or TP_GEMM_CHOICE_SM90 where tprof's Hopper GEMM runs it, TP_GEMM_CHOICE_GEMV where tprof's decode GEMV does,
 * TP_GEMM_CHOICE_CUTLASS_WO where CUTLASS's mixed-input GEMM does; -1
 * for a non-GEMM op or a bad index. */
int tp_engine_gemm_choice(const tp_engine *e, int op);

/* The accuracy cost of FP8 attention, layer by layer: one eager forward pass over the engine's current input in
 * which every attention op the plan runs in FP8 is also run by the FP16/BF16 flash kernel on the same input; for
 * those ops i, cosine[i] and rel_l2[i] (|y8 - y16|_2 / |y16|_2) of the FP8 output (E4M3 outputs dequantized with
 * their scale) against it, NaN for every other op (arrays of n_ops). The input of each layer is the engine's own,
 * so each number is that layer's cost alone. Where the plan has the QKV GEMM write E4M3 Q/K/V (plan.c), the
 * reference runs on those values (exactly, in f16): the number is then the cost of P's and the output's E4M3,
 * Q/K/V's rounding being the GEMM's. *n_out receives the number of FP8 attention ops compared. Errors:
 * TP_ERR_OOM, TP_ERR_CUDA. */
tp_status tp_engine_attention_cost(tp_engine *e, double *cosine, double *rel_l2, int *n_out, tp_error *err);

/* Graphs with a KV cache. The engine keeps the cache position (graph.h: the tokens already cached) on the device:
 * a graph built at past 0 (a prefill) starts by setting it to 0, every graph ends by advancing it by its tokens,
 * so a decode engine replays step after step. Building an engine sets the position to 0 and overwrites the cache
 * with its warm-up pass (zero tokens): build the engines first, then run the prefill. tp_engine_set_past sets it (0 <= past, past + tokens <= kv_len:
 * TP_ERR_ARG otherwise).
 * tp_engine_feed_argmax: writes the greedy next token of `from`'s (B, V) logits into `to`'s (B, 1) input (the
 * first decode step after a prefill). TP_ERR_ARG when the shapes do not match.
 * tp_engine_decode: `steps` runs of a decode engine (feed_argmax on; graph replays, or eager launches without a
 * graph) from its current cache and input, each bracketed by CUDA events: step_ms[s] the GPU time of step s (ms), tokens[s * B + b] the token step s chose
 * (as fp32 integers; may be NULL). Errors: TP_ERR_ARG (not a decode engine, or the cache would overflow),
 * TP_ERR_CUDA. */
tp_status tp_engine_set_past(tp_engine *e, int64_t past, tp_error *err);
tp_status tp_engine_feed_argmax(const tp_engine *from, tp_engine *to, tp_error *err);
tp_status tp_engine_decode(tp_engine *e, int steps, double *step_ms, float *tokens, tp_error *err);

/* The per-stage drift's values (issue 21): one eager forward pass over the current input that copies each tapped
 * value g->taps[k] (graph.h) to taps[k] as its producer writes it (fp32, the value's shape, E4M3 values times their
 * scale; NULL: not that one); a value no kernel writes in this engine (its producer's epilogue writes the next op's
 * output instead) reads as NaN. Errors: TP_ERR_UNSUPPORTED (a tensor-parallel engine), TP_ERR_OOM, TP_ERR_CUDA. */
tp_status tp_engine_capture(tp_engine *e, float *const *taps, tp_error *err);

/* Copies images (the graph input's shape, fp32, row-major) to the device. */
tp_status tp_engine_set_input(tp_engine *e, const float *images, tp_error *err);
/* Runs one forward pass and waits for it. */
tp_status tp_engine_forward(tp_engine *e, tp_error *err);
/* Copies the output (fp32, the graph output's shape) back to the host. */
tp_status tp_engine_get_output(tp_engine *e, float *out, tp_error *err);

/* Max calibration: runs one eager forward pass on the current input and raises amax[v] to max |value v| for
 * every v with want[v] set (amax is per graph value, host fp32, initialized by the caller). A call that never stores
 * the keys it appends to a KV cache (the rope+kv_append rule) runs unfused from then on: the cache's scale is
 * taken from them. */
tp_status tp_engine_calibrate(tp_engine *e, const int *want, float *amax, tp_error *err);

/* Max calibration (the FP8 recipe of issue 2): builds an FP16 engine of g on `device` (compute capability sm),
 * runs it on `images` (the graph input's shape) and writes amax[v] = max |value v| for every activation v
 * (0 for the others; n_values entries, host). A scale is then amax / 448 for E4M3. */
tp_status tp_calibrate_max(const tp_graph *g, const tp_params *params, int device, int sm, const float *images,
                           float *amax, tp_error *err);

#define TP_CALIB_BINS 2048

/* Calibration by method: max as tp_calibrate_max; percentile runs a second pass that histograms |value v| in
 * TP_CALIB_BINS bins over [0, max] and writes amax[v] = the p-th percentile (tp_hist_percentile, src/core/stats.h),
 * so the top (100 - p)% of magnitudes saturate in E4M3 instead of stretching the scale; entropy the same
 * histograms' KL-minimizing threshold (tp_calib_entropy_threshold, src/formats/qformat.h). Errors as
 * tp_calibrate_max, plus TP_ERR_ARG for p outside (0, 100]. */
tp_status tp_calibrate(const tp_graph *g, const tp_params *params, int device, int sm, const float *images,
                       const tp_calib_options *co, float *amax, tp_error *err);

/* Runs n forward passes back to back (graph launches, or eager), then waits: the profiled run. */
tp_status tp_engine_run_n(tp_engine *e, int n, tp_error *err);

/* Times the forward pass: warm-up for warmup_ms, then max(iterations, duration_ms / estimated time) runs,
 * each bracketed by CUDA events (GPU compute time per run, ms), all inside the NVTX range "BENCHMARK" (so
 * `ncu --nvtx --nvtx-include "BENCHMARK/"` and `nsys --capture-range=nvtx --nvtx-capture=BENCHMARK` see
 * exactly the timed runs). *samples (malloc'ed, caller frees) receives
 * one time per run; *wall_ms the time from the first start event to the last end event. */
tp_status tp_engine_benchmark(tp_engine *e, double warmup_ms, int iterations, double duration_ms, double **samples,
                              int *n, double *wall_ms, tp_error *err);

double tp_engine_weight_bytes(const tp_engine *e);     /* device bytes of parameters (+ scales) */
double tp_engine_activation_bytes(const tp_engine *e); /* device bytes of activations and scratch */

/* The FP32 reference on the GPU: runs g once on input (the graph input's shape, host fp32) and writes its output
 * (host fp32) with the plainest engine: an FP32 plan (policy fp32 everywhere), cuBLASLt's first FP32 algorithm
 * with FP32 accumulation (CUBLAS_COMPUTE_32F: no TF32), the CUDA-core attention (TP_ATTN_CLASSIC), no fused
 * epilogues, eager launches. It agrees with the CPU executor (fp64 accumulation) to relative L2 ~2e-6 on ViT-B/16
 * (test_gpu_engine checks <= 1e-5) and takes milliseconds where the CPU takes a minute for ViT-H. sm: the device's
 * compute capability x 10 (tp_gpu_query). Errors as tp_engine_build. */
tp_status tp_gpu_reference(const tp_graph *g, const tp_params *params, int sm, const float *input, float *output,
                           tp_error *err);
/* tp_gpu_reference, and the graph's tapped values (graph.h tp_tap) into taps[k] (fp32, the value's shape; NULL: not
 * that one) copied out during its one eager pass (tp_engine_capture). Errors as tp_gpu_reference. */
tp_status tp_gpu_reference_taps(const tp_graph *g, const tp_params *params, int sm, const float *input, float *output,
                                float *const *taps, tp_error *err);

#endif
