/* qformat.h: quantized tensor formats (per-tensor FP8, FP8 block-128, MXFP8, NVFP4, MXFP4): one table of
 * traits and bit-exact CPU quantizers, the reference every GPU path (native or emulated) is checked against.
 *
 * Scale rules (each named; docs/formats.md collects the sources):
 *   fp8 (per tensor)  scale = amax / 448 (amax 0 -> 1), q = E4M3_sat_rne(x / scale).
 *   fp8-block128      activations: one FP32 scale per 1 x 128 block along K, weights: per 128 x 128 block;
 *                     scale = amax_block / 448 (amax 0 -> 1), q = E4M3_sat_rne(x / scale) (DeepSeek-V3's recipe;
 *                     cuBLASLt VEC128_32F / BLK128x128_32F).
 *   mxfp8             OCP Microscaling (MX) spec v1.0 and its reference emulator (microsoft/microxcaling):
 *                     32-element blocks along K, shared_exp = floor(log2(amax_block)) - 8 (8 = emax of E4M3),
 *                     clamped to [-127, 127], X = 2^shared_exp stored as UE8M0 (code shared_exp + 127),
 *                     q = E4M3_sat_rne(x / X); an all-zero block gets shared_exp -127 (code 0).
 *   nvfp4             NVIDIA ModelOpt (nvfp4_tensor.py): 16-element blocks along K; per-tensor s2 = amax_tensor /
 *                     (6 * 448) (FP32; amax 0 -> s2 = 1); block scale s = E4M3_sat_rne(amax_block / (6 * s2))
 *                     (UE4M3); q = E2M1_sat_rne(x / (s * s2)); dequant x' = q * s * s2. A block whose s encodes
 *                     to 0 dequantizes to 0.
 *   mxfp4             OCP MX v1.0: as mxfp8 with E2M1 elements (emax 2).
 * K that is not a multiple of the block: the last block is partial (its amax over the elements present); formats
 * that forbid it say so in the planner, not here. The same holds for fp8-block128 weight rows.
 * The exact FP32/FP64 arithmetic of each rule (what a GPU kernel must reproduce bit for bit) and the handling of
 * NaN/Inf inputs are spelled out at the top of qformat.c; tests/test_qformat.c checks them against
 * tests/fixtures/formats_golden.bin (tools/make_format_golden.py: ml_dtypes and an independent numpy quantizer). */
#ifndef TP_QFORMAT_H
#define TP_QFORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "tprof.h"

typedef enum {
    TP_QF_NONE = 0,      /* plain storage (fp32/fp16/bf16) */
    TP_QF_FP8_TENSOR,    /* E4M3, one FP32 scale per tensor */
    TP_QF_FP8_BLOCK128,  /* E4M3, FP32 scales per 1x128 (activations) or 128x128 (weights) block */
    TP_QF_MXFP8,         /* E4M3, UE8M0 scale per 32 along K */
    TP_QF_NVFP4,         /* E2M1, UE4M3 scale per 16 along K, FP32 per-tensor scale */
    TP_QF_MXFP4,         /* E2M1, UE8M0 scale per 32 along K */
    TP_QF_COUNT
} tp_qformat;

typedef struct {
    const char *name;   /* "fp8", "fp8-block128", "mxfp8", "nvfp4", "mxfp4" */
    tp_dtype elem;      /* element type */
    int bits;           /* bits per element: 8 or 4 */
    int block;          /* elements per scale along K (0: per tensor) */
    int weight_rows;    /* rows per weight scale block (128 for fp8-block128, else 1) */
    tp_dtype scale;     /* scale type: TP_F32, TP_UE8M0 or TP_UE4M3 */
    int global_scale;   /* 1: a second-level FP32 per-tensor scale (NVFP4) */
    const char *source;
} tp_qformat_traits;

const tp_qformat_traits *tp_qformat_info(tp_qformat f);
/* Parses a name of the table; -1 if unknown. */
int tp_qformat_parse(const char *name);

/* E2M1 (FP4): values +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no NaN/Inf; encoding saturates to +-6 (Inf included), RNE
 * with ties to the even code; the sign bit is kept (-0 -> 0x8). NaN is not defined by the format: it returns 0x7
 * with the NaN's sign (a documented choice; ml_dtypes 0.6 differs: it gives -0 (0x8) for +NaN and +0 for -NaN). */
uint8_t tp_f32_to_e2m1(float f); /* 4-bit code in the low nibble */
float tp_e2m1_to_f32(uint8_t v);
/* UE8M0: 2^(e - 127), e in 0..254, 0xFF NaN. Encoding of a power of two; other values round down (floor of the
 * log2), which is how the MX rule uses it (ml_dtypes' float8_e8m0fnu cast rounds to nearest instead). Below 2^-127
 * and 0 give code 0 (the MX all-zero block); negative, Inf and NaN give 0xFF. */
uint8_t tp_f32_to_ue8m0(float f);
float tp_ue8m0_to_f32(uint8_t v);

/* Quantize-dequantize x (rows, K) row-major fp32 into y (same shape): y holds exactly the values the format
 * represents, i.e. what a GEMM on the quantized tensor multiplies. For NVFP4, y excludes the per-tensor scale
 * s2 (y = q * s, exact in BF16 and FP16), and *global_scale receives s2 (so the true value is y * s2); pass
 * global_in > 0 to use a calibrated s2 instead of the tensor's own. For other formats *global_scale = 1
 * (global_scale may be NULL). is_weight selects 128x128 blocks for fp8-block128. y may equal x. With an FP32
 * scale (fp8, fp8-block128) y = q * s rounded once to FP32; MX and NVFP4 y are exact.
 * Errors: TP_ERR_ARG (unknown format or TP_QF_NONE, rows or K < 1, NULL x/y, NVFP4 global_in Inf or NaN). */
tp_status tp_qdq_f32(tp_qformat f, const float *x, float *y, int64_t rows, int64_t K, int is_weight,
                     float global_in, float *global_scale, tp_error *err);

/* The packed form, for engine files and native GEMMs: elements (rows * K at bits each, row-major, E2M1 two per
 * byte with element 2i in the low nibble) and scales (row-major over (ceil(rows / wr), ceil(K / block)), wr =
 * weight_rows for fp8-block128 weights and 1 otherwise, one byte (UE8M0, UE4M3) or four (F32, host byte order)
 * each; per-tensor: one F32). Caller frees elems and scales (tp_qtensor_free). Errors: TP_ERR_ARG as
 * tp_qdq_f32, TP_ERR_OOM. */
typedef struct {
    tp_qformat format;
    int64_t rows, K;
    uint8_t *elems;
    size_t elem_bytes;
    uint8_t *scales;
    size_t scale_bytes;
    float global_scale; /* NVFP4 s2; 1 otherwise */
} tp_qtensor;

tp_status tp_quantize(tp_qformat f, const float *x, int64_t rows, int64_t K, int is_weight, float global_in,
                      tp_qtensor *out, tp_error *err);
/* The per-tensor second-level scale tp_quantize(f, x, rows, K, ..., global_in 0) uses: NVFP4's s2 = amax_tensor /
 * 2688 (1 for an all-zero tensor, NaN when amax is Inf), 1 for every other format. The GPU quantizer
 * (exec/cuda/kernels/quantize.h) takes it from here, so both sides quantize under the same s2. */
float tp_qformat_global_scale(tp_qformat f, const float *x, int64_t rows, int64_t K);
/* Decodes a tp_qtensor back to fp32 (including the global scale): equals tp_qdq_f32's y * s2. */
tp_status tp_dequantize(const tp_qtensor *q, float *y, tp_error *err);
void tp_qtensor_free(tp_qtensor *q);

/* Static activation scales come from calibration (an engine of higher precision run over calibration inputs):
 * max takes max |x|; percentile the p-th percentile of |x| (the largest (100 - p)% of magnitudes then saturate,
 * trading their clipping error for a finer step everywhere else; NVIDIA ModelOpt and TensorRT offer both);
 * entropy the threshold whose E4M3 quantization of |x|'s histogram loses the least information (the smallest
 * KL divergence, tp_calib_entropy_threshold: TensorRT's entropy calibration, Migacz 2017, on E4M3's grid). */
typedef enum { TP_CALIB_MAX = 0, TP_CALIB_PERCENTILE, TP_CALIB_ENTROPY } tp_calib_method;
typedef struct {
    tp_calib_method method;
    double percentile; /* TP_CALIB_PERCENTILE: 0 < p <= 100, e.g. 99.99 */
} tp_calib_options;
/* "max", "percentile 99.99" or "entropy" into buf (n bytes); returns buf. */
const char *tp_calib_describe(const tp_calib_options *co, char *buf, size_t n);

/* Entropy calibration of one activation (S. Migacz, "8-bit Inference with TensorRT", GTC 2017, with E4M3's grid
 * for INT8's 128 levels): bins (nbins counts of |x| in equal bins over [0, amax]). For each candidate threshold T
 * (a bin edge from nbins / 16 up), P is the histogram below T with the mass above T added to its last bin, Q the
 * same bins after quantizing each bin's center to E4M3 under the scale T / 448 (the bins sharing a code share
 * their mass evenly among those of them that hold any); returns the T of the smallest KL(P || Q) (the largest
 * on ties), or amax for an empty histogram. */
double tp_calib_entropy_threshold(const unsigned *bins, int nbins, double amax);

#endif
