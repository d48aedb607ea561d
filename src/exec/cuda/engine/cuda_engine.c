/* cuda_engine.c, the build phase (it calls engine_select.c, engine_run.c, engine_launch.c and engine_memory.c):
 * the GPU's facts (tp_gpu_query), an engine's build step by step (tpe_build: the memory check, the parameters,
 * the KV cache, a pipeline's setup, the activations, the timed choices), tp_engine_build (that, the warm-up pass
 * and the capture), tp_engine_destroy, and what builds an engine and runs it (tp_calibrate, tp_gpu_reference).
 * C11. */
#include "exec/cuda/engine/cuda_engine.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "core/check.h"
#include "core/util.h"
#include "exec/cuda/vendor/cudnn_sdpa.h"
#include "exec/cuda/engine/engine_internal.h"
#include "planner/supports.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/gemm/gemm_sm90.h"
#include "exec/cuda/kernels/decoder_ops.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/kernels/patch_embed.h"
#include "exec/cuda/kernels/scale_layout.h"
#include "formats/dtype.h"
#include "formats/qformat.h"

/* ---- GPU facts ---------------------------------------------------------------------------------------- */

/* NVML ships with the driver (libnvidia-ml.so.1), not the toolkit: loaded at run time, optional. */
static void nvml_driver_version(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    void *h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return;
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*ver)(char *, unsigned) = (int (*)(char *, unsigned))dlsym(h, "nvmlSystemGetDriverVersion");
    int (*shut)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
    if (init && ver && init() == 0) {
        char v[80];
        if (ver(v, sizeof v) == 0) snprintf(buf, n, "%s", v);
        if (shut) shut();
    }
    dlclose(h);
}

tp_status tp_gpu_query(int device, tp_gpu_info *info, tp_error *err) {
    memset(info, 0, sizeof *info);
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0) {
        cudaGetLastError();
        /* what was looked for, and found: the driver library first (CUDA's own message for a missing driver
         * speaks of a version), then the devices */
        void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (drv) dlclose(drv);
        if (!drv || ce == cudaErrorInsufficientDriver || ce == cudaErrorNoDevice || count == 0)
            return tp_fail(err, TP_ERR_NO_GPU, "no CUDA GPU: %s",
                           !drv ? "no NVIDIA driver (libcuda.so.1 not found on the loader path)"
                           : ce == cudaErrorInsufficientDriver
                               ? "the NVIDIA driver is older than this build's CUDA runtime (cudaErrorInsufficientDriver)"
                               : "the NVIDIA driver is loaded but reports no GPU");
        return tp_fail(err, TP_ERR_NO_GPU, "no CUDA GPU: cudaGetDeviceCount: %s", cudaGetErrorString(ce));
    }
    if (device < 0 || device >= count)
        return tp_fail(err, TP_ERR_ARG, "GPU %d does not exist (%d present)", device, count);
    struct cudaDeviceProp p;
    ce = cudaGetDeviceProperties(&p, device);
    if (ce != cudaSuccess) return tp_fail(err, TP_ERR_CUDA, "cudaGetDeviceProperties: %s", cudaGetErrorString(ce));
    info->present = 1;
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->sm = p.major * 10 + p.minor;
    info->sm_count = p.multiProcessorCount;
    info->mem_bytes = (double)p.totalGlobalMem;
    info->l2_bytes = (double)p.l2CacheSize;
    cudaDriverGetVersion(&info->driver_cuda);
    cudaRuntimeGetVersion(&info->runtime_cuda);
    info->cublaslt_version = tp_gemm_lib_version();
    nvml_driver_version(info->driver, sizeof info->driver);
    return TP_OK;
}

/* ---- building ------------------------------------------------------------------------------------------ */

/* The calibrated amax of the shared engine's value named `name` (NaN: no engine, no such value, or not calibrated). */
static float shared_amax(const tp_engine *s, const char *name) {
    for (int u = 0; s && u < s->g->n_values; u++)
        if (strcmp(s->g->values[u].name, name) == 0) return s->act_amax[u];
    return NAN;
}

/* The shared engine's state value (a KV cache) of this name, which a decode engine uses instead of its own; -1: none. */
static int shared_state(const tp_engine *s, const char *name) {
    for (int u = 0; s && u < s->g->n_values; u++)
        if (s->g->values[u].kind == TP_VAL_STATE && strcmp(s->g->values[u].name, name) == 0) return u;
    return -1;
}

/* An FP8 KV cache's amax: the larger of the calibrated amax of the k and v its append writes (NaN: not calibrated). */
static float kv_cache_amax(const tp_engine *e, int v) {
    for (int i = 0; i < e->g->n_ops; i++) {
        const tp_op *op = &e->g->ops[i];
        if (op->kind == TP_OP_KV_APPEND && op->out == v) {
            const float a = e->act_amax[op->in[0]], b = e->act_amax[op->in[1]];
            return isnan(a) || isnan(b) ? NAN : fmaxf(a, b);
        }
    }
    return NAN;
}

/* The device memory the engine will take, estimated from its plan before anything is allocated: weights in their
 * storage types (those a shared engine holds: none), the activation buffers of the plan's assignment
 * (tp_plan_buffers), the KV cache (unless shared) and the GEMM workspace; a refusal with the numbers when it exceeds
 * what the GPU has free (cudaMemGetInfo), instead of an allocation failing midway. Scratch buffers (im2col,
 * dequantized operands, the attention workspaces) are not counted: the estimate is a lower bound. */
static tp_status check_fits(tp_engine *e, size_t workspace, tp_error *err) {
    const tp_graph *g = e->g;
    double w = 0, kv = 0, act = 0;
    size_t *bytes = malloc(sizeof(size_t) * (size_t)(g->n_values ? g->n_values : 1));
    size_t *slot_bytes = malloc(sizeof(size_t) * (size_t)(g->n_values ? g->n_values : 1));
    int *slot = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    if (!bytes || !slot_bytes || !slot) {
        free(bytes), free(slot_bytes), free(slot);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int v = 0; v < g->n_values; v++) {
        const tp_value *val = &g->values[v];
        const double n = (double)tp_value_numel(val);
        bytes[v] = tpe_act_alloc_bytes(e, v);
        if (val->kind == TP_VAL_PARAM && !(e->share && tpe_shared_param(e, v) >= 0) && !(e->repeats && e->repeats[v] >= 0)) {
            /* native block formats store codes and scales (value_dt is the emulation's bf16) */
            const tp_qformat_traits *qt = weight_native_bs(e, v) ? tp_qformat_info(e->plan->value_qf[v]) : NULL;
            w += qt ? n * qt->bits / 8.0 + n / qt->block
                    : n * tp_dtype_info(e->plan->value_dt[v])->bits / 8.0 + (e->plan->value_dt[v] == TP_E2M1 ? n / 16 : 0);
        }
        if (val->kind == TP_VAL_STATE && shared_state(e->share, val->name) < 0) kv += (double)bytes[v];
        if (val->kind == TP_VAL_INPUT) act += (double)bytes[v];
    }
    const int n_slots = tp_plan_buffers(g, e->plan, bytes, NULL, slot, slot_bytes);
    for (int k = 0; k < n_slots; k++) act += (double)slot_bytes[k];
    free(bytes), free(slot_bytes), free(slot);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return TP_OK; /* no figure to compare with: the allocations will say */
    }
    const double need = w + act + kv + (double)workspace;
    if (need <= (double)free_b) return TP_OK;
    char b[7][32];
    return tp_fail(err, TP_ERR_OOM, "the engine needs at least %s of GPU memory (weights %s, activations %s, KV cache "
                   "%s, GEMM workspace %s) and GPU %d has %s free of %s: try a smaller batch or context, or a 4- or "
                   "8-bit format", tp_fmt_bytes(need, b[0], 32), tp_fmt_bytes(w, b[1], 32), tp_fmt_bytes(act, b[2], 32),
                   tp_fmt_bytes(kv, b[3], 32), tp_fmt_bytes((double)workspace, b[4], 32), e->device,
                   tp_fmt_bytes((double)free_b, b[5], 32), tp_fmt_bytes((double)total_b, b[6], 32));
}

/* A graph with a KV cache: the cache position (the share's, or its own), each RoPE op's frequencies, and each KV
 * attention op's kernel: a prefill (the graph starts at past 0) of F16/BF16 with a head dim the flash kernel takes
 * runs tprof's flash attention over the cache's first T rows (attention.h tpk_flash_attention_ex); every other
 * case the decode kernel (decoder_ops.h tpk_kv_attention), which reads the position on the device. */
static tp_status setup_kv(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    size_t kv16 = 0;
    if (e->feed_argmax) {
        const tp_value *in = &g->values[g->input], *o = &g->values[g->output];
        if (in->ndim != 2 || in->shape[1] != 1 || o->ndim != 2 || o->shape[0] != in->shape[0])
            return tp_fail(err, TP_ERR_ARG, "greedy feedback needs a decode graph: one token in, (B, V) logits out");
    }
    if (e->share) e->d_past = e->share->d_past;
    else if ((st = tpe_dev_alloc(e, sizeof(int), (void **)&e->d_past, "the KV cache position", err))) return st;
    if (!e->share && cudaMemset(e->d_past, 0, sizeof(int)) != cudaSuccess)
        return tp_fail(err, TP_ERR_CUDA, "clearing the KV cache position");
    if ((st = tpe_rope_tables(e, err))) return st;
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_KV_ATTENTION) continue;
        const tp_value *c = &g->values[op->in[1]];
        const int B = (int)c->shape[1], L = (int)c->shape[2], T = (int)g->tokens;
        const tp_dtype dt = e->plan->value_dt[op->in[0]];
        const int D = op->head_dim;
        const tp_kernel_shape fs = {.dt = dt, .k = D};
        const int flash = e->resets_past && T > 16 && tp_supports(TP_KERNEL_ATTENTION_FLASH, &fs, NULL, 0);
        if (flash) tpe_set_kind(e, i, TP_CALL_KV_ATTENTION_FLASH);
        if (!flash && D != 64 && D != 128 && D != 256)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: head dim %d: the decode attention kernel takes 64, 128 "
                           "and 256", op->layer, D);
        size_t ws = flash ? 0 : tpk_kv_attention_workspace(B, T, op->heads, D, L);
        if (ws > e->kv_ws_bytes) e->kv_ws_bytes = ws;
        if (flash && e->plan->value_dt[op->in[1]] == TP_E4M3) { /* the prefill's K, V dequantized */
            const size_t b16 = 2 * (size_t)B * T * (size_t)c->shape[3] * tp_dtype_info(dt)->bytes;
            if (b16 > kv16) kv16 = b16;
        }
        snprintf(e->impl_note[i], sizeof e->impl_note[i], "%s", flash
                     ? "tprof flash attention (attention.h) over the cache's first T rows: a prefill from position 0"
                     : "tprof decode attention (decoder_ops.h): split-KV over the cache, the position read on the device");
    }
    if (e->kv_ws_bytes && (st = tpe_dev_alloc(e, e->kv_ws_bytes, (void **)&e->d_kv_ws, "the decode attention workspace",
                                              err)))
        return st;
    e->act_bytes += (double)e->kv_ws_bytes;
    if (kv16 && (st = tpe_dev_alloc(e, kv16, &e->d_kv16, "the prefill's dequantized K and V", err))) return st;
    e->act_bytes += (double)kv16;
    return TP_OK;
}

int tp_engine_decode_kernel(const tp_engine *e, const char **note, int *instrs) {
    if (note) *note = e->pk_note;
    if (instrs) *instrs = tpe_persist_instructions(e);
    return e->pk_on;
}

tp_status tp_engine_persist_report(const tp_engine *e, FILE *f, tp_error *err) { return tpe_persist_report(e, f, err); }

tp_status tp_engine_persist_records(const tp_engine *e, int *op, int *sm, uint64_t *ready_ns, uint64_t *end_ns,
                                    int *n, tp_error *err) {
    return tpe_persist_records(e, op, sm, ready_ns, end_ns, n, err);
}

/* The median time of a decode step (ms) over `steps` graph replays from cache position 0, after as many untimed. */
static tp_status time_steps(tp_engine *e, int steps, double *ms, tp_error *err) {
    double t[64];
    tp_status st = TP_OK;
    if (steps > 32) steps = 32;
    for (int round = 0; round < 2 && !st; round++) {
        if (cudaMemset(e->d_past, 0, sizeof(int)) != cudaSuccess)
            return tp_fail(err, TP_ERR_CUDA, "resetting the KV cache position");
        st = tp_engine_decode(e, steps, t, NULL, err);
    }
    if (st) return st;
    for (int i = 1; i < steps; i++) /* insertion sort: a few dozen values */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            const double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    *ms = t[steps / 2];
    return TP_OK;
}

/* Under TP_DECODE_AUTO: the graph of per-call kernels (captured) and the persistent step timed alike, the faster
 * kept (its CUDA graph; the other's destroyed). */
static tp_status choose_decode_kernel(tp_engine *e, tp_error *err) {
    const int steps = (int)(e->g->kv_len - 1 < 32 ? e->g->kv_len - 1 : 32);
    double t_graph = 0, t_pk = 0;
    if (steps < 3) {
        snprintf(e->pk_note, sizeof e->pk_note, "graph of per-call kernels: a KV cache of %lld positions leaves too "
                 "few steps to time the persistent kernel against it", (long long)e->g->kv_len);
        return TP_OK;
    }
    tp_status st = time_steps(e, steps, &t_graph, err);
    if (st) return st;
    cudaGraph_t graph = e->graph;
    cudaGraphExec_t exec = e->exec;
    const int pdl = e->pdl_edges, edges = e->graph_edges, kernels = e->graph_kernels;
    e->graph = NULL, e->exec = NULL, e->pk_on = 1;
    if (!(st = tpe_warm_capture(e, err))) st = time_steps(e, steps, &t_pk, err);
    const int keep = !st && t_pk < t_graph;
    cudaGraph_t drop_g = keep ? graph : e->graph;
    cudaGraphExec_t drop_x = keep ? exec : e->exec;
    if (drop_x) cudaGraphExecDestroy(drop_x);
    if (drop_g) cudaGraphDestroy(drop_g);
    if (!keep) {
        e->graph = graph, e->exec = exec, e->pk_on = 0;
        e->pdl_edges = pdl, e->graph_edges = edges, e->graph_kernels = kernels;
    }
    if (st) return st;
    snprintf(e->pk_note, sizeof e->pk_note, "%s: timed at build over %d steps: persistent kernel %.4f ms, graph of %d "
             "kernels %.4f ms a step", keep ? "persistent kernel" : "graph of per-call kernels", steps, t_pk, kernels,
             t_graph);
    return TP_OK;
}

/* The persistent step as asked (GRAPH: none; PERSISTENT: built or an error; AUTO: built where it can be, said why
 * not otherwise). */
static tp_status setup_decode_kernel(tp_engine *e, const tp_engine_options *opt, tp_error *err) {
    e->decode_kernel = opt->decode_kernel;
    if (opt->decode_kernel == TP_DECODE_GRAPH || !e->feed_argmax) return TP_OK;
    tp_error why = {0};
    tp_status st = TP_OK;
    if (opt->hook && opt->decode_kernel == TP_DECODE_AUTO)
        st = tp_fail(&why, TP_ERR_UNSUPPORTED, "persistent decode step: --decode-kernel auto chooses by timing, which "
                     "a profiled engine does not do (profile the persistent step with --decode-kernel persistent)");
    else if (!opt->use_graph && opt->decode_kernel == TP_DECODE_AUTO)
        st = tp_fail(&why, TP_ERR_UNSUPPORTED, "persistent decode step: chosen by timing CUDA graphs, and this engine "
                     "launches eagerly");
    else st = tpe_persist_setup(e, &why);
    if (!st) {
        e->pk_on = opt->decode_kernel == TP_DECODE_PERSISTENT;
        snprintf(e->pk_note, sizeof e->pk_note, "persistent kernel (--decode-kernel persistent): %d instructions on "
                 "%d SMs", tpe_persist_instructions(e), e->sms);
        return TP_OK;
    }
    if (st == TP_ERR_OOM || st == TP_ERR_CUDA || opt->decode_kernel == TP_DECODE_PERSISTENT) {
        tp_fail(err, st, "%s", why.msg);
        return st;
    }
    snprintf(e->pk_note, sizeof e->pk_note, "graph of per-call kernels: %.280s", why.msg);
    return TP_OK;
}

/* tells the caller which step of the build starts now (tp_engine_options on_phase) */
static void phase(const tp_engine_options *opt, const char *name) {
    if (opt->on_phase) opt->on_phase(opt->phase_user, name);
}

tp_status tp_engine_build(const tp_graph *g, const tp_params *params, const tp_plan *plan,
                          const tp_engine_options *opt, tp_engine **out, tp_error *err) {
    if (g->tp_size > 1)
        return tp_fail(err, TP_ERR_ARG, "the graph is rank %d of %d of a tensor-parallel model: build every rank "
                       "with tp_engine_build_tp", g->tp_rank, g->tp_size);
    tp_status st = tpe_build(g, params, plan, opt, out, err);
    if (!st && opt->decode_kernel != TP_DECODE_GRAPH) phase(opt, "persistent step setup");
    if (!st) st = setup_decode_kernel(*out, opt, err);
    if (!st) phase(opt, "CUDA graph capture");
    if (!st) st = tpe_warm_capture(*out, err);
    if (!st && (*out)->pk && !(*out)->pk_on && opt->decode_kernel == TP_DECODE_AUTO && opt->use_graph) {
        phase(opt, "decode-kernel choice");
        st = choose_decode_kernel(*out, err);
    }
    if (st && *out) {
        tp_engine_destroy(*out);
        *out = NULL;
    }
    return st;
}

tp_status tpe_build(const tp_graph *g, const tp_params *params, const tp_plan *plan, const tp_engine_options *opt,
                    tp_engine **out, tp_error *err) {
    tp_status st = TP_OK;
    float *h_scales = NULL;
    *out = NULL;
    tp_engine *e = calloc(1, sizeof *e);
    if (!e) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    e->g = g;
    e->params = params;
    e->plan = plan;
    e->use_graph = opt->use_graph;
    e->no_pdl = opt->no_pdl != 0;
    e->parallel_launch = opt->parallel_launch != 0;
    e->fp8_promote = opt->fp8_promote != 0;
    e->hook = opt->hook;
    e->hook_user = opt->hook_user;
    e->weights_q = opt->weights_q;
    e->share = opt->share;
    e->feed_argmax = opt->feed_argmax;
    e->groups_mode = opt->gemv_groups;
    e->resets_past = g->kv_len > 0 && g->past == 0;
    e->device = opt->device;
    e->n_ranks = 1;
    e->dptr = calloc((size_t)g->n_values, sizeof(void *));
    e->gplan = calloc((size_t)g->n_ops, sizeof(tp_gemm_plan *));
    e->d_bscale = calloc((size_t)g->n_values, sizeof(void *));
    e->sdpa = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *e->sdpa);
    e->impl_note = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *e->impl_note);
    e->group_lead = malloc(sizeof(int) * (size_t)(g->n_ops ? g->n_ops : 1));
    e->group_next = malloc(sizeof(int) * (size_t)(g->n_ops ? g->n_ops : 1));
    e->group_cs = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(float *));
    e->gemm_us = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(double));
    e->cutlass_tile = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(int));
    e->wglobal = calloc((size_t)g->n_values, sizeof(float));
    e->alpha = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(float));
    e->act_amax = malloc(sizeof(float) * (size_t)(g->n_values ? g->n_values : 1));
    h_scales = malloc(sizeof(float) * 2 * SCALE_SLOT * (size_t)g->n_values);
    if (!e->dptr || !e->gplan || !e->d_bscale || !e->sdpa || !e->impl_note || !e->group_lead || !e->group_next ||
        !e->group_cs || !e->gemm_us || !e->cutlass_tile || !e->wglobal || !e->alpha || !e->act_amax || !h_scales) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        goto fail;
    }
    phase(opt, "setup");
    if ((st = tp_program_copy(&plan->prog, &e->prog, err))) goto fail; /* the plan's program, this engine's to rewrite */
    for (int v = 0; v < 2 * SCALE_SLOT * g->n_values; v++) h_scales[v] = 1.0f;
    CU_TRY(cudaSetDevice(opt->device));
    if ((st = tpe_find_repeats(e, err))) goto fail;
    if ((st = check_fits(e, opt->workspace_bytes ? opt->workspace_bytes : (32u << 20), err))) goto fail;
    CU_TRY(cudaDeviceGetAttribute(&e->sms, cudaDevAttrMultiProcessorCount, opt->device));
    CU_TRY(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking));

    /* activation scales from calibration: amax / 448 (max calibration); without act_amax, a decode engine takes
     * the amax the shared (prefill) engine calibrated for the value of the same name */
    int scaled = 0; /* the name lookups only where a static scale is needed (not in a 16-bit decode engine) */
    for (int v = 0; v < g->n_values; v++) scaled |= plan->value_scaled[v] && g->values[v].kind != TP_VAL_PARAM;
    for (int v = 0; v < g->n_values; v++)
        e->act_amax[v] = g->values[v].kind == TP_VAL_PARAM ? NAN
                         : opt->act_amax ? opt->act_amax[v]
                         : scaled        ? shared_amax(opt->scales_from ? opt->scales_from : e->share, g->values[v].name)
                                         : NAN;
    for (int v = 0; v < g->n_values; v++) {
        if (!plan->value_scaled[v] || g->values[v].kind == TP_VAL_PARAM) continue;
        /* a cache the shared engine holds keeps the scale its codes were written under */
        const int su = g->values[v].kind == TP_VAL_STATE ? shared_state(e->share, g->values[v].name) : -1;
        float a = su >= 0 ? e->share->act_amax[su] : g->values[v].kind == TP_VAL_STATE ? kv_cache_amax(e, v)
                                                                                        : e->act_amax[v];
        if (!opt->act_amax && isnan(a)) {
            st = tp_fail(err, TP_ERR_ARG, "the %s plan quantizes '%s' but no calibration data was given",
                         tp_precision_name(plan->requested), g->values[v].name);
            goto fail;
        }
        e->act_amax[v] = a;
        if (!(a > 0) || !isfinite(a)) {
            st = tp_fail(err, TP_ERR_ARG, "calibration gave amax %g for '%s': cannot derive an FP8 scale", (double)a,
                         g->values[v].name);
            goto fail;
        }
        /* E4M3 storage: amax / 448; NVFP4's second-level scale: amax / (6 * 448) (ModelOpt); the qkv of an FP8
         * attention op (quantized by the kernel as it loads): amax / 448 for each of Q, K, V (one calibrated amax
         * for the three) */
        if (plan->value_qf[v] == TP_QF_FP8_TENSOR) {
            for (int k = 0; k < 3; k++) h_scales[SCALE_SLOT * v + k] = (float)(a / 448.0);
            continue;
        }
        /* E4M3 storage, or a 16-bit value its W8A8 GEMMs quantize as they read it: amax / 448 either way */
        h_scales[SCALE_SLOT * v] = plan->value_qf[v] == TP_QF_NVFP4
                                       ? (float)((double)a / (6.0 * 448.0))
                                       : (float)(a / tp_dtype_info(TP_E4M3)->max_finite);
    }
    tpe_find_groups(e, opt->group_layout);
    phase(opt, "weights: quantize and upload");
    if ((st = tpe_upload_groups(e, err))) goto fail;
    /* another plan's groups placed the weights (tp_engine_options.group_layout); the engine runs its own plan's:
     * a W8A8 engine's E4M3 inputs cannot feed a 16-bit group GEMV */
    if (opt->group_layout) tpe_find_groups(e, NULL);
    st = tpe_upload_params(e, h_scales, err);
    if (st) goto fail;
    phase(opt, "activations, KV cache and GEMM plans");
    for (int v = 0; v < g->n_values; v++) /* reciprocals: a GEMM's E4M3 D scale (tp_gemm_run_q) */
        h_scales[SCALE_SLOT * (g->n_values + v)] = 1.0f / h_scales[SCALE_SLOT * v];
    st = tpe_dev_alloc(e, sizeof(float) * 2 * SCALE_SLOT * (size_t)g->n_values, (void **)&e->d_scales, "scales", err);
    if (st) goto fail;
    st = tpe_dev_alloc(e, sizeof(float) * (size_t)g->n_values, (void **)&e->d_amax, "calibration", err);
    if (st) goto fail;
    CU_TRY(cudaMemcpy(e->d_scales, h_scales, sizeof(float) * 2 * SCALE_SLOT * (size_t)g->n_values,
                      cudaMemcpyHostToDevice));
    st = tpe_alloc_activations(e, err);
    if (st) goto fail;
    for (int i = 0; i < g->n_ops; i++) { /* no GEMM writes over its own operand (tpe_alloc_activations says why) */
        if (g->ops[i].kind != TP_OP_LINEAR) continue;
        const int y = tp_program_out(&plan->prog, g, i);
        for (int j = 0; j < g->ops[i].n_in; j++) CHECK(e->dptr[y] != e->dptr[g->ops[i].in[j]]);
    }
    if (g->kv_len > 0 && (st = setup_kv(e, err))) goto fail;
    if (plan->fp32_tensors) { /* the FP32 layers' tensors (engine_launch.c launch_fp32_layer) */
        size_t m = 0;
        for (int i = 0; i < g->n_ops; i++)
            if (g->ops[i].kind == TP_OP_RMSNORM || g->ops[i].kind == TP_OP_ROPE) {
                const size_t n = (size_t)tp_value_numel(&g->values[g->ops[i].out]);
                if (n > m) m = n;
            }
        if (m && !(st = tpe_dev_alloc(e, 4 * m, (void **)&e->d_f32x, "an FP32 layer's input", err)))
            st = tpe_dev_alloc(e, 4 * m, (void **)&e->d_f32y, "an FP32 layer's output", err);
        if (st) goto fail;
        e->act_bytes += 8.0 * (double)m;
    }

    /* GEMM plans and the im2col scratch */
    st = tp_gemm_ctx_create(opt->workspace_bytes ? opt->workspace_bytes : (32u << 20), &e->gemm, err);
    if (st) goto fail;
    if ((st = tpe_setup_pipeline(e, opt->attention, err))) goto fail;
    if (opt->modular) {
        if (!opt->use_graph) {
            st = tp_fail(err, TP_ERR_ARG, "modular mode runs one CUDA graph per stage: not with eager launches");
            goto fail;
        }
        if ((st = tpe_setup_stages(e, err))) goto fail;
    }
    size_t cols_bytes = 0, qdq_bytes = 0, q8_bytes = 0, wdq_bytes = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_LINEAR && op->kind != TP_OP_PATCH_EMBED) continue;
        e->alpha[i] = 1.0f;
        const int emb = tpe_plan_fused(e, i, TP_OP_EMBED_TOKENS);
        if (emb >= 0) { /* tprof's kernel, no cuBLASLt plan, no im2col scratch */
            if (!tpk_patch_embed_supported(plan->value_dt[op->in[1]], op->patch, (int)op->gemm_n)) {
                st = tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: the fused patch embedding (patch_embed.h) does not "
                             "run on this device", op->layer);
                goto fail;
            }
            snprintf(e->impl_note[i], sizeof e->impl_note[i],
                     "tprof patch_embed.cu: wgmma GEMM, im2col + cast in its loads, bias + %s in its epilogue",
                     g->ops[emb].layer);
            continue;
        }
        if (tpe_kind(e, i) == TP_CALL_GEMV_FP8_BLOCK) { /* a decode step's: tprof's GEMV, no cuBLASLt plan */
            const int x = op->in[0];
            if (plan->value_dt[x] == TP_E4M3 && !e->d_bscale[x]) { /* its RMSNorm's 1x128 scales */
                const size_t nb = sizeof(float) * (size_t)(rows_pad(op->gemm_m) * ((op->gemm_k + 127) / 128));
                st = tpe_dev_alloc(e, nb, &e->d_bscale[x], g->values[x].name, err);
                if (st) goto fail;
                e->act_bytes += (double)nb;
            }
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof FP8 block-128 GEMV (gemv.h tpk_gemv_fp8_block): "
                     "x quantized per 1x128 block in registers, E4M3 weights with 128x128 scales");
            continue;
        }
        if (op->kind == TP_OP_LINEAR && plan->value_qf[op->in[0]] == TP_QF_FP8_BLOCK128) {
            /* native FP8 block-128: the input's 1x128 scales (one buffer per value), E4M3 scratch when no producer
             * writes the format */
            const int x = op->in[0];
            const int64_t Mp = rows_pad(op->gemm_m), kb = (op->gemm_k + 127) / 128;
            if (!e->d_bscale[x]) {
                st = tpe_dev_alloc(e, sizeof(float) * (size_t)(kb * Mp), &e->d_bscale[x], g->values[x].name, err);
                if (st) goto fail;
                e->act_bytes += (double)(sizeof(float) * (size_t)(kb * Mp));
            }
            if (plan->value_dt[x] != TP_E4M3 && (size_t)(Mp * op->gemm_k) > q8_bytes) q8_bytes = (size_t)(Mp * op->gemm_k);
            tp_gemm_desc d = {.M = Mp, .N = op->gemm_n, .K = op->gemm_k, .ab_dt = TP_E4M3,
                              .d_dt = plan->value_dt[op->out], .has_bias = op->n_in > 2, .block128 = 1};
            st = tp_gemm_plan_create(e->gemm, &d, op->layer, &e->gplan[i], err);
            if (st) goto fail;
            continue;
        }
        if (op_native_bs(e, i)) {
            /* Blackwell: the input's codes (scratch shared by all such GEMMs) and 128x4-tiled scales (per value) */
            const int x = op->in[0];
            const tp_qformat qf = plan->value_qf[x];
            const tp_qformat_traits *qt = tp_qformat_info(qf);
            const size_t sb = tp_swz_bytes(op->gemm_m, op->gemm_k / qt->block);
            const size_t cb = (size_t)(op->gemm_m * op->gemm_k) * (size_t)qt->bits / 8;
            if (!e->d_bscale[x]) {
                st = tpe_dev_alloc(e, sb, &e->d_bscale[x], g->values[x].name, err);
                if (st) goto fail;
                e->act_bytes += (double)sb;
            }
            if (cb > q8_bytes) q8_bytes = cb;
            e->alpha[i] = (qt->global_scale ? h_scales[SCALE_SLOT * x] : 1.0f) * e->wglobal[op->in[1]];
            tp_gemm_desc d = {op->gemm_m, op->gemm_n, op->gemm_k, qt->elem, plan->value_dt[op->out], op->n_in > 2, 0,
                              (int)qf, 0, 0, 0};
            st = tp_gemm_plan_create(e->gemm, &d, op->layer, &e->gplan[i], err);
            if (st) goto fail;
            continue;
        }
        if (op->kind == TP_OP_LINEAR && plan->value_qf[op->in[0]] != TP_QF_NONE) {
            size_t b = (size_t)(op->gemm_m * op->gemm_k) * tp_dtype_info(TP_BF16)->bytes;
            if (b > qdq_bytes) qdq_bytes = b;
            e->alpha[i] = h_scales[SCALE_SLOT * op->in[0]] * e->wglobal[op->in[1]];
        }
        if (op_weight_only(e, i)) { /* the GEMM's W: the exact E4M3 values in the activations' type, scale in alpha */
            e->alpha[i] = e->wglobal[op->in[1]];
            const size_t b = (size_t)(op->gemm_n * op->gemm_k) * tp_dtype_info(plan->value_dt[op->in[0]])->bytes;
            if (op->gemm_m > 8 && b > wdq_bytes) wdq_bytes = b;
        }
        if (op_fp8_quant_in(e, i) && op->gemm_m <= 8) { /* a decode step: tprof's GEMV alone, no cuBLASLt plan */
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof W8A8 FP8 GEMV (gemv.h tpk_gemv_w8a8): E4M3 "
                     "weights decoded and the input rounded to E4M3 in registers, fp32 accumulate");
            continue;
        }
        if (op_fp8_quant_in(e, i)) { /* the E4M3 copy of its input the quantize kernel writes */
            const size_t b = (size_t)(op->gemm_m * op->gemm_k);
            if (b > q8_bytes) q8_bytes = b;
        }
        const int eg = tpe_plan_fused(e, i, TP_OP_GELU); /* a fused GELU: the GEMM writes its output (plan.c) */
        tp_gemm_desc d = {op->gemm_m, op->gemm_n, op->gemm_k,
                          op->kind == TP_OP_PATCH_EMBED                  ? plan->value_dt[op->in[1]]
                          : plan->value_qf[op->in[0]] != TP_QF_NONE ? TP_BF16
                          : op_fp8_quant_in(e, i)                   ? TP_E4M3
                                                                          : plan->value_dt[op->in[0]],
                          plan->value_dt[eg >= 0 ? g->ops[eg].out : op->out], op->n_in > 2, 0, 0,
                          tpe_plan_fused(e, i, TP_OP_ADD) >= 0, eg >= 0, 0};
        d.fast_accum = d.ab_dt == TP_E4M3 && !e->fp8_promote; /* per-tensor FP8: tp_engine_options.fp8_promote */
        st = tp_gemm_plan_create(e->gemm, &d, op->layer, &e->gplan[i], err);
        if (st) goto fail;
        if (op->kind == TP_OP_PATCH_EMBED) {
            size_t b = (size_t)(op->gemm_m * op->gemm_k) * tp_dtype_info(d.ab_dt)->bytes;
            if (b > cols_bytes) cols_bytes = b;
        }
    }
    if (cols_bytes) {
        st = tpe_dev_alloc(e, cols_bytes, &e->d_cols, "im2col scratch", err);
        if (st) goto fail;
        e->act_bytes += (double)cols_bytes;
    }
    if (qdq_bytes) {
        st = tpe_dev_alloc(e, qdq_bytes, &e->d_qdq, "block-scaled operand scratch", err);
        if (st) goto fail;
        e->act_bytes += (double)qdq_bytes;
    }
    if (q8_bytes) {
        st = tpe_dev_alloc(e, q8_bytes, &e->d_q8, "quantized operand scratch", err);
        if (st) goto fail;
        e->act_bytes += (double)q8_bytes;
    }
    if (wdq_bytes) {
        st = tpe_dev_alloc(e, wdq_bytes, &e->d_wdq, "the weight-only GEMMs' dequantized weight", err);
        if (st) goto fail;
        e->act_bytes += (double)wdq_bytes;
    }

    phase(opt, "attention selection");
    st = tpe_choose_attention(e, opt->attention, err);
    if (st) goto fail;
    phase(opt, "GEMM selection");
    st = tpe_choose_gemms(e, opt->gemm_first, opt->cublaslt_only, opt->gemm_choice, err);
    if (st) goto fail;
    e->sparse_mode = opt->sparse;
    if (opt->sparse) phase(opt, "2:4 sparse GEMM selection");
    if (opt->sparse && (st = tpe_choose_sparse(e, err))) goto fail;
    /* the fusions into the chosen kernels, last; a tensor-parallel rank's once it took rank 0's choices (engine_tp.c) */
    if (g->tp_size <= 1) phase(opt, "fusion selection");
    if (g->tp_size <= 1 && (st = tpe_fuse_built(e, err))) goto fail;

    free(h_scales);
    *out = e;
    return TP_OK;
fail:
    free(h_scales);
    tp_engine_destroy(e);
    return st;
}

void tp_engine_destroy(tp_engine *e) {
    if (!e) return;
    if (e->ranks) { /* the leader: the other ranks' engines first, the communicators once nothing uses them */
        for (int r = 1; r < e->n_ranks; r++) tp_engine_destroy(e->ranks[r]);
        free(e->ranks);
        e->ranks = NULL;
    }
    cudaSetDevice(e->device);
    if (e->stream) cudaStreamSynchronize(e->stream);
    for (int k = 0; k < e->n_seg; k++) {
        if (e->seg_exec[k]) cudaGraphExecDestroy(e->seg_exec[k]);
        if (e->seg_graph[k]) cudaGraphDestroy(e->seg_graph[k]);
    }
    free(e->hand_v);
    free(e->hand_copy);
    tpe_sparse_free(e);
    tpe_persist_free(e);
    if (e->exec) cudaGraphExecDestroy(e->exec);
    if (e->graph) cudaGraphDestroy(e->graph);
    if (e->gplan)
        for (int i = 0; i < e->g->n_ops; i++) tp_gemm_plan_destroy(e->gplan[i]);
    if (e->gemm) tp_gemm_ctx_destroy(e->gemm);
    for (int i = 0; i < e->n_allocs; i++) cudaFree(e->allocs[i]);
    if (e->stream) cudaStreamDestroy(e->stream);
    free(e->allocs);
    free(e->dptr);
    free(e->gplan);
    free(e->d_bscale);
    if (e->sdpa)
        for (int i = 0; i < e->g->n_ops; i++) tp_sdpa_destroy(e->sdpa[i]);
    free(e->sdpa);
    free(e->group_lead);
    free(e->group_next);
    free(e->group_cs);
    free(e->gemm_us);
    free(e->cutlass_tile);
    free(e->impl_note);
    free(e->wglobal);
    free(e->alpha);
    free(e->act_amax);
    free(e->d_invfreq);
    free(e->d_opconst);
    for (int i = 0; e->mplan && i < 4 * e->g->n_ops; i++) tp_bgemm_destroy(e->mplan[i]);
    free(e->mplan);
    free(e->msplits);
    free(e->repeats);
    tp_program_free(&e->prog);
    tp_program_free(&e->prog_chosen);
    if (e->owns_nccl) tp_nccl_destroy(e->nccl);
    free(e);
}

/* ---- build and run: calibration, the GPU reference ------------------------------------------------- */

/* The percentile pass: histograms of |value v| over [0, amax[v]] for every wanted v, then amax[v] = percentile. */
/* The second calibration pass of the histogram methods: |x|'s histogram over [0, max] per value, then the
 * percentile or the entropy threshold (qformat.h) as the value's amax */
static tp_status calibrate_hist(tp_engine *e, const int *want, const tp_calib_options *co, float *amax,
                                tp_error *err) {
    const tp_graph *g = e->g;
    const size_t nh = (size_t)g->n_values * TP_CALIB_BINS;
    unsigned *d_hist = NULL, *h = malloc(sizeof(unsigned) * nh);
    tp_status st = TP_OK;
    if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory for calibration histograms");
    CU_TRY(cudaMalloc((void **)&d_hist, sizeof(unsigned) * nh));
    CU_TRY(cudaMemsetAsync(d_hist, 0, sizeof(unsigned) * nh, e->stream));
    CU_TRY(cudaMemcpyAsync(e->d_amax, amax, sizeof(float) * (size_t)g->n_values, cudaMemcpyHostToDevice, e->stream));
    for (int i = 0; i < g->n_ops; i++) {
        if ((st = tpe_launch_op(e, i, err))) goto fail;
        int v = g->ops[i].out;
        if (!want[v] || !(amax[v] > 0) || !isfinite(amax[v])) continue;
        HOOK(e, i, TP_CAT_QUANT);
        int rc = tpk_abs_histogram(e->dptr[v], e->plan->value_dt[v], (size_t)tp_value_numel(&g->values[v]),
                                   e->d_amax + v, d_hist + (size_t)v * TP_CALIB_BINS, TP_CALIB_BINS, e->stream);
        if (rc) {
            st = tp_fail(err, TP_ERR_CUDA, "histogram of %s: %s", g->values[v].name, cudaGetErrorString((cudaError_t)rc));
            goto fail;
        }
    }
    HOOK(e, -1, TP_CAT_OTHER);
    CU_TRY(cudaMemcpyAsync(h, d_hist, sizeof(unsigned) * nh, cudaMemcpyDeviceToHost, e->stream));
    CU_TRY(cudaStreamSynchronize(e->stream));
    for (int v = 0; v < g->n_values; v++)
        if (want[v] && amax[v] > 0 && isfinite(amax[v]))
            amax[v] = (float)(co->method == TP_CALIB_ENTROPY
                                  ? tp_calib_entropy_threshold(h + (size_t)v * TP_CALIB_BINS, TP_CALIB_BINS, amax[v])
                                  : tp_hist_percentile(h + (size_t)v * TP_CALIB_BINS, TP_CALIB_BINS, amax[v],
                                                       co->percentile));
fail:
    cudaFree(d_hist);
    free(h);
    return st;
}

tp_status tp_calibrate_max(const tp_graph *g, const tp_params *params, int device, int sm, const float *images,
                           float *amax, tp_error *err) {
    tp_calib_options co = {TP_CALIB_MAX, 100.0};
    return tp_calibrate(g, params, device, sm, images, &co, amax, err);
}

tp_status tp_calibrate(const tp_graph *g, const tp_params *params, int device, int sm, const float *images,
                       const tp_calib_options *co, float *amax, tp_error *err) {
    const int pct = co && co->method == TP_CALIB_PERCENTILE, hist = co && co->method != TP_CALIB_MAX;
    if (pct && !(co->percentile > 0 && co->percentile <= 100))
        return tp_fail(err, TP_ERR_ARG, "calibration percentile %g is outside (0, 100]", co->percentile);
    tp_plan p16;
    tp_status st = tp_plan_build(g, TP_PREC_FP16, sm, &p16, err);
    if (st) return st;
    tp_engine *e = NULL;
    /* eager: calibration launches amax kernels between ops. The classic attention kernel (fp32 P): the scales then
     * do not depend on whether cuDNN is installed or which attention kernel would win the timing, so an engine
     * calibrates the same on every machine */
    tp_engine_options eo = {.device = device, .use_graph = 0, .attention = TP_ATTN_CLASSIC, .gemm_first = 1};
    int *want = calloc((size_t)g->n_values, sizeof(int));
    if (!want) {
        tp_plan_free(&p16);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int v = 0; v < g->n_values; v++) {
        want[v] = g->values[v].kind == TP_VAL_ACT;
        amax[v] = 0;
    }
    if (!(st = tp_engine_build(g, params, &p16, &eo, &e, err)) && !(st = tp_engine_set_input(e, images, err)))
        st = tp_engine_calibrate(e, want, amax, err);
    if (!st && hist) st = calibrate_hist(e, want, co, amax, err);
    tp_engine_destroy(e);
    tp_plan_free(&p16);
    free(want);
    return st;
}

tp_status tp_gpu_reference(const tp_graph *g, const tp_params *params, int sm, const float *input, float *output,
                           tp_error *err) {
    return tp_gpu_reference_taps(g, params, sm, input, output, NULL, err);
}

tp_status tp_gpu_reference_taps(const tp_graph *g, const tp_params *params, int sm, const float *input, float *output,
                                float *const *taps, tp_error *err) {
    tp_policy pol;
    tp_plan plan;
    tp_policy_default(&pol, TP_PREC_FP32);
    tp_status st = tp_plan_build_policy(g, &pol, sm, &plan, err);
    if (st) return st;
    tp_engine *e = NULL;
    tp_engine_options eo = {.device = 0, .use_graph = 0, .gemm_first = 1, .cublaslt_only = 1,
                            .attention = TP_ATTN_CLASSIC};
    st = tp_engine_build(g, params, &plan, &eo, &e, err);
    if (!st) st = tp_engine_set_input(e, input, err);
    /* one eager pass either way: the capture's is the forward pass, its taps copied out on the way */
    if (!st) st = taps && g->n_taps ? tp_engine_capture(e, taps, err) : tp_engine_forward(e, err);
    if (!st) st = tp_engine_get_output(e, output, err);
    tp_engine_destroy(e);
    tp_plan_free(&plan);
    return st;
}
