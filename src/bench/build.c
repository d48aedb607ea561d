/* build.c: `tprof build` (bench.h tp_build_run): plan, quantize, calibrate and time the GEMMs once; write the
 * engine file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/onnx_check.h"
#include "core/util.h"
#include "exec/executor.h"
#include "planner/caps.h"

/* Static activation scales on the GPU: calibration on the user's inputs or random ones (seed + 1). */
static tp_status build_calibrate(const tp_bench_options *o, const tp_model *m, const tp_graph *g,
                                 const tp_params *params, int sm, float *amax, tp_error *err) {
    const size_t n = (size_t)o->batch * (size_t)tp_model_input_numel(m);
    float *calib = malloc(sizeof(float) * n);
    if (!calib) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    char desc[600];
    tp_status st = tp_model_make_input(m, o->batch, o->seed + 1, o->calib_data ? o->calib_data : o->image, calib,
                                       desc, sizeof desc, err);
    if (st && o->calib_data) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        st = tp_fail(err, st, "--calib-data: %.400s", why);
    }
    if (!st) st = tp_calibrate(g, params, 0, sm, calib, &o->calib, amax, err);
    free(calib);
    if (st) return st;
    char cd[48];
    printf("Calibrated on %s (batch %d, %s calibration)\n", desc, o->batch, tp_calib_describe(&o->calib, cd, sizeof cd));
    return TP_OK;
}

/* GEMM selection on the target itself (engine_file.h "gemm_selection"): the engine built once here. */
static tp_status build_gemm_selection(const tp_bench_options *o, const tp_gpu_info *gpu, const tp_graph *g,
                                      const tp_params *params, const tp_plan *plan, const float *amax,
                                      tp_engine_gemm_sel *gsel, tp_error *err) {
    tp_engine *e = NULL;
    tp_engine_options eo = {.device = 0, .use_graph = 0, .act_amax = amax, .cublaslt_only = o->cublaslt_only,
                            .fp8_promote = o->fp8_promote, .attention = (tp_attn_impl)o->attention};
    double t0 = tp_now_ms();
    tp_status st = tp_engine_build(g, params, plan, &eo, &e, err);
    if (st) return st;
    gsel->algo = malloc(sizeof(int) * (size_t)g->n_ops);
    if (!gsel->algo) {
        tp_engine_destroy(e);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    int n_gemm = 0;
    for (int i = 0; i < g->n_ops; i++) n_gemm += (gsel->algo[i] = tp_engine_gemm_choice(e, i)) >= 0;
    tp_engine_destroy(e);
    snprintf(gsel->gpu, sizeof gsel->gpu, "%s", gpu->name);
    gsel->cublaslt = (int)gpu->cublaslt_version;
    gsel->batch = o->batch;
    gsel->fp8_accum = o->fp8_promote ? TP_FP8_ACCUM_PROMOTE : TP_FP8_ACCUM_FAST;
    gsel->n_ops = g->n_ops;
    printf("GEMM selection: %d GEMMs timed on %s at batch %d (%.0f ms), stored in the engine\n", n_gemm, gpu->name,
           o->batch, tp_now_ms() - t0);
    return TP_OK;
}

tp_status tp_build_run(const tp_bench_options *o, const char *out_path, int sm, tp_error *err) {
    tp_status st = tp_model_validate(&o->model, err);
    if (st) return st;
    if (o->n_precs != 1) return tp_fail(err, TP_ERR_ARG, "tprof build: give one --precision (an engine has one)");
    const tp_precision prec = o->precs[0];
    tp_model model = o->model;
    tp_gpu_info gpu;
    memset(&gpu, 0, sizeof gpu);
    tp_error gerr = {0};
    if (tp_gpu_query(0, &gpu, &gerr) != TP_OK) gpu.present = 0; /* without CUDA: none (TP_EXEC_NO_CUDA) */
    if (!sm) {
        if (!gpu.present) return tp_fail(err, TP_ERR_NO_GPU, "tprof build: no GPU (%s); name the target with --arch", gerr.msg);
        sm = gpu.sm;
    }
    char note[700] = "";
    if (o->weights && (st = tp_model_checkpoint(&model, o->weights, note, sizeof note, err))) return st;
    if (note[0]) printf("%s\n", note);
    if ((st = tp_model_limits(&model, o->strict, note, sizeof note, err))) return st;
    if (note[0]) printf("%s\n", note);
    tp_params params = {0};
    tp_graph g = {0};
    tp_plan plan;
    memset(&plan, 0, sizeof plan);
    tp_policy pol;
    float *amax = NULL;
    tp_engine_gemm_sel gsel = {0}, *gs = NULL;
    st = o->onnx        ? tp_bench_onnx_params(o, &params, err)
         : o->weights   ? tp_model_params_load(&model, o->weights, &params, err)
                        : tp_model_params_init(&model, o->seed, 0, &params, err);
    if (o->onnx_note) printf("%s\n", o->onnx_note);
    if (!st && o->weights && (st = tp_bench_check_finite(o, &params, err))) tp_params_free(&params);
    if (st) return st;
    if ((st = tp_bench_policy(o, prec, &pol, err))) goto done;
    if ((st = tp_model_build_graph(&model, &params, o->batch, &g, err))) goto done;
    tp_policy_warn(&pol, &g, stdout);
    if ((st = tp_plan_build_policy(&g, &pol, sm, &plan, err))) goto done;
    int calibrate = 0;
    for (int v = 0; v < g.n_values; v++) calibrate |= plan.value_scaled[v] && g.values[v].kind == TP_VAL_ACT;
    if (calibrate) {
        if (!gpu.present) { /* a build without CUDA says it in the words it always has */
            st = tp_caps_build_has_cuda()
                     ? tp_fail(err, TP_ERR_NO_GPU, "tprof build: %s%s needs activation scales from calibration on a "
                               "GPU (%s)", tp_precision_name(prec),
                               prec < TP_PREC_FP8 ? " with the policy's quantized layers" : "", gerr.msg)
                     : tp_fail(err, TP_ERR_NO_GPU, "tprof build: %s needs calibration on a GPU (%s)",
                               tp_precision_name(prec), gerr.msg);
            goto done;
        }
        if (!(amax = malloc(sizeof(float) * (size_t)g.n_values))) {
            st = tp_fail(err, TP_ERR_OOM, "out of host memory");
            goto done;
        }
        if ((st = build_calibrate(o, &model, &g, &params, gpu.sm, amax, err))) goto done;
        if (o->onnx_info && o->onnx_info->n_qdq && (st = tp_onnx_qdq_scales(o->onnx_info, &g, amax, err))) goto done;
    }
    if (gpu.present && gpu.sm == sm && !o->gemm_first) {
        if ((st = build_gemm_selection(o, &gpu, &g, &params, &plan, amax, &gsel, err))) goto done;
        gs = &gsel;
    }
    if ((st = tp_engine_file_write(out_path, &model, prec, &pol, sm, &params, &g, &plan, amax, gs, err))) goto done;
    {
        char b[32];
        int emulated = 0;
        for (int i = 0; i < g.n_ops; i++) emulated += plan.op_emulated[i];
        printf("Engine %s: %s for sm_%d, %s of weights in their format%s\n", out_path, tp_precision_name(prec), sm,
               tp_fmt_bytes(tp_plan_weight_bytes(&plan, &g), b, sizeof b),
               emulated ? " (its block-scaled GEMMs run emulated on this target)" : "");
    }
done:
    free(gsel.algo);
    free(amax);
    tp_plan_free(&plan);
    tp_graph_free(&g);
    tp_params_free(&params);
    return st;
}
