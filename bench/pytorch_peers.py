#!/usr/bin/env python3
"""Side-by-side benchmark: timm's ViT in PyTorch against tprof's engines, same GPU, same batch, one run.

Runs on the GPU machine (torch, timm present there; see docs/device.md):
    python3 bench/pytorch_peers.py --tprof build/tprof --json out/peers.json
PyTorch variants (each timed with CUDA events around every forward pass after a warm-up, median and spread):
    eager      FP16 weights and inputs, torch.inference_mode
    graph      the eager FP16 forward captured once in a CUDA graph and replayed
    compile    torch.compile(mode="max-autotune") (minutes of autotuning; --skip compile to leave it out)
    fp8        the blocks' Linear layers through torch._scaled_mm with E4M3 weights (per-tensor scales, offline)
               and dynamic per-tensor activation scales (amax / 448 computed every call), FP16 elsewhere
    sdpa       F.scaled_dot_product_attention alone at one block's shape (B, H, T, D), FP16: the attention
               baseline of issue 5 (on an H200 PyTorch dispatches it to cuDNN's or its flash kernel)
Then `tprof bench` runs the same model and batch in the precisions asked, and the script prints every median and
the ratios against PyTorch eager FP16 and torch.compile. The JSON holds every sample, the versions, the GPU and
the exact commands. Weights are timm's random init (seed 0) in both; only speed is compared here (tprof's own
accuracy check against its FP32 reference is in its JSON).
Last, each speed target (--targets, by default issue 6's: tprof fp16 1.7x eager and 1.55x compile, fp8 2.7x eager)
as the time it asks for, beside tprof's median and tprof's roofline floor for that engine measured in the same run
(`tprof bench --json`: results[].roofline, src/profile/roofline.h): a target below the floor asks for more than
every op at the measured GEMM peak and copy rate.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import timm


def time_cuda(fn, warmup_s=1.0, iters=50):
    """Median/min/max of per-call GPU time in ms (CUDA events around each call), after warmup_s of calls."""
    t0 = time.time()
    while time.time() - t0 < warmup_s:
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ms = [a.elapsed_time(b) for a, b in ev]
    return {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms), "samples_ms": ms}


class Fp8Linear(nn.Module):
    """y = x @ W^T + b with E4M3 operands: W quantized once (amax / 448), x quantized every call (dynamic
    per-tensor scale), torch._scaled_mm with FP32 accumulation and FP16 output."""

    def __init__(self, lin: nn.Linear):
        super().__init__()
        w = lin.weight.detach().float()
        self.w_scale = (w.abs().max() / 448.0).clamp(min=1e-12).reshape(())
        self.wq = (w / self.w_scale).to(torch.float8_e4m3fn).t()  # (K, N) column-major for _scaled_mm
        self.bias = lin.bias.detach().half() if lin.bias is not None else None

    def forward(self, x):
        shp = x.shape
        x2 = x.reshape(-1, shp[-1])
        x_scale = (x2.abs().amax().float() / 448.0).clamp(min=1e-12)
        xq = (x2.float() / x_scale).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(xq, self.wq, scale_a=x_scale, scale_b=self.w_scale, bias=self.bias,
                             out_dtype=torch.float16)
        return y.reshape(*shp[:-1], -1)


def to_fp8(model):
    for blk in model.blocks:
        blk.attn.qkv = Fp8Linear(blk.attn.qkv)
        blk.attn.proj = Fp8Linear(blk.attn.proj)
        blk.mlp.fc1 = Fp8Linear(blk.mlp.fc1)
        blk.mlp.fc2 = Fp8Linear(blk.mlp.fc2)
    return model


def run_tprof(tprof, model, batch, precisions, extra):
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "tprof.json")
        cmd = [tprof, "bench", "--model", model, "--batch", str(batch), "--precision", precisions, "--json", js] + extra
        print("$ " + " ".join(cmd), flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True)
        sys.stdout.write(p.stdout[-6000:])
        if p.returncode != 0:
            sys.stderr.write(p.stderr)
            raise SystemExit(f"tprof bench failed with exit {p.returncode}")
        with open(js) as f:
            return cmd, json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vit_base_patch16_224")
    ap.add_argument("--tprof-model", default="vit-b16")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--tprof", default="build/tprof")
    ap.add_argument("--precisions", default="fp16,bf16,fp8")
    ap.add_argument("--tprof-args", default="", help="extra arguments for tprof bench")
    ap.add_argument("--skip", default="", help="comma list of PyTorch variants to leave out (e.g. compile)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--json", default=None)
    ap.add_argument("--targets", default="fp16:eager:1.7,fp16:compile:1.55,fp8:eager:2.7",
                    help="comma list of tprof-precision:eager|compile:speedup to check")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))

    torch.manual_seed(0)
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(0)
    print(f"GPU {gpu}; torch {torch.__version__} (CUDA {torch.version.cuda}); timm {timm.__version__}", flush=True)
    base = timm.create_model(a.model, pretrained=False).eval()
    x = torch.randn(a.batch, 3, base.default_cfg["input_size"][1], base.default_cfg["input_size"][2], device=dev)
    xh = x.half()
    res = {}
    flop = None

    with torch.inference_mode():
        m16 = base.half().to(dev)
        res["pytorch eager fp16"] = time_cuda(lambda: m16(xh), iters=a.iters)
        print(f"pytorch eager fp16: {res['pytorch eager fp16']['median_ms']:.3f} ms", flush=True)

        if "graph" not in skip:
            static_in = xh.clone()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    m16(static_in)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                m16(static_in)
            res["pytorch cuda graph fp16"] = time_cuda(g.replay, iters=a.iters)
            print(f"pytorch cuda graph fp16: {res['pytorch cuda graph fp16']['median_ms']:.3f} ms", flush=True)

        if "sdpa" not in skip:
            blk = m16.blocks[0].attn
            H, D = blk.num_heads, blk.head_dim
            T = m16.patch_embed.num_patches + (1 if getattr(m16, "cls_token", None) is not None else 0)
            q, k, v = (torch.randn(a.batch, H, T, D, device=dev, dtype=torch.float16) for _ in range(3))
            r = time_cuda(lambda: F.scaled_dot_product_attention(q, k, v), iters=200)
            r["shape"] = {"B": a.batch, "H": H, "T": T, "D": D}
            r["tflops"] = 4.0 * a.batch * H * T * T * D / (r["median_ms"] * 1e-3) * 1e-12
            res["pytorch sdpa fp16 (one layer)"] = r
            print(f"pytorch sdpa fp16 B{a.batch} H{H} T{T} D{D}: {r['median_ms'] * 1e3:.1f} us "
                  f"({r['tflops']:.0f} TFLOP/s)", flush=True)

    if "fp8" not in skip:
        with torch.inference_mode():
            m8 = to_fp8(timm.create_model(a.model, pretrained=False).eval().half().to(dev))
            res["pytorch fp8 (_scaled_mm, dynamic scales)"] = time_cuda(lambda: m8(xh), iters=a.iters)
        print(f"pytorch fp8: {res['pytorch fp8 (_scaled_mm, dynamic scales)']['median_ms']:.3f} ms", flush=True)

    if "compile" not in skip:
        t0 = time.time()
        mc = torch.compile(base.half().to(dev), mode="max-autotune")
        with torch.inference_mode():
            mc(xh)
            res["pytorch compile max-autotune fp16"] = time_cuda(lambda: mc(xh), iters=a.iters)
        res["pytorch compile max-autotune fp16"]["compile_s"] = time.time() - t0
        print(f"pytorch compile max-autotune fp16: {res['pytorch compile max-autotune fp16']['median_ms']:.3f} ms "
              f"(compiled in {time.time() - t0:.0f} s)", flush=True)

    cmd, tj = run_tprof(a.tprof, a.tprof_model, a.batch, a.precisions, a.tprof_args.split())
    for r in tj["results"]:
        res[f"tprof {r['precision']}"] = {"median_ms": r["latency"]["median_ms"], "min_ms": r["latency"]["min_ms"],
                                          "max_ms": r["latency"]["max_ms"]}
    flop = tj.get("model_flop_per_batch")

    eager = res["pytorch eager fp16"]["median_ms"]
    comp = res.get("pytorch compile max-autotune fp16", {}).get("median_ms")
    print(f"\n{'variant':44s} {'median ms':>10s} {'min':>8s} {'max':>8s} {'vs eager fp16':>14s} {'vs compile':>11s}")
    for k, v in res.items():
        if "one layer" in k:
            continue
        print(f"{k:44s} {v['median_ms']:10.3f} {v['min_ms']:8.3f} {v['max_ms']:8.3f} {eager / v['median_ms']:13.2f}x "
              + (f"{comp / v['median_ms']:10.2f}x" if comp else f"{'-':>11s}"))
    print("(ratios: PyTorch time over each variant's; > 1 means faster than that PyTorch variant)")

    floors = {r["precision"]: (r.get("roofline") or {}).get("floor_ms") for r in tj["results"]}
    targets = []
    print(f"\n{'target':34s} {'needs ms':>9s} {'tprof ms':>9s} {'floor ms':>9s}  verdict")
    for t in filter(None, a.targets.split(",")):
        prec, peer, x = t.split(":")
        ref = eager if peer == "eager" else comp
        got = res.get(f"tprof {prec}", {}).get("median_ms")
        if ref is None or got is None:
            continue
        need, fl = ref / float(x), floors.get(prec)
        if got <= need:
            verdict = "met"
        elif fl and need < fl:
            verdict = "not met: the target is below the roofline floor"
        elif fl:
            verdict = f"not met: needs {fl / need * 100:.0f}% roofline attainment (now {fl / got * 100:.0f}%)"
        else:
            verdict = "not met"
        name = f"tprof {prec} >= {x}x {peer}"
        print(f"{name:34s} {need:9.3f} {got:9.3f} " + (f"{fl:9.3f}" if fl else f"{'-':>9s}") + f"  {verdict}")
        targets.append({"target": name, "needs_ms": need, "tprof_ms": got, "floor_ms": fl, "verdict": verdict})
    print("(floor: tprof's roofline floor for that engine in this run, every op at max(matmul FLOP / GEMM peak, "
          "bytes / copy rate))")

    if a.json:
        out = {"tool": "bench/pytorch_peers.py", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "gpu": gpu, "torch": torch.__version__, "torch_cuda": torch.version.cuda, "timm": timm.__version__,
               "python": platform.python_version(), "model": a.model, "batch": a.batch,
               "command": " ".join(sys.argv), "tprof_command": " ".join(cmd), "tprof_commit": tj.get("commit"),
               "flop_per_batch": flop, "results": res, "targets": targets, "tprof_json": tj}
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
