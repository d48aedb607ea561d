/* sdpa_lab.c: times cuDNN's SDPA forward (tp_sdpa_run, src/exec/cuda/cudnn_sdpa.h) on ViT-B/16 shapes, as the
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
 * Build: cmake --build <build dir> --target sdpa_lab. Run: ./sdpa_lab [runs]. Finds cuDNN at run time like
 * every tprof binary (TPROF_CUDNN_LIB, the loader path, Python site-packages; cudnn_sdpa.h). Exit status: 0,
 * 1 when a check fails or cuDNN refuses a shape, 2 on a CUDA error or when cuDNN cannot be loaded. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "exec/cuda/cudnn_sdpa.h"
#include "formats/dtype.h"

#define CK(call)                                                                                                   \
    do {                                                                                                           \
        cudaError_t e_ = (call);                                                                                   \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_),              \
                    cudaGetErrorString(e_));                                                                       \
            exit(2);                                                                                               \
        }                                                                                                          \
    } while (0)

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

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

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 50;
    if (runs < 1) runs = 50;
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
    printf("sdpa_lab: %s (sm_%d%d, %d SMs), CUDA driver %d, runtime %d; %s; %d timed runs per shape\n", p.name,
           p.major, p.minor, p.multiProcessorCount, drv, rt, where, runs);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    static const tp_dtype dts[] = {TP_F16, TP_BF16};
    static const int Ts[] = {197, 256};
    int fails = 0;
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) fails += lab_case(64, Ts[ti], 12, 64, dts[di], runs, stream);
    cudaStreamDestroy(stream);
    return fails ? 1 : 0;
}
