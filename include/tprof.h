/* tprof.h: public C API of tprof, a transformer inference engine builder, benchmark and profiler.
 *
 * Overview
 *   A model is a family and its configuration (src/models/model.h: tp_model, tp_family; today the ViT family,
 *   parameter names exactly timm's VisionTransformer), built once into an IR graph (tp_graph: ops with shapes,
 *   layer names and FLOP counts), and executed by one of two executors over the same graph:
 *     - the CPU executor: FP32 storage, FP64 accumulation in GEMMs and reductions; the reference;
 *     - the CUDA executor: cuBLASLt GEMMs plus tprof's own kernels, FP32/FP16/BF16/FP8 (E4M3) engines,
 *       the whole forward pass captured in one CUDA graph.
 *
 * Errors
 *   Recoverable errors are returned as tp_status with a one-line reason in tp_error.msg that names the file,
 *   field or value at fault. Functions never exit the process on bad input. Broken internal invariants abort
 *   through the CHECK macros of src/core/check.h.
 *
 * Layouts
 *   Every tensor is row-major (C order). Activations are (B, T, C): batch, tokens, channels. Weights follow
 *   PyTorch: a Linear weight is (out_features, in_features), a Conv2d weight (C_out, C_in, kH, kW).
 *   Images are (B, 3, H, W) fp32, already normalized with the model's preprocessing (its checkpoint's config,
 *   else its preset's mean and std).
 */
#ifndef TPROF_H
#define TPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TPROF_VERSION "0.1.0"

/* ---- status ------------------------------------------------------------------------------------------ */

typedef enum {
    TP_OK = 0,
    TP_ERR_ARG,         /* bad option or argument value */
    TP_ERR_IO,          /* file missing or unreadable */
    TP_ERR_FORMAT,      /* file readable but malformed (safetensors header, image, JSON) */
    TP_ERR_SHAPE,       /* a tensor's name, dtype or shape does not match the model */
    TP_ERR_UNSUPPORTED, /* a combination the build, the format or the GPU cannot run */
    TP_ERR_OOM,         /* host or device memory exhausted */
    TP_ERR_CUDA,        /* CUDA runtime or library failure */
    TP_ERR_NO_GPU       /* a GPU was required and none is usable */
} tp_status;

typedef struct {
    tp_status code;
    char msg[512];
} tp_error;

/* Sets err (if non-NULL) to code and the printf-formatted message, its control characters (which a message can
 * echo from an input) replaced by '?' so the reason stays one line; returns code. */
tp_status tp_fail(tp_error *err, tp_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* As tp_fail with "path: " in front. */
tp_status tp_fail_path(tp_error *err, tp_status code, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
const char *tp_status_name(tp_status s);

/* ---- data types (one table of traits in src/formats/dtype.c) ------------------------------------------ */

typedef enum {
    TP_F32 = 0,
    TP_F16,
    TP_BF16,
    TP_E4M3, /* OCP FP8 E4M3 (E4M3FN): bias 7, max 448, no Inf */
    TP_E5M2, /* OCP FP8 E5M2: bias 15, max 57344 */
    TP_F64,
    TP_I64,
    TP_E2M1,  /* OCP FP4 E2M1: +-{0, .5, 1, 1.5, 2, 3, 4, 6}; stored two per byte */
    TP_UE8M0, /* unsigned power-of-two scale 2^(e-127) (MX block scales) */
    TP_UE4M3, /* E4M3 bit layout used as an unsigned scale (NVFP4 block scales) */
    TP_DTYPE_COUNT
} tp_dtype;

/* Execution precision of an engine or an op (a request; the plan records what each op really ran in).
 * fp8: E4M3 with per-tensor scales; fp8-block: E4M3 with 1x128 / 128x128 FP32 block scales; mxfp8, nvfp4,
 * mxfp4: the block-scaled formats of src/formats/qformat.h; fp8-wo: weight-only FP8 (W8A16): E4M3 weights with a
 * per-tensor FP32 scale, FP16 activations, the weights decoded in registers by the decode GEMV; nvfp4-wo: weight-only
 * NVFP4 (W4A16), the weights in NVFP4 (E2M1, UE4M3 per 16, FP32 per tensor), likewise. */
typedef enum {
    TP_PREC_FP32 = 0,
    TP_PREC_FP16,
    TP_PREC_BF16,
    TP_PREC_FP8,
    TP_PREC_FP8_BLOCK,
    TP_PREC_MXFP8,
    TP_PREC_NVFP4,
    TP_PREC_MXFP4,
    TP_PREC_FP8_WO,
    TP_PREC_NVFP4_WO,
    TP_PREC_COUNT
} tp_precision;

const char *tp_precision_name(tp_precision p);
/* Parses "fp32", "fp16", "bf16", "fp8", "fp8-block", "mxfp8", "nvfp4", "mxfp4", "fp8-wo", "nvfp4-wo"; TP_ERR_ARG naming the value
 * otherwise. */
tp_status tp_precision_parse(const char *s, tp_precision *out, tp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* TPROF_H */
