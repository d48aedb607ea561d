/* quantize.h: weights converted and quantized on the GPU, bit for bit as the CPU reference does it (issue 43: an
 * engine build quantizes billions of values; formats/dtype.c and formats/qformat.c stay the reference, which CPU
 * builds use and tests/gpu/test_gpu_quantize.c compares these with at awkward shapes, specials included).
 *
 * Every function enqueues work on `stream`, never synchronizes or allocates, and returns a cudaError_t as an int
 * (0 = success; cudaErrorInvalidValue for arguments it refuses). x is always row-major FP32 in device memory. */
#ifndef TP_QUANTIZE_H
#define TP_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "exec/cuda/kernels/kernels.h" /* tp_stream */
#include "formats/qformat.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[i] = x[i] in ydt, n values, exactly as tp_convert_from_f32(ydt, x, y, n, scale): F32 (a copy), F16 and BF16
 * round to nearest even (NaN as tp_f32_to_f16 / tp_f32_to_bf16 write it, not CUDA's canonical NaN), E4M3 encodes
 * x / scale (the IEEE quotient in FP32; a NaN one with x's sign) saturating (tp_f32_to_e4m3). scale is unused
 * for 16- and 32-bit types. */
int tpk_weight_convert(const float *x, void *y, tp_dtype ydt, size_t n, float scale, tp_stream stream);

/* Rows [r0, r1) of a (rows, K) tensor quantized as tp_quantize(f, ..., is_weight 1, global_in = s2) quantizes them:
 * x points at row r0 (the caller streams a tensor through in row chunks), codes and scales at the whole tensor's
 * packed arrays (tp_qtensor's layout: E4M3 a byte a value, E2M1 two a byte with the even element in the low
 * nibble; scales row-major (rows, ceil(K / block)) UE8M0 or UE4M3 codes). s2: NVFP4's per-tensor scale as
 * tp_qformat_global_scale computes it (unused by the MX formats). f: TP_QF_MXFP8, TP_QF_NVFP4 or TP_QF_MXFP4
 * (the formats with one-row blocks); E2M1 needs an even K (a byte never straddles two rows, so a chunk never
 * shares one with another). K need not be a multiple of the block: the last block of a row is partial. */
int tpk_weight_quantize_rows(tp_qformat f, const float *x, int64_t rows, int64_t K, int64_t r0, int64_t r1, float s2,
                             uint8_t *codes, uint8_t *scales, tp_stream stream);

/* 1 when tpk_weight_quantize_rows takes format f at row length K, else 0. */
int tpk_weight_quantize_ok(tp_qformat f, int64_t K);

#ifdef __cplusplus
}
#endif

#endif
