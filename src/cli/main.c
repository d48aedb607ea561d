/* tprof command line. `tprof bench` is the main job; `tprof models` lists the presets. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/attribution.h"
#include "bench/bench.h"
#include "bench/onnx_check.h"
#include "cli/diff_cmd.h"
#include "cli/inspect.h"
#include "cli/model_arg.h"
#include "cli/sweep_gpus.h"
#include "core/files.h"
#include "core/util.h"
#include "io/onnx.h"
#include "lint/lint.h"
#include "models/model.h"
#include "models/onnx_import.h"
#include "planner/caps.h"
#include "planner/engine_file.h"
#include "planner/policy.h"
#include "report/bench_report.h"
#include "tp_build_info.h"
#ifdef TPROF_HAVE_CUDA
#include "exec/cuda/engine/cuda_engine.h"
#endif

static void usage_knobs(FILE *f);
static char *opt_split(char *a, char name[64]);
static char *opt_value(const char *name, char *val, int argc, char **argv, int *i);

/* The option blocks, shared by the global help and each command's (tprof CMD --help). */
static const char USAGE_BENCH[] =
    "bench options (trtexec's spirit):\n"
            "  --model NAME|PATH|ID  a preset: timm name or alias (vit-b16 = vit_base_patch16_224), `tprof models`;\n"
            "                        or the model as you have it: a checkpoint folder or .safetensors (its HF or\n"
            "                        timm config.json tells the model), an .onnx file, an engine file, a model\n"
            "                        description (JSON, any name), or a Hugging Face id (ORG/NAME) in the local hub\n"
            "                        cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub; never downloaded).\n"
            "                        A preset wins over a same-named path: write ./NAME for the path\n"
            "  --batch N[,N...]      samples per forward pass: images, or sequences for decoders (default 64 on GPU,\n"
            "                        1 on CPU); a list runs a sweep\n"
            "                        (tprof bench): one run per size, then images/s, TFLOP/s and MFU per size\n"
            "%s" /* --precision LIST: the names of the format table (usage_bench) */
            "                        (-wo: weight-only, fp16 activations, for decoding) (default fp16,fp8 on\n"
            "                        GPU; fp32 on CPU)\n"
            "  --warmup MS           warm-up time before timing (default 200)\n"
            "  --iterations N        at least N timed runs (default 10 on GPU, 3 on CPU)\n"
            "  --duration S          and at least S seconds of timed runs (default 3 on GPU, 0 on CPU)\n"
            "  --device gpu|cpu      where to run (default: the GPU if there is one)\n"
            "  --weights FILE        checkpoint as .safetensors, the reference's tensor names (default: synthesized);\n"
            "                        its config.json beside it (timm's HF hub layout) sets the preprocessing;\n"
            "                        without --model, transformers' config.json there names the model\n"
            "  --onnx FILE           the model and its weights from an ONNX file (a timm ViT export, FP32 or Q/DQ;\n"
            "                        a Llama-style decoder from transformers: docs/onnx.md), instead of --model and\n"
            "                        --weights; checked against the file's own graph on the CPU at batch 1 first\n"
            "  --onnx-check on|off   that check (default on; off: the mapping is not verified, and the output says so)\n"
            "  --shapes NAME:DIMS    the ONNX input's shape as trtexec takes it (input:64x3x224x224; token ids:\n"
            "                        input_ids:1x512): its batch (and a decoder's prompt length) for the run\n"
            "  --image PATH          image file or folder (PNG/JPEG/BMP), the model's preprocessing (default: random)\n"
            "  --tokens FILE         decoders: the prompt's token ids, whitespace-separated integers (default: random)\n"
            "  --perplexity FILE     decoders: each engine's and the FP32 reference's perplexity over FILE's token ids\n"
            "                        (up to 8 windows of --prompt tokens)\n"
            "  --gemv-groups off|on|auto  decoders at batch 1: q/k/v and gate/up each as one GEMV over their\n"
            "                        concatenated weights: off, on (default), or where it times faster at build;\n"
            "                        the layout also lets FP8 prefills and pipelines run them as one GEMM each\n"
            "  --decode-kernel graph|persistent|auto  decoders: each decode step as a CUDA graph of one kernel per\n"
            "                        call (graph, the default), as one persistent kernel running the step's\n"
            "                        instruction stream (persistent: batch 1-8, FP16/BF16/fp8-wo/fp8, sm_90+; docs/persistent.md),\n"
            "                        or both timed at build and the faster kept (auto)\n"
            "  --kv-cache auto|fp8   decoders: the KV cache in the activation type (auto), or in E4M3 with one\n"
            "                        calibrated scale per layer (fp8: half the cache bytes; 16-bit engines, sm_89+)\n"
            "  --prefill-activations fp16|fp8  decoders in fp8-wo: the prefill's activations in FP16 (weight-only,\n"
            "                        the default) or quantized to FP8 (W8A8 GEMMs on the FP8 tensor cores, static\n"
            "                        calibrated scales; the decode stays weight-only); the accuracy of both shown\n"
            "  --pdl on|off          kernels overlap their predecessors in the CUDA graph (programmatic dependent\n"
            "                        launch: the decode kernels, tprof's GEMMs and attention, the pipelines'\n"
            "                        elementwise kernels; default on); off: one after another in the graph\n"
            "                        (eager launches, --no-graph, keep it)\n"
            "  --tp N                decoders: tensor parallelism over GPUs 0..N-1 (heads and MLP columns split,\n"
            "                        NCCL all-reduces inside each GPU's CUDA graph); default 1\n"
            "  --tp-launch serial|threads  the GPUs' graph replays launched one after the other (default) or\n"
            "                        from one host thread per GPU\n"
            "  --gpus LIST           a sweep's batch sizes dealt over these GPUs (e.g. 0,1), one process each\n"
            "  --seed N              seed for synthesized weights and inputs (default 0)\n"
            "  --allow-nonfinite     run --weights holding NaN or Inf values (refused by default, with the tensor)\n"
            "  --strict              decoders: --prompt + --gen above max_position_embeddings is an error (exit 2)\n"
            "  --reference gpu|cpu|none  where the FP32 reference behind the accuracy figures runs (default: the GPU\n"
            "                        on a GPU run: an FP32 engine with FP32 accumulation and plain kernels; else the\n"
            "                        CPU executor); none skips the accuracy check\n"
            "  --ref-samples N       samples the FP32 reference checks (default min(batch, 8)); --ref-images: the same\n"
            "  --json FILE           write every sample, the configuration and the system to FILE\n"
            "  --no-graph            launch kernels one by one instead of one CUDA graph\n"
            "  --sparsity 2:4        prune the linears' weights to 2:4 along K by magnitude (weights already 2:4 kept),\n"
            "                        report what pruning costs against the dense FP32 model; --sparse-layers GLOBS\n"
            "                        (comma list, default *) chooses the layers; --sparse-gemm auto|force|off: the\n"
            "                        cuSPARSELt GEMMs where faster at build (auto), always, or never (the pruned\n"
            "                        weights dense: the control)\n"
            "  --fusion on|off       off: every op its own kernel (no residual add, GELU or token step in a GEMM's\n"
            "                        epilogue, no RoPE + KV append in one), to measure what fusion saves (default on)\n"
            "  --fp32-protect regs|tensors  RMSNorm and RoPE: FP32 math in registers between 16-bit tensors (regs,\n"
            "                        default), or as FP32 layers the way TensorRT pins a layer to FP32: input cast to\n"
            "                        fp32, the op fp32 in and out, output cast back (tensors); what each costs\n"
            "  --attribution         pipelines: four runs, from the first --precision (default bf16) modular without\n"
            "                        fusion to the second (default fp8) in one graph with fusion, one change at a\n"
            "                        time, and each change's share of the speed-up\n"
            "  --pipeline MODE       pipelines: graph (default: every stage and step in one CUDA graph), modular\n"
            "                        (a graph per stage, the host waiting between them, handoff copies), eager\n"
            "  --gelu erf|tanh       erf (default): the model's exact GELU (its own kernel, or in the epilogue of\n"
            "                        tprof's GEMM, see --gemm); tanh: the tanh\n"
            "                        approximation in the epilogue of the GEMM before it (cuBLASLt's GELU;\n"
            "                        differs from erf by up to 4.7e-4), no GELU kernel; labelled in --plan\n"
            "  --no-gemm-select      run cuBLASLt's first heuristic algorithm for each GEMM instead of timing\n"
            "                        its candidates when the engine is built and keeping the fastest\n"
            "  --gemm auto|cublaslt  auto (default): on sm_90 also time tprof's GEMM with the exact GELU in its\n"
            "                        epilogue against cuBLASLt + the GELU kernel, and for the other FP8 GEMMs\n"
            "                        (bias, residual; no fp32 promotion) against cuBLASLt, and keep the faster;\n"
            "                        cublaslt: cuBLASLt only\n"
            "  --fp8-accum fast|promote  per-tensor FP8 GEMMs: fast (default): accumulate in the tensor cores\n"
            "                        without periodic fp32 promotion (cuBLASLt FAST_ACCUM, tprof's FP8 GEMM), as\n"
            "                        Transformer Engine's forward GEMMs; promote: cuBLASLt with its fp32 promotion\n"
            "                        (FAST_ACCUM off; 10-17%% slower on an H200, about half the accumulation error)\n"
            "  --plan                print the per-layer plan: precision, FLOP, bytes, and why\n"
            "  --save-output FILE    write each precision's output (batch, classes) fp32 to FILE (safetensors)\n"
            "  --policy SPEC         per-layer precision overrides, later rules win, e.g.\n"
            "                        'blocks.0.*=bf16,head=fp16' (quantized formats keep patch_embed.proj and head\n"
            "                        high by default)\n"
            "  --policy-file FILE    a policy as JSON: {\"default\": \"nvfp4\", \"overrides\": [{\"layers\": \"head\",\n"
            "                        \"precision\": \"fp16\"}]}, for the precision it names: without --precision\n"
            "                        the run's; a --precision list must hold it (the others run their default)\n"
            "  --calib max|percentile|entropy  static activation scales (fp8, nvfp4's per-tensor scale) from\n"
            "                        max |x| (default), a percentile of |x|, or the threshold of least KL\n"
            "                        divergence on E4M3's grid, over the calibration batch\n"
            "  --calib-percentile P  the percentile (default 99.99; implies --calib percentile)\n"
            "  --calib-data PATH     calibrate on these files (images: a file or folder; decoders: token ids),\n"
            "                        apart from the data timed (default: the --image batch, else random)\n"
            "  --attention IMPL      auto (default: time tprof's flash kernels (mma.sync; wgmma on sm_90) and\n"
            "                        cuDNN's SDPA when the engine is built, keep the fastest; pi0's masked\n"
            "                        attention: tprof's flash kernel against cuBLASLt GEMMs), flash, wgmma,\n"
            "                        cudnn (loaded at run time), classic\n";
static const char USAGE_PROFILE[] =
    "profile options (besides the bench options):\n"
            "  --profile-iters N     forward passes traced after the timed ones (default 20)\n"
            "  --top N               rows in the top-kernel table (default 15)\n"
            "  --out DIR             where <precision>.trace.json, .chrome.json, .profile.json go (profile: tprof-profile;\n"
            "                        compare: tprof-report, with report.md, report.html, report.json)\n";
static const char USAGE_LINT[] =
    "lint options: --model NAME|PATH|ID (as bench takes it: a preset, a checkpoint, a hub id, an ONNX or engine\n"
            "  file, a description) and the model knobs, --json FILE, --precision LIST (default mxfp8,nvfp4;\n"
            "  any of fp32,fp16,bf16,fp8,fp8-block,mxfp8,nvfp4,mxfp4); exit 0: every format usable as asked,\n"
            "  1: one is not, 2: a bad option or model (one not found, or of a family lint does not read), 3: the\n"
            "  JSON file cannot be written\n";

/* USAGE_BENCH with its --precision line listing every precision of the format table (dtype.h), in its order */
static void usage_bench(FILE *f) {
    char line[256];
    int n = snprintf(line, sizeof line, "  --precision LIST      comma list of ");
    for (int i = 0; i < TP_PREC_COUNT && n < (int)sizeof line; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s%s", i ? "," : "", tp_precision_name((tp_precision)i));
    if (n < (int)sizeof line) snprintf(line + n, sizeof line - (size_t)n, "\n");
    fprintf(f, USAGE_BENCH, line);
}

static void usage(FILE *f) {
    fprintf(f,
            "tprof %s: build, run and profile transformer inference engines\n"
            "\n"
            "usage: tprof bench [options]     time a model on the GPU (or CPU) in one or more precisions\n"
            "       tprof profile [options]   bench, then trace the kernels with CUPTI: per-kernel, per-category and\n"
            "                                 per-layer tables, a Chrome trace of one forward pass (GPU only)\n"
            "       tprof compare [options]   profile several precisions and write one report (Markdown, JSON,\n"
            "                                 HTML with SVG charts): breakdown, coverage, Amdahl bound vs measured\n"
            "       tprof build [options] -o FILE.tpe [--arch sm_XX]\n"
            "                                 plan, quantize (and on the GPU calibrate and time the GEMMs) once;\n"
            "                                 write an engine file\n"
            "       tprof bench --engine FILE.tpe   run an engine file (model, precision, weights as stored)\n"
            "       tprof caps [--arch sm_XX] which precision runs native, emulated or not at all on a GPU\n"
            "       tprof lint [options]      check a model's shapes against each quantized format's rules for\n"
            "                                 attention and GEMMs (block sizes, alignment), with fixes; no GPU\n"
            "       tprof models              list the model presets\n"
            "       tprof inspect FILE.onnx   what tprof reads in an ONNX file (shapes, initializers, op types)\n"
            "       tprof diff A.json B.json [...]  runs compared (commits, GPUs, settings): ratios beyond noise,\n"
            "                                 the layers and kernels that changed; --fail-above PCT gates on it\n"
            "       tprof --version\n"
            "\n",
            TPROF_VERSION);
    usage_bench(f);
    fputs(USAGE_PROFILE, f);
    fputs(USAGE_LINT, f);
    usage_knobs(f);
    fprintf(f, "\nWith no options: ViT-B/16 at 224, batch 64, fp16 and fp8 on the GPU; without a GPU, vit-tiny at batch 1\n"
               "in fp32 on the CPU.\n");
}

/* tprof CMD --help: what the command does, an example, its own options (0: printed; -1: not a command). */
static int usage_command(const char *cmd, FILE *f) {
    static const struct {
        const char *cmd, *what, *example;
        int bench, profile, lint, knobs;
    } C[] = {
        {"bench", "time a model in one or more precisions on the GPU (or the CPU): trtexec's statistics, accuracy "
                  "against FP32, TFLOP/s, MFU, the roofline floor; decoders add prefill and decode (pp/tg)",
         "tprof bench --model vit-b16 --batch 64 --precision fp16,fp8 --plan\n"
         "  tprof bench --model llama-3.2-1b --prompt 512 --gen 128 --batch 1,8 --precision fp16,fp8-wo", 1, 0, 0, 1},
        {"profile", "bench, then trace the kernels with CUPTI: per-kernel, per-category and per-layer tables with "
                    "each op's roofline floor, a Chrome trace (GPU only); decoders add traced decode steps",
         "tprof profile --model vit-b16 --batch 64 --precision fp16,fp8 --out prof", 1, 1, 0, 1},
        {"compare", "profile several precisions and write one report (Markdown, JSON, HTML with SVG charts): "
                    "breakdown, roofline, coverage, Amdahl bound against measured, recommendations (GPU only)",
         "tprof compare --model vit-b16 --batch 64 --precision fp16,bf16,fp8 --out report", 1, 1, 0, 1},
        {"build", "plan and quantize once (on a GPU also calibrate and time the GEMMs) and write an engine file "
                  "that tprof bench --engine runs; -o FILE.tpe is required, --arch sm_XX without a GPU",
         "tprof build --model vit-b16 --batch 64 --precision fp8 -o vit-b16-fp8.tpe", 1, 0, 0, 1},
        {"caps", "which precision runs native, emulated or not at all on a GPU architecture, with what it costs; "
                 "options: --arch sm_XX (default: this machine's GPU)",
         "tprof caps --arch sm_100", 0, 0, 0, 0},
        {"lint", "check a model's shapes against each quantized format's rules for attention and GEMMs (block "
                 "sizes, alignment) and print the fixes; no GPU",
         "tprof lint --model vit-b16 --precision mxfp8,nvfp4", 0, 0, 1, 1},
        {"diff", "compare runs across commits, GPUs and settings from the JSON of bench, profile or compare: "
                 "medians and spread, ratio, whether it exceeds the noise (Mann-Whitney U, bootstrap interval), "
                 "floors, what differs, the layers and kernels that changed; the first file is the baseline.\n"
                 "options: --format md|csv|json (default md), --out FILE, --html FILE (with SVG charts), --top N "
                 "(rows per profile table, default 10), --fail-above PCT (exit 1 when a result got slower by more "
                 "than PCT % beyond the noise)",
         "tprof diff before.json after.json --html diff.html --fail-above 2", 0, 0, 0, 0},
        {"models", "list the model presets of every family (name, alias, GFLOP, shape); no options",
         "tprof models", 0, 0, 0, 0},
        {"inspect", "read an ONNX file as tprof reads it, with its checks: IR version, opsets, inputs and outputs "
                    "with their shapes, initializers by element type (external ones too), nodes by op type; no "
                    "options (running ONNX models is issue 24's next step)",
         "tprof inspect model.onnx", 0, 0, 0, 0},
    };
    for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
        if (strcmp(cmd, C[k].cmd) != 0) continue;
        fprintf(f, "tprof %s: %s\n\nexample:\n  %s\n\n", C[k].cmd, C[k].what, C[k].example);
        if (C[k].profile) fputs(USAGE_PROFILE, f);
        if (C[k].bench) usage_bench(f);
        if (C[k].lint) fputs(USAGE_LINT, f);
        if (C[k].knobs) usage_knobs(f);
        return 0;
    }
    return -1;
}

/* Each family's knobs, from its table */
static void usage_knobs(FILE *f) {
    for (const tp_family *const *fam = tp_families(); *fam; fam++) {
        fprintf(f, "model knobs of the %s family (%s; override the preset):\n", (*fam)->name, (*fam)->title);
        for (const tp_knob *k = (*fam)->knobs; k->name; k++) {
            char lhs[64];
            snprintf(lhs, sizeof lhs, "%s%s%s", k->name, k->arg ? " " : "", k->arg ? k->arg : "");
            fprintf(f, "  %-22s%s%s\n", lhs, strlen(lhs) >= 22 ? "\n                        " : "", k->help);
        }
    }
}

static int parse_int(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "tprof: %s '%s': expected an integer in [%ld, %ld]\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_double(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "tprof: %s '%s': expected a number in [%g, %g]\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int have_gpu(char *why, size_t n) {
#ifdef TPROF_HAVE_CUDA
    tp_gpu_info info;
    tp_error e = {0};
    if (tp_gpu_query(0, &info, &e) == TP_OK) return 1;
    snprintf(why, n, "%s", e.msg);
#else
    snprintf(why, n, "this tprof was built without CUDA");
#endif
    return 0;
}

/* tprof caps: the capability table for this GPU, or for --arch. */
static int cmd_caps(int argc, char **argv) {
    int sm = 0;
    char gpu[300] = "";
    for (int i = 0; i < argc; i++) {
        char name[64];
        char *val = opt_split(argv[i], name);
        if (strcmp(name, "--arch") == 0) {
            tp_error e;
            if (!(val = opt_value(name, val, argc, argv, &i))) return 2;
            if (tp_caps_parse_arch(val, &sm, &e)) {
                fprintf(stderr, "tprof: --arch: %s\n", e.msg);
                return 2;
            }
        } else {
            fprintf(stderr, "tprof: caps: %s '%s' (tprof caps [--arch sm_XX])\n",
                    argv[i][0] == '-' ? "unknown option" : "unexpected argument", argv[i]);
            return 2;
        }
    }
    if (!sm) {
#ifdef TPROF_HAVE_CUDA
        tp_gpu_info info;
        tp_error e;
        if (tp_gpu_query(0, &info, &e) == TP_OK) {
            sm = info.sm;
            snprintf(gpu, sizeof gpu, "%s", info.name);
        }
#endif
        if (!sm) {
            fprintf(stderr, "tprof: caps: no GPU here; name one with --arch sm_XX (e.g. sm_90, sm_100, sm_120)\n");
            return 2;
        }
    }
    if (gpu[0]) printf("GPU: %s\n", gpu);
    tp_caps_print(sm, stdout);
    return 0;
}

static int cmd_models(int argc, char **argv) {
    if (argc > 0) { /* a typo must not pass for the listing it did not change */
        fprintf(stderr, "tprof: models: %s '%s': the command takes none (tprof models)\n",
                argv[0][0] == '-' ? "unknown option" : "unexpected argument", argv[0]);
        return 2;
    }
    printf("%-8s %-24s %-14s %8s  %s\n", "family", "name", "alias", "GFLOP", "shape");
    for (const tp_family *const *fam = tp_families(); *fam; fam++)
        for (int i = 0; i < (*fam)->preset_count(); i++) {
            const char *name, *alias;
            (*fam)->preset_info(i, &name, &alias);
            tp_model m;
            tp_error e;
            tp_params params = {0};
            tp_graph g;
            double gf = 0;
            char desc[300] = "";
            if (tp_model_preset(name, &m, &e) == TP_OK && tp_model_params_shapes(&m, &params, &e) == TP_OK &&
                tp_model_build_graph(&m, &params, 1, &g, &e) == TP_OK) {
                gf = tp_graph_matmul_flop(&g) * 1e-9;
                tp_graph_free(&g);
                tp_model_describe(&m, desc, sizeof desc);
            }
            tp_params_free(&params);
            printf("%-8s %-24s %-14s %8.2f  %s\n", (*fam)->name, name, alias, gf, desc);
        }
    printf("(GFLOP: matrix products per sample, 2 FLOP per multiply-add)\n");
    return 0;
}

/* "--opt=value" -> name "--opt", returns "value"; "--opt" -> name "--opt", returns NULL. */
static char *opt_split(char *a, char name[64]) {
    snprintf(name, 64, "%s", a);
    char *eq = strchr(name, '=');
    if (!eq) return NULL;
    *eq = 0;
    return a + (eq - name) + 1;
}

/* The option's value: val when it came with '=', else the next argument (*i advances); NULL after printing
 * the error when there is none. */
static char *opt_value(const char *name, char *val, int argc, char **argv, int *i) {
    if (val) return val;
    if (*i + 1 >= argc) {
        fprintf(stderr, "tprof: option %s needs a value\n", name);
        return NULL;
    }
    return argv[++*i];
}

/* An option with two values: *out = 0 for v0, 1 for v1; -1 after printing "tprof: NAME: unknown KIND 'VAL'
 * (expected V0 or V1)" for anything else. */
static int two_way(const char *name, const char *val, const char *kind, const char *v0, const char *v1, int *out) {
    if (strcmp(val, v0) == 0 || strcmp(val, v1) == 0) {
        *out = strcmp(val, v1) == 0;
        return 0;
    }
    fprintf(stderr, "tprof: %s: unknown %s '%s' (expected %s or %s)\n", name, kind, val, v0, v1);
    return -1;
}

/* Model knobs as given, applied once the model is known (the knobs may come before --model). */
#define MAX_KNOBS 32
typedef struct {
    int n;
    const char *name[MAX_KNOBS], *val[MAX_KNOBS];
} knobs;

/* The knob table entry of some family named name, or NULL. */
static const tp_knob *find_knob(const char *name) {
    for (const tp_family *const *fam = tp_families(); *fam; fam++)
        for (const tp_knob *k = (*fam)->knobs; k->name; k++)
            if (strcmp(k->name, name) == 0) return k;
    return NULL;
}

/* Returns 1 when name is a knob of some family (kept in k, its value from val or the next argument), 0 when it
 * is not one, -1 after printing a one-line error. */
static int parse_knob(const char *name, char *val, int argc, char **argv, int *i, knobs *k) {
    const tp_knob *kn = find_knob(name);
    if (!kn) return 0;
    if (kn->arg && !(val = opt_value(name, val, argc, argv, i))) return -1;
    if (!kn->arg && val) {
        fprintf(stderr, "tprof: %s takes no value\n", name);
        return -1;
    }
    if (k->n == MAX_KNOBS) {
        fprintf(stderr, "tprof: at most %d model knobs\n", MAX_KNOBS);
        return -1;
    }
    k->name[k->n] = kn->name;
    k->val[k->n++] = kn->arg ? val : NULL;
    return 1;
}

/* Applies the knobs to the model through its family; -1 after printing the error. */
static int apply_knobs(const knobs *k, tp_model *m) {
    for (int i = 0; i < k->n; i++) {
        tp_error e = {0};
        int r = tp_model_knob(m, k->name[i], k->val[i], &e);
        if (r < 0) {
            fprintf(stderr, "tprof: %s\n", e.msg);
            return -1;
        }
        if (r == 0) {
            fprintf(stderr, "tprof: %s is not a knob of the %s family (model %s)\n", k->name[i], m->family->name,
                    tp_model_name(m));
            return -1;
        }
    }
    return 0;
}

/* The exit status of a failed run, by class (README, Exit codes): 2 usage (a bad option or value), 3 input (a
 * file missing, unreadable or malformed, tensors that do not fit the model), 4 unsupported (a combination this
 * build, format or GPU cannot run), 5 out of memory (host or GPU), 6 runtime (CUDA or a library failed, no GPU). */
static int exit_code(tp_status st) {
    switch (st) {
    case TP_OK: return 0;
    case TP_ERR_ARG: return 2;
    case TP_ERR_IO:
    case TP_ERR_FORMAT:
    case TP_ERR_SHAPE: return 3;
    case TP_ERR_UNSUPPORTED: return 4;
    case TP_ERR_OOM: return 5;
    default: return 6;
    }
}

/* A comma list of at most max precisions into out; the count, or -1 after printing the error. */
static int parse_precisions(const char *prec, tp_precision *out, int max) {
    char pbuf[256];
    snprintf(pbuf, sizeof pbuf, "%s", prec);
    char *parts[TP_PREC_COUNT + 1];
    if (max > TP_PREC_COUNT) max = TP_PREC_COUNT; /* parts' size; a longer list would repeat a precision */
    int np = tp_split_commas(pbuf, parts, max + 1);
    if (np == 0 || np > max) {
        fprintf(stderr, "tprof: --precision '%s': give 1 to %d precisions\n", prec, max);
        return -1;
    }
    tp_error err = {0};
    for (int i = 0; i < np; i++) {
        if (tp_precision_parse(parts[i], &out[i], &err)) {
            fprintf(stderr, "tprof: --precision: %s\n", err.msg);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (out[j] == out[i]) { /* it would run twice and be compared with itself */
                fprintf(stderr, "tprof: --precision '%s': %s given twice\n", prec, tp_precision_name(out[i]));
                return -1;
            }
    }
    return np;
}

/* `tprof bench`, `profile`, `compare` and `build` share every option; profile adds the traced run and its
 * artifacts, build the engine file. What the command line gave, before defaults: */
enum { MAX_BATCHES = 16 };
typedef struct {
    int profile, compare, build; /* the command */
    tp_bench_options o;
    int onnx_nocheck;             /* --onnx-check off */
    const char *shapes;           /* --shapes NAME:D0xD1x...: the ONNX input's shape (trtexec's syntax) */
    tp_params onnx_params;        /* --onnx: the import's parameters */
    tp_onnx_import_info *onnx_info;
    char onnx_note[1024];
    const char *out_file, *engine, *out_dir, *model, *prec;
    const char *input_opt; /* --image or --tokens: which one gave o.image (a model's input files, of its kind) */
    int arch;
    long prof_iters, top, batch, iters, seed, ref;
    long batches[MAX_BATCHES];
    int n_batches;
    long gpus[MAX_BATCHES]; /* --gpus: the GPUs a sweep's runs are spread over */
    int n_gpus;
    long rows_fd;           /* --rows-fd=N (internal, sweep_gpus.c): a sweep's rows to this fd; -1 none */
    double warm, dur;
    knobs k;
    tp_model_arg marg;  /* what --model named (cli/model_arg.h) */
    tp_model ckpt;      /* the model a checkpoint's config.json describes (have_ckpt) */
    int have_ckpt;
    struct {
        char name[64];
        const char *val; /* "" for a flag */
    } given[96]; /* every option as given, for the refusal of those this run cannot use (unused_options) */
    int n_given;
} bench_args;

/* --batch N or a comma list (a sweep); 0, or -1 after printing the error */
static int parse_batches(const char *name, const char *val, bench_args *a) {
    a->n_batches = 0;
    for (const char *q = val; a->n_batches < MAX_BATCHES;) {
        char one[32];
        const size_t len = strcspn(q, ",");
        if (len == 0 || len >= sizeof one) {
            fprintf(stderr, "tprof: --batch '%s': expected N or a comma list such as 1,8,64,256\n", val);
            return -1;
        }
        memcpy(one, q, len);
        one[len] = '\0';
        if (parse_int(name, one, 1, 1 << 20, &a->batches[a->n_batches])) return -1;
        a->n_batches++;
        if (!q[len]) break;
        q += len + 1;
        if (a->n_batches == MAX_BATCHES) {
            fprintf(stderr, "tprof: --batch '%s': at most %d sizes\n", val, MAX_BATCHES);
            return -1;
        }
    }
    a->batch = a->batches[0];
    return 0;
}

/* val among names[0..n): its index; -1 after printing "tprof: NAME: unknown KIND 'VAL' (expected ...)" */
static int one_of(const char *name, const char *val, const char *kind, const char *const *names, int n) {
    for (int k = 0; k < n; k++)
        if (strcmp(val, names[k]) == 0) return k;
    fprintf(stderr, "tprof: %s: unknown %s '%s' (expected", name, kind, val);
    for (int k = 0; k < n; k++) fprintf(stderr, "%s%s", k ? (k == n - 1 ? " or " : ", ") : " ", names[k]);
    fprintf(stderr, ")\n");
    return -1;
}

/* The options that take a value. 1: handled; 0: not one of them; -1: an error was printed. */
static int parse_value_option(const char *name, const char *val, bench_args *a) {
    tp_bench_options *o = &a->o;
    static const char *const CALIB[] = {"max", "percentile", "entropy"}, *const ATTN[] = {"auto", "flash", "cudnn", "classic",
                                                                               "wgmma"};
    static const char *const REF[] = {"gpu", "cpu", "none"}, *const DEV[] = {"gpu", "cpu"};
    int k;
#define IS(s) (strcmp(name, s) == 0)
    if (IS("--model")) a->model = val;
    else if (IS("--precision")) a->prec = val;
    else if (IS("--weights")) o->weights = val;
    else if (IS("--onnx")) o->onnx = val;
    else if (IS("--onnx-check")) return two_way(name, val, "mode", "on", "off", &a->onnx_nocheck) ? -1 : 1;
    else if (IS("--shapes")) a->shapes = val;
    else if (IS("--image") || IS("--tokens")) o->image = val, a->input_opt = IS("--image") ? "--image" : "--tokens";
    else if (IS("--calib-data")) o->calib_data = val;
    else if (!a->build && IS("--perplexity")) o->perplexity = val;
    else if (!a->build && !a->profile && IS("--gpus")) {
        a->n_gpus = 0;
        for (const char *q = val; *q;) {
            if (a->n_gpus == MAX_BATCHES) {
                fprintf(stderr, "tprof: --gpus '%s': at most %d GPUs\n", val, MAX_BATCHES);
                return -1;
            }
            char one[16];
            const size_t len = strcspn(q, ",");
            snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1), q);
            if (len == 0 || len >= sizeof one || parse_int(name, one, 0, 1023, &a->gpus[a->n_gpus])) {
                if (len == 0 || len >= sizeof one) fprintf(stderr, "tprof: --gpus '%s': expected a list such as 0,1\n", val);
                return -1;
            }
            for (int j = 0; j < a->n_gpus; j++)
                if (a->gpus[j] == a->gpus[a->n_gpus]) {
                    fprintf(stderr, "tprof: --gpus '%s': GPU %ld given twice\n", val, a->gpus[j]);
                    return -1;
                }
            a->n_gpus++;
            q += len + (q[len] == ',');
        }
    } else if (!a->build && IS("--rows-fd")) return parse_int(name, val, 0, 1 << 20, &a->rows_fd) ? -1 : 1;
    else if (!a->build && IS("--tp")) {
        long t;
        if (parse_int(name, val, 1, 64, &t)) return -1;
        o->tp = (int)t;
    } else if (!a->build && IS("--gemv-groups")) {
        static const char *const GG[] = {"off", "on", "auto"};
        if ((k = one_of(name, val, "mode", GG, 3)) < 0) return -1;
        o->gemv_groups = k;
    } else if (!a->build && IS("--decode-kernel")) {
        static const char *const DK[] = {"graph", "persistent", "auto"}; /* tp_decode_kernel's order */
        if ((k = one_of(name, val, "form", DK, 3)) < 0) return -1;
        o->decode_kernel = k;
    } else if (!a->build && IS("--kv-cache")) {
        return two_way(name, val, "type", "auto", "fp8", &o->kv_fp8) ? -1 : 1;
    } else if (!a->build && IS("--prefill-activations")) {
        return two_way(name, val, "type", "fp16", "fp8", &o->prefill_act_fp8) ? -1 : 1;
    } else if (!a->build && IS("--pdl")) {
        static const char *const PD[] = {"on", "off"};
        if ((k = one_of(name, val, "mode", PD, 2)) < 0) return -1;
        o->no_pdl = k;
    } else if (!a->build && IS("--tp-launch")) {
        return two_way(name, val, "mode", "serial", "threads", &o->tp_parallel_launch) ? -1 : 1;
    } else if (!a->build && IS("--pipeline")) {
        static const char *const PM[] = {"graph", "modular", "eager"};
        if ((k = one_of(name, val, "mode", PM, 3)) < 0) return -1;
        o->pipeline_mode = k + 1; /* 0: not given */
    }
    else if (IS("--json")) o->json_path = val;
    else if (IS("--policy")) o->policy = val;
    else if (IS("--policy-file")) o->policy_file = val;
    else if (!a->build && IS("--save-output")) o->save_output = val;
    else if (a->build && (IS("-o") || IS("--output"))) a->out_file = val;
    else if (!a->build && IS("--engine")) a->engine = val;
    else if (a->profile && IS("--out")) a->out_dir = val;
    else if (IS("--gemm")) return two_way(name, val, "choice", "auto", "cublaslt", &o->cublaslt_only) ? -1 : 1;
    else if (IS("--fp8-accum")) return two_way(name, val, "choice", "fast", "promote", &o->fp8_promote) ? -1 : 1;
    else if (IS("--gelu")) return two_way(name, val, "form", "erf", "tanh", &o->gelu_tanh) ? -1 : 1;
    else if (IS("--fusion")) return two_way(name, val, "mode", "on", "off", &o->no_fusion) ? -1 : 1;
    else if (IS("--fp32-protect")) return two_way(name, val, "mode", "regs", "tensors", &o->fp32_tensors) ? -1 : 1;
    else if (!a->build && IS("--sparsity")) {
        if (strcmp(val, "2:4") != 0) {
            fprintf(stderr, "tprof: --sparsity: unknown pattern '%s' (expected 2:4)\n", val);
            return -1;
        }
        o->sparsity = 1;
    } else if (!a->build && IS("--sparse-layers")) o->sparse_layers = val;
    else if (!a->build && IS("--sparse-gemm")) {
        static const char *const SG[] = {"auto", "force", "off"};
        if ((k = one_of(name, val, "mode", SG, 3)) < 0) return -1;
        o->sparse_gemm = k;
    }
    else if (IS("--calib")) {
        if ((k = one_of(name, val, "method", CALIB, 3)) < 0) return -1;
        o->calib.method = k == 2 ? TP_CALIB_ENTROPY : k ? TP_CALIB_PERCENTILE : TP_CALIB_MAX;
    } else if (IS("--calib-percentile")) {
        if (parse_double(name, val, 1e-9, 100, &o->calib.percentile)) return -1;
        o->calib.method = TP_CALIB_PERCENTILE;
    } else if (IS("--attention")) {
        if ((k = one_of(name, val, "implementation", ATTN, 5)) < 0) return -1;
        o->attention = k;
    } else if (IS("--reference")) {
        if ((k = one_of(name, val, "reference", REF, 3)) < 0) return -1;
        o->reference = (tp_reference_kind)(TP_REF_GPU + k);
    } else if (IS("--device")) {
        if ((k = one_of(name, val, "device", DEV, 2)) < 0) return -1;
        o->device = k ? TP_DEVICE_CPU : TP_DEVICE_GPU;
    } else if (a->build && IS("--arch")) {
        tp_error ae;
        if (tp_caps_parse_arch(val, &a->arch, &ae)) {
            fprintf(stderr, "tprof: --arch: %s\n", ae.msg);
            return -1;
        }
    } else if (IS("--batch")) return parse_batches(name, val, a) ? -1 : 1;
    else if (a->profile && IS("--profile-iters")) return parse_int(name, val, 1, 1000, &a->prof_iters) ? -1 : 1;
    else if (a->profile && IS("--top")) return parse_int(name, val, 1, 1000, &a->top) ? -1 : 1;
    else if (IS("--iterations")) return parse_int(name, val, 1, 100000, &a->iters) ? -1 : 1;
    else if (IS("--seed")) return parse_int(name, val, 0, 0x7FFFFFFFL, &a->seed) ? -1 : 1;
    else if (IS("--ref-images") || IS("--ref-samples")) return parse_int(name, val, 1, 1 << 20, &a->ref) ? -1 : 1;
    else if (IS("--warmup")) return parse_double(name, val, 0, 3.6e6, &a->warm) ? -1 : 1;
    else if (IS("--duration")) return parse_double(name, val, 0, 3600, &a->dur) ? -1 : 1;
    else return 0;
#undef IS
    return 1;
}

/* Every option. 1: run; 0: help printed; 2: an error was printed. */
static int parse_bench_args(int argc, char **argv, bench_args *a) {
    static const char *const VALUED[] = {
        "--model", "--precision", "--weights", "--onnx", "--onnx-check", "--shapes", "--image", "--tokens", "--calib-data", "--perplexity", "--gemv-groups", "--decode-kernel", "--kv-cache", "--prefill-activations", "--pdl", "--tp", "--tp-launch", "--pipeline", "--fusion", "--fp32-protect", "--sparsity", "--sparse-layers", "--sparse-gemm", "--gpus", "--rows-fd", "--json", "--policy", "--policy-file", "--save-output", "-o",
        "--output", "--engine", "--out", "--gemm", "--fp8-accum", "--gelu", "--calib", "--calib-percentile",
        "--attention", "--reference", "--device", "--arch", "--batch", "--profile-iters", "--top", "--iterations",
        "--seed", "--ref-images", "--ref-samples", "--warmup", "--duration", NULL};
    for (int i = 0; i < argc; i++) {
        char name[64];
        const char *arg = argv[i];
        char *val = opt_split(argv[i], name);
        int r = 0, valued = 0;
        if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(name, "--no-graph") == 0) {
            a->o.use_graph = 0, r = 1;
        } else if (strcmp(name, "--attribution") == 0 && !a->build) {
            a->o.attribution = 1, r = 1;
        } else if (strcmp(name, "--no-gemm-select") == 0) {
            a->o.gemm_first = 1, r = 1;
        } else if (strcmp(name, "--plan") == 0) {
            a->o.print_plan = 1, r = 1;
        } else if (strcmp(name, "--allow-nonfinite") == 0) {
            a->o.allow_nonfinite = 1, r = 1;
        } else if (strcmp(name, "--strict") == 0) {
            a->o.strict = 1, r = 1;
        } else {
            for (int k = 0; VALUED[k] && !valued; k++) valued = strcmp(name, VALUED[k]) == 0;
            /* options of another command are unknown here, value or not */
            static const char *const BUILD_ONLY[] = {"-o", "--output", "--arch", NULL},
                                     *const RUN_ONLY[] = {"--save-output", "--engine", NULL},
                                     *const PROFILE_ONLY[] = {"--out", "--profile-iters", "--top", NULL};
            for (int k = 0; BUILD_ONLY[k]; k++) valued &= a->build || strcmp(name, BUILD_ONLY[k]) != 0;
            for (int k = 0; RUN_ONLY[k]; k++) valued &= !a->build || strcmp(name, RUN_ONLY[k]) != 0;
            for (int k = 0; PROFILE_ONLY[k]; k++) valued &= a->profile || strcmp(name, PROFILE_ONLY[k]) != 0;
            if (valued && !(val = opt_value(name, val, argc, argv, &i))) return 2;
            if (valued) r = parse_value_option(name, val, a);
            if (r == 0) r = parse_knob(name, val, argc, argv, &i, &a->k);
        }
        if (r < 0) return 2;
        if (r == 0) {
            fprintf(stderr, "tprof: unknown option '%s' (tprof %s --help lists them)\n", arg,
                    a->build ? "build" : a->compare ? "compare" : a->profile ? "profile" : "bench");
            return 2;
        }
        if (!valued && val && !find_knob(name)) { /* a flag: "--plan=no" must not read as --plan */
            fprintf(stderr, "tprof: %s takes no value ('%s')\n", name, arg);
            return 2;
        }
        if (a->n_given < (int)(sizeof a->given / sizeof a->given[0])) {
            snprintf(a->given[a->n_given].name, sizeof a->given[0].name, "%s", name);
            a->given[a->n_given++].val = valued && val ? val : "";
        }
    }
    return 1;
}

/* The embedded default where nothing was given: the GPU's main job, or the CPU's small one without a GPU. */
static void bench_defaults(bench_args *a) {
    tp_bench_options *o = &a->o;
    int gpu = 0;
    char why[600] = "";
    if (o->device != TP_DEVICE_CPU) gpu = have_gpu(why, sizeof why);
    if (o->device == TP_DEVICE_AUTO && !gpu) {
        o->device = TP_DEVICE_CPU;
        if (a->build) { /* no run on the CPU: build only plans and writes */
        } else if (!a->model && !o->onnx && a->batch < 0 && !a->prec)
            printf("No GPU found (%s): running the CPU default, vit-tiny at batch 1 in fp32.\n", why);
        else printf("No GPU found (%s): running on the CPU.\n", why);
    } else if (o->device == TP_DEVICE_AUTO) {
        o->device = TP_DEVICE_GPU;
    }
    const int on_cpu = o->device == TP_DEVICE_CPU;
    if (!a->model && !o->onnx) a->model = on_cpu ? "vit-tiny" : "vit-b16";
    if (a->batch < 0) a->batch = on_cpu ? 1 : 64;
    if (!a->prec) a->prec = a->o.attribution ? "bf16,fp8" : on_cpu ? "fp32" : "fp16,fp8"; /* the VLA note's path */
    if (a->iters < 0) a->iters = on_cpu ? 3 : 10;
    if (a->dur < 0) a->dur = on_cpu ? 0 : 3;
}

/* The files and folders a run reads, by option, so that no output overwrites one of them. */
enum { MAX_INPUTS = 10 };
typedef struct {
    const char *opt[MAX_INPUTS], *path[MAX_INPUTS];
    int n;
} input_list;

static void add_input(input_list *in, const char *opt, const char *path) {
    if (path && in->n < MAX_INPUTS) in->opt[in->n] = opt, in->path[in->n++] = path;
}

static void collect_inputs(const bench_args *a, input_list *in);
static int output_ok(const char *opt, const char *path, int is_dir, const char *made, const input_list *in);

/* The files profile and compare write into an existing --out folder (profile_run.c, compare.c), checked as outputs
 * before any work like the others: what the run would replace there must be a regular file and no input. */
static int out_dir_files_ok(const char *opt, const char *dir, const input_list *in) {
    static const char *const FIXED[] = {"report.md", "report.html", "report.json", "breakdown.svg", "speedup.svg"};
    static const char *const SUFFIX[] = {".trace.json", ".chrome.json", ".profile.json"};
    DIR *d = opendir(dir);
    if (!d) return 0; /* checked writable above; a listing refused is the writers' to report */
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d)) != NULL) {
        int ours = 0;
        const size_t l = strlen(e->d_name);
        for (size_t k = 0; k < sizeof FIXED / sizeof *FIXED; k++) ours |= strcmp(e->d_name, FIXED[k]) == 0;
        for (size_t k = 0; k < sizeof SUFFIX / sizeof *SUFFIX; k++)
            ours |= l > strlen(SUFFIX[k]) && strcmp(e->d_name + l - strlen(SUFFIX[k]), SUFFIX[k]) == 0;
        if (!ours) continue;
        char p[8400], what[64];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        snprintf(what, sizeof what, "%s's file", opt);
        rc = output_ok(what, p, 0, NULL, in);
    }
    closedir(d);
    return rc;
}

/* An output path, checked before any work. A folder (--out, is_dir) must be one or not exist yet in a writable
 * folder; a file follows core/files.h's rules (never a device, FIFO, socket or folder; a symbolic link's target is
 * written, and the note says so) and is never one of the run's inputs: the same file, or a file already in an
 * input folder (a checkpoint's config.json or weights). made: the folder the run makes itself (--out), whose
 * files need no folder of their own yet. 0 or 2 after printing the reason. */
static int output_ok(const char *opt, const char *path, int is_dir, const char *made, const input_list *in) {
    if (!path) return 0;
    struct stat sb;
    if (is_dir) {
        if (stat(path, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode) || access(path, W_OK | X_OK) != 0) {
                fprintf(stderr, "tprof: %s %s: %s\n", opt, path, !S_ISDIR(sb.st_mode) ? "not a folder" : "not writable");
                return 2;
            }
            return out_dir_files_ok(opt, path, in);
        }
        tp_error e = {0}; /* a new folder: made in its parent, which must exist and be writable, as for a file */
        if (tp_output_check(path, opt, NULL, &e)) {
            fprintf(stderr, "tprof: %s\n", e.msg);
            return 2;
        }
        return 0;
    }
    if (made && stat(made, &sb) != 0) { /* a file in the folder the run will make: nothing there to check yet */
        const char *slash = strrchr(path, '/');
        size_t ml = strlen(made);
        while (ml > 1 && made[ml - 1] == '/') ml--;
        if (slash && (size_t)(slash - path) == ml && strncmp(path, made, ml) == 0) return 0;
    }
    tp_error e = {0};
    char *target = NULL;
    if (tp_output_check(path, opt, &target, &e)) {
        fprintf(stderr, "tprof: %s\n", e.msg);
        return 2;
    }
    for (int i = 0; in && i < in->n; i++) {
        int in_dir = 0;
        char inside[8400];
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        if (stat(in->path[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
            in_dir = 1;
            snprintf(inside, sizeof inside, "%s/%s", in->path[i], base);
        }
        if (tp_same_file(path, in->path[i]) || (in_dir && tp_same_file(path, inside))) {
            fprintf(stderr, "tprof: %s %s: %s %s %s: choose another output path\n", opt, path,
                    in_dir ? "a file of the input folder" : "the same file as the input", in->opt[i], in->path[i]);
            free(target);
            return 2;
        }
    }
    if (target) fprintf(stderr, "tprof: note: %s %s is a symbolic link: writing its target %s\n", opt, path, target);
    free(target);
    return 0;
}

/* --shapes NAME:D0xD1x... (trtexec's syntax, one input): the name the file's input's, its rank and fixed dimensions the
 * file's; the first dimension becomes the batch (clashing with a different --batch), a decoder's second its prompt.
 * 0, or -1 after printing the error. */
static int onnx_shapes(bench_args *a, const tp_onnx_import_info *info) {
    const char *colon = strrchr(a->shapes, ':');
    if (!colon || colon == a->shapes || (size_t)(colon - a->shapes) != strlen(info->input_name) ||
        strncmp(a->shapes, info->input_name, (size_t)(colon - a->shapes)) != 0) {
        fprintf(stderr, "tprof: --shapes '%s': expected %s:DIMS (the file's input is '%s')\n", a->shapes,
                info->input_name, info->input_name);
        return -1;
    }
    long d[8];
    int n = 0;
    for (const char *q = colon + 1; *q && n < 8;) {
        char one[24];
        const size_t len = strcspn(q, "x");
        snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1), q);
        if (len == 0 || len >= sizeof one || parse_int("--shapes", one, 1, 1 << 24, &d[n])) {
            if (len == 0 || len >= sizeof one) fprintf(stderr, "tprof: --shapes '%s': DIMS such as 64x3x224x224\n", a->shapes);
            return -1;
        }
        n++;
        q += len + (q[len] == 'x');
    }
    tp_input_desc in;
    tp_model_input(&a->o.model, &in);
    const int dec = !strcmp(info->family, "decoder");
    if (n != 1 + in.ndim) {
        fprintf(stderr, "tprof: --shapes '%s': %d dimensions; input '%s' has %d\n", a->shapes, n, info->input_name,
                1 + in.ndim);
        return -1;
    }
    for (int k = dec ? 1 : 0; k < in.ndim; k++) /* a decoder's length is the run's; an image's sides the file's */
        if (d[1 + k] != in.shape[k]) {
            fprintf(stderr, "tprof: --shapes '%s': dimension %d is %ld; the file fixes it at %lld\n", a->shapes, 1 + k,
                    d[1 + k], (long long)in.shape[k]);
            return -1;
        }
    if ((info->fixed_batch > 0 && d[0] != info->fixed_batch) || (a->n_batches > 0 && (a->n_batches > 1 || a->batches[0] != d[0]))) {
        fprintf(stderr, "tprof: --shapes '%s': batch %ld against %s %lld\n", a->shapes, d[0],
                info->fixed_batch > 0 ? "the file's fixed" : "--batch", info->fixed_batch > 0 ? (long long)info->fixed_batch
                                                                                        : (long long)a->batches[0]);
        return -1;
    }
    a->batch = a->batches[0] = d[0];
    a->n_batches = 1;
    for (int i = 0; dec && i < a->k.n; i++) { /* --prompt given too: it must say what --shapes says */
        if (strcmp(a->k.name[i], "--prompt") != 0) continue;
        char *end;
        const long p = strtol(a->k.val[i], &end, 10); /* not a number: apply_knobs names it */
        if (!*end && p != d[1]) {
            fprintf(stderr, "tprof: --shapes '%s': prompt %ld against --prompt %ld\n", a->shapes, d[1], p);
            return -1;
        }
    }
    if (dec) {
        char v[24];
        snprintf(v, sizeof v, "%ld", d[1]);
        tp_error e = {0};
        if (tp_model_knob(&a->o.model, "--prompt", v, &e) != 1) {
            fprintf(stderr, "tprof: --shapes '%s': %s\n", a->shapes, e.msg);
            return -1;
        }
    }
    return 0;
}

/* --onnx: the model and weights imported (models/onnx_import.h), then checked against the file's own graph
 * (bench/onnx_check.h) unless --onnx-check off; a->onnx_note says what was found. 0, or the exit code after printing
 * the error. */
static int onnx_model(bench_args *a) {
    tp_bench_options *o = &a->o;
    int shape_knobs = 1; /* a decoder's run shape (--prompt, --gen) is the run's, not the file's */
    for (int i = 0; i < a->k.n; i++)
        shape_knobs &= !strcmp(a->k.name[i], "--prompt") || !strcmp(a->k.name[i], "--gen");
    const char *clash = a->model ? "--model" : o->weights ? "--weights" : !shape_knobs ? "a model knob" : NULL;
    if (clash) {
        fprintf(stderr, "tprof: --onnx %s carries the model and its weights: drop %s\n", o->onnx, clash);
        return 2;
    }
    tp_error err = {0};
    tp_onnx_import_info *info = calloc(1, sizeof *info);
    if (!info) {
        fprintf(stderr, "tprof: error: out of host memory\n");
        return 5;
    }
    tp_onnx_model *om = NULL; /* read once: the import and its check both walk it */
    tp_status st = tp_onnx_load(o->onnx, &om, &err);
    if (!st) st = tp_onnx_import_model(om, o->onnx, &o->model, &a->onnx_params, info, &err);
    if (st) {
        tp_onnx_free(om);
        free(info);
        fprintf(stderr, "tprof: --onnx: %s\n", err.msg);
        return exit_code(st);
    }
    if (a->shapes && onnx_shapes(a, info)) {
        tp_onnx_free(om);
        free(info);
        tp_params_free(&a->onnx_params);
        return 2;
    }
    if (apply_knobs(&a->k, &o->model)) { /* the run shape first, so the note describes the model as it runs */
        tp_onnx_free(om);
        free(info);
        tp_params_free(&a->onnx_params);
        return 2;
    }
    char q[240] = "";
    if (info->n_qdq)
        snprintf(q, sizeof q, "; Q/DQ on %d linears: the GPU engines run them in FP8 at the file's scales (explicit "
                 "quantization), the rest in --precision (the CPU executor runs the FP32 reference)", info->n_qdq);
    char desc[256];
    tp_model_describe(&o->model, desc, sizeof desc);
    int n = snprintf(a->onnx_note, sizeof a->onnx_note, "ONNX import: %s: %s; %d nodes mapped (%d on the residual "
                     "stream, %d attention, %d activation, %d shape arithmetic) to the %s family: %s%s", o->onnx,
                     info->summary, info->n_nodes, info->n_main, info->n_attention, info->n_gelu, info->n_shape,
                     info->family, desc, q);
    if (a->onnx_nocheck) {
        snprintf(a->onnx_note + n, sizeof a->onnx_note - (size_t)n, "; NOT CHECKED against the file (--onnx-check off)");
    } else {
        double rel = 0, ms = 0;
        st = tp_onnx_check(om, o->onnx, &o->model, &a->onnx_params, info, (uint64_t)(a->seed + 77), &rel, &ms, &err);
        if (!st && !(rel <= TP_ONNX_CHECK_TOL))
            st = tp_fail_path(&err, TP_ERR_UNSUPPORTED, o->onnx, "the imported model does not compute what the file "
                              "does: tprof's FP32 graph against the file's (tprof's ONNX interpreter) at batch 1: "
                              "relative L2 %.3g, over %.0e (a detail of the architecture read wrong; --onnx-check off "
                              "runs it anyway)", rel, TP_ONNX_CHECK_TOL);
        if (st) {
            tp_onnx_free(om);
            free(info);
            tp_params_free(&a->onnx_params);
            fprintf(stderr, "tprof: --onnx: %s\n", err.msg);
            return exit_code(st);
        }
        snprintf(a->onnx_note + n, sizeof a->onnx_note - (size_t)n, "; checked: tprof's FP32 graph against the file's "
                 "own (tprof's ONNX interpreter%s) at batch 1: relative L2 %.2g (%.1f s)",
                 info->n_qdq ? ", activation Q/DQ off" : "", rel, ms / 1e3);
    }
    tp_onnx_free(om);
    a->onnx_info = info; /* the Q/DQ policy and scales read it; freed with the run */
    o->onnx_info = info;
    o->onnx_params = &a->onnx_params;
    o->onnx_note = a->onnx_note;
    return 0;
}

/* The value an option was last given ("" for a flag), or NULL when it was not given. */
static const char *given(const bench_args *a, const char *name) {
    const char *v = NULL;
    for (int i = 0; i < a->n_given; i++)
        if (strcmp(a->given[i].name, name) == 0) v = a->given[i].val;
    return v;
}

/* The first of names given, or NULL. */
static const char *given_any(const bench_args *a, const char *const *names) {
    for (int k = 0; names[k]; k++)
        if (given(a, names[k])) return names[k];
    return NULL;
}

/* Options the parser takes that this run could not use, refused by name rather than dropped (issue 40: every
 * option takes effect or is refused). Called once the model and the device are known. 0, or 2 after printing. */
static int unused_options(const bench_args *a) {
    const tp_bench_options *o = &a->o;
    /* the GPU engines' choices: the CPU executor runs each op by itself in FP32 (fuses, quantizes, calibrates and
     * graphs nothing); tprof build without a GPU neither times GEMMs nor calibrates. Refused elsewhere with their
     * own reasons: --kv-cache fp8 (the planner), --sparse-gemm without --sparsity and --calib-data of a run (bench.c,
     * after reading its file), --attribution's options (attribution.c) */
    static const char *const GPU_ONLY[] = {"--gemm", "--attention", "--no-gemm-select", "--fp8-accum", "--gelu",
                                           "--fusion", "--no-graph", "--pdl", "--gemv-groups", "--decode-kernel", "--tp-launch",
                                           "--prefill-activations",
                                           "--calib", "--calib-percentile", NULL};
    /* a run's choices and outputs, not stored in an engine file (tprof bench --engine FILE takes them) */
    static const char *const RUN_ONLY[] = {"--no-graph", "--fusion", "--fp32-protect", "--iterations", "--warmup",
                                           "--duration", "--reference", "--ref-samples", "--ref-images", "--plan",
                                           "--json", NULL};
    const char *n, *cal = given(a, "--calib");
    if (a->engine && (n = cal ? "--calib" : given(a, "--calib-percentile") ? "--calib-percentile" : NULL)) {
        fprintf(stderr, "tprof: --engine %s carries its activation scales: drop %s\n", a->engine, n);
        return 2;
    }
    if (cal && strcmp(cal, "percentile") != 0 && given(a, "--calib-percentile")) {
        fprintf(stderr, "tprof: --calib %s with --calib-percentile: the percentile is --calib percentile's\n", cal);
        return 2;
    }
    if (given(a, "--onnx-check") && !o->onnx) {
        fprintf(stderr, "tprof: --onnx-check: the check of an --onnx import, and there is no --onnx\n");
        return 2;
    }
    if (o->sparse_layers && !o->sparsity) {
        fprintf(stderr, "tprof: --sparse-layers %s without --sparsity 2:4: nothing is pruned\n", o->sparse_layers);
        return 2;
    }
    if (o->allow_nonfinite && !o->weights) {
        fprintf(stderr, "tprof: --allow-nonfinite: about the values of --weights, and there is no --weights\n");
        return 2;
    }
    if (o->attribution && a->n_batches > 1) {
        fprintf(stderr, "tprof: --attribution with a sweep (--batch LIST): one batch size\n");
        return 2;
    }
    if (given(a, "--gemv-groups") && strcmp(o->model.family->name, "vit") == 0) {
        fprintf(stderr, "tprof: --gemv-groups: a decoder's decode steps, and %s (family vit) has none\n",
                tp_model_name(&o->model));
        return 2;
    }
    if (given(a, "--decode-kernel") && o->model.family->build_step == NULL) {
        fprintf(stderr, "tprof: --decode-kernel: a decoder's decode steps, and %s (family %s) has none\n",
                tp_model_name(&o->model), o->model.family->name);
        return 2;
    }
    if (o->prefill_act_fp8) { /* fp8-wo's prefill in W8A8: a decoder's, fp8-wo's, on one GPU, in this run's build */
        int wo = 0;
        for (int i = 0; i < o->n_precs; i++) wo |= o->precs[i] == TP_PREC_FP8_WO;
        const char *why = o->model.family->build_step == NULL ? "a decoder's prefill"
                          : !wo                               ? "fp8-wo's prefill, and --precision has no fp8-wo"
                          : o->tp > 1                         ? "one GPU's (its activation scales are calibrated on one)"
                          : a->engine                         ? "an engine built in this run (an engine file holds one "
                                                                "policy)"
                          : given(a, "--policy-file")         ? "the fp8 policy's prefill, and a --policy-file is one "
                                                                "precision's policy (its rules: --policy)"
                                                              : NULL;
        if (why) {
            fprintf(stderr, "tprof: --prefill-activations fp8: %s\n", why);
            return 2;
        }
    }
    if (a->build && (n = given_any(a, RUN_ONLY))) {
        fprintf(stderr, "tprof: %s: tprof build writes the engine file and runs nothing; give %s to tprof bench "
                "--engine FILE\n", n, n);
        return 2;
    }
    if (o->device == TP_DEVICE_CPU && !o->attribution &&
        ((n = given_any(a, GPU_ONLY)) || (n = o->sparsity && given(a, "--sparse-gemm") ? "--sparse-gemm" : NULL) ||
         (n = a->build && o->calib_data ? "--calib-data" : NULL))) {
        const char *why = given(a, "--device") ? "--device cpu" : "no GPU here";
        if (a->build)
            fprintf(stderr, "tprof: %s: tprof build uses it on a GPU (timing the GEMMs, calibrating), and this build "
                    "has none (%s)\n", n, why);
        else
            fprintf(stderr, "tprof: %s: a GPU engine's option, and this run is on the CPU (%s), whose executor runs "
                    "each op by itself in FP32 (nothing fused, quantized, calibrated or graphed)\n", n, why);
        return 2;
    }
    if (given(a, "--tp-launch") && o->tp < 2) {
        fprintf(stderr, "tprof: --tp-launch: how --tp N's GPUs are launched, and this run is on one GPU (no --tp N, "
                "N > 1)\n");
        return 2;
    }
    return 0;
}

/* The options into a->o once the model is known; 0, or 2 after printing the error. */
static int bench_options(bench_args *a, const tp_engine_file *ef, const char *cmdline) {
    tp_bench_options *o = &a->o;
    tp_error err = {0};
    if (a->shapes && !o->onnx) {
        fprintf(stderr, "tprof: --shapes %s: the shape of an ONNX file's input; without --onnx, --batch sets the run\n",
                a->shapes);
        return 2;
    }
    if (ef) {
        o->model = ef->model;
    } else if (o->onnx) {
        int rc = onnx_model(a);
        if (rc) return rc;
    } else if (a->have_ckpt) {
        o->model = a->ckpt;
    } else if (a->marg.kind == TP_MARG_DESCRIPTION) {
        if (tp_model_from_file(a->model, &o->model, &err)) { /* a model described by a file: its errors are input's */
            fprintf(stderr, "tprof: --model: %s\n", err.msg);
            return 3;
        }
    } else if (tp_model_preset(a->model, &o->model, &err)) {
        fprintf(stderr, "tprof: --model: %s\n", err.msg);
        return 2;
    }
    if (apply_knobs(&a->k, &o->model)) return 2;
    if (o->image && a->input_opt) { /* one field holds both: the option must match the model's kind of input */
        tp_input_desc d;
        tp_model_input(&o->model, &d);
        const int tokens = strcmp(a->input_opt, "--tokens") == 0;
        if (tokens != (d.kind == TP_INPUT_TOKENS) && (tokens || d.kind == TP_INPUT_TOKENS)) {
            fprintf(stderr, "tprof: %s %s: %s takes %s, not %s\n", a->input_opt, o->image, tp_model_name(&o->model),
                    d.kind == TP_INPUT_TOKENS ? "token ids (--tokens FILE)" : "images (--image PATH)",
                    tokens ? "token ids" : "images");
            return 2;
        }
    }
    int np = parse_precisions(a->prec, o->precs, TP_MAX_PRECISIONS);
    if (np < 0) return 2;
    o->n_precs = np;
    o->batch = (int)a->batch;
    o->iterations = (int)a->iters;
    o->duration_s = a->dur;
    o->warmup_ms = a->warm;
    o->seed = (uint64_t)a->seed;
    o->ref_samples = (int)a->ref;
    o->writer = tp_bench_text_writer();
    o->command_line = cmdline;
    if (a->profile) {
        o->profile_iters = (int)a->prof_iters;
        o->top_n = (int)a->top;
        o->out_dir = a->out_dir;
        o->compare = a->compare;
    }
    if (a->build && o->gelu_tanh) {
        fprintf(stderr, "tprof: --gelu: chosen when an engine runs (tprof bench --engine FILE --gelu tanh), not "
                        "stored in the engine file\n");
        return 2;
    }
    if (a->n_batches > 1 && (a->build || a->profile)) {
        fprintf(stderr, "tprof: --batch: a list of sizes (a sweep) is for tprof bench; %s takes one\n",
                a->build ? "tprof build" : a->compare ? "tprof compare" : "tprof profile");
        return 2;
    }
    if (unused_options(a)) return 2;
    const char *made = a->profile ? a->out_dir : NULL;
    input_list in;
    collect_inputs(a, &in);
    if (output_ok("--out", made, 1, NULL, &in) || output_ok("--json", o->json_path, 0, made, &in) ||
        output_ok("--save-output", o->save_output, 0, made, &in) ||
        output_ok("-o", a->build ? a->out_file : NULL, 0, NULL, &in))
        return 2;
    for (int b = 0; o->json_path && a->n_batches > 1 && b < a->n_batches; b++) { /* a sweep's JSON per size */
        const char *dot = strrchr(o->json_path, '.'), *slash = strrchr(o->json_path, '/');
        const size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - o->json_path) : strlen(o->json_path);
        char p[4200]; /* as bench.c's tp_bench_sweep names them: out.json -> out_b64.json */
        snprintf(p, sizeof p, "%.*s_b%ld%s", (int)stem, o->json_path, a->batches[b], o->json_path + stem);
        if (output_ok("--json (one file per batch size)", p, 0, made, &in)) return 2;
    }
    return 0;
}

/* --policy-file: the file is for the precision it names (its "default"). Without --precision that precision is the
 * run's; a --precision list (or --attribution's default pair) must hold it, and its other precisions run their own
 * default policy, said here. 0, or the exit code after printing the error: 2 when the list lacks it, the file's
 * class when it cannot be read. */
static int policy_file_precision(bench_args *a) {
    const char *path = a->o.policy_file;
    if (!path) return 0;
    tp_policy fp;
    tp_error err = {0};
    tp_status st = tp_policy_load_json(path, &fp, &err);
    if (st) {
        fprintf(stderr, "tprof: --policy-file: %s\n", err.msg);
        return exit_code(st);
    }
    const char *def = tp_precision_name(fp.def), *list = a->prec ? a->prec : "bf16,fp8";
    if (!a->prec && !a->o.attribution) {
        a->prec = def;
        return 0;
    }
    tp_precision precs[TP_PREC_COUNT];
    const int np = parse_precisions(list, precs, TP_PREC_COUNT);
    if (np < 0) return 2;
    for (int i = 0; i < np; i++)
        if (precs[i] == fp.def) {
            if (np > 1)
                printf("Policy file %s: for %s (its default); the other precisions run their default policy%s\n", path,
                       def, a->o.policy ? " and --policy" : "");
            return 0;
        }
    fprintf(stderr, "tprof: --policy-file %s: its default is %s, and --precision %s%s does not include it (the file "
            "applies to the precision it names: --precision %s, a list with it, or no --precision)\n", path, def, list,
            a->prec ? "" : " (--attribution's default)", def);
    return 2;
}

/* --engine: the file carries the model, the precision, the policy and the weights. 0, 2 (options that clash with
 * it) or the file's error class (exit_code). */
static int engine_clash(const bench_args *a) {
    const tp_bench_options *o = &a->o;
    const char *clash = a->model ? "--model" : a->prec ? "--precision" : o->weights ? "--weights" : o->onnx ? "--onnx"
                        : o->policy ? "--policy"
                        : o->policy_file ? "--policy-file" : a->k.n ? "a model knob"
                        : o->calib_data ? "--calib-data (its scales are the file's)" : NULL;
    if (clash) {
        fprintf(stderr, "tprof: --engine %s carries the model, precision, weights and scales: drop %s\n", a->engine, clash);
        return 2;
    }
    return 0;
}

/* Reads the engine file into ef: 0 or the file's error class (exit_code). */
static int read_engine(bench_args *a, tp_engine_file *ef) {
    tp_error fe = {0};
    if (tp_engine_file_read(a->engine, ef, &fe)) {
        fprintf(stderr, "tprof: error: %s\n", fe.msg);
        return exit_code(fe.code);
    }
    a->model = tp_model_name(&ef->model);
    a->prec = tp_precision_name(ef->precision);
    a->o.engine_file = ef;
    a->o.engine_path = a->engine;
    return 0;
}

/* Every input path of the command line (a->model only when it names an existing file or folder). */
static void collect_inputs(const bench_args *a, input_list *in) {
    const tp_bench_options *o = &a->o;
    memset(in, 0, sizeof *in);
    add_input(in, "--model", a->model && access(a->model, F_OK) == 0 ? a->model : NULL);
    add_input(in, "--weights", o->weights);
    add_input(in, "--onnx", o->onnx);
    add_input(in, "--engine", a->engine);
    add_input(in, a->input_opt ? a->input_opt : "--image", o->image);
    add_input(in, "--calib-data", o->calib_data);
    add_input(in, "--perplexity", o->perplexity);
    add_input(in, "--policy-file", o->policy_file);
}

/* Each input exists and is a regular file or, where a folder is taken, a folder: checked by stat before any
 * work, so that a FIFO or device never blocks a reader and a typo fails in the first second. 0 or 3. */
static int inputs_ok(const bench_args *a) {
    input_list in;
    collect_inputs(a, &in);
    for (int i = 0; i < in.n; i++) {
        const char *opt = in.opt[i];
        const int folder_ok = !strcmp(opt, "--model") || !strcmp(opt, "--weights") || !strcmp(opt, "--image") ||
                              !strcmp(opt, "--calib-data");
        tp_error e = {0};
        if (tp_input_check(in.path[i], opt, folder_ok ? TP_WANT_FILE_OR_DIR : TP_WANT_FILE, NULL, &e)) {
            fprintf(stderr, "tprof: error: %s\n", e.msg);
            return 3;
        }
    }
    return 0;
}

/* --model as users have it (cli/model_arg.h): an engine or ONNX file goes where --engine or --onnx would put it, a
 * checkpoint becomes the weights and its config.json the model; and --weights alone whose config.json is
 * transformers' names the model too (not the default ViT). 0, or the exit code after printing the error. */
static int resolve_model(bench_args *a) {
    tp_bench_options *o = &a->o;
    tp_error err = {0};
    char note[512];
    tp_status st;
    if (!a->model) {
        if (!o->weights || o->onnx || a->engine || tp_model_checkpoint_kind(o->weights) != TP_CKPT_HF) return 0;
        if ((st = tp_model_from_checkpoint(o->weights, &a->ckpt, note, sizeof note, &err))) {
            fprintf(stderr, "tprof: --weights: %s\n", err.msg);
            return exit_code(st);
        }
        a->have_ckpt = 1;
        a->model = o->weights; /* named: not the default model */
        return 0;
    }
    if ((st = tp_cli_model_arg(a->model, &a->marg, &err))) {
        fprintf(stderr, "tprof: --model: %s\n", err.msg);
        return exit_code(st);
    }
    const tp_model_arg *m = &a->marg;
    const char *clash = m->kind == TP_MARG_ENGINE && a->engine ? "--engine" : m->kind == TP_MARG_ONNX && o->onnx
                        ? "--onnx" : m->kind == TP_MARG_CHECKPOINT && o->weights ? "--weights" : NULL;
    if (clash) {
        fprintf(stderr, "tprof: --model %s is %s and carries what %s gives: drop one of them%s\n", a->model,
                tp_cli_model_arg_kind(m->kind), clash, m->kind == TP_MARG_CHECKPOINT ? " (or name a preset: "
                "--model PRESET --weights PATH)" : "");
        return 2;
    }
    if (m->kind == TP_MARG_ENGINE) a->engine = m->path, a->model = NULL;
    if (m->kind == TP_MARG_ONNX) o->onnx = m->path, a->model = NULL;
    if (m->kind != TP_MARG_CHECKPOINT) return 0;
    if ((st = tp_model_from_checkpoint(m->path, &a->ckpt, note, sizeof note, &err))) {
        fprintf(stderr, "tprof: --model: %s\n", err.msg);
        return exit_code(st);
    }
    a->have_ckpt = 1;
    o->weights = m->path;
    return 0;
}

static int cmd_bench(int argc, char **argv, const char *cmdline, int profile, int compare, int build) {
    bench_args a;
    memset(&a, 0, sizeof a);
    a.profile = profile, a.compare = compare, a.build = build;
    a.out_dir = compare ? "tprof-report" : "tprof-profile";
    a.prof_iters = 20, a.top = 15, a.batch = -1, a.iters = -1, a.seed = 0, a.ref = 8, a.rows_fd = -1;
    a.warm = 200, a.dur = -1;
    a.o.use_graph = 1;
    a.o.gemv_groups = 1; /* measured: bench/results/2026-11-25_h100_pdl_groups.log */
    a.o.device = TP_DEVICE_AUTO;
    a.o.calib.method = TP_CALIB_MAX;
    a.o.calib.percentile = 99.99;
    int rc = parse_bench_args(argc, argv, &a);
    if (rc != 1) return rc;
    if (build && !a.out_file) {
        fprintf(stderr, "tprof: build: name the engine file with -o FILE.tpe\n");
        return 2;
    }
    /* options that clash with --engine first (the clearer message), then each input's type, then what --model
     * names, which may itself be an engine file */
    if ((a.engine && !a.model && (rc = engine_clash(&a))) || (rc = inputs_ok(&a)) || (rc = resolve_model(&a)) ||
        (a.engine && (rc = engine_clash(&a))))
        return rc;
    tp_engine_file ef;
    memset(&ef, 0, sizeof ef);
    if (a.engine && (rc = read_engine(&a, &ef))) return rc;
    if (!a.engine && (rc = policy_file_precision(&a))) return rc;
    bench_defaults(&a);
    if ((rc = bench_options(&a, a.engine ? &ef : NULL, cmdline))) {
        tp_engine_file_free(&ef);
        return rc;
    }
    int bsizes[MAX_BATCHES];
    for (int i = 0; i < a.n_batches; i++) bsizes[i] = (int)a.batches[i];
    tp_bench_row rows[MAX_BATCHES * TP_MAX_PRECISIONS];
    tp_error err = {0};
    if (a.n_gpus > 0 && (a.n_batches < 2 || a.o.tp > 1 || a.o.device == TP_DEVICE_CPU)) {
        fprintf(stderr, "tprof: --gpus deals a sweep's batch sizes (--batch LIST) over GPUs%s; for one run on one GPU "
                "set CUDA_VISIBLE_DEVICES\n", a.o.tp > 1 ? ", one GPU each: not with --tp"
                                              : a.o.device == TP_DEVICE_CPU ? ", and this run is on the CPU" : "");
        tp_engine_file_free(&ef);
        return 2;
    }
    int gpus[MAX_BATCHES];
    for (int i = 0; i < a.n_gpus; i++) gpus[i] = (int)a.gpus[i];
    tp_status st = build            ? tp_build_run(&a.o, a.out_file, a.arch, &err)
                   : a.n_gpus > 0   ? tp_sweep_gpus(argc, argv, gpus, a.n_gpus, bsizes, a.n_batches, a.o.n_precs, rows, &err)
                   : a.n_batches > 1 || a.rows_fd >= 0 ? tp_bench_sweep(&a.o, bsizes, a.n_batches, rows, &err)
                   : a.o.attribution ? tp_bench_attribution(&a.o, &err)
                                     : tp_bench_run(&a.o, &err);
    if (!st && a.rows_fd >= 0) { /* a part of a sweep over GPUs (sweep_gpus.c): the rows go back to the caller */
        const size_t bytes = sizeof rows[0] * (size_t)(a.n_batches * a.o.n_precs);
        if (write((int)a.rows_fd, rows, bytes) != (ssize_t)bytes) st = tp_fail(&err, TP_ERR_IO, "--rows-fd: %s", strerror(errno));
    } else if (!st && !build && a.n_batches > 1) {
        st = tp_bench_print_sweep(&a.o, bsizes, a.n_batches, rows, &err);
    }
    tp_engine_file_free(&ef);
    tp_params_free(&a.onnx_params);
    free(a.onnx_info);
    if (st) {
        fprintf(stderr, "tprof: error: %s\n", err.msg);
        return exit_code(st);
    }
    return 0;
}

/* tprof lint: the format rules for a model configuration, no GPU. Exit 0: every requested format usable as
 * asked; 1: one is not; 2: a bad option or model; 3: the JSON file cannot be written (refused before the rules
 * run: its folder missing, a device or FIFO, or the model it lints; or failing at the end, the table printed). */
static int cmd_lint(int argc, char **argv) {
    const char *model = "vit-b16", *prec = "mxfp8,nvfp4", *json = NULL;
    knobs k = {0};
    for (int i = 0; i < argc; i++) {
        char name[64];
        char *val = opt_split(argv[i], name);
        const char **dst = strcmp(name, "--model") == 0 ? &model : strcmp(name, "--precision") == 0 ? &prec
                           : strcmp(name, "--json") == 0 ? &json : NULL;
        int knob;
        if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (dst) {
            if (!(*dst = opt_value(name, val, argc, argv, &i))) return 2;
        } else if ((knob = parse_knob(name, val, argc, argv, &i, &k)) < 0) {
            return 2;
        } else if (!knob) {
            fprintf(stderr, "tprof: lint: %s '%s' (tprof lint --help lists them)\n",
                    argv[i][0] == '-' ? "unknown option" : "unexpected argument", argv[i]);
            return 2;
        }
    }
    tp_model m;
    tp_error err = {0};
    tp_model_arg *ma = malloc(sizeof *ma);
    tp_status st = ma ? tp_cli_model_arg(model, ma, &err) : tp_fail(&err, TP_ERR_OOM, "out of host memory");
    if (!st) st = tp_cli_model_load(ma, &m, &err);
    if (st) { /* lint's own classes: a model it cannot read or lint is a bad model (2) */
        free(ma);
        fprintf(stderr, "tprof: --model: %s\n", err.msg);
        return 2;
    }
    input_list in = {0}; /* the JSON never replaces what it lints: the file given, or the checkpoint it names */
    add_input(&in, "--model", access(model, F_OK) == 0 ? model : NULL);
    add_input(&in, "--model", access(ma->path, F_OK) == 0 ? ma->path : NULL);
    const int out_rc = output_ok("--json", json, 0, NULL, &in);
    free(ma);
    if (out_rc) return 3; /* lint's class for a JSON file it cannot write, here refused before any work */
    if (apply_knobs(&k, &m)) return 2;
    tp_precision precs[TP_PREC_COUNT];
    int np = parse_precisions(prec, precs, TP_PREC_COUNT);
    if (np < 0) return 2;
    tp_lint_result *r = malloc(sizeof *r); /* ~100 KB: every rule's texts for every format */
    if (!r) {
        fprintf(stderr, "tprof: lint: out of host memory\n");
        return 2;
    }
    int rc = 2;
    if (tp_lint(&m, precs, np, r, &err)) {
        fprintf(stderr, "tprof: lint: %s\n", err.msg);
    } else {
        tp_lint_print(r, stdout);
        rc = tp_lint_ok(r) ? 0 : 1;
        if (json && tp_lint_write_json(r, json, &err)) {
            fprintf(stderr, "tprof: lint: %s\n", err.msg);
            rc = 3;
        } else if (json) {
            printf("JSON: %s\n", json);
        }
    }
    free(r);
    return rc;
}

int main(int argc, char **argv) {
    char cmdline[4096] = "";
    for (int i = 0; i < argc; i++) {
        size_t l = strlen(cmdline);
        snprintf(cmdline + l, sizeof cmdline - l, "%s%s", i ? " " : "", i == 0 ? "tprof" : argv[i]);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tprof %s (commit %s%s)\n", TPROF_VERSION, TP_GIT_COMMIT, TP_GIT_DIRTY ? ", modified" : "");
        return 0;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (int i = 2; i < argc; i++) /* tprof CMD --help: that command's help */
        if ((strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) && usage_command(argv[1], stdout) == 0)
            return 0;
    if (strcmp(argv[1], "bench") == 0) return cmd_bench(argc - 2, argv + 2, cmdline, 0, 0, 0);
    if (strcmp(argv[1], "profile") == 0) return cmd_bench(argc - 2, argv + 2, cmdline, 1, 0, 0);
    if (strcmp(argv[1], "compare") == 0) return cmd_bench(argc - 2, argv + 2, cmdline, 1, 1, 0);
    if (strcmp(argv[1], "build") == 0) return cmd_bench(argc - 2, argv + 2, cmdline, 0, 0, 1);
    if (strcmp(argv[1], "models") == 0) return cmd_models(argc - 2, argv + 2);
    if (strcmp(argv[1], "caps") == 0) return cmd_caps(argc - 2, argv + 2);
    if (strcmp(argv[1], "lint") == 0) return cmd_lint(argc - 2, argv + 2);
    if (strcmp(argv[1], "inspect") == 0) return tp_cli_inspect(argc - 2, argv + 2, exit_code);
    if (strcmp(argv[1], "diff") == 0) return tp_cli_diff(argc - 2, argv + 2, exit_code);
    fprintf(stderr, "tprof: unknown command '%s' (expected bench, profile, compare, build, diff, caps, lint, inspect or models; tprof --help)\n", argv[1]);
    return 2;
}
