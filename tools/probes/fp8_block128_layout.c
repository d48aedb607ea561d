/* Probe (not part of the build): which scale layouts cuBLASLt's VEC128_32F (activations, 1x128 blocks) and
 * BLK128x128_32F (weights, 128x128 blocks) expect on sm_90, for tprof's GEMM mapping (A = W^T, B = X, TN).
 * Build here:
 *   gcc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -I/usr/local/cuda/include \
 *       tools/probes/fp8_block128_layout.c src/formats/dtype.c src/core/rng.c -L/usr/local/cuda/lib64 \
 *       -lcudart -lcublasLt -lm -Wl,-rpath,/usr/local/cuda/lib64 -o blk
 * Seen on H200, cuBLASLt 13.1, 2026-11-21 (M 256, N 384, K 640): every combination of the two obvious scale
 * layouts per operand is accepted by the heuristic, with and without the BIAS epilogue, but none reproduces the
 * CPU reference: relative L2 2.3 with X's scales (M, K/128) kb-contiguous, 0.58 with (K/128, M) m-contiguous,
 * whichever W layout. So the layout cuBLAS documents under "scaling factor layouts" is something else (padding,
 * a swizzle, or the roles of A and B): read it before implementing fp8-block. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "formats/dtype.h"
#include "core/rng.h"
#define M 256
#define N 384
#define K 640
#define KB (K / 128)
#define NB (N / 128)
static float X[M * K], W[N * K], sX[M * KB], sW[NB * KB], ref[M * N];
static unsigned char qX[M * K], qW[N * K];
int main(void) {
    tp_rng r; tp_rng_seed(&r, 3);
    for (int i = 0; i < M * K; i++) X[i] = (float)tp_rng_normal(&r) * (1 + (i % 977 == 0) * 30);
    for (int i = 0; i < N * K; i++) W[i] = (float)tp_rng_normal(&r) * 0.05f;
    for (int m = 0; m < M; m++) for (int kb = 0; kb < KB; kb++) {
        float a = 0; for (int k = 0; k < 128; k++) a = fmaxf(a, fabsf(X[m * K + kb * 128 + k]));
        float s = a > 0 ? a / 448.0f : 1.0f; sX[m * KB + kb] = s;
        for (int k = 0; k < 128; k++) qX[m * K + kb * 128 + k] = tp_f32_to_e4m3(X[m * K + kb * 128 + k] / s);
    }
    for (int nb = 0; nb < NB; nb++) for (int kb = 0; kb < KB; kb++) {
        float a = 0; for (int n = 0; n < 128; n++) for (int k = 0; k < 128; k++) a = fmaxf(a, fabsf(W[(nb * 128 + n) * K + kb * 128 + k]));
        float s = a > 0 ? a / 448.0f : 1.0f; sW[nb * KB + kb] = s;
        for (int n = 0; n < 128; n++) for (int k = 0; k < 128; k++) { int i = (nb * 128 + n) * K + kb * 128 + k; qW[i] = tp_f32_to_e4m3(W[i] / s); }
    }
    for (int m = 0; m < M; m++) for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int kb = 0; kb < KB; kb++) { double p = 0; for (int k = 0; k < 128; k++) p += (double)tp_e4m3_to_f32(qX[m*K+kb*128+k]) * tp_e4m3_to_f32(qW[n*K+kb*128+k]); acc += p * sX[m*KB+kb] * sW[(n/128)*KB+kb]; }
        ref[m * N + n] = (float)acc;
    }
    void *dX, *dW, *dD, *dsX, *dsW, *ws; cudaMalloc(&dX, M*K); cudaMalloc(&dW, N*K); cudaMalloc(&dD, M*N*2); cudaMalloc(&dsX, 4*M*KB); cudaMalloc(&dsW, 4*NB*KB); cudaMalloc(&ws, 64<<20);
    cudaMemcpy(dX, qX, M*K, cudaMemcpyHostToDevice); cudaMemcpy(dW, qW, N*K, cudaMemcpyHostToDevice);
    cublasLtHandle_t lt; cublasLtCreate(&lt);
    for (int la = 0; la < 2; la++) for (int lb = 0; lb < 2; lb++) for (int bias = 0; bias < 2; bias++) {
        float hsW[NB*KB], hsX[M*KB];
        for (int nb = 0; nb < NB; nb++) for (int kb = 0; kb < KB; kb++) hsW[la ? kb*NB+nb : nb*KB+kb] = sW[nb*KB+kb];
        for (int m = 0; m < M; m++) for (int kb = 0; kb < KB; kb++) hsX[lb ? kb*M+m : m*KB+kb] = sX[m*KB+kb];
        cudaMemcpy(dsW, hsW, sizeof hsW, cudaMemcpyHostToDevice); cudaMemcpy(dsX, hsX, sizeof hsX, cudaMemcpyHostToDevice);
        cublasLtMatmulDesc_t op; cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        int32_t T = CUBLAS_OP_T, Nn = CUBLAS_OP_N, ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &T, 4); cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &Nn, 4);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, 4); cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, 4);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dsW, 8); cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dsX, 8);
        void *dbias = NULL;
        if (bias) { cudaMalloc(&dbias, N*2); cudaMemset(dbias, 0, N*2); int32_t epi = CUBLASLT_EPILOGUE_BIAS, bt = CUDA_R_16BF;
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4); cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, 4);
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, 8); }
        cublasLtMatrixLayout_t a, b, c; cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, K, N, K); cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, K, M, K); cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, M, N);
        cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref); uint64_t wsz = 64 << 20; cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, 8);
        cublasLtMatmulHeuristicResult_t res; int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &res, &found);
        float alpha = 1, beta = 0;
        if (st == 0 && found) { cudaMemset(dD, 0xFF, M*N*2); st = cublasLtMatmul(lt, op, &alpha, dW, a, dX, b, &beta, dD, c, dD, c, &res.algo, ws, wsz, 0); cudaDeviceSynchronize(); }
        double num = 0, den = 0;
        if (st == 0 && found) { unsigned short *h = malloc(M*N*2); cudaMemcpy(h, dD, M*N*2, cudaMemcpyDeviceToHost);
            for (int i = 0; i < M*N; i++) { double g = tp_bf16_to_f32(h[i]); num += (g-ref[i])*(g-ref[i]); den += (double)ref[i]*ref[i]; } free(h); }
        printf("W scales %s, X scales %s, bias %d: heuristic status %d found %d -> rel L2 %.3e\n", la ? "(K/128, N/128) kb-major" : "(N/128, K/128) nb-major",
               lb ? "(K/128, M) m-contiguous" : "(M, K/128) kb-contiguous", bias, (int)st, found, (st == 0 && found) ? sqrt(num / den) : -1.0);
        cudaFree(dbias);
    }
    return 0;
}
