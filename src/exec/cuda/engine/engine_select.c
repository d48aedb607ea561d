/* engine_select.c, the selection phase (it calls engine_run.c, engine_launch.c and engine_memory.c): the choices
 * an engine makes when it is built (engine_internal.h), timed on the op's own buffers (tpe_time_op): which kernel
 * runs each attention op and each GEMM, whether a sibling group runs as one GEMV, whether a linear with 2:4 weights
 * runs cuSPARSELt's sparse GEMM. C11. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "exec/cuda/attention/attention_wgmma.h"
#include "exec/cuda/engine/engine_internal.h"
#include "exec/cuda/gemm/gemm_sm90.h"
#include "exec/cuda/gemm/gemv.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/vendor/gemm_cutlass.h"
#include "exec/cuda/vendor/sparse_cusparselt.h"
#include "formats/dtype.h"
#include "formats/sparsity.h"
#include "planner/supports.h"

/* ---- attention implementations' names; an op's time ------------------------------------------------ */

static const char *ATTN_NAMES[TP_ATTN_COUNT] = {"auto", "flash", "cudnn", "classic", "wgmma"};

const char *tp_attn_impl_name(tp_attn_impl a) { return (unsigned)a < TP_ATTN_COUNT ? ATTN_NAMES[a] : "?"; }

int tp_attn_impl_parse(const char *s) {
    for (int i = 0; s && i < TP_ATTN_COUNT; i++)
        if (strcmp(s, ATTN_NAMES[i]) == 0) return i;
    return -1;
}

static int flash_eligible(tp_dtype in, int D) {
    const tp_kernel_shape ks = {.dt = in, .k = D};
    return tp_supports(TP_KERNEL_ATTENTION_FLASH, &ks, NULL, 0);
}

/* Times op i as it is configured: 3 launches to warm up, then the mean of 10 back-to-back launches between two
 * events (each a few tens of us, so launch gaps do not matter on the GPU timeline), in us. The hook is muted:
 * these launches are not part of any profiled pass. */
tp_status tpe_time_op(tp_engine *e, int i, double *us, tp_error *err) {
    tp_status st = TP_OK;
    cudaEvent_t ev[2] = {NULL, NULL};
    tp_launch_hook hook = e->hook;
    e->hook = NULL;
    CU_TRY(cudaEventCreate(&ev[0]));
    CU_TRY(cudaEventCreate(&ev[1]));
    for (int r = 0; r < 3 && !st; r++) st = tpe_launch_op(e, i, err);
    CU_TRY(cudaEventRecord(ev[0], e->stream));
    for (int r = 0; r < 10 && !st; r++) st = tpe_launch_op(e, i, err);
    CU_TRY(cudaEventRecord(ev[1], e->stream));
    CU_TRY(cudaEventSynchronize(ev[1]));
    float ms = 0;
    CU_TRY(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    *us = ms * 100.0; /* ms / 10 runs * 1000 */
fail:
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    e->hook = hook;
    return st;
}

/* ---- sibling linears as one GEMV (engine_memory.c, "sibling linears"): chosen by time ------------------ */

/* The group of leader `lead` as one call of kind `kind` (TP_CALL_GEMV_GROUP or TP_CALL_GEMM_SM90_GROUP; on: its
 * members join the leader's call, the leader's own kind kept in *own), or the members' own calls again (off: each of
 * the kind it had, the leader *own). */
static void group_set(tp_engine *e, int lead, int on, tp_call_kind kind, tp_call_kind *own) {
    const int grouped = tpe_kind(e, lead) == kind;
    if (on && !grouped) {
        *own = tpe_kind(e, lead);
        for (int j = e->group_next[lead]; j >= 0; j = e->group_next[j]) tp_program_merge(&e->prog, lead, j);
        tpe_set_kind(e, lead, kind);
    } else if (!on && grouped) {
        for (int j = e->group_next[lead]; j >= 0; j = e->group_next[j]) tp_program_split(&e->prog, j);
        tpe_set_kind(e, lead, *own);
    }
}

static int sm90_plain_candidate(const tp_engine *e, int i);

/* The group of leader `lead` can run as one tprof Hopper FP8 GEMM (gemm_sm90.h tpk_gemm_sm90_fp8_group): a
 * prefill's (more than 8 rows) per-tensor FP8 linears writing F16, each alone in its call and a candidate for
 * tprof's FP8 GEMM, in consecutive ops, at most TPK_GEMM_SM90_GROUP_MAX of them, each N a multiple of 8; their
 * weights (and biases: all or none) one after the other in memory (the group layout, engine_memory.c); no tensor
 * parallelism. *n_total: the columns in all. */
static int gemm_group_ready(const tp_engine *e, int lead, int64_t *n_total) {
    const tp_graph *g = e->g;
    const tp_op *l = &g->ops[lead];
    *n_total = 0;
    /* not under tensor parallelism (the other ranks mirror rank 0's calls without the column scales) */
    if (l->gemm_m <= 8 || !tpk_gemm_sm90_supported() || e->fp8_promote || g->tp_size > 1) return 0;
    const char *w = e->dptr[l->in[1]], *b = l->n_in > 2 ? e->dptr[l->in[2]] : NULL;
    int n = 0;
    for (int j = lead; j >= 0; j = e->group_next[j], n++) {
        const tp_op *op = &g->ops[j];
        /* members in consecutive ops: the leader's call writes every member's output, whose activation buffer is
         * handed out at the member's own position (a buffer freed by an op in between could be its) */
        if (j != lead + n || n >= TPK_GEMM_SM90_GROUP_MAX || op->gemm_n % 8 || e->prog.calls[j].n_ops != 1 ||
            e->plan->value_dt[op->in[0]] != TP_E4M3 || e->plan->value_dt[op->out] != TP_F16 ||
            !sm90_plain_candidate(e, j) || (op->n_in > 2) != (b != NULL) || (const char *)e->dptr[op->in[1]] != w ||
            (b && (const char *)e->dptr[op->in[2]] != b))
            return 0;
        w += value_bytes(e, op->in[1]);
        if (b) b += value_bytes(e, op->in[2]);
        *n_total += op->gemm_n;
    }
    return n >= 2;
}

/* Group `lead` as one call of `kind` (TP_CALL_GEMV_GROUP: "GEMV"; TP_CALL_GEMM_SM90_GROUP: "GEMM") where it times
 * faster than `apart` us, its members' own calls (the note says both; a group that fails to launch is skipped, as a
 * candidate is). The kept group's time goes to its leader's gemm_us, its members' to 0. */
static tp_status try_group(tp_engine *e, int lead, int64_t n, tp_call_kind kind, double apart, int members,
                           tp_status (*time_op)(tp_engine *, int, double *, tp_error *), tp_error *err) {
    const tp_graph *g = e->g;
    const int gemm = kind == TP_CALL_GEMM_SM90_GROUP;
    tp_status st = tpe_group_scales(e, lead, n, err);
    if (st) return st;
    double together = 0;
    tp_error eg;
    tp_call_kind own;
    group_set(e, lead, 1, kind, &own);
    if (time_op(e, lead, &together, &eg)) {
        cudaGetLastError();
        group_set(e, lead, 0, kind, &own);
        const size_t l = strlen(e->impl_note[lead]);
        snprintf(e->impl_note[lead] + l, sizeof e->impl_note[lead] - l, "; one %s with its siblings failed: %.60s",
                 gemm ? "GEMM" : "GEMV", eg.msg);
        return TP_OK;
    }
    char why[200];
    snprintf(why, sizeof why, "%s for the %d linears reading %s (N %lld): %.1f us; apart: %.1f us",
             gemm ? "tprof sm90 FP8 GEMM" : "one tprof GEMV", members, g->values[g->ops[lead].in[0]].name,
             (long long)n, together, apart);
    if (together >= apart) {
        group_set(e, lead, 0, kind, &own);
        const size_t l = strlen(e->impl_note[lead]);
        snprintf(e->impl_note[lead] + l, sizeof e->impl_note[lead] - l, "; %s", why);
        return TP_OK;
    }
    e->gemm_us[lead] = together;
    snprintf(e->impl_note[lead], sizeof e->impl_note[lead], "%.180s (kept)", why);
    for (int j = e->group_next[lead]; j >= 0; j = e->group_next[j]) {
        e->gemm_us[j] = 0;
        snprintf(e->impl_note[j], sizeof e->impl_note[j], "in the %s of %s: no kernel", gemm ? "GEMM" : "GEMV",
                 g->ops[lead].layer);
    }
    return TP_OK;
}

/* Group `lead` (gemm_group_ready) as one GEMM where it times faster than its members' chosen GEMMs, which
 * tpe_choose_gemms timed (their gemm_us; a member not timed keeps them apart). */
static tp_status choose_gemm_group(tp_engine *e, int lead, int64_t n,
                                   tp_status (*time_op)(tp_engine *, int, double *, tp_error *), tp_error *err) {
    double apart = 0;
    int members = 0;
    for (int j = lead; j >= 0; j = e->group_next[j], members++)
        if (!(e->gemm_us[j] > 0) || apart < 0) apart = -1;
        else apart += e->gemm_us[j];
    if (apart < 0) {
        const size_t l = strlen(e->impl_note[lead]);
        snprintf(e->impl_note[lead] + l, sizeof e->impl_note[lead] - l,
                 "; not one GEMM with its siblings: a member was not timed");
        return TP_OK;
    }
    return try_group(e, lead, n, TP_CALL_GEMM_SM90_GROUP, apart, members, time_op, err);
}

/* Group `lead` (gemm_group_ready) as one GEMM, as given (an engine file's choice) */
static tp_status set_gemm_group(tp_engine *e, int lead, int64_t n, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = tpe_group_scales(e, lead, n, err);
    if (st) return st;
    tp_call_kind own;
    group_set(e, lead, 1, TP_CALL_GEMM_SM90_GROUP, &own);
    snprintf(e->impl_note[lead], sizeof e->impl_note[lead], "tprof sm90 FP8 GEMM for the linears reading %s (N %lld; "
             "as given)", g->values[g->ops[lead].in[0]].name, (long long)n);
    for (int j = e->group_next[lead]; j >= 0; j = e->group_next[j])
        snprintf(e->impl_note[j], sizeof e->impl_note[j], "in the GEMM of %s: no kernel", g->ops[lead].layer);
    return TP_OK;
}

tp_status tpe_choose_groups(tp_engine *e, const int *given, int cublaslt_only,
                            tp_status (*time_op)(tp_engine *, int, double *, tp_error *), tp_error *err) {
    const tp_graph *g = e->g;
    for (int i = 0; given && i < g->n_ops; i++) /* an engine file's group: the same layout and rules must hold */
        if (given[i] == TP_GEMM_CHOICE_SM90_GROUP && (e->groups_mode == 0 || e->group_lead[i] != i || cublaslt_only)) {
            int64_t n = 0;
            if (cublaslt_only)
                return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: its sibling linears as one tprof FP8 GEMM asked, but "
                               "the engine may run cuBLASLt only (--gemm cublaslt)", g->ops[i].layer);
            if (e->group_lead[i] != i || !gemm_group_ready(e, i, &n))
                return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: its sibling linears as one tprof FP8 GEMM asked, "
                               "but they are not a group this engine lays out and the kernel takes (a prefill's "
                               "per-tensor FP8 linears writing F16 on one E4M3 input, weights one after the other%s)",
                               g->ops[i].layer, e->groups_mode == 0 ? "; --gemv-groups off" : "");
        }
    for (int i = 0; e->groups_mode > 0 && i < g->n_ops; i++) {
        int64_t n = 0;
        if (!cublaslt_only && e->group_lead[i] == i && gemm_group_ready(e, i, &n)) { /* a prefill's FP8 siblings: by
                                                                                         time, or given */
            tp_status st = TP_OK;
            if (!given) st = choose_gemm_group(e, i, n, time_op, err);
            else if (given[i] == TP_GEMM_CHOICE_SM90_GROUP) st = set_gemm_group(e, i, n, err);
            if (st) return st;
            continue;
        }
        if (given && given[i] == TP_GEMM_CHOICE_SM90_GROUP)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: its sibling linears as one tprof FP8 GEMM asked, but the "
                           "kernel does not take them here", g->ops[i].layer);
        if (e->group_lead[i] != i || !tpe_group_ready(e, i, &n)) continue;
        if (e->groups_mode == 1) { /* wherever the layout allows */
            tp_status st = tpe_group_scales(e, i, n, err);
            if (st) return st;
            tp_call_kind own;
            group_set(e, i, 1, TP_CALL_GEMV_GROUP, &own);
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "one tprof GEMV for the linears reading %s (N %lld)",
                     g->values[g->ops[i].in[0]].name, (long long)n);
            for (int j = e->group_next[i]; j >= 0; j = e->group_next[j])
                snprintf(e->impl_note[j], sizeof e->impl_note[j], "in the GEMV of %s: no kernel", g->ops[i].layer);
            continue;
        }
        double apart = 0;
        int members = 0;
        for (int j = i; j >= 0; j = e->group_next[j]) {
            tp_error ej;
            /* weight-only and W8A8 decode GEMVs have no choice, so the selection did not time them: time them here */
            if (!(e->gemm_us[j] > 0) &&
                (op_weight_only(e, j) || op_fp8_quant_in(e, j) || tpe_kind(e, j) == TP_CALL_GEMV_FP8_BLOCK) &&
                time_op(e, j, &e->gemm_us[j], &ej)) {
                cudaGetLastError();
                e->gemm_us[j] = 0;
            }
            if (!(e->gemm_us[j] > 0)) apart = -1; /* a member was not timed (selection off): keep them apart */
            if (apart >= 0) apart += e->gemm_us[j];
            members++;
        }
        if (apart < 0) {
            const size_t l = strlen(e->impl_note[i]);
            snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l,
                     "; not grouped: a member was not timed (--gemv-groups on groups without timing)");
            continue;
        }
        tp_status st = try_group(e, i, n, TP_CALL_GEMV_GROUP, apart, members, time_op, err);
        if (st) return st;
    }
    return TP_OK;
}

/* ---- attention and GEMM implementations ------------------------------------------------------------ */

#define time_op tpe_time_op

static tp_status time_attention(tp_engine *e, int i, tp_attn_impl impl, double *us, tp_error *err) {
    tpe_set_kind(e, i, tpe_attn_kind(impl));
    return time_op(e, i, us, err);
}

/* The GELU op tprof's Hopper GEMM (gemm_sm90.h) can fuse into GEMM op i, or -1: op i a linear with no block format
 * and no other epilogue (plan.c's residual or tanh-GELU fusions) whose types the kernel takes: F16/BF16 operands,
 * bias, output and GELU output of one type (tpk_gemm_sm90), or per-tensor E4M3 operands with an F16 bias and output
 * and a GELU writing F16 or per-tensor E4M3 (tpk_gemm_sm90_fp8, the FP8 engines' fc1); the kernel's shape rules;
 * op i's output read by nothing but that exact-GELU op, whose output lies apart from op i's input
 * (tpe_alloc_activations hands a buffer that dies at op i to the next value of its size: with N == K the GELU's output
 * would take fc1's own input, which the unfused path has read by then, but the fused kernel still reads while it
 * writes). */
static int sm90_gelu_candidate(const tp_engine *e, int i) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    const tp_op *op = &g->ops[i];
    if (op->kind != TP_OP_LINEAR || pl->prog.calls[i].n_ops != 1 || op->out == g->output)
        return -1;
    const tp_dtype dt = pl->value_dt[op->in[0]], hdt = dt == TP_E4M3 ? TP_F16 : dt; /* bias, GEMM output */
    if ((dt == TP_E4M3 && e->fp8_promote) || pl->value_qf[op->in[0]] != TP_QF_NONE ||
        pl->value_qf[op->in[1]] != TP_QF_NONE || pl->value_dt[op->in[1]] != dt || pl->value_dt[op->out] != hdt ||
        (op->n_in > 2 && pl->value_dt[op->in[2]] != hdt))
        return -1;
    int gi = -1, n = 0;
    for (int k = 0; k < g->n_ops; k++)
        for (int j = 0; j < g->ops[k].n_in; j++)
            if (g->ops[k].in[j] == op->out) n++, gi = k;
    /* its epilogue computes the exact GELU: a model's tanh-form GELU stays with cuBLASLt's epilogue (plan.c) */
    if (n != 1 || g->ops[gi].kind != TP_OP_GELU || g->ops[gi].gelu_tanh || tp_program_fused_into(&pl->prog, gi) >= 0 ||
        pl->no_fusion)
        return -1;
    const int y = g->ops[gi].out;
    const tp_dtype ydt = pl->value_dt[y];
    if (pl->value_qf[y] != TP_QF_NONE ||
        (dt == TP_E4M3 ? (ydt != TP_F16 && ydt != TP_E4M3) ||
                             !tpk_gemm_sm90_fp8_shape_ok(ydt, op->gemm_m, op->gemm_n, op->gemm_k)
                       : ydt != dt || !tpk_gemm_sm90_shape_ok(dt, op->gemm_m, op->gemm_n, op->gemm_k)))
        return -1;
    const char *ya = e->dptr[y], *xa = e->dptr[op->in[0]];
    if (ya < xa + tpe_act_alloc_bytes(e, op->in[0]) && xa < ya + tpe_act_alloc_bytes(e, y)) return -1;
    return gi;
}

/* 1 when tprof's Hopper GEMM can run op i without a GELU (tpk_gemm_sm90_fp8, TP_GEMM_CHOICE_SM90): a linear with
 * per-tensor E4M3 operands, no GELU after it that sm90_gelu_candidate fuses and none that plan.c fused (tanh), an
 * F16 bias, writing F16 (then with the residual add plan.c fused, its other operand F16 and either the output
 * itself or apart from it) or per-tensor E4M3; the kernel's shape rules; the output apart from the input. For
 * 16-bit linears cuBLASLt stays: it is faster than tprof's kernel at them (gemm_sm90.h). */
static int sm90_plain_candidate(const tp_engine *e, int i) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    const tp_op *op = &g->ops[i];
    if (op->kind != TP_OP_LINEAR || e->fp8_promote || tpe_plan_fused(e, i, TP_OP_GELU) >= 0 ||
        sm90_gelu_candidate(e, i) >= 0 ||
        pl->value_dt[op->in[0]] != TP_E4M3 || pl->value_dt[op->in[1]] != TP_E4M3 ||
        pl->value_qf[op->in[0]] != TP_QF_NONE || pl->value_qf[op->in[1]] != TP_QF_NONE ||
        (op->n_in > 2 && pl->value_dt[op->in[2]] != TP_F16))
        return 0;
    const int ea = tpe_plan_fused(e, i, TP_OP_ADD);
    const int y = ea >= 0 ? g->ops[ea].out : op->out;
    const tp_dtype ydt = pl->value_dt[y];
    if (pl->value_qf[y] != TP_QF_NONE || (ydt != TP_F16 && ydt != TP_E4M3) || (ea >= 0 && ydt != TP_F16) ||
        !tpk_gemm_sm90_fp8_shape_ok(ydt, op->gemm_m, op->gemm_n, op->gemm_k))
        return 0;
    const char *ya = e->dptr[y], *xa = e->dptr[op->in[0]];
    if (ya < xa + tpe_act_alloc_bytes(e, op->in[0]) && xa < ya + tpe_act_alloc_bytes(e, y)) return 0;
    if (ea >= 0) {
        const tp_op *a = &g->ops[ea];
        const int r = a->in[0] == op->out ? a->in[1] : a->in[0];
        const char *ra = e->dptr[r];
        if (pl->value_dt[r] != TP_F16 ||
            (ra != ya && ra < ya + tpe_act_alloc_bytes(e, y) && ya < ra + tpe_act_alloc_bytes(e, r)))
            return 0;
    }
    return 1;
}

/* Op i (a candidate of sm90_plain_candidate) runs as tprof's FP8 GEMM; the note says so */
static void set_plain_sm90(tp_engine *e, int i, const char *why) {
    tpe_set_kind(e, i, TP_CALL_GEMM_SM90);
    const int ea = tpe_plan_fused(e, i, TP_OP_ADD);
    const tp_dtype ydt = e->plan->value_dt[ea >= 0 ? e->g->ops[ea].out : e->g->ops[i].out];
    const tp_op *op = &e->g->ops[i];
    const int v = tpk_gemm_sm90_fp8_pick_variant(ydt, (int)op->gemm_m, (int)op->gemm_n, e->sms);
    snprintf(e->impl_note[i], sizeof e->impl_note[i],
             "tprof sm90 FP8 GEMM%s%s%s, %s tiles, tensor-core accumulation (%s)",
             e->g->ops[i].n_in > 2 ? " + bias" : "", ea >= 0 ? " + residual" : "", ydt == TP_E4M3 ? " -> E4M3" : "",
             v == 2 ? "128 x 96" : "128 x 128", why);
}

/* GELU op gi joins GEMM op i's call, tprof's Hopper GEMM computing both (gelu_join), or leaves it (gelu_leave: op i
 * its plan's kernel again) */
static void gelu_join(tp_engine *e, int i, int gi) {
    if (tpe_kind(e, i) != TP_CALL_GEMM_SM90_GELU) tp_program_merge(&e->prog, i, gi);
    tpe_set_kind(e, i, TP_CALL_GEMM_SM90_GELU);
}
static void gelu_leave(tp_engine *e, int i, int gi) {
    if (tpe_kind(e, i) != TP_CALL_GEMM_SM90_GELU) return;
    tp_program_split(&e->prog, gi);
    tpe_set_kind(e, i, e->plan->prog.calls[i].kind);
}

/* Op i (a candidate of sm90_gelu_candidate) runs as tprof's GEMM with the GELU gi in its epilogue; both notes say so */
static void set_gelu_sm90(tp_engine *e, int i, int gi, const char *why) {
    gelu_join(e, i, gi);
    const int f8 = e->plan->value_dt[e->g->ops[i].in[0]] == TP_E4M3;
    snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof sm90 %sGEMM + %sexact GELU%s in the epilogue (%s)",
             f8 ? "FP8 " : "", e->g->ops[i].n_in > 2 ? "bias + " : "",
             f8 && e->plan->value_dt[e->g->ops[gi].out] == TP_E4M3 ? " -> E4M3" : "", why);
    snprintf(e->impl_note[gi], sizeof e->impl_note[gi], "in the epilogue of %s (tprof sm90 GEMM): no GELU kernel",
             e->g->ops[i].layer);
}

/* TP_ERR_UNSUPPORTED for a tprof GEMM choice `what` given for op i that cannot run: the first reason that holds
 * (no sm_90 kernel here, --gemm cublaslt, FP8 promotion when `promote`, else `rule`, the op's own) */
static tp_status sm90_refused(const tp_engine *e, int i, int hw, int cublaslt_only, int promote, const char *what,
                              const char *rule, tp_error *err) {
    return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: %s asked, but %s", e->g->ops[i].layer, what,
                   !hw ? "the kernel cannot run here (it needs a compute capability 9.0 GPU and the driver's "
                         "cuTensorMapEncodeTiled)"
                   : cublaslt_only ? "the engine may run cuBLASLt only (--gemm cublaslt)"
                   : promote       ? "its FP8 GEMMs promote to fp32 (--fp8-accum promote)"
                                   : rule);
}

/* engine_file.c checks an engine file's GEMM choices against this without CUDA's headers (EF_MAX_ALGO) */
/* Op i can run as tprof's decode GEMV (gemv.h): a 16-bit linear of at most 8 rows (a decode step's), K a multiple of
 * 8, its input, weight and output (or the fused residual add's) in one type, no GELU in its epilogue. */
static int gemv_candidate(const tp_engine *e, int i) {
    const tp_op *op = &e->g->ops[i];
    const tp_plan *pl = e->plan;
    if (op->kind != TP_OP_LINEAR || op->gemm_m > 8 || op->gemm_k % 8 || pl->value_qf[op->in[0]] != TP_QF_NONE ||
        tpe_plan_fused(e, i, TP_OP_GELU) >= 0)
        return 0;
    const tp_dtype dt = pl->value_dt[op->in[0]];
    const int ea = tpe_plan_fused(e, i, TP_OP_ADD), yv = ea >= 0 ? e->g->ops[ea].out : op->out;
    return (dt == TP_F16 || dt == TP_BF16) && pl->value_dt[op->in[1]] == dt && pl->value_dt[yv] == dt &&
           (op->n_in < 3 || pl->value_dt[op->in[2]] == dt);
}

/* Times op i as tprof's decode GEMV on its buffers and keeps it when faster than cuBLASLt's best (t_best us,
 * candidate best of n); the note says both. A GEMV that fails to launch is skipped, as a candidate is. */
static void try_gemv(tp_engine *e, int i, double t_best, int best, int n) {
    double t_gemv = 0;
    tp_error ev;
    tpe_set_kind(e, i, TP_CALL_GEMV);
    const int failed = time_op(e, i, &t_gemv, &ev) != TP_OK;
    const size_t l = strlen(e->impl_note[i]);
    if (failed || t_gemv >= t_best) {
        tpe_set_kind(e, i, e->plan->prog.calls[i].kind);
        if (failed) cudaGetLastError();
        if (failed) snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; tprof GEMV failed: %.60s", ev.msg);
        else snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; tprof GEMV: %.1f us", t_gemv);
    } else {
        e->gemm_us[i] = t_gemv;
        snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof decode GEMV (gemv.h) by time: %.1f us; cuBLASLt "
                 "algorithm %d of %d: %.1f us", t_gemv, best + 1, n, t_best);
    }
}

/* Op i, a weight-only FP8 or NVFP4 linear of more than 8 rows (a prefill's: the weight dequantized, then cuBLASLt),
 * can run as tprof's Hopper GEMM converting its weights in shared memory (gemm_sm90.h tpk_gemm_sm90_wo_fp8,
 * _nvfp4): 16-bit input, output, bias and residual in one type, K % 16 == 0 (NVFP4: 32), N % 8 == 0, on a device
 * that runs the kernel. */
static int sm90_wo_candidate(const tp_engine *e, int i) {
    const tp_op *op = &e->g->ops[i];
    const tp_plan *pl = e->plan;
    const int w8 = pl->op_prec[i] == TP_PREC_FP8_WO && pl->value_dt[op->in[1]] == TP_E4M3 && op->gemm_k % 16 == 0;
    const int w4 = pl->op_prec[i] == TP_PREC_NVFP4_WO && pl->value_qf[op->in[1]] == TP_QF_NVFP4 && op->gemm_k % 32 == 0;
    if (tpe_kind(e, i) != TP_CALL_GEMM_WO_DEQUANT || !(w8 || w4) || !tpk_gemm_sm90_supported()) return 0;
    const tp_dtype dt = pl->value_dt[op->in[0]];
    const int ea = tpe_plan_fused(e, i, TP_OP_ADD), yv = ea >= 0 ? e->g->ops[ea].out : op->out;
    return tpk_gemm_sm90_shape_ok(dt, op->gemm_m, op->gemm_n, op->gemm_k) && pl->value_dt[yv] == dt &&
           (op->n_in < 3 || pl->value_dt[op->in[2]] == dt);
}

/* Op i, a weight-only FP8 linear of more than 8 rows, can run as CUTLASS's Hopper mixed-input GEMM
 * (vendor/gemm_cutlass.h: the E4M3 weights converted in registers): 16-bit input, output and residual in one type, no
 * bias (the kernel's epilogue is alpha acc + beta C), K % 16 == 0, N % 8 == 0, in a build with CUTLASS on a device
 * that runs it. */
static int cutlass_wo_candidate(const tp_engine *e, int i) {
    const tp_op *op = &e->g->ops[i];
    const tp_plan *pl = e->plan;
    if (tpe_kind(e, i) != TP_CALL_GEMM_WO_DEQUANT || pl->op_prec[i] != TP_PREC_FP8_WO ||
        pl->value_dt[op->in[1]] != TP_E4M3 || op->n_in >= 3 || !tp_cutlass_available(NULL, 0))
        return 0;
    const tp_dtype dt = pl->value_dt[op->in[0]];
    const int ea = tpe_plan_fused(e, i, TP_OP_ADD), yv = ea >= 0 ? e->g->ops[ea].out : op->out;
    return tp_cutlass_wo_shape_ok(dt, op->gemm_m, op->gemm_n, op->gemm_k) && pl->value_dt[yv] == dt;
}

/* Times op i as kind k on its buffers; t: us, or -1 when it failed to launch (skipped, as a candidate is, and
 * said in the note after what: "; <what> failed: ..." or "; <what>: t us"). Leaves the kind as it found it. */
static double time_wo_kind(tp_engine *e, int i, tp_call_kind k, const char *what) {
    const tp_call_kind was = tpe_kind(e, i);
    double t = 0;
    tp_error ew;
    tpe_set_kind(e, i, k);
    const int failed = time_op(e, i, &t, &ew) != TP_OK;
    tpe_set_kind(e, i, was);
    const size_t l = strlen(e->impl_note[i]);
    if (failed) cudaGetLastError();
    if (failed) snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; %s failed: %.60s", what, ew.msg);
    else snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; %s: %.1f us", what, t);
    return failed ? -1.0 : t;
}

/* Times op i, a weight-only linear of a prefill, as each GEMM that reads its low-bit weights directly (tprof's
 * converting GEMM, CUTLASS's mixed-input GEMM, where their candidate rules hold) and keeps the fastest of them and
 * the dequantize + cuBLASLt call (t_best us, candidate best of n); the note says every time. */
static void try_wo(tp_engine *e, int i, double t_best, int best, int n) {
    const int sm90 = sm90_wo_candidate(e, i), cut = cutlass_wo_candidate(e, i);
    const double t_sm90 = sm90 ? time_wo_kind(e, i, TP_CALL_GEMM_SM90_WO, "tprof sm90 converting GEMM") : -1.0;
    double t_cut = -1.0;
    int tile = 0;
    for (int k = 0; cut && k < TP_CUTLASS_TILES; k++) { /* CUTLASS's tile shapes, the fastest kept */
        char what[64];
        snprintf(what, sizeof what, "CUTLASS mixed-input GEMM %s", tp_cutlass_tile_name(k));
        e->cutlass_tile[i] = k;
        const double t = time_wo_kind(e, i, TP_CALL_GEMM_CUTLASS_WO, what);
        if (t >= 0 && (t_cut < 0 || t < t_cut)) t_cut = t, tile = k;
    }
    e->cutlass_tile[i] = tile;
    const int use_cut = t_cut >= 0 && t_cut < t_best && (t_sm90 < 0 || t_cut < t_sm90);
    const int use_sm90 = !use_cut && t_sm90 >= 0 && t_sm90 < t_best;
    if (!use_cut && !use_sm90) return;
    char rest[200];
    snprintf(rest, sizeof rest, "dequantize + cuBLASLt algorithm %d of %d: %.1f us", best + 1, n, t_best);
    if (use_cut && t_sm90 >= 0) {
        const size_t l = strlen(rest);
        snprintf(rest + l, sizeof rest - l, "; tprof sm90 converting GEMM: %.1f us", t_sm90);
    }
    if (use_sm90 && t_cut >= 0) {
        const size_t l = strlen(rest);
        snprintf(rest + l, sizeof rest - l, "; CUTLASS mixed-input GEMM %s: %.1f us", tp_cutlass_tile_name(tile), t_cut);
    }
    e->gemm_us[i] = use_cut ? t_cut : t_sm90;
    tpe_set_kind(e, i, use_cut ? TP_CALL_GEMM_CUTLASS_WO : TP_CALL_GEMM_SM90_WO);
    if (use_cut)
        snprintf(e->impl_note[i], sizeof e->impl_note[i], "CUTLASS %s mixed-input GEMM, %s tiles, E4M3 weights "
                 "converted in registers, by time: %.1f us; %s", tp_cutlass_version(), tp_cutlass_tile_name(tile),
                 t_cut, rest);
    else
        snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof sm90 GEMM, %s weights converted in shared memory, "
                 "by time: %.1f us; %s", e->plan->op_prec[i] == TP_PREC_NVFP4_WO ? "NVFP4" : "E4M3", t_sm90, rest);
}

_Static_assert(TP_GEMM_CHOICE_SM90 == 1001 && TP_GEMM_CHOICE_SM90_GELU == 1000 && TP_GEMM_CHOICE_GEMV == 1002 &&
                   TP_GEMM_CHOICE_CUTLASS_WO == 1004 && TP_CUTLASS_TILES == 2 && TP_GEMM_CHOICE_SM90_GROUP == 1006,
               "engine_file.c's EF_MAX_ALGO");

/* GEMM selection (gemm_cublaslt.h): each GEMM op's heuristic candidates timed on the op's own buffers (its
 * activation input, and the residual its epilogue adds, filled with uniform values first) and the fastest kept;
 * an op with the same shape and types as an earlier one takes that one's choice (a timing cache). Where
 * sm90_gelu_candidate holds on a device that runs tprof's Hopper GEMM, that GEMM with the GELU in its epilogue is
 * timed against the fastest cuBLASLt algorithm plus the GELU op's kernel (the same buffers) and the faster pair
 * kept (TP_GEMM_CHOICE_SM90_GELU); where sm90_plain_candidate holds, tprof's FP8 GEMM against the fastest
 * cuBLASLt algorithm (TP_GEMM_CHOICE_SM90). `first`: keep the heuristic's first candidate and the GELU kernel,
 * time nothing. The choice goes into the op's implementation note, and every per-tensor FP8 GEMM cuBLASLt runs
 * says its accumulation there. */
tp_status tpe_choose_gemms(tp_engine *e, int first, int cublaslt_only, const int *given, tp_error *err) {
    const tp_graph *g = e->g;
    const int hw = tpk_gemm_sm90_supported();
    for (int i = 0; i < g->n_ops; i++) {
        tp_gemm_plan *gp = e->gplan[i];
        if (!gp) continue;
        const int n = tp_gemm_plan_candidates(gp), gi = hw && !cublaslt_only ? sm90_gelu_candidate(e, i) : -1;
        const int pc = hw && !cublaslt_only && sm90_plain_candidate(e, i);
        /* decode: the GEMV, nothing to choose (a given choice too: it can only be a cuBLASLt candidate) */
        if (op_weight_only(e, i) && g->ops[i].gemm_m <= 8) {
            if (given && given[i] >= TP_GEMM_CHOICE_CUTLASS_WO)
                return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: choice %d asked, but a weight-only linear of %lld "
                               "rows runs tprof's decode GEMV", g->ops[i].layer, given[i], (long long)g->ops[i].gemm_m);
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "%s",
                     e->plan->op_prec[i] == TP_PREC_NVFP4_WO
                         ? "tprof NVFP4 weight-only GEMV (gemv.h tpk_gemv_nvfp4): E2M1 x UE4M3 decoded in registers"
                         : "tprof FP8 weight-only GEMV (gemv.h tpk_gemv_fp8): E4M3 weights decoded in registers");
            continue;
        }
        if (given && given[i] == TP_GEMM_CHOICE_SM90 && !cublaslt_only && sm90_wo_candidate(e, i)) {
            tpe_set_kind(e, i, TP_CALL_GEMM_SM90_WO);
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof sm90 GEMM, weights converted in shared memory "
                     "(as given)");
            continue;
        }
        if (given && given[i] >= TP_GEMM_CHOICE_CUTLASS_WO && given[i] < TP_GEMM_CHOICE_CUTLASS_WO + TP_CUTLASS_TILES) {
            char why[160] = "";
            if (cublaslt_only)
                return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: CUTLASS's mixed-input GEMM asked, but the engine may "
                               "run cuBLASLt only (--gemm cublaslt)", g->ops[i].layer);
            if (!cutlass_wo_candidate(e, i))
                return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: CUTLASS's mixed-input GEMM asked, but %s",
                               g->ops[i].layer,
                               !tp_cutlass_available(why, sizeof why)
                                   ? why
                                   : "this op is not a weight-only FP8 linear of more than 8 rows without a bias "
                                     "(16-bit input, output and residual in one type, K % 16 == 0, N % 8 == 0)");
            tpe_set_kind(e, i, TP_CALL_GEMM_CUTLASS_WO);
            e->cutlass_tile[i] = given[i] - TP_GEMM_CHOICE_CUTLASS_WO;
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "CUTLASS %s mixed-input GEMM, %s tiles, E4M3 weights "
                     "converted in registers (as given)", tp_cutlass_version(), tp_cutlass_tile_name(e->cutlass_tile[i]));
            continue;
        }
        if (given && given[i] == TP_GEMM_CHOICE_SM90) {
            if (!pc)
                return sm90_refused(e, i, hw, cublaslt_only, e->fp8_promote, "tprof's Hopper FP8 GEMM",
                                    "this op is not a per-tensor FP8 linear writing F16 (+ residual) or E4M3 that "
                                    "the GELU choice does not take (types, K and N as gemm_sm90.h takes them, the "
                                    "output apart from the input, an F16 residual that is the output or apart from "
                                    "it)",
                                    err);
            set_plain_sm90(e, i, "as given");
            continue;
        }
        if (given && given[i] == TP_GEMM_CHOICE_SM90_GELU) {
            if (gi < 0)
                return sm90_refused(e, i, hw, cublaslt_only, 0, "tprof's Hopper GEMM with the GELU epilogue",
                                    "this op is not a 16-bit or per-tensor FP8 linear feeding only an exact GELU "
                                    "(types, K and N as gemm_sm90.h takes them, the GELU's output apart from the "
                                    "GEMM's input; FP8 not with --fp8-accum promote)",
                                    err);
            set_gelu_sm90(e, i, gi, "as given");
            continue;
        }
        if (given && given[i] == TP_GEMM_CHOICE_GEMV) {
            if (!gemv_candidate(e, i))
                return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: tprof's decode GEMV asked, but it takes only a 16-bit linear "
                               "of at most 8 rows, K a multiple of 8, one type throughout, no GELU epilogue",
                               g->ops[i].layer);
            tpe_set_kind(e, i, TP_CALL_GEMV);
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "tprof decode GEMV (gemv.h; as given)");
            continue;
        }
        if (given && given[i] >= 0 && given[i] != TP_GEMM_CHOICE_SM90_GROUP) { /* a group's mark: the lead's own GEMM
                                                                            is timed, the group formed after */
            if (tp_gemm_plan_select(gp, given[i]))
                return tp_fail(err, TP_ERR_ARG, "gemm %s: candidate %d asked, cuBLASLt has %d", g->ops[i].layer,
                               given[i], n);
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "cuBLASLt algorithm %d of %d (as given)", given[i] + 1,
                     n);
            continue;
        }
        if (first || (n < 2 && gi < 0 && !pc && !gemv_candidate(e, i) &&
                       (cublaslt_only || (!sm90_wo_candidate(e, i) && !cutlass_wo_candidate(e, i))))) {
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "cuBLASLt: the heuristic's first of %d algorithms%s", n,
                     first && n > 1 ? " (selection off)" : "");
            continue;
        }
        int prev = -1;
        for (int j = 0; j < i && prev < 0; j++)
            /* the same precision too: a 16-bit linear and a weight-only one share a 16-bit cuBLASLt description,
             * but only the second has the GEMMs that read its low-bit weights to time */
            if (e->gplan[j] && tpe_same_gemm(tp_gemm_plan_desc(e->gplan[j]), tp_gemm_plan_desc(gp)) &&
                e->plan->op_prec[j] == e->plan->op_prec[i] &&
                (hw && !cublaslt_only && sm90_gelu_candidate(e, j) >= 0) == (gi >= 0) &&
                (hw && !cublaslt_only && sm90_plain_candidate(e, j)) == pc)
                prev = j;
        if (prev >= 0) {
            tp_gemm_plan_select(gp, tp_gemm_plan_choice(e->gplan[prev]));
            memcpy(e->impl_note[i], e->impl_note[prev], sizeof e->impl_note[i]);
            if (tpe_kind(e, prev) == TP_CALL_GEMM_SM90) tpe_set_kind(e, i, TP_CALL_GEMM_SM90);
            if (tpe_kind(e, prev) == TP_CALL_GEMV && gemv_candidate(e, i)) tpe_set_kind(e, i, TP_CALL_GEMV);
            if (tpe_kind(e, prev) == TP_CALL_GEMM_SM90_WO && sm90_wo_candidate(e, i))
                tpe_set_kind(e, i, TP_CALL_GEMM_SM90_WO);
            if (tpe_kind(e, prev) == TP_CALL_GEMM_CUTLASS_WO && cutlass_wo_candidate(e, i)) {
                tpe_set_kind(e, i, TP_CALL_GEMM_CUTLASS_WO);
                e->cutlass_tile[i] = e->cutlass_tile[prev];
            }
            e->gemm_us[i] = e->gemm_us[prev];
            if (tpe_kind(e, prev) == TP_CALL_GEMM_SM90_GELU) {
                gelu_join(e, i, gi);
                snprintf(e->impl_note[gi], sizeof e->impl_note[gi],
                         "in the epilogue of %s (tprof sm90 GEMM): no GELU kernel", g->ops[i].layer);
            }
            continue;
        }
        const tp_op *op = &g->ops[i];
        const int in = op->kind == TP_OP_PATCH_EMBED ? g->input : op->in[0];
        int rc = tpk_fill_uniform(e->dptr[in], e->plan->value_dt[in], (size_t)tp_value_numel(&g->values[in]), 11,
                                  e->stream);
        const int ea = tpe_plan_fused(e, i, TP_OP_ADD);
        if (!rc && ea >= 0) {
            const tp_op *a = &g->ops[ea];
            const int r = a->in[0] == op->out ? a->in[1] : a->in[0];
            rc = tpk_fill_uniform(e->dptr[r], e->plan->value_dt[r], (size_t)tp_value_numel(&g->values[r]), 12,
                                  e->stream);
        }
        if (rc) return tp_fail(err, TP_ERR_CUDA, "filling the inputs of %s: %s", op->layer,
                               cudaGetErrorString((cudaError_t)rc));
        double t[TP_GEMM_MAX_CANDIDATES];
        int best = -1;
        for (int k = 0; k < n; k++) {
            tp_gemm_plan_select(gp, k);
            tp_error ek;
            t[k] = -1.0;
            if (time_op(e, i, &t[k], &ek)) { /* a candidate that fails to launch is skipped, not fatal */
                cudaGetLastError();
                t[k] = -1.0;
                continue;
            }
            if (best < 0 || t[k] < t[best]) best = k;
        }
        if (best < 0) return tp_fail(err, TP_ERR_UNSUPPORTED, "gemm %s: none of cuBLASLt's %d algorithms ran", op->layer, n);
        tp_gemm_plan_select(gp, best);
        e->gemm_us[i] = t[best];
        snprintf(e->impl_note[i], sizeof e->impl_note[i],
                 "cuBLASLt algorithm %d of %d by time: %.1f us (the heuristic's first: %.1f us)", best + 1, n, t[best],
                 t[0]);
        if (gemv_candidate(e, i)) { /* tprof's decode GEMV on the same buffers; kept when faster */
            try_gemv(e, i, t[best], best, n);
            continue;
        }
        if (!cublaslt_only && (sm90_wo_candidate(e, i) || cutlass_wo_candidate(e, i))) { /* the GEMMs reading low-bit
                                                                                           weights directly
                                                                         against dequantize + cuBLASLt */
            try_wo(e, i, t[best], best, n);
            continue;
        }
        if (pc) { /* tprof's FP8 GEMM on the same buffers; kept when faster */
            double t_sm90 = 0;
            tp_error ef;
            tpe_set_kind(e, i, TP_CALL_GEMM_SM90);
            const int failed = time_op(e, i, &t_sm90, &ef) != TP_OK;
            tpe_set_kind(e, i, e->plan->prog.calls[i].kind);
            size_t l = strlen(e->impl_note[i]);
            if (failed) { /* skipped, as a candidate that fails to launch is */
                cudaGetLastError();
                snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; tprof sm90 FP8 GEMM failed: %.60s",
                         ef.msg);
            } else if (t_sm90 < t[best]) {
                char why[120];
                snprintf(why, sizeof why, "by time: %.1f us; cuBLASLt algorithm %d: %.1f us", t_sm90, best + 1,
                         t[best]);
                set_plain_sm90(e, i, why);
            } else {
                snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; tprof sm90 FP8 GEMM: %.1f us", t_sm90);
            }
            continue;
        }
        if (gi < 0) continue;
        /* the GELU's kernel on the output the best algorithm wrote, then the fused kernel */
        double t_gelu = 0, t_fused = 0;
        tp_status st = time_op(e, gi, &t_gelu, err);
        if (st) return st;
        gelu_join(e, i, gi);
        tp_error ef;
        if (time_op(e, i, &t_fused, &ef)) { /* a fused kernel that fails to launch is skipped, as a candidate is */
            cudaGetLastError();
            gelu_leave(e, i, gi);
            size_t l = strlen(e->impl_note[i]);
            snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; tprof sm90 GEMM + GELU failed: %.60s",
                     ef.msg);
            continue;
        }
        char why[120];
        snprintf(why, sizeof why, "by time: %.1f us; cuBLASLt algorithm %d + GELU kernel: %.1f + %.1f us", t_fused,
                 best + 1, t[best], t_gelu);
        if (t_fused < t[best] + t_gelu) {
            set_gelu_sm90(e, i, gi, why);
        } else {
            gelu_leave(e, i, gi);
            size_t l = strlen(e->impl_note[i]);
            snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, " + GELU kernel %.1f us; tprof sm90 GEMM + GELU: "
                     "%.1f us", t_gelu, t_fused);
        }
    }
    { /* sibling linears as one GEMV (tpe_choose_groups), timed against the choices above */
        tp_status st = tpe_choose_groups(e, given, cublaslt_only, time_op, err);
        if (st) return st;
    }
    /* the accumulation of every per-tensor FP8 GEMM cuBLASLt runs, in its note (tprof's kernel says its own) */
    for (int i = 0; i < g->n_ops; i++) {
        const tp_gemm_desc *d = e->gplan[i] ? tp_gemm_plan_desc(e->gplan[i]) : NULL;
        if (!d || d->ab_dt != TP_E4M3 || d->block128 || d->block_fmt || tpe_kind(e, i) == TP_CALL_GEMM_SM90 ||
            tpe_kind(e, i) == TP_CALL_GEMM_SM90_GELU)
            continue;
        const size_t l = strlen(e->impl_note[i]);
        snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; %s",
                 d->fast_accum ? "FAST_ACCUM: no fp32 promotion" : "fp32 promotion (--fp8-accum promote)");
    }
    return TP_OK;
}

/* The masked attention ops that run tprof's flash kernel (setup_masked, engine_memory.c): each distinct shape
 * timed once on the op's buffers with the automatic split-KV and with 1, 2, 4 and TPE_MASKED_SPLITS key ranges
 * (the automatic count fills the SMs, but every range adds a partial output to write and merge: 14 ranges of
 * pi0's expert write 6 MB), the fastest kept; with --attention auto, against the cuBLASLt GEMMs too where they
 * are a candidate. The inputs are filled first (uniform Q, K, V; counts that show every key, so no candidate
 * times a masked-out shortcut); the run's inputs overwrite them. */
static tp_status choose_masked(tp_engine *e, tp_error *err) {
    static const int SPLITS[] = {0, 1, 2, 4, TPE_MASKED_SPLITS};
    const tp_graph *g = e->g;
    int prev = -1;
    for (int i = 0; i < g->n_ops; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_MASKED_ATTENTION || tpe_kind(e, i) != TP_CALL_MASKED_ATTENTION_FLASH) continue;
        const mshape m = tpe_mshape_of(e, i);
        if (prev >= 0) {
            const tp_op *po = &g->ops[prev];
            const mshape pm = tpe_mshape_of(e, prev);
            if (!memcmp(&pm, &m, sizeof m) && po->scale == op->scale && po->prefix == op->prefix &&
                po->pool_mode == op->pool_mode && e->plan->value_dt[po->in[0]] == e->plan->value_dt[op->in[0]] &&
                e->plan->value_dt[po->out] == e->plan->value_dt[op->out]) {
                tpe_set_kind(e, i, tpe_kind(e, prev));
                e->msplits[i] = e->msplits[prev];
                memcpy(e->impl_note[i], e->impl_note[prev], sizeof e->impl_note[i]);
                continue;
            }
        }
        prev = i;
        for (int j = 0; j < (m.two ? 5 : 3); j++) {
            const int v = op->in[j];
            int rc = tpk_fill_uniform(e->dptr[v], e->plan->value_dt[v], (size_t)tp_value_numel(&g->values[v]),
                                      11 + (uint64_t)j, e->stream);
            if (rc) return tp_fail(err, TP_ERR_CUDA, "filling %s: %s", g->values[v].name, cudaGetErrorString((cudaError_t)rc));
        }
        float all[64];
        for (int b = 0; b < 64; b++) all[b] = (float)(m.Tp + m.Tk);
        for (int b = 0; b < m.B; b += 64) {
            const size_t n = (size_t)(m.B - b < 64 ? m.B - b : 64);
            cudaError_t ce = cudaMemcpyAsync((float *)e->dptr[op->in[m.two ? 5 : 3]] + b, all, n * sizeof(float),
                                             cudaMemcpyHostToDevice, e->stream);
            if (ce == cudaSuccess) ce = cudaStreamSynchronize(e->stream);
            if (ce != cudaSuccess) return tp_fail(err, TP_ERR_CUDA, "the counts of %s: %s", op->layer, cudaGetErrorString(ce));
        }
        double t[5], tg = -1.0;
        int best = 0, used[5];
        for (int k = 0; k < 5; k++) {
            tpk_masked_attn_args a;
            e->msplits[i] = SPLITS[k];
            CHECK(tpe_masked_flash_args(e, i, &a));
            used[k] = 1;
            if (tpk_flash_attention_masked_plan(&a, &used[k], NULL))
                return tp_fail(err, TP_ERR_CUDA, "layer %s: the masked flash attention refused its plan", op->layer);
            tp_status st = time_op(e, i, &t[k], err);
            if (st) return st;
            if (t[k] < t[best]) best = k;
        }
        e->msplits[i] = SPLITS[best];
        if (e->mplan && e->mplan[4 * i + 1]) { /* --attention auto with the GEMMs planned */
            tpe_set_kind(e, i, TP_CALL_MASKED_ATTENTION_GEMMS);
            tp_status st = time_op(e, i, &tg, err);
            if (st) return st;
        }
        const int flash = tg < 0 || t[best] <= tg;
        tpe_set_kind(e, i, flash ? TP_CALL_MASKED_ATTENTION_FLASH : TP_CALL_MASKED_ATTENTION_GEMMS);
        size_t l = (size_t)snprintf(e->impl_note[i], sizeof e->impl_note[i], "%s: flash (tprof, tensor cores) by key "
                                    "ranges", flash ? "flash" : "cuBLASLt GEMMs");
        for (int k = 0; k < 5 && l < sizeof e->impl_note[i]; k++)
            l += (size_t)snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "%s %d%s %.1f us", k ? "," : "",
                                  used[k], SPLITS[k] ? "" : " (auto)", t[k]);
        if (tg >= 0 && l < sizeof e->impl_note[i])
            snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; cuBLASLt GEMMs around tprof's masked softmax "
                     "%.1f us", tg);
    }
    return TP_OK;
}

/* Picks the implementation of every attention op (see tp_attn_impl): AUTO times the eligible ones once per
 * distinct shape and type on the op's own buffers (its input filled with uniform values first: the engine's
 * buffers hold nothing defined yet) and keeps the fastest. */
tp_status tpe_choose_attention(tp_engine *e, tp_attn_impl want, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = choose_masked(e, err);
    size_t ws = 0;
    int prev = -1;
    for (int i = 0; i < g->n_ops && !st; i++) {
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_ATTENTION) continue;
        if (e->plan->op_prec[i] == TP_PREC_FP8) { /* the policy asked for FP8 attention: one kernel does it */
            const tp_value *xv = &g->values[op->in[0]];
            if (e->plan->value_dt[op->in[0]] != TP_E4M3) {
                snprintf(e->impl_note[i], sizeof e->impl_note[i], "fp8 (tprof, attention_fp8.cu)");
                continue;
            }
            if (!tpk_flash_attention_wgmma_fp8_supported(e->plan->value_dt[op->out], (int)xv->shape[1], op->head_dim))
                return tp_fail(err, TP_ERR_UNSUPPORTED,
                               "layer %s: the plan gives this fp8 attention e4m3 Q/K/V, which only the wgmma kernel "
                               "takes: it needs a compute capability 9.0 GPU, head dim 64 and T whose K and V fit "
                               "shared memory (T <= 1024); here head dim %d, T %d",
                               op->layer, op->head_dim, (int)xv->shape[1]);
            snprintf(e->impl_note[i], sizeof e->impl_note[i],
                     "fp8 wgmma (tprof, attention_wgmma_fp8.cu: e4m3 Q/K/V from the QKV GEMM)");
            continue;
        }
        const tp_value *xv = &g->values[op->in[0]];
        const tp_dtype in = e->plan->value_dt[op->in[0]], out = e->plan->value_dt[op->out];
        const int B = (int)xv->shape[0], T = (int)xv->shape[1], H = op->heads, D = op->head_dim;
        if (prev >= 0) { /* the same shape and types as the previous attention op: the same choice */
            const tp_op *po = &g->ops[prev];
            const tp_value *pv = &g->values[po->in[0]];
            if (pv->shape[0] == B && pv->shape[1] == T && po->heads == H && po->head_dim == D &&
                e->plan->value_dt[po->in[0]] == in && e->plan->value_dt[po->out] == out && po->scale == op->scale) {
                tpe_set_kind(e, i, tpe_kind(e, prev));
                memcpy(e->impl_note[i], e->impl_note[prev], sizeof e->impl_note[i]);
                if (tpe_kind(e, i) == TP_CALL_ATTENTION_CUDNN) {
                    st = tp_sdpa_create(B, T, H, D, in, op->scale, &e->sdpa[i], err);
                    if (!st && tp_sdpa_workspace_bytes(e->sdpa[i]) > ws) ws = tp_sdpa_workspace_bytes(e->sdpa[i]);
                }
                continue;
            }
        }
        prev = i;
        const int flash_ok = flash_eligible(in, D);
        const int wgmma_ok = tpk_flash_attention_wgmma_supported(in, out, T, D);
        const int cudnn_dt = (in == TP_F16 || in == TP_BF16) && out == in;
        if (want == TP_ATTN_FLASH && !flash_ok)
            return tp_fail(err, TP_ERR_UNSUPPORTED,
                           "layer %s: --attention flash needs f16/bf16 Q/K/V and head dim 32, 64, 80, 96 or 128; "
                           "this op has %s and head dim %d",
                           op->layer, tp_dtype_info(in)->name, D);
        if (want == TP_ATTN_WGMMA && !wgmma_ok)
            return tp_fail(err, TP_ERR_UNSUPPORTED,
                           "layer %s: --attention wgmma needs a compute capability 9.0 GPU (wgmma is sm_90a only), "
                           "f16/bf16 Q/K/V, head dim 64 and a head that fits shared memory (T <= 577); this op has %s, "
                           "head dim %d, T %d",
                           op->layer, tp_dtype_info(in)->name, D, T);
        if (want == TP_ATTN_CUDNN && !cudnn_dt)
            return tp_fail(err, TP_ERR_UNSUPPORTED,
                           "layer %s: --attention cudnn needs f16 or bf16 in and out (cuDNN's SDPA writes no e4m3); "
                           "this op reads %s and writes %s",
                           op->layer, tp_dtype_info(in)->name, tp_dtype_info(out)->name);
        tp_sdpa *sd = NULL;
        if (want == TP_ATTN_CUDNN || (want == TP_ATTN_AUTO && cudnn_dt)) {
            tp_error ce;
            tp_status cs = tp_sdpa_create(B, T, H, D, in, op->scale, &sd, &ce);
            if (cs && want == TP_ATTN_CUDNN) return tp_fail(err, cs, "layer %s: --attention cudnn: %s", op->layer, ce.msg);
            if (cs) snprintf(e->impl_note[i], sizeof e->impl_note[i], "cudnn not used (%.120s); ", ce.msg);
        }
        if (want != TP_ATTN_AUTO || (!flash_ok && !wgmma_ok && !sd)) {
            tp_attn_impl pick = want != TP_ATTN_AUTO ? want : TP_ATTN_CLASSIC;
            tpe_set_kind(e, i, tpe_attn_kind(pick));
            e->sdpa[i] = pick == TP_ATTN_CUDNN ? sd : NULL;
            if (pick != TP_ATTN_CUDNN) tp_sdpa_destroy(sd);
            size_t l = strlen(e->impl_note[i]);
            snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "%s (%s)",
                     pick == TP_ATTN_CUDNN ? tp_sdpa_describe(e->sdpa[i]) : tp_attn_impl_name(pick),
                     want == TP_ATTN_AUTO ? "the only one eligible" : "as asked");
            if (pick == TP_ATTN_CUDNN && tp_sdpa_workspace_bytes(sd) > ws) ws = tp_sdpa_workspace_bytes(sd);
            continue;
        }
        /* AUTO with candidates: time each on this op, keep the fastest */
        int rc = tpk_fill_uniform(e->dptr[op->in[0]], in, (size_t)tp_value_numel(xv), 7, e->stream);
        if (rc) return tp_fail(err, TP_ERR_CUDA, "filling %s: %s", xv->name, cudaGetErrorString((cudaError_t)rc));
        double t[TP_ATTN_COUNT];
        for (int k = 0; k < TP_ATTN_COUNT; k++) t[k] = -1.0;
        void *ws_tmp = NULL;
        if (flash_ok) st = time_attention(e, i, TP_ATTN_FLASH, &t[TP_ATTN_FLASH], err);
        if (!st && wgmma_ok) st = time_attention(e, i, TP_ATTN_WGMMA, &t[TP_ATTN_WGMMA], err);
        if (!st && sd) {
            size_t need = tp_sdpa_workspace_bytes(sd);
            if (need && cudaMalloc(&ws_tmp, need) != cudaSuccess) {
                cudaGetLastError();
                st = tp_fail(err, TP_ERR_OOM, "cuDNN SDPA workspace of %zu bytes for %s", need, op->layer);
            }
            void *keep_ws = e->d_sdpa_ws;
            e->d_sdpa_ws = ws_tmp;
            e->sdpa[i] = sd;
            if (!st) st = time_attention(e, i, TP_ATTN_CUDNN, &t[TP_ATTN_CUDNN], err);
            e->d_sdpa_ws = keep_ws;
            cudaFree(ws_tmp);
        }
        if (st) {
            e->sdpa[i] = NULL;
            tp_sdpa_destroy(sd);
            return st;
        }
        static const tp_attn_impl CAND[] = {TP_ATTN_FLASH, TP_ATTN_WGMMA, TP_ATTN_CUDNN};
        tp_attn_impl best = TP_ATTN_COUNT;
        int n_timed = 0;
        for (int k = 0; k < 3; k++) {
            const tp_attn_impl c = CAND[k];
            if (t[c] < 0) continue;
            n_timed++;
            if (best == TP_ATTN_COUNT || t[c] < t[best]) best = c;
        }
        tpe_set_kind(e, i, tpe_attn_kind(best));
        if (best != TP_ATTN_CUDNN) {
            e->sdpa[i] = NULL;
            tp_sdpa_destroy(sd);
        } else if (tp_sdpa_workspace_bytes(sd) > ws) {
            ws = tp_sdpa_workspace_bytes(sd);
        }
        size_t l = strlen(e->impl_note[i]);
        l += (size_t)snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "%s:", tp_attn_impl_name(best));
        for (int k = 0; k < 3 && l < sizeof e->impl_note[i]; k++)
            if (t[CAND[k]] >= 0)
                l += (size_t)snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, " %s%s %.1f us",
                                      tp_attn_impl_name(CAND[k]), CAND[k] == TP_ATTN_CUDNN ? "" : " (tprof)",
                                      t[CAND[k]]);
        if (n_timed == 1 && l < sizeof e->impl_note[i])
            snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, " (the only one eligible)");
    }
    if (!st && ws) {
        st = tpe_dev_alloc(e, ws, &e->d_sdpa_ws, "cuDNN SDPA workspace", err);
        if (!st) e->act_bytes += (double)ws;
    }
    return st;
}

/* ---- 2:4 sparse GEMMs ---------------------------------------------------------------------------------- */

/* 2:4 sparse GEMMs in an engine (engine_internal.h, "2:4 sparse GEMMs"; issue 22). A linear runs
 * cuSPARSELt's sparse GEMM (vendor/sparse_cusparselt.h) only where that was faster than its dense GEMM when the
 * engine was built, and every eligible linear's note says which ran and the two times: "eligible" is never a claim
 * that a sparse kernel ran. */

void tpe_sparse_free(tp_engine *e) {
    for (int i = 0; e->spgemm && i < e->g->n_ops; i++) tp_spgemm_destroy(e->spgemm[i]);
    free(e->spgemm);
    free(e->sparse_dense);
    free(e->sparse_us);
    free(e->sparse_why);
    tp_spgemm_ctx_destroy(e->spctx);
    e->spgemm = NULL;
    e->sparse_dense = NULL;
    e->spctx = NULL;
}

/* Linear i runs cuSPARSELt's GEMM (its call's kind TP_CALL_GEMM_SPARSE) or its dense kind again (kept in
 * e->sparse_dense while the sparse one runs) */
static int sparse_is(const tp_engine *e, int i) {
    return tp_program_is_head(&e->prog, i) && e->prog.calls[i].kind == TP_CALL_GEMM_SPARSE;
}
static void sparse_set(tp_engine *e, int i, int on) {
    if (on && !sparse_is(e, i)) {
        e->sparse_dense[i] = tpe_kind(e, i);
        tpe_set_kind(e, i, TP_CALL_GEMM_SPARSE);
    } else if (!on && sparse_is(e, i)) {
        tpe_set_kind(e, i, e->sparse_dense[i]);
    }
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
    if (tpe_kind(e, i) == TP_CALL_GEMV_GROUP) return snprintf(why, n, "part of a sibling group's GEMV"), 0;
    if (tpe_kind(e, i) == TP_CALL_GEMM_SM90_GROUP) return snprintf(why, n, "part of a sibling group's GEMM"), 0;
    /* tprof's own FP8 GEMM (TP_CALL_GEMM_SM90) is the dense time the sparse one must beat, like cuBLASLt's; a GELU in the
     * epilogue (tprof's exact one or cuBLASLt's tanh form) has no sparse equivalent: cuSPARSELt 0.8.0 refused its
     * GELU activation on an H100 (bench/sparse_lab.c --epilogue gelu, bench/results/2026-11-26_h100_sparse_epilogues) */
    if (tpe_kind(e, i) == TP_CALL_GEMV) return snprintf(why, n, "tprof's decode GEMV chosen for it"), 0;
    if (tpe_kind(e, i) == TP_CALL_GEMM_SM90_GELU || tpe_plan_fused(e, i, TP_OP_GELU) >= 0)
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
    const int ea = tpe_plan_fused(e, i, TP_OP_ADD);
    d->residual = ea >= 0;
    /* every operand in the one type, stored plainly, the output and residual in slack-padded activation buffers */
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

/* The sparse GEMM's output against the dense one's on the same operands (the residual restored between the runs, so
 * an in-place one reads the same values): *rel = |y_sparse - y_dense| / |y_dense| over the op's output (NaN when
 * either is not finite). A search can keep an algorithm that computes other values (compute-sanitizer's runs of
 * cuSPARSELt 0.8.0's f16 kernels, 2026-11-26); the engine then keeps the dense GEMM. */
static tp_status compare_sparse(tp_engine *e, int i, double *rel, tp_error *err) {
    const tp_graph *g = e->g;
    const int ea = tpe_plan_fused(e, i, TP_OP_ADD), yv = ea >= 0 ? g->ops[ea].out : g->ops[i].out;
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
        sparse_set(e, i, run);
        CU_TRY(cudaMemcpyAsync(y, h, bytes, cudaMemcpyHostToDevice, e->stream));
        tp_error le = {0};
        if (run == 1 && tpe_launch_op(e, i, &le)) { /* the sparse launch failed: no values to keep */
            sparse_set(e, i, 0);
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
    sparse_set(e, i, 0); /* the dense GEMM again: the caller times both from here */
    free(h), free(fd), free(fs);
    return st;
fail:
    sparse_set(e, i, 0);
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
    for (int i = 0; i < g->n_ops; i++) on[i] = (unsigned char)sparse_is(e, i);
    for (int r = 0; r < 3 && !st; r++) {
        for (int i = 0; i < g->n_ops; i++) sparse_set(e, i, 0);
        st = pass_ms(e, &t_off[r], err);
        for (int i = 0; i < g->n_ops; i++) sparse_set(e, i, on[i]);
        if (!st) st = pass_ms(e, &t_on[r], err);
    }
    for (int i = 0; i < g->n_ops; i++) sparse_set(e, i, on[i]);
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
        !(e->sparse_dense = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *e->sparse_dense)) ||
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
        tpe_sparse_outputs(e, i, &y, &res);
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
        sparse_set(e, i, 0);
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
            sparse_set(e, i, 0);
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
        sparse_set(e, i, 1);
        tp_error te = {0};
        if (tpe_time_op(e, i, &t_sparse, &te)) { /* its launch failed: said, the dense GEMM kept */
            sparse_set(e, i, 0);
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
        sparse_set(e, i, e->sparse_mode == 2 || t_sparse < 1.03 * t_dense);
        e->sparse_us[2 * i] = t_sparse;
        e->sparse_us[2 * i + 1] = t_dense;
        if (sparse_is(e, i))
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "cuSPARSELt 2:4 sparse ran: %.1f us (dense %.1f us: "
                     "%.50s)", t_sparse, t_dense, dense);
        else
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "2:4 eligible, dense kept: sparse %.0f %% slower "
                     "(%.1f us against %.1f us); dense: %.80s", 100.0 * (t_sparse / t_dense - 1.0), t_sparse, t_dense,
                     dense);
        if (sparse_is(e, i)) {
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
        if (sparse_is(e, i)) { /* the pass's times beside the op's own */
            const size_t l = strlen(e->impl_note[i]);
            snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; the pass %.3f ms with the sparse GEMMs, %.3f "
                     "ms without", on_ms, off_ms);
        }
    for (int i = 0; !st && !kept && i < g->n_ops; i++) {
        if (!sparse_is(e, i)) continue;
        sparse_set(e, i, 0);
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
    if (!sparse_is(e, op) && e->sparse_us[2 * op + 1] <= 0.0) { /* never timed: not eligible, refused or failed */
        if (!e->sparse_why[op][0]) return -1;
        if (why) *why = e->sparse_why[op];
        return -2;
    }
    if (sparse_us) *sparse_us = e->sparse_us[2 * op];
    if (dense_us) *dense_us = e->sparse_us[2 * op + 1];
    if (why && e->sparse_why[op][0]) *why = e->sparse_why[op]; /* timed, then kept dense by the whole pass */
    return sparse_is(e, op);
}

/* ---- fusions into the chosen kernels ------------------------------------------------------------------- */

/* [p, p + n) and [q, q + m) share a byte */
static int overlap(const void *p, size_t n, const void *q, size_t m) {
    const char *a = p, *b = q;
    return a && b && a < b + m && b < a + n;
}

/* tp_program_fuse_built's veto: the joined kernel would read an input (an activation produced outside the two calls)
 * in memory it writes (any output of their ops: a group's outputs are one run) */
static int veto_aliasing(void *user, const tp_program *prog, int h0, int h1) {
    const tp_engine *e = user;
    const tp_graph *g = e->g;
    const int heads[2] = {h0, h1};
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < prog->calls[heads[a]].n_ops; k++) {
            const tp_op *op = &g->ops[prog->calls[heads[a]].ops[k]];
            for (int s = 0; s < op->n_in; s++) {
                const int v = op->in[s], pr = g->values[v].producer;
                if (g->values[v].kind != TP_VAL_ACT || (pr >= 0 && (prog->op_call[pr] == h0 || prog->op_call[pr] == h1)))
                    continue;
                for (int b = 0; b < 2; b++)
                    for (int j = 0; j < prog->calls[heads[b]].n_ops; j++) {
                        const int y = g->ops[prog->calls[heads[b]].ops[j]].out;
                        if (overlap(e->dptr[v], value_bytes(e, v), e->dptr[y], value_bytes(e, y))) return 1;
                    }
            }
        }
    return 0;
}

tp_status tpe_fuse_built(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    if (e->plan->no_fusion) return TP_OK;
    char (*notes)[256] = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *notes);
    if (!notes) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_status st = tp_program_copy(&e->prog, &e->prog_chosen, err);
    if (st) {
        free(notes);
        return st;
    }
    unsigned skip = 0; /* a lab switch (issue 41's measurements): TPROF_FUSE_SKIP=rule[,rule] */
    const char *lab = getenv("TPROF_FUSE_SKIP");
    for (int r = 0; lab && r < tp_fusion_rule_count && r < 32; r++)
        if (strstr(lab, tp_fusion_rules[r].name)) skip |= 1u << r;
    const int joins = tp_program_fuse_built(&e->prog, g, e->plan, e->plan->sm, notes, skip, veto_aliasing, e);
    for (int i = 0; joins > 0 && i < g->n_ops; i++) {
        if (!notes[i][0]) continue;
        const size_t l = strlen(e->impl_note[i]);
        const char *n = notes[i][0] == ';' ? notes[i] + 2 : notes[i]; /* a rule's note, appended with "; " */
        snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "%s%s", l ? "; " : "", n);
    }
    free(notes);
    return joins < 0 ? tp_fail(err, TP_ERR_OOM, "out of host memory") : TP_OK;
}
