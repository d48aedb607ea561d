#!/usr/bin/env python3
"""Writes the timm golden fixtures that tests/test_model.c checks the CPU executor against.

Runs where torch and timm are installed (the GPU machines; the CPU is used, no GPU needed):
    python3 tools/make_timm_golden.py OUTDIR
For each configuration it writes OUTDIR/<name>.safetensors (timm's state_dict, exactly as timm names and
shapes it) and OUTDIR/<name>.io.safetensors ("input" (B,3,S,S) float32 and timm's float32 "output").
Every parameter is perturbed with seeded noise so that biases and LayerNorm affines are not the trivial
0/1 of timm's init (a test on zeros proves nothing). The configurations must match tests/test_model.c.
"""
import os
import sys

import torch
import timm
from safetensors.torch import save_file
from timm.models.vision_transformer import VisionTransformer

CONFIGS = [
    # name, constructor kwargs, batch, dtype stored in the checkpoint
    ("timm_vit_token", dict(img_size=48, patch_size=16, embed_dim=64, depth=2, num_heads=2, num_classes=10), 3,
     torch.float32),
    ("timm_vit_avg", dict(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, mlp_ratio=2.5,
                          class_token=False, global_pool="avg", num_classes=7), 2, torch.bfloat16),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    os.makedirs(out, exist_ok=True)
    print(f"torch {torch.__version__}, timm {timm.__version__}")
    for name, kw, batch, dtype in CONFIGS:
        torch.manual_seed(1234)
        model = VisionTransformer(**kw).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                p.add_(0.05 * torch.randn_like(p))
                # the checkpoint stores dtype; the reference output is computed from exactly those values
                p.copy_(p.to(dtype).to(torch.float32))
            x = torch.randn(batch, 3, kw["img_size"], kw["img_size"], dtype=torch.float32)
            y = model(x)
            y64 = model.double()(x.double())
        sd = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
        save_file(sd, os.path.join(out, name + ".safetensors"))
        save_file({"input": x.contiguous(), "output": y.float().contiguous()},
                  os.path.join(out, name + ".io.safetensors"))
        rel = ((y.double() - y64).norm() / y64.norm()).item()
        print(f"{name}: {len(sd)} tensors ({dtype}), output {tuple(y.shape)}, |y| {y.norm():.4f}, "
              f"timm fp32 vs fp64 relative L2 {rel:.2e}")


if __name__ == "__main__":
    main()
