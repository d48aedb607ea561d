#!/usr/bin/env python3
"""Writes the ONNX fixture of a tiny Llama (issue 24): tests/fixtures/hf_llama_tiny exported by torch.onnx.

    python3 tools/make_onnx_llama_fixture.py [OUTDIR]     (default tests/fixtures/onnx_llama; runs on the CPU)

The model is the checkpoint tprof's decoder tests already use (tests/fixtures/hf_llama_tiny: LlamaForCausalLM,
hidden 64, 2 layers, 4 heads, 2 KV heads (GQA), head dim 16, SwiGLU 176, llama3 RoPE scaling, vocabulary 384,
untied LM head), loaded by transformers in float32 and exported without a KV cache (use_cache=False): input
"input_ids" (batch, seq) int64, output "logits" (batch, seq, vocab) float32, both dimensions symbolic. The legacy
dynamo exporter (torch.export, torch >= 2.9's default) at opset 18: the TorchScript one stops at aten::diff in
transformers 5's mask code.

Files: llama_op18.onnx; input_ids.bin (2, 11) int64 little-endian, seeded; llama_op18.ort_output.bin, onnxruntime's
logits (2, 11, 384) float32; torch_output.bin, transformers' own; llama_op18.json, the sidecar (shapes, op types
with their counts, the differences, the versions). The versions that made the committed files:
tools/requirements-onnx-fixtures.txt plus transformers (its version in the sidecar)."""
import collections
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "fixtures", "hf_llama_tiny")
B, T, SEED = 2, 11, 11


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "fixtures", "onnx_llama")
    os.makedirs(out, exist_ok=True)
    m = transformers.AutoModelForCausalLM.from_pretrained(SRC, dtype=torch.float32).eval()
    m.config.use_cache = False
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, m.config.vocab_size, (B, T), generator=g, dtype=torch.int64)

    class Logits(torch.nn.Module):  # logits only: no cache, no other outputs
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            return self.lm(input_ids=input_ids, use_cache=False).logits

    w = Logits(m).eval()
    with torch.no_grad():
        ref = w(ids).numpy()
        path = os.path.join(out, "llama_op18.onnx")
        bd, sd = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=2048)
        torch.onnx.export(w, (ids,), path, dynamo=True, opset_version=18, input_names=["input_ids"],
                          output_names=["logits"], dynamic_shapes=({0: bd, 1: sd},))
    mo = onnx.load(path)
    onnx.save_model(mo, path)  # external data, if any, packed back inline
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = s.run(None, {"input_ids": ids.numpy()})[0]
    ids.numpy().astype("<i8").tofile(os.path.join(out, "input_ids.bin"))
    got.astype("<f4").tofile(os.path.join(out, "llama_op18.ort_output.bin"))
    ref.astype("<f4").tofile(os.path.join(out, "torch_output.bin"))
    side = {"onnx": "llama_op18.onnx", "source": "tests/fixtures/hf_llama_tiny", "opset": 18,
            "exporter": "torch.onnx.export(dynamo=True)", "nodes": len(mo.graph.node),
            "op_types": dict(sorted(collections.Counter(n.op_type for n in mo.graph.node).items())),
            "input": {"file": "input_ids.bin", "shape": [B, T], "dtype": "int64", "seed": SEED},
            "ort_output": {"file": "llama_op18.ort_output.bin", "shape": list(got.shape), "dtype": "float32"},
            "torch_output": {"file": "torch_output.bin", "shape": list(ref.shape), "dtype": "float32"},
            "max_abs_diff_ort_vs_torch": float(np.abs(got - ref).max()),
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                         "onnx": onnx.__version__, "onnxruntime": ort.__version__}}
    with open(os.path.join(out, "llama_op18.json"), "w") as f:
        json.dump(side, f, indent=2)
    print(json.dumps(side, indent=1))


if __name__ == "__main__":
    main()
