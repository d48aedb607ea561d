#!/usr/bin/env python3
"""Makes tests/fixtures/diff/ for test_diff and tests/cli/diff.sh (issue 44: `tprof diff`).

From two real H200 runs committed under bench/results/ (`tprof compare --model vit-b16 --batch 64 --precision
fp16,bf16,fp8`, at 1377010 before and ce687c2 after cuDNN attention), trimmed to what `tprof diff` reads:
  vit_b16_b64_before.json, vit_b16_b64_after.json: the bench JSON of each run with fp16 and fp8 only; every
      timing sample kept; each result's plan and profile kept, the profile's per-iteration list, categories and
      kernel tables kept, each layer's fields kept.
  vit_b16_b64_slower.json: a doctored copy of the "after" run, every fp16 sample multiplied by 1.05 and fp8 left
      as it is, marked as doctored in its command field: the regression gate's test input (fp16 5 % slower).
And tests/fuzz/seeds/diff_run/: small slices of real runs for the diff reader's fuzz harness (a bench JSON of
ViT-B/16 with a profile, one of a decoder (Llama-3.2-1B, pp/tg), a profile summary and a compare report), each cut
to a few samples, layers and kernels so an execution stays fast.
Usage: python3 tools/make_diff_fixtures.py   (from the repository root; no arguments)
"""
import copy
import json
import os

SRC = "bench/results"
OUT = "tests/fixtures/diff"
RUNS = {
    "before": "2026-11-21_h200_compare_vit-b16_b64/bench.json",
    "after": "2026-11-21_h200_compare_vit-b16_b64_attention/bench.json",
}
KEEP_PRECISIONS = ("fp16", "fp8")
PROFILE_KEYS = ("model", "precision", "batch", "gpu", "iterations", "traced_ms_per_iter", "event_median_ms",
                "per_iteration", "kernels", "layers")


def trim(run):
    out = {k: run[k] for k in ("tool", "commit", "commit_dirty", "date", "command", "config", "system")}
    out["model"] = {"name": run["model"]["name"]}
    out["results"] = []
    for r in run["results"]:
        if r["precision"] not in KEEP_PRECISIONS:
            continue
        t = {k: r[k] for k in ("precision", "latency", "samples_ms", "plan")}
        t["profile"] = {k: r["profile"][k] for k in PROFILE_KEYS if k in r["profile"]}
        out["results"].append(t)
    return out


def write(name, obj):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print(path, os.path.getsize(path), "bytes")


def main():
    os.makedirs(OUT, exist_ok=True)
    trimmed = {}
    for key, rel in RUNS.items():
        with open(os.path.join(SRC, rel)) as f:
            trimmed[key] = trim(json.load(f))
        write(f"vit_b16_b64_{key}.json", trimmed[key])
    slow = copy.deepcopy(trimmed["after"])
    slow["command"] = "DOCTORED by tools/make_diff_fixtures.py: fp16 samples x 1.05 of " + slow["command"]
    for r in slow["results"]:
        if r["precision"] == "fp16":
            r["samples_ms"] = [s * 1.05 for s in r["samples_ms"]]
            r["latency"] = {k: (v * 1.05 if k.endswith("_ms") else v) for k, v in r["latency"].items()}
    write("vit_b16_b64_slower.json", slow)
    seeds(trimmed["after"])


def cut_profile(p, n=4):
    p = dict(p)
    for k in ("layers", "kernels", "per_iteration", "stages", "categories"):
        if k in p:
            p[k] = p[k][:n]
    return p


def seeds(after):
    out = "tests/fuzz/seeds/diff_run"
    os.makedirs(out, exist_ok=True)
    vit = copy.deepcopy(after)
    vit["results"] = vit["results"][:1]
    r = vit["results"][0]
    r["samples_ms"] = r["samples_ms"][:5]
    r["plan"] = r["plan"][:3]
    r["profile"] = cut_profile(r["profile"])
    with open(os.path.join(SRC, "2026-11-26_h200_decoder_llama32_1b_b1.json")) as f:
        dec = json.load(f)
    dec = {k: dec[k] for k in ("tool", "commit", "commit_dirty", "date", "command", "model", "config", "system",
                               "results")}
    dec["results"] = dec["results"][:1]
    r = dec["results"][0]
    r = {k: r[k] for k in ("precision", "latency", "roofline", "samples_ms", "llm")}
    r["samples_ms"] = r["samples_ms"][:4]
    r["llm"] = {k: r["llm"][k] for k in ("decode_step", "decode_step_samples_ms", "decode_roofline", "tests")}
    r["llm"]["decode_step_samples_ms"] = r["llm"]["decode_step_samples_ms"][:4]
    dec["results"] = [r]
    with open(os.path.join(SRC, "2026-11-21_h200_profile_vit-b16_b64/fp16.profile.json")) as f:
        prof = cut_profile(json.load(f))
    with open(os.path.join(SRC, "2026-11-21_h200_compare_vit-b16_b64_attention/report.json")) as f:
        cmp_ = json.load(f)
    cmp_ = {"format": cmp_["format"], "tool": cmp_["tool"], "model": cmp_["model"], "batch": cmp_["batch"],
            "configuration": cmp_["configuration"], "summary": cmp_["summary"][:2],
            "roofline": cmp_.get("roofline", [])[:2], "profiles": [cut_profile(p) for p in cmp_["profiles"][:2]]}
    for name, obj in (("bench_vit.json", vit), ("bench_decoder.json", dec), ("profile.json", prof),
                      ("compare.json", cmp_)):
        path = os.path.join(out, name)
        with open(path, "w") as f:
            json.dump(obj, f, separators=(",", ":"))
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
