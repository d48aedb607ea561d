/* test_gpu_main.c: runner of the GPU tests (kernels, GEMMs, whole engines).
 *
 * Exit status: 0 all passed, 1 a failure, 77 no usable CUDA GPU (ctest's SKIP_RETURN_CODE).
 *
 * The GPU is probed in a forked child, never in this process: Check runs each test in a forked child
 * (CK_FORK=yes under ctest), and a CUDA context created before fork() is unusable in the children. So the parent
 * never calls into CUDA, and every test (or its checked fixture) initializes CUDA for itself. Suites added here must
 * keep that rule: no CUDA in unchecked fixtures, which run in the parent. With CK_FORK=no (e.g. under cuda-gdb or
 * compute-sanitizer) everything runs in this process, which is fine too, but a sticky CUDA error (an illegal
 * address) then fails every later test: read the first failure. */
#include <check.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *gpu_ops_suite(void);
Suite *gpu_engine_suite(void); /* tests/gpu/test_gpu_engine.c */
Suite *gpu_formats_suite(void); /* tests/gpu/test_gpu_formats.c */
Suite *gpu_sdpa_suite(void);    /* tests/gpu/test_gpu_sdpa.c */
Suite *gpu_attention_suite(void); /* tests/gpu/test_gpu_attention.c */
Suite *gpu_attention_fp8_suite(void); /* tests/gpu/test_gpu_attention_fp8.c */
Suite *gpu_attention_wgmma_suite(void); /* tests/gpu/test_gpu_attention_wgmma.c */
Suite *gpu_gemm_sm90_suite(void);       /* tests/gpu/test_gpu_gemm_sm90.c */
Suite *gpu_decoder_ops_suite(void);     /* tests/gpu/test_gpu_decoder_ops.c */
Suite *gpu_gemv_suite(void);            /* tests/gpu/test_gpu_gemv.c */
Suite *gpu_decoder_engine_suite(void);  /* tests/gpu/test_gpu_decoder_engine.c */
Suite *gpu_tensor_parallel_suite(void); /* tests/gpu/test_gpu_tensor_parallel.c */
Suite *gpu_pipeline_ops_suite(void);    /* tests/gpu/test_gpu_pipeline_ops.c */
Suite *gpu_sparse_suite(void);          /* tests/gpu/test_gpu_sparse.c */
Suite *gpu_persistent_suite(void);      /* tests/gpu/test_gpu_persistent.c */
Suite *gpu_quantize_suite(void);        /* tests/gpu/test_gpu_quantize.c */

#define SKIP_CODE 77

/* What the probe child reports through the pipe. */
typedef struct {
    int count;
    int err;         /* cudaError_t of cudaGetDeviceCount / cudaGetDeviceProperties */
    int major, minor;
    int sms;
    size_t mem;
    char name[256];
    char errmsg[256];
} probe_t;

static void probe_here(probe_t *p) {
    memset(p, 0, sizeof *p);
    cudaError_t e = cudaGetDeviceCount(&p->count);
    if (e == cudaSuccess && p->count > 0) {
        struct cudaDeviceProp prop;
        e = cudaGetDeviceProperties(&prop, 0);
        if (e == cudaSuccess) {
            snprintf(p->name, sizeof p->name, "%s", prop.name);
            p->major = prop.major;
            p->minor = prop.minor;
            p->sms = prop.multiProcessorCount;
            p->mem = prop.totalGlobalMem;
        }
    }
    p->err = (int)e;
    if (e != cudaSuccess) snprintf(p->errmsg, sizeof p->errmsg, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Probes in a child process; returns 0 and fills *p, or -1 if the child could not report (then *p is from an
 * in-process probe, and the caller must not fork tests afterwards). */
static int probe_gpu(probe_t *p) {
    int fds[2];
    if (pipe(fds) != 0) {
        probe_here(p);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        probe_here(p);
        return -1;
    }
    if (pid == 0) {
        probe_t r;
        close(fds[0]);
        probe_here(&r);
        ssize_t w = write(fds[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof *p) {
        ssize_t k = read(fds[0], (char *)p + got, sizeof *p - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != sizeof *p) {
        /* the child died (e.g. a broken driver crashed it): report no GPU */
        memset(p, 0, sizeof *p);
        p->err = -1;
        snprintf(p->errmsg, sizeof p->errmsg, "GPU probe process died (wait status %d)", status);
    }
    return 0;
}

int main(void) {
    probe_t p;
    int in_process = probe_gpu(&p) != 0;
    if (p.err != 0 || p.count <= 0) {
        printf("test_gpu: no CUDA GPU found: skipped\n");
        fflush(stdout);
        if (p.err != 0) fprintf(stderr, "test_gpu: (%s)\n", p.errmsg);
        return SKIP_CODE;
    }
    printf("test_gpu: device 0 of %d: %s, compute capability %d.%d, %d SMs, %.1f GiB\n", p.count, p.name, p.major,
           p.minor, p.sms, (double)p.mem / (1024.0 * 1024.0 * 1024.0));
    if (p.major != 9 || p.minor != 0)
        printf("test_gpu: warning: the kernels are built for sm_90 (CMAKE_CUDA_ARCHITECTURES); on compute capability "
               "%d.%d expect cudaErrorNoKernelImageForDevice unless the build added it\n",
               p.major, p.minor);
    fflush(stdout);

    SRunner *sr = srunner_create(gpu_ops_suite());
    srunner_add_suite(sr, gpu_engine_suite());
    srunner_add_suite(sr, gpu_formats_suite());
    srunner_add_suite(sr, gpu_sdpa_suite());
    srunner_add_suite(sr, gpu_attention_suite());
    srunner_add_suite(sr, gpu_attention_fp8_suite());
    srunner_add_suite(sr, gpu_attention_wgmma_suite());
    srunner_add_suite(sr, gpu_gemm_sm90_suite());
    srunner_add_suite(sr, gpu_decoder_ops_suite());
    srunner_add_suite(sr, gpu_gemv_suite());
    srunner_add_suite(sr, gpu_decoder_engine_suite());
    srunner_add_suite(sr, gpu_tensor_parallel_suite());
    srunner_add_suite(sr, gpu_pipeline_ops_suite());
    srunner_add_suite(sr, gpu_sparse_suite());
    srunner_add_suite(sr, gpu_persistent_suite());
    srunner_add_suite(sr, gpu_quantize_suite());
    if (in_process) srunner_set_fork_status(sr, CK_NOFORK); /* CUDA is live here: forked tests could not use it */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
