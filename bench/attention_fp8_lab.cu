/* attention_fp8_lab.cu: timing lab for the FP8 fused attention (tpk_flash_attention_fp8, attention_fp8.cu) against
 * the FP16 one (tpk_flash_attention, attention.cu), at ViT shapes: B 64, H 12, D 64, T 197 and 256.
 *
 * For each shape it fills qkv (fp16) with N(0, sigma^2) values (sigma 1 and 0.5: logit standard deviations 1 and
 * 0.25), computes the per-tensor scales amax / 448 on the host, runs every version once and checks it against the
 * fp16 kernel (max abs diff, relative L2, cosine: the FP8 format's own error, see test_gpu_attention_fp8.c), then
 * times each: 10 warmup launches, then 50 launches, each between two CUDA events, all enqueued back to back (so
 * launch gaps are not timed); prints median, min and max in us and the median's TFLOP/s (4 B H T^2 D FLOP).
 * Versions: fp16 = tpk_flash_attention (its default variant), fp8 v0 = tpk_flash_attention_fp8 (default),
 * v1..v4 = tpk_flash_attention_fp8_variant (1, 2: E4M3 mma.sync, a head / 128 rows per CTA; 3, 4: fp16 mma.sync on
 * the E4M3 values), each with an fp16 output; and fp8 v0 with an E4M3 output (what the FP8 engine would use).
 *
 * Build: the CMake target `attention_fp8_lab` (cmake --build build-x --target attention_fp8_lab), or by hand from
 * the repository root:
 *   nvcc -O3 -arch=sm_90 -Iinclude -Isrc bench/attention_fp8_lab.cu src/exec/cuda/attention/attention.cu \
 *        src/exec/cuda/attention/attention_fp8.cu -o attention_fp8_lab
 * Run: ./attention_fp8_lab [runs]   (exit 1 if a check fails) */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_common.h"
#include "lab_variants.h"
#include "exec/cuda/attention/attention.h"
#include "exec/cuda/attention/attention_fp8.h"


/* host decode of one element */
static float bits_f16(unsigned short h) {
    unsigned s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
static float bits_e4m3(unsigned char q) {
    unsigned s = q >> 7, e = (q >> 3) & 15, m = q & 7;
    float v = (e == 15 && m == 7) ? NAN : e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(m | 8), (int)e - 10);
    return s ? -v : v;
}
static float *download(tp_dtype dt, const void *d, size_t n, float scale) {
    const size_t es = dt == TP_E4M3 ? 1 : 2;
    unsigned char *raw = (unsigned char *)malloc(n * es);
    float *f = (float *)malloc(n * sizeof(float));
    CK(cudaMemcpy(raw, d, n * es, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        f[i] = dt == TP_F16 ? bits_f16(((unsigned short *)raw)[i]) : bits_e4m3(raw[i]) * scale;
    free(raw);
    return f;
}

/* splitmix64 + Box-Muller */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) * 0x1p-53;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

typedef struct {
    const char *name;
    int fp8, variant;
    tp_dtype out;
} version_t;

static const version_t VERSIONS[] = {
    {"fp16 (tpk_flash_attention)", 0, 0, TP_F16},
    {"fp8 v0 default", 1, 0, TP_F16},
    {"fp8 v1 e4m3-mma head/CTA", 1, 1, TP_F16},
    {"fp8 v2 e4m3-mma 128 rows/CTA", 1, 2, TP_F16},
    {"fp8 v3 f16-mma head/CTA", 1, 3, TP_F16},
    {"fp8 v4 f16-mma 128 rows/CTA", 1, 4, TP_F16},
    {"fp8 v0 default, e4m3 out", 1, 0, TP_E4M3},
};
#define NV ((int)(sizeof VERSIONS / sizeof VERSIONS[0]))

static int launch(const version_t *v, const void *qkv, const float *s, void *out, const float *os, int B, int T, int H,
                  int D, float scale) {
    if (!v->fp8) return tpk_flash_attention(qkv, TP_F16, out, v->out, os, B, T, H, D, scale, 0);
    return tpk_flash_attention_fp8_variant(qkv, TP_F16, s, out, v->out, os, B, T, H, D, scale, v->variant, 0);
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 50;
    int dev = 0;
    cudaDeviceProp prop;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("attention_fp8_lab: %s (sm_%d%d, %d SMs), %d timed runs after 10 warmup\n", prop.name, prop.major,
           prop.minor, prop.multiProcessorCount, runs);
    static const int shapes[][4] = {{64, 197, 12, 64}, {64, 256, 12, 64}}; /* B T H D */
    static const double sigmas[] = {1.0, 0.5};
    int fails = 0;
    for (int si = 0; si < 2; si++) {
        const int B = shapes[si][0], T = shapes[si][1], H = shapes[si][2], D = shapes[si][3];
        const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D, C = (size_t)H * D;
        const float scale = 1.0f / sqrtf((float)D);
        const double flop = 4.0 * B * H * (double)T * T * D;
        void *d_qkv, *d_out;
        float *d_s, *d_os;
        CK(cudaMalloc(&d_qkv, n_in * 2));
        CK(cudaMalloc(&d_out, n_out * 2));
        CK(cudaMalloc(&d_s, 3 * sizeof(float)));
        CK(cudaMalloc(&d_os, sizeof(float)));
        __half *h = (__half *)malloc(n_in * 2);
        for (int gi = 0; gi < 2; gi++) {
            const double sigma = sigmas[gi];
            float am[3] = {0, 0, 0};
            for (size_t i = 0; i < n_in; i++) {
                h[i] = __float2half((float)(sigma * nrand()));
                const int w = (int)((i / C) % 3);
                am[w] = fmaxf(am[w], fabsf(__half2float(h[i])));
            }
            const float s[3] = {am[0] / 448.0f, am[1] / 448.0f, am[2] / 448.0f};
            CK(cudaMemcpy(d_qkv, h, n_in * 2, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d_s, s, sizeof s, cudaMemcpyHostToDevice));
            printf("\nB %d, T %d, H %d, D %d, qkv ~ N(0, %.2g^2) fp16 (logit std %.2f), %.3f GFLOP, scales %.4g %.4g "
                   "%.4g\n",
                   B, T, H, D, sigma, sigma * sigma, flop * 1e-9, s[0], s[1], s[2]);
            /* reference: the fp16 kernel */
            CK(launch(&VERSIONS[0], d_qkv, d_s, d_out, NULL, B, T, H, D, scale));
            CK(cudaDeviceSynchronize());
            float *ref = download(TP_F16, d_out, n_out, 1.0f);
            float rmax = 0.0f;
            for (size_t i = 0; i < n_out; i++) rmax = fmaxf(rmax, fabsf(ref[i]));
            const float osc = rmax / 448.0f;
            CK(cudaMemcpy(d_os, &osc, sizeof osc, cudaMemcpyHostToDevice));
            printf("  %-30s %10s %10s %9s | %9s %9s %9s %8s\n", "version", "median us", "min us", "max us",
                   "TFLOP/s", "max|diff|", "rel L2", "cosine");
            for (int vi = 0; vi < NV; vi++) {
                const version_t *v = &VERSIONS[vi];
                CK(cudaMemset(d_out, 0xFF, n_out * 2));
                CK(launch(v, d_qkv, d_s, d_out, d_os, B, T, H, D, scale));
                CK(cudaDeviceSynchronize());
                float *got = download(v->out, d_out, n_out, osc);
                double num = 0, den = 0, gg = 0, dot = 0, mx = 0;
                size_t nan = 0;
                for (size_t i = 0; i < n_out; i++) {
                    if (!isfinite(got[i])) {
                        nan++;
                        continue;
                    }
                    const double d = (double)got[i] - ref[i];
                    num += d * d, den += (double)ref[i] * ref[i], gg += (double)got[i] * got[i];
                    dot += (double)got[i] * ref[i];
                    mx = fmax(mx, fabs(d));
                }
                const double rel = sqrt(num / den), cs = dot / sqrt(den * gg);
                /* fp16 vs itself is exact; FP8 vs fp16: the format's error, cosine >= 0.99 at these logit spreads */
                const int ok = nan == 0 && (vi == 0 ? rel == 0.0 : cs >= 0.99);
                if (!ok) fails++;
                free(got);
                cudaEvent_t ev[2 * 512];
                const int nr = runs < 512 ? runs : 512;
                for (int i = 0; i < 2 * nr; i++) CK(cudaEventCreate(&ev[i]));
                for (int i = 0; i < 10; i++) CK(launch(v, d_qkv, d_s, d_out, d_os, B, T, H, D, scale));
                for (int i = 0; i < nr; i++) {
                    CK(cudaEventRecord(ev[2 * i], 0));
                    CK(launch(v, d_qkv, d_s, d_out, d_os, B, T, H, D, scale));
                    CK(cudaEventRecord(ev[2 * i + 1], 0));
                }
                CK(cudaDeviceSynchronize());
                float t[512];
                for (int i = 0; i < nr; i++) {
                    CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
                    t[i] *= 1000.0f;
                }
                for (int i = 0; i < 2 * nr; i++) CK(cudaEventDestroy(ev[i]));
                qsort(t, nr, sizeof t[0], cmp_f);
                const float med = nr % 2 ? t[nr / 2] : 0.5f * (t[nr / 2 - 1] + t[nr / 2]);
                printf("  %-30s %10.2f %10.2f %9.2f | %9.1f %9.3g %9.3g %8.6f%s%s\n", v->name, med, t[0], t[nr - 1],
                       flop / (med * 1e-6) * 1e-12, mx, rel, cs, nan ? " NaN!" : "", ok ? "" : "  CHECK FAILED");
                fflush(stdout);
            }
            free(ref);
        }
        free(h);
        CK(cudaFree(d_qkv));
        CK(cudaFree(d_out));
        CK(cudaFree(d_s));
        CK(cudaFree(d_os));
    }
    printf("\n%s\n", fails ? "SOME CHECKS FAILED" : "all checks passed");
    return fails ? 1 : 0;
}
