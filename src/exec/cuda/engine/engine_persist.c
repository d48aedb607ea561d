/* engine_persist.c: a decode engine's step as one persistent kernel (exec/cuda/persistent/persist.h; the design in
 * docs/persistent.md, issue 42). Phase: launch (it allocates through the memory phase; engine_run.c launches the
 * step, cuda_engine.c chooses between it and the CUDA graph of per-call kernels).
 *
 * From the engine's built program: the persistent joins (planner/istream.h tp_istream_decode_joins: five calls a
 * layer), one record per call (tpk_pcall), the calls cut into instructions (a GEMV's weight rows in tiles of at most
 * 64 KB; a GLU GEMV by output columns; the attention into (KV head, row group, key chunk) pieces, about one piece per
 * SM a layer), the per-SM queues and counters of the instruction stream, all uploaded once. Every value a call writes
 * for another call gets its own buffer here, never shared with another value (the graph path reuses buffers by
 * liveness, which a persistent step may not: an SM could overwrite a buffer another SM still reads); a sibling
 * group's outputs are one buffer, member after member. Inputs, weights, the KV cache and the logits stay the
 * engine's, so the argmax and the cache position work as on the graph path.
 *
 * What it takes (else TP_ERR_UNSUPPORTED naming the reason): one token a step for 1 to 8 sequences (T = 1, B <=
 * TPK_PERSIST_MAX_M), no tensor parallelism, FP16 or BF16 activations and weights, or FP8 weights (E4M3, per-tensor
 * scales) with FP16 activations, weight-only or W8A8 (x rounded to E4M3 under its calibrated scale as it is read), a
 * 16-bit KV cache, head dims 64, 128 or 256, the q/k/v and gate/up linears as sibling groups (--gemv-groups), K a
 * multiple of 8 (a linear whose B rows of x do not fit in shared memory streams K in chunks, which an RMSNorm
 * prologue or a GLU epilogue cannot), compute capability 9.0 or later. C11. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "exec/cuda/engine/engine_internal.h"
#include "exec/cuda/persistent/persist.h"
#include "planner/istream.h"

typedef struct tpe_persist tpe_persist;

struct tpe_persist {
    tpk_pprog h;     /* device pointers, host copy */
    tpk_pprog *d;    /* the same on the device */
    int n_instrs, n_calls;
    int *call_head;      /* per call: its program slot (the first op) */
    int *call_op;        /* per call: the op that carries its time in a profile (a GEMV's first linear, the KV
                            attention, the embedding) */
    int *instr_call;     /* per instruction: its call */
    int *instr_sm;       /* per instruction: the block (SM) whose queue holds it */
    unsigned long long *d_rec; /* per-instruction times (persist.h rec), NULL when not recorded */
};

/* what a call needs to become one persistent call record */
typedef struct {
    tp_engine *e;
    const tp_graph *g;
    const tp_program *pr;
    void **pp;       /* per value: its pointer for the persistent step */
    tp_dtype dt;     /* activations and weights */
    int M;           /* sequences of the step (the batch) */
    int tile;        /* bytes of a weight tile (the ring holds TPK_PERSIST_RING / tile of them) */
    int stages;      /* tiles in flight in the ring (TPK_PERSIST_STAGES; lab: TPROF_PERSIST_STAGES) */
    int l2_ahead;    /* tiles prefetched into L2 ahead of the ring (TPK_PERSIST_L2_AHEAD; lab: TPROF_PERSIST_AHEAD) */
    int pad;         /* tile rows padded against bank conflicts (persist.h pitch; lab: TPROF_PERSIST_PAD=1 turns it on) */
    tp_error *err;
} pk_ctx;

static size_t esz(tp_dtype dt) { return tp_dtype_info(dt)->bytes; }

static tp_status unsupported(pk_ctx *x, const char *layer, const char *why) {
    return tp_fail(x->err, TP_ERR_UNSUPPORTED, "persistent decode step: %s%s%s", layer ? layer : "",
                   layer ? ": " : "", why);
}

/* The sibling group led by `lead` laid out for one GEMV (engine_memory.c: the members' weights, and biases, one after
 * the other; 16-bit or per-tensor E4M3 weights, every member weight-only or none): 1, *n_total the rows in all and
 * *n_mem the members, else 0. Unlike the graph path's group GEMV (tpe_group_ready: batch 1, outputs adjacent) any batch: the persistent
 * step lays out the members' outputs itself (persist_buffers). */
static int persist_group_ok(const tp_engine *e, int lead, int64_t *n_total, int *n_mem) {
    const tp_graph *g = e->g;
    if (e->group_lead[lead] != lead || tpe_fp4_group(e, lead) || tpe_b128_group(e, lead)) return 0;
    const char *w = e->dptr[g->ops[lead].in[1]];
    const char *b = g->ops[lead].n_in > 2 ? e->dptr[g->ops[lead].in[2]] : NULL;
    int n = 0;
    *n_total = 0;
    for (int j = lead; j >= 0; j = e->group_next[j], n++) {
        const tp_op *op = &g->ops[j];
        if ((const char *)e->dptr[op->in[1]] != w || (b && (const char *)e->dptr[op->in[2]] != b) ||
            op_weight_only(e, j) != op_weight_only(e, lead))
            return 0;
        w += value_bytes(e, op->in[1]);
        if (b) b += value_bytes(e, op->in[2]);
        *n_total += op->gemm_n;
    }
    *n_mem = n;
    return 1;
}

/* 1 when op h is the only reader of value v */
static int only_reader(const tp_graph *g, int v, int h) {
    for (int i = 0; i < g->n_ops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++)
            if (g->ops[i].in[k] == v && i != h) return 0;
    return v != g->output;
}

/* Batches of several sequences: the graph path runs q/k/v and gate/up as separate linears there (its group GEMV is
 * batch 1), so the persistent step's copy of the program merges every sibling group laid out for one GEMV into one
 * call, and the GLU that reads two of its members into that call (its epilogue), as the graph path's program has
 * them at batch 1. Calls already grouped are left as they are. */
static void persist_merge_groups(const tp_engine *e, tp_program *pr) {
    const tp_graph *g = e->g;
    for (int i = 0; i < g->n_ops; i++) {
        int64_t n;
        int n_mem = 0;
        if (e->group_lead[i] != i || e->group_next[i] < 0 || !tp_program_is_head(pr, i) || pr->calls[i].n_ops != 1 ||
            !persist_group_ok(e, i, &n, &n_mem))
            continue;
        int alone = 1;
        for (int j = e->group_next[i]; j >= 0; j = e->group_next[j])
            alone &= tp_program_is_head(pr, j) && pr->calls[j].n_ops == 1;
        if (!alone) continue;
        for (int j = e->group_next[i]; j >= 0; j = e->group_next[j]) tp_program_merge(pr, i, j);
        /* the GLU joins only a group of exactly its two linears, whose outputs nothing else reads (the graph path's
         * gemv+glu rule): its epilogue writes the GLU alone */
        for (int h = i + 1; n_mem == 2 && h < g->n_ops; h++) {
            const tp_op *o = &g->ops[h];
            if (o->kind != TP_OP_GLU || o->n_in != 2 || !tp_program_is_head(pr, h) || pr->calls[h].n_ops != 1 ||
                pr->calls[i].n_ops + 1 > TP_CALL_MAX_OPS)
                continue;
            const int pa = g->values[o->in[0]].producer, pb = g->values[o->in[1]].producer;
            if (pa >= 0 && pb >= 0 && pa != pb && pr->op_call[pa] == i && pr->op_call[pb] == i &&
                only_reader(g, o->in[0], h) && only_reader(g, o->in[1], h)) {
                tp_program_join(pr, i, h);
                break;
            }
        }
    }
}

/* A GEMV call: [RMSNorm] [last token] LINEAR (or a sibling group) [ADD | GLU]. */
static tp_status gemv_call(pk_ctx *x, int head, tpk_pcall *c, tp_istream_cut *cut) {
    const tp_engine *e = x->e;
    const tp_graph *g = x->g;
    const tp_program *pr = x->pr;
    const tp_call *call = &pr->calls[head];
    const int lin = tp_program_first(pr, g, head, TP_OP_LINEAR), nrm = tp_program_first(pr, g, head, TP_OP_RMSNORM);
    const int pool = tp_program_first(pr, g, head, TP_OP_POOL), add = tp_program_first(pr, g, head, TP_OP_ADD);
    const int glu = tp_program_first(pr, g, head, TP_OP_GLU);
    const tp_op *op = &g->ops[lin];
    int n_lin = 0;
    for (int k = 0; k < call->n_ops; k++) {
        const tp_op_kind kk = g->ops[call->ops[k]].kind;
        n_lin += kk == TP_OP_LINEAR;
        if (kk != TP_OP_LINEAR && kk != TP_OP_RMSNORM && kk != TP_OP_POOL && kk != TP_OP_ADD && kk != TP_OP_GLU)
            return unsupported(x, g->ops[call->ops[k]].layer, "an op of this kind inside a GEMV call");
    }
    int64_t width = op->gemm_n;
    const int wv = op->in[1];
    const tp_dtype wdt = x->e->plan->value_dt[wv];
    /* FP8 weights (E4M3 codes, per-tensor scales; a group's per-row ones) with FP16 activations: weight-only, as
     * tpk_gemv_fp8 runs it, or W8A8 on a 16-bit input rounded to E4M3 as it is read, as tpk_gemv_w8a8 runs it;
     * every other quantized weight is refused */
    const int qx = op_fp8_quant_in(e, lin);
    const int w8 = wdt == TP_E4M3 && x->dt == TP_F16 && (op_weight_only(e, lin) || qx) &&
                   x->e->plan->value_qf[wv] == TP_QF_NONE;
    if ((wdt != x->dt && !w8) || (op->n_in > 2 && x->e->plan->value_dt[op->in[2]] != x->dt))
        return unsupported(x, op->layer, "weights or bias not in the activations' 16-bit type (of the quantized "
                                         "formats only FP8 weights, weight-only or W8A8, with FP16 activations are in "
                                         "the persistent step yet)");
    if (w8 && qx) c->xsc = e->d_scales + SCALE_SLOT * op->in[0];
    int n_mem = 0;
    if (n_lin > 1 && !persist_group_ok(e, lin, &width, &n_mem))
        return unsupported(x, op->layer, "a sibling group whose weights are not one contiguous run of one format");
    if (n_lin > 1 && (add >= 0 || (glu >= 0 && n_lin != 2)))
        return unsupported(x, op->layer, "a sibling group with a residual add, or a GLU over more than its two linears");
    if (n_lin > TPK_PERSIST_MAX_MEM && x->M > 1)
        return unsupported(x, op->layer, "a sibling group of more than 4 linears at a batch above 1");
    if (n_lin > 1 && glu < 0 && x->M > 1) { /* the members' outputs one after the other (persist_buffers), each
                                              (M, N_j); at batch 1 that is (1, N) row-major as it is */
        c->n_mem = n_lin;
        for (int j = lin, k = 0; j >= 0; j = e->group_next[j], k++) c->mem_n[k] = (int)g->ops[j].gemm_n;
    }
    if (w8) {
        c->wfmt = TPK_PW_E4M3;
        if (n_lin > 1) {
            tp_status st = tpe_group_scales(x->e, lin, width, x->err);
            if (st) return st;
            c->wcs = e->group_cs[lin];
        } else {
            c->wts = e->d_scales + SCALE_SLOT * wv;
        }
    }
    const int K = (int)op->gemm_k, M = x->M;
    if (K % 8 || (w8 && K % 16))
        return unsupported(x, op->layer, "K must be a multiple of 8 (E4M3 weights: 16, whole 16-byte rows for the "
                                         "bulk copies)");
    /* x's M rows in shared memory (rows padded by 32 values when there are several), else K in chunks */
    const int xpad = M > 1 ? 32 : 0;
    c->kc = K, c->nk = 1;
    if ((size_t)M * (size_t)(K + xpad) * esz(x->dt) > TPK_PERSIST_XS) {
        if (nrm >= 0 || glu >= 0)
            return unsupported(x, op->layer, "an RMSNorm prologue or a GLU epilogue needs the batch's rows of x in "
                                             "shared memory at once (batch x K too large)");
        c->kc = (int)(TPK_PERSIST_XS / (esz(x->dt) * (size_t)M)) - xpad;
        /* and at least 8 weight rows a 64 KB tile */
        const int kt = (int)(x->tile / (8 * (w8 ? 1 : esz(x->dt))));
        if (c->kc > kt) c->kc = kt;
        c->kc -= c->kc % 64;
        c->nk = (K + c->kc - 1) / c->kc;
    }
    c->xp = c->kc + xpad;
    c->M = M;
    c->kind = TPK_PI_GEMV;
    c->K = K;
    c->w = e->dptr[wv];
    c->bias = op->n_in > 2 ? e->dptr[op->in[2]] : NULL;
    const int xin = nrm >= 0 ? g->ops[nrm].in[0] : pool >= 0 ? g->ops[pool].in[0] : op->in[0];
    if (x->e->plan->value_dt[xin] != x->dt) return unsupported(x, op->layer, "an input not in the activations' type");
    c->x = x->pp[xin];
    if (nrm >= 0) {
        const tp_dtype nd = x->e->plan->value_dt[g->ops[nrm].in[1]];
        if (nd != x->dt && nd != TP_F32) return unsupported(x, g->ops[nrm].layer, "a norm weight of another type");
        c->norm_w = e->dptr[g->ops[nrm].in[1]];
        c->norm_w32 = nd == TP_F32;
        c->eps = g->ops[nrm].eps;
        c->norm_off = g->ops[nrm].norm_offset;
    }
    const size_t row_bytes = (size_t)c->kc * (w8 ? 1 : esz(x->dt));
    /* a tile's rows in shared memory: 64 (E4M3: 32) bytes modulo 128 apart (persist.h pitch), so a tile holds fewer
     * rows than tile / row_bytes when the padding adds up (16-bit K 2048: 15 of 4160 bytes in 64 KB) */
    const int want = w8 ? 32 : 64;
    const size_t pitch = row_bytes + (x->pad ? (size_t)((want - (int)(row_bytes % 128) + 256) % 128) : 0);
    c->pitch = (int)pitch;
    int rows = (int)((size_t)x->tile / pitch);
    if (glu >= 0) {
        c->epi = g->ops[glu].act == TP_ACT_SILU ? TPK_PE_GLU_SILU : TPK_PE_GLU_GELU;
        c->N = (int)g->ops[g->values[g->ops[glu].in[0]].producer].gemm_n;
        for (int j = lin, row = 0; j >= 0; row += (int)g->ops[j].gemm_n, j = e->group_next[j]) {
            if (g->ops[j].out == g->ops[glu].in[0]) c->gate0 = row;
            if (g->ops[j].out == g->ops[glu].in[1]) c->up0 = row;
        }
        c->y = x->pp[g->ops[glu].out];
        rows = rows / 2 < 8 * (1 + w8) ? rows / 2 : 8 * (1 + w8); /* 16 rows of gate and up (E4M3: 32) at most */
        width = c->N;
    } else {
        c->N = (int)width;
        const int yv = add >= 0 ? g->ops[add].out : op->out;
        c->y = x->pp[yv];
        c->y32 = x->e->plan->value_dt[yv] == TP_F32;
        if (!c->y32 && x->e->plan->value_dt[yv] != x->dt) return unsupported(x, op->layer, "an output of another type");
        if (add >= 0) {
            c->epi = TPK_PE_RES;
            const tp_op *a = &g->ops[add];
            c->res = x->pp[a->in[0] == op->out ? a->in[1] : a->in[0]];
        }
    }
    if (rows > 16 * (1 + w8)) rows = 16 * (1 + w8); /* one mma's 16 rows, two for E4M3 (persist.cu gemv_tile) */
    if (rows < 1) return unsupported(x, op->layer, "a weight row larger than a 64 KB stage");
    c->tile_rows = rows;
    /* one instruction a call per SM (its prologue, wait and signal paid once), each a run of tiles */
    const int64_t tiles = (width + rows - 1) / rows;
    cut->parts = (int)(tiles < e->sms ? tiles : e->sms);
    cut->width = width;
    /* a chunked instruction's sums wait in shared memory: its rows x M of them */
    if (c->nk > 1 && (width + cut->parts - 1) / cut->parts * M > TPK_PERSIST_ACC)
        return unsupported(x, op->layer, "too many output rows a SM for the sums of a K cut into chunks");
    return TP_OK;
}

/* An attention call: RoPE (queries), RoPE (keys) + KV append, KV attention; one token of one sequence. */
static tp_status attn_call(pk_ctx *x, int head, tpk_pcall *c, tp_istream_cut *cut, int *arrive) {
    tp_engine *e = x->e;
    const tp_graph *g = x->g;
    const tp_program *pr = x->pr;
    const int at = tp_program_first(pr, g, head, TP_OP_KV_ATTENTION), ap = tp_program_first(pr, g, head, TP_OP_KV_APPEND);
    const tp_op *op = &g->ops[at];
    if (ap < 0) return unsupported(x, op->layer, "an attention whose KV append is not joined to it");
    const int rq = g->values[op->in[0]].producer, rk = g->values[g->ops[ap].in[0]].producer;
    if (rq < 0 || rk < 0 || g->ops[rq].kind != TP_OP_ROPE || g->ops[rk].kind != TP_OP_ROPE ||
        pr->op_call[rq] != head || pr->op_call[rk] != head || g->ops[rq].n_in > 1 || g->ops[rk].n_in > 1)
        return unsupported(x, op->layer, "queries and keys must come through RoPE at the cache position");
    const int cache = op->in[1], D = op->head_dim;
    if (x->e->plan->value_dt[cache] != x->dt) return unsupported(x, op->layer, "an FP8 KV cache");
    if (D != 64 && D != 128 && D != 256) return unsupported(x, op->layer, "a head dim other than 64, 128 or 256");
    const tp_value *cv = &g->values[cache];
    c->kind = TPK_PI_ATTN;
    c->M = x->M;
    c->q = x->pp[g->ops[rq].in[0]];
    c->k = x->pp[g->ops[rk].in[0]];
    c->v = x->pp[g->ops[ap].in[1]];
    c->cache = e->dptr[cache];
    c->out = x->pp[op->out];
    c->inv_freq = e->d_invfreq[rq];
    c->H = op->heads, c->Hkv = op->kv_heads, c->D = D, c->L = (int)cv->shape[2];
    c->G = c->H / c->Hkv;
    c->scale = op->scale;
    int rb = c->G < TPK_PERSIST_RB ? c->G : TPK_PERSIST_RB;
    while (rb * D > TPK_PERSIST_RB * 128) rb /= 2;
    c->rb = rb;
    c->n_rg = (c->G + rb - 1) / rb;
    /* about one piece per SM for the layer: key chunks of a multiple of 64 */
    int pieces = e->sms / (c->M * c->Hkv * c->n_rg);
    if (pieces < 1) pieces = 1;
    int chunk = (c->L + pieces - 1) / pieces;
    chunk = (chunk + 63) / 64 * 64;
    c->chunk = chunk;
    c->n_chunks = (c->L + chunk - 1) / chunk;
    const size_t ws = sizeof(float) * (size_t)c->M * c->Hkv * c->n_rg * c->n_chunks * rb * (size_t)(D + 2);
    tp_status st = tpe_dev_alloc(e, ws, (void **)&c->ws, "the persistent attention's partials", x->err);
    if (st) return st;
    e->act_bytes += (double)ws;
    c->arrive = *arrive;
    *arrive += c->M * c->Hkv * c->n_rg;
    cut->parts = c->M * c->Hkv * c->n_rg * c->n_chunks;
    cut->width = cut->parts;
    return TP_OK;
}

/* Buffers: per value its pointer (the engine's for inputs, weights, state and the output; a fresh one for every value
 * a call writes for another call; a group's outputs contiguous). */
static tp_status persist_buffers(pk_ctx *x) {
    tp_engine *e = x->e;
    const tp_graph *g = x->g;
    const tp_program *pr = x->pr;
    size_t total = 0;
    size_t *off = malloc(sizeof(size_t) * (size_t)g->n_values);
    if (!off) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
    for (int v = 0; v < g->n_values; v++) off[v] = (size_t)-1;
    for (int h = 0; h < g->n_ops; h++) {
        if (!tp_program_is_head(pr, h) || pr->calls[h].n_ops == 0) continue;
        const int lin = tp_program_first(pr, g, h, TP_OP_LINEAR);
        int n_lin = 0;
        for (int k = 0; k < pr->calls[h].n_ops; k++) n_lin += g->ops[pr->calls[h].ops[k]].kind == TP_OP_LINEAR;
        const int grp = lin >= 0 && n_lin > 1;
        total = (total + 255) / 256 * 256;
        if (grp) /* the members' outputs one after the other, in the group's order */
            for (int j = lin; j >= 0; j = e->group_next[j]) {
                off[g->ops[j].out] = total;
                total += value_bytes(e, g->ops[j].out);
            }
        for (int k = 0; k < pr->calls[h].n_ops; k++) {
            const int v = g->ops[pr->calls[h].ops[k]].out;
            if (v < 0 || off[v] != (size_t)-1 || g->values[v].kind != TP_VAL_ACT || v == g->output ||
                tp_program_inner(pr, g, v))
                continue;
            total = (total + 255) / 256 * 256;
            off[v] = total;
            total += value_bytes(e, v);
        }
    }
    char *base = NULL;
    tp_status st = tpe_dev_alloc(e, total, (void **)&base, "the persistent step's activations", x->err);
    if (!st) st = tpe_fill_defined(e, base, total, 77u, x->err);
    if (!st) {
        e->act_bytes += (double)total;
        for (int v = 0; v < g->n_values; v++) x->pp[v] = off[v] != (size_t)-1 ? base + off[v] : e->dptr[v];
    }
    free(off);
    return st;
}

/* The records, the stream and its device copy. */
static tp_status persist_upload(pk_ctx *x, const tpk_pcall *calls, int n_calls, const int *call_of,
                                const tp_istream *s, int n_arrive, tpe_persist *pk) {
    tp_engine *e = x->e;
    const size_t szc = sizeof(tpk_pcall) * (size_t)n_calls, szi = sizeof(tpk_pinstr) * (size_t)s->n_instrs,
                 szw = sizeof(tpk_pwait) * (size_t)(s->n_waits ? s->n_waits : 1),
                 szs = sizeof(int) * (size_t)(s->n_signals ? s->n_signals : 1),
                 szq = sizeof(int) * (size_t)(s->n_sms + 1 + s->n_instrs),
                 szn = sizeof(int) * (size_t)(s->n_counters + n_arrive);
    const size_t o_i = (szc + 255) / 256 * 256, o_w = o_i + (szi + 255) / 256 * 256, o_s = o_w + (szw + 255) / 256 * 256,
                 o_q = o_s + (szs + 255) / 256 * 256, o_n = o_q + (szq + 255) / 256 * 256,
                 o_p = o_n + (szn + 255) / 256 * 256, total = o_p + sizeof(tpk_pprog);
    unsigned char *h = calloc(1, total), *d = NULL;
    if (!h) return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
    tp_status st = tpe_dev_alloc(e, total, (void **)&d, "the persistent step's instructions", x->err);
    if (st) {
        free(h);
        return st;
    }
    memcpy(h, calls, szc);
    tpk_pinstr *in = (tpk_pinstr *)(h + o_i);
    for (int k = 0; k < s->n_instrs; k++) {
        const tp_instr *a = &s->instrs[k];
        const tpk_pcall *c = &calls[call_of[a->call]];
        in[k] = (tpk_pinstr){call_of[a->call], (int)a->f0, (int)a->f1, a->first_wait, a->n_waits, a->first_signal,
                             a->n_signals, 0};
        if (c->kind == TPK_PI_GEMV) {
            in[k].n_tiles = c->nk * (int)((a->f1 - a->f0 + c->tile_rows - 1) / c->tile_rows);
            CHECK(c->nk == 1 || (a->f1 - a->f0) * c->M <= TPK_PERSIST_ACC);
            CHECK((int64_t)c->pitch * c->tile_rows * (c->epi >= TPK_PE_GLU_SILU ? 2 : 1) <= x->tile);
            CHECK(c->tile_rows * (c->epi >= TPK_PE_GLU_SILU ? 2 : 1) <= (c->wfmt == TPK_PW_E4M3 ? 32 : 16));
        }
    }
    tpk_pwait *w = (tpk_pwait *)(h + o_w);
    for (int k = 0; k < s->n_waits; k++) w[k] = (tpk_pwait){s->waits[k].counter, s->waits[k].target};
    memcpy(h + o_s, s->signals, sizeof(int) * (size_t)s->n_signals);
    memcpy(h + o_q, s->queue_start, sizeof(int) * (size_t)(s->n_sms + 1));
    memcpy(h + o_q + sizeof(int) * (size_t)(s->n_sms + 1), s->queue, sizeof(int) * (size_t)s->n_instrs);
    pk->h = (tpk_pprog){(const tpk_pcall *)d, (const tpk_pinstr *)(d + o_i), (const tpk_pwait *)(d + o_w),
                        (const int *)(d + o_s), (const int *)(d + o_q),
                        (const int *)(d + o_q) + s->n_sms + 1, (int *)(d + o_n), s->n_counters + n_arrive,
                        e->d_past, s->n_sms, x->dt == TP_BF16, x->M, x->stages, x->tile, x->l2_ahead, NULL};
    /* the batch-1 kernel streams no K chunks (persist.cu tile_runs): a chunked call runs the batch kernel */
    for (int k = 0; k < n_calls; k++)
        if (calls[k].kind == TPK_PI_GEMV && calls[k].nk > 1) pk->h.max_m = TPK_PERSIST_MAX_M;
    memcpy(h + o_p, &pk->h, sizeof pk->h);
    pk->d = (tpk_pprog *)(d + o_p);
    pk->n_instrs = s->n_instrs;
    pk->n_calls = n_calls;
    pk->call_head = malloc(sizeof(int) * (size_t)n_calls);
    pk->call_op = malloc(sizeof(int) * (size_t)n_calls);
    pk->instr_call = malloc(sizeof(int) * (size_t)s->n_instrs);
    pk->instr_sm = malloc(sizeof(int) * (size_t)s->n_instrs);
    if (!pk->call_head || !pk->call_op || !pk->instr_call || !pk->instr_sm) {
        free(h);
        return tp_fail(x->err, TP_ERR_OOM, "out of host memory");
    }
    for (int h2 = 0; h2 < x->g->n_ops; h2++) {
        if (call_of[h2] < 0) continue;
        const int lin = tp_program_first(x->pr, x->g, h2, TP_OP_LINEAR), at = tp_program_first(x->pr, x->g, h2,
                                                                                               TP_OP_KV_ATTENTION);
        pk->call_head[call_of[h2]] = h2;
        pk->call_op[call_of[h2]] = lin >= 0 ? lin : at >= 0 ? at : h2;
    }
    for (int k = 0; k < s->n_instrs; k++) pk->instr_call[k] = in[k].call;
    for (int b = 0; b < s->n_sms; b++)
        for (int q = s->queue_start[b]; q < s->queue_start[b + 1]; q++) pk->instr_sm[s->queue[q]] = b;
    /* per-instruction times: a profiled engine's (tp_engine_persist_records), or the lab's summary */
    if (e->hook || getenv("TPROF_PERSIST_TRACE")) {
        st = tpe_dev_alloc(e, sizeof(unsigned long long) * 3 * (size_t)s->n_instrs, (void **)&pk->d_rec,
                           "the persistent step's records", x->err);
        if (st) {
            free(h);
            return st;
        }
        pk->h.rec = pk->d_rec;
        memcpy(h + o_p, &pk->h, sizeof pk->h);
    }
    if (cudaMemcpy(d, h, total, cudaMemcpyHostToDevice) != cudaSuccess)
        st = tp_fail(x->err, TP_ERR_CUDA, "uploading the persistent step: %s", cudaGetErrorString(cudaGetLastError()));
    free(h);
    return st;
}

/* The checks that need no program: the shape of the step and the device. */
static tp_status persist_eligible(pk_ctx *x) {
    const tp_engine *e = x->e;
    const tp_graph *g = x->g;
    if (!e->feed_argmax || g->kv_len <= 0) return unsupported(x, NULL, "a decode engine (greedy feedback) only");
    if (g->tp_size > 1 || e->ranks) return unsupported(x, NULL, "not with tensor parallelism yet");
    if (g->batch < 1 || g->batch > TPK_PERSIST_MAX_M || g->tokens != 1)
        return unsupported(x, NULL, "one token a step for 1 to 8 sequences (batch 8 at most) only");
    x->M = (int)g->batch;
    int hidden = -1;
    for (int i = 0; i < g->n_ops && hidden < 0; i++)
        if (g->ops[i].kind == TP_OP_TOKEN_EMBED) hidden = g->ops[i].out;
    if (hidden < 0) return unsupported(x, NULL, "a decoder step starting with its token embedding");
    x->dt = e->plan->value_dt[hidden];
    if (x->dt != TP_F16 && x->dt != TP_BF16) return unsupported(x, NULL, "FP16 or BF16 activations only");
    const int rc = tpk_persist_check(e->device, e->sms);
    if (rc)
        return unsupported(x, NULL, rc == (int)cudaErrorInvalidDeviceFunction ? "compute capability 9.0 or later"
                                                                           : "one 288-thread block with about 225 "
                                                                             "KB of shared memory must fit on every "
                                                                             "SM");
    return TP_OK;
}

/* Lab knobs of the weight pipeline (docs/persistent.md): an integer in [lo, hi] from environment variable `name`, or
 * def when it is unset; anything else is an error naming the variable. */
static tp_status lab_knob(const char *name, int def, int lo, int hi, int *out, tp_error *err) {
    const char *v = getenv(name);
    *out = def;
    if (!v) return TP_OK;
    char *end = NULL;
    const long n = strtol(v, &end, 10);
    if (end == v || *end || n < lo || n > hi)
        return tp_fail(err, TP_ERR_ARG, "%s=%s: expected an integer from %d to %d", name, v, lo, hi);
    *out = (int)n;
    return TP_OK;
}

tp_status tpe_persist_setup(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    tp_program pr = {0};
    tp_istream s = {0};
    pk_ctx x = {e, g, &pr, NULL, TP_F16, 1, TPK_PERSIST_TILE, 0, 0, 1, err};
    tpk_pcall *calls = NULL;
    tp_istream_cut *cuts = NULL;
    int *call_of = NULL, n_calls = 0, arrive = 0;
    tpe_persist *pk = NULL;
    tp_status st = persist_eligible(&x);
    if (!st) st = lab_knob("TPROF_PERSIST_STAGES", TPK_PERSIST_STAGES, 1, TPK_PERSIST_RING / TPK_PERSIST_TILE,
                           &x.stages, err);
    if (!st) st = lab_knob("TPROF_PERSIST_AHEAD", TPK_PERSIST_L2_AHEAD, 0, 64, &x.l2_ahead, err);
    /* padding off by default: on an H200 (bench/results/2026-11-29_h200_issue42_persistent_knobs.log) it cost a tile
     * rows (K 8192: 3 instead of 4) and the step 3.5 % (fp16) and 7 % (fp8-wo); the bank conflicts it removes are not
     * what bounds the step */
    if (!st) st = lab_knob("TPROF_PERSIST_PAD", 0, 0, 1, &x.pad, err);
    if (st) return st;
    if ((st = tp_program_copy(&e->prog, &pr, err))) return st;
    persist_merge_groups(e, &pr);
    tp_istream_decode_joins(&pr, g);
    x.pp = calloc((size_t)g->n_values, sizeof(void *));
    calls = calloc((size_t)g->n_ops, sizeof *calls);
    cuts = calloc((size_t)g->n_ops, sizeof *cuts);
    call_of = malloc(sizeof(int) * (size_t)g->n_ops);
    pk = calloc(1, sizeof *pk);
    if (!x.pp || !calls || !cuts || !call_of || !pk) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        goto done;
    }
    if ((st = persist_buffers(&x))) goto done;
    for (int h = 0; h < g->n_ops && !st; h++) {
        call_of[h] = -1;
        if (!tp_program_is_head(&pr, h) || pr.calls[h].n_ops == 0) continue;
        tpk_pcall *c = &calls[n_calls];
        if (tp_program_first(&pr, g, h, TP_OP_KV_ATTENTION) >= 0) {
            st = attn_call(&x, h, c, &cuts[h], &arrive);
        } else if (tp_program_first(&pr, g, h, TP_OP_LINEAR) >= 0) {
            st = gemv_call(&x, h, c, &cuts[h]);
        } else if (pr.calls[h].n_ops == 1 && g->ops[h].kind == TP_OP_TOKEN_EMBED) {
            const tp_op *op = &g->ops[h];
            if (e->plan->value_dt[op->in[1]] != x.dt) st = unsupported(&x, op->layer, "a table of another type");
            *c = (tpk_pcall){.kind = TPK_PI_EMBED, .M = x.M, .ids = e->dptr[op->in[0]], .table = e->dptr[op->in[1]],
                             .V = (int)g->values[op->in[1]].shape[0], .escale = op->scale, .y = x.pp[op->out],
                             .N = (int)g->values[op->in[1]].shape[1]};
        } else {
            char why[160];
            snprintf(why, sizeof why, "a call of kind %s outside the persistent step's forms (RMSNorm, RoPE or "
                     "GLU alone: --gemv-groups on joins them)", tp_call_kind_get(pr.calls[h].kind)->name);
            st = unsupported(&x, g->ops[h].layer, why);
        }
        call_of[h] = n_calls++;
    }
    if (!st) st = tp_istream_build(&pr, g, e->sms, 16, cuts, &s, err);
    for (int k = 0; !st && k < n_calls; k++) calls[k].arrive += s.n_counters; /* after the stream's counters */
    if (!st) st = persist_upload(&x, calls, n_calls, call_of, &s, arrive, pk);
done:
    if (!st) {
        e->pk = pk;
        pk = NULL;
    }
    free(pk);
    free(x.pp);
    free(calls);
    free(cuts);
    free(call_of);
    tp_istream_free(&s);
    tp_program_free(&pr);
    return st;
}

int tpe_persist_launch(tp_engine *e) { return tpk_persist_launch(e->pk->d, &e->pk->h, e->stream); }

int tpe_persist_instructions(const tp_engine *e) { return e->pk ? e->pk->n_instrs : 0; }

void tpe_persist_free(tp_engine *e) {
    if (e->pk) {
        free(e->pk->call_head);
        free(e->pk->call_op);
        free(e->pk->instr_call);
        free(e->pk->instr_sm);
    }
    free(e->pk); /* its device memory is the engine's (tpe_dev_alloc) */
    e->pk = NULL;
}

tp_status tpe_persist_records(const tp_engine *e, int *op, int *sm, uint64_t *ready_ns, uint64_t *end_ns, int *n,
                              tp_error *err) {
    const tpe_persist *pk = e->pk;
    if (!pk || !pk->d_rec)
        return tp_fail(err, TP_ERR_ARG, "no persistent step records: a persistent decode engine built for profiling");
    *n = pk->n_instrs;
    if (!op) return TP_OK;
    unsigned long long *r = malloc(sizeof *r * 3 * (size_t)pk->n_instrs);
    if (!r) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_status st = TP_OK;
    if (cudaMemcpy(r, pk->d_rec, sizeof *r * 3 * (size_t)pk->n_instrs, cudaMemcpyDeviceToHost) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "reading the persistent step's records: %s",
                     cudaGetErrorString(cudaGetLastError()));
    for (int k = 0; !st && k < pk->n_instrs; k++) {
        op[k] = pk->call_op[pk->instr_call[k]];
        sm[k] = pk->instr_sm[k];
        ready_ns[k] = r[3 * k + 1];
        end_ns[k] = r[3 * k + 2];
    }
    free(r);
    return st;
}

/* The layer name without "model.layers.N." */
static const char *op_role(const char *layer) {
    const char *p = strstr(layer, "layers.");
    if (!p) return layer;
    p = strchr(p + 7, '.');
    return p ? p + 1 : layer;
}

tp_status tpe_persist_report(const tp_engine *e, FILE *f, tp_error *err) {
    const tpe_persist *pk = e->pk;
    if (!pk || !pk->d_rec) return tp_fail(err, TP_ERR_ARG, "no persistent step records (TPROF_PERSIST_TRACE)");
    const int n = pk->n_instrs, nc = pk->n_calls;
    unsigned long long *r = malloc(sizeof *r * 3 * (size_t)n);
    double *lo = malloc(sizeof(double) * (size_t)nc), *hi = malloc(sizeof(double) * (size_t)nc);
    double *wait = calloc((size_t)nc, sizeof(double)), *run = calloc((size_t)nc, sizeof(double));
    int *cnt = calloc((size_t)nc, sizeof(int));
    if (!r || !lo || !hi || !wait || !run || !cnt) {
        free(r), free(lo), free(hi), free(wait), free(run), free(cnt);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    tp_status st = TP_OK;
    if (cudaMemcpy(r, pk->d_rec, sizeof *r * 3 * (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "reading the persistent step's records");
    unsigned long long t0 = ~0ull, t1 = 0;
    for (int k = 0; !st && k < n; k++) {
        t0 = r[3 * k] < t0 ? r[3 * k] : t0;
        t1 = r[3 * k + 2] > t1 ? r[3 * k + 2] : t1;
    }
    for (int c = 0; c < nc; c++) lo[c] = 1e300, hi[c] = 0;
    for (int k = 0; !st && k < n; k++) {
        const int c = pk->instr_call[k];
        const double a = (double)(r[3 * k] - t0) * 1e-3, b = (double)(r[3 * k + 1] - t0) * 1e-3,
                     d = (double)(r[3 * k + 2] - t0) * 1e-3;
        lo[c] = b < lo[c] ? b : lo[c];
        hi[c] = d > hi[c] ? d : hi[c];
        wait[c] += b - a, run[c] += d - b, cnt[c]++;
    }
    /* per role (the layer name without its index): calls, the span from the first instruction's start to the last
     * one's signal summed over calls, the mean wait and run of an instruction */
    if (!st) {
        fprintf(f, "persistent step records: %.1f us from the first instruction to the last signal, %d instructions "
                "(%d x %d KB stages, %d tiles prefetched into L2 ahead)\n", (double)(t1 - t0) * 1e-3, n,
                pk->h.stages, pk->h.tile / 1024, pk->h.l2_ahead);
        fprintf(f, "  %-34s %5s %12s %14s %13s %12s\n", "role", "calls", "instructions", "span us (sum)",
                "wait us (avg)", "run us (avg)");
        char *done = calloc((size_t)nc, 1);
        for (int c = 0; done && c < nc; c++) {
            if (done[c]) continue;
            const char *role = op_role(e->g->ops[pk->call_head[c]].layer);
            int calls = 0, ins = 0;
            double span = 0, w = 0, u = 0;
            for (int d = c; d < nc; d++) {
                if (done[d] || strcmp(op_role(e->g->ops[pk->call_head[d]].layer), role) != 0) continue;
                done[d] = 1, calls++, ins += cnt[d];
                span += hi[d] - lo[d], w += wait[d], u += run[d];
            }
            fprintf(f, "  %-34s %5d %12d %14.1f %13.2f %12.2f\n", role, calls, ins, span, w / ins, u / ins);
        }
        free(done);
    }
    free(r), free(lo), free(hi), free(wait), free(run), free(cnt);
    return st;
}
