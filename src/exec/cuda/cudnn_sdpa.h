/* cudnn_sdpa.h: cuDNN's fused attention (the backend operation CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR,
 * cuDNN 9.13.1 and newer) as a second attention implementation next to tprof's own kernels (kernels.h
 * tpk_attention, attention.h tpk_flash_attention): a baseline to time and check them against.
 *
 * tprof does not link cuDNN. On the GPU machines cuDNN exists only inside a Python virtual environment
 * (.../site-packages/nvidia/cudnn/lib), so it is loaded with dlopen at run time, once per process, from the first
 * place of this search list that has it (each place is tried for libcudnn_graph.so.9, which holds every
 * function used here, then libcudnn.so.9, the shim that forwards to it):
 *   1. the environment variable TPROF_CUDNN_LIB: a library file, or a directory holding the libraries;
 *   2. the dynamic loader's own path (LD_LIBRARY_PATH, ldconfig's cache, e.g. a system-wide cuDNN);
 *   3. nvidia/cudnn/lib under every Python package directory found with glob() at run time (pip's
 *      nvidia-cudnn-cu12/-cu13 wheels, which PyTorch uses, put cuDNN there), "X" being any Python 3 version and
 *      "ANY" any directory: $VIRTUAL_ENV and $CONDA_PREFIX /lib/python3.X/site-packages, /opt/ANY/.venv,
 *      /opt/ANY/venv and /opt/ANY (conda style) /lib/python3.X/site-packages, $HOME/.local/lib/python3.X/
 *      site-packages, /usr/local/lib/python3.X/dist-packages and site-packages, /usr/lib/python3.X/site-packages,
 *      /usr/lib/python3/dist-packages.
 * The library's directory is then also searched for cuDNN's engine libraries (libcudnn_engines_precompiled.so.9,
 * libcudnn_engines_runtime_compiled.so.9, libcudnn_heuristic.so.9), which are loaded RTLD_GLOBAL before first use:
 * libcudnn_graph.so.9 dlopens them by soname itself, and an already loaded object with that soname is what the
 * dynamic loader returns then, whatever its own search would have found (its RUNPATH is $ORIGIN, which finds
 * them too, but preloading keeps every part of cuDNN from the one directory). A missing engine library is not an
 * error here: cuDNN then finds fewer engines, and an unsupported plan says so. TPROF_CUDNN_NO_PRELOAD=1 skips the
 * preloading (a diagnostic: cuDNN then resolves the engine libraries through its own RUNPATH).
 *
 * Seen on the GPU machines (H200, 2026-11-21): the loader path (2) finds a system cuDNN 9.14.0 in
 * /lib/x86_64-linux-gnu first; PyTorch's venv has 9.19.0 (/opt/torch/.venv/lib/python3.12/site-packages/nvidia/
 * cudnn/lib), which step 3 finds when the system one is absent. Both pass tests/gpu/test_gpu_sdpa.c; 9.19 is ~10%
 * faster at T = 197 (bench/sdpa_lab.c: 48.3 against 53.6 us for B 64, H 12, D 64, f16), so point TPROF_CUDNN_LIB at
 * the venv's lib directory there for baseline timings. The heuristic's first choice finalized every time:
 * 9.19.0 engine 9 (engine 8 for T = 1), 9.14.0 engine 5 (engine 4 for T = 1), both runtime-compiled (NVRTC,
 * 0.2-0.7 s for the first plan of a process, ~35 ms for later ones), with a 256-byte workspace (0 for T = 1).
 *
 * Builds without the cuDNN headers (cudnn_graph.h, cudnn_version.h; only their enums and types are used) or
 * with headers older than 9.13.1 compile a stub whose tp_sdpa_create returns TP_ERR_UNSUPPORTED saying so.
 *
 * Threads: creating plans is thread-safe (the loading is done under pthread_once). One tp_sdpa must not be run
 * from two host threads at once (it caches its last variant pack). */
#ifndef TP_CUDNN_SDPA_H
#define TP_CUDNN_SDPA_H

#include <stddef.h>

#include "exec/cuda/kernels.h"
#include "tprof.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One planned SDPA forward: shapes, dtype, its own cuDNN handle (on the device current at creation), the
 * operation graph and the execution plan of the chosen engine configuration, its workspace size. */
typedef struct tp_sdpa tp_sdpa;

/* Loads cuDNN (first call in the process) and plans
 *     out[b, t, h, :] = sum_j softmax_j(scale * q[b, t, h, :] . k[b, j, h, :]) v[b, j, h, :]
 * for qkv (B, T, 3, H, D) row-major in dt (TP_F16 or TP_BF16; the fused QKV GEMM's output as timm lays it out)
 * and out (B, T, H, D) row-major in dt: non-causal, no mask, no dropout, inference (no softmax statistics).
 * cuDNN sees Q, K and V as strided views of qkv: dims [B, H, T, D], strides [3 T H D, D, 3 H D, 1], at element
 * offsets 0, H D and 2 H D; O dims [B, H, T, D], strides [T H D, D, H D, 1]; the scale is a by-value fp32 scalar
 * baked into the plan. Every buffer is declared 16-byte aligned (tp_sdpa_run checks it).
 * The plan is the first engine configuration of cuDNN's heuristic (CUDNN_HEUR_MODE_A) whose execution plan
 * finalizes; tp_sdpa_describe names it.
 * The CUDA context of the current device must exist (cudnnCreate runs here and allocates on the device).
 * scale must be finite and > 0 (cuDNN's engines return NaN for zero and negative scales: seen with 9.14 and
 * 9.19 on an H200).
 * Errors: TP_ERR_ARG (B, T, H or D < 1, or *out NULL); TP_ERR_UNSUPPORTED when cuDNN is not found (the message
 * lists where it looked), is older than 9.13.1, the build had no cuDNN headers, the scale is <= 0 or not
 * finite, H * D is not a multiple of 8 (K and V would not be 16-byte aligned), or cuDNN offers no engine for the
 * shape or dtype (the message gives the last cuDNN status and its explanation); TP_ERR_OOM; TP_ERR_CUDA for
 * any other cuDNN failure. Never crashes, never exits. */
tp_status tp_sdpa_create(int B, int T, int H, int D, tp_dtype dt, float scale, tp_sdpa **out, tp_error *err);

/* Bytes of device workspace tp_sdpa_run needs (0 is possible); 0 for NULL. */
size_t tp_sdpa_workspace_bytes(const tp_sdpa *s);

/* Enqueues the attention on stream (cudnnSetStream + cudnnBackendExecute; no synchronization). qkv and out are
 * device pointers laid out as in tp_sdpa_create, 16-byte aligned; workspace: tp_sdpa_workspace_bytes of device
 * memory, 16-byte aligned (may be NULL when that is 0). Returns 0 or the cudnnStatus_t value
 * (CUDNN_STATUS_BAD_PARAM = 2000 for NULL/misaligned pointers or a missing workspace; nothing enqueued then).
 * The variant pack (a host-side descriptor of the pointers) is rebuilt only when a pointer differs from the
 * previous call's, so a steady loop costs one cudnnBackendExecute.
 * CUDA graphs: capturable. With cuDNN 9.14.0 and 9.19.0 on an H200, one run captured in global capture mode
 * (which rejects synchronizing and allocating calls) is two nodes, a memset (of the 256-byte workspace) and the
 * attention kernel, both as the plan's very first run and after an eager one, and the replays equal the eager
 * result bit for bit (tests/gpu/test_gpu_sdpa.c, test_sdpa_graph). The scale is baked into the captured kernel's
 * parameters; the pointers are those of the captured call. */
int tp_sdpa_run(tp_sdpa *s, const void *qkv, void *out, void *workspace, tp_stream stream);

/* One line for logs and reports, e.g. "cuDNN 9.19.0 SDPA fwd, engine 9 (heuristic A choice 0 of 5,
 * runtime-compiled, native-graph-API; knobs k24=7), workspace 256 B": cuDNN's version, the engine's global index,
 * the rank of the configuration among the heuristic's results, the engine's behaviour notes, the knob choices
 * (k<cudnnBackendKnobType_t>=value) and the workspace. The string lives as long as s. */
const char *tp_sdpa_describe(const tp_sdpa *s);

/* Where cuDNN was loaded from (the library's path), or the reason it could not be, without creating a plan
 * (loads it on first call). Returns 1 when loaded, 0 when not; msg receives the path or reason (n bytes). */
int tp_sdpa_cudnn_available(char *msg, size_t n);

/* Releases the plan, its descriptors and its cuDNN handle (not the library, which stays loaded). NULL is a
 * no-op. */
void tp_sdpa_destroy(tp_sdpa *s);

#ifdef __cplusplus
}
#endif
#endif
