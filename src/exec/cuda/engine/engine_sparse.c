/* engine_sparse.c: 2:4 sparse GEMMs in an engine (engine_internal.h, "engine_sparse.c"; issue 22). A linear runs
 * cuSPARSELt's sparse GEMM (vendor/sparse_cusparselt.h) only where that was faster than its dense GEMM when the
 * engine was built, and every eligible linear's note says which ran and the two times: "eligible" is never a claim
 * that a sparse kernel ran. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cuda/engine/engine_internal.h"
#include "exec/cuda/vendor/sparse_cusparselt.h"
#include "exec/cuda/kernels/kernels.h"
#include "formats/sparsity.h"

void tpe_sparse_free(tp_engine *e) {
    for (int i = 0; e->spgemm && i < e->g->n_ops; i++) tp_spgemm_destroy(e->spgemm[i]);
    free(e->spgemm);
    free(e->sparse_on);
    free(e->sparse_us);
    free(e->sparse_why);
    tp_spgemm_ctx_destroy(e->spctx);
    e->spgemm = NULL;
    e->sparse_on = NULL;
    e->spctx = NULL;
}

/* Whether linear i can run sparse here, its description in *d; else the reason in why. */
static int eligible(const tp_engine *e, int i, tp_spgemm_desc *d, char *why, size_t n) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    const tp_op *op = &g->ops[i];
    const int64_t N = op->gemm_n, K = op->gemm_k;
    if (op->gemm_m < 8) /* a decode step's few rows: sparse never wins there, and grouped outputs have no slack */
        return snprintf(why, n, "%lld rows (a GEMV's work)", (long long)op->gemm_m), 0;
    const int f8 = pl->op_prec[i] == TP_PREC_FP8;
    if (pl->op_prec[i] != TP_PREC_FP16 && pl->op_prec[i] != TP_PREC_BF16 && !f8)
        return snprintf(why, n, "a %s GEMM: the sparse GEMMs here are fp16, bf16 and per-tensor fp8 (cuSPARSELt has "
                        "no block-scaled 2:4 path on this GPU)", tp_precision_name(pl->op_prec[i])), 0;
    if (f8 && (pl->value_dt[op->in[1]] != TP_E4M3 || !pl->value_scaled[op->in[1]] || !pl->value_scaled[op->in[0]]))
        return snprintf(why, n, "an fp8 GEMM without per-tensor scales"), 0;
    if (e->group_lead[i] >= 0 && e->group_on[e->group_lead[i]])
        return snprintf(why, n, "part of a sibling group's GEMV"), 0;
    /* tprof's own FP8 GEMM (plain_sm90) is the dense time the sparse one must beat, like cuBLASLt's; a GELU in the
     * epilogue (tprof's exact one or cuBLASLt's tanh form) has no sparse equivalent: cuSPARSELt 0.8.0 refused its
     * GELU activation on an H100 (bench/sparse_lab.c --epilogue gelu, bench/results/2026-11-26_h100_sparse_epilogues) */
    if (e->gemv16[i]) return snprintf(why, n, "tprof's decode GEMV chosen for it"), 0;
    if (e->gelu_sm90[i] >= 0 || pl->op_epilogue_gelu[i] >= 0)
        return snprintf(why, n, "a GELU in its epilogue, which cuSPARSELt's sparse GEMM refused here"), 0;
    memset(d, 0, sizeof *d);
    /* rows rounded up to cuSPARSELt's multiple (8, 16 for E4M3): activation buffers have PAD_ROWS of slack
     * (engine_internal.h), the extra rows' results land there, unread; a 16-bit input quantized as read goes through
     * the engine's own E4M3 scratch (e->d_sq8), sized for the rounded rows */
    const int mm = f8 ? 16 : 8;
    d->M = (op->gemm_m + mm - 1) / mm * mm, d->N = N, d->K = K;
    if (d->M != op->gemm_m && (g->values[op->in[0]].kind != TP_VAL_ACT || PAD_ROWS < mm - 1))
        return snprintf(why, n, "M %lld rows, not a multiple of %d, from a buffer without slack rows",
                        (long long)op->gemm_m, mm), 0;
    d->dt = f8 ? TP_E4M3 : pl->value_dt[op->in[0]];
    d->has_bias = op->n_in > 2;
    d->residual = pl->op_epilogue_add[i] >= 0;
    /* every operand in the one type, stored plainly, the output and residual in slack-padded activation buffers */
    const int ea = pl->op_epilogue_add[i];
    const int yv = ea >= 0 ? g->ops[ea].out : op->out;
    const int rv = ea >= 0 ? (g->ops[ea].in[0] == op->out ? g->ops[ea].in[1] : g->ops[ea].in[0]) : -1;
    const tp_dtype o = pl->value_dt[yv]; /* E4M3 inputs: a 16-bit output (cuSPARSELt's E4M3 -> F16/BF16) */
    d->out_dt = o;
    if (f8 && o == TP_E4M3)
        return snprintf(why, n, "an E4M3 output (cuSPARSELt's E4M3 GEMMs write F16 or BF16 here)"), 0;
    if (pl->value_dt[op->in[1]] != d->dt || (f8 ? (o != TP_F16 && o != TP_BF16) : o != d->dt) ||
        (rv >= 0 && pl->value_dt[rv] != o) || (d->has_bias && pl->value_dt[op->in[2]] != o))
        return snprintf(why, n, "its operands' types differ"), 0;
    if (f8) /* the per-tensor scales: the input's calibrated amax / 448, the weight's (e->wglobal) */
        d->alpha = (float)(e->act_amax[op->in[0]] / 448.0) * e->wglobal[op->in[1]];
    if (pl->value_qf[op->in[0]] != TP_QF_NONE || pl->value_qf[op->in[1]] != TP_QF_NONE || pl->value_qf[yv] != TP_QF_NONE)
        return snprintf(why, n, "a block-scaled operand"), 0;
    if (g->values[yv].kind != TP_VAL_ACT || (rv >= 0 && g->values[rv].kind != TP_VAL_ACT))
        return snprintf(why, n, "its output or residual is not an activation buffer"), 0;
    return tp_spgemm_supported(d, why, n);
}

/* The output op i writes (its fused residual add's, if any) and that add's other operand. */
static void outputs(const tp_engine *e, int i, void **y, const void **res) {
    const tp_graph *g = e->g;
    const int ea = e->plan->op_epilogue_add[i];
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
    outputs(e, i, &y, &res);
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

/* The sparse GEMM's output against the dense one's on the same operands (the residual restored between the runs, so
 * an in-place one reads the same values): *rel = |y_sparse - y_dense| / |y_dense| over the op's output (NaN when
 * either is not finite). A search can keep an algorithm that computes other values (compute-sanitizer's runs of
 * cuSPARSELt 0.8.0's f16 kernels, 2026-11-26); the engine then keeps the dense GEMM. */
static tp_status compare_sparse(tp_engine *e, int i, double *rel, tp_error *err) {
    const tp_graph *g = e->g;
    const int ea = e->plan->op_epilogue_add[i], yv = ea >= 0 ? g->ops[ea].out : g->ops[i].out;
    const size_t n = (size_t)tp_value_numel(&g->values[yv]), bytes = value_bytes(e, yv);
    const tp_dtype dt = e->plan->value_dt[yv];
    void *y = e->dptr[yv];
    char *h = malloc(3 * bytes);
    float *fd = malloc(sizeof(float) * n), *fs = malloc(sizeof(float) * n);
    tp_status st = TP_OK;
    if (!h || !fd || !fs) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory checking %s's sparse GEMM", g->ops[i].layer);
        goto done;
    }
    CU_TRY(cudaMemcpyAsync(h, y, bytes, cudaMemcpyDeviceToHost, e->stream));
    for (int run = 0; run < 2 && !st; run++) { /* dense, then sparse, each from the saved output */
        e->sparse_on[i] = (unsigned char)run;
        CU_TRY(cudaMemcpyAsync(y, h, bytes, cudaMemcpyHostToDevice, e->stream));
        tp_error le = {0};
        if (run == 1 && tpe_launch_op(e, i, &le)) { /* the sparse launch failed: no values to keep */
            e->sparse_on[i] = 0;
            cudaGetLastError();
            if (cudaStreamSynchronize(e->stream) != cudaSuccess)
                st = tp_fail(err, TP_ERR_CUDA, "sparse gemm %s: %s", g->ops[i].layer, le.msg);
            else
                CU_TRY(cudaMemcpyAsync(y, h, bytes, cudaMemcpyHostToDevice, e->stream));
            *rel = NAN;
            goto done;
        }
        if (run == 0 && (st = tpe_launch_op(e, i, err))) break;
        CU_TRY(cudaMemcpyAsync(h + (size_t)(run + 1) * bytes, y, bytes, cudaMemcpyDeviceToHost, e->stream));
        CU_TRY(cudaStreamSynchronize(e->stream));
    }
    if (!st) CU_TRY(cudaMemcpyAsync(y, h, bytes, cudaMemcpyHostToDevice, e->stream));
    if (!st) CU_TRY(cudaStreamSynchronize(e->stream));
    if (!st) {
        tp_convert_to_f32(dt, h + bytes, fd, n, 1.0f);
        tp_convert_to_f32(dt, h + 2 * bytes, fs, n, 1.0f);
        double dd = 0, rr = 0;
        for (size_t k = 0; k < n; k++) {
            const double a = fs[k], b = fd[k];
            dd += (a - b) * (a - b), rr += b * b;
        }
        *rel = rr > 0 ? sqrt(dd / rr) : (dd == 0 ? 0.0 : INFINITY);
    }
done:
    e->sparse_on[i] = 0; /* the dense GEMM again: the caller times both from here */
    free(h), free(fd), free(fs);
    return st;
fail:
    e->sparse_on[i] = 0;
    free(h), free(fd), free(fs);
    return st;
}


/* One eager pass; a graph with a KV cache from position 0 (as the warm-up pass: any other could run past its end) */
static tp_status launch_pass(tp_engine *e, tp_error *err) {
    if (e->g->kv_len > 0 && cudaMemsetAsync(e->d_past, 0, sizeof(int), e->stream) != cudaSuccess)
        return tp_fail(err, TP_ERR_CUDA, "resetting the KV cache position: %s", cudaGetErrorString(cudaGetLastError()));
    tp_status st = tpe_launch_begin(e, err);
    for (int i = 0; i < e->g->n_ops && !st; i++) st = tpe_launch_op(e, i, err);
    return st ? st : tpe_launch_end(e, err);
}

/* GPU time of the whole forward pass (ms) as the engine will run it: captured into a CUDA graph of its own and
 * replayed when the engine runs graphs (eager launches would charge each kernel its host launch cost, which the
 * graph removes: ViT-B/16 FP16's sparse picks ran 2.5 % slower eagerly and 5 % faster replayed, bench/results
 * 2026-11-26), eager otherwise; the mean of 4 passes bracketed by events after one untimed. */
static tp_status pass_ms(tp_engine *e, double *ms, tp_error *err) {
    tp_status st = TP_OK;
    cudaEvent_t ev[2] = {NULL, NULL};
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (e->use_graph) {
        CU_TRY(cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal));
        st = launch_pass(e, err);
        const cudaError_t ce = cudaStreamEndCapture(e->stream, &graph);
        if (!st && ce != cudaSuccess)
            st = tp_fail(err, TP_ERR_CUDA, "capturing the pass for the sparse check: %s", cudaGetErrorString(ce));
        if (!st && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
            st = tp_fail(err, TP_ERR_CUDA, "instantiating the pass for the sparse check: %s",
                         cudaGetErrorString(cudaGetLastError()));
        if (st) goto fail;
    }
    CU_TRY(cudaEventCreate(&ev[0]));
    CU_TRY(cudaEventCreate(&ev[1]));
    for (int r = 0; r < 5 && !st; r++) {
        if (r == 1) CU_TRY(cudaEventRecord(ev[0], e->stream));
        if (exec) CU_TRY(cudaGraphLaunch(exec, e->stream));
        else st = launch_pass(e, err);
    }
    if (!st) {
        CU_TRY(cudaEventRecord(ev[1], e->stream));
        CU_TRY(cudaEventSynchronize(ev[1]));
        float t = 0;
        CU_TRY(cudaEventElapsedTime(&t, ev[0], ev[1]));
        *ms = t / 4.0;
    }
fail:
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    return st;
}

/* The choice made op by op, checked on the whole forward pass (pass_ms): the picks on against all off, alternating,
 * three rounds each; the picks stay only when the pass is faster with them. Each GEMM timed alone can gain while the pass
 * loses (ViT-B/16 FP8 at batch 64 on an H100: 9-11 qkv picks each 1-3 % faster alone, the pass 3-4 % slower with
 * them, bench/results 2026-11-26; docs/sparsity.md). *kept: 1 when the picks stay. */
static tp_status check_whole_pass(tp_engine *e, int *kept, double *on_ms, double *off_ms, tp_error *err) {
    const tp_graph *g = e->g;
    unsigned char *on = malloc((size_t)(g->n_ops ? g->n_ops : 1));
    double t_on[3], t_off[3];
    tp_status st = TP_OK;
    if (!on) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    memcpy(on, e->sparse_on, (size_t)g->n_ops);
    for (int r = 0; r < 3 && !st; r++) {
        memset(e->sparse_on, 0, (size_t)g->n_ops);
        st = pass_ms(e, &t_off[r], err);
        memcpy(e->sparse_on, on, (size_t)g->n_ops);
        if (!st) st = pass_ms(e, &t_on[r], err);
    }
    memcpy(e->sparse_on, on, (size_t)g->n_ops);
    free(on);
    if (st) return st;
    /* medians of three */
    for (int a = 0; a < 2; a++)
        for (int b = a + 1; b < 3; b++) {
            if (t_on[b] < t_on[a]) { double x = t_on[a]; t_on[a] = t_on[b]; t_on[b] = x; }
            if (t_off[b] < t_off[a]) { double x = t_off[a]; t_off[a] = t_off[b]; t_off[b] = x; }
        }
    *on_ms = t_on[1], *off_ms = t_off[1];
    *kept = t_on[1] < t_off[1];
    return TP_OK;
}

tp_status tpe_choose_sparse(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    if (g->tp_size > 1) /* its passes would launch one rank's all-reduces alone */
        return tp_fail(err, TP_ERR_UNSUPPORTED, "2:4 sparse GEMMs: unsupported on a tensor-parallel rank's engine");
    tp_status st = tp_spgemm_ctx_create(&e->spctx, err);
    if (st) return st;
    if (!(e->spgemm = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *e->spgemm)) ||
        !(e->sparse_on = calloc((size_t)(g->n_ops ? g->n_ops : 1), 1)) ||
        !(e->sparse_us = calloc((size_t)(2 * (g->n_ops ? g->n_ops : 1)), sizeof(double))) ||
        !(e->sparse_why = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *e->sparse_why)))
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    int n_on = 0;
    /* TPROF_SPARSE_PROBE (a lab switch, scripts/gpu_session.sh sparse_gap, docs/sparsity.md): "plan" stops each
     * linear's sparse life once its plan is made, "value" after the value check; the plan freed, the dense GEMM kept */
    const char *probe = getenv("TPROF_SPARSE_PROBE");
    /* representative inputs and one pass over them: every activation a real value (the build's filled buffers hold
     * NaN bytes where a value is E4M3) before the value checks below */
    if ((st = tpe_fill_inputs(e, err)) || (st = launch_pass(e, err))) return st;
    for (int i = 0; i < g->n_ops && !st; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_LINEAR) continue;
        char why[200] = "", dense[200];
        tp_spgemm_desc d;
        const tp_param *w = &e->params->params[g->values[op->in[1]].param_index];
        /* the 2:4 weights only (pruned by --sparsity, or a checkpoint's); the others are dense, nothing to say */
        if (w->ndim != 2 || w->shape[0] != op->gemm_n || !tp_sparse_shape_ok(op->gemm_n, op->gemm_k, NULL, 0) ||
            tp_sparse_violations(w->data, op->gemm_n, op->gemm_k, NULL))
            continue;
        snprintf(dense, sizeof dense, "%s", e->impl_note[i][0] ? e->impl_note[i] : "cuBLASLt");
        if (!eligible(e, i, &d, why, sizeof why)) {
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "%.60s; 2:4 weights, sparse not eligible: %.80s", dense,
                     why);
            snprintf(e->sparse_why[i], sizeof e->sparse_why[i], "%s", why);
            continue;
        }
        void *y;
        const void *res, *x = e->dptr[op->in[0]];
        outputs(e, i, &y, &res);
        if (op_fp8_quant_in(e, i)) { /* its E4M3 copy: the scratch, grown to the rounded rows */
            const size_t b = (size_t)(d.M * d.K);
            if (b > e->sq8_bytes) {
                if ((st = tpe_dev_alloc(e, b, &e->d_sq8, "the sparse GEMMs' E4M3 input", err))) return st;
                e->act_bytes += (double)b;
                e->sq8_bytes = b;
            }
            x = e->d_sq8;
        }
        tp_error se = {0};
        if ((st = tp_spgemm_create(e->spctx, &d, e->dptr[op->in[1]], x,
                                   d.has_bias ? e->dptr[op->in[2]] : NULL, res, y, e->stream, op->layer,
                                   &e->spgemm[i], &se))) {
            if (st == TP_ERR_OOM) return tp_fail(err, st, "%s", se.msg);
            st = TP_OK; /* cuSPARSELt refused this one: said, the dense GEMM kept */
            cudaGetLastError();
            if (cudaStreamSynchronize(e->stream) != cudaSuccess) /* a sticky error: the context is gone */
                return tp_fail(err, TP_ERR_CUDA, "sparse gemm %s: %s", op->layer, se.msg);
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "%.60s; 2:4 sparse refused by cuSPARSELt: %.90s", dense,
                     se.msg);
            snprintf(e->sparse_why[i], sizeof e->sparse_why[i], "cuSPARSELt refused it: %.90s", se.msg);
            continue;
        }
        /* the values first, before this op's timing runs (they repeat it: an in-place residual grows with each; the
         * earlier ops' growth only scales this one's inputs, which a relative comparison takes): a sparse GEMM that
         * computes others is never kept, not even forced */
        double rel = 0;
        e->sparse_on[i] = 0;
        if (probe && !strcmp(probe, "plan")) {
            tp_spgemm_destroy(e->spgemm[i]);
            e->spgemm[i] = NULL;
            continue;
        }
        if ((st = compare_sparse(e, i, &rel, err))) break;
        if (probe && !strcmp(probe, "value")) {
            tp_spgemm_destroy(e->spgemm[i]);
            e->spgemm[i] = NULL;
            continue;
        }
        const double tol = d.dt == TP_F16 ? 1e-2 : 3e-2; /* summation order and one rounding of the output */
        if (!(rel <= tol)) {
            char alg[128];
            tp_spgemm_describe(e->spgemm[i], alg, sizeof alg);
            e->sparse_on[i] = 0;
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "%.40s; 2:4 sparse computed other values than the "
                     "dense GEMM (rel L2 %.2g; cuSPARSELt %.48s): dense kept", dense, rel, alg);
            snprintf(e->sparse_why[i], sizeof e->sparse_why[i], "its values differ from the dense GEMM's (rel L2 "
                     "%.2g, %.40s)", rel, alg);
            tp_spgemm_destroy(e->spgemm[i]);
            e->spgemm[i] = NULL;
            continue;
        }
        double t_dense = 0, t_sparse = 0;
        if ((st = tpe_time_op(e, i, &t_dense, err))) break;
        e->sparse_on[i] = 1;
        tp_error te = {0};
        if (tpe_time_op(e, i, &t_sparse, &te)) { /* its launch failed: said, the dense GEMM kept */
            e->sparse_on[i] = 0;
            cudaGetLastError();
            if (cudaStreamSynchronize(e->stream) != cudaSuccess)
                return tp_fail(err, TP_ERR_CUDA, "sparse gemm %s: %s", op->layer, te.msg);
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "%.60s; 2:4 sparse failed to run: %.90s", dense, te.msg);
            snprintf(e->sparse_why[i], sizeof e->sparse_why[i], "failed to run: %.100s", te.msg);
            tp_spgemm_destroy(e->spgemm[i]);
            e->spgemm[i] = NULL;
            continue;
        }
        /* a candidate unless clearly slower alone (3 %: an op timed alone, its inputs hot in L2, ties within the
         * noise while the pass can still gain, bench/results 2026-11-26); the whole pass decides below */
        e->sparse_on[i] = e->sparse_mode == 2 || t_sparse < 1.03 * t_dense;
        e->sparse_us[2 * i] = t_sparse;
        e->sparse_us[2 * i + 1] = t_dense;
        if (e->sparse_on[i])
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "cuSPARSELt 2:4 sparse ran: %.1f us (dense %.1f us: "
                     "%.50s)", t_sparse, t_dense, dense);
        else
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "2:4 eligible, dense kept: sparse %.0f %% slower "
                     "(%.1f us against %.1f us); dense: %.80s", 100.0 * (t_sparse / t_dense - 1.0), t_sparse, t_dense,
                     dense);
        if (e->sparse_on[i]) {
            e->weight_bytes += (double)tp_spgemm_weight_bytes(e->spgemm[i]);
            n_on++;
        } else { /* its compressed weight and plan are not needed: freed, the times kept for the notes */
            tp_spgemm_destroy(e->spgemm[i]);
            e->spgemm[i] = NULL;
        }
    }
    /* auto: the picks checked on the whole pass (forced ones stay: that is what force asks) */
    int kept = 1;
    double on_ms = 0, off_ms = 0;
    if (!st && n_on > 0 && e->sparse_mode != 2 && !e->ranks) st = check_whole_pass(e, &kept, &on_ms, &off_ms, err);
    for (int i = 0; !st && kept && n_on > 0 && e->sparse_mode != 2 && i < g->n_ops; i++)
        if (e->sparse_on[i]) { /* the pass's times beside the op's own */
            const size_t l = strlen(e->impl_note[i]);
            snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; the pass %.3f ms with the sparse GEMMs, %.3f "
                     "ms without", on_ms, off_ms);
        }
    for (int i = 0; !st && !kept && i < g->n_ops; i++) {
        if (!e->sparse_on[i]) continue;
        e->sparse_on[i] = 0;
        e->weight_bytes -= (double)tp_spgemm_weight_bytes(e->spgemm[i]);
        snprintf(e->impl_note[i], sizeof e->impl_note[i], "2:4 eligible, dense kept: sparse %.1f us against %.1f us "
                 "alone, but the whole pass ran %.3f ms with the sparse GEMMs against %.3f ms without",
                 e->sparse_us[2 * i], e->sparse_us[2 * i + 1], on_ms, off_ms);
        snprintf(e->sparse_why[i], sizeof e->sparse_why[i], "the whole pass was faster dense (%.3f ms against %.3f ms)",
                 off_ms, on_ms);
        tp_spgemm_destroy(e->spgemm[i]);
        e->spgemm[i] = NULL;
        n_on--;
    }
    /* no sparse GEMM runs: cuSPARSELt's handle goes too */
    if (!st && n_on == 0) {
        tp_spgemm_ctx_destroy(e->spctx);
        e->spctx = NULL;
    }
    return st;
}

int tp_engine_sparse_op(const tp_engine *e, int op, double *sparse_us, double *dense_us, const char **why) {
    if (why) *why = NULL;
    if (!e || !e->spgemm || op < 0 || op >= e->g->n_ops) return -1;
    if (!e->sparse_on[op] && e->sparse_us[2 * op + 1] <= 0.0) { /* never timed: not eligible, refused or failed */
        if (!e->sparse_why[op][0]) return -1;
        if (why) *why = e->sparse_why[op];
        return -2;
    }
    if (sparse_us) *sparse_us = e->sparse_us[2 * op];
    if (dense_us) *dense_us = e->sparse_us[2 * op + 1];
    if (why && e->sparse_why[op][0]) *why = e->sparse_why[op]; /* timed, then kept dense by the whole pass */
    return e->sparse_on[op] != 0;
}
