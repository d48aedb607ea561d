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
 * with headers older than 9.13.1 compile a version whose every call returns TP_ERR_UNSUPPORTED saying so.
 *
 * Threads: creating plans is thread-safe (the loading is done under pthread_once). One tp_sdpa must not be run
 * from two host threads at once (it caches its last variant pack). */
#ifndef TP_CUDNN_SDPA_H
#define TP_CUDNN_SDPA_H

#include <stddef.h>

#include "exec/cuda/kernels/kernels.h"
#include "tprof.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One planned SDPA forward: shapes, dtype, its own cuDNN handle (on the device current at creation), the
 * operation graph and the execution plan of the chosen engine configuration, its workspace size. */
typedef struct tp_sdpa tp_sdpa;

/* Loads cuDNN (first call in the process) and plans (through tp_sdpa_create_ex below)
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

/* The general problem (the contract of tpk_flash_attention_ex, attention.h, which it is timed against):
 *     o[b, t, h, :] = sum_j softmax_j(scale * q[b, t, h, :] . k[b, j, h / G, :]) v[b, j, h / G, :],  G = H / Hkv,
 * j over every key, or with causal over j <= t + Tkv - Tq (the mask aligned to the bottom-right corner: cuDNN's
 * DiagonalAlignment BOTTOM_RIGHT, FlashAttention >= 2.1). Element (b, t, h, d) of Q is at q[b * q_batch_stride +
 * t * q_row_stride + h * D + d], K and V likewise (Hkv heads, Tkv rows), O likewise (H heads, Tq rows); strides in
 * elements. Q, K, V and O all in dt. */
typedef struct {
    int B, H, Hkv, Tq, Tkv, D; /* >= 1; H % Hkv == 0 */
    int causal;                /* 0: every key; 1: bottom-right causal */
    float scale;               /* finite, > 0 */
    tp_dtype dt;               /* TP_F16 or TP_BF16 */
    long long q_batch_stride, q_row_stride, k_batch_stride, k_row_stride;
    long long v_batch_stride, v_row_stride, o_batch_stride, o_row_stride;
} tp_sdpa_desc;

/* Plans *d. cuDNN sees Q [B, H, Tq, D] with strides [q_batch_stride, D, q_row_stride, 1], K and V [B, Hkv, Tkv, D]
 * likewise, O [B, H, Tq, D]; grouped-query attention by cuDNN's broadcast of the KV heads; the scale by value.
 * Two graphs, both what cudnn-frontend builds for the same request on cuDNN 9.13.1 - 9.20:
 *   - non-causal, and causal with Tq = 1 (the one query sees every key, so the bottom-right mask hides nothing):
 *     the unified SDPA_FWD operation;
 *   - causal with 1 < Tq <= Tkv: the composite graph of cudnn-frontend's CompositeSDPANode (Q K^T matmul, scale,
 *     index generation and comparison row + Tkv - Tq >= col, select -inf, softmax as max / sub / exp / sum / div,
 *     P V matmul), because the unified operation of these versions takes no mask (its mask subgraph needs 9.21).
 * Seen with cuDNN 9.19.0 on an H200 (tests/gpu/test_gpu_sdpa.c, bench/sdpa_lab.c): every tested shape plans
 * (Tq 1, 7, 197, 300, 577; Tkv 1, 37, 63, 1000, 8192; D 64, 128; GQA 8/2 and MHA; f16, bf16): the composite graph on
 * engine 2, decode on engine 8, small Tq on engine 9, all runtime-compiled (0.2-0.6 s for a process's first plan of
 * a kind, ~30 ms later).
 * Errors: TP_ERR_ARG (NULL d or out, a dimension < 1, H % Hkv != 0, a negative stride); TP_ERR_UNSUPPORTED for
 * everything cuDNN or this code cannot do, with the reason: no cuDNN (where it looked), a dtype other than f16/bf16,
 * a scale <= 0 or not finite, D or a stride not a multiple of 8 elements, causal with Tq > Tkv (cudnn-frontend
 * refuses a bottom-right mask whose first rows would see no key; tprof's kernel writes zeros there), or no engine
 * configuration of cuDNN's heuristic finalizes (cuDNN's last status and message); TP_ERR_OOM; TP_ERR_CUDA. Never a
 * silent fallback to another graph or implementation. */
tp_status tp_sdpa_create_ex(const tp_sdpa_desc *d, tp_sdpa **out, tp_error *err);

/* Enqueues a plan of tp_sdpa_create_ex (or tp_sdpa_create) with separate device pointers, laid out as its
 * description says, each 16-byte aligned; workspace as tp_sdpa_run. Returns 0 or the cudnnStatus_t value
 * (CUDNN_STATUS_BAD_PARAM = 2000 for a NULL or misaligned pointer or a missing workspace; nothing enqueued then).
 * The variant pack is rebuilt only when a pointer changes; capturable into a CUDA graph as tp_sdpa_run. */
int tp_sdpa_run_ex(tp_sdpa *s, const void *q, const void *k, const void *v, void *o, void *workspace,
                   tp_stream stream);

/* Bytes of device workspace tp_sdpa_run needs (0 is possible); 0 for NULL. */
size_t tp_sdpa_workspace_bytes(const tp_sdpa *s);

/* Enqueues the attention on stream (cudnnSetStream + cudnnBackendExecute; no synchronization): tp_sdpa_run_ex
 * with q = qkv, k = qkv + H D, v = qkv + 2 H D (the packed layout of tp_sdpa_create). qkv and out are
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

/* One line for logs and reports, e.g. "cuDNN 9.19.0 SDPA fwd (unified op), engine 9 (heuristic A choice 0 of 5,
 * runtime-compiled, native-graph-API; knobs k24=7), workspace 256 B": cuDNN's version, which graph (unified op or
 * composite graph), the engine's global index,
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
