/* patch_embed_lab.c: ViT's token embedding three ways, in one process on one GPU, at ViT-B/16's shape (B 64, 224 x
 * 224 fp32 image, P 16, C 768, class token; F16):
 *   unfused    what engines ran before patch_embed.cu: im2col to f16 columns (tpk_im2col), the cuBLASLt GEMM with
 *              bias (the heuristic's first algorithm), then the token embedding (tpk_embed_tokens): the vendor
 *              baseline, with two round trips through memory;
 *   variant 0  tpk_patch_embed_variant, 128 x 128 tiles, 2 CTAs per SM (the default);
 *   variant 1  128 x 256 tiles, 1 CTA per SM (half the image traffic through L2).
 * Per way: one run on a NaN-poisoned output (no NaN may remain), the relative L2 difference of each fused variant
 * to the unfused output (the fused kernel rounds once where the unfused path rounds twice: ~1e-4 expected), 10
 * warmup runs, then `runs` runs (default 50) each between two CUDA events; median, min, max in us and the median's
 * TFLOP/s (2 M N K of the GEMM, M = B * 196).
 *
 * Build: cmake --build <build dir> --target patch_embed_lab. Run: ./patch_embed_lab [runs] [batch].
 * Exit status: 0; 1 when an output has NaN/Inf or disagrees (rel L2 > 2e-3); 2 on a CUDA or cuBLAS error. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_common.h"
#include "lab_variants.h"
#include "core/rng.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/kernels/patch_embed.h"
#include "formats/dtype.h"


typedef struct {
    int B, H, W, P, C, Np, T, K;
    float *img;
    void *w, *bias, *cls, *pos, *cols, *pe, *x;
    tp_gemm_ctx *gemm;
    tp_gemm_plan *plan;
    cudaStream_t s;
} lab;

/* way -1: unfused; 0, 1: the fused kernel's variants. Returns the first error code (0: fine). */
static int run_way(const lab *l, int way) {
    if (way >= 0)
        return tpk_patch_embed_variant(l->img, l->w, l->bias, l->cls, l->pos, l->x, TP_F16, l->B, l->H, l->W, l->P,
                                       l->C, 1, way, (tp_stream)l->s);
    int rc = tpk_im2col(l->img, l->cols, TP_F16, l->B, l->H, l->W, l->P, (tp_stream)l->s);
    if (!rc) rc = tp_gemm_run(l->gemm, l->plan, l->cols, l->w, l->bias, l->pe, NULL, NULL, (tp_stream)l->s);
    if (!rc) rc = tpk_embed_tokens(l->pe, l->cls, l->pos, l->x, TP_F16, l->B, l->Np, l->C, 1, (tp_stream)l->s);
    return rc;
}

static void *upload_f16(const float *h, size_t n) {
    uint16_t *t = malloc(n * 2);
    void *d = NULL;
    if (!t) exit(2);
    tp_convert_from_f32(TP_F16, h, t, n, 1.0f);
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, t, n * 2, cudaMemcpyHostToDevice));
    free(t);
    return d;
}

static float *normal(size_t n, uint64_t seed, double std) {
    tp_rng r;
    float *x = malloc(n * sizeof(float));
    if (!x) exit(2);
    tp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * tp_rng_normal(&r));
    return x;
}

int main(int argc, char **argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 50, B = argc > 2 ? atoi(argv[2]) : 64;
    if (runs < 1 || B < 1) {
        fprintf(stderr, "usage: patch_embed_lab [runs >= 1] [batch >= 1]\n");
        return 2;
    }
    lab l = {.B = B, .H = 224, .W = 224, .P = 16, .C = 768};
    l.Np = (l.H / l.P) * (l.W / l.P), l.T = l.Np + 1, l.K = 3 * l.P * l.P;
    const size_t n_img = (size_t)B * 3 * l.H * l.W, M = (size_t)B * l.Np, n_x = (size_t)B * l.T * l.C;
    float *img = normal(n_img, 1, 1.0), *w = normal((size_t)l.C * l.K, 2, 0.02), *bias = normal((size_t)l.C, 3, 0.1);
    float *pos = normal((size_t)l.T * l.C, 4, 0.02), *cls = normal((size_t)l.C, 5, 0.02);
    CK(cudaMalloc((void **)&l.img, n_img * sizeof(float)));
    CK(cudaMemcpy(l.img, img, n_img * sizeof(float), cudaMemcpyHostToDevice));
    l.w = upload_f16(w, (size_t)l.C * l.K), l.bias = upload_f16(bias, (size_t)l.C);
    l.pos = upload_f16(pos, (size_t)l.T * l.C), l.cls = upload_f16(cls, (size_t)l.C);
    CK(cudaMalloc(&l.cols, M * l.K * 2));
    CK(cudaMalloc(&l.pe, M * l.C * 2));
    CK(cudaMalloc(&l.x, n_x * 2));
    CK(cudaStreamCreate(&l.s));
    tp_error err;
    tp_gemm_desc d = {(int64_t)M, l.C, l.K, TP_F16, TP_F16, 1, 0, 0, 0, 0, 0};
    if (tp_gemm_ctx_create(32u << 20, &l.gemm, &err) || tp_gemm_plan_create(l.gemm, &d, "patch_embed", &l.plan, &err)) {
        fprintf(stderr, "cuBLASLt: %s\n", err.msg);
        return 2;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("patch_embed_lab: %s; B %d, %dx%d fp32 image, P %d, C %d, class token, f16; M %zu N %d K %d; %d runs\n",
           prop.name, B, l.H, l.W, l.P, l.C, M, l.C, l.K, runs);

    uint16_t *ref = malloc(n_x * 2), *got = malloc(n_x * 2);
    float *t = malloc(sizeof(float) * (size_t)runs);
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * 2 * (size_t)runs);
    if (!ref || !got || !t || !ev) return 2;
    for (int i = 0; i < 2 * runs; i++) CK(cudaEventCreate(&ev[i]));
    const double flop = 2.0 * (double)M * l.C * l.K;
    int bad = 0;
    static const char *names[] = {"unfused: im2col + cuBLASLt GEMM + embed", "fused variant 0 (128 x 128)",
                                  "fused variant 1 (128 x 256)"};
    for (int way = -1; way <= 1; way++) {
        CK(cudaMemsetAsync(l.x, 0xFF, n_x * 2, l.s)); /* NaN in f16 */
        int rc = run_way(&l, way);
        if (rc) {
            fprintf(stderr, "%s: error %d\n", names[way + 1], rc);
            return 2;
        }
        CK(cudaStreamSynchronize(l.s));
        CK(cudaMemcpy(way < 0 ? ref : got, l.x, n_x * 2, cudaMemcpyDeviceToHost));
        size_t nonfinite = 0;
        double num = 0, den = 0;
        for (size_t i = 0; i < n_x; i++) {
            float a, r;
            tp_convert_to_f32(TP_F16, (way < 0 ? ref : got) + i, &a, 1, 1.0f);
            tp_convert_to_f32(TP_F16, ref + i, &r, 1, 1.0f);
            if (!isfinite(a)) nonfinite++;
            num += ((double)a - r) * ((double)a - r), den += (double)r * r;
        }
        const double rel = den > 0 ? sqrt(num / den) : 0.0;
        for (int i = 0; i < 10; i++) run_way(&l, way);
        for (int i = 0; i < runs; i++) {
            CK(cudaEventRecord(ev[2 * i], l.s));
            run_way(&l, way);
            CK(cudaEventRecord(ev[2 * i + 1], l.s));
        }
        CK(cudaStreamSynchronize(l.s));
        for (int i = 0; i < runs; i++) {
            CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
            t[i] *= 1000.0f;
        }
        qsort(t, (size_t)runs, sizeof(float), cmp_float);
        const float med = t[runs / 2];
        printf("%-42s median %8.1f us  min %8.1f  max %8.1f  %6.1f TFLOP/s  rel L2 vs unfused %.2e  non-finite %zu\n",
               names[way + 1], med, t[0], t[runs - 1], flop / (med * 1e-6) / 1e12, rel, nonfinite);
        bad |= nonfinite > 0 || rel > 2e-3;
    }
    return bad;
}
