/* test_gpu_sdpa.c: cuDNN's SDPA forward (tp_sdpa_*, src/exec/cuda/vendor/cudnn_sdpa.h) against the fp64 CPU reference
 * tp_cpu_attention, on the GPU.
 *
 * cuDNN is loaded at run time. Where it cannot be loaded (or the build had no cuDNN headers) every test prints
 * "skip" with the reason and passes, unless TPROF_REQUIRE_CUDNN is set to something other than "" or "0": then a
 * missing cuDNN fails the suite (set it where cuDNN is known to exist, e.g. on the GPU machines, whose venv has it).
 *
 * Method (as test_gpu_attention.c):
 *   - qkv ~ N(0, 2^2), never zero, rounded to the input type on the host BEFORE the reference runs, so only
 *     cuDNN's own error is measured. Scores q.k * D^-0.5 then have a standard deviation of 4: peaked softmaxes
 *     whose running max changes across key tiles (the online rescaling is exercised);
 *   - qkv is followed by PAD token rows of NaN (0xFF bytes) and out by PAD rows of poison: keys/queries past T
 *     must never be read (0 * NaN would poison an output) and no row past T written;
 *   - out is poisoned with 0xFF bytes (NaN in F16 and BF16); a NaN/Inf left fails;
 *   - shapes: T in {1, 197, 257, 577} (one key; ViT's 197 = 3 x 64 + 5 and 257 = 4 x 64 + 1, 577 = 9 x 64 + 1: no
 *     multiple of cuDNN's tiles, and no padding mask is given: the plan must take the real T), B in {1, 3},
 *     (H, D) in {(1, 64), (12, 64), (1, 128), (12, 128), (3, 80)}, plus B = 64, H = 12, D = 64 at T = 197 and 257
 *     (ViT-B/16 at batch 64); F16 and BF16. D = 64 and 128 must be supported; D = 80 is reported either way
 *     (cuDNN takes head dims that are multiples of 8; if an engine refuses it the line says "unsupported");
 *   - each plan runs twice into two buffers: the results must be equal bit for bit (new pointers rebuild the
 *     variant pack; the same engine must give the same bits);
 *   - other scales (one; zero and negative ones are refused), argument rejection, and capture into a CUDA graph
 *     (cold: the plan's first run; warm: after an eager run).
 *
 * Tolerances, from the formats (inputs are exact, so the error comes from):
 *   (a) P rounded to the input type before P V (flash attention's second GEMM takes fp16/bf16 operands): each
 *       term p_j v_j carries a relative error <= u_p (u_p = 2^-11 for fp16, 2^-8 for bf16), so
 *       |O~ - O| <= u_p * sum_j p_j |v_j| / l <= u_p * max|V|, for every element; fp16 P below 2^-14 is subnormal
 *       with absolute error <= 2^-25 per term: at most T * 2^-25 * max|V| more (l >= 1, the max term is 1);
 *   (b) the output rounding: <= u_o |y| with u_o = 2^-11 (F16), 2^-8 (BF16);
 *   (c) fp32 accumulation in the tensor cores and the exponential (relative error ~2^-22): ~1e-6, negligible.
 * Max abs error bound: 1.5 * ((a) + u_o * max|ref|): the bound with 50% slack. Relative L2 bound: the roundings
 * are independent and unbiased, so the expected relative L2 error is about sqrt(u_p^2 + u_o^2) / sqrt(3); bound
 * 2 (u_p + u_o) (a margin >= 3.5x).
 *
 * Seen on an H200 (2026-11-21), with both the system cuDNN 9.14.0 and the PyTorch venv's 9.19.0: every shape
 * passes (D = 80 included; D = 48 plans); worst relative L2 errors 2.2e-4 (f16, bound 2.0e-3) and 1.8e-3 (bf16, bound
 * 1.6e-2); both graph captures work (a memset and a kernel node) and replay bit for bit; scale 0 and negative
 * scales gave all-NaN outputs before tp_sdpa_create refused them; 1e-3 and 2^-20 are fine.
 *
 * The general plan (test_sdpa_ex below), cuDNN 9.19.0 on an H200 (2026-11-21,
 * bench/results/2026-11-21_h200_gpu_tests_sdpa_decoder.log): all 144 configurations plan and pass, the causal ones
 * with 1 < Tq <= Tkv through the composite graph (engine 2), the others through the unified operation (engines 8
 * and 9); worst relative L2 2.2e-4 (f16) and 1.8e-3 (bf16); Tq > Tkv causal refused up front as specified.
 *
 * CUDA (and cuDNN, whose handle creation initializes CUDA) is used only inside tests, never in the runner's
 * parent process. */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/vendor/cudnn_sdpa.h"
#include "formats/dtype.h"

#define TP_GPU_MAX_TRACKED 256
#include "gpu_check.h"
#include "attn_check.h"

Suite *gpu_sdpa_suite(void);

/* tp_sdpa_run returns a cudnnStatus_t (0 = success) */
#define SDPA_OK(call)                                                                                           \
    do {                                                                                                        \
        int r_ = (call);                                                                                        \
        ck_assert_msg(r_ == 0, "[%s] %s returned cuDNN status %d", g_case, #call, r_);                          \
        cudaError_t s_ = cudaStreamSynchronize(g_stream);                                                       \
        ck_assert_msg(s_ == cudaSuccess, "[%s] %s: failed while running: %s: %s", g_case, #call,                \
                      cudaGetErrorName(s_), cudaGetErrorString(s_));                                            \
    } while (0)

/* ---- fixture: the plan and the tracked resources are released per shape (release_case) and at teardown ----- */

static tp_sdpa *g_plan; /* the plan of the current case, destroyed by release_case */

static void release_case(void) {
    if (g_stream) cudaStreamSynchronize(g_stream);
    tp_sdpa_destroy(g_plan);
    g_plan = NULL;
    free_tracked();
}

static void setup(void) {
    g_plan = NULL;
    gpu_setup();
}

static void teardown(void) {
    release_case();
    close_stream();
}

/* 1 when cuDNN is usable; otherwise prints the skip reason and returns 0, or fails under TPROF_REQUIRE_CUDNN. */
static int cudnn_here(const char *test) {
    char msg[1024];
    const int ok = tp_sdpa_cudnn_available(msg, sizeof msg);
    return gpu_lib_here(test, ok, msg, "TPROF_REQUIRE_CUDNN");
}

static float *to_f32(tp_dtype dt, const void *raw, size_t n) {
    float *f = hmalloc(n * sizeof(float));
    tp_convert_to_f32(dt, raw, f, n, 1.0f);
    return f;
}

/* the bounds of the header comment */
static tol_t sdpa_tol(tp_dtype dt, int T, float vmax, float refmax) {
    const double u = unit_round(dt);
    const double pa = u * vmax + (dt == TP_F16 ? T * 0x1p-25 * vmax : 0.0);
    tol_t t;
    t.abs = 1.5 * (pa + u * refmax);
    t.rel_l2 = 2.0 * (u + u);
    return t;
}


static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const tp_dtype DT[] = {TP_F16, TP_BF16};
enum { PAD = 70 }; /* token rows of NaN after qkv and of poison after out: more than one 64-row tile */

/* Plans and runs one case against the reference; returns 0 when cuDNN refused the shape (printed), 1 when run.
 * `required`: a refusal fails the test. */
static int run_case(tp_dtype dt, int B, int T, int H, int D, float scale, int required, uint64_t seed) {
    const size_t row_in = (size_t)3 * H * D, row_out = (size_t)H * D;
    const size_t n_in = (size_t)B * T * row_in, n_out = (size_t)B * T * row_out;
    SET_CASE("sdpa %s B=%d T=%d H=%d D=%d scale=%g", dname(dt), B, T, H, D, scale);
    tp_error err = {0};
    const double t0 = now_s();
    const tp_status st = tp_sdpa_create(B, T, H, D, dt, scale, &g_plan, &err);
    const double t_plan = now_s() - t0;
    if (st == TP_ERR_UNSUPPORTED && !required) {
        printf("  unsupported  %s: %s\n", g_case, err.msg);
        fflush(stdout);
        return 0;
    }
    ck_assert_msg(st == TP_OK, "[%s] tp_sdpa_create: %s: %s", g_case, tp_status_name(st), err.msg);
    printf("  plan  %s: %s (planned in %.3f s)\n", g_case, tp_sdpa_describe(g_plan), t_plan);

    float *qkv = host_normal(n_in, seed, 0.0, 2.0);
    round_to(dt, qkv, n_in);
    float *ref = hmalloc(n_out * sizeof(float));
    tp_cpu_attention(qkv, ref, B, T, H, D, scale);
    const tol_t tol = sdpa_tol(dt, T, host_vmax(qkv, B, T, H, D), host_amax(ref, n_out));
    void *d_qkv = dev_upload(dt, qkv, n_in, n_in + PAD * row_in); /* the pad stays 0xFF: NaN */
    const size_t ob = n_out * esize(dt), ob_pad = (n_out + PAD * row_out) * esize(dt);
    void *d_o1 = dev_bytes(ob_pad), *d_o2 = dev_bytes(ob_pad);
    const size_t wsb = tp_sdpa_workspace_bytes(g_plan);
    void *ws = wsb ? dev_bytes(wsb) : NULL;
    SDPA_OK(tp_sdpa_run(g_plan, d_qkv, d_o1, ws, g_stream));
    SDPA_OK(tp_sdpa_run(g_plan, d_qkv, d_o2, ws, g_stream)); /* new out pointer: a new variant pack */
    const void *h1 = download_bytes(d_o1, ob), *h2 = download_bytes(d_o2, ob);
    check_close("out", to_f32(dt, h1, n_out), ref, n_out, row_out, tol);
    ck_assert_msg(memcmp(h1, h2, ob) == 0, "[%s] two runs of one plan differ", g_case);
    check_untouched("rows >= T of out", d_o1, ob, ob_pad);
    return 1;
}

/* ================================================================================================================
 * Every shape against the reference, per dtype.
 * ============================================================================================================== */

START_TEST(test_sdpa_shapes) {
    const tp_dtype dt = DT[_i];
    if (!cudnn_here("sdpa shapes")) return;
    static const int Ts[] = {1, 197, 257, 577}, Bs[] = {1, 3};
    static const int HD[][2] = {{1, 64}, {12, 64}, {1, 128}, {12, 128}, {3, 80}};
    uint64_t seed = 5100 + 1000 * (uint64_t)_i;
    int run = 0, refused = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++)
            for (size_t hi = 0; hi < sizeof HD / sizeof HD[0]; hi++) {
                const int T = Ts[ti], B = Bs[bi], H = HD[hi][0], D = HD[hi][1];
                const int ok = run_case(dt, B, T, H, D, 1.0f / sqrtf((float)D), D != 80, seed++);
                run += ok, refused += !ok;
                release_case();
            }
    /* ViT-B/16 at batch 64 */
    for (int T = 197; T <= 257; T += 60) {
        run += run_case(dt, 64, T, 12, 64, 0.125f, 1, seed++);
        release_case();
    }
    printf("  info  sdpa shapes %s: %d shapes checked, %d refused by cuDNN (D = 80 only)\n", dname(dt), run, refused);
}
END_TEST

/* ================================================================================================================
 * Scales other than D^-0.5 (the by-value scale tensor): 1 (scores with a standard deviation of 32 (D = 64) and
 * 45 (D = 128): near one-hot softmaxes) must pass; 0 and negative scales are refused by tp_sdpa_create (cuDNN 9.14
 * and 9.19 returned all-NaN outputs for 0 and -D^-0.5 on an H200, every call succeeding); small positive scales
 * (1e-3, 2^-20: nearly uniform weights) are reported, not required.
 * ============================================================================================================== */

START_TEST(test_sdpa_scales) {
    const tp_dtype dt = DT[_i];
    if (!cudnn_here("sdpa scales")) return;
    static const int cases[][4] = {{2, 197, 3, 64}, {1, 70, 2, 128}}; /* B, T, H, D */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int B = cases[c][0], T = cases[c][1], H = cases[c][2], D = cases[c][3];
        run_case(dt, B, T, H, D, 1.0f, 1, 9000 + 10 * c);
        release_case();
        const float refused[] = {0.0f, -1.0f / sqrtf((float)D), NAN};
        for (size_t si = 0; si < sizeof refused / sizeof refused[0]; si++) {
            tp_error err = {0};
            const tp_status st = tp_sdpa_create(B, T, H, D, dt, refused[si], &g_plan, &err);
            printf("  %s  sdpa %s scale %g refused: %s: %s\n", st == TP_ERR_UNSUPPORTED ? "ok  " : "FAIL", dname(dt),
                   (double)refused[si], tp_status_name(st), err.msg);
            ck_assert_msg(st == TP_ERR_UNSUPPORTED && g_plan == NULL, "scale %g: %s", (double)refused[si],
                          tp_status_name(st));
        }
        /* small positive scales: reported only */
        const float small[] = {1e-3f, 0x1p-20f};
        for (size_t si = 0; si < sizeof small / sizeof small[0]; si++) {
            const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D;
            SET_CASE("sdpa %s B=%d T=%d H=%d D=%d scale=%g", dname(dt), B, T, H, D, (double)small[si]);
            tp_error err = {0};
            ck_assert_msg(tp_sdpa_create(B, T, H, D, dt, small[si], &g_plan, &err) == TP_OK, "[%s] %s", g_case, err.msg);
            float *qkv = host_normal(n_in, 9500 + 10 * c + si, 0.0, 2.0);
            round_to(dt, qkv, n_in);
            float *ref = hmalloc(n_out * sizeof(float));
            tp_cpu_attention(qkv, ref, B, T, H, D, small[si]);
            void *d_qkv = dev_upload(dt, qkv, n_in, n_in), *d_o = dev_bytes(n_out * esize(dt));
            const size_t wsb = tp_sdpa_workspace_bytes(g_plan);
            SDPA_OK(tp_sdpa_run(g_plan, d_qkv, d_o, wsb ? dev_bytes(wsb) : NULL, g_stream));
            const float *got = to_f32(dt, download_bytes(d_o, n_out * esize(dt)), n_out);
            size_t bad = 0;
            double num = 0.0, den = 0.0;
            for (size_t i = 0; i < n_out; i++) {
                if (!isfinite(got[i])) {
                    bad++;
                    continue;
                }
                num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
                den += (double)ref[i] * ref[i];
            }
            printf("  info  %s (not required): %zu NaN/Inf of %zu, rel_l2 %.3e (bound %.1e)\n", g_case, bad, n_out,
                   den > 0.0 ? sqrt(num / den) : 0.0, 4.0 * unit_round(dt));
            fflush(stdout);
            release_case();
        }
    }
}
END_TEST

/* ================================================================================================================
 * Rejected arguments: TP_ERR_ARG / TP_ERR_UNSUPPORTED from create (no plan, no crash), CUDNN_STATUS_BAD_PARAM
 * (2000) from run for NULL or misaligned pointers, nothing enqueued.
 * ============================================================================================================== */

START_TEST(test_sdpa_rejects) {
    SET_CASE("sdpa rejects");
    tp_sdpa *s = (tp_sdpa *)(uintptr_t)1;
    tp_error err;
    const struct {
        const char *what;
        int B, T, H, D;
        tp_dtype dt;
        tp_status want;
    } c[] = {
        {"B = 0", 0, 4, 1, 64, TP_F16, TP_ERR_ARG},
        {"T = -1", 1, -1, 1, 64, TP_F16, TP_ERR_ARG},
        {"f32", 1, 4, 1, 64, TP_F32, TP_ERR_UNSUPPORTED},
        {"e4m3", 1, 4, 1, 64, TP_E4M3, TP_ERR_UNSUPPORTED},
        {"D = 33 (K misaligned)", 1, 4, 1, 33, TP_F16, TP_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        memset(&err, 0, sizeof err);
        s = (tp_sdpa *)(uintptr_t)1;
        const tp_status st = tp_sdpa_create(c[i].B, c[i].T, c[i].H, c[i].D, c[i].dt, 0.1f, &s, &err);
        printf("  %s  %s: %s: %s\n", st == c[i].want ? "ok  " : "FAIL", c[i].what, tp_status_name(st), err.msg);
        ck_assert_msg(st == c[i].want, "%s: got %s (%s), want %s", c[i].what, tp_status_name(st), err.msg,
                      tp_status_name(c[i].want));
        ck_assert_msg(s == NULL, "%s: *out not cleared on failure", c[i].what);
    }
    ck_assert_int_eq(tp_sdpa_create(1, 4, 1, 64, TP_F16, 0.1f, NULL, &err), TP_ERR_ARG);
    ck_assert_int_eq((int)tp_sdpa_workspace_bytes(NULL), 0);
    tp_sdpa_destroy(NULL);
    ck_assert_int_eq(tp_sdpa_run(NULL, NULL, NULL, NULL, g_stream), 2000);
    if (!cudnn_here("sdpa rejects")) return;
    /* D = 48: a multiple of 8 that tprof's kernels do not take; cuDNN may: either answer is fine, but no crash */
    tp_status st48 = tp_sdpa_create(1, 4, 1, 48, TP_F16, 0.1f, &g_plan, &err);
    printf("  info  D = 48: %s%s%s\n", tp_status_name(st48), st48 ? ": " : "", st48 ? err.msg : "");
    ck_assert_msg(st48 == TP_OK || st48 == TP_ERR_UNSUPPORTED, "D = 48: %s: %s", tp_status_name(st48), err.msg);
    release_case();
    ck_assert_int_eq(tp_sdpa_create(2, 8, 2, 64, TP_F16, 0.125f, &g_plan, &err), TP_OK);
    char *buf = dev_bytes(1 << 16);
    const size_t wsb = tp_sdpa_workspace_bytes(g_plan);
    void *ws = wsb ? dev_bytes(wsb) : NULL;
    const struct {
        const char *what;
        int got;
    } r[] = {
        {"NULL qkv", tp_sdpa_run(g_plan, NULL, buf + 8192, ws, g_stream)},
        {"NULL out", tp_sdpa_run(g_plan, buf, NULL, ws, g_stream)},
        {"qkv not 16-byte aligned", tp_sdpa_run(g_plan, buf + 2, buf + 8192, ws, g_stream)},
        {"out not 16-byte aligned", tp_sdpa_run(g_plan, buf, buf + 8194, ws, g_stream)},
        {"workspace missing", wsb ? tp_sdpa_run(g_plan, buf, buf + 8192, NULL, g_stream) : 2000},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        printf("  %s  %s: returned %d\n", r[i].got == 2000 ? "ok  " : "FAIL", r[i].what, r[i].got);
        ck_assert_msg(r[i].got == 2000, "%s: returned %d, want 2000 (CUDNN_STATUS_BAD_PARAM)", r[i].what, r[i].got);
    }
    CUDA_OK(cudaStreamSynchronize(g_stream));
    CUDA_OK(cudaGetLastError());
}
END_TEST

/* ================================================================================================================
 * Graph capture in global mode (any synchronizing or allocating call inside fails the capture). Two captures:
 *   cold: the plan's very first run is captured (cuDNN may do one-time work on a first execute): reported, and
 *         the replay checked when it captures, but a refusal is not a failure;
 *   warm: after one eager run, as an engine captures its forward pass after warmup: must capture, and the replay
 *         must equal the eager result bit for bit.
 * ============================================================================================================== */

START_TEST(test_sdpa_graph) {
    if (!cudnn_here("sdpa graph")) return;
    const int B = 3, T = 197, H = 12, D = 64;
    const size_t n_in = (size_t)B * T * 3 * H * D, n_out = (size_t)B * T * H * D, ob = n_out * 2;
    for (int warm = 0; warm <= 1; warm++) {
        SET_CASE("sdpa graph capture (%s) f16 B=%d T=%d H=%d D=%d", warm ? "warm" : "cold", B, T, H, D);
        tp_error err = {0};
        ck_assert_msg(tp_sdpa_create(B, T, H, D, TP_F16, 0.125f, &g_plan, &err) == TP_OK, "[%s] %s", g_case, err.msg);
        void *d_qkv = dev_upload(TP_F16, host_normal(n_in, 8000, 0.0, 2.0), n_in, n_in);
        void *d_a = dev_bytes(ob), *d_b = dev_bytes(ob);
        const size_t wsb = tp_sdpa_workspace_bytes(g_plan);
        void *ws = wsb ? dev_bytes(wsb) : NULL;
        cudaStream_t cs;
        CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
        if (warm) {
            SDPA_OK(tp_sdpa_run(g_plan, d_qkv, d_b, ws, g_stream));
            CUDA_OK(cudaMemset(d_b, 0xFF, ob));
        }
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
        const int r = tp_sdpa_run(g_plan, d_qkv, d_a, ws, cs);
        const cudaError_t ec = cudaStreamEndCapture(cs, &graph);
        if (r != 0 || ec != cudaSuccess) {
            cudaGetLastError(); /* clear the (not sticky) error a failed capture leaves */
            printf("  %s  %s: not capturable: tp_sdpa_run returned %d, cudaStreamEndCapture %s\n",
                   warm ? "FAIL" : "info", g_case, r, cudaGetErrorName(ec));
            fflush(stdout);
            if (graph) cudaGraphDestroy(graph);
            cudaStreamDestroy(cs);
            ck_assert_msg(!warm, "[%s] capture failed: run %d, end capture %s", g_case, r, cudaGetErrorName(ec));
            release_case();
            continue;
        }
        size_t nodes = 0;
        CUDA_OK(cudaGraphGetNodes(graph, NULL, &nodes));
        char kinds[128] = "";
        cudaGraphNode_t list[16];
        size_t nl = nodes < 16 ? nodes : 16;
        CUDA_OK(cudaGraphGetNodes(graph, list, &nl));
        for (size_t i = 0; i < nl; i++) {
            enum cudaGraphNodeType ty;
            CUDA_OK(cudaGraphNodeGetType(list[i], &ty));
            const size_t len = strlen(kinds);
            snprintf(kinds + len, sizeof kinds - len, "%s%s", i ? "," : "",
                     ty == cudaGraphNodeTypeKernel ? "kernel" : ty == cudaGraphNodeTypeMemset ? "memset"
                     : ty == cudaGraphNodeTypeMemcpy ? "memcpy" : "other");
        }
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        CUDA_OK(cudaGraphLaunch(exec, cs));
        CUDA_OK(cudaStreamSynchronize(cs));
        CUDA_OK(cudaGraphLaunch(exec, cs)); /* a second replay: same bits */
        CUDA_OK(cudaStreamSynchronize(cs));
        SDPA_OK(tp_sdpa_run(g_plan, d_qkv, d_b, ws, g_stream));
        const unsigned char *a = download_bytes(d_a, ob), *b = download_bytes(d_b, ob);
        size_t diff = 0;
        for (size_t i = 0; i < ob; i++) diff += a[i] != b[i];
        printf("  %s  %s: captured %zu graph node(s) (%s); replay vs eager: %zu of %zu bytes differ\n",
               diff ? "FAIL" : "ok  ", g_case, nodes, kinds, diff, ob);
        fflush(stdout);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(cs);
        ck_assert_msg(diff == 0, "[%s] graph replay differs from the eager run in %zu bytes", g_case, diff);
        release_case();
    }
}
END_TEST

/* ================================================================================================================
 * The general plan (tp_sdpa_create_ex / tp_sdpa_run_ex): separate strided Q, K, V, O; Tq != Tkv; GQA; causal with
 * the bottom-right diagonal; against tp_cpu_attention_ex. Layout as test_gpu_attention.c's flash_ex test: rows
 * longer than their heads and batches longer than their rows, NaN in the input gaps (never to be read), poison in
 * the output gaps (never to be written), O poisoned before each run.
 * Shapes, each in 4 configurations (B, H, Hkv, D) = (1, 8, 2, 128), (3, 4, 4, 64), (3, 8, 2, 64), (1, 4, 4, 128):
 * D 64 and 128, batch 1 and 3, GQA (G = 4) and MHA, in every pairing of two (each new shape can cost cuDNN a
 * runtime compilation, so not all 8 combinations):
 *   required (a refusal fails): non-causal Tq in {1, 7} x Tkv in {1, 63, 1000, 8192}; causal Tq = 1 with those Tkv
 *   (the one query sees every key); causal Tq = Tkv in {197, 577} (cuDNN's everyday causal case);
 *   allowed to be refused (printed "unsupported"), but checked when planned: causal Tq 7 with Tkv 63, 1000, 8192,
 *   causal Tq 300 / Tkv 1000 (bottom-right with Tq < Tkv: the composite graph);
 *   refused by tp_sdpa_create_ex (TP_ERR_UNSUPPORTED, no plan): causal Tq > Tkv (7 / 1, 100 / 37).
 * Tolerance: sdpa_tol with T = Tkv.
 * ============================================================================================================== */

typedef struct {
    int Tq, Tkv, causal, need; /* need: 1 required, 0 may be refused, -1 must be refused */
} sdpa_ex_shape;

START_TEST(test_sdpa_ex) {
    const tp_dtype dt = DT[_i];
    if (!cudnn_here("sdpa ex")) return;
    static const sdpa_ex_shape shapes[] = {
        {1, 1, 0, 1},    {1, 63, 0, 1},   {1, 1000, 0, 1},   {1, 8192, 0, 1},  {7, 1, 0, 1},
        {7, 63, 0, 1},   {7, 1000, 0, 1}, {7, 8192, 0, 1},   {1, 1, 1, 1},     {1, 63, 1, 1},
        {1, 1000, 1, 1}, {1, 8192, 1, 1}, {197, 197, 1, 1},  {577, 577, 1, 1}, {7, 63, 1, 0},
        {7, 1000, 1, 0}, {7, 8192, 1, 0}, {300, 1000, 1, 0}, {7, 1, 1, -1},    {100, 37, 1, -1},
    };
    static const int cfg[][4] = {{1, 8, 2, 128}, {3, 4, 4, 64}, {3, 8, 2, 64}, {1, 4, 4, 128}}; /* B H Hkv D */
    uint64_t seed = 60000 + 1000 * (uint64_t)_i;
    int run = 0, refused = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
            const sdpa_ex_shape sh = shapes[si];
            const int B = cfg[ci][0], H = cfg[ci][1], Hkv = cfg[ci][2], D = cfg[ci][3];
            tp_sdpa_desc d;
            memset(&d, 0, sizeof d);
            d.B = B, d.H = H, d.Hkv = Hkv, d.Tq = sh.Tq, d.Tkv = sh.Tkv, d.D = D, d.causal = sh.causal;
            d.scale = 1.0f / sqrtf((float)D), d.dt = dt;
            d.q_row_stride = (long long)H * D + 16, d.q_batch_stride = sh.Tq * d.q_row_stride + 64;
            d.k_row_stride = (long long)Hkv * D + 8, d.k_batch_stride = sh.Tkv * d.k_row_stride + 64;
            d.v_row_stride = (long long)Hkv * D + 24, d.v_batch_stride = sh.Tkv * d.v_row_stride + 64;
            d.o_row_stride = (long long)H * D + 8, d.o_batch_stride = sh.Tq * d.o_row_stride + 64;
            SET_CASE("sdpa_ex %s B=%d H=%d Hkv=%d Tq=%d Tkv=%d D=%d %s", dname(dt), B, H, Hkv, sh.Tq, sh.Tkv, D,
                     sh.causal ? "causal" : "full");
            tp_error err = {0};
            const double t0 = now_s();
            const tp_status st = tp_sdpa_create_ex(&d, &g_plan, &err);
            const double t_plan = now_s() - t0;
            if (sh.need < 0) {
                printf("  %s  %s refused: %s: %s\n", st == TP_ERR_UNSUPPORTED ? "ok  " : "FAIL", g_case,
                       tp_status_name(st), err.msg);
                ck_assert_msg(st == TP_ERR_UNSUPPORTED && g_plan == NULL, "[%s] want TP_ERR_UNSUPPORTED, got %s",
                              g_case, tp_status_name(st));
                continue;
            }
            if (st == TP_ERR_UNSUPPORTED && sh.need == 0) {
                printf("  unsupported  %s: %s\n", g_case, err.msg);
                fflush(stdout);
                refused++;
                continue;
            }
            ck_assert_msg(st == TP_OK, "[%s] tp_sdpa_create_ex: %s: %s", g_case, tp_status_name(st), err.msg);
            printf("  plan  %s: %s (planned in %.3f s)\n", g_case, tp_sdpa_describe(g_plan), t_plan);
            float *q =
                host_strided_normal(dt, B, sh.Tq, (long long)H * D, d.q_row_stride, d.q_batch_stride, seed++, 2.0);
            float *k =
                host_strided_normal(dt, B, sh.Tkv, (long long)Hkv * D, d.k_row_stride, d.k_batch_stride, seed++, 2.0);
            float *v =
                host_strided_normal(dt, B, sh.Tkv, (long long)Hkv * D, d.v_row_stride, d.v_batch_stride, seed++, 2.0);
            const size_t n_dense = (size_t)B * sh.Tq * H * D;
            float *ref = hmalloc(n_dense * sizeof(float));
            const tp_cpu_attn_args ca = {q, k, v, ref, d.q_batch_stride, d.q_row_stride, d.k_batch_stride,
                                         d.k_row_stride, d.v_batch_stride, d.v_row_stride, (int64_t)sh.Tq * H * D,
                                         (int64_t)H * D, B, H, Hkv, sh.Tq, sh.Tkv, D, sh.causal, d.scale};
            tp_cpu_attention_ex(&ca);
            const tol_t tol = sdpa_tol(
                dt, sh.Tkv, host_strided_amax(v, B, sh.Tkv, (long long)Hkv * D, d.v_row_stride, d.v_batch_stride),
                host_amax(ref, n_dense));
            void *dq = dev_upload(dt, q, (size_t)B * d.q_batch_stride, (size_t)B * d.q_batch_stride);
            void *dk = dev_upload(dt, k, (size_t)B * d.k_batch_stride, (size_t)B * d.k_batch_stride);
            void *dv = dev_upload(dt, v, (size_t)B * d.v_batch_stride, (size_t)B * d.v_batch_stride);
            const size_t ob = (size_t)B * d.o_batch_stride * esize(dt);
            void *o = dev_bytes(ob);
            const size_t wsb = tp_sdpa_workspace_bytes(g_plan);
            void *ws = wsb ? dev_bytes(wsb) : NULL;
            SDPA_OK(tp_sdpa_run_ex(g_plan, dq, dk, dv, o, ws, g_stream));
            float *dense = hmalloc(n_dense * sizeof(float));
            const size_t touched = strided_gather(dt, download_bytes(o, ob), B, sh.Tq, (long long)H * D, d.o_row_stride,
                                                  d.o_batch_stride, 1.0f, dense);
            check_close("out", dense, ref, n_dense, (size_t)H * D, tol);
            ck_assert_msg(touched == 0, "[%s] %zu bytes of O outside its rows were written", g_case, touched);
            run++;
            release_case();
        }
    printf("  info  sdpa_ex %s: %d configurations checked, %d refused by cuDNN (allowed shapes only)\n", dname(dt), run,
           refused);
}
END_TEST

/* ---- suite ----------------------------------------------------------------------------------------------------- */

/* new_tcase (gpu_check.h): 600 s a test, for fp64 CPU references (up to ~20 GFLOP per dtype) and cuDNN plan
 * building */
Suite *gpu_sdpa_suite(void) {
    Suite *s = suite_create("gpu_sdpa");
    tcase_add_loop_test(new_tcase(s, "sdpa_shapes"), test_sdpa_shapes, 0, N_OF(DT));
    tcase_add_loop_test(new_tcase(s, "sdpa_scales"), test_sdpa_scales, 0, N_OF(DT));
    tcase_add_test(new_tcase(s, "sdpa_rejects"), test_sdpa_rejects);
    tcase_add_test(new_tcase(s, "sdpa_graph"), test_sdpa_graph);
    tcase_add_loop_test(new_tcase(s, "sdpa_ex"), test_sdpa_ex, 0, N_OF(DT));
    return s;
}
