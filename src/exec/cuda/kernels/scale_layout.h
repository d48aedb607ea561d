/* scale_layout.h: the 128x4 tiled layout of block scales that cuBLASLt's VEC32_UE8M0 (MXFP8, MXFP4) and
 * VEC16_UE4M3 (NVFP4) scale modes read on Blackwell (sm_100 and newer). Host and device (CUDA) code share it.
 *
 * A scale matrix S (rows, kb) (one scale per row and per block of 32 or 16 elements along K; rows = the M of the
 * activations or the N of the weights) is padded to (ceil(rows/128) * 128, ceil(kb/4) * 4) and cut into 128 x 4
 * tiles stored one after another (512 bytes each), tiles in row-major order. Inside a tile, row r and column c go
 * to byte (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4: the 128 rows are read as 4 groups of 32, and the four
 * groups' scales of one row index sit next to each other. Sources: the cuBLAS documentation (cublasLtMatmul,
 * "1D Block Scaling Factors Layout"); PyTorch's to_blocked() and NVIDIA's cuDNN frontend notes on the 128x4
 * layout describe the same permutation (view (rows/128, 4, 32, kb/4, 4), permute to (0, 3, 2, 1, 4)).
 * Padding bytes are never read for real rows; tprof writes them as 0. */
#ifndef TP_SCALE_LAYOUT_H
#define TP_SCALE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TP_HD __host__ __device__ __forceinline__
#else
#define TP_HD static inline
#endif

/* Bytes of the padded scale matrix for rows x kb scales. */
TP_HD size_t tp_swz_bytes(int64_t rows, int64_t kb) {
    return (size_t)((rows + 127) / 128 * 128) * (size_t)((kb + 3) / 4 * 4);
}

/* Byte offset of scale (r, c) in the tiled layout of a matrix with kb scale columns. */
TP_HD size_t tp_swz_offset(int64_t r, int64_t c, int64_t kb) {
    const int64_t col_tiles = (kb + 3) / 4;
    const int64_t tile = (r / 128) * col_tiles + c / 4;
    return (size_t)(tile * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4);
}

#undef TP_HD
#endif
