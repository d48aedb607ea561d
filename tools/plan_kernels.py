#!/usr/bin/env python3
"""The kernel each op of a `tprof bench --plan --json` run chose, compared between runs, pair by pair.

    python3 tools/plan_kernels.py A.json B.json [C.json ...]

The chosen kernel is read from each op's "implementation": for attention the implementation before its timings
("wgmma", "cudnn", "flash", "classic"), for GEMMs the kernel named before "(by time ...)", cuBLASLt by its
algorithm number. Timings are dropped: two runs that chose the same kernels compare equal. Every pair of files is
compared per precision; the first pair is usually two runs of one configuration (the noise of build-time choices
between near-equal candidates), the others the configurations to compare."""
import itertools
import json
import re
import sys


def chosen(impl):
    impl = impl or ""
    m = re.match(r"^(wgmma|cudnn|flash|classic)[^:]*:", impl)
    if m:
        return m.group(1)
    impl = re.sub(r"\(by time.*", "", impl)
    impl = re.sub(r"cuBLASLt algorithm (\d+) of \d+ by time.*", r"cuBLASLt algorithm \1", impl)
    return re.sub(r"[0-9.]+ us", "", impl).strip()


def plan(path):
    j = json.load(open(path))
    return {r["precision"]: [(p.get("layer", ""), chosen(p.get("implementation"))) for p in r["plan"]]
            for r in j["results"]}


def main():
    files = sys.argv[1:]
    plans = {f: plan(f) for f in files}
    for a, b in itertools.combinations(files, 2):
        for prec, pa in plans[a].items():
            pb = plans[b].get(prec)
            if pb is None:
                continue
            diff = [(la, x, y) for (la, x), (_, y) in zip(pa, pb) if x != y]
            print("%s vs %s %s: %d ops, %d with another kernel%s" % (
                a.split("/")[-1], b.split("/")[-1], prec, len(pa), len(diff),
                "" if not diff else ": " + "; ".join("%s %s / %s" % (l, x[:40], y[:40]) for l, x, y in diff[:4])))


if __name__ == "__main__":
    main()
