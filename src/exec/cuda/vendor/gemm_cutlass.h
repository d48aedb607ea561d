/* gemm_cutlass.h: weight-only FP8 (W8A16) GEMMs for a prefill's linears through NVIDIA CUTLASS's Hopper mixed-input
 * GEMM (issue 43 item 2): the E4M3 weights pass through the register file and are converted there to the
 * activations' 16-bit type as the wgmma's register operand, so neither a dequantized weight copy (the engines'
 * cuBLASLt path) nor a conversion pass through shared memory (gemm_sm90.h tpk_gemm_sm90_wo_fp8) is paid.
 *
 *     y (M, N) = w_scale (x (M, K) @ e4m3(W) (N, K)^T) [+ R (M, N)]
 *
 * x, R and y row-major in dt (F16 or BF16), W (N, K) row-major E4M3 codes, w_scale one fp32 on the device (the
 * weight's per-tensor scale, applied as the epilogue's alpha: CUTLASS's LinearCombination, alpha_ptr), R as the
 * epilogue's C with beta 1 (it may be y itself: each element of C is read before the same element of D is written,
 * by the same thread block). CUTLASS takes the narrow operand as its A (CUTLASS's mixed-input README: the narrow
 * type goes through registers and must be K-major), so the GEMM runs transposed: y^T (N, M) column-major = W (N, K)
 * K-major x x^T, which is y row-major. Two tile shapes (tile: TP_CUTLASS_TILE_*): 128 rows of y by 128 columns, and 64
 * rows by 128 columns (twice the thread blocks, for a GEMM whose larger tiles leave SMs idle: Llama-3.1-8B's k/v at
 * 512 tokens are 32 tiles of 128 x 128 on 132 SMs), each with a K step of 64, the cooperative warp-specialized
 * kernel (two consumer warpgroups), fp32 accumulation, one rounding; the engines time both. Launched with the programmatic-dependent-launch attribute (CUTLASS
 * waits for its predecessor before its first load: CUTLASS_ENABLE_GDC_FOR_SM90), as tprof's own kernels are.
 *
 * CUTLASS is header-only and C++; this is the one file that includes it (gemm_cutlass.cu, built for sm_90a). Its
 * headers come from PyPI's nvidia-cutlass wheel (`make build`: tools/fetch_wheel_headers.py cutlass, pinned to
 * 4.2.0.0, into third_party/cutlass); without them every call returns cudaErrorNotSupported and
 * tp_cutlass_available() says why. NVFP4 weights do not fit this kernel (its group scales must be per tensor or a
 * multiple of the tile's K; NVFP4's are 16 values), so only fp8-wo takes this route. */
#ifndef TP_GEMM_CUTLASS_H
#define TP_GEMM_CUTLASS_H

#include <stddef.h>

#include "exec/cuda/kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape and type rules without a device: dt F16 or BF16, M, N, K > 0, K % 16 == 0 (16-byte E4M3 rows, the
 * kernel's alignment for W), N % 8 == 0 (16-byte rows of y), M, N, K below 2^31. */
static inline int tp_cutlass_wo_shape_ok(tp_dtype dt, long long M, long long N, long long K) {
    return (dt == TP_F16 || dt == TP_BF16) && M > 0 && N > 0 && K > 0 && K % 16 == 0 && N % 8 == 0 &&
           M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31);
}

/* tile shapes of y (rows x columns) */
enum { TP_CUTLASS_TILE_128X128 = 0, TP_CUTLASS_TILE_64X128 = 1, TP_CUTLASS_TILES = 2 };
/* "128 x 128" or "64 x 128" (NULL out of range) */
const char *tp_cutlass_tile_name(int tile);

/* 1 when tp_cutlass_wo_fp8 can run here: built with CUTLASS's headers and the current device is compute capability
 * 9.0 (the kernel is sm_90a code). Else 0, and why (n bytes, may be NULL) says which. */
int tp_cutlass_available(char *why, size_t n);

/* CUTLASS's version this build carries ("4.2.0"), or "none". */
const char *tp_cutlass_version(void);

/* y = w_scale (x @ W^T) [+ R] as above, on stream, in tile shape `tile`. x, W, R and y 16-byte aligned, w_scale 4-byte aligned and not
 * NULL, R NULL or in dt; y not overlapping x or W. Returns 0 or a cudaError_t: cudaErrorNotSupported when
 * tp_cutlass_available is 0, cudaErrorInvalidValue when tp_cutlass_wo_shape_ok fails, tile is out of range or a pointer is misaligned,
 * cudaErrorUnknown when CUTLASS refuses the arguments (can_implement, initialize), else the launch's error. */
int tp_cutlass_wo_fp8(const void *x, const void *W, const float *w_scale, const void *R, void *y, tp_dtype dt, int M,
                      int N, int K, int tile, tp_stream stream);

#ifdef __cplusplus
}
#endif

#endif
