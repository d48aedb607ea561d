/* gpu_check.h: the scaffolding the GPU kernel tests share (test_gpu_ops.c, test_gpu_attention.c,
 * test_gpu_attention_fp8.c, test_gpu_sdpa.c): the case string quoted in every message (g_case, SET_CASE), the
 * CUDA_OK / LAUNCH_OK / KERNEL_OK assertions, the stream the tests run on (g_stream), tracked host and device
 * allocations (device buffers poisoned with 0xFF bytes), their upload and download helpers and their release,
 * host_normal / host_amax, strided tensors with NaN gaps (host_strided_normal, host_strided_amax, strided_gather),
 * the argument-rejection check (check_rejected), rows past the end left alone (check_untouched), graph replay
 * against an eager launch (check_graph_replay), and new_tcase(), a TCase of the suite with the file's checked
 * fixture.
 *
 * Each test file is its own translation unit with its own state. Everything here is static: the variables, and
 * the functions `static inline` (a file need not use them all), so every file that includes this header gets its
 * own g_case, g_stream and tracked allocations, and no file sees another's. Include it once per test file, from
 * the .c file only; state that is one file's alone (a cuBLASLt context, a cuDNN plan, a capture stream) stays in
 * that file.
 *
 * The including file provides:
 *   TP_GPU_MAX_TRACKED       (before the include) the most host, and the most device, allocations a test holds;
 *   TP_GPU_POISON_ON_STREAM  (optional, before the include) poison new device buffers with cudaMemsetAsync on
 *                            g_stream and wait for it; by default cudaMemset on the legacy default stream, which
 *                            the blocking g_stream is ordered after;
 *   setup(), teardown()      the checked fixture new_tcase() installs: setup() calls gpu_setup(); teardown()
 *                            synchronizes g_stream, releases what the file holds (free_tracked(), or release_all()
 *                            which does both) and calls close_stream().
 *
 * CUDA is used only inside tests and their checked fixtures, never in the runner's parent process (Check forks one
 * child per test, and a CUDA context does not survive fork(): see test_gpu_main.c). */
#ifndef TP_TEST_GPU_CHECK_H
#define TP_TEST_GPU_CHECK_H

#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"
#include "formats/dtype.h"

#ifndef TP_GPU_MAX_TRACKED
#error "define TP_GPU_MAX_TRACKED (allocations a test may hold) before including gpu_check.h"
#endif

/* ---- case context and error helpers ----------------------------------------------------------------------- */

static char g_case[256]; /* the case under test, quoted in every message */
#define SET_CASE(...) snprintf(g_case, sizeof g_case, __VA_ARGS__)

#define CUDA_OK(call)                                                                                           \
    do {                                                                                                        \
        cudaError_t e_ = (call);                                                                                \
        ck_assert_msg(e_ == cudaSuccess, "[%s] %s -> %s: %s", g_case, #call, cudaGetErrorName(e_),              \
                      cudaGetErrorString(e_));                                                                  \
    } while (0)

/* A tpk_* call: its return value (launch errors), then, after a stream sync, the kernel's execution errors. */
#define LAUNCH_OK(call)                                                                                         \
    do {                                                                                                        \
        int r_ = (call);                                                                                        \
        ck_assert_msg(r_ == 0, "[%s] %s returned %d (%s: %s)", g_case, #call, r_,                               \
                      cudaGetErrorName((cudaError_t)r_), cudaGetErrorString((cudaError_t)r_));                  \
    } while (0)
#define KERNEL_OK(call)                                                                                         \
    do {                                                                                                        \
        LAUNCH_OK(call);                                                                                        \
        cudaError_t s_ = cudaStreamSynchronize(g_stream);                                                       \
        ck_assert_msg(s_ == cudaSuccess, "[%s] %s: kernel failed while running: %s: %s", g_case, #call,          \
                      cudaGetErrorName(s_), cudaGetErrorString(s_));                                             \
    } while (0)

/* ---- the stream and the tracked allocations, released between shapes and by the fixture's teardown -------- */

static cudaStream_t g_stream;
static void *g_dev[TP_GPU_MAX_TRACKED], *g_host[TP_GPU_MAX_TRACKED];
static int g_ndev, g_nhost;

/* The fixture's common start: nothing tracked, g_case "setup", g_stream created. A blocking stream on purpose: it
 * is ordered after the legacy default stream, where cudaMemset and the pageable cudaMemcpy uploads run (a pageable
 * H2D copy may return before its DMA lands), so a kernel never races with the poisoning or the upload of its own
 * buffers. */
static inline void gpu_setup(void) {
    g_ndev = g_nhost = 0;
    snprintf(g_case, sizeof g_case, "setup");
    CUDA_OK(cudaStreamCreate(&g_stream));
}

/* Frees every tracked allocation; the caller has synchronized g_stream (and released what uses the buffers). */
static inline void free_tracked(void) {
    for (int i = 0; i < g_ndev; i++) cudaFree(g_dev[i]);
    for (int i = 0; i < g_nhost; i++) free(g_host[i]);
    g_ndev = g_nhost = 0;
}

/* g_stream synchronized, then every tracked allocation freed: per shape, and at teardown. */
static inline void release_all(void) {
    if (g_stream) cudaStreamSynchronize(g_stream);
    free_tracked();
}

static inline void close_stream(void) {
    if (g_stream) cudaStreamDestroy(g_stream);
    g_stream = NULL;
}

/* Host allocation, freed by free_tracked(). */
static inline void *hmalloc(size_t bytes) {
    ck_assert_msg(g_nhost < TP_GPU_MAX_TRACKED, "test bug: too many host allocations");
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_msg(p != NULL, "[%s] out of host memory (%zu bytes)", g_case, bytes);
    g_host[g_nhost++] = p;
    return p;
}

static inline size_t esize(tp_dtype t) { return tp_dtype_info(t)->bytes; }
static inline const char *dname(tp_dtype t) { return tp_dtype_info(t)->name; }

/* bytes of device memory, tracked, poisoned with 0xFF bytes: NaN in F32, F16, BF16 and E4M3, so an element a
 * kernel fails to write is caught. */
static inline void *dev_bytes(size_t bytes) {
    ck_assert_msg(g_ndev < TP_GPU_MAX_TRACKED, "test bug: too many device allocations");
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes ? bytes : 1));
    g_dev[g_ndev++] = p;
#ifdef TP_GPU_POISON_ON_STREAM
    CUDA_OK(cudaMemsetAsync(p, 0xFF, bytes, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
#else
    CUDA_OK(cudaMemset(p, 0xFF, bytes));
#endif
    return p;
}

/* n elements of dt, poisoned */
static inline void *dev_alloc(tp_dtype dt, size_t n) { return dev_bytes(n * esize(dt)); }

/* Converts n fp32 values to dt (FP8: divided by scale) and copies them into the device buffer d. */
static inline void upload_to(void *d, tp_dtype dt, const float *x, size_t n, float scale) {
    void *tmp = hmalloc(n * esize(dt));
    tp_convert_from_f32(dt, x, tmp, n, scale);
    CUDA_OK(cudaMemcpy(d, tmp, n * esize(dt), cudaMemcpyHostToDevice));
}

/* uploads n fp32 values as dt into a buffer of n_alloc >= n elements (the rest stays poison) */
static inline void *dev_upload(tp_dtype dt, const float *x, size_t n, size_t n_alloc) {
    void *d = dev_alloc(dt, n_alloc);
    upload_to(d, dt, x, n, 1.0f);
    return d;
}

/* n fp32 values (scales) in a new device buffer; dev_scalar: one */
static inline float *dev_floats(const float *x, size_t n) {
    float *d = dev_alloc(TP_F32, n);
    CUDA_OK(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
static inline float *dev_scalar(float v) { return dev_floats(&v, 1); }

static inline void *download_bytes(const void *d, size_t bytes) {
    void *h = hmalloc(bytes);
    CUDA_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}

/* Downloads n elements of dt and decodes them to fp32 (FP8: times scale), as tp_convert_to_f32 does. */
static inline float *download_f32(tp_dtype dt, const void *d, size_t n, float scale) {
    void *raw = download_bytes(d, n * esize(dt));
    float *f = hmalloc(n * sizeof(float));
    tp_convert_to_f32(dt, raw, f, n, scale);
    return f;
}

/* ---- host data -------------------------------------------------------------------------------------------- */

/* n normal(mean, std) values; never exactly zero, so a kernel that writes zeros cannot pass by accident. */
static inline float *host_normal(size_t n, uint64_t seed, double mean, double std) {
    float *x = hmalloc(n * sizeof(float));
    tp_rng r;
    tp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        float v = (float)(mean + std * tp_rng_normal(&r));
        x[i] = v != 0.0f ? v : (float)(std * 1e-3);
    }
    return x;
}

static inline float host_amax(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* ---- strided tensors (rows of `width` used elements, row stride rs >= width, batch stride bs >= T rs) ------- */

/* B * bs floats: element e < width of row t of batch b, at b * bs + t * rs + e, ~ N(0, std^2) (never zero) rounded
 * to dt (so a reference computed from these values sees exactly what the GPU reads); NaN in every gap, so a kernel
 * that reads one poisons its output. */
static inline float *host_strided_normal(tp_dtype dt, int B, int T, long long width, long long rs, long long bs,
                                         uint64_t seed, double std) {
    const size_t n = (size_t)B * (size_t)bs, used = (size_t)B * (size_t)T * (size_t)width;
    float *x = hmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    const float *v = host_normal(used, seed, 0.0, std);
    size_t k = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (long long e = 0; e < width; e++)
                x[b * bs + t * rs + e] = v[k++];
    void *tmp = malloc(n * esize(dt));
    ck_assert_msg(tmp != NULL, "[%s] out of host memory", g_case);
    tp_convert_from_f32(dt, x, tmp, n, 1.0f);
    tp_convert_to_f32(dt, tmp, x, n, 1.0f);
    free(tmp);
    return x;
}

/* max |x| over the used elements of a strided tensor */
static inline float host_strided_amax(const float *x, int B, int T, long long width, long long rs, long long bs) {
    float m = 0.0f;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            m = fmaxf(m, host_amax(x + b * bs + t * rs, (size_t)width));
    return m;
}

/* The used elements of raw (a downloaded strided dt tensor of B * bs elements) decoded into dense (B, T, width)
 * fp32 (FP8: times scale); returns how many bytes of the gaps are not 0xFF (were written). */
static inline size_t strided_gather(tp_dtype dt, const unsigned char *raw, int B, int T, long long width, long long rs,
                                    long long bs, float scale, float *dense) {
    const size_t es = esize(dt);
    size_t touched = 0, k = 0;
    for (int b = 0; b < B; b++) {
        size_t next = (size_t)b * (size_t)bs * es; /* first byte not yet checked */
        for (int t = 0; t < T; t++) {
            const size_t r0 = ((size_t)b * (size_t)bs + (size_t)t * (size_t)rs) * es;
            for (size_t i = next; i < r0; i++)
                touched += raw[i] != 0xFF;
            tp_convert_to_f32(dt, raw + r0, dense + k, (size_t)width, scale);
            k += (size_t)width;
            next = r0 + (size_t)width * es;
        }
        for (size_t i = next; i < (size_t)(b + 1) * (size_t)bs * es; i++)
            touched += raw[i] != 0xFF;
    }
    return touched;
}

/* ---- argument rejection ------------------------------------------------------------------------------------ */

/* A call that must be refused, and what it returned. */
typedef struct {
    const char *what;
    int got;
} rejected_call;

/* Every call of r[0..n) returned cudaErrorInvalidValue (one line printed each), and none left anything behind:
 * g_stream synchronizes and no error is pending (cudaGetLastError is cudaSuccess). */
static inline void check_rejected(const rejected_call *r, size_t n) {
    const int inval = (int)cudaErrorInvalidValue;
    for (size_t i = 0; i < n; i++) {
        printf("  %s  %s: returned %d\n", r[i].got == inval ? "ok  " : "FAIL", r[i].what, r[i].got);
        ck_assert_msg(r[i].got == inval, "%s: returned %d (%s), want cudaErrorInvalidValue", r[i].what, r[i].got,
                      cudaGetErrorName((cudaError_t)r[i].got));
    }
    CUDA_OK(cudaStreamSynchronize(g_stream));
    CUDA_OK(cudaGetLastError());
}

/* ---- outputs past the end, CUDA graph capture --------------------------------------------------------------- */

/* Bytes [from, to) of the device buffer d (rows past the last one a kernel may write) are still the 0xFF poison. */
static inline void check_untouched(const char *what, const void *d, size_t from, size_t to) {
    const unsigned char *h = download_bytes((const char *)d + from, to - from);
    size_t touched = 0, first = 0;
    for (size_t i = 0; i < to - from; i++)
        if (h[i] != 0xFF)
            if (touched++ == 0) first = i;
    printf("  %s  %s | %s: %zu bytes, %zu overwritten\n", touched ? "FAIL" : "ok  ", g_case, what, to - from, touched);
    fflush(stdout);
    ck_assert_msg(touched == 0, "[%s] %s: %zu of %zu bytes past the output were written; first at byte %zu", g_case,
                  what, touched, to - from, first);
}

/* Enqueues one kernel call writing `out` on `stream`; returns its error code (0 = success). */
typedef int (*capture_launch_fn)(const void *ctx, void *out, cudaStream_t stream);

/* The call captured into a CUDA graph (global mode: a synchronizing or allocating call inside fails the capture)
 * writing out_a, the graph replayed, then the call launched eagerly writing out_b: the two outputs (bytes long)
 * must be equal byte for byte. Returns the replay's output on the host (tracked), for further checks. */
static inline const unsigned char *check_graph_replay(capture_launch_fn launch, const void *ctx, void *out_a,
                                                      void *out_b, size_t bytes) {
    cudaStream_t cs;
    CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    const int r = launch(ctx, out_a, cs);
    const cudaError_t ec = cudaStreamEndCapture(cs, &graph);
    ck_assert_msg(r == 0, "[%s] launch inside capture returned %d (%s)", g_case, r, cudaGetErrorName((cudaError_t)r));
    CUDA_OK(ec);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, cs));
    CUDA_OK(cudaStreamSynchronize(cs));
    LAUNCH_OK(launch(ctx, out_b, cs));
    CUDA_OK(cudaStreamSynchronize(cs));
    const unsigned char *a = download_bytes(out_a, bytes), *b = download_bytes(out_b, bytes);
    size_t diff = 0;
    for (size_t i = 0; i < bytes; i++) diff += a[i] != b[i];
    printf("  %s  %s: replay vs eager, %zu of %zu bytes differ\n", diff ? "FAIL" : "ok  ", g_case, diff, bytes);
    fflush(stdout);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(cs);
    ck_assert_msg(diff == 0, "[%s] graph replay differs from the eager launch in %zu bytes", g_case, diff);
    return a;
}

/* x rounded in place to dt's values (stored and widened back), so a CPU reference sees what the GPU reads */
static inline void gpu_round_to(tp_dtype dt, float *x, size_t n) {
    void *tmp = hmalloc(n * esize(dt));
    tp_convert_from_f32(dt, x, tmp, n, 1.0f);
    tp_convert_to_f32(dt, tmp, x, n, 1.0f);
}

/* An optional library a test needs (cuDNN, cuSPARSELt): ok says whether it loaded, msg where from or why not.
 * Prints "info" or the skip reason and returns ok; fails instead of skipping when the environment variable
 * require_env is set (not "0"). */
static inline int gpu_lib_here(const char *test, int ok, const char *msg, const char *require_env) {
    const char *req = getenv(require_env);
    const int required = req && req[0] && strcmp(req, "0") != 0;
    printf("  %s  %s: %s\n", ok ? "info" : required ? "FAIL" : "skip", test, msg);
    fflush(stdout);
    ck_assert_msg(ok || !required, "%s: %s is set but the library is not usable: %s", test, require_env, msg);
    return ok;
}

/* ---- test cases --------------------------------------------------------------------------------------------- */

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void setup(void);    /* defined by the including file */
static void teardown(void); /* defined by the including file */

/* A TCase added to suite s, with the file's checked fixture (run in the forked child, where CUDA may be
 * initialized) and a 600 s timeout: CUDA context creation plus the fp64 CPU references (each file's suite says how
 * large). The caller adds its tests. */
static inline TCase *new_tcase(Suite *s, const char *name) {
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return tc;
}

#endif /* TP_TEST_GPU_CHECK_H */
