/* Probe (not part of the build): which scale layouts cuBLASLt's VEC128_32F (activations, 1x128 blocks) and
 * BLK128x128_32F (weights, 128x128 blocks) expect on sm_90, for tprof's GEMM mapping (A = W^T, B = X, TN).
 * Build here:
 *   gcc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -I/usr/local/cuda/include \
 *       tools/probes/fp8_block128_layout.c src/formats/dtype.c src/core/rng.c -L/usr/local/cuda/lib64 \
 *       -lcudart -lcublasLt -lm -Wl,-rpath,/usr/local/cuda/lib64 -o blk
 * First run (H200, cuBLASLt 13.1, M 256, N 384, K 640): the two unpadded layouts per operand gave rel L2 2.3 /
 * 0.58. This version adds the layouts PyTorch's _scaled_mm uses for its BlockWise1x128 / BlockWise128x128
 * recipes on sm_90 (1x128 scales outer-dim-major, i.e. (K/128, M) with M contiguous; 128x128 scales
 * (N/128, K/128) with the K-block count padded to a multiple of 4), with M not a multiple of 4 and K not a
 * multiple of 128. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "formats/dtype.h"
#include "core/rng.h"

static int up(int a, int b) { return (a + b - 1) / b * b; }

static void probe(cublasLtHandle_t lt, int M, int N, int K) {
    int KB = (K + 127) / 128, NB = (N + 127) / 128;
    float *X = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
    float *sX = malloc(sizeof(float) * M * KB), *sW = malloc(sizeof(float) * NB * KB), *ref = malloc(sizeof(float) * M * N);
    unsigned char *qX = malloc(M * K), *qW = malloc(N * K);
    tp_rng r; tp_rng_seed(&r, 3);
    for (int i = 0; i < M * K; i++) X[i] = (float)tp_rng_normal(&r) * (1 + (i % 977 == 0) * 30);
    for (int i = 0; i < N * K; i++) W[i] = (float)tp_rng_normal(&r) * 0.05f * (1 + (i % 1511 == 0) * 20);
    for (int m = 0; m < M; m++) for (int kb = 0; kb < KB; kb++) {
        int k1 = kb * 128 + 128 < K ? kb * 128 + 128 : K;
        float a = 0; for (int k = kb * 128; k < k1; k++) a = fmaxf(a, fabsf(X[m * K + k]));
        float s = a > 0 ? a / 448.0f : 1.0f; sX[m * KB + kb] = s;
        for (int k = kb * 128; k < k1; k++) qX[m * K + k] = tp_f32_to_e4m3(X[m * K + k] / s);
    }
    for (int nb = 0; nb < NB; nb++) for (int kb = 0; kb < KB; kb++) {
        int k1 = kb * 128 + 128 < K ? kb * 128 + 128 : K, n1 = nb * 128 + 128 < N ? nb * 128 + 128 : N;
        float a = 0; for (int n = nb * 128; n < n1; n++) for (int k = kb * 128; k < k1; k++) a = fmaxf(a, fabsf(W[n * K + k]));
        float s = a > 0 ? a / 448.0f : 1.0f; sW[nb * KB + kb] = s;
        for (int n = nb * 128; n < n1; n++) for (int k = kb * 128; k < k1; k++) qW[n * K + k] = tp_f32_to_e4m3(W[n * K + k] / s);
    }
    for (int m = 0; m < M; m++) for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int kb = 0; kb < KB; kb++) {
            int k1 = kb * 128 + 128 < K ? kb * 128 + 128 : K; double p = 0;
            for (int k = kb * 128; k < k1; k++) p += (double)tp_e4m3_to_f32(qX[m * K + k]) * tp_e4m3_to_f32(qW[n * K + k]);
            acc += p * sX[m * KB + kb] * sW[(n / 128) * KB + kb];
        }
        ref[m * N + n] = (float)acc;
    }
    void *dX, *dW, *dD, *dsX, *dsW, *ws; size_t wsz = 64 << 20;
    cudaMalloc(&dX, M * K); cudaMalloc(&dW, N * K); cudaMalloc(&dD, M * N * 2);
    cudaMalloc(&dsX, 4 * up(M, 4) * up(KB, 4)); cudaMalloc(&dsW, 4 * up(NB, 4) * up(KB, 4)); cudaMalloc(&ws, wsz);
    cudaMemcpy(dX, qX, M * K, cudaMemcpyHostToDevice); cudaMemcpy(dW, qW, N * K, cudaMemcpyHostToDevice);
    const char *wl[3] = {"(N/128, K/128) row-major", "(N/128, up4(K/128)) row-major", "(K/128, N/128) row-major"};
    const char *xl[3] = {"(K/128, M) M-contiguous", "(K/128, up4(M)) M-contiguous", "(M, K/128) row-major"};
    for (int la = 0; la < 3; la++) for (int lb = 0; lb < 3; lb++) for (int bias = 0; bias < 2; bias++) {
        int KB4 = up(KB, 4), M4 = up(M, 4);
        float *hsW = calloc((size_t)up(NB, 4) * KB4, 4), *hsX = calloc((size_t)M4 * KB4, 4);
        for (int nb = 0; nb < NB; nb++) for (int kb = 0; kb < KB; kb++)
            hsW[la == 0 ? nb * KB + kb : la == 1 ? nb * KB4 + kb : kb * NB + nb] = sW[nb * KB + kb];
        for (int m = 0; m < M; m++) for (int kb = 0; kb < KB; kb++)
            hsX[lb == 0 ? kb * M + m : lb == 1 ? kb * M4 + m : m * KB + kb] = sX[m * KB + kb];
        cudaMemcpy(dsW, hsW, 4 * (size_t)up(NB, 4) * KB4, cudaMemcpyHostToDevice);
        cudaMemcpy(dsX, hsX, 4 * (size_t)M4 * KB4, cudaMemcpyHostToDevice);
        free(hsW); free(hsX);
        cublasLtMatmulDesc_t op; cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        int32_t T = CUBLAS_OP_T, Nn = CUBLAS_OP_N, ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &T, 4);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &Nn, 4);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, 4);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, 4);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dsW, 8);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dsX, 8);
        void *dbias = NULL;
        if (bias) {
            cudaMalloc(&dbias, N * 2); cudaMemset(dbias, 0, N * 2);
            int32_t epi = CUBLASLT_EPILOGUE_BIAS, bt = CUDA_R_16BF;
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4);
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, 4);
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, 8);
        }
        cublasLtMatrixLayout_t a, b, c;
        cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, K, N, K); cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, K, M, K);
        cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, M, N);
        cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, 8);
        cublasLtMatmulHeuristicResult_t res; int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &res, &found);
        float alpha = 1, beta = 0;
        if (st == 0 && found) {
            cudaMemset(dD, 0xFF, M * N * 2);
            st = cublasLtMatmul(lt, op, &alpha, dW, a, dX, b, &beta, dD, c, dD, c, &res.algo, ws, wsz, 0);
            cudaDeviceSynchronize();
        }
        double num = 0, den = 0;
        if (st == 0 && found) {
            unsigned short *h = malloc(M * N * 2); cudaMemcpy(h, dD, M * N * 2, cudaMemcpyDeviceToHost);
            for (int i = 0; i < M * N; i++) { double g = tp_bf16_to_f32(h[i]); num += (g - ref[i]) * (g - ref[i]); den += (double)ref[i] * ref[i]; }
            free(h);
        }
        printf("M %d N %d K %d | W %-30s | X %-30s | bias %d: status %d found %d -> rel L2 %.3e\n", M, N, K, wl[la], xl[lb],
               bias, (int)st, found, (st == 0 && found) ? sqrt(num / den) : -1.0);
        cudaFree(dbias); cublasLtMatmulDescDestroy(op); cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(a); cublasLtMatrixLayoutDestroy(b); cublasLtMatrixLayoutDestroy(c);
    }
    cudaFree(dX); cudaFree(dW); cudaFree(dD); cudaFree(dsX); cudaFree(dsW); cudaFree(ws);
    free(X); free(W); free(sX); free(sW); free(ref); free(qX); free(qW);
}

int main(void) {
    cublasLtHandle_t lt; cublasLtCreate(&lt);
    probe(lt, 256, 384, 640);
    probe(lt, 253, 384, 640);
    probe(lt, 256, 320, 576);
    return 0;
}
