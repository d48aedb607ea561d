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

#endif
