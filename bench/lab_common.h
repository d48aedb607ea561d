/* lab_common.h: what every kernel lab in bench/ (attention_wgmma_lab.c, gemm_lab.c, patch_embed_lab.c,
 * sdpa_lab.c, attention_lab.cu, attention_fp8_lab.cu) needs and nothing else does: CK, which ends the lab with
 * exit status 2 and the call's text, file:line and CUDA error on stderr (labs are programs, not library code: a
 * failed CUDA call leaves nothing to measure), and the float comparison qsort needs for medians. Header-only, C. */
#ifndef TP_BENCH_LAB_COMMON_H
#define TP_BENCH_LAB_COMMON_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                                   \
    do {                                                                                                           \
        cudaError_t e_ = (cudaError_t)(call); /* also the int codes of tpk_* calls */                            \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_),              \
                    cudaGetErrorString(e_));                                                                       \
            exit(2);                                                                                               \
        }                                                                                                          \
    } while (0)

/* ascending order of floats, for qsort */
static inline int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* After `runs` timed runs on s, each between ev[2 i] and ev[2 i + 1]: waits for s, reads the times into t (us,
 * sorted ascending) and returns the median, with the fastest and slowest in *lo and *hi. */
static inline float lab_event_median(cudaStream_t s, cudaEvent_t *ev, int runs, float *t, float *lo, float *hi) {
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < runs; i++) {
        CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
        t[i] *= 1000.0f;
    }
    qsort(t, (size_t)runs, sizeof(float), cmp_float);
    *lo = t[0], *hi = t[runs - 1];
    return t[runs / 2];
}

#endif
