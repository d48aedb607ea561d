/* precision.h: one row of traits per precision (tprof.h's tp_precision), the way dtype.h keeps one per storage
 * type: what a precision's quantized GEMMs store, what its activations are, whether it is weight-only, its block
 * size, what the ops it leaves unquantized run in, the dense GEMM its measured peak times, whether it runs split
 * over GPUs, which shape rules tprof lint holds it to. Every "is this precision quantized / block-scaled /
 * weight-only" question in the planner, the executors, bench, the reports and lint reads this table, so a new
 * precision is one row here (and its kernels).
 *
 * Sources: the formats' own in qformat.h and docs/formats.md; the B200 ratios from NVIDIA's B200 datasheet (dense
 * tensor-core rates: FP4 9, FP8 4.5, FP16/BF16 2.25 PFLOPS). */
#ifndef TP_PRECISION_H
#define TP_PRECISION_H

#include "formats/qformat.h"
#include "tprof.h"

typedef struct {
    const char *name;        /* as --precision takes it: "fp8-wo" */
    tp_qformat qf;           /* the quantized GEMMs' operand format (weights, and activations unless weight_only);
                                TP_QF_NONE: no quantized operand (fp32, fp16, bf16) */
    tp_dtype act;            /* activations between ops and the unquantized GEMMs' operands: F32, F16 or BF16 */
    int weight_only;         /* 1: only weights are quantized (W8A16, W4A16), decoded to act in the kernel */
    int mx_block;            /* 1: a block-scaled MMA format (MXFP8, NVFP4, MXFP4): native on Blackwell, emulated on
                                Hopper by exact dequantization to BF16 and BF16 GEMMs (plan.h) */
    int static_act_scales;   /* 1: activation scales calibrated before the run (per-tensor FP8) */
    tp_precision high;       /* what the ops it does not quantize run in (itself for fp32, fp16, bf16) */
    tp_dtype peak_ab, peak_d; /* the dense GEMM its peak is measured with on Hopper (gemm_peak.h): operand and
                                 output types (an emulated format: the BF16 GEMM it runs) */
    int tensor_parallel;     /* 1: runs split over GPUs (--tp): no activation scales calibrated on one GPU */
    tp_qformat lint_qf;      /* the format whose GEMM shape rules tprof lint applies (weight-only formats: none;
                                their decode GEMVs take any K, planner/supports.h) */
    double b200_ratio;       /* dense tensor-core rate over FP16/BF16 on a B200 (datasheet), for the report's
                                projection; 0: no projection made */
} tp_precision_traits;

/* The row of p; CHECKs that p is a precision. */
const tp_precision_traits *tp_precision_info(tp_precision p);

/* 1 when p quantizes some GEMM operand (its qf is not TP_QF_NONE). */
static inline int tp_precision_quantized(tp_precision p) { return tp_precision_info(p)->qf != TP_QF_NONE; }

#endif
