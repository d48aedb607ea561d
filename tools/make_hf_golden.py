#!/usr/bin/env python3
"""Writes the HF transformers golden fixtures that tests/test_decoder.c checks the decoder family against.

Runs where torch and transformers are installed (the GPU machines; everything runs on the CPU in float32):
    python3 tools/make_hf_golden.py OUTDIR
For each configuration in CONFIGS it writes, laid out as a checkpoint on the Hugging Face hub:
    OUTDIR/<name>/config.json                  PreTrainedModel.save_pretrained's
    OUTDIR/<name>/model.safetensors            the state_dict (float32); llama_tiny is saved sharded
                                               (model.safetensors.index.json + model-0000N-of-0000M.safetensors)
                                               so that the sharded reader is tested too
    OUTDIR/<name>/io.safetensors               "input_ids" (B, T) as float32; "logits" (B, T, V): the model's
                                               float32 forward over the whole prompt; "gen_ids" (B, G): greedy
                                               generate()'s new tokens (its own KV cache); "gen_logits" (B, G, V):
                                               the logits each of those tokens was chosen from
Weights: transformers' own initialization from a fixed seed, then every RMSNorm weight and every bias perturbed
with seeded noise, so that norms are not the trivial 1 (or 0 for Gemma's 1 + w) and bias paths count.
The configurations must match tests/test_decoder.c.
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

B, T, G = 3, 37, 6

CONFIGS = {
    # GQA 4 heads over 2, llama3 rope scaling with every band used (original context 64: wavelengths 16..64 are
    # the smoothed band at head dim 16), untied head, sharded checkpoint
    "llama_tiny": ("LlamaForCausalLM", transformers.LlamaConfig, dict(
        hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, vocab_size=384, rms_norm_eps=1e-5, max_position_embeddings=2048, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # q/k/v bias, tied embeddings, 6 heads over 2
    "qwen2_tiny": ("Qwen2ForCausalLM", transformers.Qwen2Config, dict(
        hidden_size=48, intermediate_size=112, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
        vocab_size=320, rms_norm_eps=1e-6, max_position_embeddings=2048, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # MQA (1 KV head), head dim 32 != hidden / heads, 1 + w RMSNorm, sqrt(C) embedding scale, GeGLU, tied
    "gemma_tiny": ("GemmaForCausalLM", transformers.GemmaConfig, dict(
        hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
        head_dim=32, vocab_size=352, rms_norm_eps=1e-6, max_position_embeddings=2048, tie_word_embeddings=True,
        hidden_act="gelu_pytorch_tanh", rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # Mistral: Llama's layout under its own architecture name, no sliding window
    "mistral_tiny": ("MistralForCausalLM", transformers.MistralConfig, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
        vocab_size=300, rms_norm_eps=1e-5, max_position_embeddings=2048, tie_word_embeddings=False,
        sliding_window=None, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def build(name, arch, cls, kw):
    torch.manual_seed(1234)
    cfg = cls(**kw)
    cfg.architectures = [arch]
    model = getattr(transformers, arch)._from_config(cfg, attn_implementation="eager").float()
    model.eval()
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
            elif pname.endswith(".bias"):
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return model


def main():
    out = sys.argv[1]
    for name, (arch, cls, kw) in CONFIGS.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        model = build(name, arch, cls, kw)
        shard = "40KB" if name == "llama_tiny" else "1GB"
        model.save_pretrained(d, safe_serialization=True, max_shard_size=shard)
        gen = torch.Generator().manual_seed(7)
        ids = torch.randint(0, kw["vocab_size"], (B, T), generator=gen)
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()
            g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=G, min_new_tokens=G,
                               do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0,
                               eos_token_id=None)
        gen_ids = g.sequences[:, T:]
        gen_logits = torch.stack(g.logits, dim=1).float()
        meta = {"torch": torch.__version__, "transformers": transformers.__version__, "B": str(B), "T": str(T),
                "G": str(G)}
        save_file({"input_ids": ids.float().contiguous(), "logits": logits.contiguous(),
                   "gen_ids": gen_ids.float().contiguous(), "gen_logits": gen_logits.contiguous()},
                  os.path.join(d, "io.safetensors"), metadata=meta)
        files = sorted(os.listdir(d))
        print(f"{name}: {arch}, logits {tuple(logits.shape)}, generated {gen_ids[0].tolist()}; files {files}")
        with open(os.path.join(d, "config.json")) as f:
            print("  config:", json.dumps({k: v for k, v in json.load(f).items() if "rope" in k or "head" in k}))


if __name__ == "__main__":
    main()
