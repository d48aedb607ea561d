/* pdl.cuh: programmatic dependent launch (PDL) for the decode path's kernels.
 *
 * Why. A decode step is ~200 short kernels (decoder_ops.cu, gemv.cu): each one's launch, ramp-up and first DRAM
 * round trip (~2-4 us on an H100, bench/results/2026-11-25_h100_gemv_lab.log) is paid after its predecessor has
 * drained, while the memory system idles. With PDL (CUDA Programming Guide, "Programmatic Dependent Launch and
 * Synchronization"; PTX ISA, griddepcontrol, sm_90) a kernel launched with
 * cudaLaunchAttributeProgrammaticStreamSerialization may start before the previous kernel in the stream has
 * finished, once every block of that kernel has executed griddepcontrol.launch_dependents; it must execute
 * griddepcontrol.wait before touching anything the previous kernels write: the wait returns when they have
 * completed and their memory operations are visible to this grid. In a captured CUDA graph the launch becomes a
 * programmatic edge.
 *
 * The rule every kernel launched through this header follows: tpk_pdl_trigger() first (the next kernel may be
 * scheduled as soon as this one is resident: chains cascade, each kernel still waiting for its predecessor), then
 * only reads of data no kernel writes during a decode step (weights, their scales) before tpk_pdl_wait(), then
 * everything else. Launched without the attribute, or after a kernel that never triggers (cuBLASLt's, NCCL's), both
 * instructions are no-ops and the stream orders the kernel as usual; the arithmetic is the same either way.
 *
 * A consequence for profiles: a kernel that starts early spends part of its traced duration waiting, so traced
 * kernel times overlap and their sum can exceed the step's span (tp_engine_options.no_pdl makes a CUDA graph's
 * edges ordinary ones, for per-kernel times without overlap). */
#ifndef TP_PDL_CUH
#define TP_PDL_CUH

#include <cuda_runtime.h>

/* lets the next kernel in the stream be scheduled once every block of this grid has executed it */
static __device__ __forceinline__ void tpk_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
/* waits until the kernels this one depends on have completed and their writes are visible */
static __device__ __forceinline__ void tpk_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* A launch configuration with the PDL attribute as attr[0] (attr[1] is free for the caller, e.g. a cluster shape,
 * counted in cfg.numAttrs). c must not be copied after tpk_pdl_config (cfg.attrs points into it). */
struct tpk_pdl_launch {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[2];
};
static inline void tpk_pdl_config(tpk_pdl_launch *c, dim3 grid, dim3 block, size_t smem, cudaStream_t s) {
    c->cfg = cudaLaunchConfig_t{};
    c->cfg.gridDim = grid;
    c->cfg.blockDim = block;
    c->cfg.dynamicSmemBytes = smem;
    c->cfg.stream = s;
    c->attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    c->attr[0].val.programmaticStreamSerializationAllowed = 1;
    c->cfg.attrs = c->attr;
    c->cfg.numAttrs = 1;
}

/* Launches kernel k with the PDL attribute; returns the launch's error (cleared from the runtime's last error, so
 * a later cudaGetLastError() sees only later ones). */
template <typename... P, typename... A>
static inline cudaError_t tpk_pdl_launch_kernel(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                                A... args) {
    tpk_pdl_launch c;
    tpk_pdl_config(&c, grid, block, smem, s);
    const cudaError_t e = cudaLaunchKernelEx(&c.cfg, k, args...);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e;
}

/* An entry point's status after a launch through tpk_pdl_launch_kernel: the launch's own error, else any error
 * pending from before (cudaGetLastError), as a plain launch followed by cudaGetLastError reports it */
static inline int tpk_pdl_launched(cudaError_t e) { return e != cudaSuccess ? (int)e : (int)cudaGetLastError(); }

#endif
