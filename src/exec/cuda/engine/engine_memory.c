/* engine_memory.c, the memory phase, the lowest (it calls no other engine file): the engine's device allocations
 * (tpe_dev_alloc, the activation buffers and their defined contents, a KV cache's own buffer), the weights uploaded
 * in their storage and converted or quantized on the GPU (plain, per-tensor FP8, weight-only NVFP4; on the host,
 * tpe_weight_host, for stored tensors, fp8-block and native block-scaled ones; a shared engine's copies reused), the sibling groups' contiguous layouts, and a pipeline graph's constants,
 * masked-attention plans and buffers, inputs and stage buffers. engine_internal.h lists the phases. C11. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/util.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "exec/cuda/engine/engine_internal.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/kernels/quantize.h"
#include "exec/cuda/kernels/scale_layout.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "formats/dtype.h"
#include "formats/qformat.h"

/* ---- allocation ------------------------------------------------------------------------------------- */

tp_status tpe_dev_alloc(tp_engine *e, size_t bytes, void **p, const char *what, tp_error *err) {
    if (e->n_allocs == e->cap_allocs) {
        e->cap_allocs = e->cap_allocs ? 2 * e->cap_allocs : 256;
        void **na = realloc(e->allocs, sizeof(void *) * (size_t)e->cap_allocs);
        if (!na) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        e->allocs = na;
    }
    cudaError_t ce = cudaMalloc(p, bytes ? bytes : 16);
    if (ce != cudaSuccess) {
        char b[32];
        cudaGetLastError();
        return tp_fail(err, ce == cudaErrorMemoryAllocation ? TP_ERR_OOM : TP_ERR_CUDA,
                       "out of GPU memory allocating %s for %s (%s)", tp_fmt_bytes((double)bytes, b, sizeof b),
                       what, cudaGetErrorString(ce));
    }
    e->allocs[e->n_allocs++] = *p;
    return TP_OK;
}

size_t tpe_act_alloc_bytes(const tp_engine *e, int v) {
    return value_bytes(e, v) + (size_t)(PAD_ROWS * value_cols(e, v)) * tp_dtype_info(e->plan->value_dt[v])->bytes;
}

/* ---- weights and activations ------------------------------------------------------------------------- */

static tp_status upload(void *dst, const void *src, size_t bytes, const char *what, tp_error *err) {
    cudaError_t ce = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return ce == cudaSuccess ? TP_OK : tp_fail(err, TP_ERR_CUDA, "uploading %s: %s", what, cudaGetErrorString(ce));
}

/* An fp8-block weight (N, K) into codes (N K bytes) and scales (tp_gemm_b128_weight_scale_count floats) on the
 * device: E4M3 codes and 128x128 scales, from the engine file when it holds them, else quantized here; the scales
 * re-laid for cuBLASLt (gemm_cublaslt.h), the layout the block-scaled GEMV reads too (gemv.h). */
static tp_status fp8_block_into(tp_engine *e, int v, void *codes, void *scales, tp_error *err) {
    const tp_param *p = &e->params->params[e->g->values[v].param_index];
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
    if (!st) st = upload(codes, pre->elems, pre->elem_bytes, p->name, err);
    if (!st) st = upload(scales, sc, sizeof(float) * ns, p->name, err);
    if (!st) e->weight_bytes += (double)pre->elem_bytes + (double)pre->scale_bytes;
    free(sc);
    tp_qtensor_free(&own);
    return st;
}

static tp_status upload_fp8_block_weight(tp_engine *e, int v, const tp_param *p, tp_error *err) {
    const int64_t N = value_rows(e, v), K = value_cols(e, v);
    tp_status st = tpe_dev_alloc(e, (size_t)(N * K), &e->dptr[v], p->name, err);
    if (!st) st = tpe_dev_alloc(e, sizeof(float) * tp_gemm_b128_weight_scale_count(N, K), &e->d_bscale[v], p->name, err);
    return st ? st : fp8_block_into(e, v, e->dptr[v], e->d_bscale[v], err);
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

/* The shared engine's device copy of parameter value v (the same parameter in the same storage), or -1. A scaled
 * weight is shared only as per-tensor E4M3, whose scale the shared engine keeps on the host (wglobal). */
int tpe_shared_param(const tp_engine *e, int v) {
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

/* The per-tensor scale of weight v stored in dt (value_scaled: amax / the format's largest finite value, so the
 * largest weight maps to it; 1 when unscaled or all zero), a max over all threads (the same bits on any number). */
static float weight_scale(const tp_engine *e, int v, const tp_param *p, tp_dtype dt) {
    if (!e->plan->value_scaled[v]) return 1.0f;
    float amax = 0;
#pragma omp parallel for reduction(max : amax) if (p->numel >= (1 << 20))
    for (int64_t j = 0; j < p->numel; j++) amax = fmaxf(amax, fabsf(p->data[j]));
    return amax > 0 ? (float)(amax / tp_dtype_info(dt)->max_finite) : 1.0f;
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
        *scale = weight_scale(e, v, p, dt);
        tp_convert_from_f32(dt, p->data, h, (size_t)p->numel, *scale);
    }
    e->wglobal[v] = *scale;
}

/* ---- weights converted and quantized on the GPU (issue 43) ------------------------------------------------
 * A weight's FP32 values go to the GPU in chunks and are converted or quantized there (quantize.h, bit for bit as
 * the host's tp_convert_from_f32 and tp_quantize): the host only copies, so an 8B model's build is not held by
 * the CPU's conversion (the nvfp4-wo engine of Llama-3.1-8B: 19.3 s quantizing on 16 cores,
 * bench/results/2026-11-29_h200_issue43_llama31_8b_phases.log). Two pinned host buffers and two device buffers
 * of FP32: a chunk is copied into one pinned buffer while the other's upload and kernel run. The environment
 * variable TPROF_QUANTIZE_CPU=1 converts on the host instead (the reference path, for comparisons). */
enum { STAGE_BYTES = 64 << 20, STAGE_FLOATS = STAGE_BYTES / 4 };
typedef struct {
    void *buf[2];
    float *dev[2];
    cudaEvent_t done[2]; /* buf[b]'s last upload read it */
    int pinned[2];       /* each buffer's own: the second allocation may fail after the first succeeded */
    int used[2];
    unsigned k;          /* chunks staged so far: the next goes through buffer k & 1 */
    int cpu;             /* TPROF_QUANTIZE_CPU=1: convert on the host */
} stage_bufs;

/* the buffers are allocated by the first chunk (an engine without groups, or one converting on the host, needs none) */
static tp_status stage_open(stage_bufs *sb, tp_error *err) {
    (void)err;
    memset(sb, 0, sizeof *sb);
    const char *env = getenv("TPROF_QUANTIZE_CPU");
    sb->cpu = env && strcmp(env, "1") == 0;
    return TP_OK;
}

static void stage_free(stage_bufs *sb) {
    for (int k = 0; k < 2; k++) {
        if (sb->done[k]) cudaEventDestroy(sb->done[k]);
        if (sb->pinned[k]) cudaFreeHost(sb->buf[k]);
        else free(sb->buf[k]);
        if (sb->dev[k]) cudaFree(sb->dev[k]);
        sb->done[k] = NULL, sb->buf[k] = NULL, sb->dev[k] = NULL, sb->pinned[k] = 0;
    }
}

/* 1 when the GPU path can run: the staging allocated now (the first weight) or before. Where it cannot be (no 128 MB
 * of GPU memory or 128 MB of host memory to spare: the engine's own allocations come later and say so), the weights
 * are converted on the host, the reference path: the same bits, only slower. */
static int stage_ready(stage_bufs *sb) {
    if (sb->cpu) return 0;
    if (sb->buf[0]) return 1;
    int ok = 1;
    for (int k = 0; k < 2 && ok; k++) {
        if (cudaHostAlloc(&sb->buf[k], STAGE_BYTES, cudaHostAllocDefault) == cudaSuccess) sb->pinned[k] = 1;
        else cudaGetLastError(), sb->buf[k] = malloc(STAGE_BYTES);
        ok = sb->buf[k] && cudaEventCreateWithFlags(&sb->done[k], cudaEventDisableTiming) == cudaSuccess &&
             cudaMalloc((void **)&sb->dev[k], STAGE_BYTES) == cudaSuccess;
    }
    if (!ok) {
        cudaGetLastError();
        stage_free(sb);
        sb->cpu = 1;
    }
    return ok;
}

/* every upload and kernel done before the buffers go */
static tp_status stage_close(stage_bufs *sb, tp_engine *e, tp_status st, tp_error *err) {
    const cudaError_t ce = sb->k ? cudaStreamSynchronize(e->stream) : cudaSuccess;
    stage_free(sb);
    if (!st && ce != cudaSuccess) st = tp_fail(err, TP_ERR_CUDA, "uploading the weights: %s", cudaGetErrorString(ce));
    return st;
}

/* m floats from src to the GPU through the next staging buffer: into dst when given (an FP32 weight lands where
 * it stays), else into that buffer's device half, returned in *dev. Queued on e->stream. */
static tp_status stage_floats(tp_engine *e, stage_bufs *sb, const float *src, size_t m, float *dst, float **dev,
                              const char *what, tp_error *err) {
    CHECK(sb->buf[0] && sb->dev[1]); /* stage_ready */
    const int b = (int)(sb->k++ & 1u);
    const cudaError_t se = sb->used[b] ? cudaEventSynchronize(sb->done[b]) : cudaSuccess;
    if (se != cudaSuccess) return tp_fail(err, TP_ERR_CUDA, "uploading %s: %s", what, cudaGetErrorString(se));
    /* the host's part: a copy, on every thread (one thread copies ~10 GB/s, below the link's rate) */
    const size_t piece = 1u << 18;
#pragma omp parallel for schedule(static) if (m >= 2 * piece)
    for (size_t o = 0; o < m; o += piece) memcpy((float *)sb->buf[b] + o, src + o, sizeof(float) * (m - o < piece ? m - o : piece));
    *dev = dst ? dst : sb->dev[b];
    cudaError_t ce = cudaMemcpyAsync(*dev, sb->buf[b], sizeof(float) * m, cudaMemcpyHostToDevice, e->stream);
    if (ce == cudaSuccess) ce = cudaEventRecord(sb->done[b], e->stream);
    if (ce != cudaSuccess) return tp_fail(err, TP_ERR_CUDA, "uploading %s: %s", what, cudaGetErrorString(ce));
    sb->used[b] = 1;
    return TP_OK;
}

/* p's values converted into dst (device) in dt under scale (tpk_weight_convert = tp_convert_from_f32) */
static tp_status dev_convert(tp_engine *e, stage_bufs *sb, const tp_param *p, void *dst, tp_dtype dt, float scale,
                             tp_error *err) {
    const size_t n = (size_t)p->numel, es = tp_dtype_info(dt)->bytes;
    for (size_t off = 0; off < n; off += STAGE_FLOATS) {
        const size_t m = n - off < STAGE_FLOATS ? n - off : STAGE_FLOATS;
        float *d = NULL;
        tp_status st = stage_floats(e, sb, p->data + off, m, dt == TP_F32 ? (float *)dst + off : NULL, &d, p->name, err);
        if (st) return st;
        const int rc = dt == TP_F32 ? 0 : tpk_weight_convert(d, (char *)dst + off * es, dt, m, scale, e->stream);
        if (rc) return tp_fail(err, TP_ERR_CUDA, "converting %s on the GPU: %s", p->name, cudaGetErrorString((cudaError_t)rc));
    }
    return TP_OK;
}

/* p (rows, K) quantized to NVFP4 on the GPU into codes (rows K / 2 bytes) and row-major block scales (rows
 * ceil(K / 16)), *s2 its per-tensor scale: tp_quantize(TP_QF_NVFP4, is_weight 1)'s bits. The caller has checked
 * the shape (tpk_weight_quantize_ok, a row within a chunk) and the staging (stage_ready). */
static tp_status dev_nvfp4(tp_engine *e, stage_bufs *sb, const tp_param *p, int64_t rows, int64_t K, uint8_t *codes,
                           uint8_t *scales, float *s2, tp_error *err) {
    CHECK(!sb->cpu && sb->buf[0] && tpk_weight_quantize_ok(TP_QF_NVFP4, K) && K <= STAGE_FLOATS);
    *s2 = tp_qformat_global_scale(TP_QF_NVFP4, p->data, rows, K);
    const int64_t cr = STAGE_FLOATS / K;
    for (int64_t r0 = 0; r0 < rows; r0 += cr) {
        const int64_t r1 = r0 + cr < rows ? r0 + cr : rows;
        float *d = NULL;
        tp_status st = stage_floats(e, sb, p->data + r0 * K, (size_t)((r1 - r0) * K), NULL, &d, p->name, err);
        if (st) return st;
        const int rc = tpk_weight_quantize_rows(TP_QF_NVFP4, d, rows, K, r0, r1, *s2, codes, scales, e->stream);
        if (rc) return tp_fail(err, TP_ERR_CUDA, "quantizing %s on the GPU: %s", p->name, cudaGetErrorString((cudaError_t)rc));
    }
    return TP_OK;
}

/* Weight v (fp32 on the host) in its planned type into dst (device): a stored per-tensor FP8 tensor as it is
 * (tpe_weight_host), otherwise converted on the GPU (on the host under TPROF_QUANTIZE_CPU=1 or for a sub-byte
 * type); *scale: its per-tensor scale (1 when unscaled). */
static tp_status stage_upload(tp_engine *e, int v, void *dst, stage_bufs *sb, float *scale, tp_error *err) {
    const tp_param *p = &e->params->params[e->g->values[v].param_index];
    const tp_dtype dt = e->plan->value_dt[v];
    const size_t es = tp_dtype_info(dt)->bytes;
    const tp_qtensor *pre8 = e->weights_q ? e->weights_q[e->g->values[v].param_index] : NULL;
    if (pre8 || es < 1 || tp_dtype_info(dt)->bits != 8 * (int)es || !stage_ready(sb)) {
        const size_t bytes = value_bytes(e, v);
        void *h = malloc(bytes ? bytes : 1);
        if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory converting %s", p->name);
        tpe_weight_host(e, v, h, scale);
        tp_status st = upload(dst, h, bytes, p->name, err);
        free(h);
        return st;
    }
    *scale = weight_scale(e, v, p, dt);
    e->wglobal[v] = *scale;
    return dev_convert(e, sb, p, dst, dt, *scale, err);
}

static tp_status upload_params_staged(tp_engine *e, float *h_scales, stage_bufs *stage, tp_error *err);

tp_status tpe_upload_params(tp_engine *e, float *h_scales, tp_error *err) {
    stage_bufs sb;
    tp_status st = stage_open(&sb, err);
    if (!st) st = upload_params_staged(e, h_scales, &sb, err);
    return stage_close(&sb, e, st, err);
}

/* Weight-only NVFP4 weight v into codes and scales (device, room for rows K / 2 and rows ceil(K / 16) bytes), its s2 in
 * wglobal[v] and *s2: quantized on the GPU (dev_nvfp4), or on the host (tpe_nvfp4_weight) where it is stored
 * already, where the GPU quantizer does not take its shape, or under TPROF_QUANTIZE_CPU=1. */
static tp_status nvfp4_into(tp_engine *e, int v, stage_bufs *sb, uint8_t *codes, uint8_t *scales, float *s2,
                            tp_error *err) {
    const tp_param *p = &e->params->params[e->g->values[v].param_index];
    const int64_t rows = value_rows(e, v), K = value_cols(e, v);
    const tp_qtensor *pre = e->weights_q ? e->weights_q[e->g->values[v].param_index] : NULL;
    tp_status st = TP_OK;
    if (!(pre && pre->format == TP_QF_NVFP4) && tpk_weight_quantize_ok(TP_QF_NVFP4, K) && K <= STAGE_FLOATS &&
        stage_ready(sb)) {
        st = dev_nvfp4(e, sb, p, rows, K, codes, scales, s2, err);
    } else {
        tp_qtensor own;
        const tp_qtensor *q = NULL;
        st = tpe_nvfp4_weight(e, v, &own, &q, err);
        if (!st && (q->elem_bytes != (size_t)(rows * K + 1) / 2 || q->scale_bytes != (size_t)(rows * ((K + 15) / 16))))
            st = tp_fail(err, TP_ERR_ARG, "%s: the stored NVFP4 tensor has %zu code and %zu scale bytes, not %lld x "
                         "%lld's", p->name, q->elem_bytes, q->scale_bytes, (long long)rows, (long long)K);
        if (!st) st = upload(codes, q->elems, q->elem_bytes, p->name, err);
        if (!st) st = upload(scales, q->scales, q->scale_bytes, p->name, err);
        if (!st) *s2 = q->global_scale;
        tp_qtensor_free(&own);
    }
    if (!st) e->wglobal[v] = *s2;
    return st;
}

static tp_status upload_nvfp4_wo_weight(tp_engine *e, int v, const tp_param *p, float *h_scales, stage_bufs *sb,
                                        tp_error *err) {
    const int64_t rows = value_rows(e, v), K = value_cols(e, v);
    const size_t nc = (size_t)(rows * K + 1) / 2, ns = (size_t)(rows * ((K + 15) / 16));
    float s2 = 1.0f;
    tp_status st = tpe_dev_alloc(e, nc, &e->dptr[v], p->name, err);
    if (!st) st = tpe_dev_alloc(e, ns, &e->d_bscale[v], p->name, err);
    if (!st) st = nvfp4_into(e, v, sb, e->dptr[v], e->d_bscale[v], &s2, err);
    if (!st) {
        h_scales[SCALE_SLOT * v] = s2;
        e->weight_bytes += (double)nc + (double)ns + 4.0;
    }
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
        const int sv = tpe_shared_param(e, v);
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
            if ((st = upload_nvfp4_wo_weight(e, v, p, h_scales, stage, err))) return st;
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
        if (!st) st = stage_upload(e, v, e->dptr[v], stage, &scale, err);
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
tp_status tpe_alloc_activations(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    size_t *bytes = malloc(sizeof(size_t) * (size_t)g->n_values), *slot_bytes = malloc(sizeof(size_t) * (size_t)g->n_values);
    int *slot = malloc(sizeof(int) * (size_t)g->n_values);
    unsigned char *pinned = malloc((size_t)g->n_values);
    void **sp = NULL;
    tp_status st = TP_OK;
    int n = -1;
    if (bytes && slot_bytes && slot && pinned) {
        for (int v = 0; v < g->n_values; v++) bytes[v] = tpe_act_alloc_bytes(e, v);
        tpe_group_pins(e, pinned); /* a group's outputs: one allocation each group (below) */
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

/* ---- sibling linears as one GEMV: their layouts (engine_internal.h, "Sibling linears") --------------- */

/* A decoder's q/k/v projections read
 * the same input, and so do gate/up: at one token a step (M = 1) each is a GEMV whose fixed cost (launch, ramp-up,
 * tail: ~5 us on an H100, bench/results/2026-11-25_h100_gemv_lab.log) is as large as streaming k_proj's 2 MB. With
 * their weights laid out one after the other ([Wq; Wk; Wv], one allocation, each value pointing into it) and
 * their outputs too ([q | k | v], M = 1 only: for M > 1 the rows would interleave), one GEMV over the summed N
 * computes all of them. The layout costs nothing elsewhere: a prefill engine's GEMMs read the same weights
 * through the members' own pointers. Whether the group's GEMV runs is decided by time when the engine is built,
 * against the members' own choices. Weight-only FP8 members (E4M3 weights, a per-tensor scale each) group the same
 * way: their codes one after the other, and the GEMV given one scale per output row (tpk_gemv_fp8's channel
 * scales: each member's per-tensor scale over its rows), which it applies exactly as the members' own GEMVs apply
 * their tensor scale (one fp32 multiply of the sum). Weight-only NVFP4 members likewise: E2M1 codes one after the
 * other, UE4M3 block scales one after the other, each member's s2 over its rows (tpk_gemv_nvfp4_rows). */

tp_status tpe_group_scales(tp_engine *e, int lead, int64_t n, tp_error *err) {
    const tp_graph *g = e->g;
    if ((e->plan->value_dt[g->ops[lead].in[1]] != TP_E4M3 && !tpe_fp4_group(e, lead)) || tpe_b128_group(e, lead) ||
        e->group_cs[lead])
        return TP_OK;
    float *h = malloc(sizeof(float) * (size_t)n);
    if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    int64_t r = 0;
    for (int j = lead; j >= 0; j = e->group_next[j])
        for (int64_t k = 0; k < g->ops[j].gemm_n; k++) h[r++] = e->wglobal[g->ops[j].in[1]];
    tp_status st = tpe_dev_alloc(e, sizeof(float) * (size_t)n, (void **)&e->group_cs[lead], g->ops[lead].layer, err);
    if (!st && cudaMemcpy(e->group_cs[lead], h, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "uploading %s's group scales", g->ops[lead].layer);
    free(h);
    return st;
}

void tpe_find_groups(tp_engine *e, const tp_plan *layout) {
    const tp_graph *g = e->g;
    tp_plan_sibling_groups(g, layout ? layout : e->plan, e->group_lead, e->group_next);
    if (!layout) return;
    /* another plan's groups lay out this engine's weights only where every member is stored alike in both (the
     * layout is of this engine's storage); else this engine's own groups */
    int same = 1;
    for (int i = 0; i < g->n_ops && same; i++) {
        if (e->group_lead[i] < 0) continue;
        for (int w = 1; w < g->ops[i].n_in && w <= 2; w++) {
            const int v = g->ops[i].in[w];
            same &= layout->value_dt[v] == e->plan->value_dt[v] && layout->value_qf[v] == e->plan->value_qf[v] &&
                    layout->value_scaled[v] == e->plan->value_scaled[v];
        }
    }
    if (!same) tp_plan_sibling_groups(g, e->plan, e->group_lead, e->group_next);
}

/* The members' weights (which = 1) or biases (which = 2), converted (stage_upload) one after the other into one
 * allocation; each member's value points at its part (its per-tensor scale, for E4M3 weights, in wglobal). */
static tp_status upload_part(tp_engine *e, int lead, int which, stage_bufs *sb, tp_error *err) {
    const tp_graph *g = e->g;
    size_t total = 0;
    for (int i = lead; i >= 0; i = e->group_next[i]) total += value_bytes(e, g->ops[i].in[which]);
    char *base = NULL;
    tp_status st = tpe_dev_alloc(e, total, (void **)&base, g->ops[lead].layer, err);
    size_t off = 0;
    for (int i = lead; !st && i >= 0; i = e->group_next[i]) {
        const int v = g->ops[i].in[which];
        float scale;
        e->dptr[v] = base + off;
        st = stage_upload(e, v, base + off, sb, &scale, err);
        off += value_bytes(e, v);
    }
    int scaled = 0;
    for (int i = lead; i >= 0; i = e->group_next[i]) scaled += e->plan->value_scaled[g->ops[i].in[which]];
    if (!st) e->weight_bytes += (double)total + 4.0 * scaled;
    return st;
}

/* A weight-only NVFP4 group's weights: codes (N K / 2 bytes a member) and block scales (N K / 16) each one after
 * the other in one allocation; each member's value and d_bscale point at its parts, its s2 in wglobal. */
int tpe_fp4_group(const tp_engine *e, int lead) { return e->plan->value_qf[e->g->ops[lead].in[1]] == TP_QF_NVFP4; }

static tp_status upload_fp4_part(tp_engine *e, int lead, stage_bufs *sb, tp_error *err) {
    const tp_graph *g = e->g;
    size_t nc = 0, ns = 0;
    for (int i = lead; i >= 0; i = e->group_next[i]) {
        const size_t n = (size_t)tp_value_numel(&g->values[g->ops[i].in[1]]);
        nc += n / 2, ns += n / 16;
    }
    unsigned char *dc = NULL, *ds = NULL;
    tp_status st = tpe_dev_alloc(e, nc, (void **)&dc, g->ops[lead].layer, err);
    if (!st) st = tpe_dev_alloc(e, ns, (void **)&ds, g->ops[lead].layer, err);
    size_t oc = 0, os = 0;
    for (int i = lead; !st && i >= 0; i = e->group_next[i]) {
        const int v = g->ops[i].in[1];
        const size_t n = (size_t)tp_value_numel(&g->values[v]);
        float s2;
        e->dptr[v] = dc + oc;
        e->d_bscale[v] = ds + os;
        st = nvfp4_into(e, v, sb, dc + oc, ds + os, &s2, err);
        oc += n / 2, os += n / 16;
        e->weight_bytes += (double)(n / 2 + n / 16) + 4.0;
    }
    return st;
}

/* An FP8 block-128 group's weights: E4M3 codes (N K bytes a member) and 128x128 block scales in cuBLASLt's layout
 * (every member's N a multiple of 128, tp_plan_sibling_groups: the scale rows stack as the codes do) each one after
 * the other in one allocation; each member's value and d_bscale point at its parts. */
int tpe_b128_group(const tp_engine *e, int lead) {
    return e->plan->value_qf[e->g->ops[lead].in[1]] == TP_QF_FP8_BLOCK128;
}

static tp_status upload_b128_part(tp_engine *e, int lead, tp_error *err) {
    const tp_graph *g = e->g;
    size_t nc = 0, ns = 0;
    for (int i = lead; i >= 0; i = e->group_next[i]) {
        const int v = g->ops[i].in[1];
        nc += (size_t)(value_rows(e, v) * value_cols(e, v));
        ns += tp_gemm_b128_weight_scale_count(value_rows(e, v), value_cols(e, v));
    }
    unsigned char *dc = NULL;
    float *ds = NULL;
    tp_status st = tpe_dev_alloc(e, nc, (void **)&dc, g->ops[lead].layer, err);
    if (!st) st = tpe_dev_alloc(e, sizeof(float) * ns, (void **)&ds, g->ops[lead].layer, err);
    size_t oc = 0, os = 0;
    for (int i = lead; !st && i >= 0; i = e->group_next[i]) {
        const int v = g->ops[i].in[1];
        e->dptr[v] = dc + oc;
        e->d_bscale[v] = ds + os;
        st = fp8_block_into(e, v, dc + oc, ds + os, err);
        oc += (size_t)(value_rows(e, v) * value_cols(e, v));
        os += tp_gemm_b128_weight_scale_count(value_rows(e, v), value_cols(e, v));
    }
    return st;
}

static tp_status upload_groups_staged(tp_engine *e, stage_bufs *sb, tp_error *err);

tp_status tpe_upload_groups(tp_engine *e, tp_error *err) {
    /* the shared engine's layout, as it is (tpe_group_ready checks it); none while groups are off */
    if (e->share || e->groups_mode == 0) return TP_OK;
    stage_bufs sb;
    tp_status st = stage_open(&sb, err);
    if (!st) st = upload_groups_staged(e, &sb, err);
    return stage_close(&sb, e, st, err);
}

static tp_status upload_groups_staged(tp_engine *e, stage_bufs *sb, tp_error *err) {
    const tp_graph *g = e->g;
    for (int i = 0; i < g->n_ops; i++) {
        if (e->group_lead[i] != i) continue;
        /* every part must stay 16-byte aligned for the GEMMs that read the members alone (NVFP4: its codes, and
         * its block scales 2-byte aligned for the GEMV's fast path) */
        int aligned = 1;
        for (int j = i; j >= 0; j = e->group_next[j]) {
            const size_t n = (size_t)tp_value_numel(&g->values[g->ops[j].in[1]]);
            const int w_ok = tpe_fp4_group(e, i) ? n / 2 % 16 == 0 && n / 16 % 2 == 0
                                             : value_bytes(e, g->ops[j].in[1]) % 16 == 0;
            aligned &= w_ok && (g->ops[j].n_in < 3 || value_bytes(e, g->ops[j].in[2]) % 16 == 0);
        }
        if (!aligned) continue;
        /* a group repeating an earlier one's parameters (pi0's expert, one group per denoise step over the same
         * weights) takes that group's layout through the repeats (tpe_upload_params): uploading it again would hold a
         * copy per step (3.6 GB of pi0's bf16 engine, bench/results 2026-11-26) */
        int repeated = 1;
        for (int j = i; j >= 0 && repeated; j = e->group_next[j])
            for (int w = 1; w < g->ops[j].n_in && w <= 2; w++)
                repeated &= e->repeats && e->repeats[g->ops[j].in[w]] >= 0;
        if (repeated) continue;
        tp_status st = tpe_fp4_group(e, i)    ? upload_fp4_part(e, i, sb, err)
                       : tpe_b128_group(e, i) ? upload_b128_part(e, i, err)
                                              : upload_part(e, i, 1, sb, err);
        if (!st && g->ops[i].n_in > 2) st = upload_part(e, i, 2, sb, err);
        if (st) return st;
    }
    return TP_OK;
}

void tpe_group_pins(const tp_engine *e, unsigned char *pinned) {
    const tp_graph *g = e->g;
    memset(pinned, 0, (size_t)g->n_values);
    for (int i = 0; i < g->n_ops; i++)
        if (e->group_lead[i] >= 0 && g->ops[i].gemm_m == 1) pinned[g->ops[i].out] = 1;
}

tp_status tpe_alloc_group_outputs(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    for (int i = 0; i < g->n_ops; i++) {
        if (e->group_lead[i] != i || g->ops[i].gemm_m != 1) continue;
        size_t total = 0;
        for (int j = i; j >= 0; j = e->group_next[j]) total += tpe_act_alloc_bytes(e, g->ops[j].out);
        char *base = NULL;
        tp_status st = tpe_dev_alloc(e, total, (void **)&base, g->ops[i].layer, err);
        if (!st) st = tpe_fill_defined(e, base, total, 0x6e000000u + (unsigned)i, err); /* as every activation */
        if (st) return st;
        e->act_bytes += (double)total;
        size_t off = 0;
        for (int j = i; j >= 0; j = e->group_next[j]) {
            e->dptr[g->ops[j].out] = base + off;
            off += value_bytes(e, g->ops[j].out); /* the outputs one after the other: [y1 | y2 | ...] */
        }
    }
    return TP_OK;
}

/* ---- a pipeline's graph: constants, buffers, inputs, stages ------------------------------------------- */

/* What an engine needs for a pipeline's graph (issue 21: openpi's pi0 as one graph,
 * src/models/pi0.c): the per-op constants (each TIME_CONCAT's embedding, the RoPE frequencies of a graph without a
 * KV cache), the launches of the pipeline ops (pipeline_ops.h), the scatter of several inputs' packed per-sample
 * rows (graph.h tp_graph_input_layout), and which parameter values repeat an earlier one (the expert's weights,
 * read by every denoise step through a value of their own), so each is uploaded once. */

static tp_status put(tp_engine *e, const float *h, size_t n, float **d, const char *what, tp_error *err) {
    tp_status st = tpe_dev_alloc(e, sizeof(float) * n, (void **)d, what, err);
    if (!st && cudaMemcpy(*d, h, sizeof(float) * n, cudaMemcpyHostToDevice) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "uploading the constants of %s", what);
    return st;
}

tp_status tpe_rope_tables(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    if (!e->d_invfreq && !(e->d_invfreq = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(float *))))
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_ROPE || e->d_invfreq[i]) continue;
        float f[512];
        if (op->head_dim < 2 || op->head_dim > 1024)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: head dim %d (RoPE takes 2 to 1024)", op->layer, op->head_dim);
        tp_rope_inv_freq(&op->rope, op->head_dim, f);
        tp_status st = put(e, f, (size_t)(op->head_dim / 2), &e->d_invfreq[i], op->layer, err);
        if (st) return st;
    }
    return TP_OK;
}

mshape tpe_mshape_of(const tp_engine *e, int i) {
    const tp_graph *g = e->g;
    const tp_op *op = &g->ops[i];
    mshape m;
    m.two = op->n_in == 6;
    m.B = (int)g->values[op->in[0]].shape[0];
    m.Tq = (int)g->values[op->in[0]].shape[1];
    m.Tk = (int)g->values[op->in[1]].shape[1];
    m.Tp = m.two ? (int)g->values[op->in[3]].shape[1] : 0;
    m.H = op->heads, m.Hkv = op->kv_heads, m.G = op->heads / op->kv_heads, m.D = op->head_dim;
    m.o0 = (m.Tp + 7) / 8 * 8; /* 16-byte aligned blocks and rows for the GEMMs */
    m.ld = (m.o0 + m.Tk + 7) / 8 * 8;
    return m;
}

/* The largest power of two <= 16 dividing every byte count (the pointers' offsets: cudaMalloc'd bases are aligned) */
static unsigned align_of(const long long *bytes, int n) {
    unsigned a = 16;
    for (int k = 0; k < n; k++)
        while (a > 1 && bytes[k] % a) a /= 2;
    return a;
}

/* Op i's four batched GEMMs (per sample and KV head: the G query heads of that KV head as the batch), or the
 * reason they do not plan in *why. */
static tp_status plan_unfused(tp_engine *e, int i, tp_error *why) {
    const tp_op *op = &e->g->ops[i];
    const mshape m = tpe_mshape_of(e, i);
    const tp_dtype dt = e->plan->value_dt[op->in[0]];
    const long long es = (long long)tp_dtype_info(dt)->bytes;
    const long long offs[] = {m.D * es, (long long)m.H * m.D * es, (long long)m.Hkv * m.D * es, m.ld * 4LL, m.ld * es,
                              m.o0 * 4LL, m.o0 * es};
    const unsigned al = align_of(offs, (int)(sizeof offs / sizeof offs[0]));
    /* S (Tq, keys) = scale Q K^T: Q rows H D apart, the G heads D apart; K rows Hkv D apart, shared by the G heads */
    tp_bgemm_desc s = {.M = m.Tq, .K = m.D, .trans_b = 1, /* scores fp32 */ .ab_dt = dt, .c_dt = TP_F32, .lda = (int64_t)m.H * m.D,
                       .ldb = (int64_t)m.Hkv * m.D, .ldc = m.ld, .batch = m.G, .sa = m.D, .sb = 0,
                       .sc = (int64_t)m.Tq * m.ld, .alpha = op->scale, .beta = 0.0f, .align = al};
    /* O (Tq, D) = P V: P rows ld apart, a head's Tq ld further; V rows Hkv D apart; O rows H D apart, heads D */
    tp_bgemm_desc o = {.M = m.Tq, .N = m.D, .trans_b = 0, .ab_dt = dt, .c_dt = dt, .lda = m.ld,
                       .ldb = (int64_t)m.Hkv * m.D, .ldc = (int64_t)m.H * m.D, .batch = m.G,
                       .sa = (int64_t)m.Tq * m.ld, .sb = 0, .sc = m.D, .alpha = 1.0f, .align = al};
    tp_bgemm **pl = &e->mplan[4 * i];
    tp_status st = TP_OK;
    if (m.two) {
        s.N = m.Tp;
        o.K = m.Tp;
        o.beta = 0.0f;
        if (!st) st = tp_bgemm_create(e->gemm, &s, op->layer, &pl[0], why);
        if (!st) st = tp_bgemm_create(e->gemm, &o, op->layer, &pl[2], why);
    }
    s.N = m.Tk;
    o.K = m.Tk;
    o.beta = m.two ? 1.0f : 0.0f; /* the own keys' share added to the prefix's */
    if (!st) st = tp_bgemm_create(e->gemm, &s, op->layer, &pl[1], why);
    if (!st) st = tp_bgemm_create(e->gemm, &o, op->layer, &pl[3], why);
    return st;
}

int tpe_masked_flash_args(const tp_engine *e, int i, tpk_masked_attn_args *a) {
    const tp_op *op = &e->g->ops[i];
    const mshape m = tpe_mshape_of(e, i);
    const tp_dtype in = e->plan->value_dt[op->in[0]], out = e->plan->value_dt[op->out];
    if (!tpk_flash_attention_masked_supported(in, out, m.D)) return 0;
    for (int j = 1; j < (m.two ? 5 : 3); j++)
        if (e->plan->value_dt[op->in[j]] != in) return 0;
    memset(a, 0, sizeof *a);
    a->q = e->dptr[op->in[0]], a->k = e->dptr[op->in[1]], a->v = e->dptr[op->in[2]];
    a->kp = m.two ? e->dptr[op->in[3]] : NULL, a->vp = m.two ? e->dptr[op->in[4]] : NULL;
    a->valid = e->dptr[op->in[m.two ? 5 : 3]];
    a->o = e->dptr[op->out];
    a->B = m.B, a->H = m.H, a->Hkv = m.Hkv, a->D = m.D, a->Tq = m.Tq, a->Tk = m.Tk, a->Tp = m.Tp;
    a->prefix = op->prefix, a->first_block = op->pool_mode == 1, a->scale = op->scale;
    a->in_dt = in, a->out_dt = out;
    a->out_scale = out == TP_E4M3 ? e->d_scales + SCALE_SLOT * op->out : NULL;
    a->workspace = e->d_mws, a->workspace_bytes = e->mws_bytes;
    a->num_splits = e->msplits ? e->msplits[i] : 0;
    return 1;
}

/* Every masked attention op's implementations: tprof's flash kernel where it takes the op (and unless
 * --attention classic), the cuBLASLt batched GEMMs where they plan (a second candidate: --attention auto times
 * both in tpe_choose_attention), else the CUDA-core kernel; the buffers of those that may run. */
static tp_status setup_masked(tp_engine *e, tp_attn_impl want, tp_error *err) {
    const tp_graph *g = e->g;
    size_t sbytes = 0, pbytes = 0, wbytes = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_MASKED_ATTENTION) continue;
        if (!e->mplan && !(e->mplan = calloc((size_t)(4 * g->n_ops), sizeof(tp_bgemm *))))
            return tp_fail(err, TP_ERR_OOM, "out of host memory");
        tpk_masked_attn_args fa;
        const int can_flash = tpe_masked_flash_args(e, i, &fa);
        const int q8 = e->plan->value_dt[op->out] == TP_E4M3; /* for its FP8 reader: the flash kernel's alone */
        if ((want == TP_ATTN_FLASH || q8) && !can_flash)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: the masked flash kernel needs f16/bf16 Q/K/V and head "
                           "dim 16, 32, 64, 128 or 256; this op has %s and head dim %d", op->layer,
                           tp_dtype_info(e->plan->value_dt[op->in[0]])->name, op->head_dim);
        if (q8 && want == TP_ATTN_CLASSIC)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: the plan has this masked attention write e4m3 for its "
                           "FP8 reader, which only tprof's flash kernel does, not --attention classic", op->layer);
        /* auto: the flash kernel, timed against the GEMMs (tpe_choose_attention); flash: it alone; cudnn and wgmma
         * do not take pi0's masks: the GEMMs as before, or the flash kernel where the output is e4m3 */
        const int flash = can_flash && (want == TP_ATTN_AUTO || want == TP_ATTN_FLASH || q8);
        if (flash) { /* the workspace of the automatic split and of the most the build times (TPE_MASKED_SPLITS) */
            for (int k = 0; k < 2; k++) {
                size_t b = 0;
                fa.num_splits = k ? TPE_MASKED_SPLITS : 0;
                if (tpk_flash_attention_masked_plan(&fa, NULL, &b))
                    return tp_fail(err, TP_ERR_CUDA, "layer %s: the masked flash attention refused its plan", op->layer);
                if (b > wbytes) wbytes = b;
            }
            if (!e->msplits && !(e->msplits = calloc((size_t)g->n_ops, sizeof(int))))
                return tp_fail(err, TP_ERR_OOM, "out of host memory");
        }
        tp_error why = {0};
        tp_status st = want == TP_ATTN_CLASSIC || (flash && (want != TP_ATTN_AUTO || q8)) ? TP_ERR_UNSUPPORTED
                                                                                           : plan_unfused(e, i, &why);
        if (st == TP_ERR_OOM) return tp_fail(err, st, "%s", why.msg);
        tpe_set_kind(e, i, flash ? TP_CALL_MASKED_ATTENTION_FLASH
                                 : st == TP_OK ? TP_CALL_MASKED_ATTENTION_GEMMS : TP_CALL_MASKED_ATTENTION);
        if (st) {
            for (int k = 0; k < 4; k++) tp_bgemm_destroy(e->mplan[4 * i + k]), e->mplan[4 * i + k] = NULL;
            if (flash)
                snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof flash kernel (attention.h), tensor cores%s",
                         q8 ? ", writing e4m3 for its FP8 reader" : want == TP_ATTN_AUTO ? " (the only one eligible)"
                                                                                          : " (as asked)");
            else
                snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof CUDA-core kernel (pipeline_ops.h): %.150s",
                         want == TP_ATTN_CLASSIC ? "as asked (--attention classic)" : why.msg);
            continue;
        }
        const mshape m = tpe_mshape_of(e, i);
        const size_t rows = (size_t)m.B * m.H * m.Tq;
        if (rows * m.ld * 4 > sbytes) sbytes = rows * m.ld * 4;
        const size_t pb = rows * m.ld * tp_dtype_info(e->plan->value_dt[op->in[0]])->bytes;
        if (pb > pbytes) pbytes = pb;
        snprintf(e->impl_note[i], sizeof e->impl_note[i], "cuBLASLt batched GEMMs (S = scale Q K^T in fp32%s, P V%s) "
                 "around tprof's masked softmax (P in %s)", m.two ? ", over the prefix's K and the own" : "",
                 m.two ? " in two parts" : "", tp_dtype_info(e->plan->value_dt[op->in[0]])->name);
    }
    tp_status st = TP_OK;
    if (sbytes && !(st = tpe_dev_alloc(e, sbytes, (void **)&e->d_mscore, "the attention scores", err)))
        st = tpe_dev_alloc(e, pbytes, &e->d_mprob, "the attention probabilities", err);
    if (!st) e->act_bytes += (double)(sbytes + pbytes);
    if (!st && wbytes && !(st = tpe_dev_alloc(e, wbytes, &e->d_mws, "the masked attention's split-KV workspace", err))) {
        e->mws_bytes = wbytes;
        e->act_bytes += (double)wbytes;
    }
    return st;
}

tp_status tpe_setup_pipeline(tp_engine *e, tp_attn_impl want, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = tpe_rope_tables(e, err);
    if (!st) st = setup_masked(e, want, err);
    if (st) return st;
    if (!(e->d_opconst = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof(float *))))
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    for (int i = 0; i < g->n_ops && !st; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_TIME_CONCAT) continue;
        const tp_value *x = &g->values[op->in[0]], *y = &g->values[op->out];
        const int64_t D = y->shape[y->ndim - 1] - x->shape[x->ndim - 1];
        float *h = malloc(sizeof(float) * (size_t)(D > 0 ? D : 1));
        if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        tp_time_embedding(op->scale, D, h); /* the step's time: a constant of the graph */
        st = put(e, h, (size_t)D, &e->d_opconst[i], op->layer, err);
        free(h);
    }
    return st;
}

tp_status tpe_upload_inputs(tp_engine *x, const float *rows, tp_error *err) {
    const tp_graph *g = x->g;
    int64_t off[TP_MAX_INPUTS];
    const int64_t row = tp_graph_input_layout(g, off), B = g->batch;
    for (int k = 0; k < g->n_inputs; k++) {
        const int v = g->inputs[k];
        const size_t w = (size_t)(tp_value_numel(&g->values[v]) / B) * sizeof(float);
        CHECK(x->plan->value_dt[v] == TP_F32); /* every input is fp32 (plan.c) */
        cudaError_t ce = g->n_inputs == 1
                             ? cudaMemcpyAsync(x->dptr[v], rows, value_bytes(x, v), cudaMemcpyHostToDevice, x->stream)
                             : cudaMemcpy2DAsync(x->dptr[v], w, rows + off[k], (size_t)row * sizeof(float), w,
                                                 (size_t)B, cudaMemcpyHostToDevice, x->stream);
        if (ce != cudaSuccess)
            return tp_fail(err, TP_ERR_CUDA, "copying input %s to the GPU: %s", g->values[v].name,
                           cudaGetErrorString(ce));
    }
    return TP_OK;
}

tp_status tpe_find_repeats(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    const int np = e->params ? e->params->n_params : 0;
    int *first = malloc(sizeof(int) * (size_t)(np ? np : 1));
    unsigned char *how = calloc((size_t)(g->n_values ? g->n_values : 1), 1); /* how its GEMMs read a weight */
    if (!(e->repeats = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1))) || !first || !how) {
        free(first);
        free(how);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int k = 0; k < np; k++) first[k] = -1;
    for (int i = 0; i < g->n_ops; i++) /* one pass: weight_nvfp4_wo and weight_native_bs for every value */
        if (g->ops[i].n_in > 1)
            how[g->ops[i].in[1]] |= (e->plan->op_prec[i] == TP_PREC_NVFP4_WO ? 1 : 0) | (op_native_bs(e, i) ? 2 : 0);
    for (int v = 0; v < g->n_values; v++) {
        const tp_value *val = &g->values[v];
        e->repeats[v] = -1;
        if (val->kind != TP_VAL_PARAM || val->param_index < 0 || val->param_index >= np) continue;
        const int u = first[val->param_index];
        if (u < 0) {
            first[val->param_index] = v;
            continue;
        }
        /* the same bytes only when stored alike (a tied embedding read as a table and as an FP8 GEMM's weight is
         * not); a value a sibling group lays out (tpe_upload_groups) keeps its group's copy (tpe_upload_params skips it) */
        const tp_plan *p = e->plan;
        if (p->value_dt[u] == p->value_dt[v] && p->value_qf[u] == p->value_qf[v] &&
            p->value_scaled[u] == p->value_scaled[v] && how[u] == how[v])
            e->repeats[v] = u;
    }
    free(first);
    free(how);
    return TP_OK;
}

tp_status tpe_setup_stages(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    e->n_seg = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const size_t n = tp_layer_stage_len(g->ops[i].layer);
        if (n == 0)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "modular mode: op %s has no stage (a pipeline's layer names start "
                           "with their stage: vision., prefix., expert.)", g->ops[i].layer);
        const tp_op *prev = i ? &g->ops[i - 1] : NULL;
        if (prev && tp_layer_stage_len(prev->layer) == n && strncmp(prev->layer, g->ops[i].layer, n) == 0) continue;
        if (e->n_seg == TPE_MAX_STAGES)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "modular mode: more than %d stages", TPE_MAX_STAGES);
        e->seg_first[e->n_seg++] = i;
    }
    e->seg_first[e->n_seg] = g->n_ops;
    int *stage_of = malloc(sizeof(int) * (size_t)(g->n_ops ? g->n_ops : 1));
    int *last = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    e->hand_v = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    e->hand_copy = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof(void *));
    if (!stage_of || !last || !e->hand_v || !e->hand_copy) {
        free(stage_of);
        free(last);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int k = 0; k < e->n_seg; k++)
        for (int i = e->seg_first[k]; i < e->seg_first[k + 1]; i++) stage_of[i] = k;
    for (int v = 0; v < g->n_values; v++) last[v] = -1; /* the last stage reading v */
    for (int i = 0; i < g->n_ops; i++)
        for (int j = 0; j < g->ops[i].n_in; j++) last[g->ops[i].in[j]] = stage_of[i];
    int n = 0;
    tp_status st = TP_OK;
    for (int k = 0; k < e->n_seg && !st; k++) {
        e->hand_first[k] = n;
        for (int i = e->seg_first[k]; i < e->seg_first[k + 1] && !st; i++) {
            const int v = g->ops[i].out;
            if (g->values[v].kind != TP_VAL_ACT || last[v] <= k || !e->dptr[v]) continue;
            e->hand_v[n] = v;
            st = tpe_dev_alloc(e, value_bytes(e, v), &e->hand_copy[n], "a stage's handoff copy", err);
            if (!st) e->act_bytes += (double)value_bytes(e, v);
            n++;
        }
    }
    e->hand_first[e->n_seg] = n;
    free(stage_of);
    free(last);
    return st;
}
