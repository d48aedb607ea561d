#!/usr/bin/env python3
"""Turns a kernel lab's printed table (bench/*_lab.c: a header line, then one line per way with "median X us  min Y
max Z  T TFLOP/s ...") into the JSON record bench/results/ keeps: GPU, driver, CUDA, commit, date, the exact command
and every number of every line.

usage: lab_to_json.py LOG COMMIT "COMMAND" > out.json   (run on the GPU machine, where nvidia-smi is)
"""
import datetime
import json
import re
import subprocess
import sys

LINE = re.compile(r"^(?P<name>.+?)\s+median\s+(?P<median>[\d.]+) us\s+min\s+(?P<min>[\d.]+)\s+max\s+(?P<max>[\d.]+)"
                  r"\s+(?P<tflops>[\d.]+) TFLOP/s(?P<rest>.*)$")


def smi(field):
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                             text=True, check=True).stdout
        return out.strip().splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return None


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    log, commit, command = sys.argv[1:]
    with open(log, encoding="utf-8") as f:
        lines = f.read().splitlines()
    ways = []
    for ln in lines:
        m = LINE.match(ln)
        if not m:
            continue
        w = {"name": m["name"].strip(), "median_us": float(m["median"]), "min_us": float(m["min"]),
             "max_us": float(m["max"]), "tflops": float(m["tflops"])}
        rel = re.search(r"rel L2 vs \S+ ([\d.e+-]+)", m["rest"])
        if rel:
            w["rel_l2_vs_baseline"] = float(rel[1])
        r64 = re.search(r"vs fp64 ([\d.e+-]+)", m["rest"])
        if r64:
            w["rel_l2_vs_fp64"] = float(r64[1])
        nf = re.search(r"non-finite (\d+)", m["rest"])
        if nf:
            w["non_finite"] = int(nf[1])
        algo = re.search(r"\(algo (\d+) of (\d+)\)", m["rest"])
        if algo:
            w["cublaslt_algo"], w["cublaslt_candidates"] = int(algo[1]), int(algo[2])
        ways.append(w)
    if not ways:
        sys.exit(f"{log}: no result lines")
    json.dump({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "commit": commit, "command": command, "gpu": smi("name"), "driver": smi("driver_version"),
               "cuda_runtime_note": "CUDA 13.0 toolkit build (the binaries' runtime)", "header": lines[0] if lines else "",
               "ways": ways}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
