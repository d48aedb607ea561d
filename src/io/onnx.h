/* onnx.h: reads an ONNX model (issue 24) through protobuf-c with the ONNX schema (onnx.proto, Debian's
 * libonnx-dev, compiled to C at build time), checks it, and gives a read-only view of what tprof maps onto its IR:
 * the opsets, the graph's inputs and outputs with their shapes (symbolic dimensions by name), the initializers
 * with their bytes (inline or external), and the nodes in file order with their attributes.
 *
 * What is checked, each failure a TP_ERR_FORMAT naming the file and the node, tensor or field:
 *   - the file parses as a ModelProto (protobuf-c's unpack; files over 2 GiB cannot: the weights go to external
 *     data then), with a graph;
 *   - every node input is empty (an omitted optional input), a graph input, an initializer or the output of an
 *     earlier node (the spec's topological order), and no name is produced twice;
 *   - every initializer's element type is one tprof reads (float32, float16, bfloat16, float8e4m3fn, float8e5m2,
 *     int8, uint8, int32, int64, bool, float4e2m1: the ONNX DataType numbers, onnx.proto), its dimensions are
 *     non-negative and its bytes match them: raw_data of numel x size (4-bit: two a byte, rounded up), or the typed
 *     field the spec names (float_data for float32; int32_data for float16, bfloat16, 8-bit and bool, one value per
 *     element; int64_data for int64), or external data;
 *   - external data (data_location EXTERNAL; onnx docs/ExternalData.md): keys `location` (required), `offset`,
 *     `length` (decimal strings), `checksum`, `basepath`, anything else refused; the location a relative path with
 *     no `..` component, read from the model's folder; offset + length within that file; no alignment assumed
 *     (writers do not page-align). Segmented tensors are refused.
 *
 * Layouts: dims as in the file (row-major, the last dimension contiguous); tensor bytes little-endian, as ONNX
 * stores them; float32 given in float_data is exposed as its bytes in the same layout. */
#ifndef TP_IO_ONNX_H
#define TP_IO_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "tprof.h"

#define TP_ONNX_MAX_DIMS 8

/* ONNX DataType numbers (onnx.proto, TensorProto.DataType) of the element types tprof reads */
enum {
    TP_ONNX_FLOAT = 1, TP_ONNX_UINT8 = 2, TP_ONNX_INT8 = 3, TP_ONNX_INT32 = 6, TP_ONNX_INT64 = 7, TP_ONNX_BOOL = 9,
    TP_ONNX_FLOAT16 = 10, TP_ONNX_BFLOAT16 = 16, TP_ONNX_FLOAT8E4M3FN = 17, TP_ONNX_FLOAT8E5M2 = 19,
    TP_ONNX_FLOAT4E2M1 = 23
};

typedef struct {
    const char *name;
    int elem_type; /* ONNX DataType number; 0 when the value is not a tensor or its type is not given */
    int ndim;      /* -1: no shape given */
    int64_t dims[TP_ONNX_MAX_DIMS];          /* -1 where the dimension is symbolic or unknown */
    const char *dim_param[TP_ONNX_MAX_DIMS]; /* the symbolic name ("batch"), or NULL */
} tp_onnx_value;

typedef struct {
    const char *name;
    int elem_type;
    int ndim;
    int64_t dims[TP_ONNX_MAX_DIMS];
    int64_t numel;
    size_t nbytes;    /* numel x element size (4-bit: (numel + 1) / 2) */
    const void *data; /* nbytes, owned by the model */
    int external;     /* 1: read from an external data file */
} tp_onnx_tensor;

typedef enum {
    TP_ONNX_ATTR_FLOAT = 1, TP_ONNX_ATTR_INT = 2, TP_ONNX_ATTR_STRING = 3, TP_ONNX_ATTR_TENSOR = 4,
    TP_ONNX_ATTR_FLOATS = 6, TP_ONNX_ATTR_INTS = 7, TP_ONNX_ATTR_STRINGS = 8, TP_ONNX_ATTR_OTHER = 0
} tp_onnx_attr_type; /* ONNX AttributeType numbers; graphs, sparse tensors and types are OTHER */

typedef struct {
    const char *name;
    tp_onnx_attr_type type;
    double f;
    int64_t i;
    const char *s;         /* STRING: its bytes, NUL-terminated by the reader (s_len without the NUL) */
    size_t s_len;
    size_t n;              /* FLOATS, INTS, STRINGS: the count */
    const float *floats;
    const int64_t *ints;
    const tp_onnx_tensor *t; /* TENSOR: a constant, checked like an initializer */
} tp_onnx_attr;

typedef struct {
    const char *name, *op_type, *domain; /* domain "" is ai.onnx */
    int n_in, n_out, n_attr;
    const char *const *in, *const *out; /* "" for an omitted optional input */
    const tp_onnx_attr *attr;
} tp_onnx_node;

typedef struct tp_onnx_model tp_onnx_model;

/* Reads and checks path (the errors above); external data is read from path's folder. *out: free with
 * tp_onnx_free. Errors: TP_ERR_IO (cannot open or read), TP_ERR_FORMAT, TP_ERR_OOM. */
tp_status tp_onnx_load(const char *path, tp_onnx_model **out, tp_error *err);
void tp_onnx_free(tp_onnx_model *m);

int64_t tp_onnx_ir_version(const tp_onnx_model *m);
/* The opset the model imports for domain ("" or "ai.onnx": the default domain), or -1 when it imports none. */
int64_t tp_onnx_opset(const tp_onnx_model *m, const char *domain);
const char *tp_onnx_producer(const tp_onnx_model *m); /* "name version", or "" */

/* The graph's inputs that are not initializers (what a caller feeds), and its outputs. */
int tp_onnx_n_inputs(const tp_onnx_model *m);
const tp_onnx_value *tp_onnx_input(const tp_onnx_model *m, int i);
int tp_onnx_n_outputs(const tp_onnx_model *m);
const tp_onnx_value *tp_onnx_output(const tp_onnx_model *m, int i);

int tp_onnx_n_initializers(const tp_onnx_model *m);
const tp_onnx_tensor *tp_onnx_initializer(const tp_onnx_model *m, int i);
/* The initializer of that name, or NULL. */
const tp_onnx_tensor *tp_onnx_find_initializer(const tp_onnx_model *m, const char *name);

int tp_onnx_n_nodes(const tp_onnx_model *m);
const tp_onnx_node *tp_onnx_node_at(const tp_onnx_model *m, int i);
/* The attribute of that name on node n, or NULL. */
const tp_onnx_attr *tp_onnx_node_attr(const tp_onnx_node *n, const char *name);

/* Bytes per element of an ONNX DataType tprof reads (4-bit: 0, two a byte), or -1 for any other. */
int tp_onnx_elem_bytes(int elem_type);
const char *tp_onnx_elem_name(int elem_type); /* "float32", "float16", ...; "type N" for others */

#endif
