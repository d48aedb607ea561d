/* test_gpu_decoder_ops.c: the decoder kernels (src/exec/cuda/kernels/decoder_ops.h) against their CPU references
 * (cpu_ops.h, "decoders"), on the GPU, at awkward shapes: batch 1 and 3; C in {200, 776, 4096} and 37 (odd: the
 * scalar paths); T in {1, 5, 37}; past in {0, 37, 1000} in a cache of L = 1043 positions; Llama's GQA (32 query
 * heads over 8 KV heads, D 128), Gemma's MQA (8 over 1, D 256), D 64; F32, F16 and BF16 storage.
 *
 * Method, as test_gpu_ops.c: random non-zero inputs rounded to the storage type on the host before the reference
 * runs (so only the kernel's own error is measured), output buffers poisoned with 0xFF bytes (NaN in every
 * activation type: an element never written fails), bit-exact checks for the ops that copy or do one fp32
 * product (token_embed, kv_append, last_token, argmax), relative L2 and max-abs bounds from the output format for
 * the others (tol_for). The position of a step (`past`) lives in device memory; the tests change it between runs
 * and between graph replays to show the kernels read it at run time. A decode step captured into one CUDA graph
 * (embedding -> RMSNorm -> RoPE -> KV append -> KV attention -> GLU -> argmax -> advance, the argmax feeding the
 * next replay's token) is replayed and compared byte for byte with the same step run eagerly.
 *
 * CUDA is initialized inside each test (checked fixture), never in the runner's parent process (test_gpu_main.c). */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/kernels/decoder_ops.h"
#include "formats/dtype.h"
#include "formats/qformat.h"
#include "ir/graph.h"

#define TP_GPU_MAX_TRACKED 4096
#define TP_GPU_POISON_ON_STREAM /* new device buffers are poisoned on g_stream (cudaMemsetAsync, then a sync) */
#include "gpu_check.h"
#include "close_check.h"

Suite *gpu_decoder_ops_suite(void);

static void setup(void) { gpu_setup(); }

static void teardown(void) {
    release_all();
    close_stream();
}

/* ---- buffers ------------------------------------------------------------------------------------------------ */

/* n elements of dt, `offset` elements into a poisoned allocation (offset 1 misaligns the base for vector paths) */
static void *dev_alloc_at(tp_dtype dt, size_t n, size_t offset) {
    return (char *)dev_bytes((n + offset) * esize(dt)) + offset * esize(dt);
}

static void *dev_upload_at(tp_dtype dt, const float *x, size_t n, size_t offset) {
    void *d = dev_alloc_at(dt, n, offset);
    upload_to(d, dt, x, n, 1.0f);
    return d;
}

/* x rounded in place to what dt holds */
static void round_to(tp_dtype dt, float *x, size_t n) {
    void *tmp = hmalloc(n * esize(dt));
    tp_convert_from_f32(dt, x, tmp, n, 1.0f);
    tp_convert_to_f32(dt, tmp, x, n, 1.0f);
}

/* A device int (the cache position), and setting it: on g_stream, then a sync, so both g_stream and the
 * non-blocking capture streams see the new value. */
static int *dev_past(int v) {
    int *d = dev_bytes(sizeof(int));
    CUDA_OK(cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize());
    return d;
}
static void set_past(int *d, int v) {
    CUDA_OK(cudaMemcpyAsync(d, &v, sizeof v, cudaMemcpyHostToDevice, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
}
static int get_past(const int *d) {
    int v = 0;
    CUDA_OK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

/* ---- comparisons -------------------------------------------------------------------------------------------- */

/* Tolerances by the output format (inputs are pre-rounded, so only the kernel's fp32 arithmetic and the output
 * rounding count); as test_gpu_ops.c's tol_for:
 *   F32:  rel L2 1e-5, any element within 1e-4 * max|ref| (fp32 arithmetic vs the fp64 reference: ~1e-7);
 *   F16:  one rounding is <= 2^-11 = 4.9e-4 relative -> rel L2 2e-3, max abs 4e-3 * max|ref|;
 *   BF16: 2^-8 = 3.9e-3 -> rel L2 1e-2, max abs 2e-2 * max|ref|. */

static tol_t tol_for(tp_dtype out) {
    tol_t t = {1e-5, 1e-4};
    if (out == TP_F16) t.rel_l2 = 2e-3, t.abs_frac = 4e-3;
    if (out == TP_BF16) t.rel_l2 = 1e-2, t.abs_frac = 2e-2;
    return t;
}

/* the host encoding of n fp32 values in dt (what a bit-exact kernel must write) */
static void *encode(tp_dtype dt, const float *x, size_t n) {
    void *e = hmalloc(n * esize(dt));
    tp_convert_from_f32(dt, x, e, n, 1.0f);
    return e;
}

static const tp_dtype ACT[3] = {TP_F32, TP_F16, TP_BF16};

typedef struct {
    tp_dtype in, out;
} dt_pair;

/* ================================================================================================================
 * token_embed: a gather and one fp32 product, so bit-exact; ids include 0 and V - 1; rows of invalid ids
 * (negative, V, fractional, NaN) must be NaN and their neighbours intact.
 * ============================================================================================================== */

static const dt_pair EMB_COMBOS[] = {{TP_F32, TP_F32}, {TP_F16, TP_F16},  {TP_BF16, TP_BF16},
                                     {TP_F16, TP_F32}, {TP_BF16, TP_F32}, {TP_F32, TP_BF16}};

START_TEST(test_token_embed) {
    const tp_dtype tdt = EMB_COMBOS[_i].in, ydt = EMB_COMBOS[_i].out;
    static const int cases[][4] = {{1, 4096, 1000, 0}, {3, 200, 50, 0}, {37, 776, 300, 0}, {5, 37, 20, 0},
                                   {3, 776, 300, 1}}; /* n, C, V, base offset (1: scalar path) */
    for (int c = 0; c < N_OF(cases); c++) {
        const int n = cases[c][0], C = cases[c][1], V = cases[c][2];
        const size_t off = (size_t)cases[c][3];
        const float scale = c % 2 ? sqrtf((float)C) : 1.0f; /* Gemma scales by sqrt(C) */
        SET_CASE("token_embed %s->%s n=%d C=%d V=%d scale=%g offset=%zu", dname(tdt), dname(ydt), n, C, V, scale, off);
        float *table = host_normal((size_t)V * C, 100 + c, 0.0, 1.0), *ids = hmalloc(n * sizeof(float));
        int32_t *ids_i = hmalloc(n * sizeof(int32_t));
        round_to(tdt, table, (size_t)V * C);
        tp_rng r;
        tp_rng_seed(&r, 200 + c);
        for (int i = 0; i < n; i++) {
            ids_i[i] = i == 0 ? V - 1 : i == 1 ? 0 : (int32_t)(tp_rng_uniform(&r) * V);
            ids[i] = (float)ids_i[i];
        }
        float *ref = hmalloc((size_t)n * C * sizeof(float));
        tp_cpu_token_embed(ids_i, table, ref, n, C, scale);
        float *d_ids = dev_floats(ids, (size_t)n);
        void *d_table = dev_upload_at(tdt, table, (size_t)V * C, off), *d_y = dev_alloc_at(ydt, (size_t)n * C, off);
        KERNEL_OK(tpk_token_embed(d_ids, d_table, tdt, d_y, ydt, n, C, V, scale, g_stream));
        check_bytes_equal("y", ydt, download_bytes(d_y, (size_t)n * C * esize(ydt)), encode(ydt, ref, (size_t)n * C),
                          (size_t)n * C, (size_t)C);
        release_all();
    }
    /* invalid ids: -1, V, 2.5, NaN write NaN rows; the valid id 1 between them is the table's row */
    SET_CASE("token_embed %s->%s invalid ids", dname(tdt), dname(ydt));
    const int C = 200, V = 50, n = 5;
    const float ids[5] = {-1.0f, (float)V, 1.0f, 2.5f, NAN};
    float *table = host_normal((size_t)V * C, 300, 0.0, 1.0);
    round_to(tdt, table, (size_t)V * C);
    void *d_table = dev_upload_at(tdt, table, (size_t)V * C, 0), *d_y = dev_alloc_at(ydt, (size_t)n * C, 0);
    float *d_ids = dev_floats(ids, 5);
    CUDA_OK(cudaMemsetAsync(d_y, 0, (size_t)n * C * esize(ydt), g_stream)); /* zeros: the NaN must be written */
    KERNEL_OK(tpk_token_embed(d_ids, d_table, tdt, d_y, ydt, n, C, V, 1.0f, g_stream));
    const float *y = download_f32(ydt, d_y, (size_t)n * C, 1.0f);
    float *row1 = hmalloc((size_t)C * sizeof(float)); /* table row 1 as ydt holds it */
    memcpy(row1, table + C, (size_t)C * sizeof(float));
    round_to(ydt, row1, (size_t)C);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < C; c++) {
            const float v = y[i * C + c];
            if (i == 2)
                ck_assert_msg(v == row1[c], "[%s] valid row 2 col %d: %g != %g", g_case, c, v, row1[c]);
            else
                ck_assert_msg(isnan(v), "[%s] row %d (id %g) col %d: %g, want NaN", g_case, i, ids[i], c, v);
        }
    printf("  ok    %s: NaN rows for ids -1, V, 2.5, NaN; id 1 intact\n", g_case);
}
END_TEST

/* ================================================================================================================
 * RMSNorm: decode (M = 1, C = 4096), prefill-sized (M = 512), odd C, a misaligned base; offset 0 (Llama) and 1
 * (Gemma); x has a non-zero mean so the mean square is not the variance.
 * ============================================================================================================== */

static const struct {
    tp_dtype x, w, y;
} RMS_COMBOS[] = {{TP_F32, TP_F32, TP_F32}, {TP_F16, TP_F16, TP_F16},   {TP_BF16, TP_BF16, TP_BF16},
                  {TP_F16, TP_F32, TP_F16}, {TP_BF16, TP_F32, TP_BF16}, {TP_F32, TP_F32, TP_BF16}};

START_TEST(test_rmsnorm) {
    const tp_dtype xdt = RMS_COMBOS[_i].x, wdt = RMS_COMBOS[_i].w, ydt = RMS_COMBOS[_i].y;
    static const int cases[][3] = {{1, 4096, 0}, {3, 200, 0},  {512, 776, 0}, {1, 776, 1},
                                   {7, 37, 0},   {512, 4096, 0}, {3, 4096, 1}}; /* M, C, base offset */
    for (int c = 0; c < N_OF(cases); c++) {
        const int M = cases[c][0], C = cases[c][1];
        const size_t off = (size_t)cases[c][2], n = (size_t)M * C;
        const float offset = (float)(c % 2), eps = c % 2 ? 1e-6f : 1e-5f;
        SET_CASE("rmsnorm x=%s w=%s y=%s M=%d C=%d offset=%g base+%zu", dname(xdt), dname(wdt), dname(ydt), M, C, offset,
                 off);
        float *x = host_normal(n, 400 + c, 0.5, 2.0), *w = host_normal((size_t)C, 500 + c, 1.0 - offset, 0.3);
        round_to(xdt, x, n);
        round_to(wdt, w, (size_t)C);
        float *ref = hmalloc(n * sizeof(float));
        tp_cpu_rmsnorm(x, w, ref, M, C, eps, offset);
        void *d_x = dev_upload_at(xdt, x, n, off), *d_w = dev_upload_at(wdt, w, (size_t)C, off);
        void *d_y = dev_alloc_at(ydt, n, off);
        KERNEL_OK(tpk_rmsnorm(d_x, xdt, d_w, wdt, d_y, ydt, M, C, eps, offset, g_stream));
        check_close("y", download_f32(ydt, d_y, n, 1.0f), ref, n, (size_t)C, tol_for(ydt));
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * RoPE, default and llama3 frequencies, against tp_cpu_rope; past read from the device at run time (run, change
 * *past on the device, run again: the second result matches the reference at the new position), in place too,
 * and a captured graph replayed after *past changed.
 * ============================================================================================================== */

typedef struct {
    const void *x;
    tp_dtype xdt, ydt;
    int B, T, H, D;
    const float *inv;
    const int *past;
} rope_ctx;

static int rope_launch(const void *ctx, void *out, cudaStream_t s) {
    const rope_ctx *c = ctx;
    return tpk_rope(c->x, c->xdt, out, c->ydt, c->B, c->T, c->H, c->D, c->inv, c->past, s);
}

static const dt_pair ROPE_COMBOS[] = {{TP_F32, TP_F32}, {TP_F16, TP_F16}, {TP_BF16, TP_BF16}, {TP_F32, TP_F16}};

START_TEST(test_rope) {
    const tp_dtype xdt = ROPE_COMBOS[_i].in, ydt = ROPE_COMBOS[_i].out;
    /* B, T, H, D, past, second past, in place */
    static const int cases[][7] = {{1, 1, 32, 128, 1000, 1001, 0}, {3, 5, 8, 256, 37, 1000, 0}, {1, 37, 4, 64, 0, 37, 0},
                                   {3, 37, 2, 128, 1000, 0, 1},    {1, 5, 3, 256, 0, 1000, 1}};
    static const tp_rope ropes[2] = {{TP_ROPE_DEFAULT, 10000.0, 0, 0, 0, 0}, {TP_ROPE_LLAMA3, 500000.0, 8.0, 1.0, 4.0, 8192}};
    for (int ri = 0; ri < 2; ri++)
        for (int c = 0; c < N_OF(cases); c++) {
            const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
            const int pasts[2] = {cases[c][4], cases[c][5]}, in_place = cases[c][6];
            if (in_place && esize(xdt) != esize(ydt)) continue;
            const size_t n = (size_t)B * T * H * D;
            float *x = host_normal(n, 600 + c, 0.0, 1.5), *inv = hmalloc((size_t)D / 2 * sizeof(float));
            float *ref = hmalloc(n * sizeof(float));
            round_to(xdt, x, n);
            tp_rope_inv_freq(&ropes[ri], D, inv);
            float *d_inv = dev_floats(inv, (size_t)D / 2);
            int *d_past = dev_past(pasts[0]);
            void *d_x = dev_upload_at(xdt, x, n, 0), *d_y = in_place ? d_x : dev_alloc_at(ydt, n, 0);
            for (int k = 0; k < 2; k++) {
                SET_CASE("rope %s %s->%s B=%d T=%d H=%d D=%d past=%d%s", ropes[ri].type ? "llama3" : "default",
                         dname(xdt), dname(ydt), B, T, H, D, pasts[k], in_place ? " in place" : "");
                if (k == 1) {
                    set_past(d_past, pasts[1]); /* the same arguments; only the device int moves */
                    if (in_place) upload_to(d_x, xdt, x, n, 1.0f);
                    else CUDA_OK(cudaMemsetAsync(d_y, 0xFF, n * esize(ydt), g_stream));
                }
                KERNEL_OK(tpk_rope(d_x, xdt, d_y, ydt, B, T, H, D, d_inv, d_past, g_stream));
                tp_cpu_rope(x, ref, B, T, H, D, inv, pasts[k]);
                check_close("y", download_f32(ydt, d_y, n, 1.0f), ref, n, (size_t)D, tol_for(ydt));
            }
            if (!in_place && c < 2) { /* graph replay at the second position vs eager */
                CUDA_OK(cudaDeviceSynchronize());
                rope_ctx ctx = {d_x, xdt, ydt, B, T, H, D, d_inv, d_past};
                check_graph_replay(rope_launch, &ctx, d_y, dev_alloc_at(ydt, n, 0), n * esize(ydt));
            }
            release_all();
        }
}
END_TEST

/* ================================================================================================================
 * GLU: SiLU and GELU-tanh gates, odd n, misaligned bases, y aliasing gate. gate ~ N(0, 3) reaches both tails.
 * ============================================================================================================== */

static const dt_pair GLU_COMBOS[] = {{TP_F32, TP_F32}, {TP_F16, TP_F16}, {TP_BF16, TP_BF16}, {TP_F16, TP_F32}, {TP_F32, TP_BF16}};

START_TEST(test_glu) {
    const tp_dtype dt = GLU_COMBOS[_i].in, ydt = GLU_COMBOS[_i].out;
    static const size_t cases[][3] = {{1, 0, 0}, {5, 1, 0}, {3 * 14336, 0, 0}, {1000003, 0, 0}, {4099, 1, 0}, {14336, 0, 1}};
    for (int act = 0; act < 2; act++)
        for (int c = 0; c < N_OF(cases); c++) {
            const size_t n = cases[c][0], off = cases[c][1], alias = cases[c][2];
            if (alias && dt != ydt) continue;
            SET_CASE("glu %s %s->%s n=%zu offset=%zu%s", act ? "gelu_tanh" : "silu", dname(dt), dname(ydt), n, off,
                     alias ? " y=gate" : "");
            float *g = host_normal(n, 700 + c, 0.0, 3.0), *u = host_normal(n, 800 + c, 0.0, 1.0);
            round_to(dt, g, n);
            round_to(dt, u, n);
            float *ref = hmalloc(n * sizeof(float));
            tp_cpu_glu(g, u, ref, (int64_t)n, act);
            void *d_g = dev_upload_at(dt, g, n, off), *d_u = dev_upload_at(dt, u, n, off);
            void *d_y = alias ? d_g : dev_alloc_at(ydt, n, off);
            KERNEL_OK(tpk_glu(d_g, d_u, dt, d_y, ydt, n, act, g_stream));
            check_close("y", download_f32(ydt, d_y, n, 1.0f), ref, n, n, tol_for(ydt));
            release_all();
        }
}
END_TEST

/* ================================================================================================================
 * RMSNorm and the GLU writing E4M3 for an FP8 GEMM (tpk_rmsnorm_e4m3, tpk_glu_e4m3): the codes equal, bit for bit,
 * the host's encoding (tp_f32_to_e4m3, saturating RNE) of the same kernel's fp32 output divided by the scale, on
 * the vector path (C % 4 == 0, aligned) and the element path (C 37, a base offset of one element), a scale that
 * saturates some values (amax / 300: |x / s| up to ~1.5 x 448), and the refusals.
 * ============================================================================================================== */

START_TEST(test_e4m3_outputs) {
    const tp_dtype dt = _i ? TP_BF16 : TP_F16;
    static const int cases[][3] = {{3, 1024, 0}, {51, 37, 0}, {5, 4096, 1}}; /* M, C, base offset */
    for (int c = 0; c < N_OF(cases); c++) {
        const int M = cases[c][0], C = cases[c][1];
        const size_t n = (size_t)M * C, off = (size_t)cases[c][2];
        SET_CASE("e4m3 outputs %s M=%d C=%d base+%zu", dname(dt), M, C, off);
        float *x = host_normal(n, 900 + c, 0.2, 2.0), *w = host_normal((size_t)C, 910 + c, 0.0, 0.5);
        float *u = host_normal(n, 920 + c, 0.0, 1.5);
        round_to(dt, x, n), round_to(dt, w, (size_t)C), round_to(dt, u, n);
        void *d_x = dev_upload_at(dt, x, n, off), *d_w = dev_upload_at(dt, w, (size_t)C, off);
        void *d_u = dev_upload_at(dt, u, n, off);
        float *d_y32 = dev_alloc_at(TP_F32, n, off);
        void *d_q = dev_alloc_at(TP_E4M3, n, off);
        for (int op = 0; op < 2; op++) { /* 0: RMSNorm (Gemma's 1 + w), 1: GeGLU of x and u */
            if (op == 0) KERNEL_OK(tpk_rmsnorm(d_x, dt, d_w, dt, d_y32, TP_F32, M, C, 1e-6f, 1.0f, g_stream));
            else KERNEL_OK(tpk_glu(d_x, d_u, dt, d_y32, TP_F32, n, 1, g_stream));
            const float *y = download_f32(TP_F32, d_y32, n, 1.0f);
            const float scale = host_amax(y, n) / 300.0f;
            float *d_s = dev_scalar(scale);
            if (op == 0) KERNEL_OK(tpk_rmsnorm_e4m3(d_x, dt, d_w, dt, d_q, d_s, M, C, 1e-6f, 1.0f, g_stream));
            else KERNEL_OK(tpk_glu_e4m3(d_x, d_u, dt, d_q, d_s, n, 1, g_stream));
            uint8_t *want = hmalloc(n);
            for (size_t i = 0; i < n; i++) want[i] = tp_f32_to_e4m3(y[i] / scale);
            check_bytes_equal(op ? "glu e4m3" : "rmsnorm e4m3", TP_E4M3, download_bytes(d_q, n), want, n, (size_t)C);
        }
        ck_assert_int_eq(tpk_rmsnorm_e4m3(d_x, dt, d_w, dt, d_q, NULL, M, C, 1e-6f, 1.0f, g_stream),
                         (int)cudaErrorInvalidValue);
        ck_assert_int_eq(tpk_glu_e4m3(d_x, d_u, dt, d_x, dev_scalar(1.0f), n, 1, g_stream), (int)cudaErrorInvalidValue);
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * RMSNorm writing FP8 block-128 for fp8-block GEMMs (tpk_rmsnorm_fp8_b128): codes and scales equal, bit for bit,
 * tp_quantize(TP_QF_FP8_BLOCK128) of tpk_rmsnorm's fp32 output (the same sum of squares, so the same values), the
 * scales in cuBLASLt's (kb, M_pad) layout; the pad rows M .. M_pad - 1 codes 0 and scale 1. Llama's w and Gemma's
 * 1 + w; C 2000 ends in a partial block; every row poisoned first. Refusals: C % 4, misaligned q.
 * ============================================================================================================== */

START_TEST(test_rmsnorm_b128) {
    const tp_dtype dt = _i ? TP_BF16 : TP_F16;
    static const int cases[][2] = {{3, 1024}, {5, 2000}, {1, 4096}, {8, 256}}; /* M, C */
    for (int c = 0; c < N_OF(cases); c++) {
        const int M = cases[c][0], C = cases[c][1], Mp = (M + 3) / 4 * 4, KB = (C + 127) / 128;
        const float offset = c & 1 ? 1.0f : 0.0f;
        const size_t n = (size_t)M * C, np = (size_t)Mp * C;
        SET_CASE("rmsnorm fp8 block-128 %s M=%d C=%d offset %g", dname(dt), M, C, offset);
        float *x = host_normal(n, 940 + c, 0.1, 2.0), *w = host_normal((size_t)C, 950 + c, 0.0, 0.5);
        for (size_t i = 0; i < n; i += 61) x[i] *= 30.0f; /* outliers: blocks with other scales */
        round_to(dt, x, n), round_to(dt, w, (size_t)C);
        void *d_x = dev_upload_at(dt, x, n, 0), *d_w = dev_upload_at(dt, w, (size_t)C, 0);
        float *d_y32 = dev_alloc_at(TP_F32, n, 0);
        uint8_t *d_q = dev_alloc_at(TP_E4M3, np, 0);
        float *d_s = dev_alloc_at(TP_F32, (size_t)KB * Mp, 0);
        KERNEL_OK(tpk_rmsnorm(d_x, dt, d_w, dt, d_y32, TP_F32, M, C, 1e-6f, offset, g_stream));
        KERNEL_OK(tpk_rmsnorm_fp8_b128(d_x, dt, d_w, dt, d_q, d_s, M, Mp, C, 1e-6f, offset, g_stream));
        const float *y = download_f32(TP_F32, d_y32, n, 1.0f);
        tp_qtensor q;
        tp_error e;
        ck_assert_msg(tp_quantize(TP_QF_FP8_BLOCK128, y, M, C, 0, 0.0f, &q, &e) == TP_OK, "%s", e.msg);
        uint8_t *want = hmalloc(np);
        memcpy(want, q.elems, n);
        memset(want + n, 0, np - n); /* pad rows: codes 0 */
        check_bytes_equal("rmsnorm fp8 block-128 codes", TP_E4M3, download_bytes(d_q, np), want, np, (size_t)C);
        const float *got_s = (const float *)download_bytes(d_s, sizeof(float) * (size_t)KB * Mp);
        size_t bad = 0;
        for (int m = 0; m < Mp; m++)
            for (int kb = 0; kb < KB; kb++) {
                float ws = 1.0f;
                if (m < M) memcpy(&ws, q.scales + sizeof(float) * ((size_t)m * KB + kb), sizeof ws);
                bad += memcmp(&got_s[(size_t)kb * Mp + m], &ws, sizeof ws) != 0;
            }
        ck_assert_msg(bad == 0, "[%s] %zu of %d block scales differ from tp_quantize's", g_case, bad, KB * Mp);
        tp_qtensor_free(&q);
        printf("  ok    %s: codes and %d scales bit-identical to tp_quantize\n", g_case, KB * Mp);
        ck_assert_int_eq(tpk_rmsnorm_fp8_b128(d_x, dt, d_w, dt, d_q, d_s, M, Mp, 42, 1e-6f, offset, g_stream),
                         (int)cudaErrorInvalidValue);
        ck_assert_int_eq(tpk_rmsnorm_fp8_b128(d_x, dt, d_w, dt, d_q + 2, d_s, M, Mp, C, 1e-6f, offset, g_stream),
                         (int)cudaErrorInvalidValue);
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * kv_append: the T rows at past of each batch and plane equal k and v bit for bit, and every other byte of the
 * cache is still the poison. A past beyond L - T writes nothing. Row widths of 1024 and 256 elements (16-byte
 * copies), 100 (200 bytes in 16 bits: 8-byte copies), 3 (6 or 12 bytes: 2- or 4-byte copies); past + T = L.
 * ============================================================================================================== */

/* The whole cache (2, B, L, W) downloaded: rows [past, past + T) of each (plane, b) must equal k / v, the rest be
 * 0xFF bytes. */
static void check_cache(tp_dtype dt, const void *d_kv, const void *k_enc, const void *v_enc, int B, int T, int L,
                        int W, int past) {
    const size_t es = esize(dt), row = (size_t)W * es;
    const unsigned char *h = download_bytes(d_kv, 2 * (size_t)B * L * row);
    size_t touched = 0, wrong = 0;
    for (int pl = 0; pl < 2; pl++)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < L; j++) {
                const unsigned char *got = h + (((size_t)pl * B + b) * L + j) * row;
                if (j >= past && j < past + T) {
                    const unsigned char *src = (const unsigned char *)(pl ? v_enc : k_enc) + ((size_t)b * T + (j - past)) * row;
                    wrong += memcmp(got, src, row) != 0;
                } else {
                    for (size_t i = 0; i < row; i++) touched += got[i] != 0xFF;
                }
            }
    printf("  %s  %s | cache: %zu appended rows wrong, %zu bytes outside them written\n",
           wrong || touched ? "FAIL" : "ok  ", g_case, wrong, touched);
    fflush(stdout);
    ck_assert_msg(wrong == 0, "[%s] %zu appended rows differ from k/v", g_case, wrong);
    ck_assert_msg(touched == 0, "[%s] %zu bytes outside the appended rows were written", g_case, touched);
}

START_TEST(test_kv_append) {
    const tp_dtype dt = ACT[_i];
    const int L = 1043;
    static const int cases[][4] = {{1, 1, 1000, 1024}, {3, 5, 37, 256}, {3, 37, 0, 100}, {1, 37, 1000, 1024}, {2, 5, 1038, 3}};
    for (int c = 0; c < N_OF(cases); c++) {
        const int B = cases[c][0], T = cases[c][1], past = cases[c][2], W = cases[c][3];
        SET_CASE("kv_append %s B=%d T=%d past=%d L=%d W=%d", dname(dt), B, T, past, L, W);
        const size_t n = (size_t)B * T * W;
        float *k = host_normal(n, 900 + c, 0.0, 1.0), *v = host_normal(n, 1000 + c, 0.0, 1.0);
        void *d_k = dev_upload_at(dt, k, n, 0), *d_v = dev_upload_at(dt, v, n, 0);
        void *d_kv = dev_alloc_at(dt, 2 * (size_t)B * L * W, 0);
        int *d_past = dev_past(past);
        KERNEL_OK(tpk_kv_append(d_k, d_v, d_kv, dt, dt, NULL, B, T, L, W, d_past, g_stream));
        check_cache(dt, d_kv, encode(dt, k, n), encode(dt, v, n), B, T, L, W, past);
        /* a position the caller should never pass: nothing written */
        SET_CASE("kv_append %s B=%d T=%d past=%d (> L - T) L=%d W=%d", dname(dt), B, T, L - T + 1, L, W);
        void *d_kv2 = dev_alloc_at(dt, 2 * (size_t)B * L * W, 0);
        set_past(d_past, L - T + 1);
        KERNEL_OK(tpk_kv_append(d_k, d_v, d_kv2, dt, dt, NULL, B, T, L, W, d_past, g_stream));
        check_untouched("cache", d_kv2, 0, 2 * (size_t)B * L * W * esize(dt));
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * last_token: a copy (bit-exact against tp_cpu_pool mode 2), including a misaligned output (narrower copies), and
 * nothing written past y.
 * ============================================================================================================== */

START_TEST(test_last_token) {
    const tp_dtype dt = ACT[_i];
    static const int cases[][4] = {{1, 1, 4096, 0}, {3, 5, 200, 0}, {3, 37, 776, 1}, {2, 5, 37, 0}}; /* B, T, C, off */
    for (int c = 0; c < N_OF(cases); c++) {
        const int B = cases[c][0], T = cases[c][1], C = cases[c][2];
        const size_t off = (size_t)cases[c][3], nx = (size_t)B * T * C, ny = (size_t)B * C;
        SET_CASE("last_token %s B=%d T=%d C=%d offset=%zu", dname(dt), B, T, C, off);
        float *x = host_normal(nx, 1100 + c, 0.0, 1.0), *ref = hmalloc(ny * sizeof(float));
        round_to(dt, x, nx);
        tp_cpu_pool(x, ref, B, T, C, 2, 0);
        void *d_x = dev_upload_at(dt, x, nx, 0), *d_y = dev_alloc_at(dt, ny + 8, off);
        KERNEL_OK(tpk_last_token(d_x, d_y, dt, B, T, C, g_stream));
        check_bytes_equal("y", dt, download_bytes(d_y, ny * esize(dt)), encode(dt, ref, ny), ny, (size_t)C);
        check_untouched("past y", d_y, ny * esize(dt), (ny + 8) * esize(dt));
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * argmax: exact index against tp_cpu_argmax on the rounded logits (ties are frequent in bf16; a tie is also
 * planted: the maximum copied to a later index), vocabulary sizes of Llama 2 (32000), Llama 3 (128256) and Gemma
 * (256000), N not a multiple of 4 (scalar path); then NaN (the first NaN wins) and an all -inf row (index 0).
 * ============================================================================================================== */

START_TEST(test_argmax) {
    const tp_dtype dt = ACT[_i];
    static const int cases[][2] = {{1, 1}, {3, 37}, {1, 32000}, {3, 128256}, {2, 256000}, {1, 4099}}; /* M, N */
    for (int c = 0; c < N_OF(cases); c++) {
        const int M = cases[c][0], N = cases[c][1];
        SET_CASE("argmax %s M=%d N=%d", dname(dt), M, N);
        const size_t n = (size_t)M * N;
        float *x = host_normal(n, 1200 + c, 0.0, 3.0);
        round_to(dt, x, n);
        for (int m = 0; m < M && N > 2; m++) { /* plant a tie: the row's max again at a later index */
            int32_t best;
            tp_cpu_argmax(x + (size_t)m * N, &best, 1, N);
            x[(size_t)m * N + (best + 1 + (N - best - 1) / 2) % N] = x[(size_t)m * N + best];
        }
        int32_t *ref = hmalloc((size_t)M * sizeof(int32_t));
        tp_cpu_argmax(x, ref, M, N);
        void *d_x = dev_upload_at(dt, x, n, 0);
        float *d_ids = dev_alloc_at(TP_F32, (size_t)M, 0);
        KERNEL_OK(tpk_argmax(d_x, dt, d_ids, M, N, g_stream));
        const float *ids = download_bytes(d_ids, (size_t)M * sizeof(float));
        for (int m = 0; m < M; m++) {
            printf("  %s  %s | row %d: got %.1f want %d\n", ids[m] == (float)ref[m] ? "ok  " : "FAIL", g_case, m, ids[m],
                   ref[m]);
            ck_assert_msg(ids[m] == (float)ref[m], "[%s] row %d: argmax %g, want %d", g_case, m, ids[m], ref[m]);
        }
        release_all();
    }
    SET_CASE("argmax %s NaN and -inf rows", dname(dt));
    const int N = 1000;
    float *x = host_normal(3 * (size_t)N, 1300, 0.0, 1.0);
    x[700] = NAN, x[300] = NAN, x[10] = INFINITY; /* row 0: NaN above +inf, the first NaN */
    for (int i = 0; i < N; i++) x[N + i] = -INFINITY;
    x[2 * N + 999] = 50.0f;
    void *d_x = dev_upload_at(dt, x, 3 * (size_t)N, 0);
    float *d_ids = dev_alloc_at(TP_F32, 3, 0);
    KERNEL_OK(tpk_argmax(d_x, dt, d_ids, 3, N, g_stream));
    const float *ids = download_bytes(d_ids, 3 * sizeof(float));
    printf("  %s  %s: %g %g %g (want 300 0 999)\n", ids[0] == 300.0f && ids[1] == 0.0f && ids[2] == 999.0f ? "ok  " : "FAIL",
           g_case, ids[0], ids[1], ids[2]);
    ck_assert_msg(ids[0] == 300.0f && ids[1] == 0.0f && ids[2] == 999.0f, "[%s] got %g %g %g, want 300 0 999", g_case,
                  ids[0], ids[1], ids[2]);
}
END_TEST

/* ================================================================================================================
 * kv_attention against tp_cpu_attention_ex (Tq = T, Tkv = past + T, causal bottom-right). The cache holds random
 * rows below past + T and NaN (the poison) from there to L, so a kernel reading a key it must not see fails.
 * Shapes: Llama's GQA 32/8 D 128, Gemma's MQA 8/1 D 256, MHA and GQA at D 64; past 0, 37, 1000 (and 1024, the
 * decode benchmark); T 1, 5, 16 (8 row groups), 37; L = 1043 (17 chunks at B T = 1), L = 60 (a single chunk:
 * the direct path without combine), L = 9043 (chunks of 128 keys: two block steps each), B T = 74 (6 chunks of
 * 192 keys: three steps).
 * ============================================================================================================== */

typedef struct {
    const void *q, *kv;
    tp_dtype dt, odt;
    int B, T, H, Hkv, D, L;
    const int *past;
    float scale;
    float *ws;
    size_t ws_bytes;
} kva_ctx;

static int kva_launch(const void *ctx, void *out, cudaStream_t s) {
    const kva_ctx *c = ctx;
    return tpk_kv_attention(c->q, c->kv, c->dt, c->dt, NULL, out, c->odt, c->B, c->T, c->H, c->Hkv, c->D, c->L, c->past, c->scale,
                            c->ws, c->ws_bytes, s);
}

/* q (B, T, H D) and the cache (2, B, L, Hkv D) on the host: rows < rows_valid random (rounded to dt), NaN after */
static float *host_cache(tp_dtype dt, int B, int L, int W, int rows_valid, uint64_t seed) {
    const size_t n = 2 * (size_t)B * L * W;
    float *kv = host_normal(n, seed, 0.0, 1.5);
    for (int pl = 0; pl < 2; pl++)
        for (int b = 0; b < B; b++)
            for (size_t i = (size_t)rows_valid * W; i < (size_t)L * W; i++) kv[((size_t)pl * B + b) * L * W + i] = NAN;
    round_to(dt, kv, n);
    return kv;
}

static void ref_kv_attention(const float *q, const float *kv, float *out, int B, int T, int H, int Hkv, int D, int L,
                             int past, float scale) {
    const int64_t W = (int64_t)Hkv * D;
    tp_cpu_attn_args a = {.q = q, .k = kv, .v = kv + (int64_t)B * L * W, .o = out, .q_bs = (int64_t)T * H * D,
                          .q_rs = (int64_t)H * D, .k_bs = L * W, .k_rs = W, .v_bs = L * W, .v_rs = W,
                          .o_bs = (int64_t)T * H * D, .o_rs = (int64_t)H * D, .B = B, .H = H, .Hkv = Hkv, .Tq = T,
                          .Tkv = past + T, .D = D, .causal = 1, .scale = scale};
    tp_cpu_attention_ex(&a);
}

/* F32 outputs: fp32 dot products and exp2f (2 ulp) against the fp64 reference, as test_gpu_ops.c's attention */
static tol_t kva_tol(tp_dtype out) {
    tol_t t = tol_for(out);
    if (out == TP_F32) t.rel_l2 = 2e-5, t.abs_frac = 2e-4;
    return t;
}

static const dt_pair KVA_COMBOS[] = {{TP_F32, TP_F32}, {TP_F16, TP_F16}, {TP_BF16, TP_BF16}, {TP_BF16, TP_F32}};

START_TEST(test_kv_attention) {
    const tp_dtype dt = KVA_COMBOS[_i].in, odt = KVA_COMBOS[_i].out;
    /* B, T, H, Hkv, D, past, L */
    static const int cases[][7] = {
        {1, 1, 32, 8, 128, 1024, 1043}, {1, 1, 32, 8, 128, 0, 1043},  {3, 5, 32, 8, 128, 37, 1043},
        {1, 16, 32, 8, 128, 1000, 1043}, {1, 5, 8, 1, 256, 1000, 1043}, {3, 1, 8, 1, 256, 37, 1043},
        {3, 37, 8, 1, 256, 1000, 1043}, {1, 37, 4, 4, 64, 1000, 1043}, {3, 5, 6, 2, 64, 0, 1043},
        {1, 3, 8, 2, 64, 50, 60},       {1, 1, 8, 2, 128, 9000, 9043}, {2, 37, 4, 2, 128, 1000, 1043},
        /* prefills through the decode kernel (the FP32 reference's, head dim 256's): many rows, several chunks */
        {8, 512, 32, 8, 64, 0, 640},    {1, 992, 32, 32, 128, 0, 1056},
    };
    for (int c = 0; c < N_OF(cases); c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], Hkv = cases[c][3], D = cases[c][4];
        const int past = cases[c][5], L = cases[c][6], W = Hkv * D;
        const float scale = 1.0f / sqrtf((float)D);
        const size_t nq = (size_t)B * T * H * D, nkv = 2 * (size_t)B * L * W;
        const size_t ws_bytes = tpk_kv_attention_workspace(B, T, H, D, L);
        SET_CASE("kv_attention %s->%s B=%d T=%d H=%d Hkv=%d D=%d past=%d L=%d (workspace %zu B)", dname(dt), dname(odt),
                 B, T, H, Hkv, D, past, L, ws_bytes);
        float *q = host_normal(nq, 1400 + c, 0.0, 1.5), *kv = host_cache(dt, B, L, W, past + T, 1500 + c);
        round_to(dt, q, nq);
        float *ref = hmalloc(nq * sizeof(float));
        ref_kv_attention(q, kv, ref, B, T, H, Hkv, D, L, past, scale);
        void *d_q = dev_upload_at(dt, q, nq, 0), *d_kv = dev_upload_at(dt, kv, nkv, 0), *d_o = dev_alloc_at(odt, nq, 0);
        float *d_ws = ws_bytes ? dev_bytes(ws_bytes) : NULL;
        int *d_past = dev_past(past);
        KERNEL_OK(tpk_kv_attention(d_q, d_kv, dt, dt, NULL, d_o, odt, B, T, H, Hkv, D, L, d_past, scale, d_ws, ws_bytes, g_stream));
        check_close("out", download_f32(odt, d_o, nq, 1.0f), ref, nq, (size_t)H * D, kva_tol(odt));
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * The FP8 KV cache: tpk_kv_append quantizes the new rows to E4M3 under the cache's scale (byte for byte the host
 * codec's sat(rne(x / s)), the rows before and after untouched), tpk_kv_dequant gives a prefill's rows back as
 * code * s in the activation type (exactly), and tpk_kv_attention on the E4M3 cache equals the fp64 reference on
 * the dequantized cache (the scale folded into Q and the output: one more fp32 rounding at most). The scale is
 * 0.9 of amax / 448, so the largest values saturate; rows from past + T on stay NaN codes (0xFF), never read.
 * ============================================================================================================== */

static const tp_dtype KV8_DT[] = {TP_F16, TP_BF16};

START_TEST(test_kv_cache_fp8) {
    const tp_dtype dt = KV8_DT[_i];
    static const int cases[][7] = {/* B, T, H, Hkv, D, past, L */
                                   {1, 1, 32, 8, 128, 1000, 1043}, {3, 5, 8, 1, 256, 37, 1043},
                                   {2, 37, 4, 2, 64, 0, 60},       {1, 16, 32, 8, 128, 0, 1043}};
    for (int c = 0; c < N_OF(cases); c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], Hkv = cases[c][3], D = cases[c][4];
        const int past = cases[c][5], L = cases[c][6], W = Hkv * D;
        const size_t nkv = 2 * (size_t)B * L * W, nk = (size_t)B * T * W, nq = (size_t)B * T * H * D;
        SET_CASE("fp8 KV cache %s B=%d T=%d H=%d Hkv=%d D=%d past=%d L=%d", dname(dt), B, T, H, Hkv, D, past, L);
        float *old = host_normal(nkv, 1800 + c, 0.0, 1.5), *k = host_normal(nk, 1900 + c, 0.0, 1.5);
        float *v = host_normal(nk, 2000 + c, 0.0, 1.5), *q = host_normal(nq, 2100 + c, 0.0, 1.5);
        round_to(dt, k, nk);
        round_to(dt, v, nk);
        round_to(dt, q, nq);
        const float s = 0.9f * fmaxf(host_amax(k, nk), fmaxf(host_amax(v, nk), host_amax(old, nkv))) / 448.0f;
        /* the cache before: rows < past coded, the rest NaN codes; after: rows past .. past + T - 1 = k, v coded */
        unsigned char *before = hmalloc(nkv), *want = hmalloc(nkv);
        for (int pl = 0; pl < 2; pl++)
            for (int b = 0; b < B; b++)
                for (int r = 0; r < L; r++)
                    for (int w = 0; w < W; w++) {
                        const size_t i = (((size_t)pl * B + b) * L + r) * W + w;
                        before[i] = r < past ? tp_f32_to_e4m3(old[i] / s) : 0xFF;
                        want[i] = before[i];
                        if (r >= past && r < past + T)
                            want[i] = tp_f32_to_e4m3((pl ? v : k)[((size_t)b * T + (r - past)) * W + w] / s);
                    }
        unsigned char *d_kv = dev_bytes(nkv);
        CUDA_OK(cudaMemcpy(d_kv, before, nkv, cudaMemcpyHostToDevice));
        void *d_k = dev_upload_at(dt, k, nk, 0), *d_v = dev_upload_at(dt, v, nk, 0), *d_q = dev_upload_at(dt, q, nq, 0);
        float *d_s = dev_scalar(s);
        int *d_past = dev_past(past);
        KERNEL_OK(tpk_kv_append(d_k, d_v, d_kv, dt, TP_E4M3, d_s, B, T, L, W, d_past, g_stream));
        const unsigned char *got = download_bytes(d_kv, nkv);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < nkv; i++)
            if (got[i] != want[i] && bad++ == 0) first = i;
        ck_assert_msg(bad == 0, "[%s] %zu of %zu cache bytes differ from the host codec's (first at %zu: %02x, want %02x)",
                      g_case, bad, nkv, first, got[first], want[first]);
        /* the dequantized cache (NaN past the valid rows) and, for a prefill, tpk_kv_dequant's copy of it */
        float *deq = hmalloc(nkv * sizeof(float));
        for (size_t i = 0; i < nkv; i++) deq[i] = tp_e4m3_to_f32(want[i]) * s;
        if (past == 0) {
            const size_t nd = 2 * (size_t)B * T * W;
            float *rows = hmalloc(nd * sizeof(float));
            for (int pl = 0; pl < 2; pl++)
                for (int b = 0; b < B; b++)
                    memcpy(rows + ((size_t)pl * B + b) * T * W, deq + ((size_t)pl * B + b) * L * W,
                           (size_t)T * W * sizeof(float));
            void *d_y = dev_alloc_at(dt, nd, 0);
            KERNEL_OK(tpk_kv_dequant(d_kv, d_s, d_y, dt, B, T, L, W, g_stream));
            ck_assert_msg(memcmp(download_bytes(d_y, nd * esize(dt)), encode(dt, rows, nd), nd * esize(dt)) == 0,
                          "[%s] tpk_kv_dequant differs from code * scale rounded to %s", g_case, dname(dt));
        }
        const float scale = 1.0f / sqrtf((float)D);
        float *ref = hmalloc(nq * sizeof(float));
        ref_kv_attention(q, deq, ref, B, T, H, Hkv, D, L, past, scale);
        const size_t ws_bytes = tpk_kv_attention_workspace(B, T, H, D, L);
        float *d_ws = ws_bytes ? dev_bytes(ws_bytes) : NULL;
        void *d_o = dev_alloc_at(dt, nq, 0);
        KERNEL_OK(tpk_kv_attention(d_q, d_kv, dt, TP_E4M3, d_s, d_o, dt, B, T, H, Hkv, D, L, d_past, scale, d_ws,
                                   ws_bytes, g_stream));
        check_close("attention on the fp8 cache", download_f32(dt, d_o, nq, 1.0f), ref, nq, (size_t)H * D, tol_for(dt));
        release_all();
    }
}
END_TEST

/* ================================================================================================================
 * rope_kv_append (the rope+kv_append fusion rule): the fused kernel's cache equals, byte for byte, the cache the
 * unfused pair writes (tpk_rope into a rotated copy, then tpk_kv_append), every other byte still the poison; in
 * every activation type and into an E4M3 cache; D 64, 128, 256; Llama's 8 KV heads, MQA's 1; a prefill of 197
 * tokens; a past beyond L - T writes nothing.
 * ============================================================================================================== */

START_TEST(test_rope_kv_append) {
    const tp_dtype dt = ACT[_i % 3];
    const int fp8 = _i >= 3; /* an E4M3 cache (16-bit keys only) */
    if (fp8 && dt == TP_F32) return;
    const tp_dtype kvdt = fp8 ? TP_E4M3 : dt;
    static const int cases[][6] = {/* B, T, Hkv, D, past, L */
                                   {1, 1, 8, 128, 1000, 1043}, {3, 5, 1, 256, 37, 1043}, {2, 37, 2, 64, 0, 60},
                                   {3, 197, 4, 64, 0, 257}};
    const tp_rope rope = {TP_ROPE_LLAMA3, 500000.0, 8.0, 1.0, 4.0, 8192};
    for (int c = 0; c < N_OF(cases); c++) {
        const int B = cases[c][0], T = cases[c][1], Hkv = cases[c][2], D = cases[c][3], past = cases[c][4];
        const int L = cases[c][5], W = Hkv * D;
        SET_CASE("rope_kv_append %s -> %s cache B=%d T=%d Hkv=%d D=%d past=%d L=%d", dname(dt), dname(kvdt), B, T, Hkv,
                 D, past, L);
        const size_t nk = (size_t)B * T * W, ncache = 2 * (size_t)B * L * W * esize(kvdt);
        float *k = host_normal(nk, 2300 + c, 0.0, 1.5), *v = host_normal(nk, 2400 + c, 0.0, 1.5);
        float *inv = hmalloc((size_t)D / 2 * sizeof(float));
        tp_rope_inv_freq(&rope, D, inv);
        const float s = 3.0f / 448.0f; /* the E4M3 cache's scale: |x| up to about 3 */
        void *d_k = dev_upload_at(dt, k, nk, 0), *d_v = dev_upload_at(dt, v, nk, 0), *d_kr = dev_alloc_at(dt, nk, 0);
        void *d_a = dev_bytes(ncache), *d_b = dev_bytes(ncache);
        float *d_inv = dev_floats(inv, (size_t)D / 2), *d_s = dev_scalar(s);
        int *d_past = dev_past(past);
        KERNEL_OK(tpk_rope(d_k, dt, d_kr, dt, B, T, Hkv, D, d_inv, d_past, g_stream));
        KERNEL_OK(tpk_kv_append(d_kr, d_v, d_a, dt, kvdt, d_s, B, T, L, W, d_past, g_stream));
        KERNEL_OK(tpk_rope_kv_append(d_k, d_v, d_b, dt, kvdt, d_s, B, T, L, Hkv, D, d_inv, d_past, g_stream));
        const unsigned char *a = download_bytes(d_a, ncache), *b = download_bytes(d_b, ncache);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < ncache; i++)
            if (a[i] != b[i] && bad++ == 0) first = i;
        printf("  %s  %s | %zu of %zu cache bytes differ from the unfused pair's\n", bad ? "FAIL" : "ok  ", g_case, bad,
               ncache);
        fflush(stdout);
        ck_assert_msg(bad == 0, "[%s] %zu cache bytes differ from the unfused pair's (first at %zu: %02x, want %02x)",
                      g_case, bad, first, b[first], a[first]);
        SET_CASE("rope_kv_append %s past=%d (> L - T) L=%d", dname(dt), L - T + 1, L);
        void *d_c = dev_bytes(ncache);
        set_past(d_past, L - T + 1);
        KERNEL_OK(tpk_rope_kv_append(d_k, d_v, d_c, dt, kvdt, d_s, B, T, L, Hkv, D, d_inv, d_past, g_stream));
        check_untouched("cache", d_c, 0, ncache);
        release_all();
    }
}
END_TEST

/* One graph, captured once with the device past pointer, replayed at two positions: each replay equals the eager
 * launch at that position byte for byte, and the reference. The cache is valid up to the larger position. */
START_TEST(test_kv_attention_graph) {
    static const int cases[][5] = {{1, 32, 8, 128, 1}, {1, 8, 1, 256, 5}, {3, 8, 2, 64, 5}}; /* B, H, Hkv, D, T */
    const tp_dtype dt = TP_F16;
    const int L = 1043, pasts[2] = {37, 1000};
    const int c = _i, B = cases[c][0], H = cases[c][1], Hkv = cases[c][2], D = cases[c][3], T = cases[c][4];
    const int W = Hkv * D;
    const float scale = 1.0f / sqrtf((float)D);
    const size_t nq = (size_t)B * T * H * D, nkv = 2 * (size_t)B * L * W, ob = nq * esize(dt);
    const size_t ws_bytes = tpk_kv_attention_workspace(B, T, H, D, L);
    float *q = host_normal(nq, 1600 + c, 0.0, 1.5), *kv = host_cache(dt, B, L, W, pasts[1] + T, 1700 + c);
    round_to(dt, q, nq);
    void *d_q = dev_upload_at(dt, q, nq, 0), *d_kv = dev_upload_at(dt, kv, nkv, 0);
    void *d_graph_o = dev_alloc_at(dt, nq, 0), *d_eager_o = dev_alloc_at(dt, nq, 0);
    float *d_ws = ws_bytes ? dev_bytes(ws_bytes) : NULL, *ref = hmalloc(nq * sizeof(float));
    int *d_past = dev_past(pasts[0]);
    kva_ctx ctx = {d_q, d_kv, dt, dt, B, T, H, Hkv, D, L, d_past, scale, d_ws, ws_bytes};

    SET_CASE("kv_attention graph B=%d T=%d H=%d Hkv=%d D=%d: capture", B, T, H, Hkv, D);
    cudaStream_t cs;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    const int r = kva_launch(&ctx, d_graph_o, cs);
    const cudaError_t ec = cudaStreamEndCapture(cs, &graph);
    ck_assert_msg(r == 0, "[%s] launch inside capture returned %d", g_case, r);
    CUDA_OK(ec);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int k = 0; k < 2; k++) {
        SET_CASE("kv_attention graph B=%d T=%d H=%d Hkv=%d D=%d past=%d", B, T, H, Hkv, D, pasts[k]);
        set_past(d_past, pasts[k]);
        CUDA_OK(cudaMemsetAsync(d_graph_o, 0xFF, ob, g_stream));
        CUDA_OK(cudaMemsetAsync(d_eager_o, 0xFF, ob, g_stream));
        CUDA_OK(cudaStreamSynchronize(g_stream));
        CUDA_OK(cudaGraphLaunch(exec, cs));
        CUDA_OK(cudaStreamSynchronize(cs));
        KERNEL_OK(kva_launch(&ctx, d_eager_o, g_stream));
        check_bytes_equal("replay vs eager", dt, download_bytes(d_graph_o, ob), download_bytes(d_eager_o, ob), nq,
                          (size_t)H * D);
        ref_kv_attention(q, kv, ref, B, T, H, Hkv, D, L, pasts[k], scale);
        check_close("replay vs reference", download_f32(dt, d_graph_o, nq, 1.0f), ref, nq, (size_t)H * D, kva_tol(dt));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(cs);
}
END_TEST

/* ================================================================================================================
 * A decode step as one CUDA graph: ids -> token_embed -> rmsnorm -> rope (q and k, in place) -> kv_append ->
 * kv_attention -> glu -> last_token -> argmax (into the ids buffer: the next replay's token) -> advance(past).
 * Captured once, replayed STEPS times from past = P0; the same sequence run eagerly from the same state must leave
 * the same ids, cache, output and past, byte for byte (every kernel is deterministic; the graph only changes
 * when they run). MHA with C = H D = 512 = V, so the argmax of a 512-wide row is a valid token; L = 200 gives 4
 * chunks (the split and combine kernels).
 * ============================================================================================================== */

enum { DC_B = 2, DC_H = 8, DC_D = 64, DC_C = DC_H * DC_D, DC_V = DC_C, DC_L = 200, DC_P0 = 37, DC_STEPS = 3 };

typedef struct {
    float *ids, *ws;
    void *table, *w, *x, *h, *q, *k, *kv, *att, *g, *last;
    float *inv;
    int *past;
    size_t ws_bytes;
} dchain;

static int dchain_enqueue(const dchain *c, cudaStream_t s) {
    const tp_dtype dt = TP_BF16;
    const size_t n = (size_t)DC_B * DC_C;
    int r = tpk_token_embed(c->ids, c->table, dt, c->x, dt, DC_B, DC_C, DC_V, 4.0f, s);
    if (!r) r = tpk_rmsnorm(c->x, dt, c->w, dt, c->h, dt, DC_B, DC_C, 1e-6f, 1.0f, s);
    if (!r) r = tpk_rope(c->h, dt, c->q, dt, DC_B, 1, DC_H, DC_D, c->inv, c->past, s);
    if (!r) r = tpk_rope(c->x, dt, c->k, dt, DC_B, 1, DC_H, DC_D, c->inv, c->past, s);
    if (!r) r = tpk_kv_append(c->k, c->h, c->kv, dt, dt, NULL, DC_B, 1, DC_L, DC_C, c->past, s);
    if (!r) r = tpk_kv_attention(c->q, c->kv, dt, dt, NULL, c->att, dt, DC_B, 1, DC_H, DC_H, DC_D, DC_L, c->past, 0.125f, c->ws,
                                 c->ws_bytes, s);
    if (!r) r = tpk_glu(c->att, c->x, dt, c->g, dt, n, 1, s);
    if (!r) r = tpk_last_token(c->g, c->last, dt, DC_B, 1, DC_C, s);
    if (!r) r = tpk_argmax(c->last, dt, c->ids, DC_B, DC_C, s);
    if (!r) r = tpk_advance(c->past, 1, s);
    return r;
}

/* the state a run starts from: the first tokens, the cache holding `prefix` (random rows: positions before P0
 * are the prompt's, those after are never read), past = P0 */
static void dchain_reset(const dchain *c, const float *ids0, const void *prefix) {
    const size_t nkv = 2 * (size_t)DC_B * DC_L * DC_C * esize(TP_BF16);
    CUDA_OK(cudaMemcpyAsync(c->ids, ids0, DC_B * sizeof(float), cudaMemcpyHostToDevice, g_stream));
    CUDA_OK(cudaMemcpyAsync(c->kv, prefix, nkv, cudaMemcpyHostToDevice, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
    set_past(c->past, DC_P0);
}

START_TEST(test_decode_graph) {
    SET_CASE("decode step graph: %d replays from past %d", DC_STEPS, DC_P0);
    const tp_dtype dt = TP_BF16;
    const size_t n = (size_t)DC_B * DC_C, nkv = 2 * (size_t)DC_B * DC_L * DC_C;
    dchain c;
    c.table = dev_upload_at(dt, host_normal((size_t)DC_V * DC_C, 1800, 0.0, 1.0), (size_t)DC_V * DC_C, 0);
    c.w = dev_upload_at(dt, host_normal(DC_C, 1801, 0.0, 0.3), DC_C, 0);
    c.x = dev_alloc_at(dt, n, 0), c.h = dev_alloc_at(dt, n, 0), c.q = dev_alloc_at(dt, n, 0);
    c.k = dev_alloc_at(dt, n, 0), c.att = dev_alloc_at(dt, n, 0), c.g = dev_alloc_at(dt, n, 0);
    c.last = dev_alloc_at(dt, n, 0), c.kv = dev_alloc_at(dt, nkv, 0);
    c.ids = dev_alloc_at(TP_F32, DC_B, 0);
    float inv[DC_D / 2];
    const tp_rope rope = {TP_ROPE_DEFAULT, 10000.0, 0, 0, 0, 0};
    tp_rope_inv_freq(&rope, DC_D, inv);
    c.inv = dev_floats(inv, DC_D / 2);
    c.past = dev_past(DC_P0);
    c.ws_bytes = tpk_kv_attention_workspace(DC_B, 1, DC_H, DC_D, DC_L);
    c.ws = c.ws_bytes ? dev_bytes(c.ws_bytes) : NULL;
    const float ids0[DC_B] = {7.0f, 300.0f};

    /* eager: STEPS steps on g_stream */
    const void *prefix = encode(dt, host_normal(nkv, 1802, 0.0, 1.0), nkv);
    dchain_reset(&c, ids0, prefix);
    for (int s = 0; s < DC_STEPS; s++) LAUNCH_OK(dchain_enqueue(&c, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
    const void *ids_e = download_bytes(c.ids, DC_B * sizeof(float)), *kv_e = download_bytes(c.kv, nkv * esize(dt));
    const void *att_e = download_bytes(c.att, n * esize(dt));
    const int past_e = get_past(c.past);
    ck_assert_msg(past_e == DC_P0 + DC_STEPS, "[%s] eager past %d, want %d", g_case, past_e, DC_P0 + DC_STEPS);
    const float *ide = ids_e;
    for (int b = 0; b < DC_B; b++)
        ck_assert_msg(ide[b] >= 0.0f && ide[b] < (float)DC_V && ide[b] == floorf(ide[b]), "[%s] eager id %g", g_case,
                      ide[b]);

    /* graph: captured once, replayed STEPS times from the same state */
    dchain_reset(&c, ids0, prefix);
    cudaStream_t cs;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    const int r = dchain_enqueue(&c, cs);
    const cudaError_t ec = cudaStreamEndCapture(cs, &graph);
    ck_assert_msg(r == 0, "[%s] an op refused inside capture: %d", g_case, r);
    CUDA_OK(ec);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int s = 0; s < DC_STEPS; s++) CUDA_OK(cudaGraphLaunch(exec, cs));
    CUDA_OK(cudaStreamSynchronize(cs));
    ck_assert_int_eq(get_past(c.past), DC_P0 + DC_STEPS);
    check_bytes_equal("ids (graph vs eager)", TP_F32, download_bytes(c.ids, DC_B * sizeof(float)), ids_e, DC_B, DC_B);
    check_bytes_equal("cache (graph vs eager)", dt, download_bytes(c.kv, nkv * esize(dt)), kv_e, nkv, DC_C);
    check_bytes_equal("attention (graph vs eager)", dt, download_bytes(c.att, n * esize(dt)), att_e, n, DC_C);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(cs);
}
END_TEST

/* ================================================================================================================
 * Argument checks: refused with cudaErrorInvalidValue without a launch; empty work is a successful no-op.
 * ============================================================================================================== */

START_TEST(test_decoder_rejects) {
    SET_CASE("decoder kernel argument checks");
    void *buf = dev_bytes(1 << 20);
    float *ws = dev_bytes(64);
    int *past = dev_past(0);
    const size_t ws_need = tpk_kv_attention_workspace(1, 1, 32, 128, 1043);
    const rejected_call r[] = {
        {"token_embed e4m3 table", tpk_token_embed(buf, buf, TP_E4M3, buf, TP_F16, 2, 8, 4, 1.0f, g_stream)},
        {"token_embed V = 0", tpk_token_embed(buf, buf, TP_F16, buf, TP_F16, 2, 8, 0, 1.0f, g_stream)},
        {"rmsnorm C = 0", tpk_rmsnorm(buf, TP_F16, buf, TP_F16, buf, TP_F16, 2, 0, 1e-6f, 0.0f, g_stream)},
        {"rmsnorm e5m2 output", tpk_rmsnorm(buf, TP_F16, buf, TP_F16, buf, TP_E5M2, 2, 8, 1e-6f, 0.0f, g_stream)},
        {"rope D odd", tpk_rope(buf, TP_F16, buf, TP_F16, 1, 1, 2, 63, buf, past, g_stream)},
        {"rope D 2048", tpk_rope(buf, TP_F16, buf, TP_F16, 1, 1, 2, 2048, buf, past, g_stream)},
        {"rope in place f32 -> f16", tpk_rope(buf, TP_F32, buf, TP_F16, 1, 1, 2, 64, buf, past, g_stream)},
        {"rope without past", tpk_rope(buf, TP_F16, buf, TP_F16, 1, 1, 2, 64, buf, NULL, g_stream)},
        {"glu act 2", tpk_glu(buf, buf, TP_F16, buf, TP_F16, 16, 2, g_stream)},
        {"glu in place f16 -> f32", tpk_glu(buf, buf, TP_F16, buf, TP_F32, 16, 0, g_stream)},
        {"kv_append T > L", tpk_kv_append(buf, buf, buf, TP_F16, TP_F16, NULL, 1, 5, 4, 8, past, g_stream)},
        {"kv_append e4m3 inputs", tpk_kv_append(buf, buf, buf, TP_E4M3, TP_E4M3, NULL, 1, 1, 4, 8, past, g_stream)},
        {"kv_append e4m3 cache without a scale", tpk_kv_append(buf, buf, buf, TP_F16, TP_E4M3, NULL, 1, 1, 4, 8, past, g_stream)},
        {"kv_append e4m3 cache from f32", tpk_kv_append(buf, buf, buf, TP_F32, TP_E4M3, (const float *)buf, 1, 1, 4, 8, past, g_stream)},
        {"kv_append e4m3 cache, W odd", tpk_kv_append(buf, buf, buf, TP_F16, TP_E4M3, (const float *)buf, 1, 1, 4, 7, past, g_stream)},
        {"kv_append odd f16 address", tpk_kv_append((char *)buf + 1, buf, buf, TP_F16, TP_F16, NULL, 1, 1, 4, 8, past, g_stream)},
        {"last_token T = 0", tpk_last_token(buf, buf, TP_F16, 1, 0, 8, g_stream)},
        {"argmax N = 0", tpk_argmax(buf, TP_F16, buf, 1, 0, g_stream)},
        {"advance NULL", tpk_advance(NULL, 1, g_stream)},
        {"kv_attention D 96", tpk_kv_attention(buf, buf, TP_F16, TP_F16, NULL, buf, TP_F16, 1, 1, 4, 4, 96, 60, past, 0.1f, NULL, 0, g_stream)},
        {"kv_attention D 80", tpk_kv_attention(buf, buf, TP_F16, TP_F16, NULL, buf, TP_F16, 1, 1, 4, 4, 80, 60, past, 0.1f, NULL, 0, g_stream)},
        {"kv_attention H % Hkv", tpk_kv_attention(buf, buf, TP_F16, TP_F16, NULL, buf, TP_F16, 1, 1, 6, 4, 64, 60, past, 0.1f, NULL, 0, g_stream)},
        {"kv_attention T > L", tpk_kv_attention(buf, buf, TP_F16, TP_F16, NULL, buf, TP_F16, 1, 61, 4, 4, 64, 60, past, 0.1f, NULL, 0, g_stream)},
        {"kv_attention e4m3", tpk_kv_attention(buf, buf, TP_E4M3, TP_E4M3, NULL, buf, TP_F16, 1, 1, 4, 4, 64, 60, past, 0.1f, NULL, 0, g_stream)},
        {"kv_attention e4m3 cache without a scale", tpk_kv_attention(buf, buf, TP_F16, TP_E4M3, NULL, buf, TP_F16, 1, 1, 4, 4, 64, 60, past, 0.1f, NULL, 0, g_stream)},
        {"kv_attention e4m3 cache, f32 output", tpk_kv_attention(buf, buf, TP_F16, TP_E4M3, (const float *)buf, buf, TP_F32, 1, 1, 4, 4, 64, 60, past, 0.1f, NULL, 0, g_stream)},
        {"kv_attention misaligned cache", tpk_kv_attention(buf, (char *)buf + 2, TP_F16, TP_F16, NULL, buf, TP_F16, 1, 1, 4, 4, 64, 60, past, 0.1f, NULL, 0, g_stream)},
        {"kv_attention without past", tpk_kv_attention(buf, buf, TP_F16, TP_F16, NULL, buf, TP_F16, 1, 1, 4, 4, 64, 60, NULL, 0.1f, NULL, 0, g_stream)},
        {"kv_attention no workspace", tpk_kv_attention(buf, buf, TP_F16, TP_F16, NULL, buf, TP_F16, 1, 1, 32, 8, 128, 1043, past, 0.1f, NULL, 0, g_stream)},
        {"kv_attention workspace too small", tpk_kv_attention(buf, buf, TP_F16, TP_F16, NULL, buf, TP_F16, 1, 1, 32, 8, 128, 1043, past, 0.1f, ws, 64, g_stream)},
    };
    check_rejected(r, sizeof r / sizeof r[0]);
    /* sizes: one chunk needs no workspace; Llama's decode step at L = 1043: 17 chunks of (D + 2) floats a row */
    ck_assert_uint_eq(tpk_kv_attention_workspace(1, 3, 8, 64, 60), 0);
    ck_assert_uint_eq(ws_need, 17 * 32 * (128 + 2) * sizeof(float));
    ck_assert_uint_eq(tpk_kv_attention_workspace(1, 1, 32, 96, 1043), 0);
    /* empty work */
    ck_assert_int_eq(tpk_rmsnorm(buf, TP_F16, buf, TP_F16, buf, TP_F16, 0, 8, 1e-6f, 0.0f, g_stream), 0);
    ck_assert_int_eq(tpk_glu(buf, buf, TP_F16, buf, TP_F16, 0, 0, g_stream), 0);
    ck_assert_int_eq(tpk_kv_attention(buf, buf, TP_F16, TP_F16, NULL, buf, TP_F16, 0, 1, 4, 4, 64, 60, past, 0.1f, NULL, 0, g_stream), 0);
    ck_assert_int_eq(tpk_argmax(buf, TP_F16, buf, 0, 8, g_stream), 0);
    CUDA_OK(cudaStreamSynchronize(g_stream));
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------------------------- */

/* new_tcase (gpu_check.h): 600 s a test. The largest fp64 references: kv_attention's B 3, T 37 cases (~0.5 GFLOP). */
Suite *gpu_decoder_ops_suite(void) {
    Suite *s = suite_create("gpu_decoder_ops");
    tcase_add_loop_test(new_tcase(s, "token_embed"), test_token_embed, 0, N_OF(EMB_COMBOS));
    tcase_add_loop_test(new_tcase(s, "rmsnorm"), test_rmsnorm, 0, N_OF(RMS_COMBOS));
    tcase_add_loop_test(new_tcase(s, "rope"), test_rope, 0, N_OF(ROPE_COMBOS));
    tcase_add_loop_test(new_tcase(s, "glu"), test_glu, 0, N_OF(GLU_COMBOS));
    tcase_add_loop_test(new_tcase(s, "e4m3_outputs"), test_e4m3_outputs, 0, 2);
    tcase_add_loop_test(new_tcase(s, "rmsnorm_b128"), test_rmsnorm_b128, 0, 2);
    tcase_add_loop_test(new_tcase(s, "kv_append"), test_kv_append, 0, N_OF(ACT));
    tcase_add_loop_test(new_tcase(s, "rope_kv_append"), test_rope_kv_append, 0, 2 * N_OF(ACT));
    tcase_add_loop_test(new_tcase(s, "last_token"), test_last_token, 0, N_OF(ACT));
    tcase_add_loop_test(new_tcase(s, "argmax"), test_argmax, 0, N_OF(ACT));
    TCase *tc = new_tcase(s, "kv_attention");
    tcase_add_loop_test(tc, test_kv_attention, 0, N_OF(KVA_COMBOS));
    tcase_add_loop_test(tc, test_kv_attention_graph, 0, 3);
    tcase_add_loop_test(tc, test_kv_cache_fp8, 0, N_OF(KV8_DT));
    tcase_add_test(new_tcase(s, "decode_graph"), test_decode_graph);
    tcase_add_test(new_tcase(s, "decoder_rejects"), test_decoder_rejects);
    return s;
}
