/* attention_wgmma_lab.c: tprof's two fused attention kernels side by side at ViT shapes, in one process on one
 * GPU: the FlashAttention-2 style kernel on mma.sync (tpk_flash_attention, attention.h) and every variant of the
 * Hopper kernel on wgmma (tpk_flash_attention_wgmma_variant, attention_wgmma.h; variant 0 is the default). cuDNN's SDPA at the same shapes: bench/sdpa_lab.c, run in
 * the same call by scripts/gpu_session.sh (step `attention`).
 *
 * Shapes: B 64, H 12, D 64 (ViT-B/16 at batch 64) with T 197 (224 / 16 with a class token), 196, 256, 257 and 577
 * (ViT at 384 with a class token), F16 and BF16 in and out, scale D^-0.5, qkv ~ N(0, 1). Per kernel and shape: one
 * run on a NaN-poisoned output (must leave no NaN), the relative L2 difference of the wgmma output to the mma.sync
 * output (both approximate the same fp32 attention: expected ~1e-3 for F16), 10 warmup runs, then `runs` runs (default
 * 100) each between two CUDA events, enqueued back to back (the warmup fills the queue, so host launch gaps are not
 * timed). Prints median, min and max in us and the median's TFLOP/s (4 B H T^2 D FLOP: Q K^T and P V, no padding
 * counted) and its fraction of the measured FP16 dense GEMM peak passed as argv[2] (TFLOP/s; default 0 = not shown).
 *
 * Then (fp8_case) FP8 attention against FP16 attention at B 64, H 12, T 197, 256, 577 (comment there).
 *
 * Build: cmake --build <build dir> --target attention_wgmma_lab.
 * Run: ./attention_wgmma_lab [runs] [peak_tflops] [fp16|fp8|all (default)].
 * Exit status: 0; 1 when an output has NaN/Inf or the kernels disagree (rel L2 > 1e-2); 2 on a CUDA error. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_common.h"
#include "lab_variants.h"
#include "core/rng.h"
#include "exec/cuda/attention/attention.h"
#include "exec/cuda/attention/attention_fp8.h"
#include "exec/cuda/attention/attention_wgmma.h"
#include "formats/dtype.h"


typedef int (*attn_fn)(const void *, tp_dtype, void *, tp_dtype, const float *, int, int, int, int, float, tp_stream);

#define WG_WRAP(v)                                                                                                  \
    static int wg_v##v(const void *q, tp_dtype i, void *o, tp_dtype od, const float *s, int B, int T, int H, int D,  \
                       float sc, tp_stream st) {                                                                   \
        return tpk_flash_attention_wgmma_variant(q, i, o, od, s, B, T, H, D, sc, v, st);                         \
    }
WG_WRAP(0)
WG_WRAP(1)
WG_WRAP(2)
WG_WRAP(3)
WG_WRAP(4)
WG_WRAP(5)
WG_WRAP(6)
WG_WRAP(7)
WG_WRAP(8)
static const attn_fn WG_FN[] = {wg_v0, wg_v1, wg_v2, wg_v3, wg_v4, wg_v5, wg_v6, wg_v7, wg_v8};

/* times launch(ctx) (10 warmup calls, then `runs` calls each between two events, enqueued back to back); returns
 * the median in us and fills *lo, *hi */
static double time_launch(int (*launch)(const void *, cudaStream_t), const void *ctx, int runs, cudaStream_t st,
                          double *lo, double *hi) {
    cudaEvent_t *ev = malloc(2 * (size_t)runs * sizeof *ev);
    float *us = malloc((size_t)runs * sizeof *us);
    if (!ev || !us) exit(2);
    for (int i = 0; i < 2 * runs; i++) CK(cudaEventCreate(&ev[i]));
    for (int i = 0; i < 10; i++) CK((cudaError_t)launch(ctx, st));
    for (int i = 0; i < runs; i++) {
        CK(cudaEventRecord(ev[2 * i], st));
        CK((cudaError_t)launch(ctx, st));
        CK(cudaEventRecord(ev[2 * i + 1], st));
    }
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < runs; i++) {
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        us[i] = 1000.0f * ms;
    }
    qsort(us, (size_t)runs, sizeof *us, cmp_float);
    const double med = runs % 2 ? us[runs / 2] : 0.5 * (us[runs / 2 - 1] + us[runs / 2]);
    *lo = us[0];
    *hi = us[runs - 1];
    for (int i = 0; i < 2 * runs; i++) cudaEventDestroy(ev[i]);
    free(ev);
    free(us);
    return med;
}

typedef struct {
    attn_fn fn;
    const void *qkv;
    tp_dtype dt;
    void *out;
    int B, T, H, D;
    float scale;
} fn_call;

static int fn_launch(const void *ctx, cudaStream_t st) {
    const fn_call *c = ctx;
    return c->fn(c->qkv, c->dt, c->out, c->dt, NULL, c->B, c->T, c->H, c->D, c->scale, st);
}

static double time_fn(attn_fn fn, const void *qkv, tp_dtype dt, void *out, int B, int T, int H, int D, float scale,
                      int runs, cudaStream_t st, double *lo, double *hi) {
    const fn_call c = {fn, qkv, dt, out, B, T, H, D, scale};
    return time_launch(fn_launch, &c, runs, st, lo, hi);
}

/* one run into a poisoned buffer, downloaded as fp32; returns the number of non-finite outputs */
static size_t run_once(attn_fn fn, const void *qkv, tp_dtype dt, void *d_out, float *h_out, void *raw, size_t n_out,
                       int B, int T, int H, int D, float scale, cudaStream_t st) {
    const size_t es = tp_dtype_info(dt)->bytes;
    CK(cudaMemsetAsync(d_out, 0xFF, n_out * es, st));
    CK((cudaError_t)fn(qkv, dt, d_out, dt, NULL, B, T, H, D, scale, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(raw, d_out, n_out * es, cudaMemcpyDeviceToHost));
    tp_convert_to_f32(dt, raw, h_out, n_out, 1.0f);
    size_t bad = 0;
    for (size_t i = 0; i < n_out; i++) bad += !isfinite(h_out[i]);
    return bad;
}

static int lab_case(int B, int T, int H, int D, tp_dtype dt, int runs, double peak, cudaStream_t st) {
    const char *name = tp_dtype_info(dt)->name;
    const float scale = 1.0f / sqrtf((float)D);
    const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D, es = tp_dtype_info(dt)->bytes;
    float *x = malloc(n_in * sizeof(float)), *o_fa = malloc(n_out * sizeof(float)), *o_wg = malloc(n_out * sizeof(float));
    void *raw = malloc(n_in * es);
    if (!x || !raw || !o_fa || !o_wg) exit(2);
    tp_rng r;
    tp_rng_seed(&r, 4321 + (uint64_t)T);
    for (size_t i = 0; i < n_in; i++) x[i] = (float)tp_rng_normal(&r);
    tp_convert_from_f32(dt, x, raw, n_in, 1.0f);
    void *d_qkv = NULL, *d_out = NULL;
    CK(cudaMalloc(&d_qkv, n_in * es));
    CK(cudaMalloc(&d_out, n_out * es));
    CK(cudaMemcpy(d_qkv, raw, n_in * es, cudaMemcpyHostToDevice));
    const double flop = 4.0 * B * H * (double)T * T * D;
    int fails = 0;

    const size_t bad_fa = run_once(tpk_flash_attention, d_qkv, dt, d_out, o_fa, raw, n_out, B, T, H, D, scale, st);
    double lo, hi;
    const double t_fa = time_fn(tpk_flash_attention, d_qkv, dt, d_out, B, T, H, D, scale, runs, st, &lo, &hi);
    printf("B=%d T=%3d H=%d D=%d %-4s | mma.sync FA2 | median %7.2f us  min %7.2f  max %7.2f | %6.1f TFLOP/s",
           B, T, H, D, name, t_fa, lo, hi, flop / (t_fa * 1e-6) / 1e12);
    if (peak > 0) printf(" (%4.1f%% of %.0f)", 100.0 * flop / (t_fa * 1e-6) / 1e12 / peak, peak);
    printf("%s\n", bad_fa ? " | NaN/Inf IN OUTPUT" : "");
    fails += bad_fa != 0;

    for (int v = 0; v < (int)(sizeof WG_FN / sizeof WG_FN[0]); v++) {
        if (WG_FN[v](d_qkv, dt, d_out, dt, NULL, B, T, H, D, scale, st) != 0) {
            printf("B=%d T=%3d H=%d D=%d %-4s | wgmma v%d     | not supported on this device/shape\n", B, T, H, D,
                   name, v);
            continue;
        }
        const size_t bad = run_once(WG_FN[v], d_qkv, dt, d_out, o_wg, raw, n_out, B, T, H, D, scale, st);
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < n_out; i++) {
            const double d = (double)o_wg[i] - o_fa[i];
            num += d * d;
            den += (double)o_fa[i] * o_fa[i];
        }
        const double rel = sqrt(num / (den > 0 ? den : 1.0));
        const double t = time_fn(WG_FN[v], d_qkv, dt, d_out, B, T, H, D, scale, runs, st, &lo, &hi);
        printf("B=%d T=%3d H=%d D=%d %-4s | wgmma v%d     | median %7.2f us  min %7.2f  max %7.2f | %6.1f TFLOP/s",
               B, T, H, D, name, v, t, lo, hi, flop / (t * 1e-6) / 1e12);
        if (peak > 0) printf(" (%4.1f%% of %.0f)", 100.0 * flop / (t * 1e-6) / 1e12 / peak, peak);
        printf(" | %.2fx FA2 | rel L2 vs FA2 %.2e%s\n", t_fa / t, rel, bad ? " | NaN/Inf IN OUTPUT" : "");
        fails += bad != 0 || !(rel <= 1e-2);
    }
    fflush(stdout);
    free(x);
    free(raw);
    free(o_fa);
    free(o_wg);
    cudaFree(d_qkv);
    cudaFree(d_out);
    return fails;
}

/* ================================================================================================================
 * FP8 attention against FP16 attention at one shape (B, T, H, D = 64), all in one process:
 *   fp16 wgmma  f16 in -> f16 out, and f16 in -> e4m3 out (what an FP8 engine with FP16 attention runs);
 *   fp8 mma     tpk_flash_attention_fp8: f16 in, quantized on load, mma.sync (fp16 HMMA on sm_90);
 *   fp8 wgmma   tpk_flash_attention_wgmma_fp8, every variant: E4M3 in (the QKV GEMM's output), f16 or e4m3 out.
 * Per kernel: median/min/max us, TFLOP/s, and the bytes it moves (inputs read once, outputs written once) as
 * GB/s; the DRAM floor of each configuration is the same number of bytes through cudaMemcpyAsync (device to
 * device, read + write = in + out bytes), timed the same way. Accuracy: cosine of each output against the fp16
 * wgmma output. qkv ~ N(0, 1), E4M3 per-tensor scales amax / 448 of the Q, K, V parts.
 * ============================================================================================================== */

typedef struct {
    const void *qkv;
    const float *qkv_scale, *out_scale;
    void *out;
    tp_dtype in_dt, out_dt;
    int B, T, H, D, kind, variant; /* kind: 0 fp16 wgmma, 1 fp8 mma.sync, 2 fp8 wgmma, 3 memcpy of `bytes` */
    float scale;
    size_t bytes;
} f8_call;

static int f8_launch(const f8_call *c, cudaStream_t st) {
    switch (c->kind) {
    case 0: return tpk_flash_attention_wgmma(c->qkv, c->in_dt, c->out, c->out_dt, c->out_scale, c->B, c->T, c->H,
                                             c->D, c->scale, st);
    case 1: return tpk_flash_attention_fp8(c->qkv, c->in_dt, c->qkv_scale, c->out, c->out_dt, c->out_scale, c->B,
                                           c->T, c->H, c->D, c->scale, st);
    case 2: return tpk_flash_attention_wgmma_fp8_variant(c->qkv, c->qkv_scale, c->out, c->out_dt, c->out_scale, c->B,
                                                         c->T, c->H, c->D, c->scale, c->variant, st);
    default: return (int)cudaMemcpyAsync(c->out, c->qkv, c->bytes, cudaMemcpyDeviceToDevice, st);
    }
}

static int f8_launch_ctx(const void *c, cudaStream_t st) { return f8_launch((const f8_call *)c, st); }

static double f8_time(const f8_call *c, int runs, cudaStream_t st, double *lo, double *hi) {
    return time_launch(f8_launch_ctx, c, runs, st, lo, hi);
}

static double cosine(const float *a, const float *b, size_t n) {
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (size_t i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
}

static int fp8_case(int B, int T, int H, int runs, double peak, cudaStream_t st) {
    const int D = 64;
    const float scale = 0.125f;
    const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D, C = (size_t)H * D;
    float *x = malloc(n_in * sizeof(float)), *ref = malloc(n_out * sizeof(float)), *got = malloc(n_out * sizeof(float));
    unsigned char *raw = malloc(n_in * 2), *codes = malloc(n_in);
    if (!x || !ref || !got || !raw || !codes) exit(2);
    tp_rng r;
    tp_rng_seed(&r, 8765 + (uint64_t)T);
    for (size_t i = 0; i < n_in; i++) x[i] = (float)tp_rng_normal(&r);
    tp_convert_from_f32(TP_F16, x, raw, n_in, 1.0f);
    tp_convert_to_f32(TP_F16, raw, x, n_in, 1.0f);
    float s[3] = {0, 0, 0};
    for (size_t i = 0; i < n_in; i++) s[(i / C) % 3] = fmaxf(s[(i / C) % 3], fabsf(x[i]));
    for (int w = 0; w < 3; w++) s[w] /= 448.0f;
    for (size_t i = 0; i < n_in; i++) codes[i] = tp_f32_to_e4m3(x[i] / s[(i / C) % 3]);
    void *d_x16 = NULL, *d_x8 = NULL, *d_out = NULL;
    float *d_sc = NULL; /* s_q, s_k, s_v, out_scale */
    CK(cudaMalloc(&d_x16, n_in * 2));
    CK(cudaMalloc(&d_x8, n_in));
    CK(cudaMalloc(&d_out, n_in * 2));
    CK(cudaMalloc((void **)&d_sc, 4 * sizeof(float)));
    CK(cudaMemcpy(d_x16, raw, n_in * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_x8, codes, n_in, cudaMemcpyHostToDevice));
    const double flop = 4.0 * B * H * (double)T * T * D;
    int fails = 0;
    /* the fp16 reference output, and the E4M3 output scale from it */
    f8_call base = {d_x16, d_sc, d_sc + 3, d_out, TP_F16, TP_F16, B, T, H, D, 0, 0, scale, 0};
    CK((cudaError_t)f8_launch(&base, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(raw, d_out, n_out * 2, cudaMemcpyDeviceToHost));
    tp_convert_to_f32(TP_F16, raw, ref, n_out, 1.0f);
    float sc4[4] = {s[0], s[1], s[2], 0.0f};
    for (size_t i = 0; i < n_out; i++) sc4[3] = fmaxf(sc4[3], fabsf(ref[i]));
    sc4[3] /= 448.0f;
    CK(cudaMemcpy(d_sc, sc4, sizeof sc4, cudaMemcpyHostToDevice));

    f8_call calls[16];
    const char *names[16];
    int nc = 0;
    calls[nc] = base, names[nc++] = "fp16 wgmma   f16 -> f16 ";
    calls[nc] = base, calls[nc].out_dt = TP_E4M3, names[nc++] = "fp16 wgmma   f16 -> e4m3";
    calls[nc] = base, calls[nc].kind = 1, names[nc++] = "fp8 mma.sync f16 -> f16 ";
    calls[nc] = base, calls[nc].kind = 1, calls[nc].out_dt = TP_E4M3, names[nc++] = "fp8 mma.sync f16 -> e4m3";
    static const char *W8N[2][4] = {{"fp8 wgmma v0 e4m3 -> f16 ", "fp8 wgmma v1 e4m3 -> f16 ", "fp8 wgmma v2 e4m3 -> f16 ",
                                     "fp8 wgmma v3 e4m3 -> f16 "},
                                    {"fp8 wgmma v0 e4m3 -> e4m3", "fp8 wgmma v1 e4m3 -> e4m3", "fp8 wgmma v2 e4m3 -> e4m3",
                                     "fp8 wgmma v3 e4m3 -> e4m3"}};
    for (int o = 0; o < 2; o++)
        for (int v = 0; v < 4; v++) {
            calls[nc] = base, calls[nc].kind = 2, calls[nc].qkv = d_x8, calls[nc].in_dt = TP_E4M3;
            calls[nc].out_dt = o ? TP_E4M3 : TP_F16, calls[nc].variant = v, names[nc++] = W8N[o][v];
        }
    double t_ref = 0.0;
    for (int c = 0; c < nc; c++) {
        const size_t ib = tp_dtype_info(calls[c].in_dt)->bytes, ob = tp_dtype_info(calls[c].out_dt)->bytes;
        const double bytes = (double)n_in * ib + (double)n_out * ob;
        CK(cudaMemsetAsync(d_out, 0xFF, n_out * ob, st));
        if (f8_launch(&calls[c], st) != 0) {
            printf("B=%d T=%3d H=%d D=%d | %s | not supported on this device/shape\n", B, T, H, D, names[c]);
            cudaGetLastError();
            continue;
        }
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(raw, d_out, n_out * ob, cudaMemcpyDeviceToHost));
        tp_convert_to_f32(calls[c].out_dt, raw, got, n_out, calls[c].out_dt == TP_E4M3 ? sc4[3] : 1.0f);
        size_t bad = 0;
        for (size_t i = 0; i < n_out; i++) bad += !isfinite(got[i]);
        const double cs = cosine(got, ref, n_out);
        double lo, hi;
        const double t = f8_time(&calls[c], runs, st, &lo, &hi);
        if (c == 0) t_ref = t;
        f8_call mc = {d_x16, NULL, NULL, d_out, TP_F16, TP_F16, B, T, H, D, 3, 0, 0.0f, (size_t)(bytes / 2)};
        double mlo, mhi;
        const double tm = f8_time(&mc, runs, st, &mlo, &mhi);
        printf("B=%d T=%3d H=%d D=%d | %s | median %7.2f us  min %7.2f  max %7.2f | %6.1f TFLOP/s", B, T, H, D,
               names[c], t, lo, hi, flop / (t * 1e-6) / 1e12);
        if (peak > 0) printf(" (%4.1f%% of %.0f)", 100.0 * flop / (t * 1e-6) / 1e12 / peak, peak);
        printf(" | %5.1f MB, %6.0f GB/s, memcpy of the same bytes %6.2f us | %.2fx fp16 wgmma f16->f16 | cosine vs "
               "fp16 %.5f%s\n",
               bytes / 1e6, bytes / (t * 1e-6) / 1e9, tm, t_ref / t, cs,
               bad ? " | NaN/Inf IN OUTPUT" : "");
        fails += bad != 0 || !(cs >= 0.99);
    }
    fflush(stdout);
    free(x), free(ref), free(got), free(raw), free(codes);
    cudaFree(d_x16), cudaFree(d_x8), cudaFree(d_out), cudaFree(d_sc);
    return fails;
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 100;
    if (runs < 1) runs = 100;
    const double peak = argc > 2 ? atof(argv[2]) : 0.0;
    struct cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("attention_wgmma_lab: %s (sm_%d%d, %d SMs), CUDA driver %d, runtime %d; %d timed runs per kernel and shape\n",
           p.name, p.major, p.minor, p.multiProcessorCount, drv, rt, runs);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    static const tp_dtype dts[] = {TP_F16, TP_BF16};
    static const int Ts[] = {197, 196, 256, 257, 577};
    const char *mode = argc > 3 ? argv[3] : "all";
    int fails = 0;
    if (strcmp(mode, "fp8") != 0)
        for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
            for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
                fails += lab_case(64, Ts[ti], 12, 64, dts[di], runs, peak, st);
    if (strcmp(mode, "fp16") != 0) {
        static const int T8[] = {197, 256, 577};
        for (size_t ti = 0; ti < sizeof T8 / sizeof T8[0]; ti++) fails += fp8_case(64, T8[ti], 12, runs, peak, st);
    }
    cudaStreamDestroy(st);
    return fails ? 1 : 0;
}
