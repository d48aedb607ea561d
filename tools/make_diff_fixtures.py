#!/usr/bin/env python3
"""Makes tests/fixtures/diff/ for test_diff and tests/cli/diff.sh (issue 44: `tprof diff`).

From two real H200 runs committed under bench/results/ (`tprof compare --model vit-b16 --batch 64 --precision
fp16,bf16,fp8`, at 1377010 before and ce687c2 after cuDNN attention), trimmed to what `tprof diff` reads:
  vit_b16_b64_before.json, vit_b16_b64_after.json: the bench JSON of each run with fp16 and fp8 only; every
      timing sample kept; each result's plan and profile kept, the profile's per-iteration list, categories and
      kernel tables kept, each layer's fields kept.
  vit_b16_b64_slower.json: a doctored copy of the "after" run, every fp16 sample multiplied by 1.05 and fp8 left
      as it is, marked as doctored in its command field: the regression gate's test input (fp16 5 % slower).
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


if __name__ == "__main__":
    main()
