/* bench.h: running `tprof bench`, `profile`, `compare` and `build`: builds engines for one or more precisions on
 * the same model, weights and inputs, times them, checks each against the FP32 reference, and collects the
 * results. Writing them (the text summary, the JSON, the sweep table, the comparison report) is report/'s
 * (report/bench_report.h), reached through the writer hooks of tp_bench_options, so this module prints only
 * progress lines. Everything model-specific goes through the family interface (models/model.h). */
#ifndef TP_BENCH_H
#define TP_BENCH_H

#include <stdint.h>

#include <jansson.h>

#include "bench/drift.h"
#include "bench/progress.h"
#include "bench/sparse.h"
#include "core/stats.h"
#include "core/system.h"
#include "formats/qformat.h"
#include "models/model.h"
#include "planner/engine_file.h"
#include "planner/plan.h"
#include "profile/analysis.h"
#include "profile/roofline.h"
#include "profile/trace.h"
#include "tprof.h"

#define TP_MAX_PRECISIONS 8

typedef enum { TP_DEVICE_AUTO = 0, TP_DEVICE_GPU, TP_DEVICE_CPU } tp_device_kind;

/* Where the FP32 reference behind the accuracy figures runs (--reference). AUTO: the GPU when the run is on one
 * (an FP32 engine: FP32 GEMMs with FP32 accumulation, CUDA-core attention, no fusion; checked against the CPU
 * executor in the GPU tests), else the CPU executor (FP32 storage, FP64 accumulation). */
typedef enum { TP_REF_AUTO = 0, TP_REF_GPU, TP_REF_CPU, TP_REF_NONE } tp_reference_kind;

/* One precision's headline numbers from a run (tp_bench_options.rows_out), for a batch sweep's table. */
typedef struct {
    tp_precision prec;
    double median_ms, samples_s; /* samples/s: images/s for an image family */
    double tflops;      /* model FLOPs per batch / median time, TFLOP/s */
    double peak_tflops; /* the measured dense GEMM peak of prec on this GPU (gemm_peak.h); 0 when not measured */
    double mfu;         /* tflops / peak_tflops (model FLOP utilization); 0 when not measured */
    double floor_ms;    /* the engine's roofline floor per forward pass (profile/roofline.h); 0 when not known */
    double dec_ms, dec_floor_ms; /* decoders: the decode step's median and roofline floor (ms); 0 when not run */
} tp_bench_row;

typedef struct tp_bench_report tp_bench_report;

/* The writer's hooks (report/bench_report.h has the text one); each may be NULL. */
typedef struct {
    void (*start)(const tp_bench_report *r);                /* the run's header, before the reference */
    void (*plan)(const tp_bench_report *r, int i, const tp_plan *plan); /* --plan: engine i's plan */
    void (*result)(const tp_bench_report *r, int i);        /* engine i is done: its summary */
    /* every engine done: the comparison, the JSON, the report; an error (a file that cannot be written) fails the
     * run */
    tp_status (*end)(const tp_bench_report *r, tp_error *err);
} tp_bench_writer;

typedef struct {
    tp_model model;
    int batch;
    tp_precision precs[TP_MAX_PRECISIONS];
    int n_precs;
    double warmup_ms;    /* trtexec --warmUp: 200 ms */
    int iterations;      /* at least this many timed runs (trtexec --iterations: 10) */
    double duration_s;   /* and at least this long (trtexec --duration: 3 s) */
    tp_device_kind device;
    tp_reference_kind reference;
    const char *weights; /* safetensors path or NULL (synthesized from seed) */
    const char *onnx;    /* --onnx FILE: the model and weights were imported from it (models/onnx_import.h) */
    tp_params *onnx_params; /* the import's parameters, the caller's until a run takes them over
                               (tp_bench_onnx_params): one copy in memory; a sweep's later runs import the file again */
    const char *onnx_note;        /* one line: what the import recognized and how its check went */
    const struct tp_onnx_import_info_s *onnx_info; /* the import's findings: a Q/DQ file's linears and scales make
                                                      every engine's policy (explicit quantization, onnx_check.h) */
    const char *image;   /* input file or folder, or NULL (random inputs from seed) */
    const char *calib_data; /* --calib-data: the calibration batch's files (of the input's kind), or NULL (the
                               --image batch, else random inputs from seed + 1) */
    const char *perplexity; /* decoders: a token-id file whose perplexity each engine and the reference report */
    uint64_t seed;
    const char *json_path;
    int use_graph;
    int pipeline_mode;       /* --pipeline: 0 not given, 1 graph, 2 modular (tp_engine_options.modular), 3 eager */
    int attribution;         /* --attribution: bench/attribution.h's four runs instead of one */
    int gemm_first;      /* --no-gemm-select: cuBLASLt's first heuristic algorithm, no build-time timing */
    int cublaslt_only;   /* --gemm cublaslt: never tprof's own GEMM (tp_engine_options.cublaslt_only) */
    int fp8_promote;     /* --fp8-accum promote: FP8 GEMMs with fp32 promotion (tp_engine_options.fp8_promote) */
    int no_fusion;       /* --fusion off: tp_policy.no_fusion */
    int fp32_tensors;    /* --fp32-protect tensors: tp_policy.fp32_tensors */
    int sparsity;        /* --sparsity 2:4: the selected linears' weights pruned to 2:4 (bench/sparse.h) */
    const char *sparse_layers; /* --sparse-layers GLOBS (NULL: every linear) */
    int sparse_gemm;     /* --sparse-gemm: 0 auto (cuSPARSELt where faster at build), 1 force (every eligible linear),
                            2 off (the pruned weights run the dense GEMMs: the control for sparse's speed) */
    int gelu_tanh;       /* --gelu tanh: GELU as the tanh approximation in the fc1 epilogue (plan.h) */
    int kv_fp8;          /* --kv-cache fp8: a decoder's KV cache in E4M3, one calibrated scale per layer (plan.h) */
    int prefill_act_fp8; /* --prefill-activations fp8: fp8-wo's prefill as W8A8 FP8 GEMMs (the fp8 policy: static
                            per-tensor activation scales, calibrated), its decode weight-only on the same E4M3 weights */
    int ref_samples;     /* samples the reference runs for accuracy figures (<= batch) */
    int print_plan;      /* print the per-layer plan of each engine */
    int profile_iters;   /* tprof profile: forward passes traced with CUPTI after the timed ones (0: none) */
    int top_n;           /* rows of the top-kernel table */
    const char *out_dir; /* tprof profile: where the traces and summaries go (NULL: none written) */
    int compare;         /* tprof compare: also write the comparison report (report.md/.json/.html) to out_dir */
    const char *policy;      /* --policy "glob=prec,...": overrides added to each precision's default policy */
    const char *policy_file; /* --policy-file FILE: a whole policy (default format + overrides), JSON */
    const tp_engine_file *engine_file; /* --engine FILE (read by the caller): model, policy, weights as stored,
                                          calibration; model and precs must be the file's */
    const char *engine_path;
    const char *save_output; /* --save-output FILE: every precision's output (B, ...) fp32 as safetensors */
    tp_calib_options calib;  /* --calib max|percentile, --calib-percentile P: static activation scales */
    int attention;           /* --attention: a tp_attn_impl (exec/cuda/engine/cuda_engine.h), 0 = auto */
    int gemv_groups;         /* --gemv-groups off|on|auto: tp_engine_options.gemv_groups 0, 1 (the CLI's default), 2 */
    int decode_kernel;       /* --decode-kernel graph|persistent|auto: tp_engine_options.decode_kernel */
    int no_pdl;              /* --pdl off: tp_engine_options.no_pdl */
    int tp_parallel_launch;  /* --tp-launch threads: tp_engine_options.parallel_launch */
    int allow_nonfinite;     /* --allow-nonfinite: --weights with NaN or Inf values run (with a warning) */
    int strict;              /* --strict: a run past the model's limits (tp_model_limits) is an error, not a warning */
    int tp;                  /* --tp N: decoders split over GPUs 0..N-1 (tensor parallelism, tp_engine_build_tp);
                                0 or 1: one GPU */
    const char *command_line;
    /* Optional: the GPU's measured rates (profile/roofline.h: the GEMM peak per precision for MFU and the
     * roofline, the copy rate for the roofline); 0 entries are measured by the run (8192^3 cuBLASLt GEMMs, a
     * 256 MiB device-to-device copy; GPU only) and written back, so a batch sweep measures each once. NULL:
     * measured and kept inside the run. */
    tp_roofline_rates *rates_cache;
    tp_bench_row *rows_out; /* optional, n_precs rows: filled by a successful run */
    const tp_bench_writer *writer; /* optional: NULL prints nothing but progress */
} tp_bench_options;


/* An op's roofline inputs (profile/roofline.h), kept from its plan */
typedef struct {
    tp_precision prec;
    double matmul_flop, bytes;
} tp_op_cost;

/* One engine's results. */
typedef struct {
    tp_precision prec;
    int ok;
    double *samples; /* n timed runs, ms */
    int n;
    double wall_ms;
    tp_latency_stats lat;
    tp_accuracy acc;
    tp_precision mfu_prec; /* whose GEMM peak MFU divides by: prec, or fp8 for --prefill-activations fp8's prefill */
    tp_accuracy acc_wo;  /* --prefill-activations fp8: the weight-only prefill's accuracy (FP16 activations), for the
                            FP8 activations' cost; rows 0 when not measured */
    double weight_bytes, act_bytes;
    double build_ms;
    tp_phases build_phases; /* the build's steps (GPU: calibration, weights, selection, capture; tp_engine_options
                               on_phase), summing to about build_ms */
    int n_quant_ops, n_emulated_ops, n_ops; /* ops in the requested quantized format; of them emulated */
    double format_weight_bytes;             /* weights in their format (what an engine file stores) */
    json_t *plan;    /* per op: layer, op, precision, FLOP, bytes (the engine's on a GPU), how (owned) */
    char attn_impl[200]; /* the attention implementation the engine chose, with its build-time timings */
    char gelu_impl[240]; /* the first GEMM feeding a GELU: fused or not, with its build-time timings */
    tp_attn_cost *attn_cost; /* FP8 attention ops, in op order (owned; NULL when the engine runs none in FP8) */
    int n_attn_cost;
    tp_stage_drift *drift;    /* a pipeline on the GPU with a reference: its accuracy per stage (drift.h; owned) */
    int n_drift;
    tp_sparse_op_row *sparse; /* --sparsity on the GPU: one row per linear with a 2:4 weight (owned) */
    int n_sparse;
    json_t *profile; /* tprof profile: the kernel-level summary (owned) */
    float *output;   /* --save-output: a copy of the output (B, out_cols) fp32 */
    int has_prof;    /* trace and prof below are owned */
    double peak_tflops; /* measured dense GEMM peak of this precision (0: not measured) */
    tp_op_cost *cost;   /* per op of the plan: what its roofline floor needs (owned) */
    int n_cost;
    unsigned rate_mask; /* bit p: the floor needs the GEMM peak of tp_precision p (one gemm_peak.h can time) */
    tp_roofline_floor floor; /* the engine's roofline floor per forward pass (GPU runs) */
    tp_trace trace;
    tp_profile_summary prof;
    /* models with a KV cache (decoders): the timed runs above are the prefill of the prompt (TTFT); then greedy
     * decoding, `gen` steps of one token per sequence, each step one graph replay timed with CUDA events, over
     * `rounds` rounds (each a fresh prefill, then the steps) */
    int has_decode;
    int gen, rounds;
    double *step_ms;           /* rounds x gen, ms */
    tp_latency_stats dec;      /* over every step */
    float *tokens;             /* (gen, B) the first round's greedy tokens (fp32 integers) */
    double greedy_agree;       /* of the reference's rows: generated tokens equal to the FP32 reference's, up to
                                  each row's first difference; NAN when not checked */
    int first_diff;            /* the first step where a row differs from the reference; -1 none */
    int fwd_kernels, fwd_pdl_edges, fwd_edges; /* the forward pass's CUDA graph: its kernels, programmatic (PDL)
                                                  edges and all edges; 0 kernels: no graph (eager, the CPU) */
    int pdl_edges, graph_edges; /* the decode graph's programmatic (PDL) edges and all its edges; -1, 0: eager */
    int graph_kernels;          /* the decode graph's kernels (one step's launches); -1: eager */
    int dec_persistent;         /* the decode step ran as one persistent kernel (tp_engine_decode_kernel) */
    int dec_instrs;             /* its instructions (0 without a persistent step) */
    char dec_kernel_note[320];  /* which form ran the step and why */
    tp_op_cost *dec_cost;      /* per op of the decode graph (at the middle of the generation's context) */
    int n_dec_cost;
    tp_roofline_floor dec_floor; /* per decode step */
    double ppl;                /* --perplexity: the engine's perplexity over the file's windows (NAN: not run) */
    int has_dec_prof;          /* tprof profile: the decode steps traced (dec_trace, dec_prof owned) */
    tp_trace dec_trace;
    tp_profile_summary dec_prof;
    json_t *dec_profile;       /* its summary (owned) */
} tp_bench_result;

/* What the writers read: the run as a whole. Valid during the hooks. */
struct tp_bench_report {
    const tp_bench_options *o;
    tp_gpu_info gpu;
    tp_device_kind dev;      /* where the engines run */
    char device[300];        /* "NVIDIA H200 (sm_90)" or the CPU's name */
    tp_model model;          /* the model as it ran: o->model with its checkpoint's configuration applied */
    char model_desc[300];    /* tp_model_describe */
    tp_input_desc input;     /* tp_model_input */
    tp_output_desc output;   /* tp_model_output: logits (top-1 agreement meaningful) or features */
    char input_desc[600];    /* where the input came from */
    char calib_desc[640];    /* where the calibration batch came from (--calib-data, the input, or random) */
    char checkpoint_note[700]; /* what the checkpoint's own configuration said (tp_model_checkpoint); may be "" */
    const tp_graph *g;       /* the graph at the run's batch (with --tp: rank 0's, the per-GPU costs) */
    int tp;                  /* ranks (GPUs) each engine runs on: 1, or --tp */
    const tp_params *tp_params; /* --tp: every rank's parameters (tp_model_shard_params), tp entries */
    char tp_desc[600];       /* --tp: "NCCL 2.28.9 (...)", what joined the ranks */
    double flop, matmul_flop;
    int out_cols;            /* output values per sample */
    tp_reference_kind reference; /* where the reference ran (GPU, CPU or NONE) */
    int ref_rows;            /* samples the reference ran */
    double ref_ms;           /* the reference's time */
    tp_phases phases;        /* the run's phases so far: weights, the reference, each engine's build, timed runs,
                                decode and profile */
    double t_start;          /* when the run started (tp_now_ms) */
    tp_bench_result *res;
    int n_res;               /* engines done so far */
    int base;                /* speedups are against res[base] */
    const tp_roofline_rates *rates; /* measured rates (GPU only), NULL otherwise */
    int prompt, gen;         /* models with a KV cache: the prefill's tokens and the decode steps (0, 0 otherwise) */
    float *ref_tokens;       /* (gen, ref_rows) the FP32 reference's greedy tokens; NULL when not run */
    double ref_ppl;          /* --perplexity: the FP32 reference's (NAN: not run) */
    int ppl_windows, ppl_tokens; /* the windows of `prompt` tokens scored, and the tokens predicted in them */
    tp_sparse_summary sparse;    /* --sparsity: what was pruned (n_rows 0 otherwise) */
    int has_prune_cost;          /* the pruned model's FP32 reference against the dense one's, on ref_rows samples */
    tp_accuracy prune_cost;
    double host_need, host_have; /* the run's host memory as estimated before any allocation, and what was free */
    char host_parts[300];        /* the estimate's parts ("KV cache 8.6 GB for 65536 x 256 positions, ...") */
    char host_have_src[32];      /* where host_have came from ("MemAvailable", "the cgroup's limit") */
};

/* Runs the benchmark. Errors (one line in err): bad options (TP_ERR_ARG), unreadable or mismatching weights and
 * inputs (TP_ERR_IO, TP_ERR_FORMAT, TP_ERR_SHAPE), a precision the device cannot run (TP_ERR_UNSUPPORTED), no GPU
 * when --device gpu or --reference gpu (TP_ERR_NO_GPU), out of memory. */
tp_status tp_bench_run(const tp_bench_options *o, tp_error *err);

/* `tprof bench --batch 1,8,64,256`: tp_bench_run once per batch (o->batch ignored), the GEMM peaks measured once,
 * each run's JSON (when o->json_path is set) written to the path with "_b<batch>" before its extension; rows
 * (n_batches x n_precs, batch-major) receive each run's headline numbers. Errors as tp_bench_run (the first
 * failing batch's, naming it). */
tp_status tp_bench_sweep(const tp_bench_options *o, const int *batches, int n_batches, tp_bench_row *rows,
                         tp_error *err);

/* `tprof build -o FILE`: plans the model for o->precs[0] (one precision) on the GPU present, or on target sm
 * when there is none (sm 0: this GPU), calibrates on it when the plan needs static scales (a GPU is then
 * required), and writes the engine file (src/planner/engine_file.h). Prints the engine size. Errors as
 * tp_bench_run, plus TP_ERR_NO_GPU when calibration needs a GPU and there is none, TP_ERR_IO. */
tp_status tp_build_run(const tp_bench_options *o, const char *out_path, int sm, tp_error *err);

/* The parameters of --onnx into *out: moved from o->onnx_params while it holds them (the run mutates its own:
 * pruning, tensor-parallel shards), else imported from o->onnx again. Errors: the import's. */
tp_status tp_bench_onnx_params(const tp_bench_options *o, tp_params *out, tp_error *err);

/* --weights holding NaN or Inf values (tp_params_nonfinite): TP_ERR_FORMAT naming the first tensor and its count,
 * unless o->allow_nonfinite, which prints the same as a warning and returns TP_OK. */
tp_status tp_bench_check_finite(const tp_bench_options *o, const tp_params *p, tp_error *err);

/* The policy of one engine of precision prec: an engine file's as stored (its GELU form from o->gelu_tanh), else
 * the --policy-file's when its default is prec, else prec's default (patch embedding and head kept high for
 * quantized formats), plus the --policy overrides (planner/policy.h). Errors: the policy readers' (TP_ERR_IO,
 * TP_ERR_FORMAT, TP_ERR_ARG naming the rule). */
tp_status tp_bench_policy(const tp_bench_options *o, tp_precision prec, tp_policy *pol, tp_error *err);

/* Where the reference runs for a run on dev: o->reference resolved (AUTO: GPU on a GPU run, else CPU). */
tp_reference_kind tp_bench_reference(tp_reference_kind asked, tp_device_kind dev);

#endif
