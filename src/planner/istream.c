/* istream.c: a program cut into per-SM instruction queues with counter dependencies (istream.h). C11. */
#include "planner/istream.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"

/* Output features of call `head` when it holds a LINEAR (the width of the values its first LINEAR and that one's
 * siblings write, summed over a sibling group's members), else 0. */
static int64_t cut_width(const tp_program *prog, const tp_graph *g, int head) {
    const int lin = tp_program_first(prog, g, head, TP_OP_LINEAR);
    if (lin < 0) return 0;
    const tp_call *c = &prog->calls[head];
    int64_t w = 0;
    for (int k = 0; k < c->n_ops; k++) {
        const tp_op *op = &g->ops[c->ops[k]];
        if (op->kind == TP_OP_LINEAR && op->in[0] == g->ops[lin].in[0]) w += op->gemm_n; /* the group's members */
    }
    return w > 0 ? w : g->ops[lin].gemm_n;
}

/* The parts of call `head` and the width they share (cut_width's, or the caller's cut). */
static int call_parts(const tp_program *prog, const tp_graph *g, int head, int rows, const tp_istream_cut *cuts,
                      int64_t *width) {
    if (cuts && cuts[head].parts > 0) {
        *width = cuts[head].width;
        return cuts[head].parts;
    }
    *width = cut_width(prog, g, head);
    return *width > 0 ? (int)((*width + rows - 1) / rows) : 1;
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

tp_status tp_istream_build(const tp_program *prog, const tp_graph *g, int n_sms, int rows, const tp_istream_cut *cuts,
                           tp_istream *out, tp_error *err) {
    memset(out, 0, sizeof *out);
    if (n_sms < 1 || rows < 1)
        return tp_fail(err, TP_ERR_ARG, "instruction stream: %d SMs, %d rows an instruction: both must be positive",
                       n_sms, rows);
    for (int h = 0; cuts && h < g->n_ops; h++)
        if (cuts[h].parts > 0 && cuts[h].width < cuts[h].parts)
            return tp_fail(err, TP_ERR_ARG, "instruction stream: call %s cut into %d parts of a width of %lld",
                           g->ops[h].layer, cuts[h].parts, (long long)cuts[h].width);
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
        int64_t w;
        const int parts = call_parts(prog, g, h, rows, cuts, &w);
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
        int64_t w;
        const int parts = call_parts(prog, g, h, rows, cuts, &w);
        const int64_t step = w > 0 ? (w + parts - 1) / parts : 0;
        const int nv = outside_inputs(prog, g, h, vals, g->n_values);
        for (int p = 0; p < parts; p++) {
            tp_instr *in = &out->instrs[out->n_instrs++];
            in->call = h, in->part = p, in->n_parts = parts;
            in->f0 = w > 0 ? ((int64_t)p * step < w ? (int64_t)p * step : w) : 0;
            in->f1 = w > 0 ? (in->f0 + step < w ? in->f0 + step : w) : 0;
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

/* ---- the persistent decode step's joins ------------------------------------------------------------------ */

/* The slots of the calls reading value v (other than slot `self`), up to cap, each once; returns their count. */
static int reader_calls(const tp_program *prog, const tp_graph *g, int v, int self, int *slots, int cap) {
    int n = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const int c = prog->op_call[i];
        if (c == self) continue;
        for (int j = 0; j < g->ops[i].n_in; j++) {
            if (g->ops[i].in[j] != v) continue;
            int dup = 0;
            for (int q = 0; q < n; q++) dup |= slots[q] == c;
            if (!dup) {
                if (n == cap) return cap + 1;
                slots[n++] = c;
            }
        }
    }
    return n;
}

/* The one call reading call `head`'s output, or -1 (none, several, or the value is the graph's output). */
static int sole_reader(const tp_program *prog, const tp_graph *g, int head) {
    const int v = tp_program_out(prog, g, head);
    int r[2];
    if (v < 0 || v == g->output || reader_calls(prog, g, v, head, r, 2) != 1) return -1;
    return r[0];
}

static int alone(const tp_program *prog, const tp_graph *g, int head, tp_op_kind k) {
    return tp_program_is_head(prog, head) && prog->calls[head].n_ops == 1 && g->ops[head].kind == k;
}

static int can_join(const tp_program *prog, int a, int b) {
    return a < b && prog->calls[a].n_ops + prog->calls[b].n_ops <= TP_CALL_MAX_OPS;
}

/* Calls parts[0 .. n) (slot order) may become one call in slot parts[0] only if every value their ops read from
 * another call comes from a slot before parts[0]: else the joined call would read what a later slot writes, and the
 * global order would no longer be topological (pi0's prefix: the keys' RoPE, which the expert also reads, stays in
 * its own later slot, so the queries' RoPE may not carry the attention before it). */
static int order_kept(const tp_program *prog, const tp_graph *g, const int *parts, int n) {
    for (int x = 0; x < n; x++) {
        const tp_call *c = &prog->calls[parts[x]];
        for (int k = 0; k < c->n_ops; k++) {
            const tp_op *op = &g->ops[c->ops[k]];
            for (int j = 0; j < op->n_in; j++) {
                const int pr = op->in[j] >= 0 ? g->values[op->in[j]].producer : -1;
                if (pr < 0) continue;
                const int pc = prog->op_call[pr];
                int inside = 0;
                for (int y = 0; y < n && !inside; y++) inside = pc == parts[y];
                if (!inside && pc >= parts[0]) return 0;
            }
        }
    }
    return 1;
}

int tp_istream_decode_joins(tp_program *prog, const tp_graph *g) {
    int joins = 0;
    /* a residual ADD alone after the LINEAR call it reads (the GEMV's residual epilogue) */
    for (int h = 0; h < g->n_ops; h++) {
        if (!alone(prog, g, h, TP_OP_ADD)) continue;
        for (int j = 0; j < 2; j++) {
            const int p = g->values[g->ops[h].in[j]].producer;
            if (p < 0) continue;
            const int c = prog->op_call[p];
            if (g->ops[p].kind == TP_OP_LINEAR && sole_reader(prog, g, c) == h && can_join(prog, c, h) &&
                tp_program_first(prog, g, c, TP_OP_ADD) < 0 && tp_program_first(prog, g, c, TP_OP_GLU) < 0) {
                tp_program_join(prog, c, h);
                joins++;
                break;
            }
        }
    }
    /* the norms and the last-token copy into the LINEAR call reading them, latest first (norm -> last token -> head) */
    for (int h = g->n_ops - 1; h >= 0; h--) {
        const int pool = alone(prog, g, h, TP_OP_POOL) && g->ops[h].pool_mode == 2 && g->tokens == 1;
        if (!pool && !alone(prog, g, h, TP_OP_RMSNORM)) continue;
        const int c = sole_reader(prog, g, h);
        if (c < 0 || !can_join(prog, h, c) || tp_program_first(prog, g, c, TP_OP_LINEAR) < 0) continue;
        if (tp_program_first(prog, g, c, TP_OP_RMSNORM) >= 0) continue; /* one prologue a call */
        tp_program_join(prog, h, c);
        joins++;
    }
    /* RoPE (queries), RoPE + KV append (keys), the KV attention: one call in the earliest slot; a pipeline's masked
     * attention likewise with the RoPE of its queries and of its own keys (pi0's expert: the prefix's K, V and the
     * valid count are inputs, the rotated k its second operand) */
    for (int a = 0; a < g->n_ops; a++) {
        const int masked = alone(prog, g, a, TP_OP_MASKED_ATTENTION);
        if (!alone(prog, g, a, TP_OP_KV_ATTENTION) && !masked) continue;
        int parts[4], n = 0;
        const int q = g->values[g->ops[a].in[0]].producer, kv = g->values[g->ops[a].in[1]].producer;
        if (q >= 0 && g->ops[q].kind == TP_OP_ROPE && sole_reader(prog, g, prog->op_call[q]) == a &&
            alone(prog, g, prog->op_call[q], TP_OP_ROPE))
            parts[n++] = prog->op_call[q];
        if (masked && kv >= 0 && kv != q && g->ops[kv].kind == TP_OP_ROPE &&
            sole_reader(prog, g, prog->op_call[kv]) == a && alone(prog, g, prog->op_call[kv], TP_OP_ROPE))
            parts[n++] = prog->op_call[kv];
        if (!masked && kv >= 0 && g->ops[kv].kind == TP_OP_KV_APPEND) {
            const int ck = prog->op_call[kv];
            const int k = g->values[g->ops[kv].in[0]].producer;
            if (k >= 0 && g->ops[k].kind == TP_OP_ROPE && prog->op_call[k] != ck &&
                alone(prog, g, prog->op_call[k], TP_OP_ROPE) && sole_reader(prog, g, prog->op_call[k]) == ck)
                parts[n++] = prog->op_call[k];
            parts[n++] = ck;
        }
        if (n == 0) continue;
        parts[n++] = a;
        for (int x = 1; x < n; x++) /* slot order */
            for (int y = x; y > 0 && parts[y] < parts[y - 1]; y--) {
                const int t = parts[y];
                parts[y] = parts[y - 1], parts[y - 1] = t;
            }
        int ops = 0;
        for (int x = 0; x < n; x++) ops += prog->calls[parts[x]].n_ops;
        if (ops > TP_CALL_MAX_OPS || !order_kept(prog, g, parts, n)) continue;
        for (int x = 1; x < n; x++) {
            tp_program_join(prog, parts[0], parts[x]);
            joins++;
        }
    }
    return joins;
}
