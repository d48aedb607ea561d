#!/usr/bin/env python3
"""Checks bench/pi0_reference.py against openpi's own PyTorch pi0 (PI0Pytorch) on the CPU, at a small shape openpi's
module can be built at, with the same weights (mapped from tprof's names to openpi's) and the same inputs.

openpi's PyTorch model needs its patched transformers 4.53.2 (openpi's models_pytorch/transformers_replace copied
over it) and torch; its JAX modules are not needed (stand-in modules give the model sizes, all they are read for):
    OPENPI_SRC=/path/to/openpi/src python tools/check_pi0_openpi.py
openpi fixes some sizes in PaliGemmaWithExpertModel (the vocabulary 257152, the vision MLP 4304, the projector's
2048 outputs, hence a prefix width of 2048); the rest is small. Prints the actions' relative L2 distance and exits
1 above 1e-5. With a folder argument it also writes the weights under openpi's names (openpi.safetensors, the LM
heads left out as openpi's tied copies) and tprof's (tprof.safetensors) and the model as tprof JSON
(pipeline.json), for tprof's openpi loader to be checked against: `tprof bench --model DIR/pipeline.json
--weights DIR/openpi.safetensors` reads the first.
"""
import math
import os
import sys
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
sys.path.insert(0, os.environ.get("OPENPI_SRC", "/tmp/oprepl/src"))
import pi0_reference as R  # noqa: E402

# openpi.models.gemma (JAX) only provides get_config: a stand-in with the fields PaliGemmaWithExpertModel reads
C = dict(cams=2, img=28, patch=14, v_width=1152, v_depth=1, v_heads=16, v_mlp=4304, width=2048, depth=2, heads=8,
         kv_heads=1, head_dim=256, mlp=64, vocab=257152, lang=5, e_width=64, e_mlp=48, horizon=6, action_dim=7,
         state_dim=7, steps=3)
Cfg = types.SimpleNamespace
gem = types.ModuleType("openpi.models.gemma")
gem.get_config = lambda v: (Cfg(width=C["width"], depth=C["depth"], mlp_dim=C["mlp"], num_heads=C["heads"],
                                num_kv_heads=C["kv_heads"], head_dim=C["head_dim"]) if v == "vlm" else
                            Cfg(width=C["e_width"], depth=C["depth"], mlp_dim=C["e_mlp"], num_heads=C["heads"],
                                num_kv_heads=C["kv_heads"], head_dim=C["head_dim"]))
sys.modules["openpi.models.gemma"] = gem
models = types.ModuleType("openpi.models")
models.gemma = gem
sys.modules["openpi.models"] = models
pre = types.ModuleType("openpi.models_pytorch.preprocessing_pytorch")
sys.modules["openpi.models_pytorch.preprocessing_pytorch"] = pre

from transformers.models.auto import CONFIG_MAPPING  # noqa: E402

# openpi builds the default PaliGemma config (SigLIP So400m: 27 layers) and sets a few fields: the vision tower
# made small here through the default config's vision part (its width stays 1152: the MLP 4304 is fixed too)
_make = CONFIG_MAPPING["paligemma"]


class SmallPaliGemma:
    def __call__(self, *a, **k):
        cfg = _make(*a, **k)
        cfg.vision_config.num_hidden_layers = C["v_depth"]
        cfg.vision_config.image_size = C["img"]
        cfg.vision_config.patch_size = C["patch"]
        return cfg


CONFIG_MAPPING._extra_content["paligemma"] = SmallPaliGemma()  # noqa: SLF001

from openpi.models_pytorch.pi0_pytorch import PI0Pytorch  # noqa: E402


def main():
    torch.manual_seed(0)
    config = Cfg(pi05=False, paligemma_variant="vlm", action_expert_variant="expert", dtype="float32",
                 action_dim=C["action_dim"], action_horizon=C["horizon"], pytorch_compile_mode=None)
    m = PI0Pytorch(config).eval()
    p = R.make_params(C, 0)
    inp = R.make_inputs(C, 2, 1)
    pe = "paligemma_with_expert."
    vt = pe + "paligemma.model.vision_tower.vision_model."
    mapped = {}
    V = C["v_width"]
    mapped[vt + "embeddings.patch_embedding.weight"] = p["vision.patch_embed.proj.weight"]
    mapped[vt + "embeddings.patch_embedding.bias"] = p["vision.patch_embed.proj.bias"]
    mapped[vt + "embeddings.position_embedding.weight"] = p["vision.pos_embed"][0]
    for i in range(C["v_depth"]):
        b, o = f"vision.blocks.{i}.", f"{vt}encoder.layers.{i}."
        for x, y in (("norm1", "layer_norm1"), ("norm2", "layer_norm2"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2"),
                     ("attn.proj", "self_attn.out_proj")):
            mapped[o + y + ".weight"], mapped[o + y + ".bias"] = p[b + x + ".weight"], p[b + x + ".bias"]
        w, bb = p[b + "attn.qkv.weight"], p[b + "attn.qkv.bias"]
        for k, n in enumerate("qkv"):
            mapped[o + f"self_attn.{n}_proj.weight"] = w[k * V:(k + 1) * V]
            mapped[o + f"self_attn.{n}_proj.bias"] = bb[k * V:(k + 1) * V]
    mapped[vt + "post_layernorm.weight"], mapped[vt + "post_layernorm.bias"] = p["vision.norm.weight"], p["vision.norm.bias"]
    pj = pe + "paligemma.model.multi_modal_projector.linear."
    mapped[pj + "weight"], mapped[pj + "bias"] = p["vision.head.weight"], p["vision.head.bias"]
    lm = pe + "paligemma.model.language_model."
    mapped[lm + "embed_tokens.weight"] = p["prefix.model.embed_tokens.weight"]
    for k, v in p.items():
        if k.startswith("prefix.model.layers."):
            mapped[lm + k[len("prefix.model."):]] = v
        elif k.startswith("expert.model."):
            mapped[pe + "gemma_expert.model." + k[len("expert.model."):]] = v
        elif k.startswith("expert.") and not k.startswith("expert.model"):
            mapped[k[len("expert."):]] = v
    sd = m.state_dict()
    missing = [k for k in mapped if k not in sd]
    if missing:
        sys.exit(f"names openpi does not have: {missing[:5]}")
    for k, v in mapped.items():
        if sd[k].shape != v.shape:
            sys.exit(f"{k}: openpi {tuple(sd[k].shape)}, tprof {tuple(v.shape)}")
    m.load_state_dict(mapped, strict=False)
    unset = [k for k in sd if k not in mapped and "lm_head" not in k and "language_model.norm" not in k]
    if unset:
        sys.exit(f"openpi parameters left unmapped: {unset[:5]}")
    B = 2
    images = [inp["images"][:, c] for c in range(C["cams"])]
    img_masks = [torch.ones(B, dtype=torch.bool) for _ in range(C["cams"])]
    lang_masks = torch.arange(C["lang"])[None, :] < inp["lang_valid"][:, None]
    state = torch.zeros(B, C["action_dim"])
    state[:, : C["state_dim"]] = inp["state"]
    m._preprocess_observation = lambda obs, train: (images, img_masks, inp["ids"], lang_masks, state)  # noqa: SLF001
    with torch.no_grad():
        got = m.sample_actions(torch.device("cpu"), Cfg(state=state), noise=inp["noise"].clone(), num_steps=C["steps"])
        want = R.sample_actions(C, p, inp)
    rel = ((got - want).norm() / want.norm()).item()
    print(f"pi0 (small, {sum(v.numel() for v in p.values())} values): openpi PI0Pytorch against "
          f"bench/pi0_reference.py, actions relative L2 {rel:.3e} (torch {torch.__version__})")
    if len(sys.argv) > 1:  # DIR: the same weights under openpi's names and tprof's, and the model's tprof JSON
        import json
        from safetensors.torch import save_file
        d = sys.argv[1]
        os.makedirs(d, exist_ok=True)
        save_file({k: v.contiguous() for k, v in m.state_dict().items() if "lm_head" not in k},
                  os.path.join(d, "openpi.safetensors"))
        save_file({k: v.contiguous() for k, v in p.items()}, os.path.join(d, "tprof.safetensors"))
        with open(os.path.join(d, "pipeline.json"), "w") as f:
            json.dump(dict(family="pipeline", name="pi0-openpi-check", **C), f)
        print(f"wrote {d}/openpi.safetensors, tprof.safetensors, pipeline.json")
    sys.exit(0 if rel <= 1e-5 else 1)


if __name__ == "__main__":
    main()
