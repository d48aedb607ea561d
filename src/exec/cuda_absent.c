/* cuda_absent.c: the CUDA engine's functions in a build without CUDA (executor.h), in place of src/exec/cuda/:
 * compiled only when CMake's TPROF_HAVE_CUDA is off. Each refuses as a machine without a GPU would, with
 * TP_ERR_NO_GPU and TP_EXEC_NO_CUDA; the queries on an engine, which no build here ever makes, return their value
 * for none. Parameters go unused by design (CMakeLists.txt: -Wno-unused-parameter for this file alone). */
#include <string.h>

#include "exec/executor.h"

static tp_status absent(tp_error *err) { return tp_fail(err, TP_ERR_NO_GPU, "%s", TP_EXEC_NO_CUDA); }

tp_status tp_gpu_query(int device, tp_gpu_info *info, tp_error *err) {
    memset(info, 0, sizeof *info);
    return absent(err);
}

tp_status tp_engine_build(const tp_graph *g, const tp_params *params, const tp_plan *plan,
                          const tp_engine_options *opt, tp_engine **out, tp_error *err) {
    *out = NULL;
    return absent(err);
}

tp_status tp_engine_build_tp(const tp_graph *const *g, const tp_params *const *params, const tp_plan *const *plan,
                             int n, const tp_engine_options *opt, tp_engine **out, tp_error *err) {
    *out = NULL;
    return absent(err);
}

void tp_engine_destroy(tp_engine *e) {}

int tp_engine_tp_size(const tp_engine *e) { return 0; }

int tp_engine_pdl_edges(const tp_engine *e, int *total) {
    if (total) *total = -1;
    return -1;
}

int tp_engine_graph_kernels(const tp_engine *e) { return -1; }

tp_status tp_engine_persist_report(const tp_engine *e, FILE *f, tp_error *err) {
    return tp_fail(err, TP_ERR_NO_GPU, "no persistent step without CUDA");
}

tp_status tp_engine_persist_records(const tp_engine *e, int *op, int *sm, uint64_t *ready_ns, uint64_t *end_ns,
                                    int *n, tp_error *err) {
    return tp_fail(err, TP_ERR_NO_GPU, "no persistent step without CUDA");
}

int tp_engine_decode_kernel(const tp_engine *e, const char **note, int *instrs) {
    if (note) *note = "";
    if (instrs) *instrs = 0;
    return 0;
}

const char *tp_engine_nccl(const tp_engine *e) { return NULL; }

int tp_engine_sparse_op(const tp_engine *e, int op, double *sparse_us, double *dense_us, const char **why) {
    return -1;
}

int tp_engine_stages(const tp_engine *e, int i, char *name, size_t n, double *bytes) { return 0; }

const char *tp_engine_op_impl(const tp_engine *e, int op) { return NULL; }

int tp_engine_op_call(const tp_engine *e, int op, const char **kernel) {
    if (kernel) *kernel = NULL;
    return -1;
}

double tp_engine_op_bytes(const tp_engine *e, int op) { return 0.0; }

int tp_engine_attention_choice(const tp_engine *e, int op) { return -1; }

int tp_engine_gemm_choice(const tp_engine *e, int op) { return -1; }

tp_status tp_engine_attention_cost(tp_engine *e, double *cosine, double *rel_l2, int *n_out, tp_error *err) {
    *n_out = 0;
    return absent(err);
}

tp_status tp_engine_set_past(tp_engine *e, int64_t past, tp_error *err) { return absent(err); }

tp_status tp_engine_feed_argmax(const tp_engine *from, tp_engine *to, tp_error *err) { return absent(err); }

tp_status tp_engine_decode(tp_engine *e, int steps, double *step_ms, float *tokens, tp_error *err) {
    return absent(err);
}

tp_status tp_engine_capture(tp_engine *e, float *const *taps, tp_error *err) { return absent(err); }

tp_status tp_engine_set_input(tp_engine *e, const float *images, tp_error *err) { return absent(err); }

tp_status tp_engine_forward(tp_engine *e, tp_error *err) { return absent(err); }

tp_status tp_engine_get_output(tp_engine *e, float *out, tp_error *err) { return absent(err); }

tp_status tp_engine_calibrate(tp_engine *e, const int *want, float *amax, tp_error *err) { return absent(err); }

tp_status tp_calibrate_max(const tp_graph *g, const tp_params *params, int device, int sm, const float *images,
                           float *amax, tp_error *err) {
    return absent(err);
}

tp_status tp_calibrate(const tp_graph *g, const tp_params *params, int device, int sm, const float *images,
                       const tp_calib_options *co, float *amax, tp_error *err) {
    return absent(err);
}

tp_status tp_engine_run_n(tp_engine *e, int n, tp_error *err) { return absent(err); }

tp_status tp_engine_benchmark(tp_engine *e, double warmup_ms, int iterations, double duration_ms, double **samples,
                              int *n, double *wall_ms, tp_error *err) {
    *samples = NULL;
    *n = 0;
    return absent(err);
}

double tp_engine_weight_bytes(const tp_engine *e) { return 0.0; }

double tp_engine_activation_bytes(const tp_engine *e) { return 0.0; }

tp_status tp_gpu_reference(const tp_graph *g, const tp_params *params, int sm, const float *input, float *output,
                           tp_error *err) {
    return absent(err);
}

tp_status tp_gpu_reference_taps(const tp_graph *g, const tp_params *params, int sm, const float *input, float *output,
                                float *const *taps, tp_error *err) {
    return absent(err);
}

tp_status tp_gemm_peak(tp_precision prec, int n, int iters, double *tflops, tp_error *err) { return absent(err); }

tp_status tp_copy_rate(size_t bytes, int iters, double *gbps, tp_error *err) { return absent(err); }
