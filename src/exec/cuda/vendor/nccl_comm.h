/* nccl_comm.h: NCCL (NVIDIA Collective Communication Library) for tensor-parallel engines: one process drives
 * n GPUs with one communicator per GPU (ncclCommInitAll), and each rank's engine enqueues its all-reduces on its
 * own stream (inside its CUDA graph once captured).
 *
 * tprof does not link NCCL: it is loaded with dlopen at the first tp_nccl_init, once per process, from the first
 * place of this search list that has libnccl.so.2 with every function used here:
 *   1. the environment variable TPROF_NCCL_LIB: the library file, or a directory holding it;
 *   2. the dynamic loader's own path (LD_LIBRARY_PATH, ldconfig's cache: Debian's libnccl2, the CUDA toolkit's);
 *   3. nvidia/nccl/lib under $VIRTUAL_ENV and /opt/ANY/.venv python3.X site-packages (pip's nvidia-nccl-cu12/-cu13,
 *      which PyTorch uses).
 * Seen on the nvidia-h100-x2 machines (2026-11-25): NCCL 2.28.9 in /lib/x86_64-linux-gnu and in PyTorch's venv.
 * The few types and constants used are NCCL's stable ABI (nccl.h 2.x), declared in nccl_comm.c, so no NCCL
 * header is needed to build.
 *
 * NVLink SHARP (NVLS, multicast) is left to NCCL's environment: the shared GPU machines set NCCL_NVLS_ENABLE=0,
 * and tprof never turns it on.
 *
 * One host thread drives every rank: launches on several GPUs go between tp_nccl_group_start and
 * tp_nccl_group_end (NCCL's group semantics for a thread driving several devices), also while the streams are
 * being captured into CUDA graphs. */
#ifndef TP_NCCL_COMM_H
#define TP_NCCL_COMM_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "formats/dtype.h"
#include "tprof.h"

typedef struct tp_nccl tp_nccl;

/* Loads NCCL and creates one communicator per device (devices[0..n), n >= 2, distinct). Errors:
 * TP_ERR_UNSUPPORTED (NCCL not found: every place tried, with the reason), TP_ERR_CUDA (ncclCommInitAll's error
 * string). */
tp_status tp_nccl_init(int n, const int *devices, tp_nccl **out, tp_error *err);
void tp_nccl_destroy(tp_nccl *c);

/* "2.28.9 (/lib/x86_64-linux-gnu/libnccl.so.2)": the loaded library's version and where it came from. */
const char *tp_nccl_describe(const tp_nccl *c);

/* Enqueues rank's all-reduce (sum) of count elements of type dt (f32, f16 or bf16) from x into y (may equal x) on
 * stream s. 0 or an NCCL status (tp_nccl_error). */
int tp_nccl_all_reduce(tp_nccl *c, int rank, const void *x, void *y, size_t count, tp_dtype dt, cudaStream_t s);
int tp_nccl_group_start(tp_nccl *c);
int tp_nccl_group_end(tp_nccl *c);
/* After a failed call inside a group (the other ranks' collectives launched without their peer would wait
 * forever): aborts every communicator (ncclCommAbort, which ends their pending kernels), so streams can be
 * synchronized and the engines destroyed; the communicators are unusable afterwards. */
void tp_nccl_abort(tp_nccl *c);
const char *tp_nccl_error(const tp_nccl *c, int rc);

#endif
