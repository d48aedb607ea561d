/* progress.h: what a long CPU phase of tprof bench says while it runs (issue 40: nothing silent for more than about
 * 2 s). Before it starts, when it would take more than a few seconds, an estimate: its FLOPs over a rate measured by
 * an earlier phase of the run, else a conservative guess for this CPU (TP_PROGRESS_PRIOR_GFLOPS a thread). While it
 * runs, a watcher thread writes a progress line on stdout, with the run's other lines, once 2 s have passed: on a
 * terminal one line rewritten in place every second, else plain lines every 2 s for the first 10 s, then every 10 s
 * (stderr stays the error's one line). The CPU executor moves it op by
 * op (cpu_exec.h tp_cpu_watch.on_op); within an op that runs long, the line extrapolates at the rate measured so
 * far and says which op it is in. A phase whose work is not counted (an engine build, weights synthesized) gets a
 * heartbeat naming its step instead (issue 43); and the run keeps where its time went, phase by phase (tp_phases). */
#ifndef TP_BENCH_PROGRESS_H
#define TP_BENCH_PROGRESS_H

#include "exec/cpu/cpu_exec.h"
#include "ir/graph.h"

/* The guess before anything is measured: the executor's rate per thread on the 2-core machine it was written on
 * was 1-3 GFLOP/s (FP64 accumulation, scalar attention), under load below 1; half of one is the estimate's */
#define TP_PROGRESS_PRIOR_GFLOPS 0.5
#define TP_PROGRESS_ESTIMATE_S 3.0 /* a phase estimated longer says so before it starts */

typedef struct tp_progress tp_progress;

/* Starts a phase of `runs` runs of g (label: "CPU FP32 reference (8 samples)"), printing the estimate on stdout when
 * it exceeds TP_PROGRESS_ESTIMATE_S; gflops: the executor's rate measured so far in this run (0: the prior), `from`
 * where it was measured ("the reference"). NULL when it cannot start (out of memory, no thread): the phase then runs
 * as before, without lines. */
tp_progress *tp_progress_start(const char *label, const tp_graph *g, int runs, double gflops, const char *from);
/* The watch to give the executor (NULL for a NULL p). */
tp_cpu_watch *tp_progress_watch(tp_progress *p);
/* Ends the phase: stops the thread and clears a rewritten line; frees p. Returns the rate the phase ran at, in
 * GFLOP/s (0 when p is NULL or the phase was too short to say). */
double tp_progress_stop(tp_progress *p);

/* A heartbeat for a phase whose work tprof cannot count as it goes (an engine build on the GPU: calibration,
 * quantization, GEMM and attention selection): after 2 s, on the same rhythm, "<label>: <step>, 12 s (this step
 * 5 s)". NULL when it cannot start; tp_progress_stop ends it (its rate is 0). */
tp_progress *tp_progress_beat(const char *label);
/* The step a heartbeat names from now on; step must outlive p (a string literal). NULL p: nothing. */
void tp_progress_step(tp_progress *p, const char *step);

/* Where a run's wall time went, phase by phase (issue 43: "build: weights 2.1 s, quantize 1.4 s, select 3.0 s"):
 * names in the order the phases ran, seconds of host wall clock. */
#define TP_PHASES_MAX 24
typedef struct {
    struct {
        char name[64];
        double s;
    } p[TP_PHASES_MAX];
    int n;
} tp_phases;
/* Appends a phase (a name seen before adds to it; beyond TP_PHASES_MAX phases, the last one takes the rest). */
void tp_phases_add(tp_phases *ph, const char *name, double s);
/* An engine build's steps as they happen (tp_engine_options on_phase = tp_phase_clock_next, phase_user = the
 * clock): each call closes the step before it into ph (its name after prefix, "" for none) and names the new one
 * in the heartbeat line beat (may be NULL); a NULL name closes the last step. */
typedef struct {
    tp_progress *beat;
    tp_phases *ph;
    const char *prefix;
    const char *cur;
    double t;
} tp_phase_clock;
void tp_phase_clock_next(void *clock, const char *name);

/* "45 s", "12 min", "3.4 h" into buf */
const char *tp_progress_fmt_s(double s, char *buf, size_t n);

#endif
