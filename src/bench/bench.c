/* bench.c: running the benchmark (bench.h). The order of one run: the device, the model's parameters and
 * inputs, the graphs; the FP32 reference on the first samples; then per precision: policy, plan, engine, timed
 * runs, accuracy against the reference, optional CUPTI profile; then the GPU's measured rates and each engine's
 * roofline floor. Output goes through the writer hooks (report/bench_report.h). */
#include "bench/bench.h"
#include "bench/decode.h"
#include "bench/onnx_check.h"
#include "bench/progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <unistd.h>

#include "core/check.h"
#include "core/system.h"
#include "core/util.h"
#include "formats/precision.h"
#include "exec/executor.h"
#include "io/safetensors.h"
#include "models/onnx_import.h"
#include "planner/caps.h"
#include "planner/policy.h"
#include "profile/profile_run.h"

tp_reference_kind tp_bench_reference(tp_reference_kind asked, tp_device_kind dev) {
    if (asked != TP_REF_AUTO) return asked;
    return dev == TP_DEVICE_GPU ? TP_REF_GPU : TP_REF_CPU;
}

/* One run's state: what the report shows and what the engines share. */
typedef struct {
    tp_bench_report rep;
    const tp_bench_options *o;
    tp_params params;
    tp_graph g, gref;     /* at the batch, and at the reference's rows */
    float *input, *calib; /* (B, input) fp32: timed on, calibrated on */
    float *ref, *out;     /* (R, out_cols) the reference's output; (B, out_cols) an engine's */
    int have_ref;
    float **ref_taps;     /* the reference's tapped values (gref.taps: a pipeline's stage outputs), or NULL */
    tp_roofline_rates rt_local, *rt;
    tp_cupti *cupti;        /* tprof profile's CUPTI session, open before any engine is built */
    const tp_qtensor **wq;  /* --engine: per parameter, the stored quantized weight */
    /* --tp n: every rank's parameters and prefill graph (rank 0's graph is g, tpg[0] stays empty), and the plans
     * of ranks 1.. for the engine being built (rank 0's is run_engine's) */
    int tp;
    tp_params *tpp;
    tp_graph *tpg;
    tp_plan *tpplan;
    double cpu_gflops; /* the CPU executor's rate measured on the reference (progress.h), 0 before */
} run_ctx;

static json_t *json_plan(const tp_graph *g, const tp_plan *p) {
    json_t *a = json_array();
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        /* its call in the program: the kernel, or the layer whose call computes it */
        const int head = p->prog.op_call[i];
        json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:f,s:f,s:s,s:s,s:s?}", "layer", op->layer, "op",
                                           tp_op_kind_name(op->kind), "precision", tp_precision_name(p->op_prec[i]),
                                           "flop", op->flop, "bytes", tp_program_op_bytes(&p->prog, p, g, i), "how",
                                           p->op_note[i], "kernel", tp_call_kind_get(tp_program_kind(&p->prog, i))->name,
                                           "fused_into", head != i ? g->ops[head].layer : NULL));
    }
    return a;
}

/* What an engine file says of the program against the one this run lowers (engine_file.h): said when they differ,
 * or when the file records none; the file's weights serve either. */
static void engine_program_note(const tp_engine_file *f, const tp_graph *g, const tp_plan *plan) {
    char why[512];
    const int d = tp_engine_file_program_diff(f, g, plan, why, sizeof why);
    if (d == 1)
        printf("Engine file: the program it records (lowered for sm_%d) differs from this run's (another target, "
               "another tprof's fusion rules, or --fusion / --gelu): %s; this run's program executes\n", f->target_sm,
               why);
    else if (d < 0 && !f->has_program)
        printf("Engine file: version %u records no program; this run lowers the plan into its own (program.h)\n",
               f->version);
}

/* 1 when gemm_peak.h can time precision p for an op (or engine) that runs it emulated or not: a block-scaled
 * format on native block-scaled MMA (Blackwell) cannot be, its floor stays partial */
static int peak_measurable(tp_precision p, int emulated) {
    return !tp_precision_info(p)->mx_block || emulated;
}

/* The GEMM peaks an engine of precision prec planned as p needs (bit q: tp_precision q): its own, MFU's
 * denominator, and those of every op with matrix products, for the roofline */
static unsigned rate_mask(const tp_graph *g, const tp_plan *p, tp_precision prec) {
    int emulated = 0;
    for (int i = 0; i < g->n_ops; i++) emulated += p->op_emulated[i];
    unsigned m = peak_measurable(prec, emulated) ? 1u << prec : 0;
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].matmul_flop > 0 && peak_measurable(p->op_prec[i], p->op_emulated[i])) m |= 1u << p->op_prec[i];
    return m;
}

tp_status tp_bench_onnx_params(const tp_bench_options *o, tp_params *out, tp_error *err) {
    if (o->onnx_params && o->onnx_params->n_params) {
        *out = *o->onnx_params;
        memset(o->onnx_params, 0, sizeof *o->onnx_params);
        return TP_OK;
    }
    tp_model m;
    return tp_onnx_import(o->onnx, &m, out, NULL, err);
}

tp_status tp_bench_policy(const tp_bench_options *o, tp_precision prec, tp_policy *pol, tp_error *err) {
    if (o->engine_file) {
        *pol = o->engine_file->policy; /* the engine as it was built; the GELU form is chosen when it runs */
        pol->gelu_tanh = o->gelu_tanh;
        pol->no_fusion = o->no_fusion;
        pol->fp32_tensors = o->fp32_tensors;
        if (o->kv_fp8)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "--kv-cache fp8 with --engine: an engine file does not record its "
                           "KV cache type yet; build the engine in the run");
        return TP_OK;
    }
    if (o->onnx_info && o->onnx_info->n_qdq) { /* the file's Q/DQ decide what is quantized: explicit quantization */
        if (o->policy_file)
            return tp_fail(err, TP_ERR_ARG, "--policy-file with a Q/DQ ONNX file: its Q/DQ nodes are the policy "
                           "(--policy rules still apply on top, e.g. --policy head=fp16)");
        tp_status st = tp_onnx_qdq_policy(o->onnx_info, prec, pol, err);
        if (!st && o->policy) st = tp_policy_parse(pol, o->policy, err); /* the user's rules win over the file's */
        pol->gelu_tanh = o->gelu_tanh, pol->no_fusion = o->no_fusion, pol->fp32_tensors = o->fp32_tensors;
        pol->kv_fp8 = o->kv_fp8;
        return st;
    }
    tp_policy_default(pol, prec);
    if (o->policy_file) {
        tp_policy fp;
        tp_status st = tp_policy_load_json(o->policy_file, &fp, err);
        if (st) return st;
        if (fp.def == prec) *pol = fp;
    }
    tp_status st = o->policy ? tp_policy_parse(pol, o->policy, err) : TP_OK;
    pol->gelu_tanh = o->gelu_tanh;
    pol->no_fusion = o->no_fusion;
    pol->fp32_tensors = o->fp32_tensors;
    pol->kv_fp8 = o->kv_fp8;
    return st;
}

/* "<prec>: what" into a run's phases, the seconds since *t0 (which moves to now) */
static void run_phase(tp_bench_report *rep, tp_precision p, const char *what, double *t0) {
    char name[64];
    const double now = tp_now_ms();
    snprintf(name, sizeof name, "%s %s", tp_precision_name(p), what);
    tp_phases_add(&rep->phases, name, (now - *t0) * 1e-3);
    *t0 = now;
}

/* Times the CPU executor on the whole batch (host wall clock; the CPU path has no asynchronous work), with the
 * estimate and progress lines of a long phase (progress.h) at the reference's measured rate gflops. */
static tp_status bench_cpu(const tp_bench_options *o, const tp_graph *g, const tp_params *params, const float *in,
                           float *out, double gflops, tp_bench_result *r, tp_error *err) {
    tp_status st = TP_OK;
    int n = o->iterations > 0 ? o->iterations : 1;
    char label[96];
    snprintf(label, sizeof label, "%s on the CPU, %d runs", tp_precision_name(r->prec), n + 1); /* a warm-up, n */
    tp_progress *pg = tp_progress_start(label, g, n + 1, gflops, "the reference");
    double t0 = tp_now_ms();
    do {
        st = tp_cpu_run_watched(g, params, in, out, NULL, tp_progress_watch(pg), err);
    } while (!st && tp_now_ms() - t0 < o->warmup_ms);
    if (!st && !(r->samples = malloc(sizeof(double) * (size_t)n))) st = tp_fail(err, TP_ERR_OOM, "out of host memory");
    double w0 = tp_now_ms();
    for (int i = 0; i < n && !st; i++) {
        double a = tp_now_ms();
        st = tp_cpu_run_watched(g, params, in, out, NULL, tp_progress_watch(pg), err);
        r->samples[i] = tp_now_ms() - a;
    }
    tp_progress_stop(pg);
    if (st) return st;
    r->wall_ms = tp_now_ms() - w0;
    r->n = n;
    return TP_OK;
}

/* Measures what rt lacks: the GEMM peak of each precision in mask (bit p: tp_precision p) and the copy rate. */
static tp_status measure_rates(tp_roofline_rates *rt, unsigned mask, tp_error *err) {
    for (int p = 0; p < TP_PREC_COUNT; p++) {
        if (!(mask >> p & 1) || rt->peak_tflops[p] > 0) continue;
        tp_status st = tp_gemm_peak((tp_precision)p, 8192, 50, &rt->peak_tflops[p], err);
        if (st) return st;
    }
    return rt->copy_gbps > 0 ? TP_OK : tp_copy_rate((size_t)256 << 20, 20, &rt->copy_gbps, err);
}

/* The GPU reference on the reference graph (tp_gpu_reference). */
static tp_status gpu_reference(run_ctx *c, tp_error *err) {
    tp_progress *beat = tp_progress_beat("GPU FP32 reference");
    tp_progress_step(beat, "building its engine and running it");
    const tp_status st = tp_gpu_reference_taps(&c->gref, &c->params, c->rep.gpu.sm, c->input, c->ref, c->ref_taps, err);
    tp_progress_stop(beat);
    return st;
}

/* The run's device: the GPU when asked for or found, else the CPU (with the reason kept in gerr). A build without
 * CUDA finds none (exec/executor.h: TP_EXEC_NO_CUDA) and says which build it is when the GPU was asked for. */
static tp_status resolve_device(run_ctx *c, tp_error *gerr, tp_error *err) {
    const tp_bench_options *o = c->o;
    tp_bench_report *rep = &c->rep;
    rep->dev = o->device;
    if (rep->dev != TP_DEVICE_CPU) {
        if (tp_gpu_query(0, &rep->gpu, gerr) == TP_OK) rep->dev = TP_DEVICE_GPU;
        else if (rep->dev == TP_DEVICE_GPU)
            return tp_fail(err, TP_ERR_NO_GPU, "--device gpu: %s%s", gerr->msg,
                           tp_caps_build_has_cuda() ? "" : " (CPU-only build)");
        else rep->dev = TP_DEVICE_CPU;
    }
    /* a GPU-only request: a usage error when --device cpu asked for the CPU, else no GPU here */
    const tp_status gpu_only = o->device == TP_DEVICE_CPU ? TP_ERR_ARG : TP_ERR_NO_GPU;
    if (o->profile_iters > 0 && rep->dev != TP_DEVICE_GPU)
        return tp_fail(err, gpu_only, "tprof profile traces GPU kernels and needs a GPU (%s)",
                       o->device == TP_DEVICE_CPU ? "--device cpu was given" : gerr->msg);
    rep->reference = tp_bench_reference(o->reference, rep->dev);
    if (rep->reference == TP_REF_GPU && rep->dev != TP_DEVICE_GPU)
        return tp_fail(err, gpu_only, "--reference gpu: %s", rep->dev == TP_DEVICE_CPU && o->device ==
                       TP_DEVICE_CPU ? "the run is on the CPU (--device cpu)" : gerr->msg);
    if (rep->dev == TP_DEVICE_CPU && o->device == TP_DEVICE_AUTO) printf("No GPU (%s): running on the CPU.\n", gerr->msg);
    if (rep->dev == TP_DEVICE_GPU || rep->gpu.present)
        snprintf(rep->device, sizeof rep->device, "%s (sm_%d)", rep->gpu.name, rep->gpu.sm);
    else tp_host_cpu_name(rep->device, sizeof rep->device);
    return TP_OK;
}

/* --tp n: every rank's parameters and prefill graph; c->g becomes rank 0's (what each GPU runs: its costs, its
 * plan), the reference keeps the whole model (c->params, c->gref). */
static tp_status split_ranks(run_ctx *c, tp_error *err) {
    const tp_bench_options *o = c->o;
    tp_bench_report *rep = &c->rep;
    const int n = o->tp > 1 ? o->tp : 1;
    c->tp = rep->tp = n;
    if (n == 1) return TP_OK;
    if (rep->dev != TP_DEVICE_GPU)
        return tp_fail(err, o->device == TP_DEVICE_CPU ? TP_ERR_ARG : TP_ERR_NO_GPU,
                       "--tp %d: tensor parallelism runs on GPUs, and this run is on the CPU", n);
    if (c->g.kv_len <= 0)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "--tp %d: %s is not a decoder; tprof splits decoders only", n,
                       tp_model_name(&rep->model));
    if (o->perplexity || o->engine_file)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "--tp %d with %s: unsupported (one GPU runs them)", n,
                       o->perplexity ? "--perplexity" : "--engine");
    if (o->kv_fp8) /* static scales are calibrated on one GPU's whole model */
        return tp_fail(err, TP_ERR_UNSUPPORTED, "--tp %d with --kv-cache fp8: unsupported, its scales are calibrated "
                       "on one GPU", n);
    for (int i = 0; i < o->n_precs; i++) { /* the precisions the tensor-parallel engines are tested in */
        const tp_precision q = o->precs[i];
        if (!tp_precision_info(q)->tensor_parallel)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "--tp %d with %s: unsupported (fp32, fp16, bf16, fp8-wo and "
                           "nvfp4-wo run split; %s needs activation scales calibrated on one GPU or is not tested "
                           "split)", n, tp_precision_name(q), tp_precision_name(q));
    }
    tp_status st = tp_model_tp_check(&rep->model, n, err);
    if (st) return st;
    if (!(c->tpp = calloc((size_t)n, sizeof *c->tpp)) || !(c->tpg = calloc((size_t)n, sizeof *c->tpg)) ||
        !(c->tpplan = calloc((size_t)n, sizeof *c->tpplan)))
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    const tp_step_shape s0 = {c->g.batch, c->g.tokens, 0, c->g.kv_len, 0, 0, n};
    /* without a reference nothing reads the whole model's values again: each tensor is freed once split */
    st = tp_model_shard_all(&rep->model, &c->params, n, rep->reference == TP_REF_NONE, c->tpp, err);
    for (int r = 0; r < n && !st; r++) {
        tp_step_shape s = s0;
        s.tp_rank = r;
        st = tp_model_build_step(&rep->model, &c->tpp[r], &s, &c->tpg[r], err);
    }
    if (st) return st;
    tp_graph_free(&c->g);
    c->g = c->tpg[0];
    memset(&c->tpg[0], 0, sizeof c->tpg[0]);
    rep->tp_params = c->tpp;
    return TP_OK;
}

tp_status tp_bench_check_finite(const tp_bench_options *o, const tp_params *p, tp_error *err) {
    tp_error ne = {0};
    if (!tp_params_nonfinite(p, o->weights, &ne)) return TP_OK;
    if (!o->allow_nonfinite)
        return tp_fail(err, TP_ERR_FORMAT, "%.400s; --allow-nonfinite runs them anyway", ne.msg);
    printf("Warning: %s; running anyway (--allow-nonfinite)\n", ne.msg);
    return TP_OK;
}

/* The host memory of the run's batch, from the graphs built on the parameters' shapes (tab) before anything is
 * allocated: the input and calibration batches, the outputs (the reference's, an engine's, --save-output's copies,
 * the pruning's dense copy), the stage outputs compared, and the CPU executor's peak (cpu_exec.h
 * tp_cpu_mem_estimate, the KV cache apart) over what it runs: the reference's rows when the reference is the CPU's,
 * the batch when the engines run on the CPU (one after the other: the larger counts). Not counted: a decoder's
 * greedy tokens and --perplexity's windows (at most 8 sequences), metadata. GPU memory is the engine's own check
 * (cuda_engine.c check_fits). A graph the family cannot build is left to setup, which says why. */
typedef struct {
    double io, act, kv; /* inputs and outputs; the executor's activations, scratch and copies; its KV cache */
    int64_t kv_rows, kv_len;
} batch_mem;

static void batch_memory(run_ctx *c, const tp_params *tab, batch_mem *bm) {
    const tp_bench_options *o = c->o;
    const tp_bench_report *rep = &c->rep;
    const int64_t B = o->batch, R = o->ref_samples > 0 && o->ref_samples < B ? o->ref_samples : B;
    memset(bm, 0, sizeof *bm);
    tp_graph g[2];
    memset(g, 0, sizeof g);
    tp_error e = {0};
    const int runs[2] = {rep->reference == TP_REF_CPU, rep->dev == TP_DEVICE_CPU}; /* the reference's rows, the batch */
    for (int k = 0; k < 2; k++) {
        if (tp_model_build_graph(&rep->model, tab, k ? B : R, &g[k], &e)) break;
        if (!runs[k]) continue;
        tp_cpu_mem m;
        if (tp_cpu_mem_estimate(&g[k], NULL, omp_get_max_threads(), &m, &e)) continue;
        if (m.total > bm->act + bm->kv) bm->act = m.total - m.state, bm->kv = m.state, bm->kv_rows = k ? B : R;
        bm->kv_len = g[k].kv_len;
    }
    if (g[1].n_values > 0) {
        const double in = 4.0 * (double)tp_model_input_numel(&rep->model), cols = 4.0 *
            (double)tp_value_numel(&g[1].values[g[1].output]) / (double)B;
        bm->io = 2 * in * (double)B + cols * (double)(R + B) + (o->save_output ? cols * (double)(o->n_precs * B) : 0) +
                 (o->sparsity && rep->reference != TP_REF_NONE ? cols * (double)R : 0);
        for (int k = 0; k < 2; k++) /* the reference's stage outputs; on the GPU an engine's, to compare */
            for (int t = 0; (k ? rep->dev == TP_DEVICE_GPU : 1) && rep->reference != TP_REF_NONE && t < g[k].n_taps; t++)
                bm->io += 4.0 * (double)tp_value_numel(&g[k].values[g[k].taps[t].value]);
    }
    tp_graph_free(&g[0]);
    tp_graph_free(&g[1]);
}

/* The run's host memory before anything is allocated: the parameters' fp32 values (the whole model, and with --tp
 * every rank's shards, the whole model's tensors freed as they are split when no reference keeps them) and what
 * the batch takes (batch_memory). A run the machine cannot hold is refused here with the estimate and what is
 * available, rather than killed or failing while it fills its buffers; a large one says the estimate. */
static tp_status host_memory_check(run_ctx *c, tp_error *err) {
    const tp_bench_options *o = c->o;
    const int n = o->tp > 1 ? o->tp : 1;
    tp_params tab, *sh = calloc((size_t)n, sizeof *sh);
    if (!sh) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_status st = tp_model_params_shapes(&c->rep.model, &tab, err);
    double whole = st ? 0 : 4.0 * (double)tp_params_count(&tab), shards = 0, flight = 0;
    if (!st && n > 1 && !tp_model_shard_all(&c->rep.model, &tab, n, 0, sh, &(tp_error){0})) {
        for (int r = 0; r < n; r++) shards += 4.0 * (double)tp_params_count(&sh[r]);
        /* released, each thread's tensor holds its whole values and its shards at once: the largest tensors'
         * shards, one per thread, on top (a whole tensor's shards take numel (1 + n - 1 when replicated)) */
        double *b = calloc((size_t)(tab.n_params ? tab.n_params : 1), sizeof(double));
        for (int i = 0; b && i < tab.n_params; i++) {
            const char *name = tab.params[i].name;
            for (int r = 0; r < n; r++) {
                const int j = tp_params_find(&sh[r], name);
                b[i] += j < 0 ? 0.0 : 4.0 * (double)sh[r].params[j].numel;
            }
        }
        const int threads = omp_get_max_threads() < TP_SHARD_THREADS ? omp_get_max_threads() : TP_SHARD_THREADS;
        for (int t = 0; b && t < threads && t < tab.n_params; t++) { /* the largest, one by one */
            int k = 0;
            for (int i = 1; i < tab.n_params; i++) k = b[i] > b[k] ? i : k;
            flight += b[k];
            b[k] = 0;
        }
        free(b);
    }
    for (int r = 0; r < n; r++) tp_params_free(&sh[r]);
    free(sh);
    batch_mem bm = {0};
    if (!st) batch_memory(c, &tab, &bm);
    tp_params_free(&tab);
    if (st) return st;
    /* released: at most the shards (or the whole model) plus the tensors in flight; kept: both */
    const double need = n == 1 ? whole : c->rep.reference == TP_REF_NONE ? fmax(whole, shards) + flight : whole + shards;
    tp_bench_report *rep = &c->rep;
    rep->host_need = need + bm.io + bm.act + bm.kv;
    rep->host_have = tp_host_mem_available(rep->host_have_src, sizeof rep->host_have_src);
    char b[5][32];
    rep->host_parts[0] = 0;
    if (bm.kv > 0)
        tp_append(rep->host_parts, sizeof rep->host_parts, "KV cache %s for %lld x %lld positions, ",
                  tp_fmt_bytes(bm.kv, b[0], 32), (long long)bm.kv_rows, (long long)bm.kv_len);
    if (bm.act > 0) tp_append(rep->host_parts, sizeof rep->host_parts, "activations %s, ", tp_fmt_bytes(bm.act, b[1], 32));
    tp_append(rep->host_parts, sizeof rep->host_parts, "inputs and outputs %s, fp32 parameters%s %s",
              tp_fmt_bytes(bm.io, b[2], 32), n > 1 ? " and their shards" : "", tp_fmt_bytes(need, b[3], 32));
    if (rep->host_have > 0 && rep->host_need > rep->host_have)
        return tp_fail(err, TP_ERR_OOM, "%s at batch %d: needs ~%s of host memory (%s), %s available (%s)%s",
                       tp_model_name(&rep->model), c->o->batch, tp_fmt_bytes(rep->host_need, b[0], 32), rep->host_parts,
                       tp_fmt_bytes(rep->host_have, b[4], 32), rep->host_have_src,
                       n > 1 && rep->reference != TP_REF_NONE ? "; --reference none keeps one copy of the parameters"
                       : bm.act + bm.kv + bm.io > need ? "; a smaller --batch or --ref-samples needs less" : "");
    return TP_OK;
}

/* Parameters, inputs and the two graphs. */
static tp_status setup(run_ctx *c, tp_error *err) {
    const tp_bench_options *o = c->o;
    tp_bench_report *rep = &c->rep;
    rep->model = o->model; /* the checkpoint's own configuration may set the preprocessing */
    tp_model *const mp = &rep->model;
    tp_status st = TP_OK;
    if (o->weights && !o->engine_file)
        st = tp_model_checkpoint(mp, o->weights, rep->checkpoint_note, sizeof rep->checkpoint_note, err);
    char limit[512];
    if (!st) st = tp_model_limits(mp, o->strict, limit, sizeof limit, err);
    if (st) return st;
    if (limit[0]) printf("%s\n", limit);
    c->rep.o = o;
    if (o->sparsity && (o->tp > 1 || o->engine_file))
        return tp_fail(err, TP_ERR_UNSUPPORTED, "--sparsity with %s: unsupported (%s)", o->tp > 1 ? "--tp" : "--engine",
                       o->tp > 1 ? "the weights are pruned whole, before any split" : "an engine file's weights are "
                       "stored as built");
    if (o->sparse_gemm && !o->sparsity)
        return tp_fail(err, TP_ERR_ARG, "--sparse-gemm %s without --sparsity 2:4: no 2:4 weights to run",
                       o->sparse_gemm == 1 ? "force" : "off");
    if (o->pipeline_mode && strcmp(mp->family->name, "pipeline") != 0)
        return tp_fail(err, TP_ERR_ARG, "--pipeline: %s is not a pipeline (family %s)", tp_model_name(mp),
                       mp->family->name);
    if (o->pipeline_mode && c->rep.dev != TP_DEVICE_GPU)
        return tp_fail(err, TP_ERR_ARG, "--pipeline: the modes are the GPU engine's (this run is on the CPU, whose "
                       "executor runs op by op)");
    if (o->fp32_tensors && c->rep.dev != TP_DEVICE_GPU)
        return tp_fail(err, TP_ERR_ARG, "--fp32-protect tensors: the CPU executor runs every op in FP32 already (a GPU "
                       "engine's choice)");
    if (o->pipeline_mode && o->pipeline_mode != 3 && !o->use_graph)
        return tp_fail(err, TP_ERR_ARG, "--pipeline %s with --no-graph: contradictory (--pipeline eager is eager)",
                       o->pipeline_mode == 1 ? "graph" : "modular");
    if ((st = host_memory_check(c, err))) return st;
    const char *wsrc = o->engine_file ? "weights read from the engine file"
                       : o->onnx      ? "weights read from the ONNX file"
                       : o->weights   ? "weights read from the checkpoint"
                                      : "weights synthesized";
    const double w0 = tp_now_ms();
    tp_progress *beat = tp_progress_beat("weights");
    tp_progress_step(beat, o->engine_file || o->onnx || o->weights ? "reading" : "synthesizing FP32 masters from the seed");
    st = o->engine_file ? tp_engine_file_params(o->engine_file, &c->params, err)
         : o->onnx        ? tp_bench_onnx_params(o, &c->params, err)
         : o->weights   ? tp_model_params_load(mp, o->weights, &c->params, err)
                        : tp_model_params_init(mp, o->seed, 0, &c->params, err);
    if (!st && o->weights && !o->engine_file) st = tp_bench_check_finite(o, &c->params, err);
    tp_progress_stop(beat);
    tp_phases_add(&rep->phases, wsrc, (tp_now_ms() - w0) * 1e-3);
    if (st) return st;
    tp_model_describe(mp, rep->model_desc, sizeof rep->model_desc);
    tp_model_input(mp, &rep->input);
    tp_model_output(mp, &rep->output);
    const int B = o->batch;
    const size_t in_n = (size_t)B * (size_t)tp_model_input_numel(mp); /* host_memory_check counted it */
    if ((st = tp_model_build_graph(mp, &c->params, B, &c->g, err))) return st;
    rep->g = &c->g;
    if (c->g.kv_len > 0) { /* a decoder: the graph is the prefill; decoding follows it (decode.h) */
        rep->prompt = (int)c->g.tokens;
        rep->gen = (int)(c->g.kv_len - c->g.tokens);
    }
    if ((st = split_ranks(c, err))) return st;
    rep->ref_ppl = NAN;
    if (o->perplexity && rep->prompt == 0)
        return tp_fail(err, TP_ERR_ARG, "--perplexity: %s is not a language model (no token ids, no KV cache)",
                       tp_model_name(mp));
    rep->flop = tp_graph_flop(&c->g);
    rep->matmul_flop = tp_graph_matmul_flop(&c->g);
    const tp_value *ov = &c->g.values[c->g.output];
    rep->out_cols = (int)(tp_value_numel(ov) / B);
    int64_t cols = 1;
    for (int d = 0; d < rep->output.ndim; d++) cols *= rep->output.shape[d];
    CHECK(cols == rep->out_cols); /* the family's description of its output is its graph's */
    rep->ref_rows = o->ref_samples > 0 && o->ref_samples < B ? o->ref_samples : B;
    c->input = malloc(sizeof(float) * in_n);
    c->calib = malloc(sizeof(float) * in_n);
    c->ref = malloc(sizeof(float) * (size_t)rep->ref_rows * (size_t)rep->out_cols);
    c->out = malloc(sizeof(float) * (size_t)B * (size_t)rep->out_cols);
    rep->res = calloc((size_t)o->n_precs, sizeof *rep->res);
    if (!c->input || !c->calib || !c->ref || !c->out || !rep->res)
        return tp_fail(err, TP_ERR_OOM, "out of host memory for batch %d", B);
    char cdesc[8];
    if ((st = tp_model_make_input(mp, B, o->seed, o->image, c->input, rep->input_desc, sizeof rep->input_desc,
                                  err)))
        return st;
    if (o->calib_data) { /* a calibration set of its own, apart from the data timed and checked */
        char cd[600];
        if ((st = tp_model_make_input(mp, B, o->seed + 1, o->calib_data, c->calib, cd, sizeof cd, err))) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            return tp_fail(err, st, "--calib-data: %.400s", why);
        }
        snprintf(rep->calib_desc, sizeof rep->calib_desc, "%s", cd);
        if (rep->dev != TP_DEVICE_GPU) /* read first: a missing file is named as such */
            return tp_fail(err, TP_ERR_ARG, "--calib-data: the GPU engines' calibration (static scales), and this run is "
                           "on the CPU, whose executor runs FP32 and calibrates nothing");
    } else if (o->image) {
        memcpy(c->calib, c->input, sizeof(float) * in_n); /* calibrate on the user's data */
        snprintf(rep->calib_desc, sizeof rep->calib_desc, "the input batch (%s)", o->image);
    } else if ((st = tp_model_make_input(mp, B, o->seed + 1, NULL, c->calib, cdesc, sizeof cdesc, err))) {
        return st;
    } else {
        snprintf(rep->calib_desc, sizeof rep->calib_desc, "random inputs (seed %llu)", (unsigned long long)o->seed + 1);
    }
    if (rep->reference != TP_REF_NONE && (st = tp_model_build_graph(mp, &c->params, rep->ref_rows, &c->gref, err)))
        return st;
    if (o->engine_file) { /* an engine file's quantized weights are uploaded as stored */
        c->wq = calloc((size_t)c->params.n_params, sizeof *c->wq);
        if (!c->wq) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        for (int i = 0; i < c->params.n_params && i < o->engine_file->n_tensors; i++)
            if (o->engine_file->tensors[i].qf != TP_QF_NONE) c->wq[i] = &o->engine_file->tensors[i].q;
    }
    return TP_OK;
}

static tp_status reference_run(run_ctx *c, tp_error *err);

/* --sparsity: the dense model's reference (when one runs) for the pruning cost, then the weights pruned in place,
 * before the pruned model's reference and every engine. */
static tp_status sparsify(run_ctx *c, tp_error *err) {
    tp_bench_report *rep = &c->rep;
    const size_t n = (size_t)rep->ref_rows * (size_t)rep->out_cols;
    float *dense = NULL;
    tp_status st = TP_OK;
    if (rep->reference != TP_REF_NONE) {
        if (!(dense = malloc(sizeof(float) * n))) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        st = reference_run(c, err);
        if (!st) memcpy(dense, c->ref, sizeof(float) * n);
        free(rep->ref_tokens); /* the pruned model's are the ones compared */
        rep->ref_tokens = NULL;
    }
    if (!st) st = tp_sparse_apply(&c->g, &c->params, c->o->sparse_layers, &rep->sparse, err);
    if (!st && dense) {
        st = reference_run(c, err);
        if (!st) {
            tp_accuracy_compute(c->ref, dense, rep->ref_rows, rep->out_cols, &rep->prune_cost);
            rep->has_prune_cost = 1;
        }
    }
    free(dense);
    if (st) return st;
    const tp_sparse_summary *s = &rep->sparse;
    char t1[32];
    printf("Sparsity 2:4 (--sparse-layers '%s'): %d weights of %d linears: %d pruned by magnitude along K, %d already "
           "2:4, %d left dense", s->globs, s->n_rows, s->n_linears, s->pruned, s->already, s->ineligible);
    for (int k = 0, shown = 0; k < s->n_rows && shown < 3; k++)
        if (!s->rows[k].eligible) printf("%s%s (%s)", shown++ ? "; " : ": ", s->rows[k].layer, s->rows[k].why);
    printf("\n");
    if (rep->has_prune_cost)
        printf("Pruning cost, the pruned model's FP32 reference against the dense one's (%d sample%s): cosine %.6f, "
               "relative L2 %.3e, max abs %.3e, top-1 agreement %s\n", rep->ref_rows, rep->ref_rows == 1 ? "" : "s",
               rep->prune_cost.cosine, rep->prune_cost.rel_l2, rep->prune_cost.max_abs,
               rep->output.classes ? (snprintf(t1, sizeof t1, "%.1f %%", 100 * rep->prune_cost.top1_agree), t1)
                                   : "n/a (the output is not logits)");
    return TP_OK;
}

/* The FP32 reference on the first ref_rows samples, where the run asked for one (the pruned model's with
 * --sparsity, after the dense one's). */
static tp_status reference(run_ctx *c, tp_error *err) {
    if (c->o->sparsity) return sparsify(c, err);
    return c->rep.reference == TP_REF_NONE ? TP_OK : reference_run(c, err);
}

static tp_status reference_run(run_ctx *c, tp_error *err) {
    tp_bench_report *rep = &c->rep;
    double t0 = tp_now_ms();
    tp_status st;
    if (c->gref.n_taps && !c->ref_taps && !(c->ref_taps = tp_taps_alloc(&c->gref)))
        return tp_fail(err, TP_ERR_OOM, "out of host memory for the reference's stage outputs");
    if (rep->gen > 0) /* a decoder: its generation, whose prefill gives the logits */
        st = tp_bench_reference_decode(rep, &c->params, c->input, rep->ref_rows, rep->reference == TP_REF_GPU,
                                       c->ref, err);
    else if (rep->reference == TP_REF_GPU) st = gpu_reference(c, err);
    else {
        char label[96];
        snprintf(label, sizeof label, "CPU FP32 reference, %d sample%s", rep->ref_rows, rep->ref_rows == 1 ? "" : "s");
        tp_progress *pg = tp_progress_start(label, &c->gref, 1, c->cpu_gflops, NULL);
        st = tp_cpu_run_watched(&c->gref, &c->params, c->input, c->ref, c->ref_taps, tp_progress_watch(pg), err);
        const double rate = tp_progress_stop(pg);
        if (rate > 0) c->cpu_gflops = rate;
    }
    if (!st && c->o->perplexity && rep->prompt > 0)
        st = tp_bench_perplexity(rep, &c->params, NULL, rep->reference == TP_REF_GPU, NULL, &rep->ref_ppl, err);
    if (st) return st;
    rep->ref_ms = tp_now_ms() - t0;
    tp_phases_add(&rep->phases, "FP32 reference", rep->ref_ms * 1e-3);
    c->have_ref = 1;
    printf("%s FP32 reference: %d sample%s in %.0f ms\n", rep->reference == TP_REF_GPU ? "GPU" : "CPU", rep->ref_rows,
           rep->ref_rows == 1 ? "" : "s", rep->ref_ms);
    return TP_OK;
}

/* FP8 attention's cost layer by layer (tp_engine_attention_cost), kept in r (one row per attention op the plan
 * runs in FP8) for the summary, the JSON and the comparison report. The reference's precision is that of the
 * op's qkv input (plan->value_dt). */
static tp_status attention_cost(tp_engine *e, const tp_graph *g, const tp_plan *plan, tp_bench_result *r,
                                tp_error *err) {
    double *cs = malloc(sizeof(double) * (size_t)g->n_ops), *rl = malloc(sizeof(double) * (size_t)g->n_ops);
    int n = 0;
    tp_status st = cs && rl ? tp_engine_attention_cost(e, cs, rl, &n, err) : tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (!st && !(r->attn_cost = calloc((size_t)g->n_ops, sizeof *r->attn_cost)))
        st = tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; !st && i < g->n_ops; i++) {
        if (g->ops[i].kind != TP_OP_ATTENTION || plan->op_prec[i] != TP_PREC_FP8) continue;
        tp_attn_cost *a = &r->attn_cost[r->n_attn_cost++];
        a->op = i;
        a->ref = plan->value_dt[g->ops[i].in[0]] == TP_BF16 ? TP_PREC_BF16 : TP_PREC_FP16;
        a->cosine = cs[i];
        a->rel_l2 = rl[i];
    }
    free(cs);
    free(rl);
    return st;
}

/* An engine file's GEMM selection, when it was timed where this runs (engine_file.h); NULL: time again. */
static const int *stored_gemms(const run_ctx *c, const tp_plan *plan, const tp_policy *pol) {
    const tp_bench_options *o = c->o;
    if (!o->engine_file || !o->engine_file->has_gemm || o->gemm_first) return NULL;
    const tp_engine_gemm_sel *gs = &o->engine_file->gemm;
    const tp_graph *g = &c->g;
    int file_fused = 0; /* the file runs GEMMs in tprof's kernel (TP_GEMM_CHOICE_SM90(_GELU)) */
    for (int i = 0; i < gs->n_ops; i++)
        file_fused |= gs->algo[i] == TP_GEMM_CHOICE_SM90_GELU || gs->algo[i] == TP_GEMM_CHOICE_SM90;
    const int accum = o->fp8_promote ? TP_FP8_ACCUM_PROMOTE : TP_FP8_ACCUM_FAST;
    int has_fp8 = 0; /* the FP8 accumulation matters to a plan with E4M3 GEMMs only */
    for (int i = 0; i < g->n_ops; i++)
        has_fp8 |= g->ops[i].kind == TP_OP_LINEAR && plan->value_dt[g->ops[i].in[0]] == TP_E4M3;
    if (gs->n_ops == g->n_ops && gs->batch == o->batch && (size_t)gs->cublaslt == c->rep.gpu.cublaslt_version &&
        strcmp(gs->gpu, c->rep.gpu.name) == 0 && !pol->gelu_tanh && (!o->cublaslt_only || !file_fused) &&
        (!has_fp8 || gs->fp8_accum == accum)) {
        printf("GEMM algorithms: as stored in the engine file (timed on this GPU, cuBLASLt %d, batch %d)\n",
               gs->cublaslt, gs->batch);
        return gs->algo;
    }
    printf("GEMM algorithms: timed again (the engine file's are for %s, cuBLASLt %d, batch %d%s)\n", gs->gpu,
           gs->cublaslt, gs->batch,
           pol->gelu_tanh                      ? ", without --gelu tanh"
           : o->cublaslt_only && file_fused    ? ", without --gemm cublaslt"
           : has_fp8 && gs->fp8_accum != accum ? ", with another or unrecorded --fp8-accum"
                                               : "");
    return NULL;
}

/* Static activation scales: as stored in an engine file, else calibrated on the calibration batch. *amax is
 * NULL when the plan needs none. */
static tp_status activation_scales(run_ctx *c, const tp_plan *plan, float **amax, tp_error *err) {
    const tp_graph *g = &c->g;
    *amax = NULL;
    int calibrate = 0; /* static per-tensor activation scales need the FP16 engine's amax */
    for (int v = 0; v < g->n_values; v++) /* an FP8 KV cache's scale comes from its k and v */
        calibrate |= plan->value_scaled[v] && (g->values[v].kind == TP_VAL_ACT || g->values[v].kind == TP_VAL_STATE);
    if (!calibrate) return TP_OK;
    if (!(*amax = malloc(sizeof(float) * (size_t)g->n_values))) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (c->o->engine_file && tp_engine_file_calibration(c->o->engine_file, g, *amax) > 0) return TP_OK;
    tp_status st = tp_calibrate(g, &c->params, 0, c->rep.gpu.sm, c->calib, &c->o->calib, *amax, err);
    /* a Q/DQ file's linears read their inputs at the file's scales (the rest of the amax stays calibrated: values
     * the engine stores scaled that the file does not quantize, e.g. an FP8 KV cache) */
    if (!st && c->o->onnx_info && c->o->onnx_info->n_qdq) st = tp_onnx_qdq_scales(c->o->onnx_info, g, *amax, err);
    return st;
}

/* --tp: the ranks' engines, rank 0's plan given, the others' planned here with the same policy (kept in c->tpplan
 * until the engine is destroyed). */
static tp_status build_tp(run_ctx *c, const tp_plan *plan, const tp_policy *pol, const tp_engine_options *eo,
                          tp_engine **e, tp_error *err) {
    const int n = c->tp;
    const tp_graph **gs = calloc((size_t)n, sizeof *gs);
    const tp_params **ps = calloc((size_t)n, sizeof *ps);
    const tp_plan **pls = calloc((size_t)n, sizeof *pls);
    tp_status st = gs && ps && pls ? TP_OK : tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int r = 0; r < n && !st; r++) {
        gs[r] = r ? &c->tpg[r] : &c->g;
        ps[r] = &c->tpp[r];
        pls[r] = r ? &c->tpplan[r] : plan;
        if (r) st = tp_plan_build_policy(gs[r], pol, c->rep.gpu.sm, &c->tpplan[r], err);
    }
    if (!st) st = tp_engine_build_tp(gs, ps, pls, n, eo, e, err);
    if (!st) snprintf(c->rep.tp_desc, sizeof c->rep.tp_desc, "%s", tp_engine_nccl(*e));
    free(gs);
    free(ps);
    free(pls);
    return st;
}

/* Builds, checks and times engine pi on the GPU; the engine stays for the profiled run, which follows. */
static tp_status gpu_engine(run_ctx *c, const tp_plan *plan, const tp_policy *pol, const tp_policy *dpol,
                            tp_bench_result *r, tp_engine **out, tp_error *err) {
    const tp_bench_options *o = c->o;
    const tp_graph *g = &c->g;
    float *amax = NULL;
    double b0 = tp_now_ms(), t0 = b0;
    char blabel[96];
    snprintf(blabel, sizeof blabel, "%s: building the engine", tp_precision_name(plan->requested));
    tp_phase_clock clk = {tp_progress_beat(blabel), &r->build_phases, NULL, NULL, 0};
    tp_phase_clock_next(&clk, "calibration");
    tp_status st = activation_scales(c, plan, &amax, err);
    tp_engine_options eo = {.device = 0, .use_graph = o->use_graph && o->pipeline_mode != 3,
                            .modular = o->pipeline_mode == 2, .sparse = !o->sparsity || o->sparse_gemm == 2 ? 0 : o->sparse_gemm == 1 ? 2 : 1, .gemm_first = o->gemm_first,
                            .cublaslt_only = o->cublaslt_only, .fp8_promote = o->fp8_promote,
                            .gemm_choice = stored_gemms(c, plan, pol), .act_amax = amax,
                            .hook = c->cupti ? tp_cupti_hook : NULL, .hook_user = c->cupti, .weights_q = c->wq,
                            .attention = (tp_attn_impl)o->attention,
                            .gemv_groups = o->gemv_groups, /* lays the groups out for the decode engine */
                            .no_pdl = o->no_pdl, .parallel_launch = o->tp_parallel_launch,
                            .on_phase = tp_phase_clock_next, .phase_user = &clk};
    /* --prefill-activations fp8: the weights laid out for the weight-only decode engine's groups (its plan's) */
    tp_plan lp = {0};
    const int a8 = dpol != pol;
    if (!st && a8 && !(st = tp_plan_build_policy(g, dpol, c->rep.gpu.sm, &lp, err))) eo.group_layout = &lp;
    tp_engine *e = NULL;
    if (!st && c->tp > 1) st = build_tp(c, plan, pol, &eo, &e, err);
    else if (!st) st = tp_engine_build(g, &c->params, plan, &eo, &e, err);
    if (a8) tp_plan_free(&lp);
    free(amax);
    *out = e;
    tp_phase_clock_next(&clk, NULL); /* closes the last step */
    tp_progress_stop(clk.beat);
    r->build_ms = tp_now_ms() - b0;
    run_phase(&c->rep, r->prec, "build", &t0);
    for (int i = 0; !st && i < g->n_ops; i++) {
        /* what the engine chose where it chose, into the plan's record and the summary */
        const char *im = tp_engine_op_impl(e, i);
        if (!im) continue;
        json_t *row = json_array_get(r->plan, (size_t)i);
        char how[520];
        snprintf(how, sizeof how, "%s; %s", plan->op_note[i], im);
        json_object_set_new(row, "how", json_string(how));
        json_object_set_new(row, "implementation", json_string(im));
        if (!r->attn_impl[0] && g->ops[i].kind == TP_OP_ATTENTION) snprintf(r->attn_impl, sizeof r->attn_impl, "%s", im);
        if (!r->gelu_impl[0] && g->ops[i].kind == TP_OP_LINEAR && strstr(im, "GELU"))
            snprintf(r->gelu_impl, sizeof r->gelu_impl, "%s: %s", g->ops[i].layer, im);
    }
    if (!st && o->sparsity && o->sparse_gemm == 2)
        printf("%s: 2:4 sparse GEMMs not tried (--sparse-gemm off): the pruned weights run the dense GEMMs\n",
               tp_precision_name(plan->requested));
    if (!st && o->sparsity && o->sparse_gemm != 2) { /* what ran of the 2:4 GEMMs: per op in the plan's "how" and r->sparse, the sum here */
        int ran = 0, planned = 0;
        double us_s = 0, us_d = 0, us_run = 0;
        if (!(r->sparse = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *r->sparse)))
            st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        for (int i = 0; !st && i < g->n_ops; i++) {
            double a = 0, b = 0;
            const char *why = NULL;
            const int k = tp_engine_sparse_op(e, i, &a, &b, &why);
            if (k != -1) { /* a linear with a 2:4 weight */
                tp_sparse_op_row *row = &r->sparse[r->n_sparse++];
                row->op = i, row->state = k < 0 ? -1 : k, row->sparse_us = a, row->dense_us = b;
                if (why) snprintf(row->why, sizeof row->why, "%s", why);
            }
            if (k < 0) continue;
            planned++, ran += k, us_s += a, us_d += b, us_run += k ? a : b;
        }
        printf("%s: 2:4 sparse GEMMs (cuSPARSELt) ran for %d of %d linears planned sparse; at build their GEMMs took "
               "%.1f us sparse against %.1f us dense, %.1f us as chosen (each linear's \"how\" in --plan and the JSON "
               "says which ran)\n", tp_precision_name(plan->requested), ran, planned, us_s, us_d, us_run);
        if (planned > 0) /* measured, not understood: docs/sparsity.md "A process that ran cuSPARSELt's kernels" */
            printf("%s: note: cuSPARSELt's kernels ran while this engine was built; on an H100 (2026-11-26) such an "
                   "engine ran 4-5 %% slower than the same engine built without them, whether or not any linear ran "
                   "sparse (a lower clock at the same power cap; docs/sparsity.md)\n", tp_precision_name(plan->requested));
    }
    /* the one CUDA graph's kernels and programmatic edges (a modular pipeline's are per stage: not summed here) */
    if (!st && c->tp <= 1 && o->pipeline_mode != 2 && (r->fwd_pdl_edges = tp_engine_pdl_edges(e, &r->fwd_edges)) >= 0)
        r->fwd_kernels = tp_engine_graph_kernels(e);
    for (int i = 0; !st && i < g->n_ops; i++) { /* the bytes of the fusions the build made (a GELU) */
        r->cost[i].bytes = tp_engine_op_bytes(e, i);
        json_object_set_new(json_array_get(r->plan, (size_t)i), "bytes", json_real(r->cost[i].bytes));
    }
    if (!st) st = tp_engine_set_input(e, c->input, err);
    if (!st) st = tp_engine_forward(e, err);
    if (!st) st = tp_engine_get_output(e, c->out, err);
    char tlabel[64];
    snprintf(tlabel, sizeof tlabel, "%s: timed runs", tp_precision_name(r->prec));
    tp_progress *tbeat = st ? NULL : tp_progress_beat(tlabel);
    tp_progress_step(tbeat, "warm-up, then at least --iterations runs and --duration seconds");
    if (!st) st = tp_engine_benchmark(e, o->warmup_ms, o->iterations, o->duration_s * 1e3, &r->samples, &r->n,
                                      &r->wall_ms, err);
    tp_progress_stop(tbeat);
    if (!st) run_phase(&c->rep, r->prec, c->rep.gen > 0 ? "prefill runs" : "timed runs", &t0);
    if (!st && c->rep.gen > 0) st = tp_bench_decode(&c->rep, &c->params, dpol, e, c->cupti, c->rt, r, err);
    if (!st && c->rep.gen > 0) run_phase(&c->rep, r->prec, "decode", &t0);
    int n_fp8_attn = 0;
    for (int i = 0; i < g->n_ops; i++) n_fp8_attn += g->ops[i].kind == TP_OP_ATTENTION && plan->op_prec[i] == TP_PREC_FP8;
    if (!st && n_fp8_attn) st = attention_cost(e, g, plan, r, err);
    if (e) {
        r->weight_bytes = tp_engine_weight_bytes(e);
        r->act_bytes = tp_engine_activation_bytes(e);
    }
    return st;
}

/* What an engine's plan says before it runs: ops in the format, emulated ops, weight bytes, roofline costs. */
static tp_status record_plan(run_ctx *c, const tp_plan *plan, tp_bench_result *r, tp_error *err) {
    const tp_graph *g = &c->g;
    r->n_ops = g->n_ops;
    /* --prefill-activations fp8 plans fp8-wo's prefill as fp8 (W8A8): its quantized ops and its GEMM peak (MFU's
     * denominator) are fp8's */
    const tp_precision pq = r->prec == TP_PREC_FP8_WO && plan->requested == TP_PREC_FP8 ? TP_PREC_FP8 : r->prec;
    r->mfu_prec = pq;
    for (int i = 0; i < g->n_ops; i++) {
        r->n_quant_ops += plan->op_prec[i] == pq && tp_precision_quantized(pq);
        r->n_emulated_ops += plan->op_emulated[i];
    }
    r->format_weight_bytes = tp_plan_weight_bytes(plan, g);
    r->plan = json_plan(g, plan);
    if (!(r->cost = malloc(sizeof *r->cost * (size_t)g->n_ops))) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    r->n_cost = g->n_ops;
    r->rate_mask = rate_mask(g, plan, pq);
    for (int i = 0; i < g->n_ops; i++)
        r->cost[i] = (tp_op_cost){plan->op_prec[i], g->ops[i].matmul_flop, tp_program_op_bytes(&plan->prog, plan, g, i)};
    return TP_OK;
}

/* A pipeline's drift per stage: the engine's tapped values (one more eager pass) against the reference's. */
static tp_status stage_drift(run_ctx *c, tp_engine *e, tp_bench_result *r, tp_error *err) {
    float **taps = tp_taps_alloc(&c->g);
    r->drift = malloc(sizeof *r->drift * (size_t)c->g.n_taps);
    if (!taps || !r->drift) {
        tp_taps_free(&c->g, taps);
        return tp_fail(err, TP_ERR_OOM, "out of host memory for the stage outputs");
    }
    tp_status st = tp_engine_capture(e, taps, err);
    if (!st) {
        r->n_drift = tp_stage_drift_compute(&c->g, taps, &c->gref, c->ref_taps, r->drift);
        CHECK(r->n_drift != -1); /* the same model at two batch sizes taps the same values */
        if (r->n_drift < 0) {
            r->n_drift = 0;
            st = tp_fail(err, TP_ERR_OOM, "out of host memory comparing the stage outputs");
        }
    }
    tp_taps_free(&c->g, taps);
    return st;
}

/* --prefill-activations fp8: the weight-only prefill's accuracy beside the W8A8 one's (r->acc_wo), so the FP8
 * activations' cost shows on its own: an fp8-wo engine of the same graph, on e's weights (shared: the same E4M3
 * codes and scales, nothing uploaded), one forward pass on the same input, against the same reference. */
static tp_status weight_only_accuracy(run_ctx *c, tp_engine *e, const tp_policy *wpol, tp_bench_result *r,
                                      tp_error *err) {
    const tp_bench_options *o = c->o;
    const int cols = c->rep.out_cols;
    tp_plan plan;
    tp_status st = tp_plan_build_policy(&c->g, wpol, c->rep.gpu.sm, &plan, err);
    if (st) return st;
    float *out = malloc(sizeof(float) * (size_t)o->batch * (size_t)cols);
    tp_engine_options eo = {.device = 0, .use_graph = 0, .share = e, .weights_q = c->wq,
                            .attention = (tp_attn_impl)o->attention, .gemm_first = 1};
    tp_engine *w = NULL;
    if (!out) st = tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (!st) st = tp_engine_build(&c->g, &c->params, &plan, &eo, &w, err);
    if (!st) st = tp_engine_set_input(w, c->input, err);
    if (!st) st = tp_engine_forward(w, err);
    if (!st) st = tp_engine_get_output(w, out, err);
    if (!st) {
        tp_accuracy_compute(out, c->ref, c->rep.ref_rows, cols, &r->acc_wo);
        printf("%s: the prefill's accuracy with FP8 activations: cosine %.6f, relative L2 %.3e; weight-only (FP16 "
               "activations, the same weights): cosine %.6f, relative L2 %.3e (the activations' cost: %+.2e in "
               "cosine)\n", tp_precision_name(r->prec), r->acc.cosine, r->acc.rel_l2, r->acc_wo.cosine,
               r->acc_wo.rel_l2, r->acc.cosine - r->acc_wo.cosine);
    }
    tp_engine_destroy(w);
    tp_plan_free(&plan);
    free(out);
    return st;
}

/* Engine pi: policy, plan, build, timed runs, accuracy, profile. */
static tp_status run_engine(run_ctx *c, int pi, tp_error *err) {
    const tp_bench_options *o = c->o;
    tp_bench_report *rep = &c->rep;
    tp_bench_result *r = &rep->res[pi];
    const tp_graph *g = &c->g;
    r->prec = o->precs[pi];
    tp_plan plan;
    tp_policy pol, dpol; /* the engine's, its decode engine's (--prefill-activations fp8: fp8 W8A8, fp8-wo) */
    tp_status st = tp_bench_policy(o, r->prec, &pol, err);
    if (st) return st;
    dpol = pol;
    const int a8 = o->prefill_act_fp8 && r->prec == TP_PREC_FP8_WO && rep->dev == TP_DEVICE_GPU && c->tp <= 1;
    if (a8 && (st = tp_bench_policy(o, TP_PREC_FP8, &pol, err))) return st;
    if (pi == 0 || o->policy || o->policy_file) tp_policy_warn(&pol, g, stdout);
    if ((st = tp_plan_build_policy(g, &pol, rep->dev == TP_DEVICE_GPU ? rep->gpu.sm : 0, &plan, err))) return st;
    if (a8)
        printf("%s: --prefill-activations fp8: the prefill's linears on the FP8 tensor cores (W8A8, the fp8 policy: "
               "static per-tensor activation scales, calibrated), the decode weight-only on the same E4M3 weights\n",
               tp_precision_name(r->prec));
    if (o->engine_file) engine_program_note(o->engine_file, g, &plan);
    st = record_plan(c, &plan, r, err);
    if (!st && o->print_plan && o->writer && o->writer->plan) o->writer->plan(rep, pi, &plan);
    tp_engine *e = NULL; /* kept until after the summary: the profiled run follows the timed one */
    if (st) {
    } else if (rep->dev == TP_DEVICE_CPU) {
        r->weight_bytes = tp_plan_weight_bytes(&plan, g);
        r->build_ms = 0; /* nothing to build: the CPU executor runs the graph as it is */
        double t0 = tp_now_ms();
        st = bench_cpu(o, g, &c->params, c->input, c->out, c->cpu_gflops, r, err);
        if (!st) run_phase(rep, r->prec, rep->gen > 0 ? "prefill runs" : "timed runs", &t0);
        if (!st && rep->gen > 0) /* the decode phase: the executor's steps over its KV cache, at most 3 rounds */
            st = tp_bench_decode_cpu(rep, &c->params, c->input, o->iterations < 3 ? (o->iterations > 1 ? o->iterations : 1)
                                     : 3, r, err);
        if (!st && rep->gen > 0) run_phase(rep, r->prec, "decode", &t0);
    } else {
        st = gpu_engine(c, &plan, &pol, a8 ? &dpol : &pol, r, &e, err);
    }
    const int B = o->batch, cols = rep->out_cols;
    r->ppl = NAN;
    if (!st && o->perplexity && rep->prompt > 0)
        st = tp_bench_perplexity(rep, &c->params, rep->dev == TP_DEVICE_GPU ? &pol : NULL, 0, e, &r->ppl, err);
    if (!st) {
        tp_latency_stats_compute(r->samples, r->n, &r->lat);
        if (c->have_ref) tp_accuracy_compute(c->out, c->ref, rep->ref_rows, cols, &r->acc);
        else r->acc = (tp_accuracy){NAN, NAN, NAN, NAN, 0, 0};
        /* rows beyond the reference still must be finite */
        for (size_t k = (size_t)rep->ref_rows * cols; k < (size_t)B * cols; k++) r->acc.nonfinite += !isfinite(c->out[k]);
        if (!c->have_ref)
            for (size_t k = 0; k < (size_t)rep->ref_rows * cols; k++) r->acc.nonfinite += !isfinite(c->out[k]);
        if (e && c->have_ref && c->ref_taps) st = stage_drift(c, e, r, err);
        if (!st && a8 && c->have_ref) st = weight_only_accuracy(c, e, &dpol, r, err);
    }
    if (!st) {
        r->ok = 1;
        rep->n_res = pi + 1;
        if (o->writer && o->writer->result) o->writer->result(rep, pi);
        if (o->save_output) {
            if ((r->output = malloc(sizeof(float) * (size_t)B * cols))) memcpy(r->output, c->out, sizeof(float) * (size_t)B * cols);
            else st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        }
    }
    double tprof0 = tp_now_ms();
    if (!st && c->cupti) {
        tp_profile_request req = {tp_model_name(&rep->model), B, rep->gpu.name, r->lat.median, o->profile_iters,
                                  o->top_n, o->out_dir, c->rt, NULL};
        st = tp_profile_engine(c->cupti, e, g, &plan, &req, &r->trace, &r->prof, &r->profile, err);
        r->has_prof = 1; /* trace and summary are owned even after an error */
        run_phase(rep, r->prec, "profile", &tprof0);
    }
    tp_engine_destroy(e);
    tp_plan_free(&plan);
    for (int r = 1; r < c->tp; r++) tp_plan_free(&c->tpplan[r]);
    if (st) {
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "%s", err->msg);
        tp_fail(err, st, "%s engine: %s", tp_precision_name(r->prec), m);
    }
    return st;
}

/* MFU's and the roofline's denominators, measured on the GPU (once per sweep), and each engine's floor. */
static tp_status rates_and_floors(run_ctx *c, tp_error *err) {
    tp_bench_report *rep = &c->rep;
    if (rep->dev != TP_DEVICE_GPU) return TP_OK;
    unsigned mask = 0;
    for (int pi = 0; pi < rep->n_res; pi++) mask |= rep->res[pi].rate_mask;
    const double t0 = tp_now_ms();
    tp_progress *beat = tp_progress_beat("roofline rates");
    tp_progress_step(beat, "timing the GEMM peaks and the copy rate on this GPU");
    tp_status st = measure_rates(c->rt, mask, err);
    tp_progress_stop(beat);
    tp_phases_add(&rep->phases, "roofline rates", (tp_now_ms() - t0) * 1e-3);
    if (st) return st;
    for (int pi = 0; pi < rep->n_res; pi++) {
        tp_bench_result *r = &rep->res[pi];
        r->peak_tflops = r->rate_mask >> r->mfu_prec & 1 ? c->rt->peak_tflops[r->mfu_prec] : 0.0;
        r->floor = (tp_roofline_floor){0, 0, 0, 1};
        for (int i = 0; i < r->n_cost; i++) {
            tp_roofline_floor f;
            tp_roofline_op(c->rt, r->cost[i].prec, r->cost[i].matmul_flop, r->cost[i].bytes, &f);
            tp_roofline_add(&r->floor, &f);
        }
        r->dec_floor = (tp_roofline_floor){0, 0, 0, 1};
        for (int i = 0; i < r->n_dec_cost; i++) {
            tp_roofline_floor f;
            tp_roofline_op(c->rt, r->dec_cost[i].prec, r->dec_cost[i].matmul_flop, r->dec_cost[i].bytes, &f);
            tp_roofline_add(&r->dec_floor, &f);
        }
    }
    rep->rates = c->rt;
    printf("\nDense GEMM peaks measured on this GPU (8192^3, cuBLASLt; the MFU denominators):");
    for (int p = 0; p < TP_PREC_COUNT; p++)
        if (mask >> p & 1) printf(" %s %.0f TFLOP/s", tp_precision_name((tp_precision)p), c->rt->peak_tflops[p]);
    printf("; device-to-device copy %.0f GB/s (read + write)\n", c->rt->copy_gbps);
    return TP_OK;
}

/* Profiling prints the roofline with each profile, so the rates come first: measured after an engine's timed
 * runs they would leave the GPU in another power state for its profiled ones (an FP8 forward pass traced at
 * 3.96 ms against 3.51 event-timed, on an H200). Without profiling they follow all timed runs. */
static tp_status rates_before_profiling(run_ctx *c, tp_error *err) {
    tp_status st = TP_OK;
    for (int pi = 0; c->cupti && pi < c->o->n_precs && !st; pi++) {
        tp_policy pol;
        tp_plan plan;
        unsigned m = 0;
        if (!(st = tp_bench_policy(c->o, c->o->precs[pi], &pol, err)) &&
            !(st = tp_plan_build_policy(&c->g, &pol, c->rep.gpu.sm, &plan, err))) {
            m = rate_mask(&c->g, &plan, c->o->precs[pi]);
            if (c->o->prefill_act_fp8 && c->o->precs[pi] == TP_PREC_FP8_WO) m |= 1u << TP_PREC_FP8; /* its W8A8 prefill */
            tp_plan_free(&plan);
        }
        if (!st) st = measure_rates(c->rt, m, err);
    }
    return st;
}

/* --save-output: every precision's output, one safetensors entry each */
static tp_status save_outputs(const run_ctx *c, tp_error *err) {
    const tp_bench_report *rep = &c->rep;
    tp_st_write_entry ent[TP_MAX_PRECISIONS];
    for (int i = 0; i < rep->n_res; i++) {
        memset(&ent[i], 0, sizeof ent[i]);
        ent[i].name = tp_precision_name(rep->res[i].prec);
        ent[i].dtype = TP_F32;
        ent[i].ndim = 2;
        ent[i].shape[0] = c->o->batch;
        ent[i].shape[1] = rep->out_cols;
        ent[i].data = rep->res[i].output;
    }
    tp_status st = tp_st_write(c->o->save_output, ent, rep->n_res, err);
    if (!st) printf("Outputs (per precision, safetensors): %s\n", c->o->save_output);
    return st;
}

static void run_free(run_ctx *c) {
    tp_bench_report *rep = &c->rep;
    tp_cupti_destroy(c->cupti);
    free(c->wq);
    if (rep->res)
        for (int i = 0; i < c->o->n_precs; i++) {
            tp_bench_result *r = &rep->res[i];
            free(r->samples);
            free(r->output);
            json_decref(r->plan);
            free(r->attn_cost);
            free(r->drift);
            free(r->sparse);
            free(r->cost);
            free(r->step_ms);
            free(r->tokens);
            free(r->dec_cost);
            json_decref(r->profile);
            json_decref(r->dec_profile);
            if (r->has_dec_prof) {
                tp_trace_free(&r->dec_trace);
                tp_profile_summary_free(&r->dec_prof);
            }
            if (r->has_prof) {
                tp_trace_free(&r->trace);
                tp_profile_summary_free(&r->prof);
            }
        }
    free(rep->res);
    free(rep->ref_tokens);
    tp_sparse_summary_free(&rep->sparse);
    free(c->input);
    free(c->calib);
    free(c->ref);
    free(c->out);
    tp_graph_free(&c->g);
    tp_taps_free(&c->gref, c->ref_taps);
    tp_graph_free(&c->gref);
    tp_params_free(&c->params);
    for (int r = 0; r < c->tp && c->tpp; r++) tp_params_free(&c->tpp[r]);
    for (int r = 0; r < c->tp && c->tpg; r++) tp_graph_free(&c->tpg[r]);
    free(c->tpp);
    free(c->tpg);
    free(c->tpplan);
}

/* Speedups are against FP16 when it was run (the precision users compare against), else the first. */
static int baseline_index(const tp_bench_options *o) {
    for (int i = 0; i < o->n_precs; i++)
        if (o->precs[i] == TP_PREC_FP16) return i;
    return 0;
}

tp_status tp_bench_run(const tp_bench_options *o, tp_error *err) {
    tp_status st = tp_model_validate(&o->model, err);
    if (st) return st;
    if (o->batch <= 0) return tp_fail(err, TP_ERR_ARG, "--batch %d: must be positive", o->batch);
    if (o->n_precs <= 0) return tp_fail(err, TP_ERR_ARG, "--precision: no precision given");
    for (int i = 0; i < o->n_precs; i++)
        for (int j = 0; j < i; j++)
            if (o->precs[i] == o->precs[j])
                return tp_fail(err, TP_ERR_ARG, "--precision: %s given twice", tp_precision_name(o->precs[i]));
    run_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.rep.o = o;
    c.rt = o->rates_cache ? o->rates_cache : &c.rt_local;
    c.rep.base = baseline_index(o);
    c.rep.t_start = tp_now_ms();
    tp_error gerr = {0};
    if ((st = resolve_device(&c, &gerr, err))) return st;
    if ((st = setup(&c, err))) goto done;
    if (o->writer && o->writer->start) o->writer->start(&c.rep);
    if (o->profile_iters > 0 && c.rep.dev == TP_DEVICE_GPU && (st = tp_cupti_create(&c.cupti, err))) goto done;
    if (c.cupti && o->tp > 1) tp_cupti_set_device(c.cupti, 0); /* rank 0's GPU: the launches the hooks attribute */
    if ((st = reference(&c, err))) goto done;
    if ((st = rates_before_profiling(&c, err))) goto done;
    for (int pi = 0; pi < o->n_precs && !st; pi++) st = run_engine(&c, pi, err);
    if (!st) st = rates_and_floors(&c, err);
    if (!st && o->rows_out)
        for (int pi = 0; pi < o->n_precs; pi++) {
            const tp_bench_result *r = &c.rep.res[pi];
            double qps = r->n / (r->wall_ms * 1e-3), tf = c.rep.flop / (r->lat.median * 1e-3) * 1e-12;
            o->rows_out[pi] = (tp_bench_row){r->prec, r->lat.median, qps * o->batch, tf, r->peak_tflops,
                                             r->peak_tflops > 0 ? tf / r->peak_tflops : 0.0,
                                             r->floor.known ? r->floor.ns * 1e-6 : 0.0,
                                             r->has_decode ? r->dec.median : 0.0,
                                             r->has_decode && r->dec_floor.known ? r->dec_floor.ns * 1e-6 : 0.0};
        }
    if (!st && o->writer && o->writer->end) st = o->writer->end(&c.rep, err);
    if (!st && o->save_output) st = save_outputs(&c, err);
done:
    run_free(&c);
    return st;
}

tp_status tp_bench_sweep(const tp_bench_options *o, const int *batches, int n_batches, tp_bench_row *rows,
                         tp_error *err) {
    if (n_batches <= 0) return tp_fail(err, TP_ERR_ARG, "--batch: no batch size given");
    tp_roofline_rates rates;
    memset(&rates, 0, sizeof rates);
    char *json = o->json_path ? malloc(strlen(o->json_path) + 32) : NULL;
    if (o->json_path && !json) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_status st = TP_OK;
    for (int b = 0; b < n_batches && !st; b++) {
        tp_bench_options ob = *o;
        ob.batch = batches[b];
        ob.rates_cache = &rates;
        ob.rows_out = rows + (size_t)b * (size_t)o->n_precs;
        if (json) { /* out.json -> out_b64.json; no extension: out_b64 */
            const char *dot = strrchr(o->json_path, '.'), *slash = strrchr(o->json_path, '/');
            const size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - o->json_path) : strlen(o->json_path);
            snprintf(json, strlen(o->json_path) + 32, "%.*s_b%d%s", (int)stem, o->json_path, batches[b],
                     o->json_path + stem);
            ob.json_path = json;
        }
        printf("\n##### batch %d (%d of %d) #####\n", batches[b], b + 1, n_batches);
        st = tp_bench_run(&ob, err);
        if (st) {
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%s", err->msg);
            tp_fail(err, st, "batch %d: %s", batches[b], m);
        } else if (json) {
            printf("JSON for batch %d: %s\n", batches[b], json);
        }
    }
    free(json);
    return st;
}
