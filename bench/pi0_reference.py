#!/usr/bin/env python3
"""pi0's inference in plain PyTorch, with tprof's parameter names: the reference for issue 21's pipeline.

The math is openpi's (Physical-Intelligence/openpi at 15a9616a, src/openpi/models_pytorch/pi0_pytorch.py and its
Gemma files; docs/pipelines.md lists it stage by stage with line references): SigLIP image tokens projected to
the prefix's width, the prefix (images then language tokens scaled by sqrt(width)) through Gemma with attention
bidirectional over the valid prefix, its K/V cache kept; then N Euler steps of the action expert over
[prefix cache ; its own 1 + H tokens] with openpi's block mask, x += dt v from t = 1 down to 0.

Two uses, where torch is installed (the GPU machines, docs/device.md; the golden also runs with Debian's
python3-torch 1.13 on the CPU and safetensors from PyPI):
    python3 bench/pi0_reference.py golden OUTDIR [--config pi0-small]
        fp32 on the CPU: writes OUTDIR/<config>.safetensors (the weights, tprof's names) and
        OUTDIR/<config>.io.safetensors (the inputs, each stage's output and the actions), and prints the fp32
        result's relative L2 distance from the same model in float64.
    python3 bench/pi0_reference.py bench [--config pi0] [--batch 1] [--dtype bf16] [--json FILE]
        on the GPU: the pipeline eager, captured whole in one CUDA graph, and under torch.compile; per-stage and
        end-to-end milliseconds (CUDA events, median of --iters after --warmup), Hz.
Weights are synthesized from --seed (normal(0, 0.02) for matrices and embeddings, small random biases and norm
affines so that no path multiplies by a trivial 0 or 1); nothing is downloaded.
"""
import argparse
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F

CONFIGS = {
    # openpi pi0: SigLIP So400m/14 at 224 on 3 cameras, Gemma-2B prefix over 768 image + 48 language tokens,
    # Gemma-300M-shaped action expert, 50 actions of 32, 10 steps
    "pi0": dict(cams=3, img=224, patch=14, v_width=1152, v_depth=27, v_heads=16, v_mlp=4304,
                width=2048, depth=18, heads=8, kv_heads=1, head_dim=256, mlp=16384, vocab=257152, lang=48,
                e_width=1024, e_mlp=4096, horizon=50, action_dim=32, state_dim=32, steps=10),
    # tprof's small one for the CPU golden: the same structure at awkward sizes (head dim 12 in the vision tower,
    # 2 cameras of 4 tokens, 5 language tokens of which the second sample's last 2 are padding)
    "pi0-small": dict(cams=2, img=28, patch=14, v_width=48, v_depth=2, v_heads=4, v_mlp=100,
                      width=64, depth=2, heads=4, kv_heads=1, head_dim=16, mlp=176, vocab=97, lang=5,
                      e_width=32, e_mlp=80, horizon=6, action_dim=7, state_dim=7, steps=3),
}
LN_EPS = 1e-6   # SigLIP's LayerNorm
RMS_EPS = 1e-6  # Gemma's RMSNorm
ROPE_THETA = 10000.0


def param_shapes(c):
    """tprof's parameter names and shapes (weights (out, in) as torch.nn.Linear)."""
    s = {}
    V, W, g = c["v_width"], c["width"], c["img"] // c["patch"]
    s["vision.patch_embed.proj.weight"] = (V, 3, c["patch"], c["patch"])
    s["vision.patch_embed.proj.bias"] = (V,)
    s["vision.pos_embed"] = (1, g * g, V)
    for i in range(c["v_depth"]):
        b = f"vision.blocks.{i}."
        for n in ("norm1", "norm2"):
            s[b + n + ".weight"] = (V,)
            s[b + n + ".bias"] = (V,)
        s[b + "attn.qkv.weight"], s[b + "attn.qkv.bias"] = (3 * V, V), (3 * V,)
        s[b + "attn.proj.weight"], s[b + "attn.proj.bias"] = (V, V), (V,)
        s[b + "mlp.fc1.weight"], s[b + "mlp.fc1.bias"] = (c["v_mlp"], V), (c["v_mlp"],)
        s[b + "mlp.fc2.weight"], s[b + "mlp.fc2.bias"] = (V, c["v_mlp"]), (V,)
    s["vision.norm.weight"], s["vision.norm.bias"] = (V,), (V,)
    s["vision.head.weight"], s["vision.head.bias"] = (W, V), (W,)  # openpi's multi_modal_projector.linear
    s["prefix.model.embed_tokens.weight"] = (c["vocab"], W)

    def gemma_layers(prefix, w, mlp):
        hd, H, K = c["head_dim"], c["heads"], c["kv_heads"]
        for i in range(c["depth"]):
            b = f"{prefix}.model.layers.{i}."
            s[b + "input_layernorm.weight"] = (w,)
            s[b + "self_attn.q_proj.weight"] = (H * hd, w)
            s[b + "self_attn.k_proj.weight"] = (K * hd, w)
            s[b + "self_attn.v_proj.weight"] = (K * hd, w)
            s[b + "self_attn.o_proj.weight"] = (w, H * hd)
            s[b + "post_attention_layernorm.weight"] = (w,)
            s[b + "mlp.gate_proj.weight"] = (mlp, w)
            s[b + "mlp.up_proj.weight"] = (mlp, w)
            s[b + "mlp.down_proj.weight"] = (w, mlp)

    gemma_layers("prefix", W, c["mlp"])
    E = c["e_width"]
    gemma_layers("expert", E, c["e_mlp"])
    s["expert.model.norm.weight"] = (E,)
    for n, (o, i) in {"state_proj": (E, c["state_dim"]), "action_in_proj": (E, c["action_dim"]),
                      "action_time_mlp_in": (E, 2 * E), "action_time_mlp_out": (E, E),
                      "action_out_proj": (c["action_dim"], E)}.items():
        s[f"expert.{n}.weight"], s[f"expert.{n}.bias"] = (o, i), (o,)
    return s


def make_params(c, seed, device="cpu", dtype=torch.float32):
    """Synthesized weights: matrices and embeddings normal(0, 0.02); biases normal(0, 0.05); LayerNorm weights
    1 + normal(0, 0.1); RMSNorm weights (Gemma's offset w in x_hat (1 + w)) normal(0, 0.1)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    p = {}
    for name, shape in param_shapes(c).items():
        t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
        if name.endswith("layernorm.weight") or name == "expert.model.norm.weight":
            t = 0.1 * t
        elif (".norm" in name or "norm1" in name or "norm2" in name) and name.endswith(".weight"):
            t = 1.0 + 0.1 * t
        elif name.endswith(".bias"):
            t = 0.05 * t
        else:
            t = 0.02 * t
        p[name] = t.to(dtype)
    return p


def make_inputs(c, B, seed, device="cpu"):
    """images (B, cams, 3, S, S) in [-1, 1] as openpi feeds SigLIP; token ids (B, L) with lang_valid (B) valid
    counts (sample 1 of pi0-small ends in 2 pads); state (B, state_dim); noise (B, H, action_dim) N(0, 1)."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    S, L = c["img"], c["lang"]
    images = torch.rand((B, c["cams"], 3, S, S), generator=gen) * 2 - 1
    ids = torch.randint(0, c["vocab"], (B, L), generator=gen)
    valid = torch.full((B,), L, dtype=torch.int64)
    if B > 1 and L > 3:
        valid[1] = L - 2
        ids[1, L - 2:] = 0  # openpi pads prompts with id 0
    state = torch.randn((B, c["state_dim"]), generator=gen)
    noise = torch.randn((B, c["horizon"], c["action_dim"]), generator=gen)
    return {k: v.to(device) for k, v in dict(images=images, ids=ids, lang_valid=valid, state=state,
                                              noise=noise).items()}


def linear(p, name, x, bias=True):
    return F.linear(x, p[name + ".weight"], p[name + ".bias"] if bias else None)


def wide(x):
    """x in at least fp32 (16-bit values widened; fp32 and float64 kept)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def rmsnorm(x, w):
    """Gemma: x_hat (1 + w), statistics and scaling in fp32 (or wider), cast back."""
    xf = wide(x)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS) * (1.0 + wide(w))
    return y.to(x.dtype)


def rope(x, pos, hd):
    """x (B, T, heads, hd), pos (B, T): HF's rotate_half form, cos/sin in fp32."""
    ft = torch.float64 if x.dtype == torch.float64 else torch.float32
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, device=x.device, dtype=ft) / hd))
    ang = pos.to(ft)[..., None] * inv  # (B, T, hd/2)
    emb = torch.cat([ang, ang], -1)[:, :, None, :]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention(q, k, v, mask, scale):
    """q (B, Tq, H, D), k/v (B, Tk, Hkv, D) (grouped-query: each KV head serves H / Hkv query heads), mask (B, Tq,
    Tk) bool; the softmax in fp32 (openpi: the fp32 additive mask promotes it), masked keys at -2.3819763e38."""
    H, Hkv = q.shape[2], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=2)
    v = v.repeat_interleave(H // Hkv, dim=2)
    s = wide(torch.einsum("bqhd,bkhd->bhqk", q, k)) * scale
    s = s.masked_fill(~mask[:, None], -2.3819763e38)
    a = s.softmax(-1).to(v.dtype)
    return torch.einsum("bhqk,bkhd->bqhd", a, v)


def vision(c, p, images):
    """(B, cams, 3, S, S) -> (B, cams * tokens, width): each camera through the ViT, no pooling, the projector."""
    B = images.shape[0]
    x = images.reshape(B * c["cams"], 3, c["img"], c["img"]).to(p["vision.pos_embed"].dtype)
    x = F.conv2d(x, p["vision.patch_embed.proj.weight"], p["vision.patch_embed.proj.bias"], stride=c["patch"])
    x = x.flatten(2).transpose(1, 2) + p["vision.pos_embed"]
    N, T, V = x.shape
    Hv = c["v_heads"]
    for i in range(c["v_depth"]):
        b = f"vision.blocks.{i}."
        h = F.layer_norm(x, (V,), p[b + "norm1.weight"], p[b + "norm1.bias"], LN_EPS)
        q, k, v = linear(p, b + "attn.qkv", h).reshape(N, T, 3, Hv, V // Hv).unbind(2)
        full = torch.ones((N, T, T), dtype=torch.bool, device=x.device)
        h = attention(q, k, v, full, (V // Hv) ** -0.5).reshape(N, T, V)
        x = x + linear(p, b + "attn.proj", h)
        h = F.layer_norm(x, (V,), p[b + "norm2.weight"], p[b + "norm2.bias"], LN_EPS)
        x = x + linear(p, b + "mlp.fc2", F.gelu(linear(p, b + "mlp.fc1", h), approximate="tanh"))
    x = F.layer_norm(x, (V,), p["vision.norm.weight"], p["vision.norm.bias"], LN_EPS)
    return linear(p, "vision.head", x).reshape(B, c["cams"] * T, -1)


def gemma_layer(c, p, b, x, pos, mask, past=None):
    """One Gemma layer; past: the prefix's (K, V) of this layer, read and put before this layer's own. Returns
    the output and this layer's post-RoPE (K, V)."""
    B, T, _ = x.shape
    hd, H, Hkv = c["head_dim"], c["heads"], c["kv_heads"]
    h = rmsnorm(x, p[b + "input_layernorm.weight"])
    q = rope(linear(p, b + "self_attn.q_proj", h, False).reshape(B, T, H, hd), pos, hd)
    k = rope(linear(p, b + "self_attn.k_proj", h, False).reshape(B, T, Hkv, hd), pos, hd)
    v = linear(p, b + "self_attn.v_proj", h, False).reshape(B, T, Hkv, hd)
    K, Vv = (k, v) if past is None else (torch.cat([past[0], k], 1), torch.cat([past[1], v], 1))
    a = attention(q, K, Vv, mask, hd ** -0.5).reshape(B, T, H * hd)
    x = x + linear(p, b + "self_attn.o_proj", a, False)
    h = rmsnorm(x, p[b + "post_attention_layernorm.weight"])
    g = F.gelu(linear(p, b + "mlp.gate_proj", h, False), approximate="tanh")
    x = x + linear(p, b + "mlp.down_proj", g * linear(p, b + "mlp.up_proj", h, False), False)
    return x, (k, v)


def prefix(c, p, img_tokens, ids, lang_valid):
    """Images then language tokens (these scaled by sqrt(width)) through Gemma, bidirectional over the valid
    prefix tokens; returns the per-layer (K, V) cache and the prefix's validity (B, P)."""
    B, L = ids.shape
    lang = p["prefix.model.embed_tokens.weight"][ids] * math.sqrt(c["width"])
    x = torch.cat([img_tokens, lang.to(img_tokens.dtype)], 1)
    pad = torch.cat([torch.ones((B, img_tokens.shape[1]), dtype=torch.bool, device=x.device),
                     torch.arange(L, device=x.device)[None, :] < lang_valid[:, None]], 1)
    pos = pad.long().cumsum(1) - 1
    mask = pad[:, :, None] & pad[:, None, :]
    cache = []
    for i in range(c["depth"]):
        x, kv = gemma_layer(c, p, f"prefix.model.layers.{i}.", x, pos, mask)
        cache.append(kv)
    return cache, pad


def time_embedding(t, dim, device):
    """openpi's sinusoid: periods 4e-3 (4 / 4e-3)^f for f = linspace(0, 1, dim / 2), sin then cos, in float64."""
    frac = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=device)
    period = 4e-3 * (4.0 / 4e-3) ** frac
    x = t.double()[:, None] * (2 * math.pi / period)[None, :]
    return torch.cat([x.sin(), x.cos()], 1)  # float64: the caller casts (openpi: to float32)


def expert_step(c, p, x_t, t, state, cache, pad):
    """The velocity v(x_t, t): the state token and the H action tokens (with the time) through the expert, each
    layer over [the prefix's cache ; its own tokens] with openpi's mask."""
    B, Hn, _ = x_t.shape
    E = c["e_width"]
    dt = p["expert.state_proj.weight"].dtype
    s = linear(p, "expert.state_proj", state.to(dt))[:, None, :]
    a = linear(p, "expert.action_in_proj", x_t.to(dt))
    temb = time_embedding(t, E, x_t.device).to(dt)[:, None, :].expand(B, Hn, E)
    h = linear(p, "expert.action_time_mlp_out", F.silu(linear(p, "expert.action_time_mlp_in", torch.cat([a, temb], -1))))
    x = torch.cat([s, h], 1)
    T = 1 + Hn
    pos = pad.long().sum(1, keepdim=True) + torch.arange(T, device=x.device)[None, :]
    # the suffix's cumulative attention marks [1, 2, 2, ...]: the state sees itself, the actions see all T (made
    # by kernels, no host copy: the pipeline is captured in a CUDA graph; `cum[0] = 1` would copy a host scalar)
    cum = 1 + (torch.arange(T, device=x.device) > 0).long()
    own = (cum[None, :] <= cum[:, None])[None].expand(B, T, T)
    mask = torch.cat([pad[:, None, :].expand(B, T, pad.shape[1]), own], 2)
    for i in range(c["depth"]):
        x, _ = gemma_layer(c, p, f"expert.model.layers.{i}.", x, pos, mask, past=cache[i])
    x = rmsnorm(x, p["expert.model.norm.weight"])[:, -Hn:]
    return wide(linear(p, "expert.action_out_proj", x))


def sample_actions(c, p, inp, stages=None):
    """The whole pipeline; stages (a dict) receives each stage's output for the golden file."""
    img = vision(c, p, inp["images"])
    cache, pad = prefix(c, p, img, inp["ids"], inp["lang_valid"])
    x = wide(inp["noise"])
    # openpi: while t >= -dt / 2, t advanced by float32 additions of dt (tensors on the device: no host copy
    # inside a CUDA graph capture)
    dt = torch.full((), -1.0 / c["steps"], dtype=torch.float32, device=x.device)
    t = torch.ones((), dtype=torch.float32, device=x.device)
    for s in range(c["steps"]):
        v = expert_step(c, p, x, t.expand(x.shape[0]), inp["state"], cache, pad)
        if stages is not None and s == 0:
            stages["velocity_step0"] = v
        x = x + dt.to(x.dtype) * v
        t = t + dt
    if stages is not None:
        stages["vision_out"] = img
        stages["prefix_k_last"] = cache[-1][0]
        stages["prefix_v_last"] = cache[-1][1]
        stages["actions"] = x
    return x


def golden(args):
    from safetensors.torch import save_file
    c = CONFIGS[args.config]
    p = make_params(c, args.seed)
    inp = make_inputs(c, args.batch, args.seed + 1)
    stages = {}
    with torch.no_grad():
        y = sample_actions(c, p, inp, stages)
        p64 = {k: v.double() for k, v in p.items()}
        inp64 = dict(inp, images=inp["images"].double(), state=inp["state"].double(), noise=inp["noise"].double())
        y64 = sample_actions(c, p64, inp64)
    rel = ((y.double() - y64).norm() / y64.norm()).item()
    os.makedirs(args.out, exist_ok=True)
    name = args.config.replace("-", "_")
    save_file({k: v.contiguous() for k, v in p.items()}, os.path.join(args.out, name + ".safetensors"))
    io = {"images": inp["images"], "ids": inp["ids"].float(), "lang_valid": inp["lang_valid"].float(),
          "state": inp["state"], "noise": inp["noise"]}
    io.update(stages)
    meta = {"torch": torch.__version__, "config": json.dumps(c), "seed": str(args.seed),
            "note": "bench/pi0_reference.py golden: fp32 on the CPU; token ids and valid counts stored as fp32"}
    save_file({k: v.float().contiguous() for k, v in io.items()}, os.path.join(args.out, name + ".io.safetensors"),
              metadata=meta)
    print(f"{args.config}: {len(p)} tensors, {sum(v.numel() for v in p.values())} values; actions {tuple(y.shape)}, "
          f"|a| {y.norm():.4f}; fp32 vs float64 relative L2 {rel:.2e}")


def bench(args):
    c = CONFIGS[args.config]
    dev = torch.device("cuda")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = True
    p = make_params(c, args.seed, device="cuda", dtype=dtype)
    inp = make_inputs(c, args.batch, args.seed + 1, device="cuda")
    inp["images"] = inp["images"].to(dtype)

    def timed(fn, n_warm, n_iter):
        for _ in range(n_warm):
            fn()
        torch.cuda.synchronize()
        ms = []
        for _ in range(n_iter):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        return ms

    out = {"config": args.config, "shape": c, "batch": args.batch, "dtype": args.dtype, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "variants": {}}

    def done(name):  # each variant printed and saved as it finishes: a time limit keeps what was measured
        v = out["variants"][name]
        if "end_to_end" in v:
            v["hz"] = 1000.0 / v["end_to_end"]
        print(f"{name:10s} " + ", ".join(f"{a} {b:.3f}" if isinstance(b, float) else f"{a} {b}" for a, b in v.items()),
              flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)

    print(f"pi0 {args.config} batch {args.batch} {args.dtype} on {out['gpu']}, torch {torch.__version__}: "
          f"{sum(v.numel() for v in p.values()) / 1e9:.2f} B parameters made", flush=True)
    with torch.no_grad():
        # eager, stage by stage
        st = {}
        img = vision(c, p, inp["images"])
        cache, pad = prefix(c, p, img, inp["ids"], inp["lang_valid"])
        st["vision"] = timed(lambda: vision(c, p, inp["images"]), args.warmup, args.iters)
        st["prefix"] = timed(lambda: prefix(c, p, img, inp["ids"], inp["lang_valid"]), args.warmup, args.iters)
        t1 = torch.ones(args.batch, device=dev)
        st["expert_step"] = timed(lambda: expert_step(c, p, inp["noise"], t1, inp["state"], cache, pad),
                                  args.warmup, args.iters)
        st["end_to_end"] = timed(lambda: sample_actions(c, p, inp), args.warmup, args.iters)
        out["variants"]["eager"] = {k: statistics.median(v) for k, v in st.items()}
        done("eager")
        # the whole pipeline captured once in a CUDA graph
        y_graph = None
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    sample_actions(c, p, inp)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y_graph = sample_actions(c, p, inp)
            out["variants"]["cuda_graph"] = {"end_to_end": statistics.median(timed(graph.replay, args.warmup,
                                                                                    args.iters))}
        except Exception as e:  # recorded, not hidden
            out["variants"]["cuda_graph"] = {"error": f"{type(e).__name__}: {e}"[:500]}
            y_graph = None
        done("cuda_graph")
        # torch.compile (openpi compiles sample_actions with max-autotune)
        try:
            comp = torch.compile(lambda: sample_actions(c, p, inp), mode=args.compile_mode)
            out["variants"]["compile"] = {"end_to_end": statistics.median(timed(comp, max(args.warmup, 3), args.iters)),
                                          "mode": args.compile_mode}
        except Exception as e:  # recorded, not hidden
            out["variants"]["compile"] = {"error": f"{type(e).__name__}: {e}"[:500]}
        done("compile")
        y_eager = sample_actions(c, p, inp)
        if y_graph is not None:
            out["graph_vs_eager_max_abs"] = (y_graph.float() - y_eager.float()).abs().max().item()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["golden", "bench"])
    ap.add_argument("out", nargs="?", default="tests/fixtures")
    ap.add_argument("--config", default=None, choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--compile-mode", default="max-autotune")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.mode == "golden":
        args.config = args.config or "pi0-small"
        args.batch = args.batch or 2
        golden(args)
    else:
        args.config = args.config or "pi0"
        args.batch = args.batch or 1
        bench(args)


if __name__ == "__main__":
    sys.exit(main())
