#include "bench/attribution.h"

#include "core/util.h"

#include <math.h>
#include <string.h>

static const char *mode_name(int m) { return m == 2 ? "modular" : m == 3 ? "eager" : "graph"; }

void tp_attribution_print(const tp_attr_step *s, int n, FILE *f) {
    const double total = s[0].median_ms - s[n - 1].median_ms;
    fprintf(f, "\n=== Attribution: %s %s, fusion %s -> %s %s, fusion %s, one change at a time ===\n",
            tp_precision_name(s[0].prec), mode_name(s[0].pipeline_mode), s[0].no_fusion ? "off" : "on",
            tp_precision_name(s[n - 1].prec), mode_name(s[n - 1].pipeline_mode), s[n - 1].no_fusion ? "off" : "on");
    fprintf(f, "| step | configuration | median ms | Hz | saved ms | share of the total |\n"
               "| --- | --- | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "| %s | %s, %s, fusion %s | %.4f | %.1f | ", s[i].step, tp_precision_name(s[i].prec),
                mode_name(s[i].pipeline_mode), s[i].no_fusion ? "off" : "on", s[i].median_ms, 1000.0 / s[i].median_ms);
        if (i == 0) fprintf(f, "- | - |\n");
        else {
            const double saved = s[i - 1].median_ms - s[i].median_ms;
            if (total != 0) fprintf(f, "%.4f | %.1f %% |\n", saved, 100.0 * saved / total);
            else fprintf(f, "%.4f | - |\n", saved);
        }
    }
    fprintf(f, "(total saved %.4f ms: %.4f -> %.4f ms, %.3fx; a change's share depends on the order: interactions "
               "fall to the later step)\n", total, s[0].median_ms, s[n - 1].median_ms,
            s[0].median_ms / s[n - 1].median_ms);
}

json_t *tp_attribution_json(const tp_attr_step *s, int n) {
    const double total = s[0].median_ms - s[n - 1].median_ms;
    json_t *steps = json_array();
    for (int i = 0; steps && i < n; i++) {
        const double saved = i ? s[i - 1].median_ms - s[i].median_ms : NAN;
        json_array_append_new(steps, json_pack("{s:s,s:s,s:s,s:s,s:f,s:o,s:o}", "step", s[i].step, "precision",
                                               tp_precision_name(s[i].prec), "pipeline", mode_name(s[i].pipeline_mode),
                                               "fusion", s[i].no_fusion ? "off" : "on", "median_ms", s[i].median_ms,
                                               "saved_ms", i ? json_real(saved) : json_null(), "share",
                                               i && total != 0 ? json_real(saved / total) : json_null()));
    }
    return steps ? json_pack("{s:f,s:f,s:o}", "total_saved_ms", total, "speedup", s[0].median_ms / s[n - 1].median_ms,
                             "steps", steps)
                 : NULL;
}

tp_status tp_bench_attribution(const tp_bench_options *o, tp_error *err) {
    if (o->n_precs > 2)
        return tp_fail(err, TP_ERR_ARG, "--attribution: %d precisions; give the start's and the end's (default "
                       "bf16,fp8)", o->n_precs);
    if (o->pipeline_mode || o->no_fusion)
        return tp_fail(err, TP_ERR_ARG, "--attribution sets --pipeline and --fusion itself (modular without fusion to "
                       "one graph with fusion): give neither");
    if (o->device == TP_DEVICE_CPU)
        return tp_fail(err, TP_ERR_ARG, "--attribution: its modes (a CUDA graph per stage, one graph) are the GPU "
                       "engine's; this run is on the CPU");
    const tp_precision a = o->n_precs >= 1 ? o->precs[0] : TP_PREC_BF16, b = o->n_precs == 2 ? o->precs[1] : a;
    tp_attr_step s[4] = {{"start", a, 2, 1, 0}, {"precision", b, 2, 1, 0}, {"graph", b, 1, 1, 0}, {"fusion", b, 1, 0, 0}};
    for (int i = 0; i < 4; i++) {
        tp_bench_options ob = *o;
        tp_bench_row row;
        memset(&row, 0, sizeof row);
        ob.n_precs = 1;
        ob.precs[0] = s[i].prec;
        ob.pipeline_mode = s[i].pipeline_mode;
        ob.no_fusion = s[i].no_fusion;
        ob.rows_out = &row;
        ob.json_path = NULL;
        printf("\n--- attribution step %d of 4 (%s): %s, --pipeline %s, --fusion %s\n", i + 1, s[i].step,
               tp_precision_name(s[i].prec), mode_name(s[i].pipeline_mode), s[i].no_fusion ? "off" : "on");
        fflush(stdout);
        tp_status st = tp_bench_run(&ob, err);
        if (st) return st;
        s[i].median_ms = row.median_ms;
    }
    tp_attribution_print(s, 4, stdout);
    if (o->json_path) {
        json_t *j = tp_attribution_json(s, 4);
        if (!j) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        tp_status st = tp_json_write_file(j, o->json_path, JSON_INDENT(1), "the attribution's JSON", err);
        json_decref(j);
        if (st) return st;
        printf("JSON report: %s\n", o->json_path);
    }
    return TP_OK;
}
