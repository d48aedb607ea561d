#include "profile/profile_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/util.h"
#include "profile/analysis.h"

void tp_cupti_hook(void *session, int op, int category) {
    tp_cupti_set_launch((tp_cupti *)session, op, (tp_category)category);
}

static tp_status make_dir(const char *dir, tp_error *err) {
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return TP_OK;
        return tp_fail(err, TP_ERR_IO, "--out %s: exists and is not a directory", dir);
    }
    if (mkdir(dir, 0755) != 0) return tp_fail(err, TP_ERR_IO, "--out %s: cannot create the directory", dir);
    return TP_OK;
}

/* A persistent decode engine's profiled steps: CUPTI would see one kernel, so each step is run alone and its
 * instructions' own records (tp_engine_persist_records) become the trace's records. */
static tp_status persistent_steps(tp_engine *e, int steps, tp_trace *t, tp_error *err) {
    int n = 0;
    tp_status st = tp_engine_persist_records(e, NULL, NULL, NULL, NULL, &n, err);
    if (st) return st;
    int *op = malloc(sizeof(int) * (size_t)n), *sm = malloc(sizeof(int) * (size_t)n);
    uint64_t *a = malloc(sizeof(uint64_t) * (size_t)n), *b = malloc(sizeof(uint64_t) * (size_t)n);
    if (!op || !sm || !a || !b) st = tp_fail(err, TP_ERR_OOM, "out of host memory");
    int n_sms = 0;
    for (int it = 0; !st && it < steps; it++) {
        if (!(st = tp_engine_run_n(e, 1, err)) && !(st = tp_engine_persist_records(e, op, sm, a, b, &n, err))) {
            for (int k = 0; k < n; k++) n_sms = sm[k] + 1 > n_sms ? sm[k] + 1 : n_sms;
            st = tp_trace_add_persistent(t, it, op, sm, a, b, n, n_sms, 288 /* persist.h: 256 + a producer warp */,
                                         err);
        }
    }
    free(op);
    free(sm);
    free(a);
    free(b);
    return st;
}

tp_status tp_profile_engine(tp_cupti *c, tp_engine *e, const tp_graph *g, const tp_plan *p,
                            const tp_profile_request *req, tp_trace *t, tp_profile_summary *s, json_t **summary,
                            tp_error *err) {
    tp_trace_init(t);
    memset(s, 0, sizeof *s);
    *summary = NULL;
    tp_status st = TP_OK;
    const char *prec = tp_precision_name(p->requested);
    t->ops = calloc((size_t)g->n_ops, sizeof *t->ops);
    if (!t->ops) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    t->n_ops = g->n_ops;
    for (int i = 0; i < g->n_ops; i++) {
        snprintf(t->ops[i].layer, sizeof t->ops[i].layer, "%s", g->ops[i].layer);
        t->ops[i].kind = g->ops[i].kind;
        t->ops[i].prec = p->op_prec[i];
        snprintf(t->ops[i].how, sizeof t->ops[i].how, "%s", p->op_note[i]);
        t->ops[i].matmul_flop = g->ops[i].matmul_flop;
        t->ops[i].bytes = tp_engine_op_bytes(e, i);
        const char *kernel = NULL; /* its call in the engine's program: the kernel -> call -> layers attribution */
        t->ops[i].call = tp_engine_op_call(e, i, &kernel);
        snprintf(t->ops[i].kernel, sizeof t->ops[i].kernel, "%s", kernel ? kernel : "");
    }
    if (req->rates) t->rates = *req->rates;
    snprintf(t->precision, sizeof t->precision, "%s", prec);
    snprintf(t->model, sizeof t->model, "%s", req->model);
    snprintf(t->gpu, sizeof t->gpu, "%s", req->gpu);
    t->batch = req->batch;
    t->event_median_ms = req->event_median_ms;

    if (tp_engine_decode_kernel(e, NULL, NULL)) {
        if ((st = persistent_steps(e, req->iterations, t, err))) goto done;
    } else {
        if ((st = tp_cupti_start(c, err))) goto done;
        tp_status run = tp_engine_run_n(e, req->iterations, err);
        st = tp_cupti_stop(c, t, err);
        if (run) st = run;
        if (st) goto done;
    }
    if ((st = tp_profile_analyze(t, s, err))) goto done;
    printf("\n");
    tp_profile_print(t, s, req->top_n, stdout);
    *summary = tp_profile_summary_json(t, s);
    /* what was traced, for readers of the file alone (tprof diff): absent for a forward pass, "decode" for steps */
    if (*summary && req->tag) json_object_set_new(*summary, "pass", json_string(req->tag));
    if (req->out_dir) {
        char path[1024], name[64];
        snprintf(name, sizeof name, "%s%s%s", prec, req->tag ? "_" : "", req->tag ? req->tag : "");
        if ((st = make_dir(req->out_dir, err))) goto done;
        snprintf(path, sizeof path, "%s/%s.trace.json", req->out_dir, name);
        if ((st = tp_trace_save(t, path, err))) goto done;
        printf("Trace: %s\n", path);
        snprintf(path, sizeof path, "%s/%s.chrome.json", req->out_dir, name);
        if ((st = tp_chrome_trace_write(t, t->iterations > 1 ? 1 : 0, path, err))) goto done;
        printf("Timeline (Chrome trace, opens in Perfetto / chrome://tracing): %s\n", path);
        snprintf(path, sizeof path, "%s/%s.profile.json", req->out_dir, name);
        if ((st = tp_json_write_file(*summary, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER, "the profile summary",
                                     err)))
            goto done;
        printf("Profile summary: %s\n", path);
    }
done:
    if (st && *summary) {
        json_decref(*summary);
        *summary = NULL;
    }
    return st;
}
