#!/usr/bin/env python3
"""Writes the timm golden fixtures that tests/test_model.c checks the CPU executor against.

Runs where torch and timm are installed (the GPU machines; the CPU is used, no GPU needed):
    python3 tools/make_timm_golden.py OUTDIR [NAME ...]   (NAME: only those configurations, no checkpoints)
For each configuration it writes OUTDIR/<name>.safetensors (timm's state_dict, exactly as timm names and
shapes it) and OUTDIR/<name>.io.safetensors ("input" (B,3,S,S) float32 and timm's float32 "output").
Every parameter is perturbed with seeded noise so that biases and LayerNorm affines are not the trivial
0/1 of timm's init (a test on zeros proves nothing). The configurations must match tests/test_model.c.

Then the checkpoint fixtures (CHECKPOINTS below), laid out as a timm model on the Hugging Face hub, made from
image files by timm's own eval transform:
    OUTDIR/<name>/model.safetensors   the state_dict (float32)
    OUTDIR/<name>/config.json         timm's hub config (timm/models/_hub.py save_config_for_hf layout:
                                      architecture, num_classes, num_features, global_pool, model_args,
                                      pretrained_cfg with the data config)
    OUTDIR/<name>/io.safetensors      "input": the images through timm.data.create_transform(
                                      **timm.data.resolve_data_config(model=model)), float32 (B,3,S,S);
                                      "output": timm's float32 logits; metadata: the versions used
The images are the committed PNGs IMAGES (tests/fixtures/preprocess_timm_*.png, written by
tools/check_preprocess_pil.py; read here, never regenerated), opened as timm's loader does:
Image.open(f).convert("RGB"). The script also runs the PIL + numpy emulation of that transform from
tools/check_preprocess_pil.py (the one tprof's C code is checked against) and compares: the maximum
difference is printed per checkpoint, and the script exits with status 1 after writing everything if it is not
0, so that a surprise shows. Both images resize with the horizontal pass first in every Pillow version (Pillow 13
runs the vertical pass first for strong vertical downscales), checked below, so the fixtures do not depend on
the Pillow version.
"""
import json
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
    # SigLIP's shape of ViT as PaliGemma and pi0 use it (issue 21's vision stage): no class token, no pooling (every
    # token normed, the head applied to each), GELU in its tanh form, an MLP of odd width (int(48 * 3.7362) = 179)
    ("timm_vit_tokens_gelu_tanh", dict(img_size=42, patch_size=14, embed_dim=48, depth=2, num_heads=3,
                                       mlp_ratio=3.7362, class_token=False, global_pool="", num_classes=40,
                                       act_layer="gelu_tanh"), 3, torch.float32),
]

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)
IMAGES = ["tests/fixtures/preprocess_timm_a.png", "tests/fixtures/preprocess_timm_b.png"]  # 61x47, 40x73

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# name, VisionTransformer kwargs, data config (pretrained_cfg fields), seed
CHECKPOINTS = [
    ("timm_in1k_crop090",
     dict(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=10),
     dict(interpolation="bicubic", crop_pct=0.9, crop_mode="center", mean=IMAGENET_MEAN, std=IMAGENET_STD),
     4321),
    ("timm_crop100",
     dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=2, mlp_ratio=3.0, class_token=False,
          global_pool="avg", num_classes=6),
     dict(interpolation="bilinear", crop_pct=1.0, crop_mode="center", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
     8765),
]


def pretrained_cfg_for(name, kw, data):
    """The model's pretrained_cfg, as timm's default_cfgs write one for a ViT (timm/models/_pretrained.py
    PretrainedCfg fields; architecture and tag are what a hub model carries)."""
    s = kw["img_size"]
    return {
        "architecture": "vit_tprof_golden_patch%d_%d" % (kw["patch_size"], s),
        "tag": name,
        "custom_load": False,
        "input_size": [3, s, s],
        "fixed_input_size": True,
        "interpolation": data["interpolation"],
        "crop_pct": data["crop_pct"],
        "crop_mode": data["crop_mode"],
        "mean": list(data["mean"]),
        "std": list(data["std"]),
        "num_classes": kw["num_classes"],
        "pool_size": None,
        "first_conv": "patch_embed.proj",
        "classifier": "head",
    }


def hub_config(pretrained_cfg, kw):
    """config.json as timm's save_config_for_hf writes it: the pretrained_cfg without its source fields and
    nulls (pool_size, first_conv, classifier kept), architecture moved to the top level, num_classes,
    num_features and global_pool (a non-empty string) at the top level, then model_args."""
    keep_null = {"pool_size", "first_conv", "classifier"}
    pc = {k: v for k, v in pretrained_cfg.items()
          if (v is not None or k in keep_null) and k not in {"url", "file", "hf_hub_id", "hf_hub_filename", "source"}}
    cfg = {"architecture": pc.pop("architecture"), "num_classes": kw["num_classes"],
           "num_features": kw["embed_dim"], "global_pool": kw.get("global_pool", "token"),
           "model_args": dict(kw), "pretrained_cfg": pc}
    return cfg


def check_pass_order(path, data, img_size):
    """Both Pillow pass orders agree for this image (see the module docstring)."""
    from check_preprocess_pil import load_rgb, pass_order, resized_size, scale_size
    w, h = load_rgb(path).size
    nw, nh = resized_size(w, h, scale_size(img_size, data["crop_pct"]), data["crop_mode"])
    return pass_order(w, h, nw, nh) == "hfirst"


def emulate(paths, data, img_size):
    """The PIL + numpy emulation of timm's eval transform (tools/check_preprocess_pil.py), (B, 3, S, S)."""
    import numpy as np
    from check_preprocess_pil import load_rgb, reference_normalized, reference_rgb8
    xs = []
    for p in paths:
        rgb8 = reference_rgb8(load_rgb(p), img_size, data["crop_pct"], data["interpolation"], data["crop_mode"])
        xs.append(reference_normalized(rgb8, data["mean"], data["std"]))
    return np.stack(xs)


def write_checkpoints(out):
    """The checkpoint fixtures; returns the number of checkpoints whose transform differed from the
    emulation."""
    import numpy as np
    from PIL import Image
    import torchvision
    sys.path.insert(0, TOOLS)
    paths = [os.path.join(ROOT, p) for p in IMAGES]
    for p in paths:
        if not os.path.exists(p):
            sys.exit(f"{p} is missing: it is committed (tools/check_preprocess_pil.py --write-fixtures made it)")
    versions = {"torch": torch.__version__, "timm": timm.__version__, "torchvision": torchvision.__version__,
                "pillow": Image.__version__, "numpy": np.__version__}
    print("checkpoint fixtures: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    surprises = 0
    for name, kw, data, seed in CHECKPOINTS:
        torch.manual_seed(seed)
        model = VisionTransformer(**kw).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                p.add_(0.05 * torch.randn_like(p))
        model.pretrained_cfg = pretrained_cfg_for(name, kw, data)
        data_config = timm.data.resolve_data_config(model=model)
        want = {"input_size": (3, kw["img_size"], kw["img_size"]), "interpolation": data["interpolation"],
                "mean": tuple(data["mean"]), "std": tuple(data["std"]), "crop_pct": data["crop_pct"],
                "crop_mode": data["crop_mode"]}
        got = {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in data_config.items()}
        if got != want:
            print(f"  {name}: SURPRISE: resolve_data_config gave {got}, expected {want}")
            surprises += 1
        transform = timm.data.create_transform(**data_config)
        print(f"  {name}: {transform}".replace("\n", " "))

        imgs = []
        for p in paths:
            with open(p, "rb") as f:
                imgs.append(Image.open(f).convert("RGB"))  # timm's loader
            if not check_pass_order(p, data, kw["img_size"]):
                print(f"  {name}: note: {os.path.basename(p)} resizes vertical pass first in Pillow >= 13")
        x = torch.stack([transform(im) for im in imgs]).to(torch.float32).contiguous()
        emu = emulate(paths, data, kw["img_size"])
        diff = float(np.abs(x.numpy().astype(np.float64) - emu.astype(np.float64)).max())
        nbits = int((x.numpy().view(np.int32) != emu.view(np.int32)).sum())
        print(f"  {name}: timm transform vs PIL/numpy emulation: max |diff| {diff:.3g}, {nbits} of {emu.size} "
              f"values not bit-equal")
        if nbits:
            surprises += 1

        with torch.no_grad():
            y = model(x)
            y64 = model.double()(x.double())
            model.float()
        rel = ((y.double() - y64).norm() / y64.norm()).item()

        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        sd = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
        save_file(sd, os.path.join(d, "model.safetensors"))
        cfg = hub_config(model.pretrained_cfg, kw)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        meta = dict(versions, images=",".join(IMAGES), note="input = timm eval transform of the images; "
                    "output = timm fp32 logits")
        save_file({"input": x, "output": y.float().contiguous()}, os.path.join(d, "io.safetensors"), metadata=meta)

        # config.json must give back the data config the input was made with (timm's reading of it)
        with open(os.path.join(d, "config.json")) as f:
            back = timm.data.resolve_data_config(pretrained_cfg=json.load(f)["pretrained_cfg"])
        back = {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in back.items()}
        if back != want:
            print(f"  {name}: SURPRISE: config.json resolves to {back}")
            surprises += 1
        # and its layout should be what timm itself writes for this model
        try:
            import pathlib
            import tempfile
            from timm.models._hub import save_config_for_hf
            with tempfile.TemporaryDirectory() as t:
                tp = pathlib.Path(t) / "config.json"
                save_config_for_hf(model, tp, model_args=dict(kw))
                theirs = json.loads(tp.read_text())
            if theirs != cfg:
                print(f"  {name}: note: timm's save_config_for_hf writes {json.dumps(theirs, sort_keys=True)}")
        except Exception as e:  # informational only: the fixture above is already written
            print(f"  {name}: note: timm's save_config_for_hf not compared ({type(e).__name__}: {e})")

        print(f"  {name}: {len(sd)} tensors, input {tuple(x.shape)}, output {tuple(y.shape)}, |y| {y.norm():.4f}, "
              f"timm fp32 vs fp64 relative L2 {rel:.2e}")
    return surprises


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    only = set(sys.argv[2:])  # names given: only those configurations (the committed others stay as they are)
    os.makedirs(out, exist_ok=True)
    print(f"torch {torch.__version__}, timm {timm.__version__}")
    for name, kw, batch, dtype in CONFIGS:
        if only and name not in only:
            continue
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
    surprises = 0 if only else write_checkpoints(out)
    if surprises:
        print(f"FAILED: {surprises} surprise(s) above (the fixtures were written all the same)")
        sys.exit(1)


if __name__ == "__main__":
    main()
