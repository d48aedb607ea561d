/* engine_group.c: sibling linears as one GEMV (engine_internal.h, "groups"). A decoder's q/k/v projections read
 * the same input, and so do gate/up: at one token a step (M = 1) each is a GEMV whose fixed cost (launch, ramp-up,
 * tail: ~5 us on an H100, bench/results/2026-11-25_h100_gemv_lab.log) is as large as streaming k_proj's 2 MB. With
 * their weights laid out one after the other ([Wq; Wk; Wv], one allocation, each value pointing into it) and
 * their outputs too ([q | k | v], M = 1 only: for M > 1 the rows would interleave), one GEMV over the summed N
 * computes all of them. The layout costs nothing elsewhere: a prefill engine's GEMMs read the same weights
 * through the members' own pointers. Whether the group's GEMV runs is decided by time when the engine is built,
 * against the members' own choices. Weight-only FP8 members (E4M3 weights, a per-tensor scale each) group the same
 * way: their codes one after the other, and the GEMV given one scale per output row (tpk_gemv_fp8's channel
 * scales: each member's per-tensor scale over its rows), which it applies exactly as the members' own GEMVs apply
 * their tensor scale (one fp32 multiply of the sum). Weight-only NVFP4 members likewise: E2M1 codes one after the
 * other, UE4M3 block scales one after the other, each member's s2 over its rows (tpk_gemv_nvfp4_rows). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cuda/engine/engine_internal.h"
#include "exec/cuda/gemm/gemv.h"
#include "formats/dtype.h"

void tpe_find_groups(tp_engine *e) { tp_plan_sibling_groups(e->g, e->plan, e->group_lead, e->group_next); }

/* The members' weights (which = 1) or biases (which = 2), converted and copied one after the other into one
 * allocation; each member's value points at its part (its per-tensor scale, for E4M3 weights, in wglobal). */
static tp_status upload_part(tp_engine *e, int lead, int which, tp_error *err) {
    const tp_graph *g = e->g;
    size_t total = 0;
    for (int i = lead; i >= 0; i = e->group_next[i]) total += value_bytes(e, g->ops[i].in[which]);
    char *base = NULL;
    void *h = malloc(total ? total : 1);
    if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory grouping %s", g->ops[lead].layer);
    tp_status st = tpe_dev_alloc(e, total, (void **)&base, g->ops[lead].layer, err);
    size_t off = 0;
    for (int i = lead; !st && i >= 0; i = e->group_next[i]) {
        const int v = g->ops[i].in[which];
        float scale;
        tpe_weight_host(e, v, (char *)h + off, &scale);
        e->dptr[v] = base + off;
        off += value_bytes(e, v);
    }
    if (!st && cudaMemcpy(base, h, total, cudaMemcpyHostToDevice) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "uploading %s's group", g->ops[lead].layer);
    int scaled = 0;
    for (int i = lead; i >= 0; i = e->group_next[i]) scaled += e->plan->value_scaled[g->ops[i].in[which]];
    if (!st) e->weight_bytes += (double)total + 4.0 * scaled;
    free(h);
    return st;
}

/* A weight-only NVFP4 group's weights: codes (N K / 2 bytes a member) and block scales (N K / 16) each one after
 * the other in one allocation; each member's value and d_bscale point at its parts, its s2 in wglobal. */
static int fp4_group(const tp_engine *e, int lead) { return e->plan->value_qf[e->g->ops[lead].in[1]] == TP_QF_NVFP4; }

static tp_status upload_fp4_part(tp_engine *e, int lead, tp_error *err) {
    const tp_graph *g = e->g;
    size_t nc = 0, ns = 0;
    for (int i = lead; i >= 0; i = e->group_next[i]) {
        const size_t n = (size_t)tp_value_numel(&g->values[g->ops[i].in[1]]);
        nc += n / 2, ns += n / 16;
    }
    unsigned char *hc = malloc(nc ? nc : 1), *hs = malloc(ns ? ns : 1), *dc = NULL, *ds = NULL;
    tp_status st = hc && hs ? TP_OK : tp_fail(err, TP_ERR_OOM, "out of host memory grouping %s", g->ops[lead].layer);
    size_t oc = 0, os = 0;
    for (int i = lead; !st && i >= 0; i = e->group_next[i]) {
        const int v = g->ops[i].in[1];
        tp_qtensor own;
        const tp_qtensor *q = NULL;
        st = tpe_nvfp4_weight(e, v, &own, &q, err);
        if (!st) {
            memcpy(hc + oc, q->elems, q->elem_bytes);
            memcpy(hs + os, q->scales, q->scale_bytes);
            e->wglobal[v] = q->global_scale;
            oc += q->elem_bytes, os += q->scale_bytes;
        }
        tp_qtensor_free(&own);
    }
    if (!st) st = tpe_dev_alloc(e, nc, (void **)&dc, g->ops[lead].layer, err);
    if (!st) st = tpe_dev_alloc(e, ns, (void **)&ds, g->ops[lead].layer, err);
    if (!st && (cudaMemcpy(dc, hc, nc, cudaMemcpyHostToDevice) != cudaSuccess ||
                cudaMemcpy(ds, hs, ns, cudaMemcpyHostToDevice) != cudaSuccess))
        st = tp_fail(err, TP_ERR_CUDA, "uploading %s's group", g->ops[lead].layer);
    oc = os = 0;
    for (int i = lead; !st && i >= 0; i = e->group_next[i]) {
        const int v = g->ops[i].in[1];
        const size_t n = (size_t)tp_value_numel(&g->values[v]);
        e->dptr[v] = dc + oc;
        e->d_bscale[v] = ds + os;
        oc += n / 2, os += n / 16;
        e->weight_bytes += (double)(n / 2 + n / 16) + 4.0;
    }
    free(hc);
    free(hs);
    return st;
}

tp_status tpe_upload_groups(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    /* the shared engine's layout, as it is (group_ready checks it); none while groups are off */
    if (e->share || e->groups_mode == 0) return TP_OK;
    for (int i = 0; i < g->n_ops; i++) {
        if (e->group_lead[i] != i) continue;
        /* every part must stay 16-byte aligned for the GEMMs that read the members alone (NVFP4: its codes, and
         * its block scales 2-byte aligned for the GEMV's fast path) */
        int aligned = 1;
        for (int j = i; j >= 0; j = e->group_next[j]) {
            const size_t n = (size_t)tp_value_numel(&g->values[g->ops[j].in[1]]);
            const int w_ok = fp4_group(e, i) ? n / 2 % 16 == 0 && n / 16 % 2 == 0
                                             : value_bytes(e, g->ops[j].in[1]) % 16 == 0;
            aligned &= w_ok && (g->ops[j].n_in < 3 || value_bytes(e, g->ops[j].in[2]) % 16 == 0);
        }
        if (!aligned) continue;
        /* a group repeating an earlier one's parameters (pi0's expert, one group per denoise step over the same
         * weights) takes that group's layout through the repeats (upload_params): uploading it again would hold a
         * copy per step (3.6 GB of pi0's bf16 engine, bench/results 2026-11-26) */
        int repeated = 1;
        for (int j = i; j >= 0 && repeated; j = e->group_next[j])
            for (int w = 1; w < g->ops[j].n_in && w <= 2; w++)
                repeated &= e->repeats && e->repeats[g->ops[j].in[w]] >= 0;
        if (repeated) continue;
        tp_status st = fp4_group(e, i) ? upload_fp4_part(e, i, err) : upload_part(e, i, 1, err);
        if (!st && g->ops[i].n_in > 2) st = upload_part(e, i, 2, err);
        if (st) return st;
    }
    return TP_OK;
}

void tpe_group_pins(const tp_engine *e, unsigned char *pinned) {
    const tp_graph *g = e->g;
    memset(pinned, 0, (size_t)g->n_values);
    for (int i = 0; i < g->n_ops; i++)
        if (e->group_lead[i] >= 0 && g->ops[i].gemm_m == 1) pinned[g->ops[i].out] = 1;
}

tp_status tpe_alloc_group_outputs(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    for (int i = 0; i < g->n_ops; i++) {
        if (e->group_lead[i] != i || g->ops[i].gemm_m != 1) continue;
        size_t total = 0;
        for (int j = i; j >= 0; j = e->group_next[j]) total += tpe_act_alloc_bytes(e, g->ops[j].out);
        char *base = NULL;
        tp_status st = tpe_dev_alloc(e, total, (void **)&base, g->ops[i].layer, err);
        if (!st) st = tpe_fill_defined(e, base, total, 0x6e000000u + (unsigned)i, err); /* as every activation */
        if (st) return st;
        e->act_bytes += (double)total;
        size_t off = 0;
        for (int j = i; j >= 0; j = e->group_next[j]) {
            e->dptr[g->ops[j].out] = base + off;
            off += value_bytes(e, g->ops[j].out); /* the outputs one after the other: [y1 | y2 | ...] */
        }
    }
    return TP_OK;
}

/* The group of leader `lead` can run as one GEMV: one token (M = 1), the weights, biases and outputs each one
 * contiguous run in member order. */
static int group_ready(const tp_engine *e, int lead, int64_t *n_total) {
    const tp_graph *g = e->g;
    if (g->ops[lead].gemm_m != 1) return 0;
    const int fp4 = fp4_group(e, lead);
    const char *w = e->dptr[g->ops[lead].in[1]], *y = e->dptr[g->ops[lead].out];
    const char *b = g->ops[lead].n_in > 2 ? e->dptr[g->ops[lead].in[2]] : NULL;
    const char *sc = fp4 ? e->d_bscale[g->ops[lead].in[1]] : NULL;
    *n_total = 0;
    for (int j = lead; j >= 0; j = e->group_next[j]) {
        const tp_op *op = &g->ops[j];
        const size_t n = (size_t)tp_value_numel(&g->values[op->in[1]]);
        if ((const char *)e->dptr[op->in[1]] != w || (const char *)e->dptr[op->out] != y) return 0;
        if (b && (const char *)e->dptr[op->in[2]] != b) return 0;
        if (fp4 && (const char *)e->d_bscale[op->in[1]] != sc) return 0;
        if (fp4) sc += n / 16;
        w += fp4 ? n / 2 : value_bytes(e, op->in[1]);
        y += value_bytes(e, op->out);
        if (b) b += value_bytes(e, op->in[2]);
        *n_total += op->gemm_n;
    }
    return 1;
}

int tpe_launch_group(tp_engine *e, int i) {
    const tp_graph *g = e->g;
    const int lead = e->group_lead[i];
    if (i != lead) return 0; /* computed by the leader's GEMV */
    const tp_op *op = &g->ops[lead];
    int64_t n = 0;
    group_ready(e, lead, &n);
    const void *x = e->dptr[op->in[0]], *w = e->dptr[op->in[1]], *b = op->n_in > 2 ? e->dptr[op->in[2]] : NULL;
    const tp_dtype xdt = e->plan->value_dt[op->in[0]];
    const int fp4 = fp4_group(e, lead);
    if (fp4 || e->plan->value_dt[op->in[1]] == TP_E4M3) { /* its per-row scales exist once the group was chosen */
        const float *rs = e->group_cs[lead];
        if (!rs) return (int)cudaErrorInvalidValue;
        if (op_fp8_quant_in(e, lead)) /* W8A8: the members' shared input rounded to E4M3 under its scale */
            return tpk_gemv_w8a8(x, e->d_scales + SCALE_SLOT * op->in[0], w, rs, NULL, b, NULL, e->dptr[op->out], xdt,
                                 1, (int)n, (int)op->gemm_k, e->stream);
        return fp4 ? tpk_gemv_nvfp4_rows(x, w, e->d_bscale[op->in[1]], rs, b, NULL, e->dptr[op->out], xdt, 1, (int)n,
                                         (int)op->gemm_k, e->stream)
                   : tpk_gemv_fp8(x, w, rs, NULL, b, NULL, e->dptr[op->out], xdt, 1, (int)n, (int)op->gemm_k,
                                  e->stream);
    }
    return tpk_gemv(x, w, b, NULL, e->dptr[op->out], xdt, 1, (int)n, (int)op->gemm_k, e->stream);
}

/* A weight-only FP8 or NVFP4 group's per-row scales (N fp32 on the device): member j's per-tensor scale or s2
 * over its rows. */
static tp_status group_scales(tp_engine *e, int lead, int64_t n, tp_error *err) {
    const tp_graph *g = e->g;
    if ((e->plan->value_dt[g->ops[lead].in[1]] != TP_E4M3 && !fp4_group(e, lead)) || e->group_cs[lead]) return TP_OK;
    float *h = malloc(sizeof(float) * (size_t)n);
    if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    int64_t r = 0;
    for (int j = lead; j >= 0; j = e->group_next[j])
        for (int64_t k = 0; k < g->ops[j].gemm_n; k++) h[r++] = e->wglobal[g->ops[j].in[1]];
    tp_status st = tpe_dev_alloc(e, sizeof(float) * (size_t)n, (void **)&e->group_cs[lead], g->ops[lead].layer, err);
    if (!st && cudaMemcpy(e->group_cs[lead], h, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "uploading %s's group scales", g->ops[lead].layer);
    free(h);
    return st;
}

tp_status tpe_choose_groups(tp_engine *e, tp_status (*time_op)(tp_engine *, int, double *, tp_error *),
                            tp_error *err) {
    const tp_graph *g = e->g;
    for (int i = 0; e->groups_mode > 0 && i < g->n_ops; i++) {
        int64_t n = 0;
        if (e->group_lead[i] != i || !group_ready(e, i, &n)) continue;
        if (e->groups_mode == 1) { /* wherever the layout allows */
            tp_status st = group_scales(e, i, n, err);
            if (st) return st;
            e->group_on[i] = 1;
            snprintf(e->impl_note[i], sizeof e->impl_note[i], "one tprof GEMV for the linears reading %s (N %lld)",
                     g->values[g->ops[i].in[0]].name, (long long)n);
            for (int j = e->group_next[i]; j >= 0; j = e->group_next[j])
                snprintf(e->impl_note[j], sizeof e->impl_note[j], "in the GEMV of %s: no kernel", g->ops[i].layer);
            continue;
        }
        double apart = 0, together = 0;
        int members = 0;
        for (int j = i; j >= 0; j = e->group_next[j]) {
            tp_error ej;
            /* weight-only and W8A8 decode GEMVs have no choice, so the selection did not time them: time them here */
            if (!(e->gemm_us[j] > 0) && (op_weight_only(e, j) || op_fp8_quant_in(e, j)) &&
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
        tp_status st = group_scales(e, i, n, err);
        if (st) return st;
        tp_error eg;
        e->group_on[i] = 1;
        if (time_op(e, i, &together, &eg)) { /* a GEMV that fails to launch is skipped, as a candidate is */
            cudaGetLastError();
            e->group_on[i] = 0;
            continue;
        }
        char why[200];
        snprintf(why, sizeof why, "one tprof GEMV for the %d linears reading %s (N %lld): %.1f us; apart: %.1f us",
                 members, g->values[g->ops[i].in[0]].name, (long long)n, together, apart);
        if (together >= apart) {
            e->group_on[i] = 0;
            const size_t l = strlen(e->impl_note[i]);
            snprintf(e->impl_note[i] + l, sizeof e->impl_note[i] - l, "; %s", why);
            continue;
        }
        snprintf(e->impl_note[i], sizeof e->impl_note[i], "%.180s (kept)", why);
        for (int j = e->group_next[i]; j >= 0; j = e->group_next[j])
            snprintf(e->impl_note[j], sizeof e->impl_note[j], "in the GEMV of %s: no kernel", g->ops[i].layer);
    }
    return TP_OK;
}
