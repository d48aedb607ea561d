/* compare_decode.c: the decode-step section of `tprof compare` (contract in compare_decode.h).
 *
 * Why a section of its own: a decoder's report above it describes the prefill (the forward pass over the prompt,
 * compute-bound), while what a deployment feels per token is the decode step (one token per sequence against the
 * KV cache, memory- and launch-bound), whose kernels, floor and gaps are different. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "report/compare_decode.h"

#define TOP_LAYERS 8 /* rows of each precision's most expensive layers */

int tp_compare_has_decode(const tp_compare_entry *e, int n) {
    for (int i = 0; i < n; i++)
        if (e[i].has_decode) return 1;
    return 0;
}

static int traced(const tp_compare_entry *x) { return x->dec_trace && x->dec_prof && x->dec_prof->iterations > 0; }

/* kernels launched per traced step (memory copies and sets left out) */
static double kernels_per_step(const tp_compare_entry *x) {
    int k = 0;
    for (int i = 0; i < x->dec_trace->n; i++)
        k += x->dec_trace->rec[i].iteration >= 0 && x->dec_trace->rec[i].kind == TP_REC_KERNEL;
    return (double)k / x->dec_prof->iterations;
}

static void launch_text(const tp_compare_entry *x, char *buf, size_t n) {
    if (x->dec_persistent) snprintf(buf, n, "persistent kernel of %d instructions, then argmax and position", x->dec_instrs);
    else if (x->pdl_edges < 0) snprintf(buf, n, "eager");
    else if (x->pdl_edges == 0) snprintf(buf, n, "CUDA graph of %d kernels, no PDL", x->graph_kernels);
    else snprintf(buf, n, "CUDA graph of %d kernels, PDL on %d of %d edges", x->graph_kernels, x->pdl_edges, x->graph_edges);
}

/* the op rows of a traced step, most time first */
static int *layers_by_time(const tp_profile_summary *s) {
    int *ord = malloc(sizeof *ord * (size_t)(s->n_layers ? s->n_layers : 1));
    if (!ord) return NULL;
    for (int i = 0; i < s->n_layers; i++) ord[i] = i;
    for (int i = 1; i < s->n_layers; i++) { /* insertion sort: stable, a few hundred rows */
        const int v = ord[i];
        int j = i;
        while (j > 0 && s->layers[ord[j - 1]].ns_per_iter < s->layers[v].ns_per_iter) ord[j] = ord[j - 1], j--;
        ord[j] = v;
    }
    return ord;
}

static void td_attain(tp_doc *d, double floor_ns, double ns) {
    if (floor_ns > 0 && ns > 0) tp_doc_td(d, "%.1f", 100 * floor_ns / ns);
    else tp_doc_td(d, "-");
}

void tp_compare_kind_table(tp_doc *d, const tp_profile_summary *s, int digits) {
    tp_doc_table_open(d, "lrrrr", "Op kind", "Ops", "Time (ms)", "Floor (ms)", "Attainment (%)", NULL);
    for (int k = 0; k < s->n_by_kind; k++) {
        const tp_roofline_row *R = &s->by_kind[k];
        tp_doc_tr_open(d);
        tp_doc_td(d, "%s", tp_op_kind_name(R->kind));
        tp_doc_td(d, "%d", R->ops);
        tp_doc_td(d, "%.*f", digits, R->ns_per_iter * 1e-6);
        tp_doc_td(d, "%.*f", digits, R->floor.ns * 1e-6);
        td_attain(d, R->floor.ns, R->ns_per_iter);
        tp_doc_tr_close(d);
    }
    tp_doc_table_close(d);
}

static void entry_tables(tp_doc *d, const tp_compare_entry *x, int i) {
    const tp_profile_summary *s = x->dec_prof;
    const char *p = tp_precision_name(x->prec);
    char id[64];
    snprintf(id, sizeof id, "decode-%s-%d", p, i);
    tp_doc_heading(d, 3, id, "%s: a decode step by op kind, and the layers taking the most time", p);
    if (s->has_roofline) tp_compare_kind_table(d, s, 4);
    int *ord = layers_by_time(s);
    if (!ord) return;
    const int rows = s->n_layers < TOP_LAYERS ? s->n_layers : TOP_LAYERS;
    tp_doc_table_open(d, "llrrrr", "Layer", "Op", "Kernels", "Time (ms)", "Floor (ms)", "Attainment (%)", NULL);
    for (int k = 0; k < rows; k++) {
        const tp_layer_row *L = &s->layers[ord[k]];
        tp_doc_tr_open(d);
        tp_doc_td_code(d, L->layer);
        tp_doc_td(d, "%s", tp_op_kind_name(L->kind));
        tp_doc_td(d, "%.0f", L->kernels_per_iter);
        tp_doc_td(d, "%.4f", L->ns_per_iter * 1e-6);
        if (s->has_roofline) tp_doc_td(d, "%.4f", L->floor.ns * 1e-6);
        else tp_doc_td(d, "n/a");
        td_attain(d, s->has_roofline ? L->floor.ns : 0, L->ns_per_iter);
        tp_doc_tr_close(d);
    }
    tp_doc_table_close(d);
    free(ord);
}

void tp_compare_decode_section(tp_doc *d, const tp_compare_entry *e, int n) {
    if (!tp_compare_has_decode(e, n)) return;
    tp_doc_heading(d, 2, "decode", "Decode steps");
    tp_doc_para(d, "The sections above describe the prefill (the prompt's forward pass). A decode step is one token per "
                   "sequence against the KV cache, timed with CUDA events over every generated token; its floor is "
                   "its weights' and KV cache's bytes at the measured copy rate (and its FLOPs at the GEMM rate), "
                   "counted at the generation's middle context. From the traced steps: traced time is GPU busy time "
                   "(the union of the kernels' intervals: with programmatic dependent launch, PDL, a kernel starts "
                   "before its predecessor ends and is charged only for what it adds after it), and the launch-gap "
                   "share is the event-timed step minus that busy time, over the step.");
    tp_doc_table_open(d, "lrrrrrlrrrr", "Precision", "ms / step", "p99 ms", "Tokens/s", "Floor (ms)", "Step / floor",
                      "Launch", "Kernels / step", "Traced (ms)", "Span (ms)", "Launch gaps (%)", NULL);
    for (int i = 0; i < n; i++) {
        const tp_compare_entry *x = &e[i];
        if (!x->has_decode) continue;
        char how[96];
        launch_text(x, how, sizeof how);
        tp_doc_tr_open(d);
        tp_doc_td(d, "%s", tp_precision_name(x->prec));
        tp_doc_td(d, "%.4f", x->step_median_ms);
        tp_doc_td(d, "%.4f", x->step_p99_ms);
        tp_doc_td(d, "%.1f", x->tokens_per_s);
        if (x->step_floor_ms > 0) tp_doc_td(d, "%.4f", x->step_floor_ms);
        else tp_doc_td(d, "n/a");
        tp_doc_td_ratio(d, x->step_median_ms, x->step_floor_ms);
        tp_doc_td(d, "%s", how);
        if (traced(x)) {
            const tp_profile_summary *s = x->dec_prof;
            const double kms = s->kernel_ns_per_iter * 1e-6, ev = x->dec_trace->event_median_ms;
            tp_doc_td(d, "%.0f", kernels_per_step(x));
            tp_doc_td(d, "%.4f", kms);
            tp_doc_td(d, "%.4f", s->span_ns_per_iter * 1e-6);
            if (ev > 0) tp_doc_td(d, "%.1f", 100 * (ev - kms) / ev);
            else tp_doc_td(d, "n/a");
        } else {
            for (int k = 0; k < 4; k++) tp_doc_td(d, "not traced");
        }
        tp_doc_tr_close(d);
    }
    tp_doc_table_close(d);
    for (int i = 0; i < n; i++)
        if (e[i].has_decode && traced(&e[i])) entry_tables(d, &e[i], i);
}


static json_t *entry_json(const tp_compare_entry *x) {
    json_t *j = json_object();
    if (!j) return NULL;
    json_object_set_new(j, "precision", json_string(tp_precision_name(x->prec)));
    json_object_set_new(j, "step_median_ms", tp_json_num(x->step_median_ms));
    json_object_set_new(j, "step_p99_ms", tp_json_num(x->step_p99_ms));
    json_object_set_new(j, "tokens_per_s", tp_json_num(x->tokens_per_s));
    json_object_set_new(j, "floor_ms", x->step_floor_ms > 0 ? tp_json_num(x->step_floor_ms) : json_null());
    json_object_set_new(j, "median_over_floor",
                        x->step_floor_ms > 0 ? tp_json_num(x->step_median_ms / x->step_floor_ms) : json_null());
    json_object_set_new(j, "launch", json_string(x->dec_persistent ? "persistent" : x->pdl_edges < 0 ? "eager" : "graph"));
    if (x->dec_persistent) json_object_set_new(j, "persistent_instructions", json_integer(x->dec_instrs));
    json_object_set_new(j, "pdl_edges", x->pdl_edges < 0 ? json_null() : json_integer(x->pdl_edges));
    json_object_set_new(j, "graph_edges", x->pdl_edges < 0 ? json_null() : json_integer(x->graph_edges));
    json_object_set_new(j, "graph_kernels", x->pdl_edges < 0 ? json_null() : json_integer(x->graph_kernels));
    if (!traced(x)) return j;
    const tp_profile_summary *s = x->dec_prof;
    const double kms = s->kernel_ns_per_iter * 1e-6, ev = x->dec_trace->event_median_ms;
    json_object_set_new(j, "kernels_per_step", tp_json_num(kernels_per_step(x)));
    json_object_set_new(j, "traced_ms", tp_json_num(kms));
    json_object_set_new(j, "span_ms", tp_json_num(s->span_ns_per_iter * 1e-6));
    json_object_set_new(j, "event_ms", ev > 0 ? tp_json_num(ev) : json_null());
    json_object_set_new(j, "launch_gap_ms", ev > 0 ? tp_json_num(ev - kms) : json_null());
    json_object_set_new(j, "launch_gap_pct", ev > 0 ? tp_json_num(100 * (ev - kms) / ev) : json_null());
    json_t *bk = json_array();
    for (int k = 0; s->has_roofline && k < s->n_by_kind; k++) {
        const tp_roofline_row *R = &s->by_kind[k];
        json_array_append_new(bk, json_pack("{s:s,s:i,s:o,s:o}", "kind", tp_op_kind_name(R->kind), "ops", R->ops,
                                            "time_ms", tp_json_num(R->ns_per_iter * 1e-6), "floor_ms",
                                            tp_json_num(R->floor.ns * 1e-6)));
    }
    json_object_set_new(j, "by_kind", bk);
    json_t *tl = json_array();
    int *ord = layers_by_time(s);
    const int rows = s->n_layers < TOP_LAYERS ? s->n_layers : TOP_LAYERS;
    for (int k = 0; ord && k < rows; k++) {
        const tp_layer_row *L = &s->layers[ord[k]];
        const double fl = s->has_roofline ? L->floor.ns : 0;
        json_array_append_new(tl, json_pack("{s:s,s:s,s:o,s:o,s:o}", "layer", L->layer, "kind",
                                            tp_op_kind_name(L->kind), "time_ms", tp_json_num(L->ns_per_iter * 1e-6),
                                            "floor_ms", fl > 0 ? tp_json_num(fl * 1e-6) : json_null(), "attainment_pct",
                                            fl > 0 && L->ns_per_iter > 0 ? tp_json_num(100 * fl / L->ns_per_iter)
                                                                         : json_null()));
    }
    free(ord);
    json_object_set_new(j, "top_layers", tl);
    return j;
}

json_t *tp_compare_decode_json(const tp_compare_entry *e, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (e[i].has_decode) json_array_append_new(a, entry_json(&e[i]));
    return a;
}
