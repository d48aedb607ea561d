#!/usr/bin/env python3
"""Writes the small ONNX files tests/test_onnx.c reads (issue 24), with the `onnx` package's own writer
(onnx.helper, onnx.save_model), so the reader is checked against files the reference library makes:

  tiny.onnx              y = Relu(x @ W + b) then Gemm(transB=1, alpha=0.5) with W2, c; x (batch, 4) with
                         batch symbolic; W as raw_data, b as float_data, W2 float16 in int32_data (one value per
                         element, as the spec stores 16-bit types), c as raw_data; a Constant node with a tensor
                         attribute and an ints attribute; opset 17
  tiny_ext.onnx (+ tiny_ext.onnx.data)  the same weights as external data, one file, packed back to back
  bad_order.onnx         a node reading a value no one made (written unchecked)
  bad_ext_updir.onnx     external data whose location is "../x.data"
  bad_ext_past_end.onnx  external data whose offset lies past the end of its file
  bad_raw_len.onnx       raw_data one byte short of its shape

Values are exact in float16 (multiples of 1/8) so the C test compares bit for bit; tiny.expect.txt holds y for
x = [[1, 2, 3, 4], [-1, 0.5, 0, 2]] computed here in float64 and, when onnxruntime is installed, checked
against it (within 1e-6). Usage: python3 tools/make_onnx_fixtures.py tests/fixtures/onnx
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

W = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0) / 8.0
B = np.array([0.5, -0.25, 0.125], dtype=np.float32)
W2 = ((np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0) / 4.0).astype(np.float16)
C = np.array([1.0, -1.0], dtype=np.float32)
X = np.array([[1, 2, 3, 4], [-1, 0.5, 0, 2]], dtype=np.float32)


def graph(ext_dir=None):
    w = numpy_helper.from_array(W, "W")  # raw_data
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], B.tolist())  # float_data
    w2 = helper.make_tensor("W2", TensorProto.FLOAT16, [2, 3], W2.astype(np.float32).tolist())  # bits in int32_data
    assert len(w2.int32_data) == 6 and not w2.raw_data
    c = numpy_helper.from_array(C, "c")
    k = helper.make_tensor("k", TensorProto.FLOAT, [1], [0.0])
    nodes = [
        helper.make_node("Constant", [], ["zero"], name="const0", value=k),
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
        helper.make_node("Add", ["xw", "b"], ["h"], name="add"),
        helper.make_node("Max", ["h", "zero"], ["r"], name="relu_as_max"),
        helper.make_node("Cast", ["W2"], ["W2f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Gemm", ["r", "W2f", "c"], ["y"], name="gemm", transB=1, alpha=0.5),
        helper.make_node("Transpose", ["r"], ["rt"], name="tr", perm=[1, 0]),
    ]
    g = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2]),
         helper.make_tensor_value_info("rt", TensorProto.FLOAT, [3, "batch"])],
        [w, b, w2, c])
    m = helper.make_model(g, producer_name="tprof-fixtures", producer_version="1",
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def expect():
    h = np.maximum(X.astype(np.float64) @ W + B, 0.0)
    return 0.5 * h @ W2.astype(np.float64).T + C


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/onnx"
    os.makedirs(out, exist_ok=True)
    m = graph()
    onnx.checker.check_model(m)
    onnx.save_model(m, os.path.join(out, "tiny.onnx"))
    y = expect()
    try:
        import onnxruntime as ort
        s = ort.InferenceSession(os.path.join(out, "tiny.onnx"), providers=["CPUExecutionProvider"])
        got = s.run(["y"], {"x": X})[0]
        assert np.abs(got - y).max() < 1e-6, (got, y)
        print("onnxruntime agrees:", np.abs(got - y).max())
    except ImportError:
        print("onnxruntime not installed: tiny.expect.txt from float64 only")
    with open(os.path.join(out, "tiny.expect.txt"), "w") as f:
        f.write(" ".join(f"{v:.9g}" for v in y.ravel()) + "\n")
    # the same with every initializer external, one file, no alignment (as onnx.save_model writes it)
    m = graph()
    onnx.save_model(m, os.path.join(out, "tiny_ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="tiny_ext.onnx.data", size_threshold=0)
    # bad files (written without the checker)
    bad = graph()
    bad.graph.node[1].input[0] = "nobody"
    onnx.save_model(bad, os.path.join(out, "bad_order.onnx"))
    for name, key, val in (("bad_ext_updir.onnx", "location", "../tiny_ext.onnx.data"),
                           ("bad_ext_past_end.onnx", "offset", "1000000")):
        b = onnx.load(os.path.join(out, "tiny_ext.onnx"), load_external_data=False)
        t = b.graph.initializer[0]
        for e in t.external_data:
            if e.key == key:
                e.value = val
        onnx.save_model(b, os.path.join(out, name))
    b = graph()
    b.graph.initializer[0].raw_data = b.graph.initializer[0].raw_data[:-1]
    onnx.save_model(b, os.path.join(out, "bad_raw_len.onnx"))
    for fn in sorted(os.listdir(out)):
        print(fn, os.path.getsize(os.path.join(out, fn)))


if __name__ == "__main__":
    main()
