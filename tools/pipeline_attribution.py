#!/usr/bin/env python3
"""The attribution of a pipeline's speed-up to one change at a time, from tprof bench JSON reports.

Each configuration is a report (tprof bench --json) and one precision in it; the first is the starting point and
every later one changes one thing (precision, graph, fusion) from the one before. For each step the table gives
the median GPU time, the time saved and that saving's share of the whole (start minus end). The order of the
steps is the attribution's: interactions between changes are charged to the later step.

  python3 tools/pipeline_attribution.py start=modular_nofuse.json:bf16 precision=modular_nofuse.json:fp8 \
      graph=graph_nofuse.json:fp8 fusion=graph.json:fp8

Prints a Markdown table; --json FILE also writes it as JSON. Errors (a missing file, precision or field) name it
and exit 1.
"""
import argparse
import json
import sys


def median_of(path, prec):
    try:
        with open(path) as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"pipeline_attribution: {path}: {e}")
    for r in rep.get("results", []):
        if r.get("precision") == prec:
            try:
                return float(r["latency"]["median_ms"]), rep.get("config", {})
            except (KeyError, TypeError, ValueError):
                sys.exit(f"pipeline_attribution: {path}: {prec}: no latency.median_ms")
    sys.exit(f"pipeline_attribution: {path}: no result for precision '{prec}'")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("steps", nargs="+", help="NAME=REPORT.json:PRECISION, the first the starting point")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = []
    for s in a.steps:
        name, eq, rest = s.partition("=")
        path, colon, prec = rest.rpartition(":")
        if not eq or not colon or not name or not path or not prec:
            sys.exit(f"pipeline_attribution: '{s}': expected NAME=REPORT.json:PRECISION")
        ms, cfg = median_of(path, prec)
        rows.append({"step": name, "report": path, "precision": prec, "pipeline": cfg.get("pipeline"),
                     "fusion": cfg.get("fusion"), "median_ms": ms})
    if len(rows) < 2:
        sys.exit("pipeline_attribution: a start and at least one step are needed")
    total = rows[0]["median_ms"] - rows[-1]["median_ms"]
    print("| step | configuration | median ms | Hz | saved ms | share of the total |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(rows):
        saved = rows[i - 1]["median_ms"] - r["median_ms"] if i else None
        r["saved_ms"] = saved
        r["share"] = saved / total if saved is not None and total != 0 else None
        conf = f"{r['precision']}, {r['pipeline'] or 'graph'}, fusion {r['fusion'] or 'on'}"
        print(f"| {r['step']} | {conf} | {r['median_ms']:.4f} | {1000.0 / r['median_ms']:.1f} | "
              + ("-" if saved is None else f"{saved:.4f}") + " | "
              + ("-" if r["share"] is None else f"{100.0 * r['share']:.1f} %") + " |")
    print(f"(total saved {total:.4f} ms: {rows[0]['median_ms']:.4f} -> {rows[-1]['median_ms']:.4f} ms, "
          f"{rows[0]['median_ms'] / rows[-1]['median_ms']:.3f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"total_saved_ms": total, "steps": rows}, f, indent=1)


if __name__ == "__main__":
    main()
