/* precision.c: the precision-traits table (precision.h) and the precisions' names (tprof.h). */
#include "formats/precision.h"

#include <string.h>

#include "core/check.h"

/* designated by precision: a row per value of tp_precision, checked complete by tp_precision_info */
static const tp_precision_traits PRECISIONS[TP_PREC_COUNT] = {
    [TP_PREC_FP32] = {"fp32", TP_QF_NONE, TP_F32, 0, 0, 0, TP_PREC_FP32, TP_F32, TP_F32, 1, TP_QF_NONE, 0},
    [TP_PREC_FP16] = {"fp16", TP_QF_NONE, TP_F16, 0, 0, 0, TP_PREC_FP16, TP_F16, TP_F16, 1, TP_QF_NONE, 0},
    [TP_PREC_BF16] = {"bf16", TP_QF_NONE, TP_BF16, 0, 0, 0, TP_PREC_BF16, TP_BF16, TP_BF16, 1, TP_QF_NONE, 0},
    /* E4M3 GEMMs with FP16 output, static per-tensor activation scales */
    [TP_PREC_FP8] = {"fp8", TP_QF_FP8_TENSOR, TP_F16, 0, 0, 1, TP_PREC_FP16, TP_E4M3, TP_F16, 0, TP_QF_FP8_TENSOR,
                     2.0},
    /* cuBLASLt's 1x128 / 128x128 block-scaled E4M3 GEMMs, BF16 output, scales computed per block at run time */
    [TP_PREC_FP8_BLOCK] = {"fp8-block", TP_QF_FP8_BLOCK128, TP_BF16, 0, 0, 0, TP_PREC_BF16, TP_E4M3, TP_BF16, 0,
                           TP_QF_FP8_BLOCK128, 0},
    [TP_PREC_MXFP8] = {"mxfp8", TP_QF_MXFP8, TP_BF16, 0, 1, 0, TP_PREC_BF16, TP_BF16, TP_BF16, 0, TP_QF_MXFP8, 2.0},
    [TP_PREC_NVFP4] = {"nvfp4", TP_QF_NVFP4, TP_BF16, 0, 1, 0, TP_PREC_BF16, TP_BF16, TP_BF16, 0, TP_QF_NVFP4, 4.0},
    [TP_PREC_MXFP4] = {"mxfp4", TP_QF_MXFP4, TP_BF16, 0, 1, 0, TP_PREC_BF16, TP_BF16, TP_BF16, 0, TP_QF_MXFP4, 4.0},
    /* weight-only: E4M3 (per-tensor scale) or NVFP4 weights, FP16 activations; the GEMVs decode in registers */
    [TP_PREC_FP8_WO] = {"fp8-wo", TP_QF_FP8_TENSOR, TP_F16, 1, 0, 0, TP_PREC_FP16, TP_F16, TP_F16, 1, TP_QF_NONE, 0},
    [TP_PREC_NVFP4_WO] = {"nvfp4-wo", TP_QF_NVFP4, TP_F16, 1, 0, 0, TP_PREC_FP16, TP_F16, TP_F16, 1, TP_QF_NONE, 0},
};

const tp_precision_traits *tp_precision_info(tp_precision p) {
    CHECK((unsigned)p < TP_PREC_COUNT && PRECISIONS[p].name != NULL);
    return &PRECISIONS[p];
}

const char *tp_precision_name(tp_precision p) { return (unsigned)p < TP_PREC_COUNT ? PRECISIONS[p].name : "?"; }

tp_status tp_precision_parse(const char *s, tp_precision *out, tp_error *err) {
    for (int i = 0; i < TP_PREC_COUNT; i++)
        if (strcmp(s, PRECISIONS[i].name) == 0) {
            *out = (tp_precision)i;
            return TP_OK;
        }
    return tp_fail(err, TP_ERR_ARG,
                   "unknown precision '%s' (expected fp32, fp16, bf16, fp8, fp8-block, mxfp8, nvfp4, mxfp4, fp8-wo or nvfp4-wo)", s);
}
