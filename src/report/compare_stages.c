/* compare_stages.c: the per-stage section of `tprof compare` (compare_stages.h). */
#include "report/compare_stages.h"

#include <math.h>
#include <string.h>

#include "core/util.h"

int tp_compare_has_stages(const tp_compare_entry *e, int n) {
    for (int i = 0; i < n; i++)
        if ((e[i].prof && e[i].prof->n_stages > 0) || e[i].n_drift > 0) return 1;
    return 0;
}

/* The entry's drift row for stage label s, or NULL */
static const tp_stage_drift *drift_of(const tp_compare_entry *x, const char *s) {
    for (int k = 0; x->drift && k < x->n_drift; k++)
        if (strcmp(x->drift[k].stage, s) == 0) return &x->drift[k];
    return NULL;
}

/* The accuracy drift: one row per stage label (the first entry with drift gives the order), per precision its
 * cosine and relative L2 against the FP32 reference */
static void drift_table(tp_doc *d, const tp_compare_entry *e, int n) {
    int first = -1;
    for (int i = 0; i < n && first < 0; i++)
        if (e[i].n_drift > 0) first = i;
    if (first < 0) return;
    tp_doc_para(d, "Accuracy drift per stage: each stage's outputs (pooled) against the FP32 reference's, so the "
                   "loss on the final output can be traced to the stage that made it.");
    tp_doc_table_open(d, "llrr", "Stage output", "Precision", "Cosine", "Rel. L2", NULL);
    for (int k = 0; k < e[first].n_drift; k++) {
        const char *s = e[first].drift[k].stage;
        for (int i = 0; i < n; i++) {
            const tp_stage_drift *r = drift_of(&e[i], s);
            if (!r) continue;
            tp_doc_tr_open(d);
            tp_doc_td(d, "%s", s);
            tp_doc_td(d, "%s", tp_precision_name(e[i].prec));
            tp_doc_td(d, "%.6f", r->acc.cosine);
            tp_doc_td(d, "%.3e", r->acc.rel_l2);
            tp_doc_tr_close(d);
        }
    }
    tp_doc_table_close(d);
}

/* The entry's row for the stage named s, or NULL. */
static const tp_stage_row *stage_of(const tp_compare_entry *x, const char *s) {
    for (int k = 0; x->prof && k < x->prof->n_stages; k++)
        if (strcmp(x->prof->stages[k].name, s) == 0) return &x->prof->stages[k];
    return NULL;
}

/* The rows: every entry's stage names, in order of first appearance (entries in order); their count. */
enum { MAX_ROWS = 4 * TP_PROFILE_MAX_STAGES };
static int rows_of(const tp_compare_entry *e, int n, const char *rows[MAX_ROWS]) {
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int s = 0; e[i].prof && s < e[i].prof->n_stages; s++) {
            const char *name = e[i].prof->stages[s].name;
            int seen = 0;
            for (int r = 0; r < k && !seen; r++) seen = strcmp(rows[r], name) == 0;
            if (!seen && k < MAX_ROWS) rows[k++] = name;
        }
    return k;
}

void tp_compare_stages_section(tp_doc *d, const tp_compare_entry *e, int n, int baseline) {
    const char *rows[MAX_ROWS];
    const int nr = rows_of(e, n, rows);
    if (!tp_compare_has_stages(e, n)) return;
    tp_doc_heading(d, 2, "stages", "Per stage");
    drift_table(d, e, n);
    if (!nr) return;
    tp_doc_para(d, "Each stage's traced kernel time per pass (GPU busy time of its ops), its share of the pass, its "
                   "roofline floor and how much of the floor it attains, per precision; the speed-up is the "
                   "baseline's time for the stage over this precision's.");
    tp_doc_table_open(d, "llrrrrr", "Stage", "Precision", "Time (ms)", "Share (%)", "Floor (ms)", "Attainment (%)",
                      "Speed-up", NULL);
    for (int k = 0; k < nr; k++) {
        const char *s = rows[k];
        const tp_stage_row *b = stage_of(&e[baseline], s);
        for (int i = 0; i < n; i++) {
            const tp_stage_row *r = stage_of(&e[i], s);
            if (!r) continue;
            tp_doc_tr_open(d);
            tp_doc_td_code(d, s);
            tp_doc_td(d, "%s%s", tp_precision_name(e[i].prec), i == baseline ? " (baseline)" : "");
            tp_doc_td(d, "%.3f", r->ns_per_iter * 1e-6);
            tp_doc_td(d, "%.1f", r->pct);
            if (r->floor.ns > 0) tp_doc_td(d, "%.3f", r->floor.ns * 1e-6);
            else tp_doc_td(d, "-");
            if (r->floor.ns > 0 && r->ns_per_iter > 0) tp_doc_td(d, "%.1f", 100 * r->floor.ns / r->ns_per_iter);
            else tp_doc_td(d, "-");
            if (i != baseline && b && r->ns_per_iter > 0) tp_doc_td(d, "%.2f×", b->ns_per_iter / r->ns_per_iter);
            else tp_doc_td(d, "-");
            tp_doc_tr_close(d);
        }
    }
    tp_doc_table_close(d);
}


json_t *tp_compare_stages_json(const tp_compare_entry *e, int n, int baseline) {
    const char *rows[MAX_ROWS];
    const int nr = rows_of(e, n, rows);
    json_t *a = json_array();
    for (int k = 0; a && k < nr; k++) {
        const char *s = rows[k];
        const tp_stage_row *b = stage_of(&e[baseline], s);
        json_t *ents = json_array();
        for (int i = 0; ents && i < n; i++) {
            const tp_stage_row *r = stage_of(&e[i], s);
            if (!r) continue;
            const int fl = r->floor.ns > 0;
            json_array_append_new(
                ents, json_pack("{s:s,s:o,s:o,s:o,s:o,s:o}", "precision", tp_precision_name(e[i].prec), "ms",
                                tp_json_num(r->ns_per_iter * 1e-6), "pct", tp_json_num(r->pct), "floor_ms",
                                fl ? tp_json_num(r->floor.ns * 1e-6) : json_null(), "attainment_pct",
                                fl && r->ns_per_iter > 0 ? tp_json_num(100 * r->floor.ns / r->ns_per_iter) : json_null(),
                                "speedup_vs_baseline",
                                i != baseline && b && r->ns_per_iter > 0 ? tp_json_num(b->ns_per_iter / r->ns_per_iter)
                                                                         : json_null()));
        }
        json_array_append_new(a, json_pack("{s:s,s:o}", "stage", s, "entries", ents ? ents : json_null()));
    }
    return a;
}

json_t *tp_compare_drift_json(const tp_compare_entry *e, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        for (int k = 0; k < e[i].n_drift; k++) {
            const tp_stage_drift *r = &e[i].drift[k];
            json_array_append_new(a, json_pack("{s:s,s:s,s:o,s:o}", "stage", r->stage, "precision",
                                               tp_precision_name(e[i].prec), "cosine", tp_json_num(r->acc.cosine),
                                               "rel_l2", tp_json_num(r->acc.rel_l2)));
        }
    return a;
}
