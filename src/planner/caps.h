/* caps.h: which GEMM precision each NVIDIA GPU architecture can run, how, and whether this build of tprof
 * has that path. The planner asks this table instead of testing compute capabilities itself, so that the
 * choice for every architecture can be tested on a machine without a GPU and printed by `tprof caps`.
 *
 * Two separate questions per (architecture, precision):
 *   hardware path   native (the tensor cores and cuBLASLt have it), emulated (tprof can compute exactly the
 *                   format's result, up to FP32 accumulation order, with other instructions, at a cost), or
 *                   unsupported (no exact way on that GPU);
 *   in this build   whether tprof's source implements that path today. A path can exist in hardware and not
 *                   in tprof (Blackwell block-scaled GEMMs: no Blackwell GPU to test them on yet).
 *
 * Sources (docs/formats.md collects them):
 *   FP8 E4M3 tensor cores: sm_89 (Ada) and newer; cuBLASLt FP8 per-tensor scales (cuBLAS docs, cublasLtMatmul
 *     "FP8" type table).
 *   FP8 block-128 scales (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F / BLK128x128_32F): cuBLAS 12.9+, sm_90 only
 *     (cuBLAS 12.9 release blog "Channel- and block-scaled FP8 matmuls on NVIDIA Hopper").
 *   Block-scaled MMA (VEC32_UE8M0 for MX formats, VEC16_UE4M3 for NVFP4, scales in the 128x4 swizzled layout):
 *     Blackwell only: compute capability 10.x and 12.x per the cuBLAS docs, and 11.0 (Jetson Thor, formerly
 *     sm_101, renamed in CUDA 13; CUTLASS's sm_110f family and FlashInfer's MXFP8 x MXFP4 tests include it).
 *     Hopper (9.0) and Ada (8.9) have none: MX/NV formats are emulated there.
 *   BF16 tensor cores: sm_80 and newer. CUDA 13 (the toolkit on tprof's GPU machines) builds for compute
 *     capability 7.5 and newer only.
 *
 * Architectures are written as compute capability x 10: 90 = sm_90 = 9.0, 121 = sm_121 = 12.1. */
#ifndef TP_CAPS_H
#define TP_CAPS_H

#include <stdio.h>

#include <jansson.h>

#include "tprof.h"

typedef enum {
    TP_PATH_NATIVE = 0, /* the GPU's tensor cores run the format directly */
    TP_PATH_EMULATED,   /* exact result of the format through other instructions (e.g. dequantize to BF16) */
    TP_PATH_UNSUPPORTED /* no exact way on this GPU: building such an engine is an error */
} tp_path_kind;

/* "native", "emulated", "unsupported". */
const char *tp_path_kind_name(tp_path_kind k);

typedef struct {
    tp_path_kind kind;
    /* native: the library path ("cuBLASLt VEC32_UE8M0, 128x4 swizzled scales"); emulated: how the result is
     * obtained; unsupported: why not. Static storage, never NULL. */
    const char *how;
    /* emulated only: what the emulation costs against a native path (throughput, bytes); NULL otherwise. */
    const char *cost;
    /* 1: tprof's source implements this path. Independent of whether this binary has a CUDA executor at all
     * (tp_caps_build_has_cuda) and of which SASS it carries (CMAKE_CUDA_ARCHITECTURES). */
    int implemented;
    /* 1: sm is not one of tp_caps_archs(): the entry was derived from the compute capability by the rules above
     * and has not been checked on such a GPU. */
    int derived;
} tp_cap;

typedef struct {
    int sm;               /* compute capability x 10 */
    const char *family;   /* "Ada", "Hopper", "Blackwell", "Blackwell Ultra" */
    const char *products; /* "H100, H200" */
} tp_arch;

/* The architectures tprof's table covers, ascending: 89, 90, 100, 103, 110, 120, 121. *n receives the count
 * (n may be NULL). Static storage. */
const tp_arch *tp_caps_archs(int *n);
/* The table entry for sm, or NULL when sm is not listed (lookups still work for it, derived). */
const tp_arch *tp_caps_arch_find(int sm);

/* The path precision p takes on GPU architecture sm (compute capability x 10; the CPU executor is not a target
 * here). Any sm is answered: one not in the
 * table is derived from its compute capability (derived = 1); sm < 75 is unsupported for every precision
 * (CUDA 13 dropped it). p out of range: kind unsupported, how "unknown precision". Never fails. */
tp_cap tp_caps_lookup(int sm, tp_precision p);

/* Parses an architecture: "sm_90", "sm90", "SM_90", "90", "sm_100a"/"sm_100f" (nvcc's arch-specific and family
 * suffixes are accepted and dropped), or a compute capability "9.0" / "12.1" as nvidia-smi prints it.
 * *sm receives compute capability x 10, in 10..999. An architecture outside the table is accepted (lookups
 * derive it). Errors: TP_ERR_ARG naming the value. */
tp_status tp_caps_parse_arch(const char *s, int *sm, tp_error *err);

/* 1 when this binary was built with the CUDA executor (TPROF_HAVE_CUDA); without it no GPU path runs, whatever
 * tp_cap.implemented says. */
int tp_caps_build_has_cuda(void);

/* The check the planner makes for one GEMM op: TP_OK when precision p can run on sm in this build (native or
 * emulated, implemented). Otherwise TP_ERR_UNSUPPORTED with one line naming the layer, the format and the GPU
 * (gpu_name, e.g. "NVIDIA H100 80GB HBM3", or NULL to name the architecture from the table) and why:
 * the hardware reason, or that tprof does not implement that path yet. layer may be NULL (engine-wide check). */
tp_status tp_caps_require(int sm, const char *gpu_name, tp_precision p, const char *layer, tp_error *err);

/* Prints the table for one architecture to f: a title line ("sm_90  Hopper (H100, H200)", or a derived note),
 * then one row per precision with the columns precision, hardware (native/emulated/unsupported), how, and
 * "in this build" (yes/no; "no" for every row of a build without the CUDA executor), the cost of each emulated
 * path on a continuation line, and footnotes. The caller prints the GPU's own name when it knows it. */
void tp_caps_print(int sm, FILE *f);

/* The same table as JSON (new reference; the caller json_decref()s it), NULL when out of memory:
 *   {"sm": 90, "arch": "sm_90", "compute_capability": "9.0", "family": "Hopper", "products": "H100, H200",
 *    "derived": false, "note": null | "not in the table; derived from compute capability",
 *    "cuda_executor": true,
 *    "precisions": [{"precision": "fp8", "path": "native", "how": "...", "cost": null | "...",
 *                    "implemented": true, "in_this_build": true}, ...]}
 * family and products are null for an architecture outside the table. in_this_build = implemented and
 * cuda_executor. */
json_t *tp_caps_json(int sm);

#endif
