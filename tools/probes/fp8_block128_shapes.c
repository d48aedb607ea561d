/* Probe (not part of the build): which GEMM shapes cuBLASLt accepts with FP8 block-128 scales on sm_90
 * (A = W^T BLK128x128_32F, B = X VEC128_32F, TN, bf16 out), with and without the BIAS epilogue.
 * Build: gcc -std=c11 -O2 -I/usr/local/cuda/include tools/probes/fp8_block128_shapes.c -L/usr/local/cuda/lib64 \
 *        -lcudart -lcublasLt -Wl,-rpath,/usr/local/cuda/lib64 -o blk_shapes
 * Seen on H200, cuBLASLt 13.1, 2026-11-21: with the scale pointers unset, cublasLtMatmulAlgoGetHeuristic finds no
 * algorithm for any shape (M 52..12612, N 64..768, K 64..3072, with or without bias, any minimum alignment);
 * with them set to any device address, every shape tried is accepted (K 160, 192, 592 included: a partial last
 * K block is fine). So tprof sets placeholder scale pointers at plan time. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

static void *g_scales;
static int try_shape(cublasLtHandle_t lt, int M, int N, int K, int bias, int align, int ptrs) {
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    int32_t T = CUBLAS_OP_T, Nn = CUBLAS_OP_N, ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
            mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &T, 4);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &Nn, 4);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, 4);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, 4);
    if (ptrs) {
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g_scales, 8);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g_scales, 8);
    }
    if (bias) {
        int32_t epi = CUBLASLT_EPILOGUE_BIAS, bt = CUDA_R_16BF;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, 4);
    }
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, K, N, K);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, K, M, K);
    cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, M, N);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t wsz = 32 << 20;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, 8);
    uint32_t al = (uint32_t)align;
    if (align) cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, 4);
    if (align) cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, 4);
    if (align) cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, 4);
    if (align) cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, 4);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(op);
    return st == 0 && found ? 1 : -(int)st;
}

int main(void) {
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    cudaMalloc(&g_scales, 1 << 20);
    static const int aligns[] = {0, 16, 32, 64, 128, 256};
    for (int ptrs = 0; ptrs < 2; ptrs++)
        for (unsigned ai = 0; ai < 6; ai++)
            printf("scale pointers %d, min alignment %3d: M 12612 N 768 K 768 bias %s; M 52 N 192 K 192 %s; K 160 %s; M 256 N 384 K 592 %s\n",
                   ptrs, aligns[ai], try_shape(lt, 12612, 768, 768, 1, aligns[ai], ptrs) == 1 ? "ok" : "NO",
                   try_shape(lt, 52, 192, 192, 1, aligns[ai], ptrs) == 1 ? "ok" : "NO",
                   try_shape(lt, 52, 192, 160, 1, aligns[ai], ptrs) == 1 ? "ok" : "NO",
                   try_shape(lt, 256, 384, 592, 1, aligns[ai], ptrs) == 1 ? "ok" : "NO");
    return 0;
}
