/* sdpa_lab.c: times cuDNN's SDPA forward (tp_sdpa_run, src/exec/cuda/vendor/cudnn_sdpa.h) on ViT-B/16 shapes, as the
 * baseline for tprof's own attention kernels (bench/attention_lab.cu).
 *
 * Shapes: B 64, H 12, D 64, T 197 (ViT-B/16 at 224, class token) and 256 (a multiple of the tile), F16 and BF16,
 * scale D^-0.5, qkv ~ N(0, 1). For each: plan (timed on the host), one checked run (no NaN/Inf in the output),
 * 10 warmup runs, then `runs` runs (default 50) each between two CUDA events, all enqueued back to back without
 * synchronizing: the warmup runs put ~0.5 ms of work in the queue first, so as long as the host enqueues a run
 * faster than the GPU executes one, every start event waits behind the previous run and host launch gaps are not
 * timed (the host cost per tp_sdpa_run is printed so this can be checked). Prints median, min and max in us, the
 * median's TFLOP/s (4 B H T^2 D FLOP: Q K^T and P V) and the mean over the whole back-to-back sequence (first
 * start to last stop / runs) as a cross-check.
 *
 * Decoder shapes (the second part, `decoder`): tprof's flash kernel (tpk_flash_attention_ex, attention.h) and
 * cuDNN (tp_sdpa_create_ex) side by side on the same separate Q (B, Tq, H, D), K and V (B, Tkv, Hkv, D) and O
 * (B, Tq, H, D) buffers, F16, D 128, H 32:
 *   prefill, causal, Tq = Tkv = S in {1024, 4096}, B 1 (one prompt: the latency case; 32 x S / 64 CTAs, so S 1024
 *   fills the GPU only ~2x over) and B 8 (a batch of prompts, many waves: the throughput case);
 *   decode, Tq 1 (causal, which at Tq 1 masks nothing), Tkv in {1024, 8192}, Hkv 32 (MHA) and 8 (GQA, 4 query heads
 *   a KV head), B 1 (latency: 8 or 32 KV heads are far too few CTAs without split-KV) and 64 (batched serving).
 * Both outputs are compared (max |flash - cuDNN| / max |cuDNN|, non-finite counts). Timing: a CUDA graph of `runs`
 * calls, each call between two event-record nodes and preceded by a read of 256 MiB (tpk_amax over an f16
 * buffer) that evicts L2 (50-60 MB on H100/H200) and leaves it clean, so every call reads K and V from HBM as a
 * decode step does (another layer's data sits in L2 in a real model). A first version flushed with a 256 MiB
 * memset, whose dirty lines were then written back inside the next timed call: cuDNN's decode calls, the same code
 * in both runs, took 1.5-10 us longer each with it on an H200 (..._decoder_attention_lab_run1.log against _run2).
 * The graph is launched once to warm up and once timed; without graph capture (if it fails), eager launches with
 * the same events. Reported: median, min, max in us; TFLOP/s of the median, counting 4 D FLOP per
 * (query, key) pair the mask lets through (causal: the unmasked half, Tq (Tq + 1) / 2 pairs for Tq = Tkv, not
 * Tq Tkv), and that as a fraction of the measured FP16 GEMM peak (tp_gemm_peak, cuBLASLt 8192^3, same run); for
 * decode the K/V bytes read (2 B Tkv Hkv D 2) per median time in GB/s, against a measured device-to-device copy
 * rate (1 GiB read + 1 GiB written).
 *
 * Recorded on an H200: bench/results/2026-11-21_h200_decoder_attention.json (every number, with two earlier runs
 * and what changed between them) and ..._decoder_attention_lab.log.
 *
 * Build: cmake --build <build dir> --target sdpa_lab. Run: ./sdpa_lab [runs] [vit|decoder|all] [--json FILE]
 * (default 50 runs for ViT, 30 for decoder shapes; all; the JSON file gets every decoder measurement). Finds
 * cuDNN at run time like every tprof binary (TPROF_CUDNN_LIB, the loader path, Python site-packages;
 * cudnn_sdpa.h). Exit status: 0, 1 when a check fails or cuDNN refuses a ViT shape (a refused decoder shape is
 * printed with cuDNN's reason and timed for flash alone), 2 on a CUDA error or when cuDNN cannot be loaded. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab_common.h"
#include "core/rng.h"
#include "exec/cuda/attention/attention.h"
#include "exec/cuda/vendor/cudnn_sdpa.h"
#include "exec/cuda/gemm/gemm_peak.h"
#include "exec/cuda/kernels/kernels.h"
#include "formats/dtype.h"


static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One shape: returns 0, or 1 when cuDNN refused it or the output has NaN/Inf. */
static int lab_case(int B, int T, int H, int D, tp_dtype dt, int runs, cudaStream_t stream) {
    const char *name = tp_dtype_info(dt)->name;
    const float scale = 1.0f / sqrtf((float)D);
    tp_sdpa *s = NULL;
    tp_error err = {0};
    const double t0 = now_s();
    if (tp_sdpa_create(B, T, H, D, dt, scale, &s, &err) != TP_OK) {
        printf("B=%d T=%d H=%d D=%d %s: not planned: %s\n", B, T, H, D, name, err.msg);
        return 1;
    }
    const double t_plan = now_s() - t0;

    const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D, es = tp_dtype_info(dt)->bytes;
    float *x = malloc(n_in * sizeof(float));
    void *raw = malloc(n_in * es);
    if (!x || !raw) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    tp_rng r;
    tp_rng_seed(&r, 1234);
    for (size_t i = 0; i < n_in; i++) x[i] = (float)tp_rng_normal(&r);
    tp_convert_from_f32(dt, x, raw, n_in, 1.0f);
    void *d_qkv = NULL, *d_out = NULL, *ws = NULL;
    CK(cudaMalloc(&d_qkv, n_in * es));
    CK(cudaMalloc(&d_out, n_out * es));
    const size_t wsb = tp_sdpa_workspace_bytes(s);
    if (wsb) CK(cudaMalloc(&ws, wsb));
    CK(cudaMemcpy(d_qkv, raw, n_in * es, cudaMemcpyHostToDevice));
    CK(cudaMemset(d_out, 0xFF, n_out * es));

    /* one checked run */
    int rc = tp_sdpa_run(s, d_qkv, d_out, ws, stream);
    if (rc != 0) {
        printf("B=%d T=%d H=%d D=%d %s: tp_sdpa_run returned cuDNN status %d\n", B, T, H, D, name, rc);
        exit(2);
    }
    CK(cudaStreamSynchronize(stream));
    CK(cudaMemcpy(raw, d_out, n_out * es, cudaMemcpyDeviceToHost));
    tp_convert_to_f32(dt, raw, x, n_out, 1.0f);
    size_t bad = 0;
    for (size_t i = 0; i < n_out; i++) bad += !isfinite(x[i]);

    /* warmup, then the timed runs, all back to back */
    cudaEvent_t *ev = malloc(2 * (size_t)runs * sizeof *ev);
    float *us = malloc((size_t)runs * sizeof *us);
    if (!ev || !us) exit(2);
    for (int i = 0; i < 2 * runs; i++) CK(cudaEventCreate(&ev[i]));
    for (int i = 0; i < 10; i++) rc |= tp_sdpa_run(s, d_qkv, d_out, ws, stream);
    const double h0 = now_s();
    for (int i = 0; i < runs; i++) {
        CK(cudaEventRecord(ev[2 * i], stream));
        rc |= tp_sdpa_run(s, d_qkv, d_out, ws, stream);
        CK(cudaEventRecord(ev[2 * i + 1], stream));
    }
    const double host_us = (now_s() - h0) * 1e6 / runs;
    CK(cudaStreamSynchronize(stream));
    if (rc != 0) {
        printf("B=%d T=%d H=%d D=%d %s: a timed tp_sdpa_run failed (status bits %d)\n", B, T, H, D, name, rc);
        exit(2);
    }
    for (int i = 0; i < runs; i++) {
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        us[i] = 1000.0f * ms;
    }
    float total_ms = 0.0f;
    CK(cudaEventElapsedTime(&total_ms, ev[0], ev[2 * runs - 1]));
    qsort(us, (size_t)runs, sizeof *us, cmp_float);
    const double med = runs % 2 ? us[runs / 2] : 0.5 * (us[runs / 2 - 1] + us[runs / 2]);
    const double flop = 4.0 * B * H * (double)T * T * D;
    printf("B=%d T=%d H=%d D=%d %-4s | median %8.2f us  min %8.2f  max %8.2f | %6.1f TFLOP/s | back-to-back mean "
           "%8.2f us | host %5.1f us/call | plan %.3f s | %s%s\n",
           B, T, H, D, name, med, us[0], us[runs - 1], flop / (med * 1e-6) / 1e12, 1000.0 * total_ms / runs, host_us,
           t_plan, tp_sdpa_describe(s), bad ? " | NaN/Inf IN OUTPUT" : "");
    fflush(stdout);

    for (int i = 0; i < 2 * runs; i++) cudaEventDestroy(ev[i]);
    free(ev);
    free(us);
    free(x);
    free(raw);
    cudaFree(d_qkv);
    cudaFree(d_out);
    if (ws) cudaFree(ws);
    tp_sdpa_destroy(s);
    return bad != 0;
}

/* ---- decoder shapes: flash (tpk_flash_attention_ex) against cuDNN (tp_sdpa_create_ex) -------------------------- */

typedef struct {
    const char *kind;
    int B, H, Hkv, Tq, Tkv, D, causal;
    int packed; /* 1: Q, K, V inside one timm qkv (B, T, 3, H, D) buffer; the legacy tpk_flash_attention timed too */
} dec_shape;

/* One timed call: the flash kernel (fa), a cuDNN plan (sd), or neither: the ViT kernel tpk_flash_attention on the
 * packed buffer at q (B = fa_B, T = Tq, H, D in legacy[]). */
typedef struct {
    const tpk_attn_args *fa;
    tp_sdpa *sd;
    const void *q, *k, *v;
    void *o, *ws;
    int legacy[4];
} dec_call;

static int dec_run(const dec_call *c, cudaStream_t s) {
    if (c->sd) return tp_sdpa_run_ex(c->sd, c->q, c->k, c->v, c->o, c->ws, s);
    if (c->fa) return tpk_flash_attention_ex(c->fa, s);
    const int D = c->legacy[3];
    return tpk_flash_attention(c->q, TP_F16, c->o, TP_F16, NULL, c->legacy[0], c->legacy[1], c->legacy[2], D,
                               1.0f / sqrtf((float)D), s);
}

typedef struct {
    double med, min, max, graph_mean; /* us */
    int graph;                        /* 1: timed inside a CUDA graph */
} dec_time;

/* The L2 flush before every timed call: a read of flush_bytes of f16 (its max into *sink), no writes. */
static void dec_flush(const void *flush, size_t flush_bytes, float *sink, cudaStream_t s) {
    CK(tpk_amax(flush, TP_F16, flush_bytes / 2, sink, s));
}

/* `runs` calls, each after an L2-evicting read of flush (flush_bytes) and between two events; in one CUDA graph
 * when capture works, else eager. Returns 0, or the failing call's status (cudaError_t / cudnnStatus_t). */
static int dec_time_calls(const dec_call *c, cudaStream_t s, int runs, const void *flush, size_t flush_bytes,
                          float *sink, dec_time *t) {
    cudaEvent_t *ev = malloc(2 * (size_t)runs * sizeof *ev), g0, g1;
    float *us = malloc((size_t)runs * sizeof *us);
    if (!ev || !us) exit(2);
    for (int i = 0; i < 2 * runs; i++)
        CK(cudaEventCreate(&ev[i]));
    CK(cudaEventCreate(&g0));
    CK(cudaEventCreate(&g1));
    int rc = 0;
    for (int i = 0; i < 5 && !rc; i++)
        rc = dec_run(c, s); /* warmup (and the plans' first-run work) */
    CK(cudaStreamSynchronize(s));
    if (rc) goto done;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    t->graph = 0;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess) {
        int crc = 0;
        for (int i = 0; i < runs && !crc; i++) {
            crc |= tpk_amax(flush, TP_F16, flush_bytes / 2, sink, s);
            crc |= (int)cudaEventRecordWithFlags(ev[2 * i], s, cudaEventRecordExternal);
            crc |= dec_run(c, s);
            crc |= (int)cudaEventRecordWithFlags(ev[2 * i + 1], s, cudaEventRecordExternal);
        }
        const cudaError_t ec = cudaStreamEndCapture(s, &graph);
        if (crc == 0 && ec == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) t->graph = 1;
        cudaGetLastError(); /* a failed capture leaves a (non-sticky) error */
    }
    if (t->graph) {
        CK(cudaGraphLaunch(exec, s)); /* warmup */
        CK(cudaEventRecord(g0, s));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaEventRecord(g1, s));
    } else {
        CK(cudaEventRecord(g0, s));
        for (int i = 0; i < runs && !rc; i++) {
            dec_flush(flush, flush_bytes, sink, s);
            CK(cudaEventRecord(ev[2 * i], s));
            rc = dec_run(c, s);
            CK(cudaEventRecord(ev[2 * i + 1], s));
        }
        CK(cudaEventRecord(g1, s));
    }
    CK(cudaStreamSynchronize(s));
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (rc) goto done;
    for (int i = 0; i < runs; i++) {
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        us[i] = 1000.0f * ms;
    }
    float total = 0.0f;
    CK(cudaEventElapsedTime(&total, g0, g1));
    qsort(us, (size_t)runs, sizeof *us, cmp_float);
    t->med = runs % 2 ? us[runs / 2] : 0.5 * (us[runs / 2 - 1] + us[runs / 2]);
    t->min = us[0], t->max = us[runs - 1];
    t->graph_mean = 1000.0 * total / runs; /* includes the flushes */
done:
    for (int i = 0; i < 2 * runs; i++)
        cudaEventDestroy(ev[i]);
    cudaEventDestroy(g0);
    cudaEventDestroy(g1);
    free(ev);
    free(us);
    return rc;
}

/* (query, key) pairs the mask lets through: Tq Tkv, or with the bottom-right causal mask sum_t min(Tkv, t + Tkv - Tq
 * + 1) over the rows that see a key */
static double dec_pairs(const dec_shape *d) {
    if (!d->causal) return (double)d->Tq * d->Tkv;
    double n = 0.0;
    for (int t = 0; t < d->Tq; t++) {
        long long k = (long long)t + d->Tkv - d->Tq + 1;
        if (k > d->Tkv) k = d->Tkv;
        if (k > 0) n += (double)k;
    }
    return n;
}

/* max |a - b| and max |b| over n f16/bf16 values on the device; non-finite counts of a and b */
static void dec_compare(tp_dtype dt, const void *a, const void *b, size_t n, double *maxdiff, double *maxref,
                        size_t *bad_a, size_t *bad_b) {
    const size_t es = tp_dtype_info(dt)->bytes, chunk = (size_t)1 << 24;
    void *ra = malloc(chunk * es), *rb = malloc(chunk * es);
    float *fa = malloc(chunk * sizeof(float)), *fb = malloc(chunk * sizeof(float));
    if (!ra || !rb || !fa || !fb) exit(2);
    *maxdiff = *maxref = 0.0, *bad_a = *bad_b = 0;
    for (size_t off = 0; off < n; off += chunk) {
        const size_t m = n - off < chunk ? n - off : chunk;
        CK(cudaMemcpy(ra, (const char *)a + off * es, m * es, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(rb, (const char *)b + off * es, m * es, cudaMemcpyDeviceToHost));
        tp_convert_to_f32(dt, ra, fa, m, 1.0f);
        tp_convert_to_f32(dt, rb, fb, m, 1.0f);
        for (size_t i = 0; i < m; i++) {
            if (!isfinite(fa[i])) (*bad_a)++;
            if (!isfinite(fb[i])) (*bad_b)++;
            if (isfinite(fa[i]) && isfinite(fb[i])) {
                *maxdiff = fmax(*maxdiff, fabs((double)fa[i] - fb[i]));
                *maxref = fmax(*maxref, fabs((double)fb[i]));
            }
        }
    }
    free(ra), free(rb), free(fa), free(fb);
}

/* Runs every decoder shape; returns the number of failed checks. json may be NULL. */
static int decoder_lab(int runs, cudaStream_t stream, FILE *json) {
    static const dec_shape shapes[] = {
        {"prefill", 1, 32, 32, 1024, 1024, 128, 1, 0}, {"prefill", 8, 32, 32, 1024, 1024, 128, 1, 0},
        {"prefill", 1, 32, 32, 4096, 4096, 128, 1, 0}, {"prefill", 8, 32, 32, 4096, 4096, 128, 1, 0},
        {"decode", 1, 32, 32, 1, 1024, 128, 1, 0},     {"decode", 1, 32, 8, 1, 1024, 128, 1, 0},
        {"decode", 64, 32, 32, 1, 1024, 128, 1, 0},    {"decode", 64, 32, 8, 1, 1024, 128, 1, 0},
        {"decode", 1, 32, 32, 1, 8192, 128, 1, 0},     {"decode", 1, 32, 8, 1, 8192, 128, 1, 0},
        {"decode", 64, 32, 32, 1, 8192, 128, 1, 0},    {"decode", 64, 32, 8, 1, 8192, 128, 1, 0},
        {"vit", 64, 12, 12, 197, 197, 64, 0, 1}, /* the engine's shape: the general kernel against the ViT one */
    };
    const tp_dtype dt = TP_F16;
    int fails = 0;
    /* the references: FP16 tensor-core GEMM peak and device-to-device copy rate, measured now */
    double peak = 0.0;
    tp_error err = {0};
    if (tp_gemm_peak(TP_PREC_FP16, 8192, 20, &peak, &err) != TP_OK) {
        printf("decoder: FP16 GEMM peak not measured: %s\n", err.msg);
        peak = 0.0;
    }
    const size_t copy_bytes = (size_t)1 << 30, flush_bytes = (size_t)256 << 20;
    void *c0 = NULL, *c1 = NULL, *flush = NULL;
    float *sink = NULL;
    CK(cudaMalloc(&c0, copy_bytes));
    CK(cudaMalloc(&c1, copy_bytes));
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaMalloc((void **)&sink, sizeof(float)));
    CK(cudaMemset(sink, 0, sizeof(float)));
    CK(tpk_fill_uniform(flush, TP_F16, flush_bytes / 2, 7, stream));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float cms[10];
    for (int i = 0; i < 12; i++) {
        if (i >= 2) CK(cudaEventRecord(e0, stream));
        CK(cudaMemcpyAsync(c1, c0, copy_bytes, cudaMemcpyDeviceToDevice, stream));
        if (i >= 2) {
            CK(cudaEventRecord(e1, stream));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&cms[i - 2], e0, e1));
        }
    }
    qsort(cms, 10, sizeof(float), cmp_float);
    const double copy_gbs = 2.0 * (double)copy_bytes / (0.5 * (cms[4] + cms[5]) * 1e-3) * 1e-9;
    CK(cudaFree(c0));
    CK(cudaFree(c1));
    printf(
        "\ndecoder shapes, f16, D 128: flash = tpk_flash_attention_ex, cudnn = tp_sdpa_create_ex; %d runs each, "
        "L2 evicted before every run\nmeasured: FP16 GEMM peak %.1f TFLOP/s (cuBLASLt 8192^3), device copy %.0f GB/s "
        "(1 GiB read + 1 GiB written)\n",
        runs, peak, copy_gbs);
    printf("%-7s %3s %3s %3s %5s %5s | %-6s %9s %9s %9s %8s %6s %8s | %s\n", "kind", "B", "H", "Hkv", "Tq", "Tkv",
           "impl", "median_us", "min_us", "max_us", "TFLOP/s", "%peak", "KV_GB/s", "notes");
    if (json)
        fprintf(json, "  \"gemm_peak_fp16_tflops\": %.2f,\n  \"copy_gbs\": %.1f,\n  \"runs\": %d,\n  \"decoder\": [\n",
                peak, copy_gbs, runs);
    int first_json = 1;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const dec_shape *d = &shapes[si];
        const size_t nq = (size_t)d->B * d->Tq * d->H * d->D, nkv = (size_t)d->B * d->Tkv * d->Hkv * d->D;
        void *q = NULL, *k = NULL, *v = NULL, *of = NULL, *oc = NULL, *ol = NULL;
        if (d->packed) { /* qkv (B, T, 3, H, D): Q, K, V are views; Tq = Tkv, H = Hkv */
            CK(cudaMalloc(&q, 3 * nq * 2));
            CK(tpk_fill_uniform(q, dt, 3 * nq, 100 + si, stream));
            k = (char *)q + (size_t)d->H * d->D * 2, v = (char *)q + 2 * (size_t)d->H * d->D * 2;
            CK(cudaMalloc(&ol, nq * 2));
        } else {
            CK(cudaMalloc(&q, nq * 2));
            CK(cudaMalloc(&k, nkv * 2));
            CK(cudaMalloc(&v, nkv * 2));
            CK(tpk_fill_uniform(q, dt, nq, 100 + si, stream));
            CK(tpk_fill_uniform(k, dt, nkv, 200 + si, stream));
            CK(tpk_fill_uniform(v, dt, nkv, 300 + si, stream));
        }
        CK(cudaMalloc(&of, nq * 2));
        CK(cudaMalloc(&oc, nq * 2));
        CK(cudaMemsetAsync(of, 0xFF, nq * 2, stream));
        CK(cudaMemsetAsync(oc, 0xFF, nq * 2, stream));
        const float scale = 1.0f / sqrtf((float)d->D);
        /* flash */
        tpk_attn_args a;
        memset(&a, 0, sizeof a);
        a.q = q, a.k = k, a.v = v, a.o = of;
        a.q_row_stride = a.o_row_stride = (long long)d->H * d->D;
        a.q_batch_stride = a.o_batch_stride = (long long)d->Tq * d->H * d->D;
        a.k_row_stride = a.v_row_stride = (long long)d->Hkv * d->D;
        a.k_batch_stride = a.v_batch_stride = (long long)d->Tkv * d->Hkv * d->D;
        if (d->packed) {
            a.q_row_stride = a.k_row_stride = a.v_row_stride = 3LL * d->H * d->D;
            a.q_batch_stride = a.k_batch_stride = a.v_batch_stride = 3LL * d->Tq * d->H * d->D;
        }
        a.B = d->B, a.H = d->H, a.Hkv = d->Hkv, a.Tq = d->Tq, a.Tkv = d->Tkv, a.D = d->D, a.causal = d->causal;
        a.scale = scale, a.in_dt = a.out_dt = dt;
        int splits = 1;
        size_t fws = 0;
        CK(tpk_flash_attention_ex_plan(&a, &splits, &fws));
        void *fw = NULL;
        if (fws) CK(cudaMalloc(&fw, fws));
        a.workspace = fw, a.workspace_bytes = fws;
        /* cuDNN */
        tp_sdpa_desc sd;
        memset(&sd, 0, sizeof sd);
        sd.B = d->B, sd.H = d->H, sd.Hkv = d->Hkv, sd.Tq = d->Tq, sd.Tkv = d->Tkv, sd.D = d->D, sd.causal = d->causal;
        sd.scale = scale, sd.dt = dt;
        sd.q_row_stride = a.q_row_stride, sd.q_batch_stride = a.q_batch_stride;
        sd.k_row_stride = a.k_row_stride, sd.k_batch_stride = a.k_batch_stride;
        sd.v_row_stride = a.v_row_stride, sd.v_batch_stride = a.v_batch_stride;
        sd.o_row_stride = a.o_row_stride, sd.o_batch_stride = a.o_batch_stride;
        tp_sdpa *plan = NULL;
        tp_error perr = {0};
        const double t0 = now_s();
        const tp_status pst = tp_sdpa_create_ex(&sd, &plan, &perr);
        const double t_plan = now_s() - t0;
        void *cw = NULL;
        if (pst == TP_OK && tp_sdpa_workspace_bytes(plan)) CK(cudaMalloc(&cw, tp_sdpa_workspace_bytes(plan)));

        const double flop = 4.0 * d->B * d->H * d->D * dec_pairs(d);
        const double kv_bytes = 2.0 * (double)nkv * 2.0;
        const dec_call calls[3] = {{&a, NULL, q, k, v, of, fw, {0, 0, 0, 0}},
                                   {NULL, plan, q, k, v, oc, cw, {0, 0, 0, 0}},
                                   {NULL, NULL, q, NULL, NULL, ol, NULL, {d->B, d->Tq, d->H, d->D}}};
        static const char *names[3] = {"flash", "cudnn", "vitfa"};
        const int n_impl = d->packed ? 3 : 2;
        dec_time tm[3];
        int ok[3] = {0, 0, 0};
        for (int impl = 0; impl < n_impl; impl++) {
            if (impl == 1 && pst != TP_OK) continue;
            const int rc = dec_time_calls(&calls[impl], stream, runs, flush, flush_bytes, sink, &tm[impl]);
            if (rc) {
                printf("%s %s B=%d Tkv=%d: run failed with status %d\n", d->kind, names[impl], d->B, d->Tkv, rc);
                fails++;
                continue;
            }
            ok[impl] = 1;
        }
        double maxdiff = 0.0, maxref = 0.0;
        size_t bad_f = 0, bad_c = 0;
        if (ok[0] && ok[1]) {
            dec_compare(dt, of, oc, nq, &maxdiff, &maxref, &bad_f, &bad_c);
            /* two f16 roundings of P and of O: 2^-10 relative to max |O| each, with a margin */
            if (bad_f || bad_c || maxdiff > 4.0 * 0x1p-10 * (maxref > 1.0 ? maxref : 1.0)) fails++;
        }
        if (ok[0] && ok[2]) { /* the ViT kernel on the same input: same tile code, same key order */
            double md = 0.0, mr = 0.0;
            size_t b0 = 0, b1 = 0;
            dec_compare(dt, of, ol, nq, &md, &mr, &b0, &b1);
            printf("        check: max |flash_ex - tpk_flash_attention| = %.3e, non-finite %zu %zu%s\n", md, b0, b1,
                   b0 || b1 || md > 0.0 ? " (not bit-identical)" : " (bit-identical)");
            if (b0 || b1) fails++;
        }
        for (int impl = 0; impl < n_impl; impl++) {
            char notes[600];
            if (impl == 0)
                snprintf(notes, sizeof notes, "tpk_flash_attention_ex, %d key range%s", splits,
                         splits > 1 ? "s (split-KV)" : "");
            else if (impl == 2)
                snprintf(notes, sizeof notes, "tpk_flash_attention (the ViT engine's kernel, packed qkv)");
            else if (pst != TP_OK)
                snprintf(notes, sizeof notes, "not planned: %s", perr.msg);
            else
                snprintf(notes, sizeof notes, "plan %.2f s; %s", t_plan, tp_sdpa_describe(plan));
            if (!ok[impl]) {
                printf("%-7s %3d %3d %3d %5d %5d | %-6s %9s %9s %9s %8s %6s %8s | %s\n", d->kind, d->B, d->H, d->Hkv,
                       d->Tq, d->Tkv, names[impl], "-", "-", "-", "-", "-", "-", notes);
                continue;
            }
            const dec_time *t = &tm[impl];
            const double tf = flop / (t->med * 1e-6) * 1e-12, gbs = kv_bytes / (t->med * 1e-6) * 1e-9;
            char gb[16] = "-";
            if (d->Tq == 1) snprintf(gb, sizeof gb, "%.0f", gbs);
            printf("%-7s %3d %3d %3d %5d %5d | %-6s %9.2f %9.2f %9.2f %8.1f %5.1f%% %8s | %s%s\n", d->kind, d->B, d->H,
                   d->Hkv, d->Tq, d->Tkv, names[impl], t->med, t->min, t->max, tf, peak > 0 ? 100.0 * tf / peak : 0.0,
                   gb, notes, t->graph ? "" : " [eager timing]");
            if (json) {
                fprintf(json,
                        "%s    {\"kind\": \"%s\", \"impl\": \"%s\", \"B\": %d, \"H\": %d, \"Hkv\": %d, \"Tq\": %d, "
                        "\"Tkv\": %d, \"D\": %d, \"causal\": %d, \"dtype\": \"f16\", \"median_us\": %.3f, "
                        "\"min_us\": %.3f, \"max_us\": %.3f, \"graph_mean_us_incl_flush\": %.3f, \"graph_timed\": %d, "
                        "\"flop\": %.6g, \"tflops\": %.2f, \"pct_of_fp16_gemm_peak\": %.2f, \"kv_bytes\": %.6g, "
                        "\"kv_gbs\": %.1f, \"splits\": %d, \"note\": \"",
                        first_json ? "" : ",\n", d->kind, names[impl], d->B, d->H, d->Hkv, d->Tq, d->Tkv, d->D,
                        d->causal, t->med, t->min, t->max, t->graph_mean, t->graph, flop, tf,
                        peak > 0 ? 100.0 * tf / peak : 0.0, kv_bytes, gbs, impl ? 0 : splits);
                for (const char *c = notes; *c; c++)
                    fputc(*c == '"' || *c == '\\' ? '\'' : *c, json);
                fprintf(json, "\"}");
                first_json = 0;
            }
        }
        if (ok[0] && ok[1])
            printf("        check: max |flash - cudnn| = %.3e (max |out| %.3f), non-finite flash %zu cudnn %zu%s\n",
                   maxdiff, maxref, bad_f, bad_c,
                   bad_f || bad_c || maxdiff > 4.0 * 0x1p-10 * (maxref > 1.0 ? maxref : 1.0) ? " FAIL" : " ok");
        fflush(stdout);
        tp_sdpa_destroy(plan);
        cudaFree(q), cudaFree(of), cudaFree(oc);
        if (!d->packed) cudaFree(k), cudaFree(v);
        if (ol) cudaFree(ol);
        if (fw) cudaFree(fw);
        if (cw) cudaFree(cw);
    }
    if (json) fprintf(json, "\n  ]\n");
    cudaFree(flush);
    cudaFree(sink);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return fails;
}

int main(int argc, char **argv) {
    int runs = 0, do_vit = 1, do_dec = 1;
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "vit") == 0)
            do_vit = 1, do_dec = 0;
        else if (strcmp(argv[i], "decoder") == 0)
            do_vit = 0, do_dec = 1;
        else if (strcmp(argv[i], "all") == 0)
            do_vit = do_dec = 1;
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json_path = argv[++i];
        else
            runs = atoi(argv[i]);
    }
    char where[1200];
    if (!tp_sdpa_cudnn_available(where, sizeof where)) {
        printf("sdpa_lab: %s\n", where);
        return 2;
    }
    struct cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("sdpa_lab: %s (sm_%d%d, %d SMs, %.0f MB L2), CUDA driver %d, runtime %d; %s\n", p.name, p.major, p.minor,
           p.multiProcessorCount, p.l2CacheSize / 1e6, drv, rt, where);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int fails = 0;
    if (do_vit) {
        static const tp_dtype dts[] = {TP_F16, TP_BF16};
        static const int Ts[] = {197, 256};
        const int r = runs > 0 ? runs : 50;
        printf("ViT shapes: %d timed runs per shape\n", r);
        for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
            for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
                fails += lab_case(64, Ts[ti], 12, 64, dts[di], r, stream);
    }
    if (do_dec) {
        FILE *json = NULL;
        if (json_path) {
            json = fopen(json_path, "w");
            if (!json) {
                fprintf(stderr, "sdpa_lab: cannot write %s\n", json_path);
                return 2;
            }
            fprintf(json,
                    "{\n  \"gpu\": \"%s\",\n  \"sms\": %d,\n  \"cuda_driver\": %d,\n  \"cuda_runtime\": %d,\n"
                    "  \"cudnn\": \"",
                    p.name, p.multiProcessorCount, drv, rt);
            for (const char *c = where; *c; c++)
                fputc(*c == '"' || *c == '\\' ? '\'' : *c, json);
            fprintf(json, "\",\n");
        }
        fails += decoder_lab(runs > 0 ? runs : 30, stream, json);
        if (json) {
            fprintf(json, "}\n");
            fclose(json);
        }
    }
    cudaStreamDestroy(stream);
    return fails ? 1 : 0;
}
