/* gemm_cublaslt.c: every GEMM of tprof through cuBLASLt (contract in gemm_cublaslt.h).
 *
 * A row-major (R, C) matrix is a column-major (C, R) one, so row-major D (M, N) = A (M, K) @ W (N, K)^T + bias is,
 * column-major, D' (N, M) = op_T(W' (K, N)) @ A' (K, M) + bias. cuBLASLt therefore sees
 *   matrix "A" = W:           type ab, layout rows K, cols N, ld K, op T   -> op(A) is (N x K)
 *   matrix "B" = activations: type ab, layout rows K, cols M, ld K, op N   -> op(B) is (K x M)
 *   matrices C, D:            type d,  layout rows N, cols M, ld N          (beta = 0 and C aliases D, or a residual)
 * i.e. cuBLAS's m = N, n = M, k = K, in the "TN" form that FP8 requires on Hopper.
 *
 * Per-run attributes. The FP8 scale pointers and the bias pointer are passed to tp_gemm_run, so they are written
 * into the plan's matmul descriptor (cublasLtMatmulDescSetAttribute, host-only, no GPU work: safe during stream
 * capture, where the values in effect at capture time are baked into the graph) just before cublasLtMatmul.
 * Consequence: one plan must not be run from two host threads at once. The context's single workspace is shared
 * by all plans, so GEMMs of one context must also be ordered (one stream, or streams joined by events).
 *
 * Alignment. The heuristic is told that every buffer is (at least) 16-byte aligned (PREF_MIN_ALIGNMENT_* = 16,
 * instead of cuBLASLt's default assumption of 256, which a sub-allocated activation arena may not meet);
 * tp_gemm_run checks that A, W, D, bias and the FP8 scale pointers are 16-byte aligned and returns
 * CUBLAS_STATUS_INVALID_VALUE otherwise.
 *
 * FP8 rules (cuBLAS docs, cublasLtMatmul, FP8 section: "all matrix dimensions must meet the optimal requirements
 * listed in Tensor Core Usage (i.e. pointers and matrix dimensions must support 16-byte alignment)"). In the
 * mapping above that means (k * 1 byte) % 16 and (ldc * sizeof(D)) % 16, i.e. K % 16 == 0 and N % 8 == 0 for
 * F16/BF16 outputs; M is cuBLAS's n and is free. Both are checked at plan time so an FP8 shape is rejected with
 * TP_ERR_UNSUPPORTED naming the dimension, never left to fail inside cublasLtMatmul. FAST_ACCUM (desc.fast_accum)
 * skips the periodic promotion of the tensor-core partial sums to fp32 on Hopper; the engines set it unless
 * --fp8-accum promote (tp_engine_options.fp8_promote), and every FP8 GEMM's note says which.
 * Per-tensor scales: A_SCALE_POINTER (cuBLASLt's A = W) = w_scale, B_SCALE_POINTER (B = activations) = a_scale,
 * so D = (a_scale * w_scale) * (Aq @ Wq^T) + bias; an E4M3 D also takes D_SCALE_POINTER = d_scale, the reciprocal of
 * its storage scale: Dq = sat_e4m3(rne(d_scale * D)) (cuBLASLt applies the D scale after the epilogue). */
#include "exec/cuda/vendor/gemm_cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "formats/qformat.h"

#define GEMM_MIN_ALIGN 16u

struct tp_gemm_ctx {
    cublasLtHandle_t lt;
    void *workspace; /* device; NULL when workspace_bytes is 0 */
    size_t workspace_bytes;
};

struct tp_gemm_plan {
    tp_gemm_desc desc;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (= W), B (= activations), C = D */
    cublasLtMatrixLayout_t ld;         /* D's own layout when it differs from C's (E4M3 D: C is F16), else NULL */
    cublasLtMatmulAlgo_t algo;
    size_t workspace_needed; /* from the heuristic; <= the context's workspace */
    cublasLtMatmulHeuristicResult_t cand[TP_GEMM_MAX_CANDIDATES]; /* the heuristic's candidates, best-ranked first */
    int n_cand, chosen;
    char name[96];
};

static const char *dt_name(tp_dtype t) {
    const tp_dtype_traits *tr = tp_dtype_info(t);
    return tr ? tr->name : "?";
}

/* The cudaDataType of a tprof storage type; 0 when cuBLASLt is not used with it here. */
static int cuda_type(tp_dtype t, cudaDataType *out) {
    switch (t) {
    case TP_F32: *out = CUDA_R_32F; return 1;
    case TP_F16: *out = CUDA_R_16F; return 1;
    case TP_BF16: *out = CUDA_R_16BF; return 1;
    case TP_E4M3: *out = CUDA_R_8F_E4M3; return 1;
    case TP_E2M1: *out = CUDA_R_4F_E2M1; return 1;
    default: return 0;
    }
}

size_t tp_gemm_lib_version(void) { return cublasLtGetVersion(); }

tp_status tp_gemm_ctx_create(size_t workspace_bytes, tp_gemm_ctx **out, tp_error *err) {
    *out = NULL;
    tp_gemm_ctx *c = calloc(1, sizeof *c);
    if (!c) return tp_fail(err, TP_ERR_OOM, "gemm: out of host memory for the cuBLASLt context");
    cublasStatus_t st = cublasLtCreate(&c->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(c);
        return tp_fail(err, st == CUBLAS_STATUS_ALLOC_FAILED ? TP_ERR_OOM : TP_ERR_CUDA, "gemm: cublasLtCreate: %s",
                       cublasLtGetStatusString(st));
    }
    if (workspace_bytes > 0) {
        cudaError_t ce = cudaMalloc(&c->workspace, workspace_bytes);
        if (ce != cudaSuccess) {
            cublasLtDestroy(c->lt);
            free(c);
            return tp_fail(err, ce == cudaErrorMemoryAllocation ? TP_ERR_OOM : TP_ERR_CUDA,
                           "gemm: cudaMalloc of a %zu-byte cuBLASLt workspace: %s", workspace_bytes,
                           cudaGetErrorString(ce));
        }
    }
    c->workspace_bytes = workspace_bytes;
    *out = c;
    return TP_OK;
}

void tp_gemm_ctx_destroy(tp_gemm_ctx *ctx) {
    if (!ctx) return;
    if (ctx->workspace) cudaFree(ctx->workspace);
    cublasLtDestroy(ctx->lt);
    free(ctx);
}

void tp_gemm_plan_destroy(tp_gemm_plan *p) {
    if (!p) return;
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    free(p);
}

/* Type combinations of gemm_cublaslt.h; anything else is TP_ERR_UNSUPPORTED. */
static int combo_supported(tp_dtype ab, tp_dtype d) {
    switch (ab) {
    case TP_F32: return d == TP_F32;
    case TP_F16: return d == TP_F16;
    case TP_BF16: return d == TP_BF16 || d == TP_F32; /* f32 out: checking emulated formats without rounding D */
    case TP_E4M3: return d == TP_F16 || d == TP_BF16 || d == TP_E4M3;
    default: return 0;
    }
}

size_t tp_gemm_b128_weight_scale_count(int64_t N, int64_t K) {
    int64_t kb = (K + 127) / 128, nb = (N + 127) / 128;
    return (size_t)(nb * ((kb + 3) / 4 * 4));
}

void tp_gemm_b128_weight_scales(const float *plain, int64_t N, int64_t K, float *out) {
    int64_t kb = (K + 127) / 128, nb = (N + 127) / 128, ld = (kb + 3) / 4 * 4;
    for (int64_t r = 0; r < nb; r++)
        for (int64_t c = 0; c < ld; c++) out[r * ld + c] = c < kb ? plain[r * kb + c] : 0.0f;
}

/* Evaluates a cuBLASLt call during planning; on failure fails the plan with the call's text and status. */
#define LT_PLAN(call)                                                                                          \
    do {                                                                                                       \
        cublasStatus_t st_ = (call);                                                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
            tp_status code_ = st_ == CUBLAS_STATUS_ALLOC_FAILED ? TP_ERR_OOM : TP_ERR_CUDA;                    \
            tp_fail(err, code_, "gemm %s: %s: %s", name, #call, cublasLtGetStatusString(st_));                 \
            tp_gemm_plan_destroy(p);                                                                           \
            return code_;                                                                                      \
        }                                                                                                      \
    } while (0)

tp_status tp_gemm_plan_create(tp_gemm_ctx *ctx, const tp_gemm_desc *desc, const char *name, tp_gemm_plan **out,
                              tp_error *err) {
    *out = NULL;
    if (!name) name = "(unnamed)";
    const int64_t M = desc->M, N = desc->N, K = desc->K;
    if (M <= 0 || N <= 0 || K <= 0)
        return tp_fail(err, TP_ERR_ARG, "gemm %s: dimensions must be positive, got M=%lld N=%lld K=%lld", name,
                       (long long)M, (long long)N, (long long)K);
    const int bs = desc->block_fmt == TP_QF_MXFP8 || desc->block_fmt == TP_QF_NVFP4 || desc->block_fmt == TP_QF_MXFP4;
    if (desc->block_fmt && !bs)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: block format %d has no native block-scaled MMA", name,
                       desc->block_fmt);
    if (bs) {
        const tp_qformat_traits *qt = tp_qformat_info((tp_qformat)desc->block_fmt);
        if (desc->ab_dt != qt->elem || desc->d_dt != TP_BF16)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: native %s needs %s inputs and a bf16 output, got %s -> %s",
                           name, qt->name, dt_name(qt->elem), dt_name(desc->ab_dt), dt_name(desc->d_dt));
        if (K % 32 != 0 || N % 8 != 0)
            return tp_fail(err, TP_ERR_UNSUPPORTED,
                           "gemm %s: native %s needs K %% 32 == 0 and N %% 8 == 0 (16-byte rows), got K=%lld N=%lld",
                           name, qt->name, (long long)K, (long long)N);
    }
    if (!bs && !combo_supported(desc->ab_dt, desc->d_dt))
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "gemm %s: inputs %s with output %s is not supported (supported: f32->f32, f16->f16, "
                       "bf16->bf16 or f32, e4m3->f16, bf16 or e4m3)",
                       name, dt_name(desc->ab_dt), dt_name(desc->d_dt));
    if (desc->residual && desc->gelu)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: a residual and GELU in one epilogue are not supported", name);
    if (desc->residual && desc->d_dt == TP_E4M3)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: a residual in the epilogue needs an f16/bf16/f32 output, not "
                       "e4m3", name);
    if (desc->block128 && (desc->ab_dt != TP_E4M3 || desc->d_dt != TP_BF16))
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "gemm %s: FP8 block-128 scales need e4m3 inputs and a bf16 output, got %s -> %s", name,
                       dt_name(desc->ab_dt), dt_name(desc->d_dt));
    if (desc->block128 && M % 4 != 0)
        return tp_fail(err, TP_ERR_UNSUPPORTED,
                       "gemm %s: FP8 block-128 scales need M %% 4 == 0 (cuBLASLt refuses other M; pad the rows), got "
                       "M=%lld",
                       name, (long long)M);
    if (desc->ab_dt == TP_E4M3 && !bs) {
        if (K % 16 != 0)
            return tp_fail(err, TP_ERR_UNSUPPORTED,
                           "gemm %s: e4m3 inputs need K %% 16 == 0 (16-byte rows, cuBLASLt FP8 rule), got K=%lld "
                           "(M=%lld N=%lld, output %s)",
                           name, (long long)K, (long long)M, (long long)N, dt_name(desc->d_dt));
        if (N % (desc->d_dt == TP_E4M3 ? 16 : 8) != 0)
            return tp_fail(err, TP_ERR_UNSUPPORTED,
                           "gemm %s: e4m3 inputs with %s output need N %% %d == 0 (16-byte output rows, cuBLASLt FP8 "
                           "rule), got N=%lld (M=%lld K=%lld)",
                           name, dt_name(desc->d_dt), desc->d_dt == TP_E4M3 ? 16 : 8, (long long)N, (long long)M,
                           (long long)K);
    }

    cudaDataType ab_t, d_t;
    if (!cuda_type(desc->ab_dt, &ab_t) || !cuda_type(desc->d_dt, &d_t)) /* unreachable after combo_supported */
        return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: no CUDA type for %s/%s", name, dt_name(desc->ab_dt),
                       dt_name(desc->d_dt));

    tp_gemm_plan *p = calloc(1, sizeof *p);
    if (!p) return tp_fail(err, TP_ERR_OOM, "gemm %s: out of host memory", name);
    p->desc = *desc;
    snprintf(p->name, sizeof p->name, "%s", name);

    /* Pure fp32 accumulation for every type (CUBLAS_COMPUTE_32F, never the _FAST_TF32 variant). */
    LT_PLAN(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    LT_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    LT_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    /* An E4M3 D takes an F16 C (never read: beta = 0) and an F16 bias: cuBLASLt's FP8 table (cublasLtMatmul,
     * "E4M3 E4M3 -> C 16F, D E4M3, bias 16F") */
    const cudaDataType c_t = desc->d_dt == TP_E4M3 ? CUDA_R_16F : d_t;
    if (desc->has_bias || desc->gelu) {
        const int32_t epi = desc->gelu ? (desc->has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                       : CUBLASLT_EPILOGUE_BIAS,
                      bias_t = (int32_t)c_t;
        LT_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (desc->has_bias)
            LT_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof bias_t));
    }
    if (desc->ab_dt == TP_E4M3) {
        const int8_t fast = desc->fast_accum ? 1 : 0;
        LT_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    }
    if (desc->block128 || bs) {
        /* fp8-block: cuBLASLt's A is W (128x128 blocks), its B the activations (1x128 blocks); MX / NVFP4: both
         * per 32 / 16 along K */
        const int32_t vec = desc->block_fmt == TP_QF_NVFP4 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3
                                                          : CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
        const int32_t ma = bs ? vec : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                      mb = bs ? vec : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        LT_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
        LT_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
        /* cuBLASLt 13.1's heuristic returns no algorithm for block scale modes while the scale pointers are unset
         * (tools/probes/fp8_block128_shapes.c): any valid device address will do here (the workspace); the real
         * ones are set by tp_gemm_run */
        if (!ctx->workspace) {
            tp_gemm_plan_destroy(p);
            return tp_fail(err, TP_ERR_ARG, "gemm %s: block-scaled GEMM planning needs a cuBLASLt workspace", name);
        }
        LT_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ctx->workspace,
                                               sizeof ctx->workspace));
        LT_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ctx->workspace,
                                               sizeof ctx->workspace));
    }

    LT_PLAN(cublasLtMatrixLayoutCreate(&p->la, ab_t, (uint64_t)K, (uint64_t)N, K));
    LT_PLAN(cublasLtMatrixLayoutCreate(&p->lb, ab_t, (uint64_t)K, (uint64_t)M, K));
    LT_PLAN(cublasLtMatrixLayoutCreate(&p->lc, c_t, (uint64_t)N, (uint64_t)M, N));
    if (c_t != d_t) LT_PLAN(cublasLtMatrixLayoutCreate(&p->ld, d_t, (uint64_t)N, (uint64_t)M, N));

    cublasLtMatmulPreference_t pref = NULL;
    LT_PLAN(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = ctx->workspace_bytes;
    const uint32_t al = GEMM_MIN_ALIGN;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                             sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
    memset(p->cand, 0, sizeof p->cand);
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->op, p->la, p->lb, p->lc, p->ld ? p->ld : p->lc, pref,
                                            TP_GEMM_MAX_CANDIDATES, p->cand, &found);
    const cublasLtMatmulHeuristicResult_t res = p->cand[0];
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1 || res.state != CUBLAS_STATUS_SUCCESS) {
        tp_fail(err, TP_ERR_UNSUPPORTED,
                "gemm %s: cuBLASLt has no algorithm for M=%lld N=%lld K=%lld inputs %s%s output %s%s "
                "(workspace %zu bytes): %s",
                name, (long long)M, (long long)N, (long long)K, dt_name(desc->ab_dt),
                desc->block128 ? " (block-128 scales)"
                : bs           ? (desc->block_fmt == TP_QF_NVFP4 ? " (VEC16_UE4M3 scales)" : " (VEC32_UE8M0 scales)")
                               : "", dt_name(desc->d_dt), desc->has_bias ? " +bias" : "", ctx->workspace_bytes,
                cublasLtGetStatusString(st != CUBLAS_STATUS_SUCCESS ? st
                                        : found < 1                 ? CUBLAS_STATUS_NOT_SUPPORTED
                                                                    : res.state));
        tp_gemm_plan_destroy(p);
        return TP_ERR_UNSUPPORTED;
    }
    p->n_cand = 0; /* the usable candidates, in the heuristic's order */
    for (int k = 0; k < found && k < TP_GEMM_MAX_CANDIDATES; k++)
        if (p->cand[k].state == CUBLAS_STATUS_SUCCESS) p->cand[p->n_cand++] = p->cand[k];
    p->chosen = 0;
    p->algo = p->cand[0].algo;
    p->workspace_needed = p->cand[0].workspaceSize;
    *out = p;
    return TP_OK;
}

int tp_gemm_plan_candidates(const tp_gemm_plan *p) { return p ? p->n_cand : 0; }
int tp_gemm_plan_choice(const tp_gemm_plan *p) { return p ? p->chosen : -1; }
const tp_gemm_desc *tp_gemm_plan_desc(const tp_gemm_plan *p) { return p ? &p->desc : NULL; }

int tp_gemm_plan_select(tp_gemm_plan *p, int k) {
    if (!p || k < 0 || k >= p->n_cand) return -1;
    p->chosen = k;
    p->algo = p->cand[k].algo;
    p->workspace_needed = p->cand[k].workspaceSize;
    return 0;
}

static int misaligned(const void *ptr) { return ((uintptr_t)ptr % GEMM_MIN_ALIGN) != 0; }

int tp_gemm_run(tp_gemm_ctx *ctx, const tp_gemm_plan *plan, const void *A, const void *W, const void *bias, void *D,
                const float *a_scale, const float *w_scale, tp_stream stream) {
    return tp_gemm_run_alpha(ctx, plan, A, W, bias, D, a_scale, w_scale, 1.0f, stream);
}

int tp_gemm_run_alpha(tp_gemm_ctx *ctx, const tp_gemm_plan *plan, const void *A, const void *W, const void *bias,
                      void *D, const float *a_scale, const float *w_scale, float alpha_in, tp_stream stream) {
    return tp_gemm_run_q(ctx, plan, A, W, bias, NULL, D, a_scale, w_scale, NULL, alpha_in, stream);
}

int tp_gemm_run_q(tp_gemm_ctx *ctx, const tp_gemm_plan *plan, const void *A, const void *W, const void *bias,
                  const void *residual, void *D, const float *a_scale, const float *w_scale, const float *d_scale,
                  float alpha_in, tp_stream stream) {
    const int fp8 = plan->desc.ab_dt == TP_E4M3 || plan->desc.ab_dt == TP_E2M1; /* scaled inputs */
    /* Caller bugs are reported as INVALID_VALUE rather than handed to cuBLASLt, whose failure modes for a
     * missing scale (silently 1.0) or bias would be wrong answers, not errors. */
    if (!A || !W || !D || misaligned(A) || misaligned(W) || misaligned(D)) return (int)CUBLAS_STATUS_INVALID_VALUE;
    if (plan->desc.has_bias ? (!bias || misaligned(bias)) : bias != NULL) return (int)CUBLAS_STATUS_INVALID_VALUE;
    if (fp8 ? (!a_scale || !w_scale) : (a_scale || w_scale)) return (int)CUBLAS_STATUS_INVALID_VALUE;
    /* cuBLASLt 13.1 on H200 answers CUBLAS_STATUS_NOT_SUPPORTED at cublasLtMatmul for 4-byte-aligned scale
     * pointers (seen by cuda_engine.c); checked here so the contract is explicit and the failure immediate. */
    if (fp8 && (misaligned(a_scale) || misaligned(w_scale))) return (int)CUBLAS_STATUS_INVALID_VALUE;
    const int q8 = plan->desc.d_dt == TP_E4M3; /* quantized output: D = d_scale * (...) */
    if (q8 ? (!d_scale || misaligned(d_scale)) : d_scale != NULL) return (int)CUBLAS_STATUS_INVALID_VALUE;
    if (plan->desc.residual ? (!residual || misaligned(residual)) : residual != NULL)
        return (int)CUBLAS_STATUS_INVALID_VALUE;

    cublasStatus_t st;
    if (plan->desc.has_bias) {
        st = cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
    }
    if (fp8) {
        st = cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale);
        if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
        st = cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale, sizeof a_scale);
        if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
    }
    if (q8) {
        st = cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &d_scale, sizeof d_scale);
        if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
    }
    /* C is the residual (beta = 1), or never read (beta = 0); when its type differs from D's (E4M3 D) it must not
     * alias D: cuBLASLt 13.1 then answers INVALID_VALUE, and takes C = NULL (tools/probes/fp8_e4m3_out.c, H200) */
    const float alpha = alpha_in, beta = residual ? 1.0f : 0.0f;
    const void *C = residual ? residual : plan->ld ? NULL : D;
    st = cublasLtMatmul(ctx->lt, plan->op, &alpha, W, plan->la, A, plan->lb, &beta, C, plan->lc, D,
                        plan->ld ? plan->ld : plan->lc, &plan->algo, ctx->workspace, plan->workspace_needed,
                        (cudaStream_t)stream);
    return (int)st;
}

/* ---- strided-batched GEMMs ---------------------------------------------------------------------------------- */

struct tp_bgemm {
    tp_bgemm_desc d;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (= our B), B (= our A), C */
    cublasLtMatmulAlgo_t algo;
    size_t workspace_needed;
};

void tp_bgemm_destroy(tp_bgemm *p) {
    if (!p) return;
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    free(p);
}

#define BG_PLAN(call)                                                                                          \
    do {                                                                                                       \
        cublasStatus_t st_ = (call);                                                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
            tp_status code_ = st_ == CUBLAS_STATUS_ALLOC_FAILED ? TP_ERR_OOM : TP_ERR_CUDA;                    \
            tp_fail(err, code_, "batched gemm %s: %s: %s", name, #call, cublasLtGetStatusString(st_));         \
            tp_bgemm_destroy(p);                                                                               \
            return code_;                                                                                      \
        }                                                                                                      \
    } while (0)

/* One batched matrix layout: rows x cols column-major with ld, batch, stride. */
static cublasStatus_t bg_layout(cublasLtMatrixLayout_t *l, cudaDataType t, int64_t rows, int64_t cols, int64_t ld,
                                int batch, int64_t stride) {
    cublasStatus_t st = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
    const int32_t bc = batch;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return st;
}

tp_status tp_bgemm_create(tp_gemm_ctx *ctx, const tp_bgemm_desc *d, const char *name, tp_bgemm **out, tp_error *err) {
    *out = NULL;
    if (!name) name = "(unnamed)";
    const int64_t M = d->M, N = d->N, K = d->K;
    if (M < 1 || N < 1 || K < 1 || d->batch < 1 || d->lda < K || d->ldb < (d->trans_b ? K : N) || d->ldc < N ||
        d->sa < 0 || d->sb < 0 || d->sc < 0 || d->align < 1 || d->align > 16 || (d->align & (d->align - 1)))
        return tp_fail(err, TP_ERR_ARG, "batched gemm %s: M=%lld N=%lld K=%lld batch %d, lda %lld ldb %lld ldc %lld, "
                       "align %u: invalid", name, (long long)M, (long long)N, (long long)K, d->batch,
                       (long long)d->lda, (long long)d->ldb, (long long)d->ldc, d->align);
    const int ok = (d->ab_dt == TP_F32 && d->c_dt == TP_F32) ||
                   ((d->ab_dt == TP_F16 || d->ab_dt == TP_BF16) && (d->c_dt == d->ab_dt || d->c_dt == TP_F32));
    cudaDataType ab_t, c_t;
    if (!ok || !cuda_type(d->ab_dt, &ab_t) || !cuda_type(d->c_dt, &c_t))
        return tp_fail(err, TP_ERR_UNSUPPORTED, "batched gemm %s: inputs %s with output %s (supported: f32->f32, "
                       "f16/bf16 -> the same or f32)", name, dt_name(d->ab_dt), dt_name(d->c_dt));
    tp_bgemm *p = calloc(1, sizeof *p);
    if (!p) return tp_fail(err, TP_ERR_OOM, "batched gemm %s: out of host memory", name);
    p->d = *d;
    /* row-major C = A op(B) is column-major C^T = op(B)^T A^T: cuBLASLt's A is our B (B^T: our B (N, K) row-major
     * is (K, N) column-major, transposed; B (K, N) row-major is (N, K) column-major, as it is), its B our A */
    BG_PLAN(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t ta = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    BG_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    BG_PLAN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    BG_PLAN(d->trans_b ? bg_layout(&p->la, ab_t, K, N, d->ldb, d->batch, d->sb)
                       : bg_layout(&p->la, ab_t, N, K, d->ldb, d->batch, d->sb));
    BG_PLAN(bg_layout(&p->lb, ab_t, K, M, d->lda, d->batch, d->sa));
    BG_PLAN(bg_layout(&p->lc, c_t, N, M, d->ldc, d->batch, d->sc));
    cublasLtMatmulPreference_t pref = NULL;
    BG_PLAN(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = ctx->workspace_bytes;
    const uint32_t al = d->align;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                             sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t als[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int k = 0; k < 4 && st == CUBLAS_STATUS_SUCCESS; k++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, als[k], &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1 || res.state != CUBLAS_STATUS_SUCCESS) {
        tp_fail(err, TP_ERR_UNSUPPORTED, "batched gemm %s: cuBLASLt has no algorithm for %d x (M=%lld N=%lld K=%lld) "
                "%s -> %s, align %u: %s", name, d->batch, (long long)M, (long long)N, (long long)K,
                dt_name(d->ab_dt), dt_name(d->c_dt), d->align,
                cublasLtGetStatusString(st != CUBLAS_STATUS_SUCCESS ? st : found < 1 ? CUBLAS_STATUS_NOT_SUPPORTED
                                                                                      : res.state));
        tp_bgemm_destroy(p);
        return TP_ERR_UNSUPPORTED;
    }
    p->algo = res.algo;
    p->workspace_needed = res.workspaceSize;
    *out = p;
    return TP_OK;
}

int tp_bgemm_run(tp_gemm_ctx *ctx, const tp_bgemm *p, const void *A, const void *B, void *C, tp_stream stream) {
    if (!p || !A || !B || !C || (uintptr_t)A % p->d.align || (uintptr_t)B % p->d.align || (uintptr_t)C % p->d.align)
        return (int)CUBLAS_STATUS_INVALID_VALUE;
    const float alpha = p->d.alpha, beta = p->d.beta;
    return (int)cublasLtMatmul(ctx->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc, &p->algo,
                               ctx->workspace, p->workspace_needed, (cudaStream_t)stream);
}
