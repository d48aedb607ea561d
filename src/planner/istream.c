/* istream.c: a program cut into per-SM instruction queues with counter dependencies (istream.h). C11. */
#include "planner/istream.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"

/* Output features of call `head` when it is cut (its first op a LINEAR: the width of the values it writes, summed
 * over a sibling group's members), else 0. */
static int64_t cut_width(const tp_program *prog, const tp_graph *g, int head) {
    if (g->ops[head].kind != TP_OP_LINEAR) return 0;
    const tp_call *c = &prog->calls[head];
    int64_t w = 0;
    for (int k = 0; k < c->n_ops; k++) {
        const tp_op *op = &g->ops[c->ops[k]];
        if (op->kind == TP_OP_LINEAR && op->in[0] == g->ops[head].in[0]) w += op->gemm_n; /* the group's members */
    }
    return w > 0 ? w : g->ops[head].gemm_n;
}

/* 1 when value v is read by an op outside the call of slot head */
static int read_outside(const tp_program *prog, const tp_graph *g, int head, int v) {
    for (int i = 0; i < g->n_ops; i++) {
        if (prog->op_call[i] == head) continue;
        for (int j = 0; j < g->ops[i].n_in; j++)
            if (g->ops[i].in[j] == v) return 1;
    }
    return 0;
}

/* The values the call of slot head reads from other calls (each once) into vals; returns their count. */
static int outside_inputs(const tp_program *prog, const tp_graph *g, int head, int *vals, int cap) {
    const tp_call *c = &prog->calls[head];
    int n = 0;
    for (int k = 0; k < c->n_ops; k++) {
        const tp_op *op = &g->ops[c->ops[k]];
        for (int j = 0; j < op->n_in; j++) {
            const int v = op->in[j], p = g->values[v].producer;
            if (p < 0 || prog->op_call[p] == head) continue; /* an input, a parameter, or made inside the call */
            int dup = 0;
            for (int q = 0; q < n; q++) dup |= vals[q] == v;
            if (!dup && n < cap) vals[n++] = v;
        }
    }
    return n;
}

tp_status tp_istream_build(const tp_program *prog, const tp_graph *g, int n_sms, int rows, tp_istream *out,
                           tp_error *err) {
    memset(out, 0, sizeof *out);
    if (n_sms < 1 || rows < 1)
        return tp_fail(err, TP_ERR_ARG, "instruction stream: %d SMs, %d rows an instruction: both must be positive",
                       n_sms, rows);
    out->n_sms = n_sms, out->rows = rows;
    /* counters: one per value a call writes for readers outside it */
    out->value_counter = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    out->counter_value = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    out->counter_target = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof(int));
    if (!out->value_counter || !out->counter_value || !out->counter_target) goto oom;
    for (int v = 0; v < g->n_values; v++) out->value_counter[v] = -1;
    /* sizes first: instructions, waits, signals */
    int n_instr = 0, n_wait = 0, n_sig = 0;
    int *vals = malloc(sizeof(int) * (size_t)(g->n_values ? g->n_values : 1));
    if (!vals) goto oom;
    for (int h = 0; h < g->n_ops; h++) {
        if (!tp_program_is_head(prog, h) || prog->calls[h].n_ops == 0) continue;
        const int64_t w = cut_width(prog, g, h);
        const int parts = w > 0 ? (int)((w + rows - 1) / rows) : 1;
        int sig = 0;
        for (int k = 0; k < prog->calls[h].n_ops; k++) {
            const int v = g->ops[prog->calls[h].ops[k]].out;
            if (v >= 0 && read_outside(prog, g, h, v) && out->value_counter[v] < 0) {
                out->counter_value[out->n_counters] = v;
                out->counter_target[out->n_counters] = parts;
                out->value_counter[v] = out->n_counters++;
                sig++;
            }
        }
        n_instr += parts;
        n_sig += parts * sig;
        n_wait += parts * outside_inputs(prog, g, h, vals, g->n_values);
    }
    out->instrs = malloc(sizeof(tp_instr) * (size_t)(n_instr ? n_instr : 1));
    out->waits = malloc(sizeof(tp_wait) * (size_t)(n_wait ? n_wait : 1));
    out->signals = malloc(sizeof(int) * (size_t)(n_sig ? n_sig : 1));
    out->queue_start = calloc((size_t)n_sms + 1, sizeof(int));
    out->queue = malloc(sizeof(int) * (size_t)(n_instr ? n_instr : 1));
    if (!out->instrs || !out->waits || !out->signals || !out->queue_start || !out->queue) {
        free(vals);
        goto oom;
    }
    /* the instructions in global order */
    for (int h = 0; h < g->n_ops; h++) {
        if (!tp_program_is_head(prog, h) || prog->calls[h].n_ops == 0) continue;
        const int64_t w = cut_width(prog, g, h);
        const int parts = w > 0 ? (int)((w + rows - 1) / rows) : 1;
        const int nv = outside_inputs(prog, g, h, vals, g->n_values);
        for (int p = 0; p < parts; p++) {
            tp_instr *in = &out->instrs[out->n_instrs++];
            in->call = h, in->part = p, in->n_parts = parts;
            in->f0 = w > 0 ? (int64_t)p * rows : 0;
            in->f1 = w > 0 ? (in->f0 + rows < w ? in->f0 + rows : w) : 0;
            in->first_wait = out->n_waits, in->n_waits = 0;
            for (int q = 0; q < nv; q++) {
                const int c = out->value_counter[vals[q]];
                CHECK(c >= 0); /* a value read outside its call has a counter */
                out->waits[out->n_waits++] = (tp_wait){c, out->counter_target[c]};
                in->n_waits++;
            }
            in->first_signal = out->n_signals, in->n_signals = 0;
            for (int k = 0; k < prog->calls[h].n_ops; k++) {
                const int v = g->ops[prog->calls[h].ops[k]].out;
                if (v >= 0 && out->value_counter[v] >= 0 && prog->op_call[g->values[v].producer] == h) {
                    out->signals[out->n_signals++] = out->value_counter[v];
                    in->n_signals++;
                }
            }
        }
    }
    free(vals);
    CHECK(out->n_instrs == n_instr && out->n_waits == n_wait && out->n_signals == n_sig);
    /* round-robin queues, each in global order */
    for (int k = 0; k < n_instr; k++) out->queue_start[k % n_sms + 1]++;
    for (int s = 0; s < n_sms; s++) out->queue_start[s + 1] += out->queue_start[s];
    int *fill = calloc((size_t)n_sms, sizeof(int));
    if (!fill) goto oom;
    for (int k = 0; k < n_instr; k++) out->queue[out->queue_start[k % n_sms] + fill[k % n_sms]++] = k;
    free(fill);
    return TP_OK;
oom:
    tp_istream_free(out);
    return tp_fail(err, TP_ERR_OOM, "out of host memory building an instruction stream");
}

void tp_istream_free(tp_istream *s) {
    free(s->instrs);
    free(s->waits);
    free(s->signals);
    free(s->counter_value);
    free(s->counter_target);
    free(s->value_counter);
    free(s->queue_start);
    free(s->queue);
    memset(s, 0, sizeof *s);
}

/* The simulation's state: per counter its count; per SM its position; per call its instructions and those
 * finished; the SMs that can proceed. */
typedef struct {
    int *count, *pos, *done_call, *parts, *ready;
} sim_state;

static int waits_met(const tp_istream *s, const sim_state *st, int k) {
    const tp_instr *in = &s->instrs[k];
    for (int w = 0; w < in->n_waits; w++)
        if (st->count[s->waits[in->first_wait + w].counter] < s->waits[in->first_wait + w].target) return 0;
    return 1;
}

/* The graph's own rule for instruction k: every call producing a value k's call reads from outside is finished. */
static tp_status check_start(const tp_istream *s, const tp_program *prog, const tp_graph *g, const sim_state *st,
                             int k, tp_error *err) {
    const tp_instr *in = &s->instrs[k];
    const tp_call *c = &prog->calls[in->call];
    for (int o = 0; o < c->n_ops; o++) {
        const tp_op *op = &g->ops[c->ops[o]];
        for (int j = 0; j < op->n_in; j++) {
            const int v = op->in[j], p = g->values[v].producer;
            if (p < 0 || prog->op_call[p] == in->call) continue;
            const int pc = prog->op_call[p], parts = st->parts[pc];
            if (st->done_call[pc] < parts)
                return tp_fail(err, TP_ERR_FORMAT, "instruction %d (%s, part %d of %d) starts while %s, which it reads, "
                               "has %d of %d parts done", k, g->ops[in->call].layer, in->part + 1, in->n_parts,
                               g->values[v].name, st->done_call[pc], parts);
        }
    }
    return TP_OK;
}

tp_status tp_istream_simulate(const tp_istream *s, const tp_program *prog, const tp_graph *g, uint64_t seed,
                              tp_error *err) {
    const size_t nops = (size_t)(g->n_ops ? g->n_ops : 1);
    sim_state st = {calloc((size_t)(s->n_counters ? s->n_counters : 1), sizeof(int)),
                    calloc((size_t)s->n_sms, sizeof(int)), calloc(nops, sizeof(int)), calloc(nops, sizeof(int)),
                    malloc(sizeof(int) * (size_t)s->n_sms)};
    tp_status rc = TP_OK;
    if (!st.count || !st.pos || !st.done_call || !st.parts || !st.ready) {
        rc = tp_fail(err, TP_ERR_OOM, "out of host memory simulating an instruction stream");
        goto out;
    }
    for (int k = 0; k < s->n_instrs; k++) st.parts[s->instrs[k].call]++;
    tp_rng r;
    tp_rng_seed(&r, seed);
    for (int done = 0; done < s->n_instrs && !rc; done++) {
        int n_ready = 0;
        for (int sm = 0; sm < s->n_sms; sm++) {
            const int at = s->queue_start[sm] + st.pos[sm];
            if (at < s->queue_start[sm + 1] && waits_met(s, &st, s->queue[at])) st.ready[n_ready++] = sm;
        }
        if (n_ready == 0) {
            rc = tp_fail(err, TP_ERR_FORMAT, "deadlock after %d of %d instructions: no SM's next instruction has its "
                         "inputs", done, s->n_instrs);
            break;
        }
        const int sm = st.ready[tp_rng_u64(&r) % (uint64_t)n_ready];
        const int k = s->queue[s->queue_start[sm] + st.pos[sm]++];
        if ((rc = check_start(s, prog, g, &st, k, err))) break;
        const tp_instr *in = &s->instrs[k];
        for (int q = 0; q < in->n_signals; q++) st.count[s->signals[in->first_signal + q]]++;
        st.done_call[in->call]++;
    }
out:
    free(st.count);
    free(st.pos);
    free(st.done_call);
    free(st.parts);
    free(st.ready);
    return rc;
}
