/* engine_launch.c, the launch phase (it calls engine_memory.c only): enqueuing one op of an engine as the build
 * configured it (tpe_launch_op) and its per-kind launchers: the decoder ops, --fp32-protect layers, the linears
 * (tprof's Hopper GEMMs, cuBLASLt, tprof's GEMV, a sibling group's one GEMV, a 2:4 sparse GEMM) and the pipeline
 * ops. The run (engine_run.c) and the build-time timings (engine_select.c) launch ops through it. C11. */
#include <cuda_runtime_api.h>

#include "core/check.h"
#include "exec/cuda/attention/attention.h"
#include "exec/cuda/attention/attention_fp8.h"
#include "exec/cuda/attention/attention_wgmma.h"
#include "exec/cuda/engine/engine_internal.h"
#include "exec/cuda/gemm/gemm_sm90.h"
#include "exec/cuda/gemm/gemv.h"
#include "exec/cuda/kernels/decoder_ops.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/kernels/patch_embed.h"
#include "exec/cuda/kernels/pipeline_ops.h"
#include "exec/cuda/vendor/cudnn_sdpa.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "exec/cuda/vendor/gemm_cutlass.h"
#include "exec/cuda/vendor/sparse_cusparselt.h"
#include "formats/dtype.h"
#include "formats/qformat.h"

/* ---- launching ----------------------------------------------------------------------------------------- */

static int launch_decoder_op(tp_engine *e, int i, cudaStream_t s);

/* --fp32-protect tensors (plan.h fp32_tensors): RMSNorm or RoPE as TensorRT runs a layer pinned to FP32 between
 * lower-precision ones: a reformat of the input into an FP32 tensor, the op FP32 in and out, a reformat of its output
 * into the value's type (under its scale when E4M3). The op's kernel is the same one: only the tensors differ. */
static int launch_fp32_layer(tp_engine *e, int i, cudaStream_t s) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    const tp_op *op = &g->ops[i];
    const int x = op->in[0], y = op->out;
    const size_t n = (size_t)tp_value_numel(&g->values[y]);
    HOOK(e, i, TP_CAT_CONVERT);
    int rc = tpk_convert(e->dptr[x], pl->value_dt[x], e->d_f32x, TP_F32, NULL, n, s);
    if (rc) return rc;
    HOOK(e, i, tp_op_category(op->kind));
    const tp_value *o = &g->values[y], *xv = &g->values[x];
    if (op->kind == TP_OP_RMSNORM) {
        const int C = (int)o->shape[o->ndim - 1];
        rc = tpk_rmsnorm(e->d_f32x, TP_F32, e->dptr[op->in[1]], pl->value_dt[op->in[1]], e->d_f32y, TP_F32,
                         (int)(n / (size_t)C), C, op->eps, op->norm_offset, s);
    } else {
        rc = tpk_rope_at(e->d_f32x, TP_F32, e->d_f32y, TP_F32, (int)xv->shape[0], (int)xv->shape[1], op->heads,
                         op->head_dim, e->d_invfreq[i], e->d_past, op->n_in > 1 ? (const float *)e->dptr[op->in[1]] : NULL,
                         op->prefix, s);
    }
    if (rc) return rc;
    HOOK(e, i, TP_CAT_CONVERT);
    return tpk_convert(e->d_f32y, TP_F32, e->dptr[y], pl->value_dt[y],
                       pl->value_dt[y] == TP_E4M3 ? e->d_scales + SCALE_SLOT * y : NULL, n, s);
}

/* The decoder ops (graph.h): their kernels in decoder_ops.h, the cache position on the device (e->d_past). */
static int launch_decoder_op(tp_engine *e, int i, cudaStream_t s) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    const tp_op *op = &g->ops[i];
    const tp_value *o = &g->values[op->out], *xv = &g->values[op->in[0]];
    void *y = e->dptr[op->out];
    const void *x = e->dptr[op->in[0]];
    const tp_dtype xdt = pl->value_dt[op->in[0]], ydt = pl->value_dt[op->out];
    const int n = (int)tp_value_numel(o);
    switch (op->kind) {
    case TP_OP_TOKEN_EMBED: {
        const tp_value *tab = &g->values[op->in[1]];
        return tpk_token_embed(x, e->dptr[op->in[1]], pl->value_dt[op->in[1]], y, ydt, (int)tp_value_numel(xv),
                               (int)tab->shape[1], (int)tab->shape[0], op->scale, s);
    }
    case TP_OP_RMSNORM: {
        const int C = (int)o->shape[o->ndim - 1];
        if (ydt == TP_E4M3) /* for its FP8 GEMM readers (plan.c plan_fp8) */
            return tpk_rmsnorm_e4m3(x, xdt, e->dptr[op->in[1]], pl->value_dt[op->in[1]], y,
                                    e->d_scales + SCALE_SLOT * op->out, n / C, C, op->eps, op->norm_offset, s);
        return tpk_rmsnorm(x, xdt, e->dptr[op->in[1]], pl->value_dt[op->in[1]], y, ydt, n / C, C, op->eps,
                           op->norm_offset, s);
    }
    case TP_OP_ROPE:
        /* from the cache position (a decoder), plus each sample's start (a pipeline's expert: after the prefix) */
        return tpk_rope_at(x, xdt, y, ydt, (int)xv->shape[0], (int)xv->shape[1], op->heads, op->head_dim,
                           e->d_invfreq[i], e->d_past, op->n_in > 1 ? (const float *)e->dptr[op->in[1]] : NULL,
                           op->prefix, s);
    case TP_OP_GLU:
        if (ydt == TP_E4M3) /* for its FP8 GEMM reader (plan.c plan_fp8) */
            return tpk_glu_e4m3(x, e->dptr[op->in[1]], xdt, y, e->d_scales + SCALE_SLOT * op->out, (size_t)n, op->act,
                                s);
        return tpk_glu(x, e->dptr[op->in[1]], xdt, y, ydt, (size_t)n, op->act, s);
    case TP_OP_KV_APPEND: /* an FP8 cache: quantized under its scale (plan.c plan_kv_cache) */
        return tpk_kv_append(x, e->dptr[op->in[1]], y, xdt, ydt, e->d_scales + SCALE_SLOT * op->out,
                             (int)xv->shape[0], (int)xv->shape[1], (int)o->shape[2], (int)o->shape[3], e->d_past, s);
    case TP_OP_KV_ATTENTION: {
        const tp_value *c = &g->values[op->in[1]];
        const int B = (int)xv->shape[0], T = (int)xv->shape[1], L = (int)c->shape[2], W = (int)c->shape[3];
        const char *kv = e->dptr[op->in[1]];
        const tp_dtype kdt = pl->value_dt[op->in[1]];
        const float *ks = e->d_scales + SCALE_SLOT * op->in[1];
        if (tpe_kind(e, i) == TP_CALL_KV_ATTENTION_FLASH) { /* a prefill: the T keys at rows 0 .. T - 1 of each sequence's cache */
            const long long QW = (long long)op->heads * op->head_dim;
            long long plane = (long long)B * L * W, rows = L;
            if (kdt == TP_E4M3) { /* an FP8 cache: its rows 0 .. T - 1 as the kernel reads them, (2, B, T, W) */
                HOOK(e, i, TP_CAT_CONVERT);
                int rc = tpk_kv_dequant(kv, ks, e->d_kv16, xdt, B, T, L, W, s);
                if (rc) return rc;
                HOOK(e, i, TP_CAT_ATTENTION);
                kv = e->d_kv16, plane = (long long)B * T * W, rows = T;
            }
            const size_t eb = tp_dtype_info(kdt == TP_E4M3 ? xdt : kdt)->bytes;
            tpk_attn_args a = {.q = x, .k = kv, .v = kv + plane * (long long)eb, .o = y,
                               .q_batch_stride = T * QW, .q_row_stride = QW, .k_batch_stride = rows * W,
                               .k_row_stride = W, .v_batch_stride = rows * W, .v_row_stride = W,
                               .o_batch_stride = T * QW, .o_row_stride = QW, .B = B, .H = op->heads,
                               .Hkv = op->kv_heads, .Tq = T, .Tkv = T, .D = op->head_dim, .causal = 1,
                               .scale = op->scale, .in_dt = xdt, .out_dt = ydt};
            return tpk_flash_attention_ex(&a, s);
        }
        return tpk_kv_attention(x, kv, xdt, kdt, ks, y, ydt, B, T, op->heads, op->kv_heads, op->head_dim, L, e->d_past,
                                op->scale, e->d_kv_ws, e->kv_ws_bytes, s);
    }
    default: CHECK(!"unknown op kind"); return 0;
    }
}

/* ---- the linears: one launcher per call kind (planner/program.h) ----------------------------------------- */

/* A linear call's operands: x and W as the GEMM reads them; y the value its kernel writes (a chained call's last
 * op's: the residual add's output, the GELU's; a group's GLU's), in its type; res the residual its epilogue adds
 * (the other operand of a fused ADD), or NULL; fu a sibling group's GLU epilogue (gemv.h), fused when it has one. */
typedef struct {
    const tp_op *op;
    const void *x, *w, *bias, *res;
    void *y;
    tp_dtype xdt, ydt;
    int yv, fp8; /* fp8: x is stored in E4M3 */
    tpk_gemv_fusion fu;
    int fused;
} lin_io;

/* The GLU epilogue of a gate/up group call `head` whose first linear is lead: the rows of gate and up in the group's
 * stacked weights (members in group order). */
static void glu_rows(const tp_engine *e, int head, int lead, tpk_gemv_fusion *fu) {
    const tp_graph *g = e->g;
    const int u = tp_program_first(&e->prog, g, head, TP_OP_GLU);
    if (u < 0) return;
    const tp_op *glu = &g->ops[u];
    fu->glu = glu->act + 1;
    fu->glu_n = (int)g->ops[g->values[glu->in[0]].producer].gemm_n;
    for (int j = lead, row = 0; j >= 0; row += (int)g->ops[j].gemm_n, j = e->group_next[j]) {
        if (g->ops[j].out == glu->in[0]) fu->gate_row = row;
        if (g->ops[j].out == glu->in[1]) fu->up_row = row;
    }
}

static lin_io linear_io(const tp_engine *e, int head) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    const int i = head; /* a linear call's first op is its linear */
    const tp_op *op = &g->ops[i];
    lin_io io = {.op = op, .x = e->dptr[op->in[0]], .w = e->dptr[op->in[1]],
                 .bias = op->n_in > 2 ? e->dptr[op->in[2]] : NULL, .xdt = pl->value_dt[op->in[0]],
                 .fp8 = pl->value_dt[op->in[0]] == TP_E4M3};
    if (e->prog.calls[head].kind == TP_CALL_GEMV_GROUP) glu_rows(e, head, i, &io.fu);
    io.fused = io.fu.glu != 0;
    const int ea = tp_program_find(&e->prog, g, head, TP_OP_ADD);
    if (ea >= 0) {
        const tp_op *a = &g->ops[ea];
        io.res = e->dptr[a->in[0] == op->out ? a->in[1] : a->in[0]];
    }
    CHECK(!(io.fused && io.res)); /* the fused GEMVs take no residual (the rules never join one) */
    io.yv = tp_program_out(&e->prog, g, head);
    io.y = e->dptr[io.yv];
    io.ydt = pl->value_dt[io.yv];
    return io;
}

/* cuBLASLt on x (as given: the stored input, or a quantized / QDQ copy of it) with op i's plan */
static int gemm_cublaslt(tp_engine *e, int i, const lin_io *io, const void *x, int *lib) {
    const tp_op *op = io->op;
    *lib = 1;
    return tp_gemm_run_q(e->gemm, e->gplan[i], x, io->w, io->bias, io->res, io->y,
                         io->fp8 ? e->d_scales + SCALE_SLOT * op->in[0] : NULL,
                         io->fp8 ? e->d_scales + SCALE_SLOT * op->in[1] : NULL,
                         io->ydt == TP_E4M3 ? e->d_scales + SCALE_SLOT * (e->g->n_values + io->yv) : NULL, e->alpha[i],
                         e->stream);
}

static int l_gemm(tp_engine *e, int i, int *lib) {
    const lin_io io = linear_io(e, i);
    return gemm_cublaslt(e, i, &io, io.x, lib);
}

/* emulation: the operand's exact block-scaled values, in bf16, feed a bf16 GEMM */
static int l_gemm_qdq(tp_engine *e, int i, int *lib) {
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    const tp_qformat qf = e->plan->value_qf[op->in[0]];
    HOOK(e, i, TP_CAT_QUANT);
    int rc = tpk_block_qdq(io.x, io.xdt, e->d_qdq, TP_BF16, (long long)op->gemm_m, (long long)op->gemm_k, (int)qf,
                           tp_qformat_info(qf)->global_scale ? e->d_scales + SCALE_SLOT * op->in[0] : NULL, e->stream);
    if (rc) return rc;
    HOOK(e, i, TP_CAT_GEMM);
    return gemm_cublaslt(e, i, &io, e->d_qdq, lib);
}

/* native FP8 block-128: the input in E4M3 with its 1x128 scales (written by the producer, or here) */
static int l_gemm_fp8_block(tp_engine *e, int i, int *lib) {
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    const int M = (int)op->gemm_m;
    float *xs = (float *)e->d_bscale[op->in[0]];
    const void *x = io.x;
    if (!io.fp8) {
        HOOK(e, i, TP_CAT_QUANT);
        int rc = tpk_quant_fp8_b128(x, io.xdt, 0, e->d_q8, xs, M, (int)rows_pad(M), (int)op->gemm_k, e->stream);
        if (rc) return rc;
        x = e->d_q8;
        HOOK(e, i, TP_CAT_GEMM);
    }
    *lib = 1;
    return tp_gemm_run(e->gemm, e->gplan[i], x, io.w, io.bias, e->dptr[op->out], xs,
                       (const float *)e->d_bscale[op->in[1]], e->stream);
}

/* FP8 block-128 at <= 8 rows: the GEMV quantizes the 16-bit input per 1x128 block as it reads it, or reads the E4M3
 * input and scales its RMSNorm wrote */
static int l_gemv_fp8_block(tp_engine *e, int i, int *lib) {
    (void)lib;
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    const float *ws = (const float *)e->d_bscale[op->in[1]];
    if (io.fp8)
        return tpk_gemv_fp8_block_q(io.x, (const float *)e->d_bscale[op->in[0]], (int)rows_pad(op->gemm_m), io.w, ws,
                                    io.bias, io.res, io.y, io.ydt, (int)op->gemm_m, (int)op->gemm_n, (int)op->gemm_k,
                                    e->stream);
    return tpk_gemv_fp8_block(io.x, io.w, ws, io.bias, io.res, io.y, io.xdt, (int)op->gemm_m, (int)op->gemm_n,
                              (int)op->gemm_k, e->stream);
}

/* Blackwell: the input's codes and 128x4-tiled scales, then the block-scaled GEMM (NVFP4's per-tensor scales in
 * alpha) */
static int l_gemm_block_native(tp_engine *e, int i, int *lib) {
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    const tp_qformat qf = e->plan->value_qf[op->in[0]];
    HOOK(e, i, TP_CAT_QUANT);
    int rc = tpk_block_quant_native(io.x, io.xdt, e->d_q8, e->d_bscale[op->in[0]], (long long)op->gemm_m,
                                    (long long)op->gemm_k, (int)qf,
                                    qf == TP_QF_NVFP4 ? e->d_scales + SCALE_SLOT * op->in[0] : NULL, e->stream);
    if (rc) return rc;
    HOOK(e, i, TP_CAT_GEMM);
    *lib = 1;
    return tp_gemm_run_alpha(e->gemm, e->gplan[i], e->d_q8, io.w, io.bias, e->dptr[op->out],
                             (const float *)e->d_bscale[op->in[0]], (const float *)e->d_bscale[op->in[1]], e->alpha[i],
                             e->stream);
}

/* weight-only at <= 8 rows (a decode step): the GEMV decodes the weights in registers, the scales (E4M3's, NVFP4's
 * s2) in its epilogue with the bias and the residual */
static int l_gemv_fp8_wo(tp_engine *e, int i, int *lib) {
    (void)lib;
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    return tpk_gemv_fp8(io.x, io.w, NULL, e->d_scales + SCALE_SLOT * op->in[1], io.bias, io.res, io.y, io.xdt,
                        (int)op->gemm_m, (int)op->gemm_n, (int)op->gemm_k, e->stream);
}

static int l_gemv_nvfp4_wo(tp_engine *e, int i, int *lib) {
    (void)lib;
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    return tpk_gemv_nvfp4(io.x, io.w, e->d_bscale[op->in[1]], e->d_scales + SCALE_SLOT * op->in[1], io.bias, io.res,
                          io.y, io.xdt, (int)op->gemm_m, (int)op->gemm_n, (int)op->gemm_k, e->stream);
}

/* weight-only at > 8 rows: the weight's exact values in the activations' type, its FP32 scale in alpha */
static int l_gemm_wo_dequant(tp_engine *e, int i, int *lib) {
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    const int w = op->in[1];
    HOOK(e, i, TP_CAT_CONVERT);
    int rc = e->plan->op_prec[i] == TP_PREC_NVFP4_WO
                 ? tpk_nvfp4_to_16bit(e->dptr[w], e->d_bscale[w], e->d_wdq, io.xdt, (long long)op->gemm_n,
                                      (long long)op->gemm_k, e->stream)
                 : tpk_e4m3_to_16bit(e->dptr[w], e->d_wdq, io.xdt, (long long)(op->gemm_n * op->gemm_k), e->stream);
    if (rc) return rc;
    HOOK(e, i, TP_CAT_GEMM);
    *lib = 1;
    return tp_gemm_run_q(e->gemm, e->gplan[i], io.x, e->d_wdq, io.bias, io.res, io.y, NULL, NULL, NULL, e->alpha[i],
                         e->stream);
}

/* weight-only FP8 or NVFP4 at > 8 rows, chosen by time against the above (engine_select.c): tprof's Hopper GEMM
 * converts the weights to 16 bits in shared memory, stage by stage, no dequantized copy; the weight's per-tensor
 * scale (NVFP4: s2) in its epilogue */
static int l_gemm_sm90_wo(tp_engine *e, int i, int *lib) {
    (void)lib;
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    const float *s = e->d_scales + SCALE_SLOT * op->in[1];
    if (e->plan->op_prec[i] == TP_PREC_NVFP4_WO)
        return tpk_gemm_sm90_wo_nvfp4(io.x, io.w, e->d_bscale[op->in[1]], s, io.bias, io.res, io.y, io.xdt,
                                      (int)op->gemm_m, (int)op->gemm_n, (int)op->gemm_k, e->stream);
    return tpk_gemm_sm90_wo_fp8(io.x, io.w, s, io.bias, io.res, io.y, io.xdt, (int)op->gemm_m, (int)op->gemm_n,
                                (int)op->gemm_k, e->stream);
}

/* weight-only FP8 through CUTLASS's mixed-input GEMM (vendor/gemm_cutlass.h): no bias (the candidate rule) */
static int l_gemm_cutlass_wo(tp_engine *e, int i, int *lib) {
    (void)lib; /* a cudaError_t, as tprof's kernels return */
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    return tp_cutlass_wo_fp8(io.x, io.w, e->d_scales + SCALE_SLOT * op->in[1], io.res, io.y, io.xdt, (int)op->gemm_m,
                             (int)op->gemm_n, (int)op->gemm_k, e->cutlass_tile[i], e->stream);
}

/* W8A8 on a 16-bit input, quantized with its calibrated scale as it is read: at <= 8 rows rounded to E4M3 in the
 * GEMV's registers; more, by a quantize kernel before the FP8 GEMM */
static int l_gemv_w8a8(tp_engine *e, int i, int *lib) {
    (void)lib;
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    return tpk_gemv_w8a8(io.x, e->d_scales + SCALE_SLOT * op->in[0], io.w, NULL, e->d_scales + SCALE_SLOT * op->in[1],
                         io.bias, io.res, io.y, io.xdt, (int)op->gemm_m, (int)op->gemm_n, (int)op->gemm_k, e->stream);
}

static int l_gemm_quant_in(tp_engine *e, int i, int *lib) {
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    const float *xs = e->d_scales + SCALE_SLOT * op->in[0];
    HOOK(e, i, TP_CAT_QUANT);
    int rc = tpk_convert(io.x, io.xdt, e->d_q8, TP_E4M3, xs, (size_t)(op->gemm_m * op->gemm_k), e->stream);
    if (rc) return rc;
    HOOK(e, i, TP_CAT_GEMM);
    *lib = 1;
    return tp_gemm_run_q(e->gemm, e->gplan[i], e->d_q8, io.w, io.bias, io.res, io.y, xs,
                         e->d_scales + SCALE_SLOT * op->in[1],
                         io.ydt == TP_E4M3 ? e->d_scales + SCALE_SLOT * (e->g->n_values + io.yv) : NULL, e->alpha[i],
                         e->stream);
}

/* a 16-bit decode GEMV: the bias and the residual in its epilogue */
static int l_gemv(tp_engine *e, int i, int *lib) {
    (void)lib;
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    return tpk_gemv(io.x, io.w, io.bias, io.res, io.y, io.xdt, (int)op->gemm_m, (int)op->gemm_n, (int)op->gemm_k,
                    e->stream);
}

/* tprof's FP8 GEMM: E4M3 operands; D F16 (+ the residual) or E4M3 with its storage scale */
static int l_gemm_sm90(tp_engine *e, int i, int *lib) {
    (void)lib;
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    return tpk_gemm_sm90_fp8(io.x, e->d_scales + SCALE_SLOT * op->in[0], io.w, e->d_scales + SCALE_SLOT * op->in[1],
                             io.bias, io.res, io.y, io.ydt, e->d_scales + SCALE_SLOT * io.yv, (int)op->gemm_m,
                             (int)op->gemm_n, (int)op->gemm_k, 0,
                             tpk_gemm_sm90_fp8_pick_variant(io.ydt, (int)op->gemm_m, (int)op->gemm_n, e->sms),
                             e->stream);
}

/* sibling FP8 linears of a prefill as one GEMM (tpe_choose_groups): the group's weights one after the other
 * (tpe_gemm_group_ready), each member's per-tensor scale over its columns (group_cs), each member's output its own */
static int l_gemm_sm90_group(tp_engine *e, int i, int *lib) {
    (void)lib;
    const tp_graph *g = e->g;
    const tp_op *op = &g->ops[i];
    int cols[TPK_GEMM_SM90_GROUP_MAX], n = 0;
    void *D[TPK_GEMM_SM90_GROUP_MAX];
    for (int j = i; j >= 0; j = e->group_next[j]) {
        CHECK(n < TPK_GEMM_SM90_GROUP_MAX);
        cols[n] = (int)g->ops[j].gemm_n;
        D[n++] = e->dptr[g->ops[j].out];
    }
    return tpk_gemm_sm90_fp8_group(e->dptr[op->in[0]], e->d_scales + SCALE_SLOT * op->in[0], e->dptr[op->in[1]],
                                   e->group_cs[i], op->n_in > 2 ? e->dptr[op->in[2]] : NULL, n, cols, D,
                                   (int)op->gemm_m, (int)op->gemm_k, e->sms, e->stream);
}

/* GEMM + bias + exact GELU in one kernel: it writes the GELU's output (E4M3 with its scale for FP8 operands) */
static int l_gemm_sm90_gelu(tp_engine *e, int i, int *lib) {
    (void)lib;
    const lin_io io = linear_io(e, i);
    const tp_op *op = io.op;
    if (io.fp8)
        return tpk_gemm_sm90_fp8(io.x, e->d_scales + SCALE_SLOT * op->in[0], io.w, e->d_scales + SCALE_SLOT * op->in[1],
                                 io.bias, NULL, io.y, io.ydt, e->d_scales + SCALE_SLOT * io.yv, (int)op->gemm_m,
                                 (int)op->gemm_n, (int)op->gemm_k, 1,
                                 tpk_gemm_sm90_fp8_pick_variant(io.ydt, (int)op->gemm_m, (int)op->gemm_n, e->sms),
                                 e->stream);
    return tpk_gemm_sm90(io.x, io.w, io.bias, io.y, io.xdt, (int)op->gemm_m, (int)op->gemm_n, (int)op->gemm_k, 1,
                         e->stream);
}

static int l_gemv_group(tp_engine *e, int i, int *lib) {
    (void)lib;
    const lin_io io = linear_io(e, i);
    return tpe_launch_group(e, i, io.fused ? &io.fu : NULL);
}

/* cuSPARSELt's 2:4 GEMM, chosen by time at build (engine_select.c) */
static int l_gemm_sparse(tp_engine *e, int i, int *lib) {
    *lib = 2; /* a cuSPARSELt status, not a CUDA error */
    return tpe_launch_sparse(e, i);
}

/* ---- the other ops' launchers -------------------------------------------------------------------------- */

static int l_patch_embed_fused(tp_engine *e, int i, int *lib) {
    (void)lib;
    const tp_graph *g = e->g;
    const tp_op *op = &g->ops[i], *eo = &g->ops[tp_program_find(&e->prog, g, i, TP_OP_EMBED_TOKENS)];
    const tp_value *xv = &g->values[op->in[0]];
    return tpk_patch_embed(e->dptr[op->in[0]], e->dptr[op->in[1]], op->n_in > 2 ? e->dptr[op->in[2]] : NULL,
                           eo->n_in > 2 ? e->dptr[eo->in[2]] : NULL, e->dptr[eo->in[1]], e->dptr[eo->out],
                           e->plan->value_dt[eo->out], (int)xv->shape[0], (int)xv->shape[2], (int)xv->shape[3],
                           op->patch, (int)op->gemm_n, eo->n_in > 2, e->stream);
}

static int l_im2col_gemm(tp_engine *e, int i, int *lib) {
    const tp_graph *g = e->g;
    const tp_op *op = &g->ops[i];
    const tp_value *xv = &g->values[op->in[0]];
    HOOK(e, i, TP_CAT_CONVERT); /* im2col is a layout transform feeding the GEMM */
    int rc = tpk_im2col(e->dptr[op->in[0]], e->d_cols, e->plan->value_dt[op->in[1]], (int)xv->shape[0],
                        (int)xv->shape[2], (int)xv->shape[3], op->patch, e->stream);
    HOOK(e, i, TP_CAT_GEMM);
    if (rc) return rc;
    *lib = 1;
    return tp_gemm_run(e->gemm, e->gplan[i], e->d_cols, e->dptr[op->in[1]], e->dptr[op->in[2]], e->dptr[op->out], NULL,
                       NULL, e->stream);
}

static int l_embed_tokens(tp_engine *e, int i, int *lib) {
    (void)lib;
    const tp_op *op = &e->g->ops[i];
    const tp_value *xv = &e->g->values[op->in[0]];
    return tpk_embed_tokens(e->dptr[op->in[0]], op->n_in > 2 ? e->dptr[op->in[2]] : NULL, e->dptr[op->in[1]],
                            e->dptr[op->out], e->plan->value_dt[op->out], (int)xv->shape[0], (int)xv->shape[1],
                            (int)xv->shape[2], op->n_in > 2, e->stream);
}

static int l_layernorm(tp_engine *e, int i, int *lib) {
    (void)lib;
    const tp_plan *pl = e->plan;
    const tp_op *op = &e->g->ops[i];
    const tp_value *o = &e->g->values[op->out];
    const int C = (int)o->shape[o->ndim - 1], M = (int)(tp_value_numel(o) / C);
    const void *x = e->dptr[op->in[0]];
    if (tpe_kind(e, i) == TP_CALL_LAYERNORM_FP8_B128)
        return tpk_layernorm_fp8_b128(x, pl->value_dt[op->in[0]], e->dptr[op->in[1]], e->dptr[op->in[2]],
                                      pl->value_dt[op->in[1]], e->dptr[op->out], (float *)e->d_bscale[op->out], M,
                                      (int)rows_pad(M), C, op->eps, e->stream);
    return tpk_layernorm(x, pl->value_dt[op->in[0]], e->dptr[op->in[1]], e->dptr[op->in[2]], pl->value_dt[op->in[1]],
                         e->dptr[op->out], pl->value_dt[op->out], e->d_scales + SCALE_SLOT * op->out, M, C, op->eps,
                         e->stream);
}

/* RMSNorm writing its fp8-block GEMM readers' E4M3 input and 1x128 scales (plan.c plan_fp8_block) */
static int l_rmsnorm_b128(tp_engine *e, int i, int *lib) {
    (void)lib;
    const tp_plan *pl = e->plan;
    const tp_op *op = &e->g->ops[i];
    const tp_value *o = &e->g->values[op->out];
    const int C = (int)o->shape[o->ndim - 1], M = (int)(tp_value_numel(o) / C);
    return tpk_rmsnorm_fp8_b128(e->dptr[op->in[0]], pl->value_dt[op->in[0]], e->dptr[op->in[1]], pl->value_dt[op->in[1]],
                                e->dptr[op->out], (float *)e->d_bscale[op->out], M, (int)rows_pad(M), C, op->eps,
                                op->norm_offset, e->stream);
}

static int l_attention(tp_engine *e, int i, int *lib) {
    const tp_plan *pl = e->plan;
    const tp_op *op = &e->g->ops[i];
    const tp_value *xv = &e->g->values[op->in[0]];
    const void *x = e->dptr[op->in[0]];
    void *y = e->dptr[op->out];
    const tp_dtype xdt = pl->value_dt[op->in[0]], ydt = pl->value_dt[op->out];
    const float *ys = e->d_scales + SCALE_SLOT * op->out;
    const int B = (int)xv->shape[0], T = (int)xv->shape[1];
    cudaStream_t s = e->stream;
    switch (tpe_kind(e, i)) {
    case TP_CALL_ATTENTION_FP8_WGMMA: /* Q/K/V in E4M3 from the QKV GEMM (plan.c) */
        return tpk_flash_attention_wgmma_fp8(x, e->d_scales + SCALE_SLOT * op->in[0], y, ydt, ys, B, T, op->heads,
                                             op->head_dim, op->scale, s);
    case TP_CALL_ATTENTION_FP8:
        return tpk_flash_attention_fp8(x, xdt, e->d_scales + SCALE_SLOT * op->in[0], y, ydt, ys, B, T, op->heads,
                                       op->head_dim, op->scale, s);
    case TP_CALL_ATTENTION_FLASH:
        return tpk_flash_attention(x, xdt, y, ydt, ys, B, T, op->heads, op->head_dim, op->scale, s);
    case TP_CALL_ATTENTION_WGMMA:
        return tpk_flash_attention_wgmma(x, xdt, y, ydt, ys, B, T, op->heads, op->head_dim, op->scale, s);
    case TP_CALL_ATTENTION_CUDNN: *lib = 3; return tp_sdpa_run(e->sdpa[i], x, y, e->d_sdpa_ws, s);
    default: return tpk_attention(x, xdt, y, ydt, ys, B, T, op->heads, op->head_dim, op->scale, s);
    }
}

static int l_gelu(tp_engine *e, int i, int *lib) {
    (void)lib;
    const tp_plan *pl = e->plan;
    const tp_op *op = &e->g->ops[i];
    const void *x = e->dptr[op->in[0]];
    const tp_dtype xdt = pl->value_dt[op->in[0]];
    if (tpe_kind(e, i) == TP_CALL_GELU_FP8_B128) {
        const int M = (int)value_rows(e, op->out);
        return tpk_quant_fp8_b128(x, xdt, op->gelu_tanh ? 2 : 1, e->dptr[op->out], (float *)e->d_bscale[op->out], M,
                                  (int)rows_pad(M), (int)value_cols(e, op->out), e->stream);
    }
    return tpk_gelu(x, xdt, e->dptr[op->out], pl->value_dt[op->out], e->d_scales + SCALE_SLOT * op->out,
                    (size_t)tp_value_numel(&e->g->values[op->out]), op->gelu_tanh, e->stream);
}

static int l_add(tp_engine *e, int i, int *lib) {
    (void)lib;
    const tp_op *op = &e->g->ops[i];
    return tpk_add(e->dptr[op->in[0]], e->dptr[op->in[1]], e->dptr[op->out], e->plan->value_dt[op->out],
                   (size_t)tp_value_numel(&e->g->values[op->out]), e->stream);
}

static int l_pool(tp_engine *e, int i, int *lib) {
    (void)lib;
    const tp_op *op = &e->g->ops[i];
    const tp_value *xv = &e->g->values[op->in[0]];
    const tp_dtype ydt = e->plan->value_dt[op->out];
    if (tpe_kind(e, i) == TP_CALL_LAST_TOKEN)
        return tpk_last_token(e->dptr[op->in[0]], e->dptr[op->out], ydt, (int)xv->shape[0], (int)xv->shape[1],
                              (int)xv->shape[2], e->stream);
    return tpk_pool(e->dptr[op->in[0]], e->dptr[op->out], ydt, (int)xv->shape[0], (int)xv->shape[1], (int)xv->shape[2],
                    op->pool_mode, op->prefix, e->stream);
}

/* NCCL's status, not a CUDA error (engine_tp.c groups the ranks' calls) */
static int l_all_reduce(tp_engine *e, int i, int *lib) {
    const tp_op *op = &e->g->ops[i];
    *lib = 4;
    return tp_nccl_all_reduce(e->nccl, e->rank, e->dptr[op->in[0]], e->dptr[op->out],
                              (size_t)tp_value_numel(&e->g->values[op->out]), e->plan->value_dt[op->out], e->stream);
}

/* the keys' RoPE (op i) and the KV append after it in one kernel (the rope+kv_append rule) */
static int l_rope_kv_append(tp_engine *e, int i, int *lib) {
    (void)lib;
    const tp_graph *g = e->g;
    const tp_op *r = &g->ops[i], *a = &g->ops[tp_program_find(&e->prog, g, i, TP_OP_KV_APPEND)];
    const tp_value *xv = &g->values[r->in[0]], *o = &g->values[a->out];
    return tpk_rope_kv_append(e->dptr[r->in[0]], e->dptr[a->in[1]], e->dptr[a->out], e->plan->value_dt[r->in[0]],
                              e->plan->value_dt[a->out], e->d_scales + SCALE_SLOT * a->out, (int)xv->shape[0],
                              (int)xv->shape[1], (int)o->shape[2], r->heads, r->head_dim, e->d_invfreq[i], e->d_past,
                              e->stream);
}

static int l_fp32_layer(tp_engine *e, int i, int *lib) {
    (void)lib;
    return launch_fp32_layer(e, i, e->stream);
}

static int l_decoder(tp_engine *e, int i, int *lib) {
    (void)lib;
    return launch_decoder_op(e, i, e->stream);
}

static int l_pipeline(tp_engine *e, int i, int *lib) {
    (void)lib;
    return tpe_launch_pipeline_op(e, i, e->stream);
}

typedef int (*launcher)(tp_engine *e, int i, int *lib);

/* The launcher of each call kind: lib receives 1 when rc is a cuBLAS status, 2 cuSPARSELt's, 3 cuDNN's, 4 NCCL's,
 * 0 a CUDA error. */
static const launcher LAUNCHERS[TP_CALL_KIND_COUNT] = {
    [TP_CALL_IM2COL_GEMM] = l_im2col_gemm,
    [TP_CALL_PATCH_EMBED_FUSED] = l_patch_embed_fused,
    [TP_CALL_EMBED_TOKENS] = l_embed_tokens,
    [TP_CALL_LAYERNORM] = l_layernorm,
    [TP_CALL_LAYERNORM_FP8_B128] = l_layernorm,
    [TP_CALL_GEMM] = l_gemm,
    [TP_CALL_GEMM_QUANT_IN] = l_gemm_quant_in,
    [TP_CALL_GEMV_W8A8] = l_gemv_w8a8,
    [TP_CALL_GEMV_FP8_WO] = l_gemv_fp8_wo,
    [TP_CALL_GEMV_NVFP4_WO] = l_gemv_nvfp4_wo,
    [TP_CALL_GEMM_WO_DEQUANT] = l_gemm_wo_dequant,
    [TP_CALL_GEMM_FP8_BLOCK] = l_gemm_fp8_block,
    [TP_CALL_GEMV_FP8_BLOCK] = l_gemv_fp8_block,
    [TP_CALL_GEMM_BLOCK_NATIVE] = l_gemm_block_native,
    [TP_CALL_GEMM_QDQ] = l_gemm_qdq,
    [TP_CALL_ATTENTION] = l_attention,
    [TP_CALL_ATTENTION_FP8] = l_attention,
    [TP_CALL_ATTENTION_FP8_WGMMA] = l_attention,
    [TP_CALL_GELU] = l_gelu,
    [TP_CALL_GELU_FP8_B128] = l_gelu,
    [TP_CALL_ADD] = l_add,
    [TP_CALL_POOL] = l_pool,
    [TP_CALL_LAST_TOKEN] = l_pool,
    [TP_CALL_ALL_REDUCE] = l_all_reduce,
    [TP_CALL_TOKEN_EMBED] = l_decoder,
    [TP_CALL_RMSNORM] = l_decoder,
    [TP_CALL_RMSNORM_FP8_B128] = l_rmsnorm_b128,
    [TP_CALL_ROPE] = l_decoder,
    [TP_CALL_FP32_LAYER] = l_fp32_layer,
    [TP_CALL_GLU] = l_decoder,
    [TP_CALL_KV_APPEND] = l_decoder,
    [TP_CALL_KV_ATTENTION] = l_decoder,
    [TP_CALL_KV_ATTENTION_FLASH] = l_decoder,
    [TP_CALL_RESHAPE] = l_pipeline,
    [TP_CALL_CONCAT] = l_pipeline,
    [TP_CALL_SLICE] = l_pipeline,
    [TP_CALL_SILU] = l_pipeline,
    [TP_CALL_TIME_CONCAT] = l_pipeline,
    [TP_CALL_EULER] = l_pipeline,
    [TP_CALL_MASKED_ATTENTION] = l_pipeline,
    [TP_CALL_MASKED_ATTENTION_GEMMS] = l_pipeline,
    [TP_CALL_MASKED_ATTENTION_FLASH] = l_pipeline,
    [TP_CALL_ROPE_KV_APPEND] = l_rope_kv_append,
    [TP_CALL_GEMV] = l_gemv,
    [TP_CALL_GEMM_SM90] = l_gemm_sm90,
    [TP_CALL_GEMM_SM90_WO] = l_gemm_sm90_wo,
    [TP_CALL_GEMM_CUTLASS_WO] = l_gemm_cutlass_wo,
    [TP_CALL_GEMM_SM90_GELU] = l_gemm_sm90_gelu,
    [TP_CALL_GEMV_GROUP] = l_gemv_group,
    [TP_CALL_GEMM_SM90_GROUP] = l_gemm_sm90_group,
    [TP_CALL_GEMM_SPARSE] = l_gemm_sparse,
    [TP_CALL_ATTENTION_FLASH] = l_attention,
    [TP_CALL_ATTENTION_WGMMA] = l_attention,
    [TP_CALL_ATTENTION_CUDNN] = l_attention,
};

tp_status tpe_launch_op(tp_engine *e, int i, tp_error *err) {
    if (!tp_program_is_head(&e->prog, i)) return TP_OK; /* an earlier call's kernel computes it */
    const tp_op *op = &e->g->ops[i];
    const tp_call_kind k = e->prog.calls[i].kind;
    CHECK(k > TP_CALL_NONE && k < TP_CALL_KIND_COUNT && LAUNCHERS[k]);
    int lib = 0;
    HOOK(e, i, tp_op_category(op->kind));
    const int rc = LAUNCHERS[k](e, i, &lib);
    if (!rc) return TP_OK;
    if (lib == 4) return tp_fail(err, TP_ERR_CUDA, "op %s (all-reduce): %s", op->layer, tp_nccl_error(e->nccl, rc));
    static const char *LIB[] = {NULL, "cuBLAS status", "cuSPARSELt status", "cuDNN status"};
    return tp_fail(err, TP_ERR_CUDA, "op %s (%s, %s): launch failed: error %d (%s)", op->layer,
                   tp_op_kind_name(op->kind), tp_call_kind_get(k)->name, rc,
                   lib ? LIB[lib] : cudaGetErrorString((cudaError_t)rc));
}

/* ---- a sibling group's GEMV (engine_memory.c lays the group out, engine_select.c chooses it) ---------- */

/* The group of leader `lead` can run as one GEMV: one token (M = 1), the weights, biases and outputs each one
 * contiguous run in member order. */
int tpe_group_ready(const tp_engine *e, int lead, int64_t *n_total) {
    const tp_graph *g = e->g;
    if (g->ops[lead].gemm_m != 1) return 0;
    const int fp4 = tpe_fp4_group(e, lead), b128 = tpe_b128_group(e, lead);
    const char *w = e->dptr[g->ops[lead].in[1]], *y = e->dptr[g->ops[lead].out];
    const char *b = g->ops[lead].n_in > 2 ? e->dptr[g->ops[lead].in[2]] : NULL;
    const char *sc = fp4 || b128 ? e->d_bscale[g->ops[lead].in[1]] : NULL;
    *n_total = 0;
    for (int j = lead; j >= 0; j = e->group_next[j]) {
        const tp_op *op = &g->ops[j];
        const size_t n = (size_t)tp_value_numel(&g->values[op->in[1]]);
        if ((const char *)e->dptr[op->in[1]] != w || (const char *)e->dptr[op->out] != y) return 0;
        if (b && (const char *)e->dptr[op->in[2]] != b) return 0;
        if ((fp4 || b128) && (const char *)e->d_bscale[op->in[1]] != sc) return 0;
        /* FP8 block-128: the scale rows stack only when every member but the last has whole 128-row blocks */
        if (b128 && e->group_next[j] >= 0 && op->gemm_n % 128) return 0;
        if (fp4) sc += n / 16;
        if (b128) sc += sizeof(float) * tp_gemm_b128_weight_scale_count(op->gemm_n, op->gemm_k);
        w += fp4 ? n / 2 : value_bytes(e, op->in[1]);
        y += value_bytes(e, op->out);
        if (b) b += value_bytes(e, op->in[2]);
        *n_total += op->gemm_n;
    }
    return 1;
}

int tpe_launch_group(tp_engine *e, int lead, const tpk_gemv_fusion *fu) {
    const tp_graph *g = e->g;
    const tp_op *op = &g->ops[lead];
    int64_t n = 0;
    tpe_group_ready(e, lead, &n);
    const void *x = e->dptr[op->in[0]], *w = e->dptr[op->in[1]], *b = op->n_in > 2 ? e->dptr[op->in[2]] : NULL;
    const tp_dtype xdt = e->plan->value_dt[op->in[0]];
    const int fp4 = tpe_fp4_group(e, lead);
    void *y = e->dptr[fu && fu->glu ? g->ops[tp_program_first(&e->prog, g, e->prog.op_call[lead], TP_OP_GLU)].out
                                    : op->out];
    if (tpe_b128_group(e, lead)) { /* the stacked 128x128 scales; x quantized per 1x128 block in the GEMV, or by its
                                     * RMSNorm (E4M3 with 1x128 scales) */
        const float *ws = (const float *)e->d_bscale[op->in[1]];
        if (xdt == TP_E4M3)
            return tpk_gemv_fp8_block_q_fused(x, (const float *)e->d_bscale[op->in[0]], (int)rows_pad(1), w, ws, b, y,
                                              e->plan->value_dt[op->out], 1, (int)n, (int)op->gemm_k, fu, e->stream);
        return tpk_gemv_fp8_block_fused(x, w, ws, b, y, xdt, 1, (int)n, (int)op->gemm_k, fu, e->stream);
    }
    if (fp4 || e->plan->value_dt[op->in[1]] == TP_E4M3) { /* its per-row scales exist once the group was chosen */
        const float *rs = e->group_cs[lead];
        if (!rs) return (int)cudaErrorInvalidValue;
        /* W8A8: the members' shared input rounded to E4M3 under its scale */
        const float *xs = op_fp8_quant_in(e, lead) ? e->d_scales + SCALE_SLOT * op->in[0] : NULL;
        if (fp4)
            return tpk_gemv_nvfp4_fused(x, w, e->d_bscale[op->in[1]], rs, 1, b, y, xdt, 1, (int)n, (int)op->gemm_k, fu,
                                        e->stream);
        return tpk_gemv_fp8_fused(x, xs, w, rs, NULL, b, y, xdt, 1, (int)n, (int)op->gemm_k, fu, e->stream);
    }
    return tpk_gemv_fused(x, w, b, y, xdt, 1, (int)n, (int)op->gemm_k, fu, e->stream);
}

/* ---- a 2:4 sparse GEMM (chosen in engine_select.c) ----------------------------------------------------- */

/* The output op i writes (its fused residual add's, if any) and that add's other operand. */
void tpe_sparse_outputs(const tp_engine *e, int i, void **y, const void **res) {
    const tp_graph *g = e->g;
    const int ea = tpe_plan_fused(e, i, TP_OP_ADD);
    *y = e->dptr[g->ops[i].out];
    *res = NULL;
    if (ea >= 0) {
        const tp_op *a = &g->ops[ea];
        *res = e->dptr[a->in[0] == g->ops[i].out ? a->in[1] : a->in[0]];
        *y = e->dptr[a->out];
    }
}

int tpe_launch_sparse(tp_engine *e, int i) {
    const tp_op *op = &e->g->ops[i];
    void *y;
    const void *res, *x = e->dptr[op->in[0]];
    tpe_sparse_outputs(e, i, &y, &res);
    if (op_fp8_quant_in(e, i)) { /* a 16-bit input rounded to E4M3 with its calibrated scale, as the dense path does */
        HOOK(e, i, TP_CAT_QUANT);
        int rc = tpk_convert(x, e->plan->value_dt[op->in[0]], e->d_sq8, TP_E4M3, e->d_scales + SCALE_SLOT * op->in[0],
                             (size_t)(op->gemm_m * op->gemm_k), e->stream);
        if (rc) return rc;
        HOOK(e, i, TP_CAT_GEMM);
        x = e->d_sq8;
    }
    return tp_spgemm_run(e->spctx, e->spgemm[i], x, op->n_in > 2 ? e->dptr[op->in[2]] : NULL, res, y, e->stream);
}

/* ---- the pipeline ops (pipeline_ops.h; their constants and buffers: engine_memory.c) ------------------- */

/* Op i by its batched GEMMs: every (sample, KV head)'s scores, the softmax of every row, every P V. */
static int launch_unfused(tp_engine *e, int i, cudaStream_t s) {
    const tp_graph *g = e->g;
    const tp_op *op = &g->ops[i];
    const mshape m = tpe_mshape_of(e, i);
    const tp_dtype dt = e->plan->value_dt[op->in[0]];
    const size_t es = tp_dtype_info(dt)->bytes;
    const char *q = e->dptr[op->in[0]], *k = e->dptr[op->in[1]], *v = e->dptr[op->in[2]];
    const char *kp = m.two ? e->dptr[op->in[3]] : NULL, *vp = m.two ? e->dptr[op->in[4]] : NULL;
    const float *valid = e->dptr[op->in[m.two ? 5 : 3]];
    char *o = e->dptr[op->out], *P = e->d_mprob;
    float *S = e->d_mscore;
    tp_bgemm *const *pl = &e->mplan[4 * i];
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        if (pass == 1 && (rc = tpk_masked_softmax(S, P, dt, valid, m.B, m.H, m.Tq, m.Tp, m.o0, m.Tk, m.ld, op->prefix,
                                                  m.two, op->pool_mode == 1, s)))
            return rc;
        for (int b = 0; b < m.B && !rc; b++)
            for (int h0 = 0; h0 < m.H && !rc; h0 += m.G) { /* the G query heads of KV head h0 / G */
                const size_t kvh = (size_t)(h0 / m.G) * m.D, heads = (size_t)(b * m.H + h0) * m.Tq * m.ld;
                const char *qb = q + ((size_t)b * m.Tq * m.H + h0) * m.D * es;
                const char *kb = k + ((size_t)b * m.Tk * m.Hkv * m.D + kvh) * es;
                const char *vb = v + ((size_t)b * m.Tk * m.Hkv * m.D + kvh) * es;
                char *ob = o + ((size_t)b * m.Tq * m.H + h0) * m.D * es;
                if (pass == 0) {
                    if (m.two)
                        rc = tp_bgemm_run(e->gemm, pl[0], qb, kp + ((size_t)b * m.Tp * m.Hkv * m.D + kvh) * es,
                                          S + heads, s);
                    if (!rc) rc = tp_bgemm_run(e->gemm, pl[1], qb, kb, S + heads + m.o0, s);
                } else {
                    if (m.two)
                        rc = tp_bgemm_run(e->gemm, pl[2], P + heads * es,
                                          vp + ((size_t)b * m.Tp * m.Hkv * m.D + kvh) * es, ob, s);
                    if (!rc) rc = tp_bgemm_run(e->gemm, pl[3], P + (heads + (size_t)m.o0) * es, vb, ob, s);
                }
            }
    }
    return rc ? (int)cudaErrorUnknown : 0; /* a cuBLAS status: reported as a launch failure of the op */
}

int tpe_launch_pipeline_op(tp_engine *e, int i, cudaStream_t s) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    const tp_op *op = &g->ops[i];
    const tp_value *o = &g->values[op->out], *xv = &g->values[op->in[0]];
    void *y = e->dptr[op->out];
    const void *x = e->dptr[op->in[0]];
    const tp_dtype xdt = pl->value_dt[op->in[0]], ydt = pl->value_dt[op->out];
    const size_t n = (size_t)tp_value_numel(o);
    switch (op->kind) {
    case TP_OP_RESHAPE: /* a copy, or the conversion of an fp32 input into the activations' type (plan.c) */
        if (xdt == ydt) return (int)cudaMemcpyAsync(y, x, value_bytes(e, op->out), cudaMemcpyDeviceToDevice, s);
        return tpk_convert(x, xdt, y, ydt, NULL, n, s);
    case TP_OP_CONCAT: {
        const tp_value *bv = &g->values[op->in[1]];
        if (pl->value_dt[op->in[1]] != xdt || ydt != xdt) return (int)cudaErrorInvalidValue;
        return tpk_concat_tokens(x, e->dptr[op->in[1]], y, xdt, (int)xv->shape[0], xv->shape[1], bv->shape[1],
                                 xv->shape[2], s);
    }
    case TP_OP_SLICE:
        if (ydt != xdt) return (int)cudaErrorInvalidValue;
        return tpk_slice_tokens(x, y, xdt, (int)xv->shape[0], xv->shape[1], op->prefix, o->shape[1], xv->shape[2], s);
    case TP_OP_SILU: return tpk_silu(x, xdt, y, ydt, n, s);
    case TP_OP_TIME_CONCAT: {
        const int C = (int)xv->shape[xv->ndim - 1];
        if (ydt != xdt) return (int)cudaErrorInvalidValue;
        return tpk_time_concat(x, xdt, e->d_opconst[i], y, (int64_t)(n / (size_t)o->shape[o->ndim - 1]), C,
                               (int)o->shape[o->ndim - 1] - C, s);
    }
    case TP_OP_EULER:
        if (xdt != TP_F32 || ydt != TP_F32) return (int)cudaErrorInvalidValue;
        return tpk_euler((const float *)x, e->dptr[op->in[1]], pl->value_dt[op->in[1]], (float *)y, op->scale, n, s);
    case TP_OP_MASKED_ATTENTION: {
        if (tpe_kind(e, i) == TP_CALL_MASKED_ATTENTION_GEMMS) return launch_unfused(e, i, s);
        if (tpe_kind(e, i) == TP_CALL_MASKED_ATTENTION_FLASH) {
            tpk_masked_attn_args a;
            return tpe_masked_flash_args(e, i, &a) ? tpk_flash_attention_masked(&a, s) : (int)cudaErrorInvalidValue;
        }
        const int two = op->n_in == 6;
        for (int j = 1; j < (two ? 5 : 3); j++)
            if (pl->value_dt[op->in[j]] != xdt) return (int)cudaErrorInvalidValue;
        if (ydt != xdt || pl->value_dt[op->in[two ? 5 : 3]] != TP_F32) return (int)cudaErrorInvalidValue;
        return tpk_masked_attention(x, e->dptr[op->in[1]], e->dptr[op->in[2]], two ? e->dptr[op->in[3]] : NULL,
                                    two ? e->dptr[op->in[4]] : NULL, e->dptr[op->in[two ? 5 : 3]], y, xdt,
                                    (int)xv->shape[0], op->heads, op->kv_heads, op->head_dim, (int)xv->shape[1],
                                    (int)g->values[op->in[1]].shape[1], two ? (int)g->values[op->in[3]].shape[1] : 0,
                                    op->prefix, op->pool_mode == 1, op->scale, s);
    }
    default: return (int)cudaErrorInvalidValue;
    }
}
