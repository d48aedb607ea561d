/* onnx_check.c: the file's graph against tprof's graph of the imported model (onnx_check.h). */
#include "bench/onnx_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "exec/cpu/cpu_exec.h"
#include "io/onnx_run.h"

tp_status tp_onnx_check(const char *path, const tp_model *m, const tp_params *params, const tp_onnx_import_info *info,
                        uint64_t seed, double *rel, double *ms, tp_error *err) {
    *rel = NAN;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int64_t B = info->fixed_batch > 0 ? info->fixed_batch : 1, per = tp_model_input_numel(m);
    const int64_t n_in = B * per;
    float *x = malloc(sizeof(float) * (size_t)n_in), *y = NULL;
    tp_onnx_model *om = NULL;
    tp_onnx_result r = {0};
    tp_graph g;
    int have_g = 0;
    if (!x) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_rng rng;
    tp_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n_in; i++) x[i] = (float)(2.0 * tp_rng_uniform(&rng) - 1.0);
    tp_status st = tp_onnx_load(path, &om, err);
    if (!st) {
        const tp_onnx_dim dims[] = {{info->batch_dim, B}};
        const float *const inputs[] = {x};
        const tp_onnx_run_args a = {.dims = dims, .n_dims = info->batch_dim[0] ? 1 : 0, .inputs = inputs,
                                    .input_numel = &n_in, .activation_qdq_off = info->n_qdq > 0};
        st = tp_onnx_run(om, &a, 1, &r, err);
    }
    if (!st && !(st = tp_model_build_graph(m, params, B, &g, err))) have_g = 1;
    if (!st) {
        const int64_t n_out = tp_value_numel(&g.values[g.output]);
        if (n_out != r.numel)
            st = tp_fail_path(err, TP_ERR_SHAPE, path, "the file's output has %lld values at batch %lld, tprof's graph "
                              "%lld", (long long)r.numel, (long long)B, (long long)n_out);
        else if (!(y = malloc(sizeof(float) * (size_t)n_out)))
            st = tp_fail(err, TP_ERR_OOM, "out of host memory");
        else {
            for (int64_t i = 0; i < n_out; i++) y[i] = NAN; /* poisoned: an output left unwritten shows */
            st = tp_cpu_run(&g, params, x, y, err);
        }
    }
    if (!st) {
        double d = 0, s = 0;
        for (int64_t i = 0; i < r.numel; i++) {
            const double a = y[i], b = r.data[i];
            d += (a - b) * (a - b), s += b * b;
        }
        *rel = s > 0 ? sqrt(d / s) : (d == 0 ? 0.0 : INFINITY);
        if (isnan(*rel)) *rel = INFINITY;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    if (have_g) tp_graph_free(&g);
    if (r.data) tp_onnx_results_free(&r, 1);
    tp_onnx_free(om);
    free(x);
    free(y);
    return st;
}
