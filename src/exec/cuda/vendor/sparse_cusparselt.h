/* sparse_cusparselt.h: 2:4 structured-sparse GEMMs through NVIDIA cuSPARSELt (issue 22), for the linears whose
 * weights are 2:4 (formats/sparsity.h):
 *     y (M, N) = x (M, K) @ W (N, K)^T (+ bias (N)) (+ R (M, N)) (then GELU)
 * W the structured operand (cuSPARSELt's A: rows N, cols K, row-major, op N), x dense (B: rows M, cols K,
 * row-major, op T), y = D (N x M column-major, ld N, which is y (M, N) row-major); bias one value per row of D
 * (CUSPARSELT_MATMUL_BIAS_POINTER), a residual as C with beta 1, cuSPARSELt's GELU activation. FP16 and BF16 with
 * fp32 compute, and E4M3 operands with an FP16 or BF16 output (sm_90 and newer: cuSPARSELt's types table on PyPI's
 * nvidia-cusparselt-cu13 page; 8-bit operands only as row-major A op N, B op T, which is this layout). Sizes: N and
 * K multiples of 16 and M of 8 for 16-bit operands, N and K of 32 and M of 16 for E4M3: PyTorch's cuSPARSELt
 * backend's limits (torch/sparse/semi_structured.py), which the library's own checks state. The weight is checked (SpMMAPruneCheck)
 * and compressed once; the algorithm is chosen by cusparseLtMatmulSearch when the plan is made.
 *
 * tprof does not link cuSPARSELt: it is loaded at run time (vendor_lib.h's search: TPROF_CUSPARSELT_LIB, the
 * loader's path, nvidia/cusparselt/lib and nvidia/cu13/lib in Python packages: the nvidia-cusparselt-cu13 wheels
 * put it there, 0.8 and 0.9+ layouts). Its header at build time comes from the same wheel (`make build`:
 * tools/fetch_wheel_headers.py cusparselt, pinned to the GPU machines' 0.8.1); without it every call returns TP_ERR_UNSUPPORTED saying so. */
#ifndef TP_SPARSE_CUSPARSELT_H
#define TP_SPARSE_CUSPARSELT_H

#include <stddef.h>
#include <stdint.h>

#include "exec/cuda/kernels/kernels.h"
#include "tprof.h"

typedef struct tp_spgemm_ctx tp_spgemm_ctx; /* one cuSPARSELt handle on the current device */
typedef struct tp_spgemm tp_spgemm;         /* one planned, compressed, searched sparse GEMM */

typedef struct {
    int64_t M, N, K;
    tp_dtype dt;     /* x and W: TP_F16, TP_BF16, or TP_E4M3 (per-tensor scales folded into alpha) */
    tp_dtype out_dt; /* bias, R and y: dt for 16-bit inputs, TP_F16 or TP_BF16 for E4M3 (0: dt) */
    float alpha;     /* y = alpha x W^T + ...: E4M3's a_scale * w_scale (0: 1) */
    int has_bias;
    int residual;
    int gelu;
} tp_spgemm_desc;

/* 1 when a GEMM of this description can be planned (types, sizes), else 0 with the reason in why (n bytes). No
 * library needed: the planner's and the lint's rule. */
int tp_spgemm_supported(const tp_spgemm_desc *d, char *why, size_t n);

/* Loads cuSPARSELt (once per process) and creates a handle on the current device. Errors: TP_ERR_UNSUPPORTED (not
 * found: where it looked; no header at build), TP_ERR_CUDA. */
tp_status tp_spgemm_ctx_create(tp_spgemm_ctx **out, tp_error *err);
void tp_spgemm_ctx_destroy(tp_spgemm_ctx *c);

/* Plans d for the weight w (device, (N, K) row-major in d->dt, 2:4 along K), compresses it into the plan's own
 * device buffer (w itself is not used afterwards), and searches the algorithm on the given device buffers
 * (x (M, K), y (M, N), bias, R as d says; their contents are overwritten/read as by a run). stream: where the
 * search and compression run (synchronized before returning). Lab switches in the environment (docs/sparsity.md):
 * TPROF_SPGEMM_SEARCH=0, no search (cuSPARSELt's default algorithm); TPROF_SPGEMM_ALG=N, configuration id N and no
 * search (TP_ERR_ARG for an id the library does not have). Errors: TP_ERR_UNSUPPORTED (tp_spgemm_supported's reasons; w not 2:4: cuSPARSELt's check), TP_ERR_OOM,
 * TP_ERR_CUDA (a cuSPARSELt status, named). */
tp_status tp_spgemm_create(tp_spgemm_ctx *c, const tp_spgemm_desc *d, const void *w, const void *x, const void *bias,
                           const void *residual, void *y, tp_stream stream, const char *name, tp_spgemm **out,
                           tp_error *err);
/* Enqueues y = x W^T (+ bias) (+ residual) (GELU) on stream; 0 or a cusparseStatus_t value. Capturable into a CUDA
 * graph (one matmul kernel, no allocation). */
int tp_spgemm_run(tp_spgemm_ctx *c, const tp_spgemm *p, const void *x, const void *bias, const void *residual, void *y,
                  tp_stream stream);
/* What the search kept: "algorithm 3, split-K 2 (one kernel), workspace 4096 bytes" ("" without cuSPARSELt). */
void tp_spgemm_describe(const tp_spgemm *p, char *buf, size_t n);
/* Device bytes of the compressed weight (values and metadata). */
size_t tp_spgemm_weight_bytes(const tp_spgemm *p);
void tp_spgemm_destroy(tp_spgemm *p);

/* Where cuSPARSELt was loaded from and its version, or why not (loads it on the first call). 1 when loaded. */
int tp_spgemm_available(char *msg, size_t n);

#endif
