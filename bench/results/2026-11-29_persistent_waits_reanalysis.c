/* Re-analysis of a persistent decode step's saved trace (tprof-trace-1, as `tprof profile --decode-kernel persistent --out DIR` writes it) with the dependency waits of tp_trace_add_persistent (commit after 99bc754): the records rebuilt per iteration, then both analyses side by side. Built against build/libtprof_lib.a: gcc -std=c11 -Isrc -Iinclude -c THIS.c; g++ THIS.o @build/CMakeFiles/tprof.dir/linkLibs.rsp -L/usr/local/cuda/targets/x86_64-linux/lib/stubs -L/usr/local/cuda/targets/x86_64-linux/lib. Run: ./a.out DIR/fp16_decode.trace.json [print] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "profile/trace.h"
#include "profile/analysis.h"
int main(int argc, char **argv) {
    tp_trace t, u;
    tp_error e = {0};
    if (tp_trace_load(argv[1], &t, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    tp_trace_init(&u);
    u.n_ops = t.n_ops; u.ops = calloc((size_t)t.n_ops, sizeof *u.ops); memcpy(u.ops, t.ops, sizeof *u.ops * (size_t)t.n_ops);
    u.rates = t.rates; u.event_median_ms = t.event_median_ms; u.batch = t.batch;
    snprintf(u.model, sizeof u.model, "%s", t.model); snprintf(u.precision, sizeof u.precision, "%s", t.precision);
    snprintf(u.gpu, sizeof u.gpu, "%s", t.gpu);
    int *op = malloc(sizeof(int) * t.n), *sm = malloc(sizeof(int) * t.n);
    uint64_t *a = malloc(8 * t.n), *b = malloc(8 * t.n);
    for (int it = 0; it < t.iterations; it++) {
        int n = 0;
        for (int i = 0; i < t.n; i++) if (t.rec[i].iteration == it) { op[n] = t.rec[i].op; sm[n] = (int)t.rec[i].stream; a[n] = t.rec[i].start_ns; b[n] = t.rec[i].end_ns; n++; }
        if (tp_trace_add_persistent(&u, it, op, sm, a, b, n, 132, 288, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    }
    tp_profile_summary s, s0;
    if (tp_profile_analyze(&t, &s0, &e) || tp_profile_analyze(&u, &s, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    printf("event-timed %.4f ms; before: traced %.4f ms (%.1f %%); with waits: traced %.4f ms (%.1f %%), waits %.4f ms, span %.4f ms\n",
           t.event_median_ms, s0.kernel_ns_per_iter * 1e-6, 100 * s0.kernel_ns_per_iter * 1e-6 / t.event_median_ms,
           s.kernel_ns_per_iter * 1e-6, 100 * s.kernel_ns_per_iter * 1e-6 / t.event_median_ms,
           s.cat_ns_per_iter[TP_CAT_OTHER] * 1e-6, s.span_ns_per_iter * 1e-6);
    if (argc > 2) tp_profile_print(&u, &s, 5, stdout);
    return 0;
}
