#!/usr/bin/env python3
"""Writes the ONNX fixture of a tiny Llama (issue 24): tests/fixtures/hf_llama_tiny exported by torch.onnx.

    python3 tools/make_onnx_llama_fixture.py [OUTDIR]     (default tests/fixtures/onnx_llama; runs on the CPU)
    python3 tools/make_onnx_llama_fixture.py OUTDIR --hidden 256 --heads 4 --kv-heads 2 --layers 2 --inter 512
                                             --vocab 512 [--tie] [--hf-dir DIR] [--stem NAME]
                                             (a random LlamaForCausalLM of that shape instead, tied embeddings with
                                              --tie, its HF checkpoint folder written to DIR)

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
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.path.join(ROOT, "tests", "fixtures", "onnx_llama"))
    ap.add_argument("--stem", default="llama_op18", help="the files' name (the committed fixtures: llama_op18 by "
                    "transformers 5.24, llama_tf517_op18 by transformers 5.17, whose RoPE is a MatMul)")
    for k in ("hidden", "heads", "kv_heads", "layers", "inter", "vocab"):
        ap.add_argument("--" + k.replace("_", "-"), type=int)
    ap.add_argument("--tie", action="store_true")
    ap.add_argument("--arch", choices=("llama", "gemma"), default="llama")
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--hf-dir")
    a = ap.parse_args()
    out = a.out
    os.makedirs(out, exist_ok=True)
    if a.hidden:  # a random model of that shape (head dim hidden / heads), its HF checkpoint beside
        torch.manual_seed(SEED)
        kw = dict(hidden_size=a.hidden, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                  num_hidden_layers=a.layers, intermediate_size=a.inter, vocab_size=a.vocab,
                  tie_word_embeddings=a.tie, max_position_embeddings=2048)
        if a.head_dim:
            kw["head_dim"] = a.head_dim
        if a.arch == "gemma":  # GemmaForCausalLM: RMSNorm (1 + w), the embedding times sqrt(C), GeGLU (tanh GELU)
            m = transformers.GemmaForCausalLM(transformers.GemmaConfig(**kw)).eval()
        else:
            m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw)).eval()
        with torch.no_grad():  # HF's init leaves norms at 1 (Gemma's w at 0): every value perturbed, seeded
            g0 = torch.Generator().manual_seed(SEED + 1)
            for prm in m.parameters():
                prm.add_(0.05 * torch.randn(prm.shape, generator=g0))
        if a.hf_dir:
            m.save_pretrained(a.hf_dir)
    else:
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
        path = os.path.join(out, a.stem + ".onnx")
        bd, sd = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=2048)
        torch.onnx.export(w, (ids,), path, dynamo=True, opset_version=18, input_names=["input_ids"],
                          output_names=["logits"], dynamic_shapes=({0: bd, 1: sd},))
    mo = onnx.load(path)
    onnx.save_model(mo, path)  # external data, if any, packed back inline
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = s.run(None, {"input_ids": ids.numpy()})[0]
    ids_file = "input_ids.bin" if not a.hidden else a.stem + ".input_ids.bin"  # hf_llama_tiny's exports share one
    ids.numpy().astype("<i8").tofile(os.path.join(out, ids_file))
    got.astype("<f4").tofile(os.path.join(out, a.stem + ".ort_output.bin"))
    if os.path.exists(path + ".data"):
        os.remove(path + ".data")  # the exporter's external data, packed inline above
    ref.astype("<f4").tofile(os.path.join(out, a.stem + ".torch_output.bin" if a.stem != "llama_op18" else "torch_output.bin"))
    side = {"onnx": a.stem + ".onnx", "source": "random, " + json.dumps(vars(a)) if a.hidden else "tests/fixtures/hf_llama_tiny", "opset": 18,
            "exporter": "torch.onnx.export(dynamo=True)", "nodes": len(mo.graph.node),
            "op_types": dict(sorted(collections.Counter(n.op_type for n in mo.graph.node).items())),
            "input": {"file": ids_file, "shape": [B, T], "dtype": "int64", "seed": SEED},
            "ort_output": {"file": a.stem + ".ort_output.bin", "shape": list(got.shape), "dtype": "float32"},
            "torch_output": {"file": a.stem + ".torch_output.bin" if a.stem != "llama_op18" else "torch_output.bin",
                             "shape": list(ref.shape), "dtype": "float32"},
            "max_abs_diff_ort_vs_torch": float(np.abs(got - ref).max()),
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                         "onnx": onnx.__version__, "onnxruntime": ort.__version__}}
    with open(os.path.join(out, a.stem + ".json"), "w") as f:
        json.dump(side, f, indent=2)
    print(json.dumps(side, indent=1))


if __name__ == "__main__":
    main()
