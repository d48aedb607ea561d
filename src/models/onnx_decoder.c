/* onnx_decoder.c: a Llama-style decoder export onto the decoder family (onnx_import.h). */
#include "models/onnx_walk.h"

tp_status ow_import_decoder(ow_ix *x, const tp_onnx_value *in, const tp_onnx_value *out, tp_model *m,
                            tp_params *params, tp_onnx_import_info *info) {
    (void)out, (void)m, (void)params, (void)info;
    return tp_fail_path(x->err, TP_ERR_UNSUPPORTED, x->path, "input '%s' is token ids: decoders are not mapped yet",
                        in->name);
}
