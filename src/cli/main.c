/* tprof command line. `tprof bench` is the main job; `tprof models` lists the presets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "core/util.h"
#include "lint/lint.h"
#include "models/model.h"
#include "planner/caps.h"
#include "planner/engine_file.h"
#include "report/bench_report.h"
#include "tp_build_info.h"
#ifdef TPROF_HAVE_CUDA
#include "exec/cuda/engine/cuda_engine.h"
#endif

static void usage_knobs(FILE *f);

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
            "       tprof --version\n"
            "\n"
            "bench options (trtexec's spirit):\n"
            "  --model NAME          timm name or alias (vit-b16 = vit_base_patch16_224); `tprof models` lists them\n"
            "  --batch N[,N...]      images per forward pass (default 64 on GPU, 1 on CPU); a list runs a sweep\n"
            "                        (tprof bench): one run per size, then images/s, TFLOP/s and MFU per size\n"
            "  --precision LIST      comma list of fp32,fp16,bf16,fp8,fp8-block,mxfp8,nvfp4,mxfp4 (default fp16,fp8 on\n"
            "                        GPU; fp32 on CPU)\n"
            "  --warmup MS           warm-up time before timing (default 200)\n"
            "  --iterations N        at least N timed runs (default 10 on GPU, 3 on CPU)\n"
            "  --duration S          and at least S seconds of timed runs (default 3 on GPU, 0 on CPU)\n"
            "  --device gpu|cpu      where to run (default: the GPU if there is one)\n"
            "  --weights FILE        checkpoint as .safetensors, the reference's tensor names (default: synthesized)\n"
            "  --image PATH          image file or folder (PNG/JPEG/BMP), the model's preprocessing (default: random)\n"
            "  --seed N              seed for synthesized weights and inputs (default 0)\n"
            "  --reference gpu|cpu|none  where the FP32 reference behind the accuracy figures runs (default: the GPU\n"
            "                        on a GPU run: an FP32 engine with FP32 accumulation and plain kernels; else the\n"
            "                        CPU executor); none skips the accuracy check\n"
            "  --ref-samples N       samples the FP32 reference checks (default min(batch, 8)); --ref-images: the same\n"
            "  --json FILE           write every sample, the configuration and the system to FILE\n"
            "  --no-graph            launch kernels one by one instead of one CUDA graph\n"
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
            "                        \"precision\": \"fp16\"}]}; used for the precision that is its default\n"
            "  --calib max|percentile  static activation scales (fp8, nvfp4's per-tensor scale) from max |x|\n"
            "                        (default) or a percentile of |x| over the calibration batch\n"
            "  --calib-percentile P  the percentile (default 99.99; implies --calib percentile)\n"
            "  --attention IMPL      auto (default: time tprof's flash kernels (mma.sync; wgmma on sm_90) and\n"
            "                        cuDNN's SDPA when the engine is built, keep the fastest), flash, wgmma,\n"
            "                        cudnn (loaded at run time), classic\n"
            "profile options (besides the bench options):\n"
            "  --profile-iters N     forward passes traced after the timed ones (default 20)\n"
            "  --top N               rows in the top-kernel table (default 15)\n"
            "  --out DIR             where <precision>.trace.json, .chrome.json, .profile.json go (profile: tprof-profile;\n"
            "                        compare: tprof-report, with report.md, report.html, report.json)\n"
            "lint options: --model NAME and the model knobs, --json FILE, --precision LIST (default mxfp8,nvfp4;\n"
            "  any of fp32,fp16,bf16,fp8,fp8-block,mxfp8,nvfp4,mxfp4); exit 0: every format usable as asked,\n"
            "  1: one is not, 2: a bad option or model, 3: the JSON file cannot be written\n"
            "  --weights FILE: a checkpoint's own config.json beside it (timm's HF layout) sets the preprocessing\n",
            TPROF_VERSION);
    usage_knobs(f);
    fprintf(f, "\nWith no options: ViT-B/16 at 224, batch 64, fp16 and fp8 on the GPU; without a GPU, vit-tiny at batch 1\n"
               "in fp32 on the CPU.\n");
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
        if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) {
            tp_error e;
            if (tp_caps_parse_arch(argv[++i], &sm, &e)) {
                fprintf(stderr, "tprof: --arch: %s\n", e.msg);
                return 2;
            }
        } else {
            fprintf(stderr, "tprof: caps: unknown option '%s' (tprof caps [--arch sm_XX])\n", argv[i]);
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

static int cmd_models(void) {
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
    for (int i = 0; i < np; i++)
        if (tp_precision_parse(parts[i], &out[i], &err)) {
            fprintf(stderr, "tprof: --precision: %s\n", err.msg);
            return -1;
        }
    return np;
}

/* `tprof bench` and `tprof profile` share every option; profile adds the traced run and its artifacts. */
static int cmd_bench(int argc, char **argv, const char *cmdline, int profile, int compare, int build) {
    tp_bench_options o;
    memset(&o, 0, sizeof o);
    const char *out_file = NULL, *engine = NULL;
    int arch = 0;
    long prof_iters = 20, top = 15;
    const char *out_dir = compare ? "tprof-report" : "tprof-profile";
    const char *model = NULL, *prec = NULL;
    long batch = -1, iters = -1, seed = 0, ref = 8;
    enum { MAX_BATCHES = 16 };
    long batches[MAX_BATCHES];
    int n_batches = 0;
    double warm = 200, dur = -1;
    int device_given = 0;
    knobs k = {0};
    o.use_graph = 1;
    o.device = TP_DEVICE_AUTO;
    o.calib.method = TP_CALIB_MAX;
    o.calib.percentile = 99.99;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i], name[64];
        char *val = opt_split(a, name);
        int knob;
#define FLAG(s) (strcmp(name, s) == 0)
#define NEED_VAL()                                                   \
    do {                                                             \
        if (!(val = opt_value(name, val, argc, argv, &i))) return 2; \
    } while (0)
        if (FLAG("--no-graph")) o.use_graph = 0;
        else if (FLAG("--no-gemm-select")) o.gemm_first = 1;
        else if (FLAG("--gemm")) {
            NEED_VAL();
            if (two_way(name, val, "choice", "auto", "cublaslt", &o.cublaslt_only)) return 2;
        }
        else if (FLAG("--fp8-accum")) {
            NEED_VAL();
            if (two_way(name, val, "choice", "fast", "promote", &o.fp8_promote)) return 2;
        }
        else if (FLAG("--plan")) o.print_plan = 1;
        else if (FLAG("-h") || FLAG("--help")) {
            usage(stdout);
            return 0;
        } else if (FLAG("--model")) { NEED_VAL(); model = val; }
        else if (FLAG("--precision")) { NEED_VAL(); prec = val; }
        else if (FLAG("--weights")) { NEED_VAL(); o.weights = val; }
        else if (FLAG("--image")) { NEED_VAL(); o.image = val; }
        else if (FLAG("--json")) { NEED_VAL(); o.json_path = val; }
        else if (FLAG("--policy")) { NEED_VAL(); o.policy = val; }
        else if (!build && FLAG("--save-output")) { NEED_VAL(); o.save_output = val; }
        else if (build && (FLAG("-o") || FLAG("--output"))) { NEED_VAL(); out_file = val; }
        else if (build && FLAG("--arch")) {
            NEED_VAL();
            tp_error ae;
            if (tp_caps_parse_arch(val, &arch, &ae)) {
                fprintf(stderr, "tprof: --arch: %s\n", ae.msg);
                return 2;
            }
        } else if (!build && FLAG("--engine")) { NEED_VAL(); engine = val; }
        else if (FLAG("--policy-file")) { NEED_VAL(); o.policy_file = val; }
        else if (FLAG("--calib")) {
            NEED_VAL();
            if (strcmp(val, "max") == 0) o.calib.method = TP_CALIB_MAX;
            else if (strcmp(val, "percentile") == 0) o.calib.method = TP_CALIB_PERCENTILE;
            else {
                fprintf(stderr, "tprof: --calib: unknown method '%s' (expected max or percentile)\n", val);
                return 2;
            }
        } else if (FLAG("--gelu")) {
            NEED_VAL();
            if (two_way(name, val, "form", "erf", "tanh", &o.gelu_tanh)) return 2;
        } else if (FLAG("--attention")) {
            NEED_VAL();
            static const char *names[] = {"auto", "flash", "cudnn", "classic", "wgmma"};
            o.attention = -1;
            for (int k = 0; k < 5; k++)
                if (strcmp(val, names[k]) == 0) o.attention = k;
            if (o.attention < 0) {
                fprintf(stderr, "tprof: --attention: unknown implementation '%s' (expected auto, flash, wgmma, cudnn "
                                "or classic)\n", val);
                return 2;
            }
        } else if (FLAG("--calib-percentile")) {
            NEED_VAL();
            if (parse_double(name, val, 1e-9, 100, &o.calib.percentile)) return 2;
            o.calib.method = TP_CALIB_PERCENTILE;
        }
        else if (profile && FLAG("--out")) { NEED_VAL(); out_dir = val; }
        else if (profile && FLAG("--profile-iters")) { NEED_VAL(); if (parse_int(name, val, 1, 1000, &prof_iters)) return 2; }
        else if (profile && FLAG("--top")) { NEED_VAL(); if (parse_int(name, val, 1, 1000, &top)) return 2; }
        else if (FLAG("--batch")) {
            NEED_VAL();
            /* one size, or a comma list for a sweep (tprof bench only) */
            n_batches = 0;
            for (const char *q = val; n_batches < MAX_BATCHES;) {
                char one[32];
                const size_t len = strcspn(q, ",");
                if (len == 0 || len >= sizeof one) {
                    fprintf(stderr, "tprof: --batch '%s': expected N or a comma list such as 1,8,64,256\n", val);
                    return 2;
                }
                memcpy(one, q, len);
                one[len] = '\0';
                if (parse_int(name, one, 1, 1 << 20, &batches[n_batches])) return 2;
                n_batches++;
                if (!q[len]) break;
                q += len + 1;
                if (n_batches == MAX_BATCHES) {
                    fprintf(stderr, "tprof: --batch '%s': at most %d sizes\n", val, MAX_BATCHES);
                    return 2;
                }
            }
            batch = batches[0];
        }
        else if (FLAG("--iterations")) { NEED_VAL(); if (parse_int(name, val, 1, 100000, &iters)) return 2; }
        else if (FLAG("--seed")) { NEED_VAL(); if (parse_int(name, val, 0, 0x7FFFFFFFL, &seed)) return 2; }
        else if (FLAG("--ref-images") || FLAG("--ref-samples")) { NEED_VAL(); if (parse_int(name, val, 1, 1 << 20, &ref)) return 2; }
        else if (FLAG("--reference")) {
            NEED_VAL();
            static const char *refs[] = {"gpu", "cpu", "none"};
            int kref = -1;
            for (int q = 0; q < 3; q++)
                if (strcmp(val, refs[q]) == 0) kref = q;
            if (kref < 0) {
                fprintf(stderr, "tprof: --reference '%s': expected gpu, cpu or none\n", val);
                return 2;
            }
            o.reference = (tp_reference_kind)(TP_REF_GPU + kref);
        }
        else if (FLAG("--warmup")) { NEED_VAL(); if (parse_double(name, val, 0, 3.6e6, &warm)) return 2; }
        else if (FLAG("--duration")) { NEED_VAL(); if (parse_double(name, val, 0, 3600, &dur)) return 2; }
        else if (FLAG("--device")) {
            NEED_VAL();
            if (strcmp(val, "gpu") == 0) o.device = TP_DEVICE_GPU;
            else if (strcmp(val, "cpu") == 0) o.device = TP_DEVICE_CPU;
            else {
                fprintf(stderr, "tprof: --device '%s': expected gpu or cpu\n", val);
                return 2;
            }
            device_given = 1;
        } else if ((knob = parse_knob(name, val, argc, argv, &i, &k)) < 0) {
            return 2;
        } else if (!knob) {
            fprintf(stderr, "tprof: unknown option '%s' (tprof %s --help lists them)\n", a,
                    compare ? "compare" : profile ? "profile" : "bench");
            return 2;
        }
#undef FLAG
#undef NEED_VAL
    }

    if (build && !out_file) {
        fprintf(stderr, "tprof: build: name the engine file with -o FILE.tpe\n");
        return 2;
    }
    tp_engine_file ef;
    memset(&ef, 0, sizeof ef);
    if (engine) {
        /* the file carries the model, the precision, the policy and the weights */
        const char *clash = model ? "--model" : prec ? "--precision" : o.weights ? "--weights" : o.policy ? "--policy"
                            : o.policy_file ? "--policy-file" : k.n ? "a model knob" : NULL;
        if (clash) {
            fprintf(stderr, "tprof: --engine %s carries the model, precision and weights: drop %s\n", engine, clash);
            return 2;
        }
        tp_error fe = {0};
        if (tp_engine_file_read(engine, &ef, &fe)) {
            fprintf(stderr, "tprof: error: %s\n", fe.msg);
            return 1;
        }
        model = tp_model_name(&ef.model);
        prec = tp_precision_name(ef.precision);
        o.engine_file = &ef;
        o.engine_path = engine;
    }

    /* the embedded default: the GPU's main job, or the CPU's small one when there is no GPU */
    int gpu = 0;
    char why[600] = "";
    if (o.device != TP_DEVICE_CPU) gpu = have_gpu(why, sizeof why);
    if (o.device == TP_DEVICE_AUTO && !gpu) {
        o.device = TP_DEVICE_CPU;
        if (build) { /* no run on the CPU: build only plans and writes */
        } else if (!model && batch < 0 && !prec)
            printf("No GPU found (%s): running the CPU default, vit-tiny at batch 1 in fp32.\n", why);
        else printf("No GPU found (%s): running on the CPU.\n", why);
    } else if (o.device == TP_DEVICE_AUTO) {
        o.device = TP_DEVICE_GPU;
    }
    (void)device_given;
    int on_cpu = o.device == TP_DEVICE_CPU;
    if (!model) model = on_cpu ? "vit-tiny" : "vit-b16";
    if (batch < 0) batch = on_cpu ? 1 : 64;
    if (!prec) prec = on_cpu ? "fp32" : "fp16,fp8";
    if (iters < 0) iters = on_cpu ? 3 : 10;
    if (dur < 0) dur = on_cpu ? 0 : 3;

    tp_error err = {0};
    if (engine) {
        o.model = ef.model;
    } else if (tp_model_preset(model, &o.model, &err)) {
        fprintf(stderr, "tprof: --model: %s\n", err.msg);
        return 2;
    }
    if (apply_knobs(&k, &o.model)) return 2;
    int np = parse_precisions(prec, o.precs, TP_MAX_PRECISIONS);
    if (np < 0) return 2;
    o.n_precs = np;
    o.batch = (int)batch;
    o.iterations = (int)iters;
    o.duration_s = dur;
    o.warmup_ms = warm;
    o.seed = (uint64_t)seed;
    o.ref_samples = (int)ref;
    o.writer = tp_bench_text_writer();
    o.command_line = cmdline;
    if (profile) {
        o.profile_iters = (int)prof_iters;
        o.top_n = (int)top;
        o.out_dir = out_dir;
        o.compare = compare;
    }
    if (build && o.gelu_tanh) {
        fprintf(stderr, "tprof: --gelu: chosen when an engine runs (tprof bench --engine FILE --gelu tanh), not "
                        "stored in the engine file\n");
        return 2;
    }
    if (n_batches > 1 && (build || profile)) {
        fprintf(stderr, "tprof: --batch: a list of sizes (a sweep) is for tprof bench; %s takes one\n",
                build ? "tprof build" : compare ? "tprof compare" : "tprof profile");
        return 2;
    }
    int bsizes[MAX_BATCHES];
    for (int i = 0; i < n_batches; i++) bsizes[i] = (int)batches[i];
    tp_bench_row rows[MAX_BATCHES * TP_MAX_PRECISIONS];
    tp_status st = build           ? tp_build_run(&o, out_file, arch, &err)
                   : n_batches > 1 ? tp_bench_sweep(&o, bsizes, n_batches, rows, &err)
                                   : tp_bench_run(&o, &err);
    if (!st && !build && n_batches > 1) tp_bench_print_sweep(&o, bsizes, n_batches, rows);
    tp_engine_file_free(&ef);
    if (st) {
        fprintf(stderr, "tprof: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}

/* tprof lint: the format rules for a model configuration, no GPU. Exit 0: every requested format usable as
 * asked; 1: one is not; 2: a bad option or model; 3: the JSON file cannot be written (the table is printed). */
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
            fprintf(stderr, "tprof: lint: unknown option '%s' (tprof --help lists them)\n", argv[i]);
            return 2;
        }
    }
    tp_model m;
    tp_error err = {0};
    if (tp_model_preset(model, &m, &err)) {
        fprintf(stderr, "tprof: --model: %s\n", err.msg);
        return 2;
    }
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
    if (strcmp(argv[1], "bench") == 0) return cmd_bench(argc - 2, argv + 2, cmdline, 0, 0, 0);
    if (strcmp(argv[1], "profile") == 0) return cmd_bench(argc - 2, argv + 2, cmdline, 1, 0, 0);
    if (strcmp(argv[1], "compare") == 0) return cmd_bench(argc - 2, argv + 2, cmdline, 1, 1, 0);
    if (strcmp(argv[1], "build") == 0) return cmd_bench(argc - 2, argv + 2, cmdline, 0, 0, 1);
    if (strcmp(argv[1], "models") == 0) return cmd_models();
    if (strcmp(argv[1], "caps") == 0) return cmd_caps(argc - 2, argv + 2);
    if (strcmp(argv[1], "lint") == 0) return cmd_lint(argc - 2, argv + 2);
    fprintf(stderr, "tprof: unknown command '%s' (expected bench, profile, compare, build, caps, lint or models; tprof --help)\n", argv[1]);
    return 2;
}
