/* sparsity.h: 2:4 structured sparsity of a weight matrix (NVIDIA's Sparse Tensor Cores, Ampere and newer; the
 * pattern cuSPARSELt's structured matrices take): in every group of 4 consecutive elements along K, the reduction
 * dimension (a linear's W (N, K) row-major, y = x W^T, groups at columns 4j .. 4j + 3 of each row), at most 2 are
 * non-zero. Pruning keeps the 2 of largest magnitude (NVIDIA ASP's and cuSPARSELt's "TILE" pruning rule: Mishra et
 * al., "Accelerating Sparse Deep Neural Networks", arXiv:2104.08378); a tie keeps the earlier element, so the result
 * is one deterministic function of the values. The CPU reference then runs on the pruned values. */
#ifndef TP_SPARSITY_H
#define TP_SPARSITY_H

#include <stdint.h>

/* Elements per group and kept per group of the one pattern tprof takes. */
#define TP_SPARSE_M 4
#define TP_SPARSE_N 2

/* Counts, over w (N, K) row-major fp32, the groups with more than 2 non-zero values (0: w is 2:4 already); *first
 * (may be NULL) gets the element index (row * K + column) of the first such group's first element, -1 if none.
 * K must be a multiple of 4 (the caller refuses other K: tp_sparse_shape_ok); NaN counts as non-zero. */
int64_t tp_sparse_violations(const float *w, int64_t N, int64_t K, int64_t *first);

/* Prunes w (N, K) row-major fp32 in place to 2:4 along K (the 2 largest |w| of each group of 4 kept, ties to the
 * earlier element, the others set to +0); returns the number of groups that changed (had more than 2 non-zeros).
 * K a multiple of 4. Idempotent: a 2:4 matrix is returned unchanged (0). */
int64_t tp_sparse_prune(float *w, int64_t N, int64_t K);

/* 1 when a weight (N, K) can take the 2:4 pattern here (K > 0 and a multiple of 4, N > 0); else 0 with the reason
 * in why (n bytes; may be NULL). */
int tp_sparse_shape_ok(int64_t N, int64_t K, char *why, int n);

#endif
