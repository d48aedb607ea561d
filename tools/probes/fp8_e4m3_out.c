/* fp8_e4m3_out.c: which C pointer cuBLASLt accepts for an FP8 GEMM whose D is E4M3 (C F16, beta 0): C aliasing
 * D (different types), C = NULL, or a separate F16 buffer. Prints cublasLtMatmul's status for each.
 * Build: gcc -O2 -I/usr/local/cuda/include tools/probes/fp8_e4m3_out.c -L/usr/local/cuda/lib64 -lcublasLt -lcudart */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>

int main(void) {
    const int M = 591, N = 2304, K = 768; /* row-major D (M, N) = A (M, K) W (N, K)^T: cuBLASLt m = N, n = M */
    void *A, *W, *D, *C16, *ws;
    float *sc;
    cudaMalloc(&A, (size_t)M * K);
    cudaMalloc(&W, (size_t)N * K);
    cudaMalloc(&D, (size_t)M * N);
    cudaMalloc(&C16, (size_t)M * N * 2);
    cudaMalloc(&ws, 32 << 20);
    cudaMalloc((void **)&sc, 64);
    cudaMemset(A, 0x38, (size_t)M * K);
    cudaMemset(W, 0x38, (size_t)N * K);
    float one[4] = {1, 1, 1, 1};
    cudaMemcpy(sc, one, sizeof one, cudaMemcpyHostToDevice);
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const int32_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n);
    const float *p = sc;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p, sizeof p);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p, sizeof p);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &p, sizeof p);
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, K, N, K);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, K, M, K);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16F, N, M, N);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_8F_E4M3, N, M, N);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t wsb = 32 << 20;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, ld, pref, 1, &res, &found);
    printf("heuristic: %s, found %d\n", cublasLtGetStatusString(s), found);
    const float alpha = 1, beta = 0;
    void *cs[3] = {D, NULL, C16};
    const char *names[3] = {"C = D (aliased, F16 vs E4M3)", "C = NULL", "C = separate F16 buffer"};
    for (int i = 0; i < 3; i++) {
        s = cublasLtMatmul(lt, op, &alpha, W, la, A, lb, &beta, cs[i], lc, D, ld, &res.algo, ws, res.workspaceSize, 0);
        cudaError_t ce = cudaDeviceSynchronize();
        unsigned char h[4] = {0};
        cudaMemcpy(h, D, 4, cudaMemcpyDeviceToHost);
        printf("%-32s cublasLtMatmul: %s; cuda %s; D[0] = 0x%02x (1.0 * 1.0 * 768 -> 448 saturated = 0x7e)\n",
               names[i], cublasLtGetStatusString(s), cudaGetErrorName(ce), h[0]);
        cudaMemset(D, 0, (size_t)M * N);
    }
    return 0;
}
