/* gelu_epilogue.c: which GELU cuBLASLt's GELU_BIAS epilogue computes. D = GELU(A W^T + bias) in f32 (A, W f32,
 * TF32 off, so the pre-activation is exact enough), for pre-activations spread over [-6, 6]; the output compared
 * with the exact GELU 0.5 x (1 + erf(x / sqrt 2)) and with the tanh form 0.5 x (1 + tanh(sqrt(2 / pi) (x +
 * 0.044715 x^3))). Prints the max abs difference against each.
 * Build: gcc -O2 -I/usr/local/cuda/include tools/probes/gelu_epilogue.c -L/usr/local/cuda/lib64 -lcublasLt -lcudart -lm */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    /* row-major D (M, N) = A (M, K) W (N, K)^T + bias: A = identity-like rows picking x values, W = diag */
    const int M = 64, N = 64, K = 64;
    float *hA = calloc((size_t)M * K, 4), *hW = calloc((size_t)N * K, 4), *hb = calloc(N, 4), *hD = malloc((size_t)M * N * 4);
    for (int m = 0; m < M; m++) hA[m * K + m % K] = 1.0f;           /* row m selects column m of W^T */
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) hW[n * K + k] = -6.0f + 12.0f * (float)(k * N + n) / (float)(N * K - 1);
    void *A, *W, *b, *D, *ws;
    cudaMalloc(&A, (size_t)M * K * 4), cudaMalloc(&W, (size_t)N * K * 4), cudaMalloc(&b, N * 4);
    cudaMalloc(&D, (size_t)M * N * 4), cudaMalloc(&ws, 1 << 22);
    cudaMemcpy(A, hA, (size_t)M * K * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(W, hW, (size_t)N * K * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, N * 4, cudaMemcpyHostToDevice);
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const int32_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N, epi = CUBLASLT_EPILOGUE_GELU_BIAS;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b);
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, K, N, K);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, M, K);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, N);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t wsb = 1 << 22;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &found);
    const float alpha = 1, beta = 0;
    if (s == CUBLAS_STATUS_SUCCESS && found)
        s = cublasLtMatmul(lt, op, &alpha, W, la, A, lb, &beta, D, lc, D, lc, &res.algo, ws, res.workspaceSize, 0);
    cudaDeviceSynchronize();
    printf("GELU_BIAS f32: %s\n", cublasLtGetStatusString(s));
    cudaMemcpy(hD, D, (size_t)M * N * 4, cudaMemcpyDeviceToHost);
    double d_erf = 0, d_tanh = 0, x_erf = 0, x_tanh = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const double x = hW[n * K + m % K], y = hD[m * N + n];
            const double ge = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
            const double gt = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
            if (fabs(y - ge) > d_erf) d_erf = fabs(y - ge), x_erf = x;
            if (fabs(y - gt) > d_tanh) d_tanh = fabs(y - gt), x_tanh = x;
        }
    printf("max |epilogue - erf GELU|  = %.3e (at x = %.4f)\nmax |epilogue - tanh GELU| = %.3e (at x = %.4f)\n", d_erf,
           x_erf, d_tanh, x_tanh);
    return 0;
}
