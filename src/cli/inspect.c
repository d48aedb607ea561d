/* inspect.c: `tprof inspect FILE.onnx`: what tprof reads in an ONNX file (io/onnx.h), checked as the reader checks
 * it: the IR version and opsets, the fed inputs and the outputs with their shapes (symbolic dimensions by name),
 * the initializers' count and bytes per element type and where external ones live, and the nodes by op type. The
 * first step of issue 24 (ONNX import): a user sees whether tprof reads the file before any mapping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/inspect.h"
#include "io/onnx.h"

static void shape(const tp_onnx_value *v) {
    printf("  %-24s %-10s ", v->name, v->elem_type ? tp_onnx_elem_name(v->elem_type) : "(no type)");
    if (v->ndim < 0) {
        printf("(no shape)\n");
        return;
    }
    printf("(");
    for (int d = 0; d < v->ndim; d++) {
        if (v->dim_param[d] && *v->dim_param[d]) printf("%s%s", d ? ", " : "", v->dim_param[d]);
        else if (v->dims[d] >= 0) printf("%s%lld", d ? ", " : "", (long long)v->dims[d]);
        else printf("%s?", d ? ", " : "");
    }
    printf(")\n");
}

typedef struct {
    const char *key;
    long long n;
    double bytes;
} tally;

/* adds one to key's row (rows kept in first-seen order; cap rows) */
static void count(tally *t, int *n, int cap, const char *key, double bytes) {
    for (int i = 0; i < *n; i++)
        if (strcmp(t[i].key, key) == 0) {
            t[i].n++, t[i].bytes += bytes;
            return;
        }
    if (*n < cap) t[*n].key = key, t[*n].n = 1, t[*n].bytes = bytes, (*n)++;
}

static int by_count(const void *a, const void *b) {
    const tally *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? 1 : -1;
    return strcmp(x->key, y->key);
}

int tp_cli_inspect(int argc, char **argv, int (*exit_code)(tp_status)) {
    for (int i = 0; i < argc; i++) /* no options: "-x" is a mistyped one, not a file (./-x names that file) */
        if (argv[i][0] == '-') {
            fprintf(stderr, "tprof: inspect: unknown option '%s' (tprof inspect FILE.onnx)\n", argv[i]);
            return 2;
        }
    if (argc != 1) {
        fprintf(stderr, "tprof: inspect: expected one ONNX file (tprof inspect FILE.onnx)%s%s%s\n",
                argc > 1 ? "; got '" : "", argc > 1 ? argv[1] : "", argc > 1 ? "' as well" : "");
        return 2;
    }
    tp_onnx_model *m = NULL;
    tp_error e = {0};
    const tp_status st = tp_onnx_load(argv[0], &m, &e);
    if (st) {
        fprintf(stderr, "tprof: error: %s\n", e.msg);
        return exit_code(st);
    }
    printf("ONNX model %s: IR version %lld, ai.onnx opset %lld", argv[0], (long long)tp_onnx_ir_version(m),
           (long long)tp_onnx_opset(m, ""));
    if (*tp_onnx_producer(m)) printf(", made by %s", tp_onnx_producer(m));
    printf("\nInputs (%d):\n", tp_onnx_n_inputs(m));
    for (int i = 0; i < tp_onnx_n_inputs(m); i++) shape(tp_onnx_input(m, i));
    printf("Outputs (%d):\n", tp_onnx_n_outputs(m));
    for (int i = 0; i < tp_onnx_n_outputs(m); i++) shape(tp_onnx_output(m, i));
    enum { CAP = 64 };
    tally types[CAP], ops[256];
    int nt = 0, no = 0, next = 0;
    double total = 0, ext = 0;
    for (int i = 0; i < tp_onnx_n_initializers(m); i++) {
        const tp_onnx_tensor *t = tp_onnx_initializer(m, i);
        count(types, &nt, CAP, tp_onnx_elem_name(t->elem_type), (double)t->nbytes);
        total += (double)t->nbytes;
        if (t->external) next++, ext += (double)t->nbytes;
    }
    printf("Initializers: %d, %.0f bytes (%.1f MB)", tp_onnx_n_initializers(m), total, total * 1e-6);
    if (next) printf(", %d of them external (%.1f MB)", next, ext * 1e-6);
    printf("\n");
    for (int i = 0; i < nt; i++) printf("  %-12s %6lld  %12.0f bytes\n", types[i].key, types[i].n, types[i].bytes);
    for (int i = 0; i < tp_onnx_n_nodes(m); i++) {
        const tp_onnx_node *n = tp_onnx_node_at(m, i);
        count(ops, &no, 256, n->op_type, 0);
    }
    qsort(ops, (size_t)no, sizeof ops[0], by_count);
    printf("Nodes: %d, by op type:", tp_onnx_n_nodes(m));
    for (int i = 0; i < no; i++) printf("%s %s %lld", i ? "," : "", ops[i].key, ops[i].n);
    printf("\n");
    tp_onnx_free(m);
    return 0;
}
