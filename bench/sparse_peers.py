#!/usr/bin/env python3
"""PyTorch's 2:4 semi-structured sparsity (torch.sparse.to_sparse_semi_structured, its cuSPARSELt backend) against
its dense F.linear, at the shapes of bench/sparse_lab.c, on the same GPU in the same call: the peer row of tprof's
GEMM lab (issue 22). The weight is pruned to 2:4 along K (the 2 largest magnitudes of each 4, as tprof's
formats/sparsity.h), bias in the product. Per shape: median GPU time of each (CUDA events, 10 warmup, `--runs`
timed) and sparse's speedup; failures are recorded, not hidden.

  python3 bench/sparse_peers.py --batch 64 --dtype f16 --json out.json
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F


def prune24(w):
    g = w.reshape(-1, 4)
    keep = g.abs().topk(2, dim=1).indices
    mask = torch.zeros_like(g, dtype=torch.bool).scatter_(1, keep, True)
    return (g * mask).reshape(w.shape)


def timed(fn, runs):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dt = torch.float16 if a.dtype == "f16" else torch.bfloat16
    mv = (197 * a.batch + 7) // 8 * 8
    shapes = [("vit qkv", mv, 2304, 768), ("vit proj", mv, 768, 768), ("vit fc1", mv, 3072, 768),
              ("vit fc2", mv, 768, 3072), ("llama7b q (pp512)", 512, 4096, 4096),
              ("llama7b gate (pp512)", 512, 11008, 4096), ("llama7b down (pp512)", 512, 4096, 11008),
              ("llama7b q (8 tokens)", 8, 4096, 4096), ("llama7b down (8 tokens)", 8, 4096, 11008)]
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "dtype": a.dtype, "runs": a.runs,
           "shapes": []}
    print(f"sparse_peers: {out['gpu']}, torch {torch.__version__}, {a.dtype}")
    print("| shape | M | N | K | dense us | semi-structured us | speedup |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    g = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for name, m, n, k in shapes:
            x = torch.randn(m, k, device="cuda", dtype=dt, generator=g)
            w = prune24(0.03 * torch.randn(n, k, device="cuda", dtype=dt, generator=g))
            b = 0.5 * torch.randn(n, device="cuda", dtype=dt, generator=g)
            row = {"shape": name, "M": m, "N": n, "K": k}
            row["dense_us"] = timed(lambda: F.linear(x, w, b), a.runs)
            try:
                ws = torch.sparse.to_sparse_semi_structured(w)
                y = F.linear(x, ws, b)
                row["rel_l2"] = ((y.float() - F.linear(x, w, b).float()).norm() / F.linear(x, w, b).float().norm()).item()
                row["sparse_us"] = timed(lambda: F.linear(x, ws, b), a.runs)
                row["speedup"] = row["dense_us"] / row["sparse_us"]
            except Exception as e:  # recorded, not hidden
                row["error"] = f"{type(e).__name__}: {e}"[:300]
            out["shapes"].append(row)
            print(f"| {name} | {m} | {n} | {k} | {row['dense_us']:.1f} | "
                  + (f"{row['sparse_us']:.1f} | {row['speedup']:.2f}x |" if "sparse_us" in row else f"- | {row['error']} |"),
                  flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
