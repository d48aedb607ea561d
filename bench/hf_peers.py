#!/usr/bin/env python3
"""Side-by-side benchmark: Hugging Face transformers' decoders (LlamaForCausalLM, SDPA attention) on the GPU, at the
shapes of tprof's decoder presets, for `tprof bench --model <preset>` to be compared against in the same run.

Runs on the GPU machine (torch 2.11, transformers 5.17 there; no network: the model is built from a config with
synthesized weights, nothing is downloaded; see docs/device.md):
    python3 bench/hf_peers.py --model llama-3.2-1b --prompt 512 --gen 128 --batch 1 --json out/hf_peers.json
Model: transformers.LlamaConfig at the preset's shape (--layers N, --vocab N override num_hidden_layers and
vocab_size, as tprof's knobs do), LlamaForCausalLM._from_config(attn_implementation="sdpa", dtype=--dtype), built on
the GPU under torch.manual_seed(0) with the model's own initialization (normal(0, initializer_range) for Linear and
Embedding, ones for the RMSNorms, tied LM head where the preset ties it), eval mode, everything under torch.no_grad()
as generate() runs. The prompt: random token ids in [0, vocab) from --seed, one per sequence of the batch.
Measured, each with CUDA events:
    prefill    transformers' generate() first step: a fresh DynamicCache(config=model.config), the all-ones
               attention mask and position ids generate() builds, logits_to_keep=1, then the argmax (token t0);
               median and p10/p90 (= time to first token) after --warmup-s of warm-up calls, prompt tokens/s
    decode     --gen G one-token steps: step s reads t_s, appends it to the KV cache (which ends holding P + G
               positions) and chooses t_(s+1) greedily (argmax fed back), as tprof bench's decode does. Variants:
      eager              the model called step by step with a DynamicCache, as generate() does in eager mode (the
                         2D attention mask grown by one column and the position ids advanced each step, as
                         generate()'s _update_model_kwargs_for_generation does); each step (those host-side updates,
                         the forward and the argmax) between two events; timed is the second of two whole runs (the
                         first, kept in the JSON as cold_run, meets each KV length for the first time: ~50 ms a step
                         there in a test on an H100, against ~3 ms warm, per-shape setup in the attention path)
      static_cuda_graph  a StaticCache(max_cache_len = P + G), the one-token step (forward + argmax, input ids and
                         position ids in static tensors) captured once in a torch.cuda.CUDAGraph after a few warm-up
                         steps on a side stream, the cache reset and prefilled again, then G replays, the next token
                         copied into the static input before each one; each replay between two events. In
                         transformers 5.17 the forward takes no cache_position: each StaticLayer keeps its write
                         position in a device tensor (cumulative_length) that the step advances in place, so the
                         captured graph advances the cache by itself (checked: the cache holds P + G after the run)
      compile            torch.compile(model, mode="reduce-overhead", fullgraph=False) called on the same static-cache
                         step (torch.compiler.cudagraph_mark_step_begin() before each call, the logits cloned out of
                         the CUDA graph's output buffer before the next call can overwrite them); --compile-warmup
                         steps compile and record the graphs, then the cache is reset and prefilled again and G steps
                         are timed
      generate           model.generate(max_new_tokens=G, min_new_tokens=G, do_sample=False) with the default
                         settings otherwise (DynamicCache, no compilation), once after an identical warm-up call (its
                         time kept as cold_total_ms), timed end to end (wall clock around it with synchronizes, and
                         events): ms and tokens/s including the prefill; its JSON also holds an estimate of its decode
                         step, (total - prefill median) / (G - 1)
    Each decode variant runs in its own try/except: a failure is printed and recorded (exception text and traceback)
    and the others still run; the exit code is 0 unless the arguments are bad (2) or nothing can run at all (1: no
    CUDA device, torch/transformers missing, the model cannot be built).
    For each variant: median, p90/p95/p99 ms per step, tokens/s = batch / median (llama-bench's tg<G>), the greedy
    tokens of sequence 0 (first 16, t0 .. t15; all of them in the JSON) and where they first differ from eager's,
    with eager's top-1 minus top-2 logit there (synthesized weights give flat logits: near ties, where one fp16 ulp
    of difference between kernels picks the other token, are common; such a difference is not an error).
    The static-cache variants attend over all P + G cache positions every step (a mask hides the empty ones), which
    is how transformers' StaticCache works.
The floor of a decode step: bytes read / the device-to-device copy rate measured in this run (a 1 GiB tensor
.copy_(), bytes read + written, median of 20). Bytes: every parameter except the token embedding table, plus one
embedding row per sequence, the LM head counted once even where it is tied to the embedding; plus the KV cache at the
middle context C = P + G/2: 2 x layers x kv_heads x head_dim x bytes x C x batch. Each variant's median / floor is its
"x floor" (for generate, its end-to-end time per generated token, prefill included).
The JSON (--json FILE) holds every number: GPU name, driver, SMs, memory, torch / CUDA / cuDNN / transformers /
Python versions, the exact command line, the date (UTC), the model config, the shapes, every sample.
"""
import argparse
import gc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import traceback

try:
    import torch
    import transformers
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, StaticCache
    _IMPORT_ERROR = None
except Exception as _e:  # reported by main() after the arguments are parsed (so --help works anywhere)
    torch = transformers = None
    _IMPORT_ERROR = _e

TOOL = "bench/hf_peers.py"
VARIANTS = ("eager", "generate", "static_cuda_graph", "compile")  # run and printed in this order

# tprof's decoder presets (src/models/decoder.c), as transformers.LlamaConfig keyword arguments
_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
PRESETS = {
    # meta-llama/Llama-3.2-1B
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, rms_norm_eps=1e-5,
                         tie_word_embeddings=True, rope_parameters=dict(_LLAMA3_ROPE, factor=32.0),
                         max_position_embeddings=131072),
    # meta-llama/Llama-3.1-8B
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, rms_norm_eps=1e-5,
                         tie_word_embeddings=False, rope_parameters=dict(_LLAMA3_ROPE, factor=8.0),
                         max_position_embeddings=131072),
    # meta-llama/Llama-2-7b-hf
    "llama-2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=32, head_dim=128, vocab_size=32000, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                       max_position_embeddings=4096),
}
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


# ----------------------------------------------------------------------------------------------------------------
# statistics and timing

def percentile(xs, q):
    """q-th percentile (0..100) of xs, linear interpolation between the closest ranks (numpy's default)."""
    s = sorted(xs)
    if not s:
        return None
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats(ms):
    """The summary of a list of samples in ms (tprof bench's latency fields, plus p10)."""
    if not ms:
        return None
    mean = statistics.fmean(ms)
    sd = statistics.stdev(ms) if len(ms) > 1 else 0.0
    return {"runs": len(ms), "min_ms": min(ms), "max_ms": max(ms), "mean_ms": mean, "median_ms": statistics.median(ms),
            "p10_ms": percentile(ms, 10), "p90_ms": percentile(ms, 90), "p95_ms": percentile(ms, 95),
            "p99_ms": percentile(ms, 99), "stddev_ms": sd, "cov": sd / mean if mean > 0 else None}


def event_pair():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def time_cuda(fn, warmup_s, iters):
    """Per-call GPU time in ms (CUDA events around each call), after warmup_s of calls (at least 2)."""
    t0, n = time.time(), 0
    while n < 2 or time.time() - t0 < warmup_s:
        fn()
        n += 1
    torch.cuda.synchronize()
    ev = [event_pair() for _ in range(iters)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in ev], n


def copy_rate(dev, nbytes=1 << 30, iters=20):
    """Device-to-device copy rate: a 1 GiB tensor .copy_() into another, bytes read + written, median of iters."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    src.fill_(1)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    ev = [event_pair() for _ in range(iters)]
    for a, b in ev:
        a.record()
        dst.copy_(src)
        b.record()
    torch.cuda.synchronize()
    ms = [a.elapsed_time(b) for a, b in ev]
    del src, dst
    torch.cuda.empty_cache()
    med = statistics.median(ms)
    return {"bytes_per_copy": 2 * nbytes, "tensor_bytes": nbytes, "median_ms": med, "samples_ms": ms,
            "gbps": 2 * nbytes / (med * 1e-3) / 1e9}


def free_cuda():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------------------------
# GPU and software facts

def driver_version():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
                           capture_output=True, text=True, timeout=20)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip().splitlines()[0].strip()
    except Exception:
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            line = f.readline()
        for tok in line.split():
            if tok.count(".") >= 1 and tok.replace(".", "").isdigit():
                return tok
    except Exception:
        pass
    return None


def gpu_facts():
    p = torch.cuda.get_device_properties(0)
    cudnn = None
    try:
        cudnn = torch.backends.cudnn.version()
    except Exception:
        pass
    return {"gpu": torch.cuda.get_device_name(0), "driver": driver_version(),
            "compute_capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
            "memory_gib": p.total_memory / 2**30, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cudnn": cudnn, "transformers": transformers.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "sdpa_backends_enabled": sdpa_backends()}


def sdpa_backends():
    r = {}
    for k in ("flash", "mem_efficient", "math", "cudnn"):
        f = getattr(torch.backends.cuda, f"{k}_sdp_enabled", None)
        try:
            r[k] = bool(f()) if f is not None else None
        except Exception:
            r[k] = None
    return r


# ----------------------------------------------------------------------------------------------------------------
# the model

def make_config(a):
    kw = dict(PRESETS[a.model])
    if a.layers is not None:
        kw["num_hidden_layers"] = a.layers
    if a.vocab is not None:
        kw["vocab_size"] = a.vocab
    cfg = LlamaConfig(**kw)
    cfg.architectures = ["LlamaForCausalLM"]
    return cfg


def build_model(cfg, dtype, dev):
    """LlamaForCausalLM with its own initialization under torch.manual_seed(0), built on the GPU (the CUDA RNG draws
    the weights); if that fails, built on the CPU (the CPU RNG: other weights) and moved."""
    note = "built on the GPU (torch.device context), CUDA RNG"
    torch.manual_seed(0)
    try:
        with torch.device(dev):
            model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    except Exception as e:
        print(f"building on the GPU failed ({type(e).__name__}: {e}); building on the CPU and moving", flush=True)
        free_cuda()
        torch.manual_seed(0)
        model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=dtype).to(dev)
        note = f"built on the CPU (CPU RNG) and moved; GPU build failed: {type(e).__name__}: {e}"
    model.eval()
    return model, note


def weight_bytes(model, batch):
    """Parameter bytes a decode step reads: all but the embedding table, + one embedding row per sequence, + the LM
    head once (tied or not). model.parameters() yields a tied parameter once."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    tied = emb.data_ptr() == head.data_ptr()
    other = sum(p.numel() * p.element_size() for p in model.parameters() if p is not emb and p is not head)
    row = emb.shape[1] * emb.element_size()
    head_b = head.numel() * head.element_size()
    uniq = sum(p.numel() for p in model.parameters())
    return {"non_embedding_bytes": other, "embedding_rows_bytes": batch * row, "lm_head_bytes": head_b,
            "total_bytes": other + batch * row + head_b, "tied": tied, "unique_parameters": uniq,
            "embedding_table_bytes": emb.numel() * emb.element_size()}


def kv_bytes(cfg, elem, ctx, batch):
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * elem * ctx * batch


# ----------------------------------------------------------------------------------------------------------------
# prefill and the decode variants (all under torch.no_grad(), as generate() runs)

def generate_style_inputs(ids):
    """The 2D attention mask and the position ids generate() builds for an unpadded prompt."""
    am = torch.ones_like(ids)
    pos = am.long().cumsum(-1) - 1
    return am, pos


def dynamic_prefill(model, ids, am, pos):
    """generate()'s first step: a fresh DynamicCache, the whole prompt, logits_to_keep=1; returns (t0, cache)."""
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, attention_mask=am, position_ids=pos, past_key_values=cache, use_cache=True,
                logits_to_keep=1)
    return out.logits[:, -1].argmax(-1), cache


def static_prefill(model, cache, ids):
    """The prompt into a StaticCache (eager, as generate() never compiles the prefill); returns t0."""
    B, P = ids.shape
    pos = torch.arange(P, device=ids.device).unsqueeze(0).expand(B, P)
    out = model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1].argmax(-1)


def run_eager(model, ids, steps, timed, margins=False):
    """Greedy decode with a DynamicCache, step by step as generate() does in eager mode. With margins, also the top-1
    minus top-2 logit of sequence 0 at each token (a small one marks a near tie, where other kernels may choose the
    other token)."""
    B, _ = ids.shape
    am, pos = generate_style_inputs(ids)
    if margins:
        cache = DynamicCache(config=model.config)
        out = model(input_ids=ids, attention_mask=am, position_ids=pos, past_key_values=cache, use_cache=True,
                    logits_to_keep=1)
        tok = out.logits[:, -1].argmax(-1)
        top2 = [out.logits[0, -1].topk(2).values]
        del out
    else:
        tok, cache = dynamic_prefill(model, ids, am, pos)
    toks, ev = [tok], []
    t0 = time.perf_counter()
    for _ in range(steps):
        a, b = event_pair() if timed else (None, None)
        if timed:
            a.record()
        am = torch.cat([am, am.new_ones((B, 1))], dim=-1)
        pos = pos[:, -1:] + 1
        out = model(input_ids=tok[:, None], attention_mask=am, position_ids=pos, past_key_values=cache,
                    use_cache=True, logits_to_keep=1)
        tok = out.logits[:, -1].argmax(-1)
        if timed:
            b.record()
            ev.append((a, b))
        if margins:  # after the step's end event: not timed
            top2.append(out.logits[0, -1].topk(2).values)
        del out
        toks.append(tok)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    seq_len = cache.get_seq_length()
    ms = [x.elapsed_time(y) for x, y in ev]
    if margins:
        m = torch.stack(top2).float()
        return ms, torch.stack(toks, 1), wall, int(seq_len), (m[:, 0] - m[:, 1]).tolist()
    return ms, torch.stack(toks, 1), wall, int(seq_len)


def variant_eager(model, ids, a):
    # warm-up: a whole run, so that every KV length the timed run meets has been met once (the first step at a new
    # length paid ~50 ms in a test on an H100: per-shape setup in the attention path), kept as the cold run
    cold_ms, cold_toks, cold_wall, _ = run_eager(model, ids, a.gen, timed=True)
    # the timed run also keeps sequence 0's top-1 minus top-2 logit at each token (outside the step's events)
    ms, toks, wall, seq_len, margins = run_eager(model, ids, a.gen, timed=True, margins=True)
    c0, t0_ = cold_toks[0].tolist(), toks[0].tolist()
    return {"samples_ms": ms, "tokens": toks, "loop_wall_s": wall,
            "cold_run": {"decode_step": stats(cold_ms), "samples_ms": cold_ms, "loop_wall_s": cold_wall,
                         "same_tokens_as_timed_run": bool(torch.equal(cold_toks, toks)),
                         "first_difference_sequence0": first_difference(c0, t0_)},
            "top2_margin_sequence0": margins,
            "notes": {"timed": "the second of two identical runs (the first, cold, is in cold_run)",
                      "cache": "DynamicCache(config=model.config)", "kv_positions_after": seq_len,
                      "per_step": "attention-mask torch.cat + position ids + forward(logits_to_keep=1) + argmax; "
                                  "the SDPA mask builder checks the 2D mask on the host each step, as in generate()"}}


def variant_generate(model, ids, a):
    B, P = ids.shape
    am = torch.ones_like(ids)
    gc_ = model.generation_config
    pad = gc_.pad_token_id if gc_.pad_token_id is not None else gc_.eos_token_id
    if isinstance(pad, (list, tuple)):
        pad = pad[0] if pad else None
    kw = dict(attention_mask=am, do_sample=False)
    if pad is not None:
        kw["pad_token_id"] = pad  # what generate() falls back to anyway; passed to keep its warning out of the log
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model.generate(ids, max_new_tokens=a.gen, min_new_tokens=a.gen, **kw)  # warm-up (every KV length met once)
    torch.cuda.synchronize()
    cold_ms = (time.perf_counter() - t0) * 1e3
    ea, eb = event_pair()
    t0 = time.perf_counter()
    ea.record()
    out = model.generate(ids, max_new_tokens=a.gen, min_new_tokens=a.gen, **kw)
    eb.record()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    new = out[:, P:]
    return {"total_ms": wall_ms, "total_ms_events": ea.elapsed_time(eb), "cold_total_ms": cold_ms, "tokens": new,
            "new_tokens": int(new.shape[1]),
            "notes": {"settings": f"max_new_tokens={a.gen}, min_new_tokens={a.gen}, do_sample=False, attention_mask "
                                  f"all ones, pad_token_id={pad}; otherwise model.generation_config's defaults",
                      "cache": "generate()'s default (DynamicCache, no compilation)"}}


def variant_static_graph(model, ids, a):
    B, P = ids.shape
    dev = ids.device
    cache = StaticCache(config=model.config, max_cache_len=P + a.gen)
    sid = torch.zeros((B, 1), dtype=torch.long, device=dev)
    spos = torch.zeros((B, 1), dtype=torch.long, device=dev)

    def step():
        out = model(input_ids=sid, position_ids=spos, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits, out.logits[:, -1].argmax(-1)

    tok = static_prefill(model, cache, ids)  # allocates the cache's tensors (before capture)
    warm = min(3, a.gen)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(warm):
            sid.copy_(tok[:, None])
            spos.fill_(P + i)
            _, tok = step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _static_logits, static_next = step()
    torch.cuda.synchronize()
    cache.reset()  # zeroes K/V and each layer's write position in place (the addresses the graph holds)
    tok = static_prefill(model, cache, ids)
    toks, ev = [tok], []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(a.gen):
        sid.copy_(tok[:, None])
        spos.fill_(P + i)
        x, y = event_pair()
        x.record()
        g.replay()
        y.record()
        tok = static_next.clone()
        toks.append(tok)
        ev.append((x, y))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    pos_after = cache_length(cache)
    res = {"samples_ms": [x.elapsed_time(y) for x, y in ev], "tokens": torch.stack(toks, 1), "loop_wall_s": wall,
           "notes": {"cache": f"StaticCache(max_cache_len={P + a.gen})", "warmup_steps": warm,
                     "kv_positions_after": pos_after, "kv_positions_expected": P + a.gen,
                     "cache_advanced_by_graph": pos_after == P + a.gen,
                     "per_step": "replay of forward(logits_to_keep=1) + argmax; next token and position copied into "
                                 "static tensors before it (outside the events)"}}
    return res


def cache_length(cache):
    """The positions the cache holds after a run (None when this transformers version does not say)."""
    try:
        return int(cache.get_seq_length())
    except Exception:
        return None


def compile_counters():
    try:
        from torch._dynamo.utils import counters
        return {k: {str(kk): vv for kk, vv in counters[k].items()}
                for k in ("stats", "inductor", "graph_break", "unimplemented") if k in counters}
    except Exception as e:
        return {"error": str(e)}


def variant_compile(model, ids, a):
    B, P = ids.shape
    dev = ids.device
    cache = StaticCache(config=model.config, max_cache_len=P + a.gen)
    cm = torch.compile(model, mode="reduce-overhead", fullgraph=False)
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

    def step(tok, pos):
        if mark is not None:
            mark()
        out = cm(input_ids=tok[:, None], position_ids=pos, past_key_values=cache, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1].clone()  # out of the CUDA graph's output buffer, which the next run overwrites
        return logits.argmax(-1)

    t0 = time.perf_counter()
    tok = static_prefill(model, cache, ids)
    warm = max(1, min(a.compile_warmup, a.gen))
    for i in range(warm):
        tok = step(tok, torch.full((B, 1), P + i, dtype=torch.long, device=dev))
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    print(f"compile: {warm} warm-up steps (compilation, graph recording) took {compile_s:.1f} s", flush=True)
    cache.reset()
    tok = static_prefill(model, cache, ids)
    pos = [torch.full((B, 1), P + i, dtype=torch.long, device=dev) for i in range(a.gen)]
    toks, ev = [tok], []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(a.gen):
        x, y = event_pair()
        x.record()
        tok = step(tok, pos[i])
        y.record()
        toks.append(tok)
        ev.append((x, y))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    pos_after = cache_length(cache)
    res = {"samples_ms": [x.elapsed_time(y) for x, y in ev], "tokens": torch.stack(toks, 1), "loop_wall_s": wall,
           "compile_s": compile_s,
           "notes": {"cache": f"StaticCache(max_cache_len={P + a.gen})", "warmup_steps": warm,
                     "kv_positions_after": pos_after, "kv_positions_expected": P + a.gen,
                     "per_step": "cudagraph_mark_step_begin + compiled forward(logits_to_keep=1) + logits clone + "
                                 "argmax",
                     "dynamo_counters": compile_counters()}}
    return res


# ----------------------------------------------------------------------------------------------------------------

def first_difference(x, y):
    n = min(len(x), len(y))
    for i in range(n):
        if x[i] != y[i]:
            return i
    return None


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Hugging Face transformers decoders on the GPU, at tprof's preset shapes "
                                             "(prefill, eager / CUDA graph / torch.compile / generate() decode).")
    ap.add_argument("--model", default="llama-3.2-1b", choices=sorted(PRESETS), help="tprof preset shape")
    ap.add_argument("--layers", type=int, default=None, help="override num_hidden_layers")
    ap.add_argument("--vocab", type=int, default=None, help="override vocab_size")
    ap.add_argument("--dtype", default="fp16", choices=sorted(DTYPES))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens P (the prefill)")
    ap.add_argument("--gen", type=int, default=128, help="decode steps G (the KV cache ends holding P + G)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random prompt token ids (weights: always 0)")
    ap.add_argument("--iters", type=int, default=20, help="timed prefill calls")
    ap.add_argument("--warmup-s", type=float, default=1.0, help="seconds of prefill warm-up calls")
    ap.add_argument("--compile-warmup", type=int, default=3, help="compiled decode steps before the timed ones")
    ap.add_argument("--skip", default="", help="comma list of parts to leave out: prefill," + ",".join(VARIANTS))
    ap.add_argument("--json", default=None, help="write every number to this file")
    a = ap.parse_args(argv)
    for name in ("batch", "prompt", "gen", "iters", "compile_warmup"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.layers is not None and a.layers < 1:
        ap.error("--layers must be >= 1")
    if a.vocab is not None and a.vocab < 16:
        ap.error("--vocab must be >= 16")
    if a.warmup_s < 0:
        ap.error("--warmup-s must be >= 0")
    a.skip_set = set(filter(None, (s.strip() for s in a.skip.split(","))))
    bad = a.skip_set - set(VARIANTS) - {"prefill"}
    if bad:
        ap.error(f"--skip: unknown {sorted(bad)}; choose from prefill," + ",".join(VARIANTS))
    return a


def write_json(path, out):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1, default=str)
    print(f"wrote {path}")


def main():
    a = parse_args()
    out = {"tool": TOOL, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "command": shlex.join(sys.argv), "argv": sys.argv, "python_executable": sys.executable,
           "args": {k: v for k, v in vars(a).items() if k != "skip_set"}}

    def fatal(msg):
        print(f"error: {msg}", file=sys.stderr, flush=True)
        out["fatal"] = msg
        if a.json:
            write_json(a.json, out)
        return 1

    if _IMPORT_ERROR is not None:
        return fatal(f"cannot import torch/transformers: {type(_IMPORT_ERROR).__name__}: {_IMPORT_ERROR}")
    if not torch.cuda.is_available():
        return fatal("no CUDA device visible to torch")

    dev = torch.device("cuda")
    dtype = getattr(torch, DTYPES[a.dtype])
    B, P, G = a.batch, a.prompt, a.gen
    facts = gpu_facts()
    out.update(facts)
    print(f"GPU {facts['gpu']} (driver {facts['driver']}, {facts['sms']} SMs, {facts['memory_gib']:.0f} GiB); "
          f"torch {facts['torch']} (CUDA {facts['torch_cuda']}); transformers {facts['transformers']}", flush=True)

    # the copy rate first, on an empty GPU
    try:
        cr = copy_rate(dev)
        print(f"device-to-device copy: {cr['gbps']:.0f} GB/s (read + write, 1 GiB, median of 20)", flush=True)
    except Exception as e:
        cr = {"error": f"{type(e).__name__}: {e}"}
        print(f"copy-rate measurement failed: {cr['error']}", flush=True)
    out["copy_rate"] = cr

    try:
        cfg = make_config(a)
        t0 = time.perf_counter()
        model, init_note = build_model(cfg, dtype, dev)
        build_s = time.perf_counter() - t0
    except Exception as e:
        traceback.print_exc()
        return fatal(f"cannot build the model: {type(e).__name__}: {e}")
    attn = getattr(model.config, "_attn_implementation", None)
    if P + G > cfg.max_position_embeddings:
        print(f"note: prompt + gen = {P + G} exceeds max_position_embeddings {cfg.max_position_embeddings}",
              flush=True)
    elem = torch.empty((), dtype=dtype).element_size()
    wb = weight_bytes(model, B)
    ctx = P + G / 2.0
    kvb = kv_bytes(cfg, elem, ctx, B)
    floor = None
    if "gbps" in cr:
        floor = {"weight_bytes": wb["total_bytes"], "kv_bytes": kvb, "kv_context": ctx,
                 "bytes": wb["total_bytes"] + kvb, "copy_gbps": cr["gbps"],
                 "floor_ms": (wb["total_bytes"] + kvb) / (cr["gbps"] * 1e9) * 1e3,
                 "kv_bytes_full_static_cache": kv_bytes(cfg, elem, P + G, B)}
    shapes = {"model": a.model, "hidden": cfg.hidden_size, "intermediate": cfg.intermediate_size,
              "layers": cfg.num_hidden_layers, "heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads,
              "head_dim": cfg.head_dim, "vocab": cfg.vocab_size, "tied": wb["tied"], "dtype": a.dtype, "batch": B,
              "prompt": P, "gen": G}
    out.update({"shapes": shapes, "model_config": cfg.to_dict(), "attn_implementation": attn, "init": init_note,
                "build_s": build_s, "weights": wb, "decode_floor": floor})
    print(f"model {a.model}: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, {cfg.num_attention_heads} "
          f"heads / {cfg.num_key_value_heads} KV, head dim {cfg.head_dim}, vocab {cfg.vocab_size}, "
          f"{'tied' if wb['tied'] else 'untied'}; {wb['unique_parameters'] / 1e9:.3f} B parameters, {a.dtype}, "
          f"attention {attn}; built in {build_s:.1f} s ({init_note})", flush=True)
    if floor:
        print(f"decode floor: {floor['weight_bytes'] / 1e9:.3f} GB weights + {kvb / 1e9:.4f} GB KV at context "
              f"{ctx:g} = {floor['floor_ms']:.4f} ms per step at {cr['gbps']:.0f} GB/s", flush=True)

    gen = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(0, cfg.vocab_size, (B, P), generator=gen).to(dev)
    out["prompt_ids_sequence0_first16"] = ids[0, :16].tolist()

    # prefill
    pre = None
    if "prefill" not in a.skip_set:
        try:
            torch.cuda.reset_peak_memory_stats()
            with torch.no_grad():
                am, pos = generate_style_inputs(ids)
                ms, nwarm = time_cuda(lambda: dynamic_prefill(model, ids, am, pos)[0], a.warmup_s, a.iters)
            st = stats(ms)
            pre = {"ok": True, "ttft_ms": st["median_ms"], "stats": st, "samples_ms": ms, "warmup_calls": nwarm,
                   "tests": [{"test": f"pp{P}", "n_tokens": B * P, "tokens_per_s": B * P / (st["median_ms"] * 1e-3)}],
                   "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
                   "cache": "a fresh DynamicCache(config=model.config) per call (generate()'s first step); all-ones "
                            "attention mask, position ids 0..P-1, logits_to_keep=1, argmax"}
            print(f"prefill P={P} B={B}: median {st['median_ms']:.3f} ms (p10 {st['p10_ms']:.3f}, p90 "
                  f"{st['p90_ms']:.3f}) = TTFT; {pre['tests'][0]['tokens_per_s']:.0f} prompt tokens/s", flush=True)
        except Exception as e:
            pre = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            print(f"prefill FAILED: {pre['error']}", flush=True)
        free_cuda()
    out["prefill"] = pre

    fns = {"eager": variant_eager, "generate": variant_generate, "static_cuda_graph": variant_static_graph,
           "compile": variant_compile}
    res = {}
    eager_tokens, eager_margins = None, []
    for name in VARIANTS:
        if name in a.skip_set:
            continue
        print(f"--- {name}", flush=True)
        r = {"ok": False}
        try:
            torch.cuda.reset_peak_memory_stats()
            with torch.no_grad():
                raw = fns[name](model, ids, a)
            toks = raw.pop("tokens")
            seq0 = toks[0].tolist()
            r.update(raw)
            r.update({"ok": True, "tokens_sequence0": seq0[:16], "tokens_sequence0_all": seq0,
                      "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30})
            if name == "generate":
                total = r["total_ms"]
                r["ms_per_token_e2e"] = total / G
                r["tokens_per_s"] = B * G / (total * 1e-3)
                r["tests"] = [{"test": f"pp{P}+tg{G}", "n_tokens": B * G, "tokens_per_s": r["tokens_per_s"]}]
                r["step_ms"] = r["ms_per_token_e2e"]
                if pre and pre.get("ok") and G > 1:
                    r["decode_ms_per_step_est"] = (total - pre["ttft_ms"]) / (G - 1)
                msg = (f"generate: {total:.1f} ms end to end for {r['new_tokens']} tokens x {B} "
                       f"({r['ms_per_token_e2e']:.3f} ms per token incl. prefill, {r['tokens_per_s']:.1f} tokens/s)")
            else:
                st = stats(r["samples_ms"])
                r["decode_step"] = st
                r["step_ms"] = st["median_ms"]
                r["tokens_per_s"] = B / (st["median_ms"] * 1e-3)
                r["tests"] = [{"test": f"tg{G}", "n_tokens": B * G, "tokens_per_s": r["tokens_per_s"]}]
                msg = (f"{name}: median {st['median_ms']:.3f} ms per step (p99 {st['p99_ms']:.3f}), "
                       f"{r['tokens_per_s']:.1f} tokens/s")
            if floor:
                r["decode_roofline"] = {"floor_ms": floor["floor_ms"],
                                        "median_over_floor": r["step_ms"] / floor["floor_ms"]}
                msg += f", {r['decode_roofline']['median_over_floor']:.2f}x floor"
            if name == "eager":
                eager_tokens, eager_margins = seq0, r.get("top2_margin_sequence0") or []
            elif eager_tokens is not None:
                d = first_difference(seq0, eager_tokens)
                r["first_difference_vs_eager"] = d
                r["compared_tokens"] = min(len(seq0), len(eager_tokens))
                if d is None:
                    msg += f"; greedy tokens = eager's (all {r['compared_tokens']})"
                else:
                    msg += f"; greedy tokens differ from eager's at t{d}"
                    if d < len(eager_margins):
                        r["eager_top2_margin_at_first_difference"] = eager_margins[d]
                        msg += f" (eager's top-1 - top-2 logit there: {eager_margins[d]:.4g})"
            print(msg, flush=True)
            print(f"  tokens seq 0: {seq0[:16]}", flush=True)
        except Exception as e:
            r = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            print(f"{name} FAILED: {r['error']}", flush=True)
            sys.stderr.write(r["traceback"])
        res[name] = r
        try:
            free_cuda()
        except Exception:
            pass
    out["results"] = res

    # the table
    print(f"\n{'variant':22s} {'ms/step':>9s} {'p99 ms':>9s} {'tokens/s':>10s} {'x floor':>8s}  "
          "greedy tokens vs eager's")
    if pre and pre.get("ok"):
        print(f"{'prefill (TTFT)':22s} {pre['ttft_ms']:9.3f} {pre['stats']['p99_ms']:9.3f} "
              f"{pre['tests'][0]['tokens_per_s']:10.0f} {'-':>8s}  (prompt tokens/s)")
    for name in VARIANTS:
        if name not in res:
            continue
        r = res[name]
        label = "generate (e2e / G)" if name == "generate" else name
        if not r.get("ok"):
            print(f"{label:22s} FAILED: {r['error'][:200]}")
            continue
        p99 = r.get("decode_step", {}).get("p99_ms")
        xf = r.get("decode_roofline", {}).get("median_over_floor")
        if name == "eager":
            cmp_ = "(reference)"
        elif "first_difference_vs_eager" in r:
            d = r["first_difference_vs_eager"]
            cmp_ = f"same ({r['compared_tokens']})" if d is None else f"differ from t{d}"
            if "eager_top2_margin_at_first_difference" in r:
                cmp_ += f" (margin {r['eager_top2_margin_at_first_difference']:.3g})"
        else:
            cmp_ = "-"
        print(f"{label:22s} {r['step_ms']:9.3f} " + (f"{p99:9.3f}" if p99 is not None else f"{'-':>9s}")
              + f" {r['tokens_per_s']:10.1f} " + (f"{xf:7.2f}x" if xf is not None else f"{'-':>8s}") + f"  {cmp_}")
    if floor:
        print(f"(floor {floor['floor_ms']:.4f} ms: {floor['bytes'] / 1e9:.3f} GB (weights read per step + KV at "
              f"context P + G/2 = {ctx:g}) / {floor['copy_gbps']:.0f} GB/s measured copy rate; generate's row is its "
              f"end-to-end time per token, prefill included)")
    else:
        print("(no floor: the copy-rate measurement failed)")

    if a.json:
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
