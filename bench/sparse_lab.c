/* sparse_lab.c: 2:4 sparse GEMMs (cuSPARSELt, src/exec/cuda/vendor/sparse_cusparselt.h) against dense ones
 * (cuBLASLt, every heuristic candidate timed, the fastest kept, as the engines select) in one process on one GPU,
 * per shape: ViT-B/16's four linears at batch B (default 64: M = 197 B, rounded up to 8 for cuSPARSELt), and a
 * Llama-2-7B layer's (q/o 4096 x 4096, gate/up 11008 x 4096, down 4096 x 11008) at a 512-token prefill and an
 * 8-token step. F16 or BF16, bias in the epilogue. The weight is pruned to 2:4 along K on the host
 * (formats/sparsity.h), so both GEMMs compute the same product: their outputs' relative L2 difference is printed
 * (each rounds once from fp32 sums in its own order: ~1e-3 expected for F16).
 * Per way: 10 warmup runs, then `runs` (default 50) each between two CUDA events: median, min and max in us, the
 * median's TFLOP/s counted as the dense 2 M N K, and sparse's speedup over dense. With --json FILE also a JSON list.
 *
 * Build: cmake --build <build dir> --target sparse_lab. Run: ./sparse_lab [runs] [batch] [f16|bf16] [--json FILE].
 * Exit status: 0; 1 when the outputs disagree (rel L2 > 1e-2) or hold NaN; 2 on a CUDA, cuBLAS or cuSPARSELt error
 * or bad arguments. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_common.h"
#include "core/rng.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/vendor/sparse_cusparselt.h"
#include "formats/dtype.h"
#include "formats/sparsity.h"

typedef struct {
    const char *name;
    int M, N, K;
} shape;

static void *upload(tp_dtype dt, const float *h, size_t n) {
    void *raw = malloc(n * 2), *d = NULL;
    if (!raw) exit(2);
    tp_convert_from_f32(dt, h, raw, n, 1.0f);
    CK(cudaMalloc(&d, n * 2 + 256));
    CK(cudaMemcpy(d, raw, n * 2, cudaMemcpyHostToDevice));
    free(raw);
    return d;
}

static float *normal(size_t n, uint64_t seed, double std) {
    float *h = malloc(n * sizeof(float));
    tp_rng r;
    tp_rng_seed(&r, seed);
    if (!h) exit(2);
    for (size_t i = 0; i < n; i++) h[i] = (float)(std * tp_rng_normal(&r));
    return h;
}

/* way 0: cuBLASLt; 1: cuSPARSELt */
static int run_way(int way, tp_gemm_ctx *g, tp_gemm_plan *dp, tp_spgemm_ctx *sc, tp_spgemm *sp, const void *x,
                   const void *w, const void *b, void *y, cudaStream_t s) {
    return way ? tp_spgemm_run(sc, sp, x, b, NULL, y, s) : tp_gemm_run(g, dp, x, w, b, y, NULL, NULL, s);
}

int main(int argc, char **argv) {
    int runs = 50, B = 64;
    const char *ty = "f16", *json = NULL;
    for (int i = 1, pos = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else if (pos == 0) runs = atoi(argv[i]), pos++;
        else if (pos == 1) B = atoi(argv[i]), pos++;
        else ty = argv[i];
    }
    const tp_dtype dt = strcmp(ty, "bf16") == 0 ? TP_BF16 : TP_F16;
    if (runs < 1 || B < 1 || (strcmp(ty, "bf16") != 0 && strcmp(ty, "f16") != 0)) {
        fprintf(stderr, "usage: sparse_lab [runs >= 1] [batch >= 1] [f16|bf16] [--json FILE]\n");
        return 2;
    }
    char msg[1024];
    if (!tp_spgemm_available(msg, sizeof msg)) {
        fprintf(stderr, "sparse_lab: %s\n", msg);
        return 2;
    }
    const int Mv = (197 * B + 7) / 8 * 8;
    const shape shapes[] = {{"vit qkv", Mv, 2304, 768},          {"vit proj", Mv, 768, 768},
                            {"vit fc1", Mv, 3072, 768},          {"vit fc2", Mv, 768, 3072},
                            {"llama7b q (pp512)", 512, 4096, 4096}, {"llama7b gate (pp512)", 512, 11008, 4096},
                            {"llama7b down (pp512)", 512, 4096, 11008}, {"llama7b q (8 tokens)", 8, 4096, 4096},
                            {"llama7b down (8 tokens)", 8, 4096, 11008}};
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("sparse_lab: %s; %s; %s, bias epilogue, %d runs; cuBLASLt %zu (best of its candidates)\n", prop.name, msg,
           tp_dtype_info(dt)->name, runs, tp_gemm_lib_version());
    printf("| shape | M | N | K | dense us (min-max) | sparse us (min-max) | dense TFLOP/s | sparse speedup | rel L2 |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (json && !jf) {
        fprintf(stderr, "sparse_lab: cannot write %s\n", json);
        return 2;
    }
    if (jf) fprintf(jf, "{\"gpu\": \"%s\", \"dtype\": \"%s\", \"runs\": %d, \"shapes\": [", prop.name,
                    tp_dtype_info(dt)->name, runs);
    tp_error err;
    tp_gemm_ctx *g = NULL;
    tp_spgemm_ctx *sc = NULL;
    if (tp_gemm_ctx_create(32u << 20, &g, &err) || tp_spgemm_ctx_create(&sc, &err)) {
        fprintf(stderr, "sparse_lab: %s\n", err.msg);
        return 2;
    }
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    float *t = malloc(sizeof(float) * (size_t)runs);
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * 2 * (size_t)runs);
    if (!t || !ev) return 2;
    for (int i = 0; i < 2 * runs; i++) CK(cudaEventCreate(&ev[i]));
    int bad = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *sh = &shapes[si];
        float *hx = normal((size_t)sh->M * sh->K, 10 + si, 1.0), *hw = normal((size_t)sh->N * sh->K, 20 + si, 0.03);
        float *hb = normal((size_t)sh->N, 30 + si, 0.5);
        tp_sparse_prune(hw, sh->N, sh->K);
        void *x = upload(dt, hx, (size_t)sh->M * sh->K), *w = upload(dt, hw, (size_t)sh->N * sh->K);
        void *b = upload(dt, hb, (size_t)sh->N), *yd = NULL, *ys = NULL;
        CK(cudaMalloc(&yd, (size_t)sh->M * sh->N * 2));
        CK(cudaMalloc(&ys, (size_t)sh->M * sh->N * 2));
        tp_gemm_desc d = {sh->M, sh->N, sh->K, dt, dt, 1, 0, 0, 0, 0, 0};
        tp_gemm_plan *dp = NULL;
        tp_spgemm *sp = NULL;
        tp_spgemm_desc sd = {.M = sh->M, .N = sh->N, .K = sh->K, .dt = dt, .has_bias = 1};
        if (tp_gemm_plan_create(g, &d, sh->name, &dp, &err) ||
            tp_spgemm_create(sc, &sd, w, x, b, NULL, ys, s, sh->name, &sp, &err)) {
            fprintf(stderr, "sparse_lab: %s\n", err.msg);
            return 2;
        }
        /* cuBLASLt at its best: every candidate timed, the fastest kept */
        float best = INFINITY;
        int kbest = 0;
        for (int k = 0; k < tp_gemm_plan_candidates(dp); k++) {
            tp_gemm_plan_select(dp, k);
            if (run_way(0, g, dp, sc, sp, x, w, b, yd, s)) continue;
            CK(cudaEventRecord(ev[0], s));
            for (int r = 0; r < 10; r++) run_way(0, g, dp, sc, sp, x, w, b, yd, s);
            CK(cudaEventRecord(ev[1], s));
            CK(cudaEventSynchronize(ev[1]));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
            if (ms < best) best = ms, kbest = k;
        }
        tp_gemm_plan_select(dp, kbest);
        float med[2], lo[2], hi[2];
        for (int way = 0; way < 2; way++) {
            void *y = way ? ys : yd;
            CK(cudaMemsetAsync(y, 0xFF, (size_t)sh->M * sh->N * 2, s)); /* poisoned: the run must write it all */
            for (int r = 0; r < 10; r++)
                if (run_way(way, g, dp, sc, sp, x, w, b, y, s)) {
                    fprintf(stderr, "sparse_lab: %s: way %d failed\n", sh->name, way);
                    return 2;
                }
            for (int r = 0; r < runs; r++) {
                CK(cudaEventRecord(ev[2 * r], s));
                run_way(way, g, dp, sc, sp, x, w, b, y, s);
                CK(cudaEventRecord(ev[2 * r + 1], s));
            }
            med[way] = lab_event_median(s, ev, runs, t, &lo[way], &hi[way]);
        }
        const size_t n = (size_t)sh->M * sh->N;
        void *hd = malloc(n * 2), *hs = malloc(n * 2);
        float *fd = malloc(n * sizeof(float)), *fs = malloc(n * sizeof(float));
        if (!hd || !hs || !fd || !fs) return 2;
        CK(cudaMemcpy(hd, yd, n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hs, ys, n * 2, cudaMemcpyDeviceToHost));
        tp_convert_to_f32(dt, hd, fd, n, 1.0f);
        tp_convert_to_f32(dt, hs, fs, n, 1.0f);
        double num = 0, den = 0;
        int nonfinite = 0;
        for (size_t i = 0; i < n; i++) {
            nonfinite += !isfinite(fs[i]) || !isfinite(fd[i]);
            num += ((double)fs[i] - fd[i]) * ((double)fs[i] - fd[i]);
            den += (double)fd[i] * fd[i];
        }
        const double rel = den > 0 ? sqrt(num / den) : 0;
        bad |= nonfinite > 0 || !(rel <= 1e-2);
        const double tflops = 2.0 * sh->M * sh->N * sh->K / (med[0] * 1e-6) * 1e-12;
        printf("| %s | %d | %d | %d | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.1f | %.2fx | %.1e%s |\n", sh->name, sh->M,
               sh->N, sh->K, med[0], lo[0], hi[0], med[1], lo[1], hi[1], tflops, med[0] / med[1], rel,
               nonfinite ? " NON-FINITE" : "");
        if (jf)
            fprintf(jf, "%s{\"shape\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"dense_us\": %.3f, \"sparse_us\": %.3f, "
                        "\"dense_min_us\": %.3f, \"sparse_min_us\": %.3f, \"speedup\": %.4f, \"rel_l2\": %.3e, "
                        "\"compressed_bytes\": %zu}", si ? ", " : "", sh->name, sh->M, sh->N, sh->K, med[0], med[1], lo[0],
                    lo[1], med[0] / med[1], rel, tp_spgemm_weight_bytes(sp));
        fflush(stdout);
        free(hd), free(hs), free(fd), free(fs), free(hx), free(hw), free(hb);
        tp_spgemm_destroy(sp);
        tp_gemm_plan_destroy(dp);
        cudaFree(x), cudaFree(w), cudaFree(b), cudaFree(yd), cudaFree(ys);
    }
    if (jf) fprintf(jf, "]}\n"), fclose(jf);
    printf("(dense: cuBLASLt, the fastest of its heuristic candidates; sparse: cuSPARSELt with its searched "
           "algorithm; speedup: dense median / sparse median)\n");
    return bad;
}
