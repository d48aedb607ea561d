#include "exec/cuda/gemm/gemm_peak.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "core/stats.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/kernels/kernels.h"
#include "core/util.h"
#include "formats/dtype.h"
#include "formats/precision.h"

#define PEAK_WARM_MS 500.0 /* back-to-back GEMMs before the timed ones */

tp_status tp_gemm_peak(tp_precision prec, int n, int iters, double *tflops, tp_error *err) {
    /* the block-scaled formats are measured on the path this GPU runs them on: Hopper emulates them with bf16
     * GEMMs (plan.h), so that is their peak here */
    const tp_precision_traits *pt = tp_precision_info(prec);
    const tp_dtype ab = pt->peak_ab, d = pt->peak_d;
    const int block128 = pt->qf == TP_QF_FP8_BLOCK128;
    size_t nn = (size_t)n * (size_t)n;
    void *A = NULL, *W = NULL, *D = NULL;
    float *scales = NULL, *h_ones = NULL;
    /* unit scales: two per-tensor ones 16 bytes apart (cuBLASLt wants 16-byte aligned scale pointers), or for
     * fp8-block the activations' (n/128, n) 1x128 scales followed by the weights' 128x128 ones */
    const size_t kb = ((size_t)n + 127) / 128, n_act_sc = block128 ? kb * (size_t)n : 4,
                 n_sc = n_act_sc + (block128 ? tp_gemm_b128_weight_scale_count(n, n) : 4);
    cudaStream_t s = NULL;
    tp_gemm_ctx *ctx = NULL;
    tp_gemm_plan *plan = NULL;
    double *ms = NULL;
    cudaEvent_t *evs = NULL; /* iters + 1: around and between the timed runs */
    tp_status st = TP_OK;
    cudaError_t ce;
    *tflops = 0;
    if (n < 1 || iters < 1) return tp_fail(err, TP_ERR_ARG, "GEMM peak: n %d, %d runs", n, iters);
    if ((ce = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))) goto cuda_fail;
    if ((ce = cudaMalloc(&A, nn * tp_dtype_info(ab)->bytes)) || (ce = cudaMalloc(&W, nn * tp_dtype_info(ab)->bytes)) ||
        (ce = cudaMalloc(&D, nn * tp_dtype_info(d)->bytes)) || (ce = cudaMalloc((void **)&scales, sizeof(float) * n_sc))) {
        st = tp_fail(err, TP_ERR_OOM, "GEMM peak %s n=%d: %s", tp_precision_name(prec), n, cudaGetErrorString(ce));
        goto done;
    }
    if (!(h_ones = malloc(sizeof(float) * n_sc))) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        goto done;
    }
    for (size_t i = 0; i < n_sc; i++) h_ones[i] = 1.0f;
    if ((ce = cudaMemcpy(scales, h_ones, sizeof(float) * n_sc, cudaMemcpyHostToDevice))) goto cuda_fail;
    int rc = tpk_fill_uniform(A, ab, nn, 1, s);
    if (!rc) rc = tpk_fill_uniform(W, ab, nn, 2, s);
    if (rc) {
        ce = (cudaError_t)rc;
        goto cuda_fail;
    }
    if ((st = tp_gemm_ctx_create(32u << 20, &ctx, err))) goto done;
    tp_gemm_desc desc = {n, n, n, ab, d, 0, block128, 0, 0, 0, 0};
    if ((st = tp_gemm_plan_create(ctx, &desc, "peak", &plan, err))) goto done;
    const int fp8 = ab == TP_E4M3;
    ms = malloc(sizeof(double) * (size_t)iters);
    evs = calloc((size_t)iters + 1, sizeof *evs);
    for (int i = 0; evs && i <= iters; i++)
        if ((ce = cudaEventCreate(&evs[i]))) goto cuda_fail;
    if (!ms || !evs) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        goto done;
    }
    /* Warm-up until the clocks settle: these GPUs hold their boost clock for a fraction of a second under dense
     * GEMMs, then their power limit lowers it (H200, 700 W: 1.98 GHz down to 1.2-1.6), and the engines' timed
     * runs are sustained, back to back. A 20-run warm-up (30 ms at fp16) measured 640 or 756 TFLOP/s depending on
     * what ran before it (bench/results/README.md). */
    const double t0 = tp_now_ms();
    for (int i = 0; i < 20 || tp_now_ms() - t0 < PEAK_WARM_MS; i++) {
        rc = tp_gemm_run(ctx, plan, A, W, NULL, D, fp8 ? scales : NULL, fp8 ? scales + n_act_sc : NULL, s);
        if (rc) {
            st = tp_fail(err, TP_ERR_CUDA, "GEMM peak %s: cuBLASLt status %d", tp_precision_name(prec), rc);
            goto done;
        }
        if (i % 8 == 7 && (ce = cudaStreamSynchronize(s))) goto cuda_fail; /* keep the host clock meaningful */
    }
    /* then the timed runs back to back, an event between each two (no gap for the clocks to recover in) */
    for (int i = 0; i <= iters; i++) {
        if ((ce = cudaEventRecord(evs[i], s))) goto cuda_fail;
        if (i == iters) break;
        rc = tp_gemm_run(ctx, plan, A, W, NULL, D, fp8 ? scales : NULL, fp8 ? scales + n_act_sc : NULL, s);
        if (rc) {
            st = tp_fail(err, TP_ERR_CUDA, "GEMM peak %s: cuBLASLt status %d", tp_precision_name(prec), rc);
            goto done;
        }
    }
    if ((ce = cudaEventSynchronize(evs[iters]))) goto cuda_fail;
    for (int i = 0; i < iters; i++) {
        float t = 0;
        if ((ce = cudaEventElapsedTime(&t, evs[i], evs[i + 1]))) goto cuda_fail;
        ms[i] = t;
    }
    tp_latency_stats l;
    tp_latency_stats_compute(ms, iters, &l);
    *tflops = 2.0 * (double)n * (double)n * (double)n / (l.median * 1e-3) * 1e-12;
    goto done;
cuda_fail:
    st = tp_fail(err, TP_ERR_CUDA, "GEMM peak %s n=%d: %s", tp_precision_name(prec), n, cudaGetErrorString(ce));
done:
    for (int i = 0; evs && i <= iters; i++)
        if (evs[i]) cudaEventDestroy(evs[i]);
    free(evs);
    free(ms);
    free(h_ones);
    tp_gemm_plan_destroy(plan);
    tp_gemm_ctx_destroy(ctx);
    cudaFree(A);
    cudaFree(W);
    cudaFree(D);
    cudaFree(scales);
    if (s) cudaStreamDestroy(s);
    return st;
}

tp_status tp_copy_rate(size_t bytes, int iters, double *gbps, tp_error *err) {
    void *src = NULL, *dst = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    double *ms = NULL;
    tp_status st = TP_OK;
    cudaError_t ce;
    *gbps = 0;
    if (bytes < 4 || iters < 1) return tp_fail(err, TP_ERR_ARG, "copy rate: %zu bytes, %d runs", bytes, iters);
    bytes &= ~(size_t)3;
    if ((ce = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) || (ce = cudaEventCreate(&ev[0])) ||
        (ce = cudaEventCreate(&ev[1])))
        goto cuda_fail;
    if ((ce = cudaMalloc(&src, bytes)) || (ce = cudaMalloc(&dst, bytes))) {
        st = tp_fail(err, TP_ERR_OOM, "copy rate: 2 x %zu bytes on the GPU: %s", bytes, cudaGetErrorString(ce));
        goto done;
    }
    int rc = tpk_fill_uniform(src, TP_F32, bytes / 4, 3, s);
    if (rc) {
        ce = (cudaError_t)rc;
        goto cuda_fail;
    }
    if (!(ms = malloc(sizeof(double) * (size_t)iters))) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        goto done;
    }
    for (int i = -5; i < iters; i++) { /* 5 warm-up copies */
        float t = 0;
        if ((ce = cudaEventRecord(ev[0], s)) || (ce = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)) ||
            (ce = cudaEventRecord(ev[1], s)) || (ce = cudaEventSynchronize(ev[1])) ||
            (ce = cudaEventElapsedTime(&t, ev[0], ev[1])))
            goto cuda_fail;
        if (i >= 0) ms[i] = t;
    }
    tp_latency_stats l;
    tp_latency_stats_compute(ms, iters, &l);
    *gbps = 2.0 * (double)bytes / (l.median * 1e-3) * 1e-9;
    goto done;
cuda_fail:
    st = tp_fail(err, TP_ERR_CUDA, "copy rate (%zu bytes): %s", bytes, cudaGetErrorString(ce));
done:
    free(ms);
    cudaFree(src);
    cudaFree(dst);
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    if (s) cudaStreamDestroy(s);
    return st;
}
