#!/usr/bin/env python3
"""Writes the small seed files of the trace and ONNX-import fuzz harnesses (issue 23) into tests/fuzz/seeds/.

    python3 tools/make_fuzz_seeds.py [--trace-only]
    (needs the packages of tools/requirements-onnx-fixtures.txt unless --trace-only; the committed ONNX seeds
     were made on the GPU machine's Python: torch 2.11, timm 1.0.29, transformers 5.17, onnx 1.23.1)

Why: a libFuzzer harness runs about as many executions per second as its inputs are small. The fixtures the
importers are checked against are 0.1-0.9 MB (tests/fixtures/onnx_vit, onnx_llama, the roofline traces); seeds of
the same structure at a few kB reach the same code 2-30 times faster, which is what makes 10^7 executions per
harness fit on a 2-core machine.

Seeds written:
  trace/vit_b16_6ops.trace.json        the first 6 ops of tests/fixtures/h200_vit-b16_b64_fp16_roofline.trace.json
                                       and the kernel and memset records of those ops (both iterations)
  onnx_import/vit_micro_op17.onnx      tools/make_onnx_vit_fixtures.py --embed-dim 6 --depth 1: vit_op17.onnx
  onnx_import/vit_micro_fp8_qdq_op19.onnx   the same run's FP8 Q/DQ model
  onnx_import/llama_micro_op18.onnx    tools/make_onnx_llama_fixture.py --hidden 16 --heads 2 --kv-heads 1
                                       --layers 1 --inter 32 --vocab 32 (the dynamo exporter)
  onnx_import/gemma_micro_op18.onnx    the same with --arch gemma --tie --head-dim 8
The dynamo exports' per-node metadata_props and doc strings (source locations, about 2 kB a node) are removed:
the importer reads neither."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")


def trace_seed():
    src = os.path.join(ROOT, "tests", "fixtures", "h200_vit-b16_b64_fp16_roofline.trace.json")
    d = json.load(open(src))
    d["ops"] = d["ops"][:6]
    d["records"] = [r for r in d["records"] if r["op"] < 6]
    os.makedirs(os.path.join(SEEDS, "trace"), exist_ok=True)
    with open(os.path.join(SEEDS, "trace", "vit_b16_6ops.trace.json"), "w") as f:
        f.write(json.dumps(d, separators=(",", ":")))


def strip_metadata(path):
    import onnx
    m = onnx.load(path)
    for n in m.graph.node:
        n.ClearField("metadata_props")
        n.ClearField("doc_string")
    onnx.save(m, path)


def onnx_seeds():
    out = os.path.join(SEEDS, "onnx_import")
    os.makedirs(out, exist_ok=True)
    tools = os.path.join(ROOT, "tools")
    dec = ["--hidden", "16", "--heads", "2", "--kv-heads", "1", "--layers", "1", "--inter", "32", "--vocab", "32"]
    with tempfile.TemporaryDirectory() as tmp:
        run = lambda *a: subprocess.run([sys.executable] + list(a), check=True, stdout=subprocess.DEVNULL)
        run(os.path.join(tools, "make_onnx_vit_fixtures.py"), tmp + "/vit", "--embed-dim", "6", "--depth", "1")
        run(os.path.join(tools, "make_onnx_llama_fixture.py"), tmp + "/llama", *dec, "--stem", "llama_micro_op18")
        run(os.path.join(tools, "make_onnx_llama_fixture.py"), tmp + "/gemma", *dec, "--arch", "gemma", "--tie",
            "--head-dim", "8", "--stem", "gemma_micro_op18")
        for src, dst in (("vit/vit_op17.onnx", "vit_micro_op17.onnx"),
                         ("vit/vit_fp8_qdq_op19.onnx", "vit_micro_fp8_qdq_op19.onnx"),
                         ("llama/llama_micro_op18.onnx", "llama_micro_op18.onnx"),
                         ("gemma/gemma_micro_op18.onnx", "gemma_micro_op18.onnx")):
            with open(os.path.join(tmp, src), "rb") as f, open(os.path.join(out, dst), "wb") as g:
                g.write(f.read())
            if dst.startswith(("llama", "gemma")):
                strip_metadata(os.path.join(out, dst))


if __name__ == "__main__":
    trace_seed()
    if "--trace-only" not in sys.argv[1:]:
        onnx_seeds()
