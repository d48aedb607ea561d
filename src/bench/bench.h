/* bench.h: `tprof bench`: builds engines for one or more precisions on the same model, weights and inputs,
 * times them, checks each against the FP32 CPU reference, and reports in trtexec's vocabulary. */
#ifndef TP_BENCH_H
#define TP_BENCH_H

#include <stdint.h>

#include "formats/qformat.h"
#include "io/engine_file.h"
#include "models/vit.h"
#include "profile/roofline.h"
#include "tprof.h"

#define TP_MAX_PRECISIONS 8

typedef enum { TP_DEVICE_AUTO = 0, TP_DEVICE_GPU, TP_DEVICE_CPU } tp_device_kind;

/* One precision's headline numbers from a run (tp_bench_options.rows_out), for a batch sweep's table. */
typedef struct {
    tp_precision prec;
    double median_ms, images_s;
    double tflops;      /* model FLOPs per batch / median time, TFLOP/s */
    double peak_tflops; /* the measured dense GEMM peak of prec on this GPU (gemm_peak.h); 0 when not measured */
    double mfu;         /* tflops / peak_tflops (model FLOP utilization); 0 when not measured */
    double floor_ms;    /* the engine's roofline floor per forward pass (profile/roofline.h); 0 when not known */
} tp_bench_row;

typedef struct {
    tp_vit_config cfg;
    int batch;
    tp_precision precs[TP_MAX_PRECISIONS];
    int n_precs;
    double warmup_ms;    /* trtexec --warmUp: 200 ms */
    int iterations;      /* at least this many timed runs (trtexec --iterations: 10) */
    double duration_s;   /* and at least this long (trtexec --duration: 3 s) */
    tp_device_kind device;
    const char *weights; /* safetensors path or NULL (synthesized from seed) */
    const char *image;   /* image file or folder, or NULL (random inputs from seed) */
    uint64_t seed;
    const char *json_path;
    int use_graph;
    int gemm_first;      /* --no-gemm-select: cuBLASLt's first heuristic algorithm, no build-time timing */
    int cublaslt_only;   /* --gemm cublaslt: never tprof's own GEMM (tp_engine_options.cublaslt_only) */
    int fp8_promote;     /* --fp8-accum promote: FP8 GEMMs with fp32 promotion (tp_engine_options.fp8_promote) */
    int gelu_tanh;       /* --gelu tanh: GELU as the tanh approximation in the fc1 epilogue (plan.h) */
    int ref_images;      /* images the CPU reference runs for accuracy figures (<= batch) */
    int print_plan;      /* print the per-layer plan of each engine */
    int profile_iters;   /* tprof profile: forward passes traced with CUPTI after the timed ones (0: none) */
    int top_n;           /* rows of the top-kernel table */
    const char *out_dir; /* tprof profile: where the traces and summaries go (NULL: none written) */
    int compare;         /* tprof compare: also write the comparison report (report.md/.json/.html) to out_dir */
    const char *policy;      /* --policy "glob=prec,...": overrides added to each precision's default policy */
    const char *policy_file; /* --policy-file FILE: a whole policy (default format + overrides), JSON */
    const tp_engine_file *engine_file; /* --engine FILE (read by the caller): model, policy, weights as stored,
                                          calibration; cfg and precs must be the file's */
    const char *engine_path;
    const char *save_output; /* --save-output FILE: every precision's logits (B, classes) fp32 as safetensors */
    tp_calib_options calib;  /* --calib max|percentile, --calib-percentile P: static activation scales */
    int attention;           /* --attention: a tp_attn_impl (exec/cuda/cuda_engine.h), 0 = auto */
    const char *command_line;
    /* Optional: the GPU's measured rates (profile/roofline.h: the GEMM peak per precision for MFU and the
     * roofline, the copy rate for the roofline); 0 entries are measured by the run (8192^3 cuBLASLt GEMMs, a
     * 256 MiB device-to-device copy; GPU only) and written back, so a batch sweep measures each once. NULL:
     * measured and kept inside the run. */
    tp_roofline_rates *rates_cache;
    tp_bench_row *rows_out; /* optional, n_precs rows: filled by a successful run */
} tp_bench_options;

/* Runs the benchmark and prints the report to stdout. Errors (one line in err): bad options (TP_ERR_ARG),
 * unreadable or mismatching weights and images (TP_ERR_IO, TP_ERR_FORMAT, TP_ERR_SHAPE), a precision the
 * device cannot run (TP_ERR_UNSUPPORTED), no GPU when --device gpu (TP_ERR_NO_GPU), out of memory. */
tp_status tp_bench_run(const tp_bench_options *o, tp_error *err);

/* `tprof bench --batch 1,8,64,256`: tp_bench_run once per batch (o->batch ignored), the GEMM peaks measured once,
 * each run's JSON (when o->json_path is set) written to the path with "_b<batch>" before its extension, then one
 * table: batch x precision, median ms, images/s, TFLOP/s, MFU. Errors as tp_bench_run (the first failing batch's,
 * naming it). */
tp_status tp_bench_sweep(const tp_bench_options *o, const int *batches, int n_batches, tp_error *err);

/* `tprof build -o FILE`: plans the model for o->precs[0] (one precision) on the GPU present, or on target sm
 * when there is none (sm 0: this GPU), calibrates on it when the plan needs static scales (a GPU is then
 * required), and writes the engine file (src/io/engine_file.h). Prints the engine size. Errors as
 * tp_bench_run, plus TP_ERR_NO_GPU when calibration needs a GPU and there is none, TP_ERR_IO. */
tp_status tp_build_run(const tp_bench_options *o, const char *out_path, int sm, tp_error *err);

#endif
