/* onnx_run.h: a plain CPU reference interpreter for the ONNX graphs tprof reads (src/io/onnx.h, issue 24), so an
 * imported model can be checked against the file's own semantics and the reader is tested end to end.
 *
 * Semantics are the ONNX operator specification's (onnx.ai/onnx/operators, default domain, opset 13 and later:
 * a model importing an older default opset is refused, since several ops changed their inputs at 13). Values are
 * float32 (dot products of MatMul, Gemm and Conv and the LayerNormalization statistics accumulated in double),
 * int64 for shape arithmetic and token ids, bool for the comparisons, And, Not and Where; FLOAT8E4M3FN, int8 and uint8 only as Q/DQ operands;
 * float16, bfloat16 and int32 initializers only as Cast's input (int32 also as Gather's indices).
 *
 * Op types (the ones tprof's fixtures hold: tests/fixtures/onnx_vit, tests/fixtures/onnx_llama,
 * tests/fixtures/onnx/tiny.onnx): Add, And, Cast, Concat, Constant, ConstantOfShape, Conv (2-D, group 1, auto_pad
 * NOTSET), Cos, CumSum, DequantizeLinear and QuantizeLinear (per-tensor scale; float8e4m3fn with saturate 1, int8,
 * uint8), Div, Equal, Erf, Expand, Gather, GatherND, Gemm, Identity, IsNaN, LayerNormalization, LessOrEqual, MatMul,
 * Max, Mul, Neg, Not, Pow, Range, Reciprocal, ReduceMean, Relu, Reshape, Shape, Sigmoid, Sin, Slice, Softmax, Split,
 * Sqrt, Squeeze, Sub, Tanh, Transpose, Unsqueeze, Where. Anything else (an op type or domain, an attribute value, an
 * element type, a shape that does not fit) is an error naming the node ("node 12 'name' (OpType): reason"), never a guess. */
#ifndef TP_IO_ONNX_RUN_H
#define TP_IO_ONNX_RUN_H

#include <stdint.h>

#include "io/onnx.h"

/* The value of one symbolic input dimension, by its dim_param name: {"batch", 2}. */
typedef struct {
    const char *name;
    int64_t value;
} tp_onnx_dim;

typedef struct {
    const tp_onnx_dim *dims; /* every symbolic dimension of the fed inputs must be bound, and each binding used */
    int n_dims;
    /* One per fed input (tp_onnx_input(m, i), in that order), float32, row-major, with its element count: checked
     * against the input's declared shape with the symbolic dimensions bound. The inputs must be declared float32 or
     * int64 (token ids: each value an integer of at most 2^24 in magnitude, as tprof stores them in float32). */
    const float *const *inputs;
    const int64_t *input_numel;
    /* 1: every QuantizeLinear passes its float input through, and so does every DequantizeLinear of a float value:
     * the graph without its activation quantization, its quantized weights (DequantizeLinear of an initializer)
     * still dequantized. What checks a Q/DQ model's import against tprof's FP32 executor on the same weights. */
    int activation_qdq_off;
} tp_onnx_run_args;

typedef struct {
    float *data; /* numel values, malloc'ed: free with tp_onnx_results_free */
    int ndim;
    int64_t dims[TP_ONNX_MAX_DIMS];
    int64_t numel;
} tp_onnx_result;

/* Runs the graph on the inputs and returns its first n_out outputs (1 <= n_out <= tp_onnx_n_outputs(m)), each
 * float32 with its shape, in out[0 .. n_out). An output declared with fixed dimensions, or with a symbolic one that
 * args binds, must come out with that shape. Errors: TP_ERR_ARG (args: counts, bindings, input sizes),
 * TP_ERR_UNSUPPORTED (an op type, attribute value or element type this interpreter does not run), TP_ERR_SHAPE (a
 * node's inputs do not fit its op), TP_ERR_FORMAT (a node malformed: a required input or attribute absent),
 * TP_ERR_OOM. On error out is left empty (data NULL). */
tp_status tp_onnx_run(const tp_onnx_model *m, const tp_onnx_run_args *args, int n_out, tp_onnx_result *out,
                      tp_error *err);
void tp_onnx_results_free(tp_onnx_result *out, int n);

#endif
