/* istream.h: a program (program.h) cut into instructions for a persistent kernel, one queue per SM, dependencies
 * through counters (docs/persistent.md, issue 42 step 1). C11.
 *
 * Cutting. A call whose first op is a LINEAR (a GEMV, a sibling group, a GEMM with its epilogue) is cut along its
 * output features into parts of at most `rows` features each (the weight rows one instruction streams); every
 * other call is one instruction. Instructions are numbered in one global order: the program's calls in slot
 * order, a call's parts in feature order. That order is topological: a call reads only values written by calls
 * in earlier slots.
 *
 * Counters. Each value a call writes for readers outside it (tp_program_inner false) has a counter, to which every
 * instruction of the call adds one when its stores are visible; its target is the call's instruction count (a
 * reader of the value waits for all of it: parts of a value are not tracked apart yet, a refinement for later).
 * An instruction waits, before it reads, for the counters of the values its call reads from other calls (graph
 * inputs and parameters need no wait).
 *
 * Queues. Instruction k of the global order goes to SM k mod n_sms (round-robin), and each queue keeps global
 * order. With one resident block per SM this cannot deadlock: the first unfinished instruction in global order
 * waits only for instructions before it, which have all finished, so some SM can always proceed.
 *
 * Buffers. The stream assumes every value has its own memory: a graph-path engine reuses a dead value's buffer
 * for a later one (tp_plan_buffers), which a persistent kernel could overwrite while an earlier instruction still
 * reads it. The executor that runs a stream gives its values distinct buffers (decode activations are small). */
#ifndef TP_ISTREAM_H
#define TP_ISTREAM_H

#include <stdint.h>

#include "core/util.h"
#include "ir/graph.h"
#include "planner/program.h"

typedef struct {
    int call;            /* the program slot whose work it is */
    int part, n_parts;   /* its share of the call */
    int64_t f0, f1;      /* output features [f0, f1) of the call's LINEAR (0 and the full width otherwise) */
    int first_wait, n_waits; /* tp_istream.waits[first_wait .. first_wait + n_waits) */
    int first_signal, n_signals; /* tp_istream.signals[...]: the counters it adds one to when done */
} tp_instr;

typedef struct {
    int counter, target; /* wait until counters[counter] >= target (this step's share) */
} tp_wait;

/* A caller's cut of one call (per program slot; parts 0 keeps the default above): `parts` instructions over
 * `width` units, part p covering [p ceil(width / parts), ...) clipped to width. The unit is the executor's: output
 * features of a LINEAR call, output columns of a GEMV with a GLU epilogue (each part then streams the gate and the up
 * rows of its columns), or simply the part's index (width = parts: an attention call's (KV head, key range) pieces). */
typedef struct {
    int parts;
    int64_t width;
} tp_istream_cut;

typedef struct {
    int n_sms, rows;
    int n_instrs, n_waits, n_signals, n_counters;
    tp_instr *instrs; /* in the global order */
    tp_wait *waits;
    int *signals;
    int *counter_value;  /* the value each counter tracks */
    int *counter_target; /* instructions that add to it */
    int *value_counter;  /* per graph value: its counter, or -1 */
    int *queue_start;    /* n_sms + 1 offsets into queue */
    int *queue;          /* SM s runs queue[queue_start[s] .. queue_start[s + 1]) in order (instruction indices) */
} tp_istream;

/* The stream of program prog over graph g for n_sms SMs (>= 1), LINEAR calls cut into parts of at most rows
 * output features (>= 1), or as cuts[slot] says where cuts (prog->n_ops entries, may be NULL) has parts > 0.
 * Errors: TP_ERR_ARG (n_sms or rows < 1, a cut of width < parts), TP_ERR_OOM. */
tp_status tp_istream_build(const tp_program *prog, const tp_graph *g, int n_sms, int rows, const tp_istream_cut *cuts,
                           tp_istream *out, tp_error *err);

/* The joins a persistent decode step makes on a built decode program (docs/persistent.md), so that a step is five
 * dependency hops a layer: every RMSNorm and the last-token copy of a one-token step (T = 1) join the one call that
 * reads them when that call holds a LINEAR (the norm becomes the GEMV's prologue, recomputed by every instruction
 * from the row in L2); the queries' RoPE, the keys' RoPE and the KV append join their KV attention (each attention
 * instruction rotates what it reads), and a pipeline's masked attention likewise takes the RoPE of its queries and
 * keys (pi0's expert layer: five calls as a decoder layer's); a residual ADD alone in its call joins the LINEAR call
 * it reads. Returns the number of joins. */
int tp_istream_decode_joins(tp_program *prog, const tp_graph *g);
void tp_istream_free(tp_istream *s);

/* Runs the stream's queues on the host under the interleaving a seeded generator picks (at each step any SM
 * whose next instruction's waits are met), and checks it against the graph itself, not against the waits: when
 * an instruction starts, every instruction of every call that produces a value its call reads from outside has
 * finished; every instruction runs once; no state is left where no SM can proceed (a deadlock). Returns TP_OK or
 * TP_ERR_FORMAT with the first violation named (instruction, call layer, value); TP_ERR_OOM. */
tp_status tp_istream_simulate(const tp_istream *s, const tp_program *prog, const tp_graph *g, uint64_t seed,
                              tp_error *err);

#endif
