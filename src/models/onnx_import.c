/* onnx_import.c: an ONNX file onto a tprof family (onnx_import.h): read, indexed, then walked by the architecture its
 * input says (an image batch: onnx_vit.c; token ids: onnx_decoder.c). */
#include "models/onnx_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/onnx_walk.h"

tp_status tp_onnx_import_model(const tp_onnx_model *om, const char *path, tp_model *m, tp_params *params,
                               tp_onnx_import_info *info, tp_error *err) {
    memset(m, 0, sizeof *m);
    memset(params, 0, sizeof *params);
    if (info) memset(info, 0, sizeof *info);
    ow_ix x = {.m = om, .path = path, .err = err};
    tp_status st = ow_index_build(&x);
    if (st) goto done;
    if (tp_onnx_n_inputs(om) != 1 || tp_onnx_n_outputs(om) != 1) {
        st = tp_fail_path(err, TP_ERR_UNSUPPORTED, path, "%d inputs and %d outputs: the architectures tprof maps have "
                          "one of each (an image batch or token ids in, logits or features out)",
                          tp_onnx_n_inputs(om), tp_onnx_n_outputs(om));
        goto done;
    }
    const tp_onnx_value *in = tp_onnx_input(om, 0), *out = tp_onnx_output(om, 0);
    st = in->elem_type == TP_ONNX_INT64 ? ow_import_decoder(&x, in, out, m, params, info)
                                        : ow_import_vit(&x, in, out, m, params, info);
    if (!st && info) {
        info->opset = tp_onnx_opset(om, "");
        snprintf(info->producer, sizeof info->producer, "%s", tp_onnx_producer(om));
        char s[sizeof info->summary];
        snprintf(s, sizeof s, "%s", info->summary);
        snprintf(info->summary, sizeof info->summary, "%.120s (%.40s, opset %lld)", s,
                 info->producer[0] ? info->producer : "unknown producer", (long long)info->opset);
        info->n_nodes = x.n;
        snprintf(info->batch_dim, sizeof info->batch_dim, "%s", in->dim_param[0] ? in->dim_param[0] : "");
        info->fixed_batch = in->dim_param[0] ? 0 : in->dims[0];
        snprintf(info->input_name, sizeof info->input_name, "%s", in->name);
        snprintf(info->output_name, sizeof info->output_name, "%s", out->name);
    }
done:
    if (st) {
        tp_params_free(params);
        memset(m, 0, sizeof *m);
    }
    ow_index_free(&x);
    return st;
}

tp_status tp_onnx_import(const char *path, tp_model *m, tp_params *params, tp_onnx_import_info *info, tp_error *err) {
    memset(m, 0, sizeof *m);
    memset(params, 0, sizeof *params);
    tp_onnx_model *om = NULL;
    tp_status st = tp_onnx_load(path, &om, err);
    if (!st) st = tp_onnx_import_model(om, path, m, params, info, err);
    tp_onnx_free(om);
    return st;
}
