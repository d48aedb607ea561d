#!/usr/bin/env python3
"""Exports a timm model to ONNX for `tprof bench --onnx` (issue 24's GPU check: ViT-B/16 from ONNX against the preset).

    python3 tools/export_timm_onnx.py MODEL OUT.onnx [--opset 17] [--dynamo] [--seed 0] [--safetensors W.safetensors]
                                      [--kwargs JSON] [--ort-output]

MODEL is a timm name (vit_base_patch16_224); the weights are timm's own init after torch.manual_seed(seed), no
download (pretrained=False). The TorchScript exporter (dynamo=False) at the given opset by default; --dynamo takes the
exporter torch >= 2.9 uses by default. Input "input" (batch, 3, S, S) with "batch" symbolic, output "output". A
sidecar OUT.json records the model, opset, exporter, file size and the versions. --safetensors also writes the same
weights as timm's state_dict (float32), so `tprof bench --model ... --weights` runs the preset on them: the ONNX
import and the preset then build from identical weights. Runs on the CPU."""
import argparse
import json
import os
import sys

import onnx
import timm
import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--dynamo", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--safetensors")
    ap.add_argument("--kwargs", default="{}")
    ap.add_argument("--ort-output", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    m = timm.create_model(a.model, pretrained=False, **json.loads(a.kwargs)).eval()
    s = json.loads(a.kwargs).get("img_size", m.default_cfg["input_size"][-1])
    x = torch.randn(2, 3, s, s)
    kw = dict(input_names=["input"], output_names=["output"], opset_version=a.opset,
              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    if a.dynamo:
        kw.pop("dynamic_axes")
        kw["dynamic_shapes"] = ({0: torch.export.Dim("batch", min=1, max=4096)},)
    with torch.no_grad():
        torch.onnx.export(m, (x,), a.out, dynamo=a.dynamo, **kw)
    mo = onnx.load(a.out)
    if a.dynamo:  # external data packed back into one file when it fits
        onnx.save_model(mo, a.out)
    if a.safetensors:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in m.state_dict().items()}, a.safetensors)
    extra = {}
    if a.ort_output:
        import numpy as np
        import onnxruntime as ort
        stem = os.path.splitext(a.out)[0]
        g = torch.Generator().manual_seed(7)
        xi = (torch.rand(2, 3, s, s, generator=g) * 2 - 1).numpy()
        y = ort.InferenceSession(a.out, providers=["CPUExecutionProvider"]).run(None, {"input": xi})[0]
        xi.astype("<f4").tofile(stem + ".input.bin")
        y.astype("<f4").tofile(stem + ".ort_output.bin")
        with torch.no_grad():
            ty = m(torch.from_numpy(xi)).numpy()
        extra = {"input": {"file": os.path.basename(stem) + ".input.bin", "shape": list(xi.shape), "seed": 7},
                 "ort_output": {"file": os.path.basename(stem) + ".ort_output.bin", "shape": list(y.shape)},
                 "max_abs_diff_ort_vs_torch": float(np.abs(y - ty).max()), "onnxruntime": ort.__version__}
    side = {"model": a.model, "kwargs": json.loads(a.kwargs), **extra, "opset": a.opset, "exporter": "dynamo" if a.dynamo else "TorchScript (dynamo=False)",
            "seed": a.seed, "bytes": os.path.getsize(a.out), "nodes": len(mo.graph.node),
            "versions": {"timm": timm.__version__, "torch": torch.__version__, "onnx": onnx.__version__,
                         "python": sys.version.split()[0]}}
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump(side, f, indent=2)
    print(json.dumps(side))


if __name__ == "__main__":
    main()
