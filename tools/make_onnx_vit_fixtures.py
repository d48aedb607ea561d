#!/usr/bin/env python3
"""Writes the golden ONNX files of a timm ViT that the ONNX importer (issue 24) is checked against.

    python3 tools/make_onnx_vit_fixtures.py [OUTDIR] [--embed-dim N] [--depth N]
    (OUTDIR defaults to tests/fixtures/onnx_vit; the versions that made the committed files are pinned in
    tools/requirements-onnx-fixtures.txt; runs on the CPU)

The model: timm's VisionTransformer with vit-tiny's structure (3 heads, mlp_ratio 4, patch 16, class token,
LayerNorm eps 1e-6, GELU in its erf form, token pooling, a 10-class head) at img_size 32 (4 patches + the class
token) and depth 2. Its width is --embed-dim: vit-tiny's 192 makes about 1.03 M parameters, 4.1 MB for each copy
of the weights, more than the 3 MB this folder may hold with its four ONNX files and the safetensors copy, so the
default is 48 (head dimension 16); the graphs have the same op types and patterns at any width. Weights: timm's
own init after torch.manual_seed(SEED), then every parameter plus 0.05 * N(0, 1) (seeded), as
tools/make_timm_golden.py does, so that no bias is zero (exporters deduplicate equal initializers through
Identity) and activations are not tiny.

Files (all float32 .bin files little-endian, row-major, no header; shapes in the sidecars):
  input.bin                 (2, 3, 32, 32), uniform in [-1, 1] (torch.Generator seeded with INPUT_SEED): the
                            model's input tensor itself, no image (config.json's preprocessing does not apply)
  torch_output.bin          timm's FP32 logits for input.bin (PyTorch on the CPU), (3, 10)
  model.safetensors         timm's state_dict of the same weights (float32), config.json: timm's hub config
                            (architecture, num_classes, num_features, global_pool, model_args, pretrained_cfg) as
                            tools/make_timm_golden.py writes it, so the C timm loader can load the same model
  vit_op17.onnx, vit_op18.onnx   torch.onnx.export(dynamo=False), the TorchScript exporter, opsets 17 and 18,
                            input "input" (batch, 3, 32, 32), output "output" (batch, 10), "batch" symbolic
  vit_dynamo_op18.onnx      torch.onnx.export(dynamo=True), the exporter torch >= 2.9 uses by default, opset 18,
                            its external data packed back inline (onnx.save_model)
  vit_fp8_qdq_op19.onnx     vit_op18.onnx converted to opset 19 (onnx.version_converter), then FP8 E4M3
                            per-tensor Q/DQ on every Linear (the 4 of each block and the head), as NVIDIA ModelOpt
                            writes them: each weight folded to a FLOAT8E4M3FN initializer feeding a
                            DequantizeLinear (scale amax/448), each Linear input through QuantizeLinear ->
                            DequantizeLinear (scale = calibration amax / 448, max calibration over CALIB_BATCH
                            images of their own seed), FLOAT8E4M3FN zero points 0, saturate 1
  <stem>.ort_output.bin     onnxruntime's (CPUExecutionProvider) output of <stem>.onnx for input.bin
  vit_fp8_qdq_op19.emulated_output.bin   the Q/DQ model's output emulated in PyTorch: the same timm model with each
                            Linear's weight replaced by its dequantized FP8 values and its input fake-quantized
                            (x / s clamped to +-448, cast to torch.float8_e4m3fn, times s), FP32
  <stem>.json               the sidecar: files, shapes, opsets, exporter, op types with their counts, the maximum
                            absolute differences (ort vs torch, and for the Q/DQ model ort vs the emulation and vs
                            FP32 torch), the calibration scales, the versions of timm, torch, onnx, onnxruntime
Every ONNX file passes onnx.checker (full_check) and runs in onnxruntime at batch 2 and at batch 1 (the dynamic
axis); the script exits with status 1 if a difference is larger than its bound (1e-4 for the FP32 graphs).
"""
import argparse
import collections
import copy
import io
import json
import os
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import timm
import torch
from onnx import TensorProto, helper, numpy_helper
from safetensors.torch import save_file
from timm.models.vision_transformer import VisionTransformer

TOOLS = os.path.dirname(os.path.abspath(__file__))
SEED = 2024          # torch.manual_seed before timm's init, then the perturbation
INPUT_SEED = 7       # the test input
CALIB_SEED = 11      # the FP8 calibration images (not the test input)
CALIB_BATCH = 16
BATCH = 2  # neither the channel count nor the head count (3): a swapped axis shows
FP32_BOUND = 1e-4    # ort vs torch, FP32 graphs
FP8_MAX = 448.0      # largest finite FLOAT8E4M3FN


def model_args(embed_dim, depth):
    return dict(img_size=32, patch_size=16, embed_dim=embed_dim, depth=depth, num_heads=3, mlp_ratio=4.0,
                num_classes=10, class_token=True, global_pool="token", act_layer="gelu")


def make_model(kw):
    torch.manual_seed(SEED)
    model = VisionTransformer(**kw).eval()  # timm's init (trunc_normal 0.02 weights, zero biases, LN 1/0)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(0.05 * torch.randn_like(p))
    # vit-tiny's fixed parts: LayerNorm eps 1e-6, GELU in its erf form
    assert all(m.eps == 1e-6 for m in model.modules() if isinstance(m, torch.nn.LayerNorm))
    assert all(m.approximate == "none" for m in model.modules() if isinstance(m, torch.nn.GELU))
    return model


def uniform(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float32) * 2.0 - 1.0).contiguous()


def write_bin(path, a):
    a = np.ascontiguousarray(np.asarray(a, dtype="<f4"))
    a.tofile(path)
    return list(a.shape)


def op_types(m):
    c = collections.Counter(n.op_type if not n.domain else n.domain + "::" + n.op_type for n in m.graph.node)
    return dict(sorted(c.items()))


def opset(m):
    return {(o.domain or "ai.onnx"): o.version for o in m.opset_import}


def export(model, x, path, opset_version, dynamo):
    """torch.onnx.export with a dynamic batch axis named "batch"; returns the loaded model, saved inline."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            prog = torch.onnx.export(model, (x,), None, opset_version=opset_version, input_names=["input"],
                                     output_names=["output"], dynamo=True,
                                     dynamic_shapes=({0: torch.export.Dim("batch")},))
            m = prog.model_proto
        else:
            buf = io.BytesIO()
            torch.onnx.export(model, (x,), buf, opset_version=opset_version, input_names=["input"],
                              output_names=["output"], dynamo=False,
                              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
            m = onnx.load_from_string(buf.getvalue())
    for v in list(m.graph.input) + list(m.graph.output):
        d0 = v.type.tensor_type.shape.dim[0]
        if d0.dim_param != "batch":  # the dynamo exporter names it after the Dim; make it say "batch" either way
            d0.Clear()
            d0.dim_param = "batch"
    onnx.save_model(m, path)  # inline: every initializer in the file
    return onnx.load(path)


def run_ort(path, x):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in s.get_inputs()] == ["input"], s.get_inputs()
    y = s.run(None, {"input": x})[0]
    y1 = s.run(None, {"input": x[:1]})[0]  # the batch axis is dynamic
    return y, float(np.abs(y1 - y[:1]).max())


# ---------------------------------------------------------------------------------------------- FP8 Q/DQ


def f8_cast(a):
    """float32 -> FLOAT8E4M3FN with saturation (the ONNX QuantizeLinear rule with saturate=1: round to
    nearest even, clamp to +-448), returned as torch.float8_e4m3fn."""
    t = torch.as_tensor(a, dtype=torch.float32)
    return t.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def f8_bytes(t8):
    return t8.view(torch.uint8).numpy().tobytes()


def linear_modules(model):
    return {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def calibrate(model, xcal):
    """Max calibration: amax of each Linear's input over the calibration batch."""
    amax, hooks = {}, []
    for name, lin in linear_modules(model).items():
        def hook(mod, args, name=name):
            amax[name] = max(amax.get(name, 0.0), float(args[0].abs().max()))
        hooks.append(lin.register_forward_pre_hook(hook))
    with torch.no_grad():
        model(xcal)
    for h in hooks:
        h.remove()
    return amax


def node_module(node):
    """'/blocks/blocks.0/attn/qkv/MatMul' -> 'blocks.0.attn.qkv' (the TorchScript exporter's node names: the
    module scopes, a Sequential's child named in full after the Sequential)."""
    parts = []
    for c in [p for p in node.name.split("/") if p][:-1]:
        if parts and c.startswith(parts[-1] + "."):
            parts[-1] = c
        else:
            parts.append(c)
    return ".".join(parts)


def insert_qdq(m, model, amax):
    """Adds FP8 E4M3 per-tensor Q/DQ on every Linear's input and weight of an exported graph (opset >= 19).
    Returns the scales {module: (input_scale, weight_scale)} and the dequantized weights {module: W (out, in)}."""
    inits = {t.name: t for t in m.graph.initializer}
    lins = linear_modules(model)
    zp_name = "fp8_zero_point"
    m.graph.initializer.append(helper.make_tensor(zp_name, TensorProto.FLOAT8E4M3FN, [], b"\x00", raw=True))
    new_nodes, scales, deq, done = [], {}, {}, set()
    for node in m.graph.node:
        mod = node_module(node)
        if node.op_type in ("MatMul", "Gemm") and mod in lins and len(node.input) >= 2 and node.input[1] in inits:
            lin = lins[mod]
            w_onnx = numpy_helper.to_array(inits[node.input[1]])
            w = lin.weight.detach().numpy()
            if node.op_type == "MatMul":
                want = w.T                       # MatMul(x, W^T): the initializer is (in, out)
            else:
                attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                assert attrs.get("transB", 0) == 1 and attrs.get("transA", 0) == 0, attrs
                want = w                         # Gemm(transB 1): (out, in)
            assert w_onnx.shape == want.shape and np.array_equal(w_onnx, want), (node.name, w_onnx.shape)
            s_w = np.float32(np.abs(w).max() / FP8_MAX)
            s_x = np.float32(amax[mod] / FP8_MAX)
            w8 = f8_cast(torch.from_numpy(w_onnx.copy()) / torch.tensor(s_w))   # the division Q does, in float32
            deq_onnx = w8.to(torch.float32) * torch.tensor(s_w)
            deq[mod] = (deq_onnx.T if node.op_type == "MatMul" else deq_onnx).contiguous()
            scales[mod] = (float(s_x), float(s_w))
            p = mod
            m.graph.initializer.extend([
                helper.make_tensor(p + ".weight_fp8", TensorProto.FLOAT8E4M3FN, list(w_onnx.shape), f8_bytes(w8),
                                   raw=True),
                numpy_helper.from_array(np.array(s_w, dtype=np.float32), p + ".weight_scale"),
                numpy_helper.from_array(np.array(s_x, dtype=np.float32), p + ".input_scale"),
            ])
            x_in, w_in = node.input[0], node.input[1]
            scope = "/" + p.replace(".", "/")
            new_nodes += [
                helper.make_node("QuantizeLinear", [x_in, p + ".input_scale", zp_name], [p + ".input_q"],
                                 name=scope + "/input_quantizer/QuantizeLinear", saturate=1),
                helper.make_node("DequantizeLinear", [p + ".input_q", p + ".input_scale", zp_name],
                                 [p + ".input_dq"], name=scope + "/input_quantizer/DequantizeLinear"),
                helper.make_node("DequantizeLinear", [p + ".weight_fp8", p + ".weight_scale", zp_name],
                                 [p + ".weight_dq"], name=scope + "/weight_quantizer/DequantizeLinear"),
            ]
            node.input[0] = p + ".input_dq"
            node.input[1] = p + ".weight_dq"
            done.add(mod)
            # the FP32 weight goes if nothing else reads it
            if not any(w_in in n.input for n in m.graph.node):
                m.graph.initializer.remove(inits[w_in])
        new_nodes.append(node)
    assert done == set(lins), (sorted(done), sorted(lins))
    del m.graph.node[:]
    m.graph.node.extend(new_nodes)
    return scales, deq


def emulate_qdq(model, scales, deq, x):
    """The Q/DQ graph's math in PyTorch: dequantized FP8 weights, fake-quantized Linear inputs."""
    em = copy.deepcopy(model)
    lins = linear_modules(em)
    hooks = []
    for name, lin in lins.items():
        s_x = torch.tensor(scales[name][0], dtype=torch.float32)
        with torch.no_grad():
            lin.weight.copy_(deq[name])

        def pre(mod, args, s_x=s_x):
            return (f8_cast(args[0] / s_x).to(torch.float32) * s_x,)
        hooks.append(lin.register_forward_pre_hook(pre))
    with torch.no_grad():
        return em(x).numpy()


# ---------------------------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", nargs="?", default="tests/fixtures/onnx_vit")
    ap.add_argument("--embed-dim", type=int, default=48)
    ap.add_argument("--depth", type=int, default=2)
    a = ap.parse_args()
    out = a.outdir
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)  # one deterministic reduction order for the reference
    kw = model_args(a.embed_dim, a.depth)
    versions = {"timm": timm.__version__, "torch": torch.__version__, "onnx": onnx.__version__,
                "onnxruntime": ort.__version__, "numpy": np.__version__, "python": sys.version.split()[0]}
    print(", ".join(f"{k} {v}" for k, v in versions.items()))

    model = make_model(kw)
    x = uniform((BATCH, 3, 32, 32), INPUT_SEED)
    with torch.no_grad():
        y = model(x).numpy()
        y64 = model.double()(x.double()).numpy()
        model.float()
        feats = model.forward_features(x)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"model: {nparams} parameters, logits std {y.std():.4f}, final features std {feats.std():.4f}, "
          f"timm fp32 vs fp64 max |diff| {np.abs(y - y64).max():.2e}")

    common = {"input": {"file": "input.bin", "name": "input", "shape": write_bin(os.path.join(out, "input.bin"), x),
                        "dtype": "float32", "seed": INPUT_SEED, "range": [-1, 1],
                        "note": "the model's input tensor itself (no image, no preprocessing)"},
              "torch_output": {"file": "torch_output.bin",
                               "shape": write_bin(os.path.join(out, "torch_output.bin"), y), "dtype": "float32",
                               "note": "timm's FP32 logits, PyTorch on the CPU"},
              "model": {"class": "timm.models.vision_transformer.VisionTransformer", "model_args": kw,
                        "parameters": nparams, "seed": SEED,
                        "init": "timm's init after torch.manual_seed(seed), then every parameter + 0.05 * N(0, 1)",
                        "safetensors": "model.safetensors", "config": "config.json"},
              "versions": versions}

    # timm's checkpoint of the same weights
    sys.path.insert(0, TOOLS)
    from make_timm_golden import hub_config, pretrained_cfg_for
    data = dict(interpolation="bicubic", crop_pct=1.0, crop_mode="center", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    pcfg = pretrained_cfg_for("onnx_vit", kw, data)
    pcfg["architecture"] = "vit_tprof_onnx_d%d_w%d_patch16_32" % (a.depth, a.embed_dim)
    sd = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(out, "model.safetensors"))  # no metadata: its header order varies run to run
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hub_config(pcfg, kw), f, indent=2)
        f.write("\n")

    failures = []

    def sidecar(stem, m, extra):
        j = {"onnx": stem + ".onnx", "opset": opset(m), "ir_version": m.ir_version,
             "producer": f"{m.producer_name} {m.producer_version}".strip(),
             "inputs": [{"name": v.name, "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]}
                        for v in m.graph.input],
             "outputs": [{"name": v.name, "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]}
                         for v in m.graph.output],
             "nodes": len(m.graph.node), "initializers": len(m.graph.initializer),
             "op_types": op_types(m)}
        j.update(extra)
        j.update(common)
        with open(os.path.join(out, stem + ".json"), "w") as f:
            json.dump(j, f, indent=2)
            f.write("\n")

    # FP32 exports
    graphs = [("vit_op17", 17, False), ("vit_op18", 18, False), ("vit_dynamo_op18", 18, True)]
    for stem, op, dynamo in graphs:
        path = os.path.join(out, stem + ".onnx")
        m = export(model, x, path, op, dynamo)
        onnx.checker.check_model(path, full_check=True)
        got, b1 = run_ort(path, x.numpy())
        write_bin(os.path.join(out, stem + ".ort_output.bin"), got)
        d = float(np.abs(got - y).max())
        exporter = ("torch.onnx.export(dynamo=True) (torch.export-based)" if dynamo
                    else "torch.onnx.export(dynamo=False) (TorchScript-based, legacy)")
        print(f"{stem}: opset {opset(m)}, {exporter}, {len(m.graph.node)} nodes, ort vs torch max |diff| {d:.3e}, "
              f"batch 1 vs 2 {b1:.1e}, {os.path.getsize(path)} bytes")
        print(f"  op types: {op_types(m)}")
        if d > FP32_BOUND or b1 > FP32_BOUND:
            failures.append(f"{stem}: ort vs torch {d:.3e}, batch 1 vs 2 {b1:.3e}")
        sidecar(stem, m, {"exporter": exporter, "ort_output": {
            "file": stem + ".ort_output.bin", "shape": list(got.shape), "dtype": "float32",
            "provider": "CPUExecutionProvider"},
            "max_abs_diff_ort_vs_torch": d, "max_abs_diff_ort_batch1_vs_batch2": b1})

    # FP8 Q/DQ, from the legacy opset-18 export
    stem = "vit_fp8_qdq_op19"
    path = os.path.join(out, stem + ".onnx")
    from onnx import version_converter
    m = version_converter.convert_version(onnx.load(os.path.join(out, "vit_op18.onnx")), 19)
    m.ir_version = max(m.ir_version, 9)  # float8 element types need IR 9
    xcal = uniform((CALIB_BATCH, 3, 32, 32), CALIB_SEED)
    amax = calibrate(model, xcal)
    scales, deq = insert_qdq(m, model, amax)
    m.producer_name, m.producer_version = "tprof tools/make_onnx_vit_fixtures.py", "1"
    onnx.checker.check_model(m, full_check=True)
    onnx.save_model(m, path)
    emu = emulate_qdq(model, scales, deq, x)
    write_bin(os.path.join(out, stem + ".emulated_output.bin"), emu)
    extra = {"exporter": "vit_op18.onnx (torch.onnx.export dynamo=False) -> onnx.version_converter to opset 19 -> "
                         "Q/DQ inserted with onnx.helper (tools/make_onnx_vit_fixtures.py insert_qdq)",
             "quantization": {"format": "FP8 E4M3 (FLOAT8E4M3FN), per-tensor, zero point 0, saturate 1",
                              "weights": "FLOAT8E4M3FN initializers <module>.weight_fp8 -> DequantizeLinear, scale "
                                         "amax(|W|) / 448",
                              "activations": "each Linear's input: QuantizeLinear -> DequantizeLinear, scale "
                                             "calibration amax / 448",
                              "calibration": {"method": "max", "batch": CALIB_BATCH, "seed": CALIB_SEED,
                                              "range": [-1, 1]},
                              "scales": {k: {"input_scale": v[0], "weight_scale": v[1]} for k, v in scales.items()}},
             "emulated_output": {"file": stem + ".emulated_output.bin", "shape": list(emu.shape), "dtype": "float32",
                                 "note": "numpy/PyTorch emulation of the Q/DQ math (timm model, dequantized FP8 "
                                         "weights, fake-quantized Linear inputs), not onnxruntime"},
             "max_abs_diff_emulated_vs_torch_fp32": float(np.abs(emu - y).max())}
    try:
        got, b1 = run_ort(path, x.numpy())
        write_bin(os.path.join(out, stem + ".ort_output.bin"), got)
        d_emu = float(np.abs(got - emu).max())
        d_fp32 = float(np.abs(got - y).max())
        extra.update({"ort_output": {"file": stem + ".ort_output.bin", "shape": list(got.shape), "dtype": "float32",
                                     "provider": "CPUExecutionProvider"},
                      "max_abs_diff_ort_vs_emulated": d_emu, "max_abs_diff_ort_vs_torch_fp32": d_fp32,
                      "max_abs_diff_ort_batch1_vs_batch2": b1})
        print(f"{stem}: ort vs emulation max |diff| {d_emu:.3e}, ort vs FP32 torch {d_fp32:.3e} "
              f"(|logits| max {np.abs(y).max():.3f}), batch 1 vs 2 {b1:.1e}")
        if d_emu > 1e-3 * max(1.0, float(np.abs(y).max())) or b1 > FP32_BOUND:
            failures.append(f"{stem}: ort vs emulation {d_emu:.3e}, batch 1 vs 2 {b1:.3e}")
    except Exception as e:  # onnxruntime without FP8 Q/DQ on the CPU: keep the file and the emulation
        extra["ort_output"] = None
        extra["ort_error"] = f"{type(e).__name__}: {e}"
        print(f"{stem}: onnxruntime could not run it ({type(e).__name__}: {e}); the emulated output stands alone")
    print(f"{stem}: {len(m.graph.node)} nodes, {os.path.getsize(path)} bytes, emulated vs FP32 torch max |diff| "
          f"{extra['max_abs_diff_emulated_vs_torch_fp32']:.3e}")
    print(f"  op types: {op_types(m)}")
    sidecar(stem, m, extra)

    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{out}: {len(os.listdir(out))} files, {total} bytes")
    if failures:
        print("FAILED: " + "; ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
