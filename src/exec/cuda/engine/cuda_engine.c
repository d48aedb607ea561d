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
#include "exec/cuda/attention/attention.h"
#include "exec/cuda/attention/attention_wgmma.h"
#include "exec/cuda/attention/attention_fp8.h"
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

#include <nvtx3/nvToolsExt.h>


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

/* A graph with a KV cache: its first op starts from an empty cache (a prefill), and its last ones move the position
 * on and, decoding greedily, feed the next token back; attributed to the ops around them for the profiler. */
tp_status tpe_launch_begin(tp_engine *e, tp_error *err) {
    if (!e->resets_past) return TP_OK;
    HOOK(e, 0, TP_CAT_MEMORY);
    if (cudaMemsetAsync(e->d_past, 0, sizeof(int), e->stream) != cudaSuccess)
        return tp_fail(err, TP_ERR_CUDA, "resetting the KV cache position: %s", cudaGetErrorString(cudaGetLastError()));
    return TP_OK;
}

tp_status tpe_launch_end(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    if (g->kv_len > 0) {
        const int last = g->values[g->output].producer;
        HOOK(e, last, TP_CAT_OTHER);
        int rc = e->feed_argmax ? tpk_argmax(e->dptr[g->output], e->plan->value_dt[g->output], e->dptr[g->input],
                                             (int)g->batch, (int)value_cols(e, g->output), e->stream)
                                : 0;
        if (!rc) rc = tpk_advance(e->d_past, (int)g->tokens, e->stream);
        if (rc) st = tp_fail(err, TP_ERR_CUDA, "the decode step's end (argmax, position): %s",
                             cudaGetErrorString((cudaError_t)rc));
    }
    HOOK(e, -1, TP_CAT_OTHER);
    return st;
}

static tp_status launch_all(tp_engine *e, tp_error *err) {
    if (e->ranks) return tpe_launch_ranks(e, err);
    tp_status st = tpe_launch_begin(e, err);
    for (int i = 0; i < e->g->n_ops && !st; i++) {
        nvtxRangePushA(e->g->ops[i].layer);
        st = tpe_launch_op(e, i, err);
        nvtxRangePop();
    }
    return st ? st : tpe_launch_end(e, err);
}

/* Every rank's engine (the engine itself without tensor parallelism). */
static int n_ranks(const tp_engine *e) { return e->ranks ? e->n_ranks : 1; }
static tp_engine *rank_engine(tp_engine *e, int r) { return e->ranks ? e->ranks[r] : e; }

/* One run on every rank: graph replays, or eager launches (lockstep over the ranks). */
static tp_status launch_run(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    if (!e->use_graph) return launch_all(e, err);
    for (int k = 0; k < e->n_seg; k++) { /* modular: stage after stage, the host waiting for each */
        int rc = 0;
        CU_TRY(cudaGraphLaunch(e->seg_exec[k], e->stream));
        if ((rc = tpe_handoff(e, k)))
            return tp_fail(err, TP_ERR_CUDA, "stage %d's handoff copies: %s", k, cudaGetErrorString((cudaError_t)rc));
        if (k + 1 < e->n_seg) CU_TRY(cudaStreamSynchronize(e->stream));
        if (k + 1 == e->n_seg) return TP_OK;
    }
    if (e->ranks && e->parallel_launch) {
        /* one host thread per GPU: the replays start together instead of GPU r waiting for r launches before it
         * (the first all-reduce of a step absorbs that wait on GPU 0: bench/results, 2026-11-26 h200x4) */
        const int n = n_ranks(e);
        cudaError_t ce = cudaSuccess;
#pragma omp parallel for num_threads(n) schedule(static, 1)
        for (int r = 0; r < n; r++) {
            tp_engine *x = rank_engine(e, r);
            cudaError_t c = cudaSetDevice(x->device);
            if (c == cudaSuccess) c = cudaGraphLaunch(x->exec, x->stream);
            if (c != cudaSuccess) {
#pragma omp critical
                ce = c;
            }
        }
        cudaSetDevice(e->device);
        return ce == cudaSuccess ? TP_OK : tp_fail(err, TP_ERR_CUDA, "cudaGraphLaunch: %s", cudaGetErrorString(ce));
    }
    for (int r = 0; r < n_ranks(e); r++) {
        tp_engine *x = rank_engine(e, r);
        if (e->ranks) CU_TRY(cudaSetDevice(x->device));
        CU_TRY(cudaGraphLaunch(x->exec, x->stream));
    }
    if (e->ranks) CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

/* Waits for every rank's stream. */
static tp_status sync_all(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    for (int r = 0; r < n_ranks(e); r++) {
        tp_engine *x = rank_engine(e, r);
        if (e->ranks) CU_TRY(cudaSetDevice(x->device));
        CU_TRY(cudaStreamSynchronize(x->stream));
    }
    if (e->ranks) CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

/* CUDA events around n runs on every rank: ev[(r * n + i) * 2] before run i on rank r, + 1 after it. A run's
 * time is the longest of the ranks' (they wait for each other at every all-reduce). */
typedef struct {
    int ranks, n, made;
    cudaEvent_t *ev;
} run_timer;

static tp_status rtimer_create(tp_engine *e, int n, run_timer *t, tp_error *err) {
    tp_status st = TP_OK;
    t->ranks = n_ranks(e);
    t->n = n;
    t->made = 0;
    if (!(t->ev = calloc((size_t)(2 * n * t->ranks), sizeof(cudaEvent_t))))
        return tp_fail(err, TP_ERR_OOM, "out of host memory for %d timing samples", n);
    for (int r = 0; r < t->ranks; r++) {
        if (e->ranks) CU_TRY(cudaSetDevice(rank_engine(e, r)->device));
        for (int k = 0; k < 2 * n; k++, t->made++) CU_TRY(cudaEventCreate(&t->ev[t->made]));
    }
    if (e->ranks) CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

static tp_status rtimer_mark(tp_engine *e, run_timer *t, int i, int end, tp_error *err) {
    tp_status st = TP_OK;
    for (int r = 0; r < t->ranks; r++) CU_TRY(cudaEventRecord(t->ev[(r * t->n + i) * 2 + end], rank_engine(e, r)->stream));
    return TP_OK;
fail:
    return st;
}

/* ms[i]: run i's time (the slowest rank's); *wall: from the first start to the last end on rank 0 */
static tp_status rtimer_read(const run_timer *t, double *ms, double *wall, tp_error *err) {
    tp_status st = TP_OK;
    for (int i = 0; i < t->n; i++) {
        ms[i] = 0;
        for (int r = 0; r < t->ranks; r++) {
            float x = 0;
            CU_TRY(cudaEventElapsedTime(&x, t->ev[(r * t->n + i) * 2], t->ev[(r * t->n + i) * 2 + 1]));
            if (x > ms[i]) ms[i] = x;
        }
    }
    if (wall) {
        float w = 0;
        CU_TRY(cudaEventElapsedTime(&w, t->ev[0], t->ev[2 * t->n - 1]));
        *wall = w;
    }
    return TP_OK;
fail:
    return st;
}

static void rtimer_destroy(run_timer *t) {
    for (int k = 0; k < t->made; k++) cudaEventDestroy(t->ev[k]);
    free(t->ev);
    t->ev = NULL;
}

/* ---- building ------------------------------------------------------------------------------------------ */

static tp_status upload(void *dst, const void *src, size_t bytes, const char *what, tp_error *err) {
    cudaError_t ce = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return ce == cudaSuccess ? TP_OK : tp_fail(err, TP_ERR_CUDA, "uploading %s: %s", what, cudaGetErrorString(ce));
}

/* An fp8-block weight (N, K): E4M3 codes and 128x128 scales, from the engine file when it holds them, else
 * quantized here; the scales re-laid for cuBLASLt (gemm_cublaslt.h). */
static tp_status upload_fp8_block_weight(tp_engine *e, int v, const tp_param *p, tp_error *err) {
    const int64_t N = value_rows(e, v), K = value_cols(e, v);
    const tp_qtensor *pre = e->weights_q ? e->weights_q[e->g->values[v].param_index] : NULL;
    tp_qtensor own;
    memset(&own, 0, sizeof own);
    tp_status st = TP_OK;
    if (!pre || pre->format != TP_QF_FP8_BLOCK128) {
        st = tp_quantize(TP_QF_FP8_BLOCK128, p->data, N, K, 1, 0.0f, &own, err);
        if (st) return st;
        pre = &own;
    }
    const size_t ns = tp_gemm_b128_weight_scale_count(N, K);
    float *sc = malloc(sizeof(float) * ns);
    if (!sc) st = tp_fail(err, TP_ERR_OOM, "out of host memory quantizing %s", p->name);
    if (!st) tp_gemm_b128_weight_scales((const float *)pre->scales, N, K, sc);
    if (!st) st = tpe_dev_alloc(e, pre->elem_bytes, &e->dptr[v], p->name, err);
    if (!st) st = upload(e->dptr[v], pre->elems, pre->elem_bytes, p->name, err);
    if (!st) st = tpe_dev_alloc(e, sizeof(float) * ns, &e->d_bscale[v], p->name, err);
    if (!st) st = upload(e->d_bscale[v], sc, sizeof(float) * ns, p->name, err);
    if (!st) e->weight_bytes += (double)pre->elem_bytes + (double)pre->scale_bytes;
    free(sc);
    tp_qtensor_free(&own);
    return st;
}

/* A weight (N, K) for a native block-scaled GEMM: its codes as stored (tp_qtensor packing is cuBLASLt's) and its
 * scale codes re-laid into the 128x4 tiles; NVFP4's s2 goes into the GEMM's alpha. */
static tp_status upload_native_bs_weight(tp_engine *e, int v, const tp_param *p, tp_error *err) {
    const tp_qformat qf = e->plan->value_qf[v];
    const int64_t N = value_rows(e, v), K = value_cols(e, v), kb = K / tp_qformat_info(qf)->block;
    const tp_qtensor *pre = e->weights_q ? e->weights_q[e->g->values[v].param_index] : NULL;
    tp_qtensor own;
    memset(&own, 0, sizeof own);
    tp_status st = TP_OK;
    if (!pre || pre->format != qf) {
        st = tp_quantize(qf, p->data, N, K, 1, 0.0f, &own, err);
        if (st) return st;
        pre = &own;
    }
    const size_t nsw = tp_swz_bytes(N, kb);
    uint8_t *sw = calloc(nsw, 1);
    if (!sw) st = tp_fail(err, TP_ERR_OOM, "out of host memory laying out the scales of %s", p->name);
    if (!st)
        for (int64_t r = 0; r < N; r++)
            for (int64_t c = 0; c < kb; c++) sw[tp_swz_offset(r, c, kb)] = pre->scales[r * kb + c];
    if (!st) st = tpe_dev_alloc(e, pre->elem_bytes, &e->dptr[v], p->name, err);
    if (!st) st = upload(e->dptr[v], pre->elems, pre->elem_bytes, p->name, err);
    if (!st) st = tpe_dev_alloc(e, nsw, &e->d_bscale[v], p->name, err);
    if (!st) st = upload(e->d_bscale[v], sw, nsw, p->name, err);
    if (!st) {
        e->wglobal[v] = pre->global_scale;
        e->weight_bytes += (double)pre->elem_bytes + (double)pre->scale_bytes;
    }
    free(sw);
    tp_qtensor_free(&own);
    return st;
}

/* A weight-only NVFP4 weight (N, K) as tprof's GEMV reads it (gemv.h): the E2M1 codes in dptr[v], the row-major
 * UE4M3 block scales in d_bscale[v], s2 on the host (wglobal[v]: the prefill GEMM's alpha) and in the engine's
 * scale slot of v (the GEMV's global_scale). An engine file's stored NVFP4 tensor is used as it is. */
tp_status tpe_nvfp4_weight(const tp_engine *e, int v, tp_qtensor *own, const tp_qtensor **q, tp_error *err) {
    const tp_qtensor *pre = e->weights_q ? e->weights_q[e->g->values[v].param_index] : NULL;
    memset(own, 0, sizeof *own);
    *q = pre;
    if (pre && pre->format == TP_QF_NVFP4) return TP_OK;
    const tp_param *p = &e->params->params[e->g->values[v].param_index];
    *q = own;
    return tp_quantize(TP_QF_NVFP4, p->data, value_rows(e, v), value_cols(e, v), 1, 0.0f, own, err);
}

static tp_status upload_nvfp4_wo_weight(tp_engine *e, int v, const tp_param *p, float *h_scales, tp_error *err) {
    tp_qtensor own;
    const tp_qtensor *pre = NULL;
    tp_status st = tpe_nvfp4_weight(e, v, &own, &pre, err);
    if (!st) st = tpe_dev_alloc(e, pre->elem_bytes, &e->dptr[v], p->name, err);
    if (!st) st = upload(e->dptr[v], pre->elems, pre->elem_bytes, p->name, err);
    if (!st) st = tpe_dev_alloc(e, pre->scale_bytes, &e->d_bscale[v], p->name, err);
    if (!st) st = upload(e->d_bscale[v], pre->scales, pre->scale_bytes, p->name, err);
    if (!st) {
        e->wglobal[v] = h_scales[SCALE_SLOT * v] = pre->global_scale;
        e->weight_bytes += (double)pre->elem_bytes + (double)pre->scale_bytes + 4.0;
    }
    tp_qtensor_free(&own);
    return st;
}

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

/* The shared engine's device copy of parameter value v (the same parameter in the same storage), or -1. A scaled
 * weight is shared only as per-tensor E4M3, whose scale the shared engine keeps on the host (wglobal). */
static int shared_param(const tp_engine *e, int v) {
    const tp_engine *s = e->share;
    const tp_value *val = &e->g->values[v];
    for (int u = 0; s && u < s->g->n_values; u++) {
        const tp_value *o = &s->g->values[u];
        const int scaled = s->plan->value_scaled[u], per_tensor_e4m3 = s->plan->value_dt[u] == TP_E4M3 &&
                                                                         s->plan->value_qf[u] == TP_QF_NONE;
        if (o->kind == TP_VAL_PARAM && o->param_index == val->param_index && s->dptr[u] &&
            s->plan->value_dt[u] == e->plan->value_dt[v] && s->plan->value_qf[u] == e->plan->value_qf[v] &&
            scaled == e->plan->value_scaled[v] && (!scaled || per_tensor_e4m3))
            return u;
    }
    return -1;
}

void tpe_weight_host(tp_engine *e, int v, void *h, float *scale) {
    const tp_graph *g = e->g;
    const tp_param *p = &e->params->params[g->values[v].param_index];
    const tp_dtype dt = e->plan->value_dt[v];
    const size_t bytes = value_bytes(e, v);
    const tp_qtensor *pre8 = e->weights_q ? e->weights_q[g->values[v].param_index] : NULL;
    *scale = 1.0f;
    if (dt == TP_E4M3 && pre8 && pre8->format == TP_QF_FP8_TENSOR && pre8->elem_bytes == bytes &&
        pre8->scale_bytes == sizeof(float)) {
        /* a stored per-tensor FP8 weight: its E4M3 bytes and scale as they are */
        memcpy(scale, pre8->scales, sizeof(float));
        memcpy(h, pre8->elems, bytes);
    } else {
        if (e->plan->value_scaled[v]) {
            /* per-tensor weight scale: amax / 448, so the largest weight maps to E4M3's max finite value */
            double amax = 0;
            for (int64_t j = 0; j < p->numel; j++) amax = fmax(amax, fabs((double)p->data[j]));
            *scale = amax > 0 ? (float)(amax / tp_dtype_info(dt)->max_finite) : 1.0f;
        }
        tp_convert_from_f32(dt, p->data, h, (size_t)p->numel, *scale);
    }
    e->wglobal[v] = *scale;
}

/* Two pinned host buffers through which weights are converted and copied: a chunk converts (in parallel, OpenMP)
 * while the previous one's copy runs. Pageable buffers where pinned memory is refused (the copies then wait). */
enum { STAGE_BYTES = 64 << 20 };
typedef struct {
    void *buf[2];
    cudaEvent_t done[2];
    int pinned[2]; /* each buffer's own: the second allocation may fail after the first succeeded */
} stage_bufs;

static tp_status stage_open(stage_bufs *sb, tp_error *err) {
    memset(sb, 0, sizeof *sb);
    for (int k = 0; k < 2; k++) {
        if (cudaHostAlloc(&sb->buf[k], STAGE_BYTES, cudaHostAllocDefault) == cudaSuccess) {
            sb->pinned[k] = 1;
        } else {
            cudaGetLastError();
            sb->buf[k] = NULL;
        }
        if (!sb->buf[k] && !(sb->buf[k] = malloc(STAGE_BYTES))) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        if (cudaEventCreateWithFlags(&sb->done[k], cudaEventDisableTiming) != cudaSuccess)
            return tp_fail(err, TP_ERR_CUDA, "cudaEventCreate for the weight uploads");
    }
    return TP_OK;
}

static void stage_close(stage_bufs *sb) {
    for (int k = 0; k < 2; k++) {
        if (sb->done[k]) cudaEventDestroy(sb->done[k]);
        if (sb->pinned[k]) cudaFreeHost(sb->buf[k]);
        else free(sb->buf[k]);
    }
}

/* Weight v (fp32 on the host) in its planned type into e->dptr[v]: a stored per-tensor FP8 tensor as it is (through
 * tpe_weight_host), otherwise converted chunk by chunk; *scale: its per-tensor scale (1 when unscaled). */
static tp_status stage_upload(tp_engine *e, int v, stage_bufs *sb, float *scale, tp_error *err) {
    const tp_param *p = &e->params->params[e->g->values[v].param_index];
    const tp_dtype dt = e->plan->value_dt[v];
    const size_t es = tp_dtype_info(dt)->bytes, n = (size_t)p->numel, chunk = STAGE_BYTES / (es ? es : 1);
    const tp_qtensor *pre8 = e->weights_q ? e->weights_q[e->g->values[v].param_index] : NULL;
    if (pre8 || es < 1 || tp_dtype_info(dt)->bits != 8 * (int)es) { /* stored or sub-byte: the whole tensor at once */
        const size_t bytes = value_bytes(e, v);
        void *h = malloc(bytes ? bytes : 1);
        if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory converting %s", p->name);
        tpe_weight_host(e, v, h, scale);
        tp_status st = upload(e->dptr[v], h, bytes, p->name, err);
        free(h);
        return st;
    }
    *scale = 1.0f;
    if (e->plan->value_scaled[v]) {
        /* per-tensor weight scale: amax / max finite, so the largest weight maps to the format's largest value */
        float amax = 0;
#pragma omp parallel for reduction(max : amax) if (n >= (1u << 20))
        for (size_t j = 0; j < n; j++) amax = fmaxf(amax, fabsf(p->data[j]));
        *scale = amax > 0 ? (float)(amax / tp_dtype_info(dt)->max_finite) : 1.0f;
    }
    e->wglobal[v] = *scale;
    for (size_t off = 0, k = 0; off < n; off += chunk, k++) {
        const int b = (int)(k & 1);
        const size_t m = n - off < chunk ? n - off : chunk;
        const cudaError_t we = k >= 2 ? cudaEventSynchronize(sb->done[b]) : cudaSuccess;
        if (we != cudaSuccess) return tp_fail(err, TP_ERR_CUDA, "uploading %s: %s", p->name, cudaGetErrorString(we));
        tp_convert_from_f32(dt, p->data + off, sb->buf[b], m, *scale);
        cudaError_t ce = cudaMemcpyAsync((char *)e->dptr[v] + off * es, sb->buf[b], m * es, cudaMemcpyHostToDevice,
                                         e->stream);
        if (ce == cudaSuccess) ce = cudaEventRecord(sb->done[b], e->stream);
        if (ce != cudaSuccess) return tp_fail(err, TP_ERR_CUDA, "uploading %s: %s", p->name, cudaGetErrorString(ce));
    }
    cudaError_t ce = cudaStreamSynchronize(e->stream);
    return ce == cudaSuccess ? TP_OK : tp_fail(err, TP_ERR_CUDA, "uploading %s: %s", p->name, cudaGetErrorString(ce));
}

static tp_status upload_params_staged(tp_engine *e, float *h_scales, stage_bufs *stage, tp_error *err);

static tp_status upload_params(tp_engine *e, float *h_scales, tp_error *err) {
    stage_bufs sb;
    tp_status st = stage_open(&sb, err);
    if (!st) st = upload_params_staged(e, h_scales, &sb, err);
    stage_close(&sb);
    return st;
}

static tp_status upload_params_staged(tp_engine *e, float *h_scales, stage_bufs *stage, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].kind != TP_VAL_PARAM) continue;
        if (e->dptr[v]) { /* laid out with its group: its per-tensor scale, if any, for the GEMMs */
            h_scales[SCALE_SLOT * v] = e->wglobal[v];
            continue;
        }
        const int ru = e->repeats ? e->repeats[v] : -1;
        if (ru >= 0) { /* the parameter an earlier value holds, stored alike: its copy (a pipeline's expert steps) */
            e->dptr[v] = e->dptr[ru];
            e->d_bscale[v] = e->d_bscale[ru];
            e->wglobal[v] = e->wglobal[ru];
            for (int k = 0; k < SCALE_SLOT; k++) h_scales[SCALE_SLOT * v + k] = h_scales[SCALE_SLOT * ru + k];
            continue;
        }
        const int sv = shared_param(e, v);
        if (sv >= 0) { /* the prefill engine's copy: a decode engine adds no weight memory */
            e->dptr[v] = e->share->dptr[sv];
            e->d_bscale[v] = e->share->d_bscale[sv]; /* block-scaled weights: their scales too */
            e->wglobal[v] = e->share->wglobal[sv];
            if (e->plan->value_scaled[v] || weight_nvfp4_wo(e, v)) h_scales[SCALE_SLOT * v] = e->share->wglobal[sv];
            continue;
        }
        const tp_param *p = &e->params->params[g->values[v].param_index];
        tp_dtype dt = e->plan->value_dt[v];
        size_t bytes = value_bytes(e, v);
        float scale = 1.0f;
        e->wglobal[v] = 1.0f;
        if (weight_nvfp4_wo(e, v)) {
            if ((st = upload_nvfp4_wo_weight(e, v, p, h_scales, err))) return st;
            continue;
        }
        if (e->plan->value_qf[v] == TP_QF_FP8_BLOCK128 || weight_native_bs(e, v)) {
            st = e->plan->value_qf[v] == TP_QF_FP8_BLOCK128 ? upload_fp8_block_weight(e, v, p, err)
                                                            : upload_native_bs_weight(e, v, p, err);
            if (st) return st;
            continue;
        }
        if (e->plan->value_qf[v] != TP_QF_NONE) {
            /* block-scaled weights, quantized offline: their exact values (without NVFP4's s2, which goes into the
             * GEMM's alpha) in the storage type, bf16 for the emulation */
            float *q = malloc(sizeof(float) * (size_t)p->numel);
            void *h = malloc(bytes ? bytes : 1);
            int64_t K = g->values[v].shape[g->values[v].ndim - 1];
            if (!q || !h) {
                free(q);
                free(h);
                return tp_fail(err, TP_ERR_OOM, "out of host memory quantizing %s", p->name);
            }
            const tp_qtensor *pre = e->weights_q ? e->weights_q[g->values[v].param_index] : NULL;
            if (pre && pre->format == e->plan->value_qf[v]) {
                /* the stored quantized tensor: its values without the per-tensor scale (decoded with s2 = 1,
                 * exact), and s2 for the GEMM's alpha */
                tp_qtensor one = *pre;
                one.global_scale = 1.0f;
                st = tp_dequantize(&one, q, err);
                e->wglobal[v] = pre->global_scale;
            } else {
                st = tp_qdq_f32(e->plan->value_qf[v], p->data, q, p->numel / K, K, 1, 0.0f, &e->wglobal[v], err);
            }
            if (!st) tp_convert_from_f32(dt, q, h, (size_t)p->numel, 1.0f);
            if (!st) st = tpe_dev_alloc(e, bytes, &e->dptr[v], p->name, err);
            if (!st) {
                cudaError_t ce = cudaMemcpy(e->dptr[v], h, bytes, cudaMemcpyHostToDevice);
                if (ce != cudaSuccess) st = tp_fail(err, TP_ERR_CUDA, "uploading %s: %s", p->name, cudaGetErrorString(ce));
            }
            free(q);
            free(h);
            if (st) return st;
            e->weight_bytes += (double)bytes;
            continue;
        }
        st = tpe_dev_alloc(e, bytes, &e->dptr[v], p->name, err);
        if (!st) st = stage_upload(e, v, stage, &scale, err);
        h_scales[SCALE_SLOT * v] = scale;
        if (st) return st;
        e->weight_bytes += (double)bytes + (e->plan->value_scaled[v] ? 4.0 : 0.0);
    }
    return TP_OK;
}

/* State value v (the KV cache): the shared engine's buffer of the same name and size, else a buffer of its own,
 * zeroed (never taken from or given back to the activation pool: it outlives each run). */
static tp_status state_buffer(tp_engine *e, int v, size_t bytes, tp_error *err) {
    const tp_engine *s = e->share;
    for (int u = 0; s && u < s->g->n_values; u++)
        if (s->g->values[u].kind == TP_VAL_STATE && strcmp(s->g->values[u].name, e->g->values[v].name) == 0) {
            if (tpe_act_alloc_bytes(s, u) != bytes || s->plan->value_dt[u] != e->plan->value_dt[v])
                return tp_fail(err, TP_ERR_ARG, "%s: the shared engine's cache has another size or type",
                               e->g->values[v].name);
            e->dptr[v] = s->dptr[u];
            return TP_OK;
        }
    tp_status st = tpe_dev_alloc(e, bytes, &e->dptr[v], e->g->values[v].name, err);
    if (!st && cudaMemset(e->dptr[v], 0, bytes) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "clearing %s", e->g->values[v].name);
    if (!st) e->act_bytes += (double)bytes;
    return st;
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
        if (val->kind == TP_VAL_PARAM && !(e->share && shared_param(e, v) >= 0) && !(e->repeats && e->repeats[v] >= 0)) {
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

/* Inputs for the build's timed choices (engine_internal.h): values a model reads as token ids, valid counts or position offsets zero (in
 * range), every other input uniform in [-1, 1) (images, states, noise). Never all zeros: the choice follows the data
 * it is timed on (ViT-B/16 FP16 on an H100: from zeroed images the pass ran 4.956 ms with its sparse picks against
 * 4.877 without, and they were dropped; from random ones they were kept, and the benchmark on random images ran
 * 5.059 ms against the dense engine's 5.292; bench/results 2026-11-26). */
tp_status tpe_fill_inputs(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    for (int k = 0; k < g->n_inputs; k++) {
        const int v = g->inputs[k];
        int index = 0; /* read as an integer somewhere */
        for (int i = 0; i < g->n_ops && !index; i++) {
            const tp_op *op = &g->ops[i];
            index = (op->kind == TP_OP_TOKEN_EMBED && op->in[0] == v) || (op->kind == TP_OP_ROPE && op->n_in > 1 && op->in[1] == v) ||
                    (op->kind == TP_OP_MASKED_ATTENTION && op->in[op->n_in - 1] == v);
        }
        const int rc = index ? (int)cudaMemsetAsync(e->dptr[v], 0, value_bytes(e, v), e->stream)
                             : tpk_fill_uniform(e->dptr[v], TP_F32, (size_t)tp_value_numel(&g->values[v]), 0x7a11u + (unsigned)k,
                                                e->stream);
        if (rc) return tp_fail(err, TP_ERR_CUDA, "filling input %s: error %d", g->values[v].name, rc);
    }
    return TP_OK;
}

/* Defined, non-zero contents for an activation buffer before the build times its kernel choices on it (the first
 * pass has not written it yet; compute-sanitizer initcheck reads an unwritten buffer as an error): fp16 values in
 * [-1, 1) (finite as fp32 and bf16 too), never zeros; an odd last byte zeroed. */
tp_status tpe_fill_defined(tp_engine *e, void *p, size_t bytes, unsigned seed, tp_error *err) {
    if (cudaMemsetAsync(p, 0, bytes, e->stream) != cudaSuccess || tpk_fill_uniform(p, TP_F16, bytes / 2, seed, e->stream))
        return tp_fail(err, TP_ERR_CUDA, "filling the activation buffers: %s", cudaGetErrorString(cudaGetLastError()));
    return TP_OK;
}

/* Activation buffers: one device buffer per slot of the plan's buffer assignment (tp_plan_buffers: exact-size
 * reuse, a fused op's output taken where its kernel runs); state values (the KV cache) have their own. */
static tp_status alloc_activations(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    size_t *bytes = malloc(sizeof(size_t) * (size_t)g->n_values), *slot_bytes = malloc(sizeof(size_t) * (size_t)g->n_values);
    int *slot = malloc(sizeof(int) * (size_t)g->n_values);
    unsigned char *pinned = malloc((size_t)g->n_values);
    void **sp = NULL;
    tp_status st = TP_OK;
    int n = -1;
    if (bytes && slot_bytes && slot && pinned) {
        for (int v = 0; v < g->n_values; v++) bytes[v] = tpe_act_alloc_bytes(e, v);
        tpe_group_pins(e, pinned); /* a group's outputs: one allocation each group (engine_group.c) */
        n = tp_plan_buffers(g, e->plan, bytes, pinned, slot, slot_bytes);
    }
    if (n < 0 || !(sp = calloc((size_t)(n ? n : 1), sizeof(void *)))) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        goto done;
    }
    for (int k = 0; !st && k < g->n_inputs; k++) { /* every input's own buffer (tpe_upload_inputs fills them) */
        const int v = g->inputs[k];
        st = tpe_dev_alloc(e, value_bytes(e, v), &e->dptr[v], g->values[v].name, err);
        if (!st) e->act_bytes += (double)value_bytes(e, v);
    }
    if (!st) st = tpe_fill_inputs(e, err); /* defined before the first upload, as the activations below */
    for (int k = 0; !st && k < n; k++) {
        st = tpe_dev_alloc(e, slot_bytes[k], &sp[k], "activations", err);
        if (!st) e->act_bytes += (double)slot_bytes[k];
        if (!st) st = tpe_fill_defined(e, sp[k], slot_bytes[k], 0x5eed0000u + (unsigned)k, err);
    }
    for (int v = 0; !st && v < g->n_values; v++) {
        if (slot[v] >= 0) e->dptr[v] = sp[slot[v]];
        else if (g->values[v].kind == TP_VAL_STATE) st = state_buffer(e, v, bytes[v], err);
    }
    if (!st) st = tpe_alloc_group_outputs(e, err);
done:
    free(pinned);
    free(bytes);
    free(slot_bytes);
    free(slot);
    free(sp);
    return st;
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
    e->kv_flash = calloc((size_t)g->n_ops, sizeof(int));
    if (!e->kv_flash) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_KV_ATTENTION) continue;
        const tp_value *c = &g->values[op->in[1]];
        const int B = (int)c->shape[1], L = (int)c->shape[2], T = (int)g->tokens;
        const tp_dtype dt = e->plan->value_dt[op->in[0]];
        const int D = op->head_dim;
        const tp_kernel_shape fs = {.dt = dt, .k = D};
        e->kv_flash[i] = e->resets_past && T > 16 && tp_supports(TP_KERNEL_ATTENTION_FLASH, &fs, NULL, 0);
        if (!e->kv_flash[i] && D != 64 && D != 128 && D != 256)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: head dim %d: the decode attention kernel takes 64, 128 "
                           "and 256", op->layer, D);
        size_t ws = e->kv_flash[i] ? 0 : tpk_kv_attention_workspace(B, T, op->heads, D, L);
        if (ws > e->kv_ws_bytes) e->kv_ws_bytes = ws;
        if (e->kv_flash[i] && e->plan->value_dt[op->in[1]] == TP_E4M3) { /* the prefill's K, V dequantized */
            const size_t b16 = 2 * (size_t)B * T * (size_t)c->shape[3] * tp_dtype_info(dt)->bytes;
            if (b16 > kv16) kv16 = b16;
        }
        snprintf(e->impl_note[i], sizeof e->impl_note[i], "%s", e->kv_flash[i]
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

tp_status tp_engine_build(const tp_graph *g, const tp_params *params, const tp_plan *plan,
                          const tp_engine_options *opt, tp_engine **out, tp_error *err) {
    if (g->tp_size > 1)
        return tp_fail(err, TP_ERR_ARG, "the graph is rank %d of %d of a tensor-parallel model: build every rank "
                       "with tp_engine_build_tp", g->tp_rank, g->tp_size);
    tp_status st = tpe_build(g, params, plan, opt, out, err);
    if (!st && (st = tpe_warm_capture(*out, err))) {
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
    e->attn = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *e->attn);
    e->sdpa = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *e->sdpa);
    e->impl_note = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *e->impl_note);
    e->gelu_sm90 = malloc(sizeof(int) * (size_t)(g->n_ops ? g->n_ops : 1));
    e->plain_sm90 = calloc((size_t)(g->n_ops ? g->n_ops : 1), 1);
    e->gemv16 = calloc((size_t)(g->n_ops ? g->n_ops : 1), 1);
    e->group_lead = malloc(sizeof(int) * (size_t)(g->n_ops ? g->n_ops : 1));
    e->group_next = malloc(sizeof(int) * (size_t)(g->n_ops ? g->n_ops : 1));
    e->group_on = calloc((size_t)(g->n_ops ? g->n_ops : 1), 1);
    e->group_cs = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(float *));
    e->gemm_us = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(double));
    e->wglobal = calloc((size_t)g->n_values, sizeof(float));
    e->alpha = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(float));
    e->act_amax = malloc(sizeof(float) * (size_t)(g->n_values ? g->n_values : 1));
    h_scales = malloc(sizeof(float) * 2 * SCALE_SLOT * (size_t)g->n_values);
    if (!e->dptr || !e->gplan || !e->d_bscale || !e->attn || !e->sdpa || !e->impl_note || !e->gelu_sm90 ||
        !e->plain_sm90 || !e->gemv16 || !e->group_lead || !e->group_next || !e->group_on || !e->group_cs || !e->gemm_us || !e->wglobal || !e->alpha || !e->act_amax || !h_scales) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        goto fail;
    }
    for (int i = 0; i < g->n_ops; i++) e->gelu_sm90[i] = -1;
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
    tpe_find_groups(e);
    if ((st = tpe_upload_groups(e, err))) goto fail;
    st = upload_params(e, h_scales, err);
    if (st) goto fail;
    for (int v = 0; v < g->n_values; v++) /* reciprocals: a GEMM's E4M3 D scale (tp_gemm_run_q) */
        h_scales[SCALE_SLOT * (g->n_values + v)] = 1.0f / h_scales[SCALE_SLOT * v];
    st = tpe_dev_alloc(e, sizeof(float) * 2 * SCALE_SLOT * (size_t)g->n_values, (void **)&e->d_scales, "scales", err);
    if (st) goto fail;
    st = tpe_dev_alloc(e, sizeof(float) * (size_t)g->n_values, (void **)&e->d_amax, "calibration", err);
    if (st) goto fail;
    CU_TRY(cudaMemcpy(e->d_scales, h_scales, sizeof(float) * 2 * SCALE_SLOT * (size_t)g->n_values,
                      cudaMemcpyHostToDevice));
    st = alloc_activations(e, err);
    if (st) goto fail;
    for (int i = 0; i < g->n_ops; i++) { /* no GEMM writes over its own operand (alloc_activations says why) */
        if (g->ops[i].kind != TP_OP_LINEAR) continue;
        const int ea = plan->op_epilogue_add[i], eg = plan->op_epilogue_gelu[i];
        const int y = eg >= 0 ? g->ops[eg].out : ea >= 0 ? g->ops[ea].out : g->ops[i].out;
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
        if (plan->op_epilogue_embed[i] >= 0) { /* tprof's kernel, no cuBLASLt plan, no im2col scratch */
            if (!tpk_patch_embed_supported(plan->value_dt[op->in[1]], op->patch, (int)op->gemm_n)) {
                st = tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: the fused patch embedding (patch_embed.h) does not "
                             "run on this device", op->layer);
                goto fail;
            }
            snprintf(e->impl_note[i], sizeof e->impl_note[i],
                     "tprof patch_embed.cu: wgmma GEMM, im2col + cast in its loads, bias + %s in its epilogue",
                     g->ops[plan->op_epilogue_embed[i]].layer);
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
        const int eg = plan->op_epilogue_gelu[i]; /* a fused GELU: the GEMM writes its output (plan.c) */
        tp_gemm_desc d = {op->gemm_m, op->gemm_n, op->gemm_k,
                          op->kind == TP_OP_PATCH_EMBED                  ? plan->value_dt[op->in[1]]
                          : plan->value_qf[op->in[0]] != TP_QF_NONE ? TP_BF16
                          : op_fp8_quant_in(e, i)                   ? TP_E4M3
                                                                          : plan->value_dt[op->in[0]],
                          plan->value_dt[eg >= 0 ? g->ops[eg].out : op->out], op->n_in > 2, 0, 0,
                          plan->op_epilogue_add[i] >= 0, eg >= 0, 0};
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

    st = tpe_choose_attention(e, opt->attention, err);
    if (st) goto fail;
    st = tpe_choose_gemms(e, opt->gemm_first, opt->cublaslt_only, opt->gemm_choice, err);
    if (st) goto fail;
    e->sparse_mode = opt->sparse;
    if (opt->sparse && (st = tpe_choose_sparse(e, err))) goto fail;

    free(h_scales);
    *out = e;
    return TP_OK;
fail:
    free(h_scales);
    tp_engine_destroy(e);
    return st;
}

/* Counts the graph's programmatic edges (pdl.cuh's launches, captured) and, with strip, makes each an ordinary
 * one: the downstream kernel then starts after the upstream one has completed, as without PDL. */
static tp_status graph_pdl_edges(tp_engine *x, int strip, tp_error *err) {
    size_t n = 0;
    cudaError_t ce = cudaGraphGetEdges(x->graph, NULL, NULL, NULL, &n);
    if (ce != cudaSuccess) return tp_fail(err, TP_ERR_CUDA, "reading the CUDA graph's edges: %s", cudaGetErrorString(ce));
    cudaGraphNode_t *from = malloc((n ? n : 1) * sizeof *from), *to = malloc((n ? n : 1) * sizeof *to);
    cudaGraphEdgeData *ed = malloc((n ? n : 1) * sizeof *ed);
    tp_status st = from && to && ed ? TP_OK : tp_fail(err, TP_ERR_OOM, "out of host memory");
    /* none to read (a one-kernel graph): the call with arrays then answers invalid argument (seen on an H100) */
    if (!st && n > 0 && (ce = cudaGraphGetEdges(x->graph, from, to, ed, &n)) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "reading the CUDA graph's edges: %s", cudaGetErrorString(ce));
    x->pdl_edges = 0;
    x->graph_edges = (int)n;
    for (size_t i = 0; !st && i < n; i++) {
        if (ed[i].type != cudaGraphDependencyTypeProgrammatic && ed[i].from_port == cudaGraphKernelNodePortDefault)
            continue;
        if (!strip) {
            x->pdl_edges++;
            continue;
        }
        cudaGraphEdgeData plain;
        memset(&plain, 0, sizeof plain);
        if ((ce = cudaGraphRemoveDependencies(x->graph, &from[i], &to[i], &ed[i], 1)) != cudaSuccess ||
            (ce = cudaGraphAddDependencies(x->graph, &from[i], &to[i], &plain, 1)) != cudaSuccess)
            st = tp_fail(err, TP_ERR_CUDA, "making the CUDA graph's programmatic edges ordinary (no_pdl): %s",
                         cudaGetErrorString(ce));
    }
    free(from);
    free(to);
    free(ed);
    return st;
}

int tp_engine_pdl_edges(const tp_engine *e, int *total) {
    if (total) *total = e && e->exec ? e->graph_edges : 0;
    return e && e->exec ? e->pdl_edges : -1;
}

/* A modular engine's graphs: each stage's ops captured into a graph of its own (the run's start in the first, its
 * end in the last), instantiated and uploaded. */
static tp_status capture_stages(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    for (int k = 0; k < e->n_seg && !st; k++) {
        CU_TRY(cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal));
        if (k == 0) st = tpe_launch_begin(e, err);
        for (int i = e->seg_first[k]; i < e->seg_first[k + 1] && !st; i++) {
            nvtxRangePushA(e->g->ops[i].layer);
            st = tpe_launch_op(e, i, err);
            nvtxRangePop();
        }
        if (!st && k == e->n_seg - 1) st = tpe_launch_end(e, err);
        cudaGraph_t graph = NULL;
        cudaError_t ce = cudaStreamEndCapture(e->stream, &graph);
        e->seg_graph[k] = graph;
        if (!st && ce != cudaSuccess)
            st = tp_fail(err, TP_ERR_CUDA, "capturing stage %d in a CUDA graph: %s", k, cudaGetErrorString(ce));
        if (st) break;
        e->graph = graph; /* graph_pdl_edges reads e->graph: this stage's */
        st = graph_pdl_edges(e, e->no_pdl, err);
        e->graph = NULL;
        if (st) break;
        CU_TRY(cudaGraphInstantiate(&e->seg_exec[k], graph, 0));
        CU_TRY(cudaGraphUpload(e->seg_exec[k], e->stream));
        CU_TRY(cudaStreamSynchronize(e->stream));
    }
    return st;
fail:
    return st;
}

/* One eager pass (module loading, cuBLASLt warm-up) on a defined (zeroed) input, then the capture; it is never
 * timed, and every timed or checked run uses the real input set later. A leader does both for every rank, the
 * ranks' launches in lockstep (their all-reduces wait for each other), each rank's stream captured into its own
 * graph. */
tp_status tpe_warm_capture(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    const int n = n_ranks(e);
    int capturing = 0;
    for (int r = 0; r < n; r++) {
        tp_engine *x = rank_engine(e, r);
        CU_TRY(cudaSetDevice(x->device));
        for (int k = 0; k < x->g->n_inputs; k++) /* every input defined (token ids and counts in range) */
            CU_TRY(cudaMemsetAsync(x->dptr[x->g->inputs[k]], 0, value_bytes(x, x->g->inputs[k]), x->stream));
        /* a graph with a KV cache warms up at position 0 (any other could run past the cache's end) */
        if (x->g->kv_len > 0) CU_TRY(cudaMemsetAsync(x->d_past, 0, sizeof(int), x->stream));
    }
    CU_TRY(cudaSetDevice(e->device));
    if ((st = launch_all(e, err)) || (st = sync_all(e, err)) || !e->use_graph) return st;
    if (e->n_seg > 0) return capture_stages(e, err);
    for (; capturing < n; capturing++) {
        tp_engine *x = rank_engine(e, capturing);
        CU_TRY(cudaSetDevice(x->device));
        CU_TRY(cudaStreamBeginCapture(x->stream, cudaStreamCaptureModeThreadLocal));
    }
    CU_TRY(cudaSetDevice(e->device));
    st = launch_all(e, err);
    for (int r = 0; r < n; r++) {
        tp_engine *x = rank_engine(e, r);
        cudaGraph_t graph = NULL;
        cudaSetDevice(x->device);
        cudaError_t ce = cudaStreamEndCapture(x->stream, &graph);
        x->graph = graph;
        if (!st && ce != cudaSuccess)
            st = tp_fail(err, TP_ERR_CUDA, "capturing the forward pass in a CUDA graph%s: %s", n > 1 ? " (a rank)" : "",
                         cudaGetErrorString(ce));
    }
    capturing = 0;
    for (int r = 0; r < n && !st; r++) {
        tp_engine *x = rank_engine(e, r);
        CU_TRY(cudaSetDevice(x->device));
        if ((st = graph_pdl_edges(x, x->no_pdl, err))) break;
        CU_TRY(cudaGraphInstantiate(&x->exec, x->graph, 0));
        /* uploaded now, on an idle GPU: a first launch uploads the graph itself, and with tensor parallelism one
         * host thread launching a large graph (100 Llama layers at TP 4) blocked in cudaGraphLaunch while GPU 0 waited
         * in an all-reduce for the ranks not yet launched (bench/results, 2026-11-26 h200x4 tphang) */
        CU_TRY(cudaGraphUpload(x->exec, x->stream));
        CU_TRY(cudaStreamSynchronize(x->stream));
    }
    CU_TRY(cudaSetDevice(e->device));
    return st;
fail:
    for (int r = 0; r < capturing; r++) { /* end what was begun, so the streams stay usable for destroy */
        tp_engine *x = rank_engine(e, r);
        cudaGraph_t graph = NULL;
        cudaSetDevice(x->device);
        if (cudaStreamEndCapture(x->stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    }
    cudaSetDevice(e->device);
    return st;
}

const char *tp_engine_op_impl(const tp_engine *e, int op) {
    if (!e || op < 0 || op >= e->g->n_ops || !e->impl_note[op][0]) return NULL;
    return e->impl_note[op];
}

int tp_engine_gemm_choice(const tp_engine *e, int op) {
    if (!e || op < 0 || op >= e->g->n_ops || !e->gplan[op]) return -1;
    if (e->plain_sm90[op]) return TP_GEMM_CHOICE_SM90;
    if (e->gemv16[op]) return TP_GEMM_CHOICE_GEMV;
    return e->gelu_sm90[op] >= 0 ? TP_GEMM_CHOICE_SM90_GELU : tp_gemm_plan_choice(e->gplan[op]);
}

double tp_engine_op_bytes(const tp_engine *e, int op) {
    if (!e || op < 0 || op >= e->g->n_ops) return 0.0;
    const tp_graph *g = e->g;
    for (int j = 0; j < g->n_ops; j++)
        if (e->gelu_sm90[j] == op) return 0.0; /* a GELU done by GEMM j's epilogue: its bytes are j's */
    const int lead = e->group_lead ? e->group_lead[op] : -1;
    if (lead >= 0 && e->group_on[lead]) { /* one GEMV computes the group (engine_group.c): all bytes the leader's */
        if (op != lead) return 0.0;
        double b = 0.0;
        for (int j = lead; j >= 0; j = e->group_next[j]) b += tp_plan_op_bytes(e->plan, g, j);
        return b;
    }
    double b = tp_plan_op_bytes(e->plan, g, op);
    if (e->gelu_sm90[op] >= 0) { /* writes the GELU's output instead of its own */
        const int x = g->ops[op].out, y = g->ops[e->gelu_sm90[op]].out;
        b += (double)tp_value_numel(&g->values[y]) * (double)tp_dtype_info(e->plan->value_dt[y])->bytes -
             (double)tp_value_numel(&g->values[x]) * (double)tp_dtype_info(e->plan->value_dt[x])->bytes;
    }
    return b;
}

int tp_engine_attention_choice(const tp_engine *e, int op) {
    if (!e || op < 0 || op >= e->g->n_ops || e->g->ops[op].kind != TP_OP_ATTENTION) return -1;
    if (e->plan->op_prec[op] == TP_PREC_FP8) return -1;
    return (int)e->attn[op];
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
    free(e->attn);
    free(e->gelu_sm90);
    free(e->plain_sm90);
    free(e->gemv16);
    free(e->group_lead);
    free(e->group_next);
    free(e->group_on);
    free(e->group_cs);
    free(e->gemm_us);
    free(e->impl_note);
    free(e->wglobal);
    free(e->alpha);
    free(e->act_amax);
    free(e->d_invfreq);
    free(e->d_opconst);
    for (int i = 0; e->mplan && i < 4 * e->g->n_ops; i++) tp_bgemm_destroy(e->mplan[i]);
    free(e->mplan);
    free(e->masked_gemm);
    free(e->repeats);
    free(e->kv_flash);
    if (e->owns_nccl) tp_nccl_destroy(e->nccl);
    free(e);
}

tp_status tp_engine_set_past(tp_engine *e, int64_t past, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    if (g->kv_len <= 0) return tp_fail(err, TP_ERR_ARG, "the engine's graph has no KV cache");
    if (past < 0 || past + g->tokens > g->kv_len)
        return tp_fail(err, TP_ERR_ARG, "cache position %lld: %lld new tokens would overflow the cache of %lld",
                       (long long)past, (long long)g->tokens, (long long)g->kv_len);
    const int p = (int)past;
    for (int r = 0; r < n_ranks(e); r++) {
        tp_engine *x = rank_engine(e, r);
        CU_TRY(cudaSetDevice(x->device));
        CU_TRY(cudaMemcpyAsync(x->d_past, &p, sizeof p, cudaMemcpyHostToDevice, x->stream));
        CU_TRY(cudaStreamSynchronize(x->stream));
    }
    CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

tp_status tp_engine_feed_argmax(const tp_engine *from, tp_engine *to, tp_error *err) {
    const tp_value *o = &from->g->values[from->g->output], *in = &to->g->values[to->g->input];
    tp_status st = TP_OK;
    if (o->ndim != 2 || in->ndim != 2 || in->shape[1] != 1 || o->shape[0] != in->shape[0])
        return tp_fail(err, TP_ERR_ARG, "feeding the next token: (B, V) logits into a (B, 1) input expected");
    if (n_ranks(from) != n_ranks(to))
        return tp_fail(err, TP_ERR_ARG, "feeding the next token: %d ranks into %d", n_ranks(from), n_ranks(to));
    /* every rank computes the same logits (the LM head is whole on each): each feeds its own input */
    for (int r = 0; r < n_ranks(to); r++) {
        const tp_engine *f = rank_engine((tp_engine *)from, r);
        tp_engine *t = rank_engine(to, r);
        CU_TRY(cudaSetDevice(t->device));
        CU_TRY(cudaStreamSynchronize(f->stream));
        int rc = tpk_argmax(f->dptr[f->g->output], f->plan->value_dt[f->g->output], t->dptr[t->g->input],
                            (int)o->shape[0], (int)o->shape[1], t->stream);
        if (rc) return tp_fail(err, TP_ERR_CUDA, "argmax: %s", cudaGetErrorString((cudaError_t)rc));
        CU_TRY(cudaStreamSynchronize(t->stream));
    }
    CU_TRY(cudaSetDevice(to->device));
    return TP_OK;
fail:
    return st;
}

tp_status tp_engine_decode(tp_engine *e, int steps, double *step_ms, float *tokens, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    if (!e->feed_argmax) return tp_fail(err, TP_ERR_ARG, "tp_engine_decode: a decode engine (greedy feedback) expected");
    const int B = (int)g->batch;
    run_timer t = {0};
    float *d_tok = NULL;
    int pushed = 0;
    int past = 0;
    CU_TRY(cudaSetDevice(e->device));
    CU_TRY(cudaMemcpy(&past, e->d_past, sizeof past, cudaMemcpyDeviceToHost));
    if (past < 0 || past + (int64_t)steps * g->tokens > g->kv_len) {
        st = tp_fail(err, TP_ERR_ARG, "%d decode steps after %d cached tokens overflow the KV cache of %lld", steps,
                     past, (long long)g->kv_len);
        goto fail;
    }
    CU_TRY(cudaMalloc((void **)&d_tok, sizeof(float) * (size_t)(steps * B + 1)));
    if ((st = rtimer_create(e, steps, &t, err))) goto fail;
    nvtxRangePushA("BENCHMARK"); /* the decode steps, for nsys and ncu --nvtx */
    pushed = 1;
    for (int s = 0; s < steps; s++) {
        if ((st = rtimer_mark(e, &t, s, 0, err))) goto fail;
        if ((st = launch_run(e, err))) goto fail; /* --no-graph: the launches' gaps are part of the step */
        if ((st = rtimer_mark(e, &t, s, 1, err))) goto fail;
        /* the token this step chose, now the input of the next: kept outside the timed region */
        CU_TRY(cudaMemcpyAsync(d_tok + (size_t)s * B, e->dptr[g->input], sizeof(float) * (size_t)B,
                               cudaMemcpyDeviceToDevice, e->stream));
    }
    if ((st = sync_all(e, err))) goto fail;
    nvtxRangePop();
    pushed = 0;
    if ((st = rtimer_read(&t, step_ms, NULL, err))) goto fail;
    if (tokens) CU_TRY(cudaMemcpy(tokens, d_tok, sizeof(float) * (size_t)(steps * B), cudaMemcpyDeviceToHost));
fail:
    if (pushed) nvtxRangePop();
    rtimer_destroy(&t);
    if (d_tok) cudaFree(d_tok);
    return st;
}

tp_status tp_engine_set_input(tp_engine *e, const float *images, tp_error *err) {
    tp_status st = TP_OK;
    for (int r = 0; r < n_ranks(e); r++) { /* every rank reads the whole input */
        tp_engine *x = rank_engine(e, r);
        CU_TRY(cudaSetDevice(x->device));
        if ((st = tpe_upload_inputs(x, images, err))) goto fail;
        CU_TRY(cudaStreamSynchronize(x->stream));
    }
    CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

tp_status tp_engine_attention_cost(tp_engine *e, double *cosine, double *rel_l2, int *n_out, tp_error *err) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    tp_status st = TP_OK;
    if (e->ranks) return tp_fail(err, TP_ERR_UNSUPPORTED, "FP8 attention's cost: unsupported on a tensor-parallel engine");
    void *d_ref = NULL, *h8 = NULL, *h16 = NULL, *d_q16 = NULL, *h_q = NULL;
    float *f8 = NULL, *f16 = NULL, *f_q = NULL;
    int n = 0;
    for (int i = 0; i < g->n_ops; i++) cosine[i] = rel_l2[i] = NAN;
    for (int i = 0; i < g->n_ops && !st; i++) {
        if ((st = tpe_launch_op(e, i, err))) break;
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_ATTENTION || pl->op_prec[i] != TP_PREC_FP8) continue;
        const tp_value *xv = &g->values[op->in[0]], *ov = &g->values[op->out];
        const tp_dtype xdt = pl->value_dt[op->in[0]], ydt = pl->value_dt[op->out];
        /* E4M3 Q/K/V (written by the QKV GEMM): the reference runs on their values in f16 (exact), so the cost
         * is that of P and the output; Q/K/V's own rounding happened in the GEMM */
        const tp_dtype rdt = xdt == TP_E4M3 ? TP_F16 : xdt;
        const size_t m = (size_t)tp_value_numel(ov), rb = m * tp_dtype_info(rdt)->bytes, yb = value_bytes(e, op->out);
        const void *ref_in = e->dptr[op->in[0]];
        if (!d_ref) {
            CU_TRY(cudaMalloc(&d_ref, rb));
            h8 = malloc(yb > rb ? yb : rb);
            h16 = malloc(rb);
            f8 = malloc(sizeof(float) * m);
            f16 = malloc(sizeof(float) * m);
            if (!h8 || !h16 || !f8 || !f16) {
                st = tp_fail(err, TP_ERR_OOM, "out of host memory comparing %s", op->layer);
                break;
            }
        }
        if (xdt == TP_E4M3) {
            const size_t nq = (size_t)tp_value_numel(xv);
            float sq = 1.0f;
            free(h_q), free(f_q), cudaFree(d_q16);
            d_q16 = NULL, h_q = malloc(nq * 2), f_q = malloc(sizeof(float) * nq);
            if (!h_q || !f_q) {
                st = tp_fail(err, TP_ERR_OOM, "out of host memory comparing %s", op->layer);
                break;
            }
            CU_TRY(cudaMalloc(&d_q16, nq * 2));
            CU_TRY(cudaMemcpyAsync(h_q, e->dptr[op->in[0]], nq, cudaMemcpyDeviceToHost, e->stream));
            CU_TRY(cudaMemcpyAsync(&sq, e->d_scales + SCALE_SLOT * op->in[0], sizeof sq, cudaMemcpyDeviceToHost,
                                   e->stream));
            CU_TRY(cudaStreamSynchronize(e->stream));
            tp_convert_to_f32(TP_E4M3, h_q, f_q, nq, sq); /* one scale for Q, K and V (plan.c) */
            tp_convert_from_f32(TP_F16, f_q, h_q, nq, 1.0f);
            CU_TRY(cudaMemcpy(d_q16, h_q, nq * 2, cudaMemcpyHostToDevice));
            ref_in = d_q16;
        }
        /* the reference: the high-precision flash kernel on the same qkv, output in the input's type */
        int rc = tpk_flash_attention(ref_in, rdt, d_ref, rdt, NULL, (int)xv->shape[0], (int)xv->shape[1], op->heads,
                                     op->head_dim, op->scale, e->stream);
        if (rc) {
            st = tp_fail(err, TP_ERR_CUDA, "reference attention for %s: %s", op->layer, cudaGetErrorString((cudaError_t)rc));
            break;
        }
        float ys = 1.0f;
        CU_TRY(cudaMemcpyAsync(h8, e->dptr[op->out], yb, cudaMemcpyDeviceToHost, e->stream));
        CU_TRY(cudaMemcpyAsync(h16, d_ref, rb, cudaMemcpyDeviceToHost, e->stream));
        if (ydt == TP_E4M3)
            CU_TRY(cudaMemcpyAsync(&ys, e->d_scales + SCALE_SLOT * op->out, sizeof ys, cudaMemcpyDeviceToHost, e->stream));
        CU_TRY(cudaStreamSynchronize(e->stream));
        tp_convert_to_f32(ydt, h8, f8, m, ys);
        tp_convert_to_f32(rdt, h16, f16, m, 1.0f);
        double dot = 0, a2 = 0, b2 = 0, d2 = 0;
        for (size_t k = 0; k < m; k++) {
            double a = f8[k], b = f16[k];
            dot += a * b;
            a2 += a * a;
            b2 += b * b;
            d2 += (a - b) * (a - b);
        }
        cosine[i] = dot / sqrt(a2 * b2);
        rel_l2[i] = sqrt(d2 / b2);
        n++;
    }
fail:
    cudaFree(d_ref);
    cudaFree(d_q16);
    free(h_q);
    free(f_q);
    free(h8);
    free(h16);
    free(f8);
    free(f16);
    if (!st) *n_out = n;
    return st;
}

tp_status tp_engine_forward(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    /* poison the output so an unwritten element shows as NaN */
    CU_TRY(cudaSetDevice(e->device));
    CU_TRY(cudaMemsetAsync(e->dptr[e->g->output], 0xFF, value_bytes(e, e->g->output), e->stream));
    if ((st = launch_run(e, err))) return st;
    return sync_all(e, err);
fail:
    return st;
}

tp_status tp_engine_get_output(tp_engine *e, float *out, tp_error *err) {
    tp_status st = TP_OK;
    int v = e->g->output;
    size_t bytes = value_bytes(e, v);
    void *h = malloc(bytes);
    if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    CU_TRY(cudaSetDevice(e->device));
    CU_TRY(cudaMemcpyAsync(h, e->dptr[v], bytes, cudaMemcpyDeviceToHost, e->stream));
    CU_TRY(cudaStreamSynchronize(e->stream));
    tp_convert_to_f32(e->plan->value_dt[v], h, out, (size_t)tp_value_numel(&e->g->values[v]), 1.0f);
    free(h);
    return TP_OK;
fail:
    free(h);
    return st;
}

tp_status tp_engine_calibrate(tp_engine *e, const int *want, float *amax, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    if (e->ranks) return tp_fail(err, TP_ERR_UNSUPPORTED, "calibration: unsupported on a tensor-parallel engine (calibrate on one GPU)");
    float *h = malloc(sizeof(float) * (size_t)g->n_values);
    if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    CU_TRY(cudaMemsetAsync(e->d_amax, 0, sizeof(float) * (size_t)g->n_values, e->stream));
    for (int i = 0; i < g->n_ops; i++) {
        if ((st = tpe_launch_op(e, i, err))) goto fail;
        int v = g->ops[i].out;
        if (!want[v]) continue;
        HOOK(e, i, TP_CAT_QUANT);
        int rc = tpk_amax(e->dptr[v], e->plan->value_dt[v], (size_t)tp_value_numel(&g->values[v]), e->d_amax + v,
                          e->stream);
        if (rc) {
            st = tp_fail(err, TP_ERR_CUDA, "amax of %s: %s", g->values[v].name, cudaGetErrorString((cudaError_t)rc));
            goto fail;
        }
    }
    /* the engine's stream is non-blocking: a plain cudaMemcpy would not wait for the kernels above */
    HOOK(e, -1, TP_CAT_OTHER);
    CU_TRY(cudaMemcpyAsync(h, e->d_amax, sizeof(float) * (size_t)g->n_values, cudaMemcpyDeviceToHost, e->stream));
    CU_TRY(cudaStreamSynchronize(e->stream));
    for (int v = 0; v < g->n_values; v++)
        if (want[v] && !(h[v] <= amax[v])) amax[v] = h[v]; /* NaN propagates */
    free(h);
    return TP_OK;
fail:
    free(h);
    return st;
}

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

tp_status tp_engine_benchmark(tp_engine *e, double warmup_ms, int iterations, double duration_ms, double **samples,
                              int *n_out, double *wall_ms, tp_error *err) {
    tp_status st = TP_OK;
    run_timer t = {0};
    int n = 0;
    *samples = NULL;
    *n_out = 0;
    /* warm-up: untimed, synchronized runs until warmup_ms have passed (at least one); it also estimates the
     * time per run so the timed region can be sized without any synchronization inside it */
    int warm = 0;
    double t0 = tp_now_ms(), t1;
    do {
        if ((st = launch_run(e, err)) || (st = sync_all(e, err))) goto fail;
        warm++;
        t1 = tp_now_ms();
    } while (t1 - t0 < warmup_ms);
    double est = (t1 - t0) / warm;
    n = iterations > 0 ? iterations : 1;
    if (duration_ms > 0 && est > 0 && duration_ms / est > n) n = (int)ceil(duration_ms / est);
    if (n > 100000) n = 100000;
    if (!(*samples = malloc(sizeof(double) * (size_t)n))) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory for %d timing samples", n);
        goto fail;
    }
    if ((st = rtimer_create(e, n, &t, err))) goto fail;
    nvtxRangePushA("BENCHMARK");
    for (int i = 0; i < n && !st; i++) {
        if (!(st = rtimer_mark(e, &t, i, 0, err)) && !(st = launch_run(e, err))) st = rtimer_mark(e, &t, i, 1, err);
    }
    if (!st) st = sync_all(e, err);
    nvtxRangePop();
    if (!st) st = rtimer_read(&t, *samples, wall_ms, err);
    if (st) goto fail;
    *n_out = n;
    rtimer_destroy(&t);
    return TP_OK;
fail:
    rtimer_destroy(&t);
    free(*samples);
    *samples = NULL;
    return st;
}

tp_status tp_engine_run_n(tp_engine *e, int n, tp_error *err) {
    tp_status st = TP_OK;
    for (int i = 0; i < n && !st; i++) st = launch_run(e, err);
    return st ? st : sync_all(e, err);
}

double tp_engine_weight_bytes(const tp_engine *e) { return e->weight_bytes; }
double tp_engine_activation_bytes(const tp_engine *e) { return e->act_bytes; }

/* 1 when an eager pass writes value v where the graph says: no producer fused the op after it into its epilogue (a
 * residual add or a GELU: such a GEMM writes that op's output, never its own) */
static int value_written(const tp_engine *e, int v) {
    const int p = e->g->values[v].producer;
    if (!e->dptr[v]) return 0;
    if (p < 0) return 1;
    if (e->plan->op_epilogue_add[p] >= 0 || e->plan->op_epilogue_gelu[p] >= 0) return 0;
    return tp_engine_gemm_choice(e, p) != TP_GEMM_CHOICE_SM90_GELU;
}

tp_status tp_engine_capture(tp_engine *e, float *const *taps, tp_error *err) {
    const tp_graph *g = e->g;
    if (e->ranks) return tp_fail(err, TP_ERR_UNSUPPORTED, "per-stage drift: unsupported on a tensor-parallel engine");
    tp_status st = TP_OK;
    void *h = NULL;
    size_t cap = 0;
    CU_TRY(cudaSetDevice(e->device));
    st = tpe_launch_begin(e, err);
    for (int i = 0; i < g->n_ops && !st; i++) {
        if ((st = tpe_launch_op(e, i, err))) break;
        for (int t = 0; t < g->n_taps && !st; t++) {
            const int v = g->taps[t].value;
            if (v != g->ops[i].out || !taps[t]) continue;
            const size_t n = (size_t)tp_value_numel(&g->values[v]), bytes = value_bytes(e, v);
            if (!value_written(e, v)) { /* not there to read: NaN, shown as such, never another value */
                for (size_t k = 0; k < n; k++) taps[t][k] = NAN;
                continue;
            }
            if (bytes > cap) {
                free(h);
                if (!(h = malloc(cap = bytes))) {
                    st = tp_fail(err, TP_ERR_OOM, "out of host memory reading %s", g->values[v].name);
                    break;
                }
            }
            float scale = 1.0f; /* an E4M3 value's per-tensor scale (value = e4m3 x scale) */
            CU_TRY(cudaMemcpyAsync(h, e->dptr[v], bytes, cudaMemcpyDeviceToHost, e->stream));
            if (e->plan->value_dt[v] == TP_E4M3)
                CU_TRY(cudaMemcpyAsync(&scale, e->d_scales + SCALE_SLOT * v, sizeof scale, cudaMemcpyDeviceToHost,
                                       e->stream));
            CU_TRY(cudaStreamSynchronize(e->stream));
            tp_convert_to_f32(e->plan->value_dt[v], h, taps[t], n, scale);
        }
    }
    if (!st) st = tpe_launch_end(e, err);
    free(h);
    return st;
fail:
    free(h);
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
