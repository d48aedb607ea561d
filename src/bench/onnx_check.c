/* onnx_check.c: the file's graph against tprof's graph of the imported model (onnx_check.h). */
#include "bench/onnx_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "exec/cpu/cpu_exec.h"
#include "io/onnx_run.h"

tp_status tp_onnx_check(const tp_onnx_model *om, const char *path, const tp_model *m, const tp_params *params,
                        const tp_onnx_import_info *info,
                        uint64_t seed, double *rel, double *ms, tp_error *err) {
    *rel = NAN;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* a decoder: its graph of one prefill step with every position's logits, as the file computes them */
    const int dec = !strcmp(info->family, "decoder");
    const int64_t B = info->fixed_batch > 0 ? info->fixed_batch : 1;
    const int64_t T = dec ? (info->fixed_seq > 0 ? info->fixed_seq : 7) : 0;
    const int64_t per = dec ? T : tp_model_input_numel(m), n_in = B * per;
    tp_output_desc odesc;
    tp_model_output(m, &odesc);
    float *x = malloc(sizeof(float) * (size_t)n_in), *y = NULL;
    tp_onnx_result r = {0};
    tp_graph g;
    int have_g = 0;
    if (!x) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    tp_rng rng;
    tp_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n_in; i++) /* token ids in [0, vocab), else values in [-1, 1) */
        x[i] = dec ? (float)(int64_t)(tp_rng_uniform(&rng) * (double)odesc.shape[0])
                   : (float)(2.0 * tp_rng_uniform(&rng) - 1.0);
    tp_status st = TP_OK;
    {
        tp_onnx_dim dims[2];
        int nd = 0;
        if (info->batch_dim[0]) dims[nd++] = (tp_onnx_dim){info->batch_dim, B};
        if (dec && info->seq_dim[0]) dims[nd++] = (tp_onnx_dim){info->seq_dim, T};
        const float *const inputs[] = {x};
        const tp_onnx_run_args a = {.dims = dims, .n_dims = nd, .inputs = inputs, .input_numel = &n_in,
                                    .activation_qdq_off = info->n_qdq > 0};
        st = tp_onnx_run(om, &a, 1, &r, err);
    }
    if (!st) {
        const tp_step_shape step = {.batch = B, .tokens = T, .past = 0, .kv_len = T, .all_logits = 1};
        st = dec ? tp_model_build_step(m, params, &step, &g, err) : tp_model_build_graph(m, params, B, &g, err);
        have_g = !st;
    }
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
    free(x);
    free(y);
    return st;
}

tp_status tp_onnx_qdq_policy(const tp_onnx_import_info *info, tp_precision rest, tp_policy *pol, tp_error *err) {
    if (rest != TP_PREC_FP32 && rest != TP_PREC_FP16 && rest != TP_PREC_BF16)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "--precision %s with a Q/DQ ONNX file: the file's Q/DQ nodes decide "
                       "which layers are quantized and how; --precision names the precision of the rest (fp32, fp16 "
                       "or bf16)", tp_precision_name(rest));
    tp_policy_init(pol, rest);
    pol->act_scales_file = 1;
    for (int i = 0; i < info->n_qdq; i++) {
        const tp_onnx_qdq *q = &info->qdq[i];
        if (q->w_type != TP_ONNX_FLOAT8E4M3FN || q->x_type != TP_ONNX_FLOAT8E4M3FN)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: Q/DQ with a %s weight and a %s input: tprof runs FP8 E4M3 on "
                           "both operands", q->layer, q->w_type ? tp_onnx_elem_name(q->w_type) : "float",
                           q->x_type ? tp_onnx_elem_name(q->x_type) : "float");
        if (q->w_max_code != 448.0f)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: its weight's largest E4M3 value is %g, not 448: a scale other "
                           "than amax / 448, which tprof's per-tensor FP8 weights would round again", q->layer,
                           (double)q->w_max_code);
        tp_status st = tp_policy_add(pol, q->layer, TP_PREC_FP8, err);
        if (st) return st;
    }
    return TP_OK;
}

/* The float a with (float)((double)a / 448) == s (cpu_exec.c and the engines take the scale so) */
static float amax_for(float s) {
    float a = (float)((double)s * 448.0);
    for (int k = 0; k < 64 && (float)((double)a / 448.0) != s; k++)
        a = nextafterf(a, (float)((double)a / 448.0) < s ? INFINITY : 0.0f);
    return a;
}

tp_status tp_onnx_qdq_scales(const tp_onnx_import_info *info, const tp_graph *g, float *amax, tp_error *err) {
    for (int i = 0; i < info->n_qdq; i++) {
        const tp_onnx_qdq *q = &info->qdq[i];
        int found = 0;
        for (int k = 0; k < g->n_ops; k++) {
            const tp_op *op = &g->ops[k];
            if (op->kind != TP_OP_LINEAR || strcmp(op->layer, q->layer) != 0) continue;
            const float a = amax_for(q->x_scale);
            if ((float)((double)a / 448.0) != q->x_scale)
                return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: no float amax gives its input scale %g back", q->layer,
                               (double)q->x_scale);
            found = 1;
            for (int j = 0; j < i; j++) /* an input two quantized linears read: one scale (tprof stores it once) */
                for (int l = 0; l < g->n_ops; l++)
                    if (g->ops[l].kind == TP_OP_LINEAR && g->ops[l].in[0] == op->in[0] &&
                        !strcmp(g->ops[l].layer, info->qdq[j].layer) && info->qdq[j].x_scale != q->x_scale)
                        return tp_fail(err, TP_ERR_UNSUPPORTED, "%s and %s read one input with two Q/DQ scales",
                                       info->qdq[j].layer, q->layer);
            amax[op->in[0]] = a;
        }
        if (!found)
            return tp_fail(err, TP_ERR_UNSUPPORTED, "%s: the file quantizes a layer tprof's graph has no linear for",
                           q->layer);
    }
    return TP_OK;
}
