/* progress.c: the estimate and the progress lines of a long CPU phase (progress.h). The executor's thread writes
 * atomics (on_op); the watcher thread reads them and prints; stop wakes it through the condition variable. */
#include "bench/progress.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"

struct tp_progress {
    char label[160];
    const tp_graph *g;
    int runs, tty;
    double flop_run, prior, t0; /* FLOP of one run; the rate assumed before any is measured (FLOP/ms); start, ms */
    tp_cpu_watch watch;
    _Atomic double done, busy;  /* FLOP of the ops finished, and the ms they took */
    _Atomic int op, runs_done;  /* the op running (-1: none) and the runs finished */
    _Atomic double op_t0;       /* when that op started, ms */
    _Atomic(const char *) step; /* a heartbeat (g NULL): the step running, since step_t0 (ms) */
    _Atomic double step_t0;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, printed;          /* under mu; printed: the watcher wrote a line */
};

const char *tp_progress_fmt_s(double s, char *buf, size_t n) {
    if (s < 120) snprintf(buf, n, "%.0f s", s);
    else if (s < 7200) snprintf(buf, n, "%.0f min", s / 60);
    else snprintf(buf, n, "%.1f h", s / 3600);
    return buf;
}

static void on_op(void *user, const tp_graph *g, int i, int done) {
    tp_progress *p = user;
    if (!done) {
        atomic_store(&p->op_t0, tp_now_ms());
        atomic_store(&p->op, i);
        return;
    }
    atomic_store(&p->done, atomic_load(&p->done) + g->ops[i].flop); /* one writer: the executor's thread */
    atomic_store(&p->busy, atomic_load(&p->busy) + (tp_now_ms() - atomic_load(&p->op_t0)));
    atomic_store(&p->op, -1);
    if (i == g->n_ops - 1) atomic_fetch_add(&p->runs_done, 1);
}

/* One progress line into buf: the share done (the running op extrapolated at the rate so far), the time left, the
 * run and the op. */
static void progress_line(tp_progress *p, double now, char *buf, size_t n) {
    const tp_graph *g = p->g;
    const double el = (now - p->t0) * 1e-3, done = atomic_load(&p->done);
    if (!g) { /* a heartbeat */
        const char *step = atomic_load(&p->step);
        const double in_step = (now - atomic_load(&p->step_t0)) * 1e-3;
        char a[32], b[32];
        snprintf(buf, n, "%s: %s%s%s", p->label, step ? step : "", step ? ", " : "", tp_progress_fmt_s(el, a, sizeof a));
        if (step && in_step >= 2 && in_step < el - 1)
            tp_append(buf, n, " (this step %s)", tp_progress_fmt_s(in_step, b, sizeof b));
        return;
    }
    const int op = atomic_load(&p->op), rd = atomic_load(&p->runs_done);
    /* FLOP/ms: the ops' own, blended with 5 s of the prior (the first ops may be memory-bound and cheap in FLOP, the
     * one running a large GEMM) */
    const double busy = atomic_load(&p->busy), rate = (done + p->prior * 5000) / (busy + 5000);
    double est = done;
    if (op >= 0 && op < g->n_ops) est += fmin(g->ops[op].flop, (now - atomic_load(&p->op_t0)) * rate);
    const double total = p->flop_run * (rd >= p->runs ? rd + 1 : p->runs); /* time-bound warm-ups run more */
    const double pct = total > 0 ? fmin(99.0, 100.0 * est / total) : 0;
    char a[32], b[32];
    snprintf(buf, n, "%s: %.0f %% after %s, ~%s left", p->label, pct, tp_progress_fmt_s(el, a, sizeof a),
             tp_progress_fmt_s(fmax(total - est, 0) / rate * 1e-3, b, sizeof b));
    if (p->runs > 1) tp_append(buf, n, ", run %d of %d", rd + 1 > p->runs ? p->runs : rd + 1, p->runs);
    if (op >= 0 && op < g->n_ops) {
        tp_append(buf, n, ", op %d of %d (%s)", op + 1, g->n_ops, g->ops[op].layer);
        const double in_op = (now - atomic_load(&p->op_t0)) * 1e-3;
        if (in_op >= 2) tp_append(buf, n, " for %s", tp_progress_fmt_s(in_op, a, sizeof a));
    }
}

static void *watcher(void *arg) {
    tp_progress *p = arg;
    double next = p->t0 + 2000; /* the first line after 2 s */
    int lines = 0;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 250 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        const double now = tp_now_ms();
        if (p->stop || now < next) continue;
        char line[512];
        progress_line(p, now, line, sizeof line);
        if (p->tty) printf("\r\033[K%s", line);
        else printf("%s\n", line);
        fflush(stdout);
        p->printed = 1;
        lines++;
        next = now + (p->tty ? 1000 : lines < 5 ? 2000 : 10000);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* the watcher thread and its condition variable (monotonic clock), p->t0 set; frees p and returns NULL on failure */
static tp_progress *start_watcher(tp_progress *p) {
    pthread_condattr_t ca; /* the wait's clock is tp_now_ms's */
    if (pthread_condattr_init(&ca) != 0) {
        free(p);
        return NULL;
    }
    const int ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&p->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok || pthread_mutex_init(&p->mu, NULL) != 0) {
        if (ok) pthread_cond_destroy(&p->cv);
        free(p);
        return NULL;
    }
    p->t0 = tp_now_ms();
    if (pthread_create(&p->thread, NULL, watcher, p) != 0) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    return p;
}

/* a zeroed progress labelled label, its atomics initialized; NULL out of memory */
static tp_progress *progress_new(const char *label) {
    tp_progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    snprintf(p->label, sizeof p->label, "%s", label);
    p->tty = isatty(STDOUT_FILENO);
    atomic_init(&p->done, 0.0);
    atomic_init(&p->busy, 0.0);
    atomic_init(&p->op, -1);
    atomic_init(&p->runs_done, 0);
    atomic_init(&p->op_t0, 0.0);
    atomic_init(&p->step, NULL);
    atomic_init(&p->step_t0, tp_now_ms());
    return p;
}

tp_progress *tp_progress_beat(const char *label) {
    tp_progress *p = progress_new(label);
    return p ? start_watcher(p) : NULL;
}

void tp_progress_step(tp_progress *p, const char *step) {
    if (!p) return;
    atomic_store(&p->step_t0, tp_now_ms());
    atomic_store(&p->step, step);
}

tp_progress *tp_progress_start(const char *label, const tp_graph *g, int runs, double gflops, const char *from) {
    tp_progress *p = progress_new(label);
    if (!p) return NULL;
    p->g = g;
    p->runs = runs > 0 ? runs : 1;
    p->flop_run = tp_graph_flop(g);
    const int threads = omp_get_max_threads();
    const double prior = TP_PROGRESS_PRIOR_GFLOPS * (threads > 0 ? threads : 1);
    p->prior = (gflops > 0 ? gflops : prior) * 1e6; /* GFLOP/s as FLOP/ms */
    p->watch = (tp_cpu_watch){0, 0, on_op, p};
    const double est = p->flop_run * p->runs / p->prior * 1e-3;
    if (est > TP_PROGRESS_ESTIMATE_S) {
        char a[32];
        printf("%s: %.3g GFLOP%s, about %s at ~%.3g GFLOP/s (%s%s%s)\n", label,
               p->flop_run * 1e-9, p->runs > 1 ? " a run" : "", tp_progress_fmt_s(est, a, sizeof a), p->prior * 1e-6,
               gflops > 0 ? "measured on " : "a conservative guess for this CPU's threads",
               gflops > 0 && from ? from : "", gflops > 0 ? " in this run" : "");
        fflush(stdout);
    }
    return start_watcher(p);
}

tp_cpu_watch *tp_progress_watch(tp_progress *p) { return p ? &p->watch : NULL; }

double tp_progress_stop(tp_progress *p) {
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    if (p->printed && p->tty) { /* the rewritten line gives way to the result */
        printf("\r\033[K");
        fflush(stdout);
    }
    const double ms = atomic_load(&p->busy), done = atomic_load(&p->done);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return ms > 50 && done > 0 ? done / ms * 1e-6 : 0;
}

void tp_phases_add(tp_phases *ph, const char *name, double s) {
    for (int i = 0; i < ph->n; i++)
        if (strcmp(ph->p[i].name, name) == 0) {
            ph->p[i].s += s;
            return;
        }
    if (ph->n == TP_PHASES_MAX) { /* the last slot takes the rest */
        ph->p[TP_PHASES_MAX - 1].s += s;
        snprintf(ph->p[TP_PHASES_MAX - 1].name, sizeof ph->p[0].name, "other");
        return;
    }
    snprintf(ph->p[ph->n].name, sizeof ph->p[0].name, "%s", name);
    ph->p[ph->n++].s = s;
}

void tp_phase_clock_next(void *clock, const char *name) {
    tp_phase_clock *k = clock;
    const double now = tp_now_ms();
    if (k->cur) {
        char full[64];
        snprintf(full, sizeof full, "%s%s", k->prefix ? k->prefix : "", k->cur);
        tp_phases_add(k->ph, full, (now - k->t) * 1e-3);
    }
    k->cur = name, k->t = now;
    tp_progress_step(k->beat, name);
}
